//! Captions files: captions a model generated, one per sample or image, read for
//! `capflow eval controls` and paired with the samples whose controls they answer.
//!
//! A captions file is a table of records with the fields
//!
//! | field       | type             |                                                        |
//! |-------------|------------------|--------------------------------------------------------|
//! | `caption`   | string           | required: the generated caption                        |
//! | `sample_id` | string           | the dataset sample whose control signal was asked      |
//! | `image_id`  | string or number | the image (COCO ids may be numbers)                    |
//!
//! and at least one of `sample_id` and `image_id`; other fields are ignored. Three layouts hold
//! it: JSON Lines (`.jsonl`, `.ndjson`: one object a line, blank lines skipped), a JSON array of
//! objects (`.json`, COCO's results layout) and Parquet (`.parquet`, one row a record, the fields
//! as columns).
//!
//! Pairing ([`pair_captions`]): a record with a `sample_id` answers that sample (its `image_id`,
//! when given too, must be the sample's image); a record with only an `image_id` answers the
//! image's one selected sample, and is refused when the image has several (the file must then
//! say which). A sample answered twice is an error. Records for samples or images that are in
//! the data but outside the selected splits and methods are counted and left out. Records whose
//! sample or image is not in the data at all are an error naming the record, or, when allowed,
//! counted and listed as unmatched: no record is ever dropped without being counted.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use serde::Serialize;
use serde_json::Value;

use crate::error::{Error, Result};
use crate::schema::SampleRow;

/// The layout of a captions file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum CaptionsFormat {
    /// JSON Lines: one `{"sample_id", "image_id", "caption"}` object a line.
    Jsonl,
    /// A JSON array of such objects (COCO results).
    Json,
    /// A Parquet file with `caption` and `sample_id` and/or `image_id` columns.
    Parquet,
}

impl CaptionsFormat {
    /// The layout a file's extension names.
    pub fn from_path(path: &Path) -> Option<CaptionsFormat> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        match ext.as_str() {
            "jsonl" | "ndjson" => Some(CaptionsFormat::Jsonl),
            "json" => Some(CaptionsFormat::Json),
            "parquet" => Some(CaptionsFormat::Parquet),
            _ => None,
        }
    }
}

/// One record of a captions file.
#[derive(Clone, Debug, PartialEq)]
pub struct GeneratedCaption {
    /// Where the record is: `line 3`, `result 2`, `row 7`.
    pub record: String,
    pub sample_id: Option<String>,
    pub image_id: Option<String>,
    pub caption: String,
}

/// Reads a captions file in `format`, or in the layout its extension names.
pub fn read_generated_captions(
    path: &Path,
    format: Option<CaptionsFormat>,
) -> Result<Vec<GeneratedCaption>> {
    let file = path.display().to_string();
    let Some(format) = format.or_else(|| CaptionsFormat::from_path(path)) else {
        // A missing file is missing whatever its name (exit 4, as for any input).
        std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
        return Err(Error::Usage(format!(
            "{file}: cannot tell the captions layout from the extension; name the file \
             .jsonl, .json or .parquet, or pass --format"
        )));
    };
    let mut out = Vec::new();
    match format {
        CaptionsFormat::Jsonl => {
            let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
            for (i, line) in text.lines().enumerate() {
                if line.trim().is_empty() {
                    continue;
                }
                let record = format!("line {}", i + 1);
                let value: Value = serde_json::from_str(line).map_err(|e| {
                    Error::record(&file, &record, format!("not a JSON object: {e}"))
                })?;
                out.push(caption_record(&file, record, &value)?);
            }
        }
        CaptionsFormat::Json => {
            let reader =
                std::io::BufReader::new(std::fs::File::open(path).map_err(|e| Error::io(path, e))?);
            let value: Value = serde_json::from_reader(reader).map_err(|e| {
                // Reading failed (a directory, a failing disk): an I/O error, not bad JSON.
                if e.is_io() {
                    return Error::io(path, e.into());
                }
                Error::record(
                    &file,
                    format!("line {} column {}", e.line(), e.column()),
                    format!("not valid JSON: {e}"),
                )
            })?;
            let Value::Array(results) = value else {
                return Err(Error::record(
                    &file,
                    "top level",
                    "expected an array of {\"sample_id\", \"image_id\", \"caption\"} objects",
                ));
            };
            for (i, value) in results.iter().enumerate() {
                out.push(caption_record(&file, format!("result {i}"), value)?);
            }
        }
        CaptionsFormat::Parquet => {
            crate::graph::gbc::read_parquet_records(path, |row, value| {
                let record = format!("row {row}");
                let value = value.map_err(|reason| Error::record(&file, &record, reason))?;
                out.push(caption_record(&file, record, &value)?);
                Ok(())
            })?;
        }
    }
    if out.is_empty() {
        return Err(Error::record(file, "top level", "no captions"));
    }
    Ok(out)
}

/// An id field: a string, or a number as its decimal text; `None` when absent or null.
fn id_field(file: &str, record: &str, value: &Value, field: &str) -> Result<Option<String>> {
    match value.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(Value::Number(n)) => Ok(Some(n.to_string())),
        Some(other) => Err(Error::record(
            file,
            record,
            format!("`{field}` must be a string or a number, not {other}"),
        )),
    }
}

fn caption_record(file: &str, record: String, value: &Value) -> Result<GeneratedCaption> {
    if !value.is_object() {
        return Err(Error::record(file, &record, "expected a JSON object"));
    }
    let sample_id = id_field(file, &record, value, "sample_id")?;
    let image_id = id_field(file, &record, value, "image_id")?;
    if sample_id.is_none() && image_id.is_none() {
        return Err(Error::record(
            file,
            &record,
            "needs a `sample_id` or an `image_id`",
        ));
    }
    let caption = match value.get("caption") {
        Some(Value::String(c)) => c.clone(),
        _ => {
            return Err(Error::record(
                file,
                &record,
                "missing or non-string `caption`",
            ))
        }
    };
    Ok(GeneratedCaption {
        record,
        sample_id,
        image_id,
        caption,
    })
}

/// A record no sample answers to.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct UnmatchedCaption {
    pub record: String,
    pub reason: String,
}

/// Captions paired with the samples they answer.
#[derive(Clone, Debug, Default)]
pub struct Pairing {
    /// The answered samples, in data order.
    pub samples: Vec<SampleRow>,
    /// `captions[k]` answers `samples[k]`.
    pub captions: Vec<String>,
    /// Records of the file.
    pub records: usize,
    /// Records whose sample is in the data but not in the selected splits and methods.
    pub outside_selection: usize,
    /// Records whose sample or image is not in the data (only when allowed).
    pub unmatched: Vec<UnmatchedCaption>,
    /// Selected samples no record answers.
    pub samples_without_caption: usize,
}

/// Pairs the records of the captions file `file` with `samples` (every sample of the data);
/// `selected(sample)` says which are evaluated. Records whose sample or image is not in the
/// data are an error unless `allow_unmatched`.
pub fn pair_captions(
    file: &Path,
    records: Vec<GeneratedCaption>,
    samples: &[SampleRow],
    selected: impl Fn(&SampleRow) -> bool,
    allow_unmatched: bool,
) -> Result<Pairing> {
    let file = file.display().to_string();
    let mut by_sample: HashMap<&str, usize> = HashMap::new();
    let mut by_image: HashMap<&str, Vec<usize>> = HashMap::new();
    let mut images: HashSet<&str> = HashSet::new();
    for (k, sample) in samples.iter().enumerate() {
        images.insert(&sample.image_id);
        by_sample.entry(&sample.sample_id).or_insert(k);
        if selected(sample) {
            by_image.entry(&sample.image_id).or_default().push(k);
        }
    }
    let mut pairing = Pairing {
        records: records.len(),
        ..Pairing::default()
    };
    // Sample index → (record, caption).
    let mut answered: HashMap<usize, (String, String)> = HashMap::new();
    for row in records {
        let target = match (&row.sample_id, &row.image_id) {
            (Some(sample_id), image_id) => match by_sample.get(sample_id.as_str()) {
                Some(&k) => {
                    if let Some(image_id) = image_id {
                        if *image_id != samples[k].image_id {
                            return Err(Error::record(
                                &file,
                                &row.record,
                                format!(
                                    "sample {sample_id} is of image {}, not of image {image_id}",
                                    samples[k].image_id
                                ),
                            ));
                        }
                    }
                    Ok(k)
                }
                None => Err(format!("no sample {sample_id} in the data")),
            },
            (None, Some(image_id)) => match by_image.get(image_id.as_str()).map(Vec::as_slice) {
                Some([k]) => Ok(*k),
                Some(many) => {
                    return Err(Error::record(
                        &file,
                        &row.record,
                        format!(
                            "image {image_id} has {} selected samples ({}, ...); give the \
                             `sample_id` each caption answers",
                            many.len(),
                            samples[many[0]].sample_id
                        ),
                    ))
                }
                None if images.contains(image_id.as_str()) => {
                    pairing.outside_selection += 1;
                    continue;
                }
                None => Err(format!("no image {image_id} in the data")),
            },
            (None, None) => Err("no `sample_id` or `image_id`".to_string()),
        };
        let k = match target {
            Ok(k) => k,
            Err(reason) if allow_unmatched => {
                pairing.unmatched.push(UnmatchedCaption {
                    record: row.record,
                    reason,
                });
                continue;
            }
            Err(reason) => {
                return Err(Error::record(
                    &file,
                    &row.record,
                    format!("{reason} (--allow-unmatched counts such captions instead)"),
                ))
            }
        };
        if !selected(&samples[k]) {
            pairing.outside_selection += 1;
            continue;
        }
        if let Some((first, _)) = answered.get(&k) {
            return Err(Error::record(
                &file,
                &row.record,
                format!(
                    "sample {} already has a caption ({first})",
                    samples[k].sample_id
                ),
            ));
        }
        answered.insert(k, (row.record, row.caption));
    }
    let mut pairs: Vec<(usize, String)> = answered
        .into_iter()
        .map(|(k, (_, caption))| (k, caption))
        .collect();
    pairs.sort_unstable_by_key(|(k, _)| *k);
    for (k, caption) in pairs {
        pairing.samples.push(samples[k].clone());
        pairing.captions.push(caption);
    }
    let selected_count = samples.iter().filter(|s| selected(s)).count();
    pairing.samples_without_caption = selected_count - pairing.samples.len();
    Ok(pairing)
}
