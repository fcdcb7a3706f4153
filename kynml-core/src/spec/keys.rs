//! The keys each block accepts, and the first pass over a block's
//! `key = value` lines: unknown keys, repeated keys, and typed getters that
//! fill in defaults.

use super::ast::{Block, BlockKind, Entry, Value};
use super::diagnostic::Diagnostic;
use super::suggest;
use super::types::Spanned;
use super::values::{self, Range};

pub(super) const DATASET_KEYS: &[&str] = &[
    "source",
    "target",
    "categorical",
    "tokens",
    "vocab",
    "sequence",
    "split",
    "normalize",
    "num_workers",
    "pin_memory",
    "prefetch",
];
pub(super) const TRAIN_KEYS: &[&str] = &[
    "model",
    "data",
    "loss",
    "optimizer",
    "epochs",
    "batch",
    "accumulate",
    "device",
    "devices",
    "scheduler",
    "early_stop",
    "checkpoint",
    "precision",
    "loss_scale",
    "compile",
    "autotune",
    "profile",
    "checkpoint_activations",
    "deterministic",
    "clip_grad_norm",
    "clip_grad_value",
    "seed",
];
pub(super) const EVALUATE_KEYS: &[&str] = &["metrics"];
pub(super) const EXPORT_KEYS: &[&str] = &["format", "path"];

fn keys_of(kind: BlockKind) -> &'static [&'static str] {
    match kind {
        BlockKind::Dataset => DATASET_KEYS,
        BlockKind::Model => &[],
        BlockKind::Train => TRAIN_KEYS,
        BlockKind::Evaluate => EVALUATE_KEYS,
        BlockKind::Export => EXPORT_KEYS,
    }
}

/// A block's settings, each key once.
pub(super) struct Settings<'a> {
    block: &'a Block,
    entries: Vec<&'a Entry>,
    /// Keys that an unknown key was taken for (`epoch` → `epochs`); they are
    /// not reported missing as well.
    suggested: Vec<&'static str>,
}

/// Reads `block`'s entries; reports unknown keys and keys set twice (the
/// first one counts).
pub(super) fn settings<'a>(block: &'a Block, d: &mut Vec<Diagnostic>) -> Settings<'a> {
    let known = keys_of(block.kind);
    let mut entries: Vec<&Entry> = Vec::new();
    let mut suggested = Vec::new();
    for entry in &block.entries {
        let key = entry.key.value.as_str();
        if !known.contains(&key) {
            suggested.extend(suggest::spec_word(key, known.iter().copied()));
            if !entry.damaged {
                d.push(unknown_key(block, entry));
            }
            continue;
        }
        if let Some(index) = entries.iter().position(|e| e.key.value == key) {
            let first = entries[index];
            if first.damaged {
                // The earlier line was unreadable (already reported); this
                // one is the setting that counts.
                entries[index] = entry;
                continue;
            }
            if !entry.damaged {
                d.push(
                    Diagnostic::new(
                        entry.key.span,
                        format!("duplicate key `{key}` in {}", block.describe()),
                        format!("`{key}` is already set on line {}", first.line),
                    )
                    .with_help("remove one of the two lines"),
                );
            }
            continue;
        }
        entries.push(entry);
    }
    Settings { block, entries, suggested }
}

/// A key written on a line of its own in `train:` that is an argument of
/// one of its settings (`lr` of the optimizer, `patience` of early
/// stopping), as other tools' configs have them: where it goes.
fn argument_of(key: &str) -> Option<&'static str> {
    Some(match key {
        "learning_rate" => "the learning rate is `lr`, an argument of the optimizer: `optimizer = adamw(lr=0.001)`",
        "lr" | "weight_decay" | "momentum" | "betas" | "eps" | "nesterov" | "dampening" | "alpha" | "centered"
        | "fused" => "an argument of the optimizer: `optimizer = adamw(lr=0.001, weight_decay=0.01)`",
        "patience" | "min_delta" => "an argument of early stopping: `early_stop = early_stop(patience=10)`",
        "t_max" | "eta_min" | "step_size" | "gamma" | "warmup" => {
            "an argument of the scheduler: `scheduler = cosine(t_max=100, warmup=5)`"
        }
        "every_n" | "keep" | "async_save" => {
            "an argument of checkpoint(...): `checkpoint = checkpoint(every_n=10, path=\"checkpoints/run.ckpt\")`"
        }
        _ => return None,
    })
}

fn unknown_key(block: &Block, entry: &Entry) -> Diagnostic {
    let key = entry.key.value.as_str();
    let known = keys_of(block.kind);
    let elsewhere = BlockKind::ALL.into_iter().find(|kind| *kind != block.kind && keys_of(*kind).contains(&key));
    let argument = (block.kind == BlockKind::Train).then(|| argument_of(key)).flatten();
    let help = match (elsewhere, argument) {
        (Some(kind), _) => format!("`{key}` belongs in the `{}` block", kind.header_form()),
        (None, Some(help)) => help.to_string(),
        (None, None) => {
            // The key it was meant for is set already (`epoch = 3` below
            // `epochs = 2`): renaming this line would set it twice.
            let meant = suggest::spec_word(key, known.iter().copied());
            match meant.and_then(|m| block.entries.iter().find(|e| e.key.value == m)) {
                Some(set) => format!(
                    "did you mean `{}`? It is set already, on line {}: remove one of the two lines",
                    set.key.value, set.line
                ),
                None => suggest::help(key, known.iter().copied())
                    .unwrap_or_else(|| format!("{} accepts {}", block.describe(), suggest::one_of(known))),
            }
        }
    };
    Diagnostic::new(entry.key.span, format!("unknown key `{key}` in {}", block.describe()), "unknown key")
        .with_help(help)
}

impl<'a> Settings<'a> {
    pub fn get(&self, key: &str) -> Option<&'a Value> {
        self.entries.iter().find(|e| e.key.value == key).map(|e| &e.value)
    }

    /// A key without a default. `example` is a full line for the help,
    /// `epochs = 100`. Not reported when a line of the block was unreadable,
    /// since that line may have been this key.
    pub fn required(&self, key: &str, example: &str, d: &mut Vec<Diagnostic>) -> Option<&'a Value> {
        self.required_with(key, &format!("add `{example}`"), d)
    }

    /// [`required`](Self::required), with the whole help line when one
    /// example would mislead.
    pub fn required_with(&self, key: &str, help: &str, d: &mut Vec<Diagnostic>) -> Option<&'a Value> {
        let value = self.get(key);
        if value.is_none() && !self.block.damaged && !self.block.swallowed(key) && !self.suggested.contains(&key) {
            d.push(
                Diagnostic::new(
                    self.block.header,
                    format!("missing key `{key}` in {}", self.block.describe()),
                    format!("`{key}` is required"),
                )
                .with_help(help),
            );
        }
        value
    }

    /// `` `key` `` for messages.
    fn what(key: &str) -> String {
        format!("`{key}`")
    }

    /// The value and its span, or `default` with the header's span (a
    /// default was not written anywhere, so it belongs to the block).
    pub fn with_default<T>(
        &self,
        key: &str,
        default: T,
        read: impl FnOnce(&'a Value) -> Option<T>,
    ) -> Option<Spanned<T>> {
        match self.get(key) {
            None => Some(Spanned { value: default, span: self.block.header }),
            Some(v) => read(v).map(|value| Spanned { value, span: v.span }),
        }
    }

    pub fn float(&self, key: &str, default: f64, range: Range, d: &mut Vec<Diagnostic>) -> Option<Spanned<f64>> {
        self.with_default(key, default, |v| values::float(v, &Self::what(key), range, d))
    }

    pub fn count(&self, key: &str, default: usize, min: usize, d: &mut Vec<Diagnostic>) -> Option<Spanned<usize>> {
        self.with_default(key, default, |v| values::count(v, &Self::what(key), min, d))
    }

    pub fn boolean(&self, key: &str, default: bool, d: &mut Vec<Diagnostic>) -> Option<Spanned<bool>> {
        self.with_default(key, default, |v| values::boolean(v, &Self::what(key), d))
    }

    /// A setting whose value is read by `read` when written, and that is
    /// `None` (not an error) when not written.
    pub fn optional<T>(&self, key: &str, read: impl FnOnce(&'a Value) -> Option<T>) -> Option<Option<T>> {
        match self.get(key) {
            None => Some(None),
            Some(v) => read(v).map(Some),
        }
    }

    pub fn block(&self) -> &'a Block {
        self.block
    }
}
