//! `flatten`: the channels and positions of a shaped input become plain
//! features, in PyTorch's order (channel, then row, then column), as
//! `nn.Flatten()` does. Values already travel flat between layers, so it
//! only changes the shape the next layer sees.

use burn::module::{Module, ParamId};
use burn::tensor::{Tensor, TensorData};
use burn::DispatchDevice;
use kynml_backend::Backend as Kb;
use serde_json::{json, Value as Json};

use super::kind::{extra_args, options, Getter, Kind, LayerModule, Pass, Shape, Tensors};
use super::StateError;
use crate::export::onnx::Graph;
use crate::rng::SplitMix64;
use crate::spec::ast::LayerLine;
use crate::spec::diagnostic::Diagnostic;

/// `flatten` takes no arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct FlattenSpec;

/// Nothing to compute; the number of features it gives.
#[derive(Module, Debug, Clone)]
pub struct Flatten {
    /// Values per sample, in and out.
    pub features: usize,
}

impl Kind for FlattenSpec {
    const NAMES: &'static [&'static str] = &["flatten"];
    const FORMS: &'static [&'static str] = &["flatten"];
    type Module = Flatten;

    fn parse(line: &LayerLine, d: &mut Vec<Diagnostic>) -> Option<Self> {
        options(line, &[], d)?;
        extra_args(line, 0, "flatten", d)?;
        Some(FlattenSpec)
    }

    fn describe(&self) -> String {
        "flatten".into()
    }

    /// Nothing: a view.
    fn multiply_adds(&self, _input: &Shape) -> u64 {
        0
    }

    fn output(&self, input: &Shape) -> Result<Shape, String> {
        Ok(Shape::flat(input.size()))
    }

    /// Channels first are already the features' order.
    fn native(&self, input: &Shape) -> Option<kynml_cpu::LayerConfig> {
        // A sequence's positions travel as `[L, D]` rows, already in order.
        matches!(input.layout(), super::Layout::Values | super::Layout::Sequence)
            .then_some(kynml_cpu::LayerConfig::Flatten)
    }

    fn init(&self, input: &Shape, _rng: &mut SplitMix64, _device: &DispatchDevice) -> Flatten {
        Flatten { features: input.size() }
    }

    fn reference(&self, _input: &Shape, _t: Tensors, x: &[f32]) -> Vec<f32> {
        x.to_vec()
    }

    /// Nothing: the graph's values are already `[batch, features]` between layers.
    fn onnx(&self, _g: &mut Graph, _p: &str, _input: &Shape, _t: Tensors, x: String) -> String {
        x
    }

    fn torch(&self, _input: &Shape) -> Json {
        json!({"module": "nn.Flatten()"})
    }

    fn from_json(_kind: &str, _v: &Json) -> Result<Self, String> {
        Ok(FlattenSpec)
    }
}

impl LayerModule for Flatten {
    fn forward(&self, x: Tensor<Kb, 2>, _pass: &mut Pass) -> Tensor<Kb, 2> {
        x
    }

    fn state(&self) -> Vec<(String, TensorData)> {
        Vec::new()
    }

    fn restore(self, _get: &mut Getter, _device: &DispatchDevice) -> Result<Self, StateError> {
        Ok(self)
    }

    fn params(&self) -> Vec<(ParamId, String, usize)> {
        Vec::new()
    }
}
