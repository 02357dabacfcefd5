//! Progress display for long commands: indicatif bars on stderr when it is a terminal and
//! `--quiet` is not given, nothing otherwise (logs, pipes and tests get clean output). The bars
//! carry no colour.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};

/// Whether bars are drawn at all.
pub fn enabled() -> bool {
    std::io::stderr().is_terminal() && !super::out::quiet()
}

fn target() -> ProgressDrawTarget {
    if enabled() {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    }
}

/// A counter of records for work whose total is unknown in advance (a reader streaming a
/// file): shows the label, the count, the rate and the elapsed time.
pub fn records(label: &str) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(None, target());
    // The template is a constant; a bad one would be a bug caught by the tests.
    if let Ok(style) =
        ProgressStyle::with_template("{spinner} {msg} {human_pos} records ({rate}, {elapsed})")
    {
        bar.set_style(style.with_key("rate", rate));
    }
    bar.set_message(label.to_string());
    if enabled() {
        bar.enable_steady_tick(Duration::from_millis(120));
    }
    bar
}

/// The rate key of the bars' templates ([`format_rate`]).
fn rate(state: &ProgressState, w: &mut dyn std::fmt::Write) {
    let _ = w.write_str(&format_rate(state.per_sec()));
}

/// Items per second: whole numbers from 10/s up (`12,345/s`), one decimal below (`3.2/s`).
fn format_rate(per_sec: f64) -> String {
    if per_sec >= 10.0 {
        format!("{}/s", indicatif::HumanCount(per_sec.round() as u64))
    } else {
        format!("{per_sec:.1}/s")
    }
}

/// A spinner for a step whose length is unknown (a commit): the label, which the caller may
/// change as the step goes on, and the elapsed time.
pub fn spinner(label: &str) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(None, target());
    if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} ({elapsed})") {
        bar.set_style(style);
    }
    bar.set_message(label.to_string());
    if enabled() {
        bar.enable_steady_tick(Duration::from_millis(120));
    }
    bar
}

/// A bar over a known number of bytes.
pub fn bytes(label: &str, total: u64) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(total), target());
    if let Ok(style) = ProgressStyle::with_template(
        "{msg} [{bar:30}] {binary_bytes}/{binary_total_bytes} ({binary_bytes_per_sec}, eta {eta})",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(label.to_string());
    bar
}

/// A bar over a known number of items (images, batches): shows the label, position, rate and
/// time left.
pub fn items(label: &str, total: u64) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(total), target());
    if let Ok(style) =
        ProgressStyle::with_template("{msg} [{bar:30}] {human_pos}/{human_len} ({rate}, {eta})")
    {
        bar.set_style(style.with_key("rate", rate));
    }
    bar.set_message(label.to_string());
    bar
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_parse() {
        assert!(ProgressStyle::with_template(
            "{spinner} {msg} {human_pos} records ({rate}, {elapsed})"
        )
        .is_ok());
        assert_eq!(format_rate(626_252.4), "626,252/s");
        assert_eq!(format_rate(3.25), "3.2/s");
        assert!(ProgressStyle::with_template("{spinner} {msg} ({elapsed})").is_ok());
        assert!(ProgressStyle::with_template(
            "{msg} [{bar:30}] {binary_bytes}/{binary_total_bytes} ({binary_bytes_per_sec}, eta {eta})"
        )
        .is_ok());
        // Drawn or hidden, the bar tracks its position.
        let bar = records("test");
        bar.inc(3);
        assert_eq!(bar.position(), 3);
        bar.finish_and_clear();
    }
}
