//! Every fixture file of the Flickr30k Entities, COCO, COCO-Entities and Visual Genome readers
//! is read; record counts are computed independently (serde_json over the whole small file, or
//! the upstream Flickr30k Entities parser run by the oracle Python), and spot values are checked
//! against values read by hand from the files.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use capflow::ingest::{read_input, Format, Row, VecSink};
use capflow::schema::{BoxXyxy, CaptionRow, DetectionRow, GroundingRow, SceneGraphRow};
use serde_json::Value;

fn read(format: Format, path: &Path) -> VecSink {
    let mut sink = VecSink::default();
    read_input(format, path, &mut sink).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let counts = sink.counts();
    assert_eq!(counts.accepted + counts.rejected, counts.read);
    sink
}

fn json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn len(v: &Value, key: &str) -> u64 {
    v[key].as_array().map_or(0, |a| a.len() as u64)
}

fn captions(sink: &VecSink) -> Vec<&CaptionRow> {
    sink.rows
        .iter()
        .filter_map(|r| match r {
            Row::Caption(c) => Some(c),
            _ => None,
        })
        .collect()
}

fn groundings(sink: &VecSink) -> Vec<&GroundingRow> {
    sink.rows
        .iter()
        .filter_map(|r| match r {
            Row::Grounding(g) => Some(g),
            _ => None,
        })
        .collect()
}

fn detections(sink: &VecSink) -> Vec<&DetectionRow> {
    sink.rows
        .iter()
        .filter_map(|r| match r {
            Row::Detection(d) => Some(d),
            _ => None,
        })
        .collect()
}

fn scene_graphs(sink: &VecSink) -> Vec<&SceneGraphRow> {
    sink.rows
        .iter()
        .filter_map(|r| match r {
            Row::SceneGraph(g) => Some(g),
            _ => None,
        })
        .collect()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

/// One phrase as the upstream parser reports it: caption id, sentence, chain id, phrase text,
/// token span, types.
type UpstreamPhrase = (String, String, String, String, i32, i32, Vec<String>);

/// Reader: `flickr30k-entities` on `flickr30k_entities/Sentences` (all 8 files).
#[test]
fn flickr_sentences_match_the_upstream_parser() {
    let Some(dir) = common::fixture("flickr30k_entities/Sentences") else {
        return;
    };
    let sink = read(Format::Flickr30kEntities, &dir);
    // Independent count: non-empty lines of every sentence file.
    let mut lines = 0u64;
    let mut markup = 0usize;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        lines += text.lines().filter(|l| !l.trim().is_empty()).count() as u64;
        markup += text.matches("[/EN#").count();
    }
    assert_eq!(lines, 40);
    assert_eq!(sink.counts().read, lines);
    // No fixture line is broken.
    assert!(sink.rejected.is_empty(), "{:?}", sink.rejected);
    assert_eq!(captions(&sink).len() as u64, lines);
    assert_eq!(groundings(&sink).len(), markup);

    // Hand-read: 36979 line 0.
    let first = captions(&sink)
        .into_iter()
        .find(|c| c.caption_id == "36979#0")
        .unwrap();
    assert_eq!(
        first.text,
        "A group of friends playing cards and trying to bluff each other into making a terrible mistake ."
    );
    assert_eq!(first.split, "unknown");
    let spans: Vec<(&str, &str, i32, i32, bool)> = groundings(&sink)
        .into_iter()
        .filter(|g| g.caption_id == "36979#0")
        .map(|g| {
            (
                g.phrase_id.as_str(),
                g.phrase.as_str(),
                g.token_start,
                g.token_end,
                g.not_visual,
            )
        })
        .collect();
    assert_eq!(
        spans,
        [
            ("137644", "A group of friends", 0, 4, false),
            ("137645", "cards", 5, 6, false),
            ("0", "each other", 10, 12, true),
            ("137650", "a terrible mistake", 14, 17, false),
        ]
    );
    let multi = groundings(&sink)
        .into_iter()
        .find(|g| g.phrase_id == "255545")
        .unwrap();
    assert_eq!(multi.phrase_types, ["bodyparts", "people"]);

    // The upstream parser (flickr30k_entities_utils.get_sentence_data) on every file.
    let Some(python) = common::oracle_python() else {
        return;
    };
    let utils = dir.parent().unwrap();
    let script = r#"
import json, os, sys
sys.path.insert(0, sys.argv[1])
from upstream_flickr30k_entities_utils import get_sentence_data
out = []
d = sys.argv[2]
for name in sorted(os.listdir(d)):
    for i, s in enumerate(get_sentence_data(os.path.join(d, name))):
        for p in s['phrases']:
            out.append([name[:-4] + '#' + str(i), s['sentence'], p['phrase_id'], p['phrase'],
                        p['first_word_index'], p['first_word_index'] + len(p['phrase'].split()),
                        p['phrase_type']])
print(json.dumps(out))
"#;
    let output = Command::new(python)
        .args(["-c", script])
        .arg(utils)
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let expected: Vec<UpstreamPhrase> = serde_json::from_slice(&output.stdout).unwrap();
    let text_of = |id: &str| {
        captions(&sink)
            .into_iter()
            .find(|c| c.caption_id == id)
            .map(|c| c.text.clone())
            .unwrap()
    };
    let mut ours: Vec<UpstreamPhrase> = groundings(&sink)
        .into_iter()
        .map(|g| {
            (
                g.caption_id.clone(),
                text_of(&g.caption_id),
                g.phrase_id.clone(),
                g.phrase.clone(),
                g.token_start,
                g.token_end,
                g.phrase_types.clone(),
            )
        })
        .collect();
    ours.sort();
    let mut expected = expected;
    expected.sort();
    assert_eq!(ours.len(), expected.len());
    assert_eq!(ours, expected);
}

/// A Flickr30k Entities root written by hand from the upstream parser's rules: annotation XML
/// joined onto the groundings, split lists, and one broken line and one broken XML file.
#[test]
fn flickr_root_joins_annotations_and_splits() {
    let Some(sentence) = common::fixture("flickr30k_entities/Sentences/36979.txt") else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let sentences = root.path().join("Sentences");
    let annotations = root.path().join("Annotations");
    std::fs::create_dir_all(&sentences).unwrap();
    std::fs::create_dir_all(&annotations).unwrap();
    std::fs::copy(&sentence, sentences.join("36979.txt")).unwrap();
    // A sentence file of our own whose line 2 is broken (nested markup) and line 3 blank.
    std::fs::write(
        sentences.join("900.txt"),
        "[/EN#5/people A man] sits .\n[/EN#5/people A [/EN#6/other man]] .\n\n[/EN#6/other A dog] .\n",
    )
    .unwrap();
    std::fs::write(root.path().join("train.txt"), "36979\n").unwrap();
    std::fs::write(root.path().join("test.txt"), "900\n").unwrap();
    let xml = r#"<annotation>
  <filename>36979.jpg</filename>
  <size><width>500</width><height>333</height><depth>3</depth></size>
  <object><name>137644</name><bndbox><xmin>10</xmin><ymin>20</ymin><xmax>110</xmax><ymax>220</ymax></bndbox></object>
  <object><name>137644</name><name>137650</name><bndbox><xmin>1</xmin><ymin>1</ymin><xmax>50</xmax><ymax>60</ymax></bndbox></object>
  <object><name>137645</name><nobndbox>1</nobndbox><scene>0</scene></object>
  <object><name>137647</name><nobndbox>0</nobndbox><scene>1</scene></object>
</annotation>
"#;
    std::fs::write(annotations.join("36979.xml"), xml).unwrap();
    // Broken: <xmax> is not a number.
    std::fs::write(
        annotations.join("900.xml"),
        "<annotation><size><width>5</width><height>5</height></size><object><name>5</name>\
         <bndbox><xmin>1</xmin><ymin>1</ymin><xmax>two</xmax><ymax>3</ymax></bndbox></object></annotation>",
    )
    .unwrap();

    let sink = read(Format::Flickr30kEntities, root.path());
    // Records: 2 annotation files + 5 lines of 36979 + 3 non-blank lines of 900.
    assert_eq!(sink.counts().read, 10);
    let rejected: Vec<(String, String)> = sink
        .rejected
        .iter()
        .map(|r| {
            (
                Path::new(&r.source_file)
                    .file_name()
                    .unwrap()
                    .to_string_lossy()
                    .into_owned(),
                r.record.clone(),
            )
        })
        .collect();
    assert_eq!(
        rejected,
        [
            ("900.xml".to_string(), "annotation file".to_string()),
            ("900.txt".to_string(), "line 2".to_string()),
        ]
    );
    assert!(sink.rejected[0].reason.contains("<xmax>"));
    assert!(sink.rejected[1].reason.contains("nested"));
    // 900's line 4 keeps caption index 2: blank lines are not captions, broken ones are.
    assert!(captions(&sink)
        .iter()
        .any(|c| c.caption_id == "900#2" && c.split == "test"));

    let image = sink
        .rows
        .iter()
        .find_map(|r| match r {
            Row::Image(i) => Some(i),
            _ => None,
        })
        .unwrap();
    assert_eq!(
        (
            image.image_id.as_str(),
            image.width,
            image.height,
            image.split.as_str()
        ),
        ("36979", Some(500), Some(333), "train")
    );
    let by_id = |caption: &str, id: &str| {
        groundings(&sink)
            .into_iter()
            .find(|g| g.caption_id == caption && g.phrase_id == id)
            .unwrap()
            .clone()
    };
    let group = by_id("36979#0", "137644");
    assert_eq!(
        group.boxes,
        [
            BoxXyxy::new(9.0, 19.0, 110.0, 220.0),
            BoxXyxy::new(0.0, 0.0, 50.0, 60.0)
        ]
    );
    assert_eq!(
        by_id("36979#0", "137650").boxes,
        [BoxXyxy::new(0.0, 0.0, 50.0, 60.0)]
    );
    let cards = by_id("36979#0", "137645");
    assert!(cards.no_box && !cards.is_scene && cards.boxes.is_empty());
    let poker = by_id("36979#4", "137647");
    assert!(poker.is_scene && !poker.no_box);

    // The upstream get_annotations on the same file: its inclusive corners plus one on the far
    // edge are our boxes.
    let Some(python) = common::oracle_python() else {
        return;
    };
    let script = r#"
import json, sys
sys.path.insert(0, sys.argv[1])
from upstream_flickr30k_entities_utils import get_annotations
print(json.dumps(get_annotations(sys.argv[2])))
"#;
    let output = Command::new(python)
        .args(["-c", script])
        .arg(sentence.parent().unwrap().parent().unwrap())
        .arg(annotations.join("36979.xml"))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let upstream: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(upstream["width"], 500);
    for (id, boxes) in upstream["boxes"].as_object().unwrap() {
        let expected: Vec<BoxXyxy> = boxes
            .as_array()
            .unwrap()
            .iter()
            .map(|b| {
                let c: Vec<f64> = b
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_f64().unwrap())
                    .collect();
                BoxXyxy::new(c[0], c[1], c[2] + 1.0, c[3] + 1.0)
            })
            .collect();
        let ours = groundings(&sink)
            .into_iter()
            .find(|g| &g.phrase_id == id)
            .unwrap();
        assert_eq!(ours.boxes, expected, "chain {id}");
    }
    assert_eq!(upstream["nobox"], serde_json::json!(["137645"]));
    assert_eq!(upstream["scene"], serde_json::json!(["137647"]));
}

/// Reader: `coco-captions` on both `coco/minyus_captions_*.json` files and the results-layout
/// `coco/captions_val2014_fakecap_results.json`.
#[test]
fn coco_captions_fixtures() {
    let Some(dir) = common::fixture("coco") else {
        return;
    };
    for (name, split) in [
        ("minyus_captions_val2014.json_samples.json", "validation"),
        ("minyus_captions_val2017.json_samples.json", "validation"),
    ] {
        let path = dir.join(name);
        let doc = json(&path);
        let sink = read(Format::CocoCaptions, &path);
        assert_eq!(
            sink.counts().read,
            len(&doc, "images") + len(&doc, "annotations")
        );
        assert!(sink.rejected.is_empty(), "{:?}", sink.rejected);
        let caps = captions(&sink);
        assert_eq!(caps.len() as u64, len(&doc, "annotations"));
        assert!(caps.iter().all(|c| c.split == split && c.dataset == "coco"));
        // Annotations keep their own ids and the caption text, trimmed.
        let first = &doc["annotations"][0];
        assert_eq!(caps[0].caption_id, first["id"].to_string());
        assert_eq!(caps[0].text, first["caption"].as_str().unwrap().trim());
    }
    let path = dir.join("minyus_captions_val2014.json_samples.json");
    let sink = read(Format::CocoCaptions, &path);
    // Hand-read: the first image and the first annotation.
    let Row::Image(image) = &sink.rows[0] else {
        panic!("images come first in the file")
    };
    assert_eq!(
        (image.image_id.as_str(), image.width, image.height),
        ("391895", Some(640), Some(360))
    );
    assert_eq!(
        image.url.as_deref(),
        Some("http://images.cocodataset.org/val2014/COCO_val2014_000000391895.jpg")
    );
    let c = captions(&sink)[0];
    assert_eq!(
        (c.image_id.as_str(), c.caption_id.as_str(), c.text.as_str()),
        (
            "203564",
            "37",
            "A bicycle replica with a clock as the front wheel."
        )
    );
    // caption_index runs per image in file order.
    let doc = json(&path);
    let mut seen = std::collections::HashMap::<String, i32>::new();
    for (c, a) in captions(&sink)
        .iter()
        .zip(doc["annotations"].as_array().unwrap())
    {
        let n = seen.entry(a["image_id"].to_string()).or_insert(0);
        assert_eq!(c.caption_index, *n);
        *n += 1;
    }

    let results = dir.join("captions_val2014_fakecap_results.json");
    let doc = json(&results);
    let sink = read(Format::CocoCaptions, &results);
    assert_eq!(sink.counts().read, doc.as_array().unwrap().len() as u64);
    assert!(sink.rejected.is_empty());
}

/// Reader: `coco-instances` on `coco/minyus_instances_val2014.json_samples.json` (categories
/// come after annotations in this file, as in the official ones).
#[test]
fn coco_instances_fixture() {
    let Some(path) = common::fixture("coco/minyus_instances_val2014.json_samples.json") else {
        return;
    };
    let doc = json(&path);
    let sink = read(Format::CocoInstances, &path);
    let records = len(&doc, "images") + len(&doc, "annotations") + len(&doc, "categories");
    assert_eq!(records, 280);
    assert_eq!(sink.counts().read, records);
    // Hand-read: one annotation of the sample covers no pixels (id 918, bbox
    // [296.65, 388.33, 1.03, 0.0], area 0.0); boxes of zero width or height are rejected.
    let degenerate = doc["annotations"]
        .as_array()
        .unwrap()
        .iter()
        .position(|a| a["id"] == 918)
        .unwrap();
    let rejected: Vec<(&str, &str)> = sink
        .rejected
        .iter()
        .map(|r| (r.record.as_str(), r.reason.as_str()))
        .collect();
    assert_eq!(rejected.len(), 1, "{rejected:?}");
    assert_eq!(rejected[0].0, format!("annotations[{degenerate}]"));
    assert!(
        rejected[0].1.contains("zero width or height"),
        "{rejected:?}"
    );
    let dets = detections(&sink);
    assert_eq!(dets.len() as u64, len(&doc, "annotations") - 1);
    // Hand-read: annotation 156, category 58 "hot dog", bbox [199.84, 200.46, 77.71, 70.88].
    let d = dets.iter().find(|d| d.detection_id == "156").unwrap();
    assert_eq!(
        (d.image_id.as_str(), d.label.as_str()),
        ("558840", "hot dog")
    );
    assert!(close(d.bbox.x1, 199.84) && close(d.bbox.y1, 200.46));
    assert!(close(d.bbox.x2, 277.55) && close(d.bbox.y2, 271.34));
    assert!(d.score.is_none() && d.attributes.is_empty());
    let crowd = doc["annotations"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["iscrowd"] == 1)
        .count();
    assert_eq!(
        dets.iter().filter(|d| d.attributes == ["crowd"]).count(),
        crowd
    );
}

/// Reader: `coco-entities` on `coco_entities/coco_entities_record_264169_reconstructed.json`.
#[test]
fn coco_entities_fixture() {
    let Some(path) =
        common::fixture("coco_entities/coco_entities_record_264169_reconstructed.json")
    else {
        return;
    };
    let doc = json(&path);
    let records: usize = doc
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_object().unwrap().len())
        .sum();
    let sink = read(Format::CocoEntities, &path);
    assert_eq!(sink.counts().read, records as u64);
    assert!(sink.rejected.is_empty(), "{:?}", sink.rejected);
    let c = captions(&sink)[0];
    assert_eq!(c.text, "a woman in sunglasses riding a horse on a beach");
    assert_eq!(c.caption_id, "264169#0");
    // Hand-read from det_sequences: woman woman _ sunglasses _ horse horse _ beach beach.
    let runs: Vec<(&str, &str, i32, i32, usize)> = groundings(&sink)
        .into_iter()
        .map(|g| {
            (
                g.phrase_id.as_str(),
                g.phrase.as_str(),
                g.token_start,
                g.token_end,
                g.boxes.len(),
            )
        })
        .collect();
    assert_eq!(
        runs,
        [
            ("woman", "a woman", 0, 2, 3),
            ("sunglasses", "sunglasses", 3, 4, 1),
            ("horse", "a horse", 5, 7, 2),
            ("beach", "a beach", 8, 10, 1),
        ]
    );
    let dets = detections(&sink);
    assert_eq!(dets.len(), 7);
    let beach = dets.iter().find(|d| d.detection_id == "1").unwrap();
    assert_eq!(beach.label, "beach");
    assert_eq!(
        beach.bbox,
        BoxXyxy::new(0.0, 148.80857849121094, 345.5086669921875, 426.288330078125)
    );
}

fn vg(name: &str) -> Option<PathBuf> {
    common::fixture(&format!("visual_genome/{name}"))
}

/// Reader: `visual-genome` on all five `visual_genome/*` files.
#[test]
fn visual_genome_fixtures() {
    let Some(kgtk) = vg("kgtk_vg10_scene_graphs.json") else {
        return;
    };
    // Scene graphs (kgtk vg10 and minyus samples): one record per image, no dangling ids.
    for (name, images, objects, relationships) in [
        ("kgtk_vg10_scene_graphs.json", 10, 376, 423),
        ("minyus_scene_graphs.json_samples.json", 100, 3671, 2615),
    ] {
        let path = vg(name).unwrap();
        let doc = json(&path);
        let list = doc.as_array().unwrap();
        let count =
            |key: &str| -> usize { list.iter().map(|i| i[key].as_array().unwrap().len()).sum() };
        assert_eq!(
            (list.len(), count("objects"), count("relationships")),
            (images, objects, relationships)
        );
        let sink = read(Format::VisualGenome, &path);
        assert_eq!(sink.counts().read, images as u64);
        assert!(sink.rejected.is_empty(), "{:?}", sink.rejected);
        let graphs = scene_graphs(&sink);
        assert_eq!(
            graphs.iter().map(|g| g.objects.len()).sum::<usize>(),
            objects
        );
        assert_eq!(
            graphs.iter().map(|g| g.relationships.len()).sum::<usize>(),
            relationships
        );
        // Sizes come from minyus_image_data.json_samples.json beside it (image 1: 800 x 600).
        assert_eq!((graphs[0].width, graphs[0].height), (Some(800), Some(600)));
    }
    // Hand-read: image 1's first object is clock 1058498 at x 421, y 91, w 79, h 339.
    let sink = read(Format::VisualGenome, &kgtk);
    let clock = &scene_graphs(&sink)[0].objects[0];
    assert_eq!(
        (clock.object_id, clock.names.clone()),
        (1058498, vec!["clock".to_string()])
    );
    assert_eq!(clock.bbox, BoxXyxy::new(421.0, 91.0, 500.0, 430.0));
    assert_eq!(clock.attributes, ["green", "tall"]);

    // relationships.json layout: objects come from the embedded subjects and objects.
    let path = vg("minyus_relationships.json_samples.json").unwrap();
    let doc = json(&path);
    let list = doc.as_array().unwrap();
    let sink = read(Format::VisualGenome, &path);
    assert_eq!(sink.counts().read, list.len() as u64);
    assert!(sink.rejected.is_empty(), "{:?}", sink.rejected);
    let graphs = scene_graphs(&sink);
    for (g, raw) in graphs.iter().zip(list) {
        let rels = raw["relationships"].as_array().unwrap();
        assert_eq!(g.relationships.len(), rels.len());
        let mut ids: Vec<i64> = rels
            .iter()
            .flat_map(|r| {
                [
                    r["subject"]["object_id"].as_i64().unwrap(),
                    r["object"]["object_id"].as_i64().unwrap(),
                ]
            })
            .collect();
        ids.sort();
        ids.dedup();
        assert_eq!(g.objects.len(), ids.len());
    }

    // Region descriptions: one caption per region.
    let path = vg("minyus_region_descriptions.json_samples.json").unwrap();
    let doc = json(&path);
    let regions: usize = doc
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["regions"].as_array().unwrap().len())
        .sum();
    let sink = read(Format::VisualGenome, &path);
    assert_eq!(sink.counts().read, regions as u64);
    assert!(sink.rejected.is_empty(), "{:?}", sink.rejected);
    let c = captions(&sink)[0];
    assert_eq!(
        (c.image_id.as_str(), c.caption_id.as_str(), c.text.as_str()),
        ("1", "1382", "the clock is green in colour")
    );

    // Image data alone: one image row per element.
    let path = vg("minyus_image_data.json_samples.json").unwrap();
    let doc = json(&path);
    let sink = read(Format::VisualGenome, &path);
    assert_eq!(sink.counts().read, doc.as_array().unwrap().len() as u64);
    assert!(sink.rejected.is_empty());
    let Row::Image(first) = &sink.rows[0] else {
        panic!("expected an image row")
    };
    assert_eq!(
        (first.image_id.as_str(), first.width, first.height),
        ("1", Some(800), Some(600))
    );
}
