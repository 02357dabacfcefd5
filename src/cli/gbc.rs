//! `capflow gbc`: convert ml-gbc graph files between layouts, summarize them, and run ml-gbc's
//! graph operations on them (caption filtering, subgraphs, GBC-concat, composition hints).

use std::path::{Path, PathBuf};

use std::collections::HashMap;
use std::io::Write;

use clap::{ArgAction, Subcommand};
use serde_json::json;

use super::out::{diagnostic, outln, status};
use crate::augment::gbc::{graph_seed, CONCAT_STAGE, FILTER_STAGE, SUBGRAPH_STAGE};
use crate::error::{Error, Result};
use crate::graph::composition_mst::{composition_hints, RootCriterion, STAGE as HINTS_STAGE};
use crate::graph::gbc::{
    apply_masks, recompute_masks, record_from_row, statistics, write_gbc_file, GbcFileFormat,
    GbcStatistics,
};
use crate::graph::gbc_edit::{
    caption_concat, subgraph, ConcatOptions, SubgraphOptions, TraversalOrder,
};
use crate::graph::gbc_filter::{filter_graph, GbcFilterConfig};
use crate::ingest::{gbc as gbc_reader, Row, VecSink};
use crate::schema::{excerpt, GbcGraphRow, RejectedRow};

#[derive(Debug, clap::Args)]
pub struct GbcArgs {
    #[command(subcommand)]
    pub command: GbcCommand,
}

#[derive(Debug, Subcommand)]
pub enum GbcCommand {
    /// Convert GBC graphs between ml-gbc's layouts; each side's layout follows its extension
    /// (.jsonl, .json, .parquet). Records that cannot be read are reported and left out.
    Convert(ConvertArgs),
    /// Print per-graph statistics (vertices, edges, captions, words, diameter), their means, and
    /// how many stored sub/super masks agree with recomputed ones.
    Stats(StatsArgs),
    /// Filter captions, vertices and graphs bottom-up as ml-gbc's `GbcClipFilter` does: captions
    /// dropped by label, truncation or CLIP score; an edge text no remaining caption mentions
    /// comes back in a `bagofwords` caption; a vertex left without captions goes, and a graph
    /// goes with its image vertex. Options and defaults are ml-gbc's.
    Filter(FilterArgs),
    /// Cut every graph to a subgraph (ml-gbc's `GbcGraphFull.get_subgraph`).
    Subgraph(SubgraphArgs),
    /// GBC-concat: every caption of a graph in traversal order, joined (ml-gbc's
    /// `get_caption_concat`); one JSON line (or TSV row) per graph.
    Concat(ConcatArgs),
    /// Composition hints: the Euclidean-MST "hardcode" captions of every composition vertex
    /// (ml-gbc's `composition_mst.py`); one JSON line (or TSV row) per composition.
    Hints(HintsArgs),
}

/// The input and output of a command that rewrites graphs.
#[derive(Debug, clap::Args)]
pub struct GraphFiles {
    /// Input file (.jsonl, .json, .parquet) or a directory of them.
    pub input: PathBuf,
    /// Output file (.jsonl, .json, .parquet).
    pub output: PathBuf,
    /// Write the records that could not be read (or, for `subgraph`, whose subgraph cannot be
    /// taken) to this Parquet file (capflow's `rejected` table).
    #[arg(long)]
    pub rejected: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct FilterArgs {
    #[command(flatten)]
    pub files: GraphFiles,
    /// Caption labels or full labels (`detail-entity`) to drop [default: hardcode; "" for none].
    #[arg(long, value_delimiter = ',', value_name = "LABEL,...")]
    pub exclude_labels: Option<Vec<String>>,
    /// Probability of dropping a caption, per label or full label [default: none].
    #[arg(long, value_delimiter = ',', value_name = "LABEL=P,...", value_parser = label_value)]
    pub random_filtering_probs: Option<Vec<(String, f64)>>,
    /// Seed of the random choices (random dropping, random node selection); each graph draws
    /// from (seed, image, graph index) as recipes do.
    #[arg(long, default_value_t = 486)]
    pub seed: u64,
    /// CLIP models whose scores (`clip_scores.scores`) are averaged [default:
    /// dfn5b-fm-b-patch32-224,dfn5b-h-patch14-378,openai-l-patch14-336].
    #[arg(long, value_delimiter = ',', value_name = "NAME,...")]
    pub clip_names: Option<Vec<String>>,
    /// Lowest CLIP score per label or full label [default: short-global=0.2,detail-entity=0.2;
    /// "" for none].
    #[arg(long, value_delimiter = ',', value_name = "LABEL=SCORE,...", value_parser = label_value)]
    pub min_clip_scores: Option<Vec<(String, f64)>>,
    /// Drop captions whose CLIP input was truncated.
    #[arg(long, value_name = "BOOL", action = ArgAction::Set, default_value_t = true)]
    pub remove_truncation: bool,
    /// Add a `bagofwords` caption for edge texts no caption mentions any more.
    #[arg(long, value_name = "BOOL", action = ArgAction::Set, default_value_t = true)]
    pub add_bag_of_words: bool,
    /// Without a bag-of-words caption, remove the edges whose text no caption mentions.
    #[arg(long, value_name = "BOOL", action = ArgAction::Set, default_value_t = true)]
    pub remove_edge_with_no_corr: bool,
    /// Drop the image (and graph) when a short image caption scores below `short-image`.
    #[arg(long, value_name = "BOOL", action = ArgAction::Set, default_value_t = true)]
    pub filter_image_using_short_clip_scores: bool,
    /// Caption labels the image vertex must keep, else the graph goes [default: none].
    #[arg(long, value_delimiter = ',', value_name = "LABEL,...")]
    pub must_include_labels: Option<Vec<String>>,
    /// Take the `--max-n-vertices-per-graph` subgraph before filtering instead of after.
    #[arg(long, value_name = "BOOL", action = ArgAction::Set, default_value_t = false)]
    pub filter_after_selection: bool,
    /// Keep at most this many vertices per graph.
    #[arg(long, value_name = "N")]
    pub max_n_vertices_per_graph: Option<usize>,
    /// The traversal that picks the vertices kept per graph.
    #[arg(long, value_enum, default_value_t = TraversalOrder::Bfs)]
    pub node_selection_mode: TraversalOrder,
    /// Stop before the graph that would take the kept vertices of all graphs above N.
    #[arg(long, value_name = "N")]
    pub max_n_vertices: Option<usize>,
}

#[derive(Debug, clap::Args)]
pub struct SubgraphArgs {
    #[command(flatten)]
    pub files: GraphFiles,
    /// Keep at most this many vertices per graph.
    #[arg(long, value_name = "N")]
    pub max_n_vertices: Option<usize>,
    /// Keep vertices at most this deep (the roots are at depth 0).
    #[arg(long, value_name = "D")]
    pub max_depth: Option<usize>,
    /// The traversal that picks the vertices.
    #[arg(long, value_enum, default_value_t = TraversalOrder::Bfs)]
    pub mode: TraversalOrder,
    /// Walk from this vertex instead of the roots (not with `--mode random`).
    #[arg(long, value_name = "ID")]
    pub root_id: Option<String>,
    /// Visit each vertex's children in a random order (not with `--mode random`).
    #[arg(long, value_name = "BOOL", action = ArgAction::Set, default_value_t = false)]
    pub edge_shuffling: bool,
    /// Seed of the random choices; each graph draws from (seed, image, graph index).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

#[derive(Debug, clap::Args)]
pub struct ConcatArgs {
    /// Input file (.jsonl, .json, .parquet) or a directory of them.
    pub input: PathBuf,
    /// Write the listing here instead of to stdout.
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    /// What joins the captions.
    #[arg(long, default_value = " ")]
    pub separator: String,
    /// The order of the vertices.
    #[arg(long, value_enum, default_value_t = TraversalOrder::Bfs)]
    pub mode: TraversalOrder,
    /// Cut each caption's repeated suffix first (ml-gbc's `remove_repeated_suffix`).
    #[arg(long, value_name = "BOOL", action = ArgAction::Set, default_value_t = false)]
    pub remove_repeated_suffix: bool,
    /// Seed of the random order; each graph draws from (seed, image, graph index).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Print `image_id<TAB>text` rows (tabs, newlines and backslashes escaped) instead of JSON
    /// lines.
    #[arg(long)]
    pub tsv: bool,
}

#[derive(Debug, clap::Args)]
pub struct HintsArgs {
    /// Input file (.jsonl, .json, .parquet) or a directory of them.
    pub input: PathBuf,
    /// Write the listing here instead of to stdout.
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    /// The MST root of every composition [default: drawn per composition, as ml-gbc does].
    #[arg(long, value_enum)]
    pub root_criterion: Option<RootCriterion>,
    /// Seed of the random choices (root criterion, diagonal wording), per (image, vertex).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Print `image_id<TAB>vertex_id<TAB>root_criterion<TAB>hint` rows, one per hint, instead
    /// of JSON lines.
    #[arg(long)]
    pub tsv: bool,
}

/// Parses `LABEL=VALUE`.
fn label_value(text: &str) -> std::result::Result<(String, f64), String> {
    let (label, value) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?}: expected LABEL=VALUE"))?;
    let value: f64 = value
        .trim()
        .parse()
        .map_err(|_| format!("{text:?}: {value:?} is not a number"))?;
    Ok((label.trim().to_string(), value))
}

#[derive(Debug, clap::Args)]
pub struct ConvertArgs {
    #[command(flatten)]
    pub files: GraphFiles,
    /// Recompute every vertex's sub_masks/super_masks (writes the full form).
    #[arg(long)]
    pub recompute_masks: bool,
}

#[derive(Debug, clap::Args)]
pub struct StatsArgs {
    /// Input file (.jsonl, .json, .parquet) or a directory of them.
    pub file: PathBuf,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: GbcArgs) -> Result<()> {
    match args.command {
        GbcCommand::Convert(args) => convert(args),
        GbcCommand::Stats(args) => stats(args),
        GbcCommand::Filter(args) => filter(args),
        GbcCommand::Subgraph(args) => subgraph_command(args),
        GbcCommand::Concat(args) => concat(args),
        GbcCommand::Hints(args) => hints(args),
    }
}

/// Reads every graph of `path`, printing each rejection to stderr.
fn read_graphs(path: &Path) -> Result<(Vec<GbcGraphRow>, Vec<RejectedRow>)> {
    let mut sink = VecSink::default();
    gbc_reader::read(path, &mut sink)?;
    for r in &sink.rejected {
        diagnostic!(
            "capflow: rejected {}, {}: {}",
            r.source_file,
            r.record,
            r.reason
        );
    }
    let rows = sink
        .rows
        .into_iter()
        .filter_map(|row| match row {
            Row::GbcGraph(g) => Some(g),
            _ => None,
        })
        .collect();
    Ok((rows, sink.rejected))
}

fn convert(args: ConvertArgs) -> Result<()> {
    let (mut rows, rejected) = args.files.read()?;
    if args.recompute_masks {
        rows.iter_mut().for_each(apply_masks);
    }
    let read = rows.len() + rejected.len();
    finish(&args.files, &rows, read, &rejected, "")
}

fn write_rejected(path: &Path, rejected: &[RejectedRow]) -> Result<()> {
    let batch = crate::schema::rows_to_batch(rejected)?;
    let what = || format!("{}: writing rejected records", path.display());
    let file = std::fs::File::create(path).map_err(|e| Error::io(path, e))?;
    let mut writer = parquet::arrow::ArrowWriter::try_new(file, batch.schema(), None)
        .map_err(|e| Error::parquet(what(), e))?;
    writer
        .write(&batch)
        .map_err(|e| Error::parquet(what(), e))?;
    writer.close().map_err(|e| Error::parquet(what(), e))?;
    Ok(())
}

fn stats(args: StatsArgs) -> Result<()> {
    let (rows, rejected) = read_graphs(&args.file)?;
    let per_graph: Vec<(String, GbcStatistics)> = rows
        .iter()
        .map(|row| (row.image_id.clone(), statistics(row)))
        .collect();
    let (mut with_masks, mut agreeing) = (0u64, 0u64);
    for row in &rows {
        for (vertex, relations) in row.vertices.iter().zip(recompute_masks(row)) {
            if let (Some(sub), Some(sup)) = (&vertex.sub_masks, &vertex.super_masks) {
                with_masks += 1;
                if *sub == relations.sub_masks && *sup == relations.super_masks {
                    agreeing += 1;
                }
            }
        }
    }
    let n = per_graph.len().max(1) as f64;
    let mean =
        |f: fn(&GbcStatistics) -> u64| per_graph.iter().map(|(_, s)| f(s) as f64).sum::<f64>() / n;
    let means = [
        mean(|s| s.vertices),
        mean(|s| s.edges),
        mean(|s| s.captions),
        mean(|s| s.words),
        mean(|s| s.diameter),
    ];
    if args.json {
        let graphs: Vec<_> = per_graph
            .iter()
            .map(|(id, s)| {
                json!({"image_id": id, "vertices": s.vertices, "edges": s.edges,
                       "captions": s.captions, "words": s.words, "diameter": s.diameter})
            })
            .collect();
        let report = json!({
            "read": rows.len() + rejected.len(),
            "accepted": rows.len(),
            "rejected": rejected.len(),
            "graphs": graphs,
            "mean": {"vertices": means[0], "edges": means[1], "captions": means[2],
                     "words": means[3], "diameter": means[4]},
            "masks": {"vertices_with_masks": with_masks, "agreeing": agreeing},
        });
        return outln!("{report:#}");
    }
    outln!("image_id\tvertices\tedges\tcaptions\twords\tdiameter")?;
    for (id, s) in &per_graph {
        outln!(
            "{id}\t{}\t{}\t{}\t{}\t{}",
            s.vertices,
            s.edges,
            s.captions,
            s.words,
            s.diameter
        )?;
    }
    outln!(
        "mean\t{:.2}\t{:.2}\t{:.2}\t{:.2}\t{:.2}",
        means[0],
        means[1],
        means[2],
        means[3],
        means[4]
    )?;
    outln!(
        "{} graphs, {} rejected; masks agree with recomputation on {agreeing} of {with_masks} vertices",
        rows.len(),
        rejected.len()
    )
}

/// Each graph's index among the graphs of its image so far (0 for the first), as a recipe
/// counts them, so the per-graph seeds agree with a recipe's.
fn graph_indices(rows: &[GbcGraphRow]) -> Vec<usize> {
    let mut seen: HashMap<&str, usize> = HashMap::new();
    rows.iter()
        .map(|row| {
            let next = seen.entry(row.image_id.as_str()).or_default();
            *next += 1;
            *next - 1
        })
        .collect()
}

impl GraphFiles {
    /// Reads the input's graphs, then checks that the output's extension names a layout: input
    /// errors are reported first, and a mistyped output fails before the graphs are worked on.
    fn read(&self) -> Result<(Vec<GbcGraphRow>, Vec<RejectedRow>)> {
        let graphs = read_graphs(&self.input)?;
        if GbcFileFormat::from_path(&self.output).is_none() {
            return Err(Error::Usage(format!(
                "{}: unknown GBC file type (use .jsonl, .json or .parquet)",
                self.output.display()
            )));
        }
        Ok(graphs)
    }
}

/// Writes the kept graphs and the rejected records, then the summary line.
fn finish(
    files: &GraphFiles,
    kept: &[GbcGraphRow],
    read: usize,
    rejected: &[RejectedRow],
    what: &str,
) -> Result<()> {
    write_gbc_file(&files.output, kept)?;
    if let Some(path) = &files.rejected {
        write_rejected(path, rejected)?;
    }
    status!(
        "capflow: {read} graphs read, {} written to {}, {} rejected{what}",
        kept.len(),
        files.output.display(),
        rejected.len()
    );
    Ok(())
}

impl FilterArgs {
    /// The filter settings: ml-gbc's defaults, with the options given.
    fn config(&self) -> GbcFilterConfig {
        let mut config = GbcFilterConfig::default();
        let labels = |given: &Vec<String>| -> Vec<String> {
            given.iter().filter(|l| !l.is_empty()).cloned().collect()
        };
        let table = |given: &Vec<(String, f64)>| {
            given
                .iter()
                .filter(|(l, _)| !l.is_empty())
                .cloned()
                .collect()
        };
        if let Some(given) = &self.exclude_labels {
            config.exclude_labels = labels(given);
        }
        if let Some(given) = &self.random_filtering_probs {
            config.random_filtering_probs = table(given);
        }
        if let Some(given) = &self.clip_names {
            config.clip_names = labels(given);
        }
        if let Some(given) = &self.min_clip_scores {
            config.min_clip_scores = table(given);
        }
        if let Some(given) = &self.must_include_labels {
            config.must_include_labels = labels(given);
        }
        config.remove_truncation = self.remove_truncation;
        config.add_bag_of_words = self.add_bag_of_words;
        config.remove_edge_with_no_corr = self.remove_edge_with_no_corr;
        config.filter_image_using_short_clip_scores = self.filter_image_using_short_clip_scores;
        config.filter_after_selection = self.filter_after_selection;
        config.max_n_vertices_per_graph = self.max_n_vertices_per_graph;
        config.node_selection_mode = self.node_selection_mode;
        config
    }
}

fn filter(args: FilterArgs) -> Result<()> {
    let config = args.config();
    if let Some((label, p)) = config
        .random_filtering_probs
        .iter()
        .find(|(_, p)| !(0.0..=1.0).contains(*p))
    {
        return Err(Error::Usage(format!(
            "--random-filtering-probs: {label}={p} is not a probability in [0, 1]"
        )));
    }
    let (rows, rejected) = args.files.read()?;
    let mut kept = Vec::new();
    let (mut vertices, mut graphs_dropped, mut captions, mut bags) = (0, 0, 0, 0);
    let mut stopped_at = None;
    for (row, g) in rows.iter().zip(graph_indices(&rows)) {
        let seed = graph_seed(args.seed, &row.image_id, FILTER_STAGE, g);
        let (filtered, report) = filter_graph(row, &config, seed);
        captions += report.captions_dropped;
        bags += report.bag_of_words_added;
        let Some(filtered) = filtered else {
            graphs_dropped += 1;
            continue;
        };
        if args
            .max_n_vertices
            .is_some_and(|max| vertices + filtered.vertices.len() > max)
        {
            stopped_at = Some(row.image_id.clone());
            break;
        }
        vertices += filtered.vertices.len();
        kept.push(filtered);
    }
    let mut what = format!(
        "; {graphs_dropped} graphs filtered out, {captions} captions dropped, {bags} bag-of-words captions added"
    );
    if let Some(image) = stopped_at {
        what += &format!(
            "; stopped at {image}: --max-n-vertices {} reached",
            args.max_n_vertices.unwrap_or_default()
        );
    }
    finish(
        &args.files,
        &kept,
        rows.len() + rejected.len(),
        &rejected,
        &what,
    )
}

fn subgraph_command(args: SubgraphArgs) -> Result<()> {
    let options = SubgraphOptions {
        max_n_vertices: args.max_n_vertices,
        max_depth: args.max_depth,
        mode: args.mode,
        root_id: args.root_id.clone(),
        edge_shuffling: args.edge_shuffling,
    };
    if options.mode == TraversalOrder::Random
        && (options.root_id.is_some() || options.edge_shuffling)
    {
        return Err(Error::Usage(
            "--mode random cannot start from --root-id or shuffle edges".into(),
        ));
    }
    let (rows, mut rejected) = args.files.read()?;
    let read = rows.len() + rejected.len();
    let mut kept = Vec::new();
    for (i, (row, g)) in rows.iter().zip(graph_indices(&rows)).enumerate() {
        let seed = graph_seed(args.seed, &row.image_id, SUBGRAPH_STAGE, g);
        match subgraph(row, &options, seed) {
            Ok(sub) => kept.push(sub),
            Err(reason) => {
                let rejection = RejectedRow {
                    format: "gbc".into(),
                    source_file: args.files.input.display().to_string(),
                    record: format!("graph {i} ({})", row.image_id),
                    line: None,
                    byte_offset: None,
                    reason,
                    excerpt: record_from_row(row)
                        .map(|r| excerpt(&r.to_string()))
                        .unwrap_or_default(),
                };
                diagnostic!(
                    "capflow: rejected {}, {}: {}",
                    rejection.source_file,
                    rejection.record,
                    rejection.reason
                );
                rejected.push(rejection);
            }
        }
    }
    finish(&args.files, &kept, read, &rejected, "")
}

/// Where a listing goes: a file, else stdout.
enum Listing {
    File(PathBuf, std::io::BufWriter<std::fs::File>),
    Stdout,
}

impl Listing {
    fn open(path: Option<&Path>) -> Result<Listing> {
        Ok(match path {
            Some(path) => {
                let file = std::fs::File::create(path).map_err(|e| Error::io(path, e))?;
                Listing::File(path.to_path_buf(), std::io::BufWriter::new(file))
            }
            None => Listing::Stdout,
        })
    }

    fn line(&mut self, text: &str) -> Result<()> {
        match self {
            Listing::File(path, writer) => {
                writeln!(writer, "{text}").map_err(|e| Error::io(path.as_path(), e))
            }
            Listing::Stdout => outln!("{text}"),
        }
    }

    fn close(self) -> Result<()> {
        match self {
            Listing::File(path, mut writer) => writer.flush().map_err(|e| Error::io(&path, e)),
            Listing::Stdout => Ok(()),
        }
    }
}

/// A TSV field: backslash, tab, newline and carriage return written as `\\`, `\t`, `\n`, `\r`.
fn tsv_field(text: &str) -> String {
    text.replace('\\', "\\\\")
        .replace('\t', "\\t")
        .replace('\n', "\\n")
        .replace('\r', "\\r")
}

fn concat(args: ConcatArgs) -> Result<()> {
    let options = ConcatOptions {
        separator: args.separator.clone(),
        mode: args.mode,
        remove_repeated_suffix: args.remove_repeated_suffix,
    };
    let (rows, rejected) = read_graphs(&args.input)?;
    let mut listing = Listing::open(args.output.as_deref())?;
    for (row, g) in rows.iter().zip(graph_indices(&rows)) {
        let seed = graph_seed(args.seed, &row.image_id, CONCAT_STAGE, g);
        let text = caption_concat(row, &options, seed);
        let line = if args.tsv {
            format!("{}\t{}", tsv_field(&row.image_id), tsv_field(&text))
        } else {
            json!({"image_id": row.image_id, "img_path": row.img_path, "img_url": row.img_url,
                   "text": text})
            .to_string()
        };
        listing.line(&line)?;
    }
    listing.close()?;
    status!(
        "capflow: {} graphs read, {} concatenated, {} rejected",
        rows.len() + rejected.len(),
        rows.len(),
        rejected.len()
    );
    Ok(())
}

fn hints(args: HintsArgs) -> Result<()> {
    let (rows, rejected) = read_graphs(&args.input)?;
    let mut listing = Listing::open(args.output.as_deref())?;
    let mut compositions = 0;
    for row in &rows {
        for (v, vertex) in row.vertices.iter().enumerate() {
            if vertex.label != "composition" {
                continue;
            }
            let mut rng = crate::amr::sample::predicate_rng(
                args.seed,
                &row.image_id,
                HINTS_STAGE,
                &vertex.vertex_id,
            );
            let Some((criterion, hints)) = composition_hints(row, v, args.root_criterion, &mut rng)
            else {
                continue;
            };
            compositions += 1;
            if args.tsv {
                for hint in &hints {
                    listing.line(&format!(
                        "{}\t{}\t{}\t{}",
                        tsv_field(&row.image_id),
                        tsv_field(&vertex.vertex_id),
                        criterion.name(),
                        tsv_field(hint)
                    ))?;
                }
            } else {
                let line = json!({"image_id": row.image_id, "vertex_id": vertex.vertex_id,
                                  "root_criterion": criterion.name(), "hints": hints});
                listing.line(&line.to_string())?;
            }
        }
    }
    listing.close()?;
    status!(
        "capflow: {} graphs read, {compositions} compositions with entities, {} rejected",
        rows.len() + rejected.len(),
        rejected.len()
    );
    Ok(())
}
