//! The `.kyn` spec language: the text of a spec in, a validated
//! [`types::Spec`] out, or every problem found, each located and ready to be
//! rendered the way cargo and ruff render theirs.
//!
//! Reading happens in two stages. The parser (`lexer`, `parser`, `ast`)
//! turns lines into an untyped tree of blocks whose every piece keeps its
//! span; the validator (`validate`, then one file per block kind) turns that
//! tree into typed settings with defaults filled in. Both stages report into
//! one list and carry on past a problem, so one run shows all of them.
//!
//! ```
//! use kynml_core::spec::{parse_spec, render};
//!
//! let source = "\
//! dataset Houses:
//!     source = csv(\"data/houses.csv\")
//!     target = \"price\"
//!
//! model Net:
//!     input 8
//!     dense 1 linear
//!
//! train:
//!     loss = mse
//!     epochs = 10
//! ";
//! let spec = parse_spec(source).unwrap();
//! assert_eq!(spec.train.epochs.value, 10);
//!
//! let typo = source.replace("epochs", "epoch");
//! let error = parse_spec(&typo).unwrap_err();
//! let text = render("houses.kyn", &typo, &error.diagnostics);
//! assert!(text.starts_with("error: unknown key `epoch` in `train:` block\n  --> houses.kyn:11:5\n"));
//! assert!(text.contains("= help: did you mean `epochs`?"));
//! ```

pub mod diagnostic;
pub mod types;

mod args;
pub(crate) mod ast;
mod dataset;
mod keys;
pub(crate) mod layers;
mod lexer;
mod optimizer;
mod outputs;
mod parser;
mod resolved;
pub(crate) mod suggest;
mod train;
mod validate;
mod values;

#[cfg(test)]
mod parse_tests;
#[cfg(test)]
mod snapshot_tests;

pub use self::diagnostic::{line_col, render, render_with, Diagnostic};
pub use self::resolved::resolved;

/// `` did you mean `x`? `` for `word` among `candidates`, as spec messages
/// say it (another tool's name for the thing, the same word in other case,
/// a near typo, or the start of one name), for command-line values too.
pub fn suggestion(word: &str, candidates: &[&str]) -> Option<String> {
    suggest::help(word, candidates.iter().copied())
}

use self::types::{Span, Spec};

/// A spec that could not be read, with every problem found in it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}", summary(&self.diagnostics))]
pub struct SpecError {
    /// In source order; never empty.
    pub diagnostics: Vec<Diagnostic>,
}

impl SpecError {
    /// [`render`] for this error's diagnostics.
    pub fn render(&self, file_name: &str, source: &str) -> String {
        render(file_name, source, &self.diagnostics)
    }
}

fn summary(diagnostics: &[Diagnostic]) -> String {
    match diagnostics {
        [] => "could not read spec".to_string(),
        [only] => format!("could not read spec: {}", only.message),
        [first, rest @ ..] => {
            format!("could not read spec: {} problems found, the first: {}", rest.len() + 1, first.message)
        }
    }
}

/// Parses and validates a spec. On failure, the error holds every problem
/// found, not only the first.
pub fn parse_spec(source: &str) -> Result<Spec, SpecError> {
    let mut diagnostics = Vec::new();
    let document = parser::parse(source, &mut diagnostics);
    let spec = validate::validate(&document, &mut diagnostics);
    diagnostics.sort_by_key(|d| (d.span.start, d.span.end));
    diagnostics.dedup();
    match spec {
        Some(spec) if diagnostics.is_empty() => Ok(spec),
        _ => {
            if diagnostics.is_empty() {
                // Every path that yields no spec reports why; should one ever
                // fail to, the caller still gets an error rather than a panic.
                diagnostics.push(Diagnostic::new(Span::default(), "could not read the spec", "here"));
            }
            Err(SpecError { diagnostics })
        }
    }
}
