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

use tch::Tensor;

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

/// The gradients of one step: every parameter's, flat in the order of [`Parameters::flat`].
pub struct Gradients {
    flat: Tensor,
}

impl Gradients {
    /// The gradients of `loss` with respect to every parameter (not accumulated into the
    /// parameters' `.grad`). A parameter the loss does not depend on gets zeros.
    pub fn of(loss: &Tensor, parameters: &Parameters) -> Gradients {
        Gradients::of_into(loss, parameters, None)
    }

    /// [`Gradients::of`], written into `buffer` when given (the flat tensor of an earlier
    /// step's gradients, [`Gradients::into_flat`]), so that a training loop does not allocate
    /// one the size of the model at every step.
    pub fn of_into(loss: &Tensor, parameters: &Parameters, buffer: Option<Tensor>) -> Gradients {
        let grads = Tensor::run_backward(&[loss], &parameters.tensors, false, false);
        let pieces: Vec<Tensor> = parameters
            .flat_order
            .iter()
            .map(|&k| {
                if grads[k].defined() {
                    grads[k].reshape([-1])
                } else {
                    parameters.tensors[k].zeros_like().reshape([-1])
                }
            })
            .collect();
        let flat = match buffer {
            Some(buffer) => {
                let _ = Tensor::cat_out(&buffer, &pieces, 0);
                buffer
            }
            None => Tensor::cat(&pieces, 0),
        };
        Gradients { flat }
    }

    /// The flat gradients, to be written over by the next step ([`Gradients::of_into`]).
    pub fn into_flat(self) -> Tensor {
        self.flat
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
    /// Elements at the head of the flat tensors that weight decay applies to.
    decayed: i64,
    /// Working tensors the size of the parameters, kept from step to step: the scaled
    /// gradients or moments, and the update's denominator.
    scratch: Tensor,
    denom: Tensor,
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
            parameters
                .tensors
                .iter()
                .zip(&parameters.offsets)
                .map(|(p, &offset)| {
                    of.narrow(0, offset, p.numel() as i64)
                        .view(p.size().as_slice())
                })
                .collect::<Vec<_>>()
        };
        AdamW {
            config: config.clone(),
            exp_avg: views(&flat_avg),
            exp_avg_sq: views(&flat_avg_sq),
            flat_avg,
            flat_avg_sq,
            decayed: parameters.decayed,
            scratch: flat.zeros_like(),
            denom: flat.zeros_like(),
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
        // In place, or into the working tensors: a step allocates nothing the size of the
        // model (`addcmul_` and `addcdiv_` take no scale here, so the scaled operand goes
        // through `scratch`).
        tch::no_grad(|| {
            if c.weight_decay > 0.0 && self.decayed > 0 {
                let _ = p
                    .narrow(0, 0, self.decayed)
                    .g_mul_scalar_(1.0 - lr * c.weight_decay);
            }
            let _ = self.flat_avg.lerp_(g, 1.0 - c.beta1);
            let _ = self.flat_avg_sq.g_mul_scalar_(c.beta2);
            let _ = g.mul_scalar_out(&self.scratch, 1.0 - c.beta2);
            let _ = self.flat_avg_sq.addcmul_(g, &self.scratch);
            let _ = self.flat_avg_sq.sqrt_out(&self.denom);
            let _ = self.denom.g_div_scalar_(bias2_sqrt);
            let _ = self.denom.g_add_scalar_(c.eps);
            let _ = self.flat_avg.mul_scalar_out(&self.scratch, -step_size);
            let _ = p.addcdiv_(&self.scratch, &self.denom);
        });
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use tch::Kind;

    /// One step by hand: loss = Σ w·x + Σ b + Σ c·y over a decayed matrix `w`, an undecayed
    /// bias `b` and a decayed vector `c` created after it (so the flat layout puts `c` before
    /// `b`), so the gradients are `x`, 1 and `y`. With clipping off, the first AdamW step moves
    /// every element by `lr · g / (|g| + ε)` (m̂ = g, v̂ = g²) after decaying `w` and `c` by
    /// `1 − lr·wd`; values worked out below, independently of the flat layout.
    #[test]
    fn one_flat_step_is_adamw_by_hand() {
        let mut parameters = Parameters::default();
        let w = Tensor::from_slice(&[0.5f32, -1.0, 2.0, 0.25])
            .reshape([2, 2])
            .set_requires_grad(true);
        let b = Tensor::from_slice(&[0.1f32, -0.2]).set_requires_grad(true);
        let c = Tensor::from_slice(&[1.0f32, -1.0]).set_requires_grad(true);
        parameters.names = vec!["w".into(), "b".into(), "c".into()];
        parameters.tensors = vec![w.shallow_clone(), b.shallow_clone(), c.shallow_clone()];
        parameters.decay = vec![true, false, true];
        parameters.flatten();
        assert_eq!(parameters.offsets, [0, 6, 4]);
        assert_eq!(parameters.decayed, 6);
        let x = Tensor::from_slice(&[3.0f32, -4.0, 0.0, 1e-3]).reshape([2, 2]);
        let y = Tensor::from_slice(&[2.0f32, 0.5]);
        let loss = (&w * &x).sum(Kind::Float) + b.sum(Kind::Float) + (&c * &y).sum(Kind::Float);
        let mut gradients = Gradients::of(&loss, &parameters);
        // ‖g‖ = √(9 + 16 + 0 + 1e-6 + 1 + 1 + 4 + 0.25).
        let norm = gradients.clip_norm(0.0);
        assert!((norm - (31.250001f64).sqrt()).abs() < 1e-5, "{norm}");
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
        let got: Vec<f32> = Vec::<f32>::try_from(&c).unwrap();
        assert!(
            (got[0] as f64 - (decayed(1.0) - moved(2.0))).abs() < 1e-6,
            "{got:?}"
        );
        assert!(
            (got[1] as f64 - (decayed(-1.0) - moved(0.5))).abs() < 1e-6,
            "{got:?}"
        );
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
