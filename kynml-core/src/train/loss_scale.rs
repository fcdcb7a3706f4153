//! Dynamic loss scaling, as PyTorch's `GradScaler`: multiply the loss by a
//! large scale before the backward pass so that small gradients survive the
//! fp16 products, divide the gradients by it afterwards, and skip any step
//! whose gradients overflowed.
//!
//! After an overflow the scale is cut by `backoff`; after `interval` finite
//! steps in a row it grows by `growth`.

use burn::tensor::{Bool, Tensor};
use burn::DispatchDevice;
use kynml_backend::Backend as Kb;

use crate::evaluate::IntoScalarF64;
use crate::train::precision::ScalerConfig;
use crate::train::resume::ScaleState;

/// Dynamic loss scaling, its state kept on the device: the scale and the
/// run of finite steps change by a flag the device computed, so that no
/// step waits to read whether it overflowed.
#[derive(Clone)]
pub struct LossScaler {
    /// The factor the loss is multiplied by before the backward pass.
    scale: Tensor<Kb, 1>,
    /// Finite steps since the scale last changed.
    good_steps: Tensor<Kb, 1>,
    config: ScalerConfig,
}

impl LossScaler {
    /// A scaler with `config`'s settings on `device` (the autodiff device
    /// the loss is computed on), starting at `config.init` or at a
    /// checkpoint's `saved` state.
    pub fn new(config: &ScalerConfig, saved: Option<&ScaleState>, device: &DispatchDevice) -> Self {
        let (scale, good) = saved.map_or((config.init, 0), |s| (s.scale, s.good_steps));
        // Made on the autodiff device and taken off it, so that they carry
        // its marks (Burn's dispatch refuses to mix tensors that differ).
        let value = |x: f64| Tensor::<Kb, 1>::from_floats([x as f32], device).inner();
        LossScaler { scale: value(scale), good_steps: value(good as f64), config: *config }
    }

    /// `loss` times the current scale: what to backpropagate instead of `loss`.
    pub fn scale_loss(&self, loss: Tensor<Kb, 1>) -> Tensor<Kb, 1> {
        loss * Tensor::from_inner(self.scale.clone())
    }

    /// One over the scale, on the device: what the gradients are multiplied by.
    pub fn inverse(&self) -> Tensor<Kb, 1> {
        self.scale.clone().recip()
    }

    /// After a step whose gradients were `finite` (a device flag): back off
    /// on an overflow, grow after a run of finite steps. Nothing is read.
    pub fn update(&mut self, finite: &Tensor<Kb, 1, Bool>) {
        let c = self.config;
        let kept = finite.clone().float();
        // A finite step adds one to the run; an overflow ends it.
        let run = self.good_steps.clone().add_scalar(1.0) * kept.clone();
        let grow = run.clone().greater_equal_elem(c.interval as f64);
        // x growth after a full run, x1 within one, x backoff on an overflow.
        let on_finite = grow.clone().float().mul_scalar(c.growth - 1.0).add_scalar(1.0);
        let factor = on_finite * kept.clone() + kept.neg().add_scalar(1.0).mul_scalar(c.backoff);
        self.scale = self.scale.clone() * factor;
        self.good_steps = run.mask_fill(grow, 0.0);
    }

    /// The scale and the run of finite steps, read back from the device.
    pub fn state(&self) -> ScaleState {
        ScaleState {
            scale: self.scale.clone().into_scalar_f64(),
            good_steps: self.good_steps.clone().into_scalar_f64().round() as usize,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(interval: usize) -> ScalerConfig {
        ScalerConfig { init: 1024.0, growth: 2.0, backoff: 0.5, interval }
    }

    fn flag(finite: bool, device: &DispatchDevice) -> Tensor<Kb, 1, Bool> {
        Tensor::<Kb, 1>::from_floats([if finite { 0.0 } else { 1.0 }], device).equal_elem(0.0)
    }

    #[test]
    fn an_overflow_backs_off_and_a_run_of_finite_steps_grows() {
        let device = kynml_backend::select(kynml_backend::DeviceChoice::Cpu).unwrap().autodiff();
        let mut s = LossScaler::new(&config(3), None, &device);
        let state = |s: &LossScaler| {
            let r = s.state();
            (r.scale, r.good_steps)
        };
        assert_eq!(state(&s), (1024.0, 0));
        s.update(&flag(false, &device));
        assert_eq!(state(&s), (512.0, 0));
        s.update(&flag(true, &device));
        s.update(&flag(true, &device));
        assert_eq!(state(&s), (512.0, 2));
        s.update(&flag(true, &device));
        assert_eq!(state(&s), (1024.0, 0));
        s.update(&flag(true, &device));
        s.update(&flag(false, &device));
        assert_eq!(state(&s), (512.0, 0), "an overflow resets the run");
        let resumed =
            LossScaler::new(&config(3), Some(&ScaleState { scale: 3.0 * 2f64.powi(20), good_steps: 2 }), &device);
        assert_eq!(state(&resumed), (3.0 * 2f64.powi(20), 2));
        assert_eq!(resumed.inverse().into_scalar_f64(), (1.0 / (3.0 * 2f64.powi(20))) as f32 as f64);
    }
}
