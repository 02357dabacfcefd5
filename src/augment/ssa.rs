//! SSA, structured semantic augmentation (METHODS.md §1), as plain functions over one image.
//!
//! The dataflow runs these one stage at a time (`src/dataflow/stages/`); each is a plain
//! function that can be tested without timely.
//!
//! 0. text-to-amr ([`captions_to_parse`], [`CaptionParser`], [`add_parsed`]): parse the
//!    captions that have no AMR into AMR graphs (the built-in caption parser or an external
//!    model).
//! 1. [`align`]: parse the image's caption AMRs, token-align those that come without
//!    alignments ([`align_tokens`]), and ground their noun nodes in the caption's phrase boxes
//!    (vgAMR).
//! 2. [`merge`]: Smatch between every pair, UPGMA merge order, pairwise merge into the meta graph.
//! 3. [`sample`]: event subgraphs of every predicate.
//! 4. realize: a sentence per subgraph ([`EventRealizer`]: the built-in realizer or an external
//!    AMR-to-text model).
//! 5. [`filter_sentences`] / [`judge`]: the quality filter (score threshold, hallucination words, noun grounding,
//!    fully grounded, at least one control box, duplicates).
//! 6. [`ssa_sample`]: the control signals (boxes, coverage, length level, word count, verbs).

mod parse;
mod stats;

pub use parse::{
    add_parsed, captions_to_parse, no_amr, CaptionParser, ParseCaptions, Parsed, Unparsed,
};
pub use stats::{CaptionNumbering, SsaCorpusStats};

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::PathBuf;
use std::sync::Arc;

use crate::amr::align::{
    ground_graph, is_entity_concept, is_predicate, strip_sense, ModifierLexicon, VgAmr,
};
use crate::amr::graph::AlignmentFlavour;
use crate::amr::merge::{
    smatch_meta_graph, ExactWords, MergeContext, MergeLog, MetaGraph, RuleSet, WordSimilarity,
};
use crate::amr::penman::{alignment_flavour, encode, parse};
use crate::amr::sample::{event_subgraphs, EventSubgraph, SamplingConfig};
use crate::amr::smatch::SmatchOptions;
use crate::amr::token_align::align_graph;
use crate::amr::Graph;
use crate::augment::control::{coverage_percent, ssa_length_level, word_count};
use crate::augment::ImageAnnotations;
use crate::error::Result;
use crate::models::{one_per_request, AmrToText, ExternalQualityScorer};
use crate::schema::{excerpt, CaptionRow, Provenance, QualityScore, RejectedRow, SampleRow};
use crate::select::quality::QualityScorer;
use crate::text::tokenize::{is_punctuation, tokenize};
use crate::text::WordVectors;

/// The method name written into every SSA sample.
pub const METHOD: &str = "ssa";

/// SSA settings: the `[ssa]` table of a recipe.
#[derive(Clone, Debug, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SsaConfig {
    /// Merge rule set: `coco` (COCO Entities class groundings) or `flickr` (phrase chains).
    pub rules: RuleSet,
    /// Event subgraphs with fewer nodes are dropped.
    pub min_nodes: usize,
    /// PropBank frame lemmas, one per line (or frame file names); only these predicates are
    /// sampled. Without it every predicate is.
    pub frames: Option<PathBuf>,
    /// Word vectors (GloVe or word2vec text). Without them vectors are trained on the run's
    /// captions (PPMI + SVD).
    pub vectors: Option<PathBuf>,
    /// Samples scoring at or below this are dropped (GRUEN's 0.7 in the paper).
    pub quality_threshold: f64,
    /// A noun absent from the image's captions must be this similar to one of their words.
    pub noun_similarity: f64,
    /// A sample containing any of these words is dropped.
    pub hallucination_words: Vec<String>,
    /// Drop samples with a node grounded to an unknown region (the reference does).
    pub require_fully_grounded: bool,
    /// Keep the dataset's own captions as `original` samples beside the SSA samples.
    pub include_originals: bool,
    /// Which captions are parsed into AMR (stage `text-to-amr`): those without an AMR in the
    /// inputs (`missing`, the default), `all`, or `never`.
    #[serde(skip_serializing_if = "ParseCaptions::is_default")]
    pub parse_captions: ParseCaptions,
    /// Smatch search settings for the merge order.
    #[serde(skip)]
    pub smatch: SmatchOptions,
}

impl Default for SsaConfig {
    fn default() -> Self {
        SsaConfig {
            rules: RuleSet::Flickr,
            min_nodes: 3,
            frames: None,
            vectors: None,
            quality_threshold: crate::select::quality::DEFAULT_THRESHOLD,
            noun_similarity: 0.5,
            hallucination_words: Vec::new(),
            require_fully_grounded: true,
            include_originals: true,
            parse_captions: ParseCaptions::default(),
            smatch: SmatchOptions::default(),
        }
    }
}

/// Turns event subgraphs into sentences.
///
/// Required: [`EventRealizer::realize_batch`], one sentence per graph, in order. The realize
/// stage calls it once per image with all of the image's subgraphs, from any worker thread. An
/// error fails the run (no dataset is committed) and must name the realizer and the batch.
pub trait EventRealizer: Send + Sync {
    fn realize_batch(&self, image_id: &str, graphs: &[&Graph]) -> Result<Vec<String>>;
}

/// An external AMR-to-text model (a subprocess adapter) as the realizer: subgraphs go out as
/// PENMAN.
pub struct ExternalRealizer {
    pub name: String,
    pub model: Arc<dyn AmrToText>,
}

impl EventRealizer for ExternalRealizer {
    fn realize_batch(&self, image_id: &str, graphs: &[&Graph]) -> Result<Vec<String>> {
        let penman: Vec<String> = graphs.iter().map(|g| encode(g)).collect();
        let what = format!("the {} subgraphs of image {image_id}", graphs.len());
        let sentences = self
            .model
            .generate_sentences(&penman)
            .map_err(|e| e.on_batch(&self.name, &what))?;
        let sentences = one_per_request(&self.name, &what, graphs.len(), sentences, "sentences")?;
        Ok(sentences)
    }
}

/// Corpus-level models SSA needs: built once per run, shared by every worker.
pub struct SsaModels {
    pub lexicon: &'static ModifierLexicon,
    /// Word vectors for label and noun similarity; `None` compares words exactly.
    pub vectors: Option<Arc<WordVectors>>,
    pub quality: Arc<dyn QualityScorer>,
    pub frames: Option<HashSet<String>>,
    pub realizer: Arc<dyn EventRealizer>,
    /// Parses the captions that `parse_captions` selects (stage `text-to-amr`).
    pub parser: CaptionParser,
    /// An external quality scorer (`[models.quality_scorer]`) in place of `quality`.
    pub external_quality: Option<ExternalQuality>,
}

/// An external quality scorer (GRUEN in the paper) through the adapter protocol: the stage
/// `quality-filter` sends it the sentences of a batch of images that pass the checks before the
/// score ([`to_score`]) in one request, and keeps those scoring above `quality_threshold`.
#[derive(Clone)]
pub struct ExternalQuality {
    pub name: String,
    pub model: Arc<dyn ExternalQualityScorer>,
}

impl SsaModels {
    pub fn similarity(&self) -> &dyn WordSimilarity {
        match &self.vectors {
            Some(v) => v.as_ref(),
            None => &ExactWords,
        }
    }
}

/// The caption AMRs of one image, grounded.
#[derive(Clone, Debug, Default)]
pub struct Aligned {
    pub vgamrs: Vec<VgAmr>,
    /// AMRs that could not be used, with why.
    pub rejected: Vec<RejectedRow>,
    /// How many of the AMRs came without token alignments and were aligned by the built-in
    /// aligner ([`align_tokens`]).
    pub token_aligned: usize,
}

/// Stage `amr-align`: parses the image's caption AMRs and grounds their nodes (vgAMR).
///
/// A graph finds its caption through its `caption_id`, else its id `<image>.<k>` (caption
/// `<image>#<k>`); it is grounded with that caption's phrases over the caption's tokens. An AMR
/// without a caption is still used, ungrounded, over its own sentence. A graph without any
/// token alignment (what amrlib or SPRING write) is first aligned by the built-in aligner
/// ([`align_tokens`]); a graph with alignments is used as it is.
pub fn align(image: &ImageAnnotations, lexicon: &ModifierLexicon) -> Aligned {
    let mut out = Aligned::default();
    for row in &image.amrs {
        let mut graph = match parse(&row.penman) {
            Ok(g) => g,
            Err(e) => {
                out.rejected.push(RejectedRow {
                    format: "penman".into(),
                    source_file: String::new(),
                    record: format!("AMR {} of image {}", row.graph_id, row.image_id),
                    line: None,
                    byte_offset: None,
                    reason: format!("amr-align: {e}"),
                    excerpt: excerpt(&row.penman),
                });
                continue;
            }
        };
        let caption = caption_of(image, row.caption_id.as_deref(), &row.graph_id);
        let caption_id = caption
            .map(|c| c.caption_id.clone())
            .or_else(|| row.caption_id.clone())
            .unwrap_or_else(|| row.graph_id.clone());
        let text = match caption {
            Some(c) => c.text.as_str(),
            None => row.sentence.as_deref().unwrap_or_default(),
        };
        if align_tokens(&mut graph, text) {
            out.token_aligned += 1;
        }
        let tokens: Vec<&str> = text.split_whitespace().collect();
        let phrases: Vec<_> = image
            .groundings
            .iter()
            .filter(|g| g.caption_id == caption_id)
            .collect();
        out.vgamrs
            .push(ground_graph(caption_id, graph, &tokens, &phrases, lexicon));
    }
    out
}

/// Aligns a caption AMR that has no token alignments at all (no `~e.N` or `~N` marker, no
/// `# ::alignments` or `# ::node` line) with the built-in aligner
/// ([`crate::amr::token_align::align_graph`]); returns whether it did. A graph with any
/// alignment is left exactly as it is.
///
/// The tokens are the graph's `# ::tok`, split on whitespace, as grounding reads it; without
/// it, `text` (the caption, or the AMR's sentence when it has no caption) tokenized by
/// [`crate::amr::token_align::tokenize`], written to the graph as its `# ::tok` (after
/// `# ::snt`) so that grounding reads the new `~e.N` indices over those tokens and maps them
/// to the caption's whitespace tokens, which the phrase spans index.
pub fn align_tokens(graph: &mut Graph, text: &str) -> bool {
    if alignment_flavour(graph) != AlignmentFlavour::None {
        return false;
    }
    let tokens: Vec<String> = match graph.meta("tok") {
        Some(tok) => tok.split_whitespace().map(str::to_string).collect(),
        None => {
            let mut tokens = crate::amr::token_align::tokenize(text);
            // A markup tag is one token, spaces included; one `# ::tok` token each.
            for token in &mut tokens {
                if token.contains(char::is_whitespace) {
                    *token = token.split_whitespace().collect::<Vec<_>>().join("_");
                }
            }
            tokens
        }
    };
    if tokens.is_empty() {
        return false;
    }
    align_graph(graph, &tokens);
    crate::amr::token_align::write_tok_line(graph, &tokens);
    true
}

/// The caption an AMR belongs to.
fn caption_of<'a>(
    image: &'a ImageAnnotations,
    caption_id: Option<&str>,
    graph_id: &str,
) -> Option<&'a CaptionRow> {
    if let Some(id) = caption_id {
        if let Some(c) = image.captions.iter().find(|c| c.caption_id == id) {
            return Some(c);
        }
    }
    let (_, k) = graph_id.rsplit_once(['.', '#'])?;
    let index: i32 = k.parse().ok()?;
    image.captions.iter().find(|c| c.caption_index == index)
}

/// Stage `merge`: pairwise Smatch, UPGMA order, merge into the meta graph. `None` without AMRs.
pub fn merge(
    vgamrs: &[VgAmr],
    config: &SsaConfig,
    models: &SsaModels,
) -> Result<Option<MetaGraph>> {
    if vgamrs.is_empty() {
        return Ok(None);
    }
    let (_, meta) = smatch_meta_graph(vgamrs, &config.smatch, &merge_context(config, models))?;
    Ok(Some(meta))
}

/// [`merge`], with the log of what the merge decided through word similarities
/// ([`MergeLog`], which a [`SsaRecord`] keeps).
pub fn merge_logged(
    vgamrs: &[VgAmr],
    config: &SsaConfig,
    models: &SsaModels,
) -> Result<Option<(MetaGraph, MergeLog)>> {
    if vgamrs.is_empty() {
        return Ok(None);
    }
    let ctx = merge_context(config, models);
    let (merged, log) = ctx.logged(|ctx| smatch_meta_graph(vgamrs, &config.smatch, ctx));
    let (_, meta) = merged?;
    Ok(Some((meta, log)))
}

fn merge_context<'a>(config: &SsaConfig, models: &'a SsaModels) -> MergeContext<'a> {
    MergeContext {
        rules: config.rules,
        similarity: models.similarity(),
        lexicon: models.lexicon,
        log: None,
    }
}

/// Stage `event-sample`: the event subgraphs of the meta graph.
pub fn sample(
    meta: &MetaGraph,
    image_id: &str,
    seed: u64,
    config: &SsaConfig,
    models: &SsaModels,
) -> Vec<EventSubgraph> {
    let mut sampling = SamplingConfig::new(seed, image_id);
    sampling.frames = models.frames.as_ref();
    sampling.min_nodes = config.min_nodes;
    event_subgraphs(meta, &sampling)
}

/// What the quality filter knows about an image: the words of its original captions.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CaptionContext {
    words: BTreeSet<String>,
    normalized: BTreeSet<String>,
}

impl CaptionContext {
    pub fn new(captions: &[CaptionRow]) -> Self {
        let mut words = BTreeSet::new();
        let mut normalized = BTreeSet::new();
        for c in captions {
            let tokens = tokenize(&c.text);
            normalized.insert(normalize(&tokens));
            words.extend(tokens.into_iter().filter(|t| !is_punctuation(t)));
        }
        CaptionContext { words, normalized }
    }

    /// Whether `noun` is one of the captions' words, in any simple inflection, or similar enough
    /// to one of them.
    fn grounds_noun(&self, noun: &str, models: &SsaModels, threshold: f64) -> bool {
        let noun = noun.to_lowercase();
        let forms = [
            noun.clone(),
            format!("{noun}s"),
            format!("{noun}es"),
            noun.strip_suffix('y')
                .map(|s| format!("{s}ies"))
                .unwrap_or_default(),
        ];
        if forms.iter().any(|f| self.words.contains(f)) {
            return true;
        }
        let Some(vectors) = &models.vectors else {
            return false;
        };
        self.words
            .iter()
            .any(|w| vectors.similarity(&noun, w) > threshold)
    }
}

fn normalize(tokens: &[String]) -> String {
    tokens
        .iter()
        .filter(|t| !is_punctuation(t))
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Why the quality filter dropped a sample; these are SSA's per-run counts, summed over the
/// images and reported by the run.
///
/// One of them, [`Drop::TokenAligned`], counts no drop: it counts the caption AMRs that came
/// without token alignments and were aligned by the built-in aligner in `amr-align`, reported
/// beside the drops ([`Drop::is_drop`]).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum Drop {
    LowQuality,
    Hallucination,
    NoNoun,
    UngroundedNoun,
    NotFullyGrounded,
    Duplicate,
    /// The subgraph has no grounded box: the sample would have no control box (and coverage 0).
    NoControlBox,
    /// Not a drop: a caption AMR without token alignments, aligned by the built-in aligner.
    TokenAligned,
}

impl Drop {
    pub fn as_str(self) -> &'static str {
        match self {
            Drop::LowQuality => "quality score at or below the threshold",
            Drop::Hallucination => "contains a hallucination word",
            Drop::NoNoun => "no noun",
            Drop::UngroundedNoun => "a noun is not in the image's captions",
            Drop::NotFullyGrounded => "a node is grounded to an unknown region",
            Drop::Duplicate => "duplicate sentence",
            Drop::NoControlBox => "no control box",
            Drop::TokenAligned => {
                "caption AMRs without token alignments aligned by the built-in aligner"
            }
        }
    }

    /// Whether this counts dropped sentences (every reason but [`Drop::TokenAligned`]).
    pub fn is_drop(self) -> bool {
        self != Drop::TokenAligned
    }
}

/// The nouns of a subgraph: its entity concepts.
pub fn event_nouns(event: &EventSubgraph, lexicon: &ModifierLexicon) -> Vec<String> {
    event
        .graph
        .instances()
        .values()
        .filter(|c| is_entity_concept(c, lexicon))
        .map(|c| c.to_string())
        .collect()
}

/// Stage `quality-filter` for one sample (duplicates are the caller's: they need the image's
/// other samples). Returns the scores, or why the sample is dropped; a subgraph without a
/// grounded box ([`Drop::NoControlBox`]) is dropped after every other check.
pub fn judge(
    text: &str,
    event: &EventSubgraph,
    context: &CaptionContext,
    config: &SsaConfig,
    models: &SsaModels,
) -> std::result::Result<Vec<QualityScore>, Drop> {
    let tokens = prejudge(text, event, context, config, models)?;
    judge_scored(
        builtin_score(models, &tokens),
        event.boxes.is_empty(),
        config,
    )
}

/// The name of the built-in quality scorer's score in a sample's `quality` list.
pub const BUILTIN_QUALITY: &str = "builtin-quality";

/// The checks of [`judge`] that come before the quality score (full grounding, hallucination
/// words, a noun, every noun grounded); the sentence's tokens when it passes them. Only these
/// sentences are sent to an external quality scorer.
pub fn prejudge(
    text: &str,
    event: &EventSubgraph,
    context: &CaptionContext,
    config: &SsaConfig,
    models: &SsaModels,
) -> std::result::Result<Vec<String>, Drop> {
    let (tokens, nouns) = fixed_checks(text, event, config, models.lexicon)?;
    nouns_grounded(&nouns, context, config, models)?;
    Ok(tokens)
}

/// The checks of [`prejudge`] that do not depend on the corpus-level models (full grounding,
/// hallucination words, a noun); the sentence's tokens and nouns when it passes them.
fn fixed_checks(
    text: &str,
    event: &EventSubgraph,
    config: &SsaConfig,
    lexicon: &ModifierLexicon,
) -> std::result::Result<(Vec<String>, Vec<String>), Drop> {
    if config.require_fully_grounded && event.unknown {
        return Err(Drop::NotFullyGrounded);
    }
    let tokens = tokenize(text);
    if tokens
        .iter()
        .any(|t| config.hallucination_words.iter().any(|h| h == t))
    {
        return Err(Drop::Hallucination);
    }
    let nouns = event_nouns(event, lexicon);
    if nouns.is_empty() {
        return Err(Drop::NoNoun);
    }
    Ok((tokens, nouns))
}

/// [`prejudge`]'s last check, through the word vectors: every noun in the captions.
fn nouns_grounded(
    nouns: &[String],
    context: &CaptionContext,
    config: &SsaConfig,
    models: &SsaModels,
) -> std::result::Result<(), Drop> {
    if nouns
        .iter()
        .all(|n| context.grounds_noun(n, models, config.noun_similarity))
    {
        Ok(())
    } else {
        Err(Drop::UngroundedNoun)
    }
}

/// The verdict on a sentence that passed [`prejudge`], from its quality score.
fn judge_scored(
    score: QualityScore,
    no_boxes: bool,
    config: &SsaConfig,
) -> std::result::Result<Vec<QualityScore>, Drop> {
    if score.value <= config.quality_threshold {
        return Err(Drop::LowQuality);
    }
    // Last, so that it counts the sentences that would otherwise be kept: SSA never emits a
    // sample without control boxes.
    if no_boxes {
        return Err(Drop::NoControlBox);
    }
    Ok(vec![score])
}

/// The built-in quality scorer's score of a sentence's tokens.
fn builtin_score(models: &SsaModels, tokens: &[String]) -> QualityScore {
    QualityScore {
        name: BUILTIN_QUALITY.into(),
        value: models.quality.score(tokens),
    }
}

/// Whether a sentence repeats one already kept for the image (or one of its captions); records
/// it otherwise.
pub fn is_duplicate(text: &str, context: &CaptionContext, seen: &mut HashSet<String>) -> bool {
    let key = normalize(&tokenize(text));
    context.normalized.contains(&key) || !seen.insert(key)
}

/// Stage `control-signals`: the sample row of a kept SSA sentence.
///
/// Control boxes are the subgraph's grounded boxes; control labels name the grounded nodes (the
/// label the sampler chose); source captions are the captions the subgraph's nodes came from.
pub fn ssa_sample(
    image: &ImageAnnotations,
    meta: &MetaGraph,
    index: usize,
    event: &EventSubgraph,
    text: String,
    quality: Vec<QualityScore>,
    seed: u64,
) -> SampleRow {
    let words = word_count(&text);
    let boxes = event.boxes.clone();
    let instances = event.graph.instances();
    let mut labels = Vec::new();
    let mut sources: Vec<String> = Vec::new();
    let mut verbs = BTreeSet::new();
    for var in &event.nodes {
        let label = instances.get(var.as_str()).copied().unwrap_or_default();
        if is_predicate(label) {
            verbs.insert(strip_sense(label).to_string());
        }
        let Some(node) = meta.index_of(var).and_then(|i| meta.nodes.get(i)) else {
            continue;
        };
        if node.grounding.as_ref().is_some_and(|g| !g.unknown) {
            labels.push(label.to_string());
        }
        for origin in &node.origins {
            if !sources.contains(&origin.caption_id) {
                sources.push(origin.caption_id.clone());
            }
        }
    }
    sources.sort();
    SampleRow {
        image: None,
        sample_id: format!("{}:{}:{}", image.image_id, METHOD, index),
        image_id: image.image_id.clone(),
        split: image.split().to_string(),
        method: METHOD.into(),
        coverage: image
            .size()
            .map_or(0.0, |(w, h)| coverage_percent(&boxes, w, h)),
        control_boxes: boxes,
        control_labels: labels,
        length_level: ssa_length_level(words),
        word_count: words as i32,
        verbs: verbs.into_iter().collect(),
        quality,
        provenance: Provenance {
            source_caption_ids: sources,
            node_ids: event.nodes.clone(),
            subgraph: Some(encode(&event.graph)),
            seed,
        },
        text,
    }
}

/// The dataset's own captions as samples ([`crate::augment::original`]), with the run's seed.
pub fn original_samples(image: &ImageAnnotations, seed: u64) -> Vec<SampleRow> {
    let mut samples = crate::augment::original::original_samples(image);
    for s in &mut samples {
        s.provenance.seed = seed;
    }
    samples
}

/// The dataset's own captions as `original` samples, first in each image's samples (the `D` of
/// `D ∪ SSA`; `include_originals`).
pub struct OriginalCaptions;

impl crate::augment::method::Method for OriginalCaptions {
    fn stage(&self) -> &str {
        "originals"
    }

    fn samples(&self, image: &ImageAnnotations, seed: u64) -> Result<Vec<SampleRow>> {
        Ok(original_samples(image, seed))
    }
}

/// What the quality filter kept of an image's sentences, and what it dropped, by reason.
#[derive(Clone, Debug, Default)]
pub struct Filtered {
    /// Indices of the kept sentences (and their subgraphs), with their quality scores.
    pub kept: Vec<(usize, Vec<QualityScore>)>,
    pub dropped: Vec<(Drop, u64)>,
}

/// Stage `quality-filter` for one image: [`judge`] on every sentence, then duplicates (of an
/// earlier kept sentence or of one of the image's captions).
pub fn filter_sentences(
    image: &ImageAnnotations,
    events: &[EventSubgraph],
    texts: &[String],
    config: &SsaConfig,
    models: &SsaModels,
) -> Filtered {
    filter_scored(image, events, texts, config, models, &mut |_, tokens| {
        builtin_score(models, tokens)
    })
}

/// The indices of the sentences of one image that pass [`prejudge`]: those an external quality
/// scorer is asked about.
pub fn to_score(
    image: &ImageAnnotations,
    events: &[EventSubgraph],
    texts: &[String],
    config: &SsaConfig,
    models: &SsaModels,
) -> Vec<usize> {
    let context = CaptionContext::new(&image.captions);
    events
        .iter()
        .zip(texts)
        .enumerate()
        .filter(|(_, (event, text))| prejudge(text, event, &context, config, models).is_ok())
        .map(|(index, _)| index)
        .collect()
}

/// [`filter_sentences`] with the quality score of sentence `index` (its tokens given) from
/// `score`, which is asked only about sentences that pass [`prejudge`].
pub fn filter_scored(
    image: &ImageAnnotations,
    events: &[EventSubgraph],
    texts: &[String],
    config: &SsaConfig,
    models: &SsaModels,
    score: &mut dyn FnMut(usize, &[String]) -> QualityScore,
) -> Filtered {
    let context = CaptionContext::new(&image.captions);
    let mut seen = HashSet::new();
    let mut kept = Vec::new();
    let mut dropped = std::collections::BTreeMap::new();
    for (index, (event, text)) in events.iter().zip(texts).enumerate() {
        let verdict = prejudge(text, event, &context, config, models).and_then(|tokens| {
            let score = score(index, &tokens);
            judge_passed(
                text,
                score,
                event.boxes.is_empty(),
                &context,
                &mut seen,
                config,
            )
        });
        match verdict {
            Ok(scores) => kept.push((index, scores)),
            Err(reason) => *dropped.entry(reason).or_insert(0u64) += 1,
        }
    }
    Filtered {
        kept,
        dropped: dropped.into_iter().collect(),
    }
}

/// The checks after [`prejudge`], in order: the quality score, a control box, not a duplicate
/// of an earlier kept sentence or a caption (recorded in `seen` when kept).
fn judge_passed(
    text: &str,
    score: QualityScore,
    no_boxes: bool,
    context: &CaptionContext,
    seen: &mut HashSet<String>,
    config: &SsaConfig,
) -> std::result::Result<Vec<QualityScore>, Drop> {
    let scores = judge_scored(score, no_boxes, config)?;
    if is_duplicate(text, context, seen) {
        Err(Drop::Duplicate)
    } else {
        Ok(scores)
    }
}

/// What SSA's stages before the quality filter made of one image, kept so that new
/// corpus-level models (a refit) need only the quality filter again ([`replay`]): the merge's
/// log, which tells whether the new word vectors would merge the image the same way, the
/// captions' words the filter compares nouns with, the drops that do not depend on the models,
/// and the sample of every sentence that passed those checks, without its quality score.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SsaRecord {
    /// A digest of the SSA settings the record was made with ([`config_digest`]): the checks
    /// it kept the outcome of, and the events it kept, depend on them.
    config: u64,
    pub merge: MergeLog,
    context: CaptionContext,
    /// Drops before the quality filter (`amr-align`'s token-aligned count) and of its checks
    /// that do not depend on the models, by reason.
    fixed_drops: Vec<(Drop, u64)>,
    candidates: Vec<SsaCandidate>,
}

/// A realized sentence that passed the quality filter's checks that do not depend on the
/// models: its nouns (the filter's grounding check) and its sample, without a quality score.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct SsaCandidate {
    nouns: Vec<String>,
    sample: SampleRow,
}

/// A digest of SSA's settings, which a record must be replayed with.
fn config_digest(config: &SsaConfig) -> u64 {
    let bytes = serde_json::to_vec(config).unwrap_or_default();
    xxhash_rust::xxh3::xxh3_64(&bytes)
}

/// The record of one image whose meta graph `meta` (merged with `log`) gave the subgraphs
/// `events`, realized as `texts`; `earlier` are the drops counted before the quality filter.
/// The samples carry `seed`, the run's, as the stages' samples do.
#[allow(clippy::too_many_arguments)]
pub fn record(
    image: &ImageAnnotations,
    meta: &MetaGraph,
    log: MergeLog,
    events: &[EventSubgraph],
    texts: &[String],
    earlier: &[(Drop, u64)],
    config: &SsaConfig,
    models: &SsaModels,
    seed: u64,
) -> SsaRecord {
    let lexicon = models.lexicon;
    let mut fixed: BTreeMap<Drop, u64> = BTreeMap::new();
    for &(reason, n) in earlier {
        *fixed.entry(reason).or_insert(0) += n;
    }
    let mut candidates = Vec::new();
    for (index, (event, text)) in events.iter().zip(texts).enumerate() {
        match fixed_checks(text, event, config, lexicon) {
            Ok((_, nouns)) => candidates.push(SsaCandidate {
                nouns,
                sample: ssa_sample(image, meta, index, event, text.clone(), Vec::new(), seed),
            }),
            Err(reason) => *fixed.entry(reason).or_insert(0) += 1,
        }
    }
    SsaRecord {
        config: config_digest(config),
        merge: log,
        context: CaptionContext::new(&image.captions),
        fixed_drops: fixed.into_iter().collect(),
        candidates,
    }
}

/// What [`replay`] gives for one image: its SSA samples and its drops by reason (those of the
/// record and the quality filter's), as the stages from `amr-align` on would give them.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Replayed {
    pub samples: Vec<SampleRow>,
    pub dropped: Vec<(Drop, u64)>,
}

/// The quality filter and the control signals of a recorded image with the built-in quality
/// scorer and word vectors of `models`: the image's SSA samples as computing it from its
/// inputs with these models gives them. `None` when the merge's log does not hold under the
/// new vectors, when `config` is not the configuration the record was made with, or when
/// `models` score with an external scorer (whose requests go by batches of images): the image
/// must then be computed again.
pub fn replay(record: &SsaRecord, config: &SsaConfig, models: &SsaModels) -> Option<Replayed> {
    if models.external_quality.is_some()
        || record.config != config_digest(config)
        || !record.merge.holds(models.similarity())
    {
        return None;
    }
    let mut dropped: BTreeMap<Drop, u64> = record.fixed_drops.iter().copied().collect();
    let mut seen = HashSet::new();
    let mut samples = Vec::new();
    for candidate in &record.candidates {
        let sample = &candidate.sample;
        let verdict =
            nouns_grounded(&candidate.nouns, &record.context, config, models).and_then(|()| {
                let score = builtin_score(models, &tokenize(&sample.text));
                let no_boxes = sample.control_boxes.is_empty();
                judge_passed(
                    &sample.text,
                    score,
                    no_boxes,
                    &record.context,
                    &mut seen,
                    config,
                )
            });
        match verdict {
            Ok(quality) => samples.push(SampleRow {
                quality,
                ..sample.clone()
            }),
            Err(reason) => *dropped.entry(reason).or_insert(0) += 1,
        }
    }
    Some(Replayed {
        samples,
        dropped: dropped.into_iter().collect(),
    })
}

/// What a run with a state keeps of one image's SSA for a refit ([`crate::dataflow::state`]):
/// the image's [`SsaRecord`], or, for an image whose captions gave no meta graph (no AMR, or
/// none aligned), the drops counted before the merge: no corpus-level model changes that.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum SsaKept {
    Record(Box<SsaRecord>),
    Unmerged {
        config: u64,
        dropped: Vec<(Drop, u64)>,
    },
}

impl SsaKept {
    /// What is kept of an image with no meta graph, whose drops so far are `dropped`.
    pub fn unmerged(config: &SsaConfig, dropped: &[(Drop, u64)]) -> SsaKept {
        let mut total: BTreeMap<Drop, u64> = BTreeMap::new();
        for &(reason, n) in dropped {
            *total.entry(reason).or_insert(0) += n;
        }
        SsaKept::Unmerged {
            config: config_digest(config),
            dropped: total.into_iter().collect(),
        }
    }

    /// The image's SSA samples and drops under `models`, as [`replay`] gives them; `None` when
    /// the image must be computed again.
    pub fn replay(&self, config: &SsaConfig, models: &SsaModels) -> Option<Replayed> {
        match self {
            SsaKept::Record(record) => replay(record, config, models),
            SsaKept::Unmerged {
                config: digest,
                dropped,
            } => {
                (models.external_quality.is_none() && *digest == config_digest(config)).then(|| {
                    Replayed {
                        samples: Vec::new(),
                        dropped: dropped.clone(),
                    }
                })
            }
        }
    }
}

/// The built-in realizer ([`crate::amr::realize::Realizer`]) as the realize stage's model.
pub fn builtin_realizer() -> Arc<dyn EventRealizer> {
    Arc::new(BuiltinRealizer)
}

struct BuiltinRealizer;

impl EventRealizer for BuiltinRealizer {
    fn realize_batch(&self, _image_id: &str, graphs: &[&Graph]) -> Result<Vec<String>> {
        let realizer = crate::amr::realize::Realizer::builtin();
        Ok(graphs.iter().map(|g| realizer.realize(g)).collect())
    }
}
