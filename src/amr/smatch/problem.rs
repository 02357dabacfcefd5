//! The node-mapping problem behind Smatch, in smatch's own weights (`compute_pool`).
//!
//! Mapping test node `i` to gold node `j` earns a unary weight (matching concept, matching
//! attributes, relations from a node to itself) and, together with another mapped pair `(k, l)`,
//! a pairwise weight (relations `i -r-> k` and `j -r-> l` with the same name). Duplicated
//! triples count once per pair of copies, as in smatch. The score of a mapping is the sum of the
//! weights it switches on; Smatch's matched-triple count is the maximum over partial injective
//! mappings.

use super::triples::SmatchGraph;

/// "No gold node": an unmapped test node.
pub(crate) const UNMAPPED: u16 = u16::MAX;

/// A pairwise weight seen from one pair: partner pair `(test, gold)` and its weight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Partner {
    pub test: u16,
    pub gold: u16,
    pub weight: u32,
}

/// Weights of one (test, gold) graph pair, in buffers reused from pair to pair.
#[derive(Debug, Default)]
pub(crate) struct Problem {
    pub test_nodes: usize,
    pub gold_nodes: usize,
    /// `unary[i * gold_nodes + j]`.
    pub unary: Vec<u32>,
    /// Partners of pair `p = i * gold_nodes + j` are `partners[partner_start[p]..partner_start[p + 1]]`,
    /// sorted by (test, gold).
    pub partner_start: Vec<u32>,
    pub partners: Vec<Partner>,
    /// Gold nodes worth mapping test node `i` to: `candidates[candidate_start[i]..candidate_start[i + 1]]`.
    pub candidate_start: Vec<u32>,
    pub candidates: Vec<u16>,
    /// Test nodes joined to test node `i` by a relation, either way:
    /// `test_neighbors[test_neighbor_start[i]..test_neighbor_start[i + 1]]`.
    pub test_neighbor_start: Vec<u32>,
    pub test_neighbors: Vec<u16>,
    /// No mapping matches more triples than the smaller graph has.
    pub triple_bound: i64,
    /// Scratch: (pair, partner test, partner gold) before merging.
    raw_partners: Vec<(u32, u16, u16)>,
    /// Scratch: (name hash, index) of the gold relations, sorted.
    gold_relations: Vec<(u64, u32)>,
}

impl Problem {
    /// Fills the weights for `test` against `gold`.
    pub fn build(&mut self, test: &SmatchGraph, gold: &SmatchGraph) {
        let (n1, n2) = (test.node_count(), gold.node_count());
        self.test_nodes = n1;
        self.triple_bound = test.triple_count().min(gold.triple_count()) as i64;
        self.gold_nodes = n2;
        self.unary.clear();
        self.unary.resize(n1 * n2, 0);
        for (i, c1) in test.concepts.iter().enumerate() {
            for (j, c2) in gold.concepts.iter().enumerate() {
                if test.same(*c1, gold, *c2) {
                    self.unary[i * n2 + j] += 1;
                }
            }
        }
        for a1 in &test.attributes {
            for a2 in &gold.attributes {
                if test.same(a1.name, gold, a2.name) && test.same(a1.value, gold, a2.value) {
                    self.unary[usize::from(a1.node) * n2 + usize::from(a2.node)] += 1;
                }
            }
        }

        self.raw_partners.clear();
        // Gold relations by name hash, so each test relation meets only its namesakes.
        self.gold_relations.clear();
        self.gold_relations
            .extend((0..gold.relations.len()).map(|g| (gold.relations[g].name.hash, g as u32)));
        self.gold_relations.sort_unstable();
        for r1 in &test.relations {
            let hash = r1.name.hash;
            let from = self.gold_relations.partition_point(|&(h, _)| h < hash);
            for &(h, g) in &self.gold_relations[from..] {
                if h != hash {
                    break;
                }
                let r2 = &gold.relations[g as usize];
                if !test.same(r1.name, gold, r2.name) {
                    continue;
                }
                let (i, k) = (r1.source, r1.target);
                let (j, l) = (r2.source, r2.target);
                if i == k && j == l {
                    self.unary[usize::from(i) * n2 + usize::from(j)] += 1;
                } else if i != k && j != l {
                    // A loop on one side only would need one node mapped twice: never earned.
                    self.raw_partners.push((pair(i, j, n2), k, l));
                    self.raw_partners.push((pair(k, l, n2), i, j));
                }
            }
        }
        self.raw_partners.sort_unstable();

        self.partner_start.clear();
        self.partner_start.resize(n1 * n2 + 1, 0);
        self.partners.clear();
        let mut next = 0usize;
        for p in 0..n1 * n2 {
            let group_start = self.partners.len();
            while next < self.raw_partners.len() && self.raw_partners[next].0 as usize == p {
                let (_, test, gold) = self.raw_partners[next];
                let merged = self.partners.len() > group_start
                    && self
                        .partners
                        .last()
                        .is_some_and(|last| last.test == test && last.gold == gold);
                if merged {
                    if let Some(last) = self.partners.last_mut() {
                        last.weight += 1;
                    }
                } else {
                    self.partners.push(Partner {
                        test,
                        gold,
                        weight: 1,
                    });
                }
                next += 1;
            }
            self.partner_start[p + 1] = self.partners.len() as u32;
        }

        self.build_test_neighbors(test);

        self.candidate_start.clear();
        self.candidates.clear();
        self.candidate_start.push(0);
        for i in 0..n1 {
            for j in 0..n2 {
                let p = i * n2 + j;
                if self.unary[p] > 0 || self.partner_start[p + 1] > self.partner_start[p] {
                    self.candidates.push(j as u16);
                }
            }
            self.candidate_start.push(self.candidates.len() as u32);
        }
    }

    fn build_test_neighbors(&mut self, test: &SmatchGraph) {
        let n1 = self.test_nodes;
        self.test_neighbor_start.clear();
        self.test_neighbor_start.resize(n1 + 1, 0);
        for r in test.relations.iter().filter(|r| r.source != r.target) {
            self.test_neighbor_start[usize::from(r.source) + 1] += 1;
            self.test_neighbor_start[usize::from(r.target) + 1] += 1;
        }
        for i in 0..n1 {
            self.test_neighbor_start[i + 1] += self.test_neighbor_start[i];
        }
        self.test_neighbors.clear();
        self.test_neighbors
            .resize(self.test_neighbor_start[n1] as usize, 0);
        // Fill from the back of each node's slice, counting its start down as we go.
        let mut fill: Vec<u32> = self.test_neighbor_start[1..].to_vec();
        for r in test.relations.iter().filter(|r| r.source != r.target) {
            for (a, b) in [(r.source, r.target), (r.target, r.source)] {
                fill[usize::from(a)] -= 1;
                self.test_neighbors[fill[usize::from(a)] as usize] = b;
            }
        }
    }

    #[inline]
    pub fn test_neighbors_of(&self, i: usize) -> &[u16] {
        &self.test_neighbors
            [self.test_neighbor_start[i] as usize..self.test_neighbor_start[i + 1] as usize]
    }

    #[inline]
    pub fn candidates_of(&self, i: usize) -> &[u16] {
        &self.candidates[self.candidate_start[i] as usize..self.candidate_start[i + 1] as usize]
    }

    #[inline]
    pub fn partners_of(&self, i: usize, j: usize) -> &[Partner] {
        let p = i * self.gold_nodes + j;
        &self.partners[self.partner_start[p] as usize..self.partner_start[p + 1] as usize]
    }

    #[inline]
    pub fn unary_of(&self, i: usize, j: usize) -> u32 {
        self.unary[i * self.gold_nodes + j]
    }

    /// The pairwise weight between pairs `(i, j)` and `(k, l)`.
    #[inline]
    pub fn pair_weight(&self, i: usize, j: u16, k: u16, l: u16) -> i64 {
        if j == UNMAPPED || l == UNMAPPED {
            return 0;
        }
        self.partners_of(i, usize::from(j))
            .iter()
            .find(|p| p.test == k && p.gold == l)
            .map_or(0, |p| i64::from(p.weight))
    }

    /// The matched-triple count of a full mapping (smatch's `compute_match`).
    pub fn score(&self, mapping: &[u16]) -> i64 {
        let mut unary = 0i64;
        let mut pairwise = 0i64;
        for (i, &j) in mapping.iter().enumerate() {
            if j == UNMAPPED {
                continue;
            }
            unary += i64::from(self.unary_of(i, usize::from(j)));
            for partner in self.partners_of(i, usize::from(j)) {
                if mapping[usize::from(partner.test)] == partner.gold {
                    pairwise += i64::from(partner.weight);
                }
            }
        }
        // Every pairwise weight is stored from both of its pairs.
        unary + pairwise / 2
    }
}

#[inline]
fn pair(i: u16, j: u16, gold_nodes: usize) -> u32 {
    (usize::from(i) * gold_nodes + usize::from(j)) as u32
}
