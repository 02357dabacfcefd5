//! SSA from plain captions: the captions of an image that have no AMR are parsed into AMR
//! graphs, by the built-in caption parser ([`crate::amr::parse`]) or by an external
//! text-to-AMR model ([`crate::models::TextToAmr`]), before `amr-align` grounds them.
//!
//! [`ParseCaptions`] (`[ssa] parse_captions`) says which captions are parsed; [`CaptionParser`]
//! parses a batch of captions, of one image or of many; [`add_parsed`] puts the graphs into the
//! image as the AMRs of their captions, or its rejected records when a caption gets no graph.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::amr::penman::{encode, parse};
use crate::amr::Graph;
use crate::augment::ImageAnnotations;
use crate::error::Result;
use crate::ingest::penman::amr_row;
use crate::models::{one_per_request, TextToAmr};
use crate::schema::{excerpt, AmrRow, CaptionRow, RejectedRow};

/// Which of an image's captions SSA parses into AMR (`[ssa] parse_captions`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ParseCaptions {
    /// Every caption that has no AMR in the inputs (none is parsed when every caption has one).
    #[default]
    Missing,
    /// Every caption; the inputs' AMRs are not used.
    All,
    /// None: only the inputs' AMRs are used, and an image whose captions have none is rejected.
    Never,
}

impl ParseCaptions {
    pub fn is_default(&self) -> bool {
        *self == ParseCaptions::default()
    }
}

/// The captions of `image` to parse under `mode`, in the image's order. With
/// [`ParseCaptions::Missing`], a caption has an AMR when one of the image's AMRs names it by
/// `caption_id`, or by its graph id `<image>.<k>` / `<image>#<k>` (the caption with index `k`).
pub fn captions_to_parse(image: &ImageAnnotations, mode: ParseCaptions) -> Vec<&CaptionRow> {
    match mode {
        ParseCaptions::Never => Vec::new(),
        ParseCaptions::All => image.captions.iter().collect(),
        ParseCaptions::Missing => image
            .captions
            .iter()
            .filter(|caption| !image.amrs.iter().any(|amr| names(amr, caption)))
            .collect(),
    }
}

/// Whether `amr` is the AMR of `caption`.
fn names(amr: &AmrRow, caption: &CaptionRow) -> bool {
    if amr.caption_id.as_deref() == Some(caption.caption_id.as_str()) {
        return true;
    }
    amr.graph_id
        .rsplit_once(['.', '#'])
        .and_then(|(_, k)| k.parse::<i32>().ok())
        .is_some_and(|k| k == caption.caption_index)
}

/// Parses captions into PENMAN graphs: the built-in caption parser, or an external model.
#[derive(Clone)]
pub enum CaptionParser {
    /// [`crate::amr::parse::parse_caption`]: rules and lexicons, ISI alignments, no model.
    Builtin,
    /// A text-to-AMR model through the adapter protocol (`[models.text_to_amr]`); graphs
    /// without alignments are aligned by `amr-align`'s built-in aligner.
    External {
        name: String,
        model: Arc<dyn TextToAmr>,
    },
}

impl std::fmt::Debug for CaptionParser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CaptionParser::Builtin => f.write_str("Builtin"),
            CaptionParser::External { name, .. } => write!(f, "External({name})"),
        }
    }
}

/// What a parser made of one caption: its graph with the graph's PENMAN text, or why there is
/// none (with the parser's answer when it was text that is not a graph).
pub type Parsed = std::result::Result<(Graph, String), Unparsed>;

/// Why a caption has no graph.
#[derive(Clone, Debug, PartialEq)]
pub struct Unparsed {
    pub reason: String,
    /// The parser's answer, when there was one.
    pub answer: Option<String>,
}

impl CaptionParser {
    /// What the parser makes of each caption, in order: every graph is parsed here once, and
    /// an empty answer or graph is an [`Unparsed`]. `what` names the batch in an adapter's
    /// error ("the 12 captions of images a to b").
    pub fn parse(&self, captions: &[&str], what: &dyn Fn() -> String) -> Result<Vec<Parsed>> {
        let unparsed = |reason: &str, answer: Option<String>| Unparsed {
            reason: format!("{} {reason}", self.name()),
            answer,
        };
        match self {
            CaptionParser::Builtin => Ok(captions
                .iter()
                .map(|text| {
                    let graph = crate::amr::parse::parse_caption(text);
                    if graph.triples.is_empty() {
                        return Err(unparsed("gave no graph", None));
                    }
                    let penman = encode(&graph);
                    Ok((graph, penman))
                })
                .collect()),
            CaptionParser::External { name, model } => {
                let texts: Vec<String> = captions.iter().map(|t| t.to_string()).collect();
                let what = what();
                let answers = model
                    .parse_captions(&texts)
                    .map_err(|e| e.on_batch(name, &what))?;
                let answers = one_per_request(name, &what, captions.len(), answers, "graphs")?;
                Ok(answers
                    .into_iter()
                    .map(|penman| {
                        if penman.trim().is_empty() {
                            return Err(unparsed("gave no graph", None));
                        }
                        match parse(&penman) {
                            Ok(graph) if graph.triples.is_empty() => {
                                Err(unparsed("gave an empty graph", Some(penman)))
                            }
                            Ok(graph) => Ok((graph, penman)),
                            Err(e) => Err(unparsed(
                                &format!("gave a graph that does not parse: {e}"),
                                Some(penman),
                            )),
                        }
                    })
                    .collect())
            }
        }
    }

    /// The name the ledger gives this parser.
    pub fn name(&self) -> &str {
        match self {
            CaptionParser::Builtin => "the built-in caption parser",
            CaptionParser::External { name, .. } => name,
        }
    }
}

/// Adds what the parser made of `captions` (captions of `image`, in the same order) to the
/// image's AMRs, as the AMRs of their captions; with [`ParseCaptions::All`] they replace the
/// inputs' AMRs. A caption without a graph gets a rejected record instead. Returns how many
/// graphs were added.
pub fn add_parsed(
    image: &mut ImageAnnotations,
    mode: ParseCaptions,
    captions: &[CaptionRow],
    parsed: Vec<Parsed>,
    rejected: &mut Vec<RejectedRow>,
) -> usize {
    if mode == ParseCaptions::All {
        image.amrs.clear();
    }
    let mut added = 0;
    for (caption, parsed) in captions.iter().zip(parsed) {
        match parsed {
            Ok((graph, penman)) => {
                image.amrs.push(amr_row(
                    caption.image_id.clone(),
                    caption.caption_id.clone(),
                    Some(caption.caption_id.clone()),
                    &graph,
                    penman,
                ));
                added += 1;
            }
            Err(unparsed) => rejected.push(RejectedRow {
                format: "text-to-amr".into(),
                source_file: String::new(),
                record: format!(
                    "caption {} of image {}",
                    caption.caption_id, caption.image_id
                ),
                line: None,
                byte_offset: None,
                reason: format!("text-to-amr: {}", unparsed.reason),
                excerpt: excerpt(unparsed.answer.as_deref().unwrap_or(&caption.text)),
            }),
        }
    }
    added
}

/// The record an image gets when its captions have no AMR and none may be parsed
/// ([`ParseCaptions::Never`]): SSA has nothing to merge for it.
pub fn no_amr(image: &ImageAnnotations) -> Option<RejectedRow> {
    if image.captions.is_empty() || !image.amrs.is_empty() {
        return None;
    }
    Some(RejectedRow {
        format: "ssa".into(),
        source_file: String::new(),
        record: format!("image {}", image.image_id),
        line: None,
        byte_offset: None,
        reason: format!(
            "ssa: the image's {} captions have no AMR and `parse_captions = \"never\"`",
            image.captions.len()
        ),
        excerpt: excerpt(&image.captions[0].text),
    })
}
