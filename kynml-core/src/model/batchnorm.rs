//! `batchnorm`: batch normalisation of each feature, or of each channel
//! after a convolution (PyTorch's `nn.BatchNorm1d` and `nn.BatchNorm2d`).

use burn::module::{Module, Param, ParamId, RunningState};
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

// One definition for both engines and the exports (PyTorch's defaults).
use kynml_cpu::{BATCHNORM_MOMENTUM as MOMENTUM, NORM_EPS as EPS};

/// `batchnorm` takes no arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct BatchNormSpec;

/// `nn.BatchNorm1d`/`2d` semantics: normalise with the batch's biased
/// variance in training, update the running variance with the unbiased one,
/// use the running statistics in evaluation. The statistics are per feature
/// for plain features, per channel (over the batch and every position) after
/// a convolution.
#[derive(Module, Debug)]
pub struct BatchNorm<B: Backend> {
    /// The learned scale, `[channels]`, starting at 1 (PyTorch's `weight`).
    pub gamma: Param<Tensor<B, 1>>,
    /// The learned shift, `[channels]`, starting at 0 (PyTorch's `bias`).
    pub beta: Param<Tensor<B, 1>>,
    /// The running mean of each channel, used in evaluation; starts at 0.
    pub running_mean: RunningState<Tensor<B, 1>>,
    /// The running unbiased variance of each channel, used in evaluation; starts at 1.
    pub running_var: RunningState<Tensor<B, 1>>,
    /// Positions per channel: 1 for plain features, `h * w` after a `conv2d`.
    #[module(skip)]
    pub positions: usize,
}

impl Kind for BatchNormSpec {
    const NAMES: &'static [&'static str] = &["batchnorm"];
    const FORMS: &'static [&'static str] = &["batchnorm"];
    type Module = BatchNorm<Kb>;

    fn parse(line: &LayerLine, d: &mut Vec<Diagnostic>) -> Option<Self> {
        super::kind::options(line, &[], d)?;
        extra_args(line, 0, "batchnorm", d)?;
        Some(BatchNormSpec)
    }

    fn describe(&self) -> String {
        "batchnorm".into()
    }

    /// Element-wise.
    fn multiply_adds(&self, _input: &Shape) -> u64 {
        0
    }

    fn output(&self, input: &Shape) -> Result<Shape, String> {
        if input.is_sequence() {
            return Err("`batchnorm` normalises features or channels; on a text's positions use `layernorm`".into());
        }
        Ok(input.clone())
    }

    fn tensors(&self, input: &Shape) -> Vec<Decl> {
        let c = channels(input);
        vec![
            Decl::param("weight", vec![c]),
            Decl::param("bias", vec![c]),
            Decl::buffer("running_mean", vec![c]),
            Decl::buffer("running_var", vec![c]),
            Decl::count("num_batches_tracked"),
        ]
    }

    fn native(&self, input: &Shape) -> Option<kynml_cpu::LayerConfig> {
        match input.rank() {
            1 => Some(kynml_cpu::LayerConfig::BatchNorm),
            _ if input.layout() == super::Layout::Values => {
                Some(kynml_cpu::LayerConfig::ChannelBatchNorm { positions: input.size() / channels(input).max(1) })
            }
            _ => None,
        }
    }

    /// Initialised as PyTorch does: scale 1, shift 0, running mean 0 and variance 1.
    fn init(&self, input: &Shape, _rng: &mut SplitMix64, device: &DispatchDevice) -> BatchNorm<Kb> {
        let c = channels(input);
        BatchNorm {
            gamma: Param::from_tensor(Tensor::ones([c], device)),
            beta: Param::from_tensor(Tensor::zeros([c], device)),
            running_mean: RunningState::new(Tensor::zeros([c], device)),
            running_var: RunningState::new(Tensor::ones([c], device)),
            positions: input.size() / c.max(1),
        }
    }

    fn check(&self, t: Tensors) -> Result<(), String> {
        if let Some(v) = t.f32("running_var").iter().find(|v| !(v.is_finite() && **v >= 0.0)) {
            return Err(format!("running_var holds {v}; variances must be finite and >= 0"));
        }
        let n = t.count("num_batches_tracked");
        if n < 0 {
            return Err(format!("num_batches_tracked is {n}, below 0"));
        }
        Ok(())
    }

    fn reference(&self, input: &Shape, t: Tensors, x: &[f32]) -> Vec<f32> {
        let (gamma, beta, mean, var) = (t.f32("weight"), t.f32("bias"), t.f32("running_mean"), t.f32("running_var"));
        let c = channels(input);
        let positions = input.size() / c.max(1);
        x.iter()
            .enumerate()
            .map(|(i, v)| {
                let ch = (i / positions) % c;
                let inv = 1.0 / (f64::from(var[ch]) + EPS).sqrt();
                ((f64::from(*v) - f64::from(mean[ch])) * inv * f64::from(gamma[ch]) + f64::from(beta[ch])) as f32
            })
            .collect()
    }

    /// `BatchNormalization` (inference, epsilon 1e-5), on `[batch, channels, ...]`.
    fn onnx(&self, g: &mut Graph, p: &str, input: &Shape, t: Tensors, x: String) -> String {
        let c = channels(input);
        let scale = g.constant(format!("{p}.scale"), vec![c], t.f32("weight").to_vec());
        let bias = g.constant(format!("{p}.bias"), vec![c], t.f32("bias").to_vec());
        let mean = g.constant(format!("{p}.running_mean"), vec![c], t.f32("running_mean").to_vec());
        let var = g.constant(format!("{p}.running_var"), vec![c], t.f32("running_var").to_vec());
        let attrs = vec![Attr::Float("epsilon", EPS as f32)];
        if input.rank() == 1 {
            return g.node(p.to_string(), "BatchNormalization", &[&x, &scale, &bias, &mean, &var], attrs);
        }
        let x = g.reshape(p, x, input);
        let y = g.node(format!("{p}.normalized"), "BatchNormalization", &[&x, &scale, &bias, &mean, &var], attrs);
        g.flatten(p, y)
    }

    fn torch(&self, input: &Shape) -> Json {
        let c = channels(input);
        let module = if input.rank() == 3 { "BatchNorm2d" } else { "BatchNorm1d" };
        json!({
            "num_features": c,
            "eps": EPS,
            "module": format!("nn.{module}({c}, eps=1e-05)"),
        })
    }

    fn from_json(_kind: &str, _v: &Json) -> Result<Self, String> {
        Ok(BatchNormSpec)
    }
}

/// Features of a plain input, channels of a shaped one.
fn channels(input: &Shape) -> usize {
    input.dims().first().copied().unwrap_or(0)
}

impl LayerModule for BatchNorm<Kb> {
    fn forward(&self, x: Tensor<Kb, 2>, pass: &mut Pass) -> Tensor<Kb, 2> {
        if self.positions == 1 {
            return self.forward_flat(x, pass.training());
        }
        let [batch, features] = x.dims();
        let c = features / self.positions;
        let x = x.reshape([batch, c, self.positions]);
        let (mean, var) = if pass.training() {
            let mean = x.clone().mean_dim(2).mean_dim(0); // [1, c, 1]
            let var = (x.clone() - mean.clone()).square().mean_dim(2).mean_dim(0); // biased
            let n = (batch * self.positions) as f64;
            let unbiased = if n > 1.0 { n / (n - 1.0) } else { 1.0 };
            self.track(mean.clone().detach().reshape([c]), var.clone().detach().reshape([c]).mul_scalar(unbiased));
            (mean, var)
        } else {
            let device = x.device();
            (
                self.running_mean.value_sync().to_device(&device).reshape([1, c, 1]),
                self.running_var.value_sync().to_device(&device).reshape([1, c, 1]),
            )
        };
        let x_hat = (x - mean) / (var + EPS).sqrt();
        let y = x_hat * self.gamma.val().reshape([1, c, 1]) + self.beta.val().reshape([1, c, 1]);
        y.reshape([batch, features])
    }

    fn state(&self) -> Vec<(String, TensorData)> {
        vec![
            ("weight".into(), self.gamma.val().into_data()),
            ("bias".into(), self.beta.val().into_data()),
            ("running_mean".into(), self.running_mean.value_sync().into_data()),
            ("running_var".into(), self.running_var.value_sync().into_data()),
        ]
    }

    fn restore(mut self, get: &mut Getter, device: &DispatchDevice) -> Result<Self, StateError> {
        let c = [self.gamma.dims()[0]];
        self.gamma = restore_param(self.gamma, "weight", get, device)?;
        self.beta = restore_param(self.beta, "bias", get, device)?;
        // Ids from the weight's, not drawn: the same model gives the same
        // Burn record bytes (export numbers the weights' ids first).
        let id = |bit: u32| ParamId::from(self.gamma.id.val() ^ (1 << bit));
        self.running_mean = RunningState::with_id(id(62), Tensor::from_data(get("running_mean", &c)?, device));
        self.running_var = RunningState::with_id(id(63), Tensor::from_data(get("running_var", &c)?, device));
        Ok(self)
    }

    fn params(&self) -> Vec<(ParamId, String, usize)> {
        vec![(self.gamma.id, "weight".into(), 1), (self.beta.id, "bias".into(), 1)]
    }
}

impl BatchNorm<Kb> {
    /// Plain features: `x: [batch, features]`.
    fn forward_flat(&self, x: Tensor<Kb, 2>, training: bool) -> Tensor<Kb, 2> {
        let (mean, var) = if training {
            let n = x.dims()[0];
            let mean = x.clone().mean_dim(0); // [1, f]
            let var = (x.clone() - mean.clone()).square().mean_dim(0); // biased
            let unbiased = if n > 1 { n as f64 / (n as f64 - 1.0) } else { 1.0 };
            self.track(mean.clone().detach().squeeze::<1>(), var.clone().detach().squeeze::<1>().mul_scalar(unbiased));
            (mean, var)
        } else {
            let device = x.device();
            (
                self.running_mean.value_sync().to_device(&device).unsqueeze::<2>(),
                self.running_var.value_sync().to_device(&device).unsqueeze::<2>(),
            )
        };
        let x_hat = (x - mean) / (var + EPS).sqrt();
        x_hat * self.gamma.val().unsqueeze::<2>() + self.beta.val().unsqueeze::<2>()
    }

    /// Moves the running statistics toward this batch's.
    fn track(&self, batch_mean: Tensor<Kb, 1>, batch_var: Tensor<Kb, 1>) {
        let rm = self.running_mean.value_sync();
        let rv = self.running_var.value_sync();
        self.running_mean.update(rm.mul_scalar(1.0 - MOMENTUM) + batch_mean.mul_scalar(MOMENTUM));
        self.running_var.update(rv.mul_scalar(1.0 - MOMENTUM) + batch_var.mul_scalar(MOMENTUM));
    }
}
