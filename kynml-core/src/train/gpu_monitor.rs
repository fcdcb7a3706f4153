//! GPU utilisation and memory, sampled from NVML while a CUDA run trains.
//!
//! NVML (`libnvidia-ml.so`, installed with the NVIDIA driver) is loaded at
//! run time through the `nvml-wrapper` crate, as `libcuda` is: a machine
//! without it trains as before, and "what runs" says that the GPU is not
//! sampled. A thread reads the GPU's busy share (the fraction of the last
//! sample period in which a kernel ran, NVML's "utilization") and its
//! memory in use every [`PERIOD`]; each epoch's record keeps the mean busy
//! share and the peak memory of its samples, the profile keeps them all.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kynml_backend::CudaGpu;

/// Between two samples. NVML's own utilisation window is 1/6 s to 1 s
/// depending on the GPU, so reading faster would repeat values.
pub const PERIOD: Duration = Duration::from_millis(200);

/// One reading.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct GpuSample {
    /// Seconds from the start of training.
    pub t: f64,
    /// Percent of the last period in which the GPU ran a kernel.
    pub busy: u32,
    /// Device memory in use, by every process, in bytes.
    pub memory: u64,
}

/// The busy share and memory of a stretch of samples.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct GpuSummary {
    /// Mean busy percent.
    pub busy: f64,
    /// Peak memory in use, bytes.
    pub peak_memory: u64,
    /// Samples it summarises.
    pub samples: usize,
}

/// `None` for no samples.
pub fn summarize(samples: &[GpuSample]) -> Option<GpuSummary> {
    if samples.is_empty() {
        return None;
    }
    let busy = samples.iter().map(|s| f64::from(s.busy)).sum::<f64>() / samples.len() as f64;
    let peak_memory = samples.iter().map(|s| s.memory).max().unwrap_or(0);
    Some(GpuSummary { busy, peak_memory, samples: samples.len() })
}

/// NVML, when it loads and knows `gpu`; else why not, for "what runs".
fn open(gpu: &CudaGpu) -> Result<nvml_wrapper::Nvml, String> {
    let nvml = nvml_wrapper::Nvml::init()
        .map_err(|e| format!("not sampled: NVML (libnvidia-ml.so) could not be loaded ({e})"))?;
    find(&nvml, gpu).map_err(|e| format!("not sampled: NVML does not know GPU {} ({e})", gpu.index))?;
    Ok(nvml)
}

fn find<'n>(
    nvml: &'n nvml_wrapper::Nvml,
    gpu: &CudaGpu,
) -> Result<nvml_wrapper::Device<'n>, nvml_wrapper::error::NvmlError> {
    if gpu.pci_bus_id.is_empty() {
        nvml.device_by_index(gpu.index as u32)
    } else {
        nvml.device_by_pci_bus_id(gpu.pci_bus_id.as_str())
    }
}

/// Whether `gpu` can be sampled: what "what runs" says of it.
pub fn check(gpu: &CudaGpu) -> Result<(), String> {
    open(gpu).map(|_| ())
}

/// The sampling thread of one GPU.
pub struct GpuMonitor {
    stop: Arc<AtomicBool>,
    samples: Arc<Mutex<Vec<GpuSample>>>,
    /// How many of `samples` [`take`](Self::take) has handed out.
    taken: usize,
    thread: Option<JoinHandle<()>>,
}

impl GpuMonitor {
    /// Starts sampling `gpu` (found by its PCI bus id, else its index),
    /// timing samples from `started`. Fails, saying why, when NVML is not
    /// installed or does not know the GPU.
    pub fn start(gpu: &CudaGpu, started: Instant) -> Result<Self, String> {
        let nvml = open(gpu)?;
        let gpu = gpu.clone();
        let (stop, samples) = (Arc::new(AtomicBool::new(false)), Arc::new(Mutex::new(Vec::new())));
        let (stop_flag, sink) = (Arc::clone(&stop), Arc::clone(&samples));
        let thread = std::thread::Builder::new()
            .name("kynml-nvml".into())
            .spawn(move || {
                let Ok(device) = find(&nvml, &gpu) else { return };
                while !stop_flag.load(Ordering::Relaxed) {
                    if let (Ok(u), Ok(m)) = (device.utilization_rates(), device.memory_info()) {
                        let sample = GpuSample { t: started.elapsed().as_secs_f64(), busy: u.gpu, memory: m.used };
                        sink.lock().unwrap_or_else(|e| e.into_inner()).push(sample);
                    }
                    std::thread::sleep(PERIOD);
                }
            })
            .map_err(|e| format!("the NVML sampling thread did not start ({e})"))?;
        Ok(GpuMonitor { stop, samples, taken: 0, thread: Some(thread) })
    }

    /// The samples since the last call (an epoch's).
    pub fn take(&mut self) -> Vec<GpuSample> {
        let all = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        let new = all[self.taken.min(all.len())..].to_vec();
        self.taken = all.len();
        new
    }

    /// Stops the thread and returns every sample of the run.
    pub fn finish(mut self) -> Vec<GpuSample> {
        self.halt();
        std::mem::take(&mut *self.samples.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for GpuMonitor {
    fn drop(&mut self) {
        self.halt();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stretch_of_samples_gives_its_mean_busy_share_and_peak_memory() {
        let s = |t: f64, busy: u32, memory: u64| GpuSample { t, busy, memory };
        let got = summarize(&[s(0.0, 20, 5), s(0.2, 40, 9), s(0.4, 90, 7)]).unwrap();
        assert_eq!(got, GpuSummary { busy: 50.0, peak_memory: 9, samples: 3 });
        assert_eq!(summarize(&[]), None);
    }

    #[test]
    fn without_nvml_or_the_gpu_it_says_why_and_never_panics() {
        let gpu = CudaGpu {
            index: 7,
            name: "absent".into(),
            compute_capability: (9, 0),
            memory_bytes: 0,
            pci_bus_id: "0000:ff:1f.7".into(),
        };
        match GpuMonitor::start(&gpu, Instant::now()) {
            // The machines CI runs on have no NVIDIA driver.
            Err(why) => {
                assert!(why.contains("NVML") && why.starts_with("not sampled"), "{why}");
                assert_eq!(check(&gpu), Err(why));
            }
            // A machine with NVML but no GPU on that bus would have refused
            // too; one that had it is sampled, and stops when asked.
            Ok(m) => {
                let _ = m.finish();
            }
        }
    }
}
