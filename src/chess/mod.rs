//! The pure chess core.
pub mod encoding;
pub mod fen;
pub mod hash;
pub mod model;
pub mod reader;
pub mod replay;
