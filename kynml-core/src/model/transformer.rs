//! `transformer heads=H ff=F`: a pre-norm transformer encoder block over a
//! text's positions, PyTorch's `nn.TransformerEncoderLayer(D, H, F,
//! dropout=0.0, activation="gelu", batch_first=True, norm_first=True)`:
//!
//! ```text
//! x = x + attention(layernorm1(x))             # padding's positions masked
//! x = x + linear2(gelu(linear1(layernorm2(x))))
//! ```
//!
//! `[L, D]` in and out. Its parts are the layers of [`super::attention`],
//! [`super::layernorm`] and [`super::dense`]; for dropout, put a `dropout P`
//! line after the block.

use burn::module::{Module, ParamId};
use burn::tensor::{Tensor, TensorData};
use burn::DispatchDevice;
use kynml_backend::Backend as Kb;
use serde_json::{json, Value as Json};

use super::attention::{self, Attention};
use super::dense::{Dense, DenseSpec};
use super::kind::{extra_args, options, Decl, Getter, Kind, LayerModule, Pass, Shape, Tensors};
use super::layernorm::{LayerNorm, LayerNormSpec};
use super::StateError;
use crate::export::onnx::Graph;
use crate::rng::SplitMix64;
use crate::spec::ast::LayerLine;
use crate::spec::diagnostic::Diagnostic;
use crate::spec::types::Activation;

/// The arguments of a `transformer` line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct TransformerSpec {
    /// Attention heads; the positions' width divides into them.
    pub heads: usize,
    /// The width of the feed-forward layer inside.
    pub ff: usize,
}

/// The block's parts, named as PyTorch names them.
#[derive(Module, Debug)]
pub struct Transformer<B: burn::tensor::backend::Backend> {
    /// Self-attention.
    pub self_attn: Attention<B>,
    /// `D -> F`, then gelu.
    pub linear1: Dense<B>,
    /// `F -> D`.
    pub linear2: Dense<B>,
    /// Before the attention.
    pub norm1: LayerNorm<B>,
    /// Before the feed-forward layers.
    pub norm2: LayerNorm<B>,
}

const FORM: &str = "transformer heads=H ff=F";

impl TransformerSpec {
    fn linear1(&self) -> DenseSpec {
        DenseSpec { units: self.ff, activation: Activation::Gelu }
    }

    fn linear2(&self, d: usize) -> DenseSpec {
        DenseSpec { units: d, activation: Activation::Linear }
    }
}

/// `x` (`[batch, L * D]`) as rows of D: `[batch * L, D]`, in ONNX.
fn rows_of(g: &mut Graph, p: &str, x: String, d: usize) -> String {
    let shape = g.ints(format!("{p}.rows_shape"), vec![2], vec![-1, d as i64]);
    g.node(format!("{p}.rows"), "Reshape", &[&x, &shape], Vec::new())
}

impl Kind for TransformerSpec {
    const NAMES: &'static [&'static str] = &["transformer"];
    const FORMS: &'static [&'static str] = &[FORM];
    type Module = Transformer<Kb>;

    fn parse(line: &LayerLine, d: &mut Vec<Diagnostic>) -> Option<Self> {
        let opts = options(line, &["heads", "ff"], d)?;
        let heads = opts.count("heads", 1, 1, d);
        let ff = opts.count("ff", 0, 1, d);
        extra_args(line, 0, FORM, d)?;
        Some(TransformerSpec { heads: heads?, ff: ff? })
    }

    fn describe(&self) -> String {
        format!("transformer heads={} ff={}", self.heads, self.ff)
    }

    fn output(&self, input: &Shape) -> Result<Shape, String> {
        attention::check_heads(input, self.heads, "transformer")?;
        if self.ff == 0 {
            return Err(format!("its feed-forward width is missing: write `ff=F`, as in `ff={}`", 4 * input.dims()[1]));
        }
        Ok(input.clone())
    }

    fn tensors(&self, input: &Shape) -> Vec<Decl> {
        let (d, f) = (attention::width(input), self.ff);
        let mut out = attention::decls(d, "self_attn.");
        out.extend([
            Decl::param("linear1.weight", vec![f, d]),
            Decl::param("linear1.bias", vec![f]),
            Decl::param("linear2.weight", vec![d, f]),
            Decl::param("linear2.bias", vec![d]),
        ]);
        for n in ["norm1", "norm2"] {
            out.extend([Decl::param(format!("{n}.weight"), vec![d]), Decl::param(format!("{n}.bias"), vec![d])]);
        }
        out
    }

    /// PyTorch's order: the attention, the two linear layers, the norms.
    fn init(&self, input: &Shape, rng: &mut SplitMix64, device: &DispatchDevice) -> Transformer<Kb> {
        let d = attention::width(input);
        Transformer {
            self_attn: attention::init(d, self.heads, rng, device),
            linear1: self.linear1().init(&Shape::flat(d), rng, device),
            linear2: self.linear2(d).init(&Shape::flat(self.ff), rng, device),
            norm1: LayerNormSpec.init(input, rng, device),
            norm2: LayerNormSpec.init(input, rng, device),
        }
    }

    fn burn_to_torch(&self, name: &str, data: TensorData, torch_shape: &[usize]) -> Vec<f32> {
        attention::to_torch(name, data, torch_shape)
    }

    fn torch_to_burn(&self, name: &str, values: &[f32], burn_shape: &[usize]) -> TensorData {
        attention::to_burn(name, values, burn_shape)
    }

    fn reference(&self, input: &Shape, t: Tensors, x: &[f32]) -> Vec<f32> {
        let d = attention::width(input);
        let (norm1, norm2) = (t.under("norm1."), t.under("norm2."));
        let (linear1, linear2) = (t.under("linear1."), t.under("linear2."));
        let a = LayerNormSpec.reference(input, t.with(&norm1), x);
        let a = attention::reference(input, self.heads, t, "self_attn.", &a);
        let h: Vec<f32> = x.iter().zip(&a).map(|(x, a)| x + a).collect();
        let f = LayerNormSpec.reference(input, t.with(&norm2), &h);
        let f = self.linear1().reference(&Shape::flat(d), t.with(&linear1), &f);
        let f = self.linear2(d).reference(&Shape::flat(self.ff), t.with(&linear2), &f);
        h.iter().zip(&f).map(|(h, f)| h + f).collect()
    }

    fn onnx(&self, g: &mut Graph, p: &str, input: &Shape, t: Tensors, x: String) -> String {
        let (l, d) = (input.dims()[0], attention::width(input));
        let (norm1, norm2) = (t.under("norm1."), t.under("norm2."));
        let (linear1, linear2) = (t.under("linear1."), t.under("linear2."));
        let a = LayerNormSpec.onnx(g, &format!("{p}.norm1"), input, t.with(&norm1), x.clone());
        let a = attention::onnx(g, &format!("{p}.self_attn"), input, self.heads, t, "self_attn.", a);
        let h = g.node(format!("{p}.attended"), "Add", &[&x, &a], Vec::new());
        let f = LayerNormSpec.onnx(g, &format!("{p}.norm2"), input, t.with(&norm2), h.clone());
        let f = rows_of(g, p, f, d);
        let f = self.linear1().onnx(g, &format!("{p}.linear1"), &Shape::flat(d), t.with(&linear1), f);
        let f = self.linear2(d).onnx(g, &format!("{p}.linear2"), &Shape::flat(self.ff), t.with(&linear2), f);
        let back = g.ints(format!("{p}.back_shape"), vec![2], vec![-1, (l * d) as i64]);
        let f = g.node(format!("{p}.fed"), "Reshape", &[&f, &back], Vec::new());
        g.node(p.to_string(), "Add", &[&h, &f], Vec::new())
    }

    fn torch(&self, input: &Shape) -> Json {
        let d = attention::width(input);
        json!({
            "d_model": d,
            "nhead": self.heads,
            "dim_feedforward": self.ff,
            "module": format!(
                "nn.TransformerEncoderLayer({d}, {}, {}, dropout=0.0, activation='gelu', batch_first=True, \
                 norm_first=True), called with src_key_padding_mask=(token_ids == 0)",
                self.heads, self.ff
            ),
        })
    }

    fn from_json(_kind: &str, v: &Json) -> Result<Self, String> {
        let size =
            |k: &str| v.get(k).and_then(Json::as_u64).map(|n| n as usize).ok_or(format!("transformer without `{k}`"));
        Ok(TransformerSpec { heads: size("nhead")?, ff: size("dim_feedforward")? })
    }
}

impl LayerModule for Transformer<Kb> {
    fn forward(&self, x: Tensor<Kb, 2>, pass: &mut Pass) -> Tensor<Kb, 2> {
        let [batch, size] = x.dims();
        let d = self.norm1.gamma.dims()[0];
        let l = size / d;
        let a = self.norm1.forward(x.clone(), pass).reshape([batch, l, d]);
        let h = x + self.self_attn.attend(a, pass.mask.clone(), pass.half).reshape([batch, size]);
        let f = self.norm2.forward(h.clone(), pass).reshape([batch * l, d]);
        let f = self.linear2.forward(self.linear1.forward(f, pass), pass);
        h + f.reshape([batch, size])
    }

    fn state(&self) -> Vec<(String, TensorData)> {
        let mut out = self.self_attn.state_under("self_attn.");
        for (name, part) in [("linear1", self.linear1.state()), ("linear2", self.linear2.state())] {
            out.extend(part.into_iter().map(|(n, t)| (format!("{name}.{n}"), t)));
        }
        for (name, part) in [("norm1", self.norm1.state()), ("norm2", self.norm2.state())] {
            out.extend(part.into_iter().map(|(n, t)| (format!("{name}.{n}"), t)));
        }
        out
    }

    fn restore(mut self, get: &mut Getter, device: &DispatchDevice) -> Result<Self, StateError> {
        self.self_attn = self.self_attn.restore_under("self_attn.", get, device)?;
        self.linear1 = self.linear1.restore(&mut |n: &str, s: &[usize]| get(&format!("linear1.{n}"), s), device)?;
        self.linear2 = self.linear2.restore(&mut |n: &str, s: &[usize]| get(&format!("linear2.{n}"), s), device)?;
        self.norm1 = self.norm1.restore(&mut |n: &str, s: &[usize]| get(&format!("norm1.{n}"), s), device)?;
        self.norm2 = self.norm2.restore(&mut |n: &str, s: &[usize]| get(&format!("norm2.{n}"), s), device)?;
        Ok(self)
    }

    fn params(&self) -> Vec<(ParamId, String, usize)> {
        let mut out = self.self_attn.params_under("self_attn.");
        for (name, part) in [
            ("linear1", self.linear1.params()),
            ("linear2", self.linear2.params()),
            ("norm1", self.norm1.params()),
            ("norm2", self.norm2.params()),
        ] {
            out.extend(part.into_iter().map(|(id, n, r)| (id, format!("{name}.{n}"), r)));
        }
        out
    }
}
