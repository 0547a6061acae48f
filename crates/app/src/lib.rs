//! pgnload: bulk-import chess games from PGN into PostgreSQL.
//!
//! # Layers
//!
//! The crates of the workspace are the layers, so an arrow pointing up is a
//! compile error: `pgnload-cli` (the binary: clap, printing, exit codes) →
//! `pgnload` (this crate) → `pgnload-db` (re-exported as [`store`]) and
//! `pgnload-chess` (re-exported as [`chess`]), and `pgnload-db` knows
//! nothing of chess.
//!
//! * [`chess`]: pure (no I/O, no tokio, no database): PGN splitting and
//!   parsing, replay, normalized FENs, digests, the 2-byte move encoding,
//!   the reasons a game is rejected.
//! * [`ingest`]: the import: sources, the parse pipeline, the dedup cache,
//!   the two-phase writer, bulk loads, and the engine with checkpoints and
//!   retries, which tells its front end what happens through a reporter
//!   (it prints nothing itself).
//! * [`store`]: PostgreSQL itself: connections, migrations, the private
//!   cluster, server-setting advice.
//! * [`query`], [`export`]: reading the data back (games, positions) and
//!   writing it out in other programs' formats.
//! * [`explorer`]: the opening explorer as one feature: its counter row
//!   defined once, kept by the import's batches, switched on and off,
//!   recounted by `verify --explorer`, read by `explore`.
//! * [`verify`]: `pgnload verify` without the CLI: the pure checks, the
//!   engine streaming rows to them, the TSV report.
//! * [`config`], [`error`], [`progress`]: shared by the layers that need
//!   them.
//!
//! The binary (`src/` of the workspace root) holds `cli` (the clap
//! definitions), `cmd` (one file per subcommand: parse arguments, call
//! this crate, print) and `http` (`pgnload serve`'s HTTP front end, which
//! calls this crate as `cmd` does).
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

#[macro_use]
pub extern crate pgnload_db as store;

pub use pgnload_chess as chess;

pub mod config;
pub mod explorer;
pub mod export;
pub mod ingest;
pub mod progress;
pub mod query;
pub mod verify;

#[cfg(test)]
mod testing;

/// The errors of every layer in one place: the run-stopping [`Error`] of
/// the database crate and the chess core's rejections of single games.
pub mod error {
    pub use pgnload_chess::reject::{RejectReason, Rejection, SourcePos};
    pub use pgnload_db::error::*;
}

pub use error::{Error, RejectReason, Rejection, Result, SourcePos};
