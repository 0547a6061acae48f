//! pgnload: bulk-import chess games from PGN into PostgreSQL.
//!
//! # Flow
//!
//! ```text
//! source (file/stdin, zstd/bzip2/gzip sniffed from magic bytes)
//!   → reader::GameSplitter   one chunk per game (pgn-reader's boundaries) with its verbatim
//!                            bytes, file, game number, byte offset, and where its tags are
//!   → reader::take_game      the only pgn-reader Visitor: tags and mainline, and the checks
//!                            needing the raw bytes (size, garbage, result marker, storable text)
//!   → replay::replay_game    shakmaty replay → GameRecord (positions, normalized FENs, digests)
//! ```
//!
//! Every stage is a pure function over one item; the pipeline modules wrap
//! them in loops over bounded channels.

pub mod chess;
pub mod cli;
pub mod cmd;
pub mod config;
pub mod error;
pub mod ingest;
pub mod progress;
pub mod store;
pub mod verify;

#[cfg(test)]
mod layers;

pub use error::{Error, RejectReason, Rejection, Result, SourcePos};

/// Runs one command line.
pub fn run(cli: cli::Cli) -> Result<error::ExitStatus> {
    let file = match &cli.global.config {
        Some(path) => config::load_file(path)?,
        None => config::FileConfig::default(),
    };
    let mut overrides = cli.global.overrides();
    if let cli::Command::Import(args) = &cli.command {
        args.add_overrides(&mut overrides);
    }
    let settings = config::Settings::resolve(file, overrides)?;
    if settings.threads > 0 {
        // The global pool is built nowhere else, so a failure is the system
        // refusing the threads (a process limit): say so rather than run on
        // rayon's default pool with another thread count than asked.
        rayon::ThreadPoolBuilder::new()
            .num_threads(settings.threads)
            .build_global()
            .map_err(|e| {
                Error::Config(format!(
                    "starting {} worker threads (--threads): {e}",
                    settings.threads
                ))
            })?;
    }
    match &cli.command {
        cli::Command::Hash(args) => cmd::hash::run(args),
        cli::Command::Positions(args) => cmd::positions::run(args, settings.pipeline),
        cli::Command::Db(command) => cmd::db::run(command, &settings),
        cli::Command::Import(args) => cmd::import::run(args, &settings, cli.global.quiet),
        cli::Command::Status(args) => cmd::status::run(args, &settings),
        cli::Command::Verify(args) => cmd::verify::run(args, &settings, cli.global.quiet),
    }
}
