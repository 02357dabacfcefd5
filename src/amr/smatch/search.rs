//! Finding the best node mapping.
//!
//! 1. A seeded iterated local search from smatch's "smart" concept-match start, using smatch's
//!    moves (remap one node, swap two) with first-improvement sweeps, and rounds of random
//!    perturbation and re-climbing that keep a result no worse than before.
//! 2. Early in that search, and whenever it improves, the Lagrangian bounds of
//!    [`super::tree_bound`] are tightened towards the incumbent; the search ends as soon as the
//!    incumbent meets a bound, which proves it optimal. The bound's own mapping is also tried
//!    as a place to climb from.
//! 3. When the first start ends unproven: a longer try at the bounds, then depth-first branch
//!    and bound restricted to the options the bounds' max-marginals leave, within a node budget.
//! 4. Still unproven: random restarts of the local search.
//!
//! The branch-and-bound bound charges each unmapped test node its best gold node: the unary
//! weight, the exact pairwise weights with already-mapped nodes, and, for each not-yet-mapped
//! neighbour later in the branching order, the largest weight it could still bring. Each
//! pairwise weight is thus charged once, so the bound never undercuts the optimum.

use super::problem::{Problem, UNMAPPED};
use super::tree_bound::TreeBound;
use super::triples::SmatchGraph;
use crate::seed::SplitMix64;

/// Buffers of the search, reused from pair to pair.
#[derive(Debug, Default)]
pub(crate) struct SearchState {
    mapping: Vec<u16>,
    inverse: Vec<u16>,
    best_mapping: Vec<u16>,
    saved_mapping: Vec<u16>,
    suggestion: Vec<u16>,
    /// The best score when the bounds were last tightened.
    tightened_at: Option<i64>,
    queue: std::collections::VecDeque<u16>,
    queued: Vec<bool>,
    /// `gain[i * gold_nodes + j]`: what `i -> j` earns against the current mapping.
    gain: Vec<i32>,
    score: i64,
    /// `adjacent[i * test_nodes + k]`: test nodes `i` and `k` share a relation.
    adjacent: Vec<bool>,
    // Branch and bound.
    /// Options left to branch and bound after the bounds' filtering: `allowed[i * n2 + j]`,
    /// `may_skip[i]` (whether `i` may stay unmapped), and the allowed gold nodes of each test
    /// node, `options[option_start[i]..option_start[i + 1]]`.
    allowed: Vec<bool>,
    may_skip: Vec<bool>,
    option_start: Vec<u32>,
    options: Vec<u16>,
    order: Vec<u16>,
    position: Vec<u32>,
    static_bound: Vec<i64>,
    dynamic: Vec<i64>,
    choices: Vec<(i64, u16)>,
}

/// Effort limits of one search.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Effort {
    pub seed: u64,
    pub restarts: usize,
    pub perturbation_rounds: usize,
    pub sideways: usize,
    pub node_budget: u64,
    /// Subgradient steps per Lagrangian bound (0: no Lagrangian bounds).
    pub bound_iterations: usize,
}

/// Steps without a lower bound after which one tightening gives up (three times as many, with
/// three times the steps, once the first start has ended unproven).
const BOUND_PATIENCE: usize = 8;

/// Idle perturbation rounds of the first start before the bounds are first tightened: enough
/// for the incumbent to be the optimum on most pairs, so that the bound can prove it at once.
const BOUND_AFTER: usize = 2;

/// The best matched-triple count found and whether it is proven optimal.
pub(crate) fn best_match(
    problem: &Problem,
    bounds: &mut LagrangianBounds<'_>,
    state: &mut SearchState,
    effort: Effort,
) -> (i64, bool) {
    if problem.test_nodes == 0 || problem.gold_nodes == 0 {
        return (0, true);
    }
    let mut bound = problem.triple_bound;
    let mut rng = SplitMix64::new(effort.seed);
    state.tightened_at = None;
    let mut best = local_search(
        problem,
        state,
        bounds,
        &mut rng,
        effort,
        0..=0,
        -1,
        &mut bound,
    );
    if best >= bound {
        return (best, true);
    }
    // The first start is spent: a longer try at the bound, then a proof restricted to the
    // options the bound leaves, before any random restart.
    let (thorough, _) = bounds.tighten(
        best,
        &mut state.suggestion,
        3 * BOUND_PATIENCE,
        3 * effort.bound_iterations,
    );
    bound = bound.min(thorough);
    if best >= bound {
        return (best, true);
    }
    let (n1, n2) = (problem.test_nodes, problem.gold_nodes);
    state.allowed.clear();
    state.allowed.resize(n1 * n2, true);
    state.may_skip.clear();
    state.may_skip.resize(n1, true);
    bounds.filter(best, &mut state.allowed, &mut state.may_skip);
    collect_options(problem, state);
    prepare_bounds(problem, state);
    let (bounded, proven) = branch_and_bound(problem, state, best, bound, effort.node_budget);
    if proven {
        return (bounded.max(best), true);
    }
    best = best.max(bounded);
    best = local_search(
        problem,
        state,
        bounds,
        &mut rng,
        effort,
        1..=effort.restarts,
        best,
        &mut bound,
    );
    (best, best >= bound)
}

fn collect_options(problem: &Problem, state: &mut SearchState) {
    let n2 = problem.gold_nodes;
    state.option_start.clear();
    state.options.clear();
    state.option_start.push(0);
    for i in 0..problem.test_nodes {
        for &j in problem.candidates_of(i) {
            if state.allowed[i * n2 + usize::from(j)] {
                state.options.push(j);
            }
        }
        state.option_start.push(state.options.len() as u32);
    }
}

#[inline]
fn options_of(state: &SearchState, i: usize) -> &[u16] {
    &state.options[state.option_start[i] as usize..state.option_start[i + 1] as usize]
}

/// The two Lagrangian bounds of one graph pair, each prepared on first use: over the test
/// graph's spanning forest, then, when that does not prove the incumbent optimal, over the gold
/// graph's (the same problem with the roles swapped).
pub(crate) struct LagrangianBounds<'a> {
    pub problem: &'a Problem,
    pub test: &'a SmatchGraph,
    pub gold: &'a SmatchGraph,
    pub transposed: &'a mut Problem,
    pub test_side: &'a mut TreeBound,
    pub gold_side: &'a mut TreeBound,
    /// Whether the test side and the gold side have been prepared for this pair.
    pub prepared: (bool, bool),
}

impl LagrangianBounds<'_> {
    /// Clears, in the test-major `allowed` and in `may_skip`, what the prepared bounds rule out
    /// for any mapping scoring above `incumbent`.
    pub(crate) fn filter(&mut self, incumbent: i64, allowed: &mut [bool], may_skip: &mut [bool]) {
        if self.prepared.0 {
            self.test_side.filter(incumbent, allowed, may_skip);
        }
        if self.prepared.1 {
            let (n1, n2) = (self.problem.test_nodes, self.problem.gold_nodes);
            let mut swapped = vec![true; n1 * n2];
            let mut gold_may_skip = vec![true; n2];
            self.gold_side
                .filter(incumbent, &mut swapped, &mut gold_may_skip);
            for i in 0..n1 {
                for j in 0..n2 {
                    allowed[i * n2 + j] &= swapped[j * n1 + i];
                }
            }
        }
    }

    /// An upper bound on the score, trying for one at most `incumbent`, and whether
    /// `suggestion` now holds the bound's own mapping made injective.
    pub(crate) fn tighten(
        &mut self,
        incumbent: i64,
        suggestion: &mut Vec<u16>,
        patience: usize,
        iterations: usize,
    ) -> (i64, bool) {
        if iterations == 0 {
            return (i64::MAX, false);
        }
        let (n1, n2) = (self.problem.test_nodes, self.problem.gold_nodes);
        if !self.prepared.0 {
            self.test_side.prepare(self.problem);
            self.prepared.0 = true;
        }
        let bound = self
            .test_side
            .minimize(self.problem, incumbent, patience, iterations);
        if bound <= incumbent {
            self.test_side.suggest(suggestion, n1, n2, false);
            return (bound, true);
        }
        if !self.prepared.1 {
            self.transposed.build(self.gold, self.test);
            self.gold_side.prepare(self.transposed);
            self.prepared.1 = true;
        }
        let gold_bound = self
            .gold_side
            .minimize(self.transposed, incumbent, patience, iterations);
        self.gold_side.suggest(suggestion, n1, n2, true);
        (bound.min(gold_bound), true)
    }
}

fn reset_mapping(state: &mut SearchState, n1: usize, n2: usize) {
    state.mapping.clear();
    state.mapping.resize(n1, UNMAPPED);
    state.inverse.clear();
    state.inverse.resize(n2, UNMAPPED);
}

/// Iterated local search over `starts` (0 is the concept-match start, the others random);
/// returns the best score, at least `best`, and stops early once it reaches `upper_bound`.
///
/// The bounds are tightened after [`BOUND_AFTER`] idle rounds of the first start (or when it
/// ends sooner), and again whenever the best score improves after that.
#[allow(clippy::too_many_arguments)]
fn local_search(
    problem: &Problem,
    state: &mut SearchState,
    bounds: &mut LagrangianBounds<'_>,
    rng: &mut SplitMix64,
    effort: Effort,
    starts: std::ops::RangeInclusive<usize>,
    mut best: i64,
    upper_bound: &mut i64,
) -> i64 {
    let n1 = problem.test_nodes;
    prepare_adjacency(problem, state);
    for start in starts {
        if best >= *upper_bound {
            break;
        }
        reset_climb(problem, state);
        if start == 0 {
            smart_start(problem, state, rng);
        } else {
            random_start(problem, state, rng);
        }
        enqueue_all(state, n1);
        climb(problem, state, rng, effort.sideways);
        let mut current = state.score;
        if current > best {
            best = current;
            state.best_mapping.clone_from(&state.mapping);
        }
        // Rounds since the last improvement: easy pairs stop early, hard ones keep searching.
        let mut idle = 0;
        // Random starts rarely beat a well-searched first start by much, so each gets half of
        // its idle rounds: enough to climb out of a poor start, cheaper on pairs already solved.
        let idle_limit = if start == 0 {
            effort.perturbation_rounds
        } else {
            effort.perturbation_rounds / 2
        };
        loop {
            let due = match state.tightened_at {
                Some(at) => best > at,
                None => idle >= BOUND_AFTER || idle >= idle_limit,
            };
            if due && best < *upper_bound {
                state.tightened_at = Some(best);
                let (tightened, suggested) = bounds.tighten(
                    best,
                    &mut state.suggestion,
                    BOUND_PATIENCE,
                    effort.bound_iterations,
                );
                *upper_bound = (*upper_bound).min(tightened);
                if suggested && best < *upper_bound {
                    // The bound's own mapping, made injective, is often a better place to climb from.
                    state.saved_mapping.clone_from(&state.mapping);
                    let suggestion = std::mem::take(&mut state.suggestion);
                    move_to(problem, state, &suggestion);
                    state.suggestion = suggestion;
                    enqueue_all(state, n1);
                    climb(problem, state, rng, effort.sideways);
                    let score = state.score;
                    if score >= current {
                        current = score;
                        if score > best {
                            best = score;
                            state.best_mapping.clone_from(&state.mapping);
                        }
                    } else {
                        restore_saved(problem, state);
                    }
                }
            }
            if idle >= idle_limit || best >= *upper_bound {
                break;
            }
            idle += 1;
            state.saved_mapping.clone_from(&state.mapping);
            let strength = 2 + rng.below(n1.div_ceil(8).max(1));
            state.queue.clear();
            state.queued.clear();
            state.queued.resize(n1, false);
            perturb(problem, state, rng, strength);
            climb(problem, state, rng, effort.sideways);
            let score = state.score;
            if score >= current {
                if score > current {
                    idle = 0;
                }
                current = score;
                if score > best {
                    best = score;
                    state.best_mapping.clone_from(&state.mapping);
                }
            } else {
                restore_saved(problem, state);
            }
        }
    }
    best
}

/// Test-graph adjacency as a flat matrix: a swap between two nodes only has a pairwise
/// correction when they are joined by a relation.
fn prepare_adjacency(problem: &Problem, state: &mut SearchState) {
    let n1 = problem.test_nodes;
    state.adjacent.clear();
    state.adjacent.resize(n1 * n1, false);
    for i in 0..n1 {
        for &k in problem.test_neighbors_of(i) {
            state.adjacent[i * n1 + usize::from(k)] = true;
        }
    }
}

/// Empties the mapping and resets the gain table to the unary weights.
fn reset_climb(problem: &Problem, state: &mut SearchState) {
    reset_mapping(state, problem.test_nodes, problem.gold_nodes);
    state.gain.clear();
    state
        .gain
        .extend(problem.unary.iter().map(|&u| i64::from(u) as i32));
    state.score = 0;
}

/// Goes back to the mapping saved before a perturbation, changing only the nodes that differ.
fn restore_saved(problem: &Problem, state: &mut SearchState) {
    let saved = std::mem::take(&mut state.saved_mapping);
    move_to(problem, state, &saved);
    state.saved_mapping = saved;
}

/// Changes the mapping to `target` (injective), touching only the nodes that differ.
fn move_to(problem: &Problem, state: &mut SearchState, target: &[u16]) {
    for (i, &j) in target.iter().enumerate().take(problem.test_nodes) {
        if state.mapping[i] != j {
            set(problem, state, i, UNMAPPED);
        }
    }
    for (i, &j) in target.iter().enumerate().take(problem.test_nodes) {
        if state.mapping[i] != j {
            set(problem, state, i, j);
        }
    }
}

/// Maps test node `i` to `j` (or unmaps it), keeping the score, the inverse mapping and the
/// gain table exact: `gain[k * n2 + l]` is what mapping `k -> l` earns with everything else
/// as it is now, so a move's effect is read off in O(1) and a change costs O(its partners).
/// The holder of `j`, if any, must have been moved off it first.
#[inline]
fn set(problem: &Problem, state: &mut SearchState, i: usize, j: u16) {
    let n2 = problem.gold_nodes;
    let old = state.mapping[i];
    if old == j {
        return;
    }
    if old != UNMAPPED {
        state.score -= i64::from(state.gain[i * n2 + usize::from(old)]);
        for partner in problem.partners_of(i, usize::from(old)) {
            state.gain[usize::from(partner.test) * n2 + usize::from(partner.gold)] -=
                partner.weight as i32;
        }
        state.inverse[usize::from(old)] = UNMAPPED;
    }
    state.mapping[i] = j;
    if j != UNMAPPED {
        state.score += i64::from(state.gain[i * n2 + usize::from(j)]);
        for partner in problem.partners_of(i, usize::from(j)) {
            state.gain[usize::from(partner.test) * n2 + usize::from(partner.gold)] +=
                partner.weight as i32;
        }
        state.inverse[usize::from(j)] = i as u16;
    }
}

#[inline]
fn gain_of(state: &SearchState, n2: usize, i: usize, j: u16) -> i64 {
    if j == UNMAPPED {
        0
    } else {
        i64::from(state.gain[i * n2 + usize::from(j)])
    }
}

/// smatch's smart start: each node to the first free gold node with the same concept (unary
/// weight from the concept shows as weight ≥ 1), the rest to random free candidates.
fn smart_start(problem: &Problem, state: &mut SearchState, rng: &mut SplitMix64) {
    for i in 0..problem.test_nodes {
        let free_best = problem
            .candidates_of(i)
            .iter()
            .copied()
            .filter(|&j| state.inverse[usize::from(j)] == UNMAPPED)
            .max_by_key(|&j| (problem.unary_of(i, usize::from(j)), std::cmp::Reverse(j)));
        if let Some(j) = free_best {
            if problem.unary_of(i, usize::from(j)) > 0 {
                set(problem, state, i, j);
            }
        }
    }
    for i in 0..problem.test_nodes {
        if state.mapping[i] == UNMAPPED {
            assign_random_free(problem, state, rng, i);
        }
    }
}

fn random_start(problem: &Problem, state: &mut SearchState, rng: &mut SplitMix64) {
    // Visit nodes from a random offset so early nodes do not always choose first.
    let n1 = problem.test_nodes;
    let offset = rng.below(n1);
    for step in 0..n1 {
        assign_random_free(problem, state, rng, (offset + step) % n1);
    }
}

fn assign_random_free(problem: &Problem, state: &mut SearchState, rng: &mut SplitMix64, i: usize) {
    let candidates = problem.candidates_of(i);
    if candidates.is_empty() {
        return;
    }
    // A scan from a random point: a free candidate if any.
    let start = rng.below(candidates.len());
    for step in 0..candidates.len() {
        let j = candidates[(start + step) % candidates.len()];
        if state.inverse[usize::from(j)] == UNMAPPED {
            set(problem, state, i, j);
            return;
        }
    }
}

#[inline]
fn assign(state: &mut SearchState, i: usize, j: u16) {
    let old = state.mapping[i];
    if old != UNMAPPED {
        state.inverse[usize::from(old)] = UNMAPPED;
    }
    state.mapping[i] = j;
    if j != UNMAPPED {
        state.inverse[usize::from(j)] = i as u16;
    }
}

/// Remaps `strength` random nodes to random candidates, swapping with the current holder.
///
/// Half of the kicks also map a relation partner of the new pair (`i -> j` and `k -> l` for
/// relations `i -r-> k`, `j -r-> l`), since a relation match is what single moves cannot reach.
fn perturb(problem: &Problem, state: &mut SearchState, rng: &mut SplitMix64, strength: usize) {
    for _ in 0..strength {
        let i = rng.below(problem.test_nodes);
        let candidates = problem.candidates_of(i);
        if candidates.is_empty() {
            continue;
        }
        let j = candidates[rng.below(candidates.len())];
        kick(problem, state, i, j);
        let partners = problem.partners_of(i, usize::from(j));
        if !partners.is_empty() && rng.below(2) == 0 {
            let partner = partners[rng.below(partners.len())];
            kick(problem, state, usize::from(partner.test), partner.gold);
        }
    }
}

/// Maps `i -> j`; the node holding `j` takes `i`'s old gold node.
fn kick(problem: &Problem, state: &mut SearchState, i: usize, j: u16) {
    swap_into(problem, state, i, j);
    enqueue_around(problem, state, i);
}

/// Maps `i -> j`; the node holding `j`, if any, takes `i`'s old gold node.
#[inline]
fn swap_into(problem: &Problem, state: &mut SearchState, i: usize, j: u16) {
    let holder = state.inverse[usize::from(j)];
    if usize::from(holder) == i {
        return;
    }
    let old = state.mapping[i];
    if holder != UNMAPPED {
        set(problem, state, usize::from(holder), UNMAPPED);
        set(problem, state, i, j);
        set(problem, state, usize::from(holder), old);
        enqueue_around(problem, state, usize::from(holder));
    } else {
        set(problem, state, i, j);
    }
}

/// First-improvement hill climbing over moves and swaps, leaving the score in `state.score`.
///
/// Only test nodes in the work queue are examined; a change re-queues the nodes it touched and
/// their relation neighbours, whose gains it may have changed ("don't look bits"). Call with the
/// queue holding every node for a fresh start, or the perturbed ones after a perturbation.
///
/// Up to `sideways` moves that neither gain nor lose are taken too (each with even odds): a
/// relation match needs both of its nodes remapped, and neither move alone shows a gain.
fn climb(problem: &Problem, state: &mut SearchState, rng: &mut SplitMix64, mut sideways: usize) {
    let (n1, n2) = (problem.test_nodes, problem.gold_nodes);
    while let Some(node) = state.queue.pop_front() {
        let i = usize::from(node);
        state.queued[i] = false;
        let row = i * n2;
        let mut j = state.mapping[i];
        let mut here = gain_of(state, n2, i, j);
        for &target in problem.candidates_of(i) {
            if target == j {
                continue;
            }
            let t = usize::from(target);
            let there = i64::from(state.gain[row + t]);
            let holder = state.inverse[t];
            let mut gain = there - here;
            if holder != UNMAPPED {
                let k = usize::from(holder);
                let adjacent = state.adjacent[i * n1 + k];
                gain += gain_of(state, n2, k, j) - i64::from(state.gain[k * n2 + t]);
                if adjacent {
                    gain += problem.pair_weight(i, target, holder, j)
                        + problem.pair_weight(i, j, holder, target);
                }
            }
            let take_sideways = gain == 0 && sideways > 0 && rng.below(2) == 0;
            if take_sideways {
                sideways -= 1;
            }
            if gain > 0 || take_sideways {
                swap_into(problem, state, i, target);
                enqueue_around(problem, state, i);
                j = target;
                here = gain_of(state, n2, i, j);
            }
        }
    }
    debug_assert_eq!(state.score, problem.score(&state.mapping));
}

fn enqueue(state: &mut SearchState, i: usize) {
    if !state.queued[i] {
        state.queued[i] = true;
        state.queue.push_back(i as u16);
    }
}

/// Queues `i` and its relation neighbours.
fn enqueue_around(problem: &Problem, state: &mut SearchState, i: usize) {
    enqueue(state, i);
    for &k in problem.test_neighbors_of(i) {
        enqueue(state, usize::from(k));
    }
}

fn enqueue_all(state: &mut SearchState, n1: usize) {
    state.queue.clear();
    state.queued.clear();
    state.queued.resize(n1, true);
    state.queue.extend(0..n1 as u16);
}

/// Depth-first branch and bound from the incumbent `best`; returns the optimum and `true` when
/// the search finished within `node_budget` nodes, else the best found and `false`.
fn branch_and_bound(
    problem: &Problem,
    state: &mut SearchState,
    best: i64,
    ceiling: i64,
    node_budget: u64,
) -> (i64, bool) {
    let (n1, n2) = (problem.test_nodes, problem.gold_nodes);
    state.dynamic.clear();
    state.dynamic.resize(n1 * n2, 0);
    reset_mapping(state, n1, n2);

    let mut search = BranchAndBound {
        problem,
        state,
        best,
        ceiling,
        nodes: 0,
        node_budget,
        exhausted: false,
    };
    search.descend(0, 0);
    let (best, exhausted) = (search.best, search.exhausted);
    (best, !exhausted)
}

/// Fixes the branching order and each pair's static bound.
fn prepare_bounds(problem: &Problem, state: &mut SearchState) {
    let (n1, n2) = (problem.test_nodes, problem.gold_nodes);
    branching_order(problem, state);
    // static_bound[i * n2 + j]: unary + best weights towards neighbours later in the order.
    state.static_bound.clear();
    state.static_bound.resize(n1 * n2, 0);
    for i in 0..n1 {
        for o in state.option_start[i] as usize..state.option_start[i + 1] as usize {
            let j = usize::from(state.options[o]);
            let mut value = i64::from(problem.unary_of(i, j));
            let mut last_test = UNMAPPED;
            let mut group_best = 0i64;
            for partner in problem.partners_of(i, j) {
                let k = usize::from(partner.test);
                if state.position[k] <= state.position[i]
                    || !state.allowed[k * n2 + usize::from(partner.gold)]
                {
                    continue;
                }
                if partner.test != last_test {
                    value += group_best;
                    group_best = 0;
                    last_test = partner.test;
                }
                group_best = group_best.max(i64::from(partner.weight));
            }
            value += group_best;
            state.static_bound[i * n2 + j] = value;
        }
    }
}

/// Heavy nodes first, then nodes joined by relations to those already placed, so pairwise
/// weights turn from estimates into exact values as early as possible.
fn branching_order(problem: &Problem, state: &mut SearchState) {
    let n1 = problem.test_nodes;
    let potential: Vec<i64> = (0..n1)
        .map(|i| {
            options_of(state, i)
                .iter()
                .map(|&j| {
                    let j = usize::from(j);
                    i64::from(problem.unary_of(i, j))
                        + problem
                            .partners_of(i, j)
                            .iter()
                            .map(|p| i64::from(p.weight))
                            .sum::<i64>()
                })
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut linked = vec![0i64; n1];
    let mut placed = vec![false; n1];
    state.order.clear();
    state.position.clear();
    state.position.resize(n1, u32::MAX);
    for step in 0..n1 {
        let next = (0..n1)
            .filter(|&i| !placed[i])
            .max_by_key(|&i| (linked[i], potential[i], std::cmp::Reverse(i)))
            .unwrap_or(0);
        placed[next] = true;
        state.order.push(next as u16);
        state.position[next] = step as u32;
        for &j in options_of(state, next) {
            for partner in problem.partners_of(next, usize::from(j)) {
                linked[usize::from(partner.test)] += 1;
            }
        }
    }
}

struct BranchAndBound<'a> {
    problem: &'a Problem,
    state: &'a mut SearchState,
    best: i64,
    /// A proven upper bound on the optimum: an incumbent reaching it ends the search.
    ceiling: i64,
    nodes: u64,
    node_budget: u64,
    exhausted: bool,
}

impl BranchAndBound<'_> {
    /// Value of mapping `i -> j` given the nodes mapped so far, plus the static estimate.
    #[inline]
    fn option_value(&self, i: usize, j: u16) -> i64 {
        let p = i * self.problem.gold_nodes + usize::from(j);
        self.state.static_bound[p] + self.state.dynamic[p]
    }

    /// Upper bound on what the nodes at `depth..` can still add.
    fn remaining_bound(&self, depth: usize) -> i64 {
        let mut total = 0;
        for &i in &self.state.order[depth..] {
            let i = usize::from(i);
            let mut best = 0;
            for &j in options_of(self.state, i) {
                if self.state.inverse[usize::from(j)] == UNMAPPED {
                    best = best.max(self.option_value(i, j));
                }
            }
            total += best;
        }
        total
    }

    fn descend(&mut self, depth: usize, score: i64) {
        if score > self.best {
            self.best = score;
            self.state.best_mapping.clone_from(&self.state.mapping);
        }
        if depth == self.state.order.len() || self.exhausted || self.best >= self.ceiling {
            return;
        }
        self.nodes += 1;
        if self.nodes > self.node_budget {
            self.exhausted = true;
            return;
        }
        let bound = self.remaining_bound(depth);
        if score + bound <= self.best {
            return;
        }
        let i = usize::from(self.state.order[depth]);
        let rest_from = depth + 1;
        let first_choice = self.state.choices.len();
        for o in self.state.option_start[i] as usize..self.state.option_start[i + 1] as usize {
            let j = self.state.options[o];
            if self.state.inverse[usize::from(j)] == UNMAPPED {
                let value = self.option_value(i, j);
                self.state.choices.push((value, j));
            }
        }
        self.state.choices[first_choice..]
            .sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let choice_count = self.state.choices.len() - first_choice;
        // The remaining bound counts node i at its best choice; each branch replaces that share.
        let share_of_i = if choice_count > 0 {
            self.state.choices[first_choice].0.max(0)
        } else {
            0
        };
        let rest_bound = bound - share_of_i;
        for c in 0..choice_count {
            let (estimate, j) = self.state.choices[first_choice + c];
            if score + estimate + rest_bound <= self.best {
                break;
            }
            let p = i * self.problem.gold_nodes + usize::from(j);
            let exact = i64::from(self.problem.unary_of(i, usize::from(j))) + self.state.dynamic[p];
            self.apply(i, j, 1);
            self.descend(rest_from, score + exact);
            self.apply(i, j, -1);
            if self.exhausted {
                break;
            }
        }
        self.state.choices.truncate(first_choice);
        if !self.exhausted && self.state.may_skip[i] && score + rest_bound > self.best {
            // Leaving node i unmapped.
            self.descend(rest_from, score);
        }
    }

    /// Maps (`sign = 1`) or unmaps (`sign = -1`) `i -> j`, keeping the exact pairwise weights of
    /// later nodes towards mapped ones in `dynamic`.
    fn apply(&mut self, i: usize, j: u16, sign: i64) {
        let n2 = self.problem.gold_nodes;
        for partner in self.problem.partners_of(i, usize::from(j)) {
            let k = usize::from(partner.test);
            if self.state.position[k] > self.state.position[i] {
                self.state.dynamic[k * n2 + usize::from(partner.gold)] +=
                    sign * i64::from(partner.weight);
            }
        }
        if sign > 0 {
            assign(self.state, i, j);
        } else {
            assign(self.state, i, UNMAPPED);
        }
    }
}
