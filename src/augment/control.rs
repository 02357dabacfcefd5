//! Control signals of a sample (METHODS.md §1.8): boxes, coverage, length level, word count.

use crate::schema::BoxXyxy;

/// SSA length levels: L1 1-9 words, L2 10-19, L3 20-29, L4 30-39, L5 40 and more.
pub fn ssa_length_level(words: usize) -> i32 {
    match words {
        0 => 0,
        n => ((n / 10) as i32 + 1).min(5),
    }
}

/// Words of a caption: whitespace tokens that contain a letter or a digit, so punctuation
/// tokens of tokenized captions (`.` `,`) do not count.
pub fn word_count(text: &str) -> usize {
    text.split_whitespace()
        .filter(|t| t.chars().any(char::is_alphanumeric))
        .count()
}

/// Percent of the image's pixels inside the union of `boxes`, in [0, 100].
///
/// Boxes are clipped to the image `[0, width] × [0, height]` and the union is measured exactly
/// (coordinate compression over the box edges), so overlapping boxes count once.
pub fn coverage_percent(boxes: &[BoxXyxy], width: f64, height: f64) -> f64 {
    if width <= 0.0 || height <= 0.0 || boxes.is_empty() {
        return 0.0;
    }
    let clipped: Vec<BoxXyxy> = boxes
        .iter()
        .map(|b| {
            BoxXyxy::new(
                b.x1.clamp(0.0, width),
                b.y1.clamp(0.0, height),
                b.x2.clamp(0.0, width),
                b.y2.clamp(0.0, height),
            )
        })
        .filter(|b| b.area() > 0.0)
        .collect();
    let area = union_area(&clipped);
    (100.0 * area / (width * height)).clamp(0.0, 100.0)
}

/// Area of the union of boxes.
pub fn union_area(boxes: &[BoxXyxy]) -> f64 {
    let mut xs: Vec<f64> = boxes.iter().flat_map(|b| [b.x1, b.x2]).collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    let mut area = 0.0;
    for w in xs.windows(2) {
        let (left, right) = (w[0], w[1]);
        let mut spans: Vec<(f64, f64)> = boxes
            .iter()
            .filter(|b| b.x1 <= left && b.x2 >= right && b.y2 > b.y1)
            .map(|b| (b.y1, b.y2))
            .collect();
        spans.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut covered = 0.0;
        let mut current: Option<(f64, f64)> = None;
        for (lo, hi) in spans {
            match &mut current {
                Some((_, end)) if lo <= *end => *end = end.max(hi),
                _ => {
                    if let Some((s, e)) = current {
                        covered += e - s;
                    }
                    current = Some((lo, hi));
                }
            }
        }
        if let Some((s, e)) = current {
            covered += e - s;
        }
        area += covered * (right - left);
    }
    area
}

/// The union of box lists without repeats, in first-seen order.
pub fn distinct_boxes<'a>(boxes: impl IntoIterator<Item = &'a BoxXyxy>) -> Vec<BoxXyxy> {
    let mut out: Vec<BoxXyxy> = Vec::new();
    for b in boxes {
        if !out.contains(b) {
            out.push(*b);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_follow_the_paper_bins() {
        let cases = [
            (1, 1),
            (9, 1),
            (10, 2),
            (19, 2),
            (20, 3),
            (39, 4),
            (40, 5),
            (120, 5),
        ];
        for (words, level) in cases {
            assert_eq!(ssa_length_level(words), level, "{words} words");
        }
    }

    #[test]
    fn punctuation_is_not_a_word() {
        assert_eq!(word_count("A man rides a bike ."), 5);
        assert_eq!(word_count("two dogs , one cat"), 4);
    }

    #[test]
    fn overlapping_boxes_count_once() {
        // Two 10x10 boxes overlapping in a 5x10 strip: union 150 of a 100x100 image.
        let boxes = [
            BoxXyxy::new(0.0, 0.0, 10.0, 10.0),
            BoxXyxy::new(5.0, 0.0, 15.0, 10.0),
        ];
        assert!((coverage_percent(&boxes, 100.0, 100.0) - 1.5).abs() < 1e-12);
        // A box nested in another adds nothing; boxes beyond the image are clipped.
        let nested = [
            BoxXyxy::new(-10.0, -10.0, 50.0, 50.0),
            BoxXyxy::new(10.0, 10.0, 20.0, 20.0),
        ];
        assert!((coverage_percent(&nested, 100.0, 100.0) - 25.0).abs() < 1e-12);
    }

    #[test]
    fn union_area_matches_a_pixel_count() {
        // Integer boxes: count covered unit cells directly.
        let boxes = [
            BoxXyxy::new(1.0, 2.0, 7.0, 9.0),
            BoxXyxy::new(4.0, 0.0, 12.0, 5.0),
            BoxXyxy::new(6.0, 6.0, 10.0, 11.0),
        ];
        let mut cells = 0;
        for x in 0..20 {
            for y in 0..20 {
                let (cx, cy) = (x as f64 + 0.5, y as f64 + 0.5);
                if boxes
                    .iter()
                    .any(|b| cx > b.x1 && cx < b.x2 && cy > b.y1 && cy < b.y2)
                {
                    cells += 1;
                }
            }
        }
        assert_eq!(union_area(&boxes), cells as f64);
    }
}
