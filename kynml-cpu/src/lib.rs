//! KynML's native CPU training engine.
//!
//! A `model` block of the `.kyn` language is a stack of layers: dense
//! layers (each followed by its activation), batch and layer normalisation,
//! dropout, embedding tables for categorical columns, residual blocks,
//! convolutions and pooling over channels, and over a text's positions token
//! embedding, learned positions, multi-head attention and the transformer
//! block. A convolution is one matrix product over the whole batch: the
//! input's patches (im2col) times the weights.
//! On the CPU, this crate trains such a stack with its forward and backward
//! passes written out by hand, in the style of llm.c: every buffer is
//! allocated once and reused, the matrix products go to the `gemm` crate on
//! all cores, and each elementwise stage (bias, activation, normalisation,
//! dropout, the optimizer's update) is one pass over memory, split across
//! the cores.
//!
//! It does the same arithmetic as KynML's Burn engine: the same layers,
//! losses and optimizers with Burn's update rules, the same dropout masks
//! (drawn by the caller's [`MaskSource`]), and parameters named and laid
//! out as the Burn model names them (`{layer}.weight`, `[d_in, d_out]`), so
//! that weights and optimizer state move between the two engines. The two
//! are tested against each other in `kynml-core`.
//!
//! ```
//! use kynml_cpu::{Act, LayerConfig, LossConfig, Net, OptimConfig, Targets};
//!
//! let layers = [LayerConfig::Dense { units: 8, act: Act::Tanh, positions: 1 }, LayerConfig::Dense { units: 1, act: Act::Linear, positions: 1 }];
//! let mut net = Net::new(2, &layers);
//! // Initial weights come from the caller (KynML draws them with PyTorch's bounds).
//! for (i, t) in net.tensors_mut().into_iter().enumerate() {
//!     t.iter_mut().enumerate().for_each(|(j, v)| *v = ((i * 31 + j * 7) as f32).sin() * 0.5);
//! }
//! let adam = OptimConfig::Adam { beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.0 };
//! let x = [0.5, -1.0, 1.5, 2.0, -0.3, 0.8];
//! let y = [1.0, -1.0, 0.5];
//! let mut step = || net.train_step(&x, Targets::Values(&y), LossConfig::Mse, &adam, 0.01, &mut kynml_cpu::NoDropout);
//! let first = step();
//! let last = (0..300).map(|_| step()).last().unwrap();
//! assert!(last < first / 10.0, "{first} -> {last}");
//! ```

#![warn(missing_docs)]

mod conv;
mod gemm;
mod linear;
pub mod loss;
pub mod math;
mod net;
pub mod optim;
mod seq;
mod tables;
mod team;

pub use conv::Window;
pub use loss::{LossConfig, Targets};
pub use math::Act;
pub use net::{
    values_per_row, Clip, LayerConfig, MaskSource, Net, NoDropout, TensorInfo, BATCHNORM_MOMENTUM, NORM_EPS,
};
pub use optim::{OptimConfig, ParamState};
pub use team::Team;
