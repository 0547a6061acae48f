//! The `pgnload` binary: parse the command line, run, map the outcome to an
//! exit code. Everything else lives in the library (`crates/app`), whose
//! layers are imported here under the names the commands use
//! (`crate::chess`, `crate::store`, …).

mod cli;
mod cmd;
mod http;

use std::{io::Write, process::ExitCode};

use clap::Parser;
#[macro_use]
extern crate pgnload_db;
use pgnload::{
    Error, Result, chess, config, error, explorer, export, ingest, progress, query, store, verify,
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
    match cmd::run(&cli) {
        Ok(status) => ExitCode::from(status.code()),
        // What is said and the exit code follow the error's kind (see
        // `ErrorKind::policy`): a reader gone (`| head`) ends it with
        // nothing said, an interrupt with 3, a failure with 2.
        Err(err) => {
            if let Some(line) = err.final_message() {
                // Not `eprintln!`, which panics (exit 101) when stderr is
                // full or gone: the exit code must still say how it ended.
                let _ = writeln!(std::io::stderr(), "pgnload: {line}");
            }
            ExitCode::from(err.policy().exit.code())
        }
    }
}
