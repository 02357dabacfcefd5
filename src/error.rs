//! capflow's error type. Every error that reaches a user says what failed, where (file and
//! record when there is one) and, where it helps, what to do.

use std::path::{Path, PathBuf};

/// Result with capflow's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// An Arrow or Parquet failure while writing or while reading capflow's own intermediate
    /// files: an I/O error (exit 4) when the disk or file system failed, else an internal error.
    #[error("{what}: {source}")]
    Arrow {
        what: String,
        #[source]
        source: arrow::error::ArrowError,
    },
    #[error("{what}: {source}")]
    Parquet {
        what: String,
        #[source]
        source: parquet::errors::ParquetError,
    },
    /// A Parquet or Arrow file given as input (a dataset, a GBC or changelog file) that does not
    /// decode: truncated, corrupt or not that format at all. Bad input data; made by
    /// [`Error::parquet_input`] and [`Error::arrow_input`].
    #[error("{}: not a readable {format} file (truncated or corrupt): {source}", path.display())]
    Corrupt {
        path: PathBuf,
        format: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("{file}, {record}: {reason}")]
    Record {
        file: String,
        record: String,
        reason: String,
    },
    #[error("invalid {what}: {reason}")]
    Invalid { what: String, reason: String },
    #[error("{0}")]
    Config(String),
    #[error("{0}")]
    Usage(String),
    #[error("external model `{adapter}` failed on {batch}: {reason}")]
    Adapter {
        adapter: String,
        batch: String,
        reason: String,
    },
    #[error("process {process} failed: {reason}")]
    Cluster { process: usize, reason: String },
    /// Standard output's reader went away (`capflow schema | head -1`): the command stops
    /// printing and exits 0 without a message, as the reader asked for nothing more
    /// (`crate::cli::out`).
    #[error("standard output was closed by its reader")]
    OutputClosed,
    /// A failure inside a dataflow stage, with the stage and image it happened on; its exit
    /// code is its cause's.
    #[error("{stage}, image {image}: {source}")]
    Stage {
        stage: String,
        image: String,
        #[source]
        source: Box<Error>,
    },
    /// `source`, with what capflow was doing when it happened (fitting a model); its exit
    /// code is its cause's.
    #[error("{what}: {source}")]
    Context {
        what: String,
        #[source]
        source: Box<Error>,
    },
}

impl Error {
    pub fn io(path: impl AsRef<Path>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.as_ref().to_path_buf(),
            source,
        }
    }

    pub fn arrow(what: impl Into<String>, source: arrow::error::ArrowError) -> Self {
        Error::Arrow {
            what: what.into(),
            source,
        }
    }

    pub fn parquet(what: impl Into<String>, source: parquet::errors::ParquetError) -> Self {
        Error::Parquet {
            what: what.into(),
            source,
        }
    }

    /// A Parquet decoding failure of the input file `path`: an I/O error (exit 4) when reading
    /// the file failed, else the file is [`Error::Corrupt`] (exit 3). A file that ends early is
    /// corrupt, not an I/O failure.
    pub fn parquet_input(path: impl AsRef<Path>, source: parquet::errors::ParquetError) -> Self {
        match source {
            parquet::errors::ParquetError::External(inner) => match inner.downcast() {
                Ok(io) => Self::read_failure(path, "Parquet", *io),
                Err(inner) => Self::corrupt(
                    path,
                    "Parquet",
                    parquet::errors::ParquetError::External(inner),
                ),
            },
            other => Self::corrupt(path, "Parquet", other),
        }
    }

    /// An Arrow failure while decoding the input file `path` (whose format is `format`), as
    /// [`Error::parquet_input`] classifies it.
    pub fn arrow_input(
        path: impl AsRef<Path>,
        format: &'static str,
        source: arrow::error::ArrowError,
    ) -> Self {
        use arrow::error::ArrowError;
        match source {
            ArrowError::IoError(_, io) => Self::read_failure(path, format, io),
            ArrowError::ExternalError(inner) => match inner.downcast() {
                Ok(io) => Self::read_failure(path, format, *io),
                Err(inner) => match inner.downcast::<parquet::errors::ParquetError>() {
                    Ok(parquet) => Self::parquet_input(path, *parquet),
                    Err(inner) => Self::corrupt(path, format, ArrowError::ExternalError(inner)),
                },
            },
            other => Self::corrupt(path, format, other),
        }
    }

    fn read_failure(path: impl AsRef<Path>, format: &'static str, io: std::io::Error) -> Self {
        if io.kind() == std::io::ErrorKind::UnexpectedEof {
            Self::corrupt(path, format, io)
        } else {
            Self::io(path, io)
        }
    }

    pub fn corrupt(
        path: impl AsRef<Path>,
        format: &'static str,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Error::Corrupt {
            path: path.as_ref().to_path_buf(),
            format,
            source: Box::new(source),
        }
    }

    pub fn invalid(what: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::Invalid {
            what: what.into(),
            reason: reason.into(),
        }
    }

    /// `source`, as it happened in `stage` on image `image`.
    pub fn in_stage(stage: impl Into<String>, image: impl Into<String>, source: Error) -> Self {
        Error::Stage {
            stage: stage.into(),
            image: image.into(),
            source: Box::new(source),
        }
    }

    /// This error, from the external model `adapter` asked about `what` (`the 12 captions of
    /// images a to b`), as an adapter error that names the batch: an adapter's own error keeps
    /// its batch and gets `what` added, any other becomes its reason.
    pub fn on_batch(self, adapter: &str, what: &str) -> Self {
        match self {
            Error::Adapter {
                adapter,
                batch,
                reason,
            } => Error::Adapter {
                adapter,
                batch: format!("{batch} ({what})"),
                reason,
            },
            other => Error::Adapter {
                adapter: adapter.to_string(),
                batch: what.to_string(),
                reason: other.to_string(),
            },
        }
    }

    /// This error, as it happened while doing `what`; it keeps its exit code.
    pub fn context(self, what: impl Into<String>) -> Self {
        Error::Context {
            what: what.into(),
            source: Box::new(self),
        }
    }

    pub fn record(
        file: impl Into<String>,
        record: impl Into<String>,
        reason: impl Into<String>,
    ) -> Self {
        Error::Record {
            file: file.into(),
            record: record.into(),
            reason: reason.into(),
        }
    }

    /// The process exit code for this error: 2 usage/config, 3 bad input data, 4 I/O,
    /// 5 external model, 6 cluster, 0 a closed standard output, 1 anything else.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::OutputClosed => 0,
            Error::Usage(_) | Error::Config(_) => 2,
            Error::Record { .. } | Error::Invalid { .. } | Error::Corrupt { .. } => 3,
            Error::Io { .. } => 4,
            Error::Adapter { .. } => 5,
            Error::Cluster { .. } => 6,
            Error::Stage { source, .. } | Error::Context { source, .. } => source.exit_code(),
            Error::Arrow { source, .. } => io_or_internal(source),
            Error::Parquet { source, .. } => io_or_internal(source),
        }
    }
}

/// 4 when an I/O error (a full disk, a file over the size limit, a failed device) caused
/// `error`, wherever it sits in the chain of sources; 1 otherwise.
fn io_or_internal(error: &(dyn std::error::Error + 'static)) -> i32 {
    let mut cause = Some(error);
    while let Some(error) = cause {
        if error.is::<std::io::Error>() {
            return 4;
        }
        cause = error.source();
    }
    1
}
