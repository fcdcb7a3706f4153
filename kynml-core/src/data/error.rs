//! Everything that can go wrong while turning a CSV file into a [`Dataset`].
//!
//! Each variant carries what a program needs to act on the failure (the file,
//! the 1-based line a user sees in an editor, the 1-based column index and its
//! name, what was expected and what was found), and its message is one short
//! lower-case sentence in the `file:line: ...` form editors can jump to.
//!
//! [`Dataset`]: crate::data::Dataset

use std::path::PathBuf;

use crate::data::split::SplitError;
use crate::spec::suggest::visible;

/// Why a data file could not be turned into rows.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DataError {
    /// A finite value that `normalize = true` takes past f32: its distance
    /// from the training rows' mean, over their spread, overflows.
    #[error(
        "{}{}: `{column}` = {value:e} is beyond what the model can take: normalised with the training rows' mean \
         {} and spread {}, it exceeds a 32-bit float (about 3.4e38); rescale the column in the data",
        path.display(),
        line.map_or(String::new(), |l| format!(":{l}")),
        statistic(*mean),
        statistic(*std)
    )]
    Normalized {
        /// The data file.
        path: PathBuf,
        /// The row's line, where the table knows it.
        line: Option<usize>,
        /// The column's name.
        column: String,
        /// The value as read.
        value: f32,
        /// The training rows' mean of the column.
        mean: f32,
        /// Their spread.
        std: f32,
    },

    /// A device or a socket stands where the data file should: never read,
    /// since such a file need not end (`/dev/zero` filled memory).
    #[error("{}: it is {kind}, not a data file; give a CSV file", path.display())]
    NotAFile {
        /// The path given as data.
        path: PathBuf,
        /// "a character device", "a block device", "a socket".
        kind: &'static str,
    },

    /// The file is compressed (its first bytes are an archive's).
    #[error("{}: the file is {kind}-compressed, not a CSV text: `{tool}` it first", path.display())]
    Compressed {
        /// The data file.
        path: PathBuf,
        /// `gzip`, `zip`, `xz`, `zstd` or `bzip2`.
        kind: &'static str,
        /// The command that decompresses it.
        tool: &'static str,
    },

    /// The file is UTF-16 text (its first bytes are UTF-16's byte-order mark).
    #[error(
        "{}: the file is UTF-16 text (it starts with UTF-16's byte-order mark), not UTF-8: save it as UTF-8 \
         (Excel: \"CSV UTF-8\"; or `iconv -f UTF-16 -t UTF-8`)",
        path.display()
    )]
    Utf16 {
        /// The data file.
        path: PathBuf,
    },

    /// Excel's separator hint (`sep=;`) on a line of its own above the header.
    #[error(
        "{}:{line}: `sep=` is Excel's separator hint, not the header: remove that line{}",
        path.display(),
        match sep.as_str() {
            "," => String::new(),
            // KynML reads commas: the file is to be saved as CSV too.
            other => format!(
                " and save the file comma-separated, as KynML reads it (its cells are separated by {}; pandas: \
                 `pd.read_csv(path, sep=\"{}\", skiprows=1).to_csv(out, index=False)`)",
                if other.chars().count() == 1 { format!("`{other}`") } else { other.to_string() },
                if other == "a tab" { "\\t" } else { other }
            ),
        }
    )]
    ExcelSeparator {
        /// The data file.
        path: PathBuf,
        /// Its line.
        line: usize,
        /// The separator it names: `;`, `,`, or "a tab".
        sep: String,
    },

    /// A row that repeats the header: files joined with their headers.
    #[error(
        "{}:{line}: this row repeats the header (line {header_line}): files joined with their headers? remove it",
        path.display()
    )]
    RepeatedHeader {
        /// The data file.
        path: PathBuf,
        /// The row's line.
        line: usize,
        /// The header's line.
        header_line: usize,
    },

    /// The file could not be opened or read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The data file.
        path: PathBuf,
        /// What the system or the CSV reader reported.
        #[source]
        source: std::io::Error,
    },

    /// The file has no header row, or a header and no data rows.
    #[error(
        "{}: no data: {}at least {}",
        path.display(),
        if *header {
            "a header row and no data row below it; expected "
        } else {
            "the file is empty (or blank lines alone); expected a header row and "
        },
        if *needed == 1 { "one data row".to_string() } else { format!("{needed} data rows (some held out for validation)") }
    )]
    Empty {
        /// The data file.
        path: PathBuf,
        /// Whether it has a header row (then no data row below it).
        header: bool,
        /// The data rows the reader needs: 2 to train (one for each part of
        /// the split), 1 to predict.
        needed: usize,
    },

    /// The first line holds only numbers, none of them the target's name:
    /// a file without a header line, whose first row would be taken for
    /// column names.
    #[error(
        "{}:{line}: the first line holds only numbers ({}), not column names: the file seems to have no \
         header line; add one naming each column, the target `{target}` among them",
        path.display(),
        first.iter().take(3).map(|c| format!("`{c}`")).collect::<Vec<_>>().join(", ") + if first.len() > 3 { ", ..." } else { "" }
    )]
    NoHeader {
        /// The data file.
        path: PathBuf,
        /// The line it is on (blank lines may come before it).
        line: usize,
        /// The first line's cells.
        first: Vec<String>,
        /// The target column the spec names.
        target: String,
    },

    /// The header has no column named as the target.
    #[error(
        "{}:{line}: no column named `{target}` to predict{}",
        path.display(),
        missing_target_hint(available, suggestion.as_deref())
    )]
    MissingTarget {
        /// The data file.
        path: PathBuf,
        /// The header's line (blank lines may come before it).
        line: usize,
        /// The column that was asked for.
        target: String,
        /// Every column name in the header, in file order.
        available: Vec<String>,
        /// The closest column name, when one is close enough to be a typo.
        suggestion: Option<String>,
    },

    /// The target is the only column, so there is nothing to learn from.
    #[error("{}:1: no feature columns: `{target}` is the only column", path.display())]
    NoFeatures {
        /// The data file.
        path: PathBuf,
        /// The target column, the only one in the header.
        target: String,
    },

    /// Two or more header cells with the same name.
    #[error(
        "{}:1: column name `{name}` appears more than once: columns {}",
        path.display(),
        join_numbers(columns)
    )]
    DuplicateColumn {
        /// The data file.
        path: PathBuf,
        /// The repeated name.
        name: String,
        /// 1-based positions of every column with this name.
        columns: Vec<usize>,
    },

    /// A header cell with no name: a pandas index saved without
    /// `index=False`, or a comma at the end of every line. Such a column
    /// would be read as a feature, or fail on its empty cells.
    #[error(
        "{}:{line}: column {column} of the header's {of} has no name, and every column needs one ({}); \
         name it, or remove the column",
        path.display(),
        if *column == 1 { "pandas writes its row index unnamed first unless saved with index=False" }
        else if column == of { "a comma at the end of every line makes an empty last column" }
        else { "two commas in a row in the header" }
    )]
    UnnamedColumn {
        /// The data file.
        path: PathBuf,
        /// 1-based line of the header.
        line: usize,
        /// 1-based position of the unnamed column.
        column: usize,
        /// Columns in the header.
        of: usize,
    },

    /// A data row with a different number of cells from the header.
    #[error(
        "{}:{row}: expected {expected} cells as in the header, found {found}",
        path.display()
    )]
    Ragged {
        /// The data file.
        path: PathBuf,
        /// 1-based line of the row in the file (the header is line 1).
        row: usize,
        /// Cells in the header.
        expected: usize,
        /// Cells in this row.
        found: usize,
    },

    /// A quoted cell whose closing quote never comes: the reader would take
    /// the rest of the file as that one cell.
    #[error(
        "{}:{row}: column {column} opens a quote (\") that is never closed, so the rest of the file would be read \
         as one cell; close it, or write a quote inside a quoted cell as two (\"\")",
        path.display()
    )]
    UnclosedQuote {
        /// The data file.
        path: PathBuf,
        /// 1-based line where the quote opens (the header is line 1).
        row: usize,
        /// 1-based column of the cell it opens.
        column: usize,
    },

    /// A blank line among rows whose outputs are written in order
    /// (`predict`), where skipping it would shift every later output
    /// against its input line.
    #[error(
        "{}:{row}: blank line between rows: each row gets one output line, in order, so a skipped line would \
         shift every later output against its input; remove the line{}",
        path.display(),
        if *single { ", or write an empty text as \"\"" } else { "" }
    )]
    BlankRow {
        /// The data file.
        path: PathBuf,
        /// 1-based line of the first blank line.
        row: usize,
        /// Whether the file has a single column, where `""` is an empty cell.
        single: bool,
    },

    /// A cell that should hold a number and does not parse as one.
    #[error(
        "{}:{row}: column {column} (`{column_name}`) is not a number: found {value:?}{hint}",
        path.display()
    )]
    NotNumeric {
        /// The data file.
        path: PathBuf,
        /// 1-based line of the row in the file (the header is line 1).
        row: usize,
        /// 1-based position in the file.
        column: usize,
        /// The column's name in the header.
        column_name: String,
        /// The cell's text, trimmed.
        value: String,
        /// A sentence on what to do, starting with `; `, or empty.
        hint: String,
    },

    /// A cell that reads as NaN or infinity, or overflows an f32.
    #[error(
        "{}:{row}: column {column} (`{column_name}`) must be a finite number: found {value:?}{}{}",
        path.display(),
        beyond_f32(value),
        nan_hint(value)
    )]
    NonFinite {
        /// The data file.
        path: PathBuf,
        /// 1-based line of the row in the file (the header is line 1).
        row: usize,
        /// 1-based position of the column in the file.
        column: usize,
        /// The column's name in the header.
        column_name: String,
        /// The cell's text, trimmed.
        value: String,
    },

    /// A classification target cell that is empty: a missing label cannot
    /// stand for a class.
    #[error(
        "{}:{row}: column {column} (`{column_name}`) has no class label: found \"\"",
        path.display()
    )]
    EmptyLabel {
        /// The data file.
        path: PathBuf,
        /// 1-based line of the row in the file (the header is line 1).
        row: usize,
        /// 1-based position of the column in the file.
        column: usize,
        /// The column's name in the header.
        column_name: String,
    },

    /// A cell that is not valid UTF-8.
    #[error(
        "{}:{row}: column {column}{} is not valid UTF-8 text (byte {byte:#04X} at character {at}); \
         save the file as UTF-8",
        path.display(),
        column_name.as_ref().map(|n| format!(" (`{n}`)")).unwrap_or_default(),
        at = valid_chars + 1
    )]
    BadEncoding {
        /// The data file.
        path: PathBuf,
        /// 1-based line of the row in the file (the header is line 1).
        row: usize,
        /// 1-based position of the column in the file.
        column: usize,
        /// The column's name in the header (none for a header cell).
        column_name: Option<String>,
        /// The first byte that is not UTF-8.
        byte: u8,
        /// How many characters of the cell are valid before it.
        valid_chars: usize,
    },

    /// Too few data rows to hold any out for validation.
    #[error(
        "{}: {rows} data row{} but at least {needed} are needed to hold some out for validation",
        path.display(),
        if *rows == 1 { "" } else { "s" }
    )]
    TooFewRows {
        /// The data file.
        path: PathBuf,
        /// Data rows in the file.
        rows: usize,
        /// The fewest rows a split accepts (`MIN_ROWS`).
        needed: usize,
    },

    /// The training fraction is NaN or outside [0, 1].
    #[error("the training fraction must be between 0 and 1: found {fraction}")]
    BadFraction {
        /// The fraction that was given.
        fraction: f64,
    },

    /// A categorical column's distinct values, or a text's distinct tokens,
    /// number more than an index can tell apart: indices travel among the
    /// features as 32-bit floats, exact up to 2^24.
    #[error(
        "{}: `{column}` holds {found} distinct {what} in the training rows, more than the {most} a model can \
         tell apart (their indices travel as 32-bit floats, exact up to 2^24); {hint}",
        path.display()
    )]
    TooManyValues {
        /// The data file.
        path: PathBuf,
        /// The categorical or text column.
        column: String,
        /// `values` or `tokens`.
        what: &'static str,
        /// How many the training rows hold.
        found: usize,
        /// The most a model takes.
        most: usize,
        /// What to do about it.
        hint: &'static str,
    },

    /// A column the spec declares categorical (or as the text) is not in the file.
    #[error(
        "{}:1: no column `{name}`, which the dataset declares {what}{}",
        path.display(),
        suggestion.as_ref().map_or(String::new(), |s| did_you_mean_column(s))
    )]
    MissingCategorical {
        /// The data file.
        path: PathBuf,
        /// The column the spec names.
        name: String,
        /// `categorical` or `the text`.
        what: &'static str,
        /// A column of the file whose name is close enough to be a typo.
        suggestion: Option<String>,
    },

    /// A feature column beside the sequence columns of a sequence model.
    #[error(
        "{}:1: column {column} (`{name}`) is a feature beside the sequence `{sequence}`; a model of `input seq LxC` \
         reads only its sequence columns (and the target): remove the column, or add it to `sequence`",
        path.display()
    )]
    BesideSequence {
        /// The data file.
        path: PathBuf,
        /// 1-based position.
        column: usize,
        /// The column's name.
        name: String,
        /// The sequence columns, joined for the message.
        sequence: String,
    },

    /// A value of a sequence cell that is not a finite number.
    #[error(
        "{}:{row}: column {column} (`{column_name}`) holds a sequence of numbers separated by spaces, but its \
         value {position} is {value:?}{}{}",
        path.display(),
        beyond_f32(value),
        sequence_value_hint(value)
    )]
    SequenceValue {
        /// The data file.
        path: PathBuf,
        /// 1-based line of the row in the file (the header is line 1).
        row: usize,
        /// 1-based position in the file.
        column: usize,
        /// The column's name in the header.
        column_name: String,
        /// 1-based position of the value in the cell.
        position: usize,
        /// The value's text.
        value: String,
    },

    /// A sequence cell with nothing between two commas or semicolons, or
    /// one at its start or end: a value is missing.
    #[error(
        "{}:{row}: column {column} (`{column_name}`) misses its value {position}: a comma or semicolon with no \
         number before or after it; write the missing value, or separate the values by spaces only",
        path.display()
    )]
    SequenceGap {
        /// The data file.
        path: PathBuf,
        /// 1-based line of the row in the file (the header is line 1).
        row: usize,
        /// 1-based position in the file.
        column: usize,
        /// The column's name in the header.
        column_name: String,
        /// 1-based position of the missing value in the cell.
        position: usize,
    },

    /// Two sequence columns of one row of different lengths.
    #[error(
        "{}:{row}: `{first}` holds {first_len} values and `{other}` {other_len}; each position of a sequence \
         takes one value from every sequence column",
        path.display()
    )]
    SequenceLengths {
        /// The data file.
        path: PathBuf,
        /// 1-based line of the row in the file (the header is line 1).
        row: usize,
        /// The first sequence column.
        first: String,
        /// Its number of values.
        first_len: usize,
        /// The column that differs.
        other: String,
        /// Its number of values.
        other_len: usize,
    },

    /// A feature column beside the text column of a text model.
    #[error(
        "{}:1: column {column} (`{name}`) is a feature beside the text `{text}`; a model of `input seq` reads \
         only its text (and the target): remove the column, or write a text of it",
        path.display()
    )]
    BesideText {
        /// The data file.
        path: PathBuf,
        /// 1-based position.
        column: usize,
        /// The column's name.
        name: String,
        /// The text column.
        text: String,
    },

    /// The target is declared categorical.
    #[error(
        "{}: `{name}` is the target and cannot also be a categorical feature: remove it from `categorical` (a class target needs no listing: `loss = cross_entropy` reads its labels)",
        path.display()
    )]
    CategoricalTarget {
        /// The data file.
        path: PathBuf,
        /// The target column.
        name: String,
    },

    /// A column the model was trained on is not in the file.
    #[error(
        "{}:1: no column `{name}`: {}{}",
        path.display(),
        match count {
            1 => "it is the model's only input column".to_string(),
            n => format!("the model needs all {n} of its input columns"),
        },
        match (suggestion, layout) {
            (Some(s), _) => did_you_mean_column(s),
            (None, Some(HeaderLayout::Numbers(columns))) => format!(
                "; line 1 holds numbers, not column names: the file has no header, so put one first: `{}`",
                cut(columns, 120)
            ),
            (None, Some(HeaderLayout::OneColumn(header))) => one_column_hint(header),
            (None, None) => String::new(),
        }
    )]
    MissingColumn {
        /// The data file.
        path: PathBuf,
        /// The input column that is missing.
        name: String,
        /// How many input columns the model has.
        count: usize,
        /// A column of the file, not among the model's inputs, whose name is close
        /// enough to be a typo.
        suggestion: Option<String>,
        /// What the header line shows of the file's layout, when it tells
        /// why the column is missing.
        layout: Option<HeaderLayout>,
    },

    /// A column the model was not trained on (other than its target).
    #[error(
        "{}:1: column {column} (`{name}`) is not one of the model's inputs; remove it (the model's target `{target}` may stay)",
        path.display()
    )]
    ExtraColumn {
        /// The data file.
        path: PathBuf,
        /// 1-based position of the column in the file.
        column: usize,
        /// The column's name in the header.
        name: String,
        /// The model's target column, which may stay in the file.
        target: String,
    },

    /// A label the model has no class for.
    #[error(
        "{}:{row}: column {column} (`{column_name}`) holds {value:?}, which is not one of the model's classes ({})",
        path.display(),
        known.join(", ")
    )]
    UnknownClass {
        /// The data file.
        path: PathBuf,
        /// 1-based line of the row in the file (the header is line 1).
        row: usize,
        /// 1-based position of the target column in the file.
        column: usize,
        /// The column's name in the header.
        column_name: String,
        /// The label as found, trimmed.
        value: String,
        /// The model's class names, in output order.
        known: Vec<String>,
    },
    /// A [`Table`](crate::data::Table) built in code whose parts do not
    /// agree (a file's table always does).
    #[error("the table of {} does not hold together: {what}", path.display())]
    Inconsistent {
        /// The table's `path`.
        path: PathBuf,
        /// What disagrees, in words.
        what: String,
    },
}

impl DataError {
    /// A not-a-number error with its hint replaced by `hint` (`; ...` or
    /// empty): the categorical hint fits a feature column of training data
    /// only.
    pub(crate) fn with_hint(self, hint: String) -> Self {
        match self {
            DataError::NotNumeric { path, row, column, column_name, value, .. } => {
                DataError::NotNumeric { path, row, column, column_name, value, hint }
            }
            other => other,
        }
    }

    /// Attaches the data file to a [`SplitError`], which knows only counts.
    pub(crate) fn from_split(path: PathBuf, err: SplitError) -> Self {
        match err {
            SplitError::TooFewRows { rows, needed } => DataError::TooFewRows { path, rows, needed },
            SplitError::BadFraction { fraction } => DataError::BadFraction { fraction },
        }
    }
}

/// Why a file's header lacks the model's columns, as its first line shows.
#[derive(Debug, Clone, PartialEq)]
pub enum HeaderLayout {
    /// The header is one column whose name holds `;`, a tab or `|`: the
    /// file is not comma-separated. Holds that name.
    OneColumn(String),
    /// The first line is all numbers, none a column's name: the file has no
    /// header. Holds the header to put first (the model's input columns, and
    /// its target where the line has a cell for it), comma-separated.
    Numbers(String),
}

/// A header line to show, cut after `max` characters.
fn cut(header: &str, max: usize) -> String {
    if header.chars().count() <= max {
        return header.to_string();
    }
    header.chars().take(max).collect::<String>() + "..."
}

/// For a header read as one column that holds another separator: which
/// one, the header with its tabs shown as `\t`, and how to make a CSV.
fn one_column_hint(header: &str) -> String {
    let seps = [('\t', "tabs", "\\t"), (';', "semicolons", ";"), ('|', "bars", "|")];
    let (_, name, written) = seps.iter().max_by_key(|(c, ..)| header.matches(*c).count()).copied().unwrap_or(seps[0]);
    let shown = cut(&header.replace('\t', "\\t"), 60);
    format!(
        "; the header is one column, `{shown}`: KynML reads comma-separated files, and this one seems separated by \
         {name}; save it as CSV first (pandas: `pd.read_csv(path, sep=\"{written}\").to_csv(out, index=False)`)"
    )
}

/// `; did you mean `name`?`, or, for a name that differs from what was
/// asked by characters no one sees (which a spec cannot write), where
/// they are and that they are to go.
pub(crate) fn did_you_mean_column(name: &str) -> String {
    let shown = visible(name);
    if shown == name {
        return format!("; did you mean `{name}`?");
    }
    format!("; the file's column `{shown}` holds a character no one sees: remove it from the file's header")
}

fn missing_target_hint(available: &[String], suggestion: Option<&str>) -> String {
    match suggestion {
        Some(name) => did_you_mean_column(name),
        None if available.is_empty() => String::new(),
        // One column whose name holds separators: not a comma-separated file.
        None if available.len() == 1 && available[0].contains([';', '\t', '|']) => one_column_hint(&available[0]),
        None => {
            let names: Vec<String> = available.iter().map(|n| format!("`{}`", visible(n))).collect();
            // Whole numbers may be pandas' names of unnamed columns, or a
            // first row of data: said both ways.
            let numbers = available.iter().all(|n| n.parse::<u64>().is_ok());
            let data = if numbers {
                " (if that line is a row of data, the file has no header line: add one naming each column)"
            } else {
                ""
            };
            format!("; the columns are {}{data}", names.join(", "))
        }
    }
}

/// `2 and 5`, or `2, 5 and 7`.
fn join_numbers(numbers: &[usize]) -> String {
    let parts: Vec<String> = numbers.iter().map(usize::to_string).collect();
    match parts.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => parts.join(""),
    }
}

/// A mean or spread in a message: four decimals, or four significant
/// digits in exponent form where decimals would show thirty digits or none.
pub(crate) fn statistic(v: f32) -> String {
    if v != 0.0 && !(1e-4..1e6).contains(&v.abs()) {
        format!("{v:.4e}")
    } else {
        format!("{v:.4}")
    }
}

/// For a number that is written out but overflows an f32 (`1e300`, or
/// `1e400`, past even an f64), what is wrong with it; empty for NaN and
/// the infinities written as words.
fn beyond_f32(text: &str) -> &'static str {
    let written = text.trim().bytes().any(|b| b.is_ascii_digit());
    match text.trim().parse::<f64>() {
        Ok(v) if v.is_finite() || (v.is_infinite() && written) => {
            ", which is too large for a 32-bit float (at most about ±3.4e38)"
        }
        _ => "",
    }
}

/// For a NaN cell: what pandas writes for a value nobody filled in (as
/// `NA`, which is said as a missing value too).
fn nan_hint(text: &str) -> &'static str {
    match text.trim().trim_start_matches(['+', '-']).eq_ignore_ascii_case("nan") {
        true => "; NaN marks a missing value, which KynML does not fill in: fill or drop such rows",
        false => "",
    }
}

/// What a sequence's value must be, where it is not a number at all
/// (`nan`, `inf`, a word): a shorter sequence is written with fewer values,
/// not padded (the ONNX export's NaN padding is not read back).
fn sequence_value_hint(text: &str) -> &'static str {
    match text.trim().parse::<f64>() {
        Ok(v) if v.is_finite() || text.trim().bytes().any(|b| b.is_ascii_digit()) => "",
        Ok(_) => {
            "; each value must be a finite number (a shorter sequence is written with fewer values, not padded with \
             nan)"
        }
        Err(_) => "; each value must be a finite number",
    }
}
