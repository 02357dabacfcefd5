//! Object clusters: average-link agglomerative clustering of lemma vectors by cosine distance,
//! with the number of clusters fixed or chosen by the silhouette score (thesis §4.4.1).

use crate::cluster::{upgma, DistanceMatrix, Linkage};
use crate::error::{Error, Result};
use crate::text::cosine;

/// How many clusters to cut the dendrogram into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClusterCount {
    /// Exactly `k` (fewer lemmas than `k`: one cluster per lemma).
    Fixed(usize),
    /// The `k` in `2..=lemmas - 1` with the highest silhouette score (ties: the smaller `k`).
    Silhouette,
}

impl Default for ClusterCount {
    fn default() -> Self {
        // The thesis' silhouette choice on 332 COCO object lemmas.
        ClusterCount::Fixed(122)
    }
}

/// Written as the recipe spells it: the number, or `"silhouette"`.
impl serde::Serialize for ClusterCount {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            ClusterCount::Fixed(k) => serializer.serialize_u64(*k as u64),
            ClusterCount::Silhouette => serializer.serialize_str("silhouette"),
        }
    }
}

impl<'de> serde::Deserialize<'de> for ClusterCount {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(serde::Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Number(usize),
            Name(String),
        }
        match Raw::deserialize(deserializer)? {
            Raw::Number(0) => Err(serde::de::Error::custom("clusters must be at least 1")),
            Raw::Number(k) => Ok(ClusterCount::Fixed(k)),
            Raw::Name(name) if name == "silhouette" => Ok(ClusterCount::Silhouette),
            Raw::Name(name) => Err(serde::de::Error::custom(format!(
                "clusters = \"{name}\": expected a number or \"silhouette\""
            ))),
        }
    }
}

/// Flat clusters of unit lemma vectors.
#[derive(Clone, Debug)]
pub struct Clusters {
    /// Cluster label of each lemma (scikit-learn's numbering).
    pub labels: Vec<usize>,
    /// Members of each cluster (lemma indices, ascending).
    pub members: Vec<Vec<usize>>,
    /// Mean of the members' unit vectors, per cluster.
    pub centres: Vec<Vec<f32>>,
    /// Silhouette score of the cut (0 for one cluster or one lemma per cluster).
    pub silhouette: f64,
}

/// Cosine distances `1 - cos` between vectors.
pub fn cosine_distances(vectors: &[Vec<f32>]) -> Result<DistanceMatrix> {
    DistanceMatrix::from_fn(vectors.len(), |i, j| 1.0 - cosine(&vectors[i], &vectors[j]))
        .map_err(|e| e.into_error("cosine distances of object lemma vectors"))
}

/// Clusters `vectors` (one per lemma) into `count` clusters.
pub fn cluster(vectors: &[Vec<f32>], count: ClusterCount) -> Result<Clusters> {
    let n = vectors.len();
    if n == 0 {
        return Ok(Clusters {
            labels: Vec::new(),
            members: Vec::new(),
            centres: Vec::new(),
            silhouette: 0.0,
        });
    }
    let distances = cosine_distances(vectors)?;
    let linkage = upgma(&distances);
    let labels = match count {
        ClusterCount::Fixed(k) => cut(&linkage, k.clamp(1, n))?,
        ClusterCount::Silhouette if n < 3 => cut(&linkage, n)?,
        ClusterCount::Silhouette => {
            let mut best: Option<(f64, Vec<usize>)> = None;
            for k in 2..n {
                let labels = cut(&linkage, k)?;
                let score = silhouette_score(&distances, &labels);
                if best.as_ref().is_none_or(|(s, _)| score > *s) {
                    best = Some((score, labels));
                }
            }
            best.map(|(_, labels)| labels).unwrap_or_else(|| vec![0; n])
        }
    };
    let silhouette = silhouette_score(&distances, &labels);
    let k = labels.iter().max().map_or(0, |m| m + 1);
    let mut members = vec![Vec::new(); k];
    for (i, &label) in labels.iter().enumerate() {
        members[label].push(i);
    }
    let dim = vectors[0].len();
    let centres = members
        .iter()
        .map(|m| {
            let mut centre = vec![0f64; dim];
            for &i in m {
                for (c, &x) in centre.iter_mut().zip(&vectors[i]) {
                    *c += f64::from(x);
                }
            }
            centre.iter().map(|c| (c / m.len() as f64) as f32).collect()
        })
        .collect();
    Ok(Clusters {
        labels,
        members,
        centres,
        silhouette,
    })
}

fn cut(linkage: &Linkage, k: usize) -> Result<Vec<usize>> {
    linkage.cut(k).ok_or_else(|| {
        Error::invalid(
            "object clusters",
            format!("cannot cut {} lemmas into {k} clusters", linkage.leaves),
        )
    })
}

/// Mean silhouette coefficient, as scikit-learn's `silhouette_score(D, labels,
/// metric="precomputed")`: a point alone in its cluster scores 0; 0 when there are fewer than
/// two clusters or as many clusters as points (where scikit-learn refuses to score).
pub fn silhouette_score(distances: &DistanceMatrix, labels: &[usize]) -> f64 {
    let n = labels.len();
    let k = labels.iter().max().map_or(0, |m| m + 1);
    if k < 2 || k >= n {
        return 0.0;
    }
    let mut sizes = vec![0usize; k];
    for &l in labels {
        sizes[l] += 1;
    }
    let mut total = 0.0;
    let mut sums = vec![0.0f64; k];
    for i in 0..n {
        sums.iter_mut().for_each(|s| *s = 0.0);
        for j in 0..n {
            if i != j {
                sums[labels[j]] += distances.get(i, j);
            }
        }
        let own = labels[i];
        if sizes[own] == 1 {
            continue;
        }
        let a = sums[own] / (sizes[own] - 1) as f64;
        let b = (0..k)
            .filter(|&c| c != own)
            .map(|c| sums[c] / sizes[c] as f64)
            .fold(f64::INFINITY, f64::min);
        let denominator = a.max(b);
        if denominator > 0.0 {
            total += (b - a) / denominator;
        }
    }
    total / n as f64
}

/// Index of the cluster whose centre is most cosine-similar to `vector` (ties: lower index).
pub fn nearest_centre(centres: &[Vec<f32>], vector: &[f32]) -> Option<usize> {
    let mut best: Option<(usize, f64)> = None;
    for (c, centre) in centres.iter().enumerate() {
        let sim = cosine(centre, vector);
        if best.is_none_or(|(_, s)| sim > s) {
            best = Some((c, sim));
        }
    }
    best.map(|(c, _)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn silhouette_of_a_hand_computed_example() {
        // Points on a line at 0, 1, 5, 6 with |x - y| distances, clusters {0,1} and {5,6}:
        // point 0: a = 1, b = (5 + 6) / 2 = 5.5, s = 4.5 / 5.5; point 1: a = 1, b = 4.5,
        // s = 3.5 / 4.5; the others mirror them.
        let xs = [0.0f64, 1.0, 5.0, 6.0];
        let d = DistanceMatrix::from_fn(4, |i, j| (xs[i] - xs[j]).abs()).unwrap();
        let expected = (2.0 * (4.5 / 5.5) + 2.0 * (3.5 / 4.5)) / 4.0;
        assert!((silhouette_score(&d, &[0, 0, 1, 1]) - expected).abs() < 1e-15);
        // A singleton scores 0: {0}, {1, 5, 6}.
        // Point 1: a = (4 + 5) / 2, b = 1; point 5: a = (4 + 1) / 2, b = 5; point 6: a = 3, b = 6.
        let a1 = (4.0 + 5.0) / 2.0;
        let p1 = (1.0 - a1) / a1; // b = 1 (distance to point 0)
        let a5 = (4.0 + 1.0) / 2.0;
        let p5 = (5.0 - a5) / 5.0;
        let a6 = (5.0 + 1.0) / 2.0;
        let p6 = (6.0 - a6) / 6.0;
        let expected = (0.0 + p1 + p5 + p6) / 4.0;
        assert!((silhouette_score(&d, &[0, 1, 1, 1]) - expected).abs() < 1e-15);
    }

    #[test]
    fn silhouette_picks_the_obvious_split() {
        let vectors = vec![
            vec![1.0, 0.0, 0.0],
            vec![0.9, 0.1, 0.0],
            vec![0.0, 1.0, 0.0],
            vec![0.1, 0.9, 0.0],
            vec![0.0, 0.0, 1.0],
            vec![0.0, 0.1, 0.9],
        ];
        let clusters = cluster(&vectors, ClusterCount::Silhouette).unwrap();
        assert_eq!(clusters.members.len(), 3);
        assert_eq!(clusters.labels[0], clusters.labels[1]);
        assert_eq!(clusters.labels[2], clusters.labels[3]);
        assert_eq!(clusters.labels[4], clusters.labels[5]);
        let c = nearest_centre(&clusters.centres, &[0.05, 0.0, 1.0]).unwrap();
        assert_eq!(c, clusters.labels[4]);
        // A fixed k larger than the number of lemmas gives one cluster per lemma.
        let single = cluster(&vectors, ClusterCount::Fixed(122)).unwrap();
        assert_eq!(single.members.len(), 6);
    }
}
