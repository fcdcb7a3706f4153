//! `maxpool K`, `avgpool K` (option `stride=S`, default K) and
//! `global_avgpool`: pooling over the length of a `CxL` input or the height
//! and width of a `CxHxW` one (PyTorch's `nn.MaxPool1d/2d`, `nn.AvgPool1d/2d`
//! and `nn.AdaptiveAvgPool1d/2d(1)` followed by `nn.Flatten()`).

use burn::module::{Module, ParamId};
use burn::tensor::module::{max_pool2d, unfold4d};
use burn::tensor::ops::UnfoldOptions;
use burn::tensor::{Tensor, TensorData};
use burn::DispatchDevice;
use kynml_backend::Backend as Kb;
use serde_json::{json, Value as Json};

use super::kind::{
    count_arg, extra_args, json_size, missing, options, Getter, Kind, LayerModule, Pass, Shape, Tensors,
};
use super::StateError;
use crate::export::onnx::{Attr, Graph};
use crate::rng::SplitMix64;
use crate::spec::ast::LayerLine;
use crate::spec::diagnostic::Diagnostic;

/// Which pooling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum PoolOp {
    /// `maxpool K`: the largest value of each window.
    Max,
    /// `avgpool K`: the mean of each window.
    Avg,
    /// `global_avgpool`: the mean of each channel, giving one value per channel.
    GlobalAvg,
}

/// The arguments of a pooling line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct PoolSpec {
    /// Which pooling.
    pub op: PoolOp,
    /// Window width (and height, on an image); 0 for `global_avgpool`.
    pub kernel: usize,
    /// Step between two windows; the kernel by default.
    pub stride: usize,
}

/// The pooling's geometry; no parameters.
#[derive(Module, Debug, Clone)]
pub struct Pool {
    /// The window: `[height, width]`, height 1 on a sequence.
    pub kernel: [usize; 2],
    /// The step: `[height, width]`.
    pub stride: [usize; 2],
    /// The input, `[channels, height, width]` (height 1 on a sequence).
    pub input: [usize; 3],
    /// Which pooling.
    #[module(skip)]
    pub op: PoolOp,
    /// `global_avgpool` on a text's positions (`input` is then `[L, D, 1]`):
    /// the mean over the positions that are not padding.
    #[module(skip)]
    pub sequence: bool,
}

impl PoolSpec {
    fn name(&self) -> &'static str {
        match self.op {
            PoolOp::Max => "maxpool",
            PoolOp::Avg => "avgpool",
            PoolOp::GlobalAvg => "global_avgpool",
        }
    }

    /// Window and step as `[height, width]`.
    fn geometry(&self, input: &Shape) -> ([usize; 2], [usize; 2]) {
        let [_, h, w] = input.chw();
        match (self.op, input.rank()) {
            (PoolOp::GlobalAvg, _) => ([h, w], [h.max(1), w.max(1)]),
            (_, 2) => ([1, self.kernel], [1, self.stride]),
            _ => ([self.kernel; 2], [self.stride; 2]),
        }
    }
}

impl Kind for PoolSpec {
    const NAMES: &'static [&'static str] = &["maxpool", "avgpool", "global_avgpool"];
    const FORMS: &'static [&'static str] = &["maxpool K", "avgpool K", "global_avgpool"];
    type Module = Pool;

    /// Every pooling on channels; the mean over a sequence's positions
    /// runs on Burn.
    fn native(&self, input: &Shape) -> Option<kynml_cpu::LayerConfig> {
        if input.is_sequence() && self.op == PoolOp::GlobalAvg {
            let (length, dim) = (input.dims()[0], input.dims()[1]);
            return Some(kynml_cpu::LayerConfig::SequenceMean { length, dim });
        }
        if input.layout() != super::Layout::Values || input.rank() < 2 {
            return None;
        }
        let (kernel, stride) = self.geometry(input);
        let window = kynml_cpu::Window { input: input.chw(), kernel, stride, padding: [0, 0] };
        match self.op {
            PoolOp::Max => Some(kynml_cpu::LayerConfig::MaxPool(window)),
            PoolOp::Avg => Some(kynml_cpu::LayerConfig::AvgPool(window)),
            PoolOp::GlobalAvg => {
                Some(kynml_cpu::LayerConfig::GlobalAvgPool { positions: input.size() / input.dims()[0].max(1) })
            }
        }
    }

    fn parse(line: &LayerLine, d: &mut Vec<Diagnostic>) -> Option<Self> {
        let name = line.name.value.as_str();
        if name == "global_avgpool" {
            options(line, &[], d)?;
            extra_args(line, 0, "global_avgpool", d)?;
            return Some(PoolSpec { op: PoolOp::GlobalAvg, kernel: 0, stride: 0 });
        }
        let op = if name == "maxpool" { PoolOp::Max } else { PoolOp::Avg };
        let opts = options(line, &["stride"], d)?;
        let Some(kernel) = line.args.first() else {
            missing(line, "window size", "the window size", &format!("{name} K`, as in `{name} 2"), d);
            return None;
        };
        let kernel = count_arg(kernel, &format!("the window of `{name}`"), 1, d);
        extra_args(line, 1, &format!("{name} K"), d)?;
        let kernel = kernel?;
        let stride = opts.count("stride", kernel, 1, d)?;
        Some(PoolSpec { op, kernel, stride })
    }

    fn word(&self) -> &'static str {
        self.name()
    }

    fn describe(&self) -> String {
        match self.op {
            PoolOp::GlobalAvg => "global_avgpool".into(),
            _ if self.stride == self.kernel => format!("{} {}", self.name(), self.kernel),
            _ => format!("{} {} stride={}", self.name(), self.kernel, self.stride),
        }
    }

    /// Comparisons and sums, not products.
    fn multiply_adds(&self, _input: &Shape) -> u64 {
        0
    }

    fn output(&self, input: &Shape) -> Result<Shape, String> {
        if input.is_sequence() {
            return match self.op {
                PoolOp::GlobalAvg => Ok(Shape::flat(input.dims()[1])),
                _ => Err(format!(
                    "`{}` pools the positions of channels; on a text, `global_avgpool` takes the mean over its positions",
                    self.name()
                )),
            };
        }
        if !matches!(input.rank(), 2 | 3) {
            return Err(format!(
                "`{}` pools the positions of each channel: it takes CxL or CxHxW values, as after `conv1d` or `conv2d`",
                self.name()
            ));
        }
        let [c, h, w] = input.chw();
        if self.op == PoolOp::GlobalAvg {
            return Ok(Shape::flat(c));
        }
        let (k, s) = self.geometry(input);
        let size = |n: usize, i: usize| n.checked_sub(k[i]).map(|span| span / s[i] + 1);
        match (size(h, 0), size(w, 1)) {
            (Some(_), Some(ow)) if input.rank() == 2 => Ok(Shape::new(vec![c, ow])),
            (Some(oh), Some(ow)) => Ok(Shape::new(vec![c, oh, ow])),
            _ => Err(format!("its window {} is larger than the {} input", self.kernel, input.written())),
        }
    }

    fn init(&self, input: &Shape, _rng: &mut SplitMix64, _device: &DispatchDevice) -> Pool {
        if input.is_sequence() {
            let [l, d] = [input.dims()[0], input.dims()[1]];
            return Pool { kernel: [0, 0], stride: [0, 0], input: [l, d, 1], op: self.op, sequence: true };
        }
        let (kernel, stride) = self.geometry(input);
        Pool { kernel, stride, input: input.chw(), op: self.op, sequence: false }
    }

    fn reference(&self, input: &Shape, t: Tensors, x: &[f32]) -> Vec<f32> {
        if input.is_sequence() {
            let [l, d] = [input.dims()[0], input.dims()[1]];
            let mut y = Vec::with_capacity(x.len() / l);
            for (r, row) in x.chunks_exact(l * d).enumerate() {
                let mask = |i: usize| t.mask.map_or(1.0, |m| f64::from(m[r * l + i]));
                let count = (0..l).map(mask).sum::<f64>().max(1.0);
                for j in 0..d {
                    let sum: f64 = (0..l).map(|i| mask(i) * f64::from(row[i * d + j])).sum();
                    y.push((sum / count) as f32);
                }
            }
            return y;
        }
        let [c, h, w] = input.chw();
        let (k, s) = self.geometry(input);
        let (oh, ow) = ((h - k[0]) / s[0] + 1, (w - k[1]) / s[1] + 1);
        let mut y = Vec::new();
        for row in x.chunks_exact(input.size()) {
            for ch in 0..c {
                for oy in 0..oh {
                    for ox in 0..ow {
                        let window = (0..k[0])
                            .flat_map(|ky| (0..k[1]).map(move |kx| (oy * s[0] + ky, ox * s[1] + kx)))
                            .map(|(iy, ix)| f64::from(row[(ch * h + iy) * w + ix]));
                        let v = match self.op {
                            PoolOp::Max => window.fold(f64::NEG_INFINITY, f64::max),
                            _ => window.sum::<f64>() / (k[0] * k[1]) as f64,
                        };
                        y.push(v as f32);
                    }
                }
            }
        }
        y
    }

    /// `Reshape`, `MaxPool` / `AveragePool` / `GlobalAveragePool`, `Flatten`.
    fn onnx(&self, g: &mut Graph, p: &str, input: &Shape, _t: Tensors, x: String) -> String {
        let x = g.reshape(p, x, input);
        if input.is_sequence() {
            // sum(x * mask) over the positions / max(count, 1)
            let mask = g.mask.clone().unwrap_or_default();
            let axis1 = g.ints(format!("{p}.axis1"), vec![1], vec![1]);
            let axis2 = g.ints(format!("{p}.axis2"), vec![1], vec![2]);
            let m = g.node(format!("{p}.mask"), "Unsqueeze", &[&mask, &axis2], Vec::new());
            let kept = g.node(format!("{p}.kept"), "Mul", &[&x, &m], Vec::new());
            let sum = g.node(format!("{p}.sum"), "ReduceSum", &[&kept, &axis1], vec![Attr::Int("keepdims", 0)]);
            let count = g.node(format!("{p}.count"), "ReduceSum", &[&mask, &axis1], vec![Attr::Int("keepdims", 1)]);
            let one = g.scalar("one", 1.0);
            let count = g.node(format!("{p}.count1"), "Max", &[&count, &one], Vec::new());
            return g.node(format!("{p}.mean"), "Div", &[&sum, &count], Vec::new());
        }
        let n = input.rank() - 1;
        let y = match self.op {
            PoolOp::GlobalAvg => g.node(format!("{p}.pool"), "GlobalAveragePool", &[&x], Vec::new()),
            op => {
                let attrs = vec![
                    Attr::Ints("kernel_shape", vec![self.kernel as i64; n]),
                    Attr::Ints("strides", vec![self.stride as i64; n]),
                ];
                let name = if op == PoolOp::Max { "MaxPool" } else { "AveragePool" };
                g.node(format!("{p}.pool"), name, &[&x], attrs)
            }
        };
        g.flatten(p, y)
    }

    fn torch(&self, input: &Shape) -> Json {
        if input.is_sequence() {
            return json!({
                "over": "positions",
                "module": "the mean over a text's positions that are not padding: \
                           (x * mask[..., None]).sum(1) / mask.sum(1, keepdim=True).clamp(min=1), \
                           mask = ~padding (the sidecar's `padding` says which positions are padding)",
            });
        }
        let d = if input.rank() == 2 { "1d" } else { "2d" };
        match self.op {
            PoolOp::GlobalAvg => json!({"module": format!("nn.AdaptiveAvgPool{d}(1) then nn.Flatten()")}),
            op => {
                let name = if op == PoolOp::Max { "MaxPool" } else { "AvgPool" };
                json!({
                    "kernel_size": self.kernel,
                    "stride": self.stride,
                    "module": format!("nn.{name}{d}({}, stride={})", self.kernel, self.stride),
                })
            }
        }
    }

    fn from_json(kind: &str, v: &Json) -> Result<Self, String> {
        let size = |key: &str| json_size(v, kind, key);
        Ok(match kind {
            "global_avgpool" => PoolSpec { op: PoolOp::GlobalAvg, kernel: 0, stride: 0 },
            "maxpool" => PoolSpec { op: PoolOp::Max, kernel: size("kernel_size")?, stride: size("stride")? },
            _ => PoolSpec { op: PoolOp::Avg, kernel: size("kernel_size")?, stride: size("stride")? },
        })
    }
}

impl LayerModule for Pool {
    fn forward(&self, x: Tensor<Kb, 2>, pass: &mut Pass) -> Tensor<Kb, 2> {
        let [batch, _] = x.dims();
        let [c, h, w] = self.input;
        if self.sequence {
            let (l, d) = (c, h);
            let mask = pass.mask.clone().unwrap_or_else(|| Tensor::ones([batch, l], &x.device()));
            let sum = (x.reshape([batch, l, d]) * mask.clone().unsqueeze_dim::<3>(2)).sum_dim(1).reshape([batch, d]);
            return sum / mask.sum_dim(1).clamp_min(1.0);
        }
        if self.op == PoolOp::GlobalAvg {
            return x.reshape([batch, c, h * w]).mean_dim(2).reshape([batch, c]);
        }
        let x = x.reshape([batch, c, h, w]);
        if self.op == PoolOp::Max {
            let y = max_pool2d(x, self.kernel, self.stride, [0, 0], [1, 1], false);
            let [_, _, oh, ow] = y.dims();
            return y.reshape([batch, c * oh * ow]);
        }
        // The mean of each window's values, its windows laid out by
        // `unfold4d` ([batch, c * kh * kw, windows], a convolution whose
        // gradient Burn takes through its convolution backward), not by
        // `avg_pool2d`: Burn 0.21's GPU backward of that gave the layers
        // before it wrong gradients (three channels of 2x2, stride 1, on
        // lavapipe).
        let [kh, kw] = self.kernel;
        let windows = unfold4d(x, self.kernel, UnfoldOptions::new(self.stride, [0, 0], [1, 1]));
        let [_, _, l] = windows.dims();
        windows.reshape([batch, c, kh * kw, l]).mean_dim(2).reshape([batch, c * l])
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
