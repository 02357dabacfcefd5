//! Pipeline specs and their timely/differential dataflows.
