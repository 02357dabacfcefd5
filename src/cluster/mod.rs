//! Clustering: UPGMA (average linkage) and Hungarian matching.
