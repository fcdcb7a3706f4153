//! Devices for KynML: which backends this binary carries, which devices are
//! really present, and how a user's request (`auto`, `cpu`, `cuda:1`, `wgpu`)
//! becomes one concrete Burn device.
//!
//! This is the one crate that names concrete Burn backends. Everything else in
//! KynML trains on [`Backend`] (Burn's runtime-dispatch backend), so the engine
//! is compiled once and the device is chosen at run time.
//!
//! ```no_run
//! use kynml_backend::{select, DeviceChoice};
//!
//! let device = select(DeviceChoice::Auto).expect("the CPU is always there");
//! println!("training on {}", device.describe());
//! ```

#![warn(missing_docs)]

mod cuda;
mod device;
pub mod kernel_cache;
mod quiet;
mod wgpu_probe;

pub use cuda::{probe_cuda, CudaGpu, CudaProbe};
pub use device::{proc_bytes, select, would_select, Device, DeviceChoice, DeviceError, DeviceKind, DeviceMemory};
pub use quiet::{catch_quietly, panic_words};
pub use wgpu_probe::{probe_wgpu, WgpuAdapter, WgpuAdapterKind};

/// The one Burn backend KynML trains on: Burn's runtime dispatch over CUDA,
/// Vulkan (wgpu) and flex (CPU). Autodiff is a property of the device
/// ([`Device::autodiff`]), not of the type.
pub type Backend = burn::Dispatch;

/// Re-exported so that the rest of KynML uses exactly this crate's Burn.
pub use burn;
