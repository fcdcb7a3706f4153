//! The losses, each the mean over the batch as in PyTorch's defaults, with
//! their gradient with respect to the model's output.

/// Which loss, with its settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LossConfig {
    /// Mean squared error.
    Mse,
    /// Mean absolute error.
    Mae,
    /// Squared error inside `|d| < delta`, absolute error outside.
    Huber {
        /// Where the loss turns from quadratic to linear.
        delta: f64,
    },
    /// Softmax cross-entropy of the logits against class indices.
    CrossEntropy,
    /// Binary cross-entropy of one logit per row against 0/1 targets.
    Bce,
}

/// A batch's targets, one per row.
#[derive(Debug, Clone, Copy)]
pub enum Targets<'a> {
    /// Numbers: regression values, or 0/1 for [`LossConfig::Bce`] (one per output element).
    Values(&'a [f32]),
    /// Class indices, for [`LossConfig::CrossEntropy`].
    Classes(&'a [u32]),
}

/// The mean loss of `pred` (`rows × width`, row-major) against `targets`,
/// and, when `grad` is given, its gradient with respect to `pred` written
/// there (same shape). Regression losses and bce average over every
/// element, cross-entropy over rows.
///
/// # Panics
/// If the targets do not fit the loss (classes for a regression loss, or
/// the other way round) or their count does not fit `pred`.
pub fn loss(config: LossConfig, pred: &[f32], width: usize, targets: Targets, grad: Option<&mut [f32]>) -> f64 {
    let rows = pred.len() / width.max(1);
    match (config, targets) {
        (LossConfig::CrossEntropy, Targets::Classes(y)) => cross_entropy(pred, width, y, grad),
        (LossConfig::CrossEntropy, Targets::Values(_)) => panic!("cross_entropy needs class targets"),
        (_, Targets::Classes(_)) => panic!("{config:?} needs numeric targets"),
        (_, Targets::Values(y)) => {
            assert_eq!(y.len(), pred.len(), "one target per output element ({rows} rows × {width})");
            elementwise(config, pred, y, grad)
        }
    }
}

/// The regression losses and bce: one term per element, averaged.
fn elementwise(config: LossConfig, pred: &[f32], y: &[f32], grad: Option<&mut [f32]>) -> f64 {
    let n = pred.len();
    let inv_n = 1.0 / n.max(1) as f64;
    // Each arm gives (term, d term / d pred) for one element, in f64.
    let term = |p: f32, t: f32| -> (f64, f64) {
        let (p, t) = (p as f64, t as f64);
        match config {
            LossConfig::Mse => ((p - t) * (p - t), 2.0 * (p - t)),
            LossConfig::Mae => ((p - t).abs(), sign(p - t)),
            LossConfig::Huber { delta } => {
                let d = p - t;
                if d.abs() < delta {
                    (0.5 * d * d, d)
                } else {
                    (delta * (d.abs() - 0.5 * delta), delta * sign(d))
                }
            }
            // max(x, 0) - x y + log(1 + e^-|x|); its derivative is sigmoid(x) - y.
            LossConfig::Bce => {
                let loss = p.max(0.0) - p * t + (-p.abs()).exp().ln_1p();
                (loss, 1.0 / (1.0 + (-p).exp()) - t)
            }
            LossConfig::CrossEntropy => unreachable!("handled by cross_entropy"),
        }
    };
    let mut sum = 0.0;
    match grad {
        Some(grad) => {
            for ((g, &p), &t) in grad.iter_mut().zip(pred).zip(y) {
                let (l, d) = term(p, t);
                sum += l;
                *g = (d * inv_n) as f32;
            }
        }
        None => sum = pred.iter().zip(y).map(|(&p, &t)| term(p, t).0).sum(),
    }
    sum * inv_n
}

/// The sign as Burn's `abs` differentiates it: 0 at 0.
fn sign(x: f64) -> f64 {
    if x > 0.0 {
        1.0
    } else if x < 0.0 {
        -1.0
    } else {
        0.0
    }
}

/// Mean over rows of `logsumexp(row) - row[y]`; the gradient is
/// `(softmax(row) - onehot(y)) / rows`.
fn cross_entropy(pred: &[f32], width: usize, y: &[u32], grad: Option<&mut [f32]>) -> f64 {
    let rows = pred.len() / width;
    assert_eq!(y.len(), rows, "one class per row");
    let inv_rows = 1.0 / rows.max(1) as f64;
    let mut sum = 0.0;
    let mut grad = grad;
    for (r, row) in pred.chunks_exact(width).enumerate() {
        let class = y[r] as usize;
        assert!(class < width, "class {class} of row {r} is not below the model's {width} outputs");
        let max = row.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v as f64));
        let z: f64 = row.iter().map(|&v| (v as f64 - max).exp()).sum();
        let lse = max + z.ln();
        sum += lse - row[class] as f64;
        if let Some(grad) = grad.as_deref_mut() {
            let g = &mut grad[r * width..(r + 1) * width];
            for (j, (g, &v)) in g.iter_mut().zip(row).enumerate() {
                let p = (v as f64 - lse).exp();
                let onehot = if j == class { 1.0 } else { 0.0 };
                *g = ((p - onehot) * inv_rows) as f32;
            }
        }
    }
    sum * inv_rows
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The loss's own value, nudged: its central difference must match the gradient.
    fn check_gradient(config: LossConfig, pred: &[f32], width: usize, targets: Targets) {
        let mut grad = vec![0.0; pred.len()];
        loss(config, pred, width, targets, Some(&mut grad));
        for i in 0..pred.len() {
            let h = 1e-3f32;
            let mut up = pred.to_vec();
            up[i] += h;
            let mut down = pred.to_vec();
            down[i] -= h;
            let numeric = (loss(config, &up, width, targets, None) - loss(config, &down, width, targets, None))
                / (2.0 * h as f64);
            assert!(
                (numeric - grad[i] as f64).abs() < 1e-3,
                "{config:?} element {i}: numeric {numeric}, analytic {}",
                grad[i]
            );
        }
    }

    #[test]
    fn values_match_the_definitions() {
        let pred = [1.0, 2.0, 5.0];
        let y = [1.5, 2.0, 2.0];
        let t = Targets::Values(&y);
        assert!((loss(LossConfig::Mse, &pred, 1, t, None) - (0.25 + 9.0) / 3.0).abs() < 1e-9);
        assert!((loss(LossConfig::Mae, &pred, 1, t, None) - 3.5 / 3.0).abs() < 1e-9);
        assert!((loss(LossConfig::Huber { delta: 1.0 }, &pred, 1, t, None) - (0.125 + 2.5) / 3.0).abs() < 1e-9);
        let s = |x: f64| 1.0 / (1.0 + (-x).exp());
        let bce = loss(LossConfig::Bce, &[0.0, 2.0, -100.0], 1, Targets::Values(&[1.0, 0.0, 0.0]), None);
        assert!((bce - (-(s(0.0)).ln() - (1.0 - s(2.0)).ln()) / 3.0).abs() < 1e-9);
        let ce = loss(LossConfig::CrossEntropy, &[1.0, 2.0, 3.0, 0.0, 0.0, 0.0], 3, Targets::Classes(&[2, 0]), None);
        let lse = (1f64.exp() + 2f64.exp() + 3f64.exp()).ln();
        assert!((ce - ((lse - 3.0) + 3f64.ln()) / 2.0).abs() < 1e-9);
    }

    #[test]
    fn gradients_match_central_differences() {
        let pred = [0.3, -1.2, 2.5, 0.05, -0.4, 1.7];
        let y = [0.1, -1.0, 0.0, 1.0, 0.0, 1.0];
        for config in [LossConfig::Mse, LossConfig::Mae, LossConfig::Huber { delta: 0.5 }, LossConfig::Bce] {
            check_gradient(config, &pred, 1, Targets::Values(&y));
        }
        check_gradient(LossConfig::CrossEntropy, &pred, 3, Targets::Classes(&[2, 0]));
    }
}
