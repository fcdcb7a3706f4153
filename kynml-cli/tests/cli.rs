//! The `kynml` binary end to end, as a user runs it, in temporary folders.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn kynml(args: &[&str], cwd: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kynml")).args(args).current_dir(cwd).output().unwrap()
}

/// `kynml ARGS` started in `cwd` with its output piped: for a test that
/// reads the output as it comes, or signals the run. Ctrl-C (SIGINT) is
/// left to its default, as a terminal's foreground job has it, where the
/// suite itself may run with it ignored (a script's `... &`).
fn spawn(args: &[&str], cwd: &Path) -> std::process::Child {
    spawn_with_sigint(args, cwd, libc::SIG_DFL)
}

/// [`spawn`] with Ctrl-C's disposition `sigint` (`SIG_DFL` or `SIG_IGN`).
fn spawn_with_sigint(args: &[&str], cwd: &Path, sigint: libc::sighandler_t) -> std::process::Child {
    use std::os::unix::process::CommandExt;
    let mut command = Command::new(env!("CARGO_BIN_EXE_kynml"));
    command.args(args).current_dir(cwd).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    // SAFETY: signal(2) is async-signal-safe and touches no memory.
    unsafe {
        command.pre_exec(move || {
            libc::signal(libc::SIGINT, sigint);
            Ok(())
        });
    }
    command.spawn().unwrap()
}

/// `kynml ARGS` in `cwd`, allowed to write no file larger than `bytes`
/// (`ulimit -f`): past it, write(2) fails with EFBIG (kynml ignores the
/// SIGXFSZ that would otherwise end it).
fn kynml_limited(args: &[&str], cwd: &Path, bytes: libc::rlim_t) -> Output {
    use std::os::unix::process::CommandExt;
    let mut command = Command::new(env!("CARGO_BIN_EXE_kynml"));
    command.args(args).current_dir(cwd);
    // SAFETY: between fork and exec only async-signal-safe calls are made.
    unsafe {
        command.pre_exec(move || {
            let rl = libc::rlimit { rlim_cur: bytes, rlim_max: bytes };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &rl) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    command.output().unwrap()
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples").canonicalize().unwrap()
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

/// A child process killed (and reaped) when the test ends, passing or not:
/// a failed assertion must not leave a long training behind.
struct KillOnDrop(Option<std::process::Child>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `kynml train spec.kyn --out OUT` in `dir`, in the background, once it
/// has reported its second epoch: the process, and the rest of its output.
fn training_past_epoch_2(
    dir: &Path,
    out: &str,
) -> (KillOnDrop, std::io::Lines<std::io::BufReader<std::process::ChildStdout>>) {
    use std::io::BufRead;
    let mut child = spawn(&["train", "spec.kyn", "--out", out], dir);
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let child = KillOnDrop(Some(child));
    assert!(lines.any(|l| l.unwrap().starts_with("epoch   2 ")), "the run trains");
    (child, lines)
}

/// The files of folder `from` (not its subfolders) copied into a new folder `to`.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if entry.path().is_file() {
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
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
    // 215,425 fp32 parameters, their gradients, and AdamW's two moments.
    assert!(t.contains("weights 841.5 KiB, gradients 841.5 KiB, optimizer state 1.6 MiB"), "{t}");
    // On a GPU and on the CPU, where saving's copies count too: the native
    // engine's second copy of the weights (841.5 KiB), and the checkpoint's
    // weights, best weights and Adam state (3.3 MiB) with the largest
    // weight's moments (512 KiB each) encoded twice more (2 MiB); the best
    // weights (841.5 KiB) and, on the native engine, the largest weight twice
    // more while they are copied out of its network (1 MiB).
    let line = |on: &str| t.lines().find(|l| l.starts_with("memory: about ") && l.contains(on)).map(str::to_owned);
    let gpu = line(" in bf16 on a GPU (").unwrap_or_else(|| panic!("{t}"));
    // The spec's bf16 runs as fp32 on the CPU: said on its line.
    let cpu = line(" on the CPU, where bf16 runs as fp32 (").unwrap_or_else(|| panic!("{t}"));
    assert!(!gpu.contains("copies to save"), "{gpu}");
    assert!(
        cpu.contains(
            "optimizer state 1.6 MiB, best weights with their copying 1.8 MiB, copies to save 6.1 MiB, the data's \
             rows "
        ),
        "{cpu}"
    );
    // The data's rows are in host memory, not a GPU's.
    assert!(!gpu.contains("the data's rows"), "{gpu}");
    assert!(gpu.contains("optimizer state 1.6 MiB, best weights 841.5 KiB, activations"), "{gpu}");
    // `device = auto` may find a GPU where the run trains: no note. On
    // `device = cpu` the bf16 asked for never runs: said once, with why,
    // in "what runs" as `train` says it; in fp32 nothing is said.
    assert!(!t.contains("note: `precision"), "{t}");
    // What train would say runs on the device it would get here, with the
    // settings that do not apply as written marked (on a machine without a
    // GPU, the CPU: the torchscript export writes nothing).
    assert!(t.contains("on this machine, what runs:") && t.contains("  ! export        none (torchscript"), "{t}");
    let spec = std::fs::read_to_string(tmp.path().join("deepnet.kyn")).unwrap();
    std::fs::write(tmp.path().join("deepnet.kyn"), spec.replace("device = auto", "device = cpu")).unwrap();
    let t = text(&kynml(&["check", "deepnet.kyn"], tmp.path()));
    // Said once, where "what runs" marks it: no note repeating it above.
    assert!(!t.contains("note: `precision"), "{t}");
    assert_eq!(t.matches("bf16 requested, but the CPU trains in fp32 only").count(), 1, "{t}");
    assert!(t.contains("  ! precision     fp32 (bf16 requested"), "{t}");
    let spec = std::fs::read_to_string(tmp.path().join("deepnet.kyn")).unwrap();
    std::fs::write(tmp.path().join("deepnet.kyn"), spec.replace("precision = bf16", "precision = fp32")).unwrap();
    let t = text(&kynml(&["check", "deepnet.kyn"], tmp.path()));
    assert!(!t.contains("note: `precision") && !t.contains("runs as fp32") && t.contains(" on the CPU ("), "{t}");
    // `--device` checks it for another device, as `train --device` would run it.
    let out = kynml(&["check", "deepnet.kyn", "--device", "cpu,cpu"], tmp.path());
    let t = text(&out);
    assert!(out.status.success() && t.contains("data-parallel on 2 devices (cpu, cpu): batch "), "{t}");
    if !matches!(kynml_backend::probe_cuda(), kynml_backend::CudaProbe::Available(_)) {
        let out = kynml(&["check", "deepnet.kyn", "--device", "cuda:1"], tmp.path());
        let t = text(&out);
        assert!(out.status.success(), "said, not refused: {t}");
        assert!(
            t.contains(
                "note: `--device cuda:1`: this machine has no CUDA GPU; `kynml train --device cuda:1` would \
                        refuse it here"
            ),
            "{t}"
        );
    }
}

#[test]
fn check_says_what_the_categorical_columns_and_the_text_hold() {
    let tmp = copy_example("rentals");
    let out = kynml(&["check", "rentals.kyn"], tmp.path());
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("categorical: city (8 values), weekday (7 values), weather (4 values)"), "{t}");
    assert!(t.contains("embedding 4") && t.contains("[batch, 14]"), "{t}");
    let tmp = copy_example("reviews");
    let out = kynml(&["check", "reviews.kyn"], tmp.path());
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("text: `text`, 32 tokens per row, a vocabulary of 45 tokens"), "{t}");
    assert!(t.contains("[batch, 32, 16]"), "{t}");
    assert!(!t.contains("normalize"), "{t}");
    // `normalize = true` over token ids alone has nothing to standardize: said.
    let spec = std::fs::read_to_string(tmp.path().join("reviews.kyn")).unwrap();
    std::fs::write(
        tmp.path().join("reviews.kyn"),
        spec.replace("    split = 0.8", "    split = 0.8\n    normalize = true"),
    )
    .unwrap();
    let t = text(&kynml(&["check", "reviews.kyn"], tmp.path()));
    assert!(t.contains("note: normalize = true changes nothing here"), "{t}");
    assert!(t.contains("a vocabulary of 45 tokens; the longest holds 23 tokens"), "{t}");
    // Texts longer than the model reads are said, in check and train, and
    // by predict for the rows it reads.
    let spec = std::fs::read_to_string(tmp.path().join("reviews.kyn")).unwrap();
    std::fs::write(tmp.path().join("reviews.kyn"), spec.replace("input seq 32", "input seq 8")).unwrap();
    let t = text(&kynml(&["check", "reviews.kyn"], tmp.path()));
    assert!(
        t.contains("8 tokens per row, a vocabulary of 45 tokens; 2651 rows were longer and cut (the longest held 23)"),
        "{t}"
    );
    let out = kynml(&["train", "reviews.kyn", "--device", "cpu", "--epochs", "1", "--out", "run"], tmp.path());
    assert!(out.status.success() && text(&out).contains("2651 rows were longer and cut"), "{}", text(&out));
    std::fs::write(tmp.path().join("rows.csv"), "text\n\"\"\n\"a b c d e f g h i j k\"\ngood\n").unwrap();
    let t = text(&kynml(&["predict", "run", "rows.csv"], tmp.path()));
    assert!(t.contains("1 of the 3 rows holds more tokens than the model reads (the longest, 11)"), "{t}");
    assert!(t.contains("1 of the 3 rows holds no token: each is read as a text of padding alone"), "{t}");
    // Numbers beside the categories are standardized: no note.
    assert!(!text(&kynml(&["check", "rentals.kyn"], copy_example("rentals").path())).contains("normalize"));
    // Even when a number column is constant (standardized to mean 0, std 1
    // as if left alone): it is a quantity, not an index.
    let tmp = copy_example("rentals");
    let csv = std::fs::read_to_string(tmp.path().join("rentals.csv")).unwrap();
    let constant: String = csv
        .lines()
        .enumerate()
        .map(|(i, l)| {
            let cells: Vec<&str> = l.split(',').collect();
            let z = if i == 0 { "z" } else { "0" };
            format!("{},{},{},{z},{}\n", cells[0], cells[1], cells[2], cells[5])
        })
        .collect();
    std::fs::write(tmp.path().join("rentals.csv"), constant).unwrap();
    let spec = std::fs::read_to_string(tmp.path().join("rentals.kyn")).unwrap().replace("input 5", "input 4");
    std::fs::write(tmp.path().join("rentals.kyn"), spec).unwrap();
    let out = kynml(&["check", "rentals.kyn"], tmp.path());
    assert!(out.status.success() && !text(&out).contains("changes nothing"), "{}", text(&out));
}

/// A sequence cell with no value reads as all padding: counted in the data
/// summary and by `predict`, not passed over in silence.
#[test]
fn empty_sequences_are_said_in_the_summary_and_by_predict() {
    let tmp = copy_example("gestures");
    let dir = tmp.path();
    let csv = std::fs::read_to_string(dir.join("gestures.csv")).unwrap();
    let kept: String = csv.lines().take(80).map(|l| format!("{l}\n")).collect();
    std::fs::write(dir.join("gestures.csv"), kept + "\"\",\"\",circle\n,,line\n").unwrap();
    let t = text(&kynml(&["check", "gestures.kyn"], dir));
    assert!(t.contains("; 2 rows hold no values (all padding)"), "{t}");
    let out = kynml(&["train", "gestures.kyn", "--epochs", "1", "--out", "run"], dir);
    assert!(out.status.success(), "{}", text(&out));
    std::fs::write(dir.join("rows.csv"), "x,y\n0.1 0.2,0.3 0.4\n\"\",\"\"\n").unwrap();
    let out = kynml(&["predict", "run", "rows.csv", "--output", "p.csv"], dir);
    let t = text(&out);
    assert!(out.status.success() && t.contains("note: 1 of the 2 rows holds no values"), "{t}");
}

#[test]
fn train_writes_a_complete_run_folder_and_says_what_runs() {
    let tmp = copy_example("iris");
    let out = kynml(&["train", "iris.kyn", "--epochs", "3", "--device", "cpu", "--out", "run1"], tmp.path());
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("what runs:") && t.contains("native CPU engine"), "{t}");
    // A spec that asks nothing of fusion is not told its setting was overridden.
    assert!(t.contains("fusion") && !t.contains("! fusion"), "{t}");
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
    // The resolved spec: the language's words, defaults filled in, the override applied.
    let text = std::fs::read_to_string(run.join("spec.resolved.json")).unwrap();
    let resolved: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert!(!text.contains("span") && !text.contains("CrossEntropy"), "{text}");
    assert_eq!(resolved["train"]["epochs"], 3, "--epochs 3 applied");
    assert_eq!(resolved["train"]["loss"], "cross_entropy");
    assert_eq!(resolved["train"]["optimizer"]["name"], "adam");
    assert_eq!(resolved["train"]["optimizer"]["betas"], serde_json::json!([0.9, 0.999]));
    assert_eq!(resolved["train"]["accumulate"], 1);
    assert_eq!(resolved["model"]["layers"][0], "dense 32 relu");
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
        "fusion        built in",
        "4 worker threads, up to 2 batches prepared ahead",
        "pin_memory    not applied (on the CPU there is no host-to-device copy",
        "checkpoints/deepnet.pt",
        "torchscript",
        // The route to PyTorch is the safetensors export, not ONNX (which PyTorch does not load).
        "for PyTorch: kynml export r --format safetensors --path",
        "deepnet.safetensors, then python3 scripts/rebuild_in_pytorch.py rebuilds it",
    ] {
        assert!(t.contains(needle), "missing {needle:?} in\n{t}");
    }
    // The checkpoint is real (relative to the spec's folder); the export is not yet.
    assert!(tmp.path().join("checkpoints/deepnet.pt").is_file() && !tmp.path().join("models").exists());
}

/// A run whose loss turns NaN ends with the step, and points at the spec
/// line that sets the learning rate it advises lowering.
#[test]
fn a_diverging_run_names_where_its_learning_rate_is_set() {
    let tmp = copy_example("iris");
    let spec = std::fs::read_to_string(tmp.path().join("iris.kyn")).unwrap();
    let line = spec.lines().position(|l| l.trim_start().starts_with("optimizer")).unwrap() + 1;
    std::fs::write(tmp.path().join("nan.kyn"), spec.replace("optimizer = adam(lr=0.01)", "optimizer = sgd(lr=1e30)"))
        .unwrap();
    let out = kynml(&["train", "nan.kyn", "--device", "cpu", "--out", "r"], tmp.path());
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(t.contains("training loss became NaN at epoch 1") || t.contains("training loss became inf"), "{t}");
    assert!(t.contains(&format!("nan.kyn:{line}:17: `optimizer = sgd(lr=1e30)` sets the learning rate")), "{t}");
    // Raised by the scheduler (x1e6 an epoch): the scheduler's line is named.
    let raised =
        spec.replace("optimizer = adam(lr=0.01)", "optimizer = sgd(lr=0.1)\n    scheduler = step(1, gamma=1e6)");
    std::fs::write(tmp.path().join("raised.kyn"), raised).unwrap();
    let out = kynml(&["train", "raised.kyn", "--device", "cpu", "--epochs", "20", "--out", "r2"], tmp.path());
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(t.contains(&format!("raised.kyn:{}:17: `scheduler = step(1, gamma=1e6)` had raised", line + 1)), "{t}");
    assert!(t.contains("from the optimizer's 0.1") && !t.contains("sets the learning rate"), "{t}");
}

/// A schedule that does not run as written is said by `check` and `train`:
/// a warmup as long as the run, a rate that falls out of fp32's range and
/// stays there; a cosine that touches 0 and climbs again is not.
#[test]
fn a_schedule_that_cannot_run_as_written_is_said() {
    let tmp = copy_example("iris");
    let spec = std::fs::read_to_string(tmp.path().join("iris.kyn")).unwrap();
    let with = |name: &str, scheduler: &str| {
        let text = spec.replace("    seed = 7", &format!("    seed = 7\n    scheduler = {scheduler}"));
        std::fs::write(tmp.path().join(name), text).unwrap();
    };
    with("warm.kyn", "cosine(t_max=3, warmup=100)");
    with("tiny.kyn", "step(1, gamma=1e-30)");
    with("cosine.kyn", "cosine(t_max=2)");
    for command in ["check", "train"] {
        let args = |spec: &'static str, out: &'static str| -> Vec<&'static str> {
            match command {
                "check" => vec!["check", spec],
                _ => vec!["train", spec, "--epochs", "3", "--device", "cpu", "--out", out],
            }
        };
        // The spec's 60 epochs to `check`, 3 to this `train`.
        let (epochs, reached) = if command == "check" { (60, "6.000e-3") } else { (3, "3.000e-4") };
        let t = text(&kynml(&args("warm.kyn", "w"), tmp.path()));
        assert!(t.contains(&format!("note: `warmup = 100` is longer than the run's {epochs} epochs")), "{t}");
        assert!(t.contains(&format!("climbs only to {reached} of the optimizer's 0.01")), "{t}");
        // 0.01, 1e-32 (an f32 holds it), then 1e-62 (it does not).
        let t = text(&kynml(&args("tiny.kyn", "t"), tmp.path()));
        let said = "note: the scheduler's learning rate falls to 1.0e-62 at epoch 3, below what a 32-bit float holds";
        assert!(t.contains(said), "{command}: {t}");
        let t = text(&kynml(&args("cosine.kyn", "c"), tmp.path()));
        assert!(!t.contains("note: the scheduler's learning rate") && !t.contains("warmup"), "{command}: {t}");
    }
    // A warmup exactly as long as the run does reach lr, in its last epoch.
    with("even.kyn", "step(1, gamma=0.5, warmup=3)");
    let t = text(&kynml(&["train", "even.kyn", "--epochs", "3", "--device", "cpu", "--out", "e"], tmp.path()));
    let said = "note: `warmup = 3` is as long as the run: the learning rate reaches the optimizer's 0.01 only in its \
                last epoch, and the schedule after the warmup never starts";
    assert!(t.contains(said), "{t}");
    assert!(t.contains("lr 1.00e-2"), "{t}");
}

/// `autotune`, clipping and accumulation say what they do: no effect on the
/// CPU (`!`), the rule that clips, the rows of an accumulated step, and the
/// pre-clip norm in every epoch line.
#[test]
fn autotune_and_clipping_say_what_applies() {
    let tmp = copy_example("iris");
    let spec = std::fs::read_to_string(tmp.path().join("iris.kyn"))
        .unwrap()
        .replace("    seed = 7", "    seed = 7\n    autotune = fast\n    clip_grad_norm = 0.5\n    accumulate = 2");
    std::fs::write(tmp.path().join("c.kyn"), spec).unwrap();
    let out = kynml(&["train", "c.kyn", "--epochs", "2", "--device", "cpu", "--out", "r"], tmp.path());
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("! autotune") && t.contains("CPU backends tune no kernels"), "{t}");
    assert!(t.contains("clipping") && t.contains("global L2 norm of 0.5"), "{t}");
    assert!(t.contains("2 batches of 16 per optimizer step (32 rows, or an epoch's"), "{t}");
    assert_eq!(t.lines().filter(|l| l.starts_with("epoch") && l.contains("grad_norm ")).count(), 2, "{t}");
    assert!(!t.contains("note: accumulate"), "{t}");
    // More batches than an epoch has (120 rows, batch 16: 8): said.
    let spec = std::fs::read_to_string(tmp.path().join("c.kyn")).unwrap().replace("accumulate = 2", "accumulate = 20");
    std::fs::write(tmp.path().join("c20.kyn"), spec).unwrap();
    let t = text(&kynml(&["train", "c20.kyn", "--epochs", "1", "--device", "cpu", "--out", "r20"], tmp.path()));
    assert!(
        t.contains("note: accumulate = 20 is more than the 8 batches of an epoch: each epoch is one optimizer step"),
        "{t}"
    );
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
    // A data file that is not there: located at `source`, with where it was looked for.
    std::fs::remove_file(tmp.path().join("iris.csv")).unwrap();
    let out = kynml(&["check", "iris.kyn"], tmp.path());
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("the data file `iris.csv` does not exist") && t.contains("--> iris.kyn:3:18"), "{t}");
    assert!(t.contains("relative to the spec's folder") && t.contains("--synthetic ROWS"), "{t}");
    // A folder in the file's place: located the same way.
    std::fs::create_dir(tmp.path().join("iris.csv")).unwrap();
    let out = kynml(&["check", "iris.kyn"], tmp.path());
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("the data source `iris.csv` is a folder, not a file") && t.contains("--> iris.kyn:3:18"), "{t}");
    // An absolute path is not said to be relative to anything.
    let absent = tmp.path().join("absent.csv");
    let spec = std::fs::read_to_string(tmp.path().join("iris.kyn")).unwrap();
    let spec = spec.replace("csv(\"iris.csv\")", &format!("csv({:?})", absent.display().to_string()));
    std::fs::write(tmp.path().join("iris.kyn"), spec).unwrap();
    let t = text(&kynml(&["check", "iris.kyn"], tmp.path()));
    assert!(t.contains(&format!("the data file `{}` does not exist", absent.display())), "{t}");
    assert!(!t.contains("relative to the spec's folder") && t.contains("--synthetic ROWS"), "{t}");
    // A near name beside it is suggested; a Windows path is said to be one.
    std::fs::create_dir(tmp.path().join("data")).unwrap();
    std::fs::write(tmp.path().join("data/iris.csv"), b"").unwrap();
    for (source, help) in [
        ("data/irs.csv", "help: did you mean `iris.csv`, beside it? the path is relative"),
        (
            "data\\\\iris.csv",
            "help: `\\` is no folder separator here: write `data/iris.csv`, `/` works on every system;",
        ),
    ] {
        let spec = std::fs::read_to_string(tmp.path().join("iris.kyn")).unwrap();
        let from = spec.split("csv(").nth(1).unwrap().split(')').next().unwrap().to_string();
        std::fs::write(tmp.path().join("iris.kyn"), spec.replace(&from, &format!("\"{source}\""))).unwrap();
        let t = text(&kynml(&["check", "iris.kyn"], tmp.path()));
        assert!(t.contains(help), "{t}");
    }
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
    // With where to look for a device that is here (it was the bare refusal).
    assert!(t.contains("\n  `--device cpu` (or another device `kynml devices` lists) runs here"), "{t}");
    let out = kynml(&["train", "iris.kyn", "--epochs", "1", "--device", "cpu", "--out", "r"], tmp.path());
    assert!(out.status.success(), "{}", text(&out));
    let out = kynml(&["predict", "r", "iris.csv", "--device", "cuda"], tmp.path());
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("CUDA was requested") && t.contains("`--device cpu` (or another device"), "{t}");
    // Named by the spec itself: located at its `device` line.
    let spec = std::fs::read_to_string(tmp.path().join("iris.kyn")).unwrap().replace("device = auto", "device = cuda");
    std::fs::write(tmp.path().join("gpu.kyn"), spec).unwrap();
    let out = kynml(&["train", "gpu.kyn"], tmp.path());
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("--> gpu.kyn:21:14") && t.contains("^^^^ this device") && t.contains("--device cpu"), "{t}");
    // `check` may be run for another machine: ok, with the missing GPU said.
    let out = kynml(&["check", "gpu.kyn"], tmp.path());
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("note: `device = cuda`: this machine has no CUDA GPU; `kynml train` would refuse it"), "{t}");
    // A data-parallel run's GPUs are named as the spec writes them.
    let spec = std::fs::read_to_string(tmp.path().join("iris.kyn"))
        .unwrap()
        .replace("device = auto", "devices = [\"cuda:0\", \"cuda:1\"]");
    std::fs::write(tmp.path().join("gpus.kyn"), spec).unwrap();
    let t = text(&kynml(&["check", "gpus.kyn"], tmp.path()));
    assert!(t.contains("note: `devices = [\"cuda:0\", \"cuda:1\"]`: this machine has no CUDA GPU"), "{t}");
    // The largest index is a GPU no machine has (it wrapped to GPU 0 and went unsaid).
    let spec = std::fs::read_to_string(tmp.path().join("iris.kyn"))
        .unwrap()
        .replace("device = auto", "device = \"cuda:18446744073709551615\"");
    std::fs::write(tmp.path().join("far.kyn"), spec).unwrap();
    let out = kynml(&["check", "far.kyn"], tmp.path());
    let t = text(&out);
    assert!(out.status.success() && t.contains("note: `device = \"cuda:18446744073709551615\"`: this machine"), "{t}");
}

/// A text model's data through a named pipe is read once, as a plain
/// model's is: a first count of its lines drained the pipe and left the
/// load waiting forever.
#[cfg(unix)]
#[test]
fn a_text_models_data_from_a_pipe_is_read_once() {
    let tmp = copy_example("reviews");
    let dir = tmp.path();
    let csv = std::fs::read(dir.join("reviews.csv")).unwrap();
    std::fs::remove_file(dir.join("reviews.csv")).unwrap();
    let made = Command::new("mkfifo").arg(dir.join("reviews.csv")).status().unwrap();
    assert!(made.success());
    let pipe = dir.join("reviews.csv");
    // The writer sends the file once; it waits until the pipe is opened.
    let writer = std::thread::spawn(move || std::fs::write(pipe, csv).is_ok());
    let child = spawn(&["check", "reviews.kyn"], dir);
    let mut child = KillOnDrop(Some(child));
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.0.as_mut().unwrap().try_wait().unwrap() {
            break status;
        }
        assert!(started.elapsed().as_secs() < 60, "kynml check still waits on the pipe after 60 s");
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let out = child.0.take().unwrap().wait_with_output().unwrap();
    assert!(status.success(), "{}", text(&out));
    assert!(text(&out).contains("rows"), "{}", text(&out));
    assert!(writer.join().unwrap());
}

/// `--device cpu,cpu`: a data-parallel run on two CPU replicas, said in
/// "what runs", recorded in metrics.json, and measured by `kynml bench`;
/// devices of two kinds are refused before anything is written.
#[test]
fn a_data_parallel_run_on_two_cpu_replicas_says_so_and_trains() {
    let tmp = copy_example("iris");
    let out = kynml(&["train", "iris.kyn", "--epochs", "3", "--device", "cpu,cpu", "--out", "run"], tmp.path());
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("data-parallel on 2 devices (cpu, cpu): batch 16 = 8 rows per device"), "{t}");
    assert!(t.contains("Burn's all-reduce"), "{t}");
    assert_eq!(t.matches("\nepoch ").count(), 3, "{t}");
    let metrics: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(tmp.path().join("run/metrics.json")).unwrap()).unwrap();
    assert_eq!(metrics["devices"], serde_json::json!(["cpu", "cpu"]));
    // So does the curves' title (it said `(cpu)`).
    let svg = std::fs::read_to_string(tmp.path().join("run/curves.svg")).unwrap();
    assert!(svg.contains("IrisNet on Iris (2 x cpu)"), "the title of curves.svg");
    // report names both devices (it said `cpu`), and the engine: Burn's, not the native one.
    assert_eq!(metrics["engine"], "burn");
    let t = text(&kynml(&["report", "run"], tmp.path()));
    assert!(t.contains(" cpu,cpu (burn) "), "{t}");
    assert!(metrics["metrics"]["accuracy"].as_f64().unwrap() > 0.5, "{metrics}");
    let out = kynml(&["bench", "iris.kyn", "--device", "cpu,cpu", "--steps", "3", "--rounds", "1"], tmp.path());
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("2 x cpu") && t.contains("(data-parallel)"), "{t}");
    // A round's time is said to hold its validation pass; counts read as words.
    assert!(t.contains("round 1: ") && t.contains("(its validation pass of 30 rows included)"), "{t}");
    assert!(t.contains("batch 16, 3 steps in each of 1 warm-up and 1 timed round"), "{t}");
    let out = kynml(&["train", "iris.kyn", "--device", "cpu,cuda:0", "--out", "mixed"], tmp.path());
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).contains("all `cpu` or all CUDA GPUs, not both"), "{}", text(&out));
    assert!(!tmp.path().join("mixed").exists());
}

#[test]
fn a_wrong_device_argument_is_refused() {
    let tmp = copy_example("iris");
    let out = kynml(&["train", "iris.kyn", "--device", "gpu"], tmp.path());
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).contains("expected auto, cpu, cuda, cuda:N or wgpu"));
    // train and bench take several devices too, and say so; predict does not.
    assert!(text(&out).contains("data-parallel run (cuda:0,cuda:1, cuda:all, cpu,cpu), found `gpu`"), "{}", text(&out));
    let out = kynml(&["predict", "run", "iris.csv", "--device", "gpu"], tmp.path());
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).contains("expected auto, cpu, cuda, cuda:N or wgpu, found `gpu`"), "{}", text(&out));
}

#[test]
fn tensorboard_event_files_read_back_with_tensorboards_own_reader() {
    // scripts/test.sh installs the `tensorboard` Python package; the reader
    // is theirs, not ours, so this checks the file format independently.
    let tmp = copy_example("iris");
    let out = kynml(&["train", "iris.kyn", "--epochs", "3", "--device", "cpu", "--out", "tb", "--profile"], tmp.path());
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
    // A profiled run adds each epoch's phase shares, which add up to 1.
    for epoch in 0..3 {
        let phases = ["wait", "copy", "forward", "backward", "optimizer", "other"];
        let total: f64 = phases.iter().map(|p| scalars[format!("profile/{p}_share")][epoch][1].as_f64().unwrap()).sum();
        assert!((total - 1.0).abs() < 1e-4, "epoch {}: shares add up to {total}: {scalars}", epoch + 1);
    }
}

#[test]
fn devices_lists_the_cpu_and_what_auto_picks() {
    let out = kynml(&["devices"], &examples());
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("cpu") && t.contains("threads") && t.contains("auto picks:"), "{t}");
    // Whatever CUDA state the machine is in, it is reported, never a panic.
    assert!(t.contains("cuda") && !t.contains("panicked"), "{t}");
    // A file where the cache folder would go: said to be off, not named as a cache.
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("a-file"), "x").unwrap();
    let t = text(&kynml(&["devices", "--cache", "a-file"], tmp.path()));
    assert!(t.contains("kernel cache: off (") && t.contains("a-file is not a folder"), "{t}");
    // A folder that cannot be made under a file: off too, and nothing left behind.
    let t = text(&kynml(&["devices", "--cache", "a-file/sub/cache"], tmp.path()));
    assert!(t.contains("kernel cache: off (") && t.contains("cannot be created"), "{t}");
    // One that can be made is named, and not left made.
    let t = text(&kynml(&["devices", "--cache", "new/cache"], tmp.path()));
    assert!(t.contains("kernel cache: ") && t.contains("new/cache/cubecl-"), "{t}");
    assert!(!tmp.path().join("new").exists(), "devices left the folder it tried");
}

/// For scripts, `report --json` holds each run's metrics.json as it is,
/// with its seed, best epoch, costs and verdict; runs that differ by seed
/// get a seed column; the folder of the runs, or a quoted pattern, is said
/// for what it is.
#[test]
fn report_writes_json_shows_seeds_and_says_a_folder_of_runs() {
    let tmp = copy_example("iris");
    let dir = tmp.path();
    for seed in ["1", "2"] {
        let out = kynml(
            &[
                "train",
                "iris.kyn",
                "--epochs",
                "2",
                "--device",
                "cpu",
                "--seed",
                seed,
                "--out",
                &format!("runs/s{seed}"),
            ],
            dir,
        );
        assert!(out.status.success(), "{}", text(&out));
    }
    let out = kynml(&["report", "runs/s1", "runs/s2", "--json", "-"], dir);
    assert!(out.status.success(), "{}", text(&out));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("standard output holds the JSON alone");
    let table = String::from_utf8_lossy(&out.stderr);
    assert!(table.contains(" seed ") && table.contains("accuracy"), "{table}");
    for (run, seed) in doc["runs"].as_array().unwrap().iter().zip([1, 2]) {
        assert_eq!(run["seed"], seed);
        let name = format!("runs/s{seed}/metrics.json");
        let summary: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join(name)).unwrap()).unwrap();
        assert_eq!(run["summary"], summary);
        assert_eq!(run["best"]["metric"], "accuracy");
        assert_eq!(run["kept_epoch"], 2, "the last epoch's weights are the model: {run}");
        assert!(run["costs"]["peak_host_memory_bytes"].as_u64().is_some_and(|b| b > 0), "{run}");
    }
    assert_eq!(doc["problems"], serde_json::json!([]));
    // No run that can be read: still a document, saying why, and exit 2.
    let out = kynml(&["report", "runs/nothing", "--json", "-"], dir);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("the JSON, with no run to show");
    assert_eq!(doc["runs"], serde_json::json!([]));
    let problems = doc["problems"].as_array().unwrap();
    assert!(problems.len() == 1 && problems[0].as_str().unwrap().contains("runs/nothing"), "{doc}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("runs/nothing"), "{}", text(&out));
    // A file: written, then replaced by the next report; anything else is refused.
    assert!(kynml(&["report", "runs/s1", "--json", "r.json"], dir).status.success());
    assert!(kynml(&["report", "runs/s1", "--json", "r.json"], dir).status.success());
    assert_eq!(kynml(&["report", "runs/s1", "--json", "iris.csv"], dir).status.code(), Some(2));
    // One seed: no seed column.
    let t = text(&kynml(&["report", "runs/s1"], dir));
    assert!(!t.contains(" seed "), "{t}");
    let t = text(&kynml(&["report", "runs"], dir));
    assert!(t.contains("it holds 2 run folders: `kynml report runs/*` reports them"), "{t}");
    let t = text(&kynml(&["report", "runs/s*x"], dir));
    assert!(t.contains("report does not expand patterns itself: leave it unquoted for the shell"), "{t}");
}

#[test]
fn report_puts_runs_side_by_side_and_leaves_out_a_non_run() {
    let tmp = copy_example("iris");
    let mut printed = String::new();
    for (dir, epochs) in [("a", "2"), ("b", "4")] {
        let out = kynml(&["train", "iris.kyn", "--epochs", epochs, "--device", "cpu", "--out", dir], tmp.path());
        assert!(out.status.success(), "{}", text(&out));
        printed = text(&out);
    }
    let out = kynml(&["report", "a", "b"], tmp.path());
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    // The peak host memory a run printed at its end (saving included) is
    // the one the report shows.
    let peak = printed.split("peak host memory ").nth(1).and_then(|r| r.split(' ').next()).unwrap_or_default();
    let costs = t.split("time and memory").nth(1).unwrap_or_default();
    let b = costs.lines().find(|l| l.trim_start().starts_with("b ")).unwrap_or_else(|| panic!("{t}"));
    assert!(!peak.is_empty() && b.trim_end().ends_with(&format!(" {peak} MiB")), "{peak} MiB printed: {t}");
    let results = t.split("time and memory").next().unwrap_or_default();
    let rows: Vec<&str> =
        results.lines().filter(|l| l.trim_start().starts_with("a ") || l.trim_start().starts_with("b ")).collect();
    assert_eq!(rows.len(), 2, "{t}");
    assert!(rows[0].contains("IrisNet") && rows[0].contains("accuracy") && rows[1].contains(" 4 "), "{t}");
    // The metric of the model each run kept: its last epoch's here.
    assert!(rows[0].contains("(epoch 2") && rows[1].contains("(epoch 4"), "{t}");
    // A run that kept epoch 1's model (early stopping) while epoch 2 scored
    // better: the kept model's metric first, the better epoch's after it.
    let jsonl = std::fs::read_to_string(tmp.path().join("a/metrics.jsonl")).unwrap();
    let mut lines = Vec::new();
    for line in jsonl.lines().filter(|l| !l.trim().is_empty()) {
        let mut record: serde_json::Value = serde_json::from_str(line).unwrap();
        let epoch = record["epoch"].as_u64().unwrap();
        record["metrics"]["accuracy"] = serde_json::json!(if epoch == 1 { 0.5 } else { 0.9 });
        lines.push(record.to_string());
    }
    std::fs::write(tmp.path().join("a/metrics.jsonl"), lines.join("\n") + "\n").unwrap();
    let summary = tmp.path().join("a/metrics.json");
    let mut m: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&summary).unwrap()).unwrap();
    m["best_epoch"] = serde_json::json!(1);
    m["metrics"]["accuracy"] = serde_json::json!(0.5);
    std::fs::write(&summary, m.to_string()).unwrap();
    let kept = text(&kynml(&["report", "a"], tmp.path()));
    assert!(kept.contains("accuracy 0.5000 (epoch 1; best 0.9000 at epoch 2)"), "{kept}");
    // Runs never profiled are said on one line, not one line a run.
    assert!(t.contains("none of the 2 runs was profiled (train with --profile"), "{t}");
    // fp32 runs skip no fp16 step: "-", not a count.
    let costs = t.split("time and memory").nth(1).unwrap_or_default();
    assert!(costs.lines().any(|l| l.trim_start().starts_with("a ") && l.contains("%  ") && l.contains(" -  ")), "{t}");
    // A profiled run adds its phases and its verdict.
    let out = kynml(&["train", "iris.kyn", "--epochs", "2", "--device", "cpu", "--out", "c", "--profile"], tmp.path());
    assert!(out.status.success(), "{}", text(&out));
    let resolved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(tmp.path().join("c/spec.resolved.json")).unwrap()).unwrap();
    assert_eq!(resolved["train"]["profile"], true, "--profile is recorded");
    let out = kynml(&["report", "a", "c"], tmp.path());
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("  a: not profiled (train with --profile to see its phases)"), "{t}");
    let phases = t.split("where the step time goes").nth(1).unwrap_or_default();
    let row = phases.lines().find(|l| l.trim_start().starts_with("c ")).unwrap_or_else(|| panic!("{t}"));
    let shares: f64 =
        (row.split_whitespace()).filter_map(|w| w.strip_suffix('%').and_then(|v| v.parse::<f64>().ok())).sum();
    assert!((shares - 100.0).abs() < 0.5, "the six shares add up to {shares}: {row}");
    // The mean step is the steady steps': their phases' means, the wait's
    // included, as profile.json keeps them (the first step left out).
    let profile: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(tmp.path().join("c/profile.json")).unwrap()).unwrap();
    let steady = &profile["steady"];
    assert!(row.contains(&format!("{} (+", steady["steps"])), "{row}");
    let mean: f64 = steady["phases"].as_array().unwrap().iter().map(|p| p["mean"].as_f64().unwrap()).sum();
    // Shown to three significant digits (`0.842 ms`, `1.69 ms`).
    let shown: f64 = row.trim_end().strip_suffix(" ms").and_then(|r| r.rsplit(' ').next()?.parse().ok()).unwrap();
    assert!((shown - mean * 1e3).abs() <= 0.005 * mean * 1e3 + 5e-4, "{row} (mean step {mean} s)");
    // Iris's steps take microseconds, on the native CPU engine, whose
    // phases are its arithmetic (no launches or dispatch inside them): the
    // phases decide, not the steps' length (a larger batch did not speed up
    // a short-stepped image model there). Its batches are gathered in
    // microseconds too, so on a busy machine the wait may lead instead; and
    // its epochs of a millisecond or so are mostly each epoch's own
    // bookkeeping, which leads where the steps are a small part of the run.
    assert!(!t.contains("c: the steps are short (") && !t.contains("c: the steps are short for"), "{t}");
    assert!(
        t.contains("c: compute-bound") || t.contains("c: data-bound") || t.contains("c: bound by the work between"),
        "{t}"
    );
    assert!(t.contains("a: not profiled") && !phases.contains("\n  a "), "{t}");
    // A profiled run that checkpoints puts each hand-off and each write in its trace.
    let spec = std::fs::read_to_string(tmp.path().join("iris.kyn")).unwrap();
    let spec = spec.replace(
        "train:\n",
        "train:\n    checkpoint = checkpoint(every_n=1, path=\"ck/iris.ckpt\", async_save=true)\n",
    );
    std::fs::write(tmp.path().join("ck.kyn"), spec).unwrap();
    let out = kynml(&["train", "ck.kyn", "--epochs", "3", "--device", "cpu", "--out", "d", "--profile"], tmp.path());
    assert!(out.status.success(), "{}", text(&out));
    let trace: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(tmp.path().join("d/trace.json")).unwrap()).unwrap();
    let events = trace["traceEvents"].as_array().unwrap();
    for (name, tid) in [("checkpoint hand-off", 4), ("write checkpoint", 5)] {
        let of: Vec<_> = events.iter().filter(|e| e["name"] == name).collect();
        assert_eq!(of.len(), 3, "{name}: {trace}");
        assert!(of.iter().all(|e| e["tid"] == tid && e["dur"].as_f64().is_some_and(|d| d >= 0.0)), "{name}");
    }
    let profile: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(tmp.path().join("d/profile.json")).unwrap()).unwrap();
    let checkpoints = profile["checkpoints"].as_array().unwrap();
    assert_eq!(checkpoints.len(), 3, "{profile}");
    assert!(checkpoints.iter().all(|c| c["write_seconds"].as_f64().is_some_and(|s| s > 0.0)), "{profile}");
    // The breakdown drawn: its title, the phases and each epoch's bar.
    let svg = std::fs::read_to_string(tmp.path().join("d/profile.svg")).unwrap();
    for part in ["Where the step time goes", "waiting for the batch", "epoch 3"] {
        assert!(svg.contains(part), "profile.svg lacks {part:?}");
    }
    // The verdict's opening words (the verdict itself depends on the timings).
    let verdict = profile["verdict"]["advice"].as_str().unwrap();
    let opening: String = verdict.split_whitespace().take(2).collect::<Vec<_>>().join(" ");
    assert!(svg.contains(&opening), "profile.svg has no verdict ({opening:?})");
    assert!(svg.contains("3 checkpoint hand-offs"), "profile.svg does not sum the hand-offs");
    // Saved synchronously, the wait is the whole write: named so.
    let sync = std::fs::read_to_string(tmp.path().join("ck.kyn")).unwrap().replace(", async_save=true", "");
    std::fs::write(tmp.path().join("sync.kyn"), sync).unwrap();
    let out = kynml(
        &["train", "sync.kyn", "--epochs", "2", "--device", "cpu", "--out", "s", "--profile", "--fresh"],
        tmp.path(),
    );
    assert!(out.status.success(), "{}", text(&out));
    let trace: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(tmp.path().join("s/trace.json")).unwrap()).unwrap();
    let named = |name: &str| trace["traceEvents"].as_array().unwrap().iter().filter(|e| e["name"] == name).count();
    assert_eq!((named("checkpoint save (waits for the write)"), named("checkpoint hand-off")), (2, 0), "{trace}");
    let svg = std::fs::read_to_string(tmp.path().join("s/profile.svg")).unwrap();
    assert!(svg.contains("2 checkpoint saves"), "profile.svg names synchronous saves as such");
    let png = std::fs::read(tmp.path().join("d/profile.png")).unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "profile.png is a PNG");
    // A stray file among the runs (`report runs/*`) is left out with a note.
    let out = kynml(&["report", "a", "iris.kyn"], tmp.path());
    let t = text(&out);
    assert!(out.status.success() && t.contains("note: `iris.kyn` is not a folder"), "{t}");
    assert!(t.contains("left out of the report") && t.contains("verdicts"), "{t}");
    let out = kynml(&["report", "a", "nope"], tmp.path());
    assert!(out.status.code() == Some(2) && text(&out).contains("`nope` does not exist"), "{}", text(&out));
    // The runs that could be read are still shown (a glob should not lose them all to one).
    assert!(String::from_utf8_lossy(&out.stdout).contains("\n  a "), "{}", text(&out));
    std::fs::create_dir(tmp.path().join("empty")).unwrap();
    let out = kynml(&["report", "empty"], tmp.path());
    assert!(out.status.code() == Some(2) && text(&out).contains("`empty` is not a run folder"), "{}", text(&out));
    // Two runs of one folder name, in two places: named by their paths.
    std::fs::create_dir(tmp.path().join("x")).unwrap();
    copy_dir(&tmp.path().join("a"), &tmp.path().join("x/a"));
    let t = text(&kynml(&["report", "a", "x/a"], tmp.path()));
    assert!(t.contains("\n  x/a ") && t.contains("\n  a "), "{t}");
    // A damaged record: its file, line and column (1-based), serde's own position left out.
    let jsonl = tmp.path().join("b/metrics.jsonl");
    let records = std::fs::read_to_string(&jsonl).unwrap();
    std::fs::write(&jsonl, records.replacen('\n', "\n{\"epoch\": 2,\n", 1)).unwrap();
    let out = kynml(&["report", "a", "b"], tmp.path());
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("metrics.jsonl:2:12: not valid JSON: EOF while parsing a value\n"), "{t}");
    let shown = String::from_utf8_lossy(&out.stdout);
    // b's row stands, read from its metrics.json; its damaged epoch log is the error.
    assert!(shown.contains("\n  a ") && shown.contains("\n  b "), "a and b shown, b's log said as an error: {t}");
    std::fs::write(tmp.path().join("b/metrics.json"), "{\n").unwrap();
    let t = text(&kynml(&["report", "b"], tmp.path()));
    assert!(t.contains("metrics.json:2:1: not valid JSON: EOF while parsing an object\n"), "{t}");
    // JSON, but not a run's: an error, not a row of `?`.
    std::fs::write(tmp.path().join("b/metrics.json"), "[1, 2, 3]").unwrap();
    let out = kynml(&["report", "a", "b"], tmp.path());
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(
        t.contains("metrics.json: not a KynML run's metrics.json: expected a JSON object holding `metrics`"),
        "{t}"
    );
}

// ---- checkpoints, resume and interruption ----

/// A regression spec on seeded random data whose checkpoint (weights and
/// Adam's moments, ~3.5 MB) takes long enough to write that kills land
/// mid-write; one checkpoint per epoch, written in the background.
fn checkpointing_spec(dir: &Path, name: &str, ckpt: &str, epochs: usize) -> PathBuf {
    let mut rng = kynml_core::rng::SplitMix64::new(99);
    let mut csv = String::from("a,b,c,d,y\n");
    for _ in 0..400 {
        let x: Vec<f64> = (0..4).map(|_| rng.uniform(-1.0, 1.0)).collect();
        let y = x[0] - 2.0 * x[1] * x[2] + x[3].sin();
        csv += &format!("{:.5},{:.5},{:.5},{:.5},{y:.5}\n", x[0], x[1], x[2], x[3]);
    }
    std::fs::write(dir.join("data.csv"), csv).unwrap();
    let spec = format!(
        "dataset D:\n source = csv(\"data.csv\")\n target = \"y\"\n\
         model M:\n input 4\n dense 512 relu\n dropout 0.1\n dense 512 relu\n dense 1 linear\n\
         train:\n model = M\n data = D\n loss = mse\n optimizer = adam(lr=0.001)\n epochs = {epochs}\n batch = 50\n\
         device = cpu\n checkpoint = checkpoint(every_n=1, path=\"{ckpt}\", async_save=true)\n"
    );
    let path = dir.join(name);
    std::fs::write(&path, spec).unwrap();
    path
}

/// An export that would fall on the spec's checkpoint or one of its older
/// copies (the weights or their sidecar) is refused before anything runs,
/// by `check` as by `train`: it trained the whole run, then failed there.
#[test]
fn an_export_onto_the_checkpoint_is_refused_before_training() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let spec = checkpointing_spec(dir, "s.kyn", "ck/m.ckpt", 1);
    let text_of = std::fs::read_to_string(&spec).unwrap().replace("async_save=true)", "async_save=true, keep=3)");
    // A link to the checkpoint's folder is the same folder.
    std::fs::create_dir(dir.join("ck")).unwrap();
    std::os::unix::fs::symlink(dir.join("ck"), dir.join("ln")).unwrap();
    for (i, (export, said)) in [
        ("format = onnx\n path = \"ck/../ck/m.ckpt\"", "is the spec's checkpoint path"),
        ("format = onnx\n path = \"ln/m.ckpt\"", "is the spec's checkpoint path"),
        ("format = onnx\n path = \"ck/m.ckpt.2\"", "is the older copy"),
        ("format = safetensors\n path = \"ck/m.ckpt.1.safetensors\"", ""),
        // Past the copies kept, and an ONNX model (no sidecar) beside them.
        ("format = onnx\n path = \"ck/m.ckpt.3\"", ""),
        ("format = safetensors\n path = \"ck/m.safetensors\"", ""),
    ]
    .into_iter()
    .enumerate()
    {
        std::fs::write(&spec, format!("{text_of}export:\n {export}\n")).unwrap();
        let run = format!("run{i}");
        for command in [&["check", "s.kyn"][..], &["train", "s.kyn", "--out", &run]] {
            let out = kynml(command, dir);
            let (t, command) = (text(&out), command[0]);
            if said.is_empty() {
                assert!(out.status.success(), "{command}: {t}");
                continue;
            }
            assert_eq!(out.status.code(), Some(2), "{command}: {t}");
            assert!(t.contains(said) && t.contains("s.kyn:") && t.contains("the export path"), "{command}: {t}");
            assert!(!dir.join(&run).exists() && !dir.join("ck/m.ckpt").exists(), "{command}: {t}");
            assert!(!dir.join("ck/.m.ckpt.lock").exists(), "{command}: refused before the path was locked: {t}");
        }
    }
}

#[test]
fn sigkill_at_random_moments_never_leaves_a_bad_checkpoint_and_resume_ends_identical() {
    use std::time::Duration;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let epochs = 24;
    checkpointing_spec(dir, "ref.kyn", "ref/final.ckpt", epochs);
    let out = kynml(&["train", "ref.kyn", "--out", "ref-run"], dir);
    assert!(out.status.success(), "{}", text(&out));
    let reference = std::fs::read(dir.join("ref/final.ckpt")).unwrap();

    checkpointing_spec(dir, "spec.kyn", "ckpt/run.ckpt", epochs);
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
    let mut rng = kynml_core::rng::SplitMix64::new(seed);
    let ckpt = dir.join("ckpt/run.ckpt");
    let (mut mid_run, mut resumed, mut mid_write) = (0, 0, 0);
    let temps = || -> Vec<PathBuf> {
        let Ok(entries) = std::fs::read_dir(dir.join("ckpt")) else { return Vec::new() };
        entries.map(|e| e.unwrap().path()).filter(|p| p.to_string_lossy().contains(".tmp-")).collect()
    };
    for trial in 0..20 {
        let _ = std::fs::remove_dir_all(dir.join("ckpt"));
        // Kill at a random point of the run: after a random epoch's line
        // (0: before training), then a random wait of up to 40 ms, which
        // lands in the next epochs or in a background checkpoint write.
        // Timed from the run's own progress, so that it lands in training
        // however busy the machine is.
        let mut child = Command::new(env!("CARGO_BIN_EXE_kynml"))
            .args(["train", "spec.kyn", "--out", &format!("killed-{trial}")])
            .current_dir(dir)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let after = rng.next_u64() as usize % epochs;
        let mut lines = std::io::BufRead::lines(std::io::BufReader::new(child.stdout.take().unwrap()));
        let wanted = if after == 0 { "data:".to_string() } else { format!("epoch {after:>3} ") };
        let _ = lines.by_ref().map_while(Result::ok).find(|l| l.starts_with(&wanted));
        let delay = Duration::from_secs_f64(rng.uniform(0.0, 0.04));
        std::thread::sleep(delay);
        let finished_first = child.try_wait().unwrap().is_some();
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        mid_run += usize::from(!finished_first);

        // Whatever the moment, the path holds nothing or a whole checkpoint.
        let had = match kynml_core::checkpoint::load(&ckpt) {
            Ok(found) => found.is_some(),
            Err(e) => panic!("trial {trial} (seed {seed}, kill after {delay:?}): bad checkpoint left: {e}"),
        };
        resumed += usize::from(had);
        // A write cut short leaves its temporary file, never the checkpoint.
        mid_write += usize::from(!temps().is_empty());
        let out = kynml(&["train", "spec.kyn", "--out", &format!("resumed-{trial}")], dir);
        let t = text(&out);
        assert!(out.status.success(), "trial {trial} (seed {seed}): resume failed:\n{t}");
        assert_eq!(t.contains("resume: from"), had, "trial {trial}: {t}");
        // Resumed or not, training ends in exactly the reference state.
        let last = std::fs::read(&ckpt).unwrap();
        assert!(last == reference, "trial {trial} (seed {seed}, kill after {delay:?}): final checkpoint differs");
        assert!(temps().is_empty(), "trial {trial}: the resumed run left {:?}", temps());
    }
    eprintln!(
        "20 SIGKILL trials (seed {seed}): {mid_run} killed mid-run, {mid_write} of them \
         mid-write, {resumed} resumed from a checkpoint"
    );
    assert!(mid_run >= 10 && resumed >= 5, "kills did not land during training (seed {seed})");
}

#[test]
fn fresh_ignores_a_checkpoint_and_bad_checkpoints_are_refused_before_anything_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    checkpointing_spec(dir, "spec.kyn", "ckpt/run.ckpt", 2);
    let out = kynml(&["train", "spec.kyn", "--out", "run1"], dir);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("checkpoints   every epoch and at the end to `ckpt/run.ckpt`"), "{}", text(&out));

    // Complete: a resume has nothing to train, and says so.
    let out = kynml(&["train", "spec.kyn", "--out", "run2"], dir);
    let t = text(&out);
    assert!(out.status.success() && t.contains("(2 of 2 epochs done; 0 to go"), "{t}");
    assert!(t.contains("no epoch left to train: the checkpoint's 2 epochs are the model"), "{t}");
    assert!(t.contains("time and memory: no epoch trained in this process; peak host memory "), "{t}");
    // Profiled, it has no step to profile: said, not a failure.
    let out = kynml(&["train", "spec.kyn", "--out", "run2p", "--profile"], dir);
    let t = text(&out);
    assert!(out.status.success() && t.contains("note: --profile: no step was trained"), "{t}");
    assert!(!dir.join("run2p/profile.json").exists() && dir.join("run2p/model.safetensors").is_file(), "{t}");
    // Nor is an empty profile shown, or files named that were not written.
    assert!(!t.contains("profile of 0 steps") && !t.contains("verdict:") && !t.contains("trace.json"), "{t}");
    let out = kynml(&["train", "spec.kyn", "--epochs", "1", "--out", "run2b"], dir);
    let t = text(&out);
    assert!(out.status.success() && t.contains("(2 epochs done, more than the 1 asked: nothing to train"), "{t}");
    assert!(dir.join("run2b/model.safetensors").is_file(), "the checkpoint's model is written: {t}");
    // Another model: both lines shown, the way out said once.
    let spec = std::fs::read_to_string(dir.join("spec.kyn")).unwrap();
    let first_dense = spec.lines().find(|l| l.trim_start().starts_with("dense ")).unwrap().to_string();
    std::fs::write(dir.join("other.kyn"), spec.replacen(&first_dense, "    dense 7 tanh", 1)).unwrap();
    let out = kynml(&["train", "other.kyn", "--out", "other"], dir);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("written for a different model") && t.contains("dense 7 tanh"), "{t}");
    // Located at the spec's model block, as the spec's other problems are.
    let model_line = spec.lines().position(|l| l.starts_with("model ")).unwrap() + 1;
    assert!(t.contains(&format!("other.kyn:{model_line}:7: this spec's model block")), "{t}");
    assert_eq!(t.matches("--fresh").count(), 1, "{t}");
    assert!(!dir.join("other").exists());
    // `check` says what `train` would do with the checkpoint (a note: the
    // next run's --fresh may be the plan), and where a run resumes.
    let out = kynml(&["check", "other.kyn"], dir);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("note: `kynml train` as written would not resume from ckpt/run.ckpt"), "{t}");
    assert!(t.contains("written for a different model"), "{t}");
    assert!(t.contains(&format!("other.kyn:{model_line}:7: this spec's model block")), "located as train's: {t}");
    let out = kynml(&["check", "spec.kyn"], dir);
    let t = text(&out);
    assert!(out.status.success() && t.contains("checkpoint ckpt/run.ckpt: 2 of 2 epochs done"), "{t}");
    assert!(t.contains("`kynml train` trains nothing and writes its model (raise `epochs`"), "as train says: {t}");
    std::fs::write(dir.join("onto_data.kyn"), spec.replace("ckpt/run.ckpt", "data.csv")).unwrap();
    let out = kynml(&["check", "onto_data.kyn"], dir);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("data.csv exists and is not a KynML checkpoint"), "{}", text(&out));
    // Another seed or split would validate on rows the checkpoint trained on.
    let out = kynml(&["train", "spec.kyn", "--epochs", "3", "--seed", "99", "--out", "seeded"], dir);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("checkpoint was trained with seed 42 (this run: 99;") && t.contains("--fresh"), "{t}");
    std::fs::write(
        dir.join("split.kyn"),
        spec.replace(" target = \"y\"\n", " target = \"y\"\n split = 0.5\n normalize = true\n"),
    )
    .unwrap();
    let out = kynml(&["train", "split.kyn", "--epochs", "3", "--out", "split"], dir);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("split = 0.8 (this run: 0.5), normalize = false (this run: true)"), "{t}");
    assert!(!dir.join("seeded").exists() && !dir.join("split").exists());
    // The same settings on other rows: the data file changed under the checkpoint.
    let data = std::fs::read_to_string(dir.join("data.csv")).unwrap();
    let last = data.lines().last().unwrap().to_string();
    std::fs::write(dir.join("data.csv"), format!("{data}{last}\n")).unwrap();
    let out = kynml(&["train", "spec.kyn", "--epochs", "3", "--out", "more"], dir);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("checkpoint was trained on other data") && t.contains("--fresh"), "{t}");
    std::fs::write(dir.join("data.csv"), data.replacen(&last, "0.5,0.5,0.5,0.5,0.5", 1)).unwrap();
    let t = text(&kynml(&["train", "spec.kyn", "--epochs", "3", "--out", "edited"], dir));
    assert!(t.contains("values or targets differ"), "{t}");
    std::fs::write(dir.join("data.csv"), &data).unwrap();
    assert!(!dir.join("more").exists() && !dir.join("edited").exists());
    let out = kynml(&["train", "spec.kyn", "--epochs", "3", "--out", "run3"], dir);
    let t = text(&out);
    assert!(out.status.success() && t.contains("resumed after epoch 2") && t.matches("\nepoch ").count() == 2, "{t}");
    assert!(t.contains("trained 3 epochs (1 in this run, after resuming at 2), this run in "), "{t}");
    assert_eq!(std::fs::read_to_string(dir.join("run3/metrics.jsonl")).unwrap().lines().count(), 3);
    assert!(!t.contains("note: the checkpoint trained with"), "the same batching is not noted: {t}");
    // Other batching goes on, said: it is no longer the uninterrupted run.
    std::fs::write(dir.join("batch.kyn"), spec.replace(" batch = 50\n", " batch = 25\n accumulate = 2\n")).unwrap();
    let out = kynml(&["train", "batch.kyn", "--epochs", "4", "--out", "batch"], dir);
    let t = text(&out);
    assert!(out.status.success() && t.contains("resumed after epoch 3"), "{t}");
    assert!(
        t.contains(
            "note: the checkpoint trained with batch = 50 (this run: 25), accumulate = 1 (this run: 2): the run"
        ),
        "{t}"
    );
    // Said by check too, where epochs are left to train (and only there).
    let t = text(&kynml(&["check", "spec.kyn"], dir));
    assert!(!t.contains("note: the checkpoint trained with"), "nothing left to train: {t}");
    std::fs::write(dir.join("more.kyn"), spec.replace("epochs = 2", "epochs = 6")).unwrap();
    let t = text(&kynml(&["check", "more.kyn"], dir));
    assert!(
        t.contains("note: the checkpoint trained with batch = 25 (this run: 50), accumulate = 2 (this run: 1)"),
        "{t}"
    );
    let out = kynml(&["train", "spec.kyn", "--fresh", "--out", "run4"], dir);
    let t = text(&out);
    assert!(out.status.success() && !t.contains("resume:") && t.matches("\nepoch ").count() == 2, "{t}");
    // What --fresh gives up is said before it goes.
    assert!(t.contains("note: --fresh starts over: ckpt/run.ckpt is replaced when this run writes"), "{t}");

    // A damaged checkpoint: exit 2, the path and the way out named, no run folder.
    let ckpt = dir.join("ckpt/run.ckpt");
    let good = std::fs::read(&ckpt).unwrap();
    std::fs::write(&ckpt, &good[..good.len() / 2]).unwrap();
    let out = kynml(&["train", "spec.kyn", "--out", "bad"], dir);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("cannot resume from ckpt/run.ckpt: checkpoint is truncated") && t.contains("--fresh"), "{t}");
    assert!(!dir.join("bad").exists());
    assert_eq!(std::fs::read(&ckpt).unwrap().len(), good.len() / 2, "the damaged file is left as it was");

    // Not ours: refused even with --fresh, and left alone.
    std::fs::write(&ckpt, b"someone's notes").unwrap();
    let out = kynml(&["train", "spec.kyn", "--fresh", "--out", "bad"], dir);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("ckpt/run.ckpt exists and is not a KynML checkpoint; refusing to overwrite it"), "{t}");
    assert!(t.contains("--> spec.kyn:"), "located at the spec: {t}");
    assert!(!dir.join("bad").exists());
    assert_eq!(std::fs::read(&ckpt).unwrap(), b"someone's notes");

    // The Python tool's checkpoint (a `torch.save` zip): the spec trains as
    // written, its checkpoints kept beside the old one, which is left as it
    // is, and the next run resumes from them.
    // A zip whose first member is `archive/data.pkl`, as `torch.save` writes
    // it; another zip (a `.npz`) is refused as any other file.
    let member = |name: &[u8]| [&b"PK\x03\x04"[..], &[0; 22], &[name.len() as u8, 0, 0, 0], name].concat();
    std::fs::write(&ckpt, member(b"arrays/x.npy")).unwrap();
    let t = text(&kynml(&["train", "spec.kyn", "--out", "bad"], dir));
    assert!(t.contains("is not a KynML checkpoint (a zip archive") && !dir.join("bad").exists(), "{t}");
    let torch_zip = member(b"archive/data.pkl");
    std::fs::write(&ckpt, &torch_zip).unwrap();
    let beside = dir.join("ckpt/run.ckpt.kynml");
    let out = kynml(&["check", "spec.kyn"], dir);
    let t = text(&out);
    let note = "note: ckpt/run.ckpt is a checkpoint of the Python tool (PyTorch's `torch.save`), which KynML cannot \
                resume from: it is left as it is, and KynML keeps its own checkpoints beside it, in \
                ckpt/run.ckpt.kynml";
    assert!(out.status.success() && t.contains(note), "{t}");
    assert!(
        t.contains("! checkpoints") && t.contains("`ckpt/run.ckpt.kynml` (beside the Python tool's `ckpt/run.ckpt`)"),
        "{t}"
    );
    let out = kynml(&["train", "spec.kyn", "--out", "beside"], dir);
    let t = text(&out);
    assert!(out.status.success() && t.contains(note) && t.matches("\nepoch ").count() == 2, "{t}");
    assert_eq!(std::fs::read(&ckpt).unwrap(), torch_zip);
    assert!(kynml_core::checkpoint::load(&beside).unwrap().is_some(), "a whole checkpoint beside it");
    let out = kynml(&["train", "spec.kyn", "--epochs", "3", "--out", "beside-2"], dir);
    let t = text(&out);
    assert!(out.status.success() && t.contains("resume: from ckpt/run.ckpt.kynml"), "{t}");
    assert!(t.contains("trained 3 epochs (1 in this run, after resuming at 2)"), "{t}");
    assert_eq!(std::fs::read(&ckpt).unwrap(), torch_zip);
    // The old file moved away: the runs go on from their checkpoints beside
    // its place (they started over at the spec's path and left them behind).
    std::fs::remove_file(&ckpt).unwrap();
    let out = kynml(&["train", "spec.kyn", "--epochs", "4", "--out", "beside-3"], dir);
    let t = text(&out);
    assert!(out.status.success() && t.contains("resume: from ckpt/run.ckpt.kynml"), "{t}");
    assert!(t.contains("note: KynML's checkpoints of this spec are in ckpt/run.ckpt.kynml"), "{t}");
    assert!(t.contains("trained 4 epochs (1 in this run, after resuming at 3)") && !ckpt.exists(), "{t}");
    std::fs::rename(&beside, &ckpt).unwrap();

    // A checkpoint folder that cannot be made: refused before training.
    checkpointing_spec(dir, "blocked.kyn", "data.csv/run.ckpt", 2);
    let out = kynml(&["train", "blocked.kyn", "--out", "bad"], dir);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("checkpoints cannot be written to data.csv/run.ckpt"), "{t}");
    assert!(!dir.join("bad").exists());
    // A folder no one may write in (/proc, even for root): `check` refuses
    // it as `train` does, said of the folder (it passed check, and train
    // named the lock file with an OS error).
    for (path, folder) in [("/proc/kynml.ckpt", "/proc"), ("/proc/sub/kynml.ckpt", "/proc, where its folder")] {
        checkpointing_spec(dir, "unwritable.kyn", path, 2);
        for command in ["check", "train"] {
            let out =
                kynml(&[command, "unwritable.kyn", "--out", "bad"][..if command == "check" { 2 } else { 4 }], dir);
            let t = text(&out);
            assert_eq!(out.status.code(), Some(2), "{command} {path}: {t}");
            assert!(t.contains(&format!("the folder {folder}")) && t.contains("cannot be written"), "{t}");
            assert!(t.contains("--> unwritable.kyn:") && !t.contains(".lock"), "{t}");
        }
    }
    assert!(!dir.join("bad").exists());
}

#[test]
fn rotated_checkpoint_names_holding_other_files_are_refused_before_training() {
    let tmp = copy_example("iris");
    let dir = tmp.path();
    let spec = std::fs::read_to_string(dir.join("iris.kyn")).unwrap().replace(
        "    seed = 7\n",
        "    seed = 7\n    checkpoint = checkpoint(every_n=2, path=\"ckpt3/iris.ckpt\", keep=2)\n",
    );
    std::fs::write(dir.join("iris.kyn"), spec).unwrap();
    std::fs::create_dir(dir.join("ckpt3")).unwrap();
    std::fs::write(dir.join("ckpt3/iris.ckpt.1"), "precious").unwrap();
    let out = kynml(&["train", "iris.kyn", "--device", "cpu", "--epochs", "4", "--out", "run"], dir);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("ckpt3/iris.ckpt.1 exists and is not a KynML checkpoint; refusing to overwrite it"), "{t}");
    assert!(!t.contains("\nepoch ") && !dir.join("run").exists() && !dir.join("ckpt3/iris.ckpt").exists(), "{t}");
    assert_eq!(std::fs::read_to_string(dir.join("ckpt3/iris.ckpt.1")).unwrap(), "precious");
    // Out of the way, the run rotates its own checkpoints.
    std::fs::remove_file(dir.join("ckpt3/iris.ckpt.1")).unwrap();
    let out = kynml(&["train", "iris.kyn", "--device", "cpu", "--epochs", "4", "--out", "run"], dir);
    assert!(out.status.success(), "{}", text(&out));
    kynml_core::checkpoint::load(&dir.join("ckpt3/iris.ckpt.1")).unwrap().expect("the older checkpoint");
    // The newest copy cut short: the error points at the whole older one.
    let newest = dir.join("ckpt3/iris.ckpt");
    let bytes = std::fs::read(&newest).unwrap();
    std::fs::write(&newest, &bytes[..bytes.len() / 2]).unwrap();
    let resume = |dir: &Path| kynml(&["train", "iris.kyn", "--device", "cpu", "--epochs", "6", "--out", "more"], dir);
    let t = text(&resume(dir));
    assert!(t.contains("ckpt3/iris.ckpt.1 is a whole checkpoint (epoch 2): to resume from it instead, `mv "), "{t}");
    // Deleted: starting over would rotate the older copy away, so it is refused.
    std::fs::remove_file(&newest).unwrap();
    let out = resume(dir);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("ckpt3/iris.ckpt is missing, but ckpt3/iris.ckpt.1 holds a whole checkpoint (epoch 2)"), "{t}");
    assert!(!dir.join("more").exists());
    std::fs::rename(dir.join("ckpt3/iris.ckpt.1"), &newest).unwrap();
    let out = resume(dir);
    assert!(out.status.success() && text(&out).contains("resume: from ckpt3/iris.ckpt (2 of 6"), "{}", text(&out));
}

// ---- export, predict, eval ----

#[test]
fn predict_into_a_missing_folder_is_bad_input_named_before_any_work() {
    let tmp = copy_example("iris");
    let dir = tmp.path();
    let out = kynml(&["train", "iris.kyn", "--device", "cpu", "--epochs", "2", "--out", "run"], dir);
    assert!(out.status.success(), "{}", text(&out));
    let out = kynml(&["predict", "run", "iris.csv", "--output", "nodir/p.csv"], dir);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("cannot write nodir/p.csv: its folder nodir does not exist") && !t.contains(".tmp"), "{t}");
    assert!(!dir.join("nodir").exists());
    // A folder no process may write in (even root: /proc takes no new
    // files) is bad input too, said before any work, as for an export.
    let out = kynml(&["predict", "run", "iris.csv", "--output", "/proc/kynml-p.csv"], dir);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("cannot write /proc/kynml-p.csv: its folder /proc cannot be written"), "{t}");
    let out = kynml(&["predict", "run", "iris.csv", "--output", "run"], dir);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("cannot write run: it is a folder, not a file"), "{t}");
    // A stream is written as it is: /dev/null discards, a named pipe's
    // reader gets the predictions.
    let out = kynml(&["predict", "run", "iris.csv", "--output", "/dev/null"], dir);
    assert!(out.status.success() && text(&out).contains("150 predictions written to /dev/null"), "{}", text(&out));
    let fifo = dir.join("pipe");
    let made = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(made.as_ptr(), 0o600) }, 0);
    let reader = std::thread::spawn(move || std::fs::read_to_string(fifo).unwrap());
    let out = kynml(&["predict", "run", "iris.csv", "--output", "pipe"], dir);
    assert!(out.status.success(), "{}", text(&out));
    let got = reader.join().unwrap();
    assert!(got.starts_with("species,p_setosa") && got.lines().count() == 151, "{got}");
    // A run's record is no model; a Burn export is named .mpk, as predict reads it.
    let out = kynml(&["predict", "run/metrics.json", "iris.csv"], dir);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("a .json file is an export's sidecar or a run's record, not a model"), "{t}");
    let out = kynml(&["export", "run", "--format", "burn", "--path", "m"], dir);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("a Burn export is read back by its .mpk name") && t.contains("name it m.mpk"), "{t}");
    assert!(!dir.join("m").exists() && !dir.join("m.json").exists(), "{t}");
    let out = kynml(&["export", "run", "--format", "burn", "--path", "m.MPK"], dir);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("name it m.mpk") && !dir.join("m.MPK").exists(), "{}", text(&out));
    // Onto the model, a checkpoint-like file or the rows themselves: refused,
    // each file left as it was. Onto an earlier predictions file: replaced.
    for (target, why) in [
        ("run/model.safetensors", "is not a predictions file with this model's columns"),
        ("iris.kyn", "is not a predictions file with this model's columns"),
        ("iris.csv", "is the file the rows are read from"),
    ] {
        let before = std::fs::read(dir.join(target)).unwrap();
        let out = kynml(&["predict", "run", "iris.csv", "--output", target], dir);
        let t = text(&out);
        assert!(out.status.code() == Some(2) && t.contains(why) && t.contains("refusing to overwrite"), "{t}");
        assert!(std::fs::read(dir.join(target)).unwrap() == before, "{target} was changed");
    }
    // An empty file, an earlier predictions file, and one a spreadsheet
    // saved again with CRLF line ends and a byte-order mark: replaced.
    std::fs::write(dir.join("p.csv"), "").unwrap();
    for _ in 0..2 {
        let out = kynml(&["predict", "run", "iris.csv", "--output", "p.csv"], dir);
        assert!(out.status.success(), "{}", text(&out));
    }
    let resaved = std::fs::read_to_string(dir.join("p.csv")).unwrap().replace('\n', "\r\n");
    std::fs::write(dir.join("p.csv"), format!("\u{feff}{resaved}")).unwrap();
    let out = kynml(&["predict", "run", "iris.csv", "--output", "p.csv"], dir);
    assert!(out.status.success(), "{}", text(&out));
}

/// Under umask 022, every file a run, a prediction and an export write is
/// 0644, as `File::create` makes it, not 0600: a serving account reads them.
#[cfg(unix)]
#[test]
fn written_files_are_readable_by_others_under_the_umask() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let tmp = copy_example("iris");
    let dir = tmp.path();
    let spec = std::fs::read_to_string(dir.join("iris.kyn")).unwrap()
        + "\nexport:\n    format = safetensors\n    path = \"models/iris.safetensors\"\n";
    std::fs::write(dir.join("iris.kyn"), spec).unwrap();
    let run = |args: &[&str]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_kynml"));
        cmd.args(args).current_dir(dir);
        // SAFETY: umask is async-signal-safe and touches no memory.
        unsafe {
            cmd.pre_exec(|| {
                libc::umask(0o022);
                Ok(())
            });
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{args:?}: {}", text(&out));
    };
    run(&["train", "iris.kyn", "--device", "cpu", "--epochs", "2", "--out", "run"]);
    run(&["predict", "run", "iris.csv", "--output", "pred.csv"]);
    run(&["export", "run", "--format", "onnx", "--path", "w/iris.onnx"]);
    run(&["export", "run", "--format", "burn", "--path", "w/iris.mpk"]);
    let mut files: Vec<&str> = vec![
        "run/spec.kyn",
        "run/spec.resolved.json",
        "run/data.json",
        "run/metrics.json",
        "run/model.safetensors",
        "run/model.json",
        "run/model.mpk",
        "models/iris.safetensors",
        "models/iris.json",
        "pred.csv",
        "w/iris.onnx",
        "w/iris.mpk",
        "w/iris.json",
    ];
    // A replaced file keeps its mode.
    std::fs::set_permissions(dir.join("pred.csv"), std::fs::Permissions::from_mode(0o664)).unwrap();
    run(&["predict", "run", "iris.csv", "--output", "pred.csv"]);
    files.retain(|f| *f != "pred.csv");
    let mode = |f: &str| std::fs::metadata(dir.join(f)).unwrap().permissions().mode() & 0o777;
    let wrong: Vec<String> = files.iter().filter(|f| mode(f) != 0o644).map(|f| format!("{f} {:o}", mode(f))).collect();
    assert!(wrong.is_empty(), "not 0644 under umask 022: {wrong:?}");
    assert_eq!(mode("pred.csv"), 0o664);
}

#[test]
fn a_run_exports_predicts_and_evaluates_and_bad_rows_are_located() {
    let tmp = copy_example("iris");
    let dir = tmp.path();
    let spec = std::fs::read_to_string(dir.join("iris.kyn")).unwrap()
        + "\nexport:\n    format = onnx\n    path = \"models/iris.onnx\"\n";
    std::fs::write(dir.join("iris.kyn"), spec).unwrap();
    let out = kynml(&["train", "iris.kyn", "--epochs", "20", "--out", "run"], dir);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("export        onnx to `models/iris.onnx` after training"), "{t}");
    assert!(t.contains("export: wrote ") && dir.join("models/iris.onnx").is_file(), "{t}");
    assert!(dir.join("run/model.safetensors").is_file() && dir.join("run/model.json").is_file());

    let out = kynml(&["predict", "run", "--input", "iris.csv", "--output", "pred.csv"], dir);
    assert!(out.status.success(), "{}", text(&out));
    let pred = std::fs::read_to_string(dir.join("pred.csv")).unwrap();
    let mut lines = pred.lines();
    assert_eq!(lines.next(), Some("species,p_setosa,p_versicolor,p_virginica"));
    let rows: Vec<&str> = lines.collect();
    assert_eq!(rows.len(), 150);
    let sum: f64 = rows[0].split(',').skip(1).map(|v| v.parse::<f64>().unwrap()).sum();
    assert!((sum - 1.0).abs() < 1e-5, "{}", rows[0]);

    let out = kynml(&["eval", "run", "--input", "iris.csv"], dir);
    let t = text(&out);
    assert!(out.status.success() && t.contains("accuracy") && t.contains("150 rows"), "{t}");
    // A folder, a run folder or `-` given as the spec: said as such (an OS
    // error, "Is a directory", was all).
    for (spec, said) in [
        ("run", "it is a run folder, not a spec"),
        ("models", "it is a folder, not a spec"),
        ("-", "a spec is read from a file, not from standard input"),
    ] {
        for command in ["check", "train"] {
            let out = kynml(&[command, spec], dir);
            let t = text(&out);
            assert_eq!(out.status.code(), Some(2), "{t}");
            assert!(t.contains(&format!("cannot read spec `{spec}`: {said}")), "{command} {spec}: {t}");
        }
    }
    // A hand-edited description (a normaliser's scale, an activation) is
    // refused: it loaded, and predicted otherwise without a word.
    let sidecar = std::fs::read_to_string(dir.join("run/model.json")).unwrap();
    for edit in [("/normalizer/std/0", serde_json::json!(-1.0)), ("/layers/0/activation", serde_json::json!("sigmoid"))]
    {
        std::fs::create_dir_all(dir.join("edited")).unwrap();
        for f in std::fs::read_dir(dir.join("run")).unwrap() {
            let f = f.unwrap().path();
            if f.is_file() {
                std::fs::copy(&f, dir.join("edited").join(f.file_name().unwrap())).unwrap();
            }
        }
        let mut json: serde_json::Value = serde_json::from_str(&sidecar).unwrap();
        *json.pointer_mut(edit.0).unwrap_or_else(|| panic!("no {} in {sidecar}", edit.0)) = edit.1;
        std::fs::write(dir.join("edited/model.json"), serde_json::to_vec_pretty(&json).unwrap()).unwrap();
        let out = kynml(&["predict", "edited", "iris.csv"], dir);
        let t = text(&out);
        assert_eq!(out.status.code(), Some(2), "{}: {t}", edit.0);
        assert!(t.contains("edited/model.json") && t.contains("changed after the model was written"), "{t}");
    }
    // Written again unchanged (another tool's formatting), it loads.
    let json: serde_json::Value = serde_json::from_str(&sidecar).unwrap();
    std::fs::write(dir.join("edited/model.json"), serde_json::to_vec(&json).unwrap()).unwrap();
    let out = kynml(&["predict", "edited", "iris.csv"], dir);
    assert!(out.status.success(), "{}", text(&out));
    // The loss, as training's `val_loss` is computed: the mean of -ln p of
    // each row's own species, from the probabilities `predict` wrote.
    let printed: f64 = t
        .lines()
        .find_map(|l| l.trim().strip_prefix("cross_entropy"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no cross_entropy row: {t}"));
    let species = ["setosa", "versicolor", "virginica"];
    let csv = std::fs::read_to_string(dir.join("iris.csv")).unwrap();
    let by_hand = csv
        .lines()
        .skip(1)
        .zip(&rows)
        .map(|(line, pred)| {
            let class = species.iter().position(|s| line.ends_with(s)).unwrap();
            -pred.split(',').nth(1 + class).unwrap().parse::<f64>().unwrap().ln()
        })
        .sum::<f64>()
        / 150.0;
    assert!((printed - by_hand).abs() <= 1e-3 * by_hand.max(0.1), "eval says {printed}, by hand {by_hand}: {t}");
    // The rows by position, and without --output the CSV on standard output alone.
    let out = kynml(&["predict", "run", "iris.csv"], dir);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), pred, "standard output holds the CSV and nothing else");
    // `--output /dev/stdout` is standard output too: the CSV alone, no
    // "written to" line after it (a script's idiom where `-` is not known).
    let out = kynml(&["predict", "run", "iris.csv", "--output", "/dev/stdout"], dir);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), pred, "/dev/stdout holds the CSV and nothing else");
    let out = kynml(&["eval", "run", "iris.csv"], dir);
    assert!(out.status.success() && text(&out).contains("150 rows of iris.csv"), "{}", text(&out));
    // The metrics as JSON: with `-`, standard output holds the JSON alone
    // (the table goes to standard error); to a file, the same document, and
    // a file that is not an earlier one is refused before any work, untouched.
    let out = kynml(&["eval", "run", "iris.csv", "--json", "-"], dir);
    assert!(out.status.success(), "{}", text(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("standard output is the JSON alone");
    assert_eq!((json["rows"].as_u64(), json["data"].as_str()), (Some(150), Some("iris.csv")), "{json}");
    let accuracy = json["metrics"]["accuracy"].as_f64().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains(&format!("accuracy        {accuracy:.4}")), "{}", text(&out));
    // Class by class: the confusion matrix counted by hand from predict's
    // probabilities (rows the true species, columns the likeliest), and
    // each class's scores from it.
    let mut counts = vec![vec![0u64; 3]; 3];
    for (line, pred) in csv.lines().skip(1).zip(&rows) {
        let truth = species.iter().position(|s| line.ends_with(s)).unwrap();
        let p: Vec<f64> = pred.split(',').skip(1).map(|v| v.parse().unwrap()).collect();
        let likeliest = (0..3).fold(0, |best, i| if p[i] > p[best] { i } else { best });
        counts[truth][likeliest] += 1;
    }
    assert_eq!(json["confusion"], serde_json::json!(counts), "{json}");
    for (c, name) in species.iter().enumerate() {
        let entry = &json["classes"][c];
        let tp = counts[c][c] as f64;
        let predicted: u64 = counts.iter().map(|r| r[c]).sum();
        assert_eq!((entry["class"].as_str(), entry["rows"].as_u64()), (Some(*name), Some(50)), "{json}");
        // serde_json reads a float back to within its last bit.
        let near = |v: &serde_json::Value, want: f64| v.as_f64().is_some_and(|v| (v - want).abs() < 1e-12);
        assert!(near(&entry["recall"], tp / 50.0), "{json}");
        assert!(near(&entry["precision"], if predicted == 0 { 0.0 } else { tp / predicted as f64 }), "{json}");
    }
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("confusion matrix: rows are the true classes, columns the predicted ones"), "{said}");
    let setosa = format!("  {:<16}   {:>6}   {:>10}   {:>9}", "setosa", counts[0][0], counts[0][1], counts[0][2]);
    assert!(said.contains(&setosa), "{said}");
    let out = kynml(&["eval", "run", "iris.csv", "--json", "/dev/stdout"], dir);
    assert!(out.status.success(), "{}", text(&out));
    let same: serde_json::Value = serde_json::from_slice(&out.stdout).expect("/dev/stdout holds the JSON alone");
    assert_eq!(same, json);
    let out = kynml(&["eval", "run", "iris.csv", "--json", "m.json"], dir);
    assert!(out.status.success() && text(&out).contains("metrics written to m.json"), "{}", text(&out));
    let written: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("m.json")).unwrap()).unwrap();
    assert_eq!(written, json);
    let out = kynml(&["eval", "run", "iris.csv", "--json", "m.json"], dir);
    assert!(out.status.success(), "an earlier eval's file is replaced: {}", text(&out));
    let before = std::fs::read(dir.join("iris.kyn")).unwrap();
    let out = kynml(&["eval", "run", "iris.csv", "--json", "iris.kyn"], dir);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("is not an earlier `kynml eval --json` file") && !t.contains("150 rows"), "{t}");
    assert_eq!(std::fs::read(dir.join("iris.kyn")).unwrap(), before);
    for args in [&["predict", "run"][..], &["predict", "run", "iris.csv", "--input", "iris.csv"], &["eval", "run"]] {
        let out = kynml(args, dir);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        assert!(text(&out).contains("INPUT"), "{args:?}: {}", text(&out));
    }

    // Every format again from the run folder; the exports load like the run.
    for (format, file) in [("safetensors", "w/iris.safetensors"), ("burn", "w/iris.mpk"), ("onnx", "w/iris.onnx")] {
        let out = kynml(&["export", "run", "--format", format, "--path", file], dir);
        assert!(out.status.success() && dir.join(file).is_file(), "{}", text(&out));
    }
    for model in ["w/iris.safetensors", "w/iris.mpk"] {
        let out = kynml(&["predict", model, "--input", "iris.csv", "--output", "again.csv"], dir);
        assert!(out.status.success(), "{}", text(&out));
        assert_eq!(std::fs::read_to_string(dir.join("again.csv")).unwrap(), pred, "{model} predicts differently");
    }
    let out = kynml(&["export", "run", "--format", "torchscript", "--path", "m.pt"], dir);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("onnx") && t.contains("safetensors") && t.contains("burn") && !dir.join("m.pt").exists(), "{t}");
    // `-` is standard output to `predict --output`; export writes files only.
    let out = kynml(&["export", "run", "--format", "onnx", "--path", "-"], dir);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("standard output") && !dir.join("-").exists(), "{t}");

    // Bad rows: located, exit 2, nothing written.
    let csv = std::fs::read_to_string(dir.join("iris.csv")).unwrap();
    let missing = csv.replace("petal_width_cm", "petal_wdth_cm");
    std::fs::write(dir.join("bad.csv"), missing).unwrap();
    let out = kynml(&["predict", "run", "--input", "bad.csv", "--output", "bad-pred.csv"], dir);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("bad.csv:1: no column `petal_width_cm`") && t.contains("did you mean `petal_wdth_cm`?"), "{t}");
    assert!(!dir.join("bad-pred.csv").exists());
    let header = csv.lines().next().unwrap();
    let extra: String =
        csv.lines().map(|l| if l == header { format!("{l},notes\n") } else { format!("{l},x\n") }).collect();
    std::fs::write(dir.join("bad.csv"), extra).unwrap();
    let t = text(&kynml(&["predict", "run", "--input", "bad.csv", "--output", "bad-pred.csv"], dir));
    assert!(t.contains("bad.csv:1: column 6 (`notes`) is not one of the model's inputs"), "{t}");
    let unknown = csv.replacen("setosa", "setosaa", 1);
    std::fs::write(dir.join("bad.csv"), unknown).unwrap();
    let out = kynml(&["eval", "run", "--input", "bad.csv"], dir);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(
        t.contains("bad.csv:2: column 5 (`species`) holds \"setosaa\", which is not one of the model's classes"),
        "{t}"
    );
    // A cell of megabytes is quoted cut in its middle, not whole.
    let long = csv.replacen("setosa", &format!("set{}osa", "x".repeat(1 << 20)), 1);
    std::fs::write(dir.join("bad.csv"), long).unwrap();
    let out = kynml(&["eval", "run", "--input", "bad.csv"], dir);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{}", &t[..t.len().min(2000)]);
    assert!(
        t.len() < 2000 && t.contains("bad.csv:2: column 5 (`species`) holds \"setxxx"),
        "{}",
        &t[..t.len().min(2000)]
    );
    assert!(t.contains("...") && t.contains("xxxosa\""), "{t}");
    let not_number = csv.replacen("5.1,", "5.1x,", 1);
    std::fs::write(dir.join("bad.csv"), not_number).unwrap();
    let t = text(&kynml(&["predict", "run", "--input", "bad.csv", "--output", "bad-pred.csv"], dir));
    assert!(t.contains("bad.csv:2: column 1 (`sepal_length_cm`) is not a number: found \"5.1x\""), "{t}");
    // A number an f32 holds, but not once normalised: no NaN, no class for it.
    let with_first = |value: &str| -> String {
        let mut lines: Vec<String> = csv.lines().map(String::from).collect();
        let first = lines[2].split(',').next().unwrap().to_string();
        lines[2] = lines[2].replacen(&first, value, 1);
        lines.join("\n") + "\n"
    };
    std::fs::write(dir.join("bad.csv"), with_first("3e38")).unwrap();
    for command in ["predict", "eval"] {
        let out = kynml(
            &[command, "run", "--input", "bad.csv", "--output", "bad-pred.csv"]
                [..if command == "eval" { 4 } else { 6 }],
            dir,
        );
        let t = text(&out);
        assert_eq!(out.status.code(), Some(2), "{t}");
        assert!(t.contains("bad.csv:3: `sepal_length_cm` = 3e38 is beyond what the model can take"), "{t}");
        assert!(!dir.join("bad-pred.csv").exists());
    }
    std::fs::write(dir.join("bad.csv"), with_first("1e300")).unwrap();
    let t = text(&kynml(&["predict", "run", "--input", "bad.csv", "--output", "bad-pred.csv"], dir));
    assert!(t.contains("found \"1e300\", which is too large for a 32-bit float"), "{t}");
    // Rows are read as training reads its data: a device is refused unread
    // (`/dev/zero` was read until memory ran out), a compressed file is said.
    std::fs::write(dir.join("rows.csv.gz"), b"\x1f\x8b\x08\x00rest").unwrap();
    for command in ["predict", "eval"] {
        let out = kynml(&[command, "run", "/dev/null"], dir);
        let t = text(&out);
        assert_eq!(out.status.code(), Some(2), "{t}");
        assert!(t.contains("/dev/null: it is a character device, not a data file"), "{t}");
        let t = text(&kynml(&[command, "run", "rows.csv.gz"], dir));
        assert!(t.contains("rows.csv.gz") && t.contains("gzip") && t.contains("gunzip"), "{t}");
    }
}

/// A column that varies by less than a few 32-bit float steps at its size
/// (1e6 + 0.05 noise) keeps that spread in `normalize` (it was taken for a
/// constant and divided by 1) and is named in a note.
#[test]
fn a_column_too_fine_for_32_bit_floats_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let mut csv = String::from("a,b,y\n");
    for i in 0..400 {
        let a = ((i * 37) % 11) as f64 * 0.01;
        csv += &format!("{:.6},{},{}\n", 1e6 + a, i % 5, a * 60.0 + (i % 5) as f64);
    }
    std::fs::write(tmp.path().join("d.csv"), csv).unwrap();
    let spec = "dataset D:\n    source = csv(\"d.csv\")\n    target = \"y\"\n    normalize = true\nmodel M:\n    \
                input 2\n    dense 8 relu\n    dense 1 linear\ntrain:\n    loss = mse\n    epochs = 1\n";
    std::fs::write(tmp.path().join("s.kyn"), spec).unwrap();
    let out = kynml(&["train", "s.kyn", "--out", "r"], tmp.path());
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("note: `a` varies by about") && t.contains("subtract an offset"), "{t}");
    assert!(!t.contains("note: `b`"), "{t}");
    let data: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(tmp.path().join("r/data.json")).unwrap()).unwrap();
    let std = data["normalizer"]["std"][0].as_f64().unwrap();
    assert!(std > 0.01 && std < 0.1, "the spread of `a` is kept: {data}");

    // Without `normalize` it is named all the same (the note hung on the
    // normalizer), by `check` too; and a column whose numbers all read as
    // one float (a timestamp in milliseconds, 7 apart) is named as a
    // constant, which it had looked like.
    let mut csv = String::from("a,b,ts,y\n");
    for i in 0..400 {
        let a = ((i * 37) % 11) as f64 * 0.01;
        csv += &format!("{:.6},{},{},{}\n", 1e6 + a, i % 5, 1_700_000_000_000u64 + i * 7, (i % 5) as f64);
    }
    std::fs::write(tmp.path().join("d.csv"), csv).unwrap();
    let plain = spec.replace("    normalize = true\n", "").replace("input 2", "input 3");
    std::fs::write(tmp.path().join("s.kyn"), plain).unwrap();
    for args in [&["check", "s.kyn"][..], &["train", "s.kyn", "--out", "r2"]] {
        let out = kynml(args, tmp.path());
        let t = text(&out);
        assert!(out.status.success(), "{t}");
        assert!(t.contains("note: `a` varies by about"), "{args:?}: {t}");
        assert!(t.contains("note: `ts` holds different numbers that all read as one 32-bit float"), "{args:?}: {t}");
        assert!(!t.contains("note: `b`") && !t.contains("note: `ts` varies"), "{args:?}: {t}");
    }
    // A regression target whose numbers all read as one float (1e8 and a
    // quarter's steps) is named too: the model could only learn a constant.
    let mut csv = String::from("a,b,ts,y\n");
    for i in 0..400 {
        csv += &format!("{},{},{},{}\n", i % 7, i % 5, i % 3, 100_000_000.0 + (i % 8) as f64 * 0.25);
    }
    std::fs::write(tmp.path().join("d.csv"), csv).unwrap();
    let t = text(&kynml(&["check", "s.kyn"], tmp.path()));
    assert!(t.contains("note: the target `y` holds different numbers that all read as one 32-bit float"), "{t}");
    assert!(!t.contains("note: `ts`") && !t.contains("note: `a`"), "{t}");
    assert!(!t.contains("in every training row"), "said once, as numbers that read as one: {t}");
    // Exactly one value: a feature and the target, named once each.
    let mut csv = String::from("a,b,ts,y\n");
    for i in 0..400 {
        csv += &format!("{},7,{},5\n", i % 7, i % 3);
    }
    std::fs::write(tmp.path().join("d.csv"), csv).unwrap();
    for args in [&["check", "s.kyn"][..], &["train", "s.kyn", "--out", "r3"]] {
        let t = text(&kynml(args, tmp.path()));
        assert!(t.contains("note: `b` holds one value in every training row"), "{args:?}: {t}");
        assert!(t.contains("note: the target `y` is 5 in every training row"), "{args:?}: {t}");
        assert!(!t.contains("note: `a`") && !t.contains("note: `ts`"), "{args:?}: {t}");
    }
}

/// A run folder starts empty and holds the run's own files: an export
/// written into it could replace one (an export named `metrics` would have
/// its sidecar overwritten by the run's `metrics.json`), and a checkpoint's
/// lock there made the folder "not empty" before it was created. Both are
/// refused before anything is read or written, located at the path.
#[test]
fn a_checkpoint_or_export_inside_the_run_folder_is_refused_before_anything() {
    let tmp = copy_example("iris");
    let dir = tmp.path();
    let base = std::fs::read_to_string(dir.join("iris.kyn")).unwrap();
    let export = base.clone() + "\nexport:\n    format = safetensors\n    path = \"out/metrics.safetensors\"\n";
    std::fs::write(dir.join("e.kyn"), export).unwrap();
    let out = kynml(&["train", "e.kyn", "--out", "out", "--epochs", "1"], dir);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(
        t.contains("e.kyn:") && t.contains("the export path out/metrics.safetensors is inside the run folder out"),
        "{t}"
    );
    assert!(t.contains("kynml export RUN"), "{t}");
    assert!(!dir.join("out").exists(), "{t}");
    // Through `..` and `./` alike; elsewhere the same export trains.
    let out = kynml(&["train", "e.kyn", "--out", "./sub/../out/", "--epochs", "1"], dir);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let out = kynml(&["train", "e.kyn", "--out", "elsewhere", "--epochs", "1"], dir);
    assert!(out.status.success() && dir.join("out/metrics.json").is_file(), "{}", text(&out));

    let ckpt =
        base.replace("    seed = 7", "    seed = 7\n    checkpoint = checkpoint(every_n=1, path=\"results/ckpt.pt\")");
    std::fs::write(dir.join("c.kyn"), ckpt).unwrap();
    let out = kynml(&["train", "c.kyn", "--out", "results", "--epochs", "1"], dir);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("the checkpoint path results/ckpt.pt is inside the run folder results"), "{t}");
    assert!(!dir.join("results").exists(), "nothing written, no lock left: {t}");

    // A run folder that is not empty: refused before the data is read or
    // anything said, with the command that runs into a new one.
    let out = kynml(&["train", "e.kyn", "--out", "elsewhere", "--epochs", "1"], dir);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("cannot create the run folder elsewhere: it is not empty"), "{t}");
    assert!(t.contains("to run into a new folder: ") && t.contains("--out elsewhere-2 --epochs 1"), "{t}");
    assert!(!t.contains("data: ") && !t.contains("memory: "), "{t}");
}

/// Output whose reader is gone (`| tee log` stopped by the same Ctrl-C, a
/// `| head` that has read enough) stops the run after its step, with its
/// checkpoint, status 141; it was killed by SIGPIPE mid-epoch, its steps
/// since the last checkpoint lost and nothing said.
#[test]
fn a_reader_that_goes_away_stops_the_run_with_its_checkpoint() {
    use std::io::BufRead;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    checkpointing_spec(dir, "spec.kyn", "run.ckpt", 400);
    let mut child = spawn(&["train", "spec.kyn", "--out", "gone"], dir);
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    assert!(lines.by_ref().map_while(Result::ok).any(|l| l.starts_with("epoch   2 ")), "the run never said epoch 2");
    drop(lines);
    let out = child.wait_with_output().unwrap();
    let t = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(141), "{:?}: {t}", out.status);
    assert!(t.contains("interrupted at epoch ") && t.contains("checkpoint written to run.ckpt"), "{t}");
    let checkpoint = kynml_core::checkpoint::load(&dir.join("run.ckpt")).unwrap().expect("a checkpoint");
    assert!(checkpoint.state_value()["epoch"].as_u64().is_some_and(|e| (2..400).contains(&e)), "{t}");
}

/// `kynml train ... 2>&1 | tee log` stopped by Ctrl-C: the signal ends
/// `tee` too, and both streams' reader is gone. The run stops as Ctrl-C
/// asks, with its checkpoint, status 130 (141 where the pipe was met
/// first); its last message, unwritable, made it exit 1 (a scheduler's
/// script took a requeue for a failure), and where the pipe was met first
/// the Ctrl-C counted as a second request and quit without the checkpoint.
#[test]
fn ctrl_c_that_also_ends_the_reader_of_both_streams_exits_as_a_stop() {
    use std::io::BufRead;
    use std::os::unix::process::CommandExt;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    checkpointing_spec(dir, "spec.kyn", "run.ckpt", 400);
    let mut command = Command::new(env!("CARGO_BIN_EXE_kynml"));
    command.args(["train", "spec.kyn", "--out", "teed"]).current_dir(dir).stdout(std::process::Stdio::piped());
    // SAFETY: dup2(2) and signal(2) are async-signal-safe and touch no memory.
    unsafe {
        command.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            (libc::dup2(1, 2) == 2).then_some(()).ok_or_else(std::io::Error::last_os_error)
        });
    }
    let mut child = command.spawn().unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    assert!(lines.by_ref().map_while(Result::ok).any(|l| l.starts_with("epoch   2 ")), "the run never said epoch 2");
    // The reader goes, and the Ctrl-C comes: whichever the run meets first
    // stops it (130 for the Ctrl-C, 141 for the pipe), never a failure's 1.
    drop(lines);
    Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    let status = child.wait().unwrap();
    assert!(matches!(status.code(), Some(130 | 141)), "{status:?}");
    let checkpoint = kynml_core::checkpoint::load(&dir.join("run.ckpt")).unwrap().expect("a checkpoint");
    let epoch = &checkpoint.state_value()["epoch"];
    assert!(epoch.as_u64().is_some_and(|e| (2..400).contains(&e)), "{epoch}");
    // An orderly stop draws the curves of the epochs done; quitting at once does not.
    assert!(dir.join("teed/curves.svg").is_file(), "the run stopped in order, its curves drawn");
}

#[test]
fn ctrl_c_and_sigterm_checkpoint_say_how_to_resume_and_twice_quit_at_once() {
    use std::time::Duration;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    checkpointing_spec(dir, "ref.kyn", "ref.ckpt", 24);
    checkpointing_spec(dir, "spec.kyn", "run.ckpt", 24);
    // Its rows ten times over: epochs of 7 ms left a signal's own delivery
    // (spawning `kill`) and the checkpoint's hand-over as long as half an
    // epoch, and it landed between epochs.
    let rows = std::fs::read_to_string(dir.join("data.csv")).unwrap();
    let (header, body) = rows.split_once('\n').unwrap();
    std::fs::write(dir.join("data.csv"), format!("{header}\n{}", body.repeat(10))).unwrap();
    assert!(kynml(&["train", "ref.kyn", "--out", "ref-run"], dir).status.success());
    let reference = std::fs::read(dir.join("ref.ckpt")).unwrap();

    // The signal goes in half an epoch after the run has handed over its
    // second epoch's checkpoint (said after the epoch's line, the third
    // epoch's steps follow at once), so that it lands inside the third
    // however fast the machine trains (one that lands between epochs stops
    // at the boundary).
    let interrupt_once = |signal: &str, signals: usize, out: &str, more: &[&str]| {
        use std::io::BufRead;
        let mut child = spawn(&[&["train", "spec.kyn", "--out", out][..], more].concat(), dir);
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let mut seen = String::new();
        let mut seconds = None;
        for line in lines.by_ref() {
            let line = line.unwrap();
            seen += &line;
            seen.push('\n');
            if line.starts_with("epoch   2 ") {
                // The line ends in the epoch's time: `41.2ms` or `1.3s`.
                let last = line.split_whitespace().last().unwrap_or_default();
                seconds = match last.strip_suffix("ms") {
                    Some(ms) => ms.parse::<f64>().map(|v| v / 1e3),
                    None => last.trim_end_matches('s').parse::<f64>(),
                }
                .ok();
            }
            if line.starts_with("checkpoint: epoch 2 ") {
                std::thread::sleep(Duration::from_secs_f64(seconds.unwrap_or(0.02) / 2.0));
                break;
            }
        }
        if signals == 0 {
            // One sender, the same signal twice at once, as GNU `timeout`
            // sends it (to the run, then to its process group).
            let pid = child.id();
            // 10 ms apart, so that the two arrive as two (at once they
            // may merge into one pending signal, which proves nothing).
            let twice = format!("kill {signal} {pid}; sleep 0.01; kill {signal} {pid}");
            Command::new("sh").args(["-c", &twice]).status().unwrap();
        }
        for _ in 0..signals {
            Command::new("kill").args([signal, &child.id().to_string()]).status().unwrap();
            std::thread::sleep(Duration::from_millis(2));
        }
        for line in lines {
            seen += &line.unwrap();
            seen.push('\n');
        }
        let mut out = child.wait_with_output().unwrap();
        out.stdout = seen.into_bytes();
        out
    };
    // A signal sent half an epoch in may still land after the epoch's end
    // when the machine is loaded (the suite's tests run side by side): such
    // a run stops at the boundary with a whole-epoch checkpoint, which
    // proves nothing about a stop inside an epoch. That run is set aside
    // and the signal sent again to a new one, at most three times.
    let interrupt = |signal: &str, signals: usize, out: &str, more: &[&str]| {
        for attempt in 1.. {
            let result = interrupt_once(signal, signals, out, more);
            let partial = kynml_core::checkpoint::load(&dir.join("run.ckpt"))
                .ok()
                .flatten()
                .is_some_and(|c| c.state_value()["partial"].is_object());
            if signals == 2 || partial || attempt == 3 {
                return result;
            }
            eprintln!("the signal landed between epochs (attempt {attempt}): sent again to a new run");
            std::fs::remove_file(dir.join("run.ckpt")).unwrap();
            std::fs::remove_dir_all(dir.join(out)).unwrap();
        }
        unreachable!()
    };

    // Profiled (which changes no weight): the steps profiled so far are kept.
    let out = interrupt("-INT", 1, "first", &["--profile"]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(130), "{t}");
    assert!(t.contains("stopping after this step") && t.contains("checkpoint written to run.ckpt"), "{t}");
    // The same command would find `first` not empty: the advice names a new folder.
    assert!(t.contains("to continue from there: ") && t.contains(" train spec.kyn --out first-2 --profile\n"), "{t}");
    assert!(t.contains("the profile of the steps so far is in first"), "{t}");
    // The epochs it finished are drawn, as a finished run's are.
    assert!(t.contains("the curves of its ") && t.contains(" epochs are in first"), "{t}");
    assert!(dir.join("first/curves.svg").is_file() && dir.join("first/curves.png").is_file(), "{t}");
    let svg = std::fs::read_to_string(dir.join("first/curves.svg")).unwrap();
    assert!(svg.contains("interrupted after epoch "), "the curves say the run was interrupted");
    let profile: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("first/profile.json")).unwrap()).unwrap();
    assert!(profile["steps"].as_u64().is_some_and(|n| n > 0) && profile["verdict"]["advice"].is_string(), "{profile}");
    assert!(dir.join("first/trace.json").is_file() && dir.join("first/profile.svg").is_file());
    // report says what an unfinished run folder is.
    let t = text(&kynml(&["report", "first"], dir));
    assert!(t.contains("`first` did not finish (interrupted, failed or still running)"), "{t}");
    // ... and where the profile of its steps is, which train pointed at.
    let profile_at =
        format!("the profile of its steps so far in {}", Path::new("first").join("profile.json").display());
    assert!(t.contains(&profile_at), "{t}");
    // Its weights have taken steps past the epochs it counts as done: they
    // cannot end a run of that many epochs, which is refused with nothing written.
    let t = text(&out);
    let at: usize = t.split("interrupted at epoch ").nth(1).and_then(|r| r.split(',').next()?.parse().ok()).unwrap();
    let epochs_done = at - 1;
    let out = kynml(&["train", "spec.kyn", "--out", "fewer", "--epochs", &epochs_done.to_string()], dir);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("was written partway through epoch") && t.contains("--fresh starts over"), "{t}");
    assert!(!dir.join("fewer").exists(), "{t}");
    // `check` says so too, rather than that train would write its model.
    let spec = std::fs::read_to_string(dir.join("spec.kyn")).unwrap();
    std::fs::write(dir.join("fewer.kyn"), spec.replace("epochs = 24", &format!("epochs = {epochs_done}"))).unwrap();
    let t = text(&kynml(&["check", "fewer.kyn"], dir));
    assert!(t.contains(&format!("written partway through epoch {at}, so `kynml train` would refuse it")), "{t}");
    // Checked as written, it says where the epoch goes on, as train does.
    let t = text(&kynml(&["check", "spec.kyn"], dir));
    assert!(t.contains(&format!("epochs done, epoch {at} goes on after ")) && t.contains("resumes from it"), "{t}");
    let size = std::fs::metadata(dir.join("run.ckpt")).unwrap().len();
    // check counts the checkpoint a resume holds, as train does below.
    let held = format!(", the checkpoint resumed from {},", kynml_core::train::memory::bytes(size));
    assert!(t.lines().any(|l| l.starts_with("memory: about ") && l.contains(&held)), "{t}");
    let out = kynml(&["train", "spec.kyn", "--out", "first-2"], dir);
    assert!(out.status.success() && text(&out).contains("resume: from run.ckpt"), "{}", text(&out));
    // The checkpoint read is held through the run, and counted.
    let held = format!(", the checkpoint resumed from {},", kynml_core::train::memory::bytes(size));
    assert!(text(&out).lines().any(|l| l.starts_with("memory: about ") && l.contains(&held)), "{}", text(&out));
    // Beside a finished run (a glob catches both), the unfinished one is
    // left out with a note, not the whole report refused.
    let report = kynml(&["report", "first", "first-2"], dir);
    let (stdout, t) = (String::from_utf8_lossy(&report.stdout).into_owned(), text(&report));
    assert!(report.status.success() && stdout.contains("first-2") && !stdout.contains("first "), "{t}");
    assert!(t.contains("note: `first` did not finish") && t.contains("left out of the report"), "{t}");
    assert!(text(&out).contains(" goes on after "), "where the interrupted epoch goes on: {}", text(&out));
    // Epochs read back from the checkpoint and epochs trained now: one set of keys.
    let jsonl = std::fs::read_to_string(dir.join("first-2/metrics.jsonl")).unwrap();
    let keys: Vec<Vec<String>> = jsonl
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap().as_object().unwrap().keys().cloned().collect())
        .collect();
    assert!(keys.len() > 2 && keys.windows(2).all(|w| w[0] == w[1]), "{jsonl}");
    assert!(std::fs::read(dir.join("run.ckpt")).unwrap() == reference, "the resumed run ends elsewhere");

    // SIGTERM, as a cluster's scheduler stops a job: the same, with its own status.
    std::fs::remove_file(dir.join("run.ckpt")).unwrap();
    let out = interrupt("-TERM", 1, "term", &[]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(143), "{t}");
    assert!(t.contains("terminated (SIGTERM): stopping after this step"), "{t}");
    assert!(t.contains("checkpoint written to run.ckpt") && t.contains(" train spec.kyn --out term-2\n"), "{t}");
    // A closed ssh session's SIGHUP and Slurm's SIGUSR1 warning: the same
    // (both ended the run with no checkpoint).
    // Where these tests run ignoring one (under `nohup`), the run inherits
    // that, and rightly keeps ignoring it.
    let ignored = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("SigIgn:").map(|m| m.trim().to_string())))
        .and_then(|mask| u64::from_str_radix(&mask, 16).ok())
        .unwrap_or(0);
    for (signal, number, says) in [("-HUP", 1, "hangup (SIGHUP)"), ("-USR1", 10, "SIGUSR1 (a scheduler's warning)")] {
        if ignored & (1 << (number - 1)) != 0 {
            eprintln!("{signal} is ignored here (nohup?): not checked");
            continue;
        }
        let status = 128 + number;
        std::fs::remove_file(dir.join("run.ckpt")).unwrap();
        let out = interrupt(signal, 1, &signal[1..].to_lowercase(), &[]);
        let t = text(&out);
        assert_eq!(out.status.code(), Some(status), "{t}");
        let checkpoint = kynml_core::checkpoint::load(&dir.join("run.ckpt")).unwrap();
        assert!(checkpoint.is_some_and(|c| c.state_value()["partial"].is_object()), "no mid-epoch checkpoint: {t}");
        // A hangup sends what the run says after it to /dev/null where it
        // went to the terminal or a pipe (their reader may be gone with it:
        // a failed print ended the run before its checkpoint).
        if signal != "-HUP" {
            assert!(t.contains(says) && t.contains("checkpoint written to run.ckpt"), "{t}");
        }
    }

    // The same signal twice at once from one sender is one request: a stop
    // with its checkpoint, not a quit (`timeout -s INT` quit 1 run in 8).
    std::fs::remove_file(dir.join("run.ckpt")).unwrap();
    let out = interrupt("-INT", 0, "echo", &[]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(130), "{t}");
    assert!(t.contains("checkpoint written to run.ckpt") && !t.contains("quit at once"), "{t}");

    // Twice: out at once, and whatever is at the path is whole.
    std::fs::remove_file(dir.join("run.ckpt")).unwrap();
    let out = interrupt("-INT", 2, "twice", &[]);
    assert_eq!(out.status.code(), Some(130), "{}", text(&out));
    assert!(
        text(&out).contains("quit at once; a checkpoint at the spec's path, if one was written, is whole"),
        "{}",
        text(&out)
    );
    kynml_core::checkpoint::load(&dir.join("run.ckpt")).expect("no damaged checkpoint");
}

/// SIGTERM after the last epoch's end, or after early stopping: the
/// results are written whole, and the run says so and exits 143 (it said
/// "stopping after this step" and exited 0).
#[test]
fn a_signal_after_training_ended_lets_the_results_be_written_and_exits_as_the_signal_does() {
    use std::io::BufRead;
    let tmp = copy_example("iris");
    let dir = tmp.path();
    let spec = std::fs::read_to_string(dir.join("iris.kyn")).unwrap().replace("dense 32 relu", "dense 2048 relu");
    std::fs::write(dir.join("wide.kyn"), &spec).unwrap();
    // Patience 1 over 200 epochs: some epoch does not improve.
    let early = spec.replace("    seed = 7", "    seed = 7\n    early_stop = early_stop(patience=1)");
    std::fs::write(dir.join("early.kyn"), early).unwrap();
    for (args, after) in [
        (["train", "wide.kyn", "--epochs", "2", "--out", "run"], "epoch   2 "),
        (["train", "early.kyn", "--epochs", "200", "--out", "early"], "early stop at epoch"),
    ] {
        let mut child = spawn(&args, dir);
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let mut seen = String::new();
        for line in lines.by_ref() {
            let line = line.unwrap();
            seen += &line;
            seen.push('\n');
            if line.starts_with(after) {
                // SAFETY: signalling the child, which has not been waited for.
                unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
                break;
            }
        }
        for line in lines {
            seen += &line.unwrap();
            seen.push('\n');
        }
        let out = child.wait_with_output().unwrap();
        let t = seen + &String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(143), "{args:?}: {t}");
        assert!(t.contains("signal after training ended: writing its results, then stopping"), "{t}");
        assert!(!t.contains("stopping after this step"), "{t}");
        assert!(t.contains("stopped by SIGTERM after training ended; its results were written whole first"), "{t}");
        let p = kynml(&["predict", args[5], "iris.csv"], dir);
        assert!(p.status.success(), "{}", text(&p));
    }
}

/// A run started with Ctrl-C ignored (a script's `kynml train ... &`, which
/// the shell keeps out of the terminal's Ctrl-C) keeps ignoring it, as it
/// keeps an ignored SIGHUP under `nohup`; SIGTERM still stops it with its
/// checkpoint.
#[test]
fn a_run_that_inherits_ctrl_c_ignored_keeps_ignoring_it() {
    use std::io::BufRead;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    checkpointing_spec(dir, "spec.kyn", "run.ckpt", 400);
    let mut child = spawn_with_sigint(&["train", "spec.kyn", "--out", "run"], dir, libc::SIG_IGN);
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    assert!(lines.any(|l| l.unwrap().starts_with("epoch   2 ")), "the run trains");
    Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    // A handled Ctrl-C stops the run at its next step (milliseconds here).
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert!(child.try_wait().unwrap().is_none(), "the run ended on an ignored Ctrl-C");
    Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    let rest: String = lines.map_while(Result::ok).map(|l| l + "\n").collect();
    let out = child.wait_with_output().unwrap();
    let t = format!("{rest}{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(143), "{t}");
    assert!(t.contains("terminated (SIGTERM): stopping after this step") && !t.contains("Ctrl-C again"), "{t}");
    assert!(t.contains("checkpoint written to run.ckpt"), "{t}");
}

/// Two runs on one checkpoint path would rotate each other's copies and
/// resume each other's runs: the second is refused while the first goes on.
#[test]
fn a_checkpoint_path_another_run_writes_to_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    checkpointing_spec(dir, "spec.kyn", "run.ckpt", 400);
    let (first, _lines) = training_past_epoch_2(dir, "first");
    // Checkpoints are written in the background: on a busy machine the first
    // may land after epoch 2's line, and a run killed before it leaves none.
    let written = std::time::Instant::now();
    while !dir.join("run.ckpt").is_file() && written.elapsed().as_secs() < 60 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = kynml(&["train", "spec.kyn", "--out", "second"], dir);
    // check says so too, beside what train would do with the checkpoint.
    let checked = kynml(&["check", "spec.kyn"], dir);
    drop(first);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("another run that is still going writes its checkpoints to"), "{t}");
    let c = text(&checked);
    assert!(checked.status.success() && c.contains("note: another run that is still going writes its"), "{c}");
    assert!(!dir.join("second").exists(), "the refused run wrote its folder");
    // Once the first run is gone, its checkpoint is this run's to resume.
    let out = kynml(&["train", "spec.kyn", "--out", "second", "--epochs", "3"], dir);
    assert!(out.status.success() && text(&out).contains("resume: from"), "{}", text(&out));
    // A checkpoint is not a model to export or predict with: said as such.
    let out = kynml(&["export", "run.ckpt", "--format", "onnx", "--path", "m.onnx"], dir);
    assert!(out.status.code() == Some(2) && text(&out).contains("it is a training checkpoint"), "{}", text(&out));
}

/// A run folder that goes away in mid-run stops the run at once, with its
/// checkpoint and the way back, instead of training on to keep nothing.
#[test]
fn a_run_folder_that_cannot_be_written_stops_the_run_with_its_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    checkpointing_spec(dir, "spec.kyn", "run.ckpt", 400);
    let (mut child, lines) = training_past_epoch_2(dir, "run");
    // The run may write a file between the removal's unlink and its rmdir.
    for _ in 0..50 {
        if std::fs::remove_dir_all(dir.join("run")).is_ok() || !dir.join("run").exists() {
            break;
        }
    }
    let rest: Vec<String> = lines.map(Result::unwrap).collect();
    let out = child.0.take().unwrap().wait_with_output().unwrap();
    let t = format!("{}{}", rest.join("\n"), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(t.contains("cannot write to the run folder run: ") && t.contains("; stopping after this step"), "{t}");
    assert!(t.contains("the checkpoint of that point is in run.ckpt") && t.contains("--out run-2"), "{t}");
    // It stops at the next epoch's end (a few more on a slow machine), not after all 400.
    assert!(rest.iter().filter(|l| l.starts_with("epoch ")).count() < 100, "it trained on: {t}");
    kynml_core::checkpoint::load(&dir.join("run.ckpt")).unwrap().expect("the checkpoint");
}

/// `kynml check` says an export path's problem beside the data's, at once,
/// not the second only once the first is fixed.
#[test]
fn check_says_an_export_paths_problem_beside_the_datas() {
    let tmp = copy_example("iris");
    let dir = tmp.path();
    let spec = std::fs::read_to_string(dir.join("iris.kyn")).unwrap().replace("input 4", "input 5")
        + "\nexport:\n    format = burn\n    path = \"m.bin\"\n";
    std::fs::write(dir.join("iris.kyn"), spec).unwrap();
    let out = kynml(&["check", "iris.kyn"], dir);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("cannot export to") && t.contains("m.bin"), "{t}");
    assert!(t.contains("input 5"), "{t}");
}

/// A resume of a run that stopped early names the model it writes: the
/// best epoch's weights, not the last epoch's.
#[test]
fn a_resumed_early_stopped_run_says_its_model_is_the_best_epochs() {
    let tmp = copy_example("iris");
    let dir = tmp.path();
    let spec = std::fs::read_to_string(dir.join("iris.kyn")).unwrap().replace(
        "    seed = 7\n",
        "    seed = 7\n    early_stop = early_stop(patience=1)\n    checkpoint = checkpoint(every_n=1, path=\"es.ckpt\")\n",
    );
    std::fs::write(dir.join("iris.kyn"), spec).unwrap();
    let out = kynml(&["train", "iris.kyn", "--out", "first"], dir);
    assert!(out.status.success(), "{}", text(&out));
    let t = text(&out);
    let stopped = t.lines().find(|l| l.starts_with("early stop at epoch")).unwrap_or_else(|| panic!("{t}"));
    let best = stopped.rsplit("since epoch ").next().unwrap();
    let out = kynml(&["train", "iris.kyn", "--out", "second"], dir);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains(&format!("ran, and the model is epoch {best}'s weights, the best")), "{t}");
}

/// A run folder removed in the middle of a long epoch is noticed within
/// about a second, not at the epoch's end: the run stops at that step, and
/// its checkpoint holds the part of the epoch trained.
#[test]
fn a_run_folder_removed_mid_epoch_stops_the_run_at_the_next_step() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let spec = checkpointing_spec(dir, "spec.kyn", "run.ckpt", 1);
    // One epoch of 20,000 steps of two rows: tens of seconds, far more than
    // the second it takes to notice.
    let mut rng = kynml_core::rng::SplitMix64::new(7);
    let mut csv = String::from("a,b,c,d,y\n");
    for _ in 0..40_000 {
        let x: Vec<f64> = (0..4).map(|_| rng.uniform(-1.0, 1.0)).collect();
        csv += &format!("{:.4},{:.4},{:.4},{:.4},{:.4}\n", x[0], x[1], x[2], x[3], x[0] * x[1]);
    }
    std::fs::write(dir.join("data.csv"), csv).unwrap();
    let written = std::fs::read_to_string(&spec).unwrap().replace("batch = 50", "batch = 2");
    std::fs::write(&spec, written.replace(" target = \"y\"\n", " target = \"y\"\n split = 0.999\n")).unwrap();
    let child = spawn(&["train", "spec.kyn", "--out", "run"], dir);
    let mut child = KillOnDrop(Some(child));
    let started = std::time::Instant::now();
    // The TensorBoard file is the last the run makes before training.
    let logging = || {
        std::fs::read_dir(dir.join("run"))
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with("events.out.tfevents"))
    };
    while !logging() && started.elapsed().as_secs() < 120 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    for _ in 0..50 {
        if std::fs::remove_dir_all(dir.join("run")).is_ok() || !dir.join("run").exists() {
            break;
        }
    }
    let out = child.0.take().unwrap().wait_with_output().unwrap();
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(t.contains("cannot write to the run folder run: the folder is gone; stopping after this step"), "{t}");
    let ckpt = kynml_core::checkpoint::load(&dir.join("run.ckpt")).unwrap().expect("the checkpoint");
    let done = ckpt.state_value()["partial"]["steps"].as_u64();
    assert!(done.is_some_and(|s| s > 0 && s < 19_980), "stopped at {done:?} steps of 19,980: {t}");
}

/// A checkpoint whole to its checksum, of this model, optimizer and data,
/// whose tensors still do not load (one renamed, state that does not
/// decode) is refused as a checkpoint refused before the run is: exit 2,
/// its path named, nothing of the run kept, the checkpoint untouched. It
/// failed with exit 1 and left a run folder that the same command then
/// refused as not empty.
#[test]
fn a_checkpoint_whose_tensors_do_not_load_leaves_no_run_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    checkpointing_spec(dir, "spec.kyn", "run.ckpt", 1);
    let out = kynml(&["train", "spec.kyn", "--out", "first"], dir);
    assert!(out.status.success(), "{}", text(&out));
    let saved = kynml_core::checkpoint::load(&dir.join("run.ckpt")).unwrap().expect("the checkpoint");
    let hash = saved.model_hash.clone().expect("a model hash");
    let renamed = |t: &mut kynml_core::checkpoint::NamedTensor| t.name = t.name.replace("model.2.", "model.9.");
    let junk = |t: &mut kynml_core::checkpoint::NamedTensor| {
        *t = kynml_core::checkpoint::NamedTensor::bytes(t.name.clone(), vec![0xff; 7]);
    };
    type Edit<'a> = &'a dyn Fn(&mut kynml_core::checkpoint::NamedTensor);
    let edits: [(&str, &str, Edit); 2] =
        [("model.2.bias", "is missing", &renamed), ("optim.2.bias", "cannot be read", &junk)];
    for (tensor, said, edit) in edits {
        let mut ckpt = saved.clone();
        edit(ckpt.tensors.iter_mut().find(|t| t.name == tensor).unwrap());
        let bytes = kynml_core::checkpoint::format::encode(&ckpt, &hash);
        std::fs::write(dir.join("run.ckpt"), &bytes).unwrap();
        for _ in 0..2 {
            let out = kynml(&["train", "spec.kyn", "--epochs", "2", "--out", "second"], dir);
            let t = text(&out);
            assert_eq!(out.status.code(), Some(2), "{tensor}: {t}");
            assert!(
                t.contains("error: cannot resume from run.ckpt: checkpoint is incomplete") && t.contains(said),
                "{t}"
            );
            assert!(t.contains("--fresh") && !dir.join("second").exists(), "{tensor}: {t}");
            assert_eq!(std::fs::read(dir.join("run.ckpt")).unwrap(), bytes, "the checkpoint is left as it was");
        }
    }
    // A loop state whose epoch count is not its history's (2^64 - 1 wrapped
    // to an epoch 0, and trained six epochs numbered from it): refused.
    for epoch in [u64::MAX, 0, 2] {
        let mut state = saved.state_value();
        state["epoch"] = serde_json::json!(epoch);
        let ckpt = kynml_core::checkpoint::Checkpoint::new(saved.tensors.clone(), state);
        std::fs::write(dir.join("run.ckpt"), kynml_core::checkpoint::format::encode(&ckpt, &hash)).unwrap();
        let out = kynml(&["train", "spec.kyn", "--epochs", "3", "--out", "second"], dir);
        let t = text(&out);
        assert_eq!(out.status.code(), Some(2), "{epoch}: {t}");
        assert!(
            t.contains("its loop state does not hold together") && t.contains("its history records 1 (epoch 1)"),
            "{t}"
        );
        assert!(!dir.join("second").exists(), "{epoch}: {t}");
    }
}

/// On a terminal that gives its width but not its rows (a fresh pty after
/// `stty cols 50`), the epoch bar is drawn at that width: indicatif's own
/// target took such a terminal for an 80-column one, padded each redraw to
/// 80, and every redraw wrapped and left a stale line.
#[cfg(target_os = "linux")]
#[test]
fn the_epoch_bar_fits_a_terminal_that_gives_no_rows() {
    use std::io::Read;
    use std::os::fd::FromRawFd;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // 30,000 rows: epochs long enough for the bar to be drawn.
    let mut csv = String::from("a,b,y\n");
    for i in 0..30_000 {
        csv += &format!("{},{},{}\n", i % 7, i % 13, i % 5);
    }
    std::fs::write(dir.join("d.csv"), csv).unwrap();
    let spec = "dataset D:\n source = csv(\"d.csv\")\n target = \"y\"\nmodel M:\n input 2\n dense 256 relu\n \
                dense 256 relu\n dense 1 linear\ntrain:\n loss = mse\n epochs = 2\n batch = 32\n";
    std::fs::write(dir.join("s.kyn"), spec).unwrap();
    let (mut master, mut slave) = (0, 0);
    let size = libc::winsize { ws_row: 0, ws_col: 50, ws_xpixel: 0, ws_ypixel: 0 };
    // SAFETY: two out-parameters and a winsize read; no name buffer or termios.
    let made = unsafe { libc::openpty(&mut master, &mut slave, std::ptr::null_mut(), std::ptr::null(), &size) };
    assert_eq!(made, 0);
    // SAFETY: `slave` is an open descriptor owned from here by the child's stderr.
    let stderr = unsafe { std::process::Stdio::from_raw_fd(slave) };
    let mut child = Command::new(env!("CARGO_BIN_EXE_kynml"))
        .args(["train", "s.kyn", "--out", "run"])
        .current_dir(dir)
        .stdout(std::process::Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap();
    // SAFETY: `master` is an open descriptor owned from here by this file.
    let mut terminal = unsafe { std::fs::File::from_raw_fd(master) };
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        let mut chunk = [0u8; 4096];
        // The pty's reads end in EIO once the child has closed its side.
        while let Ok(n @ 1..) = terminal.read(&mut chunk) {
            out.extend_from_slice(&chunk[..n]);
        }
        out
    });
    assert!(child.wait().unwrap().success());
    let out = String::from_utf8_lossy(&reader.join().unwrap()).to_string();
    let mut frames = 0;
    for frame in out.split(['\r', '\n']) {
        let shown: String = {
            // The text a frame shows, its escapes (`\x1b[2K`, `\x1b[1A`) left out.
            let mut shown = String::new();
            let mut chars = frame.chars();
            while let Some(c) = chars.next() {
                if c == '\x1b' {
                    chars.by_ref().find(|c| c.is_ascii_alphabetic());
                } else {
                    shown.push(c);
                }
            }
            shown
        };
        if shown.starts_with("epoch 1/2 [") || shown.starts_with("epoch 2/2 [") {
            frames += 1;
            assert!(shown.chars().count() <= 50, "a frame wider than the terminal: {shown:?}");
        }
    }
    assert!(frames > 0, "no bar was drawn: {out}");
}

/// Standard output that cannot be written is an error, not a panic.
#[cfg(target_os = "linux")]
#[test]
fn output_to_a_full_device_is_an_error_not_a_panic() {
    let tmp = copy_example("iris");
    let full = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kynml"))
        .args(["check", "iris.kyn"])
        .current_dir(tmp.path())
        .stdout(full)
        .output()
        .unwrap();
    let t = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(t.contains("error: cannot write to standard output: No space left on device"), "{t}");
    assert!(!t.contains("panicked"), "{t}");
}

#[test]
fn every_malformed_csv_exits_2_and_writes_nothing() {
    let catalogue = Path::new(env!("CARGO_MANIFEST_DIR")).join("../kynml-core/tests/bad_csvs");
    let cases = std::fs::read_to_string(catalogue.join("cases.txt")).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    for line in cases.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
        let [name, target, kind] = line.split_whitespace().collect::<Vec<_>>()[..] else {
            panic!("bad case line {line}")
        };
        std::fs::copy(catalogue.join(format!("{name}.csv")), dir.join(format!("{name}.csv"))).unwrap();
        let loss = if kind == "class" { "cross_entropy" } else { "mse" };
        let spec = format!(
            "dataset D:\n source = csv(\"{name}.csv\")\n target = \"{target}\"\n\
             model M:\n input 2\n dense 1 linear\n\
             train:\n loss = {loss}\n epochs = 1\n checkpoint = checkpoint(every_n=1, path=\"ckpt/{name}.ckpt\")\n\
             export:\n format = onnx\n path = \"out/{name}.onnx\"\n"
        );
        std::fs::write(dir.join(format!("{name}.kyn")), spec).unwrap();
        let out = kynml(&["train", &format!("{name}.kyn"), "--out", &format!("run-{name}")], dir);
        let t = text(&out);
        assert_eq!(out.status.code(), Some(2), "{name}: {t}");
        assert!(t.contains(&format!("{name}.")), "{name}: the message names the file: {t}");
        assert!(!dir.join(format!("run-{name}")).exists(), "{name}: a run folder was written");
    }
    assert!(!dir.join("ckpt").exists() && !dir.join("out").exists(), "a checkpoint or export folder was made");
}

/// A full disk, simulated with a file-size limit: the checkpoint after
/// epoch 1 fits, every later (larger) one fails mid-write. Training goes
/// on, each failure is reported, and the path keeps epoch 1's checkpoint.
#[test]
fn a_failing_checkpoint_write_keeps_the_previous_checkpoint_and_is_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    checkpointing_spec(dir, "one.kyn", "one.ckpt", 1);
    assert!(kynml(&["train", "one.kyn", "--out", "one"], dir).status.success());
    let first = std::fs::read(dir.join("one.ckpt")).unwrap();

    checkpointing_spec(dir, "spec.kyn", "run.ckpt", 3);
    let limit = first.len() as libc::rlim_t;
    let out = kynml_limited(&["train", "spec.kyn", "--out", "run"], dir, limit);
    let t = text(&out);
    assert!(out.status.success(), "training itself goes on: {t}");
    assert_eq!(t.matches("warning: a checkpoint write failed").count(), 2, "epochs 2 and 3: {t}");
    let said = format!("File too large (os error 27) (this process may write no file larger than {}: `ulimit -f`)", {
        kynml_core::train::memory::bytes(first.len() as u64)
    });
    assert_eq!(t.matches(&said).count(), 2, "{said}: {t}");
    // Each epoch's snapshot was handed to the background writer: epoch 2's
    // failure, said at epoch 3's hand-off, does not hide epoch 3's.
    assert_eq!(t.matches("checkpoint: epoch ").count(), 3, "{t}");
    assert!(t.contains("a checkpoint already at the path is left whole"), "{t}");
    assert!(t.contains("2 checkpoint writes failed (see above); run.ckpt holds the last one that succeeded"), "{t}");
    assert!(std::fs::read(dir.join("run.ckpt")).unwrap() == first, "the path still holds epoch 1's checkpoint");
    let leftovers: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.to_string_lossy().contains(".tmp-"))
        .collect();
    assert!(leftovers.is_empty(), "failed writes removed their temporary files: {leftovers:?}");
    // No write whole: the closing warning does not speak of a checkpoint that is not there.
    // Half a checkpoint: the run folder's files (the weights alone) still fit.
    checkpointing_spec(dir, "none.kyn", "none.ckpt", 2);
    let t = text(&kynml_limited(&["train", "none.kyn", "--out", "none"], dir, limit / 2));
    assert!(t.contains("none was written whole, so there is no none.ckpt to resume from"), "{t}");
    assert!(!dir.join("none.ckpt").exists());
}

/// `--fresh` gives up the run before it (its checkpoint and older copies)
/// only once a checkpoint of its own is whole: saves that all fail (a
/// file-size limit here, a full disk) leave them, and the run says so.
#[test]
fn a_fresh_run_whose_saves_fail_leaves_the_run_it_started_over_from() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let spec = checkpointing_spec(dir, "spec.kyn", "run.ckpt", 2);
    let text_of = std::fs::read_to_string(&spec).unwrap().replace("async_save=true)", "async_save=true, keep=2)");
    std::fs::write(&spec, text_of).unwrap();
    assert!(kynml(&["train", "spec.kyn", "--out", "first"], dir).status.success());
    let read = |name: &str| std::fs::read(dir.join(name)).unwrap();
    let (then, older) = (read("run.ckpt"), read("run.ckpt.1"));
    let limit = (then.len() / 2) as libc::rlim_t;
    let out = kynml_limited(&["train", "spec.kyn", "--fresh", "--out", "second"], dir, limit);
    let t = text(&out);
    assert!(out.status.success(), "training itself goes on: {t}");
    assert!(t.contains("note: --fresh starts over") && t.contains("when this run writes its first checkpoint"), "{t}");
    assert_eq!(t.matches("warning: a checkpoint write failed").count(), 2, "{t}");
    assert!(
        t.contains(
            "none was written whole, so run.ckpt still holds the checkpoint of the run --fresh started over from"
        ),
        "{t}"
    );
    assert!(read("run.ckpt") == then && read("run.ckpt.1") == older, "the run given up is whole: {t}");
    // A resumed run whose saves all fail says the path holds what it resumed from.
    let t = text(&kynml_limited(&["train", "spec.kyn", "--epochs", "3", "--out", "limited"], dir, limit));
    assert!(t.contains("run.ckpt still holds the checkpoint this run resumed from (epoch 2)"), "{t}");
    assert!(read("run.ckpt") == then, "{t}");
    // And a run without --fresh resumes it, as said.
    let t = text(&kynml(&["train", "spec.kyn", "--epochs", "3", "--out", "third"], dir));
    assert!(t.contains("resumed after epoch 2;"), "{t}");
}

/// A file-size limit reached by the model itself, after checkpoints
/// that failed too: said as the limit it is (not the disk's free space),
/// with the checkpoint left from before and that epochs are trained
/// again from it (it holds epoch 1 of 3); exit 1, no temporary file left.
#[test]
fn a_file_size_limit_on_the_model_says_what_the_checkpoint_holds() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    checkpointing_spec(dir, "s.kyn", "s.ckpt", 3);
    assert!(kynml(&["train", "s.kyn", "--epochs", "1", "--out", "first"], dir).status.success());
    let out = kynml_limited(&["train", "s.kyn", "--out", "second"], dir, 100_000);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(t.contains("File too large") && t.contains("may write no file larger than 97.7 KiB: `ulimit -f`"), "{t}");
    assert!(t.contains("s.ckpt holds epoch 1 of the 3, the last checkpoint that could be written"), "{t}");
    assert!(t.contains("training epochs 2 to 3 again"), "{t}");
    assert!(!t.contains("nothing is trained again"), "{t}");
    let leftovers: Vec<_> = std::fs::read_dir(dir.join("second"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.to_string_lossy().contains(".tmp-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn an_export_path_holding_another_kind_of_file_is_refused_before_training() {
    let tmp = copy_example("iris");
    let dir = tmp.path();
    let spec = std::fs::read_to_string(dir.join("iris.kyn")).unwrap()
        + "\nexport:\n    format = safetensors\n    path = \"notes.safetensors\"\n";
    std::fs::write(dir.join("iris.kyn"), spec).unwrap();
    std::fs::write(dir.join("notes.json"), "{\"my\": \"notes\"}").unwrap();
    let out = kynml(&["check", "iris.kyn"], dir);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("notes.json exists and is not a KynML model sidecar"), "{}", text(&out));
    let out = kynml(&["train", "iris.kyn", "--out", "run"], dir);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("notes.json exists and is not a KynML model sidecar; refusing to overwrite it"), "{t}");
    assert!(!dir.join("run").exists() && std::fs::read_to_string(dir.join("notes.json")).unwrap().contains("my"));
    // An earlier export of the same kind is replaced.
    std::fs::remove_file(dir.join("notes.json")).unwrap();
    assert!(kynml(&["train", "iris.kyn", "--epochs", "2", "--out", "a"], dir).status.success());
    let out = kynml(&["train", "iris.kyn", "--epochs", "2", "--out", "b"], dir);
    assert!(out.status.success(), "{}", text(&out));
    let out = kynml(&["export", "b", "--format", "onnx", "--path", "notes.onnx"], dir);
    assert!(out.status.success(), "{}", text(&out));
    std::fs::copy(dir.join("notes.safetensors"), dir.join("notes.onnx")).unwrap();
    let out = kynml(&["export", "b", "--format", "onnx", "--path", "notes.onnx"], dir);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("is not an ONNX model"), "{}", text(&out));
    // A format under another format's extension would be refused when read back.
    let out = kynml(&["export", "b", "--format", "safetensors", "--path", "w.onnx"], dir);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("a safetensors export named .onnx would be taken for another format"));
    // A folder that cannot be made (a file stands in its place): refused
    // before training, from the spec as from the command.
    let spec =
        std::fs::read_to_string(dir.join("iris.kyn")).unwrap().replace("notes.safetensors", "iris.csv/m.safetensors");
    std::fs::write(dir.join("iris.kyn"), &spec).unwrap();
    let out = kynml(&["train", "iris.kyn", "--out", "c"], dir);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("cannot export as the spec says") && t.contains("iris.csv is a file"), "{t}");
    assert!(!dir.join("c").exists());
    // Located at the spec's `path = ...`, by `check` as by `train`.
    let line = spec.lines().position(|l| l.contains("iris.csv/m.safetensors")).unwrap() + 1;
    for command in ["check", "train"] {
        let out = kynml(&[command, "iris.kyn"], dir);
        let t = text(&out);
        assert_eq!(out.status.code(), Some(2), "{t}");
        assert!(t.contains(&format!("iris.kyn:{line}:")) && t.contains("the export path"), "{command}: {t}");
    }
    let spec = spec.replace("iris.csv/m.safetensors", "w.onnx");
    std::fs::write(dir.join("iris.kyn"), &spec).unwrap();
    let out = kynml(&["check", "iris.kyn"], dir);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(
        t.contains("cannot export to ")
            && t.contains("w.onnx: a safetensors export named .onnx would be taken for another format")
            && t.contains(&format!("iris.kyn:{line}:")),
        "{t}"
    );
    let out = kynml(&["export", "b", "--format", "onnx", "--path", "iris.csv/m.onnx"], dir);
    assert!(out.status.code() == Some(2) && text(&out).contains("iris.csv is a file"), "{}", text(&out));
    // A path ending in a separator names a folder: refused before training
    // (it was written through, then failed at the export), and by `export`.
    std::fs::write(dir.join("iris.kyn"), spec.replace("w.onnx", "models/").replace("safetensors", "onnx")).unwrap();
    for args in [&["check", "iris.kyn"][..], &["train", "iris.kyn", "--out", "d"]] {
        let out = kynml(args, dir);
        let (t, command) = (text(&out), args[0]);
        assert_eq!(out.status.code(), Some(2), "{command}: {t}");
        assert!(t.contains("a path ending in a separator names a folder; an export is a file"), "{command}: {t}");
        assert!(t.contains("name it, as in models/model.onnx"), "{command}: {t}");
    }
    assert!(!dir.join("d").exists() && !dir.join("models").exists());
    let out = kynml(&["export", "b", "--format", "safetensors", "--path", "newdir/"], dir);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("names a folder") && !dir.join("newdir").exists(), "{}", text(&out));
    // So is a folder that is there (it was "not an ONNX model KynML exported").
    std::fs::create_dir(dir.join("e")).unwrap();
    let out = kynml(&["export", "b", "--format", "onnx", "--path", "e"], dir);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("cannot export to e: it is a folder; an export is a file: name it, as in e/model.onnx"),
        "{}",
        text(&out)
    );
    assert_eq!(std::fs::read_dir(dir.join("e")).unwrap().count(), 0);
}

/// Values of 1e21 overflow a batchnorm's running variance to inf while the
/// loss stays finite: the run ends saying the model cannot be saved and
/// why, not that the disk failed (it said "could not be written ... free on
/// the disk", with a retry that met the same inf).
#[test]
fn a_model_that_overflowed_in_training_is_said_as_such() {
    let tmp = copy_example("iris");
    let dir = tmp.path();
    let csv = std::fs::read_to_string(dir.join("iris.csv")).unwrap();
    let mut lines = csv.lines();
    let mut huge = format!("{}\n", lines.next().unwrap());
    for line in lines {
        let cells: Vec<&str> = line.split(',').collect();
        let (features, label) = cells.split_at(4);
        huge += &format!("{},{}\n", features.iter().map(|v| format!("{v}e21")).collect::<Vec<_>>().join(","), label[0]);
    }
    std::fs::write(dir.join("huge.csv"), huge).unwrap();
    let spec = std::fs::read_to_string(dir.join("iris.kyn")).unwrap();
    let spec = spec.replace("iris.csv", "huge.csv").replace("normalize = true", "normalize = false").replacen(
        "dense 32 relu",
        "dense 32 relu\n    batchnorm",
        1,
    );
    std::fs::write(dir.join("huge.kyn"), spec).unwrap();
    let out = kynml(&["train", "huge.kyn", "--epochs", "1", "--out", "run"], dir);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(t.contains("error: training ended with a model that cannot be saved: layer 1 (batchnorm)"), "{t}");
    assert!(t.contains("holds inf") && t.contains("`normalize = true`"), "{t}");
    assert!(!t.contains("free on the disk") && !t.contains("could not be written"), "{t}");
    assert!(!dir.join("run/model.safetensors").exists());
}

/// A batch larger than the training rows is said: every step takes them all.
#[test]
fn a_batch_larger_than_the_training_rows_is_said() {
    let tmp = copy_example("iris");
    let spec = std::fs::read_to_string(tmp.path().join("iris.kyn")).unwrap().replace("batch = 16", "batch = 1000");
    std::fs::write(tmp.path().join("iris.kyn"), spec).unwrap();
    let out = kynml(&["train", "iris.kyn", "--epochs", "1", "--out", "run"], tmp.path());
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(
        t.contains("note: batch = 1000 is more than the 120 training rows: each epoch is one batch of them all"),
        "{t}"
    );
    let t = text(&kynml(&["check", "iris.kyn"], tmp.path()));
    assert!(t.contains("note: batch = 1000 is more than the 120 training rows"), "check: {t}");
}

/// A missing regression target is the data's problem, at its row; labels
/// under a regression loss are the loss's.
#[test]
fn a_missing_target_is_named_at_its_row_not_blamed_on_the_loss() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let spec = "dataset D:\n    source = csv(\"d.csv\")\n    target = \"y\"\n\
                model M:\n    input 2\n    dense 1 linear\n\
                train:\n    model = M\n    data = D\n    loss = mse\n    optimizer = sgd(lr=0.01)\n    epochs = 1\n";
    std::fs::write(dir.join("s.kyn"), spec).unwrap();
    let rows: String = (0..20).map(|i| format!("{i},{},{}\n", i % 3, i * 2)).collect();
    for (missing, found) in [("", "\"\""), ("NA", "\"NA\"")] {
        std::fs::write(dir.join("d.csv"), format!("a,b,y\n1,2,3\n4,5,{missing}\n{rows}")).unwrap();
        let out = kynml(&["check", "s.kyn"], dir);
        let t = text(&out);
        assert_eq!(out.status.code(), Some(2), "{t}");
        assert!(t.contains("d.csv:3: column 3 (`y`) is not a number: found") && t.contains(found), "{t}");
        assert!(t.contains("a missing target: fill it in or remove the row") && !t.contains("holds labels"), "{t}");
    }
    std::fs::write(dir.join("d.csv"), format!("a,b,y\n1,2,3\n4,5,tall\n{rows}")).unwrap();
    let t = text(&kynml(&["check", "s.kyn"], dir));
    assert!(t.contains("holds labels (line 3: \"tall\")") && t.contains("s.kyn:"), "{t}");
    // `eval` says a missing target as training does.
    std::fs::write(dir.join("d.csv"), format!("a,b,y\n{rows}")).unwrap();
    assert!(kynml(&["train", "s.kyn", "--device", "cpu", "--out", "run"], dir).status.success());
    std::fs::write(dir.join("e.csv"), "a,b,y\n1,2,3\n4,5,NA\n").unwrap();
    let out = kynml(&["eval", "run", "e.csv"], dir);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("e.csv:3: column 3 (`y`) is not a number: found \"NA\"; a missing target: fill it in"), "{t}");
}

/// A regression model's predictions are named apart from its target, so
/// that a file of true values under the target's name is never replaced as
/// if it held earlier predictions; an earlier predictions file is.
#[test]
fn a_file_of_true_values_is_not_taken_for_predictions() {
    let tmp = copy_example("diabetes");
    let dir = tmp.path();
    let out = kynml(&["train", "diabetes.kyn", "--device", "cpu", "--epochs", "1", "--out", "run"], dir);
    assert!(out.status.success(), "{}", text(&out));
    let truth = "progression\n151.0\n75.0\n";
    std::fs::write(dir.join("truth.csv"), truth).unwrap();
    let out = kynml(&["predict", "run", "diabetes.csv", "--output", "truth.csv"], dir);
    let t = text(&out);
    assert!(out.status.code() == Some(2) && t.contains("refusing to overwrite"), "{t}");
    assert_eq!(std::fs::read_to_string(dir.join("truth.csv")).unwrap(), truth);
    for _ in 0..2 {
        let out = kynml(&["predict", "run", "diabetes.csv", "--output", "p.csv"], dir);
        assert!(out.status.success(), "{}", text(&out));
    }
    let p = std::fs::read_to_string(dir.join("p.csv")).unwrap();
    assert_eq!(p.lines().next(), Some("progression_predicted"));
    assert_eq!(p.lines().count(), 1 + std::fs::read_to_string(dir.join("diabetes.csv")).unwrap().lines().count() - 1);
}

/// A sidecar edited by hand to a size of 0 (a stride, a pooling window, a
/// layer's width) is refused on load, as the spec's parser refuses it: it
/// divided by zero, or reached a Burn kernel that panics, in predict, eval
/// and export.
#[test]
fn a_sidecar_with_a_zero_size_is_refused_not_a_panic() {
    let tmp = copy_example("shapes");
    let dir = tmp.path();
    let out = kynml(&["train", "shapes.kyn", "--device", "cpu", "--epochs", "1", "--out", "run"], dir);
    assert!(out.status.success(), "{}", text(&out));
    let csv = std::fs::read_to_string(dir.join("shapes.csv")).unwrap();
    std::fs::write(dir.join("rows.csv"), csv.lines().take(3).collect::<Vec<_>>().join("\n") + "\n").unwrap();
    // The run folder's two weights files share its sidecar: both load, alike.
    let (folder, mpk) =
        (kynml(&["predict", "run", "rows.csv"], dir), kynml(&["predict", "run/model.mpk", "rows.csv"], dir));
    assert!(folder.status.success() && mpk.status.success(), "{}\n{}", text(&folder), text(&mpk));
    assert_eq!(folder.stdout, mpk.stdout);
    let sidecar = dir.join("run/model.json");
    let original: serde_json::Value = serde_json::from_slice(&std::fs::read(&sidecar).unwrap()).unwrap();
    // The layers: conv2d, batchnorm, maxpool, conv2d, global_avgpool, dense, dropout, dense.
    for (layer, key, says) in [
        (0, "stride", "conv2d with `stride` 0"),
        (2, "stride", "maxpool with `stride` 0"),
        (2, "kernel_size", "maxpool with `kernel_size` 0"),
        (5, "out_features", "dense with `out_features` 0"),
    ] {
        let mut edited = original.clone();
        assert_eq!(edited["layers"][layer]["kind"].as_str().map(|k| k.is_empty()), Some(false), "{edited}");
        edited["layers"][layer][key] = serde_json::json!(0);
        std::fs::write(&sidecar, edited.to_string()).unwrap();
        for command in [vec!["predict", "run", "rows.csv"], vec!["eval", "run", "rows.csv"]] {
            let out = kynml(&command, dir);
            let t = text(&out);
            assert_eq!(out.status.code(), Some(2), "{command:?} with {key} 0 on layer {layer}: {t}");
            assert!(t.contains(says) && t.contains("must be at least 1"), "{t}");
            assert!(!t.contains("panicked"), "{t}");
        }
    }
}

/// A burn and a safetensors export of one name would share `model.json`:
/// the second is refused, and weights read beside another model's sidecar
/// are an error, never Burn's panic.
#[test]
fn exports_sharing_a_sidecar_are_refused_and_mismatched_weights_are_an_error() {
    let tmp = copy_example("iris");
    let dir = tmp.path();
    assert!(kynml(&["train", "iris.kyn", "--device", "cpu", "--epochs", "2", "--out", "a"], dir).status.success());
    let spec = std::fs::read_to_string(dir.join("iris.kyn")).unwrap().replace("    dense 32 relu\n", "");
    std::fs::write(dir.join("small.kyn"), spec).unwrap();
    assert!(kynml(&["train", "small.kyn", "--device", "cpu", "--epochs", "2", "--out", "b"], dir).status.success());
    let out = kynml(&["export", "a", "--format", "burn", "--path", "out/model.mpk"], dir);
    assert!(out.status.success(), "{}", text(&out));
    // A burn and a safetensors export of one name at once (two processes),
    // ten times: both load after (each had dropped the other's entry in
    // the sidecar they share, in most tries).
    for _ in 0..10 {
        let _ = std::fs::remove_dir_all(dir.join("race"));
        std::fs::create_dir(dir.join("race")).unwrap();
        let exports: Vec<_> = [("safetensors", "race/m.safetensors"), ("burn", "race/m.mpk")]
            .iter()
            .map(|(format, path)| spawn(&["export", "a", "--format", format, "--path", path], dir))
            .collect();
        for export in exports {
            let out = export.wait_with_output().unwrap();
            assert!(out.status.success(), "{}", text(&out));
        }
        for model in ["race/m.safetensors", "race/m.mpk"] {
            let out = kynml(&["predict", model, "iris.csv", "--output", "race/p.csv"], dir);
            assert!(out.status.success(), "{model}: {}", text(&out));
        }
    }
    let before = std::fs::read(dir.join("out/model.json")).unwrap();
    let out = kynml(&["export", "b", "--format", "safetensors", "--path", "out/model.safetensors"], dir);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("its sidecar out/model.json describes `model.mpk`"), "{t}");
    assert!(t.contains("give this export another name") && !t.contains("not a model"), "{t}");
    assert_eq!(std::fs::read(dir.join("out/model.json")).unwrap(), before, "the sidecar is untouched");
    assert!(!dir.join("out/model.safetensors").exists());
    // A spec exporting there is refused by check and before training (it
    // was refused after the whole run), at its export path.
    let small = std::fs::read_to_string(dir.join("small.kyn")).unwrap();
    let exporting = format!("{small}\nexport:\n    format = safetensors\n    path = \"out/model.safetensors\"\n");
    std::fs::write(dir.join("exporting.kyn"), &exporting).unwrap();
    let line = exporting.lines().position(|l| l.contains("path = \"out/")).unwrap() + 1;
    for command in [vec!["check", "exporting.kyn"], vec!["train", "exporting.kyn", "--out", "c"]] {
        let out = kynml(&command, dir);
        let t = text(&out);
        assert_eq!(out.status.code(), Some(2), "{command:?}: {t}");
        assert!(t.contains(&format!("exporting.kyn:{line}:")) && t.contains("describes `model.mpk`"), "{t}");
        assert!(t.contains("nothing was trained or written"), "{t}");
    }
    assert!(!dir.join("c").exists(), "nothing trained");
    assert_eq!(std::fs::read(dir.join("out/model.json")).unwrap(), before, "the sidecar is untouched");
    std::fs::write(
        dir.join("rows.csv"),
        "sepal_length_cm,sepal_width_cm,petal_length_cm,petal_width_cm,species\n5.1,3.5,1.4,0.2,setosa\n",
    )
    .unwrap();
    assert!(kynml(&["predict", "out/model.mpk", "rows.csv"], dir).status.success());
    // What is not a model is named as the user wrote it.
    for (given, says) in [
        ("nosuchrun", "nosuchrun is not a model KynML can load: there is no such file or folder"),
        ("iris.kyn", "iris.kyn is not a model KynML can load: it is a spec; give the run folder"),
        ("out", "out is not a model KynML can load: the folder has no model.safetensors"),
    ] {
        let out = kynml(&["predict", given, "rows.csv"], dir);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        assert!(text(&out).contains(says), "{}", text(&out));
    }
    // Another model's sidecar beside the weights, as an older KynML (whose
    // sidecars did not name their weights) could leave it: an error.
    let out = kynml(&["export", "b", "--format", "safetensors", "--path", "other/model.safetensors"], dir);
    assert!(out.status.success(), "{}", text(&out));
    let mut other: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("other/model.json")).unwrap()).unwrap();
    other.as_object_mut().unwrap().remove("weights");
    std::fs::write(dir.join("out/model.json"), other.to_string()).unwrap();
    for command in ["predict", "eval"] {
        let out = kynml(&[command, "out/model.mpk", "rows.csv"], dir);
        let t = text(&out);
        assert_eq!(out.status.code(), Some(2), "{command}: {t}");
        assert!(t.contains("its weights do not fit the model that its sidecar"), "{t}");
        assert!(!t.contains("panicked"), "{t}");
    }
    // A sidecar that names its weights tells a replaced file at once.
    std::fs::copy(dir.join("other/model.json"), dir.join("out/model.json")).unwrap();
    let out = kynml(&["predict", "out/model.mpk", "rows.csv"], dir);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out).contains("was written for `model.safetensors`, and this file is none of them"),
        "{}",
        text(&out)
    );

    // So does a safetensors file: another run's weights of the same shapes,
    // or one flipped byte of a weight, would load and predict otherwise.
    std::fs::copy(dir.join("other/model.json"), dir.join("same-shapes.json")).unwrap();
    let whole = std::fs::read(dir.join("other/model.safetensors")).unwrap();
    let mut flipped = whole.clone();
    let last = flipped.len() - 1;
    flipped[last] ^= 0x01;
    std::fs::write(dir.join("same-shapes.safetensors"), &flipped).unwrap();
    let out = kynml(&["predict", "same-shapes.safetensors", "rows.csv"], dir);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("its size or checksum differs"), "{}", text(&out));
    std::fs::write(dir.join("same-shapes.safetensors"), &whole).unwrap();
    let out = kynml(&["predict", "same-shapes.safetensors", "rows.csv"], dir);
    assert!(out.status.success(), "{}", text(&out));
    // And a run folder whose weights another run of the same spec (another seed) replaced.
    let seeded = ["train", "iris.kyn", "--device", "cpu", "--epochs", "2", "--seed", "8", "--out", "c"];
    assert!(kynml(&seeded, dir).status.success());
    copy_dir(&dir.join("a"), &dir.join("swapped"));
    std::fs::copy(dir.join("c/model.safetensors"), dir.join("swapped/model.safetensors")).unwrap();
    let out = kynml(&["predict", "swapped", "rows.csv"], dir);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("changed or replaced since the export"), "{}", text(&out));
    // Another, smaller model's weights over them: whole, so not "cut short".
    let spec = std::fs::read_to_string(dir.join("iris.kyn")).unwrap();
    std::fs::write(dir.join("small.kyn"), spec.replace("dense 32 relu", "dense 8 relu")).unwrap();
    assert!(kynml(&["train", "small.kyn", "--device", "cpu", "--epochs", "1", "--out", "s"], dir).status.success());
    copy_dir(&dir.join("a"), &dir.join("smaller"));
    std::fs::copy(dir.join("s/model.safetensors"), dir.join("smaller/model.safetensors")).unwrap();
    let out = kynml(&["predict", "smaller", "rows.csv"], dir);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("another model's weights, whole"), "{}", text(&out));
    assert!(!text(&out).contains("cut short"), "{}", text(&out));

    // A damaged weights file is said to be damaged, with no advice meant for checkpoints.
    std::fs::write(dir.join("other/model.safetensors"), &whole[..whole.len() / 2]).unwrap();
    let out = kynml(&["predict", "other/model.safetensors", "rows.csv"], dir);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    // Said of the weights file, with the size its sidecar records (it was
    // said of the sidecar, as "damaged or belongs to another model").
    let recorded = whole.len();
    assert!(
        t.contains(&format!(
            "model.safetensors is not a model KynML can load: it is {} bytes where its sidecar",
            recorded / 2
        )) && t.contains(&format!("records {recorded}: cut short")),
        "{t}"
    );
    assert!(!t.contains("checkpoint"), "{t}");
    // Without the size in its sidecar (an older export), it still cannot be read.
    let mut sidecar: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("other/model.json")).unwrap()).unwrap();
    sidecar.as_object_mut().unwrap().remove("weights");
    std::fs::write(dir.join("other/model.json"), sidecar.to_string()).unwrap();
    let out = kynml(&["predict", "other/model.safetensors", "rows.csv"], dir);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("cannot be read as safetensors") && t.contains("damaged or cut short"), "{t}");
    // One model exported both ways under one name shares one sidecar: both load.
    for (format, file) in [("burn", "same/m.mpk"), ("safetensors", "same/m.safetensors"), ("burn", "same/m.mpk")] {
        let out = kynml(&["export", "a", "--format", format, "--path", file], dir);
        assert!(out.status.success(), "{}", text(&out));
    }
    for model in ["same/m.mpk", "same/m.safetensors"] {
        let out = kynml(&["predict", model, "rows.csv"], dir);
        assert!(out.status.success(), "{model}: {}", text(&out));
    }
    // A sidecar written before it said what `padding` is (its description
    // summed without it) still describes the same model: an export of the
    // other format beside it shares it.
    let mut old: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("same/m.json")).unwrap()).unwrap();
    let files = old["weights"]["files"].clone();
    for key in ["weights", "padding"] {
        old.as_object_mut().unwrap().remove(key);
    }
    let description = format!("{:08x}", kynml_core::checkpoint::format::crc32c(&serde_json::to_vec(&old).unwrap()));
    old["weights"] = serde_json::json!({"description": description, "files": files});
    std::fs::write(dir.join("same/m.json"), serde_json::to_vec_pretty(&old).unwrap()).unwrap();
    let out = kynml(&["export", "a", "--format", "burn", "--path", "same/m.mpk"], dir);
    assert!(out.status.success(), "{}", text(&out));
    // A pair copied under another name still loads.
    std::fs::create_dir_all(dir.join("deploy")).unwrap();
    for (from, to) in [("same/m.mpk", "deploy/iris.mpk"), ("same/m.json", "deploy/iris.json")] {
        std::fs::copy(dir.join(from), dir.join(to)).unwrap();
    }
    let out = kynml(&["predict", "deploy/iris.mpk", "rows.csv"], dir);
    assert!(out.status.success(), "{}", text(&out));
    // A sidecar from a newer KynML is refused, not half read.
    let side = std::fs::read_to_string(dir.join("deploy/iris.json")).unwrap();
    std::fs::write(dir.join("deploy/iris.json"), side.replace("\"format_version\": 1", "\"format_version\": 2"))
        .unwrap();
    let out = kynml(&["predict", "deploy/iris.mpk", "rows.csv"], dir);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("`format_version` is 2, newer than this KynML reads"), "{}", text(&out));
}

/// A safetensors pair copied under another name goes on loading after an
/// export of the same model in the other format beside it, and one of
/// another model there is refused (it replaced the sidecar, and the copy no
/// longer loaded). An export that cannot be written whole (a full disk, here
/// a file size limit) leaves the old pair as it was, and nothing beside it.
#[cfg(unix)]
#[test]
fn a_renamed_export_pair_is_kept_and_an_export_cut_short_changes_nothing() {
    let tmp = copy_example("iris");
    let dir = tmp.path();
    assert!(kynml(&["train", "iris.kyn", "--device", "cpu", "--epochs", "2", "--out", "a"], dir).status.success());
    // Another model, whose weights file (about 43 KiB) is larger than its sidecar.
    let spec = std::fs::read_to_string(dir.join("iris.kyn")).unwrap().replace("dense 32 relu", "dense 100 relu");
    std::fs::write(dir.join("big.kyn"), spec).unwrap();
    assert!(kynml(&["train", "big.kyn", "--device", "cpu", "--epochs", "2", "--out", "b"], dir).status.success());
    std::fs::write(
        dir.join("rows.csv"),
        "sepal_length_cm,sepal_width_cm,petal_length_cm,petal_width_cm\n5.1,3.5,1.4,0.2\n6.3,2.5,5.0,1.9\n",
    )
    .unwrap();
    let out = kynml(&["export", "a", "--format", "safetensors", "--path", "out/iris.safetensors"], dir);
    assert!(out.status.success(), "{}", text(&out));
    std::fs::create_dir(dir.join("ren")).unwrap();
    std::fs::copy(dir.join("out/iris.safetensors"), dir.join("ren/r.safetensors")).unwrap();
    std::fs::copy(dir.join("out/iris.json"), dir.join("ren/r.json")).unwrap();
    let predicted = kynml(&["predict", "ren/r.safetensors", "rows.csv"], dir);
    assert!(predicted.status.success(), "{}", text(&predicted));
    let sidecar = std::fs::read(dir.join("ren/r.json")).unwrap();
    let out = kynml(&["export", "b", "--format", "burn", "--path", "ren/r.mpk"], dir);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("its sidecar ren/r.json describes `r.safetensors`"), "{t}");
    assert_eq!(std::fs::read(dir.join("ren/r.json")).unwrap(), sidecar, "the sidecar is untouched");
    let out = kynml(&["export", "a", "--format", "burn", "--path", "ren/r.mpk"], dir);
    assert!(out.status.success(), "{}", text(&out));
    for model in ["ren/r.safetensors", "ren/r.mpk"] {
        let out = kynml(&["predict", model, "rows.csv"], dir);
        assert!(out.status.success(), "{model}: {}", text(&out));
        assert_eq!(out.stdout, predicted.stdout, "{model}");
    }
    // Files of at most 32 KiB: the sidecar fits, the other model's weights do not.
    let exe = env!("CARGO_BIN_EXE_kynml");
    let limited = Command::new("bash")
        .args(["-c", "ulimit -f 32; trap '' XFSZ; exec \"$0\" \"$@\""])
        .args([exe, "export", "b", "--format", "safetensors", "--path", "out/iris.safetensors"])
        .current_dir(dir)
        .output()
        .unwrap();
    let t = text(&limited);
    assert_eq!(limited.status.code(), Some(1), "{t}");
    assert!(t.contains("cannot write out/iris.safetensors") && !t.contains("panicked"), "{t}");
    let out = kynml(&["predict", "out/iris.safetensors", "rows.csv"], dir);
    assert!(out.status.success(), "the old pair loads: {}", text(&out));
    assert_eq!(out.stdout, predicted.stdout);
    let mut left: Vec<String> =
        std::fs::read_dir(dir.join("out")).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into()).collect();
    left.sort();
    assert_eq!(left, ["iris.json", "iris.safetensors"]);
}

/// A classification target with one class is the data's problem, said at
/// the loss: no "expected `dense 1`" that could never train either.
#[test]
fn a_target_with_one_class_is_refused_at_the_loss() {
    let tmp = copy_example("iris");
    let dir = tmp.path();
    let csv = std::fs::read_to_string(dir.join("iris.csv")).unwrap();
    let one: String = csv
        .lines()
        .filter(|l| !l.contains("versicolor") && !l.contains("virginica"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(dir.join("iris.csv"), one).unwrap();
    let out = kynml(&["train", "iris.kyn", "--out", "run"], dir);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("`cross_entropy` needs at least 2 classes but `species` in `iris.csv` has 1"), "{t}");
    assert!(t.contains("iris.kyn:") && t.contains("every row of `iris.csv` has the same `species`"), "{t}");
    assert!(!t.contains("expected `dense"), "no width to suggest: {t}");
    // The spec was read whole: what failed is its fit with the data.
    assert!(
        t.contains("error: the spec does not fit its data: 1 problem found") && !t.contains("could not read"),
        "{t}"
    );
    assert!(!dir.join("run").exists(), "nothing written");
}

/// One mistyped label (`Setosa` among 50 `setosa`) makes a fourth class:
/// the width error lists the classes' rows and names the rare one as a
/// likely typo, instead of only asking for a wider last layer; `bce` on a
/// binary target with one odd label likewise.
#[test]
fn a_class_of_one_row_is_named_as_a_likely_typo() {
    let tmp = copy_example("iris");
    let dir = tmp.path();
    let csv = std::fs::read_to_string(dir.join("iris.csv")).unwrap();
    std::fs::write(dir.join("iris.csv"), csv.replacen(",setosa", ",Setosa", 1)).unwrap();
    let out = kynml(&["check", "iris.kyn"], dir);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("(4 classes in `species`)"), "{t}");
    assert!(t.contains("rows of each class: `Setosa` 1, `setosa` 49, `versicolor` 50, `virginica` 50"), "{t}");
    assert!(t.contains("`Setosa` may be a mistyped label: correct it in the data; or give the last layer 4"), "{t}");
    // Binary: 0/1 labels and one `l`.
    let mut csv = String::from("a,b,y\n");
    for i in 0..60 {
        csv += &format!("{},{},{}\n", i % 7, i % 3, if i == 17 { "l".to_string() } else { (i % 2).to_string() });
    }
    std::fs::write(dir.join("b.csv"), csv).unwrap();
    let spec =
        "dataset D:\n    source = csv(\"b.csv\")\n    target = \"y\"\nmodel M:\n    input 2\n    dense 1 linear\n\
                train:\n    loss = bce\n    epochs = 1\n";
    std::fs::write(dir.join("b.kyn"), spec).unwrap();
    let t = text(&kynml(&["check", "b.kyn"], dir));
    assert!(t.contains("`bce` needs exactly 2 classes but `y` in `b.csv` has 3"), "{t}");
    assert!(t.contains("`0` 30, `1` 29, `l` 1; `l` may be a mistyped label"), "{t}");
    // A rare class the model could not do without (two classes, one of two
    // rows, and one output): no typo is suggested.
    let mut csv = String::from("a,b,y\n");
    for i in 0..60 {
        csv += &format!("{},{},{}\n", i % 7, i % 3, u8::from(i % 30 == 1));
    }
    std::fs::write(dir.join("b.csv"), csv).unwrap();
    std::fs::write(dir.join("b.kyn"), spec.replace("loss = bce", "loss = cross_entropy")).unwrap();
    let t = text(&kynml(&["check", "b.kyn"], dir));
    assert!(t.contains("has 1 output but `cross_entropy` needs one output per class (2 classes"), "{t}");
    assert!(!t.contains("mistyped"), "{t}");
}

/// A model that ends in a `residual:` block outputs its block's width: a
/// block of the wrong width is refused where it is written, before
/// anything runs, and one of the right width trains.
#[test]
fn a_residual_block_that_ends_the_model_is_checked_by_its_width() {
    let tmp = copy_example("iris");
    let dir = tmp.path();
    let spec = std::fs::read_to_string(dir.join("iris.kyn")).unwrap();
    let wide = spec.replace("    dense 3 linear\n", "    dense 3 relu\n    residual:\n        dense 8 relu\n");
    std::fs::write(dir.join("wide.kyn"), wide).unwrap();
    for args in [&["check", "wide.kyn"][..], &["train", "wide.kyn", "--device", "cpu", "--out", "run"]] {
        let out = kynml(args, dir);
        let command = args[0];
        let t = text(&out);
        assert_eq!(out.status.code(), Some(2), "{command}: {t}");
        assert!(t.contains("wide.kyn:13:") && t.contains("`residual:` block that ends the model"), "{t}");
        assert!(t.contains("has 8 outputs but `cross_entropy` needs one output per class (3 classes"), "{t}");
        assert!(!t.contains("panicked"), "{t}");
        assert!(!dir.join("run").exists(), "nothing written");
    }
    let right = spec.replace(
        "    dense 3 linear\n",
        "    dense 8 relu\n    residual:\n        dense 8 relu\n        dense 3 linear\n",
    );
    std::fs::write(dir.join("right.kyn"), right).unwrap();
    let out = kynml(&["train", "right.kyn", "--device", "cpu", "--epochs", "2", "--out", "run"], dir);
    assert!(out.status.success(), "{}", text(&out));
    assert!(dir.join("run/model.safetensors").exists());
}

/// A validation split of a few rows trains, and says its metrics are coarse.
#[test]
fn a_small_validation_split_is_said_to_give_coarse_metrics() {
    let tmp = copy_example("iris");
    let dir = tmp.path();
    let out = kynml(&["train", "iris.kyn", "--epochs", "1", "--out", "a"], dir);
    assert!(out.status.success() && text(&out).contains("120 train rows, 30 validation rows"), "{}", text(&out));
    assert!(!text(&out).contains("move in large steps"), "{}", text(&out));
    let spec = std::fs::read_to_string(dir.join("iris.kyn")).unwrap().replace("split = 0.8", "split = 0.995");
    std::fs::write(dir.join("iris.kyn"), spec).unwrap();
    let out = kynml(&["train", "iris.kyn", "--epochs", "1", "--out", "b"], dir);
    let t = text(&out);
    assert!(out.status.success() && t.contains("149 train rows, 1 validation row,"), "{t}");
    assert!(t.contains("note: with 1 validation row the validation loss and metrics move in large steps"), "{t}");
}

/// `batchnorm` on plain features with one row a step normalises every value
/// to 0 and learns nothing (it trained to a validation loss of 2720 on
/// iris): refused at the layer. After a convolution a channel still has its
/// positions to average, and that trains, unless its map is one position.
#[test]
fn batchnorm_with_one_value_a_channel_a_step_is_refused() {
    let tmp = copy_example("iris");
    let dir = tmp.path();
    let spec = std::fs::read_to_string(dir.join("iris.kyn")).unwrap();
    let one = spec.replacen("dense 32 relu", "dense 32 relu\n    batchnorm", 1).replace("batch = 16", "batch = 1");
    std::fs::write(dir.join("one.kyn"), &one).unwrap();
    let out = kynml(&["train", "one.kyn", "--out", "run"], dir);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("one.kyn:11:5") && t.contains("but a batch of 1 gives each step one row"), "{t}");
    assert!(!dir.join("run").exists(), "nothing written");
    // bench's `--batch 1` on a spec of `batch = 16` is not said to be the spec's.
    let batchnorm = spec.replacen("dense 32 relu", "dense 32 relu\n    batchnorm", 1);
    std::fs::write(dir.join("bn.kyn"), &batchnorm).unwrap();
    let out = kynml(&["bench", "bn.kyn", "--batch", "1", "--steps", "2", "--rounds", "1"], dir);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("bn.kyn:11:5") && t.contains("a batch of 1 gives each step one row"), "{t}");
    assert!(!t.contains("`batch = 1`"), "{t}");
    let two = one.replace("batch = 1", "batch = 2");
    std::fs::write(dir.join("two.kyn"), two).unwrap();
    let out = kynml(&["check", "two.kyn"], dir);
    assert!(out.status.success(), "{}", text(&out));
    // Data-parallel: each device normalises its own slice of the step.
    let out = kynml(&["train", "two.kyn", "--device", "cpu,cpu", "--out", "run"], dir);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("two.kyn:11:5") && t.contains("2 rows a step over 2 devices leave 1 row on a device"), "{t}");
    assert!(t.contains("raise the batch to 4 or more"), "{t}");
    assert!(!dir.join("run").exists(), "nothing written");
    let four = one.replace("batch = 1", "batch = 4");
    std::fs::write(dir.join("four.kyn"), four).unwrap();
    let out = kynml(&["train", "four.kyn", "--device", "cpu,cpu", "--epochs", "1", "--out", "run"], dir);
    assert!(out.status.success(), "{}", text(&out));
    let image = one.replace("input 4\n", "input 1x2x2\n    conv2d 2 1 relu\n").replacen(
        "dense 32 relu\n    batchnorm",
        "batchnorm\n    flatten\n    dense 32 relu",
        1,
    );
    std::fs::write(dir.join("image.kyn"), &image).unwrap();
    let out = kynml(&["train", "image.kyn", "--epochs", "1", "--out", "image"], dir);
    assert!(out.status.success(), "{}", text(&out));
    // A convolution's map of one position leaves a channel one value a row,
    // as plain features: its validation loss grew to thousands.
    let point = image.replace("conv2d 2 1 relu", "conv2d 2 2 relu");
    std::fs::write(dir.join("point.kyn"), point).unwrap();
    let out = kynml(&["train", "point.kyn", "--epochs", "1", "--out", "point"], dir);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("point.kyn:11:5") && t.contains("its input holds one position a channel"), "{t}");
    assert!(!dir.join("point").exists(), "nothing written");
}

#[test]
fn every_malformed_spec_exits_2_and_writes_nothing() {
    let catalogue = Path::new(env!("CARGO_MANIFEST_DIR")).join("../kynml-core/tests/bad_specs");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut specs: Vec<_> = std::fs::read_dir(&catalogue)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "kyn"))
        .collect();
    specs.sort();
    // And one that is not text at all.
    std::fs::write(dir.join("latin1.kyn"), b"dataset D:\n    source = csv(\"caf\xe9.csv\")\n").unwrap();
    let out = kynml(&["train", "latin1.kyn", "--out", "run"], dir);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).contains("latin1.kyn:2:22: the spec is not UTF-8 text"), "{}", text(&out));
    // UTF-16, as PowerShell's `>` writes it, with its byte-order mark or without: named as such.
    let utf16: Vec<u8> = "dataset D:\n".encode_utf16().flat_map(u16::to_le_bytes).collect();
    for (name, bytes) in [("bom.kyn", [&[0xFF, 0xFE][..], &utf16].concat()), ("bare.kyn", utf16.clone())] {
        std::fs::write(dir.join(name), bytes).unwrap();
        let out = kynml(&["check", name], dir);
        assert_eq!(out.status.code(), Some(2));
        assert!(text(&out).contains(&format!("{name}:1:1: the spec is UTF-16 text")), "{}", text(&out));
    }
    let utf32: Vec<u8> = "\u{feff}dataset D:\n".chars().flat_map(|c| (c as u32).to_le_bytes()).collect();
    std::fs::write(dir.join("u32.kyn"), utf32).unwrap();
    let out = kynml(&["check", "u32.kyn"], dir);
    assert!(text(&out).contains("u32.kyn:1:1: the spec is UTF-32 text; save it as UTF-8"), "{}", text(&out));
    // Nor one without end: read no further than any spec could be.
    for command in ["check", "train"] {
        let out = kynml(&[command, "/dev/zero"], dir);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        assert!(text(&out).contains("/dev/zero: more than 4 MiB, which no spec is"), "{}", text(&out));
    }
    for spec in &specs {
        let name = spec.file_name().unwrap().to_string_lossy().into_owned();
        std::fs::copy(spec, dir.join(&name)).unwrap();
        let out = kynml(&["train", &name, "--out", "run"], dir);
        let t = text(&out);
        assert_eq!(out.status.code(), Some(2), "{name}: {t}");
        assert!(t.contains(&format!("--> {name}:")) || t.contains(&format!("{name}:")), "{name}: not located: {t}");
    }
    let written: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.ends_with(".kyn"))
        .collect();
    assert!(written.is_empty(), "bad specs left files behind: {written:?}");
    assert!(specs.len() >= 50, "the catalogue holds {} specs", specs.len());
}

#[test]
fn a_loss_that_becomes_nan_stops_naming_epoch_and_step_and_keeps_the_last_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    checkpointing_spec(dir, "spec.kyn", "run.ckpt", 6);
    // Epoch 1 trains at lr 0.001; from epoch 2 the rate is 1e12 times that.
    let spec = std::fs::read_to_string(dir.join("spec.kyn")).unwrap() + " scheduler = exponential(gamma=1e12)\n";
    std::fs::write(dir.join("spec.kyn"), spec.replace("adam(lr=0.001)", "sgd(lr=0.001)")).unwrap();
    let out = kynml(&["train", "spec.kyn", "--out", "run"], dir);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(t.contains("training loss became") && t.contains("at epoch 2, step"), "{t}");
    let ckpt = kynml_core::checkpoint::load(&dir.join("run.ckpt")).unwrap().expect("epoch 1's checkpoint");
    assert_eq!(ckpt.state_value()["epoch"], 1, "the last good checkpoint is kept");
}

#[test]
fn an_unwritable_run_folder_is_refused_before_training() {
    let tmp = copy_example("iris");
    let dir = tmp.path();
    std::fs::write(dir.join("blocker"), "a file where a folder should be").unwrap();
    let out = kynml(&["train", "iris.kyn", "--out", "blocker/run"], dir);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("cannot create the run folder blocker/run: blocker is a file, not a folder"), "{t}");
    assert!(t.contains("move the file blocker away, or choose another --out"), "{t}");
    // Refused before what runs and the data are said (they were, then the refusal).
    assert!(!t.contains("what runs") && !t.contains("data: "), "{t}");
    // A file where the run folder should be is named and said to be a file,
    // with the command that runs into a new folder.
    let out = kynml(&["train", "iris.kyn", "--out", "blocker"], dir);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("cannot create the run folder blocker: it is a file, not a folder"), "{t}");
    assert!(t.contains("to run into a new folder: ") && t.contains("train iris.kyn --out blocker-2"), "{t}");
    assert!(!t.contains("what runs"), "{t}");
    // Written with a trailing `/` or `/.`, the same.
    for out in ["blocker/", "blocker/."] {
        let t = text(&kynml(&["train", "iris.kyn", "--out", out], dir));
        assert!(t.contains(&format!("cannot create the run folder {out}: it is a file, not a folder")), "{t}");
        assert!(!t.contains("what runs"), "{t}");
    }
    assert_eq!(std::fs::read_to_string(dir.join("blocker")).unwrap(), "a file where a folder should be");
    // So is the default folder's parent, `runs`, when it is a file.
    std::fs::write(dir.join("runs"), "x").unwrap();
    let out = kynml(&["train", "iris.kyn"], dir);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("cannot create a run folder in runs: it is a file, not a folder"), "{t}");
    assert!(t.contains("move the file `runs` away, or name the run folder with --out DIR") && !t.contains("what runs"));
}

fn kynml_env<V: AsRef<std::ffi::OsStr>>(args: &[&str], cwd: &Path, env: &[(&str, V)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kynml"));
    cmd.args(args).current_dir(cwd).env_remove("KYNML_CACHE");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

/// A spec in a folder whose name is not UTF-8 trains (its run folder wrote
/// nothing: "path contains invalid UTF-8 characters", naming the run folder).
#[test]
fn a_spec_in_a_folder_whose_name_is_not_utf8_trains() {
    use std::os::unix::ffi::OsStrExt;
    let tmp = copy_example("iris");
    let odd = tmp.path().join(std::ffi::OsStr::from_bytes(b"proj\xe9"));
    std::fs::create_dir(&odd).unwrap();
    for name in ["iris.kyn", "iris.csv"] {
        std::fs::rename(tmp.path().join(name), odd.join(name)).unwrap();
    }
    let out = Command::new(env!("CARGO_BIN_EXE_kynml"))
        .arg("train")
        .arg(odd.join("iris.kyn"))
        .args(["--epochs", "1", "--device", "cpu", "--out", "run"])
        .current_dir(tmp.path())
        .env_remove("KYNML_CACHE")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let info = std::fs::read_to_string(tmp.path().join("run/data.json")).unwrap();
    assert!(info.contains("proj\u{fffd}/iris.csv"), "{info}");
}

/// A run resumed on another kind of device (or in another precision) is
/// said to be so, as a changed batch is: it goes on from the same weights
/// in its own steps.
#[test]
fn a_resume_on_another_device_is_said() {
    let tmp = copy_example("iris");
    let spec = tmp.path().join("iris.kyn");
    let text_of = std::fs::read_to_string(&spec).unwrap();
    let text_of = text_of
        .replace("    seed = 7\n", "    seed = 7\n    checkpoint = checkpoint(every_n=1, path=\"ck/iris.ckpt\")\n");
    std::fs::write(&spec, text_of).unwrap();
    let out = kynml(&["train", "iris.kyn", "--device", "cpu", "--epochs", "1", "--out", "a"], tmp.path());
    assert!(out.status.success(), "{}", text(&out));
    let out = kynml(&["train", "iris.kyn", "--device", "cpu", "--epochs", "2", "--out", "b"], tmp.path());
    let t = text(&out);
    assert!(out.status.success() && t.contains("resumed after epoch 1;"), "{t}");
    assert!(!t.contains("the checkpoint trained with"), "the same device and precision: {t}");
    let out = kynml(&["train", "iris.kyn", "--device", "wgpu", "--epochs", "3", "--out", "c"], tmp.path());
    let t = text(&out);
    assert!(out.status.success() && t.contains("resumed after epoch 2;"), "{t}");
    assert!(t.contains("note: the checkpoint trained with cpu (this run: wgpu): the run goes on"), "{t}");
    // Its run folder says where each stretch of the chain ran.
    let t = text(&kynml(&["report", "c"], tmp.path()));
    let said = "c trained in parts, resumed on another device or in another precision: epochs 1-2 fp32 on cpu, \
                epoch 3 fp32 on wgpu";
    assert!(t.contains(said), "{t}");
    assert!(!text(&kynml(&["report", "b"], tmp.path())).contains("trained in parts"));
}

/// Dense products run alone by default, their cast, bias and activation
/// after them (Burn's fused matmul gave wrong products on lavapipe for a
/// one-unit layer after an odd width); `KYNML_MATMUL_EPILOGUE=fused` (an
/// experiment of the GPU bench) fuses them: Burn's fusion log shows a fused
/// matmul per product only then, the losses are the same, and "what runs"
/// says it, or says why it has no effect (the native CPU engine) or what an
/// unknown value does.
#[test]
fn dense_products_run_unfused_unless_fused_is_asked_and_train_alike() {
    let tmp = copy_example("iris");
    let run = |out: &str, epilogue: Option<&str>| {
        let args = ["train", "iris.kyn", "--device", "wgpu", "--epochs", "2", "--out", out];
        let mut env = vec![("BURN_FUSION_LOG", "full")];
        env.extend(epilogue.map(|e| ("KYNML_MATMUL_EPILOGUE", e)));
        let output = kynml_env(&args, tmp.path(), &env);
        let t = text(&output);
        assert!(output.status.success(), "{t}");
        let losses: Vec<f64> = std::fs::read_to_string(tmp.path().join(out).join("metrics.jsonl"))
            .unwrap()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()?.get("train_loss")?.as_f64())
            .collect();
        (t, losses)
    };
    let (fused, fused_losses) = run("fused", Some("fused"));
    let (separate, separate_losses) = run("separate", None);
    let fused_matmuls = |t: &str| t.matches("fused Matmul (").count();
    assert!(fused_matmuls(&fused) > 0, "the fused run fused no product:\n{fused}");
    assert_eq!(fused_matmuls(&separate), 0, "a product was fused by default:\n{separate}");
    assert!(!separate.contains("matmul epilogue"), "{separate}");
    assert!(fused.contains("matmul epilogue  fused (KYNML_MATMUL_EPILOGUE=fused"), "{fused}");
    assert_eq!((fused_losses.len(), separate_losses.len()), (2, 2));
    // The same arithmetic in other kernels, which may sum in another order:
    // alike to fp32 rounding (a wrong product is far off).
    for (f, s) in fused_losses.iter().zip(&separate_losses) {
        assert!((f - s).abs() <= 1e-4 * s.abs(), "fused {fused_losses:?} against separate {separate_losses:?}");
    }

    let args = ["train", "iris.kyn", "--device", "cpu", "--epochs", "1", "--out", "cpu"];
    let t = text(&kynml_env(&args, tmp.path(), &[("KYNML_MATMUL_EPILOGUE", "fused")]));
    assert!(t.contains("! matmul epilogue  no effect (KYNML_MATMUL_EPILOGUE=fused, but the native CPU engine"), "{t}");
    let args = ["train", "iris.kyn", "--device", "cpu", "--epochs", "1", "--out", "odd"];
    let t = text(&kynml_env(&args, tmp.path(), &[("KYNML_MATMUL_EPILOGUE", "apart")]));
    assert!(t.contains("! matmul epilogue  separate (KYNML_MATMUL_EPILOGUE=`apart` is neither"), "{t}");
}

#[test]
fn bench_times_rounds_after_a_warm_up_and_writes_its_figures() {
    let tmp = copy_example("deepnet");
    let out = kynml(
        &[
            "bench",
            "deepnet.kyn",
            "--device",
            "cpu",
            "--synthetic",
            "6000",
            "--steps",
            "6",
            "--rounds",
            "2",
            "--json",
            "b.json",
        ],
        tmp.path(),
    );
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("what runs:") && t.contains("6000 synthetic rows"), "{t}");
    // The users' spec exports (torchscript) and checkpoints: a bench does neither, and says neither.
    assert!(!t.contains("export ") && !t.contains("checkpoints "), "{t}");
    assert!(t.contains("warm-up round") && t.contains("round 2") && !t.contains("round 3"), "{t}");
    for figure in ["samples/s", "step time", "first step ends", "start-up", "host memory", "train loss"] {
        assert!(t.contains(figure), "no `{figure}` in:\n{t}");
    }
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(tmp.path().join("b.json")).unwrap()).unwrap();
    assert_eq!(json["rounds"].as_array().map(Vec::len), Some(2), "{json}");
    assert_eq!((json["steps"].as_u64(), json["batch"].as_u64()), (Some(6), Some(256)), "{json}");
    assert_eq!((json["engine"].as_str(), json["precision"].as_str()), (Some("native"), Some("fp32")), "{json}");
    let sps = json["samples_per_sec"].as_f64().unwrap();
    // The median of two rounds: their mean.
    let rounds: Vec<f64> = json["rounds"].as_array().unwrap().iter().filter_map(|r| r.as_f64()).collect();
    assert!(sps > 0.0 && (sps - (rounds[0] + rounds[1]) / 2.0).abs() <= 1e-9 * sps, "{json}");
    assert!(json["startup_secs"].as_f64().unwrap() >= json["first_step_secs"].as_f64().unwrap(), "{json}");
    // --json replaces an earlier bench's figures, and nothing else: refused
    // before the bench runs, the file untouched.
    let spec_text = std::fs::read(tmp.path().join("deepnet.kyn")).unwrap();
    let short = ["bench", "deepnet.kyn", "--device", "cpu", "--synthetic", "600", "--steps", "2", "--rounds", "1"];
    let out = kynml(&[&short[..], &["--json", "b.json"]].concat(), tmp.path());
    assert!(out.status.success(), "{}", text(&out));
    // `--json -` is standard output, which then holds the JSON alone (the
    // table and notes on standard error), as for eval and report; no file `-`.
    let out = kynml(&[&short[..], &["--json", "-"]].concat(), tmp.path());
    assert!(out.status.success(), "{}", text(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("standard output is the JSON alone");
    assert_eq!(json["steps"].as_u64(), Some(2), "{json}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("samples/s"), "{}", text(&out));
    assert!(!tmp.path().join("-").exists(), "no file named -");
    for (target, why) in [
        ("deepnet.kyn", "is not an earlier `kynml bench --json` file"),
        ("nowhere/b.json", "does not exist"),
        (".", "it is a folder"),
        ("c.json/", "ending in a separator names a folder"),
    ] {
        let out = kynml(&[&short[..], &["--json", target]].concat(), tmp.path());
        let t = text(&out);
        assert_eq!(out.status.code(), Some(2), "{target}: {t}");
        assert!(t.contains(why) && !t.contains("warm-up round"), "{target}: {t}");
    }
    assert_eq!(std::fs::read(tmp.path().join("deepnet.kyn")).unwrap(), spec_text);
    // A FIFO is written as the stream it is, never read first (that would
    // wait forever) nor replaced by a file; a link to an earlier bench's
    // file stays a link, its target rewritten.
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        let fifo = tmp.path().join("p.json");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
        assert!(made.success());
        let reader = std::thread::spawn(move || std::fs::read_to_string(fifo).unwrap());
        let out = kynml(&[&short[..], &["--json", "p.json"]].concat(), tmp.path());
        assert!(out.status.success(), "{}", text(&out));
        let got = reader.join().unwrap();
        assert!(serde_json::from_str::<serde_json::Value>(&got).is_ok_and(|v| v["samples_per_sec"].is_f64()), "{got}");
        assert!(std::fs::symlink_metadata(tmp.path().join("p.json")).unwrap().file_type().is_fifo());
        std::os::unix::fs::symlink("b.json", tmp.path().join("link.json")).unwrap();
        let before = std::fs::read(tmp.path().join("b.json")).unwrap();
        let out = kynml(&[&short[..], &["--json", "link.json"]].concat(), tmp.path());
        assert!(out.status.success(), "{}", text(&out));
        assert!(std::fs::symlink_metadata(tmp.path().join("link.json")).unwrap().file_type().is_symlink());
        assert_ne!(std::fs::read(tmp.path().join("b.json")).unwrap(), before, "the link's target is rewritten");
        // A link to a file not there yet: the file is made, the link kept.
        std::os::unix::fs::symlink("later.json", tmp.path().join("dangling.json")).unwrap();
        let out = kynml(&[&short[..], &["--json", "dangling.json"]].concat(), tmp.path());
        assert!(out.status.success(), "{}", text(&out));
        assert!(std::fs::symlink_metadata(tmp.path().join("dangling.json")).unwrap().file_type().is_symlink());
        assert!(std::fs::read_to_string(tmp.path().join("later.json")).unwrap().contains("samples_per_sec"));
    }
    // The spec's own data, and a precision this device cannot run, said so.
    let tmp = copy_example("iris");
    let out = kynml(
        &[
            "bench",
            "iris.kyn",
            "--device",
            "cpu",
            "--precision",
            "tf32",
            "--autotune",
            "fast",
            "--steps",
            "3",
            "--rounds",
            "1",
        ],
        tmp.path(),
    );
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(
        t.contains("! precision") && t.contains("tf32 requested") && t.contains("iris.csv (120 training rows)"),
        "{t}"
    );
    assert!(t.contains("! autotune") && t.contains("no effect (autotune = fast, but the CPU"), "{t}");
    // Synthetic rows shaped for a spec whose head cannot fit them: located, like real data.
    let spec =
        std::fs::read_to_string(tmp.path().join("iris.kyn")).unwrap().replace("dense 3 linear", "dense 1 linear");
    std::fs::write(tmp.path().join("one.kyn"), spec).unwrap();
    let out = kynml(&["bench", "one.kyn", "--device", "cpu", "--synthetic", "100"], tmp.path());
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("one.kyn:") && text(&out).contains("the last layer has 1 output"), "{}", text(&out));
    // As many steps as asked, the last one short: said as such.
    let out = kynml(&["bench", "iris.kyn", "--device", "cpu", "--steps", "8", "--rounds", "1"], tmp.path());
    assert!(text(&out).contains("120 rows: each round's last step takes 8 of 16 rows"), "{}", text(&out));
    // One row a step, said in the singular.
    let out =
        kynml(&["bench", "iris.kyn", "--device", "cpu", "--batch", "1", "--steps", "4", "--rounds", "1"], tmp.path());
    assert!(text(&out).contains(" 1 row a step"), "{}", text(&out));
    let out = kynml(&["bench", "iris.kyn", "--precision", "fp8"], tmp.path());
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).contains("expected fp32, tf32, bf16 or fp16"), "{}", text(&out));
    let out = kynml(&["bench", "iris.kyn", "--autotune", "max"], tmp.path());
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).contains("expected off, fast, balanced or full"), "{}", text(&out));
    // More synthetic rows than memory holds: refused before they are made (it was an abort).
    for rows in ["100000000000", "18446744073709551615"] {
        let out = kynml(&["bench", "iris.kyn", "--device", "cpu", "--synthetic", rows], tmp.path());
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        assert!(text(&out).contains("rows or fewer fit") && !text(&out).contains("panicked"), "{}", text(&out));
    }
    // A model that embeds categorical columns gets synthetic categories (it was refused).
    let rentals = copy_example("rentals");
    let args = ["bench", "rentals.kyn", "--device", "cpu", "--synthetic", "600", "--steps", "2", "--rounds", "1"];
    let out = kynml(&args, rentals.path());
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("600 synthetic rows") && text(&out).contains("samples/s"), "{}", text(&out));
}

/// `--fused` benches the optimizer's fused update and says so; RMSprop,
/// which has none, is refused with exit 2. Under fp16 loss scaling "what
/// runs" says whether an overflow is skipped on the device or read back.
#[test]
fn fused_updates_and_the_overflow_check_say_where_they_run() {
    let tmp = copy_example("iris");
    let args = ["bench", "iris.kyn", "--device", "wgpu", "--precision", "fp16", "--steps", "3", "--rounds", "1"];
    let out = kynml(&[&args[..], &["--fused", "--json", "f.json"]].concat(), tmp.path());
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("fused         on: one adam update over all the parameters at once"), "{t}");
    assert!(t.contains("an overflowed step is skipped on the device, with nothing read back"), "{t}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(tmp.path().join("f.json")).unwrap()).unwrap();
    assert_eq!(json["fused"].as_bool(), Some(true), "{json}");
    // The native CPU engine has no fused update, autotune or Burn epilogue:
    // the figures say what ran, as "what runs" marks it, not what was asked.
    let cpu =
        ["bench", "iris.kyn", "--device", "cpu", "--steps", "3", "--rounds", "1", "--fused", "--autotune", "full"];
    let out = kynml_env(&[&cpu[..], &["--json", "c.json"]].concat(), tmp.path(), &[("KYNML_MATMUL_EPILOGUE", "fused")]);
    let t = text(&out);
    assert!(out.status.success() && t.contains("not applied (the native CPU engine updates each parameter"), "{t}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(tmp.path().join("c.json")).unwrap()).unwrap();
    assert_eq!(json["fused"].as_bool(), Some(false), "{json}");
    assert!(json["autotune"].is_null() && json["matmul_epilogue"].is_null(), "{json}");
    let spec =
        std::fs::read_to_string(tmp.path().join("iris.kyn")).unwrap().replace("adam(lr=0.01)", "rmsprop(lr=0.01)");
    std::fs::write(tmp.path().join("r.kyn"), spec).unwrap();
    let out = kynml(
        &["bench", "r.kyn", "--device", "wgpu", "--precision", "fp16", "--steps", "3", "--rounds", "1"],
        tmp.path(),
    );
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(
        t.contains("each step's overflow check is read back from the device (rmsprop runs on Burn's own optimizer"),
        "{t}"
    );
    let out = kynml(&["bench", "r.kyn", "--device", "cpu", "--fused"], tmp.path());
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("--fused: `rmsprop` has no fused update"), "{}", text(&out));
}

/// `warmup --synthetic ROWS` and `check --synthetic ROWS` need no data file, as `bench --synthetic`
/// (a spec whose data is made by the bench, on a node with the binary alone).
#[test]
fn warmup_takes_synthetic_rows_instead_of_the_data_file() {
    let tmp = copy_example("iris");
    // A checkpoint of the real data, which made-up rows cannot judge: `check
    // --synthetic` said train "would not resume" from it (and --fresh).
    let spec = std::fs::read_to_string(tmp.path().join("iris.kyn")).unwrap();
    let spec = spec.replace("train:\n", "train:\n    checkpoint = checkpoint(every_n=1, path=\"ck/iris.ckpt\")\n");
    std::fs::write(tmp.path().join("iris.kyn"), spec).unwrap();
    let out = kynml(&["train", "iris.kyn", "--epochs", "1", "--device", "cpu", "--out", "r"], tmp.path());
    assert!(out.status.success(), "{}", text(&out));
    let out = kynml(&["check", "iris.kyn", "--synthetic", "150"], tmp.path());
    let t = text(&out);
    assert!(out.status.success() && !t.contains("would not resume"), "{t}");
    assert!(t.contains("checkpoint ck/iris.ckpt is there; whether `kynml train` resumes from it is judged"), "{t}");
    // What made-up rows can judge is still said: a checkpoint of another model.
    let spec = std::fs::read_to_string(tmp.path().join("iris.kyn")).unwrap();
    std::fs::write(
        tmp.path().join("other.kyn"),
        spec.replace("dense 32 relu\n    dense 3", "dense 16 relu\n    dense 3"),
    )
    .unwrap();
    let t = text(&kynml(&["check", "other.kyn", "--synthetic", "150"], tmp.path()));
    assert!(t.contains("would not resume from ck/iris.ckpt") && !t.contains("is there;"), "{t}");
    // Without --synthetic, the verdict on the real data.
    let t = text(&kynml(&["check", "iris.kyn"], tmp.path()));
    assert!(t.contains("`kynml train` resumes from it"), "{t}");
    std::fs::remove_file(tmp.path().join("iris.csv")).unwrap();
    // Nothing to warm up on the CPU, but the spec and its data are checked
    // as train checks them: without the data file (or --synthetic) refused.
    let out = kynml(&["warmup", "iris.kyn", "--device", "cpu", "--synthetic", "150"], tmp.path());
    let t = text(&out);
    assert!(out.status.success() && t.contains("nothing to warm up"), "{t}");
    // Made-up rows say nothing of the data file (it said "its data are fine").
    assert!(t.contains("the spec is fine; its data file was not read (--synthetic)") && !t.contains("are fine"), "{t}");
    let out = kynml(&["warmup", "iris.kyn", "--device", "cpu"], tmp.path());
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("iris.csv"), "{}", text(&out));
    // A data-parallel run's devices, as train takes them.
    let out = kynml(&["warmup", "iris.kyn", "--device", "cpu,cpu", "--synthetic", "150"], tmp.path());
    assert!(out.status.success() && text(&out).contains("nothing to warm up"), "{}", text(&out));
    // On a GPU backend the data is needed: refused without it.
    let out = kynml(&["warmup", "iris.kyn", "--device", "wgpu"], tmp.path());
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    // ... naming the flag that makes rows without it.
    assert!(text(&out).contains("does not exist") && text(&out).contains("`kynml warmup`"), "{}", text(&out));
    // And `check`, which then prints the model of a spec whose data the bench makes.
    let out = kynml(&["check", "iris.kyn", "--synthetic", "150"], tmp.path());
    let t = text(&out);
    assert!(
        out.status.success() && t.contains("data made up (seed 7): 150 rows (") && t.contains("model IrisNet"),
        "{t}"
    );
}

#[test]
fn warmup_fills_the_kernel_cache_the_next_run_reuses_and_a_damaged_one_is_cleared() {
    // Needs lavapipe (scripts/test.sh installs it): the cache is CubeCL's,
    // so only a CubeCL device fills it.
    let tmp = copy_example("iris");
    let out = kynml_env::<&str>(&["warmup", "iris.kyn", "--device", "wgpu", "--cache", "cache"], tmp.path(), &[]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("kernel cache") && t.contains("empty: this run tunes"), "{t}");
    assert!(t.contains("warm-up: 2 steps (every batch shape of an epoch)"), "{t}");
    // The long first step is said before it starts.
    assert!(t.contains("warm-up: tuning and compiling GPU kernels (minutes on a first run) ..."), "{t}");
    // One folder per device model, below one per CubeCL version.
    let models: Vec<PathBuf> =
        std::fs::read_dir(tmp.path().join("cache/cubecl-0.10.0")).unwrap().map(|e| e.unwrap().path()).collect();
    assert!(models.len() == 1 && models[0].file_name().unwrap().to_string_lossy().starts_with("vulkan-"), "{models:?}");
    let root = &models[0];
    let names: Vec<String> = walk(root).iter().map(|p| p.strip_prefix(root).unwrap().display().to_string()).collect();
    let tuned = names.iter().find(|n| n.starts_with("autotune/0.10.0/") && n.ends_with(".json.log"));
    assert!(tuned.is_some(), "{names:?}");
    assert!(names.iter().any(|n| n.ends_with("spirv/chunk0.cbor")), "compiled SPIR-V kept: {names:?}");
    assert!(names.iter().any(|n| n == "manifest.json"), "{names:?}");

    let train = |extra: &[&str], env: &[(&str, &Path)]| {
        let mut args = vec!["train", "iris.kyn", "--device", "wgpu", "--epochs", "1"];
        args.extend_from_slice(extra);
        kynml_env(&args, tmp.path(), env)
    };
    let out = train(&["--out", "r1"], &[("KYNML_CACHE", &tmp.path().join("cache"))]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(
        t.contains("autotune results and compiled kernels are reused; from KYNML_CACHE") && !t.contains("note:"),
        "{t}"
    );
    // No terminal here: what the first steps wait for is a plain line, once.
    let loading = "epoch 1/1: loading GPU kernels, and tuning and compiling those the cache lacks (minutes when it lacks many) ...";
    assert_eq!(t.matches(loading).count(), 1, "{t}");

    // One byte changed after it was written: cleared, noted, and the run goes on.
    let tuned = root.join(tuned.unwrap());
    let mut bytes = std::fs::read(&tuned).unwrap();
    bytes[2] ^= 0x20;
    std::fs::write(&tuned, bytes).unwrap();
    // `check` says what a run would do with it (it said the damaged cache
    // would be reused), and leaves it for the run to clear.
    let spec = std::fs::read_to_string(tmp.path().join("iris.kyn")).unwrap();
    std::fs::write(tmp.path().join("wgpu.kyn"), spec.replace("device = auto", "device = wgpu")).unwrap();
    let out = kynml_env::<&str>(&["check", "wgpu.kyn", "--cache", "cache"], tmp.path(), &[]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("changed since it was written; a run clears it and starts afresh"), "{t}");
    assert!(t.contains("empty: this run tunes") && !t.contains("are reused"), "{t}");
    let out = train(&["--cache", "cache", "--out", "r2"], &[]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(
        t.contains("note: the kernel cache") && t.contains("changed since it was written") && t.contains("cleared"),
        "{t}"
    );
    assert!(t.contains("empty: this run tunes"), "{t}");
    assert!(t.contains("epoch 1/1: tuning and compiling GPU kernels (minutes on a first run) ..."), "{t}");

    // A cache path that is a file: the cache is off, said in what runs; a
    // warm-up, which would keep nothing, is refused before it starts.
    std::fs::write(tmp.path().join("not-a-folder"), b"").unwrap();
    let out =
        kynml_env::<&str>(&["warmup", "iris.kyn", "--device", "wgpu", "--cache", "not-a-folder"], tmp.path(), &[]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("! kernel cache  off (cannot create") && t.contains("would keep nothing"), "{t}");
    let out = kynml_env::<&str>(&["warmup", "iris.kyn", "--device", "cpu"], tmp.path(), &[]);
    assert!(out.status.success() && text(&out).contains("nothing to warm up"), "{}", text(&out));
}

/// `predict` and `eval` on a GPU backend keep what they tuned and compiled
/// for the next run, as `train` does (unsealed, every next run cleared the
/// compiled kernels as a crashed run's), and say an unusable cache and the
/// wait for the kernels it lacks.
#[test]
fn predict_and_eval_on_wgpu_keep_their_kernels_and_say_an_unusable_cache() {
    let tmp = copy_example("iris");
    let out = kynml(&["train", "iris.kyn", "--device", "cpu", "--epochs", "1", "--out", "run"], tmp.path());
    assert!(out.status.success(), "{}", text(&out));
    let predict = |cache: &str| {
        let args = ["predict", "run", "iris.csv", "--device", "wgpu", "--cache", cache, "--output", "p.csv"];
        kynml_env::<&str>(&args, tmp.path(), &[])
    };
    let out = predict("cache");
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("note: tuning and compiling GPU kernels (minutes on a first run)"), "{t}");
    let sealed = walk(&tmp.path().join("cache")).iter().any(|p| p.file_name().is_some_and(|n| n == "manifest.json"));
    assert!(sealed, "predict left the kernel cache unsealed: {t}");
    let args = ["eval", "run", "iris.csv", "--device", "wgpu", "--cache", "cache"];
    let out = kynml_env::<&str>(&args, tmp.path(), &[]);
    let t = text(&out);
    assert!(out.status.success() && t.contains("accuracy"), "{t}");
    assert!(!t.contains("never sealed") && !t.contains("note:"), "{t}");
    std::fs::write(tmp.path().join("not-a-folder"), b"").unwrap();
    let out = predict("not-a-folder");
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("note: kernel cache off (cannot create"), "{t}");
}

/// Validation during training runs forward passes of the steps' rows, the
/// last one filled up: a GPU backend tunes and compiles its kernels for each
/// size of product it meets (a kernel search of minutes on a first run on
/// an H100), and passes of validation's own size would add one for every
/// layer. The kernel cache lists each product CubeCL tuned, its row count
/// rounded up to a power of two: iris trains on steps of 16 rows and a last
/// one of 8, and validates 30 rows, which would come out as 32. Training
/// alone on wgpu, the first layer's product (4 inputs, 32 units) is tuned
/// for the steps' row counts and no other.
#[test]
fn validation_tunes_no_product_size_the_steps_do_not_take() {
    let tmp = copy_example("iris");
    let out = kynml_env::<&str>(
        &["train", "iris.kyn", "--device", "wgpu", "--epochs", "1", "--cache", "cache", "--out", "r"],
        tmp.path(),
        &[],
    );
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    let data: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(tmp.path().join("r/data.json")).unwrap()).unwrap();
    assert_eq!((data["train_rows"].as_u64(), data["valid_rows"].as_u64()), (Some(120), Some(30)), "{data}");
    let log = walk(&tmp.path().join("cache"))
        .into_iter()
        .find(|p| p.file_name().is_some_and(|n| n == "burn_cubecl-kernel-matmul-tune-base.json.log"))
        .expect("CubeCL's matmul autotune log in the kernel cache");
    let mut rows = std::collections::BTreeSet::new();
    for line in std::fs::read_to_string(&log).unwrap().lines().filter(|l| !l.trim().is_empty()) {
        let entry: serde_json::Value = serde_json::from_str(line).unwrap();
        let d = &entry["key"]["key"]["definition"];
        let plain = d["matrix_layout_lhs"] == "Contiguous" && d["matrix_layout_rhs"] == "Contiguous";
        if plain && d["k"] == 4 && d["n"] == 32 {
            rows.insert(d["m"].as_u64().unwrap());
        }
    }
    assert_eq!(rows, [8, 16].into_iter().collect(), "the first layer's products, by rows, in {}", log.display());
}

/// `deterministic = true` on wgpu across processes: a first run that tunes
/// its kernels into an empty cache and a second that reads them back end
/// with the same model, byte for byte; with the cache off, "what runs" says
/// that only the run itself is deterministic.
#[test]
fn deterministic_runs_in_two_processes_write_the_same_model() {
    let tmp = copy_example("iris");
    let spec = std::fs::read_to_string(tmp.path().join("iris.kyn"))
        .unwrap()
        .replace("    dense 32 relu\n    dense 3", "    dense 32 relu\n    batchnorm\n    dense 3")
        .replace("    seed = 7", "    seed = 7\n    deterministic = true\n    clip_grad_norm = 0.5")
        + "\nexport:\n    format = safetensors\n    path = \"m.safetensors\"\n";
    std::fs::write(tmp.path().join("d.kyn"), spec).unwrap();
    let train = |out: &str, cache: &str| {
        kynml(&["train", "d.kyn", "--device", "wgpu", "--epochs", "3", "--cache", cache, "--out", out], tmp.path())
    };
    let losses = |run: &str| -> Vec<(String, String)> {
        let lines = std::fs::read_to_string(tmp.path().join(run).join("metrics.jsonl")).unwrap();
        lines
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                (v["train_loss"].to_string(), v["val_loss"].to_string())
            })
            .collect()
    };
    // The exported weights (`model.mpk` also holds Burn's parameter ids,
    // drawn afresh by each process).
    let mut weights = Vec::new();
    for (run, first) in [("r1", true), ("r2", false)] {
        let out = train(run, "cache");
        let t = text(&out);
        assert!(out.status.success(), "{t}");
        assert!(t.contains("empty: this run tunes") == first, "{t}");
        assert!(t.contains("deterministic  yes: each kernel is chosen once") && !t.contains("! deterministic"), "{t}");
        weights.push(std::fs::read(tmp.path().join("m.safetensors")).unwrap());
    }
    assert_eq!(losses("r1"), losses("r2"));
    assert_eq!(losses("r1").len(), 3);
    assert!(weights[0] == weights[1], "the two runs' weights differ");
    std::fs::write(tmp.path().join("not-a-folder"), b"").unwrap();
    let out = train("r3", "not-a-folder");
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("! deterministic") && t.contains("within this run only: the kernel cache is off"), "{t}");
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

// ---- memory ----

/// A model or batch the device cannot hold is found before anything is
/// allocated or written: on wgpu a tensor larger than the adapter allocates
/// at once (the layer or the `batch` line is pointed at, with a batch that
/// fits), on the CPU a total larger than the host's available memory; exit
/// code 2 and no run folder. A run that fits prints its estimate.
#[test]
fn a_run_too_large_for_the_device_is_refused_before_it_starts() {
    let tmp = copy_example("iris");
    let spec = std::fs::read_to_string(tmp.path().join("iris.kyn")).unwrap();
    let wide = spec.replacen("dense 32 relu", "dense 40000 relu", 2);
    std::fs::write(tmp.path().join("wide.kyn"), &wide).unwrap();
    let out = kynml(&["train", "wide.kyn", "--device", "wgpu", "--epochs", "1", "--out", "w"], tmp.path());
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("needs one 6.0 GiB tensor (weight [40000, 40000])") && t.contains("allocates at most"), "{t}");
    assert!(t.contains("wide.kyn:11:5") && t.contains("does not fit the device"), "{t}");
    assert!(!t.contains("panicked"), "{t}");

    // A step holds at most the 120 training rows, whatever the batch: a
    // layer wide enough makes even those too large for one allocation.
    let batch = spec.replace("batch = 16", "batch = 40000000").replacen("dense 32 relu", "dense 300000 relu", 1);
    std::fs::write(tmp.path().join("batch.kyn"), batch).unwrap();
    let out = kynml(&["train", "batch.kyn", "--device", "wgpu", "--epochs", "1", "--out", "b"], tmp.path());
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("a batch of 120 needs one") && t.contains("or fewer fits: `batch = "), "{t}");
    std::fs::write(tmp.path().join("rows.kyn"), spec.replace("batch = 16", "batch = 40000000")).unwrap();
    let out = kynml(&["train", "rows.kyn", "--device", "cpu", "--epochs", "1", "--out", "rows"], tmp.path());
    let t = text(&out);
    assert!(out.status.success() && t.contains("activations of a batch of 120:"), "{t}");

    // With a checkpoint: refused before its folder and lock are made.
    let huge = spec.replacen("dense 32 relu", "dense 200000 relu", 2).replacen(
        "    seed = 7\n",
        "    seed = 7\n    checkpoint = checkpoint(every_n=1, path=\"ck/huge.ckpt\")\n",
        1,
    );
    std::fs::write(tmp.path().join("huge.kyn"), huge).unwrap();
    let out = kynml(&["train", "huge.kyn", "--device", "cpu", "--epochs", "1", "--out", "h"], tmp.path());
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("training needs about") && t.contains("available") && t.contains("use a smaller model"), "{t}");
    assert!(t.contains("copies that saving makes alone need"), "{t}");
    // `check` says it of the device the run would get here, and exits 0
    // (the spec may be meant for another machine).
    let out = kynml(&["check", "huge.kyn"], tmp.path());
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("note: huge.kyn:8:7: the run does not fit the device: training needs about"), "{t}");
    assert!(t.contains("`kynml train` would refuse it on this machine"), "{t}");
    std::fs::write(tmp.path().join("wide.kyn"), replace_line(&wide, "    device = ", "    device = wgpu")).unwrap();
    let t = text(&kynml(&["check", "wide.kyn"], tmp.path()));
    assert!(t.contains("note: wide.kyn:11:5: the run does not fit the device: this layer needs one 6.0 GiB"), "{t}");
    assert!(t.contains("would refuse it on this machine (use a narrower layer"), "{t}");
    let t = text(&kynml(&["check", "iris.kyn"], tmp.path()));
    assert!(!t.contains("does not fit"), "{t}");
    for dir in ["w", "b", "h", "ck"] {
        assert!(!tmp.path().join(dir).exists(), "{dir} was created");
    }

    let out = kynml(&["train", "iris.kyn", "--device", "cpu", "--epochs", "1", "--out", "fits"], tmp.path());
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("memory: about "), "{}", text(&out));
}

/// A data-parallel step splits the rows it has: a batch larger than the
/// training rows gives each device half of them, not half the batch, and
/// devices beyond a step's rows are said to add nothing.
#[test]
fn a_data_parallel_split_of_fewer_rows_than_the_batch_is_said() {
    let tmp = copy_example("iris");
    let spec = std::fs::read_to_string(tmp.path().join("iris.kyn")).unwrap();
    let spec = replace_line(&spec, "    device = ", "");
    let with = |batch: usize, devices: &str| {
        let source = replace_line(&spec, "    batch = ", &format!("    batch = {batch}\n    devices = {devices}"));
        std::fs::write(tmp.path().join("dp.kyn"), source).unwrap();
        let out = kynml(&["check", "dp.kyn"], tmp.path());
        assert!(out.status.success(), "{}", text(&out));
        text(&out)
    };
    let t = with(200, "[cpu, cpu]");
    assert!(
        t.contains("is more than the 120 training rows: each epoch is one batch of them all, 60 rows per device"),
        "{t}"
    );
    let t = with(2, "[cpu, cpu, cpu]");
    assert!(t.contains("note: a step's 2 rows leave 1 of the 3 devices without rows"), "{t}");
    // 120 rows in steps of 3: no step short of rows.
    let t = with(3, "[cpu, cpu, cpu]");
    assert!(!t.contains("devices without rows"), "{t}");
    // 120 rows in steps of 7: the last step holds 1 row for 3 devices.
    let t = with(7, "[cpu, cpu, cpu]");
    assert!(t.contains("note: an epoch's last step, of 1 row, leaves 2 of the 3 devices without rows"), "{t}");
    // With a batchnorm, that last step is left out: said once, not also
    // as a step whose devices add nothing.
    let spec = spec.replace("    dense 32 relu\n    dense 3", "    dense 32 relu\n    batchnorm\n    dense 3");
    std::fs::write(
        tmp.path().join("dp.kyn"),
        replace_line(&spec, "    batch = ", "    batch = 7\n    devices = [cpu, cpu, cpu]"),
    )
    .unwrap();
    let out = kynml(&["check", "dp.kyn"], tmp.path());
    let t = text(&out);
    assert!(t.contains("note: the last batch of each epoch holds 1 row, too few for batchnorm on each device"), "{t}");
    assert!(!t.contains("devices without rows"), "{t}");
}

/// The first line of `text` that starts with `prefix`, with `prefix` and
/// what follows it on that line replaced by `with`.
fn replace_line(text: &str, prefix: &str, with: &str) -> String {
    let start = text.find(prefix).unwrap_or_else(|| panic!("no `{prefix}` in the spec"));
    let end = text[start..].find('\n').map_or(text.len(), |e| start + e);
    format!("{}{with}{}", &text[..start], &text[end..])
}

/// A class label that pandas reads as missing (`NA`) trains as a class of
/// its own, as written, and `check` and `train` say so; a real label is
/// not named.
#[test]
fn a_class_label_that_reads_as_missing_is_said() {
    let tmp = tempfile::tempdir().unwrap();
    let mut csv = String::from("a,b,label\n");
    for i in 0..40 {
        csv += &format!("{},{},{}\n", i % 7, i % 5, ["x", "y", "NA"][i % 3]);
    }
    std::fs::write(tmp.path().join("cls.csv"), csv).unwrap();
    let spec = "dataset D:\n    source = csv(\"cls.csv\")\n    target = \"label\"\nmodel M:\n    input 2\n    \
                dense 3 linear\ntrain:\n    loss = cross_entropy\n    epochs = 1\n    device = cpu\n";
    std::fs::write(tmp.path().join("cls.kyn"), spec).unwrap();
    for args in [&["check", "cls.kyn"][..], &["train", "cls.kyn", "--out", "run"]] {
        let out = kynml(args, tmp.path());
        let t = text(&out);
        assert!(out.status.success(), "{t}");
        assert!(t.contains("note: class `NA` of `label` reads like a missing-value marker"), "{args:?}: {t}");
        assert!(!t.contains("class `x` of"), "{args:?}: {t}");
    }
}

/// A class whose rows all fall in the validation split is said before
/// training: the model cannot learn it. (41 rows, the last the only `z`:
/// seed 3 draws it into validation, seed 1 into training.)
#[test]
fn a_class_only_in_the_validation_rows_is_said() {
    let tmp = tempfile::tempdir().unwrap();
    let mut csv = String::from("a,b,label\n");
    for i in 0..40 {
        csv += &format!("{},{},{}\n", i % 7, i % 5, if i % 2 == 1 { "x" } else { "y" });
    }
    csv += "3,3,z\n";
    std::fs::write(tmp.path().join("cls.csv"), csv).unwrap();
    for (seed, said) in [(3, true), (1, false)] {
        let spec = format!(
            "dataset D:\n    source = csv(\"cls.csv\")\n    target = \"label\"\nmodel M:\n    input 2\n    dense 3 linear\n\
             train:\n    loss = cross_entropy\n    epochs = 1\n    device = cpu\n    seed = {seed}\n"
        );
        std::fs::write(tmp.path().join("cls.kyn"), spec).unwrap();
        let out = kynml(&["train", "cls.kyn", "--out", &format!("run{seed}")], tmp.path());
        let t = text(&out);
        assert!(out.status.success(), "{t}");
        assert_eq!(t.contains("note: class `z` is only in the validation rows"), said, "seed {seed}: {t}");
        // `kynml check` says it too, before any run.
        let out = kynml(&["check", "cls.kyn"], tmp.path());
        let t = text(&out);
        assert!(out.status.success(), "{t}");
        assert_eq!(t.contains("note: class `z` is only in the validation rows"), said, "check, seed {seed}: {t}");
    }
}

/// `num_workers` and `prefetch` far beyond an epoch's batches start no more
/// threads and hold no larger a queue than there are batches, and say so
/// (100,000 workers hung; a prefetch of 1e12 aborted allocating its queue).
#[test]
fn loader_settings_beyond_an_epoch_are_fitted_to_it_and_said() {
    let tmp = copy_example("iris");
    let spec = std::fs::read_to_string(tmp.path().join("iris.kyn")).unwrap().replace(
        "    normalize = true\n",
        "    normalize = true\n    num_workers = 100000\n    prefetch = 1000000000000\n",
    );
    std::fs::write(tmp.path().join("iris.kyn"), spec).unwrap();
    let out = kynml(&["train", "iris.kyn", "--epochs", "2", "--device", "cpu", "--out", "run"], tmp.path());
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("note: num_workers = 100000, but an epoch has 8 batches: 8 worker threads run"), "{t}");
    assert!(
        t.contains("note: prefetch = 1000000000000, but an epoch has 8 batches: at most 8 are prepared ahead"),
        "{t}"
    );
    assert!(t.contains("8 worker threads, up to 8 batches prepared ahead"), "{t}");
    // Unwritten, prefetch is two a worker, and cut alike (80 to 8 here).
    let spec = std::fs::read_to_string(tmp.path().join("iris.kyn"))
        .unwrap()
        .replace("num_workers = 100000\n    prefetch = 1000000000000\n", "num_workers = 40\n");
    std::fs::write(tmp.path().join("iris.kyn"), spec).unwrap();
    let out = kynml(&["train", "iris.kyn", "--epochs", "1", "--device", "cpu", "--out", "run2"], tmp.path());
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("note: an epoch has 8 batches: at most 8 are prepared ahead (two a worker would be 80)"), "{t}");
    assert!(t.contains("40 worker threads, up to 8 batches prepared ahead"), "{t}");
    let resolved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(tmp.path().join("run2/spec.resolved.json")).unwrap()).unwrap();
    assert_eq!(resolved["dataset"]["prefetch"], 8);
}

/// `kynml check` says what `kynml train` would run, as train says it: the
/// loader cut to an epoch's batches, a data-parallel run's devices, and on
/// a GPU backend the kernel cache it would find (check makes none), with
/// `deterministic` judged by it. A `prefetch` without workers is applied.
#[test]
fn check_says_what_train_would_run() {
    let tmp = copy_example("iris");
    let dir = tmp.path();
    let with = |extra_data: &str, extra_train: &str| {
        let spec = std::fs::read_to_string(dir.join("iris.kyn"))
            .unwrap()
            .replace("    normalize = true\n", &format!("    normalize = true\n{extra_data}"))
            .replace("    device = auto\n", extra_train);
        std::fs::write(dir.join("c.kyn"), spec).unwrap();
        let out = kynml(&["--cache", "kc", "check", "c.kyn"], dir);
        assert!(out.status.success(), "{}", text(&out));
        text(&out)
    };
    let t = with("    num_workers = 100\n    prefetch = 100\n", "    device = cpu\n");
    assert!(t.contains("note: num_workers = 100, but an epoch has 8 batches: 8 worker threads run"), "{t}");
    assert!(t.contains("8 worker threads, up to 8 batches prepared ahead"), "{t}");
    let t = with("    prefetch = 3\n", "    device = cpu\n");
    assert!(t.contains("  data loading  one thread, up to 3 batches prepared ahead"), "{t}");
    let t = with("", "    devices = [cpu, cpu]\n");
    assert!(t.contains("on this machine, what runs:"), "{t}");
    assert!(t.contains("a data-parallel run steps on Burn on every device"), "{t}");
    let t = with("", "    device = wgpu\n    deterministic = true\n    autotune = full\n");
    assert!(t.contains("kernel cache") && t.contains("(empty: this run tunes and compiles"), "{t}");
    assert!(t.contains("full search for the fastest kernels (autotune = full)") && !t.contains("! autotune"), "{t}");
    assert!(t.contains("  deterministic  yes: each kernel is chosen once and kept"), "{t}");
    assert!(!t.contains("CubeCL's own cache settings apply"), "{t}");
    assert!(!dir.join("kc").exists(), "check made the kernel cache");
}

/// `predict` reads, predicts on and writes a piece of rows at a time (a
/// file of millions of rows grew its memory with them): the first
/// predictions come out while standard input is still open, every row is
/// predicted once, in order, and a bad row far down is located on its line,
/// with `--output` then not written at all.
#[test]
fn predict_streams_its_input_a_piece_at_a_time() {
    use std::io::{BufRead, Read, Write};
    let tmp = copy_example("iris");
    let dir = tmp.path();
    let out = kynml(&["train", "iris.kyn", "--epochs", "1", "--device", "cpu", "--out", "r"], dir);
    assert!(out.status.success(), "{}", text(&out));
    let csv = std::fs::read_to_string(dir.join("iris.csv")).unwrap();
    let (header, body) = csv.split_once('\n').unwrap();
    let body: Vec<&str> = body.lines().collect();
    // About 7 MB: more than one piece.
    let rows = 300_000;
    let mut big = format!("{header}\n");
    for i in 0..rows {
        big += body[i % body.len()];
        big.push('\n');
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_kynml"))
        .args(["predict", "r", "-"])
        .current_dir(dir)
        .env_remove("KYNML_CACHE")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let (close, closing) = std::sync::mpsc::channel::<()>();
    let input = big.clone();
    let writer = std::thread::spawn(move || {
        stdin.write_all(input.as_bytes()).unwrap();
        // Held open until the first predictions have come.
        closing.recv().unwrap();
    });
    let (first, came) = std::sync::mpsc::channel::<String>();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let reader = std::thread::spawn(move || {
        let mut lines = String::new();
        for _ in 0..2 {
            stdout.read_line(&mut lines).unwrap();
        }
        first.send(lines.clone()).unwrap();
        stdout.read_to_string(&mut lines).unwrap();
        lines
    });
    let Ok(head) = came.recv_timeout(std::time::Duration::from_secs(300)) else {
        let _ = child.kill();
        panic!("no prediction came before standard input ended");
    };
    assert!(head.starts_with("species,p_setosa,") && head.lines().count() == 2, "{head}");
    close.send(()).unwrap();
    writer.join().unwrap();
    let all = reader.join().unwrap();
    assert!(child.wait().unwrap().success());
    // The same predictions as the file read whole gives (no piece lost or repeated).
    std::fs::write(dir.join("big.csv"), &big).unwrap();
    let whole = kynml(&["predict", "r", "big.csv"], dir);
    assert!(whole.status.success() && whole.stdout == all.as_bytes(), "{} lines", all.lines().count());
    assert_eq!(all.lines().count(), rows + 1);
    // A regression's million rows, cut elsewhere (a MiB of blank lines
    // before the header moves every piece's end): the same bytes. Each row
    // is predicted in the pass it would be in read whole; rows at a piece's
    // end were predicted in a shorter pass, and some differed in their last
    // bit (87 rows of a million, cut unshifted, before).
    let spec = "dataset D:\n    source = csv(\"small.csv\")\n    target = \"y\"\nmodel M:\n    input 2\n    \
                dense 8 relu\n    dense 1 linear\ntrain:\n    loss = mse\n    epochs = 1\n    device = cpu\n";
    std::fs::write(dir.join("rr.kyn"), spec).unwrap();
    let mut state = 12345u64;
    let mut value = || {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((state >> 33) % 601) as f64 / 100.0 - 3.0
    };
    let mut regression = String::from("a,b,y\n");
    for _ in 0..1_000_000 {
        regression += &format!("{:.2},{:.2},{:.2}\n", value(), value(), value());
    }
    let small: String = regression.lines().take(2001).map(|l| format!("{l}\n")).collect();
    std::fs::write(dir.join("small.csv"), small).unwrap();
    let out = kynml(&["train", "rr.kyn", "--out", "rr"], dir);
    assert!(out.status.success(), "{}", text(&out));
    std::fs::write(dir.join("reg.csv"), &regression).unwrap();
    std::fs::write(dir.join("shifted.csv"), format!("{}{regression}", "\n".repeat(1 << 20))).unwrap();
    let (plain, shifted) = (kynml(&["predict", "rr", "reg.csv"], dir), kynml(&["predict", "rr", "shifted.csv"], dir));
    assert!(plain.status.success() && shifted.status.success(), "{}", text(&shifted));
    assert!(plain.stdout == shifted.stdout, "the predictions depend on where the pieces are cut");
    // A bad row at the end, far past the first piece: located, and no
    // --output file (nor a temporary one) left.
    std::fs::write(dir.join("bad.csv"), format!("{big}1,2,x,4,setosa\n")).unwrap();
    let out = kynml(&["predict", "r", "bad.csv", "--output", "p.csv"], dir);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains(&format!("bad.csv:{}: column 3 (`petal_length_cm`) is not a number", rows + 2)), "{t}");
    let left: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(!left.iter().any(|n| n.contains("p.csv")), "{left:?}");
}

/// predict's notes on what it read are said once every row is predicted,
/// of them all; not of the rows read before one was refused.
#[test]
fn predict_notes_are_said_of_the_whole_input_only() {
    let tmp = copy_example("rentals");
    let dir = tmp.path();
    let out = kynml(&["train", "rentals.kyn", "--epochs", "1", "--device", "cpu", "--out", "r"], dir);
    assert!(out.status.success(), "{}", text(&out));
    let rows = "city,weekday,weather,temperature,humidity\nAtlantis,Mon,rain,3.0,50\nMunich,Mon,rain,3.0,50\n";
    std::fs::write(dir.join("ok.csv"), rows).unwrap();
    let t = text(&kynml(&["predict", "r", "ok.csv"], dir));
    assert!(t.contains("note: 1 of 2 rows holds a `city` the model never saw in training"), "{t}");
    std::fs::write(dir.join("bad.csv"), format!("{rows}Munich,Mon,rain,abc,50\n")).unwrap();
    let out = kynml(&["predict", "r", "bad.csv"], dir);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("bad.csv:4: column 4 (`temperature`) is not a number") && !t.contains("never saw"), "{t}");
}

/// A query that matched nothing, the model's columns with no row below
/// them, is predicted as nothing: the header alone, exit 0 (a pipeline's
/// next stage reads an empty result, not a failed job). `eval` has nothing
/// to score and refuses it.
#[test]
fn predict_on_a_header_alone_writes_the_header_alone() {
    let tmp = copy_example("iris");
    let dir = tmp.path();
    assert!(kynml(&["train", "iris.kyn", "--device", "cpu", "--epochs", "1", "--out", "run"], dir).status.success());
    let csv = std::fs::read_to_string(dir.join("iris.csv")).unwrap();
    std::fs::write(dir.join("none.csv"), format!("{}\n", csv.lines().next().unwrap())).unwrap();
    let out = kynml(&["predict", "run", "none.csv"], dir);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8(out.stdout.clone()).unwrap();
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    assert!(stdout.starts_with("species,p_"), "{stdout}");
    assert!(text(&out).contains("has the model's columns and no row below them: no predictions"), "{}", text(&out));
    let out = kynml(&["predict", "run", "none.csv", "--output", "p.csv"], dir);
    assert!(out.status.success() && text(&out).contains("0 predictions written to p.csv"), "{}", text(&out));
    assert_eq!(std::fs::read_to_string(dir.join("p.csv")).unwrap(), stdout);
    let out = kynml(&["eval", "run", "none.csv"], dir);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    // A header that is not the model's is still refused.
    std::fs::write(dir.join("other.csv"), "a,b\n").unwrap();
    assert_eq!(kynml(&["predict", "run", "other.csv"], dir).status.code(), Some(2));
}

/// `rebuild_in_pytorch.py` reads rows as `kynml predict` does (which
/// reads them from standard input too, given `-`): a column with no name (a pandas index saved without `index=False`, a comma at the
/// at the end of every line) is passed over; the script refused it. Its reader is
/// run with torch stood in for (the reader needs none of it).
#[test]
fn the_pytorch_rebuild_reads_rows_as_predict_does() {
    let tmp = copy_example("iris");
    let dir = tmp.path();
    assert!(kynml(&["train", "iris.kyn", "--epochs", "1", "--out", "run"], dir).status.success());
    let rows =
        ",sepal_length_cm,sepal_width_cm,petal_length_cm,petal_width_cm,\n0,5.1,3.5,1.4,0.2,\n1,6.0,2.2,5.0,1.5,\n";
    std::fs::write(dir.join("rows.csv"), rows).unwrap();
    let out = kynml(&["predict", "run", "rows.csv"], dir);
    assert!(out.status.success(), "{}", text(&out));
    // `-` reads them from standard input, as a pipeline gives them.
    let with_stdin = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_kynml"))
            .args(args)
            .current_dir(dir)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let piped = |args: &[&str], input: &str| {
        use std::io::Write;
        let mut child = with_stdin(args);
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        child.wait_with_output().unwrap()
    };
    let from_stdin = piped(&["predict", "run", "-"], rows);
    assert!(from_stdin.status.success(), "{}", text(&from_stdin));
    assert_eq!(from_stdin.stdout, out.stdout);
    let bad = piped(&["predict", "run", "-"], &rows.replace("6.0", "six"));
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad));
    assert!(text(&bad).contains("<stdin>:3"), "{}", text(&bad));
    let labelled = "sepal_length_cm,sepal_width_cm,petal_length_cm,petal_width_cm,species\n5.1,3.5,1.4,0.2,setosa\n";
    let eval = piped(&["eval", "run", "-"], labelled);
    assert!(eval.status.success() && text(&eval).contains("1 row of <stdin>"), "{}", text(&eval));
    // A stream that is not the model's rows (`yes | kynml eval run -`) is
    // refused at its first line, not read until memory runs out: the
    // writer meets a closed pipe long before its 256 MiB.
    for (command, line) in [("eval", "y\n"), ("predict", "\0\0\0\0")] {
        use std::io::Write;
        let mut child = with_stdin(&[command, "run", "-"]);
        let mut stdin = child.stdin.take().unwrap();
        let writer = std::thread::spawn(move || {
            let block = line.repeat((64 << 10) / line.len());
            let mut written = 0usize;
            while written < 256 << 20 && stdin.write_all(block.as_bytes()).is_ok() {
                written += block.len();
            }
            written
        });
        let out = child.wait_with_output().unwrap();
        let written = writer.join().unwrap();
        assert_eq!(out.status.code(), Some(2), "{command}: {}", text(&out));
        assert!(text(&out).contains("<stdin>"), "{command}: {}", text(&out));
        assert!(written < 256 << 20, "{command}: the whole stream was read before its first line was checked");
    }
    let stub = "import sys, types\n\
        def stub(name):\n    m = types.ModuleType(name)\n    m.__getattr__ = lambda attr: type(attr, (), {})\n    \
        sys.modules[name] = m\n    return m\n\
        stub('torch').nn = stub('torch.nn'); stub('safetensors'); stub('safetensors.torch')\n\
        sys.path.insert(0, sys.argv[1])\n\
        import rebuild_in_pytorch as r\n\
        columns = ['sepal_length_cm', 'sepal_width_cm', 'petal_length_cm', 'petal_width_cm']\n\
        print(r.read_rows(sys.argv[2], columns, 'species'))\n";
    let scripts = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts");
    let read = Command::new("python3").arg("-c").arg(stub).arg(&scripts).arg(dir.join("rows.csv")).output().unwrap();
    assert!(read.status.success(), "{}", text(&read));
    let printed = String::from_utf8_lossy(&read.stdout);
    assert_eq!(printed.trim(), "[(2, ['5.1', '3.5', '1.4', '0.2']), (3, ['6.0', '2.2', '5.0', '1.5'])]");
}

/// What `kynml ARGS` writes on standard error when that is a terminal (a
/// pseudo-terminal) and `TERM` is `term`.
fn on_a_terminal(args: &[&str], dir: &Path, term: &str) -> String {
    use std::io::Read;
    use std::os::fd::{FromRawFd, OwnedFd};
    let (mut leader, mut follower) = (0, 0);
    // SAFETY: openpty(3) fills the two descriptors; no name, termios or size is asked for.
    let made =
        unsafe { libc::openpty(&mut leader, &mut follower, std::ptr::null_mut(), std::ptr::null(), std::ptr::null()) };
    assert_eq!(made, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both are open descriptors this test owns from here on.
    let (leader, follower) = unsafe { (OwnedFd::from_raw_fd(leader), OwnedFd::from_raw_fd(follower)) };
    let mut child = Command::new(env!("CARGO_BIN_EXE_kynml"))
        .args(args)
        .current_dir(dir)
        .env("TERM", term)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::from(follower))
        .spawn()
        .unwrap();
    // Read until the run's end closes the terminal's last writer (EIO);
    // what came before it is kept.
    let mut seen = Vec::new();
    let _ = std::fs::File::from(leader).read_to_end(&mut seen);
    assert!(child.wait().unwrap().success(), "{}", String::from_utf8_lossy(&seen));
    String::from_utf8_lossy(&seen).into_owned()
}

/// A terminal draws the epoch's bar; `TERM=dumb` (Emacs' shell) shows the
/// escapes drawing takes as text, and gets plain lines as a log does.
#[test]
fn term_dumb_gets_plain_lines_and_no_escapes() {
    let tmp = copy_example("iris");
    let drawn = on_a_terminal(&["train", "iris.kyn", "--epochs", "3", "--out", "drawn"], tmp.path(), "xterm");
    assert!(drawn.contains("\x1b[2K"), "a terminal gets the bar: {drawn:?}");
    let plain = on_a_terminal(&["train", "iris.kyn", "--epochs", "3", "--out", "plain"], tmp.path(), "dumb");
    assert!(!plain.contains('\x1b'), "TERM=dumb gets no escape: {plain:?}");
    // A bench's rounds show their steps as they go; a log gets a line a round.
    let bench = ["bench", "iris.kyn", "--steps", "3", "--rounds", "1"];
    let drawn = on_a_terminal(&bench, tmp.path(), "xterm");
    assert!(drawn.contains("round") && drawn.contains("/3 steps"), "{drawn:?}");
    let plain = on_a_terminal(&bench, tmp.path(), "dumb");
    assert!(!plain.contains('\x1b') && plain.contains("round 1: "), "{plain:?}");
}

/// `d.csv` of `rows` rows (two features, a number to predict) and `name`,
/// a spec of `layers` dense layers of 4096 units over it (a model large
/// enough that its steps or its export take a while), its `train:` block
/// going on with `train` after `loss = mse`.
fn wide_regression(dir: &Path, name: &str, rows: usize, layers: usize, train: &str) {
    let csv: String = (0..rows).map(|i| format!("{},{},{}\n", i % 7, i % 5, i % 3)).collect();
    std::fs::write(dir.join("d.csv"), format!("a,b,y\n{csv}")).unwrap();
    let dense = " dense 4096 relu\n".repeat(layers);
    let spec = format!(
        "dataset D:\n source = csv(\"d.csv\")\n target = \"y\"\nmodel M:\n input 2\n{dense} dense 1 linear\n\
         train:\n loss = mse\n {train}"
    );
    std::fs::write(dir.join(name), spec).unwrap();
}

/// A command stopped by a signal while it writes (an export of a large
/// model) ends as the signal ends it, its unfinished file removed: it left
/// a hidden temporary file as large as the export, which only a later
/// write of the same name removed. Its target is untouched.
#[test]
fn a_signal_during_an_export_removes_its_unfinished_file() {
    use std::os::unix::process::ExitStatusExt;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    wide_regression(dir, "big.kyn", 64, 2, "optimizer = sgd(lr=0.0001)\n epochs = 1\n batch = 64\n");
    assert!(kynml(&["train", "big.kyn", "--out", "run"], dir).status.success());
    let temps = || {
        std::fs::read_dir(dir)
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().contains(".tmp-"))
            .count()
    };
    let mut child = spawn(&["export", "run", "--format", "onnx", "--path", "m.onnx"], dir);
    // Caught while it writes: stopped, signalled, let go.
    while temps() == 0 {
        assert!(child.try_wait().unwrap().is_none(), "the export ended before its file was seen");
    }
    let pid = child.id().to_string();
    for signal in ["-STOP", "-TERM", "-CONT"] {
        Command::new("kill").args([signal, &pid]).status().unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.signal(), Some(libc::SIGTERM), "{:?}", out.status);
    assert!(String::from_utf8_lossy(&out.stderr).contains("terminated (SIGTERM)"), "{}", text(&out));
    assert_eq!(temps(), 0, "the unfinished export is removed");
    assert!(!dir.join("m.onnx").exists());
}

/// A signal before the run's first step ends quits at once: nothing new is
/// there to checkpoint, and waiting for that step (on a GPU, minutes of
/// kernel tuning and compiling) outlasted a scheduler's grace period
/// before SIGKILL, only to save one step.
#[test]
fn a_signal_before_the_first_step_ends_quits_at_once() {
    use std::io::BufRead;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // A first step of many seconds on any CPU (8192 rows through three
    // 4096 x 4096 products, forward and backward), which a passing run
    // never waits for.
    wide_regression(
        dir,
        "slow.kyn",
        10240,
        3,
        "optimizer = adam(lr=0.0001)\n epochs = 3\n batch = 8192\n checkpoint = checkpoint(every_n=1, path=\"slow.ckpt\")\n",
    );
    let mut child = spawn(&["train", "slow.kyn", "--out", "run"], dir);
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    assert!(lines.by_ref().map_while(Result::ok).any(|l| l.starts_with("run folder: ")), "the run starts");
    // Signalled once its handler of SIGTERM is in place (SigCgt, a mask
    // whose bit 15 - 1 is SIGTERM's): before that, the signal's default
    // would end it, which proves nothing.
    let status = format!("/proc/{}/status", child.id());
    let caught = || {
        let text = std::fs::read_to_string(&status).unwrap_or_default();
        let mask = text.lines().find_map(|l| l.strip_prefix("SigCgt:")).map(str::trim).unwrap_or("0");
        u64::from_str_radix(mask, 16).is_ok_and(|m| m & (1 << (libc::SIGTERM - 1)) != 0)
    };
    let since = std::time::Instant::now();
    while !caught() {
        assert!(since.elapsed() < std::time::Duration::from_secs(60), "no handler of SIGTERM installed");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    let rest: String = lines.map_while(Result::ok).map(|l| l + "\n").collect();
    let out = child.wait_with_output().unwrap();
    let t = format!("{rest}{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(143), "{t}");
    assert!(t.contains("stopped before the run's first step ended: there is nothing new to checkpoint"), "{t}");
    assert!(!t.contains("epoch   1 ") && !dir.join("slow.ckpt").exists(), "{t}");
}

/// Small things said right: a model given as `-` (standard input), a
/// check of many classes, the best epoch when it is the last.
#[test]
fn a_model_from_stdin_many_classes_and_a_best_last_epoch_are_said_plainly() {
    let tmp = copy_example("iris");
    let dir = tmp.path();
    for args in [
        &["predict", "-", "iris.csv"][..],
        &["eval", "-", "iris.csv"],
        &["export", "-", "--format", "onnx", "--path", "m.onnx"],
    ] {
        let out = kynml(args, dir);
        let t = text(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {t}");
        assert!(
            t.contains("a model is read from a run folder or an export's files") && !t.contains("sidecar -.json"),
            "{t}"
        );
    }
    // 30 classes: the first 12 named, and a count of the rest.
    let rows: String = (0..90).map(|i| format!("{},{},class_{:02}\n", i % 7, i % 5, i % 30)).collect();
    std::fs::write(dir.join("many.csv"), format!("a,b,kind\n{rows}")).unwrap();
    let spec = "dataset D:\n source = csv(\"many.csv\")\n target = \"kind\"\nmodel M:\n input 2\n dense 30 linear\n\
                train:\n loss = cross_entropy\n epochs = 1\n";
    std::fs::write(dir.join("many.kyn"), spec).unwrap();
    let t = text(&kynml(&["check", "many.kyn"], dir));
    assert!(t.contains("30 classes (class_00, class_01, ") && t.contains("class_11, ... 18 more)"), "{t}");
    assert!(!t.contains("class_12"), "{t}");
    // Early stopping keeps the best epoch's weights: restored from it, or,
    // where it is the last, the model as it is.
    let spec = std::fs::read_to_string(dir.join("iris.kyn")).unwrap();
    let early = spec.replace("    seed = 7", "    seed = 7\n    early_stop = early_stop(patience=10)");
    std::fs::write(dir.join("early.kyn"), early).unwrap();
    let out = kynml(&["train", "early.kyn", "--epochs", "4", "--out", "e"], dir);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    let losses: Vec<f64> = std::fs::read_to_string(dir.join("e/metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["val_loss"].as_f64().unwrap())
        .collect();
    let best = 1 + (0..losses.len()).fold(0, |b, i| if losses[i] < losses[b] { i } else { b });
    if best == losses.len() {
        assert!(t.contains(&format!("best epoch: {best}, the last (its weights are the model)")), "{t}");
    } else {
        assert!(t.contains(&format!("best epoch: {best} (weights restored from it)")), "{t}");
    }
}
