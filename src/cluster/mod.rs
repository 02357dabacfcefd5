//! Clustering: UPGMA (average linkage), flat average-link clusters, and Hungarian matching.
//!
//! SSA orders the pairwise merges of an image's caption graphs by a UPGMA dendrogram over
//! `1 - Smatch F`, CutSwap groups object lemmas by average-link clustering of word vectors, and
//! the content-IoU metric matches control nouns to caption nouns with the Hungarian algorithm.
//! Each of these must agree with the Python references the methods were published with, so the
//! functions here reproduce scipy and scikit-learn exactly, tie-breaking and numbering included:
//!
//! - [`upgma`] returns scipy's `linkage(y, method="average")` matrix `Z`;
//! - [`Linkage::cut`] / [`average_link_labels`] return scikit-learn's
//!   `AgglomerativeClustering(linkage="average", metric="precomputed").labels_`;
//! - [`linear_sum_assignment`] returns scipy's `optimize.linear_sum_assignment`.
//!
//! ```
//! use capflow::cluster::{upgma, DistanceMatrix};
//!
//! let d = DistanceMatrix::from_rows(&[[0.0, 2.0, 6.0], [2.0, 0.0, 4.0], [6.0, 4.0, 0.0]])?;
//! let z = upgma(&d);
//! assert_eq!((z.steps[0].a, z.steps[0].b, z.steps[0].height), (0, 1, 2.0));
//! assert_eq!((z.steps[1].a, z.steps[1].b, z.steps[1].height), (2, 3, 5.0));
//! # Ok::<(), capflow::cluster::DistanceError>(())
//! ```

mod agglomerative;
mod distance;
mod hungarian;
mod upgma;

pub use agglomerative::average_link_labels;
pub use distance::{DistanceError, DistanceMatrix};
pub use hungarian::{linear_sum_assignment, Assignment, AssignmentError, AssignmentWorkspace};
pub use upgma::{upgma, Linkage, LinkageStep, UpgmaWorkspace};
