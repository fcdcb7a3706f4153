//! Reading a spec's data, with progress shown when the file is large.

use indicatif::ProgressStyle;
use kynml_core::data::Dataset;
use kynml_core::plan::{LoadError, SpecFile};
use kynml_core::train::memory::bytes;

/// A file smaller than this is read in about a second: nothing is shown.
pub const SHOWN_FROM: u64 = 64 << 20;

/// [`SpecFile::load_data`]; for a file of [`SHOWN_FROM`] bytes or more, a
/// line naming it and, on a terminal, a bar of the bytes parsed.
pub fn load_data(file: &mut SpecFile) -> Result<Dataset, LoadError> {
    let path = file.data_path();
    let size = std::fs::metadata(&path).map_or(0, |m| m.len());
    if size < SHOWN_FROM {
        return file.load_data();
    }
    // Standard output may hold a command's data alone (`bench --json -`).
    crate::train::tell!("reading {} ({})", path.display(), bytes(size));
    if !crate::terminal::draws() {
        return file.load_data();
    }
    let bar = crate::terminal::bar(size);
    bar.set_style(
        ProgressStyle::with_template("  [{bar:30}] {bytes}/{total_bytes}{left}")
            .expect("static template")
            .with_key("left", |state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                let _ = w.write_str(&time_left(state.pos(), state.len().unwrap_or(0), state.elapsed()));
            })
            .progress_chars("=> "),
    );
    let read = file.load_data_reporting(&mut |done, total| {
        bar.set_length(total);
        bar.set_position(done);
    });
    bar.finish_and_clear();
    read
}

/// `, 12s left` at the pace of the whole read so far (indicatif's own
/// estimate, from the last few updates, began at minutes for a read of
/// seconds); nothing until a second has passed and some bytes are read.
fn time_left(done: u64, total: u64, elapsed: std::time::Duration) -> String {
    if done == 0 || done >= total || elapsed.as_secs_f64() < 1.0 {
        return String::new();
    }
    let left = (elapsed.as_secs_f64() * (total - done) as f64 / done as f64).round().max(1.0);
    let left = if left < 60.0 { format!("{left}s") } else { crate::render::duration(left) };
    format!(", {left} left")
}

/// The feature columns whose variation 32-bit floats lose, in notes: a
/// spread within a few float steps of the column's size (named whether or
/// not the spec normalizes), and numbers that all read as one float.
pub fn float_notes(data: &Dataset) -> Vec<String> {
    let info = &data.info;
    let mut notes = Vec::new();
    for name in &data.collapsed {
        if *name == info.target {
            notes.push(format!(
                "note: the target `{name}` holds different numbers that all read as one 32-bit float: the model \
                 can only learn that constant; subtract an offset from it in the data to keep its variation (or, \
                 for numbers too small for a 32-bit float, below about 1e-38 in size, scale it up)"
            ));
            continue;
        }
        notes.push(format!(
            "note: `{name}` holds different numbers that all read as one 32-bit float: to the model it is a \
             constant, and trains on nothing; subtract an offset from it in the data to keep its variation (or, \
             for numbers too small for a 32-bit float, below about 1e-38 in size, scale it up)"
        ));
    }
    // One value in every training row: nothing to learn from, or, as the
    // target, nothing to learn but that value.
    let train = &data.train;
    if let kynml_core::data::Labels::Values(y) = &train.labels {
        if y.len() > 1 && y.iter().all(|v| *v == y[0]) && !data.collapsed.contains(&info.target) {
            notes.push(format!(
                "note: the target `{}` is {} in every training row: the model can only learn that constant",
                info.target, y[0]
            ));
        }
    }
    let width = info.n_features();
    if info.tokens.is_none() && info.sequence.is_none() && width > 0 && train.len() > 1 {
        let categorical: Vec<usize> = info.categories.iter().map(|v| v.position).collect();
        for c in (0..width).filter(|c| !categorical.contains(c)) {
            let name = info.feature_names.get(c).cloned().unwrap_or_default();
            let first = train.features[c];
            if data.collapsed.contains(&name) || !train.features.iter().skip(c).step_by(width).all(|v| *v == first) {
                continue;
            }
            notes.push(format!(
                "note: `{name}` holds one value in every training row: it gives the model nothing to learn from"
            ));
        }
    }
    // Category and token indices are names, not quantities; a sequence's
    // positions share their column's statistics, fitted when normalizing.
    let fitted;
    let normalizer = match &info.normalizer {
        Some(n) => n,
        None if info.tokens.is_none() && info.sequence.is_none() && !data.train.features.is_empty() => {
            fitted = kynml_core::data::Normalizer::fit(&data.train.features, info.n_features());
            &fitted
        }
        None => return notes,
    };
    let categorical: Vec<usize> = info.categories.iter().map(|v| v.position).collect();
    let mut named = std::collections::BTreeSet::new();
    for c in normalizer.coarse_columns().into_iter().filter(|c| !categorical.contains(c)) {
        let name = info.feature_names.get(c).cloned().unwrap_or_default();
        if named.insert(name.clone()) {
            notes.push(format!(
                "note: `{name}` varies by about {:.3e} around {:.6e}, within a few steps of a 32-bit float there: \
                 numbers are read as 32-bit floats, so most of its variation is lost; subtract an offset from it in \
                 the data to keep it",
                normalizer.std[c], normalizer.mean[c]
            ));
        }
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::time_left;
    use std::time::Duration;

    /// The time left is the whole read's pace so far, said from a second on.
    #[test]
    fn the_time_left_is_the_reads_own_pace() {
        let at = |done, secs| time_left(done, 100, Duration::from_secs_f64(secs));
        assert_eq!(at(1, 0.5), "", "not in the first second");
        assert_eq!(at(0, 3.0), "");
        assert_eq!(at(25, 1.0), ", 3s left");
        assert_eq!(at(50, 2.0), ", 2s left");
        assert_eq!(at(1, 2.0), ", 3m 18s left");
        assert_eq!(at(100, 4.0), "", "done");
    }
}
