//! A trained model as plain host data, free of any backend type: the input of
//! every exporter (ONNX, PyTorch state dict), plus [`ExportModel::forward`], a
//! plain f32 reference forward pass on the host that the exporters' outputs are
//! checked against.
//!
//! The model takes raw feature rows: the optional normalizer is applied first,
//! then the layers in order, then the head turns the last layer's outputs into
//! predictions or class probabilities.

/// Epsilon of BatchNorm and LayerNorm (PyTorch's default for both), as the
/// engines use it.
pub const NORM_EPS: f32 = kynml_cpu::NORM_EPS as f32;

/// A trained model as plain host data, the input of every exporter.
#[derive(Debug, Clone, PartialEq)]
pub struct ExportModel {
    /// Model name from the spec, e.g. "DeepNet".
    pub name: String,
    /// Number of input features.
    pub input: usize,
    /// One name per input feature, in column order (`len == input`).
    pub feature_names: Vec<String>,
    /// Name of the predicted column.
    pub target: String,
    /// Applied before the first layer: x' = (x - mean) / std (std is never 0). None = raw features.
    pub normalizer: Option<(Vec<f32>, Vec<f32>)>,
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

/// One layer of the model.
#[derive(Debug, Clone, PartialEq)]
pub enum ExportLayer {
    /// y = act(x W^T + b); `weight` is row-major [out, in] (PyTorch nn.Linear layout).
    Dense {
        /// Number of inputs.
        input: usize,
        /// Number of outputs (units).
        output: usize,
        /// Row-major `[output, input]`, `len == output * input`.
        weight: Vec<f32>,
        /// One per output, `len == output`.
        bias: Vec<f32>,
        /// Applied after the affine map.
        activation: Activation,
    },
    /// nn.BatchNorm1d in eval mode: (x - running_mean)/sqrt(running_var + eps) * gamma + beta. eps = 1e-5.
    BatchNorm {
        /// Number of features, in and out.
        features: usize,
        /// Per-feature scale (PyTorch's `weight`), `len == features`.
        gamma: Vec<f32>,
        /// Per-feature shift (PyTorch's `bias`), `len == features`.
        beta: Vec<f32>,
        /// Per-feature mean tracked during training, `len == features`.
        running_mean: Vec<f32>,
        /// Per-feature variance tracked during training, `len == features`.
        running_var: Vec<f32>,
        /// PyTorch's count of training batches (never negative), kept for the state dict; unused at inference.
        num_batches_tracked: i64,
    },
    /// nn.LayerNorm(features), eps 1e-5, normalising each row over its features (biased variance).
    LayerNorm {
        /// Number of features, in and out.
        features: usize,
        /// Per-feature scale (PyTorch's `weight`), `len == features`.
        gamma: Vec<f32>,
        /// Per-feature shift (PyTorch's `bias`), `len == features`.
        beta: Vec<f32>,
    },
    /// Identity at inference.
    Dropout {
        /// Probability, in `[0, 1)`, that training zeroed each value; unused at inference.
        p: f64,
    },
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
    /// `dense`, `batchnorm`, `layernorm` or `dropout`.
    pub fn kind(&self) -> &'static str {
        match self {
            ExportLayer::Dense { .. } => "dense",
            ExportLayer::BatchNorm { .. } => "batchnorm",
            ExportLayer::LayerNorm { .. } => "layernorm",
            ExportLayer::Dropout { .. } => "dropout",
        }
    }

    /// Width of the layer's output given the width of its input (only dense layers change it).
    pub fn output_width(&self, input: usize) -> usize {
        match self {
            ExportLayer::Dense { output, .. } => *output,
            ExportLayer::BatchNorm { features, .. } | ExportLayer::LayerNorm { features, .. } => *features,
            ExportLayer::Dropout { .. } => input,
        }
    }

    /// Number of trained values (weights, biases, norm parameters and running statistics).
    pub fn parameter_count(&self) -> usize {
        match self {
            ExportLayer::Dense { weight, bias, .. } => weight.len() + bias.len(),
            ExportLayer::BatchNorm { gamma, beta, running_mean, running_var, .. } => {
                gamma.len() + beta.len() + running_mean.len() + running_var.len()
            }
            ExportLayer::LayerNorm { gamma, beta, .. } => gamma.len() + beta.len(),
            ExportLayer::Dropout { .. } => 0,
        }
    }

    /// Checks the layer's own lengths against an input of `width` features.
    fn validate(&self, width: usize) -> Result<(), String> {
        match self {
            ExportLayer::Dense { input, output, weight, bias, activation } => {
                if *input != width {
                    return Err(format!("takes {input} inputs but the previous layer gives {width}"));
                }
                if *output == 0 {
                    return Err("has 0 outputs".to_string());
                }
                let expected =
                    output.checked_mul(*input).ok_or_else(|| format!("{output} x {input} weights overflow"))?;
                if weight.len() != expected {
                    return Err(format!(
                        "weight has {} values, expected {output} x {input} = {expected}",
                        weight.len()
                    ));
                }
                check_len("bias", bias, *output)?;
                if let Activation::LeakyRelu(slope) = activation {
                    if !slope.is_finite() {
                        return Err(format!("leaky_relu slope {slope} is not finite"));
                    }
                }
            }
            ExportLayer::BatchNorm { features, gamma, beta, running_mean, running_var, num_batches_tracked } => {
                check_features(*features, width)?;
                check_len("gamma", gamma, *features)?;
                check_len("beta", beta, *features)?;
                check_len("running_mean", running_mean, *features)?;
                check_len("running_var", running_var, *features)?;
                if let Some(v) = running_var.iter().find(|v| !(v.is_finite() && **v >= 0.0)) {
                    return Err(format!("running_var holds {v}; variances must be finite and >= 0"));
                }
                if *num_batches_tracked < 0 {
                    return Err(format!("num_batches_tracked is {num_batches_tracked}, below 0"));
                }
            }
            ExportLayer::LayerNorm { features, gamma, beta } => {
                check_features(*features, width)?;
                check_len("gamma", gamma, *features)?;
                check_len("beta", beta, *features)?;
            }
            ExportLayer::Dropout { p } => {
                if !(p.is_finite() && (0.0..1.0).contains(p)) {
                    return Err(format!("dropout p {p} is outside [0, 1)"));
                }
            }
        }
        Ok(())
    }

    /// Applies the layer (inference mode) to `rows` rows of `width` values.
    fn apply(&self, x: &[f32], width: usize) -> Vec<f32> {
        match self {
            ExportLayer::Dense { input, output, weight, bias, activation } => {
                let mut y = Vec::with_capacity(x.len() / width.max(1) * output);
                for row in x.chunks_exact(*input) {
                    for (w_row, b) in weight.chunks_exact(*input).zip(bias) {
                        let dot: f64 = row.iter().zip(w_row).map(|(a, w)| f64::from(*a) * f64::from(*w)).sum();
                        y.push(activation.apply((dot + f64::from(*b)) as f32));
                    }
                }
                y
            }
            ExportLayer::BatchNorm { features, gamma, beta, running_mean, running_var, .. } => {
                let mut y = Vec::with_capacity(x.len());
                for row in x.chunks_exact(*features) {
                    for i in 0..*features {
                        let inv = 1.0 / (f64::from(running_var[i]) + f64::from(NORM_EPS)).sqrt();
                        let v = (f64::from(row[i]) - f64::from(running_mean[i])) * inv;
                        y.push((v * f64::from(gamma[i]) + f64::from(beta[i])) as f32);
                    }
                }
                y
            }
            ExportLayer::LayerNorm { features, gamma, beta } => {
                let mut y = Vec::with_capacity(x.len());
                let n = *features as f64;
                for row in x.chunks_exact(*features) {
                    let mean = row.iter().map(|v| f64::from(*v)).sum::<f64>() / n;
                    let var = row.iter().map(|v| (f64::from(*v) - mean).powi(2)).sum::<f64>() / n;
                    let inv = 1.0 / (var + f64::from(NORM_EPS)).sqrt();
                    for i in 0..*features {
                        let v = (f64::from(row[i]) - mean) * inv;
                        y.push((v * f64::from(gamma[i]) + f64::from(beta[i])) as f32);
                    }
                }
                y
            }
            ExportLayer::Dropout { .. } => x.to_vec(),
        }
    }
}

impl ExportModel {
    /// Number of output units: the width of the last layer (the input width if there are no
    /// width-changing layers).
    pub fn output(&self) -> usize {
        self.layers.iter().fold(self.input, |width, layer| layer.output_width(width))
    }

    /// Number of trained values in the layers (the normalizer not counted).
    pub fn parameter_count(&self) -> usize {
        self.layers.iter().map(ExportLayer::parameter_count).sum()
    }

    /// Checks that every length and shape chains: feature names and normalizer match the input
    /// width, each layer takes the width the previous one gives, every vector has the length its
    /// layer needs, and the head matches the output width (softmax: one output per class, at least
    /// two classes; sigmoid: one output, two classes). Also rejects values that would make the
    /// forward pass meaningless: a zero or non-finite normalizer std, a negative running variance,
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
            if let Some(s) = std.iter().find(|s| !(s.is_finite() && **s != 0.0)) {
                return Err(format!("normalizer std holds {s}; it must be finite and non-zero"));
            }
        }
        let mut width = self.input;
        for (i, layer) in self.layers.iter().enumerate() {
            layer.validate(width).map_err(|e| format!("layer {i} ({}): {e}", layer.kind()))?;
            width = layer.output_width(width);
        }
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
        let mut width = self.input;
        for layer in &self.layers {
            x = layer.apply(&x, width);
            width = layer.output_width(width);
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

fn check_features(features: usize, width: usize) -> Result<(), String> {
    if features != width {
        return Err(format!("normalises {features} features but the previous layer gives {width}"));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f32, b: f64) -> bool {
        (f64::from(a) - b).abs() <= 1e-6 * b.abs().max(1.0)
    }

    fn tiny(head: Head, layers: Vec<ExportLayer>) -> ExportModel {
        ExportModel {
            name: "Tiny".to_string(),
            input: 2,
            feature_names: vec!["a".to_string(), "b".to_string()],
            target: "y".to_string(),
            normalizer: None,
            layers,
            head,
        }
    }

    fn dense(input: usize, output: usize, weight: Vec<f32>, bias: Vec<f32>, activation: Activation) -> ExportLayer {
        ExportLayer::Dense { input, output, weight, bias, activation }
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
                ExportLayer::Dropout { p: 0.5 },
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
        let bn = ExportLayer::BatchNorm {
            features: 2,
            gamma: vec![2.0, 1.0],
            beta: vec![0.0, 1.0],
            running_mean: vec![1.0, 0.0],
            running_var: vec![4.0, 1.0],
            num_batches_tracked: 7,
        };
        let model = tiny(Head::Regression, vec![bn]);
        let y = model.forward(&[3.0, 2.0]).unwrap();
        assert!(close(y[0], 2.0 * 2.0 / (4.0f64 + 1e-5).sqrt()));
        assert!(close(y[1], 2.0 / (1.0f64 + 1e-5).sqrt() + 1.0));

        let ln = ExportLayer::LayerNorm { features: 2, gamma: vec![1.0, 3.0], beta: vec![0.5, 0.0] };
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
                ExportLayer::LayerNorm { features: 2, gamma: vec![1.0; 2], beta: vec![0.0; 2] },
            ],
        );
        assert!(chain.validate().unwrap_err().contains("layer 1 (layernorm)"));

        let mut names = good.clone();
        names.feature_names.pop();
        assert!(names.validate().is_err());

        let mut zero_std = good.clone();
        zero_std.normalizer = Some((vec![0.0; 2], vec![1.0, 0.0]));
        assert!(zero_std.validate().unwrap_err().contains("std"));

        let mut softmax = good.clone();
        softmax.head = Head::Softmax { class_names: vec!["a".into(), "b".into()] };
        assert!(softmax.validate().unwrap_err().contains("3 outputs"));

        let mut sigmoid = good.clone();
        sigmoid.head = Head::Sigmoid { class_names: vec!["a".into(), "b".into()] };
        assert!(sigmoid.validate().is_err());

        let dropout = tiny(Head::Regression, vec![ExportLayer::Dropout { p: 1.0 }]);
        assert!(dropout.validate().is_err());

        assert!(good.forward(&[1.0, 2.0, 3.0]).unwrap_err().contains("whole rows"));
    }
}
