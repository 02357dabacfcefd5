//! The graph as the realizer walks it: nodes by index, and per node the links it owns.
//!
//! A PENMAN graph is a tree plus re-entrancies. Triples arrive in penman's normal form, where
//! `:ARG0-of` is already turned back into `(w, :ARG0, m)`; the tree is recovered from the
//! document order (penman writes a node's instance triple right after the edge that introduces
//! it), so `(m / man :ARG0-of (w / wear-01))` is again "man, with an inverse `ARG0` child
//! wear-01". Every other edge between nodes is a re-entrancy, owned by its source, and is
//! realized as a re-mention ("the man", "his"). Graphs built in another order (sampled
//! subgraphs, random graphs) still get a spanning tree: nodes not reached through their
//! introducing edge are claimed by any edge from the part already reached.

use crate::amr::graph::Graph;
use crate::text::inflect::FnvMap;

/// What a link points at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Target<'g> {
    Node(usize),
    Const(&'g str),
}

/// One edge or attribute, seen from the node that owns it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Link<'g> {
    /// The role without its colon: `ARG0`, `mod`, `op1`.
    pub role: &'g str,
    /// The owner is the edge's target: the role reads `role-of` from the owner.
    pub inverse: bool,
    pub target: Target<'g>,
    /// A tree edge (the target's first mention) rather than a re-entrancy.
    pub tree: bool,
    owner: usize,
}

impl Link<'_> {
    /// The node that owns this link.
    pub fn owner_node(&self) -> usize {
        self.owner
    }

    /// Whether this is `role` read from the owner, whichever way penman normalized it:
    /// `consist-of` matches both an outgoing `:consist-of` and an inverse `:consist`.
    pub fn is(&self, role: &str) -> bool {
        match role.strip_suffix("-of") {
            Some(base) if self.inverse => self.role == base,
            _ if self.inverse => self.role.strip_suffix("-of") == Some(role),
            _ => self.role == role,
        }
    }

    pub fn node(&self) -> Option<usize> {
        match self.target {
            Target::Node(n) => Some(n),
            Target::Const(_) => None,
        }
    }

    /// `ARG0` → `Some(0)`; other roles `None`.
    pub fn arg(&self) -> Option<u8> {
        let digits = self.role.strip_prefix("ARG")?;
        match digits.as_bytes() {
            [d] if d.is_ascii_digit() => Some(d - b'0'),
            _ => None,
        }
    }
}

pub(super) struct Tree<'g> {
    /// Concept of each node (empty when the graph gave none).
    pub concepts: Vec<&'g str>,
    /// Links grouped by owner; `ranges[n]` is node `n`'s slice.
    pub links: Vec<Link<'g>>,
    ranges: Vec<(u32, u32)>,
    /// The top node, or the top constant for a graph that is a bare constant.
    pub top: Target<'g>,
}

impl<'g> Tree<'g> {
    pub fn new(graph: &'g Graph) -> Tree<'g> {
        let triples = &graph.triples;
        let mut index: FnvMap<&str, usize> = FnvMap::default();
        let mut concepts: Vec<&str> = Vec::new();
        // Position of each node's first instance triple.
        let mut defined_at: Vec<usize> = Vec::new();
        for (k, t) in triples.iter().enumerate() {
            if t.is_instance() && !index.contains_key(t.source.as_str()) {
                index.insert(&t.source, concepts.len());
                concepts.push(&t.target);
                defined_at.push(k);
            }
        }
        let n = concepts.len();
        // Triple k as (source node, target node or constant); instance triples are None.
        let ends: Vec<Option<(usize, Target)>> = triples
            .iter()
            .map(|t| {
                if t.is_instance() {
                    return None;
                }
                let source = *index.get(t.source.as_str())?;
                let target = match index.get(t.target.as_str()) {
                    Some(&m) => Target::Node(m),
                    None => Target::Const(&t.target),
                };
                Some((source, target))
            })
            .collect();
        // The edge penman wrote just before a node's instance triple introduced it.
        let introduced_by: Vec<Option<usize>> = defined_at
            .iter()
            .enumerate()
            .map(|(node, &k)| {
                let prev = k.checked_sub(1)?;
                match ends[prev]? {
                    (s, Target::Node(t)) if (t == node) != (s == node) => Some(prev),
                    _ => None,
                }
            })
            .collect();

        let top = match index.get(graph.top.as_str()) {
            Some(&t) => Target::Node(t),
            None if n > 0 => Target::Node(0),
            None => Target::Const(&graph.top),
        };
        // owner[k]: the node that owns triple k when it is a tree edge.
        let mut tree_owner: Vec<Option<usize>> = vec![None; triples.len()];
        let mut reached = vec![false; n];
        if let Target::Node(t) = top {
            reached[t] = true;
            let mut queue = vec![t];
            let mut strict = true;
            loop {
                while let Some(node) = queue.pop() {
                    claim_children(
                        node,
                        &ends,
                        &introduced_by,
                        strict,
                        &mut reached,
                        &mut tree_owner,
                        &mut queue,
                    );
                }
                // Nodes whose introducing edge hangs off an unreached part: take any edge.
                let next = ends.iter().enumerate().find_map(|(k, e)| match *e {
                    Some((s, Target::Node(t))) if reached[s] != reached[t] => Some(k),
                    _ => None,
                });
                match next {
                    Some(k) => {
                        if let Some((s, Target::Node(t))) = ends[k] {
                            let (owner, child) = if reached[s] { (s, t) } else { (t, s) };
                            reached[child] = true;
                            tree_owner[k] = Some(owner);
                            queue.push(child);
                            strict = false;
                        }
                    }
                    None => break,
                }
            }
        }

        let mut parent: Vec<Option<usize>> = vec![None; n];
        for (k, owner) in tree_owner.iter().enumerate() {
            if let (Some(owner), Some((s, Target::Node(t)))) = (*owner, ends[k]) {
                parent[if s == owner { t } else { s }] = Some(owner);
            }
        }
        let mut links: Vec<Link> = Vec::with_capacity(triples.len());
        let mut last_defined: Option<usize> = None;
        let mut next_definition = 0;
        for (k, t) in triples.iter().enumerate() {
            while next_definition < n && defined_at[next_definition] < k {
                last_defined = Some(next_definition);
                next_definition += 1;
            }
            let Some((source, target)) = ends[k] else {
                continue;
            };
            let role = t.role.strip_prefix(':').unwrap_or(&t.role);
            let link = match (tree_owner[k], target) {
                // Claimed from the target's side: `(m / man :ARG0-of (w / wear-01))`.
                (Some(owner), Target::Node(_)) if owner != source => Link {
                    role,
                    inverse: true,
                    target: Target::Node(source),
                    tree: true,
                    owner,
                },
                (Some(owner), _) => Link {
                    role,
                    inverse: false,
                    target,
                    tree: true,
                    owner,
                },
                // A re-entrancy is written inside a node whose subtree is still open at this
                // point: the source, unless only the target is (`:part-of p` under `arm`).
                (None, Target::Node(m))
                    if !open_at(source, last_defined, &parent)
                        && open_at(m, last_defined, &parent) =>
                {
                    Link {
                        role,
                        inverse: true,
                        target: Target::Node(source),
                        tree: false,
                        owner: m,
                    }
                }
                (None, _) => Link {
                    role,
                    inverse: false,
                    target,
                    tree: false,
                    owner: source,
                },
            };
            links.push(link);
        }
        links.sort_by_key(|l| l.owner);
        let mut ranges = vec![(0u32, 0u32); n];
        let mut start = 0;
        while start < links.len() {
            let owner = links[start].owner;
            let mut end = start;
            while end < links.len() && links[end].owner == owner {
                end += 1;
            }
            ranges[owner] = (start as u32, end as u32);
            start = end;
        }
        Tree {
            concepts,
            links,
            ranges,
            top,
        }
    }

    /// The links node `n` owns, in document order.
    pub fn links(&self, n: usize) -> &[Link<'g>] {
        let (a, b) = self.ranges[n];
        &self.links[a as usize..b as usize]
    }

    /// The first link of `n` with this role and direction.
    pub fn find(&self, n: usize, role: &str, inverse: bool) -> Option<&Link<'g>> {
        self.links(n)
            .iter()
            .find(|l| l.role == role && l.inverse == inverse)
    }

    /// The node `n` links to by role (outgoing), if any.
    pub fn child(&self, n: usize, role: &str) -> Option<usize> {
        self.find(n, role, false).and_then(Link::node)
    }
}

/// Whether `node` is `last` or one of its ancestors: its PENMAN subtree is still open.
fn open_at(node: usize, last: Option<usize>, parent: &[Option<usize>]) -> bool {
    let mut at = last;
    for _ in 0..parent.len() + 1 {
        match at {
            Some(a) if a == node => return true,
            Some(a) => at = parent[a],
            None => return false,
        }
    }
    false
}

/// Claims the unreached neighbours of `node` (in document order) whose introducing edge is
/// the one that links them to `node`, or any neighbour when `strict` is off.
fn claim_children(
    node: usize,
    ends: &[Option<(usize, Target)>],
    introduced_by: &[Option<usize>],
    strict: bool,
    reached: &mut [bool],
    tree_owner: &mut [Option<usize>],
    queue: &mut Vec<usize>,
) {
    let mut claimed = Vec::new();
    for (k, e) in ends.iter().enumerate() {
        let Some((s, Target::Node(t))) = *e else {
            continue;
        };
        let other = if s == node {
            t
        } else if t == node {
            s
        } else {
            continue;
        };
        if reached[other] {
            continue;
        }
        if strict && introduced_by[other].is_some_and(|intro| intro != k) {
            continue;
        }
        reached[other] = true;
        tree_owner[k] = Some(node);
        claimed.push(other);
    }
    // Depth-first in document order: the first child is explored first.
    queue.extend(claimed.into_iter().rev());
}
