//! Relatedness labels and the released TSV layouts.
//!
//! The soft label of a (visual context, caption) pair is the cosine of their sentence vectors;
//! the binary label at threshold `th` is 1 when the soft label is at least `th` (the paper's
//! `th ≥ 0.2, 0.3, 0.4`). The dataset is released as tab-separated files with a header:
//!
//! - training (`train.tsv`): `id  id1  id2  visual  caption  is_related`, where in every released
//!   row `id1 = id + 1` and `id2 = id + 2`; capflow numbers its rows `id = 3k` so the three ids
//!   of all rows are distinct and keep that relation;
//! - test (`test.tsv`): `id  visual  caption`.
//!
//! Fields are written as they are (captions keep trailing spaces, as the released file does);
//! a field holding a tab, a quote or a line break is quoted the way Python's `csv` and pandas
//! read it (`"…"` with inner quotes doubled), so every file capflow writes parses back to the
//! same fields with `pandas.read_csv(sep='\t')`, which is how the reference trainer reads it.

use std::io::Write;
use std::path::Path;

use crate::error::{Error, Result};

/// The header of the training layout.
pub const TRAIN_HEADER: [&str; 6] = ["id", "id1", "id2", "visual", "caption", "is_related"];
/// The header of the test layout.
pub const TEST_HEADER: [&str; 3] = ["id", "visual", "caption"];

/// The binary label of a soft label at `threshold`.
pub fn binary_label(soft: f64, threshold: f64) -> u8 {
    u8::from(soft >= threshold)
}

/// One row of the training layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrainRow {
    pub id: u64,
    pub id1: u64,
    pub id2: u64,
    pub visual: String,
    pub caption: String,
    pub is_related: u8,
}

impl TrainRow {
    /// Row `k` of a file capflow writes: ids `3k`, `3k + 1`, `3k + 2`.
    pub fn numbered(k: u64, visual: &str, caption: &str, is_related: u8) -> Self {
        TrainRow {
            id: 3 * k,
            id1: 3 * k + 1,
            id2: 3 * k + 2,
            visual: visual.to_string(),
            caption: caption.to_string(),
            is_related,
        }
    }
}

/// One (visual context, caption) pair of either layout; `label` is present in the training one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PairRow {
    pub id: String,
    pub visual: String,
    pub caption: String,
    pub label: Option<u8>,
}

/// A field as Python's `csv` writes it with `delimiter='\t'` (minimal quoting).
fn field(value: &str) -> std::borrow::Cow<'_, str> {
    if value.contains(['\t', '"', '\n', '\r']) {
        format!("\"{}\"", value.replace('"', "\"\"")).into()
    } else {
        value.into()
    }
}

fn write_line(out: &mut impl Write, fields: &[&str]) -> std::io::Result<()> {
    let line: Vec<std::borrow::Cow<'_, str>> = fields.iter().map(|f| field(f)).collect();
    writeln!(out, "{}", line.join("\t"))
}

/// Writes the training layout, header first.
pub fn write_train(out: &mut impl Write, rows: &[TrainRow]) -> std::io::Result<()> {
    write_line(out, &TRAIN_HEADER)?;
    for row in rows {
        let ids = [row.id.to_string(), row.id1.to_string(), row.id2.to_string()];
        let label = row.is_related.to_string();
        write_line(
            out,
            &[&ids[0], &ids[1], &ids[2], &row.visual, &row.caption, &label],
        )?;
    }
    Ok(())
}

/// Writes the test layout (`id visual caption`), header first.
pub fn write_test(out: &mut impl Write, rows: &[PairRow]) -> std::io::Result<()> {
    write_line(out, &TEST_HEADER)?;
    for row in rows {
        write_line(out, &[&row.id, &row.visual, &row.caption])?;
    }
    Ok(())
}

/// The header of the soft-label layout capflow writes beside the binary files.
pub const SOFT_HEADER: [&str; 4] = ["id", "visual", "caption", "cosine"];

/// Writes `id visual caption cosine` rows, header first; the cosine is written as Python's
/// `repr` writes it (shortest round trip).
pub fn write_soft(out: &mut impl Write, rows: &[PairRow], soft: &[f64]) -> std::io::Result<()> {
    write_line(out, &SOFT_HEADER)?;
    for (row, &cosine) in rows.iter().zip(soft) {
        let cosine = super::rerank::python_float_repr(cosine);
        write_line(out, &[&row.id, &row.visual, &row.caption, &cosine])?;
    }
    Ok(())
}

/// Splits TSV text into records of fields (quoted fields may hold tabs and line breaks); the
/// line number where each record starts comes with it.
fn records(text: &str) -> std::result::Result<Records, (usize, String)> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    let mut line = 1usize;
    while chars.peek().is_some() {
        let start = line;
        let mut fields = Vec::new();
        let mut current = String::new();
        let mut at_field_start = true;
        loop {
            let Some(c) = chars.next() else {
                fields.push(std::mem::take(&mut current));
                break;
            };
            match c {
                '"' if at_field_start => {
                    loop {
                        match chars.next() {
                            Some('"') if chars.peek() == Some(&'"') => {
                                chars.next();
                                current.push('"');
                            }
                            Some('"') => break,
                            Some(c) => {
                                if c == '\n' {
                                    line += 1;
                                }
                                current.push(c);
                            }
                            None => return Err((start, "a quoted field is not closed".into())),
                        }
                    }
                    at_field_start = false;
                }
                '\t' => {
                    fields.push(std::mem::take(&mut current));
                    at_field_start = true;
                }
                '\n' => {
                    line += 1;
                    fields.push(std::mem::take(&mut current));
                    break;
                }
                '\r' if chars.peek() == Some(&'\n') => {}
                c => {
                    current.push(c);
                    at_field_start = false;
                }
            }
        }
        if !(fields.len() == 1 && fields[0].is_empty()) {
            out.push((start, fields));
        }
    }
    Ok(out)
}

/// A file's records, each with the line it starts on.
type Records = Vec<(usize, Vec<String>)>;

fn read_records(path: &Path) -> Result<Records> {
    let name = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let text = String::from_utf8(bytes).map_err(|e| {
        Error::record(
            &name,
            format!("byte {}", e.utf8_error().valid_up_to()),
            "not UTF-8 text",
        )
    })?;
    records(&text).map_err(|(line, reason)| Error::record(&name, format!("line {line}"), reason))
}

/// Reads a file of either layout (told apart by its header; the columns may come in any
/// order). Every row must have the header's number of fields and, with `is_related`, a label
/// of 0 or 1.
pub fn read_pairs(path: &Path) -> Result<Vec<PairRow>> {
    pairs_of(&path.display().to_string(), &read_records(path)?)
}

fn pairs_of(name: &str, records: &Records) -> Result<Vec<PairRow>> {
    let Some(((_, header), rows)) = records.split_first() else {
        return Err(Error::record(
            name,
            "line 1",
            "the file is empty; expected a header",
        ));
    };
    let column = |wanted: &str| header.iter().position(|h| h == wanted);
    let (Some(visual), Some(caption)) = (column("visual"), column("caption")) else {
        return Err(Error::record(
            name,
            "line 1",
            format!(
                "expected a header with `visual` and `caption` columns (`{}` or `{}`), found `{}`",
                TRAIN_HEADER.join(" "),
                TEST_HEADER.join(" "),
                header.join(" ")
            ),
        ));
    };
    let id = column("id");
    let label = column("is_related");
    rows.iter()
        .map(|(line, fields)| {
            let located = |reason: String| Error::record(name, format!("line {line}"), reason);
            if fields.len() != header.len() {
                return Err(located(format!(
                    "expected {} tab-separated fields, found {}",
                    header.len(),
                    fields.len()
                )));
            }
            let label = match label.map(|i| fields[i].trim()) {
                None => None,
                Some("0") => Some(0),
                Some("1") => Some(1),
                Some(other) => {
                    return Err(located(format!(
                        "`is_related` must be 0 or 1, found `{other}`"
                    )))
                }
            };
            Ok(PairRow {
                id: id.map(|i| fields[i].clone()).unwrap_or_default(),
                visual: fields[visual].clone(),
                caption: fields[caption].clone(),
                label,
            })
        })
        .collect()
}

/// Reads a training-layout file (exactly [`TRAIN_HEADER`]; the ids must be unsigned integers).
pub fn read_train(path: &Path) -> Result<Vec<TrainRow>> {
    let name = path.display().to_string();
    let records = read_records(path)?;
    match records.first() {
        Some((_, header)) if header.iter().map(String::as_str).eq(TRAIN_HEADER) => {}
        _ => {
            return Err(Error::record(
                &name,
                "line 1",
                format!("expected the header `{}`", TRAIN_HEADER.join("\\t")),
            ))
        }
    }
    let pairs = pairs_of(&name, &records)?;
    records[1..]
        .iter()
        .zip(pairs)
        .map(|((line, fields), pair)| {
            let number = |i: usize| {
                fields[i].trim().parse::<u64>().map_err(|_| {
                    Error::record(
                        &name,
                        format!("line {line}"),
                        format!(
                            "`{}` must be an unsigned integer, found `{}`",
                            TRAIN_HEADER[i], fields[i]
                        ),
                    )
                })
            };
            Ok(TrainRow {
                id: number(0)?,
                id1: number(1)?,
                id2: number(2)?,
                visual: pair.visual,
                caption: pair.caption,
                is_related: pair.label.unwrap_or(0),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_switch_at_the_threshold() {
        assert_eq!(binary_label(0.3, 0.3), 1);
        assert_eq!(binary_label(0.2999, 0.3), 0);
        assert_eq!(binary_label(-0.5, 0.2), 0);
    }

    #[test]
    fn awkward_fields_are_quoted_and_read_back() {
        let rows = [
            TrainRow::numbered(0, "dog frisbee", "a dog catches a frisbee ", 1),
            TrainRow::numbered(1, "cat", "a \"cat\"\tand\na line break", 0),
        ];
        let mut out = Vec::new();
        write_train(&mut out, &rows).expect("in memory");
        let text = String::from_utf8(out).expect("utf-8");
        assert!(text.starts_with(
            "id\tid1\tid2\tvisual\tcaption\tis_related\n0\t1\t2\tdog frisbee\ta dog catches a frisbee \t1\n"
        ));
        assert!(text.contains("3\t4\t5\tcat\t\"a \"\"cat\"\"\tand\na line break\"\t0\n"));
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("train.tsv");
        std::fs::write(&path, &text).expect("write");
        assert_eq!(read_train(&path).expect("valid file"), rows);
    }

    #[test]
    fn bad_rows_name_the_line() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("bad.tsv");
        std::fs::write(&path, "id\tvisual\tcaption\n1\tdog\ta dog\n2\tcat\n").expect("write");
        let err = read_pairs(&path).expect_err("short row").to_string();
        assert!(
            err.contains("line 3") && err.contains("expected 3"),
            "{err}"
        );
        std::fs::write(
            &path,
            "id\tid1\tid2\tvisual\tcaption\tis_related\n0\t1\t2\tv\tc\tyes\n",
        )
        .expect("write");
        let err = read_pairs(&path).expect_err("bad label").to_string();
        assert!(err.contains("line 2") && err.contains("0 or 1"), "{err}");
    }
}
