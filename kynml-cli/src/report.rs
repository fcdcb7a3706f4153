//! `kynml report RUN_DIR...`: finished runs side by side.

use std::path::Path;

use serde_json::Value;

use crate::args::ReportArgs;
use crate::failure::Failure;
use crate::render;

pub fn run(args: ReportArgs) -> Result<(), Failure> {
    let mut rows = Vec::new();
    let mut problems = Vec::new();
    for dir in &args.runs {
        match read_run(dir) {
            Ok(row) => rows.push(row),
            Err(message) => problems.push(message),
        }
    }
    if !problems.is_empty() {
        return Err(Failure::input(problems.join("\n")));
    }
    let header =
        ["run", "spec", "model", "device", "precision", "epochs", "val_loss", "best metric", "time", "samples/s"];
    println!("{}", render::table(&header, &rows));
    Ok(())
}

fn read_run(dir: &Path) -> Result<Vec<String>, String> {
    let path = dir.join("metrics.json");
    let text = std::fs::read_to_string(&path).map_err(|e| {
        format!("error: `{}` is not a finished run folder: cannot read {}: {e}", dir.display(), path.display())
    })?;
    let m: Value = serde_json::from_str(&text)
        .map_err(|e| format!("error: {}:{}:{}: not valid JSON: {e}", path.display(), e.line(), e.column()))?;
    let str_of = |key: &str| m[key].as_str().unwrap_or("?").to_string();
    let primary = str_of("primary_metric");
    let metric = match best_epoch_value(&dir.join("metrics.jsonl"), &primary)? {
        Some((epoch, v)) => format!("{primary} {v:.4} (epoch {epoch})"),
        None => "?".into(),
    };
    let stopped = if m["stopped_early"].as_bool() == Some(true) { " (early stop)" } else { "" };
    Ok(vec![
        dir.file_name().map_or_else(|| dir.display().to_string(), |n| n.to_string_lossy().into_owned()),
        str_of("spec"),
        str_of("model"),
        str_of("device"),
        str_of("precision"),
        format!("{}{stopped}", m["epochs_run"].as_u64().map_or("?".into(), |e| e.to_string())),
        m["metrics"]["val_loss"].as_f64().map_or("?".into(), |v| format!("{v:.4}")),
        metric,
        m["seconds"].as_f64().map_or("?".into(), render::duration),
        m["samples_per_sec"].as_f64().map_or("?".into(), |v| render::thousands(v as usize)),
    ])
}

/// The best value of `metric` over the epochs in `metrics.jsonl`: highest
/// for scores (accuracy, precision, recall, f1, r2), lowest for errors.
fn best_epoch_value(path: &Path, metric: &str) -> Result<Option<(u64, f64)>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("error: cannot read {}: {e}", path.display()))?;
    let higher_is_better = matches!(metric, "accuracy" | "precision" | "recall" | "f1" | "r2");
    let mut best: Option<(u64, f64)> = None;
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let record: Value = serde_json::from_str(line)
            .map_err(|e| format!("error: {}:{}:{}: not valid JSON: {e}", path.display(), i + 1, e.column()))?;
        let (Some(epoch), Some(v)) = (record["epoch"].as_u64(), record["metrics"][metric].as_f64()) else { continue };
        let better = match best {
            None => true,
            Some((_, b)) => {
                if higher_is_better {
                    v > b
                } else {
                    v < b
                }
            }
        };
        if better && v.is_finite() {
            best = Some((epoch, v));
        }
    }
    Ok(best)
}
