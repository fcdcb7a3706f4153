//! Dynamic loss scaling, as PyTorch's `GradScaler`: multiply the loss by a
//! large scale before the backward pass so that small gradients survive the
//! fp16 products, divide the gradients by it afterwards, and skip any step
//! whose gradients overflowed.
//!
//! After an overflow the scale is cut by `backoff`; after `interval` finite
//! steps in a row it grows by `growth`.

use burn::module::ParamId;
use burn::optim::GradientsParams;
use burn::tensor::Tensor;
use kynml_backend::Backend as Kb;

use crate::evaluate::IntoScalarF64;
use crate::train::precision::ScalerConfig;

/// Dynamic loss scaling: the current scale and the run of finite steps that decides when it grows.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LossScaler {
    /// The factor the loss is multiplied by before the backward pass.
    pub scale: f64,
    /// Finite steps since the scale last changed.
    pub good_steps: usize,
    #[serde(skip, default)]
    config: Option<ScalerConfigState>,
}

/// The configuration, kept apart from the saved state: a resumed run takes
/// it from its own spec.
#[derive(Debug, Clone, Copy, PartialEq)]
struct ScalerConfigState {
    growth: f64,
    backoff: f64,
    interval: usize,
}

impl LossScaler {
    /// A scaler starting at `config.init`, with `config`'s growth, backoff and interval.
    pub fn new(config: &ScalerConfig) -> Self {
        LossScaler {
            scale: config.init,
            good_steps: 0,
            config: Some(ScalerConfigState {
                growth: config.growth,
                backoff: config.backoff,
                interval: config.interval,
            }),
        }
    }

    /// This scaler with a saved scale and count (from a checkpoint).
    pub fn resumed(config: &ScalerConfig, scale: f64, good_steps: usize) -> Self {
        LossScaler { scale, good_steps, ..Self::new(config) }
    }

    /// `loss` times the current scale: what to backpropagate instead of `loss`.
    pub fn scale_loss(&self, loss: Tensor<Kb, 1>) -> Tensor<Kb, 1> {
        loss.mul_scalar(self.scale)
    }

    /// Divides every gradient in `grads` by the scale, in place, and says
    /// whether all of them are finite. `params` lists the model's
    /// parameters with their ranks. One value is read back from the device.
    pub fn unscale(&self, grads: &mut GradientsParams, params: &[(ParamId, usize)]) -> bool {
        let inv = 1.0 / self.scale;
        // `g * 0` sums to 0 when every element is finite and to NaN otherwise.
        let mut probe: Option<Tensor<Kb, 1>> = None;
        let mut add = |t: Tensor<Kb, 1>| probe = Some(probe.take().map_or(t.clone(), |p| p + t));
        fn unscale_one<const D: usize>(
            grads: &mut GradientsParams,
            id: ParamId,
            inv: f64,
            add: &mut impl FnMut(Tensor<Kb, 1>),
        ) {
            if let Some(g) = grads.remove::<Kb, D>(id) {
                let g = g.mul_scalar(inv);
                add(g.clone().mul_scalar(0.0).sum());
                grads.register(id, g);
            }
        }
        for &(id, rank) in params {
            by_rank!(rank, unscale_one(grads, id, inv, &mut add));
        }
        probe.is_none_or(|p| p.into_scalar_f64() == 0.0)
    }

    /// After a step: back off on an overflow, grow after a run of finite steps.
    pub fn update(&mut self, finite: bool) {
        let c = self.config.unwrap_or(ScalerConfigState { growth: 2.0, backoff: 0.5, interval: 2000 });
        if finite {
            self.good_steps += 1;
            if self.good_steps >= c.interval {
                self.scale *= c.growth;
                self.good_steps = 0;
            }
        } else {
            self.scale *= c.backoff;
            self.good_steps = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(interval: usize) -> ScalerConfig {
        ScalerConfig { init: 1024.0, growth: 2.0, backoff: 0.5, interval }
    }

    #[test]
    fn an_overflow_backs_off_and_a_run_of_finite_steps_grows() {
        let mut s = LossScaler::new(&config(3));
        s.update(false);
        assert_eq!((s.scale, s.good_steps), (512.0, 0));
        s.update(true);
        s.update(true);
        assert_eq!(s.scale, 512.0);
        s.update(true);
        assert_eq!((s.scale, s.good_steps), (1024.0, 0));
        s.update(true);
        s.update(false);
        assert_eq!((s.scale, s.good_steps), (512.0, 0), "an overflow resets the run");
    }

    #[test]
    fn unscale_divides_and_spots_inf_and_nan() {
        let device = kynml_backend::select(kynml_backend::DeviceChoice::Cpu).unwrap().inner();
        let s = LossScaler::new(&config(10));
        let (a, b) = (ParamId::new(), ParamId::new());
        let grads_with = |x: f32| {
            let mut g = GradientsParams::new();
            g.register(a, Tensor::<Kb, 2>::from_floats([[2048.0, -1024.0], [0.0, 512.0]], &device));
            g.register(b, Tensor::<Kb, 1>::from_floats([x, 1024.0], &device));
            g
        };
        let params = [(a, 2), (b, 1)];
        let mut g = grads_with(4096.0);
        assert!(s.unscale(&mut g, &params));
        let w: Vec<f32> = g.get::<Kb, 2>(a).unwrap().into_data().to_vec().unwrap();
        assert_eq!(w, [2.0, -1.0, 0.0, 0.5]);
        let v: Vec<f32> = g.get::<Kb, 1>(b).unwrap().into_data().to_vec().unwrap();
        assert_eq!(v, [4.0, 1.0]);
        assert!(!s.unscale(&mut grads_with(f32::INFINITY), &params));
        assert!(!s.unscale(&mut grads_with(f32::NAN), &params));
    }
}
