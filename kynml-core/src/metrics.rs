//! Evaluation metrics over plain slices: regression (`mae`, `mse`, `rmse`,
//! `r2`) and classification (`accuracy` and macro-averaged `precision`,
//! `recall`, `f1`).
//!
//! Inputs are what a model produces, `f32` predictions or class indices;
//! every sum runs in `f64`, so a metric over millions of rows does not drift.
//! The definitions follow scikit-learn's, edge cases included, so numbers can
//! be compared with results users already have.
//!
//! ```
//! # use kynml_core::metrics;
//! let pred = [2.5, 0.0, 2.0, 8.0];
//! let target = [3.0, -0.5, 2.0, 7.0];
//! assert_eq!(metrics::mae(&pred, &target), 0.5);
//! ```
//!
//! Every function panics if its two slices differ in length, and returns NaN
//! when they are empty: there is no value to report, and NaN shows it rather
//! than a plausible-looking zero.

/// Mean absolute error.
pub fn mae(pred: &[f32], target: &[f32]) -> f64 {
    mean_of(pred, target, |d| d.abs())
}

/// Mean squared error.
pub fn mse(pred: &[f32], target: &[f32]) -> f64 {
    mean_of(pred, target, |d| d * d)
}

/// Root of the mean squared error, in the target's own unit.
pub fn rmse(pred: &[f32], target: &[f32]) -> f64 {
    mse(pred, target).sqrt()
}

/// Coefficient of determination, `1 - SS_res / SS_tot`: 1 is perfect, 0 is
/// no better than predicting the mean, and it can be negative.
///
/// A constant target has `SS_tot = 0`, where the ratio is undefined; as in
/// scikit-learn (`force_finite=True`), the score is then 1.0 if every
/// prediction is exact and 0.0 otherwise, so it stays finite and comparable.
/// Fewer than two rows leave it undefined: NaN, as scikit-learn gives.
pub fn r2(pred: &[f32], target: &[f32]) -> f64 {
    check_lengths(pred.len(), target.len());
    if target.len() < 2 {
        return f64::NAN;
    }
    let mean = target.iter().map(|&t| f64::from(t)).sum::<f64>() / target.len() as f64;
    let ss_tot: f64 = target.iter().map(|&t| (f64::from(t) - mean).powi(2)).sum();
    let ss_res: f64 = pred.iter().zip(target).map(|(&p, &t)| (f64::from(p) - f64::from(t)).powi(2)).sum();
    if ss_tot == 0.0 {
        return if ss_res == 0.0 { 1.0 } else { 0.0 };
    }
    1.0 - ss_res / ss_tot
}

/// Fraction of predictions equal to the target.
pub fn accuracy(pred: &[u32], target: &[u32]) -> f64 {
    check_lengths(pred.len(), target.len());
    if target.is_empty() {
        return f64::NAN;
    }
    let right = pred.iter().zip(target).filter(|(p, t)| p == t).count();
    right as f64 / target.len() as f64
}

/// Macro-averaged precision: the unweighted mean over classes of
/// `tp / (tp + fp)`. See [`f1_macro`] for which classes count and for the
/// zero-division rule.
pub fn precision_macro(pred: &[u32], target: &[u32], n_classes: usize) -> f64 {
    macro_average(pred, target, n_classes, |c| ratio(c.tp, c.tp + c.fp))
}

/// Macro-averaged recall: the unweighted mean over classes of
/// `tp / (tp + fn)`. See [`f1_macro`].
pub fn recall_macro(pred: &[u32], target: &[u32], n_classes: usize) -> f64 {
    macro_average(pred, target, n_classes, |c| ratio(c.tp, c.tp + c.fn_))
}

/// Macro-averaged F1: the unweighted mean of each class's F1,
/// `2·tp / (2·tp + fp + fn)` (not the F1 of the averaged precision and
/// recall), as scikit-learn's `f1_score(average="macro")`.
///
/// As there, the average runs over the classes that occur in `target` or in
/// `pred`; a class in `0..n_classes` that occurs in neither (say, a rare class
/// missing from a small validation split) is left out rather than counted as
/// 0. A ratio with a zero denominator counts as 0, scikit-learn's
/// `zero_division=0`: a class never predicted has precision 0, a class never
/// present has recall 0.
///
/// # Panics
/// If a class index is not below `n_classes`.
pub fn f1_macro(pred: &[u32], target: &[u32], n_classes: usize) -> f64 {
    macro_average(pred, target, n_classes, |c| ratio(2 * c.tp, 2 * c.tp + c.fp + c.fn_))
}

/// One class's scores, as a row of scikit-learn's `classification_report`
/// (`zero_division=0`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClassScore {
    /// `tp / (tp + fp)`: of the rows predicted as this class, the share that are.
    pub precision: f64,
    /// `tp / (tp + fn)`: of the rows of this class, the share predicted as it.
    pub recall: f64,
    /// `2·tp / (2·tp + fp + fn)`.
    pub f1: f64,
    /// The rows whose target is this class (scikit-learn's `support`).
    pub rows: u64,
    /// The rows predicted as this class (`tp + fp`).
    pub predicted: u64,
}

impl ClassScore {
    /// Whether the class is among the targets or the predictions at all;
    /// one that is not has no score (its zeros are no failure), and the
    /// macro averages leave it out.
    pub fn occurs(&self) -> bool {
        self.rows > 0 || self.predicted > 0
    }
}

/// Each class's precision, recall, F1 and row count, in class order; a
/// ratio with a zero denominator is 0, as in [`f1_macro`] (which averages
/// these F1s over the classes that occur).
///
/// # Panics
/// If the slices differ in length or a class index is not below `n_classes`.
pub fn per_class(pred: &[u32], target: &[u32], n_classes: usize) -> Vec<ClassScore> {
    class_counts(pred, target, n_classes)
        .iter()
        .map(|c| ClassScore {
            precision: ratio(c.tp, c.tp + c.fp),
            recall: ratio(c.tp, c.tp + c.fn_),
            f1: ratio(2 * c.tp, 2 * c.tp + c.fp + c.fn_),
            rows: c.tp + c.fn_,
            predicted: c.tp + c.fp,
        })
        .collect()
}

/// The confusion matrix, `n_classes × n_classes`: row `t`, column `p`
/// counts the rows of class `t` predicted as `p` (scikit-learn's
/// `confusion_matrix`), so the diagonal holds the right predictions.
///
/// # Panics
/// If the slices differ in length or a class index is not below `n_classes`.
pub fn confusion(pred: &[u32], target: &[u32], n_classes: usize) -> Vec<Vec<u64>> {
    check_lengths(pred.len(), target.len());
    let mut matrix = vec![vec![0u64; n_classes]; n_classes];
    for (&p, &t) in pred.iter().zip(target) {
        let (p, t) = (p as usize, t as usize);
        assert!(p < n_classes && t < n_classes, "class index beyond {n_classes} classes");
        matrix[t][p] += 1;
    }
    matrix
}

fn mean_of(pred: &[f32], target: &[f32], loss: impl Fn(f64) -> f64) -> f64 {
    check_lengths(pred.len(), target.len());
    let total: f64 = pred.iter().zip(target).map(|(&p, &t)| loss(f64::from(p) - f64::from(t))).sum();
    total / target.len() as f64
}

fn check_lengths(pred: usize, target: usize) {
    assert_eq!(pred, target, "{pred} predictions for {target} targets");
}

/// One class's confusion counts.
#[derive(Debug, Clone, Copy, Default)]
struct ClassCounts {
    tp: u64,
    fp: u64,
    fn_: u64,
}

impl ClassCounts {
    fn occurs(&self) -> bool {
        self.tp + self.fp + self.fn_ > 0
    }
}

fn macro_average(pred: &[u32], target: &[u32], n_classes: usize, score: impl Fn(&ClassCounts) -> f64) -> f64 {
    let counts = class_counts(pred, target, n_classes);
    let (sum, classes) =
        counts.iter().filter(|c| c.occurs()).fold((0.0, 0usize), |(sum, n), c| (sum + score(c), n + 1));
    if classes == 0 {
        return f64::NAN;
    }
    sum / classes as f64
}

fn class_counts(pred: &[u32], target: &[u32], n_classes: usize) -> Vec<ClassCounts> {
    check_lengths(pred.len(), target.len());
    let mut counts = vec![ClassCounts::default(); n_classes];
    for (&p, &t) in pred.iter().zip(target) {
        let (p, t) = (p as usize, t as usize);
        assert!(p < n_classes && t < n_classes, "class index beyond {n_classes} classes");
        if p == t {
            counts[p].tp += 1;
        } else {
            counts[p].fp += 1;
            counts[t].fn_ += 1;
        }
    }
    counts
}

fn ratio(numerator: u64, denominator: u64) -> f64 {
    if denominator == 0 {
        0.0
    } else {
        numerator as f64 / denominator as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    // scikit-learn's documentation example.
    const PRED: [f32; 4] = [2.5, 0.0, 2.0, 8.0];
    const TARGET: [f32; 4] = [3.0, -0.5, 2.0, 7.0];

    #[test]
    fn regression_by_hand() {
        // |errors| = 0.5, 0.5, 0, 1 → mean 2 / 4 = 0.5
        assert_eq!(mae(&PRED, &TARGET), 0.5);
        // squares = 0.25, 0.25, 0, 1 → 1.5 / 4 = 0.375
        assert_eq!(mse(&PRED, &TARGET), 0.375);
        assert_eq!(rmse(&PRED, &TARGET), 0.375f64.sqrt());
        // mean target = 11.5 / 4 = 2.875
        // SS_tot = 0.125² + 3.375² + 0.875² + 4.125²
        //        = 0.015625 + 11.390625 + 0.765625 + 17.015625 = 29.1875
        // SS_res = 1.5, r2 = 1 - 1.5 / 29.1875
        assert!(close(r2(&PRED, &TARGET), 1.0 - 1.5 / 29.1875));
        // sklearn.metrics.r2_score gives 0.9486081370449679.
        assert!(close(r2(&PRED, &TARGET), 0.9486081370449679));
    }

    #[test]
    fn r2_of_the_mean_is_zero_and_can_go_negative() {
        let target = [1.0, 2.0, 3.0];
        assert_eq!(r2(&[2.0, 2.0, 2.0], &target), 0.0);
        assert_eq!(r2(&target, &target), 1.0);
        // SS_res = 4 + 0 + 4 = 8, SS_tot = 1 + 0 + 1 = 2 → 1 - 4 = -3
        assert_eq!(r2(&[3.0, 2.0, 1.0], &target), -3.0);
    }

    #[test]
    fn r2_with_a_constant_target() {
        assert_eq!(r2(&[5.0, 5.0], &[5.0, 5.0]), 1.0);
        // One row is no spread at all: undefined, as scikit-learn says.
        assert!(r2(&[5.0], &[5.0]).is_nan() && r2(&[4.0], &[5.0]).is_nan());
        assert_eq!(r2(&[5.0, 6.0], &[5.0, 5.0]), 0.0);
    }

    #[test]
    fn sums_run_in_f64() {
        // Summed in f32, 1e7 + 1 + ... would lose the ones.
        let mut pred = vec![1.0f32; 1_000_001];
        pred[0] = 1.0e7;
        let target = vec![0.0f32; pred.len()];
        assert!(close(mae(&pred, &target), (1.0e7 + 1.0e6) / 1_000_001.0));
    }

    #[test]
    fn empty_inputs_give_nan() {
        assert!(mae(&[], &[]).is_nan());
        assert!(rmse(&[], &[]).is_nan());
        assert!(r2(&[], &[]).is_nan());
        assert!(accuracy(&[], &[]).is_nan());
        assert!(f1_macro(&[], &[], 3).is_nan());
    }

    #[test]
    #[should_panic(expected = "3 predictions for 2 targets")]
    fn length_mismatch_panics() {
        mae(&[1.0, 2.0, 3.0], &[1.0, 2.0]);
    }

    #[test]
    fn classification_by_hand() {
        // scikit-learn's documentation example for precision_recall_fscore_support.
        let target = [0, 1, 2, 0, 1, 2];
        let pred = [0, 2, 1, 0, 0, 1];
        // Right at positions 0 and 3: 2 / 6.
        assert!(close(accuracy(&pred, &target), 1.0 / 3.0));
        // class 0: tp 2 (pos 0, 3), fp 1 (pos 4), fn 0 → P 2/3, R 1, F1 4/5
        // class 1: tp 0, fp 2 (pos 2, 5), fn 2 (pos 1, 4) → P 0, R 0, F1 0
        // class 2: tp 0, fp 1 (pos 1), fn 2 (pos 2, 5)    → P 0, R 0, F1 0
        assert!(close(precision_macro(&pred, &target, 3), 2.0 / 9.0));
        assert!(close(recall_macro(&pred, &target, 3), 1.0 / 3.0));
        assert!(close(f1_macro(&pred, &target, 3), 0.8 / 3.0));
        // sklearn: 0.2222222222222222, 0.3333333333333333, 0.26666666666666666
        assert!(close(precision_macro(&pred, &target, 3), 0.2222222222222222));
        assert!(close(f1_macro(&pred, &target, 3), 0.26666666666666666));
    }

    #[test]
    fn a_class_never_predicted_has_precision_zero() {
        let target = [0, 1, 2, 2];
        let pred = [0, 1, 1, 1];
        // class 0: tp 1, fp 0, fn 0 → P 1,   R 1, F1 1
        // class 1: tp 1, fp 2, fn 0 → P 1/3, R 1, F1 2 / (2 + 2) = 1/2
        // class 2: tp 0, fp 0, fn 2 → P 0/0 := 0, R 0, F1 0
        assert!(close(precision_macro(&pred, &target, 3), (1.0 + 1.0 / 3.0) / 3.0));
        assert!(close(recall_macro(&pred, &target, 3), 2.0 / 3.0));
        assert!(close(f1_macro(&pred, &target, 3), 0.5));
        // sklearn (zero_division=0): 0.4444444444444444, 0.6666666666666666, 0.5
        assert!(close(precision_macro(&pred, &target, 3), 0.4444444444444444));
        assert!(close(accuracy(&pred, &target), 0.5));
    }

    #[test]
    fn a_class_never_present_has_recall_zero() {
        let target = [0, 0, 1];
        let pred = [0, 2, 1];
        // class 0: tp 1, fp 0, fn 1 → P 1, R 1/2, F1 2 / 3
        // class 1: tp 1, fp 0, fn 0 → P 1, R 1,   F1 1
        // class 2: tp 0, fp 1, fn 0 → P 0, R 0/0 := 0, F1 0
        assert!(close(precision_macro(&pred, &target, 3), 2.0 / 3.0));
        assert!(close(recall_macro(&pred, &target, 3), 0.5));
        assert!(close(f1_macro(&pred, &target, 3), 5.0 / 9.0));
        // sklearn (zero_division=0): 0.6666666666666666, 0.5, 0.5555555555555555
        assert!(close(f1_macro(&pred, &target, 3), 0.5555555555555555));
    }

    #[test]
    fn classes_in_neither_slice_are_left_out() {
        let target = [0, 1, 2, 2];
        let pred = [0, 1, 1, 1];
        // Classes 3 and 4 occur nowhere: same averages as over 3 classes.
        assert_eq!(f1_macro(&pred, &target, 5), f1_macro(&pred, &target, 3));
        assert_eq!(precision_macro(&pred, &target, 5), precision_macro(&pred, &target, 3));
        assert_eq!(recall_macro(&pred, &target, 5), recall_macro(&pred, &target, 3));
    }

    #[test]
    fn perfect_predictions_score_one() {
        let y = [2, 0, 1, 1, 0];
        assert_eq!(accuracy(&y, &y), 1.0);
        assert_eq!(precision_macro(&y, &y, 3), 1.0);
        assert_eq!(recall_macro(&y, &y, 3), 1.0);
        assert_eq!(f1_macro(&y, &y, 3), 1.0);
    }

    #[test]
    fn per_class_scores_and_the_confusion_matrix_by_hand() {
        // The example of `classification_by_hand`.
        let target = [0, 1, 2, 0, 1, 2];
        let pred = [0, 2, 1, 0, 0, 1];
        let scores = per_class(&pred, &target, 4);
        let want = [(2.0 / 3.0, 1.0, 0.8, 2), (0.0, 0.0, 0.0, 2), (0.0, 0.0, 0.0, 2), (0.0, 0.0, 0.0, 0)];
        for (got, (p, r, f, rows)) in scores.iter().zip(want) {
            assert!(close(got.precision, p) && close(got.recall, r) && close(got.f1, f), "{got:?}");
            assert_eq!(got.rows, rows);
        }
        // Predicted as each: class 0 three times, 1 twice, 2 once, 3 never (nor a target: no score).
        assert_eq!(scores.iter().map(|s| s.predicted).collect::<Vec<_>>(), [3, 2, 1, 0]);
        assert_eq!(scores.iter().map(ClassScore::occurs).collect::<Vec<_>>(), [true, true, true, false]);
        // The macro F1 is the mean of the occurring classes' F1s.
        let occurring: Vec<f64> = scores.iter().take(3).map(|s| s.f1).collect();
        assert!(close(f1_macro(&pred, &target, 4), occurring.iter().sum::<f64>() / 3.0));
        // sklearn.metrics.confusion_matrix(target, pred): rows true, columns predicted.
        let m = confusion(&pred, &target, 3);
        assert_eq!(m, vec![vec![2, 0, 0], vec![1, 0, 1], vec![0, 2, 0]]);
        let rows: Vec<u64> = m.iter().map(|r| r.iter().sum()).collect();
        assert_eq!(rows, scores[..3].iter().map(|s| s.rows).collect::<Vec<_>>());
    }

    #[test]
    #[should_panic(expected = "beyond 3 classes")]
    fn class_index_out_of_range_panics() {
        f1_macro(&[3], &[0], 3);
    }
}
