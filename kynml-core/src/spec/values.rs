//! Reading one untyped value as a typed scalar (integer, number, boolean,
//! string, path, name, one of a fixed set of words), reporting "expected X,
//! found Y" and range problems where it is written.
//!
//! Every reader returns `None` after reporting, and returns `None` quietly
//! for a value that was already reported as unreadable.
//!
//! `what` names the thing being read, ready to print: `` `epochs` ``,
//! `` `lr` of `adamw` ``.

use std::path::PathBuf;

use super::ast::{Value, ValueKind};
use super::diagnostic::Diagnostic;
use super::lexer::shorten;
use super::suggest;
use super::types::Spanned;

/// Allowed values of a number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Range {
    Any,
    /// `> 0`
    Positive,
    /// `>= 0`
    NonNegative,
    /// `[0, 1)`
    Unit,
    /// `(0, 1)`
    OpenUnit,
}

impl Range {
    fn contains(self, x: f64) -> bool {
        match self {
            Range::Any => true,
            Range::Positive => x > 0.0,
            Range::NonNegative => x >= 0.0,
            Range::Unit => (0.0..1.0).contains(&x),
            Range::OpenUnit => x > 0.0 && x < 1.0,
        }
    }

    fn rule(self) -> &'static str {
        match self {
            Range::Any => "may be any number",
            Range::Positive => "must be greater than 0",
            Range::NonNegative => "must not be negative",
            Range::Unit => "must be in [0, 1)",
            Range::OpenUnit => "must be between 0 and 1, both excluded",
        }
    }
}

pub(super) fn float(v: &Value, what: &str, range: Range, d: &mut Vec<Diagnostic>) -> Option<f64> {
    let ValueKind::Number(text) = &v.kind else {
        mismatch(v, "a number", what, d);
        return None;
    };
    let Some(x) = text.parse::<f64>().ok().filter(|x| x.is_finite()) else {
        too_large(v, text, what, d);
        return None;
    };
    // `1e-400` is 0 in f64 too: not a 0 written, but a value as far beyond
    // an f32 as `1e-46` (said so, not as out of range).
    let underflow =
        x == 0.0 && text.split(['e', 'E']).next().is_some_and(|m| m.bytes().any(|b| (b'1'..=b'9').contains(&b)));
    if !underflow && !range.contains(x) {
        out_of_range(v, text, what, range.rule(), d);
        // A percentage for a fraction (`split = 80`): the fraction it means.
        if range == Range::OpenUnit && what == "`split`" && (2.0..100.0).contains(&x) {
            if let Some(last) = d.last_mut() {
                let key = what.trim_matches('`');
                *last =
                    last.clone().with_help(format!("a fraction, not a percentage: `{key} = {}`", (x / 100.0) as f32));
            }
        }
        return None;
    }
    // Training computes in 32-bit floats: a value they would turn into 0
    // or infinity (`eps = 5e-324`, `lr = 1e300`) would not train as written.
    let single = x as f32;
    if underflow || (x != 0.0 && (single == 0.0 || single.is_infinite())) {
        let zero = if range.contains(0.0) { " (or 0)" } else { "" };
        d.push(
            Diagnostic::new(v.span, format!("{what} is beyond a 32-bit float: `{}`", shorten(text)), "not an f32")
                .with_help(format!(
                    "training computes in 32-bit floats: write a value from about 1.4e-45 to 3.4e38{zero}"
                )),
        );
        return None;
    }
    // Nor one that rounds onto a bound it must stay off (`betas` of
    // 0.99999999999 is 1 as an f32, and Adam then divides by 0).
    if !range.contains(f64::from(single)) {
        d.push(
            Diagnostic::new(
                v.span,
                format!("{what} {}: `{}` is `{single}` as a 32-bit float", range.rule(), shorten(text)),
                "rounds onto the bound",
            )
            .with_help(format!(
                "training computes in 32-bit floats, whose nearest values to 1 are {} below and 1 itself",
                f32::from_bits(1f32.to_bits() - 1)
            )),
        );
        return None;
    }
    Some(x)
}

/// A whole number of at least `min`, such as a count of epochs.
pub(super) fn count(v: &Value, what: &str, min: usize, d: &mut Vec<Diagnostic>) -> Option<usize> {
    let n = integer(v, what, min as i128, d)?;
    match usize::try_from(n) {
        Ok(n) => Some(n),
        Err(_) => {
            too_large(v, &n.to_string(), what, d);
            None
        }
    }
}

/// A size in a model (units, channels, a kernel, a width): a whole number
/// of at least `min` and at most [`MOST_VALUES`](crate::model::MOST_VALUES).
pub(crate) fn size(v: &Value, what: &str, min: usize, d: &mut Vec<Diagnostic>) -> Option<usize> {
    let n = count(v, what, min, d)?;
    if n as u64 > crate::model::MOST_VALUES {
        d.push(
            Diagnostic::new(v.span, format!("{what} is too large: `{n}`"), "too large")
                .with_help(crate::model::most_values_help()),
        );
        return None;
    }
    Some(n)
}

/// A whole number from 0 to `u64::MAX`, such as a seed.
pub(super) fn unsigned(v: &Value, what: &str, d: &mut Vec<Diagnostic>) -> Option<u64> {
    let n = integer(v, what, 0, d)?;
    match u64::try_from(n) {
        Ok(n) => Some(n),
        Err(_) => {
            too_large(v, &n.to_string(), what, d);
            None
        }
    }
}

fn integer(v: &Value, what: &str, min: i128, d: &mut Vec<Diagnostic>) -> Option<i128> {
    let ValueKind::Number(text) = &v.kind else {
        mismatch(v, "an integer", what, d);
        return None;
    };
    if text.contains(['.', 'e', 'E']) {
        mismatch(v, "an integer", what, d);
        return None;
    }
    let Ok(n) = text.parse::<i128>() else {
        too_large(v, text, what, d);
        return None;
    };
    if n < min {
        let rule = if min == 0 { "must not be negative".to_string() } else { format!("must be at least {min}") };
        out_of_range(v, text, what, &rule, d);
        return None;
    }
    Some(n)
}

pub(super) fn boolean(v: &Value, what: &str, d: &mut Vec<Diagnostic>) -> Option<bool> {
    match &v.kind {
        ValueKind::Bool(b) => Some(*b),
        _ => {
            mismatch(v, "`true` or `false`", what, d);
            None
        }
    }
}

pub(super) fn string(v: &Value, what: &str, d: &mut Vec<Diagnostic>) -> Option<Spanned<String>> {
    match &v.kind {
        ValueKind::Str(text) if text.trim().is_empty() => {
            d.push(Diagnostic::new(v.span, format!("{what} is empty"), "empty string"));
            None
        }
        ValueKind::Str(text) => Some(Spanned { value: text.clone(), span: v.span }),
        _ => {
            mismatch(v, "a string", what, d);
            None
        }
    }
}

pub(super) fn path(v: &Value, what: &str, d: &mut Vec<Diagnostic>) -> Option<Spanned<PathBuf>> {
    let text = string(v, what, d)?;
    Some(Spanned { value: PathBuf::from(text.value), span: text.span })
}

/// A bare name, as in `model = DeepNet`.
pub(super) fn name(v: &Value, what: &str, d: &mut Vec<Diagnostic>) -> Option<Spanned<String>> {
    match &v.kind {
        ValueKind::Ident(name) => Some(Spanned { value: name.clone(), span: v.span }),
        _ => {
            mismatch(v, "a name", what, d);
            None
        }
    }
}

/// One of a fixed set of words, as in `precision = bf16`. `noun` names the
/// set in messages: "unknown precision `bf61`".
pub(super) fn choice<T: Copy>(
    v: &Value,
    what: &str,
    noun: &str,
    options: &[(&str, T)],
    d: &mut Vec<Diagnostic>,
) -> Option<T> {
    let names: Vec<&str> = options.iter().map(|(name, _)| *name).collect();
    match &v.kind {
        ValueKind::Ident(word) => match options.iter().find(|(name, _)| name == word) {
            Some((_, value)) => Some(*value),
            None => {
                unknown_word(v, word, noun, &names, d);
                None
            }
        },
        _ if names.len() <= 4 => {
            mismatch(v, &format!("one of {}", suggest::one_of(&names)), what, d);
            None
        }
        _ => {
            let help = match &v.kind {
                ValueKind::Str(text) if names.contains(&text.as_str()) => format!("remove the quotes: `{text}`"),
                _ => format!("expected {}", suggest::one_of(&names)),
            };
            mismatch_with_help(v, &format!("a {noun} name"), what, &help, d);
            None
        }
    }
}

/// "unknown loss `mze`" with a did-you-mean, or the list of what is accepted.
pub(super) fn unknown_word(v: &Value, word: &str, noun: &str, names: &[&str], d: &mut Vec<Diagnostic>) {
    let help =
        suggest::help(word, names.iter().copied()).unwrap_or_else(|| format!("expected {}", suggest::one_of(names)));
    d.push(
        Diagnostic::new(v.span, format!("unknown {noun} `{}`", shorten(word)), format!("unknown {noun}"))
            .with_help(help),
    );
}

/// "expected an integer for `epochs`, found number `100.0`", with a hint
/// where the fix is plain.
pub(super) fn mismatch(v: &Value, expected: &str, what: &str, d: &mut Vec<Diagnostic>) {
    d.extend(mismatch_diagnostic(v, expected, what));
}

/// [`mismatch`], with `help` where no more specific hint applies.
pub(super) fn mismatch_with_help(v: &Value, expected: &str, what: &str, help: &str, d: &mut Vec<Diagnostic>) {
    d.extend(mismatch_diagnostic(v, expected, what).map(|diagnostic| {
        if diagnostic.help.is_some() {
            diagnostic
        } else {
            diagnostic.with_help(help)
        }
    }));
}

fn mismatch_diagnostic(v: &Value, expected: &str, what: &str) -> Option<Diagnostic> {
    let help = match &v.kind {
        ValueKind::Error => return None,
        ValueKind::Number(text) if expected == "an integer" => {
            text.parse::<f64>().ok().filter(|x| x.fract() == 0.0 && x.abs() < 1e15).map(|x| format!("write `{x}`"))
        }
        // `"NaN"`, `"inf"`: no spelling of them is a value (unquoted, they are names).
        ValueKind::Str(text)
            if matches!(expected, "a number" | "an integer")
                && text.trim().parse::<f64>().is_ok_and(|x| !x.is_finite())
                && !text.bytes().any(|b| b.is_ascii_digit()) =>
        {
            Some("NaN and infinity are not values here: write a finite number".to_string())
        }
        ValueKind::Str(text) if quotes_are_the_problem(text, expected) => {
            Some(format!("remove the quotes: `{}`", shorten(text)))
        }
        ValueKind::Ident(_) | ValueKind::Number(_) if expected == "`true` or `false`" => {
            Some("write `true` or `false`".to_string())
        }
        ValueKind::Ident(name) if expected == "a string" => Some(format!("write it in double quotes: `\"{name}\"`")),
        _ => None,
    };
    let diagnostic = Diagnostic::new(
        v.span,
        format!("expected {expected} for {what}, found {}", v.describe()),
        format!("expected {expected}"),
    );
    Some(match help {
        Some(help) => diagnostic.with_help(help),
        None => diagnostic,
    })
}

/// `"100"` where a number was expected, `"bf16"` where a word was.
fn quotes_are_the_problem(text: &str, expected: &str) -> bool {
    let bare = text.trim();
    match expected {
        "a number" | "an integer" => bare.parse::<f64>().is_ok(),
        "`true` or `false`" => bare == "true" || bare == "false",
        "a name" => !bare.is_empty() && bare.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
        _ => expected.contains(&format!("`{bare}`")),
    }
}

fn out_of_range(v: &Value, text: &str, what: &str, rule: &str, d: &mut Vec<Diagnostic>) {
    d.push(Diagnostic::new(v.span, format!("{what} {rule}, found `{}`", shorten(text)), "out of range"));
}

fn too_large(v: &Value, text: &str, what: &str, d: &mut Vec<Diagnostic>) {
    d.push(Diagnostic::new(v.span, format!("{what} is too large: `{}`", shorten(text)), "too large"));
}

#[cfg(test)]
mod tests {
    use super::super::types::Span;
    use super::*;

    #[test]
    fn floats_a_32_bit_float_cannot_hold_are_refused() {
        let mut d = Vec::new();
        for text in ["5e-324", "1e-320", "1e300", "-1e39"] {
            assert_eq!(float(&num(text), "`eps`", Range::Any, &mut d), None, "{text}");
        }
        assert_eq!(d.len(), 4);
        assert!(d[0].message.contains("beyond a 32-bit float"), "{}", d[0].message);
        for text in ["0", "1e-30", "3e38", "-0.5", "0e-400", "0.000e5"] {
            assert!(float(&num(text), "`eps`", Range::Any, &mut d).is_some(), "{text}");
        }
        assert_eq!(d.len(), 4);
        // Past even an f64's least value it reads as 0: said as beyond an
        // f32, not as a 0 out of range.
        assert_eq!(float(&num("1e-400"), "`lr`", Range::Positive, &mut d), None);
        assert!(d[4].message.contains("beyond a 32-bit float: `1e-400`"), "{}", d[4].message);
    }

    #[test]
    fn a_percentage_for_a_fraction_is_said_as_the_fraction() {
        let mut d = Vec::new();
        assert_eq!(float(&num("80"), "`split`", Range::OpenUnit, &mut d), None);
        assert_eq!(d[0].help.as_deref(), Some("a fraction, not a percentage: `split = 0.8`"), "{:?}", d[0]);
        assert_eq!(float(&num("33.3"), "`split`", Range::OpenUnit, &mut d), None);
        assert_eq!(d.pop().unwrap().help.as_deref(), Some("a fraction, not a percentage: `split = 0.333`"));
        assert_eq!(float(&num("1.5"), "`split`", Range::OpenUnit, &mut d), None);
        assert_eq!(d[1].help, None, "not likely a percentage");
        assert_eq!(float(&num("0"), "`split`", Range::OpenUnit, &mut d), None);
        assert_eq!(d[2].help, None);
        // `backoff = 2` means halving, not 2%: nothing suggested.
        assert_eq!(float(&num("2"), "`backoff`", Range::OpenUnit, &mut d), None);
        assert_eq!(d[3].help, None);
    }

    fn num(text: &str) -> Value {
        Value { kind: ValueKind::Number(text.into()), span: Span::default() }
    }

    fn word(text: &str) -> Value {
        Value { kind: ValueKind::Ident(text.into()), span: Span::default() }
    }

    fn quoted(text: &str) -> Value {
        Value { kind: ValueKind::Str(text.into()), span: Span::default() }
    }

    #[test]
    fn integers_reject_fractions_and_suggest_the_integer() {
        let mut d = Vec::new();
        assert_eq!(count(&num("100"), "`epochs`", 1, &mut d), Some(100));
        assert_eq!(count(&num("100.0"), "`epochs`", 1, &mut d), None);
        assert_eq!(d[0].message, "expected an integer for `epochs`, found number `100.0`");
        assert_eq!(d[0].help.as_deref(), Some("write `100`"));
        assert_eq!(count(&num("0"), "`epochs`", 1, &mut d), None);
        assert_eq!(d[1].message, "`epochs` must be at least 1, found `0`");
        assert_eq!(count(&num("-1"), "`n`", 0, &mut d), None);
        assert_eq!(d[2].message, "`n` must not be negative, found `-1`");
        assert_eq!(unsigned(&num("18446744073709551615"), "`seed`", &mut d), Some(u64::MAX));
        assert_eq!(unsigned(&num("18446744073709551616"), "`seed`", &mut d), None);
        assert_eq!(count(&num(&"9".repeat(60)), "`n`", 0, &mut d), None);
        assert_eq!(d.len(), 5);
        // `0x10` and `3x4` are words to the lexer (shapes, for `input`): said as what they look like.
        assert_eq!(count(&word("0x10"), "`n`", 0, &mut d), None);
        assert!(d[5].message.contains("`0x10`, a hexadecimal number, which is not read"), "{}", d[5].message);
        assert_eq!(count(&word("3x4"), "`n`", 0, &mut d), None);
        assert!(d[6].message.ends_with("found shape `3x4`"), "{}", d[6].message);
    }

    #[test]
    fn floats_take_integers_and_check_ranges() {
        let mut d = Vec::new();
        assert_eq!(float(&num("1"), "`x`", Range::Positive, &mut d), Some(1.0));
        assert_eq!(float(&num("1e-3"), "`x`", Range::Positive, &mut d), Some(1e-3));
        assert_eq!(float(&num("0"), "`x`", Range::Unit, &mut d), Some(0.0));
        assert!(d.is_empty());
        assert_eq!(float(&num("1"), "`x`", Range::Unit, &mut d), None);
        assert_eq!(float(&num("0"), "`x`", Range::OpenUnit, &mut d), None);
        assert_eq!(float(&num("1e999"), "`x`", Range::Any, &mut d), None);
        assert_eq!(d[2].message, "`x` is too large: `1e999`");
    }

    #[test]
    fn floats_are_checked_as_the_f32_training_computes_in() {
        let mut d = Vec::new();
        // Below 1 as written, 1 as an f32: refused, saying so.
        assert_eq!(float(&num("0.99999999999"), "`beta`", Range::Unit, &mut d), None);
        assert_eq!(d[0].message, "`beta` must be in [0, 1): `0.99999999999` is `1` as a 32-bit float");
        assert!(d[0].help.as_deref().unwrap().contains("0.99999994"), "{:?}", d[0].help);
        assert_eq!(float(&num("0.9999999"), "`beta`", Range::Unit, &mut d), Some(0.9999999));
        assert_eq!(float(&num("1e-46"), "`p`", Range::OpenUnit, &mut d), None);
        assert!(d[1].message.contains("beyond a 32-bit float"), "{}", d[1].message);
        // A subnormal f32 is a value; only a range that holds 0 offers it.
        assert_eq!(float(&num("1e-45"), "`eps`", Range::Positive, &mut d), Some(1e-45));
        assert_eq!(float(&num("1e-50"), "`eps`", Range::Positive, &mut d), None);
        assert!(!d[2].help.as_deref().unwrap().contains("or 0"), "{:?}", d[2].help);
        assert_eq!(float(&num("1e-50"), "`wd`", Range::NonNegative, &mut d), None);
        assert!(d[3].help.as_deref().unwrap().contains("(or 0)"), "{:?}", d[3].help);
        assert_eq!(d.len(), 4);
    }

    #[test]
    fn quoted_values_get_a_hint() {
        let mut d = Vec::new();
        assert_eq!(count(&quoted("100"), "`epochs`", 1, &mut d), None);
        assert_eq!(d[0].help.as_deref(), Some("remove the quotes: `100`"));
        let options = [("fp32", 0), ("bf16", 1)];
        assert_eq!(choice(&quoted("bf16"), "`precision`", "precision", &options, &mut d), None);
        assert_eq!(d[1].help.as_deref(), Some("remove the quotes: `bf16`"));
        // Unquoted, `NaN` is a name: the quotes are not the problem.
        for text in ["NaN", "inf", "-Infinity"] {
            let mut d = Vec::new();
            assert_eq!(float(&quoted(text), "`lr`", Range::Positive, &mut d), None);
            assert_eq!(count(&quoted(text), "`epochs`", 1, &mut d), None);
            for problem in &d {
                assert_eq!(
                    problem.help.as_deref(),
                    Some("NaN and infinity are not values here: write a finite number"),
                    "{text}"
                );
            }
            assert_eq!(d.len(), 2);
        }
        assert_eq!(choice(&word("bf61"), "`precision`", "precision", &options, &mut d), None);
        assert_eq!(d[2].message, "unknown precision `bf61`");
        assert_eq!(d[2].help.as_deref(), Some("did you mean `bf16`?"));
    }
}
