//! Validated symmetric distance matrices, stored condensed (upper triangle, row by row) as
//! scipy's `squareform` does, so that every clustering function can trust its input.

use std::fmt;

/// Why a matrix is not a valid distance matrix (or a clustering request is not valid for it).
///
/// Indices are 0-based row and column positions in the matrix as given.
#[derive(Clone, Debug, PartialEq)]
pub enum DistanceError {
    /// A matrix with no points.
    Empty,
    /// A square matrix whose row `row` has `len` entries instead of `expected`.
    NotSquare {
        row: usize,
        len: usize,
        expected: usize,
    },
    /// A flat buffer whose length is not `n * n` (square) or `n * (n - 1) / 2` (condensed).
    BadLength { len: usize, layout: &'static str },
    /// A NaN or infinite distance.
    NotFinite { row: usize, col: usize, value: f64 },
    /// A distance below zero.
    Negative { row: usize, col: usize, value: f64 },
    /// `d[row][col] != d[col][row]` (compared exactly, as scipy's `squareform` does).
    Asymmetric {
        row: usize,
        col: usize,
        value: f64,
        mirror: f64,
    },
    /// A point at a non-zero distance from itself.
    NonZeroDiagonal { row: usize, value: f64 },
    /// A flat clustering asked for `k` clusters of `n` points (needs `1 <= k <= n`).
    ClusterCount { k: usize, n: usize },
}

impl fmt::Display for DistanceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DistanceError::Empty => write!(f, "the distance matrix has no points"),
            DistanceError::NotSquare { row, len, expected } => write!(
                f,
                "the distance matrix is not square: row {row} has {len} entries, expected {expected}"
            ),
            DistanceError::BadLength { len, layout } => write!(
                f,
                "{len} values cannot form a {layout} distance matrix of any size"
            ),
            DistanceError::NotFinite { row, col, value } => {
                write!(f, "distance ({row}, {col}) is {value}, not a finite number")
            }
            DistanceError::Negative { row, col, value } => {
                write!(f, "distance ({row}, {col}) is negative ({value})")
            }
            DistanceError::Asymmetric {
                row,
                col,
                value,
                mirror,
            } => write!(
                f,
                "the distance matrix is not symmetric: ({row}, {col}) is {value} but ({col}, {row}) is {mirror}"
            ),
            DistanceError::NonZeroDiagonal { row, value } => write!(
                f,
                "point {row} is at distance {value} from itself; the diagonal must be 0"
            ),
            DistanceError::ClusterCount { k, n } => write!(
                f,
                "cannot form {k} clusters from {n} points (need 1 <= clusters <= points)"
            ),
        }
    }
}

impl std::error::Error for DistanceError {}

impl DistanceError {
    /// This error as capflow's [`crate::Error`], naming the matrix (`what`), e.g. its file.
    ///
    /// A method rather than a `From` impl: more `From` impls on `crate::Error` would make
    /// `?` ambiguous in closures whose error type is inferred.
    pub fn into_error(self, what: impl Into<String>) -> crate::Error {
        crate::Error::invalid(what, self.to_string())
    }
}

/// A symmetric, zero-diagonal matrix of finite non-negative distances between `n >= 1` points.
///
/// Stored condensed: the entries above the diagonal, row by row (scipy's layout), so the
/// clustering code reads exactly the numbers scipy would read.
#[derive(Clone, Debug, PartialEq)]
pub struct DistanceMatrix {
    n: usize,
    condensed: Vec<f64>,
}

/// The number of points whose condensed matrix has `len` entries, if there is one.
fn points_for_condensed(len: usize) -> Option<usize> {
    // n (n - 1) / 2 = len  =>  n = (1 + sqrt(1 + 8 len)) / 2; check the candidate exactly.
    let guess = ((1.0 + (1.0 + 8.0 * len as f64).sqrt()) / 2.0).round() as usize;
    (guess.saturating_sub(1)..=guess + 1).find(|&n| n >= 1 && n * (n - 1) / 2 == len)
}

fn check_entry(row: usize, col: usize, value: f64) -> Result<(), DistanceError> {
    if !value.is_finite() {
        return Err(DistanceError::NotFinite { row, col, value });
    }
    if value < 0.0 {
        return Err(DistanceError::Negative { row, col, value });
    }
    Ok(())
}

impl DistanceMatrix {
    /// A matrix from its condensed form (`n * (n - 1) / 2` upper-triangle entries, row by row,
    /// as scipy's `pdist` returns). An empty buffer is one point.
    pub fn from_condensed(condensed: Vec<f64>) -> Result<Self, DistanceError> {
        let n = points_for_condensed(condensed.len()).ok_or(DistanceError::BadLength {
            len: condensed.len(),
            layout: "condensed",
        })?;
        let mut k = 0;
        for i in 0..n {
            for j in i + 1..n {
                check_entry(i, j, condensed[k])?;
                k += 1;
            }
        }
        Ok(DistanceMatrix { n, condensed })
    }

    /// A matrix from a row-major square buffer of `n * n` values.
    pub fn from_square(values: &[f64]) -> Result<Self, DistanceError> {
        let n = (values.len() as f64).sqrt().round() as usize;
        if n * n != values.len() {
            return Err(DistanceError::BadLength {
                len: values.len(),
                layout: "square",
            });
        }
        Self::from_fn_checked(n, |i, j| values[i * n + j])
    }

    /// A matrix from its rows.
    pub fn from_rows<R: AsRef<[f64]>>(rows: &[R]) -> Result<Self, DistanceError> {
        let n = rows.len();
        for (row, values) in rows.iter().enumerate() {
            let len = values.as_ref().len();
            if len != n {
                return Err(DistanceError::NotSquare {
                    row,
                    len,
                    expected: n,
                });
            }
        }
        Self::from_fn_checked(n, |i, j| rows[i].as_ref()[j])
    }

    /// A matrix whose distance between `i < j` is `distance(i, j)`; only the upper triangle is
    /// asked for, so symmetry and the zero diagonal hold by construction (SSA builds its
    /// `1 - Smatch F` matrix this way).
    pub fn from_fn(
        n: usize,
        mut distance: impl FnMut(usize, usize) -> f64,
    ) -> Result<Self, DistanceError> {
        if n == 0 {
            return Err(DistanceError::Empty);
        }
        let mut condensed = Vec::with_capacity(n * (n - 1) / 2);
        for i in 0..n {
            for j in i + 1..n {
                let value = distance(i, j);
                check_entry(i, j, value)?;
                condensed.push(value);
            }
        }
        Ok(DistanceMatrix { n, condensed })
    }

    fn from_fn_checked(n: usize, at: impl Fn(usize, usize) -> f64) -> Result<Self, DistanceError> {
        if n == 0 {
            return Err(DistanceError::Empty);
        }
        for i in 0..n {
            let value = at(i, i);
            if value != 0.0 {
                return Err(DistanceError::NonZeroDiagonal { row: i, value });
            }
        }
        for i in 0..n {
            for j in i + 1..n {
                let (value, mirror) = (at(i, j), at(j, i));
                check_entry(i, j, value)?;
                // Exact comparison, like scipy's `squareform(checks=True)`; a NaN mirror fails.
                if value != mirror {
                    return Err(DistanceError::Asymmetric {
                        row: i,
                        col: j,
                        value,
                        mirror,
                    });
                }
            }
        }
        Self::from_fn(n, at)
    }

    /// The number of points.
    pub fn len(&self) -> usize {
        self.n
    }

    /// Always false: a distance matrix has at least one point.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// The distance between points `i` and `j`. Panics if either is out of range.
    pub fn get(&self, i: usize, j: usize) -> f64 {
        assert!(i < self.n && j < self.n, "point index out of range");
        match i.cmp(&j) {
            std::cmp::Ordering::Equal => 0.0,
            std::cmp::Ordering::Less => self.condensed[condensed_index(self.n, i, j)],
            std::cmp::Ordering::Greater => self.condensed[condensed_index(self.n, j, i)],
        }
    }

    /// The condensed entries (upper triangle, row by row).
    pub fn condensed(&self) -> &[f64] {
        &self.condensed
    }
}

/// Position of the pair `i < j` in a condensed matrix of `n` points.
#[inline]
pub(crate) fn condensed_index(n: usize, i: usize, j: usize) -> usize {
    debug_assert!(i < j && j < n);
    n * i - i * (i + 1) / 2 + (j - i - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn condensed_layout_is_scipys_upper_triangle() {
        // squareform([[0,1,2],[1,0,3],[2,3,0]]) == [1, 2, 3]
        let d = DistanceMatrix::from_rows(&[[0.0, 1.0, 2.0], [1.0, 0.0, 3.0], [2.0, 3.0, 0.0]])
            .unwrap();
        assert_eq!(d.condensed(), &[1.0, 2.0, 3.0]);
        assert_eq!(d.get(2, 1), 3.0);
        assert_eq!(d.get(1, 1), 0.0);
        let c = DistanceMatrix::from_condensed(vec![1.0, 2.0, 3.0]).unwrap();
        assert_eq!(c, d);
        assert_eq!(DistanceMatrix::from_condensed(vec![]).unwrap().len(), 1);
    }

    #[test]
    fn invalid_matrices_are_rejected_with_their_position() {
        assert_eq!(
            DistanceMatrix::from_rows(&[vec![0.0, 1.0], vec![1.0]]),
            Err(DistanceError::NotSquare {
                row: 1,
                len: 1,
                expected: 2
            })
        );
        assert_eq!(
            DistanceMatrix::from_rows(&[[0.0, 1.0], [2.0, 0.0]]),
            Err(DistanceError::Asymmetric {
                row: 0,
                col: 1,
                value: 1.0,
                mirror: 2.0
            })
        );
        assert_eq!(
            DistanceMatrix::from_rows(&[[0.0, -1.0], [-1.0, 0.0]]),
            Err(DistanceError::Negative {
                row: 0,
                col: 1,
                value: -1.0
            })
        );
        assert!(matches!(
            DistanceMatrix::from_rows(&[[0.0, f64::NAN], [f64::NAN, 0.0]]),
            Err(DistanceError::NotFinite { row: 0, col: 1, .. })
        ));
        assert_eq!(
            DistanceMatrix::from_rows(&[[0.0, 1.0], [1.0, 0.5]]),
            Err(DistanceError::NonZeroDiagonal { row: 1, value: 0.5 })
        );
        assert_eq!(
            DistanceMatrix::from_condensed(vec![1.0, 2.0]),
            Err(DistanceError::BadLength {
                len: 2,
                layout: "condensed"
            })
        );
        assert_eq!(
            DistanceMatrix::from_square(&[0.0, 1.0, 1.0]),
            Err(DistanceError::BadLength {
                len: 3,
                layout: "square"
            })
        );
        assert_eq!(
            DistanceMatrix::from_rows::<[f64; 0]>(&[]),
            Err(DistanceError::Empty)
        );
    }

    #[test]
    fn condensed_sizes_are_recognised() {
        for n in 1..200usize {
            assert_eq!(points_for_condensed(n * (n - 1) / 2), Some(n));
        }
        assert_eq!(points_for_condensed(4), None);
    }
}
