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
//!
//! // Rows as text (a request's CSV body, categorical and text columns
//! // included): read by column name, as `kynml predict` reads a file.
//! let body = b"sepal_length_cm,sepal_width_cm,petal_length_cm,petal_width_cm\n5.1,3.5,1.4,0.2\n";
//! let rows = predictor.model().read_rows_from(body, "request".as_ref(), false)?;
//! let p = predictor.predict_rows(&rows)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! A [`Predictor`] is `Send + Sync` and holds no lock while it predicts:
//! one can serve requests from many threads at once (from async code, in
//! `spawn_blocking`: a pass blocks its thread). On the native CPU engine,
//! where a pass runs on every core, at most four passes run at once (as many
//! as there are cores, if fewer), each on a network of its own, a copy of
//! the weights; a further request waits for one to end. On Burn's backends
//! (a GPU, or the CPU where the native engine lacks a layer) passes are not
//! limited: each concurrent call runs its own, of up to 4,096 rows, so a
//! service bounds its own concurrency there.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex, PoisonError};

use burn::tensor::{Tensor, TensorData};
use burn::DispatchDevice;

use crate::data::{DataError, Labels, ModelRows};
use crate::evaluate::{compute_metrics, decide_classes, Outputs};
use crate::export::{self, ExportError, ExportModel, Head};
use crate::metrics;
use crate::model::{Mode, Model};
use crate::spec::types::{Loss, Metric};
use crate::train::native::{evaluation_rows, native_configs, network, EngineKind};
use kynml_backend::{Backend as Kb, Device};
use kynml_cpu::{LayerConfig, Net};

/// Rows per forward pass, at most.
const CHUNK: usize = 4096;

/// Values a forward pass may hold at once, about 256 MiB in fp32: a model
/// whose rows are large (an image through a wide convolution) takes fewer
/// rows per pass than [`CHUNK`], so one request cannot ask the device for
/// gigabytes.
const PASS_VALUES: u64 = 64 << 20;

/// A trained model ready to predict on a device.
pub struct Predictor {
    model: ExportModel,
    module: Model<Kb>,
    device: DispatchDevice,
    /// Rows per forward pass: a power of two, at most [`CHUNK`].
    chunk: usize,
    /// On the CPU, the native engine's networks where it has every layer.
    native: Option<NativeNets>,
    /// On the CPU, why the native engine does not predict this model.
    not_native: Option<String>,
}

/// The native CPU engine's networks for a model: on the CPU a pass runs on
/// every core through them, as training's validation does (Burn's CPU
/// backend ran it on one, at a third of training's speed on a CNN). A pass
/// takes an idle network, or builds one from the weights when every one is
/// busy (requests from several threads), and puts it back: the lock is held
/// only to take and return one, never during a pass. There are at most
/// [`max_networks`] of them: each holds a copy of the weights, its pass
/// buffers and a thread for every other core, and each pass already runs on
/// every core, so beyond that a pass waits for a network (once, every
/// concurrent caller built one and kept it).
struct NativeNets {
    /// Rows per pass that keep a network's buffers within what training's
    /// validation gives them (a power of two).
    rows: usize,
    layers: Vec<LayerConfig>,
    channels: usize,
    pool: Mutex<Pool>,
    /// Signalled when a network is put back or dropped.
    returned: Condvar,
    /// At most this many networks at once.
    limit: usize,
}

/// The networks not in a pass, and how many there are in all.
struct Pool {
    idle: Vec<Net>,
    built: usize,
}

/// Networks a predictor keeps at most: one for each core, at most 4.
fn max_networks() -> usize {
    rayon::current_num_threads().clamp(1, 4)
}

impl NativeNets {
    /// The networks for `model`, where the native engine has its every
    /// layer; one is built at once, so that weights it cannot take are
    /// found here (then Burn predicts, as it would have). Otherwise why not.
    fn new(model: &ExportModel, module: &Model<Kb>) -> Result<Self, String> {
        let layers = native_configs(&model.shape, model.layers.iter().map(|l| &l.spec))?;
        let channels = crate::model::sequence_channels(&model.shape);
        let first = network(model.input, &layers, channels, module)?;
        let rows = 1 << evaluation_rows(first.values_per_row(), CHUNK).ilog2();
        Ok(NativeNets {
            rows,
            layers,
            channels,
            pool: Mutex::new(Pool { idle: vec![first], built: 1 }),
            returned: Condvar::new(),
            limit: max_networks(),
        })
    }

    /// The outputs of `x` (normalised rows) in evaluation mode.
    fn predict(&self, x: &[f32], input: usize, module: &Model<Kb>) -> Result<Vec<f32>, PredictError> {
        let mut net = self.take(input, module)?;
        let mut out = Vec::new();
        let pass = kynml_backend::catch_quietly(|| net.predict(x, &mut out))
            .map_err(|panic| PredictError::Backend(kynml_backend::panic_words(panic.as_ref())));
        let mut pool = self.lock();
        match pass {
            Ok(()) => pool.idle.push(net),
            // A network that failed mid-pass is dropped, not put back.
            Err(_) => pool.built -= 1,
        }
        drop(pool);
        self.returned.notify_one();
        pass.map(|()| out)
    }

    /// An idle network; a new one while there are fewer than `limit`, or
    /// the first put back.
    fn take(&self, input: usize, module: &Model<Kb>) -> Result<Net, PredictError> {
        let mut pool = self.lock();
        loop {
            if let Some(net) = pool.idle.pop() {
                return Ok(net);
            }
            if pool.built < self.limit {
                pool.built += 1;
                drop(pool);
                // Built outside the lock: others take and return meanwhile.
                let net = network(input, &self.layers, self.channels, module);
                if net.is_err() {
                    self.lock().built -= 1;
                    self.returned.notify_one();
                }
                return net.map_err(PredictError::Backend);
            }
            pool = self.returned.wait(pool).unwrap_or_else(PoisonError::into_inner);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pool> {
        self.pool.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Networks built and kept (idle or in a pass).
    #[cfg(test)]
    fn built(&self) -> usize {
        self.lock().built
    }
}

// Services share one predictor between request threads: keep it so.
const _: fn() = || {
    fn shared<T: Send + Sync>() {}
    shared::<Predictor>();
};

impl std::fmt::Debug for Predictor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Predictor")
            .field("input", &self.model.input)
            .field("layers", &self.model.layers.len())
            .field("output", &self.model.output())
            .field("target", &self.model.target)
            .field("device", &self.device)
            .finish_non_exhaustive()
    }
}

/// Rows per forward pass of `model`: [`CHUNK`], or fewer (a power of two,
/// at least 1) where a pass of them would hold more than [`PASS_VALUES`] at
/// its largest moment, a layer's input and output together (with a
/// convolution's padded input and patches, attention's scores).
fn pass_chunk(model: &ExportModel) -> usize {
    use crate::model::LayerSpec;
    fn moment(layer: &LayerSpec, input: &crate::model::Shape) -> (u64, crate::model::Shape) {
        let out = layer.output(input).unwrap_or_else(|_| input.clone());
        let mut values =
            (input.size() as u64).saturating_add(out.size() as u64).saturating_add(layer.attention_scores(input));
        if let LayerSpec::Conv(c) = layer {
            values = values.saturating_add(c.padded_values(input)).saturating_add(c.patch_values(input));
        }
        let mut inner = input.clone();
        for child in layer.children() {
            let (v, next) = moment(child, &inner);
            values = values.max(v);
            inner = next;
        }
        (values, out)
    }
    let mut shape = model.shape.clone();
    let mut most = shape.size() as u64;
    for layer in &model.layers {
        let (values, next) = moment(&layer.spec, &shape);
        most = most.max(values);
        shape = next;
    }
    let rows = (PASS_VALUES / most.max(1)).clamp(1, CHUNK as u64) as usize;
    1 << rows.ilog2()
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
    /// Builds the model on `device`, ready to predict. A model whose layers,
    /// shapes, names or tensors do not fit together (see
    /// [`ExportModel::validate`]) is an error, not a model with made-up weights.
    pub fn new(model: ExportModel, device: &Device) -> Result<Self, ExportError> {
        let device = device.inner();
        let module = export::to_model(&model, &device)?;
        let (native, not_native) = match device {
            DispatchDevice::Flex(_) => match NativeNets::new(&model, &module) {
                Ok(nets) => (Some(nets), None),
                Err(why) => (None, Some(why)),
            },
            _ => (None, None),
        };
        let chunk = pass_chunk(&model).min(native.as_ref().map_or(CHUNK, |n| n.rows));
        Ok(Predictor { module, model, device, chunk, native, not_native })
    }

    /// The engine that predicts: KynML's native CPU engine on the CPU where
    /// it has every layer of the model, the device's Burn backend
    /// otherwise. The two agree within fp32 rounding, except on rows whose
    /// values overflow inside the model (see [`PredictError::Overflow`]).
    pub fn engine(&self) -> EngineKind {
        if self.native.is_some() {
            EngineKind::Native
        } else {
            EngineKind::Burn
        }
    }

    /// On the CPU, why Burn's CPU backend predicts instead of the native
    /// engine (a layer that engine lacks), said as a note; `None` elsewhere.
    pub fn engine_note(&self) -> Option<String> {
        self.not_native.as_ref().map(|why| {
            format!(
                "the native CPU engine cannot predict this model ({why}): Burn's CPU backend predicts it, on one \
                 core"
            )
        })
    }

    /// Loads a run folder or an export (see [`export::load`]).
    pub fn load(path: &Path, device: &Device) -> Result<Self, ExportError> {
        Self::new(export::load(path)?, device)
    }

    /// The model as host data: layers, normalisation, feature and class
    /// names, vocabularies.
    pub fn model(&self) -> &ExportModel {
        &self.model
    }

    /// Rows per forward pass: rows are predicted this many at a time (the
    /// last pass of a call padded up to a power of two), and a row's last
    /// bit may depend on its pass. A caller that predicts a stream in parts
    /// gets the predictions of the whole when each part but the last holds
    /// a multiple of it.
    pub fn rows_per_pass(&self) -> usize {
        self.chunk
    }

    /// Predicts on `rows`, row-major with the model's features in its order
    /// ([`ExportModel::feature_names`]), raw as the data holds them, but a
    /// categorical or text feature as its index in the model's vocabulary
    /// ([`ExportModel::read_rows_from`] turns text into them). A row that
    /// the model cannot give a number for is an error naming the row: an
    /// index the vocabulary does not have, a value the stored normalisation
    /// takes beyond an f32, or an output that overflows (no class is named
    /// for a NaN). A device that fails in the pass (out of memory, lost) is
    /// [`PredictError::Backend`], not a panic; rows go through the device
    /// [`pass_size`](Self::pass_size) at a time, so a large request holds
    /// no more memory than one pass.
    pub fn predict(&self, rows: &[f32]) -> Result<Predictions, PredictError> {
        self.run(rows)
    }

    /// [`predict`](Self::predict) on rows read from a file or text, with an
    /// error located at the row's line.
    pub fn predict_rows(&self, rows: &ModelRows) -> Result<Predictions, RowsError> {
        // Rows read for another model (or built by hand) can hold whole rows
        // of this model's width and still not be `rows.rows` of them.
        if rows.features.len() != rows.rows.saturating_mul(self.model.input) {
            let error = PredictError::Rows { rows: rows.rows, values: rows.features.len(), features: self.model.input };
            return Err(RowsError { path: rows.path.clone(), line: None, error });
        }
        self.run(&rows.features).map_err(|error| RowsError {
            path: rows.path.clone(),
            line: error.row().and_then(|row| rows.lines.get(row).copied()),
            error,
        })
    }

    fn run(&self, rows: &[f32]) -> Result<Predictions, PredictError> {
        let width_in = self.model.input;
        if width_in == 0 || !rows.len().is_multiple_of(width_in) {
            return Err(PredictError::Shape { values: rows.len(), features: width_in });
        }
        let n = rows.len() / width_in;
        let width = self.model.output();
        let mut outputs = Vec::with_capacity(n * width);
        let per = self.chunk;
        for (c, chunk) in rows.chunks(per * width_in).enumerate() {
            self.check_indices(chunk, c * per)?;
            self.check_finite(chunk, c * per)?;
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
                            return Err(PredictError::Range {
                                row: c * per + r,
                                feature: self.feature(i),
                                value: raw,
                                mean: *m,
                                std: *s,
                            });
                        }
                    }
                }
            }
            let rows_in = chunk.len() / width_in;
            let pass = self.pass_rows(rows_in);
            // Filled up with repeats of its own rows, whose outputs are
            // dropped: in evaluation mode a row's output is its own.
            for r in rows_in..pass {
                x.extend_from_within((r % rows_in) * width_in..(r % rows_in + 1) * width_in);
            }
            let mut y = match &self.native {
                Some(nets) => nets.predict(&x, width_in, &self.module)?,
                None => {
                    // A device that fails (out of memory, lost) panics inside
                    // Burn: an error for the caller, not an unwinding service.
                    let y = kynml_backend::catch_quietly(|| {
                        let t = Tensor::<Kb, 2>::from_data(TensorData::new(x, [pass, width_in]), &self.device);
                        self.module.forward(t, Mode::Eval).into_data()
                    })
                    .map_err(|panic| PredictError::Backend(kynml_backend::panic_words(panic.as_ref())))?;
                    y.convert::<f32>().into_vec::<f32>().map_err(|e| PredictError::Backend(format!("{e:?}")))?
                }
            };
            y.truncate(rows_in * width);
            if let Some(r) = y.chunks(width.max(1)).position(|row| row.iter().any(|v| !v.is_finite())) {
                return Err(PredictError::Overflow { row: c * per + r });
            }
            outputs.extend(y);
        }
        let probabilities = self.model.probabilities(&outputs);
        // Decided from the logits as training and `evaluate` decide (the
        // first of tied logits; a sigmoid's logit above 0), not from the
        // probabilities, which f32 rounding can tie where the logits differ.
        let labels = match &self.model.head {
            head if head.class_names().is_empty() => None,
            head => {
                let loss = if matches!(head, Head::Sigmoid { .. }) { Loss::Bce } else { Loss::CrossEntropy };
                let names = head.class_names();
                Some(decide_classes(&outputs, width, loss).into_iter().map(|c| names[c as usize].clone()).collect())
            }
        };
        Ok(Predictions { rows: n, outputs, width, probabilities, labels })
    }

    /// Rows per forward pass (a power of two): fewer than 4096 where a
    /// row's largest moment is large.
    pub fn pass_size(&self) -> usize {
        self.chunk
    }

    /// The rows of a forward pass for `rows` rows. A GPU backend tunes and
    /// compiles kernels for each new size of product it meets: a service's
    /// requests of every size from 1 to 4,096 rows would each meet a search
    /// of their own, so on a GPU a pass takes the next power of two (13 sizes
    /// at most). The CPU runs the rows as they are.
    fn pass_rows(&self, rows: usize) -> usize {
        match self.device {
            DispatchDevice::Flex(_) => rows,
            _ => rows.next_power_of_two(),
        }
    }

    /// Feature `i` as an error names it.
    fn feature(&self, i: usize) -> String {
        self.model.feature_names.get(i).map_or_else(|| format!("value {}", i + 1), |n| format!("`{n}`"))
    }

    /// Every value of `rows` (the first being row `first`) is a number: NaN
    /// only where a sequence model's positions are padded, infinities never
    /// (a row read from a file is checked as it is read; rows built in code
    /// are checked here).
    fn check_finite(&self, rows: &[f32], first: usize) -> Result<(), PredictError> {
        let channels = self.model.sequence.as_ref().map(|s| s.channels());
        if let Some(i) = rows.iter().position(|v| v.is_infinite() || (v.is_nan() && channels.is_none())) {
            return Err(PredictError::NotFinite {
                row: first + i / self.model.input,
                feature: self.feature(i % self.model.input),
                value: rows[i],
            });
        }
        // An absent position is NaN in every channel: the model reads a
        // position's presence from its first, and a NaN among numbers
        // would be taken for 0.
        if let Some(c) = channels.filter(|c| *c > 1) {
            for (p, position) in rows.chunks_exact(c).enumerate() {
                let absent = position[0].is_nan();
                if let Some(k) = position.iter().position(|v| v.is_nan() != absent) {
                    let (nan, number) = if absent { (p * c, p * c + k) } else { (p * c + k, p * c) };
                    let input = self.model.input;
                    return Err(PredictError::PartlyAbsent {
                        row: first + p * c / input,
                        position: (p * c % input) / c + 1,
                        nan: self.feature(nan % input),
                        number: self.feature(number % input),
                    });
                }
            }
        }
        Ok(())
    }

    /// Every categorical and token feature of `rows` (the first being row
    /// `first`) holds an index of its vocabulary: a whole number below its
    /// size. (An embedding would read outside its table otherwise.)
    fn check_indices(&self, rows: &[f32], first: usize) -> Result<(), PredictError> {
        let m = &self.model;
        let tables: Vec<(usize, usize, IndexKind)> = match &m.tokens {
            Some(t) => (0..m.input).map(|p| (p, t.size(), IndexKind::Token)).collect(),
            None => m.categories.iter().map(|v| (v.position, v.size(), IndexKind::Category)).collect(),
        };
        if tables.is_empty() {
            return Ok(());
        }
        for (r, row) in rows.chunks_exact(m.input).enumerate() {
            for &(p, size, kind) in &tables {
                let value = row[p];
                if !(value >= 0.0 && value.fract() == 0.0 && (value as usize) < size) {
                    return Err(PredictError::NotAnIndex {
                        row: first + r,
                        feature: self.feature(p),
                        value,
                        size,
                        kind,
                    });
                }
            }
        }
        Ok(())
    }

    /// Predicts on rows read with [`read_model_rows`](crate::data::read_model_rows)
    /// and scores them against their target column: regression gets mae,
    /// mse, rmse and r2; classes get accuracy and macro precision, recall
    /// and f1, and the loss of the head's logits as training computes it
    /// (`cross_entropy` for a softmax head, `bce` for a sigmoid one), to set
    /// beside a run's `val_loss`. A label the model has no class for, or a
    /// non-numeric regression target, is an error naming its row.
    pub fn evaluate(&self, data: &ModelRows) -> Result<BTreeMap<String, f64>, EvalError> {
        self.evaluation(data).map(|e| e.metrics)
    }

    /// [`evaluate`](Self::evaluate)'s metrics and, for a class head, each
    /// class's precision, recall, F1 and rows, and the confusion matrix.
    pub fn evaluation(&self, data: &ModelRows) -> Result<Evaluation, EvalError> {
        let Some(targets) = &data.targets else {
            return Err(EvalError::NoTarget(self.model.target.clone()));
        };
        if targets.len() != data.rows {
            return Err(EvalError::Targets { targets: targets.len(), rows: data.rows });
        }
        let p = self.predict_rows(data).map_err(EvalError::Predict)?;
        // Each target's line (rows built in code may leave them out: 0).
        let lines = (0..targets.len()).map(|i| data.lines.get(i).copied().unwrap_or(0));
        let outputs = Outputs { values: p.outputs, width: p.width, loss: f64::NAN };
        let names = self.model.head.class_names();
        let column = data.target_column;
        let (labels, loss, metrics) = match &self.model.head {
            Head::Regression => {
                let values = targets
                    .iter()
                    .zip(lines)
                    .map(|(text, line)| {
                        // The error's strings are made for a bad row alone.
                        let (path, column_name, value) =
                            (|| data.path.clone(), || self.model.target.clone(), || text.to_string());
                        match text.parse::<f32>() {
                            Ok(v) if v.is_finite() => Ok(v),
                            Ok(_) => Err(DataError::NonFinite {
                                path: path(),
                                row: line,
                                column,
                                column_name: column_name(),
                                value: value(),
                            }),
                            // As training says it: a missing target is named as one.
                            Err(_) => {
                                let missing = text.is_empty() || crate::data::looks_missing(text);
                                let hint =
                                    if missing { "; a missing target: fill it in or remove the row" } else { "" };
                                Err(DataError::NotNumeric {
                                    path: path(),
                                    row: line,
                                    column,
                                    column_name: column_name(),
                                    value: value(),
                                    hint: hint.into(),
                                })
                            }
                        }
                    })
                    .collect::<Result<Vec<f32>, _>>()?;
                (Labels::Values(values), Loss::Mse, vec![Metric::Mae, Metric::Mse, Metric::Rmse, Metric::R2])
            }
            head => {
                let classes = targets
                    .iter()
                    .zip(lines)
                    .map(|(text, line)| {
                        crate::data::class_of(names, text).map(|i| i as u32).ok_or_else(|| DataError::UnknownClass {
                            path: data.path.clone(),
                            row: line,
                            column,
                            column_name: self.model.target.clone(),
                            value: text.to_string(),
                            known: names.to_vec(),
                        })
                    })
                    .collect::<Result<Vec<u32>, _>>()?;
                let loss = if matches!(head, Head::Sigmoid { .. }) { Loss::Bce } else { Loss::CrossEntropy };
                (Labels::Classes(classes), loss, vec![Metric::Accuracy, Metric::Precision, Metric::Recall, Metric::F1])
            }
        };
        let mut scores = compute_metrics(&outputs, &labels, loss, &metrics, names.len());
        let mut breakdown = None;
        if let Labels::Classes(classes) = &labels {
            let name = if matches!(loss, Loss::Bce) { "bce" } else { "cross_entropy" };
            let mean = crate::train::loss::host_loss(loss, &outputs.values, outputs.width, &labels, &mut Vec::new());
            scores.insert(name.to_string(), mean);
            // A row without a finite output has no class (every metric is NaN then).
            if outputs.values.iter().all(|v| v.is_finite()) {
                let pred = decide_classes(&outputs.values, outputs.width, loss);
                breakdown = Some(ClassBreakdown::new(names.to_vec(), &pred, classes));
            }
        }
        Ok(Evaluation { metrics: scores, classes: breakdown })
    }
}

/// What [`Predictor::evaluation`] finds in rows with their targets.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluation {
    /// Each metric by name, as [`Predictor::evaluate`] gives them.
    pub metrics: BTreeMap<String, f64>,
    /// For a class head whose outputs are all numbers: each class's scores
    /// and the confusion matrix. `None` for regression.
    pub classes: Option<ClassBreakdown>,
}

/// A class head's scores class by class.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassBreakdown {
    /// The class names, in the model's order (the index of each row and column below).
    pub names: Vec<String>,
    /// Each class's precision, recall, F1 and rows.
    pub scores: Vec<metrics::ClassScore>,
    /// `confusion[t][p]`: the rows of class `t` predicted as `p`; `None`
    /// beyond [`CONFUSION_MAX_CLASSES`] classes.
    pub confusion: Option<Vec<Vec<u64>>>,
}

/// The most classes a confusion matrix is made for: its cells grow as the
/// square of the classes (20,000 classes would be 3.2 GB of counts).
pub const CONFUSION_MAX_CLASSES: usize = 1000;

impl ClassBreakdown {
    /// The scores of `pred` against `target`, class indices into `names`.
    ///
    /// # Panics
    /// If the slices differ in length or an index is not below `names.len()`.
    pub fn new(names: Vec<String>, pred: &[u32], target: &[u32]) -> Self {
        let n = names.len();
        let scores = metrics::per_class(pred, target, n);
        let confusion = (n <= CONFUSION_MAX_CLASSES).then(|| metrics::confusion(pred, target, n));
        ClassBreakdown { names, scores, confusion }
    }
}

/// What a categorical or text feature holds an index of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexKind {
    /// A categorical column's value: 0 is a value training never saw.
    Category,
    /// A text's token: 0 is padding, 1 a token training never saw.
    Token,
}

/// Why rows get no predictions.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum PredictError {
    /// The values are not whole rows of the model's features.
    #[error("{values} values are not whole rows of {features} features")]
    Shape {
        /// How many values were given.
        values: usize,
        /// Features per row.
        features: usize,
    },
    /// Rows whose values are not their count of the model's rows (read for
    /// another model, or built by hand).
    #[error(
        "{rows} rows of the model's {features} features are {} values, but {values} were given (rows read for \
         another model?)",
        rows.saturating_mul(*features)
    )]
    Rows {
        /// The rows said.
        rows: usize,
        /// How many values were given.
        values: usize,
        /// Features per row.
        features: usize,
    },
    /// A categorical or text feature holds no index of its vocabulary.
    #[error("row {}: {}", row + 1, self.what())]
    NotAnIndex {
        /// The row, 0-based.
        row: usize,
        /// The feature, as messages name it.
        feature: String,
        /// What it held.
        value: f32,
        /// The vocabulary's size: indices run from 0 to `size - 1`.
        size: usize,
        /// Which vocabulary.
        kind: IndexKind,
    },
    /// A value the stored normalisation takes beyond an f32.
    #[error("row {}: {}", row + 1, self.what())]
    Range {
        /// The row, 0-based.
        row: usize,
        /// The feature, as messages name it.
        feature: String,
        /// Its raw value.
        value: f32,
        /// The training rows' mean of the feature.
        mean: f32,
        /// Their spread.
        std: f32,
    },
    /// A value that is not a number (NaN, where no sequence is padded) or
    /// is infinite.
    #[error("row {}: {}", row + 1, self.what())]
    NotFinite {
        /// The row, 0-based.
        row: usize,
        /// The feature, as messages name it.
        feature: String,
        /// What it held.
        value: f32,
    },
    /// A sequence position that is NaN (absent) in some of its values and
    /// holds numbers in others.
    #[error("row {}: {}", row + 1, self.what())]
    PartlyAbsent {
        /// The row, 0-based.
        row: usize,
        /// The position in the sequence, 1-based.
        position: usize,
        /// A value of the position that is NaN, as messages name it.
        nan: String,
        /// A value of the position that is a number.
        number: String,
    },
    /// The model's output for the row is not a finite number. Where that
    /// happens depends on the engine's arithmetic (see
    /// [`Predictor::engine`]): on the CPU the native engine takes a layer
    /// norm's variance without overflow, so a row of values near 1e19
    /// predicts there as the same row scaled down does, where Burn's
    /// backends (and PyTorch) overflow.
    #[error("row {}: {}", row + 1, self.what())]
    Overflow {
        /// The row, 0-based.
        row: usize,
    },
    /// The device failed in the forward pass (out of memory, lost) or could
    /// not hand the outputs back; holds its words.
    #[error("the device failed to predict: {0}")]
    Backend(String),
}

impl PredictError {
    /// The row (0-based) it concerns, if one.
    pub fn row(&self) -> Option<usize> {
        match self {
            PredictError::Shape { .. } | PredictError::Rows { .. } | PredictError::Backend(_) => None,
            PredictError::NotAnIndex { row, .. }
            | PredictError::Range { row, .. }
            | PredictError::NotFinite { row, .. }
            | PredictError::PartlyAbsent { row, .. }
            | PredictError::Overflow { row } => Some(*row),
        }
    }

    /// Whether the rows themselves are at fault (a client's error in a
    /// service), not the model or the device.
    pub fn is_bad_input(&self) -> bool {
        !matches!(self, PredictError::Backend(_))
    }

    /// What is wrong, without the row's place.
    pub fn what(&self) -> String {
        match self {
            PredictError::Shape { .. } | PredictError::Rows { .. } | PredictError::Backend(_) => self.to_string(),
            PredictError::NotAnIndex { feature, value, size, kind, .. } => {
                let (what, zero) = match kind {
                    IndexKind::Category => ("category", "a value training never saw"),
                    IndexKind::Token => ("token", "padding"),
                };
                format!(
                    "{feature} = {value} is not one of the model's {what} indices: expected a whole number from 0 \
                     ({zero}) to {}; text is turned into indices by reading the rows with \
                     ExportModel::read_rows_from",
                    size - 1
                )
            }
            PredictError::Range { feature, value, mean, std, .. } => format!(
                "{feature} = {value:e} is beyond what the model can take: normalised with the training rows' mean \
                 {} and spread {}, it exceeds a 32-bit float (about 3.4e38)",
                crate::data::error::statistic(*mean),
                crate::data::error::statistic(*std)
            ),
            PredictError::NotFinite { feature, value, .. } => {
                format!("{feature} = {value} is not a finite number: the model takes numbers only")
            }
            PredictError::PartlyAbsent { position, nan, number, .. } => format!(
                "position {position} of the sequence is NaN in {nan} but a number in {number}: an absent position \
                 is NaN in all its values, a present one a number in each"
            ),
            PredictError::Overflow { .. } => "the model's output for this row is not a finite number: its values \
                 overflow the model's 32-bit arithmetic (values far beyond those it was trained on?)"
                .into(),
        }
    }
}

/// [`PredictError`] on rows read from a file or text, located at the row's line.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}{}: {}", path.display(), line.map_or(String::new(), |l| format!(":{l}")), error.what())]
pub struct RowsError {
    /// The file (or the name given to the text) the rows came from.
    pub path: PathBuf,
    /// The 1-based line of the row at fault, when one is.
    pub line: Option<usize>,
    /// What is wrong.
    pub error: PredictError,
}

/// Why [`Predictor::evaluate`] cannot score rows.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EvalError {
    /// The rows have no target column; holds the model's target name.
    #[error("the file has no `{0}` column (the model's target) to score the predictions against")]
    NoTarget(String),
    /// A target value the model cannot score: not a finite number for regression, or an unknown class.
    #[error(transparent)]
    Data(#[from] DataError),
    /// The rows could not be predicted on.
    #[error(transparent)]
    Predict(#[from] RowsError),
    /// Rows built by hand with a target count other than their row count.
    #[error("{targets} targets for {rows} rows")]
    Targets {
        /// The target cells given.
        targets: usize,
        /// The rows given.
        rows: usize,
    },
}

#[cfg(test)]
mod tests {
    use crate::data::Labels;
    use crate::export::{Activation, ExportLayer, ExportModel, Head};
    use crate::train::EngineKind;

    fn regression(input: usize, layers: Vec<ExportLayer>) -> super::Predictor {
        let model = ExportModel {
            name: "M".into(),
            input,
            shape: crate::model::Shape::flat(input),
            feature_names: (0..input).map(|i| format!("x{i}")).collect(),
            target: "y".into(),
            normalizer: None,
            categories: Vec::new(),
            tokens: None,
            sequence: None,
            layers,
            head: Head::Regression,
        };
        let cpu = kynml_backend::select(kynml_backend::DeviceChoice::Cpu).unwrap();
        super::Predictor::new(model, &cpu).unwrap()
    }

    /// Values that overflow f32 inside the model are refused, naming the
    /// row, as the NaN PyTorch gives for them: a layer norm's variance past
    /// f32 gave the output of a row of zeros, and relu turned a NaN into 0.
    /// On the CPU the native engine takes a layer norm's variance without
    /// overflow: the row of 1e19 predicts as the row of 1 does.
    #[test]
    fn an_overflow_inside_the_model_is_refused_not_predicted() {
        for native in [false, true] {
            let mut norm = regression(
                4,
                vec![
                    ExportLayer::layernorm(vec![1.0; 4], vec![0.5; 4]),
                    ExportLayer::dense(4, 1, vec![1.0, 2.0, 3.0, 4.0], vec![0.0], Activation::Linear),
                ],
            );
            assert!(norm.native.is_some());
            if !native {
                norm.native = None;
            }
            let small = norm.predict(&[1.0, 2.0, 3.0, 4.0]).unwrap().outputs[0];
            // Scale-free: a thousand times larger, the same prediction.
            assert!((norm.predict(&[1e3, 2e3, 3e3, 4e3]).unwrap().outputs[0] - small).abs() < 1e-4);
            let huge = norm.predict(&[1.0, 2.0, 3.0, 4.0, 1e19, 2e19, 3e19, 4e19]).map(|p| p.outputs);
            match huge {
                Ok(both) if native => assert!((both[1] - small).abs() < 1e-4, "{both:?}"),
                huge => assert!(matches!(huge, Err(super::PredictError::Overflow { row: 1 })), "{huge:?}"),
            }
            // [a + b, -a - b] is [inf, -inf]; their sum is NaN, which relu keeps.
            let mut relu = regression(
                2,
                vec![
                    ExportLayer::dense(2, 2, vec![1.0, 1.0, -1.0, -1.0], vec![0.0; 2], Activation::Linear),
                    ExportLayer::dense(2, 1, vec![1.0, 1.0], vec![0.0], Activation::Relu),
                ],
            );
            if !native {
                relu.native = None;
            }
            assert_eq!(relu.predict(&[1.0, 2.0]).unwrap().outputs, [0.0]);
            let over = relu.predict(&[1.0, 2.0, 3e38, 3e38]).map(|p| p.outputs);
            assert!(matches!(over, Err(super::PredictError::Overflow { row: 1 })), "native {native}: {over:?}");
        }
    }

    /// A pass holds at most `PASS_VALUES` at its largest moment: an image
    /// through a wide convolution takes 8 rows a pass (4096 of them would
    /// ask for about 80 GB), a small dense model 4096; and rows split into
    /// passes predict as one pass does, an error naming its own row.
    #[test]
    fn large_rows_take_smaller_passes_that_predict_alike() {
        use crate::model::{conv::ConvSpec, LayerSpec, Shape};
        let image = Shape::new(vec![3, 224, 224]);
        let conv = ConvSpec {
            dims: 2,
            channels: 64,
            kernel: 3,
            stride: 1,
            padding: 1,
            same: false,
            activation: Activation::Relu,
        };
        let mut model = regression(1, Vec::new()).model().clone();
        model.input = image.size();
        model.feature_names = (0..image.size()).map(|i| format!("p{i}")).collect();
        model.layers = vec![ExportLayer::zeros(LayerSpec::Conv(conv), &image)];
        model.shape = image;
        // 150,528 + 3,211,264 out + 153,228 padded + 1,354,752 patches: 13 rows in 64 Mi values.
        assert_eq!(super::pass_chunk(&model), 8);

        let dense = |w| ExportLayer::dense(2, 1, w, vec![0.5], Activation::Tanh);
        let mut p = regression(2, vec![dense(vec![0.3, -0.7])]);
        assert_eq!(p.pass_size(), 4096);
        let mut rows: Vec<f32> = (0..14).map(|i| i as f32 * 0.1 - 0.6).collect();
        let whole = p.predict(&rows).unwrap();
        p.chunk = 2;
        assert_eq!(p.predict(&rows).unwrap(), whole);
        rows[11] = f32::INFINITY;
        let bad = p.predict(&rows);
        assert!(matches!(bad, Err(super::PredictError::NotFinite { row: 5, .. })), "{bad:?}");
    }

    /// On the CPU the native engine predicts where it has every layer, and
    /// as Burn's CPU backend does within fp32 rounding: a convolution, a
    /// batchnorm with running statistics, pooling and dense layers with
    /// random weights, on random rows, in passes of every size.
    #[test]
    fn the_native_engine_predicts_as_burns_backend_does() {
        use crate::export::torch::TorchTensor;
        use crate::rng::SplitMix64;
        let source = "dataset D:\n source = csv(\"d.csv\")\n target = \"y\"\nmodel M:\n input 2x6x6\n \
                      conv2d 4 3 relu\n batchnorm\n maxpool 2\n flatten\n dense 8 gelu\n layernorm\n dense 3 linear\n\
                      train:\n loss = mse\n epochs = 1\n";
        let spec = crate::spec::parse_spec(source).unwrap();
        let mut rng = SplitMix64::new(7);
        let mut uniform = move |lo: f32, hi: f32| lo + (hi - lo) * (rng.next_u64() >> 40) as f32 / (1u64 << 24) as f32;
        let layers: Vec<_> = spec.model.layers.iter().map(|l| l.value.clone()).collect();
        // Each layer's input: the model's, then the layer before's output.
        let outputs = crate::model::shapes(&spec.model.shape, &layers).unwrap();
        let shapes: Vec<_> = std::iter::once(spec.model.shape.clone()).chain(outputs).collect();
        let mut model = regression(1, Vec::new()).model().clone();
        model.shape = spec.model.shape.clone();
        model.input = model.shape.size();
        model.feature_names = (0..model.input).map(|i| format!("p{i}")).collect();
        model.layers = layers
            .into_iter()
            .zip(&shapes)
            .map(|(layer, shape)| {
                let mut layer = ExportLayer::zeros(layer, shape);
                for t in &mut layer.tensors {
                    if let TorchTensor::F32(values) = &mut t.data {
                        // A variance stays positive.
                        let lo = if t.name.ends_with("running_var") { 0.5 } else { -0.8 };
                        values.iter_mut().for_each(|v| *v = uniform(lo, 0.8));
                    }
                }
                layer
            })
            .collect();
        let cpu = kynml_backend::select(kynml_backend::DeviceChoice::Cpu).unwrap();
        let native = super::Predictor::new(model.clone(), &cpu).unwrap();
        assert_eq!(native.engine(), EngineKind::Native, "the native engine has every layer of this model");
        assert_eq!(native.engine_note(), None);
        let mut burn = super::Predictor::new(model, &cpu).unwrap();
        burn.native = None;
        assert_eq!(burn.engine(), EngineKind::Burn);
        let rows: Vec<f32> = (0..37 * native.model.input).map(|_| uniform(-2.0, 2.0)).collect();
        let want = burn.predict(&rows).unwrap().outputs;
        for chunk in [4096, 8, 1] {
            let mut native = super::Predictor::new(native.model.clone(), &cpu).unwrap();
            native.chunk = chunk;
            let got = native.predict(&rows).unwrap().outputs;
            assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(&want) {
                assert!((g - w).abs() <= 1e-5 * (1.0 + w.abs()), "passes of {chunk}: {g} against {w}");
            }
        }
    }

    /// Many threads predicting through one predictor get each its own
    /// rows' outputs, and leave at most `max_networks` networks (each
    /// caller that found none idle built one and kept it: eight threads,
    /// eight copies of the weights and eight teams of threads).
    #[test]
    fn concurrent_callers_share_a_bounded_pool_of_networks() {
        let (input, hidden) = (64, 256);
        let weights = |n: usize, seed: usize| -> Vec<f32> {
            (0..n).map(|i| (((i * 7919 + seed) % 997) as f32 / 997.0 - 0.5) * 0.2).collect()
        };
        let layers = vec![
            ExportLayer::dense(input, hidden, weights(input * hidden, 1), vec![0.1; hidden], Activation::Relu),
            ExportLayer::dense(hidden, 1, weights(hidden, 2), vec![0.0], Activation::Linear),
        ];
        let p = regression(input, layers);
        let native = p.native.as_ref().expect("the native engine has dense layers");
        let rows = |t: usize| -> Vec<f32> { weights(2000 * input, t * 31 + 5) };
        let want: Vec<_> = (0..8).map(|t| p.predict(&rows(t)).unwrap().outputs).collect();
        assert_eq!(native.built(), 1, "one caller at a time keeps one network");
        let start = std::sync::Barrier::new(8);
        std::thread::scope(|s| {
            for (t, want) in want.iter().enumerate() {
                let (p, start, rows) = (&p, &start, rows(t));
                s.spawn(move || {
                    start.wait();
                    for _ in 0..3 {
                        assert_eq!(&p.predict(&rows).unwrap().outputs, want, "thread {t}");
                    }
                });
            }
        });
        let built = native.built();
        assert!((1..=super::max_networks()).contains(&built), "{built} networks for 8 callers");
        assert_eq!(native.lock().idle.len(), built, "every network is back");
    }

    /// The confusion matrix is made up to its class limit, whose cells
    /// grow as the square of the classes; the scores always.
    #[test]
    fn the_confusion_matrix_is_made_up_to_its_class_limit() {
        let names = |n: usize| (0..n).map(|i| i.to_string()).collect::<Vec<_>>();
        let (pred, target) = ([0, 1, 1], [0, 1, 0]);
        let few = super::ClassBreakdown::new(names(3), &pred, &target);
        assert_eq!(few.confusion, Some(vec![vec![1, 1, 0], vec![0, 1, 0], vec![0, 0, 0]]));
        let many = super::ClassBreakdown::new(names(super::CONFUSION_MAX_CLASSES + 1), &pred, &target);
        assert_eq!((many.confusion, many.scores.len()), (None, super::CONFUSION_MAX_CLASSES + 1));
    }

    /// The loss `evaluate` reports of class logits: cross-entropy over
    /// several logits a row, bce over one.
    fn class_loss(logits: &[f32], width: usize, classes: &[u32]) -> f64 {
        let loss = if width == 1 { super::Loss::Bce } else { super::Loss::CrossEntropy };
        crate::train::loss::host_loss(loss, logits, width, &Labels::Classes(classes.to_vec()), &mut Vec::new())
    }

    #[test]
    fn class_loss_is_trainings_cross_entropy_and_bce() {
        let ln2 = std::f64::consts::LN_2;
        // Even logits: ln(classes), whatever the class.
        assert!((class_loss(&[0.0, 0.0, 0.0, 0.0], 2, &[0, 1]) - ln2).abs() < 1e-12);
        // Softmax cross-entropy, by hand: -ln(e^2 / (e^2 + e^0 + e^-1)) for class 0, -ln(e^-1 / ...) for class 2.
        let denom = 2f64.exp() + 1.0 + (-1f64).exp();
        let want = ((denom.ln() - 2.0) + (denom.ln() + 1.0)) / 2.0;
        assert!((class_loss(&[2.0, 0.0, -1.0, 2.0, 0.0, -1.0], 3, &[0, 2]) - want).abs() < 1e-12);
        // Large logits stay finite: logsumexp and softplus are taken stably.
        assert!((class_loss(&[1000.0, 0.0], 2, &[1]) - 1000.0).abs() < 1e-9);
        assert!((class_loss(&[-1000.0], 1, &[1]) - 1000.0).abs() < 1e-9);
        // One logit: binary cross-entropy, softplus(z) - y z.
        assert!((class_loss(&[0.0, 0.0], 1, &[0, 1]) - ln2).abs() < 1e-12);
        let (z, sp) = (1.5f64, (1.0 + 1.5f64.exp()).ln());
        assert!((class_loss(&[z as f32, z as f32], 1, &[0, 1]) - (sp + (sp - z)) / 2.0).abs() < 1e-12);
    }
}
