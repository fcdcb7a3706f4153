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
}
