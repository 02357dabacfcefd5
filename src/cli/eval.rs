//! `capflow eval captions`: BLEU-1..4, CIDEr-D and D-1/D-2 of hypothesis captions against
//! COCO-style references, printed as one JSON object keyed as pycocoevalcap names its metrics.
//! `capflow eval controls`: the control metrics (LP, L, noun IoU, Hal, self-CIDEr, H, ...) of a
//! captions file against the controls of a dataset's samples.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::{Map, Value};

use super::out::{out, outln};
use crate::error::{Error, Result};
use crate::export::samples::SampleData;
use crate::metrics::control_eval::{evaluate_captions, EvalReport, GroupMetrics};
use crate::metrics::generated::{
    pair_captions, read_generated_captions, CaptionsFormat, UnmatchedCaption,
};
use crate::metrics::{bleu, cider, diversity, EvalImage, Tokenizer};
use crate::text::tokenize::tokenize;

#[derive(Debug, clap::Args)]
pub struct EvalArgs {
    #[command(subcommand)]
    pub command: EvalCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum EvalCommand {
    /// Score hypothesis captions against reference captions (BLEU-1..4, CIDEr-D, D-1, D-2).
    Captions(CaptionsArgs),
    /// Score generated captions against the controls of a dataset's samples (LP, L, noun IoU,
    /// Hal, self-CIDEr, G, H, D-1/D-2, CIDEr-D, BLEU).
    Controls(ControlsArgs),
    /// Greedy-decode a trained model under the data's controls and score it (feature `train`).
    #[cfg(feature = "train")]
    Model(crate::cli::train::EvalModelArgs),
}

#[derive(Debug, clap::Args)]
pub struct CaptionsArgs {
    /// References: a JSON object `{image_id: [caption, ...]}`.
    #[arg(long)]
    pub refs: PathBuf,
    /// Hypotheses: `{image_id: [caption]}` or COCO results `[{"image_id": .., "caption": ..}]`.
    #[arg(long)]
    pub hyps: PathBuf,
    /// How captions are split into words before scoring.
    #[arg(long, value_enum, default_value_t = Tokenizer::Whitespace)]
    pub tokenize: Tokenizer,
}

#[derive(Debug, clap::Args)]
pub struct ControlsArgs {
    /// capflow dataset directory whose samples hold the controls (repeatable).
    #[arg(long = "data", required = true)]
    pub data: Vec<PathBuf>,
    /// Generated captions: records with `caption` and `sample_id` and/or `image_id`, as JSON
    /// Lines (.jsonl), a JSON array (.json) or Parquet (.parquet).
    #[arg(long)]
    pub captions: PathBuf,
    /// The captions file's layout (default: from its extension).
    #[arg(long, value_enum)]
    pub format: Option<CaptionsFormat>,
    /// Evaluate samples of these splits only (repeatable; default: all).
    #[arg(long = "split")]
    pub splits: Vec<String>,
    /// Evaluate samples of these methods only (repeatable; default: all).
    #[arg(long = "method")]
    pub methods: Vec<String>,
    /// GloVe/word2vec text file for noun similarity (default: PPMI vectors from the data).
    #[arg(long)]
    pub vectors: Option<PathBuf>,
    /// Count and list captions whose sample or image is not in the data instead of failing.
    #[arg(long)]
    pub allow_unmatched: bool,
    /// Print the metrics as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Also write the full report, with every scored caption, to this JSON file.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// What `capflow eval controls` evaluates.
#[derive(Clone, Debug, Default)]
pub struct ControlsOptions {
    pub format: Option<CaptionsFormat>,
    pub splits: Vec<String>,
    pub methods: Vec<String>,
    pub vectors: Option<PathBuf>,
    pub allow_unmatched: bool,
}

/// The most unmatched records a report lists (all are counted).
pub const UNMATCHED_LISTED: usize = 20;

/// `capflow eval controls`' report: how the captions file paired with the data, and the metrics
/// of the paired captions.
#[derive(Clone, Debug, Serialize)]
pub struct ControlsEvaluation {
    pub captions_file: String,
    /// Records in the captions file.
    pub records: usize,
    /// Records paired with a selected sample (the captions scored).
    pub matched: usize,
    /// Records whose sample is in the data but outside the selected splits and methods.
    pub outside_selection: usize,
    /// Records whose sample or image is not in the data (with `--allow-unmatched`).
    pub unmatched: usize,
    /// The first [`UNMATCHED_LISTED`] of them.
    pub unmatched_records: Vec<UnmatchedCaption>,
    /// Samples in the selected splits and methods.
    pub samples_selected: usize,
    pub samples_without_caption: usize,
    #[serde(flatten)]
    pub report: EvalReport,
}

/// Reads the datasets and the captions file, pairs them and scores the pairs.
pub fn evaluate_controls_files(
    data_dirs: &[PathBuf],
    captions: &Path,
    options: &ControlsOptions,
) -> Result<ControlsEvaluation> {
    let data = SampleData::load(data_dirs)?;
    let records = read_generated_captions(captions, options.format)?;
    let selected = |s: &crate::schema::SampleRow| {
        crate::schema::split_selected(&options.splits, &s.split)
            && (options.methods.is_empty() || options.methods.contains(&s.method))
    };
    let pairing = pair_captions(
        captions,
        records,
        &data.samples,
        selected,
        options.allow_unmatched,
    )?;
    if pairing.samples.is_empty() {
        return Err(Error::record(
            captions.display().to_string(),
            "top level",
            format!(
                "no caption answers a selected sample ({} records: {} outside the selected \
                 splits {:?} and methods {:?}, {} unmatched)",
                pairing.records,
                pairing.outside_selection,
                options.splits,
                options.methods,
                pairing.unmatched.len()
            ),
        ));
    }
    let tokens: Vec<Vec<String>> = pairing.captions.iter().map(|c| tokenize(c)).collect();
    let report = evaluate_captions(&data, &pairing.samples, &tokens, options.vectors.as_deref())?;
    let selected_count = data.samples.iter().filter(|s| selected(s)).count();
    Ok(ControlsEvaluation {
        captions_file: captions.display().to_string(),
        records: pairing.records,
        matched: pairing.samples.len(),
        outside_selection: pairing.outside_selection,
        unmatched: pairing.unmatched.len(),
        unmatched_records: pairing
            .unmatched
            .into_iter()
            .take(UNMATCHED_LISTED)
            .collect(),
        samples_selected: selected_count,
        samples_without_caption: pairing.samples_without_caption,
        report,
    })
}

fn run_controls(args: ControlsArgs) -> Result<()> {
    let options = ControlsOptions {
        format: args.format,
        splits: args.splits,
        methods: args.methods,
        vectors: args.vectors,
        allow_unmatched: args.allow_unmatched,
    };
    let evaluation = evaluate_controls_files(&args.data, &args.captions, &options)?;
    if let Some(path) = &args.out {
        let text = serde_json::to_string_pretty(&evaluation)
            .map_err(|e| Error::invalid("report", e.to_string()))?;
        std::fs::write(path, text).map_err(|e| Error::io(path, e))?;
    }
    if args.json {
        let mut summary = serde_json::to_value(&evaluation)
            .map_err(|e| Error::invalid("report", e.to_string()))?;
        if let Some(map) = summary.as_object_mut() {
            map.remove("predictions");
        }
        let text = serde_json::to_string_pretty(&summary)
            .map_err(|e| Error::invalid("report", e.to_string()))?;
        outln!("{text}")
    } else {
        out!("{}", controls_table(&evaluation))
    }
}

fn cell(value: Option<f64>, decimals: usize) -> String {
    value.map_or_else(|| "-".to_string(), |v| format!("{v:.decimals$}"))
}

fn group_rows(out: &mut String, title: &str, groups: &[GroupMetrics]) {
    let _ = writeln!(
        out,
        "\n{title:<14} {:>7} {:>7} {:>7} {:>7} {:>7}",
        "samples", "IoU", "Hal", "LP", "L"
    );
    for g in groups.iter().filter(|g| g.samples > 0) {
        let _ = writeln!(
            out,
            "{:<14} {:>7} {:>7} {:>7} {:>7} {:>7}",
            g.group,
            g.samples,
            cell(g.iou, 4),
            cell(g.hal, 4),
            cell(g.lp, 2),
            cell(g.l, 2)
        );
    }
}

/// The text report of `capflow eval controls`.
pub fn controls_table(e: &ControlsEvaluation) -> String {
    let r = &e.report;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{}: {} of {} captions matched to samples ({} outside the selected splits and methods, \
         {} unmatched); {} of {} selected samples have no caption",
        e.captions_file,
        e.matched,
        e.records,
        e.outside_selection,
        e.unmatched,
        e.samples_without_caption,
        e.samples_selected
    );
    for u in &e.unmatched_records {
        let _ = writeln!(out, "  unmatched {}: {}", u.record, u.reason);
    }
    if e.unmatched > e.unmatched_records.len() {
        let _ = writeln!(
            out,
            "  ... and {} more unmatched",
            e.unmatched - e.unmatched_records.len()
        );
    }
    let _ = writeln!(out, "word vectors: {}\n", r.word_vectors);
    let bleu = r.bleu.map_or_else(
        || "-".to_string(),
        |b| {
            b.iter()
                .map(|x| format!("{x:.4}"))
                .collect::<Vec<_>>()
                .join(" / ")
        },
    );
    let rows = [
        ("samples", r.samples.to_string()),
        ("images", r.images.to_string()),
        ("LP (%)", format!("{:.2}", r.lp)),
        ("L (words)", format!("{:.2}", r.l)),
        ("IoU", format!("{:.4}", r.iou)),
        ("Hal", cell(r.hal, 4)),
        ("G", cell(r.g, 4)),
        ("self-CIDEr", cell(r.self_cider, 4)),
        ("H", cell(r.h, 4)),
        ("D-1", format!("{:.4}", r.d1)),
        ("D-2", format!("{:.4}", r.d2)),
        ("CIDEr-D", cell(r.cider_d, 4)),
        ("BLEU-1..4", bleu),
    ];
    let _ = writeln!(out, "{:<14} value", "metric");
    for (name, value) in rows {
        let _ = writeln!(out, "{name:<14} {value}");
    }
    group_rows(&mut out, "coverage band", &r.by_coverage);
    group_rows(&mut out, "length level", &r.by_level);
    out
}

pub fn run(args: EvalArgs) -> Result<()> {
    match args.command {
        EvalCommand::Captions(args) => {
            let report = evaluate_caption_files(&args.refs, &args.hyps, args.tokenize)?;
            let text = serde_json::to_string_pretty(&report)
                .map_err(|e| Error::invalid("metrics report", e.to_string()))?;
            outln!("{text}")
        }
        EvalCommand::Controls(args) => run_controls(args),
        #[cfg(feature = "train")]
        EvalCommand::Model(args) => crate::cli::train::run_eval_model(args),
    }
}

/// Reads the two files, tokenises and scores; the JSON object that `capflow eval captions`
/// prints. Images are those of the hypotheses (as COCO's evaluation does); each must have
/// references.
pub fn evaluate_caption_files(
    refs_path: &Path,
    hyps_path: &Path,
    tokenizer: Tokenizer,
) -> Result<Map<String, Value>> {
    let references = read_references(refs_path)?;
    let hypotheses = read_hypotheses(hyps_path)?;
    let mut images = Vec::with_capacity(hypotheses.len());
    for (image_id, caption) in hypotheses {
        let refs = references.get(&image_id).ok_or_else(|| {
            Error::record(
                hyps_path.display().to_string(),
                format!("image {image_id}"),
                format!("no references for this image in {}", refs_path.display()),
            )
        })?;
        images.push(EvalImage::new(
            image_id,
            tokenizer.tokenize(&caption),
            refs.iter().map(|r| tokenizer.tokenize(r)).collect(),
        ));
    }
    let bleu = bleu::corpus_bleu(&images)?;
    let cider = cider::cider_d(&images)?;
    let hyp_words: Vec<Vec<String>> = images.iter().map(|i| i.hypothesis.clone()).collect();
    let mut out = Map::new();
    for (k, score) in bleu.corpus.iter().enumerate() {
        out.insert(format!("Bleu_{}", k + 1), number(*score)?);
    }
    out.insert("CIDEr".to_string(), number(cider.corpus)?);
    out.insert(
        "D-1".to_string(),
        number(diversity::distinct_n(&hyp_words, 1))?,
    );
    out.insert(
        "D-2".to_string(),
        number(diversity::distinct_n(&hyp_words, 2))?,
    );
    Ok(out)
}

fn number(x: f64) -> Result<Value> {
    serde_json::Number::from_f64(x)
        .map(Value::Number)
        .ok_or_else(|| Error::invalid("metric value", format!("{x} is not a finite number")))
}

fn read_json(path: &Path) -> Result<Value> {
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    serde_json::from_reader(std::io::BufReader::new(file)).map_err(|e| {
        // Reading failed (a directory, a failing disk): an I/O error, not bad JSON.
        if e.is_io() {
            return Error::io(path, e.into());
        }
        Error::record(
            path.display().to_string(),
            format!("line {} column {}", e.line(), e.column()),
            format!("not valid JSON: {e}"),
        )
    })
}

/// COCO image ids are numbers in results files and strings as object keys; both become the
/// decimal string.
fn image_id_key(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn read_references(path: &Path) -> Result<HashMap<String, Vec<String>>> {
    let file = path.display().to_string();
    let Value::Object(map) = read_json(path)? else {
        return Err(Error::record(
            file,
            "top level",
            "references must be a JSON object {image_id: [caption, ...]}",
        ));
    };
    let mut out = HashMap::with_capacity(map.len());
    for (image_id, captions) in map {
        let list = captions.as_array().ok_or_else(|| {
            Error::record(
                &file,
                format!("image {image_id}"),
                "expected an array of caption strings",
            )
        })?;
        if list.is_empty() {
            return Err(Error::record(
                &file,
                format!("image {image_id}"),
                "has no reference captions",
            ));
        }
        let captions = list
            .iter()
            .enumerate()
            .map(|(i, c)| {
                c.as_str().map(str::to_string).ok_or_else(|| {
                    Error::record(
                        &file,
                        format!("image {image_id}, caption {i}"),
                        "caption is not a string",
                    )
                })
            })
            .collect::<Result<Vec<_>>>()?;
        out.insert(image_id, captions);
    }
    Ok(out)
}

/// Hypotheses in file order, one caption per image.
fn read_hypotheses(path: &Path) -> Result<Vec<(String, String)>> {
    let file = path.display().to_string();
    let mut out: Vec<(String, String)> = Vec::new();
    match read_json(path)? {
        Value::Object(map) => {
            for (image_id, captions) in map {
                let caption = match captions.as_array().map(Vec::as_slice) {
                    Some([Value::String(c)]) => c.clone(),
                    _ => {
                        return Err(Error::record(
                            &file,
                            format!("image {image_id}"),
                            "expected an array holding exactly one caption string",
                        ))
                    }
                };
                out.push((image_id, caption));
            }
        }
        Value::Array(results) => {
            let mut seen = std::collections::HashSet::new();
            for (i, result) in results.iter().enumerate() {
                let record = format!("result {i}");
                let image_id = result
                    .get("image_id")
                    .and_then(image_id_key)
                    .ok_or_else(|| {
                        Error::record(&file, &record, "missing or non-scalar `image_id`")
                    })?;
                let caption = result
                    .get("caption")
                    .and_then(Value::as_str)
                    .ok_or_else(|| {
                        Error::record(&file, &record, "missing or non-string `caption`")
                    })?;
                if !seen.insert(image_id.clone()) {
                    return Err(Error::record(
                        &file,
                        &record,
                        format!("image {image_id} has more than one caption"),
                    ));
                }
                out.push((image_id, caption.to_string()));
            }
        }
        _ => {
            return Err(Error::record(
                file,
                "top level",
                "hypotheses must be {image_id: [caption]} or [{image_id, caption}, ...]",
            ))
        }
    }
    if out.is_empty() {
        return Err(Error::record(file, "top level", "no hypotheses"));
    }
    Ok(out)
}
