//! Token alignment of AMR graphs that come without one: JAMR-style rules that tie each
//! concept and constant to the sentence tokens that express it, written as ISI `~e.N` markers.
//!
//! This is not [`crate::amr::align`], which grounds AMR nodes in image regions; it is the
//! step before it, for graphs from parsers that emit no alignments (amrlib, SPRING).
//!
//! The rules, strongest first (see `docs/ssa.md`, "Token alignment", for the measured
//! agreement with ISI alignments):
//! 1. names: the `:opN` strings of a `:name` node to the token span that spells them;
//! 2. concepts: the concept with its sense suffix stripped (`inhibit-01` → `inhibit`) to a token
//!    with that lemma (inflection from the WordNet-derived lexicon, simple pasts, agentive and
//!    nominal suffixes), to a fixed word list for abstract concepts (`and` → `and`, `possible`
//!    → `can`), to a negated form (`independent` for `depend-01`, with its `:polarity -`), or
//!    else to the token sharing the longest prefix of at least four characters (JAMR's fuzzy
//!    rule); a hyphenated concept (`growth-factor`) to the contiguous tokens of its parts;
//! 3. constants: numbers to digits or number words, months to month names, `-` to a negation;
//! 4. derived nodes: the entity of an agentive noun (`(p / person :ARG0-of (t / teach-01))`
//!    for `teacher`) and `more`/`most` of a comparative (`higher`) share the token of the
//!    frame or adjective; `have-rel-role-91`/`have-org-role-91` take the token of the role.
//!
//! When a concept's word occurs more than once, an occurrence no other node has taken is
//! preferred, then the one nearest the tokens of the node's aligned neighbours, then the
//! occurrence whose rank matches the node's rank among nodes with the same concept.
//!
//! ```
//! use capflow::amr::penman::{encode, parse};
//! use capflow::amr::token_align::{align_graph, tokenize};
//!
//! let mut g = parse("(w / want-01 :ARG0 (b / boy) :ARG1 (g / go-02 :ARG0 b))").unwrap();
//! let tokens = tokenize("The boy wants to go.");
//! align_graph(&mut g, &tokens);
//! assert!(encode(&g).contains("(w / want-01~e.2"));
//! assert!(encode(&g).contains("(b / boy~e.1)"));
//! ```

mod lexical;
mod tokenize;

use std::collections::HashMap;

pub use tokenize::{split_tokenized, tokenize};

use crate::amr::graph::{Alignment, Graph};
use crate::text::inflect::Lexicon;
use lexical::{
    allows_partial_match, concept_words, is_negation, is_structural, month_number, number_value,
    TokenForms, MORPHOLOGICAL_PREFIXES,
};

/// How many of a graph's concepts and constants [`align_graph`] aligned.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AlignSummary {
    pub concepts: usize,
    pub aligned_concepts: usize,
    pub constants: usize,
    pub aligned_constants: usize,
}

/// The tokens of the sentence a graph was parsed from: `# ::tok` when present (split as the
/// ISI releases count tokens), else `# ::snt` tokenized by [`tokenize`]; `None` without either.
pub fn graph_tokens(graph: &Graph) -> Option<Vec<String>> {
    if let Some(tok) = graph.meta("tok") {
        return Some(split_tokenized(tok));
    }
    graph.meta("snt").map(tokenize)
}

/// Records `tokens` as the graph's `# ::tok` line (after `# ::snt`, else last), the tokens its
/// `~e.N` indices count; a graph that has a `# ::tok` line keeps it.
pub fn write_tok_line(graph: &mut Graph, tokens: &[String]) {
    if graph.meta("tok").is_some() {
        return;
    }
    let at = graph
        .metadata
        .iter()
        .position(|(k, _)| k == "snt")
        .map_or(graph.metadata.len(), |i| i + 1);
    graph
        .metadata
        .insert(at, ("tok".to_string(), tokens.join(" ")));
}

/// Aligns the concepts and constants of `graph` to `tokens` (0-based indices into it),
/// replacing any concept or constant alignments it had; role alignments are kept.
pub fn align_graph(graph: &mut Graph, tokens: &[String]) -> AlignSummary {
    let lexicon = Lexicon::wordnet();
    let forms: Vec<TokenForms> = tokens.iter().map(|t| TokenForms::new(t, lexicon)).collect();
    let mut aligner = Aligner::new(graph, &forms);
    aligner.align_names();
    aligner.align_concepts();
    aligner.align_constants();
    aligner.align_derived();
    let summary = aligner.summary();
    let found = aligner.found;
    graph.alignments.retain(|a| a.on_role);
    for (triple, indices) in found {
        graph.alignments.push(Alignment {
            triple,
            on_role: false,
            prefix: "e.".to_string(),
            indices,
        });
    }
    graph.alignments.sort_by_key(|a| (a.triple, a.on_role));
    summary
}

/// How well a token matches a concept, best highest; candidates of one node keep only their
/// best strength.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Strength {
    /// The token after a word-forming prefix shares a prefix of four or more characters.
    Affixed(usize),
    /// A negated form (`independent` for `depend`).
    Negated,
    /// Longest common prefix of at least four characters, by its length.
    Prefix(usize),
    /// A word from the abstract-concept list, or one part of a hyphenated concept.
    Listed,
    /// The token's lemma is the concept (or the parts of a hyphenated concept in a row).
    Lemma,
}

struct Aligner<'g> {
    graph: &'g Graph,
    forms: &'g [TokenForms],
    /// Variable → its `:instance` triple.
    instance: HashMap<&'g str, usize>,
    /// Triple index → aligned token indices.
    found: HashMap<usize, Vec<usize>>,
    /// How many concepts each token is aligned to.
    used: Vec<usize>,
    /// Instance triples of nodes aligned through a negated form.
    negated: Vec<usize>,
}

/// `inhibit-01` → `inhibit`; `have-rel-role-91` → `have-rel-role`; `and` → `and`.
fn strip_sense(concept: &str) -> &str {
    match concept.rsplit_once('-') {
        Some((stem, sense))
            if !stem.is_empty()
                && !sense.is_empty()
                && sense.bytes().all(|b| b.is_ascii_digit()) =>
        {
            stem
        }
        _ => concept,
    }
}

fn common_prefix(a: &str, b: &str) -> usize {
    a.chars().zip(b.chars()).take_while(|(x, y)| x == y).count()
}

/// A token that can express a word: not punctuation, a glue mark or a markup tag.
fn is_wordlike(form: &TokenForms) -> bool {
    form.lower.chars().any(char::is_alphanumeric) && !form.lower.starts_with('<')
}

impl<'g> Aligner<'g> {
    fn new(graph: &'g Graph, forms: &'g [TokenForms]) -> Self {
        let instance = graph
            .triples
            .iter()
            .enumerate()
            .filter(|(_, t)| t.is_instance())
            .map(|(i, t)| (t.source.as_str(), i))
            .collect();
        Aligner {
            graph,
            forms,
            instance,
            found: HashMap::new(),
            used: vec![0; forms.len()],
            negated: Vec::new(),
        }
    }

    fn concept_of(&self, var: &str) -> Option<&'g str> {
        self.instance
            .get(var)
            .map(|&i| self.graph.triples[i].target.as_str())
    }

    fn set(&mut self, triple: usize, indices: Vec<usize>) {
        for &i in &indices {
            if let Some(u) = self.used.get_mut(i) {
                *u += 1;
            }
        }
        self.found.insert(triple, indices);
    }

    /// The first token aligned to `var`'s concept.
    fn token_of(&self, var: &str) -> Option<usize> {
        let triple = self.instance.get(var)?;
        self.found.get(triple).and_then(|t| t.first().copied())
    }

    /// Token positions of the word-like tokens, skipping glue marks and punctuation, so that a
    /// hyphenated name or concept matches across `@-@`.
    fn word_positions(&self) -> Vec<usize> {
        (0..self.forms.len())
            .filter(|&i| is_wordlike(&self.forms[i]))
            .collect()
    }

    /// Occurrences of `words` as consecutive word-like tokens (glue marks skipped), each as
    /// the token indices matched; `matches(word, token)` decides one word.
    fn find_sequence(
        &self,
        words: &[String],
        matches: impl Fn(&str, &TokenForms) -> bool,
    ) -> Vec<Vec<usize>> {
        if words.is_empty() {
            return Vec::new();
        }
        let positions = self.word_positions();
        let mut out = Vec::new();
        for start in 0..positions.len() {
            if start + words.len() > positions.len() {
                break;
            }
            let span = &positions[start..start + words.len()];
            // Only glue marks and hyphens may sit between the words of one span.
            let contiguous = span.windows(2).all(|w| {
                (w[0] + 1..w[1]).all(|k| {
                    let l = &self.forms[k].lower;
                    l == "-" || l == "/" || l == "." || l == "'"
                })
            });
            if contiguous
                && words
                    .iter()
                    .zip(span)
                    .all(|(word, &i)| matches(word, &self.forms[i]))
            {
                out.push(span.to_vec());
            }
        }
        out
    }

    /// Names: the `:opN` strings of each `name` node, together, to the span that spells them.
    fn align_names(&mut self) {
        let graph = self.graph;
        for (name_var, _) in graph
            .triples
            .iter()
            .filter(|t| t.is_instance() && t.target == "name")
            .map(|t| (t.source.as_str(), ()))
        {
            let mut ops: Vec<(usize, usize, &str)> = graph
                .triples
                .iter()
                .enumerate()
                .filter(|(_, t)| t.source == name_var && t.role.starts_with(":op"))
                .filter_map(|(i, t)| {
                    let n = t.role[3..].parse::<usize>().ok()?;
                    Some((n, i, t.target.trim_matches('"')))
                })
                .collect();
            ops.sort();
            let op_words: Vec<Vec<String>> = ops
                .iter()
                .map(|(_, _, s)| {
                    tokenize(s)
                        .into_iter()
                        .map(|w| w.trim_matches('@').to_lowercase())
                        .filter(|w| w.chars().any(char::is_alphanumeric))
                        .collect()
                })
                .collect();
            let all: Vec<String> = op_words.iter().flatten().cloned().collect();
            let exact = |w: &str, f: &TokenForms| f.lower == w;
            let spans = self.find_sequence(&all, exact);
            if let Some(span) = self.pick_span(&spans, &[]) {
                let mut at = 0;
                for ((_, triple, _), words) in ops.iter().zip(&op_words) {
                    let part = span[at..at + words.len()].to_vec();
                    at += words.len();
                    if !part.is_empty() {
                        self.set(*triple, part);
                    }
                }
                continue;
            }
            // The name is not spelled out as a whole: each part on its own.
            for ((_, triple, _), words) in ops.iter().zip(&op_words) {
                let spans = self.find_sequence(words, exact);
                let spans = if spans.is_empty() && words.len() == 1 && words[0].len() >= 4 {
                    let w = &words[0];
                    self.find_sequence(words, |_, f| {
                        common_prefix(w, &f.lower) >= 4.max(w.len() * 3 / 4)
                    })
                } else {
                    spans
                };
                if let Some(span) = self.pick_span(&spans, &[]) {
                    self.set(*triple, span);
                }
            }
        }
    }

    /// Of several candidate spans, one no concept has taken yet when there is one, then the
    /// one nearest `near` (token positions of aligned neighbours), else the first.
    fn pick_span(&self, spans: &[Vec<usize>], near: &[usize]) -> Option<Vec<usize>> {
        self.pick_span_ranked(spans, near, 0)
    }

    fn pick_span_ranked(
        &self,
        spans: &[Vec<usize>],
        near: &[usize],
        rank: usize,
    ) -> Option<Vec<usize>> {
        if spans.len() <= 1 {
            return spans.first().cloned();
        }
        let free: Vec<&Vec<usize>> = spans
            .iter()
            .filter(|s| s.iter().all(|&i| self.used[i] == 0))
            .collect();
        let pool: Vec<&Vec<usize>> = if free.is_empty() {
            spans.iter().collect()
        } else {
            free
        };
        if !near.is_empty() {
            let distance = |s: &Vec<usize>| {
                near.iter()
                    .map(|&n| s[0].abs_diff(n))
                    .min()
                    .unwrap_or(usize::MAX)
            };
            return pool.into_iter().min_by_key(|s| distance(s)).cloned();
        }
        pool.get(rank.min(pool.len() - 1)).map(|s| s.to_vec())
    }

    /// Candidate spans of one concept at its best strength.
    fn concept_candidates(&self, concept: &str) -> (Option<Strength>, Vec<Vec<usize>>) {
        let stem = strip_sense(concept).to_lowercase();
        let listed = concept_words(&stem);
        let mut best: Option<Strength> = None;
        let mut spans: Vec<Vec<usize>> = Vec::new();
        let mut offer = |strength: Strength, span: Vec<usize>| {
            match best {
                Some(b) if b > strength => return,
                Some(b) if b == strength => {}
                _ => {
                    best = Some(strength);
                    spans.clear();
                }
            }
            if !spans.contains(&span) {
                spans.push(span);
            }
        };
        if stem.contains('-') {
            let parts: Vec<String> = stem.split('-').map(str::to_string).collect();
            for span in self.find_sequence(&parts, |w, f| f.has_lemma(w)) {
                offer(Strength::Lemma, span);
            }
            let joined: String = parts.concat();
            for (i, f) in self.forms.iter().enumerate() {
                if f.has_lemma(&joined) || f.has_lemma(&stem) {
                    offer(Strength::Lemma, vec![i]);
                }
            }
        }
        for (i, f) in self.forms.iter().enumerate() {
            if listed.contains(&f.lower.as_str()) {
                offer(Strength::Listed, vec![i]);
            }
        }
        if stem.contains('-') {
            if allows_partial_match(&stem) {
                let first = stem.split('-').next().unwrap_or_default();
                for (i, f) in self.forms.iter().enumerate() {
                    if f.has_lemma(first) {
                        offer(Strength::Listed, vec![i]);
                    }
                }
            }
            return (best, spans);
        }
        for (i, f) in self.forms.iter().enumerate() {
            if !is_wordlike(f) {
                continue;
            }
            if f.has_lemma(&stem) {
                offer(Strength::Lemma, vec![i]);
                continue;
            }
            let lcp = common_prefix(&f.lower, &stem);
            if lcp >= 4 && lcp * 5 >= stem.chars().count() * 3 {
                offer(Strength::Prefix(lcp), vec![i]);
            } else if stem.len() >= 3 && f.has_negated_lemma(&stem) {
                offer(Strength::Negated, vec![i]);
            } else if let Some(lcp) = MORPHOLOGICAL_PREFIXES
                .iter()
                .filter_map(|p| f.lower.strip_prefix(p))
                .map(|rest| common_prefix(rest, &stem))
                .max()
                .filter(|&lcp| lcp >= 4 && lcp * 5 >= stem.chars().count() * 3)
            {
                offer(Strength::Affixed(lcp), vec![i]);
            }
        }
        (best, spans)
    }

    /// Concepts: nodes with one candidate first, then the ambiguous ones in document order
    /// (fewest candidates first), each placed near its aligned neighbours.
    fn align_concepts(&mut self) {
        let graph = self.graph;
        let mut pending: Vec<(usize, Strength, Vec<Vec<usize>>, usize)> = Vec::new();
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for (i, t) in graph.triples.iter().enumerate() {
            if !t.is_instance() || t.target.is_empty() || is_structural(&t.target) {
                continue;
            }
            let (strength, spans) = self.concept_candidates(&t.target);
            let Some(strength) = strength else { continue };
            let rank = seen.entry(t.target.as_str()).or_default();
            pending.push((i, strength, spans, *rank));
            *rank += 1;
        }
        pending
            .sort_by_key(|(i, strength, spans, _)| (spans.len() > 1, spans.len(), *i, *strength));
        for (triple, strength, spans, rank) in pending {
            let near = self.neighbour_tokens(&graph.triples[triple].source);
            if let Some(span) = self.pick_span_ranked(&spans, &near, rank) {
                if strength == Strength::Negated {
                    self.negated.push(triple);
                }
                self.set(triple, span);
            }
        }
    }

    /// Tokens of the concepts one edge away from `var`.
    fn neighbour_tokens(&self, var: &str) -> Vec<usize> {
        self.graph
            .triples
            .iter()
            .filter(|t| !t.is_instance())
            .filter_map(|t| {
                if t.source == var {
                    self.token_of(&t.target)
                } else if t.target == var {
                    self.token_of(&t.source)
                } else {
                    None
                }
            })
            .collect()
    }

    /// Constants: numbers, months, strings and polarity.
    fn align_constants(&mut self) {
        let graph = self.graph;
        for (i, t) in graph.triples.iter().enumerate() {
            if t.is_instance()
                || self.found.contains_key(&i)
                || self.instance.contains_key(t.target.as_str())
                || t.role == ":wiki"
                || t.target.is_empty()
            {
                continue;
            }
            let value = t.target.trim_matches('"');
            let spans: Vec<Vec<usize>> = if t.role == ":polarity" && value == "-" {
                (0..self.forms.len())
                    .filter(|&k| is_negation(&self.forms[k].lower))
                    .map(|k| vec![k])
                    .collect()
            } else if let Some(number) = value.parse::<f64>().ok().filter(|_| !value.is_empty()) {
                let month = t.role == ":month";
                (0..self.forms.len())
                    .filter(|&k| {
                        let f = &self.forms[k];
                        number_value(&f.lower) == Some(number)
                            || (month && month_number(&f.lower) == Some(number as u32))
                    })
                    .map(|k| vec![k])
                    .collect()
            } else {
                let words: Vec<String> = tokenize(value)
                    .into_iter()
                    .map(|w| w.trim_matches('@').to_lowercase())
                    .filter(|w| w.chars().any(char::is_alphanumeric))
                    .collect();
                self.find_sequence(&words, |w, f| f.lower == w || f.has_lemma(w))
            };
            let near: Vec<usize> = self.token_of(&t.source).into_iter().collect();
            if let Some(span) = self.pick_span(&spans, &near) {
                self.set(i, span);
            }
        }
    }

    /// Nodes that share a token with another: the entity of an agentive or result noun, the
    /// degree of a comparative, role reifications, and the polarity of a negated form.
    fn align_derived(&mut self) {
        let graph = self.graph;
        let n = graph.triples.len();
        for e in 0..n {
            let edge = &graph.triples[e];
            if edge.is_instance() {
                continue;
            }
            let (source, target) = (edge.source.as_str(), edge.target.as_str());
            let Some(&target_instance) = self.instance.get(target) else {
                continue;
            };
            // `(P :ARGn-of (C / frame))`, written inverted, opens C right after the edge.
            let inverted = edge.role.starts_with(":ARG")
                && e + 1 < n
                && graph.triples[e + 1].is_instance()
                && graph.triples[e + 1].source == source;
            if inverted && !self.found.contains_key(&target_instance) {
                if let Some(token) = self.token_of(source) {
                    if self.forms[token].nominal
                        && !is_structural(&graph.triples[target_instance].target)
                    {
                        self.set(target_instance, vec![token]);
                    }
                }
            }
        }
        for e in 0..n {
            let edge = &graph.triples[e];
            let Some(&target_instance) = self.instance.get(edge.target.as_str()) else {
                continue;
            };
            let concept = graph.triples[target_instance].target.as_str();
            if self.found.contains_key(&target_instance) || !matches!(concept, "more" | "most") {
                continue;
            }
            // `:degree more` on the adjective, or `have-degree-91 :ARG2 adjective :ARG3 more`.
            let adjective = match edge.role.as_str() {
                ":degree" => Some(edge.source.as_str()),
                ":ARG3" if self.concept_of(&edge.source) == Some("have-degree-91") => graph
                    .triples
                    .iter()
                    .find(|t| t.source == edge.source && t.role == ":ARG2")
                    .map(|t| t.target.as_str()),
                _ => None,
            };
            if let Some(token) = adjective.and_then(|a| self.token_of(a)) {
                if self.forms[token].degree {
                    self.set(target_instance, vec![token]);
                }
            }
        }
        for (var, &instance) in &self.instance.clone() {
            let concept = graph.triples[instance].target.as_str();
            if self.found.contains_key(&instance)
                || !matches!(concept, "have-rel-role-91" | "have-org-role-91")
            {
                continue;
            }
            let role = graph
                .triples
                .iter()
                .find(|t| t.source == *var && t.role == ":ARG2")
                .and_then(|t| self.token_of(&t.target));
            if let Some(token) = role {
                self.set(instance, vec![token]);
            }
        }
        for &instance in &self.negated.clone() {
            let var = graph.triples[instance].source.as_str();
            let Some(token) = self.token_of(var) else {
                continue;
            };
            if let Some(p) = graph
                .triples
                .iter()
                .position(|t| t.source == var && t.role == ":polarity" && t.target == "-")
            {
                self.found.entry(p).or_insert_with(|| vec![token]);
            }
        }
    }

    fn summary(&self) -> AlignSummary {
        let mut s = AlignSummary::default();
        for (i, t) in self.graph.triples.iter().enumerate() {
            let aligned = self.found.contains_key(&i);
            if t.is_instance() {
                s.concepts += 1;
                s.aligned_concepts += usize::from(aligned);
            } else if !self.instance.contains_key(t.target.as_str()) && t.role != ":wiki" {
                s.constants += 1;
                s.aligned_constants += usize::from(aligned);
            }
        }
        s
    }
}
