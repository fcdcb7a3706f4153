//! What a run leaves for people to look at: TensorBoard event files and
//! (with [`RunLog`]) per-epoch metrics, written as training goes.

mod run_log;
pub mod tensorboard;

pub use run_log::RunLog;
