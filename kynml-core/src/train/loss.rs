//! Loss functions, each the mean over the batch as in PyTorch's defaults.

use burn::tensor::{activation, Int, Tensor};

use crate::data::Labels;
use crate::spec::types::Loss;
use kynml_backend::Backend as Kb;
use kynml_cpu::{LossConfig, Targets as HostTargets};

/// Targets of one batch, in the form its loss needs.
#[derive(Debug, Clone)]
pub enum Targets {
    /// `[batch, 1]`: regression values, or 0/1 labels for `bce`.
    Float(Tensor<Kb, 2>),
    /// `[batch]`: class indices for `cross_entropy`.
    Class(Tensor<Kb, 1, Int>),
}

/// The native engine's form of `loss`.
pub(crate) fn host_config(loss: Loss) -> LossConfig {
    match loss {
        Loss::Mse => LossConfig::Mse,
        Loss::Mae => LossConfig::Mae,
        Loss::Huber { delta } => LossConfig::Huber { delta },
        Loss::CrossEntropy => LossConfig::CrossEntropy,
        Loss::Bce => LossConfig::Bce,
    }
}

/// `labels` as the native engine's losses take them (`bce`'s 0/1 classes
/// as numbers, in `scratch`).
pub(crate) fn host_targets<'a>(labels: &'a Labels, loss: Loss, scratch: &'a mut Vec<f32>) -> HostTargets<'a> {
    match (labels, loss) {
        (Labels::Classes(c), Loss::CrossEntropy) => HostTargets::Classes(c),
        (Labels::Classes(c), _) => {
            scratch.clear();
            scratch.extend(c.iter().map(|&v| v as f32));
            HostTargets::Values(scratch)
        }
        (Labels::Values(v), _) => HostTargets::Values(v),
    }
}

/// The mean loss of outputs already on the host (`rows × width`), in f64:
/// how every engine scores a validation or evaluation pass, so that a
/// split's loss is one number whichever device ran the forward pass (a
/// device's fp32 sum of a split's squared errors can overflow where the
/// rows' own outputs do not).
pub(crate) fn host_loss(loss: Loss, out: &[f32], width: usize, labels: &Labels, scratch: &mut Vec<f32>) -> f64 {
    kynml_cpu::loss::loss(host_config(loss), out, width, host_targets(labels, loss, scratch), None)
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

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::TensorData;

    fn dev() -> burn::DispatchDevice {
        kynml_backend::Device::cpu().inner()
    }

    fn col(v: &[f32]) -> Tensor<Kb, 2> {
        Tensor::from_data(TensorData::new(v.to_vec(), [v.len(), 1]), &dev())
    }

    fn value(loss: Loss, pred: Tensor<Kb, 2>, y: &Targets) -> f64 {
        compute(loss, pred, y).into_data().convert::<f64>().into_vec::<f64>().unwrap()[0]
    }

    #[test]
    fn regression_losses_match_hand_computed_values() {
        let pred = col(&[1.0, 2.0, 5.0]);
        let y = Targets::Float(col(&[1.5, 2.0, 2.0]));
        // errors -0.5, 0, 3
        assert!((value(Loss::Mse, pred.clone(), &y) - (0.25 + 0.0 + 9.0) / 3.0).abs() < 1e-6);
        assert!((value(Loss::Mae, pred.clone(), &y) - (0.5 + 0.0 + 3.0) / 3.0).abs() < 1e-6);
        // huber(delta=1): 0.5*0.25, 0, 1*(3 - 0.5)
        assert!((value(Loss::Huber { delta: 1.0 }, pred, &y) - (0.125 + 0.0 + 2.5) / 3.0).abs() < 1e-6);
    }

    #[test]
    fn bce_on_logits_matches_the_definition_and_is_stable() {
        // -[y log s(x) + (1-y) log(1-s(x))] for x = 0 (y=1), 2 (y=0), -100 (y=0)
        let s = |x: f64| 1.0 / (1.0 + (-x).exp());
        let expected = (-(s(0.0)).ln() - (1.0 - s(2.0)).ln() + 0.0) / 3.0;
        let got = value(Loss::Bce, col(&[0.0, 2.0, -100.0]), &Targets::Float(col(&[1.0, 0.0, 0.0])));
        assert!((got - expected).abs() < 1e-6, "{got} vs {expected}");
    }

    #[test]
    fn cross_entropy_matches_log_softmax_by_hand() {
        let logits = Tensor::<Kb, 2>::from_data(TensorData::new(vec![1.0f32, 2.0, 3.0, 0.0, 0.0, 0.0], [2, 3]), &dev());
        let y = Targets::Class(Tensor::from_data(TensorData::new(vec![2i64, 0], [2]), &dev()));
        let lse = (1f64.exp() + 2f64.exp() + 3f64.exp()).ln();
        let expected = ((lse - 3.0) + 3f64.ln()) / 2.0;
        let got = value(Loss::CrossEntropy, logits, &y);
        assert!((got - expected).abs() < 1e-6, "{got} vs {expected}");
    }
}
