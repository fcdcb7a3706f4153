//! Binding the arguments of a call such as `adamw(0.001, weight_decay=0.01)`
//! to named parameters, the way Python binds them: positional arguments
//! fill parameters in order, named ones by name, and each parameter once.

use super::ast::{Arg, Value, ValueKind};
use super::diagnostic::Diagnostic;
use super::suggest;
use super::types::Span;
use super::values::{self, Range};

/// A value that names something with optional arguments: `adamw` and
/// `adamw(lr=0.01)` both read as a callee named `adamw`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Callee<'a> {
    pub name: &'a str,
    pub args: &'a [Arg],
    /// The whole value, `adamw(lr=0.01)`.
    pub span: Span,
}

/// `None` for values that are neither a name nor a call.
pub(super) fn callee(v: &Value) -> Option<Callee<'_>> {
    match &v.kind {
        ValueKind::Ident(name) => Some(Callee { name, args: &[], span: v.span }),
        ValueKind::Call(call) => Some(Callee { name: &call.name.value, args: &call.args, span: v.span }),
        _ => None,
    }
}

/// A value that must be a call to `name`, as in
/// `early_stop = early_stop(patience=10)`. `example` is a complete setting
/// for the help line.
pub(super) fn expect_call<'a>(
    v: &'a Value,
    name: &str,
    what: &str,
    example: &str,
    d: &mut Vec<Diagnostic>,
) -> Option<Callee<'a>> {
    match callee(v) {
        Some(c) if c.name == name => Some(c),
        _ if v.kind == ValueKind::Error => None,
        _ => {
            d.push(
                Diagnostic::new(
                    v.span,
                    format!("expected `{name}(...)` for {what}, found {}", v.describe()),
                    format!("expected `{name}(...)`"),
                )
                .with_help(format!("write `{example}`")),
            );
            None
        }
    }
}

/// The arguments of one call, each matched to its parameter.
pub(super) struct Args<'a> {
    callee: Callee<'a>,
    params: &'static [&'static str],
    given: Vec<Option<&'a Value>>,
    ok: bool,
    /// Parameters that an unknown argument's did-you-mean named (`T_max`
    /// for `t_max`): their absence is that misspelling, said once.
    meant: Vec<&'static str>,
}

/// Matches `callee`'s arguments to `params` (in positional order), and
/// reports extra, unknown and repeated ones.
pub(super) fn bind<'a>(callee: Callee<'a>, params: &'static [&'static str], d: &mut Vec<Diagnostic>) -> Args<'a> {
    bind_keywords(callee, params, params.len(), d)
}

/// [`bind`] where only the first `positional` parameters may be given by
/// position, the rest by name alone (Python's keyword-only arguments).
pub(super) fn bind_keywords<'a>(
    callee: Callee<'a>,
    params: &'static [&'static str],
    positional: usize,
    d: &mut Vec<Diagnostic>,
) -> Args<'a> {
    let mut args = Args { callee, params, given: vec![None; params.len()], ok: true, meant: Vec::new() };
    let name = callee.name;
    let by_position = if positional < params.len() { " positional" } else { "" };
    for (position, arg) in callee.args.iter().enumerate() {
        let index = match &arg.name {
            None if position < positional => position,
            None => {
                let message = match positional {
                    0 => format!("`{name}` takes no{by_position} arguments"),
                    1 => format!("`{name}` takes at most 1{by_position} argument"),
                    n => format!("`{name}` takes at most {n}{by_position} arguments"),
                };
                // A keyword-only parameter given by position: say how to name it.
                let help = match params.get(position) {
                    Some(keyword) if position >= positional => {
                        format!("`{keyword}` is taken by name only: write `{keyword}=` before the value")
                    }
                    _ => accepts(name, params),
                };
                d.push(Diagnostic::new(arg.value.span, message, "unexpected argument").with_help(help));
                args.ok = false;
                continue;
            }
            Some(arg_name) => match params.iter().position(|p| *p == arg_name.value) {
                Some(index) => index,
                None => {
                    args.meant.extend(suggest::spec_word(&arg_name.value, params.iter().copied()));
                    let help =
                        suggest::help(&arg_name.value, params.iter().copied()).unwrap_or_else(|| accepts(name, params));
                    d.push(
                        Diagnostic::new(
                            arg_name.span,
                            format!("unknown argument `{}` for `{name}`", arg_name.value),
                            "unknown argument",
                        )
                        .with_help(help),
                    );
                    args.ok = false;
                    continue;
                }
            },
        };
        if args.given[index].is_some() {
            let at = arg.name.as_ref().map_or(arg.value.span, |n| n.span);
            d.push(Diagnostic::new(
                at,
                format!("argument `{}` of `{name}` is given twice", params[index]),
                "given again here",
            ));
            args.ok = false;
            continue;
        }
        args.given[index] = Some(&arg.value);
    }
    args
}

fn accepts(name: &str, params: &[&str]) -> String {
    if params.is_empty() {
        format!("write `{name}` alone")
    } else {
        format!("`{name}` accepts {}", suggest::one_of(params))
    }
}

impl<'a> Args<'a> {
    /// `None` if some argument could not be bound (already reported).
    pub fn ok(&self) -> Option<()> {
        self.ok.then_some(())
    }

    pub fn get(&self, param: &str) -> Option<&'a Value> {
        let index = self.params.iter().position(|p| *p == param)?;
        self.given[index]
    }

    /// How a parameter reads in a message: `` `lr` of `adamw` ``.
    pub fn what(&self, param: &str) -> String {
        format!("`{param}` of `{}`", self.callee.name)
    }

    /// A parameter without a default; `example` is a full call for the help
    /// line, as in `cosine(t_max=100)`.
    pub fn required(&self, param: &str, example: &str, d: &mut Vec<Diagnostic>) -> Option<&'a Value> {
        let value = self.get(param);
        // Misspelled rather than left out: the unknown argument's error says it.
        if value.is_none() && !self.meant.contains(&param) {
            d.push(
                Diagnostic::new(
                    self.callee.span,
                    format!("missing argument `{param}` for `{}`", self.callee.name),
                    format!("`{param}` is required"),
                )
                .with_help(format!("write `{example}`")),
            );
        }
        value
    }

    pub fn float(&self, param: &str, default: f64, range: Range, d: &mut Vec<Diagnostic>) -> Option<f64> {
        match self.get(param) {
            None => Some(default),
            Some(v) => values::float(v, &self.what(param), range, d),
        }
    }

    pub fn count(&self, param: &str, default: usize, min: usize, d: &mut Vec<Diagnostic>) -> Option<usize> {
        match self.get(param) {
            None => Some(default),
            Some(v) => values::count(v, &self.what(param), min, d),
        }
    }

    pub fn boolean(&self, param: &str, default: bool, d: &mut Vec<Diagnostic>) -> Option<bool> {
        match self.get(param) {
            None => Some(default),
            Some(v) => values::boolean(v, &self.what(param), d),
        }
    }
}
