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

/// The inline `<svg>` of chart `id` in the report page.
fn inline_svg<'a>(html: &'a str, id: &str) -> &'a str {
    let start = html
        .find(&format!("<figure id=\"chart-{id}\">"))
        .unwrap_or_else(|| panic!("no chart {id}"));
    let svg = &html[start..];
    &svg[svg.find("<svg").unwrap()..svg.find("</svg>").unwrap() + 6]
}

/// The text of every `<text>` element of an SVG, unescaped.
fn svg_texts(svg: &str) -> Vec<String> {
    svg.split("<text")
        .skip(1)
        .map(|t| {
            let body = &t[t.find('>').unwrap() + 1..t.find("</text>").unwrap()];
            body.trim()
                .replace("&lt;", "<")
                .replace("&gt;", ">")
                .replace("&quot;", "\"")
                .replace("&#39;", "'")
                .replace("&apos;", "'")
                .replace("&amp;", "&")
        })
        .collect()
}

/// Whether a chart's SVG draws bars in the first series' colour.
fn has_bars(svg: &str) -> bool {
    svg.split("<rect").any(|r| r.contains("fill=\"#1F77B4\""))
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

    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    for chart in ["stages", "methods", "coverage", "length", "level"] {
        let svg = inline_svg(&html, chart);
        assert!(has_bars(svg), "{chart}");
        // The same drawing is written beside the page.
        assert_eq!(
            std::fs::read_to_string(out.join(format!("{chart}.svg")))
                .unwrap()
                .trim_end(),
            svg,
            "{chart}"
        );
    }
    // One self-contained file: nothing loaded from elsewhere.
    assert!(!html.contains("<img") && !html.contains("src="), "{html}");

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

    // Caption length: originals 6, 5, 10 words; augmented 3, 2, 3, 5, 41 (bin 40+). The axis
    // runs from the shortest caption, 2 words, to the 40+ bin: 39 bins.
    let mut original = [0u64; 39];
    for words in [6, 5, 10] {
        original[words - 2] += 1;
    }
    let mut augmented = [0u64; 39];
    for words in [3, 2, 3, 5] {
        augmented[words - 2] += 1;
    }
    augmented[38] += 1;
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
fn a_dataset_without_samples_reports_only_the_dataset() {
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
    assert_eq!(html.matches("<section id=").count(), 1, "{html}");
    assert!(html.contains("<section id=\"dataset\">"));
    assert!(!html.contains("<svg"));
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
    // Every level up to the longest caption's (75 words: 70+) is on the axis.
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    let texts = svg_texts(inline_svg(&html, "clid_length"));
    for label in [
        "1-9", "10-19", "20-29", "30-39", "40-49", "50-59", "60-69", "70+",
    ] {
        assert!(texts.iter().any(|t| t == label), "{label}: {texts:?}");
    }
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

fn run_recipe(recipe: &str, out: &Path) {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let run = Command::new(env!("CARGO_BIN_EXE_capflow"))
        .args(["run", recipe, "--out", out.to_str().unwrap()])
        .current_dir(&root)
        .output()
        .unwrap();
    assert!(run.status.success(), "{:?}", run);
}

fn section_ids(html: &str) -> Vec<String> {
    html.split("<section id=\"")
        .skip(1)
        .map(|s| s[..s.find('"').unwrap()].to_string())
        .collect()
}

#[test]
fn ssa_report_labels_every_stage_fits_the_length_axis_and_shows_only_what_it_holds() {
    let tmp = tempfile::tempdir().unwrap();
    let dataset = tmp.path().join("ssa");
    run_recipe("dataflows/ssa-flickr30k.toml", &dataset);
    let out = tmp.path().join("report");
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let output = capflow(&[
        "report",
        dataset.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--spec",
        root.join("dataflows/ssa-flickr30k.toml").to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{output:?}");
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();

    // Only the sections an SSA dataset has: no CLID samples, no GBC graphs.
    assert_eq!(
        section_ids(&html),
        [
            "dataset",
            "stages",
            "drops",
            "methods",
            "coverage",
            "length",
            "level",
            "quality",
            "diversity"
        ]
    );
    assert!(!html.contains("CLID") && !html.contains("GBC"));

    // Every stage the manifest lists is labelled on the stages chart.
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dataset.join("manifest.json")).unwrap()).unwrap();
    let stages = manifest["stages"].as_array().unwrap();
    // read, plan, models, gather, originals, the seven SSA stages, mix, export.
    assert_eq!(stages.len(), 14);
    let texts = svg_texts(inline_svg(&html, "stages"));
    for stage in stages {
        let name = stage["name"].as_str().unwrap();
        assert!(texts.iter().any(|t| t == name), "{name}: {texts:?}");
    }
    // The drops chart has the stages that dropped rows, with their counts in the table.
    let dropping: Vec<&serde_json::Value> = stages
        .iter()
        .filter(|s| s["rejected"].as_u64().unwrap() > 0)
        .collect();
    assert!(!dropping.is_empty());
    let texts = svg_texts(inline_svg(&html, "drops_per_stage"));
    for stage in &dropping {
        let (rows_in, dropped) = (
            stage["rows_in"].as_u64().unwrap(),
            stage["rejected"].as_u64().unwrap(),
        );
        let name = stage["name"].as_str().unwrap();
        assert!(texts.iter().any(|t| t == name), "{name}");
        let share = format!("{:.1}%", 100.0 * dropped as f64 / rows_in as f64);
        assert!(html.contains(&html_row(&[
            name,
            &rows_in.to_string(),
            &dropped.to_string(),
            &share
        ])));
    }

    // Every reason SSA's filter dropped sentences for is labelled, with its count.
    let dropped = manifest["dropped"]["ssa"].as_object().unwrap();
    assert!(!dropped.is_empty());
    let texts = svg_texts(inline_svg(&html, "drop_reasons"));
    for (reason, n) in dropped {
        let label = format!("ssa: {reason}");
        assert!(texts.contains(&label), "{label}: {texts:?}");
        assert!(html.contains(&format!(
            "<tr><td>ssa</td><td>{}</td><td class=\"n\">{n}</td></tr>",
            reason.replace('\'', "&#39;")
        )));
    }

    // The length axis runs from the shortest to the longest caption, read from the samples.
    let mut words = Vec::new();
    for batch in capflow::export::read_table(&dataset, capflow::schema::TableKind::Samples).unwrap()
    {
        for row in capflow::schema::batch_to_rows::<SampleRow>(&batch.unwrap()).unwrap() {
            words.push(row.word_count);
        }
    }
    let (shortest, longest) = (*words.iter().min().unwrap(), *words.iter().max().unwrap());
    assert!(longest < 40, "{longest}");
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    let length = section(&json, "length")["blocks"][0].clone();
    let expected: Vec<String> = (shortest..=longest).map(|n| n.to_string()).collect();
    assert_eq!(length["categories"], serde_json::json!(expected));
    let texts = svg_texts(inline_svg(&html, "length"));
    for label in &expected {
        assert!(texts.iter().any(|t| t == label), "{label}: {texts:?}");
    }
    assert!(!texts.iter().any(|t| t == "40+"));

    // The quality chart marks the spec's threshold.
    let texts = svg_texts(inline_svg(&html, "quality_builtin_quality"));
    assert!(texts.iter().any(|t| t == "threshold 0.7"), "{texts:?}");
}

/// A hand-made dataset with a non-ASCII method and score name and known quality scores.
fn write_scored_dataset(dir: &Path) {
    let mut writer = DatasetWriter::create(dir, "scored", 1 << 20).unwrap();
    let words = |n: usize| vec!["w"; n].join(" ");
    let mut rows = Vec::new();
    for (i, n) in [4, 7, 7].iter().enumerate() {
        rows.push(sample(
            &format!("o{i}"),
            "original",
            "train",
            &words(*n),
            10.0,
            1,
        ));
    }
    for (i, (n, score)) in [(3, 0.81), (5, 0.83), (5, 0.9), (9, 0.95)]
        .iter()
        .enumerate()
    {
        let mut row = sample(&format!("r{i}"), "ré-écrit", "train", &words(*n), 10.0, 1);
        row.quality = vec![
            capflow::schema::QualityScore {
                name: "qualité".into(),
                value: *score,
            },
            capflow::schema::QualityScore {
                name: "rank".into(),
                value: (i + 1) as f64,
            },
        ];
        rows.push(row);
    }
    writer.write_rows("train", &rows).unwrap();
    writer.commit(IngestCounts::default()).unwrap();
}

#[test]
fn quality_chart_marks_the_threshold_and_axes_fit_hand_computed_ranges() {
    let tmp = tempfile::tempdir().unwrap();
    let dataset = tmp.path().join("scored");
    write_scored_dataset(&dataset);
    let out = tmp.path().join("report");
    let output = capflow(&[
        "report",
        dataset.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--threshold",
        "qualité=0.8",
    ]);
    assert!(output.status.success(), "{output:?}");
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    // No stage metrics, nothing dropped, no CLID samples or GBC graphs.
    assert_eq!(
        section_ids(&html),
        [
            "dataset",
            "methods",
            "coverage",
            "length",
            "level",
            "quality",
            "diversity"
        ]
    );

    // Non-ASCII labels are SVG text, as written.
    let methods = svg_texts(inline_svg(&html, "methods"));
    assert!(methods.iter().any(|t| t == "ré-écrit"), "{methods:?}");
    let quality = svg_texts(inline_svg(&html, "quality_qualit_"));
    assert!(
        quality.iter().any(|t| t == "Quality score qualité"),
        "{quality:?}"
    );

    // Lengths: originals 4, 7, 7; augmented 3, 5, 5, 9: bins 3 to 9. Shares: originals 1/3 and
    // 2/3 → largest 66.7 % → round step 20 → axis 0 to 100.
    let length = svg_texts(inline_svg(&html, "length"));
    for n in 3..=9 {
        assert!(
            length.iter().any(|t| *t == n.to_string()),
            "{n}: {length:?}"
        );
    }
    for absent in ["1", "2", "10", "11", "40+", "120"] {
        assert!(!length.iter().any(|t| t == absent), "{absent}: {length:?}");
    }
    for tick in ["0", "20", "40", "60", "80", "100"] {
        assert!(length.iter().any(|t| t == tick), "{tick}");
    }
    let third = 100.0 / 3.0;
    assert_eq!(
        chart_series(&json, "length"),
        vec![
            vec![0.0, third, 0.0, 0.0, 2.0 * third, 0.0, 0.0],
            vec![25.0, 0.0, 50.0, 0.0, 0.0, 0.0, 25.0]
        ]
    );

    // Quality 0.81, 0.83, 0.9, 0.95 with threshold 0.8: span 0.15 / 20 bins = 0.0075 → round
    // step 0.01 → bins 0.80–0.81 ... 0.95–0.96 (16), counts in bins 1, 3, 10 and 15; at most 1 a bin →
    // axis 0 to 1.0 in steps of 0.2. The threshold sits on the first bin's lower edge.
    let chart = section(&json, "quality")["blocks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["kind"] == "chart")
        .unwrap()
        .clone();
    let labels: Vec<String> = (80..=95).map(|i| format!("0.{i}–0.{}", i + 1)).collect();
    assert_eq!(chart["categories"], serde_json::json!(labels));
    let mut counts = vec![0.0; 16];
    for bin in [1, 3, 10, 15] {
        counts[bin] = 1.0;
    }
    assert_eq!(chart["series"][0]["values"], serde_json::json!(counts));
    assert!(chart["markers"][0]["position"].as_f64().unwrap().abs() < 1e-9);
    for label in labels
        .iter()
        .map(String::as_str)
        .chain(["threshold 0.8", "0.0", "1.0"])
    {
        assert!(quality.iter().any(|t| t == label), "{label}: {quality:?}");
    }
    assert!(!quality.iter().any(|t| t == "1.2"));
    // The whole-number score is tabled, not charted.
    assert!(!html.contains("chart-quality_rank"));
    let rows = table_rows(&json, "quality");
    assert_eq!(rows[0][0], "qualité");
    assert_eq!(rows[0][1], 4);
    assert!((rows[0][3].as_f64().unwrap() - (0.81 + 0.83 + 0.9 + 0.95) / 4.0).abs() < 1e-12);
    assert_eq!(rows[0][6], 0);
    assert_eq!(rows[1][0], "rank");
}

/// Renders the SSA report in headless Chromium and checks the screenshot shows charts: run
/// with `cargo test --release --test report -- --ignored` where `/usr/bin/chromium` is
/// installed (Debian's package `chromium`).
#[test]
#[ignore = "needs Chromium at /usr/bin/chromium"]
fn report_renders_in_headless_chromium() {
    let tmp = tempfile::tempdir().unwrap();
    let dataset = tmp.path().join("ssa");
    run_recipe("dataflows/ssa-flickr30k.toml", &dataset);
    let out = tmp.path().join("report");
    assert!(capflow(&[
        "report",
        dataset.to_str().unwrap(),
        "--out",
        out.to_str().unwrap()
    ])
    .status
    .success());
    let shot = tmp.path().join("report.png");
    let status = Command::new("/usr/bin/chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            &format!("--user-data-dir={}", tmp.path().join("profile").display()),
            &format!("--screenshot={}", shot.display()),
            "--window-size=1100,3000",
        ])
        .arg(format!("file://{}", out.join("report.html").display()))
        .output()
        .unwrap();
    assert!(status.status.success(), "{status:?}");
    let image = image::open(&shot).unwrap().to_rgb8();
    assert_eq!(image.dimensions(), (1100, 3000));
    let pixels: Vec<[u8; 3]> = image.pixels().map(|p| p.0).collect();
    let near = |p: &[u8; 3], c: [u8; 3]| p.iter().zip(c).all(|(a, b)| a.abs_diff(b) <= 8);
    let count = |c: [u8; 3]| pixels.iter().filter(|p| near(p, c)).count();
    let total = pixels.len();
    // Not blank: a good part is ink, and both series' colours fill bars.
    let white = count([255, 255, 255]);
    assert!(white < total * 95 / 100, "{white} of {total} white");
    assert!(count([31, 119, 180]) > 20_000, "blue bars");
    assert!(count([255, 127, 14]) > 10_000, "orange bars");
    // Dark text pixels (headings, labels, tables).
    let dark = pixels.iter().filter(|p| p.iter().all(|&v| v < 100)).count();
    assert!(dark > 5_000, "{dark} dark pixels");
}
