//! UPGMA, flat clusters, Hungarian matching and word vectors against their Python references
//! (scipy, scikit-learn, numpy), run through the scripts in `tests/oracles/`.

mod common;

use std::path::Path;
use std::process::Command;

use capflow::cluster::{average_link_labels, linear_sum_assignment, upgma, DistanceMatrix};
use capflow::text::{VectorFormat, WordVectors, OOV_SIMILARITY};
use serde_json::Value;

/// Runs an oracle script with the oracle Python and returns its stdout, or `None` to skip.
fn oracle(script: &str, args: &[&str]) -> Option<String> {
    let python = common::oracle_python()?;
    let path = common::repo_root().join("tests/oracles").join(script);
    let output = Command::new(python)
        .arg(&path)
        .args(args)
        .output()
        .expect("run oracle script");
    assert!(
        output.status.success(),
        "{script} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Some(String::from_utf8(output.stdout).expect("oracle output is UTF-8"))
}

fn records(text: &str) -> Vec<Value> {
    text.lines()
        .map(|line| serde_json::from_str(line).expect("oracle JSON line"))
        .collect()
}

fn floats(value: &Value) -> Vec<f64> {
    value
        .as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_f64().expect("number"))
        .collect()
}

fn usizes(value: &Value) -> Vec<usize> {
    value
        .as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_u64().expect("index") as usize)
        .collect()
}

fn scipy_z(record: &Value) -> Vec<[f64; 4]> {
    record["Z"]
        .as_array()
        .expect("Z rows")
        .iter()
        .map(|row| {
            let row = floats(row);
            [row[0], row[1], row[2], row[3]]
        })
        .collect()
}

/// Compares a linkage with scipy's Z: ids and sizes exactly, heights within `tol`. Returns the
/// largest height difference.
fn assert_same_linkage(case: usize, ours: &[[f64; 4]], scipy: &[[f64; 4]], tol: f64) -> f64 {
    assert_eq!(ours.len(), scipy.len(), "case {case}: number of merges");
    let mut worst: f64 = 0.0;
    for (step, (o, s)) in ours.iter().zip(scipy).enumerate() {
        assert_eq!(
            (o[0], o[1], o[3]),
            (s[0], s[1], s[3]),
            "case {case}, step {step}: ids/size differ (ours {o:?}, scipy {s:?})"
        );
        assert!(
            (o[2] - s[2]).abs() <= tol,
            "case {case}, step {step}: height {} vs scipy {}",
            o[2],
            s[2]
        );
        worst = worst.max((o[2] - s[2]).abs());
    }
    worst
}

fn check_upgma_against_scipy(args: &[&str], tol: f64) -> usize {
    let Some(text) = oracle("upgma_oracle.py", args) else {
        return 0;
    };
    let cases = records(&text);
    let mut worst: f64 = 0.0;
    for (case, record) in cases.iter().enumerate() {
        let d = DistanceMatrix::from_condensed(floats(&record["condensed"])).expect("valid");
        assert_eq!(d.len() as u64, record["n"].as_u64().expect("n"));
        let diff = assert_same_linkage(case, &upgma(&d).to_scipy_rows(), &scipy_z(record), tol);
        worst = worst.max(diff);
    }
    eprintln!(
        "{} dendrograms, largest height difference from scipy {worst:e}",
        cases.len()
    );
    cases.len()
}

#[test]
fn upgma_equals_scipy_average_linkage_on_random_matrices() {
    let checked = check_upgma_against_scipy(&["--count", "1000", "--seed", "1"], 1e-12);
    if checked > 0 {
        assert_eq!(checked, 1000);
    }
}

#[test]
fn upgma_breaks_ties_as_scipy_does() {
    // Integer distances in 1..4: equal candidates at almost every step.
    let checked = check_upgma_against_scipy(&["--count", "300", "--seed", "2", "--ties"], 0.0);
    if checked > 0 {
        assert_eq!(checked, 300);
    }
}

#[test]
fn agglomerative_labels_equal_scikit_learn() {
    for extra in [&[][..], &["--ties"][..]] {
        let mut args = vec!["--count", "300", "--seed", "3", "--max-n", "40", "--labels"];
        args.extend_from_slice(extra);
        let Some(text) = oracle("upgma_oracle.py", &args) else {
            return;
        };
        let cases = records(&text);
        assert_eq!(cases.len(), 300);
        for (case, record) in cases.iter().enumerate() {
            let d = DistanceMatrix::from_condensed(floats(&record["condensed"])).expect("valid");
            let k = record["k"].as_u64().expect("k") as usize;
            assert_eq!(
                average_link_labels(&d, k).expect("1 <= k <= n"),
                usizes(&record["labels"]),
                "case {case} ({extra:?}): n = {}, k = {k}",
                d.len()
            );
        }
    }
}

fn check_assignments(args: &[&str], compare_all_assignments: bool) -> (usize, usize) {
    let Some(text) = oracle("lsa_oracle.py", args) else {
        return (0, 0);
    };
    let cases = records(&text);
    let mut unique = 0;
    for (case, record) in cases.iter().enumerate() {
        let rows = record["rows"].as_u64().expect("rows") as usize;
        let cols = record["cols"].as_u64().expect("cols") as usize;
        let maximize = record["maximize"].as_bool().expect("maximize");
        let cost = floats(&record["cost"]);
        let ours = linear_sum_assignment(&cost, rows, cols, maximize).expect("feasible");
        let total = record["total"].as_f64().expect("total");
        assert!(
            (ours.total - total).abs() <= 1e-9,
            "case {case} ({rows}x{cols}, maximize {maximize}): total {} vs scipy {total}",
            ours.total
        );
        // The reported total is the sum of the reported pairs.
        let recomputed: f64 = ours.pairs().map(|(r, c)| cost[r * cols + c]).sum();
        assert!((recomputed - ours.total).abs() <= 1e-9);
        let is_unique = record["unique"].as_bool().expect("unique");
        if is_unique {
            unique += 1;
        }
        if is_unique || compare_all_assignments {
            assert_eq!(ours.rows, usizes(&record["row_ind"]), "case {case}: rows");
            assert_eq!(ours.cols, usizes(&record["col_ind"]), "case {case}: cols");
        }
    }
    (cases.len(), unique)
}

#[test]
fn hungarian_equals_scipy_on_random_rectangular_matrices() {
    let (checked, unique) = check_assignments(&["--count", "1000", "--seed", "4"], false);
    if checked > 0 {
        assert_eq!(checked, 1000);
        // Continuous random costs: the optimum is unique, so the assignments were compared.
        assert!(unique >= 990, "only {unique} unique optima");
    }
}

#[test]
fn hungarian_breaks_ties_as_scipy_does() {
    // Integer costs in 0..3: most optima are shared by several assignments; the port of
    // scipy's solver picks the same one.
    let (checked, _) = check_assignments(&["--count", "500", "--seed", "5", "--ties"], true);
    if checked > 0 {
        assert_eq!(checked, 500);
    }
}

/// Writes `rows` as a TSV file, numbers in shortest round-trip form.
fn write_tsv(path: &Path, rows: usize, cols: usize, values: &[f64]) {
    let mut text = String::new();
    for r in 0..rows {
        let line: Vec<String> = values[r * cols..(r + 1) * cols]
            .iter()
            .map(|v| format!("{v:?}"))
            .collect();
        text.push_str(&line.join("\t"));
        text.push('\n');
    }
    std::fs::write(path, text).expect("write matrix");
}

fn run_cli(args: &[&str]) -> String {
    let output = Command::new(common::capflow_bin())
        .args(args)
        .output()
        .expect("run capflow");
    assert!(
        output.status.success(),
        "capflow {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8 output")
}

#[test]
fn upgma_cli_prints_scipys_linkage_matrix_exactly() {
    let Some(text) = oracle(
        "upgma_oracle.py",
        &["--count", "8", "--seed", "6", "--max-n", "25"],
    ) else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    for (case, record) in records(&text).iter().enumerate() {
        let d = DistanceMatrix::from_condensed(floats(&record["condensed"])).expect("valid");
        let n = d.len();
        let square: Vec<f64> = (0..n * n).map(|k| d.get(k / n, k % n)).collect();
        let path = dir.path().join(format!("m{case}.tsv"));
        write_tsv(&path, n, n, &square);
        let printed = run_cli(&["cluster", "upgma", path.to_str().expect("path")]);
        let rows: Vec<[f64; 4]> = printed
            .lines()
            .map(|line| {
                let f: Vec<f64> = line
                    .split('\t')
                    .map(|x| x.parse().expect("number"))
                    .collect();
                assert_eq!(f.len(), 4, "line `{line}`");
                [f[0], f[1], f[2], f[3]]
            })
            .collect();
        // Heights printed in shortest round-trip form read back to scipy's exact values.
        assert_same_linkage(case, &rows, &scipy_z(record), 0.0);
    }
}

#[test]
fn hungarian_cli_prints_scipys_assignment() {
    let Some(text) = oracle("lsa_oracle.py", &["--count", "8", "--seed", "7"]) else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    for (case, record) in records(&text).iter().enumerate() {
        let rows = record["rows"].as_u64().expect("rows") as usize;
        let cols = record["cols"].as_u64().expect("cols") as usize;
        let path = dir.path().join(format!("c{case}.tsv"));
        write_tsv(&path, rows, cols, &floats(&record["cost"]));
        let mut args = vec!["cluster", "hungarian", path.to_str().expect("path")];
        if record["maximize"].as_bool().expect("maximize") {
            args.push("--maximize");
        }
        let printed = run_cli(&args);
        let mut lines: Vec<&str> = printed.lines().collect();
        let total_line = lines.pop().expect("total line");
        let total: f64 = total_line
            .strip_prefix("total\t")
            .expect("total prefix")
            .parse()
            .expect("total");
        assert!((total - record["total"].as_f64().expect("total")).abs() <= 1e-9);
        let pairs: Vec<(usize, usize)> = lines
            .iter()
            .map(|line| {
                let (r, c) = line.split_once('\t').expect("row\\tcol");
                (r.parse().expect("row"), c.parse().expect("col"))
            })
            .collect();
        let expected: Vec<(usize, usize)> = usizes(&record["row_ind"])
            .into_iter()
            .zip(usizes(&record["col_ind"]))
            .collect();
        if record["unique"].as_bool().expect("unique") {
            assert_eq!(pairs, expected, "case {case}");
        }
    }
}

#[test]
fn cli_rejects_bad_matrices_with_location() {
    let dir = tempfile::tempdir().expect("temp dir");
    let bad = dir.path().join("bad.tsv");
    std::fs::write(&bad, "0\t1\n1\tzero\n").expect("write");
    let output = Command::new(common::capflow_bin())
        .args(["cluster", "upgma", bad.to_str().expect("path")])
        .output()
        .expect("run capflow");
    assert_eq!(output.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("bad.tsv, line 2: column 2 is `zero`"),
        "{stderr}"
    );

    std::fs::write(&bad, "0\t1\t2\n1\t0\t2\n").expect("write");
    let output = Command::new(common::capflow_bin())
        .args(["cluster", "upgma", bad.to_str().expect("path")])
        .output()
        .expect("run capflow");
    assert_eq!(output.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&output.stderr).contains("square"));
}

fn check_vectors(file: &str, format: VectorFormat, expected_len: usize, expected_dim: usize) {
    let Some(path) = common::fixture(&format!("word_vectors/{file}")) else {
        return;
    };
    let Some(text) = oracle("vectors_oracle.py", &[path.to_str().expect("path")]) else {
        return;
    };
    let reference: Value = serde_json::from_str(&text).expect("oracle JSON");
    let vectors = WordVectors::read(&path, format).expect("fixture reads");
    assert_eq!(vectors.len(), expected_len);
    assert_eq!(vectors.dim(), expected_dim);
    assert_eq!(
        vectors.dim() as u64,
        reference["dim"].as_u64().expect("dim")
    );
    let words: Vec<&str> = reference["words"]
        .as_array()
        .expect("words")
        .iter()
        .map(|w| w.as_str().expect("word"))
        .collect();
    assert_eq!(vectors.words().collect::<Vec<_>>(), words);

    let pairs = reference["similarity"].as_array().expect("pairs");
    assert_eq!(pairs.len(), expected_len * (expected_len + 1) / 2);
    let mut worst: f64 = 0.0;
    for pair in pairs {
        let (a, b) = (pair[0].as_str().expect("a"), pair[1].as_str().expect("b"));
        let expected = pair[2].as_f64().expect("sim");
        let ours = vectors.similarity(a, b);
        worst = worst.max((ours - expected).abs());
        assert!(
            (ours - expected).abs() <= 1e-6,
            "{file}: sim({a}, {b}) = {ours}, scipy {expected}"
        );
    }
    eprintln!("{file}: largest similarity difference from scipy {worst:e}");

    for (word, nearest) in reference["most_similar"].as_object().expect("most_similar") {
        let ours = vectors.most_similar(word, 5);
        let nearest = nearest.as_array().expect("list");
        assert_eq!(ours.len(), nearest.len());
        for ((our_word, our_cos), theirs) in ours.iter().zip(nearest) {
            let their_cos = theirs[1].as_f64().expect("cos");
            assert!(
                (our_cos - their_cos).abs() <= 1e-6,
                "{word}: {our_cos} vs {their_cos}"
            );
            // Names must agree unless two neighbours are (numerically) tied.
            if *our_word != theirs[0].as_str().expect("word") {
                assert!(
                    nearest
                        .iter()
                        .any(|t| t[0] == *our_word
                            && (t[1].as_f64().unwrap() - our_cos).abs() <= 1e-6),
                    "{word}: neighbour {our_word} not in numpy's list"
                );
            }
        }
    }

    // Out of vocabulary gives -1 either way round; upper case falls back to lower case.
    assert_eq!(
        vectors.similarity(words[0], "zzz-not-a-word"),
        OOV_SIMILARITY
    );
    assert_eq!(
        vectors.similarity("zzz-not-a-word", words[0]),
        OOV_SIMILARITY
    );
    let upper = words[0].to_uppercase();
    assert_eq!(
        vectors.similarity(&upper, words[1]),
        vectors.similarity(words[0], words[1])
    );
}

#[test]
fn glove_fixture_similarities_equal_scipy() {
    check_vectors("gensim_test_glove.txt", VectorFormat::Glove, 76, 50);
    // The file has no header, so detection must not mistake its first line for one.
    check_vectors("gensim_test_glove.txt", VectorFormat::Detect, 76, 50);
}

#[test]
fn word2vec_fixture_similarities_equal_scipy() {
    check_vectors("gensim_toy-model.vec", VectorFormat::Word2VecText, 22, 5);
    check_vectors("gensim_toy-model.vec", VectorFormat::Detect, 22, 5);
}
