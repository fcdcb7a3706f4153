//! The model as a table (layer, output shape, parameters), computed from the
//! spec alone so that `kynml check` needs no device.

use crate::spec::types::{Activation, Layer, ModelSpec};

/// One row of the model table: one layer of the `model` block.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LayerSummary {
    /// As a person would write it: `dense 512 gelu`.
    pub layer: String,
    /// Width of the output; the batch dimension is implied.
    pub output_width: usize,
    /// Trainable parameters (batchnorm's running statistics are buffers, as
    /// in PyTorch, and are not counted).
    pub params: usize,
}

/// A `model` block as a table, as `kynml check` prints it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ModelSummary {
    /// The model block's name (`DeepNet`).
    pub name: String,
    /// The number of input features: the `input N` line.
    pub input: usize,
    /// One row per layer, in order; the `input` line has none.
    pub layers: Vec<LayerSummary>,
    /// Trainable parameters of all layers together.
    pub total_params: usize,
    /// Width of the model's output: the last layer's.
    pub output_width: usize,
}

/// The table for `spec`, computed from the spec alone.
pub fn summarize(spec: &ModelSpec) -> ModelSummary {
    let mut width = spec.input.value;
    let layers: Vec<LayerSummary> = spec
        .layers
        .iter()
        .map(|layer| {
            let (name, params) = match layer.value {
                Layer::Dense { units, activation } => {
                    let params = width * units + units;
                    width = units;
                    (format!("dense {units} {}", activation_name(activation)), params)
                }
                Layer::BatchNorm => ("batchnorm".to_string(), 2 * width),
                Layer::LayerNorm => ("layernorm".to_string(), 2 * width),
                Layer::Dropout(p) => (format!("dropout {p}"), 0),
            };
            LayerSummary { layer: name, output_width: width, params }
        })
        .collect();
    ModelSummary {
        name: spec.name.value.clone(),
        input: spec.input.value,
        total_params: layers.iter().map(|l| l.params).sum(),
        output_width: width,
        layers,
    }
}

pub fn activation_name(act: Activation) -> String {
    match act {
        Activation::Linear => "linear".into(),
        Activation::Relu => "relu".into(),
        Activation::Gelu => "gelu".into(),
        Activation::Tanh => "tanh".into(),
        Activation::Sigmoid => "sigmoid".into(),
        Activation::Silu => "silu".into(),
        Activation::LeakyRelu(slope) => format!("leaky_relu({slope})"),
    }
}
