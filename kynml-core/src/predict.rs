//! Predictions from a trained model: raw feature rows in, outputs (and, for
//! classes, probabilities and class names) out. The stored normalisation is
//! applied here, so callers pass rows exactly as their data holds them.
//!
//! ```no_run
//! use kynml_core::predict::Predictor;
//!
//! let device = kynml_backend::select(kynml_backend::DeviceChoice::Cpu)?;
//! // A run folder, or a .safetensors / .mpk export with its .json sidecar.
//! let predictor = Predictor::load("runs/iris-20261121-101500".as_ref(), &device)?;
//! let rows = [5.1, 3.5, 1.4, 0.2, 6.7, 3.0, 5.2, 2.3]; // two flowers, raw measurements
//! let p = predictor.predict(&rows)?;
//! println!("{:?}", p.labels); // Some(["setosa", "virginica"])
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use burn::tensor::{Tensor, TensorData};
use burn::DispatchDevice;

use crate::data::{DataError, Labels, ModelRows};
use crate::evaluate::{compute_metrics, Outputs};
use crate::export::{self, ExportError, ExportModel, Head};
use crate::model::{Mode, Model};
use crate::spec::types::{Loss, Metric};
use kynml_backend::{Backend as Kb, Device};

/// Rows per forward pass.
const CHUNK: usize = 4096;

/// A trained model ready to predict on a device.
pub struct Predictor {
    /// The model as host data: layers, normalisation, names.
    pub model: ExportModel,
    module: Model<Kb>,
    device: DispatchDevice,
}

/// What [`Predictor::predict`] returns for `rows` input rows.
#[derive(Debug, Clone, PartialEq)]
pub struct Predictions {
    /// Number of input rows.
    pub rows: usize,
    /// The model's outputs, `rows × width`, row-major: the predicted values
    /// for regression, logits for classes.
    pub outputs: Vec<f32>,
    /// Outputs per row (the model's output width).
    pub width: usize,
    /// For classes: `rows × class_names.len()`, column `i` is the
    /// probability of `class_names[i]`.
    pub probabilities: Option<Vec<f32>>,
    /// For classes: the most probable class of each row.
    pub labels: Option<Vec<String>>,
}

impl Predictor {
    /// Builds the model on `device`, ready to predict.
    pub fn new(model: ExportModel, device: &Device) -> Self {
        let device = device.inner();
        Predictor { module: export::to_model(&model, &device), model, device }
    }

    /// Loads a run folder or an export (see [`export::load`]).
    pub fn load(path: &Path, device: &Device) -> Result<Self, ExportError> {
        Ok(Self::new(export::load(path)?, device))
    }

    /// Predicts on `rows`, row-major with the model's features in its order
    /// ([`ExportModel::feature_names`]), raw as the data holds them. A row
    /// that the model cannot give a number for is an error naming the row
    /// (1-based): a value the stored normalisation takes beyond an f32, or
    /// an output that overflows (no class is named for a NaN).
    pub fn predict(&self, rows: &[f32]) -> Result<Predictions, String> {
        self.run(rows).map_err(|e| e.to_string())
    }

    /// [`predict`](Self::predict) on rows read from a file, with an error
    /// located at the row's line.
    pub fn predict_rows(&self, rows: &ModelRows) -> Result<Predictions, String> {
        self.run(&rows.features).map_err(|e| match e.row() {
            Some(row) => {
                let line = rows.lines.get(row).map_or(String::new(), |l| format!(":{l}"));
                format!("{}{line}: {}", rows.path.display(), e.what())
            }
            None => e.to_string(),
        })
    }

    fn run(&self, rows: &[f32]) -> Result<Predictions, Unpredictable> {
        let width_in = self.model.input;
        if width_in == 0 || !rows.len().is_multiple_of(width_in) {
            return Err(Unpredictable::Shape(format!(
                "{} values are not whole rows of {width_in} features",
                rows.len()
            )));
        }
        let n = rows.len() / width_in;
        let width = self.model.output();
        let mut outputs = Vec::with_capacity(n * width);
        for (c, chunk) in rows.chunks(CHUNK * width_in).enumerate() {
            // One copy per chunk: normalised in place, then moved into the tensor.
            let mut x = chunk.to_vec();
            if let Some((mean, std)) = &self.model.normalizer {
                for (r, row) in x.chunks_exact_mut(width_in).enumerate() {
                    for (i, ((v, m), s)) in row.iter_mut().zip(mean).zip(std).enumerate() {
                        let raw = *v;
                        *v = (raw - m) / s;
                        // NaN is a sequence's padding (absent positions); a
                        // finite value must stay finite.
                        if raw.is_finite() && !v.is_finite() {
                            let name = self.model.feature_names.get(i).filter(|_| width_in == mean.len());
                            return Err(Unpredictable::Range {
                                row: c * CHUNK + r,
                                feature: name.map_or_else(|| format!("value {}", i + 1), |n| format!("`{n}`")),
                                value: raw,
                                mean: *m,
                                std: *s,
                            });
                        }
                    }
                }
            }
            let t = Tensor::<Kb, 2>::from_data(TensorData::new(x, [chunk.len() / width_in, width_in]), &self.device);
            let y = self.module.forward(t, Mode::Eval);
            let y =
                y.into_data().convert::<f32>().into_vec::<f32>().map_err(|e| Unpredictable::Shape(format!("{e:?}")))?;
            if let Some(r) = y.chunks(width.max(1)).position(|row| row.iter().any(|v| !v.is_finite())) {
                return Err(Unpredictable::Overflow { row: c * CHUNK + r });
            }
            outputs.extend(y);
        }
        let probabilities = self.model.probabilities(&outputs);
        let labels = match (&probabilities, self.model.head.class_names()) {
            (Some(p), names) if !names.is_empty() => Some(
                p.chunks(names.len())
                    .map(|row| {
                        let best = row.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).map_or(0, |(i, _)| i);
                        names[best].clone()
                    })
                    .collect(),
            ),
            _ => None,
        };
        Ok(Predictions { rows: n, outputs, width, probabilities, labels })
    }

    /// Predicts on rows read with [`read_model_rows`](crate::data::read_model_rows)
    /// and scores them against their target column: regression gets mae,
    /// mse, rmse and r2; classes get accuracy and macro precision, recall
    /// and f1. A label the model has no class for, or a non-numeric
    /// regression target, is an error naming its row.
    pub fn evaluate(&self, data: &ModelRows) -> Result<BTreeMap<String, f64>, EvalError> {
        let Some(targets) = &data.targets else {
            return Err(EvalError::NoTarget(self.model.target.clone()));
        };
        let p = self.predict_rows(data).map_err(EvalError::Predict)?;
        let outputs = Outputs { values: p.outputs, width: p.width, loss: f64::NAN };
        let names = self.model.head.class_names();
        let column = data.target_column;
        let (labels, loss, metrics) = match &self.model.head {
            Head::Regression => {
                let values = targets
                    .iter()
                    .map(|(line, text)| {
                        text.parse::<f32>().ok().filter(|v| v.is_finite()).ok_or_else(|| DataError::NonFinite {
                            path: data.path.clone(),
                            row: *line,
                            column,
                            column_name: self.model.target.clone(),
                            value: text.clone(),
                        })
                    })
                    .collect::<Result<Vec<f32>, _>>()?;
                (Labels::Values(values), Loss::Mse, vec![Metric::Mae, Metric::Mse, Metric::Rmse, Metric::R2])
            }
            head => {
                let classes = targets
                    .iter()
                    .map(|(line, text)| {
                        names.iter().position(|n| n == text).map(|i| i as u32).ok_or_else(|| DataError::UnknownClass {
                            path: data.path.clone(),
                            row: *line,
                            column,
                            column_name: self.model.target.clone(),
                            value: text.clone(),
                            known: names.to_vec(),
                        })
                    })
                    .collect::<Result<Vec<u32>, _>>()?;
                let loss = if matches!(head, Head::Sigmoid { .. }) { Loss::Bce } else { Loss::CrossEntropy };
                (Labels::Classes(classes), loss, vec![Metric::Accuracy, Metric::Precision, Metric::Recall, Metric::F1])
            }
        };
        Ok(compute_metrics(&outputs, &labels, loss, &metrics, names.len()))
    }
}

/// Why a row gets no prediction.
#[derive(Debug, thiserror::Error)]
enum Unpredictable {
    #[error("{0}")]
    Shape(String),
    #[error("row {}: {}", row + 1, self.what())]
    Range { row: usize, feature: String, value: f32, mean: f32, std: f32 },
    #[error("row {}: {}", row + 1, self.what())]
    Overflow { row: usize },
}

impl Unpredictable {
    /// The row (0-based) it concerns.
    fn row(&self) -> Option<usize> {
        match self {
            Unpredictable::Shape(_) => None,
            Unpredictable::Range { row, .. } | Unpredictable::Overflow { row } => Some(*row),
        }
    }

    /// What is wrong with the row, without its place.
    fn what(&self) -> String {
        match self {
            Unpredictable::Shape(why) => why.clone(),
            Unpredictable::Range { feature, value, mean, std, .. } => format!(
                "{feature} = {value:e} is beyond what the model can take: normalised with the training rows' mean \
                 {mean:.4} and spread {std:.4}, it exceeds a 32-bit float (about 3.4e38)"
            ),
            Unpredictable::Overflow { .. } => "the model's output for this row is not a finite number: its values \
                 overflow the model's 32-bit arithmetic (values far beyond those it was trained on?)"
                .into(),
        }
    }
}

/// Why [`Predictor::evaluate`] cannot score rows.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    /// The rows have no target column; holds the model's target name.
    #[error("the file has no `{0}` column (the model's target) to score the predictions against")]
    NoTarget(String),
    /// A target value the model cannot score: not a finite number for regression, or an unknown class.
    #[error(transparent)]
    Data(#[from] DataError),
    /// The rows could not be predicted on; holds the reason.
    #[error("{0}")]
    Predict(String),
}
