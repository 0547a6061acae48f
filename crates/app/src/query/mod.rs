//! Reading the data back: the questions users ask of an imported database
//! (the games a filter selects, the position a FEN names), answered from
//! the tables the import keeps. (The moves played in a position are
//! [`crate::explorer::answers`].)
//!
//! It exists so that a filter means the same thing in every command that
//! takes one: `cmd` parses arguments into [`filter::FilterArgs`], this layer
//! resolves them against the database and builds parameterized SQL (user
//! values are never interpolated into it). It only reads, and must not
//! print or format output: that is `cmd`'s (tables, JSON) and `export`'s
//! (PGN and the exchange formats).

pub mod filter;
pub mod games;
pub mod position;

/// The unfinished bulk load, if any: while one is, `moves` and the plain
/// indexes of `games` are dropped (see `ingest::bulk`), so that a reader
/// that must answer at once (`pgnload serve`) can refuse rather than read
/// whole tables.
pub use crate::ingest::bulk::unfinished as unfinished_bulk_load;
