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

use burn::collective::PeerId;
use burn::module::{AutodiffModule, ParamId};
use burn::optim::GradientsParams;
use burn::tensor::{FloatDType, Tensor};
use burn::DispatchDevice;
use kynml_backend::Backend as Kb;
use std::time::Instant;

use crate::checkpoint::Checkpoint;
use crate::data::{Batch, Dataset, Split};
use crate::evaluate::{self, batch_tensors, IntoScalarF64, Outputs};
use crate::model::{Mode, Model};
use crate::rng::SplitMix64;
use crate::spec::types::{Clip, Loss};
use crate::train::loss;
use crate::train::loss_scale::LossScaler;
use crate::train::native::EngineKind;
use crate::train::optimizer::AnyOptimizer;
use crate::train::profile::StepPhases;
use crate::train::resume::{self, LoopState, ScaleState};

/// What the training loop needs of an engine.
pub trait Engine {
    /// Which engine this is.
    fn kind(&self) -> EngineKind;

    /// Forward and backward on `batch`, one `part` of an optimizer step at
    /// learning rate `lr`, with dropout masks keyed by `dropout`; the last
    /// part updates the weights. Returns the batch's mean loss; `None` when
    /// the step was skipped: its gradients overflowed under loss scaling,
    /// and nothing was updated.
    fn step(&mut self, batch: Batch, lr: f64, dropout: &mut SplitMix64, part: Part) -> Option<StepLoss>;

    /// The model in evaluation mode over a whole split.
    fn evaluate(&mut self, data: &Dataset, split: Split) -> Outputs;

    /// `model`'s outputs and loss on a split (early stopping's best
    /// weights), as [`evaluate`](Self::evaluate) gives them; by default
    /// through Burn on `device`.
    fn evaluate_model(
        &mut self,
        model: &Model<Kb>,
        data: &Dataset,
        split: Split,
        loss: crate::spec::types::Loss,
        device: &DispatchDevice,
    ) -> Outputs {
        crate::evaluate::run_split(model, data, split, loss, device)
    }

    /// The weights as they stand, as a Burn model without autodiff.
    fn model(&self) -> Model<Kb>;

    /// A checkpoint of the weights and optimizer state, with early
    /// stopping's `best` weights and the loop's `state`.
    fn snapshot(&self, best: Option<&Model<Kb>>, state: &LoopState) -> Checkpoint;

    /// The loss scaler's state, when the engine scales its loss.
    fn loss_scale(&self) -> Option<ScaleState>;

    /// The mean global L2 norm of the gradients before clipping, over the
    /// steps since the last call; `None` when the spec clips nothing.
    fn grad_norm(&mut self) -> Option<f64>;

    /// Times every later step in phases when `on` (see [`crate::train::profile`]).
    fn set_profiling(&mut self, on: bool);

    /// The last step's phases, when profiling.
    fn last_phases(&self) -> Option<StepPhases>;

    /// Why the engine cannot go on, once a step failed in a way no later
    /// step recovers from (a data-parallel peer lost); the loop stops with
    /// it. `None` while all is well.
    fn failure(&mut self) -> Option<String> {
        None
    }
}

/// Laps of a step's phases; with `sync`, each lap first waits for the
/// device to finish the work queued so far.
struct Laps<'d> {
    at: Instant,
    sync: Option<&'d DispatchDevice>,
}

impl<'d> Laps<'d> {
    fn new(sync: Option<&'d DispatchDevice>) -> Self {
        Laps { at: Instant::now(), sync }
    }

    /// Seconds since the last lap.
    fn lap(&mut self) -> f64 {
        if let Some(device) = self.sync {
            // A failed wait only makes the timing less exact.
            let _ = <Kb as burn::tensor::backend::Backend>::sync(device);
        }
        let now = Instant::now();
        let secs = now.duration_since(self.at).as_secs_f64();
        self.at = now;
        secs
    }
}

/// `a + b`, parameter by parameter.
fn add_grads(mut a: GradientsParams, mut b: GradientsParams, ranks: &[(ParamId, usize)]) -> GradientsParams {
    fn add<const D: usize>(a: &mut GradientsParams, b: &mut GradientsParams, id: ParamId) {
        let sum = match (a.remove::<Kb, D>(id), b.remove::<Kb, D>(id)) {
            (Some(x), Some(y)) => x + y,
            (Some(x), None) | (None, Some(x)) => x,
            (None, None) => return,
        };
        a.register(id, sum);
    }
    for &(id, rank) in ranks {
        by_rank!(rank, add(&mut a, &mut b, id));
    }
    a
}

/// One gradient scaled by the norm rule's `factor` (a one-element tensor) or
/// clamped by the value rule.
fn clip_one<const D: usize>(grads: &mut GradientsParams, id: ParamId, clip: Clip, factor: Option<&Tensor<Kb, 1>>) {
    let Some(g) = grads.remove::<Kb, D>(id) else { return };
    let g = match (clip, factor) {
        (Clip::Norm(_), Some(f)) => g * f.clone().reshape([1; D]),
        (Clip::Value(x), _) => g.clamp(-x, x),
        (Clip::Norm(_), None) => g,
    };
    grads.register(id, g);
}

/// Where a batch falls in its optimizer step (`accumulate = N`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Part {
    /// The batch's share of the step's rows: its gradients are weighted by it.
    pub weight: f64,
    /// The step's last batch: the weights are updated after it.
    pub last: bool,
}

impl Part {
    /// A whole step in one batch.
    pub const WHOLE: Part = Part { weight: 1.0, last: true };
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
    clip: Option<Clip>,
    /// The pre-clip norms' sum since the last [`Engine::grad_norm`], left on
    /// the device, and the number of steps in it.
    norms: (Option<Tensor<Kb, 1>>, usize),
    /// The gradients of the earlier parts of an accumulated step.
    pending: Option<GradientsParams>,
    /// Whether the autodiff device checkpoints activations. Burn's dispatch
    /// keeps that mark on a model's tensors after `valid()`, and refuses to
    /// mix them with unmarked ones, so such a model is evaluated on the
    /// autodiff device and handed out as fresh copies.
    checkpointed: bool,
    /// Whether steps are timed in phases, and the last step's.
    profiling: bool,
    phases: StepPhases,
    /// The device, for its memory readings when profiling.
    device: kynml_backend::Device,
    /// In a data-parallel run, this replica's peer in Burn's collective:
    /// each optimizer step's gradients are summed over all replicas first.
    peer: Option<PeerId>,
    /// Why the last step could not finish (see [`Engine::failure`]).
    failed: Option<String>,
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
            clip: None,
            norms: (None, 0),
            pending: None,
            checkpointed: false,
            profiling: false,
            phases: StepPhases::default(),
            param_ranks: model.param_ranks(),
            model: Some(model),
            optimizer,
            scaler,
            half,
            loss,
            n_features,
            autodiff: device.autodiff(),
            device: device.clone(),
            inner: device.inner(),
            peer: None,
            failed: None,
        }
    }

    /// Sums every optimizer step's gradients with the other replicas of a
    /// data-parallel run, as `peer` of Burn's collective (registered by
    /// the caller).
    pub fn with_peer(mut self, peer: PeerId) -> Self {
        self.peer = Some(peer);
        self
    }

    /// Runs on `autodiff`, an autodiff device of the same device;
    /// `checkpointed` when it recomputes activations in the backward pass.
    pub fn on(mut self, autodiff: DispatchDevice, checkpointed: bool) -> Self {
        self.autodiff = autodiff;
        self.checkpointed = checkpointed;
        self
    }

    /// Clips every later step's gradients with `clip`.
    pub fn with_clip(mut self, clip: Option<Clip>) -> Self {
        self.clip = clip;
        self
    }

    /// Applies the clipping rule to `grads` (already unscaled), noting their
    /// global norm on the device; nothing is read back.
    fn clip_grads(&mut self, grads: &mut GradientsParams) {
        let Some(clip) = self.clip else { return };
        // Sum of squares of every gradient: one device scalar. Summed along
        // a dimension, not by `sum()`: on a GPU Burn may sum a whole tensor
        // with atomic adds, and on the CPU in a tree that depends on which
        // thread steals which half, either way in an order that changes
        // from run to run, and the norm scales every gradient.
        let mut squares: Option<Tensor<Kb, 1>> = None;
        for &(id, rank) in &self.param_ranks {
            fn square_sum<const D: usize>(grads: &GradientsParams, id: ParamId) -> Option<Tensor<Kb, 1>> {
                // The first dimension first (one sum per remaining value,
                // in parallel), then what is left, as Burn's own chained sum.
                grads.get::<Kb, D>(id).map(|g| {
                    let s = g.square();
                    let s = if D > 1 { s.sum_dim(0) } else { s };
                    s.flatten::<1>(0, D - 1).sum_dim(0)
                })
            }
            let s = by_rank!(rank, square_sum(grads, id));
            if let Some(s) = s {
                squares = Some(match squares.take() {
                    Some(acc) => acc + s,
                    None => s,
                });
            }
        }
        let Some(norm) = squares.map(Tensor::sqrt) else { return };
        self.norms.0 = Some(match self.norms.0.take() {
            Some(acc) => acc + norm.clone(),
            None => norm.clone(),
        });
        self.norms.1 += 1;
        // `max / (norm + 1e-6)`, at most 1: PyTorch's clip_grad_norm_.
        let factor = match clip {
            Clip::Norm(max) => Some(norm.add_scalar(1e-6).recip().mul_scalar(max).clamp_max(1.0)),
            Clip::Value(_) => None,
        };
        for &(id, rank) in &self.param_ranks {
            by_rank!(rank, clip_one(grads, id, clip, factor.as_ref()));
        }
    }

    fn current(&self) -> &Model<Kb> {
        self.model.as_ref().expect("the model is back after every step")
    }
}

impl BurnEngine {
    /// When profiling, keeps the most device memory in use read so far in
    /// this step (the phase just ended was waited for).
    fn note_memory(&mut self) {
        if self.profiling {
            if let Some(m) = self.device.memory() {
                self.phases.in_use = self.phases.in_use.max(m.in_use);
            }
        }
    }
}

impl Engine for BurnEngine {
    fn kind(&self) -> EngineKind {
        EngineKind::Burn
    }

    fn step(&mut self, batch: Batch, lr: f64, dropout: &mut SplitMix64, part: Part) -> Option<StepLoss> {
        let device = self.autodiff.clone();
        let mut laps = Laps::new(self.profiling.then_some(&device));
        let model = self.model.take().expect("the model is back after every step");
        let (x, y) = batch_tensors(batch, self.n_features, self.loss, &self.autodiff);
        self.phases.in_use = 0;
        self.phases.copy = laps.lap();
        self.note_memory();
        let pred = model.forward_in(x, Mode::Train(dropout), self.half);
        let loss = loss::compute(self.loss, pred, &y);
        self.phases.forward = laps.lap();
        self.note_memory();
        // A part of an accumulated step weighs in by its share of the rows.
        let weighted = if part.weight == 1.0 { loss.clone() } else { loss.clone().mul_scalar(part.weight) };
        let backward = match self.scaler.as_ref() {
            None => weighted.backward(),
            Some(scaler) => scaler.scale_loss(weighted).backward(),
        };
        let mut grads = GradientsParams::from_grads(backward, &model);
        self.phases.backward = laps.lap();
        self.note_memory();
        if let Some(earlier) = self.pending.take() {
            grads = add_grads(earlier, grads, &self.param_ranks);
        }
        if !part.last {
            self.pending = Some(grads);
            self.model = Some(model);
            self.phases.optimizer = laps.lap();
            return Some(StepLoss::Device(loss.detach()));
        }
        // Data-parallel: the replicas' gradients, each weighted by its share
        // of the rows, summed with Burn's all-reduce. Still scaled: an
        // overflow on any replica reaches every one, and all skip together.
        if let Some(peer) = self.peer {
            match crate::train::parallel::all_reduce(grads, peer, &self.param_ranks) {
                Ok(summed) => grads = summed,
                Err(why) => {
                    self.failed = Some(why);
                    self.model = Some(model);
                    return None;
                }
            }
        }
        // With loss scaling: unscale, and skip the update (and the scaler's
        // growth) if anything overflowed.
        let finite = match self.scaler.as_mut() {
            None => {
                self.clip_grads(&mut grads);
                self.model = Some(self.optimizer.step(lr, model, grads));
                true
            }
            Some(scaler) => {
                let finite = scaler.unscale(&mut grads, &self.param_ranks);
                scaler.update(finite);
                if finite {
                    // Clipping sees the true gradients, as PyTorch's after GradScaler.unscale_.
                    self.clip_grads(&mut grads);
                    self.model = Some(self.optimizer.step(lr, model, grads));
                } else {
                    self.model = Some(model);
                }
                finite
            }
        };
        self.phases.optimizer = laps.lap();
        self.note_memory();
        finite.then(|| StepLoss::Device(loss.detach()))
    }

    fn evaluate(&mut self, data: &Dataset, split: Split) -> Outputs {
        if self.checkpointed {
            // In evaluation mode, on the autodiff device: no backward pass follows.
            return evaluate::run_split(self.current(), data, split, self.loss, &self.autodiff);
        }
        evaluate::run_split(&self.current().valid(), data, split, self.loss, &self.inner)
    }

    fn model(&self) -> Model<Kb> {
        let model = self.current().valid();
        if !self.checkpointed {
            return model;
        }
        let tensors = model.tensors("");
        // Its own names and shapes: this cannot miss.
        match model.with_tensors(&tensors, "", &self.inner) {
            Ok(fresh) => fresh,
            Err(_) => self.current().valid(),
        }
    }

    fn snapshot(&self, best: Option<&Model<Kb>>, state: &LoopState) -> Checkpoint {
        resume::snapshot(self.current(), &self.optimizer, best, state)
    }

    fn loss_scale(&self) -> Option<ScaleState> {
        self.scaler.as_ref().map(|s| ScaleState { scale: s.scale, good_steps: s.good_steps })
    }

    fn set_profiling(&mut self, on: bool) {
        self.profiling = on;
    }

    fn last_phases(&self) -> Option<StepPhases> {
        self.profiling.then_some(self.phases)
    }

    fn grad_norm(&mut self) -> Option<f64> {
        let (sum, n) = std::mem::take(&mut self.norms);
        Some(sum?.into_scalar_f64() / n as f64).filter(|_| self.clip.is_some() && n > 0)
    }

    fn failure(&mut self) -> Option<String> {
        self.failed.take()
    }
}
