//! `dense N ACTIVATION`: a fully connected layer followed by its activation
//! (PyTorch's `nn.Linear`, then the activation). On a sequence's positions
//! (`[L, D]`) it maps each position alike, `[L, D]` to `[L, N]`, as
//! `nn.Linear` maps the last dimension.

use burn::module::{Module, Param, ParamId};
use burn::tensor::activation;
use burn::tensor::backend::Backend;
use burn::tensor::{FloatDType, Tensor, TensorData};
use burn::DispatchDevice;
use kynml_backend::Backend as Kb;
use serde_json::{json, Value as Json};

use super::kind::{
    activation_arg, activation_names, count_arg, extra_args, host, json_size, missing, restore_param, Decl, Getter,
    Kind, LayerModule, Pass, Shape, Tensors,
};
use super::StateError;
use crate::export::onnx::{activate, Attr, Graph};
use crate::rng::SplitMix64;
use crate::spec::ast::LayerLine;
use crate::spec::diagnostic::Diagnostic;
use crate::spec::types::Activation;

/// A `dense` line's arguments written the other way round, an activation's
/// name then a number: the two, as written.
fn swapped(first: &crate::spec::ast::Value, second: &crate::spec::ast::Value) -> Option<(String, String)> {
    use crate::spec::ast::ValueKind;
    match (&first.kind, &second.kind) {
        (ValueKind::Ident(name), ValueKind::Number(units))
            if crate::spec::layers::activation_names().contains(&name.as_str()) =>
        {
            Some((name.clone(), units.clone()))
        }
        _ => None,
    }
}

/// How a dense product meets what follows it (the cast back from bf16 or
/// fp16, the bias, the activation) on Burn's fusing GPU backends, chosen by
/// `KYNML_MATMUL_EPILOGUE` (docs/dev/gpu-session.md).
///
/// `Separate`, the default: a rank change right after the product (`[m, n]`
/// to `[1, m, n]` and back) closes the matmul fuser with nothing fused, so
/// the product runs alone on the plain matmul autotune (TMA kernels
/// included), and what follows runs as one element-wise kernel after it:
/// one more pass over the product. The default since Burn 0.21's fused
/// matmul was found to give wrong products on lavapipe for a one-unit
/// layer after an odd width (`input 3` then `dense 1`: a negative mse).
///
/// `Fused` (`KYNML_MATMUL_EPILOGUE=fused`, an experiment of the GPU bench):
/// Burn's fusion runs the product and what follows in one kernel, from
/// CubeCL's fused-matmul autotune. That autotune never tries the plain
/// matmul kernels for a large product (its fallback sits in a
/// lower-priority group than the fused candidates, and the tuner stops at
/// the first group that runs), and none of its candidates uses Hopper's TMA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Epilogue {
    /// `fused`.
    Fused,
    /// Unset, or `separate`.
    Separate,
    /// Another value: runs as `Separate`, and "what runs" says so.
    Unknown(String),
}

impl Epilogue {
    /// What runs: `fused` or `separate`.
    pub fn name(&self) -> &'static str {
        match self {
            Epilogue::Fused => "fused",
            Epilogue::Separate | Epilogue::Unknown(_) => "separate",
        }
    }
}

/// `KYNML_MATMUL_EPILOGUE`, read once per process.
pub fn epilogue() -> &'static Epilogue {
    static CHOICE: std::sync::OnceLock<Epilogue> = std::sync::OnceLock::new();
    CHOICE.get_or_init(|| match std::env::var("KYNML_MATMUL_EPILOGUE").as_deref() {
        Err(_) | Ok("separate") => Epilogue::Separate,
        Ok("fused") => Epilogue::Fused,
        Ok(other) => Epilogue::Unknown(other.to_string()),
    })
}

/// The arguments of a `dense` line.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct DenseSpec {
    /// Output width N; at least 1.
    pub units: usize,
    /// Applied to the layer's output; `Linear` for none.
    pub activation: Activation,
}

/// `y = act(x W + b)` with `W` stored `[d_in, d_out]`.
#[derive(Module, Debug)]
pub struct Dense<B: Backend> {
    /// The weight matrix, `[d_in, d_out]`: PyTorch's `[out, in]` transposed.
    pub weight: Param<Tensor<B, 2>>,
    /// The bias, `[d_out]`.
    pub bias: Param<Tensor<B, 1>>,
    /// Applied after the affine map; not a parameter.
    #[module(skip)]
    pub activation: Activation,
}

const FORM: &str = "dense N ACTIVATION";

impl Kind for DenseSpec {
    const NAMES: &'static [&'static str] = &["dense"];
    const FORMS: &'static [&'static str] = &[FORM];
    type Module = Dense<Kb>;

    fn parse(line: &LayerLine, d: &mut Vec<Diagnostic>) -> Option<Self> {
        super::kind::options(line, &[], d)?;
        let (units, activation) = match line.args.as_slice() {
            [] => {
                missing(line, "units", "a number of units", "dense N ACTIVATION`, as in `dense 64 relu", d);
                return None;
            }
            [units] => {
                let units = count_arg(units, "the units of `dense`", 1, d)?;
                let names = activation_names();
                d.push(
                    Diagnostic::new(
                        line.span,
                        format!("missing activation in `dense {units}`"),
                        "expected an activation",
                    )
                    .with_help(format!(
                        "write `dense {units} linear` for no activation, or use {}",
                        crate::spec::suggest::one_of(&names[1..])
                    )),
                );
                return None;
            }
            // `dense gelu 16`: the two the other way round, said once.
            [first, second] if swapped(first, second).is_some() => {
                let (activation, units) = swapped(first, second).unwrap_or_default();
                d.push(
                    Diagnostic::new(
                        line.span,
                        "the units of `dense` come before its activation",
                        "the other way round",
                    )
                    .with_help(format!("write `dense {units} {activation}`")),
                );
                return None;
            }
            [units, activation, ..] => (units, activation),
        };
        let units = count_arg(units, "the units of `dense`", 1, d);
        let activation = activation_arg(activation, d);
        extra_args(line, 2, FORM, d)?;
        Some(DenseSpec { units: units?, activation: activation? })
    }

    fn describe(&self) -> String {
        format!("dense {} {}", self.units, activation_written(self.activation))
    }

    fn fingerprint(&self) -> String {
        format!("dense {} {:?}", self.units, self.activation).to_lowercase()
    }

    fn output(&self, input: &Shape) -> Result<Shape, String> {
        match input.dims() {
            [_] => Ok(Shape::flat(self.units)),
            [l, _] if input.is_sequence() => Ok(Shape::sequence(*l, self.units)),
            _ => Err(format!(
                "`dense` takes plain features; add `flatten` before it to turn the {} values into {} features",
                input.written(),
                input.size()
            )),
        }
    }

    /// Its weight, once at each position (one for plain features).
    fn multiply_adds(&self, input: &Shape) -> u64 {
        let positions = if input.is_sequence() { input.dims()[0] } else { 1 };
        (positions * self.units * d_in(input)) as u64
    }

    fn tensors(&self, input: &Shape) -> Vec<Decl> {
        vec![Decl::param("weight", vec![self.units, d_in(input)]), Decl::param("bias", vec![self.units])]
    }

    /// On plain features, or at each position of a sequence.
    fn native(&self, input: &Shape) -> Option<kynml_cpu::LayerConfig> {
        let positions = match input.layout() {
            super::Layout::Values if input.rank() == 1 => 1,
            super::Layout::Sequence => input.dims()[0],
            _ => return None,
        };
        let act = native_act(self.activation);
        Some(kynml_cpu::LayerConfig::Dense { units: self.units, act, positions })
    }

    /// PyTorch's `nn.Linear` initialisation: weight and bias both drawn from
    /// `U(-k, k)` with `k = 1/sqrt(d_in)` (Kaiming-uniform with `a = sqrt(5)`).
    fn init(&self, input: &Shape, rng: &mut SplitMix64, device: &DispatchDevice) -> Dense<Kb> {
        let (d_in, d_out) = (d_in(input), self.units);
        let k = 1.0 / (d_in as f64).sqrt();
        let weight: Vec<f32> = (0..d_in * d_out).map(|_| rng.uniform(-k, k) as f32).collect();
        let bias: Vec<f32> = (0..d_out).map(|_| rng.uniform(-k, k) as f32).collect();
        Dense {
            weight: Param::from_data(TensorData::new(weight, [d_in, d_out]), device),
            bias: Param::from_data(TensorData::new(bias, [d_out]), device),
            activation: self.activation,
        }
    }

    fn burn_to_torch(&self, name: &str, data: TensorData, torch_shape: &[usize]) -> Vec<f32> {
        let values = host(data);
        match (name, torch_shape) {
            ("weight", &[output, input]) => transpose(&values, input, output),
            _ => values,
        }
    }

    fn torch_to_burn(&self, name: &str, values: &[f32], burn_shape: &[usize]) -> TensorData {
        match (name, burn_shape) {
            ("weight", &[input, output]) => TensorData::new(transpose(values, output, input), [input, output]),
            _ => TensorData::new(values.to_vec(), burn_shape.to_vec()),
        }
    }

    fn check(&self, _t: Tensors) -> Result<(), String> {
        check_activation(self.activation)
    }

    fn reference(&self, input: &Shape, t: Tensors, x: &[f32]) -> Vec<f32> {
        let (weight, bias, d_in) = (t.f32("weight"), t.f32("bias"), d_in(input));
        let mut y = Vec::with_capacity(x.len() / d_in.max(1) * self.units);
        for row in x.chunks_exact(d_in) {
            for (w_row, b) in weight.chunks_exact(d_in).zip(bias) {
                let dot: f64 = row.iter().zip(w_row).map(|(a, w)| f64::from(*a) * f64::from(*w)).sum();
                y.push(self.activation.apply((dot + f64::from(*b)) as f32));
            }
        }
        y
    }

    /// `Gemm` (transB = 1, the weight kept in PyTorch's `[out, in]` layout), then the activation;
    /// on a sequence, over its positions as rows.
    fn onnx(&self, g: &mut Graph, p: &str, input: &Shape, t: Tensors, x: String) -> String {
        let d = d_in(input);
        let w = g.constant(format!("{p}.weight"), vec![self.units, d], t.f32("weight").to_vec());
        let b = g.constant(format!("{p}.bias"), vec![self.units], t.f32("bias").to_vec());
        let x = match input.is_sequence() {
            true => {
                let rows = g.ints(format!("{p}.rows_shape"), vec![2], vec![-1, d as i64]);
                g.node(format!("{p}.rows"), "Reshape", &[&x, &rows], Vec::new())
            }
            false => x,
        };
        let y = g.node(format!("{p}.gemm"), "Gemm", &[&x, &w, &b], vec![Attr::Int("transB", 1)]);
        let y = activate(g, p, y, self.activation);
        match input.is_sequence() {
            true => {
                let back = g.ints(format!("{p}.back_shape"), vec![2], vec![-1, (input.dims()[0] * self.units) as i64]);
                g.node(format!("{p}.positions"), "Reshape", &[&y, &back], Vec::new())
            }
            false => y,
        }
    }

    fn torch(&self, input: &Shape) -> Json {
        let fields = json!({"in_features": d_in(input), "out_features": self.units});
        with_activation(fields, format!("nn.Linear({}, {})", d_in(input), self.units), self.activation)
    }

    fn from_json(_kind: &str, v: &Json) -> Result<Self, String> {
        let units = json_size(v, "dense", "out_features")?;
        let activation = activation_from_json(v)?;
        Ok(DenseSpec { units, activation })
    }
}

impl LayerModule for Dense<Kb> {
    /// The matrix product runs in `half` when given (inputs and weights cast
    /// down, the product cast back to fp32; autodiff carries the gradient
    /// back through both casts to the fp32 weight). Bias and activation stay
    /// fp32. See [`crate::train::precision`].
    fn forward(&self, x: Tensor<Kb, 2>, pass: &mut Pass) -> Tensor<Kb, 2> {
        let [batch, width] = x.dims();
        let [d, units] = self.weight.dims();
        // A sequence's positions are rows of their own.
        let x = if width == d { x } else { x.reshape([batch * (width / d), d]) };
        let alone = |p: Tensor<Kb, 2>| match epilogue() {
            Epilogue::Separate | Epilogue::Unknown(_) => {
                let [m, n] = p.dims();
                p.unsqueeze::<3>().reshape([m, n])
            }
            Epilogue::Fused => p,
        };
        let product = match pass.half {
            None => alone(x.matmul(self.weight.val())),
            Some(h) => alone(x.cast(h).matmul(self.weight.val().cast(h))).cast(FloatDType::F32),
        };
        let y = apply_activation(product + self.bias.val().unsqueeze::<2>(), self.activation, pass);
        if width == d {
            y
        } else {
            y.reshape([batch, (width / d) * units])
        }
    }

    fn state(&self) -> Vec<(String, TensorData)> {
        vec![("weight".into(), self.weight.val().into_data()), ("bias".into(), self.bias.val().into_data())]
    }

    fn restore(mut self, get: &mut Getter, device: &DispatchDevice) -> Result<Self, StateError> {
        self.weight = restore_param(self.weight, "weight", get, device)?;
        self.bias = restore_param(self.bias, "bias", get, device)?;
        Ok(self)
    }

    fn params(&self) -> Vec<(ParamId, String, usize)> {
        vec![(self.weight.id, "weight".into(), 2), (self.bias.id, "bias".into(), 1)]
    }
}

/// The width each row of the product has: a position's values on a
/// sequence, else every value.
fn d_in(input: &Shape) -> usize {
    if input.is_sequence() {
        input.dims()[1]
    } else {
        input.size()
    }
}

/// `values`, row-major `[rows, cols]`, as `[cols, rows]` (shared with the attention's projections).
pub(crate) fn transpose(values: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    (0..cols).flat_map(|c| (0..rows).map(move |r| values[r * cols + c])).collect()
}

/// Applies `act` on the device (shared with the convolutions).
///
/// Outside training a NaN stays NaN through relu, as in PyTorch and ONNX:
/// Burn's CPU relu (`max(x, 0)`) makes it 0, which hid an overflow earlier
/// in the model (attention's scores past f32) from `predict`'s check of its
/// outputs, and gave such a row another row's prediction. Training keeps
/// Burn's relu, whose gradient the native engine matches.
pub fn apply_activation(x: Tensor<Kb, 2>, act: Activation, pass: &Pass) -> Tensor<Kb, 2> {
    match act {
        Activation::Linear => x,
        Activation::Relu if pass.training() => activation::relu(x),
        // Burn's own relu on the GPU backends (what fusion fuses); on the
        // CPU backend, where Burn's is `max(x, 0)`, it keeps a NaN.
        Activation::Relu => x.clone().mask_fill(x.lower_equal_elem(0.0), 0.0),
        // Written out, not Burn's `gelu`: its backward on the GPU backends
        // (Burn 0.21's default `gelu_backward`) is the derivative of the
        // tanh approximation, up to 9e-4 from the exact one PyTorch's
        // `nn.GELU()` takes; composed of erf, autodiff takes the exact one.
        Activation::Gelu => {
            let phi = x.clone().mul_scalar(std::f64::consts::FRAC_1_SQRT_2).erf().add_scalar(1.0).mul_scalar(0.5);
            x * phi
        }
        Activation::Tanh => activation::tanh(x),
        Activation::Sigmoid => activation::sigmoid(x),
        Activation::Silu => activation::silu(x),
        Activation::LeakyRelu(slope) => activation::leaky_relu(x, slope),
    }
}

/// As a spec writes it: `relu`, `leaky_relu(0.01)`.
pub fn activation_written(act: Activation) -> String {
    match act {
        Activation::LeakyRelu(slope) => format!("leaky_relu({slope})"),
        other => other.name().to_string(),
    }
}

/// The native engine's activation (shared with the convolutions).
pub(crate) fn native_act(a: Activation) -> kynml_cpu::Act {
    use kynml_cpu::Act;
    match a {
        Activation::Linear => Act::Linear,
        Activation::Relu => Act::Relu,
        Activation::Gelu => Act::Gelu,
        Activation::Tanh => Act::Tanh,
        Activation::Sigmoid => Act::Sigmoid,
        Activation::Silu => Act::Silu,
        Activation::LeakyRelu(slope) => Act::LeakyRelu(slope as f32),
    }
}

/// A leaky_relu slope must be finite (shared by every layer with an activation).
pub fn check_activation(activation: Activation) -> Result<(), String> {
    match activation {
        Activation::LeakyRelu(slope) if !slope.is_finite() => Err(format!("leaky_relu slope {slope} is not finite")),
        _ => Ok(()),
    }
}

/// A sidecar entry's `fields` with its activation (`activation`, and
/// `negative_slope` for leaky_relu) and `module`: `layer`, then the
/// activation's module.
pub fn with_activation(mut fields: Json, layer: String, activation: Activation) -> Json {
    fields["activation"] = json!(activation.name());
    if let Activation::LeakyRelu(slope) = activation {
        fields["negative_slope"] = json!(slope);
    }
    fields["module"] = json!(match activation_module(&activation) {
        Some(act) => format!("{layer} then {act}"),
        None => layer,
    });
    fields
}

/// The PyTorch module of an activation, `None` for linear.
fn activation_module(activation: &Activation) -> Option<String> {
    Some(match activation {
        Activation::Linear => return None,
        Activation::Relu => "nn.ReLU()".to_string(),
        Activation::Gelu => "nn.GELU()".to_string(),
        Activation::Tanh => "nn.Tanh()".to_string(),
        Activation::Sigmoid => "nn.Sigmoid()".to_string(),
        Activation::Silu => "nn.SiLU()".to_string(),
        Activation::LeakyRelu(slope) => format!("nn.LeakyReLU({slope})"),
    })
}

/// The activation of a sidecar entry (`activation`, and `negative_slope` for leaky_relu).
pub fn activation_from_json(v: &Json) -> Result<Activation, String> {
    Ok(match v.get("activation").and_then(Json::as_str).unwrap_or_default() {
        "linear" => Activation::Linear,
        "relu" => Activation::Relu,
        "gelu" => Activation::Gelu,
        "tanh" => Activation::Tanh,
        "sigmoid" => Activation::Sigmoid,
        "silu" => Activation::Silu,
        "leaky_relu" => Activation::LeakyRelu(
            v.get("negative_slope").and_then(Json::as_f64).ok_or("leaky_relu without `negative_slope`")?,
        ),
        other => return Err(format!("unknown activation `{other}`")),
    })
}
