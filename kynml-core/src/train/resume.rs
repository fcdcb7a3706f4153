//! What a checkpoint holds for the training loop, and how the loop gets it
//! back: weights, optimizer state, the loop's counters and generators, early
//! stopping and the epochs' history.
//!
//! Checkpoints are taken at epoch boundaries. Everything that decides the
//! next epoch is saved (the schedule is a function of the epoch, the data
//! order and dropout masks come from generators whose state is saved), so a
//! resumed run ends bit-identical to one that was never interrupted.
//!
//! Tensor names: `model.*` (the weights, see [`Model::tensors`]), `best.*`
//! (the best epoch's weights when early stopping is on) and `optim.*` (the
//! optimizer's per-parameter state). The rest is the JSON [`LoopState`].

use serde::{Deserialize, Serialize};

use crate::checkpoint::{Checkpoint, CheckpointError, NamedTensor};
use crate::model::{Model, StateError};
use crate::spec::types::ModelSpec;
use crate::train::events::EpochRecord;
use crate::train::optimizer::AnyOptimizer;
use burn::DispatchDevice;
use kynml_backend::Backend as Kb;

/// Name prefix of the model's weights in a checkpoint (`model.0.weight`).
pub const MODEL_PREFIX: &str = "model.";
/// Name prefix of the best epoch's weights, saved when early stopping is on and an epoch has
/// improved.
pub const BEST_PREFIX: &str = "best.";
/// Name prefix of the optimizer's per-parameter state (`optim.0.weight`).
pub const OPTIM_PREFIX: &str = "optim.";

/// The loop's own state at the end of an epoch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoopState {
    /// The last finished epoch (1-based).
    pub epoch: usize,
    /// Optimizer steps taken so far.
    pub steps: u64,
    /// The optimizer's name; its state only fits the same optimizer.
    pub optimizer: String,
    /// [`SplitMix64::state`](crate::rng::SplitMix64::state) of the data
    /// order and dropout generators.
    pub order_rng: u64,
    /// The dropout generator's state.
    pub dropout_rng: u64,
    /// Early stopping's progress; `None` when the run has no early stopping.
    pub early_stop: Option<StopState>,
    /// True when early stopping ended the run: there is nothing to resume.
    pub stopped_early: bool,
    /// The loss scaler's scale and run of finite steps, when it is on.
    #[serde(default)]
    pub loss_scale: Option<ScaleState>,
    /// Every finished epoch, so that a resumed run's report covers the
    /// whole training. Timings are not saved (they read back as NaN): two
    /// runs that reach the same state write the same bytes.
    #[serde(with = "saved_history")]
    pub history: Vec<EpochRecord>,
    /// The model block the checkpoint was written for, for error messages.
    pub model: String,
    /// Set when the run was interrupted inside epoch `epoch + 1`.
    #[serde(default)]
    pub partial: Option<PartialEpoch>,
    /// What drew the train/validation split and the normalisation; `None`
    /// in checkpoints from before it was saved.
    #[serde(default)]
    pub data: Option<DataOrigin>,
    /// The loss the history's losses and early stopping's best were
    /// measured in, as the spec writes it (`huber(delta=2)`); `None` in
    /// checkpoints from before it was saved.
    #[serde(default)]
    pub loss: Option<String>,
    /// The batch, accumulation and device count the run trained with;
    /// `None` in checkpoints from before it was saved.
    #[serde(default)]
    pub batching: Option<Batching>,
    /// The kind of device and the precision the steps ran in; `None` in
    /// checkpoints from before it was saved (left out, as it was then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ran: Option<Ran>,
}

/// Where and in what precision a run's steps ran. A resume elsewhere goes
/// on from the same weights, in its own steps: said, not refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ran {
    /// The device's kind: `cpu`, `cuda` or `wgpu`.
    pub device: String,
    /// The precision the products ran in (`fp32`, `bf16`, ...).
    pub precision: String,
}

impl Ran {
    /// What differs from `now`, in words with this run's (`fp32 on cpu
    /// (this run: bf16 on wgpu)`); `None` when nothing does.
    pub fn difference(&self, now: &Ran) -> Option<String> {
        let words = |r: &Ran| match (self.precision != now.precision, self.device != now.device) {
            (true, true) => format!("{} on {}", r.precision, r.device),
            (true, false) => r.precision.clone(),
            (false, true) => r.device.clone(),
            (false, false) => String::new(),
        };
        (self != now).then(|| format!("{} (this run: {})", words(self), words(now)))
    }
}

/// How a run cut its epochs into optimizer steps. A resume under other
/// values goes on from the same row, but is no longer the run an
/// uninterrupted one would have been: said, not refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Batching {
    /// The spec's `batch`.
    pub batch: usize,
    /// The spec's `accumulate`.
    pub accumulate: usize,
    /// The devices the batches were spread over (data-parallel replicas).
    pub devices: usize,
}

impl Batching {
    /// Each value that differs from `now`, in words with this run's value
    /// (`batch = 32 (this run: 64)`); empty when none does.
    pub fn differences(&self, now: &Batching) -> Vec<String> {
        let mut said = Vec::new();
        if self.batch != now.batch {
            said.push(format!("batch = {} (this run: {})", self.batch, now.batch));
        }
        if self.accumulate != now.accumulate {
            said.push(format!("accumulate = {} (this run: {})", self.accumulate, now.accumulate));
        }
        if self.devices != now.devices {
            let n = |d: usize| format!("{d} device{}", if d == 1 { "" } else { "s" });
            said.push(format!("{} (this run: {})", n(self.devices), n(now.devices)));
        }
        said
    }
}

impl LoopState {
    /// The loop's counters and generator states; everything else empty, for
    /// the caller to fill in.
    pub fn new(epoch: usize, steps: u64, optimizer: &str, order_rng: u64, dropout_rng: u64) -> Self {
        LoopState {
            epoch,
            steps,
            optimizer: optimizer.into(),
            order_rng,
            dropout_rng,
            early_stop: None,
            stopped_early: false,
            loss_scale: None,
            history: Vec::new(),
            model: String::new(),
            partial: None,
            data: None,
            loss: None,
            batching: None,
            ran: None,
        }
    }
}

/// What decides which rows train and which validate, and the statistics
/// the rows are normalised with: a resume under other values would train on
/// rows the checkpoint held out, or normalise them otherwise.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DataOrigin {
    /// The run's seed, which shuffles the rows before the split.
    pub seed: u64,
    /// The dataset's `split`.
    #[serde(with = "exact")]
    pub split: f64,
    /// The dataset's `normalize`.
    pub normalize: bool,
    /// Training and validation rows; `None` in checkpoints from before it
    /// was saved.
    #[serde(default)]
    pub rows: Option<[usize; 2]>,
    /// A CRC-32C of both parts' values and targets as the run reads them
    /// (normalised): rows edited, added or removed change it.
    #[serde(default)]
    pub fingerprint: Option<u32>,
    /// A text model's `vocab`, as written (`all` where it is not): another
    /// one numbers the tokens otherwise. `None` for other models, and in
    /// checkpoints from before it was saved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vocab: Option<String>,
}

impl DataOrigin {
    /// As `spec` (after the command line's overrides) sets it, for `data`.
    pub fn of(spec: &crate::spec::types::Spec, data: &crate::data::Dataset) -> Self {
        DataOrigin {
            seed: spec.train.seed,
            split: spec.dataset.split.value,
            normalize: spec.dataset.normalize,
            rows: Some([data.train.len(), data.valid.len()]),
            fingerprint: Some(fingerprint(data)),
            vocab: spec.dataset.tokens.as_ref().map(|_| vocab_written(spec.dataset.vocab.as_ref().map(|v| v.value))),
        }
    }
}

/// A `vocab` setting as a spec writes it; `all` where none is written.
fn vocab_written(vocab: Option<usize>) -> String {
    vocab.map_or_else(|| "all".into(), |v| v.to_string())
}

/// [`DataOrigin::fingerprint`]: a CRC-32C over the CRCs of 64 KiB pieces
/// of each part's values and targets (little-endian), so that no copy of
/// the data is made. The values are those the run trains on (normalised):
/// two runs on the same file with the same seed and split read the same.
fn fingerprint(data: &crate::data::Dataset) -> u32 {
    use crate::checkpoint::format::crc32c;
    use crate::data::Labels;
    const PIECE: usize = 1 << 14;
    let mut crcs = Vec::new();
    let mut bytes = Vec::with_capacity(4 * PIECE);
    let mut add = |words: &mut dyn Iterator<Item = [u8; 4]>| loop {
        bytes.clear();
        bytes.extend(words.take(PIECE).flatten());
        if bytes.is_empty() {
            break;
        }
        crcs.extend(crc32c(&bytes).to_le_bytes());
    };
    for part in [&data.train, &data.valid] {
        add(&mut part.features.iter().map(|v| v.to_le_bytes()));
        match &part.labels {
            Labels::Values(v) => add(&mut v.iter().map(|x| x.to_le_bytes())),
            Labels::Classes(c) => add(&mut c.iter().map(|x| x.to_le_bytes())),
        }
    }
    crc32c(&crcs)
}

/// A checkpoint's data origin against this run's: an error naming each
/// difference. Checkpoints that do not record one pass.
pub fn check_data(state: &LoopState, now: &DataOrigin) -> Result<(), ResumeError> {
    let Some(then) = &state.data else { return Ok(()) };
    let mut differences = Vec::new();
    if then.seed != now.seed {
        differences.push(format!("seed {} (this run: {}; `--seed` or the spec's `seed`)", then.seed, now.seed));
    }
    if then.split != now.split {
        differences.push(format!("split = {} (this run: {})", then.split, now.split));
    }
    if then.normalize != now.normalize {
        differences.push(format!("normalize = {} (this run: {})", then.normalize, now.normalize));
    }
    if !differences.is_empty() {
        return Err(ResumeError::DataMismatch { differences: differences.join(", ") });
    }
    // Another vocabulary numbers the tokens otherwise: the data's
    // fingerprint differs too, but the file is the same.
    if let (Some(then), Some(now)) = (&then.vocab, &now.vocab) {
        if then != now {
            return Err(ResumeError::VocabChanged { then: then.clone(), now: now.clone() });
        }
    }
    // The same settings over other rows: the data file changed.
    let rows = |[train, valid]: [usize; 2]| format!("{train} training and {valid} validation rows");
    match (then.rows, now.rows) {
        (Some(a), Some(b)) if a != b => {
            Err(ResumeError::DataChanged { what: format!("{} (this run: {})", rows(a), rows(b)) })
        }
        _ => match (then.fingerprint, now.fingerprint) {
            (Some(a), Some(b)) if a != b => Err(ResumeError::DataChanged {
                what: format!(
                    "{}, whose values or targets differ from this run's",
                    now.rows.map_or(String::new(), rows)
                ),
            }),
            _ => Ok(()),
        },
    }
}

/// How far an interrupted epoch got.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartialEpoch {
    /// The data-order generator's state before the epoch's shuffle.
    pub order_rng: u64,
    /// Batches done (skipped ones included).
    pub steps: usize,
    /// Rows of the epoch's order those batches took: a resume goes on from
    /// this row whatever its batch. `None` in checkpoints from before it was
    /// saved (`steps` batches of the resuming run's batch are skipped).
    #[serde(default)]
    pub rows: Option<usize>,
    /// The running sum of batch loss times rows, and the rows in it.
    #[serde(with = "exact")]
    pub loss_sum: f64,
    /// Rows in `loss_sum`: those of the steps not skipped.
    pub seen: usize,
    /// Steps skipped so far in the epoch because their gradients overflowed.
    pub skipped: usize,
    /// The pre-clip gradient norms of the epoch's steps so far, when the
    /// spec clips: the epoch's `grad_norm` is their mean over the whole
    /// epoch. `None` in checkpoints from before it was saved.
    #[serde(default)]
    pub grad_norms: Option<NormSum>,
}

/// A running sum of pre-clip gradient norms and the steps it holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct NormSum {
    /// The norms' sum.
    #[serde(with = "exact")]
    pub sum: f64,
    /// The steps (optimizer steps not skipped) whose norms are in `sum`.
    #[serde(with = "exact")]
    pub steps: f64,
}

impl NormSum {
    /// The mean norm; `None` when no step is counted.
    pub fn mean(self) -> Option<f64> {
        (self.steps > 0.0).then(|| self.sum / self.steps)
    }
}

/// The loss scaler's progress; its growth and backoff come from the spec of
/// the run that resumes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScaleState {
    /// The current loss scale.
    #[serde(with = "exact")]
    pub scale: f64,
    /// Finite steps since the scale last changed.
    pub good_steps: usize,
}

/// Early stopping's progress. The patience and threshold come from the spec
/// of the run that resumes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StopState {
    /// Infinite until an epoch has improved.
    #[serde(with = "exact")]
    pub best: f64,
    /// The epoch (1-based) that reached `best`; `None` until an epoch improves.
    pub best_epoch: Option<usize>,
    /// Epochs in a row without improvement.
    pub bad_epochs: usize,
}

/// Why a checkpoint cannot be resumed from.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ResumeError {
    /// The file cannot be read, or is not a whole checkpoint.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// The checkpoint was written for a different `model` block.
    #[error(
        "checkpoint was written for a different model:\n  checkpoint: {found}\n  this spec:  {expected}\n\
         choose another checkpoint path, or pass --fresh to start over (the old checkpoint is then replaced)"
    )]
    ModelMismatch {
        /// This spec's model block in one line (see [`describe_model`]).
        expected: String,
        /// The checkpoint's model block in one line; `(unknown)` when it records none.
        found: String,
    },
    /// The checkpoint holds another optimizer's state than the spec asks for.
    #[error(
        "checkpoint holds {found} optimizer state, but the spec asks for {expected}; \
         pass --fresh to start over with {expected}"
    )]
    OptimizerMismatch {
        /// The spec's optimizer, as the spec writes it (`adamw`).
        expected: String,
        /// The optimizer the checkpoint was written with.
        found: String,
    },
    /// The checkpoint's rows were split or normalised otherwise than this
    /// run's would be.
    #[error(
        "checkpoint was trained with {differences}: these decide which rows train and which validate, and how \
         they are normalised, so resuming would validate on rows it trained on; run with the checkpoint's \
         values, or pass --fresh to start over"
    )]
    DataMismatch {
        /// Each difference, in words, with this run's value.
        differences: String,
    },
    /// The checkpoint read its texts with another `vocab`.
    #[error(
        "checkpoint read its texts with `vocab = {then}`, but the spec asks for `vocab = {now}`: another \
         vocabulary numbers the tokens otherwise, and the checkpoint's embedding learned its own numbers; \
         {} to resume, or pass --fresh to start over",
        if then == "all" { "leave `vocab` out".to_string() } else { format!("write `vocab = {then}`") }
    )]
    VocabChanged {
        /// The checkpoint's `vocab`, as written (`all` where none was).
        then: String,
        /// This run's.
        now: String,
    },
    /// The data file holds other rows than the checkpoint trained on.
    #[error(
        "checkpoint was trained on other data: {what}. The rows are split and normalised anew, so resuming \
         would validate on rows it trained on; train on the data it was trained on, or pass --fresh to start \
         over"
    )]
    DataChanged {
        /// The rows then and now, in words.
        what: String,
    },
    /// The checkpoint's losses were measured with another loss.
    #[error(
        "checkpoint was trained with `loss = {found}`, but the spec asks for `loss = {expected}`: its \
         validation losses (and early stopping's best, when it stops early) are in {found}'s units, so a resume \
         would compare the two; run with `loss = {found}`, or pass --fresh to start over with {expected}"
    )]
    LossMismatch {
        /// The spec's loss, as written.
        expected: String,
        /// The loss the checkpoint was written with.
        found: String,
    },
    /// A tensor or the loop state is missing, or does not fit the model.
    #[error("checkpoint is incomplete: {0}")]
    Incomplete(String),
    /// The checkpoint was written partway through the epoch after `epoch`,
    /// and the run asks for no more than `epoch` epochs: its weights have
    /// taken steps past the model it would stand for.
    #[error(
        "checkpoint was written partway through epoch {} ({epoch} done, then {steps} batch{} of the next): its \
         weights are not the model after {epochs} epochs; {} or more epochs go on from it, or start over",
        epoch + 1,
        if *steps == 1 { "" } else { "es" },
        epoch + 1
    )]
    PartwayPastTheEnd {
        /// Epochs it finished.
        epoch: usize,
        /// Batches of the next it took.
        steps: usize,
        /// The epochs this run asks for.
        epochs: usize,
    },
    /// The checkpoint path cannot take this run's checkpoints: a file there
    /// that is not a KynML checkpoint, a folder, another run writing there.
    #[error("checkpoints cannot be written to {}: {error}", path.display())]
    Unwritable {
        /// The checkpoint path.
        path: std::path::PathBuf,
        /// Why not.
        error: CheckpointError,
    },
    /// No checkpoint at `path`, but an older copy beside it is a whole
    /// checkpoint of this spec (an earlier run's): starting over would
    /// rotate it away.
    #[error(
        "{} is missing, but {} holds a whole checkpoint (epoch {epoch}) of an earlier run: rename it to the \
         checkpoint path to resume from it, or start over (its checkpoints then replace the older copies)",
        path.display(),
        copy.display()
    )]
    OlderCopy {
        /// The checkpoint path.
        path: std::path::PathBuf,
        /// The copy.
        copy: std::path::PathBuf,
        /// The epoch it ends.
        epoch: usize,
    },
}

impl From<StateError> for ResumeError {
    fn from(e: StateError) -> Self {
        ResumeError::Incomplete(e.to_string())
    }
}

/// The model block in one line: what a checkpoint must match.
pub fn describe_model(spec: &ModelSpec) -> String {
    let mut parts = vec![format!("input {}", spec.shape)];
    parts.extend(spec.layers.iter().map(|l| l.value.fingerprint()));
    parts.join(", ")
}

/// A short hash of [`describe_model`], stored in the checkpoint's header.
pub fn model_hash(spec: &ModelSpec) -> String {
    // FNV-1a, 64 bits: stable across Rust versions, unlike `DefaultHasher`.
    let hash = describe_model(spec)
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3));
    format!("{hash:016x}")
}

/// A loop state as a checkpoint saves it: its JSON text, each object's keys
/// in the order of their names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavedState(String);

/// `value` as JSON text, each object's keys in the order of their names.
fn sorted_json(value: &impl Serialize) -> String {
    // Serialising plain numbers and strings to JSON cannot fail.
    serde_json::to_value(value).unwrap_or_default().to_string()
}

impl SavedState {
    /// `state`, history and all.
    pub fn of(state: &LoopState) -> Self {
        SavedState(sorted_json(state))
    }

    /// The JSON text.
    pub fn text(&self) -> &str {
        &self.0
    }
}

/// A run's epoch records, each made into the JSON a checkpoint saves once,
/// when it is added: a save copies the history's text instead of making it
/// again. Made at every save, a run of 2,500 epochs saving each one spent
/// 38 s of its 40 on its checkpoints' histories.
#[derive(Debug, Clone, Default)]
pub struct History {
    records: Vec<EpochRecord>,
    /// The records' saved JSON, joined by commas.
    text: String,
}

impl History {
    /// A history holding `records` (a resumed run's).
    pub fn new(records: Vec<EpochRecord>) -> Self {
        let mut history = History::default();
        records.into_iter().for_each(|r| history.push(r));
        history
    }

    /// Adds the next epoch's record.
    pub fn push(&mut self, record: EpochRecord) {
        if !self.records.is_empty() {
            self.text.push(',');
        }
        self.text.push_str(&saved_history::record_json(&record));
        self.records.push(record);
    }

    /// The records, oldest first.
    pub fn into_records(self) -> Vec<EpochRecord> {
        self.records
    }

    /// `state` as a checkpoint saves it, with this history in place of its
    /// own, which is left out (the loop's states leave it empty).
    pub fn saved_state(&self, state: &LoopState) -> SavedState {
        let mut text = match state.history.is_empty() {
            true => sorted_json(state),
            false => sorted_json(&LoopState { history: Vec::new(), ..state.clone() }),
        };
        // The key once, where the struct puts it: a string value's quotes
        // are escaped, so none of them reads as this.
        const EMPTY: &str = "\"history\":[]";
        match text.find(EMPTY) {
            Some(at) => text.insert_str(at + EMPTY.len() - 1, &self.text),
            // Never so; were it, the history is made again rather than lost.
            None => return SavedState::of(&LoopState { history: self.records.clone(), ..state.clone() }),
        }
        SavedState(text)
    }
}

impl std::ops::Deref for History {
    type Target = [EpochRecord];

    fn deref(&self) -> &[EpochRecord] {
        &self.records
    }
}

/// Copies the state to the host as one checkpoint. This is the part the loop
/// waits for; encoding and writing happen on the writer's thread.
pub fn snapshot(
    model: &Model<Kb>,
    optimizer: &AnyOptimizer,
    best: Option<&Model<Kb>>,
    state: SavedState,
) -> Checkpoint {
    let optimizer = optimizer.state_tensors(&model.param_names(), OPTIM_PREFIX);
    snapshot_in_parts(model.tensors(MODEL_PREFIX), best, optimizer, state)
}

/// [`snapshot`] from the model's tensors (named with [`MODEL_PREFIX`]) and
/// the optimizer's (with [`OPTIM_PREFIX`]), for an engine that makes them
/// without a Burn model and optimizer (the native engine).
pub fn snapshot_in_parts(
    model: Vec<NamedTensor>,
    best: Option<&Model<Kb>>,
    optimizer: Vec<NamedTensor>,
    state: SavedState,
) -> Checkpoint {
    let mut tensors = model;
    if let Some(best) = best {
        tensors.extend(best.tensors(BEST_PREFIX));
    }
    tensors.extend(optimizer);
    Checkpoint::with_state_text(tensors, state.0)
}

/// What [`restore`] gives back.
pub struct Restored {
    /// The model with the saved weights, on the autodiff device.
    pub model: Model<Kb>,
    /// The optimizer with its saved per-parameter state.
    pub optimizer: AnyOptimizer,
    /// The best epoch's weights (without autodiff), when early stopping is on.
    pub best: Option<Model<Kb>>,
    /// The loop's counters, generators and history, as saved.
    pub state: LoopState,
}

/// Checks that `ckpt` fits this spec's model, optimizer and loss, then loads it
/// into `model` and `optimizer` (fresh ones, as the loop builds them).
/// `best_template` is a fresh model without autodiff to load the best
/// weights into; the devices are the autodiff one and its inner one.
pub fn restore(
    ckpt: &Checkpoint,
    spec: &ModelSpec,
    model: Model<Kb>,
    optimizer: AnyOptimizer,
    loss: &str,
    best_template: Model<Kb>,
    (ad_device, inner_device): (&DispatchDevice, &DispatchDevice),
) -> Result<Restored, ResumeError> {
    let state = check(ckpt, spec, optimizer.name(), loss)?;
    let model = model.with_tensors(&ckpt.tensors, MODEL_PREFIX, ad_device)?;
    let mut optimizer = optimizer
        .with_state(&ckpt.tensors, &model.param_names(), OPTIM_PREFIX, inner_device)
        .map_err(ResumeError::Incomplete)?;
    // Burn tags every tensor with its autodiff device's checkpointing
    // strategy, optimizer state included, and refuses to add two of
    // different strategies: state read onto the plain device has none, where
    // a `checkpoint_activations` run's gradients have Burn's balanced one.
    // Its state is made again through the autodiff device (the first step
    // after such a resume panicked).
    if *ad_device != DispatchDevice::autodiff(inner_device.clone()) {
        let names = model.param_names();
        let shape = |name: &str| {
            let stored = ckpt.tensors.iter().find(|t| t.name == format!("{MODEL_PREFIX}{name}"));
            stored.map(|t| t.shape.clone()).unwrap_or_default()
        };
        let shapes: Vec<Vec<usize>> = names.iter().map(|(_, name)| shape(name)).collect();
        let states = optimizer.native_states(&names, &shapes, inner_device).map_err(ResumeError::Incomplete)?;
        let states: Vec<Option<&kynml_cpu::ParamState>> = states.iter().map(Option::as_ref).collect();
        optimizer = optimizer.with_native_states(&names, &shapes, &states, ad_device);
    }
    let has_best = ckpt.tensors.iter().any(|t| t.name.starts_with(BEST_PREFIX));
    let best =
        if has_best { Some(best_template.with_tensors(&ckpt.tensors, BEST_PREFIX, inner_device)?) } else { None };
    Ok(Restored { model, optimizer, best, state })
}

/// The checks of [`restore`] alone, for reporting a bad checkpoint before
/// anything runs: the model hash, the loop state, the optimizer.
/// `loss` is the spec's, as [`Loss::written`](crate::spec::types::Loss::written) gives it.
pub fn check(ckpt: &Checkpoint, spec: &ModelSpec, optimizer: &str, loss: &str) -> Result<LoopState, ResumeError> {
    let expected = model_hash(spec);
    if ckpt.check_model(&expected).is_err() {
        let state = ckpt.state_value();
        let found = state.get("model").and_then(|m| m.as_str()).unwrap_or("(unknown)").to_string();
        return Err(ResumeError::ModelMismatch { expected: describe_model(spec), found });
    }
    let state: LoopState = serde_json::from_str(ckpt.state())
        .map_err(|e| ResumeError::Incomplete(format!("its loop state cannot be read: {e}")))?;
    // One record per finished epoch, in order: a state that says otherwise
    // (an epoch count past what was recorded, as far as 2^64 - 1, which
    // wrapped to an epoch 0) was not written by a run.
    let numbered = state.history.iter().enumerate().all(|(i, r)| r.epoch == i + 1);
    if state.history.len() != state.epoch || !numbered {
        let held: Vec<String> = state.history.iter().map(|r| r.epoch.to_string()).take(8).collect();
        let more = if state.history.len() > 8 { ", ..." } else { "" };
        return Err(ResumeError::Incomplete(format!(
            "its loop state does not hold together: {} epoch{} done, but its history records {} ({}{more})",
            state.epoch,
            if state.epoch == 1 { "" } else { "s" },
            state.history.len(),
            match held.len() {
                0 => "none".to_string(),
                1 => format!("epoch {}", held[0]),
                _ => format!("epochs {}", held.join(", ")),
            }
        )));
    }
    if state.optimizer != optimizer {
        return Err(ResumeError::OptimizerMismatch { expected: optimizer.into(), found: state.optimizer });
    }
    if let Some(found) = state.loss.as_ref().filter(|found| *found != loss) {
        return Err(ResumeError::LossMismatch { expected: loss.into(), found: found.clone() });
    }
    Ok(state)
}

/// Floats as the shortest decimal text that reads back to the same bits
/// (serde_json's own parser may be one unit in the last place off, and JSON
/// numbers have no NaN or infinity).
mod exact {
    use serde::{de::Error, Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &f64, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(value)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<f64, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(|_| D::Error::custom(format!("`{text}` is not a number")))
    }
}

/// An optional float as [`exact`] text. It also reads a JSON number, as
/// checkpoints from before these were saved as text hold them.
mod exact_option {
    use std::fmt;

    use serde::de::{Error, Visitor};
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &Option<f64>, serializer: S) -> Result<S::Ok, S::Error> {
        match value {
            Some(x) => serializer.collect_str(x),
            None => serializer.serialize_none(),
        }
    }

    struct Float;

    impl<'de> Visitor<'de> for Float {
        type Value = Option<f64>;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a number, as text or as a JSON number, or null")
        }

        fn visit_str<E: Error>(self, text: &str) -> Result<Self::Value, E> {
            text.parse().map(Some).map_err(|_| E::custom(format!("`{text}` is not a number")))
        }

        fn visit_f64<E: Error>(self, x: f64) -> Result<Self::Value, E> {
            Ok(Some(x))
        }

        fn visit_u64<E: Error>(self, x: u64) -> Result<Self::Value, E> {
            Ok(Some(x as f64))
        }

        fn visit_i64<E: Error>(self, x: i64) -> Result<Self::Value, E> {
            Ok(Some(x as f64))
        }

        fn visit_none<E: Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_unit<E: Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_any(Float)
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<f64>, D::Error> {
        deserializer.deserialize_option(Float)
    }
}

/// Epoch records without their timings, floats [`exact`].
mod saved_history {
    use std::collections::BTreeMap;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use crate::train::events::EpochRecord;

    #[derive(Serialize, Deserialize)]
    struct Saved {
        epoch: usize,
        #[serde(with = "super::exact")]
        lr: f64,
        #[serde(with = "super::exact")]
        train_loss: f64,
        #[serde(with = "super::exact")]
        val_loss: f64,
        metrics: BTreeMap<String, String>,
        #[serde(default, skip_serializing_if = "Option::is_none", with = "super::exact_option")]
        loss_scale: Option<f64>,
        #[serde(default)]
        skipped_steps: usize,
        #[serde(default, skip_serializing_if = "Option::is_none", with = "super::exact_option")]
        grad_norm: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ran: Option<super::Ran>,
    }

    fn saved(r: &EpochRecord) -> Saved {
        Saved {
            epoch: r.epoch,
            lr: r.lr,
            train_loss: r.train_loss,
            val_loss: r.val_loss,
            metrics: r.metrics.iter().map(|(k, v)| (k.clone(), v.to_string())).collect(),
            loss_scale: r.loss_scale,
            skipped_steps: r.skipped_steps,
            grad_norm: r.grad_norm,
            ran: r.ran.clone(),
        }
    }

    /// One record as the history saves it.
    pub fn record_json(record: &EpochRecord) -> String {
        super::sorted_json(&saved(record))
    }

    pub fn serialize<S: Serializer>(history: &[EpochRecord], serializer: S) -> Result<S::Ok, S::Error> {
        history.iter().map(saved).collect::<Vec<_>>().serialize(serializer)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<EpochRecord>, D::Error> {
        let saved = Vec::<Saved>::deserialize(deserializer)?;
        saved
            .into_iter()
            .map(|s| {
                let metrics = s
                    .metrics
                    .into_iter()
                    .map(|(k, v)| match v.parse() {
                        Ok(x) => Ok((k, x)),
                        Err(_) => Err(serde::de::Error::custom(format!("metric `{k}` is `{v}`, not a number"))),
                    })
                    .collect::<Result<_, _>>()?;
                Ok(EpochRecord {
                    epoch: s.epoch,
                    lr: s.lr,
                    train_loss: s.train_loss,
                    val_loss: s.val_loss,
                    metrics,
                    samples_per_sec: f64::NAN,
                    seconds: f64::NAN,
                    loss_scale: s.loss_scale,
                    skipped_steps: s.skipped_steps,
                    grad_norm: s.grad_norm,
                    data_wait: None,
                    device_reserved: None,
                    device_in_use: None,
                    peak_rss: None,
                    gpu_busy: None,
                    gpu_memory_peak: None,
                    ran: s.ran,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loop_state_reads_back_bit_for_bit() {
        let record = EpochRecord {
            epoch: 3,
            lr: 0.1 + 0.2,
            train_loss: 1.347_908_701_708_850_7,
            val_loss: f64::NAN,
            metrics: [("r2".to_string(), -f64::INFINITY), ("rmse".into(), 1.757_269_469_575_650_1)].into(),
            samples_per_sec: 1.0,
            seconds: 2.0,
            loss_scale: Some(32768.0),
            skipped_steps: 2,
            // serde_json's own parser reads this back one unit in the last place off.
            grad_norm: Some(9.378_411_369_414_867),
            data_wait: Some(0.5),
            device_reserved: Some(1 << 20),
            device_in_use: Some(1 << 19),
            peak_rss: Some(1 << 30),
            gpu_busy: Some(61.5),
            gpu_memory_peak: Some(1 << 33),
            ran: Some(Ran { device: "cuda".into(), precision: "fp16".into() }),
        };
        let state = LoopState {
            epoch: 3,
            steps: 30,
            optimizer: "adamw".into(),
            order_rng: u64::MAX,
            dropout_rng: 7,
            early_stop: Some(StopState { best: f64::INFINITY, best_epoch: None, bad_epochs: 2 }),
            stopped_early: false,
            loss_scale: Some(ScaleState { scale: 1.5 * 2f64.powi(20), good_steps: 7 }),
            partial: Some(PartialEpoch {
                order_rng: 3,
                steps: 4,
                rows: Some(128),
                loss_sum: 0.1 + 0.7,
                seen: 128,
                skipped: 1,
                grad_norms: Some(NormSum { sum: 0.1 + 0.2, steps: 3.0 }),
            }),
            history: vec![record.clone()],
            model: "input 4".into(),
            data: Some(DataOrigin {
                seed: 5,
                split: 0.1 + 0.7,
                normalize: true,
                rows: Some([80, 20]),
                fingerprint: Some(u32::MAX),
                vocab: Some("all".into()),
            }),
            loss: Some("huber(delta=0.5)".into()),
            batching: Some(Batching { batch: 64, accumulate: 4, devices: 2 }),
            ran: Some(Ran { device: "wgpu".into(), precision: "bf16".into() }),
        };
        let text = serde_json::to_string(&state).unwrap();
        let back: LoopState = serde_json::from_str(&text).unwrap();
        let r = &back.history[0];
        assert_eq!(r.lr.to_bits(), record.lr.to_bits());
        assert_eq!(r.train_loss.to_bits(), record.train_loss.to_bits());
        assert!(r.val_loss.is_nan() && r.seconds.is_nan() && r.samples_per_sec.is_nan());
        assert_eq!(r.metrics, record.metrics);
        assert_eq!(back.early_stop, state.early_stop);
        assert_eq!(back.loss_scale, state.loss_scale);
        assert_eq!(back.partial, state.partial);
        assert_eq!(back.data, state.data);
        assert_eq!(back.loss, state.loss);
        assert_eq!(back.batching, state.batching);
        assert_eq!(back.ran, state.ran);
        assert_eq!((r.loss_scale, r.skipped_steps), (Some(32768.0), 2));
        assert_eq!(r.ran, record.ran, "where each epoch ran is kept");
        assert_eq!(r.grad_norm.map(f64::to_bits), record.grad_norm.map(f64::to_bits));
        // Checkpoints from before these were text hold JSON numbers.
        let old = text.replace("\"grad_norm\":\"9.378411369414867\"", "\"grad_norm\":2.5");
        assert_ne!(old, text);
        let back: LoopState = serde_json::from_str(&old).unwrap();
        assert_eq!(back.history[0].grad_norm, Some(2.5));
        // Through a `Value`, as checkpoints were read before 2026-11-29.
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        let back: LoopState = serde_json::from_value(value).unwrap();
        assert_eq!(back.history[0].grad_norm.map(f64::to_bits), record.grad_norm.map(f64::to_bits));
        let bad = text.replace("\"grad_norm\":\"9.378411369414867\"", "\"grad_norm\":true");
        let err = serde_json::from_str::<LoopState>(&bad).unwrap_err().to_string();
        assert!(err.contains("a number, as text or as a JSON number"), "{err}");
        assert_eq!((back.order_rng, back.steps), (u64::MAX, 30));
        // Timings are not saved, so the same state gives the same text.
        let mut other = state.clone();
        other.history[0].seconds = 99.0;
        assert_eq!(serde_json::to_string(&other).unwrap(), text);

        // A checkpoint's text made from the loop's history, each record
        // made once, is the text of the whole state, key for key.
        let records: Vec<EpochRecord> = (1..=4)
            .map(|epoch| EpochRecord {
                epoch,
                val_loss: [f64::NAN, 0.25, f64::INFINITY, 1e-300][epoch - 1],
                metrics: [("accuracy".to_string(), 1.0 / epoch as f64)].into(),
                ..record.clone()
            })
            .collect();
        let whole = LoopState {
            epoch: 4,
            history: records.clone(),
            // What the key looks like can be in a string; only its escaped form is.
            model: "input 4 \"history\":[] dense 3".into(),
            ..state.clone()
        };
        let loop_state = LoopState { history: Vec::new(), ..whole.clone() };
        let mut history = History::default();
        for (i, r) in records.iter().enumerate() {
            history.push(r.clone());
            let then = LoopState { epoch: i + 1, history: records[..=i].to_vec(), ..whole.clone() };
            assert_eq!(history.saved_state(&LoopState { epoch: i + 1, ..loop_state.clone() }), SavedState::of(&then));
        }
        assert_eq!(History::new(records.clone()).saved_state(&loop_state), SavedState::of(&whole));
        // A state that brings a history of its own is saved with the loop's.
        assert_eq!(
            History::new(records.clone()).saved_state(&other),
            SavedState::of(&LoopState { history: records.clone(), ..other.clone() })
        );
        assert_eq!(History::default().saved_state(&loop_state), SavedState::of(&loop_state));
        let back: LoopState = serde_json::from_str(SavedState::of(&whole).text()).unwrap();
        assert_eq!(back.history.len(), 4);
        assert_eq!(back.model, whole.model);
        assert_eq!(History::new(records.clone()).iter().map(|r| r.epoch).collect::<Vec<_>>(), [1, 2, 3, 4]);
    }

    #[test]
    fn a_resume_elsewhere_is_said_in_words() {
        let ran = |device: &str, precision: &str| Ran { device: device.into(), precision: precision.into() };
        assert_eq!(ran("cpu", "fp32").difference(&ran("cpu", "fp32")), None);
        assert_eq!(ran("cpu", "fp32").difference(&ran("wgpu", "fp32")).unwrap(), "cpu (this run: wgpu)");
        assert_eq!(ran("cuda", "bf16").difference(&ran("cuda", "fp16")).unwrap(), "bf16 (this run: fp16)");
        let both = ran("cpu", "fp32").difference(&ran("wgpu", "fp16")).unwrap();
        assert_eq!(both, "fp32 on cpu (this run: fp16 on wgpu)");
        // Checkpoints from before it was saved read back without it.
        let old: LoopState = serde_json::from_str(
            r#"{"epoch":0,"steps":0,"optimizer":"adam","order_rng":1,"dropout_rng":2,"early_stop":null,
                "stopped_early":false,"history":[],"model":"m"}"#,
        )
        .unwrap();
        assert_eq!(old.ran, None);
    }

    #[test]
    fn a_resume_on_other_rows_is_refused_and_old_checkpoints_pass() {
        let origin =
            |rows, fingerprint| DataOrigin { seed: 1, split: 0.8, normalize: true, rows, fingerprint, vocab: None };
        let state = |data| LoopState { data: Some(data), ..LoopState::new(1, 1, "adam", 0, 0) };
        let then = state(origin(Some([80, 20]), Some(7)));
        assert!(check_data(&then, &origin(Some([80, 20]), Some(7))).is_ok());
        let err = check_data(&then, &origin(Some([120, 30]), Some(8))).unwrap_err();
        assert!(
            err.to_string().contains("80 training and 20 validation rows (this run: 120 training and 30 validation"),
            "{err}"
        );
        let err = check_data(&then, &origin(Some([80, 20]), Some(8))).unwrap_err();
        assert!(err.to_string().contains("values or targets differ") && err.to_string().contains("--fresh"), "{err}");
        // A checkpoint from before rows and fingerprints were saved.
        assert!(check_data(&state(origin(None, None)), &origin(Some([80, 20]), Some(8))).is_ok());
        // Another vocabulary is said as such (it was "other data"), the
        // setting to write back named.
        let texts =
            |vocab: &str, fingerprint| DataOrigin { vocab: Some(vocab.into()), ..origin(Some([80, 20]), fingerprint) };
        let err = check_data(&state(texts("all", Some(7))), &texts("20", Some(8))).unwrap_err().to_string();
        assert!(
            err.contains("`vocab = all`, but the spec asks for `vocab = 20`") && err.contains("leave `vocab` out"),
            "{err}"
        );
        let err = check_data(&state(texts("50", Some(7))), &texts("all", Some(8))).unwrap_err().to_string();
        assert!(err.contains("write `vocab = 50` to resume"), "{err}");
        assert!(check_data(&state(texts("50", Some(7))), &texts("50", Some(7))).is_ok());
    }
}
