//! The `kynml` binary end to end, as a user runs it, in temporary folders.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn kynml(args: &[&str], cwd: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kynml")).args(args).current_dir(cwd).output().unwrap()
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples").canonicalize().unwrap()
}

/// A copy of one example folder in a temp dir, so runs write nothing into the repo.
fn copy_example(name: &str) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(examples().join(name)).unwrap() {
        let entry = entry.unwrap();
        if entry.path().is_file() {
            std::fs::copy(entry.path(), tmp.path().join(entry.file_name())).unwrap();
        }
    }
    tmp
}

/// DeepNet's real data is generated (50 MB); 64 rows with its 128 feature
/// columns and its target are enough to check and train the spec.
fn small_deepnet_data(dir: &Path) {
    std::fs::create_dir_all(dir.join("data")).unwrap();
    let mut csv: String = (0..128).map(|i| format!("f{i},")).collect::<String>() + "outcome\n";
    for r in 0..64 {
        csv += &((0..129).map(|i| format!("{}", (r * 7 + i * 3) % 13)).collect::<Vec<_>>().join(",") + "\n");
    }
    std::fs::write(dir.join("data/large_train.csv"), csv).unwrap();
}

#[test]
fn check_prints_the_users_model_with_pytorchs_parameter_count() {
    let tmp = copy_example("deepnet");
    small_deepnet_data(tmp.path());
    let out = kynml(&["check", "deepnet.kyn"], tmp.path());
    assert!(out.status.success(), "{}", text(&out));
    let t = text(&out);
    assert!(t.contains("215,425"), "{t}");
    assert!(t.contains("dense 512 gelu") && t.contains("[batch, 512]") && t.contains("66,048"), "{t}");
}

#[test]
fn train_writes_a_complete_run_folder_and_says_what_runs() {
    let tmp = copy_example("iris");
    let out = kynml(&["train", "iris.kyn", "--epochs", "3", "--device", "cpu", "--out", "run1"], tmp.path());
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("what runs:") && t.contains("flex"), "{t}");
    // Not a terminal: one plain line per epoch, no control characters.
    assert_eq!(t.matches("\nepoch ").count(), 3, "{t}");
    assert!(!t.contains('\u{1b}') && !t.contains('\r'), "{t:?}");
    let run = tmp.path().join("run1");
    for f in [
        "spec.kyn",
        "spec.resolved.json",
        "data.json",
        "metrics.jsonl",
        "metrics.json",
        "model.mpk",
        "curves.svg",
        "curves.png",
    ] {
        assert!(run.join(f).is_file(), "missing {f}");
    }
    let png = std::fs::read(run.join("curves.png")).unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 10_000, "curves.png is not a drawn PNG");
    let svg = std::fs::read_to_string(run.join("curves.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("IrisNet on Iris (cpu)") && svg.contains("accuracy"), "curves.svg");
    let lines = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
    assert_eq!(lines.lines().count(), 3);
    let first: serde_json::Value = serde_json::from_str(lines.lines().next().unwrap()).unwrap();
    assert!(first["val_loss"].is_number() && first["metrics"]["accuracy"].is_number(), "{first}");
    let data: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("data.json")).unwrap()).unwrap();
    assert_eq!(data["class_names"], serde_json::json!(["setosa", "versicolor", "virginica"]));
    assert!(data["normalizer"]["mean"].as_array().unwrap().len() == 4, "{data}");
}

#[test]
fn the_users_spec_reports_every_setting_not_applied() {
    let tmp = copy_example("deepnet");
    small_deepnet_data(tmp.path());
    let out = kynml(&["train", "deepnet.kyn", "--epochs", "1", "--device", "cpu", "--out", "r"], tmp.path());
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    for needle in [
        "bf16 requested",
        "CPU backend has no kernel fusion",
        "4 worker threads, up to 2 batches prepared ahead",
        "pin_memory",
        "checkpoints/deepnet.pt",
        "torchscript",
    ] {
        assert!(t.contains(needle), "missing {needle:?} in\n{t}");
    }
    assert!(!tmp.path().join("checkpoints").exists() && !tmp.path().join("models").exists());
}

#[test]
fn a_bad_spec_exits_2_with_located_errors_and_writes_nothing() {
    let tmp = copy_example("iris");
    let spec = std::fs::read_to_string(tmp.path().join("iris.kyn")).unwrap().replace("epochs = 60", "epoch = 60");
    std::fs::write(tmp.path().join("bad.kyn"), spec).unwrap();
    let out = kynml(&["train", "bad.kyn"], tmp.path());
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("bad.kyn:") && t.contains("epochs") && t.contains('^'), "{t}");
    assert!(!tmp.path().join("runs").exists());
}

#[test]
fn a_broken_csv_exits_2_naming_row_and_column() {
    let tmp = copy_example("iris");
    let csv = std::fs::read_to_string(tmp.path().join("iris.csv")).unwrap();
    let broken: Vec<String> = csv
        .lines()
        .enumerate()
        .map(|(i, l)| if i == 4 { format!("abc{}", &l[l.find(',').unwrap()..]) } else { l.to_string() })
        .collect();
    std::fs::write(tmp.path().join("iris.csv"), broken.join("\n")).unwrap();
    let out = kynml(&["train", "iris.kyn"], tmp.path());
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    // Line 5 of the file (the header is line 1), column 1.
    assert!(
        t.contains("iris.csv:5:") && t.contains("column 1") && t.contains("sepal_length_cm") && t.contains("abc"),
        "{t}"
    );
    assert!(!tmp.path().join("runs").exists());
}

#[test]
fn cuda_on_a_machine_without_it_is_a_clear_error() {
    if matches!(kynml_backend::probe_cuda(), kynml_backend::CudaProbe::Available(ref g) if !g.is_empty()) {
        return; // a GPU machine: nothing to refuse
    }
    let tmp = copy_example("iris");
    let out = kynml(&["train", "iris.kyn", "--device", "cuda"], tmp.path());
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("CUDA was requested but is not available"), "{t}");
    assert!(!t.contains("panicked"), "{t}");
}

#[test]
fn a_wrong_device_argument_is_refused() {
    let tmp = copy_example("iris");
    let out = kynml(&["train", "iris.kyn", "--device", "gpu"], tmp.path());
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).contains("expected auto, cpu, cuda, cuda:N or wgpu"));
}

#[test]
fn tensorboard_event_files_read_back_with_tensorboards_own_reader() {
    // scripts/test.sh installs the `tensorboard` Python package; the reader
    // is theirs, not ours, so this checks the file format independently.
    let tmp = copy_example("iris");
    let out = kynml(&["train", "iris.kyn", "--epochs", "3", "--device", "cpu", "--out", "tb"], tmp.path());
    assert!(out.status.success(), "{}", text(&out));
    let script = examples().join("../scripts/read_tensorboard.py");
    let read = Command::new("python3").arg(script).arg(tmp.path().join("tb")).output().unwrap();
    assert!(read.status.success(), "reader failed (run scripts/setup-python-test-deps.sh): {}", text(&read));
    let scalars: serde_json::Value = serde_json::from_slice(&read.stdout).unwrap();
    let jsonl = std::fs::read_to_string(tmp.path().join("tb/metrics.jsonl")).unwrap();
    for (i, line) in jsonl.lines().enumerate() {
        let epoch: serde_json::Value = serde_json::from_str(line).unwrap();
        for (tag, key) in [("loss/train", "train_loss"), ("loss/valid", "val_loss"), ("lr", "lr")] {
            let point = &scalars[tag][i];
            assert_eq!(point[0].as_i64(), Some(i as i64 + 1), "{tag}: {scalars}");
            let want = epoch[key].as_f64().unwrap() as f32;
            assert_eq!(point[1].as_f64().unwrap() as f32, want, "{tag} at epoch {}", i + 1);
        }
        let acc = epoch["metrics"]["accuracy"].as_f64().unwrap() as f32;
        assert_eq!(scalars["valid/accuracy"][i][1].as_f64().unwrap() as f32, acc);
    }
    assert!(scalars["step/train_loss"].as_array().is_some_and(|a| !a.is_empty()), "{scalars}");
}

#[test]
fn devices_lists_the_cpu_and_what_auto_picks() {
    let out = kynml(&["devices"], &examples());
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("cpu") && t.contains("threads") && t.contains("auto picks:"), "{t}");
    // Whatever CUDA state the machine is in, it is reported, never a panic.
    assert!(t.contains("cuda") && !t.contains("panicked"), "{t}");
}

#[test]
fn report_puts_runs_side_by_side_and_refuses_a_non_run() {
    let tmp = copy_example("iris");
    for (dir, epochs) in [("a", "2"), ("b", "4")] {
        let out = kynml(&["train", "iris.kyn", "--epochs", epochs, "--device", "cpu", "--out", dir], tmp.path());
        assert!(out.status.success(), "{}", text(&out));
    }
    let out = kynml(&["report", "a", "b"], tmp.path());
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    let rows: Vec<&str> =
        t.lines().filter(|l| l.trim_start().starts_with("a ") || l.trim_start().starts_with("b ")).collect();
    assert_eq!(rows.len(), 2, "{t}");
    assert!(rows[0].contains("IrisNet") && rows[0].contains("accuracy") && rows[1].contains(" 4 "), "{t}");
    let out = kynml(&["report", "a", "iris.kyn"], tmp.path());
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).contains("not a finished run folder"), "{}", text(&out));
}
