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
    /// A failure inside a dataflow stage, with the stage and image it happened on; its exit
    /// code is its cause's.
    #[error("{stage}, image {image}: {source}")]
    Stage {
        stage: String,
        image: String,
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
    /// 5 external model, 6 cluster, 1 anything else.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Usage(_) | Error::Config(_) => 2,
            Error::Record { .. } | Error::Invalid { .. } => 3,
            Error::Io { .. } => 4,
            Error::Adapter { .. } => 5,
            Error::Cluster { .. } => 6,
            Error::Stage { source, .. } => source.exit_code(),
            Error::Arrow { .. } | Error::Parquet { .. } => 1,
        }
    }
}
