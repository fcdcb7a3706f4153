//! Data-parallel training on several devices of one process, on Burn's own
//! collective engine (the `collective` feature: `burn::collective`).
//!
//! Each device holds a replica of the model, its optimizer state and its
//! loss scaler, all started from the same weights (the same seed, or the
//! same checkpoint). A step cuts the global batch into one run of
//! consecutive rows per device; each replica runs forward and backward on
//! its rows, its loss weighted by its share of the rows, and at the end of
//! an optimizer step the gradients are summed with Burn's all-reduce. The
//! sum is the gradient of the whole batch's mean loss, so every replica
//! unscales, clips and steps the same gradients and the weights stay the
//! same on every device. `batch` stays the global batch: a spec trains the
//! same on one device or several.
//!
//! The first device's replica runs on the loop's thread and answers for all
//! of them (evaluation, checkpoints, the model); the others run on threads
//! of their own. Batchnorm's statistics are each replica's own slice's, as
//! PyTorch's DistributedDataParallel without SyncBatchNorm, and its running
//! averages are the first replica's. Dropout draws each replica's masks
//! from the step's dropout draw and the replica's rank, so a seed still
//! gives the same run, and a resume continues it exactly.
//!
//! KynML does no arithmetic of its own here: the sum is Burn's
//! `all_reduce` (a tree of additions over the devices; device-to-device
//! copies between CUDA GPUs). The gradients go in one flat tensor per step,
//! so the replicas meet once per optimizer step.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

use burn::collective::{self, AllReduceStrategy, CollectiveConfig, PeerId, ReduceOperation};
use burn::module::ParamId;
use burn::optim::GradientsParams;
use burn::tensor::{DType, FloatDType, Shape, Tensor, TensorPrimitive};
use burn::DispatchDevice;
use kynml_backend::Backend as Kb;

use crate::checkpoint::Checkpoint;
use crate::data::{Batch, Dataset, Split};
use crate::evaluate::Outputs;
use crate::model::Model;
use crate::rng::SplitMix64;
use crate::train::engine::{BurnEngine, Engine, Part, StepLoss};
use crate::train::native::EngineKind;
use crate::train::profile::StepPhases;
use crate::train::resume::{NormSum, SavedState, ScaleState};

/// Burn keeps one collective server per process: one data-parallel run at a
/// time uses it (tests run in parallel threads of one process).
static ONE_RUN: Mutex<()> = Mutex::new(());

/// How the replicas' gradients are summed, for "what runs".
pub const ALL_REDUCE: &str = "Burn's all-reduce (burn-collective, a binary tree of sums), in this process";

/// Sums `grads` with the other replicas' (Burn's all-reduce, as `peer`):
/// every gradient in `ranks` order, flattened into one tensor per dtype,
/// one all-reduce each, then cut back to the parameters' shapes.
pub(crate) fn all_reduce(
    mut grads: GradientsParams,
    peer: PeerId,
    ranks: &[(ParamId, usize)],
) -> Result<GradientsParams, String> {
    struct Piece {
        id: ParamId,
        rank: usize,
        shape: Shape,
    }
    // Buckets in the order their dtypes first appear: the same on every replica.
    let mut buckets: Vec<(DType, Vec<Piece>, Vec<Tensor<Kb, 1>>)> = Vec::new();
    for &(id, rank) in ranks {
        fn take<const D: usize>(grads: &mut GradientsParams, id: ParamId) -> Option<(Tensor<Kb, 1>, Shape)> {
            grads.remove::<Kb, D>(id).map(|g| {
                let shape = g.shape();
                (g.reshape([shape.num_elements()]), shape)
            })
        }
        let Some((flat, shape)) = by_rank!(rank, take(&mut grads, id)) else { continue };
        let dtype = flat.dtype();
        let at = match buckets.iter().position(|b| b.0 == dtype) {
            Some(at) => at,
            None => {
                buckets.push((dtype, Vec::new(), Vec::new()));
                buckets.len() - 1
            }
        };
        buckets[at].1.push(Piece { id, rank, shape });
        buckets[at].2.push(flat);
    }
    for (_, pieces, flats) in buckets {
        let bucket = Tensor::cat(flats, 0);
        let summed = collective::all_reduce::<Kb>(peer, bucket.into_primitive().tensor(), ReduceOperation::Sum)
            .map_err(|e| format!("the all-reduce of the gradients failed on replica {}: {e:?}", peer.0))?;
        let summed = Tensor::<Kb, 1>::from_primitive(TensorPrimitive::Float(summed));
        let mut at = 0;
        for Piece { id, rank, shape } in pieces {
            let n = shape.num_elements();
            let part = summed.clone().narrow(0, at, n);
            at += n;
            fn put<const D: usize>(grads: &mut GradientsParams, id: ParamId, part: Tensor<Kb, 1>, shape: Shape) {
                grads.register(id, part.reshape::<D, _>(shape));
            }
            by_rank!(rank, put(&mut grads, id, part, shape));
        }
    }
    Ok(grads)
}

/// A step for a replica on its own thread.
struct Job {
    batch: Batch,
    lr: f64,
    dropout: SplitMix64,
    part: Part,
}

/// What a replica's step gave: its mean loss on its rows (`None` when the
/// step was skipped for overflow), or why it failed.
type Reply = Result<Option<StepLoss>, String>;

/// A replica on a thread of its own.
struct Replica {
    jobs: Option<Sender<Job>>,
    replies: Receiver<Reply>,
    thread: Option<JoinHandle<()>>,
}

/// Trains one model on several devices (see the module's documentation).
pub struct ParallelEngine {
    /// The first device's replica, on the loop's thread.
    lead: BurnEngine,
    /// The others, rank 1 onwards.
    replicas: Vec<Replica>,
    /// The first device (its autodiff side, where the steps' losses are
    /// kept), where the replicas' losses are added up.
    device: DispatchDevice,
    failed: Option<String>,
    /// Seconds the lead waited for the other replicas' steps to end and
    /// added up their losses, last step (the profile's `sync`).
    waited: f64,
    /// Seconds the lead spent splitting the batch and handing the replicas
    /// their slices, last step: a copy of every row (the profile's `copy`).
    handed: f64,
    _one_run: MutexGuard<'static, ()>,
}

fn peer(rank: usize) -> PeerId {
    PeerId::from(rank)
}

impl ParallelEngine {
    /// Joins `lead` (rank 0, on `device`) and `others` (ranks 1 onwards,
    /// each built for its own device, with the same weights and state) into
    /// one data-parallel engine; registers every replica with Burn's
    /// collective. `others` pairs each engine with its device without
    /// autodiff; `device` is the first device's, `autodiff` its autodiff
    /// side, where the losses are summed.
    pub fn new(
        lead: BurnEngine,
        others: Vec<(BurnEngine, DispatchDevice)>,
        device: &DispatchDevice,
        autodiff: &DispatchDevice,
    ) -> Result<Self, String> {
        let one_run = ONE_RUN.lock().unwrap_or_else(PoisonError::into_inner);
        // Whatever an earlier run in this process left behind.
        collective::reset_collective::<Kb>();
        let n = others.len() + 1;
        let config =
            CollectiveConfig::default().with_num_devices(n).with_local_all_reduce_strategy(AllReduceStrategy::Tree(2));
        let mut replicas = Vec::with_capacity(others.len());
        for (i, (engine, on)) in others.into_iter().enumerate() {
            let rank = i + 1;
            let (jobs, inbox) = channel::<Job>();
            let (outbox, replies) = channel::<Reply>();
            let config = config.clone();
            let thread = std::thread::Builder::new()
                .name(format!("kynml-replica-{rank}"))
                .spawn(move || serve(engine.with_peer(peer(rank)), rank, on, config, inbox, outbox))
                .map_err(|e| format!("cannot start the thread of replica {rank}: {e}"))?;
            replicas.push(Replica { jobs: Some(jobs), replies, thread: Some(thread) });
        }
        // Waits for every replica to register.
        let registered = collective::register::<Kb>(peer(0), device.clone(), config);
        let mut engine = ParallelEngine {
            lead: lead.with_peer(peer(0)),
            replicas,
            device: autodiff.clone(),
            failed: None,
            waited: 0.0,
            handed: 0.0,
            _one_run: one_run,
        };
        if let Err(e) = registered {
            engine.failed = Some(format!("the replicas could not join Burn's collective: {e:?}"));
            // A replica that did answer with its own reason says more.
            for r in &engine.replicas {
                if let Ok(Err(why)) = r.replies.try_recv() {
                    engine.failed = Some(why);
                }
            }
            return Err(engine.failed.take().unwrap_or_default());
        }
        Ok(engine)
    }

    /// The number of devices.
    pub fn devices(&self) -> usize {
        self.replicas.len() + 1
    }
}

/// A replica's thread: registers, then runs steps until the engine is dropped.
fn serve(
    mut engine: BurnEngine,
    rank: usize,
    device: DispatchDevice,
    config: CollectiveConfig,
    jobs: Receiver<Job>,
    replies: Sender<Reply>,
) {
    if let Err(e) = collective::register::<Kb>(peer(rank), device.clone(), config) {
        let _ = replies.send(Err(format!("replica {rank} could not join Burn's collective: {e:?}")));
        collective::reset_collective::<Kb>();
        return;
    }
    while let Ok(Job { batch, lr, mut dropout, part }) = jobs.recv() {
        let stepped = catch_unwind(AssertUnwindSafe(|| engine.step(batch, lr, &mut dropout, part)));
        let reply = match stepped {
            Ok(loss) => match engine.failure() {
                Some(why) => Err(why),
                None => Ok(loss),
            },
            Err(panic) => {
                let why = kynml_backend::panic_words(panic.as_ref());
                // The other replicas wait in the all-reduce for this one: let them go.
                collective::reset_collective::<Kb>();
                Err(format!("replica {rank} failed in its step: {why}"))
            }
        };
        let failed = reply.is_err();
        if replies.send(reply).is_err() || failed {
            return;
        }
    }
    let _ = collective::finish_collective::<Kb>(peer(rank));
}

impl Engine for ParallelEngine {
    fn kind(&self) -> EngineKind {
        EngineKind::Burn
    }

    fn step(&mut self, batch: Batch, lr: f64, dropout: &mut SplitMix64, part: Part) -> Option<StepLoss> {
        if self.failed.is_some() {
            return None;
        }
        let handing = std::time::Instant::now();
        let rows = batch.len().max(1);
        // One draw of the loop's dropout stream per step, whatever the
        // number of devices: each replica's masks come from it and its rank.
        let draw = dropout.next_u64();
        let slices = batch.split(self.devices());
        // Empty slices only come with fewer rows than devices, when the
        // first slice holds one row.
        let filler = slices.iter().any(Batch::is_empty).then(|| slices[0].clone());
        let mut slices = slices.into_iter();
        let mut lead_job = None;
        let mut shares = Vec::with_capacity(self.devices());
        for rank in 0..self.devices() {
            let slice = slices.next().unwrap_or_default();
            // With fewer rows than devices, a replica without rows steps on
            // a copy of the first row at weight 0: its gradients are zero,
            // and it still meets the others in the all-reduce.
            let (slice, share) = if slice.is_empty() {
                (filler.clone().unwrap_or_default(), 0.0)
            } else {
                let share = slice.len() as f64 / rows as f64;
                (slice, share)
            };
            shares.push(share);
            let job = Job {
                batch: slice,
                lr,
                dropout: SplitMix64::stream(draw, rank as u64),
                part: Part { weight: part.weight * share, last: part.last },
            };
            if rank == 0 {
                lead_job = Some(job);
            } else if let Some(jobs) = &self.replicas[rank - 1].jobs {
                if jobs.send(job).is_err() {
                    self.failed = Some(format!("replica {rank} has stopped"));
                    collective::reset_collective::<Kb>();
                }
            }
        }
        let Job { batch, lr, mut dropout, part: lead_part } = lead_job?;
        self.handed = handing.elapsed().as_secs_f64();
        let lead = self.lead.step(batch, lr, &mut dropout, lead_part);
        if let Some(why) = self.lead.failure() {
            self.failed.get_or_insert(why);
        }
        let mut losses = vec![lead];
        // The lead's wait for the other replicas to end their steps: part
        // of their meeting, in the profile's `sync`.
        let waiting = std::time::Instant::now();
        for (i, r) in self.replicas.iter().enumerate() {
            match r.replies.recv() {
                Ok(Ok(loss)) => losses.push(loss),
                Ok(Err(why)) => {
                    // The replica's own reason says more than the lead's.
                    self.failed = Some(why);
                    losses.push(None);
                }
                Err(_) => {
                    self.failed.get_or_insert_with(|| format!("replica {} has stopped", i + 1));
                    losses.push(None);
                }
            }
        }
        self.waited = waiting.elapsed().as_secs_f64();
        if self.failed.is_some() {
            return None;
        }
        // Every replica skipped or none did: they saw the same summed
        // gradients, so the lead's flag (if the device holds it) speaks for all.
        let mut total: Option<Tensor<Kb, 1>> = None;
        let mut flag = None;
        for (loss, share) in losses.into_iter().zip(shares) {
            let loss = match loss? {
                StepLoss::Device(t) => t.to_device(&self.device),
                StepLoss::Host(x) => Tensor::from_floats([x as f32], &self.device),
                StepLoss::Flagged { loss, taken } => {
                    flag.get_or_insert_with(|| taken.to_device(&self.device));
                    loss.to_device(&self.device)
                }
            };
            let weighted = loss.mul_scalar(share);
            total = Some(match total {
                Some(t) => t + weighted,
                None => weighted,
            });
        }
        self.waited = waiting.elapsed().as_secs_f64();
        total.map(|loss| match flag {
            Some(taken) => StepLoss::Flagged { loss, taken },
            None => StepLoss::Device(loss),
        })
    }

    fn evaluate(&mut self, data: &Dataset, split: Split, stop: Option<&AtomicBool>) -> Option<Outputs> {
        self.lead.evaluate(data, split, stop)
    }

    fn half(&self) -> Option<FloatDType> {
        self.lead.half()
    }

    fn eval_rows(&self) -> Option<usize> {
        self.lead.eval_rows()
    }

    fn expect_rows(&mut self, rows: usize) {
        // The lead's slice of a batch (`Batch::split`: the larger parts first).
        self.lead.expect_rows(rows.div_ceil(self.devices()));
    }

    fn model(&self) -> Model<Kb> {
        self.lead.model()
    }

    fn snapshot(&self, best: Option<&Model<Kb>>, state: SavedState) -> Checkpoint {
        self.lead.snapshot(best, state)
    }

    fn loss_scale(&self) -> Option<ScaleState> {
        self.lead.loss_scale()
    }

    fn grad_norms(&mut self) -> Option<NormSum> {
        self.lead.grad_norms()
    }

    fn seed_grad_norms(&mut self, norms: NormSum) {
        self.lead.seed_grad_norms(norms);
    }

    fn set_profiling(&mut self, on: bool) {
        self.lead.set_profiling(on);
    }

    fn last_phases(&self) -> Option<StepPhases> {
        self.lead.last_phases().map(|p| StepPhases { copy: p.copy + self.handed, sync: p.sync + self.waited, ..p })
    }

    fn failure(&mut self) -> Option<String> {
        self.failed.clone()
    }
}

impl Drop for ParallelEngine {
    fn drop(&mut self) {
        let stuck = self.failed.is_some() || std::thread::panicking();
        if stuck {
            // Replicas waiting in an all-reduce for a peer that will not come.
            collective::reset_collective::<Kb>();
        }
        for r in &mut self.replicas {
            // Closing the channel ends the replica's loop.
            r.jobs.take();
        }
        for r in &mut self.replicas {
            if let Some(thread) = r.thread.take() {
                let _ = thread.join();
            }
        }
        if !stuck {
            let _ = collective::finish_collective::<Kb>(peer(0));
        }
    }
}
