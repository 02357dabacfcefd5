//! Realize an AMR graph as an English sentence, with no model: SSA's built-in AMR-to-text.
//!
//! The realizer walks the graph from its top: a predicate becomes a clause (subject, verb,
//! objects, prepositional arguments, modifiers, subordinate clauses), everything else a noun
//! phrase (determiner, premodifiers, head, postmodifiers, relative phrases from inverse roles).
//! Sentences are in the tokenized style of Flickr30k captions: present simple
//! ("A man rides a bike"), words separated by single spaces, a final " .", the first word
//! capitalized. Inflection and word classes come from a WordNet-derived lexicon
//! ([`crate::text::inflect`]); the coverage and limits are in `docs/realizer.md`.
//!
//! ```
//! use capflow::amr::penman::parse;
//! use capflow::amr::realize::Realizer;
//!
//! let g = parse("(r / ride-01 :ARG0 (m / man :mod (y / young)) :ARG1 (b / bicycle))").unwrap();
//! assert_eq!(Realizer::builtin().realize(&g), "A young man rides a bicycle .");
//! ```

mod grammar;
mod tree;
mod words;
pub(crate) use words::NUMBER_WORDS;

#[cfg(test)]
mod tests;

use std::sync::OnceLock;

use crate::amr::graph::Graph;
use crate::amr::penman;
use crate::models::AmrToText;
use crate::text::inflect::Lexicon;
use crate::{Error, Result};

/// The built-in AMR-to-English realizer. Stateless after construction and `Sync`: one instance
/// serves every worker.
pub struct Realizer {
    lexicon: &'static Lexicon,
}

impl Realizer {
    /// The realizer with the embedded WordNet lexicon, built on first use.
    pub fn builtin() -> &'static Realizer {
        static REALIZER: OnceLock<Realizer> = OnceLock::new();
        REALIZER.get_or_init(|| Realizer {
            lexicon: Lexicon::wordnet(),
        })
    }

    /// One sentence (several for a `multi-sentence` graph) for any graph; never panics, never
    /// empty. A graph without nodes gives "Something .".
    pub fn realize(&self, graph: &Graph) -> String {
        let mut out = String::with_capacity(96);
        self.realize_into(graph, &mut out);
        out
    }

    /// Like [`Realizer::realize`], appending to `out` so a caller can reuse one buffer.
    pub fn realize_into(&self, graph: &Graph, out: &mut String) {
        let tree = tree::Tree::new(graph);
        let start = out.len();
        let mut sentence = String::with_capacity(96);
        grammar::Writer::new(self.lexicon, &tree, &mut sentence).graph();
        if start > 0 && !out.ends_with(' ') {
            out.push(' ');
        }
        out.push_str(&sentence);
    }
}

impl AmrToText for Realizer {
    /// Parses each PENMAN graph with capflow's codec and realizes it. A graph that does not
    /// parse fails the batch with its index, its `# ::id` when it has one, and the position.
    fn generate_sentences(&self, graphs: &[String]) -> Result<Vec<String>> {
        graphs
            .iter()
            .enumerate()
            .map(|(i, text)| match penman::parse(text) {
                Ok(graph) => Ok(self.realize(&graph)),
                Err(e) => Err(Error::invalid(
                    format!("AMR graph {} of the batch{}", i + 1, graph_id(text)),
                    format!("PENMAN does not parse at {e}; the built-in realizer needs one graph in PENMAN notation per entry"),
                )),
            })
            .collect()
    }
}

/// " (`# ::id x`)" from the graph's metadata lines, when it has one.
fn graph_id(text: &str) -> String {
    text.lines()
        .filter_map(|l| l.trim_start().strip_prefix('#'))
        .find_map(|l| {
            let rest = l.split("::id").nth(1)?;
            let id = rest.split("::").next()?.trim();
            (!id.is_empty()).then(|| format!(" (# ::id {id})"))
        })
        .unwrap_or_default()
}
