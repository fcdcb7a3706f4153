//! Data: from a CSV file to batches of rows.
//!
//! [`read_csv`] reads a whole file into a [`Table`] (numeric features, one
//! target), checking every cell and reporting problems by line and column.
//! [`Dataset::from_table`] splits it into training and validation parts with
//! a seed ([`split_indices`]) and, when asked, standardizes features with a
//! [`Normalizer`] fitted on the training part only. The training loop then
//! fills a reused [`Batch`] with [`Dataset::gather`]. [`DataInfo`] is what
//! the run saves for inference: feature names, class names, normalizer.
//!
//! ```no_run
//! # use std::path::Path;
//! # use kynml_core::data::{read_csv, Batch, Dataset, Split, TableOptions};
//! let opts = TableOptions { target: "progression".into(), ..Default::default() };
//! let table = read_csv(Path::new("examples/diabetes/diabetes.csv"), &opts)?;
//! let data = Dataset::from_table(table, 0.8, true, 0)?;
//! let mut batch = Batch::default();
//! let order: Vec<usize> = (0..data.train.len()).collect();
//! for step in order.chunks(32) {
//!     data.gather(Split::Train, step, &mut batch);
//!     // batch.features: step.len() × n_features, batch.labels: step.len()
//! }
//! # Ok::<(), kynml_core::data::DataError>(())
//! ```

mod csv_table;
pub(crate) use csv_table::line_breaks;
mod dataset;
pub(crate) mod error;
mod info;
mod normalize;
mod pieces;
mod prefetch;
mod split;
mod synthetic;
mod vocab;

pub use csv_table::{
    class_of, looks_missing, open_data_file, parse_csv, parse_csv_reporting, parse_model_rows, read_csv,
    read_csv_reporting, read_model_rows, sequence_names, CategoryCells, Cells, ModelRows, SequenceColumns, Table,
    TableOptions, Targets, TextCells, TextOptions, REPORT_EVERY,
};
pub(crate) use csv_table::{parse_model_rows_at, read_data_file};
pub use dataset::{Batch, Dataset, Labels, Prepared, Split, SplitData};
pub use error::{DataError, HeaderLayout};
pub use info::DataInfo;
pub use normalize::Normalizer;
pub use pieces::{Piece, RowPieces, PIECE_BYTES};
pub use prefetch::{within as loader_within, BatchFeed, Loader};

pub use split::{split_indices, SplitError, MIN_ROWS};
pub use synthetic::synthetic_for;
pub use vocab::{TokenVocabulary, Vocabulary};
