//! L2-regularised logistic regression over standardised features, fitted by Newton's method:
//! the built-in quality scorer's classifier.
//!
//! Fitting reads the examples in the order given and does the same arithmetic on every
//! machine, so the same examples in the same order give the same model bit for bit.

use std::ops::Range;

use crate::parallel::parallel_map;

use super::features::{Features, FEATURES, FEATURE_SIGNS};

/// One training example: its features, whether it is a real caption, and its weight.
pub struct Example {
    pub features: Features,
    pub real: bool,
    pub weight: f64,
}

/// `P(real | features) = σ(bias + Σ weight_k · (feature_k - mean_k) / scale_k)`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LogisticModel {
    pub means: Features,
    pub scales: Features,
    pub weights: Features,
    pub bias: f64,
}

/// The regularisation strength, in units of one example's weight: it keeps the weights finite
/// when a few hundred captions separate perfectly on some feature.
const L2: f64 = 1.0;
const MAX_ITERATIONS: usize = 100;

impl LogisticModel {
    /// Fits the model to the examples of `parts`, read one part after another, every weight in
    /// its feature's direction ([`FEATURE_SIGNS`]): a feature whose fitted weight points the
    /// other way is left out and the rest refitted, until none does. A weight against a
    /// feature's meaning can only come from a contrast between correlated features that the
    /// training corruptions happen to reward, which other kinds of broken text do not share.
    pub fn fit(parts: &[&[Example]]) -> LogisticModel {
        let mut used = [true; FEATURES];
        loop {
            let model = LogisticModel::fit_using(parts, &used);
            let mut changed = false;
            for k in 0..FEATURES {
                if used[k] && model.weights[k] * FEATURE_SIGNS[k] < 0.0 {
                    used[k] = false;
                    changed = true;
                }
            }
            if !changed {
                return model;
            }
        }
    }

    /// Fits the model on the features `used` (the others get weight 0). With no examples, or
    /// only one class, every weight is 0 and the bias gives the (weighted) share of real ones.
    fn fit_using(parts: &[&[Example]], used: &[bool; FEATURES]) -> LogisticModel {
        let total: f64 = examples(parts).map(|e| e.weight).sum();
        let mut means = [0.0; FEATURES];
        let mut scales = [1.0; FEATURES];
        if total > 0.0 {
            for k in 0..FEATURES {
                let mean = examples(parts)
                    .map(|e| e.weight * finite(e.features[k]))
                    .sum::<f64>()
                    / total;
                let variance = examples(parts)
                    .map(|e| e.weight * (finite(e.features[k]) - mean).powi(2))
                    .sum::<f64>()
                    / total;
                means[k] = mean;
                scales[k] = variance.sqrt().max(1e-9);
            }
        }
        let mut model = LogisticModel {
            means,
            scales,
            weights: [0.0; FEATURES],
            bias: 0.0,
        };
        let design = Design {
            parts,
            model: &model,
            used,
            threads: std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get),
        };
        // θ = [bias, weights…].
        let mut theta = [0.0; FEATURES + 1];
        let mut loss = objective(&theta, &design);
        for _ in 0..MAX_ITERATIONS {
            let (gradient, hessian) = derivatives(&theta, &design);
            let Some(step) = solve(hessian, gradient) else {
                break;
            };
            // Newton's step, halved until the objective does not grow.
            let mut scale = 1.0;
            let mut accepted = false;
            for _ in 0..30 {
                let mut candidate = theta;
                for k in 0..=FEATURES {
                    candidate[k] -= scale * step[k];
                }
                let candidate_loss = objective(&candidate, &design);
                if candidate_loss <= loss {
                    theta = candidate;
                    loss = candidate_loss;
                    accepted = true;
                    break;
                }
                scale *= 0.5;
            }
            let size = step.iter().fold(0.0f64, |m, s| m.max((scale * s).abs()));
            if !accepted || size < 1e-10 {
                break;
            }
        }
        model.bias = theta[0];
        model.weights.copy_from_slice(&theta[1..]);
        model
    }

    /// `P(real | features)`.
    pub fn probability(&self, features: &Features) -> f64 {
        sigmoid(self.log_odds(features))
    }

    /// `ln(P(real | features) / P(corrupted | features))`.
    pub fn log_odds(&self, features: &Features) -> f64 {
        let row = self.design_row(features);
        self.bias
            + self
                .weights
                .iter()
                .zip(&row[1..])
                .map(|(w, x)| w * x)
                .sum::<f64>()
    }

    /// `[1, standardised features…]`.
    fn design_row(&self, features: &Features) -> [f64; FEATURES + 1] {
        let mut row = [1.0; FEATURES + 1];
        for k in 0..FEATURES {
            row[k + 1] = (finite(features[k]) - self.means[k]) / self.scales[k];
        }
        row
    }
}

/// The examples of `parts`, one part after another.
fn examples<'a>(parts: &'a [&'a [Example]]) -> impl Iterator<Item = &'a Example> {
    parts.iter().flat_map(|part| part.iter())
}

/// The examples with their standardised rows `[1, features…]`, the features not `used` at 0;
/// each row is computed as it is read, so that a fit holds no standardised copy of the
/// examples.
struct Design<'a> {
    parts: &'a [&'a [Example]],
    model: &'a LogisticModel,
    used: &'a [bool; FEATURES],
    /// Threads of the passes over the examples.
    threads: usize,
}

impl Design<'_> {
    fn rows(&self) -> impl Iterator<Item = ([f64; FEATURES + 1], &Example)> {
        examples(self.parts).map(|example| (self.row(example), example))
    }

    fn row(&self, example: &Example) -> [f64; FEATURES + 1] {
        let mut row = self.model.design_row(&example.features);
        for k in 0..FEATURES {
            if !self.used[k] {
                row[k + 1] = 0.0;
            }
        }
        row
    }

    /// `f` of every example's row, in the examples' order, on `threads` threads (each a
    /// contiguous share of the examples).
    fn each<R: Send>(&self, f: impl Fn(&[f64; FEATURES + 1], &Example) -> R + Sync) -> Vec<R> {
        let all: Vec<&Example> = examples(self.parts).collect();
        let share = all.len().div_ceil(self.threads.max(1)).max(1);
        let shares: Vec<&[&Example]> = all.chunks(share).collect();
        let mapped = parallel_map(&shares, |share| {
            (share.iter())
                .map(|example| f(&self.row(example), example))
                .collect::<Vec<R>>()
        });
        mapped.into_iter().flatten().collect()
    }
}

/// A feature that is not a finite number reads as 0 (none of the features should be one).
fn finite(x: f64) -> f64 {
    if x.is_finite() {
        x
    } else {
        0.0
    }
}

fn sigmoid(z: f64) -> f64 {
    if z >= 0.0 {
        1.0 / (1.0 + (-z).exp())
    } else {
        let e = z.exp();
        e / (1.0 + e)
    }
}

/// `ln(1 + e^z)`, without overflow.
fn softplus(z: f64) -> f64 {
    if z > 0.0 {
        z + (-z).exp().ln_1p()
    } else {
        z.exp().ln_1p()
    }
}

/// The weighted negative log-likelihood plus `L2 / 2 · |weights|²` (the bias is not
/// regularised).
fn objective(theta: &[f64; FEATURES + 1], design: &Design) -> f64 {
    // Each example's term on every core, summed in order.
    let terms = design.each(|row, example| {
        let z: f64 = theta.iter().zip(row).map(|(t, x)| t * x).sum();
        // -ln σ(z) for a real caption, -ln(1 - σ(z)) = -ln σ(-z) for a corrupted one.
        example.weight * softplus(if example.real { -z } else { z })
    });
    let mut loss = 0.0;
    for term in terms {
        loss += term;
    }
    loss + 0.5 * L2 * theta[1..].iter().map(|t| t * t).sum::<f64>()
}

type Matrix = [[f64; FEATURES + 1]; FEATURES + 1];

/// The rows of the gradient and the Hessian's lower triangle shared between `threads` threads
/// as `(from, to)` ranges of about as many entries each (row a holds a + 1).
fn row_shares(threads: usize) -> Vec<(usize, usize)> {
    let threads = threads.clamp(1, FEATURES + 1);
    let entries = (FEATURES + 1) * (FEATURES + 2) / 2;
    let mut starts = vec![0];
    let mut held = 0;
    for a in 0..=FEATURES {
        if held * threads >= entries * starts.len() {
            starts.push(a);
        }
        held += a + 1;
    }
    starts.push(FEATURES + 1);
    starts.windows(2).map(|w| (w[0], w[1])).collect()
}

fn derivatives(theta: &[f64; FEATURES + 1], design: &Design) -> ([f64; FEATURES + 1], Matrix) {
    // Each example's residual and curvature on every core; then the entries of the gradient
    // and the Hessian's lower triangle, by rows shared between threads, each entry summed
    // over the examples in order, as one thread summing them all would.
    let weights = design.each(|row, example| {
        let z: f64 = theta.iter().zip(row).map(|(t, x)| t * x).sum();
        let p = sigmoid(z);
        let residual = example.weight * (p - f64::from(u8::from(example.real)));
        let curvature = example.weight * p * (1.0 - p);
        (residual, curvature)
    });
    let mut gradient = [0.0; FEATURES + 1];
    let mut hessian = [[0.0; FEATURES + 1]; FEATURES + 1];
    let sums = |rows: Range<usize>| {
        let mut gradient = [0.0; FEATURES + 1];
        let mut hessian = [[0.0; FEATURES + 1]; FEATURES + 1];
        for ((row, _), &(residual, curvature)) in design.rows().zip(&weights) {
            for a in rows.clone() {
                gradient[a] += residual * row[a];
                for b in 0..=a {
                    hessian[a][b] += curvature * row[a] * row[b];
                }
            }
        }
        (gradient, hessian)
    };
    let shares = row_shares(design.threads);
    let parts = parallel_map(&shares, |(from, to)| sums(from..to));
    for (&(from, to), (part_gradient, part_hessian)) in shares.iter().zip(parts) {
        gradient[from..to].copy_from_slice(&part_gradient[from..to]);
        hessian[from..to].copy_from_slice(&part_hessian[from..to]);
    }
    for a in 1..=FEATURES {
        gradient[a] += L2 * theta[a];
        hessian[a][a] += L2;
    }
    // A small ridge on the bias too, so a single-class sample still has a solution.
    hessian[0][0] += 1e-9;
    // The upper triangle mirrors the lower one: row b's first b entries go to column b.
    for b in 1..=FEATURES {
        let (upper, lower) = hessian.split_at_mut(b);
        for (a, row) in upper.iter_mut().enumerate() {
            row[b] = lower[0][a];
        }
    }
    (gradient, hessian)
}

/// Solves `matrix · x = rhs` for a symmetric positive definite `matrix` (Cholesky); `None`
/// when it is not positive definite.
fn solve(matrix: Matrix, rhs: [f64; FEATURES + 1]) -> Option<[f64; FEATURES + 1]> {
    const N: usize = FEATURES + 1;
    let mut l = [[0.0; N]; N];
    for i in 0..N {
        for j in 0..=i {
            let sum: f64 = (0..j).map(|k| l[i][k] * l[j][k]).sum();
            if i == j {
                let d = matrix[i][i] - sum;
                if d <= 0.0 || !d.is_finite() {
                    return None;
                }
                l[i][i] = d.sqrt();
            } else {
                l[i][j] = (matrix[i][j] - sum) / l[j][j];
            }
        }
    }
    let mut y = [0.0; N];
    for i in 0..N {
        let sum: f64 = (0..i).map(|k| l[i][k] * y[k]).sum();
        y[i] = (rhs[i] - sum) / l[i][i];
    }
    let mut x = [0.0; N];
    for i in (0..N).rev() {
        let sum: f64 = (i + 1..N).map(|k| l[k][i] * x[k]).sum();
        x[i] = (y[i] - sum) / l[i][i];
    }
    Some(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn example(x: f64, real: bool) -> Example {
        let mut features = [0.0; FEATURES];
        features[0] = x;
        Example {
            features,
            real,
            weight: 1.0,
        }
    }

    #[test]
    fn a_weight_against_its_feature_direction_is_left_out() {
        // Feature 0 is evidence of a real caption; here the corrupted ones have the higher
        // values, so an unconstrained fit would weigh it negatively.
        let examples: Vec<Example> = (0..20).map(|i| example(f64::from(i), i < 10)).collect();
        let model = LogisticModel::fit(&[&examples]);
        assert_eq!(model.weights[0], 0.0);
        assert_eq!(model.probability(&example(3.0, true).features), 0.5);
    }

    #[test]
    fn balanced_overlapping_classes_put_the_boundary_between_them() {
        // Real at 1, 2, 3 (and one at -1); corrupted at -1, -2, -3 (and one at 1): symmetric
        // about 0, so the model says 0.5 at 0 and is monotone in the feature.
        let mut examples = Vec::new();
        for x in [1.0, 2.0, 3.0, -1.0] {
            examples.push(example(x, true));
        }
        for x in [-1.0, -2.0, -3.0, 1.0] {
            examples.push(example(x, false));
        }
        let model = LogisticModel::fit(&[&examples]);
        let p = |x: f64| model.probability(&example(x, true).features);
        assert!((p(0.0) - 0.5).abs() < 1e-9, "{}", p(0.0));
        assert!(p(2.0) > 0.6 && p(-2.0) < 0.4, "{} {}", p(2.0), p(-2.0));
        assert!(p(3.0) > p(2.0) && p(2.0) > p(1.0));
        assert!((p(1.5) + p(-1.5) - 1.0).abs() < 1e-9);
    }

    #[test]
    fn gradient_vanishes_at_the_fit() {
        let examples: Vec<Example> = (0..40)
            .map(|i| {
                let x = ((i * 37 % 17) as f64) / 4.0 - 2.0;
                example(x, (i * 7 % 5) as f64 / 2.0 - 1.0 < x)
            })
            .collect();
        let model = LogisticModel::fit(&[&examples]);
        let mut theta = [0.0; FEATURES + 1];
        theta[0] = model.bias;
        theta[1..].copy_from_slice(&model.weights);
        let design = Design {
            parts: &[&examples],
            model: &model,
            used: &[true; FEATURES],
            threads: 3,
        };
        let (gradient, _) = derivatives(&theta, &design);
        assert!(gradient.iter().all(|g| g.abs() < 1e-8), "{gradient:?}");
    }

    #[test]
    fn the_passes_over_the_examples_sum_as_one_thread_does() {
        let examples: Vec<Example> = (0..301)
            .map(|i| example(((i * 37 % 101) as f64) / 9.0 - 5.0, i % 3 == 0))
            .collect();
        let model = LogisticModel::fit(&[&examples]);
        let mut theta = [0.1; FEATURES + 1];
        theta[0] = model.bias;
        let parts = [&examples[..150], &examples[150..]];
        let design = |threads| Design {
            parts: &parts,
            model: &model,
            used: &[true; FEATURES],
            threads,
        };
        let one = (
            derivatives(&theta, &design(1)),
            objective(&theta, &design(1)),
        );
        for threads in [2, 3, 7, 64] {
            let many = (
                derivatives(&theta, &design(threads)),
                objective(&theta, &design(threads)),
            );
            assert_eq!(many, one, "{threads} threads");
        }
    }

    #[test]
    fn cholesky_solves_a_known_system() {
        let mut m = [[0.0; FEATURES + 1]; FEATURES + 1];
        let mut rhs = [0.0; FEATURES + 1];
        for i in 0..=FEATURES {
            m[i][i] = 2.0;
            rhs[i] = 2.0 * (i as f64);
        }
        m[0][1] = 1.0;
        m[1][0] = 1.0;
        // [[2,1],[1,2]] x = [0, 2] → x = [-2/3, 4/3].
        let x = solve(m, rhs).unwrap();
        assert!((x[0] + 2.0 / 3.0).abs() < 1e-12 && (x[1] - 4.0 / 3.0).abs() < 1e-12);
        assert!((x[5] - 5.0).abs() < 1e-12);
    }
}
