//! `pgnload games`: the games a filter selects, newest first, as a table,
//! JSON lines or PGN.

use std::io::{self, Write};

use super::printable;
use crate::{
    config::Settings,
    error::{Error, ExitStatus},
    export::{Unwritten, pgn},
    query::games::{self, Order, StoredGame},
    store::db,
};

/// How `games` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// One line per game, for people.
    Table,
    /// One JSON object per line.
    Json,
    /// The games as PGN (as `export` writes them).
    Pgn,
}

/// Options of `pgnload games`.
#[derive(Debug, Clone, clap::Args)]
pub struct GamesArgs {
    /// Which games.
    #[command(flatten)]
    pub filter: crate::cli::FilterFlags,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
}

/// The JSON object of one game (one line of `--format json`, and of
/// `serve`'s games of a player).
pub fn json_line(game: &StoredGame) -> serde_json::Value {
    serde_json::json!({
        "id": game.id,
        "source": game.source,
        "external_id": game.external_id,
        "white": game.white,
        "black": game.black,
        "white_elo": game.white_elo,
        "black_elo": game.black_elo,
        "result": game.result_text(),
        "started_at": game.started_at.map(super::json_time),
        "ply_count": game.ply_count,
        "event": game.event,
        "time_control": game.time_control,
        "eco": game.eco,
        "variant": game.variant.as_db_label(),
        "termination": game.termination,
    })
}

/// The table's columns, headed by `cells` (one per column, the event
/// last): the one layout of the header and of every game's line.
fn table_row(cells: [&str; 11]) -> String {
    let [
        id,
        started,
        white,
        black,
        result,
        ply,
        tc,
        eco,
        variant,
        termination,
        event,
    ] = cells;
    format!(
        "{id:>8}  {started:<16}  {white:<28}  {black:<28}  {result:<7}  {ply:>4}  {tc:<9}  \
         {eco:<3}  {variant:<16}  {termination:<16}  {event}\n"
    )
}

/// The table's header.
fn table_header() -> String {
    table_row([
        "id",
        "started (UTC)",
        "white",
        "black",
        "result",
        "ply",
        "tc",
        "eco",
        "variant",
        "termination",
        "event",
    ])
}

/// One line of the table: every text a game holds is [`printable`], the
/// columns pgnload decides (id, time, result, variant, termination) are not
/// the game's bytes. An absent value is `-`.
fn table_line(game: &StoredGame) -> String {
    let side = |name: &Option<String>, elo: Option<i32>| {
        let name = printable(name.as_deref().unwrap_or("?"));
        match elo {
            Some(elo) => format!("{name} ({elo})"),
            None => name.into_owned(),
        }
    };
    let text = |value: &Option<String>| printable(value.as_deref().unwrap_or("-")).into_owned();
    table_row([
        &game.id.to_string(),
        &game
            .started_at
            .map_or("-".to_owned(), |at| at.format("%Y-%m-%d %H:%M").to_string()),
        &side(&game.white, game.white_elo),
        &side(&game.black, game.black_elo),
        game.result_text(),
        &game.ply_count.to_string(),
        &text(&game.time_control),
        &text(&game.eco),
        game.variant.as_db_label(),
        game.termination.as_deref().unwrap_or("-"),
        &printable(game.event.as_deref().unwrap_or("")),
    ])
}

/// Runs `pgnload games`.
pub fn run(args: &GamesArgs, settings: &Settings) -> Result<ExitStatus, Error> {
    let runtime = db::runtime()?;
    runtime.block_on(async {
        let mut database = db::connect(&settings.target()).await?;
        db::migrate(&mut database.client).await?;
        let filter = args.filter.filter().resolve(&database.client).await?;
        let stdout = io::stdout();
        let mut out = io::BufWriter::with_capacity(1 << 16, stdout.lock());
        if args.format == Format::Table {
            out.write_all(table_header().as_bytes())
                .map_err(Error::Output)?;
        }
        let mut text = String::new();
        let mut unwritable = Unwritten::default();
        games::for_each(
            &mut database.client,
            None,
            &filter,
            Order::Newest,
            args.format == Format::Pgn,
            |game, moves| {
                text.clear();
                match args.format {
                    Format::Table => text.push_str(&table_line(game)),
                    Format::Json => {
                        text.push_str(&json_line(game).to_string());
                        text.push('\n');
                    }
                    Format::Pgn => {
                        if unwritable
                            .skip(pgn::write_game(game, moves, &mut text))?
                            .is_none()
                        {
                            text.clear();
                        }
                    }
                }
                out.write_all(text.as_bytes()).map_err(Error::Output)
            },
        )
        .await?;
        out.flush().map_err(Error::Output)?;
        database.close()?;
        for line in unwritable.report() {
            stderr_line!("pgnload: {line}");
        }
        Ok(if unwritable.count > 0 {
            ExitStatus::CompletedWithRejects
        } else {
            ExitStatus::Clean
        })
    })
}
