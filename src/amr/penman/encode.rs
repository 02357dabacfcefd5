//! [`Graph`] to PENMAN text.
//!
//! The triples of a parsed graph are in document order, so the tree can be rebuilt in one pass:
//! each triple is written into the deepest open node it belongs to (as `role target` in its
//! source node, or as `role-of source` in its target node), and a node is opened where the next
//! triple is the target's `:instance`. Writing into the deepest candidate keeps every node the
//! original tree still had open available, so every graph `parse` produces comes back with the
//! same triples in the same order (the layout may differ where the triples allow two).
//!
//! A triple that fits nowhere yet (in graphs built or edited by hand) waits until one of its
//! nodes is opened; triples not connected to the top cannot be written in PENMAN and are left
//! out with a warning.

use std::collections::HashSet;
use std::fmt::Write;

use super::decode::is_inverted;
use crate::amr::graph::{Alignment, Graph, Triple};

const INDENT: &str = "      ";

struct Writer<'g> {
    graph: &'g Graph,
    variables: HashSet<&'g str>,
    /// `(role alignment, target alignment)` per triple; the first of each kind is written.
    marks: Vec<(Option<&'g Alignment>, Option<&'g Alignment>)>,
    out: String,
    stack: Vec<&'g str>,
}

/// Serializes `graph` as PENMAN: its metadata as `# ::key value` lines, then the tree with
/// alignment markers.
pub fn encode(graph: &Graph) -> String {
    let mut marks = vec![(None, None); graph.triples.len()];
    for a in &graph.alignments {
        if let Some(slot) = marks.get_mut(a.triple) {
            let place = if a.on_role { &mut slot.0 } else { &mut slot.1 };
            if place.is_none() {
                *place = Some(a);
            }
        }
    }
    let mut w = Writer {
        graph,
        variables: graph
            .triples
            .iter()
            .filter(|t| t.is_instance())
            .map(|t| t.source.as_str())
            .collect(),
        marks,
        out: String::with_capacity(64 + 24 * graph.triples.len()),
        stack: Vec::new(),
    };
    for (key, value) in &graph.metadata {
        if value.is_empty() {
            let _ = writeln!(w.out, "# ::{key}");
        } else {
            let _ = writeln!(w.out, "# ::{key} {value}");
        }
    }
    w.tree();
    w.out
}

fn write_mark(out: &mut String, mark: Option<&Alignment>) {
    if let Some(a) = mark {
        out.push('~');
        out.push_str(&a.prefix);
        for (i, index) in a.indices.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(out, "{index}");
        }
    }
}

impl<'g> Writer<'g> {
    fn triple(&self, i: usize) -> &'g Triple {
        &self.graph.triples[i]
    }

    /// Whether triple `i` is the `:instance` of `var`, so that `var` opens a node there.
    fn opens(&self, i: usize, var: &str) -> bool {
        i < self.graph.triples.len() && {
            let t = self.triple(i);
            t.is_instance() && t.source == var
        }
    }

    /// Opens `var` and writes its concept when triple `i` is its `:instance`; returns how many
    /// triples were consumed.
    fn open(&mut self, var: &'g str, i: usize) -> usize {
        self.out.push('(');
        self.out.push_str(var);
        self.stack.push(var);
        if self.opens(i, var) {
            let concept = &self.triple(i).target;
            if !concept.is_empty() {
                self.out.push_str(" / ");
                self.out.push_str(concept);
                write_mark(&mut self.out, self.marks[i].1);
            }
            1
        } else {
            0
        }
    }

    fn close_to(&mut self, depth: usize) {
        while self.stack.len() > depth + 1 {
            self.stack.pop();
            self.out.push(')');
        }
    }

    fn tree(&mut self) {
        let n = self.graph.triples.len();
        let top = self.graph.top.as_str();
        let mut i = self.open(top, 0);
        let mut waiting: Vec<usize> = Vec::new();
        while i < n {
            match self.place(i, true) {
                Some(consumed) => {
                    i += consumed;
                    self.retry(&mut waiting);
                }
                None => {
                    waiting.push(i);
                    i += 1;
                }
            }
        }
        if !waiting.is_empty() {
            tracing::warn!(
                top,
                left_out = waiting.len(),
                "triples not connected to the top cannot be written in PENMAN"
            );
        }
        self.close_to(0);
        self.out.push_str(")\n");
    }

    fn retry(&mut self, waiting: &mut Vec<usize>) {
        let mut k = 0;
        while k < waiting.len() {
            // A waiting triple never opens a node: the triple after it is placed already.
            if self.place(waiting[k], false).is_some() {
                waiting.remove(k);
                k = 0;
            } else {
                k += 1;
            }
        }
    }

    /// Writes triple `i` into the deepest open node it fits; returns how many triples that
    /// consumed (2 when it opened a node with the concept in triple `i + 1`), or `None`.
    fn place(&mut self, i: usize, may_open: bool) -> Option<usize> {
        let t = self.triple(i);
        for depth in (0..self.stack.len()).rev() {
            let x = self.stack[depth];
            if x == t.source {
                let nest = may_open && !t.target.is_empty() && self.opens(i + 1, &t.target);
                // A role that looks inverted is turned around by the parser unless its target
                // is a constant.
                let fits =
                    !is_inverted(&t.role) || (!nest && !self.variables.contains(t.target.as_str()));
                if fits {
                    self.close_to(depth);
                    return Some(self.write_edge(i, &t.role, &t.target, nest));
                }
            }
            if x == t.target && !t.is_instance() {
                let nest = may_open && self.opens(i + 1, &t.source);
                // Written as `role-of source`, which the parser turns back into `t` when the
                // source is a nested node or a variable.
                if nest || self.variables.contains(t.source.as_str()) {
                    self.close_to(depth);
                    let role = format!("{}-of", t.role);
                    return Some(self.write_edge(i, &role, &t.source, nest));
                }
            }
        }
        None
    }

    fn write_edge(&mut self, i: usize, role: &str, target: &'g str, nest: bool) -> usize {
        self.out.push('\n');
        for _ in 0..self.stack.len() {
            self.out.push_str(INDENT);
        }
        self.out.push_str(role);
        write_mark(&mut self.out, self.marks[i].0);
        if nest {
            self.out.push(' ');
            1 + self.open(target, i + 1)
        } else {
            if !target.is_empty() {
                self.out.push(' ');
                self.out.push_str(target);
                write_mark(&mut self.out, self.marks[i].1);
            }
            1
        }
    }
}
