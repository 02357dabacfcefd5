//! The rejected-record ledger as readers write to it: one place that builds [`RejectedRow`]s so
//! every reader names the format, the file and the record the same way.

use std::path::Path;

use super::json_stream::ScanError;
use super::RecordSink;
use crate::error::{Error, Result};
use crate::schema::{excerpt, RejectedRow};

/// Where a reader's records come from: the format name and the file as the user named it.
#[derive(Clone, Debug)]
pub struct Source {
    pub format: &'static str,
    pub file: String,
}

/// Where in the file a rejected record sits.
#[derive(Clone, Debug, Default)]
pub struct Locator {
    /// Human-readable: `line 3`, `annotations[17]`, `image 264169, caption 2`.
    pub record: String,
    pub line: Option<i64>,
    pub byte_offset: Option<u64>,
}

impl Locator {
    pub fn line(line: usize) -> Locator {
        Locator {
            record: format!("line {line}"),
            line: i64::try_from(line).ok(),
            byte_offset: None,
        }
    }

    pub fn at(record: impl Into<String>, byte_offset: u64) -> Locator {
        Locator {
            record: record.into(),
            line: None,
            byte_offset: Some(byte_offset),
        }
    }
}

impl Source {
    pub fn new(format: &'static str, path: &Path) -> Source {
        Source {
            format,
            file: path.display().to_string(),
        }
    }

    /// Records one rejected record.
    pub fn reject(
        &self,
        sink: &mut dyn RecordSink,
        at: Locator,
        reason: impl Into<String>,
        raw: &str,
    ) -> Result<()> {
        sink.reject(RejectedRow {
            format: self.format.to_string(),
            source_file: self.file.clone(),
            record: at.record,
            line: at.line,
            byte_offset: at.byte_offset.and_then(|b| i64::try_from(b).ok()),
            reason: reason.into(),
            excerpt: excerpt(raw),
        })
    }

    /// Turns the end of a structural walk into the ledger: an I/O failure stops the reader, a
    /// broken structure rejects everything from the break to the end of the file as one record
    /// (nothing after it can be located, so nothing after it is counted as read).
    pub fn scan_outcome(
        &self,
        sink: &mut dyn RecordSink,
        outcome: std::result::Result<(), ScanError>,
        excerpt_here: impl FnOnce() -> String,
    ) -> Result<()> {
        match outcome {
            Ok(()) => Ok(()),
            Err(ScanError::Io(e)) => Err(Error::io(&self.file, e)),
            Err(ScanError::Syntax { offset, reason }) => self.reject(
                sink,
                Locator::at(format!("byte {offset} to the end of the file"), offset),
                format!("broken JSON structure, the rest of the file cannot be read: {reason}"),
                &excerpt_here(),
            ),
        }
    }
}
