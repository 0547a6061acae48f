//! pgnload: bulk-import chess games from PGN into PostgreSQL.
//!
//! # Layers
//!
//! Arrows point down only: `cmd` → `ingest` / `verify` → `store` → `chess`.
//!
//! * [`chess`]: pure (no I/O, no tokio, no database): PGN splitting and
//!   parsing, replay, normalized FENs, digests, the 2-byte move encoding.
//! * [`ingest`]: the import: sources, the parse pipeline, the dedup cache,
//!   the two-phase writer, bulk loads, and the engine with checkpoints and
//!   retries, which tells its front end what happens through a reporter
//!   (it prints nothing itself).
//! * [`store`]: PostgreSQL itself: connections, migrations, the private
//!   cluster, server-setting advice.
//! * `verify`: `pgnload verify` without the CLI: the pure checks, the
//!   engine streaming rows to them, the TSV report.
//! * `cmd`: one file per subcommand: parse arguments, call the layers
//!   above, print.
//! * [`cli`]: the clap definitions, for `main` and `cmd` only.
//! * `config`, [`error`], `progress`: shared by the layers that need
//!   them (`chess` uses `error` only).
//!
//! # Flow of a game
//!
//! ```text
//! ingest::source (file/stdin, zstd/bzip2/gzip sniffed from magic bytes)
//!   → chess::reader::GameSplitter   one chunk per game (pgn-reader's boundaries) with its
//!                                   verbatim bytes, file, game number, byte offset, and
//!                                   where its tags are
//!   → chess::reader::take_game      the pgn-reader Visitor of games: tags and mainline, and
//!                                   the checks needing the raw bytes (size, garbage, result
//!                                   marker, storable text)
//!   → chess::replay::replay_game    shakmaty replay → GameRecord (positions, normalized FENs,
//!                                   digests)
//!   → ingest::writer                each batch in two phases, two transactions: positions,
//!                                   then games, moves and the input's checkpoint
//! ```
//!
//! Every chess stage is a pure function over one item; `ingest::pipeline`
//! wraps them in loops over bounded channels, and `ingest::engine` drives
//! the batches into the writer.

/// `eprintln!` that cannot panic. The standard macro panics when stderr
/// cannot be written (a full disk, `2>/dev/full`; a reader gone,
/// `2>&1 | head -1`, since Rust ignores `SIGPIPE`), and a panic is exit
/// code 101, which no script expects. A message that cannot be written is
/// lost; the command goes on and exits with the code that says how it
/// ended. Every message to stderr goes through here (`layers.rs` checks).
macro_rules! stderr_line {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

pub mod chess;
pub mod cli;
pub(crate) mod cmd;
pub(crate) mod config;
pub mod error;
pub mod export;
pub mod ingest;
pub(crate) mod progress;
pub mod query;
pub mod store;
pub(crate) mod verify;

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
    match &cli.command {
        cli::Command::Import(args) => args.add_overrides(&mut overrides),
        cli::Command::Game(cmd::game::GameCommand::Put(args)) => {
            overrides.source = args.source.clone();
        }
        _ => {}
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
        cli::Command::Db(command) => cmd::db::run(command, &settings, cli.global.quiet),
        cli::Command::Import(args) => cmd::import::run(args, &settings, cli.global.quiet),
        cli::Command::Status(args) => cmd::status::run(args, &settings),
        cli::Command::Verify(args) => cmd::verify::run(args, &settings, cli.global.quiet),
        cli::Command::Games(args) => cmd::games::run(args, &settings),
        cli::Command::Game(command) => cmd::game::run(command, &settings),
        cli::Command::Export(args) => cmd::export::run(args, &settings, cli.global.quiet),
        cli::Command::Explore(args) => cmd::explore::run(args, &settings),
    }
}
