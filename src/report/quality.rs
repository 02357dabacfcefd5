//! The quality-score section: a histogram of each score the samples carry (their `quality`
//! column), with the filter's threshold marked, and a table of every score.
//!
//! The dataset records the scores of the samples it kept, not the thresholds they passed:
//! those come from the run's spec ([`thresholds_from_spec`]) or the command line.

use std::collections::BTreeMap;

use super::chart::{BarChart, Marker, Series};
use super::{Block, Cell, ReportContext, ReportSection, Section, Table};
use crate::dataflow::DataflowSpec;
use crate::error::Result;
use crate::schema::SampleRow;

/// About this many bins span a score's values (and its thresholds).
pub const QUALITY_BINS: usize = 20;

/// The score SSA's quality filter compares with `ssa.quality_threshold`
/// ([`crate::augment::ssa::judge`]).
pub const SSA_QUALITY_SCORE: &str = "builtin-quality";
/// The similarity the relatedness method labels at each of `relatedness.thresholds`.
pub const RELATEDNESS_SCORE: &str = "relatedness";
/// The image-text score CutSwap's image swaps keep at `cutswap.image.threshold` or above.
pub const CUTSWAP_IMAGE_SCORE: &str = "cutswap_image_text";

/// The thresholds a spec sets on the samples' quality scores, by score name.
pub fn thresholds_from_spec(spec: &DataflowSpec) -> BTreeMap<String, Vec<f64>> {
    let mut thresholds: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    if let Some(ssa) = &spec.ssa {
        thresholds
            .entry(SSA_QUALITY_SCORE.into())
            .or_default()
            .push(ssa.quality_threshold);
    }
    if let Some(relatedness) = &spec.relatedness {
        thresholds
            .entry(RELATEDNESS_SCORE.into())
            .or_default()
            .extend(relatedness.thresholds.iter().copied());
    }
    if let Some(threshold) = spec.cutswap.as_ref().and_then(|c| c.image.threshold) {
        thresholds
            .entry(CUTSWAP_IMAGE_SCORE.into())
            .or_default()
            .push(threshold);
    }
    thresholds
}

/// Equal bins over a score's range: bin `i` is `[(first + i) × step, (first + i + 1) × step)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bins {
    pub step: f64,
    /// Index of the first bin on the whole number line (`lower edge / step`).
    pub first: i64,
    pub count: usize,
}

impl Bins {
    /// About [`QUALITY_BINS`] bins of a round width (1, 2 or 5 × 10^k) from the bin holding
    /// `low` to the one holding `high`.
    pub fn fit(low: f64, high: f64) -> Bins {
        let span = high - low;
        let raw = if span > 0.0 {
            span / QUALITY_BINS as f64
        } else {
            low.abs().max(1.0) / QUALITY_BINS as f64
        };
        let magnitude = 10f64.powf(raw.log10().floor());
        let step = [1.0, 2.0, 5.0, 10.0]
            .iter()
            .map(|f| f * magnitude)
            .find(|step| *step >= raw * (1.0 - 1e-9))
            .unwrap_or(10.0 * magnitude);
        let first = index(low, step);
        let last = index(high, step);
        Bins {
            step,
            first,
            count: (last - first + 1) as usize,
        }
    }

    /// The bin of `value`, clamped to the bins.
    pub fn bin(&self, value: f64) -> usize {
        (index(value, self.step) - self.first).clamp(0, self.count as i64 - 1) as usize
    }

    /// Lower edge of bin `i`.
    pub fn lower(&self, i: usize) -> f64 {
        (self.first + i as i64) as f64 * self.step
    }

    /// Where `value` falls on the chart's category axis, in bin widths from the first bin's
    /// lower edge.
    pub fn position(&self, value: f64) -> f64 {
        value / self.step - self.first as f64
    }

    /// Bin labels: `lower–upper` with the decimals the step needs.
    pub fn labels(&self) -> Vec<String> {
        let decimals = if self.step >= 1.0 {
            0
        } else {
            (-self.step.log10().floor()) as usize
        };
        (0..self.count)
            .map(|i| {
                format!(
                    "{:.decimals$}–{:.decimals$}",
                    self.lower(i),
                    self.lower(i + 1)
                )
            })
            .collect()
    }
}

/// The whole-number bin index of `value` (tolerating rounding, so that 0.7 / 0.02 is 35).
fn index(value: f64, step: f64) -> i64 {
    (value / step + 1e-9).floor() as i64
}

/// Quality scores of the samples, by score name.
pub struct QualitySection {
    thresholds: BTreeMap<String, Vec<f64>>,
    /// Every finite value of each score; kept to fit the bins to them.
    scores: BTreeMap<String, Vec<f64>>,
    /// Values that are not finite numbers, by score.
    non_finite: BTreeMap<String, u64>,
}

impl QualitySection {
    pub fn new(thresholds: BTreeMap<String, Vec<f64>>) -> QualitySection {
        QualitySection {
            thresholds,
            scores: BTreeMap::new(),
            non_finite: BTreeMap::new(),
        }
    }
}

/// Whether a score only takes whole values (a rank, a 0/1 label): it is tabled, not charted.
fn whole_numbers(values: &[f64]) -> bool {
    values.iter().all(|v| v.fract() == 0.0)
}

impl ReportSection for QualitySection {
    fn observe(&mut self, sample: &SampleRow) {
        for score in &sample.quality {
            if score.value.is_finite() {
                self.scores
                    .entry(score.name.clone())
                    .or_default()
                    .push(score.value);
            } else {
                *self.non_finite.entry(score.name.clone()).or_default() += 1;
            }
        }
    }

    fn render(&self, _context: &ReportContext<'_>) -> Result<Option<Section>> {
        if self.scores.is_empty() && self.non_finite.is_empty() {
            return Ok(None);
        }
        let mut section = Section {
            id: "quality".into(),
            title: "Quality scores".into(),
            summary: Vec::new(),
            blocks: Vec::new(),
        };
        let no_thresholds = Vec::new();
        let mut rows = Vec::new();
        for (name, values) in &self.scores {
            let thresholds = self.thresholds.get(name).unwrap_or(&no_thresholds);
            let low = values.iter().copied().fold(f64::INFINITY, f64::min);
            let high = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let mean = values.iter().sum::<f64>() / values.len() as f64;
            let at_or_below = thresholds
                .iter()
                .copied()
                .reduce(f64::min)
                .map(|t| values.iter().filter(|&&v| v <= t).count() as u64);
            let listed: Vec<String> = thresholds.iter().map(|t| t.to_string()).collect();
            rows.push(vec![
                Cell::Text(name.clone()),
                Cell::Count(values.len() as u64),
                Cell::Number(low),
                Cell::Number(mean),
                Cell::Number(high),
                Cell::Text(listed.join(", ")),
                at_or_below.map_or(Cell::Text(String::new()), Cell::Count),
            ]);
            section.summary.push(format!(
                "{name}: {} samples, {low:.4} to {high:.4}, mean {mean:.4}{}",
                values.len(),
                if listed.is_empty() {
                    String::new()
                } else {
                    format!(", threshold {}", listed.join(", "))
                }
            ));
            if whole_numbers(values) {
                continue;
            }
            let (chart_low, chart_high) = thresholds
                .iter()
                .fold((low, high), |(l, h), &t| (l.min(t), h.max(t)));
            let bins = Bins::fit(chart_low, chart_high);
            let mut counts = vec![0u64; bins.count];
            for &v in values {
                counts[bins.bin(v)] += 1;
            }
            let mut chart = BarChart::new(
                format!("quality_{}", chart_id(name)),
                format!("Quality score {name}"),
                format!("{name} (bins of {}, lower edge included)", bins.step),
                "samples",
                bins.labels(),
                vec![Series {
                    name: "samples".into(),
                    values: counts.iter().map(|&n| n as f64).collect(),
                }],
            );
            chart.markers = thresholds
                .iter()
                .map(|&t| Marker {
                    position: bins.position(t),
                    label: format!("threshold {t}"),
                })
                .collect();
            section.blocks.push(Block::Chart(chart));
        }
        for name in self.non_finite.keys() {
            if !self.scores.contains_key(name) {
                rows.push(vec![
                    Cell::Text(name.clone()),
                    Cell::Count(0),
                    Cell::Text(String::new()),
                    Cell::Text(String::new()),
                    Cell::Text(String::new()),
                    Cell::Text(String::new()),
                    Cell::Text(String::new()),
                ]);
            }
        }
        section.blocks.push(Block::Table(Table {
            columns: vec![
                "score".into(),
                "samples".into(),
                "min".into(),
                "mean".into(),
                "max".into(),
                "threshold".into(),
                "at or below threshold".into(),
            ],
            rows,
        }));
        for (name, n) in &self.non_finite {
            section.blocks.push(Block::Text {
                text: format!("{n} values of {name} are not numbers and are not shown."),
            });
        }
        let unmarked: Vec<&str> = self
            .scores
            .keys()
            .filter(|name| !self.thresholds.contains_key(*name))
            .map(String::as_str)
            .collect();
        if !unmarked.is_empty() {
            section.blocks.push(Block::Text {
                text: format!(
                    "The dataset does not record the thresholds its scores were filtered at; \
                     none is known for {} (pass the run's spec with `--spec` or a \
                     `--threshold NAME=VALUE`).",
                    unmarked.join(", ")
                ),
            });
        }
        section.blocks.push(Block::Text {
            text: "Scores that only take whole values (ranks, 0/1 labels) are listed, not \
                   charted. The samples are the ones kept: those a filter dropped are not in \
                   the dataset."
                .into(),
        });
        Ok(Some(section))
    }
}

/// A chart id part for a score name: ASCII letters and digits kept, anything else `_`.
fn chart_id(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bins_are_round_and_cover_the_values_and_thresholds() {
        // 0.7 to 0.95: span 0.25 / 20 = 0.0125 → step 0.02; 0.7 / 0.02 = 35, 0.95 / 0.02 =
        // 47.5 → bins 35..=47, 13 of them, [0.70, 0.72) ... [0.94, 0.96).
        let bins = Bins::fit(0.7, 0.95);
        assert_eq!((bins.step, bins.first, bins.count), (0.02, 35, 13));
        assert_eq!(bins.labels().first().unwrap(), "0.70–0.72");
        assert_eq!(bins.labels().last().unwrap(), "0.94–0.96");
        assert_eq!(bins.bin(0.7), 0);
        assert_eq!(bins.bin(0.719), 0);
        assert_eq!(bins.bin(0.72), 1);
        assert_eq!(bins.bin(0.95), 12);
        assert!((bins.position(0.7) - 0.0).abs() < 1e-9);
        assert!((bins.position(0.81) - 5.5).abs() < 1e-9);
        // 0 to 100: step 5, 21 bins (100 opens the last one).
        let bins = Bins::fit(0.0, 100.0);
        assert_eq!((bins.step, bins.first, bins.count), (5.0, 0, 21));
        // One value: a bin of a twentieth of its size.
        let bins = Bins::fit(3.0, 3.0);
        assert_eq!((bins.step, bins.first, bins.count), (0.2, 15, 1));
        assert_eq!(chart_id("related@0.5"), "related_0_5");
    }
}
