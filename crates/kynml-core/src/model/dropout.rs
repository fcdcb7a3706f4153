//! Inverted dropout: zero each activation with probability `p` in training
//! and scale the survivors by `1/(1-p)`, so evaluation is the identity.

use burn::module::Module;
use burn::tensor::{Distribution, Tensor};

use kynml_backend::Backend as Kb;

#[derive(Module, Debug, Clone)]
pub struct Dropout {
    pub prob: f64,
}

impl Dropout {
    /// # Shapes
    /// `x: [batch, features]` → same
    pub fn forward(&self, x: Tensor<Kb, 2>, training: bool) -> Tensor<Kb, 2> {
        if !training || self.prob == 0.0 {
            return x;
        }
        let keep = 1.0 - self.prob;
        let mask = x.random_like(Distribution::Bernoulli(keep));
        x * mask.mul_scalar(1.0 / keep)
    }
}
