//! `capflow gbc filter|subgraph|concat|hints` on the embedded sample graphs and the ml-gbc
//! fixtures. Expected outputs are worked out by hand from ml-gbc's algorithms (the vertex orders,
//! captions and hints written out below), or read straight from the input records (CLIP scores,
//! the hardcode captions ml-gbc itself stored); every command of docs/gbc.md runs as written.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use capflow::schema::{batch_to_rows, RejectedRow};
use serde_json::Value;

const SAMPLE: &str = "examples/data/gbc/sample_gbc.jsonl";
const CLIP_FIXTURE: &str = "gbc/wiki_with_clip_scores__wiki_gbc_graphs_with_clip.jsonl";
const HARDCODE_FIXTURES: [&str; 3] = [
    "gbc/wiki__wiki_gbc_graphs.jsonl",
    "gbc/wiki_pixtral_gdino__wiki_gbc_graphs.jsonl",
    "gbc/wiki_with_clip_scores__wiki_gbc_graphs_with_clip.jsonl",
];
const CLIP_NAMES: [&str; 3] = [
    "dfn5b-fm-b-patch32-224",
    "dfn5b-h-patch14-378",
    "openai-l-patch14-336",
];

/// Runs capflow in the repository root.
fn capflow(args: &[&str]) -> Output {
    Command::new(common::capflow_bin())
        .current_dir(common::repo_root())
        .args(args)
        .output()
        .unwrap()
}

fn ok(args: &[&str]) -> Output {
    let out = capflow(args);
    assert!(
        out.status.success(),
        "capflow {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn path_str(path: &Path) -> &str {
    path.to_str().unwrap()
}

fn records(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn stdout_lines(out: &Output) -> Vec<Value> {
    String::from_utf8(out.stdout.clone())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn sample_records() -> Vec<Value> {
    records(&common::repo_root().join(SAMPLE))
}

fn by_image(records: &[Value]) -> BTreeMap<String, Value> {
    records
        .iter()
        .map(|r| (r["img_path"].as_str().unwrap().to_string(), r.clone()))
        .collect()
}

fn vertex_ids(record: &Value) -> Vec<&str> {
    record["vertices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["vertex_id"].as_str().unwrap())
        .collect()
}

fn vertex<'a>(record: &'a Value, id: &str) -> &'a Value {
    record["vertices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["vertex_id"] == id)
        .unwrap_or_else(|| panic!("no vertex {id:?}"))
}

/// (label, text) of every caption of a vertex.
fn captions(vertex: &Value) -> Vec<(String, String)> {
    vertex["descs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["label"].as_str().unwrap().to_string(),
                d["text"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// (source, text, target) of every out-edge of a vertex.
fn out_edges(vertex: &Value) -> Vec<(String, String, String)> {
    vertex["out_edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let f = |k: &str| e[k].as_str().unwrap().to_string();
            (f("source"), f("text"), f("target"))
        })
        .collect()
}

fn text_of(record: &Value, id: &str, k: usize) -> String {
    captions(vertex(record, id))[k].1.clone()
}

fn read_rejected(path: &Path) -> Vec<RejectedRow> {
    let file = std::fs::File::open(path).unwrap();
    parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
        .unwrap()
        .build()
        .unwrap()
        .flat_map(|b| batch_to_rows::<RejectedRow>(&b.unwrap()).unwrap())
        .collect()
}

#[test]
fn filter_defaults_add_a_bag_of_words_caption_where_people_are_not_mentioned() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("filtered.jsonl");
    let run = ok(&["gbc", "filter", SAMPLE, path_str(&out)]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(stderr.contains("4 graphs read, 4 written"), "{stderr}");
    assert!(stderr.contains("2 bag-of-words captions added"), "{stderr}");
    let input = by_image(&sample_records());
    let output = by_image(&records(&out));
    assert_eq!(output.len(), 4);
    // No CLIP scores and no hardcode captions: only the edge texts decide. "people" leads from
    // the image and from [blanket|people] but neither "A family of four ..." nor "The family sits
    // on the blanket." says it; every other edge text is in a caption of its source.
    let family = &output["1000013.jpg"];
    assert_eq!(
        vertex_ids(family),
        [
            "people_0",
            "people_1",
            "people_2",
            "people_3",
            "people",
            "blanket",
            "sandwiches",
            "trees",
            "[blanket|people]",
            "[blanket|sandwiches]",
            "",
        ],
        "children before parents, in ml-gbc's recursive order"
    );
    for id in ["", "[blanket|people]"] {
        let got = captions(vertex(family, id));
        let mut expected = captions(vertex(&input["1000013.jpg"], id));
        expected.push(("bagofwords".into(), "people".into()));
        assert_eq!(got, expected, "{id:?}");
    }
    for (image, record) in &output {
        for v in record["vertices"].as_array().unwrap() {
            let id = v["vertex_id"].as_str().unwrap();
            if image == "1000013.jpg" && ["", "[blanket|people]"].contains(&id) {
                continue;
            }
            assert_eq!(
                captions(v),
                captions(vertex(&input[image], id)),
                "{image} {id:?}"
            );
        }
    }
}

#[test]
fn filter_without_detail_captions_drops_the_entities_they_described() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("filtered.parquet");
    ok(&[
        "gbc",
        "filter",
        SAMPLE,
        path_str(&out),
        "--exclude-labels",
        "detail",
    ]);
    let jsonl = tmp.path().join("filtered.jsonl");
    ok(&["gbc", "convert", path_str(&out), path_str(&jsonl)]);
    let output = by_image(&records(&jsonl));
    let input = by_image(&sample_records());
    // Entities keep only detail captions, so they go unless a surviving child keeps an edge
    // text alive; compositions and relations stay; images keep their short caption.
    let expected: [(&str, &[&str]); 4] = [
        ("1000002.jpg", &["[dog|frisbee]", "[dog|man]", ""]),
        ("1000007.jpg", &["dogs", "[dogs|trees]", ""]),
        (
            "1000013.jpg",
            &["people", "[blanket|people]", "[blanket|sandwiches]", ""],
        ),
        ("1000018.jpg", &["men", "[boat|men]", "[boat|lake]", ""]),
    ];
    for (image, ids) in expected {
        assert_eq!(vertex_ids(&output[image]), ids, "{image}");
    }
    let dogs = &output["1000007.jpg"];
    // "dogs" and "trees" (edges to the composition and the relation) are not in "A brown dog
    // with a ball and a white dog run across a grassy meadow." ("dog" is not "dogs").
    assert_eq!(
        captions(vertex(dogs, "")),
        [
            ("short".into(), text_of(&input["1000007.jpg"], "", 1)),
            ("bagofwords".into(), "dogs, trees".into()),
        ]
    );
    // The composition lost both children, so its edges are gone on both ends.
    assert!(out_edges(vertex(dogs, "dogs")).is_empty());
    assert_eq!(
        out_edges(vertex(dogs, "[dogs|trees]")),
        [("[dogs|trees]".into(), "dogs".into(), "dogs".into())]
    );
    let beach = &output["1000002.jpg"];
    assert_eq!(
        captions(vertex(beach, "")),
        [("short".into(), text_of(&input["1000002.jpg"], "", 1))]
    );
    let targets: Vec<String> = out_edges(vertex(beach, ""))
        .into_iter()
        .map(|e| e.2)
        .collect();
    assert_eq!(
        targets,
        ["[dog|frisbee]", "[dog|frisbee]", "[dog|man]", "[dog|man]"]
    );
}

/// Mean CLIP score of a caption over ml-gbc's default models, or `None` without scores.
fn clip_mean(desc: &Value) -> Option<f64> {
    let scores = desc["clip_scores"]["scores"].as_object()?;
    let values: Vec<f64> = scores
        .iter()
        .filter(|(k, _)| CLIP_NAMES.contains(&k.as_str()))
        .map(|(_, v)| v.as_f64().unwrap())
        .collect();
    (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
}

#[test]
fn filter_drops_low_clip_scores_and_hardcode_captions_of_the_fixture() {
    let Some(source) = common::fixture(CLIP_FIXTURE) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("filtered.jsonl");
    ok(&["gbc", "filter", path_str(&source), path_str(&out)]);
    let input = records(&source);
    let output = records(&out);
    // No image caption has a threshold by default (`short-global` matches no caption), so every
    // graph stays.
    assert_eq!(output.len(), input.len());
    let (mut low, mut templates) = (0, 0);
    for (before, after) in input.iter().zip(&output) {
        assert_eq!(before["img_path"], after["img_path"]);
        for v in before["vertices"].as_array().unwrap() {
            let id = v["vertex_id"].as_str().unwrap();
            let kept: Vec<(String, String)> = v["descs"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| {
                    let template = d["label"] == "hardcode";
                    let below =
                        d["full_label"] == "detail-entity" && clip_mean(d).is_some_and(|m| m < 0.2);
                    templates += template as usize;
                    low += below as usize;
                    !template && !below
                })
                .map(|d| {
                    (
                        d["label"].as_str().unwrap().to_string(),
                        d["text"].as_str().unwrap().to_string(),
                    )
                })
                .collect();
            let survivor = after["vertices"]
                .as_array()
                .unwrap()
                .iter()
                .find(|w| w["vertex_id"] == id);
            match survivor {
                Some(w) => {
                    let got: Vec<(String, String)> = captions(w)
                        .into_iter()
                        .filter(|(label, _)| label != "bagofwords")
                        .collect();
                    assert_eq!(got, kept, "{} {id:?}", before["img_path"]);
                }
                None => assert!(kept.is_empty(), "{} {id:?} was dropped", before["img_path"]),
            }
        }
    }
    assert_eq!((low, templates), (18, 110));
}

#[test]
fn filter_reports_broken_records_and_bad_options() {
    let tmp = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(common::repo_root().join(SAMPLE)).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines.insert(1, "{\"vertices\": [");
    let broken = tmp.path().join("broken.jsonl");
    std::fs::write(&broken, lines.join("\n") + "\n").unwrap();
    let out = tmp.path().join("filtered.jsonl");
    let rejected = tmp.path().join("rejected.parquet");
    let run = ok(&[
        "gbc",
        "filter",
        path_str(&broken),
        path_str(&out),
        "--rejected",
        path_str(&rejected),
    ]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(stderr.contains("broken.jsonl, line 2"), "{stderr}");
    assert!(stderr.contains("5 graphs read, 4 written"), "{stderr}");
    assert_eq!(records(&out).len(), 4);
    let rows = read_rejected(&rejected);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].line, Some(2));
    let wrong_type = tmp.path().join("filtered.txt");
    for command in ["filter", "subgraph"] {
        let run = capflow(&["gbc", command, SAMPLE, path_str(&wrong_type)]);
        assert_eq!(run.status.code(), Some(2), "{command}");
        assert!(String::from_utf8_lossy(&run.stderr).contains("unknown GBC file type"));
        assert!(!wrong_type.exists());
    }
    for bad in [
        &["--min-clip-scores", "detail-entity"][..],
        &["--random-filtering-probs", "detail=1.5"],
        &["--remove-truncation", "maybe"],
        &["--node-selection-mode", "sideways"],
    ] {
        let mut args = vec!["gbc", "filter", SAMPLE, path_str(&out)];
        args.extend_from_slice(bad);
        let run = capflow(&args);
        assert_eq!(run.status.code(), Some(2), "{bad:?}");
        assert!(!run.stderr.is_empty(), "{bad:?}: no message");
    }
}

#[test]
fn filter_caps_vertices_per_graph_and_overall() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("filtered.jsonl");
    // BFS after filtering: the image, then its children in edge order.
    ok(&[
        "gbc",
        "filter",
        SAMPLE,
        path_str(&out),
        "--max-n-vertices-per-graph",
        "2",
    ]);
    let got: Vec<Vec<String>> = records(&out)
        .iter()
        .map(|r| vertex_ids(r).into_iter().map(String::from).collect())
        .collect();
    assert_eq!(
        got,
        [["", "dog"], ["", "dogs"], ["", "people"], ["", "men"]]
    );
    // 8 + 7 vertices fit in 16; the third graph (11 more) would not.
    let run = ok(&[
        "gbc",
        "filter",
        SAMPLE,
        path_str(&out),
        "--max-n-vertices",
        "16",
    ]);
    assert_eq!(records(&out).len(), 2);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(stderr.contains("stopped at 1000013.jpg"), "{stderr}");
}

#[test]
fn filter_drops_at_random_and_selects_before_or_after() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("filtered.jsonl");
    // Probability 1: every relation caption goes; a relation whose children stay keeps them
    // through a bag-of-words caption of their edge texts, as ml-gbc's `filter_vertex` does.
    ok(&[
        "gbc",
        "filter",
        SAMPLE,
        path_str(&out),
        "--random-filtering-probs",
        "relation=1.0",
    ]);
    let beach = &by_image(&records(&out))["1000002.jpg"];
    assert_eq!(
        captions(vertex(beach, "[dog|frisbee]")),
        [("bagofwords".into(), "dog, frisbee".into())]
    );
    assert_eq!(
        captions(vertex(beach, "[dog|man]")),
        [("bagofwords".into(), "dog, man".into())]
    );
    // Probability 0 draws but drops nothing.
    ok(&[
        "gbc",
        "filter",
        SAMPLE,
        path_str(&out),
        "--random-filtering-probs",
        "relation=0",
    ]);
    let input = by_image(&sample_records());
    let kept = by_image(&records(&out));
    assert_eq!(
        captions(vertex(&kept["1000002.jpg"], "[dog|man]")),
        captions(vertex(&input["1000002.jpg"], "[dog|man]"))
    );
    // Selecting first keeps the filter's children-first order; selecting after, BFS order.
    for (after, expected) in [("false", ["", "dog"]), ("true", ["dog", ""])] {
        ok(&[
            "gbc",
            "filter",
            SAMPLE,
            path_str(&out),
            "--max-n-vertices-per-graph",
            "2",
            "--filter-after-selection",
            after,
        ]);
        assert_eq!(
            vertex_ids(&records(&out)[0]),
            expected,
            "--filter-after-selection {after}"
        );
    }
}

#[test]
fn subgraphs_by_size_depth_and_root() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("sub.jsonl");
    ok(&[
        "gbc",
        "subgraph",
        SAMPLE,
        path_str(&out),
        "--max-n-vertices",
        "3",
    ]);
    let three = by_image(&records(&out));
    let expected: [(&str, [&str; 3]); 4] = [
        ("1000002.jpg", ["", "dog", "frisbee"]),
        ("1000007.jpg", ["", "dogs", "trees"]),
        ("1000013.jpg", ["", "people", "blanket"]),
        ("1000018.jpg", ["", "men", "boat"]),
    ];
    for (image, ids) in expected {
        assert_eq!(vertex_ids(&three[image]), ids, "{image}");
    }
    // Edges to left-out vertices are gone on both ends.
    assert_eq!(
        out_edges(vertex(&three["1000002.jpg"], "")),
        [
            ("".into(), "dog".into(), "dog".into()),
            ("".into(), "frisbee".into(), "frisbee".into()),
        ]
    );
    assert_eq!(
        vertex(&three["1000002.jpg"], "dog")["in_edges"]
            .as_array()
            .unwrap()
            .len(),
        1
    );

    // Depth-first, no deeper than the image's children: man_shorts (depth 2) goes.
    ok(&[
        "gbc",
        "subgraph",
        SAMPLE,
        path_str(&out),
        "--max-depth",
        "1",
        "--mode",
        "dfs",
    ]);
    let shallow = by_image(&records(&out));
    assert_eq!(
        vertex_ids(&shallow["1000002.jpg"]),
        [
            "",
            "dog",
            "frisbee",
            "man",
            "ocean",
            "[dog|frisbee]",
            "[dog|man]"
        ]
    );
    assert_eq!(
        vertex_ids(&shallow["1000007.jpg"]),
        ["", "dogs", "trees", "[dogs|trees]"]
    );

    // From a named vertex: only the beach graph has a `man`; the others are rejected.
    let rejected = tmp.path().join("rejected.parquet");
    let run = ok(&[
        "gbc",
        "subgraph",
        SAMPLE,
        path_str(&out),
        "--root-id",
        "man",
        "--rejected",
        path_str(&rejected),
    ]);
    let from_man = records(&out);
    assert_eq!(from_man.len(), 1);
    assert_eq!(vertex_ids(&from_man[0]), ["man", "man_shorts"]);
    let rows = read_rejected(&rejected);
    let images: Vec<&str> = rows.iter().map(|r| r.record.as_str()).collect();
    assert_eq!(
        images,
        [
            "graph 1 (1000007.jpg)",
            "graph 2 (1000013.jpg)",
            "graph 3 (1000018.jpg)"
        ]
    );
    assert!(rows.iter().all(|r| r.reason.contains("\"man\"")));
    assert!(String::from_utf8_lossy(&run.stderr).contains("3 rejected"));
    let refused = capflow(&[
        "gbc",
        "subgraph",
        SAMPLE,
        path_str(&out),
        "--mode",
        "random",
        "--root-id",
        "man",
    ]);
    assert_eq!(refused.status.code(), Some(2));
}

/// The captions of `ids` in that order, joined by `separator`.
fn joined(record: &Value, ids: &[&str], separator: &str) -> String {
    ids.iter()
        .flat_map(|id| captions(vertex(record, id)).into_iter().map(|(_, t)| t))
        .collect::<Vec<_>>()
        .join(separator)
}

#[test]
fn concat_in_every_traversal_order() {
    let input = by_image(&sample_records());
    let bfs = stdout_lines(&ok(&["gbc", "concat", SAMPLE]));
    assert_eq!(bfs.len(), 4);
    assert_eq!(bfs[0]["image_id"], "1000002.jpg");
    assert_eq!(bfs[0]["img_path"], "1000002.jpg");
    assert_eq!(
        bfs[0]["text"].as_str().unwrap(),
        joined(
            &input["1000002.jpg"],
            &[
                "",
                "dog",
                "frisbee",
                "man",
                "ocean",
                "[dog|frisbee]",
                "[dog|man]",
                "man_shorts"
            ],
            " "
        )
    );
    let dfs = stdout_lines(&ok(&[
        "gbc",
        "concat",
        SAMPLE,
        "--mode",
        "dfs",
        "--separator",
        " | ",
    ]));
    assert_eq!(
        dfs[1]["text"].as_str().unwrap(),
        joined(
            &input["1000007.jpg"],
            &[
                "",
                "dogs",
                "dogs_0",
                "dogs_0_ball",
                "dogs_1",
                "trees",
                "[dogs|trees]"
            ],
            " | "
        )
    );
    // Topological: the reverse of the stack walk's finishing order dogs_0_ball, dogs_0,
    // dogs_1, dogs, trees, [dogs|trees], image.
    let tmp = tempfile::tempdir().unwrap();
    let listing = tmp.path().join("concat.tsv");
    ok(&[
        "gbc",
        "concat",
        SAMPLE,
        "--mode",
        "topological",
        "--tsv",
        "--output",
        path_str(&listing),
    ]);
    let text = std::fs::read_to_string(&listing).unwrap();
    let row = text.lines().nth(1).unwrap();
    let expected = joined(
        &input["1000007.jpg"],
        &[
            "",
            "[dogs|trees]",
            "trees",
            "dogs",
            "dogs_1",
            "dogs_0",
            "dogs_0_ball",
        ],
        " ",
    );
    assert_eq!(row, format!("1000007.jpg\t{expected}"));
}

#[test]
fn concat_cuts_repeated_suffixes_when_asked() {
    let tmp = tempfile::tempdir().unwrap();
    let graph = r#"{"vertices": [{"vertex_id": "", "bbox": {"left": 0.0, "top": 0.0, "right": 1.0, "bottom": 1.0, "confidence": null}, "label": "image", "descs": [{"text": "a cat sat.sat.sat.", "label": "short"}], "in_edges": [], "out_edges": []}], "img_path": "cat.jpg"}"#;
    let input = tmp.path().join("cat.jsonl");
    std::fs::write(&input, format!("{graph}\n")).unwrap();
    let plain = stdout_lines(&ok(&["gbc", "concat", path_str(&input)]));
    assert_eq!(plain[0]["text"], "a cat sat.sat.sat.");
    let cut = stdout_lines(&ok(&[
        "gbc",
        "concat",
        path_str(&input),
        "--remove-repeated-suffix",
        "true",
    ]));
    assert_eq!(cut[0]["text"], "a cat sat.");
}

#[test]
fn hints_of_the_embedded_compositions() {
    let hints = stdout_lines(&ok(&[
        "gbc",
        "hints",
        SAMPLE,
        "--root-criterion",
        "leftmost",
    ]));
    let compositions: Vec<(&str, &str)> = hints
        .iter()
        .map(|h| {
            (
                h["image_id"].as_str().unwrap(),
                h["vertex_id"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        compositions,
        [
            ("1000007.jpg", "dogs"),
            ("1000013.jpg", "people"),
            ("1000018.jpg", "men")
        ]
    );
    // dog 1's centre (0.289, 0.599) is left of dog 2's (0.689, 0.652): 7.6° is "to the right";
    // inside the composition box, dog 1 is leftmost with its right edge at 0.46 < 0.5 and dog 2
    // rightmost with its left edge at 0.54 > 0.5, both in the middle band vertically.
    assert_eq!(hints[0]["root_criterion"], "leftmost");
    assert_eq!(
        hints[0]["hints"],
        serde_json::json!([
            "dog 1 is on the left side of the composition",
            "dog 2 is to the right of dog 1.",
            "dog 2 is on the right side of the composition"
        ])
    );
    let tsv = ok(&[
        "gbc",
        "hints",
        SAMPLE,
        "--root-criterion",
        "rightmost",
        "--tsv",
    ]);
    let text = String::from_utf8(tsv.stdout).unwrap();
    let dogs: Vec<&str> = text.lines().take(3).collect();
    assert_eq!(
        dogs,
        [
            "1000007.jpg\tdogs\trightmost\tdog 2 is on the right side of the composition",
            "1000007.jpg\tdogs\trightmost\tdog 1 is to the left of dog 2.",
            "1000007.jpg\tdogs\trightmost\tdog 1 is on the left side of the composition",
        ]
    );
    // Without a criterion, one is drawn per composition and reported.
    let drawn = stdout_lines(&ok(&["gbc", "hints", SAMPLE, "--seed", "7"]));
    assert_eq!(drawn.len(), 3);
    for h in &drawn {
        assert!(!h["hints"].as_array().unwrap().is_empty());
        let criterion = h["root_criterion"].as_str().unwrap();
        assert!(
            [
                "leftmost",
                "rightmost",
                "topmost",
                "bottommost",
                "middle_x",
                "middle_y"
            ]
            .contains(&criterion),
            "{criterion}"
        );
    }
}

/// The two wordings of each diagonal, mapped to one.
fn canonical(text: &str) -> String {
    text.replace("to the bottom-right of", "below and to the right of")
        .replace("to the bottom-left of", "below and to the left of")
        .replace("to the top-left of", "above and to the left of")
        .replace("to the top-right of", "above and to the right of")
}

#[test]
fn hints_reproduce_the_hardcode_captions_ml_gbc_stored() {
    let Some(dir) = common::fixtures_dir() else {
        return;
    };
    let criteria = [
        "leftmost",
        "rightmost",
        "topmost",
        "bottommost",
        "middle_x",
        "middle_y",
    ];
    for fixture in HARDCODE_FIXTURES {
        let path: PathBuf = dir.join(fixture);
        // Stored hints per (image, vertex).
        let mut stored: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
        for record in records(&path) {
            let image = record["img_path"].as_str().unwrap().to_string();
            for v in record["vertices"].as_array().unwrap() {
                let hints: Vec<String> = captions(v)
                    .into_iter()
                    .filter(|(label, _)| label == "hardcode")
                    .map(|(_, t)| canonical(&t))
                    .collect();
                if v["label"] == "composition" && !hints.is_empty() {
                    let id = v["vertex_id"].as_str().unwrap().to_string();
                    stored.insert((image.clone(), id), hints);
                }
            }
        }
        let mut reproduced: BTreeMap<(String, String), bool> =
            stored.keys().map(|k| (k.clone(), false)).collect();
        for criterion in criteria {
            let listing = stdout_lines(&ok(&[
                "gbc",
                "hints",
                path_str(&path),
                "--root-criterion",
                criterion,
            ]));
            for h in listing {
                let key = (
                    h["image_id"].as_str().unwrap().to_string(),
                    h["vertex_id"].as_str().unwrap().to_string(),
                );
                let ours: Vec<String> = h["hints"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|t| canonical(t.as_str().unwrap()))
                    .collect();
                if stored.get(&key) == Some(&ours) {
                    reproduced.insert(key, true);
                }
            }
        }
        let missed: Vec<_> = reproduced.iter().filter(|(_, ok)| !**ok).collect();
        assert!(!stored.is_empty(), "{fixture}: no hardcode captions");
        assert!(missed.is_empty(), "{fixture}: not reproduced: {missed:?}");
    }
}

/// Every `capflow` command in docs/gbc.md's code blocks, run as written from the repository
/// root with `out/` under a temporary directory.
#[test]
fn documented_gbc_commands_run() {
    let doc = std::fs::read_to_string(common::repo_root().join("docs/gbc.md")).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let out_dir = format!("{}/", tmp.path().display());
    let mut in_code = false;
    let mut commands = Vec::new();
    for line in doc.lines() {
        if line.starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code && line.starts_with("capflow ") {
            // A trailing `# comment` explains the command.
            let command = line.split("  #").next().unwrap().trim_end();
            commands.push(command.replace("out/", &out_dir));
        }
    }
    let subcommands: Vec<&str> = commands
        .iter()
        .filter_map(|c| c.split_whitespace().nth(2))
        .collect();
    for expected in [
        "convert",
        "stats",
        "filter",
        "subgraph",
        "concat",
        "hints",
        "dataflows/gbc.toml",
        "dataflows/gbc-filtered.toml",
    ] {
        assert!(
            subcommands.contains(&expected),
            "docs/gbc.md shows no `{expected}` command: {commands:?}"
        );
    }
    for command in &commands {
        // Through the shell, for its quoting (`--separator " "`).
        let line = command.replacen(
            "capflow",
            &format!("'{}'", common::capflow_bin().display()),
            1,
        );
        let out = Command::new("sh")
            .current_dir(common::repo_root())
            .args(["-c", &line])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{command}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The recipe tables docs/gbc.md shows are those of `dataflows/gbc-filtered.toml`, which
/// `tests/recipes.rs` runs.
#[test]
fn documented_gbc_tables_are_the_recipes() {
    let doc = std::fs::read_to_string(common::repo_root().join("docs/gbc.md")).unwrap();
    let recipe =
        std::fs::read_to_string(common::repo_root().join("dataflows/gbc-filtered.toml")).unwrap();
    let block = doc
        .split("```toml\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap())
        .find(|b| b.starts_with("[gbc.filter]"))
        .expect("docs/gbc.md shows the [gbc.filter] table");
    assert!(recipe.contains(block), "{block}");
}
