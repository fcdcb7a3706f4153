//! Validation of a `model NAME:` block: `input N` first, then layers, each
//! read by its kind in the catalogue ([`crate::model`]), then the shapes
//! checked from the input through every layer.
//!
//! The helpers at the end read the arguments every layer line shares: counts,
//! an activation, `key=value` options.

use super::args::{self, bind};
use super::ast::ValueKind;
use super::ast::{Block, LayerLine, Value};
use super::diagnostic::Diagnostic;
use super::suggest;
use super::types::{Activation, Layer, ModelSpec, Span, Spanned};
use super::values::{self, Range};
use crate::model::{self, Shape};

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
    // A line under an unknown header after the model that began with a
    // layer's name may have been one of its layers.
    let swallowed_layer = block.swallowed.iter().any(|w| w == "input" || model::layer_names().contains(&w.as_str()));
    let Some(first) = lines.first() else {
        if !block.damaged && !swallowed_layer {
            d.push(
                Diagnostic::new(block.header, format!("{name} has no layers"), "empty model")
                    .with_help("start with `input N`, then at least one `dense N ACTIVATION` line"),
            );
        }
        return None;
    };

    let names = model::layer_names();
    let mut ok = true;
    // Whether a line could not be read or named an unknown layer: checks on
    // the model's shape would then only repeat that problem.
    let mut unsure = block.damaged;
    if first.name.value != "input" && names.contains(&first.name.value.as_str()) && !block.damaged {
        d.push(
            Diagnostic::new(first.span, format!("{name} must start with `input N`"), "expected `input N` before this")
                .with_help("declare the number of input features first, as in `input 128`, or an image's shape, as in `input 1x28x28`"),
        );
        ok = false;
    }

    let mut input = None;
    let mut layers = Vec::new();
    // How many of `layers` came before the first line that could not be
    // read: they still chain from the input, and are checked.
    let mut readable: Option<usize> = None;
    // An open `residual:` block: its line, the layers indented below it so
    // far, and whether any line is (a line that could not be read, said
    // already, leaves the block without layers but not empty).
    let mut group: Option<(&LayerLine, Vec<Spanned<Layer>>, bool)> = None;
    for (index, line) in lines.iter().enumerate() {
        // A problem on an earlier line (some end their line with `continue`):
        // the layers so far are those above it.
        if !ok && readable.is_none() {
            readable = Some(layers.len());
        }
        if let Some((header, _, _)) = &group {
            // Python's rule: one indentation must begin with the other, or
            // which is further depends on a tab's width.
            // Any whitespace but a tab is one column (a no-break space pasted
            // from a web page is a space).
            let columns = |t: &str| t.chars().map(|c| if c == '\t' { '\t' } else { ' ' }).collect::<String>();
            let (h, l) = (columns(&header.indent_text), columns(&line.indent_text));
            let ambiguous = !h.starts_with(l.as_str()) && !l.starts_with(h.as_str());
            if ambiguous {
                d.push(
                    Diagnostic::new(
                        line.span,
                        "this line is indented with tabs and spaces otherwise than the `residual:` line above it, \
                         so whether it belongs to the block depends on a tab's width",
                        "ambiguous indentation",
                    )
                    .with_help("indent the block's lines and the `residual:` line with spaces only (or tabs only)"),
                );
                ok = false;
                unsure = true;
            }
            // An ambiguous line stays in the block: said once, above.
            if line.indent <= header.indent && !ambiguous {
                ok &= close_group(group.take(), &mut layers, d);
            }
        }
        if let Some((_, _, lines)) = &mut group {
            *lines = true;
        }
        if line.damaged {
            ok = false;
            unsure = true;
            continue;
        }
        if line.opens {
            if group.is_some() {
                d.push(Diagnostic::new(line.span, "a `residual:` block inside another", "nested block").with_help(
                    "blocks do not nest; indent this one as far as the block above it, after that block's layers",
                ));
                ok = false;
            } else {
                group = Some((line, Vec::new(), false));
            }
            continue;
        }
        if line.name.value == "input" {
            if index == 0 {
                input = input_shape(line, d);
            } else {
                d.push(
                    Diagnostic::new(line.span, "`input` may only be the first line of a model", "second `input`")
                        .with_help("a model has one input; remove this line"),
                );
                ok = false;
            }
            continue;
        }
        let layer = match model::parse_layer(line, d) {
            Some(layer) => layer,
            None => {
                let other = line.name.value.as_str();
                unsure = true;
                let activation = ACTIVATIONS.iter().any(|(a, _)| *a == other);
                // `Input 4`: the input line is no layer, but may be what was meant.
                let help = suggest::help(other, names.iter().copied().chain(["input"])).unwrap_or_else(|| {
                    if activation {
                        format!("activations go at the end of a dense line, as in `dense 64 {other}`")
                    } else {
                        format!("layers are {}", suggest::one_of(&names))
                    }
                });
                d.push(
                    Diagnostic::new(line.name.span, format!("unknown layer `{other}`"), "unknown layer")
                        .with_help(help),
                );
                None
            }
        };
        let into = match &mut group {
            Some((_, inner, _)) => inner,
            None => &mut layers,
        };
        match layer {
            Some(layer) => into.push(Spanned { value: layer, span: line.span }),
            None => ok = false,
        }
    }
    // A problem on the last line: as at the start of a line above.
    if !ok && readable.is_none() {
        readable = Some(layers.len());
    }
    ok &= close_group(group.take(), &mut layers, d);

    if !unsure && !block.swallowed("dense") && !lines.iter().any(|l| l.name.value == "dense") {
        d.push(
            Diagnostic::new(block.header, format!("{name} has no `dense` layer"), "no `dense` layer")
                .with_help("add at least one line like `dense 1 linear`"),
        );
        ok = false;
    }
    if !ok {
        // The layers above the first unreadable line chain from the input
        // as written: a shape problem among them is said in this run too,
        // not in the next one.
        if let (Some((_, shape)), Some(n @ 1..)) = (&input, readable) {
            chain(shape, &layers[..n], false, d);
        }
        return None;
    }
    let (input, shape) = input?;
    chain(&shape, &layers, true, d)?;
    Some(ModelSpec { name: block.name.clone()?, input, shape, layers })
}

/// Checks that `layers` chain from the input `shape`, reporting the first
/// problem on its layer's line; `whole` when they are all of the model's
/// layers (which must then end on plain values). `None` when reported.
fn chain(shape: &Shape, layers: &[Spanned<Layer>], whole: bool, d: &mut Vec<Diagnostic>) -> Option<()> {
    // A layer that reads the input's columns must be the first.
    for (i, layer) in layers.iter().enumerate() {
        let inside = layer.value.children().iter().find(|c| c.first_only());
        if let Some(what) = inside.or((i > 0 && layer.value.first_only()).then_some(&layer.value)) {
            // Inside a block, the block's sum would add the columns' numbers
            // to their embedding: it goes out of the block, above it.
            let help = if inside.is_some() {
                format!("move the `{}` line out of the `{}` block, under `input`", what.name(), layer.value.name())
            } else {
                format!("move the `{}` line up, under `input`", what.name())
            };
            d.push(
                Diagnostic::new(
                    layer.span,
                    format!("`{}` reads the input's columns, so it must come right after `input`", what.name()),
                    if inside.is_some() { "inside a block" } else { "not the first layer" },
                )
                .with_help(help),
            );
            return None;
        }
    }
    // Shapes chain from the input through every layer; the first layer that
    // cannot take what it is given is reported on its own line.
    let specs: Vec<Layer> = layers.iter().map(|l| l.value.clone()).collect();
    if let Some((i, problem)) = model::too_large(shape, &specs) {
        let layer = &layers[i];
        d.push(
            Diagnostic::new(layer.span, format!("`{}` is too large: {problem}", layer.value.name()), "too large")
                .with_help(model::most_values_help()),
        );
        return None;
    }
    let shapes = model::shapes(shape, &specs);
    // The outputs are plain values: a model may not end on positions or channels.
    if let (Ok(shapes), Some(layer), true) = (&shapes, layers.last(), whole) {
        if let Some(last) = shapes.last().filter(|s| s.rank() > 1) {
            let what =
                if last.is_sequence() { "for the mean over the positions" } else { "for the mean of each channel" };
            d.push(
                Diagnostic::new(
                    layer.span,
                    format!("the model ends on {}, not on one value per output", last.described()),
                    "the last layer",
                )
                .with_help(format!(
                    "the outputs must be plain features: add `global_avgpool` before the last layer {what}, or `flatten`"
                )),
            );
            return None;
        }
    }
    if let Err((i, problem)) = shapes {
        let layer = &layers[i];
        let given = if i == 0 { shape.clone() } else { model::shapes(shape, &specs[..i]).ok()?.pop()? };
        // `input 32`, `embedding 16`, then a layer over positions: a text
        // model whose input lost its `seq` (said first, where it starts).
        let text_meant = shape.rank() == 1
            && !shape.is_sequence()
            && given.rank() == 1
            && specs[..i].iter().any(|l| matches!(l, Layer::Embedding(_)));
        let problem = match text_meant {
            true => format!(
                "{problem}; if the input is a text, its tokens are read with `input seq {}` (`input {}` reads {} \
                 plain features)",
                shape.dims()[0],
                shape.dims()[0],
                shape.dims()[0]
            ),
            false => problem,
        };
        d.push(
            Diagnostic::new(
                layer.span,
                format!("`{}` cannot take {}", layer.value.name(), given.described()),
                "this layer",
            )
            .with_help(problem),
        );
        return None;
    }
    Some(())
}

/// Ends a `residual:` block: its layers become one layer of the model.
/// False when it has none (reported, unless its lines could not be read:
/// those were).
fn close_group(
    group: Option<(&LayerLine, Vec<Spanned<Layer>>, bool)>,
    layers: &mut Vec<Spanned<Layer>>,
    d: &mut Vec<Diagnostic>,
) -> bool {
    let Some((header, inner, lines)) = group else { return true };
    let Some(last) = inner.last() else {
        if lines {
            return false;
        }
        d.push(
            Diagnostic::new(header.span, format!("`{}` has no layers", header.name.value), "empty block")
                .with_help("indent the block's layers below it, further than this line"),
        );
        return false;
    };
    let span = Span { start: header.span.start, end: last.span.end };
    let spec = model::residual::ResidualSpec { layers: inner.into_iter().map(|l| l.value).collect() };
    layers.push(Spanned { value: Layer::Residual(spec), span });
    true
}

/// `input N`, `input CxHxW` / `input CxL`, `input seq L` (token ids) or
/// `input seq LxC` (C numbers at each of L positions); the span is the whole line,
/// which reads best in messages about the data's width.
fn input_shape(line: &LayerLine, d: &mut Vec<Diagnostic>) -> Option<(Spanned<usize>, Shape)> {
    let Some(n) = line.args.first() else {
        d.push(
            Diagnostic::new(line.span, "missing width in `input`", "expected the number of input features")
                .with_help("write `input N`, as in `input 128`, or an image's shape, as in `input 1x28x28`"),
        );
        return None;
    };
    if matches!(&n.kind, ValueKind::Ident(word) if word == "seq") {
        let Some(length) = line.args.get(1) else {
            d.push(
                Diagnostic::new(line.span, "missing length in `input seq`", "expected the tokens per text")
                    .with_help("write `input seq L`, as in `input seq 64`: texts are cut or padded to L tokens"),
            );
            return None;
        };
        if let ValueKind::Ident(text) = &length.kind {
            let dims: Vec<Option<usize>> =
                text.split('x').map(|p| p.parse::<usize>().ok().filter(|n| *n > 0)).collect();
            let &[Some(l), Some(c)] = dims.as_slice() else {
                d.push(
                    Diagnostic::new(length.span, format!("`{text}` is not a sequence's shape"), "not LxC")
                        .with_help("write `input seq LxC` for C numbers at each of L positions, as in `input seq 64x3`, or `input seq L` for a text's L tokens"),
                );
                return None;
            };
            extra_args(line, 2, "input seq LxC", d)?;
            input_size(length, &[l, c], d)?;
            return Some((Spanned { value: l * c, span: line.span }, Shape::sequence(l, c)));
        }
        let length = values::size(length, "the length of `input seq`", 1, d)?;
        extra_args(line, 2, "input seq L", d)?;
        return Some((Spanned { value: length, span: line.span }, Shape::tokens(length)));
    }
    extra_args(line, 1, "input N", d)?;
    let dims = match &n.kind {
        ValueKind::Ident(text) if is_dims(text) => {
            let dims: Option<Vec<usize>> =
                text.split('x').map(|p| p.parse::<usize>().ok().filter(|n| *n > 0)).collect();
            let Some(dims) = dims.filter(|d| d.len() <= 3) else {
                d.push(
                    Diagnostic::new(n.span, format!("`{text}` is not a shape KynML takes"), "not a shape")
                        .with_help("write `CxL` for channels of a sequence or `CxHxW` for an image, each at least 1, as in `1x28x28`"),
                );
                return None;
            };
            dims
        }
        _ => vec![values::size(n, "the width of `input`", 1, d)?],
    };
    input_size(n, &dims, d)?;
    let shape = Shape::new(dims);
    Some((Spanned { value: shape.size(), span: line.span }, shape))
}

/// Refuses an input of more than [`model::MOST_VALUES`] values a row, at `v`.
fn input_size(v: &Value, dims: &[usize], d: &mut Vec<Diagnostic>) -> Option<()> {
    if model::bounded_size(dims).is_some() {
        return Some(());
    }
    let written = dims.iter().map(usize::to_string).collect::<Vec<_>>().join("x");
    d.push(
        Diagnostic::new(v.span, format!("an input of {written} values a row is too large"), "too large")
            .with_help(model::most_values_help()),
    );
    None
}

/// `1x28x28`: whole numbers joined by `x`, as the lexer reads a shape.
fn is_dims(text: &str) -> bool {
    text.contains('x') && text.split('x').all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

/// An activation written after a layer's other arguments: `relu`, `leaky_relu(negative_slope=0.1)`.
pub(crate) fn activation_arg(v: &Value, d: &mut Vec<Diagnostic>) -> Option<Activation> {
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

/// Reports arguments past the first `expected`; `form` is how the line
/// should read.
pub(crate) fn extra_args(line: &LayerLine, expected: usize, form: &str, d: &mut Vec<Diagnostic>) -> Option<()> {
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

/// The activations' names, for help messages.
pub(crate) fn activation_names() -> Vec<&'static str> {
    ACTIVATIONS.iter().map(|(a, _)| *a).collect()
}

/// Reports a missing argument: `missing units in `dense``, with how to write the line.
pub(crate) fn missing(line: &LayerLine, what: &str, expected: &str, form: &str, d: &mut Vec<Diagnostic>) {
    d.push(
        Diagnostic::new(line.span, format!("missing {what} in `{}`", line.name.value), format!("expected {expected}"))
            .with_help(format!("write `{form}`")),
    );
}

/// A whole number of at least `min`; `what` names it in messages: "the channels of `conv2d`".
/// Sizes in a model are at most [`model::MOST_VALUES`].
pub(crate) fn count_arg(v: &Value, what: &str, min: usize, d: &mut Vec<Diagnostic>) -> Option<usize> {
    values::size(v, what, min, d)
}

/// A probability in `[0, 1)`.
pub(crate) fn probability_arg(v: &Value, what: &str, d: &mut Vec<Diagnostic>) -> Option<f64> {
    let before = d.len();
    let p = values::float(v, what, Range::Unit, d);
    // `dropout 30`: a percentage, as some tools write it.
    let percent = match &v.kind {
        ValueKind::Number(text) => text.parse::<u32>().ok().filter(|x| (2..100).contains(x)),
        _ => None,
    };
    if let (None, Some(x), true) = (p, percent, d.len() > before) {
        if let Some(last) = d.last_mut().filter(|l| l.help.is_none()) {
            last.help =
                Some(format!("a percentage? a probability is a fraction of 1: write `{}`", f64::from(x) / 100.0));
        }
    }
    p
}

/// The `key=value` options of a layer line, checked against the names a
/// kind takes.
pub(crate) struct Options<'a> {
    line: &'a LayerLine,
}

/// The options of `line`; an unknown or repeated name is reported (with a
/// did-you-mean) and gives `None`.
pub(crate) fn options<'a>(line: &'a LayerLine, allowed: &[&str], d: &mut Vec<Diagnostic>) -> Option<Options<'a>> {
    let mut ok = true;
    for (i, (name, _)) in line.options.iter().enumerate() {
        if !allowed.contains(&name.value.as_str()) {
            let help = suggest::help(&name.value, allowed.iter().copied()).unwrap_or_else(|| {
                if allowed.is_empty() {
                    format!("`{}` takes no options", line.name.value)
                } else {
                    format!("`{}` takes {}", line.name.value, suggest::one_of(allowed))
                }
            });
            d.push(
                Diagnostic::new(
                    name.span,
                    format!("unknown option `{}` for `{}`", name.value, line.name.value),
                    "unknown option",
                )
                .with_help(help),
            );
            ok = false;
        } else if line.options[..i].iter().any(|(n, _)| n.value == name.value) {
            d.push(
                Diagnostic::new(name.span, format!("`{}` is given twice", name.value), "repeated")
                    .with_help("keep one of them"),
            );
            ok = false;
        }
    }
    ok.then_some(Options { line })
}

impl Options<'_> {
    /// The value of option `name`, if written.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.line.options.iter().find(|(n, _)| n.value == name).map(|(_, v)| v)
    }

    /// Whether option `name` is written.
    pub fn has(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// A whole number of at least `min`, `default` when not written.
    pub fn count(&self, name: &str, default: usize, min: usize, d: &mut Vec<Diagnostic>) -> Option<usize> {
        match self.get(name) {
            None => Some(default),
            Some(v) => values::size(v, &format!("`{name}` of `{}`", self.line.name.value), min, d),
        }
    }

    /// A probability in `[0, 1)`, `default` when not written.
    pub fn probability(&self, name: &str, default: f64, d: &mut Vec<Diagnostic>) -> Option<f64> {
        match self.get(name) {
            None => Some(default),
            Some(v) => probability_arg(v, &format!("`{name}` of `{}`", self.line.name.value), d),
        }
    }

    /// Whether option `name` is written as the word `word` (`padding=same`).
    pub fn is_word(&self, name: &str, word: &str) -> bool {
        matches!(self.get(name).map(|v| &v.kind), Some(ValueKind::Ident(w)) if w == word)
    }

    /// The span of option `name`'s value, or of the whole line.
    pub fn span(&self, name: &str) -> Span {
        self.get(name).map_or(self.line.span, |v| v.span)
    }
}
