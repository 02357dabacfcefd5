//! `capflow gbc`: convert ml-gbc graph files between layouts and summarize them.

use std::path::{Path, PathBuf};

use clap::Subcommand;
use serde_json::json;

use super::out::{diagnostic, outln, status};
use crate::error::{Error, Result};
use crate::graph::gbc::{apply_masks, recompute_masks, statistics, write_gbc_file, GbcStatistics};
use crate::ingest::{gbc as gbc_reader, Row, VecSink};
use crate::schema::{GbcGraphRow, RejectedRow};

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
}

#[derive(Debug, clap::Args)]
pub struct ConvertArgs {
    /// Input file (.jsonl, .json, .parquet) or a directory of them.
    pub input: PathBuf,
    /// Output file (.jsonl, .json, .parquet).
    pub output: PathBuf,
    /// Recompute every vertex's sub_masks/super_masks (writes the full form).
    #[arg(long)]
    pub recompute_masks: bool,
    /// Write the rejected records to this Parquet file (capflow's `rejected` table).
    #[arg(long)]
    pub rejected: Option<PathBuf>,
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
    let (mut rows, rejected) = read_graphs(&args.input)?;
    if args.recompute_masks {
        rows.iter_mut().for_each(apply_masks);
    }
    write_gbc_file(&args.output, &rows)?;
    if let Some(path) = &args.rejected {
        write_rejected(path, &rejected)?;
    }
    status!(
        "capflow: {} graphs read, {} written to {}, {} rejected",
        rows.len() + rejected.len(),
        rows.len(),
        args.output.display(),
        rejected.len()
    );
    Ok(())
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
