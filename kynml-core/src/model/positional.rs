//! `positional`: a learned vector for each position of a text, added to the
//! values there (GPT's learned position embeddings), so that the layers
//! after it can tell "not good" from "good, not". `[L, D]` in and out; one
//! `[L, D]` table, `weight`, drawn from N(0, 1) as `nn.Embedding` draws a
//! table (on the scale of the token vectors it is added to).

use burn::module::{Module, Param, ParamId};
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use burn::DispatchDevice;
use kynml_backend::Backend as Kb;
use serde_json::{json, Value as Json};

use super::kind::{extra_args, options, restore_param, Decl, Getter, Kind, LayerModule, Pass, Shape, Tensors};
use super::StateError;
use crate::export::onnx::Graph;
use crate::rng::SplitMix64;
use crate::spec::ast::LayerLine;
use crate::spec::diagnostic::Diagnostic;

/// `positional` takes no arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct PositionalSpec;

/// `x + weight`, the table flat as the values travel.
#[derive(Module, Debug)]
pub struct Positional<B: Backend> {
    /// `[1, L * D]`: position `i`'s vector at `i * D..`.
    pub weight: Param<Tensor<B, 2>>,
}

impl Kind for PositionalSpec {
    const NAMES: &'static [&'static str] = &["positional"];
    const FORMS: &'static [&'static str] = &["positional"];
    type Module = Positional<Kb>;

    fn parse(line: &LayerLine, d: &mut Vec<Diagnostic>) -> Option<Self> {
        options(line, &[], d)?;
        extra_args(line, 0, "positional", d)?;
        Some(PositionalSpec)
    }

    fn describe(&self) -> String {
        "positional".into()
    }

    /// An addition, not a product.
    fn multiply_adds(&self, _input: &Shape) -> u64 {
        0
    }

    fn output(&self, input: &Shape) -> Result<Shape, String> {
        if !input.is_sequence() {
            return Err("`positional` adds a vector per position of a text: put it after `embedding D`".into());
        }
        Ok(input.clone())
    }

    fn tensors(&self, input: &Shape) -> Vec<Decl> {
        vec![Decl::param("weight", input.dims().to_vec())]
    }

    fn native(&self, _input: &Shape) -> Option<kynml_cpu::LayerConfig> {
        Some(kynml_cpu::LayerConfig::Positional)
    }

    fn init(&self, input: &Shape, rng: &mut SplitMix64, device: &DispatchDevice) -> Positional<Kb> {
        let values: Vec<f32> = (0..input.size()).map(|_| rng.normal() as f32).collect();
        Positional { weight: Param::from_data(TensorData::new(values, [1, input.size()]), device) }
    }

    fn reference(&self, input: &Shape, t: Tensors, x: &[f32]) -> Vec<f32> {
        let w = t.f32("weight");
        x.chunks_exact(input.size()).flat_map(|row| row.iter().zip(w).map(|(a, b)| a + b)).collect()
    }

    /// One `Add` of the flat table.
    fn onnx(&self, g: &mut Graph, p: &str, input: &Shape, t: Tensors, x: String) -> String {
        let w = g.constant(format!("{p}.weight"), vec![input.size()], t.f32("weight").to_vec());
        g.node(p.to_string(), "Add", &[&x, &w], Vec::new())
    }

    fn torch(&self, input: &Shape) -> Json {
        json!({
            "module": format!(
                "x + weight: one learned vector per position, `weight` of shape {:?} added to the [rows, L, D] values",
                input.dims()
            ),
        })
    }

    fn from_json(_kind: &str, _v: &Json) -> Result<Self, String> {
        Ok(PositionalSpec)
    }
}

impl LayerModule for Positional<Kb> {
    fn forward(&self, x: Tensor<Kb, 2>, _pass: &mut Pass) -> Tensor<Kb, 2> {
        x + self.weight.val()
    }

    fn state(&self) -> Vec<(String, TensorData)> {
        vec![("weight".into(), self.weight.val().into_data())]
    }

    fn restore(mut self, get: &mut Getter, device: &DispatchDevice) -> Result<Self, StateError> {
        self.weight = restore_param(self.weight, "weight", get, device)?;
        Ok(self)
    }

    fn params(&self) -> Vec<(ParamId, String, usize)> {
        vec![(self.weight.id, "weight".into(), 2)]
    }
}
