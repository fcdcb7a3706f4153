//! Validation of what a run produces besides the trained weights: the
//! `evaluate:` metrics and the `export:` target.

use super::ast::{Block, Value, ValueKind};
use super::diagnostic::Diagnostic;
use super::keys::settings;
use super::suggest;
use super::types::{EvaluateSpec, ExportFormat, ExportSpec, Loss, Metric, Spanned};
use super::values;

const METRICS: &[(&str, Metric)] = &[
    ("mae", Metric::Mae),
    ("mse", Metric::Mse),
    ("rmse", Metric::Rmse),
    ("r2", Metric::R2),
    ("accuracy", Metric::Accuracy),
    ("precision", Metric::Precision),
    ("recall", Metric::Recall),
    ("f1", Metric::F1),
];

const FORMATS: &[(&str, ExportFormat)] = &[
    ("onnx", ExportFormat::Onnx),
    ("safetensors", ExportFormat::Safetensors),
    ("burn", ExportFormat::Burn),
    ("torchscript", ExportFormat::Torchscript),
];

/// `metrics = [mae, rmse]`. `loss` is the train block's, when it could be
/// read: a metric must suit the task that the loss defines.
pub(super) fn evaluate(block: &Block, loss: Option<&Spanned<Loss>>, d: &mut Vec<Diagnostic>) -> Option<EvaluateSpec> {
    let s = settings(block, d);
    let Some(v) = s.get("metrics") else { return Some(EvaluateSpec { metrics: Vec::new() }) };
    let ValueKind::List(items) = &v.kind else {
        match &v.kind {
            ValueKind::Ident(name) if METRICS.iter().any(|(m, _)| m == name) => d.push(
                Diagnostic::new(
                    v.span,
                    format!("expected a list of metrics for `metrics`, found {}", v.describe()),
                    "expected a list",
                )
                .with_help(format!("write `metrics = [{name}]`")),
            ),
            _ => values::mismatch(v, "a list of metrics", "`metrics`", d),
        }
        return None;
    };
    let mut metrics: Vec<Spanned<Metric>> = Vec::new();
    let mut ok = true;
    for item in items {
        let Some(metric) = values::choice(item, "an item of `metrics`", "metric", METRICS, d) else {
            ok = false;
            continue;
        };
        if metrics.iter().any(|m| m.value == metric) {
            d.push(
                Diagnostic::new(item.span, format!("metric `{}` is listed twice", metric.name()), "listed again")
                    .with_help("remove one of them"),
            );
            ok = false;
            continue;
        }
        if let Some(loss) = loss {
            if let Some(problem) = unsuited(metric, loss.value, item) {
                d.push(problem);
                ok = false;
                continue;
            }
        }
        metrics.push(Spanned { value: metric, span: item.span });
    }
    ok.then_some(EvaluateSpec { metrics })
}

/// A classification metric under a regression loss, or the reverse.
fn unsuited(metric: Metric, loss: Loss, item: &Value) -> Option<Diagnostic> {
    if metric.is_classification() == loss.is_classification() {
        return None;
    }
    let (metric_task, loss_task) =
        if metric.is_classification() { ("classification", "regression") } else { ("regression", "classification") };
    let fitting: Vec<&str> = METRICS
        .iter()
        .filter(|(_, m)| m.is_classification() == loss.is_classification())
        .map(|(name, _)| *name)
        .collect();
    Some(
        Diagnostic::new(
            item.span,
            format!("metric `{}` does not suit the loss `{}`", metric.name(), loss_name(loss)),
            format!("a {metric_task} metric"),
        )
        .with_help(format!(
            "`{}` trains a {loss_task} model; its metrics are {}",
            loss_name(loss),
            suggest::one_of(&fitting)
        )),
    )
}

fn loss_name(loss: Loss) -> &'static str {
    match loss {
        Loss::Mse => "mse",
        Loss::Mae => "mae",
        Loss::Huber { .. } => "huber",
        Loss::CrossEntropy => "cross_entropy",
        Loss::Bce => "bce",
    }
}

/// `format = onnx` and `path = "models/x.onnx"`, both required.
pub(super) fn export(block: &Block, d: &mut Vec<Diagnostic>) -> Option<ExportSpec> {
    let s = settings(block, d);
    let format = s.required("format", "format = onnx", d).and_then(|v| {
        values::choice(v, "`format`", "export format", FORMATS, d).map(|value| Spanned { value, span: v.span })
    });
    let path = s.required("path", "path = \"models/model.onnx\"", d).and_then(|v| values::path(v, "`path`", d));
    Some(ExportSpec { format: format?, path: path? })
}
