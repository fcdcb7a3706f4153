//! Whole specs through [`parse_spec`]: the users' spec, every construct,
//! the defaults, and inputs that must not make the parser panic.

use crate::model::{batchnorm::BatchNormSpec, dense::DenseSpec, dropout::DropoutSpec, layernorm::LayerNormSpec};
use std::path::PathBuf;

use super::parse_spec;
use super::render;
use super::types::*;

/// The spec from KYN-LANGUAGE.md, as users run it today.
const USERS_SPEC: &str = r#"dataset LargeData:
    source = csv("data/large_train.csv")
    target = "outcome"
    split = 0.8
    normalize = true
    num_workers = 4
    pin_memory = true
    prefetch = 2

model DeepNet:
    input 128
    dense 512 gelu
    batchnorm
    dropout 0.3
    dense 256 gelu
    batchnorm
    dropout 0.2
    dense 64 relu
    dense 1 linear

train:
    model = DeepNet
    data = LargeData
    loss = mse
    optimizer = adamw(lr=0.001, weight_decay=0.01)
    epochs = 100
    batch = 256
    device = auto
    scheduler = cosine(t_max=100)
    early_stop = early_stop(patience=10)
    checkpoint = checkpoint(every_n=10, path="checkpoints/deepnet.pt", async_save=true)
    precision = bf16
    compile = true

evaluate:
    metrics = [mae, rmse]

export:
    format = torchscript
    path = "models/deepnet.pt"
"#;

const MINIMAL: &str = "dataset D:\nsource = csv(\"d.csv\")\ntarget = \"y\"\nmodel M:\ninput 4\ndense 1 linear\ntrain:\nloss = mse\nepochs = 3\n";

fn ok(source: &str) -> Spec {
    match parse_spec(source) {
        Ok(spec) => spec,
        Err(e) => panic!("{}", render("test.kyn", source, &e.diagnostics)),
    }
}

fn messages(source: &str) -> Vec<String> {
    match parse_spec(source) {
        Ok(_) => panic!("expected errors for:\n{source}"),
        Err(e) => e.diagnostics.into_iter().map(|d| d.message).collect(),
    }
}

/// `Debug` text with every span erased, to compare specs whose text moved.
fn erase_spans(debug: &str) -> String {
    let mut out = String::new();
    let mut rest = debug;
    while let Some(i) = rest.find("Span {") {
        out.push_str(&rest[..i]);
        out.push_str("Span");
        rest = &rest[i..];
        rest = &rest[rest.find('}').map_or(rest.len(), |j| j + 1)..];
    }
    out.push_str(rest);
    out
}

/// The text under every span of `spec`, in order.
fn span_texts<'a>(spec: &Spec, source: &'a str) -> Vec<&'a str> {
    let debug = format!("{spec:?}");
    let mut texts = Vec::new();
    let mut rest = debug.as_str();
    while let Some(i) = rest.find("Span { start: ") {
        rest = &rest[i + "Span { start: ".len()..];
        let start: usize = rest[..rest.find(',').unwrap()].parse().unwrap();
        rest = &rest[rest.find("end: ").unwrap() + 5..];
        let end: usize = rest[..rest.find(' ').unwrap()].parse().unwrap();
        texts.push(&source[start..end]);
    }
    texts
}

fn assert_same_meaning(a: &str, b: &str) {
    let (spec_a, spec_b) = (ok(a), ok(b));
    assert_eq!(erase_spans(&format!("{spec_a:?}")), erase_spans(&format!("{spec_b:?}")));
    let texts_a: Vec<String> = span_texts(&spec_a, a).iter().map(|t| t.replace('\r', "")).collect();
    let texts_b: Vec<String> = span_texts(&spec_b, b).iter().map(|t| t.replace('\r', "")).collect();
    assert_eq!(texts_a, texts_b);
}

#[test]
fn users_spec_reads_as_written() {
    let spec = ok(USERS_SPEC);
    let d = &spec.dataset;
    assert_eq!(d.name.value, "LargeData");
    assert_eq!(d.source.value, PathBuf::from("data/large_train.csv"));
    assert_eq!(&USERS_SPEC[d.source.span.start..d.source.span.end], "\"data/large_train.csv\"");
    assert_eq!(d.target.value, "outcome");
    assert_eq!(d.split.value, 0.8);
    assert!(d.normalize);
    assert_eq!(d.num_workers.value, 4);
    assert!(d.pin_memory.value);
    assert_eq!(d.prefetch.as_ref().map(|p| p.value), Some(2));

    let m = &spec.model;
    assert_eq!(m.name.value, "DeepNet");
    assert_eq!(m.input.value, 128);
    assert_eq!(&USERS_SPEC[m.input.span.start..m.input.span.end], "input 128");
    let layers: Vec<Layer> = m.layers.iter().map(|l| l.value.clone()).collect();
    let dense = |units, activation| Layer::Dense(DenseSpec { units, activation });
    assert_eq!(
        layers,
        [
            dense(512, Activation::Gelu),
            Layer::BatchNorm(BatchNormSpec),
            Layer::Dropout(DropoutSpec { p: 0.3 }),
            dense(256, Activation::Gelu),
            Layer::BatchNorm(BatchNormSpec),
            Layer::Dropout(DropoutSpec { p: 0.2 }),
            dense(64, Activation::Relu),
            dense(1, Activation::Linear),
        ]
    );

    let t = &spec.train;
    assert_eq!(t.model.value, "DeepNet");
    assert_eq!(t.data.value, "LargeData");
    assert_eq!(t.loss.value, Loss::Mse);
    assert_eq!(
        t.optimizer.value,
        Optimizer::AdamW { lr: 0.001, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.01, fused: None }
    );
    assert_eq!(t.epochs.value, 100);
    assert_eq!(t.batch.value, 256);
    assert_eq!(t.device.value, DeviceRequest::Auto);
    assert_eq!(
        t.scheduler.as_ref().map(|s| s.value),
        Some(Scheduler { kind: SchedulerKind::Cosine { t_max: 100, eta_min: 0.0 }, warmup: 0 })
    );
    assert_eq!(t.early_stop.as_ref().map(|e| e.value), Some(EarlyStop { patience: 10, min_delta: 0.0 }));
    assert_eq!(
        t.checkpoint.as_ref().map(|c| c.value.clone()),
        Some(Checkpoint { every_n: 10, path: "checkpoints/deepnet.pt".into(), async_save: true, keep: 1 })
    );
    assert_eq!(t.precision.value, Precision::Bf16);
    assert!(t.compile.value);
    assert_eq!(t.seed, 42);

    let metrics: Vec<Metric> = spec.evaluate.metrics.iter().map(|m| m.value).collect();
    assert_eq!(metrics, [Metric::Mae, Metric::Rmse]);
    let export = spec.export.expect("export block");
    assert_eq!(export.format.value, ExportFormat::Torchscript);
    assert_eq!(export.path.value, PathBuf::from("models/deepnet.pt"));
}

#[test]
fn users_spec_without_indentation_means_the_same() {
    let stripped: String = USERS_SPEC.lines().map(|l| format!("{}\n", l.trim_start())).collect();
    assert_same_meaning(USERS_SPEC, &stripped);
}

#[test]
fn crlf_tabs_trailing_blanks_and_bom_mean_the_same() {
    let crlf = USERS_SPEC.replace('\n', "\r\n");
    assert_same_meaning(USERS_SPEC, &crlf);
    let tabs = USERS_SPEC.replace("    ", "\t");
    assert_same_meaning(USERS_SPEC, &tabs);
    let ragged: String = USERS_SPEC.lines().map(|l| format!("{l}   \n\n")).collect();
    assert_same_meaning(USERS_SPEC, &ragged);
    let bom = format!("\u{feff}{USERS_SPEC}");
    assert_same_meaning(USERS_SPEC, &bom);
    let no_final_newline = USERS_SPEC.trim_end();
    assert_same_meaning(USERS_SPEC, no_final_newline);
}

/// A pasted invisible character is one problem wherever it stands: before a
/// header (which still opens its block), alone on a line, or before a comment.
#[test]
fn an_invisible_character_is_one_problem_wherever_it_stands() {
    for source in [
        USERS_SPEC.replace("train:\n", "\u{200B}train:\n"),
        USERS_SPEC.replace("train:\n", "\u{200B}\ntrain:\n"),
        USERS_SPEC.replace("train:\n", "  \u{2060}# note\ntrain:\n"),
    ] {
        let said = messages(&source);
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(said[0].starts_with("unexpected character U+"), "{said:?}");
    }
}

#[test]
fn comments_anywhere_but_inside_strings() {
    let commented = USERS_SPEC
        .replace("train:\n", "# training settings\ntrain:   # the run\n")
        .replace("input 128\n", "input 128  # features\n")
        .replace("epochs = 100\n", "epochs = 100 # passes\n\n   # indented comment\n");
    assert_same_meaning(USERS_SPEC, &commented);
    let spec = ok(&MINIMAL.replace("\"y\"", "\"y#1\" # not part of it"));
    assert_eq!(spec.dataset.target.value, "y#1");
}

/// Column names are matched as a CSV header's names are read: without
/// the spaces around them.
#[test]
fn column_names_are_read_without_surrounding_spaces() {
    let spec = ok(&MINIMAL.replace("target = \"y\"", "target = \" y \"\ncategorical = [\"city \", color]"));
    assert_eq!(spec.dataset.target.value, "y");
    let names: Vec<&str> = spec.dataset.categorical.iter().map(|c| c.value.as_str()).collect();
    assert_eq!(names, ["city", "color"]);
}

#[test]
fn defaults() {
    let spec = ok(MINIMAL);
    let d = &spec.dataset;
    assert_eq!(d.split.value, 0.8);
    assert!(!d.normalize);
    assert_eq!(d.num_workers.value, 0);
    assert!(!d.pin_memory.value);
    assert_eq!(d.prefetch, None);
    // A default carries the span of its block's header.
    assert_eq!(&MINIMAL[d.split.span.start..d.split.span.end], "dataset D:");

    let t = &spec.train;
    // With one dataset and one model, `train:` need not name them.
    assert_eq!(t.model.value, "M");
    assert_eq!(t.data.value, "D");
    assert_eq!(
        t.optimizer.value,
        Optimizer::AdamW { lr: 1e-3, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.01, fused: None }
    );
    assert_eq!(&MINIMAL[t.optimizer.span.start..t.optimizer.span.end], "train:");
    assert_eq!(t.batch.value, 32);
    assert_eq!(t.device.value, DeviceRequest::Auto);
    assert_eq!(t.scheduler, None);
    assert_eq!(t.early_stop, None);
    assert_eq!(t.checkpoint, None);
    assert_eq!(t.precision.value, Precision::Fp32);
    assert!(!t.compile.value);
    assert_eq!(t.seed, 42);
    assert!(spec.evaluate.metrics.is_empty());
    assert_eq!(spec.export, None);
}

fn optimizer(text: &str) -> Optimizer {
    ok(&format!("{MINIMAL}optimizer = {text}\n")).train.optimizer.value
}

#[test]
fn optimizers_have_pytorch_defaults() {
    let adamw = Optimizer::AdamW { lr: 1e-3, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.01, fused: None };
    assert_eq!(optimizer("adamw"), adamw);
    assert_eq!(optimizer("adamw()"), adamw);
    assert_eq!(
        optimizer("adam"),
        Optimizer::Adam { lr: 1e-3, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.0, fused: None }
    );
    assert_eq!(
        optimizer("sgd"),
        Optimizer::Sgd { lr: 1e-3, momentum: 0.0, dampening: 0.0, weight_decay: 0.0, nesterov: false, fused: None }
    );
    assert_eq!(
        optimizer("rmsprop"),
        Optimizer::RmsProp { lr: 1e-2, alpha: 0.99, eps: 1e-8, weight_decay: 0.0, momentum: 0.0, centered: false }
    );
}

#[test]
fn optimizer_arguments_by_name_and_position() {
    assert_eq!(
        optimizer("adam(lr=3e-4, betas=[0.8, 0.99], eps=1e-6, weight_decay=0.1)"),
        Optimizer::Adam { lr: 3e-4, beta1: 0.8, beta2: 0.99, eps: 1e-6, weight_decay: 0.1, fused: None }
    );
    // Positional arguments follow torch.optim's order.
    assert_eq!(
        optimizer("sgd(0.1, 0.9, nesterov=true)"),
        Optimizer::Sgd { lr: 0.1, momentum: 0.9, dampening: 0.0, weight_decay: 0.0, nesterov: true, fused: None }
    );
    assert_eq!(
        optimizer("rmsprop(lr=0.001, alpha=0.9, momentum=0.5, centered=true, weight_decay=0, eps=1e-7)"),
        Optimizer::RmsProp { lr: 0.001, alpha: 0.9, eps: 1e-7, weight_decay: 0.0, momentum: 0.5, centered: true }
    );
    assert_eq!(optimizer("adamw(1)").lr(), 1.0);
}

#[test]
fn fused_is_an_optimizer_argument_given_by_name_only() {
    assert_eq!(optimizer("adamw(lr=0.01, fused=true)").fused(), Some(true));
    assert_eq!(optimizer("adam(fused=false)").fused(), Some(false));
    assert_eq!(optimizer("sgd(0.1, 0.9, fused=true)").fused(), Some(true));
    assert_eq!(optimizer("adamw").fused(), None);
    // torch.optim takes `fused` by name only: a fifth positional argument
    // of adamw is refused, not read as `fused`.
    let e = messages(&format!("{MINIMAL}optimizer = adamw(0.001, [0.9, 0.999], 1e-8, 0.01, true)\n"));
    assert_eq!(e, ["`adamw` takes at most 4 positional arguments"]);
    let e = messages(&format!("{MINIMAL}optimizer = adamw(fused=1)\n")).join("\n");
    assert!(e.contains("`fused` of `adamw`"), "{e}");
    let e = messages(&format!("{MINIMAL}optimizer = rmsprop(fused=true)\n"));
    assert_eq!(e, ["unknown argument `fused` for `rmsprop`"]);
}

/// A name in another script (`Données`) is refused with what names take
/// and where such text goes.
#[test]
fn a_name_outside_ascii_says_what_names_take() {
    let source = USERS_SPEC.replace("model DeepNet:", "model DeepNét:").replace("model = DeepNet", "model = DeepNét");
    let e = parse_spec(&source).unwrap_err();
    let first = &e.diagnostics[0];
    assert!(first.message.starts_with("unexpected character `é` (U+00E9)"), "{}", first.message);
    assert!(first.help.as_deref().is_some_and(|h| h.contains("ASCII letters, digits and `_`")), "{first:?}");
}

/// An `export:` block with nothing in it asks for no export, as an empty
/// `evaluate:` asks for the default metrics; one setting alone still needs
/// the other.
#[test]
fn an_empty_export_block_exports_nothing() {
    let spec = ok(&format!("{MINIMAL}export:\n# cleared out for now\n"));
    assert!(spec.export.is_none());
    let e = messages(&format!("{MINIMAL}export:\n    format = onnx\n"));
    assert_eq!(e, ["missing key `path` in `export:` block"]);
}

/// Two habits from Python get a hint: a tuple where a list goes, a loss
/// name in quotes.
#[test]
fn a_tuple_and_a_quoted_loss_say_how_to_write_them() {
    let help = |source: String| {
        let e = parse_spec(&source).unwrap_err();
        e.diagnostics[0].help.clone().unwrap_or_default()
    };
    let h = help(format!("{MINIMAL}optimizer = adamw(betas=(0.9, 0.999))\n"));
    assert!(h.contains("square brackets, `[a, b]`, not in parentheses"), "{h}");
    let h = help(MINIMAL.replace("loss = mse", "loss = \"mse\""));
    assert_eq!(h, "remove the quotes: `mse`");
}

/// A required argument spelled wrongly (PyTorch's `T_max`) is one
/// problem, the unknown argument with its did-you-mean, not also a missing
/// one; a required argument left out beside an unrelated unknown one is
/// both.
#[test]
fn a_misspelled_required_argument_is_not_also_missing() {
    let e = messages(&format!("{MINIMAL}scheduler = cosine(T_max=100)\n"));
    assert_eq!(e, ["unknown argument `T_max` for `cosine`"]);
    let e = messages(&format!("{MINIMAL}early_stop = early_stop(patiance=10)\n"));
    assert_eq!(e, ["unknown argument `patiance` for `early_stop`"]);
    let e = messages(&format!("{MINIMAL}scheduler = cosine(gamma=3)\n"));
    assert_eq!(e, ["missing argument `t_max` for `cosine`", "unknown argument `gamma` for `cosine`"]);
}

fn train_with(lines: &str) -> TrainSpec {
    ok(&format!("{MINIMAL}{lines}\n")).train
}

#[test]
fn losses() {
    assert_eq!(train_with("").loss.value, Loss::Mse);
    let loss = |text: &str| ok(&MINIMAL.replace("loss = mse", &format!("loss = {text}"))).train.loss.value;
    assert_eq!(loss("mae"), Loss::Mae);
    assert_eq!(loss("huber"), Loss::Huber { delta: 1.0 });
    assert_eq!(loss("huber(1.5)"), Loss::Huber { delta: 1.5 });
    assert_eq!(loss("huber(delta=2)"), Loss::Huber { delta: 2.0 });
    assert_eq!(loss("cross_entropy"), Loss::CrossEntropy);
    assert_eq!(loss("bce()"), Loss::Bce);
}

#[test]
fn shape_problems_above_an_unreadable_line_are_reported_with_it() {
    // `attention heads=3` cannot split 8 values; the `transformer` line below
    // it cannot be read (no `ff`). Both are said in one run.
    let model = "model M:\ninput 4\ndense 8 relu\nlayernorm\nattention heads=3\ntransformer heads=2\ndense 1 linear\n";
    let source = MINIMAL.replace("model M:\ninput 4\ndense 1 linear\n", model);
    let e = messages(&source);
    assert_eq!(e.len(), 2, "{e:?}");
    assert!(e.iter().any(|m| m.contains("`attention` cannot take")), "{e:?}");
    assert!(e.iter().any(|m| m.contains("ff")), "{e:?}");
    // Below the unreadable line nothing is checked: its output is not known.
    // So for a line that cannot be read at all (a stray comma), a second
    // `input`, or a nested block.
    let model = "model M:\ninput 4\ntransformer heads=2\nattention heads=3\ndense 1 linear\n";
    let e = messages(&MINIMAL.replace("model M:\ninput 4\ndense 1 linear\n", model));
    assert_eq!(e.len(), 1, "{e:?}");
    for bad in ["dense 6, relu", "input 6"] {
        let model = format!("model M:\ninput 4\ndense 8 relu\n{bad}\nattention heads=3\ndense 1 linear\n");
        let e = messages(&MINIMAL.replace("model M:\ninput 4\ndense 1 linear\n", &model));
        assert_eq!(e.len(), 1, "{bad}: {e:?}");
    }
}

#[test]
fn a_squeezing_last_layer_before_a_loss_that_takes_logits_is_refused() {
    let spec = |last: &str, loss: &str| MINIMAL.replace("dense 1 linear", last).replace("loss = mse", loss);
    for (last, loss, says) in [
        (
            "dense 1 sigmoid",
            "loss = bce",
            "the last layer applies `sigmoid`, but `bce` takes logits and applies a sigmoid itself",
        ),
        ("dense 1 tanh", "loss = bce", "the last layer applies `tanh`, but `bce` takes logits"),
        ("dense 3 sigmoid", "loss = cross_entropy", "`cross_entropy` takes logits and applies a softmax itself"),
        ("dense 1 relu", "loss = bce", "the last layer applies `relu`, but `bce` takes logits"),
    ] {
        let source = spec(last, loss);
        let e = parse_spec(&source).unwrap_err();
        assert_eq!(e.diagnostics.len(), 1, "{last} / {loss}");
        let shown = render("t.kyn", &source, &e.diagnostics);
        assert!(shown.contains(says) && shown.contains("t.kyn:6:1"), "{shown}");
        assert!(shown.contains(&format!("write `{} linear` here", &last[..last.rfind(' ').unwrap()])), "{shown}");
    }
    // `bce` takes one logit: the help names one unit, whatever the layer had.
    let source = spec("dense 2 relu", "loss = bce");
    let shown = render("t.kyn", &source, &parse_spec(&source).unwrap_err().diagnostics);
    assert!(shown.contains("write `dense 1 linear` here"), "{shown}");
    // Said beside a dataset's own problem, in one run.
    let e = messages(&spec("dense 1 sigmoid", "loss = bce").replace("target = \"y\"", "target = 3"));
    assert_eq!(e.len(), 2, "{e:?}");
    // And beside another setting's problem in `train:` (it hid this one).
    for other in ["batch = 0", "seed = -1", "device = tpu"] {
        let e = messages(&spec("dense 1 sigmoid", "loss = bce").replace("epochs = 3", &format!("epochs = 3\n{other}")));
        assert_eq!(e.len(), 2, "{other}: {e:?}");
        assert!(e.iter().any(|m| m.contains("but `bce` takes logits")), "{other}: {e:?}");
    }
    // Logits, or a squeezing layer before the last, or a regression: as written.
    ok(&spec("dense 1 linear", "loss = bce"));
    ok(&spec("dense 4 sigmoid\ndense 1 linear", "loss = bce"));
    ok(&spec("dense 1 sigmoid", "loss = mse"));
    ok(&spec("dense 3 relu", "loss = cross_entropy"));
    // A dropout after the squeezing layer passes its values on as they are.
    let e = messages(&spec("dense 3 sigmoid\ndropout 0.1", "loss = cross_entropy"));
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].contains("`cross_entropy` takes logits"), "{e:?}");
    ok(&spec("dense 3 linear\ndropout 0.1", "loss = cross_entropy"));
}

/// A misspelled header inside a block (`resdual:` among a model's layers,
/// `evalute:` among `train:`'s settings) is that one problem: the layers
/// and settings under it are not also said to be missing. A setting
/// missing for its own sake is still said.
#[test]
fn a_misspelled_header_inside_a_block_is_one_problem() {
    let model = "model M:\ninput 4\n  resdual:\n    dense 8 relu\n  dense 1 linear\n";
    let source = MINIMAL.replace("model M:\ninput 4\ndense 1 linear\n", model);
    let e = parse_spec(&source).unwrap_err().diagnostics;
    assert_eq!(e.len(), 1, "{e:?}");
    assert_eq!(e[0].message, "unknown block of layers `resdual`");
    assert_eq!(e[0].help.as_deref(), Some("did you mean `residual:`?"));
    let e = parse_spec(&source.replace("resdual", "block")).unwrap_err().diagnostics;
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].help.as_deref().unwrap_or("").contains("only `residual:` opens a block of layers"), "{e:?}");
    // At the line's beginning: an unknown block of the spec, which took the
    // model's `dense` with it.
    let source = MINIMAL.replace("input 4\n", "input 4\nresdual:\n");
    assert_eq!(messages(&source), ["unknown block `resdual`"]);
    // An indented spec's misspelled `train:` after the model's layers is
    // the header it was meant to be.
    let source = "dataset D:\n  source = csv(\"d.csv\")\n  target = \"y\"\nmodel M:\n  input 4\n  dense 1 linear\n  trian:\n    loss = mse\n    epochs = 3\n";
    let e = parse_spec(source).unwrap_err().diagnostics;
    assert_eq!(e[0].message, "unknown block `trian`", "{e:?}");
    assert!(!e.iter().any(|d| d.message.contains("expected a layer")), "{e:?}");
    // A model with no layers at all, before an unknown header over
    // settings: said, as nothing under the header was a layer.
    let source = MINIMAL.replace("input 4\ndense 1 linear\n", "") + "evalute:\nmetrics = [mae]\n";
    assert!(messages(&source).iter().any(|m| m == "model `M` has no layers"), "{:?}", messages(&source));
    // `evalute:` before `epochs`: `epochs` is not missing from `train:`,
    // and is read as the evaluate block's, which it would be once fixed.
    let source = MINIMAL.replace("epochs = 3", "evalute:\nepochs = 3");
    assert_eq!(messages(&source), ["unknown block `evalute`", "unknown key `epochs` in `evaluate:` block"]);
    // After the block: a key missing from it is still missing.
    let source = MINIMAL.replace("loss = mse\n", "") + "evalute:\nmetrics = [mae]\n";
    assert_eq!(messages(&source), ["missing key `loss` in `train:` block", "unknown block `evalute`"]);
}

/// The body of a block under a misspelled header is read as the block it
/// was likely meant to be: its problems are said in the same run (they were
/// found only once the header was fixed).
#[test]
fn a_misspelled_blocks_body_is_checked_with_it() {
    let source = MINIMAL.replace("train:", "trian:").replace("epochs = 3", "epochs = -3\nbatchh = 16");
    let e = messages(&source);
    assert_eq!(e[0], "unknown block `trian`", "{e:?}");
    assert!(e.iter().any(|m| m.contains("`epochs`") && m.contains("-3")), "{e:?}");
    assert!(e.iter().any(|m| m.contains("`batchh`")), "{e:?}");
    // Nothing is said missing because of it: not the train block, nor its model or data.
    assert!(!e.iter().any(|m| m.contains("missing") || m.contains("no `")), "{e:?}");
    // A model under a misspelled header is still the model `train:` names.
    let source = MINIMAL.replace("model M:", "modle M:").replace("dense 1 linear", "dense 0 linear");
    let e = messages(&source);
    assert_eq!(e.len(), 2, "{e:?}");
    assert!(e[0] == "unknown block `modle`" && e[1].contains("at least 1"), "{e:?}");
    // Beside a block written correctly, it is no second one.
    let source = format!("{MINIMAL}evaluate:\nmetrics = [mae]\nevalute:\nmetrics = [mae]\n");
    assert_eq!(messages(&source), ["unknown block `evalute`"]);
    // Guessed wrong (layers under `trian:`, settings under `modle:`): the
    // lines are skipped as before, not each said to be in the wrong block.
    let source = MINIMAL.replace("dense 1 linear\n", "trian:\ndense 8 relu\ndense 1 linear\n");
    let e = messages(&source);
    assert!(e[0] == "unknown block `trian`" && !e.iter().any(|m| m.contains("expected")), "{e:?}");
    let source = MINIMAL.replace("epochs = 3", "modle:\nepochs = 3\nbatch = 8");
    assert_eq!(messages(&source), ["unknown block `modle`"]);
    let source = format!("{MINIMAL}trian:\nloss = mse\nepochs = 3\n");
    assert_eq!(messages(&source), ["unknown block `trian`"]);
    let source = format!("trian:\nloss = mse\nepochs = 3\n{MINIMAL}");
    assert_eq!(messages(&source), ["unknown block `trian`"]);
}

/// Words other tools use, and the start of one name, find it; a word
/// that is none of a setting's values says which are.
#[test]
fn other_tools_words_and_a_names_start_are_suggested() {
    let help = |source: String| {
        let e = parse_spec(&source).unwrap_err().diagnostics;
        assert_eq!(e.len(), 1, "{e:?}");
        e[0].help.clone().unwrap_or_default()
    };
    let loss = |l: &str| MINIMAL.replace("loss = mse", &format!("loss = {l}"));
    assert_eq!(help(loss("ce")), "did you mean `cross_entropy`?");
    assert_eq!(help(format!("{MINIMAL}evaluate:\nmetrics = [acc]\n")), "did you mean `accuracy`?");
    assert_eq!(help(format!("{MINIMAL}evaluate:\nmetrics = [prec]\n")), "did you mean `precision`?");
    let train = |line: &str| format!("{MINIMAL}{line}\n");
    assert_eq!(help(train("checkpoint = checkpoint(every=2, path=\"c.ck\")")), "did you mean `every_n`?");
    assert_eq!(help(train("checkpoint = checkpoint(every_n=2, file=\"c.ck\")")), "did you mean `path`?");
    assert_eq!(help(train("early_stop = early_stop(wait=3)")), "did you mean `patience`?");
    assert_eq!(help(train("loss_scale = dinamic")), "did you mean `dynamic`?");
    assert!(help(train("loss_scale = auto")).contains("`loss_scale = none`"));
    let conv = |c: &str| MINIMAL.replace("input 4\n", &format!("input 1x8x8\n{c}\nflatten\n"));
    assert!(help(conv("conv2d 4 3 relu padding=valid")).contains("write `padding=0`"));
    // Quoted, as PyTorch writes it: the word it is here.
    assert_eq!(help(conv("conv2d 4 3 relu padding=\"same\"")), "remove the quotes: `padding=same`");
    assert!(help(conv("conv2d 4 3 relu padding=\"valid\"")).contains("write `padding=0`"));
    let e = parse_spec(&conv("conv2d 4 3 relu padding=full")).unwrap_err().diagnostics;
    assert_eq!(e[0].message, "expected a number or `same` for `padding`, found `full`");
}

#[test]
fn devices_precisions_and_flags() {
    assert_eq!(train_with("device = cpu").device.value, DeviceRequest::Cpu);
    assert_eq!(train_with("device = cuda").device.value, DeviceRequest::Cuda(None));
    assert_eq!(train_with("device = \"cuda:1\"").device.value, DeviceRequest::Cuda(Some(1)));
    assert_eq!(train_with("device = \"cpu\"").device.value, DeviceRequest::Cpu);
    assert_eq!(train_with("device = wgpu").device.value, DeviceRequest::Wgpu);
    // A data-parallel run: its first device is the run's `device`.
    let two = train_with("devices = [\"cuda:1\", \"cuda:0\"]");
    assert_eq!(
        two.devices.map(|d| d.value),
        Some(DeviceSet::List(vec![DeviceRequest::Cuda(Some(1)), DeviceRequest::Cuda(Some(0))]))
    );
    assert_eq!(two.device.value, DeviceRequest::Cuda(Some(1)));
    assert_eq!(train_with("devices = [cpu, cpu, cpu]").devices.map(|d| d.value.name()), Some("cpu,cpu,cpu".into()));
    assert_eq!(train_with("devices = \"cuda:all\"").devices.map(|d| d.value), Some(DeviceSet::AllCuda));
    assert_eq!(train_with("device = cpu").devices, None);
    // A misspelt key whose right spelling is set already: renaming it would set it twice.
    let e = parse_spec(&format!("{MINIMAL}epoch = 5\n")).unwrap_err();
    let help = e.diagnostics.iter().find_map(|d| d.help.clone()).unwrap_or_default();
    assert_eq!(help, "did you mean `epochs`? It is set already, on line 9: remove one of the two lines");
    // A bad item of `devices` is said of `devices`, not of `device`.
    let said = messages(&format!("{MINIMAL}devices = [[cpu], cpu]\n"));
    assert!(said.iter().any(|m| m.contains("for an item of `devices`")), "{said:?}");
    let e = parse_spec(&format!("{MINIMAL}devices = [[cpu], cpu]\n")).unwrap_err();
    assert!(e.diagnostics[0].help.as_deref().unwrap_or("").contains("devices = [cpu, cpu]"), "{:?}", e.diagnostics);
    assert_eq!(train_with("precision = fp16").precision.value, Precision::Fp16);
    assert!(train_with("compile = true").compile.value);
    assert_eq!(train_with("seed = 7").seed, 7);
    assert_eq!(train_with("seed = 0").seed, 0);
    assert_eq!(train_with("batch = 1").batch.value, 1);
}

#[test]
fn schedules_early_stopping_and_checkpoints() {
    let scheduler = |text: &str| train_with(&format!("scheduler = {text}")).scheduler.map(|s| s.value);
    assert_eq!(
        scheduler("cosine(t_max=50, eta_min=1e-5, warmup=5)"),
        Some(Scheduler { kind: SchedulerKind::Cosine { t_max: 50, eta_min: 1e-5 }, warmup: 5 })
    );
    assert_eq!(
        scheduler("step(30)"),
        Some(Scheduler { kind: SchedulerKind::Step { step_size: 30, gamma: 0.1 }, warmup: 0 })
    );
    assert_eq!(
        scheduler("step(step_size=10, gamma=0.5, warmup=2)"),
        Some(Scheduler { kind: SchedulerKind::Step { step_size: 10, gamma: 0.5 }, warmup: 2 })
    );
    assert_eq!(
        scheduler("exponential(0.95)"),
        Some(Scheduler { kind: SchedulerKind::Exponential { gamma: 0.95 }, warmup: 0 })
    );
    let t = train_with("early_stop = early_stop(3, min_delta=0.001)");
    assert_eq!(t.early_stop.map(|e| e.value), Some(EarlyStop { patience: 3, min_delta: 0.001 }));
    let t = train_with("checkpoint = checkpoint(5, \"ckpt/m.pt\", keep=3)");
    assert_eq!(
        t.checkpoint.map(|c| c.value),
        Some(Checkpoint { every_n: 5, path: "ckpt/m.pt".into(), async_save: false, keep: 3 })
    );
}

#[test]
fn layers_and_activations() {
    let spec = ok(&MINIMAL.replace(
        "dense 1 linear",
        "dense 8 leaky_relu\nlayernorm\ndense 8 leaky_relu(0.2)\ndense 8 leaky_relu(negative_slope=0.1)\n\
         dense 8 tanh\ndense 8 sigmoid\ndense 8 silu\ndropout 0\ndense 1 linear",
    ));
    let layers: Vec<Layer> = spec.model.layers.into_iter().map(|l| l.value).collect();
    let dense = |activation| Layer::Dense(DenseSpec { units: 8, activation });
    assert_eq!(
        layers,
        [
            dense(Activation::LeakyRelu(0.01)),
            Layer::LayerNorm(LayerNormSpec),
            dense(Activation::LeakyRelu(0.2)),
            dense(Activation::LeakyRelu(0.1)),
            dense(Activation::Tanh),
            dense(Activation::Sigmoid),
            dense(Activation::Silu),
            Layer::Dropout(DropoutSpec { p: 0.0 }),
            Layer::Dense(DenseSpec { units: 1, activation: Activation::Linear }),
        ]
    );
}

#[test]
fn classification_metrics_with_a_classification_loss() {
    let source = format!(
        "{}evaluate:\nmetrics = [accuracy, precision, recall, f1,]\nexport:\nformat = onnx\npath = \"m.onnx\"\n",
        MINIMAL.replace("loss = mse", "loss = cross_entropy")
    );
    let spec = ok(&source);
    let metrics: Vec<&str> = spec.evaluate.metrics.iter().map(|m| m.value.name()).collect();
    assert_eq!(metrics, ["accuracy", "precision", "recall", "f1"]);
    assert_eq!(spec.export.map(|e| e.format.value), Some(ExportFormat::Onnx));
    let empty = ok(&format!("{MINIMAL}evaluate:\nmetrics = []\n"));
    assert!(empty.evaluate.metrics.is_empty());
}

#[test]
fn several_datasets_and_models_are_chosen_by_name() {
    let source = "\
dataset A:
source = csv(\"a.csv\")
target = \"y\"
dataset B:
source = csv(path=\"b.csv\")
target = \"z\"
model Small:
input 2
dense 1 linear
model Big:
input 3
dense 4 relu
dense 1 linear
train:
model = Big
data = B
loss = mae
epochs = 1
";
    let spec = ok(source);
    assert_eq!(spec.dataset.name.value, "B");
    assert_eq!(spec.dataset.source.value, PathBuf::from("b.csv"));
    assert_eq!(spec.model.name.value, "Big");
    assert_eq!(spec.model.input.value, 3);
    // Naming is needed once there is a choice.
    let unnamed = source.replace("model = Big\ndata = B\n", "");
    assert_eq!(messages(&unnamed), ["missing key `model` in `train:` block", "missing key `data` in `train:` block"]);
}

#[test]
fn every_problem_is_reported_in_one_run() {
    let source = "\
dataset D:
source = csv(\"d.csv\")
target = \"y\"
split = 1.5
model M:
input 0
dense 1
train:
loss = mze
epoch = 10
batch = 0
optimizer = adamw(lr=-1)
";
    assert_eq!(
        messages(source),
        [
            "`split` must be between 0 and 1, both excluded, found `1.5`",
            "the width of `input` must be at least 1, found `0`",
            "missing activation in `dense 1`",
            "unknown loss `mze`",
            "unknown key `epoch` in `train:` block",
            "`batch` must be at least 1, found `0`",
            "`lr` of `adamw` must be greater than 0, found `-1`",
        ]
    );
}

#[test]
fn spec_error_says_how_many_and_the_first() {
    let err = parse_spec("train:\nepoch = 1\nbatch = 0\n").unwrap_err();
    assert_eq!(
        err.to_string(),
        "could not read spec: 5 problems found, the first: missing key `loss` in `train:` block"
    );
    assert!(render("x.kyn", "", &err.diagnostics).ends_with("error: could not read spec: 5 problems found\n"));
}

#[test]
fn empty_and_blank_specs_need_a_train_block() {
    for source in ["", "\n\n", "# only a comment\n", "\u{feff}"] {
        assert_eq!(messages(source), ["missing `train:` block"], "{source:?}");
    }
}

/// A small deterministic generator, so a failure can be replayed.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn check_never_panics(source: &str) {
    if let Err(e) = parse_spec(source) {
        assert!(!e.diagnostics.is_empty());
        for d in &e.diagnostics {
            assert!(d.span.start <= d.span.end && d.span.end <= source.len(), "{d:?} in {source:?}");
        }
        let text = render("fuzz.kyn", source, &e.diagnostics);
        assert!(!text.contains('\u{1b}'));
    }
}

#[test]
fn mutated_specs_never_panic() {
    const PIECES: &[&str] = &[
        "[", "]", "(", ")", ",", "=", ":", "\"", "\\", "#", "\n", "\r\n", "\t", " ", "-", ".", "e", "0", "9", "é",
        "\u{1b}", "\u{feff}", "dense", "input", "train:", "model", "'", "[[[[", "))))", "1e999", "-0", "x=",
    ];
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    for _ in 0..3000 {
        let mut source: Vec<char> = USERS_SPEC.chars().collect();
        for _ in 0..1 + rng.below(4) {
            let at = rng.below(source.len() + 1);
            match rng.below(3) {
                0 => {
                    let end = (at + rng.below(20)).min(source.len());
                    source.drain(at..end);
                }
                1 => {
                    let piece = PIECES[rng.below(PIECES.len())];
                    source.splice(at..at, piece.chars());
                }
                _ => {
                    let end = (at + 1 + rng.below(30)).min(source.len());
                    let copy: Vec<char> = source[at.min(end)..end].to_vec();
                    let to = rng.below(source.len() + 1);
                    source.splice(to..to, copy);
                }
            }
        }
        let source: String = source.into_iter().collect();
        check_never_panics(&source);
    }
}

#[test]
fn token_soup_never_panics() {
    const TOKENS: &[&str] = &[
        "dataset", "model", "train", "evaluate", "export", "D", "M", ":", "=", "(", ")", "[", "]", ",", "1", "0.5",
        "-3", "\"s\"", "true", "csv", "adamw", "lr", "input", "dense", "relu", "\n", "\n", "\n", "#", "\"",
    ];
    let mut rng = XorShift(42);
    for _ in 0..2000 {
        let n = rng.below(60);
        let source: Vec<&str> = (0..n).map(|_| TOKENS[rng.below(TOKENS.len())]).collect();
        check_never_panics(&source.join(" "));
    }
}

#[test]
fn hostile_inputs_never_panic() {
    check_never_panics(&format!("train:\nk = {}\n", "[".repeat(100_000)));
    check_never_panics(&format!("train:\nk = {}\n", "f(".repeat(100_000)));
    check_never_panics(&format!("train:\nepochs = {}\n", "9".repeat(10_000)));
    check_never_panics(&format!("model {}:\n", "x".repeat(100_000)));
    check_never_panics(&format!("train:\nmodel = {}\n", "y".repeat(100_000)));
    check_never_panics("\u{0}\u{1}\u{7f}\n:\n=\n\"\n");
}

/// Sizes past any device (2^40 values in a tensor or an output row) are
/// refused on the line that writes them, before any size computed from them
/// can overflow; the largest sizes that fit still read.
#[test]
fn sizes_past_any_device_are_refused_where_written() {
    let model = |layers: &str| MINIMAL.replace("input 4\ndense 1 linear\n", layers);
    let refused = |layers: &str, expected: &str, at: &str| {
        let source = model(layers);
        let Err(e) = parse_spec(&source) else { panic!("expected an error for:\n{source}") };
        let d = &e.diagnostics[0];
        assert!(d.message.contains(expected), "{:?} for:\n{source}", d.message);
        assert_eq!(&source[d.span.start..d.span.end], at, "{source}");
        assert!(d.help.as_deref().unwrap_or("").contains("2^40"), "{:?}", d.help);
    };
    // One number past 2^40: a layer's units, a conv's padding, the input.
    refused("input 4\ndense 9223372036854775807 relu\ndense 1 linear\n", "too large", "9223372036854775807");
    refused(
        "input 1x8x8\nconv2d 4 3 relu padding=4611686018427387904\nflatten\ndense 1 linear\n",
        "too large",
        "4611686018427387904",
    );
    refused("input 1099511627777\ndense 1 linear\n", "too large", "1099511627777");
    // Each number fits, their product does not: a weight, an output row, the input.
    refused(
        "input 4\ndense 1099511627776 relu\ndense 1 linear\n",
        "`dense` is too large: its weight [1099511627776, 4]",
        "dense 1099511627776 relu",
    );
    refused(
        "input 1x1024x1024\nconv2d 2097152 1 relu\nflatten\ndense 1 linear\n",
        "its output, 2097152x1024x1024 a row",
        "conv2d 2097152 1 relu",
    );
    refused(
        "input 1048576x1048576x2\ndense 1 linear\n",
        "an input of 1048576x1048576x2 values a row",
        "1048576x1048576x2",
    );
    refused(
        "input 1x1024x1024\nresidual:\n  conv2d 2097152 1 relu\n  conv2d 1 1 relu\ndense 1 linear\n",
        "its layer 1 (`conv2d",
        "residual:\n  conv2d 2097152 1 relu\n  conv2d 1 1 relu",
    );
    // The largest that fit: 2^40 values in the input and in the weight.
    let spec = ok(&model("input 1099511627776\ndense 1 linear\n"));
    assert_eq!(spec.model.shape.size() as u64, crate::model::MOST_VALUES);
}

/// Below a `residual:` line, a no-break space (pasted from a web page)
/// indents as a space; tabs against spaces are refused on the line.
#[test]
fn residual_bodies_indented_with_no_break_spaces_read_as_spaces() {
    let with =
        |body: &str| MINIMAL.replace("dense 1 linear\n", &format!("  residual:\n{body}dense 4 relu\ndense 1 linear\n"));
    let spec = ok(&with("\u{a0}\u{a0}\u{a0}\u{a0}"));
    assert_eq!(spec.model.layers.len(), 2, "the block and the last layer");
    assert_eq!(spec.model.layers[0].value.children().len(), 1);
    let m = messages(&with("\t"));
    assert!(m.iter().any(|m| m.contains("indented with tabs and spaces otherwise")), "{m:?}");
}

/// `padding=same` is echoed as written (the check table showed its number),
/// while the number is what trains: a `padding=1` stays `padding=1`.
#[test]
fn padding_same_is_described_as_written() {
    let model = |conv: &str| MINIMAL.replace("input 4\n", &format!("input 1x8x8\n{conv}\nflatten\n"));
    let described = |conv: &str| {
        let spec = ok(&model(conv));
        let Layer::Conv(c) = &spec.model.layers[0].value else { panic!("{:?}", spec.model.layers[0].value) };
        (spec.model.layers[0].value.describe(), c.padding)
    };
    assert_eq!(described("conv2d 4 3 relu padding=same"), ("conv2d 4 3 relu padding=same".into(), 1));
    assert_eq!(described("conv2d 4 5 relu padding=same"), ("conv2d 4 5 relu padding=same".into(), 2));
    assert_eq!(described("conv2d 4 3 relu padding=1"), ("conv2d 4 3 relu padding=1".into(), 1));
    assert_eq!(described("conv2d 4 3 relu"), ("conv2d 4 3 relu".into(), 0));
    // One model however written: a checkpoint's fingerprint holds the number
    // (checkpoints written before `same` was echoed resume).
    let hash = |conv: &str| crate::train::resume::model_hash(&ok(&model(conv)).model);
    assert_eq!(hash("conv2d 4 3 relu padding=same"), hash("conv2d 4 3 relu padding=1"));
    let residual = |conv: &str| format!("residual:\n  {conv}\n  conv2d 1 3 relu padding=1");
    assert_eq!(hash(&residual("conv2d 4 3 relu padding=same")), hash(&residual("conv2d 4 3 relu padding=1")));
    assert_ne!(hash("conv2d 4 3 relu padding=same"), hash("conv2d 4 3 relu"));
}

/// A convolution missing an argument is told which: the one after the
/// numbers written (`conv2d 4 relu` lacks its kernel size, not its activation).
#[test]
fn a_convolutions_missing_argument_is_the_one_after_its_numbers() {
    for (line, says) in [
        ("conv2d 4 relu", "missing kernel size in `conv2d`"),
        ("conv2d relu", "missing output channels in `conv2d`"),
        ("conv2d 4 3", "missing activation in `conv2d`"),
        ("conv1d 8", "missing kernel size in `conv1d`"),
    ] {
        let input = if line.starts_with("conv1d") { "input 1x16" } else { "input 1x8x8" };
        let source = MINIMAL.replace("input 4\ndense 1 linear", &format!("{input}\n{line}\nflatten\ndense 1 linear"));
        let m = messages(&source);
        assert!(m.iter().any(|m| m == says), "{line}: {m:?}");
    }
}

/// A layer line ending in `:` is one mistake, said once: it opened a block
/// of its own, which took the model's later layers with it and was told
/// again as a model without them.
#[test]
fn a_layer_line_ending_in_a_colon_is_one_problem() {
    for (layers, line) in [
        ("input 4\ndense 8 relu:\ndense 1 linear", "dense 8 relu"),
        ("input 4:\ndense 1 linear", "input 4"),
        ("input 4\ndense 8 relu\nflatten:\ndense 1 linear", "flatten"),
    ] {
        let source = MINIMAL.replace("input 4\ndense 1 linear", layers);
        let e = parse_spec(&source).unwrap_err();
        let shown = render("t.kyn", &source, &e.diagnostics);
        assert_eq!(e.diagnostics.len(), 1, "{shown}");
        assert!(
            shown.contains("a layer line does not end with `:`") && shown.contains(&format!("write `{line}`")),
            "{shown}"
        );
    }
}

/// A value continued on the next line is one problem, said at the `[` or
/// `(` left open, and the next line is said to be its rest, with no
/// nonsense fix (`write \`rmse = ]\``) or unknown key.
#[test]
fn a_value_continued_on_the_next_line_is_said_as_such() {
    for (old, new) in [
        ("epochs = 3\n", "epochs = 3\nevaluate:\nmetrics = [mae,\n    rmse]\n"),
        ("epochs = 3\n", "epochs = 3\noptimizer = adamw(lr=0.01,\n    weight_decay=0.1)\n"),
    ] {
        let source = MINIMAL.replace(old, new);
        let e = parse_spec(&source).unwrap_err();
        let shown = render("t.kyn", &source, &e.diagnostics);
        assert_eq!(e.diagnostics.len(), 2, "{shown}");
        assert!(
            shown.contains("is never closed") && shown.contains("the rest of a value from a line above"),
            "{shown}"
        );
        assert!(!shown.contains("= ]") && !shown.contains("unknown key"), "{shown}");
    }
}

/// A closer too many on a line whose line above is whole is said at the
/// closer, not as the rest of a value from a line above (it was, with
/// "join this line to the one it continues", under a header too).
#[test]
fn a_closer_too_many_is_said_where_it_is() {
    for (old, new, at) in [
        ("epochs = 3\n", "epochs = 3\noptimizer = adamw(lr=0.01))\n", "optimizer = adamw(lr=0.01))"),
        ("epochs = 3\n", "epochs = 3\nevaluate:\nmetrics = [mae]]\n", "metrics = [mae]]"),
        ("epochs = 3\n", "epochs = 3\nevaluate:\n) = 3\n", ") = 3"),
    ] {
        let source = MINIMAL.replace(old, new);
        let e = parse_spec(&source).unwrap_err();
        let shown = render("t.kyn", &source, &e.diagnostics);
        assert_eq!(e.diagnostics.len(), 1, "{shown}");
        let d = &e.diagnostics[0];
        assert!(d.message.starts_with("unexpected `") && d.message.ends_with("`: it closes nothing"), "{shown}");
        assert!(!shown.contains("line above"), "{shown}");
        // At the closer that closes nothing: the last one on the line, or `)` first.
        let line_start = source.find(at).unwrap();
        let closer = if at.starts_with(')') { line_start } else { line_start + at.len() - 1 };
        assert_eq!(d.span.start, closer, "{shown}");
    }
}

/// Which batchnorm needs two rows a step: one over plain features or over a
/// map of one position, inside a `residual:` block too; one after a
/// convolution averages over the channel's positions and needs no more
/// than one row.
#[test]
fn batchnorm_needs_rows_only_where_it_sees_one_value_a_channel() {
    let model = |layers: &str| ok(&MINIMAL.replace("input 4\ndense 1 linear\n", layers)).model;
    let plain = model("input 4\ndense 8 relu\nbatchnorm\ndense 1 linear\n");
    let (span, flat) = plain.batchnorm_needing_rows().expect("plain features need rows");
    assert!(flat);
    assert_eq!(span, plain.layers[1].span);
    assert_eq!(
        model("input 1x8x8\nconv2d 4 3 relu\nbatchnorm\nflatten\ndense 1 linear\n").batchnorm_needing_rows(),
        None
    );
    assert_eq!(
        model("input 2x16\nconv1d 4 3 relu\nbatchnorm\nflatten\ndense 1 linear\n").batchnorm_needing_rows(),
        None
    );
    let one_position = model("input 1x3x3\nconv2d 4 3 relu\nbatchnorm\nflatten\ndense 1 linear\n");
    assert_eq!(one_position.batchnorm_needing_rows().map(|(_, flat)| flat), Some(false), "a 1x1 map");
    let nested = model("input 4\ndense 8 relu\nresidual:\n  dense 8 relu\n  batchnorm\ndense 1 linear\n");
    assert_eq!(nested.batchnorm_needing_rows(), Some((nested.layers[1].span, true)));
    assert_eq!(model("input 4\ndense 8 relu\nlayernorm\ndense 1 linear\n").batchnorm_needing_rows(), None);
}

/// `dense gelu 16` is one mistake, said once with the line to write; a
/// dropout of `30` is read as the percentage it likely is.
#[test]
fn swapped_dense_arguments_and_a_percentage_dropout_say_what_to_write() {
    let diagnostics = |layers: &str| match parse_spec(&MINIMAL.replace("input 4\ndense 1 linear\n", layers)) {
        Ok(_) => panic!("expected errors for {layers}"),
        Err(e) => e.diagnostics,
    };
    let d = diagnostics("input 4\ndense gelu 16\ndense 1 linear\n");
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0].message, "the units of `dense` come before its activation");
    assert_eq!(d[0].help.as_deref(), Some("write `dense 16 gelu`"));
    // A text model's `input seq 32` written `input 32`: said at the first
    // layer over positions, with the `seq` it lacks.
    let d = diagnostics("input 32\nembedding 16\nglobal_avgpool\ndense 1 linear\n");
    assert_eq!(d[0].message, "`global_avgpool` cannot take 32 features", "{d:?}");
    assert!(
        d[0].help.as_deref().unwrap().ends_with(
            "; if the input is a text, its tokens are read with `input seq 32` (`input 32` reads 32 plain features)"
        ),
        "{d:?}"
    );
    // Without an embedding, no text is in sight: no such hint.
    let d = diagnostics("input 32\nglobal_avgpool\ndense 1 linear\n");
    assert!(!d[0].help.as_deref().unwrap().contains("input seq"), "{d:?}");
    // Written as a setting: the line to write is a whole layer, its activation too.
    let d = diagnostics("input 4\ndense = 16\ndense 1 linear\n");
    assert_eq!(
        d[0].help.as_deref(),
        Some("write `dense 16 ACTIVATION`: `dense 16 relu`, or `dense 16 linear` for the outputs")
    );
    let d = diagnostics("input 4\ndense = relu\ndense 1 linear\n");
    assert!(!d[0].help.as_deref().unwrap_or("").contains("relu ACTIVATION"), "{d:?}");
    let d = diagnostics("input 4\ndense = 16 relu\ndense 1 linear\n");
    assert_eq!(d[0].help.as_deref(), Some("write `dense 16 relu`"));
    let d = diagnostics("input 4\ndropout 30\ndense 1 linear\n");
    assert_eq!(d[0].help.as_deref(), Some("a percentage? a probability is a fraction of 1: write `0.3`"));
    let d = diagnostics("input 4\ndropout 1\ndense 1 linear\n");
    assert_eq!(d[0].help, None, "1 is a probability of 1, not 1%");
    let d = diagnostics("input 4\ndropout 250\ndense 1 linear\n");
    assert_eq!(d[0].help, None);
}
