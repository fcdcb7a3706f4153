//! `conv1d C K ACTIVATION` and `conv2d C K ACTIVATION`, with the options
//! `stride=S` and `padding=P` (or `padding=same`): a convolution with C
//! output channels and a K-wide (K x K) kernel, then its activation
//! (PyTorch's `nn.Conv1d` / `nn.Conv2d`, then the activation).
//!
//! A `conv1d` runs as a `conv2d` of height 1, so both share one Burn module;
//! its weight is `[out, in, 1, K]` in checkpoints, `[out, in, K]` in exports.

use burn::module::{Module, Param, ParamId};
use burn::tensor::backend::Backend;
use burn::tensor::module::conv2d;
use burn::tensor::ops::{ConvOptions, PadMode};
use burn::tensor::{FloatDType, Tensor, TensorData};
use burn::DispatchDevice;
use kynml_backend::Backend as Kb;
use serde_json::{json, Value as Json};

use super::dense::{activation_from_json, activation_written, apply_activation, check_activation, with_activation};
use super::kind::{
    activation_arg, count_arg, extra_args, json_size, missing, options, restore_param, Decl, Getter, Kind, LayerModule,
    Pass, Shape, Tensors,
};
use super::StateError;
use crate::export::onnx::{activate, Attr, Graph};
use crate::rng::SplitMix64;
use crate::spec::ast::LayerLine;
use crate::spec::diagnostic::Diagnostic;
use crate::spec::types::Activation;

/// The arguments of a `conv1d` or `conv2d` line.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct ConvSpec {
    /// 1 for `conv1d` (over a length), 2 for `conv2d` (over height and width).
    pub dims: usize,
    /// Output channels; at least 1.
    pub channels: usize,
    /// Kernel width (and height, for `conv2d`); at least 1.
    pub kernel: usize,
    /// Step between two positions of the kernel; default 1.
    pub stride: usize,
    /// Zeros added on each side; default 0. `padding=same` is `(K-1)/2` with stride 1 and an odd K.
    pub padding: usize,
    /// Written as `padding=same`: echoed so in `kynml check`'s table (the
    /// resolved number is what trains, is saved and is exported).
    #[serde(skip)]
    pub same: bool,
    /// Applied to the output; `Linear` for none.
    pub activation: Activation,
}

/// A 2-D convolution (height 1 for `conv1d`) with a bias, then the activation.
#[derive(Module, Debug)]
pub struct Conv<B: Backend> {
    /// `[out, in, kernel height, kernel width]`: PyTorch's layout (`conv1d`: height 1).
    pub weight: Param<Tensor<B, 4>>,
    /// `[out]`.
    pub bias: Param<Tensor<B, 1>>,
    /// Applied after the convolution; not a parameter.
    #[module(skip)]
    pub activation: Activation,
    /// The input's shape: `[channels, height, width]`, height 1 for `conv1d`.
    #[module(skip)]
    pub input: [usize; 3],
    /// `[height, width]` of the stride.
    #[module(skip)]
    pub stride: [usize; 2],
    /// `[height, width]` of the padding.
    #[module(skip)]
    pub padding: [usize; 2],
}

const OPTIONS: &[&str] = &["stride", "padding"];

impl ConvSpec {
    fn name(&self) -> &'static str {
        if self.dims == 1 {
            "conv1d"
        } else {
            "conv2d"
        }
    }

    /// Kernel, stride and padding as `[height, width]`.
    fn geometry(&self) -> ([usize; 2], [usize; 2], [usize; 2]) {
        if self.dims == 1 {
            ([1, self.kernel], [1, self.stride], [0, self.padding])
        } else {
            ([self.kernel; 2], [self.stride; 2], [self.padding; 2])
        }
    }

    /// Output height and width (height 1 for `conv1d`); `None` when the kernel does not fit.
    fn out_hw(&self, input: &Shape) -> Option<[usize; 2]> {
        let [_, h, w] = input.chw();
        let (k, s, p) = self.geometry();
        let size = |n: usize, i: usize| (n + 2 * p[i]).checked_sub(k[i]).map(|span| span / s[i] + 1);
        Some([size(h, 0)?, size(w, 1)?])
    }

    /// The values of a row's padded input, which Burn's convolutions hold
    /// (the native engine skips the padding); saturating.
    pub fn padded_values(&self, input: &Shape) -> u64 {
        let [c, h, w] = input.chw();
        let (_, _, p) = self.geometry();
        let side = |n: usize, i: usize| (n as u64).saturating_add((p[i] as u64).saturating_mul(2));
        (c as u64).saturating_mul(side(h, 0)).saturating_mul(side(w, 1))
    }

    /// The values of a row's patches (`channels x kernel` per output
    /// position), which a convolution lowered to a matrix product holds;
    /// saturating.
    pub fn patch_values(&self, input: &Shape) -> u64 {
        let [c, _, _] = input.chw();
        let (k, _, _) = self.geometry();
        let [oh, ow] = self.out_hw(input).unwrap_or([0, 0]);
        [k[0], k[1], oh, ow].into_iter().fold(c as u64, |n, d| n.saturating_mul(d as u64))
    }

    /// The PyTorch layout of the weight.
    fn weight_shape(&self, input: &Shape) -> Vec<usize> {
        let cin = input.chw()[0];
        if self.dims == 1 {
            vec![self.channels, cin, self.kernel]
        } else {
            vec![self.channels, cin, self.kernel, self.kernel]
        }
    }
}

impl Kind for ConvSpec {
    const NAMES: &'static [&'static str] = &["conv1d", "conv2d"];
    const FORMS: &'static [&'static str] = &["conv1d C K ACTIVATION", "conv2d C K ACTIVATION"];
    type Module = Conv<Kb>;

    /// Its patches times its weights, on the native engine's products.
    fn native(&self, input: &Shape) -> Option<kynml_cpu::LayerConfig> {
        let (kernel, stride, padding) = self.geometry();
        let window = kynml_cpu::Window { input: input.chw(), kernel, stride, padding };
        (input.layout() == super::Layout::Values && input.rank() >= 2).then(|| kynml_cpu::LayerConfig::Conv {
            window,
            channels: self.channels,
            act: super::dense::native_act(self.activation),
        })
    }

    fn parse(line: &LayerLine, d: &mut Vec<Diagnostic>) -> Option<Self> {
        let name = line.name.value.as_str();
        let dims = if name == "conv1d" { 1 } else { 2 };
        let form = format!("{name} C K ACTIVATION");
        let opts = options(line, OPTIONS, d)?;
        let [channels, kernel, activation, ..] = line.args.as_slice() else {
            // What is missing is what follows the numbers written: `conv2d 4
            // relu` lacks its kernel size, not its activation.
            let numbers =
                line.args.iter().take_while(|a| matches!(a.kind, crate::spec::ast::ValueKind::Number(_))).count();
            let what = ["output channels", "kernel size", "activation"][numbers.min(2)];
            missing(line, what, &format!("the {what}"), &format!("{form}`, as in `{name} 16 3 relu"), d);
            return None;
        };
        let channels = count_arg(channels, &format!("the channels of `{name}`"), 1, d);
        let kernel = count_arg(kernel, &format!("the kernel size of `{name}`"), 1, d);
        let activation = activation_arg(activation, d);
        let stride = opts.count("stride", 1, 1, d);
        extra_args(line, 3, &form, d)?;
        let (channels, kernel, activation, stride) = (channels?, kernel?, activation?, stride?);
        let same = opts.is_word("padding", "same");
        let padding = if same {
            if stride != 1 || kernel % 2 == 0 {
                d.push(
                    Diagnostic::new(opts.span("padding"), "`padding=same` needs stride 1 and an odd kernel", "here")
                        .with_help(format!(
                        "with kernel {kernel} and stride {stride}, write the padding as a number, as in `padding={}`",
                        kernel / 2
                    )),
                );
                return None;
            }
            kernel / 2
        } else if let Some(crate::spec::ast::ValueKind::Ident(word)) = opts.get("padding").map(|v| &v.kind) {
            // `padding=valid` (PyTorch's and Keras's word for none).
            let help = match word.as_str() {
                "valid" => "`valid` is no padding: write `padding=0` (or leave `padding` out)".to_string(),
                _ => format!("write a number of zeros on each side, as in `padding={}`, or `padding=same`", kernel / 2),
            };
            d.push(
                Diagnostic::new(
                    opts.span("padding"),
                    format!("expected a number or `same` for `padding`, found `{word}`"),
                    "expected a number or `same`",
                )
                .with_help(help),
            );
            return None;
        } else if let Some(crate::spec::ast::ValueKind::Str(text)) = opts.get("padding").map(|v| &v.kind) {
            // `padding="same"`, as PyTorch writes it: here a word, unquoted.
            let help = match text.trim() {
                "same" => "remove the quotes: `padding=same`".to_string(),
                "valid" => "`valid` is no padding: write `padding=0` (or leave `padding` out)".to_string(),
                _ => format!("write a number of zeros on each side, as in `padding={}`, or `padding=same`", kernel / 2),
            };
            d.push(
                Diagnostic::new(
                    opts.span("padding"),
                    format!("expected a number or `same` for `padding`, found the string {text:?}"),
                    "expected a number or `same`",
                )
                .with_help(help),
            );
            return None;
        } else {
            opts.count("padding", 0, 0, d)?
        };
        Some(ConvSpec { dims, channels, kernel, stride, padding, same, activation })
    }

    fn word(&self) -> &'static str {
        self.name()
    }

    fn describe(&self) -> String {
        let mut s =
            format!("{} {} {} {}", self.name(), self.channels, self.kernel, activation_written(self.activation));
        if self.stride != 1 {
            s += &format!(" stride={}", self.stride);
        }
        if self.same {
            s += " padding=same";
        } else if self.padding != 0 {
            s += &format!(" padding={}", self.padding);
        }
        s
    }

    /// The padding as its number, however written: `padding=same` and
    /// `padding=1` (kernel 3) are one model, and checkpoints recorded the
    /// number before `same` was echoed.
    fn fingerprint(&self) -> String {
        ConvSpec { same: false, ..*self }.describe()
    }

    fn output(&self, input: &Shape) -> Result<Shape, String> {
        let needs = if self.dims == 1 { "CxL (channels x length)" } else { "CxHxW (channels x height x width)" };
        if input.is_sequence() {
            return Err(format!("`{}` takes channels first; a text's positions are not channels", self.name()));
        }
        if input.rank() != self.dims + 1 {
            return Err(format!(
                "`{}` takes {needs} values; declare the input's shape, as in `input {}`",
                self.name(),
                if self.dims == 1 { "1x64" } else { "1x28x28" }
            ));
        }
        // Burn's convolutions hold the padded input (the native engine skips
        // the padding): it must be a size a device can hold.
        if self.padded_values(input) > crate::model::MOST_VALUES {
            return Err(format!(
                "its padding {} makes a padded input of more values than any device has; use a padding below \
                 the kernel's size ({})",
                self.padding, self.kernel
            ));
        }
        match self.out_hw(input) {
            Some([_, ow]) if self.dims == 1 => Ok(Shape::new(vec![self.channels, ow])),
            Some([oh, ow]) => Ok(Shape::new(vec![self.channels, oh, ow])),
            None => Err(format!(
                "its kernel {} is larger than the {} input plus padding {}; use a smaller kernel or more padding",
                self.kernel,
                input.written(),
                self.padding
            )),
        }
    }

    /// Its whole weight at every output position.
    fn multiply_adds(&self, input: &Shape) -> u64 {
        let positions: usize = self.out_hw(input).map_or(0, |[h, w]| h * w);
        (positions * self.weight_shape(input).iter().product::<usize>()) as u64
    }

    fn tensors(&self, input: &Shape) -> Vec<Decl> {
        vec![Decl::param("weight", self.weight_shape(input)), Decl::param("bias", vec![self.channels])]
    }

    /// PyTorch's initialisation: weight and bias from `U(-k, k)` with
    /// `k = 1/sqrt(in_channels * kernel area)`.
    fn init(&self, input: &Shape, rng: &mut SplitMix64, device: &DispatchDevice) -> Conv<Kb> {
        let chw = input.chw();
        let (kernel, stride, padding) = self.geometry();
        let fan_in = chw[0] * kernel[0] * kernel[1];
        let bound = 1.0 / (fan_in as f64).sqrt();
        let shape = [self.channels, chw[0], kernel[0], kernel[1]];
        let weight: Vec<f32> = (0..self.channels * fan_in).map(|_| rng.uniform(-bound, bound) as f32).collect();
        let bias: Vec<f32> = (0..self.channels).map(|_| rng.uniform(-bound, bound) as f32).collect();
        Conv {
            weight: Param::from_data(TensorData::new(weight, shape), device),
            bias: Param::from_data(TensorData::new(bias, [self.channels]), device),
            activation: self.activation,
            input: chw,
            stride,
            padding,
        }
    }

    fn check(&self, _t: Tensors) -> Result<(), String> {
        check_activation(self.activation)
    }

    fn reference(&self, input: &Shape, t: Tensors, x: &[f32]) -> Vec<f32> {
        let (weight, bias) = (t.f32("weight"), t.f32("bias"));
        let [cin, h, w] = input.chw();
        let (k, s, p) = self.geometry();
        let [oh, ow] = self.out_hw(input).unwrap_or([0, 0]);
        let out = self.channels * oh * ow;
        let mut y = Vec::with_capacity(x.len() / input.size().max(1) * out);
        for row in x.chunks_exact(input.size()) {
            for o in 0..self.channels {
                for oy in 0..oh {
                    for ox in 0..ow {
                        let mut sum = f64::from(bias[o]);
                        for c in 0..cin {
                            for ky in 0..k[0] {
                                let Some(iy) = (oy * s[0] + ky).checked_sub(p[0]).filter(|iy| *iy < h) else {
                                    continue;
                                };
                                for kx in 0..k[1] {
                                    let Some(ix) = (ox * s[1] + kx).checked_sub(p[1]).filter(|ix| *ix < w) else {
                                        continue;
                                    };
                                    let wv = weight[((o * cin + c) * k[0] + ky) * k[1] + kx];
                                    sum += f64::from(row[(c * h + iy) * w + ix]) * f64::from(wv);
                                }
                            }
                        }
                        y.push(self.activation.apply(sum as f32));
                    }
                }
            }
        }
        y
    }

    /// `Reshape` to `[batch, channels, ...]`, `Conv`, the activation, `Flatten`.
    fn onnx(&self, g: &mut Graph, p: &str, input: &Shape, t: Tensors, x: String) -> String {
        let w = g.constant(format!("{p}.weight"), self.weight_shape(input), t.f32("weight").to_vec());
        let b = g.constant(format!("{p}.bias"), vec![self.channels], t.f32("bias").to_vec());
        let x = g.reshape(p, x, input);
        let n = self.dims;
        let attrs = vec![
            Attr::Ints("kernel_shape", vec![self.kernel as i64; n]),
            Attr::Ints("strides", vec![self.stride as i64; n]),
            Attr::Ints("pads", vec![self.padding as i64; 2 * n]),
        ];
        let y = g.node(format!("{p}.conv"), "Conv", &[&x, &w, &b], attrs);
        let y = activate(g, p, y, self.activation);
        g.flatten(p, y)
    }

    fn torch(&self, input: &Shape) -> Json {
        let cin = input.chw()[0];
        let module = if self.dims == 1 { "Conv1d" } else { "Conv2d" };
        let conv = format!(
            "nn.{module}({cin}, {}, kernel_size={}, stride={}, padding={})",
            self.channels, self.kernel, self.stride, self.padding
        );
        let fields = json!({
            "in_channels": cin,
            "out_channels": self.channels,
            "kernel_size": self.kernel,
            "stride": self.stride,
            "padding": self.padding,
        });
        with_activation(fields, conv, self.activation)
    }

    fn from_json(kind: &str, v: &Json) -> Result<Self, String> {
        let padding = v.get("padding").and_then(Json::as_u64).ok_or(format!("{kind} without `padding`"))?;
        Ok(ConvSpec {
            dims: if kind == "conv1d" { 1 } else { 2 },
            channels: json_size(v, kind, "out_channels")?,
            kernel: json_size(v, kind, "kernel_size")?,
            stride: json_size(v, kind, "stride")?,
            padding: usize::try_from(padding).map_err(|_| format!("{kind} with `padding` {padding}, too large"))?,
            same: false,
            activation: activation_from_json(v)?,
        })
    }
}

/// For each axis whose stride is longer than the kernel, the input padded
/// on that axis and cut to the positions the windows read, a kernel's
/// length of them for each output, end to end: a convolution of stride
/// `kernel` over it gives what one of stride `stride` gives over `x`. Returns
/// the input and the stride and padding to run with (an axis whose stride
/// is no longer than the kernel keeps its own).
fn gather_windows(
    mut x: Tensor<Kb, 4>,
    kernel: [usize; 2],
    stride: [usize; 2],
    padding: [usize; 2],
) -> (Tensor<Kb, 4>, [usize; 2], [usize; 2]) {
    let (mut stride, mut padding) = (stride, padding);
    for axis in 0..2 {
        let (k, s, p) = (kernel[axis], stride[axis], padding[axis]);
        if s <= k {
            continue;
        }
        let dim = 2 + axis;
        if p > 0 {
            let pads = if axis == 0 { [(p, p), (0, 0)] } else { [(0, 0), (p, p)] };
            x = x.pad(pads, PadMode::Constant(0.0));
        }
        let outputs = (x.dims()[dim] - k) / s + 1;
        // Tap `j` of every window: positions j, j + s, ... (one per output).
        let taps: Vec<Tensor<Kb, 4>> = (0..k)
            .map(|j| {
                let end = j + (outputs - 1) * s + 1;
                x.clone().slice_dim(dim, burn::tensor::Slice::new(j as isize, Some(end as isize), s as isize))
            })
            .collect();
        // [b, c, outputs, k, w] (or [b, c, h, outputs, k]), then each
        // output's taps end to end.
        let gathered: Tensor<Kb, 5> = Tensor::stack(taps, dim + 1);
        let mut dims = x.dims();
        dims[dim] = outputs * k;
        x = gathered.reshape(dims);
        stride[axis] = k;
        padding[axis] = 0;
    }
    (x, stride, padding)
}

impl LayerModule for Conv<Kb> {
    /// The convolution runs in `half` when given, as a dense layer's product
    /// does; the bias and the activation stay fp32.
    fn forward(&self, x: Tensor<Kb, 2>, pass: &mut Pass) -> Tensor<Kb, 2> {
        let [batch, _] = x.dims();
        let [c, h, w] = self.input;
        let x = x.reshape([batch, c, h, w]);
        // A stride longer than the kernel (inputs no window reads): the rows
        // (columns) the windows read are gathered, a kernel's length for
        // each output, by strided slices, and the convolution runs with a
        // stride as long as its kernel (the same outputs, the same sums).
        // With the stride as written, Burn's GPU autotune chose an
        // input-gradient kernel that gave the layers below wrong or no
        // gradients on wgpu (kernel 1, stride 2, batch 32: losses 1e-3 to
        // 5e-3 off the CPU's), silently. (Padding the kernel to the
        // stride's length instead held stride x stride values per output:
        // a stride of 10^6 asked for 64 TB.)
        let [_, _, kh, kw] = self.weight.dims();
        let (x, stride, padding) = gather_windows(x, [kh, kw], self.stride, self.padding);
        let weight = self.weight.val();
        let options = ConvOptions::new(stride, padding, [1, 1], 1);
        let bias = self.bias.val();
        let y = match pass.half {
            None => conv2d(x, weight, Some(bias), options),
            Some(half) => {
                let y = conv2d(x.cast(half), weight.cast(half), None, options).cast(FloatDType::F32);
                let out = bias.dims()[0];
                y + bias.reshape([1, out, 1, 1])
            }
        };
        let [_, out, oh, ow] = y.dims();
        apply_activation(y.reshape([batch, out * oh * ow]), self.activation, pass)
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
        vec![(self.weight.id, "weight".into(), 4), (self.bias.id, "bias".into(), 1)]
    }
}
