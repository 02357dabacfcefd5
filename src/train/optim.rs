//! AdamW (Loshchilov & Hutter) with linear warm-up and cosine decay, and global-norm gradient
//! clipping, written out on tensors so that the optimizer state is plain named tensors that
//! checkpoints save and restore exactly.
//!
//! The update is PyTorch's `torch.optim.AdamW` (`amsgrad=False`):
//! `p ← p·(1 − lr·wd)`, `m ← β1·m + (1 − β1)·g`, `v ← β2·v + (1 − β2)·g²`,
//! `p ← p − lr/(1 − β1^t) · m / (√v / √(1 − β2^t) + ε)`.
//!
//! The parameters live in one flat tensor ([`Parameters::flat`]) and so do the moments (each
//! parameter's moments are views of their slice): a step is a dozen kernels over the flat
//! tensors, whatever the number of parameters, as PyTorch's `foreach` path. Kernel launches,
//! not arithmetic, bound the step of a model this size on a GPU.

use tch::{Kind, Tensor};

use super::config::OptimizerConfig;
use super::model::Parameters;

/// The learning rate at `step` (0-based) of a run of `total` steps: linear warm-up from
/// `lr / warmup` to `lr` over the first `warmup` steps, then a cosine down to
/// `lr · min_lr_fraction` at the last step.
pub fn learning_rate(config: &OptimizerConfig, step: u64, total: u64) -> f64 {
    let warmup = config.warmup_steps;
    if warmup > 0 && step < warmup {
        return config.lr * (step + 1) as f64 / warmup as f64;
    }
    let decay_steps = total.saturating_sub(warmup).max(1);
    let progress = ((step - warmup.min(step)) as f64 / decay_steps as f64).min(1.0);
    let floor = config.lr * config.min_lr_fraction;
    floor + (config.lr - floor) * 0.5 * (1.0 + (std::f64::consts::PI * progress).cos())
}

/// The gradients of one step: every parameter's, flat in the parameters' order.
pub struct Gradients {
    flat: Tensor,
}

impl Gradients {
    /// The gradients of `loss` with respect to every parameter (not accumulated into the
    /// parameters' `.grad`). A parameter the loss does not depend on gets zeros.
    pub fn of(loss: &Tensor, parameters: &Parameters) -> Gradients {
        let grads = Tensor::run_backward(&[loss], &parameters.tensors, false, false);
        let pieces: Vec<Tensor> = grads
            .iter()
            .zip(&parameters.tensors)
            .map(|(g, p)| {
                if g.defined() {
                    g.reshape([-1])
                } else {
                    p.zeros_like().reshape([-1])
                }
            })
            .collect();
        Gradients {
            flat: Tensor::cat(&pieces, 0),
        }
    }

    /// Scales the gradients so that their global L2 norm is at most `max_norm`; returns the
    /// norm before clipping (as `torch.nn.utils.clip_grad_norm_`, with its `1e-6` guard).
    pub fn clip_norm(&mut self, max_norm: f64) -> f64 {
        tch::no_grad(|| {
            let total = self.flat.norm();
            if max_norm > 0.0 {
                let coefficient = (max_norm / (&total + 1e-6)).clamp_max(1.0);
                let _ = self.flat.g_mul_(&coefficient);
            }
            total.double_value(&[])
        })
    }
}

/// AdamW state: first and second moments per parameter, and the step count.
#[derive(Debug)]
pub struct AdamW {
    pub config: OptimizerConfig,
    /// Each parameter's moments: views of `flat_avg` and `flat_avg_sq`.
    pub exp_avg: Vec<Tensor>,
    pub exp_avg_sq: Vec<Tensor>,
    flat_avg: Tensor,
    flat_avg_sq: Tensor,
    /// 1 where weight decay applies, 0 elsewhere, flat like the parameters.
    decay: Tensor,
    /// Updates taken so far (the `t` of the bias corrections).
    pub step: u64,
}

impl AdamW {
    pub fn new(config: &OptimizerConfig, parameters: &Parameters) -> AdamW {
        let flat = parameters
            .flat
            .as_ref()
            .expect("a model's parameters are flattened when it is built");
        let flat_avg = flat.zeros_like();
        let flat_avg_sq = flat.zeros_like();
        let views = |of: &Tensor| {
            let mut offset = 0;
            parameters
                .tensors
                .iter()
                .map(|p| {
                    let n = p.numel() as i64;
                    let view = of.narrow(0, offset, n).view(p.size().as_slice());
                    offset += n;
                    view
                })
                .collect::<Vec<_>>()
        };
        let decay_pieces: Vec<Tensor> = parameters
            .tensors
            .iter()
            .zip(&parameters.decay)
            .map(|(p, &decay)| {
                Tensor::full(
                    [p.numel() as i64],
                    if decay { 1.0 } else { 0.0 },
                    (Kind::Float, p.device()),
                )
            })
            .collect();
        AdamW {
            config: config.clone(),
            exp_avg: views(&flat_avg),
            exp_avg_sq: views(&flat_avg_sq),
            flat_avg,
            flat_avg_sq,
            decay: Tensor::cat(&decay_pieces, 0),
            step: 0,
        }
    }

    /// One update of every parameter by `gradients`, with learning rate `lr`.
    pub fn step(&mut self, parameters: &mut Parameters, gradients: &Gradients, lr: f64) {
        self.step += 1;
        let c = &self.config;
        let t = self.step as i32;
        let bias1 = 1.0 - c.beta1.powi(t);
        let bias2_sqrt = (1.0 - c.beta2.powi(t)).sqrt();
        let step_size = lr / bias1;
        let Some(p) = parameters.flat.as_mut() else {
            return;
        };
        let g = &gradients.flat;
        tch::no_grad(|| {
            if c.weight_decay > 0.0 {
                let _ = p.g_mul_(&(self.decay.g_mul_scalar(-lr * c.weight_decay) + 1.0));
            }
            let _ = self.flat_avg.lerp_(g, 1.0 - c.beta1);
            let _ = self.flat_avg_sq.g_mul_scalar_(c.beta2);
            let _ = self.flat_avg_sq.addcmul_(g, &g.g_mul_scalar(1.0 - c.beta2));
            let denom = (self.flat_avg_sq.sqrt() / bias2_sqrt).g_add_scalar(c.eps);
            let _ = p.addcdiv_(&(&self.flat_avg * -step_size), &denom);
        });
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    /// One step by hand: loss = Σ w·x over a decayed matrix `w` and an undecayed bias `b`
    /// (loss = Σ w·x + Σ b), so the gradients are `x` and 1. With clipping off, the first AdamW
    /// step moves every element by `lr · g / (|g| + ε)` (m̂ = g, v̂ = g²) after decaying `w` by
    /// `1 − lr·wd`; values worked out below, independently of the flat layout.
    #[test]
    fn one_flat_step_is_adamw_by_hand() {
        let mut parameters = Parameters::default();
        let w = Tensor::from_slice(&[0.5f32, -1.0, 2.0, 0.25])
            .reshape([2, 2])
            .set_requires_grad(true);
        let b = Tensor::from_slice(&[0.1f32, -0.2]).set_requires_grad(true);
        parameters.names = vec!["w".into(), "b".into()];
        parameters.tensors = vec![w.shallow_clone(), b.shallow_clone()];
        parameters.decay = vec![true, false];
        parameters.flatten();
        let x = Tensor::from_slice(&[3.0f32, -4.0, 0.0, 1e-3]).reshape([2, 2]);
        let loss = (&w * &x).sum(Kind::Float) + b.sum(Kind::Float);
        let mut gradients = Gradients::of(&loss, &parameters);
        // ‖g‖ = √(9 + 16 + 0 + 1e-6 + 1 + 1).
        let norm = gradients.clip_norm(0.0);
        assert!((norm - (27.000001f64).sqrt()).abs() < 1e-5, "{norm}");
        let config = OptimizerConfig {
            weight_decay: 0.1,
            eps: 1e-8,
            ..OptimizerConfig::default()
        };
        let mut adamw = AdamW::new(&config, &parameters);
        let lr = 0.01;
        adamw.step(&mut parameters, &gradients, lr);
        let got: Vec<f32> = Vec::<f32>::try_from(w.reshape([-1])).unwrap();
        let decayed = |v: f64| v * (1.0 - lr * 0.1);
        let moved = |g: f64| {
            if g == 0.0 {
                0.0
            } else {
                lr * g / (g.abs() + 1e-8)
            }
        };
        let want = [
            decayed(0.5) - moved(3.0),
            decayed(-1.0) - moved(-4.0),
            decayed(2.0) - moved(0.0),
            decayed(0.25) - moved(1e-3),
        ];
        for (g, w) in got.iter().zip(want) {
            assert!((*g as f64 - w).abs() < 1e-6, "{got:?} vs {want:?}");
        }
        let got: Vec<f32> = Vec::<f32>::try_from(&b).unwrap();
        assert!((got[0] as f64 - (0.1 - lr)).abs() < 1e-6, "{got:?}");
        assert!((got[1] as f64 - (-0.2 - lr)).abs() < 1e-6, "{got:?}");
        // The moments are views of the flat state: m = (1 − β1)·g after one step.
        let m: Vec<f32> = Vec::<f32>::try_from(&adamw.exp_avg[1]).unwrap();
        assert!((m[0] as f64 - (1.0 - config.beta1)).abs() < 1e-6, "{m:?}");
    }

    #[test]
    fn warmup_then_cosine() {
        let c = OptimizerConfig {
            lr: 1.0,
            warmup_steps: 10,
            min_lr_fraction: 0.0,
            ..OptimizerConfig::default()
        };
        assert!((learning_rate(&c, 0, 110) - 0.1).abs() < 1e-12);
        assert!((learning_rate(&c, 9, 110) - 1.0).abs() < 1e-12);
        assert!((learning_rate(&c, 10, 110) - 1.0).abs() < 1e-12);
        // Half way through the decay: cos(π/2) = 0, lr = 0.5.
        assert!((learning_rate(&c, 60, 110) - 0.5).abs() < 1e-12);
        assert!(learning_rate(&c, 110, 110).abs() < 1e-12);
    }
}
