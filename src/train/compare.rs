//! One report over several training variants of the same data (`capflow train compare`):
//! trusted samples only, trusted + generated, and trusted + generated with the curriculum, each
//! evaluated under the same controls, overall, by coverage band and by length level.

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;
use tch::Device;

use super::config::TrainConfig;
use super::data::TrainingData;
use super::eval::{evaluate_checkpoint, EvalOptions, EvalReport};
use super::run::{train_samples, JobOptions, TrainOutcome};
use crate::error::{Error, Result};

/// One variant's training and evaluation.
#[derive(Clone, Debug, Serialize)]
pub struct VariantReport {
    pub name: String,
    pub description: String,
    pub training: TrainOutcome,
    pub evaluation: EvalReport,
}

/// The variants: `original` (trusted methods only), `augmented` (every method, no curriculum),
/// `curriculum` (every method, CLID selection). A variant whose training set equals an earlier
/// one's (no generated samples in the data) is still run, and the report says so.
pub fn compare(
    data: &TrainingData,
    config: &TrainConfig,
    eval: &EvalOptions,
    out: &Path,
    device: Device,
) -> Result<Vec<VariantReport>> {
    std::fs::create_dir_all(out).map_err(|e| Error::io(out, e))?;
    let trusted = config.curriculum.trusted_methods.clone();
    let variants: [(&str, &str, Vec<String>, bool); 3] = [
        ("original", "trusted samples only", trusted, false),
        (
            "augmented",
            "trusted + generated samples",
            Vec::new(),
            false,
        ),
        (
            "curriculum",
            "trusted + generated samples with CLID data selection",
            Vec::new(),
            true,
        ),
    ];
    let mut reports = Vec::new();
    for (name, description, methods, curriculum) in variants {
        let mut variant = config.clone();
        variant.methods = methods;
        variant.curriculum.enabled = curriculum;
        let samples = data.select(&variant);
        let dir = out.join(name);
        let training = train_samples(
            &samples,
            &data.context,
            &variant,
            &dir,
            device,
            &JobOptions::default(),
        )?;
        let evaluation = evaluate_checkpoint(&dir, data, eval)?;
        reports.push(VariantReport {
            name: name.to_string(),
            description: description.to_string(),
            training,
            evaluation,
        });
    }
    let json = serde_json::to_string_pretty(&reports)
        .map_err(|e| Error::invalid("comparison report", e.to_string()))?;
    let path = out.join("compare.json");
    std::fs::write(&path, json).map_err(|e| Error::io(&path, e))?;
    let path = out.join("compare.md");
    std::fs::write(&path, render_markdown(&reports)).map_err(|e| Error::io(&path, e))?;
    Ok(reports)
}

fn cell(v: Option<f64>) -> String {
    v.map_or("–".to_string(), |v| format!("{v:.3}"))
}

/// The comparison as Markdown tables.
pub fn render_markdown(reports: &[VariantReport]) -> String {
    let mut out = String::from("# Training comparison\n\n");
    let _ = writeln!(
        out,
        "| variant | train samples | generated | iterations | final loss | LP % | L | IoU | Hal | G | sC | D-1 | D-2 | CIDEr-D | BLEU-4 | H |"
    );
    let _ = writeln!(
        out,
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for r in reports {
        let e = &r.evaluation;
        let t = &r.training;
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {:.1} | {:.2} | {:.3} | {} | {} | {} | {:.3} | {:.3} | {} | {} | {} |",
            r.name,
            t.samples,
            t.generated,
            t.iterations,
            cell(t.run.losses.last().copied()),
            e.lp,
            e.l,
            e.iou,
            cell(e.hal),
            cell(e.g),
            cell(e.self_cider),
            e.d1,
            e.d2,
            cell(e.cider_d),
            cell(e.bleu.map(|b| b[3])),
            cell(e.h),
        );
    }
    if reports.iter().all(|r| r.training.generated == 0) {
        out.push_str(
            "\nThe data holds no generated samples: the three variants train on the same \
             samples; the curriculum variant's final model is a separate run (its own \
             initialisation and data order) after its scoring runs.\n",
        );
    }
    out.push_str("\n## IoU / Hal by coverage band\n\n| band |");
    for r in reports {
        let _ = write!(out, " {} n | {} IoU | {} Hal |", r.name, r.name, r.name);
    }
    out.push_str("\n|---|");
    out.push_str(&"---|---|---|".repeat(reports.len()));
    out.push('\n');
    let bands = reports
        .first()
        .map_or(0, |r| r.evaluation.by_coverage.len());
    for b in 0..bands {
        let _ = write!(out, "| {} |", reports[0].evaluation.by_coverage[b].group);
        for r in reports {
            let g = &r.evaluation.by_coverage[b];
            let _ = write!(out, " {} | {} | {} |", g.samples, cell(g.iou), cell(g.hal));
        }
        out.push('\n');
    }
    out.push_str("\n## LP / L by length level\n\n| level |");
    for r in reports {
        let _ = write!(out, " {} n | {} LP % | {} L |", r.name, r.name, r.name);
    }
    out.push_str("\n|---|");
    out.push_str(&"---|---|---|".repeat(reports.len()));
    out.push('\n');
    let levels: std::collections::BTreeSet<String> = reports
        .iter()
        .flat_map(|r| r.evaluation.by_level.iter().map(|g| g.group.clone()))
        .collect();
    for level in levels {
        let _ = write!(out, "| {level} |");
        for r in reports {
            match r.evaluation.by_level.iter().find(|g| g.group == level) {
                Some(g) => {
                    let _ = write!(out, " {} | {} | {} |", g.samples, cell(g.lp), cell(g.l));
                }
                None => out.push_str(" 0 | – | – |"),
            }
        }
        out.push('\n');
    }
    out
}
