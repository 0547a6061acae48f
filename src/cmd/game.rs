//! `pgnload game`: one game by id, natural key or Lichess URL — show it as PGN, or
//! delete it — or one game from a PGN file stored or replaced.

use crate::{
    chess::model::GameRef,
    config::Settings,
    error::{Error, ExitStatus},
    export::pgn,
    ingest::{
        delete::delete_game,
        engine::DEFAULT_SOURCE,
        put::{PutOutcome, put_game, read_one_game},
    },
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
        /// The game: its id, `SOURCE:EXTERNAL_ID` (e.g. lichess:ENPo6ReH),
        /// or a Lichess game's URL or id (`https://lichess.org/ENPo6ReH`, `ENPo6ReH`).
        #[arg(value_name = "GAME")]
        game: GameRef,
    },
    /// Store the one game of a PGN file: inserted if new, else it replaces
    /// the stored game with its identity (or the one --replace names), its
    /// explorer counters corrected, in one transaction.
    Put(PutArgs),
}

/// Options of `pgnload game put`.
#[derive(Debug, Clone, clap::Args)]
pub struct PutArgs {
    /// A PGN file holding exactly one game (plain or compressed, or - for stdin).
    #[arg(value_name = "FILE.pgn", value_parser = crate::cli::utf8_input())]
    pub file: String,
    /// Source label for a game without a Lichess id [default: pgn].
    #[arg(long, env = "PGNLOAD_SOURCE")]
    pub source: Option<String>,
    /// Replace this game (named as `game show` names it) with the file's
    /// game, which keeps its id and takes the file's key: the way to store
    /// an edited game, whose content digest (its key) changed.
    #[arg(long, value_name = "GAME")]
    pub replace: Option<GameRef>,
}

/// Options of `pgnload game show`.
#[derive(Debug, Clone, clap::Args)]
pub struct ShowArgs {
    /// The game: its id, `SOURCE:EXTERNAL_ID` (e.g. lichess:ENPo6ReH), or
    /// a Lichess game's URL or id (`https://lichess.org/ENPo6ReH`, `ENPo6ReH`).
    #[arg(value_name = "GAME")]
    pub game: GameRef,
}

/// Runs `pgnload game …`.
pub fn run(command: &GameCommand, settings: &Settings) -> Result<ExitStatus, Error> {
    match command {
        GameCommand::Show(args) => show(args, settings),
        GameCommand::Delete { game } => delete(game, settings),
        GameCommand::Put(args) => put(args, settings),
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

/// Says why a put or delete waits for the import lock.
fn say_waiting() {
    stderr_line!(
        "pgnload: waiting for the import lock (`db explorer enable|disable|compact`, or an \
         import counting the positions it queued for the explorer counters)"
    );
}

fn delete(game: &GameRef, settings: &Settings) -> Result<ExitStatus, Error> {
    let runtime = db::runtime()?;
    let deleted = runtime.block_on(async {
        let mut database = db::connect(&settings.target()).await?;
        db::migrate(&mut database.client).await?;
        delete_game(&mut database.client, game, &say_waiting).await
    })?;
    super::print(&format!(
        "deleted game {} ({}:{}) and its {} moves\n",
        deleted.id, deleted.source, deleted.external_id, deleted.moves
    ))?;
    Ok(ExitStatus::Clean)
}

fn put(args: &PutArgs, settings: &Settings) -> Result<ExitStatus, Error> {
    // Read and replayed before connecting: a bad file touches nothing.
    let game = read_one_game(&args.file, &settings.pipeline)?;
    let source = settings.source.as_deref().unwrap_or(DEFAULT_SOURCE);
    let runtime = db::runtime()?;
    let put = runtime.block_on(async {
        let mut database = db::connect(&settings.target()).await?;
        db::migrate(&mut database.client).await?;
        let put = put_game(
            &mut database.client,
            &game,
            source,
            args.replace.as_ref(),
            &say_waiting,
        )
        .await?;
        database.close()?;
        Ok::<_, Error>(put)
    })?;
    let line = match &put.outcome {
        PutOutcome::Stored => format!(
            "stored as game {} ({}): {} moves, {} new positions\n",
            put.id, put.key, put.moves, put.positions_new
        ),
        PutOutcome::Replaced { was, old_moves } => format!(
            "replaced game {} (was {was}, {old_moves} moves; now {}): {} moves, {} new positions\n",
            put.id, put.key, put.moves, put.positions_new
        ),
        PutOutcome::Unchanged => format!(
            "unchanged: game {} ({}) already holds this game ({} moves); nothing written\n",
            put.id, put.key, put.moves
        ),
    };
    super::print(&line)?;
    Ok(ExitStatus::Clean)
}
