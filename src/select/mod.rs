//! Quality filters, mixing strategies and curriculum selection.

pub mod mix;
pub mod quality;
