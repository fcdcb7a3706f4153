//! Lists the Vulkan adapters wgpu can see, so that `auto` can tell a real GPU
//! from a software rasteriser (Mesa's lavapipe reports itself as a CPU).

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake};

/// The kind of device a Vulkan adapter reports itself as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum WgpuAdapterKind {
    /// A separate GPU with its own memory.
    DiscreteGpu,
    /// A GPU built into the CPU or chipset, sharing the host's memory.
    IntegratedGpu,
    /// A virtual GPU, as a virtual machine or hypervisor presents one.
    VirtualGpu,
    /// A software implementation such as lavapipe.
    Cpu,
    /// An adapter that reports none of the other kinds.
    Other,
}

impl WgpuAdapterKind {
    /// True for hardware that is worth training on.
    pub fn is_gpu(self) -> bool {
        matches!(self, Self::DiscreteGpu | Self::IntegratedGpu | Self::VirtualGpu)
    }
}

/// One adapter, with its position among adapters of the same kind (which is
/// how Burn's `WgpuDevice` names it).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct WgpuAdapter {
    /// The adapter's name as the driver reports it.
    pub name: String,
    /// The driver's name and version information, as it reports them.
    pub driver: String,
    /// What sort of device the adapter is.
    pub kind: WgpuAdapterKind,
    /// 0-based position among the adapters of the same kind.
    pub index_of_kind: usize,
    /// True when the adapter supports f16 arithmetic in shaders (wgpu's `SHADER_F16`).
    pub shader_f16: bool,
}

/// The Vulkan adapters present, best first (discrete, integrated, virtual,
/// software). Empty when there is no Vulkan loader or driver.
pub fn probe_wgpu() -> Vec<WgpuAdapter> {
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
        backends: wgpu::Backends::VULKAN,
        ..wgpu::InstanceDescriptor::new_without_display_handle()
    });
    let adapters = block_on(instance.enumerate_adapters(wgpu::Backends::VULKAN));
    let mut counts = [0usize; 5];
    let mut found: Vec<WgpuAdapter> = adapters
        .iter()
        .map(|adapter| {
            let info = adapter.get_info();
            let (kind, slot) = match info.device_type {
                wgpu::DeviceType::DiscreteGpu => (WgpuAdapterKind::DiscreteGpu, 0),
                wgpu::DeviceType::IntegratedGpu => (WgpuAdapterKind::IntegratedGpu, 1),
                wgpu::DeviceType::VirtualGpu => (WgpuAdapterKind::VirtualGpu, 2),
                wgpu::DeviceType::Cpu => (WgpuAdapterKind::Cpu, 3),
                wgpu::DeviceType::Other => (WgpuAdapterKind::Other, 4),
            };
            let index_of_kind = counts[slot];
            counts[slot] += 1;
            WgpuAdapter {
                name: info.name.clone(),
                driver: format!("{} {}", info.driver, info.driver_info).trim().to_string(),
                kind,
                index_of_kind,
                shader_f16: adapter.features().contains(wgpu::Features::SHADER_F16),
            }
        })
        .collect();
    found.sort_by_key(|a| (rank(a.kind), a.index_of_kind));
    found
}

fn rank(kind: WgpuAdapterKind) -> u8 {
    match kind {
        WgpuAdapterKind::DiscreteGpu => 0,
        WgpuAdapterKind::IntegratedGpu => 1,
        WgpuAdapterKind::VirtualGpu => 2,
        WgpuAdapterKind::Cpu => 3,
        WgpuAdapterKind::Other => 4,
    }
}

/// Enough of an executor for wgpu's adapter enumeration, which completes
/// without real waiting on native platforms.
fn block_on<F: Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Arc::new(Unpark(std::thread::current())).into();
    let mut cx = Context::from_waker(&waker);
    let mut future = pin!(future);
    loop {
        match future.as_mut().poll(&mut cx) {
            Poll::Ready(value) => return value,
            Poll::Pending => std::thread::park(),
        }
    }
}
