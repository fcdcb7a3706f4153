//! The training loop. One epoch: shuffle, steps, validate, early-stopping
//! check, checkpoint. The steps themselves are an [`Engine`]'s (the Burn
//! path's forward, loss, backward, unscale and update read top to bottom in
//! [`BurnEngine`]'s `step`), so the loop never asks which engine it drives.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use burn::tensor::Tensor;

use std::thread::Scope;

use crate::checkpoint::{remove_stray_temps, Checkpoint, CheckpointWriter};
use crate::data::{Dataset, Loader, Split};
use crate::evaluate::{self, IntoScalarF64};
use crate::model::Model;
use crate::rng::SplitMix64 as Rng;
use crate::spec::types::{Loss, Metric, Spec};
use crate::train::engine::{BurnEngine, Engine, Part, StepLoss};
use crate::train::events::{EpochRecord, TrainEvent};
use crate::train::loss_scale::LossScaler;
use crate::train::native::{engine_for, EngineChoice, EngineKind, NativeEngine};
use crate::train::optimizer::AnyOptimizer;
use crate::train::parallel::ParallelEngine;
use crate::train::precision::{self, PrecisionPlan};
use crate::train::profile::{CheckpointTiming, EvalTiming, Profile, StepTiming};
use crate::train::resume::{self, History, LoopState, NormSum, PartialEpoch, ResumeError, ScaleState, StopState};
use crate::train::schedule::lr_at;
use crate::train::strategy::{Checkpointing, EarlyStopper, EarlyStopping, EveryEpochs, Verdict};
use crate::train::update::Update;
use kynml_backend::{Backend as Kb, Device};

/// Stream ids for [`Rng::stream`]: data order and dropout never share draws
/// with weight initialisation.
const DATA_STREAM: u64 = 2;
const DROPOUT_STREAM: u64 = 3;
/// Read the running loss back from the device every this many steps.
const READ_EVERY: usize = 10;

/// Regression or classification, decided by the loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Task {
    /// Predicting a number: the loss is `mse`, `mae` or `huber`.
    Regression,
    /// Predicting one of `classes` classes: the loss is `cross_entropy` or `bce`.
    Classification {
        /// The number of classes.
        classes: usize,
    },
}

/// Settings of the loop that do not come from the spec file itself.
#[derive(Debug, Clone, Default)]
pub struct TrainSettings {
    /// Stop every epoch after this many steps (for quick checks and
    /// benches); `None` runs whole epochs.
    pub max_steps_per_epoch: Option<usize>,
    /// Run only the first and the last batch of each epoch: every batch
    /// shape a whole epoch has, so that `kynml warmup` tunes and compiles
    /// every kernel a run needs in a fraction of its time.
    pub shapes_only: bool,
    /// Where the spec's `checkpoint(path=...)` really is (see
    /// [`SpecFile::checkpoint_path`](crate::plan::SpecFile::checkpoint_path),
    /// which resolves it against the spec's folder). `None` takes the path
    /// as written, relative to the working directory.
    pub checkpoint_path: Option<PathBuf>,
    /// The run starts over where a checkpoint already is (`--fresh`): its
    /// first save replaces the checkpoint at the path and removes its older
    /// copies, which belong to the run it discards, once it is whole (a save
    /// that fails leaves them).
    pub fresh: bool,
    /// A checkpoint to continue from (see
    /// [`SpecFile::find_checkpoint`](crate::plan::SpecFile::find_checkpoint));
    /// `None` starts from fresh weights, where no checkpoint is at the
    /// path already ([`TrainError::CheckpointExists`]; `fresh` replaces it).
    pub resume_from: Option<Checkpoint>,
    /// The precision to run, overriding what [`precision::plan`] decides for
    /// the spec and device (tests and benches compare precisions this way).
    pub precision: Option<PrecisionPlan>,
    /// The lock on the checkpoint path that
    /// [`checkpoint::prepare`](crate::checkpoint::prepare) took, held
    /// through the run; without it, the run checks the path and takes its
    /// own lock, as `prepare` does.
    pub checkpoint_lock: Option<Arc<crate::checkpoint::PathLock>>,
    /// Set it (from a Ctrl-C handler, or a service cancelling one run) to
    /// stop after the step in progress: a checkpoint of that point is
    /// written when the spec checkpoints, and [`train`] returns
    /// [`TrainError::Interrupted`]. Each run may have its own flag. A stop
    /// set during an epoch's validation cuts it short (checked before each
    /// of its forward passes): the run stops as after the epoch's last
    /// step, and a resume validates that epoch first. One set after the
    /// last epoch's validation lets the run finish, and `train` returns its
    /// result.
    pub stop: Option<Arc<AtomicBool>>,
    /// Which engine runs the steps: by default the native one where it
    /// applies (see [`engine_for`]); tests and benches can ask for Burn's.
    pub engine: EngineChoice,
    /// How the Burn engine updates the weights, overriding what
    /// [`Update::plan`] decides for the spec (tests and benches compare the
    /// updates this way). RMSprop runs on Burn's optimizer whatever this says.
    pub update: Option<Update>,
    /// Time every step in phases, and each evaluation ([`TrainResult::profile`]).
    pub profile: bool,
    /// Decides when to stop instead of the spec's `early_stop` (which builds
    /// an [`EarlyStopper`]); with it, the run returns its best epoch's
    /// weights, as with the spec's rule.
    pub early_stopping: Option<Box<dyn EarlyStopping>>,
    /// Decides when the spec's `checkpoint` writes, instead of every
    /// `every_n` epochs and at the end ([`EveryEpochs`]); the spec still
    /// names the path.
    pub checkpointing: Option<std::sync::Arc<dyn Checkpointing>>,
    /// The other devices of a data-parallel run, beside the `device` given
    /// to [`train`] (which evaluates, checkpoints and holds the model that
    /// is returned): each takes a slice of every batch, and the gradients
    /// are summed over all of them with Burn's all-reduce (see
    /// [`crate::train::parallel`]). Empty: one device. Burn keeps one
    /// all-reduce server per process, so data-parallel runs of one process
    /// take turns: a second waits until the first returns before it starts
    /// (single-device runs never wait).
    pub replicas: Vec<Device>,
}

/// Why [`train`] did not finish.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TrainError {
    /// The running mean of the training loss became NaN or infinite.
    #[error("training loss became {value} at epoch {epoch}, step {step}; lower the learning rate or check the data")]
    NonFiniteLoss {
        /// The epoch (1-based).
        epoch: usize,
        /// The step (1-based within the epoch) at which the loss was read.
        step: usize,
        /// The mean loss read: NaN or an infinity.
        value: f64,
    },
    /// The data worker threads could not be started.
    #[error("cannot start {workers} data worker threads: {reason}")]
    DataWorkers {
        /// The number of workers asked for: the dataset's `num_workers`.
        workers: usize,
        /// The system's error, in words.
        reason: String,
    },
    /// The checkpoint in [`TrainSettings::resume_from`] does not fit this spec.
    #[error("cannot resume: {0}")]
    Resume(#[from] ResumeError),
    /// [`TrainSettings::stop`] was set; `checkpoint` holds the point reached.
    #[error("interrupted at epoch {epoch}, step {step}")]
    #[non_exhaustive]
    Interrupted {
        /// The epoch in progress (1-based).
        epoch: usize,
        /// The last step done in it (1-based); 0 when the stop came between
        /// epochs, before this one's first step.
        step: usize,
        /// The checkpoint written at that point; `None` when the spec does not checkpoint or the
        /// write failed.
        checkpoint: Option<PathBuf>,
        /// The steps profiled up to that point, when [`TrainSettings::profile`] was set.
        profile: Option<Box<Profile>>,
        /// The weights reached (not the best epoch's under early stopping:
        /// the checkpoint keeps those), so that a program that stops a run
        /// without checkpoints keeps what it trained.
        model: Box<Reached>,
    },
    /// The checkpoints cannot be written where they should: another run
    /// writes there, a file or folder that is not a KynML checkpoint is in
    /// the way, or the folder cannot be created or written.
    #[error("{0}")]
    Checkpoint(crate::checkpoint::CheckpointError),
    /// A data-parallel run lost a replica, or its replicas could not meet.
    #[error("data-parallel training stopped: {0}")]
    Parallel(String),
    /// The model's `embedding` was not sized from this dataset's vocabularies.
    #[error(
        "model `{model}` is not bound to this dataset's categories or tokens: call `ModelSpec::bind` with the \
         dataset's `info` first (`SpecFile::load_data` does)"
    )]
    NotBound {
        /// The model block's name.
        model: String,
    },
    /// The spec does not fit the data (the input or output width, the kind
    /// of target), or holds a value that no run can take: a spec changed in
    /// code after it was read is checked here, as reading checked its text.
    #[error("the spec does not fit its data: {}", problems.join("; "))]
    DoesNotFit {
        /// Each problem in words.
        problems: Vec<String>,
    },
    /// A checkpoint is already at the spec's checkpoint path (or, where the
    /// caller did not prepare the path, an older copy beside it), and the
    /// settings neither resume from it nor start over: the run would
    /// replace it.
    #[error(
        "{} already holds a checkpoint: resume from it (`SpecFile::find_checkpoint`, into \
         `TrainSettings::resume_from`; `SpecFile::train_settings` does both) or start over and replace it \
         (`TrainSettings::fresh`)",
        path.display()
    )]
    CheckpointExists {
        /// The checkpoint path.
        path: PathBuf,
    },
}

/// The weights an interrupted run reached ([`TrainError::Interrupted`]): the
/// model, which it dereferences to; its `Debug` leaves the tensors out, so
/// that printing the error stays short.
pub struct Reached(pub Model<Kb>);

impl std::fmt::Debug for Reached {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Reached(..)")
    }
}

impl std::ops::Deref for Reached {
    type Target = Model<Kb>;
    fn deref(&self) -> &Model<Kb> {
        &self.0
    }
}

/// What a finished run leaves behind.
#[derive(Debug)]
pub struct TrainResult {
    /// The final model (the best epoch's when early stopping is on), on the
    /// device without autodiff.
    pub model: Model<Kb>,
    /// One record per finished epoch, those before a resume included.
    pub history: Vec<EpochRecord>,
    /// Validation loss and metrics of `model`.
    pub final_metrics: BTreeMap<String, f64>,
    /// The epoch (1-based) with the lowest validation loss when early stopping is on; `None`
    /// without early stopping or when no epoch improved.
    pub best_epoch: Option<usize>,
    /// True when early stopping ended training.
    pub stopped_early: bool,
    /// Wall-clock seconds from the first epoch to the end, validation and checkpoint saves
    /// included.
    pub seconds: f64,
    /// Training samples per second over all epochs (steps only), this
    /// process's start left out where it ran at less than half the rest's
    /// pace ([`LeftOut`]: on a GPU it tunes and compiles the kernels, for
    /// minutes on a first run: 2 samples/s were said of a run whose epochs
    /// ran at 287); NaN when this run took no step (resumed with an
    /// epoch's validation alone left).
    pub samples_per_sec: f64,
    /// What `samples_per_sec` leaves out, if anything.
    pub left_out: Option<LeftOut>,
    /// The epoch the run resumed after, when it continued a checkpoint.
    pub resumed_after: Option<usize>,
    /// Checkpoint writes that failed (each was reported as a
    /// [`TrainEvent::CheckpointFailed`]).
    pub checkpoint_failures: usize,
    /// The epoch whose end the checkpoint at the spec's path holds, as far
    /// as this run knows it written whole (the checkpoint resumed from,
    /// where none of this run's was); `None` without one. Older than the
    /// last epoch where the later writes failed.
    pub checkpoint_epoch: Option<usize>,
    /// The precision that ran.
    pub precision: PrecisionPlan,
    /// The engine that ran the steps.
    pub engine: EngineKind,
    /// Each step's phases and each evaluation's time, when
    /// [`TrainSettings::profile`] asked for them.
    pub profile: Option<Profile>,
}

/// Trains the spec's model on `data` on `device`, reporting progress to `on_event`; resumes and
/// checkpoints as `settings` and the spec say.
///
/// # Errors
/// A model not bound to `data`, a run that does not fit its data, a loss
/// that stops being finite, a checkpoint that cannot be resumed, a stop
/// asked through [`TrainSettings::stop`] (with the model reached), a failed
/// data-parallel replica: see [`TrainError`].
///
/// # Panics
/// A device that fails inside Burn (out of memory beyond what
/// [`plan`](crate::plan) checked before the run, a GPU lost mid-run)
/// panics there, as Burn does; a service that must outlive such a failure
/// runs `train` under [`std::panic::catch_unwind`].
pub fn train(
    spec: &Spec,
    data: &Dataset,
    device: &Device,
    settings: &TrainSettings,
    on_event: &mut dyn FnMut(TrainEvent),
) -> Result<TrainResult, TrainError> {
    // Let go of the dropout ranges however train ends, a device's panic
    // included (which a service catches to go on).
    struct Forget;
    impl Drop for Forget {
        fn drop(&mut self) {
            crate::model::dropout::forget_ranges();
        }
    }
    let _forget = Forget;
    // Data workers borrow the dataset; a scope lets them do so without a copy.
    std::thread::scope(|scope| run(scope, spec, data, device, settings, on_event))
}

fn run<'scope, 'env>(
    scope: &'scope Scope<'scope, 'env>,
    spec: &Spec,
    data: &'env Dataset,
    device: &Device,
    settings: &TrainSettings,
    on_event: &mut dyn FnMut(TrainEvent),
) -> Result<TrainResult, TrainError> {
    let mut bound = spec.model.clone();
    if bound.bind(&data.info).is_err() || bound != spec.model {
        return Err(TrainError::NotBound { model: spec.model.name.value.clone() });
    }
    check_fit(spec, data)?;
    let t = &spec.train;
    let loss_kind = t.loss.value;
    let metrics = metrics_for(spec, loss_kind);
    let n_classes = data.class_names().map_or(0, <[String]>::len);
    // `checkpoint_activations`: Burn recomputes cheap activations in the
    // backward pass instead of keeping them.
    let ad_device = if t.checkpoint_activations.value { device.autodiff_checkpointed() } else { device.autodiff() };
    let inner_device = device.inner();
    let mut dropout_rng = Rng::stream(t.seed, DROPOUT_STREAM);

    let mut model = Model::init(&spec.model, t.seed, &ad_device);
    let mut optimizer = AnyOptimizer::new(&t.optimizer.value);
    let mut stopper: Option<Box<dyn EarlyStopping>> = settings
        .early_stopping
        .clone()
        .or_else(|| t.early_stop.as_ref().map(|e| Box::new(EarlyStopper::new(&e.value)) as Box<dyn EarlyStopping>));
    // The best epoch's weights, without autodiff, when early stopping is on.
    let mut best: Option<Model<Kb>> = None;
    let mut order_rng = Rng::stream(t.seed, DATA_STREAM);
    let batch_size = t.batch.value;
    let needs_rows = spec.model.batchnorm_needing_rows().is_some();
    let n_train = data.train.len();
    let workers = spec.dataset.num_workers.value;
    // No more workers or queued batches than an epoch has batches.
    let epoch_steps = n_train.div_ceil(batch_size.max(1));
    let loader = Loader::for_epochs_of(workers, spec.dataset.prefetch.as_ref().map(|p| p.value), epoch_steps)
        .map_err(|e| TrainError::DataWorkers { workers, reason: e.to_string() })?;
    let precision = settings.precision.clone().unwrap_or_else(|| precision::plan(t, device));
    let half = precision.compute.half();
    // A data-parallel run steps on Burn on every device.
    let engine_kind = if settings.replicas.is_empty() {
        engine_for(device, &precision, settings.engine, &spec.model)
    } else {
        EngineKind::Burn
    };
    // The loss scaler's saved progress, when resuming a scaled run.
    let mut saved_scale = None;
    // Where the resumed checkpoint's steps ran.
    let mut resumed_ran = None;
    let optimizer_name = optimizer.name();
    let mut history = History::default();
    let mut stopped_early = false;
    let mut first_epoch = 1;
    // Where an interrupted epoch stopped, when resuming one.
    let mut partial: Option<PartialEpoch> = None;
    let mut steps_taken = 0u64;

    let checkpoint = t.checkpoint.as_ref().map(|c| &c.value);
    let checkpointing: Option<std::sync::Arc<dyn Checkpointing>> = checkpoint
        .map(|c| settings.checkpointing.clone().unwrap_or_else(|| std::sync::Arc::new(EveryEpochs { n: c.every_n })));
    let checkpoint_path = settings.checkpoint_path.clone().or_else(|| checkpoint.map(|c| c.path.clone()));
    let model_hash = resume::model_hash(&spec.model);
    // Recorded in checkpoints (a resume on other rows is refused): read only
    // by a run that checkpoints.
    let data_origin =
        (checkpoint_path.is_some() || settings.resume_from.is_some()).then(|| resume::DataOrigin::of(spec, data));
    // What every checkpoint of this run records alike; each save adds where
    // the loop stands (`loop_state`).
    let run_record = LoopState {
        loss: Some(loss_kind.written()),
        model: resume::describe_model(&spec.model),
        data: data_origin,
        batching: Some(resume::Batching {
            batch: batch_size,
            accumulate: t.accumulate.value,
            devices: settings.replicas.len() + 1,
        }),
        ran: Some(resume::Ran { device: device_kind(device), precision: precision.compute.name().into() }),
        ..LoopState::new(0, 0, optimizer_name, 0, 0)
    };
    // Held to the end of the run, and declared before the writer so that it
    // is let go after it: no other run writes to this path while a save of
    // this one may still be in flight.
    // A lock given for another path counts as none; one that another run
    // holds now (settings cloned for a second job) is that run's.
    let given =
        settings.checkpoint_lock.as_ref().filter(|held| checkpoint_path.as_ref().is_some_and(|p| held.covers(p)));
    let _lock = match (checkpoint, &checkpoint_path, given) {
        (Some(_), Some(path), Some(held)) => Some(held.claim().ok_or_else(|| {
            let lock = crate::checkpoint::lock_path(path);
            TrainError::Checkpoint(crate::checkpoint::CheckpointError::InUse { path: path.clone(), lock })
        })?),
        // Not prepared by the caller: checked here as `kynml train` checks
        // it (never over a file or folder that is not a KynML checkpoint).
        (Some(c), Some(path), None) => {
            let held = Arc::new(crate::checkpoint::prepare(path, c.keep).map_err(TrainError::Checkpoint)?);
            held.claim()
        }
        _ => None,
    };
    // A checkpoint already at the path, or (for a caller that did not
    // prepare the path, as `SpecFile::train_settings` does) an older copy
    // beside it that rotation would move, is resumed or given up, never
    // replaced unasked.
    if let (Some(_), Some(path), None, false) = (checkpoint, &checkpoint_path, &settings.resume_from, settings.fresh) {
        let copy = || crate::checkpoint::older_copies(path).into_iter().next();
        let there = if path.is_file() { Some(path.clone()) } else { given.is_none().then(copy).flatten() };
        if let Some(there) = there {
            return Err(TrainError::CheckpointExists { path: there });
        }
    }
    let writer = match (checkpoint, &checkpoint_path) {
        (Some(c), Some(path)) => Some(CheckpointWriter::try_spawn_with_keep(c.keep).map_err(|source| {
            TrainError::Checkpoint(crate::checkpoint::CheckpointError::Io { path: path.clone(), source })
        })?),
        _ => None,
    };
    let mut checkpoint_failures = 0usize;
    // The epoch whose end the last checkpoint holds, once handed to the writer.
    let mut saved_end: Option<usize> = None;
    // A fresh start's first save replaces the discarded run's checkpoints,
    // once it is whole.
    if let (Some(writer), Some(path), true) =
        (&writer, &checkpoint_path, settings.fresh && settings.resume_from.is_none())
    {
        writer.replace_at_next_save(path.clone());
    }
    if let Some(path) = &checkpoint_path {
        // Left by an earlier process that died mid-write; never a checkpoint.
        let _ = remove_stray_temps(path);
    }

    // Early stopping added on resume takes the resumed weights as its best.
    let mut best_is_resumed = false;
    // The checkpoint's weights and optimizer state on `ad`, its best weights on `inner`.
    let loss_written = loss_kind.written();
    let restore_on = |ckpt: &Checkpoint, model, optimizer, ad: &burn::DispatchDevice, inner: &burn::DispatchDevice| {
        let template = Model::init(&spec.model, t.seed, inner);
        resume::restore(ckpt, &spec.model, model, optimizer, &loss_written, template, (ad, inner))
    };
    if let Some(ckpt) = &settings.resume_from {
        let restored = restore_on(ckpt, model, optimizer, &ad_device, &inner_device)?;
        let s = restored.state;
        // The rows it trained on (`SpecFile::find_checkpoint` checks this
        // too; a checkpoint loaded by hand is checked here).
        if let Some(now) = &run_record.data {
            resume::check_data(&s, now)?;
        }
        (model, optimizer) = (restored.model, restored.optimizer);
        order_rng = Rng::new(s.order_rng);
        dropout_rng = Rng::new(s.dropout_rng);
        if let Some(stopper) = stopper.as_mut() {
            match &s.early_stop {
                Some(saved) => {
                    stopper.restore(saved);
                    best = restored.best;
                }
                // Early stopping added on resume: the weights resumed, and
                // their epoch's validation loss, are the best so far (the
                // epochs before them kept no weights to go back to). Weights
                // from partway through an epoch were never validated: no
                // best until that epoch ends.
                None => {
                    let whole = s.partial.is_none();
                    if let Some(last) = s.history.last().filter(|e| whole && e.val_loss.is_finite()) {
                        stopper.restore(&StopState { best: last.val_loss, best_epoch: Some(s.epoch), bad_epochs: 0 });
                        best_is_resumed = true;
                    }
                }
            }
        }
        saved_scale = s.loss_scale.clone();
        resumed_ran = s.ran.clone();
        // A run that stopped early goes on when the spec's early stopping
        // now lets it (its patience raised, or early stopping removed); one
        // that had not stopped stops here when the spec's patience, now
        // lowered, is used up already (as a run with it from the start
        // would have stopped). A program's own strategy is asked only of a
        // run that stopped.
        let spec_rule = settings.early_stopping.is_none();
        let still_stopped = (s.stopped_early || spec_rule) && stopper.as_ref().is_some_and(|st| st.exhausted());
        // Weights that have taken steps of the epoch after the last one asked
        // for are not the model of those epochs.
        if let (Some(partial), false) = (&s.partial, still_stopped) {
            if t.epochs.value <= s.epoch {
                return Err(TrainError::Resume(ResumeError::PartwayPastTheEnd {
                    epoch: s.epoch,
                    steps: partial.steps,
                    epochs: t.epochs.value,
                }));
            }
        }
        (stopped_early, first_epoch, steps_taken, history) =
            (still_stopped, s.epoch + 1, s.steps, History::new(s.history));
        partial = s.partial;
        on_event(TrainEvent::Resumed { path: checkpoint_path.as_deref(), epoch: s.epoch, history: &history });
    }
    let resumed_after = settings.resume_from.as_ref().map(|_| first_epoch - 1);
    // The epoch of the checkpoint handed to the writer whose write is not
    // known to have ended, and of the last one known written whole.
    let (mut in_flight, mut written): (Option<usize>, Option<usize>) = (None, resumed_after);
    // The engine takes the weights, the optimizer state and the scaler from here on.
    let mut engine: Box<dyn Engine> = match engine_kind {
        EngineKind::Native => {
            let engine = NativeEngine::from_burn(spec, &model, &optimizer, &inner_device);
            // The engine holds its own copies: a resumed optimizer's state
            // is not kept twice through the run.
            drop((model, optimizer));
            Box::new(engine.map_err(ResumeError::Incomplete)?)
        }
        EngineKind::Burn => {
            // Every replica's engine alike, from its own model and optimizer state.
            let update =
                settings.update.unwrap_or_else(|| Update::plan(&t.optimizer.value, precision.scaler.is_some()));
            let burn_engine = |model, optimizer, on: &Device, ad: burn::DispatchDevice| {
                let scaler = precision.scaler.as_ref().map(|c| LossScaler::new(c, saved_scale.as_ref(), &ad));
                BurnEngine::new(model, optimizer, scaler, half, loss_kind, data.n_features(), on)
                    .on(ad, t.checkpoint_activations.value)
                    .with_clip(t.clip.as_ref().map(|c| c.value))
                    .with_update(update, &t.optimizer.value)
                    .map_err(|e| TrainError::Resume(ResumeError::Incomplete(e)))
            };
            let engine = burn_engine(model, optimizer, device, ad_device.clone())?;
            if settings.replicas.is_empty() {
                Box::new(engine)
            } else {
                // The other replicas start from the same weights and state:
                // the same seed, or the same checkpoint, on their own devices.
                let mut others = Vec::with_capacity(settings.replicas.len());
                for on in &settings.replicas {
                    let ad = if t.checkpoint_activations.value { on.autodiff_checkpointed() } else { on.autodiff() };
                    let mut model = Model::init(&spec.model, t.seed, &ad);
                    let mut optimizer = AnyOptimizer::new(&t.optimizer.value);
                    if let Some(ckpt) = &settings.resume_from {
                        let restored = restore_on(ckpt, model, optimizer, &ad, &on.inner())?;
                        (model, optimizer) = (restored.model, restored.optimizer);
                    }
                    others.push((burn_engine(model, optimizer, on, ad)?, on.inner()));
                }
                Box::new(ParallelEngine::new(engine, others, &inner_device, &ad_device).map_err(TrainError::Parallel)?)
            }
        }
    };
    if best_is_resumed {
        best = Some(engine.model());
    }
    let last_epoch = if stopped_early { 0 } else { t.epochs.value };
    engine.set_profiling(settings.profile);
    engine.expect_rows(batch_size.min(data.train.len()));
    // A software adapter (lavapipe) runs half products, slower than fp32's:
    // the verdict advises them only where the device has them in hardware.
    let software = matches!(&device.kind,
        kynml_backend::DeviceKind::Wgpu(a) if a.kind == kynml_backend::WgpuAdapterKind::Cpu);
    let mut profile = settings.profile.then(|| Profile {
        synchronised: engine.kind() == EngineKind::Burn && device.has_fusion(),
        half_precision: half.is_some(),
        cores: std::thread::available_parallelism().map_or(0, usize::from),
        bf16: !software && super::precision::runs_on(super::precision::Compute::Bf16, device),
        fp16: !software && super::precision::runs_on(super::precision::Compute::Fp16, device),
        step_flop: 6.0 * crate::model::summarize(&spec.model).multiply_adds as f64 * batch_size.min(n_train) as f64,
        slow_rate: match &device.kind {
            kynml_backend::DeviceKind::Cpu { .. } => 0.0,
            kynml_backend::DeviceKind::Wgpu(a) if a.kind == kynml_backend::WgpuAdapterKind::Cpu => {
                super::profile::SLOW_SOFTWARE_RATE
            }
            _ => super::profile::SLOW_GPU_RATE,
        },
        native: engine.kind() == EngineKind::Native,
        cpu_replicas: !settings.replicas.is_empty()
            && std::iter::once(device)
                .chain(&settings.replicas)
                .all(|d| matches!(d.kind, kynml_backend::DeviceKind::Cpu { .. })),
        ..Profile::default()
    });

    let started = Instant::now();
    // On CUDA, the GPU's busy share and memory from NVML; without NVML
    // "what runs" has said so, and training goes on unsampled.
    let mut gpu_monitor = match &device.kind {
        kynml_backend::DeviceKind::Cuda(gpu) => super::gpu_monitor::GpuMonitor::start(gpu, started).ok(),
        _ => None,
    };
    let (mut total_samples, mut total_step_secs) = (0usize, 0.0f64);
    // This process's first step and first epoch's steps: their rows and
    // seconds; and how many epochs it stepped in.
    let mut first_step: Option<(usize, f64)> = None;
    let mut first_epoch_steps: Option<(usize, f64)> = None;
    let mut epochs_stepped = 0usize;
    // The evaluation of the weights the engine holds now, when this process trained them.
    let mut last_outputs = None;
    for epoch in first_epoch..=last_epoch {
        let lr = lr_at(t.optimizer.value.lr(), t.scheduler.as_ref().map(|s| &s.value), epoch - 1);
        // An interrupted epoch resumes with the same order, after its done steps.
        let resumed = partial.take();
        if let Some(p) = &resumed {
            order_rng = Rng::new(p.order_rng);
        }
        let order_state = order_rng.state();
        let mut order: Vec<usize> = (0..n_train).collect();
        order_rng.shuffle(&mut order);
        let devices = settings.replicas.len() + 1;
        // An interrupted epoch goes on from the first row its done steps did
        // not take, in batches of this run's size (the same batches as
        // before when the batch is the same; another batch, accumulation
        // or device count is the person's choice, and no row is skipped or
        // taken twice).
        let (done, skip) = match &resumed {
            Some(p) => (p.steps, p.rows.unwrap_or(p.steps * batch_size).min(n_train)),
            None => (0, 0),
        };
        let max_steps = settings.max_steps_per_epoch.map(|m| m.saturating_sub(done));
        let tail = skip > 0;
        let mut batches = epoch_batches(&order[skip..], batch_size, needs_rows, devices, max_steps, tail);
        if settings.shapes_only && batches.len() > 2 {
            let last = batches.pop();
            batches.truncate(1);
            batches.extend(last);
        }
        let steps = done + batches.len();
        if let Some(p) = profile.as_mut() {
            p.steps_per_epoch = steps;
        }
        // Which batches share an optimizer step (`accumulate`): a resumed
        // epoch restarted at a step's boundary, so its grouping starts anew.
        let parts = parts_of(&batches.iter().map(Vec::len).collect::<Vec<_>>(), t.accumulate.value);
        // A stop asked for between epochs (after a validation, say) stops
        // here, at the boundary: no step of this epoch is taken, and the
        // checkpoint is the end of the last one, as if it had been due.
        if done == 0 && settings.stop.as_ref().is_some_and(|stop| stop.load(Ordering::SeqCst)) {
            let (mut saved, mut queued) = (None, false);
            // The last epoch's end is on disk already, as the rule saved it:
            // saving it again would push the oldest kept copy out with a
            // copy of the newest. Its write is waited for; failed, it is
            // saved again here.
            let kept = match (&writer, &checkpoint_path) {
                (Some(writer), Some(path)) if saved_end == Some(epoch - 1) => match writer.flush() {
                    Ok(()) => Some(path.clone()),
                    Err(e) => {
                        on_event(TrainEvent::CheckpointFailed { error: e.to_string() });
                        None
                    }
                },
                _ => None,
            };
            if kept.is_some() {
                saved = kept;
            } else if let (Some(writer), Some(path)) = (&writer, &checkpoint_path) {
                let early_stop = stopper.as_ref().map(|s| s.state());
                let at = (epoch - 1, steps_taken, &order_rng, &dropout_rng);
                let mut state = loop_state(&run_record, at, early_stop, engine.loss_scale());
                // The order generator as the epoch found it, before its shuffle.
                state.order_rng = order_state;
                // No step ran here since the resume: its weights ran where it says.
                if settings.resume_from.is_some() && epoch == first_epoch {
                    state.ran.clone_from(&resumed_ran);
                }
                let snapshot = engine.snapshot(best.as_ref(), history.saved_state(&state));
                // Resumed at this epoch's start and stopped before a step:
                // what it would save is what it resumed from, which the
                // path holds unless that came from elsewhere. Saved again,
                // it would push the oldest kept copy out with a copy of the
                // newest (nothing is in flight: this process saved nothing).
                if settings.resume_from.is_some() && epoch == first_epoch && holds(path, &snapshot, &model_hash) {
                    saved = Some(path.clone());
                } else {
                    StopSave { saved, queued } = save_at_stop(writer, path, snapshot, &model_hash, on_event);
                }
            }
            if let Some(p) = profile.as_mut() {
                if let Some(m) = gpu_monitor.take() {
                    p.gpu = m.finish();
                }
                // The stop's save waited for every earlier write.
                if let Some(writer) = &writer {
                    attach_writes(p, &writer.writes(), usize::from(queued), started);
                }
            }
            let profile = profile.take().map(Box::new);
            return Err(TrainError::Interrupted {
                epoch,
                step: 0,
                checkpoint: saved,
                profile,
                model: Box::new(Reached(engine.model())),
            });
        }
        on_event(TrainEvent::EpochStart { epoch, epochs: t.epochs.value, steps, lr });

        let epoch_start = Instant::now();
        let mut tally = Tally::default();
        // Rows of the order taken, and steps skipped before this process.
        let mut taken = skip;
        let mut skipped_before = 0;
        if let Some(p) = resumed {
            tally = Tally::resumed(&p, engine.kind() == EngineKind::Burn, &ad_device);
            skipped_before = p.skipped;
            // The pre-clip norms of the steps before the interruption: the
            // epoch's mean is over all of its steps, summed in their order.
            if let Some(norms) = p.grad_norms {
                engine.seed_grad_norms(norms);
            }
        }
        let mut data_wait = 0.0f64;
        let mut epoch_batches = loader.epoch(scope, data, batches).enumerate();
        // The step after which a stop was asked for, if one was.
        let mut stopped_at = None;
        loop {
            let waiting = Instant::now();
            let Some((step, batch)) = epoch_batches.next() else { break };
            let wait = waiting.elapsed().as_secs_f64();
            data_wait += wait;
            let part = parts.get(step).copied().unwrap_or(Part::WHOLE);
            let step = done + step + 1;
            let rows = batch.len();
            taken += rows;
            let prepared = batch.prepared.map(|p| {
                let since = |t: Instant| t.saturating_duration_since(started).as_secs_f64();
                (p.worker, since(p.start), p.end.saturating_duration_since(p.start).as_secs_f64())
            });
            let stepping = Instant::now();
            let stepped = engine.step(batch, lr, &mut dropout_rng, part);
            if let Some(why) = engine.failure() {
                return Err(TrainError::Parallel(why));
            }
            if first_step.is_none() {
                first_step = Some((rows, epoch_start.elapsed().as_secs_f64()));
            }
            if let (Some(p), Some(phases)) = (profile.as_mut(), engine.last_phases()) {
                p.steps.push(StepTiming {
                    epoch,
                    step,
                    start: waiting.duration_since(started).as_secs_f64(),
                    wait,
                    phases,
                    total: stepping.elapsed().as_secs_f64(),
                    prepared,
                });
            }
            // `Some(false)`: skipped on overflow; `None`: the device knows.
            let finite = tally.add(stepped, rows, part.last);

            // A stop waits for the end of an accumulated step, so that a
            // checkpoint never holds half of one.
            if part.last && settings.stop.as_ref().is_some_and(|stop| stop.load(Ordering::SeqCst)) {
                stopped_at = Some(step);
                break;
            }
            let samples_per_sec = |tally: &Tally| tally.rows as f64 / epoch_start.elapsed().as_secs_f64();
            if finite == Some(false) {
                on_event(TrainEvent::Step { epoch, step, steps, loss: None, samples_per_sec: samples_per_sec(&tally) });
                continue;
            }
            if let Some(Err(e)) = writer.as_ref().map(CheckpointWriter::poll) {
                checkpoint_failures += 1;
                in_flight = None;
                on_event(TrainEvent::CheckpointFailed { error: e.to_string() });
            }

            let read = step.is_multiple_of(READ_EVERY) || step == steps;
            let mean_loss = if read {
                tally.settle();
                // Every step so far may have been skipped on overflow.
                let mean = (tally.seen > 0).then(|| tally.loss.read() / tally.seen as f64);
                if let Some(value) = mean.filter(|m| !m.is_finite()) {
                    return Err(TrainError::NonFiniteLoss { epoch, step, value });
                }
                mean
            } else {
                None
            };
            on_event(TrainEvent::Step {
                epoch,
                step,
                steps,
                loss: mean_loss,
                samples_per_sec: samples_per_sec(&tally),
            });
        }
        let step_secs = epoch_start.elapsed().as_secs_f64();
        tally.settle();
        steps_taken += tally.take_steps();
        let (seen, skipped) = (tally.seen, tally.skipped);
        let train_loss = if seen == 0 { f64::NAN } else { tally.loss.read() / seen as f64 };
        // Throughput counts every row this process stepped on, a step
        // skipped on overflow included: its work was done all the same.
        total_samples += tally.rows;
        total_step_secs += step_secs;
        first_epoch_steps.get_or_insert((tally.rows, step_secs));
        epochs_stepped += 1;

        // The GPU's samples of the epoch's steps, before the evaluation's
        // (a stopped run's profile keeps them all).
        let gpu = match stopped_at {
            None => gpu_monitor.as_mut().and_then(|m| super::gpu_monitor::summarize(&m.take())),
            Some(_) => None,
        };
        let evaluating = Instant::now();
        // A stop asked for during validation cuts it short: the run stops
        // as after the epoch's last step, which the next run's validation
        // follows.
        let outputs = match stopped_at {
            None => engine.evaluate(data, Split::Valid, settings.stop.as_deref()),
            Some(_) => None,
        };
        let Some(outputs) = outputs else {
            let step = stopped_at.unwrap_or(steps);
            // Save this very point: the next run redoes nothing and skips nothing.
            let here = PartialEpoch {
                order_rng: order_state,
                steps: step,
                rows: Some(taken),
                loss_sum: tally.loss.read(),
                seen: tally.seen,
                skipped: tally.skipped,
                grad_norms: engine.grad_norms(),
            };
            let (mut saved, mut queued) = (None, false);
            if let (Some(writer), Some(path)) = (&writer, &checkpoint_path) {
                let early_stop = stopper.as_ref().map(|s| s.state());
                let at = (epoch - 1, steps_taken, &order_rng, &dropout_rng);
                let mut state = loop_state(&run_record, at, early_stop, engine.loss_scale());
                state.partial = Some(here);
                let snapshot = engine.snapshot(best.as_ref(), history.saved_state(&state));
                StopSave { saved, queued } = save_at_stop(writer, path, snapshot, &model_hash, on_event);
            }
            // What was profiled so far is the run's to keep: a slow run
            // is the one a person profiles, then stops.
            if let Some(p) = profile.as_mut() {
                p.skipped_steps += tally.skipped.saturating_sub(skipped_before);
                if let Some(m) = gpu_monitor.take() {
                    p.gpu = m.finish();
                }
                // The stop's save waited for every earlier write.
                if let Some(writer) = &writer {
                    attach_writes(p, &writer.writes(), usize::from(queued), started);
                }
            }
            let profile = profile.take().map(Box::new);
            let model = Box::new(Reached(engine.model()));
            return Err(TrainError::Interrupted { epoch, step, checkpoint: saved, profile, model });
        };
        if let Some(p) = profile.as_mut() {
            let start = evaluating.duration_since(started).as_secs_f64();
            p.evals.push(EvalTiming { epoch, start, seconds: evaluating.elapsed().as_secs_f64() });
            p.skipped_steps += skipped.saturating_sub(skipped_before);
        }
        let memory = device.memory();
        let record = EpochRecord {
            epoch,
            lr,
            train_loss,
            val_loss: outputs.loss,
            metrics: evaluate::compute_metrics(&outputs, &data.valid.labels, loss_kind, &metrics, n_classes),
            // The rows this process stepped on, over its time; NaN for an
            // epoch resumed with its validation alone left (it said 0).
            samples_per_sec: if tally.rows == 0 { f64::NAN } else { tally.rows as f64 / step_secs },
            seconds: epoch_start.elapsed().as_secs_f64(),
            loss_scale: engine.loss_scale().map(|s| s.scale),
            skipped_steps: skipped,
            grad_norm: engine.grad_norms().and_then(NormSum::mean),
            data_wait: Some(data_wait),
            device_reserved: memory.map(|m| m.reserved),
            device_in_use: memory.map(|m| m.in_use),
            peak_rss: crate::bench::peak_rss(),
            gpu_busy: gpu.map(|g| g.busy),
            gpu_memory_peak: gpu.map(|g| g.peak_memory),
            ran: run_record.ran.clone(),
        };
        on_event(TrainEvent::EpochEnd(&record));
        if let Some(phases) = profile.as_ref().and_then(|p| p.epoch_summary(epoch)) {
            on_event(TrainEvent::EpochProfiled { epoch, phases });
        }
        history.push(record);

        let observed = outputs.loss;
        // The last epoch's evaluation is the final one when the last
        // weights are kept: the run does not validate them twice.
        last_outputs = Some(outputs);
        if let Some(stopper) = stopper.as_mut() {
            match stopper.observe(epoch, observed) {
                Verdict::Improved => {
                    // The earlier best is freed before the new one is made:
                    // one copy of the best weights is kept, never two.
                    drop(best.take());
                    best = Some(engine.model());
                }
                Verdict::Wait => {}
                Verdict::Stop => {
                    on_event(TrainEvent::EarlyStop { epoch, best_epoch: stopper.best_epoch() });
                    stopped_early = true;
                }
            }
        }

        // Checkpoint when the rule says (every `every_n` epochs and at the
        // end), after early stopping has had its say, so that a resume
        // starts the next epoch.
        if let (Some(c), Some(rule), Some(writer), Some(path)) = (checkpoint, &checkpointing, &writer, &checkpoint_path)
        {
            if rule.due(epoch, last_epoch, stopped_early) {
                let early_stop = stopper.as_ref().map(|s| s.state());
                let at = (epoch, steps_taken, &order_rng, &dropout_rng);
                let mut state = loop_state(&run_record, at, early_stop, engine.loss_scale());
                state.stopped_early = stopped_early;
                let waited = Instant::now();
                let snapshot = engine.snapshot(best.as_ref(), history.saved_state(&state));
                // An earlier write's failure belongs to its own epoch: this
                // checkpoint is announced when it was handed over (or, saved
                // synchronously, written).
                let done = writer.hand_off(path.clone(), snapshot, model_hash.clone(), !c.async_save);
                for e in [done.previous.as_ref().err(), done.this.as_ref().err()].into_iter().flatten() {
                    checkpoint_failures += 1;
                    on_event(TrainEvent::CheckpointFailed { error: e.to_string() });
                }
                let handed = done.this.is_ok();
                if done.previous.is_ok() {
                    written = in_flight.or(written);
                }
                in_flight = None;
                match (handed, c.async_save) {
                    (true, true) => in_flight = Some(epoch),
                    (true, false) => written = Some(epoch),
                    (false, _) => {}
                }
                // A checkpoint refused before the writer took it has no write to time.
                if let Some(p) = profile.as_mut().filter(|_| done.queued) {
                    let start = waited.saturating_duration_since(started).as_secs_f64();
                    p.checkpoints.push(CheckpointTiming {
                        epoch,
                        start,
                        handoff: waited.elapsed().as_secs_f64(),
                        write: None,
                        async_save: c.async_save,
                    });
                }
                if handed {
                    saved_end = Some(epoch);
                    on_event(TrainEvent::CheckpointSaved { epoch, path, seconds: waited.elapsed().as_secs_f64() });
                }
            }
        }
        if stopped_early {
            break;
        }
    }
    if let (Some(p), Some(m)) = (profile.as_mut(), gpu_monitor.take()) {
        p.gpu = m.finish();
    }
    // Training ends when the last write is on disk.
    match writer.as_ref().map(CheckpointWriter::flush) {
        Some(Err(e)) => {
            checkpoint_failures += 1;
            on_event(TrainEvent::CheckpointFailed { error: e.to_string() });
        }
        Some(Ok(())) => written = in_flight.or(written),
        None => {}
    }
    // The writer's writes, one per checkpoint of this run, in order.
    if let (Some(p), Some(writer)) = (profile.as_mut(), &writer) {
        attach_writes(p, &writer.writes(), 0, started);
    }

    let (final_model, outputs) = match (stopper.is_some(), best) {
        // The engine evaluates (the native engine with its own kernels, far
        // faster than Burn's CPU backend), its own weights or the best ones.
        (false, _) | (true, None) => {
            let outputs = match last_outputs.take() {
                Some(outputs) => outputs,
                None => evaluate::whole(engine.evaluate(data, Split::Valid, None)),
            };
            (engine.into_model(), outputs)
        }
        (true, Some(best)) => {
            let outputs = engine.evaluate_model(&best, data, Split::Valid, loss_kind, &inner_device);
            (best, outputs)
        }
    };
    let mut final_metrics = evaluate::compute_metrics(&outputs, &data.valid.labels, loss_kind, &metrics, n_classes);
    final_metrics.insert("val_loss".into(), outputs.loss);
    // The run's start is left out of its speed where it ran at less than
    // half the rest's pace (a GPU tuning and compiling its kernels).
    let slower = |l: &LeftOut| {
        let (rows, secs) = (total_samples.saturating_sub(l.rows), total_step_secs - l.seconds);
        l.rows > 0 && rows > 0 && secs > 0.0 && l.seconds / l.rows as f64 > 2.0 * secs / rows as f64
    };
    let left_out = match (epochs_stepped, first_epoch_steps) {
        (2.., Some((rows, seconds))) => Some(LeftOut { what: "epoch", seconds, rows }),
        (1, _) => first_step.map(|(rows, seconds)| LeftOut { what: "step", seconds, rows }),
        _ => None,
    }
    .filter(slower);
    Ok(TrainResult {
        model: final_model,
        history: history.into_records(),
        final_metrics,
        best_epoch: stopper.and_then(|s| s.best_epoch()),
        stopped_early,
        seconds: started.elapsed().as_secs_f64(),
        samples_per_sec: match left_out {
            _ if total_samples == 0 => f64::NAN,
            Some(l) => (total_samples - l.rows) as f64 / (total_step_secs - l.seconds),
            None => total_samples as f64 / total_step_secs.max(1e-9),
        },
        left_out,
        resumed_after,
        checkpoint_failures,
        checkpoint_epoch: written,
        precision,
        engine: engine_kind,
        profile,
    })
}

/// An epoch's running loss and counts. Steps whose outcome the device
/// alone knows (loss scaling with KynML's update) are counted on the
/// device, and read back with the loss at the loop's read points.
#[derive(Default)]
struct Tally {
    loss: LossSum,
    /// Rows of the steps taken, and steps skipped on overflow.
    seen: usize,
    skipped: usize,
    /// Rows of every step, taken or not (for the progress line).
    rows: usize,
    /// Optimizer steps taken since the loop last took them.
    steps: u64,
    /// On the device, since the last read: rows taken, steps skipped and
    /// optimizer steps taken.
    pending: Option<[Tensor<Kb, 1>; 3]>,
}

impl Tally {
    /// The counts saved by an interrupted epoch (see [`LossSum::resumed`]).
    fn resumed(p: &PartialEpoch, on_device: bool, device: &burn::DispatchDevice) -> Self {
        let loss = if p.seen > 0 { LossSum::resumed(p.loss_sum, on_device, device) } else { LossSum::default() };
        Tally { loss, seen: p.seen, skipped: p.skipped, ..Tally::default() }
    }

    /// Counts a step of `rows`, the last part of its optimizer step when
    /// `last`; says whether it was taken, `None` when only the device knows.
    fn add(&mut self, stepped: Option<StepLoss>, rows: usize, last: bool) -> Option<bool> {
        self.rows += rows;
        let taken = match stepped {
            Some(StepLoss::Host(loss)) => self.loss.add_host(loss, rows),
            Some(StepLoss::Device(loss)) => self.loss.add_device(loss, rows),
            Some(StepLoss::Flagged { loss, taken }) => {
                // A skipped step's loss is not part of the epoch's mean: a
                // select, since an overflowed loss may be infinite.
                let skipped = taken.clone().lower_elem(0.5);
                self.loss.add_device(loss.mask_fill(skipped, 0.0), rows);
                let counts = [
                    taken.clone().mul_scalar(rows as f64),
                    taken.clone().neg().add_scalar(1.0),
                    taken.mul_scalar(if last { 1.0 } else { 0.0 }),
                ];
                self.pending = Some(match self.pending.take() {
                    Some([a, b, c]) => {
                        let [x, y, z] = counts;
                        [a + x, b + y, c + z]
                    }
                    None => counts,
                });
                return None;
            }
            None => false,
        };
        if taken {
            self.seen += rows;
            self.steps += u64::from(last);
        } else {
            self.skipped += 1;
        }
        Some(taken)
    }

    /// Reads the device's counts back (exact: a few steps' worth in f32).
    fn settle(&mut self) {
        let Some(pending) = self.pending.take() else { return };
        let values =
            Tensor::cat(pending.to_vec(), 0).into_data().convert::<f32>().into_vec::<f32>().unwrap_or_default();
        if let [seen, skipped, steps] = values[..] {
            self.seen += seen.round() as usize;
            self.skipped += skipped.round() as usize;
            self.steps += steps.round() as u64;
        }
    }

    /// The optimizer steps counted since the last call.
    fn take_steps(&mut self) -> u64 {
        std::mem::take(&mut self.steps)
    }
}

/// The epoch's summed loss (each batch's mean times its rows). The Burn
/// engine keeps its part on the device, so that a step does not wait for
/// the loss to be read back; the native engine's is on the host.
#[derive(Default)]
struct LossSum {
    device: Option<Tensor<Kb, 1>>,
    host: f64,
}

impl LossSum {
    /// The sum saved by an interrupted epoch, kept where the engine keeps
    /// its own, so that the resumed epoch adds up exactly as an
    /// uninterrupted one would.
    fn resumed(sum: f64, on_device: bool, device: &burn::DispatchDevice) -> Self {
        if on_device {
            LossSum { device: Some(Tensor::from_floats([sum as f32], device)), host: 0.0 }
        } else {
            LossSum { device: None, host: sum }
        }
    }

    /// Adds a step's mean loss (on the device); true, for the step counts.
    fn add_device(&mut self, loss: Tensor<Kb, 1>, rows: usize) -> bool {
        let weighted = loss.mul_scalar(rows as f64);
        self.device = Some(match self.device.take() {
            Some(sum) => sum + weighted,
            None => weighted,
        });
        true
    }

    /// Adds a step's mean loss (on the host); true, for the step counts.
    fn add_host(&mut self, loss: f64, rows: usize) -> bool {
        self.host += loss * rows as f64;
        true
    }

    /// The sum, read back from the device where it is there.
    fn read(&self) -> f64 {
        self.host + self.device.clone().map_or(0.0, IntoScalarF64::into_scalar_f64)
    }
}

/// The start of a run that its speed leaves out: this process's first
/// epoch's steps, or in a run of one epoch its first step, where it ran at
/// less than half the rest's pace. A GPU's first steps tune and compile the
/// kernels, and the device work they queue finishes in the steps after them
/// (a first step alone left out still left seconds of it in the speed), so
/// the first epoch is what is left out where there is another.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LeftOut {
    /// `"epoch"` or `"step"`.
    pub what: &'static str,
    /// Its time: the steps', their batches' waits included.
    pub seconds: f64,
    /// Its rows.
    pub rows: usize,
}

/// What [`train`] needs of the spec and the data before it allocates
/// anything: the values a run divides by, and the fit that
/// [`SpecFile::load_data`](crate::plan::SpecFile::load_data) checks (a
/// dataset built in code, or a spec changed after it was read, has not been).
fn check_fit(spec: &Spec, data: &Dataset) -> Result<(), TrainError> {
    let t = &spec.train;
    let mut problems = Vec::new();
    if t.batch.value == 0 {
        problems.push("`batch` is 0: a batch holds at least 1 row".to_string());
    }
    if t.accumulate.value == 0 {
        problems.push("`accumulate` is 0: a step takes at least 1 batch".to_string());
    }
    if !t.loss.value.is_classification() && data.class_names().is_some() {
        problems
            .push(format!("`loss = {}` predicts numbers, but the data's targets are classes", t.loss.value.written()));
    }
    if t.epochs.value == 0 {
        problems.push("`epochs` is 0: a run trains at least 1 epoch".to_string());
    }
    problems.extend(data_problems(data));
    let source = &spec.dataset.source.value;
    problems.extend(crate::plan::check_fit(spec, data, source).into_iter().map(|d| match d.help {
        Some(help) => format!("{} ({help})", d.message),
        None => d.message,
    }));
    if problems.is_empty() {
        Ok(())
    } else {
        Err(TrainError::DoesNotFit { problems })
    }
}

/// Where a dataset's parts do not hold together (its fields are public:
/// one edited in code is checked here, where the run would otherwise fail
/// deep inside a step): each part's values fill its rows, a target per
/// row, of the data's kind, a class below the number of classes; and the
/// training part holds a row.
fn data_problems(data: &Dataset) -> Vec<String> {
    use crate::data::Labels;
    let (width, classes) = (data.n_features(), data.class_names().map(<[String]>::len));
    let mut problems = Vec::new();
    if data.train.is_empty() {
        problems.push("the training part holds no rows".to_string());
    }
    for (name, part) in [("training", &data.train), ("validation", &data.valid)] {
        let rows = part.len();
        if part.features.len() != rows * width {
            problems.push(format!("the {name} part holds {} values for {rows} rows of {width}", part.features.len()));
        }
        let targets = match &part.labels {
            Labels::Values(v) => v.len(),
            Labels::Classes(c) => c.len(),
        };
        if targets != rows {
            problems.push(format!("the {name} part holds {targets} targets for {rows} rows"));
        }
        match (&part.labels, classes) {
            (Labels::Values(_), Some(_)) => {
                problems.push(format!("the {name} part's targets are numbers, but the data's are classes"))
            }
            (Labels::Classes(_), None) => {
                problems.push(format!("the {name} part's targets are classes, but the data's are numbers"))
            }
            (Labels::Classes(c), Some(n)) => {
                if let Some((row, class)) = c.iter().enumerate().find(|(_, &c)| c as usize >= n) {
                    problems.push(format!(
                        "the {name} part's row {row} has class {class}, but the data has {n} classes (0 to {})",
                        n.saturating_sub(1)
                    ));
                }
            }
            (Labels::Values(_), None) => {}
        }
    }
    problems
}

/// The writer's write of each checkpoint in `profile`, from its `writes()`
/// in order: the last `later` writes (the save at a stop, which the
/// profile does not count) came after them. Call it when no write is in
/// flight.
fn attach_writes(profile: &mut Profile, writes: &[(Instant, Instant)], later: usize, started: Instant) {
    let since = |t: Instant| t.saturating_duration_since(started).as_secs_f64();
    let ours = &writes[..writes.len().saturating_sub(later)];
    // Paired from the last: the profile's checkpoints are those the writer took.
    for (c, (start, end)) in profile.checkpoints.iter_mut().rev().zip(ours.iter().rev()) {
        c.write = Some((since(*start), end.saturating_duration_since(*start).as_secs_f64()));
    }
}

/// The checkpoint of a stopped run, written before the run returns: its
/// path when it is whole. An earlier background write's failure is said on
/// its own, since this checkpoint may still be whole.
/// Every earlier write has ended when it returns; the writer logged this
/// one's write too ([`CheckpointWriter::writes`]) when `queued` says it took it.
fn save_at_stop(
    writer: &CheckpointWriter,
    path: &std::path::Path,
    snapshot: Checkpoint,
    model_hash: &str,
    on_event: &mut dyn FnMut(TrainEvent),
) -> StopSave {
    let done = writer.hand_off(path.to_path_buf(), snapshot, model_hash.to_string(), true);
    for e in [done.previous.as_ref().err(), done.this.as_ref().err()].into_iter().flatten() {
        on_event(TrainEvent::CheckpointFailed { error: e.to_string() });
    }
    StopSave { saved: done.this.is_ok().then(|| path.to_path_buf()), queued: done.queued }
}

/// Whether the checkpoint at `path` is `snapshot`, to the byte.
fn holds(path: &std::path::Path, snapshot: &Checkpoint, model_hash: &str) -> bool {
    match (std::fs::read(path), crate::checkpoint::format::try_encode(snapshot, model_hash)) {
        (Ok(there), Ok(this)) => there == this,
        _ => false,
    }
}

/// What [`save_at_stop`] did.
struct StopSave {
    /// The checkpoint's path, when it is whole.
    saved: Option<std::path::PathBuf>,
    /// Whether the writer took it (and logged its write, whole or not).
    queued: bool,
}

/// The run's record (`run_record`) at where the loop stands: the last
/// finished epoch, the optimizer steps taken, the order and dropout
/// generators, early stopping's and the loss scaler's progress; the history
/// is [`History::saved_state`]'s.
fn loop_state(
    run: &LoopState,
    (epoch, steps, order, dropout): (usize, u64, &Rng, &Rng),
    early_stop: Option<StopState>,
    loss_scale: Option<ScaleState>,
) -> LoopState {
    LoopState {
        epoch,
        steps,
        order_rng: order.state(),
        dropout_rng: dropout.state(),
        early_stop,
        loss_scale,
        history: Vec::new(),
        ..run.clone()
    }
}

/// The kind of `device` as a checkpoint records it: `cpu`, `cuda` or `wgpu`.
pub fn device_kind(device: &Device) -> String {
    match device.kind {
        kynml_backend::DeviceKind::Cpu { .. } => "cpu",
        kynml_backend::DeviceKind::Cuda(_) => "cuda",
        kynml_backend::DeviceKind::Wgpu(_) => "wgpu",
    }
    .into()
}

// A service trains on a worker thread and hands the outcome back (the
// spec, data and settings moved there): keep them movable across threads.
const _: fn() = || {
    fn sent<T: Send>() {}
    sent::<TrainResult>();
    sent::<TrainError>();
    sent::<TrainSettings>();
    sent::<crate::plan::SpecFile>();
    sent::<Dataset>();
};

/// The spec's metrics, or the usual ones for the task when it names none.
pub fn metrics_for(spec: &Spec, loss: Loss) -> Vec<Metric> {
    if !spec.evaluate.metrics.is_empty() {
        return spec.evaluate.metrics.iter().map(|m| m.value).collect();
    }
    if loss.is_classification() {
        vec![Metric::Accuracy, Metric::Precision, Metric::Recall, Metric::F1]
    } else {
        vec![Metric::Mae, Metric::Rmse, Metric::R2]
    }
}

/// Where each batch falls in its optimizer step: `n` batches a step, each
/// weighted by its share of the step's rows (the last step of an epoch may
/// hold fewer); `n = 1` gives whole steps of weight 1.
fn parts_of(sizes: &[usize], n: usize) -> Vec<Part> {
    sizes
        .chunks(n.max(1))
        .flat_map(|group| {
            let rows: usize = group.iter().sum();
            let len = group.len();
            group.iter().enumerate().map(move |(i, r)| Part {
                weight: if len == 1 { 1.0 } else { *r as f64 / rows.max(1) as f64 },
                last: i + 1 == len,
            })
        })
        .collect()
}

/// The epoch's batches in `order`. With a batchnorm that `needs_rows` (one
/// value a channel a row: plain features, not a convolution's map), a last
/// batch that would leave a device fewer than 2 rows (`devices` share each
/// batch) is dropped, as PyTorch's `drop_last` would: such a batchnorm
/// cannot normalise one row. An
/// epoch of that one batch keeps it, unless `order` is the `tail` of an
/// epoch (a resumed one), whose earlier batches ran before.
fn epoch_batches(
    order: &[usize],
    batch: usize,
    needs_rows: bool,
    devices: usize,
    max_steps: Option<usize>,
    tail: bool,
) -> Vec<Vec<usize>> {
    let mut batches: Vec<Vec<usize>> = order.chunks(batch).map(<[usize]>::to_vec).collect();
    let least = 2 * devices.max(1);
    if needs_rows && (batches.len() > 1 || tail) && batches.last().is_some_and(|b| b.len() < least) {
        batches.pop();
    }
    if let Some(max) = max_steps {
        batches.truncate(max);
    }
    batches
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_cover_the_order_and_drop_a_lone_row_only_with_batchnorm() {
        let order: Vec<usize> = (0..9).collect();
        let b = epoch_batches(&order, 4, false, 1, None, false);
        assert_eq!(b, vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7], vec![8]]);
        let b = epoch_batches(&order, 4, true, 1, None, false);
        assert_eq!(b.len(), 2);
        assert_eq!(epoch_batches(&order, 4, false, 1, Some(1), false).len(), 1);
        // Two devices: a last batch of 3 rows would give one of them 1 row.
        let order: Vec<usize> = (0..11).collect();
        assert_eq!(epoch_batches(&order, 4, true, 2, None, false).len(), 2);
        assert_eq!(epoch_batches(&order, 4, false, 2, None, false).len(), 3);
        assert_eq!(epoch_batches(&order, 4, true, 1, None, false).len(), 3, "3 rows on one device are fine");
        // The tail of a resumed epoch: its lone short batch is still the epoch's last.
        assert_eq!(epoch_batches(&order[8..], 4, true, 2, None, true).len(), 0);
        assert_eq!(epoch_batches(&order[8..], 4, true, 2, None, false).len(), 1);
    }

    /// Dropout on a Burn backend keeps index ranges on the device in a
    /// thread-local; a service's thread that trained must not hold them (a
    /// transformer's take hundreds of MB of GPU memory) once `train` returns.
    #[test]
    fn train_lets_go_of_the_dropout_ranges_it_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let mut csv = String::from("a,b,y\n");
        for i in 0..64 {
            let (a, b) = ((i % 7) as f64 * 0.3, (i % 5) as f64 * 0.2);
            csv.push_str(&format!("{a},{b},{}\n", a - b));
        }
        std::fs::write(tmp.path().join("d.csv"), csv).unwrap();
        let spec = "dataset D:\n source = csv(\"d.csv\")\n target = \"y\"\n\
                    model M:\n input 2\n dense 8 relu\n dropout 0.3\n dense 1 linear\n\
                    train:\n model = M\n data = D\n loss = mse\n optimizer = sgd(lr=0.01)\n epochs = 1\n batch = 16\n";
        let path = tmp.path().join("s.kyn");
        std::fs::write(&path, spec).unwrap();
        let mut file = crate::plan::SpecFile::load(&path).unwrap();
        let data = file.load_data().unwrap();
        let cpu = kynml_backend::select(kynml_backend::DeviceChoice::Cpu).unwrap();
        let settings = TrainSettings { engine: EngineChoice::Burn, ..TrainSettings::default() };
        let result = train(&file.spec, &data, &cpu, &settings, &mut |_| {}).unwrap();
        assert_eq!(result.engine, EngineKind::Burn);
        assert_eq!(crate::model::dropout::kept_ranges(), 0);
    }
}
