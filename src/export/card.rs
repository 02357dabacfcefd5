//! The dataset card (`README.md`): a Hugging Face `configs:` YAML header naming every table's
//! data files, then what the dataset is, its counts and its schemas.
//!
//! One config per table (`config_name` = table name); within it one `split` entry per shard
//! group, listing the exact files of this version (not a glob, so that files of another version
//! can never be picked up).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use arrow::datatypes::{DataType, Field};

use super::manifest::Manifest;
use crate::schema::TableKind;

/// Renders the card for `manifest`, with `description` as its opening paragraph when given.
pub fn render_card(manifest: &Manifest, description: Option<&str>) -> String {
    let mut out = String::new();
    render_header(&mut out, manifest);
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

fn render_header(out: &mut String, manifest: &Manifest) {
    out.push_str("---\nconfigs:\n");
    let default = default_table(manifest);
    for kind in TableKind::ALL {
        let mut splits: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for file in manifest.table_files(kind) {
            splits.entry(&file.split).or_default().push(&file.path);
        }
        if splits.is_empty() {
            continue;
        }
        let _ = writeln!(out, "- config_name: {}", kind.name());
        if Some(kind) == default {
            out.push_str("  default: true\n");
        }
        out.push_str("  data_files:\n");
        for (split, paths) in splits {
            let _ = writeln!(out, "  - split: {split}\n    path:");
            for path in paths {
                // Paths are `data/<split>-NNNNN-of-NNNNN-<hex>.parquet`: plain YAML scalars,
                // quoted anyway so that no split name can be read as another YAML type.
                let _ = writeln!(out, "    - \"{path}\"");
            }
        }
    }
    out.push_str("---\n\n");
}

/// The config loaded when none is named: the augmented samples when present, else the first
/// table with rows.
fn default_table(manifest: &Manifest) -> Option<TableKind> {
    let present = |k: TableKind| manifest.table_files(k).any(|f| f.rows > 0);
    if present(TableKind::Samples) {
        return Some(TableKind::Samples);
    }
    TableKind::ALL
        .into_iter()
        .find(|k| *k != TableKind::Rejected && present(*k))
        .or(Some(TableKind::Rejected))
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
        if let Some(summary) = manifest.tables.get(kind.name()) {
            for (split, rows) in &summary.splits {
                let files = manifest
                    .table_files(kind)
                    .filter(|f| &f.split == split)
                    .count();
                let _ = writeln!(out, "| {} | {split} | {rows} | {files} |", kind.name());
            }
        }
    }
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
