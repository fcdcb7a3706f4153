//! The model as a table (layer, output shape, parameters), computed from the
//! spec alone so that `kynml check` needs no device.

use super::{Role, Shape};
use crate::spec::types::ModelSpec;

/// One row of the model table: one layer of the `model` block.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LayerSummary {
    /// As a person would write it: `dense 512 gelu`.
    pub layer: String,
    /// Values per sample of the output; the batch dimension is implied.
    pub output_width: usize,
    /// The output's shape per sample: `[512]`, `[8, 14, 14]`.
    pub output_shape: Shape,
    /// Trainable parameters (batchnorm's running statistics are buffers, as
    /// in PyTorch, and are not counted).
    pub params: usize,
}

/// A `model` block as a table, as `kynml check` prints it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ModelSummary {
    /// The model block's name (`DeepNet`).
    pub name: String,
    /// Values per sample of the input: the `input` line.
    pub input: usize,
    /// The input's shape per sample.
    pub input_shape: Shape,
    /// One row per layer, in order; the `input` line has none.
    pub layers: Vec<LayerSummary>,
    /// Trainable parameters of all layers together.
    pub total_params: usize,
    /// Width of the model's output: the last layer's.
    pub output_width: usize,
}

/// The table for `spec`, computed from the spec alone (whose shapes a
/// validated spec guarantees to chain).
pub fn summarize(spec: &ModelSpec) -> ModelSummary {
    let mut shape = spec.shape.clone();
    let layers: Vec<LayerSummary> = spec
        .layers
        .iter()
        .map(|layer| {
            let params = layer.value.tensors(&shape).iter().filter(|t| t.role == Role::Param).map(|t| t.len()).sum();
            shape = layer.value.output(&shape).unwrap_or(shape.clone());
            LayerSummary {
                layer: layer.value.describe(),
                output_width: shape.size(),
                output_shape: shape.clone(),
                params,
            }
        })
        .collect();
    ModelSummary {
        name: spec.name.value.clone(),
        input: spec.input.value,
        input_shape: spec.shape.clone(),
        total_params: layers.iter().map(|l| l.params).sum(),
        output_width: shape.size(),
        layers,
    }
}
