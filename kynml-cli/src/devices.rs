//! `kynml devices`: what this machine offers KynML, and what `auto` picks.

use kynml_backend::{probe_cuda, probe_wgpu, select, CudaProbe, DeviceChoice, WgpuAdapterKind};

use crate::failure::Failure;
use crate::render;

/// The device a command runs on, with what its kernel cache has to say
/// (a cleared or unusable cache) printed once.
pub fn pick(request: kynml_core::spec::types::DeviceRequest) -> Result<kynml_backend::Device, Failure> {
    let device = select(kynml_core::plan::device_choice(request)).map_err(|e| Failure::input(format!("error: {e}")))?;
    for note in kynml_backend::kernel_cache::installed().map_or(&[][..], |c| &c.notes[..]) {
        eprintln!("note: {note}");
    }
    Ok(device)
}

/// [`pick`] for a spec's `train:` block: its `autotune` level is handed to
/// CubeCL first.
pub fn pick_for(train: &kynml_core::spec::types::TrainSpec) -> Result<kynml_backend::Device, Failure> {
    if let Some(a) = &train.autotune {
        kynml_backend::kernel_cache::set_autotune(kynml_core::plan::tune_level(a.value));
    }
    pick(train.device.value)
}

/// Every device of a spec's run: its `devices` when it has them (a
/// data-parallel run; the first device first), else its one `device`.
/// `cuda:all` on a machine with one GPU trains on it alone, and says so;
/// the spec's `cuda:all` becomes the GPUs found (`cuda:0,cuda:1,...`, or
/// none), so that the checks made when the data is read (batchnorm's rows
/// a device) count the devices that will really train.
pub fn pick_all(train: &mut kynml_core::spec::types::TrainSpec) -> Result<Vec<kynml_backend::Device>, Failure> {
    use kynml_core::spec::types::{DeviceRequest, DeviceSet};
    let first = pick_for(train)?;
    resolve_all_cuda(train);
    let rest: Vec<DeviceRequest> = match train.devices.as_ref().map(|d| &d.value) {
        Some(DeviceSet::List(list)) => list.iter().skip(1).copied().collect(),
        // `cuda:all` is a list now, or no set at all.
        None | Some(DeviceSet::AllCuda) => Vec::new(),
    };
    let mut devices = vec![first];
    for request in rest {
        devices.push(pick(request)?);
    }
    Ok(devices)
}

/// [`pick_all`] for a spec file. When the spec itself names the device (no
/// `--device`), a device that cannot be had is located at the spec's
/// `device` or `devices` line.
pub fn pick_all_in(
    file: &mut kynml_core::plan::SpecFile,
    from_spec: bool,
) -> Result<Vec<kynml_backend::Device>, Failure> {
    let failure = match pick_all(&mut file.spec.train) {
        Ok(devices) => return Ok(devices),
        Err(failure) => failure,
    };
    // A device the spec leaves out is `auto`, which always has the CPU: a
    // failure without `--device` comes from a device the spec names.
    let t = &file.spec.train;
    let span = t.devices.as_ref().map_or(t.device.span, |d| d.span);
    match Some(span).filter(|_| from_spec && failure.code == 2) {
        Some(span) => {
            let message = failure.message.trim_start_matches("error: ").to_string();
            let problem = kynml_core::spec::Diagnostic::new(span, message, "this device")
                .with_help("`--device cpu` (or another device `kynml devices` lists) runs the spec elsewhere");
            let summary = "the device the spec names is not available here; nothing was trained or written";
            let path = file.path.display().to_string();
            Err(Failure::input(kynml_core::spec::render_with(&path, &file.source, &[problem], summary)))
        }
        None => Err(flag_hint(failure)),
    }
}

/// A device asked for with `--device` that is not here: where to look for
/// one that is (the spec's own device gets it as a diagnostic's help).
pub fn flag_hint(failure: Failure) -> Failure {
    match failure.code {
        2 => Failure {
            message: format!(
                "{}\n  `--device cpu` (or another device `kynml devices` lists) runs here",
                failure.message.trim_end()
            ),
            ..failure
        },
        _ => failure,
    }
}

/// A spec's `devices = "cuda:all"` becomes the GPUs the driver reports
/// (`cuda:0,cuda:1,...`), or no device set when it reports one (said in a
/// note), so that what is checked before training counts the devices that
/// will train. Other specs, and any spec on a machine without CUDA, are
/// left as they are.
pub fn resolve_all_cuda(train: &mut kynml_core::spec::types::TrainSpec) {
    use kynml_core::spec::types::{DeviceRequest, DeviceSet};
    let Some(devices) = train.devices.as_mut().filter(|d| d.value == DeviceSet::AllCuda) else { return };
    // Without CUDA here (`check` on a laptop) the count is unknown: left as is.
    let CudaProbe::Available(gpus) = probe_cuda() else { return };
    let count = gpus.len().max(1);
    if count == 1 {
        eprintln!("note: `cuda:all` found one CUDA GPU: training on cuda:0 alone");
        train.devices = None;
        return;
    }
    devices.value = DeviceSet::List((0..count).map(|i| DeviceRequest::Cuda(Some(i))).collect());
}

/// Records what a run tuned and compiled in the kernel cache; a failure is a
/// note (the next run only checks the cache less), not an error.
pub fn seal_cache() {
    if let Err(e) = kynml_backend::kernel_cache::seal() {
        eprintln!("note: the kernel cache could not record this run's kernels ({e}); the next run checks them less");
    }
}

pub fn run() -> Result<(), Failure> {
    let mut rows = Vec::new();
    match probe_cuda() {
        CudaProbe::Available(gpus) if !gpus.is_empty() => {
            for gpu in gpus {
                rows.push(vec![
                    format!("cuda:{}", gpu.index),
                    gpu.name,
                    format!(
                        "compute capability {}.{}, {:.0} GiB",
                        gpu.compute_capability.0,
                        gpu.compute_capability.1,
                        gpu.memory_bytes as f64 / (1u64 << 30) as f64
                    ),
                ]);
            }
        }
        CudaProbe::Available(_) => {
            rows.push(vec!["cuda".into(), "none".into(), "the driver reports no devices".into()])
        }
        CudaProbe::Unavailable(reason) => rows.push(vec!["cuda".into(), "none".into(), reason]),
    }
    let adapters = probe_wgpu();
    if adapters.is_empty() {
        rows.push(vec![
            "wgpu".into(),
            "none".into(),
            "no Vulkan adapter (scripts/setup-lavapipe.sh installs a software one)".into(),
        ]);
    }
    for a in adapters {
        let kind = match a.kind {
            WgpuAdapterKind::DiscreteGpu => "discrete GPU",
            WgpuAdapterKind::IntegratedGpu => "integrated GPU",
            WgpuAdapterKind::VirtualGpu => "virtual GPU",
            WgpuAdapterKind::Cpu => "software (CPU), never picked by auto",
            WgpuAdapterKind::Other => "other",
        };
        let f16 = if a.shader_f16 { ", f16 shaders" } else { "" };
        rows.push(vec!["wgpu".into(), a.name, format!("{kind}, {}{f16}", a.driver)]);
    }
    let threads = match kynml_backend::Device::cpu().kind {
        kynml_backend::DeviceKind::Cpu { threads } => threads,
        _ => 1,
    };
    rows.push(vec![
        "cpu".into(),
        "KynML's native engine (fp32; bf16 and fp16 run as fp32 here)".into(),
        format!("{threads} thread{}", if threads == 1 { "" } else { "s" }),
    ]);
    println!("{}", render::table(&["device", "name", "details"], &rows));
    let auto = select(DeviceChoice::Auto).map_err(|e| Failure::run(format!("error: {e}")))?;
    println!("\nauto picks: {}", auto.describe());
    match kynml_backend::kernel_cache::chosen() {
        // What a GPU run would find there: a file stands where the folder goes.
        (Some(dir), _) if dir.exists() && !dir.is_dir() => println!(
            "kernel cache: off ({} is not a folder; a GPU run trains without the cache, and says so)",
            dir.display()
        ),
        (Some(dir), _) => match (!dir.exists()).then(|| cannot_create(dir)).flatten() {
            Some(why) => println!(
                "kernel cache: off ({} cannot be created: {why}; a GPU run trains without the cache, and says so)",
                dir.display()
            ),
            None => println!(
                "kernel cache: {}/cubecl-{}/<GPU model>/ (--cache DIR or KYNML_CACHE moves it)",
                dir.display(),
                kynml_backend::kernel_cache::CUBECL_VERSION
            ),
        },
        (None, _) => println!("kernel cache: off (no home or cache directory is known)"),
    }
    Ok(())
}

/// Why the folder `dir` (absent) could not be made, tried and undone: a GPU
/// run makes it, and a path under /proc or a read-only mount fails there.
/// Each missing level is made on its own and only those are removed,
/// innermost first and only while empty: a folder another process makes
/// meanwhile is never deleted.
fn cannot_create(dir: &std::path::Path) -> Option<String> {
    let mut missing: Vec<&std::path::Path> =
        dir.ancestors().take_while(|p| !p.as_os_str().is_empty() && !p.exists()).collect();
    missing.reverse();
    let mut made = Vec::new();
    let mut failed = None;
    for level in missing {
        match std::fs::create_dir(level) {
            Ok(()) => made.push(level),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                failed = Some(e.to_string());
                break;
            }
        }
    }
    for level in made.iter().rev() {
        let _ = std::fs::remove_dir(level);
    }
    failed
}
