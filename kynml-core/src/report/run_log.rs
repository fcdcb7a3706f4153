//! Turns training events into files in the run folder as they happen:
//! `metrics.jsonl` (one line per epoch) and TensorBoard scalars (per epoch,
//! and the running training loss every few steps), so a run that dies keeps
//! everything it finished.

use std::io;

use crate::report::curves::{self, Curves};
use crate::report::tensorboard::EventWriter;
use crate::run_dir::RunDir;
use crate::train::profile::{PhaseSummary, Profile};
use crate::train::{EpochRecord, TrainEvent};

/// Writes a run's `metrics.jsonl` and TensorBoard scalars as training events arrive.
pub struct RunLog<'a> {
    dir: &'a RunDir,
    tensorboard: EventWriter,
    /// The first write error; training goes on, the caller reports it.
    error: Option<io::Error>,
    /// The epochs whose phase shares are written.
    profiled: Vec<usize>,
    /// Every epoch recorded, those before a resume included.
    history: Vec<EpochRecord>,
}

impl<'a> RunLog<'a> {
    /// Starts the log in `dir`, creating its TensorBoard event file.
    pub fn create(dir: &'a RunDir) -> io::Result<Self> {
        Ok(RunLog {
            dir,
            tensorboard: EventWriter::create(&dir.path)?,
            error: None,
            profiled: Vec::new(),
            history: Vec::new(),
        })
    }

    /// Records one training event; a write error is kept for [`RunLog::finish`] and training goes on.
    pub fn on_event(&mut self, event: &TrainEvent) {
        if let Err(e) = self.record(event) {
            self.error.get_or_insert(e);
        }
    }

    /// The epochs recorded so far, those a resumed run read back included:
    /// what an interrupted run draws.
    pub fn history(&self) -> &[EpochRecord] {
        &self.history
    }

    /// The first write error met so far, if any: the caller may stop
    /// training rather than train on with nowhere to keep the results.
    pub fn failed(&self) -> Option<&io::Error> {
        self.error.as_ref()
    }

    fn record(&mut self, event: &TrainEvent) -> io::Result<()> {
        match event {
            TrainEvent::Step { epoch, step, steps, loss: Some(loss), .. } => {
                let global = ((epoch - 1) * steps + step) as i64;
                self.tensorboard.scalar("step/train_loss", global, *loss as f32)
            }
            // A resumed run's folder covers the whole training.
            TrainEvent::Resumed { history, .. } => history.iter().try_for_each(|r| self.epoch(r)),
            TrainEvent::EpochEnd(r) => self.epoch(r),
            TrainEvent::EpochProfiled { epoch, phases } => self.shares(*epoch, phases),
            _ => Ok(()),
        }
    }

    fn epoch(&mut self, r: &EpochRecord) -> io::Result<()> {
        self.history.push(r.clone());
        self.dir.append_epoch(r)?;
        let e = r.epoch as i64;
        self.tensorboard.scalar("loss/train", e, r.train_loss as f32)?;
        self.tensorboard.scalar("loss/valid", e, r.val_loss as f32)?;
        self.tensorboard.scalar("lr", e, r.lr as f32)?;
        // Epochs before a resume were timed by another process: not known (NaN), left out.
        if r.samples_per_sec.is_finite() {
            self.tensorboard.scalar("throughput/samples_per_sec", e, r.samples_per_sec as f32)?;
        }
        if let Some(norm) = r.grad_norm {
            self.tensorboard.scalar("train/grad_norm", e, norm as f32)?;
        }
        if let (Some(wait), false) = (r.data_wait, r.seconds.is_nan()) {
            self.tensorboard.scalar("time/data_wait_share", e, (wait / r.seconds.max(1e-9)) as f32)?;
        }
        let mib = |b: u64| (b as f64 / (1u64 << 20) as f64) as f32;
        if let Some(rss) = r.peak_rss {
            self.tensorboard.scalar("memory/peak_host_mib", e, mib(rss))?;
        }
        if let Some(pool) = r.device_reserved {
            self.tensorboard.scalar("memory/device_reserved_mib", e, mib(pool))?;
        }
        for (name, value) in &r.metrics {
            self.tensorboard.scalar(&format!("valid/{name}"), e, *value as f32)?;
        }
        if let Some(scale) = r.loss_scale {
            self.tensorboard.scalar("precision/loss_scale", e, scale as f32)?;
            self.tensorboard.scalar("precision/skipped_steps", e, r.skipped_steps as f32)?;
        }
        self.tensorboard.flush()
    }

    /// One epoch's phase shares as TensorBoard scalars `profile/<phase>_share`
    /// (written as each epoch ends, so that a run that dies keeps them).
    fn shares(&mut self, epoch: usize, phases: &[PhaseSummary]) -> io::Result<()> {
        for p in phases {
            self.tensorboard.scalar(&format!("profile/{}_share", p.phase), epoch as i64, p.share as f32)?;
        }
        self.profiled.push(epoch);
        self.tensorboard.flush()
    }

    /// The phase shares of the epochs `profile` holds that were not written
    /// as they ended: an interrupted run's last, partial epoch.
    pub fn profile(&mut self, profile: &Profile) {
        let mut epochs: Vec<usize> = profile.steps.iter().map(|s| s.epoch).collect();
        epochs.dedup();
        epochs.retain(|e| !self.profiled.contains(e));
        for epoch in epochs {
            if let Some(phases) = profile.epoch_summary(epoch) {
                if let Err(e) = self.shares(epoch, &phases) {
                    self.error.get_or_insert(e);
                }
            }
        }
    }

    /// Flush what is buffered and return the first error met on the way.
    pub fn finish(mut self) -> io::Result<()> {
        let flushed = self.tensorboard.flush();
        match self.error.take() {
            Some(e) => Err(e),
            None => flushed,
        }
    }
}

/// Draw `curves.svg` and `curves.png` in the run folder from the epochs run;
/// `kept` is the epoch whose weights are the model the run kept (marked when
/// it is not the lowest validation loss), `None` where it kept none;
/// `ended` why the run ended before the epochs it asked for, where it did
/// (said in the subtitle).
pub fn draw_curves(
    dir: &RunDir,
    title: &str,
    history: &[EpochRecord],
    kept: Option<usize>,
    ended: Option<curves::Ended>,
) -> io::Result<()> {
    let epochs: Vec<usize> = history.iter().map(|r| r.epoch).collect();
    let col = |f: fn(&EpochRecord) -> f64| history.iter().map(f).collect::<Vec<f64>>();
    let (train_loss, val_loss, lr) = (col(|r| r.train_loss), col(|r| r.val_loss), col(|r| r.lr));
    // Every metric of the history: a resume may have asked for others.
    let names: std::collections::BTreeSet<String> = history.iter().flat_map(|r| r.metrics.keys().cloned()).collect();
    let metrics: Vec<(String, Vec<f64>)> = names
        .into_iter()
        .map(|name| {
            let values = history.iter().map(|r| r.metrics.get(&name).copied().unwrap_or(f64::NAN)).collect();
            (name, values)
        })
        .collect();
    // Loss scaling's panel, when any epoch scaled (epochs of a resumed
    // fp32 run have none: NaN, a gap).
    let scaled = history.iter().any(|r| r.loss_scale.is_some());
    let loss_scale: Vec<f64> = history.iter().map(|r| r.loss_scale.unwrap_or(f64::NAN)).collect();
    let skipped: Vec<u64> = history.iter().map(|r| r.skipped_steps as u64).collect();
    let c = Curves {
        title,
        epochs: &epochs,
        train_loss: &train_loss,
        val_loss: &val_loss,
        lr: &lr,
        metrics: &metrics,
        loss_scale: scaled.then_some(loss_scale.as_slice()),
        skipped_steps: scaled.then_some(skipped.as_slice()),
        kept,
        ended,
    };
    curves::draw_svg(&c, &dir.path.join("curves.svg")).map_err(io::Error::other)?;
    curves::draw_png(&c, &dir.path.join("curves.png")).map_err(io::Error::other)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::profile::{StepPhases, StepTiming};

    fn profiled(epochs: usize) -> Profile {
        let steps = (1..=epochs)
            .map(|epoch| StepTiming {
                epoch,
                step: 1,
                start: epoch as f64,
                wait: 0.1,
                phases: StepPhases { copy: 0.0, forward: 0.2, backward: 0.3, sync: 0.0, optimizer: 0.4, in_use: 0 },
                total: 0.9,
                prepared: None,
            })
            .collect();
        Profile { steps, ..Profile::default() }
    }

    /// The TensorBoard file's bytes, as they are on disk now.
    fn on_disk(dir: &RunDir) -> Vec<u8> {
        let file = std::fs::read_dir(&dir.path)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("events.out.tfevents."))
            .unwrap();
        std::fs::read(file).unwrap()
    }

    fn count(haystack: &[u8], needle: &str) -> usize {
        haystack.windows(needle.len()).filter(|w| *w == needle.as_bytes()).count()
    }

    /// Epochs read back from a checkpoint have no throughput (NaN): TensorBoard gets none for them.
    #[test]
    fn a_resumed_runs_earlier_epochs_have_no_throughput_point() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = RunDir::create_exact(&tmp.path().join("run")).unwrap();
        let mut log = RunLog::create(&dir).unwrap();
        let record: EpochRecord = serde_json::from_value(serde_json::json!({
            "epoch": 1, "lr": 0.01, "train_loss": 0.5, "val_loss": 0.5, "metrics": {},
            "samples_per_sec": 1200.0, "seconds": 0.1,
        }))
        .unwrap();
        let earlier = [EpochRecord { samples_per_sec: f64::NAN, seconds: f64::NAN, ..record.clone() }];
        log.on_event(&TrainEvent::Resumed { path: Some(std::path::Path::new("c.ckpt")), epoch: 1, history: &earlier });
        log.on_event(&TrainEvent::EpochEnd(&EpochRecord { epoch: 2, ..record }));
        log.finish().unwrap();
        let bytes = on_disk(&dir);
        assert_eq!(count(&bytes, "loss/train"), 2);
        assert_eq!(count(&bytes, "throughput/samples_per_sec"), 1);
    }

    /// A resume that asked for other metrics draws them all (the chart took
    /// the first epoch's names), the log keeps every epoch for a stopped
    /// run's chart, and loss scaling's scale and skipped steps reach
    /// TensorBoard and the chart.
    #[test]
    fn every_metric_and_the_loss_scale_are_drawn_and_logged() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = RunDir::create_exact(&tmp.path().join("run")).unwrap();
        let mut log = RunLog::create(&dir).unwrap();
        let record: EpochRecord = serde_json::from_value(serde_json::json!({
            "epoch": 1, "lr": 0.01, "train_loss": 0.5, "val_loss": 0.5, "metrics": {"accuracy": 0.7},
            "samples_per_sec": 1200.0, "seconds": 0.1, "loss_scale": 32768.0, "skipped_steps": 2,
        }))
        .unwrap();
        log.on_event(&TrainEvent::EpochEnd(&record));
        let later = EpochRecord {
            epoch: 2,
            metrics: [("f1".to_string(), 0.8), ("recall".to_string(), 0.75)].into_iter().collect(),
            ..record.clone()
        };
        log.on_event(&TrainEvent::EpochEnd(&later));
        assert_eq!(log.history(), [record, later]);
        draw_curves(&dir, "resumed", log.history(), Some(2), None).unwrap();
        let history = log.history().to_vec();
        log.finish().unwrap();
        let svg = std::fs::read_to_string(dir.path.join("curves.svg")).unwrap();
        for name in ["accuracy: best", "f1: best", "recall: best", "Mixed precision"] {
            assert!(svg.contains(name), "{name} is not drawn");
        }
        let bytes = on_disk(&dir);
        assert_eq!(count(&bytes, "precision/loss_scale"), 2);
        assert_eq!(count(&bytes, "precision/skipped_steps"), 2);
        // An fp32 run has neither.
        let plain: Vec<EpochRecord> =
            history.into_iter().map(|r| EpochRecord { loss_scale: None, skipped_steps: 0, ..r }).collect();
        draw_curves(&dir, "fp32", &plain, None, None).unwrap();
        let svg = std::fs::read_to_string(dir.path.join("curves.svg")).unwrap();
        assert!(!svg.contains("Mixed precision"));
    }

    #[test]
    fn each_epochs_phase_shares_are_on_disk_as_it_ends() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = RunDir::create_exact(&tmp.path().join("run")).unwrap();
        let mut log = RunLog::create(&dir).unwrap();
        let profile = profiled(3);
        for epoch in 1..=2 {
            let phases = profile.epoch_summary(epoch).unwrap();
            log.on_event(&TrainEvent::EpochProfiled { epoch, phases });
            // Written and flushed at once: a run killed now keeps them.
            assert_eq!(count(&on_disk(&dir), "profile/forward_share"), epoch);
        }
        // At the end (an interrupted run's partial epoch 3): only what was
        // not written yet.
        log.profile(&profile);
        log.finish().unwrap();
        let bytes = on_disk(&dir);
        for phase in crate::train::profile::PHASES {
            // A run on one device has no replicas' meeting, and no scalar for it.
            let expected = if phase == "sync" { 0 } else { 3 };
            assert_eq!(count(&bytes, &format!("profile/{phase}_share")), expected, "{phase}");
        }
    }
}
