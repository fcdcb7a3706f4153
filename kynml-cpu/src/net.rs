//! The network: layers, their buffers, and one training step read top to
//! bottom (forward, loss, backward, update).
//!
//! Buffers are sized for the largest batch seen and reused, so a step
//! allocates nothing after the first. Row-major everywhere: an activation
//! is `rows × width`, a dense weight `d_in × d_out` (Burn's layout).

use crate::conv::{self, Window};
use crate::gemm::matmul;
use crate::linear::{Linear, Norm};
use crate::loss::{self, LossConfig, Targets};
use crate::math::{self, Act};
use crate::optim::{self, OptimConfig, ParamState};
use crate::seq::{again, Attention, Block, Mean, Positional, Tokens};
use crate::tables::Tables;
use crate::team::{piece, Parts, Team};

/// Normalisation's epsilon (batchnorm and layernorm) and batchnorm's
/// running-average momentum, PyTorch's defaults: defined here once, and used
/// by KynML's Burn layers and exports too.
pub const NORM_EPS: f64 = 1e-5;
/// `running = (1 - m) running + m batch`.
pub const BATCHNORM_MOMENTUM: f64 = 0.1;
const EPS: f64 = NORM_EPS;
const MOMENTUM: f32 = BATCHNORM_MOMENTUM as f32;
/// Elementwise passes smaller than this run on one thread.
const PARALLEL_MIN: usize = 16 * 1024;

/// One line of a `model` block after `input N`.
#[derive(Debug, Clone, PartialEq)]
pub enum LayerConfig {
    /// A fully connected layer of `units` outputs, then its activation; on
    /// a sequence, the same map at each of its `positions` (1 for plain
    /// features).
    Dense {
        /// Output width (per position).
        units: usize,
        /// Applied to the product plus bias.
        act: Act,
        /// Positions of a sequence, mapped alike; 1 for plain features.
        positions: usize,
    },
    /// Batch normalisation over the batch, per feature.
    BatchNorm,
    /// Layer normalisation over the features, per row, or per position of
    /// a sequence of `positions`.
    LayerNorm {
        /// Positions of a sequence, normalised each on its own; 1 for plain features.
        positions: usize,
    },
    /// Inverted dropout with this drop probability in `[0, 1)`.
    Dropout(f64),
    /// Batch normalisation per channel of channels-first rows, over the
    /// batch and the channel's `positions` values (PyTorch's
    /// `BatchNorm1d`/`BatchNorm2d` after a convolution).
    ChannelBatchNorm {
        /// Values per channel.
        positions: usize,
    },
    /// A convolution of `channels` outputs over the window (the input's
    /// `[channels, height, width]` in it, height 1 for a 1-D input), then
    /// its activation; weight `[out, in, kernel height, kernel width]`.
    Conv {
        /// The input, kernel, stride and padding.
        window: Window,
        /// Output channels.
        channels: usize,
        /// Applied to the convolution plus bias.
        act: Act,
    },
    /// The largest value of each window, per channel (no padding).
    MaxPool(Window),
    /// The mean of each window, per channel (no padding).
    AvgPool(Window),
    /// The mean of each channel's `positions` values.
    GlobalAvgPool {
        /// Values per channel.
        positions: usize,
    },
    /// Channels-first values taken as plain features: the values as they are.
    Flatten,
    /// A text's token ids (the input row: whole numbers, 0 where the text
    /// is padded) to vectors of `dim` from a table of `tokens` rows
    /// (`[tokens, dim]`); padding gives zeros. It must come first, and its
    /// ids give the padding mask that attention and the mean read.
    Tokens {
        /// Rows of the table.
        tokens: usize,
        /// Values per position.
        dim: usize,
    },
    /// Each categorical column's index (a whole number among the plain
    /// features) swapped for its row of the column's table (`[categories,
    /// dim]`), the other features copied; an index outside its table reads
    /// row 0.
    Categorical {
        /// Values per category.
        dim: usize,
        /// `(position among the features, categories)` per column, by position.
        columns: Vec<(usize, usize)>,
    },
    /// One learned vector per position added to the row (`[1, L · D]`).
    Positional,
    /// Multi-head self-attention over `length` positions of `dim` values
    /// (PyTorch's `nn.MultiheadAttention`, padding's keys masked).
    Attention {
        /// Positions.
        length: usize,
        /// Values per position.
        dim: usize,
        /// Heads; `dim` divides into them.
        heads: usize,
    },
    /// The pre-norm transformer encoder block over `length` positions of
    /// `dim` (PyTorch's `nn.TransformerEncoderLayer(..., activation="gelu",
    /// norm_first=True)`).
    Transformer {
        /// Positions.
        length: usize,
        /// Values per position.
        dim: usize,
        /// Attention heads.
        heads: usize,
        /// The feed-forward layer's width.
        ff: usize,
        /// The four dropouts' probability in training.
        dropout: f64,
    },
    /// The mean over a text's positions that are not padding: `[L, D]` to `[D]`.
    SequenceMean {
        /// Positions.
        length: usize,
        /// Values per position.
        dim: usize,
    },
    /// These layers, their output added to the block's input (`y = x +
    /// f(x)`), through `projection` where the layers change the width.
    Residual {
        /// The layers, in order.
        layers: Vec<LayerConfig>,
        /// The layer that maps the input to the layers' output width, if needed.
        projection: Option<Box<LayerConfig>>,
    },
}

impl LayerConfig {
    /// Values per row of this layer's output, for `input` values per row in.
    pub fn width(&self, input: usize) -> usize {
        match self {
            LayerConfig::Dense { units, positions, .. } => units.saturating_mul((*positions).max(1)),
            LayerConfig::Conv { window, channels, .. } => channels.saturating_mul(window.positions()),
            LayerConfig::MaxPool(window) | LayerConfig::AvgPool(window) => {
                window.input[0].saturating_mul(window.positions())
            }
            LayerConfig::GlobalAvgPool { positions } => input / (*positions).max(1),
            LayerConfig::Tokens { dim, .. } => input.saturating_mul(*dim),
            LayerConfig::Categorical { dim, columns } => {
                input.saturating_add(columns.len().saturating_mul(dim.saturating_sub(1)))
            }
            LayerConfig::SequenceMean { dim, .. } => *dim,
            LayerConfig::Residual { layers, .. } => layers.iter().fold(input, |w, l| l.width(w)),
            LayerConfig::BatchNorm
            | LayerConfig::ChannelBatchNorm { .. }
            | LayerConfig::LayerNorm { .. }
            | LayerConfig::Dropout(_)
            | LayerConfig::Flatten
            | LayerConfig::Positional
            | LayerConfig::Attention { .. }
            | LayerConfig::Transformer { .. } => input,
        }
    }

    /// Values per row that this layer's buffers hold through a training
    /// step on `input` values per row: what it keeps for the backward pass
    /// and its own gradient scratch (`input_grad`: the step takes the
    /// gradient of this layer's input, as for every layer but the first).
    fn values_per_row(&self, input: usize, input_grad: bool) -> usize {
        let out = self.width(input);
        let act_out = |act: &Act| usize::from(*act != Act::Linear);
        let sum = |parts: &[usize]| parts.iter().fold(0usize, |a, &b| a.saturating_add(b));
        let times = |a: usize, b: usize| a.saturating_mul(b);
        match self {
            // The product plus bias, and the activation's output.
            LayerConfig::Dense { act, .. } => times(out, 1 + act_out(act)),
            // The normalised values and the output; channels-first rows
            // also pass through two transposed copies.
            LayerConfig::BatchNorm => times(2, input),
            LayerConfig::ChannelBatchNorm { positions } => times(if *positions > 1 { 4 } else { 2 }, input),
            // The normalised values, the output, and one deviation per position.
            LayerConfig::LayerNorm { positions } => sum(&[times(2, input), (*positions).max(1)]),
            LayerConfig::Dropout(p) => times(if *p > 0.0 { 2 } else { 1 }, input),
            LayerConfig::Conv { window, channels, act } => {
                // The patches (and their gradient), the product in both
                // layouts and the activation's output.
                let (positions, patch) = (window.positions(), window.patch());
                let patches = times(positions, patch);
                sum(&[
                    times(patches, 1 + usize::from(input_grad)),
                    times(times(positions, *channels), 2 + act_out(act)),
                ])
            }
            // The output and the index of each window's largest value.
            LayerConfig::MaxPool(_) => times(2, out),
            LayerConfig::Flatten | LayerConfig::Positional => input,
            LayerConfig::AvgPool(_)
            | LayerConfig::GlobalAvgPool { .. }
            | LayerConfig::Tokens { .. }
            | LayerConfig::Categorical { .. }
            | LayerConfig::SequenceMean { .. } => out,
            LayerConfig::Attention { length, dim, heads } => Attention::values_per_row(*length, *dim, *heads, false),
            LayerConfig::Transformer { length, dim, heads, ff, dropout } => {
                Block::values_per_row(*length, *dim, *heads, *ff, *dropout > 0.0)
            }
            LayerConfig::Residual { layers, projection } => {
                // The inner layers, each at the width that reaches it, the
                // projection, the sum, and four gradient buffers as wide as
                // the widest of them.
                let (mut width, mut inner, mut widest) = (input, 0usize, input);
                for (i, layer) in layers.iter().enumerate() {
                    inner = inner.saturating_add(layer.values_per_row(width, i > 0 || input_grad));
                    width = layer.width(width);
                    widest = widest.max(width);
                }
                if let Some(p) = projection {
                    inner = inner.saturating_add(p.values_per_row(input, input_grad));
                    widest = widest.max(p.width(input));
                }
                sum(&[inner, out, times(4, widest)])
            }
        }
    }
}

/// Values per row that a network of `input` features and these layers
/// holds through a training step: the input batch, every layer's buffers
/// ([`LayerConfig::values_per_row`]), the two gradient buffers as wide as
/// its widest layer, and a text's padding mask (one value a position). Times the batch's rows and 4 bytes, the memory a batch
/// costs, computed without building the network (whose weights may be large).
pub fn values_per_row(input: usize, layers: &[LayerConfig]) -> usize {
    let (mut width, mut own, mut widest) = (input, 0usize, input);
    for (i, layer) in layers.iter().enumerate() {
        own = own.saturating_add(layer.values_per_row(width, i > 0));
        width = layer.width(width);
        widest = widest.max(width);
    }
    let mask = if matches!(layers.first(), Some(LayerConfig::Tokens { .. })) { input } else { 0 };
    own.saturating_add(input).saturating_add(widest.saturating_mul(2)).saturating_add(mask)
}

/// Where dropout masks come from. The Burn engine draws the same masks from
/// the same source, which is what keeps the two engines' runs comparable.
pub trait MaskSource {
    /// Fills `mask` with 0 (dropped, probability `p`) or `1 / (1 - p)`
    /// (kept), in row-major order, and writes `x * mask` to `out` (all
    /// three the same length).
    /// `team` is the network's threads, for sources that fill in parallel.
    fn dropout(&mut self, team: &Team, p: f64, x: &[f32], mask: &mut [f32], out: &mut [f32]);
}

/// A [`MaskSource`] for models without dropout; it panics if asked for a mask.
pub struct NoDropout;

impl MaskSource for NoDropout {
    fn dropout(&mut self, _: &Team, _: f64, _: &[f32], _: &mut [f32], _: &mut [f32]) {
        panic!("this network has dropout: give train_step a MaskSource");
    }
}

/// A tensor's name and shape, as the Burn model names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    /// `{layer}.{field}`: `0.weight`, `1.running_mean`, ...
    pub name: String,
    /// `[d_in, d_out]` for dense weights, `[width]` otherwise.
    pub shape: Vec<usize>,
    /// True for what the optimizer updates, false for batchnorm's running statistics.
    pub trainable: bool,
}

/// A trainable tensor: its value, its gradient and its optimizer state.
#[derive(Debug, Clone)]
pub(crate) struct Param {
    pub value: Vec<f32>,
    pub grad: Vec<f32>,
    pub state: Option<ParamState>,
    /// The gradients of the earlier parts of an accumulated step; empty
    /// between steps.
    pub acc: Vec<f32>,
}

impl Param {
    pub fn new(len: usize, fill: f32) -> Self {
        Param { value: vec![fill; len], grad: vec![0.0; len], state: None, acc: Vec::new() }
    }
}

#[derive(Debug, Clone)]
enum Layer {
    Dense {
        /// Positions of a sequence mapped alike (1 for plain features).
        positions: usize,
        lin: Linear,
    },
    BatchNorm {
        /// Features, or channels of channels-first rows.
        width: usize,
        /// Values per channel: 1 for plain features.
        positions: usize,
        gamma: Param,
        beta: Param,
        running_mean: Vec<f32>,
        running_var: Vec<f32>,
        /// Normalised, one row per position (as the input for plain features).
        x_hat: Vec<f32>,
        /// `1 / sqrt(var + eps)` per feature, of the last training batch.
        inv_std: Vec<f32>,
        out: Vec<f32>,
        /// Channels-first rows as one row per position, and the output in
        /// that layout (unused for plain features).
        t: Vec<f32>,
        yt: Vec<f32>,
    },
    /// Per row, or per position of a sequence.
    Norm(Norm),
    Dropout {
        prob: f64,
        /// 0 or `1 / (1 - p)` per element of the last training batch.
        mask: Vec<f32>,
        out: Vec<f32>,
    },
    Conv {
        window: Window,
        channels: usize,
        act: Act,
        /// `[out, in · kh · kw]`.
        weight: Param,
        bias: Param,
        /// The input's patches, one row per patch value (see [`conv::im2col`]).
        cols: Vec<f32>,
        /// `[channels, rows · positions]`: the product, and in the backward
        /// pass the output gradient in that layout.
        zt: Vec<f32>,
        /// The patches' gradient.
        dcols: Vec<f32>,
        /// Convolution plus bias, channels first (`rows × channels · positions`).
        z: Vec<f32>,
        out: Vec<f32>,
    },
    MaxPool {
        window: Window,
        /// The input index of each output's maximum.
        arg: Vec<u32>,
        out: Vec<f32>,
    },
    AvgPool {
        window: Window,
        out: Vec<f32>,
    },
    Flatten {
        out: Vec<f32>,
    },
    GlobalAvgPool {
        channels: usize,
        positions: usize,
        out: Vec<f32>,
    },
    Tokens(Tokens),
    Categorical(Tables),
    Positional(Positional),
    Attention(Box<Attention>),
    Transformer(Box<Block>),
    SequenceMean(Mean),
    Residual(Box<Residual>),
}

/// A residual block: its layers, the projection of its input where they
/// change the width, and the buffers its backward pass works in.
#[derive(Debug, Clone)]
struct Residual {
    block: Vec<Layer>,
    projection: Option<Layer>,
    /// Values per row of the input and of the output.
    input: usize,
    width: usize,
    out: Vec<f32>,
    /// The block's gradient buffers (as the network's), and the projection's.
    g: Vec<f32>,
    spare: Vec<f32>,
    skip: Vec<f32>,
    skip_spare: Vec<f32>,
}

/// What a layer's forward pass reads besides its input.
struct Pass<'a> {
    team: &'a Team,
    /// Rows of the batch.
    rows: usize,
    /// The padding mask, `[rows, L]`, when the input is a text.
    present: Option<&'a [f32]>,
}

impl Layer {
    /// The layer of `config` on `width` values per row, which becomes its
    /// output's width.
    fn new(config: &LayerConfig, width: &mut usize) -> Layer {
        let input = *width;
        *width = config.width(input);
        match *config {
            LayerConfig::Dense { units, act, positions } => {
                let positions = positions.max(1);
                let d_in = input / positions;
                Layer::Dense { positions, lin: Linear::new(d_in, units, act) }
            }
            LayerConfig::BatchNorm | LayerConfig::ChannelBatchNorm { .. } => {
                let positions = match config {
                    LayerConfig::ChannelBatchNorm { positions } => (*positions).max(1),
                    _ => 1,
                };
                let c = input / positions;
                Layer::BatchNorm {
                    width: c,
                    positions,
                    gamma: Param::new(c, 1.0),
                    beta: Param::new(c, 0.0),
                    running_mean: vec![0.0; c],
                    running_var: vec![1.0; c],
                    x_hat: Vec::new(),
                    inv_std: vec![0.0; c],
                    out: Vec::new(),
                    t: Vec::new(),
                    yt: Vec::new(),
                }
            }
            LayerConfig::LayerNorm { positions } => Layer::Norm(Norm::new(input / positions.max(1))),
            LayerConfig::Dropout(prob) => Layer::Dropout { prob, mask: Vec::new(), out: Vec::new() },
            LayerConfig::Conv { window, channels, act } => Layer::Conv {
                window,
                channels,
                act,
                weight: Param::new(channels * window.patch(), 0.0),
                bias: Param::new(channels, 0.0),
                cols: Vec::new(),
                zt: Vec::new(),
                dcols: Vec::new(),
                z: Vec::new(),
                out: Vec::new(),
            },
            LayerConfig::MaxPool(window) => Layer::MaxPool { window, arg: Vec::new(), out: Vec::new() },
            LayerConfig::AvgPool(window) => Layer::AvgPool { window, out: Vec::new() },
            LayerConfig::Flatten => Layer::Flatten { out: Vec::new() },
            LayerConfig::GlobalAvgPool { positions } => {
                Layer::GlobalAvgPool { channels: *width, positions: positions.max(1), out: Vec::new() }
            }
            LayerConfig::Tokens { tokens, dim } => Layer::Tokens(Tokens::new(tokens, input, dim)),
            LayerConfig::Categorical { dim, ref columns } => Layer::Categorical(Tables::new(input, dim, columns)),
            LayerConfig::Positional => Layer::Positional(Positional::new(input)),
            LayerConfig::Attention { length, dim, heads } => {
                Layer::Attention(Box::new(Attention::new(length, dim, heads, 0.0)))
            }
            LayerConfig::Transformer { length, dim, heads, ff, dropout } => {
                Layer::Transformer(Box::new(Block::new(length, dim, heads, ff, dropout)))
            }
            LayerConfig::SequenceMean { length, dim } => Layer::SequenceMean(Mean { length, dim, out: Vec::new() }),
            LayerConfig::Residual { ref layers, ref projection } => {
                let mut inner = input;
                let block = layers.iter().map(|c| Layer::new(c, &mut inner)).collect();
                let projection = projection.as_deref().map(|c| Layer::new(c, &mut input.clone()));
                Layer::Residual(Box::new(Residual {
                    block,
                    projection,
                    input,
                    width: *width,
                    out: Vec::new(),
                    g: Vec::new(),
                    spare: Vec::new(),
                    skip: Vec::new(),
                    skip_spare: Vec::new(),
                }))
            }
        }
    }

    fn out(&self) -> &[f32] {
        match self {
            Layer::Dense { lin, .. } => lin.out(),
            Layer::Conv { act: Act::Linear, z, .. } => z,
            Layer::Norm(n) => &n.out,
            Layer::Attention(a) => a.out(),
            Layer::Transformer(b) => &b.out,
            Layer::Residual(r) => &r.out,
            Layer::Tokens(Tokens { out, .. })
            | Layer::Positional(Positional { out, .. })
            | Layer::Categorical(Tables { out, .. })
            | Layer::SequenceMean(Mean { out, .. })
            | Layer::BatchNorm { out, .. }
            | Layer::Dropout { out, .. }
            | Layer::Conv { out, .. }
            | Layer::MaxPool { out, .. }
            | Layer::AvgPool { out, .. }
            | Layer::GlobalAvgPool { out, .. }
            | Layer::Flatten { out } => out,
        }
    }

    /// The trainable tensors, in the Burn layer's order.
    fn params(&self) -> Vec<&Param> {
        match self {
            Layer::Dense { lin, .. } => vec![&lin.weight, &lin.bias],
            Layer::Conv { weight, bias, .. } => vec![weight, bias],
            Layer::BatchNorm { gamma, beta, .. } => vec![gamma, beta],
            Layer::Norm(n) => vec![&n.gamma, &n.beta],
            Layer::Tokens(t) => vec![&t.table],
            Layer::Categorical(t) => t.tables.iter().collect(),
            Layer::Positional(p) => vec![&p.weight],
            Layer::Attention(a) => a.params().to_vec(),
            Layer::Transformer(b) => b.params(),
            Layer::Residual(r) => r.block.iter().chain(&r.projection).flat_map(Layer::params).collect(),
            Layer::Dropout { .. }
            | Layer::MaxPool { .. }
            | Layer::AvgPool { .. }
            | Layer::Flatten { .. }
            | Layer::GlobalAvgPool { .. }
            | Layer::SequenceMean(_) => Vec::new(),
        }
    }

    fn params_mut(&mut self) -> Vec<&mut Param> {
        match self {
            Layer::Dense { lin, .. } => vec![&mut lin.weight, &mut lin.bias],
            Layer::Conv { weight, bias, .. } => vec![weight, bias],
            Layer::BatchNorm { gamma, beta, .. } => vec![gamma, beta],
            Layer::Norm(n) => vec![&mut n.gamma, &mut n.beta],
            Layer::Tokens(t) => vec![&mut t.table],
            Layer::Categorical(t) => t.tables.iter_mut().collect(),
            Layer::Positional(p) => vec![&mut p.weight],
            Layer::Attention(a) => a.params_mut().into_iter().collect(),
            Layer::Transformer(b) => b.params_mut(),
            Layer::Residual(r) => r.block.iter_mut().chain(&mut r.projection).flat_map(Layer::params_mut).collect(),
            Layer::Dropout { .. }
            | Layer::MaxPool { .. }
            | Layer::AvgPool { .. }
            | Layer::Flatten { .. }
            | Layer::GlobalAvgPool { .. }
            | Layer::SequenceMean(_) => Vec::new(),
        }
    }

    /// Every tensor's field name, shape (the Burn model's) and whether it is
    /// trained: the parameters in [`params`](Self::params)' order, then
    /// batchnorm's running statistics.
    fn info(&self) -> Vec<(String, Vec<usize>, bool)> {
        let param = |name: &str, shape: Vec<usize>| (name.to_string(), shape, true);
        let linear = |prefix: &str, l: &Linear| {
            [param(&format!("{prefix}weight"), vec![l.d_in, l.d_out]), param(&format!("{prefix}bias"), vec![l.d_out])]
        };
        let norm = |prefix: &str, n: &Norm| {
            [param(&format!("{prefix}weight"), vec![n.width]), param(&format!("{prefix}bias"), vec![n.width])]
        };
        // The Burn attention's names (PyTorch's), its weights `[in, out]`.
        let attention = |prefix: &str, a: &Attention| {
            let d = a.dim;
            vec![
                param(&format!("{prefix}in_proj_weight"), vec![d, 3 * d]),
                param(&format!("{prefix}in_proj_bias"), vec![3 * d]),
                param(&format!("{prefix}out_proj.weight"), vec![d, d]),
                param(&format!("{prefix}out_proj.bias"), vec![d]),
            ]
        };
        match self {
            Layer::Dense { lin, .. } => linear("", lin).to_vec(),
            Layer::BatchNorm { width, .. } => {
                let mut out = vec![param("weight", vec![*width]), param("bias", vec![*width])];
                out.push(("running_mean".into(), vec![*width], false));
                out.push(("running_var".into(), vec![*width], false));
                out
            }
            Layer::Norm(n) => norm("", n).to_vec(),
            Layer::Conv { window, channels, .. } => vec![
                param("weight", vec![*channels, window.input[0], window.kernel[0], window.kernel[1]]),
                param("bias", vec![*channels]),
            ],
            Layer::Tokens(t) => vec![param("weight", vec![t.table.value.len() / t.dim, t.dim])],
            Layer::Categorical(t) => (t.tables.iter().enumerate())
                .map(|(k, p)| param(&format!("tables.{k}.weight"), vec![p.value.len() / t.dim, t.dim]))
                .collect(),
            Layer::Positional(p) => vec![param("weight", vec![1, p.weight.value.len()])],
            Layer::Attention(a) => attention("", a),
            Layer::Transformer(b) => {
                let mut out = attention("self_attn.", &b.attn);
                out.extend(linear("linear1.", &b.linear1));
                out.extend(linear("linear2.", &b.linear2));
                out.extend(norm("norm1.", &b.norm1));
                out.extend(norm("norm2.", &b.norm2));
                out
            }
            // PyTorch's names for `block = nn.Sequential(...)` and `projection`.
            Layer::Residual(r) => {
                let mut out = Vec::new();
                for (j, layer) in r.block.iter().enumerate() {
                    out.extend(layer.info().into_iter().map(|(n, s, t)| (format!("block.{j}.{n}"), s, t)));
                }
                if let Some(layer) = &r.projection {
                    out.extend(layer.info().into_iter().map(|(n, s, t)| (format!("projection.{n}"), s, t)));
                }
                out
            }
            Layer::Dropout { .. }
            | Layer::MaxPool { .. }
            | Layer::AvgPool { .. }
            | Layer::Flatten { .. }
            | Layer::GlobalAvgPool { .. }
            | Layer::SequenceMean(_) => Vec::new(),
        }
    }

    /// Values per output row; `None` for a layer that keeps its input's width.
    fn width(&self) -> Option<usize> {
        match self {
            Layer::Dense { lin, positions } => Some(lin.d_out * positions),
            Layer::BatchNorm { width, positions, .. } => Some(width * positions),
            Layer::Conv { window, channels, .. } => Some(channels * window.positions()),
            Layer::MaxPool { window, .. } | Layer::AvgPool { window, .. } => Some(window.input[0] * window.positions()),
            Layer::GlobalAvgPool { channels, .. } => Some(*channels),
            Layer::Tokens(t) => Some(t.length * t.dim),
            Layer::Categorical(t) => Some(t.width()),
            Layer::SequenceMean(m) => Some(m.dim),
            Layer::Residual(r) => Some(r.width),
            Layer::Dropout { .. }
            | Layer::Flatten { .. }
            | Layer::Norm(_)
            | Layer::Positional(_)
            | Layer::Attention(_)
            | Layer::Transformer(_) => None,
        }
    }

    /// Forward in training mode when `masks` is given, else evaluation mode.
    fn forward(&mut self, pass: &Pass, input: &[f32], masks: Option<&mut dyn MaskSource>) {
        let (team, rows) = (pass.team, pass.rows);
        match self {
            Layer::Dense { lin, .. } => lin.forward(team, input),
            Layer::BatchNorm {
                width,
                positions,
                gamma,
                beta,
                running_mean,
                running_var,
                x_hat,
                inv_std,
                out,
                t,
                yt,
            } => {
                // Per channel, a channels-first row is `positions` rows of
                // one value per channel: normalised in that layout.
                let (w, p) = (*width, *positions);
                let n = rows * p;
                let (src, dst) = if p == 1 {
                    (input, &mut *out)
                } else {
                    t.resize(n * w, 0.0);
                    conv::to_positions_first(team, input, rows, w, t);
                    (&t[..], &mut *yt)
                };
                x_hat.resize(n * w, 0.0);
                dst.resize(n * w, 0.0);
                if masks.is_some() {
                    let (mean, var) = column_moments(src, w);
                    let unbiased = if n > 1 { n as f64 / (n as f64 - 1.0) } else { 1.0 };
                    for j in 0..w {
                        inv_std[j] = (1.0 / (var[j] + EPS).sqrt()) as f32;
                        running_mean[j] = running_mean[j] * (1.0 - MOMENTUM) + mean[j] as f32 * MOMENTUM;
                        running_var[j] = running_var[j] * (1.0 - MOMENTUM) + (var[j] * unbiased) as f32 * MOMENTUM;
                    }
                    let mean: Vec<f32> = mean.iter().map(|&m| m as f32).collect();
                    normalize_columns(team, src, &mean, inv_std, &gamma.value, &beta.value, x_hat, dst);
                } else {
                    let inv: Vec<f32> = running_var.iter().map(|&v| (1.0 / (v as f64 + EPS).sqrt()) as f32).collect();
                    normalize_columns(team, src, running_mean, &inv, &gamma.value, &beta.value, x_hat, dst);
                }
                if p > 1 {
                    out.resize(n * w, 0.0);
                    conv::to_channels_first(team, yt, rows, p, w, None, out);
                }
            }
            Layer::Norm(n) => n.forward(team, input),
            Layer::Dropout { prob, mask, out } => {
                out.resize(input.len(), 0.0);
                match masks {
                    Some(source) if *prob > 0.0 => {
                        mask.resize(input.len(), 0.0);
                        source.dropout(team, *prob, input, mask, out);
                    }
                    _ => out.copy_from_slice(input),
                }
            }
            Layer::Conv { window, channels, act, weight, bias, cols, zt, z, out, .. } => {
                // The patches times the weights, for the whole batch at once.
                let (positions, patch, c) = (window.positions(), window.patch(), *channels);
                let m = rows * positions;
                cols.resize(m * patch, 0.0);
                conv::im2col(team, window, input, rows, cols);
                zt.resize(m * c, 0.0);
                matmul((c, m, patch), &weight.value, false, cols, false, zt, false, team);
                z.resize(m * c, 0.0);
                conv::from_channel_rows(team, zt, rows, positions, &bias.value, z);
                if *act != Act::Linear {
                    out.resize(z.len(), 0.0);
                    let act = *act;
                    par_zip(team, z, out, |z, out| math::forward(act, z, out));
                }
            }
            Layer::MaxPool { window, arg, out } => {
                let width = window.input[0] * window.positions();
                out.resize(rows * width, 0.0);
                arg.resize(rows * width, 0);
                conv::maxpool(team, window, input, rows, out, arg);
            }
            Layer::Flatten { out } => {
                out.clear();
                out.extend_from_slice(input);
            }
            Layer::AvgPool { window, out } => {
                out.resize(rows * window.input[0] * window.positions(), 0.0);
                conv::avgpool(team, window, input, rows, out);
            }
            Layer::GlobalAvgPool { channels, positions, out } => {
                let (c, p) = (*channels, *positions);
                out.resize(rows * c, 0.0);
                for (o, x) in out.iter_mut().zip(input.chunks_exact(p)) {
                    *o = (x.iter().map(|&v| f64::from(v)).sum::<f64>() / p as f64) as f32;
                }
            }
            Layer::Tokens(t) => t.forward(team, input),
            Layer::Categorical(t) => t.forward(input),
            Layer::Positional(p) => p.forward(team, input),
            Layer::Attention(a) => a.forward(team, input, pass.present, masks),
            Layer::Transformer(b) => b.forward(team, input, pass.present, masks),
            Layer::SequenceMean(m) => m.forward(input, pass.present),
            Layer::Residual(r) => r.forward(pass, input, masks),
        }
    }

    /// The parameters' gradients from the output gradient in `g`
    /// (`rows × width`), and when `input_grad`, the input gradient left in
    /// `g` (`spare` is the other buffer, of the same length, to swap with).
    fn backward(&mut self, pass: &Pass, input: &[f32], g: &mut Vec<f32>, spare: &mut Vec<f32>, input_grad: bool) {
        let (team, rows) = (pass.team, pass.rows);
        match self {
            Layer::Dense { lin, positions } => {
                let gz = &mut g[..rows * *positions * lin.d_out];
                lin.backward(team, input, gz, input_grad.then_some(&mut spare[..]));
                if input_grad {
                    std::mem::swap(g, spare);
                }
            }
            Layer::BatchNorm { width, positions, gamma, beta, x_hat, inv_std, t, .. } => {
                let (w, p) = (*width, *positions);
                let n_rows = rows * p;
                let gy = if p == 1 {
                    &mut g[..rows * w]
                } else {
                    t.resize(n_rows * w, 0.0);
                    conv::to_positions_first(team, &g[..rows * w * p], rows, w, t);
                    &mut t[..]
                };
                // dgamma = Σ dy·x̂, dbeta = Σ dy (over the batch, per feature);
                // dx = γ/σ · (dy - mean(dy) - x̂ · mean(dy·x̂)).
                let (sum_dy, sum_dy_xhat) = scale_shift_grads(team, gy, x_hat, gamma, beta);
                if input_grad {
                    let n = n_rows as f64;
                    let scale: Vec<f32> = (0..w).map(|j| gamma.value[j] * inv_std[j]).collect();
                    let mean_dy: Vec<f32> = sum_dy.iter().map(|&s| (s / n) as f32).collect();
                    let mean_dy_xhat: Vec<f32> = sum_dy_xhat.iter().map(|&s| (s / n) as f32).collect();
                    par_zip_mut(team, gy, x_hat, w, |gy, xh| {
                        for (gr, xr) in gy.chunks_exact_mut(w).zip(xh.chunks_exact(w)) {
                            let per_feature = scale.iter().zip(&mean_dy).zip(&mean_dy_xhat);
                            for ((g, &x), ((&s, &m), &mx)) in gr.iter_mut().zip(xr).zip(per_feature) {
                                *g = s * (*g - m - x * mx);
                            }
                        }
                    });
                    if p > 1 {
                        conv::to_channels_first(team, t, rows, p, w, None, &mut g[..rows * w * p]);
                    }
                }
            }
            Layer::Norm(n) => n.backward(team, g, input_grad),
            Layer::Dropout { prob, mask, .. } => {
                if input_grad && *prob > 0.0 {
                    let gy = &mut g[..mask.len()];
                    par_zip_mut(team, gy, mask, 1, |g, m| {
                        for (g, &m) in g.iter_mut().zip(m) {
                            *g *= m;
                        }
                    });
                }
            }
            Layer::Conv { window, channels, act, weight, bias, cols, zt, dcols, z, out } => {
                let (positions, patch, c) = (window.positions(), window.patch(), *channels);
                let gz = &mut g[..rows * c * positions];
                if *act != Act::Linear {
                    let act = *act;
                    par_zip3(team, z, out, gz, |z, out, g| math::backward(act, z, out, g));
                }
                // In the product's layout (a row per channel): dW = dz ·
                // patchesᵀ, db = Σ dz, dpatches = Wᵀ · dz, then back onto
                // the input.
                let m = rows * positions;
                conv::to_channel_rows(team, gz, rows, c, zt);
                matmul((c, patch, m), zt, false, cols, true, &mut weight.grad, false, team);
                conv::row_sums(team, &zt[..m * c], &mut bias.grad);
                if input_grad {
                    dcols.resize(m * patch, 0.0);
                    matmul((patch, m, c), &weight.value, true, zt, false, dcols, false, team);
                    conv::col2im(team, window, dcols, rows, &mut spare[..rows * window.input_size()]);
                    std::mem::swap(g, spare);
                }
            }
            Layer::MaxPool { window, arg, .. } => {
                if input_grad {
                    let width = window.input[0] * window.positions();
                    let size = window.input_size();
                    conv::maxpool_back(team, window, &g[..rows * width], arg, rows, &mut spare[..rows * size]);
                    std::mem::swap(g, spare);
                }
            }
            Layer::Flatten { .. } => {}
            Layer::AvgPool { window, .. } => {
                if input_grad {
                    let width = window.input[0] * window.positions();
                    let size = window.input_size();
                    conv::avgpool_back(team, window, &g[..rows * width], rows, &mut spare[..rows * size]);
                    std::mem::swap(g, spare);
                }
            }
            Layer::GlobalAvgPool { channels, positions, .. } => {
                if input_grad {
                    let (c, p) = (*channels, *positions);
                    let scale = 1.0 / p as f32;
                    for (dx, &g) in spare[..rows * c * p].chunks_exact_mut(p).zip(&g[..rows * c]) {
                        dx.fill(g * scale);
                    }
                    std::mem::swap(g, spare);
                }
            }
            Layer::Tokens(t) => t.backward(input, &g[..input.len() * t.dim]),
            Layer::Categorical(t) => t.backward(input, &g[..rows * t.width()]),
            Layer::Positional(p) => p.backward(team, &g[..input.len()]),
            Layer::Attention(a) => {
                let n = input.len();
                a.backward(team, input, &mut g[..n], input_grad.then_some(&mut spare[..n]));
                if input_grad {
                    std::mem::swap(g, spare);
                }
            }
            // Its own parameters need the gradient inside it either way.
            Layer::Transformer(b) => b.backward(team, input, g),
            Layer::SequenceMean(m) => {
                if input_grad {
                    m.backward(&g[..rows * m.dim], pass.present, &mut spare[..input.len()]);
                    std::mem::swap(g, spare);
                }
            }
            Layer::Residual(r) => r.backward(pass, input, g, input_grad),
        }
    }

    /// Every tensor's values in [`info`](Self::info)'s order: the
    /// parameters, then batchnorm's running statistics.
    fn values(&self) -> Vec<&[f32]> {
        match self {
            Layer::BatchNorm { gamma, beta, running_mean, running_var, .. } => {
                vec![&gamma.value, &beta.value, running_mean, running_var]
            }
            Layer::Residual(r) => r.block.iter().chain(&r.projection).flat_map(Layer::values).collect(),
            _ => self.params().into_iter().map(|p| &p.value[..]).collect(),
        }
    }

    /// [`values`](Self::values), writable.
    fn values_mut(&mut self) -> Vec<&mut [f32]> {
        match self {
            Layer::BatchNorm { gamma, beta, running_mean, running_var, .. } => {
                vec![&mut gamma.value, &mut beta.value, running_mean, running_var]
            }
            Layer::Residual(r) => r.block.iter_mut().chain(&mut r.projection).flat_map(Layer::values_mut).collect(),
            _ => self.params_mut().into_iter().map(|p| &mut p.value[..]).collect(),
        }
    }

    /// [`values`](Self::values), moved out (the layer keeps empty ones).
    fn take_values(&mut self) -> Vec<Vec<f32>> {
        match self {
            Layer::BatchNorm { gamma, beta, running_mean, running_var, .. } => {
                [&mut gamma.value, &mut beta.value, running_mean, running_var].into_iter().map(std::mem::take).collect()
            }
            Layer::Residual(r) => r.block.iter_mut().chain(&mut r.projection).flat_map(Layer::take_values).collect(),
            _ => self.params_mut().into_iter().map(|p| std::mem::take(&mut p.value)).collect(),
        }
    }
}

impl Residual {
    /// Values per row of the widest of the block's input and layers.
    fn widest(&self) -> usize {
        self.block.iter().chain(&self.projection).filter_map(Layer::width).fold(self.input, usize::max)
    }

    fn forward(&mut self, pass: &Pass, x: &[f32], mut masks: Option<&mut dyn MaskSource>) {
        for i in 0..self.block.len() {
            let (before, rest) = self.block.split_at_mut(i);
            let input = before.last().map_or(x, Layer::out);
            rest[0].forward(pass, input, again(&mut masks));
        }
        if let Some(p) = &mut self.projection {
            p.forward(pass, x, again(&mut masks));
        }
        let y = self.block.last().map_or(x, Layer::out);
        let skip = self.projection.as_ref().map_or(x, Layer::out);
        self.out.resize(y.len(), 0.0);
        par_zip3(pass.team, y, skip, &mut self.out, |y, s, o| {
            o.iter_mut().zip(y.iter().zip(s)).for_each(|(o, (y, s))| *o = y + s)
        });
    }

    /// The parameters' gradients from the output gradient in `g`; with
    /// `input_grad`, the input gradient (the block's plus the skip's) left in `g`.
    fn backward(&mut self, pass: &Pass, x: &[f32], g: &mut [f32], input_grad: bool) {
        let (n_out, n_in) = (self.out.len(), x.len());
        let size = pass.rows * self.widest();
        for buffer in [&mut self.g, &mut self.spare, &mut self.skip, &mut self.skip_spare] {
            buffer.resize(size, 0.0);
        }
        self.g[..n_out].copy_from_slice(&g[..n_out]);
        for i in (0..self.block.len()).rev() {
            let (before, rest) = self.block.split_at_mut(i);
            let input = before.last().map_or(x, Layer::out);
            rest[0].backward(pass, input, &mut self.g, &mut self.spare, i > 0 || input_grad);
        }
        if let Some(p) = &mut self.projection {
            self.skip[..n_out].copy_from_slice(&g[..n_out]);
            p.backward(pass, x, &mut self.skip, &mut self.skip_spare, input_grad);
            if input_grad {
                // Both paths' gradients at the input.
                g[..n_in].copy_from_slice(&self.skip[..n_in]);
            }
        }
        if input_grad {
            // Without a projection, `g` is already the skip's gradient.
            par_zip_mut(pass.team, &mut g[..n_in], &self.g[..n_in], 1, |g, b| {
                g.iter_mut().zip(b).for_each(|(g, b)| *g += b)
            });
        }
    }
}

/// A network with its parameters, gradients, optimizer state and buffers,
/// on the host, and the threads that train it.
#[derive(Debug)]
pub struct Net {
    input: usize,
    /// What the layers were built from.
    configs: Vec<LayerConfig>,
    layers: Vec<Layer>,
    /// As many threads as rayon's global pool has (`RAYON_NUM_THREADS`
    /// sets it), the caller included.
    team: Team,
    /// Two gradient buffers, `rows × widest`, used in turn going backward.
    grad_a: Vec<f32>,
    grad_b: Vec<f32>,
    /// The padding mask of the last batch of texts or sequences (`rows ×
    /// L`: 1 where a position is, 0 where the row is padded); empty unless
    /// the first layer is [`LayerConfig::Tokens`] or the input is a sequence.
    present: Vec<f32>,
    /// Values per position when the input is a sequence of numbers padded
    /// with NaN (see [`read_sequences`](Net::read_sequences)); 0 otherwise.
    channels: usize,
    /// That input with its padding as 0, which the layers read.
    clean: Vec<f32>,
    /// Gradient clipping before each update, if any.
    clip: Option<Clip>,
    /// Sum and count of the pre-clip global gradient norms since the last
    /// [`take_grad_norms`](Net::take_grad_norms).
    norms: (f64, usize),
    /// Seconds of the last training step's forward (with the loss),
    /// backward and update (see [`last_phases`](Net::last_phases)).
    phases: [f64; 3],
}

/// Gradient clipping, as PyTorch's `clip_grad_norm_` and `clip_grad_value_`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Clip {
    /// Scale every gradient by `max / (norm + 1e-6)` when the global L2 norm exceeds `max`.
    Norm(f64),
    /// Clamp every gradient value to `[-x, x]`.
    Value(f64),
}

impl Net {
    /// A network of `input` features and these layers. Dense weights and
    /// biases start at 0, batchnorm and layernorm as PyTorch starts them
    /// (scale 1, shift 0, running mean 0 and variance 1): set the initial
    /// weights with [`tensors_mut`](Self::tensors_mut).
    pub fn new(input: usize, layers: &[LayerConfig]) -> Self {
        let mut width = input;
        let layers_config = layers.to_vec();
        let layers = layers.iter().map(|config| Layer::new(config, &mut width)).collect();
        let team = Team::new(rayon::current_num_threads());
        Net {
            input,
            configs: layers_config,
            layers,
            team,
            grad_a: Vec::new(),
            grad_b: Vec::new(),
            present: Vec::new(),
            channels: 0,
            clean: Vec::new(),
            clip: None,
            norms: (0.0, 0),
            phases: [0.0; 3],
        }
    }

    /// Reads each input row as a sequence of numbers, `channels` at each
    /// position, padded at the end with NaN, as the Burn model reads it: a
    /// position is padding when its first value is NaN (the mask attention
    /// and the mean read), and every NaN reads as 0.
    pub fn read_sequences(&mut self, channels: usize) {
        self.channels = channels;
    }

    /// The number of input features.
    pub fn input_width(&self) -> usize {
        self.input
    }

    /// The number of outputs per row.
    pub fn output_width(&self) -> usize {
        self.layers.iter().rev().find_map(Layer::width).unwrap_or(self.input)
    }

    /// Every tensor's name and shape, in the order of [`tensors`](Self::tensors):
    /// layer by layer, the Burn layer's parameters (`weight` and `bias`,
    /// batchnorm's scale and shift included), then batchnorm's
    /// `running_mean` and `running_var`.
    pub fn tensor_info(&self) -> Vec<TensorInfo> {
        let mut out = Vec::new();
        for (i, layer) in self.layers.iter().enumerate() {
            for (field, shape, trainable) in layer.info() {
                out.push(TensorInfo { name: format!("{i}.{field}"), shape, trainable });
            }
        }
        out
    }

    /// Every tensor's values, in [`tensor_info`](Self::tensor_info)'s order.
    pub fn tensors(&self) -> Vec<&[f32]> {
        self.layers.iter().flat_map(Layer::values).collect()
    }

    /// Every tensor's values, writable, in [`tensor_info`](Self::tensor_info)'s order.
    pub fn tensors_mut(&mut self) -> Vec<&mut [f32]> {
        self.layers.iter_mut().flat_map(Layer::values_mut).collect()
    }

    /// Every tensor's values, in [`tensor_info`](Self::tensor_info)'s
    /// order, moved out of the network, which is then freed (gradients,
    /// optimizer state and buffers): the weights with no copy made.
    pub fn into_tensors(mut self) -> Vec<Vec<f32>> {
        self.layers.iter_mut().flat_map(Layer::take_values).collect()
    }

    /// The optimizer state of every trainable tensor, in
    /// [`tensor_info`](Self::tensor_info)'s order of the trainable ones;
    /// `None` before the first step.
    pub fn optimizer_states(&self) -> Vec<Option<&ParamState>> {
        self.layers.iter().flat_map(Layer::params).map(|p| p.state.as_ref()).collect()
    }

    /// The optimizer state of every trainable tensor, writable (to restore
    /// a saved one), in the order of [`optimizer_states`](Self::optimizer_states).
    pub fn optimizer_states_mut(&mut self) -> Vec<&mut Option<ParamState>> {
        self.layers.iter_mut().flat_map(Layer::params_mut).map(|p| &mut p.state).collect()
    }

    /// One training step on a batch: forward in training mode (batch
    /// statistics, dropout masks from `masks`), the loss, the gradients,
    /// and one update of every parameter by `optimizer` at rate `lr`.
    /// Returns the batch's mean loss.
    ///
    /// # Panics
    /// If `x` is not a whole number of rows, or the targets do not fit (see [`loss::loss`]).
    pub fn train_step(
        &mut self,
        x: &[f32],
        targets: Targets,
        loss_config: LossConfig,
        optimizer: &OptimConfig,
        lr: f64,
        masks: &mut dyn MaskSource,
    ) -> f64 {
        self.train_part(x, targets, loss_config, optimizer, lr, masks, 1.0, true)
    }

    /// One part of an accumulated optimizer step: forward and backward on
    /// `x`, its gradients weighted by `weight` (its share of the step's
    /// rows) and added to the parts before it; on the `last` part, the
    /// clipping and the update. Returns the part's mean loss.
    #[allow(clippy::too_many_arguments)]
    pub fn train_part(
        &mut self,
        x: &[f32],
        targets: Targets,
        loss_config: LossConfig,
        optimizer: &OptimConfig,
        lr: f64,
        masks: &mut dyn MaskSource,
        weight: f64,
        last: bool,
    ) -> f64 {
        let started = std::time::Instant::now();
        let rows = self.rows_of(x);
        self.forward(x, rows, Some(masks));
        let width = self.output_width();
        let widest = self.widest();
        self.grad_a.resize(rows * widest, 0.0);
        self.grad_b.resize(rows * widest, 0.0);
        let pred = self.layers.last().map_or(x, Layer::out);
        let loss = loss::loss(loss_config, pred, width, targets, Some(&mut self.grad_a[..rows * width]));
        let forward = started.elapsed();
        if weight != 1.0 {
            let w = weight as f32;
            self.grad_a[..rows * width].iter_mut().for_each(|g| *g *= w);
        }
        self.backward(x, rows);
        let backward = started.elapsed();
        for p in self.layers.iter_mut().flat_map(Layer::params_mut) {
            match (last, p.acc.is_empty()) {
                (true, true) => {}
                (true, false) => {
                    p.grad.iter_mut().zip(&p.acc).for_each(|(g, a)| *g += a);
                    p.acc.clear();
                }
                (false, true) => p.acc.extend_from_slice(&p.grad),
                (false, false) => p.acc.iter_mut().zip(&p.grad).for_each(|(a, g)| *a += g),
            }
        }
        if last {
            self.clip_grads();
            self.update(optimizer, lr);
        }
        let end = started.elapsed();
        self.phases = [forward.as_secs_f64(), (backward - forward).as_secs_f64(), (end - backward).as_secs_f64()];
        loss
    }

    /// Seconds of the last training step's forward pass (with the loss),
    /// backward pass, and update (accumulation, clipping, optimizer).
    pub fn last_phases(&self) -> [f64; 3] {
        self.phases
    }

    /// Clips the gradients of every later step with `clip` (`None`: no clipping).
    pub fn set_clip(&mut self, clip: Option<Clip>) {
        self.clip = clip;
    }

    /// Starts the running sum of pre-clip norms at `sum` over `steps` (a
    /// resumed epoch's steps so far), so later steps add to it in order.
    pub fn seed_grad_norms(&mut self, sum: f64, steps: usize) {
        self.norms = (sum, steps);
    }

    /// The pre-clip global L2 norms of the gradients summed over the steps
    /// since the last call (or the seed), and how many steps; `None`
    /// without clipping.
    pub fn take_grad_norms(&mut self) -> Option<(f64, usize)> {
        let norms = std::mem::take(&mut self.norms);
        self.clip.is_some().then_some(norms)
    }

    /// Applies the clipping rule to the gradients of the last backward pass,
    /// noting their global norm first.
    fn clip_grads(&mut self) {
        let Some(clip) = self.clip else { return };
        let grads = || self.layers.iter().flat_map(Layer::params).map(|p| &p.grad);
        let norm = grads().flat_map(|g| g.iter()).map(|g| f64::from(*g).powi(2)).sum::<f64>().sqrt();
        self.norms.0 += norm;
        self.norms.1 += 1;
        let params = self.layers.iter_mut().flat_map(Layer::params_mut);
        match clip {
            Clip::Norm(max) => {
                let coef = max / (norm + 1e-6);
                // A NaN norm makes every gradient NaN, as in PyTorch and the
                // Burn engine (`coef < 1.0` was false for it: the rest went on).
                if coef < 1.0 || coef.is_nan() {
                    for p in params {
                        p.grad.iter_mut().for_each(|g| *g = (f64::from(*g) * coef) as f32);
                    }
                }
            }
            Clip::Value(x) => {
                let x = x as f32;
                for p in params {
                    p.grad.iter_mut().for_each(|g| *g = g.clamp(-x, x));
                }
            }
        }
    }

    /// The outputs for `x` in evaluation mode (running statistics, no
    /// dropout), `rows × output_width`, written into `out`.
    pub fn predict(&mut self, x: &[f32], out: &mut Vec<f32>) {
        let rows = self.rows_of(x);
        self.forward(x, rows, None);
        out.clear();
        out.extend_from_slice(self.layers.last().map_or(x, Layer::out));
    }

    fn rows_of(&self, x: &[f32]) -> usize {
        assert!(
            self.input > 0 && x.len().is_multiple_of(self.input),
            "{} values are not rows of {}",
            x.len(),
            self.input
        );
        x.len() / self.input
    }

    /// The values a training step holds per row ([`values_per_row`]): what
    /// a batch of rows costs.
    pub fn values_per_row(&self) -> usize {
        values_per_row(self.input, &self.configs)
    }

    fn widest(&self) -> usize {
        self.layers.iter().map(|l| l.width().unwrap_or(0)).fold(self.input, usize::max)
    }

    /// Forward in training mode when `masks` is given, else evaluation mode.
    fn forward(&mut self, x: &[f32], rows: usize, mut masks: Option<&mut dyn MaskSource>) {
        if let Some(Layer::Tokens(_)) = self.layers.first() {
            // Ids are whole numbers >= 0: 1 for a token, 0 for padding.
            self.present.clear();
            self.present.extend(x.iter().map(|&v| v.min(1.0)));
        }
        if self.channels > 0 {
            self.present.clear();
            self.present.extend(x.chunks_exact(self.channels).map(|p| if p[0].is_nan() { 0.0 } else { 1.0 }));
            self.clean.clear();
            self.clean.extend(x.iter().map(|&v| if v.is_nan() { 0.0 } else { v }));
        }
        let x = if self.channels > 0 { &self.clean[..] } else { x };
        let pass = Pass { team: &self.team, rows, present: (!self.present.is_empty()).then_some(&self.present[..]) };
        for i in 0..self.layers.len() {
            let (before, rest) = self.layers.split_at_mut(i);
            let input = before.last().map_or(x, Layer::out);
            rest[0].forward(&pass, input, again(&mut masks));
        }
    }

    /// Gradients of every parameter, from the loss's gradient in `grad_a`
    /// (`rows × output_width`), going back through the layers.
    fn backward(&mut self, x: &[f32], rows: usize) {
        // Input gradients are wanted only where a layer below has parameters.
        let first_param = self.layers.iter().position(|l| !l.params().is_empty()).unwrap_or(usize::MAX);
        let x = if self.channels > 0 { &self.clean[..] } else { x };
        let pass = Pass { team: &self.team, rows, present: (!self.present.is_empty()).then_some(&self.present[..]) };
        let mut g = std::mem::take(&mut self.grad_a);
        let mut spare = std::mem::take(&mut self.grad_b);
        for i in (0..self.layers.len()).rev() {
            let (before, rest) = self.layers.split_at_mut(i);
            let input = before.last().map_or(x, Layer::out);
            rest[0].backward(&pass, input, &mut g, &mut spare, i > first_param);
        }
        self.grad_a = g;
        self.grad_b = spare;
    }

    /// One optimizer update of every trainable tensor, tensors spread over
    /// the cores, largest first.
    fn update(&mut self, optimizer: &OptimConfig, lr: f64) {
        let mut params: Vec<&mut Param> = self.layers.iter_mut().flat_map(Layer::params_mut).collect();
        params.sort_by_key(|p| std::cmp::Reverse(p.value.len()));
        let n = params.len();
        let parts = Parts::new(&mut params);
        self.team.run(n, &|i| {
            // SAFETY: each piece takes its own parameter.
            let p = unsafe { &mut parts.part(i..i + 1)[0] };
            optim::step(optimizer, lr, &mut p.value, &p.grad, &mut p.state);
        });
    }
}

/// Elements per parallel piece of a `rows × width` buffer: whole rows,
/// about one piece per thread, none smaller than `PARALLEL_MIN` elements.
pub(crate) fn piece_len(team: &Team, len: usize, width: usize) -> usize {
    let width = width.max(1);
    let rows = len / width;
    let min_rows = PARALLEL_MIN.div_ceil(width);
    let rows_per = rows.div_ceil(team.threads()).max(min_rows).max(1);
    rows_per * width
}

/// `f` on matching pieces of `a` (read) and `b` (written), on the team.
pub(crate) fn par_zip(team: &Team, a: &[f32], b: &mut [f32], f: impl Fn(&[f32], &mut [f32]) + Sync) {
    let (len, total) = (piece_len(team, a.len(), 1), a.len());
    let b = Parts::new(&mut b[..total]);
    team.run(total.div_ceil(len), &|i| {
        let r = piece(i, len, total);
        // SAFETY: each piece gets its own range.
        f(&a[r.clone()], unsafe { b.part(r) })
    });
}

/// `f` on matching pieces of `a` (read) and `b` (written), whole rows of `width`, on the team.
pub(crate) fn par_zip_rows(team: &Team, a: &[f32], b: &mut [f32], width: usize, f: impl Fn(&[f32], &mut [f32]) + Sync) {
    let (len, total) = (piece_len(team, a.len(), width), a.len());
    let b = Parts::new(&mut b[..total]);
    team.run(total.div_ceil(len), &|i| {
        let r = piece(i, len, total);
        // SAFETY: each piece gets its own range.
        f(&a[r.clone()], unsafe { b.part(r) })
    });
}

/// `f` on matching pieces of `a` (written) and `b` (read), whole rows of `width`, on the team.
pub(crate) fn par_zip_mut(team: &Team, a: &mut [f32], b: &[f32], width: usize, f: impl Fn(&mut [f32], &[f32]) + Sync) {
    let (len, total) = (piece_len(team, a.len(), width), a.len());
    let a = Parts::new(a);
    team.run(total.div_ceil(len), &|i| {
        let r = piece(i, len, total);
        // SAFETY: each piece gets its own range.
        f(unsafe { a.part(r.clone()) }, &b[r])
    });
}

/// `f` on matching pieces of `a`, `b` (read) and `c` (written), on the team.
pub(crate) fn par_zip3(
    team: &Team,
    a: &[f32],
    b: &[f32],
    c: &mut [f32],
    f: impl Fn(&[f32], &[f32], &mut [f32]) + Sync,
) {
    let (len, total) = (piece_len(team, a.len(), 1), a.len());
    let c = Parts::new(&mut c[..total]);
    team.run(total.div_ceil(len), &|i| {
        let r = piece(i, len, total);
        // SAFETY: each piece gets its own range.
        f(&a[r.clone()], &b[r.clone()], unsafe { c.part(r) })
    });
}

/// Mean and biased variance of each column of `x` (`rows × width`), in f64.
fn column_moments(x: &[f32], width: usize) -> (Vec<f64>, Vec<f64>) {
    let rows = x.len() / width;
    let mut sum = vec![0.0f64; width];
    for row in x.chunks_exact(width) {
        for (s, &v) in sum.iter_mut().zip(row) {
            *s += v as f64;
        }
    }
    let mean: Vec<f64> = sum.iter().map(|s| s / rows.max(1) as f64).collect();
    let mut var = vec![0.0f64; width];
    for row in x.chunks_exact(width) {
        for ((s, &v), &m) in var.iter_mut().zip(row).zip(&mean) {
            let d = v as f64 - m;
            *s += d * d;
        }
    }
    var.iter_mut().for_each(|v| *v /= rows.max(1) as f64);
    (mean, var)
}

/// `x_hat = (x - mean) · inv_std`, `out = x_hat · gamma + beta`, per column.
#[allow(clippy::too_many_arguments)]
fn normalize_columns(
    team: &Team,
    x: &[f32],
    mean: &[f32],
    inv_std: &[f32],
    gamma: &[f32],
    beta: &[f32],
    x_hat: &mut [f32],
    out: &mut [f32],
) {
    let w = mean.len();
    let (len, total) = (piece_len(team, x.len(), w), x.len());
    let (x_hat, out) = (Parts::new(&mut x_hat[..total]), Parts::new(&mut out[..total]));
    team.run(total.div_ceil(len), &|i| {
        let r = piece(i, len, total);
        // SAFETY: each piece gets its own range.
        let (xh, o) = unsafe { (x_hat.part(r.clone()), out.part(r.clone())) };
        for ((xr, hr), or) in x[r].chunks_exact(w).zip(xh.chunks_exact_mut(w)).zip(o.chunks_exact_mut(w)) {
            let per_feature = mean.iter().zip(inv_std).zip(gamma.iter().zip(beta));
            for (((&x, h), o), ((&m, &inv), (&g, &b))) in
                xr.iter().zip(hr.iter_mut()).zip(or.iter_mut()).zip(per_feature)
            {
                *h = (x - m) * inv;
                *o = *h * g + b;
            }
        }
    });
}

/// Column sums of `g` (`rows × width`) into `out`, summed in f64 down each
/// column in row order; wide ones split into column ranges over the team,
/// so the result does not depend on the number of threads.
pub(crate) fn column_sums(team: &Team, g: &[f32], width: usize, out: &mut [f32]) {
    let rows = g.len() / width.max(1);
    let per = if rows * width < PARALLEL_MIN { width } else { width.div_ceil(team.threads()).max(16) };
    let out = Parts::new(&mut out[..width]);
    team.run(width.div_ceil(per.max(1)), &|i| {
        let cols = piece(i, per, width);
        // SAFETY: each piece writes its own columns.
        let o = unsafe { out.part(cols.clone()) };
        let mut sum = vec![0.0f64; cols.len()];
        for row in g.chunks_exact(width) {
            for (s, &v) in sum.iter_mut().zip(&row[cols.clone()]) {
                *s += v as f64;
            }
        }
        for (o, s) in o.iter_mut().zip(sum) {
            *o = s as f32;
        }
    });
}

/// A normalisation's scale and shift gradients from its output gradient
/// `gy` and normalised input `x_hat`: `Σ dy·x̂` and `Σ dy` over the batch,
/// per feature. Returns the two sums, in f64.
pub(crate) fn scale_shift_grads(
    team: &Team,
    gy: &[f32],
    x_hat: &[f32],
    gamma: &mut Param,
    beta: &mut Param,
) -> (Vec<f64>, Vec<f64>) {
    let (sum_dy, sum_dy_xhat) = column_dot_sums(team, gy, x_hat, gamma.grad.len());
    for (g, &s) in gamma.grad.iter_mut().zip(&sum_dy_xhat) {
        *g = s as f32;
    }
    for (g, &s) in beta.grad.iter_mut().zip(&sum_dy) {
        *g = s as f32;
    }
    (sum_dy, sum_dy_xhat)
}

/// Per column: `Σ g` and `Σ g · x`, each column's sum in row order
/// whatever the team's size; the columns are shared out as in [`column_sums`].
fn column_dot_sums(team: &Team, g: &[f32], x: &[f32], width: usize) -> (Vec<f64>, Vec<f64>) {
    let mut s = vec![0.0f64; width];
    let mut sx = vec![0.0f64; width];
    if width == 0 {
        return (s, sx);
    }
    let rows = g.len() / width;
    let per = if rows * width < PARALLEL_MIN { width } else { width.div_ceil(team.threads()).max(16) };
    let (sp, sxp) = (Parts::new(&mut s[..]), Parts::new(&mut sx[..]));
    team.run(width.div_ceil(per), &|i| {
        let cols = piece(i, per, width);
        // SAFETY: each piece writes its own columns.
        let (s, sx) = unsafe { (sp.part(cols.clone()), sxp.part(cols.clone())) };
        for (gr, xr) in g.chunks_exact(width).zip(x.chunks_exact(width)) {
            let (gr, xr) = (&gr[cols.clone()], &xr[cols.clone()]);
            for (((s, sx), &g), &x) in s.iter_mut().zip(sx.iter_mut()).zip(gr).zip(xr) {
                *s += g as f64;
                *sx += (g * x) as f64;
            }
        }
    });
    (s, sx)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same mask every call: every third element dropped.
    struct FixedMask;

    impl MaskSource for FixedMask {
        fn dropout(&mut self, _: &Team, p: f64, x: &[f32], mask: &mut [f32], out: &mut [f32]) {
            for (i, ((m, o), &x)) in mask.iter_mut().zip(out.iter_mut()).zip(x).enumerate() {
                *m = if i % 3 == 1 { 0.0 } else { (1.0 / (1.0 - p)) as f32 };
                *o = x * *m;
            }
        }
    }

    fn pseudo(i: usize) -> f32 {
        ((i as f32 * 12.9898).sin() * 43758.547).fract() - 0.5
    }

    fn training_loss(net: &mut Net, x: &[f32], y: &[f32], loss: LossConfig) -> f64 {
        let rows = net.rows_of(x);
        net.forward(x, rows, Some(&mut FixedMask));
        loss::loss(loss, net.layers.last().unwrap().out(), net.output_width(), Targets::Values(y), None)
    }

    /// A NaN among the gradients makes their norm NaN, and clipping by it
    /// makes every gradient NaN, as PyTorch's `clip_grad_norm_` and the Burn
    /// engine do: the parameters the NaN did not reach do not train on.
    #[test]
    fn clipping_by_a_nan_norm_spreads_the_nan() {
        let layers = [LayerConfig::Dense { units: 2, act: Act::Linear, positions: 1 }];
        let mut net = Net::new(3, &layers);
        net.set_clip(Some(Clip::Norm(1.0)));
        for (i, p) in net.layers.iter_mut().flat_map(Layer::params_mut).enumerate() {
            p.grad.iter_mut().enumerate().for_each(|(j, g)| *g = (i + j) as f32 * 0.1);
        }
        net.layers[0].params_mut()[0].grad[1] = f32::NAN;
        net.clip_grads();
        assert!(net.layers.iter().flat_map(Layer::params).all(|p| p.grad.iter().all(|g| g.is_nan())));
        // Finite gradients over the limit are scaled to it.
        for p in net.layers.iter_mut().flat_map(Layer::params_mut) {
            p.grad.iter_mut().for_each(|g| *g = 3.0);
        }
        net.clip_grads();
        let norm = net.layers.iter().flat_map(Layer::params).flat_map(|p| &p.grad).map(|g| g * g).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "{norm}");
    }

    /// Every parameter's gradient against a central difference of the
    /// training loss, through every layer kind and activation.
    #[test]
    fn gradients_match_central_differences() {
        let acts = [Act::Gelu, Act::Tanh, Act::Silu, Act::Sigmoid, Act::LeakyRelu(0.1), Act::Relu];
        for (k, &act) in acts.iter().enumerate() {
            let layers = [
                LayerConfig::BatchNorm,
                LayerConfig::Dense { units: 5, act, positions: 1 },
                LayerConfig::BatchNorm,
                LayerConfig::Dense { units: 4, act: Act::Tanh, positions: 1 },
                LayerConfig::LayerNorm { positions: 1 },
                LayerConfig::Dropout(0.25),
                LayerConfig::Dense { units: 2, act: Act::Linear, positions: 1 },
            ];
            let mut net = Net::new(3, &layers);
            for (i, t) in net.tensors_mut().into_iter().enumerate() {
                t.iter_mut().enumerate().for_each(|(j, v)| *v += pseudo(100 * i + j + k) * 1.5);
            }
            let rows = 7;
            let x: Vec<f32> = (0..rows * 3).map(|i| pseudo(i + 1000) * 3.0).collect();
            let y: Vec<f32> = (0..rows * 2).map(|i| pseudo(i + 2000)).collect();
            check_gradients(&mut net, &x, &y, &format!("{act:?}"), 1e-2);
        }
    }

    /// Every parameter's gradient after one step at rate 0 against a
    /// central difference of the training loss.
    fn check_gradients(net: &mut Net, x: &[f32], y: &[f32], what: &str, h: f32) {
        // A step at rate 0 computes every gradient and moves nothing.
        let sgd = OptimConfig::Sgd { momentum: 0.0, dampening: 0.0, weight_decay: 0.0, nesterov: false };
        net.train_step(x, Targets::Values(y), LossConfig::Mse, &sgd, 0.0, &mut FixedMask);
        let grads: Vec<Vec<f32>> = net.layers.iter().flat_map(Layer::params).map(|p| p.grad.clone()).collect();
        let trainable: Vec<usize> =
            net.tensor_info().iter().enumerate().filter(|(_, t)| t.trainable).map(|(i, _)| i).collect();
        for (g, &t) in grads.iter().zip(&trainable) {
            let mut numeric = Vec::new();
            for j in 0..g.len() {
                let original = net.tensors()[t][j];
                net.tensors_mut()[t][j] = original + h;
                let up = training_loss(net, x, y, LossConfig::Mse);
                net.tensors_mut()[t][j] = original - h;
                let down = training_loss(net, x, y, LossConfig::Mse);
                net.tensors_mut()[t][j] = original;
                numeric.push((up - down) / (2.0 * h as f64));
            }
            // Relative error of the whole tensor's gradient: robust to
            // the f32 noise of single small entries, not to a wrong formula.
            let norm = |v: &mut dyn Iterator<Item = f64>| v.map(|x| x * x).sum::<f64>().sqrt();
            let diff = norm(&mut numeric.iter().zip(g).map(|(n, &a)| n - a as f64));
            let size = norm(&mut g.iter().map(|&a| a as f64));
            let name = &net.tensor_info()[t].name;
            // The padding id's row of a token table is the one tensor part
            // that gets no gradient; a whole tensor at zero is a bug.
            assert!(size > 1e-6, "{what}: {name}: zero gradient");
            assert!(
                diff <= 2e-2 * size,
                "{what}: {name}: relative error {:.3e}\n numeric {numeric:?}\n analytic {g:?}",
                diff / size
            );
        }
    }

    /// The same through the sequence layers: token embedding with padding,
    /// learned positions, a transformer block with its dropouts, a plain
    /// attention, layer norm and dense on each position, and the masked mean.
    #[test]
    fn sequence_gradients_match_central_differences() {
        let (length, dim, tokens) = (5, 8, 7);
        let layers = [
            LayerConfig::Tokens { tokens, dim },
            LayerConfig::Positional,
            LayerConfig::Transformer { length, dim, heads: 2, ff: 12, dropout: 0.25 },
            LayerConfig::Residual {
                layers: vec![
                    LayerConfig::LayerNorm { positions: length },
                    LayerConfig::Attention { length, dim, heads: 4 },
                ],
                projection: None,
            },
            LayerConfig::LayerNorm { positions: length },
            LayerConfig::Dense { units: 6, act: Act::Tanh, positions: length },
            LayerConfig::SequenceMean { length, dim: 6 },
            LayerConfig::Dense { units: 2, act: Act::Linear, positions: 1 },
        ];
        let mut net = Net::new(length, &layers);
        for (i, t) in net.tensors_mut().into_iter().enumerate() {
            t.iter_mut().enumerate().for_each(|(j, v)| *v += pseudo(100 * i + j) * 0.8);
        }
        // Three texts: one whole, two padded at the end (id 0).
        let x = [3.0, 1.0, 6.0, 2.0, 5.0, 4.0, 4.0, 2.0, 0.0, 0.0, 6.0, 0.0, 0.0, 0.0, 0.0];
        let y: Vec<f32> = (0..3 * 2).map(|i| pseudo(i + 2000)).collect();
        // A smaller step than the stack's: attention and the norms of short
        // positions curve sharply, and at 1e-2 the difference itself is off
        // by several percent on the largest entries.
        check_gradients(&mut net, &x, &y, "sequence", 5e-4);
        // Padding does not move the outputs of the texts it pads.
        let mut out = Vec::new();
        net.predict(&x, &mut out);
        let mut longer = Vec::new();
        net.predict(&[4.0, 4.0, 2.0, 0.0, 0.0], &mut longer);
        assert!(out[2..4].iter().zip(&longer).all(|(a, b)| (a - b).abs() < 1e-6), "{out:?} vs {longer:?}");
    }

    /// Through the tables of two categorical columns among plain features,
    /// and a residual block with a projection.
    #[test]
    fn categorical_and_residual_gradients_match_central_differences() {
        let layers = [
            LayerConfig::Categorical { dim: 2, columns: vec![(1, 3), (3, 4)] },
            LayerConfig::Dense { units: 4, act: Act::Tanh, positions: 1 },
            // A residual block that narrows 4 to 3 through a projection.
            LayerConfig::Residual {
                layers: vec![
                    LayerConfig::Dense { units: 3, act: Act::Gelu, positions: 1 },
                    LayerConfig::Dense { units: 3, act: Act::Linear, positions: 1 },
                ],
                projection: Some(Box::new(LayerConfig::Dense { units: 3, act: Act::Linear, positions: 1 })),
            },
            LayerConfig::Dense { units: 2, act: Act::Linear, positions: 1 },
        ];
        let mut net = Net::new(4, &layers);
        assert_eq!(net.tensor_info()[1].name, "0.tables.1.weight");
        assert_eq!(net.tensor_info()[1].shape, [4, 2]);
        for (i, t) in net.tensors_mut().into_iter().enumerate() {
            t.iter_mut().enumerate().for_each(|(j, v)| *v += pseudo(100 * i + j) * 1.5);
        }
        let x = [0.5, 2.0, -1.0, 3.0, 1.5, 1.0, 0.2, 0.0, -0.7, 2.0, 0.9, 1.0];
        let y: Vec<f32> = (0..3 * 2).map(|i| pseudo(i + 2000)).collect();
        check_gradients(&mut net, &x, &y, "categorical", 1e-2);
        // Each index picks its row: 2 in the first column, 3 in the second.
        net.predict(&x[..4], &mut Vec::new());
        let Layer::Categorical(t) = &net.layers[0] else { panic!("the tables") };
        let (t0, t1) = (&t.tables[0].value, &t.tables[1].value);
        assert_eq!(t.out[..6], [0.5, t0[4], t0[5], -1.0, t1[6], t1[7]]);
    }

    /// The weights moved out are the ones `tensors` lists, in its order,
    /// through batchnorm's running statistics, residual blocks, categorical
    /// tables and a transformer.
    #[test]
    fn into_tensors_moves_what_tensors_lists() {
        let (length, dim) = (4, 8);
        let stacks = [
            (
                3,
                vec![
                    LayerConfig::BatchNorm,
                    LayerConfig::Dense { units: 5, act: Act::Relu, positions: 1 },
                    LayerConfig::Dropout(0.25),
                    LayerConfig::Residual {
                        layers: vec![LayerConfig::Dense { units: 3, act: Act::Gelu, positions: 1 }],
                        projection: Some(Box::new(LayerConfig::Dense { units: 3, act: Act::Linear, positions: 1 })),
                    },
                    LayerConfig::BatchNorm,
                    LayerConfig::Dense { units: 2, act: Act::Linear, positions: 1 },
                ],
            ),
            (
                4,
                vec![
                    LayerConfig::Categorical { dim: 2, columns: vec![(1, 3), (3, 4)] },
                    LayerConfig::Dense { units: 2, act: Act::Linear, positions: 1 },
                ],
            ),
            (
                length,
                vec![
                    LayerConfig::Tokens { tokens: 7, dim },
                    LayerConfig::Positional,
                    LayerConfig::Transformer { length, dim, heads: 2, ff: 12, dropout: 0.0 },
                    LayerConfig::SequenceMean { length, dim },
                    LayerConfig::Dense { units: 2, act: Act::Linear, positions: 1 },
                ],
            ),
        ];
        for (input, layers) in stacks {
            let mut net = Net::new(input, &layers);
            for (i, t) in net.tensors_mut().into_iter().enumerate() {
                t.iter_mut().enumerate().for_each(|(j, v)| *v += pseudo(100 * i + j));
            }
            let expected: Vec<Vec<f32>> = net.tensors().into_iter().map(<[f32]>::to_vec).collect();
            assert_eq!(net.tensor_info().len(), expected.len());
            assert_eq!(net.into_tensors(), expected);
        }
    }

    #[test]
    fn evaluation_uses_running_statistics_and_no_dropout() {
        let layers = [
            LayerConfig::BatchNorm,
            LayerConfig::Dropout(0.5),
            LayerConfig::Dense { units: 1, act: Act::Linear, positions: 1 },
        ];
        let mut net = Net::new(2, &layers);
        let tensors = net.tensors_mut();
        // running mean 0, var 1 at the start: evaluation is x·γ + β, then the dense layer.
        let (mut w, mut out) = (tensors.into_iter().skip(4), Vec::new());
        w.next().unwrap().copy_from_slice(&[2.0, -1.0]);
        w.next().unwrap().copy_from_slice(&[0.5]);
        net.predict(&[1.0, 3.0, -2.0, 0.0], &mut out);
        let s = (1.0f64 / (1.0 + EPS).sqrt()) as f32;
        assert_eq!(out.len(), 2);
        assert!((out[0] - (2.0 * s - 3.0 * s + 0.5)).abs() < 1e-6, "{out:?}");
        assert!((out[1] - (-4.0 * s + 0.5)).abs() < 1e-6, "{out:?}");
    }
}
