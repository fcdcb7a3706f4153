//! `kynml report RUN_DIR...`: finished runs side by side: their results,
//! then where their time and memory went (each epoch's records, and the
//! phases of the runs trained with `--profile`), with each profile's verdict.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::args::ReportArgs;
use crate::failure::Failure;
use crate::render;

pub fn run(args: ReportArgs) -> Result<(), Failure> {
    // `--json -` (or `/dev/stdout`) is standard output, which then holds the JSON alone.
    let to_stdout = args.json.as_deref().is_some_and(crate::output::is_stdout);
    let json = match args.json.as_deref().filter(|_| !to_stdout) {
        Some(path) => Some(crate::output::check_json_target(path, "kynml report --json", is_report_json)?),
        None => None,
    };
    let report = report(&args.runs)?;
    for note in &report.notes {
        eprintln!("note: {note}");
    }
    match to_stdout {
        _ if report.text.is_empty() => {}
        true => eprintln!("{}", report.text),
        false => println!("{}", report.text),
    }
    if to_stdout || json.is_some() {
        let doc = serde_json::json!({
            "runs": report.json,
            "notes": report.notes,
            "problems": report.problems.iter().map(|p| p.strip_prefix("error: ").unwrap_or(p)).collect::<Vec<_>>(),
        });
        let text = serde_json::to_string_pretty(&doc).expect("a JSON value is written") + "\n";
        match &json {
            Some(path) => crate::output::write_output(path, text.as_bytes())
                .map_err(|e| Failure::run(format!("error: cannot write {}: {e}", path.display())))?,
            None => {
                use std::io::Write;
                let mut out = std::io::stdout().lock();
                if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
                    if e.kind() != std::io::ErrorKind::BrokenPipe {
                        return Err(Failure::run(format!("error: cannot write the report to standard output: {e}")));
                    }
                }
            }
        }
    }
    // The runs that could be read are shown; a damaged one is still an error.
    if !report.problems.is_empty() {
        return Err(Failure::input(report.problems.join("\n")));
    }
    Ok(())
}

/// Whether `v` is an earlier `kynml report --json` document, which a new one replaces.
fn is_report_json(v: &Value) -> bool {
    v.get("runs").is_some_and(Value::is_array) && v.get("problems").is_some_and(Value::is_array)
}

/// A report: its tables and verdicts, the same for scripts, the notes on
/// what was left out, and the runs that could not be read (each located;
/// the exit status is 2).
struct Report {
    text: String,
    json: Vec<Value>,
    notes: Vec<String>,
    problems: Vec<String>,
}

fn report(runs: &[PathBuf]) -> Result<Report, Failure> {
    let mut notes = Vec::new();
    // The same run named twice (`runs/w0 runs/./w0/`, or through a link)
    // is one run: shown once.
    let mut dirs: Vec<&PathBuf> = Vec::new();
    let mut canonical: Vec<PathBuf> = Vec::new();
    for dir in runs {
        let real = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.clone());
        match canonical.iter().position(|c| *c == real) {
            Some(i) => notes.push(format!("`{}` is `{}` again; shown once", dir.display(), dirs[i].display())),
            None => {
                canonical.push(real);
                dirs.push(dir);
            }
        }
    }
    let names = run_names(&dirs);
    // Everything is read before anything is printed. A damaged run is an
    // error, said after the report of the runs that could be read (a glob
    // such as `runs/*` should not lose them all to one). What is not a run
    // (a stray file) and a run that did not finish (the interrupted and
    // failed ones) are left out with a note, unless nothing else is left.
    let mut rows = Vec::new();
    let mut finished = Vec::new();
    let mut left_out = Vec::new();
    let mut problems = Vec::new();
    for (dir, name) in dirs.iter().zip(&names) {
        match read_run(dir, name) {
            Ok((row, problem)) => {
                rows.push(row);
                finished.push((dir, name));
                problems.extend(problem);
            }
            Err(Unread::LeftOut(message)) => left_out.push(message),
            Err(Unread::Problem(message)) => problems.push(message),
        }
    }
    if rows.is_empty() {
        // No table, and a document for scripts that says why (exit 2).
        problems.extend(left_out.iter().map(|m| format!("error: {m}")));
        return Ok(Report { text: String::new(), json: Vec::new(), notes, problems });
    }
    notes.extend(left_out.iter().map(|m| format!("{m}; left out of the report")));
    let mut costs = Vec::new();
    let mut phases = Vec::new();
    let mut verdicts = Vec::new();
    let mut unprofiled: Vec<String> = Vec::new();
    let mut json = Vec::new();
    // Runs that differ only by seed (a sweep) are told apart by a column of it.
    let seeds: Vec<Option<u64>> = finished.iter().map(|(dir, _)| seed_of(dir)).collect();
    let seeded = seeds.iter().any(|s| *s != seeds[0]);
    if seeded {
        for (row, seed) in rows.iter_mut().zip(&seeds) {
            row.insert(3, seed.map_or("?".into(), |s| s.to_string()));
        }
    }
    for ((dir, name), seed) in finished.into_iter().zip(seeds) {
        let mut run = run_json(dir, name, seed);
        match run_costs(dir) {
            Ok(c) => {
                costs.push(c.row(name));
                run["costs"] = c.json();
            }
            // Its results row stands (metrics.json was read); its epochs' costs cannot.
            // (A damaged metrics.jsonl is said once, by `read_run` first.)
            Err(e) if problems.contains(&e) => {}
            Err(e) => problems.push(e),
        }
        notes.extend(history_notes(dir, name));
        let profile = read_profile(&dir.join("profile.json"));
        if let Ok(Some((_, verdict))) = &profile {
            run["profile_verdict"] = Value::String(verdict.clone());
        }
        json.push(run);
        // A damaged profile costs the run its phases, not the report.
        match profile {
            Ok(Some((row, verdict))) => {
                phases.push(std::iter::once(name.clone()).chain(row).collect());
                verdicts.push(format!("  {name}: {verdict}"));
            }
            // Profiled, by what it left beside it, but its profile is gone.
            Ok(None) if ["trace.json", "profile.svg", "profile.png"].iter().any(|f| dir.join(f).is_file()) => {
                notes.push(format!(
                    "{name} was profiled (its trace.json or profile chart is there) but has no profile.json; it is \
                     shown as not profiled"
                ));
                verdicts.push(format!("  {name}: not profiled (its profile.json is missing)"));
            }
            // Asked to profile (its spec.resolved.json says so), it trained
            // no step: a resume with no epoch left.
            Ok(None) if profile_asked(dir) && trained_nothing(dir) => {
                verdicts.push(format!("  {name}: profiled, but it trained no step (a resume with no epoch left)"));
            }
            Ok(None) if profile_asked(dir) => {
                verdicts.push(format!("  {name}: profiled, but its profile.json is missing (not written, or removed)"));
            }
            Ok(None) => unprofiled.push(name.clone()),
            Err(e) => {
                let e = e.strip_prefix("error: ").unwrap_or(&e);
                notes.push(format!("{e}; {name} is shown as not profiled"));
                verdicts.push(format!("  {name}: not profiled (its profile.json cannot be read)"));
            }
        }
    }

    let mut header = vec![
        "run",
        "spec",
        "model",
        "device",
        "precision",
        "epochs",
        "val_loss",
        "metric of the model",
        "time",
        "samples/s (steps)",
    ];
    if seeded {
        header.insert(3, "seed");
    }
    let mut text = render::table(&header, &rows);
    let header =
        ["run", "waiting for batches (of epoch time)", "skipped fp16 steps", "peak device pool", "peak host memory"];
    // Every run's records damaged: their errors say so, with no empty table.
    if !costs.is_empty() {
        text += &format!("\n\ntime and memory\n{}", render::table(&header, &costs));
    }
    if !phases.is_empty() {
        let mut header = vec!["run", "steps", "wait", "copy", "forward", "backward", "sync", "optimizer", "other"];
        header.push("mean step");
        // The replicas' meeting: a column only where a data-parallel run is shown.
        let sync = header.iter().position(|h| *h == "sync").unwrap_or(0);
        if phases.iter().all(|row: &Vec<String>| row.get(sync).is_none_or(|v| v == "-")) {
            header.remove(sync);
            for row in &mut phases {
                row.remove(sync);
            }
        }
        text += &format!(
            "\n\nwhere the step time goes (profiled runs; shares of the step time, waiting for the batch included)\n{}",
            render::table(&header, &phases)
        );
    }
    // The runs never profiled, said on one line: one a run made 41
    // identical lines of the report of 41 runs.
    match unprofiled.as_slice() {
        [] => {}
        [name] => verdicts.push(format!("  {name}: not profiled (train with --profile to see its phases)")),
        names if verdicts.is_empty() => verdicts.push(format!(
            "  none of the {} runs was profiled (train with --profile to see where their steps' time goes)",
            names.len()
        )),
        names => {
            const SHOWN: usize = 8;
            let more = names.len().saturating_sub(SHOWN);
            let listed = names.iter().take(SHOWN).cloned().collect::<Vec<_>>().join(", ");
            let more = if more > 0 { format!(" and {more} more") } else { String::new() };
            verdicts.push(format!("  {listed}{more}: not profiled (train with --profile to see their phases)"));
        }
    }
    text += &format!("\n\nverdicts\n{}", verdicts.join("\n"));
    Ok(Report { text, json, notes, problems })
}

/// The seed a run trained with, as its spec.resolved.json records it.
fn seed_of(dir: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(dir.join("spec.resolved.json")).ok()?;
    serde_json::from_str::<Value>(&text).ok()?["train"]["seed"].as_u64()
}

/// A finished run for scripts: its metrics.json as it is, and what the
/// report adds (its seed, the epoch its model is, the best epoch of its
/// primary metric).
fn run_json(dir: &Path, name: &str, seed: Option<u64>) -> Value {
    let summary: Value = std::fs::read_to_string(dir.join("metrics.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(Value::Null);
    let primary = summary["primary_metric"].as_str().unwrap_or("val_loss").to_string();
    let best = best_epoch_value(&dir.join("metrics.jsonl"), &primary).ok().flatten();
    // The epoch whose weights are the run's model (the table's "metric of
    // the model"): its best under early stopping, else its last. `best` is
    // the first epoch with the best value of the primary metric, which may
    // be another.
    let kept = summary["best_epoch"].as_u64().or(summary["epochs_run"].as_u64());
    serde_json::json!({
        "run": name,
        "path": dir.display().to_string(),
        "seed": seed,
        "kept_epoch": kept,
        "best": best.map(|(epoch, value)| serde_json::json!({"metric": primary, "epoch": epoch, "value": value})),
        "costs": null,
        "profile_verdict": null,
        "summary": summary,
    })
}

/// Each run's name in the tables: its folder's name, or the path as given
/// where two runs share a folder name (`a/iris` and `b/iris`).
fn run_names(dirs: &[&PathBuf]) -> Vec<String> {
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
/// the steps fp16 skipped, the largest device pool and host memory (the
/// run's own peak, saving included, as its end line printed it, where its
/// metrics.json has it).
struct Costs {
    /// Seconds waiting for batches and in all, over the epochs.
    wait: f64,
    seconds: f64,
    /// Steps skipped on overflow, where the run scaled its loss (fp16);
    /// `None` for a run that did not, which skips none.
    skipped: Option<u64>,
    /// Bytes.
    pool: Option<u64>,
    rss: Option<u64>,
}

impl Costs {
    fn row(&self, name: &str) -> Vec<String> {
        let mib =
            |b: Option<u64>| b.map_or("-".to_string(), |b| format!("{:.0} MiB", b as f64 / f64::from(1u32 << 20)));
        let share = self.share().map_or("?".into(), |s| format!("{:.0}%", 100.0 * s));
        let skipped = self.skipped.map_or("-".to_string(), |s| s.to_string());
        vec![name.to_string(), share, skipped, mib(self.pool), mib(self.rss)]
    }

    fn share(&self) -> Option<f64> {
        (self.seconds > 0.0).then(|| self.wait / self.seconds)
    }

    fn json(&self) -> Value {
        serde_json::json!({
            "data_wait_share": self.share(),
            "skipped_steps": self.skipped,
            "peak_device_pool_bytes": self.pool,
            "peak_host_memory_bytes": self.rss,
        })
    }
}

fn run_costs(dir: &Path) -> Result<Costs, String> {
    let path = &dir.join("metrics.jsonl");
    let text = std::fs::read_to_string(path).map_err(|e| format!("error: cannot read {}: {e}", path.display()))?;
    let (mut wait, mut seconds, mut skipped, mut pool, mut rss) = (0.0, 0.0, None::<u64>, None::<u64>, None::<u64>);
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let r: Value = serde_json::from_str(line).map_err(|e| bad_json(path, Some(i + 1), &e))?;
        wait += r["data_wait"].as_f64().unwrap_or(0.0);
        seconds += r["seconds"].as_f64().unwrap_or(0.0);
        if !r["loss_scale"].is_null() {
            *skipped.get_or_insert(0) += r["skipped_steps"].as_u64().unwrap_or(0);
        }
        pool = pool.max(r["device_reserved"].as_u64());
        rss = rss.max(r["peak_rss"].as_u64());
    }
    let summary = std::fs::read_to_string(dir.join("metrics.json")).ok();
    let summary = summary.and_then(|t| serde_json::from_str::<Value>(&t).ok());
    rss = rss.max(summary.and_then(|m| m["peak_rss"].as_u64()));
    Ok(Costs { wait, seconds, skipped, pool, rss })
}

/// Whether the run resumed with no epoch left: its metrics.json's
/// `resumed_after` is its `epochs_run`.
fn trained_nothing(dir: &Path) -> bool {
    let text = std::fs::read_to_string(dir.join("metrics.json")).unwrap_or_default();
    serde_json::from_str::<Value>(&text)
        .is_ok_and(|m| m["resumed_after"].as_u64().is_some_and(|r| Some(r) == m["epochs_run"].as_u64()))
}

/// Whether the run was asked to profile: `--profile` or `profile = true`,
/// as its spec.resolved.json records it.
fn profile_asked(dir: &Path) -> bool {
    let text = std::fs::read_to_string(dir.join("spec.resolved.json")).unwrap_or_default();
    serde_json::from_str::<Value>(&text).is_ok_and(|v| v["train"]["profile"] == Value::Bool(true))
}

/// A `profile.json`'s phase shares and mean step time (of the steps after
/// warm-up, where it has them), and its verdict; `None` when the run was
/// not profiled.
fn read_profile(path: &Path) -> Result<Option<(Vec<String>, String)>, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("error: cannot read {}: {e}", path.display())),
    };
    let p: Value = serde_json::from_str(&text).map_err(|e| bad_json(path, None, &e))?;
    let every = p["phases"].as_array().ok_or_else(|| format!("error: {}: no `phases`", path.display()))?;
    // The steps after warm-up where the run recorded them (a GPU's first
    // steps compile and tune kernels): runs side by side compare their
    // steady steps, as their verdicts do.
    let steady = p["steady"]["steps"].as_u64().filter(|&n| n > 0).zip(p["steady"]["phases"].as_array());
    let (phases, steps) = match (steady, p["steps"].as_u64()) {
        (Some((n, phases)), Some(all)) if all > n => (phases, format!("{n} (+{} warm-up)", all - n)),
        (Some((n, phases)), _) => (phases, n.to_string()),
        (None, all) => (every, all.map_or("?".into(), |n| n.to_string())),
    };
    // Every phase a run writes, each with its mean and share: without one,
    // the shares and the mean step would be of part of the step.
    // `sync` is a data-parallel run's alone.
    let missing: Vec<&str> = kynml_core::train::profile::PHASES
        .into_iter()
        .filter(|name| *name != "sync")
        .filter(|name| !phases.iter().any(|x| x["phase"] == *name && x["mean"].is_number() && x["share"].is_number()))
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "error: {}: no mean and share for the phase{} {} (edited, or cut short?)",
            path.display(),
            if missing.len() == 1 { "" } else { "s" },
            missing.iter().map(|m| format!("`{m}`")).collect::<Vec<_>>().join(", ")
        ));
    }
    let share = |name: &str| match phases.iter().find(|x| x["phase"] == name) {
        None if name == "sync" => "-".into(),
        found => found.and_then(|x| x["share"].as_f64()).map_or("?".into(), |s| format!("{:.1}%", 100.0 * s)),
    };
    // The mean step with its wait, as the shares' step (the chart,
    // profile.svg, draws every step's).
    let mean: f64 = phases.iter().filter_map(|x| x["mean"].as_f64()).sum();
    let mut row = vec![steps];
    row.extend(kynml_core::train::profile::PHASES.map(share));
    row.push(step_ms(mean));
    let verdict = p["verdict"]["advice"].as_str().unwrap_or("no verdict recorded").to_string();
    Ok(Some((row, verdict)))
}

/// A mean step in milliseconds, the column's one unit, with the digits its
/// size needs: `2175 ms`, `95.6 ms`, `2.16 ms`, `0.023 ms`.
fn step_ms(seconds: f64) -> String {
    with_digits(seconds * 1e3, "ms")
}

/// A run's time in seconds, the column's one unit: `69.7 s`, `2.23 s`, `0.005 s`.
fn run_seconds(seconds: f64) -> String {
    with_digits(seconds, "s")
}

/// `value` in `unit`, with the decimals its size needs (none from 100 up, three below 1).
fn with_digits(value: f64, unit: &str) -> String {
    let decimals = match value {
        _ if value >= 100.0 => 0,
        _ if value >= 10.0 => 1,
        _ if value >= 1.0 => 2,
        _ => 3,
    };
    format!("{value:.decimals$} {unit}")
}

/// Why a run folder gives no row.
enum Unread {
    /// Not a run (a file, a folder no run wrote), or a run folder whose run
    /// did not end (it has the spec a run writes first, and not the metrics
    /// it writes last): left out with a note.
    LeftOut(String),
    /// Anything else: an error.
    Problem(String),
}

impl From<String> for Unread {
    fn from(message: String) -> Self {
        Unread::Problem(message)
    }
}

/// A finished run's row, and a problem of its `metrics.jsonl` (damaged or
/// gone), which costs the row only its "best at epoch" part.
fn read_run(dir: &Path, name: &str) -> Result<(Vec<String>, Option<String>), Unread> {
    // A path that does not exist is a mistake; a stray file is not a run.
    if !dir.exists() {
        // A quoted glob (`'runs/iris-*'`) reaches report as it is.
        let pattern = dir.to_string_lossy().contains(['*', '?', '[']);
        let hint =
            if pattern { "; report does not expand patterns itself: leave it unquoted for the shell" } else { "" };
        return Err(format!(
            "error: `{}` does not exist: report takes run folders (runs/NAME-...){hint}",
            dir.display()
        )
        .into());
    }
    if !dir.is_dir() {
        return Err(Unread::LeftOut(format!(
            "`{}` is not a folder: report takes run folders (runs/NAME-...)",
            dir.display()
        )));
    }
    let path = dir.join("metrics.json");
    let text = std::fs::read_to_string(&path).map_err(|e| {
        let lines = dir.join("metrics.jsonl");
        if e.kind() == std::io::ErrorKind::NotFound && (lines.is_file() || dir.join("spec.kyn").is_file()) {
            let mut so_far = match lines.is_file() {
                true => format!("; its epochs so far are in {}", lines.display()),
                false => "; it ended no epoch".to_string(),
            };
            // An interrupted profiled run keeps the profile of its steps.
            if dir.join("profile.json").is_file() {
                so_far += &format!(
                    ", and the profile of its steps so far in {} (its trace.json opens in Perfetto)",
                    dir.join("profile.json").display()
                );
            }
            Unread::LeftOut(format!(
                "`{}` did not finish (interrupted, failed or still running): it has no metrics.json, which a run \
                 writes at its end{so_far}",
                dir.display(),
            ))
        } else if e.kind() == std::io::ErrorKind::NotFound {
            // The folder the runs are in (`runs`): its runs are meant.
            let held = std::fs::read_dir(dir).map_or(0, |entries| {
                entries.filter_map(Result::ok).filter(|e| e.path().join("spec.kyn").is_file()).count()
            });
            let inside = match held {
                0 => String::new(),
                n => format!(
                    "; it holds {n} run folder{}: `kynml report {}` reports them",
                    if n == 1 { "" } else { "s" },
                    dir.join("*").display()
                ),
            };
            Unread::LeftOut(format!(
                "`{}` is not a run folder: it has no metrics.json, metrics.jsonl or spec.kyn{inside}",
                dir.display()
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
    // JSON, but not what a run writes: an error, not a row of `?`.
    if !m["metrics"].is_object() {
        return Err(format!(
            "error: {}: not a KynML run's metrics.json: expected a JSON object holding `metrics` (the kept model's \
             validation loss and metrics)",
            path.display()
        )
        .into());
    }
    let str_of = |key: &str| m[key].as_str().unwrap_or("?").to_string();
    let primary = str_of("primary_metric");
    // The run's model is its last epoch's, or its best epoch's under early
    // stopping: its metric, and the best epoch's where another did better.
    let kept = m["best_epoch"].as_u64().or(m["epochs_run"].as_u64());
    let mut problem = None;
    // A metric the run could not score (r2 on one row, a diverged model)
    // is written as null: NaN, as the run printed it.
    let number = |v: &Value| if v.is_null() { Some(f64::NAN) } else { v.as_f64() };
    let metric = match (m["metrics"].get(primary.as_str()).and_then(number), kept) {
        (Some(v), Some(epoch)) => {
            let elsewhere = match best_epoch_value(&dir.join("metrics.jsonl"), &primary) {
                Ok(Some((e, b))) if e != epoch && b != v => format!("; best {} at epoch {e}", render::number(b)),
                Ok(_) => String::new(),
                Err(e) => {
                    problem = Some(e);
                    String::new()
                }
            };
            format!("{primary} {} (epoch {epoch}{elsewhere})", render::number(v))
        }
        _ => "?".into(),
    };
    let mut stopped = if m["stopped_early"].as_bool() == Some(true) { " (early stop)" } else { "" }.to_string();
    // 0: resumed from a checkpoint taken inside the first epoch.
    match m["resumed_after"].as_u64() {
        Some(0) => stopped += " (resumed in epoch 1)",
        Some(r) => stopped += &format!(" (resumed at {r})"),
        None => {}
    }
    let row = vec![
        name.to_string(),
        str_of("spec"),
        str_of("model"),
        device_cell(&m),
        str_of("precision"),
        format!("{}{stopped}", m["epochs_run"].as_u64().map_or("?".into(), |e| e.to_string())),
        m["metrics"].get("val_loss").and_then(number).map_or("?".into(), render::number),
        metric,
        m["seconds"].as_f64().map_or("?".into(), run_seconds),
        // null: a resumed run with no training step left (its validation alone).
        match &m["samples_per_sec"] {
            Value::Null if m.get("samples_per_sec").is_some() => "-".into(),
            v => v.as_f64().map_or("?".into(), |v| render::thousands(v.round() as usize)),
        },
    ];
    Ok((row, problem))
}

/// The run's device as `--device` takes it (each device of a data-parallel
/// run), and on the CPU which engine ran the steps: the native engine and
/// Burn's CPU backend run the same spec at different speeds, so two `cpu`
/// rows can differ for that alone. (A run written before the engine was
/// recorded shows its device alone.)
fn device_cell(m: &Value) -> String {
    let device = match m["devices"].as_array().filter(|d| d.len() > 1) {
        Some(devices) => devices.iter().map(|d| d.as_str().unwrap_or("?")).collect::<Vec<_>>().join(","),
        None => m["device"].as_str().unwrap_or("?").to_string(),
    };
    match m["engine"].as_str() {
        Some(engine) if device.starts_with("cpu") => format!("{device} ({engine})"),
        _ => device,
    }
}

/// The fields of a metrics.json that hold a value of the wrong kind (edited
/// by hand, or written by something else): each said with what it holds and
/// what a run writes there, since the report can only show `?` for it. A
/// field that is absent or `null` is not a mistake (an older run, no early
/// stop, no resume).
fn mistyped_fields(m: &Value) -> Vec<String> {
    #[derive(Clone, Copy)]
    enum Kind {
        Text,
        Count,
        Number,
        Flag,
    }
    let fields = [
        ("spec", Kind::Text),
        ("model", Kind::Text),
        ("device", Kind::Text),
        ("engine", Kind::Text),
        ("precision", Kind::Text),
        ("primary_metric", Kind::Text),
        ("epochs_run", Kind::Count),
        ("best_epoch", Kind::Count),
        ("resumed_after", Kind::Count),
        ("seconds", Kind::Number),
        ("samples_per_sec", Kind::Number),
        ("stopped_early", Kind::Flag),
    ];
    let mut out = Vec::new();
    let mut check = |label: String, v: &Value, kind: Kind| {
        let (fits, expected) = match kind {
            Kind::Text => (v.is_string(), "a string"),
            Kind::Count => (v.is_u64(), "a whole number"),
            Kind::Number => (v.is_number(), "a number"),
            Kind::Flag => (v.is_boolean(), "true or false"),
        };
        if !v.is_null() && !fits {
            // What the row does without it.
            let effect = match label.as_str() {
                "stopped_early" => "read as no early stop",
                "resumed_after" => "read as no resume",
                "best_epoch" => "the model is taken as the last epoch's",
                _ => "shown as `?`",
            };
            out.push(format!("`{label}` is {v}, not {expected}; {effect}"));
        }
    };
    for (key, kind) in fields {
        check(key.to_string(), &m[key], kind);
    }
    check("metrics.val_loss".into(), &m["metrics"]["val_loss"], Kind::Number);
    if let Some(primary) = m["primary_metric"].as_str() {
        check(format!("metrics.{primary}"), &m["metrics"][primary], Kind::Number);
    }
    out
}

/// What a reader of the run's row should know about its history: a resumed
/// run's time and speed are those of the epochs after the resume only, and a
/// `metrics.jsonl` with fewer epochs than `metrics.json` counts (cut short,
/// edited) gives its best epoch from what it holds.
fn history_notes(dir: &Path, name: &str) -> Vec<String> {
    let mut notes = Vec::new();
    let Some(m) =
        std::fs::read_to_string(dir.join("metrics.json")).ok().and_then(|t| serde_json::from_str::<Value>(&t).ok())
    else {
        return notes;
    };
    notes.extend(mistyped_fields(&m).into_iter().map(|n| format!("{name}: metrics.json's {n}")));
    let run = m["epochs_run"].as_u64();
    match (m["resumed_after"].as_u64(), run) {
        (Some(0), Some(_)) => notes.push(format!(
            "{name} resumed inside epoch 1: its time and samples/s are those of the steps after the resume only"
        )),
        (Some(r), Some(e)) if e <= r => notes.push(format!(
            "{name} resumed after epoch {r} and trained no epoch (its checkpoint's model is its model): its time \
             and samples/s are of no training"
        )),
        (Some(r), Some(e)) => notes.push(format!(
            "{name} resumed after epoch {r}: its time and samples/s are those of epoch{} {} only",
            if e > r + 1 { "s" } else { "" },
            if e > r + 1 { format!("{}-{e}", r + 1) } else { e.to_string() }
        )),
        _ => {}
    }
    // A missing or unreadable file is an error of its own, said once
    // (`best_epoch_value`): not also "0 of the epochs" here.
    let Ok(lines) = std::fs::read_to_string(dir.join("metrics.jsonl")) else {
        return notes;
    };
    let records: Result<Vec<Value>, _> =
        lines.lines().filter(|l| !l.trim().is_empty()).map(serde_json::from_str::<Value>).collect();
    // A line that is not JSON (cut short) is an error of its own, said once
    // (`run_costs`): its epochs are not counted or ordered here.
    let Ok(records) = records else {
        return notes;
    };
    let epochs: Vec<Option<u64>> = records.iter().map(|r| r["epoch"].as_u64()).collect();
    let logged = epochs.len() as u64;
    // A run logs its epochs once each, in order, one after the other.
    if epochs.windows(2).any(|w| !matches!(w, [Some(a), Some(b)] if *b == a + 1)) {
        let shown: Vec<String> = epochs.iter().map(|e| e.map_or("?".into(), |e| e.to_string())).collect();
        notes.push(format!(
            "{name}: metrics.jsonl's epochs are not one after another ({}): edited, or lines of another run?",
            shown.join(", ")
        ));
    }
    // A chain of runs that resumed elsewhere: where each stretch ran.
    // Said where two recorded stretches differ: epochs of a checkpoint from
    // before it was recorded, then the same device, are one run's.
    let parts = parts(&records);
    let recorded: std::collections::BTreeSet<&str> =
        parts.iter().map(|(_, _, ran)| ran.as_str()).filter(|ran| *ran != NOT_RECORDED).collect();
    if recorded.len() > 1 {
        let said: Vec<String> = parts
            .iter()
            .map(|(from, to, ran)| match from == to {
                true => format!("epoch {from} {ran}"),
                false => format!("epochs {from}-{to} {ran}"),
            })
            .collect();
        notes.push(format!(
            "{name} trained in parts, resumed on another device or in another precision: {}",
            said.join(", ")
        ));
    }
    match run {
        Some(e) if logged < e => notes.push(format!(
            "{name}: metrics.jsonl holds {logged} of the {e} epochs metrics.json counts (cut short or edited?); \
             its best epoch is told from those"
        )),
        Some(e) if logged > e => notes.push(format!(
            "{name}: metrics.jsonl holds {logged} epochs, more than the {e} metrics.json counts (edited, or another \
             run's lines added?); its best epoch is told from all of them"
        )),
        _ => {}
    }
    notes
}

/// How [`parts`] names epochs that do not say where they ran.
const NOT_RECORDED: &str = "not recorded";

/// The stretches of consecutive epochs in `records` (metrics.jsonl's
/// lines) that ran on one kind of device in one precision: first and last
/// epoch, and `fp32 on cpu` (`not recorded` for epochs of checkpoints from
/// before it was kept).
fn parts(records: &[Value]) -> Vec<(u64, u64, String)> {
    let mut parts: Vec<(u64, u64, String)> = Vec::new();
    for r in records {
        let Some(epoch) = r["epoch"].as_u64() else { continue };
        let ran = match (r["ran"]["precision"].as_str(), r["ran"]["device"].as_str()) {
            (Some(precision), Some(device)) => format!("{precision} on {device}"),
            _ => NOT_RECORDED.to_string(),
        };
        match parts.last_mut() {
            Some((_, to, last)) if *last == ran => *to = epoch,
            _ => parts.push((epoch, epoch, ran)),
        }
    }
    parts
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A finished run folder as `kynml train` leaves it, with `profile`
    /// as its profile.json where given.
    fn run_folder(dir: &Path, seconds: f64, profile: Option<&str>) {
        std::fs::create_dir_all(dir).unwrap();
        let metrics = serde_json::json!({
            "spec": "s.kyn", "model": "M", "precision": "fp32", "primary_metric": "accuracy",
            "metrics": {"accuracy": 0.9, "val_loss": 0.3}, "epochs_run": 1, "seconds": seconds,
            "samples_per_sec": 10.0, "device": "cpu",
        });
        std::fs::write(dir.join("metrics.json"), metrics.to_string()).unwrap();
        let epoch = serde_json::json!({"epoch": 1, "metrics": {"accuracy": 0.9}, "seconds": 2.0, "data_wait": 0.5});
        std::fs::write(dir.join("metrics.jsonl"), format!("{epoch}\n")).unwrap();
        if let Some(profile) = profile {
            std::fs::write(dir.join("profile.json"), profile).unwrap();
        }
    }

    /// A one-device run's profile.json whose mean step is 2.175408 s (all of it forward).
    fn profile_json() -> String {
        profile_with(&[("forward", 2.175408, 1.0)], false)
    }

    /// A profile.json with the given phases' means and shares (the others
    /// 0), and a `sync` phase where `data_parallel`.
    fn profile_with(given: &[(&str, f64, f64)], data_parallel: bool) -> String {
        let phase = |name: &str| {
            let (mean, share) = given.iter().find(|g| g.0 == name).map_or((0.0, 0.0), |g| (g.1, g.2));
            serde_json::json!({"phase": name, "mean": mean, "share": share})
        };
        let phases: Vec<serde_json::Value> = kynml_core::train::profile::PHASES
            .into_iter()
            .filter(|name| *name != "sync" || data_parallel)
            .map(phase)
            .collect();
        serde_json::json!({
            "steps": 4,
            "phases": phases,
            "verdict": {"advice": "compute-bound: ..."},
        })
        .to_string()
    }

    /// A run's steady steps are what runs side by side compare: a first
    /// step that compiled kernels for two seconds does not make the mean.
    #[test]
    fn a_chain_resumed_elsewhere_is_told_in_parts() {
        let line = |epoch: u64, ran: Value| serde_json::json!({"epoch": epoch, "ran": ran});
        let cpu = serde_json::json!({"device": "cpu", "precision": "fp32"});
        let wgpu = serde_json::json!({"device": "wgpu", "precision": "fp16"});
        let records = [line(1, Value::Null), line(2, cpu.clone()), line(3, cpu.clone()), line(4, wgpu), line(5, cpu)];
        let said = parts(&records);
        assert_eq!(
            said,
            [
                (1, 1, "not recorded".to_string()),
                (2, 3, "fp32 on cpu".to_string()),
                (4, 4, "fp16 on wgpu".to_string()),
                (5, 5, "fp32 on cpu".to_string())
            ]
        );
        assert_eq!(parts(&records[1..3]).len(), 1, "one stretch: nothing to say");

        // Said only where two recorded stretches differ: a run resumed from a
        // checkpoint of before it was recorded, on the same device, is not in parts.
        let tmp = tempfile::tempdir().unwrap();
        let noted = |lines: &[Value]| {
            std::fs::write(tmp.path().join("metrics.json"), r#"{"metrics": {}, "epochs_run": 3}"#).unwrap();
            let text: Vec<String> = lines.iter().map(Value::to_string).collect();
            std::fs::write(tmp.path().join("metrics.jsonl"), text.join("\n")).unwrap();
            history_notes(tmp.path(), "r").into_iter().filter(|n| n.contains("in parts")).collect::<Vec<_>>()
        };
        assert_eq!(noted(&records[..3]), Vec::<String>::new());
        let said = noted(&records[..4]);
        assert_eq!(
            said,
            ["r trained in parts, resumed on another device or in another precision: epoch 1 not recorded, epochs \
              2-3 fp32 on cpu, epoch 4 fp16 on wgpu"]
        );
    }

    #[test]
    fn the_phases_shown_are_the_steps_after_warm_up() {
        let tmp = tempfile::tempdir().unwrap();
        let mut profile: Value = serde_json::from_str(&profile_json()).unwrap();
        let steady: Value =
            serde_json::from_str(&profile_with(&[("forward", 0.004, 0.8), ("wait", 0.001, 0.2)], false)).unwrap();
        profile["steady"] = serde_json::json!({"steps": 3, "phases": steady["phases"]});
        let dir = tmp.path().join("warm");
        run_folder(&dir, 2.0, Some(&profile.to_string()));
        let r = report(std::slice::from_ref(&dir)).unwrap_or_else(|f| panic!("{}", f.message));
        let row =
            r.text.lines().rev().find(|l| l.trim_start().starts_with("warm ")).unwrap_or_else(|| panic!("{}", r.text));
        assert!(row.contains("3 (+1 warm-up)") && row.contains("80.0%") && row.contains("5.00 ms"), "{row}");
        // A profile.json from before steady phases were kept: every step's.
        run_folder(&dir, 2.0, Some(&profile_json()));
        let r = report(std::slice::from_ref(&dir)).unwrap_or_else(|f| panic!("{}", f.message));
        assert!(r.text.contains("2175 ms"), "{}", r.text);
    }

    /// An epoch log whose last line was cut short is that error, not an
    /// epoch: no note counts it or finds the epochs out of order, and a
    /// report of that run alone draws no empty "time and memory" table.
    #[test]
    fn a_cut_short_epoch_line_is_an_error_not_an_epoch() {
        let tmp = tempfile::tempdir().unwrap();
        let cut = tmp.path().join("cut");
        run_folder(&cut, 2.0, None);
        let mut lines = std::fs::read_to_string(cut.join("metrics.jsonl")).unwrap();
        lines.push_str("{\"epoch\":");
        std::fs::write(cut.join("metrics.jsonl"), lines).unwrap();
        let r = report(std::slice::from_ref(&cut)).unwrap_or_else(|f| panic!("{}", f.message));
        assert_eq!(r.problems.len(), 1, "{:?}", r.problems);
        assert!(r.problems[0].contains("metrics.jsonl:2"), "{:?}", r.problems);
        let notes = r.notes.join("\n");
        assert!(!notes.contains("one after another") && !notes.contains("epochs, more than"), "{notes}");
        assert!(!r.text.contains("time and memory"), "{}", r.text);
    }

    /// A damaged or missing metrics.jsonl is an error said once, and costs
    /// the run only its "best at epoch" part: its row, read from
    /// metrics.json, stands.
    #[test]
    fn a_damaged_epoch_log_keeps_the_runs_row() {
        let tmp = tempfile::tempdir().unwrap();
        let (good, bad) = (tmp.path().join("good"), tmp.path().join("bad"));
        run_folder(&good, 2.0, None);
        run_folder(&bad, 3.0, None);
        std::fs::write(bad.join("metrics.jsonl"), "{\"epoch\": 1, \"metr").unwrap();
        let r = report(&[good.clone(), bad.clone()]).unwrap_or_else(|f| panic!("{}", f.message));
        assert!(
            r.text.lines().any(|l| l.trim_start().starts_with("bad ") && l.contains("accuracy 0.9000")),
            "{}",
            r.text
        );
        assert_eq!(r.problems.len(), 1, "{:?}", r.problems);
        assert!(r.problems[0].contains("metrics.jsonl:1"), "{:?}", r.problems);
        std::fs::remove_file(bad.join("metrics.jsonl")).unwrap();
        let r = report(&[good, bad]).unwrap_or_else(|f| panic!("{}", f.message));
        assert!(r.text.lines().any(|l| l.trim_start().starts_with("bad ")), "{}", r.text);
        assert_eq!(r.problems.len(), 1, "{:?}", r.problems);
        assert!(r.problems[0].contains("cannot read"), "{:?}", r.problems);
    }

    /// A metric the run could not score is written as null: shown as NaN,
    /// as the run printed it, not as `?` (a damaged value).
    #[test]
    fn a_metric_written_as_null_is_shown_as_nan() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("r1");
        run_folder(&dir, 2.0, None);
        let metrics = serde_json::json!({
            "spec": "s.kyn", "model": "M", "precision": "fp32", "primary_metric": "r2",
            "metrics": {"r2": null, "val_loss": 0.3}, "epochs_run": 1, "seconds": 2.0,
            "samples_per_sec": 10.0, "device": "cpu",
        });
        std::fs::write(dir.join("metrics.json"), metrics.to_string()).unwrap();
        let r = report(std::slice::from_ref(&dir)).unwrap_or_else(|f| panic!("{}", f.message));
        assert!(r.text.contains("r2 NaN (epoch 1)"), "{}", r.text);
        assert!(r.problems.is_empty() && r.notes.is_empty(), "{:?} {:?}", r.problems, r.notes);
    }

    /// A resumed run, whose log was cut short: both said.
    #[test]
    fn a_resumed_run_and_a_short_epoch_log_are_noted() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("r1");
        run_folder(&dir, 2.0, None);
        let metrics = serde_json::json!({
            "spec": "s.kyn", "model": "M", "precision": "fp32", "primary_metric": "accuracy",
            "metrics": {"accuracy": 0.9, "val_loss": 0.3}, "epochs_run": 3, "resumed_after": 1, "seconds": 2.0,
            "samples_per_sec": 10.0, "device": "cpu",
        });
        std::fs::write(dir.join("metrics.json"), metrics.to_string()).unwrap();
        let r = report(std::slice::from_ref(&dir)).unwrap_or_else(|f| panic!("{}", f.message));
        let notes = r.notes.join("\n");
        assert!(
            notes.contains("r1 resumed after epoch 1: its time and samples/s are those of epochs 2-3 only"),
            "{notes}"
        );
        assert!(notes.contains("r1: metrics.jsonl holds 1 of the 3 epochs metrics.json counts"), "{notes}");
        assert!(r.text.contains("3 (resumed at 1)"), "{}", r.text);
        // Resumed from a checkpoint taken inside the first epoch: said too.
        let first = serde_json::json!({"resumed_after": 0, "epochs_run": 1, "metrics": {"val_loss": 0.3}});
        std::fs::write(dir.join("metrics.json"), first.to_string()).unwrap();
        let r = report(std::slice::from_ref(&dir)).unwrap_or_else(|f| panic!("{}", f.message));
        assert!(r.notes.join("\n").contains("r1 resumed inside epoch 1: its time"), "{:?}", r.notes);
        assert!(r.text.contains("1 (resumed in epoch 1)"), "{}", r.text);
        // Resumed from a finished checkpoint: nothing trained, said so.
        let done = serde_json::json!({"resumed_after": 3, "epochs_run": 3, "metrics": {"val_loss": 0.3}});
        std::fs::write(dir.join("metrics.json"), done.to_string()).unwrap();
        let r = report(std::slice::from_ref(&dir)).unwrap_or_else(|f| panic!("{}", f.message));
        assert!(r.notes.join("\n").contains("r1 resumed after epoch 3 and trained no epoch"), "{:?}", r.notes);
        // A log holding more epochs than the run counts: said too.
        run_folder(&dir, 2.0, None);
        let epoch = serde_json::json!({"epoch": 1, "metrics": {"accuracy": 0.9}, "seconds": 2.0, "data_wait": 0.5});
        std::fs::write(dir.join("metrics.jsonl"), format!("{epoch}\n{epoch}\n")).unwrap();
        let r = report(std::slice::from_ref(&dir)).unwrap_or_else(|f| panic!("{}", f.message));
        assert!(r.notes.join("\n").contains("r1: metrics.jsonl holds 2 epochs, more than the 1"), "{:?}", r.notes);
        assert!(r.notes.join("\n").contains("r1: metrics.jsonl's epochs are not one after another (1, 1)"));
        // No log at all: the error says so, once; no note counts its epochs.
        std::fs::remove_file(dir.join("metrics.jsonl")).unwrap();
        let r = report(std::slice::from_ref(&dir)).unwrap_or_else(|f| panic!("{}", f.message));
        assert!(r.problems.iter().any(|p| p.contains("cannot read")), "{:?}", r.problems);
        assert!(!r.notes.join("\n").contains("metrics.jsonl holds"), "{:?}", r.notes);
        // A run that was not resumed and whose log is whole: nothing said.
        run_folder(&dir, 2.0, None);
        assert!(report(&[dir]).unwrap_or_else(|f| panic!("{}", f.message)).notes.is_empty());
    }

    /// The replicas' meeting is a column only where a data-parallel run is
    /// shown, `-` for the runs on one device beside it.
    #[test]
    fn the_sync_column_is_shown_with_a_data_parallel_run() {
        let tmp = tempfile::tempdir().unwrap();
        let (one, two) = (tmp.path().join("one"), tmp.path().join("two"));
        run_folder(&one, 2.0, Some(&profile_json()));
        run_folder(&two, 2.0, Some(&profile_with(&[("forward", 0.002, 0.6), ("sync", 0.001, 0.4)], true)));
        let column = |dirs: &[PathBuf]| {
            let r = report(dirs).unwrap_or_else(|f| panic!("{}", f.message));
            let phases = r.text.split("where the step time goes").nth(1).unwrap().to_string();
            phases
        };
        let both = column(&[one.clone(), two]);
        let header = both.lines().find(|l| l.contains("forward")).unwrap();
        assert!(header.contains(" backward   sync    optimizer "), "{both}");
        assert!(both.lines().any(|l| l.trim_start().starts_with("two") && l.contains(" 40.0% ")), "{both}");
        assert!(both.lines().any(|l| l.trim_start().starts_with("one") && l.contains(" - ")), "{both}");
        let alone = column(&[one]);
        assert!(!alone.contains("sync"), "{alone}");
    }

    /// On the CPU the row says which engine ran the steps (the native engine
    /// or Burn's backend); a GPU's row, and a run that did not record its
    /// engine, show the device alone.
    #[test]
    fn a_cpu_row_names_its_engine() {
        let cell = |m: Value| device_cell(&m);
        assert_eq!(cell(serde_json::json!({"device": "cpu", "devices": ["cpu"], "engine": "native"})), "cpu (native)");
        assert_eq!(
            cell(serde_json::json!({"device": "cpu", "devices": ["cpu", "cpu"], "engine": "burn"})),
            "cpu,cpu (burn)"
        );
        assert_eq!(cell(serde_json::json!({"device": "cuda:0", "engine": "burn"})), "cuda:0");
        assert_eq!(cell(serde_json::json!({"device": "cpu"})), "cpu");
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("r1");
        run_folder(&dir, 2.0, None);
        let path = dir.join("metrics.json");
        let mut m: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        m["engine"] = "native".into();
        std::fs::write(&path, m.to_string()).unwrap();
        let r = report(&[dir]).unwrap_or_else(|f| panic!("{}", f.message));
        assert!(r.text.lines().any(|l| l.trim_start().starts_with("r1") && l.contains(" cpu (native) ")), "{}", r.text);
        // A resumed run with its validation alone left took no step: `-`, not `?` or 0.
        m["samples_per_sec"] = Value::Null;
        std::fs::write(&path, m.to_string()).unwrap();
        let r = report(&[tmp.path().join("r1")]).unwrap_or_else(|f| panic!("{}", f.message));
        let row = r.text.lines().find(|l| l.trim_start().starts_with("r1")).unwrap();
        assert!(row.trim_end().ends_with(" -"), "{}", r.text);
    }

    /// A field edited to the wrong kind of value is shown as `?` and said,
    /// with what it holds and what belongs there.
    #[test]
    fn a_field_of_the_wrong_kind_is_said() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("r1");
        run_folder(&dir, 2.0, None);
        let metrics = serde_json::json!({
            "spec": "s.kyn", "model": "M", "precision": "fp32", "primary_metric": "accuracy",
            "metrics": {"accuracy": "high", "val_loss": 0.3}, "epochs_run": "three", "seconds": 2.0,
            "samples_per_sec": 10.0, "device": "cpu", "best_epoch": null, "stopped_early": 1,
        });
        std::fs::write(dir.join("metrics.json"), metrics.to_string()).unwrap();
        let r = report(std::slice::from_ref(&dir)).unwrap_or_else(|f| panic!("{}", f.message));
        let notes = r.notes.join("\n");
        assert!(
            notes.contains("r1: metrics.json's `epochs_run` is \"three\", not a whole number; shown as `?`"),
            "{notes}"
        );
        assert!(notes.contains("`stopped_early` is 1, not true or false; read as no early stop"), "{notes}");
        assert!(notes.contains("`metrics.accuracy` is \"high\", not a number"), "{notes}");
        // `null` (no early stop) and the fields of the right kind: nothing said of them.
        assert_eq!(r.notes.len(), 3, "{notes}");
        assert!(r.text.contains('?'), "{}", r.text);
    }

    #[test]
    fn strays_damaged_profiles_and_repeats_are_left_out_with_a_note() {
        let tmp = tempfile::tempdir().unwrap();
        let runs = tmp.path().join("runs");
        run_folder(&runs.join("w0"), 2175.408, Some(&profile_json()));
        run_folder(&runs.join("w1"), 0.0051, Some("{\"steps\": 4, \"pha"));
        std::fs::write(runs.join("notes.txt"), "not a run").unwrap();
        std::fs::create_dir_all(runs.join("empty")).unwrap();
        let args: Vec<PathBuf> = ["w0", "w1", "notes.txt", "empty", "./w0/"].iter().map(|p| runs.join(p)).collect();
        let r = report(&args).unwrap_or_else(|f| panic!("{}", f.message));
        let notes = r.notes.join("\n");
        assert!(notes.contains("notes.txt` is not a folder") && notes.contains("left out of the report"), "{notes}");
        assert!(notes.contains("empty` is not a run folder"), "{notes}");
        assert!(notes.contains("./w0/` is `") && notes.contains("shown once"), "{notes}");
        assert!(notes.contains("profile.json:1:") && notes.contains("w1 is shown as not profiled"), "{notes}");
        let t = &r.text;
        let results = t.split("time and memory").next().unwrap();
        let rows: Vec<&str> = results.lines().filter(|l| l.trim_start().starts_with('w')).collect();
        assert_eq!(rows.len(), 2, "{t}");
        assert!(t.contains("w1: not profiled (its profile.json cannot be read)"), "{t}");
        assert!(t.contains("w0: compute-bound"), "{t}");
        // One unit a column, right-aligned: seconds for the run's time,
        // milliseconds for the mean step.
        assert!(rows[0].contains(" 2175 s ") && rows[1].contains(" 0.005 s "), "{t}");
        let end = |row: &str, cell: &str| row.find(cell).map(|i| i + cell.len());
        assert_eq!(end(rows[0], "2175 s"), end(rows[1], "0.005 s"), "{t}");
        let phases = t.split("where the step time goes").nth(1).unwrap();
        assert!(phases.lines().any(|l| l.trim_start().starts_with("w0") && l.ends_with(" 2175 ms")), "{t}");
        assert!(t.contains("waiting for batches (of epoch time)"), "{t}");

        // A profile lacking phases is not shown as if whole; a profiled run
        // whose profile.json is gone (its trace is there) is said to be one.
        let short = serde_json::json!({"steps": 4, "phases": [{"phase": "forward", "mean": 1.0, "share": 1.0}]});
        std::fs::write(runs.join("w0/profile.json"), short.to_string()).unwrap();
        std::fs::write(runs.join("w1/trace.json"), "[]").unwrap();
        std::fs::remove_file(runs.join("w1/profile.json")).unwrap();
        let r = report(&[runs.join("w0"), runs.join("w1")]).unwrap_or_else(|f| panic!("{}", f.message));
        let notes = r.notes.join("\n");
        assert!(notes.contains("no mean and share for the phases `wait`, `copy`, `backward`"), "{notes}");
        assert!(notes.contains("w1 was profiled (its trace.json or profile chart is there) but has no profile.json"));
        assert!(r.text.contains("w1: not profiled (its profile.json is missing)"), "{}", r.text);

        // Asked to profile, but no step trained (a resume with no epoch left): said so.
        std::fs::remove_file(runs.join("w1/trace.json")).unwrap();
        std::fs::write(runs.join("w1/spec.resolved.json"), r#"{"train": {"profile": true}}"#).unwrap();
        // One that trained (its profile.json lost to a full disk, say): not so.
        let r = report(&[runs.join("w1")]).unwrap_or_else(|f| panic!("{}", f.message));
        assert!(r.text.contains("w1: profiled, but its profile.json is missing"), "{}", r.text);
        let metrics = serde_json::json!({"metrics": {"val_loss": 0.3}, "epochs_run": 2, "resumed_after": 2});
        std::fs::write(runs.join("w1/metrics.json"), metrics.to_string()).unwrap();
        let r = report(&[runs.join("w1")]).unwrap_or_else(|f| panic!("{}", f.message));
        assert!(r.text.contains("w1: profiled, but it trained no step"), "{}", r.text);

        // Nothing but strays: problems (exit 2), naming them, and no table.
        let strays: Vec<PathBuf> = ["notes.txt", "empty"].iter().map(|p| runs.join(p)).collect();
        let r = report(&strays).unwrap_or_else(|f| panic!("{}", f.message));
        assert!(r.text.is_empty() && r.json.is_empty(), "{}", r.text);
        assert!(r.problems.iter().any(|p| p.contains("notes.txt` is not a folder")), "{:?}", r.problems);
    }
}
