//! The model graph and the layer catalogue.
//!
//! Each kind of layer lives in its own file here and implements the two
//! traits of [`kind`]: its spec arguments, shape inference, Burn module and
//! export side by side. The catalogue below lists every kind once; from that
//! list come the spec's layer type ([`LayerSpec`]), the Burn module enum
//! ([`Layer`]) and the dispatch between them. Adding a layer is one file and
//! one line here.
//!
//! ```ignore
//! let model = Model::init(&spec.model, seed, &device.autodiff());
//! let y = model.forward(x, Mode::Train(&mut rng)); // [batch, input] -> [batch, out]
//! ```

// Burn's derive gives `Layer` a record enum whose variants differ in size as
// the layers' modules do; layers are few and built once, so no boxing.
#![allow(clippy::large_enum_variant)]

pub mod attention;
pub mod batchnorm;
pub mod conv;
pub mod dense;
pub mod dropout;
pub mod embedding;
pub mod flatten;
pub mod kind;
pub mod layernorm;
pub mod pool;
pub mod positional;
pub mod residual;
mod state;
mod summary;
pub mod transformer;

pub use batchnorm::BatchNorm;
pub use dense::Dense;
pub use dropout::{bernoulli_mask, dropout_piece, Dropout, MaskKey, PIECE as MASK_PIECE};
pub(crate) use kind::Kind;
pub use kind::{Decl, HostTensor, LayerModule, Layout, Pass, Role, Shape, Tensors};
pub use layernorm::LayerNorm;
pub use state::StateError;
pub use summary::{summarize, LayerSummary, ModelSummary};

use burn::module::{Module, ParamId};
use burn::tensor::backend::Backend;
use burn::tensor::{FloatDType, Tensor, TensorData};
use burn::DispatchDevice;
use kynml_backend::Backend as Kb;
use serde_json::Value as Json;

use crate::export::onnx::Graph;
use crate::rng::SplitMix64;
use crate::spec::ast::LayerLine;
use crate::spec::diagnostic::Diagnostic;
use crate::spec::types::ModelSpec;
use kind::Getter;

/// Dropout and batchnorm behave differently while training. Training
/// carries the generator that dropout draws its masks from.
#[derive(Debug)]
pub enum Mode<'r> {
    /// Training: dropout draws its masks from this generator, and batchnorm normalises with the
    /// batch's statistics and updates its running ones.
    Train(&'r mut SplitMix64),
    /// Evaluation: dropout is the identity, and batchnorm uses its running statistics.
    Eval,
}

/// The catalogue: `Variant: file::SpecType => BurnModule`, once per kind.
macro_rules! catalogue {
    (
        $($variant:ident: $file:ident::$spec:ident => $module:ty,)*
        ; $($bvariant:ident: $bfile:ident::$bspec:ident => $bmodule:ty,)*
    ) => {
        /// One line of a `model` block after `input`: a layer's kind and arguments.
        #[derive(Debug, Clone, PartialEq, serde::Serialize)]
        pub enum LayerSpec {
            $(
                #[doc = concat!("See [`", stringify!($file), "`].")]
                $variant($file::$spec),
            )* $(
                #[doc = concat!("See [`", stringify!($bfile), "`].")]
                $bvariant($bfile::$bspec),
            )*
        }

        /// One layer of a `model` block as a Burn module.
        #[derive(Module, Debug)]
        pub enum Layer<B: Backend> {
            $(
                #[doc = concat!("See [`", stringify!($file), "`].")]
                $variant($module),
            )* $(
                #[doc = concat!("See [`", stringify!($bfile), "`].")]
                $bvariant($bmodule),
            )*
        }

        /// Every word that starts a layer line (`input` aside), in catalogue order.
        pub fn layer_names() -> Vec<&'static str> {
            let mut out = Vec::new();
            $( out.extend_from_slice(<$file::$spec as Kind>::NAMES); )* $( out.extend_from_slice(<$bfile::$bspec as Kind>::NAMES); )*
            out
        }

        /// The words that open a block of layers (`residual`).
        pub fn block_names() -> Vec<&'static str> {
            let mut out = Vec::new();
            $( out.extend_from_slice(<$bfile::$bspec as Kind>::NAMES); )*
            out
        }

        /// The ways a layer line is written, for help messages.
        pub fn layer_forms() -> Vec<&'static str> {
            let mut out = Vec::new();
            $( out.extend_from_slice(<$file::$spec as Kind>::FORMS); )* $( out.extend_from_slice(<$bfile::$bspec as Kind>::FORMS); )*
            out
        }

        /// The layer a line names, parsed; `None` when no kind has that name.
        pub(crate) fn parse_layer(line: &LayerLine, d: &mut Vec<Diagnostic>) -> Option<Option<LayerSpec>> {
            let name = line.name.value.as_str();
            $(
                if <$file::$spec as Kind>::NAMES.contains(&name) {
                    return Some(<$file::$spec as Kind>::parse(line, d).map(LayerSpec::$variant));
                }
            )* $(
                if <$bfile::$bspec as Kind>::NAMES.contains(&name) {
                    return Some(<$bfile::$bspec as Kind>::parse(line, d).map(LayerSpec::$bvariant));
                }
            )*
            None
        }

        impl LayerSpec {
            /// The word its line starts with (`dense`, `conv2d`).
            pub fn name(&self) -> &'static str {
                match self { $(LayerSpec::$variant(s) => s.word(),)* $(LayerSpec::$bvariant(s) => s.word(),)* }
            }

            /// As a person writes it: `dense 64 relu`.
            pub fn describe(&self) -> String {
                match self { $(LayerSpec::$variant(s) => s.describe(),)* $(LayerSpec::$bvariant(s) => s.describe(),)* }
            }

            /// Whether it reads the input's columns and must come first.
            pub fn first_only(&self) -> bool {
                match self { $(LayerSpec::$variant(_) => <$file::$spec as Kind>::FIRST,)* $(LayerSpec::$bvariant(_) => <$bfile::$bspec as Kind>::FIRST,)* }
            }

            /// The layers a block holds; empty for a plain layer.
            pub fn children(&self) -> &[LayerSpec] {
                match self { $(LayerSpec::$variant(s) => s.children(),)* $(LayerSpec::$bvariant(s) => s.children(),)* }
            }

            /// What a checkpoint records of it.
            pub fn fingerprint(&self) -> String {
                match self { $(LayerSpec::$variant(s) => s.fingerprint(),)* $(LayerSpec::$bvariant(s) => s.fingerprint(),)* }
            }

            /// Its output shape for `input`, or what it needs.
            pub fn output(&self, input: &Shape) -> Result<Shape, String> {
                match self { $(LayerSpec::$variant(s) => s.output(input),)* $(LayerSpec::$bvariant(s) => s.output(input),)* }
            }

            /// The multiply-adds of its products in the forward pass of one sample of `input`.
            pub fn multiply_adds(&self, input: &Shape) -> u64 {
                match self { $(LayerSpec::$variant(s) => s.multiply_adds(input),)* $(LayerSpec::$bvariant(s) => s.multiply_adds(input),)* }
            }

            /// Its tensors for `input`, in PyTorch's layout.
            pub fn tensors(&self, input: &Shape) -> Vec<Decl> {
                match self { $(LayerSpec::$variant(s) => s.tensors(input),)* $(LayerSpec::$bvariant(s) => s.tensors(input),)* }
            }

            /// The native CPU engine's layer, where that engine has it.
            pub fn native(&self, input: &Shape) -> Option<kynml_cpu::LayerConfig> {
                match self { $(LayerSpec::$variant(s) => s.native(input),)* $(LayerSpec::$bvariant(s) => s.native(input),)* }
            }

            /// The Burn module, initialised from `rng`.
            pub fn init(&self, input: &Shape, rng: &mut SplitMix64, device: &DispatchDevice) -> Layer<Kb> {
                match self { $(LayerSpec::$variant(s) => Layer::$variant(s.init(input, rng, device)),)* $(LayerSpec::$bvariant(s) => Layer::$bvariant(s.init(input, rng, device)),)* }
            }

            /// A checkpoint tensor in PyTorch's layout.
            pub fn burn_to_torch(&self, name: &str, data: TensorData, shape: &[usize]) -> Vec<f32> {
                match self { $(LayerSpec::$variant(s) => s.burn_to_torch(name, data, shape),)* $(LayerSpec::$bvariant(s) => s.burn_to_torch(name, data, shape),)* }
            }

            /// PyTorch-layout values in Burn's layout.
            pub fn torch_to_burn(&self, name: &str, values: &[f32], shape: &[usize]) -> TensorData {
                match self { $(LayerSpec::$variant(s) => s.torch_to_burn(name, values, shape),)* $(LayerSpec::$bvariant(s) => s.torch_to_burn(name, values, shape),)* }
            }

            /// Checks the values of an exported layer's tensors.
            pub fn check(&self, t: Tensors) -> Result<(), String> {
                match self { $(LayerSpec::$variant(s) => s.check(t),)* $(LayerSpec::$bvariant(s) => s.check(t),)* }
            }

            /// The reference forward pass on the host.
            pub fn reference(&self, input: &Shape, t: Tensors, x: &[f32]) -> Vec<f32> {
                match self { $(LayerSpec::$variant(s) => s.reference(input, t, x),)* $(LayerSpec::$bvariant(s) => s.reference(input, t, x),)* }
            }

            /// Its ONNX nodes after `x`; returns its output's name.
            pub(crate) fn onnx(&self, g: &mut Graph, p: &str, input: &Shape, t: Tensors, x: String) -> String {
                match self { $(LayerSpec::$variant(s) => s.onnx(g, p, input, t, x),)* $(LayerSpec::$bvariant(s) => s.onnx(g, p, input, t, x),)* }
            }

            /// Its entry in the PyTorch sidecar.
            pub fn torch(&self, input: &Shape) -> Json {
                match self { $(LayerSpec::$variant(s) => s.torch(input),)* $(LayerSpec::$bvariant(s) => s.torch(input),)* }
            }

            /// Reads a sidecar entry of kind `kind`.
            pub fn from_json(kind: &str, v: &Json) -> Result<LayerSpec, String> {
                $(
                    if <$file::$spec as Kind>::NAMES.contains(&kind) {
                        return <$file::$spec as Kind>::from_json(kind, v).map(LayerSpec::$variant);
                    }
                )* $(
                    if <$bfile::$bspec as Kind>::NAMES.contains(&kind) {
                        return <$bfile::$bspec as Kind>::from_json(kind, v).map(LayerSpec::$bvariant);
                    }
                )*
                Err(format!("unknown layer kind `{kind}`"))
            }
        }

        impl Layer<Kb> {
            pub(crate) fn forward(&self, x: Tensor<Kb, 2>, pass: &mut Pass) -> Tensor<Kb, 2> {
                match self { $(Layer::$variant(m) => m.forward(x, pass),)* $(Layer::$bvariant(m) => m.forward(x, pass),)* }
            }

            /// Its tensors in Burn's layout, by field name.
            pub fn state(&self) -> Vec<(String, TensorData)> {
                match self { $(Layer::$variant(m) => m.state(),)* $(Layer::$bvariant(m) => m.state(),)* }
            }

            /// With every tensor replaced by `get`'s, parameter ids kept.
            pub fn restore(self, get: &mut Getter, device: &DispatchDevice) -> Result<Self, StateError> {
                match self { $(Layer::$variant(m) => Ok(Layer::$variant(m.restore(get, device)?)),)* $(Layer::$bvariant(m) => Ok(Layer::$bvariant(m.restore(get, device)?)),)* }
            }

            /// Its trained tensors' ids, field names and ranks.
            pub fn params(&self) -> Vec<(ParamId, String, usize)> {
                match self { $(Layer::$variant(m) => m.params(),)* $(Layer::$bvariant(m) => m.params(),)* }
            }
        }

        /// One layer inside a block (`residual:`) as a Burn module: every
        /// kind but the blocks themselves, which do not nest.
        #[derive(Module, Debug)]
        pub enum Inner<B: Backend> {
            $(
                #[doc = concat!("See [`", stringify!($file), "`].")]
                $variant($module),
            )*
        }

        impl LayerSpec {
            /// The Burn module of a layer inside a block; `None` for a block.
            pub fn init_inner(&self, input: &Shape, rng: &mut SplitMix64, device: &DispatchDevice) -> Option<Inner<Kb>> {
                match self {
                    $(LayerSpec::$variant(s) => Some(Inner::$variant(s.init(input, rng, device))),)*
                    _ => None,
                }
            }
        }

        impl Inner<Kb> {
            pub(crate) fn forward(&self, x: Tensor<Kb, 2>, pass: &mut Pass) -> Tensor<Kb, 2> {
                match self { $(Inner::$variant(m) => m.forward(x, pass),)* }
            }

            /// Its tensors in Burn's layout, by field name.
            pub fn state(&self) -> Vec<(String, TensorData)> {
                match self { $(Inner::$variant(m) => m.state(),)* }
            }

            /// With every tensor replaced by `get`'s, parameter ids kept.
            pub fn restore(self, get: &mut Getter, device: &DispatchDevice) -> Result<Self, StateError> {
                match self { $(Inner::$variant(m) => Ok(Inner::$variant(m.restore(get, device)?)),)* }
            }

            /// Its trained tensors' ids, field names and ranks.
            pub fn params(&self) -> Vec<(ParamId, String, usize)> {
                match self { $(Inner::$variant(m) => m.params(),)* }
            }
        }
    };
}

impl LayerSpec {
    /// The attention scores and their softmax that an attention or
    /// transformer layer holds for one row of `input` (`heads x L x L`
    /// each); 0 for other layers and for input that is not a sequence.
    /// Saturating.
    pub fn attention_scores(&self, input: &Shape) -> u64 {
        let heads = match self {
            LayerSpec::Attention(a) => a.heads,
            LayerSpec::Transformer(t) => t.heads,
            _ => 0,
        } as u64;
        if heads == 0 || !input.is_sequence() {
            return 0;
        }
        let l = input.dims()[0] as u64;
        heads.saturating_mul(2).saturating_mul(l).saturating_mul(l)
    }
}

catalogue! {
    Dense: dense::DenseSpec => dense::Dense<B>,
    Conv: conv::ConvSpec => conv::Conv<B>,
    Pool: pool::PoolSpec => pool::Pool,
    Flatten: flatten::FlattenSpec => flatten::Flatten,
    Embedding: embedding::EmbeddingSpec => embedding::Embedding<B>,
    Positional: positional::PositionalSpec => positional::Positional<B>,
    Attention: attention::AttentionSpec => attention::Attention<B>,
    Transformer: transformer::TransformerSpec => transformer::Transformer<B>,
    BatchNorm: batchnorm::BatchNormSpec => batchnorm::BatchNorm<B>,
    LayerNorm: layernorm::LayerNormSpec => layernorm::LayerNorm<B>,
    Dropout: dropout::DropoutSpec => dropout::Dropout,
    // Blocks: layers that hold layers (which do not nest).
    ;
    Residual: residual::ResidualSpec => residual::Residual<B>,
}

/// The shape after each layer of `spec`, in order; an error names the
/// layer's index and what it needs.
pub fn shapes(input: &Shape, layers: &[LayerSpec]) -> Result<Vec<Shape>, (usize, String)> {
    let mut shape = input.clone();
    let mut out = Vec::with_capacity(layers.len());
    for (i, layer) in layers.iter().enumerate() {
        if shape.is_tokens() && !layer.first_only() {
            return Err((i, "a text's token ids go through `embedding D` first, as in `embedding 32`".into()));
        }
        shape = layer.output(&shape).map_err(|e| (i, e))?;
        out.push(shape.clone());
    }
    Ok(out)
}

/// The most values one tensor of a model may hold, and one row of a layer's
/// output: 2^40, 4 TiB in fp32, more than any device has. A larger size in
/// a spec is a slip of the keyboard; refusing it where it is written also
/// keeps every size computed from a spec (shapes, the memory estimate) far
/// from overflowing.
pub const MOST_VALUES: u64 = 1 << 40;

/// The values of a tensor of `dims`, when at most [`MOST_VALUES`].
pub fn bounded_size(dims: &[usize]) -> Option<u64> {
    dims.iter().try_fold(1u64, |n, &d| n.checked_mul(d as u64)).filter(|&n| n <= MOST_VALUES)
}

/// The help of a size refused by [`MOST_VALUES`].
pub fn most_values_help() -> String {
    format!(
        "KynML takes at most 2^40 ({MOST_VALUES}) values in one tensor or one row of a layer's output, \
         more than any device holds; check the number for a slip"
    )
}

/// The first of `layers` (from `input`) with a tensor, or an output row,
/// of more than [`MOST_VALUES`] values: its index and what, in words. A
/// block's layers are checked before the block. Layers that cannot take
/// their input end the check: [`shapes`] reports them.
pub fn too_large(input: &Shape, layers: &[LayerSpec]) -> Option<(usize, String)> {
    let mut shape = input.clone();
    for (i, layer) in layers.iter().enumerate() {
        if let Some((j, problem)) = too_large(&shape, layer.children()) {
            return Some((i, format!("its layer {} (`{}`): {problem}", j + 1, layer.children()[j].describe())));
        }
        let Ok(out) = layer.output(&shape) else { return None };
        if let Some(t) = layer.tensors(&shape).into_iter().find(|t| bounded_size(&t.shape).is_none()) {
            return Some((i, format!("its {} {:?} would hold more values than any device has", t.name, t.shape)));
        }
        if bounded_size(out.dims()).is_none() {
            return Some((
                i,
                format!("its output, {} a row, would hold more values than any device has", out.written()),
            ));
        }
        shape = out;
    }
    None
}

/// C for a sequence of C values per position (`input seq LxC`), else 0.
pub fn sequence_channels(input: &Shape) -> usize {
    if input.is_sequence() {
        input.dims()[1]
    } else {
        0
    }
}

/// The layers of one `model` block, in order.
#[derive(Module, Debug)]
pub struct Model<B: Backend> {
    /// In the block's order; the index is the layer's number in tensor names (`0.weight`).
    pub layers: Vec<Layer<B>>,
    /// C for an `input seq LxC` model, whose rows are L positions of C
    /// values with NaN where a sequence is padded; 0 for other inputs.
    pub sequence: usize,
}

/// Stream id for weight initialisation draws (see [`Rng::stream`]).
const INIT_STREAM: u64 = 1;

impl Model<Kb> {
    /// Build the layers with PyTorch's initialisation, drawn on the host from
    /// `seed`, so that the same seed gives the same weights on every device.
    pub fn init(spec: &ModelSpec, seed: u64, device: &DispatchDevice) -> Self {
        let mut rng = SplitMix64::stream(seed, INIT_STREAM);
        let mut shape = spec.shape.clone();
        let layers = spec
            .layers
            .iter()
            .map(|layer| {
                let module = layer.value.init(&shape, &mut rng, device);
                // A validated spec's shapes chain; keep the input shape otherwise.
                shape = layer.value.output(&shape).unwrap_or(shape.clone());
                module
            })
            .collect();
        Model { layers, sequence: sequence_channels(&spec.shape) }
    }

    /// # Shapes
    /// `x: [batch, input]` → `[batch, outputs]`
    pub fn forward(&self, x: Tensor<Kb, 2>, mode: Mode) -> Tensor<Kb, 2> {
        self.forward_in(x, mode, None)
    }

    /// [`forward`](Self::forward) with the products (dense, convolution and attention)
    /// in `half` (bf16 or fp16) when given; the rest stays fp32.
    pub fn forward_in(&self, mut x: Tensor<Kb, 2>, mut mode: Mode, half: Option<FloatDType>) -> Tensor<Kb, 2> {
        let mut pass = Pass { mode: &mut mode, half, mask: None };
        let [batch, width] = x.dims();
        if let Some(l) = width.checked_div(self.sequence) {
            // A sequence's padding is NaN: 0 to the layers, and 0 in the
            // mask that attention and pooling read (1 where a position is).
            let c = self.sequence;
            let padding = x.clone().is_nan();
            // A boolean tensor carries no gradient tape: its float is made
            // off the tape and handed to it as a constant, as dropout's mask.
            let present = padding.clone().bool_not().float();
            let present = match x.device() {
                DispatchDevice::Autodiff(_) => Tensor::from_inner(present),
                _ => present,
            }
            .reshape([batch, l, c]);
            pass.mask = Some(present.slice([0..batch, 0..l, 0..1]).reshape([batch, l]));
            x = x.mask_fill(padding, 0.0);
        }
        for layer in &self.layers {
            x = layer.forward(x, &mut pass);
        }
        x
    }
}
