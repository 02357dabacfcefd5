//! One report over several training variants of the same data (`capflow train compare`):
//! trusted samples only, trusted + generated, and trusted + generated with the curriculum, each
//! with several seeds and the same optimizer steps, evaluated under the same controls, overall,
//! by coverage band and by length level, as mean ± standard deviation over the seeds. The
//! training sets can be cut down (at most so many trusted samples, generated samples at most a
//! share of them) to compare the variants on small training sets.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;
use tch::Device;

use super::config::TrainConfig;
use super::data::{shuffle, TrainingData};
use super::eval::{evaluate_checkpoint, EvalOptions, EvalReport};
use super::run::{train_samples, JobOptions, TrainOutcome};
use crate::error::{Error, Result};
use crate::schema::SampleRow;
use crate::seed::{splitmix64, SplitMix64};
use crate::select::curriculum::iteration_count;

/// A training variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Variant {
    /// Trusted samples only.
    Original,
    /// Trusted + generated samples.
    Augmented,
    /// Trusted + generated samples with CLID's data selection.
    Curriculum,
}

impl Variant {
    pub const ALL: [Variant; 3] = [Variant::Original, Variant::Augmented, Variant::Curriculum];

    pub fn name(self) -> &'static str {
        match self {
            Variant::Original => "original",
            Variant::Augmented => "augmented",
            Variant::Curriculum => "curriculum",
        }
    }

    fn description(self) -> &'static str {
        match self {
            Variant::Original => "trusted samples only",
            Variant::Augmented => "trusted + generated samples",
            Variant::Curriculum => "trusted + generated samples with CLID data selection",
        }
    }
}

/// Limits that cut each seed's training set down.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct TrainingLimits {
    /// At most this many trusted samples: the trusted samples of whole images, the images in a
    /// seeded order, the last image's first samples filling up to the limit; the generated
    /// samples are then those of the same images.
    pub max_trusted: Option<usize>,
    /// Generated samples at most this percent of the trusted ones (rounded), drawn without
    /// replacement in a seeded order.
    pub generated_percent: Option<f64>,
}

impl TrainingLimits {
    fn validate(&self) -> Result<()> {
        if self.max_trusted == Some(0) {
            return Err(Error::Usage("--max-train must be positive".into()));
        }
        if let Some(p) = self.generated_percent {
            if !p.is_finite() || p < 0.0 {
                return Err(Error::Usage(format!(
                    "--generated-percent must be a non-negative number, not {p}"
                )));
            }
        }
        Ok(())
    }
}

/// What `compare` runs besides the training configuration.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CompareOptions {
    /// Seeds per variant: the configuration's `seed` and `curriculum.seed`, then the next ones.
    pub seeds: u32,
    /// The variants, in report order.
    pub variants: Vec<Variant>,
    /// The generated methods the augmented and curriculum variants add to the trusted ones
    /// (empty: every method in the data).
    pub generated_methods: Vec<String>,
    pub limits: TrainingLimits,
}

impl Default for CompareOptions {
    fn default() -> Self {
        CompareOptions {
            seeds: 3,
            variants: Variant::ALL.to_vec(),
            generated_methods: Vec::new(),
            limits: TrainingLimits::default(),
        }
    }
}

/// One variant's training and evaluation with one seed.
#[derive(Clone, Debug, Serialize)]
pub struct VariantReport {
    pub name: String,
    pub description: String,
    pub seed: u64,
    /// Images the training samples come from.
    pub train_images: usize,
    pub training: TrainOutcome,
    pub evaluation: EvalReport,
}

/// Salts of the seeded orders of [`training_subset`], so they do not repeat the batch order's.
const IMAGE_ORDER_SALT: u64 = 0x696d_6167_6573;
const GENERATED_ORDER_SALT: u64 = 0x6765_6e65_7261;

/// The training set of one seed under `limits` (see [`TrainingLimits`]); `trusted` tells the
/// trusted methods. Samples keep their data order. Without limits, every sample.
pub fn training_subset(
    samples: &[SampleRow],
    trusted: impl Fn(&str) -> bool,
    limits: &TrainingLimits,
    seed: u64,
) -> Vec<SampleRow> {
    let mut keep = vec![true; samples.len()];
    if let Some(max) = limits.max_trusted {
        // Each image's trusted samples, in data order; the images in a seeded order.
        let mut by_image: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for (j, s) in samples.iter().enumerate() {
            if trusted(&s.method) {
                by_image.entry(s.image_id.as_str()).or_default().push(j);
            }
        }
        let mut images: Vec<(&str, Vec<usize>)> = by_image.into_iter().collect();
        shuffle(
            &mut images,
            &mut SplitMix64::new(splitmix64(seed ^ IMAGE_ORDER_SALT)),
        );
        let mut chosen: HashSet<&str> = HashSet::new();
        let mut kept = vec![false; samples.len()];
        let mut count = 0;
        for (image, indices) in images {
            if count == max {
                break;
            }
            chosen.insert(image);
            for j in indices.into_iter().take(max - count) {
                kept[j] = true;
                count += 1;
            }
        }
        for (j, s) in samples.iter().enumerate() {
            keep[j] = kept[j] || (!trusted(&s.method) && chosen.contains(s.image_id.as_str()));
        }
    }
    if let Some(percent) = limits.generated_percent {
        let trusted_count = (0..samples.len())
            .filter(|&j| keep[j] && trusted(&samples[j].method))
            .count();
        let mut generated: Vec<usize> = (0..samples.len())
            .filter(|&j| keep[j] && !trusted(&samples[j].method))
            .collect();
        let allowed = (trusted_count as f64 * percent / 100.0).round() as usize;
        if generated.len() > allowed {
            shuffle(
                &mut generated,
                &mut SplitMix64::new(splitmix64(seed ^ GENERATED_ORDER_SALT)),
            );
            for &j in &generated[allowed..] {
                keep[j] = false;
            }
        }
    }
    samples
        .iter()
        .zip(keep)
        .filter(|(_, k)| *k)
        .map(|(s, _)| s.clone())
        .collect()
}

/// The data with its samples ordered by image and sample id: a dataset written by several
/// workers holds the same samples in an order that can differ from run to run, and the batches,
/// the images `--max-train` draws and the samples `--max-samples` evaluates follow the order.
fn in_canonical_order(data: &TrainingData) -> TrainingData {
    let mut data = data.clone();
    data.samples.sort_by(|a, b| {
        (a.image_id.as_str(), a.sample_id.as_str())
            .cmp(&(b.image_id.as_str(), b.sample_id.as_str()))
    });
    data
}

/// Trains and evaluates every variant of `options` with each of its seeds. Every variant's final
/// model takes the same optimizer steps: the curriculum's `steps_per_iteration` becomes
/// `steps / iterations` (its scoring models' steps come on top and are reported). All variants of
/// one seed draw from the same training set (the same images under `options.limits`); the
/// original variant keeps its trusted samples. Samples are taken in the order of their image and
/// sample ids, whatever the order of the datasets' shards, so a comparison repeats exactly on the
/// CPU. A variant whose training set equals an earlier one's (no generated samples in the data) is
/// still run, and the report says so.
pub fn compare(
    data: &TrainingData,
    config: &TrainConfig,
    eval: &EvalOptions,
    out: &Path,
    device: Device,
    options: &CompareOptions,
) -> Result<Vec<VariantReport>> {
    options.limits.validate()?;
    if options.variants.is_empty() {
        return Err(Error::Usage("compare needs at least one variant".into()));
    }
    std::fs::create_dir_all(out).map_err(|e| Error::io(out, e))?;
    let data = &in_canonical_order(data);
    let trusted = &config.curriculum.trusted_methods;
    let generated_methods: Vec<String> = if options.generated_methods.is_empty() {
        Vec::new()
    } else {
        trusted
            .iter()
            .chain(&options.generated_methods)
            .cloned()
            .collect()
    };
    let mut reports = Vec::new();
    for k in 0..u64::from(options.seeds.max(1)) {
        let seed = config.seed + k;
        let mut all = config.clone();
        all.methods = generated_methods.clone();
        let pool = training_subset(
            &data.select(&all),
            |m| config.curriculum.is_trusted(m),
            &options.limits,
            seed,
        );
        for &variant_kind in &options.variants {
            let mut variant = config.clone();
            variant.seed = seed;
            variant.curriculum.seed = config.curriculum.seed + k;
            variant.curriculum.enabled = variant_kind == Variant::Curriculum;
            variant.methods = match variant_kind {
                Variant::Original => trusted.clone(),
                _ => generated_methods.clone(),
            };
            let samples: Vec<SampleRow> = pool
                .iter()
                .filter(|s| {
                    variant_kind != Variant::Original || variant.curriculum.is_trusted(&s.method)
                })
                .cloned()
                .collect();
            if variant_kind == Variant::Curriculum {
                let generated = samples
                    .iter()
                    .filter(|s| !variant.curriculum.is_trusted(&s.method))
                    .count();
                let iterations = iteration_count(generated, variant.curriculum.c_percent);
                variant.curriculum.steps_per_iteration =
                    (config.steps / u64::from(iterations.max(1))).max(1);
            }
            let dir = out.join(variant_kind.name()).join(format!("seed-{seed}"));
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
                name: variant_kind.name().to_string(),
                description: variant_kind.description().to_string(),
                seed,
                train_images: samples
                    .iter()
                    .map(|s| s.image_id.as_str())
                    .collect::<HashSet<_>>()
                    .len(),
                training,
                evaluation,
            });
        }
    }
    let json = serde_json::to_string_pretty(&serde_json::json!({
        "options": options,
        "runs": reports,
    }))
    .map_err(|e| Error::invalid("comparison report", e.to_string()))?;
    let path = out.join("compare.json");
    std::fs::write(&path, json).map_err(|e| Error::io(&path, e))?;
    let path = out.join("compare.md");
    std::fs::write(&path, render_markdown(&reports, options)).map_err(|e| Error::io(&path, e))?;
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

/// One count of a variant over its seeds: the value, or `min–max` when the seeds differ.
fn count_cell(values: impl IntoIterator<Item = u64>) -> String {
    let values: Vec<u64> = values.into_iter().collect();
    match (values.iter().min(), values.iter().max()) {
        (Some(lo), Some(hi)) if lo == hi => lo.to_string(),
        (Some(lo), Some(hi)) => format!("{lo}–{hi}"),
        _ => "–".to_string(),
    }
}

type Metric = fn(&VariantReport) -> Option<f64>;

/// The metrics of the tables: name, decimals, value.
const OVERALL: [(&str, usize, Metric); 7] = [
    ("LP %", 1, |r| Some(r.evaluation.lp)),
    ("L", 2, |r| Some(r.evaluation.l)),
    ("IoU", 3, |r| Some(r.evaluation.iou)),
    ("Hal", 3, |r| r.evaluation.hal),
    ("CIDEr-D", 3, |r| r.evaluation.cider_d),
    ("BLEU-4", 3, |r| r.evaluation.bleu.map(|b| b[3])),
    ("H", 3, |r| r.evaluation.h),
];
const DIVERSITY: [(&str, usize, Metric); 5] = [
    ("D-1", 3, |r| Some(r.evaluation.d1)),
    ("D-2", 3, |r| Some(r.evaluation.d2)),
    ("Div-1", 3, |r| r.evaluation.div1),
    ("Div-2", 3, |r| r.evaluation.div2),
    ("self-CIDEr", 3, |r| r.evaluation.self_cider),
];

/// One table row's cells: each metric's mean ± standard deviation over the group's seeds.
fn metric_cells(out: &mut String, group: &[&VariantReport], metrics: &[(&str, usize, Metric)]) {
    for (_, decimals, metric) in metrics {
        let _ = write!(
            out,
            " {} |",
            cell_sd(mean_sd(group.iter().map(|r| metric(r))), *decimals)
        );
    }
}

fn header(out: &mut String, first: &str, columns: &[&str]) {
    let _ = writeln!(out, "| {first} | {} |", columns.join(" | "));
    let _ = writeln!(out, "|---|{}", "---|".repeat(columns.len()));
}

/// The comparison as Markdown tables: per variant, the mean ± standard deviation over its seeds.
pub fn render_markdown(reports: &[VariantReport], options: &CompareOptions) -> String {
    let groups = by_variant(reports);
    let mut out = String::from("# Training comparison\n\n");
    out.push_str(
        "Mean ± sample standard deviation over the seeds. Every final model takes the same \
         optimizer steps; the curriculum's two scoring models add theirs (\"scoring steps\"). \
         All variants of a seed draw from the same images.",
    );
    if let Some(first) = reports.first() {
        let _ = write!(
            out,
            " Evaluated on {} samples of {} images.",
            first.evaluation.samples, first.evaluation.images
        );
    }
    if !options.generated_methods.is_empty() {
        let _ = write!(
            out,
            " Generated methods: {}.",
            options.generated_methods.join(", ")
        );
    }
    if let Some(max) = options.limits.max_trusted {
        let _ = write!(
            out,
            " Training sets: at most {max} trusted samples per seed (whole images in a seeded \
             order) and the generated samples of their images."
        );
    }
    if let Some(p) = options.limits.generated_percent {
        let _ = write!(
            out,
            " Generated samples: at most {p}% of the trusted ones, drawn by seed."
        );
    }
    out.push_str("\n\n");
    let mut columns = vec![
        "seeds",
        "images",
        "trusted",
        "generated",
        "steps",
        "scoring steps",
        "iterations",
        "final loss",
    ];
    columns.extend(OVERALL.iter().map(|(name, _, _)| *name));
    header(&mut out, "variant", &columns);
    for group in &groups {
        let count = |f: &dyn Fn(&VariantReport) -> u64| count_cell(group.iter().map(|r| f(r)));
        let _ = write!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            group[0].name,
            group.len(),
            count(&|r| r.train_images as u64),
            count(&|r| (r.training.samples - r.training.generated) as u64),
            count(&|r| r.training.generated as u64),
            count(&|r| r.training.run.steps),
            count(&|r| r.training.scoring_runs.iter().map(|s| s.steps).sum()),
            count(&|r| u64::from(r.training.iterations)),
            cell_sd(
                mean_sd(group.iter().map(|r| r.training.run.losses.last().copied())),
                3
            ),
        );
        metric_cells(&mut out, group, &OVERALL);
        out.push('\n');
    }
    if reports.iter().all(|r| r.training.generated == 0) && groups.len() > 1 {
        out.push_str(
            "\nThe data holds no generated samples: the variants train on the same samples; \
             the curriculum variant's final model is a separate run (its own initialisation and \
             data order) after its scoring runs.\n",
        );
    }

    out.push_str("\n## Diversity of the generated captions\n\n");
    out.push_str(
        "D-n: distinct n-grams over all evaluated captions per word; Div-n: the same over each \
         image's captions, averaged over the images with at least two; self-CIDEr per image.\n\n",
    );
    header(
        &mut out,
        "variant",
        &DIVERSITY
            .iter()
            .map(|(name, _, _)| *name)
            .collect::<Vec<_>>(),
    );
    for group in &groups {
        let _ = write!(out, "| {} |", group[0].name);
        metric_cells(&mut out, group, &DIVERSITY);
        out.push('\n');
    }

    if let Some((baseline, others)) = groups.split_first() {
        if !others.is_empty() {
            render_differences(&mut out, baseline, others);
        }
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
    let levels: BTreeSet<String> = reports
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

/// Each variant minus the first, seed by seed (the runs of one seed share their images and
/// initialisation seed), as mean ± standard deviation of the differences.
fn render_differences(
    out: &mut String,
    baseline: &[&VariantReport],
    others: &[Vec<&VariantReport>],
) {
    let metrics: Vec<(&str, usize, Metric)> =
        OVERALL.iter().chain(DIVERSITY.iter()).copied().collect();
    let _ = write!(
        out,
        "\n## Differences from {}, paired by seed\n\n",
        baseline[0].name
    );
    header(
        out,
        "variant",
        &metrics.iter().map(|(name, _, _)| *name).collect::<Vec<_>>(),
    );
    for group in others {
        let _ = write!(out, "| {} − {} |", group[0].name, baseline[0].name);
        for (_, decimals, metric) in &metrics {
            let differences = group.iter().map(|r| {
                let base = baseline.iter().find(|b| b.seed == r.seed)?;
                Some(metric(r)? - metric(base)?)
            });
            let _ = write!(out, " {} |", cell_sd(mean_sd(differences), *decimals));
        }
        out.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::Provenance;

    fn sample(image: &str, method: &str, k: usize) -> SampleRow {
        SampleRow {
            image: None,
            sample_id: format!("{method}:{image}:{k}"),
            image_id: image.to_string(),
            split: "train".into(),
            method: method.to_string(),
            text: "a dog".into(),
            control_boxes: Vec::new(),
            control_labels: Vec::new(),
            coverage: 0.0,
            length_level: 1,
            word_count: 2,
            verbs: Vec::new(),
            quality: Vec::new(),
            provenance: Provenance::default(),
        }
    }

    /// Ten images, each with 3 original and 4 cutswap samples, interleaved by image.
    fn data() -> Vec<SampleRow> {
        (0..10)
            .flat_map(|i| {
                let image = format!("img{i}");
                (0..3)
                    .map(move |k| sample(&format!("img{i}"), "original", k))
                    .chain((0..4).map(move |k| sample(&image, "cutswap", k)))
            })
            .collect()
    }

    fn is_original(method: &str) -> bool {
        method == "original"
    }

    fn count(samples: &[SampleRow], method: &str) -> usize {
        samples.iter().filter(|s| s.method == method).count()
    }

    fn images(samples: &[SampleRow], method: &str) -> BTreeSet<String> {
        samples
            .iter()
            .filter(|s| s.method == method)
            .map(|s| s.image_id.clone())
            .collect()
    }

    #[test]
    fn without_limits_every_sample_is_kept() {
        let all = data();
        let subset = training_subset(&all, is_original, &TrainingLimits::default(), 1);
        assert_eq!(subset, all);
    }

    #[test]
    fn max_trusted_takes_whole_images_and_their_generated_samples() {
        let all = data();
        let limits = TrainingLimits {
            max_trusted: Some(7),
            generated_percent: None,
        };
        for seed in 0..20 {
            let subset = training_subset(&all, is_original, &limits, seed);
            // 7 = 3 + 3 + 1: two whole images and the first sample of a third.
            assert_eq!(count(&subset, "original"), 7);
            let trusted_images = images(&subset, "original");
            assert_eq!(trusted_images.len(), 3);
            let per_image: Vec<usize> = trusted_images
                .iter()
                .map(|i| {
                    subset
                        .iter()
                        .filter(|s| &s.image_id == i && s.method == "original")
                        .count()
                })
                .collect();
            let mut sorted = per_image.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, [1, 3, 3]);
            // The partly taken image keeps its first sample in data order.
            let partial = &trusted_images
                .iter()
                .zip(&per_image)
                .find(|(_, n)| **n == 1)
                .unwrap()
                .0;
            assert!(subset.iter().any(|s| &&s.image_id == partial
                && s.sample_id.ends_with(":0")
                && s.method == "original"));
            // Every generated sample of exactly those three images.
            assert_eq!(images(&subset, "cutswap"), trusted_images);
            assert_eq!(count(&subset, "cutswap"), 12);
            // Data order is kept.
            let positions: Vec<usize> = subset
                .iter()
                .map(|s| all.iter().position(|a| a == s).unwrap())
                .collect();
            assert!(positions.windows(2).all(|w| w[0] < w[1]));
            assert_eq!(subset, training_subset(&all, is_original, &limits, seed));
        }
        let chosen: BTreeSet<BTreeSet<String>> = (0..20)
            .map(|seed| {
                images(
                    &training_subset(&all, is_original, &limits, seed),
                    "original",
                )
            })
            .collect();
        assert!(chosen.len() > 1, "the images depend on the seed");
    }

    #[test]
    fn generated_percent_caps_the_generated_share() {
        let all = data();
        // 30 trusted samples: 20% is 6 of the 40 generated ones.
        let limits = TrainingLimits {
            max_trusted: None,
            generated_percent: Some(20.0),
        };
        let subset = training_subset(&all, is_original, &limits, 3);
        assert_eq!(count(&subset, "original"), 30);
        assert_eq!(count(&subset, "cutswap"), 6);
        // With 6 trusted samples (two images), 50% is 3 of those images' 8 generated ones.
        let limits = TrainingLimits {
            max_trusted: Some(6),
            generated_percent: Some(50.0),
        };
        let subset = training_subset(&all, is_original, &limits, 3);
        assert_eq!(count(&subset, "original"), 6);
        assert_eq!(count(&subset, "cutswap"), 3);
        assert!(images(&subset, "cutswap").is_subset(&images(&subset, "original")));
        // A share above what there is keeps every generated sample.
        let limits = TrainingLimits {
            max_trusted: Some(6),
            generated_percent: Some(1000.0),
        };
        assert_eq!(
            count(&training_subset(&all, is_original, &limits, 3), "cutswap"),
            8
        );
    }

    #[test]
    fn counts_read_as_one_value_or_a_range() {
        assert_eq!(count_cell([4, 4, 4]), "4");
        assert_eq!(count_cell([5, 3, 4]), "3–5");
        assert_eq!(count_cell([]), "–");
    }

    #[test]
    fn mean_and_sample_deviation_by_hand() {
        // 1, 2, 6: mean 3, squared deviations 4 + 1 + 9 = 14, sd = √(14 / 2) = √7.
        let (mean, sd) = mean_sd([Some(1.0), None, Some(2.0), Some(6.0)]).unwrap();
        assert_eq!(mean, 3.0);
        assert!((sd - 7f64.sqrt()).abs() < 1e-15);
        assert_eq!(mean_sd([Some(2.5)]), Some((2.5, 0.0)));
        assert_eq!(mean_sd([None]), None);
    }
}
