//! Traits for external models and the subprocess adapter that speaks to them.
