//! Splitting rows into a training part and a held-out validation part.
//!
//! The rows are shuffled with [`SplitMix64`], so a seed gives the same split
//! on every machine and every build; both parts come back in file order,
//! which keeps them easy to inspect and their memory reads sequential.
//!
//! ```
//! # use kynml_core::data::split_indices;
//! let (train, valid) = split_indices(10, 0.8, 0).unwrap();
//! assert_eq!((train.len(), valid.len()), (8, 2));
//! ```

use crate::rng::SplitMix64;

/// Rows a split needs: one to train on and one to validate on.
pub const MIN_ROWS: usize = 2;

/// Why rows could not be split.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SplitError {
    /// Fewer than [`MIN_ROWS`] rows: one part would be empty.
    #[error("{rows} rows but at least {needed} are needed to hold some out for validation")]
    TooFewRows {
        /// Rows that were given.
        rows: usize,
        /// The fewest rows a split accepts, [`MIN_ROWS`].
        needed: usize,
    },
    /// The training fraction is NaN or outside [0, 1].
    #[error("the training fraction must be between 0 and 1: found {fraction}")]
    BadFraction {
        /// The fraction that was given.
        fraction: f64,
    },
}

/// Shuffles `0..n` with `seed` and returns `(train, valid)`, each sorted.
///
/// The training part has `round(n * train_fraction)` rows, clamped to
/// `1..=n-1` so that neither part is ever empty (a fraction of 1.0 still
/// holds one row out). `train_fraction` must lie in `[0, 1]`.
pub fn split_indices(n: usize, train_fraction: f64, seed: u64) -> Result<(Vec<usize>, Vec<usize>), SplitError> {
    if !(0.0..=1.0).contains(&train_fraction) {
        return Err(SplitError::BadFraction { fraction: train_fraction });
    }
    if n < MIN_ROWS {
        return Err(SplitError::TooFewRows { rows: n, needed: MIN_ROWS });
    }
    let n_train = ((n as f64 * train_fraction).round() as usize).clamp(1, n - 1);

    let mut order: Vec<usize> = (0..n).collect();
    SplitMix64::new(seed).shuffle(&mut order);
    let mut valid = order.split_off(n_train);
    let mut train = order;
    train.sort_unstable();
    valid.sort_unstable();
    Ok((train, valid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_split() {
        assert_eq!(split_indices(150, 0.8, 9), split_indices(150, 0.8, 9));
        assert_ne!(split_indices(150, 0.8, 9), split_indices(150, 0.8, 10));
    }

    #[test]
    fn parts_are_disjoint_and_cover_every_row() {
        let (train, valid) = split_indices(101, 0.7, 5).unwrap();
        assert_eq!(train.len(), 71); // round(70.7)
        assert_eq!(valid.len(), 30);
        let mut all: Vec<usize> = train.iter().chain(&valid).copied().collect();
        all.sort_unstable();
        assert_eq!(all, (0..101).collect::<Vec<_>>());
        assert!(train.windows(2).all(|w| w[0] < w[1]));
        assert!(valid.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn split_is_not_just_the_first_rows() {
        let (train, _) = split_indices(100, 0.5, 0).unwrap();
        assert_ne!(train, (0..50).collect::<Vec<_>>());
    }

    #[test]
    fn train_size_rounds_and_clamps() {
        let sizes = |n, f| {
            let (t, v) = split_indices(n, f, 1).unwrap();
            (t.len(), v.len())
        };
        assert_eq!(sizes(10, 0.25), (3, 7)); // round(2.5) = 3: halves round away from zero
        assert_eq!(sizes(10, 0.0), (1, 9));
        assert_eq!(sizes(10, 1.0), (9, 1));
        assert_eq!(sizes(2, 0.8), (1, 1));
    }

    #[test]
    fn too_few_rows_and_bad_fractions_are_refused() {
        assert_eq!(split_indices(1, 0.8, 0), Err(SplitError::TooFewRows { rows: 1, needed: 2 }));
        assert_eq!(split_indices(0, 0.8, 0), Err(SplitError::TooFewRows { rows: 0, needed: 2 }));
        assert!(matches!(split_indices(10, 1.5, 0), Err(SplitError::BadFraction { .. })));
        assert!(matches!(split_indices(10, -0.1, 0), Err(SplitError::BadFraction { .. })));
        assert!(matches!(split_indices(10, f64::NAN, 0), Err(SplitError::BadFraction { .. })));
    }
}
