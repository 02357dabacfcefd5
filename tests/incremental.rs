//! Incremental reruns with `--state`: half the inputs, then all of them, must give the bytes of
//! a fresh full run, for every recipe; removing captions retracts exactly their images' samples.
//!
//! The inputs are copies of the embedded sample data (images 1000001–1000020) with a subset of
//! the images, made per format by image id: Flickr30k Entities files, PENMAN graphs (`::id
//! <image>.<n>`), COCO captions/instances/entities, Visual Genome and GBC records.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use capflow::export::{read_changelog, read_manifest, read_manifest_version, read_table};
use capflow::schema::{batch_to_rows, SampleRow, TableKind};
use serde_json::Value;

mod common;

use common::data_files;

fn capflow(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_capflow"))
        .args(args)
        .current_dir(common::repo_root())
        .output()
        .expect("run capflow")
}

fn run_ok(args: &[&str]) -> String {
    let out = capflow(args);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "capflow {args:?} failed:\n{stderr}");
    stderr
}

fn examples() -> PathBuf {
    common::repo_root().join("examples/data")
}

/// The image id of a GBC JSONL record (the reader's rule: the image file's stem).
fn gbc_image(line: &str) -> u64 {
    let record: Value = serde_json::from_str(line).unwrap();
    let url = record["img_url"]
        .as_str()
        .or(record["img_path"].as_str())
        .unwrap_or_default();
    let stem = url.rsplit('/').next().unwrap_or_default();
    let stem = stem.split('.').next().unwrap_or_default();
    stem.parse().unwrap_or(0)
}

fn write_json(path: &Path, value: &Value) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, serde_json::to_vec(value).unwrap()).unwrap();
}

fn filter_array(value: &mut Value, key: &str, id_field: &str, keep: &dyn Fn(u64) -> bool) {
    if let Some(items) = value[key].as_array_mut() {
        items.retain(|item| keep(item[id_field].as_u64().unwrap_or(0)));
    }
}

/// Copies the embedded sample data to `dst` (replacing what is there), keeping only the images
/// `keep` accepts; captions of the images in `drop_first_caption` lose their first caption.
fn sample_data(dst: &Path, keep: &dyn Fn(u64) -> bool, drop_first_caption: &[u64]) {
    let _ = std::fs::remove_dir_all(dst);
    let src = examples();
    // Flickr30k Entities: one sentence and one annotation file per image.
    for sub in ["Sentences", "Annotations"] {
        let to = dst.join("flickr30k_entities").join(sub);
        std::fs::create_dir_all(&to).unwrap();
        for entry in std::fs::read_dir(src.join("flickr30k_entities").join(sub)).unwrap() {
            let path = entry.unwrap().path();
            let stem = path.file_stem().unwrap().to_str().unwrap().to_string();
            let id: u64 = stem.parse().unwrap();
            if !keep(id) {
                continue;
            }
            let mut text = std::fs::read_to_string(&path).unwrap();
            if sub == "Sentences" && drop_first_caption.contains(&id) {
                text = text.lines().skip(1).map(|l| format!("{l}\n")).collect();
            }
            std::fs::write(to.join(path.file_name().unwrap()), text).unwrap();
        }
    }
    for split in ["train.txt", "val.txt", "test.txt"] {
        let text = std::fs::read_to_string(src.join("flickr30k_entities").join(split)).unwrap();
        let kept: String = text
            .lines()
            .filter(|l| l.trim().parse().is_ok_and(keep))
            .map(|l| format!("{l}\n"))
            .collect();
        std::fs::write(dst.join("flickr30k_entities").join(split), kept).unwrap();
    }
    // PENMAN: blocks separated by blank lines; a graph's id is `<image>.<caption index>`.
    for amr in ["amr/captions.amr", "coco/captions.amr"] {
        let text = std::fs::read_to_string(src.join(amr)).unwrap();
        let kept: Vec<&str> = text
            .split("\n\n")
            .filter(|block| {
                let id = block
                    .lines()
                    .find_map(|l| l.strip_prefix("# ::id "))
                    .map(|id| id.split('.').next().unwrap_or_default());
                match id {
                    None => true,
                    Some(image) => image.parse().is_ok_and(keep),
                }
            })
            .collect();
        let path = dst.join(amr);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, kept.join("\n\n")).unwrap();
    }
    // COCO captions and instances.
    for json in ["coco/captions.json", "detections/instances.json"] {
        let mut value: Value =
            serde_json::from_slice(&std::fs::read(src.join(json)).unwrap()).unwrap();
        filter_array(&mut value, "images", "id", keep);
        filter_array(&mut value, "annotations", "image_id", keep);
        write_json(&dst.join(json), &value);
    }
    // COCO Entities: an object keyed by image id.
    let mut entities: Value =
        serde_json::from_slice(&std::fs::read(src.join("coco/coco_entities.json")).unwrap())
            .unwrap();
    if let Some(map) = entities.as_object_mut() {
        map.retain(|id, _| id.parse().is_ok_and(keep));
    }
    write_json(&dst.join("coco/coco_entities.json"), &entities);
    // Visual Genome.
    for json in ["scene_graphs.json", "image_data.json"] {
        let mut value: Value =
            serde_json::from_slice(&std::fs::read(src.join("visual_genome").join(json)).unwrap())
                .unwrap();
        if let Some(items) = value.as_array_mut() {
            items.retain(|item| keep(item["image_id"].as_u64().unwrap_or(0)));
        }
        write_json(&dst.join("visual_genome").join(json), &value);
    }
    // GBC JSONL.
    let text = std::fs::read_to_string(src.join("gbc/sample_gbc.jsonl")).unwrap();
    let gbc_ids: Vec<u64> = text.lines().map(gbc_image).collect();
    let kept: String = text
        .lines()
        .enumerate()
        // GBC images have their own ids: keep the first half of the records for "half".
        .filter(|(i, _)| keep(1_000_001 + (*i as u64) * 20 / gbc_ids.len().max(1) as u64))
        .map(|(_, l)| format!("{l}\n"))
        .collect();
    std::fs::create_dir_all(dst.join("gbc")).unwrap();
    std::fs::write(dst.join("gbc/sample_gbc.jsonl"), kept).unwrap();
}

fn samples(dir: &Path) -> Vec<SampleRow> {
    let mut rows = Vec::new();
    for batch in read_table(dir, TableKind::Samples).unwrap() {
        rows.extend(batch_to_rows::<SampleRow>(&batch.unwrap()).unwrap());
    }
    rows
}

/// A dataset kept up to date with `--state` (`<name>-inc`, `<name>-state`) and the fresh full
/// runs it is compared with (`<name>-fresh`), under one temporary directory.
struct Runs {
    out: PathBuf,
    state: PathBuf,
    fresh: PathBuf,
}

impl Runs {
    fn new(tmp: &Path, name: &str) -> Runs {
        Runs {
            out: tmp.join(format!("{name}-inc")),
            state: tmp.join(format!("{name}-state")),
            fresh: tmp.join(format!("{name}-fresh")),
        }
    }

    /// Runs `spec` on `input` with the state into the kept dataset; returns the log.
    fn update(&self, spec: &Path, input: &Path) -> String {
        self.update_with(spec, input, &[])
    }

    /// [`update`](Self::update) with more flags.
    fn update_with(&self, spec: &Path, input: &Path, flags: &[&str]) -> String {
        let mut args = vec![
            "run",
            spec.to_str().unwrap(),
            "--input",
            input.to_str().unwrap(),
            "--out",
            self.out.to_str().unwrap(),
            "--state",
            self.state.to_str().unwrap(),
        ];
        args.extend(flags);
        run_ok(&args)
    }

    /// Runs `spec` on `input` afresh (replacing the last fresh run) and returns the data files
    /// of the kept dataset and of the fresh one.
    fn against_fresh(
        &self,
        spec: &Path,
        input: &Path,
    ) -> (BTreeMap<String, Vec<u8>>, BTreeMap<String, Vec<u8>>) {
        self.against_fresh_with(spec, input, None)
    }

    /// [`against_fresh`](Self::against_fresh), the fresh run with the models kept in the
    /// state directory `models` when given.
    fn against_fresh_with(
        &self,
        spec: &Path,
        input: &Path,
        models: Option<&str>,
    ) -> (BTreeMap<String, Vec<u8>>, BTreeMap<String, Vec<u8>>) {
        let _ = std::fs::remove_dir_all(&self.fresh);
        let mut args = vec![
            "run",
            spec.to_str().unwrap(),
            "--input",
            input.to_str().unwrap(),
            "--out",
            self.fresh.to_str().unwrap(),
        ];
        if let Some(models) = models {
            args.extend(["--models", models]);
        }
        run_ok(&args);
        (data_files(&self.out), data_files(&self.fresh))
    }
}

const RECIPES: [&str; 7] = [
    "sample",
    "ssa-flickr30k",
    "ssa-coco",
    "clid-vg",
    "gbc",
    "relatedness",
    "cutswap",
];

fn first_half(id: u64) -> bool {
    id <= 1_000_010
}

#[test]
fn half_then_all_with_state_equals_a_fresh_run_with_the_same_models_for_every_recipe() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("input");
    for recipe in RECIPES {
        let spec = common::repo_root().join(format!("dataflows/{recipe}.toml"));
        let runs = Runs::new(tmp.path(), recipe);
        sample_data(&input, &first_half, &[]);
        runs.update(&spec, &input);
        sample_data(&input, &|_| true, &[]);
        let log = runs.update(&spec, &input);
        // Recipes whose models learn from the inputs keep the models fitted on the first half
        // (the state's artifact): a fresh run with those models writes the same bytes.
        let learns = !["sample", "clid-vg", "gbc"].contains(&recipe);
        let models = learns.then(|| runs.state.to_str().unwrap().to_string());
        let (incremental, full) = runs.against_fresh_with(&spec, &input, models.as_deref());
        assert_eq!(
            incremental.keys().collect::<Vec<_>>(),
            full.keys().collect::<Vec<_>>(),
            "{recipe}: file lists differ"
        );
        assert!(incremental == full, "{recipe}: bytes differ");
        assert_eq!(read_manifest(&runs.out).unwrap().version, 2, "{recipe}");
        // The first half is carried: the rerun computes only images it had not seen.
        let carried = log
            .split("carrying ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .and_then(|n| n.parse::<usize>().ok())
            .unwrap_or(0);
        assert!(carried > 0, "{recipe}: {log}");
        assert!(log.contains("retracting 0 removed"), "{recipe}: {log}");
        assert_eq!(runs.state.join("models.json").exists(), learns, "{recipe}");
    }
}

/// The shipped SSA recipe fits its models on its own inputs. With `--state` the first run keeps
/// them in the state and records the input pieces, so one added caption is read and recomputed
/// alone; the rerun writes what a
/// fresh run with those models (`--models STATE`) writes on the same inputs. `--refit` fits them
/// on all the inputs again: every image is computed, and the dataset is a fresh full run's.
#[test]
fn an_ssa_rerun_keeps_the_fitted_models_and_computes_only_the_changed_image() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = common::repo_root().join("dataflows/ssa-flickr30k.toml");
    let input = tmp.path().join("input");
    let runs = Runs::new(tmp.path(), "ssa");
    sample_data(&input, &|_| true, &[]);
    // Files written within the timestamp window of a read are read again by the next run.
    age(&input);
    runs.update(&spec, &input);
    let info: Value =
        serde_json::from_slice(&std::fs::read(runs.state.join("models.json")).unwrap()).unwrap();
    assert_eq!(info["learned_from"], 100, "{info}");
    // The manifest names the models the version used: fitted on its inputs, kept in the state.
    let manifest = |runs: &Runs| -> Value {
        serde_json::from_slice(&std::fs::read(runs.out.join("manifest.json")).unwrap()).unwrap()
    };
    let first_id = info["id"].as_str().unwrap().to_string();
    assert!(runs.state.join(format!("models/{first_id}.bin")).is_file());
    let v1 = manifest(&runs);
    assert_eq!(v1["models"]["source"], "fitted on the inputs", "{v1}");
    assert_eq!(v1["models"]["id"], first_id.as_str(), "{v1}");

    let sentences = input.join("flickr30k_entities/Sentences/1000001.txt");
    let mut text = std::fs::read_to_string(&sentences).unwrap();
    text.push_str("[/EN#1001/people A young cyclist] rides [/EN#1002/vehicles a black bicycle] in the sun .\n");
    std::fs::write(&sentences, text).unwrap();
    let log = runs.update(&spec, &input);
    // The first run recorded the input pieces: the rerun reads the changed file alone.
    assert!(
        log.contains("read 1 new or changed of 21 input pieces"),
        "{log}"
    );
    assert!(
        log.contains(
            "computing 1 new or changed images, retracting 0 removed, carrying 19 unchanged"
        ),
        "{log}"
    );
    let v2 = manifest(&runs);
    assert_eq!(v2["models"]["source"], "kept from an earlier fit", "{v2}");
    assert_eq!(v2["models"]["id"], first_id.as_str(), "{v2}");
    assert_eq!(v2["history"][0]["models"], v1["models"], "{v2}");
    let changes = read_changelog(&runs.out.join("changes/v2.parquet")).unwrap();
    assert!(!changes.is_empty());
    assert!(
        changes.iter().all(|(s, _)| s.image_id == "1000001"),
        "{changes:?}"
    );
    let state = runs.state.to_str().unwrap();
    let (incremental, fresh) = runs.against_fresh_with(&spec, &input, Some(state));
    assert!(
        incremental == fresh,
        "the rerun differs from a fresh run with its models"
    );

    let log = run_ok(&[
        "run",
        spec.to_str().unwrap(),
        "--input",
        input.to_str().unwrap(),
        "--out",
        runs.out.to_str().unwrap(),
        "--state",
        state,
        "--refit",
    ]);
    // The refit replays the quality filter of the images whose merge the new models leave as
    // it was, from what the state keeps of them, and computes the others.
    assert!(log.contains("fitted the models on 101 captions"), "{log}");
    let v3 = manifest(&runs);
    let stage = |name: &str| {
        v3["stages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no stage {name}: {v3}"))
    };
    let replayed = stage("replay")["rows_in"].as_u64().unwrap();
    let computed = stage("gather")["rows_out"].as_u64().unwrap();
    assert_eq!(replayed + computed, 20, "{v3}");
    assert!(replayed > 0, "{v3}");
    let refit_id = v3["models"]["id"].as_str().unwrap();
    assert_eq!(v3["models"]["source"], "fitted on the inputs", "{v3}");
    assert_ne!(refit_id, first_id, "{v3}");
    assert!(runs.state.join(format!("models/{refit_id}.bin")).is_file());
    let (refitted, full) = runs.against_fresh_with(&spec, &input, None);
    assert!(refitted == full, "--refit differs from a fresh full run");
    let artifacts = std::fs::read_dir(runs.state.join("models"))
        .unwrap()
        .count();
    assert_eq!(artifacts, 2);
}

/// A `--refit` after new images arrive fits the models on every caption and replays the quality
/// filter of the images whose merge the new models leave as it was (docs/decisions/refit-replay.md):
/// the dataset is a fresh full run's, byte for byte. An image whose record is gone is computed
/// from its inputs again, read from the unchanged pieces that hold it.
#[test]
fn a_refit_replays_the_images_whose_merge_holds_and_equals_a_fresh_run() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = common::repo_root().join("dataflows/ssa-flickr30k.toml");
    let input = tmp.path().join("input");
    let runs = Runs::new(tmp.path(), "ssa");
    sample_data(&input, &first_half, &[]);
    age(&input);
    runs.update(&spec, &input);
    let records = runs.state.join("records");
    assert!(std::fs::read_dir(&records).unwrap().count() > 0);

    sample_data(&input, &|_| true, &[]);
    age(&input);
    let refit = |runs: &Runs| runs.update_with(&spec, &input, &["--refit"]);
    let log = refit(&runs);
    assert!(log.contains("fitted the models on 100 captions"), "{log}");
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(runs.out.join("manifest.json")).unwrap()).unwrap();
    let rows = |name: &str, which: &str| {
        manifest["stages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name)
            .map(|s| s[which].as_u64().unwrap())
            .unwrap_or_else(|| panic!("no stage {name}: {manifest}"))
    };
    // The ten new images are computed, the old ones replayed unless their merge changed (on
    // data this small, twice the captions change many merges).
    let (replayed, computed) = (rows("replay", "rows_in"), rows("gather", "rows_out"));
    assert_eq!(replayed + computed, 20, "{manifest}");
    assert!(replayed >= 1 && computed >= 10, "{manifest}");
    let (refitted, fresh) = runs.against_fresh(&spec, &input);
    assert!(refitted == fresh, "the refit differs from a fresh full run");
    // The models are the ones a fresh run with a state fits as it reads every input: the same
    // artifact id, the digest of the caption rows at their read positions.
    let models_id = |state: &Path| -> Value {
        let info: Value =
            serde_json::from_slice(&std::fs::read(state.join("models.json")).unwrap()).unwrap();
        info["id"].clone()
    };
    let other = Runs::new(tmp.path(), "ssa-other");
    other.update(&spec, &input);
    assert_eq!(models_id(&runs.state), models_id(&other.state));

    // A bucket's records lost: its images are computed again, from their unchanged pieces.
    let lost = std::fs::read_dir(&records)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    std::fs::remove_file(&lost).unwrap();
    let sentences = input.join("flickr30k_entities/Sentences/1000002.txt");
    let mut text = std::fs::read_to_string(&sentences).unwrap();
    text.push_str("[/EN#1001/people A woman] walks [/EN#1002/animals a dog] .\n");
    std::fs::write(&sentences, text).unwrap();
    let log = refit(&runs);
    assert!(log.contains("fitted the models on 101 captions"), "{log}");
    let again: u64 = log
        .split(" of the state's images are computed again")
        .next()
        .and_then(|head| head.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{log}"));
    assert!(again >= 1, "{log}");
    let (refitted, fresh) = runs.against_fresh(&spec, &input);
    if refitted != fresh {
        let differ: Vec<&String> = (refitted.keys().chain(fresh.keys()))
            .filter(|k| refitted.get(*k) != fresh.get(*k))
            .collect();
        panic!("the refit without some records differs from a fresh run: {differ:?}");
    }
    assert!(
        lost.is_file(),
        "the lost bucket's records are written again"
    );
}

/// A damaged models file in the state stops the run with an error that names it; `--models`
/// where no models were kept, or on a recipe that fits none, is a usage error.
#[test]
fn damaged_or_missing_models_are_refused_with_their_file_named() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = common::repo_root().join("dataflows/ssa-flickr30k.toml");
    let input = tmp.path().join("input");
    let runs = Runs::new(tmp.path(), "ssa");
    sample_data(&input, &|_| true, &[]);
    runs.update(&spec, &input);
    let artifact = std::fs::read_dir(runs.state.join("models"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let mut bytes = std::fs::read(&artifact).unwrap();
    bytes[100] ^= 1;
    std::fs::write(&artifact, bytes).unwrap();
    let args = |extra: &[&str]| {
        let mut args = vec![
            "run".to_string(),
            spec.to_str().unwrap().to_string(),
            "--input".to_string(),
            input.to_str().unwrap().to_string(),
            "--out".to_string(),
            runs.out.to_str().unwrap().to_string(),
        ];
        args.extend(extra.iter().map(|a| a.to_string()));
        args
    };
    let state = runs.state.to_str().unwrap();
    let out = capflow(
        &args(&["--state", state])
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains(artifact.file_name().unwrap().to_str().unwrap()),
        "{stderr}"
    );
    assert!(stderr.contains("SHA-256"), "{stderr}");
    // `--refit` does not read the damaged file and replaces what models.json names.
    run_ok(
        &args(&["--state", state, "--refit"])
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );

    let empty = tmp.path().join("no-models");
    std::fs::create_dir_all(&empty).unwrap();
    let out = capflow(
        &args(&["--models", empty.to_str().unwrap()])
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("models.json"));
    let gbc = common::repo_root().join("dataflows/gbc.toml");
    let out = capflow(&[
        "run",
        gbc.to_str().unwrap(),
        "--input",
        input.to_str().unwrap(),
        "--out",
        tmp.path().join("gbc").to_str().unwrap(),
        "--models",
        state,
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("fits no models"));
}

/// `dataflows/ssa-flickr30k.toml` with its models fitted on a fixed corpus (the embedded
/// Flickr30k Entities captions), written into `dir`.
fn pinned_ssa_spec(dir: &Path) -> PathBuf {
    let text =
        std::fs::read_to_string(common::repo_root().join("dataflows/ssa-flickr30k.toml")).unwrap();
    let corpus = examples().join("flickr30k_entities");
    let path = dir.join("ssa-pinned.toml");
    std::fs::write(
        &path,
        format!(
            "{text}\n[[models.corpus]]\nformat = \"flickr30k-entities\"\npaths = [{:?}]\n",
            corpus.to_str().unwrap()
        ),
    )
    .unwrap();
    path
}

#[test]
fn ssa_with_a_fixed_model_corpus_recomputes_only_the_new_images() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = pinned_ssa_spec(tmp.path());
    let input = tmp.path().join("input");
    let runs = Runs::new(tmp.path(), "ssa");
    let out = &runs.out;
    sample_data(&input, &first_half, &[]);
    runs.update(&spec, &input);
    let half = samples(out);
    sample_data(&input, &|_| true, &[]);
    let log = runs.update(&spec, &input);
    assert!(
        log.contains(
            "computing 10 new or changed images, retracting 0 removed, carrying 10 unchanged"
        ),
        "{log}"
    );
    // The manifest names the corpus's models by the digest the state compares.
    let read =
        |path: PathBuf| -> Value { serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap() };
    let (manifest, header) = (
        read(out.join("manifest.json")),
        read(runs.state.join("state.json")),
    );
    assert_eq!(
        manifest["models"]["source"], "fitted on [[models.corpus]]",
        "{manifest}"
    );
    assert_eq!(
        manifest["models"]["id"], header["models_digest"],
        "{header}"
    );
    let shown = capflow(&["inspect", out.to_str().unwrap()]);
    let shown = String::from_utf8_lossy(&shown.stdout);
    let digest = header["models_digest"].as_str().unwrap();
    assert!(
        shown.contains(&format!(
            "  models: fitted on [[models.corpus]] (rows digest {digest})\n"
        )),
        "{shown}"
    );
    let (incremental, fresh) = runs.against_fresh(&spec, &input);
    assert!(incremental == fresh, "bytes differ");
    // The first half's samples are carried as they were; the changelog adds the rest.
    let changes = read_changelog(&out.join("changes/v2.parquet")).unwrap();
    assert!(changes
        .iter()
        .all(|(s, d)| *d == 1 && !first_half(s.image_id.parse().unwrap())));
    let all = samples(out);
    assert_eq!(all.len(), half.len() + changes.len());
    assert!(half.iter().all(|s| all.contains(s)));
}

#[test]
fn removing_captions_retracts_exactly_their_images_samples() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("input");
    let out = tmp.path().join("out");
    let state = tmp.path().join("state");
    let (input_s, out_s, state_s) = (
        input.to_str().unwrap(),
        out.to_str().unwrap(),
        state.to_str().unwrap(),
    );
    // SSA with its models fitted on a fixed corpus, so only the touched images change.
    let spec_path = pinned_ssa_spec(tmp.path());
    let spec = spec_path.to_str().unwrap();
    sample_data(&input, &|_| true, &[]);
    run_ok(&[
        "run", spec, "--input", input_s, "--out", out_s, "--state", state_s,
    ]);
    let before = samples(&out);
    // Image 1000007 disappears, image 1000003 loses its first caption.
    let gone = 1_000_007u64;
    let edited = 1_000_003u64;
    sample_data(&input, &|id| id != gone, &[edited]);
    run_ok(&[
        "run", spec, "--input", input_s, "--out", out_s, "--state", state_s,
    ]);
    let after = samples(&out);
    let manifest = read_manifest(&out).unwrap();
    let changelog = manifest.changelog.clone().expect("a changelog");
    assert_eq!(changelog.path, "changes/v2.parquet");
    let changes = read_changelog(&out.join(&changelog.path)).unwrap();
    let retracted: Vec<&SampleRow> = changes.iter().filter(|c| c.1 < 0).map(|c| &c.0).collect();
    let added: Vec<&SampleRow> = changes.iter().filter(|c| c.1 > 0).map(|c| &c.0).collect();
    // Every sample of the removed image is retracted and none comes back.
    let gone_id = gone.to_string();
    let gone_before: Vec<&SampleRow> = before.iter().filter(|s| s.image_id == gone_id).collect();
    assert!(!gone_before.is_empty());
    for sample in &gone_before {
        assert!(
            retracted.contains(sample),
            "{} not retracted",
            sample.sample_id
        );
    }
    assert!(after.iter().all(|s| s.image_id != gone_id));
    // The replayed changelog turns the old samples into the new ones.
    let mut replay: Vec<SampleRow> = before.clone();
    for sample in &retracted {
        let i = replay
            .iter()
            .position(|s| s == *sample)
            .expect("retracted was present");
        replay.remove(i);
    }
    replay.extend(added.iter().map(|s| (*s).clone()));
    let key = |s: &SampleRow| (s.image_id.clone(), s.sample_id.clone(), s.text.clone());
    let mut replay_keys: Vec<_> = replay.iter().map(key).collect();
    let mut after_keys: Vec<_> = after.iter().map(key).collect();
    replay_keys.sort();
    after_keys.sort();
    assert_eq!(replay_keys, after_keys);
    // Only the two touched images' samples change: nothing of any other image is retracted.
    let touched: BTreeSet<String> = [gone, edited].iter().map(|i| i.to_string()).collect();
    for sample in retracted.iter().chain(&added) {
        assert!(
            touched.contains(&sample.image_id),
            "sample {} of untouched image {} changed",
            sample.sample_id,
            sample.image_id
        );
    }
    // The original caption that was removed is among the retractions.
    assert!(retracted
        .iter()
        .any(|s| s.image_id == edited.to_string() && s.method == "original"));
    // Version 1 stays readable.
    let v1 = read_manifest_version(&out, 1).unwrap();
    assert_eq!(v1.version, 1);
    assert!(v1.files.iter().all(|f| out.join(&f.path).is_file()));
}

/// Copies every file under `from` into `to` (overwriting), creating directories.
fn copy_into(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let target = to.join(path.file_name().unwrap());
        if path.is_dir() {
            std::fs::create_dir_all(&target).unwrap();
            copy_into(&path, &target);
        } else {
            std::fs::copy(&path, &target).unwrap();
        }
    }
}

#[test]
fn watch_commits_a_version_whose_changelog_adds_exactly_the_new_image() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = pinned_ssa_spec(tmp.path());
    let input = tmp.path().join("input");
    let out = tmp.path().join("out");
    let state = tmp.path().join("state");
    sample_data(&input, &first_half, &[]);
    let mut watch = Command::new(env!("CARGO_BIN_EXE_capflow"))
        .args(["watch"])
        .arg(&spec)
        .arg("--input-dir")
        .arg(&input)
        .arg("--out")
        .arg(&out)
        .arg("--state")
        .arg(&state)
        .args([
            "--commit-interval",
            "0s",
            "--poll",
            "200ms",
            "--max-commits",
            "2",
        ])
        .current_dir(common::repo_root())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while !out.join("manifest.json").exists() {
        assert!(started.elapsed().as_secs() < 120, "no first version");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(read_manifest(&out).unwrap().version, 1);
    // Drop image 1000011's files (captions, boxes, AMRs) into the watched directory.
    let next = tmp.path().join("next");
    sample_data(&next, &|id| id <= 1_000_011, &[]);
    copy_into(&next, &input);
    let status = loop {
        if let Some(status) = watch.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed().as_secs() < 240,
            "watch did not commit again"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let mut log = String::new();
    std::io::Read::read_to_string(&mut watch.stderr.take().unwrap(), &mut log).unwrap();
    assert!(status.success(), "{log}");
    let manifest = read_manifest(&out).unwrap();
    assert_eq!(manifest.version, 2, "{log}");
    let changes = read_changelog(&out.join("changes/v2.parquet")).unwrap();
    // Exactly the samples a fresh run gives image 1000011, all added.
    let fresh = tmp.path().join("fresh");
    run_ok(&[
        "run",
        spec.to_str().unwrap(),
        "--input",
        input.to_str().unwrap(),
        "--out",
        fresh.to_str().unwrap(),
    ]);
    let expected: Vec<SampleRow> = samples(&fresh)
        .into_iter()
        .filter(|s| s.image_id == "1000011")
        .collect();
    assert!(!expected.is_empty());
    assert!(changes.iter().all(|(_, diff)| *diff == 1), "{log}");
    let added: Vec<SampleRow> = changes.into_iter().map(|(s, _)| s).collect();
    assert_eq!(added, expected);
    assert!(data_files(&out) == data_files(&fresh), "bytes differ");
}

/// Sets `chunk_images` in a recipe's `[output]`.
fn with_chunk_images(dir: &Path, recipe: &str, chunk_images: usize) -> PathBuf {
    let text =
        std::fs::read_to_string(common::repo_root().join(format!("dataflows/{recipe}.toml")))
            .unwrap();
    assert!(text.contains("\n[output]\n"), "{recipe} has no [output]");
    let text = text.replace(
        "\n[output]\n",
        &format!("\n[output]\nchunk_images = {chunk_images}\n"),
    );
    // Input paths are relative to the recipe's directory.
    let text = text.replace("../examples/data", examples().to_str().unwrap());
    let path = dir.join(format!("{recipe}-chunks.toml"));
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn small_chunks_carry_the_untouched_ones_and_equal_a_fresh_full_run() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("input");
    for recipe in ["sample", "gbc", "ssa-flickr30k"] {
        // One image per chunk: every bucket holds several.
        let spec = with_chunk_images(tmp.path(), recipe, 1);
        let runs = Runs::new(tmp.path(), recipe);
        sample_data(&input, &first_half, &[]);
        runs.update(&spec, &input);
        sample_data(&input, &|_| true, &[]);
        runs.update(&spec, &input);
        // SSA keeps the models fitted on the first half.
        let models = (recipe == "ssa-flickr30k").then(|| runs.state.to_str().unwrap().to_string());
        let (incremental, fresh) = runs.against_fresh_with(&spec, &input, models.as_deref());
        assert!(incremental == fresh, "{recipe}: bytes differ");
        let v1 = read_manifest_version(&runs.out, 1).unwrap();
        let v2 = read_manifest(&runs.out).unwrap();
        let chunked = |m: &capflow::export::Manifest| -> BTreeSet<String> {
            m.files
                .iter()
                .filter(|f| f.chunk.is_some())
                .map(|f| f.path.clone())
                .collect()
        };
        let (before, after) = (chunked(&v1), chunked(&v2));
        let chunks: BTreeSet<String> = v2.files.iter().filter_map(|f| f.chunk.clone()).collect();
        // The GBC sample has 4 images, the others at least 20.
        let least = if recipe == "gbc" { 4 } else { 20 };
        assert!(chunks.len() >= least, "{recipe}: {chunks:?}");
        assert!(
            !chunks.contains(""),
            "{recipe}: an open chunk with one image per chunk"
        );
        if recipe != "ssa-flickr30k" {
            // Without corpus-level models, the first half's chunks are carried as they were
            // and the new images' chunks are new.
            assert!(
                before.intersection(&after).count() > 0,
                "{recipe}: no chunk carried"
            );
            assert!(
                after.difference(&before).count() > 0,
                "{recipe}: nothing new"
            );
        }
    }
}

/// Dates every file under `dir` back to one fixed time: a file modified just before a run is
/// read again by the next run whatever its stamp (its timestamp could still tick), which these
/// tests do not want to see.
fn age(dir: &Path) {
    let then = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            age(&path);
        } else {
            let file = std::fs::File::options().write(true).open(&path).unwrap();
            file.set_modified(then).unwrap();
        }
    }
}

#[test]
fn a_rerun_reads_the_new_files_and_the_appended_graphs_only() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = pinned_ssa_spec(tmp.path());
    let (input, all) = (tmp.path().join("input"), tmp.path().join("all"));
    let runs = Runs::new(tmp.path(), "ssa");
    sample_data(&input, &first_half, &[]);
    sample_data(&all, &|_| true, &[]);
    let amr = input.join("amr/captions.amr");
    let half_text = std::fs::read_to_string(&amr).unwrap();
    let all_text = std::fs::read_to_string(all.join("amr/captions.amr")).unwrap();
    assert!(
        all_text.starts_with(&half_text),
        "graphs are not in image order"
    );
    // The file ends after a graph's last line, as a file still being appended to does.
    std::fs::write(&amr, format!("{half_text}\n")).unwrap();
    age(&input);
    runs.update(&spec, &input);
    // New data arrives: the new images' files are added, the split lists replaced, and their
    // graphs appended to the PENMAN file. Nothing else is touched.
    let flickr = |root: &Path| root.join("flickr30k_entities");
    for sub in ["Sentences", "Annotations"] {
        for entry in std::fs::read_dir(flickr(&all).join(sub)).unwrap() {
            let path = entry.unwrap().path();
            let target = flickr(&input).join(sub).join(path.file_name().unwrap());
            if !target.exists() {
                std::fs::copy(&path, &target).unwrap();
            }
        }
    }
    for split in ["train.txt", "val.txt", "test.txt"] {
        std::fs::copy(flickr(&all).join(split), flickr(&input).join(split)).unwrap();
    }
    {
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new().append(true).open(&amr).unwrap();
        writeln!(file, "{}", &all_text[half_text.len() + 1..]).unwrap();
    }
    age(&input);
    let log = runs.update(&spec, &input);
    assert!(
        log.contains("read 11 new or changed of 21 input pieces (1 appended to)")
            && log.contains("rows of 10 images"),
        "{log}"
    );
    assert!(
        log.contains(
            "computing 10 new or changed images, retracting 0 removed, carrying 10 unchanged"
        ),
        "{log}"
    );
    let (incremental, fresh) = runs.against_fresh(&spec, &input);
    assert!(incremental == fresh, "bytes differ after the growth");

    // An old image's sentence file changes in place: that image alone is read again, its
    // graphs from the unchanged PENMAN file included, and recomputed.
    let edited = flickr(&input).join("Sentences/1000004.txt");
    let text = std::fs::read_to_string(&edited).unwrap();
    let rest: String = text.lines().skip(1).map(|l| format!("{l}\n")).collect();
    std::fs::write(&edited, rest).unwrap();
    age(&input);
    let log = runs.update(&spec, &input);
    assert!(
        log.contains("read 1 new or changed of 21 input pieces (0 appended to)")
            && log.contains("rows of 1 image"),
        "{log}"
    );
    assert!(
        log.contains("computing 1 new or changed images, retracting 0 removed, carrying 19"),
        "{log}"
    );
    let (incremental, fresh) = runs.against_fresh(&spec, &input);
    assert!(incremental == fresh, "bytes differ after the edit");
    let changes = read_changelog(&runs.out.join("changes/v3.parquet")).unwrap();
    assert!(!changes.is_empty());
    assert!(changes.iter().all(|(s, _)| s.image_id == "1000004"));
}

/// A rerun that changes nothing commits nothing and says so (exit 0): with the streaming engine
/// and with `--state`, the manifest, the card and the file list stay as they were, there is no
/// `changes/v2.parquet`, and `--json` reports the kept version with `committed: false`.
#[test]
fn a_rerun_that_changes_nothing_commits_no_version() {
    let tmp = tempfile::tempdir().unwrap();
    for (recipe, state) in [("ssa-flickr30k", false), ("cutswap", true)] {
        let out = tmp.path().join(recipe);
        let out_arg = out.to_str().unwrap().to_string();
        let state_dir = tmp.path().join(format!("{recipe}-state"));
        let spec = format!("dataflows/{recipe}.toml");
        let mut args = vec!["run", spec.as_str(), "--out", out_arg.as_str()];
        if state {
            args.extend(["--state", state_dir.to_str().unwrap()]);
        }
        run_ok(&args);
        let manifest = std::fs::read(out.join("manifest.json")).unwrap();
        let card = std::fs::read(out.join("README.md")).unwrap();
        let files = data_files(&out);
        let log = run_ok(&args);
        assert!(
            log.contains("nothing changed, so no new version") && log.contains("version 1"),
            "{recipe}: {log}"
        );
        assert_eq!(std::fs::read(out.join("manifest.json")).unwrap(), manifest);
        assert_eq!(std::fs::read(out.join("README.md")).unwrap(), card);
        assert!(data_files(&out) == files, "{recipe}: the files changed");
        assert!(!out.join("changes/v2.parquet").exists());
        assert!(capflow::export::validate(&out).unwrap().is_ok());

        let mut json_args = args.clone();
        json_args.push("--json");
        let output = capflow(&json_args);
        assert!(output.status.success());
        let summary: Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(summary["version"], 1, "{summary}");
        assert_eq!(summary["committed"], false, "{summary}");
        assert_eq!(read_manifest(&out).unwrap().version, 1);
    }
}

/// The SSA recipe fits its models on the run's captions, so it reruns on the streaming engine
/// with its state. When the captions stay the same and one image's boxes move, the models and
/// every other image's rows are unchanged: that image alone goes through the stages, the
/// others are carried, only its samples change, and the dataset equals a fresh run's; then
/// removing an image's captions retracts its samples alone (the state keeps the models).
#[test]
fn an_ssa_rerun_whose_captions_stay_computes_only_the_image_whose_boxes_moved() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("input");
    let spec = common::repo_root().join("dataflows/ssa-flickr30k.toml");
    let runs = Runs::new(tmp.path(), "ssa");
    sample_data(&input, &|_| true, &[]);
    runs.update(&spec, &input);
    let before = samples(&runs.out);
    let moved = 1_000_003u64;
    let xml = input.join(format!("flickr30k_entities/Annotations/{moved}.xml"));
    let text = std::fs::read_to_string(&xml).unwrap();
    assert!(text.contains("<xmin>58</xmin>"));
    std::fs::write(&xml, text.replace("<xmin>58</xmin>", "<xmin>59</xmin>")).unwrap();

    let log = runs.update(&spec, &input);
    assert!(
        log.contains(
            "computing 1 new or changed images, retracting 0 removed, carrying 19 unchanged"
        ),
        "{log}"
    );
    let manifest = read_manifest(&runs.out).unwrap();
    assert_eq!(manifest.version, 2);
    let changelog = manifest.changelog.expect("a changelog");
    let changes = read_changelog(&runs.out.join(&changelog.path)).unwrap();
    assert!(!changes.is_empty());
    assert!(
        changes.iter().all(|(s, _)| s.image_id == moved.to_string()),
        "{changes:?}"
    );
    let after = samples(&runs.out);
    let others = |rows: &[SampleRow]| -> Vec<SampleRow> {
        rows.iter()
            .filter(|s| s.image_id != moved.to_string())
            .cloned()
            .collect()
    };
    assert_eq!(others(&before), others(&after));
    let (incremental, full) = runs.against_fresh(&spec, &input);
    assert!(incremental == full, "bytes differ from a fresh run");

    // One image's captions gone (and the moved boxes back as they were): the models stay those
    // the state keeps, so that image's samples are retracted and the moved one computed again,
    // and the dataset equals a fresh run's with the same models.
    sample_data(&input, &|id| id != 1_000_007, &[]);
    let log = runs.update(&spec, &input);
    assert!(
        log.contains(
            "computing 1 new or changed images, retracting 1 removed, carrying 18 unchanged"
        ),
        "{log}"
    );
    let state = runs.state.to_str().unwrap().to_string();
    let (incremental, full) = runs.against_fresh_with(&spec, &input, Some(&state));
    assert!(
        incremental == full,
        "bytes differ from a fresh run after the removal"
    );
    assert!(samples(&runs.out).iter().all(|s| s.image_id != "1000007"));
}

/// A run whose budget cuts every bucket into several parts, over a dataset whose chunks hold
/// samples of several splits (one bucket, chunks of about four images): each part reads back
/// every previous sample file of its range, whichever split, so a rerun that changes nothing
/// commits nothing, with a state (every image carried) and without one (every image
/// recomputed and compared), and the bytes are those of a run in one part.
#[test]
fn reruns_in_many_parts_read_back_every_split_of_every_chunk() {
    let tmp = tempfile::tempdir().unwrap();
    let text =
        std::fs::read_to_string(common::repo_root().join("dataflows/ssa-flickr30k.toml")).unwrap();
    assert!(text.contains("\n[output]\n"));
    let text = text
        .replace(
            "\n[output]\n",
            "\n[output]\nbuckets = 1\nchunk_images = 4\n",
        )
        .replace("../examples/data", examples().to_str().unwrap());
    let spec = tmp.path().join("ssa-parts.toml");
    std::fs::write(&spec, text).unwrap();
    let spec = spec.to_str().unwrap();
    let whole = tmp.path().join("whole");
    run_ok(&["run", spec, "--out", whole.to_str().unwrap()]);
    let splits: BTreeSet<String> = samples(&whole).into_iter().map(|s| s.split).collect();
    assert!(splits.len() > 1, "{splits:?}");
    for state in [false, true] {
        let out = tmp.path().join(format!("parts-{state}"));
        let state_dir = tmp.path().join(format!("parts-{state}.state"));
        let mut args = vec![
            "run",
            spec,
            "--out",
            out.to_str().unwrap(),
            "--memory-limit",
            "16KiB",
        ];
        if state {
            args.extend(["--state", state_dir.to_str().unwrap()]);
        }
        run_ok(&args);
        assert!(
            data_files(&out) == data_files(&whole),
            "state {state}: bytes differ"
        );
        let log = run_ok(&args);
        assert!(
            log.contains("nothing changed, so no new version"),
            "state {state}: {log}"
        );
        assert!(
            data_files(&out) == data_files(&whole),
            "state {state}: rerun bytes differ"
        );
    }
}

/// A run without a state fits its models and lets them go: the manifest and `capflow inspect`
/// say so; a recipe without corpus-level models names none.
#[test]
fn a_run_without_state_says_its_models_were_fitted_and_not_kept() {
    let tmp = tempfile::tempdir().unwrap();
    // The recipe run fresh into `tmp/NAME`: its directory and its manifest.
    let fresh = |name: &str| -> (PathBuf, Value) {
        let out = tmp.path().join(name);
        let spec = common::repo_root().join(format!("dataflows/{name}.toml"));
        run_ok(&[
            "run",
            spec.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ]);
        let manifest = std::fs::read(out.join("manifest.json")).unwrap();
        (out, serde_json::from_slice(&manifest).unwrap())
    };
    let (out, manifest) = fresh("ssa-flickr30k");
    assert_eq!(
        manifest["models"],
        serde_json::json!({"source": "fitted on the inputs"}),
        "{manifest}"
    );
    let shown = capflow(&["inspect", out.to_str().unwrap()]);
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.contains("  models: fitted on the inputs (not kept: the run had no --state)\n"),
        "{shown}"
    );
    let (_, manifest) = fresh("gbc");
    assert!(manifest.get("models").is_none(), "{manifest}");
}

/// The shipped SSA recipe, the full sample data copied into `tmp/input` (aged: a rerun does not
/// read it again for its timestamps) and a first run with a state in `tmp`.
fn ssa_with_state(tmp: &Path) -> (PathBuf, PathBuf, Runs) {
    let spec = common::repo_root().join("dataflows/ssa-flickr30k.toml");
    let input = tmp.join("input");
    let runs = Runs::new(tmp, "ssa");
    sample_data(&input, &|_| true, &[]);
    age(&input);
    runs.update(&spec, &input);
    (spec, input, runs)
}

/// `capflow synth` data of `images` images (seed `seed`), and a first run of the SSA recipe on
/// it with a state.
fn synth_with_state(tmp: &Path, images: &str, seed: &str) -> (PathBuf, PathBuf, Runs) {
    let spec = common::repo_root().join("dataflows/ssa-flickr30k.toml");
    let input = tmp.join("input");
    let runs = Runs::new(tmp, "ssa");
    let out = input.to_str().unwrap();
    run_ok(&["synth", "--images", images, "--seed", seed, "--out", out]);
    age(&input);
    runs.update(&spec, &input);
    (spec, input, runs)
}

/// Appends a caption to image `id`'s sentence file in `input`.
fn add_caption(input: &Path, id: &str) {
    let sentences = input.join(format!("flickr30k_entities/Sentences/{id}.txt"));
    let mut text = std::fs::read_to_string(&sentences).unwrap();
    text.push_str("[/EN#1001/people A man] holds [/EN#1002/other a red kite] .\n");
    std::fs::write(&sentences, text).unwrap();
}

/// A rerun after every caption file was copied anew (new modification times, the same bytes)
/// and one image got a caption reads only that image's piece: the others' bytes hash as they
/// did when they were read, so only their stamps are recorded anew. The dataset is a fresh
/// run's. Once every file has an old enough time, the next rerun reads nothing: the captioned
/// file, written just before the first rerun, kept neither its time nor a hash, and is read by
/// the rerun after it is aged (which also gives the copies new times again).
#[test]
fn a_rerun_after_the_inputs_were_copied_anew_reads_only_what_changed() {
    let tmp = tempfile::tempdir().unwrap();
    let (spec, input, runs) = ssa_with_state(tmp.path());
    let sentences = input.join("flickr30k_entities/Sentences");
    let minute_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
    for entry in std::fs::read_dir(&sentences).unwrap() {
        let path = entry.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, bytes).unwrap();
        let file = std::fs::File::options().write(true).open(&path).unwrap();
        file.set_modified(minute_ago).unwrap();
    }
    add_caption(&input, "1000005");
    let log = runs.update(&spec, &input);
    assert!(
        log.contains(
            "read 1 new or changed of 21 input pieces (0 appended to; 19 with new timestamps \
             and the same bytes)"
        ),
        "{log}"
    );
    assert!(
        log.contains("computing 1 new or changed images, retracting 0 removed, carrying 19"),
        "{log}"
    );
    let state = runs.state.to_str().unwrap();
    let (incremental, fresh) = runs.against_fresh_with(&spec, &input, Some(state));
    assert_eq!(incremental, fresh);
    // Every file gets the same old time: the copies are stamped anew once more, the captioned
    // file is read.
    age(&input);
    let log = runs.update(&spec, &input);
    assert!(
        log.contains("read 1 new or changed of 21 input pieces (0 appended to; 19 with new"),
        "{log}"
    );
    let log = runs.update(&spec, &input);
    assert!(
        log.contains("read 0 new or changed of 21 input pieces (0 appended to)"),
        "{log}"
    );
}

/// A rerun whose changed pieces are too many to collect within `--memory-limit` reads every
/// input on the streaming engine instead: the images that did not change are carried, the
/// changed ones computed with the kept models, and the dataset is what a fresh run with those
/// models writes. It still records the input pieces, so the next rerun reads only what changed.
#[test]
fn a_rerun_that_changes_too_much_to_collect_streams_with_the_kept_models() {
    let tmp = tempfile::tempdir().unwrap();
    let (spec, input, runs) = ssa_with_state(tmp.path());
    let changed = ["1000002", "1000005", "1000009", "1000013", "1000017"];
    for id in changed {
        add_caption(&input, id);
    }
    age(&input);
    // The sample inputs are about 80 KB: a quarter of them, held as rows, is more than half of
    // 64 KiB.
    let log = runs.update_with(&spec, &input, &["--memory-limit", "64KiB"]);
    assert!(
        log.contains(
            "5 of 21 input pieces are new or changed, too many to hold within --memory-limit: \
             reading every input on the streaming engine"
        ),
        "{log}"
    );
    assert!(
        log.contains(
            "computing 5 new or changed images, retracting 0 removed, carrying 15 unchanged"
        ),
        "{log}"
    );
    let changes = read_changelog(&runs.out.join("changes/v2.parquet")).unwrap();
    let touched: BTreeSet<&str> = changes.iter().map(|(s, _)| s.image_id.as_str()).collect();
    assert_eq!(touched, changed.into_iter().collect::<BTreeSet<_>>());
    let state = runs.state.to_str().unwrap();
    let (incremental, fresh) = runs.against_fresh_with(&spec, &input, Some(state));
    assert_eq!(incremental, fresh);
    // The streamed rerun recorded the pieces as it read them: nothing is read next time.
    let log = runs.update(&spec, &input);
    assert!(
        log.contains("read 0 new or changed of 21 input pieces"),
        "{log}"
    );
    assert!(log.contains("carrying 20 unchanged"), "{log}");
}

/// A rerun collects its changed rows only when they fit within half of `--memory-limit` beside
/// what it holds for the state's per-image records (three times their bytes): on 2,000
/// synthetic images (records of about 176 KB), one changed image's rows (a few
/// KB) fit in 4 MiB, and not beside the records in 768 KiB, where the rerun streams and says
/// why. Both write what a fresh run with the kept models writes.
#[test]
fn a_rerun_counts_the_state_records_it_holds_against_the_memory_limit() {
    let tmp = tempfile::tempdir().unwrap();
    let (spec, input, runs) = synth_with_state(tmp.path(), "2000", "3");
    let buckets = runs.state.join("buckets");
    let records: u64 = std::fs::read_dir(&buckets)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    assert!(
        (140_000..220_000).contains(&records),
        "{records} bytes of records"
    );
    let state = runs.state.to_str().unwrap();

    add_caption(&input, "2000007");
    age(&input);
    let log = runs.update_with(&spec, &input, &["--memory-limit", "768KiB"]);
    assert!(
        log.contains(&format!(
            "1 of 2001 input pieces are new or changed, too many to hold within --memory-limit \
             beside the state's per-image records (about {}): reading every input on the \
             streaming engine",
            indicatif::HumanBytes(3 * records)
        )),
        "{log}"
    );
    assert!(log.contains("carrying 1999 unchanged"), "{log}");
    let (incremental, fresh) = runs.against_fresh_with(&spec, &input, Some(state));
    assert_eq!(incremental, fresh);

    add_caption(&input, "2001003");
    age(&input);
    let log = runs.update_with(&spec, &input, &["--memory-limit", "4MiB"]);
    assert!(!log.contains("too many to hold"), "{log}");
    assert!(
        log.contains("read 1 new or changed of 2001 input pieces"),
        "{log}"
    );
    assert!(log.contains("carrying 1999 unchanged"), "{log}");
    let (incremental, fresh) = runs.against_fresh_with(&spec, &input, Some(state));
    assert_eq!(incremental, fresh);
}

/// A rerun that collects computes its images in rounds of 512 on a single process, each a
/// dataflow of its own: with 1,100 changed images (three rounds), the dataset is what a fresh
/// run with the kept models writes.
#[test]
fn a_rerun_that_computes_images_in_several_rounds_equals_a_fresh_run() {
    let tmp = tempfile::tempdir().unwrap();
    let (spec, input, runs) = synth_with_state(tmp.path(), "1500", "5");
    for n in (0..1500).filter(|n| n % 4 != 0) {
        add_caption(&input, &(2_000_000 + n).to_string());
    }
    age(&input);
    let log = runs.update(&spec, &input);
    assert!(!log.contains("too many to hold"), "{log}");
    assert!(
        log.contains("read 1125 new or changed of 1501 input pieces"),
        "{log}"
    );
    assert!(
        log.contains("computing 1125 new or changed images, retracting 0 removed, carrying 375"),
        "{log}"
    );
    let state = runs.state.to_str().unwrap();
    let (incremental, fresh) = runs.against_fresh_with(&spec, &input, Some(state));
    assert_eq!(incremental, fresh);
}

/// The files of each bucket chunk of a dataset, by bucket and chunk key.
fn chunk_files(
    manifest: &capflow::export::Manifest,
) -> BTreeMap<(usize, String), BTreeSet<String>> {
    let mut chunks: BTreeMap<(usize, String), BTreeSet<String>> = BTreeMap::new();
    for file in &manifest.files {
        for piece in file.chunk_pieces() {
            let key = (piece.bucket, piece.chunk.to_string());
            chunks.entry(key).or_default().insert(file.path.clone());
        }
    }
    chunks
}

/// A rerun on the streaming engine keeps the files of a chunk none of whose images changed as
/// the previous version holds them, and writes the others. On 4,000 synthetic images in chunks
/// of 16, with a blank line added to every sentence file (new bytes, the same rows: too many
/// pieces to collect within 160 MiB) and a caption added to every 50th image, the chunks it
/// says it kept are those whose files are still the ones the previous run wrote (the same
/// inodes: not written again), they are most of the chunks whose files the new version shares
/// with the old, and the dataset is a fresh run's.
#[test]
fn a_streamed_rerun_keeps_the_files_of_the_chunks_that_did_not_change() {
    // Most unchanged chunks lie whole within a part of the bucket (parts of 2 MiB).
    let (untouched, shared) = streamed_rerun_keeping_chunks("160MiB");
    assert!(4 * untouched >= 3 * shared, "{untouched} of {shared}");
}

/// The same with parts of about 87 KiB (`--memory-limit` 129 MiB, `dataflow::budget`), smaller
/// than most chunks (16 images of about 7 KB each on average): a chunk over two or three
/// parts whose images are all carried is kept too.
#[test]
fn a_streamed_rerun_keeps_the_unchanged_chunks_that_span_parts() {
    let (untouched, shared) = streamed_rerun_keeping_chunks("129MiB");
    assert!(10 * untouched >= 9 * shared, "{untouched} of {shared}");
}

/// The streamed rerun of the two tests above, within `limit`: the chunks it kept, and those
/// whose files the new version shares with the old.
fn streamed_rerun_keeping_chunks(limit: &str) -> (usize, usize) {
    use std::os::unix::fs::MetadataExt;
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("input");
    let images = 4000;
    let out = input.to_str().unwrap();
    run_ok(&[
        "synth",
        "--images",
        &images.to_string(),
        "--seed",
        "7",
        "--out",
        out,
    ]);
    age(&input);
    let spec = with_chunk_images(tmp.path(), "ssa-flickr30k", 16);
    let runs = Runs::new(tmp.path(), "ssa");
    runs.update(&spec, &input);
    let before = chunk_files(&read_manifest(&runs.out).unwrap());
    let inode = |path: &String| std::fs::metadata(runs.out.join(path)).unwrap().ino();
    let inodes: BTreeMap<String, u64> = (before.values().flatten())
        .map(|path| (path.clone(), inode(path)))
        .collect();
    for n in 0..images {
        let id = (2_000_000 + n).to_string();
        let sentences = input.join(format!("flickr30k_entities/Sentences/{id}.txt"));
        if n % 50 == 0 {
            add_caption(&input, &id);
        } else {
            let text = std::fs::read_to_string(&sentences).unwrap();
            std::fs::write(&sentences, text + "\n").unwrap();
        }
    }
    let log = runs.update_with(&spec, &input, &["--memory-limit", limit]);
    assert!(
        log.contains("reading every input on the streaming engine"),
        "{log}"
    );
    assert!(
        log.contains("computing 80 new or changed images, retracting 0 removed, carrying 3920"),
        "{log}"
    );
    let after = chunk_files(&read_manifest(&runs.out).unwrap());
    let shared: Vec<&BTreeSet<String>> = (after.iter())
        .filter(|(chunk, files)| before.get(chunk) == Some(files))
        .map(|(_, files)| files)
        .collect();
    let untouched = (shared.iter())
        .filter(|files| files.iter().all(|path| inode(path) == inodes[path]))
        .count();
    let kept = format!("kept {untouched} of {} chunks as they were", after.len());
    assert!(log.contains(&kept), "{kept}: {log}");
    assert!(shared.len() < after.len());
    let state = runs.state.to_str().unwrap();
    let (incremental, fresh) = runs.against_fresh_with(&spec, &input, Some(state));
    assert_eq!(incremental, fresh);
    (untouched, shared.len())
}

/// A `--refit` whose changed pieces, or whose images to compute again, are too many to collect
/// within `--memory-limit` fits the models on the streaming engine as it reads every input,
/// instead of replaying: the dataset is a fresh full run's all the same.
#[test]
fn a_refit_that_changes_too_much_to_collect_streams_and_equals_a_fresh_run() {
    let tmp = tempfile::tempdir().unwrap();
    let (spec, input, runs) = ssa_with_state(tmp.path());
    // A quarter of the pieces changed: too many for 64 KiB, so nothing is replayed.
    for id in ["1000002", "1000005", "1000009", "1000013", "1000017"] {
        add_caption(&input, id);
    }
    age(&input);
    let log = runs.update_with(&spec, &input, &["--refit", "--memory-limit", "64KiB"]);
    assert!(
        log.contains(
            "5 of 21 input pieces are new or changed, too many to hold within --memory-limit: \
             reading every input on the streaming engine"
        ),
        "{log}"
    );
    assert!(!log.contains("fitted the models on"), "{log}");
    let (refitted, fresh) = runs.against_fresh(&spec, &input);
    assert!(
        refitted == fresh,
        "the streamed refit differs from a fresh full run"
    );

    // One piece changed, but with the records of all buckets but one lost, nearly every image
    // is computed again: the replay is given up for the streaming engine.
    let records = runs.state.join("records");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&records)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(files.len() > 2, "{files:?}");
    for file in &files[1..] {
        std::fs::remove_file(file).unwrap();
    }
    add_caption(&input, "1000003");
    age(&input);
    let log = runs.update_with(&spec, &input, &["--refit", "--memory-limit", "128KiB"]);
    assert!(log.contains("fitted the models on 106 captions"), "{log}");
    let said = log
        .lines()
        .find(|line| line.contains("too many to hold within --memory-limit"))
        .unwrap_or_else(|| panic!("{log}"));
    assert!(
        said.contains("1 of 21 input pieces are new or changed and ")
            && said.contains(" images are computed again, too many to hold"),
        "{log}"
    );
    assert!(log.contains("computing all 20 images"), "{log}");
    let (refitted, fresh) = runs.against_fresh(&spec, &input);
    assert!(
        refitted == fresh,
        "the streamed refit differs from a fresh full run"
    );
}

/// A run on the streaming engine records the input pieces as its workers read them: the
/// record it leaves in the state is, byte for byte, the one the piece-by-piece reader leaves
/// reading every input ([`capflow::dataflow::inputs::read_inputs`]), with one worker or two,
/// rejected records and the PENMAN file's end included. A rerun with the models kept then
/// reads only the piece that changed.
#[test]
fn a_streamed_run_records_the_input_pieces_a_piecewise_read_records() {
    use capflow::dataflow::inputs::{read_inputs, InputsState};
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("input");
    sample_data(&input, &|_| true, &[]);
    // An annotation file that does not parse and a graph that does not: both rejected.
    std::fs::write(
        input.join("flickr30k_entities/Annotations/1000005.xml"),
        "<annotation><object>",
    )
    .unwrap();
    {
        use std::io::Write;
        let amr = input.join("amr/captions.amr");
        let mut file = std::fs::OpenOptions::new().append(true).open(amr).unwrap();
        writeln!(
            file,
            "\n# ::id 1000003.9\n# ::snt a broken graph\n(b / broken :ARG0\n"
        )
        .unwrap();
    }
    age(&input);
    let recipe = common::repo_root().join("dataflows/ssa-flickr30k.toml");
    let spec = capflow::dataflow::DataflowSpec::from_file(&recipe)
        .unwrap()
        .with_input_root(&input);
    let piecewise = tmp.path().join("piecewise");
    std::fs::create_dir_all(&piecewise).unwrap();
    let read = read_inputs(&spec, &piecewise, false).unwrap();
    assert_eq!(read.collected.counts.rejected, 2);
    InputsState::commit_pending(&piecewise).unwrap();
    let expected = std::fs::read_to_string(piecewise.join("inputs.json")).unwrap();
    assert!(expected.contains(r#""key":"1000005""#), "{expected}");
    assert!(expected.contains(r#""end":{"cursor""#), "{expected}");
    for workers in ["1", "2"] {
        let runs = Runs::new(tmp.path(), &format!("streamed-w{workers}"));
        let log = runs.update_with(&recipe, &input, &["-w", workers]);
        assert!(log.contains("2 rejected"), "{log}");
        let recorded = std::fs::read_to_string(runs.state.join("inputs.json")).unwrap();
        assert!(
            recorded == expected,
            "-w {workers}:\n{recorded}\n{expected}"
        );
    }
    // A rerun on the streamed run's state with its models kept reads the one changed piece.
    add_caption(&input, "1000007");
    age(&input);
    let runs = Runs::new(tmp.path(), "streamed-w2");
    let state = runs.state.to_str().unwrap().to_string();
    let log = runs.update_with(&recipe, &input, &["--models", &state]);
    assert!(
        log.contains("read 1 new or changed of 21 input pieces"),
        "{log}"
    );
}
