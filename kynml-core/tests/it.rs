//! Integration tests for the engine: real datasets reach sane quality, and
//! the wgpu backend (lavapipe in CI) agrees with the CPU backend.

use std::path::{Path, PathBuf};

use kynml_backend::{select, Device, DeviceChoice};
use kynml_core::plan::{Overrides, SpecFile};
use kynml_core::train::{train, TrainSettings};

mod common;
use common::*;

fn train_example(rel: &str) -> std::collections::BTreeMap<String, f64> {
    let mut file = SpecFile::load(&example(rel)).unwrap();
    let data = file.load_data().unwrap();
    let device = select(DeviceChoice::Cpu).unwrap();
    train(&file.spec, &data, &device, &TrainSettings::default(), &mut |_| {}).unwrap().final_metrics
}

#[test]
fn iris_reaches_high_accuracy_on_held_out_rows() {
    let metrics = train_example("iris/iris.kyn");
    assert!(metrics["accuracy"] >= 0.9, "{metrics:?}");
}

#[test]
fn shapes_cnn_example_classifies_images() {
    let metrics = train_example("shapes/shapes.kyn");
    assert!(metrics["accuracy"] >= 0.9, "{metrics:?}");
}

#[test]
fn diabetes_rmse_is_well_below_the_target_spread() {
    let mut file = SpecFile::load(&example("diabetes/diabetes.kyn")).unwrap();
    let data = file.load_data().unwrap();
    let kynml_core::data::Labels::Values(y) = &data.valid.labels else { panic!("regression") };
    let mean = y.iter().map(|&v| v as f64).sum::<f64>() / y.len() as f64;
    let std = (y.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / y.len() as f64).sqrt();
    let metrics = train_example("diabetes/diabetes.kyn");
    // A constant predictor scores rmse = std; a useful model is clearly below.
    assert!(metrics["rmse"] < 0.85 * std, "rmse {} vs std {std}: {metrics:?}", metrics["rmse"]);
    assert!(metrics["r2"] > 0.25, "{metrics:?}");
}

#[test]
fn rentals_example_learns_from_its_categorical_columns() {
    // The demand is mostly the city's, the weekday's and the weather's:
    // the temperature and humidity alone explain little of it.
    let metrics = train_example("rentals/rentals.kyn");
    assert!(metrics["r2"] > 0.9 && metrics["mae"] < 25.0, "{metrics:?}");
}

#[test]
fn reviews_example_reads_the_sentiment_of_texts() {
    let metrics = train_example("reviews/reviews.kyn");
    assert!(metrics["accuracy"] >= 0.8, "{metrics:?}");
}

#[test]
fn reviews_transformer_example_reads_word_order_better_than_the_mean_of_words() {
    // A "not" turns the opinion after it around: the mean of words cannot
    // tell which; the transformers can. Seed 5 gave 0.924 against 0.869.
    let words = train_example("reviews/reviews.kyn");
    let transformer = train_example("reviews/reviews_transformer.kyn");
    assert!(transformer["accuracy"] >= 0.9, "{transformer:?}");
    assert!(transformer["accuracy"] >= words["accuracy"] + 0.03, "{transformer:?} against {words:?}");
}

#[test]
fn gestures_example_classifies_sequences_of_points() {
    // Four classes: chance is 0.25. The spec's seed gave 0.80.
    let metrics = train_example("gestures/gestures.kyn");
    assert!(metrics["accuracy"] >= 0.7, "{metrics:?}");
}

#[test]
fn wine_classifies_well() {
    let metrics = train_example("wine/wine.kyn");
    assert!(metrics["accuracy"] >= 0.9, "{metrics:?}");
}

#[test]
fn users_deepnet_spec_has_pytorchs_parameter_count() {
    let file = SpecFile::load(&example("deepnet/deepnet.kyn")).unwrap();
    let summary = kynml_core::model::summarize(&file.spec.model);
    assert_eq!(summary.total_params, 215_425);
}

/// A sample's forward multiply-adds, counted by hand: DeepNet's four
/// products; the CNN's convolutions at every output position (28x28x16x9,
/// then 14x14x32x16x9) and its two dense layers; the transformer's blocks
/// (4 L D^2 projections, 2 L^2 D scores and weighted sums, 2 L D F
/// feed-forward, with L = 64, D = 128, F = 512) and its last layer.
#[test]
fn the_examples_multiply_adds_are_counted_as_by_hand() {
    let count = |name: &str| {
        let file = SpecFile::load(&example(name)).unwrap();
        kynml_core::model::summarize(&file.spec.model).multiply_adds
    };
    assert_eq!(count("deepnet/deepnet.kyn"), 128 * 512 + 512 * 256 + 256 * 64 + 64);
    assert_eq!(count("cnn28/cnn28.kyn"), 28 * 28 * 16 * 9 + 14 * 14 * 32 * 16 * 9 + 1568 * 128 + 128 * 10);
    let (l, d, f) = (64, 128, 512);
    assert_eq!(count("transformer/transformer.kyn"), 2 * (4 * l * d * d + 2 * l * l * d + 2 * l * d * f) + d * 2);
}

#[test]
fn vulkan_computes_the_same_dropout_masks_as_the_host() {
    dropout_masks_match_the_host(
        &select(DeviceChoice::Wgpu).expect("no Vulkan adapter: run scripts/setup-lavapipe.sh"),
    );
}

#[test]
fn wgpu_training_agrees_with_cpu_in_fp32() {
    // Without a Vulkan adapter this fails on purpose: scripts/test.sh
    // installs lavapipe so that the wgpu backend is really exercised.
    let wgpu = select(DeviceChoice::Wgpu).expect("no Vulkan adapter: run scripts/setup-lavapipe.sh");
    let tmp = tempfile::tempdir().unwrap();
    let seed = clock_seed();
    // fp32 with different summation orders: agree to ~1e-3 relative over a
    // few epochs of Adam.
    for (name, layers) in [("dense", DENSE_LAYERS), ("image", IMAGE_LAYERS)] {
        training_agrees_with_cpu(&wgpu, tmp.path(), seed, name, layers, 2e-3);
    }
}

#[test]
fn same_seed_same_result_on_the_cpu() {
    let tmp = tempfile::tempdir().unwrap();
    let path = random_regression_spec(tmp.path(), 11, " dense 16 relu\n dropout 0.2\n dense 1 linear");
    let mut file = SpecFile::load(&path).unwrap();
    let data = file.load_data().unwrap();
    let cpu = select(DeviceChoice::Cpu).unwrap();
    let run = || train(&file.spec, &data, &cpu, &TrainSettings::default(), &mut |_| {}).unwrap();
    let (a, b) = (run(), run());
    let losses = |r: &kynml_core::train::TrainResult| r.history.iter().map(|e| e.val_loss).collect::<Vec<_>>();
    assert_eq!(losses(&a), losses(&b));
}

/// `deterministic = true`: two runs of the same spec on the same device
/// end with the same bits, on the native CPU engine, on Burn's CPU backend
/// and on wgpu, with the layers whose sums have an order (batchnorm over
/// the batch, layernorm, the products) and clipping by the global norm,
/// whose sum scales every gradient. And "what runs" says it holds.
#[test]
fn deterministic_runs_are_bit_identical_on_every_engine() {
    use kynml_core::train::{EngineChoice, EngineKind};
    let wgpu = select(DeviceChoice::Wgpu).expect("no Vulkan adapter: run scripts/setup-lavapipe.sh");
    let cpu = select(DeviceChoice::Cpu).unwrap();
    let seed = clock_seed();
    for (device, engine, kind) in [
        (&cpu, EngineChoice::Auto, EngineKind::Native),
        (&cpu, EngineChoice::Burn, EngineKind::Burn),
        (&wgpu, EngineChoice::Auto, EngineKind::Burn),
    ] {
        deterministic_twice(device, engine, kind, seed);
    }
}

#[test]
fn input_width_mismatch_names_both_numbers_and_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let path = random_regression_spec(tmp.path(), 1, " dense 1 linear");
    let text = std::fs::read_to_string(&path).unwrap().replace("input 6", "input 7");
    std::fs::write(&path, text).unwrap();
    let err = SpecFile::load(&path).unwrap().load_data().unwrap_err();
    let kynml_core::plan::LoadError::Spec { error, source_text, .. } = err else { panic!("{err:?}") };
    let rendered = kynml_core::spec::render("spec.kyn", &source_text, &error.diagnostics);
    assert!(
        rendered.contains("input 7") && rendered.contains("6 feature columns") && rendered.contains("data.csv"),
        "{rendered}"
    );
}

/// Write `spec` next to a copy of an example CSV and return the problems
/// found when its data is read, with the spec text for rendering.
fn fit_problems(example_csv: &str, csv_name: &str, spec: &str) -> (kynml_core::spec::SpecError, String) {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::copy(example(example_csv), tmp.path().join(csv_name)).unwrap();
    let path = tmp.path().join("s.kyn");
    std::fs::write(&path, spec).unwrap();
    match SpecFile::load(&path).unwrap().load_data() {
        Err(kynml_core::plan::LoadError::Spec { error, source_text, .. }) => (error, source_text),
        other => panic!("expected located problems, got {other:?}"),
    }
}

/// A text classifier's spec on `source` (its `text` column), with `layers`
/// (one per line, `input` first), one epoch of batches of 1.
fn text_classifier(source: &str, target: &str, layers: &str) -> String {
    format!(
        "dataset R:\n source = csv(\"{source}\")\n target = \"{target}\"\n tokens = \"text\"\nmodel M:\n{layers}\
         train:\n model = M\n data = R\n loss = cross_entropy\n epochs = 1\n batch = 1\n"
    )
}

/// A text model pads every row to its `input seq` length: a length whose
/// rows cannot fit in the host's memory is refused at `input` before the
/// file is read (it was an out-of-memory kill before anything was printed).
#[test]
fn a_sequence_length_past_the_hosts_memory_is_refused_before_reading() {
    let spec = text_classifier(
        "reviews.csv",
        "sentiment",
        " input seq 268435456\n embedding 2\n global_avgpool\n dense 2 linear\n",
    );
    let (error, source_text) = fit_problems("reviews/reviews.csv", "reviews.csv", &spec);
    let d = &error.diagnostics[0];
    assert_eq!(&source_text[d.span.start..d.span.end], "input seq 268435456");
    assert!(d.message.contains("each of the 4000 rows of") && d.message.contains("available"), "{}", d.message);
    // Rows held in memory (a service's upload) are counted as a file's:
    // they were read, and the process killed, with no word.
    let csv = std::fs::read(example("reviews/reviews.csv")).unwrap();
    let mut file = SpecFile::from_source(Path::new("s.kyn"), spec.clone()).unwrap();
    match file.load_data_from(&csv) {
        Err(kynml_core::plan::LoadError::Spec { error, .. }) => {
            let m = &error.diagnostics[0].message;
            assert!(m.contains("each of the 4000 rows of") && m.contains("available"), "{m}");
        }
        other => panic!("expected the rows refused, got {:?}", other.map(|d| d.train.len())),
    }
}

/// When not even one row fits (a long sequence's attention scores: 2 TiB a
/// row here), the refusal says so, not that the weights do not fit.
#[test]
fn a_row_too_large_for_the_host_is_refused_as_such() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("long.kyn");
    let layers = " input seq 262144\n embedding 8\n attention heads=4\n global_avgpool\n dense 2 linear\n";
    std::fs::write(&path, text_classifier("absent.csv", "y", layers)).unwrap();
    let cpu = select(DeviceChoice::Cpu).unwrap();
    match SpecFile::load(&path).unwrap().check_memory(&cpu) {
        Err(e @ kynml_core::plan::LoadError::DoesNotFit { .. }) => {
            let text = format!("{e:?}");
            assert!(text.contains("one row's activations alone need"), "{text}");
            assert!(!text.contains("weights, gradients and optimizer state alone"), "{text}");
        }
        other => panic!("a 2 TiB row was not refused: {other:?}"),
    }
}

#[test]
fn classification_head_must_match_the_classes() {
    let spec = "dataset I:
 source = csv(\"iris.csv\")
 target = \"species\"
model M:
 input 4
 dense 2 linear
train:
 model = M
 data = I
 loss = cross_entropy
 optimizer = adam
 epochs = 1
";
    let (error, _) = fit_problems("iris/iris.csv", "iris.csv", spec);
    assert!(error.diagnostics[0].message.contains("3 classes"), "{:?}", error.diagnostics);
}

#[test]
fn a_regression_loss_on_class_labels_points_at_the_loss() {
    let spec = "dataset I:
 source = csv(\"iris.csv\")
 target = \"species\"
model M:
 input 4
 dense 1 linear
train:
 model = M
 data = I
 loss = mse
 epochs = 1
";
    let (error, source_text) = fit_problems("iris/iris.csv", "iris.csv", spec);
    let rendered = kynml_core::spec::render("s.kyn", &source_text, &error.diagnostics);
    assert!(
        rendered.contains("loss = mse") && rendered.contains("cross_entropy") && rendered.contains("setosa"),
        "{rendered}"
    );
}

#[test]
fn a_class_loss_on_a_continuous_target_suggests_regression() {
    let spec = "dataset D:
 source = csv(\"d.csv\")
 target = \"progression\"
model M:
 input 10
 dense 1 linear
train:
 model = M
 data = D
 loss = cross_entropy
 epochs = 1
";
    let (error, _) = fit_problems("diabetes/diabetes.csv", "d.csv", spec);
    assert!(error.diagnostics[0].help.as_deref().unwrap_or("").contains("loss = mse"), "{:?}", error.diagnostics);
}

#[test]
fn workers_change_speed_never_results() {
    let tmp = tempfile::tempdir().unwrap();
    let path = random_regression_spec(tmp.path(), 5, " dense 32 relu\n batchnorm\n dropout 0.3\n dense 1 linear");
    let mut file = SpecFile::load(&path).unwrap();
    file.spec.train.batch.value = 16;
    let data = file.load_data().unwrap();
    let cpu = select(DeviceChoice::Cpu).unwrap();
    let mut runs = Vec::new();
    // `prefetch` alone: one thread prepares the batches ahead.
    for (workers, prefetch) in [(0, None), (1, None), (4, None), (0, Some(2))] {
        file.spec.dataset.num_workers.value = workers;
        file.spec.dataset.prefetch =
            prefetch.map(|value| kynml_core::spec::types::Spanned { value, span: Default::default() });
        let r = train(&file.spec, &data, &cpu, &TrainSettings::default(), &mut |_| {}).unwrap();
        let losses: Vec<(f64, f64)> = r.history.iter().map(|e| (e.train_loss, e.val_loss)).collect();
        runs.push(((workers, prefetch), losses, all_weights(&r.model)));
    }
    for (loader, losses, weights) in &runs[1..] {
        assert_eq!(losses, &runs[0].1, "losses differ with (workers, prefetch) {loader:?}");
        assert!(weights == &runs[0].2, "final weights differ with (workers, prefetch) {loader:?}");
    }
}

// ---- checkpoints and resume ----

/// A spec on fresh random data with every layer kind, early stopping that
/// never fires, a warmup-and-cosine schedule and a checkpoint every two
/// epochs at `ckpt`.
fn checkpointed_spec(dir: &Path, seed: u64, optimizer: &str, ckpt: &str, async_save: bool) -> PathBuf {
    let layers = " dense 24 gelu\n batchnorm\n dropout 0.25\n dense 12 silu\n layernorm\n dense 1 linear";
    checkpointed_spec_of(dir, seed, optimizer, ckpt, async_save, layers)
}

/// [`checkpointed_spec`] with these layers.
fn checkpointed_spec_of(dir: &Path, seed: u64, optimizer: &str, ckpt: &str, async_save: bool, layers: &str) -> PathBuf {
    let path = random_regression_spec(dir, seed, layers);
    let spec = std::fs::read_to_string(&path).unwrap().replace("optimizer = adamw(lr=0.01)", optimizer)
        + &format!(
            " scheduler = cosine(t_max=6, warmup=2)\n early_stop = early_stop(patience=100)\n\
             checkpoint = checkpoint(every_n=2, path=\"{ckpt}\", async_save={async_save}, keep=3)\n"
        );
    std::fs::write(&path, spec).unwrap();
    path
}

fn run_to(path: &Path, epochs: usize, resume: bool) -> kynml_core::train::TrainResult {
    run_to_on(path, epochs, resume, kynml_core::train::EngineChoice::Auto)
}

fn run_to_on(
    path: &Path,
    epochs: usize,
    resume: bool,
    engine: kynml_core::train::EngineChoice,
) -> kynml_core::train::TrainResult {
    let mut file = SpecFile::load(path).unwrap();
    file.apply(&Overrides { epochs: Some(epochs), ..Overrides::default() });
    let data = file.load_data().unwrap();
    let resume_from = if resume { file.find_checkpoint(&data).unwrap().map(|(c, _)| c) } else { None };
    assert_eq!(resume_from.is_some(), resume, "a checkpoint to resume from");
    // A run that does not resume starts over at the path.
    let settings = TrainSettings {
        checkpoint_path: file.checkpoint_path(),
        resume_from,
        fresh: !resume,
        engine,
        ..TrainSettings::default()
    };
    let cpu = select(DeviceChoice::Cpu).unwrap();
    train(&file.spec, &data, &cpu, &settings, &mut |_| {}).unwrap()
}

/// A program's run is as safe as `kynml train`'s: `train` never writes over
/// a file that is not a checkpoint, nor over a checkpoint it was neither
/// told to resume nor to replace, and resumes only on the rows it trained on;
/// `SpecFile::train_settings` resolves the path against the spec's folder
/// and resumes what is there. A spec changed in code to values no run can
/// take is refused, not a panic.
#[test]
fn a_library_run_never_replaces_a_file_or_a_checkpoint_unasked() {
    use kynml_core::checkpoint::CheckpointError;
    use kynml_core::train::resume::ResumeError;
    use kynml_core::train::TrainError;
    let seed = clock_seed();
    let tmp = tempfile::tempdir().unwrap();
    let path = checkpointed_spec(tmp.path(), seed, "optimizer = adamw(lr=0.01)", "ck/run.ckpt", false);
    let cpu = select(DeviceChoice::Cpu).unwrap();
    let mut file = SpecFile::load(&path).unwrap();
    file.apply(&Overrides { epochs: Some(2), ..Overrides::default() });
    let data = file.load_data().unwrap();
    let ckpt = tmp.path().join("ck/run.ckpt");

    let settings = file.train_settings(&data, false).unwrap();
    assert_eq!(settings.checkpoint_path.as_deref(), Some(ckpt.as_path()));
    assert!(settings.resume_from.is_none() && settings.checkpoint_lock.is_some());
    // The path is locked while the settings hold it.
    assert!(matches!(
        file.train_settings(&data, false),
        Err(ResumeError::Unwritable { error: CheckpointError::InUse { .. }, .. })
    ));
    // The settings cloned for a second run while the first trains: the
    // second is refused, not a second writer rotating the same copies.
    let mut second = None;
    train(&file.spec, &data, &cpu, &settings, &mut |_| {
        if second.is_none() {
            second = Some(train(&file.spec, &data, &cpu, &settings.clone(), &mut |_| {}).map(|r| r.final_metrics));
        }
    })
    .unwrap();
    assert!(matches!(second, Some(Err(TrainError::Checkpoint(CheckpointError::InUse { .. })))), "{second:?}");
    // Its lock given to a run at another path does not stand for that
    // path's: the run locks its own.
    let elsewhere = tmp.path().join("elsewhere/run.ckpt");
    let moved = TrainSettings {
        checkpoint_path: Some(elsewhere.clone()),
        checkpoint_lock: settings.checkpoint_lock.clone(),
        ..TrainSettings::default()
    };
    let mut locked = None;
    train(&file.spec, &data, &cpu, &moved, &mut |_| {
        locked.get_or_insert_with(|| kynml_core::checkpoint::lock(&elsewhere).map(drop));
    })
    .unwrap();
    assert!(matches!(locked, Some(Err(CheckpointError::InUse { .. }))), "{locked:?}");
    std::fs::remove_dir_all(tmp.path().join("elsewhere")).unwrap();
    drop((moved, settings));
    let written = std::fs::read(&ckpt).unwrap();

    // Plain settings at that path: refused, the checkpoint untouched.
    let plain = TrainSettings { checkpoint_path: Some(ckpt.clone()), ..TrainSettings::default() };
    match train(&file.spec, &data, &cpu, &plain, &mut |_| {}) {
        Err(e @ TrainError::CheckpointExists { .. }) => assert!(e.to_string().contains("TrainSettings::fresh"), "{e}"),
        other => panic!("{:?}", other.map(|r| r.final_metrics)),
    }
    assert_eq!(std::fs::read(&ckpt).unwrap(), written);

    // A file that is not a checkpoint is never written over.
    let foreign = tmp.path().join("ck/model.pt");
    std::fs::write(&foreign, b"PK\x03\x04 a pytorch zip").unwrap();
    for fresh in [false, true] {
        let there = TrainSettings { checkpoint_path: Some(foreign.clone()), fresh, ..TrainSettings::default() };
        match train(&file.spec, &data, &cpu, &there, &mut |_| {}) {
            Err(TrainError::Checkpoint(CheckpointError::Foreign { .. })) => {}
            other => panic!("{:?}", other.map(|r| r.final_metrics)),
        }
    }
    assert_eq!(std::fs::read(&foreign).unwrap(), b"PK\x03\x04 a pytorch zip");

    // A checkpoint loaded by hand, resumed under another seed (other
    // rows): refused for the data.
    let by_hand = kynml_core::checkpoint::load(&ckpt).unwrap().unwrap();
    let mut other = SpecFile::load(&path).unwrap();
    other.apply(&Overrides { epochs: Some(3), seed: Some(seed ^ 1), ..Overrides::default() });
    let other_data = other.load_data().unwrap();
    let resumed = TrainSettings {
        resume_from: Some(by_hand),
        checkpoint_path: Some(tmp.path().join("other.ckpt")),
        ..TrainSettings::default()
    };
    match train(&other.spec, &other_data, &cpu, &resumed, &mut |_| {}) {
        Err(TrainError::Resume(ResumeError::DataMismatch { differences })) => {
            assert!(differences.contains("seed"), "{differences}")
        }
        other => panic!("{:?}", other.map(|r| r.final_metrics)),
    }

    // `train_settings` resumes the checkpoint there; `fresh` starts over.
    file.apply(&Overrides { epochs: Some(3), ..Overrides::default() });
    let settings = file.train_settings(&data, false).unwrap();
    assert!(settings.resume_from.is_some());
    assert_eq!(train(&file.spec, &data, &cpu, &settings, &mut |_| {}).unwrap().resumed_after, Some(2));
    drop(settings);
    let settings = file.train_settings(&data, true).unwrap();
    assert!(settings.resume_from.is_none() && settings.fresh);
    assert_eq!(train(&file.spec, &data, &cpu, &settings, &mut |_| {}).unwrap().resumed_after, None);
    drop(settings);

    // The checkpoint gone, its older copy (epoch 2, kept by `keep = 3`) is
    // not rotated away unasked either.
    let copy = tmp.path().join("ck/run.ckpt.1");
    assert!(copy.is_file());
    std::fs::rename(&ckpt, tmp.path().join("elsewhere.ckpt")).unwrap();
    match file.train_settings(&data, false) {
        Err(e @ ResumeError::OlderCopy { epoch: 2, .. }) => assert!(e.to_string().contains("run.ckpt.1"), "{e}"),
        other => panic!("{:?}", other.map(|s| s.resume_from.is_some())),
    }
    match train(&file.spec, &data, &cpu, &plain, &mut |_| {}) {
        Err(TrainError::CheckpointExists { path }) => assert_eq!(path, copy),
        other => panic!("{:?}", other.map(|r| r.final_metrics)),
    }

    // Values a run cannot take, set in code after reading: said, not a panic.
    let mut zero = file.spec.clone();
    zero.train.batch.value = 0;
    zero.train.accumulate.value = 0;
    zero.train.checkpoint = None;
    match train(&zero, &data, &cpu, &TrainSettings::default(), &mut |_| {}) {
        Err(e @ TrainError::DoesNotFit { .. }) => {
            let text = e.to_string();
            assert!(text.contains("`batch` is 0") && text.contains("`accumulate` is 0"), "{text}");
        }
        other => panic!("{:?}", other.map(|r| r.final_metrics)),
    }
    let mut classes = file.spec.clone();
    classes.train.loss.value = kynml_core::spec::types::Loss::CrossEntropy;
    classes.train.checkpoint = None;
    assert!(matches!(
        train(&classes, &data, &cpu, &TrainSettings::default(), &mut |_| {}),
        Err(TrainError::DoesNotFit { .. })
    ));
    // And a regression loss on class labels (iris's species).
    let mut iris = SpecFile::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/iris/iris.kyn")).unwrap();
    let flowers = iris.load_data().unwrap();
    iris.spec.train.loss.value = kynml_core::spec::types::Loss::Mse;
    match train(&iris.spec, &flowers, &cpu, &TrainSettings::default(), &mut |_| {}) {
        Err(e @ TrainError::DoesNotFit { .. }) => assert!(e.to_string().contains("targets are classes"), "{e}"),
        other => panic!("{:?}", other.map(|r| r.final_metrics)),
    }
    // A dataset edited in code whose parts no longer hold together (each
    // of these panicked inside a step, or trained nothing and returned
    // metrics), and no epoch to train.
    use kynml_core::data::Labels;
    let iris = SpecFile::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/iris/iris.kyn")).unwrap();
    type Edit = Box<dyn Fn(&mut kynml_core::data::Dataset, &mut kynml_core::spec::types::Spec)>;
    let edits: [(Edit, &str); 5] = [
        (Box::new(|d, _| d.valid.features.truncate(5)), "the validation part holds 5 values for 30 rows of 4"),
        (
            Box::new(|d, _| {
                if let Labels::Classes(c) = &mut d.train.labels {
                    c[3] = 99;
                }
            }),
            "the training part's row 3 has class 99, but the data has 3 classes",
        ),
        (Box::new(|d, _| d.train.labels = Labels::Values(vec![0.0; d.train.len()])), "targets are numbers"),
        (
            Box::new(|d, _| {
                d.train.rows.clear();
                d.train.features.clear();
                d.train.labels = Labels::Classes(Vec::new());
            }),
            "the training part holds no rows",
        ),
        (Box::new(|_, s| s.train.epochs.value = 0), "`epochs` is 0"),
    ];
    for (edit, says) in edits {
        let (mut data, mut spec) = (flowers.clone(), iris.spec.clone());
        edit(&mut data, &mut spec);
        match train(&spec, &data, &cpu, &TrainSettings::default(), &mut |_| {}) {
            Err(e @ TrainError::DoesNotFit { .. }) => assert!(e.to_string().contains(says), "{e}"),
            other => panic!("{says}: {:?}", other.map(|r| r.final_metrics)),
        }
    }
}

/// Early stopping on a validation loss that is never finite (a NaN target,
/// set in code; a file's is refused, but a target far past the model's
/// range can overflow the loss) stops with no best epoch, and says so,
/// rather than naming the epoch it stopped at as the best.
#[test]
fn early_stopping_with_no_finite_validation_loss_names_no_best_epoch() {
    use kynml_core::data::Labels;
    use kynml_core::train::TrainEvent;
    let tmp = tempfile::tempdir().unwrap();
    let path = random_regression_spec(tmp.path(), clock_seed(), " dense 8 relu\n dense 1 linear");
    let text = std::fs::read_to_string(&path).unwrap() + " early_stop = early_stop(patience=2)\n";
    std::fs::write(&path, text).unwrap();
    let mut file = SpecFile::load(&path).unwrap();
    let mut data = file.load_data().unwrap();
    let Labels::Values(values) = &mut data.valid.labels else { panic!("regression") };
    values[0] = f32::NAN;
    let mut stops = Vec::new();
    let cpu = select(DeviceChoice::Cpu).unwrap();
    let result = train(&file.spec, &data, &cpu, &TrainSettings::default(), &mut |e| {
        if let TrainEvent::EarlyStop { epoch, best_epoch } = e {
            stops.push((epoch, best_epoch));
        }
    })
    .unwrap();
    assert_eq!(stops, [(2, None)]);
    assert_eq!((result.best_epoch, result.stopped_early), (None, true));
}

/// `--fresh` discards the run at the checkpoint path: its first save removes
/// that run's checkpoint and older copies, which would otherwise rotate into
/// the new run's copies (and later be offered as a whole checkpoint to
/// resume from, reviving the run discarded).
#[test]
fn a_fresh_start_replaces_the_discarded_runs_copies() {
    let seed = clock_seed();
    let tmp = tempfile::tempdir().unwrap();
    // Saves every 2 epochs, keeping 3.
    let path = checkpointed_spec(tmp.path(), seed, "optimizer = adamw(lr=0.01)", "r.ckpt", false);
    run_to(&path, 6, false);
    let copy = |n: usize| tmp.path().join(format!("r.ckpt.{n}"));
    assert!(copy(1).is_file() && copy(2).is_file(), "epochs 4 and 2 kept beside epoch 6");
    let mut file = SpecFile::load(&path).unwrap();
    file.apply(&Overrides { epochs: Some(2), ..Overrides::default() });
    let data = file.load_data().unwrap();
    let settings = TrainSettings { checkpoint_path: file.checkpoint_path(), fresh: true, ..TrainSettings::default() };
    let cpu = select(DeviceChoice::Cpu).unwrap();
    train(&file.spec, &data, &cpu, &settings, &mut |_| {}).unwrap();
    let (_, state) = file.find_checkpoint(&data).unwrap().expect("the new run's checkpoint");
    assert_eq!(state.epoch, 2, "seed {seed}");
    assert!(!copy(1).exists() && !copy(2).exists(), "seed {seed}: the discarded run's copies are gone");

    // The fresh run keeping fewer copies than the one it discards: every
    // copy goes all the same (`keep = 1` left them, and a damaged
    // checkpoint's hint then offered the discarded run's).
    run_to(&path, 6, true);
    assert!(copy(1).is_file() && copy(2).is_file(), "seed {seed}");
    // A copy kept by hand under another number is not the rotation's.
    std::fs::copy(copy(2), copy(20261127)).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replace("keep=3", "keep=1")).unwrap();
    let mut file = SpecFile::load(&path).unwrap();
    file.apply(&Overrides { epochs: Some(2), ..Overrides::default() });
    assert_eq!(kynml_core::checkpoint::discarded(&file.checkpoint_path().unwrap()).len(), 3, "seed {seed}");
    let data = file.load_data().unwrap();
    train(&file.spec, &data, &cpu, &settings, &mut |_| {}).unwrap();
    assert!(!copy(1).exists() && !copy(2).exists(), "seed {seed}: copies past the new keep are gone too");
    assert!(copy(20261127).is_file(), "seed {seed}: the copy kept by hand stays");

    // A run killed inside a rotation (its copies moved up one, the
    // checkpoint not yet linked to `.1`) leaves `.2` without `.1`: it is the
    // discarded run's all the same.
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replace("keep=1", "keep=3")).unwrap();
    run_to(&path, 6, true);
    std::fs::remove_file(copy(1)).unwrap();
    assert!(copy(2).is_file(), "seed {seed}");
    let mut file = SpecFile::load(&path).unwrap();
    file.apply(&Overrides { epochs: Some(2), ..Overrides::default() });
    let data = file.load_data().unwrap();
    train(&file.spec, &data, &cpu, &settings, &mut |_| {}).unwrap();
    assert!(!copy(2).exists(), "seed {seed}: the discarded run's copy past a gap is gone");
}

/// A run that stopped early goes on when resumed under early stopping that
/// now lets it (its patience raised, or early stopping removed), and stays
/// stopped under the same; early stopping added on resume counts the
/// resumed weights as its best so far, not only the epochs after them.
#[test]
fn early_stopping_changed_on_resume_is_applied_to_the_run_so_far() {
    let seed = clock_seed();
    let tmp = tempfile::tempdir().unwrap();
    let path = checkpointed_spec(tmp.path(), seed, "optimizer = adamw(lr=0.01)", "r.ckpt", false);
    let text = std::fs::read_to_string(&path).unwrap();
    let with =
        |rule: &str| std::fs::write(&path, text.replace(" early_stop = early_stop(patience=100)\n", rule)).unwrap();
    // min_delta so large that no epoch after the first improves: it stops at epoch 3.
    with(" early_stop = early_stop(patience=2, min_delta=1000)\n");
    let first = run_to(&path, 12, false);
    assert!(first.stopped_early && first.history.len() == 3, "seed {seed}: {} epochs", first.history.len());
    // The same rule: nothing more.
    let again = run_to(&path, 12, true);
    assert_eq!(again.history.len(), 3, "seed {seed}");
    // A larger patience: it goes on until that is used up too.
    with(" early_stop = early_stop(patience=4, min_delta=1000)\n");
    let longer = run_to(&path, 12, true);
    assert_eq!((longer.history.len(), longer.stopped_early), (5, true), "seed {seed}");
    // No early stopping: on to the epochs asked.
    with("");
    let on = run_to(&path, 7, true);
    assert_eq!((on.history.len(), on.stopped_early), (7, false), "seed {seed}");
    // A patience lowered below the epochs a run that had not stopped has
    // waited stops it there, with its best epoch's weights (it trained on
    // until its own patience ran out).
    with(" early_stop = early_stop(patience=4, min_delta=1000)\n");
    let waiting = run_to(&path, 4, false);
    assert_eq!((waiting.history.len(), waiting.stopped_early), (4, false), "seed {seed}");
    with(" early_stop = early_stop(patience=2, min_delta=1000)\n");
    let lowered = run_to(&path, 12, true);
    assert_eq!((lowered.history.len(), lowered.stopped_early), (4, true), "seed {seed}");
    assert_eq!(lowered.best_epoch, Some(1), "seed {seed}");
    let kept = lowered.final_metrics["val_loss"];
    let first_loss = waiting.history[0].val_loss;
    assert!((kept - first_loss).abs() <= 1e-6 * first_loss.abs(), "seed {seed}: kept {kept}, epoch 1 had {first_loss}");

    // Early stopping added on resume, with a rate that makes training worse:
    // the resumed weights stay the best, not the first epoch after them.
    let tmp = tempfile::tempdir().unwrap();
    let path = checkpointed_spec(tmp.path(), seed, "optimizer = adamw(lr=0.01)", "r.ckpt", false);
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replace(" early_stop = early_stop(patience=100)\n", "")).unwrap();
    let before = run_to(&path, 4, false);
    let resumed_loss = before.history.last().unwrap().val_loss;
    let worse = text.replace("adamw(lr=0.01)", "adamw(lr=5.0)").replace("patience=100", "patience=2");
    std::fs::write(&path, worse).unwrap();
    let after = run_to(&path, 8, true);
    let later = &after.history[4..];
    assert!(
        later.iter().all(|e| e.val_loss.is_nan() || e.val_loss >= resumed_loss),
        "seed {seed}: the large rate improved: {later:?}"
    );
    assert_eq!(after.best_epoch, Some(4), "seed {seed}: {:?}", after.history);
    let kept = after.final_metrics["val_loss"];
    assert!(
        (kept - resumed_loss).abs() <= 1e-6 * resumed_loss.abs(),
        "seed {seed}: kept {kept}, resumed {resumed_loss}"
    );

    // Added on resume from a checkpoint written partway through epoch 4:
    // those weights were never validated, so they are no epoch's best (they
    // were kept as "epoch 3", with a loss of their own, worse than it).
    use std::sync::atomic::{AtomicBool, Ordering};
    let tmp = tempfile::tempdir().unwrap();
    let path = checkpointed_spec(tmp.path(), seed, "optimizer = adamw(lr=0.01)", "r.ckpt", false);
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replace(" early_stop = early_stop(patience=100)\n", "")).unwrap();
    let mut file = SpecFile::load(&path).unwrap();
    file.apply(&Overrides { epochs: Some(8), ..Overrides::default() });
    let data = file.load_data().unwrap();
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let settings = TrainSettings {
        checkpoint_path: file.checkpoint_path(),
        stop: Some(stop.clone()),
        fresh: true,
        ..TrainSettings::default()
    };
    let cpu = select(DeviceChoice::Cpu).unwrap();
    let outcome = train(&file.spec, &data, &cpu, &settings, &mut |event| {
        if let kynml_core::train::TrainEvent::Step { epoch: 4, step: 2, .. } = event {
            stop.store(true, Ordering::SeqCst);
        }
    });
    assert!(matches!(outcome, Err(kynml_core::train::TrainError::Interrupted { epoch: 4, .. })), "seed {seed}");
    std::fs::write(&path, text.replace("adamw(lr=0.01)", "adamw(lr=5.0)").replace("patience=100", "patience=2"))
        .unwrap();
    let after = run_to(&path, 8, true);
    assert_ne!(after.best_epoch, Some(3), "seed {seed}: the mid-epoch weights kept as epoch 3's");
    if let Some(best) = after.best_epoch {
        let (kept, at) = (after.final_metrics["val_loss"], after.history[best - 1].val_loss);
        assert!((kept - at).abs() <= 1e-6 * at.abs(), "seed {seed}: kept {kept}, epoch {best} had {at}");
    }
}

#[test]
fn a_checkpoint_resumes_on_the_other_engine() {
    use kynml_core::train::EngineChoice::{Auto as Native, Burn};
    let seed = clock_seed();
    // Dense layers, and convolutions (weights of rank 4 and their moments).
    let dense = " dense 24 gelu\n batchnorm\n dropout 0.25\n dense 12 silu\n layernorm\n dense 1 linear";
    // tanh, not relu, before batchnorm: a relu unit active on every row
    // of a batch has its bias cancelled by the normalisation, its gradient
    // is rounding noise, and Adam makes full steps of it (seed 5 parted
    // the engines by 3e-3 that way).
    let conv =
        " input 2x3\n conv1d 4 2 tanh padding=1\n batchnorm\n maxpool 2\n flatten\n dense 8 gelu\n dense 1 linear";
    for (layers, optimizer) in [
        (dense, "optimizer = adamw(lr=0.01, weight_decay=0.05)"),
        (dense, "optimizer = sgd(lr=0.05, momentum=0.9, nesterov=true)"),
        (dense, "optimizer = rmsprop(lr=0.005, momentum=0.5, centered=true)"),
        (conv, "optimizer = adamw(lr=0.01, weight_decay=0.05)"),
        (conv, "optimizer = rmsprop(lr=0.005, momentum=0.5, centered=true)"),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let whole = checkpointed_spec_of(tmp.path(), seed, optimizer, "whole.ckpt", false, layers);
        let full = run_to_on(&whole, 6, false, Native);
        assert_eq!(full.engine, kynml_core::train::EngineKind::Native, "{layers}");
        for (first, then) in [(Native, Burn), (Burn, Native)] {
            let cut = checkpointed_spec_of(tmp.path(), seed, optimizer, "cut.ckpt", false, layers);
            let _ = std::fs::remove_file(tmp.path().join("cut.ckpt"));
            run_to_on(&cut, 3, false, first);
            let resumed = run_to_on(&cut, 6, true, then);
            assert_eq!(resumed.resumed_after, Some(3));
            // Weights, optimizer moments and generators carried over: the
            // run goes on as one engine would have, to fp32 rounding (a lost
            // moment or a reset step count shows as percents).
            const TOLERANCE: f64 = 1e-4;
            let mut worst = 0.0f64;
            for (a, b) in resumed.history.iter().zip(&full.history) {
                let gap = (a.val_loss - b.val_loss).abs() / b.val_loss.abs();
                worst = worst.max(gap);
                assert!(
                    gap <= TOLERANCE,
                    "{optimizer}, {first:?} then {then:?}, epoch {}: gap {gap} (seed {seed})",
                    a.epoch
                );
            }
            eprintln!("{optimizer}, {first:?} then {then:?}: worst val loss gap {worst:.1e} (seed {seed})");
        }
    }
}

#[test]
fn resuming_at_an_epoch_boundary_ends_bit_identical_for_every_optimizer() {
    let seed = clock_seed();
    for optimizer in [
        "optimizer = adamw(lr=0.01, weight_decay=0.05)",
        "optimizer = adam(lr=0.01)",
        "optimizer = sgd(lr=0.05, momentum=0.9, nesterov=true)",
        "optimizer = rmsprop(lr=0.005, momentum=0.5, centered=true)",
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let whole = checkpointed_spec(tmp.path(), seed, optimizer, "whole.ckpt", true);
        let full = run_to(&whole, 6, false);
        let cut = checkpointed_spec(tmp.path(), seed, optimizer, "cut.ckpt", true);
        let first = run_to(&cut, 3, false);
        assert_eq!(first.history.len(), 3);
        let resumed = run_to(&cut, 6, true);
        assert_eq!(resumed.resumed_after, Some(3), "{optimizer}");
        assert_eq!(resumed.history.len(), 6, "{optimizer}: the history covers the whole training");
        let losses = |r: &kynml_core::train::TrainResult| r.history.iter().map(|e| e.val_loss).collect::<Vec<_>>();
        assert_eq!(losses(&resumed), losses(&full), "{optimizer}, seed {seed}");
        assert!(all_weights(&resumed.model) == all_weights(&full.model), "{optimizer}, seed {seed}: weights differ");
        // Same state, same bytes: the final checkpoints (weights, optimizer
        // state, generators, history) are identical files.
        let bytes = |name: &str| std::fs::read(tmp.path().join(name)).unwrap();
        assert!(bytes("whole.ckpt") == bytes("cut.ckpt"), "{optimizer}, seed {seed}: checkpoints differ");
    }
}

#[test]
fn async_and_sync_saving_write_identical_files() {
    let seed = clock_seed();
    let tmp = tempfile::tempdir().unwrap();
    let a = checkpointed_spec(tmp.path(), seed, "optimizer = adamw(lr=0.01)", "async.ckpt", true);
    run_to(&a, 6, false);
    let b = checkpointed_spec(tmp.path(), seed, "optimizer = adamw(lr=0.01)", "sync.ckpt", false);
    run_to(&b, 6, false);
    // keep = 3: epochs 6, 4 and 2.
    for suffix in ["", ".1", ".2"] {
        let read = |name: &str| std::fs::read(tmp.path().join(format!("{name}{suffix}"))).unwrap();
        assert!(read("async.ckpt") == read("sync.ckpt"), "seed {seed}: async.ckpt{suffix} differs");
    }
    assert!(!tmp.path().join("async.ckpt.3").exists());
}

/// A text model's vocabulary is learned from its training rows: resumed
/// under another seed it differs, and the refusal names the seed (it said
/// "a different model", with two vocabulary hashes).
#[test]
fn a_text_models_checkpoint_under_another_seed_is_refused_for_the_seed() {
    use kynml_core::train::resume::ResumeError;
    let tmp = tempfile::tempdir().unwrap();
    let path = text_spec(tmp.path(), 5, " embedding 8\n global_avgpool");
    let spec = std::fs::read_to_string(&path).unwrap() + " checkpoint = checkpoint(every_n=1, path=\"t.ckpt\")\n";
    std::fs::write(&path, &spec).unwrap();
    run_to(&path, 1, false);
    let mut file = SpecFile::from_source(&path, spec.replace("seed = 5", "seed = 6")).unwrap();
    let data = file.load_data().unwrap();
    let err = file.find_checkpoint(&data).expect_err("refused");
    assert!(matches!(err, ResumeError::DataMismatch { .. }), "{err}");
    assert!(err.to_string().contains("seed 5 (this run: 6"), "{err}");
    // Another model is still said to be one.
    let mut file = SpecFile::from_source(&path, spec.replace("embedding 8", "embedding 9")).unwrap();
    let data = file.load_data().unwrap();
    let err = file.find_checkpoint(&data).expect_err("refused");
    assert!(matches!(err, ResumeError::ModelMismatch { .. }), "{err}");
}

#[test]
fn a_checkpoint_that_does_not_fit_is_refused_before_training() {
    use kynml_core::checkpoint::CheckpointError;
    use kynml_core::train::resume::ResumeError;
    let tmp = tempfile::tempdir().unwrap();
    let path = checkpointed_spec(tmp.path(), 3, "optimizer = adamw(lr=0.01)", "m.ckpt", false);
    run_to(&path, 2, false);
    let spec = std::fs::read_to_string(&path).unwrap();
    let ckpt = tmp.path().join("m.ckpt");
    let good = std::fs::read(&ckpt).unwrap();
    let find = |spec_text: &str| {
        let mut file = SpecFile::from_source(&path, spec_text.to_string()).unwrap();
        let data = file.load_data().unwrap();
        file.find_checkpoint(&data).expect_err("refused")
    };

    let err = find(&spec.replace("dense 12 silu", "dense 13 silu"));
    assert!(matches!(err, ResumeError::ModelMismatch { .. }), "{err}");
    assert!(err.to_string().contains("dense 12 silu") && err.to_string().contains("dense 13 silu"), "{err}");
    let err = find(&spec.replace("optimizer = adamw(lr=0.01)", "optimizer = sgd(lr=0.01)"));
    assert!(matches!(err, ResumeError::OptimizerMismatch { .. }), "{err}");
    // Early stopping's best and the history are in the loss's units.
    for other in ["loss = mae", "loss = huber(delta=1)"] {
        let err = find(&spec.replace("loss = mse", other));
        assert!(matches!(err, ResumeError::LossMismatch { .. }), "{other}: {err}");
        assert!(err.to_string().contains("`loss = mse`"), "{err}");
    }

    std::fs::write(&ckpt, &good[..good.len() - 100]).unwrap();
    let err = find(&spec);
    assert!(matches!(err, ResumeError::Checkpoint(CheckpointError::Truncated { .. })), "{err}");
    let mut flipped = good.clone();
    flipped[good.len() / 2] ^= 0x10;
    std::fs::write(&ckpt, &flipped).unwrap();
    let err = find(&spec);
    assert!(matches!(err, ResumeError::Checkpoint(CheckpointError::Corrupt { .. })), "{err}");
    std::fs::write(&ckpt, b"some notes, not a checkpoint").unwrap();
    assert!(matches!(find(&spec), ResumeError::Checkpoint(CheckpointError::NotACheckpoint)));
    // The Python tool's checkpoint (a `torch.save` zip) is left alone: the
    // spec's checkpoints are kept beside it, where none is yet.
    // (a zip whose first member is `archive/data.pkl`; an older `torch.save`'s pickle alike)
    let torch_zip = [&b"PK\x03\x04"[..], &[0; 22], &[16, 0, 0, 0], b"archive/data.pkl"].concat();
    for old in [torch_zip, b"\x80\x02\x8a\x0al\xfc\x9cF\xf9 j\xa8P\x19.".to_vec()] {
        std::fs::write(&ckpt, old).unwrap();
        assert!(SpecFile::from_source(&path, spec.clone()).unwrap().pytorch_checkpoint().is_some());
    }
    let mut file = SpecFile::from_source(&path, spec.clone()).unwrap();
    let data = file.load_data().unwrap();
    assert!(file.find_checkpoint(&data).unwrap().is_none());
    assert_eq!(file.pytorch_checkpoint(), Some(ckpt.clone()));
    assert_eq!(file.checkpoint_path(), Some(tmp.path().join("m.ckpt.kynml")));

    // A different learning rate, epochs or patience is a normal resume.
    std::fs::write(&ckpt, &good).unwrap();
    let mut file = SpecFile::from_source(&path, spec.replace("lr=0.01", "lr=0.001")).unwrap();
    let data = file.load_data().unwrap();
    assert_eq!(file.find_checkpoint(&data).unwrap().map(|(_, s)| s.epoch), Some(2));
}

// ---- export and prediction ----

/// A tensors file for scripts/check_onnx.py: `{name: {shape, data}}`.
fn tensors_json(entries: &[(&str, usize, &[f32])]) -> String {
    let map: serde_json::Map<String, serde_json::Value> = entries
        .iter()
        .map(|(name, cols, data)| {
            let rows = data.len() / cols;
            ((*name).to_string(), serde_json::json!({ "shape": [rows, cols], "data": data }))
        })
        .collect();
    serde_json::Value::Object(map).to_string()
}

fn python(script: &str, args: &[&Path]) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts").join(script);
    let out = std::process::Command::new("python3").arg(&path).args(args).output().expect("python3 runs");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    eprintln!("{script}: {}", text.trim());
    assert!(out.status.success(), "{script} failed (run scripts/setup-export-test-deps.sh):\n{text}");
}

/// Trains `layers` with `loss` on fresh random data (a regression target,
/// or it cut into classes), exports to every format, and checks that each
/// loaded export predicts what the in-memory model predicts, and that
/// onnxruntime and a numpy forward pass from the safetensors file agree.
fn export_round_trip(seed: u64, layers: &str, loss: &str, outputs: usize) {
    use kynml_core::export::{self, Format};
    use kynml_core::model::Mode;
    use kynml_core::predict::Predictor;
    let tmp = tempfile::tempdir().unwrap();
    let path = random_regression_spec(tmp.path(), seed, &format!("{layers}\n dense {outputs} linear"));
    if loss != "mse" {
        // Cut the target into classes: "lo"/"hi", or three bands.
        let csv = std::fs::read_to_string(tmp.path().join("data.csv")).unwrap();
        let mut lines = csv.lines();
        let mut out = lines.next().unwrap().to_string() + "\n";
        for line in lines {
            let (x, y) = line.rsplit_once(',').unwrap();
            let y: f64 = y.parse().unwrap();
            let class = match (outputs, y) {
                (1, y) if y < 0.0 => "lo",
                (1, _) => "hi",
                (_, y) if y < -1.0 => "a",
                (_, y) if y < 1.0 => "b",
                _ => "c",
            };
            out += &format!("{x},{class}\n");
        }
        std::fs::write(tmp.path().join("data.csv"), out).unwrap();
        let spec = std::fs::read_to_string(&path).unwrap().replace("loss = mse", &format!("loss = {loss}"));
        std::fs::write(&path, spec).unwrap();
    }
    let mut file = SpecFile::load(&path).unwrap();
    let data = file.load_data().unwrap();
    let cpu = select(DeviceChoice::Cpu).unwrap();
    let result = train(&file.spec, &data, &cpu, &TrainSettings::default(), &mut |_| {}).unwrap();
    let exported = export::from_model(&result.model, &file.spec.model, &data.info, file.spec.train.loss.value);

    // Fresh raw rows, wider than the training data.
    let mut rng = kynml_core::rng::SplitMix64::new(seed ^ 0x5eed);
    let n = 64;
    let raw: Vec<f32> = (0..n * 6).map(|_| rng.uniform(-3.0, 3.0) as f32).collect();
    // The in-memory model on the same rows, normalised as in training.
    let mut normalised = raw.clone();
    data.info.normalizer.as_ref().unwrap().apply(&mut normalised);
    let x = burn::tensor::Tensor::<kynml_backend::Backend, 2>::from_data(
        burn::tensor::TensorData::new(normalised, [n, 6]),
        &cpu.inner(),
    );
    let in_memory: Vec<f32> = result.model.forward(x, Mode::Eval).into_data().convert::<f32>().into_vec().unwrap();

    let dir = tmp.path();
    export::write(&exported, Format::Onnx, &dir.join("m.onnx")).unwrap();
    export::write(&exported, Format::Safetensors, &dir.join("m.safetensors")).unwrap();
    export::write(&exported, Format::Burn, &dir.join("b.mpk")).unwrap();
    // The same weights give the same record bytes (Burn's parameter ids are numbered, not drawn).
    export::write(&exported, Format::Burn, &dir.join("again.mpk")).unwrap();
    let (a, b) = (std::fs::read(dir.join("b.mpk")).unwrap(), std::fs::read(dir.join("again.mpk")).unwrap());
    if let Some(i) = a.iter().zip(&b).position(|(x, y)| x != y) {
        panic!(
            "{} vs {} bytes; first difference at {i}: {:?} / {:?}",
            a.len(),
            b.len(),
            String::from_utf8_lossy(&a[i.saturating_sub(60)..(i + 40).min(a.len())]),
            String::from_utf8_lossy(&b[i.saturating_sub(60)..(i + 40).min(b.len())])
        );
    }
    assert_eq!(a.len(), b.len());
    let mut reference = None;
    for loaded in ["m.safetensors", "b.mpk"] {
        let p = Predictor::load(&dir.join(loaded), &cpu).unwrap().predict(&raw).unwrap();
        let worst = p.outputs.iter().zip(&in_memory).map(|(a, b)| (a - b).abs()).fold(0.0f32, worst32);
        assert!(worst <= 1e-5, "{loaded}: predictions differ from the in-memory model's by {worst} (seed {seed})");
        reference = Some(p);
    }
    let p = reference.unwrap();
    let inputs = dir.join("inputs.json");
    std::fs::write(&inputs, tensors_json(&[("features", 6, &raw)])).unwrap();
    let expected = dir.join("expected.json");
    let json = match &p.probabilities {
        None => tensors_json(&[("prediction", p.width, &p.outputs)]),
        Some(probs) => {
            let classes = probs.len() / n;
            tensors_json(&[("logits", p.width, &p.outputs), ("probabilities", classes, probs)])
        }
    };
    std::fs::write(&expected, json).unwrap();
    python("check_onnx.py", &[&dir.join("m.onnx"), &inputs, &expected]);
    python("check_safetensors_export.py", &[&dir.join("m.safetensors"), &dir.join("m.json"), &inputs, &expected]);
}

#[test]
fn exports_predict_like_the_trained_model_in_onnxruntime_numpy_and_kynml() {
    let seed = clock_seed();
    eprintln!("seed {seed}");
    export_round_trip(seed, " dense 16 relu\n dense 8 tanh", "mse", 1);
    export_round_trip(seed + 1, " dense 24 gelu\n batchnorm\n dropout 0.3\n dense 12 silu\n layernorm", "mse", 1);
    export_round_trip(seed + 2, " dense 16 leaky_relu\n batchnorm\n dropout 0.2", "cross_entropy", 3);
    export_round_trip(seed + 3, " dense 16 sigmoid\n layernorm", "bce", 1);
    // The six features as a 1x2x3 image and as 2 channels of length 3.
    let image = " input 1x2x3\n conv2d 4 2 relu padding=1\n batchnorm\n maxpool 2 stride=1\n conv2d 3 2 gelu\n \
                 flatten\n dense 6 tanh";
    export_round_trip(seed + 4, image, "cross_entropy", 3);
    let sequence =
        " input 2x3\n conv1d 4 2 silu padding=1\n batchnorm\n avgpool 2\n conv1d 2 1 linear\n global_avgpool";
    export_round_trip(seed + 5, sequence, "mse", 1);
    // Residual blocks: one adding its input, one projecting it (16 -> 8).
    let residual =
        " dense 16 relu\n residual:\n  dense 16 gelu\n  layernorm\n residual:\n  dense 8 tanh\n  dropout 0.1";
    export_round_trip(seed + 6, residual, "mse", 1);
    let image_residual =
        " input 1x2x3\n conv2d 4 2 relu padding=1\n residual:\n  conv2d 4 3 relu padding=1\n  batchnorm\n \
                          residual:\n  conv2d 6 1 gelu\n global_avgpool";
    export_round_trip(seed + 7, image_residual, "cross_entropy", 3);
}

// ---- mixed precision ----

#[test]
fn bf16_and_fp16_track_fp32_on_every_backend() {
    let seed = clock_seed();
    let dense = " dense 32 gelu\n batchnorm\n dropout 0.2\n dense 16 tanh\n layernorm\n dense 1 linear";
    let image = " input 1x2x3\n conv2d 6 2 gelu padding=1\n batchnorm\n avgpool 2 stride=1\n conv2d 4 1 tanh\n \
                 flatten\n dense 16 tanh\n dense 1 linear";
    half_tracks_fp32(seed, dense);
    half_tracks_fp32(seed + 1, image);
}

/// fp16 with the default dynamic loss scaler on an image model: the scaler
/// unscales convolution gradients (rank 4) as it does dense ones, and the
/// run tracks fp32.
#[test]
fn fp16_with_loss_scaling_trains_image_layers() {
    use kynml_core::spec::types::LossScale;
    use kynml_core::train::precision::{Compute, PrecisionPlan};
    let seed = clock_seed();
    let tmp = tempfile::tempdir().unwrap();
    let layers = " input 1x2x3\n conv2d 6 2 gelu padding=1\n batchnorm\n maxpool 2 stride=1\n flatten\n dense 1 linear";
    let path = random_regression_spec(tmp.path(), seed, layers);
    let cpu = select(DeviceChoice::Cpu).unwrap();
    let fp32 = run_with(&path, &cpu, None);
    let scaled = run_with(&path, &cpu, Some(PrecisionPlan::forced(Compute::Fp16, LossScale::Auto)));
    assert!(scaled.precision.scaler.is_some(), "fp16 scales its loss by default");
    let gap = worst_loss_gap(&fp32, &scaled);
    eprintln!("cpu fp16 with dynamic loss scaling, image layers: worst relative loss gap {gap:.2e} (seed {seed})");
    // Skipped overflowing first steps change the trajectory, so this asks
    // for training that works, not for fp32's numbers.
    assert!(scaled.history.iter().all(|e| e.train_loss.is_finite() && e.val_loss.is_finite()), "seed {seed}");
    let (first, last) = (&scaled.history[0], scaled.history.last().unwrap());
    assert!(
        last.train_loss < first.train_loss,
        "fp16 did not learn: {} -> {} (seed {seed})",
        first.train_loss,
        last.train_loss
    );
}

/// A bf16 or fp16 run's validation (each epoch's loss, early stopping's
/// choice, the final metrics) runs its products in the run's precision, as
/// its steps do and as evaluating under PyTorch's autocast does, not in fp32
/// kernels of its own (on a GPU: a second set of products to tune and
/// compile, at fp32's speed). Burn's CPU backend and wgpu (fp16), plain, with
/// early stopping and with checkpointed activations.
#[test]
fn a_half_precision_runs_validation_runs_in_its_precision() {
    use burn::tensor::FloatDType;
    use kynml_core::data::Split;
    use kynml_core::evaluate::run_split;
    use kynml_core::spec::types::LossScale;
    use kynml_core::train::precision::{Compute, PrecisionPlan};
    let seed = clock_seed();
    let tmp = tempfile::tempdir().unwrap();
    let cpu = select(DeviceChoice::Cpu).unwrap();
    let wgpu = select(DeviceChoice::Wgpu).expect("no Vulkan adapter: run scripts/setup-lavapipe.sh");
    for (device, compute, half) in [(&cpu, Compute::Bf16, FloatDType::BF16), (&wgpu, Compute::Fp16, FloatDType::F16)] {
        for (extra, variant) in [
            ("", ""),
            (" early_stop = early_stop(patience=1)\n", ", early stopping"),
            (" checkpoint_activations = true\n", ", checkpointed activations"),
        ] {
            let path = random_regression_spec(tmp.path(), seed, " dense 24 tanh\n dense 12 relu\n dense 1 linear");
            let text = std::fs::read_to_string(&path).unwrap();
            std::fs::write(&path, format!("{text}{extra}")).unwrap();
            let mut file = SpecFile::load(&path).unwrap();
            let data = file.load_data().unwrap();
            let settings = TrainSettings {
                precision: Some(PrecisionPlan::forced(compute, LossScale::None)),
                ..TrainSettings::default()
            };
            let result = train(&file.spec, &data, device, &settings, &mut |_| {}).unwrap();
            assert_eq!(result.precision.compute, compute);
            let loss = file.spec.train.loss.value;
            let half_run = run_split(&result.model, &data, Split::Valid, loss, &device.inner(), Some(half), None);
            let fp32_run = run_split(&result.model, &data, Split::Valid, loss, &device.inner(), None, None);
            let (in_half, in_fp32) = (half_run.loss, fp32_run.loss);
            let epoch = result.best_epoch.unwrap_or(result.history.len());
            let (logged, last) = (result.history[epoch - 1].val_loss, result.final_metrics["val_loss"]);
            let on = format!("{} {}{}", device.short_name(), compute.name(), variant);
            eprintln!(
                "{on}: epoch {epoch}'s validation loss {logged}, final {last}; the model's in {}: {in_half}, in fp32: {in_fp32} (seed {seed})",
                compute.name()
            );
            // The same products on the same weights: the same loss, to the
            // order of a reduction.
            let near = |a: f64, b: f64| (a - b).abs() <= 1e-6 * a.abs().max(1e-12);
            assert!(
                near(logged, in_half),
                "{on}: the epoch's validation {logged} is not the model's {in_half} (seed {seed})"
            );
            assert!(
                near(last, in_half),
                "{on}: the final validation {last} is not the model's {in_half} (seed {seed})"
            );
            // Whether the products left fp32 shows in the outputs, not in a
            // mean loss, where rounding errors of either sign may cancel to
            // fp32's order (seen: 3.6e-7 relative on wgpu fp16). One output
            // off by more than fp32 rounding of a few products can tell.
            let apart = half_run
                .values
                .iter()
                .zip(&fp32_run.values)
                .map(|(h, f)| (h - f).abs() / f.abs().max(1e-3))
                .fold(0.0f32, worst32);
            assert!(
                apart > 1e-5,
                "{on}: outputs at most {apart:e} apart in both precisions: the products never left fp32 (seed {seed})"
            );
        }
    }
}

/// Validation during training runs passes of the steps' rows, the last one
/// filled up with repeats of its own rows (on a GPU, a pass of another size
/// is a kernel search of its own; the CLI test
/// `validation_tunes_no_product_size_the_steps_do_not_take` checks that).
/// The filling must change no output and no loss: a trained model with
/// batchnorm's running statistics, dropout and a convolution, with a
/// regression target and with classes, on Burn's CPU backend and on wgpu,
/// in passes of 1, 5, 32, the split less one, the split, and more than the
/// split, against one pass of the whole split.
#[test]
fn validation_in_filled_passes_gives_the_outputs_of_one_pass() {
    use kynml_core::data::Split;
    use kynml_core::evaluate::run_split;
    use kynml_core::train::EngineChoice;
    let seed = clock_seed();
    let cpu = select(DeviceChoice::Cpu).unwrap();
    let wgpu = select(DeviceChoice::Wgpu).expect("no Vulkan adapter: run scripts/setup-lavapipe.sh");
    let layers = " input 2x3\n conv1d 4 3 relu padding=1\n batchnorm\n flatten\n dense 16 gelu\n dropout 0.3\n \
                  dense 8 relu\n";
    for device in [&cpu, &wgpu] {
        for classes in [0, 3] {
            let tmp = tempfile::tempdir().unwrap();
            let (head, loss) = match classes {
                0 => (" dense 1 linear", "mse"),
                _ => (" dense 3 linear", "cross_entropy"),
            };
            let path = random_spec(tmp.path(), seed, &format!("{layers}{head}"), loss, "adamw(lr=0.01)", classes);
            let mut file = SpecFile::load(&path).unwrap();
            let data = file.load_data().unwrap();
            let settings = TrainSettings { engine: EngineChoice::Burn, ..TrainSettings::default() };
            let result = train(&file.spec, &data, device, &settings, &mut |_| {}).unwrap();
            let loss = file.spec.train.loss.value;
            let n = data.split(Split::Valid).len();
            assert!(n > 32, "{n} validation rows");
            let whole = run_split(&result.model, &data, Split::Valid, loss, &device.inner(), None, None);
            assert_eq!(whole.values.len(), n * whole.width);
            // The split's loss is its outputs' scored in f64 on every
            // device (as the native engine scores them), not a device's
            // fp32 sum: the same number whichever device ran the pass.
            let by_hand = loss_in_f64(&whole.values, whole.width, &data.split(Split::Valid).labels);
            let gap = (whole.loss - by_hand).abs() / by_hand.abs().max(1e-12);
            assert!(gap <= 1e-12, "{} {loss:?}: loss {} against {by_hand} in f64", device.short_name(), whole.loss);
            for rows in [1, 5, 32, n - 1, n, n + 7] {
                let passes = run_split(&result.model, &data, Split::Valid, loss, &device.inner(), None, Some(rows));
                let on = format!("{} {loss:?}, passes of {rows} of {n} rows (seed {seed})", device.short_name());
                assert_eq!((passes.values.len(), passes.width), (whole.values.len(), whole.width), "{on}");
                let worst = worst_difference(&passes.values, &whole.values);
                assert!(worst <= 1e-5, "{on}: outputs {worst:e} apart");
                let gap = (passes.loss - whole.loss).abs() / whole.loss.abs().max(1e-12);
                assert!(gap <= 1e-5, "{on}: loss {} against {}", passes.loss, whole.loss);
            }
        }
    }
}

/// The mean squared error (numbers) or cross-entropy (classes) of
/// `values` (`rows × width` outputs), in f64.
fn loss_in_f64(values: &[f32], width: usize, labels: &kynml_core::data::Labels) -> f64 {
    use kynml_core::data::Labels;
    let rows = values.chunks(width);
    let sum: f64 = match labels {
        Labels::Values(y) => rows.zip(y).map(|(p, &t)| (f64::from(p[0]) - f64::from(t)).powi(2)).sum(),
        Labels::Classes(c) => rows
            .zip(c)
            .map(|(p, &c)| {
                let top = p.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(f64::from(v)));
                let sum: f64 = p.iter().map(|&v| (f64::from(v) - top).exp()).sum();
                top + sum.ln() - f64::from(p[c as usize])
            })
            .sum(),
    };
    sum / labels.len() as f64
}

fn half_tracks_fp32(seed: u64, layers: &str) {
    use kynml_core::spec::types::LossScale;
    use kynml_core::train::precision::{Compute, PrecisionPlan};
    let tmp = tempfile::tempdir().unwrap();
    let path = random_regression_spec(tmp.path(), seed, layers);
    let cpu = select(DeviceChoice::Cpu).unwrap();
    let fp32 = run_with(&path, &cpu, None);
    assert_eq!(fp32.precision.compute, Compute::Fp32);
    // bf16 keeps 8 significant bits, fp16 11: over four epochs of Adam the
    // losses drift by a few percent at most in bf16, under one in fp16.
    let tolerance = |c: Compute| if c == Compute::Bf16 { 5e-2 } else { 1e-2 };
    for compute in [Compute::Bf16, Compute::Fp16] {
        // Numerics only: a loss scaler's skipped first steps would change
        // the trajectory, not the arithmetic (the scaler has its own tests).
        let half = run_with(&path, &cpu, Some(PrecisionPlan::forced(compute, LossScale::None)));
        let gap = worst_loss_gap(&fp32, &half);
        let (train_gap, val_gap) = loss_gaps(&fp32, &half);
        eprintln!(
            "cpu {}: worst gap to fp32 {train_gap:.2e} relative in training loss, {val_gap:.2e} in validation loss \
             (seed {seed})",
            compute.name()
        );
        let tolerance = tolerance(compute);
        assert!(train_gap <= tolerance, "cpu {}: training loss {train_gap} apart (seed {seed})", compute.name());
        assert!(
            val_gap <= VAL_GAP * tolerance,
            "cpu {}: validation loss {val_gap} apart (seed {seed})",
            compute.name()
        );
        // A gap of exactly 0 would mean the products never left fp32.
        assert!(gap > 0.0, "cpu {}: identical to fp32, so reduced precision did not run", compute.name());
    }
    // On wgpu the plan itself picks fp16 where the adapter has f16 shaders.
    let wgpu = select(DeviceChoice::Wgpu).expect("no Vulkan adapter: run scripts/setup-lavapipe.sh");
    half_tracks_cpu_fp32_on(&wgpu, &path, &fp32, seed);
}

/// The gradient of every dense weight after one backward pass of `model` on
/// `x`, with the products in `half` and the loss scaled by `scale` (then
/// unscaled). The loss is the mse against `y`, or with `upstream` the sum of
/// the predictions times those fixed weights (the same gradient as the mse
/// whose residuals gave them, through this model's own Jacobian).
fn dense_grads(
    model: &kynml_core::model::Model<kynml_backend::Backend>,
    x: &[f32],
    y: &[f32],
    upstream: bool,
    half: Option<burn::tensor::FloatDType>,
    scale: Option<f64>,
) -> Vec<Vec<f32>> {
    use burn::optim::GradientsParams;
    use burn::tensor::{Tensor, TensorData};
    use kynml_core::model::{Layer, Mode};
    use kynml_core::train::loss_scale::LossScaler;
    use kynml_core::train::precision::ScalerConfig;
    use kynml_core::train::update::{Grads, Slots};
    let device = select(DeviceChoice::Cpu).unwrap().autodiff();
    let n = y.len();
    let xt = Tensor::<kynml_backend::Backend, 2>::from_data(TensorData::new(x.to_vec(), [n, x.len() / n]), &device);
    let yt = Tensor::<kynml_backend::Backend, 2>::from_data(TensorData::new(y.to_vec(), [n, 1]), &device);
    let pred = model.forward_in(xt, Mode::Eval, half);
    let loss = if upstream { (pred * yt).sum() } else { (pred - yt).square().mean() };
    let mut grads = match scale {
        None => GradientsParams::from_grads(loss.backward(), model),
        Some(init) => {
            let scaler = LossScaler::new(&ScalerConfig { init, ..ScalerConfig::default() }, None, &device);
            let slots = Slots::of(model);
            let g = GradientsParams::from_grads(scaler.scale_loss(loss).backward(), model);
            let mut g = Grads::gather(g, &slots, false);
            let finite: Vec<f32> = g.unscale(scaler.inverse()).float().into_data().convert::<f32>().into_vec().unwrap();
            assert_eq!(finite, [1.0], "no overflow at this scale");
            g.into_params(&slots)
        }
    };
    model
        .layers
        .iter()
        .filter_map(|l| match l {
            Layer::Dense(d) => Some(grads.remove::<kynml_backend::Backend, 2>(d.weight.id).unwrap()),
            _ => None,
        })
        .map(|g| g.into_data().convert::<f32>().into_vec::<f32>().unwrap())
        .collect()
}

#[test]
fn fp16_gradients_underflow_without_loss_scaling_and_the_scaler_fixes_it() {
    use burn::tensor::{FloatDType, Tensor, TensorData};
    use kynml_core::model::{Mode, Model};
    let seed = clock_seed();
    let tmp = tempfile::tempdir().unwrap();
    let path = random_regression_spec(tmp.path(), seed, " dense 32 tanh\n dense 16 tanh\n dense 1 linear");
    let file = SpecFile::load(&path).unwrap();
    let cpu = select(DeviceChoice::Cpu).unwrap();
    let model = Model::init(&file.spec.model, seed, &cpu.autodiff());
    // Targets within 1e-5 of what the model predicts: late in training, a
    // good fit leaves residuals this small, and the loss gradient 2r/n
    // falls below fp16's smallest subnormal (6e-8) in the fp16 products.
    let mut rng = kynml_core::rng::SplitMix64::new(seed);
    let n = 64;
    let x: Vec<f32> = (0..n * 6).map(|_| rng.uniform(-2.0, 2.0) as f32).collect();
    let xt = Tensor::<kynml_backend::Backend, 2>::from_data(TensorData::new(x.clone(), [n, 6]), &cpu.autodiff());
    let pred: Vec<f32> =
        model.forward_in(xt, Mode::Eval, Some(FloatDType::F16)).into_data().convert::<f32>().into_vec().unwrap();
    let residual: Vec<f32> = (0..n).map(|_| rng.uniform(-1e-5, 1e-5) as f32).collect();
    let y: Vec<f32> = pred.iter().zip(&residual).map(|(p, r)| p - r).collect();

    // The reference: the same loss gradient (2r/n per row) carried back in fp32.
    let upstream: Vec<f32> = residual.iter().map(|r| 2.0 * r / n as f32).collect();
    let fp32 = dense_grads(&model, &x, &upstream, true, None, None);
    let plain = dense_grads(&model, &x, &y, false, Some(FloatDType::F16), None);
    let scaled = dense_grads(&model, &x, &y, false, Some(FloatDType::F16), Some(65536.0));
    let nonzero = |g: &[f32]| g.iter().filter(|v| **v != 0.0).count();
    let rel = |a: &[f32], b: &[f32]| {
        let norm = b.iter().map(|v| v * v).sum::<f32>().sqrt();
        a.iter().zip(b).map(|(p, q)| (p - q) * (p - q)).sum::<f32>().sqrt() / norm
    };
    for (layer, ((f, p), s)) in fp32.iter().zip(&plain).zip(&scaled).enumerate() {
        eprintln!(
            "dense {layer} (seed {seed}): nonzero grads fp32 {}/{}, fp16 {}, fp16 scaled {}; scaled vs fp32 {:.2e} relative",
            nonzero(f),
            f.len(),
            nonzero(p),
            nonzero(s),
            rel(s, f)
        );
        assert!(nonzero(f) > f.len() / 2, "the fp32 gradient is alive");
        // fp16 keeps 11 significant bits; products of two rounded inputs
        // agree with fp32 to a few parts in a thousand.
        assert!(rel(s, f) < 2e-2, "dense {layer}: the scaled fp16 gradient should match fp32 (seed {seed})");
    }
    // Without scaling, part of the first layer's gradient underflows to zero
    // and what is left is wrong: that layer learns the wrong thing or nothing.
    // How many entries survive depends on the draw (most seeds leave under
    // half, some just over half), so the count is only required to fall
    // below fp32's. The error is what the scaler exists to fix: it must be
    // far beyond the 2e-2 the scaled gradient meets above.
    let (alive, error) = (nonzero(&plain[0]), rel(&plain[0], &fp32[0]));
    eprintln!("plain fp16, dense 0: {alive}/{} nonzero, {error:.2} relative error", plain[0].len());
    assert!(alive < nonzero(&fp32[0]), "plain fp16 should lose entries to underflow (seed {seed})");
    assert!(error > 0.5, "plain fp16 should be far from fp32 (seed {seed})");
}

#[test]
fn overflowing_steps_are_skipped_without_advancing_the_optimizer_and_the_scale_backs_off() {
    use kynml_core::spec::types::LossScale;
    use kynml_core::train::precision::{Compute, PrecisionPlan};
    let seed = clock_seed();
    let tmp = tempfile::tempdir().unwrap();
    let path = random_regression_spec(tmp.path(), seed, " dense 16 relu\n dense 1 linear");
    let spec = std::fs::read_to_string(&path).unwrap()
        + " checkpoint = checkpoint(every_n=1, path=\"s.ckpt\")\n loss_scale = dynamic(init=1e12, backoff=0.001, interval=5)\n";
    std::fs::write(&path, spec).unwrap();
    let mut file = SpecFile::load(&path).unwrap();
    let data = file.load_data().unwrap();
    let cpu = select(DeviceChoice::Cpu).unwrap();
    let LossScale::Dynamic { init, .. } = file.spec.train.loss_scale.value else { panic!("parsed") };
    let plan = PrecisionPlan::forced(Compute::Fp16, file.spec.train.loss_scale.value);
    let settings =
        TrainSettings { precision: Some(plan), checkpoint_path: file.checkpoint_path(), ..TrainSettings::default() };
    let result = train(&file.spec, &data, &cpu, &settings, &mut |_| {}).unwrap();
    let skipped: usize = result.history.iter().map(|r| r.skipped_steps).sum();
    let scales: Vec<f64> = result.history.iter().map(|r| r.loss_scale.unwrap()).collect();
    eprintln!("skipped {skipped} steps; scale per epoch {scales:?} (seed {seed})");
    // 1e12 times the loss overflows fp16 in the backward pass: the first
    // steps are skipped and the scale is cut by 1000 each time.
    assert!(skipped >= 1 && result.history[0].skipped_steps == skipped, "only the first steps overflow");
    assert!(scales[0] < init, "{scales:?}");
    assert!(result.history.iter().all(|r| r.train_loss.is_finite()), "skipped losses stay out of the mean");
    // Five finite steps in a row grow it again (interval = 5, growth 2).
    assert!(scales.windows(2).any(|w| w[1] > w[0]), "{scales:?}");
    // The optimizer took exactly the steps that were not skipped.
    let (_, state) = file.find_checkpoint(&data).unwrap().unwrap();
    let batches = data.train.len().div_ceil(file.spec.train.batch.value) * file.spec.train.epochs.value;
    assert_eq!(state.steps as usize + skipped, batches);
    // Each skip cut the scale by 1000; every 5 finite steps in a row doubled it.
    let expected = init * 0.001f64.powi(skipped as i32) * 2f64.powi(((batches - skipped) / 5) as i32);
    let last = *scales.last().unwrap();
    // The scale is an f32 on the device, as GradScaler's: a few roundings.
    assert!((last - expected).abs() <= 1e-6 * expected, "final scale {last}, expected {expected}");
    assert_eq!(state.loss_scale.map(|s| s.scale), scales.last().copied());
}

/// `fused = true` runs KynML's one-pass update on Burn's devices, and under
/// loss scaling the overflow skip stays on the device (per parameter or
/// fused). In fp32 the fused update lands where Burn's optimizers land, on
/// flex and on wgpu; under fp16 with a scale that overflows the first
/// steps, per parameter and fused give the same bits on the CPU, skip the
/// same steps, and a run resumed from a checkpoint ends bit-identical.
#[test]
fn the_fused_update_and_the_device_side_overflow_skip_train_alike_and_resume_exactly() {
    use kynml_core::train::precision::{Compute, PrecisionPlan};
    use kynml_core::train::EngineChoice;
    let seed = clock_seed();
    let tmp = tempfile::tempdir().unwrap();
    let path = random_regression_spec(tmp.path(), seed, " dense 24 gelu\n layernorm\n dense 12 tanh\n dense 1 linear");
    let base = std::fs::read_to_string(&path).unwrap();
    let cpu = select(DeviceChoice::Cpu).unwrap();
    let wgpu = select(DeviceChoice::Wgpu).expect("no Vulkan adapter: run scripts/setup-lavapipe.sh");
    let run_as = |optimizer: &str,
                  extra: &str,
                  device: &Device,
                  fp16: bool,
                  epochs: usize,
                  resume: bool,
                  update: Option<kynml_core::train::update::Update>| {
        let text = base.replace("optimizer = adamw(lr=0.01)", &format!("optimizer = {optimizer}"));
        std::fs::write(&path, format!("{text}{extra}")).unwrap();
        let mut file = SpecFile::load(&path).unwrap();
        file.apply(&Overrides { epochs: Some(epochs), ..Overrides::default() });
        let data = file.load_data().unwrap();
        let precision = fp16.then(|| PrecisionPlan::forced(Compute::Fp16, file.spec.train.loss_scale.value));
        let resume_from = if resume { file.find_checkpoint(&data).unwrap().map(|(c, _)| c) } else { None };
        assert_eq!(resume_from.is_some(), resume, "a checkpoint to resume from");
        let settings = TrainSettings {
            engine: EngineChoice::Burn,
            precision,
            checkpoint_path: file.checkpoint_path(),
            resume_from,
            // A run that does not resume starts over at the path.
            fresh: !resume,
            update,
            ..TrainSettings::default()
        };
        train(&file.spec, &data, device, &settings, &mut |_| {}).unwrap()
    };
    let run = |optimizer: &str, extra: &str, device: &Device, fp16: bool, epochs: usize, resume: bool| {
        run_as(optimizer, extra, device, fp16, epochs, resume, None)
    };
    for device in [&cpu, &wgpu] {
        fused_trains_like_burns_optimizer(device, seed, 1e-4);
    }
    // A scale of 1e12 overflows fp16 at first; each overflow cuts it 1000-fold.
    let scaled = " loss_scale = dynamic(init=1e12, backoff=0.001, interval=5)\n \
                  checkpoint = checkpoint(every_n=1, path=\"f.ckpt\")\n";
    let per = run("adamw(lr=0.01)", scaled, &cpu, true, 4, false);
    let fused = run("adamw(lr=0.01, fused=true)", scaled, &cpu, true, 4, false);
    let skipped = |r: &kynml_core::train::TrainResult| r.history.iter().map(|e| e.skipped_steps).sum::<usize>();
    assert!(skipped(&per) >= 1, "the first steps overflow (seed {seed})");
    assert_eq!(skipped(&per), skipped(&fused), "seed {seed}");
    assert!(all_weights(&per.model) == all_weights(&fused.model), "per parameter and fused part (seed {seed})");
    assert!(fused.history.iter().all(|e| e.train_loss.is_finite()), "skipped losses stay out of the mean");
    let last = std::fs::read(tmp.path().join("f.ckpt")).unwrap();
    // Burn's AdamW, skipping on the host after reading each step's flag:
    // the same steps skipped, the same scale, and weights to Adam's rounding.
    let host = run_as("adamw(lr=0.01)", scaled, &cpu, true, 4, false, Some(kynml_core::train::update::Update::Burn));
    assert_eq!(skipped(&host), skipped(&per), "seed {seed}");
    let scales = |r: &kynml_core::train::TrainResult| r.history.iter().map(|e| e.loss_scale).collect::<Vec<_>>();
    assert_eq!(scales(&host), scales(&per), "seed {seed}");
    let worst = worst_difference(&all_weights(&host.model), &all_weights(&per.model));
    eprintln!("fp16: {} steps skipped; the device-side skip {worst:.1e} from Burn's (seed {seed})", skipped(&per));
    // fp16 products turn Adam's rounding (1e-6 in fp32) into jumps of their
    // own: 30 seeds measured up to 4.8e-5; a step taken or skipped wrongly
    // moves weights by about the learning rate, 1e-2.
    assert!(worst <= 5e-4, "the device-side skip is {worst} from the host-side one (seed {seed})");
    run("adamw(lr=0.01, fused=true)", scaled, &cpu, true, 2, false);
    let resumed = run("adamw(lr=0.01, fused=true)", scaled, &cpu, true, 4, true);
    assert_eq!(resumed.history.len(), 4);
    assert!(
        std::fs::read(tmp.path().join("f.ckpt")).unwrap() == last,
        "the resumed fused run went elsewhere (seed {seed})"
    );
}

#[test]
fn an_interrupted_epoch_resumes_where_it_stopped_and_ends_bit_identical() {
    use kynml_core::train::{TrainError, TrainEvent};
    use std::sync::atomic::{AtomicBool, Ordering};
    let seed = clock_seed();
    let tmp = tempfile::tempdir().unwrap();
    let whole = checkpointed_spec(tmp.path(), seed, "optimizer = adamw(lr=0.01)", "whole.ckpt", true);
    run_to(&whole, 6, false);

    let cut = checkpointed_spec(tmp.path(), seed, "optimizer = adamw(lr=0.01)", "cut.ckpt", true);
    let mut file = SpecFile::load(&cut).unwrap();
    file.apply(&Overrides { epochs: Some(6), ..Overrides::default() });
    let data = file.load_data().unwrap();
    let cpu = select(DeviceChoice::Cpu).unwrap();
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    // Profiled: what was profiled up to the stop comes back with it.
    let settings = TrainSettings {
        checkpoint_path: file.checkpoint_path(),
        stop: Some(stop.clone()),
        profile: true,
        ..TrainSettings::default()
    };
    let ck = file.checkpoint_path().unwrap();
    let outcome = train(&file.spec, &data, &cpu, &settings, &mut |event| {
        // The epoch-2 checkpoint, written in the background, is on disk
        // before the last step: on a busy machine its writer may otherwise
        // start after the steps end, where the stop's save would.
        if let TrainEvent::Step { epoch: 3, step: 1, .. } = event {
            let waited = std::time::Instant::now();
            let epoch =
                || kynml_core::checkpoint::load(&ck).ok().flatten().and_then(|c| c.state_value()["epoch"].as_u64());
            while epoch() != Some(2) && waited.elapsed() < std::time::Duration::from_secs(60) {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            assert_eq!(epoch(), Some(2), "seed {seed}: the epoch-2 checkpoint was not written in a minute");
        }
        if let TrainEvent::Step { epoch: 3, step: 2, .. } = event {
            stop.store(true, Ordering::SeqCst); // as Ctrl-C would
        }
    });
    match outcome {
        Err(TrainError::Interrupted { epoch: 3, step: 3, checkpoint: Some(path), model, profile, .. }) => {
            assert!(path.ends_with("cut.ckpt"));
            // The epoch-2 checkpoint, written in the background, with the
            // writer's time (the save at the stop is not one of the run's).
            let profile = profile.expect("a profile");
            let saves: Vec<_> = profile.checkpoints.iter().map(|c| (c.epoch, c.write.is_some())).collect();
            assert_eq!(saves, [(2, true)], "seed {seed}");
            // Its own write, not the stop's save (which began after the last step).
            let last = profile.steps.last().map(|s| s.start + s.wait + s.total).unwrap();
            assert!(profile.checkpoints[0].write.unwrap().0 < last, "seed {seed}: the stop's save was taken for it");
            // The weights reached come back with the interruption: those
            // the checkpoint holds.
            let saved = kynml_core::checkpoint::load(&path).unwrap().unwrap().tensors;
            let prefix = kynml_core::train::resume::MODEL_PREFIX;
            let saved: Vec<_> = saved.into_iter().filter(|t| t.name.starts_with(prefix)).collect();
            assert!(!saved.is_empty() && model.tensors(prefix) == saved, "seed {seed}");
        }
        other => panic!("expected an interruption at epoch 3, step 3, got {:?}", other.map(|r| r.history.len())),
    }
    let (_, state) = file.find_checkpoint(&data).unwrap().unwrap();
    assert_eq!((state.epoch, state.partial.as_ref().map(|p| p.steps)), (2, Some(3)));
    // Its weights have taken steps of epoch 3: they are not a 2-epoch model.
    let mut two = SpecFile::load(&cut).unwrap();
    two.apply(&Overrides { epochs: Some(2), ..Overrides::default() });
    let settings = two.train_settings(&data, false).unwrap();
    match train(&two.spec, &data, &cpu, &settings, &mut |_| {}) {
        Err(TrainError::Resume(kynml_core::train::resume::ResumeError::PartwayPastTheEnd {
            epoch: 2,
            steps: 3,
            epochs: 2,
        })) => {}
        other => panic!("{:?}", other.map(|r| r.history.len())),
    }
    drop(settings);

    let resumed = run_to(&cut, 6, true);
    assert_eq!(resumed.history.len(), 6);
    let bytes = |name: &str| std::fs::read(tmp.path().join(name)).unwrap();
    assert!(bytes("whole.ckpt") == bytes("cut.ckpt"), "seed {seed}: the resumed run ends elsewhere");
}

/// A stop asked for between epochs (Ctrl-C during the evaluation) stops at
/// the boundary: no step of the next epoch, the checkpoint that epoch's
/// end, and a resume from it ends bit-identical to a run never stopped.
#[test]
fn a_stop_between_epochs_takes_no_step_of_the_next_and_resumes_bit_identical() {
    use kynml_core::train::{TrainError, TrainEvent};
    use std::sync::atomic::{AtomicBool, Ordering};
    let seed = clock_seed();
    let tmp = tempfile::tempdir().unwrap();
    let whole = checkpointed_spec(tmp.path(), seed, "optimizer = adamw(lr=0.01)", "whole.ckpt", true);
    run_to(&whole, 4, false);
    let cut = checkpointed_spec(tmp.path(), seed, "optimizer = adamw(lr=0.01)", "cut.ckpt", true);
    let mut file = SpecFile::load(&cut).unwrap();
    file.apply(&Overrides { epochs: Some(4), ..Overrides::default() });
    let data = file.load_data().unwrap();
    let cpu = select(DeviceChoice::Cpu).unwrap();
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let settings =
        TrainSettings { checkpoint_path: file.checkpoint_path(), stop: Some(stop.clone()), ..TrainSettings::default() };
    let mut steps_of_3 = 0;
    let outcome = train(&file.spec, &data, &cpu, &settings, &mut |event| match event {
        // After epoch 2's last step: as a Ctrl-C during its evaluation would.
        TrainEvent::EpochEnd(record) if record.epoch == 2 => stop.store(true, Ordering::SeqCst),
        TrainEvent::Step { epoch: 3, .. } => steps_of_3 += 1,
        _ => {}
    });
    assert!(
        matches!(outcome, Err(TrainError::Interrupted { epoch: 3, step: 0, checkpoint: Some(_), .. })),
        "seed {seed}"
    );
    assert_eq!(steps_of_3, 0, "no step of epoch 3 was taken");
    let (_, state) = file.find_checkpoint(&data).unwrap().unwrap();
    assert_eq!((state.epoch, state.partial.is_none()), (2, true), "the end of epoch 2");
    let resumed = run_to(&cut, 4, true);
    assert_eq!(resumed.history.len(), 4);
    let bytes = |name: &str| std::fs::read(tmp.path().join(name)).unwrap();
    assert!(bytes("whole.ckpt") == bytes("cut.ckpt"), "seed {seed}: the resumed run ends elsewhere");
}

/// A stop asked for during an epoch's validation cuts the validation short
/// (a split of many rows is not waited for): the run stops as after the
/// epoch's last step, with no record of that epoch, and a resume validates
/// it and ends bit-identical to a run never stopped, on either engine.
#[test]
fn a_stop_during_validation_cuts_it_short_and_resumes_bit_identical() {
    use kynml_core::train::{EngineChoice, TrainError, TrainEvent};
    use std::sync::atomic::{AtomicBool, Ordering};
    let seed = clock_seed();
    let tmp = tempfile::tempdir().unwrap();
    let cpu = select(DeviceChoice::Cpu).unwrap();
    for (i, engine) in [EngineChoice::Auto, EngineChoice::Burn].into_iter().enumerate() {
        let spec = |ckpt: &str| {
            let path = checkpointed_spec(tmp.path(), seed, "optimizer = adamw(lr=0.01)", ckpt, true);
            let named = tmp.path().join(format!("{ckpt}.kyn"));
            std::fs::rename(&path, &named).unwrap();
            named
        };
        let (whole_ckpt, cut_ckpt) = (format!("{i}-whole.ckpt"), format!("{i}-cut.ckpt"));
        let whole = spec(&whole_ckpt);
        run_to_on(&whole, 4, false, engine);
        let cut = spec(&cut_ckpt);
        let mut file = SpecFile::load(&cut).unwrap();
        file.apply(&Overrides { epochs: Some(4), ..Overrides::default() });
        let data = file.load_data().unwrap();
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let settings = TrainSettings {
            checkpoint_path: file.checkpoint_path(),
            stop: Some(stop.clone()),
            engine,
            ..TrainSettings::default()
        };
        let mut ended = Vec::new();
        let outcome = train(&file.spec, &data, &cpu, &settings, &mut |event| match event {
            // Epoch 2's last step is done, its validation next: as a Ctrl-C there.
            TrainEvent::Step { epoch: 2, step, steps, .. } if step == steps => stop.store(true, Ordering::SeqCst),
            TrainEvent::EpochEnd(record) => ended.push(record.epoch),
            _ => {}
        });
        let steps = match outcome {
            Err(TrainError::Interrupted { epoch: 2, step, checkpoint: Some(_), .. }) => step,
            Err(e) => panic!("{engine:?}, seed {seed}: {e}"),
            Ok(_) => panic!("{engine:?}, seed {seed}: not stopped"),
        };
        assert_eq!(ended, [1], "{engine:?}: epoch 2's validation was cut short");
        let (_, state) = file.find_checkpoint(&data).unwrap().unwrap();
        let partial = state.partial.as_ref().expect("saved inside epoch 2");
        assert_eq!((state.epoch, partial.steps), (1, steps), "{engine:?}: every step of epoch 2 done");
        let resumed = run_to_on(&cut, 4, true, engine);
        assert_eq!(resumed.history.len(), 4);
        // Epoch 2 took no step in the resumed run: no speed (it said 0 samples/s).
        assert!(resumed.history[1].samples_per_sec.is_nan(), "{:?}", resumed.history[1]);
        assert!(resumed.history[2].samples_per_sec > 0.0, "{:?}", resumed.history[2]);
        let bytes = |name: &Path| std::fs::read(name).unwrap();
        assert!(
            bytes(&tmp.path().join(&whole_ckpt)) == bytes(&tmp.path().join(&cut_ckpt)),
            "{engine:?}, seed {seed}: the resumed run ends elsewhere"
        );
    }
}

/// A `checkpoint_activations` run on Burn resumes, from an epoch's end and
/// from inside one, and ends bit-identical to a run never stopped, for an
/// optimizer with state and under clipping, fused or not: restored optimizer
/// state and the resumed norm sum carry the autodiff device's checkpointing
/// mark, which Burn requires of tensors added together (the first step
/// after such a resume panicked).
#[test]
fn checkpointed_activations_resume_bit_identical() {
    use kynml_core::train::{EngineChoice, TrainEvent};
    use std::sync::atomic::{AtomicBool, Ordering};
    let seed = clock_seed();
    let tmp = tempfile::tempdir().unwrap();
    let cpu = select(DeviceChoice::Cpu).unwrap();
    for (i, optimizer) in ["sgd(lr=0.05, momentum=0.9)", "adamw(lr=0.01, fused=true)"].into_iter().enumerate() {
        let spec = |ckpt: &str| {
            let path = checkpointed_spec(tmp.path(), seed, &format!("optimizer = {optimizer}"), ckpt, false);
            let text =
                std::fs::read_to_string(&path).unwrap() + " checkpoint_activations = true\n clip_grad_norm = 0.5\n";
            let named = tmp.path().join(format!("{i}-{ckpt}.kyn"));
            std::fs::write(&named, text).unwrap();
            named
        };
        let whole = spec("whole.ckpt");
        run_to_on(&whole, 4, false, EngineChoice::Burn);
        // Stopped at epoch 3's second step, then resumed to the end.
        let cut = spec("cut.ckpt");
        let mut file = SpecFile::load(&cut).unwrap();
        file.apply(&Overrides { epochs: Some(4), ..Overrides::default() });
        let data = file.load_data().unwrap();
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let settings = TrainSettings {
            checkpoint_path: file.checkpoint_path(),
            stop: Some(stop.clone()),
            engine: EngineChoice::Burn,
            ..TrainSettings::default()
        };
        let outcome = train(&file.spec, &data, &cpu, &settings, &mut |event| {
            if let TrainEvent::Step { epoch: 3, step: 2, .. } = event {
                stop.store(true, Ordering::SeqCst);
            }
        });
        assert!(outcome.is_err(), "seed {seed}, {optimizer}: interrupted");
        run_to_on(&cut, 4, true, EngineChoice::Burn);
        let bytes = |name: &str| std::fs::read(tmp.path().join(name)).unwrap();
        assert!(bytes("whole.ckpt") == bytes("cut.ckpt"), "seed {seed}, {optimizer}: the resumed run ends elsewhere");
        for f in ["whole.ckpt", "cut.ckpt"] {
            for p in [tmp.path().join(f)].into_iter().chain((1..3).map(|n| tmp.path().join(format!("{f}.{n}")))) {
                let _ = std::fs::remove_file(p);
            }
        }
    }
}

/// A stop between epochs, after the last epoch's end was saved by the
/// rule or resumed from, keeps that checkpoint as it is: saving it again
/// pushed the oldest of the `keep` copies out with a second copy of the
/// newest.
#[test]
fn a_stop_after_an_epochs_save_keeps_every_older_copy() {
    use kynml_core::train::{TrainError, TrainEvent};
    use std::sync::atomic::{AtomicBool, Ordering};
    let seed = clock_seed();
    for async_save in [false, true] {
        let tmp = tempfile::tempdir().unwrap();
        let path = checkpointed_spec(tmp.path(), seed, "optimizer = adamw(lr=0.01)", "kept.ckpt", async_save);
        let text = std::fs::read_to_string(&path).unwrap().replace("every_n=2", "every_n=1");
        std::fs::write(&path, text).unwrap();
        let mut file = SpecFile::load(&path).unwrap();
        file.apply(&Overrides { epochs: Some(6), ..Overrides::default() });
        let data = file.load_data().unwrap();
        let cpu = select(DeviceChoice::Cpu).unwrap();
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let ck = file.checkpoint_path().unwrap();
        let settings =
            TrainSettings { checkpoint_path: Some(ck.clone()), stop: Some(stop.clone()), ..TrainSettings::default() };
        let outcome = train(&file.spec, &data, &cpu, &settings, &mut |event| {
            if let TrainEvent::CheckpointSaved { epoch: 4, .. } = event {
                stop.store(true, Ordering::SeqCst);
            }
        });
        let Err(TrainError::Interrupted { epoch: 5, checkpoint, .. }) = outcome else {
            panic!("async {async_save}: {:?}", outcome.map(|_| ()))
        };
        assert_eq!(checkpoint.as_deref(), Some(ck.as_path()), "async {async_save}");
        let epoch_of = |p: PathBuf| {
            let c = kynml_core::checkpoint::load(&p).unwrap().unwrap_or_else(|| panic!("{} is missing", p.display()));
            c.state_value()["epoch"].as_u64()
        };
        let copy = |n: usize| PathBuf::from(format!("{}.{n}", ck.display()));
        let epochs = [epoch_of(ck.clone()), epoch_of(copy(1)), epoch_of(copy(2))];
        assert_eq!(epochs, [Some(4), Some(3), Some(2)], "async {async_save}, seed {seed}");
        // Resumed from it and stopped again before a step (a job pre-empted
        // as it starts): the checkpoint there is what it would save, and is
        // kept, with every older copy; twice, all three copies were epoch 4.
        for _ in 0..2 {
            let resumed = TrainSettings {
                checkpoint_path: Some(ck.clone()),
                resume_from: kynml_core::checkpoint::load(&ck).unwrap(),
                stop: Some(std::sync::Arc::new(AtomicBool::new(true))),
                ..TrainSettings::default()
            };
            let outcome = train(&file.spec, &data, &cpu, &resumed, &mut |_| {});
            let Err(TrainError::Interrupted { epoch: 5, step: 0, checkpoint, .. }) = outcome else {
                panic!("async {async_save}: {:?}", outcome.map(|_| ()))
            };
            assert_eq!(checkpoint.as_deref(), Some(ck.as_path()), "async {async_save}");
            let epochs = [epoch_of(ck.clone()), epoch_of(copy(1)), epoch_of(copy(2))];
            assert_eq!(epochs, [Some(4), Some(3), Some(2)], "resumed, async {async_save}, seed {seed}");
        }
    }
}

/// An epoch interrupted at one batch size and resumed at another goes on
/// from the first row its done steps did not take (the steps left are those
/// of the rows left), not after as many steps of the new batch.
#[test]
fn an_interrupted_epoch_resumed_with_another_batch_goes_on_from_its_row() {
    use kynml_core::train::{TrainError, TrainEvent};
    use std::sync::atomic::{AtomicBool, Ordering};
    let seed = clock_seed();
    let tmp = tempfile::tempdir().unwrap();
    let path = checkpointed_spec(tmp.path(), seed, "optimizer = adamw(lr=0.01)", "cut.ckpt", false);
    let mut file = SpecFile::load(&path).unwrap();
    file.apply(&Overrides { epochs: Some(3), ..Overrides::default() });
    let data = file.load_data().unwrap();
    let (n, batch) = (data.train.len(), file.spec.train.batch.value);
    let cpu = select(DeviceChoice::Cpu).unwrap();
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let settings =
        TrainSettings { checkpoint_path: file.checkpoint_path(), stop: Some(stop.clone()), ..TrainSettings::default() };
    let outcome = train(&file.spec, &data, &cpu, &settings, &mut |event| {
        if let TrainEvent::Step { epoch: 2, step: 2, .. } = event {
            stop.store(true, Ordering::SeqCst);
        }
    });
    assert!(matches!(outcome, Err(TrainError::Interrupted { epoch: 2, step: 3, .. })), "seed {seed}");
    let (ckpt, state) = file.find_checkpoint(&data).unwrap().unwrap();
    assert_eq!(state.partial.as_ref().map(|p| (p.steps, p.rows)), Some((3, Some(3 * batch))));

    // The same run at twice the batch: epoch 2 goes on at row 3 x batch.
    let mut twice = file.spec.clone();
    twice.train.batch.value = 2 * batch;
    let settings =
        TrainSettings { checkpoint_path: file.checkpoint_path(), resume_from: Some(ckpt), ..TrainSettings::default() };
    let (mut steps, mut numbered) = (None, Vec::new());
    let result = train(&twice, &data, &cpu, &settings, &mut |event| match event {
        TrainEvent::EpochStart { epoch: 2, steps: s, .. } => steps = Some(s),
        TrainEvent::Step { epoch: 2, step, .. } => numbered.push(step),
        _ => {}
    })
    .unwrap();
    // batchnorm: a last batch under 2 rows is dropped.
    let rest = n - 3 * batch;
    let left = rest / (2 * batch) + usize::from(rest % (2 * batch) >= 2);
    assert_eq!(steps, Some(3 + left), "seed {seed}: {n} rows, batch {batch}");
    assert_eq!(numbered, (4..=3 + left).collect::<Vec<_>>());
    let epoch2 = &result.history[1];
    assert!(epoch2.train_loss.is_finite() && epoch2.samples_per_sec.is_finite(), "{epoch2:?}");
}

/// A batchnorm after a convolution averages each channel over the map's
/// positions too, so an epoch's last batch of one row trains (PyTorch's
/// `BatchNorm2d` takes it) on the native engine and on Burn's, where a
/// batchnorm over plain features leaves it out.
#[test]
fn a_lone_last_row_trains_through_a_convolutions_batchnorm() {
    use kynml_core::train::{EngineChoice, TrainEvent};
    let seed = clock_seed();
    let tmp = tempfile::tempdir().unwrap();
    let cpu = select(DeviceChoice::Cpu).unwrap();
    for (layers, kept) in [
        (" input 1x2x3\n conv2d 4 2 relu padding=1\n batchnorm\n flatten\n dense 1 linear", true),
        (" input 2x3\n conv1d 4 2 tanh padding=1\n batchnorm\n global_avgpool\n dense 1 linear", true),
        (" dense 8 relu\n batchnorm\n dense 1 linear", false),
    ] {
        let path = random_regression_spec(tmp.path(), seed, layers);
        let mut file = SpecFile::load(&path).unwrap();
        file.apply(&Overrides { epochs: Some(1), ..Overrides::default() });
        let data = file.load_data().unwrap();
        file.spec.train.batch.value = data.train.len() - 1;
        for engine in [EngineChoice::Auto, EngineChoice::Burn] {
            let settings = TrainSettings { engine, ..TrainSettings::default() };
            let (mut planned, mut taken) = (0, 0);
            let result = train(&file.spec, &data, &cpu, &settings, &mut |event| match event {
                TrainEvent::EpochStart { steps, .. } => planned = steps,
                TrainEvent::Step { .. } => taken += 1,
                _ => {}
            })
            .unwrap();
            let expected = if kept { 2 } else { 1 };
            assert_eq!((planned, taken), (expected, expected), "{layers:?} on {engine:?} (seed {seed})");
            assert!(result.history[0].train_loss.is_finite(), "{layers:?} on {engine:?}: {:?}", result.history);
        }
    }
}

/// With batchnorm, an epoch's last batch of one row is dropped; an epoch
/// interrupted just before it resumes to nothing, not to a one-row step.
#[test]
fn a_resume_before_a_dropped_lone_row_has_no_step_left() {
    use kynml_core::train::{TrainError, TrainEvent};
    use std::sync::atomic::{AtomicBool, Ordering};
    let tmp = tempfile::tempdir().unwrap();
    let path = checkpointed_spec(tmp.path(), 5, "optimizer = adamw(lr=0.01)", "lone.ckpt", false);
    let mut file = SpecFile::load(&path).unwrap();
    file.apply(&Overrides { epochs: Some(3), ..Overrides::default() });
    let data = file.load_data().unwrap();
    // One batch and one row left over: the row is dropped (batchnorm).
    file.spec.train.batch.value = data.train.len() - 1;
    let cpu = select(DeviceChoice::Cpu).unwrap();
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let settings =
        TrainSettings { checkpoint_path: file.checkpoint_path(), stop: Some(stop.clone()), ..TrainSettings::default() };
    // Asked for as epoch 2 begins (its boundary already passed): it stops
    // after that epoch's one step.
    let outcome = train(&file.spec, &data, &cpu, &settings, &mut |event| {
        if let TrainEvent::EpochStart { epoch: 2, .. } = event {
            stop.store(true, Ordering::SeqCst);
        }
    });
    assert!(matches!(outcome, Err(TrainError::Interrupted { epoch: 2, step: 1, .. })), "{:?}", outcome.err());
    let (ckpt, _) = file.find_checkpoint(&data).unwrap().unwrap();
    let settings =
        TrainSettings { checkpoint_path: file.checkpoint_path(), resume_from: Some(ckpt), ..TrainSettings::default() };
    let (mut steps, mut taken) = (None, 0);
    let result = train(&file.spec, &data, &cpu, &settings, &mut |event| match event {
        TrainEvent::EpochStart { epoch: 2, steps: s, .. } => steps = Some(s),
        TrainEvent::Step { epoch: 2, .. } => taken += 1,
        _ => {}
    })
    .unwrap();
    assert_eq!((steps, taken), (Some(1), 0), "the lone row is not a step of its own");
    assert!(result.history.iter().all(|r| r.train_loss.is_finite()));
}

// ---- a catalogue of malformed CSV files ----

/// Every file in `tests/bad_csvs/cases.txt` is refused with a message that
/// names the file, and the line and column where there is one; the message
/// is compared with `NAME.stderr` (`KYNML_BLESS=1` rewrites them).
#[test]
fn malformed_csvs_are_refused_with_located_messages() {
    use kynml_core::data::{read_csv, Dataset, TableOptions};
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/bad_csvs");
    let cases = std::fs::read_to_string(dir.join("cases.txt")).unwrap();
    let bless = std::env::var_os("KYNML_BLESS").is_some();
    let mut checked = 0;
    let mut mismatches = Vec::new();
    for line in cases.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
        let [name, target, kind] = line.split_whitespace().collect::<Vec<_>>()[..] else {
            panic!("bad case line {line}")
        };
        let options = TableOptions { target: target.into(), classification: kind == "class", ..Default::default() };
        let path = dir.join(format!("{name}.csv"));
        let outcome = read_csv(&path, &options).and_then(|table| Dataset::from_table(table, 0.8, true, 1));
        let Err(error) = outcome else { panic!("{name}.csv was accepted") };
        let message = error.to_string().replace(&dir.display().to_string(), "bad_csvs") + "\n";
        assert!(message.contains(&format!("bad_csvs/{name}.csv")) || message.contains("fraction"), "{name}: {message}");
        let expected_path = dir.join(format!("{name}.stderr"));
        if bless {
            std::fs::write(&expected_path, &message).unwrap();
        } else if std::fs::read_to_string(&expected_path).ok().as_deref() != Some(message.as_str()) {
            mismatches.push(format!("{name}:\n  got:      {message}"));
        }
        checked += 1;
    }
    assert!(mismatches.is_empty(), "messages changed (KYNML_BLESS=1 to accept):\n{}", mismatches.join("\n"));
    assert!(checked >= 20, "the catalogue holds {checked} files");
}

// ---- fuzz corpora ----

// `readings()`: the CSV readings the `csv` fuzz target tries, and
// `read_as_model_rows`, for the replay below.
include!("../../fuzz/readings.rs");

/// Every input the fuzzers kept (fuzz/corpus) goes through the same readers
/// as in the fuzz targets; none may panic.
#[test]
fn fuzz_corpora_replay_without_panics() {
    use kynml_core::data::{parse_csv, Dataset};
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus");
    let files = |target: &str| -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(root.join(target)).unwrap().map(|e| e.unwrap().path()).collect();
        v.sort();
        v
    };
    let mut counts = Vec::new();
    let mut model_rows = 0;
    for target in ["spec", "csv", "checkpoint"] {
        let inputs = files(target);
        assert!(!inputs.is_empty(), "fuzz/corpus/{target} is empty");
        for path in &inputs {
            let data = std::fs::read(path).unwrap();
            match target {
                "spec" => {
                    if let Ok(source) = std::str::from_utf8(&data) {
                        if let Err(e) = kynml_core::spec::parse_spec(source) {
                            let _ = kynml_core::spec::render("fuzz.kyn", source, &e.diagnostics);
                        }
                    }
                }
                "csv" => {
                    for options in readings() {
                        if let Ok(table) = parse_csv(path, &data, &options) {
                            if let Ok(dataset) = Dataset::from_table(table, 0.8, true, 1) {
                                read_as_model_rows(&data, &dataset);
                                model_rows += 1;
                            }
                        }
                    }
                }
                _ => {
                    let _ = kynml_core::checkpoint::decode(&data);
                    let _ = kynml_core::checkpoint::decode_safetensors(&data);
                }
            }
        }
        counts.push(format!("{target}: {}", inputs.len()));
    }
    eprintln!("replayed fuzz corpora: {}; {model_rows} read again as a model's rows", counts.join(", "));
    assert!(model_rows >= 100, "only {model_rows} corpus files trained a model to read rows for");
}

/// A small random problem for the engine comparison: six features and
/// either a number or one of `classes` labels to predict.
fn random_spec(dir: &Path, seed: u64, layers: &str, loss: &str, optimizer: &str, classes: usize) -> PathBuf {
    let mut rng = kynml_core::rng::SplitMix64::new(seed);
    let mut csv = String::from("a,b,c,d,e,f,y\n");
    for _ in 0..240 {
        let x: Vec<f64> = (0..6).map(|_| rng.uniform(-2.0, 2.0)).collect();
        let y = x[0] * 1.5 - x[1] * x[2] + (x[3] * 2.0).sin() + 0.3 * rng.uniform(-1.0, 1.0);
        let target = if classes == 0 {
            format!("{y:.6}")
        } else {
            // Cut points that give every class some rows.
            let class = ((y + 3.0) / 6.0 * classes as f64).clamp(0.0, classes as f64 - 1.0) as usize;
            format!("c{class}")
        };
        let row: Vec<String> = x.iter().map(|v| format!("{v:.6}")).chain([target]).collect();
        csv.push_str(&row.join(","));
        csv.push('\n');
    }
    std::fs::write(dir.join("data.csv"), csv).unwrap();
    let train = format!(
        " loss = {loss}\n optimizer = {optimizer}\n epochs = 4\n batch = 32\n seed = {seed}\nscheduler = cosine(t_max=4)\n"
    );
    write_spec(dir, layers, &train)
}

/// Trains the spec on the CPU with the native engine (what `auto` picks)
/// and with Burn's CPU backend, and checks that each engine really ran.
fn native_and_burn(
    file: &SpecFile,
    data: &kynml_core::data::Dataset,
    cpu: &Device,
) -> (kynml_core::train::TrainResult, kynml_core::train::TrainResult) {
    use kynml_core::train::{EngineChoice, EngineKind};
    let run = |engine| {
        let settings = TrainSettings { engine, ..TrainSettings::default() };
        train(&file.spec, data, cpu, &settings, &mut |_| {}).unwrap()
    };
    let (native, burn) = (run(EngineChoice::Auto), run(EngineChoice::Burn));
    assert_eq!((native.engine, burn.engine), (EngineKind::Native, EngineKind::Burn));
    (native, burn)
}

/// How far two models' weights part, relative to the largest weight of
/// `b`: the largest of each tensor's median gap (over tensors of 3 values
/// or more: a lone output bias's median is its one gap), and the worst gap
/// of all (NaN where either holds a NaN).
fn weight_gaps(
    a: &kynml_core::model::Model<kynml_backend::Backend>,
    b: &kynml_core::model::Model<kynml_backend::Backend>,
) -> (f32, f32) {
    let tensors = |m: &kynml_core::model::Model<kynml_backend::Backend>| -> Vec<Vec<f32>> {
        let state = m.layers.iter().flat_map(|layer| layer.state());
        state.map(|(_, data)| data.convert::<f32>().into_vec::<f32>().unwrap()).collect()
    };
    let (ta, tb) = (tensors(a), tensors(b));
    assert_eq!(ta.len(), tb.len(), "the models hold different tensors");
    let scale = tb.iter().flatten().fold(0.0f32, |m, w| worst32(m, w.abs()));
    let (mut typical, mut worst) = (0.0f32, 0.0f32);
    for (x, y) in ta.iter().zip(&tb) {
        assert_eq!(x.len(), y.len(), "a tensor's size differs");
        let mut gaps: Vec<f32> = x.iter().zip(y).map(|(p, q)| (p - q).abs() / scale).collect();
        worst = gaps.iter().fold(worst, |m, &g| worst32(m, g));
        if gaps.iter().any(|g| g.is_nan()) {
            typical = f32::NAN;
            continue;
        }
        if gaps.len() >= 3 {
            gaps.sort_by(f32::total_cmp);
            typical = worst32(typical, gaps[(gaps.len() - 1) / 2]);
        }
    }
    (typical, worst)
}

#[test]
fn native_cpu_engine_agrees_with_burn_on_every_layer_loss_and_optimizer() {
    let seed = clock_seed();
    let cpu = select(DeviceChoice::Cpu).unwrap();
    // Every activation, layer kind, loss and optimizer (with its options) at least once.
    let cases = [
        (
            " dense 32 gelu\n batchnorm\n dropout 0.2\n dense 16 tanh\n layernorm\n dense 1 linear",
            "mse",
            "adamw(lr=0.01)",
            0,
        ),
        (" dense 24 relu\n dense 12 silu\n dense 1 linear", "mae", "adam(lr=0.01, weight_decay=0.01)", 0),
        (
            " batchnorm\n dense 16 sigmoid\n dense 8 leaky_relu(0.2)\n dense 1 linear",
            "huber(0.5)",
            "sgd(lr=0.05, momentum=0.9, nesterov=true, weight_decay=0.001)",
            0,
        ),
        (
            " dense 32 tanh\n dropout 0.3\n batchnorm\n dense 3 linear",
            "cross_entropy",
            "rmsprop(lr=0.005, centered=true, momentum=0.5, weight_decay=0.001)",
            3,
        ),
        (" dense 16 relu\n layernorm\n dense 1 linear", "bce", "sgd(lr=0.1, momentum=0.5, dampening=0.1)", 2),
        (" dense 16 gelu\n dense 1 linear", "mse", "rmsprop(lr=0.005)", 0),
        // Convolutions with padding and stride, max pooling (overlapping
        // windows too), on images and on channels of a length.
        (
            " input 1x2x3\n conv2d 4 2 relu padding=1\n maxpool 2 stride=1\n conv2d 3 1 tanh\n flatten\n dense 1 linear",
            "mse",
            "adamw(lr=0.01)",
            0,
        ),
        (
            " input 2x3\n conv1d 4 2 gelu padding=1\n maxpool 2\n flatten\n dense 3 linear",
            "cross_entropy",
            "sgd(lr=0.05, momentum=0.9)",
            3,
        ),
        (" input 1x2x3\n conv2d 5 2 silu stride=2 padding=1\n flatten\n dense 1 linear", "mse", "adam(lr=0.01)", 0),
        (" input 1x2x3\n conv2d 4 2 relu padding=1\n avgpool 2 stride=1\n flatten\n dense 1 linear", "mse", "adamw(lr=0.01)", 0),
        (" input 2x3\n conv1d 4 1 tanh\n avgpool 2\n flatten\n dense 1 linear", "mse", "sgd(lr=0.05)", 0),
        // Batchnorm per channel, after 2-D and 1-D convolutions. (Not
        // straight after a linear convolution, nor after relu: batchnorm
        // cancels the bias of a linear convolution, and of a relu channel
        // that is active at every position of a batch, whose gradient is
        // then rounding noise, and Adam scales noise up to full steps: the
        // two engines' biases part by percents with the losses within 1e-3,
        // as measured, 1 seed in 81 with relu here. Nor tanh before max
        // pooling: saturated values are near-ties that rounding may order
        // either way, 1 seed in 82. gelu: 121 seeds within 1.7e-7 in loss,
        // 5.4e-7 in weights.)
        (
            " input 1x2x3\n conv2d 4 2 gelu padding=1\n batchnorm\n maxpool 2 stride=1\n flatten\n dense 1 linear",
            "mse",
            "adamw(lr=0.01)",
            0,
        ),
        (" input 2x3\n conv1d 3 2 tanh\n batchnorm\n global_avgpool\n dense 2 linear", "cross_entropy", "adam(lr=0.01)", 2),
        // Residual blocks: one that narrows through a projection (a linear
        // layer), with batchnorm and dropout inside; one that keeps the width.
        // (tanh before the batchnorm, not relu: where a relu unit is active
        // on every row of a batch, batchnorm cancels its bias as it does a
        // linear layer's, and Adam turns the bias's rounding-noise gradient
        // into full steps. With relu, 6 seeds in 40 parted by 4e-4 to 3e-3 in
        // loss while SGD agreed to 2e-7; with tanh, 60 seeds within 2.4e-7
        // in loss and 9.3e-7 in weights, as measured.)
        (
            " dense 12 tanh\n residual:\n  dense 12 tanh\n  batchnorm\n  dropout 0.2\n  dense 8 linear\n residual:\n  dense 8 gelu\n dense 1 linear",
            "mse",
            "adam(lr=0.01)",
            0,
        ),
        // ... and a 1x1 convolution as the projection, on channels.
        (
            " input 2x3\n residual:\n  conv1d 4 3 relu padding=1\n flatten\n dense 2 linear",
            "cross_entropy",
            "sgd(lr=0.05, momentum=0.9)",
            2,
        ),
    ];
    for (layers, loss, optimizer, classes) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let path = random_spec(tmp.path(), seed, layers, loss, optimizer, classes);
        let mut file = SpecFile::load(&path).unwrap();
        let data = file.load_data().unwrap();
        let (native, burn) = native_and_burn(&file, &data, &cpu);
        let gap = worst_loss_gap(&burn, &native);
        let (typical, weight_gap) = weight_gaps(&native.model, &burn.model);
        eprintln!(
            "native vs burn, {loss} / {optimizer}: worst relative loss gap {gap:.2e}, weights {weight_gap:.2e}, \
             worst tensor median {typical:.2e} (seed {seed})"
        );
        // Both are fp32, with different summation orders: over 4 epochs the
        // losses agree to about 1e-7 relative, and so do the weights (401
        // seeds of every case, measured); a wrong formula gives gaps of
        // percents. A few weights may part further, and the bound on the
        // worst one is loose for them: an adaptive optimizer's first steps
        // are about `lr * sign(g)`, so a weight whose gradient is rounding
        // noise at a step moves by ±lr as each engine's rounding says.
        // Measured on the centered RMSprop case: 2 seeds in 401 had one
        // weight 2e-4 and 7e-4 apart while the loss agreed within 8e-6 (it
        // is flat along that weight) and each tensor's median gap stayed
        // under 1.2e-5. So each tensor's median (of 3 values or more) is held to 1e-4 and the
        // worst weight to 5e-3.
        assert!(gap <= 1e-4, "{layers:?}, {loss}, {optimizer}: loss gap {gap} (seed {seed})");
        assert!(typical <= 1e-4, "{layers:?}, {loss}, {optimizer}: a tensor's median gap {typical} (seed {seed})");
        assert!(weight_gap <= 5e-3, "{layers:?}, {loss}, {optimizer}: weight gap {weight_gap} (seed {seed})");
        assert_eq!(native.history.len(), 4);
    }
}

// ---- image layers ----

/// The Burn forward of every image layer (in evaluation, after a training
/// pass has moved batchnorm's running statistics) against the reference
/// forward on the host that the exports are checked with: convolutions with
/// stride and padding, both poolings, per-channel batchnorm, on 1-D and 2-D
/// inputs.
#[test]
fn image_layers_match_the_reference_forward() {
    use kynml_core::data::DataInfo;
    use kynml_core::export;
    use kynml_core::model::{Mode, Model};
    let cpu = select(DeviceChoice::Cpu).unwrap();
    let seed = clock_seed();
    let cases = [
        ("2x7x6", " conv2d 4 3 relu padding=1\n batchnorm\n maxpool 2\n conv2d 3 2 gelu stride=2\n flatten\n dense 5 tanh"),
        ("3x11", " conv1d 4 3 silu stride=2\n batchnorm\n avgpool 2 stride=1\n conv1d 2 1 linear padding=same\n global_avgpool\n dense 2 linear"),
        ("1x6x6", " conv2d 2 3 leaky_relu(0.1)\n avgpool 2\n global_avgpool\n dense 3 sigmoid"),
        ("2x5x5", " conv2d 3 5 linear padding=2 stride=2\n maxpool 3 stride=1\n flatten\n dense 4 relu"),
        (
            "2x4x4",
            " conv2d 4 3 relu padding=1\n residual:\n  conv2d 4 3 relu padding=1\n  batchnorm\n residual:\n  conv2d 6 1 linear\n \
             global_avgpool\n residual:\n  dense 3 tanh\n dense 2 linear",
        ),
    ];
    for (i, (shape, layers)) in cases.into_iter().enumerate() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("spec.kyn");
        std::fs::write(
            &path,
            format!(
                "dataset D:\n source = csv(\"data.csv\")\n target = \"y\"\nmodel M:\n input {shape}\n{layers}\n\
                 train:\n model = M\n data = D\n loss = mse\n optimizer = adam(lr=0.01)\n epochs = 1\n batch = 8\n"
            ),
        )
        .unwrap();
        let file = SpecFile::load(&path).unwrap();
        let model = Model::init(&file.spec.model, seed + i as u64, &cpu.inner());
        let width = file.spec.model.input.value;
        let n = 9;
        let mut rng = kynml_core::rng::SplitMix64::new(seed ^ i as u64);
        let raw: Vec<f32> = (0..n * width).map(|_| rng.uniform(-2.0, 2.0) as f32).collect();
        let x = || {
            burn::tensor::Tensor::<kynml_backend::Backend, 2>::from_data(
                burn::tensor::TensorData::new(raw.clone(), [n, width]),
                &cpu.inner(),
            )
        };
        let _ = model.forward(x(), Mode::Train(&mut rng));
        let burn_out: Vec<f32> = model.forward(x(), Mode::Eval).into_data().convert::<f32>().into_vec().unwrap();
        let info = DataInfo {
            source: "data.csv".into(),
            feature_names: (0..width).map(|f| format!("p{f}")).collect(),
            target: "y".into(),
            class_names: None,
            normalizer: None,
            categories: Vec::new(),
            tokens: None,
            sequence: None,
            train_fraction: 0.8,
            seed: 0,
            train_rows: n,
            valid_rows: 0,
        };
        let exported = export::from_model(&model, &file.spec.model, &info, kynml_core::spec::types::Loss::Mse);
        exported.validate().unwrap();
        let reference = exported.forward(&raw).unwrap();
        assert_eq!(reference.len(), burn_out.len(), "{layers}");
        let worst =
            reference.iter().zip(&burn_out).map(|(a, b)| (a - b).abs() / a.abs().max(1.0)).fold(0.0f32, worst32);
        eprintln!("input {shape}: burn vs reference forward, worst scaled difference {worst:.2e} (seed {seed})");
        assert!(worst <= 1e-4, "input {shape} {layers}: {worst} (seed {seed})");
    }
}

// ---- gradient clipping ----

/// Clipping follows PyTorch's `clip_grad_norm_` and `clip_grad_value_` on
/// the same gradients, on both engines and on wgpu (where Burn's fused
/// `clamp` had failed to compile with a one-value bias beside wider
/// tensors: clipping by value panicked in the first step). One plain SGD step (the batch holds
/// every training row) moves each weight by `lr` times its gradient, so an
/// unclipped run gives the gradients, and from them the step a clipped run
/// must take: `g * min(1, max / (norm + 1e-6))`, or `g` clamped.
#[test]
fn gradient_clipping_matches_pytorchs_rules_on_both_engines_and_wgpu() {
    use kynml_core::model::Model;
    use kynml_core::train::EngineChoice;
    let seed = clock_seed();
    let tmp = tempfile::tempdir().unwrap();
    let path = random_regression_spec(tmp.path(), seed, " dense 8 tanh\n layernorm\n dense 1 linear");
    let base = std::fs::read_to_string(&path)
        .unwrap()
        .replace("optimizer = adamw(lr=0.01)", "optimizer = sgd(lr=0.5)")
        .replace("epochs = 4", "epochs = 1")
        .replace("batch = 32", "batch = 1024");
    let cpu = select(DeviceChoice::Cpu).unwrap();
    let wgpu = select(DeviceChoice::Wgpu).expect("no Vulkan adapter: run scripts/setup-lavapipe.sh");
    let lr = 0.5;
    // The native engine, Burn's optimizer, and KynML's fused update on Burn.
    for (device, engine, fused) in [
        (&cpu, EngineChoice::Auto, false),
        (&cpu, EngineChoice::Burn, false),
        (&cpu, EngineChoice::Burn, true),
        (&wgpu, EngineChoice::Auto, false),
        (&wgpu, EngineChoice::Auto, true),
    ] {
        let engine_name = format!("{} {engine:?}{}", device.describe(), if fused { " fused" } else { "" });
        let base = if fused { base.replace("sgd(lr=0.5)", "sgd(lr=0.5, fused=true)") } else { base.clone() };
        let run = |extra: &str| {
            std::fs::write(&path, format!("{base} {extra}\n")).unwrap();
            let mut file = SpecFile::load(&path).unwrap();
            let data = file.load_data().unwrap();
            let settings = TrainSettings { engine, ..TrainSettings::default() };
            let result = train(&file.spec, &data, device, &settings, &mut |_| {}).unwrap();
            let start = all_weights(&Model::init(&file.spec.model, file.spec.train.seed, &cpu.inner()));
            (start, result)
        };
        let (w0, plain) = run("");
        assert_eq!(plain.history[0].grad_norm, None, "no clipping, no norm");
        let w1 = all_weights(&plain.model);
        let g: Vec<f64> = w0.iter().zip(&w1).map(|(a, b)| (f64::from(*a) - f64::from(*b)) / lr).collect();
        let norm = g.iter().map(|v| v * v).sum::<f64>().sqrt();

        let max = norm / 3.0;
        let (_, clipped) = run(&format!("clip_grad_norm = {max}"));
        let coef = (max / (norm + 1e-6)).min(1.0);
        let expected: Vec<f64> = w0.iter().zip(&g).map(|(w, g)| f64::from(*w) - lr * g * coef).collect();
        check_weights(&expected, &all_weights(&clipped.model), &format!("{engine_name} norm, seed {seed}"));
        let logged = clipped.history[0].grad_norm.expect("the pre-clip norm is logged");
        assert!((logged - norm).abs() <= 1e-4 * norm, "{engine_name}: logged norm {logged}, gradients' norm {norm}");

        let mut sorted: Vec<f64> = g.iter().map(|v| v.abs()).collect();
        sorted.sort_by(f64::total_cmp);
        let x = sorted[sorted.len() / 2];
        let (_, clamped) = run(&format!("clip_grad_value = {x}"));
        let expected: Vec<f64> = w0.iter().zip(&g).map(|(w, g)| f64::from(*w) - lr * g.clamp(-x, x)).collect();
        check_weights(&expected, &all_weights(&clamped.model), &format!("{engine_name} value, seed {seed}"));
        eprintln!("{engine_name}: gradient norm {norm:.4e}, clipped to {max:.4e}; values clamped at {x:.4e}");
    }
}

/// One plain SGD step on wgpu lands where the native engine's does, for
/// the layers whose GPU kernels were found wrong ([`native_step_on`]).
#[test]
fn gelu_odd_widths_and_avgpool_take_the_native_engines_step_on_wgpu() {
    native_step_on(&select(DeviceChoice::Wgpu).expect("no Vulkan adapter: run scripts/setup-lavapipe.sh"), 1e-5, 2e-5);
}

/// A convolution whose stride is longer than its kernel trains on wgpu as
/// on the CPU, the layers below it too: Burn's GPU autotune chose an
/// input-gradient kernel there that gave them wrong or no gradients at
/// batch 32 (losses 1e-3 to 5e-3 off the CPU's on lavapipe; the first
/// convolution's weights never moved), silently. Such a convolution now
/// runs over the windows' taps, gathered, with a stride as long as its kernel.
#[test]
fn a_stride_longer_than_the_kernel_trains_on_wgpu_as_on_the_cpu() {
    let seed = clock_seed();
    let wgpu = select(DeviceChoice::Wgpu).expect("no Vulkan adapter: run scripts/setup-lavapipe.sh");
    let cpu = select(DeviceChoice::Cpu).unwrap();
    let mut rng = kynml_core::rng::SplitMix64::new(seed);
    let names: Vec<String> = (0..64).map(|i| format!("p{i}")).collect();
    let mut csv = names.join(",") + ",y\n";
    for _ in 0..240 {
        let x: Vec<f64> = (0..64).map(|_| rng.uniform(-1.0, 1.0)).collect();
        let y = x[9] - x[18] * x[27] + (x[36] * 2.0).sin();
        let row: Vec<String> = x.iter().chain(std::iter::once(&y)).map(|v| format!("{v:.6}")).collect();
        csv += &(row.join(",") + "\n");
    }
    for layers in [
        " input 1x8x8\n conv2d 4 3 relu\n conv2d 4 1 relu stride=2 padding=2\n flatten\n dense 1 linear",
        " input 1x8x8\n conv2d 4 3 relu\n conv2d 4 2 relu stride=3\n flatten\n dense 1 linear",
        " input 2x32\n conv1d 4 3 relu\n conv1d 4 1 linear stride=2 padding=2\n flatten\n dense 1 linear",
        // Strides far past the input: one window, its taps gathered (a
        // kernel padded to the stride asked for terabytes here).
        " input 1x8x8\n conv2d 3 2 relu stride=1000000\n flatten\n dense 1 linear",
        " input 1x8x8\n conv2d 4 2 relu stride=5 padding=1\n conv2d 2 1 tanh stride=2\n flatten\n dense 1 linear",
    ] {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("data.csv"), &csv).unwrap();
        let train_lines =
            format!(" loss = mse\n optimizer = adam(lr=0.01)\n epochs = 3\n batch = 32\n seed = {seed}\n");
        let path = write_spec(tmp.path(), layers, &train_lines);
        let mut file = SpecFile::load(&path).unwrap();
        let data = file.load_data().unwrap();
        let run = |device: &Device| train(&file.spec, &data, device, &TrainSettings::default(), &mut |_| {}).unwrap();
        let gap = worst_loss_gap(&run(&cpu), &run(&wgpu));
        eprintln!("{layers:?}: worst relative loss gap wgpu vs cpu {gap:.2e} (seed {seed})");
        assert!(gap <= 1e-5, "{layers:?}: wgpu's losses {gap} off the CPU's (seed {seed})");
    }
}

// ---- where the time and memory go ----

/// Gradients and temporaries are freed as soon as they are used: on wgpu the
/// device memory in use, and the allocator's pool, are no larger after the
/// last epoch than after the second (the first fills the pool). Every epoch
/// also records its wait for batches (within the epoch's time) and the
/// host's peak memory; the CPU has no device memory to report.
#[test]
fn device_memory_stays_flat_over_epochs_and_each_epoch_records_its_wait() {
    if in_own_process("device_memory_stays_flat_over_epochs_and_each_epoch_records_its_wait") {
        return;
    }
    let wgpu = select(DeviceChoice::Wgpu).expect("no Vulkan adapter: run scripts/setup-lavapipe.sh");
    let cpu = select(DeviceChoice::Cpu).unwrap();
    let seed = clock_seed();
    for device in [&wgpu, &cpu] {
        device_memory_stays_flat(device, seed);
    }
}

/// The memory estimated from the spec before a run (`check_memory`) is
/// within 25% of the most device memory in use that a profiled run on wgpu
/// reads at the ends of its steps' phases, for a model whose weights and
/// optimizer state dominate and for ones whose activations do (measured on
/// lavapipe: the estimate 0.99 to 1.23 times the reading, over seven
/// shapes). In a process of its own: the readings are the device's.
#[test]
fn the_memory_estimate_is_within_a_quarter_of_the_measured_peak_on_wgpu() {
    if in_own_process("the_memory_estimate_is_within_a_quarter_of_the_measured_peak_on_wgpu") {
        return;
    }
    memory_estimate_within_a_quarter(
        &select(DeviceChoice::Wgpu).expect("no Vulkan adapter: run scripts/setup-lavapipe.sh"),
    );
}

// ---- gradient accumulation ----

/// `accumulate = N`: N batches of B rows make one optimizer step that is
/// the step of one batch of their rows (their gradients weighted by rows),
/// the epoch's last step holding what is left. Without batchnorm and
/// dropout, batch 16 x 5 ends within fp32 rounding of batch 80, on both
/// engines (192 training rows: steps of 80, 80 and 32 rows either way).
#[test]
fn accumulated_batches_train_like_one_big_batch_on_both_engines() {
    use kynml_core::train::EngineChoice;
    let seed = clock_seed();
    let tmp = tempfile::tempdir().unwrap();
    let path = random_regression_spec(tmp.path(), seed, " dense 16 tanh\n layernorm\n dense 8 gelu\n dense 1 linear");
    let base = std::fs::read_to_string(&path).unwrap();
    let cpu = select(DeviceChoice::Cpu).unwrap();
    for engine in [EngineChoice::Auto, EngineChoice::Burn] {
        let run = |batch: &str| {
            std::fs::write(&path, base.replace("batch = 32", batch)).unwrap();
            let mut file = SpecFile::load(&path).unwrap();
            let data = file.load_data().unwrap();
            assert_eq!(data.train.len(), 192);
            let settings = TrainSettings { engine, ..TrainSettings::default() };
            train(&file.spec, &data, &cpu, &settings, &mut |_| {}).unwrap()
        };
        let big = run("batch = 80");
        let accumulated = run("batch = 16\n accumulate = 5");
        let (a, b) = (all_weights(&big.model), all_weights(&accumulated.model));
        let worst = worst_difference(&a, &b);
        eprintln!("{engine:?}: batch 16 x 5 vs batch 80, worst weight difference {worst:.2e} (seed {seed})");
        assert!(worst <= 1e-4, "{engine:?}: {worst} (seed {seed})");
        let (x, y) = (big.history.last().unwrap().val_loss, accumulated.history.last().unwrap().val_loss);
        assert!((x - y).abs() <= 1e-4 * x.abs().max(1.0), "{engine:?}: val loss {x} vs {y}");
    }
}

// ---- data-parallel training ----

/// Trains `path` on the CPU with `replicas` more CPU replicas beside the
/// first (data-parallel when there are any), on Burn's flex backend.
fn run_replicated(path: &Path, epochs: usize, resume: bool, replicas: usize) -> kynml_core::train::TrainResult {
    let mut file = SpecFile::load(path).unwrap();
    file.apply(&Overrides { epochs: Some(epochs), ..Overrides::default() });
    let data = file.load_data().unwrap();
    let resume_from = if resume { file.find_checkpoint(&data).unwrap().map(|(c, _)| c) } else { None };
    assert_eq!(resume_from.is_some(), resume, "a checkpoint to resume from");
    let cpu = select(DeviceChoice::Cpu).unwrap();
    let settings = TrainSettings {
        checkpoint_path: file.checkpoint_path(),
        resume_from,
        engine: kynml_core::train::EngineChoice::Burn,
        replicas: vec![cpu.clone(); replicas],
        ..TrainSettings::default()
    };
    train(&file.spec, &data, &cpu, &settings, &mut |_| {}).unwrap()
}

/// Two and three replicas (Burn's collective all-reduce between threads,
/// each replica stepping its slice of the global batch) end where one
/// device ends with the same global batch, within fp32 rounding, for a
/// model without batchnorm and dropout: 192 rows in steps of 80, 80 and 32
/// (80 rows cut 27/27/26 on three replicas), with gradient clipping by
/// global norm, with accumulation over two batches, and with SGD.
#[test]
fn data_parallel_replicas_train_like_one_device_with_the_same_batch() {
    let seed = clock_seed();
    let tmp = tempfile::tempdir().unwrap();
    let path = random_regression_spec(tmp.path(), seed, " dense 16 tanh\n layernorm\n dense 8 gelu\n dense 1 linear");
    let base = std::fs::read_to_string(&path).unwrap();
    // Plain SGD too: Adam's steps hardly change when every gradient is
    // scaled alike, SGD's change with it.
    for extra in [
        "batch = 80\n clip_grad_norm = 0.5",
        "batch = 40\n accumulate = 2",
        "batch = 64\n optimizer = sgd(lr=0.05, momentum=0.9)",
    ] {
        let text = base.replace("batch = 32", extra);
        let text = if extra.contains("sgd") { text.replace("optimizer = adamw(lr=0.01)\n", "") } else { text };
        std::fs::write(&path, text).unwrap();
        let one = run_replicated(&path, 4, false, 0);
        for replicas in [1, 2] {
            let many = run_replicated(&path, 4, false, replicas);
            let (a, b) = (all_weights(&one.model), all_weights(&many.model));
            assert_eq!(a.len(), b.len());
            let worst = worst_difference(&a, &b);
            eprintln!("{extra:?} on {} replicas: worst weight difference {worst:.2e} (seed {seed})", replicas + 1);
            assert!(worst <= 1e-4, "{extra:?}, {} replicas: {worst} (seed {seed})", replicas + 1);
            for (x, y) in one.history.iter().zip(&many.history) {
                let (p, q) = (x.train_loss, y.train_loss);
                assert!((p - q).abs() <= 1e-4 * p.abs().max(1.0), "train loss {p} vs {q} (seed {seed})");
            }
        }
    }
}

/// With batchnorm and dropout a replica normalises its own slice and draws
/// its own masks, so a data-parallel run is not the one-device run; it is
/// as good a fit: its validation loss after 6 epochs within a factor of 1.5
/// of the one-device run's (docs/language.md, `devices`). And it is exact
/// under resume: 4 epochs, then 2 more from the checkpoint, end on the very
/// bytes of 6 epochs in one go.
#[test]
fn data_parallel_with_batchnorm_and_dropout_fits_as_well_and_resumes_exactly() {
    let seed = clock_seed();
    let tmp = tempfile::tempdir().unwrap();
    let one = checkpointed_spec(tmp.path(), seed, "optimizer = adamw(lr=0.01)", "one.ckpt", false);
    let single = run_replicated(&one, 6, false, 0);
    let whole = checkpointed_spec(tmp.path(), seed, "optimizer = adamw(lr=0.01)", "whole.ckpt", false);
    let parallel = run_replicated(&whole, 6, false, 1);
    let (x, y) = (single.final_metrics["val_loss"], parallel.final_metrics["val_loss"]);
    eprintln!("val loss: one device {x:.4}, two replicas {y:.4} (seed {seed})");
    // Each replica normalises its own half batch, so the two fits differ:
    // 150 fresh seeds measured a ratio up to 1.40, and one CI run 1.52
    // (seed 1795772692853751467).
    assert!(y.is_finite() && y <= 1.75 * x && x <= 1.75 * y, "val loss {x} vs {y} (seed {seed})");
    let cut = checkpointed_spec(tmp.path(), seed, "optimizer = adamw(lr=0.01)", "cut.ckpt", false);
    run_replicated(&cut, 4, false, 1);
    let resumed = run_replicated(&cut, 6, true, 1);
    assert_eq!(resumed.history.len(), 6);
    let bytes = |name: &str| std::fs::read(tmp.path().join(name)).unwrap();
    assert!(bytes("whole.ckpt") == bytes("cut.ckpt"), "seed {seed}: the resumed data-parallel run ends elsewhere");
    // Run again with no epoch left: the same final metrics, validated in the
    // same passes as the run that wrote the checkpoint.
    let again = run_replicated(&cut, 6, true, 1);
    assert_eq!(again.final_metrics, resumed.final_metrics, "seed {seed}");
}

/// A step with fewer rows than devices (a last batch of 2 rows on three
/// replicas): the replica without rows meets the others at zero weight, and
/// the run ends where one device ends.
#[test]
fn data_parallel_steps_with_fewer_rows_than_devices() {
    let seed = clock_seed();
    let tmp = tempfile::tempdir().unwrap();
    let path = random_regression_spec(tmp.path(), seed, " dense 8 tanh\n dense 1 linear");
    // 192 training rows: batches of 38, the last of 2.
    let text = std::fs::read_to_string(&path).unwrap().replace("batch = 32", "batch = 38");
    std::fs::write(&path, text).unwrap();
    let (one, three) = (run_replicated(&path, 2, false, 0), run_replicated(&path, 2, false, 2));
    let (a, b) = (all_weights(&one.model), all_weights(&three.model));
    let worst = worst_difference(&a, &b);
    assert!(worst <= 1e-4, "{worst} (seed {seed})");
}

/// A stop in the middle of an accumulated step finishes that step first, so
/// the checkpoint holds whole steps and the resumed run ends bit-identical,
/// on the native engine and on Burn's CPU backend; with clipping, the
/// interrupted epoch's mean pre-clip norm (in the saved history) covers its
/// steps before the stop too.
#[test]
fn a_stop_inside_an_accumulated_step_resumes_bit_identical() {
    use kynml_core::train::{EngineChoice, TrainError, TrainEvent};
    use std::sync::atomic::{AtomicBool, Ordering};
    let seed = clock_seed();
    let tmp = tempfile::tempdir().unwrap();
    let spec = |ckpt: &str| {
        let path = checkpointed_spec(tmp.path(), seed, "optimizer = adamw(lr=0.01)", ckpt, true);
        let text = std::fs::read_to_string(&path)
            .unwrap()
            .replace("batch = 32", "batch = 32\n accumulate = 4\n clip_grad_norm = 0.5");
        let out = tmp.path().join(format!("{ckpt}.kyn"));
        std::fs::write(&out, text).unwrap();
        out
    };
    for (engine, name) in [(EngineChoice::Auto, "native"), (EngineChoice::Burn, "burn")] {
        let whole = spec(&format!("{name}-whole.ckpt"));
        let uninterrupted = run_to_on(&whole, 6, false, engine);
        let cut = spec(&format!("{name}-cut.ckpt"));
        let mut file = SpecFile::load(&cut).unwrap();
        file.apply(&Overrides { epochs: Some(6), ..Overrides::default() });
        let data = file.load_data().unwrap();
        let cpu = select(DeviceChoice::Cpu).unwrap();
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let settings = TrainSettings {
            checkpoint_path: file.checkpoint_path(),
            stop: Some(stop.clone()),
            engine,
            ..TrainSettings::default()
        };
        let outcome = train(&file.spec, &data, &cpu, &settings, &mut |event| {
            if let TrainEvent::Step { epoch: 3, step: 2, .. } = event {
                stop.store(true, Ordering::SeqCst);
            }
        });
        // Asked at batch 2, stopped at batch 4: the end of the accumulated step.
        match outcome {
            Err(TrainError::Interrupted { epoch: 3, step: 4, checkpoint: Some(_), .. }) => {}
            other => {
                panic!("{name}: expected an interruption at epoch 3, batch 4, got {:?}", other.map(|r| r.history.len()))
            }
        }
        let resumed = run_to_on(&cut, 6, true, engine);
        assert_eq!(resumed.history.len(), 6);
        let norms = |r: &kynml_core::train::TrainResult| r.history.iter().map(|e| e.grad_norm).collect::<Vec<_>>();
        assert!(norms(&uninterrupted).iter().all(Option::is_some), "{name}");
        assert_eq!(norms(&resumed), norms(&uninterrupted), "{name}, seed {seed}: the interrupted epoch's grad_norm");
        let bytes = |ckpt: &str| std::fs::read(tmp.path().join(format!("{name}-{ckpt}.ckpt"))).unwrap();
        assert!(bytes("whole") == bytes("cut"), "{name}, seed {seed}: the resumed run ends elsewhere");
    }
}

/// `--profile`: every step's phases (copy, forward, backward, optimizer)
/// add up to the step's measured wall time within 10%, on the native engine,
/// on Burn's CPU backend and on wgpu (which waits for the device after each
/// phase); the Chrome trace reads back with every phase of every step, the
/// loader's waits on their own track.
#[test]
fn profiled_phases_add_up_to_the_step_time_on_every_engine() {
    use kynml_core::train::EngineChoice;
    let seed = clock_seed();
    let tmp = tempfile::tempdir().unwrap();
    let path = random_regression_spec(tmp.path(), seed, " dense 32 gelu\n batchnorm\n dropout 0.1\n dense 1 linear");
    let mut file = SpecFile::load(&path).unwrap();
    let data = file.load_data().unwrap();
    let cpu = select(DeviceChoice::Cpu).unwrap();
    let wgpu = select(DeviceChoice::Wgpu).expect("no Vulkan adapter: run scripts/setup-lavapipe.sh");
    for (name, device, engine) in
        [("native", &cpu, EngineChoice::Auto), ("flex", &cpu, EngineChoice::Burn), ("wgpu", &wgpu, EngineChoice::Auto)]
    {
        let profile = profiled_phases_add_up(name, device, engine, &file, &data);
        // Half products are advised only where they run faster: not on the
        // CPU, nor on a software adapter such as lavapipe, which emulates them.
        let software = matches!(&device.kind,
            kynml_backend::DeviceKind::Wgpu(a) if a.kind == kynml_backend::WgpuAdapterKind::Cpu);
        if software || name != "wgpu" {
            assert!(!profile.fp16 && !profile.bf16, "{name}: half products advised");
        }
    }
    // Two replicas: each step's meeting (the all-reduce, the wait for the
    // other replica) is a phase of its own, and the phases with it still
    // fit in the step.
    let settings = TrainSettings {
        engine: EngineChoice::Burn,
        profile: true,
        replicas: vec![cpu.clone()],
        ..TrainSettings::default()
    };
    let profile = profiled_steps("flex, two replicas", &cpu, &settings, &file, &data);
    assert!(profile.data_parallel() && profile.steps.iter().all(|s| s.phases.sync > 0.0));
    assert!(profile.summary().iter().any(|p| p.phase == "sync" && p.share > 0.0));
    for s in &profile.steps {
        let p = s.phases;
        assert!(p.copy + p.forward + p.backward + p.sync + p.optimizer <= s.total * 1.0001, "{s:?}");
    }
    // ... and add up to the steps' time within 10%, the lead's splitting
    // of each batch among the replicas counted as its copy.
    let total: f64 = profile.steps.iter().map(|s| s.total).sum();
    let phases: f64 =
        profile.steps.iter().map(|s| s.phases).map(|p| p.copy + p.forward + p.backward + p.sync + p.optimizer).sum();
    eprintln!("flex, two replicas: phases {phases:.4} s of {total:.4} s of steps");
    assert!(phases >= 0.9 * total, "two replicas: phases {phases} s, steps {total} s");
    assert!(profile.steps.iter().all(|s| s.phases.copy > 0.0), "the split is the lead's copy");
    // With two workers, every batch is on the track of the worker that gathered it.
    file.spec.dataset.num_workers.value = 2;
    let settings = TrainSettings { profile: true, ..TrainSettings::default() };
    let profile = train(&file.spec, &data, &cpu, &settings, &mut |_| {}).unwrap().profile.unwrap();
    let trace: serde_json::Value = serde_json::from_str(&profile.trace().to_string()).unwrap();
    let events = trace["traceEvents"].as_array().unwrap();
    let prepared: Vec<&serde_json::Value> = events.iter().filter(|e| e["name"] == "prepare batch").collect();
    assert_eq!(prepared.len(), profile.steps.len());
    let loader = kynml_core::train::profile::LOADER_TID as u64;
    assert!(prepared.iter().all(|e| e["tid"].as_u64().is_some_and(|t| t == loader || t == loader + 1)), "{prepared:?}");
    for t in [loader, loader + 1] {
        let named = events.iter().any(|e| e["ph"] == "M" && e["tid"] == t && e["args"]["name"].is_string());
        let used = prepared.iter().any(|e| e["tid"] == t);
        assert_eq!(named, used, "worker track {t}");
    }
}

/// `checkpoint_activations = true` changes what the backward pass keeps, not
/// what it computes: the same losses on Burn's CPU backend and on wgpu (that
/// it keeps less is the next test's), with dropout (whose mask the tape
/// takes as a constant: one made on the plain device panicked there).
#[test]
fn checkpointed_activations_train_the_same() {
    use kynml_core::train::EngineChoice;
    let seed = clock_seed();
    let tmp = tempfile::tempdir().unwrap();
    let deep = (0..8).map(|_| " dense 256 gelu\n dropout 0.1\n layernorm\n").collect::<String>() + " dense 1 linear";
    let path = random_regression_spec(tmp.path(), seed, &deep);
    let base = std::fs::read_to_string(&path).unwrap().replace("batch = 32", "batch = 192");
    let cpu = select(DeviceChoice::Cpu).unwrap();
    let wgpu = select(DeviceChoice::Wgpu).expect("no Vulkan adapter: run scripts/setup-lavapipe.sh");
    for (name, device) in [("flex", &cpu), ("wgpu", &wgpu)] {
        let run = |checkpoint: bool| {
            std::fs::write(&path, format!("{base} checkpoint_activations = {checkpoint}\n")).unwrap();
            let mut file = SpecFile::load(&path).unwrap();
            let data = file.load_data().unwrap();
            let settings = TrainSettings { engine: EngineChoice::Burn, ..TrainSettings::default() };
            train(&file.spec, &data, device, &settings, &mut |_| {}).unwrap()
        };
        let (plain, checkpointed) = (run(false), run(true));
        for (a, b) in plain.history.iter().zip(&checkpointed.history) {
            for (x, y) in [(a.train_loss, b.train_loss), (a.val_loss, b.val_loss)] {
                assert!((x - y).abs() <= 1e-5 * x.abs().max(1e-3), "{name}, epoch {}: {x} vs {y}", a.epoch);
            }
        }
        let pool = |r: &kynml_core::train::TrainResult| r.history.iter().filter_map(|e| e.device_reserved).max();
        eprintln!(
            "{name}: device memory pool without / with checkpointing: {:?} / {:?} bytes",
            pool(&plain),
            pool(&checkpointed)
        );
    }
}

/// With `checkpoint_activations = true` a deep model keeps less in device
/// memory: the most in use at the end of a step's phases (read by the
/// profile after the forward pass, when the kept activations peak) is lower
/// on wgpu. Run in a process of its own, since CubeCL's allocator is shared
/// between test threads.
#[test]
fn checkpointed_activations_keep_less_in_device_memory() {
    if in_own_process("checkpointed_activations_keep_less_in_device_memory") {
        return;
    }
    let seed = clock_seed();
    let wgpu = select(DeviceChoice::Wgpu).expect("no Vulkan adapter: run scripts/setup-lavapipe.sh");
    let (plain, checkpointed) = checkpointing_peaks(&wgpu, seed);
    eprintln!("most device memory in use: {plain} bytes without, {checkpointed} with checkpointing (seed {seed})");
    assert!(plain > 0, "the profile read no device memory");
    assert!(
        (checkpointed as f64) < 0.85 * plain as f64,
        "checkpointing kept {checkpointed} bytes against {plain} without (seed {seed})"
    );
}

/// The profile's verdict from measured shares: a deep model on a few
/// features is compute-bound; a wide input feeding a one-unit model with no
/// data workers spends a far larger share waiting for its batches (measured
/// 27% to 67% of step time on this machine, so either side of the
/// data-bound line: the verdict's rule itself is tested on fixed timings in
/// `train::profile`).
#[test]
fn the_profile_verdict_tells_data_bound_from_compute_bound() {
    use kynml_core::train::profile::Bound;
    let cpu = select(DeviceChoice::Cpu).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("spec.kyn");
    let run = |input: usize, layers: &str| {
        std::fs::write(
            &path,
            format!(
                "dataset D:\n source = csv(\"absent.csv\")\n target = \"y\"\nmodel M:\n input {input}\n{layers}\n\
                 train:\n model = M\n data = D\n loss = mse\n optimizer = sgd(lr=0.001)\n epochs = 2\n batch = 256\n"
            ),
        )
        .unwrap();
        let file = SpecFile::load(&path).unwrap();
        let data = kynml_core::data::synthetic_for(&file.spec, 4096, 7).unwrap();
        let settings = TrainSettings { profile: true, ..TrainSettings::default() };
        let result = train(&file.spec, &data, &cpu, &settings, &mut |_| {}).unwrap();
        let profile = result.profile.unwrap();
        let wait = profile.summary().iter().find(|p| p.phase == "wait").map_or(0.0, |p| p.share);
        let verdict = profile.verdict(0);
        eprintln!("input {input}: waiting {:.1}%; {}", 100.0 * wait, verdict.advice);
        (wait, verdict)
    };
    let (wide_wait, _) = run(4096, " dense 1 linear");
    let (deep_wait, deep) = run(8, " dense 512 gelu\n dense 512 gelu\n dense 512 gelu\n dense 1 linear");
    assert_eq!(deep.bound, Bound::Compute, "{}", deep.advice);
    assert!(wide_wait > 10.0 * deep_wait && wide_wait > 0.05, "waits: wide {wide_wait}, deep {deep_wait}");
}

// ---- categorical columns ----

/// A CSV with two numeric and two categorical columns (`color`, 5 values;
/// `shop`, 12), whose target is mostly the categories' own effects, and a
/// spec that embeds them (`embedding 3`).
fn categorical_spec(dir: &Path, seed: u64, extra_train: &str) -> PathBuf {
    let mut rng = kynml_core::rng::SplitMix64::new(seed);
    let colors = ["red", "green", "blue", "cyan", "black"];
    let color_effect: Vec<f64> = colors.iter().map(|_| rng.uniform(-2.0, 2.0)).collect();
    let shop_effect: Vec<f64> = (0..12).map(|_| rng.uniform(-1.5, 1.5)).collect();
    let mut csv = String::from("x,color,shop,z,y\n");
    for _ in 0..320 {
        let (c, s) = (rng.below(5) as usize, rng.below(12) as usize);
        let (x, z) = (rng.uniform(-2.0, 2.0), rng.uniform(0.0, 10.0));
        let y = color_effect[c] + shop_effect[s] * x.signum() + 0.5 * x + 0.05 * z + 0.05 * rng.uniform(-1.0, 1.0);
        csv += &format!("{x:.5},{},shop {s},{z:.4},{y:.5}\n", colors[c]);
    }
    std::fs::write(dir.join("data.csv"), csv).unwrap();
    let spec = format!(
        "dataset D:\n source = csv(\"data.csv\")\n target = \"y\"\n categorical = [color, \"shop\"]\n normalize = true\n\
         model M:\n input 4\n embedding 3\n dense 16 tanh\n dense 1 linear\n\
         train:\n model = M\n data = D\n loss = mse\n optimizer = adamw(lr=0.01)\n epochs = 8\n batch = 32\n seed = {seed}\n{extra_train}"
    );
    let path = dir.join("spec.kyn");
    std::fs::write(&path, spec).unwrap();
    path
}

/// `result` on the same spec and data, trained again on wgpu in fp32 and
/// on the CPU in bf16: each tracks the CPU's fp32 losses within its
/// precision, and bf16 really ran (not identical).
///
/// Adam divides each gradient by its own running size, so a weight whose
/// gradient is near zero moves by a full step either way on rounding alone:
/// over six epochs a transformer's losses on wgpu drifted 4.7e-3 from the
/// CPU's (first epoch 5.7e-5) where plain SGD on the same model and data
/// stayed within 3.7e-7 (bf16 on the CPU: 4.6e-2 against fp32 under Adam).
/// So the forward and backward passes are held to their precision under
/// SGD, and the spec's own optimizer to a looser bound. Where `file`'s
/// model starts with an `embedding`, training it unbound must be refused.
fn tracks_cpu_fp32(
    file: &SpecFile,
    data: &kynml_core::data::Dataset,
    path: &Path,
    result: &kynml_core::train::TrainResult,
    seed: u64,
) {
    tracks_cpu_fp32_within(file, data, path, result, seed, 1e-5);
}

/// [`tracks_cpu_fp32`] with wgpu held to `sgd_bound` under SGD.
fn tracks_cpu_fp32_within(
    file: &SpecFile,
    data: &kynml_core::data::Dataset,
    path: &Path,
    result: &kynml_core::train::TrainResult,
    seed: u64,
    sgd_bound: f64,
) {
    use kynml_core::spec::types::LossScale;
    use kynml_core::train::precision::{Compute, PrecisionPlan};
    let (cpu, wgpu) = (
        select(DeviceChoice::Cpu).unwrap(),
        select(DeviceChoice::Wgpu).expect("no Vulkan adapter: run scripts/setup-lavapipe.sh"),
    );
    let losses = |a: &kynml_core::train::TrainResult, b: &kynml_core::train::TrainResult| {
        let rows: Vec<String> = a
            .history
            .iter()
            .zip(&b.history)
            .map(|(a, b)| {
                format!("{:.7}/{:.7} against {:.7}/{:.7}", a.train_loss, a.val_loss, b.train_loss, b.val_loss)
            })
            .collect();
        rows.join("\n")
    };

    let source = std::fs::read_to_string(path).unwrap();
    let with_sgd: String = source
        .lines()
        .map(|line| if line.trim_start().starts_with("optimizer =") { " optimizer = sgd(lr=0.05)" } else { line })
        .map(|line| format!("{line}\n"))
        .collect();
    assert_ne!(with_sgd, source, "the spec names an optimizer");
    let sgd_path = path.with_file_name("sgd.kyn");
    std::fs::write(&sgd_path, with_sgd).unwrap();
    let mut sgd = SpecFile::load(&sgd_path).unwrap();
    if sgd.spec.model.layers.first().is_some_and(|l| l.value.name() == "embedding") {
        let unbound = train(&sgd.spec, data, &cpu, &TrainSettings::default(), &mut |_| {}).unwrap_err();
        assert!(unbound.to_string().contains("not bound"), "{unbound}");
    }
    sgd.spec.model.bind(&data.info).unwrap();
    let on_cpu = train(&sgd.spec, data, &cpu, &TrainSettings::default(), &mut |_| {}).unwrap();
    let on_wgpu = train(&sgd.spec, data, &wgpu, &TrainSettings::default(), &mut |_| {}).unwrap();
    let gap = worst_loss_gap(&on_cpu, &on_wgpu);
    eprintln!("wgpu fp32, sgd: worst relative loss gap to cpu {gap:.2e}");
    assert!(gap <= sgd_bound, "wgpu with sgd: {gap} (seed {seed})\n{}", losses(&on_cpu, &on_wgpu));

    let on_wgpu = train(&file.spec, data, &wgpu, &TrainSettings::default(), &mut |_| {}).unwrap();
    let gap = worst_loss_gap(result, &on_wgpu);
    eprintln!("wgpu fp32: worst relative loss gap to cpu {gap:.2e}");
    assert!(gap <= 3e-2, "wgpu: {gap} (seed {seed})\n{}", losses(result, &on_wgpu));
    // bf16 rounds each product to 8 bits: within a few percent under SGD,
    // and Adam's drift on top of that.
    let bf16 = Some(PrecisionPlan::forced(Compute::Bf16, LossScale::None));
    let gap = worst_loss_gap(&on_cpu, &run_with(&sgd_path, &cpu, bf16.clone()));
    eprintln!("cpu bf16, sgd: worst relative loss gap to fp32 {gap:.2e}");
    assert!(gap <= 3e-2 && gap > 0.0, "cpu bf16 with sgd: {gap} (seed {seed})");
    let on_bf16 = run_with(path, &cpu, bf16);
    let (train_gap, val_gap) = loss_gaps(result, &on_bf16);
    eprintln!(
        "cpu bf16: worst gap to fp32 {train_gap:.2e} relative in training loss, {val_gap:.2e} in validation loss"
    );
    let shown = losses(result, &on_bf16);
    // The training loss is the noisier of the two under Adam with dropout:
    // with KYNML_TEST_SEED=1795753293534975230 the transformer reached epoch 6 at 0.195 in
    // bf16 against 0.162 (0.17 apart) while its validation losses stayed
    // 1.6% apart. A broken bf16 path lands far beyond either bound.
    assert!(train_gap <= 0.25 && train_gap > 0.0, "cpu bf16: {train_gap} (seed {seed})\n{shown}");
    assert!(val_gap <= 0.15, "cpu bf16: validation loss {val_gap} apart (seed {seed})\n{shown}");
}

/// `exported` (of `result`'s model) written in every format into `dir`:
/// each loaded export predicts the raw rows `raw` as the in-memory model
/// (fed them normalised as in training) and the host reference do, and
/// onnxruntime and a numpy forward pass from the safetensors file agree.
/// Returns the loaded safetensors and Burn exports.
fn exports_agree(
    result: &kynml_core::train::TrainResult,
    exported: &kynml_core::export::ExportModel,
    data: &kynml_core::data::Dataset,
    raw: &[f32],
    dir: &Path,
    seed: u64,
) -> Vec<kynml_core::predict::Predictor> {
    use kynml_core::export::{self, Format};
    use kynml_core::model::Mode;
    use kynml_core::predict::Predictor;
    let cpu = select(DeviceChoice::Cpu).unwrap();
    let width = data.n_features();
    let n = raw.len() / width;
    let mut normalised = raw.to_vec();
    if let Some(norm) = &data.info.normalizer {
        norm.apply(&mut normalised);
    }
    let x = burn::tensor::Tensor::<kynml_backend::Backend, 2>::from_data(
        burn::tensor::TensorData::new(normalised, [n, width]),
        &cpu.inner(),
    );
    let in_memory: Vec<f32> = result.model.forward(x, Mode::Eval).into_data().convert::<f32>().into_vec().unwrap();
    export::write(exported, Format::Onnx, &dir.join("m.onnx")).unwrap();
    export::write(exported, Format::Safetensors, &dir.join("m.safetensors")).unwrap();
    export::write(exported, Format::Burn, &dir.join("b.mpk")).unwrap();
    let reference = exported.forward(raw).unwrap();
    let mut predictors = Vec::new();
    let mut last = None;
    for loaded in ["m.safetensors", "b.mpk"] {
        let p = Predictor::load(&dir.join(loaded), &cpu).unwrap();
        let out = p.predict(raw).unwrap();
        for (what, other) in [("in-memory model", &in_memory), ("host reference", &reference)] {
            let worst = out.outputs.iter().zip(other).map(|(a, b)| (a - b).abs()).fold(0.0f32, worst32);
            assert!(worst <= 1e-4, "{loaded} vs the {what}: {worst} (seed {seed})");
        }
        predictors.push(p);
        last = Some(out);
    }
    let p = last.unwrap();
    // On wgpu, whose passes are filled up to a power of two of rows.
    let wgpu = select(DeviceChoice::Wgpu).expect("no Vulkan adapter: run scripts/setup-lavapipe.sh");
    let on_wgpu = Predictor::load(&dir.join("m.safetensors"), &wgpu).unwrap().predict(raw).unwrap();
    assert_eq!((on_wgpu.rows, on_wgpu.outputs.len()), (p.rows, p.outputs.len()));
    let worst = on_wgpu.outputs.iter().zip(&p.outputs).map(|(a, b)| (a - b).abs()).fold(0.0f32, worst32);
    assert!(worst <= 1e-4, "wgpu vs cpu predictions: {worst} (seed {seed})");
    let inputs = dir.join("inputs.json");
    std::fs::write(&inputs, tensors_json(&[("features", width, raw)])).unwrap();
    let expected = dir.join("expected.json");
    let json = match &p.probabilities {
        None => tensors_json(&[("prediction", p.width, &p.outputs)]),
        Some(probs) => tensors_json(&[("logits", p.width, &p.outputs), ("probabilities", probs.len() / n, probs)]),
    };
    std::fs::write(&expected, json).unwrap();
    python("check_onnx.py", &[&dir.join("m.onnx"), &inputs, &expected]);
    python("check_safetensors_export.py", &[&dir.join("m.safetensors"), &dir.join("m.json"), &inputs, &expected]);
    predictors
}

#[test]
fn categorical_columns_train_on_every_backend_and_export_with_their_vocabularies() {
    use kynml_core::export;
    use kynml_core::model::Layer;
    use kynml_core::predict::{PredictError, Predictor};
    let seed = clock_seed();
    eprintln!("seed {seed}");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let path = categorical_spec(dir, seed, "");
    let mut file = SpecFile::load(&path).unwrap();
    let data = file.load_data().unwrap();
    let vocab = &data.info.categories;
    assert_eq!(vocab.iter().map(|v| (v.column.as_str(), v.position)).collect::<Vec<_>>(), [("color", 1), ("shop", 2)]);
    // The normalizer leaves the category indices alone.
    let norm = data.info.normalizer.as_ref().unwrap();
    assert_eq!((norm.mean[1], norm.std[1], norm.mean[2], norm.std[2]), (0.0, 1.0, 0.0, 1.0));

    let cpu = select(DeviceChoice::Cpu).unwrap();
    let result = train(&file.spec, &data, &cpu, &TrainSettings::default(), &mut |_| {}).unwrap();
    // Whether it learns, from a longer run, against the loss of predicting
    // the training rows' mean. Against the first epoch's loss, the test
    // failed when that epoch had already learned much (1.19 -> 0.72 at seed
    // 606, where the mean's loss is 1.51); after 20 epochs the ratio to the
    // mean's loss still reached 0.55 (seed 112). After 40 epochs it was at
    // most 0.25 over 62 seeds (100-160 and 606), median 0.08.
    let mut longer = file.spec.clone();
    longer.train.epochs.value = 40;
    let history = train(&longer, &data, &cpu, &TrainSettings::default(), &mut |_| {}).unwrap().history;
    let (first, last) = (&history[0], history.last().unwrap());
    let baseline = prior_loss(&data);
    eprintln!(
        "cpu: val_loss {} -> {} in 40 epochs; the training mean's {baseline} (ratios {:.3} {:.3})",
        first.val_loss,
        last.val_loss,
        last.val_loss / first.val_loss,
        last.val_loss / baseline
    );
    assert!(
        last.val_loss < 0.5 * baseline,
        "did not learn: {} -> {}, where the training mean's loss is {baseline} (seed {seed})",
        first.val_loss,
        last.val_loss
    );
    // No training row holds the unseen index, so its rows stay zeros.
    let Layer::Embedding(e) = &result.model.layers[0] else { panic!("the first layer is the embedding") };
    for table in &e.tables {
        let values: Vec<f32> = table.val().into_data().convert::<f32>().into_vec().unwrap();
        assert!(values[..3].iter().all(|v| *v == 0.0), "{:?}", &values[..3]);
        assert!(values[3..].iter().all(|v| v.is_finite() && *v != 0.0));
    }

    tracks_cpu_fp32(&file, &data, &path, &result, seed);

    // Fresh raw rows, every index of each vocabulary (0: unseen) among them.
    let exported = export::from_model(&result.model, &file.spec.model, &data.info, file.spec.train.loss.value);
    let mut rng = kynml_core::rng::SplitMix64::new(seed ^ 0x5eed);
    let n = 48;
    let raw: Vec<f32> = (0..n)
        .flat_map(|r| {
            let x = rng.uniform(-3.0, 3.0) as f32;
            let z = rng.uniform(-1.0, 11.0) as f32;
            [x, (r % vocab[0].size()) as f32, (r % vocab[1].size()) as f32, z]
        })
        .collect();
    let predictors = exports_agree(&result, &exported, &data, &raw, dir, seed);
    for p in &predictors {
        assert_eq!(p.model().categories, data.info.categories, "the loaded export keeps the vocabularies");
    }
    let predictor = &predictors[0];

    // New rows read by name, in another column order, one with a shop the
    // model never saw: it takes index 0 and is counted.
    let rows_csv = dir.join("new.csv");
    std::fs::write(&rows_csv, "shop,z,color,x\nshop 3,4.5,blue,0.5\nshop 99,4.5,blue,0.5\n").unwrap();
    let m = predictor.model();
    let rows = m.read_rows(&rows_csv, false).unwrap();
    assert_eq!(rows.unseen, [("shop".to_string(), 1)]);
    let blue = vocab[0].index("blue").unwrap() as f32;
    let shop3 = vocab[1].index("shop 3").unwrap() as f32;
    assert_eq!(rows.features, [0.5, blue, shop3, 4.5, 0.5, blue, 0.0, 4.5]);

    // The same rows as text held in memory (a service's request body).
    let text = std::fs::read(&rows_csv).unwrap();
    let from_text = m.read_rows_from(&text, "request".as_ref(), false).unwrap();
    assert_eq!((from_text.features, from_text.lines), (rows.features.clone(), rows.lines.clone()));
    assert_eq!(m.input_columns(), ["x", "color", "shop", "z"]);

    // An index no vocabulary holds is the caller's error, typed and
    // naming its row and column: an embedding would read outside its table.
    let size = vocab[0].size();
    for bad in [size as f32, -1.0, 1.5, f32::NAN] {
        let mut raw = rows.features.clone();
        raw[4 + 1] = bad;
        match predictor.predict(&raw) {
            Err(e @ PredictError::NotAnIndex { row: 1, .. }) => {
                assert!(e.is_bad_input());
                let text = e.to_string();
                assert!(text.starts_with("row 2: `color` = ") && text.contains(&format!("to {}", size - 1)), "{text}");
            }
            other => panic!("{bad}: {other:?}"),
        }
    }
    // The ONNX export reads such an index as the unseen category, 0, as the
    // host reference does (its Gather wrapped -1 to the table's last row,
    // and its Cast read 1.5 as 1).
    let row = &rows.features[4..8];
    let mut odd = Vec::new();
    for bad in [0.0, size as f32, -1.0, 1.5] {
        odd.extend_from_slice(row);
        let at = odd.len() - 3;
        odd[at] = bad;
    }
    let logits = exported.forward(&odd).unwrap();
    let width = logits.len() / 4;
    assert!(logits.chunks(width).all(|l| l == &logits[..width]), "each reads as unseen: {logits:?}");
    std::fs::write(dir.join("odd.json"), tensors_json(&[("features", 4, &odd)])).unwrap();
    let expected = match exported.probabilities(&logits) {
        None => tensors_json(&[("prediction", width, &logits)]),
        Some(p) => tensors_json(&[("logits", width, &logits), ("probabilities", p.len() / 4, &p)]),
    };
    std::fs::write(dir.join("odd_expected.json"), expected).unwrap();
    python("check_onnx.py", &[&dir.join("m.onnx"), &dir.join("odd.json"), &dir.join("odd_expected.json")]);
    // A number column given NaN or an infinity in code (a file's rows are
    // refused as read) is refused too, not predicted from or called an overflow.
    for (at, bad, says) in
        [(0, f32::NAN, "`x` = NaN"), (3, f32::INFINITY, "`z` = inf"), (3, f32::NEG_INFINITY, "`z` = -inf")]
    {
        let mut raw = rows.features.clone();
        raw[4 + at] = bad;
        match predictor.predict(&raw) {
            Err(e @ PredictError::NotFinite { row: 1, .. }) => {
                assert!(e.is_bad_input());
                assert_eq!(
                    e.to_string(),
                    format!("row 2: {says} is not a finite number: the model takes numbers only")
                );
            }
            other => panic!("{bad}: {other:?}"),
        }
    }
    let mut located = rows.clone();
    located.features[4 + 2] = 1e6;
    let err = predictor.predict_rows(&located).unwrap_err();
    assert_eq!(err.line, Some(3));
    assert!(err.to_string().starts_with(&format!("{}:3: `shop` = 1000000", rows_csv.display())), "{err}");

    // Rows whose values or targets are not their row count (read for another
    // model, or built by hand) are the caller's error, not a panic in the
    // metrics: twice the values of 2 rows are whole rows, but not 2 of them.
    use kynml_core::predict::EvalError;
    let mut doubled = rows.clone();
    doubled.features.extend(rows.features.clone());
    doubled.targets = Some(["1", "1"].into_iter().collect());
    match predictor.evaluate(&doubled) {
        Err(EvalError::Predict(e)) => {
            assert!(matches!(e.error, PredictError::Rows { rows: 2, values: 16, features: 4 }), "{e:?}");
            assert!(e.to_string().contains("2 rows of the model's 4 features are 8 values, but 16"), "{e}");
        }
        other => panic!("{other:?}"),
    }
    assert!(predictor.predict_rows(&doubled).is_err());
    let mut short = rows.clone();
    short.targets = Some(["1"].into_iter().collect());
    match predictor.evaluate(&short) {
        Err(e @ EvalError::Targets { targets: 1, rows: 2 }) => assert_eq!(e.to_string(), "1 targets for 2 rows"),
        other => panic!("{other:?}"),
    }

    // A model whose tensors do not fit its layers is refused, not given
    // made-up weights.
    let mut broken = exported.clone();
    broken.layers[1] = broken.layers[2].clone();
    assert!(Predictor::new(broken, &select(DeviceChoice::Cpu).unwrap()).is_err());
}

/// A checkpoint of a model that embeds categories resumes on the same data,
/// and is refused on data whose categories differ, even in number the same.
#[test]
fn a_checkpoint_of_embedded_categories_needs_the_same_categories() {
    use kynml_core::train::resume::ResumeError;
    let tmp = tempfile::tempdir().unwrap();
    let path = categorical_spec(tmp.path(), 9, " checkpoint = checkpoint(every_n=1, path=\"c.ckpt\")\n");
    let mut file = SpecFile::load(&path).unwrap();
    let data = file.load_data().unwrap();
    let settings = TrainSettings { checkpoint_path: file.checkpoint_path(), ..TrainSettings::default() };
    train(&file.spec, &data, &select(DeviceChoice::Cpu).unwrap(), &settings, &mut |_| {}).unwrap();
    let found = |file: &mut SpecFile| {
        let data = file.load_data().unwrap();
        file.find_checkpoint(&data).map(|c| c.is_some())
    };
    assert!(matches!(found(&mut SpecFile::load(&path).unwrap()), Ok(true)));
    // One color renamed: five colors still, but not the same five.
    let csv = std::fs::read_to_string(tmp.path().join("data.csv")).unwrap().replace(",cyan,", ",teal,");
    std::fs::write(tmp.path().join("data.csv"), csv).unwrap();
    // The vocabulary differs because the data does: the data is named as the cause.
    let err = found(&mut SpecFile::load(&path).unwrap()).expect_err("other categories");
    assert!(matches!(err, ResumeError::DataChanged { .. }), "{err}");
}

#[test]
fn categorical_columns_and_the_embedding_must_match() {
    let data = "a,city,y\n1,Oslo,2\n2,Lima,3\n3,Oslo,4\n4,Rome,5\n5,Lima,6\n";
    let check_on = |data: &str, dataset_extra: &str, layers: &str| {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("d.csv"), data).unwrap();
        let spec = format!(
            "dataset D:\n source = csv(\"d.csv\")\n target = \"y\"\n{dataset_extra}\nmodel M:\n input 2\n{layers}\n dense 1 linear\n\
             train:\n model = M\n data = D\n loss = mse\n epochs = 1\n"
        );
        let path = tmp.path().join("s.kyn");
        std::fs::write(&path, &spec).unwrap();
        match SpecFile::load(&path).unwrap().load_data() {
            Err(kynml_core::plan::LoadError::Spec { error, source_text, .. }) => {
                kynml_core::spec::render("s.kyn", &source_text, &error.diagnostics)
            }
            Err(other) => other.to_string(),
            Ok(_) => "ok".into(),
        }
    };
    let check = |dataset_extra: &str, layers: &str| check_on(data, dataset_extra, layers);
    // Text in a column not declared categorical: the message says how.
    let text = check("", "");
    assert!(text.contains("d.csv:2") && text.contains("categorical = [\"city\"]"), "{text}");
    let text = check(" categorical = [city]", "");
    assert!(text.contains("need an `embedding` layer") && text.contains("categorical = [city]"), "{text}");
    let text = check_on("a,b,y\n1,2,3\n4,5,6\n7,8,9\n", "", " embedding 2");
    assert!(text.contains("the dataset declares none") && text.contains("embedding 2"), "{text}");
    let text = check(" categorical = [ctiy]", " embedding 2");
    assert!(text.contains("no column `ctiy`") && text.contains("did you mean `city`"), "{text}");
    assert_eq!(check(" categorical = [\"city\"]", " embedding 2"), "ok");
}

// ---- texts ----

/// Texts of 1 to 12 words from a 30-word vocabulary, some words carrying a
/// class; and a spec that reads them as 16 tokens (`input seq 16`).
fn text_spec(dir: &Path, seed: u64, layers: &str) -> PathBuf {
    let mut rng = kynml_core::rng::SplitMix64::new(seed);
    let words: Vec<String> = (0..30).map(|i| format!("w{i}")).collect();
    let mut csv = String::from("label,text\n");
    for _ in 0..360 {
        let n = 1 + rng.below(12) as usize;
        let text: Vec<&str> = (0..n).map(|_| words[rng.below(30) as usize].as_str()).collect();
        // The class: whether the words w0..w9 outnumber w10..w19.
        let score: i32 = text
            .iter()
            .map(|w| match w[1..].parse::<i32>().unwrap() {
                0..=9 => 1,
                10..=19 => -1,
                _ => 0,
            })
            .sum();
        csv += &format!("{},{}\n", if score > 0 { "up" } else { "down" }, text.join(" "));
    }
    std::fs::write(dir.join("texts.csv"), csv).unwrap();
    let spec = format!(
        "dataset T:\n source = csv(\"texts.csv\")\n target = \"label\"\n tokens = \"text\"\n\
         model M:\n input seq 16\n{layers}\n dense 2 linear\n\
         train:\n model = M\n data = T\n loss = cross_entropy\n optimizer = adam(lr=0.01)\n epochs = 6\n batch = 32\n seed = {seed}\n"
    );
    let path = dir.join("text.kyn");
    std::fs::write(&path, spec).unwrap();
    path
}

/// The native CPU engine against Burn's CPU backend on texts, sequences of
/// numbers and categorical columns: token embedding with padding, learned
/// positions, the transformer block with its four dropouts, plain attention
/// (in a residual block), dense and layernorm on each position and the
/// masked mean; a sequence's NaN padding; the categorical columns' tables. The same masks must be drawn in the same order for the runs to
/// agree.
#[test]
fn the_native_engine_trains_text_and_sequence_models_as_burn_does() {
    let cpu = select(DeviceChoice::Cpu).unwrap();
    let seed = clock_seed();
    let text = |dir: &Path, layers: &str| text_spec(dir, seed, layers);
    let sequence = |dir: &Path, layers: &str| sequence_spec(dir, seed, layers).0;
    // The categorical model is written whole by its helper.
    let categorical = |dir: &Path, _: &str| categorical_spec(dir, seed, "");
    type Writer<'a> = &'a dyn Fn(&Path, &str) -> PathBuf;
    let cases: [(Writer, &str); 9] = [
        (&categorical, " embedding 3 (of two categorical columns)\n dense 16 tanh"),
        (&text, " embedding 8\n positional\n transformer heads=2 ff=16 dropout=0.1\n layernorm\n global_avgpool"),
        (&text, " embedding 8\n attention heads=4\n dense 6 gelu\n layernorm\n global_avgpool\n dropout 0.2"),
        (&text, " embedding 8\n residual:\n  layernorm\n  attention heads=2\n global_avgpool"),
        // Widened: each position's input through the block's projection.
        (&text, " embedding 8\n residual:\n  attention heads=2\n  dense 12 gelu\n layernorm\n global_avgpool"),
        // Wider heads (64 values in 4 heads of 16) reach gemm's larger micro-kernels.
        (&text, " embedding 64\n positional\n transformer heads=4 ff=96 dropout=0.1\n global_avgpool"),
        (&sequence, " dense 8 tanh\n positional\n transformer heads=2 ff=12 dropout=0.1\n global_avgpool"),
        // Positions flattened into plain features (padding's included, as Burn does).
        (&text, " embedding 4\n flatten\n dense 6 tanh"),
        (&sequence, " dense 3 tanh\n flatten\n dense 6 tanh"),
    ];
    for (spec, layers) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let path = spec(tmp.path(), layers);
        // Adam with a larger epsilon than its 1e-8. Adam's first step moves
        // every weight by lr whatever its gradient's size, so a weight whose
        // gradient is near 0 (a sum that cancels) moves by the sign of the
        // rounding noise, differently on each engine: with eps 1e-8, 2 seeds
        // in 160 parted by 1.3e-4 and 2e-4 (the wider model's gaps grew from
        // 2e-7 to 1e-5 in loss over 3 epochs); with eps 1e-6 the same seeds
        // stay within 4e-6, and SGD within 2e-7 (measured). A gradient of
        // real size still gets Adam's full steps.
        let text = std::fs::read_to_string(&path).unwrap();
        let text: Vec<&str> = text
            .lines()
            .map(|line| {
                if line.trim_start().starts_with("optimizer =") {
                    " optimizer = adam(lr=0.01, eps=1e-6)"
                } else {
                    line
                }
            })
            .collect();
        std::fs::write(&path, text.join("\n") + "\n").unwrap();
        let mut file = SpecFile::load(&path).unwrap();
        file.spec.train.epochs.value = 3;
        let data = file.load_data().unwrap();
        let (native, burn) = native_and_burn(&file, &data, &cpu);
        let gap = worst_loss_gap(&burn, &native);
        // Tensor by tensor, relative to the largest weight. The keys' bias
        // (the middle third of `in_proj_bias`) is left out: adding it moves
        // every score of a query by the same amount, which the softmax
        // cancels, so its true gradient is 0 and what each engine computes
        // is rounding noise, which Adam scales up to full steps (measured:
        // 3e-3 apart after 3 epochs, every other tensor within 3e-7).
        let tensors = |r: &kynml_core::train::TrainResult| r.model.tensors("");
        let (tn, tb) = (tensors(&native), tensors(&burn));
        let mut scale = 0.0f32;
        let mut pairs = Vec::new();
        for (a, b) in tn.iter().zip(&tb) {
            use kynml_core::checkpoint::TensorData::F32;
            let (F32(x), F32(y)) = (&a.data, &b.data) else { panic!("{}: not f32", a.name) };
            let keys = if a.name.ends_with("in_proj_bias") { x.len() / 3..2 * x.len() / 3 } else { 0..0 };
            for (i, (p, q)) in x.iter().zip(y).enumerate().filter(|(i, _)| !keys.contains(i)) {
                scale = scale.max(q.abs());
                pairs.push((a.name.clone(), i, (p - q).abs()));
            }
        }
        let (name, at, worst) =
            pairs.into_iter().fold((String::new(), 0, 0.0f32), |m, p| if p.2.is_nan() || p.2 > m.2 { p } else { m });
        let weight_gap = worst / scale;
        eprintln!(
            "native vs burn, {layers:?}: worst relative loss gap {gap:.2e}, weights {weight_gap:.2e} ({name}[{at}]) (seed {seed})"
        );
        // As for the plain stacks above: fp32 both, summed in other orders.
        assert!(gap <= 1e-4, "{layers:?}: loss gap {gap} (seed {seed})");
        assert!(weight_gap <= 1e-4, "{layers:?}: weight gap {weight_gap} (seed {seed})");
    }
}

#[test]
fn text_models_train_on_every_backend_and_export_with_their_tokens() {
    let seed = clock_seed();
    text_round_trip(seed, " embedding 8\n global_avgpool\n dense 8 tanh");
    // Attention over the tokens, alone and in pre-norm blocks (one in a
    // `residual:` block written out, one `transformer` with its dropouts).
    // Alone, in heads of one value each: wgpu's products of those gave
    // outputs 0.07-0.24 off the CPU's (the blocks' heads are 2 and 4 wide).
    text_round_trip(seed + 1, " embedding 8\n attention heads=8\n global_avgpool");
    // The written-out block widens each position (8 to 12) through its projection.
    let blocks = " embedding 8\n positional\n residual:\n  layernorm\n  attention heads=4\n  dense 12 gelu\n transformer heads=2 ff=16 dropout=0.1\n layernorm\n global_avgpool";
    text_round_trip(seed + 2, blocks);
}

fn text_round_trip(seed: u64, layers: &str) {
    use kynml_core::export;
    eprintln!("{layers}: seed {seed}");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let path = text_spec(dir, seed, layers);
    let mut file = SpecFile::load(&path).unwrap();
    let data = file.load_data().unwrap();
    let tokens = data.info.tokens.clone().unwrap();
    assert_eq!((tokens.length, tokens.size()), (16, 32), "30 words, padding and unseen");
    assert_eq!(data.n_features(), 16);

    let cpu = select(DeviceChoice::Cpu).unwrap();
    let result = train(&file.spec, &data, &cpu, &TrainSettings::default(), &mut |_| {}).unwrap();
    // Whether it learns: the training loss of a 10-epoch run against the
    // entropy of the training labels (what predicting their frequencies
    // scores). 360 rows hold 72 for validation, too few for a steady
    // validation loss; over 24 seeds the training loss ended at most at
    // 0.43 of that entropy after 10 epochs (0.87 after 6).
    let kynml_core::data::Labels::Classes(classes) = &data.train.labels else { panic!("a classifier") };
    let up = classes.iter().filter(|&&c| c == 1).count() as f64 / classes.len() as f64;
    let entropy = -(up * up.ln() + (1.0 - up) * (1.0 - up).ln());
    let mut longer = file.spec.clone();
    longer.train.epochs.value = 10;
    let history = train(&longer, &data, &cpu, &TrainSettings::default(), &mut |_| {}).unwrap().history;
    let last = history.last().unwrap();
    eprintln!("cpu: train_loss {} after 10 epochs, labels' entropy {entropy}", last.train_loss);
    assert!(last.train_loss < 0.7 * entropy, "did not learn: {} (seed {seed})", last.train_loss);

    tracks_cpu_fp32(&file, &data, &path, &result, seed);

    // Fresh rows of ids: texts of 0 to 16 tokens, unseen ones among them.
    let exported = export::from_model(&result.model, &file.spec.model, &data.info, file.spec.train.loss.value);
    let mut rng = kynml_core::rng::SplitMix64::new(seed ^ 0x7e57);
    let n = 40;
    let raw: Vec<f32> = (0..n)
        .flat_map(|r| {
            let len = r % 17;
            (0..16).map(|i| if i < len { 1 + rng.below(31) } else { 0 } as f32).collect::<Vec<_>>()
        })
        .collect();
    let predictors = exports_agree(&result, &exported, &data, &raw, dir, seed);
    for p in &predictors {
        assert_eq!(p.model().tokens.as_ref(), Some(&tokens), "the loaded export keeps the tokens");
    }
    let predictor = &predictors[0];

    // New texts read by name: cut at 16 tokens, padded, unseen words counted.
    let rows_csv = dir.join("new.csv");
    let long: Vec<&str> = std::iter::repeat_n("w3", 20).collect();
    std::fs::write(&rows_csv, format!("text\nw1 nope w2\n{}\n", long.join(" "))).unwrap();
    let m = predictor.model();
    let rows = m.read_rows(&rows_csv, false).unwrap();
    assert_eq!(rows.unseen, [("text".to_string(), 1)]);
    let id = |w: &str| 2.0 + tokens.tokens.iter().position(|t| t == w).unwrap() as f32;
    let mut first = vec![id("w1"), 1.0, id("w2")];
    first.resize(16, 0.0);
    assert_eq!(&rows.features[..16], &first[..]);
    assert!(rows.features[16..].iter().all(|v| *v == id("w3")));

    // A token id past the vocabulary is the caller's error, not a read
    // outside the embedding's table.
    let mut past = rows.features.clone();
    past[16 + 5] = tokens.size() as f32;
    let err = predictor.predict(&past).unwrap_err();
    assert!(matches!(err, kynml_core::predict::PredictError::NotAnIndex { row: 1, .. }), "{err:?}");
    assert!(err.to_string().contains("token indices") && err.to_string().contains("(padding)"), "{err}");

    // A model file whose normaliser would shift the token indices (made
    // by hand, or by another tool) is refused, as are weights that are
    // not numbers: either would read outside a table or answer NaN for
    // every row, blamed on the rows.
    let mut shifted = exported.clone();
    shifted.normalizer = Some((vec![0.5; 16], vec![1.0; 16]));
    assert_eq!(shifted.validate().unwrap_err(), "the normalizer would change the text's token indices");
    assert!(kynml_core::predict::Predictor::new(shifted, &cpu).is_err());
    let mut broken = exported.clone();
    let last = broken.layers.len() - 1;
    match &mut broken.layers[last].tensors[0].data {
        kynml_core::checkpoint::TensorData::F32(v) => v[0] = f32::NAN,
        other => panic!("the last layer's first tensor holds {other:?}"),
    }
    let err = broken.validate().unwrap_err();
    assert!(err.contains("holds NaN; weights must be finite"), "{err}");
}

#[test]
fn a_text_model_and_its_data_must_match() {
    let tmp = tempfile::tempdir().unwrap();
    let path = text_spec(tmp.path(), 1, " embedding 8\n global_avgpool");
    let load = |spec: &str| {
        std::fs::write(&path, spec).unwrap();
        match SpecFile::load(&path).and_then(|mut f| f.load_data().map(|_| ())) {
            Err(kynml_core::plan::LoadError::Spec { error, source_text, .. }) => {
                kynml_core::spec::render("s.kyn", &source_text, &error.diagnostics)
            }
            Err(other) => other.to_string(),
            Ok(()) => "ok".into(),
        }
    };
    let spec = std::fs::read_to_string(&path).unwrap();
    assert_eq!(load(&spec), "ok");
    let t = load(&spec.replace(" tokens = \"text\"\n", ""));
    assert!(t.contains("names no text column") && t.contains("tokens = \"review\""), "{t}");
    let t = load(&spec.replace("input seq 16", "input 16").replace(" embedding 8\n global_avgpool\n", ""));
    assert!(t.contains("does not read one") && t.contains("input seq 64"), "{t}");
    let t = load(&spec.replace(" embedding 8\n global_avgpool\n", " dense 4 relu\n"));
    assert!(t.contains("go through `embedding D` first"), "{t}");
    let t = load(&spec.replace(" global_avgpool\n", ""));
    assert!(t.contains("the model ends on 16x2 values") && t.contains("add `global_avgpool`"), "{t}");
    let t = load(&spec.replace("tokens = \"text\"", "tokens = \"txt\""));
    assert!(t.contains("no column `txt`") && t.contains("did you mean `text`"), "{t}");
}

// ---- sequences of numbers ----

/// Rows of two sequence columns, `x` and `y`, of 0 to 20 values each (a
/// model of 12 positions cuts the longer ones), and a spec that reads them
/// as `input seq 12x2`. The class: whether `x` is above `y` on the whole
/// (a row of no values is `below`). Returns the spec and the rows, as
/// `(x, y, class)`.
/// One row of [`sequence_spec`]'s data: its `x`, its `y` and its class.
type TraceRow = (Vec<f32>, Vec<f32>, String);

fn sequence_spec(dir: &Path, seed: u64, layers: &str) -> (PathBuf, Vec<TraceRow>) {
    let mut rng = kynml_core::rng::SplitMix64::new(seed);
    let mut rows = Vec::new();
    let mut csv = String::from("x,label,y\n");
    for _ in 0..360 {
        let n = rng.below(21) as usize;
        let step = rng.uniform(-1.0, 1.0) as f32;
        let start = rng.uniform(-3.0, 3.0) as f32;
        let x: Vec<f32> = (0..n).map(|i| start + step * i as f32 + rng.uniform(-0.3, 0.3) as f32).collect();
        let y: Vec<f32> = (0..n).map(|_| rng.uniform(-2.0, 2.0) as f32).collect();
        let above = x.iter().zip(&y).map(|(x, y)| x - y).sum::<f32>() > 0.0;
        let class = if above { "above" } else { "below" };
        let join = |v: &[f32]| v.iter().map(|v| format!("{v:.3}")).collect::<Vec<_>>().join(" ");
        csv += &format!("{},{class},{}\n", join(&x), join(&y));
        let round = |v: Vec<f32>| v.iter().map(|v| format!("{v:.3}").parse().unwrap()).collect();
        rows.push((round(x), round(y), class.to_string()));
    }
    std::fs::write(dir.join("traces.csv"), csv).unwrap();
    let spec = format!(
        "dataset T:\n source = csv(\"traces.csv\")\n target = \"label\"\n sequence = [\"x\", \"y\"]\n normalize = true\n\
         model M:\n input seq 12x2\n{layers}\n dense 2 linear\n\
         train:\n model = M\n data = T\n loss = cross_entropy\n optimizer = adam(lr=0.01)\n epochs = 6\n batch = 32\n seed = {seed}\n"
    );
    let path = dir.join("traces.kyn");
    std::fs::write(&path, spec).unwrap();
    (path, rows)
}

#[test]
fn sequence_models_train_on_every_backend_and_export_with_their_padding() {
    let seed = clock_seed();
    // Each position mapped alike, then pooled; and positions, a transformer
    // block with its dropouts, a norm and the masked mean.
    sequence_round_trip(seed, " dense 8 tanh\n global_avgpool");
    sequence_round_trip(
        seed + 1,
        " dense 8 tanh\n positional\n transformer heads=2 ff=16 dropout=0.1\n layernorm\n global_avgpool",
    );
}

fn sequence_round_trip(seed: u64, layers: &str) {
    use kynml_core::export;
    eprintln!("{layers}: seed {seed}");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (path, rows) = sequence_spec(dir, seed, layers);
    let mut file = SpecFile::load(&path).unwrap();
    let data = file.load_data().unwrap();

    // What was read: 12 positions of (x, y), cut or NaN-padded, counted.
    let s = data.info.sequence.clone().unwrap();
    assert_eq!((s.columns.as_slice(), s.length, s.channels()), (&["x".to_string(), "y".to_string()][..], 12, 2));
    assert_eq!(s.cut, rows.iter().filter(|r| r.0.len() > 12).count());
    assert_eq!(s.longest, rows.iter().map(|r| r.0.len()).max().unwrap());
    assert_eq!(data.n_features(), 24);
    assert_eq!(data.info.feature_names[..3], ["x[0]", "y[0]", "x[1]"]);
    let expected = |r: &TraceRow| -> Vec<f32> {
        (0..12)
            .flat_map(|p| [r.0.get(p).copied().unwrap_or(f32::NAN), r.1.get(p).copied().unwrap_or(f32::NAN)])
            .collect()
    };
    // Standardized per column over the positions present: padding stays NaN.
    let norm = data.info.normalizer.as_ref().unwrap();
    assert!(norm.mean.chunks(2).all(|m| m == &norm.mean[..2]), "one mean per column, at every position");
    let first_row = data.train.rows[0];
    let mut want = expected(&rows[first_row]);
    norm.apply(&mut want);
    let got = &data.train.features[..24];
    for (g, w) in got.iter().zip(&want) {
        assert!(g.is_nan() == w.is_nan() && (g.is_nan() || (g - w).abs() < 1e-5), "{got:?} vs {want:?}");
    }

    let cpu = select(DeviceChoice::Cpu).unwrap();
    let result = train(&file.spec, &data, &cpu, &TrainSettings::default(), &mut |_| {}).unwrap();
    // Whether it learns: the best validation loss of a 24-epoch run against
    // what predicting the training split's class shares scores. Against
    // the first epoch's loss it failed (0.44 -> 0.28 at seed 34: the first
    // epoch had learned much), and the last epoch's loss is no measure on
    // 72 validation rows under Adam (0.95 of the shares' loss after 12
    // epochs at one seed). Over 118 seeds a side (300-500), the best of 24
    // epochs was at most 0.28 (dense) and 0.33 (transformer) of it.
    let mut longer = file.spec.clone();
    longer.train.epochs.value = 24;
    let history = train(&longer, &data, &cpu, &TrainSettings::default(), &mut |_| {}).unwrap().history;
    let best = history.iter().map(|e| e.val_loss).fold(f64::INFINITY, f64::min);
    let prior = prior_loss(&data);
    eprintln!("cpu: best val_loss {best} in 24 epochs, {} after 1; the class shares' {prior}", history[0].val_loss);
    assert!(best < 0.5 * prior, "did not learn: {best}, where the class shares' loss is {prior} (seed {seed})");

    // Standardized numbers rather than embeddings: under SGD wgpu drifted
    // 2.9e-7 to 3.7e-6 from the CPU over 6 epochs (seeds 21 to 23), and one
    // clock seed past 1e-5; a mask or formula that differs gives 1e-2.
    tracks_cpu_fp32_within(&file, &data, &path, &result, seed, 1e-4);

    // Fresh rows: 0 to 16 positions, NaN beyond.
    let exported = export::from_model(&result.model, &file.spec.model, &data.info, file.spec.train.loss.value);
    let mut rng = kynml_core::rng::SplitMix64::new(seed ^ 0x5e9);
    let raw: Vec<f32> = (0..40)
        .flat_map(|r| {
            let len = r % 13;
            (0..24).map(|i| if i / 2 < len { rng.uniform(-3.0, 3.0) as f32 } else { f32::NAN }).collect::<Vec<_>>()
        })
        .collect();
    let predictors = exports_agree(&result, &exported, &data, &raw, dir, seed);
    assert_eq!(predictors[0].model().sequence.as_ref().map(|s| &s.columns), Some(&s.columns), "the export keeps them");
    // A position absent in one of its values and present in the other is
    // refused, either way round (the model reads presence from `x` alone).
    let mut partial = raw[5 * 24..6 * 24].to_vec();
    partial[2 * 2 + 1] = f32::NAN;
    let e = predictors[0].predict(&partial).unwrap_err().to_string();
    assert!(e.contains("position 3 of the sequence is NaN in `y[2]` but a number in `x[2]`"), "{e}");
    let mut partial = raw[5 * 24..6 * 24].to_vec();
    partial[7 * 2 + 1] = 1.0;
    let e = predictors[0].predict(&partial).unwrap_err().to_string();
    assert!(e.starts_with("row 1: position 8 of the sequence is NaN in `x[7]` but a number in `y[7]`"), "{e}");

    // New rows read by name, in any column order: cut at 12, padded.
    let rows_csv = dir.join("new.csv");
    let long: Vec<String> = (0..15).map(|i| i.to_string()).collect();
    std::fs::write(&rows_csv, format!("y,x\n\"4;5\",\"1, 2\"\n{},{}\n", long.join(" "), long.join(" "))).unwrap();
    let m = predictors[0].model();
    let new = m.read_rows(&rows_csv, false).unwrap();
    let mut first = vec![1.0, 4.0, 2.0, 5.0];
    first.resize(24, f32::NAN);
    assert_eq!(format!("{:?}", &new.features[..24]), format!("{first:?}"));
    let second: Vec<f32> = (0..12).flat_map(|i| [i as f32, i as f32]).collect();
    assert_eq!(new.features[24..], second[..]);
}

#[test]
fn a_sequence_model_and_its_data_must_match() {
    let tmp = tempfile::tempdir().unwrap();
    let (path, _) = sequence_spec(tmp.path(), 1, " dense 4 tanh\n flatten");
    let load = |spec: &str, csv: Option<&str>| {
        std::fs::write(&path, spec).unwrap();
        if let Some(csv) = csv {
            std::fs::write(tmp.path().join("traces.csv"), csv).unwrap();
        }
        match SpecFile::load(&path).and_then(|mut f| f.load_data().map(|_| ())) {
            Err(kynml_core::plan::LoadError::Spec { error, source_text, .. }) => {
                kynml_core::spec::render("s.kyn", &source_text, &error.diagnostics)
            }
            Err(other) => other.to_string(),
            Ok(()) => "ok".into(),
        }
    };
    let spec = std::fs::read_to_string(&path).unwrap();
    assert_eq!(load(&spec, None), "ok");
    let t = load(&spec.replace(" sequence = [\"x\", \"y\"]\n", ""), None);
    assert!(t.contains("names no sequence column") && t.contains("sequence = [\"x\", \"y\"]"), "{t}");
    let t = load(&spec.replace("sequence = [\"x\", \"y\"]", "sequence = \"x\""), None);
    assert!(t.contains("takes 2 values per position") && t.contains("`input seq 12x1`"), "{t}");
    let t = load(&spec.replace("input seq 12x2", "input 24"), None);
    assert!(t.contains("does not read a sequence") && t.contains("input seq 64x2"), "{t}");
    let t = load(&spec.replace("sequence = [\"x\", \"y\"]", "sequence = [\"x\", \"z\"]"), None);
    assert!(t.contains("has no column `z`"), "{t}");
    // The data: a value that is not a number, columns of different lengths,
    // a column beside the sequences; each names its line.
    let t = load(&spec, Some("x,label,y\n1 2,a,3 4\n1 2 b,a,3 4 5\n"));
    assert!(t.contains(":3: column 1 (`x`)") && t.contains("its value 3 is \"b\""), "{t}");
    let t = load(&spec, Some("x,label,y\n1 2,a,3 4\n1 2,a,3 4 5\n"));
    assert!(t.contains(":3: `x` holds 2 values and `y` 3"), "{t}");
    // Commas and semicolons separate two values: with nothing between them,
    // or at an end, a value is missing (it read as a shorter sequence).
    let t = load(&spec, Some("x,label,y\n\"1, 2\",a,3 4\n\"1,,2\",a,\"3,4,5\"\n"));
    assert!(t.contains(":3: column 1 (`x`) misses its value 2"), "{t}");
    let t = load(&spec, Some("x,label,y\n1 2,a,3 4\n\"1 ; 2\",a,\"3,,4\"\n"));
    assert!(t.contains(":3: column 3 (`y`) misses its value 2"), "{t}");
    // One at the end ends the sequence (as a loop writing `v,` leaves it).
    assert_eq!(load(&spec, Some("x,label,y\n\"1,2,\",a,\"3;4; \"\n1 2,b,3 4\n")), "ok");
    let t = load(&spec, Some("x,label,y\n\",1\",a,3 4\n"));
    assert!(t.contains(":2: column 1 (`x`) misses its value 1"), "{t}");
    assert_eq!(load(&spec, Some("x,label,y\n\"1, 2\",a,\"3;4\"\n\" 1 ,2 \",b,3  4\n,a,\n")), "ok");
    // A column beside them is the spec's `sequence` line's to say.
    let t = load(&spec, Some("x,label,y,z\n1 2,a,3 4,5\n"));
    assert!(t.contains("has a column `z` (column 4) beside the sequence `x`, `y`"), "{t}");
    assert!(t.contains("s.kyn:") && t.contains("or add it to `sequence`"), "{t}");
}

// ---- strategies ----

/// Keeps epoch 1 as the best and stops after epoch 3, whatever the losses.
#[derive(Debug, Clone, Default)]
struct KeepFirstStopAtThree {
    best: Option<usize>,
}

impl kynml_core::train::EarlyStopping for KeepFirstStopAtThree {
    fn observe(&mut self, epoch: usize, _val_loss: f64) -> kynml_core::train::Verdict {
        use kynml_core::train::Verdict;
        match epoch {
            1 => {
                self.best = Some(1);
                Verdict::Improved
            }
            3.. => Verdict::Stop,
            _ => Verdict::Wait,
        }
    }
    fn best_epoch(&self) -> Option<usize> {
        self.best
    }
    fn state(&self) -> kynml_core::train::resume::StopState {
        kynml_core::train::resume::StopState { best: 0.0, best_epoch: self.best, bad_epochs: 0 }
    }
    fn restore(&mut self, saved: &kynml_core::train::resume::StopState) {
        self.best = saved.best_epoch;
    }
    fn boxed(&self) -> Box<dyn kynml_core::train::EarlyStopping> {
        Box::new(self.clone())
    }
}

/// Checkpoints after epoch 2 only.
#[derive(Debug)]
struct OnlyAfterTwo;

impl kynml_core::train::Checkpointing for OnlyAfterTwo {
    fn due(&self, epoch: usize, _last: usize, _stopping: bool) -> bool {
        epoch == 2
    }
}

#[test]
fn a_program_hands_the_loop_its_own_stop_and_checkpoint_rules() {
    let tmp = tempfile::tempdir().unwrap();
    let path = random_regression_spec(tmp.path(), 5, " dense 8 relu\n dense 1 linear");
    let source = std::fs::read_to_string(&path).unwrap();
    let with_checkpoints =
        source.replace(" epochs = 4\n", " epochs = 6\n checkpoint = checkpoint(every_n=1, path=\"ckpt/m.ckpt\")\n");
    std::fs::write(&path, with_checkpoints).unwrap();
    let mut file = SpecFile::load(&path).unwrap();
    let data = file.load_data().unwrap();
    let cpu = select(DeviceChoice::Cpu).unwrap();
    let settings = TrainSettings {
        checkpoint_path: file.checkpoint_path(),
        early_stopping: Some(Box::new(KeepFirstStopAtThree::default())),
        checkpointing: Some(std::sync::Arc::new(OnlyAfterTwo)),
        ..TrainSettings::default()
    };
    let result = train(&file.spec, &data, &cpu, &settings, &mut |_| {}).unwrap();
    assert_eq!((result.history.len(), result.stopped_early, result.best_epoch), (3, true, Some(1)));
    // The run returns epoch 1's weights: those of a one-epoch run.
    let mut one = file.spec.clone();
    one.train.epochs.value = 1;
    one.train.checkpoint = None;
    let first = train(&one, &data, &cpu, &TrainSettings::default(), &mut |_| {}).unwrap();
    let weights = |r: &kynml_core::train::TrainResult| -> Vec<Vec<f32>> {
        r.model.layers.iter().flat_map(|l| l.state()).map(|(_, t)| t.to_vec::<f32>().unwrap()).collect()
    };
    assert_eq!(weights(&result), weights(&first));
    // Its final metrics are those weights', evaluated by the engine that
    // trained them (the native one here): exactly epoch 1's validation loss.
    assert_eq!(result.final_metrics["val_loss"], result.history[0].val_loss);
    assert_eq!(result.final_metrics["val_loss"], first.final_metrics["val_loss"]);
    // The only checkpoint written is epoch 2's, the stop after epoch 3 not.
    let (_, state) = file.find_checkpoint(&data).unwrap().expect("a checkpoint");
    assert_eq!(state.epoch, 2);
}

/// A service trains on rows it holds in memory: the same dataset as from the
/// file, and the same located errors, naming the spec's source.
#[test]
fn a_spec_held_in_memory_trains_on_rows_held_in_memory() {
    let iris = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/iris");
    let source = std::fs::read_to_string(iris.join("iris.kyn")).unwrap();
    let csv = std::fs::read(iris.join("iris.csv")).unwrap();
    // The spec's folder holds no data: the rows come from memory.
    let nowhere = tempfile::tempdir().unwrap();
    let mut file = SpecFile::from_source(&nowhere.path().join("iris.kyn"), source.clone()).unwrap();
    let data = file.load_data_from(&csv).unwrap();
    let mut from_disk = SpecFile::from_source(&iris.join("iris.kyn"), source).unwrap();
    let expected = from_disk.load_data().unwrap();
    assert_eq!(data.train.len(), expected.train.len());
    assert_eq!(data.info.class_names, expected.info.class_names);
    assert_eq!(data.info.normalizer, expected.info.normalizer);
    let bad = String::from_utf8(csv).unwrap().replacen("5.1", "five", 1);
    let err = file.load_data_from(bad.as_bytes()).unwrap_err().to_string();
    assert!(err.contains("iris.csv:2") && err.contains("five"), "{err}");
}

/// The run's speed leaves out its start where it ran at less than half the
/// rest's pace: this process's first epoch, or in a one-epoch run its first
/// step. On a GPU they tune and compile the kernels, for minutes on a first
/// run (2 samples/s were said of a run whose epochs ran at 287), and the
/// device work a first step queues finishes in the steps after it.
#[test]
fn the_runs_speed_leaves_a_slow_start_out() {
    let tmp = tempfile::tempdir().unwrap();
    let path = random_regression_spec(tmp.path(), 3, " dense 16 relu\n dense 1 linear");
    let mut file = SpecFile::load(&path).unwrap();
    let n = file.load_data().unwrap().train.len() as f64;
    let result = run_to(&path, 3, false);
    // Each epoch's steps took its rows over its speed.
    let secs: Vec<f64> = result.history.iter().map(|r| n / r.samples_per_sec).collect();
    let (rows, steps) = match result.left_out {
        Some(first) => {
            assert_eq!((first.what, first.rows), ("epoch", n as usize), "{first:?}");
            assert!((first.seconds - secs[0]).abs() <= 1e-9 * secs[0], "{first:?} against {secs:?}");
            assert!(secs[0] > (secs[1] + secs[2]), "{secs:?}: the first epoch at less than half the others' pace");
            (2.0 * n, secs[1] + secs[2])
        }
        None => {
            assert!(secs[0] <= secs[1] + secs[2], "{secs:?}: a first epoch that slow is left out");
            (3.0 * n, secs.iter().sum())
        }
    };
    let expected = rows / steps;
    let gap = (result.samples_per_sec - expected).abs() / expected;
    assert!(gap < 1e-9, "{} samples/s, {expected} expected", result.samples_per_sec);
    // One epoch of one step: nothing to leave out, its speed is the run's.
    let one = tmp.path().join("one.kyn");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&one, text.replace(&format!("batch = {}", file.spec.train.batch.value), "batch = 100000")).unwrap();
    let result = run_to(&one, 1, false);
    assert_eq!(result.left_out, None);
    let epoch = result.history[0].samples_per_sec;
    assert!((result.samples_per_sec - epoch).abs() <= 1e-12 * epoch, "{} against {epoch}", result.samples_per_sec);
    // One epoch of several steps: a slow first step is what is left out.
    let result = run_to(&path, 1, false);
    if let Some(first) = result.left_out {
        assert_eq!(first.what, "step", "{first:?}");
    }
}
