//! Batch and layer normalisation over the feature dimension of `[batch, features]`.

use burn::module::{Module, Param, RunningState};
use burn::tensor::Tensor;

use burn::tensor::backend::Backend;
use burn::DispatchDevice;
use kynml_backend::Backend as Kb;

// One definition for both engines and the exports (PyTorch's defaults).
use kynml_cpu::{BATCHNORM_MOMENTUM as MOMENTUM, NORM_EPS as EPS};

/// `nn.BatchNorm1d` semantics: normalise with the batch's biased variance in
/// training, update the running variance with the unbiased one, use the
/// running statistics in evaluation.
#[derive(Module, Debug)]
pub struct BatchNorm<B: Backend> {
    /// The learned scale, `[features]`, starting at 1 (PyTorch's `weight`).
    pub gamma: Param<Tensor<B, 1>>,
    /// The learned shift, `[features]`, starting at 0 (PyTorch's `bias`).
    pub beta: Param<Tensor<B, 1>>,
    /// The running mean of each feature, used in evaluation; starts at 0.
    pub running_mean: RunningState<Tensor<B, 1>>,
    /// The running unbiased variance of each feature, used in evaluation; starts at 1.
    pub running_var: RunningState<Tensor<B, 1>>,
}

impl BatchNorm<Kb> {
    /// A batchnorm over `features` features, initialised as PyTorch does: scale 1, shift 0, running
    /// mean 0 and variance 1.
    pub fn init(features: usize, device: &DispatchDevice) -> Self {
        BatchNorm {
            gamma: Param::from_tensor(Tensor::ones([features], device)),
            beta: Param::from_tensor(Tensor::zeros([features], device)),
            running_mean: RunningState::new(Tensor::zeros([features], device)),
            running_var: RunningState::new(Tensor::ones([features], device)),
        }
    }

    /// # Shapes
    /// `x: [batch, features]` → same
    pub fn forward(&self, x: Tensor<Kb, 2>, training: bool) -> Tensor<Kb, 2> {
        let (mean, var) = if training {
            let n = x.dims()[0];
            let mean = x.clone().mean_dim(0); // [1, f]
            let var = (x.clone() - mean.clone()).square().mean_dim(0); // biased
            let unbiased = if n > 1 { n as f64 / (n as f64 - 1.0) } else { 1.0 };
            let rm = self.running_mean.value_sync();
            let rv = self.running_var.value_sync();
            let batch_mean = mean.clone().detach().squeeze::<1>();
            let batch_var = var.clone().detach().squeeze::<1>().mul_scalar(unbiased);
            self.running_mean.update(rm.mul_scalar(1.0 - MOMENTUM) + batch_mean.mul_scalar(MOMENTUM));
            self.running_var.update(rv.mul_scalar(1.0 - MOMENTUM) + batch_var.mul_scalar(MOMENTUM));
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
}

/// `nn.LayerNorm(features)`: normalise each row over its features.
#[derive(Module, Debug)]
pub struct LayerNorm<B: Backend> {
    /// The learned scale, `[features]`, starting at 1 (PyTorch's `weight`).
    pub gamma: Param<Tensor<B, 1>>,
    /// The learned shift, `[features]`, starting at 0 (PyTorch's `bias`).
    pub beta: Param<Tensor<B, 1>>,
}

impl LayerNorm<Kb> {
    /// A layernorm over `features` features, initialised as PyTorch does: scale 1, shift 0.
    pub fn init(features: usize, device: &DispatchDevice) -> Self {
        LayerNorm {
            gamma: Param::from_tensor(Tensor::ones([features], device)),
            beta: Param::from_tensor(Tensor::zeros([features], device)),
        }
    }

    /// # Shapes
    /// `x: [batch, features]` → same
    pub fn forward(&self, x: Tensor<Kb, 2>) -> Tensor<Kb, 2> {
        let mean = x.clone().mean_dim(1);
        let var = (x.clone() - mean.clone()).square().mean_dim(1);
        let x_hat = (x - mean) / (var + EPS).sqrt();
        x_hat * self.gamma.val().unsqueeze::<2>() + self.beta.val().unsqueeze::<2>()
    }
}
