//! vgAMR grounding: attach image boxes to the entity nodes of a caption's AMR graph.
//!
//! A node is grounded when it is a *noun* node whose aligned token lies inside a grounded phrase
//! of its caption (Flickr30k Entities chains, COCO Entities class spans); it then carries that
//! phrase's id, text and boxes (METHODS.md §1.2).
//!
//! # Nouns without a POS tagger
//!
//! The reference tags the caption with NLTK and keeps nodes whose token is tagged `NN*`. capflow
//! has no tagger, so a node counts as a noun when all of these hold:
//! - its concept is not a predicate (`-NN` sense suffix) and not an AMR construct (`and`, `or`,
//!   `name`, `multi-sentence`, ...), and contains a letter;
//! - its concept is not in the modifier lexicon: words WordNet 3.0 knows as adjectives or adverbs
//!   and not as nouns, or whose adjective/adverb senses are tagged more often than their noun
//!   senses (`data/lexicon/wordnet-modifiers.txt`, derived by
//!   `scripts/derive-modifier-lexicon.py`; `young`, `small`, `wooden` are modifiers, `man`, `dock`
//!   are not);
//! - it does not modify another node aligned inside the same phrase (`(b / boat :mod (w / white))`
//!   with both in "a white boat": `white` is the modifier even though WordNet tags `white` as a
//!   noun more often). This is the structural half of what the tagger did from context.
//!
//! The lexicon is a prior, and the graph overrides it: a lexicon word that modifies no node (no
//! `:mod` into it, no `:domain` out of it) is the head of its phrase and counts as a noun, so
//! "a blue uniform", "holds a light" and "the other" ground `uniform`, `light` and `other`
//! (`(s / shirt :mod (b / blue :mod (l / light)))` still leaves `light` a modifier).
//!
//! # Token re-mapping
//!
//! Alignments index the parser's tokens (`# ::tok`, else `# ::snt` split on whitespace); phrase
//! spans index the caption's whitespace tokens. When the two differ (`dog's` vs `dog 's`), every
//! parser token is mapped to the caption token that holds its first letter or digit, comparing
//! lower-cased alphanumeric characters; when the character streams differ too, tokens are
//! matched greedily in order (see [`remap_tokens`]).

use std::collections::{BTreeMap, HashSet};
use std::sync::OnceLock;

use crate::amr::graph::Graph;
use crate::schema::{BoxXyxy, GroundingRow};

/// The image grounding of one vgAMR node.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Grounding {
    /// Flickr30k Entities chain id, or the COCO Entities class.
    pub phrase_id: String,
    /// The grounded phrase as written in the caption.
    pub label: String,
    pub boxes: Vec<BoxXyxy>,
    /// The phrase is known to refer to something in the image but has no usable box (COCO
    /// Entities class `_`, Flickr30k `nobndbox`/`scene`). Samples that contain such a node are
    /// not fully grounded and are dropped by the quality filter.
    pub unknown: bool,
}

impl Grounding {
    /// Builds the grounding a phrase gives its nodes.
    pub fn from_phrase(row: &GroundingRow) -> Grounding {
        let id = row.phrase_id.trim();
        let unknown = id.is_empty()
            || id == "_"
            || id.eq_ignore_ascii_case("unknown")
            || row.no_box
            || row.is_scene
            || row.boxes.is_empty();
        Grounding {
            phrase_id: row.phrase_id.clone(),
            label: row.phrase.clone(),
            boxes: if unknown {
                Vec::new()
            } else {
                row.boxes.clone()
            },
            unknown,
        }
    }
}

/// A caption AMR with its grounded nodes.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct VgAmr {
    /// Which caption the graph came from (`# ::id`, or the caption id of its groundings).
    pub caption_id: String,
    pub graph: Graph,
    /// Grounded nodes by variable.
    pub node_groundings: BTreeMap<String, Grounding>,
}

impl VgAmr {
    /// A vgAMR without any grounding (captions of images with no grounding annotations).
    pub fn ungrounded(caption_id: impl Into<String>, graph: Graph) -> VgAmr {
        VgAmr {
            caption_id: caption_id.into(),
            graph,
            node_groundings: BTreeMap::new(),
        }
    }

    /// Number of nodes (variables) of the graph; decides which graph is "graph 1" of a merge.
    pub fn node_count(&self) -> usize {
        self.graph.variables().len()
    }
}

/// Whether a concept is a PropBank-style predicate: it carries a sense suffix `-NN`
/// (`sit-01`, `have-rel-role-91`).
pub fn is_predicate(concept: &str) -> bool {
    sense_suffix_start(concept).is_some()
}

/// The concept without its sense suffix (`sit-01` → `sit`); other concepts unchanged.
pub fn strip_sense(concept: &str) -> &str {
    match sense_suffix_start(concept) {
        Some(i) => &concept[..i],
        None => concept,
    }
}

/// Byte offset of the first `-` that is followed by a digit (the reference's `-[0-9]+`).
fn sense_suffix_start(concept: &str) -> Option<usize> {
    let bytes = concept.as_bytes();
    (0..bytes.len().saturating_sub(1)).find(|&i| bytes[i] == b'-' && bytes[i + 1].is_ascii_digit())
}

/// AMR constructs that never denote an image entity.
pub const AMR_CONSTRUCTS: [&str; 8] = [
    "and",
    "or",
    "name",
    "multi-sentence",
    "amr-unknown",
    "amr-choice",
    "date-entity",
    "include-91",
];

/// Words that are adjectives or adverbs rather than nouns, for telling nouns from modifiers
/// without a POS tagger; and among them the adjectives, for the Flickr merge rule that never
/// merges adjectives.
#[derive(Clone, Debug, Default)]
pub struct ModifierLexicon {
    words: HashSet<String>,
    adjectives: HashSet<String>,
}

static WORDNET_MODIFIERS: &str = include_str!("../../data/lexicon/wordnet-modifiers.txt");
static WORDNET_ADJECTIVES: &str = include_str!("../../data/lexicon/wordnet-adjectives.txt");

impl ModifierLexicon {
    /// The lexicon derived from WordNet 3.0 and shipped with capflow: the modifiers of
    /// `data/lexicon/wordnet-modifiers.txt`, the adjectives of
    /// `data/lexicon/wordnet-adjectives.txt` (the modifiers with more adjective than adverb
    /// senses, so not `above`, `across`, `back`).
    pub fn wordnet() -> &'static ModifierLexicon {
        static LEXICON: OnceLock<ModifierLexicon> = OnceLock::new();
        LEXICON.get_or_init(|| {
            ModifierLexicon::from_words(WORDNET_MODIFIERS.lines())
                .with_adjectives(WORDNET_ADJECTIVES.lines())
        })
    }

    /// A lexicon of these modifiers, every one of them also counted as an adjective (see
    /// [`ModifierLexicon::with_adjectives`]).
    pub fn from_words<I, S>(words: I) -> ModifierLexicon
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let words = normalized(words);
        ModifierLexicon {
            adjectives: words.clone(),
            words,
        }
    }

    /// The same modifiers with these adjectives.
    pub fn with_adjectives<I, S>(self, adjectives: I) -> ModifierLexicon
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        ModifierLexicon {
            adjectives: normalized(adjectives),
            ..self
        }
    }

    /// Whether a concept is an adjective or adverb (sense suffix ignored).
    pub fn is_modifier(&self, concept: &str) -> bool {
        contains_word(&self.words, concept)
    }

    /// Whether a concept is an adjective (sense suffix ignored): what a tagger reading the bare
    /// word would tag `JJ`, as the reference's Flickr merge asks.
    pub fn is_adjective(&self, concept: &str) -> bool {
        contains_word(&self.adjectives, concept)
    }

    pub fn len(&self) -> usize {
        self.words.len()
    }

    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }
}

fn normalized<I, S>(words: I) -> HashSet<String>
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    words
        .into_iter()
        .map(|w| w.as_ref().trim().to_lowercase())
        .filter(|w| !w.is_empty())
        .collect()
}

fn contains_word(words: &HashSet<String>, concept: &str) -> bool {
    let word = strip_sense(concept);
    if word
        .bytes()
        .all(|b| b.is_ascii() && !b.is_ascii_uppercase())
    {
        // Already lower case: `to_lowercase` would return it unchanged.
        words.contains(word)
    } else {
        words.contains(&word.to_lowercase())
    }
}

/// Maps every token of `from` to the index of the token of `to` that holds the same text.
///
/// Tokens are compared on their lower-cased letters and digits, so punctuation and quote
/// conventions (`` ` `` vs `"`) do not matter; a token with no letter or digit maps to `None`.
/// When the two character streams agree, a `from` token maps to the `to` token holding its first
/// character. Otherwise tokens are matched greedily in order, a `from` token matching a `to`
/// token among the next three that contains it or is contained in it.
pub fn remap_tokens(from: &[&str], to: &[&str]) -> Vec<Option<usize>> {
    let norm = |t: &str| -> String {
        t.chars()
            .filter(|c| c.is_alphanumeric())
            .flat_map(char::to_lowercase)
            .collect()
    };
    let from_norm: Vec<String> = from.iter().map(|t| norm(t)).collect();
    let to_norm: Vec<String> = to.iter().map(|t| norm(t)).collect();
    let from_stream: String = from_norm.concat();
    let to_stream: String = to_norm.concat();
    if from_stream == to_stream {
        // Owner token of every character position of the stream.
        let owner: Vec<usize> = to_norm
            .iter()
            .enumerate()
            .flat_map(|(i, t)| std::iter::repeat_n(i, t.chars().count()))
            .collect();
        let mut position = 0usize;
        return from_norm
            .iter()
            .map(|t| {
                let len = t.chars().count();
                let mapped = (len > 0).then(|| owner.get(position).copied()).flatten();
                position += len;
                mapped
            })
            .collect();
    }
    let mut next = 0usize;
    from_norm
        .iter()
        .map(|t| {
            if t.is_empty() {
                return None;
            }
            let window = next..(next + 3).min(to_norm.len());
            let found = window.into_iter().find(|&k| {
                let candidate = &to_norm[k];
                !candidate.is_empty()
                    && (candidate.contains(t.as_str()) || t.contains(candidate.as_str()))
            })?;
            if to_norm[found] == *t || to_norm[found].ends_with(t.as_str()) {
                next = found + 1;
            } else {
                next = found;
            }
            Some(found)
        })
        .collect()
}

/// Grounds a caption graph.
///
/// `caption_tokens` are the caption's whitespace tokens, the ones the phrase spans of `phrases`
/// index. Phrases marked `not_visual` ground nothing. A node inside several phrases takes the
/// first one in `phrases` order. Bad spans and alignments out of range ground nothing; they
/// never fail the caption.
pub fn ground(
    caption_id: &str,
    graph: &Graph,
    caption_tokens: &[&str],
    phrases: &[GroundingRow],
    lexicon: &ModifierLexicon,
) -> VgAmr {
    let phrases: Vec<&GroundingRow> = phrases.iter().collect();
    ground_graph(
        caption_id.to_string(),
        graph.clone(),
        caption_tokens,
        &phrases,
        lexicon,
    )
}

/// [`ground`] for a graph the caller hands over, with the caption's phrases by reference: what
/// a pipeline that parsed the graph for this purpose calls, so nothing is copied.
pub fn ground_graph(
    caption_id: String,
    graph: Graph,
    caption_tokens: &[&str],
    phrases: &[&GroundingRow],
    lexicon: &ModifierLexicon,
) -> VgAmr {
    let node_groundings = node_groundings(&graph, caption_tokens, phrases, lexicon);
    VgAmr {
        caption_id,
        graph,
        node_groundings,
    }
}

fn node_groundings(
    graph: &Graph,
    caption_tokens: &[&str],
    phrases: &[&GroundingRow],
    lexicon: &ModifierLexicon,
) -> BTreeMap<String, Grounding> {
    let token_of = node_tokens(graph, caption_tokens);
    let phrase_of = |var: &str| -> Option<&GroundingRow> {
        let tokens = token_of.get(var)?;
        tokens.iter().find_map(|&t| {
            phrases.iter().copied().find(|p| {
                !p.not_visual
                    && !p.phrase_types.iter().any(|k| k == "notvisual")
                    && p.token_start >= 0
                    && (p.token_start as i64) <= t as i64
                    && (t as i64) < p.token_end as i64
            })
        })
    };
    let mut node_groundings = BTreeMap::new();
    let mut modifier_links = None;
    for (var, concept) in &graph.instances() {
        if !is_thing_concept(concept) {
            continue;
        }
        let Some(phrase) = phrase_of(var) else {
            continue;
        };
        let links = modifier_links.get_or_insert_with(|| modifier_links_of(graph));
        // A lexicon modifier is a noun only as the head of its phrase (`uniform` in "a blue
        // uniform"); any other word only loses to a head inside the same phrase.
        let modifier = if lexicon.is_modifier(concept) {
            links.iter().any(|&(m, head)| m == *var && head != *var)
        } else {
            modifies_phrase_head(links, var, phrase, &phrase_of)
        };
        if modifier {
            continue;
        }
        node_groundings.insert(var.to_string(), Grounding::from_phrase(phrase));
    }
    node_groundings
}

/// Whether a concept names a thing (a noun): not a predicate, an AMR construct, a constant or a
/// modifier.
pub fn is_entity_concept(concept: &str, lexicon: &ModifierLexicon) -> bool {
    is_thing_concept(concept) && !lexicon.is_modifier(concept)
}

/// Not a predicate, an AMR construct or a constant: a concept that may name a thing.
fn is_thing_concept(concept: &str) -> bool {
    !is_predicate(concept)
        && !AMR_CONSTRUCTS.contains(&concept)
        && !concept.starts_with('"')
        && concept.chars().any(char::is_alphabetic)
}

/// `(modifier, head)` for every edge that makes one node a modifier of another: `:mod` from the
/// head, or its inverse `:domain` from the modifier.
fn modifier_links_of(graph: &Graph) -> Vec<(&str, &str)> {
    graph
        .edges()
        .filter_map(|t| match t.role.as_str() {
            ":mod" => Some((t.target.as_str(), t.source.as_str())),
            ":domain" => Some((t.source.as_str(), t.target.as_str())),
            _ => None,
        })
        .collect()
}

/// Whether `var` modifies another node grounded by the same phrase (`:mod`, or its inverse
/// `:domain`).
fn modifies_phrase_head<'g>(
    links: &[(&str, &str)],
    var: &str,
    phrase: &GroundingRow,
    phrase_of: &dyn Fn(&str) -> Option<&'g GroundingRow>,
) -> bool {
    links.iter().any(|&(modifier, head)| {
        modifier == var && head != var && phrase_of(head).is_some_and(|p| std::ptr::eq(p, phrase))
    })
}

/// Caption-token indices of every aligned node, after re-mapping the parser's tokens.
fn node_tokens<'g>(graph: &'g Graph, caption_tokens: &[&str]) -> BTreeMap<&'g str, Vec<usize>> {
    let parser_tokens: Option<Vec<&str>> = graph
        .meta("tok")
        .or_else(|| graph.meta("snt"))
        .map(|s| s.split_whitespace().collect());
    let mapping: Option<Vec<Option<usize>>> = match &parser_tokens {
        Some(tokens) if tokens.as_slice() != caption_tokens => {
            Some(remap_tokens(tokens, caption_tokens))
        }
        _ => None,
    };
    let mut out: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for alignment in &graph.alignments {
        if alignment.on_role {
            continue;
        }
        let Some(triple) = graph.triples.get(alignment.triple) else {
            continue;
        };
        if !triple.is_instance() {
            continue;
        }
        for &index in &alignment.indices {
            let mapped = match &mapping {
                Some(m) => m.get(index).copied().flatten(),
                None => (index < caption_tokens.len()).then_some(index),
            };
            if let Some(token) = mapped {
                out.entry(triple.source.as_str()).or_default().push(token);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::amr::graph::{Alignment, Triple};

    fn graph(triples: &[(&str, &str, &str)], aligned: &[(usize, usize)], tok: &str) -> Graph {
        Graph {
            top: triples[0].0.to_string(),
            triples: triples
                .iter()
                .map(|(s, r, t)| Triple::new(*s, *r, *t))
                .collect(),
            metadata: vec![("tok".into(), tok.into())],
            alignments: aligned
                .iter()
                .map(|&(triple, token)| Alignment {
                    triple,
                    on_role: false,
                    prefix: "e.".into(),
                    indices: vec![token],
                })
                .collect(),
        }
    }

    fn phrase(id: &str, text: &str, start: i32, end: i32, boxes: Vec<BoxXyxy>) -> GroundingRow {
        GroundingRow {
            image_id: "1".into(),
            caption_id: "1#0".into(),
            phrase_id: id.into(),
            phrase: text.into(),
            phrase_types: vec!["people".into()],
            token_start: start,
            token_end: end,
            no_box: boxes.is_empty(),
            boxes,
            is_scene: false,
            not_visual: false,
        }
    }

    #[test]
    fn predicates_and_senses() {
        assert!(is_predicate("sit-01"));
        assert!(is_predicate("have-rel-role-91"));
        assert!(!is_predicate("t-shirt"));
        assert!(!is_predicate("boat"));
        assert_eq!(strip_sense("sit-01"), "sit");
        assert_eq!(strip_sense("have-rel-role-91"), "have-rel-role");
        assert_eq!(strip_sense("t-shirt"), "t-shirt");
    }

    #[test]
    fn wordnet_lexicon_separates_modifiers_from_nouns() {
        let lex = ModifierLexicon::wordnet();
        assert!(lex.len() > 10_000);
        for adj in ["young", "small", "wooden", "tall", "big"] {
            assert!(lex.is_modifier(adj), "{adj}");
        }
        for noun in ["man", "dock", "boat", "house", "lawn", "water"] {
            assert!(!lex.is_modifier(noun), "{noun}");
        }
    }

    #[test]
    fn identical_token_streams_map_by_character_position() {
        let from = ["the", "dog", "'s", "ball", "."];
        let to = ["the", "dog's", "ball."];
        assert_eq!(
            remap_tokens(&from, &to),
            vec![Some(0), Some(1), Some(1), Some(2), None]
        );
    }

    #[test]
    fn differing_streams_map_greedily() {
        let from = ["a", "man", "sits", "on", "a", "dock"];
        let to = ["A", "man", "is", "sitting", "on", "a", "dock"];
        let mapped = remap_tokens(&from, &to);
        assert_eq!(mapped[1], Some(1));
        assert_eq!(mapped[5], Some(6));
    }

    #[test]
    fn grounds_noun_not_modifier_not_predicate() {
        // "a white boat sits on the water"
        let g = graph(
            &[
                ("s", ":instance", "sit-01"),
                ("s", ":ARG1", "b"),
                ("b", ":instance", "boat"),
                ("b", ":mod", "w"),
                ("w", ":instance", "white"),
                ("s", ":location", "x"),
                ("x", ":instance", "water"),
            ],
            &[(0, 3), (2, 2), (4, 1), (6, 6)],
            "a white boat sits on the water",
        );
        let boat_box = BoxXyxy::new(1.0, 2.0, 30.0, 40.0);
        let phrases = vec![
            phrase("1", "a white boat", 0, 3, vec![boat_box]),
            phrase("2", "the water", 5, 7, vec![]),
        ];
        let tokens: Vec<&str> = "a white boat sits on the water".split(' ').collect();
        let vg = ground("1#0", &g, &tokens, &phrases, ModifierLexicon::wordnet());
        assert_eq!(vg.node_groundings.len(), 2, "{:?}", vg.node_groundings);
        assert_eq!(vg.node_groundings["b"].boxes, vec![boat_box]);
        assert!(!vg.node_groundings["b"].unknown);
        assert!(vg.node_groundings["x"].unknown);
        assert!(!vg.node_groundings.contains_key("w"));
        assert!(!vg.node_groundings.contains_key("s"));
    }

    #[test]
    fn remaps_parser_tokens_to_caption_tokens() {
        // Parser split "dog's" into two tokens; the phrase indexes caption tokens.
        let g = graph(
            &[
                ("b", ":instance", "ball"),
                ("b", ":poss", "d"),
                ("d", ":instance", "dog"),
            ],
            &[(0, 3), (2, 1)],
            "the dog 's ball",
        );
        let tokens = ["the", "dog's", "ball"];
        let phrases = vec![phrase(
            "7",
            "ball",
            2,
            3,
            vec![BoxXyxy::new(0.0, 0.0, 1.0, 1.0)],
        )];
        let vg = ground("1#0", &g, &tokens, &phrases, ModifierLexicon::wordnet());
        assert!(vg.node_groundings.contains_key("b"));
        assert!(!vg.node_groundings.contains_key("d"));
    }

    #[test]
    fn lexicon_words_heading_their_phrase_are_nouns() {
        // `uniform`, `light` and `other` are on the WordNet modifier list, and so are `blue` and
        // `small`; the graph says which of them head their phrase.
        let lex = ModifierLexicon::wordnet();
        for word in ["uniform", "light", "other", "blue", "small"] {
            assert!(lex.is_modifier(word), "{word}");
        }
        let boxed = |id: &str, text: &str, start, end| {
            phrase(id, text, start, end, vec![BoxXyxy::new(0.0, 0.0, 5.0, 5.0)])
        };
        // "A man in a blue uniform": (m / man :location (u / uniform :mod (b / blue))).
        let tok = "A man in a blue uniform";
        let g = graph(
            &[
                ("m", ":instance", "man"),
                ("m", ":location", "u"),
                ("u", ":instance", "uniform"),
                ("u", ":mod", "b"),
                ("b", ":instance", "blue"),
            ],
            &[(0, 1), (2, 5), (4, 4)],
            tok,
        );
        let tokens: Vec<&str> = tok.split(' ').collect();
        let phrases = vec![
            boxed("1", "A man", 0, 2),
            boxed("2", "a blue uniform", 3, 6),
        ];
        let vg = ground("1#0", &g, &tokens, &phrases, lex);
        let grounded: Vec<&str> = vg.node_groundings.keys().map(String::as_str).collect();
        assert_eq!(grounded, ["m", "u"]);
        // "A woman holds a light": the argument of hold-01 heads "a light".
        let tok = "A woman holds a light";
        let g = graph(
            &[
                ("h", ":instance", "hold-01"),
                ("h", ":ARG0", "w"),
                ("w", ":instance", "woman"),
                ("h", ":ARG1", "l"),
                ("l", ":instance", "light"),
            ],
            &[(0, 2), (2, 1), (4, 4)],
            tok,
        );
        let tokens: Vec<&str> = tok.split(' ').collect();
        let phrases = vec![boxed("1", "A woman", 0, 2), boxed("2", "a light", 3, 5)];
        let vg = ground("1#1", &g, &tokens, &phrases, lex);
        let grounded: Vec<&str> = vg.node_groundings.keys().map(String::as_str).collect();
        assert_eq!(grounded, ["l", "w"]);
        // "A small dog chases the other": `small` modifies `dog`, `other` heads "the other".
        let tok = "A small dog chases the other";
        let g = graph(
            &[
                ("c", ":instance", "chase-01"),
                ("c", ":ARG0", "d"),
                ("d", ":instance", "dog"),
                ("d", ":mod", "s"),
                ("s", ":instance", "small"),
                ("c", ":ARG1", "o"),
                ("o", ":instance", "other"),
            ],
            &[(0, 3), (2, 2), (4, 1), (6, 5)],
            tok,
        );
        let tokens: Vec<&str> = tok.split(' ').collect();
        let phrases = vec![
            boxed("1", "A small dog", 0, 3),
            boxed("2", "the other", 4, 6),
        ];
        let vg = ground("1#2", &g, &tokens, &phrases, lex);
        let grounded: Vec<&str> = vg.node_groundings.keys().map(String::as_str).collect();
        assert_eq!(grounded, ["d", "o"]);
        // "a light blue shirt": `light` modifies `blue`, which modifies `shirt`.
        let tok = "a light blue shirt";
        let g = graph(
            &[
                ("s", ":instance", "shirt"),
                ("s", ":mod", "b"),
                ("b", ":instance", "blue"),
                ("b", ":mod", "l"),
                ("l", ":instance", "light"),
            ],
            &[(0, 3), (2, 2), (4, 1)],
            tok,
        );
        let tokens: Vec<&str> = tok.split(' ').collect();
        let phrases = vec![boxed("1", "a light blue shirt", 0, 4)];
        let vg = ground("1#3", &g, &tokens, &phrases, lex);
        let grounded: Vec<&str> = vg.node_groundings.keys().map(String::as_str).collect();
        assert_eq!(grounded, ["s"]);
    }

    #[test]
    fn adjectives_are_the_modifiers_that_are_not_adverbs_or_prepositions() {
        let lex = ModifierLexicon::wordnet();
        for word in ["above", "across", "back"] {
            assert!(lex.is_modifier(word), "{word}");
            assert!(!lex.is_adjective(word), "{word}");
        }
        for word in ["young", "small", "wooden", "tall"] {
            assert!(lex.is_adjective(word), "{word}");
        }
        for noun in ["man", "dock", "hold"] {
            assert!(!lex.is_adjective(noun), "{noun}");
        }
    }

    #[test]
    fn bad_spans_and_alignments_ground_nothing() {
        let g = graph(&[("b", ":instance", "boat")], &[(0, 99)], "boat");
        let phrases = vec![phrase("1", "boat", -3, 100, vec![])];
        let vg = ground("x", &g, &["boat"], &phrases, ModifierLexicon::wordnet());
        assert!(vg.node_groundings.is_empty());
    }
}
