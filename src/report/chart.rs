//! Grouped bar charts drawn into an RGB buffer and encoded as PNG.
//!
//! One chart is a list of categories (the x axis) and one or more series of values, drawn side
//! by side in each category. The y axis starts at 0 and ends at a round number at or above the
//! largest value. Labels use the built-in 5×7 font ([`super::font`]) at twice its size.

use serde::Serialize;

use super::font::{glyph, text_width, ADVANCE, GLYPH_HEIGHT, GLYPH_WIDTH};
use crate::error::{Error, Result};

/// Width and height of every chart image in pixels.
pub const CHART_WIDTH: u32 = 960;
pub const CHART_HEIGHT: u32 = 420;

/// Text is drawn at this many image pixels per font pixel.
const TEXT_SCALE: usize = 2;
const PLOT_LEFT: usize = 100;
const PLOT_RIGHT: usize = CHART_WIDTH as usize - 20;
const PLOT_TOP: usize = 64;
const PLOT_BOTTOM: usize = CHART_HEIGHT as usize - 64;
const Y_TICKS: usize = 5;

/// An RGB colour.
pub type Rgb = [u8; 3];

const WHITE: Rgb = [255, 255, 255];
const INK: Rgb = [40, 40, 40];
const GRID: Rgb = [225, 225, 225];

/// Series colours in order: blue for the first (originals), orange for the second (augmented).
pub const PALETTE: [Rgb; 6] = [
    [31, 119, 180],
    [255, 127, 14],
    [44, 160, 44],
    [214, 39, 40],
    [148, 103, 189],
    [140, 86, 75],
];

/// One series of a bar chart: one value per category.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Series {
    pub name: String,
    pub values: Vec<f64>,
}

/// A grouped bar chart, written as `<id>.png`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BarChart {
    /// File stem of the image: ASCII letters, digits, `-` and `_`.
    pub id: String,
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub categories: Vec<String>,
    pub series: Vec<Series>,
}

/// A pixel rectangle `[x0, x1) × [y0, y1)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rect {
    pub x0: usize,
    pub y0: usize,
    pub x1: usize,
    pub y1: usize,
}

impl BarChart {
    /// Checks what would make the chart undrawable or its file name unsafe.
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
                "a chart id is a file stem of ASCII letters, digits, `-` and `_`",
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
        Ok(())
    }

    /// The top of the y axis: the smallest multiple of a round tick step (1, 2 or 5 × 10^k)
    /// that reaches the largest value in [`Y_TICKS`] steps; 1 for an empty or all-zero chart.
    pub fn y_max(&self) -> f64 {
        let largest = self
            .series
            .iter()
            .flat_map(|s| s.values.iter().copied())
            .fold(0.0, f64::max);
        y_step(largest) * Y_TICKS as f64
    }

    /// The plot area: the rectangle bars grow in, from its bottom edge.
    pub fn plot_area(&self) -> Rect {
        Rect {
            x0: PLOT_LEFT,
            y0: PLOT_TOP,
            x1: PLOT_RIGHT,
            y1: PLOT_BOTTOM,
        }
    }

    /// Where the bar of `series` in `category` is drawn; zero-height for a zero value.
    pub fn bar(&self, category: usize, series: usize) -> Rect {
        let plot = self.plot_area();
        let slot = (plot.x1 - plot.x0) as f64 / self.categories.len().max(1) as f64;
        let group = slot * 0.8;
        let width = group / self.series.len().max(1) as f64;
        let left = plot.x0 as f64 + slot * category as f64 + (slot - group) / 2.0;
        let x0 = (left + width * series as f64).round() as usize;
        let x1 = ((left + width * (series + 1) as f64).round() as usize).max(x0 + 1);
        let value = self.series[series].values[category];
        let height = (value / self.y_max() * (plot.y1 - plot.y0) as f64).round() as usize;
        Rect {
            x0,
            y0: plot.y1 - height.min(plot.y1 - plot.y0),
            x1,
            y1: plot.y1,
        }
    }

    /// The chart as RGB pixels, row by row.
    pub fn render(&self) -> Result<Canvas> {
        self.validate()?;
        let mut canvas = Canvas::new(CHART_WIDTH as usize, CHART_HEIGHT as usize);
        let plot = self.plot_area();
        canvas.text(PLOT_LEFT, 12, &self.title, INK);
        self.draw_legend(&mut canvas);
        // Grid lines and y tick labels.
        let step = self.y_max() / Y_TICKS as f64;
        for tick in 0..=Y_TICKS {
            let y = plot.y1 - (tick * (plot.y1 - plot.y0)) / Y_TICKS;
            canvas.fill(
                Rect {
                    x0: plot.x0,
                    y0: y,
                    x1: plot.x1,
                    y1: y + 1,
                },
                GRID,
            );
            let label = tick_label(step * tick as f64, step);
            let width = text_width(&label) * TEXT_SCALE;
            let x = plot.x0.saturating_sub(width + 8);
            canvas.text(
                x,
                y.saturating_sub(GLYPH_HEIGHT * TEXT_SCALE / 2),
                &label,
                INK,
            );
        }
        canvas.text(8, PLOT_TOP - 26, &self.y_label, INK);
        for (s, _) in self.series.iter().enumerate() {
            for c in 0..self.categories.len() {
                canvas.fill(self.bar(c, s), PALETTE[s % PALETTE.len()]);
            }
        }
        // Axes over the bars' feet.
        canvas.fill(
            Rect {
                x0: plot.x0,
                y0: plot.y1,
                x1: plot.x1,
                y1: plot.y1 + 2,
            },
            INK,
        );
        canvas.fill(
            Rect {
                x0: plot.x0 - 2,
                y0: plot.y0,
                x1: plot.x0,
                y1: plot.y1 + 2,
            },
            INK,
        );
        self.draw_category_labels(&mut canvas);
        let x_label_width = text_width(&self.x_label) * TEXT_SCALE;
        let x = plot.x0 + ((plot.x1 - plot.x0).saturating_sub(x_label_width)) / 2;
        canvas.text(x, plot.y1 + 36, &self.x_label, INK);
        Ok(canvas)
    }

    /// Category labels centred under their slots; when they do not fit side by side, only
    /// every k-th is drawn, counted back from the last (whose label is often the open-ended
    /// one, such as `40+`).
    fn draw_category_labels(&self, canvas: &mut Canvas) {
        let plot = self.plot_area();
        let n = self.categories.len().max(1);
        let slot = (plot.x1 - plot.x0) as f64 / n as f64;
        let widest = self
            .categories
            .iter()
            .map(|c| text_width(c) * TEXT_SCALE)
            .max()
            .unwrap_or(0) as f64
            + 8.0;
        let stride = ((widest / slot).ceil() as usize).max(1);
        for (c, label) in self.categories.iter().enumerate() {
            if !(n - 1 - c).is_multiple_of(stride) {
                continue;
            }
            let centre = plot.x0 as f64 + slot * (c as f64 + 0.5);
            let width = (text_width(label) * TEXT_SCALE) as f64;
            let x = (centre - width / 2.0).max(0.0).round() as usize;
            canvas.text(x, plot.y1 + 10, label, INK);
        }
    }

    fn draw_legend(&self, canvas: &mut Canvas) {
        let swatch = GLYPH_HEIGHT * TEXT_SCALE;
        let widths: usize = self
            .series
            .iter()
            .map(|s| swatch + 6 + text_width(&s.name) * TEXT_SCALE + 20)
            .sum();
        let mut x = PLOT_RIGHT.saturating_sub(widths);
        let y = 38;
        for (i, series) in self.series.iter().enumerate() {
            canvas.fill(
                Rect {
                    x0: x,
                    y0: y,
                    x1: x + swatch,
                    y1: y + swatch,
                },
                PALETTE[i % PALETTE.len()],
            );
            x += swatch + 6;
            canvas.text(x, y, &series.name, INK);
            x += text_width(&series.name) * TEXT_SCALE + 20;
        }
    }

    /// The chart as PNG bytes.
    pub fn to_png(&self) -> Result<Vec<u8>> {
        self.render()?.to_png()
    }
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

/// An RGB image being drawn.
#[derive(Clone, Debug)]
pub struct Canvas {
    width: usize,
    height: usize,
    pixels: Vec<u8>,
}

impl Canvas {
    pub fn new(width: usize, height: usize) -> Canvas {
        let mut pixels = Vec::with_capacity(width * height * 3);
        for _ in 0..width * height {
            pixels.extend_from_slice(&WHITE);
        }
        Canvas {
            width,
            height,
            pixels,
        }
    }

    pub fn width(&self) -> usize {
        self.width
    }

    pub fn height(&self) -> usize {
        self.height
    }

    /// The colour at (x, y); `None` outside the image.
    pub fn pixel(&self, x: usize, y: usize) -> Option<Rgb> {
        if x >= self.width || y >= self.height {
            return None;
        }
        let at = (y * self.width + x) * 3;
        Some([self.pixels[at], self.pixels[at + 1], self.pixels[at + 2]])
    }

    /// Fills `rect`, clipped to the image.
    pub fn fill(&mut self, rect: Rect, colour: Rgb) {
        for y in rect.y0..rect.y1.min(self.height) {
            for x in rect.x0..rect.x1.min(self.width) {
                let at = (y * self.width + x) * 3;
                self.pixels[at..at + 3].copy_from_slice(&colour);
            }
        }
    }

    /// Draws `text` with its top-left corner at (x, y), clipped to the image.
    pub fn text(&mut self, x: usize, y: usize, text: &str, colour: Rgb) {
        for (i, c) in text.chars().enumerate() {
            let origin = x + i * ADVANCE * TEXT_SCALE;
            for (row, bits) in glyph(c).iter().enumerate() {
                for column in 0..GLYPH_WIDTH {
                    if bits & (1 << (GLYPH_WIDTH - 1 - column)) != 0 {
                        let px = origin + column * TEXT_SCALE;
                        let py = y + row * TEXT_SCALE;
                        self.fill(
                            Rect {
                                x0: px,
                                y0: py,
                                x1: px + TEXT_SCALE,
                                y1: py + TEXT_SCALE,
                            },
                            colour,
                        );
                    }
                }
            }
        }
    }

    /// The image as an 8-bit RGB PNG.
    pub fn to_png(&self) -> Result<Vec<u8>> {
        let png_error = |e: png::EncodingError| Error::invalid("PNG chart", e.to_string());
        let mut bytes = Vec::new();
        {
            let mut encoder = png::Encoder::new(&mut bytes, self.width as u32, self.height as u32);
            encoder.set_color(png::ColorType::Rgb);
            encoder.set_depth(png::BitDepth::Eight);
            let mut writer = encoder.write_header().map_err(png_error)?;
            writer.write_image_data(&self.pixels).map_err(png_error)?;
            writer.finish().map_err(png_error)?;
        }
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart(values: Vec<Vec<f64>>) -> BarChart {
        let categories = (0..values[0].len()).map(|i| format!("c{i}")).collect();
        BarChart {
            id: "test".into(),
            title: "test".into(),
            x_label: "x".into(),
            y_label: "y".into(),
            categories,
            series: values
                .into_iter()
                .enumerate()
                .map(|(i, values)| Series {
                    name: format!("s{i}"),
                    values,
                })
                .collect(),
        }
    }

    #[test]
    fn y_axis_ends_on_a_round_step() {
        // Largest 37 → raw step 7.4 → 10 → axis 50; largest 50 → step 10 exactly.
        assert_eq!(chart(vec![vec![37.0, 1.0]]).y_max(), 50.0);
        assert_eq!(chart(vec![vec![50.0]]).y_max(), 50.0);
        assert_eq!(chart(vec![vec![0.3]]).y_max(), 0.5);
        assert_eq!(chart(vec![vec![1234.0]]).y_max(), 2500.0);
        assert_eq!(chart(vec![vec![0.0]]).y_max(), 1.0);
        assert_eq!(tick_label(0.3, 0.1), "0.3");
        assert_eq!(tick_label(40.0, 10.0), "40");
        assert_eq!(tick_label(1500.0, 500.0), "1500");
        assert_eq!(tick_label(15000.0, 5000.0), "15k");
        assert_eq!(tick_label(2_000_000.0, 1_000_000.0), "2M");
    }

    #[test]
    fn bars_are_drawn_in_proportion_to_their_values() {
        // Measure bar heights on the rendered pixels: values 40 and 10 on an axis to 50.
        let chart = chart(vec![vec![40.0, 10.0], vec![0.0, 25.0]]);
        let canvas = chart.render().unwrap();
        let plot = chart.plot_area();
        let height = |x: usize, colour: Rgb| {
            (plot.y0..plot.y1)
                .filter(|&y| canvas.pixel(x, y) == Some(colour))
                .count() as f64
        };
        let full = (plot.y1 - plot.y0) as f64;
        let centre = |r: Rect| (r.x0 + r.x1) / 2;
        let blue = PALETTE[0];
        let orange = PALETTE[1];
        assert!((height(centre(chart.bar(0, 0)), blue) - full * 0.8).abs() <= 1.0);
        assert!((height(centre(chart.bar(1, 0)), blue) - full * 0.2).abs() <= 1.0);
        assert!((height(centre(chart.bar(1, 1)), orange) - full * 0.5).abs() <= 1.0);
        assert_eq!(height(centre(chart.bar(0, 1)), orange), 0.0);
        // Bars of one category sit side by side, series in order.
        assert!(chart.bar(0, 0).x1 <= chart.bar(0, 1).x0);
        assert!(chart.bar(0, 1).x1 <= chart.bar(1, 0).x0);
    }

    #[test]
    fn png_round_trips() {
        let chart = chart(vec![vec![3.0, 1.0, 2.0]]);
        let bytes = chart.to_png().unwrap();
        let decoder = png::Decoder::new(std::io::Cursor::new(bytes));
        let mut reader = decoder.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size().unwrap()];
        let info = reader.next_frame(&mut buf).unwrap();
        assert_eq!((info.width, info.height), (CHART_WIDTH, CHART_HEIGHT));
        assert_eq!(info.color_type, png::ColorType::Rgb);
        let canvas = chart.render().unwrap();
        let bar = chart.bar(0, 0);
        let (x, y) = ((bar.x0 + bar.x1) / 2, bar.y1 - 1);
        let at = (y * CHART_WIDTH as usize + x) * 3;
        assert_eq!(buf[at..at + 3], canvas.pixel(x, y).unwrap());
        assert_eq!(canvas.pixel(x, y), Some(PALETTE[0]));
    }

    #[test]
    fn undrawable_charts_are_errors() {
        let mut bad = chart(vec![vec![1.0, 2.0]]);
        bad.series[0].values.pop();
        assert!(bad.render().is_err());
        let mut bad = chart(vec![vec![1.0]]);
        bad.id = "../x".into();
        assert!(bad.to_png().is_err());
        let bad = chart(vec![vec![f64::NAN]]);
        assert!(bad.render().is_err());
    }
}
