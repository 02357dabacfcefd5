//! Scene graphs and GBC graphs: traversal, masks, minimum spanning trees, filtering.
pub mod composition_mst;
pub mod gbc;
pub mod gbc_edit;
pub mod gbc_filter;
