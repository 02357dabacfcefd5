//! Detection post-processing against real torchvision: `tests/data/nms_torchvision.json` holds
//! `torchvision.ops.nms` keep lists on random boxes (tied scores, integer corners, duplicate and
//! empty boxes) and the keep lists of ml-gbc's GBC selection steps run with torch/torchvision,
//! written by `tests/oracles/nms_torchvision_gen.py` (torch 2.11.0, torchvision 0.26.0).

use capflow::augment::detections::{
    nms, select_boxes, ContainedBoxes, DetectionFilter, Multiplicity, ScoredBox,
};
use capflow::schema::BoxXyxy;
use serde_json::Value;

fn expectations() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/nms_torchvision.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn boxes_of(case: &Value) -> Vec<BoxXyxy> {
    case["boxes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            let c: Vec<f64> = b
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap())
                .collect();
            BoxXyxy::new(c[0], c[1], c[2], c[3])
        })
        .collect()
}

fn f64s(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

fn usizes(v: &Value) -> Vec<usize> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as usize)
        .collect()
}

#[test]
fn nms_keeps_what_torchvision_keeps_in_its_order() {
    let data = expectations();
    let cases = data["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 200);
    let mut nontrivial = 0;
    for (i, case) in cases.iter().enumerate() {
        let boxes = boxes_of(case);
        let scores = f64s(&case["scores"]);
        let threshold = case["iou_threshold"].as_f64().unwrap();
        let expected = usizes(&case["keep"]);
        if expected.len() < boxes.len() {
            nontrivial += 1;
        }
        assert_eq!(
            nms(&boxes, &scores, threshold),
            expected,
            "case {i}: {} boxes, IoU threshold {threshold}",
            boxes.len()
        );
    }
    // The cases must exercise suppression, not only pass everything through.
    assert!(nontrivial >= 80, "{nontrivial}");
}

#[test]
fn gbc_selection_matches_ml_gbc_steps_run_with_torchvision() {
    let data = expectations();
    // The oracle runs ml-gbc's `DetectionAction` settings: score 0.35 (the paper and the
    // default say 0.05) and the entity-crop area limit 0.8.
    assert_eq!(DetectionFilter::default().score_threshold, Some(0.05));
    let filter = DetectionFilter {
        score_threshold: Some(0.35),
        max_rel_area: Some(0.8),
        ..DetectionFilter::default()
    };
    assert_eq!(filter.contained, ContainedBoxes::RemoveContaining);
    let cases = data["gbc_pipeline"].as_array().unwrap();
    assert!(cases.len() >= 50);
    for (i, case) in cases.iter().enumerate() {
        let boxes: Vec<ScoredBox> = boxes_of(case)
            .into_iter()
            .zip(f64s(&case["scores"]))
            .map(|(bbox, score)| ScoredBox { bbox, score })
            .collect();
        let size = (
            case["width"].as_f64().unwrap(),
            case["height"].as_f64().unwrap(),
        );
        let multiplicity = if case["single"].as_bool().unwrap() {
            Multiplicity::Single
        } else {
            Multiplicity::Multiple
        };
        assert_eq!(
            select_boxes(&boxes, Some(size), multiplicity, &filter),
            usizes(&case["keep"]),
            "pipeline case {i}"
        );
    }
}
