//! `kynml check SPEC`: validate the spec and its data, print the model.

use kynml_core::model::summarize;
use kynml_core::plan::SpecFile;

use crate::args::CheckArgs;
use crate::failure::Failure;
use crate::render;

pub fn run(args: CheckArgs) -> Result<(), Failure> {
    let mut file = SpecFile::load(&args.spec)?;
    // `--device`, as `train --device` applies it.
    let flag = args.device.as_ref().map(|d| match d {
        crate::args::DeviceArg::One(d) => d.name(),
        crate::args::DeviceArg::Set(set) => set.name(),
    });
    let (device, devices) = crate::args::DeviceArg::split(args.device);
    file.apply(&kynml_core::plan::Overrides { device, devices, ..Default::default() });
    // `cuda:all` counted as train counts it (batchnorm's rows a device).
    crate::devices::resolve_all_cuda(&mut file.spec.train);
    // Where `kynml train` would write, `check` looks too: a checkpoint or
    // export path onto another kind of file is refused, as train refuses it.
    // Looked at before the data, and said with the data's problems when
    // both have some: every problem found at once.
    let targets = (|| {
        if let Some(path) = file.checkpoint_path() {
            let keep = file.spec.train.checkpoint.as_ref().map_or(1, |c| c.value.keep);
            kynml_core::checkpoint::check_targets(&path, keep)
                .map_err(|e| crate::train::cannot_checkpoint(&file, &path, e))?;
        }
        crate::train::check_export_target(&file)
    })();
    let (data, _) = match (crate::bench::bench_data(&mut file, args.synthetic), targets) {
        (Ok(data), Ok(())) => data,
        (Ok(_), Err(target)) => return Err(target),
        (Err(data), Ok(())) => return Err(data),
        (Err(data), Err(target)) => {
            return Err(Failure {
                message: format!("{}\n\n{}", target.message.trim_end(), data.message),
                code: data.code,
            })
        }
    };
    // Rows made up for a check (`--synthetic`) are not the model's data.
    if args.synthetic.is_none() {
        crate::train::check_export_sidecar(&file, &data)?;
    }
    // The run's devices; `cuda:all` left unresolved (no CUDA here) counts none.
    let devices = match file.spec.train.devices.as_ref().map(|d| &d.value) {
        Some(DeviceSet::List(list)) => Some(list.len()),
        Some(DeviceSet::AllCuda) => None,
        None => Some(1),
    };
    println!("{}: ok", args.spec.display());
    // A spec may be checked here for another machine: a GPU this one lacks
    // is said, not refused.
    // `devices = [...]` names the GPUs of a data-parallel run; else `device`.
    use kynml_core::spec::types::{DeviceRequest, DeviceSet};
    let gpu = |d: &DeviceRequest| match d {
        DeviceRequest::Cuda(index) => Some(index.unwrap_or(0).saturating_add(1)),
        _ => None,
    };
    // As the spec writes it: a GPU with its index quoted (the name holds a colon).
    let written = |d: &DeviceRequest| match d {
        DeviceRequest::Cuda(Some(_)) => format!("\"{}\"", d.name()),
        _ => d.name(),
    };
    let (setting, needed) = match file.spec.train.devices.as_ref().map(|d| &d.value) {
        Some(DeviceSet::AllCuda) => ("devices = \"cuda:all\"".to_string(), Some(1)),
        Some(DeviceSet::List(list)) => {
            let names: Vec<String> = list.iter().map(written).collect();
            (format!("devices = [{}]", names.join(", ")), list.iter().filter_map(gpu).max())
        }
        None => (format!("device = {}", written(&file.spec.train.device.value)), gpu(&file.spec.train.device.value)),
    };
    if let Some(needed) = needed {
        let seen = match kynml_backend::probe_cuda() {
            kynml_backend::CudaProbe::Available(gpus) => gpus.len(),
            kynml_backend::CudaProbe::Unavailable(_) => 0,
        };
        if needed > seen {
            let here = match seen {
                0 => "this machine has no CUDA GPU".to_string(),
                n => format!("this machine has {n} CUDA GPU{}", if n == 1 { "" } else { "s" }),
            };
            if let Some(flag) = &flag {
                println!("note: `--device {flag}`: {here}; `kynml train --device {flag}` would refuse it here");
            } else {
                println!("note: `{setting}`: {here}; `kynml train` would refuse it here (`--device` overrides it)");
            }
        }
    }
    // A checkpoint already there is the next run's business (its --seed or
    // --fresh decide): said, not refused.
    if let Some(note) = file.pytorch_checkpoint_note() {
        println!("{note}");
    }
    if let Some(path) = file.checkpoint_path() {
        // Tried, and let go at once (where its lock file is, so that check
        // makes none): `train` is refused while another run holds it,
        // whatever is at the path yet.
        if kynml_core::checkpoint::lock_path(&path).is_file() {
            if let Err(e @ kynml_core::checkpoint::CheckpointError::InUse { .. }) = kynml_core::checkpoint::lock(&path)
            {
                println!("note: {e}; `kynml train` is refused until it ends");
            }
        }
        // Whether it is this run's is judged against the spec's data, which
        // made-up rows are not: a verdict on them would be wrong both ways.
        // What does not depend on the data (the file whole, the model,
        // optimizer and loss it was written for) is still judged.
        let found = match args.synthetic {
            Some(_) => {
                let bound = !data.info.categories.is_empty() || data.info.tokens.is_some();
                file.checkpoint_without_data(&path, bound).map(|_| {
                    if path.is_file() {
                        println!(
                            "note: checkpoint {} is there; whether `kynml train` resumes from it is judged against \
                             the spec's data too, which --synthetic does not read (`kynml check` without it says)",
                            path.display()
                        );
                    }
                    None
                })
            }
            None => file.find_checkpoint(&data),
        };
        match found {
            Ok(Some((_, state))) => {
                let epochs = file.spec.train.epochs.value;
                // What `kynml train` would do with it, as train says it.
                let stopped = crate::train::still_stopped(&file.spec, &state);
                let partway = state.partial.is_some() && !stopped;
                let next = if partway && state.epoch >= epochs {
                    // Its weights have taken steps of the next epoch: train refuses it.
                    format!(
                        "written partway through epoch {}, so `kynml train` would refuse it as the model of {epochs} \
                         epoch{} (epochs = {} or more goes on from it; --fresh starts over)",
                        state.epoch + 1,
                        if epochs == 1 { "" } else { "s" },
                        state.epoch + 1
                    )
                } else if stopped {
                    format!(
                        "{}; `kynml train` trains nothing and writes its best model (a larger `patience`, or no \
                         `early_stop`, goes on from it; --fresh starts over)",
                        if state.stopped_early { "stopped early" } else { "the spec's `patience` is used up" }
                    )
                } else if state.epoch >= epochs {
                    "`kynml train` trains nothing and writes its model (raise `epochs` to go on; --fresh starts over)"
                        .into()
                } else {
                    "`kynml train` resumes from it (--fresh starts over)".into()
                };
                let inside = if partway && state.epoch < epochs {
                    crate::train::partway(&file.spec, &data, &state)
                } else {
                    String::new()
                };
                println!("checkpoint {}: {} of {epochs} epochs done{inside}; {next}", path.display(), state.epoch);
                let trains = !stopped && state.epoch < epochs;
                if let Some(note) = crate::train::batching_changed(&file.spec, devices, None, &state).filter(|_| trains)
                {
                    println!("{note}");
                }
            }
            Ok(None) => {}
            Err(e) => println!(
                "note: `kynml train` as written would not resume from {}: {e}{}",
                path.display(),
                crate::train::mismatch_location(&file, &e)
            ),
        }
    }
    let classes = match data.class_names() {
        Some(names) => {
            // The first ones and a count of the rest: 60 long class names
            // made one line of 3,938 characters.
            // ("... 1 more" would be no shorter than the one name).
            let shown = if names.len() <= 13 { names.len() } else { 12 };
            let listed: Vec<String> = names.iter().take(shown).map(|n| render::shown(n)).collect();
            let more = match names.len() - shown {
                0 => String::new(),
                n => format!(", ... {n} more"),
            };
            format!(", {} classes ({}{more})", names.len(), listed.join(", "))
        }
        None => String::new(),
    };
    println!(
        "data {}: {} rows ({} train, {} validation), {}, target `{}`{classes}\n",
        // Made up here: said once, with its seed, before the count of its rows.
        if args.synthetic.is_some() {
            format!("made up (seed {})", file.spec.train.seed)
        } else {
            file.data_path().display().to_string()
        },
        data.train.len() + data.valid.len(),
        data.train.len(),
        data.valid.len(),
        crate::render::inputs(&data),
        render::shown(&data.info.target),
    );
    for note in crate::reading::float_notes(&data) {
        println!("{note}");
    }
    // As `kynml train` says them; `cuda:all` left unresolved (no CUDA here) as one device.
    for note in crate::train::data_notes(&file.spec, &data, devices.unwrap_or(1)) {
        println!("{note}");
    }
    let vocabularies = render::vocabularies(&data.info);
    for line in &vocabularies {
        println!("{line}");
    }
    if !vocabularies.is_empty() {
        println!();
    }
    println!("{}", render::model_table(&summarize(&file.spec.model)));
    let t = &file.spec.train;
    let compute = kynml_core::train::precision::Compute::of(t.precision.value);
    // A step holds at most the training rows, as in `train`.
    let mut spec = file.spec.clone();
    spec.train.batch.value = spec.train.batch.value.min(data.train.len().max(1));
    let estimate = kynml_core::train::memory::estimate(&spec, compute);
    println!("\n{}", render::memory_line(&estimate, &format!(" in {} on a GPU", compute.name())));
    // On the CPU, what the engine there keeps, and the copies saving makes;
    // in fp32 whatever the spec asks (said as `train` says it).
    let on_cpu = kynml_backend::Device::cpu();
    let mut cpu = file.memory_for(&on_cpu, data.train.len(), data.valid.len());
    // A checkpoint there is read and held through the run, as train counts it.
    let resumed = file.checkpoint_path().and_then(|p| std::fs::metadata(p).ok()).filter(|m| m.is_file());
    let resumed = resumed.map_or(0, |m| m.len());
    cpu.resumed = resumed;
    cpu.data = data.host_bytes();
    let cpu_precision = kynml_core::train::precision::plan(t, &on_cpu);
    let cpu_suffix = match cpu_precision.fallback {
        Some(_) => format!(" on the CPU, where {} runs as fp32", compute.name()),
        None => " on the CPU".to_string(),
    };
    println!("{}", render::memory_line(&cpu, &cpu_suffix));
    // A one-device run is checked against the device it would get here, as
    // `train` checks it: said, not refused (the spec may be meant for
    // another machine). A device this machine lacks is said above.
    // A data-parallel run's devices, each as `train` would get it here (none
    // where this machine lacks one, or for `cuda:all` without CUDA).
    let would = |request: DeviceRequest| kynml_backend::would_select(kynml_core::plan::device_choice(request)).ok();
    let run_on: Vec<kynml_backend::Device> = match file.spec.train.devices.as_ref().map(|d| &d.value) {
        None => would(file.spec.train.device.value).into_iter().collect(),
        Some(DeviceSet::List(list)) => list.iter().map(|r| would(*r)).collect::<Option<_>>().unwrap_or_default(),
        Some(DeviceSet::AllCuda) => Vec::new(),
    };
    let here = run_on.first().filter(|_| run_on.len() == 1);
    if let Some(device) = here {
        if let Err(e) = file.check_memory_on(device, &data, resumed) {
            let help = match &e {
                kynml_core::plan::LoadError::DoesNotFit { error, .. } => {
                    error.diagnostics.first().and_then(|d| d.help.clone())
                }
                _ => None,
            };
            println!(
                "note: {e}; `kynml train` would refuse it on this machine{}",
                help.map_or(String::new(), |h| format!(" ({h})"))
            );
        }
    }
    println!(
        "(`kynml train` checks it against the device it picks, in the precision that device runs, before \
         allocating anything)"
    );
    // What `kynml train` would say runs, on the device it would get here:
    // the settings that do not apply as written (`!`) are seen before a run.
    // With the kernel cache `train` would find there (none is made), and the
    // loader cut to an epoch's batches as `train` cuts it (said the same way).
    if let Some(model) = run_on.first().and_then(kynml_backend::Device::model_folder) {
        for note in &kynml_backend::kernel_cache::preview(&model).notes {
            println!("note: {note}");
        }
        // The search level `train` hands CubeCL before its device starts
        // (none starts here).
        if let Some(a) = &file.spec.train.autotune {
            kynml_backend::kernel_cache::set_autotune(kynml_core::plan::tune_level(a.value));
        }
    }
    if !run_on.is_empty() {
        crate::train::fit_loader(&mut file, &data);
        let applied = file.what_runs_on(&run_on);
        println!("\non this machine, {}", render::what_runs(&applied));
    }
    Ok(())
}
