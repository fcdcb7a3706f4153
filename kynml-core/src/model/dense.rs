//! A fully connected layer followed by its activation.

use burn::module::{Module, Param};
use burn::tensor::activation;
use burn::tensor::{FloatDType, Tensor, TensorData};

use crate::rng::SplitMix64;
use crate::spec::types::Activation;
use burn::tensor::backend::Backend;
use burn::DispatchDevice;
use kynml_backend::Backend as Kb;

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

impl Dense<Kb> {
    /// PyTorch's `nn.Linear` initialisation: weight and bias both drawn from
    /// `U(-k, k)` with `k = 1/sqrt(d_in)` (Kaiming-uniform with `a = sqrt(5)`).
    pub fn init(
        d_in: usize,
        d_out: usize,
        activation: Activation,
        rng: &mut SplitMix64,
        device: &DispatchDevice,
    ) -> Self {
        let k = 1.0 / (d_in as f64).sqrt();
        let weight: Vec<f32> = (0..d_in * d_out).map(|_| rng.uniform(-k, k) as f32).collect();
        let bias: Vec<f32> = (0..d_out).map(|_| rng.uniform(-k, k) as f32).collect();
        Dense {
            weight: Param::from_data(TensorData::new(weight, [d_in, d_out]), device),
            bias: Param::from_data(TensorData::new(bias, [d_out]), device),
            activation,
        }
    }

    /// The matrix product runs in `half` when given (inputs and weights cast
    /// down, the product cast back to fp32; autodiff carries the gradient
    /// back through both casts to the fp32 weight). Bias and activation stay
    /// fp32. See [`crate::train::precision`].
    ///
    /// # Shapes
    /// `x: [batch, d_in]` → `[batch, d_out]`
    pub fn forward(&self, x: Tensor<Kb, 2>, half: Option<FloatDType>) -> Tensor<Kb, 2> {
        let product = match half {
            None => x.matmul(self.weight.val()),
            Some(h) => x.cast(h).matmul(self.weight.val().cast(h)).cast(FloatDType::F32),
        };
        apply_activation(product + self.bias.val().unsqueeze::<2>(), self.activation)
    }
}

pub fn apply_activation(x: Tensor<Kb, 2>, act: Activation) -> Tensor<Kb, 2> {
    match act {
        Activation::Linear => x,
        Activation::Relu => activation::relu(x),
        Activation::Gelu => activation::gelu(x),
        Activation::Tanh => activation::tanh(x),
        Activation::Sigmoid => activation::sigmoid(x),
        Activation::Silu => activation::silu(x),
        Activation::LeakyRelu(slope) => activation::leaky_relu(x, slope),
    }
}
