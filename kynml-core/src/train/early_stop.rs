//! Early stopping on validation loss.

use crate::spec::types::EarlyStop;

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

#[cfg(test)]
mod tests {
    use super::*;

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
