//! The `pgnload` binary: parse the command line, run, map the outcome to an
//! exit code. Everything else lives in the library.

use std::process::ExitCode;

use clap::Parser;
use pgnload::{
    cli::Cli,
    error::{ErrorKind, ExitStatus},
    store,
};

fn main() -> ExitCode {
    let mut args = std::env::args_os();
    if args
        .nth(1)
        .is_some_and(|first| first == store::child::GUARD_ARG)
    {
        // pgnload starting one of its child tools (see store::child).
        return ExitCode::from(store::child::run_guard(args));
    }
    let cli = Cli::parse();
    match pgnload::run(cli) {
        Ok(status) => ExitCode::from(status.code()),
        // The reader of our output went away (`| head`): not an error.
        Err(pgnload::Error::Output(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            ExitCode::SUCCESS
        }
        Err(err) => {
            let advice = match err.kind() {
                ErrorKind::Bug => " (a bug in pgnload: please report it with the command line)",
                ErrorKind::Database { transient: true } => {
                    " (still failing when retry_seconds ran out; rerun to resume)"
                }
                _ => "",
            };
            eprintln!("pgnload: error: {}{advice}", pgnload::error::report(&err));
            ExitCode::from(ExitStatus::Failed.code())
        }
    }
}
