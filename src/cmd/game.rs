//! `pgnload game`: one game by id or natural key — show it as PGN, or
//! delete it.

use crate::{
    chess::model::GameRef,
    config::Settings,
    error::{Error, ExitStatus},
    export::pgn,
    ingest::delete::delete_game,
    query::games,
    store::db,
};

/// What to do with one game.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum GameCommand {
    /// Print a game as PGN (tags, mainline, %clk/%eval comments, NAGs, result).
    Show(ShowArgs),
    /// Delete a game and its moves, and take it out of the explorer
    /// counters, in one transaction (positions stay).
    Delete {
        /// The game: its id, or SOURCE:EXTERNAL_ID (e.g. lichess:ENPo6ReH).
        #[arg(value_name = "ID|SOURCE:EXTERNAL_ID")]
        game: GameRef,
    },
}

/// Options of `pgnload game show`.
#[derive(Debug, Clone, clap::Args)]
pub struct ShowArgs {
    /// The game: its id, or SOURCE:EXTERNAL_ID (e.g. lichess:ENPo6ReH).
    #[arg(value_name = "ID|SOURCE:EXTERNAL_ID")]
    pub game: GameRef,
}

/// Runs `pgnload game …`.
pub fn run(command: &GameCommand, settings: &Settings) -> Result<ExitStatus, Error> {
    match command {
        GameCommand::Show(args) => show(args, settings),
        GameCommand::Delete { game } => delete(game, settings),
    }
}

fn show(args: &ShowArgs, settings: &Settings) -> Result<ExitStatus, Error> {
    let runtime = db::runtime()?;
    runtime.block_on(async {
        let mut database = db::connect(&settings.target()).await?;
        db::migrate(&mut database.client).await?;
        let found = games::find(&database.client, &args.game).await?;
        database.close()?;
        let (game, moves) = found.ok_or_else(|| Error::Input {
            file: format!("game {}", args.game),
            message: "no such game in the database".to_owned(),
        })?;
        let mut text = String::new();
        pgn::write_game(&game, &moves, &mut text)?;
        super::print(&text)?;
        Ok(ExitStatus::Clean)
    })
}

fn delete(game: &GameRef, settings: &Settings) -> Result<ExitStatus, Error> {
    let runtime = db::runtime()?;
    let deleted = runtime.block_on(async {
        let mut database = db::connect(&settings.target()).await?;
        db::migrate(&mut database.client).await?;
        delete_game(&mut database.client, game).await
    })?;
    super::print(&format!(
        "deleted game {} ({}:{}) and its {} moves\n",
        deleted.id, deleted.source, deleted.external_id, deleted.moves
    ))?;
    Ok(ExitStatus::Clean)
}
