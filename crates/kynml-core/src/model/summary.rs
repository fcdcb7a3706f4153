//! The model as a table (layer, output shape, parameters), computed from the
//! spec alone so that `kynml check` needs no device.

use crate::spec::types::{Activation, Layer, ModelSpec};

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

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ModelSummary {
    pub name: String,
    pub input: usize,
    pub layers: Vec<LayerSummary>,
    pub total_params: usize,
    pub output_width: usize,
}

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
