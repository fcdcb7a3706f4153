//! Loss functions, each the mean over the batch as in PyTorch's defaults.

use burn::tensor::{activation, Int, Tensor};

use crate::spec::types::Loss;
use kynml_backend::Backend as Kb;

/// Targets of one batch, in the form its loss needs.
#[derive(Debug, Clone)]
pub enum Targets {
    /// `[batch, 1]`: regression values, or 0/1 labels for `bce`.
    Float(Tensor<Kb, 2>),
    /// `[batch]`: class indices for `cross_entropy`.
    Class(Tensor<Kb, 1, Int>),
}

/// # Shapes
/// `pred: [batch, outputs]`; returns `[1]`.
pub fn compute(loss: Loss, pred: Tensor<Kb, 2>, targets: &Targets) -> Tensor<Kb, 1> {
    match (loss, targets) {
        (Loss::Mse, Targets::Float(y)) => (pred - y.clone()).square().mean(),
        (Loss::Mae, Targets::Float(y)) => (pred - y.clone()).abs().mean(),
        (Loss::Huber { delta }, Targets::Float(y)) => {
            // 0.5 d^2 inside |d| < delta, delta (|d| - delta/2) outside, in
            // one expression: with q = min(|d|, delta), 0.5 q^2 + delta (|d| - q).
            let a = (pred - y.clone()).abs();
            let q = a.clone().clamp_max(delta);
            (q.clone().square().mul_scalar(0.5) + (a - q).mul_scalar(delta)).mean()
        }
        (Loss::Bce, Targets::Float(y)) => {
            // Binary cross-entropy on logits, stable for large |x|:
            // max(x, 0) - x y + log(1 + exp(-|x|)).
            let x = pred;
            let softplus = x.clone().abs().neg().exp().log1p();
            (x.clone().clamp_min(0.0) - x * y.clone() + softplus).mean()
        }
        (Loss::CrossEntropy, Targets::Class(y)) => {
            let log_probs = activation::log_softmax(pred, 1);
            let picked = log_probs.gather(1, y.clone().unsqueeze_dim::<2>(1));
            picked.mean().neg()
        }
        (loss, _) => unreachable!("targets for {loss:?} are built by the trainer to match"),
    }
}
