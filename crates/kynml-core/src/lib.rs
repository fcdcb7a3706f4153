//! KynML's engine as a library: the `.kyn` language, CSV data, the model
//! graph, training and evaluation. It prints nothing; progress arrives
//! through a callback and results as values.
//!
//! ```no_run
//! use kynml_core::plan::SpecFile;
//! use kynml_core::train::{train, TrainSettings};
//!
//! let spec = SpecFile::load("examples/iris/iris.kyn".as_ref())?;
//! let data = spec.load_data()?;
//! let device = kynml_backend::select(kynml_backend::DeviceChoice::Cpu)?;
//! let result = train(&spec.spec, &data, &device, &TrainSettings::default(), &mut |_event| {})?;
//! println!("{:?}", result.final_metrics);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod checkpoint;
pub mod data;
pub mod evaluate;
pub mod export;
pub mod metrics;
pub mod model;
pub mod plan;
pub mod predict;
pub mod report;
pub mod rng;
pub mod run_dir;
pub mod spec;
pub mod train;
