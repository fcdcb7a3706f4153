//! Stage one: source text to the untyped [`Document`].
//!
//! Indentation means nothing here. Specs are pasted through tools that strip
//! it, so a block's body is every line after its header up to the next
//! header, and a line is classified by its tokens alone: a header has a `:`
//! before any `=`, a setting has `=`, anything else in a `model` block is a
//! layer. Each line is read on its own, so one bad line is reported once and
//! the lines after it are still checked.

use super::ast::{Arg, Block, BlockKind, Call, Document, Entry, LayerLine, Value, ValueKind};
use super::diagnostic::Diagnostic;
use super::lexer::{lex_line, Token, TokenKind};
use super::suggest;
use super::types::{Span, Spanned};

/// Deepest nesting of `[` and `(` in one value. Real specs use two or three;
/// the limit keeps hostile input from exhausting the stack.
pub(super) const MAX_DEPTH: usize = 32;

/// Layer names, for hints when a layer line shows up outside a model block.
/// Whether `word` starts a layer line (`input` included).
/// Whether `tokens` close a bracket or parenthesis they did not open.
/// The first such token, if any.
fn closes_unopened(tokens: &[Token]) -> Option<&Token> {
    let mut depth = 0i32;
    for t in tokens {
        match t.kind {
            TokenKind::LParen | TokenKind::LBracket => depth += 1,
            TokenKind::RParen | TokenKind::RBracket => depth -= 1,
            _ => {}
        }
        if depth < 0 {
            return Some(t);
        }
    }
    None
}

/// Whether `tokens` open a bracket or parenthesis they do not close: a value
/// that goes on (by mistake) on the next line.
fn leaves_open(tokens: &[Token]) -> bool {
    let depth = tokens.iter().fold(0i32, |depth, t| match t.kind {
        TokenKind::LParen | TokenKind::LBracket => depth + 1,
        TokenKind::RParen | TokenKind::RBracket => depth - 1,
        _ => depth,
    });
    depth > 0
}

fn is_layer_name(word: &str) -> bool {
    word == "input" || crate::model::layer_names().contains(&word)
}

pub(super) fn parse(source: &str, diags: &mut Vec<Diagnostic>) -> Document {
    let mut parser = Parser {
        source,
        document: Document::default(),
        state: State::BeforeFirstBlock { reported: false },
        left_open: false,
        guessed_after: None,
    };
    let mut offset = 0;
    for (index, line) in source.split('\n').enumerate() {
        parser.line(line, offset, index + 1, diags);
        offset += line.len() + 1;
    }
    parser.document
}

enum State {
    BeforeFirstBlock {
        reported: bool,
    },
    InBlock(usize),
    /// In the body of a block whose header could not be read: its lines are
    /// skipped, since their meaning depends on the kind of block. Their first
    /// words are kept as the block before's (by its index) when the header
    /// named no known kind: the lines may have been that block's.
    Skipping {
        after: Option<usize>,
    },
}

struct Parser<'s> {
    source: &'s str,
    document: Document,
    state: State,
    /// The last line with tokens left a bracket or parenthesis open.
    left_open: bool,
    /// In a block read under a misspelled header: the block before it,
    /// whose lines these may have been (their first words are kept as its
    /// `swallowed`, so that they are not said to be missing from it).
    guessed_after: Option<usize>,
}

/// What a line is, judged by its tokens.
enum Shape {
    /// Tokens before the `:` are the header, tokens after it are stray.
    Header {
        colon: usize,
    },
    /// `train` or `model DeepNet` alone on a line: a header without its `:`.
    HeaderWithoutColon,
    Body,
}

impl<'s> Parser<'s> {
    fn line(&mut self, line: &str, offset: usize, line_no: usize, diags: &mut Vec<Diagnostic>) {
        let mut lex_diags = Vec::new();
        let tokens = lex_line(line, offset, &mut lex_diags);
        // A line of nothing but an invisible character (said by the lexer, no token).
        let Some(last) = tokens.last() else {
            diags.extend(lex_diags);
            return;
        };
        let span = Span { start: tokens[0].span.start, end: last.span.end };
        self.document.end = span.end;
        let lex_failed = !lex_diags.is_empty();
        let continues = std::mem::replace(&mut self.left_open, leaves_open(&tokens));
        let indent_text: String = line.chars().take_while(|c| c.is_whitespace()).collect();
        let indent = indent_text.chars().count();
        if self.opens_layer_block(&tokens) {
            // `residual:` in a model block: a block of layers, not a new block of the spec.
            diags.extend(lex_diags);
            if let (State::InBlock(index), TokenKind::Ident(name)) = (&self.state, &tokens[0].kind) {
                let name = Spanned { value: name.clone(), span: tokens[0].span };
                self.document.blocks[*index].layers.push(LayerLine {
                    name,
                    args: Vec::new(),
                    options: Vec::new(),
                    span,
                    damaged: lex_failed,
                    indent,
                    indent_text,
                    opens: true,
                });
            }
            return;
        }
        let mut shape = shape(&tokens);
        let names_model = matches!(&tokens[0].kind, TokenKind::Ident(word) if word == BlockKind::Model.keyword());
        // `dataset Iris` is the `data` setting where it is indented or names
        // a dataset already declared (a header of a new one, its `:` left
        // out, starts at the line's beginning and names a new one).
        let names_dataset = matches!(&tokens[0].kind, TokenKind::Ident(word) if word == BlockKind::Dataset.keyword())
            && (indent > 0
                || matches!(tokens.get(1).map(|t| &t.kind), Some(TokenKind::Ident(name))
                if self.document.blocks.iter().any(|b| {
                    b.kind == BlockKind::Dataset && b.name.as_ref().is_some_and(|n| n.value == *name)
                })));
        if matches!(shape, Shape::HeaderWithoutColon) && (names_model || names_dataset) && self.in_train_block() {
            // `model DeepNet` or `dataset Iris` in `train:` is the `model` or
            // `data` setting without its `=`, not a new block (which took
            // the train block's later lines with it).
            shape = Shape::Body;
        }
        // The line as the block readers take it.
        let line = || Line {
            tokens: &tokens,
            indent,
            indent_text: indent_text.clone(),
            span,
            number: line_no,
            lex_failed,
            continues,
        };
        match shape {
            // `dense 4 relu:` in a model block: a layer line with a stray
            // `:`, not a block of its own (which also left the model's
            // later layers out, and said so a second time).
            Shape::Header { colon } if colon + 1 == tokens.len() && colon >= 1 && self.layer_with_colon(&tokens) => {
                diags.extend(lex_diags);
                if !lex_failed {
                    let text = &self.source[span.start..tokens[colon - 1].span.end];
                    diags.push(
                        Diagnostic::new(tokens[colon].span, "a layer line does not end with `:`", "unexpected `:`")
                            .with_help(format!("write `{text}`; only `residual:` opens a block of layers")),
                    );
                }
                if let State::InBlock(index) = self.state {
                    let inner = Span { start: span.start, end: tokens[colon - 1].span.end };
                    let line = Line {
                        tokens: &tokens[..colon],
                        indent,
                        indent_text,
                        span: inner,
                        number: line_no,
                        lex_failed,
                        continues,
                    };
                    self.layer_line(index, &line, diags);
                }
            }
            // `resdual:` indented in a model block: a misspelled block of
            // layers, not a new block of the spec (which took the model's
            // later layers with it). Kept as an unreadable line, so the
            // layers under it stay the model's.
            Shape::Header { colon: 1 } if indent > 0 && tokens.len() == 2 && self.in_model_block(&tokens) => {
                diags.extend(lex_diags);
                let TokenKind::Ident(word) = &tokens[0].kind else { return };
                let blocks = crate::model::block_names();
                let help = match suggest::did_you_mean(word, blocks.iter().copied()) {
                    Some(name) => format!("did you mean `{name}:`?"),
                    None => format!(
                        "only {} opens a block of layers; a block of the spec (`train:`, `evaluate:`, ...) starts \
                         at the beginning of its line",
                        blocks.iter().map(|b| format!("`{b}:`")).collect::<Vec<_>>().join(" or ")
                    ),
                };
                diags.push(
                    Diagnostic::new(tokens[0].span, format!("unknown block of layers `{word}`"), "unknown block")
                        .with_help(help),
                );
                if let State::InBlock(index) = self.state {
                    self.document.blocks[index].layers.push(LayerLine {
                        name: Spanned { value: word.clone(), span: tokens[0].span },
                        args: Vec::new(),
                        options: Vec::new(),
                        span,
                        damaged: true,
                        indent,
                        indent_text,
                        opens: false,
                    });
                }
            }
            Shape::Header { colon: 1 } if self.colon_setting(&tokens) => {
                diags.extend(lex_diags);
                self.colon_instead_of_equals(&line(), diags);
            }
            Shape::Header { colon } => {
                diags.extend(lex_diags);
                self.header(&tokens, Some(colon), span, line_no, lex_failed, diags);
            }
            Shape::HeaderWithoutColon => {
                diags.extend(lex_diags);
                self.header(&tokens, None, span, line_no, lex_failed, diags);
            }
            Shape::Body => match self.state {
                State::BeforeFirstBlock { reported: false } => {
                    self.state = State::BeforeFirstBlock { reported: true };
                    diags.push(
                        Diagnostic::new(
                            span,
                            "line outside any block",
                            "this line comes before the first block header",
                        )
                        .with_help(
                            "start the spec with a block header such as `dataset NAME:`, `model NAME:` or `train:`",
                        ),
                    );
                }
                State::BeforeFirstBlock { reported: true } | State::Skipping { after: None } => {}
                State::Skipping { after: Some(index) } => {
                    if let TokenKind::Ident(word) = &tokens[0].kind {
                        self.document.blocks[index].swallowed.push(word.clone());
                    }
                }
                State::InBlock(index) => {
                    if let (Some(before), TokenKind::Ident(word)) = (self.guessed_after, &tokens[0].kind) {
                        self.document.blocks[before].swallowed.push(word.clone());
                    }
                    // A block read under a misspelled header whose first
                    // line is not of its kind (layers under `trian:`) was
                    // guessed wrong: it is given up, and its lines skipped.
                    let block = &self.document.blocks[index];
                    let first = block.entries.is_empty() && block.layers.is_empty() && !block.damaged;
                    let setting = top_level_eq(&tokens).is_some();
                    if block.guessed && first && setting == (block.kind == BlockKind::Model) {
                        self.document.blocks.pop();
                        self.state = State::Skipping { after: self.guessed_after };
                        return;
                    }
                    diags.extend(lex_diags);
                    if self.document.blocks[index].kind == BlockKind::Model {
                        self.layer_line(index, &line(), diags);
                    } else {
                        self.entry_line(index, &line(), diags);
                    }
                }
            },
        }
    }

    /// `source: csv("x")` or `input: 128` inside a block: a setting or
    /// layer written with `:` the way YAML would, rather than a header.
    fn colon_setting(&self, tokens: &[Token]) -> bool {
        let is_keyword = match &tokens[0].kind {
            TokenKind::Ident(word) => BlockKind::from_keyword(word).is_some(),
            _ => true,
        };
        matches!(self.state, State::InBlock(_)) && !is_keyword && tokens.len() > 2
    }

    fn colon_instead_of_equals(&mut self, line: &Line, diags: &mut Vec<Diagnostic>) {
        let State::InBlock(index) = self.state else { return };
        let block = &mut self.document.blocks[index];
        let tokens = line.tokens;
        let TokenKind::Ident(key) = &tokens[0].kind else { return };
        let rest = &self.source[tokens[2].span.start..line.span.end];
        let is_model = block.kind == BlockKind::Model;
        // `residual: extra`: a block's line takes nothing after its colon.
        if is_model && key == "residual" && !line.lex_failed {
            diags.push(
                Diagnostic::new(
                    Span { start: tokens[2].span.start, end: line.span.end },
                    "unexpected text after `residual:`",
                    "a block's line ends at its `:`",
                )
                .with_help(
                    "write `residual:` alone on its line, and its layers on the lines below it, indented further",
                ),
            );
        } else if !line.lex_failed {
            let help = if is_model { format!("write `{key} {rest}`") } else { format!("write `{key} = {rest}`") };
            let expected = if is_model { "a space" } else { "`=`" };
            diags.push(
                Diagnostic::new(
                    tokens[1].span,
                    format!("expected {expected} after `{key}`, found `:`"),
                    format!("expected {expected}"),
                )
                .with_help(help),
            );
        }
        let name = Spanned { value: key.clone(), span: tokens[0].span };
        if is_model {
            block.layers.push(LayerLine {
                name,
                args: Vec::new(),
                options: Vec::new(),
                span: line.span,
                damaged: true,
                indent: line.indent,
                indent_text: line.indent_text.clone(),
                opens: false,
            });
        } else {
            block.entries.push(Entry { key: name, value: Value::error(line.span), line: line.number, damaged: true });
        }
    }

    /// `residual:` inside a model block.
    fn opens_layer_block(&self, tokens: &[Token]) -> bool {
        let State::InBlock(index) = self.state else { return false };
        self.document.blocks[index].kind == BlockKind::Model
            && tokens.len() == 2
            && tokens[1].kind == TokenKind::Colon
            && matches!(&tokens[0].kind, TokenKind::Ident(name) if crate::model::block_names().contains(&name.as_str()))
    }

    /// `word:` inside a model block, `word` neither a kind of block of the
    /// spec nor a misspelling of one (`trian:`, indented as the layers
    /// above it) rather than of a block of layers.
    fn in_model_block(&self, tokens: &[Token]) -> bool {
        let State::InBlock(index) = self.state else { return false };
        let TokenKind::Ident(word) = &tokens[0].kind else { return false };
        let spec_header = BlockKind::from_keyword(word).is_some()
            || (suggest::did_you_mean(word, BlockKind::ALL.map(BlockKind::keyword)).is_some()
                && suggest::did_you_mean(word, crate::model::block_names()).is_none());
        self.document.blocks[index].kind == BlockKind::Model && !spec_header
    }

    /// A layer's line ending in `:` inside a model block: `dense 4 relu:`
    /// (a layer name, then its arguments, then the colon).
    fn layer_with_colon(&self, tokens: &[Token]) -> bool {
        let State::InBlock(index) = self.state else { return false };
        self.document.blocks[index].kind == BlockKind::Model
            && matches!(&tokens[0].kind, TokenKind::Ident(name) if is_layer_name(name))
    }

    fn in_train_block(&self) -> bool {
        match self.state {
            State::InBlock(index) => self.document.blocks[index].kind == BlockKind::Train,
            _ => false,
        }
    }

    fn header(
        &mut self,
        tokens: &[Token],
        colon: Option<usize>,
        span: Span,
        line_no: usize,
        lex_failed: bool,
        diags: &mut Vec<Diagnostic>,
    ) {
        let before = match self.state {
            State::InBlock(index) => Some(index),
            _ => None,
        };
        self.state = State::Skipping { after: None };
        self.guessed_after = None;
        let head = &tokens[..colon.unwrap_or(tokens.len())];
        match colon {
            None => {
                let at = Span { start: span.end, end: span.end };
                let text = &self.source[span.start..span.end];
                diags.push(
                    Diagnostic::new(at, "missing `:` after block header", "expected `:`")
                        .with_help(format!("write `{text}:`")),
                );
            }
            Some(colon) if colon + 1 < tokens.len() && !lex_failed => {
                let tail = Span { start: tokens[colon + 1].span.start, end: span.end };
                diags.push(
                    Diagnostic::new(tail, "unexpected text after block header", "expected the end of the line")
                        .with_help("a header ends with `:`; write each setting on its own line below it"),
                );
            }
            Some(_) => {}
        }
        let header_span = Span { start: span.start, end: colon.map_or(span.end, |c| tokens[c].span.end) };

        let word = match head.first() {
            Some(Token { kind: TokenKind::Ident(word), .. }) => word,
            Some(Token { kind: TokenKind::Error, .. }) => return,
            first => {
                if !lex_failed {
                    let found = first.map_or("`:`".to_string(), Token::describe);
                    let at = first.map_or(header_span, |t| t.span);
                    diags.push(
                        Diagnostic::new(at, format!("expected a block header, found {found}"), "expected a block kind")
                            .with_help(format!("blocks begin with {}", all_headers())),
                    );
                }
                return;
            }
        };
        let (kind, guessed) = match BlockKind::from_keyword(word) {
            Some(kind) => (kind, false),
            None => {
                let keywords = BlockKind::ALL.map(BlockKind::keyword);
                let guess = suggest::did_you_mean(word, keywords);
                let help = match guess {
                    Some(keyword) => format!("did you mean `{keyword}`?"),
                    None => format!("blocks begin with {}", all_headers()),
                };
                diags.push(
                    Diagnostic::new(head[0].span, format!("unknown block `{}`", word), "unknown block kind")
                        .with_help(help),
                );
                let Some(kind) = guess.and_then(BlockKind::from_keyword) else {
                    self.state = State::Skipping { after: before };
                    return;
                };
                // Its body is read as the block it was meant to be: its
                // problems are said now, not once the header is fixed.
                self.document.lost_blocks.push(kind);
                self.guessed_after = before;
                (kind, true)
            }
        };

        // A misspelled header's name is taken as written, its problems
        // left for when the header is fixed (one problem a line).
        let name = self.block_name(kind, &head[1..], header_span, lex_failed || guessed, diags);
        if kind.is_named() && name.is_none() {
            self.document.lost_blocks.push(kind);
        }
        self.document.blocks.push(Block {
            kind,
            name,
            header: header_span,
            line: line_no,
            entries: Vec::new(),
            layers: Vec::new(),
            damaged: false,
            swallowed: Vec::new(),
            guessed,
        });
        self.state = State::InBlock(self.document.blocks.len() - 1);
    }

    /// The name after `dataset` or `model`; checks that `train:` and the
    /// others have none.
    fn block_name(
        &self,
        kind: BlockKind,
        names: &[Token],
        header: Span,
        lex_failed: bool,
        diags: &mut Vec<Diagnostic>,
    ) -> Option<Spanned<String>> {
        let keyword = kind.keyword();
        let single_ident = match names {
            [Token { kind: TokenKind::Ident(name), span }] => Some(Spanned { value: name.clone(), span: *span }),
            _ => None,
        };
        if lex_failed {
            return single_ident.filter(|_| kind.is_named());
        }
        let names_span = match (names.first(), names.last()) {
            (Some(first), Some(last)) => Span { start: first.span.start, end: last.span.end },
            _ => header,
        };
        if !kind.is_named() {
            if !names.is_empty() {
                let help = if kind == BlockKind::Train {
                    "write `train:`; choose the model and the dataset with `model = NAME` and `data = NAME` inside it"
                        .to_string()
                } else {
                    format!("write `{keyword}:`")
                };
                diags.push(
                    Diagnostic::new(
                        names_span,
                        format!(
                            "{} `{keyword}:` block takes no name",
                            if keyword.starts_with('e') { "an" } else { "a" }
                        ),
                        "unexpected name",
                    )
                    .with_help(help),
                );
            }
            return None;
        }
        let example = if kind == BlockKind::Model { "DeepNet" } else { "LargeData" };
        // `true` and `false` read as values where a setting names the block
        // (`model = false` is a boolean): a name no setting could refer to.
        if let Some(name) = single_ident.as_ref().filter(|n| n.value == "true" || n.value == "false") {
            diags.push(
                Diagnostic::new(name.span, format!("`{}` is a value, not a name for a block", name.value), "a value")
                    .with_help(format!("name the block otherwise, as `{keyword} {example}:`")),
            );
            return None;
        }
        if single_ident.is_some() {
            return single_ident;
        }
        let diagnostic = match names {
            [] => Diagnostic::new(header, format!("missing name in `{keyword}` header"), "expected a name before `:`")
                .with_help(format!("write `{keyword} NAME:`, for example `{keyword} {example}:`")),
            [Token { kind: TokenKind::Str(text), span }] => {
                let d = Diagnostic::new(*span, "block names are written without quotes", "quoted name");
                if is_identifier(text) {
                    d.with_help(format!("write `{keyword} {text}:`"))
                } else {
                    d.with_help("a name is made of letters, digits and `_`, and does not start with a digit")
                }
            }
            [one] => Diagnostic::new(
                one.span,
                format!("expected a name after `{keyword}`, found {}", one.describe()),
                "not a name",
            )
            .with_help("a name is made of letters, digits and `_`, and does not start with a digit"),
            many => match many.iter().find(|t| !matches!(t.kind, TokenKind::Ident(_))) {
                Some(odd) => Diagnostic::new(
                    odd.span,
                    format!("unexpected {} in the name after `{keyword}`", odd.describe()),
                    "not part of a name",
                )
                .with_help("a name is made of letters, digits and `_`, and does not start with a digit"),
                None => {
                    let words: Vec<&str> = many
                        .iter()
                        .filter_map(|t| match &t.kind {
                            TokenKind::Ident(w) => Some(w.as_str()),
                            _ => None,
                        })
                        .collect();
                    Diagnostic::new(
                        names_span,
                        format!("expected one name after `{keyword}`, found {}", many.len()),
                        "a name cannot contain spaces",
                    )
                    .with_help(format!("write `{keyword} {}:`", words.join("_")))
                }
            },
        };
        diags.push(diagnostic);
        None
    }

    /// A `key = value` line of a dataset, train, evaluate or export block.
    fn entry_line(&mut self, index: usize, line: &Line, diags: &mut Vec<Diagnostic>) {
        let tokens = line.tokens;
        let block = &mut self.document.blocks[index];
        let first_ident = match &tokens[0].kind {
            TokenKind::Ident(word) => Some(Spanned { value: word.clone(), span: tokens[0].span }),
            _ => None,
        };
        let eq = tokens.iter().position(|t| t.kind == TokenKind::Eq);
        let damaged = |key: Option<Spanned<String>>, block: &mut Block| match key {
            Some(key) => {
                block.entries.push(Entry { value: Value::error(line.span), key, line: line.number, damaged: true })
            }
            None => block.damaged = true,
        };

        // `rmse]` or `weight_decay=0.1)` under a line left open: the rest
        // of the value above, which the lexer reported unclosed there.
        // Under a closed line it is one closer too many (`adamw(lr=0.01))`).
        if let Some(closer) = closes_unopened(tokens) {
            let closer_span = closer.span;
            if !line.lex_failed {
                diags.push(if line.continues {
                    Diagnostic::new(line.span, "the rest of a value from a line above", "a line of its own").with_help(
                        "a value must end on the line where it starts: join this line to the one it continues",
                    )
                } else {
                    let closer = closer.describe();
                    Diagnostic::new(closer_span, format!("unexpected {closer}: it closes nothing"), "one too many")
                        .with_help(format!("remove this {closer}"))
                });
            }
            damaged(first_ident, block);
            return;
        }
        let Some(eq) = eq else {
            if !line.lex_failed {
                let help = match (&first_ident, tokens.len()) {
                    (Some(word), _) if is_layer_name(&word.value) => {
                        "layers belong in a `model NAME:` block".to_string()
                    }
                    (Some(word), 1) => format!("write `{} = VALUE`", word.value),
                    (Some(word), _) => {
                        let rest = &self.source[tokens[1].span.start..line.span.end];
                        // The train block's key for its dataset is `data`.
                        let key = match word.value.as_str() {
                            "dataset" if block.kind == BlockKind::Train => "data",
                            key => key,
                        };
                        format!("write `{key} = {rest}`")
                    }
                    (None, _) => "a setting is written `key = value`".to_string(),
                };
                diags.push(Diagnostic::new(line.span, "expected `key = value`", "missing `=`").with_help(help));
            }
            damaged(first_ident, block);
            return;
        };

        let Some(key) = first_ident.filter(|_| eq > 0) else {
            if !line.lex_failed {
                diags.push(
                    Diagnostic::new(tokens[0].span, "expected a key before `=`", "expected a key")
                        .with_help("a setting is written `key = value`, as in `epochs = 100`"),
                );
            }
            block.damaged = true;
            return;
        };
        if eq != 1 {
            if !line.lex_failed {
                diags.push(
                    Diagnostic::new(
                        tokens[1].span,
                        format!("expected `=` after `{}`, found {}", key.value, tokens[1].describe()),
                        "expected `=`",
                    )
                    .with_help("a key is one word; join words with `_`, as in `weight_decay`"),
                );
            }
            damaged(Some(key), block);
            return;
        }

        let rest = &tokens[2..];
        let value = if line.lex_failed {
            Value::error(line.span)
        } else if rest.is_empty() {
            let at = tokens[1].span;
            diags.push(
                Diagnostic::new(at, format!("missing value for `{}`", key.value), "expected a value after `=`")
                    .with_help(format!("write `{} = VALUE`", key.value)),
            );
            Value::error(line.span)
        } else {
            setting_value(rest, diags)
        };
        block.entries.push(Entry { key, value, line: line.number, damaged: false });
    }

    /// A line of a model block: a layer name and its space-separated
    /// arguments, `dense 64 leaky_relu(0.2)`.
    fn layer_line(&mut self, index: usize, line: &Line, diags: &mut Vec<Diagnostic>) {
        let tokens = line.tokens;
        let block = &mut self.document.blocks[index];
        // `key = value` is a setting in the wrong block; `conv2d 8 3 relu
        // stride=2` is a layer with an option.
        if let Some(eq) = top_level_eq(tokens).filter(|eq| *eq <= 1) {
            if !line.lex_failed {
                let help = match &tokens[0].kind {
                    // `dense = 1`: a dense layer needs its activation too.
                    TokenKind::Ident(key)
                        if eq == 1
                            && key == "dense"
                            && matches!(tokens[2..], [Token { kind: TokenKind::Number(_), .. }]) =>
                    {
                        let rest = &self.source[tokens[2].span.start..line.span.end];
                        format!("write `dense {rest} ACTIVATION`: `dense {rest} relu`, or `dense {rest} linear` for the outputs")
                    }
                    TokenKind::Ident(key) if eq == 1 && is_layer_name(key) && tokens.len() > 2 => {
                        let rest = &self.source[tokens[2].span.start..line.span.end];
                        format!("write `{key} {rest}`")
                    }
                    _ => layer_forms(),
                };
                diags.push(
                    Diagnostic::new(line.span, "expected a layer, found a `key = value` setting", "not a layer")
                        .with_help(help),
                );
            }
            block.damaged = true;
            return;
        }
        let TokenKind::Ident(name) = &tokens[0].kind else {
            if !line.lex_failed {
                diags.push(
                    Diagnostic::new(
                        tokens[0].span,
                        format!("expected a layer, found {}", tokens[0].describe()),
                        "expected a layer name",
                    )
                    .with_help(layer_forms()),
                );
            }
            block.damaged = true;
            return;
        };
        let name = Spanned { value: name.clone(), span: tokens[0].span };
        let mut layer = LayerLine {
            name,
            args: Vec::new(),
            options: Vec::new(),
            span: line.span,
            damaged: line.lex_failed,
            indent: line.indent,
            indent_text: line.indent_text.clone(),
            opens: false,
        };
        if !line.lex_failed {
            let mut parser = ValueParser::new(&tokens[1..]);
            while let Some(next) = parser.peek() {
                if next.kind == TokenKind::Comma {
                    diags.push(
                        Diagnostic::new(next.span, "unexpected `,` in a layer line", "expected a space")
                            .with_help("the parts of a layer are separated by spaces, as in `dense 64 relu`"),
                    );
                    layer.damaged = true;
                    break;
                }
                if let (Some(TokenKind::Ident(key)), Some(TokenKind::Eq)) = (parser.peek_kind(0), parser.peek_kind(1)) {
                    let key = Spanned { value: key.clone(), span: next.span };
                    parser.next();
                    parser.next();
                    match parser.value(0) {
                        Ok(value) => layer.options.push((key, value)),
                        Err(d) => {
                            diags.push(d);
                            layer.damaged = true;
                            break;
                        }
                    }
                    continue;
                }
                if !layer.options.is_empty() {
                    diags.push(
                        Diagnostic::new(next.span, "an argument after `key=value` options", "expected `key=value`")
                            .with_help(
                            "write the layer's arguments first and its options last, as in `conv2d 8 3 relu stride=2`",
                        ),
                    );
                    layer.damaged = true;
                    break;
                }
                match parser.value(0) {
                    Ok(value) => layer.args.push(value),
                    Err(d) => {
                        diags.push(d);
                        layer.damaged = true;
                        break;
                    }
                }
            }
        }
        block.layers.push(layer);
    }
}

/// One line's tokens and facts about it.
struct Line<'t> {
    tokens: &'t [Token],
    /// Characters of indentation.
    indent: usize,
    /// That indentation, as written.
    indent_text: String,
    /// From the first token to the last, without indentation or comment.
    span: Span,
    number: usize,
    /// The lexer already reported a problem on this line.
    lex_failed: bool,
    /// The line above left a bracket or parenthesis open.
    continues: bool,
}

fn shape(tokens: &[Token]) -> Shape {
    let colon = tokens.iter().position(|t| t.kind == TokenKind::Colon);
    let eq = tokens.iter().position(|t| t.kind == TokenKind::Eq);
    if let Some(colon) = colon {
        if eq.is_none_or(|eq| colon < eq) {
            return Shape::Header { colon };
        }
    }
    if eq.is_none() {
        if let Some(TokenKind::Ident(word)) = tokens.first().map(|t| &t.kind) {
            if let Some(kind) = BlockKind::from_keyword(word) {
                let words = if kind.is_named() { 2 } else { 1 };
                if tokens.len() == words && tokens.iter().all(|t| matches!(t.kind, TokenKind::Ident(_))) {
                    return Shape::HeaderWithoutColon;
                }
            }
        }
    }
    Shape::Body
}

/// The first `=` outside brackets: `dense 8 leaky_relu(negative_slope=0.1)`
/// is a layer, `input = 8` is not.
fn top_level_eq(tokens: &[Token]) -> Option<usize> {
    let mut depth = 0usize;
    for (i, token) in tokens.iter().enumerate() {
        match token.kind {
            TokenKind::LParen | TokenKind::LBracket => depth += 1,
            TokenKind::RParen | TokenKind::RBracket => depth = depth.saturating_sub(1),
            TokenKind::Eq if depth == 0 => return Some(i),
            _ => {}
        }
    }
    None
}

/// The value after `key =`: exactly one value, then the end of the line.
fn setting_value(tokens: &[Token], diags: &mut Vec<Diagnostic>) -> Value {
    let all = Span { start: tokens[0].span.start, end: tokens[tokens.len() - 1].span.end };
    let mut parser = ValueParser::new(tokens);
    let value = match parser.value(0) {
        Ok(value) => value,
        Err(d) => {
            diags.push(d);
            return Value::error(all);
        }
    };
    let Some(extra) = parser.peek() else { return value };
    let after = Span { start: extra.span.start, end: all.end };
    let next = parser.tokens.get(parser.pos + 1).map(|t| &t.kind);
    let help = match (&value.kind, &extra.kind, next) {
        (ValueKind::Ident(_), TokenKind::Colon, _) => {
            Some(format!("a value containing `:` is written in quotes, as in `\"{}\"`", quote_body(tokens)))
        }
        (_, TokenKind::Comma, _) => Some("several values form a list in square brackets, as in `[mae, rmse]`".into()),
        (ValueKind::Ident(name), TokenKind::Ident(_), Some(TokenKind::Eq)) => {
            Some(format!("arguments go in parentheses, as in `{name}(lr=0.001)`"))
        }
        _ => None,
    };
    let mut d = Diagnostic::new(
        after,
        format!("unexpected {} after the value", extra.describe()),
        "expected the end of the line",
    );
    if let Some(help) = help {
        d = d.with_help(help);
    }
    diags.push(d);
    Value::error(all)
}

/// `cuda:1` rebuilt from its tokens, for the hint to quote it.
fn quote_body(tokens: &[Token]) -> String {
    tokens
        .iter()
        .map(|t| match &t.kind {
            TokenKind::Ident(text) | TokenKind::Number(text) => text.clone(),
            TokenKind::Colon => ":".into(),
            _ => String::new(),
        })
        .collect()
}

struct ValueParser<'t> {
    tokens: &'t [Token],
    pos: usize,
}

impl<'t> ValueParser<'t> {
    fn new(tokens: &'t [Token]) -> Self {
        ValueParser { tokens, pos: 0 }
    }

    fn peek(&self) -> Option<&'t Token> {
        self.tokens.get(self.pos)
    }

    fn peek_kind(&self, ahead: usize) -> Option<&'t TokenKind> {
        self.tokens.get(self.pos + ahead).map(|t| &t.kind)
    }

    fn next(&mut self) -> Option<&'t Token> {
        let token = self.tokens.get(self.pos);
        self.pos += 1;
        token
    }

    /// Where a missing value would go: just past the last token.
    fn end(&self) -> Span {
        let end = self.tokens.last().map_or(0, |t| t.span.end);
        Span { start: end, end }
    }

    fn value(&mut self, depth: usize) -> Result<Value, Diagnostic> {
        let Some(token) = self.next() else {
            return Err(Diagnostic::new(self.end(), "missing value", "expected a value"));
        };
        let span = token.span;
        let kind = match &token.kind {
            TokenKind::Number(text) => ValueKind::Number(text.clone()),
            TokenKind::Str(text) => ValueKind::Str(text.clone()),
            TokenKind::Ident(name) if self.peek_kind(0) == Some(&TokenKind::LParen) => {
                return self.call(Spanned { value: name.clone(), span }, depth);
            }
            TokenKind::Ident(name) if name == "true" => ValueKind::Bool(true),
            TokenKind::Ident(name) if name == "false" => ValueKind::Bool(false),
            TokenKind::Ident(name) => ValueKind::Ident(name.clone()),
            TokenKind::LBracket => return self.list(span, depth),
            TokenKind::Error => ValueKind::Error,
            _ => {
                let problem =
                    Diagnostic::new(span, format!("expected a value, found {}", token.describe()), "expected a value");
                // Python's tuple, as `betas=(0.9, 0.999)` is written for torch.
                return Err(match token.kind {
                    TokenKind::LParen => {
                        problem.with_help("a list is written in square brackets, `[a, b]`, not in parentheses")
                    }
                    _ => problem,
                });
            }
        };
        Ok(Value { kind, span })
    }

    fn list(&mut self, open: Span, depth: usize) -> Result<Value, Diagnostic> {
        if depth >= MAX_DEPTH {
            return Err(too_deep(open));
        }
        let mut items = Vec::new();
        loop {
            match self.peek_kind(0) {
                None => return Err(unclosed(open, '[', ']')),
                Some(TokenKind::RBracket) => {
                    let close = self.next().map_or(open, |t| t.span);
                    let span = Span { start: open.start, end: close.end };
                    return Ok(Value { kind: ValueKind::List(items), span });
                }
                Some(_) => {}
            }
            items.push(self.value(depth + 1)?);
            self.separator(open, '[', ']', TokenKind::RBracket)?;
        }
    }

    fn call(&mut self, name: Spanned<String>, depth: usize) -> Result<Value, Diagnostic> {
        let open = self.next().map_or(name.span, |t| t.span);
        if depth >= MAX_DEPTH {
            return Err(too_deep(open));
        }
        let mut args: Vec<Arg> = Vec::new();
        loop {
            match self.peek_kind(0) {
                None => return Err(unclosed(open, '(', ')')),
                Some(TokenKind::RParen) => {
                    let close = self.next().map_or(open, |t| t.span);
                    let span = Span { start: name.span.start, end: close.end };
                    return Ok(Value { kind: ValueKind::Call(Call { name, args }), span });
                }
                Some(_) => {}
            }
            let arg = match (self.peek_kind(0), self.peek_kind(1)) {
                (Some(TokenKind::Ident(arg_name)), Some(TokenKind::Eq)) => {
                    let arg_span = self.next().map_or(open, |t| t.span);
                    self.next();
                    let value = self.value(depth + 1)?;
                    Arg { name: Some(Spanned { value: arg_name.clone(), span: arg_span }), value }
                }
                _ => {
                    let value = self.value(depth + 1)?;
                    if let Some(keyword) = args.iter().find_map(|a| a.name.as_ref()) {
                        return Err(Diagnostic::new(
                            value.span,
                            "positional argument after a named argument",
                            "needs a name",
                        )
                        .with_help(format!("write it as `name=value`, or move it before `{}=`", keyword.value)));
                    }
                    Arg { name: None, value }
                }
            };
            args.push(arg);
            self.separator(open, '(', ')', TokenKind::RParen)?;
        }
    }

    /// After an item of a list or call: `,`, or the closing bracket (left for
    /// the caller to take).
    fn separator(&mut self, open: Span, opening: char, closing: char, close: TokenKind) -> Result<(), Diagnostic> {
        match self.peek() {
            None => Err(unclosed(open, opening, closing)),
            Some(t) if t.kind == TokenKind::Comma => {
                self.pos += 1;
                Ok(())
            }
            Some(t) if t.kind == close => Ok(()),
            Some(t) => Err(Diagnostic::new(
                t.span,
                format!("expected `,` or `{closing}`, found {}", t.describe()),
                format!("expected `,` or `{closing}`"),
            )),
        }
    }
}

fn unclosed(open: Span, opening: char, closing: char) -> Diagnostic {
    Diagnostic::new(open, format!("unclosed `{opening}`"), format!("this `{opening}` is never closed"))
        .with_help(format!("add `{closing}`; a value must end on the line where it starts"))
}

fn too_deep(open: Span) -> Diagnostic {
    Diagnostic::new(open, "value is nested too deeply", format!("more than {MAX_DEPTH} levels of `[` and `(`"))
}

fn all_headers() -> String {
    let forms: Vec<String> = BlockKind::ALL.iter().map(|k| k.header_form()).collect();
    let forms: Vec<&str> = forms.iter().map(String::as_str).collect();
    suggest::one_of(&forms)
}

fn layer_forms() -> String {
    let mut forms: Vec<String> =
        ["input N", "input CxL", "input CxHxW", "input seq L", "input seq LxC"].iter().map(|f| f.to_string()).collect();
    forms.extend(crate::model::layer_forms().iter().map(|f| f.to_string()));
    let mut quoted: Vec<String> = forms.iter().map(|f| format!("`{f}`")).collect();
    let last = quoted.pop().unwrap_or_default();
    format!("layers are written {} or {last}, one per line", quoted.join(", "))
}

fn is_identifier(text: &str) -> bool {
    let mut chars = text.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_ok(source: &str) -> Document {
        let mut diags = Vec::new();
        let doc = parse(source, &mut diags);
        assert!(diags.is_empty(), "{diags:#?}");
        doc
    }

    fn parse_err(source: &str) -> Vec<Diagnostic> {
        let mut diags = Vec::new();
        parse(source, &mut diags);
        assert!(!diags.is_empty());
        diags
    }

    fn value_of(source: &str) -> ValueKind {
        let doc = parse_ok(&format!("train:\nk = {source}\n"));
        doc.blocks[0].entries[0].value.kind.clone()
    }

    fn ident(s: &str) -> ValueKind {
        ValueKind::Ident(s.into())
    }

    fn strip(kind: &ValueKind) -> String {
        // A compact rendering of a value's shape, without spans.
        match kind {
            ValueKind::Number(t) => t.clone(),
            ValueKind::Str(s) => format!("{s:?}"),
            ValueKind::Bool(b) => b.to_string(),
            ValueKind::Ident(s) => s.clone(),
            ValueKind::List(items) => {
                let inner: Vec<String> = items.iter().map(|v| strip(&v.kind)).collect();
                format!("[{}]", inner.join(","))
            }
            ValueKind::Call(call) => {
                let inner: Vec<String> = call
                    .args
                    .iter()
                    .map(|a| match &a.name {
                        Some(n) => format!("{}={}", n.value, strip(&a.value.kind)),
                        None => strip(&a.value.kind),
                    })
                    .collect();
                format!("{}({})", call.name.value, inner.join(","))
            }
            ValueKind::Error => "<error>".into(),
        }
    }

    #[test]
    fn values() {
        assert_eq!(value_of("mse"), ident("mse"));
        assert_eq!(value_of("true"), ValueKind::Bool(true));
        assert_eq!(value_of("false"), ValueKind::Bool(false));
        assert_eq!(value_of("-1e-3"), ValueKind::Number("-1e-3".into()));
        assert_eq!(value_of(r#""a \"b\"""#), ValueKind::Str("a \"b\"".into()));
        assert_eq!(strip(&value_of("[]")), "[]");
        assert_eq!(strip(&value_of("[mae, rmse,]")), "[mae,rmse]");
        assert_eq!(strip(&value_of("[[1, 2], [], [3]]")), "[[1,2],[],[3]]");
        assert_eq!(strip(&value_of("adamw(lr=0.001, betas=[0.9, 0.99])")), "adamw(lr=0.001,betas=[0.9,0.99])");
        assert_eq!(strip(&value_of("huber(1.5)")), "huber(1.5)");
        assert_eq!(strip(&value_of("f()")), "f()");
        assert_eq!(strip(&value_of("f(1, x=2,)")), "f(1,x=2)");
        assert_eq!(strip(&value_of("csv(\"data/x.csv\")")), "csv(\"data/x.csv\")");
    }

    #[test]
    fn value_spans_cover_the_text() {
        let src = "train:\nk = adamw(lr=1)  # c\n";
        let doc = parse_ok(src);
        let value = &doc.blocks[0].entries[0].value;
        assert_eq!(&src[value.span.start..value.span.end], "adamw(lr=1)");
    }

    #[test]
    fn blocks_and_bodies_ignore_indentation() {
        let src = "dataset D:\nsource = csv(\"x\")\n  model M:\n input 3\n\tdense 1 linear\ntrain:\nepochs = 1\nevaluate:\nexport:\n";
        let doc = parse_ok(src);
        let kinds: Vec<BlockKind> = doc.blocks.iter().map(|b| b.kind).collect();
        assert_eq!(
            kinds,
            [BlockKind::Dataset, BlockKind::Model, BlockKind::Train, BlockKind::Evaluate, BlockKind::Export]
        );
        assert_eq!(doc.blocks[0].name.as_ref().map(|n| n.value.as_str()), Some("D"));
        assert_eq!(doc.blocks[1].layers.len(), 2);
        assert_eq!(doc.blocks[2].entries[0].key.value, "epochs");
    }

    #[test]
    fn colon_inside_a_value_is_not_a_header() {
        let doc = parse_ok("train:\ndevice = \"cuda:1\"\n");
        assert_eq!(doc.blocks.len(), 1);
        let diags = parse_err("train:\ndevice = cuda:1\n");
        assert_eq!(diags.len(), 1);
        assert!(diags[0].help.as_deref().unwrap_or("").contains("\"cuda:1\""), "{diags:?}");
    }

    #[test]
    fn structural_errors() {
        for (src, message) in [
            ("epochs = 1\n", "line outside any block"),
            ("train:\nk = [1, 2\n", "unclosed `[`"),
            ("train:\nk = f(1, 2\n", "unclosed `(`"),
            ("train:\nk = [1 2]\n", "expected `,` or `]`, found `2`"),
            ("train:\nk = f(a=1, 2)\n", "positional argument after a named argument"),
            ("train:\nk =\n", "missing value for `k`"),
            ("train:\nk = 1 2\n", "unexpected `2` after the value"),
            ("train:\nepochs 100\n", "expected `key = value`"),
            ("train:\n= 1\n", "expected a key before `=`"),
            ("train\nepochs = 1\n", "missing `:` after block header"),
            ("trian:\n", "unknown block `trian`"),
            ("dataset:\n", "missing name in `dataset` header"),
            ("model Deep Net:\n", "expected one name after `model`, found 2"),
            ("train T:\n", "a `train:` block takes no name"),
            ("evaluate E:\n", "an `evaluate:` block takes no name"),
            ("export E:\n", "an `export:` block takes no name"),
            ("model false:\ninput 4\n", "`false` is a value, not a name for a block"),
            ("train: epochs = 1\n", "unexpected text after block header"),
            ("model M:\ninput = 3\n", "expected a layer, found a `key = value` setting"),
            ("model M:\ndense 64, relu\n", "unexpected `,` in a layer line"),
        ] {
            let diags = parse_err(src);
            assert_eq!(diags[0].message, message, "{src:?}: {diags:#?}");
        }
    }

    #[test]
    fn yaml_style_settings_are_not_headers() {
        let mut diags = Vec::new();
        let doc = parse("dataset D:\nsource: csv(\"x\")\ntarget = \"y\"\nmodel M:\ninput: 3\n", &mut diags);
        assert_eq!(doc.blocks.len(), 2);
        assert_eq!(doc.blocks[0].entries.len(), 2);
        assert_eq!(diags[0].message, "expected `=` after `source`, found `:`");
        assert_eq!(diags[0].help.as_deref(), Some("write `source = csv(\"x\")`"));
        assert_eq!(diags[1].message, "expected a space after `input`, found `:`");
        assert_eq!(diags.len(), 2);
    }

    #[test]
    fn model_without_equals_in_train_is_a_setting() {
        let mut diags = Vec::new();
        let doc = parse("train:\nmodel DeepNet\nepochs = 1\n", &mut diags);
        assert_eq!(doc.blocks.len(), 1);
        assert_eq!(diags.len(), 1);
        assert_eq!(diags[0].help.as_deref(), Some("write `model = DeepNet`"));
        assert_eq!(doc.blocks[0].entries.len(), 2);
        // `dataset Iris` there is the `data` setting: the lines below stay train's.
        let mut diags = Vec::new();
        let doc = parse("train:\n    dataset Iris\n    loss = mse\n    epochs = 1\n", &mut diags);
        assert_eq!((doc.blocks.len(), diags.len()), (1, 1), "{diags:?}");
        assert_eq!(diags[0].help.as_deref(), Some("write `data = Iris`"));
        assert_eq!(doc.blocks[0].entries.len(), 3);
        // So it is unindented where a dataset of that name was declared above.
        let mut diags = Vec::new();
        let doc = parse("dataset Iris:\nsource = csv(\"i.csv\")\ntrain:\ndataset Iris\nepochs = 1\n", &mut diags);
        assert_eq!((doc.blocks.len(), diags.len()), (2, 1), "{diags:?}");
        assert_eq!(diags[0].help.as_deref(), Some("write `data = Iris`"));
        // Unindented and new, after `train:`, it is a header without its `:`.
        let mut diags = Vec::new();
        let doc = parse("train:\nepochs = 1\ndataset Iris\nsource = csv(\"i.csv\")\n", &mut diags);
        assert_eq!((doc.blocks.len(), diags[0].message.as_str()), (2, "missing `:` after block header"), "{diags:?}");
    }

    #[test]
    fn one_bad_line_does_not_hide_the_next() {
        let diags = parse_err("train:\na = [1\nb = \"x\nc = f(\nd = 1\n");
        assert_eq!(diags.len(), 3);
    }

    #[test]
    fn nesting_is_limited() {
        let deep = format!("train:\nk = {}{}\n", "[".repeat(10_000), "]".repeat(10_000));
        let diags = parse_err(&deep);
        assert_eq!(diags.len(), 1);
        assert_eq!(diags[0].message, "value is nested too deeply");
        let ok = format!("train:\nk = {}{}\n", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        parse_ok(&ok);
    }

    #[test]
    fn misspelled_blocks_are_remembered() {
        let mut diags = Vec::new();
        let doc = parse("modle M:\ninput 3\ntrian:\nepochs = 1\nfoo:\nbar = 1\n", &mut diags);
        assert_eq!(doc.lost_blocks, [BlockKind::Model, BlockKind::Train]);
        // Read as the blocks they were likely meant to be, so that their
        // bodies' problems are found now; marked, so that a block written
        // correctly is taken over them. A header like none is skipped.
        let read: Vec<_> =
            doc.blocks.iter().map(|b| (b.kind, b.guessed, b.name.as_ref().map(|n| n.value.as_str()))).collect();
        assert_eq!(read, [(BlockKind::Model, true, Some("M")), (BlockKind::Train, true, None)]);
        assert_eq!((doc.blocks[0].layers.len(), doc.blocks[1].entries.len()), (1, 1));
        assert_eq!(doc.blocks[1].swallowed, ["bar"], "under the unknown `foo:`");
        assert_eq!(doc.blocks[0].swallowed, ["epochs"], "under `trian:`, which may have been the model's");
        assert_eq!(diags.len(), 3, "{diags:?}");
    }
}
