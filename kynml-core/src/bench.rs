//! How fast a spec trains on a device: a warm-up round, then timed rounds of
//! the same number of steps. `kynml bench`, `kynml warmup` and `cargo bench`
//! run this code, so a GPU machine with only the release binary measures
//! exactly what the project's benches do.
//!
//! A round is an epoch cut to `steps` steps, followed by its validation pass
//! (not timed). Its samples/s count the steps alone and end with the loss
//! read back from the device, so queued GPU work is inside the timing, not
//! just its launch.
//!
//! ```no_run
//! # use kynml_core::{bench, plan::SpecFile, data::synthetic_for};
//! let file = SpecFile::load("examples/deepnet/deepnet.kyn".as_ref())?;
//! let data = synthetic_for(&file.spec, 65_536, 0)?;
//! let device = kynml_backend::select(kynml_backend::DeviceChoice::Auto)?;
//! let report = bench::run(&file.spec, &data, &device, &bench::BenchOptions::default(), &mut |_| {})?;
//! println!("{:.0} samples/s", report.samples_per_sec);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::time::Instant;

use kynml_backend::{Device, DeviceMemory};

use crate::data::Dataset;
use crate::spec::types::Spec;
use crate::train::precision::{Compute, PrecisionPlan};
use crate::train::{train, EngineChoice, EngineKind, TrainError, TrainEvent, TrainSettings};

/// What to measure.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Steps in each round, the warm-up round included.
    pub steps: usize,
    /// Timed rounds after the warm-up round (at least 1).
    pub rounds: usize,
    /// The precision to run; `None` takes the spec's, as `kynml train` would.
    pub precision: Option<PrecisionPlan>,
    /// Which engine runs the steps.
    pub engine: EngineChoice,
    /// The other devices of a data-parallel run ([`TrainSettings::replicas`]).
    pub replicas: Vec<Device>,
    /// How the weights are updated ([`TrainSettings::update`]); `None` as the spec says.
    pub update: Option<crate::train::update::Update>,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            steps: 50,
            rounds: 3,
            precision: None,
            engine: EngineChoice::Auto,
            replicas: Vec::new(),
            update: None,
        }
    }
}

/// What was measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BenchReport {
    /// The device, as [`Device::describe`] says it.
    pub device: String,
    /// The engine that ran the steps.
    #[serde(serialize_with = "engine_name")]
    pub engine: EngineKind,
    /// The precision that ran.
    #[serde(serialize_with = "compute_name")]
    pub precision: Compute,
    /// Rows per step: the spec's batch, or all the training rows when
    /// they are fewer.
    pub batch: usize,
    /// Steps in each round (fewer than asked when the data is short).
    pub steps: usize,
    /// Seconds from the start to the end of the first step: the first
    /// kernels' autotune and compilation, or none on a warm cache.
    pub first_step_secs: f64,
    /// Seconds from the start to the end of the warm-up round and its
    /// validation pass: when steady speed is reached.
    pub startup_secs: f64,
    /// Training samples per second of each timed round.
    pub rounds: Vec<f64>,
    /// The median of `rounds` (of an even count, the mean of the middle two).
    pub samples_per_sec: f64,
    /// Milliseconds per step at that speed (a round's rows over its steps;
    /// a round's last step may hold fewer rows when the data is short).
    pub step_ms: f64,
    /// The largest device memory read after each round (CUDA and wgpu).
    pub peak_device_memory: Option<DeviceMemory>,
    /// The process's peak resident memory, in bytes, where the system says it.
    pub peak_host_bytes: Option<u64>,
    /// The training loss at the end of the last round: a bench that trains
    /// nothing is no bench.
    pub final_train_loss: f64,
    /// Multiply-adds of the model's products in one sample's forward pass
    /// ([`ModelSummary::multiply_adds`](crate::model::ModelSummary)).
    pub multiply_adds: u64,
    /// The products' arithmetic per second at the median round's speed:
    /// 2 FLOP a multiply-add, forward and backward's two products
    /// (`6 x multiply_adds x samples_per_sec`); element-wise work aside.
    pub flops_per_sec: f64,
}

fn engine_name<S: serde::Serializer>(e: &EngineKind, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(match e {
        EngineKind::Native => "native",
        EngineKind::Burn => "burn",
    })
}

fn compute_name<S: serde::Serializer>(c: &Compute, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(c.name())
}

/// Runs the warm-up and timed rounds of `spec` on `data` and `device`. The
/// spec's checkpoints and early stopping are left out; nothing is written.
/// `on_event` sees the training events, for progress.
pub fn run(
    spec: &Spec,
    data: &Dataset,
    device: &Device,
    options: &BenchOptions,
    on_event: &mut dyn FnMut(&TrainEvent),
) -> Result<BenchReport, TrainError> {
    let mut spec = spec.clone();
    let rounds = options.rounds.max(1);
    spec.train.epochs.value = 1 + rounds;
    spec.train.checkpoint = None;
    spec.train.early_stop = None;
    let settings = TrainSettings {
        max_steps_per_epoch: Some(options.steps.max(1)),
        precision: options.precision.clone(),
        engine: options.engine,
        replicas: options.replicas.clone(),
        update: options.update,
        ..TrainSettings::default()
    };
    let started = Instant::now();
    let (mut first_step, mut startup, mut steps) = (None, None, 0);
    let mut peak: Option<DeviceMemory> = None;
    let result = train(&spec, data, device, &settings, &mut |event| {
        match &event {
            TrainEvent::EpochStart { steps: n, .. } => steps = *n,
            TrainEvent::Step { .. } if first_step.is_none() => first_step = Some(started.elapsed().as_secs_f64()),
            TrainEvent::EpochEnd(record) => {
                if record.epoch == 1 {
                    startup = Some(started.elapsed().as_secs_f64());
                }
                if let Some(now) = device.memory() {
                    peak = Some(peak.map_or(now, |p| p.max(now)));
                }
            }
            _ => {}
        }
        on_event(&event);
    })?;
    let mut timed: Vec<f64> = result.history.iter().skip(1).map(|r| r.samples_per_sec).collect();
    let rounds_measured = timed.clone();
    timed.sort_by(f64::total_cmp);
    // The median; of an even count, the mean of the middle two.
    let mid = timed.len() / 2;
    let samples_per_sec = match timed.len() {
        0 => f64::NAN,
        n if n % 2 == 0 => (timed[mid - 1] + timed[mid]) / 2.0,
        _ => timed[mid],
    };
    // Fewer training rows than a batch: every step holds all of them. Fewer
    // than the round's steps ask: the round ends when they are used.
    let n_train = data.train.len();
    let batch = spec.train.batch.value.min(n_train).max(1);
    let round_rows = n_train.min(steps.max(1) * batch);
    let multiply_adds = crate::model::summarize(&spec.model).multiply_adds;
    Ok(BenchReport {
        device: device.describe(),
        engine: result.engine,
        precision: result.precision.compute,
        batch,
        steps,
        first_step_secs: first_step.unwrap_or(f64::NAN),
        startup_secs: startup.unwrap_or(f64::NAN),
        rounds: rounds_measured,
        samples_per_sec,
        step_ms: 1e3 * round_rows as f64 / steps.max(1) as f64 / samples_per_sec,
        multiply_adds,
        flops_per_sec: 6.0 * multiply_adds as f64 * samples_per_sec,
        peak_device_memory: peak,
        peak_host_bytes: peak_rss(),
        final_train_loss: result.history.last().map_or(f64::NAN, |r| r.train_loss),
    })
}

/// The process's peak resident set (`VmHWM`), on Linux.
pub fn peak_rss() -> Option<u64> {
    kynml_backend::proc_bytes("/proc/self/status", "VmHWM")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::synthetic_for;

    #[test]
    fn rounds_are_timed_after_a_warm_up_and_the_model_learns() {
        let text = "dataset D:\n    source = csv(\"d.csv\")\n    target = \"y\"\nmodel M:\n    input 16\n    dense 32 relu\n    dense 4 linear\n\
                    train:\n    model = M\n    data = D\n    loss = cross_entropy\n    optimizer = adam(lr=0.01)\n    epochs = 9\n    batch = 64\n";
        let spec = crate::spec::parse_spec(text).unwrap();
        let data = synthetic_for(&spec, 4000, 3).unwrap();
        let device = Device::cpu();
        let options = BenchOptions { steps: 20, rounds: 3, ..BenchOptions::default() };
        let mut epochs = 0;
        let report = run(&spec, &data, &device, &options, &mut |e| {
            if let TrainEvent::EpochEnd(_) = e {
                epochs += 1;
            }
        })
        .unwrap();
        assert_eq!(epochs, 4, "one warm-up round and three timed ones");
        assert_eq!((report.steps, report.batch, report.rounds.len()), (20, 64, 3));
        assert!(report.rounds.iter().all(|r| r.is_finite() && *r > 0.0));
        assert!(report.rounds.contains(&report.samples_per_sec));
        assert!(report.first_step_secs <= report.startup_secs);
        assert!(report.peak_device_memory.is_none(), "the CPU has no device memory of its own");
        assert!(report.peak_host_bytes.is_some_and(|b| b > 0));
        // 80 steps of Adam on a learnable target: well under ln(4) = 1.39.
        assert!(report.final_train_loss < 1.2, "{}", report.final_train_loss);
        let step = 1e3 * 64.0 / report.samples_per_sec;
        assert!((report.step_ms - step).abs() < 1e-9 * step, "{} against {step}", report.step_ms);
    }

    #[test]
    fn short_data_reports_the_steps_and_rows_that_ran() {
        let text = "dataset D:\n    source = csv(\"d.csv\")\n    target = \"y\"\nmodel M:\n    input 4\n    dense 1 linear\n\
                    train:\n    model = M\n    data = D\n    loss = mse\n    optimizer = sgd(lr=0.01)\n    epochs = 9\n    batch = 64\n";
        let spec = crate::spec::parse_spec(text).unwrap();
        // Fewer training rows than one batch: one step of all of them a round.
        let data = synthetic_for(&spec, 50, 3).unwrap();
        let n = data.train.len();
        assert!(n < 64);
        let options = BenchOptions { steps: 5, rounds: 1, ..BenchOptions::default() };
        let report = run(&spec, &data, &Device::cpu(), &options, &mut |_| {}).unwrap();
        assert_eq!((report.steps, report.batch), (1, n));
        let step = 1e3 * n as f64 / report.samples_per_sec;
        assert!((report.step_ms - step).abs() < 1e-9 * step, "{} against {step}", report.step_ms);
        // Rows for two full steps and a part: three steps, the last short.
        let data = synthetic_for(&spec, 200, 3).unwrap();
        let n = data.train.len();
        assert!(n > 128 && n < 192, "{n}");
        let report = run(&spec, &data, &Device::cpu(), &options, &mut |_| {}).unwrap();
        assert_eq!((report.steps, report.batch), (3, 64));
        let step = 1e3 * n as f64 / 3.0 / report.samples_per_sec;
        assert!((report.step_ms - step).abs() < 1e-9 * step, "{} against {step}", report.step_ms);
    }
}
