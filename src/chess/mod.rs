//! The pure chess core: PGN bytes in, typed games, positions, normalized
//! FENs, digests and move codes out.
//!
//! It exists on its own because it is the contract with python-chess (the
//! digests must be bit-identical) and because every other capability
//! (import, verify, exports to come) builds on it. It must stay pure: no
//! database, no async runtime, no threads or channels, no files of its own
//! (the splitter reads whatever `std::io::Read` it is given), and nothing of
//! the project but `error`. `src/layers.rs` has a test that fails if it
//! ever names a layer above it, so that it could become its own crate
//! without tokio-postgres.

pub mod category;
pub mod encoding;
pub mod fen;
pub mod hash;
pub mod model;
pub mod reader;
pub mod replay;
pub mod scope;
