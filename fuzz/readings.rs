// The CSV readings that the `csv` fuzz target tries on every input, and
// that kynml-core/tests/it.rs replays the kept corpus with (then reads the
// same bytes as rows for each model that trained): both `include!` this
// file at their top level.

/// The ways of reading a file with a target column `y`: plain numbers for
/// regression and for classes, a categorical column `c`, a text column `t`,
/// and sequence columns `a` and `b`.
fn readings() -> Vec<kynml_core::data::TableOptions> {
    use kynml_core::data::{SequenceColumns, TableOptions, TextOptions};
    let plain = |classification| TableOptions { target: "y".into(), classification, ..Default::default() };
    vec![
        plain(false),
        plain(true),
        TableOptions { categorical: vec!["c".into()], ..plain(true) },
        TableOptions {
            tokens: Some(TextOptions { column: "t".into(), length: 8, vocab_limit: Some(5) }),
            ..plain(true)
        },
        TableOptions { sequence: Some(SequenceColumns::new(vec!["a".into(), "b".into()], 4)), ..plain(false) },
    ]
}

/// Reads `data` as a service's request or `kynml predict`'s file is read,
/// for the model that `dataset` would train (its features, vocabularies,
/// text or sequence columns), with and without the target: errors, never
/// panics.
fn read_as_model_rows(data: &[u8], dataset: &kynml_core::data::Dataset) {
    let info = &dataset.info;
    for need_target in [false, true] {
        let _ = kynml_core::data::parse_model_rows(
            data,
            "fuzz.csv".as_ref(),
            &info.feature_names,
            &info.categories,
            info.tokens.as_ref(),
            info.sequence.as_ref(),
            &info.target,
            need_target,
        );
    }
}
