//! The untyped tree the parser builds: blocks of `key = value` entries or of
//! layer lines, values with spans. Nothing here knows what a key means; that
//! is the validator's job.
//!
//! Text that could not be read has already been reported by the parser and
//! is kept as [`ValueKind::Error`] or a `damaged` flag, so that the validator
//! skips it quietly instead of reporting the same line a second time.

use super::lexer::shorten;
use super::types::{Span, Spanned};

#[derive(Debug, Default)]
pub(super) struct Document {
    pub blocks: Vec<Block>,
    /// Kinds of blocks that are in the text but could not be read: a
    /// misspelled header (`trian:`) or an unreadable name. A reference to
    /// such a block, or its absence, is not reported again.
    pub lost_blocks: Vec<BlockKind>,
    /// Byte offset just past the last token of the source; a missing block
    /// is reported there.
    pub end: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum BlockKind {
    Dataset,
    Model,
    Train,
    Evaluate,
    Export,
}

impl BlockKind {
    pub const ALL: [BlockKind; 5] =
        [BlockKind::Dataset, BlockKind::Model, BlockKind::Train, BlockKind::Evaluate, BlockKind::Export];

    pub fn keyword(self) -> &'static str {
        match self {
            BlockKind::Dataset => "dataset",
            BlockKind::Model => "model",
            BlockKind::Train => "train",
            BlockKind::Evaluate => "evaluate",
            BlockKind::Export => "export",
        }
    }

    pub fn from_keyword(word: &str) -> Option<BlockKind> {
        BlockKind::ALL.into_iter().find(|k| k.keyword() == word)
    }

    /// `dataset` and `model` blocks are named so that `train:` can pick one.
    pub fn is_named(self) -> bool {
        matches!(self, BlockKind::Dataset | BlockKind::Model)
    }

    /// How the header is written: `dataset NAME:`, `train:`.
    pub fn header_form(self) -> String {
        if self.is_named() {
            format!("{} NAME:", self.keyword())
        } else {
            format!("{}:", self.keyword())
        }
    }
}

#[derive(Debug)]
pub(super) struct Block {
    pub kind: BlockKind,
    /// `None` for the unnamed kinds, and where the name was missing or
    /// unreadable (already reported).
    pub name: Option<Spanned<String>>,
    /// The header text, `dataset LargeData:`; defaults and "missing key"
    /// problems point here.
    pub header: Span,
    /// 1-based line of the header.
    pub line: usize,
    /// `key = value` lines, for every kind but `model`.
    pub entries: Vec<Entry>,
    /// Layer lines, for `model` blocks.
    pub layers: Vec<LayerLine>,
    /// A body line could not be read at all (already reported); checks on the
    /// body as a whole would only repeat that problem.
    pub damaged: bool,
    /// The first words of the lines under an unknown header that follows
    /// this block (`evalute:` in the middle of `train:`): lines that may
    /// have been this block's, so a key or layer among them is not said
    /// to be missing.
    pub swallowed: Vec<String>,
    /// Read under a misspelled header (`trian:`, already reported) as the
    /// kind it was most likely meant to be, so that its body's problems are
    /// found in this run, not the one after the header is fixed. Left out
    /// where a block of that kind (and name) is written correctly.
    pub guessed: bool,
}

impl Block {
    /// Whether `word` begins a line under an unknown header after this block.
    pub fn swallowed(&self, word: &str) -> bool {
        self.swallowed.iter().any(|w| w == word)
    }

    /// `` `train:` block ``, `` `dataset LargeData:` block ``.
    pub fn describe(&self) -> String {
        match &self.name {
            Some(name) => format!("`{} {}:` block", self.kind.keyword(), name.value),
            None if self.kind.is_named() => format!("`{}` block", self.kind.keyword()),
            None => format!("`{}:` block", self.kind.keyword()),
        }
    }
}

#[derive(Debug)]
pub(super) struct Entry {
    pub key: Spanned<String>,
    pub value: Value,
    /// 1-based line of the entry.
    pub line: usize,
    /// The line was not a well-formed `key = value` (already reported); the
    /// key is a guess, so it is not reported as unknown.
    pub damaged: bool,
}

#[derive(Debug)]
pub(crate) struct LayerLine {
    pub name: Spanned<String>,
    pub args: Vec<Value>,
    /// `key=value` options after the arguments: `conv2d 8 3 relu stride=2`.
    pub options: Vec<(Spanned<String>, Value)>,
    /// The whole line, `dense 64 relu`.
    pub span: Span,
    /// Characters of indentation before the line's first token.
    pub indent: usize,
    /// That indentation, as written (spaces and tabs).
    pub indent_text: String,
    /// A `residual:` line: it opens a block of the lines indented below it.
    pub opens: bool,
    /// The arguments could not be read (already reported).
    pub damaged: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Value {
    pub kind: ValueKind,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ValueKind {
    /// The literal as written, `1e-3`.
    Number(String),
    Str(String),
    Bool(bool),
    Ident(String),
    List(Vec<Value>),
    Call(Call),
    /// Unreadable, already reported.
    Error,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Call {
    pub name: Spanned<String>,
    pub args: Vec<Arg>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Arg {
    /// `Some` for `name=value`, `None` for a positional argument.
    pub name: Option<Spanned<String>>,
    pub value: Value,
}

impl Value {
    pub fn error(span: Span) -> Value {
        Value { kind: ValueKind::Error, span }
    }

    /// How the value reads after "found" in a message.
    pub fn describe(&self) -> String {
        match &self.kind {
            ValueKind::Number(text) => format!("number `{}`", shorten(text)),
            ValueKind::Str(text) => format!("string \"{}\"", shorten(text)),
            ValueKind::Bool(b) => format!("`{b}`"),
            // `1x28x28` is a word to the lexer (a shape, which `input` reads).
            ValueKind::Ident(name) if name.starts_with("0x") => {
                format!("`{}`, a hexadecimal number, which is not read (write it in decimal)", shorten(name))
            }
            ValueKind::Ident(name) if name.starts_with(|c: char| c.is_ascii_digit()) => {
                format!("shape `{}`", shorten(name))
            }
            ValueKind::Ident(name) => format!("name `{}`", shorten(name)),
            ValueKind::List(_) => "a list".into(),
            ValueKind::Call(call) => format!("`{}(...)`", shorten(&call.name.value)),
            ValueKind::Error => "an unreadable value".into(),
        }
    }
}
