//! `transformer heads=H ff=F [dropout=P]`: a pre-norm transformer encoder
//! block over a sequence's positions, PyTorch's
//! `nn.TransformerEncoderLayer(D, H, F, dropout=P, activation="gelu",
//! batch_first=True, norm_first=True)`:
//!
//! ```text
//! x = x + drop(attention(layernorm1(x)))       # padding's positions masked,
//!                                              # attention weights dropped
//! x = x + drop(linear2(drop(gelu(linear1(layernorm2(x))))))
//! ```
//!
//! `[L, D]` in and out. Its parts are the layers of [`super::attention`],
//! [`super::layernorm`], [`super::dense`] and [`super::dropout`]: the four
//! dropouts PyTorch's block applies in training, in its order, each mask one
//! draw of the run's stream; none at evaluation, and none drawn at all when
//! P is 0 (the default).

use burn::module::{Module, ParamId};
use burn::tensor::{Tensor, TensorData};
use burn::DispatchDevice;
use kynml_backend::Backend as Kb;
use serde_json::{json, Value as Json};

use super::attention::{self, Attention};
use super::dense::{Dense, DenseSpec};
use super::dropout::Dropout;
use super::kind::{extra_args, json_size, options, Decl, Getter, Kind, LayerModule, Pass, Shape, Tensors};
use super::layernorm::{LayerNorm, LayerNormSpec};
use super::StateError;
use crate::export::onnx::Graph;
use crate::rng::SplitMix64;
use crate::spec::ast::LayerLine;
use crate::spec::diagnostic::Diagnostic;
use crate::spec::types::Activation;

/// The arguments of a `transformer` line.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct TransformerSpec {
    /// Attention heads; the positions' width divides into them.
    pub heads: usize,
    /// The width of the feed-forward layer inside.
    pub ff: usize,
    /// The drop probability of the block's dropouts in training, in [0, 1).
    pub dropout: f64,
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
    /// The training-time dropout of the attention weights and of the
    /// feed-forward layer, and of each branch before it is added.
    pub dropout: Dropout,
}

const FORM: &str = "transformer heads=H ff=F [dropout=P]";

impl TransformerSpec {
    fn linear1(&self) -> DenseSpec {
        DenseSpec { units: self.ff, activation: Activation::Gelu }
    }

    fn linear2(&self, d: usize) -> DenseSpec {
        DenseSpec { units: d, activation: Activation::Linear }
    }
}

impl Kind for TransformerSpec {
    const NAMES: &'static [&'static str] = &["transformer"];
    const FORMS: &'static [&'static str] = &[FORM];
    type Module = Transformer<Kb>;

    fn parse(line: &LayerLine, d: &mut Vec<Diagnostic>) -> Option<Self> {
        let opts = options(line, &["heads", "ff", "dropout"], d)?;
        let heads = opts.count("heads", 1, 1, d);
        let ff = opts.count("ff", 0, 1, d);
        let dropout = opts.probability("dropout", 0.0, d);
        extra_args(line, 0, FORM, d)?;
        if !opts.has("ff") {
            // Said here, not as a shape the block cannot take.
            d.push(
                Diagnostic::new(
                    line.span,
                    "`transformer` needs `ff=F`, the width of its feed-forward layer",
                    "ff missing",
                )
                .with_help(
                    "PyTorch's `dim_feedforward`; four times the values at each position is usual: \
                         `transformer heads=4 ff=512` on 128",
                ),
            );
            return None;
        }
        Some(TransformerSpec { heads: heads?, ff: ff?, dropout: dropout? })
    }

    fn describe(&self) -> String {
        let dropout = if self.dropout > 0.0 { format!(" dropout={}", self.dropout) } else { String::new() };
        format!("transformer heads={} ff={}{dropout}", self.heads, self.ff)
    }

    fn check(&self, _t: Tensors) -> Result<(), String> {
        if !(self.dropout.is_finite() && (0.0..1.0).contains(&self.dropout)) {
            return Err(format!("transformer dropout {} is outside [0, 1)", self.dropout));
        }
        Ok(())
    }

    fn output(&self, input: &Shape) -> Result<Shape, String> {
        attention::check_heads(input, self.heads, "transformer")?;
        if self.ff == 0 {
            return Err(format!("its feed-forward width is missing: write `ff=F`, as in `ff={}`", 4 * input.dims()[1]));
        }
        Ok(input.clone())
    }

    /// Its attention, then the feed-forward pair at each position.
    fn multiply_adds(&self, input: &Shape) -> u64 {
        let (l, d) = (input.dims()[0] as u64, attention::width(input) as u64);
        attention::multiply_adds(input) + 2 * l * d * self.ff as u64
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

    fn native(&self, input: &Shape) -> Option<kynml_cpu::LayerConfig> {
        let (length, dim) = (input.dims()[0], attention::width(input));
        let (heads, ff, dropout) = (self.heads, self.ff, self.dropout);
        Some(kynml_cpu::LayerConfig::Transformer { length, dim, heads, ff, dropout })
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
            dropout: Dropout { prob: self.dropout },
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
        let f = self.linear1().reference(input, t.with(&linear1), &f);
        let f = self.linear2(d).reference(&Shape::sequence(input.dims()[0], self.ff), t.with(&linear2), &f);
        h.iter().zip(&f).map(|(h, f)| h + f).collect()
    }

    fn onnx(&self, g: &mut Graph, p: &str, input: &Shape, t: Tensors, x: String) -> String {
        let (l, d) = (input.dims()[0], attention::width(input));
        let (norm1, norm2) = (t.under("norm1."), t.under("norm2."));
        let (linear1, linear2) = (t.under("linear1."), t.under("linear2."));
        let a = LayerNormSpec.onnx(g, &format!("{p}.norm1"), input, t.with(&norm1), x.clone());
        let a = attention::onnx(g, &format!("{p}.self_attn"), input, self.heads, t, "self_attn.", a);
        let h = g.node(format!("{p}.attended"), "Add", &[&x, &a], Vec::new());
        // The linear layers map each position alike (see `dense`).
        let f = LayerNormSpec.onnx(g, &format!("{p}.norm2"), input, t.with(&norm2), h.clone());
        let f = self.linear1().onnx(g, &format!("{p}.linear1"), input, t.with(&linear1), f);
        let f = self.linear2(d).onnx(g, &format!("{p}.linear2"), &Shape::sequence(l, self.ff), t.with(&linear2), f);
        g.node(p.to_string(), "Add", &[&h, &f], Vec::new())
    }

    fn torch(&self, input: &Shape) -> Json {
        let d = attention::width(input);
        json!({
            "d_model": d,
            "nhead": self.heads,
            "dim_feedforward": self.ff,
            "module": format!(
                "nn.TransformerEncoderLayer({d}, {}, {}, dropout={}, activation='gelu', batch_first=True, \
                 norm_first=True), called with src_key_padding_mask=padding.float() * -1e9 (the sidecar's \
                 `padding` says which positions are padding; a float mask, added to the scores: a row of \
                 padding only then attends evenly where a boolean mask gives NaN; with \
                 torch.backends.mha.set_fastpath_enabled(False), as the fast path gives NaN there too)",
                self.heads, self.ff, self.dropout
            ),
            "dropout": self.dropout,
        })
    }

    fn from_json(_kind: &str, v: &Json) -> Result<Self, String> {
        let size = |k: &str| json_size(v, "transformer", k);
        let dropout = v.get("dropout").and_then(Json::as_f64).unwrap_or(0.0);
        Ok(TransformerSpec { heads: size("nhead")?, ff: size("dim_feedforward")?, dropout })
    }
}

impl LayerModule for Transformer<Kb> {
    fn forward(&self, x: Tensor<Kb, 2>, pass: &mut Pass) -> Tensor<Kb, 2> {
        let [batch, size] = x.dims();
        let d = self.norm1.gamma.dims()[0];
        let l = size / d;
        let a = self.norm1.forward(x.clone(), pass).reshape([batch, l, d]);
        let a = self.self_attn.attend(a, pass, &self.dropout).reshape([batch, size]);
        let h = x + self.dropout.apply(a, pass.rng());
        // The linear layers map each position alike (see `dense`).
        let f = self.norm2.forward(h.clone(), pass);
        let f = self.dropout.apply(self.linear1.forward(f, pass), pass.rng());
        let f = self.linear2.forward(f, pass);
        h + self.dropout.apply(f, pass.rng())
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Mode;

    /// A block over `[2 texts, 4 positions, 4 values]` and its input, from `seed`.
    fn make(dropout: f64, seed: u64) -> (Transformer<Kb>, Tensor<Kb, 2>) {
        let device = kynml_backend::Device::cpu().inner();
        let spec = TransformerSpec { heads: 2, ff: 8, dropout };
        let block = spec.init(&Shape::sequence(4, 4), &mut SplitMix64::new(seed), &device);
        let mut rng = SplitMix64::new(seed ^ 1);
        let x: Vec<f32> = (0..32).map(|_| rng.next_u64() as f32 / u64::MAX as f32 - 0.5).collect();
        (block, Tensor::from_data(TensorData::new(x, [2, 16]), &device))
    }

    fn run(block: &Transformer<Kb>, x: Tensor<Kb, 2>, rng: Option<&mut SplitMix64>) -> Vec<f32> {
        let mut mode = match rng {
            Some(rng) => Mode::Train(rng),
            None => Mode::Eval,
        };
        let mut pass = Pass { mode: &mut mode, half: None, mask: None };
        block.forward(x, &mut pass).into_data().to_vec().unwrap()
    }

    #[test]
    fn without_dropout_training_is_evaluation_and_draws_nothing() {
        let (block, x) = make(0.0, 3);
        let mut rng = SplitMix64::new(7);
        assert_eq!(run(&block, x.clone(), Some(&mut rng)), run(&block, x, None));
        assert_eq!(rng, SplitMix64::new(7));
    }

    #[test]
    fn dropout_draws_pytorchs_four_masks_and_drops_only_the_branches() {
        let (block, x) = make(0.3, 4);
        let eval = run(&block, x.clone(), None);
        let mut rng = SplitMix64::new(7);
        let train = run(&block, x.clone(), Some(&mut rng));
        let mut four = SplitMix64::new(7);
        (0..4).for_each(|_| {
            four.next_u64();
        });
        assert_eq!(rng, four, "attention weights, the attention branch, the hidden values, the feed-forward branch");
        assert_ne!(train, eval);
        assert_eq!(train, run(&block, x.clone(), Some(&mut SplitMix64::new(7))), "the masks are the stream's");
        // Nearly every value dropped: both branches vanish and the block
        // passes its input through, the residual path never dropped.
        let (all_dropped, x) = make(0.999_999_9, 4);
        let input: Vec<f32> = x.clone().into_data().to_vec().unwrap();
        assert_eq!(run(&all_dropped, x, Some(&mut SplitMix64::new(7))), input);
    }
}
