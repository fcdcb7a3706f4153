//! `kynml`: train and check `.kyn` specs. This file only maps outcomes to
//! exit codes; the work is in the commands.

mod args;
mod check;
mod failure;
mod render;
mod train;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = args::Cli::parse();
    let outcome = match cli.command {
        args::Command::Train(a) => train::run(a),
        args::Command::Check(a) => check::run(a),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("{}", failure.message);
            ExitCode::from(failure.code)
        }
    }
}
