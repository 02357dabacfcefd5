//! Hugging Face `datasets` loads a capflow dataset through its card: every config the card
//! names, with the manifest's row counts, splits named `train`/`validation`/`test` only, and
//! again after a rerun into the same directory (a second version beside the first). The card's
//! metadata is read back with `huggingface_hub`'s own `DatasetCard`.
//!
//! Needs the oracle virtualenv with `datasets` (scripts/setup-oracles.sh); nothing is installed
//! or downloaded at run time (the Hugging Face cache is a temporary directory, offline).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use capflow::export::{read_manifest, Manifest};
use capflow::schema::TableKind;
use serde_json::Value;

mod common;

const ORACLE: &str = r#"
import json, os, sys
import datasets
from huggingface_hub import DatasetCard

datasets.disable_progress_bars()
root = sys.argv[1]
out = {"configs": datasets.get_dataset_config_names(root), "rows": {}, "columns": {}}
for name in out["configs"]:
    loaded = datasets.load_dataset(root, name)
    out["rows"][name] = {split: ds.num_rows for split, ds in loaded.items()}
    out["columns"][name] = sorted({c for ds in loaded.values() for c in ds.column_names})
loaded = datasets.load_dataset(root)
out["default"] = {split: ds.num_rows for split, ds in loaded.items()}
out["card"] = DatasetCard.load(os.path.join(root, "README.md")).data.to_dict()
print(json.dumps(out))
"#;

/// What `datasets` and `huggingface_hub` make of the dataset at `dir`.
fn load(python: &Path, dir: &Path, cache: &Path) -> Value {
    let output = common::hf_offline(Command::new(python).args(["-c", ORACLE]).arg(dir), cache)
        .env("HF_HUB_DISABLE_TELEMETRY", "1")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "datasets failed on {}:\n{}",
        dir.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8(output.stdout).unwrap();
    serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap()
}

/// The configs and split row counts the card should give, from the manifest alone: a config
/// per table with rows; the samples table by its splits, every other table as `datasets`'
/// default split `train`.
fn expected_configs(manifest: &Manifest) -> BTreeMap<String, BTreeMap<String, u64>> {
    let mut expected = BTreeMap::new();
    for kind in TableKind::ALL {
        let rows = manifest.table_rows(kind);
        if rows == 0 {
            continue;
        }
        let splits: BTreeMap<String, u64> = if kind == TableKind::Samples {
            manifest.tables[kind.name()]
                .splits
                .clone()
                .into_iter()
                .collect()
        } else {
            [("train".to_string(), rows)].into()
        };
        expected.insert(kind.name().to_string(), splits);
    }
    expected
}

fn check(python: &Path, dir: &Path, cache: &Path, version: u64) {
    let manifest = read_manifest(dir).unwrap();
    assert_eq!(manifest.version, version);
    let loaded = load(python, dir, cache);

    // The sample data's split lists give every split images: the samples come in all three,
    // named as `datasets` names them.
    let sample_splits: Vec<&String> = manifest.tables["samples"].splits.keys().collect();
    assert_eq!(sample_splits, ["test", "train", "validation"]);

    let expected = expected_configs(&manifest);
    let configs: Vec<String> = loaded["configs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap().to_string())
        .collect();
    let mut sorted = configs.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        expected.keys().cloned().collect::<Vec<_>>(),
        "version {version}"
    );
    // Tables without rows (this recipe rejects nothing) have no config.
    assert_eq!(manifest.table_rows(TableKind::Rejected), 0);
    assert!(!configs.iter().any(|c| c == "rejected"));
    for (config, splits) in &expected {
        let got: BTreeMap<String, u64> =
            serde_json::from_value(loaded["rows"][config].clone()).unwrap();
        assert_eq!(&got, splits, "config {config}, version {version}");
        for split in got.keys() {
            assert!(
                ["train", "validation", "test"].contains(&split.as_str()),
                "config {config} has split {split}"
            );
        }
        // The columns are the table's.
        let table = TableKind::from_name(config).unwrap();
        let mut columns: Vec<String> = table
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        columns.sort();
        assert_eq!(
            loaded["columns"][config],
            serde_json::json!(columns),
            "{config}"
        );
    }
    // Loading without a config gives the samples.
    let default: BTreeMap<String, u64> = serde_json::from_value(loaded["default"].clone()).unwrap();
    assert_eq!(default, expected["samples"]);

    // The card's metadata as huggingface_hub reads it. The recipe names no licence; its inputs
    // are in the Flickr30k Entities layout; fewer than 1,000 samples.
    let card = &loaded["card"];
    assert!(manifest.table_rows(TableKind::Samples) < 1_000);
    assert_eq!(card["license"], "unknown");
    assert_eq!(card["language"], serde_json::json!(["en"]));
    assert_eq!(
        card["task_categories"],
        serde_json::json!(["image-to-text"])
    );
    assert_eq!(card["size_categories"], serde_json::json!(["n<1K"]));
    assert_eq!(card["source_datasets"], serde_json::json!(["flickr30k"]));
}

fn run(input: &Path, out: &Path, state: &Path) {
    let output = Command::new(common::capflow_bin())
        .current_dir(common::repo_root())
        .args(["run", "dataflows/ssa-flickr30k.toml", "--input"])
        .arg(input)
        .arg("--out")
        .arg(out)
        .arg("--state")
        .arg(state)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "capflow run failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn datasets_loads_every_config_of_the_card_before_and_after_a_rerun() {
    let Some(python) = common::oracle_python_with("datasets, huggingface_hub") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let (input, out, state, cache) = (
        tmp.path().join("input"),
        tmp.path().join("out"),
        tmp.path().join("state"),
        tmp.path().join("hf-cache"),
    );
    // Version 1 from 17 of the 20 images, version 2 from all of them (an incremental rerun:
    // the new images' chunks are rewritten, the rest carried).
    common::flickr_sample_inputs(&input, 1_000_018);
    run(&input, &out, &state);
    check(&python, &out, &cache, 1);
    let first = read_manifest(&out).unwrap();

    std::fs::remove_dir_all(&input).unwrap();
    common::flickr_sample_inputs(&input, u64::MAX);
    run(&input, &out, &state);
    check(&python, &out, &cache, 2);
    let second = read_manifest(&out).unwrap();
    assert!(
        second.table_rows(TableKind::Samples) > first.table_rows(TableKind::Samples),
        "the rerun added the new images' samples"
    );
    // The first version's shards stay in `data/<table>/` beside the second's; the card names
    // only the second's, so `datasets` counts no row twice (checked above).
    let data_files = common::files_under(&out.join("data"))
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "parquet"))
        .filter(|p| !p.to_string_lossy().contains("/_change_data/"))
        .count();
    assert!(
        data_files > second.files.len(),
        "{data_files} shards in data/, {} in the manifest",
        second.files.len()
    );
}
