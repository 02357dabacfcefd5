//! `capflow report` on a hand-made dataset: every count, share and D-n value the report shows
//! is computed by hand below from the eight samples written.

use std::path::Path;
use std::process::Command;

use capflow::export::{DatasetWriter, StageMetrics};
use capflow::ingest::IngestCounts;
use capflow::schema::{Provenance, SampleRow};

fn sample(id: &str, method: &str, split: &str, text: &str, coverage: f64, level: i32) -> SampleRow {
    SampleRow {
        sample_id: id.into(),
        image_id: "img1".into(),
        split: split.into(),
        method: method.into(),
        text: text.into(),
        control_boxes: vec![],
        control_labels: vec![],
        coverage,
        length_level: level,
        word_count: text.split_whitespace().count() as i32,
        verbs: vec![],
        quality: vec![],
        provenance: Provenance::default(),
    }
}

/// Three originals and five augmented samples (three `ssa`, two `clid`).
fn samples() -> Vec<SampleRow> {
    let long = vec!["big"; 41].join(" ");
    vec![
        sample(
            "o1",
            "original",
            "train",
            "A dog runs on the grass",
            35.0,
            1,
        ),
        sample("o2", "original", "train", "The dog on the grass", 38.5, 1),
        sample(
            "o3",
            "original",
            "val",
            "two children play with a red ball in the park",
            100.0,
            2,
        ),
        sample("a1", "ssa", "train", "a dog runs", 5.0, 1),
        sample("a2", "ssa", "train", "the grass", 0.0, 1),
        sample("a3", "ssa", "train", "a red ball", 12.0, 1),
        sample("a4", "clid", "val", "children play in the park", 35.0, 1),
        sample("a5", "clid", "train", &long, 90.0, 5),
    ]
}

fn write_dataset(dir: &Path) {
    let mut writer = DatasetWriter::create(dir, "report-test", 1 << 20).unwrap();
    let rows = samples();
    for split in ["train", "val"] {
        let part: Vec<SampleRow> = rows.iter().filter(|s| s.split == split).cloned().collect();
        writer.write_rows(split, &part).unwrap();
    }
    for (name, rows_in, rows_out, rejected, elapsed_ms) in [
        ("realize", 10, 7, 3, 12),
        ("quality-filter", 7, 5, 2, 4),
        ("mix", 8, 8, 0, 1),
    ] {
        writer.stage(StageMetrics {
            name: name.into(),
            rows_in,
            rows_out,
            rejected,
            elapsed_ms,
        });
    }
    writer
        .commit(IngestCounts {
            read: 8,
            accepted: 8,
            rejected: 0,
        })
        .unwrap();
}

fn capflow(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_capflow"))
        .args(args)
        .output()
        .unwrap()
}

fn png_size(path: &Path) -> (u32, u32) {
    let file = std::io::BufReader::new(std::fs::File::open(path).unwrap());
    let mut reader = png::Decoder::new(file).read_info().unwrap();
    let mut pixels = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut pixels).unwrap();
    assert_eq!(info.color_type, png::ColorType::Rgb, "{}", path.display());
    // Not a blank image: some pixels are the first series' blue.
    assert!(
        pixels.chunks(3).any(|p| p == [31, 119, 180]),
        "{} has no bars",
        path.display()
    );
    (info.width, info.height)
}

/// A row of an HTML table as the report writes it: text cells plain, numbers right-aligned.
fn html_row(cells: &[&str]) -> String {
    let mut row = String::from("<tr>");
    for (i, cell) in cells.iter().enumerate() {
        if i == 0 {
            row.push_str(&format!("<td>{cell}</td>"));
        } else {
            row.push_str(&format!("<td class=\"n\">{cell}</td>"));
        }
    }
    row.push_str("</tr>");
    row
}

fn section<'a>(json: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    json["sections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == id)
        .unwrap_or_else(|| panic!("no section {id}"))
}

fn chart_series(json: &serde_json::Value, id: &str) -> Vec<Vec<f64>> {
    let chart = section(json, id)["blocks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["kind"] == "chart")
        .unwrap();
    chart["series"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            s["values"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap())
                .collect()
        })
        .collect()
}

fn shares(counts: &[u64]) -> Vec<f64> {
    let total: u64 = counts.iter().sum();
    counts
        .iter()
        .map(|&n| 100.0 * n as f64 / total as f64)
        .collect()
}

#[test]
fn report_shows_hand_computed_statistics() {
    let tmp = tempfile::tempdir().unwrap();
    let dataset = tmp.path().join("dataset");
    let out = tmp.path().join("report");
    write_dataset(&dataset);
    let output = capflow(&[
        "report",
        dataset.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );

    for chart in ["stages", "methods", "coverage", "length", "level"] {
        assert_eq!(png_size(&out.join(format!("{chart}.png"))), (960, 420));
    }
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    for chart in ["stages", "methods", "coverage", "length", "level"] {
        assert!(
            html.contains(&format!("<img src=\"{chart}.png\"")),
            "{chart}"
        );
    }

    // Stages, from the manifest.
    assert!(html.contains(&html_row(&["realize", "10", "7", "3", "12"])));
    assert!(html.contains(&html_row(&["quality-filter", "7", "5", "2", "4"])));
    assert!(html.contains(&html_row(&["mix", "8", "8", "0", "1"])));

    // Methods: original 3 of 8 (train 2, val 1), clid 2 (train 1, val 1), ssa 3 (train 3).
    assert!(html.contains(&html_row(&["original", "3", "37.5%", "2", "1"])));
    assert!(html.contains(&html_row(&["clid", "2", "25.0%", "1", "1"])));
    assert!(html.contains(&html_row(&["ssa", "3", "37.5%", "3", "0"])));
    assert_eq!(chart_series(&json, "methods"), vec![vec![3.0, 2.0, 3.0]]);

    // Coverage, 10 bins: originals 35 and 38.5 in [30,40), 100 in [90,100]; augmented 5 and 0
    // in [0,10), 12 in [10,20), 35 in [30,40), 90 in [90,100].
    let original = [0, 0, 0, 2, 0, 0, 0, 0, 0, 1];
    let augmented = [2, 1, 0, 1, 0, 0, 0, 0, 0, 1];
    assert_eq!(
        chart_series(&json, "coverage"),
        vec![shares(&original), shares(&augmented)]
    );
    assert!(html.contains(&html_row(&["0-10", "0", "0.0%", "2", "40.0%"])));
    assert!(html.contains(&html_row(&["10-20", "0", "0.0%", "1", "20.0%"])));
    assert!(html.contains(&html_row(&["30-40", "2", "66.7%", "1", "20.0%"])));
    assert!(html.contains(&html_row(&["90-100", "1", "33.3%", "1", "20.0%"])));

    // Caption length: originals 6, 5, 10 words; augmented 3, 2, 3, 5, 41 (bin 40+).
    let mut original = [0u64; 40];
    for words in [6, 5, 10] {
        original[words - 1] += 1;
    }
    let mut augmented = [0u64; 40];
    for words in [3, 2, 3, 5] {
        augmented[words - 1] += 1;
    }
    augmented[39] += 1;
    assert_eq!(
        chart_series(&json, "length"),
        vec![shares(&original), shares(&augmented)]
    );
    assert!(html.contains(&html_row(&["3", "0", "0.0%", "2", "40.0%"])));
    assert!(html.contains(&html_row(&["40+", "0", "0.0%", "1", "20.0%"])));

    // Length levels: originals L1 L1 L2, augmented L1 ×4 and L5.
    assert_eq!(
        chart_series(&json, "level"),
        vec![shares(&[2, 1, 0, 0, 0]), shares(&[4, 0, 0, 0, 1])]
    );
    assert!(html.contains(&html_row(&["L1", "2", "66.7%", "4", "80.0%"])));
    assert!(html.contains(&html_row(&["L5", "0", "0.0%", "1", "20.0%"])));

    // D-n, lower-cased whitespace tokens.
    // Originals, 6 + 5 + 10 = 21 words. Unigrams: a dog runs on the grass (6), nothing new in
    // o2, two children play with red ball in park (8) = 14. Bigrams: 5 in o1; the-dog, dog-on
    // new in o2 (on-the, the-grass seen) = 2; 9 in o3, all new = 16.
    // Augmented, 3 + 2 + 3 + 5 + 41 = 54 words. Unigrams: a dog runs, the grass, red ball,
    // children play in park, big = 3+2+2+4+1 = 12. Bigrams: 2 + 1 + 2 + 4 + big-big 1 = 10.
    let d = |distinct: f64, words: f64| format!("{:.4}", distinct / words);
    assert_eq!(d(14.0, 21.0), "0.6667");
    assert!(html.contains(&html_row(&[
        "original",
        "3",
        "21",
        "14",
        "16",
        &d(14.0, 21.0),
        &d(16.0, 21.0)
    ])));
    assert!(html.contains(&html_row(&[
        "augmented",
        "5",
        "54",
        "12",
        "10",
        &d(12.0, 54.0),
        &d(10.0, 54.0)
    ])));
    let diversity = &section(&json, "diversity")["blocks"][0]["rows"];
    assert_eq!(diversity[0][5].as_f64().unwrap(), 14.0 / 21.0);
    assert_eq!(diversity[1][6].as_f64().unwrap(), 10.0 / 54.0);

    // The text summary.
    assert!(stdout.contains("original 3 (37.5%), clid 2 (25.0%), ssa 3 (37.5%)"));
    assert!(stdout.contains("augmented: D-1 0.2222, D-2 0.1852 (5 captions, 54 words)"));
    assert!(stdout.contains("realize: 10 in, 7 out, 3 rejected, 12 ms"));
    // Mean coverage of the originals (35 + 38.5 + 100) / 3 = 57.83.
    assert!(
        stdout.contains("original: 3 samples, mean coverage 57.83"),
        "{stdout}"
    );
}

#[test]
fn default_report_dir_is_inside_the_dataset_and_keeps_it_valid() {
    let tmp = tempfile::tempdir().unwrap();
    let dataset = tmp.path().join("dataset");
    write_dataset(&dataset);
    let output = capflow(&["report", dataset.to_str().unwrap()]);
    assert!(output.status.success());
    assert!(dataset.join("report/report.html").is_file());
    let output = capflow(&["validate", dataset.to_str().unwrap()]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn a_dataset_without_samples_still_reports() {
    let tmp = tempfile::tempdir().unwrap();
    let dataset = tmp.path().join("dataset");
    let writer = DatasetWriter::create(&dataset, "empty", 1 << 20).unwrap();
    writer.commit(IngestCounts::default()).unwrap();
    let out = tmp.path().join("report");
    let output = capflow(&[
        "report",
        dataset.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(output.status.success());
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("The dataset has no samples."));
    assert!(html.contains("The manifest records no stage metrics."));
}

#[test]
fn a_directory_without_a_dataset_is_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let output = capflow(&["report", tmp.path().to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("no manifest.json"), "{stderr}");
    assert!(
        stderr.contains(&tmp.path().display().to_string()),
        "{stderr}"
    );
}

fn table_rows(json: &serde_json::Value, id: &str) -> Vec<Vec<serde_json::Value>> {
    let table = section(json, id)["blocks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["kind"] == "table")
        .unwrap();
    table["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_array().unwrap().clone())
        .collect()
}

#[test]
fn clid_section_compares_caption_lengths_with_the_trusted_captions() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    let mut writer = DatasetWriter::create(&dir, "clid-report", 1 << 20).unwrap();
    // Trusted captions of 5, 12 and 25 words ("." does not count as a word).
    let words = |n: usize| vec!["word"; n].join(" ") + " .";
    let captions: Vec<capflow::schema::CaptionRow> = [5, 12, 25]
        .iter()
        .enumerate()
        .map(|(i, &n)| capflow::schema::CaptionRow {
            image_id: "img1".into(),
            caption_id: format!("img1#{i}"),
            dataset: "test".into(),
            split: "train".into(),
            caption_index: i as i32,
            text: words(n),
        })
        .collect();
    writer.write_rows("captions", &captions).unwrap();
    // CLID samples of 8, 20, 33 and 75 words, and an SSA sample the section ignores.
    let mut rows: Vec<SampleRow> = [8, 20, 33, 75]
        .iter()
        .enumerate()
        .map(|(i, &n)| sample(&format!("c{i}"), "clid", "train", &words(n), 10.0, 1))
        .collect();
    rows.push(sample("s1", "ssa", "train", &words(50), 10.0, 5));
    writer.write_rows("train", &rows).unwrap();
    writer
        .commit(IngestCounts {
            read: 3,
            accepted: 3,
            rejected: 0,
        })
        .unwrap();
    let out = tmp.path().join("report");
    let status = capflow(&[
        "report",
        dir.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(status.status.success(), "{:?}", status);
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    // Bins 1-9, 10-19, ..., 60-69, 70+: trusted {5, 12, 25}, CLID {8, 20, 33, 75}.
    let series = chart_series(&json, "clid");
    let third = 100.0 / 3.0;
    assert_eq!(
        series[0],
        vec![third, third, third, 0.0, 0.0, 0.0, 0.0, 0.0]
    );
    assert_eq!(series[1], vec![25.0, 0.0, 25.0, 25.0, 0.0, 0.0, 0.0, 25.0]);
    let rows = table_rows(&json, "clid");
    // set, captions, mean words, share >= 20 words.
    assert_eq!(rows[0][1], 3);
    assert!((rows[0][2].as_f64().unwrap() - 14.0).abs() < 1e-9);
    assert!((rows[0][3].as_f64().unwrap() - third).abs() < 1e-9);
    assert_eq!(rows[1][1], 4);
    assert!((rows[1][2].as_f64().unwrap() - 34.0).abs() < 1e-9);
    assert!((rows[1][3].as_f64().unwrap() - 75.0).abs() < 1e-9);
}

#[test]
fn gbc_section_reports_the_graph_statistics_of_the_dataset() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("gbc");
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let run = Command::new(env!("CARGO_BIN_EXE_capflow"))
        .args(["run", "dataflows/gbc.toml", "--out", dir.to_str().unwrap()])
        .current_dir(&root)
        .output()
        .unwrap();
    assert!(run.status.success(), "{:?}", run);
    let out = tmp.path().join("report");
    assert!(capflow(&[
        "report",
        dir.to_str().unwrap(),
        "--out",
        out.to_str().unwrap()
    ])
    .status
    .success());
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    // Independently from the JSONL: vertices, out-edges, captions and whitespace words per graph.
    let text = std::fs::read_to_string(root.join("examples/data/gbc/sample_gbc.jsonl")).unwrap();
    let graphs: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let per_graph = |f: &dyn Fn(&serde_json::Value) -> usize| -> Vec<f64> {
        graphs
            .iter()
            .map(|g| {
                g["vertices"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(f)
                    .sum::<usize>() as f64
            })
            .collect()
    };
    let vertices = per_graph(&|_| 1);
    let edges = per_graph(&|v| v["out_edges"].as_array().map_or(0, |e| e.len()));
    let captions = per_graph(&|v| v["descs"].as_array().map_or(0, |d| d.len()));
    let words = per_graph(&|v| {
        v["descs"].as_array().map_or(0, |d| {
            d.iter()
                .map(|c| c["text"].as_str().unwrap_or("").split_whitespace().count())
                .sum()
        })
    });
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let max = |v: &[f64]| v.iter().cloned().fold(0.0, f64::max);
    let rows = table_rows(&json, "gbc");
    for (row, (name, values)) in rows.iter().zip([
        ("vertices", &vertices),
        ("edges", &edges),
        ("captions", &captions),
        ("words", &words),
    ]) {
        assert_eq!(row[0], name);
        assert!(
            (row[1].as_f64().unwrap() - mean(values)).abs() < 1e-9,
            "{name}"
        );
        assert_eq!(row[3].as_f64().unwrap(), max(values), "{name}");
    }
    assert_eq!(rows[4][0], "diameter");
}
