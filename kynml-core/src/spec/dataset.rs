//! Validation of a `dataset NAME:` block.

use std::path::PathBuf;

use super::args::{self, bind};
use super::ast::{Block, Value, ValueKind};
use super::diagnostic::Diagnostic;
use super::keys::settings;
use super::suggest;
use super::types::{DatasetSpec, Spanned};
use super::values::{self, Range};

/// Sources the engine can read.
const SOURCES: &[&str] = &["csv"];

pub(super) fn dataset(block: &Block, d: &mut Vec<Diagnostic>) -> Option<DatasetSpec> {
    let s = settings(block, d);
    let source = s.required("source", "source = csv(\"data/train.csv\")", d).and_then(|v| source(v, d));
    let target = s.required("target", "target = \"label\"", d).and_then(|v| values::string(v, "`target`", d));
    let split = s.float("split", 0.8, Range::OpenUnit, d);
    let normalize = s.boolean("normalize", false, d);
    let num_workers = s.count("num_workers", 0, 0, d);
    let pin_memory = s.boolean("pin_memory", false, d);
    let prefetch =
        s.optional("prefetch", |v| values::count(v, "`prefetch`", 0, d).map(|value| Spanned { value, span: v.span }));
    Some(DatasetSpec {
        name: block.name.clone()?,
        source: source?,
        target: target?,
        split: split?,
        normalize: normalize?.value,
        num_workers: num_workers?,
        pin_memory: pin_memory?,
        prefetch: prefetch?,
    })
}

/// `csv("data/train.csv")` or `csv(path="...")`; the span is the path's.
fn source(v: &Value, d: &mut Vec<Diagnostic>) -> Option<Spanned<PathBuf>> {
    let Some(callee) = args::callee(v) else {
        let mut diagnostic = Diagnostic::new(
            v.span,
            format!("expected `csv(\"path\")` for `source`, found {}", v.describe()),
            "expected `csv(\"path\")`",
        );
        match &v.kind {
            ValueKind::Error => return None,
            ValueKind::Str(path) => diagnostic = diagnostic.with_help(format!("write `csv(\"{path}\")`")),
            _ => {}
        }
        d.push(diagnostic);
        return None;
    };
    if !SOURCES.contains(&callee.name) {
        let help = suggest::help(callee.name, SOURCES.iter().copied())
            .unwrap_or_else(|| "only `csv(\"path\")` is supported".to_string());
        d.push(
            Diagnostic::new(v.span, format!("unsupported data source `{}`", callee.name), "unknown source")
                .with_help(help),
        );
        return None;
    }
    let args = bind(callee, &["path"], d);
    let path = args.required("path", "csv(\"data/train.csv\")", d);
    args.ok()?;
    values::path(path?, "the path of `csv`", d)
}
