//! Quality filters, mixing strategies and curriculum selection.

pub mod curriculum;
pub mod mix;
pub mod quality;
