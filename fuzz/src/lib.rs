//! The parsers KynML reads untrusted files with, compiled from kynml-core's
//! own sources: the `.kyn` language (`spec/`), CSV data (`data/`) and the
//! checkpoint format (`checkpoint/format.rs`). They do not touch Burn, so
//! including them here keeps the fuzz build to seconds instead of building
//! Burn again under nightly with sanitizers.
#![allow(dead_code, unused_imports, missing_docs)]

#[path = "../../kynml-core/src/spec/mod.rs"]
pub mod spec;

#[path = "../../kynml-core/src/data/mod.rs"]
pub mod data;

#[path = "../../kynml-core/src/rng.rs"]
pub mod rng;

#[path = "../../kynml-core/src/checkpoint/format.rs"]
pub mod checkpoint_format;
