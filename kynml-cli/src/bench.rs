//! `kynml bench SPEC`: how fast a spec trains on a device, measured as
//! `cargo bench` measures it; `kynml warmup SPEC`: the kernel cache filled
//! ahead of a spec's runs.

use std::path::Path;
use std::time::Instant;

use anyhow::Context;
use kynml_backend::kernel_cache;
use kynml_core::bench::{self, BenchOptions};
use kynml_core::data::{synthetic_for, Dataset};
use kynml_core::plan::{check_fit, what_runs, what_runs_on, LoadError, Overrides, SpecFile};
use kynml_core::spec::SpecError;
use kynml_core::train::memory::si;
use kynml_core::train::{train, EngineKind, TrainEvent, TrainSettings};

use crate::args::{BenchArgs, WarmupArgs};
use crate::failure::Failure;
use crate::render;
use crate::train::tell;

pub fn bench(args: BenchArgs) -> Result<(), Failure> {
    let started = Instant::now();
    let mut file = SpecFile::load(&args.spec)?;
    // `--json -` (or `/dev/stdout`) is standard output, which then holds
    // the JSON alone: what is said for a person goes to standard error.
    let to_stdout = args.json.as_deref().is_some_and(crate::output::is_stdout);
    if to_stdout {
        crate::train::stdout_holds_data();
    }
    let json_target = args
        .json
        .as_deref()
        .filter(|_| !to_stdout)
        .map(|p| {
            crate::output::check_json_target(p, "kynml bench --json", |v| {
                v.get("samples_per_sec").is_some() && v.get("step_ms").is_some()
            })
        })
        .transpose()?;
    let from_spec = args.device.is_none();
    let (device, devices) = crate::args::DeviceArg::split(args.device);
    file.apply(&Overrides { device, devices, ..Overrides::default() });
    if let Some(p) = args.precision {
        file.spec.train.precision.value = p;
    }
    if let Some(b) = args.batch {
        file.spec.train.batch.value = b as usize;
    }
    override_autotune(&mut file, args.autotune);
    if args.fused {
        let optimizer = &mut file.spec.train.optimizer.value;
        *optimizer = optimizer.with_fused(true).ok_or_else(|| {
            Failure::input(format!(
                "error: --fused: `{}` has no fused update (adamw, adam and sgd have one)",
                optimizer.name()
            ))
        })?;
    }
    // A bench measures steps; it writes no checkpoint and no export, and
    // "what runs" says none.
    file.spec.train.checkpoint = None;
    file.spec.export = None;
    let devices = crate::devices::pick_all_in(&mut file, from_spec)?;
    let device = devices[0].clone();
    let (data, source) = bench_data(&mut file, args.synthetic)?;
    crate::train::fit_loader(&mut file, &data);
    tell!("{}", render::what_runs(&what_runs_on(&file.spec, &devices)));
    tell!("{}", render::memory(&file.check_memory_on(&device, &data, 0)?, &device));
    let options = BenchOptions {
        steps: args.steps as usize,
        rounds: args.rounds as usize,
        replicas: devices[1..].to_vec(),
        ..BenchOptions::default()
    };
    tell!(
        "bench: {} on {source}, batch {}, {} in each of 1 warm-up and {} timed round{}",
        file.spec.model.name.value,
        file.spec.train.batch.value,
        render::count(options.steps, "step"),
        options.rounds,
        if options.rounds == 1 { "" } else { "s" }
    );
    let (n_train, batch) = (data.train.len(), file.spec.train.batch.value);
    if n_train < batch.saturating_mul(options.steps) {
        let split = file.spec.dataset.split.value;
        let steps = n_train.div_ceil(batch.max(1));
        let more = match args.synthetic {
            Some(_) => format!(
                "; --synthetic {} gives each round its {} full steps",
                (batch.saturating_mul(options.steps) as f64 / split).ceil() as u64 + 1,
                options.steps
            ),
            None => String::new(),
        };
        if steps == options.steps {
            // As many steps, the last one short.
            let last = n_train - (steps - 1) * batch;
            tell!(
                "note: the training split holds {}: each round's last step takes {last} of {batch} rows{more}\n",
                render::count(n_train, "row")
            );
        } else {
            tell!(
                "note: the training split holds {}: each round takes {} of up to {}, not {} of {batch}{more}\n",
                render::count(n_train, "row"),
                render::count(steps, "step"),
                render::count(batch.min(n_train), "row"),
                options.steps,
            );
        }
    }

    if crate::train::tunes_kernels(&device.kind, kernel_cache::installed().map(|c| &c.state)) {
        eprintln!("warm-up round: tuning and compiling GPU kernels first (minutes on a first run) ...");
    }
    let mut steady_at = None;
    // A round's time holds its validation pass, its samples/s the steps alone.
    let validation = match data.valid.len() {
        0 => String::new(),
        n => format!(" (its validation pass of {} included)", render::count(n, "row")),
    };
    // On a terminal, each round's steps as they go (a round of a large
    // model takes tens of seconds).
    let round_name =
        |epoch: usize| if epoch == 1 { "warm-up round".to_string() } else { format!("round {}", epoch - 1) };
    let mut ticker: Option<crate::terminal::Ticker> = None;
    let report = bench::run(&file.spec, &data, &device, &options, &mut |event| {
        // Drawn from the round's start: the warm-up's first step may take
        // minutes (a GPU tuning its kernels).
        if let TrainEvent::EpochStart { epoch, steps, .. } = *event {
            ticker = Some(crate::terminal::Ticker::new(&round_name(epoch), steps as u64));
        }
        if let (TrainEvent::Step { step, .. }, Some(ticker)) = (event, &ticker) {
            ticker.set(*step as u64);
        }
        if let TrainEvent::EpochEnd(r) = event {
            if let Some(ticker) = ticker.take() {
                ticker.finish();
            }
            let what = round_name(r.epoch);
            if r.epoch == 1 {
                steady_at = Some(started.elapsed().as_secs_f64());
            }
            eprintln!(
                "{what}: {} samples/s, train loss {}, {}{validation}",
                render::thousands(r.samples_per_sec.round() as usize),
                render::number(r.train_loss),
                render::duration(r.seconds)
            );
        }
    })
    .map_err(|e| Failure::run(format!("error: {e}")))?;
    crate::devices::seal_cache();

    // Thousands grouped, as `kynml report` shows them.
    let per_sec = |r: f64| render::thousands(r.round() as usize);
    let rounds: Vec<String> = report.rounds.iter().map(|&r| per_sec(r)).collect();
    let mut rows = vec![
        vec![
            "samples/s".to_string(),
            per_sec(report.samples_per_sec),
            format!("median of rounds: {}", rounds.join(", ")),
        ],
        vec!["step time".into(), format!("{:.3} ms", report.step_ms), {
            // Short data: a round's last step holds fewer rows than the batch.
            let rows = report.samples_per_sec * report.step_ms / 1e3;
            if (rows - report.batch as f64).abs() < 0.5 {
                format!("{} a step", render::count(report.batch, "row"))
            } else {
                format!("{rows:.0} rows a step on average (batch {}, the last step shorter)", report.batch)
            }
        }],
        vec![
            "arithmetic".into(),
            si(report.flops_per_sec, "FLOP/s"),
            format!(
                "the products' {} multiply-adds a sample at that speed, about 6 FLOP each over forward and backward",
                si(report.multiply_adds as f64, "")
            ),
        ],
        vec![
            // Not the step's own time: the warm-up round's, above, leaves the build out.
            "first step ends".into(),
            render::duration(report.first_step_secs),
            if device.has_fusion() {
                "after training started (the model built, then its first step): kernel tuning and compilation, \
                 unless cached"
                    .into()
            } else {
                "after training started (the model built, then its first step)".into()
            },
        ],
        vec![
            "start-up".into(),
            render::duration(steady_at.unwrap_or(report.startup_secs)),
            format!(
                "from the command's start to the end of the warm-up round ({} of it training)",
                render::duration(report.startup_secs)
            ),
        ],
    ];
    if let Some(m) = report.peak_device_memory {
        rows.push(vec![
            "device memory".into(),
            size(m.in_use),
            format!("peak in use after a round; {} reserved by the allocator", size(m.reserved)),
        ]);
    }
    if let Some(b) = report.peak_host_bytes {
        rows.push(vec!["host memory".into(), size(b), "peak resident set of this process".into()]);
    }
    rows.push(vec![
        "train loss".into(),
        render::number(report.final_train_loss),
        "at the end of the last round".into(),
    ]);
    let engine = match report.engine {
        EngineKind::Native => "the native CPU engine".to_string(),
        EngineKind::Burn => device.backend_name().to_string(),
    };
    let on = match devices.len() {
        1 => report.device.clone(),
        n => format!("{n} x {} (data-parallel)", report.device),
    };
    tell!("\n{} on {on}, {}, {engine}", file.spec.model.name.value, report.precision.name());
    tell!("{}", render::table(&["", "figure", "what"], &rows));
    if let Some(note) = spread_note(&report.rounds) {
        tell!("{note}");
    }
    if let Some(path) = &args.json {
        let mut json = serde_json::to_value(&report).context("the report as JSON")?;
        json["spec"] = serde_json::json!(args.spec.display().to_string());
        json["model"] = serde_json::json!(file.spec.model.name.value);
        json["data"] = serde_json::json!(source);
        json["devices"] = serde_json::json!(devices.iter().map(kynml_backend::Device::short_name).collect::<Vec<_>>());
        json["process_startup_secs"] = serde_json::json!(steady_at);
        // What ran, as "what runs" marks it, not what was asked: the native
        // engine has no fused update, no autotune and no epilogue of Burn's.
        let burn = report.engine == EngineKind::Burn;
        let fusion = burn && devices.iter().all(kynml_backend::Device::has_fusion);
        json["fused"] = serde_json::json!(burn && file.spec.train.optimizer.value.fused() == Some(true));
        json["autotune"] = serde_json::json!(kernel_cache::autotune().filter(|_| fusion).map(|l| l.name()));
        json["matmul_epilogue"] = serde_json::json!(burn.then(|| {
            let epilogue = kynml_core::model::dense::epilogue();
            if fusion {
                epilogue.name()
            } else {
                kynml_core::model::dense::Epilogue::Separate.name()
            }
        }));
        let text = serde_json::to_string_pretty(&json).context("the report as JSON")? + "\n";
        match json_target.as_deref() {
            Some(target) => {
                crate::output::write_output(target, text.as_bytes())
                    .with_context(|| format!("writing {}", path.display()))?;
                tell!("figures written to {}", path.display());
            }
            None => {
                use std::io::Write;
                let mut out = std::io::stdout().lock();
                if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
                    if e.kind() != std::io::ErrorKind::BrokenPipe {
                        return Err(Failure::run(format!("error: cannot write the figures to standard output: {e}")));
                    }
                }
            }
        }
    }
    Ok(())
}

/// `--autotune LEVEL` in place of the spec's `autotune` (before the device
/// is picked, which hands the level to CubeCL).
fn override_autotune(file: &mut SpecFile, level: Option<kynml_core::spec::types::Autotune>) {
    if let Some(value) = level {
        let span = file.spec.train.autotune.as_ref().map_or(file.spec.train.precision.span, |a| a.span);
        file.spec.train.autotune = Some(kynml_core::spec::types::Spanned { value, span });
    }
}

pub fn warmup(args: WarmupArgs) -> Result<(), Failure> {
    let mut file = SpecFile::load(&args.spec)?;
    let from_spec = args.device.is_none();
    let (device, devices) = crate::args::DeviceArg::split(args.device);
    file.apply(&Overrides { device, devices, epochs: Some(1), ..Overrides::default() });
    if let Some(p) = args.precision {
        file.spec.train.precision.value = p;
    }
    override_autotune(&mut file, args.autotune);
    file.spec.train.checkpoint = None;
    file.spec.train.early_stop = None;
    let devices = crate::devices::pick_all_in(&mut file, from_spec)?;
    let device = devices[0].clone();
    // Nothing to tune: the spec and its data are still checked as train
    // checks them (a cluster's pre-flight warm-up must not pass a spec that
    // train refuses).
    if !devices.iter().any(kynml_backend::Device::has_fusion) {
        let (data, _) = bench_data(&mut file, args.synthetic)?;
        file.check_memory_on(&device, &data, 0)?;
        let mut on: Vec<String> = devices.iter().map(kynml_backend::Device::describe).collect();
        on.dedup();
        let on = on.join(", ");
        // Made-up rows say nothing of the data file, which was not read.
        let fine = match args.synthetic {
            Some(_) => "the spec is fine; its data file was not read (--synthetic)",
            None => "the spec and its data are fine",
        };
        println!("nothing to warm up: {on} has no kernels to tune or compile ({fine})");
        return Ok(());
    }
    // A data-parallel spec: every device runs one replica's share of the
    // batch, and its GPUs share one kernel cache (one GPU model, one
    // folder), so one replica's kernels are what the run needs.
    if let Some(set) = file.spec.train.devices.take() {
        let n = devices.len();
        let batch = &mut file.spec.train.batch.value;
        let per_device = batch.div_ceil(n);
        println!(
            "warm-up: `{}` is data-parallel on {n} devices; tuning one replica's kernels, {per_device} of the batch's {batch} rows",
            set.value.name()
        );
        *batch = per_device;
    }
    let (data, source) = bench_data(&mut file, args.synthetic)?;
    println!("{}", render::what_runs(&what_runs(&file.spec, &device)));
    println!("data: {source}");
    file.check_memory_on(&device, &data, 0)?;
    let Some(cache) = kernel_cache::installed().filter(|c| c.root().is_some()) else {
        return Err(Failure::input("error: the kernel cache is off (see above), so a warm-up would keep nothing"));
    };
    // The first step waits for all of it: said, not a silent minute.
    eprintln!("warm-up: {} ...", crate::train::first_steps_note(&device.kind, Some(&cache.state)).unwrap_or_default());
    let started = Instant::now();
    let settings = TrainSettings { shapes_only: true, ..TrainSettings::default() };
    let mut steps = 0;
    // On a terminal, the steps done and the time ticking; in a log, a line a step.
    let mut ticker: Option<crate::terminal::Ticker> = None;
    let trained = train(&file.spec, &data, &device, &settings, &mut |event| {
        if let TrainEvent::EpochStart { steps: of, .. } = event {
            ticker.get_or_insert_with(|| crate::terminal::Ticker::new("warm-up", of as u64));
        }
        if let TrainEvent::Step { step, steps: of, .. } = event {
            steps = step;
            match ticker.as_ref().filter(|t| t.draws()) {
                Some(ticker) => ticker.set(step as u64),
                None => eprintln!(
                    "warm-up: step {step} of {of} done, {}",
                    render::duration(started.elapsed().as_secs_f64())
                ),
            }
        }
    });
    if let Some(ticker) = ticker {
        ticker.finish();
    }
    trained.map_err(|e| Failure::run(format!("error: {e}")))?;
    let root = cache.root().unwrap_or(std::path::Path::new(""));
    kernel_cache::seal().with_context(|| format!("recording the kernel cache in {}", root.display()))?;
    let (files, bytes) = cache.contents().unwrap_or_default();
    println!(
        "warm-up: {steps} steps (every batch shape of an epoch) and the validation passes in {}; \
         {} now holds {files} files ({})",
        render::duration(started.elapsed().as_secs_f64()),
        root.display(),
        size(bytes)
    );
    Ok(())
}

/// The spec's data, or synthetic rows shaped for it; and a name for it.
pub(crate) fn bench_data(file: &mut SpecFile, synthetic: Option<u64>) -> Result<(Dataset, String), Failure> {
    match synthetic {
        Some(rows) => {
            // Each row's values and its target.
            let values = file.spec.model.shape.size() as u64 + 1;
            let need = kynml_core::train::memory::data_bytes(rows, values);
            if let Some(available) = kynml_backend::proc_bytes("/proc/meminfo", "MemAvailable").filter(|&a| need > a) {
                return Err(Failure::input(format!(
                    "error: --synthetic {rows}: rows of {values} values each take about {} in memory, and this \
                     machine has {} available; {} rows or fewer fit",
                    kynml_core::train::memory::bytes(need),
                    kynml_core::train::memory::bytes(available),
                    available / kynml_core::train::memory::data_bytes(1, values)
                )));
            }
            let rows = usize::try_from(rows).unwrap_or(usize::MAX);
            let data = synthetic_for(&file.spec, rows, file.spec.train.seed)
                .map_err(|e| Failure::input(format!("error: cannot make synthetic data: {e}")))?;
            // The spec's own blocks disagree (an `embedding` with no
            // categorical column declared): located, as with real data.
            if let Err(why) = file.spec.model.bind(&data.info) {
                return Err(file.unbound_error(why).into());
            }
            // Shaped for the spec, the data can still not fit it (one output for two classes).
            let problems = check_fit(&file.spec, &data, Path::new("the synthetic data"));
            if !problems.is_empty() {
                let error = SpecError { diagnostics: problems };
                let (path, source_text) = (file.path.clone(), file.source.clone());
                return Err(LoadError::Spec { path, source_text, error, against_data: true }.into());
            }
            Ok((data, format!("{rows} synthetic rows (seed {})", file.spec.train.seed)))
        }
        None => {
            let data = crate::reading::load_data(file)?;
            let name = format!("{} ({} training rows)", file.data_path().display(), data.train.len());
            Ok((data, name))
        }
    }
}

/// A size in the unit that shows it (a few KiB on a software driver read
/// `0.0 MiB`).
fn size(bytes: u64) -> String {
    kynml_core::train::memory::bytes(bytes)
}

/// Rounds far apart (the fastest 1.5 times the slowest or more): the
/// machine did other work meanwhile, and the median is a guess.
fn spread_note(rounds: &[f64]) -> Option<String> {
    let slowest = rounds.iter().copied().fold(f64::INFINITY, f64::min);
    let fastest = rounds.iter().copied().fold(0.0, f64::max);
    (rounds.len() >= 2 && slowest > 0.0 && fastest >= 1.5 * slowest).then(|| {
        format!(
            "note: the rounds differ by {:.1}x ({} to {} samples/s): something else ran on the machine meanwhile, \
             or its clock changed; the median is not a steady figure: run again on a quiet machine, or with more \
             --rounds",
            fastest / slowest,
            render::thousands(slowest.round() as usize),
            render::thousands(fastest.round() as usize),
        )
    })
}

#[cfg(test)]
mod spread_tests {
    use super::spread_note;

    #[test]
    fn rounds_far_apart_are_said() {
        assert_eq!(spread_note(&[1000.0, 1100.0, 1200.0]), None);
        assert_eq!(spread_note(&[1000.0]), None);
        let note = spread_note(&[656.0, 1725.0, 11225.0]).unwrap();
        assert!(note.starts_with("note: the rounds differ by 17.1x (656 to 11,225 samples/s)"), "{note}");
    }
}
