// The CSV readings that the `csv` fuzz target tries on every input, and
// that kynml-core/tests/it.rs replays the kept corpus with: both `include!`
// this file at their top level.

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
