//! Training: the loop, its losses, optimizers, schedules and early stopping.
//!
//! [`train`] runs a validated [`Spec`](crate::spec::types::Spec) on a
//! [`Dataset`](crate::data::Dataset) and reports through a callback; it
//! prints nothing itself.

/// `$f::<D>(args)` for a parameter of rank `$rank`: Burn's tensors carry
/// their rank in their type, and parameters have ranks 1 to 4 (a
/// convolution's weight has 4).
macro_rules! by_rank {
    ($rank:expr, $f:ident($($arg:expr),* $(,)?)) => {
        match $rank {
            4 => $f::<4>($($arg),*),
            3 => $f::<3>($($arg),*),
            2 => $f::<2>($($arg),*),
            _ => $f::<1>($($arg),*),
        }
    };
}

pub mod engine;
mod events;
pub mod gpu_monitor;
pub mod loss;
pub mod loss_scale;
pub mod memory;
pub mod native;
mod optimizer;
pub mod parallel;
pub mod precision;
pub mod resume;
pub mod schedule;
pub mod strategy;
mod trainer;
pub mod update;

pub mod profile;
pub use events::{EpochRecord, TrainEvent};
pub use native::{EngineChoice, EngineKind};
pub use optimizer::AnyOptimizer;
pub use strategy::{Checkpointing, EarlyStopper, EarlyStopping, EveryEpochs, Verdict};
pub use trainer::{device_kind, metrics_for, train, Reached, Task, TrainError, TrainResult, TrainSettings};
