//! A Lagrangian upper bound on the Smatch score: dynamic programming over a spanning forest of
//! the test graph, with the mapping's injectivity and the relations off the forest priced in.
//!
//! Without injectivity, and with the test graph a forest, the best mapping is a tree dynamic
//! program: a node's subtree value for each of its gold options is the option's unary weight
//! plus, for each child, the better of the child's own best and the child's options joined to
//! this one by a relation match. AMRs are nearly trees, so two relaxations make any pair fit:
//!
//! * a gold node `l` may be taken by several test nodes, but each taking pays a price
//!   `price[l] ≥ 0` and the bound adds `sum(price)` back. A mapping that takes `l` at most once
//!   pays at most what is added back, so every injective mapping scores no more than the bound;
//! * a relation between test nodes `i < k` that the forest leaves out (a re-entrancy) is
//!   credited to `i` as the best weight it could earn with `k` at any `l`, less a price
//!   `cross_price[e][l] ≥ 0` for counting on `k -> l`, which `k -> l` earns back as a bonus.
//!   Since `k` takes at most one `l` and `i` at most one gold node, this again only overstates.
//!
//! Any prices give an upper bound; subgradient descent on them (Polyak steps towards the
//! incumbent) lowers it. On nearly-tree graphs the bound usually meets the optimum, which proves
//! the local search's mapping optimal without branching.

use super::problem::{Problem, UNMAPPED};

/// Marks a [`Link`] target that is a relation off the forest rather than a tree child.
const CROSS: u32 = 1 << 31;

/// "No option": the node is unmapped.
const NONE: u32 = u32::MAX;

/// Subgradient steps without a lower bound after which the step length halves.
const HALVE_AFTER: usize = 3;

/// One gold option `i -> gold` of a test node, stored at `cell = i * n2 + gold`.
#[derive(Clone, Copy, Debug)]
struct Choice {
    gold: u16,
    cell: u32,
    unary: f64,
    /// Its links: `links[links.0..links.1]`.
    links: (u32, u32),
}

/// The pairwise weights of one option towards one tree child (`target` = the child's index) or
/// one relation off the forest (`target` = `CROSS | edge`).
#[derive(Clone, Copy, Debug)]
struct Link {
    target: u32,
    items: (u32, u32),
}

/// One pairwise weight of a link: towards the child's option at `cell = k * n2 + gold`, or, for
/// a cross edge `e`, at `cell = e * n2 + gold` of `cross_price`.
#[derive(Clone, Copy, Debug)]
struct Item {
    cell: u32,
    gold: u16,
    weight: f64,
}

/// The bound for one problem, in buffers reused from pair to pair. The prices and the best bound
/// carry over between [`TreeBound::minimize`] calls until the next [`TreeBound::prepare`].
#[derive(Debug, Default)]
pub(crate) struct TreeBound {
    /// Test nodes in breadth-first order over a spanning forest: parents before children.
    order: Vec<u16>,
    parent: Vec<u16>,
    /// Tree children of node `i`: `children[child_start[i]..child_start[i + 1]]`.
    child_start: Vec<u32>,
    children: Vec<u16>,
    /// Options of node `i`: `choices[choice_start[i]..choice_start[i + 1]]`, by gold node.
    choice_start: Vec<u32>,
    choices: Vec<Choice>,
    links: Vec<Link>,
    items: Vec<Item>,
    /// Relations off the forest as (credited node, other node).
    cross: Vec<(u16, u16)>,
    cross_price: Vec<f64>,
    /// `bonus[cell]`: the cross prices the option at `cell` earns back.
    bonus: Vec<f64>,
    price: Vec<f64>,
    /// Subtree value of each option, by cell; of each node at its best; and of a node's children
    /// at their best (its value when unmapped).
    value: Vec<f64>,
    best_value: Vec<f64>,
    children_value: Vec<f64>,
    /// Index into `choices` of each node's best option, `NONE` for unmapped.
    best_choice: Vec<u32>,
    /// The maximising mapping of the last evaluation (option indices) and, per cross edge, the
    /// gold node its credited node counted on.
    taken: Vec<u32>,
    claim: Vec<u16>,
    count: Vec<u32>,
    /// Value of the last evaluation.
    total: f64,
    /// Best value outside node `i`'s subtree given its option (by cell) or given it unmapped,
    /// for max-marginals.
    outside: Vec<f64>,
    outside_unmapped: Vec<f64>,
    /// The smallest bound so far and the prices that gave it.
    best: f64,
    best_price: Vec<f64>,
    best_cross_price: Vec<f64>,
    /// Scratch buffers.
    seen: Vec<bool>,
    fill: Vec<u32>,
    neighbors: Vec<u16>,
    /// Step length factor, steps since the bound last went down, steps since `prepare`.
    theta: f64,
    stall: usize,
    spent: usize,
}

impl TreeBound {
    /// Sets up the dynamic program for `problem` with all prices at zero.
    pub fn prepare(&mut self, problem: &Problem) {
        let (n1, n2) = (problem.test_nodes, problem.gold_nodes);
        self.spanning_forest(problem);
        self.collect_children(n1);
        self.collect_cross_edges(problem);
        self.collect_choices(problem);
        reset(&mut self.cross_price, self.cross.len() * n2, 0.0);
        reset(&mut self.claim, self.cross.len(), UNMAPPED);
        reset(&mut self.bonus, n1 * n2, 0.0);
        reset(&mut self.price, n2, 0.0);
        reset(&mut self.value, n1 * n2, f64::NEG_INFINITY);
        reset(&mut self.best_value, n1, 0.0);
        reset(&mut self.children_value, n1, 0.0);
        reset(&mut self.best_choice, n1, NONE);
        reset(&mut self.taken, n1, NONE);
        reset(&mut self.count, n2, 0);
        reset(&mut self.outside, n1 * n2, f64::NEG_INFINITY);
        reset(&mut self.outside_unmapped, n1, f64::NEG_INFINITY);
        self.total = 0.0;
        self.best = f64::INFINITY;
        self.theta = 1.0;
        self.stall = 0;
        self.spent = 0;
    }

    /// Breadth-first spanning forest over the test graph's relations.
    fn spanning_forest(&mut self, problem: &Problem) {
        let n1 = problem.test_nodes;
        reset(&mut self.parent, n1, UNMAPPED);
        self.order.clear();
        // `order` doubles as the breadth-first queue; a node is seen once it has a place in it.
        let mut seen = std::mem::take(&mut self.seen);
        reset(&mut seen, n1, false);
        for root in 0..n1 {
            if seen[root] {
                continue;
            }
            seen[root] = true;
            let mut next = self.order.len();
            self.order.push(root as u16);
            while next < self.order.len() {
                let i = usize::from(self.order[next]);
                next += 1;
                for &k in problem.test_neighbors_of(i) {
                    let k = usize::from(k);
                    if !seen[k] {
                        seen[k] = true;
                        self.parent[k] = i as u16;
                        self.order.push(k as u16);
                    }
                }
            }
        }
        self.seen = seen;
    }

    fn collect_children(&mut self, n1: usize) {
        reset(&mut self.child_start, n1 + 1, 0);
        for &p in &self.parent {
            if p != UNMAPPED {
                self.child_start[usize::from(p) + 1] += 1;
            }
        }
        for i in 0..n1 {
            self.child_start[i + 1] += self.child_start[i];
        }
        reset(&mut self.children, self.child_start[n1] as usize, 0);
        self.fill.clear();
        self.fill.extend_from_slice(&self.child_start[..n1]);
        for (k, &p) in self.parent.iter().enumerate() {
            if p != UNMAPPED {
                self.children[self.fill[usize::from(p)] as usize] = k as u16;
                self.fill[usize::from(p)] += 1;
            }
        }
    }

    fn collect_cross_edges(&mut self, problem: &Problem) {
        self.cross.clear();
        let mut neighbors = std::mem::take(&mut self.neighbors);
        for i in 0..problem.test_nodes {
            neighbors.clear();
            neighbors.extend_from_slice(problem.test_neighbors_of(i));
            neighbors.sort_unstable();
            neighbors.dedup();
            for &k in &neighbors {
                if usize::from(k) > i && !self.tree_edge(i, usize::from(k)) {
                    self.cross.push((i as u16, k));
                }
            }
        }
        self.neighbors = neighbors;
    }

    /// Each candidate pair's unary weight and its pairwise weights grouped by tree child or
    /// credited cross edge; weights towards the tree parent are counted at the parent.
    fn collect_choices(&mut self, problem: &Problem) {
        let n2 = problem.gold_nodes;
        self.choice_start.clear();
        self.choices.clear();
        self.links.clear();
        self.items.clear();
        self.choice_start.push(0);
        for i in 0..problem.test_nodes {
            for &j in problem.candidates_of(i) {
                let links_from = self.links.len() as u32;
                // Partners are sorted by test node: one group per neighbour.
                for group in problem
                    .partners_of(i, usize::from(j))
                    .chunk_by(|a, b| a.test == b.test)
                {
                    let k = usize::from(group[0].test);
                    let target = if usize::from(self.parent[k]) == i {
                        (k as u32, k)
                    } else if k > i && !self.tree_edge(i, k) {
                        let Some(e) = self
                            .cross
                            .iter()
                            .position(|&(a, b)| usize::from(a) == i && usize::from(b) == k)
                        else {
                            continue;
                        };
                        (CROSS | e as u32, e)
                    } else {
                        continue;
                    };
                    let items_from = self.items.len() as u32;
                    for partner in group {
                        self.items.push(Item {
                            cell: (target.1 * n2 + usize::from(partner.gold)) as u32,
                            gold: partner.gold,
                            weight: f64::from(partner.weight),
                        });
                    }
                    self.links.push(Link {
                        target: target.0,
                        items: (items_from, self.items.len() as u32),
                    });
                }
                self.choices.push(Choice {
                    gold: j,
                    cell: (i * n2 + usize::from(j)) as u32,
                    unary: f64::from(problem.unary_of(i, usize::from(j))),
                    links: (links_from, self.links.len() as u32),
                });
            }
            self.choice_start.push(self.choices.len() as u32);
        }
    }

    fn tree_edge(&self, i: usize, k: usize) -> bool {
        usize::from(self.parent[k]) == i || usize::from(self.parent[i]) == k
    }

    /// Subgradient descent on the prices, continuing from where the last call stopped; returns
    /// the smallest bound so far, rounded down (the score is an integer). Stops once that is at
    /// most `incumbent`, after `patience` steps that do not lower it, or once `budget` steps
    /// have been taken since [`TreeBound::prepare`].
    pub fn minimize(
        &mut self,
        problem: &Problem,
        incumbent: i64,
        patience: usize,
        budget: usize,
    ) -> i64 {
        let mut idle = 0;
        while self.spent < budget && self.floor() > incumbent && idle < patience {
            self.spent += 1;
            let bound = self.evaluate();
            let floor_before = self.floor();
            if bound < self.best - 1e-9 {
                self.best = bound;
                self.stall = 0;
                self.best_price.clone_from(&self.price);
                self.best_cross_price.clone_from(&self.cross_price);
            } else {
                self.stall += 1;
                if self.stall >= HALVE_AFTER {
                    self.theta *= 0.5;
                    self.stall = 0;
                }
            }
            idle = if self.floor() < floor_before {
                0
            } else {
                idle + 1
            };
            if self.floor() <= incumbent {
                break;
            }
            if !self.step_prices(problem.test_nodes, bound - incumbent as f64) {
                break;
            }
        }
        self.floor()
    }

    /// One Polyak step: each price moves along its subgradient (gold node `l` taken `count`
    /// times: `count - 1`; cross price: counted on minus taken), by `theta * gap / |g|²`.
    /// Returns `false` when the subgradient is zero (nothing left to improve).
    fn step_prices(&mut self, test_nodes: usize, gap: f64) -> bool {
        let n2 = self.price.len();
        self.count.iter_mut().for_each(|c| *c = 0);
        for i in 0..test_nodes {
            let j = self.gold_taken(i);
            if j != UNMAPPED {
                self.count[usize::from(j)] += 1;
            }
        }
        let mut norm = 0.0;
        for (j, &count) in self.count.iter().enumerate() {
            // A price at zero cannot go lower: that direction does not count.
            if count > 0 || self.price[j] > 0.0 {
                let g = f64::from(count) - 1.0;
                norm += g * g;
            }
        }
        for (e, &(_, k)) in self.cross.iter().enumerate() {
            let (claim, taken) = (self.claim[e], self.gold_taken(usize::from(k)));
            if claim != taken {
                norm += f64::from(u8::from(claim != UNMAPPED));
                if taken != UNMAPPED && self.cross_price[e * n2 + usize::from(taken)] > 0.0 {
                    norm += 1.0;
                }
            }
        }
        if norm == 0.0 {
            return false;
        }
        let step = self.theta * gap / norm;
        for (price, &count) in self.price.iter_mut().zip(&self.count) {
            *price = (*price + step * (f64::from(count) - 1.0)).max(0.0);
        }
        for e in 0..self.cross.len() {
            let k = usize::from(self.cross[e].1);
            let (claim, taken) = (self.claim[e], self.gold_taken(k));
            if claim == taken {
                continue;
            }
            if claim != UNMAPPED {
                self.cross_price[e * n2 + usize::from(claim)] += step;
                self.bonus[k * n2 + usize::from(claim)] += step;
            }
            if taken != UNMAPPED {
                let at = e * n2 + usize::from(taken);
                let lowered = (self.cross_price[at] - step).max(0.0);
                self.bonus[k * n2 + usize::from(taken)] += lowered - self.cross_price[at];
                self.cross_price[at] = lowered;
            }
        }
        true
    }

    /// The bound at the current prices. Leaves each option's subtree value in `value`, the
    /// maximising (possibly non-injective) mapping in `taken` and the cross edges' counted-on
    /// gold nodes in `claim`.
    fn evaluate(&mut self) -> f64 {
        self.children_value.iter_mut().for_each(|v| *v = 0.0);
        for &i in self.order.iter().rev() {
            let i = usize::from(i);
            let base = self.children_value[i];
            let mut best = base;
            let mut best_choice = NONE;
            for c in self.choice_start[i] as usize..self.choice_start[i + 1] as usize {
                let choice = self.choices[c];
                let cell = choice.cell as usize;
                let mut value =
                    choice.unary - self.price[usize::from(choice.gold)] + self.bonus[cell] + base;
                for link in &self.links[choice.links.0 as usize..choice.links.1 as usize] {
                    let items = &self.items[link.items.0 as usize..link.items.1 as usize];
                    let mut gain = 0.0f64;
                    if link.target & CROSS == 0 {
                        let child_best = self.best_value[link.target as usize];
                        for item in items {
                            gain =
                                gain.max(item.weight + self.value[item.cell as usize] - child_best);
                        }
                    } else {
                        for item in items {
                            gain = gain.max(item.weight - self.cross_price[item.cell as usize]);
                        }
                    }
                    value += gain;
                }
                self.value[cell] = value;
                if value > best {
                    best = value;
                    best_choice = c as u32;
                }
            }
            self.best_value[i] = best;
            self.best_choice[i] = best_choice;
            if self.parent[i] != UNMAPPED {
                self.children_value[usize::from(self.parent[i])] += best;
            }
        }

        self.total = self.price.iter().sum::<f64>()
            + self
                .order
                .iter()
                .filter(|&&i| self.parent[usize::from(i)] == UNMAPPED)
                .map(|&i| self.best_value[usize::from(i)])
                .sum::<f64>();
        self.trace_back();
        self.total
    }

    /// Recovers the maximising mapping top-down, then what each cross edge counted on.
    fn trace_back(&mut self) {
        for &i in &self.order {
            let i = usize::from(i);
            let mut pick = self.best_choice[i];
            if self.parent[i] != UNMAPPED {
                let parent_choice = self.taken[usize::from(self.parent[i])];
                if let Some(link) = self.link_of(parent_choice, i as u32) {
                    let mut best = self.best_value[i];
                    for item in &self.items[link.items.0 as usize..link.items.1 as usize] {
                        let v = item.weight + self.value[item.cell as usize];
                        if v > best {
                            best = v;
                            pick = self.option_at(i, item.gold);
                        }
                    }
                }
            }
            self.taken[i] = pick;
        }
        for e in 0..self.cross.len() {
            let i = usize::from(self.cross[e].0);
            let mut claim = UNMAPPED;
            if let Some(link) = self.link_of(self.taken[i], CROSS | e as u32) {
                let mut best = 0.0;
                for item in &self.items[link.items.0 as usize..link.items.1 as usize] {
                    let v = item.weight - self.cross_price[item.cell as usize];
                    if v > best {
                        best = v;
                        claim = item.gold;
                    }
                }
            }
            self.claim[e] = claim;
        }
    }

    fn link_of(&self, choice: u32, target: u32) -> Option<Link> {
        if choice == NONE {
            return None;
        }
        let links = self.choices[choice as usize].links;
        self.links[links.0 as usize..links.1 as usize]
            .iter()
            .find(|l| l.target == target)
            .copied()
    }

    /// Index of option `i -> gold`. It exists whenever a link item names it (a pairwise weight
    /// makes the pair a candidate); were it missing, only the step direction would suffer,
    /// never the bound.
    fn option_at(&self, i: usize, gold: u16) -> u32 {
        let range = self.choice_start[i] as usize..self.choice_start[i + 1] as usize;
        match self.choices[range.clone()].binary_search_by_key(&gold, |c| c.gold) {
            Ok(at) => (range.start + at) as u32,
            Err(_) => NONE,
        }
    }

    fn gold_taken(&self, i: usize) -> u16 {
        match self.taken[i] {
            NONE => UNMAPPED,
            c => self.choices[c as usize].gold,
        }
    }

    /// The maximising mapping of the last evaluation made injective (first taker in
    /// breadth-first order keeps a gold node), as a test-to-gold mapping of `out.len()` test
    /// nodes; `swapped` when this bound runs on the transposed problem.
    pub fn suggest(
        &mut self,
        out: &mut Vec<u16>,
        test_nodes: usize,
        gold_nodes: usize,
        swapped: bool,
    ) {
        reset(out, test_nodes, UNMAPPED);
        let mut used = std::mem::take(&mut self.seen);
        reset(
            &mut used,
            if swapped { test_nodes } else { gold_nodes },
            false,
        );
        for &i in &self.order {
            let i = usize::from(i);
            let j = self.gold_taken(i);
            if j == UNMAPPED || used[usize::from(j)] {
                continue;
            }
            used[usize::from(j)] = true;
            if swapped {
                out[usize::from(j)] = i as u16;
            } else {
                out[i] = j;
            }
        }
        self.seen = used;
    }

    /// Clears `allowed[cell]` (cells of this bound's problem) for every option through which no
    /// mapping scores above `incumbent`: its max-marginal, the best relaxed value with the
    /// option forced, is below `incumbent + 1`. Clears `may_skip[i]` when leaving node `i`
    /// unmapped cannot score above `incumbent` either. Uses the prices of the smallest bound.
    pub fn filter(&mut self, incumbent: i64, allowed: &mut [bool], may_skip: &mut [bool]) {
        if self.best.is_finite() {
            self.price.clone_from(&self.best_price);
            self.cross_price.clone_from(&self.best_cross_price);
            let n2 = self.price.len();
            self.bonus.iter_mut().for_each(|b| *b = 0.0);
            for (e, &(_, k)) in self.cross.iter().enumerate() {
                for l in 0..n2 {
                    self.bonus[usize::from(k) * n2 + l] += self.cross_price[e * n2 + l];
                }
            }
        }
        self.evaluate();
        self.outside_values();
        let threshold = incumbent as f64 + 1.0 - 1e-6;
        for (i, skip) in may_skip.iter_mut().enumerate() {
            if self.children_value[i] + self.outside_unmapped[i] < threshold {
                *skip = false;
            }
            for choice in
                &self.choices[self.choice_start[i] as usize..self.choice_start[i + 1] as usize]
            {
                let cell = choice.cell as usize;
                if self.value[cell] + self.outside[cell] < threshold {
                    allowed[cell] = false;
                }
            }
        }
    }

    /// The top-down half of max-marginals: for each option, the best value of everything outside
    /// its node's subtree (prices added back included) given that option.
    fn outside_values(&mut self) {
        for &p in &self.order {
            let p = usize::from(p);
            let options = self.choice_start[p] as usize..self.choice_start[p + 1] as usize;
            if self.parent[p] == UNMAPPED {
                let outside = self.total - self.best_value[p];
                self.outside_unmapped[p] = outside;
                for c in options.clone() {
                    self.outside[self.choices[c].cell as usize] = outside;
                }
            }
            for n in self.child_start[p] as usize..self.child_start[p + 1] as usize {
                let i = usize::from(self.children[n]);
                // The graph's value for each option of p with child i's share taken out; i's
                // options earn that, plus the link weight where p's option links to them.
                let mut most =
                    self.outside_unmapped[p] + self.children_value[p] - self.best_value[i];
                for c in options.clone() {
                    most = most.max(self.rest_without(c, i));
                }
                self.outside_unmapped[i] = most;
                for c in self.choice_start[i] as usize..self.choice_start[i + 1] as usize {
                    self.outside[self.choices[c].cell as usize] = most;
                }
                for c in options.clone() {
                    let Some(link) = self.link_of(c as u32, i as u32) else {
                        continue;
                    };
                    let rest = self.rest_without(c, i);
                    for item in &self.items[link.items.0 as usize..link.items.1 as usize] {
                        let at = item.cell as usize;
                        self.outside[at] = self.outside[at].max(rest + item.weight);
                    }
                }
            }
        }
    }

    /// The best relaxed value with option `c` forced, less child `i`'s share of it.
    fn rest_without(&self, c: usize, i: usize) -> f64 {
        let cell = self.choices[c].cell as usize;
        let child_best = self.best_value[i];
        let mut share = child_best;
        if let Some(link) = self.link_of(c as u32, i as u32) {
            for item in &self.items[link.items.0 as usize..link.items.1 as usize] {
                share = share.max(item.weight + self.value[item.cell as usize]);
            }
        }
        self.outside[cell] + self.value[cell] - share
    }

    fn floor(&self) -> i64 {
        if self.best.is_finite() {
            (self.best + 1e-6).floor() as i64
        } else {
            i64::MAX
        }
    }
}

fn reset<T: Clone>(buffer: &mut Vec<T>, len: usize, value: T) {
    buffer.clear();
    buffer.resize(len, value);
}
