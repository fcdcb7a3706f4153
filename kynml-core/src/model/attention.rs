//! `attention heads=H`: multi-head self-attention over a text's positions
//! (PyTorch's `nn.MultiheadAttention(D, H, batch_first=True)` called as
//! `attn(x, x, x, key_padding_mask=padding)`): each position looks at every
//! position that is not padding. `[L, D]` in, `[L, D]` out; D must divide
//! into H heads.
//!
//! The pieces here (the module, its host reference and its ONNX nodes) are
//! also the attention of `transformer`.

use burn::module::{Module, Param, ParamId};
use burn::tensor::activation::softmax;
use burn::tensor::backend::Backend;
use burn::tensor::{FloatDType, Tensor, TensorData};
use burn::DispatchDevice;
use kynml_backend::Backend as Kb;
use serde_json::{json, Value as Json};

use super::dense::transpose;
use super::dropout::Dropout;
use super::kind::{
    extra_args, host, json_size, options, restore_param, Decl, Getter, Kind, LayerModule, Pass, Shape, Tensors,
};
use super::StateError;
use crate::export::onnx::{Attr, Graph};
use crate::rng::SplitMix64;
use crate::spec::ast::LayerLine;
use crate::spec::diagnostic::Diagnostic;

/// The arguments of an `attention` line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct AttentionSpec {
    /// Heads; the positions' width divides into them.
    pub heads: usize,
}

/// Self-attention's projections, kept as products take them (`[in, out]`,
/// PyTorch's `[out, in]` transposed).
#[derive(Module, Debug)]
pub struct Attention<B: Backend> {
    /// Queries, keys and values side by side: `[D, 3D]` (PyTorch's `in_proj_weight`, transposed).
    pub in_weight: Param<Tensor<B, 2>>,
    /// `[3D]` (`in_proj_bias`).
    pub in_bias: Param<Tensor<B, 1>>,
    /// `[D, D]` (`out_proj.weight`, transposed).
    pub out_weight: Param<Tensor<B, 2>>,
    /// `[D]` (`out_proj.bias`).
    pub out_bias: Param<Tensor<B, 1>>,
    /// Heads.
    #[module(skip)]
    pub heads: usize,
}

/// Added to the scores of padding's positions: their softmax weight is 0.
const MASKED: f32 = -1e9;

/// The tensor names, in PyTorch's state-dict order.
pub const NAMES: [&str; 4] = ["in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"];

impl Kind for AttentionSpec {
    const NAMES: &'static [&'static str] = &["attention"];
    const FORMS: &'static [&'static str] = &["attention heads=H"];
    type Module = Attention<Kb>;

    fn parse(line: &LayerLine, d: &mut Vec<Diagnostic>) -> Option<Self> {
        let opts = options(line, &["heads"], d)?;
        let heads = opts.count("heads", 1, 1, d);
        extra_args(line, 0, "attention heads=H", d)?;
        Some(AttentionSpec { heads: heads? })
    }

    fn describe(&self) -> String {
        format!("attention heads={}", self.heads)
    }

    fn output(&self, input: &Shape) -> Result<Shape, String> {
        check_heads(input, self.heads, "attention")?;
        Ok(input.clone())
    }

    fn multiply_adds(&self, input: &Shape) -> u64 {
        multiply_adds(input)
    }

    fn tensors(&self, input: &Shape) -> Vec<Decl> {
        decls(width(input), "")
    }

    fn native(&self, input: &Shape) -> Option<kynml_cpu::LayerConfig> {
        let (length, dim) = (input.dims()[0], width(input));
        Some(kynml_cpu::LayerConfig::Attention { length, dim, heads: self.heads })
    }

    fn init(&self, input: &Shape, rng: &mut SplitMix64, device: &DispatchDevice) -> Attention<Kb> {
        init(width(input), self.heads, rng, device)
    }

    fn burn_to_torch(&self, name: &str, data: TensorData, torch_shape: &[usize]) -> Vec<f32> {
        to_torch(name, data, torch_shape)
    }

    fn torch_to_burn(&self, name: &str, values: &[f32], burn_shape: &[usize]) -> TensorData {
        to_burn(name, values, burn_shape)
    }

    fn reference(&self, input: &Shape, t: Tensors, x: &[f32]) -> Vec<f32> {
        reference(input, self.heads, t, "", x)
    }

    fn onnx(&self, g: &mut Graph, p: &str, input: &Shape, t: Tensors, x: String) -> String {
        onnx(g, p, input, self.heads, t, "", x)
    }

    fn torch(&self, input: &Shape) -> Json {
        let d = width(input);
        json!({
            "embed_dim": d,
            "num_heads": self.heads,
            "module": format!(
                "nn.MultiheadAttention({d}, {}, batch_first=True) as self-attention: \
                 attn(x, x, x, key_padding_mask=padding.float() * -1e9, need_weights=False)[0] (the \
                 sidecar's `padding` says which positions are padding; a float mask, added to the scores: \
                 a row of padding only then attends evenly where a boolean mask gives NaN; with \
                 torch.backends.mha.set_fastpath_enabled(False), as the fast path gives NaN there too)",
                self.heads
            ),
        })
    }

    fn from_json(_kind: &str, v: &Json) -> Result<Self, String> {
        let heads = json_size(v, "attention", "num_heads")?;
        Ok(AttentionSpec { heads })
    }
}

/// D, the width of each position.
/// Self-attention's multiply-adds over a text of `L` positions of width
/// `D`: the query, key, value and output projections at each position
/// (`4 L D²`), then each head's scores and weighted sums over every pair of
/// positions (`2 L² D` over all heads), padding included.
pub(crate) fn multiply_adds(input: &Shape) -> u64 {
    let (l, d) = (input.dims()[0] as u64, width(input) as u64);
    4 * l * d * d + 2 * l * l * d
}

pub(crate) fn width(input: &Shape) -> usize {
    input.dims().get(1).copied().unwrap_or(0)
}

/// That `input` is a text's positions whose width divides into `heads`.
pub(crate) fn check_heads(input: &Shape, heads: usize, what: &str) -> Result<(), String> {
    if !input.is_sequence() {
        return Err(format!("`{what}` relates the positions of a text; its input is `input seq L` then `embedding D`"));
    }
    let d = width(input);
    if heads == 0 || !d.is_multiple_of(heads) {
        return Err(format!("its {heads} heads do not divide the {d} values of each position; use a divisor of {d}"));
    }
    Ok(())
}

/// The tensors of an attention of width `d`, each name after `prefix`.
pub(crate) fn decls(d: usize, prefix: &str) -> Vec<Decl> {
    let shapes = [vec![3 * d, d], vec![3 * d], vec![d, d], vec![d]];
    NAMES.iter().zip(shapes).map(|(n, s)| Decl::param(format!("{prefix}{n}"), s)).collect()
}

/// PyTorch's initialisation: the input projections Xavier-uniform, the
/// output projection as `nn.Linear`'s weight, the biases zeros.
pub(crate) fn init(d: usize, heads: usize, rng: &mut SplitMix64, device: &DispatchDevice) -> Attention<Kb> {
    let xavier = (6.0 / (d + 3 * d) as f64).sqrt();
    // Drawn in PyTorch's `[out, in]` order, stored transposed.
    let w_in: Vec<f32> = (0..3 * d * d).map(|_| rng.uniform(-xavier, xavier) as f32).collect();
    let k = 1.0 / (d as f64).sqrt();
    let w_out: Vec<f32> = (0..d * d).map(|_| rng.uniform(-k, k) as f32).collect();
    let param2 = |v: Vec<f32>, rows: usize, cols: usize| {
        Param::from_data(TensorData::new(transpose(&v, rows, cols), [cols, rows]), device)
    };
    Attention {
        in_weight: param2(w_in, 3 * d, d),
        in_bias: Param::from_data(TensorData::new(vec![0.0f32; 3 * d], [3 * d]), device),
        out_weight: param2(w_out, d, d),
        out_bias: Param::from_data(TensorData::new(vec![0.0f32; d], [d]), device),
        heads,
    }
}

/// A weight in PyTorch's layout (the two matrices transposed back).
pub(crate) fn to_torch(name: &str, data: TensorData, torch_shape: &[usize]) -> Vec<f32> {
    let values = host(data);
    match (name.rsplit('.').next(), torch_shape) {
        (Some("in_proj_weight" | "weight"), &[rows, cols]) => transpose(&values, cols, rows),
        _ => values,
    }
}

/// A weight in Burn's layout.
pub(crate) fn to_burn(name: &str, values: &[f32], burn_shape: &[usize]) -> TensorData {
    match (name.rsplit('.').next(), burn_shape) {
        (Some("in_proj_weight" | "weight"), &[rows, cols]) => {
            TensorData::new(transpose(values, cols, rows), [rows, cols])
        }
        _ => TensorData::new(values.to_vec(), burn_shape.to_vec()),
    }
}

/// The host reference: rows of `[L, D]` in, out; tensors named `prefix` + [`NAMES`].
pub(crate) fn reference(input: &Shape, heads: usize, t: Tensors, prefix: &str, x: &[f32]) -> Vec<f32> {
    let (l, d) = (input.dims()[0], width(input));
    let dh = d / heads;
    let get = |n: &str| t.f32(&format!("{prefix}{n}")).to_vec();
    let (w_in, b_in, w_out, b_out) = (get(NAMES[0]), get(NAMES[1]), get(NAMES[2]), get(NAMES[3]));
    // y = x W^T + b, W row-major `[out, in]`.
    let linear = |x: &[f64], w: &[f32], b: &[f32], out: usize| -> Vec<f64> {
        (0..out)
            .map(|o| f64::from(b[o]) + x.iter().zip(&w[o * x.len()..]).map(|(a, w)| a * f64::from(*w)).sum::<f64>())
            .collect()
    };
    let mut y = Vec::with_capacity(x.len());
    for (r, row) in x.chunks_exact(l * d).enumerate() {
        let qkv: Vec<Vec<f64>> = (0..l)
            .map(|i| {
                linear(&row[i * d..(i + 1) * d].iter().map(|v| f64::from(*v)).collect::<Vec<_>>(), &w_in, &b_in, 3 * d)
            })
            .collect();
        let keep = |j: usize| t.mask.is_none_or(|m| m[r * l + j] != 0.0);
        let mut mixed = vec![vec![0.0f64; d]; l];
        for h in 0..heads {
            let at = |v: &Vec<f64>, part: usize| v[part * d + h * dh..part * d + (h + 1) * dh].to_vec();
            for i in 0..l {
                let q = at(&qkv[i], 0);
                let scores: Vec<f64> = (0..l)
                    .map(|j| {
                        let s = q.iter().zip(at(&qkv[j], 1)).map(|(a, b)| a * b).sum::<f64>() / (dh as f64).sqrt();
                        if keep(j) {
                            s
                        } else {
                            s + f64::from(MASKED)
                        }
                    })
                    .collect();
                let top = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = scores.iter().map(|s| (s - top).exp()).collect();
                let sum: f64 = e.iter().sum();
                for (j, w) in e.iter().enumerate() {
                    for (k, v) in at(&qkv[j], 2).iter().enumerate() {
                        mixed[i][h * dh + k] += w / sum * v;
                    }
                }
            }
        }
        for m in &mixed {
            // Each value rounded to f32 between the two products, as the device keeps them.
            let m: Vec<f64> = m.iter().map(|v| f64::from(*v as f32)).collect();
            y.extend(linear(&m, &w_out, &b_out, d).into_iter().map(|v| v as f32));
        }
    }
    y
}

/// Its ONNX nodes after `x` (`[batch, L * D]`); tensors named `prefix` + [`NAMES`].
pub(crate) fn onnx(g: &mut Graph, p: &str, input: &Shape, heads: usize, t: Tensors, prefix: &str, x: String) -> String {
    let (l, d) = (input.dims()[0], width(input));
    let dh = d / heads;
    let x = g.reshape(p, x, input);
    let w_in = t.f32(&format!("{prefix}{}", NAMES[0]));
    let b_in = t.f32(&format!("{prefix}{}", NAMES[1]));
    let split = g.ints(format!("{p}.heads"), vec![4], vec![0, 0, heads as i64, dh as i64]);
    let mut parts = Vec::new();
    for (i, part) in ["q", "k", "v"].iter().enumerate() {
        // W^T of this part: `[D, D]`.
        let w: Vec<f32> = transpose(&w_in[i * d * d..(i + 1) * d * d], d, d);
        let w = g.constant(format!("{p}.{part}.weight"), vec![d, d], w);
        let b = g.constant(format!("{p}.{part}.bias"), vec![d], b_in[i * d..(i + 1) * d].to_vec());
        let y = g.node(format!("{p}.{part}.product"), "MatMul", &[&x, &w], Vec::new());
        let y = g.node(format!("{p}.{part}.biased"), "Add", &[&y, &b], Vec::new());
        let y = g.node(format!("{p}.{part}.split"), "Reshape", &[&y, &split], Vec::new());
        // q and v as [B, H, L, dh]; k as [B, H, dh, L].
        let perm = if *part == "k" { vec![0, 2, 3, 1] } else { vec![0, 2, 1, 3] };
        parts.push(g.node(format!("{p}.{part}"), "Transpose", &[&y], vec![Attr::Ints("perm", perm)]));
    }
    let scores = g.node(format!("{p}.scores"), "MatMul", &[&parts[0], &parts[1]], Vec::new());
    let scale = g.constant(format!("{p}.scale"), Vec::new(), vec![1.0 / (dh as f32).sqrt()]);
    let mut scores = g.node(format!("{p}.scaled"), "Mul", &[&scores, &scale], Vec::new());
    if let Some(mask) = g.mask.clone() {
        // (mask - 1) * 1e9 on padding's keys: [B, 1, 1, L].
        let one = g.scalar("one", 1.0);
        let big = g.constant(format!("{p}.masked"), Vec::new(), vec![-MASKED]);
        let off = g.node(format!("{p}.mask.off"), "Sub", &[&mask, &one], Vec::new());
        let off = g.node(format!("{p}.mask.big"), "Mul", &[&off, &big], Vec::new());
        let axes = g.ints(format!("{p}.mask.axes"), vec![2], vec![1, 2]);
        let off = g.node(format!("{p}.mask.keys"), "Unsqueeze", &[&off, &axes], Vec::new());
        scores = g.node(format!("{p}.masked_scores"), "Add", &[&scores, &off], Vec::new());
    }
    let weights = g.node(format!("{p}.weights"), "Softmax", &[&scores], vec![Attr::Int("axis", -1)]);
    let mixed = g.node(format!("{p}.mixed"), "MatMul", &[&weights, &parts[2]], Vec::new());
    let mixed = g.node(format!("{p}.merged"), "Transpose", &[&mixed], vec![Attr::Ints("perm", vec![0, 2, 1, 3])]);
    let joined = g.ints(format!("{p}.joined"), vec![3], vec![0, l as i64, d as i64]);
    let mixed = g.node(format!("{p}.rejoined"), "Reshape", &[&mixed, &joined], Vec::new());
    let w_out = transpose(t.f32(&format!("{prefix}{}", NAMES[2])), d, d);
    let w = g.constant(format!("{p}.out.weight"), vec![d, d], w_out);
    let b = g.constant(format!("{p}.out.bias"), vec![d], t.f32(&format!("{prefix}{}", NAMES[3])).to_vec());
    let y = g.node(format!("{p}.out.product"), "MatMul", &[&mixed, &w], Vec::new());
    let y = g.node(format!("{p}.out"), "Add", &[&y, &b], Vec::new());
    g.flatten(p, y)
}

impl Attention<Kb> {
    /// `x: [batch, L, D]` → `[batch, L, D]`, reading the pass's padding
    /// mask (`[batch, L]`, 1 token, 0 padding) and mixed precision; in
    /// training, `dropout` drops attention weights as PyTorch's
    /// `nn.MultiheadAttention(dropout=P)` does.
    pub(crate) fn attend(&self, x: Tensor<Kb, 3>, pass: &mut Pass, dropout: &Dropout) -> Tensor<Kb, 3> {
        let (mask, half) = (pass.mask.clone(), pass.half);
        let [b, l, d] = x.dims();
        let (h, dh) = (self.heads, d / self.heads);
        let product = |a: Tensor<Kb, 3>, w: Tensor<Kb, 2>| match half {
            None => a.matmul(w.unsqueeze::<3>()),
            Some(t) => a.cast(t).matmul(w.cast(t).unsqueeze::<3>()).cast(FloatDType::F32),
        };
        let qkv = product(x, self.in_weight.val()) + self.in_bias.val().unsqueeze::<3>();
        let part =
            |i: usize| qkv.clone().slice([0..b, 0..l, i * d..(i + 1) * d]).reshape([b, l, h, dh]).swap_dims(1, 2);
        let (q, k, v) = (part(0), part(1), part(2));
        let mul = |a: Tensor<Kb, 4>, c: Tensor<Kb, 4>| match half {
            None => a.matmul(c),
            Some(t) => a.cast(t).matmul(c.cast(t)).cast(FloatDType::F32),
        };
        // Heads of one value each (`heads` = the width): both products are
        // outer ones, taken as broadcast multiplications. CubeCL's products
        // of a dimension of 1 from these swapped views gave wrong numbers
        // on wgpu (outputs 0.07-0.24 off the CPU's, silently).
        let single = dh == 1;
        // Scaled before the product, which in fp16 could otherwise overflow.
        let q = q / (dh as f64).sqrt();
        let mut scores = if single { q * k.swap_dims(2, 3) } else { mul(q, k.swap_dims(2, 3)) };
        if let Some(mask) = mask {
            scores = scores + (mask - 1.0).mul_scalar(-MASKED).reshape([b, 1, 1, l]);
        }
        let weights = dropout.apply(softmax(scores, 3).reshape([b * h * l, l]), pass.rng()).reshape([b, h, l, l]);
        let mixed = if single { (weights * v.swap_dims(2, 3)).sum_dim(3) } else { mul(weights, v) };
        let mixed = mixed.swap_dims(1, 2).reshape([b, l, d]);
        product(mixed, self.out_weight.val()) + self.out_bias.val().unsqueeze::<3>()
    }

    /// Its tensors by PyTorch's names after `prefix`, in Burn's layout.
    pub(crate) fn state_under(&self, prefix: &str) -> Vec<(String, TensorData)> {
        let t = [
            self.in_weight.val().into_data(),
            self.in_bias.val().into_data(),
            self.out_weight.val().into_data(),
            self.out_bias.val().into_data(),
        ];
        NAMES.iter().zip(t).map(|(n, t)| (format!("{prefix}{n}"), t)).collect()
    }

    /// With every tensor replaced by `get`'s (names after `prefix`).
    pub(crate) fn restore_under(
        mut self,
        prefix: &str,
        get: &mut Getter,
        device: &DispatchDevice,
    ) -> Result<Self, StateError> {
        let n = |i: usize| format!("{prefix}{}", NAMES[i]);
        self.in_weight = restore_param(self.in_weight, &n(0), get, device)?;
        self.in_bias = restore_param(self.in_bias, &n(1), get, device)?;
        self.out_weight = restore_param(self.out_weight, &n(2), get, device)?;
        self.out_bias = restore_param(self.out_bias, &n(3), get, device)?;
        Ok(self)
    }

    /// Its parameters' ids, names after `prefix`, and ranks.
    pub(crate) fn params_under(&self, prefix: &str) -> Vec<(ParamId, String, usize)> {
        let ids = [(self.in_weight.id, 2), (self.in_bias.id, 1), (self.out_weight.id, 2), (self.out_bias.id, 1)];
        NAMES.iter().zip(ids).map(|(n, (id, rank))| (id, format!("{prefix}{n}"), rank)).collect()
    }
}

impl LayerModule for Attention<Kb> {
    fn forward(&self, x: Tensor<Kb, 2>, pass: &mut Pass) -> Tensor<Kb, 2> {
        let [batch, size] = x.dims();
        let d = self.out_bias.dims()[0];
        let y = self.attend(x.reshape([batch, size / d, d]), pass, &Dropout { prob: 0.0 });
        y.reshape([batch, size])
    }

    fn state(&self) -> Vec<(String, TensorData)> {
        self.state_under("")
    }

    fn restore(self, get: &mut Getter, device: &DispatchDevice) -> Result<Self, StateError> {
        self.restore_under("", get, device)
    }

    fn params(&self) -> Vec<(ParamId, String, usize)> {
        self.params_under("")
    }
}
