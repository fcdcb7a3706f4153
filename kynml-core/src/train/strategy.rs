//! When to stop and when to checkpoint: two small strategies the loop asks
//! at the end of every epoch, as burn-train's `EarlyStoppingStrategy` and
//! `CheckpointingStrategy` are. The spec's `early_stop` and `checkpoint`
//! build the built-in ones ([`EarlyStopper`], [`EveryEpochs`]); a program
//! that embeds KynML can hand its own to
//! [`TrainSettings`](super::TrainSettings).

use crate::spec::types::EarlyStop;
use crate::train::resume::StopState;

/// Whether training goes on after an epoch, and which epoch's weights are
/// the best (the run returns those, and checkpoints keep them).
pub trait EarlyStopping: std::fmt::Debug + Send + Sync {
    /// The epoch's verdict from its validation loss; [`Verdict::Improved`]
    /// keeps its weights as the best.
    fn observe(&mut self, epoch: usize, val_loss: f64) -> Verdict;
    /// The epoch (1-based) whose weights are the best so far.
    fn best_epoch(&self) -> Option<usize>;
    /// Its progress, saved in checkpoints.
    fn state(&self) -> StopState;
    /// Continues from progress [`state`](Self::state) saved.
    fn restore(&mut self, saved: &StopState);
    /// A copy, progress included.
    fn boxed(&self) -> Box<dyn EarlyStopping>;
    /// Whether its progress has already used up its patience: a run that
    /// stopped early and is resumed under it stops again at once. By
    /// default true: such a run stays stopped. (The spec's own early
    /// stopping is asked of any resumed run: a patience lowered below the
    /// epochs it has waited stops the run there.)
    fn exhausted(&self) -> bool {
        true
    }
}

impl Clone for Box<dyn EarlyStopping> {
    fn clone(&self) -> Self {
        self.boxed()
    }
}

/// When to write a checkpoint, asked after every epoch (and after early
/// stopping has had its say, so that a resume starts the next epoch).
pub trait Checkpointing: std::fmt::Debug + Send + Sync {
    /// Whether to write one after epoch `epoch` (1-based) of `last`;
    /// `stopping` when training stops early after it.
    fn due(&self, epoch: usize, last: usize, stopping: bool) -> bool;
}

/// The spec's `checkpoint(every_n=N, ...)`: every N epochs, after the last
/// one, and when training stops early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EveryEpochs {
    /// N, at least 1.
    pub n: usize,
}

impl Checkpointing for EveryEpochs {
    fn due(&self, epoch: usize, last: usize, stopping: bool) -> bool {
        epoch.is_multiple_of(self.n.max(1)) || epoch == last || stopping
    }
}

/// Tracks the best validation loss; says when to keep the weights and when
/// to stop.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EarlyStopper {
    patience: usize,
    min_delta: f64,
    /// The lowest validation loss so far; infinite until an epoch improves.
    pub best: f64,
    /// The epoch (1-based) that reached `best`; `None` until an epoch improves.
    pub best_epoch: Option<usize>,
    /// Epochs in a row without improvement; training stops when this reaches the patience.
    pub bad_epochs: usize,
}

/// What [`EarlyStopper::observe`] says about an epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// A new best: keep these weights.
    Improved,
    /// Not better, but patience remains.
    Wait,
    /// Patience exhausted.
    Stop,
}

impl EarlyStopper {
    /// A stopper with the spec's `patience` and `min_delta`, before any epoch.
    pub fn new(config: &EarlyStop) -> Self {
        EarlyStopper {
            patience: config.patience,
            min_delta: config.min_delta,
            best: f64::INFINITY,
            best_epoch: None,
            bad_epochs: 0,
        }
    }

    /// An epoch improves when its loss is below `best - min_delta`, as in
    /// Keras' and Lightning's early stopping.
    pub fn observe(&mut self, epoch: usize, val_loss: f64) -> Verdict {
        if val_loss < self.best - self.min_delta {
            self.best = val_loss;
            self.best_epoch = Some(epoch);
            self.bad_epochs = 0;
            Verdict::Improved
        } else {
            self.bad_epochs += 1;
            if self.bad_epochs >= self.patience {
                Verdict::Stop
            } else {
                Verdict::Wait
            }
        }
    }
}

impl EarlyStopping for EarlyStopper {
    fn observe(&mut self, epoch: usize, val_loss: f64) -> Verdict {
        EarlyStopper::observe(self, epoch, val_loss)
    }

    fn best_epoch(&self) -> Option<usize> {
        self.best_epoch
    }

    fn state(&self) -> StopState {
        StopState { best: self.best, best_epoch: self.best_epoch, bad_epochs: self.bad_epochs }
    }

    /// Its own patience and threshold stay.
    fn restore(&mut self, saved: &StopState) {
        (self.best, self.best_epoch, self.bad_epochs) = (saved.best, saved.best_epoch, saved.bad_epochs);
    }

    fn exhausted(&self) -> bool {
        self.bad_epochs >= self.patience
    }

    fn boxed(&self) -> Box<dyn EarlyStopping> {
        Box::new(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_n_epochs_and_the_last_and_a_stop() {
        let rule = EveryEpochs { n: 3 };
        let due: Vec<usize> = (1..=10).filter(|&e| rule.due(e, 10, false)).collect();
        assert_eq!(due, [3, 6, 9, 10]);
        assert!(rule.due(4, 10, true), "stopping early writes where it stops");
    }

    #[test]
    fn the_stoppers_progress_round_trips_and_keeps_its_rule() {
        let mut s = EarlyStopper::new(&EarlyStop { patience: 3, min_delta: 0.0 });
        s.observe(1, 1.0);
        s.observe(2, 2.0);
        let saved = EarlyStopping::state(&s);
        let mut fresh: Box<dyn EarlyStopping> = Box::new(EarlyStopper::new(&EarlyStop { patience: 3, min_delta: 0.0 }));
        fresh.restore(&saved);
        assert_eq!(fresh.state(), saved);
        assert_eq!(fresh.observe(3, 1.5), Verdict::Wait);
        assert_eq!(fresh.observe(4, 1.5), Verdict::Stop, "two bad epochs saved, a third stops at patience 3");
        assert_eq!(fresh.best_epoch(), Some(1));
    }

    #[test]
    fn stops_after_patience_epochs_without_improvement() {
        let mut s = EarlyStopper::new(&EarlyStop { patience: 2, min_delta: 0.0 });
        assert_eq!(s.observe(0, 1.0), Verdict::Improved);
        assert_eq!(s.observe(1, 0.5), Verdict::Improved);
        assert_eq!(s.observe(2, 0.6), Verdict::Wait);
        assert_eq!(s.observe(3, 0.5), Verdict::Stop);
        assert_eq!(s.best_epoch, Some(1));
    }

    #[test]
    fn min_delta_ignores_tiny_improvements() {
        let mut s = EarlyStopper::new(&EarlyStop { patience: 5, min_delta: 0.1 });
        s.observe(0, 1.0);
        assert_eq!(s.observe(1, 0.95), Verdict::Wait);
        assert_eq!(s.observe(2, 0.85), Verdict::Improved);
    }

    #[test]
    fn nan_loss_never_counts_as_improvement() {
        let mut s = EarlyStopper::new(&EarlyStop { patience: 1, min_delta: 0.0 });
        assert_eq!(s.observe(0, f64::NAN), Verdict::Stop);
        assert_eq!(s.best_epoch, None);
    }
}
