//! From a spec file on disk to everything a run needs, checked before any
//! training starts: the spec, the data it names (checked against the model),
//! and a plain statement of which settings will really apply.

use std::path::{Path, PathBuf};

use crate::checkpoint::{self, Checkpoint};
use crate::data::{DataError, Dataset, SequenceColumns, TableOptions, TextOptions};
use crate::spec::types::{DeviceRequest, ExportFormat, Layer, Loss, Precision, Spec, Unbound};
use crate::spec::{self, Diagnostic, SpecError};
use crate::train::memory::MemoryEstimate;
use crate::train::precision::Compute;
use crate::train::resume::{self, LoopState, ResumeError};
use crate::train::AnyOptimizer;
use kynml_backend::{Device, DeviceChoice, DeviceKind};

/// Command-line values that replace the spec's.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `--device`; `None` keeps the spec's `device`.
    pub device: Option<DeviceRequest>,
    /// `--device cpu,cpu`, `cuda:0,cuda:1` or `cuda:all`: a data-parallel
    /// run's devices, in place of the spec's `device` and `devices`.
    pub devices: Option<crate::spec::types::DeviceSet>,
    /// `--epochs`; `None` keeps the spec's `epochs`.
    pub epochs: Option<usize>,
    /// `--seed`; `None` keeps the spec's `seed`.
    pub seed: Option<u64>,
}

/// Where a run starts ([`SpecFile::resume_plan`]).
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct ResumePlan {
    /// The lock on the checkpoint path, for the run to hold to its end
    /// ([`TrainSettings::checkpoint_lock`](crate::train::TrainSettings::checkpoint_lock));
    /// `None` when the spec does not checkpoint.
    pub lock: Option<checkpoint::PathLock>,
    /// The checkpoint to go on from, with its loop state; `None` to start
    /// from the beginning.
    pub found: Option<(Checkpoint, LoopState)>,
}

/// A spec file, read and validated.
#[derive(Debug, Clone)]
pub struct SpecFile {
    /// Where the spec was read from; relative paths in the spec are resolved against its folder.
    pub path: PathBuf,
    /// The spec's text as read, its lone `\r` line ends read as `\n`
    /// (what its problems' locations point into).
    pub source: String,
    /// The parsed and validated spec, with overrides once [`SpecFile::apply`] has run.
    pub spec: Spec,
    /// The text byte for byte, where its lone `\r`s made `source` differ.
    written: Option<String>,
}

/// The most bytes a spec file may hold: a spec is a page of text, and
/// reading stops here (a data file or `/dev/zero` given by mistake).
pub const MAX_SPEC_BYTES: u64 = 4 << 20;

/// Whether a spec's checkpoints at `path` are kept beside it, at
/// `PATH.kynml`: the Python tool's PyTorch checkpoint is at `path`, or was
/// (nothing is there now, and a checkpoint is beside it: moving the old
/// file away must not start the spec's runs over, leaving theirs behind).
fn kept_beside(path: &Path) -> bool {
    checkpoint::holds_pytorch(path)
        || (std::fs::symlink_metadata(path).is_err() && checkpoint::beside_pytorch(path).is_file())
}

/// Why a spec, or the data it names, cannot be made ready to run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The spec file could not be read.
    #[error("cannot read spec `{path}`: {source}")]
    Io {
        /// The spec file.
        path: PathBuf,
        /// The underlying I/O error.
        source: std::io::Error,
    },
    /// The file is larger than any spec ([`MAX_SPEC_BYTES`]): a data file or
    /// a device (`/dev/zero`) given in its place, read no further.
    #[error(
        "{}: more than {} MiB, which no spec is: is it a data file or a device? Give the `.kyn` spec",
        path.display(),
        MAX_SPEC_BYTES >> 20
    )]
    TooLarge {
        /// The file given as the spec.
        path: PathBuf,
    },
    /// The spec file is UTF-16 text (as Windows PowerShell's `>` writes
    /// it), or UTF-32.
    #[error(
        "{}:1:1: the spec is UTF-{bits} text{}; save it as UTF-8 (in PowerShell, `Out-File -Encoding utf8`)",
        path.display(),
        if *bits == 16 { ", as Windows PowerShell's `>` writes it" } else { "" }
    )]
    Utf16 {
        /// The spec file.
        path: PathBuf,
        /// 16 or 32.
        bits: u8,
    },
    /// The spec file is not UTF-8 text.
    #[error("{}:{line}:{column}: the spec is not UTF-8 text (save it as UTF-8)", path.display())]
    Encoding {
        /// The spec file.
        path: PathBuf,
        /// 1-based line of the first byte that is not UTF-8.
        line: usize,
        /// 1-based column (in characters) of that byte.
        column: usize,
    },
    /// Problems located in the spec; [`LoadError::render`] draws them all.
    #[error("{}", located_spec(path, source_text, error, *against_data))]
    Spec {
        /// The spec file.
        path: PathBuf,
        /// The spec's text, which the problems' locations point into.
        source_text: String,
        /// The problems, each with its location in `source_text`.
        error: SpecError,
        /// Whether the spec was read whole and the problems are between it
        /// and its data (a target column the file lacks, a loss that does
        /// not suit the target), found once the data was read.
        against_data: bool,
    },
    /// The data file could not be read, or its contents are unusable.
    #[error(transparent)]
    Data(#[from] DataError),
    /// The model or batch would not fit in the device's memory; located in
    /// the spec like [`LoadError::Spec`].
    #[error("{}", located_fit(path, source_text, error))]
    DoesNotFit {
        /// The spec file.
        path: PathBuf,
        /// The spec's text.
        source_text: String,
        /// What does not fit, located.
        error: SpecError,
    },
}

/// `path:line:column: summary`, at the first problem: a located error's
/// one line (its `Display`), as a log or `?` shows it.
fn located(path: &Path, source: &str, error: &SpecError) -> String {
    match error.diagnostics.first() {
        Some(first) => {
            let (line, column) = spec::line_col(source, first.span.start);
            format!("{}:{line}:{column}: {error}", path.display())
        }
        None => format!("{}: {error}", path.display()),
    }
}

/// [`located`], saying that the run does not fit its device (the spec was
/// read whole).
fn located_fit(path: &Path, source: &str, error: &SpecError) -> String {
    let Some(first) = error.diagnostics.first() else {
        return located(path, source, error);
    };
    let (line, column) = spec::line_col(source, first.span.start);
    format!("{}:{line}:{column}: the run does not fit the device: {}", path.display(), first.message)
}

/// [`located`], saying of problems found against the data (the spec was
/// read whole) that the spec does not fit its data, not that it could not
/// be read.
fn located_spec(path: &Path, source: &str, error: &SpecError, against_data: bool) -> String {
    let Some(first) = error.diagnostics.first().filter(|_| against_data) else {
        return located(path, source, error);
    };
    let (line, column) = spec::line_col(source, first.span.start);
    let what = match error.diagnostics.len() {
        1 => first.message.clone(),
        n => format!("{n} problems found, the first: {}", first.message),
    };
    format!("{}:{line}:{column}: the spec does not fit its data: {what}", path.display())
}

impl LoadError {
    /// The whole message `kynml` prints for this error: a spec's problems
    /// drawn under their lines with carets and help, every one of them (as
    /// cargo draws a compiler's), any other error as its one line.
    pub fn render(&self) -> String {
        match self {
            LoadError::Spec { path, source_text, error, against_data: false } => {
                spec::render(&path.display().to_string(), source_text, &error.diagnostics)
            }
            LoadError::Spec { path, source_text, error, against_data: true } => {
                let n = error.diagnostics.len();
                let summary = format!(
                    "the spec does not fit its data: {n} problem{} found; nothing was trained or written",
                    if n == 1 { "" } else { "s" }
                );
                spec::render_with(&path.display().to_string(), source_text, &error.diagnostics, &summary)
            }
            LoadError::DoesNotFit { path, source_text, error } => spec::render_with(
                &path.display().to_string(),
                source_text,
                &error.diagnostics,
                "the run does not fit the device; nothing was trained or written",
            ),
            other => format!("error: {other}"),
        }
    }
}

impl SpecFile {
    /// Reads the spec file at `path` and validates it.
    pub fn load(path: &Path) -> Result<Self, LoadError> {
        use std::io::Read;
        let io = |source| LoadError::Io { path: path.into(), source };
        let given = |why: &str| io(std::io::Error::new(std::io::ErrorKind::InvalidInput, why.to_string()));
        if path.is_dir() {
            let run = path.join("spec.kyn").is_file() && path.join("metrics.json").is_file();
            return Err(given(if run {
                "it is a run folder, not a spec: give the `.kyn` spec it was trained from (the folder keeps a copy, \
                 spec.kyn, whose data paths are read from the spec's own folder)"
            } else {
                "it is a folder, not a spec: give the `.kyn` file"
            }));
        }
        if path.as_os_str() == "-" && !path.exists() {
            return Err(given("a spec is read from a file, not from standard input: give the `.kyn` file"));
        }
        let mut bytes = Vec::new();
        std::fs::File::open(path).and_then(|f| f.take(MAX_SPEC_BYTES + 1).read_to_end(&mut bytes)).map_err(io)?;
        if bytes.len() as u64 > MAX_SPEC_BYTES {
            return Err(LoadError::TooLarge { path: path.into() });
        }
        // A byte-order mark of UTF-16, or ASCII text with a zero byte after
        // (or before) each letter: UTF-16, which would read as bad bytes or
        // as a zero between every two characters.
        let zero_halves = bytes.len() >= 4
            && ((bytes[0] != 0 && bytes[1] == 0 && bytes[2] != 0 && bytes[3] == 0)
                || (bytes[0] == 0 && bytes[1] != 0 && bytes[2] == 0 && bytes[3] != 0));
        if bytes.starts_with(&[0xFF, 0xFE, 0, 0]) || bytes.starts_with(&[0, 0, 0xFE, 0xFF]) {
            return Err(LoadError::Utf16 { path: path.into(), bits: 32 });
        }
        if bytes.starts_with(&[0xFF, 0xFE]) || bytes.starts_with(&[0xFE, 0xFF]) || zero_halves {
            return Err(LoadError::Utf16 { path: path.into(), bits: 16 });
        }
        match String::from_utf8(bytes) {
            Ok(source) => Self::from_source(path, source),
            Err(e) => {
                // Name the first byte that is not UTF-8, as an editor shows it.
                let valid = &e.as_bytes()[..e.utf8_error().valid_up_to()];
                let line = 1 + valid.iter().filter(|&&b| b == b'\n').count();
                let line_start = valid.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
                let column = 1 + String::from_utf8_lossy(&valid[line_start..]).chars().count();
                Err(LoadError::Encoding { path: path.into(), line, column })
            }
        }
    }

    /// Validates spec text already read; `path` is where it came from, for messages and relative paths.
    pub fn from_source(path: &Path, source: String) -> Result<Self, LoadError> {
        // A lone `\r` (classic Mac OS, or a stray one among `\n` lines) ends
        // a line, as `\n` does; the text keeps its length, so every span
        // still points where it did. (A spec has no multi-line cells, unlike
        // a CSV file, so every lone one is a line end.)
        let (source, written) = if source.contains('\r') {
            let bytes = source.as_bytes();
            let lone = |i: usize| bytes[i] == b'\r' && bytes.get(i + 1) != Some(&b'\n');
            // One ASCII byte for another: still UTF-8.
            let text = (0..bytes.len()).map(|i| if lone(i) { b'\n' } else { bytes[i] }).collect::<Vec<u8>>();
            match String::from_utf8(text) {
                Ok(text) if text != source => (text, Some(source)),
                _ => (source, None),
            }
        } else {
            (source, None)
        };
        match spec::parse_spec(&source) {
            Ok(spec) => Ok(SpecFile { path: path.to_path_buf(), source, spec, written }),
            Err(error) => {
                Err(LoadError::Spec { path: path.to_path_buf(), source_text: source, error, against_data: false })
            }
        }
    }

    /// The spec's text byte for byte as it was read (a run folder's
    /// `spec.kyn`): [`source`](Self::source) but for lone `\r` line ends.
    pub fn as_written(&self) -> &str {
        self.written.as_deref().unwrap_or(&self.source)
    }

    /// Relative paths in a spec are relative to the spec's own folder, so a
    /// spec and its data can be moved together and run from anywhere: the
    /// folder of its path as given (a symbolic link's own, not its
    /// target's: one spec linked into several folders reads each one's). A
    /// leading `~` is the home folder (`$HOME`, else the account's), as a shell and pandas'
    /// `read_csv` read it.
    pub fn resolve(&self, path: &Path) -> PathBuf {
        match from_home(path).zip(dirs::home_dir()) {
            Some((rest, home)) => home.join(rest),
            None if path.is_absolute() => path.to_path_buf(),
            None => self.path.parent().unwrap_or(Path::new(".")).join(path),
        }
    }

    /// The dataset's CSV file, resolved against the spec's folder.
    pub fn data_path(&self) -> PathBuf {
        self.resolve(&self.spec.dataset.source.value)
    }

    /// Where the spec's checkpoints go, resolved against the spec's folder;
    /// `None` when the spec does not checkpoint. Where the spec's path holds
    /// the Python tool's PyTorch checkpoint ([`pytorch_checkpoint`](Self::pytorch_checkpoint)),
    /// which KynML cannot resume from and never writes over, they go beside
    /// it instead, to `PATH.kynml`, and are resumed from there.
    pub fn checkpoint_path(&self) -> Option<PathBuf> {
        let path = self.spec_checkpoint_path()?;
        Some(if kept_beside(&path) { checkpoint::beside_pytorch(&path) } else { path })
    }

    /// The checkpoint path the spec writes, resolved against its folder.
    fn spec_checkpoint_path(&self) -> Option<PathBuf> {
        self.spec.train.checkpoint.as_ref().map(|c| self.resolve(&c.value.path))
    }

    /// The Python tool's PyTorch checkpoint (a `torch.save` file) at the
    /// spec's checkpoint path, when one is there: an old run of the spec's
    /// that KynML leaves as it is, its own checkpoints kept beside it
    /// ([`checkpoint_path`](Self::checkpoint_path)).
    pub fn pytorch_checkpoint(&self) -> Option<PathBuf> {
        self.spec_checkpoint_path().filter(|p| checkpoint::holds_pytorch(p))
    }

    /// What a run says when the spec's checkpoint path holds the Python
    /// tool's checkpoint ([`pytorch_checkpoint`](Self::pytorch_checkpoint)).
    pub fn pytorch_checkpoint_note(&self) -> Option<String> {
        let path = self.spec_checkpoint_path().filter(|p| kept_beside(p))?;
        let beside = checkpoint::beside_pytorch(&path);
        Some(if checkpoint::holds_pytorch(&path) {
            format!(
                "note: {} is a checkpoint of the Python tool (PyTorch's `torch.save`), which KynML cannot resume \
                 from: it is left as it is, and KynML keeps its own checkpoints beside it, in {}",
                path.display(),
                beside.display()
            )
        } else {
            // The Python tool's file is gone: the runs kept beside it go on there.
            format!(
                "note: KynML's checkpoints of this spec are in {}, where they were kept beside the Python tool's \
                 checkpoint at {} (gone now): this run goes on from them there (move {} to {} to keep them at \
                 the spec's path)",
                beside.display(),
                path.display(),
                beside.display(),
                path.display()
            )
        })
    }

    /// [`what_runs_on`] for this spec where its files are: checkpoints kept
    /// beside the Python tool's ([`checkpoint_path`](Self::checkpoint_path))
    /// are said there, marked as not where the spec asks.
    pub fn what_runs_on(&self, devices: &[Device]) -> Vec<Applied> {
        let mut applied = what_runs_on(&self.spec, devices);
        let path = self.spec_checkpoint_path().filter(|p| kept_beside(p));
        if let (Some(path), Some(c)) = (path, &self.spec.train.checkpoint) {
            let asked = format!("`{}`", c.value.path.display());
            let kept = format!("`{}`", checkpoint::beside_pytorch(&c.value.path).display());
            let why = if checkpoint::holds_pytorch(&path) {
                "beside the Python tool's"
            } else {
                "where runs kept them beside"
            };
            for a in applied.iter_mut().filter(|a| a.setting == "checkpoints") {
                a.value = a.value.replacen(&asked, &format!("{kept} ({why} {asked})"), 1);
                a.as_requested = false;
            }
        }
        applied
    }

    /// The checkpoint this spec resumes from: `None` when the spec does not
    /// checkpoint or nothing is at its path yet. A file there that is not a
    /// whole checkpoint of this model and optimizer is an error, found here
    /// before anything runs, as is a checkpoint of other rows than `data`'s.
    /// Call it after [`load_data`](Self::load_data): a model that embeds
    /// categories or tokens is only whole once bound to its data.
    pub fn find_checkpoint(&self, data: &Dataset) -> Result<Option<(Checkpoint, LoopState)>, ResumeError> {
        let Some(path) = self.checkpoint_path() else { return Ok(None) };
        self.checkpoint_at(&path, data)
    }

    /// Where a run of this spec starts, as `kynml train` decides it: the
    /// spec's checkpoint path ([`checkpoint_path`](Self::checkpoint_path))
    /// checked and locked for the run (never over a file that is not a
    /// KynML checkpoint; another run there is refused:
    /// [`ResumeError::Unwritable`]), and the checkpoint already there, once
    /// [`find_checkpoint`](Self::find_checkpoint) has found it fits this spec
    /// and `data`. With none there, an older copy beside it that is a whole
    /// checkpoint of this spec is an error ([`ResumeError::OlderCopy`]), as
    /// starting over would rotate it away. `fresh` starts over instead: the
    /// run's first save replaces that checkpoint and its older copies.
    pub fn resume_plan(&self, data: &Dataset, fresh: bool) -> Result<ResumePlan, ResumeError> {
        let (Some(path), Some(c)) = (self.checkpoint_path(), &self.spec.train.checkpoint) else {
            return Ok(ResumePlan::default());
        };
        let lock = checkpoint::prepare(&path, c.value.keep)
            .map_err(|error| ResumeError::Unwritable { path: path.clone(), error })?;
        let mut plan = ResumePlan { lock: Some(lock), found: None };
        if fresh {
            return Ok(plan);
        }
        plan.found = self.find_checkpoint(data)?;
        // An earlier run's whole copy would rotate away: the caller's choice.
        if plan.found.is_none() {
            if let Some((copy, epoch)) = self.whole_older_copy(&path, data) {
                return Err(ResumeError::OlderCopy { path, copy, epoch });
            }
        }
        Ok(plan)
    }

    /// The [`TrainSettings`](crate::train::TrainSettings) that run this spec
    /// as `kynml train` runs it: checkpoints at the spec's path resolved
    /// against its folder, that path locked for the run and the checkpoint
    /// there resumed, as [`resume_plan`](Self::resume_plan) decides; `fresh`
    /// starts over (the run's first save replaces that checkpoint and its
    /// older copies). Set the settings' other fields (a `stop` flag, say)
    /// on the value returned.
    pub fn train_settings(&self, data: &Dataset, fresh: bool) -> Result<crate::train::TrainSettings, ResumeError> {
        let plan = self.resume_plan(data, fresh)?;
        Ok(crate::train::TrainSettings {
            checkpoint_path: self.checkpoint_path(),
            fresh,
            resume_from: plan.found.map(|(ckpt, _)| ckpt),
            checkpoint_lock: plan.lock.map(std::sync::Arc::new),
            ..Default::default()
        })
    }

    /// The newest of the older copies beside the checkpoint `path` that this
    /// spec and `data` can resume from, with the epoch it ends.
    pub fn whole_older_copy(&self, path: &Path, data: &Dataset) -> Option<(PathBuf, usize)> {
        checkpoint::older_copies(path)
            .into_iter()
            .find_map(|copy| self.checkpoint_at(&copy, data).ok().flatten().map(|(_, state)| (copy, state.epoch)))
    }

    /// [`find_checkpoint`](Self::find_checkpoint) on the checkpoint at
    /// `path` (an older copy, say): `None` when there is no file there.
    pub fn checkpoint_at(&self, path: &Path, data: &Dataset) -> Result<Option<(Checkpoint, LoopState)>, ResumeError> {
        let Some(ckpt) = checkpoint::load(path)? else { return Ok(None) };
        let optimizer = AnyOptimizer::new(&self.spec.train.optimizer.value);
        let now = resume::DataOrigin::of(&self.spec, data);
        let bound = !data.info.categories.is_empty() || data.info.tokens.is_some();
        let state = resume::check(&ckpt, &self.spec.model, optimizer.name(), &self.spec.train.loss.value.written())
            .map_err(|e| match e {
                // A model bound to its data (vocabularies learned from the
                // training rows) differs when the rows do: another seed or
                // split is then the cause, and is said instead.
                ResumeError::ModelMismatch { .. } if bound => serde_json::from_str::<LoopState>(ckpt.state())
                    .ok()
                    .and_then(|then| resume::check_data(&then, &now).err())
                    .unwrap_or(e),
                e => e,
            })?;
        resume::check_data(&state, &now)?;
        Ok(Some((ckpt, state)))
    }

    /// [`checkpoint_at`](Self::checkpoint_at) without the data (`kynml check
    /// --synthetic`, whose rows are made up): whether the checkpoint at
    /// `path` loads and was written for this spec's model, optimizer and
    /// loss. `Ok(None)` where there is no file, or where the model is bound
    /// to its data (`bound`: vocabularies learned from the rows), which
    /// made-up rows cannot judge.
    pub fn checkpoint_without_data(&self, path: &Path, bound: bool) -> Result<Option<LoopState>, ResumeError> {
        let Some(ckpt) = checkpoint::load(path)? else { return Ok(None) };
        let optimizer = AnyOptimizer::new(&self.spec.train.optimizer.value);
        match resume::check(&ckpt, &self.spec.model, optimizer.name(), &self.spec.train.loss.value.written()) {
            Err(ResumeError::ModelMismatch { .. }) if bound => Ok(None),
            checked => checked.map(Some),
        }
    }

    /// Replaces the spec's values with the overrides that are set.
    pub fn apply(&mut self, overrides: &Overrides) {
        let t = &mut self.spec.train;
        if let Some(device) = overrides.device {
            t.device.value = device;
            t.devices = None;
        }
        if let Some(set) = &overrides.devices {
            t.device.value = set.first();
            t.devices = Some(crate::spec::types::Spanned { value: set.clone(), span: t.device.span });
        }
        if let Some(epochs) = overrides.epochs {
            t.epochs.value = epochs;
        }
        if let Some(seed) = overrides.seed {
            t.seed = seed;
        }
    }

    /// Read the data the spec names and check it fits the model: the input
    /// width, the output width, and the kind of target the loss needs. The
    /// model is bound to the data ([`ModelSpec::bind`]): its `embedding`
    /// learns the categorical columns' sizes.
    ///
    /// [`ModelSpec::bind`]: crate::spec::types::ModelSpec::bind
    pub fn load_data(&mut self) -> Result<Dataset, LoadError> {
        self.load_data_with(None, &mut |_, _| {})
    }

    /// [`load_data`](Self::load_data), calling `report(done, total)` with
    /// the bytes of the file parsed so far now and then, for a progress bar
    /// over a large file ([`read_csv_reporting`](crate::data::read_csv_reporting)).
    pub fn load_data_reporting(&mut self, report: &mut dyn FnMut(u64, u64)) -> Result<Dataset, LoadError> {
        self.load_data_with(None, report)
    }

    /// [`load_data`](Self::load_data) on CSV text held in memory instead of
    /// the file the spec's `source` names (a service training on data it
    /// received); errors still name that file's path, as where the rows
    /// would have been.
    pub fn load_data_from(&mut self, csv: &[u8]) -> Result<Dataset, LoadError> {
        self.load_data_with(Some(csv), &mut |_, _| {})
    }

    fn load_data_with(&mut self, csv: Option<&[u8]>, report: &mut dyn FnMut(u64, u64)) -> Result<Dataset, LoadError> {
        let d = &self.spec.dataset;
        let loss = self.spec.train.loss.value;
        let path = self.data_path();
        let options = TableOptions {
            target: d.target.value.clone(),
            classification: loss.is_classification(),
            categorical: d.categorical.iter().map(|c| c.value.clone()).collect(),
            tokens: match (&d.tokens, self.spec.model.shape.is_tokens()) {
                (Some(column), true) => Some(TextOptions {
                    column: column.value.clone(),
                    length: self.spec.model.input.value,
                    vocab_limit: d.vocab.as_ref().map(|v| v.value),
                }),
                (None, true) => return Err(self.located(vec![self.unbound(Unbound::NoText)])),
                (Some(_), false) => return Err(self.located(vec![self.unbound(Unbound::NotText)])),
                (None, false) => None,
            },
            sequence: self.sequence_columns()?,
        };
        if let Some(problem) = self.padded_rows_overflow_memory(&path, csv) {
            return Err(self.located(vec![problem]));
        }
        let read = match csv {
            Some(bytes) => crate::data::parse_csv_reporting(&path, bytes, &options, report),
            None => crate::data::read_csv_reporting(&path, &options, report),
        };
        let table = match read {
            // A regression loss on class labels is a spec mistake more often
            // than a data one: point at the loss.
            // A missing value is the data's problem, said at its row.
            Err(DataError::NotNumeric { path, row, column, column_name, value, .. })
                if column_name == d.target.value && is_missing_marker(&value) =>
            {
                return Err(DataError::NotNumeric {
                    path,
                    row,
                    column,
                    column_name,
                    value,
                    hint: "; a missing target: fill it in or remove the row".into(),
                }
                .into());
            }
            Err(DataError::NotNumeric { row, column_name, value, .. })
                if column_name == d.target.value && !loss.is_classification() =>
            {
                let span = self.spec.train.loss.span;
                let problem = Diagnostic::new(
                    span,
                    format!(
                        "this loss needs a numeric target, but `{column_name}` in `{}` holds labels (line {row}: \"{value}\")",
                        path.display()
                    ),
                    "regression loss on a class target",
                )
                .with_help("for class labels use `loss = cross_entropy` (or `bce` for two classes)");
                return Err(self.located(vec![problem]));
            }
            // The spec's `target` line names the column.
            Err(err @ DataError::MissingTarget { .. }) => {
                let DataError::MissingTarget { target, .. } = &err else { unreachable!() };
                let problem = Diagnostic::new(
                    d.target.span,
                    format!("`{}` has no column `{target}`", path.display()),
                    "no such column",
                )
                .with_help(err.to_string().split_once("; ").map_or_else(
                    || "every column except the target is a feature; the target must be one of them".to_string(),
                    |(_, hint)| hint.to_string(),
                ));
                return Err(self.located(vec![problem]));
            }
            Err(DataError::MissingCategorical { name, suggestion, .. }) => {
                let text = d.tokens.iter().filter(|t| t.value == name);
                let span = d
                    .categorical
                    .iter()
                    .chain(text)
                    .chain(&d.sequence)
                    .find(|c| c.value == name)
                    .map_or(d.source.span, |c| c.span);
                let mut problem =
                    Diagnostic::new(span, format!("`{}` has no column `{name}`", path.display()), "no such column");
                if let Some(s) = suggestion {
                    let help = crate::data::error::did_you_mean_column(&s);
                    problem = problem.with_help(help.trim_start_matches("; ").to_string());
                }
                return Err(self.located(vec![problem]));
            }
            // A column beside a text or a sequence: the spec's `tokens` or
            // `sequence` line says what the model reads.
            Err(err @ (DataError::BesideText { .. } | DataError::BesideSequence { .. })) => {
                let (column, name, what, span) = match &err {
                    DataError::BesideText { column, name, text, .. } => {
                        (*column, name, format!("the text `{text}`"), d.tokens.as_ref().map(|t| t.span))
                    }
                    DataError::BesideSequence { column, name, sequence, .. } => {
                        (*column, name, format!("the sequence `{sequence}`"), d.sequence.first().map(|c| c.span))
                    }
                    _ => unreachable!(),
                };
                let help = if matches!(err, DataError::BesideText { .. }) {
                    "remove the column from the file, or write its value into the text"
                } else {
                    "remove the column from the file, or add it to `sequence`"
                };
                let problem = Diagnostic::new(
                    span.unwrap_or(d.source.span),
                    format!(
                        "`{}` has a column `{name}` (column {column}) beside {what}, and this model reads only that \
                         and the target",
                        path.display()
                    ),
                    "what the model reads",
                )
                .with_help(help);
                return Err(self.located(vec![problem]));
            }
            // A file that is not there is the spec's `source` line's problem.
            Err(DataError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                let folder = self.path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
                let written = Path::new(&d.source.value);
                let relative = match (from_home(written).is_some(), written.is_relative()) {
                    (true, _) => "`~` is the home folder; ".to_string(),
                    (false, true) => format!("the path is relative to the spec's folder (`{}`); ", folder.display()),
                    (false, false) => String::new(),
                };
                // A Windows path (`data\\train.csv`): here `\` is part of a name.
                let source = written.to_string_lossy();
                let slashed = source.replace('\\', "/");
                let windows = (source.contains('\\') && !cfg!(windows)).then(|| {
                    format!("`\\` is no folder separator here: write `{slashed}`, `/` works on every system; ")
                });
                // A file of a near name beside where it was looked for.
                let near = || {
                    let wanted = path.file_name()?.to_str()?;
                    let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
                    let names: Vec<String> = std::fs::read_dir(parent)
                        .ok()?
                        .filter_map(|e| e.ok()?.file_name().into_string().ok())
                        .take(10_000)
                        .collect();
                    let found = crate::spec::suggest::did_you_mean(wanted, names.iter().map(String::as_str))?;
                    Some(format!("did you mean `{found}`, beside it? "))
                };
                let problem = Diagnostic::new(
                    d.source.span,
                    format!("the data file `{}` does not exist", path.display()),
                    "no such file",
                )
                .with_help(format!(
                    "{}{relative}`kynml bench`, `kynml warmup` and `kynml check` take `--synthetic ROWS`: seeded \
                     rows shaped for the spec, without the file",
                    windows.or_else(near).unwrap_or_default()
                ));
                return Err(self.located(vec![problem]));
            }
            // So is a folder where the file should be.
            Err(DataError::Io { .. }) if path.is_dir() => {
                let problem = Diagnostic::new(
                    d.source.span,
                    format!("the data source `{}` is a folder, not a file", path.display()),
                    "a folder",
                )
                .with_help("name the CSV file inside it, as in `source = csv(\"data/train.csv\")`");
                return Err(self.located(vec![problem]));
            }
            // A file with no data row is said at the `source` line too.
            Err(err @ DataError::Empty { .. }) => {
                return Err(self.located(vec![Diagnostic::new(d.source.span, err.to_string(), "no data row")]));
            }
            other => other?,
        };
        // So is one with too few rows to split.
        let data = match Dataset::from_table(table, d.split.value, d.normalize, self.spec.train.seed) {
            Err(err @ DataError::TooFewRows { .. }) => {
                let problem = Diagnostic::new(d.source.span, err.to_string(), "too few rows")
                    .with_help("training holds some rows out for validation: give the file more rows");
                return Err(self.located(vec![problem]));
            }
            other => other?,
        };
        if let Err(why) = self.spec.model.bind(&data.info) {
            return Err(self.located(vec![self.unbound(why)]));
        }
        let problems = check_fit(&self.spec, &data, &path);
        if problems.is_empty() {
            Ok(data)
        } else {
            Err(self.located(problems))
        }
    }

    /// The run's memory on `device` for `train_rows` training rows and
    /// `valid_rows` validation rows, as
    /// [`check_memory_for`](Self::check_memory_for) estimates it, without
    /// checking it against the device: the engine that would run (the native
    /// CPU engine's own buffers, Burn's elsewhere) at the precision the
    /// device runs, with the copies saving makes where the memory is the host's.
    pub fn memory_for(&self, device: &Device, train_rows: usize, valid_rows: usize) -> MemoryEstimate {
        let precision = crate::train::precision::plan(&self.spec.train, device);
        let engine =
            crate::train::native::engine_for(device, &precision, crate::train::EngineChoice::Auto, &self.spec.model);
        let mut spec = self.spec.clone();
        spec.train.batch.value = spec.train.batch.value.min(train_rows.max(1));
        // The native engine has no fused update (said in what runs), so no
        // buffers of one, and buffers of its own; a data-parallel run steps
        // on Burn's.
        let native = (engine == crate::train::EngineKind::Native && self.spec.train.devices.is_none())
            .then(|| crate::train::native::native_layers(&self.spec.model).ok())
            .flatten();
        let on_host = matches!(device.kind, DeviceKind::Cpu { .. });
        match native {
            Some(layers) => {
                if let Some(plain) = spec.train.optimizer.value.with_fused(false) {
                    spec.train.optimizer.value = plain;
                }
                crate::train::memory::estimate_native(&spec, &layers, valid_rows).with_host_copies(&spec, true)
            }
            None if on_host => {
                // Replicas on the CPU share the host's memory.
                let replicas = match self.spec.train.devices.as_ref().map(|d| &d.value) {
                    Some(crate::spec::types::DeviceSet::List(list)) => list.len(),
                    _ => 1,
                };
                crate::train::memory::estimate(&spec, precision.compute)
                    .with_host_copies(&spec, false)
                    .with_replicas(replicas)
            }
            None => crate::train::memory::estimate(&spec, precision.compute),
        }
    }

    /// The run's memory, estimated from the spec ([`memory_for`](Self::memory_for))
    /// for the engine and precision that will run on `device`, and checked
    /// against what the device can hold: a tensor larger than the device allocates at once,
    /// or a total larger than its memory (a CUDA device's, the host's
    /// available memory on the CPU; wgpu cannot say), is a located error
    /// before anything is allocated, with a batch that would fit where the
    /// batch is what does not.
    pub fn check_memory(&self, device: &Device) -> Result<MemoryEstimate, LoadError> {
        self.check_memory_for(device, usize::MAX, usize::MAX)
    }

    /// [`check_memory`](Self::check_memory) for a run on `train_rows`
    /// training rows and `valid_rows` validation rows: a step never holds
    /// more rows than there are, whatever the spec's `batch`, nor a
    /// validation pass more than the split has.
    pub fn check_memory_for(
        &self,
        device: &Device,
        train_rows: usize,
        valid_rows: usize,
    ) -> Result<MemoryEstimate, LoadError> {
        self.check_memory_resuming(device, train_rows, valid_rows, 0)
    }

    /// [`check_memory_for`](Self::check_memory_for) for a run that resumes
    /// from a checkpoint of `resumed` bytes, which it reads and holds (in
    /// host memory) through the run.
    pub fn check_memory_resuming(
        &self,
        device: &Device,
        train_rows: usize,
        valid_rows: usize,
        resumed: u64,
    ) -> Result<MemoryEstimate, LoadError> {
        self.check_memory_holding(device, train_rows, valid_rows, resumed, 0)
    }

    /// [`check_memory_resuming`](Self::check_memory_resuming) for a run on
    /// `data`, whose rows it holds (in host memory) through the run: on the
    /// CPU they count in the estimate ([`Dataset::host_bytes`]; a file of a
    /// million rows is most of a small model's memory), but not against the
    /// host's available memory, read with them already in it.
    pub fn check_memory_on(&self, device: &Device, data: &Dataset, resumed: u64) -> Result<MemoryEstimate, LoadError> {
        self.check_memory_holding(device, data.train.len(), data.valid.len(), resumed, data.host_bytes())
    }

    fn check_memory_holding(
        &self,
        device: &Device,
        train_rows: usize,
        valid_rows: usize,
        resumed: u64,
        data: u64,
    ) -> Result<MemoryEstimate, LoadError> {
        use crate::train::memory::bytes;
        let mut e = self.memory_for(device, train_rows, valid_rows);
        if matches!(device.kind, DeviceKind::Cpu { .. }) {
            e.resumed = resumed;
            e.data = data;
        }
        let (model, train) = (&self.spec.model, &self.spec.train);
        let on = device.short_name();
        if let Some(max) = device.max_allocation().filter(|&max| e.largest.bytes > max) {
            let problem = match e.largest.layer {
                Some(i) => Diagnostic::new(
                    model.layers[i].span,
                    format!(
                        "this layer needs one {} tensor ({}), and {on} allocates at most {} at once",
                        bytes(e.largest.bytes),
                        e.largest.what,
                        bytes(max)
                    ),
                    "too large for this device",
                )
                .with_help("use a narrower layer, or train on the CPU (`--device cpu`)"),
                None => {
                    let rows = (max / (e.largest.bytes / e.batch.max(1) as u64).max(1)).max(1);
                    Diagnostic::new(
                        train.batch.span,
                        format!(
                            "a batch of {} needs one {} tensor ({}), and {on} allocates at most {} at once",
                            e.batch,
                            bytes(e.largest.bytes),
                            e.largest.what,
                            bytes(max)
                        ),
                        "too large for this device",
                    )
                    .with_help(format!("a batch of {rows} or fewer fits: `batch = {rows}`"))
                }
            };
            return Err(self.does_not_fit(problem));
        }
        // The data's rows are in memory already: the host's available
        // memory, read now, is what is left beside them (counted once).
        let mut beside = e.clone();
        beside.data = 0;
        if let Some(capacity) = device.memory_capacity().filter(|&c| beside.total() > c) {
            let what = format!(
                "training needs about {} ({}), and {on} has {}{}{}",
                bytes(beside.total()),
                beside.breakdown(),
                bytes(capacity),
                if matches!(device.kind, DeviceKind::Cpu { .. }) { " available" } else { "" },
                if e.data > 0 {
                    format!(" beside the data's rows already read ({})", bytes(e.data))
                } else {
                    String::new()
                }
            );
            let problem = match beside.batch_to_suggest(capacity) {
                Some(rows) => Diagnostic::new(train.batch.span, what, "too large a batch for this device")
                    .with_help(format!("a batch of {rows} or fewer fits: `batch = {rows}`")),
                None if beside.fixed() > capacity => {
                    let copies = if beside.copies > 0 { " and the copies that saving makes" } else { "" };
                    let best = if beside.best > 0 { ", the best epoch's weights" } else { "" };
                    Diagnostic::new(model.name.span, what, "too large a model for this device").with_help(format!(
                        "the weights, gradients, optimizer state{best}{copies} alone need {}: use a smaller model",
                        bytes(beside.fixed())
                    ))
                }
                None if beside.at_the_end > capacity => {
                    Diagnostic::new(model.name.span, what, "too large a model for this device").with_help(format!(
                        "saving the model at the end alone needs {} (three copies of its weights): use a smaller model",
                        bytes(beside.at_the_end)
                    ))
                }
                // The native CPU engine's validation pass, grown past a batch
                // (where one row would fit: else the row is what does not).
                None if beside.per_row <= capacity.saturating_sub(beside.fixed())
                    && beside.evaluation > capacity.saturating_sub(beside.fixed()) =>
                {
                    Diagnostic::new(model.name.span, what, "too large a model for this device").with_help(format!(
                        "a validation pass of {} rows alone needs {}: use a smaller model, or validate on fewer rows \
                         (a larger `split`)",
                        beside.evaluation_rows,
                        bytes(beside.evaluation)
                    ))
                }
                None => Diagnostic::new(model.name.span, what, "too large a model for this device").with_help(format!(
                    "one row's activations alone need {}: use a shorter input or narrower layers",
                    bytes(beside.per_row)
                )),
            };
            return Err(self.does_not_fit(problem));
        }
        Ok(e)
    }

    /// A text or sequence model cuts or pads every row to its `input seq`
    /// length, so the spec, not the file, sets how large the data grows in
    /// memory ([`data_bytes`](crate::train::memory::data_bytes)). A located
    /// error at `input` when that passes the host's available memory, before
    /// reading; `None` when it fits, for other models, or where the host
    /// cannot say.
    fn padded_rows_overflow_memory(&self, path: &Path, csv: Option<&[u8]>) -> Option<Diagnostic> {
        use crate::train::memory::{bytes, data_bytes};
        let model = &self.spec.model;
        if !(model.shape.is_tokens() || model.shape.is_sequence()) {
            return None;
        }
        let available = kynml_backend::proc_bytes("/proc/meminfo", "MemAvailable")?;
        // Lines, less the header: at least the rows (a quoted cell may hold more lines).
        // Lines end in `\n`, or in a lone `\r` (classic Mac, Excel for Mac):
        // whichever there are more of, as the reader takes them.
        let lines = match csv {
            // Rows held in memory (a service's upload) are counted as a file's.
            Some(bytes) => {
                let (lone, lf) = crate::data::line_breaks(bytes);
                (lf as u64).max(lone as u64)
            }
            None => Self::file_lines(path)?,
        };
        let rows = lines.saturating_sub(1);
        let need = data_bytes(rows, model.shape.size() as u64);
        (need > available).then(|| {
            Diagnostic::new(
                model.input.span,
                format!(
                    "`input {}` makes each of the {rows} rows of `{}` {} values, about {} in memory while it is read, \
                     and this machine has {} available",
                    model.shape,
                    path.display(),
                    model.shape.size(),
                    bytes(need),
                    bytes(available)
                ),
                "too long for this data",
            )
            .with_help("texts and sequences are cut or padded to the `input seq` length: a shorter one fits")
        })
    }

    /// The lines of the file at `path`, ended by `\n` or by a lone `\r`,
    /// whichever there are more of; `None` for what is not a plain file
    /// (a pipe or a device can be read once only: the load reads it; a
    /// count first drained a FIFO and left the load waiting forever).
    fn file_lines(path: &Path) -> Option<u64> {
        use std::io::Read;
        if !std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
            return None;
        }
        let mut file = std::fs::File::open(path).ok()?;
        let (mut buffer, mut lf, mut lone) = (vec![0u8; 1 << 16], 0u64, 0u64);
        let mut carry_cr = false;
        loop {
            let n = file.read(&mut buffer).ok()?;
            if n == 0 {
                break;
            }
            let piece = &buffer[..n];
            // A `\r` that ended the last piece is lone unless this one opens with `\n`.
            lone += u64::from(carry_cr && piece[0] != b'\n');
            let (l, f) = crate::data::line_breaks(piece);
            carry_cr = piece[n - 1] == b'\r';
            // `line_breaks` counts a final `\r` as lone; the next piece decides.
            lone += l as u64 - u64::from(carry_cr);
            lf += f as u64;
        }
        lone += u64::from(carry_cr);
        Some(lf.max(lone))
    }

    /// How to read a sequence model's columns: the dataset's `sequence`
    /// columns, one per value of a position of the model's `input seq LxC`;
    /// a located error where one names them and the other does not read
    /// them, or their counts differ.
    fn sequence_columns(&self) -> Result<Option<SequenceColumns>, LoadError> {
        let (model, data) = (&self.spec.model, &self.spec.dataset);
        let columns: Vec<String> = data.sequence.iter().map(|c| c.value.clone()).collect();
        let problem = match (columns.len(), model.shape.is_sequence()) {
            (0, false) => return Ok(None),
            (n, true) if n == model.shape.dims()[1] => {
                return Ok(Some(SequenceColumns::new(columns, model.shape.dims()[0])));
            }
            (0, true) => Diagnostic::new(
                model.input.span,
                format!(
                    "`input {}` reads sequences of numbers, but dataset `{}` names no sequence column",
                    model.shape, data.name.value
                ),
                "a sequence input",
            )
            .with_help("name the columns that hold the sequences: `sequence = \"signal\"` or `sequence = [\"x\", \"y\"]`"),
            (n, true) => Diagnostic::new(
                model.input.span,
                format!(
                    "`input {}` takes {} values per position, but dataset `{}` names {n} sequence column{}",
                    model.shape,
                    model.shape.dims()[1],
                    data.name.value,
                    if n == 1 { "" } else { "s" }
                ),
                "values per position",
            )
            .with_help(format!("each position takes one value from each sequence column: `input seq {}x{n}`", model.shape.dims()[0])),
            (n, false) => Diagnostic::new(
                data.sequence[0].span,
                format!(
                    "dataset `{}` names sequence columns, but model `{}` does not read a sequence",
                    data.name.value, model.name.value
                ),
                "sequence columns",
            )
            .with_help(format!(
                "declare the positions per sequence and the values of each: `input seq 64x{n}` (model `{}` has `input {}`)",
                model.name.value, model.shape
            )),
        };
        // Between two blocks of the spec, found before any data is read.
        let mut error = self.located(vec![problem]);
        if let LoadError::Spec { against_data, .. } = &mut error {
            *against_data = false;
        }
        Err(error)
    }

    /// [`Self::load_data`]'s error for a model that does not fit its data's
    /// categorical columns or text, for data made otherwise (`bench --synthetic`).
    pub fn unbound_error(&self, why: Unbound) -> LoadError {
        self.located(vec![self.unbound(why)])
    }

    /// The located message for a model that does not fit the data's categorical columns.
    fn unbound(&self, why: Unbound) -> Diagnostic {
        let (model, data) = (&self.spec.model, &self.spec.dataset);
        match why {
            Unbound::NoCategories => Diagnostic::new(
                model.layers.first().map_or(model.input.span, |l| l.span),
                "`embedding` embeds categorical columns, but the dataset declares none",
                "nothing to embed",
            )
            .with_help(format!(
                "name the columns that hold categories in dataset `{}`: `categorical = [\"city\"]`",
                data.name.value
            )),
            Unbound::NoEmbedding => Diagnostic::new(
                data.categorical.first().map_or(data.name.span, |c| c.span),
                format!(
                    "categorical columns need an `embedding` layer, but model `{}` starts with `{}`",
                    model.name.value,
                    model.layers.first().map_or("input", |l| l.value.name())
                ),
                "not embedded",
            )
            .with_help("add a line such as `embedding 8` right after `input`: each category becomes 8 learned values"),
            Unbound::NoText => Diagnostic::new(
                model.input.span,
                format!("`input {}` reads a text, but dataset `{}` names no text column", model.shape, data.name.value),
                "a text input",
            )
            .with_help("name the column that holds the texts: `tokens = \"review\"`"),
            Unbound::NotText => Diagnostic::new(
                data.tokens.as_ref().map_or(data.name.span, |t| t.span),
                format!(
                    "dataset `{}` names a text, but model `{}` does not read one",
                    data.name.value, model.name.value
                ),
                "a text column",
            )
            .with_help(match (model.shape.dims(), model.layers.first().map(|l| &l.value)) {
                // `input 32` then `embedding 16`: the `seq` left out.
                ([n], Some(Layer::Embedding(_))) => format!(
                    "declare the tokens per text: `input seq {n}` (model `{}` has `input {n}`, which reads {n} plain \
                     features)",
                    model.name.value
                ),
                _ => format!(
                    "declare the tokens per text: `input seq 64`, then `embedding 32` (model `{}` has `input {}`)",
                    model.name.value, model.shape
                ),
            }),
        }
    }

    fn does_not_fit(&self, problem: Diagnostic) -> LoadError {
        LoadError::DoesNotFit {
            path: self.path.clone(),
            source_text: self.source.clone(),
            error: SpecError { diagnostics: vec![problem] },
        }
    }

    fn located(&self, diagnostics: Vec<Diagnostic>) -> LoadError {
        LoadError::Spec {
            path: self.path.clone(),
            source_text: self.source.clone(),
            error: SpecError { diagnostics },
            against_data: true,
        }
    }
}

/// Classes of one or two rows beside classes of many, said with every
/// class's rows, when without them the classes are the `fits` the model
/// takes: such a class is most often a label mistyped in the data
/// (`Setosa` among 50 `setosa`), which makes the class count wrong.
fn rare_classes(data: &Dataset, fits: usize) -> Option<String> {
    use crate::data::Labels;
    let names = data.class_names()?;
    let mut rows = vec![0usize; names.len()];
    for part in [&data.train.labels, &data.valid.labels] {
        if let Labels::Classes(labels) = part {
            labels.iter().for_each(|&c| rows[c as usize] += 1);
        }
    }
    let few: Vec<usize> = (0..names.len()).filter(|&c| rows[c] <= 2).collect();
    if few.is_empty() || fits < 2 || names.len() - few.len() != fits || rows.iter().max().is_none_or(|&m| m < 10) {
        return None;
    }
    let mut listed: Vec<String> = few.iter().take(8).map(|&c| format!("`{}`", names[c])).collect();
    if few.len() > 8 {
        listed.push(format!("{} more", few.len() - 8));
    }
    let (few_rows, rows_of) = if names.len() <= 12 {
        let counted: Vec<String> = names.iter().zip(&rows).map(|(n, r)| format!("`{n}` {r}")).collect();
        (String::new(), format!("rows of each class: {}; ", counted.join(", ")))
    } else {
        (" (of one or two rows each)".to_string(), String::new())
    };
    let (it, may) = if few.len() == 1 { ("it", "may be a mistyped label") } else { ("them", "may be mistyped labels") };
    Some(format!("{rows_of}{}{few_rows} {may}: correct {it} in the data", listed.join(", ")))
}

/// Where the spec and its data disagree, located in the spec.
pub fn check_fit(spec: &Spec, data: &Dataset, data_path: &Path) -> Vec<Diagnostic> {
    let mut problems = Vec::new();
    let file = data_path.display();
    let input = &spec.model.input;
    if input.value != data.n_features() {
        problems.push(
            Diagnostic::new(
                input.span,
                format!(
                    "model `{}` declares `input {}`{} but `{file}` has {} feature columns",
                    spec.model.name.value,
                    spec.model.shape,
                    if spec.model.shape.rank() > 1 { format!(" ({} values)", input.value) } else { String::new() },
                    data.n_features()
                ),
                format!("expected {} here", data.n_features()),
            )
            .with_help(format!("every column except the target `{}` is a feature", data.info.target)),
        );
    }
    // The model's output width, from the shapes through every layer (a
    // `residual:` block that ends the model outputs its last layer's width).
    // A model whose shapes do not chain was refused with the spec.
    let layers: Vec<Layer> = spec.model.layers.iter().map(|l| l.value.clone()).collect();
    let output = crate::model::shapes(&spec.model.shape, &layers).ok().and_then(|s| s.last().cloned());
    let (Some(last), Some(output), loss) = (spec.model.layers.last(), output, &spec.train.loss) else {
        return problems;
    };
    let &[units] = output.dims() else { return problems };
    let classes = data.class_names().map_or(0, <[String]>::len);
    let (needed, why) = match loss.value {
        Loss::CrossEntropy => (
            classes,
            format!("`cross_entropy` needs one output per class ({classes} classes in `{}`)", data.info.target),
        ),
        Loss::Bce => (1, "`bce` takes one logit per row".to_string()),
        _ => (1, format!("a regression on the single column `{}` has one output", data.info.target)),
    };
    // With fewer than two classes there is no right width to suggest: the
    // target itself is the problem, said below.
    let no_classes = loss.value == Loss::CrossEntropy && classes < 2;
    if units != needed && !no_classes {
        let (what, label) = match &last.value {
            Layer::Dense(_) => ("the last layer has".to_string(), format!("expected `dense {needed} ...`")),
            Layer::Residual(_) => (
                "the `residual:` block that ends the model (its last layer's width) has".to_string(),
                format!("expected a block ending in `dense {needed} ...`, or a `dense {needed} ...` after it"),
            ),
            other => (
                format!("the model ends on `{}`, which has", other.name()),
                format!("expected a `dense {needed} ...` after it"),
            ),
        };
        let mut problem = Diagnostic::new(
            last.span,
            format!("{what} {units} output{} but {why}", if units == 1 { "" } else { "s" }),
            label,
        );
        if loss.value.is_classification() && looks_continuous(data.class_names().unwrap_or(&[])) {
            problem = problem.with_help(format!(
                "`{}` looks like a continuous value ({classes} distinct numbers); for regression use `loss = mse`",
                data.info.target
            ));
        } else if let Some(rare) = (loss.value == Loss::CrossEntropy).then(|| rare_classes(data, units)).flatten() {
            problem = problem.with_help(format!("{rare}; or give the last layer {classes} outputs"));
        }
        problems.push(problem);
    }
    if loss.value == Loss::Bce && classes != 2 {
        problems.push(
            Diagnostic::new(
                loss.span,
                format!("`bce` needs exactly 2 classes but `{}` in `{file}` has {classes}", data.info.target),
                "binary loss on a non-binary target",
            )
            .with_help(match rare_classes(data, 2) {
                Some(rare) => format!("{rare}; or use `loss = cross_entropy` for more than two classes"),
                None => "use `loss = cross_entropy` for more than two classes".into(),
            }),
        );
    }
    if let Some(problem) = batchnorm_on_lone_rows(spec, data) {
        problems.push(problem);
    }
    if let Some(problem) = loss_past_f32(spec, data) {
        problems.push(problem);
    }
    if no_classes {
        problems.push(
            Diagnostic::new(
                loss.span,
                format!(
                    "`cross_entropy` needs at least 2 classes but `{}` in `{file}` has {classes}",
                    data.info.target
                ),
                "not a classification target",
            )
            .with_help(if classes == 1 {
                format!(
                    "every row of `{file}` has the same `{}`: a classifier needs rows of each class it tells apart",
                    data.info.target
                )
            } else {
                format!("`{}` holds no class labels", data.info.target)
            }),
        );
    }
    problems
}

/// A `batchnorm` on plain features normalises each feature over the rows
/// of a batch: with one row that is 0 for every feature, and the running
/// variance learns nothing (PyTorch refuses it: "Expected more than 1 value
/// per channel when training"). Located at the layer; a batchnorm after a
/// convolution has a channel's positions to average, unless its output is
/// one position (a 1x1 map), which is then as plain features are.
fn batchnorm_on_lone_rows(spec: &Spec, data: &Dataset) -> Option<Diagnostic> {
    let devices = listed_devices(spec);
    let rows = spec.train.batch.value.min(data.info.train_rows);
    if rows / devices >= 2 {
        return None;
    }
    let (found, flat) = spec.model.batchnorm_needing_rows()?;
    let (why, help) = if devices > 1 {
        let per = rows / devices;
        (
            format!(
                "{rows} rows a step over {devices} devices leave {per} row{} on a device",
                if per == 1 { "" } else { "s" }
            ),
            format!(
                "raise the batch to {} or more (2 rows a device), train on fewer devices, or use `layernorm`, which \
                 normalises each row on its own",
                2 * devices
            ),
        )
    } else if spec.train.batch.value < 2 {
        (
            // Said of the batch, not of `batch = 1`: bench's `--batch` may have set it.
            "a batch of 1 gives each step one row".to_string(),
            "raise the batch to 2 or more, or use `layernorm`, which normalises each row on its own".to_string(),
        )
    } else {
        (
            "the training split holds one row".to_string(),
            "give the training split more rows (more data, or a larger `split`), or use `layernorm`, which \
             normalises each row on its own"
                .to_string(),
        )
    };
    Some(
        Diagnostic::new(
            found,
            if flat {
                format!("`batchnorm` normalises each feature over a step's rows, but {why}")
            } else {
                format!(
                    "`batchnorm` normalises each channel over a step's rows and the channel's positions, but its \
                     input holds one position a channel and {why}"
                )
            },
            "needs at least 2 rows a step",
        )
        .with_help(help),
    )
}

/// A data-parallel run gives each device a slice of the step's rows, the
/// smallest `rows / devices` (`cuda:all`'s count is known only later: 1).
fn listed_devices(spec: &Spec) -> usize {
    match spec.train.devices.as_ref().map(|d| &d.value) {
        Some(crate::spec::types::DeviceSet::List(list)) => list.len().max(1),
        _ => 1,
    }
}

/// A regression target so large that an epoch's loss passes what a
/// 32-bit float holds from the first epoch (outputs near 0: each row's
/// term is its target's). A GPU adds an epoch's loss up in 32-bit floats
/// (each step's mean times its rows, on the device), the native CPU engine
/// in f64: such a spec would train on one and stop early on the other, and
/// learns nothing on either (its errors stay about as large as the
/// targets). Refused on every device, located at the loss, with the
/// scaling that fits.
fn loss_past_f32(spec: &Spec, data: &Dataset) -> Option<Diagnostic> {
    let crate::data::Labels::Values(y) = &data.train.labels else { return None };
    let loss = &spec.train.loss;
    let term = |v: f32| {
        let v = f64::from(v).abs();
        match loss.value {
            Loss::Mse => v * v,
            Loss::Huber { delta } if v < delta => 0.5 * v * v,
            Loss::Huber { delta } => delta * (v - 0.5 * delta),
            _ => v,
        }
    };
    if !matches!(loss.value, Loss::Mse | Loss::Mae | Loss::Huber { .. }) {
        return None;
    }
    let sum: f64 = y.iter().map(|&v| term(v)).sum();
    if sum <= f64::from(f32::MAX) {
        return None;
    }
    let largest = y.iter().fold(0f32, |m, v| m.max(v.abs()));
    let what = match loss.value {
        Loss::Mse => "squared errors",
        Loss::Mae => "absolute errors",
        _ => "Huber terms",
    };
    let target = &data.info.target;
    let divisor = 10f64.powi((largest.log10().floor() as i32 - 3).max(1));
    Some(
        Diagnostic::new(
            loss.span,
            format!(
                "the target `{target}` reaches {largest:.1e} in size: over the first epoch the {} training rows' \
                 {what} sum to about {sum:.1e}, past what a 32-bit float holds (about 3.4e38)",
                y.len()
            ),
            "an epoch's loss past 32-bit floats",
        )
        .with_help(format!(
            "scale `{target}` down in the data (divided by {divisor:.0e}, it reaches about {:.1e}), or subtract an \
             offset where its values lie close together; a GPU adds the loss up in 32-bit floats, and a spec \
             trains alike on every device",
            f64::from(largest) / divisor
        )),
    )
}

/// How spreadsheets and exports write a missing value.
fn is_missing_marker(value: &str) -> bool {
    let v = value.trim().to_ascii_lowercase();
    ["", "na", "n/a", "nan", "null", "none", "?", "-", "missing"].contains(&v.as_str())
}

/// More than 20 distinct labels, all numbers: most likely a regression
/// target given a classification loss.
fn looks_continuous(names: &[String]) -> bool {
    names.len() > 20 && names.iter().all(|n| n.parse::<f64>().is_ok())
}

/// The device a spec's request names.
pub fn device_choice(request: DeviceRequest) -> DeviceChoice {
    match request {
        DeviceRequest::Auto => DeviceChoice::Auto,
        DeviceRequest::Cpu => DeviceChoice::Cpu,
        DeviceRequest::Cuda(index) => DeviceChoice::Cuda(index),
        DeviceRequest::Wgpu => DeviceChoice::Wgpu,
    }
}

/// Why runs of three or more replicas, some sharing a device, differ in
/// their last bits (see [`deterministic`]); `None` for other device sets.
fn replicas_vary(devices: &[Device]) -> Option<String> {
    let shared = devices.iter().any(|a| devices.iter().filter(|b| b.describe() == a.describe()).count() >= 2);
    (devices.len() >= 3 && shared).then(|| {
        format!(
            "no: Burn's all-reduce adds the gradients of {} replicas, some on one device, in an order that changes \
             from run to run, so the last bits of the weights differ; 2 replicas, or one a device, keep it",
            devices.len()
        )
    })
}

/// Whether `deterministic = true` holds on this engine and device: the
/// same run gives the same bits when every kernel is chosen the same way
/// and sums in a fixed order. The CPU engines split their work the same
/// way every run. On a GPU, CubeCL picks each kernel by timing candidates
/// the first time it meets a shape, and keeps the winner for the rest of
/// the process; the kernel cache keeps it for later runs, so they choose
/// alike. KynML's own sums (the clipping norm) go along a dimension, never
/// through the whole-tensor sum that may add atomically.
///
/// A data-parallel run's gradients meet in Burn's all-reduce, which sorts
/// the replicas by device and takes those on one device in the order a
/// HashMap drains them, drawn anew each process: where two share a device
/// among three or more replicas, the additions' order, and so the last
/// bits, differ from run to run (two replicas add alike either way; one
/// per device is summed in device order).
fn deterministic(native: bool, devices: &[Device]) -> Applied {
    use kynml_backend::kernel_cache::CacheState;
    let setting = "deterministic";
    let device = &devices[0];
    if let Some(value) = replicas_vary(devices) {
        return Applied { setting, value, as_requested: false };
    }
    if native {
        return Applied {
            setting,
            value: "yes: the native CPU engine splits every pass the same way on every run with as many threads, \
                    whatever the timing"
                .into(),
            as_requested: true,
        };
    }
    if !device.has_fusion() {
        return Applied {
            setting,
            value: "yes: Burn's CPU backend sums along dimensions in a fixed order".into(),
            as_requested: true,
        };
    }
    match kynml_backend::kernel_cache::seen().map(|c| c.state.clone()) {
        Some(CacheState::On { .. }) => Applied {
            setting,
            value: "yes: each kernel is chosen once and kept, for this run and the next, in the kernel cache; \
                    no atomic adds in KynML's sums"
                .into(),
            as_requested: true,
        },
        Some(CacheState::Off { reason }) => Applied {
            setting,
            value: format!(
                "within this run only: the kernel cache is off ({reason}), so another run may time CubeCL's \
                 candidate kernels differently and pick others; --cache DIR to a writable folder keeps the choices"
            ),
            as_requested: false,
        },
        Some(CacheState::External) | None => Applied {
            setting,
            value: "within this run only: CubeCL's own cache settings apply (it was configured before KynML could), \
                    so another run may pick other kernels"
                .into(),
            as_requested: false,
        },
    }
}

/// The rest of a path that starts with the home folder, `~` (`~/data.csv`,
/// or `~` alone); `None` for any other (`~ann/...` is a folder of that name).
fn from_home(path: &Path) -> Option<&Path> {
    let mut parts = path.components();
    match parts.next() {
        Some(std::path::Component::Normal(first)) if first == "~" => Some(parts.as_path()),
        _ => None,
    }
}

/// The CubeCL search level of a spec's `autotune` (`off` runs CubeCL's
/// minimal search, which is as little as it allows).
pub fn tune_level(a: crate::spec::types::Autotune) -> kynml_backend::kernel_cache::TuneLevel {
    use crate::spec::types::Autotune;
    use kynml_backend::kernel_cache::TuneLevel;
    match a {
        Autotune::Off | Autotune::Fast => TuneLevel::Minimal,
        Autotune::Balanced => TuneLevel::Balanced,
        Autotune::Full => TuneLevel::Full,
    }
}

/// One line of the "what runs" statement: a setting as it will really apply.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Applied {
    /// The setting's name, e.g. `device`, `precision`, `fusion`, `checkpoints`, `export`.
    pub setting: &'static str,
    /// What will run, in words, with the reason where it differs from the spec.
    pub value: String,
    /// False when the spec asks for something this run does not do.
    pub as_requested: bool,
}

/// What will really run, setting by setting, with the reason wherever the
/// spec asks for more than this version does.
pub fn what_runs(spec: &Spec, device: &Device) -> Vec<Applied> {
    what_runs_on(spec, std::slice::from_ref(device))
}

/// [`what_runs`] for a run on `devices`: more than one is a data-parallel
/// run, whose first device evaluates, checkpoints and reports.
pub fn what_runs_on(spec: &Spec, devices: &[Device]) -> Vec<Applied> {
    let Some(device) = devices.first() else { return Vec::new() };
    let d = &spec.dataset;
    let t = &spec.train;
    let precision = crate::train::precision::plan(t, device);
    let engine = if devices.len() > 1 {
        crate::train::EngineKind::Burn
    } else {
        crate::train::native::engine_for(device, &precision, crate::train::EngineChoice::Auto, &spec.model)
    };
    let on = if devices.len() == 1 {
        device.describe()
    } else if devices.iter().all(|o| o.describe() == device.describe()) {
        format!("{} x {}", devices.len(), device.describe())
    } else {
        devices.iter().map(Device::describe).collect::<Vec<_>>().join(", ")
    };
    let mut value = format!("{on} via {}", engine.describe(device));
    if devices.len() > 1 {
        value += ": a data-parallel run steps on Burn on every device";
    }
    if let (DeviceKind::Cpu { .. }, Compute::Fp32, Err(layer)) =
        (&device.kind, precision.compute, crate::train::native::native_layers(&spec.model))
    {
        value += &format!(" (the native CPU engine has {layer} yet)");
    }
    let mut out = vec![Applied { setting: "device", value, as_requested: true }];
    if devices.len() > 1 {
        let n = devices.len();
        let batch = t.batch.value;
        let per =
            if batch.is_multiple_of(n) { format!("{}", batch / n) } else { format!("{}-{}", batch / n, batch / n + 1) };
        let names: Vec<String> = devices.iter().map(Device::short_name).collect();
        let mut value = format!(
            "data-parallel on {n} devices ({}): batch {batch} = {per} rows per device a step; the gradients summed \
             once per optimizer step by {}; the first device ({}) evaluates, checkpoints and exports",
            names.join(", "),
            crate::train::parallel::ALL_REDUCE,
            names[0],
        );
        if matches!(device.kind, DeviceKind::Cpu { .. }) {
            value += "; the CPU replicas share the host's cores (a check of the data-parallel path, not a speed-up)";
        }
        if spec.model.layers.iter().any(|l| matches!(l.value, Layer::BatchNorm(_))) {
            value += "; batchnorm normalises each device's slice (its running averages are the first device's)";
        }
        out.push(Applied { setting: "devices", value, as_requested: true });
    }
    if let DeviceKind::Cuda(gpu) = &device.kind {
        // Nothing asked for it: without NVML this is a note, not a refusal.
        let value = crate::train::gpu_monitor::check(gpu).map_or_else(
            |why| why,
            |()| {
                format!(
                    "NVML: the GPU's busy share and memory every {} ms (metrics.jsonl `gpu_busy`, \
                     `gpu_memory_peak`; the profile's verdict and trace)",
                    crate::train::gpu_monitor::PERIOD.as_millis()
                )
            },
        );
        out.push(Applied { setting: "gpu monitor", value, as_requested: true });
    }
    out.push(match (&precision.fallback, precision.compute) {
        (Some(why), Compute::Tf32) => Applied {
            setting: "precision",
            value: format!("tf32: fp32 storage, products on TF32 tensor cores ({why})"),
            as_requested: false,
        },
        (Some(why), c) => Applied { setting: "precision", value: format!("{} ({why})", c.name()), as_requested: false },
        (None, Compute::Fp32) => Applied { setting: "precision", value: "fp32".into(), as_requested: true },
        (None, Compute::Tf32) => Applied {
            setting: "precision",
            value: "tf32: fp32 storage and master weights, products on TF32 tensor cores with fp32 accumulation".into(),
            as_requested: true,
        },
        (None, c) => Applied {
            setting: "precision",
            value: format!(
                "{} mixed precision: the products (dense, convolution, attention) in {} in training and validation, the rest and the master weights fp32; {}",
                c.name(),
                c.name(),
                match precision.scaler {
                    Some(s) => format!(
                        "dynamic loss scaling from {} (x{} every {} finite steps, x{} on overflow); {}",
                        s.init,
                        s.growth,
                        s.interval,
                        s.backoff,
                        match crate::train::update::Update::plan(&t.optimizer.value, true) {
                            crate::train::update::Update::Burn => format!(
                                "each step's overflow check is read back from the device ({} runs on Burn's own optimizer, which cannot skip a step on the device)",
                                t.optimizer.value.name()
                            ),
                            _ => "an overflowed step is skipped on the device, with nothing read back inside the step".into(),
                        }
                    ),
                    None => "no loss scaling".into(),
                }
            ),
            as_requested: true,
        },
    });
    // Loss scaling written for a run that ends up without half-precision products.
    if matches!(t.loss_scale.value, crate::spec::types::LossScale::Dynamic { .. }) && precision.scaler.is_none() {
        out.push(Applied {
            setting: "loss scale",
            value: format!(
                "none (loss_scale = dynamic is written, but the run's products are {}, which need no scaling)",
                precision.compute.name()
            ),
            as_requested: false,
        });
    }
    let native = engine == crate::train::EngineKind::Native;
    // A written `compile = true` is answered by name: this is what it gives.
    let asked = if t.compile.value { "compile = true: " } else { "" };
    // A written `autotune` has a line of its own, which says how hard.
    let tuned = if t.autotune.is_none() { " and autotune" } else { "" };
    out.push(match (t.compile.value, device.has_fusion()) {
        // Nothing to compile either way: the native engine's passes are fused
        // as written, which changes no result, so `compile = false` is not
        // overridden in any way a user would see.
        (_, _) if native => Applied {
            setting: "fusion",
            value: format!(
                "built in ({asked}the native CPU engine runs bias, activation, normalisation and dropout as fused passes)"
            ),
            as_requested: true,
        },
        (true, true) => {
            Applied { setting: "fusion", value: format!("on ({asked}Burn kernel fusion{tuned})"), as_requested: true }
        }
        (true, false) => Applied {
            setting: "fusion",
            value: "off (compile = true, but the CPU backend has no kernel fusion)".into(),
            as_requested: false,
        },
        // Left to its default, `compile` asks nothing.
        (false, true) if !t.written(&t.compile) => {
            Applied { setting: "fusion", value: format!("on (Burn kernel fusion{tuned})"), as_requested: true }
        }
        (false, true) => Applied {
            setting: "fusion",
            value: "on (compile = false, but fusion is built into this binary's GPU backends and cannot be switched off at run time yet)".into(),
            as_requested: false,
        },
        (false, false) => Applied { setting: "fusion", value: "off".into(), as_requested: true },
    });
    // An experiment of the GPU bench, said only when asked for.
    let epilogue = crate::model::dense::epilogue();
    if *epilogue != crate::model::dense::Epilogue::Separate {
        use crate::model::dense::Epilogue;
        let var = "KYNML_MATMUL_EPILOGUE";
        let (value, as_requested) = match epilogue {
            Epilogue::Unknown(v) => (format!("separate ({var}=`{v}` is neither `fused` nor `separate`)"), false),
            _ if native => {
                (format!("no effect ({var}=fused, but the native CPU engine runs kernels of its own)"), false)
            }
            _ if !device.has_fusion() => {
                (format!("no effect ({var}=fused, but Burn's CPU backend fuses no kernels)"), false)
            }
            _ => (
                format!(
                    "fused ({var}=fused, an experiment): each dense product runs in one kernel with its cast, \
                     bias and activation, from CubeCL's fused-matmul autotune; on lavapipe that kernel gave \
                     wrong outputs for a one-unit layer (after widths 3 and 5: the first row right, the \
                     others read from the layer's input), so check its results against a run without it"
                ),
                true,
            ),
        };
        out.push(Applied { setting: "matmul epilogue", value, as_requested });
    }
    // The kernel cache matters where CubeCL runs: Burn's GPU backends.
    if device.has_fusion() {
        if let Some(cache) = kynml_backend::kernel_cache::seen() {
            out.push(Applied {
                setting: "kernel cache",
                value: cache.describe(),
                as_requested: !matches!(cache.state, kynml_backend::kernel_cache::CacheState::Off { .. }),
            });
        }
    }
    let workers = d.num_workers.value;
    let prefetch = d.prefetch.as_ref().map(|p| p.value).filter(|&p| p > 0);
    let batches = |n: usize| format!("{n} batch{}", if n == 1 { "" } else { "es" });
    out.push(match (workers, prefetch) {
        (0, None) => Applied { setting: "data loading", value: "on the training thread".into(), as_requested: true },
        // The users' `prefetch` on its own: batches prepared ahead of the step.
        (0, Some(p)) => Applied {
            setting: "data loading",
            value: format!("one thread, up to {} prepared ahead (num_workers = 0: one at a time)", batches(p)),
            as_requested: true,
        },
        (w, p) => Applied {
            setting: "data loading",
            value: format!(
                "{w} worker thread{}, up to {} prepared ahead{}",
                if w == 1 { "" } else { "s" },
                batches(p.unwrap_or(2 * w)),
                crowding(w, std::thread::available_parallelism().map_or(0, usize::from))
            ),
            as_requested: true,
        },
    });
    if d.pin_memory.value {
        out.push(Applied { setting: "pin_memory", value: pin_memory_note(&device.kind).into(), as_requested: false });
    }
    if t.checkpoint_activations.value {
        out.push(if native {
            Applied {
                setting: "checkpoint activations",
                value: "not applied (the native CPU engine keeps each layer's activations in buffers reused every step; it does not recompute them)".into(),
                as_requested: false,
            }
        } else {
            Applied {
                setting: "checkpoint activations",
                value: "on: the backward pass recomputes element-wise activations instead of keeping them (Burn's balanced checkpointing)".into(),
                as_requested: true,
            }
        });
    }
    if let Some(fused) = t.optimizer.value.fused() {
        let name = t.optimizer.value.name();
        out.push(match (fused, native) {
            (true, true) => Applied {
                setting: "fused",
                value: format!(
                    "not applied (the native CPU engine updates each parameter in one pass of its own; \
                     {name}(fused=true) applies to Burn's devices)"
                ),
                as_requested: false,
            },
            (true, false) => Applied {
                setting: "fused",
                value: format!("on: one {name} update over all the parameters at once, on the device"),
                as_requested: true,
            },
            (false, true) => Applied {
                setting: "fused",
                value: format!("off: {name} updates each parameter in turn, in a pass of its own"),
                as_requested: true,
            },
            (false, false) => Applied {
                setting: "fused",
                value: format!("off: {name} updates each parameter in turn"),
                as_requested: true,
            },
        });
    }
    // Asked for, said either way; not asked for, said where even the same
    // spec and seed do not repeat (three replicas or more sharing a device).
    if t.deterministic.value {
        out.push(deterministic(native, devices));
    } else if let Some(value) = replicas_vary(devices) {
        out.push(Applied { setting: "deterministic", value, as_requested: true });
    }
    if t.accumulate.value > 1 {
        let (n, b) = (t.accumulate.value, t.batch.value);
        out.push(Applied {
            setting: "accumulate",
            // In u128: a product of two written counts cannot wrap there.
            value: format!(
                "{n} batches of {b} per optimizer step ({} rows, or an epoch's where it has fewer: a step ends \
                 with its epoch), their gradients weighted by their rows",
                n as u128 * b as u128
            ),
            as_requested: true,
        });
    }
    if let Some(a) = &t.autotune {
        let level = tune_level(a.value);
        let written = format!("autotune = {}", a.value.name());
        out.push(match (device.has_fusion(), kynml_backend::kernel_cache::autotune()) {
            (false, _) => Applied {
                setting: "autotune",
                value: format!("no effect ({written}, but the CPU backends tune no kernels)"),
                as_requested: false,
            },
            (true, Some(set)) if set != level => Applied {
                setting: "autotune",
                value: format!("{} ({written} came after the level was set for this process)", set.name()),
                as_requested: false,
            },
            (true, None) => Applied {
                setting: "autotune",
                value: format!("CubeCL's own setting ({written} was not handed to CubeCL before the device started)"),
                as_requested: false,
            },
            (true, Some(_)) if a.value == crate::spec::types::Autotune::Off => Applied {
                setting: "autotune",
                value: "minimal (autotune = off, but CubeCL always tunes kernels it has several versions of; its minimal search is the least it does)".into(),
                as_requested: false,
            },
            (true, Some(_)) => Applied {
                setting: "autotune",
                value: format!("{} search for the fastest kernels ({written})", level.name()),
                as_requested: true,
            },
        });
    }
    if let Some(clip) = &t.clip {
        // As written: `1e30`, not thirty-one digits.
        let number =
            |x: f64| if x != 0.0 && !(1e-4..1e6).contains(&x.abs()) { format!("{x:e}") } else { format!("{x}") };
        let rule = match clip.value {
            crate::spec::types::Clip::Norm(x) => {
                format!("to a global L2 norm of {} (PyTorch's clip_grad_norm_)", number(x))
            }
            crate::spec::types::Clip::Value(x) => {
                format!("each value to [-{0}, {0}] (PyTorch's clip_grad_value_)", number(x))
            }
        };
        let scaled = if precision.scaler.is_some() { ", after loss scaling is undone" } else { "" };
        out.push(Applied {
            setting: "clipping",
            value: format!(
                "gradients clipped {rule}{scaled}, before each optimizer step; the pre-clip norm is logged per epoch"
            ),
            as_requested: true,
        });
    }
    if let Some(ckpt) = &t.checkpoint {
        let c = &ckpt.value;
        out.push(Applied {
            setting: "checkpoints",
            value: format!(
                "{} to `{}`, {}{}",
                // `every_n` past the run's epochs leaves the save at the end alone: said.
                match (c.every_n, t.epochs.value) {
                    (1, _) => "every epoch and at the end".to_string(),
                    (n, epochs) if n > epochs => {
                        let epochs = if epochs == 1 { "1 epoch".to_string() } else { format!("{epochs} epochs") };
                        format!("at the end only (every_n = {n} is more than the run's {epochs})")
                    }
                    (n, _) => format!("every {n} epochs and at the end"),
                },
                c.path.display(),
                if c.async_save { "written in the background" } else { "written before training goes on" },
                if c.keep > 1 { format!(", keeping the last {}", c.keep) } else { String::new() }
            ),
            as_requested: true,
        });
    }
    if let Some(export) = &spec.export {
        let path = export.path.value.display();
        out.push(match export.format.value {
            ExportFormat::Torchscript => Applied {
                setting: "export",
                value: format!(
                    "none (torchscript is PyTorch's own format, which a native engine cannot write; \
                     `kynml export` writes onnx, safetensors or burn from the run folder); nothing is written to `{path}`"
                ),
                as_requested: false,
            },
            f => Applied {
                setting: "export",
                value: format!("{} to `{path}` after training", format!("{f:?}").to_lowercase()),
                as_requested: true,
            },
        });
    }
    out
}

/// Why `pin_memory = true` does not apply, device by device: batches go up
/// from ordinary (pageable) host memory everywhere in this version.
fn pin_memory_note(kind: &DeviceKind) -> &'static str {
    match kind {
        // cubecl-runtime 0.10's `create_tensor` (under Burn 0.21's
        // `from_data`) copies the given bytes into a fresh Vec before the
        // upload, so bytes staged in page-locked memory lose it on the way.
        DeviceKind::Cuda(_) => {
            "not applied (Burn 0.21's CUDA upload copies every batch into ordinary memory before the transfer, \
             so a page-locked buffer would not reach the copy; batches go up from ordinary memory)"
        }
        DeviceKind::Wgpu(_) => {
            "not applied (wgpu has no page-locked host memory; batches go up through wgpu's own staging buffers)"
        }
        DeviceKind::Cpu { .. } => "not applied (on the CPU there is no host-to-device copy to speed up)",
    }
}

/// A note when `workers` loader threads exceed the machine's spare cores
/// (`cores` in all, one for the step; 0 when unknown): they then compete
/// with the step for the cores, which the profile's verdict measures.
fn crowding(workers: usize, cores: usize) -> String {
    let spare = cores.saturating_sub(1);
    if cores == 0 || workers <= spare {
        return String::new();
    }
    format!(
        "; more than this machine's spare cores ({cores} core{} in all, one for the step, so {} spare): \
         they compete with the step, and num_workers = {spare} may be faster (`--profile` measures it)",
        if cores == 1 { "" } else { "s" },
        if spare == 0 { "none".to_string() } else { spare.to_string() }
    )
}

/// The precision as the spec spells it: `fp32`, `fp16`, `bf16` or `tf32`.
pub fn precision_name(p: Precision) -> &'static str {
    match p {
        Precision::Fp32 => "fp32",
        Precision::Fp16 => "fp16",
        Precision::Bf16 => "bf16",
        Precision::Tf32 => "tf32",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `~/...` is the home folder's, as a shell and pandas read it; `~name`
    /// and a `~` later in the path are names like any other.
    #[test]
    fn a_leading_tilde_is_the_home_folder() {
        let text = "dataset D:\n    source = csv(\"~/d.csv\")\n    target = \"y\"\nmodel M:\n    input 2\n    \
                    dense 1 linear\ntrain:\n    loss = mse\n    epochs = 1\n";
        let file = SpecFile::from_source(Path::new("/specs/s.kyn"), text.into()).unwrap();
        assert_eq!(file.resolve(Path::new("~ann/iris.csv")), Path::new("/specs/~ann/iris.csv"));
        assert_eq!(file.resolve(Path::new("data/~/iris.csv")), Path::new("/specs/data/~/iris.csv"));
        assert_eq!(file.resolve(Path::new("/abs/iris.csv")), Path::new("/abs/iris.csv"));
        let home = dirs::home_dir().expect("a home folder where the tests run");
        assert_eq!(file.data_path(), home.join("d.csv"));
        assert_eq!(file.resolve(Path::new("~")), home);
    }

    /// The memory estimate counts a fused update's buffers only where one
    /// runs: not on the native CPU engine, which has none.
    #[test]
    fn the_native_engine_is_not_charged_for_a_fused_update() {
        let file = |optimizer: &str| {
            let text = format!(
                "dataset D:\n    source = csv(\"d.csv\")\n    target = \"y\"\nmodel M:\n    input 2\n    dense 8 relu\n    \
                 dense 1 linear\ntrain:\n    loss = mse\n    epochs = 1\n    optimizer = {optimizer}\n"
            );
            SpecFile::from_source(Path::new("a.kyn"), text).unwrap()
        };
        let cpu = Device::cpu();
        let plain = file("adam(lr=0.01)").check_memory(&cpu).unwrap();
        let fused = file("adam(lr=0.01, fused=true)").check_memory(&cpu).unwrap();
        assert!(plain.optimizer > 0);
        assert_eq!(fused.optimizer, plain.optimizer);
        // Burn's engine runs it, and is charged for it: a data-parallel run
        // on the CPU steps on Burn's.
        let parallel = file("adam(lr=0.01, fused=true)\n    devices = [cpu, cpu]").check_memory(&cpu).unwrap();
        assert!(parallel.optimizer > plain.optimizer);
    }

    /// A spec opened through a symbolic link reads its relative paths from
    /// the link's folder, as docs/language.md says.
    #[cfg(unix)]
    #[test]
    fn a_linked_spec_reads_its_paths_from_the_links_folder() {
        let tmp = tempfile::tempdir().unwrap();
        let (real, elsewhere) = (tmp.path().join("real"), tmp.path().join("elsewhere"));
        std::fs::create_dir_all(&real).unwrap();
        std::fs::create_dir_all(&elsewhere).unwrap();
        let text = "dataset D:\n    source = csv(\"d.csv\")\n    target = \"y\"\nmodel M:\n    input 2\n    dense 1 \
                    linear\ntrain:\n    loss = mse\n    epochs = 1\n";
        std::fs::write(real.join("spec.kyn"), text).unwrap();
        std::os::unix::fs::symlink(real.join("spec.kyn"), elsewhere.join("spec.kyn")).unwrap();
        let linked = SpecFile::load(&elsewhere.join("spec.kyn")).unwrap();
        assert_eq!(linked.resolve(Path::new("d.csv")), elsewhere.join("d.csv"));
        let direct = SpecFile::load(&real.join("spec.kyn")).unwrap();
        assert_eq!(direct.resolve(Path::new("d.csv")), real.join("d.csv"));
    }

    /// On the CPU the estimate is the engine's that runs: the native
    /// engine's buffers per row (not Burn's) and, the run's memory being
    /// the host's, the copies saving makes; Burn's engine on the CPU (a
    /// data-parallel run) is charged its own activations and the copies.
    #[test]
    fn the_cpu_estimate_is_the_running_engines_with_the_copies_saving_makes() {
        let file = |extra: &str| {
            let text = format!(
                "dataset D:\n    source = csv(\"d.csv\")\n    target = \"y\"\nmodel M:\n    input 10\n    dense 20 gelu\n    \
                 dense 1 linear\ntrain:\n    loss = mse\n    epochs = 1\n    batch = 8\n    optimizer = adam(lr=0.01){extra}\n"
            );
            SpecFile::from_source(Path::new("a.kyn"), text).unwrap()
        };
        // 6 validation rows: one pass, in buffers a batch of 8 has made.
        let native = file("").check_memory_for(&Device::cpu(), usize::MAX, 6).unwrap();
        // 10 -> 20 -> 1: 241 parameters. Per row: the input 10, gelu's
        // product and output 40, the last product 1, two gradient buffers of 20.
        assert_eq!(native.per_row, 4 * (10 + 40 + 1 + 40));
        assert_eq!(native.activations, 8 * native.per_row);
        assert_eq!((native.evaluation_rows, native.evaluation), (6, 6 * native.per_row));
        // The Burn model's copy of the weights; at the end, three copies.
        assert_eq!((native.copies, native.at_the_end), (4 * 241, 3 * 4 * 241));
        assert_eq!(native.total(), 4 * 241 * 2 + 8 * 241 + native.copies + native.activations);
        assert!(native.breakdown().contains(", copies to save 964 B,"), "{}", native.breakdown());
        assert!(!native.breakdown().contains("validation"), "{}", native.breakdown());
        // 100 validation rows: the network's buffers grow to a pass of 100
        // rows, more than a batch's; without the data, to a whole pass.
        let wide = file("").check_memory_for(&Device::cpu(), usize::MAX, 100).unwrap();
        assert_eq!((wide.evaluation_rows, wide.evaluation), (100, 100 * native.per_row));
        assert_eq!(wide.total(), native.total() - native.activations + wide.evaluation);
        assert!(wide.breakdown().contains("(a validation pass of 100 rows: 35.5 KiB)"), "{}", wide.breakdown());
        assert_eq!(file("").check_memory(&Device::cpu()).unwrap().evaluation_rows, 4096);
        assert_eq!(wide.batch_that_fits(wide.fixed() + 99 * wide.per_row), None, "the pass does not fit");
        assert_eq!(wide.batch_that_fits(wide.fixed() + 100 * wide.per_row), Some(100));
        let burn = file("\n    devices = [cpu, cpu]").check_memory(&Device::cpu()).unwrap();
        assert_eq!(burn.per_row, crate::train::memory::estimate(&file("").spec, Compute::Fp32).per_row);
        assert_eq!((burn.copies, burn.at_the_end), (0, 3 * 4 * 241));
        // Early stopping's best weights, and on the native engine the
        // largest weight (10 x 20) twice more while they are copied out.
        let stopping = "\n    early_stop = early_stop(patience=2)";
        assert_eq!(file(stopping).check_memory(&Device::cpu()).unwrap().best, 4 * 241 + 2 * 4 * 200);
        let burn = file(&format!("{stopping}\n    devices = [cpu, cpu]")).check_memory(&Device::cpu()).unwrap();
        assert_eq!(burn.best, 4 * 241);
        // A resumed run holds the checkpoint it read: on the host, counted.
        let resumed = file("").check_memory_resuming(&Device::cpu(), usize::MAX, 6, 5000).unwrap();
        assert_eq!((resumed.resumed, resumed.total()), (5000, native.total() + 5000));
        assert!(
            resumed.breakdown().contains(", the checkpoint resumed from 4.9 KiB, activations"),
            "{}",
            resumed.breakdown()
        );
        // The data's rows, held through the run, count on the host (a
        // million-row file was 270 MiB against an estimate of 6.6 MiB
        // without them), and not in a GPU's memory.
        let mut csv = String::from("x0,x1,x2,x3,x4,x5,x6,x7,x8,x9,y\n");
        for r in 0..1000 {
            csv += &format!("{}\n", (0..11).map(|c| ((r * 7 + c) % 13).to_string()).collect::<Vec<_>>().join(","));
        }
        let mut with_data = file("");
        let data = with_data.load_data_from(csv.as_bytes()).unwrap();
        // 1000 rows of 10 features, a target and a row number (8 bytes).
        assert_eq!(data.host_bytes(), 1000 * (10 * 4 + 4 + 8));
        let held = with_data.check_memory_on(&Device::cpu(), &data, 0).unwrap();
        let bare = with_data.check_memory_for(&Device::cpu(), data.train.len(), data.valid.len()).unwrap();
        assert_eq!((held.data, held.total()), (data.host_bytes(), bare.total() + data.host_bytes()));
        assert!(held.breakdown().contains(", the data's rows 50.8 KiB, activations"), "{}", held.breakdown());
        assert_eq!(with_data.check_memory_on(&lavapipe(), &data, 0).unwrap().data, 0);
        // The rows are read before the check, so the host's available memory
        // already leaves them out: rows as large as all of it are not
        // counted against it a second time.
        if let Some(available) = kynml_backend::proc_bytes("/proc/meminfo", "MemAvailable") {
            let e = with_data.check_memory_holding(&Device::cpu(), 800, 200, 0, available).unwrap();
            assert_eq!(e.data, available);
        }
    }

    /// Mesa's software Vulkan driver, as `kynml devices` describes it.
    fn lavapipe() -> Device {
        Device::described(DeviceKind::Wgpu(kynml_backend::WgpuAdapter {
            name: "llvmpipe".into(),
            driver: "mesa".into(),
            kind: kynml_backend::WgpuAdapterKind::Cpu,
            index_of_kind: 0,
            shader_f16: true,
        }))
    }

    /// A one-layer spec with these `train:` lines added.
    fn spec(train: &str) -> Spec {
        let text = format!(
            "dataset D:\n    source = csv(\"d.csv\")\n    target = \"y\"\nmodel M:\n    input 2\n    dense 1 linear\n\
             train:\n    loss = mse\n    epochs = 1\n{train}"
        );
        crate::spec::parse_spec(&text).expect("a valid spec")
    }

    /// Three or more replicas on one device sum in an order that changes
    /// from run to run: `deterministic` is marked there, not on two.
    #[test]
    fn deterministic_is_marked_with_three_replicas_on_one_device() {
        let on = |devices: &[Device]| {
            what_runs_on(&spec("    deterministic = true\n"), devices)
                .into_iter()
                .find(|a| a.setting == "deterministic")
                .unwrap()
        };
        let line = |n: usize| on(&vec![Device::cpu(); n]);
        for n in [1, 2] {
            assert!(line(n).as_requested && line(n).value.starts_with("yes"), "{n}: {:?}", line(n));
        }
        for n in [3, 4] {
            let l = line(n);
            assert!(
                !l.as_requested && l.value.starts_with(&format!("no: Burn's all-reduce adds the gradients of {n}"))
            );
        }
        // Two replicas on one device beside a third on another: the pair's
        // order still changes (a made-up mix: a real run takes one kind).
        let l = on(&[lavapipe(), Device::cpu(), Device::cpu()]);
        assert!(!l.as_requested && l.value.contains("3 replicas, some on one device"), "{l:?}");
        // Not asked for: said where the runs differ, as a fact of the run
        // (the docs promised the line; only `deterministic = true` had it).
        let unasked = |n: usize| {
            what_runs_on(&spec(""), &vec![Device::cpu(); n]).into_iter().find(|a| a.setting == "deterministic")
        };
        assert!(unasked(1).is_none() && unasked(2).is_none());
        let l = unasked(3).expect("said with three replicas");
        assert!(l.as_requested && l.value.starts_with("no: Burn's all-reduce adds the gradients of 3"), "{l:?}");
    }

    /// Fusion on a GPU backend is marked as not applied only where the
    /// spec wrote `compile = false`: left out, it asks nothing.
    #[test]
    fn fusion_is_marked_only_against_a_written_compile_false() {
        let lavapipe = lavapipe();
        let fusion =
            |train: &str| what_runs(&spec(train), &lavapipe).into_iter().find(|a| a.setting == "fusion").unwrap();
        let line = fusion("");
        assert!(line.as_requested && line.value.starts_with("on (Burn kernel fusion"), "{line:?}");
        // A written `compile = true` is answered by name.
        let line = fusion("    compile = true\n");
        assert!(line.as_requested && line.value.starts_with("on (compile = true: Burn kernel fusion"), "{line:?}");
        let native =
            what_runs(&spec("    compile = true\n"), &Device::cpu()).into_iter().find(|a| a.setting == "fusion");
        assert!(native.is_some_and(|l| l.value.starts_with("built in (compile = true: the native")));
        let line = fusion("    compile = false\n");
        assert!(!line.as_requested && line.value.contains("compile = false, but"), "{line:?}");
    }

    /// `loss_scale` written for a run without half-precision products is
    /// marked as not applied, where precision falls back and where fp32 is asked.
    #[test]
    fn loss_scaling_that_cannot_apply_is_marked() {
        let cpu = Device::cpu();
        let line = |train: &str| what_runs(&spec(train), &cpu).into_iter().find(|a| a.setting == "loss scale");
        for train in ["    precision = fp16\n    loss_scale = dynamic(init=1024)\n", "    loss_scale = dynamic\n"] {
            let marked = line(train).unwrap_or_else(|| panic!("no loss scale line for {train:?}"));
            assert!(!marked.as_requested && marked.value.contains("fp32"), "{marked:?}");
        }
        for train in ["    precision = fp16\n", "", "    loss_scale = none\n"] {
            assert_eq!(line(train), None, "{train:?}");
        }
    }

    #[test]
    fn checkpoints_past_the_runs_epochs_are_said_to_come_at_the_end_only() {
        let line_of = |every: usize, epochs: usize| {
            let text = format!(
                "dataset D:\n    source = csv(\"d.csv\")\n    target = \"y\"\nmodel M:\n    input 2\n    dense 1 linear\n\
                 train:\n    loss = mse\n    epochs = {epochs}\n    checkpoint = checkpoint(every_n={every}, path=\"c.ckpt\")\n"
            );
            let spec = crate::spec::parse_spec(&text).expect("a valid spec");
            what_runs(&spec, &Device::cpu()).into_iter().find(|a| a.setting == "checkpoints").unwrap().value
        };
        let line = |every: usize| line_of(every, 40);
        // One epoch in the singular (it said "the run's 1 epochs").
        assert!(
            line_of(10, 1).starts_with("at the end only (every_n = 10 is more than the run's 1 epoch)"),
            "{}",
            line_of(10, 1)
        );
        assert!(line(1).starts_with("every epoch and at the end to `c.ckpt`"), "{}", line(1));
        assert!(line(40).starts_with("every 40 epochs and at the end"), "{}", line(40));
        assert!(
            line(100).starts_with("at the end only (every_n = 100 is more than the run's 40 epochs)"),
            "{}",
            line(100)
        );
    }

    #[test]
    fn loader_workers_beyond_the_spare_cores_are_noted() {
        assert_eq!(crowding(1, 2), "");
        assert_eq!(crowding(4, 8), "");
        assert_eq!(crowding(7, 8), "");
        assert_eq!(crowding(4, 0), "", "cores unknown: nothing said");
        let note = crowding(8, 2);
        assert!(note.contains("(2 cores in all, one for the step, so 1 spare)"), "{note}");
        assert!(note.contains("num_workers = 1 may be faster"), "{note}");
        let one = crowding(1, 1);
        assert!(
            one.contains("(1 core in all, one for the step, so none spare)") && one.contains("num_workers = 0"),
            "{one}"
        );
    }

    /// The users' `prefetch` on its own prepares batches ahead, on one
    /// thread, as "what runs" says.
    #[test]
    fn a_prefetch_without_workers_is_applied() {
        let line = |dataset: &str| {
            let text = format!(
                "dataset D:\n    source = csv(\"d.csv\")\n    target = \"y\"\n{dataset}model M:\n    input 2\n    \
                 dense 1 linear\ntrain:\n    loss = mse\n    epochs = 1\n"
            );
            let spec = crate::spec::parse_spec(&text).expect("a valid spec");
            what_runs(&spec, &Device::cpu()).into_iter().find(|a| a.setting == "data loading").unwrap()
        };
        let ahead = line("    prefetch = 2\n");
        assert!(ahead.as_requested, "{}", ahead.value);
        assert_eq!(ahead.value, "one thread, up to 2 batches prepared ahead (num_workers = 0: one at a time)");
        assert_eq!(line("").value, "on the training thread");
        assert_eq!(line("    prefetch = 0\n").value, "on the training thread");
        assert!(line("    num_workers = 3\n    prefetch = 1\n")
            .value
            .starts_with("3 worker threads, up to 1 batch prepared"));
    }

    /// The rows of an accumulated step are their product, which no pair of
    /// written counts makes wrap; a step also ends with its epoch.
    #[test]
    fn an_accumulated_steps_rows_are_said_without_wrapping() {
        let line = |batch: &str, accumulate: &str| {
            let text = format!(
                "dataset D:\n    source = csv(\"d.csv\")\n    target = \"y\"\nmodel M:\n    input 2\n    dense 1 linear\n\
                 train:\n    loss = mse\n    epochs = 1\n    batch = {batch}\n    accumulate = {accumulate}\n"
            );
            let spec = crate::spec::parse_spec(&text).expect("a valid spec");
            what_runs(&spec, &Device::cpu()).into_iter().find(|a| a.setting == "accumulate").unwrap().value
        };
        assert!(line("16", "2").starts_with("2 batches of 16 per optimizer step (32 rows, or an epoch's"));
        let huge = line("256", "72057594037927936");
        assert!(huge.contains("(18446744073709551616 rows,"), "{huge}");
    }

    #[test]
    fn a_spec_with_classic_mac_line_ends_reads_as_with_lf() {
        let lf = "# iris\ndataset D:\n    source = csv(\"d.csv\")\n    target = \"y\"\nmodel M:\n    input 2\n    \
                  dense 1 linear\ntrain:\n    loss = mse\n    epochs = 3\n";
        let read = |text: String| SpecFile::from_source(Path::new("a.kyn"), text);
        let want = read(lf.into()).unwrap().spec;
        assert_eq!(read(lf.replace('\n', "\r")).unwrap().spec, want);
        // Kept byte for byte as written, for the run folder's copy.
        assert_eq!(read(lf.replace('\n', "\r")).unwrap().as_written(), lf.replace('\n', "\r"));
        assert_eq!(read(lf.replace('\n', "\r\n")).unwrap().as_written(), lf.replace('\n', "\r\n"));
        assert_eq!(read(lf.into()).unwrap().as_written(), lf);
        // CRLF reads alike (its spans count the `\r`s).
        assert_eq!(read(lf.replace('\n', "\r\n")).unwrap().spec.train.epochs.value, 3);
        // Errors in such a file are located on their line.
        let Err(LoadError::Spec { error, source_text, .. }) =
            read(lf.replace("epochs = 3", "epochs = x").replace('\n', "\r"))
        else {
            panic!("refused")
        };
        let at = error.diagnostics[0].span.start;
        assert_eq!(crate::spec::line_col(&source_text, at).0, 10);
        // A stray `\r` among `\n` lines ends its line too (it ran two lines
        // together: three problems, none about the `\r`).
        let stray = lf.replacen("D:\n", "D:\r", 1).replacen("csv\")\n", "csv\")\r", 1);
        assert_eq!(read(stray).unwrap().spec, want);
    }

    /// A service logs a load error with `{}` or `?`: its one line says where
    /// (file, line, column), and `render` gives the CLI's whole drawing.
    #[test]
    fn a_spec_errors_one_line_names_file_line_and_column() {
        let text = "dataset D:\n    source = csv(\"d.csv\")\n    target = \"y\"\nmodel M:\n    input 2\n    \
                    dense 1 linear\ntrain:\n    loss = mse\n    epochs = x\n";
        let Err(err) = SpecFile::from_source(Path::new("dir/a.kyn"), text.into()) else { panic!("refused") };
        let line = err.to_string();
        assert!(line.starts_with("dir/a.kyn:9:14: could not read spec: "), "{line}");
        let drawn = err.render();
        assert!(drawn.contains("epochs = x") && drawn.contains('^'), "{drawn}");
        // Problems found against the data: the spec was read whole, and
        // the line says it does not fit its data (it said "could not read").
        let classes = text
            .replace("epochs = x", "epochs = 2")
            .replace("loss = mse", "loss = cross_entropy")
            .replace("dense 1 linear", "dense 3 linear");
        let mut file = SpecFile::from_source(Path::new("dir/a.kyn"), classes).unwrap();
        let Err(err) = file.load_data_from(b"a,b,y\n1,2,p\n3,4,q\n5,6,p\n7,8,q\n1,1,p\n2,2,q\n") else {
            panic!("two classes for three outputs")
        };
        let line = err.to_string();
        assert!(line.starts_with("dir/a.kyn:") && line.contains(": the spec does not fit its data: "), "{line}");
        assert!(!line.contains("could not read"), "{line}");
    }

    /// A text dataset under a model whose `input 32` lost its `seq`: the
    /// hint keeps the model's own length (it offered `input seq 64`).
    #[test]
    fn a_text_models_missing_seq_is_said_with_its_length() {
        let text = |input: &str| {
            format!(
                "dataset D:\n    source = csv(\"d.csv\")\n    target = \"y\"\n    tokens = \"t\"\nmodel M:\n    \
                 {input}\n    dense 2 linear\ntrain:\n    loss = cross_entropy\n    epochs = 1\n"
            )
        };
        let csv = b"t,y\ngood film,a\nbad film,b\nfine,a\nawful,b\n";
        let hint = |input: &str| {
            let mut file = SpecFile::from_source(Path::new("a.kyn"), text(input)).unwrap();
            let Err(LoadError::Spec { error, .. }) = file.load_data_from(csv) else { panic!("no text input") };
            error.diagnostics[0].help.clone().unwrap()
        };
        let embedded = text("input 32\n    embedding 16\n    flatten");
        let mut file = SpecFile::from_source(Path::new("a.kyn"), embedded).unwrap();
        let Err(LoadError::Spec { error, .. }) = file.load_data_from(csv) else { panic!("no text input") };
        let help = error.diagnostics[0].help.clone().unwrap();
        assert_eq!(
            help,
            "declare the tokens per text: `input seq 32` (model `M` has `input 32`, which reads 32 plain features)"
        );
        assert!(hint("input 3").contains("`input seq 64`, then `embedding 32`"));
    }

    /// A data file with no data row, or too few to split, is said at the
    /// spec's `source` line, as a missing file is (it named the file alone).
    #[test]
    fn too_few_rows_are_said_at_the_source_line() {
        let text = "dataset D:\n    source = csv(\"d.csv\")\n    target = \"y\"\nmodel M:\n    input 2\n    \
                    dense 1 linear\ntrain:\n    loss = mse\n    epochs = 1\n";
        for (csv, said) in [
            (&b"a,b,y\n"[..], "no data: a header row and no data row below it"),
            (b"", "no data: the file is empty"),
            (b"a,b,y\n1,2,3\n", "1 data row but at least 2 are needed"),
        ] {
            let mut file = SpecFile::from_source(Path::new("dir/a.kyn"), text.into()).unwrap();
            let Err(err) = file.load_data_from(csv) else { panic!("too few rows") };
            let line = err.to_string();
            assert!(line.starts_with("dir/a.kyn:2:18: ") && line.contains(said), "{line}");
        }
    }

    /// A regression target whose epoch loss passes 32-bit floats from the
    /// first epoch is refused on every device (the native engine sums the
    /// loss in f64 and trained it; a GPU, summing an epoch's loss on the
    /// device in fp32, stopped early), at the loss, with the scaling that
    /// fits; targets whose sum stays within are not.
    #[test]
    fn a_target_whose_loss_passes_f32_is_refused_at_the_loss() {
        let text = |loss: &str| {
            format!(
                "dataset D:\n    source = csv(\"d.csv\")\n    target = \"y\"\n    split = 0.8\nmodel M:\n    input 1\n    \
                 dense 1 linear\ntrain:\n    loss = {loss}\n    batch = 8\n    epochs = 2\n"
            )
        };
        // 320 training rows: 1.7e18 squared is 2.9e36, 320 of them 9.5e38;
        // 5e17 squared is 2.5e35, 320 of them 8e37.
        let csv = |base: f64| -> String {
            std::iter::once("x,y\n".to_string())
                .chain((0..400).map(|i| format!("{i},{}\n", base + f64::from(i) * 1e14)))
                .collect()
        };
        let load = |loss: &str, base: f64| {
            SpecFile::from_source(Path::new("a.kyn"), text(loss)).unwrap().load_data_from(csv(base).as_bytes())
        };
        let Err(err) = load("mse", 1.7e18) else { panic!("320 squared errors of 2.9e36 pass f32") };
        let line = err.to_string();
        assert!(line.starts_with("a.kyn:9:12: the spec does not fit its data: "), "{line}");
        assert!(
            line.contains("the target `y` reaches 1.7e18 in size: over the first epoch the 320 training rows'"),
            "{line}"
        );
        assert!(line.contains("squared errors sum to about 9.5e38"), "{line}");
        let drawn = err.render();
        assert!(drawn.contains("loss = mse") && drawn.contains("divided by 1e15, it reaches about 1.7e3"), "{drawn}");
        assert!(load("mse", 5e17).is_ok(), "320 squared errors of 2.5e35 fit");
        assert!(load("mae", 1.7e18).is_ok(), "absolute errors of 1.7e18 fit");
        assert!(load("huber(delta=1.0)", 1.7e18).is_ok(), "Huber is linear out there");
    }
}
