//! Any bytes as a CSV file, read for regression and for classes, then split
//! and normalised as training does: errors, never panics.
#![no_main]
use kynml_fuzz::data::{parse_csv, Dataset, TableOptions};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for classification in [false, true] {
        let options = TableOptions { target: "y".into(), classification, ..Default::default() };
        if let Ok(table) = parse_csv("fuzz.csv".as_ref(), data, &options) {
            let _ = Dataset::from_table(table, 0.8, true, 1);
        }
    }
});
