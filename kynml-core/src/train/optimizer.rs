//! The spec's optimizer as one of Burn's, configured with PyTorch's meaning
//! of every argument (Burn's own defaults differ: AdamW's eps and weight
//! decay, SGD's dampening, RMSprop's momentum and eps).

use burn::module::ParamId;
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::decay::WeightDecayConfig;
use burn::optim::momentum::MomentumConfig;
use burn::optim::momentum::MomentumState;
use burn::optim::record::AdaptorRecord;
use burn::optim::SimpleOptimizer;
use burn::optim::{
    Adam, AdamConfig, AdamState, AdamW, AdamWConfig, AdamWState, AdaptiveMomentumState, CenteredState, GradientsParams,
    Optimizer as _, RmsProp, RmsPropConfig, RmsPropMomentumState, RmsPropState, Sgd, SgdConfig, SgdState,
    SquareAvgState,
};
use burn::record::{FullPrecisionSettings, NamedMpkBytesRecorder, Record, Recorder};
use burn::tensor::{Tensor, TensorData as BurnData};
use burn::DispatchDevice;
use kynml_cpu::ParamState;

use crate::checkpoint::{NamedTensor, TensorData};
use crate::model::Model;
use crate::spec::types::Optimizer;
use kynml_backend::Backend as Kb;

type M = Model<Kb>;

/// One of Burn's optimizers, chosen at run time.
#[derive(Clone)]
pub enum AnyOptimizer {
    /// The spec's `adamw`.
    AdamW(OptimizerAdaptor<AdamW, M, Kb>),
    /// The spec's `adam`.
    Adam(OptimizerAdaptor<Adam, M, Kb>),
    /// The spec's `sgd`.
    Sgd(OptimizerAdaptor<Sgd<Kb>, M, Kb>),
    /// The spec's `rmsprop`.
    RmsProp(OptimizerAdaptor<RmsProp, M, Kb>),
}

impl AnyOptimizer {
    /// The optimizer `spec` names, its arguments read as PyTorch reads them; the learning rate is
    /// given to each [`step`](Self::step) instead.
    pub fn new(spec: &Optimizer) -> Self {
        let decay = |wd: f64| (wd > 0.0).then(|| WeightDecayConfig::new(wd as f32));
        match *spec {
            Optimizer::AdamW { beta1, beta2, eps, weight_decay, .. } => AnyOptimizer::AdamW(
                AdamWConfig::new()
                    .with_beta_1(beta1 as f32)
                    .with_beta_2(beta2 as f32)
                    .with_epsilon(eps as f32)
                    .with_weight_decay(weight_decay as f32)
                    .init(),
            ),
            Optimizer::Adam { beta1, beta2, eps, weight_decay, .. } => AnyOptimizer::Adam(
                AdamConfig::new()
                    .with_beta_1(beta1 as f32)
                    .with_beta_2(beta2 as f32)
                    .with_epsilon(eps as f32)
                    .with_weight_decay(decay(weight_decay))
                    .init(),
            ),
            Optimizer::Sgd { momentum, dampening, weight_decay, nesterov, .. } => {
                let momentum = (momentum > 0.0).then_some(MomentumConfig { momentum, dampening, nesterov });
                AnyOptimizer::Sgd(
                    SgdConfig::new().with_momentum(momentum).with_weight_decay(decay(weight_decay)).init(),
                )
            }
            Optimizer::RmsProp { alpha, eps, weight_decay, momentum, centered, .. } => AnyOptimizer::RmsProp(
                RmsPropConfig::new()
                    .with_alpha(alpha as f32)
                    .with_epsilon(eps as f32)
                    .with_momentum(momentum as f32)
                    .with_centered(centered)
                    .with_weight_decay(decay(weight_decay))
                    .init(),
            ),
        }
    }

    /// One update of every parameter that has a gradient.
    pub fn step(&mut self, lr: f64, model: M, grads: GradientsParams) -> M {
        match self {
            AnyOptimizer::AdamW(o) => o.step(lr, model, grads),
            AnyOptimizer::Adam(o) => o.step(lr, model, grads),
            AnyOptimizer::Sgd(o) => o.step(lr, model, grads),
            AnyOptimizer::RmsProp(o) => o.step(lr, model, grads),
        }
    }

    /// The optimizer's name as the spec writes it.
    pub fn name(&self) -> &'static str {
        match self {
            AnyOptimizer::AdamW(_) => "adamw",
            AnyOptimizer::Adam(_) => "adam",
            AnyOptimizer::Sgd(_) => "sgd",
            AnyOptimizer::RmsProp(_) => "rmsprop",
        }
    }

    /// The per-parameter state (moments, step counts), one byte tensor per
    /// parameter named `{prefix}{param name}`, in `params` order so that the
    /// same state always gives the same bytes. Each holds Burn's record of
    /// that parameter's state in MessagePack: plain data, loaded without
    /// running any code. Parameters with no state yet (no step taken) are
    /// left out.
    pub fn state_tensors(&self, params: &[(ParamId, String)], prefix: &str) -> Vec<NamedTensor> {
        match self {
            AnyOptimizer::AdamW(o) => encode_state(o, params, prefix),
            AnyOptimizer::Adam(o) => encode_state(o, params, prefix),
            AnyOptimizer::Sgd(o) => encode_state(o, params, prefix),
            AnyOptimizer::RmsProp(o) => encode_state(o, params, prefix),
        }
    }

    /// This optimizer with the state [`state_tensors`](Self::state_tensors)
    /// saved, attached to `params` (the ids of the model it will step).
    pub fn with_state(
        self,
        stored: &[NamedTensor],
        params: &[(ParamId, String)],
        prefix: &str,
        device: &DispatchDevice,
    ) -> Result<Self, String> {
        Ok(match self {
            AnyOptimizer::AdamW(o) => AnyOptimizer::AdamW(decode_state(o, stored, params, prefix, device)?),
            AnyOptimizer::Adam(o) => AnyOptimizer::Adam(decode_state(o, stored, params, prefix, device)?),
            AnyOptimizer::Sgd(o) => AnyOptimizer::Sgd(decode_state(o, stored, params, prefix, device)?),
            AnyOptimizer::RmsProp(o) => AnyOptimizer::RmsProp(decode_state(o, stored, params, prefix, device)?),
        })
    }
}

fn recorder() -> NamedMpkBytesRecorder<FullPrecisionSettings> {
    NamedMpkBytesRecorder::new()
}

fn encode_state<O: SimpleOptimizer<Kb>>(
    optimizer: &OptimizerAdaptor<O, M, Kb>,
    params: &[(ParamId, String)],
    prefix: &str,
) -> Vec<NamedTensor> {
    let mut records = optimizer.to_record();
    params.iter().filter_map(|(id, name)| Some(encoded(records.remove(id)?, prefix, name))).collect()
}

/// One parameter's record as the checkpoint stores it: MessagePack bytes
/// named `{prefix}{name}`.
fn encoded<O: SimpleOptimizer<Kb>>(record: AdaptorRecord<O, Kb>, prefix: &str, name: &str) -> NamedTensor {
    // Encoding plain numbers to MessagePack cannot fail.
    let bytes = Recorder::<Kb>::record(&recorder(), record, ()).unwrap_or_default();
    NamedTensor::bytes(format!("{prefix}{name}"), bytes)
}

fn decode_state<O: SimpleOptimizer<Kb>>(
    optimizer: OptimizerAdaptor<O, M, Kb>,
    stored: &[NamedTensor],
    params: &[(ParamId, String)],
    prefix: &str,
    device: &DispatchDevice,
) -> Result<OptimizerAdaptor<O, M, Kb>, String> {
    // Burn's own map type, empty.
    let mut records = optimizer.to_record();
    records.clear();
    for (id, name) in params {
        let full = format!("{prefix}{name}");
        let Some(t) = stored.iter().find(|t| t.name == full) else { continue };
        let TensorData::U8(bytes) = &t.data else {
            return Err(format!("optimizer state `{full}` is {}, expected bytes", t.data.dtype()));
        };
        let record: AdaptorRecord<O, Kb> = Recorder::<Kb>::load(&recorder(), bytes.clone(), device)
            .map_err(|e| format!("optimizer state `{full}` cannot be read: {e}"))?;
        records.insert(*id, record);
    }
    Ok(optimizer.load_record(records))
}

/// Moving one parameter's state between Burn's optimizer record and the
/// native engine's [`ParamState`], field for field.
trait NativeState: SimpleOptimizer<Kb> {
    fn to_native<const D: usize>(state: Self::State<D>, device: &DispatchDevice) -> ParamState;
    fn from_native<const D: usize>(state: &ParamState, shape: &[usize], device: &DispatchDevice) -> Self::State<D>;
}

fn host<const D: usize>(t: Tensor<Kb, D>) -> Vec<f32> {
    t.into_data().convert::<f32>().into_vec::<f32>().unwrap_or_default()
}

/// Optimizer state on `device`. On an autodiff device it is the inner
/// tensor, as a step's own state is: Burn tags each tensor with its autodiff
/// device's checkpointing strategy (`checkpoint_activations`) and refuses to
/// add two of different strategies, so state made on the plain device
/// could not meet a checkpointed run's gradients.
fn device_tensor<const D: usize>(values: &[f32], shape: &[usize], device: &DispatchDevice) -> Tensor<Kb, D> {
    let t = Tensor::from_data(BurnData::new(values.to_vec(), shape.to_vec()), device);
    if matches!(device, DispatchDevice::Autodiff(_)) {
        t.inner()
    } else {
        t
    }
}

/// Reads a field Burn keeps private through its record item, whose fields are public.
fn item_tensor<const D: usize>(
    item: <Tensor<Kb, D> as Record<Kb>>::Item<FullPrecisionSettings>,
    device: &DispatchDevice,
) -> Vec<f32> {
    host(<Tensor<Kb, D> as Record<Kb>>::from_item::<FullPrecisionSettings>(item, device))
}

fn adaptive_to_native<const D: usize>(m: AdaptiveMomentumState<Kb, D>) -> ParamState {
    ParamState::Adaptive { time: m.time, moment_1: host(m.moment_1), moment_2: host(m.moment_2) }
}

fn adaptive_from_native<const D: usize>(
    state: &ParamState,
    shape: &[usize],
    device: &DispatchDevice,
) -> AdaptiveMomentumState<Kb, D> {
    let ParamState::Adaptive { time, moment_1, moment_2 } = state else {
        panic!("adam state expected, the native engine holds {state:?}");
    };
    AdaptiveMomentumState::new(*time, device_tensor(moment_1, shape, device), device_tensor(moment_2, shape, device))
}

impl NativeState for AdamW {
    fn to_native<const D: usize>(state: Self::State<D>, _: &DispatchDevice) -> ParamState {
        adaptive_to_native(state.momentum)
    }
    fn from_native<const D: usize>(state: &ParamState, shape: &[usize], device: &DispatchDevice) -> Self::State<D> {
        AdamWState::new(adaptive_from_native(state, shape, device))
    }
}

impl NativeState for Adam {
    fn to_native<const D: usize>(state: Self::State<D>, _: &DispatchDevice) -> ParamState {
        adaptive_to_native(state.momentum)
    }
    fn from_native<const D: usize>(state: &ParamState, shape: &[usize], device: &DispatchDevice) -> Self::State<D> {
        AdamState::new(adaptive_from_native(state, shape, device))
    }
}

impl NativeState for Sgd<Kb> {
    fn to_native<const D: usize>(state: Self::State<D>, device: &DispatchDevice) -> ParamState {
        let velocity =
            state.momentum.map(|m| item_tensor::<D>(m.into_item::<FullPrecisionSettings>().velocity, device));
        ParamState::Sgd { velocity }
    }
    fn from_native<const D: usize>(state: &ParamState, shape: &[usize], device: &DispatchDevice) -> Self::State<D> {
        let ParamState::Sgd { velocity } = state else {
            panic!("sgd state expected, the native engine holds {state:?}");
        };
        SgdState::new(velocity.as_ref().map(|v| MomentumState::new(device_tensor(v, shape, device))))
    }
}

impl NativeState for RmsProp {
    fn to_native<const D: usize>(state: Self::State<D>, device: &DispatchDevice) -> ParamState {
        ParamState::RmsProp {
            square_avg: host(state.square_avg.square_avg),
            grad_avg: state.centered.grad_avg.map(host),
            avg: host(state.centered.avg),
            buf: state.momentum.map(|m| item_tensor::<D>(m.into_item::<FullPrecisionSettings>().buf, device)),
        }
    }
    fn from_native<const D: usize>(state: &ParamState, shape: &[usize], device: &DispatchDevice) -> Self::State<D> {
        let ParamState::RmsProp { square_avg, grad_avg, avg, buf } = state else {
            panic!("rmsprop state expected, the native engine holds {state:?}");
        };
        let t = |v: &Vec<f32>| device_tensor::<D>(v, shape, device);
        RmsPropState::new(
            SquareAvgState::new(t(square_avg)),
            CenteredState::new(grad_avg.as_ref().map(t), t(avg)),
            buf.as_ref().map(|b| RmsPropMomentumState::new(t(b))),
        )
    }
}

fn states_to_native<O: NativeState>(
    optimizer: &OptimizerAdaptor<O, M, Kb>,
    params: &[(ParamId, String)],
    shapes: &[Vec<usize>],
    device: &DispatchDevice,
) -> Result<Vec<Option<ParamState>>, String> {
    let mut records = optimizer.to_record();
    params
        .iter()
        .zip(shapes)
        .map(|((id, name), shape)| {
            let Some(record) = records.remove(id) else { return Ok(None) };
            let state = match shape.len() {
                1 => O::to_native(record.into_state::<1>(), device),
                2 => O::to_native(record.into_state::<2>(), device),
                3 => O::to_native(record.into_state::<3>(), device),
                4 => O::to_native(record.into_state::<4>(), device),
                r => return Err(format!("parameter `{name}` has rank {r}; the native engine takes 1 to 4")),
            };
            let len: usize = shape.iter().product();
            if !state_fits(&state, len) {
                return Err(format!("the optimizer state of `{name}` does not have the parameter's {len} values"));
            }
            Ok(Some(state))
        })
        .collect()
}

/// True when every vector of `state` holds `len` values.
fn state_fits(state: &ParamState, len: usize) -> bool {
    let fits = |v: &Vec<f32>| v.len() == len;
    match state {
        ParamState::Adaptive { moment_1, moment_2, .. } => fits(moment_1) && fits(moment_2),
        ParamState::Sgd { velocity } => velocity.as_ref().is_none_or(fits),
        ParamState::RmsProp { square_avg, grad_avg, avg, buf } => {
            fits(square_avg) && fits(avg) && grad_avg.as_ref().is_none_or(fits) && buf.as_ref().is_none_or(fits)
        }
    }
}

fn states_from_native<O: NativeState>(
    optimizer: OptimizerAdaptor<O, M, Kb>,
    params: &[(ParamId, String)],
    shapes: &[Vec<usize>],
    states: &[Option<&ParamState>],
    device: &DispatchDevice,
) -> OptimizerAdaptor<O, M, Kb> {
    let mut records = optimizer.to_record();
    records.clear();
    for (((id, _), shape), state) in params.iter().zip(shapes).zip(states) {
        let Some(state) = state else { continue };
        records.insert(*id, record_of_native::<O>(state, shape, device));
    }
    optimizer.load_record(records)
}

/// Burn's record of one parameter's native `state` (of `shape`).
fn record_of_native<O: NativeState>(
    state: &ParamState,
    shape: &[usize],
    device: &DispatchDevice,
) -> AdaptorRecord<O, Kb> {
    // Ranks 1 to 4, as parameters have (a convolution's weight has 4).
    match shape.len() {
        1 => AdaptorRecord::from_state::<1>(O::from_native::<1>(state, shape, device)),
        2 => AdaptorRecord::from_state::<2>(O::from_native::<2>(state, shape, device)),
        3 => AdaptorRecord::from_state::<3>(O::from_native::<3>(state, shape, device)),
        _ => AdaptorRecord::from_state::<4>(O::from_native::<4>(state, shape, device)),
    }
}

/// What [`AnyOptimizer::state_tensors`] saves for an optimizer holding the
/// native `states`, made a parameter at a time.
fn native_state_tensors_of<O: NativeState>(
    params: &[(ParamId, String)],
    shapes: &[Vec<usize>],
    states: &[Option<&ParamState>],
    prefix: &str,
    device: &DispatchDevice,
) -> Vec<NamedTensor> {
    let each = params.iter().zip(shapes).zip(states);
    each.filter_map(|(((_, name), shape), state)| {
        Some(encoded(record_of_native::<O>((*state)?, shape, device), prefix, name))
    })
    .collect()
}

impl AnyOptimizer {
    /// Each parameter's state as the native engine keeps it, in `params`
    /// order (`shapes` gives each one's shape); `None` where no step was
    /// taken yet.
    pub fn native_states(
        &self,
        params: &[(ParamId, String)],
        shapes: &[Vec<usize>],
        device: &DispatchDevice,
    ) -> Result<Vec<Option<ParamState>>, String> {
        match self {
            AnyOptimizer::AdamW(o) => states_to_native(o, params, shapes, device),
            AnyOptimizer::Adam(o) => states_to_native(o, params, shapes, device),
            AnyOptimizer::Sgd(o) => states_to_native(o, params, shapes, device),
            AnyOptimizer::RmsProp(o) => states_to_native(o, params, shapes, device),
        }
    }

    /// What [`state_tensors`](Self::state_tensors) saves for this kind of
    /// optimizer holding the native engine's `states` (in `params` order, of
    /// `shapes`), made a parameter at a time: without the whole state copied
    /// into an optimizer first, a save holds one more copy of it, not two.
    ///
    /// # Panics
    /// If a state belongs to another optimizer.
    pub fn native_state_tensors(
        &self,
        params: &[(ParamId, String)],
        shapes: &[Vec<usize>],
        states: &[Option<&ParamState>],
        prefix: &str,
        device: &DispatchDevice,
    ) -> Vec<NamedTensor> {
        match self {
            AnyOptimizer::AdamW(_) => native_state_tensors_of::<AdamW>(params, shapes, states, prefix, device),
            AnyOptimizer::Adam(_) => native_state_tensors_of::<Adam>(params, shapes, states, prefix, device),
            AnyOptimizer::Sgd(_) => native_state_tensors_of::<Sgd<Kb>>(params, shapes, states, prefix, device),
            AnyOptimizer::RmsProp(_) => native_state_tensors_of::<RmsProp>(params, shapes, states, prefix, device),
        }
    }

    /// This optimizer holding the native engine's `states` (in `params`
    /// order, of `shapes`), keyed by `params`' ids.
    ///
    /// # Panics
    /// If a state belongs to another optimizer.
    pub fn with_native_states(
        self,
        params: &[(ParamId, String)],
        shapes: &[Vec<usize>],
        states: &[Option<&ParamState>],
        device: &DispatchDevice,
    ) -> Self {
        match self {
            AnyOptimizer::AdamW(o) => AnyOptimizer::AdamW(states_from_native(o, params, shapes, states, device)),
            AnyOptimizer::Adam(o) => AnyOptimizer::Adam(states_from_native(o, params, shapes, states, device)),
            AnyOptimizer::Sgd(o) => AnyOptimizer::Sgd(states_from_native(o, params, shapes, states, device)),
            AnyOptimizer::RmsProp(o) => AnyOptimizer::RmsProp(states_from_native(o, params, shapes, states, device)),
        }
    }
}
