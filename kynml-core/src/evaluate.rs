//! Running a model over a whole split: outputs, loss and metrics.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};

use burn::tensor::{FloatDType, Int, Tensor, TensorData};

use crate::data::{Batch, Dataset, Labels, Split};
use crate::metrics;
use crate::model::{Mode, Model};
use crate::spec::types::{Loss, Metric};
use crate::train::loss::{self, Targets};
use burn::DispatchDevice;
use kynml_backend::Backend as Kb;

/// Rows per forward pass when evaluating outside training; bounded so a
/// large split never needs one huge allocation.
const CHUNK: usize = 4096;

/// Raw model outputs for a split: `rows × width`, row-major.
pub struct Outputs {
    /// The outputs, `rows × width`, row-major: predicted values for regression, logits for classes.
    pub values: Vec<f32>,
    /// Outputs per row (the width of the model's last layer).
    pub width: usize,
    /// Mean loss over the split.
    pub loss: f64,
}

/// Forward the whole split in evaluation mode (running batchnorm statistics,
/// no dropout) on a device without autodiff, with the products in `half`
/// when given (a bf16 or fp16 run's validation, as its steps run them), in
/// fp32 otherwise.
///
/// `rows`, when given, is the number of rows the training steps run
/// (validation during training): every forward pass then takes exactly that
/// many, the last one filled up with repeats of its own rows whose outputs
/// are dropped. A GPU backend tunes and compiles kernels for each new size
/// of product it meets, so a pass of the steps' size meets none: a split of
/// 10,000 rows in passes of 4,096 would have made two sizes of its own
/// (4,096 and 1,808) for every layer's product, each a kernel search on a
/// run's first epoch. In evaluation mode every row's output depends on that
/// row alone, so the filling changes nothing. Without `rows`, passes take
/// [`CHUNK`] rows, the last one fewer.
///
/// # Panics
/// When `model` is not bound to `data` (its input width is not the data's:
/// Burn panics on the product's shapes), or the device fails inside Burn.
pub fn run_split(
    model: &Model<Kb>,
    data: &Dataset,
    split: Split,
    loss_kind: Loss,
    device: &DispatchDevice,
    half: Option<FloatDType>,
    rows: Option<usize>,
) -> Outputs {
    whole(run_split_until(model, data, split, loss_kind, device, half, rows, None))
}

/// [`run_split`], checking `stop` before each forward pass: `None` when it
/// was set before the last one (a stop asked for during validation).
#[allow(clippy::too_many_arguments)]
pub fn run_split_until(
    model: &Model<Kb>,
    data: &Dataset,
    split: Split,
    loss_kind: Loss,
    device: &DispatchDevice,
    half: Option<FloatDType>,
    rows: Option<usize>,
    stop: Option<&AtomicBool>,
) -> Option<Outputs> {
    let part = data.split(split);
    let n = part.len();
    let mut values = Vec::new();
    let mut width = 0;
    let mut loss_sum = 0.0;
    let mut scratch = Vec::new();
    let indices: Vec<usize> = (0..n).collect();
    let per_pass = rows.unwrap_or(CHUNK).max(1);
    for chunk in indices.chunks(per_pass) {
        if stop.is_some_and(|stop| stop.load(Ordering::SeqCst)) {
            return None;
        }
        let filled: Vec<usize>;
        let taken = match rows {
            Some(r) if chunk.len() < r => {
                filled = chunk.iter().copied().cycle().take(r).collect();
                &filled
            }
            _ => chunk,
        };
        let mut batch = Batch::default();
        data.gather(split, taken, &mut batch);
        let rows = batch.len();
        let x =
            Tensor::from_data(TensorData::new(std::mem::take(&mut batch.features), [rows, data.n_features()]), device);
        let mut out = model.forward_in(x, Mode::Eval, half);
        let [_, w] = out.dims();
        if taken.len() > chunk.len() {
            out = out.slice([0..chunk.len(), 0..w]);
            batch.labels.truncate(chunk.len());
        }
        width = w;
        let start = values.len();
        values.extend(out.into_data().convert::<f32>().into_vec::<f32>().expect("f32 outputs"));
        // Scored on the host in f64, as the native engine scores its passes.
        loss_sum += loss::host_loss(loss_kind, &values[start..], w, &batch.labels, &mut scratch) * chunk.len() as f64;
    }
    Some(Outputs { values, width, loss: loss_sum / n.max(1) as f64 })
}

/// The outputs of a pass over a split that had no stop flag to heed.
pub(crate) fn whole(outputs: Option<Outputs>) -> Outputs {
    outputs.unwrap_or_else(|| unreachable!("a pass without a stop flag runs to the end"))
}

/// The metrics the spec asked for, on these outputs.
///
/// An output that is not a finite number (a model that diverged on some
/// rows) makes every metric NaN: a NaN row has no class to count as right
/// or wrong, and scoring it as the first class (where comparisons with NaN
/// land) would report a plausible accuracy for a broken model. `kynml
/// eval` refuses such a row for the same reason.
///
/// # Panics
/// When `outputs` and `labels` hold different numbers of rows, or a class
/// label is not below `n_classes`: both come from the same split of one
/// [`Dataset`](crate::data::Dataset) and a model bound to it.
pub fn compute_metrics(
    outputs: &Outputs,
    labels: &Labels,
    loss_kind: Loss,
    wanted: &[Metric],
    n_classes: usize,
) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    match labels {
        Labels::Values(y) => {
            let pred: Vec<f32> = outputs.values.iter().step_by(outputs.width.max(1)).copied().collect();
            for m in wanted {
                let v = match m {
                    Metric::Mae => metrics::mae(&pred, y),
                    Metric::Mse => metrics::mse(&pred, y),
                    Metric::Rmse => metrics::rmse(&pred, y),
                    Metric::R2 => metrics::r2(&pred, y),
                    _ => continue,
                };
                out.insert(m.name().to_string(), v);
            }
        }
        Labels::Classes(y) => {
            let pred = predicted_classes(outputs, loss_kind);
            for m in wanted {
                let v = match m {
                    Metric::Accuracy => metrics::accuracy(&pred, y),
                    Metric::Precision => metrics::precision_macro(&pred, y, n_classes),
                    Metric::Recall => metrics::recall_macro(&pred, y, n_classes),
                    Metric::F1 => metrics::f1_macro(&pred, y, n_classes),
                    _ => continue,
                };
                out.insert(m.name().to_string(), v);
            }
        }
    }
    if outputs.values.iter().any(|v| !v.is_finite()) {
        out.values_mut().for_each(|v| *v = f64::NAN);
    }
    out
}

/// Class decisions: argmax of the logits, or logit > 0 for `bce`.
pub fn predicted_classes(outputs: &Outputs, loss_kind: Loss) -> Vec<u32> {
    decide_classes(&outputs.values, outputs.width, loss_kind)
}

/// [`predicted_classes`] on logits `width` to a row: the first of tied
/// logits, and for `bce` the second class only above 0.
pub fn decide_classes(values: &[f32], width: usize, loss_kind: Loss) -> Vec<u32> {
    values
        .chunks(width.max(1))
        .map(|row| {
            if loss_kind == Loss::Bce {
                u32::from(row[0] > 0.0)
            } else {
                let mut best = 0;
                for (i, v) in row.iter().enumerate() {
                    if *v > row[best] {
                        best = i;
                    }
                }
                best as u32
            }
        })
        .collect()
}

/// A batch as tensors on `device`; its buffers move into the tensors
/// rather than being copied.
pub(crate) fn batch_tensors(
    batch: Batch,
    width: usize,
    loss_kind: Loss,
    device: &DispatchDevice,
) -> (Tensor<Kb, 2>, Targets) {
    let rows = batch.len();
    let x = Tensor::from_data(TensorData::new(batch.features, [rows, width]), device);
    (x, targets_tensor(batch.labels, loss_kind, device))
}

fn targets_tensor(labels: Labels, loss_kind: Loss, device: &DispatchDevice) -> Targets {
    match (labels, loss_kind) {
        (Labels::Classes(c), Loss::CrossEntropy) => {
            let idx: Vec<i64> = c.iter().map(|&v| v as i64).collect();
            let n = idx.len();
            Targets::Class(Tensor::<Kb, 1, Int>::from_data(TensorData::new(idx, [n]), device))
        }
        (Labels::Classes(c), _) => {
            let y: Vec<f32> = c.iter().map(|&v| v as f32).collect();
            let n = y.len();
            Targets::Float(Tensor::from_data(TensorData::new(y, [n, 1]), device))
        }
        (Labels::Values(v), _) => {
            let n = v.len();
            Targets::Float(Tensor::from_data(TensorData::new(v, [n, 1]), device))
        }
    }
}

/// Reading one scalar back from the device.
pub(crate) trait IntoScalarF64 {
    fn into_scalar_f64(self) -> f64;
}

impl IntoScalarF64 for Tensor<Kb, 1> {
    fn into_scalar_f64(self) -> f64 {
        self.into_data().convert::<f64>().into_vec::<f64>().map(|v| v[0]).unwrap_or(f64::NAN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outputs(values: Vec<f32>, width: usize) -> Outputs {
        Outputs { values, width, loss: f64::NAN }
    }

    #[test]
    fn a_row_whose_outputs_are_not_numbers_makes_every_metric_nan() {
        let all = [Metric::Accuracy, Metric::F1, Metric::Precision, Metric::Recall];
        // Row 2's logits are NaN and its class is 0, where NaN comparisons land.
        let labels = Labels::Classes(vec![1, 0, 1]);
        let bad = outputs(vec![0.0, 2.0, f32::NAN, f32::NAN, 0.0, 3.0], 2);
        let scores = compute_metrics(&bad, &labels, Loss::CrossEntropy, &all, 2);
        assert_eq!(scores.len(), all.len());
        assert!(scores.values().all(|v| v.is_nan()), "{scores:?}");
        let bce = compute_metrics(&outputs(vec![1.0, f32::NAN, 2.0], 1), &labels, Loss::Bce, &all, 2);
        assert!(bce.values().all(|v| v.is_nan()), "{bce:?}");
        // The same rows with finite logits score as usual: all three right.
        let good = outputs(vec![0.0, 2.0, 1.0, 0.0, 0.0, 3.0], 2);
        assert_eq!(compute_metrics(&good, &labels, Loss::CrossEntropy, &all, 2)["accuracy"], 1.0);
    }

    #[test]
    fn an_infinite_prediction_of_a_constant_target_is_not_scored_as_r2_zero() {
        let labels = Labels::Values(vec![2.0, 2.0, 2.0]);
        let wanted = [Metric::R2, Metric::Mae];
        let scores = compute_metrics(&outputs(vec![2.0, f32::INFINITY, 2.0], 1), &labels, Loss::Mse, &wanted, 0);
        assert!(scores["r2"].is_nan() && scores["mae"].is_nan(), "{scores:?}");
        let scores = compute_metrics(&outputs(vec![2.0, 2.5, 2.0], 1), &labels, Loss::Mse, &wanted, 0);
        assert_eq!(scores["r2"], 0.0);
    }
}
