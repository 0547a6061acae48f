//! Command implementations behind the CLI.

pub mod db;
pub mod hash;
pub mod import;
pub mod positions;
pub mod status;
pub mod verify;

use std::io::Write;

/// Writes to stdout without panicking when the reader went away (`| head`):
/// the error surfaces as [`crate::Error::Output`], which `main` treats as
/// success for a broken pipe.
pub fn print(text: &str) -> Result<(), crate::Error> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(crate::Error::Output)
}

/// How a command ended; `main` turns it into the process exit code.
///
/// | code | meaning |
/// |------|---------|
/// | 0 | clean: everything read was imported / printed / verified |
/// | 1 | finished, but some games were rejected (or `verify` found mismatches) |
/// | 2 | failed: an input, the database or the configuration stopped the run |
/// | 3 | interrupted (Ctrl-C / SIGTERM); rerun the same command to resume |
/// | 4 | aborted: more rejects than `--max-rejects` allows |
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    /// Exit code 0.
    Clean,
    /// Exit code 1.
    CompletedWithRejects,
    /// Exit code 2.
    Failed,
    /// Exit code 3.
    Interrupted,
    /// Exit code 4.
    TooManyRejects,
}

impl ExitStatus {
    /// The process exit code.
    pub fn code(self) -> u8 {
        match self {
            ExitStatus::Clean => 0,
            ExitStatus::CompletedWithRejects => 1,
            ExitStatus::Failed => 2,
            ExitStatus::Interrupted => 3,
            ExitStatus::TooManyRejects => 4,
        }
    }
}
