//! Reading a CSV file into a [`Table`]: numeric features and one target.
//!
//! The first line is the header. The target column is named by the spec;
//! every other column is a feature and must hold finite numbers. Cells are
//! trimmed of surrounding whitespace, a UTF-8 byte order mark (as Excel
//! writes) is ignored, and lines that are blank or only whitespace are
//! skipped (in training data; rows to predict keep one line each, so there
//! a blank line between rows is an error). A quote that is never closed is
//! an error where it opens. Every problem is reported with the line number an editor shows
//! (the header is line 1) and the 1-based column index and name.
//!
//! ```no_run
//! # use std::path::Path;
//! # use kynml_core::data::{read_csv, TableOptions};
//! let opts = TableOptions { target: "species".into(), classification: true, ..Default::default() };
//! let table = read_csv(Path::new("examples/iris/iris.csv"), &opts)?;
//! assert_eq!(table.n_features(), 4);
//! # Ok::<(), kynml_core::data::DataError>(())
//! ```

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use csv::ByteRecord;

use crate::data::error::{DataError, HeaderLayout};
use crate::data::vocab::{TokenVocabulary, Vocabulary};
use crate::spec::suggest;

/// What to read from the file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TableOptions {
    /// The column to predict.
    pub target: String,
    /// Class labels rather than numbers: the target may then hold strings or
    /// integers, which become class indices.
    pub classification: bool,
    /// Feature columns that hold categories (any text) rather than numbers.
    pub categorical: Vec<String>,
    /// The column holding a text: the only feature, which becomes
    /// `length` token positions.
    pub tokens: Option<TextOptions>,
    /// The columns holding sequences of numbers: the only features, which
    /// become `length` positions of one value per column.
    pub sequence: Option<SequenceColumns>,
}

/// A sequence model's columns: each cell holds numbers separated by spaces
/// (or commas or semicolons), one per position; the row's columns give the
/// values of each position in order. Rows are cut or padded to `length`
/// positions, padding NaN (the model reads it as absent).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SequenceColumns {
    /// The columns, in the order of each position's values.
    pub columns: Vec<String>,
    /// Positions per row.
    pub length: usize,
    /// Rows whose sequences were longer than `length` and cut, when read
    /// for training.
    #[serde(default)]
    pub cut: usize,
    /// The most positions any row held, when read for training.
    #[serde(default)]
    pub longest: usize,
    /// Rows whose sequence held no value (all padding), when read for
    /// training: said, since such a row trains on nothing but its target.
    #[serde(default)]
    pub empty: usize,
}

impl SequenceColumns {
    /// How a sequence model's reader is set up: nothing read yet.
    pub fn new(columns: Vec<String>, length: usize) -> Self {
        SequenceColumns { columns, length, cut: 0, longest: 0, empty: 0 }
    }

    /// Values per position.
    pub fn channels(&self) -> usize {
        self.columns.len()
    }

    /// The values of one row's sequence cells (`cells[c]` of column `c`),
    /// position by position, cut or NaN-padded to `length`, appended to
    /// `out`; returns how many positions the row held. `at(c)` locates
    /// column `c`'s cell for errors.
    fn read_row<'h>(
        &self,
        cells: &[&str],
        at: impl Fn(usize) -> (usize, &'h str, usize),
        path: &Path,
        out: &mut Vec<f32>,
    ) -> Result<usize, DataError> {
        let start = out.len();
        out.resize(start + self.length * self.channels(), f32::NAN);
        let mut held = None;
        for (c, cell) in cells.iter().enumerate() {
            let (line, name, column) = at(c);
            let mut n = 0;
            // Spaces separate values, any run of them; a comma or semicolon
            // separates two values, so `1,,3` and `,1` miss one (an error,
            // as an empty numeric cell is), not a shorter sequence. One at
            // the end (`1,2,3,`, as a loop that writes `v,` leaves) ends it.
            // A Python list as pandas writes a list column: `[1.0, 2.5]`.
            let cell = cell.trim();
            let cell = cell.strip_prefix('[').and_then(|c| c.strip_suffix(']')).unwrap_or(cell);
            let listed = cell.contains([',', ';']);
            let trimmed = cell.trim_end().strip_suffix([',', ';']).unwrap_or(cell);
            for part in trimmed.split([',', ';']) {
                let before = n;
                for item in part.split_whitespace() {
                    let value =
                        item.parse::<f32>().ok().filter(|v| v.is_finite()).ok_or_else(|| DataError::SequenceValue {
                            path: path.into(),
                            row: line,
                            column,
                            column_name: name.into(),
                            position: n + 1,
                            value: shown(item),
                        })?;
                    if n < self.length {
                        out[start + n * self.channels() + c] = value;
                    }
                    n += 1;
                }
                if listed && n == before {
                    return Err(DataError::SequenceGap {
                        path: path.into(),
                        row: line,
                        column,
                        column_name: name.into(),
                        position: n + 1,
                    });
                }
            }
            match held {
                None => held = Some((n, c)),
                Some((m, first)) if m != n => {
                    return Err(DataError::SequenceLengths {
                        path: path.into(),
                        row: line,
                        first: self.columns[first].clone(),
                        first_len: m,
                        other: self.columns[c].clone(),
                        other_len: n,
                    })
                }
                Some(_) => {}
            }
        }
        Ok(held.map_or(0, |(n, _)| n))
    }
}

/// How to read the text of a text model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextOptions {
    /// The column.
    pub column: String,
    /// Tokens per text.
    pub length: usize,
    /// Keep the most frequent tokens only, when given.
    pub vocab_limit: Option<usize>,
}

/// The texts of a text model's column, one per data row.
#[derive(Debug, Clone, PartialEq)]
pub struct TextCells {
    /// How it was read.
    pub options: TextOptions,
    /// One cell per data row, in file order.
    pub cells: Vec<String>,
}

/// What the model learns to predict, one entry per row.
#[derive(Debug, Clone, PartialEq)]
pub enum Targets {
    /// One number per row, for regression.
    Regression(Vec<f32>),
    /// `indices[row]` is a position in `names`. Names are sorted: integers
    /// numerically when every label is an integer (`2` before `10`; one
    /// class per value, `02` and `2` alike, named by its most frequent
    /// spelling), otherwise as strings, byte by byte (so `1.5` and `10`
    /// sort as text).
    Classes {
        /// One class index per row.
        indices: Vec<u32>,
        /// Every distinct label (whole numbers: every distinct value) once,
        /// sorted as above.
        names: Vec<String>,
    },
}

impl Targets {
    /// The number of rows.
    pub fn len(&self) -> usize {
        match self {
            Targets::Regression(values) => values.len(),
            Targets::Classes { indices, .. } => indices.len(),
        }
    }

    /// True when there are no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The class names, or `None` for a regression target.
    pub fn class_names(&self) -> Option<&[String]> {
        match self {
            Targets::Regression(_) => None,
            Targets::Classes { names, .. } => Some(names),
        }
    }
}

/// A whole CSV file in memory.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    /// The file it was read from, for error messages further on.
    pub path: PathBuf,
    /// Every column except the target, in file order.
    pub feature_names: Vec<String>,
    /// The name of the target column.
    pub target_name: String,
    /// `n_rows × n_features`, row-major.
    pub features: Vec<f32>,
    /// The target of every data row, in file order.
    pub targets: Targets,
    /// The cells of the categorical features, in feature order; their
    /// entries in `features` are 0 until a [`Vocabulary`] gives them indices.
    ///
    /// [`Vocabulary`]: crate::data::Vocabulary
    pub categorical: Vec<CategoryCells>,
    /// The text of a text model, whose token positions are all the
    /// features (0 until a [`TokenVocabulary`] gives them indices).
    ///
    /// [`TokenVocabulary`]: crate::data::TokenVocabulary
    pub text: Option<TextCells>,
    /// A sequence model's columns, with the rows it cut and the longest
    /// sequence seen; its positions are all the features.
    pub sequence: Option<SequenceColumns>,
    /// The numeric features (positions in `feature_names`) whose numbers
    /// differ as written but all read as one 32-bit float.
    pub collapsed: Vec<usize>,
    /// Whether a regression target's numbers differ as written but all read
    /// as one 32-bit float (the model would learn a constant).
    pub target_collapsed: bool,
    /// The line each data row starts on (1-based, as an editor counts), for
    /// errors found after reading; empty for a table not read from a file.
    /// 32 bits: 4 bytes a row beside a narrow file's values.
    pub lines: Vec<u32>,
}

/// The cells of one categorical column, trimmed, one per data row.
#[derive(Debug, Clone, PartialEq)]
pub struct CategoryCells {
    /// The column's name.
    pub name: String,
    /// Its position among the features (0-based).
    pub position: usize,
    /// One cell per data row, in file order.
    pub cells: Vec<String>,
}

impl Table {
    /// The number of data rows (header not counted).
    pub fn n_rows(&self) -> usize {
        self.targets.len()
    }

    /// The number of feature columns.
    pub fn n_features(&self) -> usize {
        self.feature_names.len()
    }

    /// Checks that a table built in code holds together as a file's does:
    /// `n_rows × n_features` feature values, every one a number (NaN only
    /// as a sequence's padding), a cell per row in each categorical and text
    /// column, class indices among the names. [`Dataset::from_table`] calls
    /// it.
    ///
    /// [`Dataset::from_table`]: crate::data::Dataset::from_table
    pub fn check(&self) -> Result<(), DataError> {
        let (rows, width) = (self.n_rows(), self.n_features());
        let wrong = |what: String| Err(DataError::Inconsistent { path: self.path.clone(), what });
        if self.features.len() != rows.saturating_mul(width) {
            return wrong(format!("{} feature values are not {rows} rows of {width} features", self.features.len()));
        }
        let padded = self.sequence.is_some();
        if let Some(i) = self.features.iter().position(|v| v.is_infinite() || (v.is_nan() && !padded)) {
            let name = self.feature_names.get(i % width.max(1)).map_or("?", String::as_str);
            return wrong(format!("row {} (0-based) holds {} in `{name}`", i / width.max(1), self.features[i]));
        }
        for c in &self.categorical {
            if c.cells.len() != rows || c.position >= width {
                return wrong(format!(
                    "categorical column `{}` has {} cells at position {} (rows: {rows}, features: {width})",
                    c.name,
                    c.cells.len(),
                    c.position
                ));
            }
        }
        if let Some(t) = self.text.as_ref().filter(|t| t.cells.len() != rows) {
            return wrong(format!("the text column has {} cells for {rows} rows", t.cells.len()));
        }
        match &self.targets {
            Targets::Classes { indices, names } if indices.iter().any(|&i| i as usize >= names.len()) => {
                wrong(format!("a class index is not below the {} class names", names.len()))
            }
            Targets::Regression(values) if values.iter().any(|v| !v.is_finite()) => {
                wrong("a regression target is not a finite number".into())
            }
            _ => Ok(()),
        }
    }

    /// The features of data row `index` (0-based, header not counted).
    pub fn row(&self, index: usize) -> &[f32] {
        let width = self.n_features();
        &self.features[index * width..(index + 1) * width]
    }
}

/// Reads `path`, which must have a header row and at least one data row.
pub fn read_csv(path: &Path, opts: &TableOptions) -> Result<Table, DataError> {
    read_csv_reporting(path, opts, &mut |_, _| {})
}

/// [`read_csv`], calling `report(done, total)` with the bytes parsed so far
/// now and then (every [`REPORT_EVERY`] rows, and once at the end), for a
/// progress bar over a large file.
pub fn read_csv_reporting(
    path: &Path,
    opts: &TableOptions,
    report: &mut dyn FnMut(u64, u64),
) -> Result<Table, DataError> {
    // The whole file in memory costs no more than the table built from it,
    // and lets `next_record` find the true line of each record.
    let bytes = read_data_file(path)?;
    parse_csv_reporting(path, &bytes, opts, report)
}

/// A data file's bytes, as every reader of rows takes them: refused unread
/// where it is a device ([`read_file`]), refused whole where it is
/// compressed ([`not_compressed`]).
pub(crate) fn read_data_file(path: &Path) -> Result<Vec<u8>, DataError> {
    let bytes = read_file(path)?;
    not_compressed(path, &bytes)?;
    Ok(bytes)
}

/// A data file's bytes. A device or a socket is refused unread (`/dev/zero`
/// never ends and filled memory); a named pipe is read, as `cat` reads one,
/// to its writer's end (`kynml predict RUN /dev/stdin` after `|`).
fn read_file(path: &Path) -> Result<Vec<u8>, DataError> {
    use std::io::Read;
    let (mut file, _) = open_data_file(path)?;
    let mut bytes = Vec::with_capacity(file.metadata().map_or(0, |m| m.len() as usize));
    file.read_to_end(&mut bytes).map_err(|source| DataError::Io { path: path.into(), source })?;
    Ok(bytes)
}

/// A data file opened to be read, as [`read_file`] reads one (a device or
/// a socket refused unread), and whether it is a named pipe, which may
/// never end.
pub fn open_data_file(path: &Path) -> Result<(std::fs::File, bool), DataError> {
    let kind = crate::atomic_file::special_kind(path);
    if let Some(kind) = kind.filter(|&k| k != crate::atomic_file::FIFO) {
        return Err(DataError::NotAFile { path: path.into(), kind });
    }
    let file = std::fs::File::open(path).map_err(|source| DataError::Io { path: path.into(), source })?;
    Ok((file, kind.is_some()))
}

/// A compressed file (gzip, zip, xz, zstd, bzip2) is said as such, with
/// the way to a CSV: read as text it is only "not valid UTF-8".
pub(crate) fn not_compressed(path: &Path, bytes: &[u8]) -> Result<(), DataError> {
    const KINDS: [(&[u8], &str, &str); 5] = [
        (b"\x1f\x8b", "gzip", "gunzip"),
        (b"PK\x03\x04", "zip", "unzip"),
        (b"\xfd7zXZ\x00", "xz", "unxz"),
        (b"\x28\xb5\x2f\xfd", "zstd", "unzstd"),
        (b"BZh", "bzip2", "bunzip2"),
    ];
    // bzip2's magic is text: its block size digit and block magic follow.
    let bzip2 = |b: &[u8]| b.len() >= 10 && b[3].is_ascii_digit() && b[4..10] == *b"\x31\x41\x59\x26\x53\x59";
    match KINDS.iter().find(|(magic, kind, _)| bytes.starts_with(magic) && (*kind != "bzip2" || bzip2(bytes))) {
        Some(&(_, kind, tool)) => Err(DataError::Compressed { path: path.into(), kind, tool }),
        None => Ok(()),
    }
}

/// Text saved as "Unicode text" (Excel, PowerShell) is UTF-16, which starts
/// with its byte-order mark: said as such, where read as UTF-8 it is only
/// "not valid UTF-8".
fn not_utf16(path: &Path, bytes: &[u8]) -> Result<(), DataError> {
    match bytes.starts_with(b"\xff\xfe") || bytes.starts_with(b"\xfe\xff") {
        true => Err(DataError::Utf16 { path: path.into() }),
        false => Ok(()),
    }
}

/// Rows parsed between two calls of a [`read_csv_reporting`] report.
pub const REPORT_EVERY: usize = 1024;

/// [`read_csv`] on the file's bytes, already read; `path` names the file in
/// errors.
pub fn parse_csv(path: &Path, bytes: &[u8], opts: &TableOptions) -> Result<Table, DataError> {
    parse_csv_reporting(path, bytes, opts, &mut |_, _| {})
}

/// [`parse_csv`] with [`read_csv_reporting`]'s reports.
pub fn parse_csv_reporting(
    path: &Path,
    bytes: &[u8],
    opts: &TableOptions,
    report: &mut dyn FnMut(u64, u64),
) -> Result<Table, DataError> {
    not_utf16(path, bytes)?;
    let ends = line_ends(bytes);
    let bytes = &*ends.bytes;
    let total = bytes.len() as u64;
    // Headers and ragged rows are handled here rather than by `csv`, so that
    // every error names the line as the user sees it.
    let mut reader = csv::ReaderBuilder::new().has_headers(false).flexible(true).from_reader(bytes);
    let mut record = ByteRecord::new();

    let Some(header_line) = next_record(&mut reader, &ends, &mut record, path)? else {
        return Err(DataError::Empty { path: path.into(), header: false, needed: crate::data::split::MIN_ROWS });
    };
    let header = header_names(&record, path, header_line)?;
    if !header.contains(&opts.target) && looks_like_data(&header) {
        return Err(DataError::NoHeader {
            path: path.into(),
            line: header_line,
            first: header,
            target: opts.target.clone(),
        });
    }
    check_named(&header, path, header_line)?;
    check_unique(&header, path)?;
    let target_col = header.iter().position(|name| *name == opts.target).ok_or_else(|| DataError::MissingTarget {
        path: path.into(),
        line: header_line,
        target: opts.target.clone(),
        suggestion: suggest::did_you_mean(&opts.target, header.iter().map(String::as_str)).map(str::to_owned),
        available: header.clone(),
    })?;
    if header.len() == 1 {
        return Err(DataError::NoFeatures { path: path.into(), target: opts.target.clone() });
    }
    // Categorical columns in file order, each with its feature position.
    // The header's column `name`, or an error naming `what` it was to hold.
    let column = |name: &String, what: &'static str| {
        header.iter().position(|h| h == name).ok_or_else(|| DataError::MissingCategorical {
            path: path.into(),
            name: name.clone(),
            what,
            suggestion: suggest::did_you_mean(name, header.iter().map(String::as_str)).map(str::to_owned),
        })
    };
    let mut categorical: Vec<(usize, CategoryCells)> = Vec::new();
    for name in &opts.categorical {
        let col = column(name, "categorical")?;
        if col == target_col {
            return Err(DataError::CategoricalTarget { path: path.into(), name: name.clone() });
        }
        let position = if col < target_col { col } else { col - 1 };
        categorical.push((col, CategoryCells { name: name.clone(), position, cells: Vec::new() }));
    }
    categorical.sort_by_key(|(col, _)| *col);
    let mut text = match &opts.tokens {
        None => None,
        Some(options) => {
            let name = &options.column;
            let col = column(name, "the text")?;
            if let Some((other, n)) = header.iter().enumerate().find(|(c, _)| *c != col && *c != target_col) {
                return Err(DataError::BesideText {
                    path: path.into(),
                    column: other + 1,
                    name: n.clone(),
                    text: name.clone(),
                });
            }
            Some((col, TextCells { options: options.clone(), cells: Vec::new() }))
        }
    };
    let mut sequence = match &opts.sequence {
        None => None,
        Some(s) => {
            let cols = s.columns.iter().map(|name| column(name, "a sequence")).collect::<Result<Vec<_>, _>>()?;
            if let Some((other, n)) = header.iter().enumerate().find(|(c, _)| !cols.contains(c) && *c != target_col) {
                return Err(DataError::BesideSequence {
                    path: path.into(),
                    column: other + 1,
                    name: n.clone(),
                    sequence: s.columns.join("`, `"),
                });
            }
            Some((cols, SequenceColumns::new(s.columns.clone(), s.length)))
        }
    };

    let mut features = Vec::new();
    let mut values = Vec::new();
    // Each row's label as the number of its spelling among those seen: a
    // String per row held ten times a large file's labels.
    let mut labels = Labelled::default();
    let mut rows = 0usize;
    let mut lines = Vec::new();
    let mut probes: Vec<Option<OneFloat>> = vec![None; header.len()];
    let named = names_words(&header);
    while let Some(line) = next_record(&mut reader, &ends, &mut record, path)? {
        rows += 1;
        let row_start = features.len();
        lines.push(u32::try_from(line).unwrap_or(u32::MAX));
        if rows.is_multiple_of(REPORT_EVERY) {
            report(reader.position().byte(), total);
        }
        check_width(&record, header.len(), path, line)?;
        check_not_header(&record, &header, named, path, line, header_line)?;
        if let Some((cols, s)) = &mut sequence {
            let cells = cols
                .iter()
                .map(|&col| cell_text(&record[col], path, line, col, Some(&header[col])))
                .collect::<Result<Vec<_>, _>>()?;
            let held = s.read_row(&cells, |c| (line, header[cols[c]].as_str(), cols[c] + 1), path, &mut features)?;
            s.cut += usize::from(held > s.length);
            s.empty += usize::from(held == 0);
            s.longest = s.longest.max(held);
        }
        for (col, raw) in record.iter().enumerate() {
            let cell = cell_text(raw, path, line, col, Some(&header[col]))?;
            let at = Cell { path, line, col, name: &header[col], text: cell };
            if sequence.as_ref().is_some_and(|(cols, _)| cols.contains(&col)) {
                continue;
            }
            if let Some((_, t)) = text.as_mut().filter(|(c, _)| *c == col) {
                t.cells.push(cell.to_owned());
                features.extend(std::iter::repeat_n(0.0, t.options.length));
            } else if let Some((_, c)) = categorical.iter_mut().find(|(c, _)| *c == col) {
                c.cells.push(cell.to_owned());
                features.push(0.0);
            } else if col != target_col {
                let x = at.number()?;
                OneFloat::probe(&mut probes[col], x, cell);
                features.push(x);
            } else if opts.classification {
                labels.push(at.label_text()?);
            } else {
                let hint = "; it is the target: for class labels use a classification loss (`loss = cross_entropy`)";
                let y = at.number().map_err(|e| e.with_hint(hint.into()))?;
                OneFloat::probe(&mut probes[col], y, cell);
                values.push(y);
            }
        }
        // Room for the next row, asked for, not assumed: a table that
        // outgrows memory is an error naming the file, where a growing
        // vector aborted the process.
        let width = features.len() - row_start;
        let room = features.try_reserve(width).is_ok()
            && lines.try_reserve(1).is_ok()
            && values.try_reserve(1).is_ok()
            && labels.ids.try_reserve(1).is_ok()
            && categorical.iter_mut().all(|(_, c)| c.cells.try_reserve(1).is_ok())
            && text.as_mut().is_none_or(|(_, t)| t.cells.try_reserve(1).is_ok());
        if !room {
            return Err(out_of_memory(path, format!("holding its first {rows} rows")));
        }
    }

    report(total, total);
    let targets = if opts.classification { labels.encode() } else { Targets::Regression(values) };
    if targets.is_empty() {
        return Err(DataError::Empty { path: path.into(), header: true, needed: crate::data::split::MIN_ROWS });
    }
    let mut feature_names = header;
    let target_name = feature_names.remove(target_col);
    let categorical = categorical.into_iter().map(|(_, c)| c).collect();
    let text = text.map(|(_, t)| {
        feature_names = (0..t.options.length).map(|i| format!("{}[{i}]", t.options.column)).collect();
        t
    });
    let sequence = sequence.map(|(_, s)| {
        feature_names = sequence_names(&s);
        s
    });
    let target_collapsed = probes[target_col].is_some_and(|p| p.collapsed());
    // Feature positions: the header's columns less the target.
    let collapsed = (probes.iter().enumerate())
        .filter(|(col, p)| *col != target_col && p.is_some_and(|p| p.collapsed()))
        .map(|(col, _)| if col < target_col { col } else { col - 1 })
        .collect();
    Ok(Table {
        path: path.into(),
        feature_names,
        target_name,
        features,
        targets,
        categorical,
        text,
        sequence,
        collapsed,
        target_collapsed,
        lines,
    })
}

/// The features of a sequence model: `signal[0]`, or `x[0]`, `y[0]`, `x[1]`...
pub fn sequence_names(s: &SequenceColumns) -> Vec<String> {
    (0..s.length).flat_map(|p| s.columns.iter().map(move |c| format!("{c}[{p}]"))).collect()
}

/// Rows for a trained model, read by column name: features in the model's
/// order, and the target column when the file has one.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelRows {
    /// The file the rows were read from, for error messages further on.
    pub path: PathBuf,
    /// `rows × feature_names.len()`, row-major, raw (not normalised).
    pub features: Vec<f32>,
    /// The number of data rows (header not counted).
    pub rows: usize,
    /// The 1-based line of each row in the file.
    pub lines: Vec<usize>,
    /// For a sequence or text model: the rows longer than its positions
    /// (their first positions are read), and the most positions (values or
    /// tokens) a row held.
    pub cut: (usize, usize),
    /// For a sequence or text model: the rows whose sequence or text held
    /// no value or token (read as all padding).
    pub empty: usize,
    /// The target cells, a row's at its index (its line in `lines`), when
    /// the rows were read to be scored and the file has the target column.
    pub targets: Option<Cells>,
    /// 1-based position of the target column (0 when there is none).
    pub target_column: usize,
    /// For each categorical column, the rows whose value the model never
    /// saw in training (they were given the reserved index): `(column, rows)`;
    /// for a text, the tokens it never saw.
    pub unseen: Vec<(String, usize)>,
}

impl ModelRows {
    /// These rows' counts and notes alone (no features, lines or targets):
    /// what a stream's parts add up for what is said of them all.
    pub fn clone_counts(&self) -> Self {
        ModelRows {
            path: self.path.clone(),
            features: Vec::new(),
            rows: self.rows,
            lines: Vec::new(),
            cut: self.cut,
            empty: self.empty,
            targets: None,
            target_column: self.target_column,
            unseen: self.unseen.clone(),
        }
    }

    /// Rows built in code: `rows` rows of the model's features, row-major,
    /// raw as a file holds them (category and token indices as
    /// [`Vocabulary::index_or_unseen`] and [`TokenVocabulary::encode`] give
    /// them). Errors name a row as `rows:N`, N counted from 1.
    pub fn from_features(features: Vec<f32>, rows: usize) -> Self {
        ModelRows {
            path: PathBuf::from("rows"),
            features,
            rows,
            lines: (1..=rows).collect(),
            cut: (0, 0),
            empty: 0,
            targets: None,
            target_column: 0,
            unseen: Vec::new(),
        }
    }

    /// These rows with their targets to score ([`Predictor::evaluate`]): a
    /// class label or a number, as text, a row's at its index.
    ///
    /// [`Predictor::evaluate`]: crate::predict::Predictor::evaluate
    pub fn with_targets<S: AsRef<str>>(mut self, targets: impl IntoIterator<Item = S>) -> Self {
        self.targets = Some(targets.into_iter().collect());
        self.target_column = self.target_column.max(1);
        self
    }
}

/// Reads `path` for a model trained on `feature_names` to predict `target`.
/// Every feature column must be present (in any order), no other column
/// may be, except `target`, which must be there when `need_target` is set.
/// The columns of `categories` hold text, turned into the vocabulary's
/// indices (a value it lacks becomes [`Vocabulary::UNSEEN`] and is counted).
/// Errors are located like [`read_csv`]'s.
pub fn read_model_rows(
    path: &Path,
    feature_names: &[String],
    categories: &[Vocabulary],
    tokens: Option<&TokenVocabulary>,
    sequence: Option<&SequenceColumns>,
    target: &str,
    need_target: bool,
) -> Result<ModelRows, DataError> {
    let bytes = read_data_file(path)?;
    parse_model_rows(&bytes, path, feature_names, categories, tokens, sequence, target, need_target)
}

/// [`read_model_rows`] on CSV text held in memory (a request's body);
/// `path` only names it in errors.
#[allow(clippy::too_many_arguments)]
pub fn parse_model_rows(
    bytes: &[u8],
    path: &Path,
    feature_names: &[String],
    categories: &[Vocabulary],
    tokens: Option<&TokenVocabulary>,
    sequence: Option<&SequenceColumns>,
    target: &str,
    need_target: bool,
) -> Result<ModelRows, DataError> {
    let shift = (usize::MAX, 0);
    parse_model_rows_at(bytes, path, feature_names, categories, tokens, sequence, target, need_target, shift)
}

/// [`parse_model_rows`] on a piece of a file ([`Piece`](super::Piece)): the records
/// from byte `shift.0` on are `shift.1` lines further on in the file.
#[allow(clippy::too_many_arguments)]
pub(crate) fn parse_model_rows_at(
    bytes: &[u8],
    path: &Path,
    feature_names: &[String],
    categories: &[Vocabulary],
    tokens: Option<&TokenVocabulary>,
    sequence: Option<&SequenceColumns>,
    target: &str,
    need_target: bool,
    shift: (usize, usize),
) -> Result<ModelRows, DataError> {
    not_utf16(path, bytes)?;
    // A text model reads one column, its text; a sequence model its sequence columns.
    let text_column;
    let feature_names = match (tokens, sequence) {
        (Some(t), _) => {
            text_column = vec![t.column.clone()];
            &text_column[..]
        }
        (None, Some(s)) => &s.columns[..],
        (None, None) => feature_names,
    };
    let mut ends = line_ends(bytes);
    ends.shift = shift;
    let mut reader = csv::ReaderBuilder::new().has_headers(false).flexible(true).from_reader(&*ends.bytes);
    let mut record = ByteRecord::new();
    let Some(header_line) = next_record(&mut reader, &ends, &mut record, path)? else {
        return Err(DataError::Empty { path: path.into(), header: false, needed: 1 });
    };
    let header = header_names(&record, path, header_line)?;
    // A column with no name (a pandas index saved without `index=False`, a
    // trailing comma) is passed over: the model's columns are read by name.
    let named = |name: &String| !name.is_empty();
    check_unique(&header, path)?;
    // Each name's column (the names are unique): found by hash, as wide
    // files have tens of thousands of columns.
    let at: std::collections::HashMap<&str, usize> =
        header.iter().enumerate().map(|(col, name)| (name.as_str(), col)).collect();
    let mut columns = Vec::with_capacity(feature_names.len());
    for name in feature_names {
        match at.get(name.as_str()) {
            Some(&col) => columns.push(col),
            None => {
                let model: std::collections::HashSet<&str> = feature_names.iter().map(String::as_str).collect();
                let known = header.iter().map(String::as_str).filter(|h| !model.contains(h));
                return Err(DataError::MissingColumn {
                    path: path.into(),
                    name: name.clone(),
                    count: feature_names.len(),
                    suggestion: suggest::did_you_mean(name, known).map(str::to_owned),
                    layout: if no_header(&header, feature_names, target) {
                        // The header to put first: the inputs, and the target
                        // where the line has a cell for it.
                        let mut names = feature_names.to_vec();
                        if header.len() == names.len() + 1 {
                            names.push(target.to_string());
                        }
                        Some(HeaderLayout::Numbers(names.join(",")))
                    } else {
                        (header.len() == 1 && header[0].contains([';', '\t', '|']))
                            .then(|| HeaderLayout::OneColumn(header[0].clone()))
                    },
                });
            }
        }
    }
    let target_col = header.iter().position(|h| h == target);
    let mut read = vec![false; header.len()];
    for &col in &columns {
        read[col] = true;
    }
    if let Some((col, name)) =
        header.iter().enumerate().find(|(col, name)| !read[*col] && Some(*col) != target_col && named(name))
    {
        return Err(DataError::ExtraColumn {
            path: path.into(),
            column: col + 1,
            name: name.clone(),
            target: target.into(),
        });
    }
    if need_target && target_col.is_none() {
        return Err(DataError::MissingTarget {
            path: path.into(),
            line: header_line,
            target: target.into(),
            suggestion: None,
            available: header.clone(),
        });
    }

    let (mut features, mut targets, mut rows, mut lines) = (Vec::new(), Cells::default(), 0, Vec::new());
    let mut cut = (0, 0);
    let mut empty = 0;
    let vocab: Vec<Option<&Vocabulary>> =
        (0..columns.len()).map(|p| categories.iter().find(|v| v.position == p)).collect();
    let mut unseen = vec![0usize; columns.len()];
    let token_index = tokens.map(TokenVocabulary::index);
    // Predictions are written one line a row, in order; `eval` (which needs
    // the target) only sums the rows, so it skips blank lines as training does.
    let next = |reader: &mut csv::Reader<&[u8]>, record: &mut ByteRecord| match need_target {
        true => next_record(reader, &ends, record, path),
        false => next_row(reader, &ends, record, path, header.len()),
    };
    let named = names_words(&header);
    while let Some(line) = next(&mut reader, &mut record)? {
        check_width(&record, header.len(), path, line)?;
        check_not_header(&record, &header, named, path, line, header_line)?;
        if let Some(s) = sequence {
            let cells = columns
                .iter()
                .map(|&col| cell_text(&record[col], path, line, col, Some(&header[col])))
                .collect::<Result<Vec<_>, _>>()?;
            let held =
                s.read_row(&cells, |c| (line, header[columns[c]].as_str(), columns[c] + 1), path, &mut features)?;
            cut = (cut.0 + usize::from(held > s.length), cut.1.max(held));
            empty += usize::from(held == 0);
        }
        // A sequence's cells are read above, whole.
        let plain = if sequence.is_some() { &[][..] } else { &columns[..] };
        for (p, &col) in plain.iter().enumerate() {
            let text = cell_text(&record[col], path, line, col, Some(&header[col]))?;
            if let (Some(t), Some(index)) = (tokens, &token_index) {
                let at = features.len();
                features.resize(at + t.length, 0.0);
                let found = t.encode_with(index, text, &mut features[at..]);
                found.count(t.length, &mut cut, &mut empty);
                unseen[p] += found.unseen;
                continue;
            }
            match vocab[p] {
                Some(v) => {
                    let index = v.index_or_unseen(text);
                    unseen[p] += usize::from(index == Vocabulary::UNSEEN);
                    features.push(index as f32);
                }
                // The model was trained on numbers here: no categorical
                // hint, but a missing value is said as one.
                None => features.push(Cell { path, line, col, name: &header[col], text }.number().map_err(|e| {
                    let missing = text.is_empty() || looks_missing(text);
                    e.with_hint(if missing {
                        MISSING_TO_PREDICT.into()
                    } else {
                        decimal_comma_hint(text).unwrap_or_default()
                    })
                })?),
            }
        }
        // Predictions need no target: a file of millions of rows keeps none.
        if let Some(col) = target_col.filter(|_| need_target) {
            targets.push(cell_text(&record[col], path, line, col, Some(&header[col]))?);
        }
        rows += 1;
        lines.push(line);
    }
    if rows == 0 {
        return Err(DataError::Empty { path: path.into(), header: true, needed: 1 });
    }
    let target_column = target_col.map_or(0, |c| c + 1);
    let unseen = match tokens {
        Some(t) => vec![(t.column.clone(), unseen[0])],
        None => vocab.iter().zip(unseen).filter_map(|(v, n)| v.map(|v| (v.column.clone(), n))).collect(),
    };
    let unseen = unseen.into_iter().filter(|(_, n)| *n > 0).collect();
    let targets = target_col.filter(|_| need_target).map(|_| targets);
    Ok(ModelRows { path: path.into(), features, rows, lines, cut, empty, targets, target_column, unseen })
}

/// Text cells, one a row, in one buffer: a column of millions of rows
/// holds no string (and allocation) per row.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cells {
    text: String,
    ends: Vec<usize>,
}

impl Cells {
    /// Adds a row's cell.
    pub fn push(&mut self, cell: &str) {
        self.text.push_str(cell);
        self.ends.push(self.text.len());
    }

    /// The number of cells.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Row `i`'s cell.
    pub fn get(&self, i: usize) -> Option<&str> {
        let end = *self.ends.get(i)?;
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        Some(&self.text[start..end])
    }

    /// The cells in row order.
    pub fn iter(&self) -> impl Iterator<Item = &str> {
        (0..self.len()).filter_map(|i| self.get(i))
    }
}

impl<S: AsRef<str>> FromIterator<S> for Cells {
    fn from_iter<I: IntoIterator<Item = S>>(cells: I) -> Self {
        let mut out = Cells::default();
        cells.into_iter().for_each(|c| out.push(c.as_ref()));
        out
    }
}

/// Reads the next record that is not a blank line from `reader`, which reads
/// `bytes`; returns the record's line number. A record that a never-closed
/// quote runs on to the end of the file is an error at that quote.
fn next_record(
    reader: &mut csv::Reader<&[u8]>,
    ends: &LineEnds<'_>,
    record: &mut ByteRecord,
    path: &Path,
) -> Result<Option<usize>, DataError> {
    let bytes = &*ends.bytes;
    loop {
        let more =
            reader.read_byte_record(record).map_err(|err| DataError::Io { path: path.into(), source: err.into() })?;
        if !more {
            return Ok(None);
        }
        let blank = record.len() == 1 && record[0].iter().all(u8::is_ascii_whitespace);
        if !blank {
            let line = record.position().map_or(0, |p| true_line(ends, p));
            check_quotes(reader, bytes, record, path, line)?;
            return Ok(Some(line));
        }
    }
}

/// A row of a file whose rows each get one output line, in order
/// (`predict`, `eval`): as [`next_record`], except that a blank line before
/// a row is an error rather than skipped, and in a file of `width` 1 a quoted
/// empty cell (`""`) is a row. Blank lines at the end of the file are fine.
fn next_row(
    reader: &mut csv::Reader<&[u8]>,
    ends: &LineEnds<'_>,
    record: &mut ByteRecord,
    path: &Path,
    width: usize,
) -> Result<Option<usize>, DataError> {
    let bytes = &*ends.bytes;
    let mut blank_at = None;
    loop {
        let more =
            reader.read_byte_record(record).map_err(|err| DataError::Io { path: path.into(), source: err.into() })?;
        if !more {
            return Ok(None);
        }
        let Some(position) = record.position().cloned() else { continue };
        let line = true_line(ends, &position);
        // `csv` itself passes over empty lines: they are the line breaks
        // where it began reading, less the `\n` that ends the last line's
        // `\r\n` (where `csv` stops reading a line).
        let (start, run) = breaks_before(bytes, &position);
        let mut breaks = run;
        if start > 0 && bytes[start - 1] == b'\r' && breaks.first() == Some(&b'\n') {
            breaks = &breaks[1..];
        }
        let empty = breaks.iter().filter(|&&b| b == b'\n').count();
        if empty > 0 {
            blank_at.get_or_insert(line - empty);
        }
        let blank = record.len() == 1 && record[0].iter().all(u8::is_ascii_whitespace);
        // The record's own text: past every break `csv` passed over,
        // the `\n` of a `\r\n` included. Its end is the next break of
        // either kind, so a CR-only file's line is one line.
        let rest = &bytes[start + run.len()..];
        let rest = &rest[..rest.iter().position(|&b| b == b'\n' || b == b'\r').unwrap_or(rest.len())];
        let quoted = rest.contains(&b'"');
        if blank && !(width == 1 && quoted) {
            blank_at.get_or_insert(line);
            continue;
        }
        if let Some(row) = blank_at {
            return Err(DataError::BlankRow { path: path.into(), row, single: width == 1 });
        }
        check_quotes(reader, bytes, record, path, line)?;
        return Ok(Some(line));
    }
}

/// The `csv` reader is lenient: a quote that is never closed takes the rest
/// of the file into one cell. Such a cell holds a line break, or ends the
/// file; only then is the record scanned, from its first byte.
fn check_quotes(
    reader: &csv::Reader<&[u8]>,
    bytes: &[u8],
    record: &ByteRecord,
    path: &Path,
    line: usize,
) -> Result<(), DataError> {
    let at_end = usize::try_from(reader.position().byte()).map_or(true, |b| b >= bytes.len());
    if !at_end && !record.iter().any(|cell| cell.contains(&b'\n') || cell.contains(&b'\r')) {
        return Ok(());
    }
    let Some(position) = record.position() else { return Ok(()) };
    let (start, breaks) = breaks_before(bytes, position);
    match unclosed_quote(&bytes[start + breaks.len()..]) {
        Some((lines, column)) => Err(DataError::UnclosedQuote { path: path.into(), row: line + lines, column }),
        None => Ok(()),
    }
}

/// Scans one record from its first byte, by the CSV rules `csv` follows:
/// where a quoted cell opens that the bytes end inside of, as (lines after
/// the record's first, 1-based column).
fn unclosed_quote(bytes: &[u8]) -> Option<(usize, usize)> {
    let (mut i, mut lines, mut column, mut cell_start) = (0, 0, 1, true);
    while i < bytes.len() {
        match bytes[i] {
            b'"' if cell_start => {
                let opened = (lines, column);
                i += 1;
                loop {
                    match bytes.get(i) {
                        None => return Some(opened),
                        Some(b'"') if bytes.get(i + 1) == Some(&b'"') => i += 2,
                        Some(b'"') => break,
                        Some(b'\n') => {
                            lines += 1;
                            i += 1;
                        }
                        Some(_) => i += 1,
                    }
                }
                cell_start = false;
            }
            b',' => {
                column += 1;
                cell_start = true;
            }
            b'\n' => return None,
            _ => cell_start = false,
        }
        i += 1;
    }
    None
}

/// A file's bytes as `csv` reads them ([`line_ends`]), and where a quoted
/// cell's own line ends that `csv` does not count (lone `\r`s) fall.
pub(crate) struct LineEnds<'a> {
    /// The file, every line end outside quoted cells a `\n` or `\r\n`.
    pub bytes: std::borrow::Cow<'a, [u8]>,
    /// Offsets in `bytes` of the lone `\r`s inside quoted cells: a line
    /// each to a person's editor, none to `csv`.
    quoted: Vec<usize>,
    /// Records that start at this byte or later are this many lines further
    /// on in the file (a piece of a file read with its header before it:
    /// [`RowPieces`]); `(usize::MAX, 0)` for a whole file.
    shift: (usize, usize),
}

impl LineEnds<'_> {
    /// The lines before byte `at` that `csv` does not count.
    fn uncounted_before(&self, at: usize) -> usize {
        self.quoted.partition_point(|&q| q < at)
    }
}

/// Every line end of `bytes` outside quoted cells as `\n`, when the file
/// has a `\r` there that does not end a `\r\n`: `csv` splits lines at a
/// lone `\r` but counts only `\n` as a new line, so rows after one would be
/// located on the wrong line, and blank lines there go unseen.
/// - a lone `\r` ends a line (classic Mac OS and Excel for Mac end rows so,
///   and it may stray into a file of `\n`s); `\r\r` is a blank line;
/// - `\r\r\n` ends one line: what Python's `csv.writer` writes on Windows to
///   a file opened without `newline=''` (pandas reads it as one line end);
///   each `\r` more before it is one more (`\r\r\r\n` holds a blank line).
///
/// A quoted cell (one whose first byte is `"`, as `csv` takes them) keeps
/// its bytes, as pandas reads them; its lone `\r`s are counted as lines for
/// errors. Files that need no change are read without a copy.
pub(crate) fn line_ends(bytes: &[u8]) -> LineEnds<'_> {
    let mut quoted = Vec::new();
    if line_breaks(bytes).0 == 0 {
        return LineEnds { bytes: std::borrow::Cow::Borrowed(bytes), quoted, shift: (usize::MAX, 0) };
    }
    if !rewrite_line_ends(bytes, None, &mut quoted) {
        return LineEnds { bytes: std::borrow::Cow::Borrowed(bytes), quoted, shift: (usize::MAX, 0) };
    }
    let mut out = Vec::with_capacity(bytes.len());
    quoted.clear();
    rewrite_line_ends(bytes, Some(&mut out), &mut quoted);
    LineEnds { bytes: std::borrow::Cow::Owned(out), quoted, shift: (usize::MAX, 0) }
}

/// [`line_ends`]' pass: writes the file to `out`, or, without one, stops at
/// the first byte it would change; notes in `quoted` where the lone `\r`s
/// of quoted cells fall in the output. Whether anything changes.
fn rewrite_line_ends(bytes: &[u8], mut out: Option<&mut Vec<u8>>, quoted: &mut Vec<usize>) -> bool {
    let (mut i, mut written, mut in_quotes, mut cell_start, mut changed) = (0, 0, false, true, false);
    while i < bytes.len() {
        let b = bytes[i];
        let run = || bytes[i..].iter().take_while(|&&b| b == b'\r').count();
        // What `bytes[i..i + used]` becomes.
        let (emit, used): (&[u8], usize) = if in_quotes {
            match b {
                b'"' if bytes.get(i + 1) == Some(&b'"') => (b"\"\"", 2),
                b'"' => {
                    in_quotes = false;
                    (b"\"", 1)
                }
                b'\r' => {
                    // Kept; each `\r` of a run that no `\n` ends is a line.
                    let k = run();
                    if bytes.get(i + k) != Some(&b'\n') {
                        quoted.extend((0..k).map(|j| written + j));
                    }
                    (&bytes[i..i + k], k)
                }
                _ => (&bytes[i..=i], 1),
            }
        } else {
            let start = std::mem::replace(&mut cell_start, matches!(b, b',' | b'\n' | b'\r'));
            match b {
                b'"' if start => {
                    in_quotes = true;
                    (b"\"", 1)
                }
                b'\r' => {
                    let k = run();
                    match (k, bytes.get(i + k) == Some(&b'\n')) {
                        // `\r\n` as it is; `\r\r\n` one line end too.
                        (1, true) => (&bytes[i..i + 2], 2),
                        (2, true) => (b"\r\n", 3),
                        // Every other `\r` ends a line (those before a
                        // `\r\r\n` too), a few at a time.
                        (k, ended) => {
                            let lone = if ended { k - 2 } else { k };
                            let take = lone.min(NEWLINES.len());
                            (&NEWLINES[..take], take)
                        }
                    }
                }
                _ => (&bytes[i..=i], 1),
            }
        };
        if emit != &bytes[i..i + used] {
            changed = true;
        }
        match out.as_deref_mut() {
            Some(out) => out.extend_from_slice(emit),
            None if changed => return true,
            None => {}
        }
        written += emit.len();
        i += used;
    }
    changed
}

/// Line ends for a run of lone `\r`s, a few at a time.
const NEWLINES: &[u8] = b"\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n";

/// The `\r`s not followed by `\n`, and the `\n`s, of `bytes`.
pub(crate) fn line_breaks(bytes: &[u8]) -> (usize, usize) {
    let lone =
        bytes.windows(2).filter(|w| w[0] == b'\r' && w[1] != b'\n').count() + usize::from(bytes.last() == Some(&b'\r'));
    (lone, bytes.iter().filter(|&&b| b == b'\n').count())
}

/// `csv` gives a record the position where it started reading, which is
/// before any empty lines it skipped on the way; count those too.
fn true_line(ends: &LineEnds<'_>, position: &csv::Position) -> usize {
    let (start, breaks) = breaks_before(&ends.bytes, position);
    let line = position.line() as usize + breaks.iter().filter(|&&b| b == b'\n').count() + ends.uncounted_before(start);
    // Its own first byte: `csv` may start a record at the `\n` of the
    // `\r\n` before it.
    if start + breaks.len() >= ends.shift.0 {
        line + ends.shift.1
    } else {
        line
    }
}

/// Where `csv` began reading a record, and the run of line breaks there
/// that it passed over before the record's first byte.
fn breaks_before<'a>(bytes: &'a [u8], position: &csv::Position) -> (usize, &'a [u8]) {
    let start = usize::try_from(position.byte()).unwrap_or(bytes.len()).min(bytes.len());
    let run = bytes[start..].iter().take_while(|&&b| b == b'\n' || b == b'\r').count();
    (start, &bytes[start..start + run])
}

/// A data row must have as many cells as the header.
fn check_width(record: &ByteRecord, expected: usize, path: &Path, line: usize) -> Result<(), DataError> {
    if record.len() == expected {
        return Ok(());
    }
    Err(DataError::Ragged { path: path.into(), row: line, expected, found: record.len() })
}

fn header_names(record: &ByteRecord, path: &Path, line: usize) -> Result<Vec<String>, DataError> {
    const BOM: &[u8] = b"\xEF\xBB\xBF";
    let names: Vec<String> = record
        .iter()
        .enumerate()
        .map(|(col, raw)| {
            let raw = if col == 0 { raw.strip_prefix(BOM).unwrap_or(raw) } else { raw };
            cell_text(raw, path, line, col, None).map(str::to_owned)
        })
        .collect::<Result<_, _>>()?;
    // Excel's separator hint (`sep=;`, `sep=,`), a line of its own above the
    // header: not column names.
    let sep = match &names[..] {
        [first, rest @ ..] if first.starts_with("sep=") && rest.iter().all(String::is_empty) => {
            match (first.chars().nth(4), rest.len()) {
                (Some(c), 0) if first.chars().count() == 5 => Some(c.to_string()),
                (None, 1) => Some(",".to_string()),
                (None, 0) => Some("a tab".to_string()),
                _ => None,
            }
        }
        _ => None,
    };
    match sep {
        Some(sep) => Err(DataError::ExcelSeparator { path: path.into(), line, sep }),
        None => Ok(names),
    }
}

/// A row that repeats the header (files joined with their headers, `cat
/// a.csv b.csv`) is said as such: read as data, its cells are "not a
/// number", or, in a file of categories alone, a row of made-up values.
/// Compared cell by cell, up to the first that differs. `named`: whether
/// some column's name is not a number ([`names_words`]); columns named by
/// numbers (pandas' `0,1,2`) may have a row that spells them, as data.
fn check_not_header(
    record: &ByteRecord,
    header: &[String],
    named: bool,
    path: &Path,
    line: usize,
    header_line: usize,
) -> Result<(), DataError> {
    const BOM: &[u8] = b"\xEF\xBB\xBF";
    let same = |raw: &[u8], name: &String| raw.strip_prefix(BOM).unwrap_or(raw).trim_ascii() == name.as_bytes();
    if named && record.len() == header.len() && record.iter().zip(header).all(|(raw, name)| same(raw, name)) {
        return Err(DataError::RepeatedHeader { path: path.into(), line, header_line });
    }
    Ok(())
}

/// Whether some column of `header` is named by a word, not a number: then
/// a row that spells the header is a repeated header, not data.
fn names_words(header: &[String]) -> bool {
    header.iter().any(|name| name.parse::<f64>().is_err())
}

/// Every column of a training file has a name: an unnamed one (a pandas
/// index, a trailing comma) would be read as a feature. (Rows to predict
/// are read by name, so an extra unnamed column there is only passed over.)
fn check_named(header: &[String], path: &Path, line: usize) -> Result<(), DataError> {
    match header.iter().position(String::is_empty) {
        Some(i) => Err(DataError::UnnamedColumn { path: path.into(), line, column: i + 1, of: header.len() }),
        None => Ok(()),
    }
}

fn check_unique(header: &[String], path: &Path) -> Result<(), DataError> {
    // Unnamed columns are refused (training) or passed over (predict) on
    // their own. A set: a header of a million columns is read in a blink.
    let mut seen = std::collections::HashSet::with_capacity(header.len());
    for name in header.iter().filter(|name| !name.is_empty()) {
        if !seen.insert(name.as_str()) {
            let columns = (1..=header.len()).filter(|&c| header[c - 1] == *name).collect();
            return Err(DataError::DuplicateColumn { path: path.into(), name: name.clone(), columns });
        }
    }
    Ok(())
}

/// Whether a first line is a row of data rather than a header: none of its
/// cells one of the model's column names (pandas names columns `0`, `1`,
/// ...), as many cells as a row of the model has, and every cell a number
/// but, where the line has a cell for the target, one (a class's name,
/// `setosa`).
fn no_header(first: &[String], features: &[String], target: &str) -> bool {
    let features: std::collections::HashSet<&str> = features.iter().map(String::as_str).collect();
    let named = |h: &String| features.contains(h.as_str()) || h == target;
    let texts = first.iter().filter(|h| h.trim().parse::<f64>().is_err()).count();
    let fits = match first.len().checked_sub(features.len()) {
        Some(0) => texts == 0,
        Some(1) => texts <= 1,
        _ => false,
    };
    fits && !first.iter().any(named)
}

/// A cell's text, trimmed; `col` is 0-based, `name` its header (none while
/// the header itself is read).
fn cell_text<'a>(
    raw: &'a [u8],
    path: &Path,
    line: usize,
    col: usize,
    name: Option<&str>,
) -> Result<&'a str, DataError> {
    std::str::from_utf8(raw).map(str::trim).map_err(|e| {
        let valid = &raw[..e.valid_up_to()];
        DataError::BadEncoding {
            path: path.into(),
            row: line,
            column: col + 1,
            column_name: name.map(str::to_owned),
            byte: raw[e.valid_up_to()],
            valid_chars: std::str::from_utf8(valid).map_or(0, |v| v.chars().count()),
        }
    })
}

/// A cell's text for an error message: whole when short, cut with its
/// length said when long, so one enormous cell cannot flood the terminal.
fn shown(text: &str) -> String {
    const MAX: usize = 60;
    if text.chars().count() <= MAX {
        return text.to_string();
    }
    let head: String = text.chars().take(MAX).collect();
    format!("{head}... ({} characters)", text.chars().count())
}

/// One cell and where it is, to build errors from.
struct Cell<'a> {
    path: &'a Path,
    line: usize,
    /// 0-based.
    col: usize,
    name: &'a str,
    text: &'a str,
}

/// Whether a cell reads as a missing-value marker (`NA`, `N/A`, `null`,
/// `None`, `missing`, `nil`, `?`, `NaN`, any case), as pandas and
/// spreadsheets write a value nobody filled in.
pub fn looks_missing(text: &str) -> bool {
    let lower = text.trim().to_ascii_lowercase();
    ["na", "n/a", "#n/a", "null", "none", "missing", "nil", "?", "nan"].contains(&lower.as_str())
}

/// Whether a first line reads as a row of data: every cell a number, and
/// not the distinct whole numbers pandas names unnamed columns with (`0`,
/// `1`, `2`: a header, whose target is then said to be missing).
fn looks_like_data(cells: &[String]) -> bool {
    let numbers = cells.iter().all(|c| c.parse::<f64>().is_ok());
    let names: Option<Vec<u64>> = cells.iter().map(|c| c.parse::<u64>().ok()).collect();
    let distinct = names.is_some_and(|mut n| {
        n.sort_unstable();
        n.windows(2).all(|w| w[0] != w[1])
    });
    numbers && !distinct
}

/// Memory ran out while `doing` with the data in `path`: an error naming the
/// file, as a read that runs out of memory is.
pub(crate) fn out_of_memory(path: &Path, doing: String) -> DataError {
    let source = std::io::Error::new(
        std::io::ErrorKind::OutOfMemory,
        format!("out of memory {doing}; free memory, or train on fewer rows"),
    );
    DataError::Io { path: path.into(), source }
}

/// A missing value in rows to predict on, said as one.
const MISSING_TO_PREDICT: &str = "; a missing value, which KynML does not fill in: fill or drop such rows first";

/// `1,5`: a decimal comma, as many locales write numbers; `12,500`, which
/// may be a thousands separator too, said both ways.
fn decimal_comma_hint(text: &str) -> Option<String> {
    let (whole, fraction) = text.trim().trim_start_matches(['+', '-']).split_once(',')?;
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    if !(digits(whole) && digits(fraction)) {
        return None;
    }
    let decimal = text.trim().replacen(',', ".", 1);
    if fraction.len() == 3 {
        return Some(format!(
            "; a thousands separator or a decimal comma? KynML reads plain numbers with `.` as the decimal point: \
             write {} or {decimal} (pandas: `thousands=\",\"` or `decimal=\",\"`)",
            text.trim().replacen(',', "", 1)
        ));
    }
    Some(format!(
        "; a decimal comma? KynML reads `.` as the decimal point: write {decimal} (pandas reads such a file with \
         `decimal=\",\"`)"
    ))
}

/// For a word where a number should be, the spec line that reads the
/// column as categories; for an empty cell or a missing-value marker
/// (`NA`, `null`), that none is filled in; empty for a cell that looks like
/// a mistyped number.
fn category_hint(column: &str, text: &str) -> String {
    let lower = text.trim().to_ascii_lowercase();
    if lower.is_empty() || looks_missing(text) {
        return "; a missing value, which KynML does not fill in: fill or drop such rows before training".into();
    }
    if let Some(hint) = decimal_comma_hint(text) {
        return hint;
    }
    let word = text.chars().next().is_some_and(char::is_alphabetic)
        && !["nan", "inf", "infinity"].contains(&lower.trim_start_matches(['+', '-']));
    if word {
        format!(
            "; if `{column}` holds categories, name it in the dataset block's categorical list: \
             `categorical = [\"{column}\"]`, or beside the names already there"
        )
    } else {
        String::new()
    }
}

impl<'a> Cell<'a> {
    fn number(&self) -> Result<f32, DataError> {
        match self.text.parse::<f32>() {
            Ok(x) if x.is_finite() => Ok(x),
            // `parse` accepts "NaN" and "inf", and overflows to infinity.
            Ok(_) => Err(DataError::NonFinite {
                path: self.path.into(),
                row: self.line,
                column: self.col + 1,
                column_name: self.name.into(),
                value: shown(self.text),
            }),
            Err(_) => Err(DataError::NotNumeric {
                path: self.path.into(),
                row: self.line,
                column: self.col + 1,
                column_name: self.name.into(),
                value: shown(self.text),
                hint: category_hint(self.name, self.text),
            }),
        }
    }

    /// The cell as a class label, borrowed.
    fn label_text(&self) -> Result<&'a str, DataError> {
        if self.text.is_empty() {
            return Err(DataError::EmptyLabel {
                path: self.path.into(),
                row: self.line,
                column: self.col + 1,
                column_name: self.name.into(),
            });
        }
        Ok(self.text)
    }
}

/// Whether a numeric column's numbers, all read as one 32-bit float, differ
/// as written (`1700000000001`, `1700000000008`, ... all read as
/// 1.7e12): such a column reads as a constant and trains on nothing. Each
/// cell is read a second time, in f64, only while the column's floats are
/// all the first one's.
#[derive(Debug, Clone, Copy)]
struct OneFloat {
    float: f32,
    exact: f64,
    floats_differ: bool,
    numbers_differ: bool,
}

impl OneFloat {
    fn probe(probe: &mut Option<OneFloat>, x: f32, text: &str) {
        // `text` is the trimmed cell that read as `x`.
        let exact = || text.parse::<f64>().unwrap_or(f64::from(x));
        match probe {
            None => *probe = Some(OneFloat { float: x, exact: exact(), floats_differ: false, numbers_differ: false }),
            Some(p) if !p.floats_differ => {
                if x != p.float {
                    p.floats_differ = true;
                } else if !p.numbers_differ && exact() != p.exact {
                    p.numbers_differ = true;
                }
            }
            Some(_) => {}
        }
    }

    fn collapsed(&self) -> bool {
        !self.floats_differ && self.numbers_differ
    }
}

/// A column of class labels as read: each distinct spelling once, and each
/// row's spelling by its number.
#[derive(Default)]
struct Labelled {
    spellings: Vec<String>,
    seen: HashMap<String, u32>,
    ids: Vec<u32>,
}

impl Labelled {
    fn push(&mut self, label: &str) {
        let id = match self.seen.get(label) {
            Some(&id) => id,
            None => {
                let id = u32::try_from(self.spellings.len()).unwrap_or(u32::MAX);
                self.spellings.push(label.to_owned());
                self.seen.insert(label.to_owned(), id);
                id
            }
        };
        self.ids.push(id);
    }

    /// The classes of the rows' labels ([`encode_spellings`]).
    fn encode(self) -> Targets {
        encode_spellings(&self.spellings, &self.ids)
    }
}

/// Maps labels to indices into their sorted, deduplicated names. Whole
/// numbers are one class per value (`02` and `2` alike, as a numeric column
/// reads them), sorted by value (`2` before `10`), and named as the data
/// writes the value most often (`01` stays `01`); other labels sort as text.
/// The labels are `spellings[ids[row]]`; returned with each row's class index.
fn encode_spellings(spellings: &[String], ids: &[u32]) -> Targets {
    let mut counts = vec![0usize; spellings.len()];
    ids.iter().for_each(|&id| counts[id as usize] += 1);
    let integers: Option<Vec<Whole>> = spellings.iter().map(|l| Whole::parse(l)).collect();
    let Some(values) = integers else {
        let mut names = spellings.to_vec();
        names.sort_unstable();
        let index: HashMap<&str, u32> = names.iter().enumerate().map(|(i, n)| (n.as_str(), class_index(i))).collect();
        let of: Vec<u32> = spellings.iter().map(|l| index[l.as_str()]).collect();
        let indices = ids.iter().map(|&id| of[id as usize]).collect();
        return Targets::Classes { indices, names };
    };
    // Each value's spellings, counted: the most frequent names it (the
    // first in text order on a tie).
    let mut by_value: std::collections::BTreeMap<&Whole, std::collections::BTreeMap<&str, usize>> = Default::default();
    for ((label, value), &n) in spellings.iter().zip(&values).zip(&counts) {
        *by_value.entry(value).or_default().entry(label.as_str()).or_default() += n;
    }
    let names: Vec<String> = by_value
        .values()
        .map(|counts| {
            let most = counts.values().max().copied().unwrap_or(0);
            counts.iter().find(|(_, &n)| n == most).map_or(String::new(), |(text, _)| (*text).to_string())
        })
        .collect();
    let index: HashMap<&Whole, u32> = by_value.keys().enumerate().map(|(i, v)| (*v, class_index(i))).collect();
    let of: Vec<u32> = values.iter().map(|v| index[v]).collect();
    let indices = ids.iter().map(|&id| of[id as usize]).collect();
    Targets::Classes { indices, names }
}

/// A whole number of any size as a label writes it (`7`, `+7`, `007`,
/// `-12`, an id of thirty digits, `7.0` as pandas writes an integer column
/// that had a missing value): its sign and its digits without leading
/// zeros, ordered by value. A label past i64 is still a number (it switched
/// every label of its column to text order).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Whole {
    negative: bool,
    /// No leading zeros; `0` for zero (which is never negative).
    digits: String,
}

impl Whole {
    fn parse(text: &str) -> Option<Self> {
        let (negative, rest) = match text.as_bytes().first()? {
            b'-' => (true, &text[1..]),
            b'+' => (false, &text[1..]),
            _ => (false, text),
        };
        // A fraction of zeros alone (`7.0`, `7.`) is the same whole number.
        let rest = match rest.split_once('.') {
            Some((whole, zeros)) if zeros.bytes().all(|b| b == b'0') => whole,
            Some(_) => return None,
            None => rest,
        };
        if rest.is_empty() || !rest.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let digits = rest.trim_start_matches('0');
        let digits = if digits.is_empty() { "0" } else { digits };
        Some(Whole { negative: negative && digits != "0", digits: digits.to_string() })
    }
}

impl Ord for Whole {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        let magnitude =
            |a: &Whole, b: &Whole| a.digits.len().cmp(&b.digits.len()).then_with(|| a.digits.cmp(&b.digits));
        match (self.negative, other.negative) {
            (true, false) => std::cmp::Ordering::Less,
            (false, true) => std::cmp::Ordering::Greater,
            (false, false) => magnitude(self, other),
            (true, true) => magnitude(other, self),
        }
    }
}

impl PartialOrd for Whole {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

fn class_index(i: usize) -> u32 {
    u32::try_from(i).expect("fewer than 2^32 classes")
}

/// The class among `names` (a model's classes, as [`Table`] names them)
/// that `label` is: the same text, or, where every class is a whole number,
/// the same number written otherwise (`02` for `2`).
pub fn class_of(names: &[String], label: &str) -> Option<usize> {
    if let Some(i) = names.iter().position(|n| n == label) {
        return Some(i);
    }
    let value = Whole::parse(label)?;
    let values: Option<Vec<Whole>> = names.iter().map(|n| Whole::parse(n)).collect();
    values?.iter().position(|v| *v == value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn example(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../examples/{name}/{name}.csv"))
    }

    fn classes(target: &str) -> TableOptions {
        TableOptions { target: target.into(), classification: true, ..Default::default() }
    }

    fn regression(target: &str) -> TableOptions {
        TableOptions { target: target.into(), ..Default::default() }
    }

    /// Writes `bytes` to `data.csv` in a fresh temporary folder.
    fn temp_csv(bytes: &[u8]) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data.csv");
        std::fs::write(&path, bytes).unwrap();
        (dir, path)
    }

    fn read(bytes: &[u8], opts: &TableOptions) -> Result<Table, DataError> {
        let (_dir, path) = temp_csv(bytes);
        read_csv(&path, opts)
    }

    /// A device given as data is refused unread (`/dev/zero` filled memory
    /// until the system killed the run); a named pipe is read to its
    /// writer's end, as a shell's `|` into `/dev/stdin` gives one.
    #[cfg(unix)]
    #[test]
    fn a_device_is_refused_and_a_pipe_is_read() {
        for device in ["/dev/zero", "/dev/null"] {
            let e = read_csv(Path::new(device), &regression("y")).unwrap_err();
            assert!(matches!(e, DataError::NotAFile { kind: "a character device", .. }), "{e}");
            assert!(e.to_string().starts_with(&format!("{device}: it is a character device, not a data file")), "{e}");
        }
        let e = read_model_rows(Path::new("/dev/zero"), &["a".into()], &[], None, None, "y", false).err().unwrap();
        assert!(matches!(e, DataError::NotAFile { .. }), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let pipe = dir.path().join("rows.csv");
        let status = std::process::Command::new("mkfifo").arg(&pipe).status().unwrap();
        assert!(status.success());
        let writer = {
            let pipe = pipe.clone();
            std::thread::spawn(move || std::fs::write(pipe, "a,y\n1,2\n3,4\n5,6\n").unwrap())
        };
        let table = read_csv(&pipe, &regression("y")).unwrap();
        writer.join().unwrap();
        assert_eq!(table.n_rows(), 3);
    }

    #[test]
    fn parsing_reports_its_progress_through_the_bytes() {
        let mut text = String::from("a,b,y\n");
        for i in 0..(3 * REPORT_EVERY + 5) {
            text.push_str(&format!("{i},{},{}\n", i % 7, i % 3));
        }
        let mut seen = Vec::new();
        let table = parse_csv_reporting(Path::new("d.csv"), text.as_bytes(), &regression("y"), &mut |done, total| {
            seen.push((done, total))
        })
        .unwrap();
        assert_eq!(table.n_rows(), 3 * REPORT_EVERY + 5);
        // Every REPORT_EVERY rows, then the end; rising, within the file.
        assert_eq!(seen.len(), 4, "{seen:?}");
        let total = text.len() as u64;
        assert!(seen.iter().all(|&(done, t)| t == total && done <= total), "{seen:?}");
        assert!(seen.windows(2).all(|w| w[0].0 < w[1].0), "{seen:?}");
        assert_eq!(seen.last(), Some(&(total, total)));
        assert!(seen[0].0 > total / 4 && seen[0].0 < total / 2, "a third of the rows: {seen:?}");
    }

    fn class_counts(targets: &Targets) -> Vec<usize> {
        let Targets::Classes { indices, names } = targets else { panic!("not classes") };
        let mut counts = vec![0; names.len()];
        for &i in indices {
            counts[i as usize] += 1;
        }
        counts
    }

    #[test]
    fn reads_iris() {
        let t = read_csv(&example("iris"), &classes("species")).unwrap();
        assert_eq!(t.n_rows(), 150);
        assert_eq!(t.feature_names, ["sepal_length_cm", "sepal_width_cm", "petal_length_cm", "petal_width_cm"]);
        assert_eq!(t.target_name, "species");
        assert_eq!(t.features.len(), 150 * 4);
        assert_eq!(t.row(0), [5.1, 3.5, 1.4, 0.2]);
        assert_eq!(t.targets.class_names().unwrap(), ["setosa", "versicolor", "virginica"]);
        assert_eq!(class_counts(&t.targets), [50, 50, 50]);
    }

    #[test]
    fn reads_wine() {
        let t = read_csv(&example("wine"), &classes("cultivar")).unwrap();
        assert_eq!(t.n_rows(), 178);
        assert_eq!(t.n_features(), 13);
        assert_eq!(t.feature_names[12], "proline");
        assert_eq!(t.row(0)[0], 14.23);
        assert_eq!(t.row(0)[12], 1065.0);
        assert_eq!(t.targets.class_names().unwrap(), ["class_0", "class_1", "class_2"]);
        assert_eq!(class_counts(&t.targets), [59, 71, 48]);
    }

    #[test]
    fn reads_diabetes() {
        let t = read_csv(&example("diabetes"), &regression("progression")).unwrap();
        assert_eq!(t.n_rows(), 442);
        assert_eq!(t.n_features(), 10);
        assert_eq!(t.feature_names[..3], ["age", "sex", "bmi"]);
        assert_eq!(t.row(0), [59.0, 2.0, 32.1, 101.0, 157.0, 93.2, 38.0, 4.0, 4.8598, 87.0]);
        let Targets::Regression(y) = &t.targets else { panic!("not regression") };
        assert_eq!(y[0], 151.0);
        assert!(y.iter().all(|v| v.is_finite()));
    }

    #[test]
    fn target_may_sit_in_any_column() {
        let t = read(b"a,y,b\n1,10,2\n3,20,4\n", &regression("y")).unwrap();
        assert_eq!(t.feature_names, ["a", "b"]);
        assert_eq!(t.features, [1.0, 2.0, 3.0, 4.0]);
        assert_eq!(t.targets, Targets::Regression(vec![10.0, 20.0]));
    }

    #[test]
    fn trims_cells_skips_blank_lines_and_ignores_a_bom() {
        let text = b"\xEF\xBB\xBF a , y \n\n 1.5 , 2 \n   \n-3e2,4\n";
        let t = read(text, &regression("y")).unwrap();
        assert_eq!(t.feature_names, ["a"]);
        assert_eq!(t.features, [1.5, -300.0]);
        assert_eq!(t.targets, Targets::Regression(vec![2.0, 4.0]));
    }

    /// Rows read to predict keep no target (a file of millions of rows held a
    /// string a row for nothing); rows read to score keep each cell.
    #[test]
    fn only_rows_read_to_score_keep_their_targets() {
        let names = ["a".to_string(), "b".to_string()];
        let bytes = b"a,y,b\n1,x,2\n3,yy,4\n";
        let read = |need| parse_model_rows(bytes, Path::new("r.csv"), &names, &[], None, None, "y", need).unwrap();
        assert_eq!(read(false).targets, None);
        let scored = read(true);
        assert_eq!(scored.targets.as_ref().map(|t| t.iter().collect::<Vec<_>>()), Some(vec!["x", "yy"]));
        assert_eq!(scored.lines, [2, 3]);
        assert_eq!(scored.features, [1.0, 2.0, 3.0, 4.0]);
        let built = ModelRows::from_features(vec![1.0, 2.0, 3.0, 4.0], 2).with_targets(["x", "yy"]);
        assert_eq!(
            (&built.features, built.rows, &built.targets, &built.lines),
            (&scored.features, 2, &scored.targets, &vec![1, 2])
        );
        let cells: Cells = ["", "p", "", "qq"].into_iter().collect();
        assert_eq!(
            (cells.len(), cells.get(1), cells.get(2), cells.get(3), cells.get(4)),
            (4, Some("p"), Some(""), Some("qq"), None)
        );
    }

    /// pandas writes an integer column that had a missing value as floats:
    /// `1.0` is the class `1` is, not a class of its own.
    #[test]
    fn a_whole_number_written_with_a_zero_fraction_is_its_class() {
        let t = read(b"x,y\n0,1\n0,0\n0,1.0\n0,0.0\n0,1\n0,2.00\n", &classes("y")).unwrap();
        assert_eq!(
            t.targets,
            Targets::Classes { indices: vec![1, 0, 1, 0, 1, 2], names: vec!["0".into(), "1".into(), "2.00".into()] }
        );
        // Any other fraction makes the column's labels text, each its own class.
        let t = read(b"x,y\n0,1\n0,1.5\n0,1.0\n", &classes("y")).unwrap();
        assert_eq!(t.targets.class_names().unwrap().len(), 3);
    }

    #[test]
    fn integer_labels_sort_numerically_and_keep_their_spelling() {
        let t = read(b"x,y\n0,10\n0,2\n0,-1\n0,02\n", &classes("y")).unwrap();
        // "02" and "2" are the same integer, hence the same class, named
        // by the spelling first in text order on a tie.
        assert_eq!(
            t.targets,
            Targets::Classes { indices: vec![2, 1, 0, 1], names: vec!["-1".into(), "02".into(), "10".into()] }
        );
        // Zero-padded codes keep their padding; `+1` its sign; the most
        // frequent spelling names a value written two ways.
        let t = read(b"x,y\n0,01\n0,10\n0,02\n0,+1\n0,01\n0,2\n0,02\n", &classes("y")).unwrap();
        assert_eq!(
            t.targets,
            Targets::Classes { indices: vec![0, 2, 1, 0, 0, 1, 1], names: vec!["01".into(), "02".into(), "10".into()] }
        );
        let names = t.targets.class_names().unwrap();
        for (label, class) in [("01", 0), ("1", 0), ("+1", 0), ("2", 1), ("02", 1), ("010", 2), ("1.0", 0), ("2.", 1)] {
            assert_eq!(class_of(names, label), Some(class), "{label}");
        }
        for label in ["3", "1.5", "1.01", ".0", "1.0.0", "1e0", "one", ""] {
            assert_eq!(class_of(names, label), None, "{label}");
        }
        // Text classes match as written only.
        let text = ["a".to_string(), "2".to_string()];
        assert_eq!((class_of(&text, "2"), class_of(&text, "02")), (Some(1), None));
        // Past i64 a label is still a whole number: by value, `0…` and its
        // unpadded spelling one class, negatives first, `-0` is `0`.
        let t = read(
            b"x,y\n0,9223372036854775808\n0,10\n0,5\n0,09223372036854775808\n0,-99999999999999999999\n0,-0\n0,0\n",
            &classes("y"),
        )
        .unwrap();
        let names: Vec<String> =
            ["-99999999999999999999", "-0", "5", "10", "09223372036854775808"].map(String::from).to_vec();
        assert_eq!(t.targets, Targets::Classes { indices: vec![4, 3, 2, 4, 0, 1, 1], names });
        let names = t.targets.class_names().unwrap();
        assert_eq!(class_of(names, "+9223372036854775808"), Some(4));
        assert_eq!(class_of(names, "0"), Some(1));
    }

    /// A table built or changed in code that does not hold together is an
    /// error from `Dataset::from_table`, not a panic or a silent NaN.
    #[test]
    fn a_table_that_does_not_hold_together_is_refused() {
        let table = read(b"a,b,y\n1,2,x\n3,4,y\n5,6,x\n7,8,y\n9,10,x\n", &classes("y")).unwrap();
        assert!(table.check().is_ok());
        let refused = |change: &dyn Fn(&mut Table), says: &str| {
            let mut t = table.clone();
            change(&mut t);
            let e = crate::data::Dataset::from_table(t, 0.8, true, 1).map(drop).unwrap_err();
            assert!(matches!(e, DataError::Inconsistent { .. }) && e.to_string().contains(says), "{e}");
        };
        refused(&|t| t.features.pop().map(drop).unwrap_or(()), "9 feature values are not 5 rows of 2 features");
        refused(&|t| t.features[3] = f32::NAN, "row 1 (0-based) holds NaN in `b`");
        refused(&|t| t.features[0] = f32::INFINITY, "holds inf in `a`");
        refused(
            &|t| {
                if let Targets::Classes { indices, .. } = &mut t.targets {
                    indices[0] = 7;
                }
            },
            "not below the 2 class names",
        );
    }

    #[test]
    fn string_labels_sort_as_text() {
        let t = read(b"x,y\n0,b\n0,B\n0,a\n0,10\n0,9\n0,a\n", &classes("y")).unwrap();
        // A single non-integer label makes every label a string.
        let names = ["10", "9", "B", "a", "b"].map(String::from).to_vec();
        assert_eq!(t.targets, Targets::Classes { indices: vec![4, 2, 3, 0, 1, 3], names });
    }

    #[test]
    fn missing_file_is_an_io_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nope.csv");
        let err = read_csv(&path, &regression("y")).unwrap_err();
        assert!(matches!(&err, DataError::Io { path: p, .. } if *p == path), "{err:?}");
    }

    #[test]
    fn empty_file_header_only_and_blank_lines_only_are_empty() {
        for (text, header) in [(&b""[..], false), (b"a,y\n", true), (b"a,y\n\n  \n", true), (b"\n\n", false)] {
            let err = read(text, &regression("y")).unwrap_err();
            assert!(matches!(err, DataError::Empty { header: h, .. } if h == header), "{text:?}: {err:?}");
            // Said apart: an empty file, or a header with no row below it.
            let said = if header {
                "no data: a header row and no data row below it; expected at least 2"
            } else {
                "no data: the file is empty"
            };
            assert!(err.to_string().contains(said), "{text:?}: {err}");
        }
    }

    #[test]
    fn missing_target_suggests_the_closest_column() {
        let (_dir, path) = temp_csv(b"sepal,species\n1,a\n");
        let err = read_csv(&path, &classes("specie")).unwrap_err();
        let DataError::MissingTarget { target, available, suggestion, .. } = &err else { panic!("{err:?}") };
        assert_eq!(target, "specie");
        assert_eq!(available, &["sepal", "species"]);
        assert_eq!(suggestion.as_deref(), Some("species"));
        assert_eq!(
            err.to_string(),
            format!("{}:1: no column named `specie` to predict; did you mean `species`?", path.display())
        );

        let err = read(b"sepal,species\n1,a\n", &classes("outcome")).unwrap_err();
        assert!(matches!(&err, DataError::MissingTarget { suggestion: None, .. }), "{err:?}");
        assert!(err.to_string().ends_with("; the columns are `sepal`, `species`"), "{err}");
    }

    #[test]
    fn an_unnamed_column_is_refused_with_its_likely_cause() {
        for (text, column, cause) in [
            (&b",a,y\n0,1,2\n1,3,4\n"[..], 1, "index=False"),
            (b"a,y,\n1,2,\n3,4,\n", 3, "a comma at the end of every line"),
            (b"a,,y\n1,2,3\n", 2, "two commas in a row"),
            (b"\n\na, ,y\n1,2,3\n", 2, "two commas in a row"),
        ] {
            let err = read(text, &regression("y")).unwrap_err();
            let DataError::UnnamedColumn { column: c, .. } = &err else { panic!("{err:?}") };
            assert_eq!(*c, column);
            assert!(err.to_string().contains(cause), "{err}");
        }
        let err = read(b"\n\na, ,y\n1,2,3\n", &regression("y")).unwrap_err().to_string();
        assert!(err.contains(":3: column 2 of the header's 3 has no name"), "{err}");
    }

    #[test]
    fn duplicate_columns_are_listed() {
        let err = read(b"a,b,y,b\n1,2,3,4\n", &regression("y")).unwrap_err();
        let DataError::DuplicateColumn { name, columns, .. } = &err else { panic!("{err:?}") };
        assert_eq!(name, "b");
        assert_eq!(columns, &[2, 4]);
        assert!(err.to_string().ends_with(":1: column name `b` appears more than once: columns 2 and 4"));
    }

    #[test]
    fn target_alone_has_no_features() {
        let err = read(b"y\n1\n2\n", &regression("y")).unwrap_err();
        assert!(matches!(err, DataError::NoFeatures { .. }), "{err:?}");
    }

    #[test]
    fn ragged_rows_name_their_line() {
        // Line 4 counts the blank line 3 that is skipped.
        let err = read(b"a,b,y\n1,2,3\n\n4,5\n", &regression("y")).unwrap_err();
        let DataError::Ragged { row, expected, found, .. } = err else { panic!("{err:?}") };
        assert_eq!((row, expected, found), (4, 3, 2));

        let err = read(b"a,y\n1,2\n3,4,5\n", &regression("y")).unwrap_err();
        let DataError::Ragged { row, expected, found, .. } = err else { panic!("{err:?}") };
        assert_eq!((row, expected, found), (3, 2, 3));

        // Windows line endings, blank lines at the start of the data.
        let err = read(b"a,y\r\n\r\n\r\n1,2\r\n3,4,5\r\n", &regression("y")).unwrap_err();
        let DataError::Ragged { row, .. } = err else { panic!("{err:?}") };
        assert_eq!(row, 5);

        // Classic Mac line endings (a lone `\r`), blank lines among them.
        let err = read(b"a,y\r1,2\r\r4,5\r3,4,5\r", &regression("y")).unwrap_err();
        let DataError::Ragged { row, .. } = err else { panic!("{err:?}") };
        assert_eq!(row, 5);
        assert_eq!(read(b"a,y\r1,2\r\r4,5\r", &regression("y")).unwrap().n_rows(), 2);
        // Excel for Mac: rows end in `\r`, a quoted cell's lines in `\n`.
        let err = read(b"a,y\r1,\"p\nq\"\r2,r\r3,s,t\r", &classes("y")).unwrap_err();
        let DataError::Ragged { row, .. } = err else { panic!("{err:?}") };
        assert_eq!(row, 5, "lines: header 1, the quoted cell's row 2-3, then 4 and 5");
        // The line a ragged row is on, as an editor counts it.
        for (file, opts, line) in [
            // A Mac file's quoted lines may end in `\r` too: still a line each.
            (&b"a,y\r1,\"p\rq\"\r2,r\r3,s,t\r"[..], classes("y"), 5),
            // In a file of `\n`s a quoted lone `\r` is a line to an editor too.
            (b"a,y\n1,\"p\rq\"\n2,r\n3,s,t\n", classes("y"), 5),
            // `\r\r\r\n`: a lone `\r`, then `\r\r\n`: a blank line between.
            (b"a,y\n1,2\r\r\r\n3,4,5\n", regression("y"), 4),
            // A `"` inside a cell (`55"`, inches) opens no quoted cell: the
            // line ends after it are read as any others.
            (b"a,y\r\r\n1,55\"\r\r\n2,r\r\r\n3,s,t\r\r\n", classes("y"), 4),
            (b"a,y\r1,55\"\r2,r\r3,s,t\r", classes("y"), 4),
            // Python's csv.writer on Windows without `newline=''`: `\r\r\n`
            // ends one line, as pandas reads it.
            (b"a,y\r\r\n1,2\r\r\n3,4,5\r\r\n", regression("y"), 3),
            // A lone `\r` among `\n`s ends a line, and is counted as one.
            (b"a,y\n1,2\r3,4\n5,6,7\n", regression("y"), 4),
        ] {
            let err = read(file, &opts).unwrap_err();
            let DataError::Ragged { row, .. } = err else { panic!("{err:?}") };
            assert_eq!(row, line, "{:?}", String::from_utf8_lossy(file));
        }
        // A quoted cell keeps its bytes, as pandas reads it, whatever the file's ends.
        for file in [&b"a,y\r1,\"p\rq\"\r2,r\r"[..], b"a,y\n1,\"p\rq\"\n2,r\n", b"a,y\r\n1,\"p\rq\"\r\n2,r\r"] {
            let table = read(file, &classes("y")).unwrap();
            assert_eq!(table.targets.class_names().unwrap(), ["p\rq", "r"], "{:?}", String::from_utf8_lossy(file));
        }
        // A quoted cell keeps its own `\r`.
        let table = read(b"a,y\n1,\"p\rq\"\n2,r\r3,s\n", &classes("y")).unwrap();
        assert_eq!(table.targets.class_names().unwrap(), ["p\rq", "r", "s"]);
    }

    #[test]
    fn not_a_number_names_line_column_and_value() {
        let (_dir, path) = temp_csv(b"id,x,age,y\n1,2,3,4\n5,6, abc ,8\n");
        let err = read_csv(&path, &regression("y")).unwrap_err();
        let DataError::NotNumeric { row, column, column_name, value, .. } = &err else { panic!("{err:?}") };
        assert_eq!((*row, *column, column_name.as_str(), value.as_str()), (3, 3, "age", "abc"));
        assert_eq!(
            err.to_string(),
            format!(
                "{}:3: column 3 (`age`) is not a number: found \"abc\"; if `age` holds categories, name it in the \
                 dataset block's categorical list: `categorical = [\"age\"]`, or beside the names already there",
                path.display()
            )
        );
    }

    #[test]
    fn empty_cells_and_non_numeric_regression_targets_are_not_numbers() {
        let err = read(b"a,y\n1,2\n,3\n", &regression("y")).unwrap_err();
        assert!(
            err.to_string().ends_with(
                "found \"\"; a missing value, which KynML does not fill in: fill or drop such rows before training"
            ),
            "{err}"
        );
        let DataError::NotNumeric { row, column, value, .. } = err else { panic!("{err:?}") };
        assert_eq!((row, column, value.as_str()), (3, 1, ""));
        // A missing-value marker is said to be one, not a category.
        let err = read(b"a,y\n1,2\nNA,3\n", &regression("y")).unwrap_err().to_string();
        assert!(err.contains("found \"NA\"; a missing value") && !err.contains("categorical"), "{err}");

        let err = read(b"a,y\n1,2\n2,setosa\n", &regression("y")).unwrap_err();
        let DataError::NotNumeric { row, column, column_name, .. } = err else { panic!("{err:?}") };
        assert_eq!((row, column, column_name.as_str()), (3, 2, "y"));
    }

    #[test]
    fn nan_inf_and_overflow_are_not_finite() {
        for (cell, col) in [("NaN", 1), ("inf", 1), ("-Infinity", 2), ("1e39", 2)] {
            let text = if col == 1 { format!("a,y\n1,2\n{cell},3\n") } else { format!("a,y\n1,2\n3,{cell}\n") };
            let err = read(text.as_bytes(), &regression("y")).unwrap_err();
            let DataError::NonFinite { row, column, value, .. } = &err else { panic!("{err:?}") };
            assert_eq!((*row, *column, value.as_str()), (3, col, cell));
            assert!(err.to_string().contains("must be a finite number"), "{err}");
            // NaN is a missing value (as pandas writes one), said as `NA` is.
            assert_eq!(err.to_string().contains("NaN marks a missing value"), cell == "NaN", "{err}");
        }
    }

    #[test]
    fn empty_class_label_is_refused() {
        let err = read(b"a,y\n1,cat\n2,  \n", &classes("y")).unwrap_err();
        let DataError::EmptyLabel { row, column, column_name, .. } = err else { panic!("{err:?}") };
        assert_eq!((row, column, column_name.as_str()), (3, 2, "y"));
    }

    #[test]
    fn invalid_utf8_names_its_line() {
        let err = read(b"a,y\n1,2\n3,\xFF\xFE\n", &classes("y")).unwrap_err();
        assert!(matches!(err, DataError::BadEncoding { row: 3, column: 2, byte: 0xFF, valid_chars: 0, .. }), "{err:?}");
        assert!(
            err.to_string().contains(":3: column 2 (`y`) is not valid UTF-8 text (byte 0xFF at character 1)"),
            "{err}"
        );

        // Latin-1 "é" after two valid characters, in a feature column.
        let err = read(b"a,y\n\xC3\xA9x\xE9,2\n", &classes("y")).unwrap_err();
        assert!(
            err.to_string().contains(":2: column 1 (`a`) is not valid UTF-8 text (byte 0xE9 at character 3)"),
            "{err}"
        );

        // In the header no name is known yet.
        let err = read(b"a,\xC3\n1,2\n", &classes("y")).unwrap_err();
        assert!(matches!(err, DataError::BadEncoding { row: 1, column: 2, column_name: None, .. }), "{err:?}");
    }

    #[test]
    fn quoted_cells_spanning_lines_keep_later_line_numbers_right() {
        // The record on lines 2-3 holds a newline inside quotes; the bad cell
        // is on line 4.
        let err = read(b"name,x,y\n\"two\nlines\",1,2\nok,oops,3\n", &regression("y")).unwrap_err();
        let DataError::NotNumeric { row, column, .. } = err else { panic!("{err:?}") };
        assert_eq!((row, column), (2, 1));

        let err = read(b"a,x,y\n\"1\n\",1,2\n5,oops,3\n", &regression("y")).unwrap_err();
        let DataError::NotNumeric { row, column, .. } = err else { panic!("{err:?}") };
        assert_eq!((row, column), (4, 2));
    }

    #[test]
    fn a_quote_never_closed_is_an_error_where_it_opens() {
        // In the last column: the rest of the file would be one label.
        let err = read(b"a,b,y\n1,2,x\n3,4,\"z\n5,6,x\n7,8,z\n", &classes("y")).unwrap_err();
        let DataError::UnclosedQuote { row, column, .. } = err else { panic!("{err:?}") };
        assert_eq!((row, column), (3, 3));
        // In the middle of a row, and on the last line without a line break.
        let err = read(b"a,b,y\n1,2,x\n3,\"4,z\n5,6,x\n", &classes("y")).unwrap_err();
        assert!(matches!(err, DataError::UnclosedQuote { row: 3, column: 2, .. }), "{err:?}");
        let err = read(b"a,b,y\n1,2,x\n3,4,\"z", &classes("y")).unwrap_err();
        assert!(matches!(err, DataError::UnclosedQuote { row: 3, column: 3, .. }), "{err:?}");
        // After a quoted cell that spans lines, the line counts them.
        let err = read(b"y,a\n\"two\nlines\",1\n\"ok\",2\nw,\"3\n", &classes("y")).unwrap_err();
        assert!(matches!(err, DataError::UnclosedQuote { row: 5, column: 2, .. }), "{err:?}");
        let err = read(b"t,y\n1,x\n\"2\nmore\n", &classes("y")).unwrap_err();
        assert!(matches!(err, DataError::UnclosedQuote { row: 3, column: 1, .. }), "{err:?}");
        // Closed quotes, doubled quotes, line breaks inside quotes and a
        // quote inside an unquoted cell are all fine.
        let ok = b"a,y\n\"1\",\"say \"\"hi\"\"\"\n2,\"two\nlines\"\n3,x\"y\n";
        let t = read(ok, &classes("y")).unwrap();
        assert_eq!(t.n_rows(), 3);
    }

    fn model_rows(bytes: &[u8], features: &[&str], tokens: Option<&TokenVocabulary>) -> Result<ModelRows, DataError> {
        let (_dir, path) = temp_csv(bytes);
        let names: Vec<String> = features.iter().map(|f| f.to_string()).collect();
        read_model_rows(&path, &names, &[], tokens, None, "y", false)
    }

    #[test]
    fn rows_to_predict_pass_over_unnamed_columns() {
        // A pandas index and a trailing comma: read by name, the rest passed over.
        let rows = model_rows(b",a,x,\n0,1,2,\n1,3,4,\n", &["x", "a"], None).unwrap();
        assert_eq!((rows.rows, &rows.features[..]), (2, &[2.0, 1.0, 4.0, 3.0][..]));
        // A named column the model lacks is still refused.
        let err = model_rows(b",a,x,b\n0,1,2,3\n", &["x", "a"], None).unwrap_err();
        assert!(matches!(&err, DataError::ExtraColumn { column: 4, .. }), "{err:?}");
    }

    /// A first line of numbers is data, unless it is pandas' names for
    /// unnamed columns (`0,1,2`), which stays a header.
    #[test]
    fn a_first_line_of_numbers_is_data_unless_it_names_columns() {
        let cells = |t: &str| t.split(',').map(str::to_string).collect::<Vec<_>>();
        assert!(looks_like_data(&cells("0.5,1.25,3")) && looks_like_data(&cells("1,1,2")));
        assert!(!looks_like_data(&cells("0,1,2")) && !looks_like_data(&cells("2,0,1,y")));
        let (_dir, path) = temp_csv(b"\n0,1,2\n5,6,7\n");
        let err = read_csv(&path, &TableOptions { target: "y".into(), ..Default::default() }).unwrap_err();
        assert!(matches!(err, DataError::MissingTarget { line: 2, .. }), "{err}");
        // Said as either: pandas' names, or a first row of data.
        let said = err.to_string();
        assert!(
            said.contains(":2: no column named `y`")
                && said.contains(
                    "the columns are `0`, `1`, `2` (if that line is a row of data, the file has no header line"
                ),
            "{said}"
        );
        let (_dir, path) = temp_csv(b"a,b\n5,6\n");
        let err = read_csv(&path, &TableOptions { target: "y".into(), ..Default::default() }).unwrap_err();
        assert!(!err.to_string().contains("row of data"), "{err}");
        let (_dir, path) = temp_csv(b"\n0.5,1,2\n5,6,7\n");
        let err = read_csv(&path, &TableOptions { target: "y".into(), ..Default::default() }).unwrap_err();
        assert!(err.to_string().contains(":2: the first line holds only numbers"), "{err}");
    }

    /// An empty or `NA` cell among the rows to predict on is said to be a
    /// missing value, as training says it; a word is not taken for a
    /// category (the model was trained on numbers there).
    #[test]
    fn a_missing_value_to_predict_on_is_said_as_one() {
        for cell in ["", "NA"] {
            let text = format!("a,x\n1,2\n{cell},4\n");
            let err = model_rows(text.as_bytes(), &["x", "a"], None).unwrap_err().to_string();
            assert!(err.contains(":3:") && err.contains("a missing value, which KynML does not fill in"), "{err}");
        }
        let err = model_rows(b"a,x\n1,2\nred,4\n", &["x", "a"], None).unwrap_err().to_string();
        assert!(!err.contains("missing") && !err.contains("categorical"), "{err}");
    }

    #[test]
    fn a_compressed_file_is_said_as_such() {
        let mut gz = vec![0x1f, 0x8b, 8, 0];
        gz.extend_from_slice(&[0xff; 20]);
        for (bytes, says) in [
            (gz, "is gzip-compressed, not a CSV text: `gunzip` it first"),
            (b"PK\x03\x04rest of a zip".to_vec(), "is zip-compressed"),
        ] {
            let (_dir, path) = temp_csv(&bytes);
            let err = read_csv(&path, &classes("y")).map(drop).unwrap_err().to_string();
            assert!(err.contains(says), "{err}");
            let err = read_model_rows(&path, &[], &[], None, None, "y", false).map(drop).unwrap_err().to_string();
            assert!(err.contains(says), "{err}");
        }
        // A CSV whose first column starts `BZh` is text.
        let (_dir, path) = temp_csv(b"BZh,y\n1,a\n2,b\n");
        assert!(read_csv(&path, &classes("y")).is_ok());
    }

    /// Files a spreadsheet or a shell made: each said for what it is, read
    /// for training and to predict alike.
    #[test]
    fn joined_files_excel_hints_utf16_and_decimal_commas_are_said() {
        let mut utf16 = vec![0xff, 0xfe];
        utf16.extend("a,y\n1,2\n".encode_utf16().flat_map(u16::to_le_bytes));
        for (bytes, says) in [
            (b"a,y\n1,2\n3,4\na,y\n5,6\n".to_vec(), ":4: this row repeats the header (line 1)"),
            (b"a,y\n1,2\n\"a\", y\n".to_vec(), ":3: this row repeats the header (line 1)"),
            (b"sep=,\na,y\n1,2\n".to_vec(), ":1: `sep=` is Excel's separator hint, not the header: remove that line"),
            (b"sep=;\na;y\n1;2\n".to_vec(), "save the file comma-separated, as KynML reads it (its cells are separated by `;`"),
            (utf16, "the file is UTF-16 text"),
            (b"a,y\n1,2\n\"-1,5\",4\n".to_vec(), ":3: column 1 (`a`) is not a number: found \"-1,5\"; a decimal comma? KynML reads `.` as the decimal point: write -1.5"),
        ] {
            let (_dir, path) = temp_csv(&bytes);
            let err = read_csv(&path, &TableOptions { target: "y".into(), ..Default::default() }).map(drop).unwrap_err();
            assert!(err.to_string().contains(says), "{err}");
            let names = ["a".to_string()];
            let err = read_model_rows(&path, &names, &[], None, None, "y", false).map(drop).unwrap_err();
            assert!(err.to_string().contains(says), "{err}");
        }
        // A first name that only starts `sep=`, and a row that holds the
        // header's first name alone, are read as they are.
        let (_dir, path) = temp_csv(b"sep=x,y\n1,a\n2,b\n");
        assert!(read_csv(&path, &classes("y")).is_ok());
        let t = read(b"c,y\nc,1\nd,y\n", &TableOptions { categorical: vec!["c".into()], ..classes("y") }).unwrap();
        assert_eq!(t.n_rows(), 2);
        // Columns named by numbers: a row that spells them is data.
        let t = read(b"0,1,2\n1,0,1\n0,1,2\n1,1,0\n", &TableOptions { target: "2".into(), ..Default::default() });
        assert_eq!(t.unwrap().n_rows(), 3);
        // Three digits after the comma may be thousands: said both ways.
        let (_dir, path) = temp_csv(b"a,y\n\"12,500\",2\n3,4\n");
        let err = read_csv(&path, &TableOptions { target: "y".into(), ..Default::default() }).map(drop).unwrap_err();
        assert!(err.to_string().contains("a thousands separator or a decimal comma? KynML reads plain numbers with `.` as the decimal point: write 12500 or 12.500"), "{err}");
        // A target name with a character no one sees after it: said where it is.
        let err = read(b"a,y\xe2\x80\x8b\n1,2\n3,4\n", &classes("y")).map(drop).unwrap_err();
        assert!(
            err.to_string().contains("the file's column `y\\u{200b}` holds a character no one sees: remove it"),
            "{err}"
        );
        // UTF-16 from standard input, read from bytes, is said as from a file.
        let bytes = [0xfe, 0xff, 0, b'a'];
        let err =
            parse_model_rows(&bytes, Path::new("<stdin>"), &[], &[], None, None, "y", false).map(drop).unwrap_err();
        assert!(err.to_string().contains("the file is UTF-16 text"), "{err}");
        // A number with a comma that is no decimal comma gets no such hint.
        let (_dir, path) = temp_csv(b"a,y\n\"1,000,000\",2\n3,4\n");
        let err = read_csv(&path, &TableOptions { target: "y".into(), ..Default::default() }).map(drop).unwrap_err();
        assert!(!err.to_string().contains("decimal comma"), "{err}");
    }

    /// A list column as pandas writes it, `[0.1, 0.2]`, is its values.
    #[test]
    fn a_sequence_cell_in_brackets_is_its_values() {
        let seq = SequenceColumns::new(vec!["s".into()], 4);
        let (_dir, path) = temp_csv(b"s\n\"[0.5, -1, 2e-1]\"\n0.5 -1 0.2\n[]\n");
        let rows = read_model_rows(&path, &[], &[], None, Some(&seq), "y", false).unwrap();
        assert_eq!(rows.features[..3], rows.features[4..7]);
        assert_eq!(rows.features[..3], [0.5, -1.0, 0.2]);
        assert_eq!(rows.empty, 1);
        let (_dir, path) = temp_csv(b"s\n\"[0.5, [1]\"\n");
        assert!(read_model_rows(&path, &[], &[], None, Some(&seq), "y", false).is_err());
    }

    #[test]
    fn empty_sequences_are_counted_and_an_overflow_is_located() {
        let (_dir, path) = temp_csv(b"s,t\n1 2,3 4\n\"\",\"\"\n,\n");
        let seq = SequenceColumns::new(vec!["s".into(), "t".into()], 4);
        let rows = read_model_rows(&path, &[], &[], None, Some(&seq), "y", false).unwrap();
        assert_eq!((rows.rows, rows.empty), (3, 2), "read as all padding, and counted");
        // Its position counts values, not separators; the reason is given.
        let (_dir, path) = temp_csv(b"s\n0.1   1e39 0.3\n");
        let seq = SequenceColumns::new(vec!["s".into()], 4);
        let err = read_model_rows(&path, &[], &[], None, Some(&seq), "y", false).unwrap_err().to_string();
        assert!(err.contains("its value 2 is \"1e39\", which is too large for a 32-bit float"), "{err}");
        // Past even an f64, the same reason; `inf` written as a word is not too large, only not finite.
        let (_dir, path) = temp_csv(b"s\n0.1 -1e400 0.3\n");
        let err = read_model_rows(&path, &[], &[], None, Some(&seq), "y", false).unwrap_err().to_string();
        assert!(err.contains("is \"-1e400\", which is too large for a 32-bit float"), "{err}");
        let (_dir, path) = temp_csv(b"s\n0.1 inf 0.3\n");
        let err = read_model_rows(&path, &[], &[], None, Some(&seq), "y", false).unwrap_err().to_string();
        assert!(!err.contains("too large"), "{err}");
        // What was expected, and how a shorter sequence is written (not
        // padded with nan, as the ONNX export's inputs are).
        assert!(err.ends_with("; each value must be a finite number (a shorter sequence is written with fewer values, not padded with nan)"), "{err}");
        let (_dir, path) = temp_csv(b"s\n0.1 nan\n");
        let err = read_model_rows(&path, &[], &[], None, Some(&seq), "y", false).unwrap_err().to_string();
        assert!(err.contains("not padded with nan"), "{err}");
        let (_dir, path) = temp_csv(b"s\n0.1 abc\n");
        let err = read_model_rows(&path, &[], &[], None, Some(&seq), "y", false).unwrap_err().to_string();
        assert!(err.ends_with("is \"abc\"; each value must be a finite number"), "{err}");
    }

    /// A file read in pieces ([`super::super::RowPieces`]) gives the rows, and the
    /// errors at their lines, that it gives read whole, wherever the pieces
    /// are cut: every size from one byte (a piece a line) to the whole file.
    #[test]
    fn rows_read_in_pieces_are_the_rows_read_whole() {
        let two: Vec<String> = ["a", "b"].iter().map(|s| s.to_string()).collect();
        let one = vec!["a".to_string()];
        let path = Path::new("p.csv");
        for names in [&two, &one] {
            pieces_as_whole(path, names);
        }
    }

    /// [`rows_read_in_pieces_are_the_rows_read_whole`] for a model of these columns.
    fn pieces_as_whole(path: &Path, names: &[String]) {
        let whole = |bytes: &[u8]| -> Result<(Vec<f32>, Vec<usize>), String> {
            parse_model_rows(bytes, path, names, &[], None, None, "y", false)
                .map(|r| (r.features, r.lines))
                .map_err(|e| e.to_string())
        };
        let in_pieces = |bytes: &[u8], target: usize| -> Result<(Vec<f32>, Vec<usize>), String> {
            let mut pieces = super::super::RowPieces::new(bytes, path, target, false);
            let (mut features, mut lines) = (Vec::new(), Vec::new());
            while let Some(piece) = pieces.next_piece().map_err(|e| e.to_string())? {
                match parse_model_rows_at(&piece.bytes, path, names, &[], None, None, "y", false, piece.shift) {
                    Err(DataError::Empty { header: true, .. }) if !piece.first => {}
                    read => {
                        let read = read.map_err(|e| e.to_string())?;
                        features.extend(read.features);
                        lines.extend(read.lines);
                    }
                }
            }
            Ok((features, lines))
        };
        let files: &[&[u8]] = &[
            b"a,b\n1,2\n3,4\n5,6\n",
            b"a,b\r\n1,2\r\n3,4\r\n5,6",
            b"a,b\n1,2\n3,4\n\n\n",
            b"a,b\n1,2\n\n3,4\n5,6\n",
            b"a,b\n1,2\n3,4\n \n5,6\n",
            b"\n\na,b\n1,2\n3,4\n",
            b"\xef\xbb\xbfa,b\n1,2\n3,4\n",
            b"a,b,y\n1,2,\"two\nlines\"\n3,4,z\n5,6,\"x\r\ny\"\n7,8,w\n",
            b"a,b,y\n1,2,\"say \"\"hi\"\"\n\"\n3,4,z\n",
            b"a,b\r1,2\r3,4\r",
            b"a,b\r\r\n1,2\r\r\n3,4\r\r\n",
            b"a,b\n1,2\n3,4\r5,6\n7,8\n",
            b"a,b,y\n1,2,\"lone\rcr\"\n3,4,z\n5,x,z\n",
            b"a,b\n1,2\n3,4\n5,x\n",
            b"a,b\n1,2\n3\n5,6\n",
            b"a,b\n1,2\n3,4\n\"5,6\n7,8\n",
            b"a,b\n1,2\"\n3,4\n",
            b"a,b\n1,2\na,b\n",
            b"a,b\n",
            b"a,b\n\n\n",
            b"",
            b"\n\n",
            b"x,y\n1,2\n",
            // Lines blank to the reader though not empty (a row was lost
            // where a piece ended on one), a mark before a blank line.
            b"a,b\n1,2\n\"\"\n3,4\n",
            b"a,b\n1,2\n\" \"\n3,4\n",
            b"a,b\n1,2\n\"\"\"\"\n3,4\n",
            b"a,b\n1,2\n\"\" \n3,4\n",
            b"a,b\n1,2\n\"\"x\n3,4\n",
            b"\xef\xbb\xbf\na,b\n1,2\n3,4\n",
            b"\"\"\na,b\n1,2\n3,4\n",
            b"a\n1\n\"\"\n2\n",
            b"a\n1\n\n2\n",
            b"\xef\xbb\xbfa\n1\n2\n",
        ];
        for file in files {
            let expected = whole(file);
            for target in 1..=file.len() + 1 {
                assert_eq!(
                    in_pieces(file, target),
                    expected,
                    "{:?} in pieces of {target}",
                    String::from_utf8_lossy(file)
                );
            }
        }
    }

    #[test]
    fn rows_to_predict_count_the_sequences_cut_to_the_model() {
        let (_dir, path) = temp_csv(b"s\n1 2 3 4 5\n1 2\n1 2 3 4 5 6 7\n");
        let seq = SequenceColumns::new(vec!["s".into()], 4);
        let rows = read_model_rows(&path, &[], &[], None, Some(&seq), "y", false).unwrap();
        assert_eq!((rows.rows, rows.cut), (3, (2, 7)), "two rows longer than 4 positions, the longest 7");
        assert_eq!(rows.lines, [2, 3, 4]);
    }

    #[test]
    fn a_file_with_another_separator_is_named_as_such() {
        let err = model_rows(b"a;x\n1;2\n", &["a", "x"], None).unwrap_err();
        assert!(matches!(err, DataError::MissingColumn { .. }), "{err:?}");
        assert!(err.to_string().contains("the header is one column, `a;x`"), "{err}");
        assert!(err.to_string().contains("separated by semicolons") && err.to_string().contains("sep=\";\""), "{err}");
        // Tabs are named, and shown as `\t`, not as a raw tab.
        let err = model_rows(b"a\tx\n1\t2\n", &["a", "x"], None).unwrap_err().to_string();
        assert!(err.contains("`a\\tx`") && err.contains("separated by tabs") && !err.contains('\t'), "{err}");
        // Names of three letters and more: the header's one cell starts
        // with the first, and is still no typo of it.
        let err = model_rows(b"age;income\n1;2\n", &["age", "income"], None).unwrap_err().to_string();
        assert!(err.contains("separated by semicolons") && !err.contains("did you mean"), "{err}");
        // Another column missing from a comma-separated file: no such hint.
        let err = model_rows(b"a,b\n1,2\n", &["a", "x"], None).unwrap_err();
        assert!(err.to_string().contains("no column `x`: the model needs all 2 of its input columns"), "{err}");
        let err = model_rows(b"a,b\n1,2\n", &["x"], None).unwrap_err();
        assert!(err.to_string().contains("no column `x`: it is the model's only input column"), "{err}");
        let err = model_rows(b"a,b\n1,2\n", &["a", "x"], None).unwrap_err();
        assert!(!err.to_string().contains("separated"), "{err}");
        assert!(!err.to_string().contains("no header"), "{err}");
    }

    #[test]
    fn a_file_without_a_header_is_named_as_such() {
        let err = model_rows(b"5.1,3.5\n6.9,-3.1e2\n", &["a", "x"], None).unwrap_err().to_string();
        assert!(err.contains(":1: no column `a`"), "{err}");
        assert!(
            err.contains("line 1 holds numbers, not column names: the file has no header, so put one first: `a,x`"),
            "{err}"
        );
        // With a cell for the target, the header names it too.
        let err = model_rows(b"5.1,3.5,1\n", &["a", "x"], None).unwrap_err().to_string();
        assert!(err.contains("so put one first: `a,x,y`"), "{err}");
        // A class's name in that cell is the target's too; a name in a
        // line of only the inputs' width is a header.
        let err = model_rows(b"5.1,3.5,setosa\n", &["a", "x"], None).unwrap_err().to_string();
        assert!(err.contains("so put one first: `a,x,y`"), "{err}");
        for line in [&b"5.1,setosa\n"[..], b"5.1,b,c\n"] {
            let err = model_rows(line, &["a", "x"], None).unwrap_err().to_string();
            assert!(!err.contains("no header"), "{err}");
        }
        // Columns named by numbers (pandas' 0, 1, ...) with one misnamed: a
        // header, not data; nor is a line of another width.
        for line in [&b"0,2\n1,2\n"[..], b"1,2,3,4\n"] {
            let err = model_rows(line, &["0", "1"], None).unwrap_err().to_string();
            assert!(!err.contains("no header"), "{err}");
        }
    }

    #[test]
    fn rows_to_predict_keep_one_line_each() {
        // A quoted empty text is a row of its own, so outputs stay in line.
        let vocab = TokenVocabulary::fit("text", 4, ["great movie", "tedious plot"], None);
        let rows = model_rows(b"text\ngreat movie\n\"\"\ntedious plot\n", &[], Some(&vocab)).unwrap();
        assert_eq!(rows.rows, 3);
        assert_eq!(&rows.features[4..8], &[0.0; 4], "the empty text is all padding");
        // So with CRLF or CR line ends (Python's `csv.writer` writes CRLF),
        // between rows and as the last row.
        for bytes in [
            &b"text\r\ngreat movie\r\n\"\"\r\ntedious plot\r\n"[..],
            b"text\rgreat movie\r\"\"\rtedious plot\r",
            b"text\r\ngreat movie\r\ntedious plot\r\n\"\"\r\n",
            b"text\r\ngreat movie\r\ntedious plot\r\n\"\"",
        ] {
            let rows = model_rows(bytes, &[], Some(&vocab)).unwrap();
            assert_eq!(rows.rows, 3, "{:?}", String::from_utf8_lossy(bytes));
        }
        // A blank line between rows is an error at the line, in a file of
        // one column or several, and in the middle or before the first row.
        for (bytes, line) in [
            (&b"x\n0\n\n1\n"[..], 3),
            (b"x\n0\n   \n1\n", 3),
            (b"a,x\n1,0\n\n\n2,1\n", 3),
            (b"a,x\n\n1,0\n", 2),
            (b"a,x\r\n1,0\r\n\r\n2,1\r\n", 3),
            (b"a,x\r1,0\r\r2,1\r", 3),
            // A blank line of lone `\r`s in a file of `\n`s.
            (b"a,x\n1,0\r\r2,1\n", 3),
            (b"a,x\n1,0\n\r2,1\n", 3),
            (b"a,x\n1,0\r\r\r\n2,1\n", 3),
        ] {
            let features: &[&str] = if bytes.starts_with(b"a,") { &["a", "x"] } else { &["x"] };
            let err = model_rows(bytes, features, None).unwrap_err();
            let DataError::BlankRow { row, .. } = err else { panic!("{err:?}") };
            assert_eq!(row, line, "{:?}", String::from_utf8_lossy(bytes));
            assert!(err.to_string().contains("blank line between rows"), "{err}");
        }
        // After a quoted lone `\r` (here in the header), one line more.
        let err = model_rows(b"a,\"x\rq\"\n1,0\n\n2,1\n", &["a", "x\rq"], None).unwrap_err();
        assert!(matches!(err, DataError::BlankRow { row: 4, .. }), "{err:?}");
        // `\r\r\n` line ends hold no blank line (it was refused at line 1).
        let rows = model_rows(b"a,x\r\r\n1,0\r\r\n2,1\r\r\n", &["a", "x"], None).unwrap();
        assert_eq!(rows.rows, 2);
        // An empty number in a one-column file is named, not skipped.
        let err = model_rows(b"x\n0\n\"\"\n1\n", &["x"], None).unwrap_err();
        assert!(matches!(err, DataError::NotNumeric { row: 3, .. }), "{err:?}");
        // Blank lines at the end of the file are fine.
        let rows = model_rows(b"a,x\n1,0\n2,1\n\n  \n", &["a", "x"], None).unwrap();
        assert_eq!(rows.rows, 2);
        // `eval` (which needs the target) only sums its rows: it skips blank lines.
        let (_dir, path) = temp_csv(b"a,x,y\n1,0,1\n\n2,1,0\n");
        let names = ["a".to_string(), "x".to_string()];
        let rows = read_model_rows(&path, &names, &[], None, None, "y", true).unwrap();
        assert_eq!(rows.rows, 2);
    }
}
