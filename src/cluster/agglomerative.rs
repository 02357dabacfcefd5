//! Flat average-link clustering (CutSwap's object-lemma clusters).

use super::distance::{DistanceError, DistanceMatrix};
use super::upgma::upgma;

/// Labels of `k` average-link clusters, equal to scikit-learn's
/// `AgglomerativeClustering(n_clusters=k, linkage="average", metric="precomputed").fit(D).labels_`.
///
/// scikit-learn builds the full tree with scipy's average linkage when no connectivity is given
/// and then cuts it (see [`super::Linkage::cut`] for its label numbering).
pub fn average_link_labels(
    distances: &DistanceMatrix,
    k: usize,
) -> Result<Vec<usize>, DistanceError> {
    let n = distances.len();
    upgma(distances)
        .cut(k)
        .ok_or(DistanceError::ClusterCount { k, n })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_obvious_groups() {
        // Points 0, 2 close together, 1, 3 close together, the groups far apart.
        let d = DistanceMatrix::from_rows(&[
            [0.0, 9.0, 1.0, 9.5],
            [9.0, 0.0, 8.5, 2.0],
            [1.0, 8.5, 0.0, 9.0],
            [9.5, 2.0, 9.0, 0.0],
        ])
        .unwrap();
        let labels = average_link_labels(&d, 2).unwrap();
        assert_eq!(labels[0], labels[2]);
        assert_eq!(labels[1], labels[3]);
        assert_ne!(labels[0], labels[1]);
        // Tree: 4 = (0, 2) at 1, 5 = (1, 3) at 2, root 6. The cut heap is [-5, -4]: cluster 5
        // gets label 0.
        assert_eq!(labels, vec![1, 0, 1, 0]);
        assert_eq!(
            average_link_labels(&d, 5),
            Err(DistanceError::ClusterCount { k: 5, n: 4 })
        );
    }
}
