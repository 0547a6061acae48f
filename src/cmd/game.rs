//! `pgnload game`: one game by id or natural key.

use crate::{
    config::Settings,
    error::{Error, ExitStatus},
    export::pgn,
    query::games::{self, GameRef},
    store::db,
};

/// What to do with one game.
#[derive(Debug, clap::Subcommand)]
pub enum GameCommand {
    /// Print a game as PGN (tags, mainline, %clk/%eval comments, NAGs, result).
    Show(ShowArgs),
}

/// Options of `pgnload game show`.
#[derive(Debug, Clone, clap::Args)]
pub struct ShowArgs {
    /// The game: its id, or SOURCE:EXTERNAL_ID (e.g. lichess:ENPo6ReH).
    pub game: GameRef,
}

/// Runs `pgnload game …`.
pub fn run(command: &GameCommand, settings: &Settings) -> Result<ExitStatus, Error> {
    match command {
        GameCommand::Show(args) => show(args, settings),
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
