//! The optimizer's update on the device, written out by KynML instead of
//! left to Burn's per-parameter optimizers, for two things those cannot do:
//!
//! - **Skip an overflowed step without reading anything back.** Under loss
//!   scaling, whether a step's gradients are finite is a flag on the device.
//!   The update is computed anyway and kept or dropped by that flag, element
//!   by element (a select, so a NaN never leaks into the weights), and so are
//!   the step count and the loss scale. The host never waits for the device
//!   inside a step, as with PyTorch's fused Adam under `GradScaler`.
//! - **`fused = true`: one pass over all the parameters.** The gradients and
//!   the weights are laid end to end in one buffer and updated by a single
//!   chain of element-wise operations, which Burn's fusion compiles into one
//!   kernel, instead of one chain per parameter.
//!
//! The arithmetic is Burn's own, operation for operation (AdamW, Adam and
//! SGD), so both paths agree with Burn's optimizers to rounding: they differ
//! only in how the bias corrections' powers are formed (a running product on
//! the device here, `powi` on the host in Burn). Checkpoints hold Burn's
//! records either way, so a run resumes with or without `fused`, and on the
//! native CPU engine.
//!
//! ```ignore
//! let mut grads = Grads::gather(burn_grads, &slots, update.fused());
//! let finite = grads.unscale(scaler.inverse()); // a device flag
//! let model = update.step(lr, model, grads, Some(&finite));
//! scaler.update(&finite);
//! ```

use std::collections::HashMap;

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::optim::record::AdaptorRecord;
use burn::optim::{AdamState, AdamWState, AdaptiveMomentumState, GradientsParams, Optimizer as _, SgdState};
use burn::tensor::{Bool, Tensor};
use burn::DispatchDevice;
use kynml_backend::Backend as Kb;

use crate::evaluate::IntoScalarF64;
use crate::model::Model;
use crate::spec::types::{Clip, Optimizer};
use crate::train::optimizer::AnyOptimizer;

/// How the Burn engine updates the weights after a step's gradients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Update {
    /// Burn's optimizer, parameter by parameter. Under loss scaling the
    /// overflow check is read back every step, since it decides whether
    /// the optimizer runs at all.
    Burn,
    /// KynML's update, parameter by parameter; an overflow is skipped on the device.
    PerParameter,
    /// KynML's update over all the parameters at once (`fused = true`); an
    /// overflow is skipped on the device.
    Fused,
}

impl Update {
    /// The update for `optimizer`, `scaled` when the loss is scaled: the
    /// spec's `fused = true` runs fused; otherwise a scaled run takes
    /// KynML's update so that no step waits for its overflow check, and an
    /// unscaled one keeps Burn's. RMSprop always runs on Burn's.
    pub fn plan(optimizer: &Optimizer, scaled: bool) -> Update {
        match optimizer {
            Optimizer::RmsProp { .. } => Update::Burn,
            o if o.fused() == Some(true) => Update::Fused,
            _ if scaled => Update::PerParameter,
            _ => Update::Burn,
        }
    }

    /// True when all parameters are updated as one buffer.
    pub fn fused(self) -> bool {
        self == Update::Fused
    }

    /// A short name: `burn`, `per-parameter` or `fused`.
    pub fn name(self) -> &'static str {
        match self {
            Update::Burn => "burn",
            Update::PerParameter => "per-parameter",
            Update::Fused => "fused",
        }
    }
}

/// One trainable parameter: its id, shape and, in a fused buffer, where it
/// starts.
#[derive(Debug, Clone)]
pub struct Slot {
    id: ParamId,
    shape: Vec<usize>,
    offset: usize,
}

impl Slot {
    fn len(&self) -> usize {
        self.shape.iter().product()
    }
}

/// The model's trainable parameters in layer order, as the update lays
/// them out.
#[derive(Debug, Clone)]
pub struct Slots(Vec<Slot>);

impl Slots {
    /// `model`'s trainable parameters.
    pub fn of(model: &Model<Kb>) -> Self {
        let mut shapes = Shapes(HashMap::new());
        model.visit(&mut shapes);
        let mut offset = 0;
        let slots = model
            .param_ranks()
            .into_iter()
            .filter_map(|(id, _)| {
                let shape = shapes.0.remove(&id)?;
                let slot = Slot { id, shape, offset };
                offset += slot.len();
                Some(slot)
            })
            .collect();
        Slots(slots)
    }

    /// The number of values over all the parameters.
    pub fn total(&self) -> usize {
        self.0.iter().map(Slot::len).sum()
    }
}

struct Shapes(HashMap<ParamId, Vec<usize>>);

impl ModuleVisitor<Kb> for Shapes {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<Kb, D>>) {
        self.0.insert(param.id, param.val().dims().to_vec());
    }
}

/// The weights of `slots`, each flattened, off the autodiff graph.
struct Weights<'s> {
    slots: &'s Slots,
    found: HashMap<ParamId, Tensor<Kb, 1>>,
}

impl ModuleVisitor<Kb> for Weights<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<Kb, D>>) {
        if let Some(slot) = self.slots.0.iter().find(|s| s.id == param.id) {
            self.found.insert(param.id, param.val().inner().reshape([slot.len()]));
        }
    }
}

/// Puts updated weights back into a model, keeping ids and autodiff marks.
struct Put(HashMap<ParamId, Tensor<Kb, 1>>);

impl ModuleMapper<Kb> for Put {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<Kb, D>>) -> Param<Tensor<Kb, D>> {
        let (id, tensor, mapper) = param.consume();
        let tensor = match self.0.remove(&id) {
            Some(updated) => {
                let grad = tensor.is_require_grad();
                let updated = Tensor::from_inner(updated.reshape(tensor.shape()));
                if grad {
                    updated.require_grad()
                } else {
                    updated
                }
            }
            None => tensor,
        };
        Param::from_mapped_value(id, tensor, mapper)
    }
}

/// A step's gradients as flat tensors: one per parameter (`None` where a
/// parameter got no gradient), or, fused, one over all of them.
pub struct Grads {
    parts: Vec<Option<Tensor<Kb, 1>>>,
}

impl Grads {
    /// Takes `grads` apart along `slots`; `fused` lays them end to end in
    /// one buffer (a parameter without a gradient adds zeros there).
    pub fn gather(mut grads: GradientsParams, slots: &Slots, fused: bool) -> Self {
        fn take<const D: usize>(grads: &mut GradientsParams, slot: &Slot) -> Option<Tensor<Kb, 1>> {
            grads.remove::<Kb, D>(slot.id).map(|g| g.reshape([slot.len()]))
        }
        let mut parts: Vec<Option<Tensor<Kb, 1>>> =
            slots.0.iter().map(|s| by_rank!(s.shape.len(), take(&mut grads, s))).collect();
        if fused {
            // Zeros for a parameter without a gradient, made from one that
            // has one, so that they carry its checkpointing mark (Burn
            // refuses to join tensors of two); a comparison never true, NaN
            // or not, gives 0.
            let Some(zero) = parts.iter().flatten().next().map(|g| g.clone().slice(0..1).lower_elem(f32::NEG_INFINITY))
            else {
                return Grads { parts: vec![None] };
            };
            let whole = parts
                .iter_mut()
                .zip(&slots.0)
                .map(|(g, s)| g.take().unwrap_or_else(|| zero.clone().float().repeat_dim(0, s.len())))
                .collect();
            parts = vec![Some(Tensor::cat(whole, 0))];
        }
        Grads { parts }
    }

    /// Back to Burn's gradients, parameter by parameter (not fused).
    pub fn into_params(self, slots: &Slots) -> GradientsParams {
        fn put<const D: usize>(grads: &mut GradientsParams, slot: &Slot, g: Tensor<Kb, 1>) {
            let shape: [usize; D] = std::array::from_fn(|i| slot.shape[i]);
            grads.register(slot.id, g.reshape(shape));
        }
        let mut grads = GradientsParams::new();
        for (g, slot) in self.parts.into_iter().zip(&slots.0) {
            if let Some(g) = g {
                by_rank!(slot.shape.len(), put(&mut grads, slot, g));
            }
        }
        grads
    }

    /// Multiplies every gradient by `inverse` (one value, the loss scale's
    /// inverse) and says on the device whether all of them are finite.
    pub fn unscale(&mut self, inverse: Tensor<Kb, 1>) -> Tensor<Kb, 1, Bool> {
        // `g * 0` sums to 0 when every element is finite, to NaN otherwise.
        let mut probe: Option<Tensor<Kb, 1>> = None;
        for part in self.parts.iter_mut() {
            let Some(g) = part.take() else { continue };
            let g = g * inverse.clone();
            let zero = g.clone().mul_scalar(0.0).sum_dim(0);
            probe = Some(probe.map_or(zero.clone(), |p| p + zero));
            *part = Some(g);
        }
        // No gradient at all: nothing overflowed.
        probe.unwrap_or_else(|| inverse.mul_scalar(0.0)).equal_elem(0.0)
    }

    /// Applies `clip` and returns the gradients' global L2 norm before it
    /// (one value on the device).
    pub fn clip(&mut self, clip: Clip) -> Option<Tensor<Kb, 1>> {
        // Summed along a dimension, not by `sum()`: on a GPU Burn may sum a
        // whole tensor with atomic adds, in an order that changes from run
        // to run, and the norm scales every gradient.
        let squares = self.parts.iter().flatten().map(|g| g.clone().square().sum_dim(0)).reduce(|a, b| a + b)?;
        let norm = squares.sqrt();
        // `max / (norm + 1e-6)`, at most 1: PyTorch's clip_grad_norm_.
        let factor = match clip {
            Clip::Norm(max) => Some(norm.clone().add_scalar(1e-6).recip().mul_scalar(max).clamp_max(1.0)),
            Clip::Value(_) => None,
        };
        for part in self.parts.iter_mut() {
            let Some(g) = part.take() else { continue };
            *part = Some(match (clip, &factor) {
                // Two one-sided clamps, not `clamp(-x, x)`: Burn 0.21 fuses
                // `clamp` into a kernel that CubeCL's SPIR-V compiler breaks
                // when a fused tensor is narrower than the kernel's lines (a
                // one-value bias beside wider tensors: the scalar is clamped
                // by four-wide bounds, and Vulkan refuses the pipeline).
                (Clip::Value(x), _) => g.clamp_max(x).clamp_min(-x),
                (Clip::Norm(_), Some(f)) => g * f.clone(),
                (Clip::Norm(_), None) => g,
            });
        }
        Some(norm)
    }
}

/// The update rule, with Burn's types for each constant so that the
/// arithmetic rounds as Burn's does.
#[derive(Debug, Clone, Copy)]
enum Rule {
    /// Adam with L2 weight decay, or AdamW with decoupled decay.
    Adam { beta1: f32, beta2: f32, eps: f32, weight_decay: f32, decoupled: bool },
    /// SGD with optional momentum.
    Sgd { momentum: Option<(f64, f64, bool)>, weight_decay: f32 },
}

impl Rule {
    fn of(optimizer: &Optimizer) -> Option<Rule> {
        Some(match *optimizer {
            Optimizer::AdamW { beta1, beta2, eps, weight_decay, .. } => Rule::Adam {
                beta1: beta1 as f32,
                beta2: beta2 as f32,
                eps: eps as f32,
                weight_decay: weight_decay as f32,
                decoupled: true,
            },
            Optimizer::Adam { beta1, beta2, eps, weight_decay, .. } => Rule::Adam {
                beta1: beta1 as f32,
                beta2: beta2 as f32,
                eps: eps as f32,
                weight_decay: weight_decay as f32,
                decoupled: false,
            },
            Optimizer::Sgd { momentum, dampening, weight_decay, nesterov, .. } => Rule::Sgd {
                momentum: (momentum > 0.0).then_some((momentum, dampening, nesterov)),
                weight_decay: weight_decay as f32,
            },
            Optimizer::RmsProp { .. } => return None,
        })
    }
}

/// The optimizer's state on the device, part by part as the gradients.
#[derive(Clone)]
struct State {
    /// Adam's first moment, or SGD's velocity; empty for plain SGD.
    first: Vec<Option<Tensor<Kb, 1>>>,
    /// Adam's second moment.
    second: Vec<Option<Tensor<Kb, 1>>>,
    /// Updates taken, and `beta1^t`, `beta2^t` after them (one value each).
    steps: Tensor<Kb, 1>,
    beta1_t: Tensor<Kb, 1>,
    beta2_t: Tensor<Kb, 1>,
}

/// The spec's optimizer run by KynML on the device (see the module's notes).
#[derive(Clone)]
pub struct DeviceUpdate {
    rule: Rule,
    fused: bool,
    slots: Slots,
    state: Option<State>,
    /// Burn's optimizer for the same spec: the state is handed over in its records.
    burn: AnyOptimizer,
}

impl DeviceUpdate {
    /// `optimizer` over `model`'s parameters, starting from the state Burn's
    /// `from` holds (fresh or restored from a checkpoint); `None` for an
    /// optimizer it does not run (RMSprop).
    pub fn new(
        optimizer: &Optimizer,
        fused: bool,
        model: &Model<Kb>,
        from: &AnyOptimizer,
        device: &DispatchDevice,
    ) -> Result<Option<Self>, String> {
        let Some(rule) = Rule::of(optimizer) else { return Ok(None) };
        let slots = Slots::of(model);
        let mut update = DeviceUpdate { rule, fused, slots, state: None, burn: from.clone() };
        update.state = update.state_from(from, model, device)?;
        Ok(Some(update))
    }

    /// The parameters it updates.
    pub fn slots(&self) -> &Slots {
        &self.slots
    }

    /// True when all parameters are updated as one buffer.
    pub fn fused(&self) -> bool {
        self.fused
    }

    /// One update of `model` by `grads` at learning rate `lr`. With
    /// `finite`, the update (weights, state and step count) is kept only
    /// where that device flag holds, without reading it.
    pub fn step(&mut self, lr: f64, model: Model<Kb>, grads: Grads, finite: Option<&Tensor<Kb, 1, Bool>>) -> Model<Kb> {
        let mut weights = Weights { slots: &self.slots, found: HashMap::new() };
        model.visit(&mut weights);
        let mut found = weights.found;
        let mut params: Vec<Option<Tensor<Kb, 1>>> = self.slots.0.iter().map(|s| found.remove(&s.id)).collect();
        if self.fused {
            params = vec![Some(Tensor::cat(params.into_iter().flatten().collect(), 0))];
        }
        let rule = self.rule;
        let state = self.state.get_or_insert_with(|| State::zeros(&params, rule));
        let steps = state.steps.clone().add_scalar(1.0);
        let (beta1_t, beta2_t) = match rule {
            Rule::Adam { beta1, beta2, .. } => {
                (state.beta1_t.clone().mul_scalar(beta1), state.beta2_t.clone().mul_scalar(beta2))
            }
            Rule::Sgd { .. } => (state.beta1_t.clone(), state.beta2_t.clone()),
        };
        // The one-element flag is broadcast by the select itself: an
        // `expand` first is an operation Burn's fuser does not take, and it
        // left each select a kernel of its own (3 a parameter).
        let keep = |old: Tensor<Kb, 1>, new: Tensor<Kb, 1>| match finite {
            Some(f) => old.mask_where(f.clone(), new),
            None => new,
        };
        let mut updated = HashMap::new();
        for (i, (p, g)) in params.into_iter().zip(grads.parts).enumerate() {
            let (Some(p), Some(g)) = (p, g) else { continue };
            let (first, second) = (state.first[i].clone(), state.second[i].clone());
            let (new_p, new_first, new_second) = match rule {
                Rule::Adam { beta1, beta2, eps, weight_decay, decoupled } => {
                    let (m, v) = (first.expect("adam keeps moments"), second.expect("adam keeps moments"));
                    adam(AdamStep {
                        lr,
                        p: p.clone(),
                        g,
                        m,
                        v,
                        beta1,
                        beta2,
                        eps,
                        weight_decay,
                        decoupled,
                        beta1_t: &beta1_t,
                        beta2_t: &beta2_t,
                    })
                }
                Rule::Sgd { momentum, weight_decay } => {
                    let (new_p, velocity) = sgd(lr, p.clone(), g, first, momentum, weight_decay, &state.steps);
                    (new_p, velocity, None)
                }
            };
            if let (Some(old), Some(new)) = (state.first[i].take(), new_first) {
                state.first[i] = Some(keep(old, new));
            }
            if let (Some(old), Some(new)) = (state.second[i].take(), new_second) {
                state.second[i] = Some(keep(old, new));
            }
            updated.insert(i, keep(p, new_p));
        }
        let scalar_keep = |old: Tensor<Kb, 1>, new: Tensor<Kb, 1>| match finite {
            Some(f) => old.mask_where(f.clone(), new),
            None => new,
        };
        state.steps = scalar_keep(state.steps.clone(), steps);
        state.beta1_t = scalar_keep(state.beta1_t.clone(), beta1_t);
        state.beta2_t = scalar_keep(state.beta2_t.clone(), beta2_t);

        let mut put = HashMap::new();
        if self.fused {
            if let Some(all) = updated.remove(&0) {
                for slot in &self.slots.0 {
                    put.insert(slot.id, all.clone().slice(slot.offset..slot.offset + slot.len()));
                }
            }
        } else {
            for (i, p) in updated {
                put.insert(self.slots.0[i].id, p);
            }
        }
        model.map(&mut Put(put))
    }

    /// The state as Burn's optimizer holds it (for checkpoints, the native
    /// engine and evaluation); reads the step count back from the device.
    pub fn to_burn(&self) -> AnyOptimizer {
        let Some(state) = &self.state else { return self.burn.clone() };
        let time = state.steps.clone().into_scalar_f64().round() as usize;
        if time == 0 {
            return self.burn.clone();
        }
        // Each parameter's share of a part of the state.
        let share = |part: &[Option<Tensor<Kb, 1>>], i: usize| -> Option<Tensor<Kb, 1>> {
            let slot = &self.slots.0[i];
            if self.fused {
                Some(part.first()?.clone()?.slice(slot.offset..slot.offset + slot.len()))
            } else {
                part.get(i)?.clone()
            }
        };
        let slots = self.slots.0.iter().enumerate();
        let moments = |i: usize| Some((share(&state.first, i)?, share(&state.second, i)?));
        match &self.burn {
            AnyOptimizer::AdamW(o) => AnyOptimizer::AdamW(holding(
                o,
                slots.filter_map(|(i, s)| {
                    let (m, v) = moments(i)?;
                    Some((s.id, by_rank!(s.shape.len(), adamw_record(time, m, v, &s.shape))))
                }),
            )),
            AnyOptimizer::Adam(o) => AnyOptimizer::Adam(holding(
                o,
                slots.filter_map(|(i, s)| {
                    let (m, v) = moments(i)?;
                    Some((s.id, by_rank!(s.shape.len(), adam_record(time, m, v, &s.shape))))
                }),
            )),
            AnyOptimizer::Sgd(o) => AnyOptimizer::Sgd(holding(
                o,
                slots.map(|(i, s)| (s.id, by_rank!(s.shape.len(), sgd_record(share(&state.first, i), &s.shape)))),
            )),
            AnyOptimizer::RmsProp(_) => self.burn.clone(),
        }
    }

    /// The state `from` holds, laid out as this update keeps it; `None`
    /// before the first step. Made on `device`, the autodiff device, so that
    /// it carries the same autodiff marks as the gradients.
    fn state_from(
        &self,
        from: &AnyOptimizer,
        model: &Model<Kb>,
        device: &DispatchDevice,
    ) -> Result<Option<State>, String> {
        let names = model.param_names();
        let names: Vec<(ParamId, String)> =
            self.slots.0.iter().filter_map(|s| names.iter().find(|(id, _)| *id == s.id).cloned()).collect();
        let shapes: Vec<Vec<usize>> = self.slots.0.iter().map(|s| s.shape.clone()).collect();
        let states = from.native_states(&names, &shapes, device)?;
        if states.iter().all(Option::is_none) {
            return Ok(None);
        }
        let mut time = 0usize;
        let mut first: Vec<Vec<f32>> = Vec::new();
        let mut second: Vec<Vec<f32>> = Vec::new();
        for (state, slot) in states.iter().zip(&self.slots.0) {
            let zeros = || vec![0.0f32; slot.len()];
            let (f, s) = match state {
                Some(kynml_cpu::ParamState::Adaptive { time: t, moment_1, moment_2 }) => {
                    time = time.max(*t);
                    (Some(moment_1.clone()), Some(moment_2.clone()))
                }
                Some(kynml_cpu::ParamState::Sgd { velocity }) => {
                    time = time.max(1);
                    (velocity.clone().or_else(|| self.keeps_velocity().then(zeros)), None)
                }
                None => (self.keeps_first().then(zeros), self.keeps_second().then(zeros)),
                Some(other) => return Err(format!("the checkpoint holds {other:?}, not this optimizer's state")),
            };
            first.extend(f);
            second.extend(s);
        }
        let upload = |values: Vec<Vec<f32>>| -> Vec<Option<Tensor<Kb, 1>>> {
            if values.is_empty() {
                return vec![None; if self.fused { 1 } else { self.slots.0.len() }];
            }
            let as_tensor = |v: Vec<f32>| Tensor::<Kb, 1>::from_floats(v.as_slice(), device).inner();
            if self.fused {
                vec![Some(as_tensor(values.concat()))]
            } else {
                values.into_iter().map(|v| Some(as_tensor(v))).collect()
            }
        };
        // The powers as the device forms them, one product a step.
        let (mut beta1_t, mut beta2_t) = (1.0f32, 1.0f32);
        if let Rule::Adam { beta1, beta2, .. } = self.rule {
            for _ in 0..time {
                beta1_t *= beta1;
                beta2_t *= beta2;
            }
        }
        let scalar = |x: f32| Tensor::<Kb, 1>::from_floats([x], device).inner();
        Ok(Some(State {
            first: upload(first),
            second: upload(second),
            steps: scalar(time as f32),
            beta1_t: scalar(beta1_t),
            beta2_t: scalar(beta2_t),
        }))
    }

    fn keeps_first(&self) -> bool {
        matches!(self.rule, Rule::Adam { .. }) || self.keeps_velocity()
    }

    fn keeps_second(&self) -> bool {
        matches!(self.rule, Rule::Adam { .. })
    }

    fn keeps_velocity(&self) -> bool {
        matches!(self.rule, Rule::Sgd { momentum: Some(_), .. })
    }
}

impl State {
    /// A fresh state for `params` (zeros made from the weights, so that
    /// they carry the weights' autodiff marks).
    fn zeros(params: &[Option<Tensor<Kb, 1>>], rule: Rule) -> State {
        let zeros = |keep: bool| -> Vec<Option<Tensor<Kb, 1>>> {
            params.iter().map(|p| p.clone().filter(|_| keep).map(|p| p.mul_scalar(0.0))).collect()
        };
        let (first, second) = match rule {
            Rule::Adam { .. } => (zeros(true), zeros(true)),
            Rule::Sgd { momentum, .. } => (zeros(momentum.is_some()), zeros(false)),
        };
        let one = params.iter().flatten().next().map(|p| p.clone().slice(0..1).mul_scalar(0.0));
        let steps = one.expect("a model has parameters");
        let unit = steps.clone().add_scalar(1.0);
        State { first, second, steps, beta1_t: unit.clone(), beta2_t: unit }
    }
}

/// One Adam or AdamW update of a part.
struct AdamStep<'a> {
    lr: f64,
    p: Tensor<Kb, 1>,
    g: Tensor<Kb, 1>,
    m: Tensor<Kb, 1>,
    v: Tensor<Kb, 1>,
    beta1: f32,
    beta2: f32,
    eps: f32,
    weight_decay: f32,
    decoupled: bool,
    /// `beta1^t` and `beta2^t` for this step's `t`.
    beta1_t: &'a Tensor<Kb, 1>,
    beta2_t: &'a Tensor<Kb, 1>,
}

/// Burn's Adam (L2 decay on the gradient, its bias corrections folded into
/// one factor) or AdamW (decoupled decay): the new weights and moments.
fn adam(s: AdamStep) -> (Tensor<Kb, 1>, Option<Tensor<Kb, 1>>, Option<Tensor<Kb, 1>>) {
    let AdamStep { lr, p, g, m, v, beta1, beta2, eps, weight_decay, decoupled, beta1_t, beta2_t } = s;
    let g = if !decoupled && weight_decay > 0.0 { p.clone().mul_scalar(weight_decay).add(g) } else { g };
    let m = m.mul_scalar(beta1).add(g.clone().mul_scalar(1.0 - beta1));
    let v = v.mul_scalar(beta2).add(g.square().mul_scalar(1.0 - beta2));
    let correction1 = beta1_t.clone().neg().add_scalar(1.0);
    let correction2 = beta2_t.clone().neg().add_scalar(1.0);
    let new_p = if decoupled {
        let delta = m.clone().div(correction1).div(v.clone().div(correction2).sqrt().add_scalar(eps));
        let decay_rate = lr * (weight_decay as f64);
        let decayed = if decay_rate == 0.0 { p } else { p.mul_scalar(1.0 - decay_rate) };
        decayed - delta.mul_scalar(lr)
    } else {
        let root2 = correction2.sqrt();
        let factor = root2.clone().div(correction1);
        let delta = m.clone().mul(factor).div(v.clone().sqrt().add(root2.mul_scalar(eps)));
        p - delta.mul_scalar(lr)
    };
    (new_p, Some(m), Some(v))
}

/// Burn's SGD: L2 decay on the gradient, then momentum (the first step
/// takes the gradient itself as the velocity, as PyTorch does), optionally
/// Nesterov's. `steps` counts the updates taken before this one.
fn sgd(
    lr: f64,
    p: Tensor<Kb, 1>,
    g: Tensor<Kb, 1>,
    velocity: Option<Tensor<Kb, 1>>,
    momentum: Option<(f64, f64, bool)>,
    weight_decay: f32,
    steps: &Tensor<Kb, 1>,
) -> (Tensor<Kb, 1>, Option<Tensor<Kb, 1>>) {
    let g = if weight_decay > 0.0 { p.clone().mul_scalar(weight_decay).add(g) } else { g };
    let (g, velocity) = match (momentum, velocity) {
        (Some((momentum, dampening, nesterov)), Some(v)) => {
            let continued = g.clone().mul_scalar(1.0 - dampening).add(v.mul_scalar(momentum));
            // Broadcast by the select, as in `keep` (an `expand` is not fused).
            let started = steps.clone().greater_elem(0.0);
            let v = g.clone().mask_where(started, continued);
            let g = if nesterov { v.clone().mul_scalar(momentum).add(g) } else { v.clone() };
            (g, Some(v))
        }
        _ => (g, None),
    };
    (p - g.mul_scalar(lr), velocity)
}

/// Burn's optimizer `o` holding exactly `records`.
fn holding<O: burn::optim::SimpleOptimizer<Kb>>(
    o: &burn::optim::adaptor::OptimizerAdaptor<O, Model<Kb>, Kb>,
    records: impl Iterator<Item = (ParamId, AdaptorRecord<O, Kb>)>,
) -> burn::optim::adaptor::OptimizerAdaptor<O, Model<Kb>, Kb> {
    let mut held = o.to_record();
    held.clear();
    held.extend(records);
    o.clone().load_record(held)
}

fn shaped<const D: usize>(t: Tensor<Kb, 1>, shape: &[usize]) -> Tensor<Kb, D> {
    let dims: [usize; D] = std::array::from_fn(|i| shape[i]);
    t.reshape(dims)
}

fn adamw_record<const D: usize>(
    time: usize,
    m: Tensor<Kb, 1>,
    v: Tensor<Kb, 1>,
    shape: &[usize],
) -> AdaptorRecord<burn::optim::AdamW, Kb> {
    let moments = AdaptiveMomentumState::new(time, shaped::<D>(m, shape), shaped::<D>(v, shape));
    AdaptorRecord::from_state::<D>(AdamWState::new(moments))
}

fn adam_record<const D: usize>(
    time: usize,
    m: Tensor<Kb, 1>,
    v: Tensor<Kb, 1>,
    shape: &[usize],
) -> AdaptorRecord<burn::optim::Adam, Kb> {
    let moments = AdaptiveMomentumState::new(time, shaped::<D>(m, shape), shaped::<D>(v, shape));
    AdaptorRecord::from_state::<D>(AdamState::new(moments))
}

fn sgd_record<const D: usize>(
    velocity: Option<Tensor<Kb, 1>>,
    shape: &[usize],
) -> AdaptorRecord<burn::optim::Sgd<Kb>, Kb> {
    let momentum = velocity.map(|v| burn::optim::momentum::MomentumState::new(shaped::<D>(v, shape)));
    AdaptorRecord::from_state::<D>(SgdState::new(momentum))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;

    fn seed() -> u64 {
        std::env::var("KYNML_TEST_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(7, |d| d.as_nanos() as u64)
        })
    }

    /// The CPU's autodiff device and its inner device.
    fn devices() -> (DispatchDevice, DispatchDevice) {
        let cpu = kynml_backend::select(kynml_backend::DeviceChoice::Cpu).unwrap();
        (cpu.autodiff(), cpu.inner())
    }

    /// A model with parameters of ranks 1, 2 and 4 on the autodiff device,
    /// and the spec's optimizer.
    fn setup(optimizer: &str, seed: u64) -> (Model<Kb>, Optimizer) {
        let text = format!(
            "dataset D:\n source = csv(\"d.csv\")\n target = \"y\"\nmodel M:\n input 1x4x4\n conv2d 3 2 relu\n \
             batchnorm\n flatten\n dense 5 tanh\n dense 1 linear\ntrain:\n loss = mse\n epochs = 1\n optimizer = {optimizer}\n"
        );
        let spec = crate::spec::parse_spec(&text).unwrap_or_else(|e| panic!("{e:?}"));
        (Model::init(&spec.model, seed, &devices().0), spec.train.optimizer.value)
    }

    /// Random gradient values for every parameter; `poison` puts an
    /// infinity and a NaN into the first, as an overflowed fp16 backward
    /// pass does.
    fn random_values(slots: &Slots, rng: &mut SplitMix64, poison: bool) -> Vec<Vec<f32>> {
        let mut values: Vec<Vec<f32>> =
            slots.0.iter().map(|s| (0..s.len()).map(|_| rng.normal() as f32).collect()).collect();
        if poison {
            let n = values[0].len();
            values[0][0] = f32::INFINITY;
            values[0][1 % n] = f32::NAN;
        }
        values
    }

    fn grads_of(values: &[Vec<f32>], slots: &Slots) -> GradientsParams {
        fn one<const D: usize>(grads: &mut GradientsParams, slot: &Slot, values: &[f32]) {
            let shape: [usize; D] = std::array::from_fn(|i| slot.shape[i]);
            grads.register(slot.id, Tensor::<Kb, 1>::from_floats(values, &devices().1).reshape(shape));
        }
        let mut grads = GradientsParams::new();
        for (slot, v) in slots.0.iter().zip(values) {
            by_rank!(slot.shape.len(), one(&mut grads, slot, v));
        }
        grads
    }

    fn weights(model: &Model<Kb>) -> Vec<f32> {
        model
            .tensors("")
            .into_iter()
            .flat_map(|t| match t.data {
                crate::checkpoint::TensorData::F32(v) => v,
                _ => Vec::new(),
            })
            .collect()
    }

    fn flag(finite: bool) -> Tensor<Kb, 1, Bool> {
        Tensor::<Kb, 1>::from_floats([f32::from(u8::from(finite))], &devices().1).equal_elem(1.0)
    }

    /// KynML's update, per parameter and fused, against Burn's optimizer
    /// over several steps of fresh random gradients, in units of the
    /// learning rate: SGD's arithmetic is the same operation for operation
    /// (bit-identical), Adam's differs only in how its bias corrections'
    /// powers are rounded (1 - 0.999^t loses digits, so about 1e-5 of a
    /// step).
    #[test]
    fn the_device_update_follows_burns_optimizers_per_parameter_and_fused() {
        let cases = [
            ("adamw(lr=0.01, weight_decay=0.1)", 1e-4),
            ("adam(lr=0.01, betas=[0.8, 0.99], weight_decay=0.05)", 1e-4),
            ("sgd(lr=0.1, momentum=0.9, nesterov=true, weight_decay=0.01)", 0.0),
            ("sgd(lr=0.1, momentum=0.5, dampening=0.3)", 0.0),
            ("sgd(lr=0.1)", 0.0),
        ];
        let seed = seed();
        let device = devices().0;
        for (optimizer, tolerance) in cases {
            let (model, spec) = setup(optimizer, seed);
            let burn = AnyOptimizer::new(&spec);
            let slots = Slots::of(&model);
            let mut reference = (model.clone(), burn.clone());
            let mut per = (model.clone(), DeviceUpdate::new(&spec, false, &model, &burn, &device).unwrap().unwrap());
            let mut fused = (model.clone(), DeviceUpdate::new(&spec, true, &model, &burn, &device).unwrap().unwrap());
            let mut rng = SplitMix64::new(seed);
            for step in 0..8 {
                let values = random_values(&slots, &mut rng, false);
                let g = |fused: bool| Grads::gather(grads_of(&values, &slots), &slots, fused);
                reference.0 = reference.1.step(0.01, reference.0.clone(), g(false).into_params(&slots));
                per.0 = per.1.step(0.01, per.0.clone(), g(false), Some(&flag(true)));
                fused.0 = fused.1.step(0.01, fused.0.clone(), g(true), None);
                let want = weights(&reference.0);
                for (name, got) in [("per parameter", weights(&per.0)), ("fused", weights(&fused.0))] {
                    let worst = want.iter().zip(&got).map(|(a, b)| f64::from((a - b).abs()) / 0.01).fold(0.0, f64::max);
                    if step == 7 {
                        eprintln!("{optimizer}, {name}: {worst:.1e} of a step from Burn's optimizer after 8 steps");
                    }
                    assert!(
                        worst <= tolerance,
                        "{optimizer}, {name}, step {step}: {worst:e} from Burn's optimizer (seed {seed})"
                    );
                }
            }
        }
    }

    /// A step whose flag says "overflowed" changes nothing: not the weights,
    /// not the moments, not the step count (the next finite step is the
    /// optimizer's first), even though its gradients hold inf and NaN.
    #[test]
    fn a_flagged_overflow_leaves_weights_and_state_untouched() {
        let seed = seed();
        let device = devices().0;
        for fused in [false, true] {
            let (model, spec) = setup("adamw(lr=0.01)", seed);
            let burn = AnyOptimizer::new(&spec);
            let slots = Slots::of(&model);
            let mut update = DeviceUpdate::new(&spec, fused, &model, &burn, &device).unwrap().unwrap();
            let mut rng = SplitMix64::new(seed);
            let bad = random_values(&slots, &mut rng, true);
            let mut scaled = Grads::gather(grads_of(&bad, &slots), &slots, fused);
            let finite = scaled.unscale(Tensor::<Kb, 1>::from_floats([0.5], &devices().1));
            assert_eq!(finite.clone().float().into_scalar_f64(), 0.0, "inf and NaN are seen");
            let after = update.step(0.01, model.clone(), scaled, Some(&finite));
            assert_eq!(weights(&after), weights(&model), "fused {fused}: a skipped step moved the weights");
            let good = random_values(&slots, &mut rng, false);
            let after =
                update.step(0.01, after, Grads::gather(grads_of(&good, &slots), &slots, fused), Some(&flag(true)));
            let mut reference = burn.clone();
            let want = reference.step(0.01, model.clone(), grads_of(&good, &slots));
            assert_eq!(weights(&after), weights(&want), "fused {fused}: not the optimizer's first step");
            let names = model.param_names();
            let shapes: Vec<Vec<usize>> = slots.0.iter().map(|s| s.shape.clone()).collect();
            let states = update.to_burn().native_states(&names, &shapes, &device).unwrap();
            for state in states {
                let Some(kynml_cpu::ParamState::Adaptive { time, .. }) = state else { panic!("adam state") };
                assert_eq!(time, 1, "fused {fused}: the skipped step was counted");
            }
        }
    }

    /// The state handed to Burn's records and back (a checkpoint, or a
    /// switch between fused and per parameter) continues exactly.
    #[test]
    fn the_state_moves_through_burns_records_and_continues_exactly() {
        let seed = seed();
        let device = devices().0;
        for optimizer in ["adam(lr=0.01, weight_decay=0.01)", "sgd(lr=0.05, momentum=0.9)"] {
            let (model, spec) = setup(optimizer, seed);
            let burn = AnyOptimizer::new(&spec);
            let slots = Slots::of(&model);
            let mut rng = SplitMix64::new(seed);
            let values: Vec<Vec<Vec<f32>>> = (0..4).map(|_| random_values(&slots, &mut rng, false)).collect();
            let g = |i: usize, fused: bool| Grads::gather(grads_of(&values[i], &slots), &slots, fused);
            let mut whole = DeviceUpdate::new(&spec, true, &model, &burn, &device).unwrap().unwrap();
            let mut m = model.clone();
            for i in 0..4 {
                m = whole.step(0.01, m, g(i, true), None);
            }
            let mut first = DeviceUpdate::new(&spec, true, &model, &burn, &device).unwrap().unwrap();
            let mut p = model.clone();
            for i in 0..2 {
                p = first.step(0.01, p, g(i, true), None);
            }
            // Resumed per parameter from Burn's records of the fused state.
            let mut second = DeviceUpdate::new(&spec, false, &p, &first.to_burn(), &device).unwrap().unwrap();
            for i in 2..4 {
                p = second.step(0.01, p, g(i, false), None);
            }
            assert_eq!(weights(&p), weights(&m), "{optimizer}: the resumed update went elsewhere (seed {seed})");
        }
    }
}
