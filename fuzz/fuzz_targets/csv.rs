//! Any bytes as a CSV file, read as each kind of model reads its data
//! (regression, classes, categorical columns, a text column, sequence
//! columns), then split and normalised as training does, and read again as
//! rows to predict on for the model each reading trains (as a service's
//! request is read): errors, never panics.
#![no_main]
use kynml_core::data::{parse_csv, Dataset};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for options in readings() {
        if let Ok(table) = parse_csv("fuzz.csv".as_ref(), data, &options) {
            if let Ok(dataset) = Dataset::from_table(table, 0.8, true, 1) {
                read_as_model_rows(data, &dataset);
            }
        }
    }
});

// `readings()`: shared with the corpus replay in kynml-core/tests/it.rs.
include!("../readings.rs");
