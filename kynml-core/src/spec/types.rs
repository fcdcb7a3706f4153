//! The typed, validated spec: what a `.kyn` file means once parsing and
//! validation have succeeded. Every value a user wrote keeps the span it came
//! from, so that later stages (reading the data, building the model) can point
//! back at the line that caused a problem.

use std::path::PathBuf;

/// A byte range in the spec source, `start..end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct Span {
    /// Byte offset of the first byte, counted from the start of the source.
    pub start: usize,
    /// Byte offset just past the last byte; equal to `start` for an empty range.
    pub end: usize,
}

/// A value and where it was written. Defaults that the user did not write
/// carry the span of the block header they belong to.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Spanned<T> {
    /// The value itself.
    pub value: T,
    /// Where it was written, or the block header's span for a default.
    pub span: Span,
}

/// A whole validated spec: the dataset and model that `train:` refers to,
/// and the train, evaluate and export settings with defaults filled in.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Spec {
    /// The `dataset` block that `train:` uses.
    pub dataset: DatasetSpec,
    /// The `model` block that `train:` uses.
    pub model: ModelSpec,
    /// The `train:` block.
    pub train: TrainSpec,
    /// The `evaluate:` block; empty when the spec has none.
    pub evaluate: EvaluateSpec,
    /// The `export:` block; `None` when the spec has none.
    pub export: Option<ExportSpec>,
}

/// A `dataset NAME:` block: where the rows come from, and how they are split
/// and fed to training.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct DatasetSpec {
    /// The block's name, as in `dataset NAME:`.
    pub name: Spanned<String>,
    /// As written in `csv("...")`; relative paths are resolved against the
    /// spec's folder by the caller.
    pub source: Spanned<PathBuf>,
    /// The column to predict, as written in `target = "..."`; never empty.
    pub target: Spanned<String>,
    /// Feature columns holding categories, as written in `categorical = [...]`; none by default.
    pub categorical: Vec<Spanned<String>>,
    /// The column holding a text, for a model of `input seq L`; `None` when not written.
    pub tokens: Option<Spanned<String>>,
    /// The most tokens a text's vocabulary keeps (the most frequent); `None` for all.
    pub vocab: Option<Spanned<usize>>,
    /// The columns holding sequences of numbers, one value per position
    /// each, for a model of `input seq LxC` (C of them); none by default.
    pub sequence: Vec<Spanned<String>>,
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

/// A `model NAME:` block: the input width and the layers after it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ModelSpec {
    /// The block's name, as in `model NAME:`.
    pub name: Spanned<String>,
    /// Values per sample declared by the `input` line: `N`, or the product
    /// of a shape's dimensions (`input 1x28x28` is 784).
    pub input: Spanned<usize>,
    /// The shape the `input` line declares: `[N]`, `[C, L]` or `[C, H, W]`.
    pub shape: crate::model::Shape,
    /// Every line after `input`, in order.
    pub layers: Vec<Spanned<Layer>>,
}

impl ModelSpec {
    /// The first batchnorm, inside a `residual:` block too, whose batch
    /// statistics need two rows a step on each device: one that sees one
    /// value a channel a row (plain features, or a map of one position).
    /// A batchnorm after a convolution also averages over a channel's
    /// positions, so one row is enough for it. Gives the span of the line
    /// that holds it and whether its input is plain features; `None` when
    /// no such batchnorm (or a shape the model refuses elsewhere).
    pub fn batchnorm_needing_rows(&self) -> Option<(Span, bool)> {
        let per_row = |input: &crate::model::Shape, layer: &Layer| {
            matches!(layer, Layer::BatchNorm(_)) && input.size() <= input.dims().first().copied().unwrap_or(0)
        };
        let mut input = self.shape.clone();
        for layer in &self.layers {
            let mut inner = input.clone();
            for child in layer.value.children() {
                if per_row(&inner, child) {
                    return Some((layer.span, inner.rank() == 1));
                }
                inner = child.output(&inner).ok()?;
            }
            if per_row(&input, &layer.value) {
                return Some((layer.span, input.rank() == 1));
            }
            input = layer.value.output(&input).ok()?;
        }
        None
    }

    /// Fills in what the layers learn from the data: the categorical
    /// columns an `embedding` layer embeds, from `info`'s vocabularies.
    pub fn bind(&mut self, info: &crate::data::DataInfo) -> Result<(), Unbound> {
        use crate::model::embedding::Column;
        let columns: Vec<Column> =
            (info.categories.iter()).map(|v| Column { position: v.position, categories: v.size() }).collect();
        let text = self.shape.is_tokens();
        // FNV-1a over every value, each ended by a 0 byte.
        let hash = |values: &mut dyn Iterator<Item = &str>| {
            values.fold(0xcbf2_9ce4_8422_2325u64, |h, v| {
                v.bytes().chain([0]).fold(h, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
            })
        };
        match (self.layers.first_mut().map(|l| &mut l.value), &info.tokens) {
            (Some(Layer::Embedding(e)), Some(tokens)) if text => {
                e.tokens = tokens.size();
                e.vocabulary = hash(&mut tokens.tokens.iter().map(String::as_str));
                return Ok(());
            }
            (_, None) if text => return Err(Unbound::NoText),
            (_, Some(_)) if !text => return Err(Unbound::NotText),
            _ => {}
        }
        match self.layers.first_mut().map(|l| &mut l.value) {
            Some(Layer::Embedding(_)) if columns.is_empty() => Err(Unbound::NoCategories),
            Some(Layer::Embedding(e)) => {
                e.columns = columns;
                e.vocabulary = hash(&mut info.categories.iter().flat_map(|v| v.values.iter().map(String::as_str)));
                Ok(())
            }
            _ if !columns.is_empty() => Err(Unbound::NoEmbedding),
            _ => Ok(()),
        }
    }
}

/// Why a model does not fit its data's categorical columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unbound {
    /// The model starts with `embedding`, but the data has no categorical column.
    NoCategories,
    /// The data has categorical columns, and the model no `embedding` to read them.
    NoEmbedding,
    /// The model reads a text (`input seq L`), and the dataset names none.
    NoText,
    /// The dataset names a text, and the model does not read one.
    NotText,
}

/// One line of a `model` block after `input`: the layer catalogue's type.
pub use crate::model::LayerSpec as Layer;

/// The activation written after the width of a `dense` layer.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub enum Activation {
    /// `linear`: no activation (the identity).
    Linear,
    /// `relu`: `max(0, x)`.
    Relu,
    /// `gelu`: the Gaussian error linear unit.
    Gelu,
    /// `tanh`: the hyperbolic tangent.
    Tanh,
    /// `sigmoid`: the logistic function `1 / (1 + e^-x)`.
    Sigmoid,
    /// `silu`: `x * sigmoid(x)`, also called swish.
    Silu,
    /// Negative slope; `leaky_relu` alone means 0.01 as in PyTorch.
    LeakyRelu(f64),
}

/// The `train:` block, with defaults filled in.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TrainSpec {
    /// Name of the model block (already checked to exist).
    pub model: Spanned<String>,
    /// Name of the dataset block (already checked to exist).
    pub data: Spanned<String>,
    /// The loss to minimize; required.
    pub loss: Spanned<Loss>,
    /// Default `adamw` with PyTorch's defaults.
    pub optimizer: Spanned<Optimizer>,
    /// Passes over the training data; at least 1, required.
    pub epochs: Spanned<usize>,
    /// Rows per batch; at least 1, default 32.
    pub batch: Spanned<usize>,
    /// Batches whose gradients are accumulated into one optimizer step; at
    /// least 1, default 1.
    pub accumulate: Spanned<usize>,
    /// Where to train; default `Auto`.
    pub device: Spanned<DeviceRequest>,
    /// The devices of a data-parallel run (`devices = [...]`); `None`
    /// trains on `device` alone.
    pub devices: Option<Spanned<DeviceSet>>,
    /// Learning-rate schedule; `None` means a constant learning rate.
    pub scheduler: Option<Spanned<Scheduler>>,
    /// Early stopping on validation loss; `None` runs every epoch.
    pub early_stop: Option<Spanned<EarlyStop>>,
    /// When and where to save checkpoints; `None` saves none.
    pub checkpoint: Option<Spanned<Checkpoint>>,
    /// The type the dense layers' matrix products run in; default `Fp32`.
    pub precision: Spanned<Precision>,
    /// Loss scaling for reduced precision; `Auto` unless written.
    pub loss_scale: Spanned<LossScale>,
    /// Ask for the fastest compiled execution; default false.
    pub compile: Spanned<bool>,
    /// How hard the GPU backends search for their fastest kernels; `None`
    /// when not written (CubeCL's default, balanced).
    pub autotune: Option<Spanned<Autotune>>,
    /// Time every step in phases (as `kynml train --profile`); default false.
    pub profile: Spanned<bool>,
    /// Recompute activations in the backward pass instead of keeping them;
    /// default false.
    pub checkpoint_activations: Spanned<bool>,
    /// Ask that the same run on the same device give bit-identical
    /// results; default false. "What runs" says whether it holds here.
    pub deterministic: Spanned<bool>,
    /// Gradient clipping before each optimizer step; `None` clips nothing.
    pub clip: Option<Spanned<Clip>>,
    /// Default 42.
    pub seed: u64,
    /// The `train:` line, whose span the settings left to their defaults carry.
    #[serde(skip)]
    pub header: Span,
}

impl TrainSpec {
    /// Whether `setting` (one of this block's) was written, not defaulted.
    pub fn written<T>(&self, setting: &Spanned<T>) -> bool {
        setting.span != self.header
    }
}

/// `autotune = off | fast | balanced | full`: how hard CubeCL searches for
/// the fastest version of each kernel on a GPU backend (PyTorch's
/// `cudnn.benchmark`), trading start-up time for speed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Autotune {
    /// As little as CubeCL allows: it has no setting that skips tuning, so
    /// this runs its minimal search, and says so.
    Off,
    /// CubeCL's minimal search: the quickest start.
    Fast,
    /// CubeCL's default.
    Balanced,
    /// CubeCL's full search: the slowest start, the fastest kernels it knows.
    Full,
}

impl Autotune {
    /// As the spec writes it.
    pub fn name(self) -> &'static str {
        match self {
            Autotune::Off => "off",
            Autotune::Fast => "fast",
            Autotune::Balanced => "balanced",
            Autotune::Full => "full",
        }
    }
}

/// Gradient clipping, as PyTorch's `clip_grad_norm_` and `clip_grad_value_`,
/// applied after loss scaling is undone and before the optimizer step.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub enum Clip {
    /// `clip_grad_norm = x`: when the global L2 norm of all gradients
    /// exceeds x, every gradient is scaled by `x / (norm + 1e-6)`.
    Norm(f64),
    /// `clip_grad_value = x`: every gradient value is clamped to `[-x, x]`.
    Value(f64),
}

/// The loss minimized by training; its kind decides whether the task is
/// regression or classification.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub enum Loss {
    /// `mse`: mean squared error, for regression.
    Mse,
    /// `mae`: mean absolute error, for regression.
    Mae,
    /// `huber(delta=1.0)`: squared error for small errors, absolute error for
    /// large ones, for regression.
    Huber {
        /// The error size where the loss turns from quadratic to linear; > 0.
        delta: f64,
    },
    /// `cross_entropy`: softmax cross-entropy over class indices, for classification.
    CrossEntropy,
    /// `bce`: binary cross-entropy on one logit per row, for two classes.
    Bce,
}

impl Loss {
    /// True for the losses that take class targets.
    pub fn is_classification(&self) -> bool {
        matches!(self, Loss::CrossEntropy | Loss::Bce)
    }

    /// As a spec writes it: `mse`, `huber(delta=2)`.
    pub fn written(&self) -> String {
        match self {
            Loss::Mse => "mse".into(),
            Loss::Mae => "mae".into(),
            Loss::Huber { delta } => format!("huber(delta={delta})"),
            Loss::CrossEntropy => "cross_entropy".into(),
            Loss::Bce => "bce".into(),
        }
    }
}

/// Optimizers with PyTorch's argument names and PyTorch's defaults.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub enum Optimizer {
    /// torch defaults: lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 0.01.
    AdamW {
        /// Learning rate; > 0.
        lr: f64,
        /// First of `betas`: decay rate of the running mean of gradients, in [0, 1).
        beta1: f64,
        /// Second of `betas`: decay rate of the running mean of squared gradients, in [0, 1).
        beta2: f64,
        /// Added to the denominator for numerical stability; > 0.
        eps: f64,
        /// Decoupled weight decay; >= 0.
        weight_decay: f64,
        /// `fused=true`: the whole update as one pass over all the parameters on the device; `None` unwritten.
        #[serde(skip_serializing_if = "Option::is_none")]
        fused: Option<bool>,
    },
    /// torch defaults: lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 0.
    Adam {
        /// Learning rate; > 0.
        lr: f64,
        /// First of `betas`: decay rate of the running mean of gradients, in [0, 1).
        beta1: f64,
        /// Second of `betas`: decay rate of the running mean of squared gradients, in [0, 1).
        beta2: f64,
        /// Added to the denominator for numerical stability; > 0.
        eps: f64,
        /// Weight decay; >= 0.
        weight_decay: f64,
        /// `fused=true`: the whole update as one pass over all the parameters on the device; `None` unwritten.
        #[serde(skip_serializing_if = "Option::is_none")]
        fused: Option<bool>,
    },
    /// torch defaults: lr 1e-3, momentum 0, dampening 0, weight_decay 0, nesterov false.
    Sgd {
        /// Learning rate; > 0.
        lr: f64,
        /// Momentum factor; >= 0, 0 for none.
        momentum: f64,
        /// Dampening of momentum; must be 0 with `nesterov`.
        dampening: f64,
        /// Weight decay; >= 0.
        weight_decay: f64,
        /// Nesterov momentum; needs `momentum` > 0 and `dampening` 0.
        nesterov: bool,
        /// `fused=true`: the whole update as one pass over all the parameters on the device; `None` unwritten.
        #[serde(skip_serializing_if = "Option::is_none")]
        fused: Option<bool>,
    },
    /// torch defaults: lr 1e-2, alpha 0.99, eps 1e-8, weight_decay 0, momentum 0, centered false.
    RmsProp {
        /// Learning rate; > 0.
        lr: f64,
        /// Smoothing constant of the running mean of squared gradients; >= 0.
        alpha: f64,
        /// Added to the denominator for numerical stability; > 0.
        eps: f64,
        /// Weight decay; >= 0.
        weight_decay: f64,
        /// Momentum factor; >= 0, 0 for none.
        momentum: f64,
        /// Divide by an estimate of the gradient's variance rather than its raw second moment.
        centered: bool,
    },
}

impl Optimizer {
    /// The learning rate, whichever the optimizer.
    pub fn lr(&self) -> f64 {
        match *self {
            Optimizer::AdamW { lr, .. }
            | Optimizer::Adam { lr, .. }
            | Optimizer::Sgd { lr, .. }
            | Optimizer::RmsProp { lr, .. } => lr,
        }
    }

    /// The optimizer's name as the spec writes it.
    pub fn name(&self) -> &'static str {
        match self {
            Optimizer::AdamW { .. } => "adamw",
            Optimizer::Adam { .. } => "adam",
            Optimizer::Sgd { .. } => "sgd",
            Optimizer::RmsProp { .. } => "rmsprop",
        }
    }

    /// This optimizer with `fused` set; `None` for RMSprop, which has no fused update.
    pub fn with_fused(self, on: bool) -> Option<Self> {
        let mut o = self;
        match &mut o {
            Optimizer::AdamW { fused, .. } | Optimizer::Adam { fused, .. } | Optimizer::Sgd { fused, .. } => {
                *fused = Some(on)
            }
            Optimizer::RmsProp { .. } => return None,
        }
        Some(o)
    }

    /// The spec's `fused` (`None` where unwritten, and for RMSprop, which has none).
    pub fn fused(&self) -> Option<bool> {
        match *self {
            Optimizer::AdamW { fused, .. } | Optimizer::Adam { fused, .. } | Optimizer::Sgd { fused, .. } => fused,
            Optimizer::RmsProp { .. } => None,
        }
    }
}

/// Learning-rate schedules, stepped once per epoch, with an optional linear
/// warmup of `warmup` epochs (from lr/warmup up to lr) before the schedule.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Scheduler {
    /// The schedule that runs after the warmup.
    pub kind: SchedulerKind,
    /// Default 0.
    pub warmup: usize,
}

/// The schedule proper, with PyTorch's meaning for each parameter.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub enum SchedulerKind {
    /// `cosine(t_max, eta_min=0)`
    Cosine {
        /// Epochs over which the rate anneals from lr down to `eta_min`; at least 1.
        t_max: usize,
        /// The lowest learning rate; >= 0.
        eta_min: f64,
    },
    /// `step(step_size, gamma=0.1)`
    Step {
        /// Epochs between two cuts of the rate; at least 1.
        step_size: usize,
        /// Factor the rate is multiplied by every `step_size` epochs; > 0.
        gamma: f64,
    },
    /// `exponential(gamma)`
    Exponential {
        /// Factor the rate is multiplied by every epoch; > 0.
        gamma: f64,
    },
}

/// `early_stop(patience, min_delta=0)`, on validation loss.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct EarlyStop {
    /// Epochs without improvement before training stops; at least 1.
    pub patience: usize,
    /// A drop in validation loss must exceed this to count as improvement; >= 0.
    pub min_delta: f64,
}

/// `checkpoint(every_n, path, async_save=false, keep=1)`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Checkpoint {
    /// Save every `every_n` epochs, and after the last one; at least 1.
    pub every_n: usize,
    /// As written; relative paths are resolved against the spec's folder by
    /// the caller.
    pub path: PathBuf,
    /// Encode and write each checkpoint on a background thread.
    pub async_save: bool,
    /// Checkpoints kept: `path`, then older ones as `path.1` to `path.{keep-1}`; at least 1.
    pub keep: usize,
}

/// `loss_scale = none | dynamic | dynamic(init=, growth=, interval=, backoff=)`.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub enum LossScale {
    /// Dynamic scaling with PyTorch's defaults for fp16, none otherwise.
    Auto,
    /// `none`: no loss scaling.
    None,
    /// `dynamic(...)`: the scale is cut after a step with inf or NaN gradients
    /// and grows after a run of finite ones.
    Dynamic {
        /// Starting scale; > 0, default 65536.
        init: f64,
        /// Factor the scale grows by after `interval` finite steps in a row; > 0, default 2.0.
        growth: f64,
        /// Finite steps in a row before the scale grows; at least 1, default 2000.
        interval: usize,
        /// Factor the scale is cut by after a skipped step; in (0, 1), default 0.5.
        backoff: f64,
    },
}

/// `precision`: the type the dense layers' matrix products run in; master
/// weights, optimizer state and updates always stay fp32.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Precision {
    /// `fp32`: single precision throughout.
    Fp32,
    /// `fp16`: half precision products, with dynamic loss scaling by default.
    Fp16,
    /// `bf16`: bfloat16 products; fp32's exponent range, so no loss scaling by default.
    Bf16,
    /// `tf32`: fp32 storage with the products on TF32 tensor cores (NVIDIA
    /// compute capability 8.0 or newer), as PyTorch's `allow_tf32`.
    Tf32,
}

/// `device`: where training is asked to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum DeviceRequest {
    /// `auto`: the best device really present.
    Auto,
    /// `cpu`: the CPU backend.
    Cpu,
    /// `cuda` is `Cuda(None)` (the first GPU); `"cuda:1"` is `Cuda(Some(1))`.
    Cuda(Option<usize>),
    /// `wgpu`: the portable wgpu GPU backend.
    Wgpu,
}

/// The devices of a data-parallel run: each takes a slice of every batch
/// and the gradients are summed over all of them.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub enum DeviceSet {
    /// These devices, two or more, all CPU or all CUDA; `cpu` may repeat
    /// (replicas sharing the host's cores).
    List(Vec<DeviceRequest>),
    /// `"cuda:all"`: every CUDA GPU the driver reports.
    AllCuda,
}

impl DeviceSet {
    /// As a spec or `--device` writes it: `cpu,cpu`, `cuda:0,cuda:1`, `cuda:all`.
    pub fn name(&self) -> String {
        match self {
            DeviceSet::AllCuda => "cuda:all".into(),
            DeviceSet::List(list) => list.iter().map(|d| d.name()).collect::<Vec<_>>().join(","),
        }
    }

    /// The first device: the one that evaluates, checkpoints and exports.
    pub fn first(&self) -> DeviceRequest {
        match self {
            DeviceSet::AllCuda => DeviceRequest::Cuda(Some(0)),
            DeviceSet::List(list) => list.first().copied().unwrap_or(DeviceRequest::Cpu),
        }
    }

    /// Why this set cannot run data-parallel, in words; `None` when it can.
    /// Every device is named (no `auto`), they are of one kind, CPU or
    /// CUDA, there are at least two, and no GPU is named twice.
    pub fn problem(&self) -> Option<String> {
        let DeviceSet::List(list) = self else { return None };
        if list.len() < 2 {
            return Some("data-parallel training needs two devices or more".into());
        }
        if list.contains(&DeviceRequest::Auto) {
            return Some("`auto` picks one device; name each device of a data-parallel run".into());
        }
        if list.contains(&DeviceRequest::Wgpu) {
            return Some(
                "data-parallel training runs on `cpu` and `cuda` devices; on wgpu, Burn 0.21's fusion server \
                 cannot serve two replicas (docs/dev/data-parallel-research.md)"
                    .into(),
            );
        }
        let cpus = list.iter().filter(|d| **d == DeviceRequest::Cpu).count();
        if cpus != 0 && cpus != list.len() {
            return Some("the devices of a data-parallel run are all `cpu` or all CUDA GPUs, not both".into());
        }
        let gpus: Vec<usize> = list
            .iter()
            .filter_map(|d| match d {
                DeviceRequest::Cuda(i) => Some(i.unwrap_or(0)),
                _ => None,
            })
            .collect();
        if let Some(twice) = gpus.iter().find(|i| gpus.iter().filter(|j| j == i).count() > 1) {
            return Some(format!("cuda:{twice} is named twice; each GPU takes one replica"));
        }
        None
    }
}

impl DeviceRequest {
    /// As a spec writes it.
    pub fn name(&self) -> String {
        match self {
            DeviceRequest::Auto => "auto".into(),
            DeviceRequest::Cpu => "cpu".into(),
            DeviceRequest::Cuda(None) => "cuda".into(),
            DeviceRequest::Cuda(Some(i)) => format!("cuda:{i}"),
            DeviceRequest::Wgpu => "wgpu".into(),
        }
    }
}

/// The `evaluate:` block.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct EvaluateSpec {
    /// Empty when the spec has no `evaluate:` block or no `metrics` key; the
    /// trainer then picks defaults for the task.
    pub metrics: Vec<Spanned<Metric>>,
}

/// A metric named in `evaluate: metrics = [...]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Metric {
    /// `mae`: mean absolute error (regression).
    Mae,
    /// `mse`: mean squared error (regression).
    Mse,
    /// `rmse`: root mean squared error (regression).
    Rmse,
    /// `r2`: coefficient of determination (regression); 1 is a perfect fit.
    R2,
    /// `accuracy`: fraction of rows whose predicted class is right (classification).
    Accuracy,
    /// `precision`: precision averaged over classes (classification).
    Precision,
    /// `recall`: recall averaged over classes (classification).
    Recall,
    /// `f1`: F1 score averaged over classes (classification).
    F1,
}

impl Metric {
    /// True for the metrics that take class targets.
    pub fn is_classification(&self) -> bool {
        matches!(self, Metric::Accuracy | Metric::Precision | Metric::Recall | Metric::F1)
    }
    /// The metric's name as written in a spec, such as `rmse`.
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

/// The `export:` block; both keys are required when it is present.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ExportSpec {
    /// What to write.
    pub format: Spanned<ExportFormat>,
    /// As written; relative paths are resolved against the spec's folder by
    /// the caller.
    pub path: Spanned<PathBuf>,
}

/// `format` in the `export:` block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum ExportFormat {
    /// `onnx`: the graph at opset 17, normalization included, taking raw feature rows.
    Onnx,
    /// `safetensors`: the weights under PyTorch state-dict names, plus a `.json` sidecar.
    Safetensors,
    /// `burn`: Burn's named MessagePack record of the model, plus a `.json` sidecar.
    Burn,
    /// Accepted so that older specs load; a native engine cannot write it.
    Torchscript,
}
