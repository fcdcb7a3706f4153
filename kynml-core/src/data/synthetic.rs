//! Seeded synthetic data shaped for a spec, for measuring speed where the
//! spec's own data is absent or too small (`kynml bench --synthetic ROWS`,
//! `cargo bench`): standard-normal features and a target a model can learn,
//! classes for a classification loss, a number for a regression loss.

use std::path::PathBuf;

use crate::data::{DataError, Dataset, Table, Targets};
use crate::rng::SplitMix64;
use crate::spec::types::{Layer, Loss, Spec};

/// `rows` rows for `spec`'s model: `input` features, and a target that fits
/// its loss and last layer (one class per output unit for `cross_entropy`,
/// two for `bce`, a number otherwise). The same `seed` gives the same data.
pub fn synthetic_for(spec: &Spec, rows: usize, seed: u64) -> Result<Dataset, DataError> {
    let width = spec.model.input.value;
    let loss = spec.train.loss.value;
    let classes = match loss {
        Loss::CrossEntropy => spec
            .model
            .layers
            .iter()
            .rev()
            .find_map(|l| match &l.value {
                Layer::Dense(dense) => Some(dense.units),
                _ => None,
            })
            .unwrap_or(2)
            .max(2),
        Loss::Bce => 2,
        _ => 0,
    };
    let mut rng = SplitMix64::new(seed);
    let mut normal = || {
        let (u, v) = (rng.next_f64().max(1e-12), rng.next_f64());
        ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
    };
    let features: Vec<f32> = (0..rows * width).map(|_| normal()).collect();
    // The target depends on the first few features only, through fixed
    // random directions: a model of any width learns it, so the loss falls
    // as in a real run, and every class is about as common as the others.
    let used = width.min(8);
    let directions: Vec<f32> = (0..classes.max(1) * used).map(|_| normal()).collect();
    let score = |row: &[f32], k: usize| -> f32 {
        row[..used].iter().zip(&directions[k * used..(k + 1) * used]).map(|(x, w)| x * w).sum()
    };
    let targets = if classes == 0 {
        Targets::Regression(features.chunks(width).map(|r| score(r, 0).tanh() + r[0] * 0.5).collect())
    } else {
        let indices = features
            .chunks(width)
            .map(|r| (0..classes).max_by(|&a, &b| score(r, a).total_cmp(&score(r, b))).unwrap_or(0) as u32)
            .collect();
        Targets::Classes { indices, names: (0..classes).map(|k| k.to_string()).collect() }
    };
    let table = Table {
        path: PathBuf::from(format!("synthetic({rows} rows, seed {seed})")),
        feature_names: (0..width).map(|i| format!("f{i}")).collect(),
        target_name: spec.dataset.target.value.clone(),
        features,
        targets,
        categorical: Vec::new(),
        text: None,
    };
    Dataset::from_table(table, spec.dataset.split.value, spec.dataset.normalize, seed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(model: &str, loss: &str) -> Spec {
        let text = format!(
            "dataset D:\n    source = csv(\"d.csv\")\n    target = \"y\"\nmodel M:\n{model}\
             train:\n    model = M\n    data = D\n    loss = {loss}\n    optimizer = adam(lr=0.01)\n    epochs = 1\n"
        );
        crate::spec::parse_spec(&text).expect("a valid spec")
    }

    #[test]
    fn shaped_for_the_model_and_loss_and_seeded() {
        let s = spec("    input 12\n    dense 16 relu\n    dense 5 linear\n", "cross_entropy");
        let a = synthetic_for(&s, 1000, 7).unwrap();
        assert_eq!(a.n_features(), 12);
        assert_eq!(a.class_names().map(<[String]>::len), Some(5));
        assert_eq!(a.train.len() + a.valid.len(), 1000);
        // Every class occurs: the model has something to learn in each output.
        let mut seen = [0usize; 5];
        if let crate::data::Labels::Classes(c) = &a.train.labels {
            c.iter().for_each(|&k| seen[k as usize] += 1);
        }
        assert!(seen.iter().all(|&n| n > 10), "{seen:?}");
        let b = synthetic_for(&s, 1000, 7).unwrap();
        assert_eq!(a.train.features, b.train.features);
        assert_ne!(a.train.features, synthetic_for(&s, 1000, 8).unwrap().train.features);

        let r = synthetic_for(&spec("    input 3\n    dense 1 linear\n", "mse"), 100, 1).unwrap();
        assert_eq!((r.n_features(), r.class_names()), (3, None));
        let b = synthetic_for(&spec("    input 3\n    dense 1 linear\n", "bce"), 100, 1).unwrap();
        assert_eq!(b.class_names().map(<[String]>::len), Some(2));
    }
}
