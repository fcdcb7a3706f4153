//! How a command fails: a message for a person and an exit code.
//! 2 means the input was wrong (spec, data, arguments, an unavailable
//! device); 1 means the run itself failed (or `train` could not write its
//! output); 130 means Ctrl-C stopped it, 143 SIGTERM, 129 SIGHUP, 138
//! SIGUSR1, 141 a `train` whose output's reader went away.

use kynml_core::plan::LoadError;

#[derive(Debug)]
pub struct Failure {
    pub message: String,
    pub code: u8,
}

impl Failure {
    pub fn input(message: impl Into<String>) -> Self {
        Failure { message: message.into(), code: 2 }
    }

    pub fn run(message: impl Into<String>) -> Self {
        Failure { message: message.into(), code: 1 }
    }

    /// Stopped by a signal: `code` is 128 and its number, as shells report
    /// it (130 for Ctrl-C).
    pub fn interrupted(code: i32, message: impl Into<String>) -> Self {
        Failure { message: message.into(), code: u8::try_from(code).unwrap_or(130) }
    }
}

impl From<LoadError> for Failure {
    fn from(err: LoadError) -> Self {
        Failure::input(err.render())
    }
}

impl From<anyhow::Error> for Failure {
    fn from(err: anyhow::Error) -> Self {
        Failure::run(format!("error: {err:#}"))
    }
}
