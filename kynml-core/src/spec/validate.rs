//! Stage two: the untyped [`Document`] to a typed [`Spec`].
//!
//! Every block is checked, including datasets and models that `train:` does
//! not use, so that a spec's problems all show up in one run. The spec is
//! assembled only when nothing was reported.

use super::ast::{Block, BlockKind, Document};
use super::dataset::dataset;
use super::diagnostic::Diagnostic;
use super::layers::model;
use super::outputs::{evaluate, export};
use super::train::train;
use super::types::{Activation, EvaluateSpec, Layer, Loss, ModelSpec, Span, Spanned, Spec};

pub(super) fn validate(document: &Document, d: &mut Vec<Diagnostic>) -> Option<Spec> {
    let blocks = distinct_blocks(document, d);
    let first = |kind: BlockKind| blocks.iter().copied().find(|b| b.kind == kind);

    let mut datasets = Vec::new();
    let mut models = Vec::new();
    for block in &blocks {
        match block.kind {
            BlockKind::Dataset => datasets.push(dataset(block, d)),
            BlockKind::Model => models.push(model(block, d)),
            _ => {}
        }
    }

    let Some(train_block) = first(BlockKind::Train) else {
        if !document.lost_blocks.contains(&BlockKind::Train) {
            let end = Span { start: document.end, end: document.end };
            let label =
                if document.end == 0 { "this spec is empty" } else { "the spec ends here without a `train:` block" };
            d.push(
                Diagnostic::new(end, "missing `train:` block", label)
                    .with_help("add a `train:` block with at least `loss = ...` and `epochs = ...`"),
            );
        }
        // Still checked, so that their problems are not found one run later.
        if let Some(block) = first(BlockKind::Evaluate) {
            evaluate(block, None, d);
        }
        if let Some(block) = first(BlockKind::Export) {
            export(block, d);
        }
        return None;
    };
    let outcome = train(train_block, document, d);
    let evaluate = match first(BlockKind::Evaluate) {
        Some(block) => evaluate(block, outcome.loss.as_ref(), d),
        None => Some(EvaluateSpec { metrics: Vec::new() }),
    };
    let export = match first(BlockKind::Export) {
        // An `export:` header with nothing under it (its settings cleared
        // out) asks for no export, as an empty `evaluate:` asks for the
        // default metrics.
        Some(block) if block.entries.is_empty() && !block.damaged => Some(None),
        Some(block) => export(block, d).map(Some),
        None => Some(None),
    };

    let model = models.into_iter().flatten().find(|s| outcome.model.as_ref().is_some_and(|m| s.name.value == m.value));
    // Said even when another block, or another setting, has problems of its own.
    if let (Some(model), Some(loss)) = (&model, &outcome.loss) {
        if let Some(problem) = squashed_logits(model, loss) {
            d.push(problem);
            return None;
        }
    }
    let (train, model) = (outcome.spec?, model?);
    let dataset = datasets.into_iter().flatten().find(|s| s.name.value == train.data.value)?;
    Some(Spec { dataset, model, train, evaluate: evaluate?, export: export? })
}

/// A classification loss takes logits and applies its own sigmoid or
/// softmax, as PyTorch's `BCEWithLogitsLoss` and `CrossEntropyLoss` do. A
/// last layer that squeezes its outputs (`sigmoid`, `tanh`) hands the loss
/// logits in (0, 1) or (-1, 1): the model trains, but its probabilities
/// cannot leave a narrow band (`dense 1 sigmoid` with `bce`: 0.5 to 0.73),
/// silently; `relu` under `bce` keeps every probability at 0.5 or above.
/// Written by PyTorch users used to `nn.Sigmoid` + `BCELoss`.
fn squashed_logits(model: &ModelSpec, loss: &Spanned<Loss>) -> Option<Diagnostic> {
    // A dropout after it passes the squeezed values on as they are.
    let last = model.layers.iter().rev().find(|l| !matches!(l.value, Layer::Dropout(_)))?;
    let (Layer::Dense(dense), true) = (&last.value, loss.value.is_classification()) else { return None };
    let (act, band) = match (dense.activation, loss.value) {
        (Activation::Sigmoid, _) => ("sigmoid", "(0, 1)"),
        (Activation::Tanh, _) => ("tanh", "(-1, 1)"),
        // One logit that cannot go below 0: no row's probability below 0.5.
        (Activation::Relu, Loss::Bce) => ("relu", "[0, inf)"),
        _ => return None,
    };
    let (name, applies, torch) = match loss.value {
        Loss::Bce => ("bce", "a sigmoid", "BCEWithLogitsLoss"),
        _ => ("cross_entropy", "a softmax", "CrossEntropyLoss"),
    };
    Some(
        Diagnostic::new(
            last.span,
            format!("the last layer applies `{act}`, but `{name}` takes logits and applies {applies} itself"),
            format!("its outputs would reach `{name}` squeezed into {band}"),
        )
        .with_help(format!(
            "write `dense {} linear` here, as PyTorch's `{torch}` wants of the layer before it; \
             `kynml predict` still writes probabilities",
            // `bce` takes one logit per row, whatever the layer had.
            if loss.value == Loss::Bce { 1 } else { dense.units }
        )),
    )
}

/// The blocks to validate: a second `train:` block, or a second dataset or
/// model of the same name, is reported and left out, since which one was
/// meant cannot be known.
fn distinct_blocks<'a>(document: &'a Document, d: &mut Vec<Diagnostic>) -> Vec<&'a Block> {
    let mut kept: Vec<&Block> = Vec::new();
    // Blocks read under a misspelled header come last, and only where no
    // block of theirs is written correctly: `trian:` beside `train:` is not
    // a second train block (its header is reported already).
    let (guessed, written): (Vec<&Block>, Vec<&Block>) = document.blocks.iter().partition(|b| b.guessed);
    for block in written.into_iter().chain(guessed) {
        let same = |other: &&&Block| {
            other.kind == block.kind
                && match (&other.name, &block.name) {
                    (Some(a), Some(b)) => a.value == b.value,
                    _ => !block.kind.is_named(),
                }
        };
        let Some(earlier) = kept.iter().find(same) else {
            kept.push(block);
            continue;
        };
        if block.guessed {
            continue;
        }
        let keyword = block.kind.keyword();
        let diagnostic = match &block.name {
            Some(name) => Diagnostic::new(
                name.span,
                format!("duplicate {keyword} `{}`", name.value),
                format!("`{keyword} {}:` is already defined on line {}", name.value, earlier.line),
            )
            .with_help("rename one of them, or remove one"),
            None => Diagnostic::new(
                block.header,
                format!("duplicate `{keyword}:` block"),
                format!("`{keyword}:` already appears on line {}", earlier.line),
            )
            .with_help("merge the two blocks into one"),
        };
        d.push(diagnostic);
    }
    kept
}
