//! A CUDA probe that cannot crash the process.
//!
//! Burn's CUDA runtime panics in a background thread when `libcuda` is
//! missing, which no caller can catch. So before Burn ever touches CUDA we
//! open the driver library ourselves and ask it how many devices it sees.

use std::ffi::{c_char, c_int, c_uint};

/// One CUDA GPU as the driver reports it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CudaGpu {
    /// The driver's device ordinal, 0-based: `cuda:N` names device `N`.
    pub index: usize,
    /// The GPU's model name as the driver reports it, e.g. `NVIDIA H200`.
    pub name: String,
    /// Compute capability, e.g. `(9, 0)` for an H100/H200.
    pub compute_capability: (u32, u32),
    /// Total device memory, in bytes.
    pub memory_bytes: u64,
    /// The PCI bus id (`0000:3b:00.0`), by which NVML finds the same GPU
    /// whatever order it counts devices in; empty if the driver did not say.
    pub pci_bus_id: String,
}

/// What the driver said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CudaProbe {
    /// The driver loaded and reported these GPUs (possibly none).
    Available(Vec<CudaGpu>),
    /// No usable driver; the reason is meant for a person.
    Unavailable(String),
}

type CuResult = c_int;
const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: c_int = 75;
const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: c_int = 76;

/// Ask the CUDA driver which GPUs it sees. Never panics.
pub fn probe_cuda() -> CudaProbe {
    // SAFETY: we load the system's CUDA driver library and call documented
    // driver API entry points with the signatures from `cuda.h`.
    match unsafe { probe_driver() } {
        Ok(gpus) => CudaProbe::Available(gpus),
        Err(reason) => CudaProbe::Unavailable(reason),
    }
}

unsafe fn probe_driver() -> Result<Vec<CudaGpu>, String> {
    let lib = ["libcuda.so.1", "libcuda.so"]
        .iter()
        .find_map(|name| libloading::Library::new(*name).ok())
        .ok_or_else(|| "the CUDA driver library (libcuda.so.1) is not installed".to_string())?;

    let symbol = |name: &str| format!("libcuda has no `{name}`");
    let cu_init: libloading::Symbol<unsafe extern "C" fn(c_uint) -> CuResult> =
        lib.get(b"cuInit\0").map_err(|_| symbol("cuInit"))?;
    let cu_count: libloading::Symbol<unsafe extern "C" fn(*mut c_int) -> CuResult> =
        lib.get(b"cuDeviceGetCount\0").map_err(|_| symbol("cuDeviceGetCount"))?;
    let cu_get: libloading::Symbol<unsafe extern "C" fn(*mut c_int, c_int) -> CuResult> =
        lib.get(b"cuDeviceGet\0").map_err(|_| symbol("cuDeviceGet"))?;
    let cu_name: libloading::Symbol<unsafe extern "C" fn(*mut c_char, c_int, c_int) -> CuResult> =
        lib.get(b"cuDeviceGetName\0").map_err(|_| symbol("cuDeviceGetName"))?;
    let cu_attr: libloading::Symbol<unsafe extern "C" fn(*mut c_int, c_int, c_int) -> CuResult> =
        lib.get(b"cuDeviceGetAttribute\0").map_err(|_| symbol("cuDeviceGetAttribute"))?;
    let cu_mem: libloading::Symbol<unsafe extern "C" fn(*mut usize, c_int) -> CuResult> =
        lib.get(b"cuDeviceTotalMem_v2\0").map_err(|_| symbol("cuDeviceTotalMem_v2"))?;
    let cu_bus: Option<libloading::Symbol<unsafe extern "C" fn(*mut c_char, c_int, c_int) -> CuResult>> =
        lib.get(b"cuDeviceGetPCIBusId\0").ok();

    let status = cu_init(0);
    if status != 0 {
        return Err(format!("the CUDA driver failed to initialise (cuInit returned {status})"));
    }
    let mut count: c_int = 0;
    if cu_count(&mut count) != 0 {
        return Err("the CUDA driver could not count devices".into());
    }
    let mut gpus = Vec::new();
    for index in 0..count {
        let mut dev: c_int = 0;
        if cu_get(&mut dev, index) != 0 {
            continue;
        }
        let mut name = [0 as c_char; 256];
        let name = if cu_name(name.as_mut_ptr(), name.len() as c_int, dev) == 0 {
            std::ffi::CStr::from_ptr(name.as_ptr()).to_string_lossy().into_owned()
        } else {
            format!("CUDA device {index}")
        };
        let (mut major, mut minor) = (0, 0);
        cu_attr(&mut major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
        cu_attr(&mut minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
        let mut memory: usize = 0;
        cu_mem(&mut memory, dev);
        let mut bus = [0 as c_char; 64];
        let pci_bus_id = match &cu_bus {
            Some(f) if f(bus.as_mut_ptr(), bus.len() as c_int, dev) == 0 => {
                std::ffi::CStr::from_ptr(bus.as_ptr()).to_string_lossy().into_owned()
            }
            _ => String::new(),
        };
        gpus.push(CudaGpu {
            index: index as usize,
            name,
            compute_capability: (major as u32, minor as u32),
            memory_bytes: memory as u64,
            pci_bus_id,
        });
    }
    Ok(gpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_never_panics_and_is_consistent() {
        // Whatever this machine has, the probe answers: a GPU list indexed
        // 0..n in order, or a reason a person can act on.
        match probe_cuda() {
            CudaProbe::Available(gpus) => {
                for (i, gpu) in gpus.iter().enumerate() {
                    assert_eq!(gpu.index, i);
                    assert!(gpu.compute_capability.0 >= 1);
                }
            }
            CudaProbe::Unavailable(reason) => {
                assert!(reason.contains("CUDA") || reason.contains("libcuda"), "unhelpful reason: {reason}")
            }
        }
    }
}
