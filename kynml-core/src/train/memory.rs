//! How much memory a run needs, estimated from the spec before anything is
//! allocated, so that a model or batch too large for the device is an error
//! before training rather than a failed allocation inside it.
//!
//! The estimate, in bytes (fp32 storage; activations at the compute
//! precision's width):
//! - **weights** and **gradients**: 4 bytes per parameter each (gradients
//!   twice with `accumulate`);
//! - **optimizer state**: Adam and AdamW keep two values per parameter, SGD
//!   and RMSprop one per running average they keep (momentum, square mean,
//!   centred mean);
//! - **best weights** with early stopping (one copy of the weights: the
//!   earlier best is freed before a better epoch's is made);
//! - on the host only, the **copies to save** checkpoints (see
//!   [`MemoryEstimate::with_host_copies`]) and a resumed run's checkpoint;
//!   and **saving the model at the end**, once training's memory is freed;
//! - **activations** of one batch (on Burn's engines; the native CPU engine's
//!   own buffers are counted by [`estimate_native`]): the input and every layer's output (kept
//!   for the backward pass; twice for layers whose derivative also needs
//!   their input, such as gelu, or their normalised values, as norms do),
//!   twice the widest layer output (the gradients flowing back through it;
//!   the input is not counted there, as no gradient is taken for it), and
//!   for attention each head's scores and weights (`2 x heads x L x L` per
//!   row).
//!
//! It leaves out the allocator's rounding and the kernels' scratch space,
//! which the allocator's pool also holds. Against the most memory in use
//! that a profiled run on wgpu reads at the ends of its steps' phases, it
//! came within 25% on every model measured (see the tests).

use crate::model::{LayerSpec, Role, Shape};
use crate::spec::types::{Optimizer, Spec};
use crate::train::precision::Compute;

/// One run's memory, estimated from its spec.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct MemoryEstimate {
    /// The parameters, in fp32.
    pub weights: u64,
    /// One gradient per parameter; two with `accumulate` (the earlier
    /// batches' sum beside the last batch's).
    pub gradients: u64,
    /// The optimizer's running averages.
    pub optimizer: u64,
    /// With early stopping, the best epoch's weights, kept beside the
    /// model (the earlier best is freed before a better epoch's is made).
    pub best: u64,
    /// Copies in host memory that the run makes to save (see
    /// [`MemoryEstimate::with_host_copies`]); 0 where the run's memory is a
    /// GPU's.
    pub copies: u64,
    /// On the host, what saving the model at the end holds, once
    /// training's memory is freed: three copies of the weights (see
    /// [`MemoryEstimate::with_host_copies`]); 0 where the run's memory is
    /// a GPU's.
    pub at_the_end: u64,
    /// The largest parameter, in bytes.
    pub largest_param: u64,
    /// A resumed run's checkpoint, read and held through the run (about
    /// its file's size); 0 for a run that starts afresh.
    pub resumed: u64,
    /// The data's rows held through the run (features, targets, row
    /// numbers: [`Dataset::host_bytes`](crate::data::Dataset::host_bytes))
    /// where the run's memory is the host's; 0 where it is a GPU's, or
    /// where the estimate was made without the data.
    pub data: u64,
    /// Data-parallel replicas on the host (`[cpu, cpu]`): what the others
    /// hold beside the first (their own weights, gradients and optimizer
    /// state) and every replica's flattened and summed gradients for the
    /// all-reduce;
    /// 0 on one device, or where each replica has a device of its own.
    pub replicas: u64,
    /// How many replicas share the host; 1 on one device.
    pub replica_count: usize,
    /// What one batch adds: `batch x per_row`.
    pub activations: u64,
    /// The native CPU engine's validation passes: its buffers grow to a
    /// pass's rows, which may be more than a batch's (what they hold is
    /// `evaluation_rows x per_row`); 0 on Burn's engines, whose evaluation
    /// keeps no activations for a backward pass.
    pub evaluation: u64,
    /// Rows per validation pass on the native CPU engine; 0 elsewhere.
    pub evaluation_rows: usize,
    /// Rows per batch.
    pub batch: usize,
    /// Activation bytes per row.
    pub per_row: u64,
    /// The largest single tensor of the run.
    pub largest: Largest,
}

/// The largest single tensor a run allocates.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Largest {
    /// Its size in bytes.
    pub bytes: u64,
    /// The index of the model block's line that owns it (a block's own line
    /// for its inner layers); `None` for a batch's activations.
    pub layer: Option<usize>,
    /// In words: `weight [40000, 40000]`, `the output of a batch [256, 4096]`.
    pub what: String,
}

impl MemoryEstimate {
    /// The most held at once: training's parts together, or saving the
    /// model at the end, whichever is more.
    pub fn total(&self) -> u64 {
        self.fixed().saturating_add(self.activations.max(self.evaluation)).max(self.at_the_end)
    }

    /// What does not depend on the batch: weights, gradients, optimizer
    /// state, best weights, the copies made to save and a resumed checkpoint.
    pub fn fixed(&self) -> u64 {
        let parts = [
            self.weights,
            self.gradients,
            self.optimizer,
            self.best,
            self.copies,
            self.resumed,
            self.replicas,
            self.data,
        ];
        parts.into_iter().fold(0u64, u64::saturating_add)
    }

    /// Its parts in words: `weights 1.0 MiB, gradients 1.0 MiB, optimizer
    /// state 2.0 MiB, activations of a batch of 16: 128.4 KiB` (and `best
    /// weights 2.0 MiB` and `copies to save 3.0 MiB` before the
    /// activations, where there are any, and `the checkpoint resumed from
    /// 3.0 MiB`), then, where there is one, `; then, to save the model at
    /// the end, 3.0 MiB`.
    pub fn breakdown(&self) -> String {
        let part = |name: &str, n: u64| if n > 0 { format!(", {name} {}", bytes(n)) } else { String::new() };
        // The native engine's best weights also count their copies on the
        // way out of it (more than one copy of the weights): said so.
        let best_name = if self.best > self.weights { "best weights with their copying" } else { "best weights" };
        let (best, copies) = (part(best_name, self.best), part("copies to save", self.copies));
        let resumed = part("the checkpoint resumed from", self.resumed);
        let data = part("the data's rows", self.data);
        let others = self.replica_count.saturating_sub(1);
        let replicas = if self.replicas > 0 {
            format!(
                ", {others} more replica{} (weights, gradients, optimizer state) and the all-reduce's gradients {}",
                if others == 1 { "" } else { "s" },
                bytes(self.replicas)
            )
        } else {
            String::new()
        };
        let evaluation = if self.evaluation > self.activations {
            format!(" (a validation pass of {} rows: {})", self.evaluation_rows, bytes(self.evaluation))
        } else {
            String::new()
        };
        let end = if self.at_the_end > 0 {
            format!("; then, to save the model at the end, {}", bytes(self.at_the_end))
        } else {
            String::new()
        };
        format!(
            "weights {}, gradients {}, optimizer state {}{best}{copies}{resumed}{replicas}{data}, activations of a \
             batch of {}: {}{evaluation}{end}",
            bytes(self.weights),
            bytes(self.gradients),
            bytes(self.optimizer),
            self.batch,
            bytes(self.activations)
        )
    }

    /// This estimate for `spec`'s run where its memory is the host's (on
    /// the CPU), where saving takes room beside training:
    /// - while training, a checkpoint, when the spec writes them: a copy of
    ///   the weights, the best weights when kept, and the optimizer state
    ///   (the file is written from it a piece at a time), and while one
    ///   parameter's state is encoded, two more copies of it (the largest
    ///   parameter's counted); and with `native`, the native engine's second
    ///   copy of the weights, in the Burn model that names them for
    ///   checkpoints and exports;
    /// - at the end, once training's memory is freed, the model files: the
    ///   weights in the export's layout (the safetensors file is written
    ///   from them a piece at a time), and the Burn model and record that
    ///   `model.mpk` is written from: three copies of the weights (an
    ///   ONNX export holds as many: the exported weights, the graph's
    ///   message and the file's bytes, and one parameter's initializer
    ///   while it is laid out).
    pub fn with_host_copies(mut self, spec: &Spec, native: bool) -> Self {
        let kept = if native { self.weights } else { 0 };
        let checkpoint = if spec.train.checkpoint.is_some() {
            // Values of state per parameter, times the largest parameter's bytes.
            let encoding = (self.optimizer / self.weights.max(1)).saturating_mul(self.largest_param).saturating_mul(2);
            // The best weights' copy, when kept (`best` may count more: how they are made).
            let best = if self.best > 0 { self.weights } else { 0 };
            [self.weights, best, self.optimizer, encoding].into_iter().fold(0u64, u64::saturating_add)
        } else {
            0
        };
        self.copies = kept.saturating_add(checkpoint);
        // An ONNX file is laid out a parameter at a time beside the three.
        let onnx = spec.export.as_ref().is_some_and(|e| e.format.value == crate::spec::types::ExportFormat::Onnx);
        self.at_the_end = self.weights.saturating_mul(3).saturating_add(if onnx { self.largest_param } else { 0 });
        self
    }

    /// This estimate for `n` data-parallel replicas that share the host's
    /// memory (`[cpu, cpu]`): each holds its own weights, gradients and
    /// optimizer state, and for the all-reduce its gradients flattened and
    /// the sum it gets back; the batch's rows are split between them, so
    /// its activations count once. (A 34 M-parameter model with Adam, batch
    /// 32: 392 MiB counted against a 447 MiB peak on 2 replicas, 783 against
    /// 792 on 4.)
    pub fn with_replicas(mut self, n: usize) -> Self {
        if n > 1 {
            let one = [self.weights, self.gradients, self.optimizer].into_iter().fold(0u64, u64::saturating_add);
            let flat = self.weights.saturating_mul(2 * n as u64);
            self.replicas = one.saturating_mul(n as u64 - 1).saturating_add(flat);
            self.replica_count = n;
        }
        self
    }

    /// The batch a refusal suggests for `capacity` bytes: the largest that
    /// leaves a twentieth of them free, for what the estimate leaves out
    /// (the process's own start, the allocator's rounding), as one that
    /// fits to the byte may not; where none does, the largest that fits.
    pub fn batch_to_suggest(&self, capacity: u64) -> Option<usize> {
        self.batch_that_fits(capacity - capacity / 20).or_else(|| self.batch_that_fits(capacity))
    }

    /// The largest batch whose estimate fits in `capacity` bytes, if any does.
    pub fn batch_that_fits(&self, capacity: u64) -> Option<usize> {
        if self.at_the_end > capacity {
            return None;
        }
        let room = capacity.checked_sub(self.fixed())?;
        if self.evaluation > room {
            return None;
        }
        let rows = room / self.per_row.max(1);
        (rows >= 1).then(|| usize::try_from(rows).unwrap_or(usize::MAX))
    }
}

/// Optimizer values kept per parameter; a fused update also lays the
/// gradients and the weights end to end while it runs.
fn state_per_param(o: &Optimizer) -> u64 {
    let fused = if o.fused() == Some(true) { 2 } else { 0 };
    fused
        + match *o {
            Optimizer::AdamW { .. } | Optimizer::Adam { .. } => 2,
            Optimizer::Sgd { momentum, .. } => u64::from(momentum > 0.0),
            Optimizer::RmsProp { momentum, centered, .. } => 1 + u64::from(momentum > 0.0) + u64::from(centered),
        }
}

/// Tensors of a layer's output size kept for the backward pass: the output,
/// and also the values before the activation where its derivative needs
/// them (silu, leaky relu), three more for gelu (written out of erf for its
/// exact derivative, it keeps its input, the scaled input and Φ), or the
/// normalised values of a norm layer.
fn saved_per_output(layer: &LayerSpec) -> u64 {
    use crate::spec::types::Activation;
    match layer {
        LayerSpec::Dense(d) => match d.activation {
            Activation::Gelu => 4,
            Activation::Silu | Activation::LeakyRelu(_) => 2,
            _ => 1,
        },
        LayerSpec::LayerNorm(_) | LayerSpec::BatchNorm(_) => 2,
        _ => 1,
    }
}

/// The estimate for `spec`'s model, batch and optimizer at `compute`.
pub fn estimate(spec: &Spec, compute: Compute) -> MemoryEstimate {
    let act_bytes: u64 = match compute {
        Compute::Bf16 | Compute::Fp16 => 2,
        _ => 4,
    };
    let batch = spec.train.batch.value;
    let (mut params, mut largest_param) = (0u64, 0u64);
    let mut largest = Largest { bytes: 0, layer: None, what: String::new() };
    let input = spec.model.shape.size() as u64;
    let mut kept = input;
    // The widest layer output: no gradient is computed for the input.
    let mut widest = 0u64;
    let mut scores = 0u64;
    // The largest padded input of a convolution, which Burn holds whole.
    let mut padded = 0u64;
    let mut shape = spec.model.shape.clone();
    for (index, layer) in spec.model.layers.iter().enumerate() {
        // A block's tensors hold its inner layers'.
        for t in layer.value.tensors(&shape).iter().filter(|t| t.role == Role::Param) {
            let bytes = 4 * t.len() as u64;
            params = params.saturating_add(t.len() as u64);
            largest_param = largest_param.max(bytes);
            if bytes > largest.bytes {
                largest = Largest { bytes, layer: Some(index), what: format!("{} {:?}", t.name, t.shape) };
            }
        }
        let mut visit = |layer: &LayerSpec, input: &Shape| {
            scores = scores.saturating_add(layer.attention_scores(input));
            if let LayerSpec::Conv(c) = layer {
                padded = padded.max(c.padded_values(input));
            }
            let out = layer.output(input).unwrap_or_else(|_| input.clone());
            kept = kept.saturating_add(saved_per_output(layer) * out.size() as u64);
            widest = widest.max(out.size() as u64);
            out
        };
        let next = visit(&layer.value, &shape);
        let mut inner = shape.clone();
        for child in layer.value.children() {
            inner = visit(child, &inner);
        }
        shape = next;
    }
    // Sizes are at most 2^40 values each (`model::MOST_VALUES`), but a batch
    // or a long sequence's attention scores can still take the products past
    // u64: they saturate, and the run is refused as too large.
    let per_row =
        act_bytes.saturating_mul(kept.saturating_add(2 * widest).saturating_add(scores).saturating_add(padded));
    // The batch's largest tensor: its widest output, or the input itself.
    let (width, what) = if input > widest { (input, "input") } else { (widest, "widest output") };
    let batch_bytes = (batch as u64).saturating_mul(act_bytes.saturating_mul(width));
    if batch_bytes > largest.bytes {
        largest = Largest { bytes: batch_bytes, layer: None, what: format!("a batch's {what} [{batch}, {width}]") };
    }
    let padded_bytes = (batch as u64).saturating_mul(act_bytes.saturating_mul(padded));
    if padded_bytes > largest.bytes {
        let what = format!("a batch's padded input to a convolution [{batch}, {padded}]");
        largest = Largest { bytes: padded_bytes, layer: None, what };
    }
    let weights = params.saturating_mul(4);
    let gradient_sets = if spec.train.accumulate.value > 1 { 2 } else { 1 };
    MemoryEstimate {
        weights,
        gradients: weights.saturating_mul(gradient_sets),
        optimizer: params.saturating_mul(4 * state_per_param(&spec.train.optimizer.value)),
        best: if spec.train.early_stop.is_some() { weights } else { 0 },
        copies: 0,
        at_the_end: 0,
        largest_param,
        resumed: 0,
        data: 0,
        replicas: 0,
        replica_count: 1,
        activations: (batch as u64).saturating_mul(per_row),
        evaluation: 0,
        evaluation_rows: 0,
        batch,
        per_row,
        largest,
    }
}

/// The estimate for a run on the native CPU engine (fp32), whose network
/// is built from `layers`: the weights, gradients and optimizer state as
/// [`estimate`] counts them, and per row what the network's buffers hold
/// through a step ([`kynml_cpu::values_per_row`]: the input, each layer's
/// kept values and scratch, two gradient buffers as wide as the widest
/// layer), which is not what Burn keeps. With early stopping, the best
/// weights are copied out of the network a tensor at a time, each through
/// two copies on its way into a Burn model: the largest parameter's two are
/// counted with them.
/// Its validation passes over `valid_rows` rows grow the same buffers to
/// [`evaluation_rows`](crate::train::native::evaluation_rows) rows, counted
/// where that is more than a batch.
pub fn estimate_native(spec: &Spec, layers: &[kynml_cpu::LayerConfig], valid_rows: usize) -> MemoryEstimate {
    let mut e = estimate(spec, Compute::Fp32);
    if e.best > 0 {
        e.best = e.best.saturating_add(e.largest_param.saturating_mul(2));
    }
    let values = kynml_cpu::values_per_row(spec.model.input.value, layers);
    e.per_row = 4u64.saturating_mul(u64::try_from(values).unwrap_or(u64::MAX));
    e.activations = (e.batch as u64).saturating_mul(e.per_row);
    e.evaluation_rows = crate::train::native::evaluation_rows(values, valid_rows);
    e.evaluation = (e.evaluation_rows as u64).saturating_mul(e.per_row);
    e
}

/// The host memory that `rows` rows of `values` f32 values each take while
/// they are read (or made), normalised and split: about two copies (peak RSS
/// measured with text rows padded to 16,384 and 65,536 tokens on a
/// 4,000-row file).
pub fn data_bytes(rows: u64, values: u64) -> u64 {
    rows.saturating_mul(values).saturating_mul(2 * 4)
}

/// A count with an SI prefix and `unit`, in three significant digits:
/// `si(640.0, "")` is `640`, `si(12_345.0, "")` `12.3 k`, `si(2.4e9,
/// "FLOP/s")` `2.40 GFLOP/s`; a value that rounds up to 1000 takes the next
/// prefix (`1.00 M`).
pub fn si(n: f64, unit: &str) -> String {
    const PREFIXES: [&str; 6] = ["", "k", "M", "G", "T", "P"];
    let scale = |i: usize| 1000f64.powi(i as i32);
    let mut i = (1..PREFIXES.len()).take_while(|&i| n >= scale(i)).last().unwrap_or(0);
    let text = |i: usize| match n / scale(i) {
        v if i == 0 && v.fract() == 0.0 => format!("{v:.0}"),
        v if v >= 99.95 => format!("{v:.0}"),
        v if v >= 9.995 => format!("{v:.1}"),
        v => format!("{v:.2}"),
    };
    let mut shown = text(i);
    if shown == "1000" && i + 1 < PREFIXES.len() {
        i += 1;
        shown = text(i);
    }
    let space = if PREFIXES[i].is_empty() && unit.is_empty() { "" } else { " " };
    format!("{shown}{space}{}{unit}", PREFIXES[i])
}

/// Bytes as a person reads them: `512 B`, `3.4 MiB`, `1.2 GiB`.
pub fn bytes(n: u64) -> String {
    let n = n as f64;
    if n >= (1u64 << 60) as f64 {
        format!("{:.1} EiB", n / (1u64 << 60) as f64)
    } else if n >= (1u64 << 50) as f64 {
        format!("{:.1} PiB", n / (1u64 << 50) as f64)
    } else if n >= (1u64 << 40) as f64 {
        format!("{:.1} TiB", n / (1u64 << 40) as f64)
    } else if n >= (1u64 << 30) as f64 {
        format!("{:.1} GiB", n / (1u64 << 30) as f64)
    } else if n >= (1u64 << 20) as f64 {
        format!("{:.1} MiB", n / (1u64 << 20) as f64)
    } else if n >= 1024.0 {
        format!("{:.1} KiB", n / 1024.0)
    } else {
        format!("{n:.0} B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_take_three_significant_digits_and_a_prefix() {
        assert_eq!(si(0.0, ""), "0");
        assert_eq!(si(999.0, ""), "999");
        assert_eq!(si(1000.0, ""), "1.00 k");
        assert_eq!(si(12_345.0, ""), "12.3 k");
        assert_eq!(si(999_499.0, ""), "999 k");
        assert_eq!(si(999_949.0, ""), "1.00 M");
        assert_eq!(si(203e6, ""), "203 M");
        assert_eq!(si(3.2e9, ""), "3.20 G");
        assert_eq!(si(119_808.0, "FLOP"), "120 kFLOP");
        assert_eq!(si(39.9e6, "FLOP/s"), "39.9 MFLOP/s");
        assert_eq!(si(12.5, "FLOP/s"), "12.5 FLOP/s");
    }

    fn spec(model: &str, train: &str) -> Spec {
        let tokens = if model.contains("seq") { " tokens = \"t\"\n" } else { "" };
        let text = format!(
            "dataset D:\n source = csv(\"d.csv\")\n target = \"y\"\n{tokens}model M:\n{model}\ntrain:\n model = M\n data = D\n loss = mse\n epochs = 1\n{train}"
        );
        crate::spec::parse_spec(&text).unwrap()
    }

    /// Replicas that share the host each hold their own weights, gradients
    /// and optimizer state, and their gradients flattened and summed for the all-reduce;
    /// the batch's activations, split between them, count once.
    #[test]
    fn replicas_on_the_host_each_hold_their_own_state() {
        let one =
            estimate(&spec(" input 8\n dense 16 relu\n dense 1 linear", " optimizer = adam(lr=0.01)\n"), Compute::Fp32);
        assert_eq!(one.clone().with_replicas(1), one);
        let (w, g, o) = (one.weights, one.gradients, one.optimizer);
        for n in [2u64, 4] {
            let many = one.clone().with_replicas(n as usize);
            assert_eq!(many.fixed() - one.fixed(), (n - 1) * (w + g + o) + 2 * n * w, "{n} replicas");
            assert_eq!(many.activations, one.activations);
            let said = many.breakdown();
            assert!(said.contains(&format!("{} more replica", n - 1)) && said.contains("all-reduce"), "{said}");
        }
    }

    #[test]
    fn dense_layers_count_weights_gradients_state_and_activations() {
        // 10 -> 20 -> 1: 10*20 + 20 + 20 + 1 = 241 parameters.
        let s = spec(" input 10\n dense 20 relu\n dense 1 linear", " optimizer = adamw(lr=0.01)\n batch = 8\n");
        let e = estimate(&s, Compute::Fp32);
        assert_eq!((e.weights, e.gradients, e.optimizer), (4 * 241, 4 * 241, 8 * 241));
        // Kept: input 10 + outputs 20 + 1; twice the widest (20).
        assert_eq!(e.per_row, 4 * (10 + 21 + 40));
        assert_eq!(e.activations, 8 * e.per_row);
        assert_eq!(e.total(), e.fixed() + e.activations);
        assert_eq!(
            e.breakdown(),
            "weights 964 B, gradients 964 B, optimizer state 1.9 KiB, activations of a batch of 8: 2.2 KiB"
        );
        assert_eq!((e.largest.bytes, e.largest.layer), (4 * 200, Some(0)));
        assert!(e.largest.what.contains("weight"), "{}", e.largest.what);
        // bf16 halves the activations, not the fp32 weights; plain SGD keeps no state.
        let half = estimate(&s, Compute::Bf16);
        assert_eq!((half.weights, half.per_row), (e.weights, e.per_row / 2));
        let sgd = spec(" input 10\n dense 20 relu\n dense 1 linear", " optimizer = sgd(lr=0.1)\n batch = 8\n");
        assert_eq!(estimate(&sgd, Compute::Fp32).optimizer, 0);
    }

    /// Accumulating keeps a second set of gradients; early stopping the best
    /// weights; on the host, while training, a checkpoint's weights, best
    /// weights and state with the largest parameter's state encoded twice
    /// more, and the native engine's second copy of the weights; at the end,
    /// saving the model's three copies of the weights.
    #[test]
    fn accumulation_early_stopping_and_saving_are_counted() {
        let model = " input 10\n dense 20 relu\n dense 1 linear";
        // 241 parameters, the largest 200 (the first weight).
        let (w, largest) = (4 * 241, 4 * 200);
        let plain = spec(model, " optimizer = adam(lr=0.01)\n");
        let e = estimate(&plain, Compute::Fp32);
        assert_eq!((e.gradients, e.best, e.copies, e.largest_param), (w, 0, 0, largest));
        let more = spec(model, " optimizer = adam(lr=0.01)\n accumulate = 4\n early_stop = early_stop(patience=2)\n");
        let e = estimate(&more, Compute::Fp32);
        assert_eq!((e.gradients, e.best), (2 * w, w));
        assert!(
            e.breakdown().contains("optimizer state 1.9 KiB, best weights 964 B, activations"),
            "{}",
            e.breakdown()
        );
        // No checkpoint: nothing while training (but the native engine's
        // second copy); at the end, three copies of the weights.
        let e = estimate(&plain, Compute::Fp32).with_host_copies(&plain, false);
        assert_eq!((e.copies, e.at_the_end), (0, 3 * w));
        assert_eq!(e.total(), e.fixed() + e.activations);
        assert_eq!(estimate(&plain, Compute::Fp32).with_host_copies(&plain, true).copies, w);
        // An ONNX export lays one parameter's initializer out beside them.
        let onnx = spec(model, " optimizer = adam(lr=0.01)\nexport:\n format = onnx\n path = \"m.onnx\"\n");
        assert_eq!(estimate(&onnx, Compute::Fp32).with_host_copies(&onnx, false).at_the_end, 3 * w + largest);
        // Adam's checkpoint: weights, two moments, and the largest weight's two moments twice more.
        let saved = spec(model, " optimizer = adam(lr=0.01)\n checkpoint = checkpoint(every_n=1, path=\"c.ckpt\")\n");
        let e = estimate(&saved, Compute::Fp32).with_host_copies(&saved, false);
        assert_eq!(e.copies, w + 2 * w + 2 * 2 * largest);
        assert!(e.breakdown().contains(&format!(", copies to save {},", bytes(e.copies))), "{}", e.breakdown());
        assert_eq!(e.fixed(), w + w + 2 * w + e.copies);
        // Plain SGD's checkpoint is the weights alone.
        let sgd = spec(model, " optimizer = sgd(lr=0.1)\n checkpoint = checkpoint(every_n=1, path=\"c.ckpt\")\n");
        assert_eq!(estimate(&sgd, Compute::Fp32).with_host_copies(&sgd, false).copies, w);
        // Where saving the model at the end holds more than training did,
        // that is the total, and no batch fits below it.
        let mut e = estimate(&plain, Compute::Fp32).with_host_copies(&plain, false);
        e.at_the_end = e.fixed() + e.activations + 1;
        assert_eq!(e.total(), e.at_the_end);
        assert!(e.breakdown().ends_with(&format!("; then, to save the model at the end, {}", bytes(e.at_the_end))));
        assert_eq!(e.batch_that_fits(e.at_the_end - 1), None);
    }

    #[test]
    fn a_wide_input_is_kept_once_and_takes_no_gradient() {
        // 4096 inputs -> 8 -> 1, batch 100. Kept: the input 4096 and the
        // outputs 8 + 1; gradients flow back through the widest output (8),
        // not the input: (4096 + 9 + 2 * 8) values a row.
        let s = spec(" input 4096\n dense 8 relu\n dense 1 linear", " batch = 100\n");
        let e = estimate(&s, Compute::Fp32);
        assert_eq!(e.per_row, 4 * (4096 + 9 + 16));
        assert_eq!(e.activations, 100 * 4 * 4121);
        // The batch that fits: fixed costs plus 1000 rows of 16,484 bytes.
        assert_eq!(e.batch_that_fits(e.fixed() + 1000 * 16_484), Some(1000));
        // The input batch is the largest tensor the batch brings: [100, 4096].
        assert_eq!((e.largest.bytes, e.largest.layer), (100 * 4 * 4096, None));
        assert_eq!(e.largest.what, "a batch's input [100, 4096]");
    }

    #[test]
    fn the_batch_suggested_leaves_room() {
        let s = spec(" input 10\n dense 20 gelu\n dense 1 linear", " batch = 100000\n");
        let e = estimate(&s, Compute::Fp32);
        let capacity = e.fixed() + 1000 * e.per_row;
        let room = capacity - capacity / 20;
        let rows = e.batch_to_suggest(capacity).unwrap() as u64;
        assert!(rows < 1000 && e.fixed() + rows * e.per_row <= room, "{rows}");
        assert!(e.fixed() + (rows + 1) * e.per_row > room, "{rows}: the most that leaves room");
        // Room for one row only to the byte: that row is suggested.
        assert_eq!(e.batch_to_suggest(e.fixed() + e.per_row), Some(1));
        assert_eq!(e.batch_to_suggest(e.fixed()), None);
    }

    #[test]
    fn blocks_attention_and_the_batch_that_fits() {
        let s = spec(
            " input seq 16\n embedding 8\n residual:\n  layernorm\n  attention heads=2\n global_avgpool\n dense 1 linear",
            " optimizer = adam(lr=0.01)\n batch = 4\n",
        );
        let mut s = s;
        s.model.layers[0].value = match s.model.layers[0].value.clone() {
            LayerSpec::Embedding(mut e) => {
                e.tokens = 30;
                LayerSpec::Embedding(e)
            }
            other => other,
        };
        let e = estimate(&s, Compute::Fp32);
        // Parameters: embedding 30*8, layernorm 16, attention 3*8*8+24+8*8+8, dense 9.
        let params = 240 + 16 + 192 + 24 + 64 + 8 + 9;
        assert_eq!(e.weights, 4 * params);
        // Scores: 2 x 2 heads x 16 x 16 per row.
        // Kept: ids 16, embedding 128, the block 128, layernorm twice 128, attention 128, pool 8, dense 1.
        let kept = 16 + 128 + 128 + 2 * 128 + 128 + 8 + 1;
        assert_eq!(e.per_row, 4 * (kept + 2 * 128 + 2 * 2 * 256));
        let fits = e.batch_that_fits(e.fixed() + 10 * e.per_row + 3).unwrap();
        assert_eq!(fits, 10);
        assert_eq!(e.batch_that_fits(e.fixed() / 2), None);
    }

    #[test]
    fn sizes_that_fit_alone_saturate_together() {
        // 2^40 inputs a row (the most a spec may write) and a batch of 2^30:
        // the activations' bytes pass u64, saturate, and the run is refused as
        // too large instead of estimated small.
        let s = spec(" input 1099511627776\n dense 1 linear", " batch = 1073741824\n");
        let e = estimate(&s, Compute::Fp32);
        assert_eq!((e.activations, e.total()), (u64::MAX, u64::MAX));
        assert_eq!(e.weights, 4 * ((1 << 40) + 1));
        assert_eq!(e.batch_that_fits(1 << 40), None);
    }

    /// Burn's convolutions hold their padded input: a padding far past the
    /// input (with a stride that keeps the output small) is counted, and a
    /// run of it refused, where Burn aborted allocating terabytes.
    #[test]
    fn a_convolutions_padded_input_is_counted() {
        let tight = estimate(
            &spec("input 1x4x4\n    conv2d 2 3 relu padding=1\n    flatten\n    dense 1 linear", ""),
            Compute::Fp32,
        );
        let wide =
            spec("input 1x4x4\n    conv2d 2 3 relu padding=100000 stride=100000\n    flatten\n    dense 1 linear", "");
        let e = estimate(&wide, Compute::Fp32);
        // 1 x 200004 x 200004 values a row, 4 bytes each.
        assert!(e.per_row >= 4 * 200_004u64 * 200_004, "{}", e.per_row);
        assert!(e.largest.what.contains("padded input to a convolution"), "{}", e.largest.what);
        assert!(tight.per_row < 1_000, "{}", tight.per_row);
    }

    #[test]
    fn bytes_read_as_a_person_reads_them() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(3 << 20), "3.0 MiB");
        assert_eq!(bytes(6_400_000_000), "6.0 GiB");
        assert_eq!(bytes(3 << 40), "3.0 TiB");
        assert_eq!(bytes(u64::MAX), "16.0 EiB");
    }
}
