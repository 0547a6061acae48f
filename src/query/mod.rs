//! Reading the data back: the questions users ask of an imported database
//! (the moves played in a position, the position a FEN names), answered
//! from the tables the import keeps for them.
//!
//! It exists apart from `cmd` so that a query needs no command line (a
//! server could answer the same), and apart from `ingest` because it only
//! reads. It must not print: `cmd` formats what it returns.

pub mod explorer;
pub mod position;
