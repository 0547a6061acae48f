//! `pgnload game …`: one game at a time.

use crate::{
    config::Settings,
    error::{Error, ExitStatus},
    ingest::delete::{GameRef, delete_game},
    store::db,
};

/// `pgnload game` subcommands.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum GameCommand {
    /// Delete a game and its moves, and take it out of the explorer
    /// counters, in one transaction (positions stay).
    Delete {
        /// The game: its id, or SOURCE:EXTERNAL_ID (lichess:abcd1234).
        #[arg(value_name = "ID|SOURCE:EXTERNAL_ID")]
        game: GameRef,
    },
}

/// Runs `pgnload game …`.
pub fn run(command: &GameCommand, settings: &Settings) -> Result<ExitStatus, Error> {
    let GameCommand::Delete { game } = command;
    let runtime = db::runtime()?;
    let deleted = runtime.block_on(async {
        let mut database = db::connect(&settings.target()).await?;
        db::migrate(&mut database.client).await?;
        delete_game(&mut database.client, game).await
    })?;
    crate::cmd::print(&format!(
        "deleted game {} ({}:{}) and its {} moves\n",
        deleted.id, deleted.source, deleted.external_id, deleted.moves
    ))?;
    Ok(ExitStatus::Clean)
}
