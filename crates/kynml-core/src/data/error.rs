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

#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error("cannot read {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// The file has no header row, or a header and no data rows.
    #[error("{}: no data: expected a header row and at least one data row", path.display())]
    Empty { path: PathBuf },

    #[error(
        "{}:1: no column named `{target}` to predict{}",
        path.display(),
        missing_target_hint(available, suggestion.as_deref())
    )]
    MissingTarget {
        path: PathBuf,
        target: String,
        /// Every column name in the header, in file order.
        available: Vec<String>,
        /// The closest column name, when one is close enough to be a typo.
        suggestion: Option<String>,
    },

    /// The target is the only column, so there is nothing to learn from.
    #[error("{}:1: no feature columns: `{target}` is the only column", path.display())]
    NoFeatures { path: PathBuf, target: String },

    #[error(
        "{}:1: column name `{name}` appears more than once: columns {}",
        path.display(),
        join_numbers(columns)
    )]
    DuplicateColumn {
        path: PathBuf,
        name: String,
        /// 1-based positions of every column with this name.
        columns: Vec<usize>,
    },

    #[error(
        "{}:{row}: expected {expected} cells as in the header, found {found}",
        path.display()
    )]
    Ragged { path: PathBuf, row: usize, expected: usize, found: usize },

    #[error(
        "{}:{row}: column {column} (`{column_name}`) is not a number: found {value:?}",
        path.display()
    )]
    NotNumeric {
        path: PathBuf,
        row: usize,
        /// 1-based position in the file.
        column: usize,
        column_name: String,
        value: String,
    },

    #[error(
        "{}:{row}: column {column} (`{column_name}`) must be a finite number: found {value:?}",
        path.display()
    )]
    NonFinite { path: PathBuf, row: usize, column: usize, column_name: String, value: String },

    /// A classification target cell that is empty: a missing label cannot
    /// stand for a class.
    #[error(
        "{}:{row}: column {column} (`{column_name}`) has no class label: found \"\"",
        path.display()
    )]
    EmptyLabel { path: PathBuf, row: usize, column: usize, column_name: String },

    #[error("{}:{row}: the line is not valid UTF-8 text", path.display())]
    BadEncoding { path: PathBuf, row: usize },

    #[error(
        "{}: {rows} data row{} but at least {needed} are needed to hold some out for validation",
        path.display(),
        if *rows == 1 { "" } else { "s" }
    )]
    TooFewRows { path: PathBuf, rows: usize, needed: usize },

    #[error("the training fraction must be between 0 and 1: found {fraction}")]
    BadFraction { fraction: f64 },

    /// A column the model was trained on is not in the file.
    #[error(
        "{}:1: no column `{name}`: the model needs its {count} input columns{}",
        path.display(),
        suggestion.as_ref().map_or(String::new(), |s| format!("; did you mean `{s}`?"))
    )]
    MissingColumn { path: PathBuf, name: String, count: usize, suggestion: Option<String> },

    /// A column the model was not trained on (other than its target).
    #[error(
        "{}:1: column {column} (`{name}`) is not one of the model's inputs; remove it (the model's target `{target}` may stay)",
        path.display()
    )]
    ExtraColumn { path: PathBuf, column: usize, name: String, target: String },

    /// A label the model has no class for.
    #[error(
        "{}:{row}: column {column} (`{column_name}`) holds {value:?}, which is not one of the model's classes ({})",
        path.display(),
        known.join(", ")
    )]
    UnknownClass { path: PathBuf, row: usize, column: usize, column_name: String, value: String, known: Vec<String> },
}

impl DataError {
    /// Attaches the data file to a [`SplitError`], which knows only counts.
    pub(crate) fn from_split(path: PathBuf, err: SplitError) -> Self {
        match err {
            SplitError::TooFewRows { rows, needed } => DataError::TooFewRows { path, rows, needed },
            SplitError::BadFraction { fraction } => DataError::BadFraction { fraction },
        }
    }
}

fn missing_target_hint(available: &[String], suggestion: Option<&str>) -> String {
    match suggestion {
        Some(name) => format!("; did you mean `{name}`?"),
        None if available.is_empty() => String::new(),
        None => {
            let names: Vec<String> = available.iter().map(|n| format!("`{n}`")).collect();
            format!("; the columns are {}", names.join(", "))
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
