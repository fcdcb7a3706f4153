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
    let target =
        s.required("target", "target = \"label\"", d).and_then(|v| values::string(v, "`target`", d)).map(trimmed);
    let categorical =
        s.optional("categorical", |v| columns(v, "categorical", target.as_ref(), d)).map(Option::unwrap_or_default);
    let sequence =
        s.optional("sequence", |v| columns(v, "sequence", target.as_ref(), d)).map(Option::unwrap_or_default);
    let tokens = s.optional("tokens", |v| values::string(v, "`tokens`", d).map(trimmed));
    let vocab = s.optional("vocab", |v| values::count(v, "`vocab`", 1, d).map(|value| Spanned { value, span: v.span }));
    if let (Some(Some(t)), Some(target)) = (&tokens, &target) {
        if t.value == target.value {
            d.push(
                Diagnostic::new(t.span, format!("`{}` is the target, not the text to read", t.value), "the target")
                    .with_help("name the column that holds the texts"),
            );
        }
    }
    if let (Some(Some(t)), Some(c)) = (&tokens, categorical.as_ref().and_then(|c| c.first())) {
        d.push(
            Diagnostic::new(c.span, format!("categorical columns beside the text `{}`", t.value), "not with `tokens`")
                .with_help("a text model (`tokens = ...`, `input seq L`) reads only its text"),
        );
    }
    if let (Some(seq), Some(other)) = (sequence.as_ref().and_then(|s| s.first()), &categorical) {
        let beside = match (&tokens, other.first()) {
            (Some(Some(t)), _) => Some((t.span, format!("a text (`tokens = \"{}\"`)", t.value))),
            (_, Some(c)) => Some((c.span, format!("categorical columns (`{}`)", c.value))),
            _ => None,
        };
        if let Some((span, what)) = beside {
            d.push(
                Diagnostic::new(span, format!("{what} beside the sequence `{}`", seq.value), "not with `sequence`")
                    .with_help("a sequence model (`sequence = ...`, `input seq LxC`) reads only its sequence columns"),
            );
        }
    }
    if let (Some(None), Some(Some(v))) = (&tokens, &vocab) {
        d.push(
            Diagnostic::new(v.span, "`vocab` limits the tokens of a text, but no `tokens` column is named", "no text")
                .with_help("name the text column: `tokens = \"review\"`"),
        );
    }
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
        categorical: categorical?,
        tokens: tokens?,
        vocab: vocab?,
        sequence: sequence?,
        split: split?,
        normalize: normalize?.value,
        num_workers: num_workers?,
        pin_memory: pin_memory?,
        prefetch: prefetch?,
    })
}

/// `categorical = ["city", "color"]`, `sequence = ["x", "y"]`: column
/// names, as strings or bare words, under `key`.
/// A column's name as the data's header gives it: without the spaces
/// around it, which a CSV header's names are read without.
fn trimmed(mut name: Spanned<String>) -> Spanned<String> {
    if name.value.trim().len() != name.value.len() {
        name.value = name.value.trim().to_string();
    }
    name
}

fn columns(
    v: &Value,
    key: &str,
    target: Option<&Spanned<String>>,
    d: &mut Vec<Diagnostic>,
) -> Option<Vec<Spanned<String>>> {
    let items = match &v.kind {
        ValueKind::List(items) => items.as_slice(),
        ValueKind::Str(_) | ValueKind::Ident(_) => std::slice::from_ref(v),
        ValueKind::Error => return None,
        _ => {
            let example = if key == "sequence" { "[\"x\", \"y\"]" } else { "[\"city\", \"color\"]" };
            values::mismatch_with_help(
                v,
                "a list of column names",
                &format!("`{key}`"),
                &format!("write `{key} = {example}`"),
                d,
            );
            return None;
        }
    };
    let mut out: Vec<Spanned<String>> = Vec::with_capacity(items.len());
    let mut ok = true;
    for item in items {
        let name = match &item.kind {
            ValueKind::Ident(name) => Spanned { value: name.clone(), span: item.span },
            _ => match values::string(item, &format!("a column of `{key}`"), d) {
                Some(name) => trimmed(name),
                None => {
                    ok = false;
                    continue;
                }
            },
        };
        if out.iter().any(|c| c.value == name.value) {
            d.push(
                Diagnostic::new(item.span, format!("column `{}` is listed twice", name.value), "listed again")
                    .with_help("remove one of them"),
            );
            ok = false;
        } else if target.is_some_and(|t| t.value == name.value) {
            d.push(
                Diagnostic::new(item.span, format!("`{}` is the target, not a feature", name.value), "the target")
                    .with_help(if key == "categorical" {
                        "remove it from `categorical`: the target is not an input (a class target needs no listing: \
                         `loss = cross_entropy` reads its labels)"
                    } else {
                        "name the columns that hold the sequences to read"
                    }),
            );
            ok = false;
        } else {
            out.push(name);
        }
    }
    ok.then_some(out)
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
