//! What a trained model needs to know about its data, saved with the run.
//!
//! Inference reads the same columns by name, standardizes them with the same
//! [`Normalizer`], and turns output indices back into class names; the split
//! settings make the training run reproducible.

use std::path::PathBuf;

use crate::data::csv_table::SequenceColumns;
use crate::data::normalize::Normalizer;
use crate::data::vocab::{TokenVocabulary, Vocabulary};

/// What a run saves about its data: columns, classes, normalizer and split.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct DataInfo {
    /// The CSV file the model was trained on (written for a person to
    /// read: a name that is not UTF-8 has its odd bytes shown as U+FFFD).
    #[serde(serialize_with = "lossy_path")]
    pub source: PathBuf,
    /// The model's inputs, in order.
    pub feature_names: Vec<String>,
    /// The column the model predicts.
    pub target: String,
    /// Output index `i` means `class_names[i]`; `None` for regression.
    pub class_names: Option<Vec<String>>,
    /// Applied to the features before the model sees them, when the spec
    /// asked for `normalize = true`.
    pub normalizer: Option<Normalizer>,
    /// The categorical features' vocabularies, in feature order; runs from
    /// before categorical columns have none.
    #[serde(default)]
    pub categories: Vec<Vocabulary>,
    /// A text model's tokens: the features are the token positions of this
    /// text column. `None` for other models.
    #[serde(default)]
    pub tokens: Option<TokenVocabulary>,
    /// A sequence model's columns: the features are `length` positions of
    /// one value from each. `None` for other models.
    #[serde(default)]
    pub sequence: Option<SequenceColumns>,
    /// Fraction of rows asked for training (the spec's `split`), in [0, 1].
    pub train_fraction: f64,
    /// Seed the rows were shuffled with before splitting.
    pub seed: u64,
    /// Rows in the training part.
    pub train_rows: usize,
    /// Rows held out for validation.
    pub valid_rows: usize,
}

/// A path as text, its bytes that are not UTF-8 shown as U+FFFD: a
/// run trained from a folder so named wrote nothing at all.
fn lossy_path<S: serde::Serializer>(path: &std::path::Path, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&path.to_string_lossy())
}

impl DataInfo {
    /// The number of input features.
    pub fn n_features(&self) -> usize {
        self.feature_names.len()
    }

    /// The number of classes, or `None` for regression.
    pub fn n_classes(&self) -> Option<usize> {
        self.class_names.as_ref().map(Vec::len)
    }
}
