//! Progress display for long commands: indicatif bars on stderr when it is a terminal and
//! `--quiet` is not given, nothing otherwise (logs, pipes and tests get clean output). The bars
//! carry no colour.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

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
        ProgressStyle::with_template("{spinner} {msg} {human_pos} records ({per_sec}, {elapsed})")
    {
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
        ProgressStyle::with_template("{msg} [{bar:30}] {human_pos}/{human_len} ({per_sec}, {eta})")
    {
        bar.set_style(style);
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
            "{spinner} {msg} {human_pos} records ({per_sec}, {elapsed})"
        )
        .is_ok());
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
