//! [`ParquetInput`]: a Parquet file given as input that remembers the I/O errors its reads hit.
//!
//! The parquet crate's record-batch reader hands a failed read back as text
//! (`ArrowError::ParquetError(String)`), which cannot be told from bytes that do not decode. A
//! device error in the middle of a file would then be reported as corrupt input (exit 3) instead
//! of an I/O failure (exit 4). Every read of the file goes through this type, which keeps the
//! first I/O error it saw, and [`ParquetInput::parquet_error`] and [`ParquetInput::arrow_error`]
//! consult it before they classify a decoder error.

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use parquet::errors::ParquetError;
use parquet::file::reader::{ChunkReader, Length};

use crate::error::{Error, Result};

/// The first I/O error seen by any read of one file.
type Failure = Arc<Mutex<Option<std::io::Error>>>;

/// An input Parquet file, opened through [`super::open_input`] (regular files only), for
/// `ParquetRecordBatchReaderBuilder::try_new`.
#[derive(Clone, Debug)]
pub struct ParquetInput {
    file: Arc<File>,
    path: PathBuf,
    failure: Failure,
}

impl ParquetInput {
    /// Opens the input file at `path`.
    pub fn open(path: &Path) -> Result<ParquetInput> {
        Ok(ParquetInput {
            file: Arc::new(super::open_input(path)?),
            path: path.to_path_buf(),
            failure: Failure::default(),
        })
    }

    /// The error to report for a decoder failure `source` of this file: the I/O error a read
    /// hit when there was one (exit 4), else as [`Error::parquet_input`] classifies it.
    pub fn parquet_error(&self, source: ParquetError) -> Error {
        match self.failure() {
            Some(io) => Error::io(&self.path, io),
            None => Error::parquet_input(&self.path, source),
        }
    }

    /// [`ParquetInput::parquet_error`] for an Arrow error of the record-batch reader.
    pub fn arrow_error(&self, source: arrow::error::ArrowError) -> Error {
        match self.failure() {
            Some(io) => Error::io(&self.path, io),
            None => Error::arrow_input(&self.path, "Parquet", source),
        }
    }

    /// A copy of the first I/O error seen (an `std::io::Error` cannot be cloned).
    fn failure(&self) -> Option<std::io::Error> {
        let seen = self.failure.lock().unwrap_or_else(|p| p.into_inner());
        seen.as_ref().map(|e| match e.raw_os_error() {
            Some(code) => std::io::Error::from_raw_os_error(code),
            None => std::io::Error::new(e.kind(), e.to_string()),
        })
    }
}

/// Keeps `error` as the file's failure unless one is kept already. The end of the file is not
/// a failure of the device: a truncated file is corrupt input.
fn remember(failure: &Failure, error: &std::io::Error) {
    if error.kind() == std::io::ErrorKind::UnexpectedEof {
        return;
    }
    let mut seen = failure.lock().unwrap_or_else(|p| p.into_inner());
    if seen.is_none() {
        *seen = Some(match error.raw_os_error() {
            Some(code) => std::io::Error::from_raw_os_error(code),
            None => std::io::Error::new(error.kind(), error.to_string()),
        });
    }
}

/// A reader over a clone of the file's handle that remembers its I/O errors.
pub struct TrackedRead {
    file: File,
    failure: Failure,
}

impl Read for TrackedRead {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.file
            .read(buf)
            .inspect_err(|e| remember(&self.failure, e))
    }
}

impl ParquetInput {
    /// A handle of the file positioned at `start`.
    fn handle_at(&self, start: u64) -> std::io::Result<File> {
        let mut handle = self.file.try_clone()?;
        handle.seek(SeekFrom::Start(start))?;
        Ok(handle)
    }
}

impl Length for ParquetInput {
    fn len(&self) -> u64 {
        self.file.metadata().map(|m| m.len()).unwrap_or(0)
    }
}

impl ChunkReader for ParquetInput {
    type T = BufReader<TrackedRead>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        let file = self
            .handle_at(start)
            .inspect_err(|e| remember(&self.failure, e))?;
        Ok(BufReader::new(TrackedRead {
            file,
            failure: Arc::clone(&self.failure),
        }))
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        let mut buffer = Vec::with_capacity(length);
        let read = self
            .handle_at(start)
            .and_then(|handle| handle.take(length as u64).read_to_end(&mut buffer))
            .inspect_err(|e| remember(&self.failure, e))?;
        if read != length {
            return Err(ParquetError::EOF(format!(
                "{}: expected to read {length} bytes at offset {start}, read only {read}",
                self.path.display()
            )));
        }
        Ok(buffer.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_device_error_is_kept_and_the_end_of_file_is_not() {
        let failure = Failure::default();
        remember(
            &failure,
            &std::io::Error::from(std::io::ErrorKind::UnexpectedEof),
        );
        assert!(failure.lock().unwrap().is_none());
        remember(&failure, &std::io::Error::from_raw_os_error(libc::EIO));
        remember(&failure, &std::io::Error::from_raw_os_error(libc::ENOSPC));
        let kept = failure.lock().unwrap().as_ref().unwrap().raw_os_error();
        assert_eq!(kept, Some(libc::EIO));
    }
}
