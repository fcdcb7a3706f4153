//! KynML embedded in a service: train a model in-process (or load a run
//! folder), then answer predictions, without the `kynml` command.
//!
//! ```sh
//! # train the iris example in-process, then predict the rows typed on stdin
//! printf '5.1,3.5,1.4,0.2\n6.9,3.1,5.4,2.1\n' | cargo run --release -p kynml-core --example service
//! # or serve a finished run (or a .safetensors / .mpk export)
//! cargo run --release -p kynml-core --example service -- runs/iris-20261121-101500 < rows.csv
//! ```
//!
//! Each input line is one CSV row of the model's input columns (numbers raw
//! as the data holds them; categorical and text columns as text), in the
//! order printed at the start, or in the order of a header line sent first
//! (a file `kynml predict` reads, header and all, can be piped in as it is).
//! Each request line gets one JSON answer line, in order: a row the model
//! cannot take, or a blank line, gets `{"error": ...}` and the service goes on.

use std::io::{BufRead, Write};
use std::path::Path;

use kynml_core::export;
use kynml_core::plan::SpecFile;
use kynml_core::predict::Predictor;
use kynml_core::train::{train, TrainEvent, TrainSettings};

fn main() -> std::process::ExitCode {
    match serve() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        // Each error's own words (a spec's with its file, line and column).
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn serve() -> Result<(), Box<dyn std::error::Error>> {
    let device = kynml_backend::select(kynml_backend::DeviceChoice::Auto)?;
    // A model trained here has its kernels compiled by training; one loaded
    // compiles them on its first request.
    let mut sealed = std::env::args().nth(1).is_none();
    let predictor = match std::env::args().nth(1) {
        Some(path) => Predictor::load(Path::new(&path), &device)?,
        None => {
            let spec_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/iris/iris.kyn");
            let mut spec = SpecFile::load(&spec_path)?;
            let data = spec.load_data()?;
            // Checkpoints (where the spec keeps them) as `kynml train` keeps them.
            let settings: TrainSettings = spec.train_settings(&data, false)?;
            let result = train(&spec.spec, &data, &device, &settings, &mut |event| {
                if let TrainEvent::EpochEnd(r) = event {
                    eprint!("\rtraining: epoch {} val_loss {:.4}   ", r.epoch, r.val_loss);
                }
            })?;
            eprintln!();
            seal_kernels();
            let model = export::from_model(&result.model, &spec.spec.model, &data.info, spec.spec.train.loss.value);
            Predictor::new(model, &device)?
        }
    };
    // The header row, each name quoted as CSV needs it.
    let quote = |c: &&str| match c.contains([',', '"', '\n', '\r']) {
        true => format!("\"{}\"", c.replace('"', "\"\"")),
        false => c.to_string(),
    };
    let columns = predictor.model().input_columns().iter().map(quote).collect::<Vec<_>>().join(",");
    eprintln!(
        "ready on {} via the {} engine: one row per line, columns {columns}",
        device.describe(),
        predictor.engine().name()
    );
    if let Some(note) = predictor.engine_note() {
        eprintln!("note: {note}");
    }

    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut header = columns.clone();
    for (n, line) in std::io::stdin().lock().split(b'\n').enumerate() {
        let mut line = line?;
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        // A line that is not UTF-8 is answered, like any row the model cannot take.
        let line = match String::from_utf8(line) {
            Ok(line) => line,
            Err(e) => {
                let at = e.utf8_error().valid_up_to();
                let byte = e.as_bytes()[at];
                let error = format!("the line is not UTF-8 text: byte 0x{byte:02x} at byte {} of the line", at + 1);
                writeln!(out, "{}", serde_json::json!({ "error": error }))?;
                continue;
            }
        };
        let line = if n == 0 { line.trim_start_matches('\u{feff}').to_string() } else { line };
        // A first line naming every input column is a header: the rows
        // that follow are read in its order. It gets no answer.
        if n == 0 && names_every_column(&line, &predictor.model().input_columns()) {
            header = line;
            continue;
        }
        // A blank line is answered too, so that answers stay in line with requests.
        if line.trim().is_empty() {
            writeln!(out, "{}", serde_json::json!({ "error": "a blank line: one row of input columns expected" }))?;
            continue;
        }
        // The header, then the row: read by column name, as `kynml predict` reads a file.
        let request = format!("{header}\n{line}\n");
        let answer = match predictor.model().read_rows_from(request.as_bytes(), "request".as_ref(), false) {
            Err(e) => serde_json::json!({ "error": e.to_string() }),
            // A lone carriage return inside the line ends a row for the CSV
            // reader: one answer a line holds one row's prediction, or an error.
            Ok(rows) if rows.rows != 1 => serde_json::json!({
                "error": format!("the line holds {} rows (a carriage return inside it?): one row expected", rows.rows)
            }),
            Ok(rows) => match predictor.predict_rows(&rows) {
                Ok(p) => {
                    if !sealed {
                        seal_kernels();
                        sealed = true;
                    }
                    match (&p.labels, &p.probabilities) {
                        (Some(labels), Some(probs)) => {
                            serde_json::json!({ "label": labels[0], "probabilities": probs })
                        }
                        _ => serde_json::json!({ "prediction": p.outputs }),
                    }
                }
                Err(e) => serde_json::json!({ "error": e.to_string() }),
            },
        };
        writeln!(out, "{answer}")?;
    }
    Ok(())
}

/// The GPU kernels tuned and compiled, kept for the next start (a failure
/// only means the next start checks them less; on the CPU there are none).
fn seal_kernels() {
    if let Err(e) = kynml_backend::kernel_cache::seal() {
        eprintln!("note: the kernel cache could not record this run's kernels ({e})");
    }
}

/// Whether a CSV line's cells, trimmed and unquoted, include every one of
/// the model's input columns (a header; a target column may stand beside them).
fn names_every_column(line: &str, columns: &[&str]) -> bool {
    let mut reader = csv::ReaderBuilder::new().has_headers(false).from_reader(line.as_bytes());
    let Some(Ok(cells)) = reader.records().next() else { return false };
    let cells: Vec<&str> = cells.iter().map(str::trim).collect();
    columns.iter().all(|c| cells.contains(c))
}
