//! The engines that run training steps, behind one trait: the loop asks an
//! [`Engine`] for steps, evaluations, the model and snapshots, and never
//! which engine it drives (as burn-train's learner asks a `TrainStep`).
//!
//! [`BurnEngine`] runs the steps on the device's Burn backend with autodiff,
//! mixed precision and loss scaling; the native CPU engine
//! ([`NativeEngine`](super::native::NativeEngine)) runs them with KynML's own
//! kernels. Both start from the same Burn model and optimizer state and give
//! their weights back as a Burn model, so evaluation, early stopping's best
//! weights, checkpoints and export are one path.

use burn::module::{AutodiffModule, ParamId};
use burn::optim::GradientsParams;
use burn::tensor::{FloatDType, Tensor};
use burn::DispatchDevice;
use kynml_backend::Backend as Kb;

use crate::checkpoint::Checkpoint;
use crate::data::{Batch, Dataset, Split};
use crate::evaluate::{self, batch_tensors, Outputs};
use crate::model::{Mode, Model};
use crate::rng::SplitMix64;
use crate::spec::types::Loss;
use crate::train::loss;
use crate::train::loss_scale::LossScaler;
use crate::train::native::EngineKind;
use crate::train::optimizer::AnyOptimizer;
use crate::train::resume::{self, LoopState, ScaleState};

/// What the training loop needs of an engine.
pub trait Engine {
    /// Which engine this is.
    fn kind(&self) -> EngineKind;

    /// One optimizer step on `batch` at learning rate `lr`, with dropout
    /// masks keyed by `dropout`. `None` when the step was skipped: its
    /// gradients overflowed under loss scaling, and nothing was updated.
    fn step(&mut self, batch: Batch, lr: f64, dropout: &mut SplitMix64) -> Option<StepLoss>;

    /// The model in evaluation mode over a whole split.
    fn evaluate(&mut self, data: &Dataset, split: Split) -> Outputs;

    /// The weights as they stand, as a Burn model without autodiff.
    fn model(&self) -> Model<Kb>;

    /// A checkpoint of the weights and optimizer state, with early
    /// stopping's `best` weights and the loop's `state`.
    fn snapshot(&self, best: Option<&Model<Kb>>, state: &LoopState) -> Checkpoint;

    /// The loss scaler's state, when the engine scales its loss.
    fn loss_scale(&self) -> Option<ScaleState>;
}

/// A step's mean loss, where the engine keeps it: the Burn engine leaves it
/// on the device, so that a step does not wait for it to be read back.
pub enum StepLoss {
    /// Already on the host.
    Host(f64),
    /// A one-element tensor on the device.
    Device(Tensor<Kb, 1>),
}

/// Steps on the device's Burn backend: autodiff, the precision policy's
/// casts, and dynamic loss scaling when the plan has a scaler.
pub struct BurnEngine {
    /// `None` only while a step moves it through the optimizer.
    model: Option<Model<Kb>>,
    optimizer: AnyOptimizer,
    scaler: Option<LossScaler>,
    param_ranks: Vec<(ParamId, usize)>,
    half: Option<FloatDType>,
    loss: Loss,
    n_features: usize,
    autodiff: DispatchDevice,
    inner: DispatchDevice,
}

impl BurnEngine {
    /// The engine for `model` (on the autodiff device) and `optimizer`,
    /// fresh or restored; `half` is the products' reduced type, `None` for
    /// fp32 and tf32.
    pub fn new(
        model: Model<Kb>,
        optimizer: AnyOptimizer,
        scaler: Option<LossScaler>,
        half: Option<FloatDType>,
        loss: Loss,
        n_features: usize,
        device: &kynml_backend::Device,
    ) -> Self {
        BurnEngine {
            param_ranks: model.param_ranks(),
            model: Some(model),
            optimizer,
            scaler,
            half,
            loss,
            n_features,
            autodiff: device.autodiff(),
            inner: device.inner(),
        }
    }

    fn current(&self) -> &Model<Kb> {
        self.model.as_ref().expect("the model is back after every step")
    }
}

impl Engine for BurnEngine {
    fn kind(&self) -> EngineKind {
        EngineKind::Burn
    }

    fn step(&mut self, batch: Batch, lr: f64, dropout: &mut SplitMix64) -> Option<StepLoss> {
        let model = self.model.take().expect("the model is back after every step");
        let (x, y) = batch_tensors(batch, self.n_features, self.loss, &self.autodiff);
        let pred = model.forward_in(x, Mode::Train(dropout), self.half);
        let loss = loss::compute(self.loss, pred, &y);
        // With loss scaling: backpropagate the scaled loss, unscale, and
        // skip the update (and the scaler's growth) if anything overflowed.
        let finite = match self.scaler.as_mut() {
            None => {
                let grads = GradientsParams::from_grads(loss.backward(), &model);
                self.model = Some(self.optimizer.step(lr, model, grads));
                true
            }
            Some(scaler) => {
                let mut grads = GradientsParams::from_grads(scaler.scale_loss(loss.clone()).backward(), &model);
                let finite = scaler.unscale(&mut grads, &self.param_ranks);
                self.model = Some(if finite { self.optimizer.step(lr, model, grads) } else { model });
                scaler.update(finite);
                finite
            }
        };
        finite.then(|| StepLoss::Device(loss.detach()))
    }

    fn evaluate(&mut self, data: &Dataset, split: Split) -> Outputs {
        evaluate::run_split(&self.current().valid(), data, split, self.loss, &self.inner)
    }

    fn model(&self) -> Model<Kb> {
        self.current().valid()
    }

    fn snapshot(&self, best: Option<&Model<Kb>>, state: &LoopState) -> Checkpoint {
        resume::snapshot(self.current(), &self.optimizer, best, state)
    }

    fn loss_scale(&self) -> Option<ScaleState> {
        self.scaler.as_ref().map(|s| ScaleState { scale: s.scale, good_steps: s.good_steps })
    }
}
