//! Reading a spec's data, with progress shown when the file is large.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};
use kynml_core::data::Dataset;
use kynml_core::plan::{LoadError, SpecFile};
use kynml_core::train::memory::bytes;

/// A file smaller than this is read in about a second: nothing is shown.
const SHOWN_FROM: u64 = 64 << 20;

/// [`SpecFile::load_data`]; for a file of [`SHOWN_FROM`] bytes or more, a
/// line naming it and, on a terminal, a bar of the bytes parsed.
pub fn load_data(file: &mut SpecFile) -> Result<Dataset, LoadError> {
    let path = file.data_path();
    let size = std::fs::metadata(&path).map_or(0, |m| m.len());
    if size < SHOWN_FROM {
        return file.load_data();
    }
    println!("reading {} ({})", path.display(), bytes(size));
    if !std::io::stderr().is_terminal() {
        return file.load_data();
    }
    let bar = ProgressBar::new(size);
    bar.set_style(
        ProgressStyle::with_template("  [{bar:30}] {bytes}/{total_bytes}, {eta} left")
            .expect("static template")
            .progress_chars("=> "),
    );
    let read = file.load_data_reporting(&mut |done, total| {
        bar.set_length(total);
        bar.set_position(done);
    });
    bar.finish_and_clear();
    read
}
