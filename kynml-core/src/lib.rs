//! KynML's engine as a library: the `.kyn` language, CSV data, the model
//! graph, training, checkpoints, evaluation, export and prediction. It prints
//! nothing; progress arrives through a callback and results as values.
//!
//! The three things a service does with it:
//!
//! 1. **Read a spec** from a file ([`plan::SpecFile::load`]) or a string
//!    ([`plan::SpecFile::from_source`]); every problem comes back at once as
//!    located diagnostics ([`spec::render`] prints them as `kynml` does).
//! 2. **Train** with [`train::train`], which reports [`train::TrainEvent`]s
//!    (epochs, steps, checkpoints) to a callback as it goes. Its settings
//!    from [`plan::SpecFile::train_settings`] checkpoint where the spec says,
//!    relative to the spec's folder, and resume from a checkpoint already
//!    there, as `kynml train` does; [`plan::SpecFile::check_memory_for`]
//!    tells before it whether the run fits the device.
//! 3. **Predict** with [`predict::Predictor`], from the model just trained or
//!    from a run folder or export on disk ([`export::load`]), on raw rows
//!    in memory.
//!
//! ```
//! use kynml_core::export;
//! use kynml_core::plan::SpecFile;
//! use kynml_core::predict::Predictor;
//! use kynml_core::train::{train, TrainEvent, TrainSettings};
//!
//! let mut spec = SpecFile::load("../examples/iris/iris.kyn".as_ref())?;
//! let data = spec.load_data()?;
//! let device = kynml_backend::select(kynml_backend::DeviceChoice::Cpu)?;
//!
//! let settings: TrainSettings = spec.train_settings(&data, false)?;
//! let mut epochs = 0;
//! let result = train(&spec.spec, &data, &device, &settings, &mut |event| {
//!     if let TrainEvent::EpochEnd(record) = event {
//!         epochs += 1;
//!         assert!(record.val_loss.is_finite());
//!     }
//! })?;
//! assert_eq!(epochs, spec.spec.train.epochs.value);
//! assert!(result.final_metrics["accuracy"] > 0.8);
//!
//! // The trained model with its normalisation and class names, ready to serve.
//! let model = export::from_model(&result.model, &spec.spec.model, &data.info, spec.spec.train.loss.value);
//! let predictor = Predictor::new(model, &device)?;
//! let rows = [5.1, 3.5, 1.4, 0.2, 6.9, 3.1, 5.4, 2.1]; // two flowers, raw measurements in cm
//! let p = predictor.predict(&rows)?;
//! assert_eq!(p.labels.unwrap(), ["setosa", "virginica"]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! On a GPU, the kernels a run tunes and compiles are kept in a cache
//! ([`kynml_backend::kernel_cache`]); call
//! [`kynml_backend::kernel_cache::seal`] after training, as `kynml` does, so
//! that the next process trusts and reuses them.
//!
//! What an embedding service should know:
//! - [`train::train`] runs on the device it is given, and on
//!   [`train::TrainSettings::replicas`] for a data-parallel run: a spec's
//!   `devices` and `autotune` are the caller's to apply (`kynml` selects
//!   each device with [`kynml_backend::select`] and hands `autotune` to
//!   [`kynml_backend::kernel_cache::set_autotune`] first).
//! - Some settings hold for the whole process: the kernel cache is set up
//!   once, for the first GPU model selected, and the first autotune level
//!   set is the one CubeCL keeps.
//! - A device failure inside Burn (a GPU out of memory) is a panic that
//!   [`predict::Predictor`] catches and returns as an error; [`train::train`]
//!   does not: run it under [`std::panic::catch_unwind`]. Build with
//!   `panic = "unwind"` (Rust's default), or such a failure aborts the
//!   process. The first caught panic installs a panic hook that keeps the
//!   panics KynML catches quiet and hands every other to the hook set
//!   before it; a hook set after it sees the caught ones too.
//! - [`train::train`] blocks the calling thread until the run ends (from
//!   async code, call it where blocking is allowed, such as Tokio's
//!   `spawn_blocking`); [`train::TrainSettings::stop`] ends it between steps.
//! - On the CPU, a run (and each network a [`predict::Predictor`] runs)
//!   keeps a team of as many threads as rayon's current pool has, which
//!   spin briefly between steps: several runs at once share the cores, so
//!   run each inside a `rayon::ThreadPool::install` of the size it may use.
//! - A spec's `export:` block is `kynml`'s to apply: the library's
//!   [`train::train`] returns the model, and [`export`] writes it.
//! - Environment read by the library: `KYNML_CACHE` (the kernel cache's
//!   folder), `KYNML_MATMUL_EPILOGUE` (an experiment of the GPU bench:
//!   `fused` fuses the dense layers' epilogues), CubeCL's own `CUBECL_*`
//!   and its `cubecl.toml` or `burn.toml` in the working folder, and
//!   rayon's `RAYON_NUM_THREADS`.

#![warn(missing_docs)]

pub mod atomic_file;
pub mod bench;
pub mod checkpoint;
pub mod data;
pub mod evaluate;
pub mod export;
pub mod metrics;
pub mod model;
pub mod plan;
pub mod predict;
mod protobuf;
pub mod report;
pub mod rng;
pub mod run_dir;
pub mod spec;
pub mod train;
