//! Smatch: the best triple overlap between two AMR graphs over all variable mappings.
//!
//! Triples and weights follow the reference implementation (pip `smatch` 1.0.4) exactly, so the
//! triple totals and the score of any mapping agree with it (see [`SmatchGraph`]). Where the
//! reference only hill-climbs, and so reports a lower bound, this module searches for the
//! optimum: a seeded iterated local search finds a strong mapping, and Lagrangian upper bounds
//! (tree dynamic programs over either graph's spanning forest, with injectivity priced in)
//! usually prove it optimal within a few dozen subgradient steps; otherwise branch and bound
//! over the options those bounds leave, then random restarts, try to improve it.
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
mod tree_bound;
mod triples;

use std::cell::RefCell;

use crate::amr::Graph;

pub use triples::SmatchGraph;

use problem::Problem;
use search::{Effort, LagrangianBounds, SearchState};
use tree_bound::TreeBound;

/// How hard to search. The result is a deterministic function of the two graphs and these
/// options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SmatchOptions {
    /// Seed of the local search's random starts and perturbations.
    pub seed: u64,
    /// Random starts after the concept-match start (only for pairs not proven optimal by then).
    pub restarts: usize,
    /// Perturb-and-reclimb rounds without improvement after which the first start ends; each
    /// random restart ends after half as many.
    pub perturbation_rounds: usize,
    /// Moves without gain allowed per climb, to cross plateaus.
    pub sideways_moves: usize,
    /// Branch-and-bound nodes allowed for proving optimality; 0 skips the proof.
    pub node_budget: u64,
    /// Subgradient steps allowed per Lagrangian bound and graph side (three times as many
    /// once the first start has ended unproven); 0 skips those bounds.
    pub bound_iterations: usize,
}

impl Default for SmatchOptions {
    fn default() -> Self {
        SmatchOptions {
            seed: 0,
            restarts: 4,
            perturbation_rounds: 64,
            sideways_moves: 5,
            node_budget: 200,
            bound_iterations: 60,
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
    static WORKSPACE: RefCell<Workspace> = RefCell::default();
}

#[derive(Default)]
struct Workspace {
    problem: Problem,
    /// The same pair with the graphs' roles swapped, for the gold side's bound.
    transposed: Problem,
    state: SearchState,
    test_side: TreeBound,
    gold_side: TreeBound,
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
        bound_iterations: options.bound_iterations,
    };
    let (matched, optimal) = WORKSPACE.with(|workspace| {
        let mut workspace = workspace.borrow_mut();
        let Workspace {
            problem,
            transposed,
            state,
            test_side,
            gold_side,
        } = &mut *workspace;
        problem.build(test, gold);
        let mut bounds = LagrangianBounds {
            problem,
            test,
            gold,
            transposed,
            test_side,
            gold_side,
            prepared: (false, false),
        };
        search::best_match(problem, &mut bounds, state, effort)
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
                matched += usize::from(test.same(*c1, gold, *c2) && maps(i as u16, j as u16));
            }
        }
        for a1 in &test.attributes {
            for a2 in &gold.attributes {
                matched += usize::from(
                    test.same(a1.name, gold, a2.name)
                        && test.same(a1.value, gold, a2.value)
                        && maps(a1.node, a2.node),
                );
            }
        }
        for r1 in &test.relations {
            for r2 in &gold.relations {
                matched += usize::from(
                    test.same(r1.name, gold, r2.name)
                        && maps(r1.source, r2.source)
                        && maps(r1.target, r2.target),
                );
            }
        }
        matched
    }

    /// The optimum by enumerating every partial injective mapping.
    fn brute_force(test: &SmatchGraph, gold: &SmatchGraph) -> usize {
        optimal_mapping(test, gold).0
    }

    /// The optimum and one mapping that reaches it, by enumeration.
    fn optimal_mapping(test: &SmatchGraph, gold: &SmatchGraph) -> (usize, Vec<Option<u16>>) {
        fn go(
            i: usize,
            mapping: &mut Vec<Option<u16>>,
            used: &mut Vec<bool>,
            test: &SmatchGraph,
            gold: &SmatchGraph,
            best: &mut (usize, Vec<Option<u16>>),
        ) {
            if i == test.node_count() {
                let score = count_matches(test, gold, mapping);
                if score > best.0 || best.1.is_empty() {
                    *best = (score, mapping.clone());
                }
                return;
            }
            go(i + 1, mapping, used, test, gold, best);
            for j in 0..gold.node_count() {
                if !used[j] {
                    used[j] = true;
                    mapping[i] = Some(j as u16);
                    go(i + 1, mapping, used, test, gold, best);
                    mapping[i] = None;
                    used[j] = false;
                }
            }
        }
        let mut mapping = vec![None; test.node_count()];
        let mut used = vec![false; gold.node_count()];
        let mut best = (0, Vec::new());
        go(0, &mut mapping, &mut used, test, gold, &mut best);
        best
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

    /// The smaller of the two Lagrangian bounds after up to 200 steps aimed at `target`.
    fn lagrangian_bound(test: &SmatchGraph, gold: &SmatchGraph, target: i64) -> i64 {
        let (mut problem, mut transposed) = (Problem::default(), Problem::default());
        problem.build(test, gold);
        transposed.build(gold, test);
        let (mut test_side, mut gold_side) = (TreeBound::default(), TreeBound::default());
        test_side.prepare(&problem);
        gold_side.prepare(&transposed);
        test_side
            .minimize(&problem, target, 200, 200)
            .min(gold_side.minimize(&transposed, target, 200, 200))
    }

    #[test]
    fn lagrangian_bounds_never_undercut_the_optimum() {
        let mut rng = SplitMix64::new(13);
        let mut tight = 0;
        for case in 0..300 {
            let (n1, n2) = (1 + rng.below(6), 1 + rng.below(6));
            let test = SmatchGraph::new(&random_graph(&mut rng, n1));
            let gold = SmatchGraph::new(&random_graph(&mut rng, n2));
            let optimum = brute_force(&test, &gold) as i64;
            // Aiming below the optimum pushes the prices as hard as they can go.
            for target in [optimum - 1, optimum, 0] {
                let bound = lagrangian_bound(&test, &gold, target);
                assert!(bound >= optimum, "case {case}: {bound} < {optimum}");
            }
            tight += usize::from(lagrangian_bound(&test, &gold, optimum) == optimum);
        }
        // A bound that is never tight would prove nothing; on these small graphs it mostly is.
        assert!(tight > 150, "tight on {tight} of 300");
    }

    #[test]
    fn lagrangian_bound_respects_injectivity() {
        // Three test dogs, one relation; the gold graph is a single dog, no relation. Each test
        // dog alone could earn its concept (the top one also TOP): 2 + 1 + 1 without
        // injectivity. Only one can take the gold dog and no relation can match, so the bound
        // must come down to the optimum, 2.
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
        assert_eq!(lagrangian_bound(&test, &gold, 2), 2);
    }

    /// The max-marginal filter may only drop options that no mapping scoring above the
    /// incumbent uses: with the incumbent one below the optimum, an optimal mapping survives.
    #[test]
    fn filter_keeps_an_optimal_mapping() {
        let mut rng = SplitMix64::new(17);
        let mut dropped = 0;
        for case in 0..300 {
            let (n1, n2) = (1 + rng.below(6), 1 + rng.below(6));
            let test = SmatchGraph::new(&random_graph(&mut rng, n1));
            let gold = SmatchGraph::new(&random_graph(&mut rng, n2));
            let (optimum, mapping) = optimal_mapping(&test, &gold);
            let (n1, n2) = (test.node_count(), gold.node_count());
            let incumbent = optimum as i64 - 1;
            let (mut problem, mut transposed) = (Problem::default(), Problem::default());
            problem.build(&test, &gold);
            let (mut test_side, mut gold_side) = (TreeBound::default(), TreeBound::default());
            let mut bounds = LagrangianBounds {
                problem: &problem,
                test: &test,
                gold: &gold,
                transposed: &mut transposed,
                test_side: &mut test_side,
                gold_side: &mut gold_side,
                prepared: (false, false),
            };
            let mut suggestion = Vec::new();
            bounds.tighten(incumbent, &mut suggestion, 50, 50);
            let mut allowed = vec![true; n1 * n2];
            let mut may_skip = vec![true; n1];
            bounds.filter(incumbent, &mut allowed, &mut may_skip);
            for (i, j) in mapping.iter().enumerate() {
                match j {
                    Some(j) => assert!(allowed[i * n2 + usize::from(*j)], "case {case}: {i}"),
                    None => assert!(may_skip[i], "case {case}: {i} unmapped"),
                }
            }
            dropped += allowed.iter().filter(|a| !**a).count();
        }
        // Something must be filtered for the test to mean anything.
        assert!(dropped > 0);
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
