//! `capflow amr`: commands over AMR files in PENMAN notation.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use super::out::{diagnostic, stdout_error};
use crate::amr::penman::{read_blocks, GraphBlock};
use crate::amr::Graph;
use crate::error::{Error, Result};

#[derive(Debug, clap::Subcommand)]
pub enum AmrCommand {
    /// Parse a PENMAN file and print each graph (JSON lines with --json).
    Parse(ParseArgs),
    /// Merge one image's caption AMRs into a meta-vgAMR: print the merge order and the meta
    /// graph (and its event subgraphs with --events).
    Merge(super::amr_merge::MergeArgs),
    /// Show one image's meta-vgAMR (as Graphviz DOT with --dot).
    Inspect(super::amr_merge::InspectArgs),
    /// Smatch between graph i of a test file and graph i of a gold file (TSV).
    Smatch(crate::cli::amr_smatch::SmatchArgs),
    /// Add `~e.N` token alignments to graphs that have none, from `# ::tok` (or `# ::snt`,
    /// tokenized ISI-style); writes PENMAN with `# ::tok` lines.
    Align(AlignArgs),
    /// Parse English captions into AMR with the built-in parser: one caption per line, a
    /// Flickr30k Entities Sentences file or a COCO captions JSON; writes PENMAN with
    /// `# ::id`, `# ::snt`, `# ::tok` and `~e.N` alignments (JSON lines with --json).
    ParseText(ParseTextArgs),
}

#[derive(Debug, clap::Args)]
pub struct ParseTextArgs {
    /// The captions: plain text (one per line), Flickr30k Entities Sentences markup, or COCO
    /// captions JSON (`images` + `annotations`).
    pub file: PathBuf,
    /// Write the graphs here instead of to stdout.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// One JSON object per graph: `{"id", "snt", "tok", "top", "triples", "alignments"}`.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct AlignArgs {
    /// The AMR file (PENMAN graphs with `# ::snt` or `# ::tok` metadata lines).
    pub file: PathBuf,
    /// Write the aligned graphs here instead of to stdout.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct ParseArgs {
    /// The AMR file (PENMAN graphs with `# ::` metadata lines).
    pub file: PathBuf,
    /// One JSON object per graph: `{"id", "top", "triples", "alignments"}`.
    #[arg(long)]
    pub json: bool,
}

pub fn run(cmd: AmrCommand) -> Result<()> {
    match cmd {
        AmrCommand::Parse(args) => parse_command(&args),
        AmrCommand::Merge(args) => super::amr_merge::run_merge(&args),
        AmrCommand::Inspect(args) => super::amr_merge::run_inspect(&args),
        AmrCommand::Smatch(args) => crate::cli::amr_smatch::run(args),
        AmrCommand::Align(args) => align_command(&args),
        AmrCommand::ParseText(args) => parse_text_command(&args),
    }
}

/// One caption of a `parse-text` input with its id and where it was read.
struct Caption {
    id: String,
    place: String,
    text: std::result::Result<String, String>,
}

/// The buffered output of a command writing PENMAN.
type PenmanOut = BufWriter<Box<dyn Write>>;

/// Where a command writing PENMAN writes: `out`, or stdout; with the error a failed write is
/// (a closed stdout ends the command quietly: [`stdout_error`]).
fn penman_output(
    out: Option<&std::path::Path>,
) -> Result<(PenmanOut, impl Fn(std::io::Error) -> Error)> {
    let sink: Box<dyn Write> = match out {
        Some(path) => Box::new(std::fs::File::create(path).map_err(|e| Error::io(path, e))?),
        None => Box::new(std::io::stdout().lock()),
    };
    let name = out.map(|path| path.display().to_string());
    let write_error = move |e: std::io::Error| match &name {
        Some(name) => Error::io(name, e),
        None => stdout_error(e),
    };
    Ok((BufWriter::new(sink), write_error))
}

/// Parses every caption of the file and writes its graph; captions that cannot be read or
/// have no content word are reported on stderr with their place, the rest are still written,
/// and the command then fails (exit code 3).
fn parse_text_command(args: &ParseTextArgs) -> Result<()> {
    let path = args.file.as_path();
    let (mut out, write_error) = penman_output(args.out.as_deref())?;
    let (mut captions, mut failed) = (0usize, 0usize);
    read_captions(path, &mut |caption: Caption| {
        captions += 1;
        let problem = match caption.text {
            Ok(text) => {
                let mut graph = crate::amr::parse::parse_caption(&text);
                if !graph.triples.is_empty() {
                    graph.metadata.insert(0, ("id".to_string(), caption.id));
                    let written = if args.json {
                        let line = serde_json::to_string(&parsed_json(&graph))
                            .map_err(|e| Error::invalid("JSON output", e.to_string()))?;
                        writeln!(out, "{line}")
                    } else {
                        writeln!(out, "{}", crate::amr::penman::encode(&graph))
                    };
                    return written.map_err(&write_error);
                }
                "the caption has no word to parse".to_string()
            }
            Err(reason) => reason,
        };
        failed += 1;
        diagnostic!(
            "capflow: {}: {}, id {}: {problem}",
            path.display(),
            caption.place,
            caption.id
        );
        Ok(())
    })?;
    out.flush().map_err(&write_error)?;
    failures(path, failed, captions, "captions", "parsed")
}

/// The captions of a `parse-text` input in file order: COCO captions JSON when the file starts
/// with `{` or `[{`, else lines (Flickr30k Entities markup taken apart where a line has it).
/// Ids: the COCO annotation id, else `<file stem>.<k>` for the k-th caption (0-based).
fn read_captions(
    path: &std::path::Path,
    visit: &mut dyn FnMut(Caption) -> Result<()>,
) -> Result<()> {
    use std::io::{BufRead, Read};
    let mut file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut head = [0u8; 64];
    let n = file.read(&mut head).map_err(|e| Error::io(path, e))?;
    // `{...}` or `[{...}]` is JSON; `[/EN#...` opens a Flickr30k Entities phrase.
    let mut significant = head[..n]
        .iter()
        .filter(|b| !b.is_ascii_whitespace() && !matches!(b, 0xEF | 0xBB | 0xBF));
    let json = match significant.next() {
        Some(b'{') => true,
        Some(b'[') => matches!(significant.next(), Some(b'{' | b']')),
        _ => false,
    };
    if json {
        let mut sink = crate::ingest::VecSink::default();
        crate::ingest::coco::read_captions(path, &mut sink)?;
        for rejected in sink.rejected {
            visit(Caption {
                id: "-".to_string(),
                place: rejected.record,
                text: Err(rejected.reason),
            })?;
        }
        for row in sink.rows {
            if let crate::ingest::Row::Caption(c) = row {
                visit(Caption {
                    id: c.caption_id,
                    place: format!("image {} caption {}", c.image_id, c.caption_index),
                    text: Ok(c.text),
                })?;
            }
        }
        return Ok(());
    }
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let reader =
        std::io::BufReader::new(std::fs::File::open(path).map_err(|e| Error::io(path, e))?);
    let mut k = 0usize;
    for (number, line) in reader.split(b'\n').enumerate() {
        let line = line.map_err(|e| Error::io(path, e))?;
        let place = format!("line {}", number + 1);
        let text = match String::from_utf8(line) {
            Ok(text) => text,
            Err(_) => {
                visit(Caption {
                    id: format!("{stem}.{k}"),
                    place,
                    text: Err("the line is not UTF-8".to_string()),
                })?;
                k += 1;
                continue;
            }
        };
        let text = text.trim().trim_start_matches('\u{feff}');
        if text.is_empty() {
            continue;
        }
        let text = if text.contains("[/EN#") {
            crate::ingest::flickr30k::parse_caption_markup(text)
                .map(|c| c.tokens.join(" "))
                .map_err(|reason| format!("Flickr30k Entities markup: {reason}"))
        } else {
            Ok(text.to_string())
        };
        visit(Caption {
            id: format!("{stem}.{k}"),
            place,
            text,
        })?;
        k += 1;
    }
    Ok(())
}

/// [`graph_json`] with the caption and its tokens.
fn parsed_json(graph: &Graph) -> serde_json::Value {
    let mut value = graph_json(graph);
    if let Some(object) = value.as_object_mut() {
        object.insert("snt".into(), graph.meta("snt").into());
        object.insert("tok".into(), graph.meta("tok").into());
    }
    value
}

/// Aligns every graph of the file and writes it with its `# ::tok` line; graphs that cannot be
/// parsed or have no sentence are reported on stderr with their place, the rest are still
/// written, and the command then fails (exit code 3).
fn align_command(args: &AlignArgs) -> Result<()> {
    let path = args.file.as_path();
    let (mut out, write_error) = penman_output(args.out.as_deref())?;
    let (mut graphs, mut failed) = (0usize, 0usize);
    read_blocks(path, |ordinal, block| {
        graphs += 1;
        let place = format!("graph {ordinal} (line {})", block.line);
        let problem = match block.graph {
            Ok(mut graph) => match align_one(&mut graph) {
                Ok(()) => {
                    let text = crate::amr::penman::encode(&graph);
                    return writeln!(out, "{text}").map_err(&write_error);
                }
                Err(reason) => match graph.id() {
                    Some(id) => format!("{place}, id {id}: {reason}"),
                    None => format!("{place}: {reason}"),
                },
            },
            Err(error) => format!("{place}: {error}"),
        };
        failed += 1;
        diagnostic!("capflow: {}: {problem}", path.display());
        Ok(())
    })?;
    out.flush().map_err(&write_error)?;
    failures(path, failed, graphs, "graphs", "aligned")
}

/// The error of a command that wrote what it could of `path` and reported each of `failed` of
/// its `total` records (`noun`) that could not be `done`; none without failures.
fn failures(path: &Path, failed: usize, total: usize, noun: &str, done: &str) -> Result<()> {
    if failed == 0 {
        return Ok(());
    }
    Err(Error::record(
        path.display().to_string(),
        format!("{failed} of {total} {noun}"),
        format!("could not be {done} (see the messages above); fix or remove them and rerun"),
    ))
}

/// Aligns one graph to its sentence and records the tokens as `# ::tok` (after `# ::snt`).
fn align_one(graph: &mut Graph) -> std::result::Result<(), String> {
    let tokens = crate::amr::token_align::graph_tokens(graph)
        .ok_or("no `# ::snt` or `# ::tok` line to align the graph to")?;
    if tokens.is_empty() {
        return Err("the sentence has no tokens".to_string());
    }
    crate::amr::token_align::align_graph(graph, &tokens);
    crate::amr::token_align::write_tok_line(graph, &tokens);
    Ok(())
}

/// Streams the file's graphs to stdout; broken graphs are reported on stderr with their place
/// and the command fails (exit code 3) after printing the rest.
fn parse_command(args: &ParseArgs) -> Result<()> {
    let path = args.file.as_path();
    let stdout = std::io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let mut graphs = 0usize;
    let mut broken = 0usize;
    read_blocks(path, |ordinal, block| {
        graphs += 1;
        match &block.graph {
            Ok(graph) => if args.json {
                let line = serde_json::to_string(&graph_json(graph))
                    .map_err(|e| Error::invalid("JSON output", e.to_string()))?;
                writeln!(out, "{line}")
            } else {
                writeln!(out, "{}", summary(ordinal, &block, graph))
            }
            .map_err(stdout_error),
            Err(error) => {
                broken += 1;
                diagnostic!(
                    "capflow: {}: graph {ordinal} (line {}): {error}",
                    path.display(),
                    block.line
                );
                Ok(())
            }
        }
    })?;
    out.flush().map_err(stdout_error)?;
    if broken > 0 {
        return Err(Error::record(
            path.display().to_string(),
            format!("{broken} of {graphs} graphs"),
            "could not be parsed (see the messages above)",
        ));
    }
    Ok(())
}

/// The JSON form of a graph: penman's `(source, role, target)` triples (a missing concept or
/// target is `null`, as penman's `None`) and the inline alignments with their triples.
fn graph_json(graph: &Graph) -> serde_json::Value {
    let text = |s: &str| {
        if s.is_empty() {
            serde_json::Value::Null
        } else {
            serde_json::Value::String(s.to_string())
        }
    };
    let triples: Vec<serde_json::Value> = graph
        .triples
        .iter()
        .map(|t| serde_json::json!([text(&t.source), t.role, text(&t.target)]))
        .collect();
    let alignments: Vec<serde_json::Value> = graph
        .alignments
        .iter()
        .map(|a| {
            serde_json::json!({
                "triple": a.triple,
                "on_role": a.on_role,
                "prefix": a.prefix,
                "indices": a.indices,
            })
        })
        .collect();
    serde_json::json!({
        "id": graph.id(),
        "top": text(&graph.top),
        "triples": triples,
        "alignments": alignments,
    })
}

fn summary(ordinal: usize, block: &GraphBlock, graph: &Graph) -> String {
    let variables = graph.variables().len();
    let edges = graph.edges().count();
    let attributes = graph.attributes().count();
    format!(
        "graph {ordinal} (line {}): id {}, top {}, {variables} nodes, {edges} edges, {attributes} attributes, {} alignments ({})",
        block.line,
        graph.id().unwrap_or("-"),
        graph.top,
        graph.alignments.len(),
        crate::amr::penman::alignment_flavour(graph).as_str(),
    )
}
