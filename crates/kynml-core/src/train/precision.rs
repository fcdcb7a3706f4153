//! Mixed precision: which precision the heavy work runs in, decided per
//! device, and said plainly when it is not what the spec asked for.
//!
//! The policy, in one place:
//! - master weights, optimizer state and the update stay fp32;
//! - the dense layers' matrix products (forward, and through autodiff the
//!   backward) run in bf16 or fp16: inputs and weights are cast down, the
//!   product is cast back to fp32 ([`Dense::forward`](crate::model::Dense));
//! - everything numerically sensitive stays fp32: biases and activations,
//!   batchnorm and layernorm statistics, softmax, losses, reductions.
//!
//! fp16 has a narrow exponent range, so small gradients underflow to zero on
//! their way back through the fp16 products; dynamic loss scaling
//! ([`LossScaler`](super::loss_scale::LossScaler)) is on by default for it.
//! bf16 has fp32's exponent range, so it needs no scaling and runs without
//! it by default (as PyTorch's autocast does).

use burn::tensor::FloatDType;
use kynml_backend::{Device, DeviceKind};

use crate::spec::types::{LossScale, Precision, TrainSpec};

/// The precision of the dense layers' matrix products.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compute {
    /// fp32 products: no reduced precision.
    Fp32,
    /// bfloat16 products: fp32's exponent range with a shorter mantissa.
    Bf16,
    /// IEEE half-precision products: a narrow exponent range, so loss scaling is on by default.
    Fp16,
}

impl Compute {
    /// The reduced type, `None` for fp32.
    pub fn half(self) -> Option<FloatDType> {
        match self {
            Compute::Fp32 => None,
            Compute::Bf16 => Some(FloatDType::BF16),
            Compute::Fp16 => Some(FloatDType::F16),
        }
    }

    /// The name as the spec writes it: `fp32`, `bf16` or `fp16`.
    pub fn name(self) -> &'static str {
        match self {
            Compute::Fp32 => "fp32",
            Compute::Bf16 => "bf16",
            Compute::Fp16 => "fp16",
        }
    }

    fn of(p: Precision) -> Self {
        match p {
            Precision::Fp32 => Compute::Fp32,
            Precision::Bf16 => Compute::Bf16,
            Precision::Fp16 => Compute::Fp16,
        }
    }
}

/// Dynamic loss scaling settings (PyTorch's `GradScaler` defaults).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScalerConfig {
    /// The scale to start from, > 0 (65536 by default).
    pub init: f64,
    /// The factor the scale grows by after `interval` finite steps in a row, > 0 (2.0 by default).
    pub growth: f64,
    /// The factor the scale is cut by after an overflow, in (0, 1) (0.5 by default).
    pub backoff: f64,
    /// Finite steps in a row before the scale grows, >= 1 (2000 by default).
    pub interval: usize,
}

impl Default for ScalerConfig {
    fn default() -> Self {
        ScalerConfig { init: 65536.0, growth: 2.0, backoff: 0.5, interval: 2000 }
    }
}

/// What will run: the compute precision, the loss scaler, and why it
/// differs from the spec when it does.
#[derive(Debug, Clone, PartialEq)]
pub struct PrecisionPlan {
    /// The precision the dense layers' matrix products run in.
    pub compute: Compute,
    /// The loss scaling settings; `None` runs without loss scaling.
    pub scaler: Option<ScalerConfig>,
    /// Set when the spec asked for a precision this device does not run.
    pub fallback: Option<String>,
}

impl PrecisionPlan {
    /// Runs `compute` on any device (tests and benches compare precisions
    /// on the CPU, where the default plan would not use them).
    pub fn forced(compute: Compute, scale: LossScale) -> Self {
        PrecisionPlan { compute, scaler: scaler_for(compute, scale), fallback: None }
    }
}

/// The plan for `train` on `device`.
pub fn plan(train: &TrainSpec, device: &Device) -> PrecisionPlan {
    let wanted = Compute::of(train.precision.value);
    let fallback = match (wanted, &device.kind) {
        (Compute::Fp32, _) => None,
        (_, DeviceKind::Cpu { .. }) => Some(format!(
            "{} requested, but on the CPU reduced precision runs only on Burn's flex backend, \
             several times slower than the native engine's fp32 (BENCHMARKS.md)",
            wanted.name()
        )),
        (Compute::Bf16, DeviceKind::Cuda(gpu)) if gpu.compute_capability.0 < 8 => Some(format!(
            "bf16 requested, but it needs compute capability 8.0 or newer and this GPU has {}.{}; \
             fp16 (precision = fp16) runs here",
            gpu.compute_capability.0, gpu.compute_capability.1
        )),
        (Compute::Bf16, DeviceKind::Wgpu(_)) => Some(
            "bf16 requested, but wgpu shaders (WGSL) have no bf16 type; fp16 runs where the adapter has f16".into(),
        ),
        (Compute::Fp16, DeviceKind::Wgpu(adapter)) if !adapter.shader_f16 => {
            Some(format!("fp16 requested, but the adapter `{}` has no f16 shader support", adapter.name))
        }
        _ => None,
    };
    let compute = if fallback.is_some() { Compute::Fp32 } else { wanted };
    PrecisionPlan { compute, scaler: scaler_for(compute, train.loss_scale.value), fallback }
}

fn scaler_for(compute: Compute, scale: LossScale) -> Option<ScalerConfig> {
    match (scale, compute) {
        (_, Compute::Fp32) | (LossScale::None, _) => None,
        (LossScale::Auto, Compute::Fp16) => Some(ScalerConfig::default()),
        (LossScale::Auto, _) => None,
        (LossScale::Dynamic { init, growth, interval, backoff }, _) => {
            Some(ScalerConfig { init, growth, backoff, interval })
        }
    }
}
