//! Quality filters, mixing strategies and curriculum selection.
