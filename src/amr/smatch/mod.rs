//! Smatch: the best triple overlap between two AMR graphs over all variable mappings.
//!
//! Triples and weights follow the reference implementation (pip `smatch` 1.0.4) exactly, so the
//! triple totals and the score of any mapping agree with it (see [`SmatchGraph`]). Where the
//! reference only hill-climbs, and so reports a lower bound, this module searches for the
//! optimum: a seeded iterated local search finds a strong mapping, then branch and bound proves
//! it optimal or improves it, within a node budget ([`SmatchOptions::node_budget`]).
//! [`SmatchScore::optimal`] says whether the optimum was proven.
//!
//! ```
//! use capflow::amr::{Graph, Triple};
//! use capflow::amr::smatch::{smatch, SmatchOptions};
//!
//! let dog = Graph {
//!     top: "d".into(),
//!     triples: vec![Triple::new("d", ":instance", "dog")],
//!     ..Graph::default()
//! };
//! let score = smatch(&dog, &dog, &SmatchOptions::default());
//! assert_eq!((score.matched, score.test_total, score.gold_total), (2, 2, 2));
//! assert_eq!(score.f1(), 1.0);
//! assert!(score.optimal);
//! ```

mod problem;
mod search;
mod triples;

use std::cell::RefCell;

use crate::amr::Graph;

pub use triples::SmatchGraph;

use problem::Problem;
use search::{Effort, SearchState};

/// How hard to search. The result is a deterministic function of the two graphs and these
/// options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SmatchOptions {
    /// Seed of the local search's random starts and perturbations.
    pub seed: u64,
    /// Random starts after the concept-match start.
    pub restarts: usize,
    /// Perturb-and-reclimb rounds without improvement after which the first start ends; each
    /// random restart ends after half as many.
    pub perturbation_rounds: usize,
    /// Moves without gain allowed per climb, to cross plateaus.
    pub sideways_moves: usize,
    /// Branch-and-bound nodes allowed for proving optimality; 0 skips the proof.
    pub node_budget: u64,
}

impl Default for SmatchOptions {
    fn default() -> Self {
        SmatchOptions {
            seed: 0,
            restarts: 2,
            perturbation_rounds: 128,
            sideways_moves: 5,
            node_budget: 200,
        }
    }
}

/// A Smatch result: matched triples and both triple totals.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SmatchScore {
    pub matched: usize,
    /// Triples of the test graph (smatch's "AMR 1").
    pub test_total: usize,
    /// Triples of the gold graph (smatch's "AMR 2").
    pub gold_total: usize,
    /// `true` when `matched` is proven to be the maximum over all mappings.
    pub optimal: bool,
}

impl SmatchScore {
    /// `(precision, recall, f1)` exactly as smatch's `compute_f`: all zero when either graph
    /// has no triples, F zero when nothing matched.
    pub fn prf(&self) -> (f64, f64, f64) {
        compute_f(self.matched, self.test_total, self.gold_total)
    }

    pub fn precision(&self) -> f64 {
        self.prf().0
    }

    pub fn recall(&self) -> f64 {
        self.prf().1
    }

    pub fn f1(&self) -> f64 {
        self.prf().2
    }
}

/// smatch's `compute_f`, with the same operation order so the floats agree bit for bit.
pub fn compute_f(matched: usize, test_total: usize, gold_total: usize) -> (f64, f64, f64) {
    if test_total == 0 || gold_total == 0 {
        return (0.0, 0.0, 0.0);
    }
    let precision = matched as f64 / test_total as f64;
    let recall = matched as f64 / gold_total as f64;
    if precision + recall != 0.0 {
        (
            precision,
            recall,
            2.0 * precision * recall / (precision + recall),
        )
    } else {
        (precision, recall, 0.0)
    }
}

thread_local! {
    /// Buffers reused across calls, so scoring millions of small pairs does not allocate.
    static WORKSPACE: RefCell<(Problem, SearchState)> = RefCell::default();
}

/// Smatch of `test` against `gold`.
pub fn smatch(test: &Graph, gold: &Graph, options: &SmatchOptions) -> SmatchScore {
    smatch_prepared(&SmatchGraph::new(test), &SmatchGraph::new(gold), options)
}

/// Smatch of two graphs already turned into smatch's triples.
pub fn smatch_prepared(
    test: &SmatchGraph,
    gold: &SmatchGraph,
    options: &SmatchOptions,
) -> SmatchScore {
    let effort = Effort {
        seed: options.seed,
        restarts: options.restarts,
        perturbation_rounds: options.perturbation_rounds,
        sideways: options.sideways_moves,
        node_budget: options.node_budget,
    };
    let (matched, optimal) = WORKSPACE.with(|workspace| {
        let mut workspace = workspace.borrow_mut();
        let (problem, state) = &mut *workspace;
        problem.build(test, gold);
        search::best_match(problem, state, effort)
    });
    SmatchScore {
        matched: usize::try_from(matched).unwrap_or(0),
        test_total: test.triple_count(),
        gold_total: gold.triple_count(),
        optimal,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::amr::Triple;
    use crate::seed::SplitMix64;

    /// Matched triples of one mapping, counted straight from the triple lists the way smatch's
    /// `compute_pool` pairs them (every pair of equal triples counts), independent of the
    /// weight tables the search uses.
    fn count_matches(test: &SmatchGraph, gold: &SmatchGraph, mapping: &[Option<u16>]) -> usize {
        let maps = |i: u16, j: u16| mapping[usize::from(i)] == Some(j);
        let mut matched = 0;
        for (i, c1) in test.concepts.iter().enumerate() {
            for (j, c2) in gold.concepts.iter().enumerate() {
                matched += usize::from(c1.same(c2) && maps(i as u16, j as u16));
            }
        }
        for a1 in &test.attributes {
            for a2 in &gold.attributes {
                matched += usize::from(
                    a1.name.same(&a2.name) && a1.value.same(&a2.value) && maps(a1.node, a2.node),
                );
            }
        }
        for r1 in &test.relations {
            for r2 in &gold.relations {
                matched += usize::from(
                    r1.name.same(&r2.name)
                        && maps(r1.source, r2.source)
                        && maps(r1.target, r2.target),
                );
            }
        }
        matched
    }

    /// The optimum by enumerating every partial injective mapping.
    fn brute_force(test: &SmatchGraph, gold: &SmatchGraph) -> usize {
        fn go(
            i: usize,
            mapping: &mut Vec<Option<u16>>,
            used: &mut Vec<bool>,
            test: &SmatchGraph,
            gold: &SmatchGraph,
        ) -> usize {
            if i == test.node_count() {
                return count_matches(test, gold, mapping);
            }
            let mut best = go(i + 1, mapping, used, test, gold);
            for j in 0..gold.node_count() {
                if !used[j] {
                    used[j] = true;
                    mapping[i] = Some(j as u16);
                    best = best.max(go(i + 1, mapping, used, test, gold));
                    mapping[i] = None;
                    used[j] = false;
                }
            }
            best
        }
        let mut mapping = vec![None; test.node_count()];
        let mut used = vec![false; gold.node_count()];
        go(0, &mut mapping, &mut used, test, gold)
    }

    /// A random graph over a small vocabulary, so that labels collide often, with duplicate
    /// triples, loops, reentrancies and constants.
    fn random_graph(rng: &mut SplitMix64, nodes: usize) -> Graph {
        const CONCEPTS: [&str; 4] = ["dog", "cat", "and", "Run-01"];
        const ROLES: [&str; 5] = [":ARG0", ":ARG1", ":mod", ":op1", ":consist"];
        const CONSTANTS: [&str; 3] = ["-", "\"Rex\"", "rex"];
        let var = |i: usize| format!("v{i}");
        let mut triples = Vec::new();
        for i in 0..nodes {
            triples.push(Triple::new(var(i), ":instance", CONCEPTS[rng.below(4)]));
        }
        for _ in 0..rng.below(2 * nodes + 1) {
            let s = var(rng.below(nodes));
            let role = ROLES[rng.below(5)];
            if rng.below(4) == 0 {
                triples.push(Triple::new(s, ":polarity", CONSTANTS[rng.below(3)]));
            } else {
                triples.push(Triple::new(s, role, var(rng.below(nodes))));
            }
        }
        Graph {
            top: var(0),
            triples,
            ..Graph::default()
        }
    }

    #[test]
    fn optimum_agrees_with_enumeration() {
        let mut rng = SplitMix64::new(7);
        for case in 0..300 {
            let (n1, n2) = (1 + rng.below(6), 1 + rng.below(6));
            let test = SmatchGraph::new(&random_graph(&mut rng, n1));
            let gold = SmatchGraph::new(&random_graph(&mut rng, n2));
            let expected = brute_force(&test, &gold);
            // No local search at all: the branch and bound alone must reach the optimum.
            let bare = SmatchOptions {
                restarts: 0,
                perturbation_rounds: 0,
                ..SmatchOptions::default()
            };
            for options in [SmatchOptions::default(), bare] {
                let score = smatch_prepared(&test, &gold, &options);
                assert_eq!(score.matched, expected, "case {case}: {test:?} vs {gold:?}");
                assert!(score.optimal, "case {case}");
            }
        }
    }

    #[test]
    fn local_search_alone_never_overstates() {
        let mut rng = SplitMix64::new(11);
        for _ in 0..200 {
            let (n1, n2) = (1 + rng.below(6), 1 + rng.below(6));
            let test = SmatchGraph::new(&random_graph(&mut rng, n1));
            let gold = SmatchGraph::new(&random_graph(&mut rng, n2));
            let options = SmatchOptions {
                node_budget: 0,
                ..SmatchOptions::default()
            };
            let score = smatch_prepared(&test, &gold, &options);
            assert!(score.matched <= brute_force(&test, &gold));
        }
    }

    fn gilmore_lawler(test: &SmatchGraph, gold: &SmatchGraph) -> usize {
        let mut problem = super::problem::Problem::default();
        let mut state = super::search::SearchState::default();
        problem.build(test, gold);
        usize::try_from(super::search::gilmore_lawler_bound(&problem, &mut state)).unwrap_or(0)
    }

    #[test]
    fn gilmore_lawler_bound_never_undercuts_the_optimum() {
        let mut rng = SplitMix64::new(13);
        let mut strictly_above = 0;
        for case in 0..300 {
            let (n1, n2) = (1 + rng.below(6), 1 + rng.below(6));
            let test = SmatchGraph::new(&random_graph(&mut rng, n1));
            let gold = SmatchGraph::new(&random_graph(&mut rng, n2));
            let optimum = brute_force(&test, &gold);
            let bound = gilmore_lawler(&test, &gold);
            assert!(bound >= optimum, "case {case}: {bound} < {optimum}");
            strictly_above += usize::from(bound > optimum);
        }
        // A bound equal to the optimum everywhere would mean the test graphs are too easy.
        assert!(strictly_above > 0);
    }

    #[test]
    fn gilmore_lawler_bound_respects_injectivity() {
        // Three test dogs, one relation; the gold graph is a single dog, no relation. Each test
        // dog alone could earn its concept (the top one also TOP): 2 + 1 + 1 per node. Only one
        // can take the gold dog and no relation can match, so the bound is the optimum, 2.
        let test = Graph {
            top: "a".into(),
            triples: vec![
                Triple::new("a", ":instance", "dog"),
                Triple::new("b", ":instance", "dog"),
                Triple::new("c", ":instance", "dog"),
                Triple::new("a", ":ARG0", "b"),
            ],
            ..Graph::default()
        };
        let gold = Graph {
            top: "x".into(),
            triples: vec![Triple::new("x", ":instance", "dog")],
            ..Graph::default()
        };
        let (test, gold) = (SmatchGraph::new(&test), SmatchGraph::new(&gold));
        assert_eq!(gilmore_lawler(&test, &gold), 2);
    }

    #[test]
    fn hand_computed_example() {
        // "the boy wants to go" against "the boy wants the football", counted by hand.
        let a = Graph {
            top: "a".into(),
            triples: vec![
                Triple::new("a", ":instance", "want-01"),
                Triple::new("a", ":ARG0", "b"),
                Triple::new("b", ":instance", "boy"),
                Triple::new("a", ":ARG1", "c"),
                Triple::new("c", ":instance", "go-01"),
                Triple::new("c", ":ARG0", "b"),
            ],
            ..Graph::default()
        };
        let b = Graph {
            top: "x".into(),
            triples: vec![
                Triple::new("x", ":instance", "want-01"),
                Triple::new("x", ":ARG0", "y"),
                Triple::new("y", ":instance", "boy"),
                Triple::new("x", ":ARG1", "z"),
                Triple::new("z", ":instance", "football"),
            ],
            ..Graph::default()
        };
        let score = smatch(&a, &b, &SmatchOptions::default());
        // Matched: TOP, want-01, boy, ARG0(a,b), ARG1(a,c): 5 of 7 test and 6 gold triples.
        assert_eq!(
            (score.matched, score.test_total, score.gold_total),
            (5, 7, 6)
        );
        let (p, r, f) = score.prf();
        assert_eq!((p, r), (5.0 / 7.0, 5.0 / 6.0));
        assert!((f - 2.0 * p * r / (p + r)).abs() < 1e-15);
    }

    #[test]
    fn compute_f_zero_cases() {
        assert_eq!(compute_f(0, 0, 5), (0.0, 0.0, 0.0));
        assert_eq!(compute_f(0, 3, 5), (0.0, 0.0, 0.0));
        assert_eq!(compute_f(3, 3, 3), (1.0, 1.0, 1.0));
        let empty = smatch(
            &Graph::default(),
            &Graph::default(),
            &SmatchOptions::default(),
        );
        assert_eq!((empty.matched, empty.test_total, empty.f1()), (0, 0, 0.0));
    }
}
