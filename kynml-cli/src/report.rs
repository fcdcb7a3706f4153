//! `kynml report RUN_DIR...`: finished runs side by side: their results,
//! then where their time and memory went (each epoch's records, and the
//! phases of the runs trained with `--profile`), with each profile's verdict.

use std::path::Path;

use serde_json::Value;

use crate::args::ReportArgs;
use crate::failure::Failure;
use crate::render;

pub fn run(args: ReportArgs) -> Result<(), Failure> {
    let names = run_names(&args.runs);
    // Everything is read before anything is printed: a damaged file is an
    // error, not half a report. A run folder whose run did not finish (a
    // glob such as `runs/iris-*` catches the interrupted and failed ones
    // too) is left out with a note, unless nothing else is left.
    let mut rows = Vec::new();
    let mut finished = Vec::new();
    let mut unfinished = Vec::new();
    let mut problems = Vec::new();
    for (dir, name) in args.runs.iter().zip(&names) {
        match read_run(dir, name) {
            Ok(row) => {
                rows.push(row);
                finished.push((dir, name));
            }
            Err(Unread::Unfinished(message)) => unfinished.push(message),
            Err(Unread::Problem(message)) => problems.push(message),
        }
    }
    if !problems.is_empty() || rows.is_empty() {
        problems.extend(unfinished.iter().map(|m| format!("error: {m}")));
        return Err(Failure::input(problems.join("\n")));
    }
    for message in &unfinished {
        eprintln!("note: {message}; left out of the report");
    }
    let mut costs = Vec::new();
    let mut phases = Vec::new();
    let mut verdicts = Vec::new();
    for (dir, name) in finished {
        costs.push(cost_row(name, &dir.join("metrics.jsonl")).map_err(Failure::input)?);
        match read_profile(&dir.join("profile.json")).map_err(Failure::input)? {
            Some((row, verdict)) => {
                phases.push(std::iter::once(name.clone()).chain(row).collect());
                verdicts.push(format!("  {name}: {verdict}"));
            }
            None => verdicts.push(format!("  {name}: not profiled (train with --profile to see its phases)")),
        }
    }

    let header = [
        "run",
        "spec",
        "model",
        "device",
        "precision",
        "epochs",
        "val_loss",
        "metric of the model",
        "time",
        "samples/s",
    ];
    println!("{}", render::table(&header, &rows));
    let header = ["run", "waiting for batches", "skipped fp16 steps", "peak device pool", "peak host memory"];
    println!("\ntime and memory\n{}", render::table(&header, &costs));
    if !phases.is_empty() {
        let header = ["run", "steps", "wait", "copy", "forward", "backward", "optimizer", "other", "mean step"];
        println!(
            "\nwhere the step time goes (profiled runs; shares of the step time, waiting for the batch included)\n{}",
            render::table(&header, &phases)
        );
    }
    println!("\nverdicts\n{}", verdicts.join("\n"));
    Ok(())
}

/// Each run's name in the tables: its folder's name, or the path as given
/// where two runs share a folder name (`a/iris` and `b/iris`).
fn run_names(dirs: &[std::path::PathBuf]) -> Vec<String> {
    let short: Vec<String> = dirs
        .iter()
        .map(|dir| dir.file_name().map_or_else(|| dir.display().to_string(), |n| n.to_string_lossy().into_owned()))
        .collect();
    let unique = short.iter().enumerate().all(|(i, n)| !short[..i].contains(n));
    if unique {
        short
    } else {
        dirs.iter().map(|dir| dir.display().to_string()).collect()
    }
}

/// `path` is not JSON: located at `line` (a JSON-lines file's record) or
/// where serde found it, the column 1-based (serde says 0 at a line's end).
fn bad_json(path: &Path, line: Option<usize>, e: &serde_json::Error) -> String {
    let text = e.to_string();
    let what = text.rsplit_once(" at line ").map_or(text.as_str(), |(what, _)| what);
    format!("error: {}:{}:{}: not valid JSON: {what}", path.display(), line.unwrap_or(e.line()), e.column().max(1))
}

/// Over a run's epochs: the share of epoch time spent waiting for batches,
/// the steps fp16 skipped, the largest device pool and host memory.
fn cost_row(name: &str, path: &Path) -> Result<Vec<String>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("error: cannot read {}: {e}", path.display()))?;
    let (mut wait, mut seconds, mut skipped, mut pool, mut rss) = (0.0, 0.0, 0u64, None::<u64>, None::<u64>);
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let r: Value = serde_json::from_str(line).map_err(|e| bad_json(path, Some(i + 1), &e))?;
        wait += r["data_wait"].as_f64().unwrap_or(0.0);
        seconds += r["seconds"].as_f64().unwrap_or(0.0);
        skipped += r["skipped_steps"].as_u64().unwrap_or(0);
        pool = pool.max(r["device_reserved"].as_u64());
        rss = rss.max(r["peak_rss"].as_u64());
    }
    let mib = |b: Option<u64>| b.map_or("-".to_string(), |b| format!("{:.0} MiB", b as f64 / f64::from(1u32 << 20)));
    let share = if seconds > 0.0 { format!("{:.0}%", 100.0 * wait / seconds) } else { "?".into() };
    Ok(vec![name.to_string(), share, skipped.to_string(), mib(pool), mib(rss)])
}

/// A `profile.json`'s phase shares and mean step time, and its verdict;
/// `None` when the run was not profiled.
fn read_profile(path: &Path) -> Result<Option<(Vec<String>, String)>, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("error: cannot read {}: {e}", path.display())),
    };
    let p: Value = serde_json::from_str(&text).map_err(|e| bad_json(path, None, &e))?;
    let phases = p["phases"].as_array().ok_or_else(|| format!("error: {}: no `phases`", path.display()))?;
    let share = |name: &str| {
        phases
            .iter()
            .find(|x| x["phase"] == name)
            .and_then(|x| x["share"].as_f64())
            .map_or("?".into(), |s| format!("{:.1}%", 100.0 * s))
    };
    // The mean step with its wait, as the chart's and the shares' step.
    let mean: f64 = phases.iter().filter_map(|x| x["mean"].as_f64()).sum();
    let mut row = vec![p["steps"].as_u64().map_or("?".into(), |n| n.to_string())];
    row.extend(["wait", "copy", "forward", "backward", "optimizer", "other"].map(share));
    row.push(format!("{:.3} ms", mean * 1e3));
    let verdict = p["verdict"]["advice"].as_str().unwrap_or("no verdict recorded").to_string();
    Ok(Some((row, verdict)))
}

/// Why a run folder gives no row.
enum Unread {
    /// A run folder whose run did not end (it has the spec a run writes
    /// first, and not the metrics it writes last).
    Unfinished(String),
    /// Anything else: an error.
    Problem(String),
}

impl From<String> for Unread {
    fn from(message: String) -> Self {
        Unread::Problem(message)
    }
}

fn read_run(dir: &Path, name: &str) -> Result<Vec<String>, Unread> {
    if !dir.is_dir() {
        let what = if dir.exists() { "is not a folder" } else { "does not exist" };
        return Err(format!("error: `{}` {what}: report takes run folders (runs/NAME-...)", dir.display()).into());
    }
    let path = dir.join("metrics.json");
    let text = std::fs::read_to_string(&path).map_err(|e| {
        let lines = dir.join("metrics.jsonl");
        if e.kind() == std::io::ErrorKind::NotFound && (lines.is_file() || dir.join("spec.kyn").is_file()) {
            let so_far = match lines.is_file() {
                true => format!("; its epochs so far are in {}", lines.display()),
                false => "; it ended no epoch".to_string(),
            };
            Unread::Unfinished(format!(
                "`{}` did not finish (interrupted, failed or still running): it has no metrics.json, which a run \
                 writes at its end{so_far}",
                dir.display(),
            ))
        } else {
            Unread::Problem(format!(
                "error: `{}` is not a finished run folder: cannot read {}: {e}",
                dir.display(),
                path.display()
            ))
        }
    })?;
    let m: Value = serde_json::from_str(&text).map_err(|e| bad_json(&path, None, &e))?;
    let str_of = |key: &str| m[key].as_str().unwrap_or("?").to_string();
    let primary = str_of("primary_metric");
    // The run's model is its last epoch's, or its best epoch's under early
    // stopping: its metric, and the best epoch's where another did better.
    let kept = m["best_epoch"].as_u64().or(m["epochs_run"].as_u64());
    let metric = match (m["metrics"][primary.as_str()].as_f64(), kept) {
        (Some(v), Some(epoch)) => {
            let elsewhere = match best_epoch_value(&dir.join("metrics.jsonl"), &primary)? {
                Some((e, b)) if e != epoch && b != v => format!("; best {b:.4} at epoch {e}"),
                _ => String::new(),
            };
            format!("{primary} {v:.4} (epoch {epoch}{elsewhere})")
        }
        _ => "?".into(),
    };
    let stopped = if m["stopped_early"].as_bool() == Some(true) { " (early stop)" } else { "" };
    Ok(vec![
        name.to_string(),
        str_of("spec"),
        str_of("model"),
        str_of("device"),
        str_of("precision"),
        format!("{}{stopped}", m["epochs_run"].as_u64().map_or("?".into(), |e| e.to_string())),
        m["metrics"]["val_loss"].as_f64().map_or("?".into(), |v| format!("{v:.4}")),
        metric,
        m["seconds"].as_f64().map_or("?".into(), render::duration),
        m["samples_per_sec"].as_f64().map_or("?".into(), |v| render::thousands(v.round() as usize)),
    ])
}

/// The best value of `metric` over the epochs in `metrics.jsonl`: highest
/// for scores (accuracy, precision, recall, f1, r2), lowest for errors.
fn best_epoch_value(path: &Path, metric: &str) -> Result<Option<(u64, f64)>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("error: cannot read {}: {e}", path.display()))?;
    let higher_is_better = matches!(metric, "accuracy" | "precision" | "recall" | "f1" | "r2");
    let mut best: Option<(u64, f64)> = None;
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let record: Value = serde_json::from_str(line).map_err(|e| bad_json(path, Some(i + 1), &e))?;
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
