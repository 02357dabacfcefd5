//! UPGMA (average linkage) reproducing scipy's `linkage(y, method="average")` bit for bit.
//!
//! scipy runs the nearest-neighbour-chain algorithm (`_hierarchy.nn_chain`), sorts the merges
//! by height with a stable sort, and relabels them with a union-find so that cluster `n + s` is
//! the cluster made at step `s`. The same steps in the same order, with the same floating-point
//! update `(n_x d_xi + n_y d_yi) / (n_x + n_y)`, give the same matrix, including which pair wins
//! a tie and the order of the two ids in a row (smaller id first).

use super::distance::{condensed_index, DistanceMatrix};

/// One merge of a dendrogram: a row `(a, b, height, size)` of scipy's linkage matrix `Z`.
///
/// Ids below `n` are the input points; id `n + s` is the cluster formed at step `s`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkageStep {
    /// The smaller of the two merged cluster ids.
    pub a: usize,
    /// The larger of the two merged cluster ids.
    pub b: usize,
    /// The average distance between the members of `a` and the members of `b`.
    pub height: f64,
    /// The number of points in the merged cluster.
    pub size: usize,
}

/// A dendrogram over `leaves` points: `leaves - 1` merges in order of height.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Linkage {
    pub leaves: usize,
    pub steps: Vec<LinkageStep>,
}

/// Reusable buffers for [`UpgmaWorkspace::linkage_into`], so that clustering millions of small
/// matrices (SSA: one per image) allocates nothing after the first call.
#[derive(Clone, Debug, Default)]
pub struct UpgmaWorkspace {
    /// Working copy of the condensed distances, updated in place as clusters merge.
    distances: Vec<f64>,
    /// Size of the cluster whose representative slot is `i`; 0 once the slot is merged away.
    sizes: Vec<usize>,
    /// The nearest-neighbour chain of representative slots.
    chain: Vec<usize>,
    /// Union-find parents over cluster ids `0..2n-1`, for scipy's relabelling pass.
    parents: Vec<usize>,
}

/// The average-linkage dendrogram of `distances`, equal to scipy's
/// `linkage(squareform(D), method="average")`.
pub fn upgma(distances: &DistanceMatrix) -> Linkage {
    let mut linkage = Linkage::default();
    UpgmaWorkspace::default().linkage_into(distances, &mut linkage);
    linkage
}

impl UpgmaWorkspace {
    pub fn new() -> Self {
        Self::default()
    }

    /// Computes the average-linkage dendrogram of `distances` into `out`, reusing this
    /// workspace's buffers and `out`'s step vector.
    pub fn linkage_into(&mut self, distances: &DistanceMatrix, out: &mut Linkage) {
        let n = distances.len();
        out.leaves = n;
        out.steps.clear();
        if n < 2 {
            return;
        }
        self.nn_chain(distances, &mut out.steps);
        // scipy: `np.argsort(Z[:, 2], kind="mergesort")`, a stable sort. Heights are finite,
        // and -0.0 == 0.0 as in numpy.
        out.steps.sort_by(|x, y| {
            x.height
                .partial_cmp(&y.height)
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        self.relabel(n, &mut out.steps);
    }

    /// scipy's `nn_chain`: merges recorded as representative slots `(x, y)`, `x < y`, in the
    /// order they are found (not yet sorted by height).
    fn nn_chain(&mut self, distances: &DistanceMatrix, steps: &mut Vec<LinkageStep>) {
        let n = distances.len();
        let d = &mut self.distances;
        d.clear();
        d.extend_from_slice(distances.condensed());
        self.sizes.clear();
        self.sizes.resize(n, 1);
        let size = &mut self.sizes;
        let chain = &mut self.chain;
        chain.clear();

        for _ in 0..n - 1 {
            if chain.is_empty() {
                // The first slot still in use starts a new chain.
                let start = size.iter().position(|&s| s > 0).unwrap_or(0);
                chain.push(start);
            }

            // Walk the chain until its last two slots are each other's nearest neighbours.
            let (mut x, mut y, mut current_min);
            loop {
                x = chain[chain.len() - 1];
                // Prefer the previous chain element on ties, so the chain cannot cycle.
                if chain.len() > 1 {
                    y = chain[chain.len() - 2];
                    current_min = d[pair_index(n, x, y)];
                } else {
                    y = 0;
                    current_min = f64::INFINITY;
                }
                for (i, &s) in size.iter().enumerate() {
                    if s == 0 || i == x {
                        continue;
                    }
                    let dist = d[pair_index(n, x, i)];
                    if dist < current_min {
                        current_min = dist;
                        y = i;
                    }
                }
                if chain.len() > 1 && y == chain[chain.len() - 2] {
                    break;
                }
                chain.push(y);
            }
            chain.truncate(chain.len() - 2);

            // fastcluster's convention, kept by scipy: the merged cluster lives in slot y > x.
            if x > y {
                std::mem::swap(&mut x, &mut y);
            }
            let (nx, ny) = (size[x], size[y]);
            steps.push(LinkageStep {
                a: x,
                b: y,
                height: current_min,
                size: nx + ny,
            });
            size[x] = 0;
            size[y] = nx + ny;

            let (wx, wy, total) = (nx as f64, ny as f64, (nx + ny) as f64);
            for i in 0..n {
                if size[i] == 0 || i == y {
                    continue;
                }
                let iy = pair_index(n, i, y);
                d[iy] = (wx * d[pair_index(n, i, x)] + wy * d[iy]) / total;
            }
        }
    }

    /// scipy's `label`: turns representative slots into cluster ids, smaller id first.
    fn relabel(&mut self, n: usize, steps: &mut [LinkageStep]) {
        let parents = &mut self.parents;
        parents.clear();
        parents.extend(0..2 * n - 1);
        let size_of = |id: usize, steps: &[LinkageStep]| {
            if id < n {
                1
            } else {
                steps[id - n].size
            }
        };
        for s in 0..steps.len() {
            let (x, y) = (find(parents, steps[s].a), find(parents, steps[s].b));
            let (a, b) = if x < y { (x, y) } else { (y, x) };
            let next = n + s;
            parents[a] = next;
            parents[b] = next;
            let size = size_of(a, steps) + size_of(b, steps);
            steps[s] = LinkageStep {
                a,
                b,
                height: steps[s].height,
                size,
            };
        }
    }
}

/// Condensed position of an unordered pair of distinct slots.
#[inline]
fn pair_index(n: usize, i: usize, j: usize) -> usize {
    if i < j {
        condensed_index(n, i, j)
    } else {
        condensed_index(n, j, i)
    }
}

/// Root of `x`'s cluster, compressing the path as scipy's `LinkageUnionFind.find` does.
fn find(parents: &mut [usize], mut x: usize) -> usize {
    let mut p = x;
    while parents[x] != x {
        x = parents[x];
    }
    while parents[p] != x {
        let next = parents[p];
        parents[p] = x;
        p = next;
    }
    x
}

impl Linkage {
    /// The rows of scipy's `Z` as floats: `[a, b, height, size]`.
    pub fn to_scipy_rows(&self) -> Vec<[f64; 4]> {
        self.steps
            .iter()
            .map(|s| [s.a as f64, s.b as f64, s.height, s.size as f64])
            .collect()
    }

    /// The two clusters merged to form cluster `id`, or `None` for a leaf or an unknown id.
    pub fn children(&self, id: usize) -> Option<(usize, usize)> {
        let step = self.steps.get(id.checked_sub(self.leaves)?)?;
        Some((step.a, step.b))
    }

    /// The points under cluster `id` (depth-first, right child first).
    pub fn members(&self, id: usize) -> Vec<usize> {
        let mut members = Vec::new();
        let mut stack = vec![id];
        while let Some(node) = stack.pop() {
            match self.children(node) {
                Some((a, b)) => {
                    stack.push(a);
                    stack.push(b);
                }
                None => members.push(node),
            }
        }
        members
    }

    /// Flat labels for `k` clusters, numbered as scikit-learn's `_hc_cut` numbers them.
    ///
    /// scikit-learn undoes the `k - 1` highest merges by keeping the cut's cluster ids in a
    /// Python `heapq` of negated ids and labels the clusters in the heap's array order, so the
    /// numbering depends on heap internals, which are replayed here. Returns `None` unless
    /// `1 <= k <= leaves`.
    pub fn cut(&self, k: usize) -> Option<Vec<usize>> {
        let n = self.leaves;
        if k == 0 || k > n {
            return None;
        }
        let mut labels = vec![0; n];
        if n == 1 {
            return Some(labels);
        }
        let root = 2 * n - 2;
        let mut heap: Vec<i64> = vec![-(root as i64)];
        for _ in 1..k {
            // heap[0] is the largest cluster id still in the cut; it is a merge because fewer
            // than `n` clusters have been taken apart.
            let largest = usize::try_from(-heap[0]).ok()?;
            let (a, b) = self.children(largest)?;
            python_heap::push(&mut heap, -(a as i64));
            python_heap::push_pop(&mut heap, -(b as i64));
        }
        for (label, &node) in heap.iter().enumerate() {
            for point in self.members(usize::try_from(-node).ok()?) {
                labels[point] = label;
            }
        }
        Some(labels)
    }
}

/// Python's `heapq.heappush` and `heapq.heappushpop` on a list, step for step, so that the
/// array order (which scikit-learn turns into cluster labels) is the same.
mod python_heap {
    pub fn push(heap: &mut Vec<i64>, item: i64) {
        heap.push(item);
        let last = heap.len() - 1;
        sift_down(heap, 0, last);
    }

    pub fn push_pop(heap: &mut [i64], item: i64) -> i64 {
        if !heap.is_empty() && heap[0] < item {
            let top = std::mem::replace(&mut heap[0], item);
            sift_up(heap, 0);
            return top;
        }
        item
    }

    /// `heapq._siftdown`: move the item at `pos` towards the root.
    fn sift_down(heap: &mut [i64], start: usize, mut pos: usize) {
        let item = heap[pos];
        while pos > start {
            let parent = (pos - 1) >> 1;
            if item < heap[parent] {
                heap[pos] = heap[parent];
                pos = parent;
                continue;
            }
            break;
        }
        heap[pos] = item;
    }

    /// `heapq._siftup`: bubble the smaller child up to a leaf, then sift the item down.
    fn sift_up(heap: &mut [i64], mut pos: usize) {
        let end = heap.len();
        let start = pos;
        let item = heap[pos];
        let mut child = 2 * pos + 1;
        while child < end {
            let right = child + 1;
            if right < end && heap[child] >= heap[right] {
                child = right;
            }
            heap[pos] = heap[child];
            pos = child;
            child = 2 * pos + 1;
        }
        heap[pos] = item;
        sift_down(heap, start, pos);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(a: usize, b: usize, height: f64, size: usize) -> LinkageStep {
        LinkageStep { a, b, height, size }
    }

    /// The worked example of the Wikipedia UPGMA article (points a..e): merges at 17 (a, b),
    /// 22 (ab, e), 28 (c, d) and 33 (abe, cd).
    fn wikipedia() -> DistanceMatrix {
        DistanceMatrix::from_rows(&[
            [0.0, 17.0, 21.0, 31.0, 23.0],
            [17.0, 0.0, 30.0, 34.0, 21.0],
            [21.0, 30.0, 0.0, 28.0, 39.0],
            [31.0, 34.0, 28.0, 0.0, 43.0],
            [23.0, 21.0, 39.0, 43.0, 0.0],
        ])
        .unwrap()
    }

    #[test]
    fn wikipedia_worked_example() {
        let z = upgma(&wikipedia());
        assert_eq!(z.leaves, 5);
        assert_eq!(
            z.steps,
            vec![
                step(0, 1, 17.0, 2),
                step(4, 5, 22.0, 3),
                step(2, 3, 28.0, 2),
                step(6, 7, 33.0, 5),
            ]
        );
    }

    #[test]
    fn workspace_reuse_gives_the_same_result() {
        let mut ws = UpgmaWorkspace::new();
        let mut out = Linkage::default();
        let small = DistanceMatrix::from_condensed(vec![3.0]).unwrap();
        ws.linkage_into(&wikipedia(), &mut out);
        ws.linkage_into(&small, &mut out);
        assert_eq!(out.steps, vec![step(0, 1, 3.0, 2)]);
        ws.linkage_into(&wikipedia(), &mut out);
        assert_eq!(out, upgma(&wikipedia()));
    }

    #[test]
    fn single_point_has_no_merges() {
        let z = upgma(&DistanceMatrix::from_condensed(vec![]).unwrap());
        assert_eq!(z.leaves, 1);
        assert!(z.steps.is_empty());
        assert_eq!(z.cut(1), Some(vec![0]));
    }

    #[test]
    fn cut_of_the_worked_example() {
        // Hand-derived from sklearn's `_hc_cut`: k=2 pops root 8 and pushes -6, -7 -> heap
        // [-7, -6]: cluster 7 = {c, d} gets label 0, cluster 6 = {a, b, e} label 1.
        let z = upgma(&wikipedia());
        assert_eq!(z.cut(1), Some(vec![0; 5]));
        assert_eq!(z.cut(2), Some(vec![1, 1, 0, 0, 1]));
        assert_eq!(z.cut(5).map(|l| l.len()), Some(5));
        assert_eq!(z.cut(0), None);
        assert_eq!(z.cut(6), None);
        let mut members = z.members(6);
        members.sort_unstable();
        assert_eq!(members, vec![0, 1, 4]);
    }

    #[test]
    fn python_heap_matches_heapq() {
        // heapq: h=[]; for x in [5, 3, 8, 1, 9, 2]: heappush(h, x) -> [1, 3, 2, 5, 9, 8]
        let mut h = Vec::new();
        for x in [5, 3, 8, 1, 9, 2] {
            python_heap::push(&mut h, x);
        }
        assert_eq!(h, vec![1, 3, 2, 5, 9, 8]);
        // heappushpop(h, 4) -> returns 1, h = [2, 3, 4, 5, 9, 8]
        assert_eq!(python_heap::push_pop(&mut h, 4), 1);
        assert_eq!(h, vec![2, 3, 4, 5, 9, 8]);
        // heappushpop(h, 0) -> returns 0 unchanged
        assert_eq!(python_heap::push_pop(&mut h, 0), 0);
        assert_eq!(h, vec![2, 3, 4, 5, 9, 8]);
    }
}
