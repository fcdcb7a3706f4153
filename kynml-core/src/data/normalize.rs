//! Standardizing features: `(x - mean) / std`, per column.
//!
//! The statistics come from the training rows only, so nothing about the
//! validation rows leaks into training. A [`Normalizer`] is saved with the run
//! (inside [`DataInfo`]) so that inference applies exactly the same shift and
//! scale to new data.
//!
//! ```
//! # use kynml_core::data::Normalizer;
//! // Two rows of two features, row-major.
//! let train = [1.0, 10.0, 3.0, 10.0];
//! let norm = Normalizer::fit(&train, 2);
//! let mut row = [2.0, 10.0];
//! norm.apply(&mut row);
//! assert_eq!(row, [0.0, 0.0]);
//! ```
//!
//! [`DataInfo`]: crate::data::DataInfo

/// Per-feature mean and population standard deviation.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Normalizer {
    /// Mean of each feature over the training rows.
    pub mean: Vec<f32>,
    /// Never 0: a constant feature gets 1, so it becomes 0 rather than NaN.
    pub std: Vec<f32>,
}

impl Normalizer {
    /// Fits on `features`, a row-major matrix with `n_features` columns.
    /// Sums run in f64, so 50k rows lose no precision. With no rows at all the
    /// normalizer is the identity.
    ///
    /// # Panics
    /// If `n_features` is 0 or does not divide `features.len()`.
    pub fn fit(features: &[f32], n_features: usize) -> Normalizer {
        let n_rows = check_shape(features, n_features);
        if n_rows == 0 {
            return Normalizer { mean: vec![0.0; n_features], std: vec![1.0; n_features] };
        }

        let mut sum = vec![0.0f64; n_features];
        for row in features.chunks_exact(n_features) {
            for (s, &x) in sum.iter_mut().zip(row) {
                *s += f64::from(x);
            }
        }
        let mean: Vec<f64> = sum.iter().map(|s| s / n_rows as f64).collect();

        // Two passes rather than E[x²] - E[x]²: the latter cancels badly for
        // features with a large offset, such as years or prices.
        let mut squares = vec![0.0f64; n_features];
        for row in features.chunks_exact(n_features) {
            for ((s, &x), m) in squares.iter_mut().zip(row).zip(&mean) {
                let d = f64::from(x) - m;
                *s += d * d;
            }
        }
        // A column is constant when all its values are one: its f64 mean
        // can still differ from that value by a rounding error, and so give
        // it a spread of about 1e-17 of its size. Any other column keeps its
        // spread, however small beside its size (numpy's `std()` on the same
        // values; see [`coarse_columns`](Self::coarse_columns)).
        let first = &features[..n_features];
        let constant: Vec<bool> =
            (0..n_features).map(|c| features.iter().skip(c).step_by(n_features).all(|&x| x == first[c])).collect();
        let std = squares
            .iter()
            .zip(&constant)
            .map(|(s, &constant)| {
                let std = (s / n_rows as f64).sqrt() as f32;
                if constant || std == 0.0 {
                    1.0
                } else {
                    std
                }
            })
            .collect();
        Normalizer { mean: mean.iter().map(|&m| m as f32).collect(), std }
    }

    /// The columns whose spread is within eight steps of a 32-bit float at
    /// their size (values around 1e6 varying by 0.05, where the floats step
    /// by 0.0625): read as 32-bit floats, as training reads every number,
    /// they keep little of their variation. Subtracting an offset in the
    /// data keeps it.
    pub fn coarse_columns(&self) -> Vec<usize> {
        let step =
            |m: f32| if m == 0.0 || !m.is_finite() { 0.0 } else { f32::from_bits(m.abs().to_bits() + 1) - m.abs() };
        (0..self.mean.len()).filter(|&c| self.std[c] != 1.0 && self.std[c] < 8.0 * step(self.mean[c])).collect()
    }

    /// Fits on a sequence model's `features`: rows of `length` positions
    /// of `channels` values each, NaN where a sequence is padded. Each value
    /// of a position gets the mean and spread of its column over every
    /// position present, so a value is standardized alike wherever it
    /// falls; padding stays NaN under [`apply`](Self::apply).
    ///
    /// # Panics
    /// If `length * channels` is 0 or does not divide `features.len()`.
    pub fn fit_sequence(features: &[f32], length: usize, channels: usize) -> Normalizer {
        check_shape(features, length * channels);
        let fitted: Vec<Normalizer> = (0..channels)
            .map(|c| {
                let present: Vec<f32> =
                    features.iter().skip(c).step_by(channels).copied().filter(|v| !v.is_nan()).collect();
                Normalizer::fit(&present, 1)
            })
            .collect();
        let each = |f: fn(&Normalizer) -> f32| -> Vec<f32> { (0..length).flat_map(|_| fitted.iter().map(f)).collect() };
        Normalizer { mean: each(|n| n.mean[0]), std: each(|n| n.std[0]) }
    }

    /// The number of features it was fitted on.
    pub fn n_features(&self) -> usize {
        self.mean.len()
    }

    /// Standardizes `features` in place: any number of rows, row-major.
    ///
    /// # Panics
    /// If the row width does not match the one the normalizer was fitted on.
    pub fn apply(&self, features: &mut [f32]) {
        check_shape(features, self.n_features());
        for row in features.chunks_exact_mut(self.n_features()) {
            for ((x, m), s) in row.iter_mut().zip(&self.mean).zip(&self.std) {
                *x = (*x - m) / s;
            }
        }
    }
}

/// Returns the number of rows.
fn check_shape(features: &[f32], n_features: usize) -> usize {
    assert!(n_features > 0, "a feature matrix needs at least one column");
    assert!(
        features.len().is_multiple_of(n_features),
        "{} values do not make whole rows of {n_features} features",
        features.len()
    );
    features.len() / n_features
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fits_population_statistics() {
        // Column 0: 1, 2, 3, 4 → mean 2.5, deviations ±1.5, ±0.5,
        //   variance (2.25 + 0.25 + 0.25 + 2.25) / 4 = 1.25, std √1.25.
        // Column 1: 10, 10, 20, 20 → mean 15, variance 25, std 5.
        let x = [1.0, 10.0, 2.0, 10.0, 3.0, 20.0, 4.0, 20.0];
        let n = Normalizer::fit(&x, 2);
        assert_eq!(n.mean, vec![2.5, 15.0]);
        assert!((n.std[0] - 1.25f32.sqrt()).abs() < 1e-6);
        assert_eq!(n.std[1], 5.0);
    }

    #[test]
    fn standardized_training_data_has_mean_0_and_std_1() {
        let x: Vec<f32> = (0..300).map(|i| ((i * 37) % 101) as f32 * 0.5 + 1000.0).collect();
        let n = Normalizer::fit(&x, 3);
        let mut y = x.clone();
        n.apply(&mut y);
        let again = Normalizer::fit(&y, 3);
        for (m, s) in again.mean.iter().zip(&again.std) {
            assert!(m.abs() < 1e-4, "mean {m}");
            assert!((s - 1.0).abs() < 1e-4, "std {s}");
        }
    }

    #[test]
    fn constant_feature_gets_std_1() {
        let x = [7.0, 1.0, 7.0, 2.0, 7.0, 3.0];
        let n = Normalizer::fit(&x, 2);
        assert_eq!(n.std[0], 1.0);
        let mut row = [7.0, 2.0];
        n.apply(&mut row);
        assert_eq!(row, [0.0, 0.0]);

        // 0.1 is not exact in binary; the f64 sums must still see no spread.
        let x = vec![0.1f32; 999];
        assert_eq!(Normalizer::fit(&x, 1).std, vec![1.0]);
        assert!(Normalizer::fit(&x, 1).coarse_columns().is_empty());
    }

    /// A large offset with a small spread (timestamps, identifiers): the
    /// spread is kept as numpy computes it on the same values, not taken
    /// for a constant, and the column is named as coarse.
    #[test]
    fn a_small_spread_on_a_large_offset_is_kept_and_named_coarse() {
        let x: Vec<f32> = (0..1000).flat_map(|i| [1e6 + (i % 3) as f32 * 0.0625, i as f32]).collect();
        let n = Normalizer::fit(&x, 2);
        let column: Vec<f64> = x.iter().step_by(2).map(|&v| f64::from(v)).collect();
        let mean = column.iter().sum::<f64>() / 1000.0;
        let numpy = (column.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / 1000.0).sqrt();
        assert!((f64::from(n.std[0]) - numpy).abs() < 1e-6 * numpy, "{} against {numpy}", n.std[0]);
        assert_eq!(n.coarse_columns(), [0]);
        // A large constant is constant, not coarse.
        let n = Normalizer::fit(&[3e9, 1.0, 3e9, 2.0], 2);
        assert_eq!((n.std[0], n.coarse_columns()), (1.0, vec![]));
    }

    #[test]
    fn no_rows_gives_the_identity() {
        let n = Normalizer::fit(&[], 3);
        assert_eq!(n.mean, vec![0.0; 3]);
        assert_eq!(n.std, vec![1.0; 3]);
    }

    #[test]
    fn round_trips_through_json() {
        let n = Normalizer { mean: vec![1.5, -2.0], std: vec![0.25, 3.0] };
        let text = serde_json::to_string(&n).unwrap();
        assert_eq!(serde_json::from_str::<Normalizer>(&text).unwrap(), n);
    }

    #[test]
    #[should_panic(expected = "whole rows")]
    fn apply_refuses_a_partial_row() {
        Normalizer::fit(&[1.0, 2.0], 2).apply(&mut [1.0, 2.0, 3.0]);
    }
}
