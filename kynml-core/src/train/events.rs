//! What the training loop reports while it runs.

use std::collections::BTreeMap;

/// One finished epoch, as written to `metrics.jsonl`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EpochRecord {
    /// 1-based.
    pub epoch: usize,
    /// The learning rate of the epoch's steps.
    pub lr: f64,
    /// The mean training loss over the epoch's rows, skipped steps left out; NaN when no step
    /// counted.
    pub train_loss: f64,
    /// The loss on the validation split after the epoch.
    pub val_loss: f64,
    /// The spec's metrics on the validation split.
    pub metrics: BTreeMap<String, f64>,
    /// Training rows per second over the epoch's steps, validation not counted; NaN when read back
    /// from a checkpoint, or when this process took none of its steps (resumed with its
    /// validation alone left).
    pub samples_per_sec: f64,
    /// Wall-clock seconds of the whole epoch, validation included; NaN when read back from a
    /// checkpoint.
    pub seconds: f64,
    /// The loss scale at the end of the epoch, when loss scaling is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_scale: Option<f64>,
    /// Steps skipped because their gradients overflowed (loss scaling).
    #[serde(default)]
    pub skipped_steps: usize,
    /// The mean global L2 norm of the gradients before clipping, over the
    /// epoch's steps, when the spec clips them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grad_norm: Option<f64>,
    /// Seconds the step loop spent waiting for its next batch from the
    /// loader, over the epoch; `None` when read back from a checkpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_wait: Option<f64>,
    /// Bytes the device's allocator had reserved at the epoch's end (its
    /// pool, which only grows: the high-water mark of what the run needed),
    /// on CUDA and wgpu.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_reserved: Option<u64>,
    /// Device bytes in use at the epoch's end, on CUDA and wgpu.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_in_use: Option<u64>,
    /// The process's peak resident memory so far, in bytes, where the
    /// system tells it (Linux).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_rss: Option<u64>,
    /// On CUDA with NVML: the mean percent of the epoch's samples in which
    /// the GPU ran a kernel (see [`gpu_monitor`](crate::train::gpu_monitor)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_busy: Option<f64>,
    /// On CUDA with NVML: the most device memory in use (every process's)
    /// in the epoch's samples, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_memory_peak: Option<u64>,
    /// The kind of device and the precision the epoch's steps ran in (a
    /// resumed run's epochs may have run elsewhere); `None` for an epoch of
    /// a checkpoint from before it was saved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ran: Option<crate::train::resume::Ran>,
}

/// Progress, in the order it happens.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum TrainEvent<'a> {
    /// An epoch is about to start.
    EpochStart {
        /// The epoch (1-based).
        epoch: usize,
        /// The run's last epoch (the spec's `epochs`), unless it stops early.
        epochs: usize,
        /// Steps (batches) in this epoch.
        steps: usize,
        /// The learning rate for this epoch.
        lr: f64,
    },
    /// `loss` is the running mean of the epoch's training loss so far; it is
    /// read from the device only every few steps (reading forces a sync).
    Step {
        /// The epoch (1-based).
        epoch: usize,
        /// The step just done, 1-based within the epoch; skipped steps count.
        step: usize,
        /// Steps (batches) in this epoch.
        steps: usize,
        /// `None` between reads and for a step skipped on overflow.
        loss: Option<f64>,
        /// Training rows per second so far in this epoch.
        samples_per_sec: f64,
    },
    /// An epoch has finished, validation included.
    EpochEnd(&'a EpochRecord),
    /// With profiling on, after each epoch's steps: their phases
    /// (`profile/<phase>_share` in TensorBoard, written as they come).
    EpochProfiled {
        /// The epoch (1-based).
        epoch: usize,
        /// Each phase over the epoch's steps, in [`PHASES`](crate::train::profile::PHASES) order.
        phases: Vec<crate::train::profile::PhaseSummary>,
    },
    /// Early stopping ends training after this epoch.
    EarlyStop {
        /// The last epoch trained (1-based).
        epoch: usize,
        /// The epoch (1-based) whose weights are kept; `None` when no
        /// epoch's validation loss was a finite number (the last weights
        /// are kept).
        best_epoch: Option<usize>,
    },
    /// Training continues from a checkpoint; `history` holds the epochs it
    /// had finished.
    Resumed {
        /// The spec's checkpoint path ([`TrainSettings::checkpoint_path`]);
        /// `None` for a checkpoint handed over in
        /// [`TrainSettings::resume_from`] to a run that saves none.
        ///
        /// [`TrainSettings::checkpoint_path`]: crate::train::TrainSettings::checkpoint_path
        /// [`TrainSettings::resume_from`]: crate::train::TrainSettings::resume_from
        path: Option<&'a std::path::Path>,
        /// The last epoch the checkpoint had finished (1-based; 0 if it was taken inside the
        /// first); training continues with the next.
        epoch: usize,
        /// The finished epochs' records; their timings read back as NaN.
        history: &'a [EpochRecord],
    },
    /// A checkpoint of this epoch was handed to the writer (written in the
    /// background when `async_save` is on).
    CheckpointSaved {
        /// The epoch (1-based) the checkpoint ends with.
        epoch: usize,
        /// The checkpoint file it goes to.
        path: &'a std::path::Path,
        /// How long the loop waited: the snapshot, plus the write itself
        /// when saving synchronously.
        seconds: f64,
    },
    /// A checkpoint write failed. Training goes on; the checkpoint at the
    /// path is still the last good one.
    CheckpointFailed {
        /// What went wrong, as a message.
        error: String,
    },
}
