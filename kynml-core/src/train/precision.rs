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
//!
//! TF32 is not a storage type but a way NVIDIA tensor cores multiply fp32
//! numbers (a 10-bit mantissa, fp32 accumulation). CubeCL 0.10, whose
//! kernels Burn 0.21 runs on CUDA, multiplies large f32 products that way on
//! compute capability 8.0 and newer, with no switch for strict fp32
//! products (cubek-matmul's `adjust_dtypes`), so on such a GPU the plan
//! says TF32 runs whether the spec says `fp32` or `tf32`.

use burn::tensor::FloatDType;
use kynml_backend::{Device, DeviceKind};

use crate::spec::types::{LossScale, Precision, TrainSpec};

/// The precision of the dense layers' matrix products.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compute {
    /// fp32 products: no reduced precision.
    Fp32,
    /// fp32 storage, products on TF32 tensor cores (CUDA, compute capability 8.0 or newer).
    Tf32,
    /// bfloat16 products: fp32's exponent range with a shorter mantissa.
    Bf16,
    /// IEEE half-precision products: a narrow exponent range, so loss scaling is on by default.
    Fp16,
}

impl Compute {
    /// The reduced storage type of the products' inputs, `None` for fp32
    /// and tf32 (whose inputs stay fp32).
    pub fn half(self) -> Option<FloatDType> {
        match self {
            Compute::Fp32 | Compute::Tf32 => None,
            Compute::Bf16 => Some(FloatDType::BF16),
            Compute::Fp16 => Some(FloatDType::F16),
        }
    }

    /// The name as the spec writes it: `fp32`, `tf32`, `bf16` or `fp16`.
    pub fn name(self) -> &'static str {
        match self {
            Compute::Fp32 => "fp32",
            Compute::Tf32 => "tf32",
            Compute::Bf16 => "bf16",
            Compute::Fp16 => "fp16",
        }
    }

    /// The products a spec's `precision` asks for, before any device says
    /// what it runs.
    pub fn of(p: Precision) -> Self {
        match p {
            Precision::Fp32 => Compute::Fp32,
            Precision::Bf16 => Compute::Bf16,
            Precision::Fp16 => Compute::Fp16,
            Precision::Tf32 => Compute::Tf32,
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
    /// Set when the spec asked for a precision this device does not run:
    /// why, and what runs instead (`compute`).
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
    let (compute, fallback) = resolve(Compute::of(train.precision.value), device);
    PrecisionPlan { compute, scaler: scaler_for(compute, train.loss_scale.value), fallback }
}

/// What runs on `device` when `wanted` is asked for, and why it differs.
fn resolve(wanted: Compute, device: &Device) -> (Compute, Option<String>) {
    // Compute capability 8.0 (Ampere) brought TF32 and bf16 tensor cores.
    let ampere = |gpu: &kynml_backend::CudaGpu| gpu.compute_capability.0 >= 8;
    match (wanted, &device.kind) {
        (Compute::Fp32, DeviceKind::Cuda(gpu)) if ampere(gpu) => (
            Compute::Tf32,
            Some(
                "fp32 requested, but Burn's CUDA kernels (CubeCL 0.10) run large fp32 products on TF32 \
                 tensor cores on this GPU and have no switch for strict fp32 products"
                    .into(),
            ),
        ),
        (Compute::Fp32, _) => (Compute::Fp32, None),
        (Compute::Tf32, DeviceKind::Cuda(gpu)) if !ampere(gpu) => (
            Compute::Fp32,
            Some(format!(
                "tf32 requested, but TF32 tensor cores need compute capability 8.0 or newer and this GPU has {}.{}",
                gpu.compute_capability.0, gpu.compute_capability.1
            )),
        ),
        (Compute::Tf32, DeviceKind::Cuda(_)) => (Compute::Tf32, None),
        (Compute::Tf32, DeviceKind::Cpu { .. }) => {
            (Compute::Fp32, Some("tf32 requested, but TF32 is a format of NVIDIA tensor cores, not of CPUs".into()))
        }
        (Compute::Tf32, DeviceKind::Wgpu(_)) => {
            (Compute::Fp32, Some("tf32 requested, but wgpu shaders have no TF32 products".into()))
        }
        (_, DeviceKind::Cpu { .. }) => (
            Compute::Fp32,
            Some(format!(
                "{} requested, but the CPU trains in fp32 only: KynML's native engine has fp32 kernels alone, and \
                 Burn's flex backend (which a data-parallel CPU run steps on) runs bf16 and fp16 at 0.74-0.77x \
                 its own fp32, several times slower than the native engine's fp32 (BENCHMARKS.md)",
                wanted.name()
            )),
        ),
        (Compute::Bf16, DeviceKind::Cuda(gpu)) if !ampere(gpu) => (
            Compute::Fp32,
            Some(format!(
                "bf16 requested, but it needs compute capability 8.0 or newer and this GPU has {}.{}; \
                 fp16 (precision = fp16) runs here",
                gpu.compute_capability.0, gpu.compute_capability.1
            )),
        ),
        (Compute::Bf16, DeviceKind::Wgpu(_)) => (
            Compute::Fp32,
            Some(
                "bf16 requested, but wgpu shaders (WGSL) have no bf16 type; fp16 runs where the adapter has f16".into(),
            ),
        ),
        (Compute::Fp16, DeviceKind::Wgpu(adapter)) if !adapter.shader_f16 => (
            Compute::Fp32,
            Some(format!("fp16 requested, but the adapter `{}` has no f16 shader support", adapter.name)),
        ),
        _ => (wanted, None),
    }
}

/// Whether `device` runs `compute`'s products as such (the rule of [`plan`],
/// which a profile's verdict reads before it advises a precision).
pub fn runs_on(compute: Compute, device: &Device) -> bool {
    resolve(compute, device).0 == compute
}

fn scaler_for(compute: Compute, scale: LossScale) -> Option<ScalerConfig> {
    match (scale, compute) {
        (_, Compute::Fp32 | Compute::Tf32) | (LossScale::None, _) => None,
        (LossScale::Auto, Compute::Fp16) => Some(ScalerConfig::default()),
        (LossScale::Auto, _) => None,
        (LossScale::Dynamic { init, growth, interval, backoff }, _) => {
            Some(ScalerConfig { init, growth, backoff, interval })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kynml_backend::{CudaGpu, WgpuAdapter, WgpuAdapterKind};

    fn train(precision: &str) -> TrainSpec {
        let text = format!(
            "dataset D:\n    source = csv(\"d.csv\")\n    target = \"y\"\nmodel M:\n    input 2\n    dense 1 linear\n\
             train:\n    model = M\n    data = D\n    loss = mse\n    optimizer = adam(lr=0.01)\n    epochs = 1\n    precision = {precision}\n"
        );
        crate::spec::parse_spec(&text).expect("a valid spec").train
    }

    fn gpu(major: u32) -> Device {
        Device::described(DeviceKind::Cuda(CudaGpu {
            index: 0,
            name: "test GPU".into(),
            compute_capability: (major, 0),
            memory_bytes: 1 << 34,
            pci_bus_id: String::new(),
        }))
    }

    fn lavapipe() -> Device {
        Device::described(DeviceKind::Wgpu(WgpuAdapter {
            name: "llvmpipe".into(),
            driver: "mesa".into(),
            kind: WgpuAdapterKind::Cpu,
            index_of_kind: 0,
            shader_f16: true,
        }))
    }

    #[test]
    fn tf32_runs_on_ampere_and_newer_and_says_what_runs_elsewhere() {
        let p = plan(&train("tf32"), &gpu(9));
        assert_eq!((p.compute, p.fallback, p.scaler), (Compute::Tf32, None, None));
        for (device, says) in [(gpu(7), "8.0 or newer"), (Device::cpu(), "not of CPUs"), (lavapipe(), "wgpu")] {
            let p = plan(&train("tf32"), &device);
            assert_eq!(p.compute, Compute::Fp32);
            assert!(p.fallback.as_deref().is_some_and(|f| f.contains(says)), "{:?}", p.fallback);
        }
    }

    #[test]
    fn fp32_on_a_tensor_core_gpu_is_reported_as_the_tf32_it_runs() {
        let p = plan(&train("fp32"), &gpu(8));
        assert_eq!(p.compute, Compute::Tf32);
        assert!(p.fallback.as_deref().is_some_and(|f| f.contains("no switch for strict fp32")));
        let p = plan(&train("fp32"), &gpu(7));
        assert_eq!((p.compute, p.fallback), (Compute::Fp32, None));
        assert_eq!(plan(&train("fp32"), &Device::cpu()).fallback, None);
        assert_eq!(plan(&train("fp32"), &lavapipe()).fallback, None);
    }

    #[test]
    fn half_precisions_keep_their_rules() {
        let p = plan(&train("fp16"), &gpu(9));
        assert_eq!((p.compute, p.scaler), (Compute::Fp16, Some(ScalerConfig::default())));
        assert_eq!(plan(&train("bf16"), &gpu(7)).compute, Compute::Fp32);
        assert_eq!(plan(&train("bf16"), &lavapipe()).compute, Compute::Fp32);
        assert_eq!(plan(&train("fp16"), &lavapipe()).compute, Compute::Fp16);
        assert_eq!(plan(&train("bf16"), &Device::cpu()).compute, Compute::Fp32);
        assert_eq!(Compute::Tf32.half(), None);
    }

    #[test]
    fn runs_on_follows_the_plan() {
        let cases =
            [(gpu(9), true, true), (gpu(7), false, true), (lavapipe(), false, true), (Device::cpu(), false, false)];
        for (device, bf16, fp16) in cases {
            assert_eq!(runs_on(Compute::Bf16, &device), bf16, "{device:?}");
            assert_eq!(runs_on(Compute::Fp16, &device), fp16, "{device:?}");
            for (c, name) in [(Compute::Bf16, "bf16"), (Compute::Fp16, "fp16")] {
                assert_eq!(runs_on(c, &device), plan(&train(name), &device).compute == c);
            }
        }
    }
}
