//! Command-line arguments, as typed by the user. They are turned into a
//! checked plan before anything runs.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use kynml_core::spec::types::DeviceRequest;

#[derive(Parser, Debug)]
#[command(name = "kynml", version, about = "Train .kyn specs natively in Rust")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
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
}

#[derive(Args, Debug)]
pub struct ExportArgs {
    /// A run folder written by `kynml train` (or a .safetensors or .mpk export).
    pub model: PathBuf,
    /// onnx, safetensors or burn.
    #[arg(long)]
    pub format: String,
    /// The file to write (safetensors and burn also write a .json sidecar beside it).
    #[arg(long)]
    pub path: PathBuf,
}

#[derive(Args, Debug)]
pub struct PredictArgs {
    /// A run folder, or a .safetensors or .mpk export with its .json sidecar.
    pub model: PathBuf,
    /// CSV with the model's feature columns, by name (its target column may be there too).
    #[arg(long)]
    pub input: PathBuf,
    /// CSV to write: one row per input row.
    #[arg(long)]
    pub output: PathBuf,
    /// Where to run: auto, cpu, cuda, cuda:N or wgpu.
    #[arg(long, value_parser = parse_device, default_value = "cpu")]
    pub device: DeviceRequest,
}

#[derive(Args, Debug)]
pub struct EvalArgs {
    /// A run folder, or a .safetensors or .mpk export with its .json sidecar.
    pub model: PathBuf,
    /// CSV with the model's feature columns and its target column.
    #[arg(long)]
    pub input: PathBuf,
    /// Where to run: auto, cpu, cuda, cuda:N or wgpu.
    #[arg(long, value_parser = parse_device, default_value = "cpu")]
    pub device: DeviceRequest,
}

#[derive(Args, Debug)]
pub struct TrainArgs {
    /// The `.kyn` spec to train.
    pub spec: PathBuf,
    /// Where to train: auto, cpu, cuda, cuda:N or wgpu (overrides the spec's `device`).
    #[arg(long, value_parser = parse_device)]
    pub device: Option<DeviceRequest>,
    /// Number of epochs (overrides the spec's `epochs`).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub epochs: Option<u64>,
    /// Run folder to write (default: runs/<spec>-<time>/ next to the current directory).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Random seed for weights, data split and order (overrides the spec's `seed`).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Start from fresh weights even when the spec's checkpoint path holds a
    /// checkpoint (which the new run's checkpoints then replace).
    #[arg(long)]
    pub fresh: bool,
}

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// The `.kyn` spec to check.
    pub spec: PathBuf,
}

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// Run folders written by `kynml train`.
    #[arg(required = true)]
    pub runs: Vec<PathBuf>,
}

pub fn parse_device(text: &str) -> Result<DeviceRequest, String> {
    match text {
        "auto" => Ok(DeviceRequest::Auto),
        "cpu" => Ok(DeviceRequest::Cpu),
        "cuda" => Ok(DeviceRequest::Cuda(None)),
        "wgpu" => Ok(DeviceRequest::Wgpu),
        _ => match text.strip_prefix("cuda:").map(str::parse::<usize>) {
            Some(Ok(index)) => Ok(DeviceRequest::Cuda(Some(index))),
            _ => Err(format!("expected auto, cpu, cuda, cuda:N or wgpu, found `{text}`")),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_parse() {
        assert_eq!(parse_device("cuda:2"), Ok(DeviceRequest::Cuda(Some(2))));
        assert_eq!(parse_device("wgpu"), Ok(DeviceRequest::Wgpu));
        assert!(parse_device("cuda:x").is_err());
        assert!(parse_device("gpu").is_err());
    }
}
