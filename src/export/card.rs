//! The dataset card (`README.md`): a YAML header in Hugging Face's dataset card format (the
//! card metadata, then `configs:` naming every table's data files), then what the dataset is,
//! its counts and its schemas.
//!
//! The metadata: `license`, `language`, `task_categories` and `source_datasets` from
//! [`CardMetadata`], and `size_categories` from the rows of the default config's table, in
//! Hugging Face's buckets (`n<1K`, `1K<n<10K`, ... `n>1T`).
//!
//! One config per table with rows (`config_name` = table name; a table without rows would fail
//! to load, so it gets none), listing the exact files of this version (not a glob, so that files
//! of another version can never be picked up). The samples table has one `split` entry per
//! sample split, named as `datasets` names splits ([`canonical_split`]: the `val` shards of a
//! dataset written by an earlier capflow version are listed under `validation`). The other
//! tables are not divided into splits: their files are listed without one, and `datasets`
//! loads them as its default split, `train`, holding every row (each row's `split` column, where
//! the table has one, says its image's split).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use arrow::datatypes::{DataType, Field};

use super::manifest::{CardRecord, Manifest};
use crate::schema::{canonical_split, TableKind};

/// The card metadata a run gives its dataset (Hugging Face's dataset card fields).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CardMetadata {
    /// A licence identifier from Hugging Face's list (`cc-by-4.0`, `apache-2.0`, `other`);
    /// the card says `unknown` without one.
    pub license: Option<String>,
    /// Languages of the text (ISO 639 codes).
    pub language: Vec<String>,
    /// Hugging Face task categories.
    pub task_categories: Vec<String>,
    /// The datasets the inputs come from (`flickr30k`, `coco`); left out when empty.
    pub source_datasets: Vec<String>,
}

impl Default for CardMetadata {
    /// English captions for image-to-text, licence and sources unknown.
    fn default() -> Self {
        CardMetadata {
            license: None,
            language: vec!["en".into()],
            task_categories: vec!["image-to-text".into()],
            source_datasets: Vec::new(),
        }
    }
}

impl From<&CardRecord> for CardMetadata {
    fn from(card: &CardRecord) -> Self {
        CardMetadata {
            license: card.license.clone(),
            language: card.language.clone(),
            task_categories: card.task_categories.clone(),
            source_datasets: card.source_datasets.clone(),
        }
    }
}

impl CardRecord {
    /// What the manifest keeps of a card with `description` and `metadata`.
    pub fn new(description: Option<String>, metadata: &CardMetadata) -> Self {
        CardRecord {
            description,
            license: metadata.license.clone(),
            language: metadata.language.clone(),
            task_categories: metadata.task_categories.clone(),
            source_datasets: metadata.source_datasets.clone(),
        }
    }
}

/// Hugging Face's `size_categories` bucket of a dataset of `rows` examples: `n<1K`,
/// `1K<n<10K`, ..., `100B<n<1T`, `n>1T` (a bucket holds its lower bound: 1,000 rows are
/// `1K<n<10K`).
pub fn size_category(rows: u64) -> &'static str {
    const BUCKETS: [&str; 11] = [
        "n<1K",
        "1K<n<10K",
        "10K<n<100K",
        "100K<n<1M",
        "1M<n<10M",
        "10M<n<100M",
        "100M<n<1B",
        "1B<n<10B",
        "10B<n<100B",
        "100B<n<1T",
        "n>1T",
    ];
    let mut bound = 1_000u64;
    for bucket in &BUCKETS[..BUCKETS.len() - 1] {
        if rows < bound {
            return bucket;
        }
        bound = bound.saturating_mul(10);
    }
    BUCKETS[BUCKETS.len() - 1]
}

/// Renders the card for `manifest`, with `description` as its opening paragraph when given.
pub fn render_card(
    manifest: &Manifest,
    description: Option<&str>,
    metadata: &CardMetadata,
) -> String {
    let mut out = String::new();
    render_header(&mut out, manifest, metadata);
    let _ = writeln!(out, "# capflow dataset\n");
    match description {
        Some(text) => {
            let _ = writeln!(out, "{}\n", text.trim_end());
        }
        None => {
            let _ = writeln!(
                out,
                "Image-caption tables written by capflow {}. Each table is one config; \
                 `manifest.json` lists every file with its row count and SHA-256 \
                 (`capflow validate` checks them).\n",
                manifest.engine_version
            );
        }
    }
    render_counts(&mut out, manifest);
    render_schemas(&mut out, manifest);
    out
}

fn render_header(out: &mut String, manifest: &Manifest, metadata: &CardMetadata) {
    out.push_str("---\n");
    let main = main_table(manifest);
    let _ = writeln!(
        out,
        "license: {}",
        yaml_string(metadata.license.as_deref().unwrap_or("unknown"))
    );
    yaml_list(out, "language", &metadata.language);
    yaml_list(out, "task_categories", &metadata.task_categories);
    let main_rows = main.map_or(0, |kind| manifest.table_rows(kind));
    yaml_list(out, "size_categories", &[size_category(main_rows)]);
    yaml_list(out, "source_datasets", &metadata.source_datasets);
    let loadable: Vec<TableKind> = TableKind::ALL
        .into_iter()
        .filter(|&kind| manifest.table_rows(kind) > 0)
        .collect();
    if !loadable.is_empty() {
        out.push_str("configs:\n");
    }
    // The config loaded when none is named: the main table's, else the ledger's.
    let default = main.or_else(|| loadable.first().copied());
    for kind in loadable {
        let _ = writeln!(out, "- config_name: {}", kind.name());
        if Some(kind) == default {
            out.push_str("  default: true\n");
        }
        out.push_str("  data_files:\n");
        // Paths are `data/<split>-NNNNN-of-NNNNN-<hex>.parquet` and split names `\w+(\.\w+)*`:
        // quoted so that none (a split `2017`, `true`) can be read as another YAML type.
        let files = manifest.table_files(kind).filter(|f| f.rows > 0);
        if kind == TableKind::Samples {
            let mut splits: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
            for file in files {
                splits
                    .entry(canonical_split(&file.split))
                    .or_default()
                    .push(&file.path);
            }
            for (split, paths) in splits {
                let _ = writeln!(out, "  - split: {}\n    path:", yaml_string(split));
                for path in paths {
                    let _ = writeln!(out, "    - {}", yaml_string(path));
                }
            }
        } else {
            for file in files {
                let _ = writeln!(out, "  - {}", yaml_string(&file.path));
            }
        }
    }
    out.push_str("---\n\n");
}

/// `key:` with one `- item` line per item; nothing when `items` is empty.
fn yaml_list(out: &mut String, key: &str, items: &[impl AsRef<str>]) {
    if items.is_empty() {
        return;
    }
    let _ = writeln!(out, "{key}:");
    for item in items {
        let _ = writeln!(out, "- {}", yaml_string(item.as_ref()));
    }
}

/// `text` as a YAML double-quoted scalar (a JSON string is one), so that no value can be read
/// as another YAML type or break the header.
fn yaml_string(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_else(|_| "\"\"".into())
}

/// The main table: the augmented samples when they have rows, else the first input table with
/// rows; `None` when no table but the ledger has any.
fn main_table(manifest: &Manifest) -> Option<TableKind> {
    let present = |k: TableKind| manifest.table_rows(k) > 0;
    if present(TableKind::Samples) {
        return Some(TableKind::Samples);
    }
    TableKind::ALL
        .into_iter()
        .find(|k| *k != TableKind::Rejected && present(*k))
}

fn render_counts(out: &mut String, manifest: &Manifest) {
    let c = manifest.counts;
    let _ = writeln!(out, "## Contents\n");
    let _ = writeln!(
        out,
        "Version {} (engine {}, config `{}`).\n",
        manifest.version,
        manifest.engine_version,
        manifest
            .config_hash
            .get(..16)
            .unwrap_or(&manifest.config_hash)
    );
    let _ = writeln!(
        out,
        "Input records: {} read, {} accepted, {} rejected (see `rejected.parquet`).\n",
        c.read, c.accepted, c.rejected
    );
    out.push_str("| table | split | rows | files |\n|---|---|---:|---:|\n");
    for kind in TableKind::ALL {
        if manifest.tables.contains_key(kind.name()) {
            // (rows, files) per split as the configs name it; `-` for a table not split.
            let mut splits: BTreeMap<&str, (u64, usize)> = BTreeMap::new();
            for file in manifest.table_files(kind) {
                let split = match kind {
                    TableKind::Samples => canonical_split(&file.split),
                    _ => "-",
                };
                let entry = splits.entry(split).or_default();
                entry.0 += file.rows;
                entry.1 += 1;
            }
            for (split, (rows, files)) in splits {
                let _ = writeln!(out, "| {} | {split} | {rows} | {files} |", kind.name());
            }
        }
    }
    out.push_str(
        "\nTables without rows have no config. Only `samples` is divided into splits \
         (`train`, `validation`, `test`); `datasets` loads every other table as its default \
         split, `train`, which holds all its rows (the `split` column of `images`, `captions` \
         and `samples` gives each row's split).\n",
    );
    out.push('\n');
    if !manifest.stages.is_empty() {
        out.push_str("| stage | rows in | rows out | rejected |\n|---|---:|---:|---:|\n");
        for stage in &manifest.stages {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} |",
                stage.name.replace('|', "\\|"),
                stage.rows_in,
                stage.rows_out,
                stage.rejected
            );
        }
        out.push('\n');
    }
}

fn render_schemas(out: &mut String, manifest: &Manifest) {
    let _ = writeln!(out, "## Schemas\n");
    for kind in TableKind::ALL {
        if !manifest.tables.contains_key(kind.name()) {
            continue;
        }
        let _ = writeln!(out, "### {}\n", kind.name());
        out.push_str("| column | type | nullable |\n|---|---|---|\n");
        for field in kind.schema().fields() {
            let _ = writeln!(
                out,
                "| {} | {} | {} |",
                field.name(),
                type_summary(field.data_type()),
                if field.is_nullable() { "yes" } else { "no" }
            );
        }
        out.push('\n');
    }
}

/// A compact type name: `list<string>`, `struct<x1, y1, x2, y2>`.
fn type_summary(data_type: &DataType) -> String {
    match data_type {
        DataType::Utf8 | DataType::LargeUtf8 => "string".into(),
        DataType::List(item) | DataType::LargeList(item) => {
            format!("list<{}>", type_summary(item.data_type()))
        }
        DataType::Struct(fields) => format!(
            "struct<{}>",
            fields
                .iter()
                .map(|f: &std::sync::Arc<Field>| f.name().as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        other => other.to_string().to_lowercase(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::manifest::{FileEntry, TableSummary};

    #[test]
    fn size_categories_are_hugging_faces_buckets() {
        let cases = [
            (0, "n<1K"),
            (999, "n<1K"),
            (1_000, "1K<n<10K"),
            (9_999, "1K<n<10K"),
            (10_000, "10K<n<100K"),
            (145_000, "100K<n<1M"),
            (1_000_000, "1M<n<10M"),
            (99_999_999, "10M<n<100M"),
            (100_000_000, "100M<n<1B"),
            (5_000_000_000, "1B<n<10B"),
            (10_000_000_000, "10B<n<100B"),
            (999_999_999_999, "100B<n<1T"),
            (1_000_000_000_000, "n>1T"),
            (u64::MAX, "n>1T"),
        ];
        for (rows, bucket) in cases {
            assert_eq!(size_category(rows), bucket, "{rows}");
        }
    }

    fn file(table: TableKind, split: &str, rows: u64) -> FileEntry {
        FileEntry {
            path: format!("data/{split}-00000-of-00001-{rows:016}.parquet"),
            table,
            split: split.into(),
            rows,
            bytes: 1,
            sha256: String::new(),
            chunk: None,
            spans: Vec::new(),
        }
    }

    fn manifest(files: Vec<FileEntry>) -> Manifest {
        let mut tables: BTreeMap<String, TableSummary> = BTreeMap::new();
        for f in &files {
            let t = tables
                .entry(f.table.name().to_string())
                .or_insert(TableSummary {
                    schema_fingerprint: String::new(),
                    rows: 0,
                    files: 0,
                    splits: BTreeMap::new(),
                });
            t.rows += f.rows;
            t.files += 1;
            *t.splits.entry(f.split.clone()).or_default() += f.rows;
        }
        Manifest {
            format: "capflow-dataset".into(),
            format_version: 1,
            version: 1,
            engine_version: "0".into(),
            config_hash: "0".repeat(64),
            created_at: String::new(),
            counts: Default::default(),
            stages: Vec::new(),
            dropped: BTreeMap::new(),
            tables,
            files,
            history: Vec::new(),
            changelog: None,
            models: None,
            delta_versions: BTreeMap::new(),
            compacted_from: None,
            card: None,
        }
    }

    fn header(card: &str) -> &str {
        card.strip_prefix("---\n")
            .and_then(|rest| rest.split_once("\n---\n"))
            .map(|(yaml, _)| yaml)
            .expect("YAML front matter")
    }

    #[test]
    fn the_header_has_metadata_and_a_config_per_table_with_rows() {
        let m = manifest(vec![
            file(TableKind::Captions, "captions", 1_500),
            file(TableKind::Samples, "train", 900),
            file(TableKind::Samples, "val", 40),
            file(TableKind::Samples, "validation", 60),
            file(TableKind::Samples, "test", 0),
            file(TableKind::Rejected, "rejected", 0),
        ]);
        let metadata = CardMetadata {
            license: Some("cc-by-4.0".into()),
            source_datasets: vec!["flickr30k".into()],
            ..CardMetadata::default()
        };
        let card = render_card(&m, None, &metadata);
        let p = |split: &str, rows: u64| file(TableKind::Samples, split, rows).path;
        let captions = file(TableKind::Captions, "captions", 1_500).path;
        // 1,000 samples (not the 1,500 captions) size the dataset; the `val` shard of an earlier
        // version is listed under `validation`; the empty test shard and the empty ledger are
        // left out.
        let expected = format!(
            "license: \"cc-by-4.0\"\nlanguage:\n- \"en\"\ntask_categories:\n- \"image-to-text\"\n\
             size_categories:\n- \"1K<n<10K\"\nsource_datasets:\n- \"flickr30k\"\n\
             configs:\n\
             - config_name: captions\n  data_files:\n  - \"{captions}\"\n\
             - config_name: samples\n  default: true\n  data_files:\n\
             \x20 - split: \"train\"\n    path:\n    - \"{}\"\n\
             \x20 - split: \"validation\"\n    path:\n    - \"{}\"\n    - \"{}\"",
            p("train", 900),
            p("val", 40),
            p("validation", 60),
        );
        assert_eq!(header(&card), expected);
        assert!(
            card.contains("| samples | validation | 100 | 2 |"),
            "{card}"
        );
        assert!(card.contains("| samples | test | 0 | 1 |"), "{card}");
        assert!(card.contains("| rejected | - | 0 | 1 |"), "{card}");
        assert!(card.contains("| captions | - | 1500 | 1 |"), "{card}");
    }

    #[test]
    fn without_samples_the_first_input_table_is_the_default_and_no_licence_is_unknown() {
        let m = manifest(vec![
            file(TableKind::Images, "images", 0),
            file(TableKind::Captions, "captions", 12),
            file(TableKind::Rejected, "rejected", 3),
        ]);
        let yaml = header(&render_card(&m, None, &CardMetadata::default())).to_string();
        assert!(yaml.starts_with("license: \"unknown\"\n"), "{yaml}");
        assert!(!yaml.contains("source_datasets"), "{yaml}");
        assert!(yaml.contains("size_categories:\n- \"n<1K\"\n"), "{yaml}");
        assert!(!yaml.contains("config_name: images"), "{yaml}");
        assert!(
            yaml.contains("- config_name: captions\n  default: true\n"),
            "{yaml}"
        );
        assert!(
            yaml.contains("- config_name: rejected\n  data_files:\n"),
            "{yaml}"
        );

        // Only an empty ledger: no configs at all.
        let m = manifest(vec![file(TableKind::Rejected, "rejected", 0)]);
        let yaml = header(&render_card(&m, None, &CardMetadata::default())).to_string();
        assert!(!yaml.contains("configs:"), "{yaml}");
    }
}
