//! Command-line arguments, as typed by the user. They are turned into a
//! checked plan before anything runs.

use std::path::{Path, PathBuf};

use clap::{Args, Parser, Subcommand};
use kynml_core::spec::types::{Autotune, DeviceRequest, DeviceSet, Precision};

#[derive(Parser, Debug)]
#[command(name = "kynml", version, about = "Train .kyn specs natively in Rust")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Where autotune results and compiled GPU kernels are kept between runs
    /// (default: $KYNML_CACHE, else $XDG_CACHE_HOME/kynml, else ~/.cache/kynml).
    #[arg(long, global = true, value_name = "DIR")]
    pub cache: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Train a spec and write a run folder.
    Train(TrainArgs),
    /// Validate a spec (and the data it names) and print the model.
    Check(CheckArgs),
    /// Compare finished runs side by side.
    Report(ReportArgs),
    /// List the devices KynML can use here and the one `auto` picks.
    Devices,
    /// Write a finished run's model in another format.
    Export(ExportArgs),
    /// Predict on the rows of a CSV file with a trained model.
    Predict(PredictArgs),
    /// Score a trained model on a labelled CSV file.
    Eval(EvalArgs),
    /// Measure how fast a spec trains: a warm-up round, then timed rounds.
    Bench(BenchArgs),
    /// Fill the kernel cache for a spec ahead of its runs (tunes and compiles
    /// every kernel an epoch and its validation need), writing nothing else.
    Warmup(WarmupArgs),
}

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// The `.kyn` spec to measure.
    pub spec: PathBuf,
    /// Where to run: auto, cpu, cuda, cuda:N or wgpu (overrides the spec's
    /// `device` and `devices`); several, data-parallel: cuda:0,cuda:1,
    /// cuda:all, or cpu,cpu. [default: the spec's, else auto]
    #[arg(long, value_parser = parse_device_arg)]
    pub device: Option<DeviceArg>,
    /// fp32, tf32, bf16 or fp16 (overrides the spec's `precision`).
    #[arg(long, value_parser = parse_precision)]
    pub precision: Option<Precision>,
    /// Rows per step (overrides the spec's `batch`).
    #[arg(long, allow_negative_numbers = true, value_parser = at_least::<1>)]
    pub batch: Option<u64>,
    /// Steps in each round, the warm-up round included.
    #[arg(long, default_value_t = 50, allow_negative_numbers = true, value_parser = at_least::<1>)]
    pub steps: u64,
    /// Timed rounds after the warm-up round.
    #[arg(long, default_value_t = 3, allow_negative_numbers = true, value_parser = at_least::<1>)]
    pub rounds: u64,
    /// Measure on this many rows of seeded synthetic data shaped for the
    /// spec, instead of reading the spec's data file.
    #[arg(long, value_name = "ROWS", allow_negative_numbers = true, value_parser = at_least::<2>)]
    pub synthetic: Option<u64>,
    /// Update with the optimizer's `fused=true` (adamw, adam, sgd): one
    /// pass over all the parameters, as PyTorch's fused AdamW.
    #[arg(long)]
    pub fused: bool,
    /// off, fast, balanced or full: how hard the GPU backends search for
    /// their fastest kernels (overrides the spec's `autotune`).
    #[arg(long, value_parser = parse_autotune)]
    pub autotune: Option<Autotune>,
    /// Also write the figures as JSON to this file (`-`: standard output, which then holds the JSON alone).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct WarmupArgs {
    /// The `.kyn` spec whose kernels to prepare.
    pub spec: PathBuf,
    /// Where it will run: auto, cpu, cuda, cuda:N or wgpu (overrides the spec's
    /// `device` and `devices`); several, data-parallel, as `train` takes them:
    /// cuda:0,cuda:1, cuda:all, or cpu,cpu. [default: the spec's, else auto]
    #[arg(long, value_parser = parse_device_arg)]
    pub device: Option<DeviceArg>,
    /// fp32, tf32, bf16 or fp16 (overrides the spec's `precision`).
    #[arg(long, value_parser = parse_precision)]
    pub precision: Option<Precision>,
    /// off, fast, balanced or full (overrides the spec's `autotune`).
    #[arg(long, value_parser = parse_autotune)]
    pub autotune: Option<Autotune>,
    /// Warm up on this many rows of seeded synthetic data shaped for the
    /// spec, instead of reading its data file (as `bench --synthetic`): the
    /// real data's row count gives its batch shapes.
    #[arg(long, value_name = "ROWS", allow_negative_numbers = true, value_parser = at_least::<2>)]
    pub synthetic: Option<u64>,
}

#[derive(Args, Debug)]
pub struct ExportArgs {
    /// A run folder written by `kynml train` (or a .safetensors or .mpk export).
    pub model: PathBuf,
    /// onnx, safetensors or burn.
    #[arg(long)]
    pub format: String,
    /// The file to write (safetensors and burn also write a .json sidecar beside it; a burn export is named .mpk).
    #[arg(long)]
    pub path: PathBuf,
}

#[derive(Args, Debug)]
pub struct PredictArgs {
    /// A run folder, or a .safetensors or .mpk export with its .json sidecar.
    pub model: PathBuf,
    /// CSV with the model's feature columns, by name (its target column may be there too), `-` for standard input; or --input.
    #[arg(value_name = "INPUT", required_unless_present = "input", conflicts_with = "input")]
    pub rows: Option<PathBuf>,
    /// The same as INPUT, named.
    #[arg(long, value_name = "INPUT")]
    pub input: Option<PathBuf>,
    /// CSV to write: one row per input row (without it, or with `-`, standard output).
    #[arg(long)]
    pub output: Option<PathBuf>,
    /// Where to run: auto, cpu, cuda, cuda:N or wgpu.
    #[arg(long, value_parser = parse_device, default_value = "cpu")]
    pub device: DeviceRequest,
}

#[derive(Args, Debug)]
pub struct EvalArgs {
    /// A run folder, or a .safetensors or .mpk export with its .json sidecar.
    pub model: PathBuf,
    /// CSV with the model's feature columns and its target column, `-` for standard input; or --input.
    #[arg(value_name = "INPUT", required_unless_present = "input", conflicts_with = "input")]
    pub rows: Option<PathBuf>,
    /// The same as INPUT, named.
    #[arg(long, value_name = "INPUT")]
    pub input: Option<PathBuf>,
    /// Also write the metrics as JSON to this file (`-`: standard output, which then holds the JSON alone).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Where to run: auto, cpu, cuda, cuda:N or wgpu.
    #[arg(long, value_parser = parse_device, default_value = "cpu")]
    pub device: DeviceRequest,
}

#[derive(Args, Debug)]
pub struct TrainArgs {
    /// The `.kyn` spec to train.
    pub spec: PathBuf,
    /// Where to train: auto, cpu, cuda, cuda:N or wgpu (overrides the spec's
    /// `device` and `devices`); several, data-parallel: cuda:0,cuda:1 (a
    /// comma-separated list), cuda:all, or cpu,cpu (replicas on the CPU).
    /// [default: the spec's, else auto]
    #[arg(long, value_parser = parse_device_arg)]
    pub device: Option<DeviceArg>,
    /// Number of epochs (overrides the spec's `epochs`).
    #[arg(long, allow_negative_numbers = true, value_parser = at_least::<1>)]
    pub epochs: Option<u64>,
    /// Run folder to write (default: runs/<spec>-<time>/ in the current directory).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Random seed for weights, data split and order, and dropout masks (overrides the spec's `seed`).
    #[arg(long, allow_negative_numbers = true, value_parser = at_least::<0>)]
    pub seed: Option<u64>,
    /// Start from fresh weights even when the spec's checkpoint path holds a
    /// checkpoint (which the new run's checkpoints then replace).
    #[arg(long)]
    pub fresh: bool,
    /// Time every step in phases (wait for data, copy, forward, backward,
    /// optimizer) and each evaluation; writes profile.json, trace.json
    /// (Perfetto, chrome://tracing) and a chart, profile.svg and profile.png,
    /// into the run folder. On a GPU it waits
    /// for the device after each phase, which slows the run.
    #[arg(long)]
    pub profile: bool,
}

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// The `.kyn` spec to check.
    pub spec: PathBuf,
    /// Check it against this many rows of seeded synthetic data shaped for
    /// the spec, instead of its data file (as `bench --synthetic`: for the
    /// specs whose data the bench makes).
    #[arg(long, value_name = "ROWS", allow_negative_numbers = true, value_parser = at_least::<2>)]
    pub synthetic: Option<u64>,
    /// Check it for this device, as `kynml train --device` would run it
    /// (overrides the spec's `device` and `devices`): auto, cpu, cuda,
    /// cuda:N, wgpu, or several, data-parallel (cuda:0,cuda:1, cuda:all, cpu,cpu).
    /// [default: the spec's, else auto]
    #[arg(long, value_parser = parse_device_arg)]
    pub device: Option<DeviceArg>,
}

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// Run folders written by `kynml train`.
    #[arg(required = true)]
    pub runs: Vec<PathBuf>,
    /// Also write the report as JSON to this file, for scripts (`-`: standard
    /// output, which then holds the JSON alone): each run's metrics.json as it
    /// is, its seed, best epoch, costs and profile verdict.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

/// The devices `--device` names by a word.
const DEVICES: &[&str] = &["auto", "cpu", "cuda", "wgpu"];

/// `: did you mean `x`?` after a value that is none of `values`, as the
/// spec says it of the same words; nothing where none is close.
fn meant(text: &str, values: &[&str]) -> String {
    kynml_core::spec::suggestion(text, values).map_or(String::new(), |s| format!(": {s}"))
}

pub fn parse_device(text: &str) -> Result<DeviceRequest, String> {
    match text {
        "auto" => Ok(DeviceRequest::Auto),
        "cpu" => Ok(DeviceRequest::Cpu),
        "cuda" => Ok(DeviceRequest::Cuda(None)),
        "wgpu" => Ok(DeviceRequest::Wgpu),
        _ => match text.strip_prefix("cuda:").map(str::parse::<usize>) {
            Some(Ok(index)) => Ok(DeviceRequest::Cuda(Some(index))),
            _ => Err(format!("expected auto, cpu, cuda, cuda:N or wgpu, found `{text}`{}", meant(text, DEVICES))),
        },
    }
}

/// One device or the devices of a data-parallel run, as `--device` gives them.
#[derive(Debug, Clone, PartialEq)]
pub enum DeviceArg {
    /// One device.
    One(DeviceRequest),
    /// Several: `cuda:0,cuda:1`, `cpu,cpu`, `cuda:all`.
    Set(DeviceSet),
}

impl DeviceArg {
    /// The overrides' `device` and `devices`.
    pub fn split(arg: Option<DeviceArg>) -> (Option<DeviceRequest>, Option<DeviceSet>) {
        match arg {
            None => (None, None),
            Some(DeviceArg::One(d)) => (Some(d), None),
            Some(DeviceArg::Set(s)) => (None, Some(s)),
        }
    }
}

pub fn parse_device_arg(text: &str) -> Result<DeviceArg, String> {
    if text == "cuda:all" {
        return Ok(DeviceArg::Set(DeviceSet::AllCuda));
    }
    if !text.contains(',') {
        // The data-parallel forms are as valid here as the single devices.
        return parse_device(text).map(DeviceArg::One).map_err(|_| {
            format!(
                "expected auto, cpu, cuda, cuda:N or wgpu, or several for a data-parallel run (cuda:0,cuda:1, \
                 cuda:all, cpu,cpu), found `{text}`{}",
                meant(text, DEVICES)
            )
        });
    }
    if let Some(i) = text.split(',').position(|d| d.trim().is_empty()) {
        return Err(format!(
            "device {} of the list `{text}` is empty: expected devices separated by commas, such as cpu,cpu or \
             cuda:0,cuda:1",
            i + 1
        ));
    }
    if text.split(',').any(|d| d.trim() == "cuda:all") {
        return Err(format!("`cuda:all` stands alone, as every GPU: write it without other devices (found `{text}`)"));
    }
    let list = text.split(',').map(|d| parse_device(d.trim())).collect::<Result<Vec<_>, _>>()?;
    let set = DeviceSet::List(list);
    match set.problem() {
        Some(why) => Err(format!("{why} (found `{text}`)")),
        None => Ok(DeviceArg::Set(set)),
    }
}

/// A whole number of at least `MIN`, said in words when it is not (clap's
/// own range check prints `0 is not in 1..18446744073709551615`, and a
/// negative number otherwise reads as an unknown option).
pub fn at_least<const MIN: u64>(text: &str) -> Result<u64, String> {
    let what =
        if MIN == 0 { "a whole number, 0 or more".to_string() } else { format!("a whole number of at least {MIN}") };
    match text.trim().parse::<u64>() {
        Ok(n) if n >= MIN => Ok(n),
        Ok(_) => Err(format!("expected {what}")),
        Err(e) if *e.kind() == std::num::IntErrorKind::PosOverflow => {
            Err(format!("expected {what}, up to {}", u64::MAX))
        }
        Err(_) => Err(format!("expected {what}")),
    }
}

pub fn parse_precision(text: &str) -> Result<Precision, String> {
    match text {
        "fp32" => Ok(Precision::Fp32),
        "tf32" => Ok(Precision::Tf32),
        "bf16" => Ok(Precision::Bf16),
        "fp16" => Ok(Precision::Fp16),
        _ => Err(format!(
            "expected fp32, tf32, bf16 or fp16, found `{text}`{}",
            meant(text, &["fp32", "tf32", "bf16", "fp16"])
        )),
    }
}

pub fn parse_autotune(text: &str) -> Result<Autotune, String> {
    match text {
        "off" => Ok(Autotune::Off),
        "fast" => Ok(Autotune::Fast),
        "balanced" => Ok(Autotune::Balanced),
        "full" => Ok(Autotune::Full),
        _ => Err(format!(
            "expected off, fast, balanced or full, found `{text}`{}",
            meant(text, &["off", "fast", "balanced", "full"])
        )),
    }
}

impl PredictArgs {
    /// The rows to predict, given by position or by `--input` (clap requires one).
    pub fn rows(&self) -> &Path {
        self.rows.as_deref().or(self.input.as_deref()).expect("clap requires INPUT or --input")
    }
}

impl EvalArgs {
    /// The labelled rows, given by position or by `--input` (clap requires one).
    pub fn rows(&self) -> &Path {
        self.rows.as_deref().or(self.input.as_deref()).expect("clap requires INPUT or --input")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A value near one that is accepted names it, as the spec does.
    #[test]
    fn a_near_value_is_suggested() {
        assert!(parse_precision("bf61").unwrap_err().ends_with("found `bf61`: did you mean `bf16`?"));
        assert!(parse_device("cpuu").unwrap_err().ends_with(": did you mean `cpu`?"));
        assert!(parse_device_arg("gpu").unwrap_err().ends_with(": did you mean `cuda`?"));
        assert!(parse_autotune("balance").unwrap_err().ends_with(": did you mean `balanced`?"));
        assert!(parse_precision("xyz").unwrap_err().ends_with("found `xyz`"));
        let format = kynml_core::export::Format::parse("ONNX").unwrap_err().to_string();
        assert!(format.ends_with(": did you mean `onnx`?"), "{format}");
    }

    #[test]
    fn devices_parse() {
        assert_eq!(parse_device("cuda:2"), Ok(DeviceRequest::Cuda(Some(2))));
        assert_eq!(parse_device("wgpu"), Ok(DeviceRequest::Wgpu));
        assert!(parse_device("cuda:x").is_err());
        assert!(parse_device("gpu").is_err());
    }

    #[test]
    fn device_lists_parse() {
        let two = DeviceSet::List(vec![DeviceRequest::Cuda(Some(0)), DeviceRequest::Cuda(Some(1))]);
        assert_eq!(parse_device_arg("cuda:0,cuda:1"), Ok(DeviceArg::Set(two)));
        assert_eq!(parse_device_arg("cuda:all"), Ok(DeviceArg::Set(DeviceSet::AllCuda)));
        assert_eq!(parse_device_arg("cpu"), Ok(DeviceArg::One(DeviceRequest::Cpu)));
        assert!(parse_device_arg("cpu,cuda:0").unwrap_err().contains("not both"));
        assert!(parse_device_arg("cuda:1,cuda:1").unwrap_err().contains("twice"));
        assert!(parse_device_arg("wgpu,wgpu").is_err());
        assert!(parse_device_arg("cpu,gpu").is_err());
        // `cuda:all` in a list: said as such, not as an unknown device.
        let e = parse_device_arg("cuda:all,cuda:0").unwrap_err();
        assert!(e.starts_with("`cuda:all` stands alone") && !e.contains("expected auto"), "{e}");
        // An empty entry is said as such, not as "found ``".
        for text in ["cpu,", ",cpu", "cpu,,cpu"] {
            let e = parse_device_arg(text).unwrap_err();
            assert!(e.contains(&format!("of the list `{text}` is empty")) && !e.contains("found ``"), "{e}");
        }
    }

    #[test]
    fn counts_parse_with_a_message_in_words() {
        assert_eq!(at_least::<1>("3"), Ok(3));
        assert_eq!(at_least::<1>("0").unwrap_err(), "expected a whole number of at least 1");
        assert_eq!(at_least::<1>("-1").unwrap_err(), "expected a whole number of at least 1");
        assert_eq!(at_least::<2>("1.5").unwrap_err(), "expected a whole number of at least 2");
        assert_eq!(at_least::<0>("0"), Ok(0));
        assert!(at_least::<0>("99999999999999999999").unwrap_err().contains("up to 18446744073709551615"));
        // Through clap: a negative number is a value, not an unknown option.
        use clap::Parser;
        let err = crate::args::Cli::try_parse_from(["kynml", "train", "x.kyn", "--epochs", "-1"]).unwrap_err();
        assert!(
            err.to_string()
                .contains("invalid value '-1' for '--epochs <EPOCHS>': expected a whole number of at least 1"),
            "{err}"
        );
    }

    #[test]
    fn precisions_parse() {
        assert_eq!(parse_precision("tf32"), Ok(Precision::Tf32));
        assert_eq!(parse_precision("bf16"), Ok(Precision::Bf16));
        assert!(parse_precision("fp8").is_err());
        assert_eq!(parse_autotune("fast"), Ok(Autotune::Fast));
        assert!(parse_autotune("on").is_err());
    }
}
