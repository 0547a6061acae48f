//! The `pgnload` binary: parse the command line, run, map the outcome to an
//! exit code. Everything else lives in the library (`crates/app`), whose
//! layers are imported here under the names the commands use
//! (`crate::chess`, `crate::store`, …).

mod cli;
mod cmd;

use std::{io::Write, process::ExitCode};

use clap::Parser;
#[macro_use]
extern crate pgnload_db;
use pgnload::{
    Error, Result, chess, config, error,
    error::{ErrorKind, ExitStatus},
    explorer, export, ingest, progress, query, store, verify,
};

use crate::cli::Cli;

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
    match cmd::run(cli) {
        Ok(status) => ExitCode::from(status.code()),
        // The reader of our output went away (`| head`): not an error.
        Err(pgnload::Error::Output(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            ExitCode::SUCCESS
        }
        // A signal ended a wait for the database: interrupted, as the
        // exit codes say (3), not failed.
        Err(err @ pgnload::Error::Interrupted { .. }) => {
            let _ = writeln!(
                std::io::stderr(),
                "pgnload: {}; rerun to resume",
                pgnload::error::report(&err)
            );
            ExitCode::from(ExitStatus::Interrupted.code())
        }
        Err(err) => {
            let advice = match err.kind() {
                ErrorKind::Bug => " (a bug in pgnload: please report it with the command line)",
                ErrorKind::Database { transient: true } => {
                    " (still failing when retry_seconds ran out; rerun to resume)"
                }
                _ => "",
            };
            // Not `eprintln!`, which panics (exit 101) when stderr is
            // full or gone: the exit code must still say "failed".
            let _ = writeln!(
                std::io::stderr(),
                "pgnload: error: {}{advice}",
                pgnload::error::report(&err)
            );
            ExitCode::from(ExitStatus::Failed.code())
        }
    }
}
