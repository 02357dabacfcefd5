//! `capflow amr`: commands over AMR files in PENMAN notation.

use std::io::{BufWriter, Write};
use std::path::PathBuf;

use crate::amr::penman::{read_blocks, GraphBlock};
use crate::amr::Graph;
use crate::error::{Error, Result};

#[derive(Debug, clap::Subcommand)]
pub enum AmrCommand {
    /// Parse a PENMAN file and print each graph (JSON lines with --json).
    Parse(ParseArgs),
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
    }
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
            .map_err(|e| Error::io("<stdout>", e)),
            Err(error) => {
                broken += 1;
                eprintln!(
                    "capflow: {}: graph {ordinal} (line {}): {error}",
                    path.display(),
                    block.line
                );
                Ok(())
            }
        }
    })?;
    out.flush().map_err(|e| Error::io("<stdout>", e))?;
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
