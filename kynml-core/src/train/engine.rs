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
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use crate::checkpoint::Checkpoint;
use crate::data::{Batch, Dataset, Split};
use crate::evaluate::{self, batch_tensors, IntoScalarF64, Outputs};
use crate::model::{Mode, Model};
use crate::rng::SplitMix64;
use crate::spec::types::{Clip, Loss, Optimizer};
use crate::train::loss;
use crate::train::loss_scale::LossScaler;
use crate::train::native::EngineKind;
use crate::train::optimizer::AnyOptimizer;
use crate::train::profile::StepPhases;
use crate::train::resume::{self, NormSum, SavedState, ScaleState};
use crate::train::update::{DeviceUpdate, Grads, Slots, Update};

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

    /// The model in evaluation mode over a whole split; `None` when `stop`
    /// was set before its last pass (checked before each), the split not
    /// done (a stop asked for during an epoch's validation).
    fn evaluate(&mut self, data: &Dataset, split: Split, stop: Option<&AtomicBool>) -> Option<Outputs>;

    /// The reduced type the products of the steps run in (bf16, fp16), and
    /// so those of validation; `None` for fp32 and tf32.
    fn half(&self) -> Option<FloatDType> {
        None
    }

    /// The rows the steps have run at most (a batch, or a micro-batch or a
    /// replica's share of one), which validation's forward passes on a
    /// Burn device take so that they meet no product size of their own
    /// (see [`run_split`](crate::evaluate::run_split)); `None` before the
    /// first step and on engines without kernel tuning.
    fn eval_rows(&self) -> Option<usize> {
        None
    }

    /// Tells the engine the rows of the run's first step (`batch`, or
    /// every training row when fewer) before any step, so that
    /// [`eval_rows`](Self::eval_rows) is the same whether or not a step ran:
    /// a resume with no epoch left validates as the run that wrote it did.
    fn expect_rows(&mut self, _rows: usize) {}

    /// `model`'s outputs and loss on a split (early stopping's best
    /// weights, at the run's end: the engine is done), as
    /// [`evaluate`](Self::evaluate) gives them; by default through Burn on
    /// `device`, in [`half`](Self::half) and passes of
    /// [`eval_rows`](Self::eval_rows).
    fn evaluate_model(
        self: Box<Self>,
        model: &Model<Kb>,
        data: &Dataset,
        split: Split,
        loss: crate::spec::types::Loss,
        device: &DispatchDevice,
    ) -> Outputs {
        crate::evaluate::run_split(model, data, split, loss, device, self.half(), self.eval_rows())
    }

    /// The weights as they stand, as a Burn model without autodiff.
    fn model(&self) -> Model<Kb>;

    /// [`model`](Self::model), from an engine that is done: one that can
    /// frees what only training needs (gradients, optimizer state) first.
    fn into_model(self: Box<Self>) -> Model<Kb> {
        self.model()
    }

    /// A checkpoint of the weights and optimizer state, with early
    /// stopping's `best` weights and the loop's `state`.
    fn snapshot(&self, best: Option<&Model<Kb>>, state: SavedState) -> Checkpoint;

    /// The loss scaler's state, when the engine scales its loss.
    fn loss_scale(&self) -> Option<ScaleState>;

    /// The global L2 norms of the gradients before clipping, summed over the
    /// steps since the last call; `None` when the spec clips nothing.
    fn grad_norms(&mut self) -> Option<NormSum>;

    /// Starts the running sum of [`Engine::grad_norms`] at `norms` (an
    /// interrupted epoch's steps so far), so that the later steps add to it
    /// in the order an uninterrupted run adds them.
    fn seed_grad_norms(&mut self, norms: NormSum);

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
    /// A one-element tensor on the device, with a device flag saying
    /// whether the step was taken (1) or skipped on overflow (0): under loss
    /// scaling with KynML's update, nothing is read back inside a step.
    Flagged {
        /// The batch's mean loss.
        loss: Tensor<Kb, 1>,
        /// 1 when the weights were updated, 0 when the step was skipped.
        taken: Tensor<Kb, 1>,
    },
}

/// The weights' update: Burn's optimizer, or KynML's on the device
/// ([`crate::train::update`]).
#[derive(Clone)]
enum Stepper {
    Burn(AnyOptimizer),
    Device(Box<DeviceUpdate>),
}

/// The pre-clip gradient norms since the last read, on the device, and
/// how many steps they cover (counted on the host, or on the device when
/// steps may be skipped without the host knowing).
#[derive(Default)]
struct Norms {
    sum: Option<Tensor<Kb, 1>>,
    counted: usize,
    flagged: Option<Tensor<Kb, 1>>,
    /// A resumed epoch's sum so far, until the first norm gives it a device.
    seed: Option<f64>,
}

impl Norms {
    /// Adds a step's `norm`; with `taken`, only if that device flag holds.
    fn add(&mut self, norm: Tensor<Kb, 1>, taken: Option<&Tensor<Kb, 1, burn::tensor::Bool>>) {
        let norm = match taken {
            Some(t) => {
                let kept = t.clone().float();
                self.flagged = Some(self.flagged.take().map_or(kept.clone(), |c| c + kept));
                // A select, not a product: an overflowed norm is NaN.
                norm.mask_fill(t.clone().bool_not(), 0.0)
            }
            None => {
                self.counted += 1;
                norm
            }
        };
        self.sum = Some(match (self.sum.take(), self.seed.take()) {
            (Some(s), _) => s + norm,
            // As an f32 on the device: the sum of an uninterrupted run was one
            // (added to the norm itself, which keeps its autodiff device's
            // checkpointing mark: a tensor made on the plain device carries
            // none, and Burn refuses to add the two).
            (None, Some(seed)) => norm.add_scalar(seed as f32),
            (None, None) => norm,
        });
    }

    /// The norms' sum and the steps it holds, and a fresh start.
    fn take(&mut self) -> NormSum {
        let Norms { sum, counted, flagged, seed } = std::mem::take(self);
        let steps = counted as f64 + flagged.map_or(0.0, IntoScalarF64::into_scalar_f64);
        NormSum { sum: sum.map_or(seed.unwrap_or(0.0), IntoScalarF64::into_scalar_f64), steps }
    }
}

/// Steps on the device's Burn backend: autodiff, the precision policy's
/// casts, and dynamic loss scaling when the plan has a scaler.
pub struct BurnEngine {
    /// `None` only while a step moves it through the optimizer.
    model: Option<Model<Kb>>,
    stepper: Stepper,
    /// The model's parameters as the gradients are laid out.
    slots: Slots,
    scaler: Option<LossScaler>,
    param_ranks: Vec<(ParamId, usize)>,
    half: Option<FloatDType>,
    /// The most rows a step has run (see [`Engine::eval_rows`]); 0 before the first.
    step_rows: usize,
    loss: Loss,
    n_features: usize,
    autodiff: DispatchDevice,
    inner: DispatchDevice,
    clip: Option<Clip>,
    /// The pre-clip norms since the last [`Engine::grad_norm`].
    norms: Norms,
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
            norms: Norms::default(),
            pending: None,
            checkpointed: false,
            profiling: false,
            phases: StepPhases::default(),
            param_ranks: model.param_ranks(),
            slots: Slots::of(&model),
            model: Some(model),
            stepper: Stepper::Burn(optimizer),
            scaler,
            half,
            step_rows: 0,
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

    /// Updates the weights as `update` says, with the spec's `optimizer`:
    /// Burn's optimizer, or KynML's on the device, per parameter or fused.
    /// The optimizer state held so far (fresh or restored) carries over.
    pub fn with_update(mut self, update: Update, optimizer: &Optimizer) -> Result<Self, String> {
        if update == Update::Burn {
            return Ok(self);
        }
        let Stepper::Burn(burn) = &self.stepper else { return Ok(self) };
        let model = self.current();
        if let Some(device) = DeviceUpdate::new(optimizer, update.fused(), model, burn, &self.autodiff)? {
            self.slots = device.slots().clone();
            self.stepper = Stepper::Device(Box::new(device));
        }
        Ok(self)
    }

    /// The optimizer's state as Burn's optimizer holds it.
    fn optimizer(&self) -> AnyOptimizer {
        match &self.stepper {
            Stepper::Burn(o) => o.clone(),
            Stepper::Device(d) => d.to_burn(),
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
        self.step_rows = self.step_rows.max(batch.len());
        let (x, y) = batch_tensors(batch, self.n_features, self.loss, &self.autodiff);
        self.phases.in_use = 0;
        self.phases.sync = 0.0;
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
            self.phases.sync = laps.lap();
        }
        // Loss scaling: unscale, and note on the device whether anything
        // overflowed. Burn's optimizer updates whatever it is given, so on
        // that path the flag is read back here and the step skipped; KynML's
        // update keeps or drops its result by the flag without reading it.
        let fused = matches!(&self.stepper, Stepper::Device(d) if d.fused());
        let mut grads = Grads::gather(grads, &self.slots, fused);
        let finite = self.scaler.as_ref().map(|s| grads.unscale(s.inverse()));
        if let (Stepper::Burn(_), Some(flag)) = (&self.stepper, &finite) {
            if !flag_is_set(flag) {
                if let Some(scaler) = self.scaler.as_mut() {
                    scaler.update(flag);
                }
                self.model = Some(model);
                self.phases.optimizer = laps.lap();
                return None;
            }
        }
        let deferred = match self.stepper {
            Stepper::Device(_) => finite.as_ref(),
            Stepper::Burn(_) => None,
        };
        if let Some(clip) = self.clip {
            // Clipping sees the true gradients, as PyTorch's after GradScaler.unscale_.
            if let Some(norm) = grads.clip(clip) {
                self.norms.add(norm, deferred);
            }
        }
        self.model = Some(match &mut self.stepper {
            Stepper::Burn(o) => o.step(lr, model, grads.into_params(&self.slots)),
            Stepper::Device(d) => d.step(lr, model, grads, deferred),
        });
        if let (Some(scaler), Some(flag)) = (self.scaler.as_mut(), &finite) {
            scaler.update(flag);
        }
        // Read inside the step's last phase, as the earlier readings fall in
        // the phase after theirs: a reading outside every phase (on wgpu, a
        // call to its device's thread) left the phases short of the step.
        self.note_memory();
        self.phases.optimizer = laps.lap();
        let loss = loss.detach();
        Some(match deferred {
            Some(flag) => StepLoss::Flagged { loss, taken: Tensor::from_inner(flag.clone().float()) },
            None => StepLoss::Device(loss),
        })
    }

    /// In the run's precision: a bf16 or fp16 run's validation runs its
    /// products in bf16 or fp16 as its steps do (as PyTorch's evaluation
    /// under autocast), not in fp32 kernels of their own.
    fn evaluate(&mut self, data: &Dataset, split: Split, stop: Option<&AtomicBool>) -> Option<Outputs> {
        let (half, rows) = (self.half, self.eval_rows());
        if self.checkpointed {
            // In evaluation mode, on the autodiff device: no backward pass follows.
            return evaluate::run_split_until(self.current(), data, split, self.loss, &self.autodiff, half, rows, stop);
        }
        evaluate::run_split_until(&self.current().valid(), data, split, self.loss, &self.inner, half, rows, stop)
    }

    fn half(&self) -> Option<FloatDType> {
        self.half
    }

    fn eval_rows(&self) -> Option<usize> {
        (self.step_rows > 0).then_some(self.step_rows)
    }

    fn expect_rows(&mut self, rows: usize) {
        self.step_rows = self.step_rows.max(rows);
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

    fn snapshot(&self, best: Option<&Model<Kb>>, state: SavedState) -> Checkpoint {
        resume::snapshot(self.current(), &self.optimizer(), best, state)
    }

    fn loss_scale(&self) -> Option<ScaleState> {
        self.scaler.as_ref().map(LossScaler::state)
    }

    fn set_profiling(&mut self, on: bool) {
        self.profiling = on;
    }

    fn last_phases(&self) -> Option<StepPhases> {
        self.profiling.then_some(self.phases)
    }

    fn grad_norms(&mut self) -> Option<NormSum> {
        let norms = self.norms.take();
        self.clip.is_some().then_some(norms)
    }

    fn seed_grad_norms(&mut self, norms: NormSum) {
        self.norms = Norms { counted: norms.steps as usize, seed: Some(norms.sum), ..Norms::default() };
    }

    fn failure(&mut self) -> Option<String> {
        self.failed.take()
    }
}

/// Reads a one-element flag back from the device.
fn flag_is_set(flag: &Tensor<Kb, 1, burn::tensor::Bool>) -> bool {
    flag.clone().float().into_scalar_f64() > 0.5
}
