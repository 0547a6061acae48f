//! pgnload: bulk-import chess games from PGN into PostgreSQL.
//!
//! # Flow
//!
//! ```text
//! source (file/stdin, zstd/bzip2/gzip sniffed from magic bytes)
//!   → reader::GameSplitter   the only pgn-reader Visitor: one chunk per game with its verbatim
//!                            bytes, file, game number, byte offset, and its tags and mainline
//!   → reader::take_game      checks needing the raw bytes (size, garbage, result marker)
//!   → replay::replay_game    shakmaty replay → GameRecord (positions, normalized FENs, digests)
//! ```
//!
//! Every stage is a pure function over one item; the pipeline modules wrap
//! them in loops over bounded channels.

pub mod cli;
pub mod cmd;
pub mod embedded;
pub mod error;
pub mod fen;
pub mod hash;
pub mod model;
pub mod pipeline;
pub mod reader;
pub mod replay;
pub mod source;

pub use error::{Error, RejectReason, Rejection, Result, SourcePos};

/// Runs one command line.
pub fn run(cli: cli::Cli) -> Result<cmd::ExitStatus> {
    match cli.command {
        cli::Command::Hash(args) => cmd::hash::run(&args),
        cli::Command::Positions(args) => {
            cmd::positions::run(&args, pipeline::PipelineConfig::default())
        }
    }
}
