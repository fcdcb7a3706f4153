//! Which engine trains a run, and the native CPU engine (crate `kynml-cpu`)
//! as the loop sees it.
//!
//! On the CPU in fp32, KynML trains with its own kernels rather than
//! through Burn's flex backend: profiling showed flex spending most of a
//! DeepNet step outside the matrix products (scalar `erf` for GELU, one
//! allocation and one pass over memory per elementwise op, half the cores
//! idle between products; BENCHMARKS.md). The native engine does the same
//! arithmetic with one buffer per layer and fused, parallel passes.
//!
//! Everything around the steps stays one path: weights are drawn by
//! [`Model::init`], dropout masks come from the same generator, and the
//! native weights and optimizer state convert to the Burn model and
//! optimizer for evaluation, checkpoints, early stopping's best weights
//! and export. A checkpoint written by one engine resumes on the other.

use std::sync::atomic::{AtomicBool, Ordering};

use burn::DispatchDevice;
use kynml_backend::{Backend as Kb, Device, DeviceKind};
use kynml_cpu::{LayerConfig, MaskSource, Net, OptimConfig, Team};

use crate::checkpoint::{Checkpoint, NamedTensor};
use crate::data::{Batch, Dataset, Split};
use crate::evaluate::Outputs;
use crate::model::{dropout_piece, LayerSpec, MaskKey, Model, Shape, MASK_PIECE};
use crate::rng::SplitMix64;
use crate::spec::types::{Clip, Loss, ModelSpec, Optimizer, Spec};
use crate::train::engine::{Engine, Part, StepLoss};
use crate::train::loss::{host_config, host_loss, host_targets};
use crate::train::optimizer::AnyOptimizer;
use crate::train::precision::{Compute, PrecisionPlan};
use crate::train::profile::StepPhases;
use crate::train::resume::{self, NormSum, SavedState, ScaleState};

/// Rows per forward pass when evaluating a whole split, at most.
const EVAL_CHUNK: usize = 4096;
/// The buffers of one evaluation pass, at most (values): 32 MiB of f32, so
/// that a convolution's patches of a whole split do not take gigabytes.
const EVAL_VALUES: usize = 8 << 20;

/// Which engine a run asks for (tests and benches compare them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum EngineChoice {
    /// The native engine where it applies (the CPU in fp32), Burn elsewhere.
    #[default]
    Auto,
    /// Burn's backends everywhere, the CPU included.
    Burn,
}

/// The engine that runs the steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineKind {
    /// KynML's own CPU kernels (crate `kynml-cpu`).
    Native,
    /// The device's Burn backend, with autodiff.
    Burn,
}

impl EngineKind {
    /// What runs the steps, for a person.
    pub fn describe(self, device: &Device) -> String {
        match self {
            EngineKind::Native => {
                "KynML's native CPU engine (dense, convolution and attention kernels over gemm)".into()
            }
            EngineKind::Burn => device.backend_name().into(),
        }
    }

    /// Its name in a run's `metrics.json` (`native` or `burn`).
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Native => "native",
            EngineKind::Burn => "burn",
        }
    }
}

/// The engine for this device, precision and model: native on the CPU in
/// fp32 when the native engine has every layer of the model.
pub fn engine_for(device: &Device, precision: &PrecisionPlan, choice: EngineChoice, model: &ModelSpec) -> EngineKind {
    let cpu = matches!(device.kind, DeviceKind::Cpu { .. });
    if choice == EngineChoice::Auto && cpu && precision.compute == Compute::Fp32 && native_layers(model).is_ok() {
        EngineKind::Native
    } else {
        EngineKind::Burn
    }
}

/// The model's layers as the native engine builds them; otherwise what it
/// lacks: "no `residual` layer" (the first layer it lacks, as written).
pub fn native_layers(model: &ModelSpec) -> Result<Vec<LayerConfig>, String> {
    native_configs(&model.shape, model.layers.iter().map(|l| &l.value))
}

/// [`native_layers`] of layers on inputs of `shape` (a spec's, or an
/// export's).
pub(crate) fn native_configs<'a>(
    shape: &Shape,
    layers: impl Iterator<Item = &'a LayerSpec>,
) -> Result<Vec<LayerConfig>, String> {
    let mut shape = shape.clone();
    let mut out = Vec::new();
    for layer in layers {
        // Said with the input where the layer runs natively on others.
        let lacks = || match shape.rank() {
            1 => format!("no `{}` layer", layer.name()),
            _ => format!("no `{}` layer on {} inputs", layer.name(), shape.written()),
        };
        out.push(layer.native(&shape).ok_or_else(lacks)?);
        shape = layer.output(&shape).map_err(|_| lacks())?;
    }
    Ok(out)
}

fn optim_config(o: &Optimizer) -> OptimConfig {
    match *o {
        Optimizer::AdamW { beta1, beta2, eps, weight_decay, .. } => {
            OptimConfig::AdamW { beta1, beta2, eps, weight_decay }
        }
        Optimizer::Adam { beta1, beta2, eps, weight_decay, .. } => {
            OptimConfig::Adam { beta1, beta2, eps, weight_decay }
        }
        Optimizer::Sgd { momentum, dampening, weight_decay, nesterov, .. } => {
            OptimConfig::Sgd { momentum, dampening, weight_decay, nesterov }
        }
        Optimizer::RmsProp { alpha, eps, weight_decay, momentum, centered, .. } => {
            OptimConfig::RmsProp { alpha, eps, weight_decay, momentum, centered }
        }
    }
}

/// Dropout masks keyed by the run's generator, computed exactly as the
/// Burn model's dropout computes them on its device.
struct Masks<'r>(&'r mut SplitMix64);

impl MaskSource for Masks<'_> {
    fn dropout(&mut self, team: &Team, p: f64, x: &[f32], mask: &mut [f32], out: &mut [f32]) {
        let key = MaskKey::draw(self.0, p);
        team.zip_chunks3(MASK_PIECE, x, mask, out, |i, x, m, o| dropout_piece(&key, i, x, m, o));
    }
}

/// A native network of these layers holding `model`'s tensors.
pub(crate) fn network(input: usize, layers: &[LayerConfig], channels: usize, model: &Model<Kb>) -> Result<Net, String> {
    let mut net = Net::new(input, layers);
    if channels > 0 {
        net.read_sequences(channels);
    }
    load(&mut net, model)?;
    Ok(net)
}

/// Puts `model`'s tensors in place of `net`'s, a layer at a time (no copy
/// of the whole model is made); every one of `net`'s must be found.
fn load(net: &mut Net, model: &Model<Kb>) -> Result<(), String> {
    let info = net.tensor_info();
    let mut tensors = net.tensors_mut();
    let mut filled = vec![false; info.len()];
    for (i, layer) in model.layers.iter().enumerate() {
        for (field, data) in layer.state() {
            let name = format!("{i}.{field}");
            let Some(at) = info.iter().position(|t| t.name == name) else { continue };
            let values = crate::model::kind::host(data);
            if values.len() != tensors[at].len() {
                return Err(format!("tensor `{name}` does not fit the native engine's layer"));
            }
            tensors[at].copy_from_slice(&values);
            filled[at] = true;
        }
    }
    match filled.iter().position(|f| !f) {
        Some(at) => Err(format!("tensor `{}` does not fit the native engine's layer", info[at].name)),
        None => Ok(()),
    }
}

/// Where the tensor `name` is in the network's list, which must hold
/// `shape` there.
fn named(info: &[kynml_cpu::TensorInfo], name: &str, shape: &[usize]) -> Result<usize, crate::model::StateError> {
    let at = info.iter().position(|t| t.name == name);
    let at = at.ok_or_else(|| crate::model::StateError::Missing { name: name.into() })?;
    if info[at].shape != shape {
        let (expected, found) = (shape.to_vec(), info[at].shape.clone());
        return Err(crate::model::StateError::Shape { name: name.into(), expected, found });
    }
    Ok(at)
}

/// Rows per pass when the native engine evaluates a split of `rows` rows
/// with a network holding `values_per_row` values a row: its buffers grow
/// to that many rows (and keep that size for the steps after), which the
/// memory estimate counts beside a batch's.
pub fn evaluation_rows(values_per_row: usize, rows: usize) -> usize {
    (EVAL_VALUES / values_per_row.max(1)).clamp(1, EVAL_CHUNK).min(rows.max(1))
}

/// `net`'s outputs and mean loss on a split, in chunks whose buffers stay
/// within [`EVAL_VALUES`].
fn evaluate_net(
    net: &mut Net,
    data: &Dataset,
    split: Split,
    loss: Loss,
    scratch: &mut Vec<f32>,
    stop: Option<&AtomicBool>,
) -> Option<Outputs> {
    let part = data.split(split);
    let (n, width) = (part.len(), net.output_width());
    let indices: Vec<usize> = (0..n).collect();
    let (mut values, mut out, mut batch) = (Vec::with_capacity(n * width), Vec::new(), Batch::default());
    let mut loss_sum = 0.0;
    let rows = evaluation_rows(net.values_per_row(), n);
    for chunk in indices.chunks(rows) {
        if stop.is_some_and(|stop| stop.load(Ordering::SeqCst)) {
            return None;
        }
        data.gather(split, chunk, &mut batch);
        net.predict(&batch.features, &mut out);
        loss_sum += host_loss(loss, &out, width, &batch.labels, scratch) * chunk.len() as f64;
        values.extend_from_slice(&out);
    }
    Some(Outputs { values, width, loss: loss_sum / n.max(1) as f64 })
}

/// The native engine with what the loop needs around it.
pub struct NativeEngine {
    net: Net,
    optimizer: OptimConfig,
    /// The spec's optimizer, for its state as Burn's in checkpoints.
    optimizer_spec: Optimizer,
    loss: Loss,
    /// Where the Burn models it gives back live.
    device: DispatchDevice,
    /// A Burn model of the same spec: its parameter ids key the optimizer
    /// records that checkpoints store, and it is the shape conversions fill.
    template: Model<Kb>,
    /// Scratch for class targets as numbers (bce).
    float_targets: Vec<f32>,
    /// Whether the loop asks for each step's phases.
    profiling: bool,
}

impl NativeEngine {
    /// The engine starting from `model`'s weights and `optimizer`'s state
    /// (both fresh, or both restored from a checkpoint).
    pub fn from_burn(
        spec: &Spec,
        model: &Model<Kb>,
        optimizer: &AnyOptimizer,
        device: &DispatchDevice,
    ) -> Result<Self, String> {
        let layers = native_layers(&spec.model)?;
        let input = spec.model.input.value;
        // `input seq LxC`: NaN-padded rows of C values per position.
        let channels = if spec.model.shape.is_sequence() { spec.model.shape.dims()[1] } else { 0 };
        let mut net = network(input, &layers, channels, model)?;
        net.set_clip(spec.train.clip.as_ref().map(|c| match c.value {
            Clip::Norm(x) => kynml_cpu::Clip::Norm(x),
            Clip::Value(x) => kynml_cpu::Clip::Value(x),
        }));
        let info = net.tensor_info();
        let shapes: Vec<Vec<usize>> = info.iter().filter(|t| t.trainable).map(|t| t.shape.clone()).collect();
        let states = optimizer.native_states(&model.param_names(), &shapes, device)?;
        for (slot, state) in net.optimizer_states_mut().into_iter().zip(states) {
            *slot = state;
        }
        Ok(NativeEngine {
            net,
            optimizer: optim_config(&spec.train.optimizer.value),
            optimizer_spec: spec.train.optimizer.value,
            loss: spec.train.loss.value,
            device: device.clone(),
            template: model.clone(),
            float_targets: Vec::new(),
            profiling: false,
        })
    }

    /// The optimizer state as Burn's optimizer, keyed by the parameter ids
    /// of [`Engine::model`]'s models.
    #[cfg(test)]
    fn burn_optimizer(&self) -> AnyOptimizer {
        let info = self.net.tensor_info();
        let shapes: Vec<Vec<usize>> = info.iter().filter(|t| t.trainable).map(|t| t.shape.clone()).collect();
        AnyOptimizer::new(&self.optimizer_spec).with_native_states(
            &self.template.param_names(),
            &shapes,
            &self.net.optimizer_states(),
            &self.device,
        )
    }
}

impl Engine for NativeEngine {
    fn kind(&self) -> EngineKind {
        EngineKind::Native
    }

    fn step(&mut self, batch: Batch, lr: f64, dropout: &mut SplitMix64, part: Part) -> Option<StepLoss> {
        let targets = host_targets(&batch.labels, self.loss, &mut self.float_targets);
        let loss = host_config(self.loss);
        let (x, masks) = (&batch.features, &mut Masks(dropout));
        let mean = self.net.train_part(x, targets, loss, &self.optimizer, lr, masks, part.weight, part.last);
        Some(StepLoss::Host(mean))
    }

    /// As [`evaluate::run_split`](crate::evaluate::run_split) gives it.
    fn evaluate(&mut self, data: &Dataset, split: Split, stop: Option<&AtomicBool>) -> Option<Outputs> {
        evaluate_net(&mut self.net, data, split, self.loss, &mut self.float_targets, stop)
    }

    /// On its own network, the run being over: `model`'s weights are put
    /// in place of its own (no second network is made).
    fn evaluate_model(
        mut self: Box<Self>,
        model: &Model<Kb>,
        data: &Dataset,
        split: Split,
        loss: Loss,
        device: &DispatchDevice,
    ) -> Outputs {
        match load(&mut self.net, model) {
            Ok(()) => {
                crate::evaluate::whole(evaluate_net(&mut self.net, data, split, loss, &mut self.float_targets, None))
            }
            // The model comes from this engine's spec; Burn evaluates it otherwise.
            Err(_) => crate::evaluate::run_split(model, data, split, loss, device, None, None),
        }
    }

    fn model(&self) -> Model<Kb> {
        let (info, tensors) = (self.net.tensor_info(), self.net.tensors());
        let values = |name: &str, shape: &[usize]| named(&info, name, shape).map(|at| tensors[at].to_vec());
        // The names and shapes come from the same spec, so this cannot miss.
        self.template.clone().with_values(values, &self.device).expect("the native engine's tensors fit its own model")
    }

    /// The weights moved out of the network, which is freed with its
    /// gradients, optimizer state and buffers before the Burn model is
    /// filled: the run's end holds no more than a step did.
    fn into_model(self: Box<Self>) -> Model<Kb> {
        let NativeEngine { net, template, device, .. } = *self;
        let info = net.tensor_info();
        let mut tensors: Vec<Option<Vec<f32>>> = net.into_tensors().into_iter().map(Some).collect();
        let values = |name: &str, shape: &[usize]| {
            let at = named(&info, name, shape)?;
            tensors[at].take().ok_or_else(|| crate::model::StateError::Missing { name: name.into() })
        };
        template.with_values(values, &device).expect("the native engine's tensors fit its own model")
    }

    /// What [`resume::snapshot`] saves of [`model`](Engine::model) and the
    /// Burn optimizer, made from the network's tensors and states a tensor
    /// at a time, without building either: a save holds one more copy of
    /// the weights and optimizer state (the checkpoint), not three.
    fn snapshot(&self, best: Option<&Model<Kb>>, state: SavedState) -> Checkpoint {
        let info = self.net.tensor_info();
        let model = (info.iter().zip(self.net.tensors()))
            .map(|(t, v)| NamedTensor::f32(format!("{}{}", resume::MODEL_PREFIX, t.name), t.shape.clone(), v.to_vec()))
            .collect();
        let shapes: Vec<Vec<usize>> = info.iter().filter(|t| t.trainable).map(|t| t.shape.clone()).collect();
        let (params, states) = (self.template.param_names(), self.net.optimizer_states());
        let optimizer = AnyOptimizer::new(&self.optimizer_spec).native_state_tensors(
            &params,
            &shapes,
            &states,
            resume::OPTIM_PREFIX,
            &self.device,
        );
        resume::snapshot_in_parts(model, best, optimizer, state)
    }

    /// The native engine runs fp32 only, without loss scaling.
    fn loss_scale(&self) -> Option<ScaleState> {
        None
    }

    fn grad_norms(&mut self) -> Option<NormSum> {
        self.net.take_grad_norms().map(|(sum, steps)| NormSum { sum, steps: steps as f64 })
    }

    fn seed_grad_norms(&mut self, norms: NormSum) {
        self.net.seed_grad_norms(norms.sum, norms.steps as usize);
    }

    fn set_profiling(&mut self, on: bool) {
        self.profiling = on;
    }

    /// The native engine times its passes on every step (a few clock reads).
    fn last_phases(&self) -> Option<StepPhases> {
        let [forward, backward, optimizer] = self.net.last_phases();
        self.profiling.then_some(StepPhases { copy: 0.0, forward, backward, sync: 0.0, optimizer, in_use: 0 })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The native engine saves its weights and optimizer state straight
    /// from the network; the checkpoint must be what building the Burn model
    /// and optimizer from it and saving those gives, tensor for tensor and in
    /// the same order, for every layer kind and optimizer.
    #[test]
    fn a_snapshot_saves_what_the_burn_model_and_optimizer_would() {
        let cases = [
            (
                "    input 6\n    dense 8 gelu\n    batchnorm\n    dropout 0.2\n    layernorm\n    dense 3 linear\n",
                "",
                "cross_entropy",
                "adamw(lr=0.01)",
            ),
            (
                "    input 1x4x4\n    conv2d 3 2 relu padding=1\n    batchnorm\n    maxpool 2\n    conv2d 2 1 tanh\n    \
                 avgpool 1\n    flatten\n    dense 1 linear\n",
                "",
                "mse",
                "sgd(lr=0.1, momentum=0.9)",
            ),
            (
                "    input 5\n    residual:\n        dense 7 relu\n        layernorm\n    residual:\n        \
                 dense 7 silu\n    dense 1 linear\n",
                "",
                "mse",
                "rmsprop(lr=0.01, centered=true, momentum=0.5)",
            ),
            (
                "    input seq 6\n    embedding 8\n    positional\n    transformer heads=2 ff=16\n    attention heads=2\n    \
                 global_avgpool\n    dense 2 linear\n",
                "    tokens = \"t\"\n",
                "cross_entropy",
                "adam(lr=0.01)",
            ),
            (
                "    input 4\n    embedding 3\n    dense 5 relu\n    dense 1 linear\n",
                "    categorical = [city]\n",
                "mse",
                "adamw(lr=0.01)",
            ),
        ];
        let device = kynml_backend::select(kynml_backend::DeviceChoice::Cpu).unwrap();
        let (ad, inner) = (device.autodiff(), device.inner());
        for (layers, columns, loss, optimizer) in cases {
            let text = format!(
                "dataset D:\n    source = csv(\"d.csv\")\n    target = \"y\"\n{columns}model M:\n{layers}train:\n    \
                 model = M\n    data = D\n    loss = {loss}\n    optimizer = {optimizer}\n    epochs = 1\n"
            );
            let mut spec = crate::spec::parse_spec(&text).unwrap_or_else(|e| panic!("{layers}: {e:?}"));
            let data = crate::data::synthetic_for(&spec, 64, 3).unwrap();
            spec.model.bind(&data.info).unwrap_or_else(|e| panic!("{layers}: {e:?}"));
            let model = Model::init(&spec.model, 5, &ad);
            let burn = AnyOptimizer::new(&spec.train.optimizer.value);
            let mut engine = NativeEngine::from_burn(&spec, &model, &burn, &inner).unwrap();
            // Two steps: the optimizers' state holds more than its first values.
            let mut rng = SplitMix64::new(9);
            for rows in [0..16, 16..32] {
                let mut batch = Batch::default();
                data.gather(Split::Train, &rows.collect::<Vec<_>>(), &mut batch);
                engine.step(batch, 0.01, &mut rng, crate::train::engine::Part::WHOLE);
            }
            let state = resume::LoopState::new(1, 2, burn.name(), 1, 2);
            let saved = engine.snapshot(None, SavedState::of(&state));
            let built = resume::snapshot(&engine.model(), &engine.burn_optimizer(), None, SavedState::of(&state));
            let names = |c: &Checkpoint| c.tensors.iter().map(|t| t.name.clone()).collect::<Vec<_>>();
            assert_eq!(names(&saved), names(&built), "{layers}");
            assert!(names(&saved).iter().any(|n| n.starts_with(resume::OPTIM_PREFIX)), "{layers}: no optimizer state");
            assert_eq!(saved, built, "{layers}");
        }
    }
}
