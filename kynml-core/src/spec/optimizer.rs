//! The `optimizer` setting: PyTorch's optimizers with PyTorch's argument
//! names, order and defaults, so that `adamw(lr=0.001, weight_decay=0.01)`
//! means here what it means in `torch.optim`.

use super::args::{self, bind, bind_keywords, Args};
use super::ast::{Value, ValueKind};
use super::diagnostic::Diagnostic;
use super::suggest;
use super::types::{Optimizer, Spanned};
use super::values::{self, Range};

const OPTIMIZERS: &[&str] = &["adamw", "adam", "sgd", "rmsprop"];

// Parameters in `torch.optim`'s positional order (after `params`), then
// `fused`, which torch.optim takes by name only.
const ADAM_PARAMS: &[&str] = &["lr", "betas", "eps", "weight_decay", "fused"];
const SGD_PARAMS: &[&str] = &["lr", "momentum", "dampening", "weight_decay", "nesterov", "fused"];
const RMSPROP_PARAMS: &[&str] = &["lr", "alpha", "eps", "weight_decay", "momentum", "centered"];

/// What an unwritten `optimizer` means: `adamw` with torch's defaults.
pub(super) fn default_optimizer() -> Optimizer {
    Optimizer::AdamW { lr: 1e-3, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.01, fused: None }
}

pub(super) fn optimizer(v: &Value, d: &mut Vec<Diagnostic>) -> Option<Spanned<Optimizer>> {
    let Some(callee) = args::callee(v) else {
        let help = format!("write `optimizer = adamw(lr=0.001)`; optimizers are {}", suggest::one_of(OPTIMIZERS));
        values::mismatch_with_help(v, "an optimizer", "`optimizer`", &help, d);
        return None;
    };
    let optimizer = match callee.name {
        "adamw" => {
            let args = bind_keywords(callee, ADAM_PARAMS, 4, d);
            let (lr, beta1, beta2, eps, weight_decay, fused) = adam(&args, 0.01, d)?;
            Optimizer::AdamW { lr, beta1, beta2, eps, weight_decay, fused }
        }
        "adam" => {
            let args = bind_keywords(callee, ADAM_PARAMS, 4, d);
            let (lr, beta1, beta2, eps, weight_decay, fused) = adam(&args, 0.0, d)?;
            Optimizer::Adam { lr, beta1, beta2, eps, weight_decay, fused }
        }
        "sgd" => sgd(&bind_keywords(callee, SGD_PARAMS, 5, d), d)?,
        "rmsprop" => rmsprop(&bind(callee, RMSPROP_PARAMS, d), d)?,
        other => {
            values::unknown_word(v, other, "optimizer", OPTIMIZERS, d);
            return None;
        }
    };
    Some(Spanned { value: optimizer, span: v.span })
}

type AdamSettings = (f64, f64, f64, f64, f64, Option<bool>);

fn adam(args: &Args, weight_decay: f64, d: &mut Vec<Diagnostic>) -> Option<AdamSettings> {
    let lr = args.float("lr", 1e-3, Range::Positive, d);
    let betas = betas(args, d);
    let eps = args.float("eps", 1e-8, Range::Positive, d);
    let weight_decay = args.float("weight_decay", weight_decay, Range::NonNegative, d);
    let fused = fused(args, d);
    args.ok()?;
    let (beta1, beta2) = betas?;
    Some((lr?, beta1, beta2, eps?, weight_decay?, fused?))
}

/// `fused=true|false`, `None` where unwritten: the run then chooses.
fn fused(args: &Args, d: &mut Vec<Diagnostic>) -> Option<Option<bool>> {
    match args.get("fused") {
        None => Some(None),
        Some(v) => values::boolean(v, &args.what("fused"), d).map(Some),
    }
}

/// `betas=[0.9, 0.999]`, each in [0, 1).
fn betas(args: &Args, d: &mut Vec<Diagnostic>) -> Option<(f64, f64)> {
    let Some(v) = args.get("betas") else { return Some((0.9, 0.999)) };
    let what = args.what("betas");
    match &v.kind {
        ValueKind::List(items) if items.len() == 2 => {
            let beta1 = values::float(&items[0], &what, Range::Unit, d);
            let beta2 = values::float(&items[1], &what, Range::Unit, d);
            Some((beta1?, beta2?))
        }
        _ => {
            values::mismatch_with_help(v, "a list of two numbers", &what, "write `betas=[0.9, 0.999]`", d);
            None
        }
    }
}

fn sgd(args: &Args, d: &mut Vec<Diagnostic>) -> Option<Optimizer> {
    let lr = args.float("lr", 1e-3, Range::Positive, d);
    let momentum = args.float("momentum", 0.0, Range::NonNegative, d);
    let dampening = args.float("dampening", 0.0, Range::Any, d);
    let weight_decay = args.float("weight_decay", 0.0, Range::NonNegative, d);
    let nesterov = args.boolean("nesterov", false, d);
    let fused = fused(args, d);
    args.ok()?;
    let (momentum, dampening, nesterov, fused) = (momentum?, dampening?, nesterov?, fused?);
    // torch.optim.SGD refuses the same combinations.
    if let Some(flag) = args.get("nesterov").filter(|_| nesterov) {
        if momentum <= 0.0 {
            d.push(
                Diagnostic::new(flag.span, "`nesterov` needs a `momentum` greater than 0", "nesterov without momentum")
                    .with_help("add a momentum, as in `sgd(lr=0.01, momentum=0.9, nesterov=true)`"),
            );
            return None;
        }
        if dampening != 0.0 {
            d.push(
                Diagnostic::new(flag.span, "`nesterov` needs `dampening` to be 0", "nesterov with dampening")
                    .with_help("remove `dampening`, or set `nesterov=false`"),
            );
            return None;
        }
    }
    Some(Optimizer::Sgd { lr: lr?, momentum, dampening, weight_decay: weight_decay?, nesterov, fused })
}

fn rmsprop(args: &Args, d: &mut Vec<Diagnostic>) -> Option<Optimizer> {
    let lr = args.float("lr", 1e-2, Range::Positive, d);
    let alpha = args.float("alpha", 0.99, Range::NonNegative, d);
    let eps = args.float("eps", 1e-8, Range::Positive, d);
    let weight_decay = args.float("weight_decay", 0.0, Range::NonNegative, d);
    let momentum = args.float("momentum", 0.0, Range::NonNegative, d);
    let centered = args.boolean("centered", false, d);
    args.ok()?;
    Some(Optimizer::RmsProp {
        lr: lr?,
        alpha: alpha?,
        eps: eps?,
        weight_decay: weight_decay?,
        momentum: momentum?,
        centered: centered?,
    })
}
