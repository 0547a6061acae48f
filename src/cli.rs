//! Command-line definition (clap). Kept apart from the commands so help text
//! and flags live in one place.

use clap::{Parser, Subcommand};

use crate::cmd::{hash::HashArgs, positions::PositionsArgs};

/// Bulk-import chess games from PGN into PostgreSQL.
#[derive(Debug, Parser)]
#[command(name = "pgnload", version, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print normalized FEN and signed/unsigned xxh64 digests of FENs.
    Hash(HashArgs),
    /// Print every position of every game: game_key, ply, normalized FEN, signed digest.
    Positions(PositionsArgs),
}
