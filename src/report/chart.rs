//! Grouped bar charts drawn as SVG with [`plotters`].
//!
//! One chart is a list of categories and one or more series of values, drawn side by side in
//! each category. Every category is labelled: under its bars (turned upright when the labels do
//! not fit side by side) or, for a [`Orientation::Horizontal`] chart, to the left of them. The
//! value axis starts at 0 and ends at a round number at or above the largest value. Text is
//! SVG `<text>` in the browser's sans-serif font, so any Unicode shows and nothing is rasterised
//! here.

use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use serde::Serialize;

use crate::error::{Error, Result};

/// Width of every chart in pixels (the SVG's `viewBox`; the page scales it down to fit).
pub const CHART_WIDTH: u32 = 960;
/// Height of a vertical chart; a horizontal one grows with its number of bars.
pub const CHART_HEIGHT: u32 = 440;

/// Ticks on the value axis: it ends at `Y_TICKS` round steps.
const Y_TICKS: usize = 5;
const FONT: &str = "sans-serif";
const TITLE_SIZE: f64 = 22.0;
const LABEL_SIZE: f64 = 16.0;
/// Rough width of a character of the label font, for sizing label areas (SVG text is laid out
/// by the browser).
const CHAR_WIDTH: f64 = 0.62 * LABEL_SIZE / 1.24;
/// Height of one bar of a horizontal chart and the gap around a category's group.
const BAR_THICKNESS: u32 = 12;
const GROUP_GAP: u32 = 10;

const INK: RGBColor = RGBColor(40, 40, 40);
const MARKER: RGBColor = RGBColor(200, 30, 30);

/// Series colours in order: blue for the first (originals), orange for the second (augmented).
pub const PALETTE: [(u8, u8, u8); 6] = [
    (31, 119, 180),
    (255, 127, 14),
    (44, 160, 44),
    (214, 39, 40),
    (148, 103, 189),
    (140, 86, 75),
];

fn colour(series: usize) -> RGBColor {
    let (r, g, b) = PALETTE[series % PALETTE.len()];
    RGBColor(r, g, b)
}

/// One series of a bar chart: one value per category.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Series {
    pub name: String,
    pub values: Vec<f64>,
}

/// Which way the bars grow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Orientation {
    /// Categories along the x axis, bars growing up.
    #[default]
    Vertical,
    /// Categories down the y axis, first on top, bars growing right: for many or long labels.
    Horizontal,
}

/// A line across the bars at a place on the category axis, such as a threshold between bins.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Marker {
    /// In category widths from the start of the axis: 0 is the first category's left edge,
    /// 2.5 the middle of the third.
    pub position: f64,
    pub label: String,
}

/// A grouped bar chart, shown inline in the HTML as SVG.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BarChart {
    /// Element id in the HTML: ASCII letters, digits, `-` and `_`.
    pub id: String,
    pub title: String,
    /// Names the categories.
    pub x_label: String,
    /// Names the values.
    pub y_label: String,
    pub categories: Vec<String>,
    pub series: Vec<Series>,
    pub orientation: Orientation,
    pub markers: Vec<Marker>,
}

impl BarChart {
    /// A vertical chart without markers.
    pub fn new(
        id: impl Into<String>,
        title: impl Into<String>,
        x_label: impl Into<String>,
        y_label: impl Into<String>,
        categories: Vec<String>,
        series: Vec<Series>,
    ) -> BarChart {
        BarChart {
            id: id.into(),
            title: title.into(),
            x_label: x_label.into(),
            y_label: y_label.into(),
            categories,
            series,
            orientation: Orientation::Vertical,
            markers: Vec::new(),
        }
    }

    /// The same chart with the categories down the side.
    pub fn horizontal(mut self) -> BarChart {
        self.orientation = Orientation::Horizontal;
        self
    }

    /// Checks what would make the chart undrawable or its id unsafe.
    pub fn validate(&self) -> Result<()> {
        let what = || format!("chart {:?}", self.id);
        if self.id.is_empty()
            || !self
                .id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(Error::invalid(
                what(),
                "a chart id is made of ASCII letters, digits, `-` and `_`",
            ));
        }
        if let Some(series) = self
            .series
            .iter()
            .find(|s| s.values.len() != self.categories.len())
        {
            return Err(Error::invalid(
                what(),
                format!(
                    "series {:?} has {} values for {} categories",
                    series.name,
                    series.values.len(),
                    self.categories.len()
                ),
            ));
        }
        if let Some(series) = self
            .series
            .iter()
            .find(|s| s.values.iter().any(|v| !v.is_finite() || *v < 0.0))
        {
            return Err(Error::invalid(
                what(),
                format!(
                    "series {:?} has a negative or non-finite value",
                    series.name
                ),
            ));
        }
        if let Some(marker) = self.markers.iter().find(|m| {
            !m.position.is_finite() || m.position < 0.0 || m.position > self.categories.len() as f64
        }) {
            return Err(Error::invalid(
                what(),
                format!(
                    "marker {:?} at {} is off the {} categories",
                    marker.label,
                    marker.position,
                    self.categories.len()
                ),
            ));
        }
        Ok(())
    }

    /// The end of the value axis: the smallest multiple of a round tick step (1, 2 or 5 ×
    /// 10^k) that reaches the largest value in 5 steps; 1 for an empty or all-zero chart.
    pub fn y_max(&self) -> f64 {
        let largest = self
            .series
            .iter()
            .flat_map(|s| s.values.iter().copied())
            .fold(0.0, f64::max);
        y_step(largest) * Y_TICKS as f64
    }

    /// The value axis' tick labels, from 0 to [`BarChart::y_max`].
    pub fn y_ticks(&self) -> Vec<String> {
        let step = self.y_max() / Y_TICKS as f64;
        (0..=Y_TICKS)
            .map(|i| tick_label(step * i as f64, step))
            .collect()
    }

    /// Width and height of the drawing in pixels.
    pub fn size(&self) -> (u32, u32) {
        match self.orientation {
            Orientation::Vertical => (CHART_WIDTH, CHART_HEIGHT),
            Orientation::Horizontal => {
                let group = BAR_THICKNESS * self.series.len().max(1) as u32 + GROUP_GAP;
                let legend = if self.series.len() > 1 { 30 } else { 0 };
                let height = 120 + legend + group * self.categories.len().max(1) as u32;
                (CHART_WIDTH, height.max(200))
            }
        }
    }

    /// The chart as an SVG document (`<svg ...>...</svg>`, no XML declaration, so that it
    /// can stand in an HTML page as it is).
    pub fn to_svg(&self) -> Result<String> {
        self.validate()?;
        let mut svg = String::new();
        {
            let root = SVGBackend::with_string(&mut svg, self.size()).into_drawing_area();
            self.draw(&root)
                .map_err(|e| Error::invalid(format!("chart {:?}", self.id), e.to_string()))?;
            root.present()
                .map_err(|e| Error::invalid(format!("chart {:?}", self.id), e.to_string()))?;
        }
        Ok(svg)
    }

    fn draw<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, Shift>,
    ) -> std::result::Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
        root.fill(&WHITE)?;
        let label = (FONT, LABEL_SIZE).into_font().color(&INK);
        let title = (FONT, TITLE_SIZE).into_font().color(&INK);
        root.draw(&Text::new(
            self.title.clone(),
            (20, 12),
            title.pos(Pos::new(HPos::Left, VPos::Top)),
        ))?;
        let legend_height = self.draw_legend(root, &label)?;
        let n = self.categories.len().max(1) as f64;
        let y_max = self.y_max();
        let step = y_max / Y_TICKS as f64;
        let widest = self
            .categories
            .iter()
            .map(|c| text_width(c))
            .fold(0.0, f64::max);
        let formatter = |v: &f64| tick_label(*v, step);
        let top = 48 + legend_height;
        match self.orientation {
            Orientation::Vertical => {
                let slot = (CHART_WIDTH as f64 - 120.0) / n;
                let upright = widest + 6.0 > slot;
                let label_area = if upright { widest + 16.0 } else { 24.0 };
                let mut chart = ChartBuilder::on(root)
                    .margin_top(top)
                    .margin_right(24)
                    .margin_left(8)
                    .margin_bottom(8)
                    .x_label_area_size(label_area as u32 + 28)
                    .y_label_area_size(80)
                    .build_cartesian_2d(0f64..n, 0f64..y_max)?;
                chart
                    .configure_mesh()
                    .disable_x_mesh()
                    .max_light_lines(0)
                    .x_labels(0)
                    .y_labels(Y_TICKS + 1)
                    .y_label_formatter(&formatter)
                    .label_style(label.clone())
                    .axis_desc_style(label.clone())
                    .x_desc(self.x_label.as_str())
                    .y_desc(self.y_label.as_str())
                    .draw()?;
                self.draw_bars(&mut chart, false)?;
                for (i, name) in self.categories.iter().enumerate() {
                    let (x, y) = chart.backend_coord(&(i as f64 + 0.5, 0.0));
                    let style = if upright {
                        label
                            .clone()
                            .transform(FontTransform::Rotate270)
                            .pos(Pos::new(HPos::Right, VPos::Center))
                    } else {
                        label.clone().pos(Pos::new(HPos::Center, VPos::Top))
                    };
                    root.draw(&Text::new(name.clone(), (x, y + 6), style))?;
                }
                for (i, marker) in self.markers.iter().enumerate() {
                    let (x, y0) = chart.backend_coord(&(marker.position, y_max));
                    let (_, y1) = chart.backend_coord(&(marker.position, 0.0));
                    root.draw(&PathElement::new(
                        vec![(x, y0 - 4), (x, y1)],
                        MARKER.stroke_width(2),
                    ))?;
                    let right = marker.position > n * 0.85;
                    let anchor = if right { HPos::Right } else { HPos::Left };
                    let dx = if right { -6 } else { 6 };
                    // Labels of several markers step down so that near ones do not overlap.
                    root.draw(&Text::new(
                        marker.label.clone(),
                        (x + dx, y0 + 20 * i as i32),
                        label
                            .clone()
                            .color(&MARKER)
                            .pos(Pos::new(anchor, VPos::Top)),
                    ))?;
                }
            }
            Orientation::Horizontal => {
                let mut chart = ChartBuilder::on(root)
                    .margin_top(top)
                    .margin_right(24)
                    .margin_left(8)
                    .margin_bottom(8)
                    .x_label_area_size(56)
                    .y_label_area_size(widest as u32 + 20)
                    .build_cartesian_2d(0f64..y_max, 0f64..n)?;
                chart
                    .configure_mesh()
                    .disable_y_mesh()
                    .max_light_lines(0)
                    .y_labels(0)
                    .x_labels(Y_TICKS + 1)
                    .x_label_formatter(&formatter)
                    .label_style(label.clone())
                    .axis_desc_style(label.clone())
                    .x_desc(self.y_label.as_str())
                    .draw()?;
                self.draw_bars(&mut chart, true)?;
                for (i, name) in self.categories.iter().enumerate() {
                    let (x, y) = chart.backend_coord(&(0.0, n - i as f64 - 0.5));
                    root.draw(&Text::new(
                        name.clone(),
                        (x - 8, y),
                        label.clone().pos(Pos::new(HPos::Right, VPos::Center)),
                    ))?;
                }
            }
        }
        Ok(())
    }

    /// Bars of every series; `horizontal` swaps the axes, category `i` counted from the top.
    fn draw_bars<DB: DrawingBackend>(
        &self,
        chart: &mut ChartContext<'_, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
        horizontal: bool,
    ) -> std::result::Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
        let n = self.categories.len() as f64;
        let group = 0.8;
        let width = group / self.series.len().max(1) as f64;
        for (s, series) in self.series.iter().enumerate() {
            let fill = colour(s).filled();
            chart.draw_series(series.values.iter().enumerate().map(|(c, &value)| {
                let start = c as f64 + (1.0 - group) / 2.0 + width * s as f64;
                let corners = if horizontal {
                    [(0.0, n - start - width), (value, n - start)]
                } else {
                    [(start, 0.0), (start + width, value)]
                };
                Rectangle::new(corners, fill)
            }))?;
        }
        Ok(())
    }

    /// A swatch and name per series under the title when there are several; returns the
    /// height it took.
    fn draw_legend<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, Shift>,
        label: &TextStyle<'_>,
    ) -> std::result::Result<u32, DrawingAreaErrorKind<DB::ErrorType>> {
        if self.series.len() < 2 {
            return Ok(0);
        }
        let y = 48;
        let mut x = 100.0;
        for (s, series) in self.series.iter().enumerate() {
            let x0 = x as i32;
            root.draw(&Rectangle::new(
                [(x0, y), (x0 + 14, y + 14)],
                colour(s).filled(),
            ))?;
            root.draw(&Text::new(
                series.name.clone(),
                (x0 + 20, y + 7),
                label.clone().pos(Pos::new(HPos::Left, VPos::Center)),
            ))?;
            x += 20.0 + text_width(&series.name) + 28.0;
        }
        Ok(30)
    }
}

/// Estimated width of `text` in the label font, in pixels.
fn text_width(text: &str) -> f64 {
    text.chars().count() as f64 * CHAR_WIDTH
}

/// The round tick step (1, 2 or 5 × 10^k) that reaches `largest` in [`Y_TICKS`] steps.
fn y_step(largest: f64) -> f64 {
    if largest <= 0.0 || !largest.is_finite() {
        return 1.0 / Y_TICKS as f64;
    }
    let raw = largest / Y_TICKS as f64;
    let magnitude = 10f64.powf(raw.log10().floor());
    for factor in [1.0, 2.0, 5.0, 10.0] {
        let step = factor * magnitude;
        // Tolerate rounding in `raw` so that e.g. 50 / 5 gives step 10, not 20.
        if step >= raw * (1.0 - 1e-12) {
            return step;
        }
    }
    10.0 * magnitude
}

/// A tick value with as many decimals as the step needs, large values shortened with k / M.
fn tick_label(value: f64, step: f64) -> String {
    if step >= 1e6 {
        return format!("{}M", trim(value / 1e6));
    }
    if step >= 1e3 {
        return format!("{}k", trim(value / 1e3));
    }
    let decimals = if step >= 1.0 {
        0
    } else {
        (-step.log10().floor()) as usize
    };
    format!("{value:.decimals$}")
}

fn trim(value: f64) -> String {
    let text = format!("{value:.1}");
    text.strip_suffix(".0").unwrap_or(&text).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart(values: Vec<Vec<f64>>) -> BarChart {
        let categories = (0..values[0].len()).map(|i| format!("c{i}")).collect();
        BarChart::new(
            "test",
            "test",
            "x",
            "y",
            categories,
            values
                .into_iter()
                .enumerate()
                .map(|(i, values)| Series {
                    name: format!("s{i}"),
                    values,
                })
                .collect(),
        )
    }

    #[test]
    fn y_axis_ends_on_a_round_step() {
        // Largest 37 → raw step 7.4 → 10 → axis 50; largest 50 → step 10 exactly.
        assert_eq!(chart(vec![vec![37.0, 1.0]]).y_max(), 50.0);
        assert_eq!(chart(vec![vec![50.0]]).y_max(), 50.0);
        assert_eq!(chart(vec![vec![0.3]]).y_max(), 0.5);
        assert_eq!(chart(vec![vec![1234.0]]).y_max(), 2500.0);
        assert_eq!(chart(vec![vec![0.0]]).y_max(), 1.0);
        assert_eq!(
            chart(vec![vec![37.0]]).y_ticks(),
            ["0", "10", "20", "30", "40", "50"]
        );
        assert_eq!(tick_label(0.3, 0.1), "0.3");
        assert_eq!(tick_label(40.0, 10.0), "40");
        assert_eq!(tick_label(1500.0, 500.0), "1500");
        assert_eq!(tick_label(15000.0, 5000.0), "15k");
        assert_eq!(tick_label(2_000_000.0, 1_000_000.0), "2M");
    }

    /// The `<text>` elements of an SVG, their content unescaped.
    fn texts(svg: &str) -> Vec<String> {
        svg.split("<text")
            .skip(1)
            .filter_map(|t| {
                let body = &t[t.find('>')? + 1..t.find("</text>")?];
                Some(
                    body.trim()
                        .replace("&lt;", "<")
                        .replace("&gt;", ">")
                        .replace("&quot;", "\"")
                        .replace("&#39;", "'")
                        .replace("&apos;", "'")
                        .replace("&amp;", "&"),
                )
            })
            .collect()
    }

    #[test]
    fn every_label_is_svg_text() {
        let mut chart = chart(vec![vec![40.0, 10.0, 3.0], vec![0.0, 25.0, 1.0]]);
        chart.title = "Längen & <Wörter> 字".into();
        chart.categories = vec!["é".into(), "a long category name".into(), "c".into()];
        chart.markers.push(Marker {
            position: 1.5,
            label: "threshold 0.7".into(),
        });
        let svg = chart.to_svg().unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..40]);
        let texts = texts(&svg);
        for expected in [
            "Längen & <Wörter> 字",
            "é",
            "a long category name",
            "c",
            "s0",
            "s1",
            "x",
            "y",
            "threshold 0.7",
            "0",
            "50",
        ] {
            assert!(texts.iter().any(|t| t == expected), "{expected}: {texts:?}");
        }
        // The axis does not run past its round end.
        assert!(!texts.iter().any(|t| t == "60"), "{texts:?}");
        let horizontal = chart.clone().horizontal();
        let mut horizontal = horizontal;
        horizontal.markers.clear();
        let texts_h = super::tests::texts(&horizontal.to_svg().unwrap());
        for expected in ["é", "a long category name", "c", "50"] {
            assert!(texts_h.iter().any(|t| t == expected), "{expected}");
        }
    }

    #[test]
    fn bars_are_drawn_in_proportion_to_their_values() {
        // Values 40 and 10 on an axis to 50: the first bar is four times the second.
        let chart = chart(vec![vec![40.0, 10.0]]);
        let svg = chart.to_svg().unwrap();
        let blue = "fill=\"#1F77B4\"";
        let heights: Vec<f64> = svg
            .split("<rect")
            .filter(|r| r.contains(blue))
            .filter_map(|r| {
                let attr = |name: &str| -> Option<f64> {
                    let at = r.find(&format!(" {name}=\""))? + name.len() + 3;
                    r[at..].split('"').next()?.parse().ok()
                };
                attr("height")
            })
            .collect();
        assert_eq!(heights.len(), 2, "{svg}");
        assert!((heights[0] / heights[1] - 4.0).abs() < 0.1, "{heights:?}");
    }

    #[test]
    fn undrawable_charts_are_errors() {
        let mut bad = chart(vec![vec![1.0, 2.0]]);
        bad.series[0].values.pop();
        assert!(bad.to_svg().is_err());
        let mut bad = chart(vec![vec![1.0]]);
        bad.id = "../x".into();
        assert!(bad.to_svg().is_err());
        let bad = chart(vec![vec![f64::NAN]]);
        assert!(bad.to_svg().is_err());
        let mut bad = chart(vec![vec![1.0]]);
        bad.markers.push(Marker {
            position: 2.0,
            label: "off".into(),
        });
        assert!(bad.to_svg().is_err());
    }
}
