//! Validation of a `model NAME:` block: `input N` first, then layers.

use super::args::{self, bind};
use super::ast::{Block, LayerLine, Value};
use super::diagnostic::Diagnostic;
use super::suggest;
use super::types::{Activation, Layer, ModelSpec, Span, Spanned};
use super::values::{self, Range};

const LAYERS: &[&str] = &["input", "dense", "batchnorm", "layernorm", "dropout"];

const ACTIVATIONS: &[(&str, Activation)] = &[
    ("linear", Activation::Linear),
    ("relu", Activation::Relu),
    ("gelu", Activation::Gelu),
    ("tanh", Activation::Tanh),
    ("sigmoid", Activation::Sigmoid),
    ("silu", Activation::Silu),
    ("leaky_relu", Activation::LeakyRelu(LEAKY_RELU_SLOPE)),
];

/// PyTorch's default negative slope for `LeakyReLU`.
const LEAKY_RELU_SLOPE: f64 = 0.01;

pub(super) fn model(block: &Block, d: &mut Vec<Diagnostic>) -> Option<ModelSpec> {
    let lines = &block.layers;
    let name = block.name.as_ref().map_or_else(|| "this model".to_string(), |n| format!("model `{}`", n.value));
    let Some(first) = lines.first() else {
        if !block.damaged {
            d.push(
                Diagnostic::new(block.header, format!("{name} has no layers"), "empty model")
                    .with_help("start with `input N`, then at least one `dense N ACTIVATION` line"),
            );
        }
        return None;
    };

    let mut ok = true;
    // Whether a line could not be read or named an unknown layer: checks on
    // the model's shape would then only repeat that problem.
    let mut unsure = block.damaged;
    if first.name.value != "input" && LAYERS.contains(&first.name.value.as_str()) && !block.damaged {
        d.push(
            Diagnostic::new(first.span, format!("{name} must start with `input N`"), "expected `input N` before this")
                .with_help("declare the number of input features first, as in `input 128`"),
        );
        ok = false;
    }

    let mut input = None;
    let mut layers = Vec::new();
    for (index, line) in lines.iter().enumerate() {
        if line.damaged {
            ok = false;
            unsure = true;
            continue;
        }
        let layer = match line.name.value.as_str() {
            "input" if index == 0 => {
                input = width(line, d);
                continue;
            }
            "input" => {
                d.push(
                    Diagnostic::new(line.span, "`input` may only be the first line of a model", "second `input`")
                        .with_help("a model has one input; remove this line"),
                );
                None
            }
            "dense" => dense(line, d),
            "batchnorm" => no_args(line, Layer::BatchNorm, d),
            "layernorm" => no_args(line, Layer::LayerNorm, d),
            "dropout" => dropout(line, d),
            other => {
                unsure = true;
                let activation = ACTIVATIONS.iter().any(|(a, _)| *a == other);
                let help = suggest::help(other, LAYERS.iter().copied()).unwrap_or_else(|| {
                    if activation {
                        format!("activations go at the end of a dense line, as in `dense 64 {other}`")
                    } else {
                        format!("layers are {}", suggest::one_of(LAYERS))
                    }
                });
                d.push(
                    Diagnostic::new(line.name.span, format!("unknown layer `{other}`"), "unknown layer")
                        .with_help(help),
                );
                None
            }
        };
        match layer {
            Some(layer) => layers.push(Spanned { value: layer, span: line.span }),
            None => ok = false,
        }
    }

    if !unsure && !lines.iter().any(|l| l.name.value == "dense") {
        d.push(
            Diagnostic::new(block.header, format!("{name} has no `dense` layer"), "no `dense` layer")
                .with_help("add at least one line like `dense 1 linear`"),
        );
        ok = false;
    }
    if !ok {
        return None;
    }
    Some(ModelSpec { name: block.name.clone()?, input: input?, layers })
}

/// `input N`; the span is the whole line, which reads best in messages about
/// the data's width.
fn width(line: &LayerLine, d: &mut Vec<Diagnostic>) -> Option<Spanned<usize>> {
    let Some(n) = line.args.first() else {
        d.push(
            Diagnostic::new(line.span, "missing width in `input`", "expected the number of input features")
                .with_help("write `input N`, as in `input 128`"),
        );
        return None;
    };
    extra_args(line, 1, "input N", d)?;
    let value = values::count(n, "the width of `input`", 1, d)?;
    Some(Spanned { value, span: line.span })
}

/// `dense N ACTIVATION`.
fn dense(line: &LayerLine, d: &mut Vec<Diagnostic>) -> Option<Layer> {
    let (units, activation) = match line.args.as_slice() {
        [] => {
            d.push(
                Diagnostic::new(line.span, "missing units in `dense`", "expected a number of units")
                    .with_help("write `dense N ACTIVATION`, as in `dense 64 relu`"),
            );
            return None;
        }
        [units] => {
            let units = values::count(units, "the units of `dense`", 1, d)?;
            let names: Vec<&str> = ACTIVATIONS.iter().map(|(a, _)| *a).collect();
            d.push(
                Diagnostic::new(line.span, format!("missing activation in `dense {units}`"), "expected an activation")
                    .with_help(format!(
                        "write `dense {units} linear` for no activation, or use {}",
                        suggest::one_of(&names[1..])
                    )),
            );
            return None;
        }
        [units, activation, ..] => (units, activation),
    };
    let units = values::count(units, "the units of `dense`", 1, d);
    let activation = self::activation(activation, d);
    extra_args(line, 2, "dense N ACTIVATION", d)?;
    Some(Layer::Dense { units: units?, activation: activation? })
}

fn activation(v: &Value, d: &mut Vec<Diagnostic>) -> Option<Activation> {
    let names: Vec<&str> = ACTIVATIONS.iter().map(|(a, _)| *a).collect();
    let Some(callee) = args::callee(v) else {
        let help = format!("activations are {}", suggest::one_of(&names));
        values::mismatch_with_help(v, "an activation", "`dense`", &help, d);
        return None;
    };
    let Some(&(_, activation)) = ACTIVATIONS.iter().find(|(a, _)| *a == callee.name) else {
        values::unknown_word(v, callee.name, "activation", &names, d);
        return None;
    };
    if let Activation::LeakyRelu(default) = activation {
        let args = bind(callee, &["negative_slope"], d);
        let slope = args.float("negative_slope", default, Range::Any, d);
        args.ok()?;
        return Some(Activation::LeakyRelu(slope?));
    }
    bind(callee, &[], d).ok()?;
    Some(activation)
}

/// `dropout P`.
fn dropout(line: &LayerLine, d: &mut Vec<Diagnostic>) -> Option<Layer> {
    let Some(p) = line.args.first() else {
        d.push(
            Diagnostic::new(line.span, "missing probability in `dropout`", "expected a probability")
                .with_help("write `dropout P`, as in `dropout 0.2`"),
        );
        return None;
    };
    let p = values::float(p, "the probability of `dropout`", Range::Unit, d);
    extra_args(line, 1, "dropout P", d)?;
    Some(Layer::Dropout(p?))
}

fn no_args(line: &LayerLine, layer: Layer, d: &mut Vec<Diagnostic>) -> Option<Layer> {
    let name = line.name.value.as_str();
    extra_args(line, 0, name, d)?;
    Some(layer)
}

/// Reports arguments past the first `expected`; `form` is how the line
/// should read.
fn extra_args(line: &LayerLine, expected: usize, form: &str, d: &mut Vec<Diagnostic>) -> Option<()> {
    let (Some(first), Some(last)) = (line.args.get(expected), line.args.last()) else {
        return Some(());
    };
    let span = Span { start: first.span.start, end: last.span.end };
    d.push(
        Diagnostic::new(span, format!("too many arguments for `{}`", line.name.value), "unexpected")
            .with_help(format!("write `{form}`")),
    );
    None
}
