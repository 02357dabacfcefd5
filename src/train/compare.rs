//! One report over several training variants of the same data (`capflow train compare`):
//! trusted samples only, trusted + generated, and trusted + generated with the curriculum, each
//! with several seeds and the same optimizer steps, evaluated under the same controls, overall,
//! by coverage band and by length level, as mean ± standard deviation over the seeds.

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;
use tch::Device;

use super::config::TrainConfig;
use super::data::TrainingData;
use super::eval::{evaluate_checkpoint, EvalOptions, EvalReport};
use super::run::{train_samples, JobOptions, TrainOutcome};
use crate::error::{Error, Result};
use crate::select::curriculum::iteration_count;

/// One variant's training and evaluation with one seed.
#[derive(Clone, Debug, Serialize)]
pub struct VariantReport {
    pub name: String,
    pub description: String,
    pub seed: u64,
    pub training: TrainOutcome,
    pub evaluation: EvalReport,
}

/// The variants: `original` (trusted methods only), `augmented` (every method, no curriculum),
/// `curriculum` (every method, CLID selection), each trained with `seeds` seeds (the
/// configuration's seed, then the next ones). Every variant's final model takes the same
/// optimizer steps: the curriculum's `steps_per_iteration` becomes `steps / iterations`
/// (its scoring models' steps come on top and are reported). A variant whose training set
/// equals an earlier one's (no generated samples in the data) is still run, and the report says
/// so.
pub fn compare(
    data: &TrainingData,
    config: &TrainConfig,
    eval: &EvalOptions,
    out: &Path,
    device: Device,
    seeds: u32,
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
    for k in 0..u64::from(seeds.max(1)) {
        for (name, description, methods, curriculum) in &variants {
            let mut variant = config.clone();
            variant.seed = config.seed + k;
            variant.curriculum.seed = config.curriculum.seed + k;
            variant.methods = methods.clone();
            variant.curriculum.enabled = *curriculum;
            let samples = data.select(&variant);
            if *curriculum {
                let generated = samples
                    .iter()
                    .filter(|s| !variant.curriculum.is_trusted(&s.method))
                    .count();
                let iterations = iteration_count(generated, variant.curriculum.c_percent);
                variant.curriculum.steps_per_iteration =
                    (config.steps / u64::from(iterations.max(1))).max(1);
            }
            let dir = out.join(name).join(format!("seed-{}", variant.seed));
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
                seed: variant.seed,
                training,
                evaluation,
            });
        }
    }
    let json = serde_json::to_string_pretty(&reports)
        .map_err(|e| Error::invalid("comparison report", e.to_string()))?;
    let path = out.join("compare.json");
    std::fs::write(&path, json).map_err(|e| Error::io(&path, e))?;
    let path = out.join("compare.md");
    std::fs::write(&path, render_markdown(&reports)).map_err(|e| Error::io(&path, e))?;
    Ok(reports)
}

/// Mean and sample standard deviation (0 for one value) of the values present.
fn mean_sd(values: impl IntoIterator<Item = Option<f64>>) -> Option<(f64, f64)> {
    let values: Vec<f64> = values.into_iter().flatten().collect();
    if values.is_empty() {
        return None;
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let sd = if values.len() > 1 {
        (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
    } else {
        0.0
    };
    Some((mean, sd))
}

fn cell_sd(v: Option<(f64, f64)>, decimals: usize) -> String {
    v.map_or("–".to_string(), |(m, sd)| {
        format!("{m:.decimals$} ± {sd:.decimals$}")
    })
}

/// The reports of each variant, in the order variants first appear.
fn by_variant(reports: &[VariantReport]) -> Vec<Vec<&VariantReport>> {
    let mut groups: Vec<Vec<&VariantReport>> = Vec::new();
    for r in reports {
        match groups.iter_mut().find(|g| g[0].name == r.name) {
            Some(group) => group.push(r),
            None => groups.push(vec![r]),
        }
    }
    groups
}

/// The comparison as Markdown tables: per variant, the mean ± standard deviation over its seeds.
pub fn render_markdown(reports: &[VariantReport]) -> String {
    let groups = by_variant(reports);
    let mut out = String::from("# Training comparison\n\n");
    out.push_str(
        "Mean ± sample standard deviation over the seeds. Every final model takes the same \
         optimizer steps; the curriculum's two scoring models add theirs (\"scoring steps\").\n\n",
    );
    let _ = writeln!(
        out,
        "| variant | seeds | train samples | generated | steps | scoring steps | iterations | final loss | LP % | L | IoU | Hal | sC | D-2 | CIDEr-D | BLEU-4 | H |"
    );
    let _ = writeln!(
        out,
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for group in &groups {
        let first = &group[0].training;
        let metric =
            |f: &dyn Fn(&VariantReport) -> Option<f64>| mean_sd(group.iter().map(|r| f(r)));
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            group[0].name,
            group.len(),
            first.samples,
            first.generated,
            first.run.steps,
            first.scoring_runs.iter().map(|r| r.steps).sum::<u64>(),
            first.iterations,
            cell_sd(metric(&|r| r.training.run.losses.last().copied()), 3),
            cell_sd(metric(&|r| Some(r.evaluation.lp)), 1),
            cell_sd(metric(&|r| Some(r.evaluation.l)), 2),
            cell_sd(metric(&|r| Some(r.evaluation.iou)), 3),
            cell_sd(metric(&|r| r.evaluation.hal), 3),
            cell_sd(metric(&|r| r.evaluation.self_cider), 3),
            cell_sd(metric(&|r| Some(r.evaluation.d2)), 3),
            cell_sd(metric(&|r| r.evaluation.cider_d), 3),
            cell_sd(metric(&|r| r.evaluation.bleu.map(|b| b[3])), 3),
            cell_sd(metric(&|r| r.evaluation.h), 3),
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
    for group in &groups {
        let name = &group[0].name;
        let _ = write!(out, " {name} n | {name} IoU | {name} Hal |");
    }
    out.push_str("\n|---|");
    out.push_str(&"---|---|---|".repeat(groups.len()));
    out.push('\n');
    let bands = reports
        .first()
        .map_or(0, |r| r.evaluation.by_coverage.len());
    for b in 0..bands {
        let _ = write!(out, "| {} |", reports[0].evaluation.by_coverage[b].group);
        for group in &groups {
            let band = |r: &&VariantReport| r.evaluation.by_coverage.get(b).cloned();
            let samples = group.first().and_then(band).map_or(0, |g| g.samples);
            let iou = mean_sd(group.iter().map(|r| band(r).and_then(|g| g.iou)));
            let hal = mean_sd(group.iter().map(|r| band(r).and_then(|g| g.hal)));
            let _ = write!(
                out,
                " {samples} | {} | {} |",
                cell_sd(iou, 3),
                cell_sd(hal, 3)
            );
        }
        out.push('\n');
    }
    out.push_str("\n## LP / L by length level\n\n| level |");
    for group in &groups {
        let name = &group[0].name;
        let _ = write!(out, " {name} n | {name} LP % | {name} L |");
    }
    out.push_str("\n|---|");
    out.push_str(&"---|---|---|".repeat(groups.len()));
    out.push('\n');
    let levels: std::collections::BTreeSet<String> = reports
        .iter()
        .flat_map(|r| r.evaluation.by_level.iter().map(|g| g.group.clone()))
        .collect();
    for level in levels {
        let _ = write!(out, "| {level} |");
        for group in &groups {
            let at = |r: &&VariantReport| {
                r.evaluation
                    .by_level
                    .iter()
                    .find(|g| g.group == level)
                    .cloned()
            };
            let samples = group.first().and_then(at).map_or(0, |g| g.samples);
            let lp = mean_sd(group.iter().map(|r| at(r).and_then(|g| g.lp)));
            let l = mean_sd(group.iter().map(|r| at(r).and_then(|g| g.l)));
            let _ = write!(out, " {samples} | {} | {} |", cell_sd(lp, 1), cell_sd(l, 2));
        }
        out.push('\n');
    }
    out
}
