//! From a device request to one concrete Burn device.

use std::path::Path;

use burn::backend::cuda::CudaDevice;
use burn::backend::flex::FlexDevice;
use burn::backend::wgpu::WgpuDevice;
use burn::DispatchDevice;

use crate::cuda::{probe_cuda, CudaGpu, CudaProbe};
use crate::wgpu_probe::{probe_wgpu, WgpuAdapter, WgpuAdapterKind};

/// What the user asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceChoice {
    /// CUDA if a CUDA GPU is really present, else a wgpu adapter that is a
    /// real GPU, else the CPU.
    Auto,
    /// Burn's flex backend on the host CPU.
    Cpu,
    /// `None` is the first GPU.
    Cuda(Option<usize>),
    /// The best Vulkan adapter, a software one (lavapipe) included.
    Wgpu,
}

/// Why a device request cannot be met.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeviceError {
    /// CUDA was requested but no usable CUDA driver or GPU was found.
    #[error("CUDA was requested but is not available: {reason}")]
    CudaUnavailable {
        /// What the probe found, in words for a person.
        reason: String,
    },
    /// A CUDA device index beyond the GPUs the driver reports.
    #[error("CUDA device {index} was requested but this machine has {count} CUDA device{}", if *count == 1 { "" } else { "s" })]
    CudaIndexOutOfRange {
        /// The requested device, 0-based.
        index: usize,
        /// How many CUDA devices the driver reports.
        count: usize,
    },
    /// `wgpu` was requested but no Vulkan adapter, hardware or software, was found.
    #[error(
        "wgpu was requested but no Vulkan adapter was found (install a Vulkan driver; \
         for a software one on Debian: `apt-get install mesa-vulkan-drivers libvulkan1`)"
    )]
    NoWgpuAdapter,
}

/// The hardware behind a [`Device`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub enum DeviceKind {
    /// Burn's flex backend on the host CPU.
    Cpu {
        /// Threads the process may use (at least 1), as the standard library reports them.
        threads: usize,
    },
    /// A CUDA GPU, run by Burn's CUDA backend.
    Cuda(CudaGpu),
    /// A Vulkan adapter, run by Burn's wgpu backend.
    Wgpu(WgpuAdapter),
}

/// Device memory as CubeCL's allocator counts it, on the calling thread's
/// stream (the training thread's, when asked from it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct DeviceMemory {
    /// Bytes held by live tensors, their padding included.
    pub in_use: u64,
    /// Bytes the allocator has reserved from the device (its pools).
    pub reserved: u64,
}

impl DeviceMemory {
    /// The larger of each field: the peak of several readings.
    pub fn max(self, other: DeviceMemory) -> DeviceMemory {
        DeviceMemory { in_use: self.in_use.max(other.in_use), reserved: self.reserved.max(other.reserved) }
    }
}

/// A device chosen for a run.
#[derive(Debug, Clone)]
pub struct Device {
    /// The hardware the work runs on.
    pub kind: DeviceKind,
    burn: DispatchDevice,
}

impl Device {
    /// The host CPU through Burn's flex backend; always available.
    ///
    /// This starts rayon's global thread pool, which Burn's CPU backend and
    /// KynML's native engine run on (each training run on the native engine
    /// also keeps a team of that many threads of its own while it runs). A
    /// service that sizes the pool itself must call
    /// `rayon::ThreadPoolBuilder::build_global` before choosing a device.
    pub fn cpu() -> Self {
        // The threads that really run: rayon's global pool, which Burn's
        // flex backend and KynML's native engine both size from it
        // (`RAYON_NUM_THREADS`, else every core).
        let threads = rayon::current_num_threads();
        Device { kind: DeviceKind::Cpu { threads }, burn: DispatchDevice::Flex(FlexDevice) }
    }

    /// The device for inference and evaluation (no gradient tape).
    pub fn inner(&self) -> DispatchDevice {
        self.burn.clone()
    }

    /// The same device with automatic differentiation, for training.
    pub fn autodiff(&self) -> DispatchDevice {
        DispatchDevice::autodiff(self.burn.clone())
    }

    /// This device with automatic differentiation that recomputes cheap
    /// activations in the backward pass instead of keeping them (Burn's
    /// balanced checkpointing): less memory, some more compute.
    pub fn autodiff_checkpointed(&self) -> DispatchDevice {
        DispatchDevice::autodiff_checkpointed(self.burn.clone(), burn::CheckpointingStrategy::Balanced)
    }

    /// Short name used in file names and reports: `cpu`, `cuda:0`, `wgpu`.
    pub fn short_name(&self) -> String {
        match &self.kind {
            DeviceKind::Cpu { .. } => "cpu".into(),
            DeviceKind::Cuda(gpu) => format!("cuda:{}", gpu.index),
            DeviceKind::Wgpu(_) => "wgpu".into(),
        }
    }

    /// The device memory in use now, on CUDA and wgpu; `None` on the CPU
    /// (whose memory is the process's) or when the device cannot say.
    pub fn memory(&self) -> Option<DeviceMemory> {
        use burn::cubecl::Runtime;
        let usage = match &self.burn {
            DispatchDevice::Cuda(d) => burn::cubecl::cuda::CudaRuntime::client(d).memory_usage().ok()?,
            DispatchDevice::Vulkan(d) => burn::backend::wgpu::WgpuRuntime::client(d).memory_usage().ok()?,
            _ => return None,
        };
        Some(DeviceMemory { in_use: usage.bytes_in_use + usage.bytes_padding, reserved: usage.bytes_reserved })
    }

    /// The most bytes one tensor may take on this device: CubeCL's largest
    /// allocation (on wgpu, the adapter's largest storage buffer); `None` on
    /// the CPU, which has no such limit of its own.
    pub fn max_allocation(&self) -> Option<u64> {
        use burn::cubecl::Runtime;
        let props = match &self.burn {
            DispatchDevice::Cuda(d) => burn::cubecl::cuda::CudaRuntime::client(d).properties().memory.clone(),
            DispatchDevice::Vulkan(d) => burn::backend::wgpu::WgpuRuntime::client(d).properties().memory.clone(),
            _ => return None,
        };
        Some(props.max_page_size)
    }

    /// The memory a run may fill, in bytes: a CUDA device's total memory,
    /// or on the CPU the host's available memory (`MemAvailable`); `None`
    /// where the device does not say (wgpu has no way to ask).
    pub fn memory_capacity(&self) -> Option<u64> {
        match &self.kind {
            DeviceKind::Cuda(gpu) => Some(gpu.memory_bytes),
            DeviceKind::Wgpu(_) => None,
            DeviceKind::Cpu { .. } => proc_bytes("/proc/meminfo", "MemAvailable"),
        }
    }

    /// The folder name of this device's model in the kernel cache, e.g.
    /// `cuda-NVIDIA_H100_80GB_HBM3-sm90`; `None` for the CPU, which runs no
    /// CubeCL kernels.
    pub fn model_folder(&self) -> Option<String> {
        let name = match &self.kind {
            DeviceKind::Cpu { .. } => return None,
            DeviceKind::Cuda(gpu) => {
                format!("cuda-{}-sm{}{}", gpu.name, gpu.compute_capability.0, gpu.compute_capability.1)
            }
            DeviceKind::Wgpu(adapter) => format!("vulkan-{}-{}", adapter.name, adapter.driver),
        };
        Some(crate::kernel_cache::folder_name(&name))
    }

    /// The Burn backend that runs the work.
    pub fn backend_name(&self) -> &'static str {
        match self.kind {
            DeviceKind::Cpu { .. } => "flex (Burn's CPU backend)",
            DeviceKind::Cuda(_) => "cuda (Burn's CubeCL CUDA backend)",
            DeviceKind::Wgpu(_) => "wgpu/vulkan (Burn's CubeCL wgpu backend)",
        }
    }

    /// True when Burn's kernel fusion is part of this device's backend.
    /// In this build fusion is compiled into the CUDA and wgpu backends and
    /// the CPU backend has none.
    pub fn has_fusion(&self) -> bool {
        !matches!(self.kind, DeviceKind::Cpu { .. })
    }

    /// One line for a person: what the device is.
    pub fn describe(&self) -> String {
        match &self.kind {
            DeviceKind::Cpu { threads } => format!("cpu ({threads} thread{})", if *threads == 1 { "" } else { "s" }),
            DeviceKind::Cuda(gpu) => format!(
                "cuda:{} ({}, compute capability {}.{}, {:.0} GiB)",
                gpu.index,
                gpu.name,
                gpu.compute_capability.0,
                gpu.compute_capability.1,
                gpu.memory_bytes as f64 / (1u64 << 30) as f64
            ),
            DeviceKind::Wgpu(adapter) => {
                let software = if adapter.kind == WgpuAdapterKind::Cpu { ", software" } else { "" };
                format!("wgpu ({}{software}, {})", adapter.name, adapter.driver)
            }
        }
    }
}

/// Resolve a request to a device that is really present.
///
/// CUDA is probed through the driver library before Burn is asked for it, so
/// asking for CUDA on a machine without it is an error, not a crash.
///
/// For a GPU, the kernel cache of its model is set up before anything runs
/// on it ([`crate::kernel_cache::install`], in the folder
/// [`crate::kernel_cache::choose`] chose, or the default one).
pub fn select(choice: DeviceChoice) -> Result<Device, DeviceError> {
    let device = pick(choice)?;
    if let Some(model) = device.model_folder() {
        crate::kernel_cache::install(&model);
    }
    Ok(device)
}

/// The device [`select`] would resolve `choice` to, without setting up
/// anything for it (no kernel cache is made): for saying what a run would
/// meet here, as `kynml check` does.
pub fn would_select(choice: DeviceChoice) -> Result<Device, DeviceError> {
    pick(choice)
}

fn pick(choice: DeviceChoice) -> Result<Device, DeviceError> {
    match choice {
        DeviceChoice::Cpu => Ok(Device::cpu()),
        DeviceChoice::Cuda(index) => {
            let gpus = match probe_cuda() {
                CudaProbe::Available(gpus) if !gpus.is_empty() => gpus,
                CudaProbe::Available(_) => {
                    return Err(DeviceError::CudaUnavailable { reason: "the CUDA driver reports no devices".into() })
                }
                CudaProbe::Unavailable(reason) => return Err(DeviceError::CudaUnavailable { reason }),
            };
            let index = index.unwrap_or(0);
            let gpu = gpus.get(index).cloned().ok_or(DeviceError::CudaIndexOutOfRange { index, count: gpus.len() })?;
            Ok(cuda_device(gpu))
        }
        DeviceChoice::Wgpu => {
            let adapter = probe_wgpu().into_iter().next().ok_or(DeviceError::NoWgpuAdapter)?;
            Ok(wgpu_device(adapter))
        }
        DeviceChoice::Auto => {
            if let CudaProbe::Available(gpus) = probe_cuda() {
                if let Some(gpu) = gpus.into_iter().next() {
                    return Ok(cuda_device(gpu));
                }
            }
            if gpu_nodes_under(Path::new("/dev")) {
                if let Some(adapter) = probe_wgpu().into_iter().find(|a| a.kind.is_gpu()) {
                    return Ok(wgpu_device(adapter));
                }
            }
            Ok(Device::cpu())
        }
    }
}

/// Whether a hardware GPU could answer a Vulkan probe, by the device nodes
/// under `dev`: on Linux each GPU driver opens one (Mesa's
/// `/dev/dri/renderD*` and `card*`, NVIDIA's `/dev/nvidia*`, WSL's
/// `/dev/dxg`). Without any, only a software rasteriser answers, which
/// `auto` never picks, and loading it for nothing took ~50 MiB of the
/// process (twice an iris run's peak). Elsewhere: yes, probe.
fn gpu_nodes_under(dev: &Path) -> bool {
    if !cfg!(target_os = "linux") {
        return true;
    }
    let entries = |dir: &Path| std::fs::read_dir(dir).into_iter().flatten().flatten().map(|e| e.file_name());
    entries(&dev.join("dri")).next().is_some()
        || dev.join("dxg").exists()
        || entries(dev).any(|name| name.to_string_lossy().starts_with("nvidia"))
}

fn cuda_device(gpu: CudaGpu) -> Device {
    let burn = DispatchDevice::Cuda(CudaDevice { index: gpu.index });
    Device { kind: DeviceKind::Cuda(gpu), burn }
}

impl Device {
    /// The device of a GPU as [`probe_cuda`] describes it, or of a Vulkan
    /// adapter as [`probe_wgpu`] does, without probing: for plans made
    /// ahead of a run (what would run on an H100 here?) and their tests.
    /// Nothing touches a driver until work is sent to the device.
    ///
    /// Not a device to run on: work sent to a GPU that is not really here
    /// panics inside Burn's runtime, on a thread no caller can catch. Run on
    /// what [`select`] returns, which probes first.
    pub fn described(kind: DeviceKind) -> Device {
        match kind {
            DeviceKind::Cpu { .. } => Device::cpu(),
            DeviceKind::Cuda(gpu) => cuda_device(gpu),
            DeviceKind::Wgpu(adapter) => wgpu_device(adapter),
        }
    }
}

fn wgpu_device(adapter: WgpuAdapter) -> Device {
    let wgpu = match adapter.kind {
        WgpuAdapterKind::DiscreteGpu => WgpuDevice::DiscreteGpu(adapter.index_of_kind),
        WgpuAdapterKind::IntegratedGpu => WgpuDevice::IntegratedGpu(adapter.index_of_kind),
        WgpuAdapterKind::VirtualGpu => WgpuDevice::VirtualGpu(adapter.index_of_kind),
        WgpuAdapterKind::Cpu => WgpuDevice::Cpu,
        WgpuAdapterKind::Other => WgpuDevice::DefaultDevice,
    };
    Device { kind: DeviceKind::Wgpu(adapter), burn: DispatchDevice::Vulkan(wgpu) }
}

/// A `Key:  N kB` line of a Linux `/proc` file (`/proc/meminfo`,
/// `/proc/self/status`), in bytes; `None` elsewhere or when absent.
pub fn proc_bytes(file: &str, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(file).ok()?;
    let line = text.lines().find(|l| l.strip_prefix(key).is_some_and(|rest| rest.starts_with(':')))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `auto` probes Vulkan only where a GPU's device node is: a software
    /// rasteriser alone is never picked.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_vulkan_probe_needs_a_gpu_device_node() {
        let dev = tempfile::tempdir().unwrap();
        std::fs::write(dev.path().join("null"), b"").unwrap();
        assert!(!gpu_nodes_under(dev.path()));
        std::fs::create_dir(dev.path().join("dri")).unwrap();
        assert!(!gpu_nodes_under(dev.path()), "an empty dri folder");
        for node in ["dri/renderD128", "nvidia0", "dxg"] {
            let one = tempfile::tempdir().unwrap();
            std::fs::create_dir(one.path().join("dri")).unwrap();
            std::fs::write(one.path().join(node), b"").unwrap();
            assert!(gpu_nodes_under(one.path()), "{node}");
        }
    }

    #[test]
    fn cpu_is_always_available() {
        let device = select(DeviceChoice::Cpu).unwrap();
        assert_eq!(device.short_name(), "cpu");
        assert!(!device.has_fusion());
    }

    #[test]
    fn cuda_request_is_an_error_or_a_real_gpu() {
        // On a machine without CUDA this must be an error value, not a panic
        // in a background thread; with CUDA it must name a probed GPU.
        match (select(DeviceChoice::Cuda(None)), probe_cuda()) {
            (Ok(device), CudaProbe::Available(gpus)) => {
                assert_eq!(device.kind, DeviceKind::Cuda(gpus[0].clone()))
            }
            (Err(DeviceError::CudaUnavailable { .. }), _) => {}
            (other, probe) => panic!("inconsistent: {other:?} with probe {probe:?}"),
        }
    }

    #[test]
    fn proc_lines_are_read_in_bytes_by_their_whole_key() {
        let total = proc_bytes("/proc/meminfo", "MemTotal").expect("Linux");
        let available = proc_bytes("/proc/meminfo", "MemAvailable").expect("Linux");
        assert!(available > 0 && available <= total && total.is_multiple_of(1024));
        assert_eq!(proc_bytes("/proc/meminfo", "MemAvail"), None, "a prefix of a key is no key");
        assert_eq!(proc_bytes("/no/such/file", "MemTotal"), None);
    }

    #[test]
    fn out_of_range_cuda_index_is_refused() {
        assert!(select(DeviceChoice::Cuda(Some(4096))).is_err());
    }

    #[test]
    fn auto_never_picks_a_software_adapter() {
        let device = select(DeviceChoice::Auto).unwrap();
        if let DeviceKind::Wgpu(adapter) = &device.kind {
            assert!(adapter.kind.is_gpu());
        }
    }
}
