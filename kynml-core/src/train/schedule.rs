//! Learning rate per epoch: an optional linear warmup, then the schedule.
//! Closed forms, so that a resumed run lands on exactly the same rates.

use crate::spec::types::{Scheduler, SchedulerKind};

/// The learning rate for `epoch` (0-based).
pub fn lr_at(base_lr: f64, scheduler: Option<&Scheduler>, epoch: usize) -> f64 {
    let Some(s) = scheduler else { return base_lr };
    if epoch < s.warmup {
        // Linear from base/warmup up to base over the warmup epochs.
        return base_lr * (epoch + 1) as f64 / s.warmup as f64;
    }
    let t = (epoch - s.warmup) as f64;
    match s.kind {
        // PyTorch's CosineAnnealingLR closed form.
        SchedulerKind::Cosine { t_max, eta_min } => {
            eta_min + (base_lr - eta_min) * (1.0 + (std::f64::consts::PI * t / t_max as f64).cos()) / 2.0
        }
        SchedulerKind::Step { step_size, gamma } => base_lr * gamma.powi(((epoch - s.warmup) / step_size) as i32),
        SchedulerKind::Exponential { gamma } => base_lr * gamma.powf(t),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sched(kind: SchedulerKind, warmup: usize) -> Scheduler {
        Scheduler { kind, warmup }
    }

    #[test]
    fn no_scheduler_is_constant() {
        assert_eq!(lr_at(0.1, None, 57), 0.1);
    }

    #[test]
    fn cosine_starts_at_lr_halves_midway_and_ends_at_eta_min() {
        let s = sched(SchedulerKind::Cosine { t_max: 10, eta_min: 0.001 }, 0);
        assert!((lr_at(0.1, Some(&s), 0) - 0.1).abs() < 1e-12);
        assert!((lr_at(0.1, Some(&s), 5) - (0.001 + 0.099 / 2.0)).abs() < 1e-12);
        assert!((lr_at(0.1, Some(&s), 10) - 0.001).abs() < 1e-12);
    }

    #[test]
    fn step_decays_every_step_size_epochs() {
        let s = sched(SchedulerKind::Step { step_size: 3, gamma: 0.5 }, 0);
        let lrs: Vec<f64> = (0..7).map(|e| lr_at(1.0, Some(&s), e)).collect();
        assert_eq!(lrs, vec![1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.25]);
    }

    #[test]
    fn exponential_multiplies_by_gamma_each_epoch() {
        let s = sched(SchedulerKind::Exponential { gamma: 0.9 }, 0);
        assert!((lr_at(1.0, Some(&s), 2) - 0.81).abs() < 1e-12);
    }

    #[test]
    fn warmup_ramps_linearly_then_hands_over_to_the_schedule() {
        let s = sched(SchedulerKind::Exponential { gamma: 0.5 }, 4);
        let lrs: Vec<f64> = (0..6).map(|e| lr_at(1.0, Some(&s), e)).collect();
        // The schedule's own first epoch (t = 0) runs at the base rate.
        assert_eq!(lrs, vec![0.25, 0.5, 0.75, 1.0, 1.0, 0.5]);
    }
}
