//! Run reports: what a capflow dataset holds, as one self-contained HTML page with SVG charts,
//! JSON and a text summary.
//!
//! A [`Report`] is a list of [`Section`]s, each made of text, tables and bar charts. The
//! sections of a dataset report come from [`ReportSection`]s: the report reads the dataset's
//! samples once and shows every row to every section, then asks each for its content; a section
//! with nothing to show for the dataset (no CLID samples, no GBC graphs, no quality scores) is
//! left out. [`default_sections`] lists the built-in ones (stages, drops, methods, coverage,
//! caption length, length level, quality scores, diversity, CLID, GBC); a method adds its own
//! statistics by adding a section to that list.
//!
//! ```no_run
//! use capflow::report::{dataset_report, default_sections, ReportOptions};
//! # fn main() -> capflow::Result<()> {
//! let dir = std::path::Path::new("out/sample");
//! let report = dataset_report(dir, default_sections(&ReportOptions::default()))?;
//! let written = report.write(&dir.join("report"))?;
//! print!("{}", report.summary());
//! # Ok(()) }
//! ```

pub mod chart;
pub mod graphs;
mod html;
pub mod quality;
pub mod sections;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::{Error, Result};
use crate::export::{read_manifest, read_table, Manifest};
use crate::schema::{batch_to_rows, SampleRow, TableKind};

pub use chart::{BarChart, Marker, Orientation, Series, CHART_HEIGHT, CHART_WIDTH};
pub use sections::default_sections;

/// What a report needs besides the dataset.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReportOptions {
    /// Thresholds to mark on the quality-score charts, by score name (the dataset does not
    /// record them: they come from the run's spec or the command line).
    pub thresholds: BTreeMap<String, Vec<f64>>,
}

/// The HTML file a report is written to.
pub const HTML_FILE: &str = "report.html";
/// The JSON file holding the same numbers as the HTML.
pub const JSON_FILE: &str = "report.json";

/// A rendered report: a title and its sections.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    pub title: String,
    pub sections: Vec<Section>,
}

/// One part of a report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Section {
    /// Anchor in the HTML and key in the JSON: ASCII letters, digits, `-` and `_`.
    pub id: String,
    pub title: String,
    /// Lines of the text summary printed to the terminal.
    pub summary: Vec<String>,
    pub blocks: Vec<Block>,
}

/// What a section shows.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Block {
    Text { text: String },
    Table(Table),
    Chart(BarChart),
}

/// A table with a header row.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Table {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<Cell>>,
}

/// A table cell; numbers stay numbers in the JSON.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Cell {
    Count(u64),
    /// Shown with four decimals.
    Number(f64),
    /// A percentage in [0, 100], shown with one decimal and `%`.
    Percent(f64),
    Text(String),
}

impl Cell {
    /// The cell as the HTML and the summary show it.
    pub fn display(&self) -> String {
        match self {
            Cell::Count(n) => n.to_string(),
            Cell::Number(x) => format!("{x:.4}"),
            Cell::Percent(x) => format!("{x:.1}%"),
            Cell::Text(t) => t.clone(),
        }
    }
}

/// The dataset a report describes, as sections see it when they render.
pub struct ReportContext<'a> {
    pub dir: &'a Path,
    pub manifest: &'a Manifest,
}

/// One section of a dataset report, filled while the samples stream past.
///
/// # Execution model
///
/// Push, single pass: [`dataset_report`] reads the dataset's `samples` table once, shard by
/// shard in manifest order, and calls [`observe`](ReportSection::observe) on every section for
/// every sample row; then it calls [`render`](ReportSection::render) once per section, in list
/// order, with the manifest. Sections keep only the statistics they need, so memory does not
/// grow with the number of samples (beyond what a statistic such as distinct n-grams needs).
///
/// # Required and provided methods
///
/// `render` is required; it returns `None` when the dataset holds nothing the section shows,
/// and the section is left out of the report. `observe` defaults to ignoring rows, for sections
/// built from the manifest alone (stage metrics) or from other tables, which `render` can read
/// through [`ReportContext::dir`].
///
/// # Errors
///
/// `observe` cannot fail: a sample row a statistic cannot use (a coverage that is not a
/// number) is counted apart, not an error. An error from `render` (another table that cannot
/// be read) stops the report with that error; nothing is written.
pub trait ReportSection {
    /// Sees one sample row.
    fn observe(&mut self, _sample: &SampleRow) {}

    /// The section's content; `None` leaves the section out.
    fn render(&self, context: &ReportContext<'_>) -> Result<Option<Section>>;
}

/// Builds the report of the dataset in `dir` from `sections`.
pub fn dataset_report(dir: &Path, mut sections: Vec<Box<dyn ReportSection>>) -> Result<Report> {
    let manifest = read_manifest(dir)?;
    if manifest.table_rows(TableKind::Samples) > 0 {
        for batch in read_table(dir, TableKind::Samples)? {
            let rows: Vec<SampleRow> = batch_to_rows(&batch?)?;
            for row in &rows {
                for section in sections.iter_mut() {
                    section.observe(row);
                }
            }
        }
    }
    let context = ReportContext {
        dir,
        manifest: &manifest,
    };
    let mut rendered = Vec::new();
    for section in &sections {
        rendered.extend(section.render(&context)?);
    }
    Ok(Report {
        title: format!("capflow report: {}", dir.display()),
        sections: rendered,
    })
}

impl Report {
    /// Writes `report.html` (self-contained, the charts inline), `report.json` and each chart
    /// as `<id>.svg` into `out` (created when missing) and returns the paths written. Every
    /// chart is drawn before anything is written, so an undrawable chart leaves no partial
    /// report behind.
    pub fn write(&self, out: &Path) -> Result<Vec<PathBuf>> {
        self.check_ids()?;
        let mut files: Vec<(PathBuf, Vec<u8>)> = Vec::new();
        for chart in self.charts() {
            files.push((
                out.join(format!("{}.svg", chart.id)),
                chart.to_svg()?.into_bytes(),
            ));
        }
        let json = serde_json::to_string_pretty(self)
            .map_err(|e| Error::invalid("report JSON", e.to_string()))?;
        files.push((out.join(JSON_FILE), json.into_bytes()));
        files.push((out.join(HTML_FILE), html::render(self)?.into_bytes()));
        std::fs::create_dir_all(out).map_err(|e| Error::io(out, e))?;
        for (path, bytes) in &files {
            std::fs::write(path, bytes).map_err(|e| Error::io(path, e))?;
        }
        Ok(files.into_iter().map(|(path, _)| path).collect())
    }

    /// Every chart of the report, in section order.
    pub fn charts(&self) -> impl Iterator<Item = &BarChart> {
        self.sections
            .iter()
            .flat_map(|s| s.blocks.iter())
            .filter_map(|b| match b {
                Block::Chart(chart) => Some(chart),
                _ => None,
            })
    }

    /// The section with `id`.
    pub fn section(&self, id: &str) -> Option<&Section> {
        self.sections.iter().find(|s| s.id == id)
    }

    /// The text summary: each section's title and summary lines.
    pub fn summary(&self) -> String {
        let mut out = format!("{}\n", self.title);
        for section in &self.sections {
            if section.summary.is_empty() {
                continue;
            }
            out.push_str(&format!("{}:\n", section.title));
            for line in &section.summary {
                out.push_str(&format!("  {line}\n"));
            }
        }
        out
    }

    /// Chart ids name files and elements, section ids name anchors: both must be unique.
    fn check_ids(&self) -> Result<()> {
        let mut charts = std::collections::HashSet::new();
        for chart in self.charts() {
            if !charts.insert(chart.id.as_str()) {
                return Err(Error::invalid(
                    "report",
                    format!("two charts have the id {:?}", chart.id),
                ));
            }
        }
        let mut sections = std::collections::HashSet::new();
        for section in &self.sections {
            if !sections.insert(section.id.as_str()) {
                return Err(Error::invalid(
                    "report",
                    format!("two sections have the id {:?}", section.id),
                ));
            }
        }
        Ok(())
    }
}
