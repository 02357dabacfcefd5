//! Scene graphs and GBC graphs: traversal, masks, minimum spanning trees, filtering.
pub mod gbc;
