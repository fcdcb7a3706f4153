//! A trained model as plain host data, free of any backend type: the input of
//! every exporter (ONNX, PyTorch state dict), plus [`ExportModel::forward`], a
//! plain f32 reference forward pass on the host that the exporters' outputs are
//! checked against.
//!
//! The model takes raw feature rows: the optional normalizer is applied first,
//! then the layers in order, then the head turns the last layer's outputs into
//! predictions or class probabilities.

use super::torch::TorchTensor;
use crate::model::batchnorm::BatchNormSpec;
use crate::model::dense::DenseSpec;
use crate::model::dropout::DropoutSpec;
use crate::model::layernorm::LayerNormSpec;
use crate::model::{Decl, HostTensor, LayerSpec, Role, Shape, Tensors};

/// A trained model as plain host data, the input of every exporter.
#[derive(Debug, Clone, PartialEq)]
pub struct ExportModel {
    /// Model name from the spec, e.g. "DeepNet".
    pub name: String,
    /// Number of input values per sample (features, or the pixels of an image).
    pub input: usize,
    /// The shape of one sample: `[input]`, or `[channels, height, width]`.
    pub shape: Shape,
    /// One name per input feature, in column order (`len == input`).
    pub feature_names: Vec<String>,
    /// Name of the predicted column.
    pub target: String,
    /// Applied before the first layer: x' = (x - mean) / std (std is never 0). None = raw features.
    pub normalizer: Option<(Vec<f32>, Vec<f32>)>,
    /// The categorical features' vocabularies: such a feature holds the
    /// index of its category (0 for one unseen in training).
    pub categories: Vec<crate::data::Vocabulary>,
    /// A text model's tokens: the input is the token ids of this column's
    /// text ([`Shape::tokens`]). `None` for other models.
    pub tokens: Option<crate::data::TokenVocabulary>,
    /// A sequence model's columns: the input is `length` positions of one
    /// value from each ([`Shape::sequence`]), NaN where a sequence is
    /// padded. `None` for other models.
    pub sequence: Option<crate::data::SequenceColumns>,
    /// The layers, applied in order.
    pub layers: Vec<ExportLayer>,
    /// What the last layer's outputs mean.
    pub head: Head,
}

/// What the model's outputs mean.
#[derive(Debug, Clone, PartialEq)]
pub enum Head {
    /// Outputs are the predicted values (one per output unit).
    Regression,
    /// Outputs are logits over `class_names`; probabilities = softmax over the outputs.
    Softmax {
        /// One name per output, in output order.
        class_names: Vec<String>,
    },
    /// One output logit for two classes; `p(class_names[1]) = sigmoid(logit)`.
    Sigmoid {
        /// The two classes; the logit is that of `class_names[1]`.
        class_names: Vec<String>,
    },
}

/// One layer of the model: its kind and arguments as the spec gives them,
/// and its tensors in PyTorch's layout and names (`weight`, `running_mean`).
#[derive(Debug, Clone, PartialEq)]
pub struct ExportLayer {
    /// The layer as the spec declares it.
    pub spec: LayerSpec,
    /// Its tensors, in the order its kind declares them ([`LayerSpec::tensors`]).
    pub tensors: Vec<HostTensor>,
}

/// The activation applied after a dense layer's affine map: the spec's own type.
pub use crate::spec::types::Activation;

/// One named output of the model, as the ONNX graph names them.
#[derive(Debug, Clone, PartialEq)]
pub struct NamedOutput {
    /// `prediction`, `logits` or `probabilities`.
    pub name: &'static str,
    /// `[rows, columns]`.
    pub shape: [usize; 2],
    /// Row-major values.
    pub data: Vec<f32>,
}

impl Activation {
    /// Lower-case name as PyTorch's functional API spells it: `linear`, `relu`, `gelu`, `tanh`,
    /// `sigmoid`, `silu`, `leaky_relu`.
    pub fn name(&self) -> &'static str {
        match self {
            Activation::Linear => "linear",
            Activation::Relu => "relu",
            Activation::Gelu => "gelu",
            Activation::Tanh => "tanh",
            Activation::Sigmoid => "sigmoid",
            Activation::Silu => "silu",
            Activation::LeakyRelu(_) => "leaky_relu",
        }
    }

    /// Applies the activation to one value (computed in f64, rounded to f32).
    pub fn apply(&self, x: f32) -> f32 {
        let x = f64::from(x);
        let y = match *self {
            Activation::Linear => x,
            Activation::Relu => x.max(0.0),
            Activation::Gelu => 0.5 * x * (1.0 + erf(x / std::f64::consts::SQRT_2)),
            Activation::Tanh => x.tanh(),
            Activation::Sigmoid => sigmoid(x),
            Activation::Silu => x * sigmoid(x),
            Activation::LeakyRelu(slope) => {
                if x >= 0.0 {
                    x
                } else {
                    slope * x
                }
            }
        };
        y as f32
    }
}

impl Head {
    /// `regression`, `softmax` or `sigmoid`.
    pub fn kind(&self) -> &'static str {
        match self {
            Head::Regression => "regression",
            Head::Softmax { .. } => "softmax",
            Head::Sigmoid { .. } => "sigmoid",
        }
    }

    /// The class names of a classification head; empty for regression.
    pub fn class_names(&self) -> &[String] {
        match self {
            Head::Regression => &[],
            Head::Softmax { class_names } | Head::Sigmoid { class_names } => class_names,
        }
    }
}

impl ExportLayer {
    /// The word its spec line starts with: `dense`, `batchnorm`, `conv2d`.
    pub fn kind(&self) -> &'static str {
        self.spec.name()
    }

    /// Number of f32 values (weights, biases, norm parameters and running statistics).
    pub fn parameter_count(&self) -> usize {
        self.tensors.iter().filter(|t| matches!(t.data, TorchTensor::F32(_))).map(|t| t.data.len()).sum()
    }

    /// Its tensors, by name.
    pub fn view(&self) -> Tensors<'_> {
        Tensors::new(&self.tensors)
    }

    /// A dense layer: `weight` row-major `[output, input]` (PyTorch's `nn.Linear` layout).
    pub fn dense(input: usize, output: usize, weight: Vec<f32>, bias: Vec<f32>, activation: Activation) -> Self {
        ExportLayer {
            spec: LayerSpec::Dense(DenseSpec { units: output, activation }),
            tensors: vec![f32s("weight", vec![output, input], weight), f32s("bias", vec![output], bias)],
        }
    }

    /// `nn.BatchNorm1d` in eval mode over `gamma.len()` features.
    pub fn batchnorm(
        gamma: Vec<f32>,
        beta: Vec<f32>,
        running_mean: Vec<f32>,
        running_var: Vec<f32>,
        tracked: i64,
    ) -> Self {
        let f = gamma.len();
        ExportLayer {
            spec: LayerSpec::BatchNorm(BatchNormSpec),
            tensors: vec![
                f32s("weight", vec![f], gamma),
                f32s("bias", vec![f], beta),
                f32s("running_mean", vec![f], running_mean),
                f32s("running_var", vec![f], running_var),
                HostTensor {
                    name: "num_batches_tracked".into(),
                    shape: Vec::new(),
                    data: TorchTensor::I64(vec![tracked]),
                },
            ],
        }
    }

    /// `nn.LayerNorm(gamma.len())`.
    pub fn layernorm(gamma: Vec<f32>, beta: Vec<f32>) -> Self {
        let f = gamma.len();
        ExportLayer {
            spec: LayerSpec::LayerNorm(LayerNormSpec),
            tensors: vec![f32s("weight", vec![f], gamma), f32s("bias", vec![f], beta)],
        }
    }

    /// Dropout with probability `p`: the identity at inference.
    pub fn dropout(p: f64) -> Self {
        ExportLayer { spec: LayerSpec::Dropout(DropoutSpec { p }), tensors: Vec::new() }
    }

    /// A layer of `spec` taking `input`, with zeros for weights (ones for
    /// variances): the skeleton a sidecar describes before its weights are read.
    pub fn zeros(spec: LayerSpec, input: &Shape) -> Self {
        let tensors = spec
            .tensors(input)
            .into_iter()
            .map(|d| {
                let data = match d.role {
                    Role::Count => TorchTensor::I64(vec![0]),
                    _ if d.name.ends_with("running_var") => TorchTensor::F32(vec![1.0; d.len()]),
                    _ => TorchTensor::F32(vec![0.0; d.len()]),
                };
                HostTensor { name: d.name.to_string(), shape: d.shape, data }
            })
            .collect();
        ExportLayer { spec, tensors }
    }

    /// Checks the layer's tensors against what its kind declares for `input`.
    fn validate(&self, input: &Shape) -> Result<(), String> {
        let decls = self.spec.tensors(input);
        for d in &decls {
            let Some(t) = self.tensors.iter().find(|t| t.name == d.name) else {
                return Err(format!("has no `{}` tensor", d.name));
            };
            check_tensor(d, t)?;
        }
        if let Some(t) = self.tensors.iter().find(|t| !decls.iter().any(|d| d.name == t.name)) {
            return Err(format!("has a `{}` tensor its kind does not have", t.name));
        }
        // A weight that is not a number makes every row's output NaN: a
        // broken model, not rows a caller could fix.
        for t in &self.tensors {
            if let TorchTensor::F32(values) = &t.data {
                if let Some(v) = values.iter().find(|v| !v.is_finite()) {
                    return Err(format!("its `{}` tensor holds {v}; weights must be finite", t.name));
                }
            }
        }
        self.spec.check(self.view())
    }
}

fn f32s(name: &str, shape: Vec<usize>, values: Vec<f32>) -> HostTensor {
    HostTensor { name: name.to_string(), shape, data: TorchTensor::F32(values) }
}

/// A tensor against its declaration: shape, number of values, element type.
fn check_tensor(d: &Decl, t: &HostTensor) -> Result<(), String> {
    let dims = |s: &[usize]| s.iter().map(usize::to_string).collect::<Vec<_>>().join(" x ");
    let count = d.shape.iter().try_fold(1usize, |a, b| a.checked_mul(*b)).ok_or(format!("{} overflows", d.name))?;
    if t.shape != d.shape {
        return Err(format!("{} has shape [{}], expected [{}]", d.name, dims(&t.shape), dims(&d.shape)));
    }
    if t.data.len() != count {
        let shape = if d.shape.len() > 1 { format!("{} = {count}", dims(&d.shape)) } else { count.to_string() };
        return Err(format!("{} has {} values, expected {shape}", d.name, t.data.len()));
    }
    let int = matches!(t.data, TorchTensor::I64(_));
    if int != (d.role == Role::Count) {
        return Err(format!(
            "{} holds {} values, expected {}",
            d.name,
            t.data.dtype(),
            if int { "F32" } else { "I64" }
        ));
    }
    Ok(())
}

impl ExportModel {
    /// The rows of CSV file `path` as this model reads them: its features
    /// by name (categories as their indices, a text as token ids, sequences
    /// cut or padded), and the target when the file has it (`need_target`:
    /// it must). See [`read_model_rows`](crate::data::read_model_rows).
    pub fn read_rows(
        &self,
        path: &std::path::Path,
        need_target: bool,
    ) -> Result<crate::data::ModelRows, crate::data::DataError> {
        // As training reads its data: a device is refused unread (`/dev/zero`
        // never ends), a compressed file is said as such.
        self.read_rows_from(&crate::data::read_data_file(path)?, path, need_target)
    }

    /// [`read_rows`](Self::read_rows) of a stream, a piece of whole rows
    /// at a time ([`RowPieces`](crate::data::RowPieces), about `target`
    /// bytes each), so that a file of any length is read in bounded memory;
    /// every row is located on its line of the stream. `probe`: the stream
    /// may never end (standard input), and is refused after a MiB with no
    /// line end when that is no header of the model's.
    pub fn read_rows_in_pieces<R: std::io::Read>(
        &self,
        input: R,
        name: &std::path::Path,
        need_target: bool,
        target: usize,
        probe: bool,
    ) -> RowsInPieces<'_, R> {
        RowsInPieces {
            model: self,
            pieces: crate::data::RowPieces::new(input, name, target, probe),
            name: name.to_path_buf(),
            need_target,
        }
    }

    /// The CSV columns the model reads, in its order: the feature columns,
    /// a text model's text column, or a sequence model's columns.
    pub fn input_columns(&self) -> Vec<&str> {
        match (&self.tokens, &self.sequence) {
            (Some(t), _) => vec![t.column.as_str()],
            (None, Some(s)) => s.columns.iter().map(String::as_str).collect(),
            (None, None) => self.feature_names.iter().map(String::as_str).collect(),
        }
    }

    /// [`read_rows`](Self::read_rows) on CSV text held in memory, such as a
    /// request's body; `name` stands for a file in its errors.
    pub fn read_rows_from(
        &self,
        csv: &[u8],
        name: &std::path::Path,
        need_target: bool,
    ) -> Result<crate::data::ModelRows, crate::data::DataError> {
        crate::data::parse_model_rows(
            csv,
            name,
            &self.feature_names,
            &self.categories,
            self.tokens.as_ref(),
            self.sequence.as_ref(),
            &self.target,
            need_target,
        )
    }

    /// The shape each layer takes, then the output's: `layers.len() + 1`
    /// shapes. Fails at the first layer that cannot take its input.
    pub fn shapes(&self) -> Result<Vec<Shape>, String> {
        let mut out = vec![self.shape.clone()];
        for (i, layer) in self.layers.iter().enumerate() {
            let next = layer.spec.output(&out[i]).map_err(|e| format!("layer {i} ({}): {e}", layer.kind()))?;
            out.push(next);
        }
        Ok(out)
    }

    /// Number of output units: values per sample of the last layer's output.
    pub fn output(&self) -> usize {
        self.shapes().ok().and_then(|s| s.last().map(Shape::size)).unwrap_or(0)
    }

    /// Number of trained values in the layers (the normalizer not counted).
    pub fn parameter_count(&self) -> usize {
        self.layers.iter().map(ExportLayer::parameter_count).sum()
    }

    /// Checks that every length and shape chains: feature names and normalizer match the input
    /// width, each layer takes the width the previous one gives, every vector has the length its
    /// layer needs, and the head matches the output width (softmax: one output per class, at least
    /// two classes; sigmoid: one output, two classes). Also rejects values that would make the
    /// forward pass meaningless: a normalizer std that is not positive and finite, a negative running variance,
    /// a dropout p outside [0, 1).
    pub fn validate(&self) -> Result<(), String> {
        if self.input == 0 {
            return Err("the model takes 0 input features".to_string());
        }
        if self.feature_names.len() != self.input {
            return Err(format!("{} feature names for {} input features", self.feature_names.len(), self.input));
        }
        if let Some((mean, std)) = &self.normalizer {
            check_len("normalizer mean", mean, self.input)?;
            check_len("normalizer std", std, self.input)?;
            if let Some(m) = mean.iter().find(|m| !m.is_finite()) {
                return Err(format!("normalizer mean holds {m}; it must be finite"));
            }
            // A standard deviation is positive (a constant column's is 1): a
            // negative one, hand-written, mirrored the column silently.
            if let Some(s) = std.iter().find(|s| !(s.is_finite() && **s > 0.0)) {
                return Err(format!("normalizer std holds {s}; it must be finite and positive"));
            }
        }
        if self.shape.size() != self.input {
            return Err(format!("the input shape {} does not hold {} values", self.shape, self.input));
        }
        match (&self.tokens, self.shape.is_tokens()) {
            (Some(t), true) if t.length == self.input => {}
            (None, false) => {}
            _ => return Err("a text model needs its tokens, and only a text model has them".into()),
        }
        match (&self.sequence, self.shape.is_sequence()) {
            (Some(s), true) if self.shape.dims() == [s.length, s.channels()] => {}
            (None, false) => {}
            _ => return Err("a sequence model needs its sequence columns, and only a sequence model has them".into()),
        }
        // A token is an index into the text's table: normalising it would
        // read another token, or outside the table.
        if let (Some(_), Some((mean, std))) = (&self.tokens, &self.normalizer) {
            if mean.iter().zip(std).any(|(m, s)| (*m, *s) != (0.0, 1.0)) {
                return Err("the normalizer would change the text's token indices".into());
            }
        }
        for v in &self.categories {
            if self.feature_names.get(v.position) != Some(&v.column) {
                return Err(format!("categorical column `{}` is not feature {}", v.column, v.position + 1));
            }
            if let Some((mean, std)) = &self.normalizer {
                if (mean[v.position], std[v.position]) != (0.0, 1.0) {
                    return Err(format!("the normalizer would change categorical column `{}`", v.column));
                }
            }
        }
        // The first layer's tables must be the vocabularies' sizes, or an
        // index could fall outside them.
        if let Some(LayerSpec::Embedding(e)) = self.layers.first().map(|l| &l.spec) {
            let sizes: Vec<(usize, usize)> = e.columns.iter().map(|c| (c.position, c.categories)).collect();
            let vocab: Vec<(usize, usize)> = self.categories.iter().map(|v| (v.position, v.size())).collect();
            let tokens = self.tokens.as_ref().map_or(0, |t| t.size());
            if sizes != vocab || e.tokens != tokens {
                return Err("the embedding's tables do not match the vocabularies saved with the model".into());
            }
        }
        let shapes = self.shapes()?;
        for (i, layer) in self.layers.iter().enumerate() {
            layer.validate(&shapes[i]).map_err(|e| format!("layer {i} ({}): {e}", layer.kind()))?;
        }
        let width = shapes.last().map_or(0, Shape::size);
        match &self.head {
            Head::Regression => {}
            Head::Softmax { class_names } => {
                if class_names.len() < 2 {
                    return Err(format!("a softmax head needs at least 2 classes, got {}", class_names.len()));
                }
                if class_names.len() != width {
                    return Err(format!(
                        "softmax head has {} classes but the model gives {width} outputs",
                        class_names.len()
                    ));
                }
            }
            Head::Sigmoid { class_names } => {
                if class_names.len() != 2 {
                    return Err(format!("a sigmoid head needs exactly 2 classes, got {}", class_names.len()));
                }
                if width != 1 {
                    return Err(format!("a sigmoid head needs 1 output but the model gives {width}"));
                }
            }
        }
        Ok(())
    }

    /// The reference forward pass: raw feature rows (row-major, `rows.len()` a multiple of
    /// `input`) through the normalizer and the layers in inference mode. Returns the head's
    /// inputs, row-major `[rows, output()]`: the predictions for regression, the logits for
    /// classification. Products are summed and norms computed in f64; each layer's output is
    /// rounded to f32. Fails if the model does not [`validate`](Self::validate) or `rows` is not
    /// whole rows.
    ///
    /// This is the exporters' and tests' reference, slow and on the host: it
    /// does not refuse what [`Predictor`](crate::predict::Predictor) refuses
    /// (a category or token index the vocabulary lacks reads as unseen, a
    /// NaN or infinity passes through). Serve predictions with a
    /// `Predictor`.
    pub fn forward(&self, rows: &[f32]) -> Result<Vec<f32>, String> {
        self.validate()?;
        if !rows.len().is_multiple_of(self.input) {
            return Err(format!("{} input values are not whole rows of {} features", rows.len(), self.input));
        }
        let mut x = rows.to_vec();
        if let Some((mean, std)) = &self.normalizer {
            for row in x.chunks_exact_mut(self.input) {
                for ((v, m), s) in row.iter_mut().zip(mean).zip(std) {
                    *v = ((f64::from(*v) - f64::from(*m)) / f64::from(*s)) as f32;
                }
            }
        }
        // The padding of a text input: token id 0 (ids are never normalised);
        // of a sequence, NaN (at every value of a position), then read as 0.
        let mut mask: Option<Vec<f32>> =
            self.shape.is_tokens().then(|| rows.iter().map(|&id| if id == 0.0 { 0.0 } else { 1.0 }).collect());
        if let Some(s) = &self.sequence {
            mask = Some(x.iter().step_by(s.channels()).map(|v| if v.is_nan() { 0.0 } else { 1.0 }).collect());
            x.iter_mut().filter(|v| v.is_nan()).for_each(|v| *v = 0.0);
        }
        let shapes = self.shapes()?;
        for (layer, shape) in self.layers.iter().zip(&shapes) {
            let t = Tensors { all: &layer.tensors, mask: mask.as_deref() };
            x = layer.spec.reference(shape, t, &x);
        }
        Ok(x)
    }

    /// Class probabilities from the outputs of [`forward`](Self::forward): softmax over each row
    /// for a softmax head, `[1 - sigmoid(logit), sigmoid(logit)]` for a sigmoid head (column i is
    /// `class_names[i]`). `None` for regression. `logits` must be whole rows of `output()` values
    /// (extra values at the end are ignored).
    pub fn probabilities(&self, logits: &[f32]) -> Option<Vec<f32>> {
        match &self.head {
            Head::Regression => None,
            Head::Softmax { .. } => {
                let width = self.output().max(1);
                let mut p = Vec::with_capacity(logits.len());
                for row in logits.chunks_exact(width) {
                    let max = row.iter().fold(f64::NEG_INFINITY, |m, v| m.max(f64::from(*v)));
                    let exps: Vec<f64> = row.iter().map(|v| (f64::from(*v) - max).exp()).collect();
                    let sum: f64 = exps.iter().sum();
                    p.extend(exps.iter().map(|e| (e / sum) as f32));
                }
                Some(p)
            }
            Head::Sigmoid { .. } => {
                let mut p = Vec::with_capacity(logits.len() * 2);
                for v in logits {
                    let v = f64::from(*v);
                    p.push(sigmoid(-v) as f32);
                    p.push(sigmoid(v) as f32);
                }
                Some(p)
            }
        }
    }

    /// The outputs the ONNX graph gives for these raw rows, with the same names and shapes:
    /// `prediction` for regression, `logits` and `probabilities` for classification.
    pub fn named_outputs(&self, rows: &[f32]) -> Result<Vec<NamedOutput>, String> {
        let y = self.forward(rows)?;
        let n = rows.len() / self.input;
        let width = self.output();
        let Some(p) = self.probabilities(&y) else {
            return Ok(vec![NamedOutput { name: "prediction", shape: [n, width], data: y }]);
        };
        let classes = self.head.class_names().len();
        Ok(vec![
            NamedOutput { name: "logits", shape: [n, width], data: y },
            NamedOutput { name: "probabilities", shape: [n, classes], data: p },
        ])
    }
}

fn check_len(what: &str, values: &[f32], expected: usize) -> Result<(), String> {
    if values.len() != expected {
        return Err(format!("{what} has {} values, expected {expected}", values.len()));
    }
    Ok(())
}

fn sigmoid(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

/// The error function, to about 1e-15 (far below f32 precision): the series
/// erf(x) = 2/sqrt(pi) * exp(-x^2) * sum_n (2x^2)^n x / (1*3*...*(2n+1)), whose terms are all
/// positive (no cancellation). Beyond |x| = 6, erf is 1 to f64 precision.
fn erf(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    let a = x.abs();
    if a >= 6.0 {
        return x.signum();
    }
    let two_a2 = 2.0 * a * a;
    let mut term = a;
    let mut sum = a;
    for n in 0..400 {
        term *= two_a2 / f64::from(2 * n + 3);
        sum += term;
        if term < sum * 1e-17 {
            break;
        }
    }
    let value = 2.0 / std::f64::consts::PI.sqrt() * (-a * a).exp() * sum;
    value.min(1.0).copysign(x)
}

/// A model of two inputs `a` and `b` and target `y`, for tests.
#[cfg(test)]
pub(crate) fn tiny(head: Head, layers: Vec<ExportLayer>) -> ExportModel {
    ExportModel {
        name: "Tiny".to_string(),
        input: 2,
        shape: crate::model::Shape::flat(2),
        feature_names: vec!["a".to_string(), "b".to_string()],
        target: "y".to_string(),
        normalizer: None,
        categories: Vec::new(),
        tokens: None,
        sequence: None,
        layers,
        head,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f32, b: f64) -> bool {
        (f64::from(a) - b).abs() <= 1e-6 * b.abs().max(1.0)
    }

    fn dense(input: usize, output: usize, weight: Vec<f32>, bias: Vec<f32>, activation: Activation) -> ExportLayer {
        ExportLayer::dense(input, output, weight, bias, activation)
    }

    #[test]
    fn erf_matches_known_values() {
        let known = [
            (0.0, 0.0),
            (0.5, 0.520_499_877_813_046_5),
            (1.0, 0.842_700_792_949_714_9),
            (2.0, 0.995_322_265_018_952_7),
            (3.5, 0.999_999_256_901_627_7),
            (4.0, 0.999_999_984_582_742_1),
        ];
        for (x, want) in known {
            assert!((erf(x) - want).abs() < 1e-14, "erf({x}) = {} not {want}", erf(x));
            assert!((erf(-x) + want).abs() < 1e-14);
        }
        assert_eq!(erf(7.0), 1.0);
        assert_eq!(erf(-9.0), -1.0);
    }

    #[test]
    fn activations_match_known_values() {
        assert!(close(Activation::Gelu.apply(1.0), 0.841_344_746_068_542_9));
        assert!(close(Activation::Gelu.apply(-1.0), -0.158_655_253_931_457_05));
        assert!(close(Activation::Silu.apply(2.0), 2.0 / (1.0 + (-2.0f64).exp())));
        assert!(close(Activation::Sigmoid.apply(0.0), 0.5));
        assert!(close(Activation::Tanh.apply(0.5), 0.5f64.tanh()));
        assert_eq!(Activation::Relu.apply(-3.0), 0.0);
        assert_eq!(Activation::LeakyRelu(0.1).apply(-3.0), -0.3);
        assert_eq!(Activation::LeakyRelu(0.1).apply(3.0), 3.0);
        assert_eq!(Activation::Linear.apply(-3.0), -3.0);
        assert_eq!(Activation::Sigmoid.apply(-1000.0), 0.0);
        assert_eq!(Activation::Sigmoid.apply(1000.0), 1.0);
    }

    #[test]
    fn forward_matches_a_hand_computed_example() {
        // normalizer: a' = (a - 1) / 2, b' = (b + 1) / 0.5
        // dense 2 -> 2 relu: W = [[1, 2], [-1, 1]], b = [0.5, -1]
        // dense 2 -> 1 linear: W = [[2, -3]], b = [0.25]
        let mut model = tiny(
            Head::Regression,
            vec![
                dense(2, 2, vec![1.0, 2.0, -1.0, 1.0], vec![0.5, -1.0], Activation::Relu),
                ExportLayer::dropout(0.5),
                dense(2, 1, vec![2.0, -3.0], vec![0.25], Activation::Linear),
            ],
        );
        model.normalizer = Some((vec![1.0, -1.0], vec![2.0, 0.5]));
        // row 1: (3, 0) -> (1, 2) -> relu(1 + 4 + 0.5, -1 + 2 - 1) = (5.5, 0) -> 11.25
        // row 2: (1, -1.5) -> (0, -1) -> relu(0 - 2 + 0.5, 0 - 1 - 1) = (0, 0) -> 0.25
        let y = model.forward(&[3.0, 0.0, 1.0, -1.5]).unwrap();
        assert_eq!(y, vec![11.25, 0.25]);
        assert_eq!(model.output(), 1);
        assert_eq!(model.parameter_count(), 6 + 3);
        let outputs = model.named_outputs(&[3.0, 0.0]).unwrap();
        assert_eq!(outputs, vec![NamedOutput { name: "prediction", shape: [1, 1], data: vec![11.25] }]);
    }

    #[test]
    fn norms_match_hand_computed_values() {
        let bn = ExportLayer::batchnorm(vec![2.0, 1.0], vec![0.0, 1.0], vec![1.0, 0.0], vec![4.0, 1.0], 7);
        let model = tiny(Head::Regression, vec![bn]);
        let y = model.forward(&[3.0, 2.0]).unwrap();
        assert!(close(y[0], 2.0 * 2.0 / (4.0f64 + 1e-5).sqrt()));
        assert!(close(y[1], 2.0 / (1.0f64 + 1e-5).sqrt() + 1.0));

        let ln = ExportLayer::layernorm(vec![1.0, 3.0], vec![0.5, 0.0]);
        let model = tiny(Head::Regression, vec![ln]);
        // row (1, 3): mean 2, biased variance 1
        let y = model.forward(&[1.0, 3.0]).unwrap();
        let inv = 1.0 / (1.0f64 + 1e-5).sqrt();
        assert!(close(y[0], -inv + 0.5));
        assert!(close(y[1], 3.0 * inv));
    }

    #[test]
    fn heads_give_probabilities() {
        let classes = vec!["no".to_string(), "yes".to_string()];
        let model = tiny(
            Head::Sigmoid { class_names: classes.clone() },
            vec![dense(2, 1, vec![1.0, 1.0], vec![0.0], Activation::Linear)],
        );
        let outputs = model.named_outputs(&[0.0, 0.0, 1.0, 1.0]).unwrap();
        assert_eq!(outputs[0].name, "logits");
        assert_eq!(outputs[0].shape, [2, 1]);
        assert_eq!(outputs[1].name, "probabilities");
        assert_eq!(outputs[1].shape, [2, 2]);
        let p = &outputs[1].data;
        assert_eq!(&p[..2], &[0.5, 0.5]);
        assert!(close(p[3], 1.0 / (1.0 + (-2.0f64).exp())));
        assert!(close(p[2] + p[3], 1.0));

        let model = tiny(
            Head::Softmax { class_names: vec!["a".into(), "b".into()] },
            vec![dense(2, 2, vec![1.0, 0.0, 0.0, 1.0], vec![0.0, 0.0], Activation::Linear)],
        );
        let p = model.probabilities(&model.forward(&[0.0, 2.0f32.ln()]).unwrap()).unwrap();
        assert!(close(p[0], 1.0 / 3.0) && close(p[1], 2.0 / 3.0));
    }

    #[test]
    fn validate_catches_bad_shapes() {
        let good = tiny(Head::Regression, vec![dense(2, 3, vec![0.0; 6], vec![0.0; 3], Activation::Relu)]);
        assert_eq!(good.validate(), Ok(()));

        let bad = tiny(Head::Regression, vec![dense(2, 3, vec![0.0; 5], vec![0.0; 3], Activation::Relu)]);
        let err = bad.validate().unwrap_err();
        assert!(err.contains("layer 0 (dense): weight has 5 values, expected 3 x 2 = 6"), "{err}");
        assert!(bad.forward(&[0.0, 0.0]).is_err());

        let chain = tiny(
            Head::Regression,
            vec![
                dense(2, 3, vec![0.0; 6], vec![0.0; 3], Activation::Relu),
                ExportLayer::layernorm(vec![1.0; 2], vec![0.0; 2]),
            ],
        );
        assert!(chain.validate().unwrap_err().contains("layer 1 (layernorm)"));

        let mut names = good.clone();
        names.feature_names.pop();
        assert!(names.validate().is_err());

        let mut zero_std = good.clone();
        zero_std.normalizer = Some((vec![0.0; 2], vec![1.0, 0.0]));
        assert!(zero_std.validate().unwrap_err().contains("std"));
        zero_std.normalizer = Some((vec![0.0; 2], vec![1.0, -1.0]));
        assert!(zero_std.validate().unwrap_err().contains("std holds -1; it must be finite and positive"));

        let mut softmax = good.clone();
        softmax.head = Head::Softmax { class_names: vec!["a".into(), "b".into()] };
        assert!(softmax.validate().unwrap_err().contains("3 outputs"));

        let mut sigmoid = good.clone();
        sigmoid.head = Head::Sigmoid { class_names: vec!["a".into(), "b".into()] };
        assert!(sigmoid.validate().is_err());

        let dropout = tiny(Head::Regression, vec![ExportLayer::dropout(1.0)]);
        assert!(dropout.validate().is_err());

        assert!(good.forward(&[1.0, 2.0, 3.0]).unwrap_err().contains("whole rows"));
    }
}

/// The rows of a stream, a piece at a time: see
/// [`ExportModel::read_rows_in_pieces`].
#[derive(Debug)]
pub struct RowsInPieces<'a, R> {
    model: &'a ExportModel,
    pieces: crate::data::RowPieces<R>,
    name: std::path::PathBuf,
    need_target: bool,
}

impl<R: std::io::Read> Iterator for RowsInPieces<'_, R> {
    type Item = Result<crate::data::ModelRows, crate::data::DataError>;

    /// The next piece's rows. The first piece's error is the stream's
    /// (`DataError::Empty` for one with a header and no row); a later
    /// piece of blank lines alone (the stream's end) holds no row and is
    /// passed over.
    fn next(&mut self) -> Option<Self::Item> {
        use crate::data::DataError;
        let m = self.model;
        loop {
            let piece = match self.pieces.next_piece() {
                Ok(Some(piece)) => piece,
                Ok(None) => return None,
                Err(e) => return Some(Err(e)),
            };
            let read = crate::data::parse_model_rows_at(
                &piece.bytes,
                &self.name,
                &m.feature_names,
                &m.categories,
                m.tokens.as_ref(),
                m.sequence.as_ref(),
                &m.target,
                self.need_target,
                piece.shift,
            );
            match read {
                // A MiB without a line end: what is wrong with its header is
                // said now; a header of the model's reads on.
                _ if piece.probe && matches!(read, Ok(_) | Err(DataError::Empty { .. })) => continue,
                Err(DataError::Empty { header: true, .. }) if !piece.first => continue,
                read => return Some(read),
            }
        }
    }
}
