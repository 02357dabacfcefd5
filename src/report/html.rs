//! The HTML page of a report: one self-contained file with inline styles and the charts as
//! inline SVG.

use std::fmt::Write as _;

use super::{Block, Cell, Report, Table};
use crate::error::Result;

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1000px;\
color:#222}h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ccc}\
table{border-collapse:collapse;margin:0.5em 0}td,th{border:1px solid #ccc;padding:2px 8px}\
td.n{text-align:right;font-variant-numeric:tabular-nums}figure{margin:1em 0}\
figure svg{max-width:100%;height:auto;display:block}nav a{margin-right:1em}";

/// The page; fails only when a chart cannot be drawn.
pub fn render(report: &Report) -> Result<String> {
    let mut out = String::new();
    let title = escape(&report.title);
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>{title}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<h1>{title}</h1>\n<nav>"
    );
    for section in &report.sections {
        let _ = write!(
            out,
            "<a href=\"#{}\">{}</a>",
            escape(&section.id),
            escape(&section.title)
        );
    }
    out.push_str("</nav>\n");
    for section in &report.sections {
        let _ = writeln!(
            out,
            "<section id=\"{}\">\n<h2>{}</h2>",
            escape(&section.id),
            escape(&section.title)
        );
        for block in &section.blocks {
            match block {
                Block::Text { text } => {
                    let _ = writeln!(out, "<p>{}</p>", escape(text));
                }
                Block::Table(table) => table_html(&mut out, table),
                Block::Chart(chart) => {
                    let _ = writeln!(
                        out,
                        "<figure id=\"chart-{}\">\n{}</figure>",
                        escape(&chart.id),
                        chart.to_svg()?
                    );
                }
            }
        }
        out.push_str("</section>\n");
    }
    out.push_str("</body>\n</html>\n");
    Ok(out)
}

fn table_html(out: &mut String, table: &Table) {
    out.push_str("<table>\n<tr>");
    for column in &table.columns {
        let _ = write!(out, "<th>{}</th>", escape(column));
    }
    out.push_str("</tr>\n");
    for row in &table.rows {
        out.push_str("<tr>");
        for cell in row {
            let class = match cell {
                Cell::Text(_) => "",
                _ => " class=\"n\"",
            };
            let _ = write!(out, "<td{class}>{}</td>", escape(&cell.display()));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
}

/// Escapes text for HTML element content and quoted attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Section;

    #[test]
    fn text_is_escaped() {
        assert_eq!(
            escape(r#"<b>"a" & 'b'</b>"#),
            "&lt;b&gt;&quot;a&quot; &amp; &#39;b&#39;&lt;/b&gt;"
        );
        let report = Report {
            title: "r <1>".into(),
            sections: vec![Section {
                id: "s".into(),
                title: "S&P".into(),
                summary: vec![],
                blocks: vec![Block::Table(Table {
                    columns: vec!["a".into(), "b".into()],
                    rows: vec![vec![Cell::Text("<x>".into()), Cell::Percent(12.345)]],
                })],
            }],
        };
        let html = render(&report).unwrap();
        assert!(html.contains("<h1>r &lt;1&gt;</h1>"));
        assert!(html.contains("<h2>S&amp;P</h2>"));
        assert!(html.contains("<td>&lt;x&gt;</td><td class=\"n\">12.3%</td>"));
    }
}
