//! A [`Table`] split into training and validation parts, ready for batching.
//!
//! Each part holds its own contiguous, row-major copy of the (standardized)
//! features, so a batch is a handful of `memcpy`s of whole rows into a buffer
//! the caller reuses from step to step.
//!
//! ```no_run
//! # use std::path::Path;
//! # use kynml_core::data::{read_csv, Batch, Dataset, Split, TableOptions};
//! let opts = TableOptions { target: "species".into(), classification: true, ..Default::default() };
//! let table = read_csv(Path::new("examples/iris/iris.csv"), &opts)?;
//! let data = Dataset::from_table(table, 0.8, true, 0)?;
//! let mut batch = Batch::default();
//! data.gather(Split::Train, &[0, 5, 7], &mut batch);
//! assert_eq!(batch.features.len(), 3 * data.n_features());
//! # Ok::<(), kynml_core::data::DataError>(())
//! ```

use crate::data::csv_table::{Table, Targets};
use crate::data::error::DataError;
use crate::data::info::DataInfo;
use crate::data::normalize::Normalizer;
use crate::data::split::split_indices;
use crate::data::vocab::{TokenVocabulary, Vocabulary};

/// Which part of the data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Split {
    /// The training part.
    Train,
    /// The held-out validation part.
    Valid,
}

/// Targets of a part or a batch, one per row.
#[derive(Debug, Clone, PartialEq)]
pub enum Labels {
    /// Regression targets, one number per row.
    Values(Vec<f32>),
    /// Indices into [`DataInfo::class_names`].
    Classes(Vec<u32>),
}

impl Default for Labels {
    fn default() -> Self {
        Labels::Values(Vec::new())
    }
}

impl Labels {
    /// The number of rows.
    pub fn len(&self) -> usize {
        match self {
            Labels::Values(v) => v.len(),
            Labels::Classes(c) => c.len(),
        }
    }

    /// True when there are no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keeps the first `n` rows.
    pub(crate) fn truncate(&mut self, n: usize) {
        match self {
            Labels::Values(v) => v.truncate(n),
            Labels::Classes(c) => c.truncate(n),
        }
    }

    /// Writes `self[i]` for each of `indices` into `out`, reusing its buffer
    /// when it already holds the same kind of label.
    fn gather_into(&self, indices: &[usize], out: &mut Labels) {
        match (self, out) {
            (Labels::Values(src), Labels::Values(dst)) => {
                dst.clear();
                dst.extend(indices.iter().map(|&i| src[i]));
            }
            (Labels::Classes(src), Labels::Classes(dst)) => {
                dst.clear();
                dst.extend(indices.iter().map(|&i| src[i]));
            }
            (src, dst) => {
                *dst = match src {
                    Labels::Values(_) => Labels::Values(Vec::with_capacity(indices.len())),
                    Labels::Classes(_) => Labels::Classes(Vec::with_capacity(indices.len())),
                };
                src.gather_into(indices, dst);
            }
        }
    }
}

/// The rows of one part of the data.
#[derive(Debug, Clone, PartialEq)]
pub struct SplitData {
    /// Which data rows of the file (0-based, header not counted) this part
    /// holds, in file order; position `p` below is row `rows[p]`.
    pub rows: Vec<usize>,
    /// `rows.len() × n_features`, row-major, standardized when asked.
    pub features: Vec<f32>,
    /// The targets of the part's rows, in the same order.
    pub labels: Labels,
}

impl SplitData {
    /// The number of rows in the part.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// True when the part holds no rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
}

/// A batch buffer, filled by [`Dataset::gather`]. Keep one per loop and
/// refill it: after the first step it does not allocate.
#[derive(Debug, Clone, Default)]
pub struct Batch {
    /// `len × n_features`, row-major.
    pub features: Vec<f32>,
    /// The targets of the batch's rows, in the same order.
    pub labels: Labels,
    /// Which loader worker gathered it, and when; `None` when the training
    /// thread did.
    pub prepared: Option<Prepared>,
}

/// Two batches are equal when they hold the same rows and targets, whoever
/// gathered them and when.
impl PartialEq for Batch {
    fn eq(&self, other: &Self) -> bool {
        self.features == other.features && self.labels == other.labels
    }
}

/// When and where a loader worker prepared a batch (for the profile's trace).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Prepared {
    /// The worker's index, `0..num_workers`.
    pub worker: usize,
    /// When it started gathering the batch.
    pub start: std::time::Instant,
    /// When the batch was ready.
    pub end: std::time::Instant,
}

impl Batch {
    /// The number of rows in the batch.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// True when the batch holds no rows.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// The batch cut into `n` runs of consecutive rows, in order, whose
    /// sizes differ by at most one, the larger first; with fewer rows than
    /// parts, the last parts are empty.
    pub fn split(self, n: usize) -> Vec<Batch> {
        let (rows, n) = (self.len(), n.max(1));
        let width = self.features.len().checked_div(rows).unwrap_or(0);
        // Part `i` ends after `i + 1` parts of `rows / n` rows and one more
        // row for each of the first `rows % n` parts.
        let bounds: Vec<usize> = (0..=n).map(|i| i * (rows / n) + i.min(rows % n)).collect();
        bounds
            .windows(2)
            .map(|w| {
                let (a, b) = (w[0], w[1]);
                let labels = match &self.labels {
                    Labels::Values(v) => Labels::Values(v[a..b].to_vec()),
                    Labels::Classes(c) => Labels::Classes(c[a..b].to_vec()),
                };
                Batch { features: self.features[a * width..b * width].to_vec(), labels, prepared: self.prepared }
            })
            .collect()
    }
}

/// A table split into training and validation parts, ready for batching.
#[derive(Debug, Clone, PartialEq)]
pub struct Dataset {
    /// What the run saves about the data: names, normalizer and split settings.
    pub info: DataInfo,
    /// The training part.
    pub train: SplitData,
    /// The held-out validation part.
    pub valid: SplitData,
    /// The numeric features whose numbers differ in the file but all read
    /// as one 32-bit float (a constant to the model), then the target where
    /// a regression target does: said by `train` and `check`.
    pub collapsed: Vec<String>,
}

/// The first value of `table` (a training or a validation row) that is a
/// number as read but not once normalised: `(x - mean) / std` past f32
/// would train on infinities (a NaN loss, or a NaN validation loss every
/// epoch) where `predict` refuses the same value. A sequence's NaN is its
/// padding, left alone.
fn beyond_f32(table: &Table, normalizer: &Normalizer) -> Result<(), DataError> {
    let width = normalizer.n_features();
    for (r, row) in table.features.chunks_exact(width).enumerate() {
        for (c, ((&x, &mean), &std)) in row.iter().zip(&normalizer.mean).zip(&normalizer.std).enumerate() {
            if x.is_finite() && !((x - mean) / std).is_finite() {
                return Err(DataError::Normalized {
                    path: table.path.clone(),
                    line: table.lines.get(r).map(|&l| l as usize),
                    column: table.feature_names[c].clone(),
                    value: x,
                    mean,
                    std,
                });
            }
        }
    }
    Ok(())
}

impl Dataset {
    /// The bytes its rows hold in memory: both parts' features, targets and
    /// row numbers (what a run keeps of the data through training).
    pub fn host_bytes(&self) -> u64 {
        let part = |p: &SplitData| {
            let labels = match &p.labels {
                Labels::Values(v) => std::mem::size_of_val(v.as_slice()),
                Labels::Classes(c) => std::mem::size_of_val(c.as_slice()),
            };
            std::mem::size_of_val(p.rows.as_slice()) + std::mem::size_of_val(p.features.as_slice()) + labels
        };
        (part(&self.train) + part(&self.valid)) as u64
    }

    /// Splits `table` with `seed` (see [`split_indices`]) and, if `normalize`
    /// is set, standardizes both parts with statistics of the training part
    /// alone.
    pub fn from_table(table: Table, train_fraction: f64, normalize: bool, seed: u64) -> Result<Dataset, DataError> {
        table.check()?;
        let (train_rows, valid_rows) = split_indices(table.n_rows(), train_fraction, seed)
            .map_err(|err| DataError::from_split(table.path.clone(), err))?;
        let mut train = take_rows(&table, train_rows)?;
        let mut valid = take_rows(&table, valid_rows)?;
        let categories = index_categories(&table, &mut train, &mut valid)?;
        let tokens = index_tokens(&table, &mut train, &mut valid)?;

        let normalizer = normalize.then(|| {
            let mut normalizer = match &table.sequence {
                Some(s) => Normalizer::fit_sequence(&train.features, s.length, s.channels()),
                None => Normalizer::fit(&train.features, table.n_features()),
            };
            // Category and token indices are names, not quantities: left as they are.
            let names = categories.iter().map(|v| v.position..v.position + 1);
            for p in names.chain(tokens.iter().map(|t| 0..t.length)).flatten() {
                (normalizer.mean[p], normalizer.std[p]) = (0.0, 1.0);
            }
            normalizer
        });
        if let Some(normalizer) = &normalizer {
            beyond_f32(&table, normalizer)?;
            normalizer.apply(&mut train.features);
            normalizer.apply(&mut valid.features);
        }
        let mut collapsed: Vec<String> = table.collapsed.iter().map(|&c| table.feature_names[c].clone()).collect();
        if table.target_collapsed {
            collapsed.push(table.target_name.clone());
        }
        let info = DataInfo {
            source: table.path,
            feature_names: table.feature_names,
            target: table.target_name,
            class_names: table.targets.class_names().map(<[String]>::to_vec),
            normalizer,
            categories,
            tokens,
            sequence: table.sequence,
            train_fraction,
            seed,
            train_rows: train.len(),
            valid_rows: valid.len(),
        };
        Ok(Dataset { info, train, valid, collapsed })
    }

    /// The number of feature columns.
    pub fn n_features(&self) -> usize {
        self.info.n_features()
    }

    /// `None` for regression.
    pub fn class_names(&self) -> Option<&[String]> {
        self.info.class_names.as_deref()
    }

    /// The normalizer fitted on the training part; `None` unless `normalize` was set.
    pub fn normalizer(&self) -> Option<&Normalizer> {
        self.info.normalizer.as_ref()
    }

    /// The part named by `split`.
    pub fn split(&self, split: Split) -> &SplitData {
        match split {
            Split::Train => &self.train,
            Split::Valid => &self.valid,
        }
    }

    /// Copies the rows at `indices` (positions within the part, `0..len`) of
    /// `split` into `batch`, replacing what it held.
    ///
    /// # Panics
    /// If an index is out of range for the part.
    pub fn gather(&self, split: Split, indices: &[usize], batch: &mut Batch) {
        let part = self.split(split);
        let width = self.n_features();
        batch.features.clear();
        batch.features.reserve(indices.len() * width);
        for &i in indices {
            batch.features.extend_from_slice(&part.features[i * width..(i + 1) * width]);
        }
        part.labels.gather_into(indices, &mut batch.labels);
    }
}

/// The vocabulary of each categorical column of `table`, from the training
/// rows alone, with the indices written into both parts' features.
fn index_categories(table: &Table, train: &mut SplitData, valid: &mut SplitData) -> Result<Vec<Vocabulary>, DataError> {
    let width = table.n_features();
    let mut out = Vec::with_capacity(table.categorical.len());
    for c in &table.categorical {
        let mut v = Vocabulary::fit(&c.name, c.position, train.rows.iter().map(|&r| c.cells[r].as_str()));
        // The largest index is the number of values (0 stands for unseen).
        check_indices(
            &table.path,
            &c.name,
            "values",
            v.values.len(),
            v.values.len(),
            "group its rare values, or leave the column out",
        )?;
        for (p, &r) in train.rows.iter().enumerate() {
            train.features[p * width + c.position] = v.index_or_unseen(&c.cells[r]) as f32;
        }
        for (p, &r) in valid.rows.iter().enumerate() {
            let index = v.index_or_unseen(&c.cells[r]);
            v.unseen_in_validation += usize::from(index == Vocabulary::UNSEEN);
            valid.features[p * width + c.position] = index as f32;
        }
        out.push(v);
    }
    Ok(out)
}

/// Refuses a vocabulary of `found` entries whose largest index, `largest`,
/// a 32-bit float cannot hold exactly (two entries would share a row of the
/// embedding, silently).
fn check_indices(
    path: &std::path::Path,
    column: &str,
    what: &'static str,
    found: usize,
    largest: usize,
    hint: &'static str,
) -> Result<(), DataError> {
    if largest <= crate::data::vocab::LARGEST_INDEX {
        return Ok(());
    }
    let most = found - (largest - crate::data::vocab::LARGEST_INDEX);
    Err(DataError::TooManyValues { path: path.into(), column: column.into(), what, found, most, hint })
}

/// The vocabulary of a text model's text, from the training rows alone,
/// with each row's token indices written into both parts' features.
fn index_tokens(
    table: &Table,
    train: &mut SplitData,
    valid: &mut SplitData,
) -> Result<Option<TokenVocabulary>, DataError> {
    let Some(text) = table.text.as_ref() else { return Ok(None) };
    let o = &text.options;
    let mut v =
        TokenVocabulary::fit(&o.column, o.length, train.rows.iter().map(|&r| text.cells[r].as_str()), o.vocab_limit);
    // Ids 0 and 1 are padding and unseen: the largest is the count plus 1.
    let n = v.tokens.len();
    check_indices(
        &table.path,
        &o.column,
        "tokens",
        n,
        n + 1,
        "keep the most frequent with `vocab = N` in the dataset",
    )?;
    let index = v.index();
    let (mut cut, mut empty) = ((0, 0), 0);
    for (p, &r) in train.rows.iter().enumerate() {
        let found = v.encode_with(&index, &text.cells[r], &mut train.features[p * o.length..(p + 1) * o.length]);
        found.count(o.length, &mut cut, &mut empty);
    }
    let mut unseen = 0;
    for (p, &r) in valid.rows.iter().enumerate() {
        let found = v.encode_with(&index, &text.cells[r], &mut valid.features[p * o.length..(p + 1) * o.length]);
        found.count(o.length, &mut cut, &mut empty);
        unseen += found.unseen;
    }
    drop(index);
    (v.unseen_in_validation, v.cut, v.empty) = (unseen, cut, empty);
    Ok(Some(v))
}

fn take_rows(table: &Table, rows: Vec<usize>) -> Result<SplitData, DataError> {
    let mut features = Vec::new();
    // A split that does not fit beside the table is an error, not an abort.
    if features.try_reserve_exact(rows.len().saturating_mul(table.n_features())).is_err() {
        let doing = format!("copying {} of its rows for training and validation", rows.len());
        return Err(crate::data::csv_table::out_of_memory(&table.path, doing));
    }
    for &r in &rows {
        features.extend_from_slice(table.row(r));
    }
    let labels = match &table.targets {
        Targets::Regression(values) => Labels::Values(rows.iter().map(|&r| values[r]).collect()),
        Targets::Classes { indices, .. } => Labels::Classes(rows.iter().map(|&r| indices[r]).collect()),
    };
    Ok(SplitData { rows, features, labels })
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::*;
    use crate::data::csv_table::{read_csv, TableOptions};

    /// Past 2^24 two indices read as one 32-bit float, and two categories
    /// (or tokens) would share an embedding row without a word: refused.
    #[test]
    fn a_vocabulary_past_what_float_indices_hold_is_refused() {
        let most = crate::data::vocab::LARGEST_INDEX;
        assert_eq!((most + 1) as f32, most as f32, "2^24 + 1 reads as 2^24");
        let p = std::path::Path::new("d.csv");
        assert!(check_indices(p, "city", "values", most, most, "h").is_ok());
        let e = check_indices(p, "city", "values", most + 1, most + 1, "group").unwrap_err().to_string();
        assert!(e.starts_with("d.csv: `city` holds 16777217 distinct values") && e.contains("the 16777216 a"), "{e}");
        // Tokens start at id 2: one fewer fits.
        assert!(check_indices(p, "text", "tokens", most - 1, most, "h").is_ok());
        let e = check_indices(p, "text", "tokens", most, most + 1, "vocab").unwrap_err().to_string();
        assert!(e.contains("16777216 distinct tokens") && e.contains("the 16777215 a") && e.ends_with("vocab"), "{e}");
    }

    /// `n` rows of two features: `[r, 100 - r²]` with target `2r` (or class `r % 3`).
    fn table(n: usize, classification: bool) -> Table {
        let features = (0..n).flat_map(|r| [r as f32, 100.0 - (r * r) as f32]).collect();
        let targets = if classification {
            Targets::Classes {
                indices: (0..n).map(|r| (r % 3) as u32).collect(),
                names: vec!["a".into(), "b".into(), "c".into()],
            }
        } else {
            Targets::Regression((0..n).map(|r| 2.0 * r as f32).collect())
        };
        Table {
            path: PathBuf::from("made/up.csv"),
            feature_names: vec!["r".into(), "s".into()],
            target_name: "y".into(),
            features,
            targets,
            categorical: Vec::new(),
            text: None,
            sequence: None,
            collapsed: Vec::new(),
            target_collapsed: false,
            lines: Vec::new(),
        }
    }

    #[test]
    fn parts_hold_their_rows_features_and_labels() {
        let t = table(20, false);
        let data = Dataset::from_table(t.clone(), 0.75, false, 3).unwrap();
        assert_eq!((data.train.len(), data.valid.len()), (15, 5));
        for part in [&data.train, &data.valid] {
            let Labels::Values(y) = &part.labels else { panic!() };
            for (p, &r) in part.rows.iter().enumerate() {
                assert_eq!(&part.features[p * 2..p * 2 + 2], t.row(r));
                assert_eq!(y[p], 2.0 * r as f32);
            }
        }
        let mut all: Vec<usize> = data.train.rows.iter().chain(&data.valid.rows).copied().collect();
        all.sort_unstable();
        assert_eq!(all, (0..20).collect::<Vec<_>>());
        assert_eq!(data.normalizer(), None);
        assert_eq!(data.class_names(), None);
    }

    #[test]
    fn same_seed_same_dataset() {
        let a = Dataset::from_table(table(50, true), 0.8, true, 11).unwrap();
        let b = Dataset::from_table(table(50, true), 0.8, true, 11).unwrap();
        let c = Dataset::from_table(table(50, true), 0.8, true, 12).unwrap();
        assert_eq!(a, b);
        assert_ne!(a.train.rows, c.train.rows);
    }

    /// A value that normalising takes past f32 is refused at its line: a
    /// validation row's far from the training rows' spread, or a training
    /// row's far on the other side of their mean. Without `normalize` it is read.
    #[test]
    fn a_value_normalised_past_f32_is_refused_at_its_line() {
        let (_, valid) = split_indices(20, 0.8, 5).unwrap();
        for r in 0..20 {
            let mut t = table(20, false);
            t.lines = (0..20).map(|i| 2 * i + 3).collect();
            for i in 0..20 {
                t.features[2 * i] = 0.01 * i as f32;
            }
            t.features[2 * r] = 3e38;
            let result = Dataset::from_table(t.clone(), 0.8, true, 5).map(drop);
            // In training it widens the spread with it, and stays finite.
            if !valid.contains(&r) {
                assert!(result.is_ok(), "row {r}: {result:?}");
                continue;
            }
            let err = result.unwrap_err();
            let DataError::Normalized { line, ref column, value, .. } = err else { panic!("{err}") };
            assert_eq!((line, column.as_str(), value), (Some(2 * r + 3), "r", 3e38), "{err}");
            let message = err.to_string();
            assert!(message.starts_with(&format!("made/up.csv:{}: `r` = 3e38 is beyond", 2 * r + 3)), "{message}");
            assert!(message.contains("training rows' mean 0.") && message.contains("spread 0.0"), "{message}");
            assert!(Dataset::from_table(t, 0.8, false, 5).is_ok());
        }
        // Training rows of -3e38 but three: the three lie 4.5e38 from the mean.
        let mut t = table(20, false);
        t.lines = (0..20).map(|i| i + 2).collect();
        for i in 0..20 {
            t.features[2 * i + 1] = if i % 7 == 0 { 3e38 } else { -3e38 };
        }
        let err = Dataset::from_table(t, 0.8, true, 5).map(drop).unwrap_err().to_string();
        assert!(err.starts_with("made/up.csv:2: `s` = 3e38 is beyond") && err.contains("mean -"), "{err}");
    }

    #[test]
    fn normalizer_sees_training_rows_only() {
        let t = table(40, false);
        let data = Dataset::from_table(t.clone(), 0.5, true, 0).unwrap();
        let norm = data.normalizer().unwrap();

        // Statistics of the training rows, worked out from the raw table.
        let train_raw: Vec<f32> = data.train.rows.iter().flat_map(|&r| t.row(r).to_vec()).collect();
        assert_eq!(norm, &Normalizer::fit(&train_raw, 2));
        // Those of all rows differ: the validation rows were left out.
        assert_ne!(norm.mean, Normalizer::fit(&t.features, 2).mean);

        // Training features come out centred and scaled; validation features
        // went through the same transform, not one of their own.
        let refit = Normalizer::fit(&data.train.features, 2);
        assert!(refit.mean.iter().all(|m| m.abs() < 1e-5), "{refit:?}");
        assert!(refit.std.iter().all(|s| (s - 1.0).abs() < 1e-5), "{refit:?}");
        let (p, r) = (0, data.valid.rows[0]);
        let expected = (t.row(r)[1] - norm.mean[1]) / norm.std[1];
        assert_eq!(data.valid.features[p * 2 + 1], expected);
    }

    #[test]
    fn gather_copies_rows_and_reuses_the_buffer() {
        let data = Dataset::from_table(table(30, true), 0.8, false, 1).unwrap();
        let mut batch = Batch::default();
        data.gather(Split::Valid, &[3, 0, 3], &mut batch);
        let v = &data.valid;
        let expected: Vec<f32> = [3, 0, 3].iter().flat_map(|&p| v.features[p * 2..p * 2 + 2].to_vec()).collect();
        assert_eq!(batch.features, expected);
        let Labels::Classes(all) = &v.labels else { panic!() };
        assert_eq!(batch.labels, Labels::Classes(vec![all[3], all[0], all[3]]));
        assert_eq!(batch.len(), 3);

        let (features_at, labels_at) = (
            batch.features.as_ptr(),
            match &batch.labels {
                Labels::Classes(c) => c.as_ptr(),
                Labels::Values(_) => unreachable!(),
            },
        );
        data.gather(Split::Train, &[5, 1], &mut batch);
        assert_eq!(batch.len(), 2);
        assert_eq!(&batch.features[2..4], &data.train.features[2..4]);
        assert_eq!(batch.features.as_ptr(), features_at);
        let Labels::Classes(c) = &batch.labels else { panic!() };
        assert_eq!(c.as_ptr(), labels_at);
    }

    #[test]
    fn gather_switches_label_kind() {
        let data = Dataset::from_table(table(10, false), 0.8, false, 1).unwrap();
        let mut batch = Batch { features: vec![], labels: Labels::Classes(vec![7]), prepared: None };
        data.gather(Split::Train, &[0], &mut batch);
        let Labels::Values(y) = &data.train.labels else { panic!() };
        assert_eq!(batch.labels, Labels::Values(vec![y[0]]));
    }

    #[test]
    fn one_row_is_too_few() {
        let err = Dataset::from_table(table(1, false), 0.8, false, 0).unwrap_err();
        let DataError::TooFewRows { path, rows, needed } = &err else { panic!("{err:?}") };
        assert_eq!((path.as_path(), *rows, *needed), (Path::new("made/up.csv"), 1, 2));
        assert_eq!(
            err.to_string(),
            "made/up.csv: 1 data row but at least 2 are needed to hold some out for validation"
        );
    }

    #[test]
    fn bad_fraction_is_refused() {
        let err = Dataset::from_table(table(10, false), 1.2, false, 0).unwrap_err();
        assert!(matches!(err, DataError::BadFraction { fraction } if fraction == 1.2), "{err:?}");
    }

    #[test]
    fn iris_end_to_end_and_info_round_trips() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/iris/iris.csv");
        let opts = TableOptions { target: "species".into(), classification: true, ..Default::default() };
        let data = Dataset::from_table(read_csv(&path, &opts).unwrap(), 0.8, true, 0).unwrap();
        assert_eq!((data.train.len(), data.valid.len()), (120, 30));
        assert_eq!(data.n_features(), 4);
        assert_eq!(data.info.n_classes(), Some(3));
        assert_eq!(data.info.target, "species");
        assert_eq!((data.info.train_rows, data.info.valid_rows), (120, 30));

        let text = serde_json::to_string_pretty(&data.info).unwrap();
        let back: DataInfo = serde_json::from_str(&text).unwrap();
        assert_eq!(back, data.info);
    }
}
