//! Training throughput of the users' DeepNet spec (128→512→256→64→1, batch
//! 256, AdamW) on seeded synthetic data, on every device present.
//!
//! Each measurement runs one warm-up epoch of `STEPS` steps (kernel
//! compilation, autotune, allocator warm-up), then one timed epoch of the
//! same steps. The timed region ends with the loss read back from the
//! device, so queued GPU work is included, not just its launch.
//!
//! `cargo bench -p kynml-benches` prints one table.

use std::path::PathBuf;

use kynml_backend::{probe_wgpu, select, Device, DeviceChoice, DeviceKind, WgpuAdapterKind};
use kynml_core::data::{Dataset, Table, Targets};
use kynml_core::plan::SpecFile;
use kynml_core::rng::SplitMix64;
use kynml_core::train::{train, TrainSettings};

const ROWS: usize = 40_960;
const STEPS: usize = 60;

fn main() {
    let spec_path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/deepnet/deepnet.kyn");
    let mut file = SpecFile::load(&spec_path).expect("the DeepNet example spec");
    file.spec.train.epochs.value = 2;
    file.spec.train.early_stop = None;
    let data = synthetic(&file, ROWS);

    let mut devices = vec![select(DeviceChoice::Cpu).unwrap()];
    if let Ok(d) = select(DeviceChoice::Cuda(None)) {
        devices.push(d);
    }
    if !probe_wgpu().is_empty() {
        devices.push(select(DeviceChoice::Wgpu).unwrap());
    }

    let mut rows = Vec::new();
    for device in &devices {
        // A software Vulkan driver is ~100x slower; fewer steps keep the bench short.
        let steps = if is_software(device) { 6 } else { STEPS };
        let settings = TrainSettings { max_steps_per_epoch: Some(steps) };
        eprintln!("bench: {} ({steps} steps after a warm-up epoch)...", device.describe());
        let result = train(&file.spec, &data, device, &settings, &mut |_| {}).expect("training runs");
        let timed = &result.history[1];
        let batch = file.spec.train.batch.value as f64;
        rows.push((device.describe(), timed.samples_per_sec, 1000.0 * batch / timed.samples_per_sec));
    }

    println!("\nDeepNet training throughput (fp32, batch {}, AdamW)", file.spec.train.batch.value);
    println!("  {:<70} {:>12} {:>10}", "device", "samples/s", "ms/step");
    for (name, sps, ms) in rows {
        println!("  {name:<70} {sps:>12.0} {ms:>10.2}");
    }
}

fn is_software(device: &Device) -> bool {
    matches!(&device.kind, DeviceKind::Wgpu(a) if a.kind == WgpuAdapterKind::Cpu)
}

/// Seeded standard-normal features and a smooth target: the shape of the
/// users' data without a 50 MB file.
fn synthetic(file: &SpecFile, rows: usize) -> Dataset {
    let width = file.spec.model.input.value;
    let mut rng = SplitMix64::new(0);
    let mut normal = || {
        let (u, v) = (rng.next_f64().max(1e-12), rng.next_f64());
        ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
    };
    let features: Vec<f32> = (0..rows * width).map(|_| normal()).collect();
    let targets = features.chunks(width).map(|r| r.iter().take(8).map(|v| v.tanh()).sum::<f32>()).collect();
    let table = Table {
        path: PathBuf::from("synthetic"),
        feature_names: (0..width).map(|i| format!("f{i}")).collect(),
        target_name: "outcome".into(),
        features,
        targets: Targets::Regression(targets),
    };
    Dataset::from_table(table, 0.8, true, 0).unwrap()
}
