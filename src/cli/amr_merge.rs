//! `capflow amr merge` and `capflow amr inspect`: build one image's meta-vgAMR from its caption
//! AMRs and show it as PENMAN (with the merge order and, on request, the event subgraphs) or as
//! Graphviz DOT.
//!
//! Groundings are read from JSON lines of the `groundings` table rows (`GroundingRow`), or from
//! a dataset path with `--groundings-format` (any `capflow ingest` format that yields grounding
//! rows). A caption AMR `# ::id <image>.<k>` takes the groundings whose `caption_id` is
//! `<image>#<k>`, `<image>.<k>` or the graph's `# ::caption_id`; its caption tokens are its
//! `# ::snt` split on whitespace.

use std::collections::HashSet;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use crate::amr::align::{ground, ModifierLexicon, VgAmr};
use crate::amr::dot::to_dot;
use crate::amr::merge::{
    meta_graph, ExactWords, MergeContext, MergeStep, MetaGraph, RuleSet, WordSimilarity,
};
use crate::amr::penman::{encode, parse_many};
use crate::amr::sample::{event_subgraphs, read_frames, SamplingConfig};
use crate::amr::smatch::{smatch, SmatchOptions};
use crate::amr::Graph;
use crate::error::{Error, Result};
use crate::ingest::{read_input, Format, Row, VecSink};
use crate::schema::GroundingRow;
use crate::text::{VectorFormat, WordVectors};

/// Inputs shared by `merge` and `inspect`.
#[derive(Debug, clap::Args)]
pub struct MetaGraphInputs {
    /// One image's caption AMRs in PENMAN notation (`# ::id <image>.<k>`, `# ::snt`, alignments).
    pub file: PathBuf,
    /// Grounded phrases: JSON lines of grounding rows, or a dataset read with
    /// `--groundings-format`.
    #[arg(long)]
    pub groundings: Option<PathBuf>,
    /// Read `--groundings` as this input format instead of JSON lines.
    #[arg(long, value_enum, requires = "groundings")]
    pub groundings_format: Option<Format>,
    /// Word vectors (GloVe or word2vec text) for label similarity; without them only identical
    /// labels, groundings and argument structure merge nodes.
    #[arg(long)]
    pub vectors: Option<PathBuf>,
    /// Which reference rule set to merge with.
    #[arg(long, value_enum, default_value_t = RuleSet::Coco)]
    pub variant: RuleSet,
}

#[derive(Debug, clap::Args)]
pub struct MergeArgs {
    #[command(flatten)]
    pub inputs: MetaGraphInputs,
    /// Also print the event subgraphs sampled from the meta graph.
    #[arg(long)]
    pub events: bool,
    /// Global seed of event sampling.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// PropBank frame lemmas, one per line (or frame file names such as `sit.xml`); only these
    /// predicates are sampled.
    #[arg(long)]
    pub frames: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    #[command(flatten)]
    pub inputs: MetaGraphInputs,
    /// Print the meta graph as Graphviz DOT.
    #[arg(long)]
    pub dot: bool,
}

/// `capflow amr merge`.
pub fn run_merge(args: &MergeArgs) -> Result<()> {
    let built = build(&args.inputs)?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let w = crate::cli::out::stdout_error;
    writeln!(
        out,
        "# merge order (ids >= {} are earlier merges)",
        built.captions.len()
    )
    .map_err(w)?;
    for (k, step) in built.order.iter().enumerate() {
        writeln!(
            out,
            "# {}\t{} + {} -> {}",
            k + 1,
            cluster_name(&built.captions, step.left),
            cluster_name(&built.captions, step.right),
            built.captions.len() + k
        )
        .map_err(w)?;
    }
    let mut graph = built.meta.graph();
    graph
        .metadata
        .insert(0, ("id".to_string(), built.image.clone()));
    writeln!(out, "{}\n", encode(&graph)).map_err(w)?;
    if args.events {
        let frames = match &args.frames {
            Some(path) => Some(read_frames(path)?),
            None => None,
        };
        let mut config = SamplingConfig::new(args.seed, &built.image);
        config.frames = frames.as_ref();
        for (k, event) in event_subgraphs(&built.meta, &config).iter().enumerate() {
            let mut g = event.graph.clone();
            g.metadata.insert(
                0,
                (
                    "id".to_string(),
                    format!("{}_{}_{}", built.image, event.predicate, k),
                ),
            );
            g.metadata
                .push(("boxes".to_string(), event.boxes.len().to_string()));
            if event.unknown {
                g.metadata
                    .push(("grounding".to_string(), "unknown".to_string()));
            }
            writeln!(out, "{}\n", encode(&g)).map_err(w)?;
        }
    }
    out.flush().map_err(w)
}

/// `capflow amr inspect`.
pub fn run_inspect(args: &InspectArgs) -> Result<()> {
    let built = build(&args.inputs)?;
    let text = if args.dot {
        to_dot(&built.meta, &built.image)
    } else {
        format!("{}\n", encode(&built.meta.graph()))
    };
    std::io::stdout()
        .write_all(text.as_bytes())
        .and_then(|()| std::io::stdout().flush())
        .map_err(crate::cli::out::stdout_error)
}

fn cluster_name(captions: &[String], id: usize) -> String {
    captions
        .get(id)
        .cloned()
        .unwrap_or_else(|| format!("merge{id}"))
}

struct Built {
    image: String,
    captions: Vec<String>,
    order: Vec<MergeStep>,
    meta: MetaGraph,
}

fn build(inputs: &MetaGraphInputs) -> Result<Built> {
    let path = inputs.file.as_path();
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    let groundings = match &inputs.groundings {
        Some(g) => read_groundings(g, inputs.groundings_format)?,
        None => Vec::new(),
    };
    let lexicon = ModifierLexicon::wordnet();
    let mut vgamrs = Vec::new();
    for (k, block) in parse_many(&text).into_iter().enumerate() {
        let graph = block.graph.map_err(|e| {
            Error::record(
                path.display().to_string(),
                format!("graph {} (line {})", k + 1, block.line),
                e.to_string(),
            )
        })?;
        vgamrs.push(ground_caption(&graph, k, &groundings, lexicon));
    }
    if vgamrs.is_empty() {
        return Err(Error::record(
            path.display().to_string(),
            "file",
            "holds no AMR graph",
        ));
    }
    let image = image_of(&vgamrs[0].caption_id);
    let vectors = match &inputs.vectors {
        Some(v) => Some(WordVectors::read(v, VectorFormat::Detect)?),
        None => None,
    };
    let similarity: &dyn WordSimilarity = match &vectors {
        Some(v) => v,
        None => &ExactWords,
    };
    let ctx = MergeContext {
        rules: inputs.variant,
        similarity,
        lexicon,
        log: None,
    };
    let options = SmatchOptions::default();
    let f_score = |a: &Graph, b: &Graph| smatch(a, b, &options).f1();
    let (order, meta) = meta_graph(&vgamrs, &f_score, &ctx)?;
    Ok(Built {
        image,
        captions: vgamrs.iter().map(|v| v.caption_id.clone()).collect(),
        order,
        meta,
    })
}

/// The image of an SSA graph id `<image>.<k>`.
fn image_of(id: &str) -> String {
    match id.rsplit_once(['.', '#']) {
        Some((image, k)) if k.chars().all(|c| c.is_ascii_digit()) => image.to_string(),
        _ => id.to_string(),
    }
}

fn ground_caption(
    graph: &Graph,
    ordinal: usize,
    groundings: &[GroundingRow],
    lexicon: &ModifierLexicon,
) -> VgAmr {
    let id = graph
        .id()
        .map_or_else(|| format!("graph{}", ordinal + 1), str::to_string);
    let mut keys: HashSet<String> = [id.clone()].into();
    if let Some((image, k)) = id.rsplit_once('.') {
        keys.insert(format!("{image}#{k}"));
    }
    if let Some(c) = graph.meta("caption_id") {
        keys.insert(c.to_string());
    }
    let phrases: Vec<GroundingRow> = groundings
        .iter()
        .filter(|g| keys.contains(&g.caption_id))
        .cloned()
        .collect();
    let snt = graph.meta("snt").unwrap_or_default();
    let tokens: Vec<&str> = snt.split_whitespace().collect();
    ground(&id, graph, &tokens, &phrases, lexicon)
}

fn read_groundings(path: &Path, format: Option<Format>) -> Result<Vec<GroundingRow>> {
    if let Some(format) = format {
        let mut sink = VecSink::default();
        read_input(format, path, &mut sink)?;
        return Ok(sink
            .rows
            .into_iter()
            .filter_map(|r| match r {
                Row::Grounding(g) => Some(g),
                _ => None,
            })
            .collect());
    }
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut rows = Vec::new();
    for (k, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|e| Error::io(path, e))?;
        if line.trim().is_empty() {
            continue;
        }
        let row: GroundingRow = serde_json::from_str(&line).map_err(|e| {
            Error::record(
                path.display().to_string(),
                format!("line {}", k + 1),
                format!("not a grounding row: {e}"),
            )
        })?;
        rows.push(row);
    }
    Ok(rows)
}
