//! The model graph: a `model` block's layer list becomes one Burn module at
//! run time.
//!
//! ```ignore
//! let model = Model::init(&spec.model, seed, &device.autodiff());
//! let y = model.forward(x, Mode::Train); // [batch, input] -> [batch, out]
//! ```

mod dense;
mod dropout;
mod norm;
mod state;
mod summary;

pub use dense::Dense;
pub use dropout::{bernoulli_mask, dropout_piece, Dropout, MaskKey, PIECE as MASK_PIECE};
pub use norm::{BatchNorm, LayerNorm};
pub use state::StateError;
pub use summary::{summarize, LayerSummary, ModelSummary};

use burn::module::Module;
use burn::tensor::{FloatDType, Tensor};

use crate::rng::SplitMix64;
use crate::spec::types::{Layer as LayerSpec, ModelSpec};
use burn::tensor::backend::Backend;
use burn::DispatchDevice;
use kynml_backend::Backend as Kb;

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

/// One layer of a `model` block (every line but `input`).
#[derive(Module, Debug)]
pub enum Layer<B: Backend> {
    /// `dense N ACTIVATION`: a fully connected layer and its activation.
    Dense(Dense<B>),
    /// `batchnorm`: batch normalisation of the previous layer's output.
    BatchNorm(BatchNorm<B>),
    /// `layernorm`: layer normalisation of the previous layer's output.
    LayerNorm(LayerNorm<B>),
    /// `dropout P`: dropout with probability P while training.
    Dropout(Dropout),
}

/// The layers of one `model` block, in order.
#[derive(Module, Debug)]
pub struct Model<B: Backend> {
    /// In the block's order; the index is the layer's number in tensor names (`0.weight`).
    pub layers: Vec<Layer<B>>,
}

/// Stream id for weight initialisation draws (see [`Rng::stream`]).
const INIT_STREAM: u64 = 1;

impl Model<Kb> {
    /// Build the layers with PyTorch's initialisation, drawn on the host from
    /// `seed`, so that the same seed gives the same weights on every device.
    pub fn init(spec: &ModelSpec, seed: u64, device: &DispatchDevice) -> Self {
        let mut rng = SplitMix64::stream(seed, INIT_STREAM);
        let mut width = spec.input.value;
        let layers = spec
            .layers
            .iter()
            .map(|layer| match layer.value {
                LayerSpec::Dense { units, activation } => {
                    let dense = Dense::init(width, units, activation, &mut rng, device);
                    width = units;
                    Layer::Dense(dense)
                }
                LayerSpec::BatchNorm => Layer::BatchNorm(BatchNorm::init(width, device)),
                LayerSpec::LayerNorm => Layer::LayerNorm(LayerNorm::init(width, device)),
                LayerSpec::Dropout(prob) => Layer::Dropout(Dropout { prob }),
            })
            .collect();
        Model { layers }
    }

    /// # Shapes
    /// `x: [batch, input]` → `[batch, outputs]`
    pub fn forward(&self, x: Tensor<Kb, 2>, mode: Mode) -> Tensor<Kb, 2> {
        self.forward_in(x, mode, None)
    }

    /// [`forward`](Self::forward) with the dense layers' products in `half`
    /// (bf16 or fp16) when given; the rest stays fp32.
    pub fn forward_in(&self, mut x: Tensor<Kb, 2>, mut mode: Mode, half: Option<FloatDType>) -> Tensor<Kb, 2> {
        for layer in &self.layers {
            let training = matches!(mode, Mode::Train(_));
            x = match layer {
                Layer::Dense(dense) => dense.forward(x, half),
                Layer::BatchNorm(norm) => norm.forward(x, training),
                Layer::LayerNorm(norm) => norm.forward(x),
                Layer::Dropout(dropout) => match &mut mode {
                    Mode::Train(rng) => dropout.forward(x, Some(&mut **rng)),
                    Mode::Eval => dropout.forward(x, None),
                },
            };
        }
        x
    }
}
