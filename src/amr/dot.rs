//! Graphviz DOT rendering of a meta-vgAMR, for looking at merges (`capflow amr inspect --dot`).
//!
//! Grounded nodes are filled (as in the paper's figures), nodes grounded to an unknown region
//! are dashed, the root has a double border, and synonym lists are written one label per line.

use std::fmt::Write;

use crate::amr::merge::MetaGraph;

/// Escapes a string for a double-quoted DOT id.
fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The meta graph as a DOT digraph named `name`.
pub fn to_dot(meta: &MetaGraph, name: &str) -> String {
    let mut dot = String::new();
    // Writing into a String cannot fail.
    let _ = writeln!(dot, "digraph {} {{", quote(name));
    let _ = writeln!(
        dot,
        "  node [shape=box, style=rounded, fontname=\"Helvetica\"];"
    );
    for (i, node) in meta.nodes.iter().enumerate() {
        let mut label = format!("{} / {}", meta.var(i), node.labels.join("\n"));
        let mut style = vec!["rounded"];
        let mut extra = String::new();
        if let Some(g) = &node.grounding {
            if g.unknown {
                style.push("dashed");
                label.push_str("\n[unknown]");
            } else {
                style.push("filled");
                extra.push_str(", fillcolor=\"#cfe8ff\"");
                let _ = write!(
                    label,
                    "\n[{} box{}]",
                    g.boxes.len(),
                    if g.boxes.len() == 1 { "" } else { "es" }
                );
            }
        }
        if i == meta.root {
            extra.push_str(", peripheries=2");
        }
        let _ = writeln!(
            dot,
            "  {} [label={}, style={}{}];",
            quote(&meta.var(i)),
            quote(&label),
            quote(&style.join(",")),
            extra
        );
    }
    for a in &meta.attributes {
        let id = format!("{}{}", meta.var(a.node), a.role.replace(':', "_"));
        let _ = writeln!(
            dot,
            "  {} [label={}, shape=plaintext];",
            quote(&id),
            quote(&a.value)
        );
        let _ = writeln!(
            dot,
            "  {} -> {} [label={}];",
            quote(&meta.var(a.node)),
            quote(&id),
            quote(&a.role)
        );
    }
    for e in &meta.edges {
        let style = if e.role == ":subset" {
            ", style=dashed"
        } else {
            ""
        };
        let _ = writeln!(
            dot,
            "  {} -> {} [label={}{}];",
            quote(&meta.var(e.source)),
            quote(&meta.var(e.target)),
            quote(&e.role),
            style
        );
    }
    dot.push_str("}\n");
    dot
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::amr::merge::{MetaEdge, MetaNode};

    #[test]
    fn renders_nodes_edges_and_escapes_quotes() {
        let meta = MetaGraph {
            nodes: vec![
                MetaNode {
                    labels: vec!["sit-01".into()],
                    grounding: None,
                    origins: vec![],
                },
                MetaNode {
                    labels: vec!["man".into(), "person".into()],
                    grounding: None,
                    origins: vec![],
                },
            ],
            edges: vec![MetaEdge {
                source: 0,
                role: ":ARG0".into(),
                target: 1,
            }],
            attributes: vec![],
            root: 0,
            captions: vec![],
        };
        let dot = to_dot(&meta, "img \"1\"");
        assert!(dot.starts_with("digraph \"img \\\"1\\\"\" {"));
        assert!(dot.contains("\"z0\" -> \"z1\" [label=\":ARG0\"];"));
        assert!(dot.contains("z1 / man\\nperson"));
        assert!(dot.contains("peripheries=2"));
        assert!(dot.trim_end().ends_with('}'));
    }
}
