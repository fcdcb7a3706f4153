//! What a run leaves for people to look at: training curves (SVG and PNG),
//! TensorBoard event files and, through [`RunLog`], per-epoch metrics written
//! as training goes.

pub mod curves;
pub mod profile_chart;
mod run_log;
pub mod tensorboard;

pub use run_log::{draw_curves, RunLog};
