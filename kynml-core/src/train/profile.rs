//! `--profile`: where each training step's time goes.
//!
//! With profiling on, every step is timed in phases: the wait for its batch
//! from the loader, the copy of the batch to the device, the forward pass
//! (and the loss), the backward pass, and the optimizer (with loss-scale
//! check and clipping). On a GPU the Burn engine waits for the device after
//! each phase, so that each phase's time is its own; that waiting costs,
//! which is why it is not on by default. Each epoch's evaluation is timed
//! too. The result: a summary per phase ([`Profile::summary`], written as
//! `profile.json`) and a Chrome trace ([`Profile::trace`], `trace.json`, for
//! Perfetto or chrome://tracing).

use serde_json::{json, Value};

use super::gpu_monitor::GpuSample;

/// The time of one step's phases, in seconds, as an engine measures them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StepPhases {
    /// The batch copied to the device (0 on the native engine, which reads it in place).
    pub copy: f64,
    /// The forward pass and the loss.
    pub forward: f64,
    /// The backward pass.
    pub backward: f64,
    /// Loss-scale check, clipping and the optimizer's update.
    pub optimizer: f64,
    /// The most device memory in use (bytes) read at the ends of the
    /// phases; 0 where the device does not say (the CPU).
    pub in_use: u64,
}

/// One profiled step.
#[derive(Debug, Clone, PartialEq)]
pub struct StepTiming {
    /// 1-based.
    pub epoch: usize,
    /// 1-based within the epoch.
    pub step: usize,
    /// Seconds from the start of training to the start of the wait for this step's batch.
    pub start: f64,
    /// Seconds waiting for the batch from the loader.
    pub wait: f64,
    /// The engine's phases.
    pub phases: StepPhases,
    /// Seconds of the whole step, from the batch in hand to the step's end.
    pub total: f64,
    /// The loader worker that gathered the batch, and when (seconds from
    /// the start of training, and how long); `None` when the training
    /// thread gathered it (inside the wait).
    pub prepared: Option<(usize, f64, f64)>,
}

/// The trace's first thread id for loader workers: worker `w` is `LOADER_TID + w`.
pub const LOADER_TID: usize = 10;

/// One profiled evaluation of the validation split.
#[derive(Debug, Clone, PartialEq)]
pub struct EvalTiming {
    /// 1-based.
    pub epoch: usize,
    /// Seconds from the start of training.
    pub start: f64,
    /// Seconds it took.
    pub seconds: f64,
}

/// Every profiled step and evaluation of a run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Profile {
    /// In the order they ran.
    pub steps: Vec<StepTiming>,
    /// One per epoch.
    pub evals: Vec<EvalTiming>,
    /// Whether the engine waited for the device after each phase (the Burn
    /// engine does; on the CPU it changes nothing).
    pub synchronised: bool,
    /// One per checkpoint taken.
    pub checkpoints: Vec<CheckpointTiming>,
    /// On CUDA with NVML: the GPU's busy share and memory, sampled through
    /// the run (see [`gpu_monitor`](super::gpu_monitor)).
    pub gpu: Vec<GpuSample>,
}

/// One checkpoint: the training thread's hand-off (the snapshot copied to
/// the host and passed to the writer, or written, with `async_save = false`),
/// and the writer's encoding and writing of the file.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckpointTiming {
    /// 1-based.
    pub epoch: usize,
    /// Seconds from the start of training to the hand-off.
    pub start: f64,
    /// Seconds the training thread spent on it.
    pub handoff: f64,
    /// The writer's work: seconds from the start of training, and how long.
    pub write: Option<(f64, f64)>,
}

/// One phase over all profiled steps, in seconds.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PhaseSummary {
    /// `wait`, `copy`, `forward`, `backward`, `optimizer` or `other`.
    pub phase: &'static str,
    /// Over every step.
    pub total: f64,
    /// Per step.
    pub mean: f64,
    /// Median step.
    pub p50: f64,
    /// 95th percentile step.
    pub p95: f64,
    /// Of the wait plus the steps' time.
    pub share: f64,
}

/// What bounds a profiled run, from its measured shares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Bound {
    /// Waiting for batches took a large share of the time.
    Data,
    /// The steps themselves took nearly all of it.
    Compute,
    /// The steps took nearly all of it, yet the GPU sat idle for much of
    /// them (NVML's busy share): the host's launches set the pace.
    Launch,
}

/// The bottleneck, and one concrete step a person can take.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Verdict {
    /// What bounds the run.
    pub bound: Bound,
    /// In words, with the measured share and the step to take.
    pub advice: String,
}

/// The share of time waiting for batches above which a run is data-bound.
pub const DATA_BOUND_SHARE: f64 = 0.3;
/// The GPU busy percent below which a compute-bound run's steps leave the
/// GPU waiting on the host: kernel launches and the work between them.
pub const GPU_IDLE_BUSY: f64 = 60.0;

/// The phases in step order; `other` is what the step spent outside them.
pub const PHASES: [&str; 6] = ["wait", "copy", "forward", "backward", "optimizer", "other"];

impl StepTiming {
    /// The phase's seconds in this step.
    pub fn phase(&self, name: &str) -> f64 {
        let p = &self.phases;
        match name {
            "wait" => self.wait,
            "copy" => p.copy,
            "forward" => p.forward,
            "backward" => p.backward,
            "optimizer" => p.optimizer,
            _ => (self.total - p.copy - p.forward - p.backward - p.optimizer).max(0.0),
        }
    }
}

impl Profile {
    /// Each phase's total, mean, p50 and p95 over the steps, and its share of
    /// the time from the first wait to the last step's end (evaluations aside).
    pub fn summary(&self) -> Vec<PhaseSummary> {
        let all: f64 = self.steps.iter().map(|s| s.wait + s.total).sum();
        PHASES
            .iter()
            .map(|&phase| {
                let mut v: Vec<f64> = self.steps.iter().map(|s| s.phase(phase)).collect();
                v.sort_by(f64::total_cmp);
                let total: f64 = v.iter().sum();
                let at = |q: f64| v.get(((v.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or(0.0);
                PhaseSummary {
                    phase,
                    total,
                    mean: total / v.len().max(1) as f64,
                    p50: at(0.5),
                    p95: at(0.95),
                    share: total / all.max(1e-12),
                }
            })
            .collect()
    }

    /// The bottleneck, from the shares: data-bound when waiting for batches
    /// took more than [`DATA_BOUND_SHARE`] of the time (with `workers` the
    /// spec's `num_workers`, to say what to raise), else compute-bound, naming
    /// the largest phase.
    pub fn verdict(&self, workers: usize) -> Verdict {
        let summary = self.summary();
        let share = |name: &str| summary.iter().find(|p| p.phase == name).map_or(0.0, |p| p.share);
        let wait = share("wait");
        if wait > DATA_BOUND_SHARE {
            let more = if workers == 0 { 2 } else { workers * 2 };
            return Verdict {
                bound: Bound::Data,
                advice: format!(
                    "data loading is {:.0}% of step time: raise num_workers ({workers} -> {more}) or prefetch",
                    100.0 * wait
                ),
            };
        }
        let (phase, largest) = summary
            .iter()
            .filter(|p| p.phase != "wait")
            .map(|p| (p.phase, p.share))
            .fold(("forward", 0.0), |best, p| if p.1 > best.1 { p } else { best });
        if let Some(gpu) = super::gpu_monitor::summarize(&self.gpu_in_steps()).filter(|g| g.busy < GPU_IDLE_BUSY) {
            // A profiled run waits for the device after each phase, which
            // idles it a little more than an unprofiled run would.
            let synced = if self.synchronised { " (read while profiling, whose waits add a little idle)" } else { "" };
            return Verdict {
                bound: Bound::Launch,
                advice: format!(
                    "GPU busy {:.0}% during the steps{synced}: the step is launch-bound (the GPU waits between \
                     kernels); a larger batch would use the GPU better",
                    gpu.busy
                ),
            };
        }
        let hint = match phase {
            "copy" => "the copy to the device leads: a larger batch copies less often per row",
            "optimizer" => "the optimizer's update leads: a larger batch updates less often per row",
            _ => "the model's own arithmetic leads: a faster device or precision (bf16/fp16 on a GPU) is what helps",
        };
        Verdict {
            bound: Bound::Compute,
            advice: format!(
                "compute-bound: the steps are {:.0}% of step time ({phase} {:.0}%); {hint}",
                100.0 * (1.0 - wait),
                100.0 * largest
            ),
        }
    }

    /// The GPU samples taken during the steps' phases (not while waiting
    /// for a batch, evaluating or checkpointing); all of them where the
    /// steps were not timed.
    fn gpu_in_steps(&self) -> Vec<GpuSample> {
        if self.steps.is_empty() {
            return self.gpu.clone();
        }
        let spans: Vec<(f64, f64)> =
            self.steps.iter().map(|s| (s.start + s.wait, s.start + s.wait + s.total)).collect();
        self.gpu.iter().filter(|g| spans.iter().any(|&(a, b)| g.t >= a && g.t <= b)).copied().collect()
    }

    /// The most device memory in use read at any phase's end (bytes);
    /// `None` where the device does not say.
    pub fn peak_in_use(&self) -> Option<u64> {
        self.steps.iter().map(|s| s.phases.in_use).max().filter(|&m| m > 0)
    }

    /// `profile.json`: the phase summary, the evaluations' time, how it was
    /// measured, and the verdict for a spec with `workers` data workers.
    pub fn to_json(&self, workers: usize) -> Value {
        json!({
            "steps": self.steps.len(),
            "synchronised": self.synchronised,
            "peak_device_in_use": self.peak_in_use(),
            "gpu": super::gpu_monitor::summarize(&self.gpu),
            "phases": self.summary(),
            "evaluation_seconds": self.evals.iter().map(|e| e.seconds).sum::<f64>(),
            "checkpoints": self.checkpoints.iter().map(|c| json!({
                "epoch": c.epoch,
                "handoff_seconds": c.handoff,
                "write_seconds": c.write.map(|w| w.1),
            })).collect::<Vec<_>>(),
            "verdict": self.verdict(workers),
        })
    }

    /// `trace.json` in the Chrome trace event format: one complete event
    /// (`"ph": "X"`, microseconds) per phase of every step, on the training
    /// thread (tid 1), the waits on the loader's track (tid 2), the
    /// evaluations on their own (tid 3), the checkpoint hand-offs (tid 4)
    /// and the writer's writes (tid 5), and each batch a loader worker
    /// gathered on that worker's track (tid [`LOADER_TID`] + worker).
    pub fn trace(&self) -> Value {
        let us = |s: f64| (s * 1e6).round();
        let mut events = vec![
            json!({"ph": "M", "pid": 1, "tid": 1, "name": "thread_name", "args": {"name": "training step"}}),
            json!({"ph": "M", "pid": 1, "tid": 2, "name": "thread_name", "args": {"name": "waiting for the loader"}}),
            json!({"ph": "M", "pid": 1, "tid": 3, "name": "thread_name", "args": {"name": "evaluation"}}),
        ];
        for s in &self.steps {
            let args = json!({"epoch": s.epoch, "step": s.step});
            events.push(json!({"name": "wait", "ph": "X", "pid": 1, "tid": 2, "ts": us(s.start), "dur": us(s.wait), "args": args}));
            let mut at = s.start + s.wait;
            for phase in &PHASES[1..] {
                let dur = s.phase(phase);
                events.push(
                    json!({"name": phase, "ph": "X", "pid": 1, "tid": 1, "ts": us(at), "dur": us(dur), "args": args}),
                );
                at += dur;
            }
        }
        let mut workers: Vec<usize> = self.steps.iter().filter_map(|s| s.prepared.map(|p| p.0)).collect();
        workers.sort_unstable();
        workers.dedup();
        for w in workers {
            let name = format!("loader worker {w}");
            events.push(
                json!({"ph": "M", "pid": 1, "tid": LOADER_TID + w, "name": "thread_name", "args": {"name": name}}),
            );
        }
        for s in &self.steps {
            if let Some((w, start, dur)) = s.prepared {
                let args = json!({"epoch": s.epoch, "step": s.step});
                events.push(json!({"name": "prepare batch", "ph": "X", "pid": 1, "tid": LOADER_TID + w, "ts": us(start), "dur": us(dur), "args": args}));
            }
        }
        if !self.checkpoints.is_empty() {
            events.push(
                json!({"ph": "M", "pid": 1, "tid": 4, "name": "thread_name", "args": {"name": "checkpoint hand-off"}}),
            );
            events.push(
                json!({"ph": "M", "pid": 1, "tid": 5, "name": "thread_name", "args": {"name": "checkpoint writer"}}),
            );
        }
        for c in &self.checkpoints {
            let args = json!({"epoch": c.epoch});
            events.push(json!({"name": "checkpoint hand-off", "ph": "X", "pid": 1, "tid": 4, "ts": us(c.start), "dur": us(c.handoff), "args": args}));
            if let Some((start, dur)) = c.write {
                events.push(json!({"name": "write checkpoint", "ph": "X", "pid": 1, "tid": 5, "ts": us(start), "dur": us(dur), "args": args}));
            }
        }
        for e in &self.evals {
            events.push(json!({"name": "evaluate", "ph": "X", "pid": 1, "tid": 3, "ts": us(e.start), "dur": us(e.seconds), "args": {"epoch": e.epoch}}));
        }
        // NVML's samples as counters, which Perfetto draws as tracks of their own.
        for g in &self.gpu {
            events.push(json!({"name": "GPU busy %", "ph": "C", "pid": 1, "ts": us(g.t), "args": {"busy": g.busy}}));
            events.push(json!({"name": "GPU memory (MiB)", "ph": "C", "pid": 1, "ts": us(g.t), "args": {"used": g.memory >> 20}}));
        }
        json!({"traceEvents": events, "displayTimeUnit": "ms"})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_and_trace_follow_the_steps() {
        let step = |i: usize, wait: f64| StepTiming {
            epoch: 1,
            step: i,
            start: i as f64,
            wait,
            phases: StepPhases { copy: 0.0, forward: 0.2, backward: 0.3, optimizer: 0.1, in_use: 0 },
            total: 0.7,
            prepared: i.is_multiple_of(2).then_some((i % 4 / 2, i as f64 - 0.5, 0.25)),
        };
        let p = Profile {
            steps: (1..=4).map(|i| step(i, 0.1 * i as f64)).collect(),
            evals: Vec::new(),
            synchronised: false,
            checkpoints: Vec::new(),
            gpu: Vec::new(),
        };
        let s = p.summary();
        let get = |name: &str| s.iter().find(|x| x.phase == name).unwrap().clone();
        assert!((get("forward").total - 0.8).abs() < 1e-12);
        assert!((get("other").mean - 0.1).abs() < 1e-12);
        assert!((get("wait").p50 - 0.3).abs() < 1e-12 && (get("wait").p95 - 0.4).abs() < 1e-12);
        let shares: f64 = s.iter().map(|x| x.share).sum();
        assert!((shares - 1.0).abs() < 1e-9, "{shares}");
        let t = p.trace();
        let events = t["traceEvents"].as_array().unwrap();
        // 3 track names and 2 workers' names, then 1 wait and 5 phases per
        // step, and the 2 batches the workers prepared (steps 2 and 4).
        assert_eq!(events.len(), 5 + 4 * 6 + 2);
        assert!(events.iter().filter(|e| e["name"] == "wait").all(|e| e["tid"] == 2));
        let prepared: Vec<&Value> = events.iter().filter(|e| e["name"] == "prepare batch").collect();
        let tids: Vec<u64> = prepared.iter().filter_map(|e| e["tid"].as_u64()).collect();
        assert_eq!(tids, [LOADER_TID as u64 + 1, LOADER_TID as u64]);
        assert_eq!(prepared[0]["ts"], 1_500_000.0);
    }

    #[test]
    fn the_verdict_follows_the_data_bound_line() {
        let steps = |wait: f64| Profile {
            steps: (1..=4)
                .map(|i| StepTiming {
                    epoch: 1,
                    step: i,
                    start: i as f64,
                    wait,
                    phases: StepPhases { copy: 0.0, forward: 0.3, backward: 0.5, optimizer: 0.2, in_use: 0 },
                    total: 1.0,
                    prepared: None,
                })
                .collect(),
            evals: Vec::new(),
            synchronised: false,
            checkpoints: Vec::new(),
            gpu: Vec::new(),
        };
        // Waiting 1 s of every 2: data-bound, with the workers to try.
        let data = steps(1.0).verdict(0);
        assert_eq!(data.bound, Bound::Data);
        assert!(data.advice.contains("50%") && data.advice.contains("num_workers (0 -> 2)"), "{}", data.advice);
        assert!(steps(1.0).verdict(4).advice.contains("num_workers (4 -> 8)"));
        // Waiting 0.25 s of every 1.25 (20%): compute-bound, backward leading.
        let compute = steps(0.25).verdict(0);
        assert_eq!(compute.bound, Bound::Compute);
        assert!(compute.advice.contains("backward 40%"), "{}", compute.advice);
        // The same steps on a GPU that NVML saw busy 31% of the time: the
        // host's launches set the pace. Busy 80%: compute-bound as before.
        // Samples inside steps 1 and 2 (from 1.25 to 2.25, then 2.25 to
        // 3.25); one while step 1 waited for its batch (idle, and not the
        // step's) is left out.
        let at = |t: f64, busy: u32| GpuSample { t, busy, memory: 1 << 30 };
        let sample = |busy: u32| at(1.5, busy);
        let launch = Profile { gpu: vec![at(1.5, 20), at(1.1, 0), at(2.6, 42)], ..steps(0.25) }.verdict(0);
        assert_eq!(launch.bound, Bound::Launch);
        assert!(launch.advice.contains("GPU busy 31%") && launch.advice.contains("larger batch"), "{}", launch.advice);
        assert_eq!(Profile { gpu: vec![sample(80)], ..steps(0.25) }.verdict(0).bound, Bound::Compute);
        // Waiting for data still comes first.
        assert_eq!(Profile { gpu: vec![sample(5)], ..steps(1.0) }.verdict(0).bound, Bound::Data);
        // The samples are counters in the trace.
        let trace = Profile { gpu: vec![sample(20)], ..steps(0.25) }.trace();
        let counters = trace["traceEvents"].as_array().unwrap().iter().filter(|e| e["ph"] == "C").count();
        assert_eq!(counters, 2);
    }
}
