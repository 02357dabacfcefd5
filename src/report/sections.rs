//! The built-in sections of a dataset report.
//!
//! Samples are split into two sets throughout: *original* (method `original`) and *augmented*
//! (every other method), as in the SSA paper's comparisons of D with the SSA samples.

use std::collections::{BTreeMap, HashSet};

use super::chart::{BarChart, Series};
use super::quality::QualitySection;
use super::{Block, Cell, ReportContext, ReportOptions, ReportSection, Section, Table};
use crate::error::Result;
use crate::export::read_table;
use crate::metrics::Tokenizer;
use crate::schema::{batch_to_rows, RejectedRow, SampleRow, TableKind};
use crate::select::mix::{coverage_bin, is_original, DEFAULT_COVERAGE_BINS, ORIGINAL_METHOD};

/// Names of the two sample sets, in the order of their chart series.
pub const SET_NAMES: [&str; 2] = ["original", "augmented"];

/// Word counts up to this get a bin each in the caption length histogram; longer captions
/// share the last bin (`40+`, SSA's level L5).
pub const LENGTH_BINS_UP_TO: usize = 39;

/// Reasons of rejected input records charted one by one; the rest are counted together.
pub const REASONS_CHARTED: usize = 12;

/// The built-in sections, in report order: dataset, stages, drops, methods, coverage, caption
/// length, length level, quality scores, diversity, CLID caption lengths, GBC graphs. Each but
/// the dataset's is left out when the dataset holds nothing it shows.
pub fn default_sections(options: &ReportOptions) -> Vec<Box<dyn ReportSection>> {
    vec![
        Box::new(DatasetSection),
        Box::new(StagesSection),
        Box::new(DropsSection),
        Box::new(MethodsSection::default()),
        Box::new(SetHistogram::coverage(DEFAULT_COVERAGE_BINS)),
        Box::new(SetHistogram::caption_length()),
        Box::new(SetHistogram::length_level()),
        Box::new(QualitySection::new(options.thresholds.clone())),
        Box::new(DiversitySection::default()),
        Box::new(super::graphs::ClidLengthSection::default()),
        Box::new(super::graphs::GbcGraphsSection),
    ]
}

fn set_of(sample: &SampleRow) -> usize {
    usize::from(!is_original(sample))
}

fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}

fn text(text: impl Into<String>) -> Block {
    Block::Text { text: text.into() }
}

/// What the manifest says about the dataset: version, engines, records, tables.
pub struct DatasetSection;

impl ReportSection for DatasetSection {
    fn render(&self, context: &ReportContext<'_>) -> Result<Option<Section>> {
        let m = context.manifest;
        let c = m.counts;
        let property = |name: &str, value: Cell| vec![Cell::Text(name.into()), value];
        let properties = Table {
            columns: vec!["property".into(), "value".into()],
            rows: vec![
                property("directory", Cell::Text(context.dir.display().to_string())),
                property("version", Cell::Count(m.version)),
                property("committed", Cell::Text(m.created_at.clone())),
                property("engine", Cell::Text(m.engine_version.clone())),
                property("config hash", Cell::Text(m.config_hash.clone())),
                property("records read", Cell::Count(c.read)),
                property("records accepted", Cell::Count(c.accepted)),
                property("records rejected", Cell::Count(c.rejected)),
            ],
        };
        let tables = Table {
            columns: vec![
                "table".into(),
                "rows".into(),
                "files".into(),
                "splits".into(),
            ],
            rows: TableKind::ALL
                .iter()
                .filter_map(|kind| {
                    let table = m.tables.get(kind.name())?;
                    let splits: Vec<String> = table
                        .splits
                        .iter()
                        .map(|(split, rows)| format!("{split}={rows}"))
                        .collect();
                    Some(vec![
                        Cell::Text(kind.name().into()),
                        Cell::Count(table.rows),
                        Cell::Count(table.files),
                        Cell::Text(splits.join(", ")),
                    ])
                })
                .collect(),
        };
        let mut blocks = vec![Block::Table(properties), Block::Table(tables)];
        if m.table_rows(TableKind::Samples) == 0 {
            blocks.push(text("The dataset has no samples."));
        }
        Ok(Some(Section {
            id: "dataset".into(),
            title: "Dataset".into(),
            summary: vec![format!(
                "version {} (engine {}), {} samples; records {} read, {} accepted, {} rejected",
                m.version,
                m.engine_version,
                m.table_rows(TableKind::Samples),
                c.read,
                c.accepted,
                c.rejected
            )],
            blocks,
        }))
    }
}

/// Rows in / out / rejected and time of every stage of the run, from the manifest.
pub struct StagesSection;

impl ReportSection for StagesSection {
    fn render(&self, context: &ReportContext<'_>) -> Result<Option<Section>> {
        let stages = &context.manifest.stages;
        if stages.is_empty() {
            return Ok(None);
        }
        let mut section = Section {
            id: "stages".into(),
            title: "Stages".into(),
            summary: Vec::new(),
            blocks: Vec::new(),
        };
        let table = Table {
            columns: vec![
                "stage".into(),
                "rows in".into(),
                "rows out".into(),
                "rejected".into(),
                "elapsed ms".into(),
            ],
            rows: stages
                .iter()
                .map(|s| {
                    vec![
                        Cell::Text(s.name.clone()),
                        Cell::Count(s.rows_in),
                        Cell::Count(s.rows_out),
                        Cell::Count(s.rejected),
                        Cell::Count(s.elapsed_ms),
                    ]
                })
                .collect(),
        };
        let series = |name: &str, value: fn(&crate::export::StageMetrics) -> u64| Series {
            name: name.into(),
            values: stages.iter().map(|s| value(s) as f64).collect(),
        };
        let chart = BarChart::new(
            "stages",
            "Rows per stage",
            "stage",
            "rows",
            stages.iter().map(|s| s.name.clone()).collect(),
            vec![
                series("in", |s| s.rows_in),
                series("out", |s| s.rows_out),
                series("rejected", |s| s.rejected),
            ],
        )
        .horizontal();
        section.summary = stages
            .iter()
            .map(|s| {
                format!(
                    "{}: {} in, {} out, {} rejected, {} ms",
                    s.name, s.rows_in, s.rows_out, s.rejected, s.elapsed_ms
                )
            })
            .collect();
        section.blocks = vec![Block::Chart(chart), Block::Table(table)];
        Ok(Some(section))
    }
}

/// What the run dropped: rows rejected per stage and what each method dropped per reason (from
/// the manifest), and input records rejected per reason (from the `rejected` table). Left out
/// when nothing was dropped.
pub struct DropsSection;

impl ReportSection for DropsSection {
    fn render(&self, context: &ReportContext<'_>) -> Result<Option<Section>> {
        let m = context.manifest;
        let stages: Vec<&crate::export::StageMetrics> =
            m.stages.iter().filter(|s| s.rejected > 0).collect();
        let mut reasons: BTreeMap<(String, String), u64> = BTreeMap::new();
        if m.table_rows(TableKind::Rejected) > 0 {
            for batch in read_table(context.dir, TableKind::Rejected)? {
                for row in batch_to_rows::<RejectedRow>(&batch?)? {
                    *reasons.entry((row.format, row.reason)).or_default() += 1;
                }
            }
        }
        if stages.is_empty() && m.dropped.is_empty() && reasons.is_empty() && m.counts.rejected == 0
        {
            return Ok(None);
        }
        let mut section = Section {
            id: "drops".into(),
            title: "Drops".into(),
            summary: Vec::new(),
            blocks: Vec::new(),
        };
        if !stages.is_empty() {
            section.blocks.push(counts_chart(
                "drops_per_stage",
                "Rows dropped per stage",
                "stage",
                "rows dropped",
                stages.iter().map(|s| s.name.clone()).collect(),
                "dropped",
                stages.iter().map(|s| s.rejected as f64).collect(),
            ));
            section.blocks.push(Block::Table(Table {
                columns: vec![
                    "stage".into(),
                    "rows in".into(),
                    "dropped".into(),
                    "share".into(),
                ],
                rows: stages
                    .iter()
                    .map(|s| {
                        vec![
                            Cell::Text(s.name.clone()),
                            Cell::Count(s.rows_in),
                            Cell::Count(s.rejected),
                            Cell::Percent(percent(s.rejected, s.rows_in)),
                        ]
                    })
                    .collect(),
            }));
            section.summary.push(
                stages
                    .iter()
                    .map(|s| format!("{} dropped {} of {}", s.name, s.rejected, s.rows_in))
                    .collect::<Vec<_>>()
                    .join(", "),
            );
        }
        if !m.dropped.is_empty() {
            // Per method, its reasons from the most frequent.
            let mut categories = Vec::new();
            let mut values = Vec::new();
            let mut rows = Vec::new();
            for (method, by_reason) in &m.dropped {
                let mut ranked: Vec<(&String, &u64)> = by_reason.iter().collect();
                ranked.sort_by(|a, b| b.1.cmp(a.1).then_with(|| a.0.cmp(b.0)));
                for (reason, n) in &ranked {
                    categories.push(format!("{method}: {}", shorten(reason, 70)));
                    values.push(**n as f64);
                    rows.push(vec![
                        Cell::Text(method.clone()),
                        Cell::Text((*reason).clone()),
                        Cell::Count(**n),
                    ]);
                }
                section.summary.push(format!(
                    "{method} dropped {}: {}",
                    by_reason.values().sum::<u64>(),
                    ranked
                        .iter()
                        .map(|(reason, n)| format!("{n} {reason}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
            section.blocks.push(counts_chart(
                "drop_reasons",
                "What the methods dropped, by reason",
                "method: reason",
                "dropped",
                categories,
                "dropped",
                values,
            ));
            section.blocks.push(Block::Table(Table {
                columns: vec!["method".into(), "reason".into(), "dropped".into()],
                rows,
            }));
        } else if !stages.is_empty() {
            section.blocks.push(text(
                "The manifest does not say why the stages dropped these rows (it names the \
                 reasons of runs that record them, such as SSA's).",
            ));
        }
        if m.counts.rejected > 0 || !reasons.is_empty() {
            // Most frequent first, then by format and reason.
            let mut ranked: Vec<((String, String), u64)> = reasons.into_iter().collect();
            ranked.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            let recorded: u64 = ranked.iter().map(|(_, n)| n).sum();
            let mut categories = Vec::new();
            let mut values = Vec::new();
            for ((format, reason), n) in ranked.iter().take(REASONS_CHARTED) {
                categories.push(format!("{format}: {}", shorten(reason, 70)));
                values.push(*n as f64);
            }
            let rest: u64 = ranked.iter().skip(REASONS_CHARTED).map(|(_, n)| n).sum();
            if rest > 0 {
                categories.push(format!("{} other reasons", ranked.len() - REASONS_CHARTED));
                values.push(rest as f64);
            }
            if !categories.is_empty() {
                section.blocks.push(counts_chart(
                    "rejected_reasons",
                    "Input records rejected, by reason",
                    "reader: reason",
                    "records",
                    categories,
                    "records",
                    values,
                ));
            }
            section.blocks.push(Block::Table(Table {
                columns: vec!["reader".into(), "reason".into(), "records".into()],
                rows: ranked
                    .iter()
                    .map(|((format, reason), n)| {
                        vec![
                            Cell::Text(format.clone()),
                            Cell::Text(reason.clone()),
                            Cell::Count(*n),
                        ]
                    })
                    .collect(),
            }));
            if recorded < m.counts.rejected {
                section.blocks.push(text(format!(
                    "{} input records were rejected; the `rejected` table gives the reason of {}.",
                    m.counts.rejected, recorded
                )));
            }
            section.summary.push(format!(
                "{} input records rejected ({} reasons recorded)",
                m.counts.rejected.max(recorded),
                ranked.len()
            ));
        }
        Ok(Some(section))
    }
}

/// `text` cut to at most `max` characters, with `…` when cut.
fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut short: String = text.chars().take(max - 1).collect();
    short.push('…');
    short
}

/// Samples per method (and per split).
#[derive(Default)]
pub struct MethodsSection {
    /// (method, split) → samples.
    counts: BTreeMap<(String, String), u64>,
}

impl ReportSection for MethodsSection {
    fn observe(&mut self, sample: &SampleRow) {
        *self
            .counts
            .entry((sample.method.clone(), sample.split.clone()))
            .or_default() += 1;
    }

    fn render(&self, _context: &ReportContext<'_>) -> Result<Option<Section>> {
        if self.counts.is_empty() {
            return Ok(None);
        }
        let mut per_method: BTreeMap<&str, u64> = BTreeMap::new();
        let mut splits: Vec<&str> = Vec::new();
        for ((method, split), n) in &self.counts {
            *per_method.entry(method).or_default() += n;
            if !splits.contains(&split.as_str()) {
                splits.push(split);
            }
        }
        splits.sort_unstable();
        // Originals first, then the methods by name.
        let mut methods: Vec<(&str, u64)> = per_method.into_iter().collect();
        methods.sort_by_key(|(method, _)| (*method != ORIGINAL_METHOD, *method));
        let total: u64 = methods.iter().map(|(_, n)| n).sum();
        let mut columns = vec!["method".to_string(), "samples".into(), "share".into()];
        columns.extend(splits.iter().map(|s| s.to_string()));
        let rows = methods
            .iter()
            .map(|(method, n)| {
                let mut row = vec![
                    Cell::Text(method.to_string()),
                    Cell::Count(*n),
                    Cell::Percent(percent(*n, total)),
                ];
                row.extend(splits.iter().map(|split| {
                    let key = (method.to_string(), split.to_string());
                    Cell::Count(self.counts.get(&key).copied().unwrap_or(0))
                }));
                row
            })
            .collect();
        let chart = BarChart::new(
            "methods",
            "Samples per method",
            "method",
            "samples",
            methods.iter().map(|(m, _)| m.to_string()).collect(),
            vec![Series {
                name: "samples".into(),
                values: methods.iter().map(|(_, n)| *n as f64).collect(),
            }],
        );
        let listed: Vec<String> = methods
            .iter()
            .map(|(m, n)| format!("{m} {n} ({:.1}%)", percent(*n, total)))
            .collect();
        Ok(Some(Section {
            id: "methods".into(),
            title: "Methods".into(),
            summary: vec![listed.join(", ")],
            blocks: vec![Block::Chart(chart), Block::Table(Table { columns, rows })],
        }))
    }
}

/// Where a sample falls in a histogram and the value it was binned by; `None` when the sample
/// has no usable value.
type Binner = Box<dyn Fn(&SampleRow) -> Option<(usize, f64)>>;

/// A histogram of original vs augmented samples over fixed bins.
pub struct SetHistogram {
    id: &'static str,
    title: &'static str,
    x_label: &'static str,
    /// What the mean in the summary is of.
    value_name: &'static str,
    categories: Vec<String>,
    /// Show only the bins from the first to the last one with samples.
    fit: bool,
    bin: Binner,
    /// Per set: samples per bin.
    counts: [Vec<u64>; 2],
    /// Per set: sum of binned values, and samples without a usable value.
    sums: [f64; 2],
    unbinned: [u64; 2],
}

impl SetHistogram {
    fn new(
        id: &'static str,
        title: &'static str,
        x_label: &'static str,
        value_name: &'static str,
        categories: Vec<String>,
        fit: bool,
        bin: Binner,
    ) -> SetHistogram {
        let n = categories.len();
        SetHistogram {
            id,
            title,
            x_label,
            value_name,
            categories,
            fit,
            bin,
            counts: [vec![0; n], vec![0; n]],
            sums: [0.0; 2],
            unbinned: [0; 2],
        }
    }

    /// Coverage of the control boxes in `bins` equal bins of [0, 100] (the last one closed),
    /// the bins of `uniform-coverage` mixing (paper Fig. 10 uses 10).
    pub fn coverage(bins: usize) -> SetHistogram {
        let bins = bins.max(1);
        let bound = |i: usize| {
            let x = 100.0 * i as f64 / bins as f64;
            let text = format!("{x:.1}");
            text.strip_suffix(".0").unwrap_or(&text).to_string()
        };
        let categories = (0..bins)
            .map(|i| format!("{}-{}", bound(i), bound(i + 1)))
            .collect();
        SetHistogram::new(
            "coverage",
            "Coverage of the control boxes (% of image pixels)",
            "coverage %",
            "coverage",
            categories,
            false,
            Box::new(move |s| {
                s.coverage
                    .is_finite()
                    .then(|| (coverage_bin(s.coverage, bins), s.coverage))
            }),
        )
    }

    /// Caption length in words (the sample's `word_count`): one bin per length 1 to 39, one
    /// for 40 and more (paper Fig. 11), shown from the shortest to the longest caption.
    pub fn caption_length() -> SetHistogram {
        let mut categories: Vec<String> = (1..=LENGTH_BINS_UP_TO).map(|n| n.to_string()).collect();
        categories.push(format!("{}+", LENGTH_BINS_UP_TO + 1));
        SetHistogram::new(
            "length",
            "Caption length (words)",
            "words",
            "words",
            categories,
            true,
            Box::new(|s| {
                let words = usize::try_from(s.word_count).ok().filter(|&w| w > 0)?;
                Some((words.min(LENGTH_BINS_UP_TO + 1) - 1, words as f64))
            }),
        )
    }

    /// SSA length levels L1 (1-9 words) to L5 (40 and more), from the sample's `length_level`.
    pub fn length_level() -> SetHistogram {
        SetHistogram::new(
            "level",
            "Length level",
            "level",
            "level",
            (1..=5).map(|l| format!("L{l}")).collect(),
            false,
            Box::new(|s| {
                (1..=5)
                    .contains(&s.length_level)
                    .then(|| (s.length_level as usize - 1, f64::from(s.length_level)))
            }),
        )
    }

    /// Samples per bin of the original (0) or augmented (1) set.
    pub fn counts(&self, set: usize) -> &[u64] {
        &self.counts[set]
    }

    /// The bins shown: all of them, or when fitted, the first to the last with samples of
    /// either set (empty when no sample has a value).
    pub fn shown_bins(&self) -> std::ops::Range<usize> {
        if !self.fit {
            return 0..self.categories.len();
        }
        let used = |bin: &usize| self.counts.iter().any(|c| c[*bin] > 0);
        let n = self.categories.len();
        match ((0..n).find(used), (0..n).rev().find(used)) {
            (Some(first), Some(last)) => first..last + 1,
            _ => 0..0,
        }
    }

    fn binned(&self, set: usize) -> u64 {
        self.counts[set].iter().sum()
    }
}

impl ReportSection for SetHistogram {
    fn observe(&mut self, sample: &SampleRow) {
        let set = set_of(sample);
        match (self.bin)(sample) {
            Some((bin, value)) => {
                self.counts[set][bin] += 1;
                self.sums[set] += value;
            }
            None => self.unbinned[set] += 1,
        }
    }

    fn render(&self, _context: &ReportContext<'_>) -> Result<Option<Section>> {
        let totals = [self.binned(0), self.binned(1)];
        if totals == [0, 0] && self.unbinned == [0, 0] {
            return Ok(None);
        }
        let shown = self.shown_bins();
        // Only the sets with samples get a series and columns.
        let sets: Vec<usize> = (0..2).filter(|&set| totals[set] > 0).collect();
        let mut columns = vec![self.x_label.to_string()];
        for &set in &sets {
            columns.push(SET_NAMES[set].into());
            columns.push(format!("{} %", SET_NAMES[set]));
        }
        let rows = shown
            .clone()
            .map(|bin| (bin, &self.categories[bin]))
            .map(|(bin, label)| {
                let mut row = vec![Cell::Text(label.clone())];
                for &set in &sets {
                    row.push(Cell::Count(self.counts[set][bin]));
                    row.push(Cell::Percent(percent(self.counts[set][bin], totals[set])));
                }
                row
            })
            .collect();
        let chart = BarChart::new(
            self.id,
            self.title,
            self.x_label,
            "% of set",
            self.categories[shown.clone()].to_vec(),
            sets.iter()
                .map(|&set| Series {
                    name: SET_NAMES[set].into(),
                    values: self.counts[set][shown.clone()]
                        .iter()
                        .map(|&n| percent(n, totals[set]))
                        .collect(),
                })
                .collect(),
        );
        let summary: Vec<String> = (0..2)
            .map(|set| match totals[set] {
                0 => format!("{}: no samples", SET_NAMES[set]),
                n => format!(
                    "{}: {n} samples, mean {} {:.2}",
                    SET_NAMES[set],
                    self.value_name,
                    self.sums[set] / n as f64
                ),
            })
            .collect();
        let mut blocks = Vec::new();
        if !shown.is_empty() {
            blocks.push(Block::Chart(chart));
            blocks.push(Block::Table(Table { columns, rows }));
        }
        blocks.push(text(format!(
            "Shares are of each set's samples with a {}. {}",
            self.value_name,
            summary.join("; ")
        )));
        for (unbinned, name) in self.unbinned.iter().zip(SET_NAMES) {
            if *unbinned > 0 {
                blocks.push(text(format!(
                    "{unbinned} {name} samples have no usable {} and are not shown.",
                    self.value_name
                )));
            }
        }
        Ok(Some(Section {
            id: self.id.into(),
            title: self.title.into(),
            summary,
            blocks,
        }))
    }
}

/// Distinct n-grams of a stream of captions, for D-n ([`crate::metrics::diversity::distinct_n`]
/// over captions seen one at a time).
#[derive(Debug, Default)]
pub struct DistinctNgrams {
    captions: u64,
    words: u64,
    /// Distinct unigrams and bigrams; a bigram is its words joined by a space, which no
    /// whitespace token contains.
    unigrams: HashSet<String>,
    bigrams: HashSet<String>,
}

impl DistinctNgrams {
    pub fn add(&mut self, words: &[String]) {
        self.captions += 1;
        self.words += words.len() as u64;
        for word in words {
            if !self.unigrams.contains(word) {
                self.unigrams.insert(word.clone());
            }
        }
        for pair in words.windows(2) {
            self.bigrams.insert(format!("{} {}", pair[0], pair[1]));
        }
    }

    /// D-1 or D-2: distinct n-grams per word; 0 without words.
    pub fn distinct(&self, n: usize) -> f64 {
        let distinct = match n {
            1 => self.unigrams.len(),
            2 => self.bigrams.len(),
            _ => return 0.0,
        };
        if self.words == 0 {
            0.0
        } else {
            distinct as f64 / self.words as f64
        }
    }
}

/// D-1 and D-2 of the original and the augmented captions.
#[derive(Default)]
pub struct DiversitySection {
    sets: [DistinctNgrams; 2],
}

impl ReportSection for DiversitySection {
    fn observe(&mut self, sample: &SampleRow) {
        let words = Tokenizer::Whitespace.tokenize(&sample.text);
        self.sets[set_of(sample)].add(&words);
    }

    fn render(&self, _context: &ReportContext<'_>) -> Result<Option<Section>> {
        if self.sets.iter().all(|s| s.captions == 0) {
            return Ok(None);
        }
        let sets: Vec<usize> = (0..2).filter(|&set| self.sets[set].captions > 0).collect();
        let table = Table {
            columns: vec![
                "set".into(),
                "captions".into(),
                "words".into(),
                "distinct unigrams".into(),
                "distinct bigrams".into(),
                "D-1".into(),
                "D-2".into(),
            ],
            rows: sets
                .iter()
                .map(|&set| {
                    let s = &self.sets[set];
                    vec![
                        Cell::Text(SET_NAMES[set].into()),
                        Cell::Count(s.captions),
                        Cell::Count(s.words),
                        Cell::Count(s.unigrams.len() as u64),
                        Cell::Count(s.bigrams.len() as u64),
                        Cell::Number(s.distinct(1)),
                        Cell::Number(s.distinct(2)),
                    ]
                })
                .collect(),
        };
        Ok(Some(Section {
            id: "diversity".into(),
            title: "Diversity (D-1, D-2)".into(),
            summary: sets
                .iter()
                .map(|&set| {
                    let s = &self.sets[set];
                    format!(
                        "{}: D-1 {:.4}, D-2 {:.4} ({} captions, {} words)",
                        SET_NAMES[set],
                        s.distinct(1),
                        s.distinct(2),
                        s.captions,
                        s.words
                    )
                })
                .collect(),
            blocks: vec![
                Block::Table(table),
                text(
                    "D-n is the number of distinct n-grams of a set's captions divided by its \
                     number of words; captions are lower-cased and split on whitespace (the \
                     `whitespace` tokenizer of `capflow eval captions`).",
                ),
            ],
        }))
    }
}

/// A horizontal bar chart of one series of counts (`series`), a bar per category.
fn counts_chart(
    id: &str,
    title: &str,
    categories_label: &str,
    values_label: &str,
    categories: Vec<String>,
    series: &str,
    values: Vec<f64>,
) -> Block {
    Block::Chart(
        BarChart::new(
            id,
            title,
            categories_label,
            values_label,
            categories,
            vec![Series {
                name: series.into(),
                values,
            }],
        )
        .horizontal(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::diversity::distinct_n;

    #[test]
    fn streamed_distinct_ngrams_equal_distinct_n() {
        let captions: Vec<Vec<String>> = ["a dog runs", "A dog", "the dog runs fast", ""]
            .iter()
            .map(|c| Tokenizer::Whitespace.tokenize(c))
            .collect();
        let mut streamed = DistinctNgrams::default();
        for caption in &captions {
            streamed.add(caption);
        }
        for n in [1, 2] {
            assert_eq!(streamed.distinct(n), distinct_n(&captions, n));
        }
        // By hand: 9 words; unigrams a dog runs the fast = 5; bigrams a-dog dog-runs
        // the-dog runs-fast = 4.
        assert_eq!(streamed.distinct(1), 5.0 / 9.0);
        assert_eq!(streamed.distinct(2), 4.0 / 9.0);
    }

    #[test]
    fn coverage_labels_follow_the_bins() {
        let h = SetHistogram::coverage(10);
        assert_eq!(h.categories.first().map(String::as_str), Some("0-10"));
        assert_eq!(h.categories.last().map(String::as_str), Some("90-100"));
        let h = SetHistogram::coverage(8);
        assert_eq!(h.categories[1], "12.5-25");
    }
}
