//! Quality filters, mixing strategies and curriculum selection.

pub mod quality;
