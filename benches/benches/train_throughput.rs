//! `cargo bench -p kynml-benches [-- SECTION...]` prints a table per
//! section, all together at the end; with no section named, all run.
//!
//! - `deepnet`: training throughput of the users' DeepNet spec
//!   (128→512→256→64→1, batch 256, AdamW) on seeded synthetic data, on every
//!   device and engine present (on the CPU the native engine and Burn's
//!   flex), in fp32, bf16 and fp16, with 0 and 4 data workers.
//! - `prefetch`: an input-bound case (wide rows, a linear model, big
//!   batches), where preparing batches costs as much as the step, with 0, 1,
//!   2 and 4 workers.
//! - `wide`: the compute-bound wide MLP in fp32, tf32, bf16 and fp16, on a
//!   CUDA GPU only (samples/s, step time, start-up, TFLOP/s).
//! - `profiling`: what timing costs on the CPU engine (DeepNet): the
//!   bookkeeping every run does without `--profile` (the wait for each batch,
//!   the epoch's time, the peak host memory), measured per step against the
//!   step itself; and the epoch time with `--profile` against without.
//! - `update`: the optimizer's update on Burn's devices, for DeepNet: Burn's
//!   AdamW, KynML's per parameter and KynML's fused (`fused=true`), in fp32
//!   and, where the device runs it, fp16 with loss scaling, where Burn's
//!   optimizer reads each step's overflow flag back and KynML's does not.
//! - `checkpoint`: a 6.3M-parameter model (75 MB checkpoints with Adam's
//!   moments) saved every epoch, synchronously and in the background: how
//!   long the loop waits per save, and how long the steps take while a
//!   write is in flight.
//!
//! Each throughput figure comes from an epoch timed after a warm-up epoch
//! (kernel compilation, autotune, allocator warm-up). The timed region ends
//! with the loss read back from the device, so queued GPU work is included,
//! not just its launch.

use std::path::PathBuf;
use std::time::Instant;

use kynml_backend::{probe_wgpu, select, Device, DeviceChoice, DeviceKind, WgpuAdapterKind};
use kynml_core::bench::{self, BenchOptions};
use kynml_core::data::synthetic_for;
use kynml_core::plan::SpecFile;
use kynml_core::spec::types::{LossScale, Precision};
use kynml_core::train::precision::{Compute, PrecisionPlan};
use kynml_core::train::{train, EngineChoice, EngineKind, TrainEvent, TrainSettings};

const ROWS: usize = 40_960;
const STEPS: usize = 60;

/// The tables, printed together once every section has run (progress goes
/// to stderr meanwhile).
static REPORT: std::sync::Mutex<String> = std::sync::Mutex::new(String::new());

macro_rules! report {
    ($($arg:tt)*) => {{
        use std::fmt::Write as _;
        let mut report = REPORT.lock().unwrap_or_else(|e| e.into_inner());
        let _ = writeln!(report, $($arg)*);
    }};
}

fn main() {
    // `cargo bench` passes `--bench`; anything else names a section.
    let wanted: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let run = |section: &str| wanted.is_empty() || wanted.iter().any(|w| w == section);
    if run("deepnet") {
        deepnet();
    }
    if run("prefetch") {
        prefetch();
    }
    if run("update") {
        update();
    }
    if run("checkpoint") {
        checkpoint();
    }
    if run("profiling") {
        profiling();
    }
    if run("wide") {
        wide();
    }
    print!("{}", REPORT.lock().unwrap_or_else(|e| e.into_inner()));
}

fn deepnet_spec() -> SpecFile {
    let spec_path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/deepnet/deepnet.kyn");
    let mut file = SpecFile::load(&spec_path).expect("the DeepNet example spec");
    file.spec.train.epochs.value = 2;
    file.spec.train.early_stop = None;
    file.spec.train.checkpoint = None;
    file
}

/// The CPU, and CUDA and wgpu where present.
fn present_devices() -> Vec<Device> {
    let mut devices = vec![select(DeviceChoice::Cpu).unwrap()];
    if let Ok(d) = select(DeviceChoice::Cuda(None)) {
        devices.push(d);
    }
    if !probe_wgpu().is_empty() {
        devices.push(select(DeviceChoice::Wgpu).unwrap());
    }
    devices
}

fn deepnet() {
    let mut file = deepnet_spec();
    let data = synthetic_for(&file.spec, ROWS, 0).expect("synthetic DeepNet data");
    let devices = present_devices();

    let mut rows = Vec::new();
    for device in &devices {
        // A software Vulkan driver is ~100x slower; fewer steps keep the bench short.
        let steps = if is_software(device) { 6 } else { STEPS };
        let half_ok = |c: Compute| match (&device.kind, c) {
            (DeviceKind::Wgpu(a), Compute::Fp16) => a.shader_f16,
            (DeviceKind::Wgpu(_), Compute::Bf16) => false,
            _ => true,
        };
        // The CPU's default engine is the native one (fp32); Burn's flex
        // backend runs the CPU's reduced precisions and is measured in fp32
        // too, for comparison.
        let cpu = matches!(device.kind, DeviceKind::Cpu { .. });
        let mut cases = vec![
            (Compute::Fp32, 0, EngineChoice::Auto),
            (Compute::Fp32, 4, EngineChoice::Auto),
            (Compute::Bf16, 0, EngineChoice::Auto),
            (Compute::Fp16, 0, EngineChoice::Auto),
        ];
        if cpu {
            cases.insert(2, (Compute::Fp32, 0, EngineChoice::Burn));
        }
        for (compute, workers, engine) in cases.into_iter().filter(|&(c, _, _)| half_ok(c)) {
            file.spec.dataset.num_workers.value = workers;
            let options = BenchOptions {
                steps,
                rounds: 1,
                precision: Some(PrecisionPlan::forced(compute, LossScale::Auto)),
                engine,
                ..BenchOptions::default()
            };
            eprintln!(
                "bench deepnet: {}, {}, {workers} workers, engine {engine:?} ({steps} steps after a warm-up round)...",
                device.describe(),
                compute.name()
            );
            let report = bench::run(&file.spec, &data, device, &options, &mut |_| {}).expect("training runs");
            let engine = match report.engine {
                EngineKind::Native => "native".to_string(),
                EngineKind::Burn => device.backend_name().split(' ').next().unwrap_or("burn").to_string(),
            };
            // Fusion is compiled into Burn's GPU backends in this build and cannot be switched off
            // at run time; the native engine fuses its elementwise passes by hand.
            let fusion = match report.engine {
                EngineKind::Native => "by hand",
                EngineKind::Burn if device.has_fusion() => "on",
                EngineKind::Burn => "none",
            };
            rows.push(Row {
                device: device.short_name(),
                engine,
                precision: compute.name(),
                fusion,
                workers,
                samples_per_sec: report.samples_per_sec,
                ms_per_step: report.step_ms,
            });
        }
    }

    report!("\nDeepNet training throughput (batch {}, AdamW)", file.spec.train.batch.value);
    report!(
        "  {:<8} {:<11} {:>9} {:>8} {:>7} {:>12} {:>10}",
        "device",
        "engine",
        "precision",
        "fusion",
        "workers",
        "samples/s",
        "ms/step"
    );
    for r in rows {
        report!(
            "  {:<8} {:<11} {:>9} {:>8} {:>7} {:>12.0} {:>10.2}",
            r.device,
            r.engine,
            r.precision,
            r.fusion,
            r.workers,
            r.samples_per_sec,
            r.ms_per_step
        );
    }
}

/// DeepNet's step with each way of updating the weights, on Burn's devices
/// (Burn's CPU backend, wgpu and CUDA where present), three timed rounds each.
fn update() {
    use kynml_core::train::update::Update;
    let mut file = deepnet_spec();
    file.spec.dataset.num_workers.value = 0;
    let data = synthetic_for(&file.spec, ROWS, 0).expect("synthetic DeepNet data");
    let devices = present_devices();
    report!("\nDeepNet's optimizer update (batch {}, AdamW, Burn's engine)", file.spec.train.batch.value);
    report!("  {:<8} {:>9} {:<14} {:>12} {:>10}", "device", "precision", "update", "samples/s", "ms/step");
    for device in &devices {
        let steps = if is_software(device) { 6 } else { STEPS };
        let fp16 = match &device.kind {
            DeviceKind::Wgpu(a) => a.shader_f16,
            _ => true,
        };
        let computes = if fp16 { vec![Compute::Fp32, Compute::Fp16] } else { vec![Compute::Fp32] };
        for compute in computes {
            for update in [Update::Burn, Update::PerParameter, Update::Fused] {
                let options = BenchOptions {
                    steps,
                    rounds: 3,
                    precision: Some(PrecisionPlan::forced(compute, LossScale::Auto)),
                    engine: EngineChoice::Burn,
                    update: Some(update),
                    ..BenchOptions::default()
                };
                eprintln!("bench update: {}, {}, {}...", device.describe(), compute.name(), update.name());
                let r = bench::run(&file.spec, &data, device, &options, &mut |_| {}).expect("training runs");
                report!(
                    "  {:<8} {:>9} {:<14} {:>12.0} {:>10.2}",
                    device.short_name(),
                    compute.name(),
                    update.name(),
                    r.samples_per_sec,
                    r.step_ms
                );
            }
        }
    }
}

/// The compute-bound spec (examples/wide: 64 -> 3 x 4096 -> 10, batch
/// 4096, about 203 MFLOP per training sample) in every precision, on a CUDA
/// GPU only: a step takes seconds on a CPU.
fn wide() {
    let Ok(device) = select(DeviceChoice::Cuda(None)) else {
        report!("\nwide: no CUDA GPU here; measured on a GPU with `cargo bench -p kynml-benches -- wide`");
        return;
    };
    let spec_path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/wide/wide.kyn");
    let file = SpecFile::load(&spec_path).expect("the wide example spec");
    let data = synthetic_for(&file.spec, 16 * 4096 * 5 / 4, 0).expect("synthetic data for the wide spec");
    report!("\nwide MLP training throughput on {} (batch 4096, AdamW)", device.describe());
    report!("  {:<9} {:>12} {:>10} {:>11} {:>13}", "precision", "samples/s", "ms/step", "start-up s", "TFLOP/s");
    for compute in [Compute::Fp32, Compute::Tf32, Compute::Bf16, Compute::Fp16] {
        let mut spec = file.spec.clone();
        spec.train.precision.value = match compute {
            Compute::Fp32 => Precision::Fp32,
            Compute::Tf32 => Precision::Tf32,
            Compute::Bf16 => Precision::Bf16,
            Compute::Fp16 => Precision::Fp16,
        };
        eprintln!("bench wide: {}...", compute.name());
        let options = BenchOptions { steps: 16, rounds: 3, ..BenchOptions::default() };
        let r = bench::run(&spec, &data, &device, &options, &mut |_| {}).expect("training runs");
        // 3 products a layer (forward, grad-input, grad-weight), 2 FLOP a multiply-add.
        let flop_per_sample = 6.0 * (64.0 * 4096.0 + 2.0 * 4096.0 * 4096.0 + 4096.0 * 10.0);
        report!(
            "  {:<9} {:>12.0} {:>10.2} {:>11.1} {:>13.1}",
            r.precision.name(),
            r.samples_per_sec,
            r.step_ms,
            r.startup_secs,
            r.samples_per_sec * flop_per_sample / 1e12
        );
    }
}

/// One line of the DeepNet table.
struct Row {
    device: String,
    engine: String,
    precision: &'static str,
    fusion: &'static str,
    workers: usize,
    samples_per_sec: f64,
    ms_per_step: f64,
}

/// Batches of 2048 rows of 2048 features (16 MB each to gather) for a
/// single linear unit: the step is cheap, the batch is not.
fn prefetch() {
    let (width, batch) = (2048, 2048);
    let source = format!(
        "dataset D:\n source = csv(\"unused.csv\")\n target = \"y\"\n normalize = true\n\
         model M:\n input {width}\n dense 1 linear\n\
         train:\n model = M\n data = D\n loss = mse\n optimizer = sgd(lr=0.001)\n epochs = 2\n batch = {batch}\n"
    );
    let mut file = SpecFile::from_source("prefetch.kyn".as_ref(), source).expect("the prefetch spec parses");
    let data = synthetic_for(&file.spec, 16 * batch * 5 / 4, 0).expect("synthetic data");
    let cpu = select(DeviceChoice::Cpu).unwrap();
    let mut rows = Vec::new();
    for workers in [0, 1, 2, 4] {
        file.spec.dataset.num_workers.value = workers;
        eprintln!("bench prefetch: {workers} workers...");
        let result = train(&file.spec, &data, &cpu, &TrainSettings::default(), &mut |_| {}).expect("training runs");
        rows.push((workers, result.history[1].samples_per_sec));
    }
    report!("\nInput-bound training ({width} features, batch {batch}, one linear unit, CPU)");
    report!("  {:>7} {:>12} {:>8}", "workers", "samples/s", "speedup");
    for (workers, sps) in &rows {
        report!("  {workers:>7} {sps:>12.0} {:>7.2}x", sps / rows[0].1);
    }
}

/// What timing costs on the CPU's native engine, for DeepNet. Without
/// `--profile` the loop reads the clock three times a step (around the
/// wait for the batch, and at the step's start) and the process's peak
/// memory once an epoch: those exact calls are timed over many repeats and
/// set against the measured step. With `--profile`, the engine also reads
/// the clock around each phase: epochs with and without are compared.
fn profiling() {
    use std::hint::black_box;
    let file = deepnet_spec();
    let data = synthetic_for(&file.spec, ROWS, 0).expect("synthetic DeepNet data");
    let cpu = select(DeviceChoice::Cpu).unwrap();
    let epoch = |profile: bool| {
        let mut spec = file.spec.clone();
        spec.train.epochs.value = 4;
        let settings = TrainSettings { profile, ..TrainSettings::default() };
        let result = train(&spec, &data, &cpu, &settings, &mut |_| {}).expect("training runs");
        // The median of the epochs after the first (allocator warm-up).
        let mut secs: Vec<f64> = result.history[1..].iter().map(|r| r.seconds).collect();
        median(&mut secs)
    };
    eprintln!("bench profiling: DeepNet on the CPU, without and with --profile...");
    let (mut plain, mut profiled) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        plain.push(epoch(false));
        profiled.push(epoch(true));
    }
    let (plain, profiled) = (median(&mut plain), median(&mut profiled));
    let steps = (data.train.len()).div_ceil(file.spec.train.batch.value) as f64;

    const REPEATS: u32 = 1_000_000;
    let started = Instant::now();
    for _ in 0..REPEATS {
        let waiting = black_box(Instant::now());
        black_box(waiting.elapsed().as_secs_f64());
        black_box(Instant::now());
    }
    let per_step = started.elapsed().as_secs_f64() / f64::from(REPEATS);
    let started = Instant::now();
    for _ in 0..1000 {
        black_box(bench::peak_rss());
    }
    let per_epoch = started.elapsed().as_secs_f64() / 1000.0;
    let overhead = (steps * per_step + per_epoch) / plain;

    report!("\nWhat timing costs (DeepNet, CPU native engine, {steps:.0} steps an epoch)");
    report!("  {:<44} {:>9.1} ms", "epoch without --profile (median, 3 runs)", 1e3 * plain);
    report!("  {:<44} {:>9.1} ns", "clock reads of one step without --profile", 1e9 * per_step);
    report!("  {:<44} {:>9.1} us", "peak host memory read once an epoch", 1e6 * per_epoch);
    report!("  {:<44} {:>11.4}%", "bookkeeping share of the epoch", 100.0 * overhead);
    report!(
        "  {:<44} {:>9.1} ms ({:+.1}%)",
        "epoch with --profile (median, 3 runs)",
        1e3 * profiled,
        100.0 * (profiled / plain - 1.0)
    );
}

/// Step times around checkpoint saves of a large model.
fn checkpoint() {
    let shape = "dataset D:\n source = csv(\"unused.csv\")\n target = \"y\"\n normalize = true\n\
                 model M:\n input 512\n dense 1 linear\n\
                 train:\n model = M\n data = D\n loss = mse\n optimizer = sgd(lr=0.1)\n epochs = 1\n";
    let shape = SpecFile::from_source("shape.kyn".as_ref(), shape.into()).expect("the data's spec parses");
    let data = synthetic_for(&shape.spec, 32 * 20 * 5 / 4, 0).expect("synthetic data");
    let cpu = select(DeviceChoice::Cpu).unwrap();
    let dir = std::env::temp_dir().join(format!("kynml-bench-checkpoint-{}", std::process::id()));
    let mut rows = Vec::new();
    // The process's first large training is slower (allocator, thread
    // pools); a warm-up run keeps that out of both figures.
    let warm_up = |file: &SpecFile| {
        let mut spec = file.spec.clone();
        (spec.train.epochs.value, spec.train.checkpoint) = (2, None);
        train(&spec, &data, &cpu, &TrainSettings::default(), &mut |_| {}).expect("training runs");
    };
    for async_save in [false, true] {
        let path = dir.join(if async_save { "async.ckpt" } else { "sync.ckpt" });
        let source = format!(
            "dataset D:\n source = csv(\"unused.csv\")\n target = \"y\"\n\
             model M:\n input 512\n dense 2048 relu\n dense 2048 relu\n dense 1 linear\n\
             train:\n model = M\n data = D\n loss = mse\n optimizer = adam(lr=0.0001)\n epochs = 6\n batch = 32\n\
             checkpoint = checkpoint(every_n=1, path=\"unused.ckpt\", async_save={async_save})\n"
        );
        let file = SpecFile::from_source("checkpoint.kyn".as_ref(), source).expect("the checkpoint spec parses");
        if !async_save {
            warm_up(&file);
        }
        eprintln!("bench checkpoint: async_save = {async_save}...");
        let settings = TrainSettings { checkpoint_path: Some(path.clone()), ..TrainSettings::default() };
        // Step times, split by whether a save happened within the epoch's
        // first steps (the background write is then in flight).
        let (mut waits, mut after_save, mut quiet) = (Vec::new(), Vec::new(), Vec::new());
        let mut last = Instant::now();
        let mut steps_since_save = usize::MAX;
        train(&file.spec, &data, &cpu, &settings, &mut |event| match event {
            TrainEvent::Step { epoch, .. } => {
                let ms = last.elapsed().as_secs_f64() * 1e3;
                if epoch > 1 {
                    if steps_since_save < 5 {
                        after_save.push(ms)
                    } else {
                        quiet.push(ms)
                    }
                }
                steps_since_save = steps_since_save.saturating_add(1);
                last = Instant::now();
            }
            TrainEvent::CheckpointSaved { seconds, .. } => {
                waits.push(seconds * 1e3);
                steps_since_save = 0;
            }
            _ => last = Instant::now(),
        })
        .expect("training runs");
        let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        rows.push((async_save, median(&mut waits), median(&mut quiet), median(&mut after_save), size));
    }
    let _ = std::fs::remove_dir_all(&dir);
    report!("\nCheckpoint saves (6.3M parameters, Adam, every epoch, CPU)");
    report!(
        "  {:<10} {:>10} {:>16} {:>22} {:>22}",
        "mode",
        "file MB",
        "loop waits ms",
        "step ms, no save",
        "step ms, 5 after save"
    );
    for (async_save, wait, quiet, after, size) in rows {
        let mode = if async_save { "async" } else { "sync" };
        report!("  {mode:<10} {:>10.1} {wait:>16.1} {quiet:>22.2} {after:>22.2}", size as f64 / 1e6);
    }
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

fn is_software(device: &Device) -> bool {
    matches!(&device.kind, DeviceKind::Wgpu(a) if a.kind == WgpuAdapterKind::Cpu)
}
