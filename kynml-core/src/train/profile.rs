//! `--profile`: where each training step's time goes.
//!
//! With profiling on, every step is timed in phases: the wait for its batch
//! from the loader, the copy of the batch to the device, the forward pass
//! (and the loss), the backward pass, on several devices the replicas'
//! meeting (the gradients' all-reduce and the wait for the slowest replica),
//! and the optimizer (with loss-scale check and clipping). On a GPU the Burn engine waits for the device after
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
    /// The batch copied to the device (0 on the native engine, which reads
    /// it in place); in a data-parallel run also the lead's split of the
    /// batch among the replicas.
    pub copy: f64,
    /// The forward pass and the loss.
    pub forward: f64,
    /// The backward pass.
    pub backward: f64,
    /// Data-parallel runs only (0 on one device): the gradients' all-reduce
    /// and the wait for the other replicas, which includes their share of
    /// any work that is slower than the lead's, and the sum of their losses.
    pub sync: f64,
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
    /// Steps of this run skipped on an fp16 overflow (their updates thrown away).
    pub skipped_steps: usize,
    /// Whether the products ran in bf16 or fp16 already.
    pub half_precision: bool,
    /// The machine's cores (0: not known), which bound how many loader
    /// workers can run beside the step.
    pub cores: usize,
    /// Whether this device runs bf16 products faster than fp32's (what the
    /// verdict may advise): false on a software adapter, which runs them
    /// slower.
    pub bf16: bool,
    /// Whether this device runs fp16 products faster than fp32's.
    pub fp16: bool,
    /// Steps (batches) in a whole epoch (0: not known); 1 when one batch
    /// holds every training row, and no larger batch is to be had.
    pub steps_per_epoch: usize,
    /// The FLOP of a whole batch's products in a training step (about 6 a
    /// multiply-add of the model's forward pass; 0: not known).
    pub step_flop: f64,
    /// On a GPU backend, the rate of products below which a step is held up
    /// by its fixed costs (launches, waits for the device) rather than its
    /// arithmetic ([`SLOW_GPU_RATE`], [`SLOW_SOFTWARE_RATE`]); 0 on the CPU,
    /// whose steps are judged by their length ([`SHORT_STEP`]).
    pub slow_rate: f64,
    /// Whether KynML's native CPU engine took the steps: its phases are its
    /// arithmetic, with no launches or per-operation dispatch inside them,
    /// so a short step is not judged to be fixed costs; its phases say.
    pub native: bool,
    /// Whether the replicas of a data-parallel run are all CPU devices (of
    /// one machine, sharing its cores), where one device is the remedy for
    /// a meeting that leads.
    pub cpu_replicas: bool,
}

/// A GPU's products below this rate (100 GFLOP/s, a small fraction of
/// what any GPU computes) are held up by the step's fixed costs.
pub const SLOW_GPU_RATE: f64 = 1e11;
/// The same for a software Vulkan driver (lavapipe) that computes on the
/// CPU's cores: 1 GFLOP/s.
pub const SLOW_SOFTWARE_RATE: f64 = 1e9;

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
    /// Whether the writer wrote it in the background (`async_save = true`);
    /// otherwise the hand-off is the whole save.
    pub async_save: bool,
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
    /// The steps took nearly all of it, the largest share of them the
    /// replicas' meeting (the gradients' all-reduce, and waiting for the
    /// slowest replica) of a data-parallel run.
    Sync,
    /// The steps took nearly all of it, yet the GPU sat idle for much of
    /// them (NVML's busy share): the host's launches set the pace.
    Launch,
    /// The steps are so short that their fixed costs (launches, the
    /// optimizer's pass over every tensor, bookkeeping) outweigh the
    /// arithmetic of the batch.
    Overhead,
    /// fp16 skipped many steps on overflow: their work was thrown away.
    SkippedSteps,
    /// No step was profiled (a run with nothing left to train).
    NoSteps,
    /// Too few steps after warm-up to say anything of the steady run.
    TooFewSteps,
    /// Evaluating the validation split took a large share of the run's time.
    Evaluation,
    /// The steps took a small share of the run's time: start-up and each
    /// epoch's fixed work between them (records, logs, the progress line,
    /// early stopping's copy of the best weights) led, as in a small run.
    BetweenSteps,
    /// The training thread's checkpoint saves (hand-offs) took a large
    /// share of the run's time.
    Checkpoint,
}

/// Where a profiled run's time went, as shares of its time (the warm-up
/// steps left out); `rest` is start-up before the first step and the
/// bookkeeping between the steps (progress, logging).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct RunShares {
    /// The steps' own work.
    pub steps: f64,
    /// Waiting for batches.
    pub wait: f64,
    /// Evaluating the validation split.
    pub evaluation: f64,
    /// The training thread's checkpoint hand-offs (whole saves without `async_save`).
    pub checkpoints: f64,
    /// Everything else.
    pub rest: f64,
    /// The seconds these are shares of: the run's, less its warm-up steps
    /// and warm-up evaluation.
    pub seconds: f64,
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

/// A steady step (its own work, waiting aside) shorter than this, in
/// seconds, is dominated by fixed per-step costs.
pub const SHORT_STEP: f64 = 0.5e-3;
/// The share of steps skipped on overflow above which the verdict is theirs.
pub const SKIPPED_SHARE: f64 = 0.05;
/// A first-epoch step this many times the median step is warm-up (kernels
/// compiled or tuned, buffers allocated), left out of the verdict, as the
/// run's first step always is.
pub const WARM_UP_FACTOR: f64 = 20.0;
/// A run's first evaluation this many times the median of the later ones
/// is warm-up (the validation pass's kernels compiled), left out of the
/// verdict.
pub const EVAL_WARM_UP_FACTOR: f64 = 4.0;
/// Fewer steps than this after warm-up are too few for a verdict.
pub const MIN_STEADY_STEPS: usize = 3;
/// The share of the run's time above which evaluation or checkpoint
/// hand-offs are the verdict.
pub const BETWEEN_STEPS_SHARE: f64 = 0.3;
/// The share of the run's time above which evaluation or checkpoint
/// hand-offs are named after another verdict.
pub const NOTE_SHARE: f64 = 0.1;
/// Seconds of evaluation or of checkpoint hand-offs, in all, below which
/// they are no verdict nor named after one, whatever their share: a
/// change to save less than this is not worth making (a 2 ms run's one
/// evaluation of 0.02 ms is 10% of it).
pub const WORTH_ADVICE: f64 = 0.01;

/// The phases in step order; `other` is what the step spent outside them.
/// `sync` is a data-parallel run's alone: a run on one device has none, and
/// its summary, table, chart and trace leave it out.
pub const PHASES: [&str; 7] = ["wait", "copy", "forward", "backward", "sync", "optimizer", "other"];

impl StepTiming {
    /// The phase's seconds in this step.
    pub fn phase(&self, name: &str) -> f64 {
        let p = &self.phases;
        match name {
            "wait" => self.wait,
            "copy" => p.copy,
            "forward" => p.forward,
            "backward" => p.backward,
            "sync" => p.sync,
            "optimizer" => p.optimizer,
            _ => (self.total - p.copy - p.forward - p.backward - p.sync - p.optimizer).max(0.0),
        }
    }
}

impl Profile {
    /// Each phase's total, mean, p50 and p95 over the steps, and its share of
    /// the time from the first wait to the last step's end (evaluations aside).
    pub fn summary(&self) -> Vec<PhaseSummary> {
        summarize(&self.steps)
    }

    /// [`summary`](Self::summary) of one epoch's steps; `None` where none was profiled.
    pub fn epoch_summary(&self, epoch: usize) -> Option<Vec<PhaseSummary>> {
        let steps: Vec<StepTiming> = self.steps.iter().filter(|s| s.epoch == epoch).cloned().collect();
        (!steps.is_empty()).then(|| summarize(&steps))
    }

    /// The steps a verdict reads: all but the warm-up steps, which say
    /// nothing of the steady run. The first profiled step is always warm-up
    /// (buffers allocated, kernels compiled or tuned, the loader started);
    /// so is any other step of the first epoch over [`WARM_UP_FACTOR`]
    /// times the median of the steps after the first.
    pub fn steady_steps(&self) -> Vec<StepTiming> {
        let Some(first) = self.steps.first() else { return Vec::new() };
        let rest = &self.steps[1..];
        let mut totals: Vec<f64> = rest.iter().map(|s| s.total).collect();
        totals.sort_by(f64::total_cmp);
        let median = totals.get(totals.len() / 2).copied().unwrap_or(0.0);
        rest.iter().filter(|s| s.epoch != first.epoch || s.total <= WARM_UP_FACTOR * median).cloned().collect()
    }

    /// The evaluations a verdict reads: all but a first one over
    /// [`EVAL_WARM_UP_FACTOR`] times the median of the later ones, whose
    /// time went to start-up work (a GPU compiling the kernels of the
    /// validation pass), as the warm-up steps' did. With fewer than two
    /// later ones to compare with, every evaluation is read.
    pub fn steady_evals(&self) -> &[EvalTiming] {
        let Some((first, rest)) = self.evals.split_first().filter(|(_, rest)| rest.len() >= 2) else {
            return &self.evals;
        };
        let mut later: Vec<f64> = rest.iter().map(|e| e.seconds).collect();
        later.sort_by(f64::total_cmp);
        match later.get(later.len() / 2) {
            Some(&median) if first.seconds > EVAL_WARM_UP_FACTOR * median => rest,
            _ => &self.evals,
        }
    }

    /// Seconds from the start of training to the end of the last profiled
    /// step, evaluation or checkpoint hand-off.
    pub fn run_seconds(&self) -> f64 {
        let steps = self.steps.iter().map(|s| s.start + s.wait + s.total);
        let evals = self.evals.iter().map(|e| e.start + e.seconds);
        let checkpoints = self.checkpoints.iter().map(|c| c.start + c.handoff);
        steps.chain(evals).chain(checkpoints).fold(0.0, f64::max)
    }

    /// Where the run's time went, as shares of [`run_seconds`](Self::run_seconds)
    /// with the warm-up steps' and warm-up evaluation's time taken out of it.
    pub fn run_shares(&self) -> RunShares {
        let steady = self.steady_steps();
        let whole = |steps: &[StepTiming]| steps.iter().map(|s| s.wait + s.total).sum::<f64>();
        let evals = |evals: &[EvalTiming]| evals.iter().map(|e| e.seconds).sum::<f64>();
        let warm_up = whole(&self.steps) - whole(&steady) + evals(&self.evals) - evals(self.steady_evals());
        let run = (self.run_seconds() - warm_up).max(1e-12);
        // `+ 0.0`: an empty sum of f64 is -0.0, which JSON and the report would show.
        let steps = (steady.iter().map(|s| s.total).sum::<f64>() + 0.0) / run;
        let wait = (steady.iter().map(|s| s.wait).sum::<f64>() + 0.0) / run;
        let evaluation = (evals(self.steady_evals()) + 0.0) / run;
        let checkpoints = (self.checkpoints.iter().map(|c| c.handoff).sum::<f64>() + 0.0) / run;
        let rest = (1.0 - steps - wait - evaluation - checkpoints).max(0.0);
        RunShares { steps, wait, evaluation, checkpoints, rest, seconds: run }
    }

    /// The bottleneck, in this order: fp16 skipping more than
    /// [`SKIPPED_SHARE`] of the steps; fewer than [`MIN_STEADY_STEPS`]
    /// steps after warm-up ([`steady_steps`](Self::steady_steps)), too few
    /// to judge; evaluation or checkpoint hand-offs over
    /// [`BETWEEN_STEPS_SHARE`] of the run's time; waiting for batches more
    /// than [`DATA_BOUND_SHARE`] of the steps' time (with `workers` the
    /// spec's `num_workers`, to say what to set within the machine's
    /// cores); the time between the steps (start-up, each epoch's fixed
    /// work) over [`BETWEEN_STEPS_SHARE`] of the run's and over the steps'
    /// own; a GPU that NVML saw idle; a median step shorter than
    /// [`SHORT_STEP`]; else compute-bound, naming the largest phase.
    /// Evaluation and checkpoints over [`NOTE_SHARE`] of the run's time
    /// that do not lead are named after it, each with what to change.
    pub fn verdict(&self, workers: usize) -> Verdict {
        if self.steps.is_empty() {
            return Verdict {
                bound: Bound::NoSteps,
                advice: "no step was profiled: there was nothing to train".into(),
            };
        }
        let all_steps = self.steps.len().max(self.skipped_steps);
        if self.skipped_steps as f64 > SKIPPED_SHARE * all_steps as f64 {
            let instead = if self.bf16 {
                "or train in bf16 (precision = bf16), which needs no scaling"
            } else {
                "or train in fp32 (precision = fp32): bf16, which needs no scaling, does not run on this device \
                 (it runs as fp32)"
            };
            return Verdict {
                bound: Bound::SkippedSteps,
                advice: format!(
                    "fp16 skipped {} of {all_steps} steps ({:.0}%) on overflow, their work thrown away: lower the \
                     loss scale's start (loss_scale = dynamic(init=...)), {instead}",
                    self.skipped_steps,
                    100.0 * self.skipped_steps as f64 / all_steps as f64
                ),
            };
        }
        let steady = self.steady_steps();
        let left_out = self.steps.len() - steady.len();
        let warm_up_seconds =
            self.steps.iter().map(|s| s.total).sum::<f64>() - steady.iter().map(|s| s.total).sum::<f64>();
        let (steps, are) = if left_out == 1 {
            ("warm-up step".to_string(), "is")
        } else {
            (format!("{left_out} warm-up steps"), "are")
        };
        if steady.len() < MIN_STEADY_STEPS {
            let n = self.steps.len();
            return Verdict {
                bound: Bound::TooFewSteps,
                advice: format!(
                    "too few steps to judge: {n} step{} profiled, and the {steps} ({}, start-up work) {are} no \
                     guide to the steady run; a verdict needs at least {MIN_STEADY_STEPS} steps after warm-up: \
                     profile more epochs, or a smaller batch for more steps per epoch",
                    if n == 1 { "" } else { "s" },
                    seconds_text(warm_up_seconds.max(0.0)),
                ),
            };
        }
        // Said last: the shares are the steady steps', and the phase table
        // printed with the verdict counts every step.
        let warm_up = format!(
            " (the {} steps after warm-up; the {steps} ({}, start-up work) {are} in the phase table but not here)",
            steady.len(),
            seconds_text(warm_up_seconds.max(0.0))
        );
        let run = self.run_shares();
        let pct = |share: f64| format!("{:.0}%", 100.0 * share);
        // What the shares are of, said with them: the run's own time, as
        // `trained ... in` prints it, also counts the warm-up and the end.
        let of_run = format!("of the {} the run spent after warm-up", seconds_text(run.seconds));

        // Evaluation and checkpoints, weighed against the run's time.
        let evals = self.steady_evals();
        let first = match (evals.len() < self.evals.len(), self.evals.first()) {
            (true, Some(first)) => format!("; the first, {} with start-up work, left out", seconds_text(first.seconds)),
            _ => String::new(),
        };
        let evaluation = format!(
            "evaluation takes {} {of_run} ({} evaluation{}, {}, one after each epoch{first}): a larger `split` in \
             the dataset block validates on fewer rows",
            pct(run.evaluation),
            evals.len(),
            if evals.len() == 1 { "" } else { "s" },
            seconds_text(evals.iter().map(|e| e.seconds).sum())
        );
        let n = self.checkpoints.len();
        let saves = format!(
            "{n} save{}, {}",
            if n == 1 { "" } else { "s" },
            seconds_text(self.checkpoints.iter().map(|c| c.handoff).sum())
        );
        // One save is the run's last (or its only epoch's), which no `every_n` spares.
        let checkpoints = match (self.checkpoints.iter().any(|c| !c.async_save), n > 1) {
            (true, many) => format!(
                "synchronous checkpoint saves take {} {of_run} ({saves}, the training waiting for each write): \
                 `async_save = true` in checkpoint(...) writes them in the background{}",
                pct(run.checkpoints),
                if many { ", or a larger `every_n` saves less often" } else { "" }
            ),
            (false, true) => format!(
                "checkpoint hand-offs take {} {of_run} ({saves}, the state copied to the host for the writer): a \
                 larger `every_n` in checkpoint(...) saves less often",
                pct(run.checkpoints)
            ),
            (false, false) => format!(
                "the checkpoint hand-off takes {} {of_run} ({saves}, the state copied to the host for the writer): \
                 the run's one save, which no `every_n` spares; in a longer run it weighs less",
                pct(run.checkpoints)
            ),
        };
        // Time too short to be worth a change is not advised on, whatever its share.
        let (eval_worth, checkpoints_worth) =
            (run.evaluation * run.seconds >= WORTH_ADVICE, run.checkpoints * run.seconds >= WORTH_ADVICE);
        let (eval_leads, checkpoints_lead) = (
            eval_worth && run.evaluation > BETWEEN_STEPS_SHARE && run.evaluation >= run.checkpoints,
            checkpoints_worth && run.checkpoints > BETWEEN_STEPS_SHARE && run.checkpoints > run.evaluation,
        );
        let notes = {
            let mut notes = String::new();
            if eval_worth && run.evaluation > NOTE_SHARE && !eval_leads {
                notes += &format!("; besides the steps, {evaluation}");
            }
            if checkpoints_worth && run.checkpoints > NOTE_SHARE && !checkpoints_lead {
                notes += &format!("; besides the steps, {checkpoints}");
            }
            notes
        };
        if eval_leads {
            return Verdict { bound: Bound::Evaluation, advice: format!("{evaluation}{notes}{warm_up}") };
        }
        if checkpoints_lead {
            return Verdict { bound: Bound::Checkpoint, advice: format!("{checkpoints}{notes}{warm_up}") };
        }

        let summary = summarize(&steady);
        let share = |name: &str| summary.iter().find(|p| p.phase == name).map_or(0.0, |p| p.share);
        let wait = share("wait");
        // One step per epoch: the batch already holds every training row.
        let whole_batch = self.steps_per_epoch == 1;
        if wait > DATA_BOUND_SHARE {
            let advice = self.workers_advice(workers);
            return Verdict {
                bound: Bound::Data,
                advice: format!(
                    "data-bound: waiting for batches is {} of the steps' time (their waits included; {} {of_run}): \
                     {advice}{notes}{warm_up}",
                    pct(wait),
                    pct(run.wait)
                ),
            };
        }
        // The steps a small part of the run: start-up and each epoch's
        // fixed work lead, which no setting of the steps changes.
        if run.rest > BETWEEN_STEPS_SHARE.max(run.steps) {
            return Verdict {
                bound: Bound::BetweenSteps,
                advice: format!(
                    "bound by the work between the steps: the steps' own work is {} {of_run}, waiting for batches \
                     {}, and the rest {} (start-up, and each epoch's fixed work: its records, logs and progress \
                     line, and under early stopping the best weights' copy); the steps are not what to speed up: in a \
                     run this small the fixed costs lead, and they weigh less with more rows per epoch{notes}{warm_up}",
                    pct(run.steps),
                    pct(run.wait),
                    pct(run.rest)
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
            let helps = if whole_batch {
                "; the run is small: one batch already holds every training row, so there is no larger batch to \
                 give it"
            } else {
                "; a larger batch would use the GPU better"
            };
            return Verdict {
                bound: Bound::Launch,
                advice: format!(
                    "GPU busy {:.0}% during the steps{synced}: the step is launch-bound (the GPU waits between \
                     kernels){helps}{notes}",
                    gpu.busy
                ),
            };
        }
        // The median step: a few steps held up by the host (another
        // process on the cores) do not make short steps look long.
        let mut totals: Vec<f64> = steady.iter().map(|s| s.total).collect();
        totals.sort_by(f64::total_cmp);
        let work = totals.get(totals.len() / 2).copied().unwrap_or(0.0);
        // On a GPU backend, a step's length says little; its products' rate does.
        let rate = self.step_flop / work.max(1e-12);
        if self.slow_rate > 0.0 && self.step_flop > 0.0 && rate < self.slow_rate {
            let helps = if whole_batch {
                "the run is small: one batch already holds every training row, so the batch cannot grow; on so \
                 small a model the CPU is likely faster (`--device cpu`)"
            } else {
                "a larger batch does more work for the same costs"
            };
            return Verdict {
                bound: Bound::Overhead,
                advice: format!(
                    "the steps are short for this device: a step's products ({}) ran at {} ({:.3} ms a \
                     step, the median), far below what it computes, so fixed per-step costs (launches, waits for \
                     the device, the optimizer's pass over every tensor) outweigh the batch's arithmetic; \
                     {helps}{notes}{warm_up}",
                    super::memory::si(self.step_flop, "FLOP"),
                    super::memory::si(rate, "FLOP/s"),
                    work * 1e3
                ),
            };
        }
        if work < SHORT_STEP && !self.native {
            let helps = if whole_batch {
                "the run is small: one batch already holds every training row, so the batch cannot grow"
            } else {
                "a larger batch does more work for the same costs"
            };
            return Verdict {
                bound: Bound::Overhead,
                advice: format!(
                    "the steps are short ({:.3} ms a step, the median): fixed per-step costs (the optimizer's pass over \
                     every tensor, launches, bookkeeping) outweigh the batch's arithmetic; {helps}{notes}{warm_up}",
                    work * 1e3
                ),
            };
        }
        let hint = match phase {
            "copy" if whole_batch => "the copy to the device leads; one batch already holds every training row",
            "copy" => "the copy to the device leads: a larger batch copies less often per row",
            "sync" if self.cpu_replicas => {
                "the replicas' meeting leads (the gradients' all-reduce, and waiting for the slowest replica): the \
                 replicas share this machine's cores, so one device (`--device cpu`) uses them all without \
                 meetings, on the native CPU engine where the model's layers allow it"
            }
            "sync" => {
                "the replicas' meeting leads (the gradients' all-reduce, and waiting for the slowest replica): a \
                 larger batch gives each device more work per meeting, and devices of one kind keep pace"
            }
            "optimizer" if whole_batch => "the optimizer's update leads; one batch already holds every training row",
            "optimizer" => "the optimizer's update leads: a larger batch updates less often per row",
            _ if self.half_precision && !whole_batch => {
                "the model's own arithmetic leads: a larger batch, or a faster device"
            }
            _ if self.half_precision => "the model's own arithmetic leads: a faster device is what helps",
            _ if self.bf16 => {
                "the model's own arithmetic leads: bf16 products (precision = bf16) run faster on this device, or a \
                 faster device"
            }
            _ if self.fp16 => {
                "the model's own arithmetic leads: fp16 products (precision = fp16, with loss scaling) run faster \
                 on this device, or a faster device"
            }
            _ => "the model's own arithmetic leads: a faster device is what helps (bf16 and fp16 run as fp32 here)",
        };
        let mut spent = vec![format!("waiting for batches {}", pct(run.wait))];
        for (what, share) in [("evaluation", run.evaluation), ("checkpoints", run.checkpoints)] {
            if share >= 0.005 {
                spent.push(format!("{what} {}", pct(share)));
            }
        }
        if run.rest >= 0.005 {
            spent.push(format!("the rest {} (start-up, bookkeeping between the steps)", pct(run.rest)));
        }
        let (bound, label) = match phase {
            "sync" => (Bound::Sync, "bound by the replicas' meeting"),
            _ => (Bound::Compute, "compute-bound"),
        };
        Verdict {
            bound,
            advice: format!(
                "{label}: the steps' own work is {} {of_run}, {} ({phase} is {} of the steps' time); \
                 {hint}{notes}{warm_up}",
                pct(run.steps),
                spent.join(", "),
                pct(largest)
            ),
        }
    }

    /// What to do about the loader's workers, with the machine's cores in
    /// mind: the step needs one core of its own, the workers share the rest.
    fn workers_advice(&self, workers: usize) -> String {
        let cores = self.cores;
        let spare = cores.saturating_sub(1);
        let wanted = if workers == 0 { 2 } else { workers * 2 };
        let s = |n: usize| if n == 1 { "" } else { "s" };
        // A deeper queue (`prefetch`) smooths out uneven batches but does
        // not make the loader faster than it is: more workers do.
        if cores == 0 || wanted <= spare {
            format!("raise num_workers ({workers} -> {wanted})")
        } else if workers < spare {
            format!("raise num_workers ({workers} -> {spare}: this machine has {cores} cores, and the step needs one)")
        } else if workers > spare {
            format!(
                "num_workers = {workers} exceeds this machine's spare cores ({cores} core{} in all, one for the \
                 step, so {spare} spare): the workers compete with the step and each other; lower num_workers to \
                 {spare}{}",
                s(cores),
                if spare == 0 { " (the training thread then prepares the batches)" } else { "" }
            )
        } else if spare == 0 {
            "this machine has one core, which runs both the step and the loading: fewer or cheaper columns, or a \
             machine with more cores, would help"
                .to_string()
        } else {
            format!(
                "num_workers = {workers} already takes this machine's spare cores ({cores} in all, one for the \
                 step): more workers would compete with the step; fewer or cheaper columns, or a machine with more \
                 cores, would help"
            )
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

    /// What the training thread spent between the steps, in words: the
    /// evaluations, and the checkpoints it handed to the writer (or wrote);
    /// `None` when there was neither.
    pub fn between_steps(&self) -> Option<String> {
        let mut parts = Vec::new();
        if !self.evals.is_empty() {
            let seconds: f64 = self.evals.iter().map(|e| e.seconds).sum();
            let n = self.evals.len();
            parts.push(format!("{n} evaluation{} {}", if n == 1 { "" } else { "s" }, seconds_text(seconds)));
        }
        if !self.checkpoints.is_empty() {
            let seconds: f64 = self.checkpoints.iter().map(|c| c.handoff).sum();
            let n = self.checkpoints.len();
            // A synchronous save's wait is its whole write, not a hand-off.
            let what = if self.checkpoints.iter().all(|c| c.async_save) { "hand-off" } else { "save" };
            parts.push(format!(
                "{n} checkpoint {what}{} {} (the training waited for {})",
                if n == 1 { "" } else { "s" },
                seconds_text(seconds),
                if n == 1 { "it" } else { "them" }
            ));
        }
        (!parts.is_empty()).then(|| format!("between the steps: {}", parts.join(", ")))
    }

    /// Whether the steps were a data-parallel run's: any replica meeting timed.
    pub fn data_parallel(&self) -> bool {
        self.steps.iter().any(|s| s.phases.sync > 0.0)
    }

    /// The most device memory in use read at any phase's end (bytes);
    /// `None` where the device does not say.
    pub fn peak_in_use(&self) -> Option<u64> {
        self.steps.iter().map(|s| s.phases.in_use).max().filter(|&m| m > 0)
    }

    /// `profile.json`: the phase summary (of every step, and of the steps
    /// after warm-up, which the verdict reads and `kynml report` compares),
    /// the evaluations' time, how it was measured, and the verdict for a
    /// spec with `workers` data workers.
    pub fn to_json(&self, workers: usize) -> Value {
        let steady = self.steady_steps();
        json!({
            "steps": self.steps.len(),
            "synchronised": self.synchronised,
            "peak_device_in_use": self.peak_in_use(),
            "gpu": super::gpu_monitor::summarize(&self.gpu),
            "phases": self.summary(),
            "steady": {"steps": steady.len(), "phases": summarize(&steady)},
            "evaluation_seconds": self.evals.iter().map(|e| e.seconds).sum::<f64>() + 0.0,
            "run_seconds": self.run_seconds(),
            "run_shares": self.run_shares(),
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
        // Start and end rounded, the duration their difference: phases that
        // follow one another never overlap by a rounding (Perfetto would
        // nest them).
        let dur = |start: f64, seconds: f64| us(start + seconds) - us(start);
        let mut events = vec![
            json!({"ph": "M", "pid": 1, "tid": 1, "name": "thread_name", "args": {"name": "training step"}}),
            json!({"ph": "M", "pid": 1, "tid": 2, "name": "thread_name", "args": {"name": "waiting for the loader"}}),
            json!({"ph": "M", "pid": 1, "tid": 3, "name": "thread_name", "args": {"name": "evaluation"}}),
        ];
        let data_parallel = self.data_parallel();
        for s in &self.steps {
            let args = json!({"epoch": s.epoch, "step": s.step});
            events.push(json!({"name": "wait", "ph": "X", "pid": 1, "tid": 2, "ts": us(s.start), "dur": dur(s.start, s.wait), "args": args}));
            let mut at = s.start + s.wait;
            for phase in &PHASES[1..] {
                let seconds = s.phase(phase);
                if *phase == "sync" && !data_parallel {
                    continue;
                }
                events.push(json!({"name": phase, "ph": "X", "pid": 1, "tid": 1, "ts": us(at), "dur": dur(at, seconds), "args": args}));
                at += seconds;
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
            if let Some((w, start, seconds)) = s.prepared {
                let args = json!({"epoch": s.epoch, "step": s.step});
                events.push(json!({"name": "prepare batch", "ph": "X", "pid": 1, "tid": LOADER_TID + w, "ts": us(start), "dur": dur(start, seconds), "args": args}));
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
            // Without `async_save` the training thread waits for the whole write.
            let name = if c.async_save { "checkpoint hand-off" } else { "checkpoint save (waits for the write)" };
            events.push(json!({"name": name, "ph": "X", "pid": 1, "tid": 4, "ts": us(c.start), "dur": dur(c.start, c.handoff), "args": args}));
            if let Some((start, seconds)) = c.write {
                events.push(json!({"name": "write checkpoint", "ph": "X", "pid": 1, "tid": 5, "ts": us(start), "dur": dur(start, seconds), "args": args}));
            }
        }
        for e in &self.evals {
            events.push(json!({"name": "evaluate", "ph": "X", "pid": 1, "tid": 3, "ts": us(e.start), "dur": dur(e.start, e.seconds), "args": {"epoch": e.epoch}}));
        }
        // NVML's samples as counters, which Perfetto draws as tracks of their own.
        for g in &self.gpu {
            events.push(json!({"name": "GPU busy %", "ph": "C", "pid": 1, "ts": us(g.t), "args": {"busy": g.busy}}));
            events.push(json!({"name": "GPU memory (MiB)", "ph": "C", "pid": 1, "ts": us(g.t), "args": {"used": g.memory >> 20}}));
        }
        json!({"traceEvents": events, "displayTimeUnit": "ms"})
    }
}

/// Seconds for a person: `94 ms`, `2.31 s`.
fn seconds_text(seconds: f64) -> String {
    if seconds < 0.01 {
        format!("{:.2} ms", seconds * 1e3)
    } else if seconds < 1.0 {
        format!("{:.0} ms", seconds * 1e3)
    } else {
        format!("{seconds:.2} s")
    }
}

/// Each phase's total, mean, p50 and p95 over `steps`, and its share of
/// their time (waits included).
fn summarize(steps: &[StepTiming]) -> Vec<PhaseSummary> {
    let all: f64 = steps.iter().map(|s| s.wait + s.total).sum();
    let data_parallel = steps.iter().any(|s| s.phases.sync > 0.0);
    PHASES
        .iter()
        .filter(|&&phase| phase != "sync" || data_parallel)
        .map(|&phase| {
            let mut v: Vec<f64> = steps.iter().map(|s| s.phase(phase)).collect();
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
            phases: StepPhases { copy: 0.0, forward: 0.2, backward: 0.3, sync: 0.0, optimizer: 0.1, in_use: 0 },
            total: 0.7,
            prepared: i.is_multiple_of(2).then_some((i % 4 / 2, i as f64 - 0.5, 0.25)),
        };
        let p = Profile { steps: (1..=4).map(|i| step(i, 0.1 * i as f64)).collect(), ..Profile::default() };
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
        // No evaluation and no checkpoint: their times are 0, not -0.0 (an
        // empty sum of f64), which profile.json and the report showed.
        let json = p.to_json(0).to_string();
        assert!(!json.contains("-0.0"), "{json}");
        // Beside every step's phases, those of the steps after warm-up
        // (the first step is always one): what the report compares.
        let v = p.to_json(0);
        assert_eq!(v["steady"]["steps"], 3);
        let steady = v["steady"]["phases"].as_array().unwrap();
        let forward = steady.iter().find(|x| x["phase"] == "forward").unwrap();
        assert!((forward["total"].as_f64().unwrap() - 0.6).abs() < 1e-12, "{forward}");
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
                    phases: StepPhases { copy: 0.0, forward: 0.3, backward: 0.5, sync: 0.0, optimizer: 0.2, in_use: 0 },
                    total: 1.0,
                    prepared: None,
                })
                .collect(),
            ..Profile::default()
        };
        // Waiting 1 s of every 2: data-bound, with the workers to try.
        let data = steps(1.0).verdict(0);
        assert_eq!(data.bound, Bound::Data);
        assert!(data.advice.contains("50%") && data.advice.contains("num_workers (0 -> 2)"), "{}", data.advice);
        assert!(steps(1.0).verdict(4).advice.contains("num_workers (4 -> 8)"));
        // Waiting 0.25 s of every 1.25 (20%): compute-bound, backward leading.
        let compute = steps(0.25).verdict(0);
        assert_eq!(compute.bound, Bound::Compute);
        assert!(compute.advice.contains("backward is 40% of the steps' time"), "{}", compute.advice);
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

        // The cores bound the workers to advise: 2 cores leave one spare.
        let two = |workers: usize| Profile { cores: 2, ..steps(1.0) }.verdict(workers).advice;
        assert!(two(0).contains("num_workers (0 -> 1: this machine has 2 cores"), "{}", two(0));
        assert!(two(1).contains("already takes this machine's spare cores"), "{}", two(1));
        let sixteen = Profile { cores: 16, ..steps(1.0) }.verdict(4).advice;
        // A deeper queue does not make a slow loader faster: only workers are advised.
        assert!(sixteen.contains("(4 -> 8)") && !sixteen.contains("prefetch"), "{sixteen}");

        // fp16 that skipped 3 of 4 steps: that is the verdict, before any wait.
        let skipped = Profile { skipped_steps: 3, ..steps(1.0) }.verdict(0);
        assert_eq!(skipped.bound, Bound::SkippedSteps);
        assert!(skipped.advice.contains("skipped 3 of 4 steps (75%)") && skipped.advice.contains("init="));

        // A run already in half precision is not told to use it.
        let half = Profile { half_precision: true, ..steps(0.25) }.verdict(0).advice;
        assert!(!half.contains("bf16/fp16"), "{half}");
    }

    /// `steps` laid end to end from the start, each beginning where the
    /// one before ended: no time between them (as `timed` leaves a second).
    fn back_to_back(mut steps: Vec<StepTiming>) -> Vec<StepTiming> {
        let mut at = 0.0;
        for s in &mut steps {
            s.start = at;
            at += s.wait + s.total;
        }
        steps
    }

    fn timed(epoch: usize, step: usize, total: f64) -> StepTiming {
        let third = total / 3.0;
        StepTiming {
            epoch,
            step,
            start: step as f64,
            wait: 0.0,
            phases: StepPhases { copy: 0.0, forward: third, backward: third, sync: 0.0, optimizer: third, in_use: 0 },
            total,
            prepared: None,
        }
    }

    /// Replicas that spend most of a step meeting: the verdict names it.
    #[test]
    fn a_data_parallel_run_waiting_on_its_replicas_is_told_so() {
        let steps = (1..=6)
            .map(|i| {
                let mut s = timed(1, i, 4e-3);
                s.phases = StepPhases { forward: 1e-3, backward: 0.5e-3, sync: 2e-3, optimizer: 0.5e-3, ..s.phases };
                s
            })
            .collect();
        let p = Profile { steps: back_to_back(steps), ..Profile::default() };
        assert!(p.data_parallel());
        let v = p.verdict(0);
        // Not "compute-bound": the devices computed for half of it.
        assert_eq!(v.bound, Bound::Sync, "{}", v.advice);
        assert!(
            v.advice.starts_with("bound by the replicas' meeting: ")
                && v.advice.contains("sync is 50% of the steps' time")
                && v.advice.contains("a larger batch gives each device more work per meeting"),
            "{}",
            v.advice
        );
        // Replicas sharing one machine's cores: one device is the remedy.
        let v = Profile { cpu_replicas: true, ..p.clone() }.verdict(0);
        assert!(v.advice.contains("one device (`--device cpu`) uses them all without meetings"), "{}", v.advice);
        let sync = p.summary().into_iter().find(|x| x.phase == "sync").expect("a sync phase");
        assert!(
            (sync.share - 0.5).abs() < 1e-9 && p.summary().iter().find(|x| x.phase == "other").unwrap().total < 1e-12
        );
    }

    #[test]
    fn warm_up_steps_and_short_steps_shape_the_verdict() {
        // A 35 ms first step (kernels compiled) among 10 us ones: left out,
        // and what is left is per-step overhead, not arithmetic.
        let mut steps: Vec<StepTiming> = (1..=20).map(|i| timed(1, i, 10e-6)).collect();
        steps[0].total = 35e-3;
        steps[0].phases.forward = 35e-3;
        let p = Profile { steps: back_to_back(steps), ..Profile::default() };
        assert_eq!(p.steady_steps().len(), 19);
        let v = p.verdict(0);
        assert_eq!(v.bound, Bound::Overhead);
        assert!(v.advice.contains("(0.010 ms a step, the median)"), "{}", v.advice);
        assert!(
            v.advice.ends_with(
                "(the 19 steps after warm-up; the warm-up step (35 ms, start-up work) is in the phase table but \
                 not here)"
            ),
            "{}",
            v.advice
        );
        assert_eq!(Profile::default().verdict(0).bound, Bound::NoSteps);
        // The summary still counts every step.
        assert!(p.summary().iter().find(|x| x.phase == "forward").unwrap().total > 35e-3);
        // A slow step after the first epoch is the run's own, not warm-up
        // (the first step always is).
        let mut later: Vec<StepTiming> = (1..=4).map(|i| timed(1 + i / 3, i, 2e-3)).collect();
        later[3].total = 1.0;
        assert_eq!(Profile { steps: later, ..Profile::default() }.steady_steps().len(), 3);
        // Short steps, a quarter of them held up after the first epoch (by
        // another process; a mean step over 1 ms): the median step
        // decides, not the mean.
        let held: Vec<StepTiming> =
            (1..=30).map(|i| timed(1 + i / 10, i, if i % 3 == 0 && i > 10 { 5e-3 } else { 10e-6 })).collect();
        let p = Profile { steps: back_to_back(held), ..Profile::default() };
        assert_eq!(p.steady_steps().len(), 29);
        assert_eq!(p.verdict(0).bound, Bound::Overhead, "{}", p.verdict(0).advice);
        // Steps of 2 ms doing arithmetic: compute-bound.
        let compute =
            Profile { steps: back_to_back((1..=4).map(|i| timed(1, i, 2e-3)).collect()), ..Profile::default() };
        assert_eq!(compute.verdict(0).bound, Bound::Compute);
        // The native CPU engine's short steps are its arithmetic (no
        // launches or dispatch inside them): its phases decide.
        let native: Vec<StepTiming> = (1..=20)
            .map(|i| {
                let mut s = timed(1, i, 0.2e-3);
                s.phases = StepPhases { forward: 0.08e-3, backward: 0.116e-3, optimizer: 0.004e-3, ..s.phases };
                s
            })
            .collect();
        let v = Profile { steps: back_to_back(native), native: true, ..Profile::default() }.verdict(0);
        assert_eq!(v.bound, Bound::Compute, "{}", v.advice);
        assert!(
            v.advice.contains("backward is 58% of the steps' time") && !v.advice.contains("launches"),
            "{}",
            v.advice
        );
    }

    /// `n` steps of `step` seconds back to back from the start (forward a
    /// third, backward half, the optimizer the rest), then one evaluation
    /// of `eval` seconds and one checkpoint of `save` seconds.
    fn laid_out(n: usize, step: f64, eval: f64, save: f64, async_save: bool) -> Profile {
        let steps = (0..n)
            .map(|i| StepTiming {
                epoch: 1,
                step: i + 1,
                start: i as f64 * step,
                wait: 0.0,
                phases: StepPhases {
                    copy: 0.0,
                    forward: step / 3.0,
                    backward: step / 2.0,
                    sync: 0.0,
                    optimizer: step / 6.0,
                    in_use: 0,
                },
                total: step,
                prepared: None,
            })
            .collect();
        let end = n as f64 * step;
        let evals = if eval > 0.0 { vec![EvalTiming { epoch: 1, start: end, seconds: eval }] } else { Vec::new() };
        // Two saves of half each, one after the other.
        let checkpoints = if save > 0.0 {
            let half = |i: f64| CheckpointTiming {
                epoch: 1,
                start: end + eval + i * save / 2.0,
                handoff: save / 2.0,
                write: None,
                async_save,
            };
            vec![half(0.0), half(1.0)]
        } else {
            Vec::new()
        };
        Profile { steps, evals, checkpoints, ..Profile::default() }
    }

    /// On a GPU backend a tiny model's steps are long for their arithmetic
    /// (launches, waits for the device): judged by the products' rate, not
    /// by the step's length, which on the CPU alone says "short".
    #[test]
    fn a_gpu_step_whose_products_crawl_is_overhead_bound() {
        let steps = |flop: f64, slow_rate: f64| {
            let steps = (1..=20)
                .map(|i| StepTiming {
                    epoch: 1,
                    step: i,
                    start: i as f64 * 0.003,
                    wait: 0.0,
                    phases: StepPhases {
                        copy: 0.0,
                        forward: 0.001,
                        backward: 0.0015,
                        sync: 0.0,
                        optimizer: 0.0005,
                        in_use: 0,
                    },
                    total: 0.003,
                    prepared: None,
                })
                .collect();
            Profile { steps, step_flop: flop, slow_rate, steps_per_epoch: 8, fp16: true, ..Profile::default() }
        };
        // Iris on lavapipe: 6 x 1,248 multiply-adds x 16 rows in 3 ms, 40 MFLOP/s.
        let v = steps(119_808.0, SLOW_SOFTWARE_RATE).verdict(0);
        assert_eq!(v.bound, Bound::Overhead, "{}", v.advice);
        assert!(v.advice.contains("a step's products (120 kFLOP) ran at 39.9 MFLOP/s"), "{}", v.advice);
        assert!(!v.advice.contains("fp16"), "{}", v.advice);
        // 30 MFLOP in 3 ms (10 GFLOP/s): the software driver's own arithmetic.
        assert_eq!(steps(3e7, SLOW_SOFTWARE_RATE).verdict(0).bound, Bound::Compute);
        // The same on a hardware GPU is far below what it computes.
        assert_eq!(steps(3e7, SLOW_GPU_RATE).verdict(0).bound, Bound::Overhead);
        // On the CPU, 3 ms steps are the model's own work.
        assert_eq!(steps(119_808.0, 0.0).verdict(0).bound, Bound::Compute);
    }

    #[test]
    fn a_first_evaluation_that_compiled_kernels_is_warm_up() {
        // Six epochs of five 10 ms steps, each followed by an evaluation of
        // 5 ms; the first evaluation took 185 ms (a GPU compiling the
        // validation pass's kernels).
        let epoch_of = |first_eval: f64| {
            let mut p = Profile::default();
            let mut at = 0.0;
            for epoch in 1..=6 {
                for step in 1..=5 {
                    let phases = StepPhases {
                        copy: 0.0,
                        forward: 0.004,
                        backward: 0.004,
                        sync: 0.0,
                        optimizer: 0.002,
                        in_use: 0,
                    };
                    p.steps.push(StepTiming { epoch, step, start: at, wait: 0.0, phases, total: 0.01, prepared: None });
                    at += 0.01;
                }
                let seconds = if epoch == 1 { first_eval } else { 0.005 };
                p.evals.push(EvalTiming { epoch, start: at, seconds });
                at += seconds;
            }
            p
        };
        let p = epoch_of(0.185);
        assert_eq!(p.steady_evals().len(), 5);
        let shares = p.run_shares();
        // 29 steady steps (0.29 s) and 5 evaluations (0.025 s).
        assert!((shares.evaluation - 0.025 / 0.315).abs() < 1e-9, "{shares:?}");
        let v = p.verdict(0);
        assert_ne!(v.bound, Bound::Evaluation, "{}", v.advice);
        // One twice as long as the others is the run's own.
        let p = epoch_of(0.010);
        assert_eq!(p.steady_evals().len(), 6);
        // With one later evaluation there is nothing to compare with.
        let mut p = epoch_of(0.185);
        p.evals.truncate(2);
        assert_eq!(p.steady_evals().len(), 2);
        // A heavy validation still leads, its first left out and said.
        let mut p = epoch_of(0.900);
        p.evals.iter_mut().skip(1).for_each(|e| e.seconds = 0.2);
        let v = p.verdict(0);
        assert_eq!(v.bound, Bound::Evaluation, "{}", v.advice);
        assert!(v.advice.contains("(5 evaluations, 1.00 s, one after each epoch; the first, 900 ms"), "{}", v.advice);
    }

    #[test]
    fn evaluation_and_checkpoints_are_weighed_against_the_run() {
        // 13 steady steps of 0.3 s (3.9 s) and a warm-up step, one
        // evaluation of 4 s and a synchronous save of 2.1 s: of the 10 s
        // after warm-up, evaluation 40%, checkpoints 21%, steps 39%.
        let p = laid_out(14, 0.3, 4.0, 2.1, false);
        let shares = p.run_shares();
        assert!((shares.evaluation - 0.4).abs() < 1e-9 && (shares.checkpoints - 0.21).abs() < 1e-9, "{shares:?}");
        assert!((shares.steps - 0.39).abs() < 1e-9 && shares.rest < 1e-9, "{shares:?}");
        let v = p.verdict(0);
        assert_eq!(v.bound, Bound::Evaluation, "{}", v.advice);
        for part in [
            "evaluation takes 40% of the 10.00 s the run spent after warm-up (1 evaluation, 4.00 s",
            "a larger `split`",
            "synchronous checkpoint saves take 21% of the 10.00 s the run spent after warm-up",
            "`async_save = true`",
            "a larger `every_n`",
        ] {
            assert!(v.advice.contains(part), "{part:?} not in {}", v.advice);
        }
        assert!(!v.advice.contains("100%") && !v.advice.contains("compute-bound"), "{}", v.advice);
        // Saved in the background: the hand-off is a copy, and async_save is
        // not advised again.
        let v = laid_out(14, 0.3, 4.0, 2.1, true).verdict(0);
        assert!(v.advice.contains("checkpoint hand-offs take 21%") && !v.advice.contains("async_save"), "{}", v.advice);
        assert!(v.advice.contains("(2 saves, 2.10 s") && v.advice.contains("a larger `every_n`"), "{}", v.advice);
        // One save, the run's last: no `every_n` spares it, so none is advised.
        for async_save in [false, true] {
            let mut p = laid_out(14, 0.3, 4.0, 2.1, async_save);
            p.checkpoints.truncate(1);
            p.checkpoints[0].handoff = 2.1;
            let v = p.verdict(0);
            assert!(v.advice.contains("(1 save, 2.10 s") && !v.advice.contains("a larger `every_n`"), "{}", v.advice);
            assert_eq!(v.advice.contains("the run's one save"), async_save, "{}", v.advice);
        }
        // Checkpoints leading.
        let v = laid_out(14, 0.3, 1.0, 5.0, false).verdict(0);
        assert_eq!(v.bound, Bound::Checkpoint, "{}", v.advice);
        // The steps leading, evaluation (0.6 of 5.05 s, 12%) and checkpoints
        // (11%) named after the verdict, each with what to change.
        let v = laid_out(14, 0.3, 0.6, 0.55, false).verdict(0);
        assert_eq!(v.bound, Bound::Compute, "{}", v.advice);
        assert!(
            v.advice.starts_with(
                "compute-bound: the steps' own work is 77% of the 5.05 s the run spent after warm-up, waiting for \
                 batches 0%, evaluation 12%, checkpoints 11% (backward is 50% of the steps' time)"
            ),
            "{}",
            v.advice
        );
        assert!(v.advice.contains("a larger `split`") && v.advice.contains("`async_save = true`"), "{}", v.advice);
        // "100%" only where it is so.
        let v = laid_out(14, 0.3, 0.0, 0.0, false).verdict(0);
        assert!(v.advice.starts_with("compute-bound: the steps' own work is 100% of the 3.90 s"), "{}", v.advice);
        assert!(!v.advice.contains("split") && !v.advice.contains("every_n"), "{}", v.advice);
        // The same shares in a run a thousand times shorter (on the native
        // engine, whose short steps are arithmetic): 4 ms of evaluation and
        // 2.1 ms of saves are no change worth making.
        let v = Profile { native: true, ..laid_out(14, 0.3e-3, 4e-3, 2.1e-3, false) }.verdict(0);
        assert_eq!(v.bound, Bound::Compute, "{}", v.advice);
        assert!(!v.advice.contains("split") && !v.advice.contains("async_save"), "{}", v.advice);
    }

    /// Steps of 0.3 s a second apart: the steps are 30% of the run, the
    /// time between them 70% (an epoch's records, logs and line, in a small
    /// run): not "compute-bound" with a faster device advised.
    #[test]
    fn a_run_whose_steps_are_a_small_share_is_bound_between_them() {
        let mut p = laid_out(14, 0.3, 0.0, 0.0, false);
        p.steps.iter_mut().enumerate().for_each(|(i, s)| s.start = i as f64);
        let shares = p.run_shares();
        // 13 steady steps of 0.3 s in the 13 s the run took past its warm-up step.
        assert!((shares.seconds - 13.0).abs() < 1e-9 && (shares.steps - 0.3).abs() < 1e-9, "{shares:?}");
        let v = p.verdict(0);
        assert_eq!(v.bound, Bound::BetweenSteps, "{}", v.advice);
        assert!(
            v.advice.starts_with(
                "bound by the work between the steps: the steps' own work is 30% of the 13.00 s the run spent after \
                 warm-up, waiting for batches 0%, and the rest 70%"
            ),
            "{}",
            v.advice
        );
        assert!(!v.advice.contains("faster device"), "{}", v.advice);
        // Closer together, the steps lead again.
        p.steps.iter_mut().enumerate().for_each(|(i, s)| s.start = i as f64 * 0.5);
        assert_eq!(p.verdict(0).bound, Bound::Compute);
    }

    #[test]
    fn advice_fits_the_device_the_cores_and_the_run() {
        // fp16 skipping steps: bf16 is advised only where it runs.
        let skipping = |bf16: bool| Profile { skipped_steps: 10, bf16, ..laid_out(14, 0.3, 0.0, 0.0, false) };
        let on_wgpu = skipping(false).verdict(0).advice;
        assert!(!on_wgpu.contains("train in bf16") && on_wgpu.contains("does not run on this device"), "{on_wgpu}");
        assert!(skipping(true).verdict(0).advice.contains("train in bf16 (precision = bf16)"));
        // Compute-bound: the precision advised is one the device runs.
        let compute = |bf16: bool, fp16: bool| Profile { bf16, fp16, ..laid_out(14, 0.3, 0.0, 0.0, false) }.verdict(0);
        assert!(compute(true, true).advice.contains("precision = bf16"));
        let wgpu = compute(false, true).advice;
        assert!(wgpu.contains("precision = fp16") && !wgpu.contains("bf16 products"), "{wgpu}");
        let cpu = compute(false, false).advice;
        assert!(cpu.contains("a faster device") && !cpu.contains("precision ="), "{cpu}");

        // Data-bound with more workers than spare cores: lower them.
        let mut waiting = laid_out(14, 0.3, 0.0, 0.0, false);
        for s in &mut waiting.steps {
            s.wait = 0.3;
        }
        let eight = Profile { cores: 2, ..waiting.clone() }.verdict(8).advice;
        assert!(
            eight.contains(
                "num_workers = 8 exceeds this machine's spare cores (2 cores in all, one for the step, so 1 spare)"
            ) && eight.contains("lower num_workers to 1")
                && !eight.contains("already takes"),
            "{eight}"
        );
        assert!(eight.starts_with("data-bound: waiting for batches is 50% of the steps' time"), "{eight}");
        let one_core = Profile { cores: 1, ..waiting.clone() };
        assert!(one_core.verdict(0).advice.contains("this machine has one core"), "{}", one_core.verdict(0).advice);
        assert!(one_core.verdict(2).advice.contains("lower num_workers to 0"), "{}", one_core.verdict(2).advice);

        // One step per epoch, the batch every training row: no larger batch to advise.
        let tiny: Vec<StepTiming> = (1..=5).map(|e| timed(e, 1, 10e-6)).collect();
        let small = Profile { steps: back_to_back(tiny), steps_per_epoch: 1, ..Profile::default() }.verdict(0);
        assert_eq!(small.bound, Bound::Overhead);
        assert!(
            small.advice.contains("the run is small") && !small.advice.contains("a larger batch"),
            "{}",
            small.advice
        );
    }

    #[test]
    fn warm_up_is_always_left_out_and_too_few_steps_are_said() {
        // One and two steps: nothing after warm-up to judge by.
        for n in [1, 2, 3] {
            let v = laid_out(n, 0.3, 0.0, 0.0, false).verdict(0);
            assert_eq!(v.bound, Bound::TooFewSteps, "{n}: {}", v.advice);
            assert!(v.advice.starts_with("too few steps to judge") && !v.advice.contains("arithmetic"), "{}", v.advice);
        }
        // A slow first step (4.5 s, forward) before three of 2 ms whose
        // optimizer leads: the steady steps alone are judged.
        let mut steps: Vec<StepTiming> = (0..4)
            .map(|i| StepTiming {
                phases: StepPhases {
                    copy: 0.0,
                    forward: 0.2e-3,
                    backward: 0.3e-3,
                    sync: 0.0,
                    optimizer: 1.5e-3,
                    in_use: 0,
                },
                ..timed(1, i + 1, 2e-3)
            })
            .collect();
        steps[0].phases.forward = 4.5;
        steps[0].total = 4.5 + 1.8e-3;
        let v = Profile { steps: back_to_back(steps), ..Profile::default() }.verdict(0);
        assert_eq!(v.bound, Bound::Compute, "{}", v.advice);
        assert!(v.advice.contains("(optimizer is 75% of the steps' time)"), "{}", v.advice);
        assert!(v.advice.ends_with("the warm-up step (4.50 s, start-up work) is in the phase table but not here)"));
    }

    #[test]
    fn trace_phases_never_overlap_by_rounding() {
        // Phases of 35.5 us from starts at .6 us: rounded one by one, a phase would
        // end after the next begins.
        let steps: Vec<StepTiming> =
            (0..50).map(|i| StepTiming { start: 1.0000006 + i as f64 * 0.001, ..timed(1, i + 1, 106.5e-6) }).collect();
        let trace = Profile { steps, ..Profile::default() }.trace();
        let mut spans: Vec<(f64, f64)> = trace["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["tid"] == 1 && e["ph"] == "X")
            .map(|e| (e["ts"].as_f64().unwrap(), e["dur"].as_f64().unwrap()))
            .collect();
        spans.sort_by(|a, b| a.0.total_cmp(&b.0));
        for pair in spans.windows(2) {
            assert!(pair[0].0 + pair[0].1 <= pair[1].0, "{pair:?}");
        }
    }
}
