//! `capflow amr smatch A B`: per-pair Smatch between two AMR files.
//!
//! Graph `i` of `A` (test) is scored against graph `i` of `B` (gold). The output is the TSV of
//! the Smatch oracle (`oracle_smatch.py A B`): rows `idx P R F match test gold`, then a `total`
//! row micro-averaged over all pairs (smatch's document-level score), floats printed with
//! `--significant` decimals. A header row comes first unless `--no-header` is given, which makes
//! the output byte-identical to the oracle's.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::amr::penman::read_blocks_with;
use crate::amr::smatch::{compute_f, smatch_prepared, SmatchGraph, SmatchOptions};
use crate::error::Error;

#[derive(Debug, clap::Args)]
pub struct SmatchArgs {
    /// Test AMRs (PENMAN, blank-line separated; smatch's "AMR 1").
    pub test: PathBuf,
    /// Gold AMRs, paired with the test file by position.
    pub gold: PathBuf,
    /// Seed of the mapping search; the output is a function of the files and the options.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Random starts of the local search after the concept-match start.
    #[arg(long, default_value_t = SmatchOptions::default().restarts)]
    pub restarts: usize,
    /// Perturb-and-reclimb rounds without improvement after which the first start ends (half for restarts).
    #[arg(long, default_value_t = SmatchOptions::default().perturbation_rounds)]
    pub perturbations: usize,
    /// Moves without gain allowed per climb.
    #[arg(long, default_value_t = SmatchOptions::default().sideways_moves)]
    pub sideways: usize,
    /// Branch-and-bound nodes allowed per pair to prove or improve the mapping (0: no proof).
    #[arg(long, default_value_t = SmatchOptions::default().node_budget)]
    pub node_budget: u64,
    /// Subgradient steps per Lagrangian bound and graph side (0: no such bounds).
    #[arg(long, default_value_t = SmatchOptions::default().bound_iterations)]
    pub bound_iterations: usize,
    /// Decimals of P, R and F.
    #[arg(long, default_value_t = 4)]
    pub significant: usize,
    /// Leave out the header row.
    #[arg(long)]
    pub no_header: bool,
}

pub fn run(args: SmatchArgs) -> crate::Result<()> {
    let test = read_graphs(&args.test)?;
    let gold = read_graphs(&args.gold)?;
    if test.len() != gold.len() {
        crate::cli::out::diagnostic!(
            "warning: {} vs {} AMRs; scoring first {}",
            test.len(),
            gold.len(),
            test.len().min(gold.len())
        );
    }
    let options = SmatchOptions {
        seed: args.seed,
        restarts: args.restarts,
        perturbation_rounds: args.perturbations,
        sideways_moves: args.sideways,
        node_budget: args.node_budget,
        bound_iterations: args.bound_iterations,
    };
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let write_error = crate::cli::out::stdout_error;
    if !args.no_header {
        writeln!(out, "idx\tP\tR\tF\tmatch\ttest\tgold").map_err(write_error)?;
    }
    let digits = args.significant;
    let (mut matched, mut test_total, mut gold_total) = (0usize, 0usize, 0usize);
    for (i, (t, g)) in test.iter().zip(&gold).enumerate() {
        let score = smatch_prepared(t, g, &options);
        let (p, r, f) = score.prf();
        writeln!(
            out,
            "{i}\t{p:.digits$}\t{r:.digits$}\t{f:.digits$}\t{}\t{}\t{}",
            score.matched, score.test_total, score.gold_total
        )
        .map_err(write_error)?;
        matched += score.matched;
        test_total += score.test_total;
        gold_total += score.gold_total;
    }
    let (p, r, f) = compute_f(matched, test_total, gold_total);
    writeln!(
        out,
        "total\t{p:.digits$}\t{r:.digits$}\t{f:.digits$}\t{matched}\t{test_total}\t{gold_total}"
    )
    .map_err(write_error)?;
    out.flush().map_err(write_error)
}

/// Every graph of an AMR file as smatch's triples; a graph that does not parse is an error
/// naming the file and the line, since skipping it would pair every later graph wrongly.
fn read_graphs(path: &Path) -> crate::Result<Vec<SmatchGraph>> {
    let mut graphs = Vec::new();
    read_blocks_with(path, SmatchGraph::parse, |ordinal, block| {
        let graph = block.graph.map_err(|e| {
            Error::record(
                path.display().to_string(),
                format!("graph {ordinal} (line {})", block.line),
                format!("not a PENMAN graph: {e}"),
            )
        })?;
        graphs.push(graph);
        Ok(())
    })?;
    Ok(graphs)
}
