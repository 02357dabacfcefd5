//! `capflow cluster`: the clustering and matching primitives on tab-separated matrices, for
//! checking capflow's merge orders and matchings against other tools.
//!
//! Numbers are printed in the shortest form that reads back to the same `f64` (as Python's
//! `repr` does), so `float(field)` on the output recovers each height or total exactly.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use super::out::stdout_error;
use crate::cluster::{average_link_labels, linear_sum_assignment, upgma, DistanceMatrix};
use crate::error::{Error, Result};

#[derive(Debug, clap::Subcommand)]
pub enum ClusterCommand {
    /// Average-linkage (UPGMA) dendrogram of a square distance matrix, printed as the rows
    /// `a b height size` of scipy's linkage matrix Z (ids >= n are earlier merges).
    Upgma {
        /// Square tab-separated distance matrix, one row per line, no header.
        matrix: PathBuf,
    },
    /// Flat average-link clusters of a square distance matrix, one label per point (numbered
    /// as scikit-learn's AgglomerativeClustering numbers them).
    Labels {
        /// Square tab-separated distance matrix, one row per line, no header.
        matrix: PathBuf,
        /// Number of clusters.
        #[arg(short = 'k', long)]
        clusters: usize,
    },
    /// Optimal row-to-column assignment of a cost matrix (Hungarian method), printed as
    /// `row col` pairs followed by `total <sum of matched costs>`.
    Hungarian {
        /// Tab-separated cost matrix (any shape), one row per line, no header; `inf` forbids a pair.
        cost: PathBuf,
        /// Maximise the total instead of minimising it.
        #[arg(long)]
        maximize: bool,
    },
}

/// Runs one `capflow cluster` subcommand.
pub fn run(cmd: ClusterCommand) -> Result<()> {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    match cmd {
        ClusterCommand::Upgma { matrix } => {
            let distances = read_distance_matrix(&matrix)?;
            for step in upgma(&distances).steps {
                writeln!(
                    out,
                    "{}\t{}\t{:?}\t{}",
                    step.a, step.b, step.height, step.size
                )
                .map_err(stdout_error)?;
            }
        }
        ClusterCommand::Labels { matrix, clusters } => {
            let distances = read_distance_matrix(&matrix)?;
            let labels = average_link_labels(&distances, clusters)
                .map_err(|e| e.into_error(format!("clustering of {}", matrix.display())))?;
            for label in labels {
                writeln!(out, "{label}").map_err(stdout_error)?;
            }
        }
        ClusterCommand::Hungarian { cost, maximize } => {
            let matrix = read_tsv_matrix(&cost)?;
            let assignment =
                linear_sum_assignment(&matrix.values, matrix.rows, matrix.cols, maximize)
                    .map_err(|e| e.into_error(format!("cost matrix {}", cost.display())))?;
            for (row, col) in assignment.pairs() {
                writeln!(out, "{row}\t{col}").map_err(stdout_error)?;
            }
            writeln!(out, "total\t{:?}", assignment.total).map_err(stdout_error)?;
        }
    }
    out.flush().map_err(stdout_error)
}

/// A dense row-major matrix read from a TSV file.
struct TsvMatrix {
    rows: usize,
    cols: usize,
    values: Vec<f64>,
}

/// Reads a tab-separated matrix of numbers; blank lines are skipped, every row must have as
/// many fields as the first.
fn read_tsv_matrix(path: &Path) -> Result<TsvMatrix> {
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let name = path.display().to_string();
    let mut matrix = TsvMatrix {
        rows: 0,
        cols: 0,
        values: Vec::new(),
    };
    for (index, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line_no = index + 1;
        let located = |reason: String| Error::record(&name, format!("line {line_no}"), reason);
        let line = match line {
            Ok(line) => line,
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                return Err(located("not UTF-8 text".into()))
            }
            Err(e) => return Err(Error::io(path, e)),
        };
        let line = line.trim_end_matches(['\r', '\n']);
        if line.trim().is_empty() {
            continue;
        }
        let before = matrix.values.len();
        for (col, field) in line.split('\t').enumerate() {
            let value = field.trim().parse::<f64>().map_err(|_| {
                located(format!(
                    "column {} is `{}`, not a number",
                    col + 1,
                    field.trim()
                ))
            })?;
            matrix.values.push(value);
        }
        let cols = matrix.values.len() - before;
        if matrix.rows == 0 {
            matrix.cols = cols;
        } else if cols != matrix.cols {
            return Err(located(format!(
                "{cols} columns, but the first row has {}",
                matrix.cols
            )));
        }
        matrix.rows += 1;
    }
    if matrix.rows == 0 {
        return Err(Error::record(&name, "line 1", "the file holds no matrix"));
    }
    Ok(matrix)
}

fn read_distance_matrix(path: &Path) -> Result<DistanceMatrix> {
    let matrix = read_tsv_matrix(path)?;
    if matrix.rows != matrix.cols {
        return Err(Error::invalid(
            format!("distance matrix {}", path.display()),
            format!(
                "{} rows of {} columns; a distance matrix is square",
                matrix.rows, matrix.cols
            ),
        ));
    }
    DistanceMatrix::from_square(&matrix.values)
        .map_err(|e| e.into_error(format!("distance matrix {}", path.display())))
}
