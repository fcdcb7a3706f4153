//! The model as a table (layer, output shape, parameters), computed from the
//! spec alone so that `kynml check` needs no device.

use super::LayerSpec;
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
    /// Multiply-adds of its products in the forward pass of one sample
    /// (see [`LayerSpec::multiply_adds`]); a block's row counts its
    /// projection's, its layers have rows of their own.
    pub multiply_adds: u64,
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
    /// Multiply-adds of the forward pass of one sample, all layers together.
    pub multiply_adds: u64,
    /// Width of the model's output: the last layer's.
    pub output_width: usize,
}

/// The table for `spec`, computed from the spec alone (whose shapes a
/// validated spec guarantees to chain).
pub fn summarize(spec: &ModelSpec) -> ModelSummary {
    let mut layers = Vec::new();
    let output = rows(&spec.shape, spec.layers.iter().map(|l| &l.value), "", &mut layers);
    ModelSummary {
        name: spec.name.value.clone(),
        input: spec.input.value,
        input_shape: spec.shape.clone(),
        total_params: layers.iter().map(|l| l.params).sum(),
        multiply_adds: layers.iter().map(|l| l.multiply_adds).sum(),
        output_width: output.size(),
        layers,
    }
}

/// One row per layer from `input` on, a block's layers indented after its
/// own row (which counts only its projection's parameters); returns the
/// last output shape.
fn rows<'a>(
    input: &Shape,
    layers: impl Iterator<Item = &'a LayerSpec>,
    indent: &str,
    out: &mut Vec<LayerSummary>,
) -> Shape {
    let mut shape = input.clone();
    for layer in layers {
        let count = |s: &Shape, l: &LayerSpec| -> usize {
            l.tensors(s).iter().filter(|t| t.role == Role::Param).map(|t| t.len()).sum()
        };
        let total = count(&shape, layer);
        let next = layer.output(&shape).unwrap_or(shape.clone());
        let at = out.len();
        out.push(LayerSummary {
            layer: format!("{indent}{}", layer.describe()),
            output_width: next.size(),
            output_shape: next.clone(),
            params: total,
            multiply_adds: layer.multiply_adds(&shape),
        });
        if !layer.children().is_empty() {
            let before = out.len();
            rows(&shape, layer.children().iter(), &format!("{indent}  "), out);
            let inner: usize = out[before..].iter().map(|l| l.params).sum();
            out[at].params = total - inner;
            let inner: u64 = out[before..].iter().map(|l| l.multiply_adds).sum();
            out[at].multiply_adds -= inner;
            let added = if out[at].params > 0 { "projected input" } else { "input" };
            out[at].layer = format!("{indent}{} (+ {added})", layer.describe());
        }
        shape = next;
    }
    shape
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A residual block's row counts its projection's multiply-adds, its
    /// layers their own, and the model's total counts each once.
    #[test]
    fn a_blocks_row_counts_its_projection_and_its_layers_their_own() {
        let source =
            "dataset D:\nsource = csv(\"d.csv\")\ntarget = \"y\"\nmodel M:\ninput 16\nresidual:\n  dense 32 relu\n  \
                      dense 24 linear\ndense 1 linear\ntrain:\nloss = mse\nepochs = 3\n";
        let spec = crate::spec::parse_spec(source).unwrap();
        let s = summarize(&spec.model);
        let each: Vec<u64> = s.layers.iter().map(|l| l.multiply_adds).collect();
        assert_eq!(each, [16 * 24, 16 * 32, 32 * 24, 24]);
        assert_eq!(s.multiply_adds, 16 * 24 + 16 * 32 + 32 * 24 + 24);
    }
}
