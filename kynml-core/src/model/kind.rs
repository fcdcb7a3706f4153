//! What every kind of layer provides: the two traits a layer's file
//! implements, and the plain types they share.
//!
//! A kind of layer lives in one file of this folder (`dense.rs`,
//! `conv.rs`, ...), which implements:
//!
//! - [`Kind`] for its spec type (the arguments of its line in a `model`
//!   block): parsing the line, shape inference, the tensors it owns, the
//!   Burn module it builds, and its export (the reference forward pass on the
//!   host, the ONNX nodes, the PyTorch module of the sidecar);
//! - [`LayerModule`] for its Burn module: the forward pass and its tensors by
//!   name, for checkpoints.
//!
//! and takes one line in the catalogue of [`super`]. Nothing else in the
//! crate names a kind of layer.
//!
//! Between two layers, values are `[batch, features]`: a layer whose input
//! has a shape (`[channels, height, width]`) reshapes it, which costs
//! nothing, and the shape itself is known from the spec ([`Shape`]).

use burn::module::{Param, ParamId};
use burn::tensor::{FloatDType, Tensor, TensorData};
use burn::DispatchDevice;
use kynml_backend::Backend as Kb;
use serde_json::Value as Json;

use super::{Mode, StateError};
use crate::export::onnx::Graph;
use crate::export::torch::TorchTensor;
use crate::rng::SplitMix64;
use crate::spec::ast::LayerLine;
use crate::spec::diagnostic::Diagnostic;

/// The shape of one sample between two layers, without the batch
/// dimension: `[features]`, `[channels, length]` or `[channels, height,
/// width]`; or, for text, `[length]` token ids and `[positions, features]`
/// after their embedding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shape {
    dims: Vec<usize>,
    layout: Layout,
}

/// What a shape's dimensions mean.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Numbers: plain features, or channels first (`[C, L]`, `[C, H, W]`).
    Values,
    /// `[L]`: the token ids of a text (0 where it is padded).
    Tokens,
    /// `[L, D]`: D values at each of L positions of a text.
    Sequence,
}

impl serde::Serialize for Shape {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.dims.serialize(s)
    }
}

impl Shape {
    /// Numbers of these dimensions: `[n]`, `[c, l]` or `[c, h, w]`.
    pub fn new(dims: Vec<usize>) -> Self {
        Shape { dims, layout: Layout::Values }
    }

    /// `[n]`: plain features.
    pub fn flat(n: usize) -> Self {
        Shape::new(vec![n])
    }

    /// `[length]` token ids.
    pub fn tokens(length: usize) -> Self {
        Shape { dims: vec![length], layout: Layout::Tokens }
    }

    /// `[length, features]`: a text's positions, each with its values.
    pub fn sequence(length: usize, features: usize) -> Self {
        Shape { dims: vec![length, features], layout: Layout::Sequence }
    }

    /// What the dimensions mean.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// Whether these are token ids.
    pub fn is_tokens(&self) -> bool {
        self.layout == Layout::Tokens
    }

    /// Whether this is a text's positions with their values.
    pub fn is_sequence(&self) -> bool {
        self.layout == Layout::Sequence
    }

    /// The number of values per sample: the product of the dimensions.
    pub fn size(&self) -> usize {
        self.dims.iter().product()
    }

    /// The number of dimensions (1 for plain features).
    pub fn rank(&self) -> usize {
        self.dims.len()
    }

    /// The dimensions.
    pub fn dims(&self) -> &[usize] {
        &self.dims
    }

    /// `[channels, height, width]`, height 1 for a `CxL` input (the view
    /// convolutions and poolings take); zeros for plain features.
    pub fn chw(&self) -> [usize; 3] {
        match *self.dims() {
            [c, l] => [c, 1, l],
            [c, h, w] => [c, h, w],
            _ => [0, 0, 0],
        }
    }

    /// How a spec writes it: `64`, `1x28x28`, `seq 64`.
    pub fn written(&self) -> String {
        let dims = self.dims.iter().map(usize::to_string).collect::<Vec<_>>().join("x");
        match self.layout {
            Layout::Tokens | Layout::Sequence => format!("seq {dims}"),
            _ => dims,
        }
    }

    /// How a message names it: `64 features`, `a 1x28x28 image`, `a 8x32 sequence of channels`.
    pub fn described(&self) -> String {
        match (self.layout, self.dims.as_slice()) {
            (Layout::Tokens, [l]) => format!("the {l} token ids of a text"),
            (Layout::Sequence, [1, d]) => format!("1x{d} values ({d} at the one position of a sequence)"),
            (Layout::Sequence, [l, d]) => format!("{l}x{d} values ({d} at each of {l} positions of a sequence)"),
            (_, [n]) => format!("{n} features"),
            (_, [1, l]) => format!("1x{l} values (1 channel of length {l})"),
            (_, [c, l]) => format!("{c}x{l} values ({c} channels of length {l})"),
            (_, [1, h, w]) => format!("1x{h}x{w} values (1 channel of {h}x{w})"),
            (_, [c, h, w]) => format!("{c}x{h}x{w} values ({c} channels of {h}x{w})"),
            _ => self.written(),
        }
    }
}

impl std::fmt::Display for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.written())
    }
}

/// What a layer's tensor is to training and to PyTorch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Trained: a weight or a bias.
    Param,
    /// Tracked but not trained (batchnorm's running statistics): in
    /// checkpoints and exports, not counted as a parameter.
    Buffer,
    /// An int64 scalar of PyTorch's state dict that KynML does not track
    /// (`num_batches_tracked`): only in exports.
    Count,
}

/// One tensor a layer owns, in PyTorch's layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decl {
    /// The field of the PyTorch module: `weight`, `running_mean`; nested
    /// modules' fields carry their path (`block.0.weight`).
    pub name: String,
    /// The shape in PyTorch's layout (`[out, in]` for a dense weight).
    pub shape: Vec<usize>,
    /// What it is.
    pub role: Role,
}

impl Decl {
    /// A trained tensor.
    pub fn param(name: impl Into<String>, shape: Vec<usize>) -> Self {
        Decl { name: name.into(), shape, role: Role::Param }
    }

    /// A tracked, untrained tensor.
    pub fn buffer(name: impl Into<String>, shape: Vec<usize>) -> Self {
        Decl { name: name.into(), shape, role: Role::Buffer }
    }

    /// An int64 scalar only exports hold.
    pub fn count(name: impl Into<String>) -> Self {
        Decl { name: name.into(), shape: Vec::new(), role: Role::Count }
    }

    /// The number of values.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    /// Whether it holds no values (never true for a declared tensor).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One tensor of an exported layer, in PyTorch's layout.
#[derive(Debug, Clone, PartialEq)]
pub struct HostTensor {
    /// The field of the PyTorch module, without the layer's index: `weight`.
    pub name: String,
    /// Row-major, PyTorch's layout; `[]` is a scalar.
    pub shape: Vec<usize>,
    /// The values.
    pub data: TorchTensor,
}

/// An exported layer's tensors, looked up by name, and which positions of
/// the input text are padding, where the model reads text.
#[derive(Debug, Clone, Copy)]
pub struct Tensors<'a> {
    /// The layer's tensors.
    pub all: &'a [HostTensor],
    /// `[rows, length]`: 1 for a token of the input text, 0 for padding;
    /// `None` where the input is not text.
    pub mask: Option<&'a [f32]>,
}

impl<'a> Tensors<'a> {
    /// `all`, for a model whose input is not text.
    pub fn new(all: &'a [HostTensor]) -> Self {
        Tensors { all, mask: None }
    }

    /// Other tensors (a block's layer's), with the same mask.
    pub fn with(&self, all: &'a [HostTensor]) -> Self {
        Tensors { all, mask: self.mask }
    }

    /// The tensors under `prefix` (`block.0.`, `norm1.`), with the prefix
    /// stripped: what a part of the layer names them.
    pub fn under(&self, prefix: &str) -> Vec<HostTensor> {
        (self.all.iter())
            .filter_map(|h| {
                h.name.strip_prefix(prefix).map(|rest| HostTensor {
                    name: rest.to_string(),
                    shape: h.shape.clone(),
                    data: h.data.clone(),
                })
            })
            .collect()
    }

    /// The f32 values of the tensor `name`; empty when there is none (a
    /// validated model has every declared tensor).
    pub fn f32(&self, name: &str) -> &'a [f32] {
        match self.all.iter().find(|t| t.name == name).map(|t| &t.data) {
            Some(TorchTensor::F32(v)) => v,
            _ => &[],
        }
    }

    /// The int64 scalar `name`, 0 when there is none.
    pub fn count(&self, name: &str) -> i64 {
        match self.all.iter().find(|t| t.name == name).map(|t| &t.data) {
            Some(TorchTensor::I64(v)) => v.first().copied().unwrap_or(0),
            _ => 0,
        }
    }
}

/// What a forward pass needs besides its input.
#[derive(Debug)]
pub struct Pass<'a, 'r> {
    /// Training (with dropout's generator) or evaluation.
    pub mode: &'a mut Mode<'r>,
    /// The element type of the products (dense and convolution) under mixed
    /// precision; `None` for fp32.
    pub half: Option<FloatDType>,
    /// `[batch, length]`, where the model reads text: 1 for a token, 0 for
    /// padding; set by the layer that embeds the tokens.
    pub mask: Option<Tensor<Kb, 2>>,
}

impl Pass<'_, '_> {
    /// Whether this is a training pass (batchnorm updates its statistics, dropout drops).
    pub fn training(&self) -> bool {
        matches!(self.mode, Mode::Train(_))
    }

    /// Dropout's generator, in training.
    pub fn rng(&mut self) -> Option<&mut SplitMix64> {
        match self.mode {
            Mode::Train(rng) => Some(&mut **rng),
            Mode::Eval => None,
        }
    }
}

/// Looks up a checkpoint tensor by its field name and the shape the module
/// needs.
pub type Getter<'g> = dyn FnMut(&str, &[usize]) -> Result<TensorData, StateError> + 'g;

/// A kind of layer: the arguments of its line in a `model` block, and
/// everything that follows from them.
pub(crate) trait Kind: Sized {
    /// The words that start its line (`conv1d`, `conv2d`).
    const NAMES: &'static [&'static str];
    /// How its lines are written, for help messages.
    const FORMS: &'static [&'static str];
    /// Whether it reads the input's columns (`embedding`), and so must be
    /// the model's first layer.
    const FIRST: bool = false;
    /// The Burn module it builds.
    type Module: LayerModule;

    /// Reads a line whose first word is one of [`NAMES`](Self::NAMES);
    /// problems go to `d`, each with its span.
    fn parse(line: &LayerLine, d: &mut Vec<Diagnostic>) -> Option<Self>;

    /// The word this layer's line starts with.
    fn word(&self) -> &'static str {
        Self::NAMES[0]
    }

    /// The line as a person writes it: `dense 64 relu`, `conv2d 8 3 relu padding=1`.
    fn describe(&self) -> String;

    /// The layers a block holds, in order; none for a plain layer.
    fn children(&self) -> &[super::LayerSpec] {
        &[]
    }

    /// What a checkpoint records of the layer, to refuse resuming a
    /// different model; fixed once released.
    fn fingerprint(&self) -> String {
        self.describe()
    }

    /// The shape of its output for an input of `input`; an error says what
    /// the layer needs, for the spec's located message.
    fn output(&self, input: &Shape) -> Result<Shape, String>;

    /// The multiply-adds of its matrix products in the forward pass of one
    /// sample of `input` (a convolution's at every output position,
    /// attention's projections, scores and weighted sums): the arithmetic
    /// that decides a step's time on a fast device. Element-wise work
    /// (activations, norms, pooling, dropout, lookups) is not counted. A
    /// training step's backward pass does about twice the forward's.
    fn multiply_adds(&self, input: &Shape) -> u64;

    /// The tensors it owns for an input of `input`, in PyTorch's layout and
    /// state-dict order.
    fn tensors(&self, _input: &Shape) -> Vec<Decl> {
        Vec::new()
    }

    /// The native CPU engine's layer, where that engine has it.
    fn native(&self, _input: &Shape) -> Option<kynml_cpu::LayerConfig> {
        None
    }

    /// The Burn module, initialised as PyTorch initialises it, drawing from `rng`.
    fn init(&self, input: &Shape, rng: &mut SplitMix64, device: &DispatchDevice) -> Self::Module;

    /// A checkpoint tensor (Burn's layout) in PyTorch's layout: the identity
    /// but where the two differ.
    fn burn_to_torch(&self, _name: &str, data: TensorData, torch_shape: &[usize]) -> Vec<f32> {
        let _ = torch_shape;
        data.convert::<f32>().into_vec::<f32>().unwrap_or_default()
    }

    /// The inverse of [`burn_to_torch`](Self::burn_to_torch): `values` in PyTorch's layout to Burn's.
    fn torch_to_burn(&self, _name: &str, values: &[f32], burn_shape: &[usize]) -> TensorData {
        TensorData::new(values.to_vec(), burn_shape.to_vec())
    }

    /// Checks values that would make the forward pass meaningless (a
    /// negative variance); names and shapes are checked by the caller.
    fn check(&self, _t: Tensors) -> Result<(), String> {
        Ok(())
    }

    /// The reference forward pass in inference mode, on the host: whole rows
    /// of `input.size()` values in, whole rows of the output out. Products
    /// and norms in f64, each value rounded to f32.
    fn reference(&self, input: &Shape, t: Tensors, x: &[f32]) -> Vec<f32>;

    /// Adds its ONNX nodes after tensor `x` (`[batch, input.size()]`);
    /// returns the name of its output (`[batch, output.size()]`). `p` prefixes
    /// every name it adds.
    fn onnx(&self, g: &mut Graph, p: &str, input: &Shape, t: Tensors, x: String) -> String;

    /// Its entry in the PyTorch sidecar: the module's arguments and `module`,
    /// the PyTorch module(s) it stands for.
    fn torch(&self, input: &Shape) -> Json;

    /// Reads the entry [`torch`](Self::torch) wrote (`kind` is one of [`NAMES`](Self::NAMES)).
    fn from_json(kind: &str, v: &Json) -> Result<Self, String>;
}

/// A layer's Burn module.
pub trait LayerModule: Sized {
    /// # Shapes
    /// `x: [batch, input.size()]` → `[batch, output.size()]`
    fn forward(&self, x: Tensor<Kb, 2>, pass: &mut Pass) -> Tensor<Kb, 2>;

    /// Its tensors in Burn's layout, named as the [`Decl`]s that are not
    /// [`Role::Count`], in their order.
    fn state(&self) -> Vec<(String, TensorData)>;

    /// The module with every tensor replaced by `get`'s; parameter ids kept,
    /// because optimizers key their state by them.
    fn restore(self, get: &mut Getter, device: &DispatchDevice) -> Result<Self, StateError>;

    /// Its trained tensors' ids, names and ranks, in [`state`](Self::state)'s order.
    fn params(&self) -> Vec<(ParamId, String, usize)>;
}

/// `old` replaced by `get`'s tensor `name`, keeping its id.
pub fn restore_param<const D: usize>(
    old: Param<Tensor<Kb, D>>,
    name: &str,
    get: &mut Getter,
    device: &DispatchDevice,
) -> Result<Param<Tensor<Kb, D>>, StateError> {
    let data = get(name, &old.dims())?;
    let mut new = Param::from_data(data, device);
    new.id = old.id;
    Ok(new)
}

/// f32 values of a tensor read back from a device.
pub fn host(data: TensorData) -> Vec<f32> {
    data.convert::<f32>().into_vec::<f32>().unwrap_or_default()
}

/// The readers of a layer line's arguments that every layer file uses.
pub(crate) use crate::spec::layers::{
    activation_arg, activation_names, count_arg, extra_args, missing, options, probability_arg,
};

/// A size in a model sidecar (`model.json`) written by `to_json`: a whole
/// number of at least 1, as the spec's own parser requires of it. A sidecar
/// edited by hand to 0 would otherwise divide by it or reach a Burn kernel
/// that panics on it.
pub(crate) fn json_size(v: &Json, kind: &str, key: &str) -> Result<usize, String> {
    match v.get(key).and_then(Json::as_u64) {
        None => Err(format!("{kind} without `{key}`")),
        Some(0) => Err(format!("{kind} with `{key}` 0, where it must be at least 1")),
        Some(n) => usize::try_from(n).map_err(|_| format!("{kind} with `{key}` {n}, too large")),
    }
}
