//! Smatch against the reference: pip `smatch` 1.0.4 through `oracle_smatch.py`, and the exact
//! optimum of the same problem computed by the oracle's MILP (`fixtures/expected`).

mod common;

use std::path::Path;
use std::process::Command;

use capflow::amr::penman::parse_many;
use capflow::amr::smatch::{smatch_prepared, SmatchGraph, SmatchOptions};

fn graphs(path: &Path) -> Vec<SmatchGraph> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    parse_many(&text)
        .into_iter()
        .map(|block| {
            let graph = block
                .graph
                .unwrap_or_else(|e| panic!("{} line {}: {e}", path.display(), block.line));
            SmatchGraph::new(&graph)
        })
        .collect()
}

/// One row of an oracle TSV: `idx P R F match test gold [exactF=.. exactMatch=..]`.
struct OracleRow {
    matched: usize,
    test: usize,
    gold: usize,
    exact_match: Option<usize>,
}

fn oracle_rows(path: &Path) -> Vec<OracleRow> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .filter(|line| !line.starts_with("total"))
        .map(|line| {
            let cols: Vec<&str> = line.split('\t').collect();
            let num = |i: usize| cols[i].parse::<usize>().expect("count column");
            OracleRow {
                matched: num(4),
                test: num(5),
                gold: num(6),
                exact_match: cols
                    .iter()
                    .find_map(|c| c.strip_prefix("exactMatch="))
                    .map(|v| v.parse().expect("exactMatch")),
            }
        })
        .collect()
}

/// Scores graph i of `a` against graph i of `b` and asserts F = 1 for every pair.
fn assert_all_identical(a: &Path, b: &Path, expected_pairs: usize) {
    let (test, gold) = (graphs(a), graphs(b));
    assert_eq!((test.len(), gold.len()), (expected_pairs, expected_pairs));
    let options = SmatchOptions::default();
    for (i, (t, g)) in test.iter().zip(&gold).enumerate() {
        let score = smatch_prepared(t, g, &options);
        assert_eq!(score.test_total, score.gold_total, "pair {i}");
        assert_eq!(score.f1(), 1.0, "pair {i}: {score:?}");
        assert!(score.optimal, "pair {i}: a full match is provably optimal");
    }
}

#[test]
fn bio_dev_aligned_against_unaligned_twin_is_perfect() {
    let Some(dir) = common::fixtures_dir() else {
        return;
    };
    assert_all_identical(
        &dir.join("amr/bio_v0.8_dev_isi_aligned.txt"),
        &dir.join("amr/bio_v0.8_dev_unaligned.txt"),
        500,
    );
}

#[test]
fn little_prince_self_pairs_are_perfect() {
    let Some(dir) = common::fixtures_dir() else {
        return;
    };
    let path = dir.join("amr/little_prince_v3.0.txt");
    assert_all_identical(&path, &path, 1562);
}

/// Per-pair comparison with the oracle file: totals equal, never below pip smatch, never above
/// the exact optimum (which would mean different triples), and how often optimal.
fn compare_with_oracle(test: &Path, gold: &Path, expected: &Path) -> (usize, usize) {
    let (test, gold, rows) = (graphs(test), graphs(gold), oracle_rows(expected));
    assert_eq!(test.len(), rows.len());
    assert_eq!(gold.len(), rows.len());
    let options = SmatchOptions::default();
    let mut at_optimum = 0;
    for (i, ((t, g), row)) in test.iter().zip(&gold).zip(&rows).enumerate() {
        let score = smatch_prepared(t, g, &options);
        assert_eq!(
            (score.test_total, score.gold_total),
            (row.test, row.gold),
            "pair {i}: triple totals differ from pip smatch"
        );
        assert!(
            score.matched >= row.matched,
            "pair {i}: below pip smatch ({score:?})"
        );
        let exact = row.exact_match.expect("exactMatch column");
        assert!(
            score.matched <= exact,
            "pair {i}: above the MILP optimum ({score:?})"
        );
        if score.optimal {
            assert_eq!(score.matched, exact, "pair {i}: claimed optimal but is not");
        }
        at_optimum += usize::from(score.matched == exact);
    }
    (at_optimum, rows.len())
}

#[test]
fn bio_dev_against_test_reaches_the_optimum() {
    let Some(dir) = common::fixtures_dir() else {
        return;
    };
    let (at_optimum, pairs) = compare_with_oracle(
        &dir.join("amr/bio_v0.8_dev_isi_aligned.txt"),
        &dir.join("amr/bio_v0.8_test_isi_aligned.txt"),
        &dir.join("expected/smatch_bio_dev_vs_test_seed0_r4_exact.tsv"),
    );
    eprintln!("bio dev x test: optimum on {at_optimum} of {pairs} pairs");
    // At least 99.5% of the pairs at the exact optimum.
    assert!(at_optimum * 1000 >= pairs * 995, "{at_optimum} of {pairs}");
}

#[test]
fn smatch_test_inputs_reach_the_optimum() {
    let Some(dir) = common::fixtures_dir() else {
        return;
    };
    let (at_optimum, pairs) = compare_with_oracle(
        &dir.join("amr/smatch_test_input1.txt"),
        &dir.join("amr/smatch_test_input2.txt"),
        &dir.join("expected/smatch_test_input1_vs_2.tsv"),
    );
    assert_eq!((at_optimum, pairs), (3, 3));
}

/// Same seed, same answer; the answer does not depend on what was scored before.
#[test]
fn results_are_deterministic_per_seed() {
    let Some(dir) = common::fixtures_dir() else {
        return;
    };
    let test = graphs(&dir.join("amr/bio_v0.8_dev_isi_aligned.txt"));
    let gold = graphs(&dir.join("amr/bio_v0.8_test_isi_aligned.txt"));
    let options = SmatchOptions {
        seed: 42,
        ..SmatchOptions::default()
    };
    let forward: Vec<_> = (0..40)
        .map(|i| smatch_prepared(&test[i], &gold[i], &options))
        .collect();
    let backward: Vec<_> = (0..40)
        .rev()
        .map(|i| smatch_prepared(&test[i], &gold[i], &options))
        .collect();
    assert!(forward.iter().eq(backward.iter().rev()));
}

fn run_cli(args: &[&str]) -> std::process::Output {
    Command::new(common::capflow_bin())
        .args(args)
        .output()
        .expect("run capflow")
}

/// `capflow amr smatch --no-header` prints exactly what the oracle script prints, live.
#[test]
fn cli_output_is_byte_identical_to_the_oracle() {
    let (Some(dir), Some(python), Some(oracles)) = (
        common::fixtures_dir(),
        common::oracle_python(),
        common::oracles_dir(),
    ) else {
        return;
    };
    let a = dir.join("amr/smatch_test_input1.txt");
    let b = dir.join("amr/smatch_test_input2.txt");
    let oracle = Command::new(python)
        .arg(oracles.join("oracle_smatch.py"))
        .args([&a, &b])
        .output()
        .expect("run oracle_smatch.py");
    assert!(
        oracle.status.success(),
        "{}",
        String::from_utf8_lossy(&oracle.stderr)
    );
    let ours = run_cli(&[
        "amr",
        "smatch",
        "--no-header",
        a.to_str().expect("utf-8 path"),
        b.to_str().expect("utf-8 path"),
    ]);
    assert!(
        ours.status.success(),
        "{}",
        String::from_utf8_lossy(&ours.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&ours.stdout),
        String::from_utf8_lossy(&oracle.stdout)
    );

    let with_header = run_cli(&[
        "amr",
        "smatch",
        a.to_str().expect("utf-8 path"),
        b.to_str().expect("utf-8 path"),
    ]);
    let text = String::from_utf8_lossy(&with_header.stdout).into_owned();
    assert_eq!(text.lines().next(), Some("idx\tP\tR\tF\tmatch\ttest\tgold"));
    assert_eq!(
        text.lines().skip(1).collect::<Vec<_>>().join("\n") + "\n",
        String::from_utf8_lossy(&oracle.stdout)
    );
}

/// The `total` row micro-averages: its counts are the sums of the per-pair rows.
#[test]
fn cli_total_row_micro_averages() {
    let Some(dir) = common::fixtures_dir() else {
        return;
    };
    let a = dir.join("amr/smatch_test_input1.txt");
    let out = run_cli(&[
        "amr",
        "smatch",
        "--no-header",
        a.to_str().expect("utf-8"),
        a.to_str().expect("utf-8"),
    ]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let rows: Vec<Vec<&str>> = text.lines().map(|l| l.split('\t').collect()).collect();
    let last = rows.last().expect("total row");
    assert_eq!(last[0], "total");
    let sum = |c: usize| {
        rows[..rows.len() - 1]
            .iter()
            .map(|r| r[c].parse::<usize>().unwrap_or(0))
            .sum::<usize>()
    };
    assert_eq!(last[4].parse::<usize>().ok(), Some(sum(4)));
    assert_eq!(last[5].parse::<usize>().ok(), Some(sum(5)));
    assert_eq!(&last[1..4], ["1.0000", "1.0000", "1.0000"]);
}

#[test]
fn cli_reports_a_broken_graph_with_its_place() {
    let dir = tempfile::tempdir().expect("temp dir");
    let good = dir.path().join("good.txt");
    let bad = dir.path().join("bad.txt");
    std::fs::write(&good, "(a / dog)\n\n(b / cat)\n").expect("write");
    std::fs::write(&bad, "(a / dog)\n\n(b / cat :ARG0 (\n").expect("write");
    let out = run_cli(&[
        "amr",
        "smatch",
        good.to_str().expect("utf-8"),
        bad.to_str().expect("utf-8"),
    ]);
    assert_eq!(out.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("bad.txt") && stderr.contains("line 3"),
        "{stderr}"
    );

    let missing = run_cli(&[
        "amr",
        "smatch",
        good.to_str().expect("utf-8"),
        "/nonexistent/x.txt",
    ]);
    assert_eq!(missing.status.code(), Some(4));
}
