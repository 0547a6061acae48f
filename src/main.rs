//! The `pgnload` binary: parse the command line, run, map the outcome to an
//! exit code. Everything else lives in the library.

use std::process::ExitCode;

use clap::Parser;
use pgnload::{cli::Cli, error::ExitStatus};

fn main() -> ExitCode {
    let cli = Cli::parse();
    match pgnload::run(cli) {
        Ok(status) => ExitCode::from(status.code()),
        // The reader of our output went away (`| head`): not an error.
        Err(pgnload::Error::Output(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("pgnload: error: {}", pgnload::error::report(&err));
            ExitCode::from(ExitStatus::Failed.code())
        }
    }
}
