//! Reader for the `gbc` input format.

use std::path::Path;

use super::RecordSink;
use crate::error::{Error, Result};

pub fn read(path: &Path, _sink: &mut dyn RecordSink) -> Result<()> {
    Err(Error::Usage(format!(
        "{}: reader not available yet",
        path.display()
    )))
}
