//! Report sections for the graph-based generators: CLID's caption lengths against the trusted
//! captions (the CLID paper's Fig. 3), and statistics of a dataset's GBC graphs.

use super::chart::{BarChart, Series};
use super::{Block, Cell, ReportContext, ReportSection, Section, Table};
use crate::augment::control::word_count;
use crate::error::Result;
use crate::export::read_table;
use crate::graph::gbc::{statistics, GbcStatistics};
use crate::schema::{batch_to_rows, CaptionRow, GbcGraphRow, SampleRow, TableKind};

/// CLID's caption length levels are 10-word bins, 1–9 … 60–69
/// ([`crate::augment::clid::length_level`]); longer captions share a last bin.
const CLID_BINS: usize = crate::augment::clid::CAPTION_LEVELS as usize + 1;
/// The length the CLID paper's Fig. 3 singles out: the share of captions of at least 20 words.
const LONG_WORDS: usize = 20;

fn clid_bin(words: usize) -> usize {
    (words / 10).min(CLID_BINS - 1)
}

fn clid_bin_names() -> Vec<String> {
    (0..CLID_BINS)
        .map(|b| {
            if b + 1 == CLID_BINS {
                format!("{}+", b * 10)
            } else {
                format!("{}-{}", (b * 10).max(1), b * 10 + 9)
            }
        })
        .collect()
}

/// Word counts of one set of captions, binned, with the mean and the share of long ones.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LengthProfile {
    pub counts: Vec<u64>,
    pub total: u64,
    pub words: u64,
    pub long: u64,
}

impl LengthProfile {
    fn new() -> LengthProfile {
        LengthProfile {
            counts: vec![0; CLID_BINS],
            ..LengthProfile::default()
        }
    }

    fn add(&mut self, words: usize) {
        self.counts[clid_bin(words)] += 1;
        self.total += 1;
        self.words += words as u64;
        self.long += u64::from(words >= LONG_WORDS);
    }

    pub fn mean(&self) -> f64 {
        self.words as f64 / self.total.max(1) as f64
    }

    /// Percent of captions with at least 20 words.
    pub fn long_share(&self) -> f64 {
        100.0 * self.long as f64 / self.total.max(1) as f64
    }

    fn shares(&self) -> Vec<f64> {
        self.counts
            .iter()
            .map(|&n| 100.0 * n as f64 / self.total.max(1) as f64)
            .collect()
    }
}

/// CLID samples' length levels against the dataset's own captions (the trusted set), as shares of
/// each set, with the share of captions of at least 20 words (the CLID paper's Fig. 3).
pub struct ClidLengthSection {
    clid: LengthProfile,
}

impl Default for ClidLengthSection {
    fn default() -> Self {
        ClidLengthSection {
            clid: LengthProfile::new(),
        }
    }
}

impl ReportSection for ClidLengthSection {
    fn observe(&mut self, sample: &SampleRow) {
        if sample.method == "clid" {
            self.clid.add(word_count(&sample.text));
        }
    }

    fn render(&self, context: &ReportContext<'_>) -> Result<Option<Section>> {
        if self.clid.total == 0 {
            return Ok(None);
        }
        let mut section = Section {
            id: "clid".into(),
            title: "CLID caption lengths".into(),
            summary: Vec::new(),
            blocks: Vec::new(),
        };
        let mut trusted = LengthProfile::new();
        if context.manifest.table_rows(TableKind::Captions) > 0 {
            for batch in read_table(context.dir, TableKind::Captions)? {
                for caption in batch_to_rows::<CaptionRow>(&batch?)? {
                    trusted.add(word_count(&caption.text));
                }
            }
        }
        if trusted.total == 0 {
            section.blocks.push(Block::Text {
                text: "The dataset has no captions to compare with; add the captions of the same \
                       images as an input (e.g. Flickr30k Entities or COCO captions)."
                    .into(),
            });
        }
        let profiles = [("trusted captions", &trusted), ("CLID", &self.clid)];
        let row = |name: &str, p: &LengthProfile| {
            vec![
                Cell::Text(name.into()),
                Cell::Count(p.total),
                Cell::Number(p.mean()),
                Cell::Percent(p.long_share()),
            ]
        };
        section.blocks.push(Block::Table(Table {
            columns: vec![
                "set".into(),
                "captions".into(),
                "mean words".into(),
                "share ≥ 20 words".into(),
            ],
            rows: profiles.iter().map(|(n, p)| row(n, p)).collect(),
        }));
        // Up to the longest caption's level.
        let shown = profiles
            .iter()
            .filter_map(|(_, p)| p.counts.iter().rposition(|&n| n > 0))
            .max()
            .map_or(0, |last| last + 1);
        section.blocks.push(Block::Chart(BarChart::new(
            "clid_length",
            "Caption length, share of each set",
            "words",
            "% of captions",
            clid_bin_names()[..shown].to_vec(),
            profiles
                .iter()
                .map(|(name, p)| Series {
                    name: name.to_string(),
                    values: p.shares()[..shown].to_vec(),
                })
                .collect(),
        )));
        section.summary = profiles
            .iter()
            .map(|(name, p)| {
                format!(
                    "{name}: {} captions, mean {:.2} words, {:.1}% with ≥ 20 words",
                    p.total,
                    p.mean(),
                    p.long_share()
                )
            })
            .collect();
        Ok(Some(section))
    }
}

/// Vertices, edges, captions, words and diameter of the dataset's GBC graphs (the statistics of
/// `capflow gbc stats`).
#[derive(Default)]
pub struct GbcGraphsSection;

/// One statistic of a graph.
type Measure = fn(&GbcStatistics) -> u64;

/// Mean, minimum and maximum of one statistic over the graphs.
fn spread(stats: &[GbcStatistics], f: Measure) -> (f64, u64, u64) {
    let values: Vec<u64> = stats.iter().map(f).collect();
    let mean = values.iter().sum::<u64>() as f64 / values.len().max(1) as f64;
    let min = values.iter().copied().min().unwrap_or(0);
    let max = values.iter().copied().max().unwrap_or(0);
    (mean, min, max)
}

impl ReportSection for GbcGraphsSection {
    fn render(&self, context: &ReportContext<'_>) -> Result<Option<Section>> {
        let mut section = Section {
            id: "gbc".into(),
            title: "GBC graphs".into(),
            summary: Vec::new(),
            blocks: Vec::new(),
        };
        let mut stats = Vec::new();
        if context.manifest.table_rows(TableKind::GbcGraphs) > 0 {
            for batch in read_table(context.dir, TableKind::GbcGraphs)? {
                for graph in batch_to_rows::<GbcGraphRow>(&batch?)? {
                    stats.push(statistics(&graph));
                }
            }
        }
        if stats.is_empty() {
            return Ok(None);
        }
        let measures: [(&str, Measure); 5] = [
            ("vertices", |s| s.vertices),
            ("edges", |s| s.edges),
            ("captions", |s| s.captions),
            ("words", |s| s.words),
            ("diameter", |s| s.diameter),
        ];
        let spreads: Vec<(&str, (f64, u64, u64))> = measures
            .iter()
            .map(|(name, f)| (*name, spread(&stats, *f)))
            .collect();
        section.blocks.push(Block::Table(Table {
            columns: vec![
                "per graph".into(),
                "mean".into(),
                "min".into(),
                "max".into(),
            ],
            rows: spreads
                .iter()
                .map(|(name, (mean, min, max))| {
                    vec![
                        Cell::Text(name.to_string()),
                        Cell::Number(*mean),
                        Cell::Count(*min),
                        Cell::Count(*max),
                    ]
                })
                .collect(),
        }));
        section.blocks.push(Block::Chart(BarChart::new(
            "gbc_graphs",
            "GBC graphs: mean per graph",
            "statistic",
            "mean per graph",
            spreads.iter().map(|(n, _)| n.to_string()).collect(),
            vec![Series {
                name: "mean".into(),
                values: spreads.iter().map(|(_, (mean, _, _))| *mean).collect(),
            }],
        )));
        let means: Vec<String> = spreads
            .iter()
            .map(|(name, (mean, _, _))| format!("{name} {mean:.2}"))
            .collect();
        section.summary.push(format!(
            "{} graphs; per graph: {}",
            stats.len(),
            means.join(", ")
        ));
        Ok(Some(section))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn length_bins_follow_clid_levels_and_long_share_counts_twenty_and_up() {
        let mut profile = LengthProfile::new();
        for words in [1, 9, 10, 19, 20, 35, 69, 70, 120] {
            profile.add(words);
        }
        assert_eq!(profile.counts, vec![2, 2, 1, 1, 0, 0, 1, 2]);
        assert_eq!(profile.long, 5);
        assert!((profile.long_share() - 500.0 / 9.0).abs() < 1e-9);
        assert_eq!(clid_bin_names()[0], "1-9");
        assert_eq!(clid_bin_names()[7], "70+");
    }
}
