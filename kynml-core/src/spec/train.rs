//! Validation of the `train:` block: which model and dataset, and how.

use super::args::{self, bind, expect_call};
use super::ast::{Block, BlockKind, Document, Value, ValueKind};
use super::diagnostic::Diagnostic;
use super::keys::{settings, Settings};
use super::optimizer::{default_optimizer, optimizer};
use super::suggest;
use super::types::{
    Autotune, Checkpoint, Clip, DeviceRequest, DeviceSet, EarlyStop, Loss, LossScale, Precision, Scheduler,
    SchedulerKind, Spanned, TrainSpec,
};
use super::values::{self, Range};

const LOSSES: &[&str] = &["mse", "mae", "huber", "cross_entropy", "bce"];
const SCHEDULERS: &[&str] = &["cosine", "step", "exponential"];
const DEVICES: &[(&str, DeviceRequest)] = &[
    ("auto", DeviceRequest::Auto),
    ("cpu", DeviceRequest::Cpu),
    ("cuda", DeviceRequest::Cuda(None)),
    ("wgpu", DeviceRequest::Wgpu),
];
const AUTOTUNE: &[(&str, Autotune)] =
    &[("off", Autotune::Off), ("fast", Autotune::Fast), ("balanced", Autotune::Balanced), ("full", Autotune::Full)];
const PRECISIONS: &[(&str, Precision)] =
    &[("fp32", Precision::Fp32), ("fp16", Precision::Fp16), ("bf16", Precision::Bf16), ("tf32", Precision::Tf32)];

/// What the train block yields. The loss is kept apart from the spec so that
/// the metrics can be checked against it even when another train setting is
/// wrong.
pub(super) struct TrainOutcome {
    pub spec: Option<TrainSpec>,
    pub loss: Option<Spanned<Loss>>,
    /// The model it trains, read even when another setting is wrong (the
    /// model and loss are checked together all the same).
    pub model: Option<Spanned<String>>,
}

pub(super) fn train(block: &Block, document: &Document, d: &mut Vec<Diagnostic>) -> TrainOutcome {
    let s = settings(block, d);
    // The data is not read yet: both kinds of target are named.
    let loss = s
        .required_with(
            "loss",
            "add `loss = mse` to predict a number, or `loss = cross_entropy` for classes (`bce` for two)",
            d,
        )
        .and_then(|v| loss(v, d));
    let model = reference(&s, "model", BlockKind::Model, document, d);
    let spec = train_spec(&s, document, loss.clone(), model.clone(), d);
    TrainOutcome { spec, loss, model }
}

fn train_spec(
    s: &Settings,
    document: &Document,
    loss: Option<Spanned<Loss>>,
    model: Option<Spanned<String>>,
    d: &mut Vec<Diagnostic>,
) -> Option<TrainSpec> {
    let data = reference(s, "data", BlockKind::Dataset, document, d);
    let optimizer = match s.get("optimizer") {
        Some(v) => optimizer(v, d),
        None => Some(Spanned { value: default_optimizer(), span: s.block().header }),
    };
    let epochs = s
        .required("epochs", "epochs = 100", d)
        .and_then(|v| values::count(v, "`epochs`", 1, d).map(|value| Spanned { value, span: v.span }));
    let batch = s.count("batch", 32, 1, d);
    let accumulate = s.count("accumulate", 1, 1, d);
    let device = s.with_default("device", DeviceRequest::Auto, |v| device(v, d));
    let devices = s.optional("devices", |v| devices(v, d).map(|value| Spanned { value, span: v.span }));
    if let (Some(Some(set)), Some(_)) = (&devices, s.get("device")) {
        d.push(
            Diagnostic::new(set.span, "`device` and `devices` are both set", "second device setting")
                .with_help("keep `devices` for a data-parallel run, or `device` for one device"),
        );
    }
    let scheduler = s.optional("scheduler", |v| scheduler(v, d));
    let early_stop = s.optional("early_stop", |v| early_stop(v, d));
    let checkpoint = s.optional("checkpoint", |v| checkpoint(v, d));
    let precision =
        s.with_default("precision", Precision::Fp32, |v| values::choice(v, "`precision`", "precision", PRECISIONS, d));
    let loss_scale = s.with_default("loss_scale", LossScale::Auto, |v| loss_scale(v, d));
    let compile = s.boolean("compile", false, d);
    let clip = clip(s, d);
    let profile = s.boolean("profile", false, d);
    let checkpoint_activations = s.boolean("checkpoint_activations", false, d);
    let deterministic = s.boolean("deterministic", false, d);
    let autotune = s.optional("autotune", |v| {
        values::choice(v, "`autotune`", "autotune level", AUTOTUNE, d).map(|value| Spanned { value, span: v.span })
    });
    let seed = s.optional("seed", |v| values::unsigned(v, "`seed`", d));
    Some(TrainSpec {
        header: s.block().header,
        model: model?,
        data: data?,
        loss: loss?,
        optimizer: optimizer?,
        epochs: epochs?,
        batch: batch?,
        accumulate: accumulate?,
        device: match &devices {
            Some(Some(set)) => Spanned { value: set.value.first(), span: set.span },
            _ => device?,
        },
        devices: devices?,
        scheduler: scheduler?,
        early_stop: early_stop?,
        checkpoint: checkpoint?,
        precision: precision?,
        loss_scale: loss_scale?,
        compile: compile?,
        clip: clip?,
        profile: profile?,
        checkpoint_activations: checkpoint_activations?,
        deterministic: deterministic?,
        autotune: autotune?,
        seed: seed?.unwrap_or(42),
    })
}

/// `clip_grad_norm = x` or `clip_grad_value = x` (x > 0), not both.
fn clip(s: &Settings, d: &mut Vec<Diagnostic>) -> Option<Option<Spanned<Clip>>> {
    let read = |key: &str, make: fn(f64) -> Clip, d: &mut Vec<Diagnostic>| {
        s.optional(key, |v| {
            values::float(v, &format!("`{key}`"), Range::Positive, d).map(|x| Spanned { value: make(x), span: v.span })
        })
    };
    let norm = read("clip_grad_norm", Clip::Norm, d);
    let value = read("clip_grad_value", Clip::Value, d);
    match (norm?, value?) {
        (Some(_), Some(v)) => {
            d.push(
                Diagnostic::new(v.span, "`clip_grad_norm` and `clip_grad_value` are both set", "second clipping rule")
                    .with_help(
                        "keep one: `clip_grad_norm` scales all gradients together, `clip_grad_value` clamps each value",
                    ),
            );
            None
        }
        (norm, value) => Some(norm.or(value)),
    }
}

/// `model = DeepNet` or `data = LargeData`: the name of a block of `kind`.
/// May be left out when the spec has exactly one block of that kind.
fn reference(
    s: &Settings,
    key: &str,
    kind: BlockKind,
    document: &Document,
    d: &mut Vec<Diagnostic>,
) -> Option<Spanned<String>> {
    let mut names: Vec<&Spanned<String>> = Vec::new();
    for name in document.blocks.iter().filter(|b| b.kind == kind).filter_map(|b| b.name.as_ref()) {
        // A repeated name is reported where it is defined, not here.
        if !names.iter().any(|n| n.value == name.value) {
            names.push(name);
        }
    }
    // A block of this kind that could not be read may be the one meant.
    let lost = document.lost_blocks.contains(&kind);
    let keyword = kind.keyword();
    let block = s.block();
    let Some(v) = s.get(key) else {
        if let ([only], false) = (names.as_slice(), lost) {
            return Some(Spanned { value: only.value.clone(), span: block.header });
        }
        if lost || block.damaged || block.swallowed(key) {
            return None;
        }
        let diagnostic = if names.is_empty() {
            Diagnostic::new(
                block.header,
                format!("the spec has no `{keyword} NAME:` block"),
                format!("`train:` needs a {keyword}"),
            )
            .with_help(match kind {
                BlockKind::Model => "add a `model NAME:` block listing the layers to train",
                _ => "add a `dataset NAME:` block with `source = csv(\"...\")` and `target = \"...\"`",
            })
        } else {
            let list: Vec<&str> = names.iter().map(|n| n.value.as_str()).collect();
            Diagnostic::new(
                block.header,
                format!("missing key `{key}` in `train:` block"),
                format!("`{key}` is required"),
            )
            .with_help(format!(
                "the spec has several {keyword} blocks; add `{key} = NAME` with one of {}",
                suggest::one_of(&list)
            ))
        };
        d.push(diagnostic);
        return None;
    };
    let name = values::name(v, &format!("`{key}`"), d)?;
    if names.iter().any(|n| n.value == name.value) {
        return Some(name);
    }
    if !lost {
        let help = suggest::help(&name.value, names.iter().map(|n| n.value.as_str())).unwrap_or_else(|| {
            if names.is_empty() {
                format!("add a `{keyword} {}:` block", name.value)
            } else {
                let list: Vec<&str> = names.iter().map(|n| n.value.as_str()).collect();
                format!("the spec defines {keyword} {}", suggest::one_of(&list))
            }
        });
        d.push(
            Diagnostic::new(
                v.span,
                format!("unknown {keyword} `{}`", name.value),
                format!("no `{keyword} {}:` block in this spec", name.value),
            )
            .with_help(help),
        );
    }
    None
}

fn loss(v: &Value, d: &mut Vec<Diagnostic>) -> Option<Spanned<Loss>> {
    let Some(callee) = args::callee(v) else {
        let help = match &v.kind {
            ValueKind::Str(text) if LOSSES.contains(&text.as_str()) => format!("remove the quotes: `{text}`"),
            _ => format!("losses are {}", suggest::one_of(LOSSES)),
        };
        values::mismatch_with_help(v, "a loss", "`loss`", &help, d);
        return None;
    };
    let loss = match callee.name {
        "huber" => {
            let args = bind(callee, &["delta"], d);
            let delta = args.float("delta", 1.0, Range::Positive, d);
            args.ok()?;
            Loss::Huber { delta: delta? }
        }
        name => {
            let loss = match name {
                "mse" => Loss::Mse,
                "mae" => Loss::Mae,
                "cross_entropy" => Loss::CrossEntropy,
                "bce" => Loss::Bce,
                other => {
                    values::unknown_word(v, other, "loss", LOSSES, d);
                    return None;
                }
            };
            bind(callee, &[], d).ok()?;
            loss
        }
    };
    Some(Spanned { value: loss, span: v.span })
}

/// `auto`, `cpu`, `cuda`, `wgpu`, or a string `"cuda:N"` for one GPU.
fn device(v: &Value, d: &mut Vec<Diagnostic>) -> Option<DeviceRequest> {
    device_of(v, "`device`", d)
}

/// [`device`] for the key `key` names (`` `device` ``, or an item of `` `devices` ``).
fn device_of(v: &Value, key: &str, d: &mut Vec<Diagnostic>) -> Option<DeviceRequest> {
    let ValueKind::Str(text) = &v.kind else {
        return values::choice(v, key, "device", DEVICES, d);
    };
    if let Some(&(_, device)) = DEVICES.iter().find(|(name, _)| name == text) {
        return Some(device);
    }
    let index = text.strip_prefix("cuda:").and_then(|n| n.parse::<usize>().ok());
    if let Some(index) = index.filter(|_| text[5..].bytes().all(|b| b.is_ascii_digit())) {
        return Some(DeviceRequest::Cuda(Some(index)));
    }
    let help = suggest::help(text, DEVICES.iter().map(|(name, _)| *name)).unwrap_or_else(|| {
        "write `auto`, `cpu`, `cuda`, `wgpu`, or \"cuda:N\" for the N-th GPU, as in \"cuda:1\"".to_string()
    });
    d.push(Diagnostic::new(v.span, format!("unknown device {}", v.describe()), "unknown device").with_help(help));
    None
}

/// `devices = [cpu, cpu]`, `["cuda:0", "cuda:1"]` or `"cuda:all"`: a
/// data-parallel run's devices.
fn devices(v: &Value, d: &mut Vec<Diagnostic>) -> Option<DeviceSet> {
    let help = "write a list of two devices or more, as `devices = [\"cuda:0\", \"cuda:1\"]` or \
                `devices = [cpu, cpu]`, or `devices = \"cuda:all\"` for every GPU";
    let set = match &v.kind {
        ValueKind::Str(text) if text == "cuda:all" => DeviceSet::AllCuda,
        ValueKind::List(items) => {
            let mut list = Vec::new();
            for item in items {
                // A device is a name (`cpu`) or a quoted one (`"cuda:1"`).
                if !matches!(item.kind, ValueKind::Str(_) | ValueKind::Ident(_)) {
                    values::mismatch_with_help(item, "a device", "an item of `devices`", help, d);
                    return None;
                }
                list.push(device_of(item, "an item of `devices`", d)?);
            }
            DeviceSet::List(list)
        }
        _ => {
            values::mismatch_with_help(v, "a list of devices", "`devices`", help, d);
            return None;
        }
    };
    if let Some(why) = set.problem() {
        d.push(Diagnostic::new(v.span, why, "these devices").with_help(help));
        return None;
    }
    Some(set)
}

fn scheduler(v: &Value, d: &mut Vec<Diagnostic>) -> Option<Spanned<Scheduler>> {
    let Some(callee) = args::callee(v) else {
        let help = "write `scheduler = cosine(t_max=100)`, `step(step_size=30)` or `exponential(gamma=0.95)`";
        values::mismatch_with_help(v, "a schedule", "`scheduler`", help, d);
        return None;
    };
    let (kind, args) = match callee.name {
        "cosine" => {
            let args = bind(callee, &["t_max", "eta_min", "warmup"], d);
            let t_max = args
                .required("t_max", "cosine(t_max=100)", d)
                .and_then(|v| values::count(v, &args.what("t_max"), 1, d));
            let eta_min = args.float("eta_min", 0.0, Range::NonNegative, d);
            (t_max.zip(eta_min).map(|(t_max, eta_min)| SchedulerKind::Cosine { t_max, eta_min }), args)
        }
        "step" => {
            let args = bind(callee, &["step_size", "gamma", "warmup"], d);
            let step_size = args
                .required("step_size", "step(step_size=30)", d)
                .and_then(|v| values::count(v, &args.what("step_size"), 1, d));
            let gamma = args.float("gamma", 0.1, Range::Positive, d);
            (step_size.zip(gamma).map(|(step_size, gamma)| SchedulerKind::Step { step_size, gamma }), args)
        }
        "exponential" => {
            let args = bind(callee, &["gamma", "warmup"], d);
            let gamma = args
                .required("gamma", "exponential(gamma=0.95)", d)
                .and_then(|v| values::float(v, &args.what("gamma"), Range::Positive, d));
            (gamma.map(|gamma| SchedulerKind::Exponential { gamma }), args)
        }
        other => {
            values::unknown_word(v, other, "scheduler", SCHEDULERS, d);
            return None;
        }
    };
    let warmup = args.count("warmup", 0, 0, d);
    args.ok()?;
    Some(Spanned { value: Scheduler { kind: kind?, warmup: warmup? }, span: v.span })
}

fn early_stop(v: &Value, d: &mut Vec<Diagnostic>) -> Option<Spanned<EarlyStop>> {
    let example = "early_stop = early_stop(patience=10)";
    let callee = expect_call(v, "early_stop", "`early_stop`", example, d)?;
    let args = bind(callee, &["patience", "min_delta"], d);
    let patience = args
        .required("patience", "early_stop(patience=10)", d)
        .and_then(|v| values::count(v, &args.what("patience"), 1, d));
    let min_delta = args.float("min_delta", 0.0, Range::NonNegative, d);
    args.ok()?;
    Some(Spanned { value: EarlyStop { patience: patience?, min_delta: min_delta? }, span: v.span })
}

/// `none`, `dynamic`, or `dynamic(init=65536, growth=2.0, interval=2000, backoff=0.5)`.
fn loss_scale(v: &Value, d: &mut Vec<Diagnostic>) -> Option<LossScale> {
    let example = "loss_scale = dynamic(init=65536)";
    if let ValueKind::Ident(name) = &v.kind {
        if name == "none" {
            return Some(LossScale::None);
        }
        if name != "dynamic" {
            let help = suggest::help(name, ["dynamic", "none"])
                .unwrap_or_else(|| format!("write `loss_scale = dynamic`, `{example}` or `loss_scale = none`"));
            d.push(
                Diagnostic::new(v.span, format!("unknown loss scale `{name}`"), "expected `dynamic` or `none`")
                    .with_help(help),
            );
            return None;
        }
    }
    let callee = match &v.kind {
        ValueKind::Ident(name) if name == "dynamic" => None,
        _ => Some(expect_call(v, "dynamic", "`loss_scale` (or `none`)", example, d)?),
    };
    let Some(callee) = callee else {
        return Some(LossScale::Dynamic { init: 65536.0, growth: 2.0, interval: 2000, backoff: 0.5 });
    };
    let args = bind(callee, &["init", "growth", "interval", "backoff"], d);
    let init = args.float("init", 65536.0, Range::Positive, d);
    let growth = args.float("growth", 2.0, Range::Positive, d);
    let interval = args.count("interval", 2000, 1, d);
    let backoff = args.float("backoff", 0.5, Range::OpenUnit, d);
    args.ok()?;
    Some(LossScale::Dynamic { init: init?, growth: growth?, interval: interval?, backoff: backoff? })
}

fn checkpoint(v: &Value, d: &mut Vec<Diagnostic>) -> Option<Spanned<Checkpoint>> {
    let example = "checkpoint(every_n=10, path=\"checkpoints/model.pt\")";
    let callee = expect_call(v, "checkpoint", "`checkpoint`", &format!("checkpoint = {example}"), d)?;
    let args = bind(callee, &["every_n", "path", "async_save", "keep"], d);
    let every_n = args.required("every_n", example, d).and_then(|v| values::count(v, &args.what("every_n"), 1, d));
    let path = args.required("path", example, d).and_then(|v| values::path(v, &args.what("path"), d));
    let async_save = args.boolean("async_save", false, d);
    let keep = args.count("keep", 1, 1, d);
    args.ok()?;
    let checkpoint = Checkpoint { every_n: every_n?, path: path?.value, async_save: async_save?, keep: keep? };
    Some(Spanned { value: checkpoint, span: v.span })
}
