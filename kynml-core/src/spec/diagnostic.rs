//! A located problem in a spec, and its rendering in the style of cargo and
//! ruff: the message, `file:line:col`, the source line with carets under the
//! span, a label beside the carets and an optional help line.
//!
//! Later stages (the data loader, the model builder) report through the same
//! type, pointing at the spans that [`super::types::Spec`] keeps, so that every
//! problem a user meets is shown the same way.

use super::types::Span;

/// One problem, located in the spec source. All diagnostics are errors.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Diagnostic {
    /// One short lower-case sentence saying what is wrong.
    pub message: String,
    /// The text the problem is about.
    pub span: Span,
    /// Printed beside the carets under `span`.
    pub label: String,
    /// How to fix it, when that can be told.
    pub help: Option<String>,
}

impl Diagnostic {
    /// A problem at `span`: `message` says what is wrong, `label` goes beside the carets.
    pub fn new(span: Span, message: impl Into<String>, label: impl Into<String>) -> Self {
        Diagnostic { message: message.into(), span, label: label.into(), help: None }
    }

    /// Adds a help line saying how to fix the problem.
    pub fn with_help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }
}

/// Line and column, both 1-based, of byte `offset` in `source`. Columns count
/// chars, not bytes. An offset past the end, or inside a multi-byte char, is
/// moved back to the nearest char boundary, so any offset is safe.
pub fn line_col(source: &str, offset: usize) -> (usize, usize) {
    let offset = floor_boundary(source, offset).max(bom_len(source));
    let before = &source[..offset];
    let line_start = before.rfind('\n').map_or(bom_len(source), |i| i + 1);
    let line = before.matches('\n').count() + 1;
    let col = before[line_start..].chars().count() + 1;
    (line, col)
}

/// Bytes of the byte-order marks a file starts with: not part of its first
/// line's text (the lexer ignores them), so neither counted nor shown.
fn bom_len(source: &str) -> usize {
    source.len() - source.trim_start_matches('\u{feff}').len()
}

/// Renders every diagnostic, then a closing summary line. Plain text, no
/// colors, so that it reads the same in a terminal, a log and a snapshot file.
pub fn render(file_name: &str, source: &str, diagnostics: &[Diagnostic]) -> String {
    let n = diagnostics.len();
    let noun = if n == 1 { "problem" } else { "problems" };
    render_with(file_name, source, diagnostics, &format!("could not read spec: {n} {noun} found"))
}

/// Renders every diagnostic, then `error: {summary}` (when there is any).
pub fn render_with(file_name: &str, source: &str, diagnostics: &[Diagnostic], summary: &str) -> String {
    let mut out = String::new();
    for diagnostic in diagnostics {
        render_one(&mut out, file_name, source, diagnostic);
        out.push('\n');
    }
    if !diagnostics.is_empty() {
        out.push_str(&format!("error: {summary}\n"));
    }
    out
}

/// Spaces a tab stands for in a rendered source line; carets are placed with
/// the same width so they stay under the text.
const TAB_WIDTH: usize = 4;

fn render_one(out: &mut String, file_name: &str, source: &str, d: &Diagnostic) {
    let start = floor_boundary(source, d.span.start).max(bom_len(source));
    let (line, col) = line_col(source, start);
    let line_start = source[..start].rfind('\n').map_or(bom_len(source), |i| i + 1);
    let line_end = source[start..].find('\n').map_or(source.len(), |i| start + i);
    let line_text = source[line_start..line_end].strip_suffix('\r').unwrap_or(&source[line_start..line_end]);

    // Carets cover the span's part on its first line, and at least one char,
    // so an empty span (a missing value) still shows where it belongs.
    let end = floor_boundary(source, d.span.end.max(start)).min(line_start + line_text.len());
    let start_in_line = (start - line_start).min(line_text.len());
    let end_in_line = end.saturating_sub(line_start).max(start_in_line);
    // A long line is shown around the span, cut with `...` (a number of
    // 100,000 digits printed 200 KB of line and carets).
    let (line_text, start_in_line, end_in_line, cut_before, cut_after) = window(line_text, start_in_line, end_in_line);
    let before = if cut_before { "..." } else { "" };
    let pad = before.len() + display_width(&line_text[..start_in_line]);
    let carets = display_width(&line_text[start_in_line..end_in_line]).max(1);

    let gutter = line.to_string().len();
    let blank = " ".repeat(gutter);
    out.push_str(&format!("error: {}\n", clean(&d.message)));
    out.push_str(&format!("{blank}--> {file_name}:{line}:{col}\n"));
    out.push_str(&format!("{blank} |\n"));
    let shown = format!("{before}{}{}", display_line(line_text), if cut_after { "..." } else { "" });
    if shown.is_empty() {
        out.push_str(&format!("{line} |\n"));
    } else {
        out.push_str(&format!("{line} | {shown}\n"));
    }
    let label = clean(&d.label);
    let mut caret_line = format!("{blank} | {}{}", " ".repeat(pad), "^".repeat(carets));
    if !label.is_empty() {
        caret_line.push(' ');
        caret_line.push_str(&label);
    }
    out.push_str(&caret_line);
    out.push('\n');
    if let Some(help) = &d.help {
        out.push_str(&format!("{blank} |\n"));
        out.push_str(&format!("{blank} = help: {}\n", clean(help)));
    }
}

/// Characters of a source line shown at most.
const MAX_SHOWN: usize = 120;

/// The part of `line` to show for the span `start..end` (byte offsets in
/// it): the whole line when short, else [`MAX_SHOWN`] characters from a
/// little before the span, with the span's offsets in that part and whether
/// text was cut before and after it.
fn window(line: &str, start: usize, end: usize) -> (&str, usize, usize, bool, bool) {
    if line.chars().count() <= MAX_SHOWN {
        return (line, start, end, false, false);
    }
    let offsets: Vec<usize> = line.char_indices().map(|(i, _)| i).chain([line.len()]).collect();
    let first_char = offsets.partition_point(|&o| o < start);
    let from_char = first_char.saturating_sub(MAX_SHOWN / 3);
    let to_char = (from_char + MAX_SHOWN).min(offsets.len() - 1);
    let (from, to) = (offsets[from_char], offsets[to_char]);
    let part = &line[from..to];
    let start = start - from;
    let end = end.min(to).saturating_sub(from).max(start);
    (part, start, end, from > 0, to < line.len())
}

/// Columns a rendered piece of a line takes in a terminal: tabs are
/// expanded, control characters are shown as one replacement character, wide
/// characters (CJK, most emoji) take two columns and combining marks none.
fn display_width(text: &str) -> usize {
    use unicode_width::UnicodeWidthChar;
    text.chars()
        .map(|c| match c {
            '\t' => TAB_WIDTH,
            c if c.is_control() => 1,
            c => c.width().unwrap_or(1),
        })
        .sum()
}

fn display_line(text: &str) -> String {
    let mut shown = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\t' => shown.push_str(&" ".repeat(TAB_WIDTH)),
            c if c.is_control() => shown.push('\u{FFFD}'),
            c => shown.push(c),
        }
    }
    shown
}

/// Messages quote user text; control characters in it (an escape sequence in
/// a string, say) must not reach the terminal.
fn clean(text: &str) -> String {
    // Shown as escapes (`set\nosa`), so that the value can be found in its file.
    let text: String =
        text.chars().map(|c| if c.is_control() { c.escape_default().to_string() } else { c.to_string() }).collect();
    shorten_words(&text, MAX_WORD)
}

/// Characters of one word (a quoted value, a name) a message shows at most.
const MAX_WORD: usize = 80;

/// `text` with each word (between spaces or line ends) longer than `max`
/// characters cut in its middle with `...`, its first half and last quarter
/// kept: a message quoting a value of 100,000 characters (an unknown device
/// string, a data cell, a column name) showed it whole.
pub fn shorten_words(text: &str, max: usize) -> String {
    let mut out = String::with_capacity(text.len().min(1 << 16));
    for piece in text.split_inclusive([' ', '\n']) {
        let (word, end) = match piece.strip_suffix([' ', '\n']) {
            Some(word) => (word, &piece[word.len()..]),
            None => (piece, ""),
        };
        if word.chars().nth(max).is_none() {
            out.push_str(word);
        } else {
            let chars: Vec<char> = word.chars().collect();
            out.extend(&chars[..max / 2]);
            out.push_str("...");
            out.extend(&chars[chars.len() - max / 4..]);
        }
        out.push_str(end);
    }
    out
}

fn floor_boundary(source: &str, offset: usize) -> usize {
    let mut offset = offset.min(source.len());
    while !source.is_char_boundary(offset) {
        offset -= 1;
    }
    offset
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(start: usize, end: usize) -> Span {
        Span { start, end }
    }

    /// A long line is shown around its span, cut with `...`, the carets
    /// under the span; a short one whole.
    #[test]
    fn a_long_line_is_shown_around_its_span() {
        let digits = "9".repeat(100_000);
        let src = format!("train:\n    epochs = {digits}\n");
        let at = src.find('9').unwrap();
        let text = render("t.kyn", &src, &[Diagnostic::new(span(at, at + digits.len()), "too large", "here")]);
        assert!(text.len() < 600, "{} bytes", text.len());
        let lines: Vec<&str> = text.lines().collect();
        let shown = lines.iter().find(|l| l.starts_with("2 | ")).unwrap();
        assert!(shown.starts_with("2 |     epochs = 999") && shown.ends_with("..."), "{shown}");
        let carets = lines.iter().find(|l| l.contains('^')).unwrap();
        assert_eq!(carets.find('^'), shown.find('9'), "{text}");
        // The span far along the line: cut before it too.
        let src = format!("train:\n    epochs = {digits} x\n");
        let at = src.find(" x").unwrap() + 1;
        let text = render("t.kyn", &src, &[Diagnostic::new(span(at, at + 1), "stray", "here")]);
        let lines: Vec<&str> = text.lines().collect();
        let shown = lines.iter().find(|l| l.starts_with("2 | ")).unwrap();
        assert!(shown.starts_with("2 | ...999") && shown.ends_with("9 x"), "{shown}");
        let carets = lines.iter().find(|l| l.contains('^')).unwrap();
        assert_eq!(carets.find('^'), shown.find('x'), "{text}");
    }

    /// A control character a message quotes (a class label's line break)
    /// is shown as its escape, never raw and never as a replacement mark.
    #[test]
    fn a_control_character_in_a_message_is_shown_as_its_escape() {
        let text = render("t.kyn", "x\n", &[Diagnostic::new(span(0, 1), "class `set\nosa` or `a\u{1b}[2J`", "here")]);
        assert!(text.contains("class `set\\nosa` or `a\\u{1b}[2J`"), "{text}");
        assert!(!text.contains('\u{1b}') && !text.contains('\u{FFFD}'), "{text}");
    }

    /// A long value quoted in a message, its label or its help is cut in
    /// its middle, as the line is; words of ordinary length are kept whole.
    #[test]
    fn a_long_value_in_a_message_is_cut() {
        let value = format!("cuda{}x", "a".repeat(100_000));
        let src = format!("train:\n    device = \"{value}\"\n");
        let at = src.find('"').unwrap();
        let d = Diagnostic::new(span(at, at + value.len() + 2), format!("unknown device string \"{value}\""), "here")
            .with_help(format!("`{value}` is not a device"));
        let text = render("t.kyn", &src, &[d]);
        assert!(text.len() < 800, "{} bytes: {}", text.len(), &text[..800]);
        let first = text.lines().next().unwrap();
        assert!(first.starts_with("error: unknown device string \"cudaaaa") && first.ends_with("aaax\""), "{first}");
        assert!(first.contains("..."), "{first}");
        assert!(text.contains("= help: `cudaaa") && text.contains("aax` is not a device"), "{text}");
        let short = "a message of ordinary words, with `quoted_names_of_some_length` and \"strings\"";
        assert_eq!(shorten_words(short, MAX_WORD), short);
        assert_eq!(shorten_words("ab\ncdefgh ij", 4), "ab\ncd...h ij");
    }

    #[test]
    fn line_col_counts_chars_from_one() {
        let src = "ab\nçd = 1\n";
        assert_eq!(line_col(src, 0), (1, 1));
        assert_eq!(line_col(src, 3), (2, 1));
        // 'ç' is two bytes but one column.
        assert_eq!(line_col(src, 5), (2, 2));
        // Inside the two bytes of 'ç': moved back to its start.
        assert_eq!(line_col(src, 4), (2, 1));
        assert_eq!(line_col(src, 999), (3, 1));
    }

    #[test]
    fn byte_order_marks_are_neither_counted_nor_shown() {
        for marks in ["\u{feff}", "\u{feff}\u{feff}"] {
            let src = format!("{marks}Dataset R:\n");
            let at = marks.len();
            assert_eq!(line_col(&src, at), (1, 1));
            assert_eq!(line_col(&src, at + 8), (1, 9));
            // A span that starts inside the marks is at the line's start.
            assert_eq!(line_col(&src, 0), (1, 1));
            let text = render("b.kyn", &src, &[Diagnostic::new(span(at, at + 7), "unknown block `Dataset`", "here")]);
            assert!(text.contains(" --> b.kyn:1:1\n  |\n1 | Dataset R:\n  | ^^^^^^^ here\n"), "{text:?}");
            let text = render("b.kyn", &src, &[Diagnostic::new(span(0, 0), "empty", "here")]);
            assert!(text.contains(" --> b.kyn:1:1\n  |\n1 | Dataset R:\n  | ^ here\n"), "{text:?}");
        }
    }

    #[test]
    fn renders_like_cargo() {
        let src = "train:\n    epoch = 100\n";
        let d = Diagnostic::new(span(11, 16), "unknown key `epoch` in `train:` block", "unknown key")
            .with_help("did you mean `epochs`?");
        let text = render("x.kyn", src, &[d]);
        let expected = "\
error: unknown key `epoch` in `train:` block
 --> x.kyn:2:5
  |
2 |     epoch = 100
  |     ^^^^^ unknown key
  |
  = help: did you mean `epochs`?

error: could not read spec: 1 problem found
";
        assert_eq!(text, expected);
    }

    #[test]
    fn tabs_keep_carets_aligned_and_crlf_is_hidden() {
        let src = "train:\r\n\tepoch = 1\r\n";
        let d = Diagnostic::new(span(9, 14), "m", "here");
        let text = render("x.kyn", src, &[d]);
        assert!(text.contains("2 |     epoch = 1\n"), "{text}");
        assert!(text.contains("  |     ^^^^^ here\n"), "{text}");
        assert!(!text.contains('\r'));
    }

    #[test]
    fn wide_characters_keep_carets_under_their_text() {
        // Each CJK character takes two terminal columns, a combining accent none.
        let src = "model 模型:\n    dense 8 r\u{e9}lu\u{301}x\n";
        let at = src.find(':').unwrap();
        let text = render("x.kyn", src, &[Diagnostic::new(span(at, at + 1), "m", "here")]);
        assert!(text.contains(&format!(" | {}^ here\n", " ".repeat(10))), "{text}");
        let at = src.find('x').unwrap();
        let text = render("x.kyn", src, &[Diagnostic::new(span(at, at + 1), "m", "here")]);
        assert!(text.contains(&format!(" | {}^ here\n", " ".repeat(16))), "{text}");
        let at = src.find('模').unwrap();
        let text = render("x.kyn", src, &[Diagnostic::new(span(at, at + 6), "m", "here")]);
        assert!(text.contains(&format!(" | {}^^^^ here\n", " ".repeat(6))), "{text}");
    }

    #[test]
    fn any_span_renders_without_panic() {
        let src = "a\u{e9}b\n\u{1b}[31m\n";
        for start in 0..src.len() + 3 {
            for end in 0..src.len() + 3 {
                let text = render("x", src, &[Diagnostic::new(span(start, end), "m\u{1b}", "l")]);
                assert!(!text.contains('\u{1b}'));
            }
        }
        assert_eq!(render("x", src, &[]), "");
    }
}
