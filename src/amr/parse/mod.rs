//! The built-in caption parser: English caption text to an AMR graph with ISI-style `~e.N`
//! token alignments, by rules and lexicons and no model weights.
//!
//! It covers the language of image captions: noun phrases with determiners, numbers,
//! adjectives, colours, compounds and possessives; subject–verb–object clauses;
//! prepositional phrases and locations; participle phrases and relative clauses ("a man
//! wearing a hat", "a dog that runs"); `and` coordination; `there is/are`; the copula with
//! adjectives, nouns and places; agentive nouns as AMR writes them (`teacher` →
//! `(p / person :ARG0-of (t / teach-01))`); subordinate `while`/`as` clauses and `to`
//! purposes. PropBank frames and the role of each frame's subject come from
//! `data/lexicon/amr-frames.txt`, word classes from WordNet (`data/lexicon/wordnet-parse.txt`);
//! see `docs/parser.md` for where they come from and how well the parser does.
//!
//! Every concept is aligned to the token that expresses it (the entity of an agentive noun
//! shares the token of its frame), so the graphs need no separate alignment step.
//!
//! ```
//! use capflow::amr::parse::parse_caption;
//! use capflow::amr::penman::encode;
//!
//! let g = parse_caption("A man wearing a hat rides a horse .");
//! let text = encode(&g);
//! assert!(text.contains("(r / ride-01~e.5"));
//! assert!(text.contains(":ARG0-of (w / wear-01~e.2"));
//! ```

mod grammar;
mod lexicon;
mod words;

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::fmt::Write;

use grammar::{Grammar, NodeId, Target, Word};
use lexicon::ParseLexicon;

use crate::amr::token_align::tokenize;
use crate::amr::Graph;

/// Parses one caption into an AMR graph with `# ::snt` and `# ::tok` metadata and `~e.N`
/// alignments. A caption with no content word gives a graph with no triples.
pub fn parse_caption(text: &str) -> Graph {
    let tokens = tokenize(text);
    let mut graph = parse_tokens(&tokens);
    graph.metadata = vec![
        ("snt".to_string(), text.trim().to_string()),
        ("tok".to_string(), tokens.join(" ")),
    ];
    graph
}

/// Parses an already tokenized sentence (ISI-style tokens, as `# ::tok`); the alignments
/// index `tokens`. The graph has no metadata.
pub fn parse_tokens(tokens: &[String]) -> Graph {
    let words = words_of(tokens);
    let lex = ParseLexicon::embedded();
    let mut grammar = Grammar::new(lex, &words, false);
    let mut top = grammar.sentence();
    if !top.is_some_and(|t| is_frame(&grammar.nodes[t].concept)) {
        // No verb agreed with its subject: read again letting any verb end the subject.
        let mut relaxed = Grammar::new(lex, &words, true);
        let relaxed_top = relaxed.sentence();
        if relaxed_top.is_some_and(|t| is_frame(&relaxed.nodes[t].concept)) {
            grammar = relaxed;
            top = relaxed_top;
        }
    }
    let Some(top) = top else {
        return Graph::default();
    };
    let text = penman_text(&grammar.nodes, top);
    // The text is made here from concepts that are plain words; should it still not parse,
    // the caption gets an empty graph rather than a panic.
    crate::amr::penman::parse(&text).unwrap_or_default()
}

fn is_frame(concept: &str) -> bool {
    concept
        .rsplit_once('-')
        .is_some_and(|(_, sense)| sense.len() == 2 && sense.bytes().all(|b| b.is_ascii_digit()))
}

/// Tokens to words: lower-cased, with `@-@`-joined pieces as one hyphenated word.
fn words_of(tokens: &[String]) -> Vec<Word> {
    let mut words: Vec<Word> = Vec::with_capacity(tokens.len());
    let mut glue = false;
    for (i, token) in tokens.iter().enumerate() {
        if token == "@-@" {
            if let Some(last) = words.last_mut() {
                last.text.push('-');
                glue = true;
                continue;
            }
        }
        if glue {
            if let Some(last) = words.last_mut() {
                last.text.push_str(&token.to_lowercase());
                glue = false;
                continue;
            }
        }
        words.push(Word {
            text: token.to_lowercase(),
            token: i,
        });
    }
    words
}

/// The PENMAN text of the tree under `top`: owned edges nested, references as variables,
/// pronouns that refer back (`:same-as`) replaced by their antecedent.
fn penman_text(nodes: &[grammar::Node], top: NodeId) -> String {
    let resolve = |mut n: NodeId| {
        for _ in 0..nodes.len() {
            match nodes[n].edges.first() {
                Some((role, Target::Ref(a))) if role == ":same-as" => n = *a,
                _ => break,
            }
        }
        n
    };
    // Variables in document order: first letter of the concept, then numbered.
    let mut vars: HashMap<NodeId, String> = HashMap::new();
    let mut letters: HashMap<char, usize> = HashMap::new();
    let mut stack = vec![top];
    let mut order = Vec::new();
    while let Some(n) = stack.pop() {
        let n = resolve(n);
        if vars.contains_key(&n) {
            continue;
        }
        let letter = nodes[n]
            .concept
            .chars()
            .next()
            .filter(char::is_ascii_lowercase)
            .unwrap_or('x');
        let count = letters.entry(letter).or_default();
        *count += 1;
        let var = if *count == 1 {
            letter.to_string()
        } else {
            format!("{letter}{count}")
        };
        vars.insert(n, var);
        order.push(n);
        for (_, t) in nodes[n].edges.iter().rev() {
            if let Target::Own(c) = t {
                stack.push(*c);
            }
        }
    }
    let mut out = String::with_capacity(64 * order.len());
    let mut written = vec![false; nodes.len()];
    write_node(nodes, top, &vars, &resolve, &mut written, &mut out);
    out
}

fn write_node(
    nodes: &[grammar::Node],
    n: NodeId,
    vars: &HashMap<NodeId, String>,
    resolve: &dyn Fn(NodeId) -> NodeId,
    written: &mut Vec<bool>,
    out: &mut String,
) {
    let n = resolve(n);
    let var = &vars[&n];
    if written[n] {
        out.push_str(var);
        return;
    }
    written[n] = true;
    let node = &nodes[n];
    let concept: String = node
        .concept
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '-')
        .collect();
    let concept = if concept.is_empty() {
        "thing"
    } else {
        &concept
    };
    let _ = write!(out, "({var} / {concept}");
    if let Some(t) = node.token {
        let _ = write!(out, "~e.{t}");
    }
    for (role, target) in &node.edges {
        match target {
            Target::Own(c) | Target::Ref(c) => {
                let c = resolve(*c);
                if !vars.contains_key(&c) || c == n {
                    continue;
                }
                let _ = write!(out, " {role} ");
                write_node(nodes, c, vars, resolve, written, out);
            }
            Target::Const(value, token) => {
                if value.is_empty() {
                    continue;
                }
                let _ = write!(out, " {role} {value}");
                if let Some(t) = token {
                    let _ = write!(out, "~e.{t}");
                }
            }
        }
    }
    out.push(')');
}
