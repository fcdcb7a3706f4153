//! What the training loop reports while it runs.

use std::collections::BTreeMap;

/// One finished epoch, as written to `metrics.jsonl`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EpochRecord {
    /// 1-based.
    pub epoch: usize,
    pub lr: f64,
    pub train_loss: f64,
    pub val_loss: f64,
    /// The spec's metrics on the validation split.
    pub metrics: BTreeMap<String, f64>,
    pub samples_per_sec: f64,
    pub seconds: f64,
    /// The loss scale at the end of the epoch, when loss scaling is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_scale: Option<f64>,
    /// Steps skipped because their gradients overflowed (loss scaling).
    #[serde(default)]
    pub skipped_steps: usize,
}

/// Progress, in the order it happens.
#[derive(Debug, Clone, PartialEq)]
pub enum TrainEvent<'a> {
    EpochStart {
        epoch: usize,
        epochs: usize,
        steps: usize,
        lr: f64,
    },
    /// `loss` is the running mean of the epoch's training loss so far; it is
    /// read from the device only every few steps (reading forces a sync).
    Step {
        epoch: usize,
        step: usize,
        steps: usize,
        loss: Option<f64>,
        samples_per_sec: f64,
    },
    EpochEnd(&'a EpochRecord),
    EarlyStop {
        epoch: usize,
        best_epoch: usize,
    },
    /// Training continues from a checkpoint; `history` holds the epochs it
    /// had finished.
    Resumed {
        path: &'a std::path::Path,
        epoch: usize,
        history: &'a [EpochRecord],
    },
    /// A checkpoint of this epoch was handed to the writer (written in the
    /// background when `async_save` is on).
    CheckpointSaved {
        epoch: usize,
        path: &'a std::path::Path,
        /// How long the loop waited: the snapshot, plus the write itself
        /// when saving synchronously.
        seconds: f64,
    },
    /// A checkpoint write failed. Training goes on; the checkpoint at the
    /// path is still the last good one.
    CheckpointFailed {
        error: String,
    },
}
