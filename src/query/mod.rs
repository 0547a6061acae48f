//! Reading games back: the one filter shared by `games`, `export` and the
//! exports to come, the game rows those commands print, and position
//! lookups by FEN.
//!
//! It exists so that a filter means the same thing in every command that
//! takes one: `cmd` parses arguments into [`filter::FilterArgs`], this layer
//! resolves them against the database and builds parameterized SQL (user
//! values are never interpolated into it). It must not print or format
//! output: that is `cmd`'s (tables, JSON) and `export`'s (PGN).

pub mod filter;
pub mod games;
pub mod position;
