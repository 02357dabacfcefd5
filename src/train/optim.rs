//! AdamW (Loshchilov & Hutter) with linear warm-up and cosine decay, and global-norm gradient
//! clipping, written out on tensors so that the optimizer state is plain named tensors that
//! checkpoints save and restore exactly.
//!
//! The update is PyTorch's `torch.optim.AdamW` (single-tensor path, `amsgrad=False`):
//! `p ← p·(1 − lr·wd)`, `m ← β1·m + (1 − β1)·g`, `v ← β2·v + (1 − β2)·g²`,
//! `p ← p − lr/(1 − β1^t) · m / (√v / √(1 − β2^t) + ε)`.

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

/// AdamW state: first and second moments per parameter, and the step count.
#[derive(Debug)]
pub struct AdamW {
    pub config: OptimizerConfig,
    pub exp_avg: Vec<Tensor>,
    pub exp_avg_sq: Vec<Tensor>,
    /// Updates taken so far (the `t` of the bias corrections).
    pub step: u64,
}

impl AdamW {
    pub fn new(config: &OptimizerConfig, parameters: &Parameters) -> AdamW {
        AdamW {
            config: config.clone(),
            exp_avg: parameters.tensors.iter().map(Tensor::zeros_like).collect(),
            exp_avg_sq: parameters.tensors.iter().map(Tensor::zeros_like).collect(),
            step: 0,
        }
    }

    /// Clears every gradient.
    pub fn zero_grad(&self, parameters: &mut Parameters) {
        for p in &mut parameters.tensors {
            p.zero_grad();
        }
    }

    /// Scales the gradients so that their global L2 norm is at most `max_norm`; returns the norm
    /// before clipping (as `torch.nn.utils.clip_grad_norm_`, with its `1e-6` guard).
    pub fn clip_grad_norm(&self, parameters: &Parameters, max_norm: f64) -> f64 {
        tch::no_grad(|| {
            let grads: Vec<Tensor> = parameters
                .tensors
                .iter()
                .map(Tensor::grad)
                .filter(Tensor::defined)
                .collect();
            if grads.is_empty() {
                return 0.0;
            }
            let norms: Vec<Tensor> = grads.iter().map(|g| g.norm()).collect();
            let total = Tensor::stack(&norms, 0).norm();
            if max_norm > 0.0 {
                let coefficient = (max_norm / (&total + 1e-6)).clamp_max(1.0);
                for mut g in grads {
                    let _ = g.g_mul_(&coefficient);
                }
            }
            total.double_value(&[])
        })
    }

    /// One update with learning rate `lr`.
    pub fn step(&mut self, parameters: &mut Parameters, lr: f64) {
        self.step += 1;
        let c = &self.config;
        let t = self.step as i32;
        let bias1 = 1.0 - c.beta1.powi(t);
        let bias2_sqrt = (1.0 - c.beta2.powi(t)).sqrt();
        let step_size = lr / bias1;
        tch::no_grad(|| {
            for (k, p) in parameters.tensors.iter_mut().enumerate() {
                let grad = p.grad();
                if !grad.defined() {
                    continue;
                }
                if parameters.decay[k] && c.weight_decay > 0.0 {
                    let _ = p.g_mul_scalar_(1.0 - lr * c.weight_decay);
                }
                let m = &mut self.exp_avg[k];
                let _ = m.lerp_(&grad, 1.0 - c.beta1);
                let v = &mut self.exp_avg_sq[k];
                let _ = v.g_mul_scalar_(c.beta2);
                let _ = v.addcmul_(&grad, &grad.g_mul_scalar(1.0 - c.beta2));
                let denom = (v.sqrt() / bias2_sqrt).g_add_scalar(c.eps);
                let _ = p.addcdiv_(&(&*m * -step_size), &denom);
            }
        });
    }

    /// Moves the state to the parameters' kind (always f32 here) — kept for checkpoints that
    /// come from another device.
    pub fn to_device(&mut self, device: tch::Device) {
        for t in self.exp_avg.iter_mut().chain(self.exp_avg_sq.iter_mut()) {
            *t = t.to_device(device).to_kind(Kind::Float);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
