//! `kynml train SPEC`: resolve arguments and spec into a checked plan, say
//! what will run, train with progress, write the run folder.

use std::path::{Path, PathBuf};

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use kynml_backend::kernel_cache::CacheState;
use kynml_core::checkpoint;
use kynml_core::checkpoint::CheckpointError;
use kynml_core::data::{Dataset, Labels};
use kynml_core::export::{self, Format};
use kynml_core::plan::{Overrides, ResumePlan, SpecFile};
use kynml_core::report::{draw_curves, RunLog};
use kynml_core::run_dir::RunDir;
use kynml_core::train::resume::{LoopState, ResumeError};
use kynml_core::train::{
    metrics_for, train, EarlyStopper, EarlyStopping, EpochRecord, TrainError, TrainEvent, TrainSettings,
};

use crate::args::TrainArgs;
use crate::failure::Failure;
use crate::render;

/// `println!` for a training run: where standard output is gone (a
/// `| tee log` reader that the same Ctrl-C stopped, a closed pipe, a full
/// disk under a redirect), the run stops after its step, with its
/// checkpoint, as after SIGHUP, instead of dying mid-step.
macro_rules! say {
    () => { ctrl_c::write_line(1, format_args!("")) };
    ($($t:tt)*) => { ctrl_c::write_line(1, format_args!($($t)*)) };
}

/// `eprintln!` for a training run, as [`say!`].
macro_rules! say_err {
    ($($t:tt)*) => { ctrl_c::write_line(2, format_args!($($t)*)) };
}

/// Fewer validation rows than this are said to make coarse metrics: one
/// row more or less right moves accuracy by 5% or more.
const FEW_VALIDATION_ROWS: usize = 20;

pub fn run(args: TrainArgs) -> Result<(), Failure> {
    let outcome = run_spec(args);
    // A run whose output was lost after its last step (the final lines
    // unread) trained and wrote its folder, but did not say so: its status
    // says the output was lost, as during training.
    match ctrl_c::output_lost() {
        Some(code) if outcome.is_ok() => Err(Failure::interrupted(code, "")),
        _ => outcome,
    }
}

fn run_spec(args: TrainArgs) -> Result<(), Failure> {
    // Everything that can be wrong with the input is found before anything
    // is written.
    let mut file = SpecFile::load(&args.spec)?;
    // A run folder that is not empty is refused now, before the data is
    // read and what runs is said (`RunDir::create_exact` refuses it again,
    // should one fill meanwhile).
    if let Some(out) = args.out.as_ref().filter(|out| std::fs::read_dir(out).is_ok_and(|mut d| d.next().is_some())) {
        return Err(Failure::input(format!(
            "error: cannot create the run folder {}: it is not empty (a run folder must be new or empty, so that no \
             earlier run's files are mixed in)\n  to run into a new folder: {}",
            out.display(),
            elsewhere_command(std::env::args_os().map(|a| a.to_string_lossy().into_owned()).collect())
        )));
    }
    // So is a file where the run folder, or a folder above it, should be
    // (it was refused after "what runs" and the data were said).
    if let Some(message) = run_folder_blocked(args.out.as_deref()) {
        return Err(Failure::input(message));
    }
    let from_spec = args.device.is_none();
    let (device, devices) = crate::args::DeviceArg::split(args.device);
    file.apply(&Overrides { device, devices, epochs: args.epochs.map(|e| e as usize), seed: args.seed });
    // `--profile` is `profile = true`, as the resolved spec records it.
    file.spec.train.profile.value |= args.profile;
    let devices = crate::devices::pick_all_in(&mut file, from_spec)?;
    let device = devices[0].clone();
    if let Some(out) = &args.out {
        check_outside_run_folder(&file, out)?;
    }
    let data = crate::reading::load_data(&mut file)?;
    fit_loader(&mut file, &data);
    check_export_target(&file)?;
    check_export_sidecar(&file, &data)?;
    // A checkpoint there is resumed from (or the run is refused): it is read
    // and held through the run.
    let resumed = match file.checkpoint_path() {
        Some(path) if !args.fresh => std::fs::metadata(path).ok().filter(|m| m.is_file()).map_or(0, |m| m.len()),
        _ => 0,
    };
    // Before the checkpoint's folder and lock are made: a run refused as
    // too large writes nothing.
    let memory = file.check_memory_on(&device, &data, resumed)?;
    let ResumePlan { found: resume, lock: checkpoint_lock, .. } = resume_plan(&file, &data, args.fresh)?;
    if let Some((_, state)) = &resume {
        let epochs = file.spec.train.epochs.value;
        if let (Some(partial), false) = (&state.partial, still_stopped(&file.spec, state)) {
            if epochs <= state.epoch {
                // Its weights have taken steps of the next epoch: they are
                // no longer the model of the epochs it counts as done.
                return Err(Failure::input(format!(
                    "error: {} was written partway through epoch {} ({} epoch{} done, then {} of the next): \
                     its weights are not the model after {epochs} epoch{}\n  \
                     epochs = {} or more goes on from it (--epochs); --fresh starts over",
                    file.checkpoint_path().unwrap_or_default().display(),
                    state.epoch + 1,
                    state.epoch,
                    if state.epoch == 1 { "" } else { "s" },
                    match partial.steps {
                        1 => "1 batch".to_string(),
                        n => format!("{n} batches"),
                    },
                    if epochs == 1 { "" } else { "s" },
                    state.epoch + 1,
                )));
            }
        }
    }

    say!("{}", render::what_runs(&file.what_runs_on(&devices)));
    if let Some(note) = file.pytorch_checkpoint_note() {
        say!("{note}");
    }
    if let Some((_, state)) = &resume {
        let path = file.checkpoint_path().unwrap_or_default();
        let epochs = file.spec.train.epochs.value;
        // A run that stopped early goes on where the spec's early stopping
        // now lets it (as the trainer decides it).
        let still_stopped = still_stopped(&file.spec, state);
        let left = if still_stopped { 0 } else { epochs.saturating_sub(state.epoch) };
        // Nothing to train: a signal from here on lets the results be written.
        if left == 0 && state.partial.is_none() {
            ctrl_c::training_ended();
        }
        if still_stopped {
            say!(
                "resume: from {} ({} after {} epochs, {} without improving; nothing to train: its best \
                 model is written to the run folder; a larger `patience`, or no `early_stop`, goes on from it; \
                 --fresh starts over)",
                path.display(),
                if state.stopped_early { "stopped early" } else { "the spec's `patience` is used up" },
                state.epoch,
                state.early_stop.as_ref().map_or(0, |s| s.bad_epochs),
            );
        } else if state.epoch > epochs {
            say!(
                "resume: from {} ({} epochs done, more than the {epochs} asked: nothing to train; its model is \
                 written to the run folder; raise `epochs` to go on, --fresh starts over)",
                path.display(),
                state.epoch,
            );
        } else {
            let inside = partway(&file.spec, &data, state);
            say!(
                "resume: from {} ({} of {epochs} epochs done{}{inside}; {left} to go; --fresh starts over)",
                path.display(),
                state.epoch,
                if state.stopped_early {
                    ", stopped early, which the spec's early stopping now lets go on"
                } else {
                    ""
                },
            );
            // Only where something is left to train in the new steps.
            if let Some(note) =
                batching_changed(&file.spec, Some(devices.len()), devices.first(), state).filter(|_| left > 0)
            {
                say!("{note}");
            }
        }
    }
    let rows = |n: usize, what: &str| format!("{n} {what} row{}", if n == 1 { "" } else { "s" });
    say!(
        "data: {}, {}, {}{}",
        rows(data.train.len(), "train"),
        rows(data.valid.len(), "validation"),
        render::inputs(&data),
        data.class_names().map_or(String::new(), |c| format!(", {} classes", c.len()))
    );
    for note in data_notes(&file.spec, &data, devices.len()) {
        say!("{note}");
    }
    for line in render::vocabularies(&data.info) {
        say!("{line}");
    }
    for note in crate::reading::float_notes(&data) {
        say!("{note}");
    }
    say!("{}", render::memory(&memory, &device));

    let run_dir = match &args.out {
        Some(path) => RunDir::create_exact(path)
            .map_err(|e| Failure::input(format!("error: cannot create the run folder {}: {e}", path.display()))),
        None => {
            let base = Path::new("runs");
            RunDir::create_unique(base, &spec_stem(&args.spec))
                .map_err(|e| Failure::input(format!("error: cannot create a run folder in {}: {e}", base.display())))
        }
    }?;
    // The folder given with --out can be unwritable though it exists, or
    // the disk full: then nothing is left (a retry found it "not empty").
    if let Err(e) = write_inputs(&run_dir, &file, &data) {
        let said = format!("error: cannot write the run folder {}: {e:#}", run_dir.path.display());
        run_dir.discard();
        return Err(Failure::input(said));
    }
    say!("run folder: {}\n", run_dir.path.display());

    let cache = kynml_backend::kernel_cache::installed().map(|c| &c.state);
    let mut progress = Progress::new(first_steps_note(&device.kind, cache));
    // A checkpoint written inside an epoch: that epoch is finished here, in part.
    let resumed_inside = resume.as_ref().is_some_and(|(_, state)| state.partial.is_some());
    let mut log = RunLog::create(&run_dir).context("creating the TensorBoard log")?;
    let stop = ctrl_c::flag(file.checkpoint_path().is_some());
    let settings = TrainSettings {
        checkpoint_path: file.checkpoint_path(),
        resume_from: resume.map(|(ckpt, _)| ckpt),
        fresh: args.fresh,
        checkpoint_lock: checkpoint_lock.map(std::sync::Arc::new),
        stop: Some(stop.clone()),
        profile: args.profile || file.spec.train.profile.value,
        replicas: devices[1..].to_vec(),
        ..TrainSettings::default()
    };
    // A run folder that can no longer be written (a full disk, the folder
    // removed) stops the run at the next step, checkpointed where the spec
    // checkpoints: training on would end with nothing kept.
    let mut folder_lost: Option<String> = None;
    // The folder is looked at each epoch's end, and between them at most
    // once a second (a step may take microseconds).
    let mut looked = std::time::Instant::now();
    let epochs = file.spec.train.epochs.value;
    let result = train(&file.spec, &data, &device, &settings, &mut |event| {
        // The last epoch's end: what remains is writing the results (set
        // before the epoch's line is printed).
        if matches!(event, TrainEvent::EpochEnd(r) if r.epoch >= epochs)
            || matches!(event, TrainEvent::EarlyStop { .. })
        {
            ctrl_c::training_ended();
        }
        if matches!(event, TrainEvent::Step { .. } | TrainEvent::EpochEnd(_)) {
            ctrl_c::stepped();
        }
        log.on_event(&event);
        if folder_lost.is_none() {
            let due = match event {
                TrainEvent::EpochEnd(_) => true,
                TrainEvent::Step { .. } => looked.elapsed() >= std::time::Duration::from_secs(1),
                _ => false,
            };
            if due {
                looked = std::time::Instant::now();
            }
            let gone = due && !run_dir.path.is_dir();
            folder_lost = match log.failed() {
                Some(e) => Some(e.to_string()),
                None => gone.then(|| "the folder is gone".to_string()),
            };
            if let Some(why) = &folder_lost {
                progress.finish();
                say_err!(
                    "error: cannot write to the run folder {}: {why}; stopping after this step",
                    run_dir.path.display()
                );
                stop.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
        progress.on_event(&event);
    });
    progress.finish();
    if result.is_ok() {
        ctrl_c::training_ended();
    }
    // What this run tuned and compiled is kept for the next, interrupted or not.
    crate::devices::seal_cache();
    let profiled = match &result {
        Ok(r) => r.profile.as_ref(),
        Err(TrainError::Interrupted { profile, .. }) => profile.as_deref(),
        Err(_) => None,
    };
    // A resume with no epoch left trains no step: nothing to profile.
    let profiled = profiled.filter(|p| !p.steps.is_empty());
    if let Some(profile) = profiled {
        log.profile(profile);
    }
    // A data-parallel run's devices, as `--device` names them: `2 x cpu`, `cuda:0, cuda:1`.
    let names: Vec<String> = devices.iter().map(kynml_backend::Device::short_name).collect();
    let on = match names.as_slice() {
        [one, rest @ ..] if !rest.is_empty() && rest.iter().all(|n| n == one) => format!("{} x {one}", names.len()),
        _ => names.join(", "),
    };
    let title = format!("{} on {} ({on})", file.spec.model.name.value, file.spec.dataset.name.value);
    // A run stopped by a signal or a loss that is not a number keeps the
    // curves of the epochs it finished, as it keeps their records.
    let stopped = matches!(&result, Err(TrainError::Interrupted { .. } | TrainError::NonFiniteLoss { .. }));
    let curves_kept = match log.history().len() {
        0 => String::new(),
        _ if !stopped || folder_lost.is_some() => String::new(),
        n => {
            match draw_curves(&run_dir, &title, log.history(), None, ended_by(&result, file.spec.train.epochs.value)) {
                Ok(()) => {
                    format!("\n  the curves of its {} are in {}", render::count(n, "epoch"), run_dir.path.display())
                }
                Err(e) => format!("\n  the curves of its epochs could not be drawn: {e}"),
            }
        }
    };
    let logged = log.finish();
    if let Some(why) = folder_lost.or_else(|| logged.err().map(|e| e.to_string())) {
        let kept = match (&result, file.checkpoint_path()) {
            (Err(TrainError::Interrupted { checkpoint: Some(path), .. }), _) => format!(
                "\n  the checkpoint of that point is in {}; once a run folder can be written again, this goes on from it: {}",
                path.display(),
                continue_here(),
            ),
            (_, Some(path)) if path.is_file() => format!("\n  {} holds the run's last checkpoint", path.display()),
            (_, Some(_)) => "\n  no checkpoint of the run could be written either".into(),
            (_, None) => "\n  nothing of the run could be kept (the spec does not checkpoint)".into(),
        };
        return Err(Failure::run(format!(
            "error: training stopped: the run folder {} cannot be written: {why}{kept}",
            run_dir.path.display()
        )));
    }
    // A checkpoint that passed the checks made before the run (a whole
    // file, of this model, optimizer, loss and data) and still cannot be put
    // into the model (a tensor missing, state that does not decode): nothing
    // was trained, so nothing of the run is kept, as for a checkpoint
    // refused before it, and the same command can be run again.
    let result = match result {
        Err(TrainError::Resume(e)) => {
            let folder = run_dir.path.display().to_string();
            run_dir.discard();
            let from = file.checkpoint_path().map_or(String::new(), |p| format!(" from {}", p.display()));
            return Err(Failure::input(format!(
                "error: cannot resume{from}: {e}\n  nothing was trained, and {folder} is left as it was before this \
                 run\n  (--fresh ignores the checkpoint and starts over; its checkpoints then replace it)"
            )));
        }
        result => result,
    };
    let workers = file.spec.dataset.num_workers.value;
    let result = result.map_err(|e| match e {
        TrainError::Interrupted { epoch, step, checkpoint, profile, .. } => {
            let at = stopped_at(step, file.spec.train.accumulate.value);
            // Between epochs: none of this one was trained.
            let (epoch, at) = match (step, epoch) {
                (0, 0 | 1) => (1, "before its first step".to_string()),
                (0, e) => (e - 1, "its end".to_string()),
                _ => (epoch, at),
            };
            // The steps profiled so far are kept, with their verdict.
            let kept =
                match profile.filter(|p| !p.steps.is_empty()).map(|p| write_profile(&run_dir, &title, &p, workers)) {
                    Some(Ok(())) => format!("\n  the profile of the steps so far is in {}", run_dir.path.display()),
                    Some(Err(e)) => format!("\n  the profile of the steps so far could not be written: {e:#}"),
                    None => String::new(),
                } + &curves_kept;
            Failure::interrupted(
                ctrl_c::status(),
                match checkpoint {
                    Some(path) => format!(
                        "interrupted at epoch {epoch}, {at}; checkpoint written to {}\n  \
                     to continue from there: {}\n  (--fresh starts over){kept}",
                        path.display(),
                        continue_here(),
                    ),
                    None => match file.checkpoint_path() {
                        // The spec checkpoints, but this point's checkpoint failed (said above).
                        Some(path) => format!(
                            "interrupted at epoch {epoch}, {at}; the checkpoint of this point could not be \
                         written (see above){}{kept}",
                            if path.is_file() {
                                format!(
                                    "; {} holds the last one that was\n  to continue from it: {}",
                                    path.display(),
                                    continue_here(),
                                )
                            } else {
                                String::new()
                            }
                        ),
                        None => format!(
                            "interrupted at epoch {epoch}, {at}; nothing to resume from: the spec does not \
                         checkpoint (add `checkpoint = checkpoint(every_n=1, path=\"...\")` to train:){kept}"
                        ),
                    },
                },
            )
        }
        e @ TrainError::NonFiniteLoss { epoch, .. } => {
            // Where the learning rate it advises lowering is set (or, left
            // out, the `train:` block whose default it is); the scheduler,
            // where it had raised the rate above the optimizer's.
            let optimizer = &file.spec.train.optimizer;
            let base = optimizer.value.lr();
            let scheduler = file.spec.train.scheduler.as_ref();
            let rate = kynml_core::train::schedule::lr_at(base, scheduler.map(|s| &s.value), epoch - 1);
            if let Some(scheduler) = scheduler.filter(|_| rate > base) {
                let (line, col) = kynml_core::spec::line_col(&file.source, scheduler.span.start);
                let text = file.source.get(scheduler.span.start..scheduler.span.end).unwrap_or_default();
                return Failure::run(format!(
                    "error: {e}\n  {}:{line}:{col}: `scheduler = {text}` had raised the learning rate to {rate:.3e} \
                     by epoch {epoch}, from the optimizer's {base}{curves_kept}",
                    file.path.display()
                ));
            }
            let (line, col) = kynml_core::spec::line_col(&file.source, optimizer.span.start);
            let text = file.source.get(optimizer.span.start..optimizer.span.end).unwrap_or_default();
            let set = if text.starts_with("train") {
                format!(
                    "no `optimizer` is written in `train:`, so its default's learning rate, {}, runs",
                    optimizer.value.lr()
                )
            } else {
                format!("`optimizer = {text}` sets the learning rate")
            };
            Failure::run(format!("error: {e}\n  {}:{line}:{col}: {set}{curves_kept}", file.path.display()))
        }
        other => Failure::run(format!("error: {other}")),
    })?;

    let exported = export::from_model(&result.model, &file.spec.model, &data.info, file.spec.train.loss.value);
    // The exported copy is what is saved from here on.
    drop(result.model);
    // A model that overflowed in training (a batchnorm's running variance
    // at inf on values of 1e21) cannot be saved: said as what training made,
    // not as a disk that failed with a retry that would meet it again.
    if let Err(why) = exported.validate() {
        let cause = if why.contains("must be finite") {
            "\n  a value passed what a 32-bit float holds during training, and the loss did not show it; the data's \
             scale is the usual cause: `normalize = true` in the dataset, or rescale the columns"
        } else {
            ""
        };
        let checkpoint = match file.checkpoint_path().filter(|p| p.is_file()) {
            Some(p) => format!("; the checkpoint {} holds the same values", p.display()),
            None => String::new(),
        };
        return Err(Failure::run(format!(
            "error: training ended with a model that cannot be saved: {why}{cause}\n  no model was written to \
             {}{checkpoint}",
            run_dir.path.display()
        )));
    }
    let held = (result.checkpoint_epoch, result.history.last().map_or(0, |r| r.epoch));
    let results = || -> anyhow::Result<()> {
        export::write(&exported, Format::Safetensors, &run_dir.path.join(export::RUN_WEIGHTS))
            .context("saving model.safetensors")?;
        // As `kynml export --format burn` writes it: the shared sidecar then
        // names both files, so `kynml predict RUN/model.mpk` loads too.
        export::write(&exported, Format::Burn, &run_dir.path.join("model.mpk")).context("saving model.mpk")?;
        // The model is the best epoch's under early stopping, else the last's.
        let kept = result.best_epoch.or_else(|| result.history.last().map(|r| r.epoch));
        draw_curves(
            &run_dir,
            &title,
            &result.history,
            kept,
            // "stopped early at epoch 2 of 2" says nothing: only before the last.
            (result.stopped_early.then_some(epochs))
                .filter(|&of| result.history.last().is_some_and(|r| r.epoch < of))
                .map(kynml_core::report::curves::Ended::Early),
        )
        .context("drawing curves.svg and curves.png")
    };
    results().map_err(|e| results_unwritten(&e, &run_dir.path, &file, held))?;
    let export_note = export_as_spec_says(&file, &exported, &run_dir.path);
    let primary = metrics_for(&file.spec, file.spec.train.loss.value)[0].name();
    // The process's peak so far: the last checkpoint and the model files,
    // written after the last epoch's record, included.
    let peak = result.history.iter().filter_map(|r| r.peak_rss).chain(kynml_core::bench::peak_rss()).max();
    let summary = serde_json::json!({
        "spec": args.spec.display().to_string(),
        "model": file.spec.model.name.value,
        "precision": result.precision.compute.name(),
        "primary_metric": primary,
        "metrics": result.final_metrics,
        "best_epoch": result.best_epoch,
        "stopped_early": result.stopped_early,
        "epochs_run": result.history.len(),
        "resumed_after": result.resumed_after,
        "seconds": result.seconds,
        "samples_per_sec": result.samples_per_sec,
        "left_out_of_speed": result.left_out.map(|l| serde_json::json!({
            "first": l.what, "seconds": l.seconds, "rows": l.rows,
        })),
        "device": device.short_name(),
        "devices": devices.iter().map(kynml_backend::Device::short_name).collect::<Vec<_>>(),
        "engine": result.engine.name(),
        "peak_rss": peak,
    });
    run_dir
        .write_json("metrics.json", &summary)
        .context("writing metrics.json")
        .map_err(|e| results_unwritten(&e, &run_dir.path, &file, held))?;
    match &result.profile {
        // A resume with no epoch left trains no step: nothing to profile.
        Some(profile) if profile.steps.is_empty() => {
            say!("note: --profile: no step was trained, so no profile is written")
        }
        Some(profile) => write_profile(&run_dir, &title, profile, workers)?,
        None => {}
    }

    say!();
    // The last epoch's weights are the model already: nothing is restored.
    match result.best_epoch {
        Some(best) if best != result.history.len() => say!("best epoch: {best} (weights restored from it)"),
        Some(best) => say!("best epoch: {best}, the last (its weights are the model)"),
        None => {}
    }
    say!("{}", render::metrics_table(&result.final_metrics, "validation"));
    if result.checkpoint_failures > 0 {
        let path = file.checkpoint_path().unwrap_or_default();
        let left = match (result.checkpoint_epoch, path.is_file()) {
            // Every save of this run failed: what is there is what it resumed from.
            (Some(e), true) if result.resumed_after == Some(e) => {
                format!("{} still holds the checkpoint this run resumed from (epoch {e})", path.display())
            }
            (Some(_), true) => format!("{} holds the last one that succeeded", path.display()),
            // `--fresh` gives the run before up only once a save of its own is whole.
            (None, true) if args.fresh => format!(
                "none was written whole, so {} still holds the checkpoint of the run --fresh started over from \
                 (a run without --fresh resumes it)",
                path.display()
            ),
            (None, true) => format!("{} is there, but no write of this run is known to be whole", path.display()),
            (_, false) => format!("none was written whole, so there is no {} to resume from", path.display()),
        };
        let failures = result.checkpoint_failures;
        say_err!(
            "warning: {failures} checkpoint write{} failed (see above); {left}",
            if failures == 1 { "" } else { "s" }
        );
    }
    let export_failed = match export_note {
        Some(Ok(note)) => {
            say!("{note}");
            None
        }
        Some(Err(failure)) => Some(failure),
        None => None,
    };
    let epochs = result.history.len();
    let s = if epochs == 1 { "" } else { "s" };
    let now = epochs - result.resumed_after.unwrap_or(0).min(epochs);
    if now == 0 {
        // Under early stopping the model is the best epoch's weights.
        let model = match result.best_epoch {
            Some(best) if best != epochs => {
                format!("the checkpoint's {epochs} epoch{s} ran, and the model is epoch {best}'s weights, the best")
            }
            _ => format!("the checkpoint's {epochs} epoch{s} are the model"),
        };
        say!("\nno epoch left to train: {model}; results in {}", run_dir.path.display());
    } else {
        let speed = if result.samples_per_sec.is_nan() {
            "its validation alone left, no training step".to_string()
        } else {
            // A first step that took long (a GPU tuning and compiling its
            // kernels) is left out of the speed, and said.
            let first = result.left_out.filter(|l| l.seconds >= 1.0).map_or(String::new(), |l| {
                format!(" after the first {}, which took {}", l.what, render::duration(l.seconds))
            });
            format!("{:.0} samples/s in the training steps{first}", result.samples_per_sec)
        };
        // A resumed run's time and speed are this process's: said so.
        let took = render::duration(result.seconds);
        let took = if result.resumed_after.is_some() { format!(", this run in {took}") } else { format!(" in {took}") };
        say!(
            "\ntrained {epochs} epoch{s}{}{took} ({speed}); results in {}",
            result.resumed_after.map_or(String::new(), |r| resumed_at(r, now, resumed_inside)),
            run_dir.path.display()
        );
    }
    if let Some(line) = time_and_memory(&result.history, peak) {
        say!("{line}");
    }
    if let Some(profile) = result.profile.as_ref().filter(|p| !p.steps.is_empty()) {
        say!("\n{}", render::profile_table(profile));
        say!("verdict: {}", profile.verdict(workers).advice);
        if let Some(peak) = profile.peak_in_use() {
            use kynml_core::train::memory::bytes;
            say!(
                "device memory: at most {} in use at the ends of the steps' phases (estimated before the run: {})",
                bytes(peak),
                bytes(memory.total())
            );
        }
        say!(
            "phases in profile.json; a timeline in trace.json (open it in ui.perfetto.dev or chrome://tracing); \
             a chart in profile.svg and profile.png"
        );
    }
    // The run is whole; the export the spec asked for is not: a failure.
    if let Some(failure) = export_failed {
        return Err(Failure::run(failure));
    }
    // A signal that came while the results were written: they are whole,
    // and the run ends as that signal ends one (130, 143, ...).
    match ctrl_c::signal_name() {
        Some(signal) => Err(Failure::interrupted(
            ctrl_c::status(),
            format!("stopped by {signal} after training ended; its results were written whole first"),
        )),
        None => Ok(()),
    }
}

/// `profile.json`, `trace.json` and the chart of a profiled run.
fn write_profile(
    run_dir: &RunDir,
    title: &str,
    profile: &kynml_core::train::profile::Profile,
    workers: usize,
) -> anyhow::Result<()> {
    run_dir.write_json("profile.json", &profile.to_json(workers)).context("writing profile.json")?;
    run_dir.write_json("trace.json", &profile.trace()).context("writing trace.json")?;
    let verdict = profile.verdict(workers).advice;
    let figure = kynml_core::report::profile_chart::ProfileFigure { title, profile, verdict: &verdict };
    kynml_core::report::profile_chart::draw(&figure, &run_dir.path).context("drawing profile.svg and profile.png")
}

/// Where this run's time and memory went, from its epoch records: the share
/// of epoch time spent waiting for batches, the peak host memory (the
/// larger of the epochs' and `peak_now`, the process's peak after saving)
/// and the device allocator's pool.
fn time_and_memory(history: &[EpochRecord], peak_now: Option<u64>) -> Option<String> {
    let timed: Vec<&EpochRecord> = history.iter().filter(|r| r.data_wait.is_some() && !r.seconds.is_nan()).collect();
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    if timed.is_empty() {
        // No epoch timed here (a resume with none left): this process's
        // peak, loading the checkpoint and saving the model, is still said.
        return peak_now.map(|rss| {
            format!("time and memory: no epoch trained in this process; peak host memory {:.0} MiB", mib(rss))
        });
    }
    let wait: f64 = timed.iter().filter_map(|r| r.data_wait).sum();
    let total: f64 = timed.iter().map(|r| r.seconds).sum();
    // Of epoch time, evaluation included: the profile's verdict says its
    // own share of the steps' time, so each says what it is a share of.
    let mut parts =
        vec![format!("waiting for batches {:.0}% of epoch time (evaluation included)", 100.0 * wait / total.max(1e-9))];
    if let Some(rss) = timed.iter().filter_map(|r| r.peak_rss).chain(peak_now).max() {
        parts.push(format!("peak host memory {:.0} MiB", mib(rss)));
    }
    if let Some(pool) = timed.iter().filter_map(|r| r.device_reserved).max() {
        parts.push(format!("device memory pool {:.0} MiB", mib(pool)));
    }
    Some(format!("time and memory: {}", parts.join("; ")))
}

/// What a person should know about how the data meets the spec, before
/// training (`kynml check` says it too): few validation rows, a batch or an
/// accumulation larger than an epoch, batchnorm's dropped last batch, a
/// class only the validation rows hold. `devices`: the run's device count.
pub(crate) fn data_notes(spec: &kynml_core::spec::types::Spec, data: &Dataset, devices: usize) -> Vec<String> {
    let mut notes = schedule_notes(&spec.train);
    if data.valid.len() < FEW_VALIDATION_ROWS {
        notes.push(format!(
            "note: with {} the validation loss and metrics move in large steps; a lower `split` holds more out",
            render::count(data.valid.len(), "validation row")
        ));
    }
    let batch = spec.train.batch.value;
    let rows = data.train.len();
    if batch > rows {
        // A data-parallel step splits the rows it has, not the batch written.
        let split = match devices {
            // Fewer rows than devices: the note below says it.
            n if n == 1 || rows < n => String::new(),
            n if rows.is_multiple_of(n) => format!(", {} rows per device", rows / n),
            n => format!(", {}-{} rows per device", rows / n, rows / n + 1),
        };
        notes.push(format!(
            "note: batch = {batch} is more than the {}: each epoch is one batch of them all{split}",
            render::count(rows, "training row")
        ));
    }
    // More devices than a step has rows: some add nothing to it. Every
    // step, or an epoch's last, shorter one.
    let step_rows = batch.min(rows);
    let last_rows = if batch < rows && !rows.is_multiple_of(batch) { rows % batch } else { step_rows };
    // A last batch too short for batchnorm is left out: no step of it.
    let left_out = batchnorm_leaves_out(spec.model.batchnorm_needing_rows().is_some(), rows, batch, devices);
    if devices > step_rows && step_rows > 0 {
        notes.push(format!(
            "note: a step's {} {} {} of the {devices} devices without rows: they step on a copy of a row at \
             weight 0, adding nothing",
            render::count(step_rows, "row"),
            if step_rows == 1 { "leaves" } else { "leave" },
            devices - step_rows
        ));
    } else if devices > last_rows && last_rows > 0 && left_out.is_none() {
        notes.push(format!(
            "note: an epoch's last step, of {}, leaves {} of the {devices} devices without rows: they step on a \
             copy of a row at weight 0, adding nothing",
            render::count(last_rows, "row"),
            devices - last_rows
        ));
    }
    // A step ends with its epoch: accumulating more batches than an epoch
    // has makes each epoch one optimizer step.
    let accumulate = spec.train.accumulate.value;
    let batches = data.train.len().div_ceil(batch.max(1));
    if accumulate > 1 && accumulate > batches {
        notes.push(format!(
            "note: accumulate = {accumulate} is more than the {batches} batch{} of an epoch: each epoch is one \
             optimizer step",
            if batches == 1 { "" } else { "es" }
        ));
    }
    notes.extend(left_out);
    if let (Some(names), Labels::Classes(train), Labels::Classes(valid)) =
        (data.class_names(), &data.train.labels, &data.valid.labels)
    {
        let trained: std::collections::BTreeSet<u32> = train.iter().copied().collect();
        let unseen: std::collections::BTreeSet<u32> = valid.iter().copied().filter(|c| !trained.contains(c)).collect();
        for class in unseen {
            notes.push(format!(
                "note: class `{}` is only in the validation rows: the model never sees it in training (a larger \
                 `split`, another `seed` or more rows of it would)",
                render::shown(&names[class as usize])
            ));
        }
        // Spreadsheets and pandas write these for a missing label; KynML trains what is written.
        for name in names.iter().filter(|n| kynml_core::data::looks_missing(n)) {
            notes.push(format!(
                "note: class `{}` of `{}` reads like a missing-value marker and trains as a class of its own: drop \
                 or fill those rows if their label is missing",
                render::shown(name),
                render::shown(&data.info.target)
            ));
        }
    }
    notes
}

/// A schedule that does not run as written: a warmup longer than the run
/// (the rate never reaches the optimizer's, the schedule never starts), or
/// a rate that falls below what a 32-bit float holds (the weights stop
/// changing, silently).
fn schedule_notes(t: &kynml_core::spec::types::TrainSpec) -> Vec<String> {
    use kynml_core::train::schedule::lr_at;
    let Some(scheduler) = t.scheduler.as_ref().map(|s| &s.value) else { return Vec::new() };
    let (base, epochs) = (t.optimizer.value.lr(), t.epochs.value);
    let mut notes = Vec::new();
    if scheduler.warmup == epochs && epochs > 0 {
        notes.push(format!(
            "note: `warmup = {}` is as long as the run: the learning rate reaches the optimizer's {base} only in its \
             last epoch, and the schedule after the warmup never starts",
            scheduler.warmup,
        ));
    } else if scheduler.warmup > epochs && epochs > 0 {
        notes.push(format!(
            "note: `warmup = {}` is longer than the run's {}: the learning rate climbs only to {:.3e} of the \
             optimizer's {base}, and the schedule after the warmup never starts",
            scheduler.warmup,
            render::count(epochs, "epoch"),
            lr_at(base, Some(scheduler), epochs - 1)
        ));
    }
    // The first epoch from which every rate to the run's end is below f32's
    // range (a cosine touching 0 and climbing again is not one, nor one that
    // ends at its `eta_min` of 0, as it is meant to).
    let cosine = matches!(scheduler.kind, kynml_core::spec::types::SchedulerKind::Cosine { .. });
    let tiny = |e: usize| {
        let lr = lr_at(base, Some(scheduler), e);
        (lr as f32) < f32::MIN_POSITIVE && !(cosine && lr == 0.0)
    };
    let from = (epochs.saturating_sub(1_000_000)..epochs).rev().take_while(|&e| tiny(e)).last();
    if let Some(e) = from.filter(|_| base > 0.0) {
        notes.push(format!(
            "note: the scheduler's learning rate falls to {:.1e} at epoch {}, below what a 32-bit float holds: \
             from there the weights stop changing",
            lr_at(base, Some(scheduler), e),
            e + 1
        ));
    }
    notes
}

/// With a batchnorm that needs rows (one value a channel a row: plain
/// features, not a convolution's map), a last batch that leaves a device
/// fewer than 2 rows is left out of each epoch (as PyTorch's `drop_last`): said, with the
/// nearest batch size that leaves none out.
fn batchnorm_leaves_out(needs_rows: bool, rows: usize, batch: usize, devices: usize) -> Option<String> {
    let least = 2 * devices.max(1);
    let short = |b: usize| rows > b && (1..least).contains(&(rows % b));
    if !needs_rows || !short(batch) {
        return None;
    }
    let last = rows % batch;
    let fits = (1..batch).flat_map(|d| [batch + d, batch - d]).find(|&b| b >= least && b < rows && !short(b));
    let per = if devices > 1 { " on each device" } else { "" };
    Some(format!(
        "note: the last batch of each epoch holds {last} row{}, too few for batchnorm{per}: it is left out (as \
         PyTorch's drop_last), so each epoch trains on {} of the {rows} training rows{}",
        if last == 1 { "" } else { "s" },
        rows - last,
        fits.map_or(String::new(), |b| format!("; `batch = {b}` leaves none out"))
    ))
}

/// The spec's `export` block: what was written, or why nothing was.
/// The spec's `export:`, written: `Ok` with what was written, or `Err`
/// with why not and the command that writes it from the run folder later.
fn export_as_spec_says(file: &SpecFile, model: &export::ExportModel, run: &Path) -> Option<Result<String, String>> {
    let e = file.spec.export.as_ref()?;
    let path = file.resolve(&e.path.value);
    let run = shell_quote(&run.display().to_string());
    // A format no native engine writes (torchscript, in the users' specs) is
    // a setting that does not apply, said as "what runs" said it: the run
    // goes on to succeed.
    let format = match Format::from_spec(e.format.value) {
        Ok(format) => format,
        Err(err) => {
            return Some(Ok(format!(
                "export: nothing written to {}: {err}\n  the run folder has the model; for PyTorch: kynml export {run} \
                 --format safetensors --path {}, then python3 scripts/rebuild_in_pytorch.py rebuilds it (its \
                 `rebuild` function)",
                path.display(),
                shell_quote(&path.with_extension("safetensors").display().to_string())
            )))
        }
    };
    Some(match export::write(model, format, &path) {
        Ok(written) => {
            let names: Vec<String> = written.iter().map(|p| p.display().to_string()).collect();
            Ok(format!("export: wrote {}", names.join(" and ")))
        }
        Err(err) => {
            let format = match format {
                Format::Onnx => "onnx",
                Format::Safetensors => "safetensors",
                Format::Burn => "burn",
            };
            Err(format!(
                "error: export: nothing written to {}: {err}\n  the run folder has the model; once the path can be \
                 written: kynml export {run} --format {format} --path {}",
                path.display(),
                shell_quote(&path.display().to_string())
            ))
        }
    })
}

/// Why a run that failed ended before its `epochs`, as its curves say it.
fn ended_by<T>(result: &Result<T, TrainError>, epochs: usize) -> Option<kynml_core::report::curves::Ended> {
    use kynml_core::report::curves::Ended;
    match result {
        Err(TrainError::Interrupted { .. }) => Some(Ended::Interrupted(epochs)),
        Err(TrainError::NonFiniteLoss { .. }) => Some(Ended::NotFinite(epochs)),
        _ => None,
    }
}

/// Where an interrupted epoch stopped: `step` counts batches, and with
/// accumulation a stop waits for the end of an optimizer step, said so.
/// (Not how many batches that step held: an epoch's last step holds what
/// is left, and an epoch of fewer batches than `accumulate` is one step.)
fn stopped_at(step: usize, accumulate: usize) -> String {
    match accumulate {
        0 | 1 => format!("step {step}"),
        n => format!("batch {step}, the end of an optimizer step (`accumulate = {n}`)"),
    }
}

/// `num_workers` and `prefetch` far beyond an epoch's batches (see
/// [`kynml_core::data::loader_within`]): as many as there are batches run,
/// said once (the spec's values are recorded as they ran).
pub fn fit_loader(file: &mut SpecFile, data: &Dataset) {
    let batches = data.train.len().div_ceil(file.spec.train.batch.value.max(1)).max(1);
    let d = &mut file.spec.dataset;
    let asked = (d.num_workers.value, d.prefetch.as_ref().map(|p| p.value));
    let (workers, depth) = kynml_core::data::loader_within(asked.0, asked.1, batches);
    if workers < asked.0 {
        say!(
            "note: num_workers = {}, but an epoch has {batches} batch{}: {workers} worker thread{} run",
            asked.0,
            if batches == 1 { "" } else { "es" },
            if workers == 1 { "" } else { "s" }
        );
        d.num_workers.value = workers;
    }
    match (d.prefetch.as_mut(), asked.1) {
        (Some(p), Some(asked)) if depth < asked => {
            say!("note: prefetch = {asked}, but an epoch has {batches} batches: at most {depth} are prepared ahead");
            p.value = depth;
        }
        // Unwritten, two a worker, cut as a written one is: the queue the
        // loader really holds, said and recorded.
        (None, _) if workers > 0 && depth < workers.saturating_mul(2) => {
            say!(
                "note: an epoch has {batches} batches: at most {depth} are prepared ahead (two a worker would be {})",
                workers.saturating_mul(2)
            );
            d.prefetch = Some(kynml_core::spec::types::Spanned { value: depth, span: d.num_workers.span });
        }
        _ => {}
    }
}

/// Whether a checkpoint's run is stopped under `spec`'s early stopping (as
/// the trainer decides it): one that stopped early stays stopped unless a
/// larger `patience`, or no `early_stop`, lets it go on; one that had not
/// stopped is stopped where a `patience` lowered since is used up already.
pub(crate) fn still_stopped(spec: &kynml_core::spec::types::Spec, state: &LoopState) -> bool {
    spec.train.early_stop.as_ref().zip(state.early_stop.as_ref()).is_some_and(|(rule, saved)| {
        let mut stopper = EarlyStopper::new(&rule.value);
        stopper.restore(saved);
        stopper.exhausted()
    })
}

/// A note when the checkpoint trained with another batch, accumulation or
/// device count than `spec` on `devices` (said by train and check alike;
/// `None` when the count is not known here: `cuda:all` on a machine
/// without CUDA), or, where this run's `device` is known, on another kind
/// of device or in another precision.
pub(crate) fn batching_changed(
    spec: &kynml_core::spec::types::Spec,
    devices: Option<usize>,
    device: Option<&kynml_backend::Device>,
    state: &LoopState,
) -> Option<String> {
    let t = &spec.train;
    let mut changed = Vec::new();
    if let Some(then) = state.batching {
        let devices = devices.unwrap_or(then.devices);
        let now = kynml_core::train::resume::Batching { batch: t.batch.value, accumulate: t.accumulate.value, devices };
        changed = then.differences(&now);
    }
    if let (Some(then), Some(device)) = (&state.ran, device) {
        let precision = kynml_core::train::precision::plan(t, device).compute.name().to_string();
        let now = kynml_core::train::resume::Ran { device: kynml_core::train::device_kind(device), precision };
        changed.extend(then.difference(&now));
    }
    (!changed.is_empty()).then(|| {
        format!(
            "note: the checkpoint trained with {}: the run goes on from where it stopped, in this run's steps, and \
             is no longer the run an uninterrupted one would have been",
            changed.join(", ")
        )
    })
}

/// Where a checkpoint written inside an epoch goes on: `, epoch 4 goes on
/// after 640 of its 1,200 rows`; empty for one written at an epoch's end.
pub(crate) fn partway(spec: &kynml_core::spec::types::Spec, data: &Dataset, state: &LoopState) -> String {
    // An interrupted epoch goes on from the first row it did not take.
    state.partial.as_ref().map_or(String::new(), |p| {
        let rows = p.rows.unwrap_or(p.steps * spec.train.batch.value).min(data.train.len());
        format!(", epoch {} goes on after {rows} of its {} rows", state.epoch + 1, data.train.len())
    })
}

/// The checkpoint to resume from, and the lock on the checkpoint path that
/// the run holds to its end ([`SpecFile::resume_plan`]), with what the
/// choice means said: what `--fresh` will replace, and each refusal with
/// the command that gets past it.
/// Where the spec differs from a checkpoint it cannot resume, located as
/// every other problem of the spec is (a line of its own, after the error);
/// empty where the spec is not the cause.
pub(crate) fn mismatch_location(file: &SpecFile, e: &ResumeError) -> String {
    let at = |span: kynml_core::spec::types::Span, what: &str| {
        let (line, col) = kynml_core::spec::line_col(&file.source, span.start);
        format!("\n  {}:{line}:{col}: {what}", file.path.display())
    };
    match e {
        ResumeError::ModelMismatch { .. } => at(file.spec.model.name.span, "this spec's model block"),
        ResumeError::OptimizerMismatch { .. } => at(file.spec.train.optimizer.span, "this spec's optimizer"),
        ResumeError::LossMismatch { .. } => at(file.spec.train.loss.span, "this spec's loss"),
        _ => String::new(),
    }
}

fn resume_plan(file: &SpecFile, data: &Dataset, fresh: bool) -> Result<ResumePlan, Failure> {
    let Some(path) = file.checkpoint_path() else {
        if fresh {
            say_err!("note: --fresh has no effect: the spec does not checkpoint");
        }
        return Ok(ResumePlan::default());
    };
    let mv = |copy: &Path| {
        format!("`mv {} {}`", shell_quote(&copy.display().to_string()), shell_quote(&path.display().to_string()))
    };
    let plan = file.resume_plan(data, fresh).map_err(|e| match e {
        ResumeError::Unwritable { error, .. } => cannot_checkpoint(file, &path, error),
        // No checkpoint at the path, but older copies beside it: starting
        // over would rotate them away, so it is the person's choice.
        ResumeError::OlderCopy { copy, epoch, .. } => Failure::input(format!(
            "error: {} is missing, but {} holds a whole checkpoint (epoch {epoch}) of an earlier run\n  \
             to resume from it: {}, then this command again\n  \
             to start over: --fresh (its checkpoints will replace the older copies)",
            path.display(),
            copy.display(),
            mv(&copy),
        )),
        e => {
            // Only a damaged file is worth replacing by an older copy: one of
            // another model, optimizer or data refuses the copies alike.
            let damaged = matches!(
                e,
                ResumeError::Checkpoint(CheckpointError::Corrupt { .. } | CheckpointError::Truncated { .. })
            );
            let e = e.to_string() + &mismatch_location(file, &e);
            let fresh = if e.contains("--fresh") {
                ""
            } else {
                "\n  (--fresh ignores it and starts over; its checkpoints then replace it and the older copies)"
            };
            let older =
                damaged.then(|| file.whole_older_copy(&path, data)).flatten().map_or(String::new(), |(copy, epoch)| {
                    format!(
                        "\n  {} is a whole checkpoint (epoch {epoch}): to resume from it instead, {}",
                        copy.display(),
                        mv(&copy)
                    )
                });
            Failure::input(format!("error: cannot resume from {}: {e}{older}{fresh}", path.display()))
        }
    })?;
    if fresh {
        // Given up at the run's first checkpoint, not before: said now.
        // The checkpoint is replaced; its older copies go (they belong to the run given up).
        let there = checkpoint::discarded(&path);
        let copies: Vec<String> = there.iter().filter(|p| **p != path).map(|p| p.display().to_string()).collect();
        let mut said = Vec::new();
        if there.contains(&path) {
            said.push(format!("{} is replaced", path.display()));
        }
        if !copies.is_empty() {
            let (word, verb) = if copies.len() == 1 { ("copy", "is") } else { ("copies", "are") };
            said.push(format!("its older {word} {} {verb} removed", copies.join(", ")));
        }
        if !said.is_empty() {
            say!("note: --fresh starts over: {} when this run writes its first checkpoint", said.join(", and "));
        }
    }
    Ok(plan)
}

/// Checkpoints cannot go to `path`: bad input, said alike by train and check.
pub(crate) fn cannot_checkpoint(file: &SpecFile, path: &Path, e: checkpoint::CheckpointError) -> Failure {
    let message = format!("checkpoints cannot be written to {}: {e}", path.display());
    match &file.spec.train.checkpoint {
        // Located at the spec's `checkpoint = ...`, which names the path.
        Some(c) => {
            let mut problem = kynml_core::spec::Diagnostic::new(c.span, message, "the checkpoint path");
            if matches!(e, checkpoint::CheckpointError::Foreign { .. }) {
                problem =
                    problem.with_help("--fresh starts over but never overwrites a file that is not a KynML checkpoint");
            }
            let summary = "the spec's checkpoint path cannot be used; nothing was trained or written";
            let path = file.path.display().to_string();
            Failure::input(kynml_core::spec::render_with(&path, &file.source, &[problem], summary))
        }
        None => Failure::input(format!("error: {message}")),
    }
}

/// The run's results could not be written to its folder (a full disk, the
/// folder removed) after training: what failed, once, the free space where
/// it would have gone, what was written whole before it, and how to write
/// them again from the checkpoint (older than the end of training where
/// the later writes failed).
/// `held` is the epoch the checkpoint holds, and the last epoch trained.
fn results_unwritten(e: &anyhow::Error, folder: &Path, file: &SpecFile, held: (Option<usize>, usize)) -> Failure {
    let (held, last) = held;
    // Each cause once: an error that names its source is not followed by it again.
    let mut said = String::new();
    for cause in e.chain().map(|c| c.to_string()) {
        if !said.contains(&cause) {
            said += &if said.is_empty() { cause } else { format!(": {cause}") };
        }
    }
    // A file larger than this process may write (`ulimit -f`): the disk's
    // free space is not what stopped it.
    let too_large = e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>().and_then(std::io::Error::raw_os_error) == Some(libc::EFBIG)
            || c.to_string().contains("(os error 27)")
    });
    let free = match file_size_limit().filter(|_| too_large) {
        Some(limit) => format!(
            " (this process may write no file larger than {}: `ulimit -f`)",
            kynml_core::train::memory::bytes(limit)
        ),
        None if too_large => " (a file larger than the file system there takes, as FAT32's 4 GiB)".to_string(),
        None => free_bytes(folder).map_or(String::new(), |b| {
            format!(" ({} free on the disk holding it)", kynml_core::train::memory::bytes(b))
        }),
    };
    // Each file is written whole or not at all: the model, where its
    // weights and their description are there, is the run's to use.
    let model = [export::RUN_WEIGHTS, "model.json"].iter().all(|f| folder.join(f).is_file());
    let written = if model {
        "\n  model.safetensors and model.json were written whole: `kynml predict`, `kynml eval` and `kynml export` \
         read the run folder as it is"
    } else {
        ""
    };
    let again = match file.checkpoint_path().filter(|p| p.is_file()) {
        Some(path) if held.is_some_and(|held| held < last) => format!(
            "\n  {} holds epoch {} of the {last}, the last checkpoint that could be written (the later ones failed, \
             said above): with room made, this goes on from it, training epochs {} to {last} again: {}",
            path.display(),
            held.unwrap_or(0),
            held.unwrap_or(0) + 1,
            continue_here()
        ),
        Some(path) => format!(
            "\n  the trained weights are in the checkpoint {}: with room made, this writes the results from it \
             (nothing is trained again): {}",
            path.display(),
            continue_here()
        ),
        None if model => String::new(),
        None if file.checkpoint_path().is_some() => {
            "\n  no checkpoint could be written either, so the trained weights are not kept anywhere else".to_string()
        }
        None => "\n  the spec does not checkpoint, so the trained weights are not kept anywhere else".to_string(),
    };
    Failure::run(format!(
        "error: training ended, but its results could not be written to {}{free}: {said}{written}{again}",
        folder.display()
    ))
}

/// The largest file this process may write, where a limit is set.
fn file_size_limit() -> Option<u64> {
    let mut limit: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: a zeroed struct that getrlimit fills.
    (unsafe { libc::getrlimit(libc::RLIMIT_FSIZE, &mut limit) } == 0 && limit.rlim_cur != libc::RLIM_INFINITY)
        .then_some(limit.rlim_cur)
}

/// The bytes free to this user on the file system holding `path`.
fn free_bytes(path: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a zeroed struct that statvfs fills.
    (unsafe { libc::statvfs(c.as_ptr(), &mut stat) } == 0).then(|| stat.f_bavail as u64 * stat.f_frsize as u64)
}

/// That the spec's checkpoint and export paths lie outside the run folder
/// given with `--out`: it must start empty and then holds the run's own
/// files, which an export there could replace (`metrics.json` as an
/// export's sidecar), and a checkpoint there would outlive it (the next
/// part of the run goes to another folder).
fn check_outside_run_folder(file: &SpecFile, out: &Path) -> Result<(), Failure> {
    let folder = lexical_absolute(out);
    let mut problems = Vec::new();
    let mut inside = |path: &Path, span, what: &str, other: &str| {
        if lexical_absolute(path).starts_with(&folder) {
            let message = format!("the {what} {} is inside the run folder {}", path.display(), out.display());
            problems.push(kynml_core::spec::Diagnostic::new(span, message, format!("the {what}")).with_help(format!(
                "a run folder holds only the run's own files (the model among them: model.safetensors, model.json \
                 and model.mpk); {other}"
            )));
        }
    };
    if let (Some(c), Some(path)) = (&file.spec.train.checkpoint, file.checkpoint_path()) {
        inside(&path, c.span, "checkpoint path", "choose a checkpoint path outside it, or another --out");
    }
    if let Some(e) = &file.spec.export {
        let other = "choose an export path outside it, or write the export from the run folder afterwards: \
                     `kynml export RUN --format FORMAT --path PATH`";
        inside(&file.resolve(&e.path.value), e.path.span, "export path", other);
    }
    if problems.is_empty() {
        return Ok(());
    }
    let summary = "the spec writes into the run folder; nothing was trained or written";
    Err(Failure::input(kynml_core::spec::render_with(
        &file.path.display().to_string(),
        &file.source,
        &problems,
        summary,
    )))
}

/// `path` made absolute against the working folder, with `.` and `..`
/// taken away by its components alone (the folder may not exist yet).
fn lexical_absolute(path: &Path) -> PathBuf {
    let path = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    push_lexically(PathBuf::new(), path.components())
}

/// `base` with `parts` appended, `.` passed over and `..` taking a folder off.
fn push_lexically<'a>(mut base: PathBuf, parts: impl IntoIterator<Item = std::path::Component<'a>>) -> PathBuf {
    for part in parts {
        match part {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                base.pop();
            }
            other => base.push(other),
        }
    }
    base
}

/// That the spec's `export:` path holds nothing but an earlier export of its format.
pub(crate) fn check_export_target(file: &SpecFile) -> Result<(), Failure> {
    if let Some(e) = &file.spec.export {
        if let Ok(format) = Format::from_spec(e.format.value) {
            let path = file.resolve(&e.path.value);
            let keep = file.spec.train.checkpoint.as_ref().map_or(1, |c| c.value.keep);
            let checkpoint = file.checkpoint_path().and_then(|c| clashes_with_checkpoint(&path, format, &c, keep));
            let checked = match checkpoint {
                Some(reason) => Err(reason),
                None => export::check_target(format, &path)
                    .and_then(|()| export::check_writable(&path))
                    .map_err(|err| err.to_string()),
            };
            checked.map_err(|err| export_path_problem(file, err))?;
        }
    }
    Ok(())
}

/// That the spec's export can take the sidecar beside its path, known once
/// the data is read (its normalisation and names are the model's): a burn
/// and a safetensors export of one name share a sidecar, and one that
/// describes another model is refused now rather than after training.
pub(crate) fn check_export_sidecar(file: &SpecFile, data: &Dataset) -> Result<(), Failure> {
    let Some(e) = &file.spec.export else { return Ok(()) };
    let Ok(format) = Format::from_spec(e.format.value) else { return Ok(()) };
    let model = export::skeleton(&file.spec.model, &data.info, file.spec.train.loss.value);
    export::check_sidecar(&model, format, &file.resolve(&e.path.value))
        .map_err(|err| export_path_problem(file, err.to_string()))
}

/// `err`, located at the spec's export `path = ...`.
fn export_path_problem(file: &SpecFile, err: String) -> Failure {
    let span = file.spec.export.as_ref().map(|e| e.path.span).unwrap_or_default();
    let problem = kynml_core::spec::Diagnostic::new(span, err, "the export path");
    let summary = "cannot export as the spec says; nothing was trained or written";
    Failure::input(kynml_core::spec::render_with(&file.path.display().to_string(), &file.source, &[problem], summary))
}

/// Why an export to `path` in `format` (or its `.json` sidecar: ONNX has
/// none) would fall on the spec's checkpoint at `checkpoint` or one of the
/// `keep - 1` older copies its rotation writes (`checkpoint.1`, ...):
/// `None` when it would not. Links are followed where the folders exist.
fn clashes_with_checkpoint(path: &Path, format: Format, checkpoint: &Path, keep: usize) -> Option<String> {
    use std::os::unix::ffi::OsStrExt;
    let checkpoint = resolved(checkpoint);
    let taken = |p: &Path| {
        let p = resolved(p);
        if p == checkpoint {
            return Some("the spec's checkpoint path".to_string());
        }
        let (name, folder) = (checkpoint.file_name()?.as_bytes(), checkpoint.parent()?);
        let number = p.file_name()?.as_bytes().strip_prefix(name)?.strip_prefix(b".")?;
        let n: usize =
            std::str::from_utf8(number).ok().filter(|n| n.bytes().all(|b| b.is_ascii_digit()))?.parse().ok()?;
        (p.parent() == Some(folder) && (1..keep).contains(&n))
            .then(|| format!("the older copy {} that the spec's checkpoint rotation keeps", p.display()))
    };
    let replaces = "the export and the checkpoint would replace each other; choose another export path";
    if let Some(what) = taken(path) {
        return Some(format!("{} is {what}: {replaces}", path.display()));
    }
    let sidecar = path.with_extension("json");
    match taken(&sidecar) {
        Some(what) if format != Format::Onnx => {
            Some(format!("the export's sidecar {} is {what}: {replaces}", sidecar.display()))
        }
        _ => None,
    }
}

/// `path` made absolute, with links followed in the part of it that
/// exists and `.` and `..` taken away lexically in the rest.
fn resolved(path: &Path) -> PathBuf {
    let path = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    // The longest leading part that exists, whose links and `..` the system resolves.
    let parts: Vec<_> = path.components().collect();
    let mut known = parts.len();
    while known > 0 && !parts[..known].iter().collect::<PathBuf>().exists() {
        known -= 1;
    }
    let base: PathBuf = parts[..known].iter().collect();
    push_lexically(base.canonicalize().unwrap_or(base), parts[known..].iter().copied())
}

/// [`continue_command`] for this process's own command line.
fn continue_here() -> String {
    continue_command(std::env::args_os().map(|a| a.to_string_lossy().into_owned()).collect())
}

/// The command that continues an interrupted run from its checkpoint: this
/// one without `--fresh` (which would start over), and with `--out DIR`
/// moved to a folder that does not exist yet, since DIR now holds the part
/// run so far and a run folder must start empty.
fn continue_command(mut args: Vec<String>) -> String {
    args.retain(|a| a != "--fresh");
    elsewhere_command(args)
}

/// Why the run folder (`--out`, else one in `runs`) cannot be made, where
/// it or a folder above it is a file: the message, with the command that
/// runs into a new folder. `None` where nothing stands in the way yet.
fn run_folder_blocked(out: Option<&Path>) -> Option<String> {
    let (written, named) = match out {
        Some(out) => (out, format!("the run folder {}", out.display())),
        None => (Path::new("runs"), "a run folder in runs".to_string()),
    };
    // Its parts (`blocker/` and `blocker/.` are `blocker`, whose metadata
    // a trailing `/` would make fail).
    let folder: PathBuf = written.components().collect();
    let folder = folder.as_path();
    // The nearest of the folder and those above it that exists.
    let found = folder.ancestors().filter(|p| !p.as_os_str().is_empty()).find(|p| std::fs::metadata(p).is_ok())?;
    if std::fs::metadata(found).is_ok_and(|m| m.is_dir()) {
        return None;
    }
    let (what, hint) = match (found == folder, out) {
        (true, Some(_)) => (
            "it is a file, not a folder".to_string(),
            format!(
                "to run into a new folder: {}",
                elsewhere_command(std::env::args_os().map(|a| a.to_string_lossy().into_owned()).collect())
            ),
        ),
        (true, None) => (
            "it is a file, not a folder".to_string(),
            "move the file `runs` away, or name the run folder with --out DIR".to_string(),
        ),
        (false, _) => (
            format!("{} is a file, not a folder", found.display()),
            format!("move the file {} away, or choose another --out", found.display()),
        ),
    };
    Some(format!("error: cannot create {named}: {what}\n  {hint}"))
}

/// This command with `--out DIR` moved to a folder that does not exist yet
/// (`DIR-2`, `DIR-3`, ...).
fn elsewhere_command(mut args: Vec<String>) -> String {
    let free = |dir: &str| {
        let dir = if dir.len() > 1 { dir.trim_end_matches('/') } else { dir };
        (2..).map(|n| format!("{dir}-{n}")).find(|d| !Path::new(d).exists()).unwrap_or_default()
    };
    for i in 0..args.len() {
        if args[i] == "--out" && i + 1 < args.len() {
            args[i + 1] = free(&args[i + 1]);
        } else if let Some(dir) = args[i].strip_prefix("--out=") {
            args[i] = format!("--out={}", free(dir));
        }
    }
    args.iter().map(|a| shell_quote(a)).collect::<Vec<_>>().join(" ")
}

/// `a` as a POSIX shell reads it back: bare when it holds only safe
/// characters, else in single quotes.
fn shell_quote(a: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "_./:=,@%+-".contains(c);
    if !a.is_empty() && a.chars().all(safe) {
        a.to_owned()
    } else {
        format!("'{}'", a.replace('\'', "'\\''"))
    }
}

fn write_inputs(run_dir: &RunDir, file: &SpecFile, data: &kynml_core::data::Dataset) -> anyhow::Result<()> {
    run_dir.write_text("spec.kyn", file.as_written())?;
    run_dir.write_json("spec.resolved.json", &kynml_core::spec::resolved(&file.spec))?;
    run_dir.write_data_info(&data.info)?;
    Ok(())
}

fn spec_stem(path: &Path) -> String {
    path.file_stem().map_or_else(|| "run".into(), |s| s.to_string_lossy().into_owned())
}

/// Whether a run on `kind` tunes and compiles its GPU kernels in its first
/// steps: a GPU backend with an empty kernel cache, or none (3 to 4 minutes
/// on an H100, when a bar would otherwise stand still at 0).
pub(crate) fn tunes_kernels(kind: &kynml_backend::DeviceKind, cache: Option<&CacheState>) -> bool {
    !matches!(kind, kynml_backend::DeviceKind::Cpu { .. })
        && matches!(cache, Some(CacheState::On { files: 0, .. } | CacheState::Off { .. }))
}

/// What a first run on a GPU backend waits for, before its first step.
pub(crate) const TUNING_KERNELS: &str = "tuning and compiling GPU kernels (minutes on a first run)";

/// What the first steps of a run on a GPU backend wait for, said on the
/// progress bar until the first step ends (see [`tunes_kernels`]). `None`
/// on the CPU.
pub(crate) fn first_steps_note(kind: &kynml_backend::DeviceKind, cache: Option<&CacheState>) -> Option<&'static str> {
    let gpu = !matches!(kind, kynml_backend::DeviceKind::Cpu { .. });
    gpu.then(|| match tunes_kernels(kind, cache) {
        true => TUNING_KERNELS,
        false => "loading GPU kernels, and tuning and compiling those the cache lacks (minutes when it lacks many)",
    })
}

/// A progress bar per epoch on a terminal, with the time the epoch has
/// taken; one plain line per epoch otherwise (CI logs get no control
/// characters).
struct Progress {
    bar: Option<ProgressBar>,
    tty: bool,
    /// The bar's width, and the room on its line for its message (the
    /// loss, the speed), by the terminal's width when the epoch began.
    width: usize,
    room: usize,
    /// Said on the bar until the run's first step ends (see [`first_steps_note`]).
    first_steps: Option<&'static str>,
    /// The epoch going on and the run's last, and how many epochs this
    /// process finished and the seconds of those after its first: what
    /// the time left is told from.
    epoch: usize,
    epochs: usize,
    finished: (usize, f64),
}

impl Progress {
    fn new(first_steps: Option<&'static str>) -> Self {
        Progress {
            bar: None,
            tty: crate::terminal::draws(),
            width: 0,
            room: 0,
            first_steps,
            epoch: 0,
            epochs: 0,
            finished: (0, 0.0),
        }
    }

    /// An epoch of `seconds` finished.
    fn epoch_finished(&mut self, seconds: f64) {
        let (n, after_first) = self.finished;
        self.finished = (n + 1, if n == 0 { 0.0 } else { after_first + seconds });
    }

    /// The run's time left, told from this epoch's steps so far and the
    /// epochs this process finished (its first left out: it holds a GPU's
    /// kernel tuning); `None` before a step is done.
    fn time_left(&self, step: usize, steps: usize, elapsed: f64) -> Option<f64> {
        if step == 0 || steps == 0 {
            return None;
        }
        let this_epoch = elapsed * steps as f64 / step as f64;
        let steady = match self.finished {
            // The run's first epoch is no pace to go by (a GPU tunes its
            // kernels in it): this one's is, until another has finished.
            (0 | 1, _) => this_epoch,
            (n, after_first) => after_first / (n - 1) as f64,
        };
        let later = self.epochs.saturating_sub(self.epoch) as f64 * steady;
        Some((this_epoch - elapsed).max(0.0) + later)
    }

    fn on_event(&mut self, event: &TrainEvent) {
        match *event {
            TrainEvent::EpochStart { epoch, epochs, steps, .. } if self.tty => {
                (self.epoch, self.epochs) = (epoch, epochs);
                let columns = crate::terminal::columns();
                (self.width, self.room) = bar_layout(columns, epoch, epochs, steps);
                let prefix = format!("{epoch}/{epochs}");
                // Styled and named before it is first drawn (`set_prefix`
                // draws): its first frame was indicatif's default bar.
                // Messages are `{msg}`, fitted here: indicatif's `{wide_msg}`
                // filled the width it read, 80 columns where a terminal
                // gives its rows as 0, and each redraw wrapped on a narrower one.
                let bar = match self.first_steps {
                    // No bar yet: the note and the time it has taken, on one short line.
                    Some(note) => crate::terminal::bar(steps as u64)
                        .with_style(
                            ProgressStyle::with_template("epoch {prefix} {elapsed:>4} {msg}").expect("static template"),
                        )
                        // The last column left free, as the bar's layout leaves it.
                        .with_message(fit(note, columns.saturating_sub("epoch  1234  ".len() + prefix.len()))),
                    None => crate::terminal::bar(steps as u64).with_style(bar_style(self.width)),
                }
                .with_prefix(prefix);
                // Redrawn on its own, so that the time moves while a step
                // (a first one tuning kernels) takes long.
                bar.enable_steady_tick(std::time::Duration::from_millis(250));
                self.bar = Some(bar);
            }
            // Without a terminal (a CI log), the wait is said once, in a plain line.
            TrainEvent::EpochStart { epoch, epochs, .. } if self.first_steps.is_some() => {
                if let Some(note) = self.first_steps.take() {
                    say!("epoch {epoch}/{epochs}: {note} ...");
                }
            }
            TrainEvent::Step { step, loss, samples_per_sec, .. } => {
                if self.first_steps.take().is_some() {
                    if let Some(bar) = &self.bar {
                        bar.set_style(bar_style(self.width));
                        bar.set_message("");
                    }
                }
                if let Some(bar) = &self.bar {
                    bar.set_position(step as u64);
                    if let Some(loss) = loss {
                        // What fits, whole words: the loss, the run's time
                        // left, then the speed.
                        let loss = format!("loss {}", render::number(loss));
                        let left = self
                            .time_left(step, bar.length().unwrap_or(0) as usize, bar.elapsed().as_secs_f64())
                            .filter(|&s| s >= 1.0)
                            .map_or(String::new(), |s| {
                                // Whole seconds: an estimate reads no finer.
                                let s = if s < 60.0 { format!("{s:.0}s") } else { render::duration(s) };
                                format!("  ~{s} left")
                            });
                        let all = format!("{loss}{left}  {samples_per_sec:.0} samples/s");
                        let message = [all, format!("{loss}{left}"), loss].into_iter().find(|m| m.len() <= self.room);
                        bar.set_message(message.unwrap_or_default());
                    }
                }
            }
            TrainEvent::EpochEnd(record) => {
                self.epoch_finished(record.seconds);
                let line = epoch_line(record);
                if let Some(bar) = self.bar.take() {
                    bar.finish_and_clear();
                }
                say!("{line}");
            }
            TrainEvent::EarlyStop { epoch, best_epoch: Some(best) } => {
                say!("early stop at epoch {epoch}: no improvement since epoch {best}");
            }
            TrainEvent::EarlyStop { epoch, best_epoch: None } => {
                say!(
                    "early stop at epoch {epoch}: the validation loss was not a finite number in any epoch; the last \
                     weights are kept"
                );
            }
            TrainEvent::Resumed { epoch, history, .. } => {
                if let Some(last) = history.last() {
                    say!("resumed after epoch {epoch}; it ended with:\n{}", epoch_line(last));
                }
            }
            TrainEvent::CheckpointSaved { epoch, path, seconds } => {
                say!("checkpoint: epoch {epoch} -> {} (the loop waited {:.1} ms)", path.display(), seconds * 1e3);
            }
            TrainEvent::CheckpointFailed { ref error } => {
                self.finish();
                // A file-size limit (`ulimit -f`) is said as that limit.
                let limit = match file_size_limit().filter(|_| error.contains(&format!("(os error {})", libc::EFBIG))) {
                    Some(limit) => format!(
                        " (this process may write no file larger than {}: `ulimit -f`)",
                        kynml_core::train::memory::bytes(limit)
                    ),
                    None => String::new(),
                };
                say_err!(
                    "warning: a checkpoint write failed: {error}{limit}\n  the run goes on without it; a checkpoint \
                     already at the path is left whole"
                );
            }
            _ => {}
        }
    }

    fn finish(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}

/// `(bar width, room for the message)` of an epoch's bar on a terminal
/// `columns` wide: the bar shrinks (to 5) before the message loses its
/// speed (about 30 columns), and the message is never wider than its room.
fn bar_layout(columns: usize, epoch: usize, epochs: usize, steps: usize) -> (usize, usize) {
    let digits = |n: usize| n.to_string().len();
    // `epoch 2/4 [` + `] 157/157 ` + `  1s ` (a line one short of the
    // terminal's width: a full one wraps on some terminals).
    let fixed = "epoch ".len() + digits(epoch) + 1 + digits(epochs) + 2 + 2 + 2 * digits(steps) + 1 + 1 + 4 + 1 + 1;
    let free = columns.saturating_sub(fixed);
    let width = free.saturating_sub(32).clamp(5, 30);
    (width, free.saturating_sub(width))
}

/// `text`, cut to `room` characters (its last one then `…`).
fn fit(text: &str, room: usize) -> String {
    if text.chars().count() <= room {
        return text.to_string();
    }
    let kept: String = text.chars().take(room.saturating_sub(1)).collect();
    if room == 0 {
        kept
    } else {
        kept + "…"
    }
}

/// An epoch's bar of `width` columns: its steps, the time it has taken, and the loss.
fn bar_style(width: usize) -> ProgressStyle {
    ProgressStyle::with_template(&format!("epoch {{prefix}} [{{bar:{width}}}] {{pos}}/{{len}} {{elapsed:>4}} {{msg}}"))
        .expect("static template")
        .progress_chars("=> ")
}

fn epoch_line(r: &EpochRecord) -> String {
    let mut metrics: Vec<String> = r.metrics.iter().map(|(k, v)| format!("{k} {}", render::number(*v))).collect();
    if let Some(scale) = r.loss_scale {
        // Powers of two up to fp16's range read whole; a scale written far
        // beyond it (`init=1e30`) in exponent form, not as 30 digits.
        let scale = if (1e-3..1e7).contains(&scale) { format!("{scale}") } else { format!("{scale:.3e}") };
        metrics.push(format!("loss_scale {scale}  skipped {}", r.skipped_steps));
    }
    if let Some(norm) = r.grad_norm {
        metrics.push(format!("grad_norm {}", render::number(norm)));
    }
    // A resumed run's earlier epochs come from the checkpoint, without timings.
    let timing = if r.seconds.is_nan() {
        String::new()
    } else {
        // An epoch resumed with its validation alone left took no step here.
        let speed = if r.samples_per_sec.is_nan() {
            "no step".to_string()
        } else {
            format!("{:.0} samples/s", r.samples_per_sec)
        };
        format!("  {speed}  {}", render::duration(r.seconds))
    };
    // Every step skipped on overflow: no loss was trained on (not a divergence).
    let train_loss =
        if r.train_loss.is_nan() && r.skipped_steps > 0 { "-".to_string() } else { render::number(r.train_loss) };
    // A learning rate of 0 (a schedule's last step, `lr=0`) as 0, not `0.00e0`.
    let lr = if r.lr == 0.0 { "0".to_string() } else { format!("{:.2e}", r.lr) };
    format!(
        "epoch {:>3}  lr {lr}  train_loss {train_loss}  val_loss {}  {}{timing}",
        r.epoch,
        render::number(r.val_loss),
        metrics.join("  "),
    )
}

/// How a resumed run's final line says where it resumed: after `done`
/// epochs, `now` of them trained by this run, the first of them only in
/// part when the checkpoint was written `inside` it.
fn resumed_at(done: usize, now: usize, inside: bool) -> String {
    match (done, inside) {
        // No epoch done: the checkpoint was written inside the first.
        (0, _) => " (resumed inside epoch 1)".to_string(),
        (done, true) => format!(" ({now} in this run, after resuming inside epoch {})", done + 1),
        (done, false) => format!(" ({now} in this run, after resuming at {done})"),
    }
}

/// From here on, the lines said for a person (`say!`) go to standard
/// error: standard output holds a command's data alone.
pub(crate) fn stdout_holds_data() {
    ctrl_c::stdout_holds_data();
}

/// `println!` for a line said for a person: on standard error once
/// standard output holds data ([`stdout_holds_data`]).
macro_rules! tell {
    () => { $crate::train::tell_line(format_args!("")) };
    ($($t:tt)*) => { $crate::train::tell_line(format_args!($($t)*)) };
}
pub(crate) use tell;

/// What [`tell!`] writes.
pub(crate) fn tell_line(line: std::fmt::Arguments) {
    ctrl_c::write_line(1, line);
}

/// Ctrl-C while training: the first stops after the step in progress (with a
/// checkpoint when the spec checkpoints), the second quits at once.
mod ctrl_c {
    use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
    use std::sync::{Arc, OnceLock};

    static STOP: OnceLock<Arc<AtomicBool>> = OnceLock::new();
    /// The first signal that asked the run to stop.
    static SIGNAL: AtomicI32 = AtomicI32::new(0);
    /// Who sent it (0 for the terminal's Ctrl-C) and when, in monotonic
    /// nanoseconds: GNU `timeout` sends its signal twice, to the run and
    /// then to its process group, microseconds apart; one request, not two.
    static FIRST_FROM: AtomicI32 = AtomicI32::new(-1);
    static FIRST_AT: AtomicU64 = AtomicU64::new(0);
    /// A second signal of the same kind from the same sender sooner than
    /// this is the first one's echo (two presses of Ctrl-C are further apart).
    const ECHO_NS: u64 = 50_000_000;
    /// Whether the spec checkpoints: what a second signal's message says.
    static CHECKPOINTS: AtomicBool = AtomicBool::new(false);
    /// Training has ended and its results are being written: a signal
    /// then lets them be finished (a second quits at once).
    static AFTER_TRAINING: AtomicBool = AtomicBool::new(false);

    /// Training has ended: a signal from here on stops the run once its
    /// results are written.
    pub fn training_ended() {
        AFTER_TRAINING.store(true, Ordering::SeqCst);
    }

    /// The signal that asked the run to stop, as its message names it.
    pub fn signal_name() -> Option<&'static str> {
        match SIGNAL.load(Ordering::SeqCst) {
            0 => None,
            libc::SIGTERM => Some("SIGTERM"),
            libc::SIGHUP => Some("SIGHUP"),
            libc::SIGUSR1 => Some("SIGUSR1"),
            libc::SIGPIPE => None,
            _ => Some("Ctrl-C"),
        }
    }
    /// Whether a write of the run's output failed, other than to a pipe
    /// whose reader is gone: the run stopped for it (status 1).
    static OUTPUT_FAILED: AtomicBool = AtomicBool::new(false);
    /// Whether a signal has come.
    static SIGNALLED: AtomicBool = AtomicBool::new(false);
    /// Whether progress is drawn on standard error (read by the handler,
    /// which may not ask).
    static DRAWS: AtomicBool = AtomicBool::new(false);
    /// Whether a step (or a resumed epoch's validation) has ended: before
    /// that there is nothing new to checkpoint, and a signal quits at once.
    static STEPPED: AtomicBool = AtomicBool::new(false);

    /// A step has ended.
    pub fn stepped() {
        STEPPED.store(true, Ordering::Relaxed);
    }
    /// Standard output holds a command's data alone (`bench --json -`):
    /// the lines said for a person go to standard error.
    static STDOUT_HOLDS_DATA: AtomicBool = AtomicBool::new(false);

    /// From here on, lines said for a person go to standard error.
    pub fn stdout_holds_data() {
        STDOUT_HOLDS_DATA.store(true, Ordering::SeqCst);
    }

    /// Installs the handler of Ctrl-C (SIGINT) and of SIGTERM (how a
    /// cluster's scheduler or `kill` ends a job, with a grace period before
    /// SIGKILL) and returns the flag they set. SIGHUP (the terminal or ssh
    /// session closed) and SIGUSR1 (Slurm's `--signal=USR1@SECONDS`
    /// warning before a job's time runs out) stop the run the same way,
    /// where they would end it (their default): under `nohup`, which
    /// ignores SIGHUP, it is still ignored. So is Ctrl-C where the run
    /// inherits it ignored, as a script's `kynml train ... &` does (the
    /// shell's way of keeping a background job out of the terminal's
    /// Ctrl-C, which Python's KeyboardInterrupt respects too).
    pub fn flag(checkpoints: bool) -> Arc<AtomicBool> {
        CHECKPOINTS.store(checkpoints, Ordering::SeqCst);
        DRAWS.store(crate::terminal::draws(), Ordering::SeqCst);
        let flag = STOP.get_or_init(|| Arc::new(AtomicBool::new(false))).clone();
        // A write to a pipe whose reader is gone fails (EPIPE) instead of
        // killing the run mid-step: `write_line` then stops it cleanly.
        // SAFETY: setting a signal's disposition; no handler runs.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
        // SAFETY: the handler only reads an initialised OnceLock (an atomic
        // load), touches atomics and calls clock_gettime(2), write(2) and
        // _exit(2), which are async-signal-safe. SA_RESTART as `signal`
        // gives on Linux; SA_SIGINFO for the sender.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as *const () as libc::sighandler_t;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(libc::SIGTERM, &action, std::ptr::null_mut());
            for signal in [libc::SIGINT, libc::SIGHUP, libc::SIGUSR1] {
                let mut now: libc::sigaction = std::mem::zeroed();
                let read = libc::sigaction(signal, std::ptr::null(), &mut now);
                if read == 0 && now.sa_sigaction == libc::SIG_DFL {
                    libc::sigaction(signal, &action, std::ptr::null_mut());
                }
            }
        }
        flag
    }

    /// Writes `line` and a line end to `fd` (1 or 2). Where that fails
    /// before training starts, it is the error a failed `println!` is (exit
    /// 1, said by main's hook). Once training has started, that stream goes
    /// to /dev/null (and the other with it where both are one file, as
    /// under `2>&1 | tee`) and the run stops after its step, with its
    /// checkpoint, as after SIGHUP: status 141 (SIGPIPE's) for a pipe whose
    /// reader is gone, 1 for another failure, said on the other stream.
    pub fn write_line(fd: i32, line: std::fmt::Arguments) {
        use std::io::Write;
        let fd = if STDOUT_HOLDS_DATA.load(Ordering::SeqCst) { 2 } else { fd };
        let written = if fd == 1 {
            let mut out = std::io::stdout().lock();
            writeln!(out, "{line}").and_then(|()| out.flush())
        } else {
            writeln!(std::io::stderr().lock(), "{line}")
        };
        let Err(error) = written else { return };
        let stream = if fd == 1 { "stdout" } else { "stderr" };
        let Some(stop) = STOP.get() else { panic!("failed printing to {stream}: {error}") };
        if error.kind() == std::io::ErrorKind::BrokenPipe {
            let _ = SIGNAL.compare_exchange(0, libc::SIGPIPE, Ordering::SeqCst, Ordering::SeqCst);
        } else {
            OUTPUT_FAILED.store(true, Ordering::SeqCst);
        }
        let other = 3 - fd;
        // SAFETY: fstat(2) on descriptors this process owns; the stat
        // structs are plain data.
        let shared = unsafe {
            let (mut a, mut b): (libc::stat, libc::stat) = (std::mem::zeroed(), std::mem::zeroed());
            libc::fstat(fd, &mut a) == 0
                && libc::fstat(other, &mut b) == 0
                && (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)
        };
        if !shared && error.kind() != std::io::ErrorKind::BrokenPipe {
            let name = if fd == 1 { "output" } else { "error" };
            let said = format!(
                "error: cannot write to standard {name}: {error}; a run still training stops after its step, with \
                 a checkpoint where the spec checkpoints\n"
            );
            let _ = if fd == 1 {
                std::io::stderr().write_all(said.as_bytes())
            } else {
                std::io::stdout().write_all(said.as_bytes())
            };
        }
        to_dev_null(if fd == 1 { [true, shared] } else { [shared, true] });
        stop.store(true, Ordering::SeqCst);
    }

    /// Points standard output (`[0]`) and error (`[1]`), where asked, at
    /// /dev/null. Async-signal-safe: the SIGHUP handler calls it.
    fn to_dev_null(which: [bool; 2]) {
        // SAFETY: open(2), dup2(2) and close(2) on descriptors this process
        // owns; all three are async-signal-safe.
        unsafe {
            let null = libc::open(c"/dev/null".as_ptr(), libc::O_WRONLY);
            if null >= 0 {
                for (fd, asked) in [1, 2].into_iter().zip(which) {
                    if asked {
                        libc::dup2(null, fd);
                    }
                }
                libc::close(null);
            }
        }
    }

    fn monotonic_ns() -> u64 {
        let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: a valid timespec to write to; async-signal-safe.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
        (now.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(now.tv_nsec as u64)
    }

    /// The status of a run whose output was lost (141 for a pipe whose
    /// reader is gone, 1 for another failure), where it was.
    pub fn output_lost() -> Option<i32> {
        let pipe = SIGNAL.load(Ordering::SeqCst) == libc::SIGPIPE;
        (pipe || OUTPUT_FAILED.load(Ordering::SeqCst)).then(status)
    }

    /// The exit status of a run a signal stopped: 128 and the signal's
    /// number, as shells report it (130 for Ctrl-C, 143 for SIGTERM).
    pub fn status() -> i32 {
        128 + match SIGNAL.load(Ordering::SeqCst) {
            0 if OUTPUT_FAILED.load(Ordering::SeqCst) => return 1,
            0 => libc::SIGINT,
            signal => signal,
        }
    }

    extern "C" fn on_signal(signal: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
        let Some(stop) = STOP.get() else { return };
        // Before the first step ends there is nothing to checkpoint: waiting
        // for it (on a GPU, minutes of tuning and compiling kernels) outlasts
        // a scheduler's grace period before SIGKILL (30 s for Kubernetes and
        // Slurm), only to save one step. A checkpoint resumed from is left
        // as it was.
        if !STEPPED.load(Ordering::SeqCst) && !AFTER_TRAINING.load(Ordering::SeqCst) {
            let message: &[u8] = b"\nstopped before the run's first step ended: there is nothing new to checkpoint, \
                                   so the run quits at once; run the command again to start it (with a new --out \
                                   folder, if it gave one)\n";
            // SAFETY: write(2) and _exit(2) are async-signal-safe.
            unsafe {
                libc::write(2, message.as_ptr().cast(), message.len());
                libc::_exit(128 + signal)
            };
        }
        // A run already stopping because its output was lost (`2>&1 | tee
        // log`, whose `tee` the same Ctrl-C ended a moment earlier) takes
        // the first signal as the same request, not as a second one that
        // quits at once without the checkpoint: one Ctrl-C, one stop.
        let first_signal = !SIGNALLED.swap(true, Ordering::SeqCst);
        let output_lost = SIGNAL.load(Ordering::SeqCst) == libc::SIGPIPE || OUTPUT_FAILED.load(Ordering::SeqCst);
        if first_signal && output_lost {
            stop.store(true, Ordering::SeqCst);
            return;
        }
        // SAFETY: the kernel passes a valid siginfo_t with SA_SIGINFO.
        let from = if info.is_null() { -1 } else { unsafe { (*info).si_pid() } };
        let now = monotonic_ns();
        if SIGNAL.compare_exchange(0, signal, Ordering::SeqCst, Ordering::SeqCst).is_ok() {
            FIRST_FROM.store(from, Ordering::SeqCst);
            FIRST_AT.store(now, Ordering::SeqCst);
        }
        if stop.swap(true, Ordering::SeqCst) {
            let echo = signal == SIGNAL.load(Ordering::SeqCst)
                && from == FIRST_FROM.load(Ordering::SeqCst)
                && now.saturating_sub(FIRST_AT.load(Ordering::SeqCst)) < ECHO_NS;
            if echo {
                return;
            }
            // The checkpoint file is only ever replaced by a rename, so
            // quitting mid-write leaves the previous one whole.
            let message: &[u8] = if CHECKPOINTS.load(Ordering::SeqCst) {
                b"\nquit at once; a checkpoint at the spec's path, if one was written, is whole: run the command \
                  again to resume from it (with a new --out folder, if it gave one)\n"
            } else {
                b"\nquit at once; the spec does not checkpoint, so what this run trained is not kept\n"
            };
            unsafe {
                libc::write(2, message.as_ptr().cast(), message.len());
                libc::_exit(128 + signal)
            };
        }
        if signal == libc::SIGHUP {
            // The terminal is gone, and with it perhaps a pipe's reader
            // (`| tee log`): later writes there fail, and a failed print
            // ended the run (status 1) before its checkpoint. They go to
            // /dev/null instead; a file keeps its output.
            // SAFETY: fstat(2) and tcgetattr(3) are async-signal-safe; the
            // structs are plain data.
            let gone = |fd: i32| unsafe {
                let mut st: libc::stat = std::mem::zeroed();
                let pipe = libc::fstat(fd, &mut st) == 0 && st.st_mode & libc::S_IFMT == libc::S_IFIFO;
                let mut tty: libc::termios = std::mem::zeroed();
                pipe || libc::tcgetattr(fd, &mut tty) == 0
            };
            to_dev_null([gone(1), gone(2)]);
        }
        let message: &[u8] = if AFTER_TRAINING.load(Ordering::SeqCst) {
            if signal == libc::SIGINT {
                b"\ntraining has ended: writing its results, then stopping; Ctrl-C again quits at once\n"
            } else {
                b"\nsignal after training ended: writing its results, then stopping; a second signal quits at once\n"
            }
        } else if signal == libc::SIGTERM {
            b"\nterminated (SIGTERM): stopping after this step, with a checkpoint where the spec checkpoints; \
              a second signal quits at once\n"
        } else if signal == libc::SIGHUP {
            b"\nhangup (SIGHUP): stopping after this step, with a checkpoint where the spec checkpoints; \
              a second signal quits at once\n"
        } else if signal == libc::SIGUSR1 {
            b"\nSIGUSR1 (a scheduler's warning): stopping after this step, with a checkpoint where the spec \
              checkpoints; a second signal quits at once\n"
        } else {
            b"\nstopping after this step; Ctrl-C again quits at once\n"
        };
        // On a terminal the progress bar's line is cleared and the message
        // written over it (the bar is drawn again below it): after a plain
        // line break its last frame stayed on the screen, its step count
        // at odds with the step the run stopped at.
        // Where progress is drawn (not under `TERM=dumb`, which shows the
        // escape as text). SAFETY: write(2) is async-signal-safe.
        let message = if DRAWS.load(Ordering::SeqCst) {
            unsafe { libc::write(2, b"\r\x1b[2K".as_ptr().cast(), 5) };
            &message[1..]
        } else {
            message
        };
        unsafe { libc::write(2, message.as_ptr().cast(), message.len()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The time left: this epoch's rest by its pace, and the epochs after
    /// it by the finished ones' (the run's first left out where others are).
    #[test]
    fn the_time_left_is_this_epochs_rest_and_the_epochs_after_it() {
        let mut p = Progress::new(None);
        (p.epoch, p.epochs) = (1, 4);
        // A quarter of the first epoch's steps in 2 s: 6 s more, then 3 epochs of 8 s.
        assert_eq!(p.time_left(25, 100, 2.0), Some(30.0));
        assert_eq!(p.time_left(0, 100, 2.0), None);
        // After a first epoch of 100 s, the second's pace: 4 s for half of it.
        p.epoch_finished(100.0);
        (p.epoch, p.epochs) = (2, 4);
        assert_eq!(p.time_left(50, 100, 4.0), Some(4.0 + 2.0 * 8.0));
        // Epoch 1 took 100 s (kernels tuned), epoch 2 took 10 s: the steady epochs' pace.
        p.epoch_finished(10.0);
        (p.epoch, p.epochs) = (3, 4);
        assert_eq!(p.time_left(50, 100, 5.0), Some(5.0 + 10.0));
    }

    #[test]
    fn a_last_batch_batchnorm_cannot_normalise_is_said_with_a_batch_that_keeps_it() {
        // 120 rows in batches of 7: a last batch of 1 row.
        let note = batchnorm_leaves_out(true, 120, 7, 1).unwrap();
        assert!(note.contains("holds 1 row, too few for batchnorm: it is left out"), "{note}");
        assert!(note.contains("trains on 119 of the 120 training rows; `batch = 8` leaves none out"), "{note}");
        assert_eq!(batchnorm_leaves_out(false, 120, 7, 1), None);
        assert_eq!(batchnorm_leaves_out(true, 120, 8, 1), None);
        let note = batchnorm_leaves_out(true, 121, 8, 1).unwrap();
        assert!(note.ends_with("trains on 120 of the 121 training rows; `batch = 9` leaves none out"), "{note}");
        // Two devices: a last batch of 3 rows leaves one of them 1 row.
        let note = batchnorm_leaves_out(true, 123, 8, 2).unwrap();
        assert!(note.contains("holds 3 rows, too few for batchnorm on each device"), "{note}");
        // A batch of every row: nothing left out.
        assert_eq!(batchnorm_leaves_out(true, 5, 8, 1), None);
    }

    fn args(line: &str) -> Vec<String> {
        line.split(' ').map(str::to_owned).collect()
    }

    #[test]
    fn a_note_is_cut_to_its_room() {
        assert_eq!(fit("tuning kernels", 20), "tuning kernels");
        assert_eq!(fit("tuning kernels", 7), "tuning…");
        assert_eq!(fit("tuning", 0), "");
    }

    /// On 50 columns the bar shrinks and the loss keeps its place, the
    /// speed left out; on 80 both fit; never wider than the terminal.
    #[test]
    fn the_bar_fits_the_terminal() {
        let line = |columns: usize| {
            let (width, room) = bar_layout(columns, 2, 4, 157);
            let fixed = "epoch 2/4 [] 157/157   1s ".len() + 1;
            (width, room, fixed + width + room)
        };
        let (width, room, total) = line(50);
        assert_eq!(width, 5);
        assert!(room >= "loss 0.1234".len() && room < "loss 0.1234  14823 samples/s".len(), "{room}");
        assert!(total <= 50, "{total}");
        let (width, room, total) = line(80);
        assert!(width > 5 && room >= "loss 0.1234  14823 samples/s".len() && total <= 80, "{width} {room} {total}");
        let (width, _, total) = line(200);
        assert_eq!(width, 30);
        assert!(total <= 200);
    }

    #[test]
    fn a_resume_inside_the_first_epoch_is_said_so() {
        assert_eq!(resumed_at(0, 3, true), " (resumed inside epoch 1)");
        assert_eq!(resumed_at(2, 3, false), " (3 in this run, after resuming at 2)");
        // A checkpoint taken at epoch 2's step 807: that epoch is finished here, in part.
        assert_eq!(resumed_at(1, 5, true), " (5 in this run, after resuming inside epoch 2)");
    }

    #[test]
    fn the_first_steps_note_says_kernels_are_tuned_on_a_gpu_with_an_empty_cache() {
        use kynml_backend::{DeviceKind, WgpuAdapter, WgpuAdapterKind};
        let gpu = DeviceKind::Wgpu(WgpuAdapter {
            name: "llvmpipe".into(),
            driver: "Mesa".into(),
            kind: WgpuAdapterKind::Cpu,
            index_of_kind: 0,
            shader_f16: true,
        });
        let cpu = DeviceKind::Cpu { threads: 2 };
        let empty = CacheState::On { root: "c".into(), files: 0, bytes: 0 };
        let warm = CacheState::On { root: "c".into(), files: 5, bytes: 1 << 20 };
        let off = CacheState::Off { reason: "asked".into() };
        assert_eq!(first_steps_note(&cpu, Some(&empty)), None);
        assert!(!tunes_kernels(&cpu, Some(&empty)));
        for cold in [Some(&empty), Some(&off)] {
            assert!(tunes_kernels(&gpu, cold));
            let note = first_steps_note(&gpu, cold).unwrap();
            assert!(note.contains("tuning and compiling") && note.contains("minutes"), "{note}");
        }
        for cached in [Some(&warm), None] {
            assert!(!tunes_kernels(&gpu, cached));
            assert_eq!(
                first_steps_note(&gpu, cached),
                Some(
                    "loading GPU kernels, and tuning and compiling those the cache lacks (minutes when it lacks many)"
                )
            );
        }
    }

    #[test]
    fn an_interruption_inside_accumulation_says_batches() {
        assert_eq!(stopped_at(7, 1), "step 7");
        assert_eq!(stopped_at(1004, 4), "batch 1004, the end of an optimizer step (`accumulate = 4`)");
    }

    #[test]
    fn an_epoch_whose_steps_all_overflowed_reads_as_such() {
        // Every step skipped: no loss was trained on, and the rows were
        // still stepped on (the throughput counts them).
        let record: EpochRecord = serde_json::from_value(serde_json::json!({
            "epoch": 2, "lr": 0.01, "train_loss": 0.0, "val_loss": 0.5, "metrics": {},
            "samples_per_sec": 1200.0, "seconds": 0.1, "loss_scale": 4.3e29, "skipped_steps": 3,
        }))
        .unwrap();
        let record = EpochRecord { train_loss: f64::NAN, ..record };
        let line = epoch_line(&record);
        assert!(line.contains("train_loss -  val_loss 0.5000"), "{line}");
        assert!(line.contains("loss_scale 4.300e29  skipped 3") && line.contains("1200 samples/s"), "{line}");
        let scaled = EpochRecord { loss_scale: Some(65536.0), ..record.clone() };
        assert!(epoch_line(&scaled).contains("loss_scale 65536  skipped 3"));
        // Backed off 40 times from 65536: not 25 digits either.
        let tiny = EpochRecord { loss_scale: Some(65536.0 * 0.5f64.powi(40)), ..record.clone() };
        assert!(epoch_line(&tiny).contains("loss_scale 5.960e-8  skipped 3"), "{}", epoch_line(&tiny));
        // An epoch resumed with its validation alone left: no speed (it said 0 samples/s).
        let unstepped = EpochRecord { samples_per_sec: f64::NAN, ..record };
        let line = epoch_line(&unstepped);
        assert!(line.contains("  no step  ") && !line.contains("samples/s"), "{line}");
    }

    #[test]
    fn the_wait_for_batches_says_what_it_is_a_share_of() {
        // 1 s of waiting in 4 s of epochs, evaluation included: the
        // profile's verdict gives its own share, of the steps' time.
        let record: EpochRecord = serde_json::from_value(serde_json::json!({
            "epoch": 1, "lr": 0.01, "train_loss": 0.5, "val_loss": 0.5, "metrics": {},
            "samples_per_sec": 10.0, "seconds": 4.0, "data_wait": 1.0,
        }))
        .unwrap();
        let line = time_and_memory(std::slice::from_ref(&record), None).unwrap();
        assert!(
            line.starts_with("time and memory: waiting for batches 25% of epoch time (evaluation included)"),
            "{line}"
        );
        // The host's peak: the larger of the epochs' and the process's after saving.
        let epoch = EpochRecord { peak_rss: Some(3 << 20), ..record.clone() };
        assert!(time_and_memory(std::slice::from_ref(&epoch), Some(5 << 20))
            .unwrap()
            .ends_with("peak host memory 5 MiB"));
        assert!(time_and_memory(&[epoch], Some(2 << 20)).unwrap().ends_with("peak host memory 3 MiB"));
        // A resume with no epoch left: only this process's peak, said as such.
        let untimed = EpochRecord { data_wait: None, ..record };
        assert_eq!(
            time_and_memory(&[untimed], Some(7 << 20)).as_deref(),
            Some("time and memory: no epoch trained in this process; peak host memory 7 MiB")
        );
        assert_eq!(time_and_memory(&[], None), None);
    }

    #[test]
    fn the_continue_command_drops_fresh_and_moves_out_to_a_new_folder() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("run");
        std::fs::create_dir_all(tmp.path().join("run-2")).unwrap();
        let o = out.display();
        assert_eq!(
            continue_command(args(&format!("kynml train s.kyn --fresh --out {o}/ --epochs 3"))),
            format!("kynml train s.kyn --out {o}-3 --epochs 3")
        );
        assert_eq!(
            continue_command(args(&format!("kynml train s.kyn --out={o}"))),
            format!("kynml train s.kyn --out={o}-3")
        );
        assert_eq!(continue_command(args("kynml train s.kyn")), "kynml train s.kyn");
        assert_eq!(shell_quote("my spec's.kyn"), r"'my spec'\''s.kyn'");
    }
}
