//! The pure chess core: PGN bytes in, typed games, positions, normalized
//! FENs, digests and move codes out.
//!
//! It exists on its own because it is the contract with python-chess (the
//! digests must be bit-identical) and because every other capability
//! (import, verify, exports to come) builds on it. It must stay pure: no
//! database, no async runtime, no threads or channels, no files of its own
//! (the splitter reads whatever `std::io::Read` it is given). It is a crate
//! of its own so that the compiler holds that line: its dependencies are
//! the chess and hashing crates only, and `tests/layering.rs` fails if a
//! database, async or terminal crate ever enters its dependency graph.

pub mod annotation;
pub mod category;
pub mod encoding;
pub mod fen;
pub mod hash;
pub mod headers;
pub mod model;
pub mod reader;
pub mod reject;
pub mod replay;
pub mod scope;
pub mod selection;
