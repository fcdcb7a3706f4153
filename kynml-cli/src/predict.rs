//! `kynml predict` and `kynml eval`: a trained model on the rows of a CSV file.

use std::io::Write;
use std::path::Path;

use kynml_core::predict::{Predictions, Predictor};
use kynml_core::spec::types::DeviceRequest;

use crate::args::{EvalArgs, PredictArgs};
use crate::failure::Failure;
use crate::render;

fn load(model: &Path, device: DeviceRequest) -> Result<Predictor, Failure> {
    let device = crate::devices::pick(device)?;
    Predictor::load(model, &device).map_err(|e| Failure::input(format!("error: {e}")))
}

pub fn predict(args: PredictArgs) -> Result<(), Failure> {
    if let Some(output) = &args.output {
        check_output(output)?;
    }
    let predictor = load(&args.model, args.device)?;
    let m = predictor.model();
    let rows = m.read_rows(args.rows(), false).map_err(|e| Failure::input(format!("error: {e}")))?;
    note_unseen(&rows, m.tokens.is_some());
    let p = predictor.predict_rows(&rows).map_err(|e| Failure::input(format!("error: {e}")))?;
    let text = predictions_csv(&p, &m.target, m.head.class_names());
    let Some(output) = &args.output else {
        // A reader that stops early (`| head`) is not a failure.
        let mut out = std::io::stdout().lock();
        return match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
            Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                Err(Failure::run(format!("error: cannot write the predictions to standard output: {e}")))
            }
            _ => Ok(()),
        };
    };
    kynml_core::atomic_file::write(output, text.as_bytes())
        .map_err(|e| Failure::run(format!("error: cannot write {}: {e}", output.display())))?;
    println!("{} predictions written to {}", p.rows, output.display());
    Ok(())
}

/// `--output` must name a file in a folder that exists: said before any
/// work, as bad input (exit 2).
fn check_output(output: &Path) -> Result<(), Failure> {
    let refuse = |why: String| Failure::input(format!("error: cannot write {}: {why}", output.display()));
    if output.is_dir() {
        return Err(refuse("it is a folder, not a file".into()));
    }
    let folder = kynml_core::atomic_file::folder(output);
    match std::fs::metadata(folder) {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(_) => Err(refuse(format!("its folder {} is a file", folder.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Err(refuse(format!("its folder {} does not exist", folder.display())))
        }
        Err(e) => Err(refuse(format!("cannot reach its folder {}: {e}", folder.display()))),
    }
}

pub fn eval(args: EvalArgs) -> Result<(), Failure> {
    let predictor = load(&args.model, args.device)?;
    let m = predictor.model();
    let rows = m.read_rows(args.rows(), true).map_err(|e| Failure::input(format!("error: {e}")))?;
    note_unseen(&rows, m.tokens.is_some());
    let metrics = predictor.evaluate(&rows).map_err(|e| Failure::input(format!("error: {e}")))?;
    println!("{} of {}", render::count(rows.rows, "row"), args.rows().display());
    println!("{}", render::metrics_table(&metrics, "value"));
    Ok(())
}

/// Says, per categorical column, how many rows hold a value the model never
/// saw in training (they are predicted as its unseen category).
fn note_unseen(rows: &kynml_core::data::ModelRows, text: bool) {
    if let (n @ 1.., longest) = rows.cut {
        let holds = if n == 1 { "holds" } else { "hold" };
        eprintln!(
            "note: {n} of the {} {holds} more positions than the model reads (the longest, {longest}); it reads \
             their first ones, as training did",
            render::count(rows.rows, "row"),
        );
    }
    for (column, n) in &rows.unseen {
        if text {
            let are = if *n == 1 { "is" } else { "are" };
            let tokens = render::count(*n, "token");
            eprintln!("note: {tokens} of `{column}` {are} not in the model's vocabulary; they use its unseen token");
            continue;
        }
        eprintln!(
            "note: {n} of {} rows hold a `{column}` the model never saw in training; they use its unseen category",
            rows.rows
        );
    }
}

/// Regression: one column per output, named after the target. Classes: the
/// predicted class, then one probability column per class.
fn predictions_csv(p: &Predictions, target: &str, classes: &[String]) -> String {
    let mut out = String::new();
    let quote =
        |s: &str| if s.contains([',', '"', '\n']) { format!("\"{}\"", s.replace('"', "\"\"")) } else { s.into() };
    match (&p.labels, &p.probabilities) {
        (Some(labels), Some(probs)) => {
            let header: Vec<String> =
                std::iter::once(quote(target)).chain(classes.iter().map(|c| quote(&format!("p_{c}")))).collect();
            out += &(header.join(",") + "\n");
            for (label, row) in labels.iter().zip(probs.chunks(classes.len().max(1))) {
                let cells: Vec<String> =
                    std::iter::once(quote(label)).chain(row.iter().map(|v| v.to_string())).collect();
                out += &(cells.join(",") + "\n");
            }
        }
        _ => {
            let header: Vec<String> = if p.width == 1 {
                vec![quote(target)]
            } else {
                (0..p.width).map(|i| quote(&format!("{target}_{i}"))).collect()
            };
            out += &(header.join(",") + "\n");
            for row in p.outputs.chunks(p.width.max(1)) {
                out += &(row.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(",") + "\n");
            }
        }
    }
    out
}
