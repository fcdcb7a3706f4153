//! The spec's optimizer as one of Burn's, configured with PyTorch's meaning
//! of every argument (Burn's own defaults differ: AdamW's eps and weight
//! decay, SGD's dampening, RMSprop's momentum and eps).

use burn::module::ParamId;
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::decay::WeightDecayConfig;
use burn::optim::momentum::MomentumConfig;
use burn::optim::record::AdaptorRecord;
use burn::optim::SimpleOptimizer;
use burn::optim::{
    Adam, AdamConfig, AdamW, AdamWConfig, GradientsParams, Optimizer as _, RmsProp, RmsPropConfig, Sgd, SgdConfig,
};
use burn::record::{FullPrecisionSettings, NamedMpkBytesRecorder, Recorder};
use burn::DispatchDevice;

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
    params
        .iter()
        .filter_map(|(id, name)| {
            let record = records.remove(id)?;
            // Encoding plain numbers to MessagePack cannot fail.
            let bytes = Recorder::<Kb>::record(&recorder(), record, ()).unwrap_or_default();
            Some(NamedTensor::bytes(format!("{prefix}{name}"), bytes))
        })
        .collect()
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
