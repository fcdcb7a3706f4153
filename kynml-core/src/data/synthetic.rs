//! Seeded synthetic data shaped for a spec, for measuring speed where the
//! spec's own data is absent or too small (`kynml bench --synthetic ROWS`,
//! `cargo bench`): standard-normal features (and the dataset's categorical
//! columns, of 12 categories each) and a target a model can learn, classes
//! for a classification loss, a number for a regression loss.

use std::path::PathBuf;

use crate::data::{CategoryCells, DataError, Dataset, Table, Targets, TextCells, TextOptions};
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
    if spec.model.shape.is_tokens() {
        return synthetic_texts(spec, rows, seed, classes);
    }
    let mut rng = SplitMix64::new(seed);
    let mut normal = || {
        let (u, v) = (rng.next_f64().max(1e-12), rng.next_f64());
        ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
    };
    let mut features: Vec<f32> = (0..rows * width).map(|_| normal()).collect();
    // The dataset's categorical columns are the last features: each holds
    // one of CATEGORIES words, drawn evenly, and each word moves the target
    // by its own fixed amount, so the model's embedding has something to learn.
    let named = spec.dataset.categorical.len().min(width);
    let first = width - named;
    let offsets: Vec<f32> = (0..named * CATEGORIES * classes.max(1)).map(|_| normal()).collect();
    let mut picker = SplitMix64::new(seed ^ 0xca7e_9041);
    let mut drawn = vec![0usize; rows * named];
    for (row, picks) in features.chunks_mut(width).zip(drawn.chunks_mut(named.max(1))) {
        for (value, pick) in row[first..].iter_mut().zip(picks.iter_mut()) {
            *pick = picker.below(CATEGORIES as u64) as usize;
            *value = 0.0;
        }
    }
    // The target depends on the first few features only, through fixed
    // random directions: a model of any width learns it, so the loss falls
    // as in a real run, and every class is about as common as the others.
    let used = first.min(8);
    let directions: Vec<f32> = (0..classes.max(1) * used).map(|_| normal()).collect();
    let score_at = |n: usize, row: &[f32], k: usize| -> f32 {
        let plain: f32 = row[..used].iter().zip(&directions[k * used..(k + 1) * used]).map(|(x, w)| x * w).sum();
        let picks = &drawn[n * named..(n + 1) * named];
        let moved: f32 =
            picks.iter().enumerate().map(|(c, &p)| offsets[(c * CATEGORIES + p) * classes.max(1) + k]).sum();
        plain + moved
    };
    let rows_of = || features.chunks(width).enumerate();
    let targets = if classes == 0 {
        let first_value = |r: &[f32]| if used > 0 { r[0] * 0.5 } else { 0.0 };
        Targets::Regression(rows_of().map(|(n, r)| score_at(n, r, 0).tanh() + first_value(r)).collect())
    } else {
        let indices = rows_of()
            .map(|(n, r)| {
                (0..classes).max_by(|&a, &b| score_at(n, r, a).total_cmp(&score_at(n, r, b))).unwrap_or(0) as u32
            })
            .collect();
        Targets::Classes { indices, names: (0..classes).map(|k| k.to_string()).collect() }
    };
    let mut feature_names: Vec<String> = (0..first).map(|i| format!("f{i}")).collect();
    feature_names.extend(spec.dataset.categorical.iter().take(named).map(|c| c.value.clone()));
    let categorical = (spec.dataset.categorical.iter().take(named).enumerate())
        .map(|(c, name)| CategoryCells {
            name: name.value.clone(),
            position: first + c,
            cells: (0..rows).map(|n| format!("{}{}", name.value, drawn[n * named + c])).collect(),
        })
        .collect();
    let table = Table {
        path: PathBuf::from(format!("synthetic({rows} rows, seed {seed})")),
        feature_names,
        target_name: spec.dataset.target.value.clone(),
        features,
        targets,
        categorical,
        text: None,
        sequence: None,
        collapsed: Vec::new(),
        target_collapsed: false,
        lines: Vec::new(),
    };
    Dataset::from_table(table, spec.dataset.split.value, spec.dataset.normalize, seed)
}

/// Categories of each synthetic categorical column.
const CATEGORIES: usize = 12;

/// Words in synthetic texts.
const WORDS: u64 = 1000;

/// `rows` texts for a text model (`input seq L`): between L/2 and L words
/// of a 1000-word vocabulary, and a target from the mean of each word's
/// fixed random score (a class per output, or the number).
fn synthetic_texts(spec: &Spec, rows: usize, seed: u64, classes: usize) -> Result<Dataset, DataError> {
    let length = spec.model.input.value;
    let mut rng = SplitMix64::new(seed);
    let scores: Vec<f64> = (0..WORDS * classes.max(1) as u64).map(|_| rng.normal()).collect();
    let mut cells = Vec::with_capacity(rows);
    let mut values = Vec::with_capacity(rows);
    for _ in 0..rows {
        let n = length.div_ceil(2) + rng.below(length as u64 / 2 + 1) as usize;
        let words: Vec<u64> = (0..n).map(|_| rng.below(WORDS)).collect();
        let score = |k: usize| words.iter().map(|&w| scores[k * WORDS as usize + w as usize]).sum::<f64>() / n as f64;
        values.push(if classes == 0 {
            score(0) as f32
        } else {
            (0..classes).max_by(|&a, &b| score(a).total_cmp(&score(b))).unwrap_or(0) as f32
        });
        cells.push(words.iter().map(|w| format!("w{w}")).collect::<Vec<_>>().join(" "));
    }
    let targets = if classes == 0 {
        Targets::Regression(values)
    } else {
        let indices = values.iter().map(|&v| v as u32).collect();
        Targets::Classes { indices, names: (0..classes).map(|k| k.to_string()).collect() }
    };
    // The spec's column and its `vocab` limit, as training reads its texts:
    // the embedding measured is the one training builds.
    let column = spec.dataset.tokens.as_ref().map_or_else(|| "text".to_owned(), |t| t.value.clone());
    let options = TextOptions { column, length, vocab_limit: spec.dataset.vocab.as_ref().map(|v| v.value) };
    let feature_names = (0..length).map(|i| format!("{}[{i}]", options.column)).collect();
    let table = Table {
        path: PathBuf::from(format!("synthetic({rows} texts, seed {seed})")),
        feature_names,
        target_name: spec.dataset.target.value.clone(),
        features: vec![0.0; rows * length],
        targets,
        categorical: Vec::new(),
        text: Some(TextCells { options, cells }),
        sequence: None,
        collapsed: Vec::new(),
        target_collapsed: false,
        lines: Vec::new(),
    };
    Dataset::from_table(table, spec.dataset.split.value, false, seed)
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

    /// The dataset's categorical columns are the last features, each of 12
    /// categories, and the model binds to them (`bench --synthetic` on a
    /// model with `embedding` was refused).
    #[test]
    fn categorical_columns_are_made_for_an_embedding() {
        let text = "dataset D:\n    source = csv(\"d.csv\")\n    target = \"y\"\n    categorical = [city, day]\n\
                    model M:\n    input 4\n    embedding 3\n    dense 8 relu\n    dense 1 linear\n\
                    train:\n    model = M\n    data = D\n    loss = mse\n    epochs = 1\n";
        let mut s = crate::spec::parse_spec(text).expect("a valid spec");
        let a = synthetic_for(&s, 600, 3).unwrap();
        assert_eq!(a.info.feature_names, ["f0", "f1", "city", "day"]);
        let vocab: Vec<(usize, usize)> = a.info.categories.iter().map(|v| (v.position, v.size())).collect();
        // 12 categories and the reserved unseen one.
        assert_eq!(vocab, [(2, 13), (3, 13)]);
        s.model.bind(&a.info).expect("the model binds to the synthetic columns");
        let b = synthetic_for(&s, 600, 3).unwrap();
        assert_eq!(a.train.features, b.train.features, "seeded");
        // The categories move the target: the mean target of one city's
        // rows differs from another's by more than the plain features' noise.
        let crate::data::Labels::Values(y) = &a.train.labels else { panic!("regression") };
        let mut sums = [(0.0f64, 0usize); 13];
        for (row, &t) in a.train.features.chunks(4).zip(y) {
            let s = &mut sums[row[2] as usize];
            (s.0, s.1) = (s.0 + f64::from(t), s.1 + 1);
        }
        let means: Vec<f64> = sums.iter().filter(|s| s.1 > 0).map(|s| s.0 / s.1 as f64).collect();
        assert_eq!(means.len(), 12, "every city occurs");
        let spread = means.iter().cloned().fold(f64::MIN, f64::max) - means.iter().cloned().fold(f64::MAX, f64::min);
        assert!(spread > 0.3, "{means:?}");
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

    #[test]
    fn texts_for_a_text_model() {
        let s = spec("    input seq 10\n    embedding 4\n    global_avgpool\n    dense 3 linear\n", "cross_entropy");
        let t = synthetic_for(&s, 300, 2).unwrap();
        let tokens = t.info.tokens.as_ref().expect("a vocabulary");
        assert_eq!((t.n_features(), tokens.length), (10, 10));
        // Texts of 5 to 10 words: the first five positions always hold a word.
        for row in t.train.features.chunks(10) {
            assert!(row[..5].iter().all(|&id| id >= 2.0), "{row:?}");
        }
        assert_eq!(t.class_names().map(<[String]>::len), Some(3));
    }

    /// The dataset's `vocab` limit and text column hold for synthetic texts
    /// too (`bench --synthetic` measured an embedding of every word).
    #[test]
    fn synthetic_texts_keep_the_vocab_limit_and_the_column() {
        let model = "    input seq 10\n    embedding 4\n    global_avgpool\n    dense 3 linear\n";
        let mut s = spec(model, "cross_entropy");
        let unlimited = synthetic_for(&s, 300, 2).unwrap();
        assert!(unlimited.info.tokens.as_ref().unwrap().size() > 500);
        s.dataset.tokens = Some(crate::spec::types::Spanned { value: "review".into(), span: Default::default() });
        s.dataset.vocab = Some(crate::spec::types::Spanned { value: 10, span: Default::default() });
        let t = synthetic_for(&s, 300, 2).unwrap();
        let tokens = t.info.tokens.as_ref().unwrap();
        // The 10 most frequent words, padding and the unseen index.
        assert_eq!((tokens.size(), tokens.column.as_str()), (12, "review"));
    }
}
