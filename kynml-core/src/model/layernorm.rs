//! `layernorm`: normalises each sample over its last dimension (the
//! features), PyTorch's `nn.LayerNorm(features)`.

use burn::module::{Module, Param, ParamId};
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use burn::DispatchDevice;
use kynml_backend::Backend as Kb;
use serde_json::{json, Value as Json};

use super::kind::{extra_args, restore_param, Decl, Getter, Kind, LayerModule, Pass, Shape, Tensors};
use super::StateError;
use crate::export::onnx::{Attr, Graph};
use crate::rng::SplitMix64;
use crate::spec::ast::LayerLine;
use crate::spec::diagnostic::Diagnostic;

use kynml_cpu::NORM_EPS as EPS;

/// `layernorm` takes no arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct LayerNormSpec;

/// `nn.LayerNorm(features)`: each row normalised over its features (biased
/// variance), then scaled and shifted.
#[derive(Module, Debug)]
pub struct LayerNorm<B: Backend> {
    /// The learned scale, `[features]`, starting at 1 (PyTorch's `weight`).
    pub gamma: Param<Tensor<B, 1>>,
    /// The learned shift, `[features]`, starting at 0 (PyTorch's `bias`).
    pub beta: Param<Tensor<B, 1>>,
}

impl Kind for LayerNormSpec {
    const NAMES: &'static [&'static str] = &["layernorm"];
    const FORMS: &'static [&'static str] = &["layernorm"];
    type Module = LayerNorm<Kb>;

    fn parse(line: &LayerLine, d: &mut Vec<Diagnostic>) -> Option<Self> {
        super::kind::options(line, &[], d)?;
        extra_args(line, 0, "layernorm", d)?;
        Some(LayerNormSpec)
    }

    fn describe(&self) -> String {
        "layernorm".into()
    }

    /// Element-wise.
    fn multiply_adds(&self, _input: &Shape) -> u64 {
        0
    }

    fn output(&self, input: &Shape) -> Result<Shape, String> {
        match input.rank() {
            1 | 2 => Ok(input.clone()),
            _ => Err(format!(
                "`layernorm` normalises plain features or each position of a sequence; for {} use `batchnorm`, or `flatten` first",
                input.written()
            )),
        }
    }

    fn tensors(&self, input: &Shape) -> Vec<Decl> {
        let f = features(input);
        vec![Decl::param("weight", vec![f]), Decl::param("bias", vec![f])]
    }

    /// On plain features, or on each position of a text.
    fn native(&self, input: &Shape) -> Option<kynml_cpu::LayerConfig> {
        match input.layout() {
            super::Layout::Values if input.rank() == 1 => Some(kynml_cpu::LayerConfig::LayerNorm { positions: 1 }),
            super::Layout::Sequence => Some(kynml_cpu::LayerConfig::LayerNorm { positions: input.dims()[0] }),
            _ => None,
        }
    }

    /// Initialised as PyTorch does: scale 1, shift 0.
    fn init(&self, input: &Shape, _rng: &mut SplitMix64, device: &DispatchDevice) -> LayerNorm<Kb> {
        let f = features(input);
        LayerNorm {
            gamma: Param::from_tensor(Tensor::ones([f], device)),
            beta: Param::from_tensor(Tensor::zeros([f], device)),
        }
    }

    fn reference(&self, input: &Shape, t: Tensors, x: &[f32]) -> Vec<f32> {
        let (gamma, beta, f) = (t.f32("weight"), t.f32("bias"), features(input));
        let mut y = Vec::with_capacity(x.len());
        for row in x.chunks_exact(f) {
            let mean = row.iter().map(|v| f64::from(*v)).sum::<f64>() / f as f64;
            let var = row.iter().map(|v| (f64::from(*v) - mean).powi(2)).sum::<f64>() / f as f64;
            let inv = 1.0 / (var + EPS).sqrt();
            for i in 0..f {
                y.push(((f64::from(row[i]) - mean) * inv * f64::from(gamma[i]) + f64::from(beta[i])) as f32);
            }
        }
        y
    }

    /// `LayerNormalization` (axis -1, epsilon 1e-5).
    fn onnx(&self, g: &mut Graph, p: &str, input: &Shape, t: Tensors, x: String) -> String {
        let f = features(input);
        let scale = g.constant(format!("{p}.scale"), vec![f], t.f32("weight").to_vec());
        let bias = g.constant(format!("{p}.bias"), vec![f], t.f32("bias").to_vec());
        let attrs = vec![Attr::Int("axis", -1), Attr::Float("epsilon", EPS as f32)];
        if input.rank() == 1 {
            return g.node(p.to_string(), "LayerNormalization", &[&x, &scale, &bias], attrs);
        }
        let x = g.reshape(p, x, input);
        let y = g.node(format!("{p}.normalized"), "LayerNormalization", &[&x, &scale, &bias], attrs);
        g.flatten(p, y)
    }

    fn torch(&self, input: &Shape) -> Json {
        let f = features(input);
        json!({
            "normalized_shape": f,
            "eps": EPS,
            "module": format!("nn.LayerNorm({f}, eps=1e-05)"),
        })
    }

    fn from_json(_kind: &str, _v: &Json) -> Result<Self, String> {
        Ok(LayerNormSpec)
    }
}

/// The size of the last dimension.
fn features(input: &Shape) -> usize {
    input.dims().last().copied().unwrap_or(0)
}

impl LayerModule for LayerNorm<Kb> {
    fn forward(&self, x: Tensor<Kb, 2>, pass: &mut Pass) -> Tensor<Kb, 2> {
        let [batch, size] = x.dims();
        let f = self.gamma.dims()[0];
        let x = if f == size { x } else { x.reshape([batch * (size / f), f]) };
        let mean = x.clone().mean_dim(1);
        let var = (x.clone() - mean.clone()).square().mean_dim(1);
        let x_hat = (x - mean) / (var.clone() + EPS).sqrt();
        // Outside training, a row whose variance overflows f32 (values
        // past about 1e19) is NaN, as in PyTorch, not `beta`: dividing by
        // an infinite deviation gave every such row the output of a row of
        // zeros, which `predict` could not tell from a real prediction.
        let x_hat = if pass.training() {
            x_hat
        } else {
            let rows = x_hat.dims()[0];
            // A comparison, which fusion fuses, rather than `is_inf`.
            x_hat.mask_fill(var.greater_elem(f32::MAX).expand([rows, f]), f32::NAN)
        };
        let y = x_hat * self.gamma.val().unsqueeze::<2>() + self.beta.val().unsqueeze::<2>();
        if f == size {
            y
        } else {
            y.reshape([batch, size])
        }
    }

    fn state(&self) -> Vec<(String, TensorData)> {
        vec![("weight".into(), self.gamma.val().into_data()), ("bias".into(), self.beta.val().into_data())]
    }

    fn restore(mut self, get: &mut Getter, device: &DispatchDevice) -> Result<Self, StateError> {
        self.gamma = restore_param(self.gamma, "weight", get, device)?;
        self.beta = restore_param(self.beta, "bias", get, device)?;
        Ok(self)
    }

    fn params(&self) -> Vec<(ParamId, String, usize)> {
        vec![(self.gamma.id, "weight".into(), 1), (self.beta.id, "bias".into(), 1)]
    }
}
