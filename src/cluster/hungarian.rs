//! Linear sum assignment (Hungarian matching) with scipy's results.
//!
//! This is the shortest-augmenting-path algorithm of scipy's `rectangular_lsap.cpp`
//! (Crouse, "On implementing 2D rectangular assignment algorithms", IEEE TAES 2016), with the
//! same scan orders and tie rules, so that on cost matrices with several optimal assignments it
//! picks the one scipy picks. Costs are `f64`; `+inf` forbids a pair.

use std::fmt;

/// An optimal assignment: `rows[k]` is matched to `cols[k]`, rows ascending (as scipy returns
/// them); `min(rows, cols)` pairs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Assignment {
    pub rows: Vec<usize>,
    pub cols: Vec<usize>,
    /// Sum of the original costs of the matched pairs (the maximum when maximising).
    pub total: f64,
}

impl Assignment {
    /// The matched `(row, col)` pairs.
    pub fn pairs(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.rows.iter().copied().zip(self.cols.iter().copied())
    }
}

/// Why an assignment problem has no answer.
#[derive(Clone, Debug, PartialEq)]
pub enum AssignmentError {
    /// The buffer does not hold `rows * cols` costs.
    Shape {
        len: usize,
        rows: usize,
        cols: usize,
    },
    /// A NaN, or an infinity that makes every assignment equally bad (`-inf` when minimising,
    /// `+inf` when maximising).
    InvalidCost { row: usize, col: usize, value: f64 },
    /// Every complete assignment uses a forbidden (infinite) pair.
    Infeasible,
}

impl fmt::Display for AssignmentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AssignmentError::Shape { len, rows, cols } => {
                write!(f, "{len} costs do not form a {rows} x {cols} matrix")
            }
            AssignmentError::InvalidCost { row, col, value } => write!(
                f,
                "cost ({row}, {col}) is {value}, which no assignment can be optimal with"
            ),
            AssignmentError::Infeasible => {
                write!(f, "every complete assignment uses an infinite cost")
            }
        }
    }
}

impl std::error::Error for AssignmentError {}

impl AssignmentError {
    /// This error as capflow's [`crate::Error`], naming the matrix (`what`), e.g. its file.
    /// (Not a `From` impl, for the reason given on `DistanceError::into_error`.)
    pub fn into_error(self, what: impl Into<String>) -> crate::Error {
        crate::Error::invalid(what, self.to_string())
    }
}

/// The assignment of rows to columns with the least total cost (the greatest with `maximize`),
/// equal to scipy's `linear_sum_assignment(cost.reshape(rows, cols), maximize)`.
///
/// `cost` is row-major. A rectangular matrix matches every row (wide) or every column (tall).
pub fn linear_sum_assignment(
    cost: &[f64],
    rows: usize,
    cols: usize,
    maximize: bool,
) -> Result<Assignment, AssignmentError> {
    AssignmentWorkspace::default().solve(cost, rows, cols, maximize)
}

/// Reusable buffers for repeated [`linear_sum_assignment`] calls on small matrices.
#[derive(Clone, Debug, Default)]
pub struct AssignmentWorkspace {
    /// The (transposed and/or negated) matrix the solver works on, `nr <= nc`.
    work: Vec<f64>,
    u: Vec<f64>,
    v: Vec<f64>,
    shortest_path_costs: Vec<f64>,
    path: Vec<usize>,
    col4row: Vec<usize>,
    row4col: Vec<usize>,
    scanned_rows: Vec<bool>,
    scanned_cols: Vec<bool>,
    remaining: Vec<usize>,
}

const UNASSIGNED: usize = usize::MAX;

impl AssignmentWorkspace {
    pub fn new() -> Self {
        Self::default()
    }

    /// As [`linear_sum_assignment`], reusing this workspace's buffers.
    pub fn solve(
        &mut self,
        cost: &[f64],
        rows: usize,
        cols: usize,
        maximize: bool,
    ) -> Result<Assignment, AssignmentError> {
        if rows.checked_mul(cols) != Some(cost.len()) {
            return Err(AssignmentError::Shape {
                len: cost.len(),
                rows,
                cols,
            });
        }
        if rows == 0 || cols == 0 {
            return Ok(Assignment::default());
        }
        // The solver needs at least as many columns as rows.
        let transpose = cols < rows;
        let (nr, nc) = if transpose {
            (cols, rows)
        } else {
            (rows, cols)
        };
        self.work.clear();
        self.work.reserve(nr * nc);
        for i in 0..nr {
            for j in 0..nc {
                let (r, c) = if transpose { (j, i) } else { (i, j) };
                let value = cost[r * cols + c];
                let value = if maximize { -value } else { value };
                if value.is_nan() || value == f64::NEG_INFINITY {
                    return Err(AssignmentError::InvalidCost {
                        row: r,
                        col: c,
                        value: cost[r * cols + c],
                    });
                }
                self.work.push(value);
            }
        }
        self.shortest_augmenting_paths(nr, nc)?;

        let mut assignment = Assignment {
            rows: Vec::with_capacity(nr),
            cols: Vec::with_capacity(nr),
            total: 0.0,
        };
        if transpose {
            // Work row i is original column i; report by original row, ascending.
            let mut by_row: Vec<(usize, usize)> = (0..nr).map(|i| (self.col4row[i], i)).collect();
            by_row.sort_unstable();
            for (r, c) in by_row {
                assignment.rows.push(r);
                assignment.cols.push(c);
            }
        } else {
            assignment.rows.extend(0..nr);
            assignment.cols.extend_from_slice(&self.col4row[..nr]);
        }
        assignment.total = assignment.pairs().map(|(r, c)| cost[r * cols + c]).sum();
        Ok(assignment)
    }

    /// Builds the assignment one row at a time, each time along the shortest augmenting path
    /// with respect to the reduced costs, updating the dual variables `u`, `v`.
    fn shortest_augmenting_paths(&mut self, nr: usize, nc: usize) -> Result<(), AssignmentError> {
        self.u.clear();
        self.u.resize(nr, 0.0);
        self.v.clear();
        self.v.resize(nc, 0.0);
        self.shortest_path_costs.clear();
        self.shortest_path_costs.resize(nc, f64::INFINITY);
        self.path.clear();
        self.path.resize(nc, UNASSIGNED);
        self.col4row.clear();
        self.col4row.resize(nr, UNASSIGNED);
        self.row4col.clear();
        self.row4col.resize(nc, UNASSIGNED);
        self.scanned_rows.clear();
        self.scanned_rows.resize(nr, false);
        self.scanned_cols.clear();
        self.scanned_cols.resize(nc, false);
        self.remaining.clear();
        self.remaining.resize(nc, 0);

        for current_row in 0..nr {
            let (sink, min_val) = self
                .augmenting_path(nc, current_row)
                .ok_or(AssignmentError::Infeasible)?;

            self.u[current_row] += min_val;
            for i in 0..nr {
                if self.scanned_rows[i] && i != current_row {
                    self.u[i] += min_val - self.shortest_path_costs[self.col4row[i]];
                }
            }
            for j in 0..nc {
                if self.scanned_cols[j] {
                    self.v[j] -= min_val - self.shortest_path_costs[j];
                }
            }

            // Flip the matched/unmatched edges along the path back to the current row.
            let mut j = sink;
            loop {
                let i = self.path[j];
                self.row4col[j] = i;
                std::mem::swap(&mut self.col4row[i], &mut j);
                if i == current_row {
                    break;
                }
            }
        }
        Ok(())
    }

    /// Dijkstra over reduced costs from row `i` to the nearest unassigned column: returns the
    /// sink column and the path length, or `None` when every column is out of reach.
    fn augmenting_path(&mut self, nc: usize, mut i: usize) -> Option<(usize, f64)> {
        let mut min_val = 0.0;
        // Reverse order makes a constant matrix come out as the identity (scipy #11602).
        let mut num_remaining = nc;
        for (it, slot) in self.remaining.iter_mut().enumerate() {
            *slot = nc - it - 1;
        }
        self.scanned_rows.fill(false);
        self.scanned_cols.fill(false);
        self.shortest_path_costs.fill(f64::INFINITY);

        loop {
            let mut index = UNASSIGNED;
            let mut lowest = f64::INFINITY;
            self.scanned_rows[i] = true;

            for it in 0..num_remaining {
                let j = self.remaining[it];
                let r = min_val + self.work[i * nc + j] - self.u[i] - self.v[j];
                if r < self.shortest_path_costs[j] {
                    self.path[j] = i;
                    self.shortest_path_costs[j] = r;
                }
                // On ties prefer a column that ends the path (matters for integer costs).
                let spc = self.shortest_path_costs[j];
                if spc < lowest || (spc == lowest && self.row4col[j] == UNASSIGNED) {
                    lowest = spc;
                    index = it;
                }
            }

            min_val = lowest;
            if min_val == f64::INFINITY || index == UNASSIGNED {
                return None;
            }
            let j = self.remaining[index];
            self.scanned_cols[j] = true;
            num_remaining -= 1;
            self.remaining[index] = self.remaining[num_remaining];
            if self.row4col[j] == UNASSIGNED {
                return Some((j, min_val));
            }
            i = self.row4col[j];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn square_minimum_and_maximum() {
        // By hand: the 6 permutations of [[4,1,3],[2,0,5],[3,2,2]] cost 4+0+2=6, 4+5+2=11,
        // 1+2+2=5, 1+5+3=9, 3+2+2=7, 3+0+3=6; the minimum 5 is (0,1),(1,0),(2,2) and the
        // maximum 11 is (0,0),(1,2),(2,1).
        let c = [4.0, 1.0, 3.0, 2.0, 0.0, 5.0, 3.0, 2.0, 2.0];
        let min = linear_sum_assignment(&c, 3, 3, false).unwrap();
        assert_eq!(min.rows, vec![0, 1, 2]);
        assert_eq!(min.cols, vec![1, 0, 2]);
        assert_eq!(min.total, 5.0);
        let max = linear_sum_assignment(&c, 3, 3, true).unwrap();
        assert_eq!(max.cols, vec![0, 2, 1]);
        assert_eq!(max.total, 11.0);
    }

    #[test]
    fn rectangular_both_ways() {
        // Wide: each row takes its cheapest distinct column.
        let wide = [5.0, 1.0, 9.0, 9.0, 9.0, 2.0];
        let a = linear_sum_assignment(&wide, 2, 3, false).unwrap();
        assert_eq!((a.rows, a.cols, a.total), (vec![0, 1], vec![1, 2], 3.0));
        // Tall (its transpose): rows 1 and 2 are matched, reported by row.
        let tall = [5.0, 9.0, 1.0, 9.0, 9.0, 2.0];
        let a = linear_sum_assignment(&tall, 3, 2, false).unwrap();
        assert_eq!((a.rows, a.cols, a.total), (vec![1, 2], vec![0, 1], 3.0));
    }

    #[test]
    fn constant_matrix_gives_identity() {
        let a = linear_sum_assignment(&[1.0; 9], 3, 3, false).unwrap();
        assert_eq!(a.cols, vec![0, 1, 2]);
    }

    #[test]
    fn infinite_costs_forbid_pairs() {
        let inf = f64::INFINITY;
        let a = linear_sum_assignment(&[inf, 1.0, 1.0, inf], 2, 2, false).unwrap();
        assert_eq!(a.cols, vec![1, 0]);
        assert_eq!(
            linear_sum_assignment(&[inf, inf, 1.0, 1.0], 2, 2, false),
            Err(AssignmentError::Infeasible)
        );
    }

    #[test]
    fn invalid_input_is_located() {
        assert_eq!(
            linear_sum_assignment(&[1.0, 2.0, 3.0], 2, 2, false),
            Err(AssignmentError::Shape {
                len: 3,
                rows: 2,
                cols: 2
            })
        );
        assert!(matches!(
            linear_sum_assignment(&[1.0, f64::NAN, 3.0, 4.0], 2, 2, false),
            Err(AssignmentError::InvalidCost { row: 0, col: 1, .. })
        ));
        assert!(matches!(
            linear_sum_assignment(&[1.0, 2.0, f64::INFINITY, 4.0], 2, 2, true),
            Err(AssignmentError::InvalidCost { row: 1, col: 0, .. })
        ));
        assert_eq!(
            linear_sum_assignment(&[], 0, 4, false),
            Ok(Assignment::default())
        );
    }
}
