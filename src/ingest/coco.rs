//! Reader for the `coco` input format.

use std::path::Path;

use super::RecordSink;
use crate::error::{Error, Result};

pub fn read_captions(path: &Path, _sink: &mut dyn RecordSink) -> Result<()> {
    Err(Error::Usage(format!(
        "{}: reader not available yet",
        path.display()
    )))
}

pub fn read_instances(path: &Path, _sink: &mut dyn RecordSink) -> Result<()> {
    Err(Error::Usage(format!(
        "{}: reader not available yet",
        path.display()
    )))
}

pub fn read_entities(path: &Path, _sink: &mut dyn RecordSink) -> Result<()> {
    Err(Error::Usage(format!(
        "{}: reader not available yet",
        path.display()
    )))
}
