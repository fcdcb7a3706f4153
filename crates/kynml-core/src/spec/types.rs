//! The typed, validated spec: what a `.kyn` file means once parsing and
//! validation have succeeded. Every value a user wrote keeps the span it came
//! from, so that later stages (reading the data, building the model) can point
//! back at the line that caused a problem.

use std::path::PathBuf;

/// A byte range in the spec source, `start..end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct Span {
    pub start: usize,
    pub end: usize,
}

/// A value and where it was written. Defaults that the user did not write
/// carry the span of the block header they belong to.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Spanned<T> {
    pub value: T,
    pub span: Span,
}

/// A whole validated spec: the dataset and model that `train:` refers to,
/// and the train, evaluate and export settings with defaults filled in.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Spec {
    pub dataset: DatasetSpec,
    pub model: ModelSpec,
    pub train: TrainSpec,
    pub evaluate: EvaluateSpec,
    pub export: Option<ExportSpec>,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct DatasetSpec {
    pub name: Spanned<String>,
    /// As written in `csv("...")`; relative paths are resolved against the
    /// spec's folder by the caller.
    pub source: Spanned<PathBuf>,
    pub target: Spanned<String>,
    /// Fraction of rows used for training. Default 0.8.
    pub split: Spanned<f64>,
    /// Default false.
    pub normalize: bool,
    /// Default 0.
    pub num_workers: Spanned<usize>,
    /// Default false.
    pub pin_memory: Spanned<bool>,
    /// Batches prepared ahead; `None` when not written.
    pub prefetch: Option<Spanned<usize>>,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ModelSpec {
    pub name: Spanned<String>,
    /// Width declared by the `input N` line.
    pub input: Spanned<usize>,
    /// Every line after `input`, in order.
    pub layers: Vec<Spanned<Layer>>,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub enum Layer {
    Dense {
        units: usize,
        activation: Activation,
    },
    BatchNorm,
    LayerNorm,
    /// Drop probability in [0, 1).
    Dropout(f64),
}

#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub enum Activation {
    Linear,
    Relu,
    Gelu,
    Tanh,
    Sigmoid,
    Silu,
    /// Negative slope; `leaky_relu` alone means 0.01 as in PyTorch.
    LeakyRelu(f64),
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TrainSpec {
    /// Name of the model block (already checked to exist).
    pub model: Spanned<String>,
    /// Name of the dataset block (already checked to exist).
    pub data: Spanned<String>,
    pub loss: Spanned<Loss>,
    pub optimizer: Spanned<Optimizer>,
    pub epochs: Spanned<usize>,
    pub batch: Spanned<usize>,
    pub device: Spanned<DeviceRequest>,
    pub scheduler: Option<Spanned<Scheduler>>,
    pub early_stop: Option<Spanned<EarlyStop>>,
    pub checkpoint: Option<Spanned<Checkpoint>>,
    pub precision: Spanned<Precision>,
    /// Loss scaling for reduced precision; `Auto` unless written.
    pub loss_scale: Spanned<LossScale>,
    pub compile: Spanned<bool>,
    /// Default 42.
    pub seed: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub enum Loss {
    Mse,
    Mae,
    Huber { delta: f64 },
    CrossEntropy,
    Bce,
}

impl Loss {
    /// True for the losses that take class targets.
    pub fn is_classification(&self) -> bool {
        matches!(self, Loss::CrossEntropy | Loss::Bce)
    }
}

/// Optimizers with PyTorch's argument names and PyTorch's defaults.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub enum Optimizer {
    /// torch defaults: lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 0.01.
    AdamW { lr: f64, beta1: f64, beta2: f64, eps: f64, weight_decay: f64 },
    /// torch defaults: lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 0.
    Adam { lr: f64, beta1: f64, beta2: f64, eps: f64, weight_decay: f64 },
    /// torch defaults: lr 1e-3, momentum 0, dampening 0, weight_decay 0, nesterov false.
    Sgd { lr: f64, momentum: f64, dampening: f64, weight_decay: f64, nesterov: bool },
    /// torch defaults: lr 1e-2, alpha 0.99, eps 1e-8, weight_decay 0, momentum 0, centered false.
    RmsProp { lr: f64, alpha: f64, eps: f64, weight_decay: f64, momentum: f64, centered: bool },
}

impl Optimizer {
    pub fn lr(&self) -> f64 {
        match *self {
            Optimizer::AdamW { lr, .. }
            | Optimizer::Adam { lr, .. }
            | Optimizer::Sgd { lr, .. }
            | Optimizer::RmsProp { lr, .. } => lr,
        }
    }
}

/// Learning-rate schedules, stepped once per epoch, with an optional linear
/// warmup of `warmup` epochs (from lr/warmup up to lr) before the schedule.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Scheduler {
    pub kind: SchedulerKind,
    /// Default 0.
    pub warmup: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub enum SchedulerKind {
    /// `cosine(t_max, eta_min=0)`
    Cosine { t_max: usize, eta_min: f64 },
    /// `step(step_size, gamma=0.1)`
    Step { step_size: usize, gamma: f64 },
    /// `exponential(gamma)`
    Exponential { gamma: f64 },
}

/// `early_stop(patience, min_delta=0)`, on validation loss.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct EarlyStop {
    pub patience: usize,
    pub min_delta: f64,
}

/// `checkpoint(every_n, path, async_save=false, keep=1)`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Checkpoint {
    pub every_n: usize,
    pub path: PathBuf,
    pub async_save: bool,
    pub keep: usize,
}

/// `loss_scale = none | dynamic | dynamic(init=, growth=, interval=, backoff=)`.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub enum LossScale {
    /// Dynamic scaling with PyTorch's defaults for fp16, none otherwise.
    Auto,
    None,
    Dynamic {
        init: f64,
        growth: f64,
        interval: usize,
        backoff: f64,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Precision {
    Fp32,
    Fp16,
    Bf16,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum DeviceRequest {
    Auto,
    Cpu,
    /// `cuda` is `Cuda(None)` (the first GPU); `"cuda:1"` is `Cuda(Some(1))`.
    Cuda(Option<usize>),
    Wgpu,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct EvaluateSpec {
    /// Empty when the spec has no `evaluate:` block or no `metrics` key; the
    /// trainer then picks defaults for the task.
    pub metrics: Vec<Spanned<Metric>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Metric {
    Mae,
    Mse,
    Rmse,
    R2,
    Accuracy,
    Precision,
    Recall,
    F1,
}

impl Metric {
    pub fn is_classification(&self) -> bool {
        matches!(self, Metric::Accuracy | Metric::Precision | Metric::Recall | Metric::F1)
    }
    pub fn name(&self) -> &'static str {
        match self {
            Metric::Mae => "mae",
            Metric::Mse => "mse",
            Metric::Rmse => "rmse",
            Metric::R2 => "r2",
            Metric::Accuracy => "accuracy",
            Metric::Precision => "precision",
            Metric::Recall => "recall",
            Metric::F1 => "f1",
        }
    }
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ExportSpec {
    pub format: Spanned<ExportFormat>,
    pub path: Spanned<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum ExportFormat {
    Onnx,
    Safetensors,
    Burn,
    /// Accepted so that older specs load; a native engine cannot write it.
    Torchscript,
}
