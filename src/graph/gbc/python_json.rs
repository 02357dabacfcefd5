//! JSON text exactly as Python's `json.dumps` writes it with its defaults, which is how ml-gbc
//! saves graphs: `", "` and `": "` separators (`","` between items when indenting), every
//! character outside printable ASCII escaped as `\uXXXX` (`ensure_ascii=True`, astral characters
//! as surrogate pairs), and floats in `repr` form (`1e-05`, `1.0`, `1e+16`).
//!
//! serde_json's own writer differs in all three (`1e-5`, raw UTF-8, no spaces), so a file read
//! and written through it would never compare equal byte for byte with ml-gbc's.

use serde_json::{Number, Value};

/// `json.dumps(value)`.
pub fn python_json(value: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, value, None, 0);
    out
}

/// `json.dumps(value, indent=indent)`.
pub fn python_json_indented(value: &Value, indent: usize) -> String {
    let mut out = String::new();
    write_value(&mut out, value, Some(indent), 0);
    out
}

fn write_value(out: &mut String, value: &Value, indent: Option<usize>, level: usize) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => write_number(out, n),
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            if items.is_empty() {
                out.push_str("[]");
                return;
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                separator(out, i == 0, indent, level + 1);
                write_value(out, item, indent, level + 1);
            }
            close(out, indent, level);
            out.push(']');
        }
        Value::Object(map) => {
            if map.is_empty() {
                out.push_str("{}");
                return;
            }
            out.push('{');
            for (i, (key, item)) in map.iter().enumerate() {
                separator(out, i == 0, indent, level + 1);
                write_string(out, key);
                out.push_str(": ");
                write_value(out, item, indent, level + 1);
            }
            close(out, indent, level);
            out.push('}');
        }
    }
}

/// What goes before an item: nothing or `", "` inline; a newline and indentation (after `","`)
/// when indenting.
fn separator(out: &mut String, first: bool, indent: Option<usize>, level: usize) {
    match indent {
        None => {
            if !first {
                out.push_str(", ");
            }
        }
        Some(width) => {
            if !first {
                out.push(',');
            }
            out.push('\n');
            out.extend(std::iter::repeat_n(' ', width * level));
        }
    }
}

fn close(out: &mut String, indent: Option<usize>, level: usize) {
    if let Some(width) = indent {
        out.push('\n');
        out.extend(std::iter::repeat_n(' ', width * level));
    }
}

fn write_number(out: &mut String, n: &Number) {
    if let Some(i) = n.as_i64() {
        out.push_str(&i.to_string());
    } else if let Some(u) = n.as_u64() {
        out.push_str(&u.to_string());
    } else if let Some(f) = n.as_f64() {
        out.push_str(&python_float_repr(f));
    }
}

/// Python's `repr(float)`: the shortest digits that round-trip (as Rust's `{:e}` gives them),
/// positional when the decimal exponent is in `-4..16`, scientific otherwise with a signed
/// exponent of at least two digits; a positional integer keeps its `.0`.
pub fn python_float_repr(x: f64) -> String {
    if x.is_nan() {
        return "NaN".to_string();
    }
    if x.is_infinite() {
        return if x > 0.0 { "Infinity" } else { "-Infinity" }.to_string();
    }
    let (digits, exp) = shortest_digits(x.abs());
    let mut out = String::new();
    if x.is_sign_negative() {
        out.push('-');
    }
    if !(-4..16).contains(&exp) {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        out.push('e');
        out.push(if exp < 0 { '-' } else { '+' });
        out.push_str(&format!("{:02}", exp.unsigned_abs()));
    } else if exp < 0 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', (-exp - 1) as usize));
        out.push_str(&digits);
    } else {
        let int_len = exp as usize + 1;
        if digits.len() <= int_len {
            out.push_str(&digits);
            out.extend(std::iter::repeat_n('0', int_len - digits.len()));
            out.push_str(".0");
        } else {
            out.push_str(&digits[..int_len]);
            out.push('.');
            out.push_str(&digits[int_len..]);
        }
    }
    out
}

/// The shortest decimal digits that read back as `x` (positive, finite) and the decimal exponent
/// of the first digit. Rust's `{:e}` gives a shortest string too, but when two shortest strings
/// are equally close to `x` it does not always take the even one as Python (David Gay's `dtoa`)
/// does: `0.87760162353515625` prints as `...563` in Rust and `...562` in Python. So the
/// neighbours of Rust's digits are checked against the exact binary value.
fn shortest_digits(x: f64) -> (String, i32) {
    let (digits, exp) = split_sci(&format!("{x:e}"));
    let n = digits.len();
    if n > 18 {
        return (digits, exp);
    }
    let Ok(d) = digits.parse::<u64>() else {
        return (digits, exp);
    };
    let reads_back = |candidate: u64| {
        let text = format!("{candidate}e{}", exp - (n as i32 - 1));
        candidate.to_string().len() == n && text.parse::<f64>() == Ok(x)
    };
    let lower_ok = d > 0 && reads_back(d - 1);
    let upper_ok = reads_back(d + 1);
    if !lower_ok && !upper_ok {
        return (digits, exp);
    }
    // `x` written out exactly (a double has at most 767 significant digits).
    let (exact, exact_exp) = split_sci(&format!("{x:.800e}"));
    if exact_exp != exp {
        return (digits, exp);
    }
    let Ok(floor) = exact[..n].parse::<u64>() else {
        return (digits, exp);
    };
    let rest = &exact[n..];
    let half = rest
        .as_bytes()
        .first()
        .map_or(std::cmp::Ordering::Less, |&first| match first.cmp(&b'5') {
            std::cmp::Ordering::Equal if rest[1..].bytes().all(|b| b == b'0') => {
                std::cmp::Ordering::Equal
            }
            std::cmp::Ordering::Equal => std::cmp::Ordering::Greater,
            other => other,
        });
    let best = match half {
        std::cmp::Ordering::Less => floor,
        std::cmp::Ordering::Greater => floor + 1,
        std::cmp::Ordering::Equal if floor % 2 == 0 => floor,
        std::cmp::Ordering::Equal => floor + 1,
    };
    if best != d && ((best + 1 == d && lower_ok) || (best == d + 1 && upper_ok)) {
        let mut text = best.to_string();
        while text.len() > 1 && text.ends_with('0') {
            text.pop();
        }
        return (text, exp);
    }
    (digits, exp)
}

/// Splits Rust's `{:e}` output (`d[.ddd]e[-]x`) into its digits and exponent.
fn split_sci(sci: &str) -> (String, i32) {
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci, "0"));
    let digits = mantissa.chars().filter(|c| *c != '.').collect();
    (digits, exp.parse().unwrap_or(0))
}

/// A JSON string with `ensure_ascii=True` escaping.
fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            ' '..='~' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Expected strings are what CPython 3 prints for `repr(x)` / `json.dumps(x)`.
    #[test]
    fn float_repr_matches_python() {
        let cases = [
            (1.0, "1.0"),
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (0.85, "0.85"),
            (1e-05, "1e-05"),
            (5e-05, "5e-05"),
            (0.0001, "0.0001"),
            (1.5e-7, "1.5e-07"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (123456789.125, "123456789.125"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (5e-324, "5e-324"),
            (0.1 + 0.2, "0.30000000000000004"),
            (-2.5e-10, "-2.5e-10"),
            (12.0, "12.0"),
            // 115029 / 2^17 = 0.87760162353515625 exactly: two shortest strings are equally
            // close and Python takes the even last digit.
            (115029.0 / 131072.0, "0.8776016235351562"),
        ];
        for (x, want) in cases {
            assert_eq!(python_float_repr(x), want, "{x:e}");
        }
    }

    #[test]
    fn strings_and_layout_match_python() {
        let v: Value = serde_json::from_str(
            r#"{"a": "caf\u00e9 \ud83d\ude00 \"q\" \u007f\u0001", "b": [1, 2.0, {}], "c": []}"#,
        )
        .unwrap();
        assert_eq!(
            python_json(&v),
            r#"{"a": "caf\u00e9 \ud83d\ude00 \"q\" \u007f\u0001", "b": [1, 2.0, {}], "c": []}"#
        );
        assert_eq!(
            python_json_indented(&v, 2),
            "{\n  \"a\": \"caf\\u00e9 \\ud83d\\ude00 \\\"q\\\" \\u007f\\u0001\",\n  \"b\": [\n    1,\n    2.0,\n    {}\n  ],\n  \"c\": []\n}"
        );
    }
}
