//! `values_per_row` is what KynML's memory estimate for the native engine
//! multiplies by the batch: checked here against the bytes a training step
//! really keeps allocated, counted by the allocator, for every kind of
//! layer. (The most a step holds at once is that and gemm's packing space,
//! about the same for any batch: a few MiB.)

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use kynml_cpu::{values_per_row, Act, LayerConfig, LossConfig, MaskSource, Net, OptimConfig, Targets, Team, Window};

/// The system allocator, counting the bytes held.
struct Counting;

static NOW: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            NOW.fetch_add(layout.size(), Ordering::SeqCst);
        }
        p
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        unsafe { System.dealloc(p, layout) };
        NOW.fetch_sub(layout.size(), Ordering::SeqCst);
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Keeps every value, doubled: dropout's masks without a generator.
struct Halves;

impl MaskSource for Halves {
    fn dropout(&mut self, _: &Team, _: f64, x: &[f32], mask: &mut [f32], out: &mut [f32]) {
        mask.fill(2.0);
        out.iter_mut().zip(x).for_each(|(o, x)| *o = 2.0 * x);
    }
}

fn window(input: [usize; 3], kernel: usize, stride: usize, padding: usize) -> Window {
    Window { input, kernel: [kernel, kernel], stride: [stride, stride], padding: [padding, padding] }
}

/// The bytes that a step of `rows` rows leaves allocated beyond a one-row
/// step's (which also makes the optimizer's state).
fn step_bytes(input: usize, layers: &[LayerConfig], rows: usize, ids: Option<usize>) -> usize {
    let mut net = Net::new(input, layers);
    // Small weights, so that no value overflows; token ids below the table's rows.
    for t in net.tensors_mut() {
        t.iter_mut().enumerate().for_each(|(i, v)| *v = ((i % 7) as f32 - 3.0) * 0.01);
    }
    let x_of = |rows: usize| -> Vec<f32> {
        (0..rows * input).map(|i| ids.map_or(((i % 11) as f32 - 5.0) * 0.1, |n| (1 + i % (n - 1)) as f32)).collect()
    };
    let classes = |rows: usize| (0..rows as u32).map(|i| i % 3).collect::<Vec<u32>>();
    let adam = OptimConfig::AdamW { beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.01 };
    let (x, y) = (x_of(1), classes(1));
    net.train_step(&x, Targets::Classes(&y), LossConfig::CrossEntropy, &adam, 1e-3, &mut Halves);
    let (x, y) = (x_of(rows), classes(rows));
    let before = NOW.load(Ordering::SeqCst);
    net.train_step(&x, Targets::Classes(&y), LossConfig::CrossEntropy, &adam, 1e-3, &mut Halves);
    NOW.load(Ordering::SeqCst) - before
}

/// The bytes that an evaluation pass of `rows` rows (`Net::predict`, its
/// outputs included) leaves allocated beyond a step of `step` rows.
fn pass_bytes(input: usize, layers: &[LayerConfig], step: usize, rows: usize, ids: Option<usize>) -> usize {
    let mut net = Net::new(input, layers);
    for t in net.tensors_mut() {
        t.iter_mut().enumerate().for_each(|(i, v)| *v = ((i % 7) as f32 - 3.0) * 0.01);
    }
    let x_of = |rows: usize| -> Vec<f32> {
        (0..rows * input).map(|i| ids.map_or(((i % 11) as f32 - 5.0) * 0.1, |n| (1 + i % (n - 1)) as f32)).collect()
    };
    let y: Vec<u32> = (0..step as u32).map(|i| i % 3).collect();
    let adam = OptimConfig::AdamW { beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.01 };
    net.train_step(&x_of(step), Targets::Classes(&y), LossConfig::CrossEntropy, &adam, 1e-3, &mut Halves);
    let (x, mut out) = (x_of(rows), Vec::new());
    let before = NOW.load(Ordering::SeqCst);
    net.predict(&x, &mut out);
    NOW.load(Ordering::SeqCst) - before
}

#[test]
fn a_steps_buffers_are_what_values_per_row_counts() {
    let dense = |units, act| LayerConfig::Dense { units, act, positions: 1 };
    let cases: Vec<(&str, usize, Vec<LayerConfig>, Option<usize>)> = vec![
        (
            "dense, norms and dropout",
            32,
            vec![
                dense(256, Act::Relu),
                LayerConfig::BatchNorm,
                dense(192, Act::Gelu),
                LayerConfig::Dropout(0.5),
                LayerConfig::LayerNorm { positions: 1 },
                dense(3, Act::Linear),
            ],
            None,
        ),
        (
            "convolutions and pooling",
            3 * 16 * 16,
            vec![
                LayerConfig::Conv { window: window([3, 16, 16], 3, 1, 1), channels: 8, act: Act::Relu },
                LayerConfig::ChannelBatchNorm { positions: 256 },
                LayerConfig::MaxPool(window([8, 16, 16], 2, 2, 0)),
                LayerConfig::Conv { window: window([8, 8, 8], 3, 1, 0), channels: 6, act: Act::Tanh },
                LayerConfig::AvgPool(window([6, 6, 6], 2, 2, 0)),
                LayerConfig::Flatten,
                dense(3, Act::Linear),
            ],
            None,
        ),
        (
            "residual blocks",
            48,
            vec![
                LayerConfig::Residual {
                    layers: vec![dense(96, Act::Silu), LayerConfig::LayerNorm { positions: 1 }],
                    projection: Some(Box::new(dense(96, Act::Linear))),
                },
                LayerConfig::Residual { layers: vec![dense(96, Act::Relu)], projection: None },
                dense(3, Act::Linear),
            ],
            None,
        ),
        (
            "tokens, a transformer and attention",
            24,
            vec![
                LayerConfig::Tokens { tokens: 40, dim: 16 },
                LayerConfig::Positional,
                LayerConfig::Transformer { length: 24, dim: 16, heads: 2, ff: 32, dropout: 0.1 },
                LayerConfig::Attention { length: 24, dim: 16, heads: 4 },
                LayerConfig::SequenceMean { length: 24, dim: 16 },
                dense(3, Act::Linear),
            ],
            Some(40),
        ),
    ];
    // Per row: the difference between two batches' steps (gemm keeps
    // packing space of its own, the same for both).
    let (small, large) = (1024, 3072);
    // On one thread that lives through the test: gemm keeps packing space
    // per thread, which a first step of the larger batch grows to its size
    // before anything is measured.
    let one = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
    for (name, input, layers, ids) in cases {
        let kept = |rows| one.install(|| step_bytes(input, &layers, rows, ids)) as f64;
        kept(large);
        let measured = (kept(large) - kept(small)) / (large - small) as f64 / 4.0;
        // The input batch is made before the step, not by it.
        let counted = (values_per_row(input, &layers) - input) as f64;
        println!("{name}: a step kept {measured} values a row, values_per_row counts {counted}");
        assert!((measured / counted - 1.0).abs() < 1e-3, "{name}: {measured} values a row kept, {counted} counted");
        // A validation pass of more rows than a step grows the same
        // buffers: by no more a row than the estimate counts a row
        // (`evaluation_rows x values_per_row`), and by something.
        let grown = one.install(|| pass_bytes(input, &layers, small, large, ids)) as f64;
        let per_row = grown / (large - small) as f64 / 4.0;
        println!("{name}: a pass of {large} rows after steps of {small} grew {per_row} values a row");
        assert!(per_row > 0.0 && per_row <= counted, "{name}: a pass grew {per_row} values a row, {counted} counted");
    }
}
