//! `residual:`: the layers indented below it, whose output is added to the
//! block's input (`y = x + f(x)`). Where the layers change the width (or the
//! channels), the input goes through a projection first: a linear layer on
//! plain features or on each position of a sequence, a 1x1 convolution on a
//! shaped input (as in ResNet).
//!
//! ```text
//! residual:
//!     dense 64 relu
//!     dense 64 linear
//! ```
//!
//! Tensors are named as PyTorch names those of a module holding
//! `block = nn.Sequential(...)` and `projection`: `3.block.0.weight`,
//! `3.projection.weight`.

use burn::module::{Module, ParamId};
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use burn::DispatchDevice;
use kynml_backend::Backend as Kb;
use serde_json::{json, Value as Json};

use super::conv::ConvSpec;
use super::dense::DenseSpec;
use super::kind::{Decl, Getter, Kind, LayerModule, Pass, Shape, Tensors};
use super::{Inner, LayerSpec, StateError};
use crate::export::onnx::Graph;
use crate::rng::SplitMix64;
use crate::spec::ast::LayerLine;
use crate::spec::diagnostic::Diagnostic;
use crate::spec::types::Activation;

/// A `residual:` block: its layers, in order.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ResidualSpec {
    /// The layers indented below `residual:`; at least one.
    pub layers: Vec<LayerSpec>,
}

/// The block's layers and, where they change the width, the projection of
/// its input.
#[derive(Module, Debug)]
pub struct Residual<B: Backend> {
    /// The layers, in order.
    pub block: Vec<Inner<B>>,
    /// Empty, or the one layer that projects the input to the block's output.
    pub projection: Vec<Inner<B>>,
}

impl ResidualSpec {
    /// The shape after the block's layers, from `input`.
    fn inner(&self, input: &Shape) -> Result<Vec<Shape>, String> {
        super::shapes(input, &self.layers)
            .map_err(|(i, e)| format!("its layer {} (`{}`): {e}", i + 1, self.layers[i].describe()))
    }

    /// The projection the input needs to be added to `output`, if any; an
    /// error when no projection can make the two match.
    fn projection(&self, input: &Shape, output: &Shape) -> Result<Option<LayerSpec>, String> {
        if input == output {
            return Ok(None);
        }
        let (i, o) = (input.dims(), output.dims());
        match (i, o) {
            ([_], [units]) => Ok(Some(LayerSpec::Dense(DenseSpec { units: *units, activation: Activation::Linear }))),
            // A sequence's positions, each through the same linear layer.
            ([l, _], [l2, units]) if input.is_sequence() && output.is_sequence() && l == l2 => {
                Ok(Some(LayerSpec::Dense(DenseSpec { units: *units, activation: Activation::Linear })))
            }
            ([_, l], [c, l2]) if !input.is_sequence() && l == l2 => Ok(Some(conv1x1(1, *c))),
            ([_, h, w], [c, h2, w2]) if h == h2 && w == w2 => Ok(Some(conv1x1(2, *c))),
            // A sequence keeps its positions through the block.
            _ if input.is_sequence() => Err(format!(
                "its layers turn {} into {}; a residual block adds its input to its output, and on a sequence \
                 it may change the width of each position (through a projection) but must keep the \
                 positions: pool them after the block",
                input.written(),
                output.written()
            )),
            _ => Err(format!(
                "its layers turn {} into {}; a residual block adds its input to its output, so it may change the \
                 width or the channels (through a projection) but not the shape",
                input.written(),
                output.written()
            )),
        }
    }

    /// Which inner layer (or the projection, told by the rank of its
    /// tensors: a dense weight has 2) a nested tensor name belongs to, and
    /// its own name.
    fn route<'n>(&self, name: &'n str, rank: usize) -> Option<(LayerSpec, &'n str)> {
        if let Some(rest) = name.strip_prefix("projection.") {
            let spec = if rank == 2 {
                LayerSpec::Dense(DenseSpec { units: 0, activation: Activation::Linear })
            } else {
                conv1x1(2, 0)
            };
            return Some((spec, rest));
        }
        let rest = name.strip_prefix("block.")?;
        let (j, field) = rest.split_once('.')?;
        Some((self.layers.get(j.parse::<usize>().ok()?)?.clone(), field))
    }
}

fn conv1x1(dims: usize, channels: usize) -> LayerSpec {
    LayerSpec::Conv(ConvSpec {
        dims,
        channels,
        kernel: 1,
        stride: 1,
        padding: 0,
        same: false,
        activation: Activation::Linear,
    })
}

impl Kind for ResidualSpec {
    const NAMES: &'static [&'static str] = &["residual"];
    const FORMS: &'static [&'static str] = &["residual:"];
    type Module = Residual<Kb>;

    /// A `residual` line without its `:` and indented layers.
    fn parse(line: &LayerLine, d: &mut Vec<Diagnostic>) -> Option<Self> {
        d.push(
            Diagnostic::new(line.span, "`residual` opens a block", "expected `residual:`")
                .with_help("write `residual:` on its own line, then the block's layers below it, indented further"),
        );
        None
    }

    fn describe(&self) -> String {
        "residual:".into()
    }

    fn children(&self) -> &[LayerSpec] {
        &self.layers
    }

    fn fingerprint(&self) -> String {
        let inner: Vec<String> = self.layers.iter().map(LayerSpec::fingerprint).collect();
        format!("residual({})", inner.join(", "))
    }

    fn output(&self, input: &Shape) -> Result<Shape, String> {
        let out = self.inner(input)?.pop().unwrap_or(input.clone());
        self.projection(input, &out)?;
        Ok(out)
    }

    /// Its layers', and its projection's where it has one.
    fn multiply_adds(&self, input: &Shape) -> u64 {
        let mut shape = input.clone();
        let mut total = 0;
        for layer in &self.layers {
            total += layer.multiply_adds(&shape);
            shape = layer.output(&shape).unwrap_or(shape.clone());
        }
        match self.projection(input, &shape) {
            Ok(Some(p)) => total + p.multiply_adds(input),
            _ => total,
        }
    }

    fn tensors(&self, input: &Shape) -> Vec<Decl> {
        let mut out = Vec::new();
        let mut shape = input.clone();
        for (j, layer) in self.layers.iter().enumerate() {
            out.extend(layer.tensors(&shape).into_iter().map(|d| Decl { name: format!("block.{j}.{}", d.name), ..d }));
            shape = layer.output(&shape).unwrap_or(shape.clone());
        }
        if let Ok(Some(p)) = self.projection(input, &shape) {
            out.extend(p.tensors(input).into_iter().map(|d| Decl { name: format!("projection.{}", d.name), ..d }));
        }
        out
    }

    /// Where the native engine has every layer of the block and its projection.
    fn native(&self, input: &Shape) -> Option<kynml_cpu::LayerConfig> {
        let mut shape = input.clone();
        let mut layers = Vec::with_capacity(self.layers.len());
        for layer in &self.layers {
            layers.push(layer.native(&shape)?);
            shape = layer.output(&shape).ok()?;
        }
        let projection = match self.projection(input, &shape).ok()? {
            Some(p) => Some(Box::new(p.native(input)?)),
            None => None,
        };
        Some(kynml_cpu::LayerConfig::Residual { layers, projection })
    }

    fn init(&self, input: &Shape, rng: &mut SplitMix64, device: &DispatchDevice) -> Residual<Kb> {
        let mut shape = input.clone();
        let mut block = Vec::with_capacity(self.layers.len());
        for layer in &self.layers {
            block.extend(layer.init_inner(&shape, rng, device));
            shape = layer.output(&shape).unwrap_or(shape.clone());
        }
        let projection = match self.projection(input, &shape) {
            Ok(Some(p)) => p.init_inner(input, rng, device).into_iter().collect(),
            _ => Vec::new(),
        };
        Residual { block, projection }
    }

    fn burn_to_torch(&self, name: &str, data: TensorData, torch_shape: &[usize]) -> Vec<f32> {
        match self.route(name, torch_shape.len()) {
            Some((spec, field)) => spec.burn_to_torch(field, data, torch_shape),
            None => super::kind::host(data),
        }
    }

    fn torch_to_burn(&self, name: &str, values: &[f32], burn_shape: &[usize]) -> TensorData {
        match self.route(name, burn_shape.len()) {
            Some((spec, field)) => spec.torch_to_burn(field, values, burn_shape),
            None => TensorData::new(values.to_vec(), burn_shape.to_vec()),
        }
    }

    fn check(&self, t: Tensors) -> Result<(), String> {
        for (j, layer) in self.layers.iter().enumerate() {
            layer.check(t.with(&t.under(&format!("block.{j}."))))?;
        }
        Ok(())
    }

    fn reference(&self, input: &Shape, t: Tensors, x: &[f32]) -> Vec<f32> {
        let mut y = x.to_vec();
        let mut shape = input.clone();
        for (j, layer) in self.layers.iter().enumerate() {
            y = layer.reference(&shape, t.with(&t.under(&format!("block.{j}."))), &y);
            shape = layer.output(&shape).unwrap_or(shape.clone());
        }
        let skip = match self.projection(input, &shape) {
            Ok(Some(p)) => p.reference(input, t.with(&t.under("projection.")), x),
            _ => x.to_vec(),
        };
        y.iter().zip(&skip).map(|(a, b)| (f64::from(*a) + f64::from(*b)) as f32).collect()
    }

    /// The layers' nodes, the projection's, then `Add`.
    fn onnx(&self, g: &mut Graph, p: &str, input: &Shape, t: Tensors, x: String) -> String {
        let mut y = x.clone();
        let mut shape = input.clone();
        for (j, layer) in self.layers.iter().enumerate() {
            let tensors = t.under(&format!("block.{j}."));
            y = layer.onnx(g, &format!("{p}.block{j}.{}", layer.name()), &shape, t.with(&tensors), y);
            shape = layer.output(&shape).unwrap_or(shape.clone());
        }
        let skip = match self.projection(input, &shape) {
            Ok(Some(proj)) => {
                let tensors = t.under("projection.");
                proj.onnx(g, &format!("{p}.projection"), input, t.with(&tensors), x)
            }
            _ => x,
        };
        g.node(format!("{p}.add"), "Add", &[&y, &skip], Vec::new())
    }

    fn torch(&self, input: &Shape) -> Json {
        let mut shape = input.clone();
        let mut layers = Vec::with_capacity(self.layers.len());
        for (j, layer) in self.layers.iter().enumerate() {
            layers.push(entry(j, layer, &shape));
            shape = layer.output(&shape).unwrap_or(shape.clone());
        }
        let projection = match self.projection(input, &shape) {
            Ok(Some(p)) => entry(0, &p, input),
            _ => Json::Null,
        };
        json!({
            "module": "x + block(x), or projection(x) + block(x) where the width changes",
            "layers": layers,
            "projection": projection,
        })
    }

    fn from_json(_kind: &str, v: &Json) -> Result<Self, String> {
        let list = v.get("layers").and_then(Json::as_array).ok_or("residual without `layers`")?;
        let layers = list
            .iter()
            .map(|l| LayerSpec::from_json(l.get("kind").and_then(Json::as_str).unwrap_or_default(), l))
            .collect::<Result<Vec<_>, _>>()?;
        if layers.is_empty() {
            return Err("residual with no layers".into());
        }
        Ok(ResidualSpec { layers })
    }
}

/// A sidecar entry for a nested layer, as the model's own entries are written.
fn entry(index: usize, layer: &LayerSpec, input: &Shape) -> Json {
    let mut e = json!({"index": index, "kind": layer.name()});
    if input.rank() > 1 {
        e["input_shape"] = json!(input.dims());
    }
    if let (Json::Object(e), Json::Object(fields)) = (&mut e, layer.torch(input)) {
        e.extend(fields);
    }
    e
}

impl LayerModule for Residual<Kb> {
    fn forward(&self, x: Tensor<Kb, 2>, pass: &mut Pass) -> Tensor<Kb, 2> {
        let mut y = x.clone();
        for layer in &self.block {
            y = layer.forward(y, pass);
        }
        let skip = match self.projection.first() {
            Some(p) => p.forward(x, pass),
            None => x,
        };
        y + skip
    }

    fn state(&self) -> Vec<(String, TensorData)> {
        let mut out = Vec::new();
        for (j, layer) in self.block.iter().enumerate() {
            out.extend(layer.state().into_iter().map(|(n, t)| (format!("block.{j}.{n}"), t)));
        }
        for p in &self.projection {
            out.extend(p.state().into_iter().map(|(n, t)| (format!("projection.{n}"), t)));
        }
        out
    }

    fn restore(self, get: &mut Getter, device: &DispatchDevice) -> Result<Self, StateError> {
        let mut block = Vec::with_capacity(self.block.len());
        for (j, layer) in self.block.into_iter().enumerate() {
            let mut inner = |name: &str, shape: &[usize]| get(&format!("block.{j}.{name}"), shape);
            block.push(layer.restore(&mut inner, device)?);
        }
        let mut projection = Vec::with_capacity(self.projection.len());
        for layer in self.projection {
            let mut inner = |name: &str, shape: &[usize]| get(&format!("projection.{name}"), shape);
            projection.push(layer.restore(&mut inner, device)?);
        }
        Ok(Residual { block, projection })
    }

    fn params(&self) -> Vec<(ParamId, String, usize)> {
        let mut out = Vec::new();
        for (j, layer) in self.block.iter().enumerate() {
            out.extend(layer.params().into_iter().map(|(id, n, r)| (id, format!("block.{j}.{n}"), r)));
        }
        for p in &self.projection {
            out.extend(p.params().into_iter().map(|(id, n, r)| (id, format!("projection.{n}"), r)));
        }
        out
    }
}
