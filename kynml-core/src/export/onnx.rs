//! ONNX export: [`to_onnx`] writes an [`ExportModel`] as an ONNX `ModelProto` (IR version 8,
//! default-domain opset [`OPSET`]), with a small hand-written protobuf encoder (no protobuf
//! crate).
//!
//! The graph takes one input, `features`: float `[batch, input]` RAW feature rows (the
//! normalizer is inside the graph, as `Sub` and `Div` by constant initializers). Layers map to:
//!
//! - dense: `Gemm` (transB = 1, the weight kept in PyTorch's `[out, in]` layout), then its
//!   activation: `Relu`, `Tanh`, `Sigmoid`, `LeakyRelu(alpha)`; GELU (not in opset 17) as
//!   `0.5 * x * (1 + Erf(x / sqrt(2)))`; SiLU as `x * Sigmoid(x)`;
//! - batchnorm: `BatchNormalization` (inference, epsilon 1e-5);
//! - layernorm: `LayerNormalization` (axis -1, epsilon 1e-5);
//! - conv1d/conv2d: `Conv` (kernel_shape, strides, pads), then the activation;
//! - maxpool/avgpool/global_avgpool: `MaxPool`, `AveragePool`, `GlobalAveragePool`;
//! - flatten and dropout: nothing.
//!
//! Values are `[batch, features]` between layers; a layer over a shaped input
//! (`[C, H, W]`) is `Reshape` to `[batch, C, H, W]`, its nodes, then
//! `Flatten` (axis 1). Each layer's nodes are written by its own file in
//! [`crate::model`].
//!
//! Outputs: regression gives `prediction` `[batch, out]`; a softmax head gives `logits`
//! `[batch, classes]` and `probabilities` (`Softmax`, axis -1); a sigmoid head gives `logits`
//! `[batch, 1]` and `probabilities` `[batch, 2]` = `Concat(Sigmoid(-logits), Sigmoid(logits))`,
//! so that column i is `class_names[i]`. The model's `metadata_props` hold `feature_names`,
//! `class_names` (JSON arrays; the latter only for classification), `target` and `head`, and
//! for models that read text the vocabularies as the sidecar holds them (`categories`: a list of
//! `{column, position, values}`, index `i + 1` standing for `values[i]`, 0 for a value training
//! never saw; `tokens`: `{column, length, tokens}`, id `i + 2` for `tokens[i]`, 1 unseen, 0
//! padding), and a sequence model's `sequence` columns.
//!
//! Tensor and node names follow the layer index in the model: `dense0.weight`, `dense0.bias`,
//! `batchnorm1.scale`, `layernorm2.bias`, `conv2d3.weight`, `normalizer.mean`, ... All initializers are stored
//! as little-endian float `raw_data`.

use super::graph::{Activation, ExportModel, Head};
use crate::model::Shape;

/// The default-domain (`ai.onnx`) opset the graph is written for.
pub const OPSET: i64 = 17;
/// The ONNX IR version written (IR 8 is the one of ONNX 1.12, which introduced opset 17).
pub const IR_VERSION: i64 = 8;
/// Name of the graph's input.
pub const INPUT_NAME: &str = "features";
/// Name of the symbolic batch dimension of the input and outputs.
pub const BATCH_DIM: &str = "batch";

/// A protobuf message must stay under 2 GiB; the initializers are kept under this much so that
/// the nodes, names and framing fit in what is left.
const MAX_INITIALIZER_BYTES: usize = (1 << 31) - (64 << 20);

/// `TensorProto.DataType.FLOAT`.
const FLOAT: i64 = 1;
/// `TensorProto.DataType.INT64`.
const INT64: i64 = 7;
/// `AttributeProto.AttributeType` values.
const ATTR_FLOAT: i64 = 1;
const ATTR_INT: i64 = 2;
const ATTR_INTS: i64 = 7;

/// Encodes `model` as an ONNX file's bytes. Fails if the model does not
/// [`validate`](ExportModel::validate), or if its weights do not fit in one protobuf message
/// (about 2 GiB; external data is not supported).
pub fn to_onnx(model: &ExportModel) -> Result<Vec<u8>, String> {
    model.validate()?;
    let floats = model.parameter_count() + model.normalizer.as_ref().map_or(0, |(m, s)| m.len() + s.len());
    if floats.saturating_mul(4) > MAX_INITIALIZER_BYTES {
        return Err(format!(
            "the model's {floats} weights need more than 2 GiB, too many for one ONNX file (external data is not supported)"
        ));
    }
    let graph = build_graph(model);
    Ok(encode_model(model, graph))
}

/// A node attribute.
pub(crate) enum Attr {
    /// An int64 attribute.
    Int(&'static str, i64),
    /// A float attribute.
    Float(&'static str, f32),
    /// A list of int64 (`kernel_shape`, `pads`).
    Ints(&'static str, Vec<i64>),
}

struct Node {
    name: String,
    op: &'static str,
    inputs: Vec<String>,
    output: String,
    attrs: Vec<Attr>,
}

struct Initializer {
    name: String,
    dims: Vec<usize>,
    data: Values,
}

/// An initializer's values.
enum Values {
    F32(Vec<f32>),
    I64(Vec<i64>),
}

impl Values {
    /// The size of the values in bytes.
    fn bytes(&self) -> usize {
        match self {
            Values::F32(v) => 4 * v.len(),
            Values::I64(v) => 8 * v.len(),
        }
    }
}

/// The graph under construction: nodes in execution order, initializers, and the graph's outputs
/// with their widths.
#[derive(Default)]
pub(crate) struct Graph {
    /// `[batch, length]` float, 1 for a token and 0 for padding, where the
    /// model reads text.
    pub(crate) mask: Option<String>,
    nodes: Vec<Node>,
    initializers: Vec<Initializer>,
    outputs: Vec<(String, usize)>,
}

impl Graph {
    /// Adds a node named `name` whose single output tensor is also called `name`; returns it.
    pub(crate) fn node(&mut self, name: String, op: &'static str, inputs: &[&str], attrs: Vec<Attr>) -> String {
        let inputs = inputs.iter().map(|s| s.to_string()).collect();
        self.nodes.push(Node { name: name.clone(), op, inputs, output: name.clone(), attrs });
        name
    }

    /// Adds an initializer; returns its name.
    pub(crate) fn constant(&mut self, name: String, dims: Vec<usize>, data: Vec<f32>) -> String {
        self.initializers.push(Initializer { name: name.clone(), dims, data: Values::F32(data) });
        name
    }

    /// Adds an int64 initializer (`[]` dims for a scalar); returns its name.
    pub(crate) fn ints(&mut self, name: String, dims: Vec<usize>, data: Vec<i64>) -> String {
        self.initializers.push(Initializer { name: name.clone(), dims, data: Values::I64(data) });
        name
    }

    /// `x` (`[batch, shape.size()]`) as `[batch, ...shape]`; returns the new tensor's name.
    pub(crate) fn reshape(&mut self, p: &str, x: String, shape: &Shape) -> String {
        let mut dims = vec![-1i64];
        dims.extend(shape.dims().iter().map(|d| *d as i64));
        let name = format!("{p}.shape");
        self.initializers.push(Initializer { name: name.clone(), dims: vec![dims.len()], data: Values::I64(dims) });
        self.node(format!("{p}.reshaped"), "Reshape", &[&x, &name], Vec::new())
    }

    /// `x` back to `[batch, features]`.
    pub(crate) fn flatten(&mut self, p: &str, x: String) -> String {
        self.node(format!("{p}.flat"), "Flatten", &[&x], vec![Attr::Int("axis", 1)])
    }

    /// `x`'s values as int64 indices of a table of `size` rows, where a
    /// value that is not a whole number from 0 to `size - 1` (a NaN, a -1
    /// that encoders write for a missing value, a fraction) is index 0, as
    /// KynML reads it: `Gather` would wrap a negative index to the table's
    /// end and `Cast` drop a fraction.
    pub(crate) fn index(&mut self, p: &str, x: &str, size: usize) -> String {
        let zero = self.scalar("zero", 0.0);
        let size = self.constant(format!("{p}.size"), Vec::new(), vec![size as f32]);
        let from = self.node(format!("{p}.from_zero"), "GreaterOrEqual", &[x, &zero], Vec::new());
        let below = self.node(format!("{p}.below_size"), "Less", &[x, &size], Vec::new());
        let floor = self.node(format!("{p}.floor"), "Floor", &[x], Vec::new());
        let whole = self.node(format!("{p}.whole"), "Equal", &[&floor, x], Vec::new());
        let inside = self.node(format!("{p}.inside"), "And", &[&from, &below], Vec::new());
        let valid = self.node(format!("{p}.valid"), "And", &[&inside, &whole], Vec::new());
        let value = self.node(format!("{p}.or_zero"), "Where", &[&valid, x, &zero], Vec::new());
        self.node(format!("{p}.index"), "Cast", &[&value], vec![Attr::Int("to", 7)])
    }

    /// A scalar constant shared by every node that needs it, added on first use.
    pub(crate) fn scalar(&mut self, name: &str, value: f32) -> String {
        if !self.initializers.iter().any(|i| i.name == name) {
            self.constant(name.to_string(), Vec::new(), vec![value]);
        }
        name.to_string()
    }

    /// Makes tensor `current` available as graph output `name`: the node that produced it is
    /// renamed, or an `Identity` is added when `current` is the graph input.
    fn output(&mut self, current: String, name: &str, width: usize) {
        match self.nodes.last_mut() {
            Some(last) if last.output == current => last.output = name.to_string(),
            _ => {
                self.node(name.to_string(), "Identity", &[&current], Vec::new());
            }
        }
        self.outputs.push((name.to_string(), width));
    }
}

fn build_graph(model: &ExportModel) -> Graph {
    let mut g = Graph::default();
    let mut x = INPUT_NAME.to_string();
    if model.shape.is_tokens() {
        // Token id 0 is padding: mask = float(features != 0).
        let zero = g.scalar("zero", 0.0);
        let pad = g.node("mask.padding".to_string(), "Equal", &[&x, &zero], Vec::new());
        let keep = g.node("mask.tokens".to_string(), "Not", &[&pad], Vec::new());
        g.mask = Some(g.node("mask".to_string(), "Cast", &[&keep], vec![Attr::Int("to", 1)]));
    }
    if let Some((mean, std)) = &model.normalizer {
        let m = g.constant("normalizer.mean".to_string(), vec![model.input], mean.clone());
        let s = g.constant("normalizer.std".to_string(), vec![model.input], std.clone());
        let centered = g.node("normalizer.centered".to_string(), "Sub", &[&x, &m], Vec::new());
        x = g.node("normalizer.scaled".to_string(), "Div", &[&centered, &s], Vec::new());
    }
    if let Some(s) = &model.sequence {
        // A sequence's padding is NaN: a position is present where its
        // first value is a number, and padding reads as 0.
        let (l, c) = (s.length as i64, s.channels() as i64);
        let shape = g.ints("mask.positions_shape".to_string(), vec![3], vec![-1, l, c]);
        let positions = g.node("mask.positions".to_string(), "Reshape", &[&x, &shape], Vec::new());
        let first = g.ints("mask.first".to_string(), vec![], vec![0]);
        let firsts = g.node("mask.firsts".to_string(), "Gather", &[&positions, &first], vec![Attr::Int("axis", 2)]);
        let absent = g.node("mask.absent".to_string(), "IsNaN", &[&firsts], Vec::new());
        let present = g.node("mask.present".to_string(), "Not", &[&absent], Vec::new());
        g.mask = Some(g.node("mask".to_string(), "Cast", &[&present], vec![Attr::Int("to", 1)]));
        let zero = g.scalar("zero", 0.0);
        let padding = g.node("sequence.padding".to_string(), "IsNaN", &[&x], Vec::new());
        x = g.node("sequence.read".to_string(), "Where", &[&padding, &zero, &x], Vec::new());
    }
    let shapes = model.shapes().unwrap_or_default();
    for (i, (layer, shape)) in model.layers.iter().zip(&shapes).enumerate() {
        let p = format!("{}{i}", layer.kind());
        x = layer.spec.onnx(&mut g, &p, shape, layer.view(), x);
    }
    let width = model.output();
    match &model.head {
        Head::Regression => g.output(x, "prediction", width),
        Head::Softmax { class_names } => {
            g.output(x, "logits", width);
            g.node("softmax".to_string(), "Softmax", &["logits"], vec![Attr::Int("axis", -1)]);
            g.output("softmax".to_string(), "probabilities", class_names.len());
        }
        Head::Sigmoid { class_names } => {
            g.output(x, "logits", width);
            let positive = g.node("probability.positive".to_string(), "Sigmoid", &["logits"], Vec::new());
            let negated = g.node("logits.negated".to_string(), "Neg", &["logits"], Vec::new());
            let negative = g.node("probability.negative".to_string(), "Sigmoid", &[&negated], Vec::new());
            let attrs = vec![Attr::Int("axis", 1)];
            let both = g.node("probabilities.concat".to_string(), "Concat", &[&negative, &positive], attrs);
            g.output(both, "probabilities", class_names.len());
        }
    }
    g
}

/// Adds the nodes of `activation` after tensor `x` of layer `p`; returns the result.
pub(crate) fn activate(g: &mut Graph, p: &str, x: String, activation: Activation) -> String {
    match activation {
        Activation::Linear => x,
        Activation::Relu => g.node(format!("{p}.relu"), "Relu", &[&x], Vec::new()),
        Activation::Tanh => g.node(format!("{p}.tanh"), "Tanh", &[&x], Vec::new()),
        Activation::Sigmoid => g.node(format!("{p}.sigmoid"), "Sigmoid", &[&x], Vec::new()),
        Activation::LeakyRelu(slope) => {
            let attrs = vec![Attr::Float("alpha", slope as f32)];
            g.node(format!("{p}.leaky_relu"), "LeakyRelu", &[&x], attrs)
        }
        Activation::Silu => {
            let s = g.node(format!("{p}.silu.sigmoid"), "Sigmoid", &[&x], Vec::new());
            g.node(format!("{p}.silu"), "Mul", &[&x, &s], Vec::new())
        }
        Activation::Gelu => {
            let sqrt2 = g.scalar("const.sqrt2", std::f32::consts::SQRT_2);
            let one = g.scalar("const.one", 1.0);
            let half = g.scalar("const.half", 0.5);
            let scaled = g.node(format!("{p}.gelu.scaled"), "Div", &[&x, &sqrt2], Vec::new());
            let erf = g.node(format!("{p}.gelu.erf"), "Erf", &[&scaled], Vec::new());
            let shifted = g.node(format!("{p}.gelu.erf_plus_one"), "Add", &[&erf, &one], Vec::new());
            let times_x = g.node(format!("{p}.gelu.times_x"), "Mul", &[&x, &shifted], Vec::new());
            g.node(format!("{p}.gelu"), "Mul", &[&times_x, &half], Vec::new())
        }
    }
}

/// How a row's text becomes the graph's input, in words, for a model that
/// reads categories or tokens: the graph itself cannot refuse an index it
/// was not meant to get (a category reads as unseen, a token as padding's
/// row of zeros).
fn encoding(model: &ExportModel) -> Option<String> {
    if model.tokens.is_some() {
        return Some(
            "each input is a token id: 2 + the token's place in `tokens`, 1 for a token not in it, 0 for \
             padding; a text's first `length` tokens, padded with 0 after them; any other number (past the \
             vocabulary, negative, fractional, NaN) reads as the padding row's zeros, at a position still \
             counted as a token"
                .into(),
        );
    }
    if model.sequence.is_some() {
        return Some(
            "each row is `length` positions of one value from each of the `sequence` columns, position by \
             position (`x[p * C + c]` for C columns); a sequence shorter than `length` is padded with NaN: a \
             position whose first value is NaN is padding, left out of attention and pooling (a 0 there is a \
             real point, not padding); a row of padding only gives the last layers' bias"
                .into(),
        );
    }
    (!model.categories.is_empty()).then(|| {
        "a categorical column's input (at its `position`) is 1 + the place in its `values` of the cell, \
         trimmed of white space at both ends; 0 for a value training never saw; any other number (past the \
         values, negative, fractional, NaN) reads as 0; the other columns are raw numbers"
            .into()
    })
}

/// The model's file. The graph's initializers are taken one at a time and
/// freed once encoded, and each message is laid out in room made for it at
/// once, so that the weights are held about three times at the most (the
/// export's, the graph message's, the file's), not five.
fn encode_model(model: &ExportModel, mut g: Graph) -> Vec<u8> {
    let weights: usize = g.initializers.iter().map(|i| i.data.bytes() + i.name.len() + 64).sum();
    let mut graph = Proto(Vec::with_capacity(weights + (1 << 16)));
    for node in &g.nodes {
        graph.message(1, &encode_node(node));
    }
    graph.string(2, &model.name);
    for init in std::mem::take(&mut g.initializers) {
        graph.message(5, &encode_initializer(&init));
    }
    let rows = if model.tokens.is_some() {
        "token ids (metadata `encoding`)"
    } else if model.sequence.is_some() {
        "sequences of feature rows, NaN past a sequence's end (metadata `encoding`)"
    } else if model.categories.is_empty() {
        "raw feature rows"
    } else {
        "feature rows, categories as indices (metadata `encoding`)"
    };
    graph.string(
        10,
        &format!(
            "{}: {rows} [{BATCH_DIM}, {}] in, {} head out (layers: {})",
            model.name,
            model.input,
            model.head.kind(),
            model.layers.iter().map(|l| l.kind()).collect::<Vec<_>>().join(", ")
        ),
    );
    graph.message(11, &encode_value_info(INPUT_NAME, model.input));
    for (name, width) in &g.outputs {
        graph.message(12, &encode_value_info(name, *width));
    }

    let mut opset = Proto::default();
    opset.string(1, "");
    opset.int(2, OPSET);

    let mut out = Proto(Vec::with_capacity(graph.0.len() + (1 << 16)));
    out.int(1, IR_VERSION);
    out.string(2, "kynml");
    out.string(3, env!("CARGO_PKG_VERSION"));
    out.string(6, &format!("{} trained with KynML; target '{}'", model.name, model.target));
    out.message(7, &graph);
    out.message(8, &opset);
    let strings = |names: &[String]| serde_json::Value::from(names.to_vec()).to_string();
    let mut metadata = vec![("feature_names", strings(&model.feature_names))];
    if !matches!(model.head, Head::Regression) {
        metadata.push(("class_names", strings(model.head.class_names())));
    }
    metadata.push(("target", model.target.clone()));
    metadata.push(("head", model.head.kind().to_string()));
    // What turns a row's text into the graph's inputs: without it, a runtime
    // holding only this file could not encode categories or tokens.
    let json = |v: serde_json::Result<String>| v.unwrap_or_default();
    if !model.categories.is_empty() {
        metadata.push(("categories", json(serde_json::to_string(&model.categories))));
    }
    if let Some(tokens) = &model.tokens {
        metadata.push(("tokens", json(serde_json::to_string(tokens))));
        metadata.push(("tokenizer", "split on Unicode white space (Rust's str::split_whitespace); case kept".into()));
    }
    if let Some(encoding) = encoding(model) {
        metadata.push(("encoding", encoding));
    }
    if let Some(sequence) = &model.sequence {
        metadata.push(("sequence", sequence_metadata(sequence)));
    }
    for (key, value) in metadata {
        let mut entry = Proto::default();
        entry.string(1, key);
        entry.string(2, &value);
        out.message(14, &entry);
    }
    out.0
}

/// A sequence model's input columns and positions, as the sidecar gives them
/// (what its training rows held, `cut` and `longest`, is the run's record).
fn sequence_metadata(sequence: &crate::data::SequenceColumns) -> String {
    serde_json::json!({"columns": sequence.columns, "length": sequence.length}).to_string()
}

fn encode_node(node: &Node) -> Proto {
    let mut p = Proto::default();
    for input in &node.inputs {
        p.string(1, input);
    }
    p.string(2, &node.output);
    p.string(3, &node.name);
    p.string(4, node.op);
    for attr in &node.attrs {
        let mut a = Proto::default();
        match *attr {
            Attr::Int(name, value) => {
                a.string(1, name);
                a.int(3, value);
                a.int(20, ATTR_INT);
            }
            Attr::Float(name, value) => {
                a.string(1, name);
                a.float(2, value);
                a.int(20, ATTR_FLOAT);
            }
            Attr::Ints(name, ref values) => {
                a.string(1, name);
                for v in values {
                    a.int(8, *v);
                }
                a.int(20, ATTR_INTS);
            }
        }
        p.message(5, &a);
    }
    p
}

fn encode_initializer(init: &Initializer) -> Proto {
    let mut p = Proto(Vec::with_capacity(init.data.bytes() + init.name.len() + 64));
    for dim in &init.dims {
        p.int(1, *dim as i64);
    }
    p.int(2, if matches!(init.data, Values::F32(_)) { FLOAT } else { INT64 });
    p.string(8, &init.name);
    // The raw bytes, laid out in place: no second copy of the values.
    p.key(9, LEN);
    put_varint(&mut p.0, init.data.bytes() as u64);
    match &init.data {
        Values::F32(v) => v.iter().for_each(|v| p.0.extend_from_slice(&v.to_le_bytes())),
        Values::I64(v) => v.iter().for_each(|v| p.0.extend_from_slice(&v.to_le_bytes())),
    }
    p
}

/// A float tensor `[batch, width]` value description.
fn encode_value_info(name: &str, width: usize) -> Proto {
    let mut batch = Proto::default();
    batch.string(2, BATCH_DIM);
    let mut features = Proto::default();
    features.int(1, width as i64);
    let mut shape = Proto::default();
    shape.message(1, &batch);
    shape.message(1, &features);
    let mut tensor = Proto::default();
    tensor.int(1, FLOAT);
    tensor.message(2, &shape);
    let mut ty = Proto::default();
    ty.message(1, &tensor);
    let mut info = Proto::default();
    info.string(1, name);
    info.message(2, &ty);
    info
}

use crate::protobuf::put_varint;

/// Wire types.
const VARINT: u8 = 0;
const LEN: u8 = 2;
const FIXED32: u8 = 5;

/// A protobuf message being written: fields are appended in call order.
#[derive(Default)]
struct Proto(Vec<u8>);

impl Proto {
    fn key(&mut self, field: u32, wire: u8) {
        put_varint(&mut self.0, (u64::from(field) << 3) | u64::from(wire));
    }

    /// An int32/int64/enum field; negative values take ten bytes (two's complement), as protobuf
    /// specifies for these types.
    fn int(&mut self, field: u32, value: i64) {
        self.key(field, VARINT);
        put_varint(&mut self.0, value as u64);
    }

    fn float(&mut self, field: u32, value: f32) {
        self.key(field, FIXED32);
        self.0.extend_from_slice(&value.to_le_bytes());
    }

    fn bytes(&mut self, field: u32, bytes: &[u8]) {
        self.key(field, LEN);
        put_varint(&mut self.0, bytes.len() as u64);
        self.0.extend_from_slice(bytes);
    }

    fn string(&mut self, field: u32, s: &str) {
        self.bytes(field, s.as_bytes());
    }

    fn message(&mut self, field: u32, message: &Proto) {
        self.bytes(field, &message.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::graph::{Activation, ExportLayer};
    use std::collections::HashSet;

    /// A minimal protobuf reader for the tests: (field, wire type, payload) triples, with
    /// varints and fixed32 values returned as their bytes decoded into u64.
    #[derive(Debug)]
    enum Value<'a> {
        Int(u64),
        Bytes(&'a [u8]),
    }

    fn read_varint(buf: &[u8], pos: &mut usize) -> u64 {
        let mut value = 0u64;
        let mut shift = 0;
        loop {
            let b = buf[*pos];
            *pos += 1;
            value |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return value;
            }
            shift += 7;
        }
    }

    fn fields(buf: &[u8]) -> Vec<(u32, Value<'_>)> {
        let mut pos = 0;
        let mut out = Vec::new();
        while pos < buf.len() {
            let key = read_varint(buf, &mut pos);
            let field = (key >> 3) as u32;
            let value = match (key & 7) as u8 {
                VARINT => Value::Int(read_varint(buf, &mut pos)),
                LEN => {
                    let len = read_varint(buf, &mut pos) as usize;
                    pos += len;
                    Value::Bytes(&buf[pos - len..pos])
                }
                FIXED32 => {
                    pos += 4;
                    Value::Int(u64::from(u32::from_le_bytes(buf[pos - 4..pos].try_into().unwrap())))
                }
                other => panic!("unexpected wire type {other}"),
            };
            out.push((field, value));
        }
        out
    }

    fn bytes_of<'a>(fields: &[(u32, Value<'a>)], field: u32) -> Vec<&'a [u8]> {
        fields
            .iter()
            .filter_map(|(f, v)| match v {
                Value::Bytes(b) if *f == field => Some(*b),
                _ => None,
            })
            .collect()
    }

    fn string_of(fields: &[(u32, Value<'_>)], field: u32) -> String {
        String::from_utf8(bytes_of(fields, field)[0].to_vec()).unwrap()
    }

    fn model(head: Head, layers: Vec<ExportLayer>, normalizer: bool) -> ExportModel {
        ExportModel {
            name: "Net".to_string(),
            input: 3,
            shape: crate::model::Shape::flat(3),
            feature_names: vec!["a".into(), "b".into(), "c".into()],
            target: "y".to_string(),
            normalizer: normalizer.then(|| (vec![0.0, 1.0, 2.0], vec![1.0, 2.0, 3.0])),
            categories: Vec::new(),
            tokens: None,
            sequence: None,
            layers,
            head,
        }
    }

    fn dense(input: usize, output: usize, activation: Activation) -> ExportLayer {
        ExportLayer::dense(
            input,
            output,
            (0..input * output).map(|i| i as f32 * 0.1).collect(),
            vec![0.5; output],
            activation,
        )
    }

    /// (op types, node names, output tensor names) of the encoded graph, and the initializer
    /// names.
    fn graph_summary(bytes: &[u8]) -> (Vec<String>, Vec<String>, Vec<String>, Vec<String>) {
        let top = fields(bytes);
        let graph = fields(bytes_of(&top, 7)[0]);
        let nodes: Vec<_> = bytes_of(&graph, 1).into_iter().map(fields).collect();
        let ops = nodes.iter().map(|n| string_of(n, 4)).collect();
        let names = nodes.iter().map(|n| string_of(n, 3)).collect();
        let outputs = nodes.iter().map(|n| string_of(n, 2)).collect();
        let inits = bytes_of(&graph, 5).into_iter().map(|t| string_of(&fields(t), 8)).collect();
        (ops, names, outputs, inits)
    }

    #[test]
    fn varints_encode_as_protobuf_specifies() {
        let enc = |v: u64| {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            out
        };
        assert_eq!(enc(0), [0x00]);
        assert_eq!(enc(1), [0x01]);
        assert_eq!(enc(127), [0x7f]);
        assert_eq!(enc(128), [0x80, 0x01]);
        assert_eq!(enc(300), [0xac, 0x02]);
        assert_eq!(enc(u64::MAX), [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]);

        let mut p = Proto::default();
        p.int(3, -1);
        assert_eq!(p.0, [0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]);
        let mut p = Proto::default();
        p.float(2, 1.0);
        assert_eq!(p.0, [0x15, 0x00, 0x00, 0x80, 0x3f]);
        let mut p = Proto::default();
        p.string(1, "ab");
        assert_eq!(p.0, [0x0a, 0x02, b'a', b'b']);
        let mut outer = Proto::default();
        outer.message(7, &p);
        assert_eq!(outer.0, [0x3a, 0x04, 0x0a, 0x02, b'a', b'b']);
    }

    #[test]
    fn sequence_metadata_is_the_models_not_its_training_datas() {
        // What the training rows held (rows cut, the longest) is the run's,
        // and a model exported from the run folder no longer has it: the
        // metadata is the same by either route, as in the sidecar.
        let mut read = crate::data::SequenceColumns::new(vec!["ax".into(), "ay".into()], 64);
        (read.cut, read.longest) = (318, 90);
        let expected = r#"{"columns":["ax","ay"],"length":64}"#;
        assert_eq!(sequence_metadata(&read), expected);
        assert_eq!(sequence_metadata(&crate::data::SequenceColumns::new(vec!["ax".into(), "ay".into()], 64)), expected);
    }

    #[test]
    fn header_fields_are_written() {
        let bytes = to_onnx(&model(Head::Regression, vec![dense(3, 1, Activation::Linear)], false)).unwrap();
        let top = fields(&bytes);
        assert!(matches!(top[0], (1, Value::Int(8))));
        assert_eq!(string_of(&top, 2), "kynml");
        let opset = fields(bytes_of(&top, 8)[0]);
        assert!(opset.iter().any(|f| matches!(f, (2, Value::Int(17)))));
        let metadata: Vec<(String, String)> = bytes_of(&top, 14)
            .into_iter()
            .map(|e| {
                let e = fields(e);
                (string_of(&e, 1), string_of(&e, 2))
            })
            .collect();
        assert!(metadata.contains(&("feature_names".to_string(), r#"["a","b","c"]"#.to_string())));
        assert!(metadata.contains(&("target".to_string(), "y".to_string())));
        assert!(!metadata.iter().any(|(k, _)| k == "class_names" || k == "categories"));

        // A categorical column's values travel with the graph.
        let mut with = model(Head::Regression, vec![dense(3, 1, Activation::Linear)], false);
        with.categories = vec![crate::data::Vocabulary::fit("b", 1, ["red", "blue"])];
        let bytes = to_onnx(&with).unwrap();
        let top = fields(&bytes);
        let categories: Vec<String> = bytes_of(&top, 14)
            .into_iter()
            .map(fields)
            .filter(|e| string_of(e, 1) == "categories")
            .map(|e| string_of(&e, 2))
            .collect();
        let back: Vec<crate::data::Vocabulary> = serde_json::from_str(&categories[0]).unwrap();
        assert_eq!(back, with.categories);
        // With how to turn a cell into its index (the graph reads a wrong one as unseen).
        let encoding = bytes_of(&top, 14).into_iter().map(fields).find(|e| string_of(e, 1) == "encoding");
        assert!(string_of(&encoding.expect("an encoding entry"), 2).starts_with("a categorical column's input"));
        let doc = string_of(&fields(bytes_of(&top, 7)[0]), 10);
        assert!(doc.contains("categories as indices"), "{doc}");
        assert!(!metadata.iter().any(|(k, _)| k == "encoding"), "a model of numbers has no encoding entry");
        // A sequence model says its padding is NaN (zeros read as points).
        let mut seq = model(Head::Regression, vec![dense(3, 1, Activation::Linear)], false);
        seq.sequence = Some(crate::data::SequenceColumns::new(vec!["a".into()], 3));
        let said = super::encoding(&seq).expect("an encoding entry");
        assert!(said.contains("padded with NaN") && said.contains("a 0 there is a real point"), "{said}");
    }

    #[test]
    fn graph_has_the_expected_nodes() {
        let layers = vec![
            dense(3, 4, Activation::Gelu),
            ExportLayer::batchnorm(vec![1.0; 4], vec![0.0; 4], vec![0.0; 4], vec![1.0; 4], 3),
            ExportLayer::dropout(0.2),
            dense(4, 4, Activation::Silu),
            ExportLayer::layernorm(vec![1.0; 4], vec![0.0; 4]),
            dense(4, 1, Activation::LeakyRelu(0.01)),
        ];
        let classes = vec!["no".to_string(), "yes".to_string()];
        let bytes = to_onnx(&model(Head::Sigmoid { class_names: classes }, layers, true)).unwrap();
        let (ops, names, outputs, inits) = graph_summary(&bytes);
        let expected = [
            "Sub",
            "Div",
            "Gemm",
            "Div",
            "Erf",
            "Add",
            "Mul",
            "Mul",
            "BatchNormalization",
            "Gemm",
            "Sigmoid",
            "Mul",
            "LayerNormalization",
            "Gemm",
            "LeakyRelu",
            "Sigmoid",
            "Neg",
            "Sigmoid",
            "Concat",
        ];
        assert_eq!(ops, expected);
        assert_eq!(outputs[14], "logits");
        assert_eq!(outputs[18], "probabilities");
        assert!(inits.contains(&"dense0.weight".to_string()));
        assert!(inits.contains(&"batchnorm1.running_var".to_string()));
        assert!(inits.contains(&"dense3.bias".to_string()));
        assert!(inits.contains(&"layernorm4.scale".to_string()));
        assert!(inits.contains(&"normalizer.std".to_string()));
        for list in [&names, &outputs, &inits] {
            assert_eq!(list.iter().collect::<HashSet<_>>().len(), list.len(), "duplicate in {list:?}");
        }
    }

    #[test]
    fn a_graph_without_nodes_gets_an_identity() {
        let bytes = to_onnx(&model(Head::Regression, vec![ExportLayer::dropout(0.1)], false)).unwrap();
        let (ops, _, outputs, _) = graph_summary(&bytes);
        assert_eq!(ops, ["Identity"]);
        assert_eq!(outputs, ["prediction"]);
    }

    #[test]
    fn an_invalid_model_is_refused() {
        let mut bad = model(Head::Regression, vec![dense(3, 2, Activation::Relu)], false);
        bad.feature_names.clear();
        assert!(to_onnx(&bad).is_err());
    }
}
