//! Splits one line of a spec into tokens with byte spans.
//!
//! The lexer works a line at a time because every construct of the language
//! fits on one line: a problem on one line (an unclosed string, a stray
//! character) is reported there and cannot swallow the lines after it.

use super::diagnostic::Diagnostic;
use super::types::Span;

#[derive(Debug, Clone, PartialEq)]
pub(super) enum TokenKind {
    Ident(String),
    /// The literal as written; the validator decides whether it must be an
    /// integer.
    Number(String),
    /// The string's content with escapes resolved.
    Str(String),
    LParen,
    RParen,
    LBracket,
    RBracket,
    Comma,
    Eq,
    Colon,
    /// Text that could not be read; it has been reported.
    Error,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) struct Token {
    pub kind: TokenKind,
    pub span: Span,
}

impl Token {
    /// How the token reads in a message: `` `)` ``, `` `epochs` ``.
    pub fn describe(&self) -> String {
        match &self.kind {
            TokenKind::Ident(text) | TokenKind::Number(text) => format!("`{}`", shorten(text)),
            TokenKind::Str(text) => format!("string \"{}\"", shorten(text)),
            TokenKind::LParen => "`(`".into(),
            TokenKind::RParen => "`)`".into(),
            TokenKind::LBracket => "`[`".into(),
            TokenKind::RBracket => "`]`".into(),
            TokenKind::Comma => "`,`".into(),
            TokenKind::Eq => "`=`".into(),
            TokenKind::Colon => "`:`".into(),
            TokenKind::Error => "unreadable text".into(),
        }
    }
}

/// Tokens of `line`, which starts at byte `offset` of the source. The first
/// problem on the line is pushed to `diags` (later ones are usually caused
/// by it) and the bad text becomes an [`TokenKind::Error`] token, so that the
/// caller still sees the shape of the line.
pub(super) fn lex_line(line: &str, offset: usize, diags: &mut Vec<Diagnostic>) -> Vec<Token> {
    let mut lexer =
        Lexer { line, offset, chars: line.char_indices().collect(), pos: 0, tokens: Vec::new(), error: None };
    lexer.run();
    if let Some(d) = lexer.error {
        diags.push(d);
    }
    lexer.tokens
}

struct Lexer<'a> {
    line: &'a str,
    offset: usize,
    chars: Vec<(usize, char)>,
    pos: usize,
    tokens: Vec<Token>,
    error: Option<Diagnostic>,
}

impl Lexer<'_> {
    /// The text around the character at `at` up to a space, a bracket, a
    /// comma, a `=` or a quote: a path or a file name written unquoted.
    fn unquoted_run(&self, at: usize) -> String {
        let stops = |c: char| c.is_whitespace() || "()[],=\"'#".contains(c);
        let first = self.chars[..at].iter().rposition(|&(_, c)| stops(c)).map_or(0, |i| i + 1);
        let last = self.chars[at..].iter().position(|&(_, c)| stops(c)).map_or(self.chars.len(), |i| at + i);
        self.chars[first..last].iter().map(|&(_, c)| c).collect()
    }

    /// For a `%` right after a plain number (`split = 80%`): the fraction
    /// to write; nothing after anything else (`y%`, `1e-3%`).
    fn percent_fix(&self, at: usize) -> Option<String> {
        let first = self.chars[..at].iter().rposition(|&(_, c)| !(c.is_ascii_digit() || c == '.')).map_or(0, |i| i + 1);
        // A number as written, not the end of a word or an exponent.
        let before = first.checked_sub(1).map(|i| self.chars[i].1);
        if before.is_some_and(|c| c.is_alphanumeric() || "_+-.".contains(c)) {
            return None;
        }
        let number: String = self.chars[first..at].iter().map(|&(_, c)| c).collect();
        // Moved two places as decimal text: `14.3%` is `0.143` (not 14.3 / 100's `0.14300000000000002`).
        let fraction = format!("{number}e-2").parse::<f64>().ok().filter(|f| f.is_finite())?;
        Some(format!("write a percentage as a fraction: `{number}%` is `{fraction}`"))
    }

    /// On a block header with a dotted or dashed name (`model Iris.v2:`),
    /// or a reference to one (`model = Iris.v2`), the line written with `_`
    /// instead: a block's name cannot be quoted.
    fn name_fix(&self, at: usize) -> Option<String> {
        let first = self.chars[..at].iter().rposition(|&(_, c)| c == '\n').map_or(0, |i| i + 1);
        let last = self.chars[at..].iter().position(|&(_, c)| c == '\n').map_or(self.chars.len(), |i| at + i);
        let line: String = self.chars[first..last].iter().map(|&(_, c)| c).collect();
        let line = line.split('#').next().unwrap_or_default().trim();
        let underscored =
            |name: &str| -> String { name.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect() };
        let one_name = |name: &str| !name.is_empty() && !name.contains(char::is_whitespace);
        if let Some((key, name)) = line.split_once('=') {
            let (key, name) = (key.trim(), name.trim());
            if !matches!(key, "model" | "data") || !one_name(name) {
                return None;
            }
            return Some(format!(
                "a block's name may contain only ASCII letters, digits and `_`: write `{key} = {}`, and name the \
                 block so",
                underscored(name)
            ));
        }
        let (keyword, name) = line.split_once(char::is_whitespace)?;
        let name = name.trim().strip_suffix(':')?.trim_end();
        if !matches!(keyword, "model" | "dataset") || !one_name(name) {
            return None;
        }
        Some(format!(
            "a block's name may contain only ASCII letters, digits and `_`: write `{keyword} {}:`",
            underscored(name)
        ))
    }

    fn run(&mut self) {
        while let Some(c) = self.peek(0) {
            let start = self.pos;
            match c {
                '#' => break,
                c if c.is_whitespace() => self.pos += 1,
                // U+FEFF is the byte-order mark some editors put first; anywhere
                // else it is an invisible character like U+200B (an error).
                '\u{feff}' if self.offset == 0 && self.chars[..self.pos].iter().all(|&(_, c)| c == '\u{feff}') => {
                    self.pos += 1
                }
                // Said, then passed over: the rest of the line reads as if it
                // were not there, so that one pasted character is one problem
                // (not a header or a value lost, and their follow-on errors).
                c if is_invisible(c) => {
                    self.pos += 1;
                    self.invisible(start, c);
                }
                c if c.is_ascii_alphabetic() || c == '_' => {
                    // Inside a word too: `re\u{200B}lu` is `relu`, with the character said.
                    let mut text = String::new();
                    while let Some(c) = self.peek(0) {
                        if is_word_char(c) {
                            text.push(c);
                        } else if is_invisible(c) && self.peek(1).is_some_and(is_word_char) {
                            self.invisible(self.pos, c);
                        } else {
                            break;
                        }
                        self.pos += 1;
                    }
                    self.push(TokenKind::Ident(text), start);
                }
                c if self.starts_number(c) => self.number(),
                '"' => self.string(),
                '\'' => self.single_quoted(),
                '(' => self.single(TokenKind::LParen),
                ')' => self.single(TokenKind::RParen),
                '[' => self.single(TokenKind::LBracket),
                ']' => self.single(TokenKind::RBracket),
                ',' => self.single(TokenKind::Comma),
                '=' => self.single(TokenKind::Eq),
                ':' => self.single(TokenKind::Colon),
                c => {
                    self.pos += 1;
                    // Invisible characters by their code point alone; other
                    // characters outside ASCII with theirs too, since text
                    // pasted through a chat or a word processor brings them.
                    let message = if c.is_control() || is_invisible(c) {
                        format!("unexpected character U+{:04X}", c as u32)
                    } else if c.is_ascii() {
                        format!("unexpected character `{c}`")
                    } else {
                        format!("unexpected character `{c}` (U+{:04X})", c as u32)
                    };
                    // The unquoted text around it, as the example to quote
                    // (`path = models/x.onnx` was shown `csv("data/iris.csv")`).
                    let quoted = format!("`\"{}\"`", self.unquoted_run(start));
                    let help = match c {
                        '-' | '.' if self.name_fix(start).is_some() => self.name_fix(start),
                        '-' => Some("names may contain only ASCII letters, digits and `_`".to_string()),
                        '.' => Some(format!(
                            "names may contain only ASCII letters, digits and `_`; a path or other text goes in \
                             double quotes: {quoted}"
                        )),
                        '/' | '\\' => Some(format!("a path goes in double quotes: {quoted}")),
                        '{' | '}' => Some("lists are written in square brackets: `[a, b]`".to_string()),
                        ';' => Some("write one setting per line".to_string()),
                        '%' => self.percent_fix(start),
                        '\u{2212}' | '\u{2013}' | '\u{2014}' => {
                            Some("a typographic minus or dash: write `-`".to_string())
                        }
                        '\u{201C}' | '\u{201D}' | '\u{201E}' => {
                            Some("curly quotes: write straight double quotes, \"...\"".to_string())
                        }
                        '\u{2018}' | '\u{2019}' => {
                            Some("curly quotes: strings use straight double quotes, \"...\"".to_string())
                        }
                        c if is_invisible(c) => {
                            Some("an invisible character (pasted text brings them): delete it".to_string())
                        }
                        c if c.is_alphanumeric() => Some(
                            "names are written in ASCII letters, digits and `_`; text in any script goes in a \
                             quoted string (a column name, a path)"
                                .to_string(),
                        ),
                        _ => None,
                    };
                    let mut d = Diagnostic::new(self.span(start, self.pos), message, "not part of the language");
                    if let Some(help) = help {
                        d = d.with_help(help);
                    }
                    self.fail(start, d);
                }
            }
        }
    }

    fn starts_number(&self, c: char) -> bool {
        let digit_at = |i: usize| self.peek(i).is_some_and(|c| c.is_ascii_digit());
        match c {
            '0'..='9' => true,
            '.' => digit_at(1),
            '-' | '+' => digit_at(1) || (self.peek(1) == Some('.') && digit_at(2)),
            _ => false,
        }
    }

    /// `-1`, `0.5`, `.5`, `1e-3`, `2.5E+4`; and shapes, `1x28x28`, as words.
    fn number(&mut self) {
        let start = self.pos;
        if matches!(self.peek(0), Some('-' | '+')) {
            self.pos += 1;
        }
        self.digits();
        // `1x28x28`: a shape, read as one word.
        let unsigned = !matches!(self.text(start, start + 1), "-" | "+");
        if unsigned && self.peek(0) == Some('x') && self.peek(1).is_some_and(|c| c.is_ascii_digit()) {
            while self.peek(0) == Some('x') && self.peek(1).is_some_and(|c| c.is_ascii_digit()) {
                self.pos += 1;
                self.digits();
            }
            if !self.peek(0).is_some_and(|c| is_word_char(c) || c == '.') {
                let text = self.text(start, self.pos).to_string();
                self.push(TokenKind::Ident(text), start);
                return;
            }
            // `1x2.5`, `1x2e5`: one bad word, reported below.
        } else if self.peek(0) == Some('.') {
            self.pos += 1;
            self.digits();
        }
        // `1e−3` pasted with a typographic minus: said at the minus.
        if matches!(self.peek(0), Some('e' | 'E')) && matches!(self.peek(1), Some('\u{2212}' | '\u{2013}')) {
            let at = self.pos + 1;
            self.pos += 2;
            let d = Diagnostic::new(self.span(at, self.pos), "a typographic minus in a number", "not `-`")
                .with_help("write the exponent's sign as `-`: `1e-3`");
            self.fail(start, d);
            return;
        }
        if matches!(self.peek(0), Some('e' | 'E')) && !self.text(start, self.pos).contains('x') {
            let sign = usize::from(matches!(self.peek(1), Some('-' | '+')));
            if self.peek(1 + sign).is_some_and(|c| c.is_ascii_digit()) {
                self.pos += 1 + sign;
                self.digits();
            }
        }
        // `100abc`, `1.2.3`, `1e`: one bad word, not a number and a name.
        if self.peek(0).is_some_and(|c| is_word_char(c) || c == '.') {
            while self.peek(0).is_some_and(|c| is_word_char(c) || c == '.') {
                self.pos += 1;
            }
            let text = self.text(start, self.pos).to_string();
            // `1D` may be meant as a name: say how names begin, too.
            // `4X1`, `28X28`: a shape with a capital X.
            let shape = text.split('X').all(|part| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()));
            let d = if shape && text.contains('X') {
                Diagnostic::new(self.span(start, self.pos), format!("invalid shape `{text}`"), "not a shape")
                    .with_help(format!("a shape's sizes are joined by a lowercase `x`: `{}`", text.replace('X', "x")))
            } else if text.contains('.') || text.starts_with(['-', '+']) {
                Diagnostic::new(self.span(start, self.pos), format!("invalid number `{text}`"), "not a number")
                    .with_help("numbers are written like `100`, `0.5`, `-2` or `1e-3`")
            } else {
                let what = format!("`{text}` is neither a number nor a name");
                Diagnostic::new(self.span(start, self.pos), what, "a name cannot start with a digit").with_help(
                    "a name starts with a letter or `_`, as in `D1`; numbers are written like `100`, `0.5`, `-2` \
                     or `1e-3`",
                )
            };
            self.fail(start, d);
            return;
        }
        let text = self.text(start, self.pos).to_string();
        self.push(TokenKind::Number(text), start);
    }

    fn digits(&mut self) {
        while self.peek(0).is_some_and(|c| c.is_ascii_digit()) {
            self.pos += 1;
        }
    }

    fn string(&mut self) {
        let start = self.pos;
        self.pos += 1;
        let mut content = String::new();
        let mut bad_escape: Option<(usize, char)> = None;
        loop {
            match self.peek(0) {
                None => {
                    let end = self.trimmed_end(start);
                    let d = Diagnostic::new(self.span(start, end), "unclosed string", "this string is never closed")
                        .with_help("add the closing `\"`; a string must end on the line where it starts");
                    self.fail(start, d);
                    return;
                }
                Some('"') => {
                    self.pos += 1;
                    break;
                }
                Some('\\') => match self.peek(1) {
                    Some(c @ ('"' | '\\')) => {
                        content.push(c);
                        self.pos += 2;
                    }
                    other => {
                        if bad_escape.is_none() {
                            bad_escape = Some((self.pos, other.unwrap_or('\\')));
                        }
                        self.pos += 1;
                    }
                },
                Some(c) => {
                    content.push(c);
                    self.pos += 1;
                }
            }
        }
        if let Some((at, c)) = bad_escape {
            let end = (at + 2).min(self.pos);
            let d = Diagnostic::new(self.span(at, end), format!("unknown escape `\\{c}` in string"), "unknown escape")
                .with_help("only `\\\"` and `\\\\` are escapes; in paths, `/` works on every system");
            self.fail(start, d);
            return;
        }
        self.push(TokenKind::Str(content), start);
    }

    /// `'text'`: reported, and skipped as one token so the closing quote is
    /// not reported again.
    fn single_quoted(&mut self) {
        let start = self.pos;
        self.pos += 1;
        while self.peek(0).is_some_and(|c| c != '\'') {
            self.pos += 1;
        }
        if self.peek(0).is_some() {
            self.pos += 1;
        }
        let d = Diagnostic::new(self.span(start, self.pos), "strings use double quotes", "single quotes")
            .with_help("write \"...\" instead of '...'");
        self.fail(start, d);
    }

    fn single(&mut self, kind: TokenKind) {
        let start = self.pos;
        self.pos += 1;
        self.push(kind, start);
    }

    fn push(&mut self, kind: TokenKind, start: usize) {
        let span = self.span(start, self.pos);
        self.tokens.push(Token { kind, span });
    }

    /// The invisible character `c` at char index `at`, said (the line's
    /// first problem is the one kept) without a token of its own.
    fn invisible(&mut self, at: usize, c: char) {
        if self.error.is_none() {
            let message = format!("unexpected character U+{:04X}", c as u32);
            self.error = Some(
                Diagnostic::new(self.span(at, at + 1), message, "not part of the language")
                    .with_help("an invisible character (pasted text brings them): delete it"),
            );
        }
    }

    fn fail(&mut self, start: usize, d: Diagnostic) {
        if self.error.is_none() {
            self.error = Some(d);
        }
        self.push(TokenKind::Error, start);
    }

    fn peek(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.pos + ahead).map(|&(_, c)| c)
    }

    /// Byte offset in the line of char index `i`.
    fn byte(&self, i: usize) -> usize {
        self.chars.get(i).map_or(self.line.len(), |&(b, _)| b)
    }

    fn text(&self, start: usize, end: usize) -> &str {
        &self.line[self.byte(start)..self.byte(end)]
    }

    fn span(&self, start: usize, end: usize) -> Span {
        Span { start: self.offset + self.byte(start), end: self.offset + self.byte(end) }
    }

    /// Char index just past the last non-blank char at or after `start`.
    fn trimmed_end(&self, start: usize) -> usize {
        let mut end = self.chars.len();
        while end > start + 1 && self.chars[end - 1].1.is_whitespace() {
            end -= 1;
        }
        end
    }
}

/// Characters that take no room on screen: zero-width spaces and joiners,
/// direction marks, word joiners, a byte order mark inside the text.
fn is_invisible(c: char) -> bool {
    matches!(c, '\u{200B}'..='\u{200F}' | '\u{2060}'..='\u{2064}' | '\u{FEFF}' | '\u{00AD}')
}

fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// At most 40 chars of `text`, for quoting user text in messages.
pub(super) fn shorten(text: &str) -> String {
    const MAX: usize = 40;
    if text.chars().count() <= MAX {
        text.to_string()
    } else {
        let kept: String = text.chars().take(MAX).collect();
        format!("{kept}...")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(line: &str) -> (Vec<TokenKind>, Vec<Diagnostic>) {
        let mut diags = Vec::new();
        let tokens = lex_line(line, 0, &mut diags);
        (tokens.into_iter().map(|t| t.kind).collect(), diags)
    }

    fn ident(s: &str) -> TokenKind {
        TokenKind::Ident(s.into())
    }

    fn num(s: &str) -> TokenKind {
        TokenKind::Number(s.into())
    }

    #[test]
    fn key_value_with_call_and_comment() {
        let (tokens, diags) = kinds("optimizer = adamw(lr=0.001, weight_decay=1e-2) # tuned");
        assert!(diags.is_empty());
        assert_eq!(
            tokens,
            vec![
                ident("optimizer"),
                TokenKind::Eq,
                ident("adamw"),
                TokenKind::LParen,
                ident("lr"),
                TokenKind::Eq,
                num("0.001"),
                TokenKind::Comma,
                ident("weight_decay"),
                TokenKind::Eq,
                num("1e-2"),
                TokenKind::RParen,
            ]
        );
    }

    #[test]
    fn numbers() {
        for text in ["0", "100", "-3", "+2", "0.5", ".5", "-.5", "1e-3", "2.5E+4", "1."] {
            let (tokens, diags) = kinds(text);
            assert!(diags.is_empty(), "{text}");
            assert_eq!(tokens, vec![num(text)], "{text}");
        }
        // A shape is one word; `input` reads it, any other key finds a name.
        for text in ["1x28x28", "3x4", "0x10"] {
            let (tokens, diags) = kinds(text);
            assert!(diags.is_empty(), "{text}");
            assert_eq!(tokens, vec![ident(text)], "{text}");
        }
        for text in ["100abc", "1.2.3", "1e", "1x2y", "-1x2", "1x2.5", "1x2e5"] {
            let (tokens, diags) = kinds(text);
            assert_eq!(tokens, vec![TokenKind::Error], "{text}");
            assert_eq!(diags.len(), 1, "{text}");
        }
    }

    /// An unquoted path's help quotes that path, whatever the key (an
    /// export's `path` was shown `csv("data/iris.csv")`).
    #[test]
    fn an_unquoted_path_is_shown_quoted() {
        for (line, shown) in [
            ("path = models/x.onnx", "`\"models/x.onnx\"`"),
            ("source = csv(data/iris.csv)", "`\"data/iris.csv\"`"),
            ("path = out.onnx # here", "`\"out.onnx\"`"),
            ("source = csv(C:\\data\\é.csv)", "`\"C:\\data\\é.csv\"`"),
        ] {
            let (_, diags) = kinds(line);
            let help = diags[0].help.as_deref().unwrap();
            assert!(help.ends_with(&format!("double quotes: {shown}")), "{line}: {help}");
        }
    }

    #[test]
    fn pasted_characters_are_named() {
        let (_, diags) = kinds("epochs = 3\u{200B}");
        assert_eq!(diags[0].message, "unexpected character U+200B");
        assert!(diags[0].help.as_deref().unwrap().contains("invisible"));
        // A byte-order mark is one only where the file starts.
        let mut diags = Vec::new();
        assert_eq!(lex_line("\u{feff}\u{feff}epochs = 3", 0, &mut diags).len(), 3);
        assert!(diags.is_empty(), "{diags:?}");
        for (line, offset) in [("dense 8 re\u{feff}lu", 0), ("\u{feff}epochs = 3", 40)] {
            let mut diags = Vec::new();
            lex_line(line, offset, &mut diags);
            assert_eq!(diags[0].message, "unexpected character U+FEFF", "{line:?}");
            assert!(diags[0].help.as_deref().unwrap().contains("invisible"));
        }
        // Passed over once said: the line reads as if it were not there.
        let (tokens, diags) = kinds("\u{200B}train:");
        assert_eq!((tokens, diags.len()), (vec![ident("train"), TokenKind::Colon], 1));
        let (tokens, diags) = kinds("dense 8 re\u{200B}lu");
        assert_eq!(tokens[2], ident("relu"));
        assert_eq!((diags[0].span.start, diags[0].span.end), (10, 13), "the character itself (3 bytes)");
        let (_, diags) = kinds("target = \u{201C}y\u{201D}");
        assert_eq!(diags[0].message, "unexpected character `\u{201C}` (U+201C)");
        assert!(diags[0].help.as_deref().unwrap().contains("straight double quotes"));
        let (_, diags) = kinds("lr = 1e\u{2212}2");
        assert_eq!(diags[0].message, "a typographic minus in a number");
        assert_eq!((diags[0].span.start, diags[0].span.end), (7, 10), "the minus itself (3 bytes)");
    }

    #[test]
    fn a_shape_with_a_capital_x_is_shown_lowercase() {
        let (_, diags) = kinds("input 4X1");
        assert_eq!(diags[0].message, "invalid shape `4X1`");
        assert_eq!(diags[0].help.as_deref(), Some("a shape's sizes are joined by a lowercase `x`: `4x1`"));
        let (_, diags) = kinds("input 1X28X28");
        assert_eq!(diags[0].help.as_deref(), Some("a shape's sizes are joined by a lowercase `x`: `1x28x28`"));
        // Not a shape: said as before.
        let (_, diags) = kinds("input 4Xa");
        assert_eq!(diags[0].message, "`4Xa` is neither a number nor a name");
    }

    #[test]
    fn a_percentage_is_shown_as_its_fraction() {
        for (line, help) in [
            ("split = 80%", "write a percentage as a fraction: `80%` is `0.8`"),
            ("split = 12.5%", "write a percentage as a fraction: `12.5%` is `0.125`"),
            ("dropout = 35%", "write a percentage as a fraction: `35%` is `0.35`"),
            ("split = 14.3%", "write a percentage as a fraction: `14.3%` is `0.143`"),
        ] {
            let (_, diags) = kinds(line);
            assert_eq!(diags[0].message, "unexpected character `%`", "{line}");
            assert_eq!(diags[0].help.as_deref(), Some(help), "{line}");
        }
        // Not after a plain number: no percentage to show.
        for line in ["split = %", "target = y%", "lr = 1e-3%"] {
            let (_, diags) = kinds(line);
            assert_eq!(diags[0].help, None, "{line}");
        }
    }

    #[test]
    fn strings_keep_hashes_and_resolve_escapes() {
        let (tokens, diags) = kinds(r#"path = "a#b \"q\" c\\d" # comment"#);
        assert!(diags.is_empty());
        assert_eq!(tokens[2], TokenKind::Str(r#"a#b "q" c\d"#.into()));
        assert_eq!(tokens.len(), 3);
    }

    #[test]
    fn unclosed_string_is_one_error() {
        let (tokens, diags) = kinds("target = \"outcome   ");
        assert_eq!(tokens, vec![ident("target"), TokenKind::Eq, TokenKind::Error]);
        assert_eq!(diags.len(), 1);
        assert_eq!(diags[0].message, "unclosed string");
        assert_eq!(diags[0].span, Span { start: 9, end: 17 });
    }

    #[test]
    fn stray_characters_are_reported_once_per_line() {
        let (tokens, diags) = kinds("dataset my-data@x:");
        assert_eq!(diags.len(), 1);
        assert_eq!(diags[0].span, Span { start: 10, end: 11 });
        assert_eq!(tokens.last(), Some(&TokenKind::Colon));
    }

    #[test]
    fn spans_are_byte_offsets_in_the_source() {
        let mut diags = Vec::new();
        let tokens = lex_line("  é = 1", 10, &mut diags);
        assert_eq!(diags[0].span, Span { start: 12, end: 14 });
        assert_eq!(tokens[2].span, Span { start: 17, end: 18 });
    }
}
