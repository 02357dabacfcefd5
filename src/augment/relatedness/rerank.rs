//! Re-ranking candidate captions by `sim(w, c) ^ P(c)`, and the reference's file layouts.
//!
//! The paper's pre-trained re-ranker (Eq. 3, "similarity to probability") scores a candidate
//! caption `w` against the visual context `c` of its image as `sim(w, c) ^ P(c)`, with `P(c)` the
//! mean confidence of the context's classes, and sorts descending. The reference script
//! (`pre-trained/model.py` of ahmedssabir/Textual-Visual-Semantic-Dataset) reads three parallel
//! line files (candidate captions, context strings, `P(c)`), writes `caption,score` lines in input
//! order (`Visual_re-ranker.txt`), then drops repeated lines and writes `caption score` sorted by
//! score, best first (`Visual_re-rank_re-ranked_output.txt`). Scores are written as Python's
//! `str(float)`, which [`python_float_repr`] reproduces, so the files compare byte for byte.

use std::path::Path;

use crate::error::{Error, Result};

/// `sim ^ P(c)` exactly as the reference computes it with Python floats.
///
/// Python raises a negative float to a fractional power as a complex number and the reference
/// keeps its real part, `|sim| ^ P(c) * cos(π P(c))`; that is reproduced here, so a caption
/// dissimilar to its context still gets the reference's (negative) score.
pub fn rerank_score(similarity: f64, confidence: f64) -> f64 {
    if similarity >= 0.0 || confidence.fract() == 0.0 {
        return similarity.powf(confidence);
    }
    similarity.abs().powf(confidence) * (std::f64::consts::PI * confidence).cos()
}

/// One candidate caption after re-ranking.
#[derive(Clone, Debug, PartialEq)]
pub struct RankedCaption {
    /// The caption with surrounding whitespace removed.
    pub caption: String,
    /// `sim ^ P(c)`.
    pub score: f64,
    /// Position of the candidate in the input.
    pub index: usize,
}

/// One candidate: its caption, its similarity to the visual context and the context's `P(c)`.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    pub caption: String,
    pub similarity: f64,
    pub confidence: f64,
}

/// Scores candidates in input order (the reference's `Visual_re-ranker.txt`).
pub fn score_candidates(candidates: &[Candidate]) -> Vec<RankedCaption> {
    candidates
        .iter()
        .enumerate()
        .map(|(index, c)| RankedCaption {
            caption: c.caption.trim().to_string(),
            score: rerank_score(c.similarity, c.confidence),
            index,
        })
        .collect()
}

/// Drops repeats of an earlier (caption, score) and sorts by score, best first; equal scores
/// keep input order (Python's stable `sort(reverse=True)`).
pub fn rerank(scored: &[RankedCaption]) -> Vec<RankedCaption> {
    let mut seen: Vec<(&str, u64)> = Vec::new();
    let mut ranked: Vec<RankedCaption> = Vec::new();
    for candidate in scored {
        let key = (candidate.caption.as_str(), candidate.score.to_bits());
        if seen.contains(&key) {
            continue;
        }
        seen.push(key);
        ranked.push(candidate.clone());
    }
    ranked.sort_by(|a, b| b.score.total_cmp(&a.score));
    ranked
}

/// Python's `repr(float)` (what `str(score)` writes): the shortest digits that read back to the
/// same value, positional for decimal exponents in `-4..16`, otherwise `1e-05` / `1e+16` style;
/// integral values keep `.0`.
pub fn python_float_repr(x: f64) -> String {
    if x.is_nan() {
        return "nan".to_string();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf" } else { "-inf" }.to_string();
    }
    // `{:e}` gives the shortest round-trip digits as `d.ddde<exp>`.
    let scientific = format!("{:e}", x.abs());
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let sign = if x.is_sign_negative() { "-" } else { "" };
    if !(-4..16).contains(&exponent) {
        let tail = &digits[1..];
        let dot = if tail.is_empty() { "" } else { "." };
        let exp_sign = if exponent < 0 { '-' } else { '+' };
        return format!(
            "{sign}{}{dot}{tail}e{exp_sign}{:02}",
            &digits[..1],
            exponent.unsigned_abs()
        );
    }
    if exponent < 0 {
        let zeros = "0".repeat((-exponent - 1) as usize);
        return format!("{sign}0.{zeros}{digits}");
    }
    let int_len = exponent as usize + 1;
    if digits.len() <= int_len {
        let zeros = "0".repeat(int_len - digits.len());
        format!("{sign}{digits}{zeros}.0")
    } else {
        format!("{sign}{}.{}", &digits[..int_len], &digits[int_len..])
    }
}

/// `Visual_re-ranker.txt`: `caption,score` per candidate, in input order.
pub fn format_scored(scored: &[RankedCaption]) -> String {
    scored
        .iter()
        .map(|c| format!("{},{}\n", c.caption, python_float_repr(c.score)))
        .collect()
}

/// `Visual_re-rank_re-ranked_output.txt`: `caption score` per candidate, best first.
pub fn format_ranked(ranked: &[RankedCaption]) -> String {
    ranked
        .iter()
        .map(|c| format!("{} {}\n", c.caption, python_float_repr(c.score)))
        .collect()
}

/// `sample_best.json` (without its final newline): the best caption in COCO results format,
/// `[{"image_id":…,"caption":…}]`
/// (a numeric image id is written as a number, as COCO tools expect).
pub fn format_best(image_id: &str, ranked: &[RankedCaption]) -> String {
    let id = match image_id.parse::<i64>() {
        Ok(n) => serde_json::Value::from(n),
        Err(_) => serde_json::Value::from(image_id),
    };
    let best: Vec<serde_json::Value> = ranked
        .first()
        .map(|c| serde_json::json!({"image_id": id, "caption": c.caption}))
        .into_iter()
        .collect();
    serde_json::Value::Array(best).to_string()
}

/// The lines of a reference input file as the reference reads them: the whole file with
/// surrounding whitespace removed, split at newlines (so a trailing blank line does not count).
pub fn read_reference_lines(path: &Path) -> Result<Vec<String>> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let text = String::from_utf8(bytes).map_err(|e| {
        Error::record(
            path.display().to_string(),
            format!("byte {}", e.utf8_error().valid_up_to()),
            "not UTF-8 text",
        )
    })?;
    let text = text.trim();
    if text.is_empty() {
        return Ok(Vec::new());
    }
    Ok(text
        .split('\n')
        .map(|l| l.trim_end_matches('\r').to_string())
        .collect())
}

/// Reads one number per line (`P(c)` or similarity files); every line must hold one finite
/// number.
pub fn read_numbers(path: &Path) -> Result<Vec<f64>> {
    read_reference_lines(path)?
        .iter()
        .enumerate()
        .map(|(i, line)| {
            let value = line.trim();
            match value.parse::<f64>() {
                Ok(v) if v.is_finite() => Ok(v),
                _ => Err(Error::record(
                    path.display().to_string(),
                    format!("line {}", i + 1),
                    format!(
                        "expected one finite number, found `{}`",
                        crate::schema::excerpt(value)
                    ),
                )),
            }
        })
        .collect()
}

/// Parses `caption,score` (reference re-ranker output) or `caption score` (sorted output)
/// lines; the score is after the last separator, so captions may contain the separator.
pub fn parse_scored_line(line: &str, separator: char) -> Option<(String, f64)> {
    let (caption, score) = line.trim_end().rsplit_once(separator)?;
    let score: f64 = score.trim().parse().ok()?;
    Some((caption.trim().to_string(), score))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repr_matches_python() {
        // Values and their Python 3 `repr`.
        let cases = [
            (0.8582269252364088, "0.8582269252364088"),
            (0.85454545827468, "0.85454545827468"),
            (1.0, "1.0"),
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (1e-05, "1e-05"),
            (0.0001, "0.0001"),
            (1.5e-7, "1.5e-07"),
            (1e16, "1e+16"),
            (123456789012345.6, "123456789012345.6"),
            (1234567890123456.0, "1234567890123456.0"),
            (-0.25, "-0.25"),
            (100.0, "100.0"),
        ];
        for (value, expected) in cases {
            assert_eq!(python_float_repr(value), expected, "{value:e}");
        }
    }

    #[test]
    fn score_is_similarity_to_the_power_of_confidence() {
        assert_eq!(rerank_score(0.25, 0.5), 0.5);
        assert_eq!(rerank_score(0.81, 0.5), 0.9);
        assert_eq!(rerank_score(0.3, 0.0), 1.0);
        // Python: ((-0.25) ** 0.5).real == 0.5 * cos(pi / 2) == 3.061616997868383e-17
        assert_eq!(rerank_score(-0.25, 0.5), 3.061616997868383e-17);
        // Integral exponents stay real in Python: (-0.5) ** 1.0 == -0.5
        assert_eq!(rerank_score(-0.5, 1.0), -0.5);
    }

    #[test]
    fn rerank_drops_repeats_and_keeps_ties_in_input_order() {
        let scored = score_candidates(&[
            Candidate {
                caption: "b ".into(),
                similarity: 0.25,
                confidence: 0.5,
            },
            Candidate {
                caption: "a".into(),
                similarity: 0.81,
                confidence: 0.5,
            },
            Candidate {
                caption: "c".into(),
                similarity: 0.25,
                confidence: 0.5,
            },
            Candidate {
                caption: "b".into(),
                similarity: 0.25,
                confidence: 0.5,
            },
        ]);
        let ranked = rerank(&scored);
        let order: Vec<&str> = ranked.iter().map(|c| c.caption.as_str()).collect();
        assert_eq!(order, ["a", "b", "c"]);
        assert_eq!(format_ranked(&ranked), "a 0.9\nb 0.5\nc 0.5\n");
        assert_eq!(
            format_best("7", &ranked),
            r#"[{"image_id":7,"caption":"a"}]"#
        );
        assert_eq!(format_best("x.jpg", &[]), "[]");
    }

    #[test]
    fn scored_lines_split_at_the_last_separator() {
        assert_eq!(
            parse_scored_line("a dog, a cat,0.5\n", ','),
            Some(("a dog, a cat".to_string(), 0.5))
        );
        assert_eq!(parse_scored_line("no score", ','), None);
    }
}
