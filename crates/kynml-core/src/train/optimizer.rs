//! The spec's optimizer as one of Burn's, configured with PyTorch's meaning
//! of every argument (Burn's own defaults differ: AdamW's eps and weight
//! decay, SGD's dampening, RMSprop's momentum and eps).

use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::decay::WeightDecayConfig;
use burn::optim::momentum::MomentumConfig;
use burn::optim::{
    Adam, AdamConfig, AdamW, AdamWConfig, GradientsParams, Optimizer as _, RmsProp, RmsPropConfig, Sgd, SgdConfig,
};

use crate::model::Model;
use crate::spec::types::Optimizer;
use kynml_backend::Backend as Kb;

type M = Model<Kb>;

/// One of Burn's optimizers, chosen at run time.
#[derive(Clone)]
pub enum AnyOptimizer {
    AdamW(OptimizerAdaptor<AdamW, M, Kb>),
    Adam(OptimizerAdaptor<Adam, M, Kb>),
    Sgd(OptimizerAdaptor<Sgd<Kb>, M, Kb>),
    RmsProp(OptimizerAdaptor<RmsProp, M, Kb>),
}

impl AnyOptimizer {
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
}
