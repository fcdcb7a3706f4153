//! `kynml predict` and `kynml eval`: a trained model on the rows of a CSV file.

use std::io::Write;
use std::path::Path;

use kynml_backend::kernel_cache::CacheState;
use kynml_core::predict::{Predictions, Predictor};
use kynml_core::spec::types::DeviceRequest;

use crate::args::{EvalArgs, PredictArgs};
use crate::failure::Failure;
use crate::render;

fn load(model: &Path, device: DeviceRequest) -> Result<Predictor, Failure> {
    crate::output::check_model_path(model)?;
    let device = crate::devices::pick(device).map_err(crate::devices::flag_hint)?;
    // On a GPU backend, what its kernel cache gives (as `train` says it in
    // "what runs"), and the wait for the kernels it lacks.
    if device.has_fusion() {
        let cache = kynml_backend::kernel_cache::installed();
        if let Some(cache) = cache.filter(|c| matches!(c.state, CacheState::Off { .. })) {
            eprintln!("note: kernel cache {}", cache.describe());
        }
        if crate::train::tunes_kernels(&device.kind, cache.map(|c| &c.state)) {
            eprintln!("note: {}", crate::train::TUNING_KERNELS);
        }
    }
    let predictor = Predictor::load(model, &device).map_err(|e| Failure::input(format!("error: {e}")))?;
    if let Some(note) = predictor.engine_note() {
        eprintln!("note: {note}");
    }
    Ok(predictor)
}

pub fn predict(args: PredictArgs) -> Result<(), Failure> {
    // `--output -` (or `/dev/stdout`) is standard output, as without `--output`.
    let output = args.output.as_deref().filter(|p| !crate::output::is_stdout(p));
    if let Some(output) = output {
        crate::output::check_output(output)?;
    }
    let predictor = load(&args.model, args.device)?;
    let m = predictor.model();
    let header = predictions_header(&m.target, m.head.class_names(), m.output());
    if let Some(output) = output {
        check_replaceable(output, args.rows(), &header)?;
    }
    // The rows are read, predicted on and written a piece at a time: a file
    // of any length in bounded memory, its first predictions out before the
    // rest is read. With `--output` the file appears only whole.
    let (input, name, probe) = open_rows(args.rows())?;
    let mut rows = m.read_rows_in_pieces(input, &name, false, kynml_core::data::PIECE_BYTES, probe);
    let mut seen = Seen::default();
    let mut stream = |out: &mut dyn Write| predict_stream(&predictor, &mut rows, &header, out, &mut seen);
    let written = match output {
        None => {
            let mut out = std::io::stdout().lock();
            let streamed = stream(&mut out).and_then(|()| out.flush().map_err(Streamed::Write));
            // What this run tuned and compiled is kept for the next, refused or not, as `train` keeps it.
            crate::devices::seal_cache();
            match streamed {
                // A reader that stops early (`| head`) is not a failure.
                Err(Streamed::Write(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
                Err(Streamed::Write(e)) => {
                    Err(Failure::run(format!("error: cannot write the predictions to standard output: {e}")))
                }
                Err(Streamed::Input(failure)) => Err(failure),
                Ok(()) => Ok(()),
            }
        }
        Some(output) => {
            let failed = |e: std::io::Error| Failure::run(format!("error: cannot write {}: {e}", output.display()));
            // A stream (a named pipe, /dev/null) is written as it comes; a
            // file is staged beside its place and put there whole.
            let mut input_failure = None;
            let written = if crate::output::is_stream(output) {
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(output)
                    .map_err(Streamed::Write)
                    .and_then(|mut f| stream(&mut f))
            } else {
                kynml_core::atomic_file::stage_with(output, |out| {
                    stream(out).map_err(|e| match e {
                        Streamed::Write(e) => e,
                        Streamed::Input(failure) => {
                            input_failure = Some(failure);
                            std::io::Error::other("the rows were refused")
                        }
                    })
                })
                .and_then(kynml_core::atomic_file::Staged::commit)
                .map_err(Streamed::Write)
            };
            crate::devices::seal_cache();
            match (input_failure, written) {
                (Some(failure), _) | (None, Err(Streamed::Input(failure))) => Err(failure),
                (None, Err(Streamed::Write(e))) => Err(failed(e)),
                (None, Ok(())) => {
                    let n = seen.predicted;
                    println!("{n} prediction{} written to {}", if n == 1 { "" } else { "s" }, output.display());
                    Ok(())
                }
            }
        }
    };
    // Said of the whole input, once it has all been predicted on (not of
    // the part read before a reader stopped early, or a row was refused).
    if let (Some(rows), true) = (&seen.rows, seen.all) {
        note_unseen(rows, m.tokens.is_some());
    }
    written
}

/// Why streaming predictions stopped: the rows (or the model on them), or
/// the writing.
enum Streamed {
    Input(Failure),
    Write(std::io::Error),
}

/// What the pieces read so far held, for the notes said at the end: their
/// rows' counts (no features), and the predictions written.
#[derive(Default)]
struct Seen {
    rows: Option<kynml_core::data::ModelRows>,
    predicted: usize,
    /// Every row was read and predicted on.
    all: bool,
}

impl Seen {
    fn add(&mut self, piece: &kynml_core::data::ModelRows) {
        let piece = piece.clone_counts();
        let Some(all) = &mut self.rows else {
            self.rows = Some(piece);
            return;
        };
        all.rows += piece.rows;
        all.cut = (all.cut.0 + piece.cut.0, all.cut.1.max(piece.cut.1));
        all.empty += piece.empty;
        for (column, n) in piece.unseen {
            match all.unseen.iter_mut().find(|(c, _)| *c == column) {
                Some((_, total)) => *total += n,
                None => all.unseen.push((column, n)),
            }
        }
    }
}

/// Predicts on each piece of rows and writes its predictions, the header
/// before the first; a file with the header and no row gets the header alone.
fn predict_stream<R: std::io::Read>(
    predictor: &Predictor,
    pieces: &mut kynml_core::export::RowsInPieces<'_, R>,
    header: &str,
    out: &mut dyn Write,
    seen: &mut Seen,
) -> Result<(), Streamed> {
    let refused = |e: &dyn std::fmt::Display| Streamed::Input(Failure::input(format!("error: {e}")));
    let mut write = |rows: &kynml_core::data::ModelRows, seen: &mut Seen| -> Result<(), Streamed> {
        let p = predictor.predict_rows(rows).map_err(|e| refused(&e))?;
        let mut text = if seen.predicted == 0 { format!("{header}\n") } else { String::new() };
        predictions_csv(&p, &mut text);
        out.write_all(text.as_bytes()).map_err(Streamed::Write)?;
        seen.predicted += p.rows;
        Ok(())
    };
    // Each part predicted holds whole passes of rows, the rest carried on
    // to the next piece: every row is predicted in the pass it would have
    // been in had the file been read whole, and so to the same last bit.
    let per = predictor.rows_per_pass().max(1);
    let mut carried: Option<kynml_core::data::ModelRows> = None;
    let mut first = true;
    for rows in pieces {
        let rows = match rows {
            // The model's columns with no row below them (a query that
            // matched nothing) are predicted as nothing: the header alone,
            // as a pipeline's next stage expects, not a failed job.
            Err(kynml_core::data::DataError::Empty { header: true, path, .. }) if first => {
                eprintln!("note: {} has the model's columns and no row below them: no predictions", path.display());
                return out.write_all(format!("{header}\n").as_bytes()).map_err(Streamed::Write);
            }
            rows => rows.map_err(|e| refused(&e))?,
        };
        first = false;
        seen.add(&rows);
        let mut rows = match carried.take() {
            Some(mut before) => {
                before.features.extend_from_slice(&rows.features);
                before.lines.extend_from_slice(&rows.lines);
                before.rows += rows.rows;
                before
            }
            None => rows,
        };
        let whole = rows.rows / per * per;
        if whole < rows.rows {
            let width = rows.features.len() / rows.rows.max(1);
            carried = Some(kynml_core::data::ModelRows {
                features: rows.features.split_off(whole * width),
                lines: rows.lines.split_off(whole),
                rows: rows.rows - whole,
                ..rows.clone_counts()
            });
            rows.rows = whole;
        }
        if whole > 0 {
            write(&rows, seen)?;
        }
    }
    if let Some(rows) = carried {
        write(&rows, seen)?;
    }
    seen.all = true;
    Ok(())
}

/// The rows to predict on, as a stream: a file (a device refused unread, as
/// training refuses one), or standard input for `-`; with the name errors
/// give it, and whether it may never end (standard input, a named pipe).
fn open_rows(path: &Path) -> Result<(Box<dyn std::io::Read>, std::path::PathBuf, bool), Failure> {
    if path.as_os_str() == "-" {
        return Ok((Box::new(std::io::stdin().lock()), "<stdin>".into(), true));
    }
    let (file, pipe) = kynml_core::data::open_data_file(path).map_err(|e| Failure::input(format!("error: {e}")))?;
    say_reading(path);
    Ok((Box::new(file), path.into(), pipe))
}

/// A large file takes a while: said, as `train` says it (on stderr:
/// standard output may be the predictions).
fn say_reading(path: &Path) {
    let size = std::fs::metadata(path).map_or(0, |m| m.len());
    if size >= crate::reading::SHOWN_FROM {
        eprintln!("reading {} ({})", path.display(), kynml_core::train::memory::bytes(size));
    }
}

/// An existing `--output` is replaced only when it is an earlier
/// predictions file with this model's columns (its header `header`), and
/// never when it is the rows' own file: a model, a checkpoint or a data file
/// at that path is refused, as bad input, before any work.
fn check_replaceable(output: &Path, rows: &Path, header: &str) -> Result<(), Failure> {
    let refuse = |why: &str| {
        Failure::input(format!(
            "error: {} {why}; refusing to overwrite it (move it away or choose another --output)",
            output.display()
        ))
    };
    let Ok(meta) = std::fs::metadata(output) else { return Ok(()) };
    if crate::output::is_stream(output) {
        return Ok(());
    }
    if !meta.is_file() {
        return Err(refuse("exists and is not a file"));
    }
    let same = |a: &Path, b: &Path| matches!((a.canonicalize(), b.canonicalize()), (Ok(a), Ok(b)) if a == b);
    if same(output, rows) {
        return Err(refuse("is the file the rows are read from"));
    }
    // An empty file (made with mktemp or touch) holds nothing to lose.
    if meta.len() == 0 {
        return Ok(());
    }
    // The header, which may span lines (a quoted class name), then a line
    // end; a byte-order mark (a spreadsheet's re-save) before it.
    use std::io::Read;
    let mut head = Vec::new();
    let read = std::fs::File::open(output).and_then(|f| f.take(header.len() as u64 + 5).read_to_end(&mut head));
    let head = head.strip_prefix(b"\xef\xbb\xbf").unwrap_or(&head);
    let ours =
        head.strip_prefix(header.as_bytes()).is_some_and(|rest| rest.starts_with(b"\n") || rest.starts_with(b"\r\n"));
    if read.is_err() || !ours {
        return Err(refuse(&format!(
            "exists and is not a predictions file with this model's columns (whose header is `{header}`)"
        )));
    }
    Ok(())
}

pub fn eval(args: EvalArgs) -> Result<(), Failure> {
    // `--json -` (or `/dev/stdout`) is standard output, which then holds the JSON alone.
    let to_stdout = args.json.as_deref().is_some_and(crate::output::is_stdout);
    let json = match args.json.as_deref().filter(|_| !to_stdout) {
        Some(path) => Some(crate::output::check_json_target(path, "kynml eval --json", is_eval_json)?),
        None => None,
    };
    let predictor = load(&args.model, args.device)?;
    let m = predictor.model();
    let rows = read_rows(m, args.rows(), true)?;
    note_unseen(&rows, m.tokens.is_some());
    let evaluation = predictor.evaluation(&rows);
    crate::devices::seal_cache();
    let evaluation = evaluation.map_err(|e| Failure::input(format!("error: {e}")))?;
    let mut said = format!(
        "{} of {}\n{}",
        render::count(rows.rows, "row"),
        rows.path.display(),
        render::metrics_table(&evaluation.metrics, "value")
    );
    if let Some(classes) = &evaluation.classes {
        said.push_str("\n\n");
        said.push_str(&render::class_breakdown(classes));
    }
    if to_stdout {
        eprintln!("{said}");
    } else {
        println!("{said}");
    }
    if !to_stdout && json.is_none() {
        return Ok(());
    }
    let text = eval_json(&args.model, &rows.path, rows.rows, &evaluation);
    match json {
        Some(target) => {
            crate::output::write_output(&target, text.as_bytes())
                .map_err(|e| Failure::run(format!("error: cannot write {}: {e}", target.display())))?;
            println!("metrics written to {}", args.json.as_deref().unwrap_or(&target).display());
            Ok(())
        }
        None => {
            let mut out = std::io::stdout().lock();
            match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                    Err(Failure::run(format!("error: cannot write the metrics to standard output: {e}")))
                }
                _ => Ok(()),
            }
        }
    }
}

/// `kynml eval --json`'s document: the model and rows scored, how many, and
/// each metric by name (a metric with no value, such as R² of a constant
/// target, is `null`); for a class head, `classes` (each class's
/// precision, recall, f1 and rows, in the model's class order; `null`
/// scores for a class in neither the rows nor the predictions) and
/// `confusion` (`confusion[t][p]`: rows of class `t` predicted as `p`; up
/// to [`CONFUSION_MAX_CLASSES`](kynml_core::predict::CONFUSION_MAX_CLASSES) classes).
fn eval_json(model: &Path, data: &Path, rows: usize, evaluation: &kynml_core::predict::Evaluation) -> String {
    let number = |v: f64| serde_json::Number::from_f64(v).map_or(serde_json::Value::Null, Into::into);
    let metrics: serde_json::Map<String, serde_json::Value> =
        evaluation.metrics.iter().map(|(name, &v)| (name.clone(), number(v))).collect();
    let mut doc = serde_json::json!({
        "model": model.display().to_string(),
        "data": data.display().to_string(),
        "rows": rows,
        "metrics": metrics,
    });
    if let Some(b) = &evaluation.classes {
        let classes: Vec<serde_json::Value> = b
            .names
            .iter()
            .zip(&b.scores)
            .map(|(name, s)| {
                // A class in neither the rows nor the predictions has no score.
                let score = |v: f64| if s.occurs() { number(v) } else { serde_json::Value::Null };
                serde_json::json!({
                    "class": name,
                    "precision": score(s.precision),
                    "recall": score(s.recall),
                    "f1": score(s.f1),
                    "rows": s.rows,
                })
            })
            .collect();
        doc["classes"] = classes.into();
        if let Some(confusion) = &b.confusion {
            doc["confusion"] = serde_json::json!(confusion);
        }
    }
    serde_json::to_string_pretty(&doc).expect("a JSON value is written") + "\n"
}

/// Whether `v` is an earlier `kynml eval --json` document, which a new one replaces.
fn is_eval_json(v: &serde_json::Value) -> bool {
    v.get("metrics").is_some_and(serde_json::Value::is_object) && v.get("rows").is_some_and(serde_json::Value::is_u64)
}

/// The rows of the CSV file at `path`, or of standard input for `-` (a
/// pipeline's), errors located at `<stdin>:LINE`.
fn read_rows(
    m: &kynml_core::export::ExportModel,
    path: &Path,
    need_target: bool,
) -> Result<kynml_core::data::ModelRows, Failure> {
    let rows = if path.as_os_str() == "-" {
        let bytes = read_stdin(m, need_target)?;
        m.read_rows_from(&bytes, Path::new("<stdin>"), need_target)
    } else {
        say_reading(path);
        m.read_rows(path, need_target)
    };
    rows.map_err(|e| Failure::input(format!("error: {e}")))
}

/// Standard input's rows, whole; its header is checked as soon as it has
/// come (or its first MiB, where no line ends there): a stream that is not
/// the model's rows (`yes |`, `< /dev/zero`) is refused at once, not read
/// until memory runs out.
fn read_stdin(m: &kynml_core::export::ExportModel, need_target: bool) -> Result<Vec<u8>, Failure> {
    use std::io::Read;
    const HEADER_AT_MOST: usize = 1 << 20;
    let failed = |e: std::io::Error| Failure::input(format!("error: cannot read the rows from standard input: {e}"));
    let mut stdin = std::io::stdin().lock();
    let mut bytes = Vec::new();
    let mut chunk = vec![0u8; 64 << 10];
    let mut checked = false;
    loop {
        let n = match stdin.read(&mut chunk) {
            Ok(0) => return Ok(bytes),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(failed(e)),
        };
        bytes.extend_from_slice(&chunk[..n]);
        if checked {
            continue;
        }
        // The first line with text in it (blank lines before a header are read past).
        // A line end inside quotes (a quoted name holding one) does not end it.
        let text_at = bytes.iter().position(|b| !b.is_ascii_whitespace());
        let header_end = text_at.and_then(|at| {
            let mut quotes = 0usize;
            bytes[at..].iter().enumerate().find_map(|(i, &b)| {
                quotes += usize::from(b == b'"');
                (b == b'\n' && quotes.is_multiple_of(2)).then_some(at + i + 1)
            })
        });
        let header = match header_end {
            Some(end) => &bytes[..end],
            None if bytes.len() >= HEADER_AT_MOST => &bytes[..],
            None => continue,
        };
        checked = true;
        // A header alone is "no data rows" when it is the model's: read on.
        match m.read_rows_from(header, Path::new("<stdin>"), need_target) {
            Ok(_) | Err(kynml_core::data::DataError::Empty { header: true, .. }) => {}
            Err(e) => return Err(Failure::input(format!("error: {e}"))),
        }
    }
}

/// Says, per categorical column, how many rows hold a value the model never
/// saw in training (they are predicted as its unseen category).
fn note_unseen(rows: &kynml_core::data::ModelRows, text: bool) {
    let (positions, values, a_sequence) =
        if text { ("tokens", "no token", "a text") } else { ("positions", "no values", "a sequence") };
    // `3 of the 40 rows hold`; of a single row, `the row holds`.
    let of = |n: usize| match rows.rows {
        1 => "the row holds".to_string(),
        all => format!("{n} of the {} {}", render::count(all, "row"), if n == 1 { "holds" } else { "hold" }),
    };
    if let (n @ 1.., longest) = rows.cut {
        eprintln!(
            "note: {} more {positions} than the model reads (the longest, {longest}); it reads their first ones, \
             as training did",
            of(n)
        );
    }
    if rows.empty > 0 {
        eprintln!("note: {} {values}: each is read as {a_sequence} of padding alone", of(rows.empty));
    }
    for (column, n) in &rows.unseen {
        if text {
            let are = if *n == 1 { "is" } else { "are" };
            let tokens = render::count(*n, "token");
            eprintln!("note: {tokens} of `{column}` {are} not in the model's vocabulary; they use its unseen token");
            continue;
        }
        let (hold, they) = if *n == 1 { ("holds", "it uses") } else { ("hold", "they use") };
        eprintln!(
            "note: {n} of {} rows {hold} a `{column}` the model never saw in training; {they} its unseen category",
            rows.rows
        );
    }
}

/// The header of the predictions: regression, one column per output, named
/// after the target; classes, the predicted class, then one probability
/// column per class.
fn predictions_header(target: &str, classes: &[String], width: usize) -> String {
    let header: Vec<String> = if !classes.is_empty() {
        let probabilities: Vec<String> = classes.iter().map(|c| format!("p_{c}")).collect();
        // A target named as a probability column (`p_yes`, a class `yes`)
        // would give the header that name twice: the label's gets `_label`.
        let mut label = target.to_string();
        while probabilities.contains(&label) {
            label += "_label";
        }
        std::iter::once(quote(&label)).chain(probabilities.iter().map(|p| quote(p))).collect()
    } else if width == 1 {
        // Not the target's own name: a file of true values under it is
        // never taken for earlier predictions (and replaced).
        vec![quote(&format!("{target}_predicted"))]
    } else {
        (0..width).map(|i| quote(&format!("{target}_{i}"))).collect()
    };
    header.join(",")
}

fn quote(s: &str) -> String {
    // A lone `\r` ends a line for most CSV readers, as `\n` does.
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.into()
    }
}

/// A prediction as a CSV cell: the shortest digits that read back as the
/// same f32, in exponent form for the very large and the very small
/// (`2.9569975e36`, not 37 digits; `1.2e-9`, not nine zeros first).
fn cell(v: f32) -> String {
    if v != 0.0 && v.is_finite() && !(1e-6..1e16).contains(&v.abs()) {
        format!("{v:e}")
    } else {
        v.to_string()
    }
}

/// The predictions as CSV rows (one a row, under [`predictions_header`]),
/// added to `out`.
fn predictions_csv(p: &Predictions, out: &mut String) {
    match (&p.labels, &p.probabilities) {
        (Some(labels), Some(probs)) => {
            let width = probs.len() / labels.len().max(1);
            for (label, row) in labels.iter().zip(probs.chunks(width.max(1))) {
                let cells: Vec<String> = std::iter::once(quote(label)).chain(row.iter().map(|&v| cell(v))).collect();
                *out += &(cells.join(",") + "\n");
            }
        }
        _ => {
            for row in p.outputs.chunks(p.width.max(1)) {
                *out += &(row.iter().map(|&v| cell(v)).collect::<Vec<_>>().join(",") + "\n");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Cells read back as the same f32, the very large and small in
    /// exponent form.
    #[test]
    fn prediction_cells_are_short_and_exact() {
        assert_eq!(cell(2.9569975e36), "2.9569975e36");
        assert_eq!(cell(-1.5e20), "-1.5e20");
        assert_eq!(cell(1.2e-9), "1.2e-9");
        assert_eq!(
            (cell(110.22496), cell(0.0), cell(0.25), cell(1e-6)),
            ("110.22496".into(), "0".into(), "0.25".into(), "0.000001".into())
        );
        for v in [3.4028235e38f32, 1e-45, 123456790000000000.0, 7.0e-7, -0.1] {
            assert_eq!(cell(v).parse::<f32>().unwrap(), v, "{}", cell(v));
        }
    }

    #[test]
    fn the_header_never_names_a_column_twice() {
        let classes = ["yes".to_string(), "no".to_string()];
        assert_eq!(predictions_header("answer", &classes, 2), "answer,p_yes,p_no");
        // The target named as a probability column: the label column moves aside.
        assert_eq!(predictions_header("p_yes", &classes, 2), "p_yes_label,p_yes,p_no");
        let odd = ["yes".to_string(), "yes_label".to_string()];
        assert_eq!(predictions_header("p_yes", &odd, 2), "p_yes_label_label,p_yes,p_yes_label");
        assert_eq!(predictions_header("y", &[], 2), "y_0,y_1");
    }

    #[test]
    fn a_lone_carriage_return_is_quoted() {
        assert_eq!(quote("virgin\rica"), "\"virgin\rica\"");
        assert_eq!(quote("a\"b"), "\"a\"\"b\"");
        assert_eq!(quote("plain"), "plain");
    }
}
