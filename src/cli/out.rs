//! Where the `capflow` command writes: what a command is for on stdout, what it did (status
//! lines) and what went wrong (diagnostics) on stderr, and whether either may be coloured.
//!
//! Every line the command prints goes through this module. Rust ignores `SIGPIPE`, so a write
//! to a pipe whose reader has gone fails with `EPIPE` instead of killing the process; capflow
//! keeps it that way, because a cluster run's TCP connections must see a lost peer as an error.
//! Printing here turns that failure into an ordinary end of output:
//!
//! - Output on stdout ([`outln!`], [`out!`], and [`stdout_error`] for a command that keeps a
//!   writer of its own): when the reader goes away (`capflow schema | head -1`), the command
//!   stops with [`Error::OutputClosed`] and exits 0 without a message, as the reader asked for
//!   no more. Any other failure to write stdout (a full disk behind `>`) is an I/O error, exit 4.
//! - `--json` summaries ([`json`]) are one pretty-printed object on stdout, as `inspect --json`
//!   and `gbc stats --json` print theirs.
//! - Status lines on stderr ([`status!`]: `ingested ... records`, `wrote ...`) are left out
//!   under `--quiet`; diagnostics ([`diagnostic!`]: warnings, rejected records, errors) always
//!   print. A stderr nobody reads never stops a command: the work is done either way.
//!
//! Colour follows <https://no-color.org>: only on a terminal, and not when `NO_COLOR` is set to
//! anything but the empty string ([`colour`]).

use std::fmt;
use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{Error, Result};

static QUIET: AtomicBool = AtomicBool::new(false);

/// Leaves out status lines and progress from now on (`--quiet`).
pub fn set_quiet(quiet: bool) {
    QUIET.store(quiet, Ordering::Relaxed);
}

/// Whether status lines and progress are left out (`--quiet`).
pub fn quiet() -> bool {
    QUIET.load(Ordering::Relaxed)
}

/// Whether a stream may carry colour: it is a terminal and `NO_COLOR` is unset or empty.
pub fn colour(stream_is_terminal: bool) -> bool {
    stream_is_terminal && std::env::var_os("NO_COLOR").is_none_or(|value| value.is_empty())
}

/// Whether stderr (logs, progress) may carry colour.
pub fn colour_on_stderr() -> bool {
    colour(std::io::stderr().is_terminal())
}

/// The error of a failed write to stdout: [`Error::OutputClosed`] when its reader has gone,
/// else an I/O error naming `<stdout>`.
pub fn stdout_error(error: std::io::Error) -> Error {
    if error.kind() == std::io::ErrorKind::BrokenPipe {
        Error::OutputClosed
    } else {
        Error::io("<stdout>", error)
    }
}

/// Writes to stdout; what [`out!`] and [`outln!`] call.
pub fn write_stdout(args: fmt::Arguments<'_>) -> Result<()> {
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_fmt(args)
        .and_then(|()| stdout.flush())
        .map_err(stdout_error)
}

/// Prints `value` on stdout as one pretty-printed JSON object (`--json`).
pub fn json(value: &serde_json::Value) -> Result<()> {
    write_stdout(format_args!("{value:#}\n"))
}

/// Writes a status line to stderr unless `--quiet`; what [`status!`] calls.
pub fn write_status(args: fmt::Arguments<'_>) {
    if !quiet() {
        write_diagnostic(args);
    }
}

/// Writes a line to stderr, whatever became of stderr; what [`diagnostic!`] calls.
pub fn write_diagnostic(args: fmt::Arguments<'_>) {
    let mut stderr = std::io::stderr().lock();
    // Nobody reads a closed stderr; the command goes on and its exit code still tells.
    let _ = stderr
        .write_fmt(args)
        .and_then(|()| stderr.write_all(b"\n"));
}

/// `print!` to stdout, as a `Result`: `Err(Error::OutputClosed)` once the reader has gone.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::cli::out::write_stdout(format_args!($($arg)*))
    };
}

/// `println!` to stdout, as a `Result`: `Err(Error::OutputClosed)` once the reader has gone.
macro_rules! outln {
    () => {
        $crate::cli::out::write_stdout(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::cli::out::write_stdout(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// A status line on stderr (what a command did), left out under `--quiet`.
macro_rules! status {
    ($($arg:tt)*) => {
        $crate::cli::out::write_status(format_args!($($arg)*))
    };
}

/// A warning or error line on stderr; printed under `--quiet` too.
macro_rules! diagnostic {
    ($($arg:tt)*) => {
        $crate::cli::out::write_diagnostic(format_args!($($arg)*))
    };
}

pub(crate) use {diagnostic, out, outln, status};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closed_reader_ends_output_and_other_failures_are_io_errors() {
        let closed = std::io::Error::from(std::io::ErrorKind::BrokenPipe);
        assert!(matches!(stdout_error(closed), Error::OutputClosed));
        assert_eq!(Error::OutputClosed.exit_code(), 0);
        let full = std::io::Error::from_raw_os_error(28); // ENOSPC
        let error = stdout_error(full);
        assert_eq!(error.exit_code(), 4);
        assert!(error.to_string().starts_with("<stdout>"), "{error}");
    }

    #[test]
    fn no_colour_off_a_terminal() {
        assert!(!colour(false));
    }
}
