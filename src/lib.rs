//! pgnload: bulk-import chess games from PGN into PostgreSQL.
//!
//! # Flow
//!
//! ```text
//! source (file/stdin, zstd/bzip2/gzip sniffed from magic bytes)
//!   → reader::GameSplitter   one raw chunk per game, with file, game number, byte offset
//!   → reader::parse_game     the only pgn-reader Visitor: chunk → RawGame (tags, mainline)
//!   → replay::replay_game    shakmaty replay → GameRecord (positions, normalized FENs, digests)
//! ```
//!
//! Every stage is a pure function over one item; the pipeline modules wrap
//! them in loops over bounded channels.

pub mod embedded;
pub mod error;
pub mod fen;
pub mod hash;
pub mod model;
pub mod reader;
pub mod replay;

pub use error::{Error, RejectReason, Rejection, Result, SourcePos};
