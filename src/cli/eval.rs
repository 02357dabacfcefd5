//! `capflow eval captions`: BLEU-1..4, CIDEr-D and D-1/D-2 of hypothesis captions against
//! COCO-style references, printed as one JSON object keyed as pycocoevalcap names its metrics.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::metrics::{bleu, cider, diversity, EvalImage, Tokenizer};

#[derive(Debug, clap::Args)]
pub struct EvalArgs {
    #[command(subcommand)]
    pub command: EvalCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum EvalCommand {
    /// Score hypothesis captions against reference captions (BLEU-1..4, CIDEr-D, D-1, D-2).
    Captions(CaptionsArgs),
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

pub fn run(args: EvalArgs) -> Result<()> {
    match args.command {
        EvalCommand::Captions(args) => {
            let report = evaluate_caption_files(&args.refs, &args.hyps, args.tokenize)?;
            let text = serde_json::to_string_pretty(&report)
                .map_err(|e| Error::invalid("metrics report", e.to_string()))?;
            println!("{text}");
            Ok(())
        }
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
