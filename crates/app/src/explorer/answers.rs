//! What `pgnload explore` reads: the moves played in a position and how
//! they scored, from the counters the import keeps (`explorer_moves`, see
//! [`super::counting`]), never from a scan of `moves`; the position's
//! opening name ([`super::openings`]); and a few games that reached it.
//!
//! The answer is the Lichess opening explorer's (`/lichess` of
//! lila-openingexplorer, `src/api/response.rs`): the same keys, types and
//! rules where the data allows, so that the tools that read that API can
//! read ours. Where ours differs, and why: `docs/querying.md`.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use chrono::{DateTime, Utc};
use serde::Serialize;
use shakmaty::{
    Position,
    fen::Fen,
    san::{San, SanPlus},
    uci::UciMove,
    variant::VariantPosition,
};
use tokio_postgres::types::ToSql;

use crate::{
    chess::{
        category::{Month, RatingGroup, Speed},
        encoding::{decode_move_uci, encode_move},
        fen::{normalized_fen, position_from_fen},
        model::{GameVariant, TimeControl},
        scope::rated_by_event,
    },
    error::Error,
    explorer::{
        ListEntry, admin,
        openings::{self, Opening},
        sql,
    },
    store::db::{Prepared, db_err},
};

/// How many games Lichess lists at most, top and recent games together
/// (lila-openingexplorer's `MAX_LICHESS_GAMES`).
pub const LISTED_MAX: usize = 8;

/// How many top games Lichess lists at most (`MAX_TOP_GAMES`).
pub const TOP_MAX: usize = 4;

/// The rating bands that can hold top games: from 2000 up, as Lichess's
/// `top_group` (the rest are only recent games).
pub(super) const TOP_BANDS: [i16; 3] = [2000, 2200, 2500];

/// The highest rating group, 2500: Lichess ranks its games of an average
/// of 2800 or more in a band of their own (3200, [`sql::TOP_BAND`]).
const SPLIT_GROUP: i16 = TOP_BANDS[TOP_BANDS.len() - 1];

/// Which games to count: empty lists mean every speed / rating group; a
/// month bound leaves out the games without a date.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Filter {
    /// Only these speeds.
    pub speeds: Vec<Speed>,
    /// Only games whose average rating is in one of these groups (so never
    /// a game missing a rating).
    pub ratings: Vec<RatingGroup>,
    /// Only games played in this month or later.
    pub since: Option<Month>,
    /// Only games played in this month or earlier.
    pub until: Option<Month>,
}

/// A question for the explorer.
#[derive(Debug, Clone)]
pub struct Request {
    /// The rules the position is read with (and the games counted are of).
    pub variant: GameVariant,
    /// The position; `None`: the variant's start position.
    pub fen: Option<String>,
    /// Moves played from that position first, each in UCI or SAN.
    pub play: Vec<String>,
    /// Which games count.
    pub filter: Filter,
    /// How many moves to list (the most played).
    pub moves: usize,
    /// How many top games to list (at most [`TOP_MAX`]).
    pub top_games: u32,
    /// How many recent games to list (Lichess's `recentGames`; at most
    /// [`LISTED_MAX`] less the top games found).
    pub recent_games: u32,
}

/// Results of the games counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Score {
    /// White won.
    pub white: i64,
    /// Drawn.
    pub draws: i64,
    /// Black won.
    pub black: i64,
}

/// One move played in the position.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MoveStats {
    /// The move in UCI, castling written king to rook (`e1h1`) in every
    /// variant, as Lichess writes it.
    pub uci: String,
    /// The move in SAN, with check marks.
    pub san: String,
    /// The average rating of the player who played the move, over the
    /// games where that player has a rating (Lichess's rule), rounded
    /// half up; the key is left out when there is none, as Lichess leaves
    /// it out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub average_rating: Option<i64>,
    /// Results.
    #[serde(flatten)]
    pub score: Score,
    /// The game, when the move was played in exactly one game and that
    /// game can be listed (see [`Game`]).
    pub game: Option<Game>,
    /// The opening named at the position after the move.
    pub opening: Option<Opening>,
    /// Games counted (also those without a result).
    #[serde(skip)]
    pub games: i64,
    /// The move's database code.
    #[serde(skip)]
    pub code: i16,
}

/// A player of a listed game.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Player {
    /// The name as last seen (`?`, PGN's unknown, without a `White` or
    /// `Black` tag).
    pub name: String,
    /// The rating in this game.
    pub rating: i32,
}

/// A game as Lichess lists it. Only games with everything a Lichess
/// explorer game has (a result, both ratings, a date) are listed: the
/// others count in the totals but are in no list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Game {
    /// The Lichess id, else `source:external_id`.
    pub id: String,
    /// `white`, `black`, or null for a draw.
    pub winner: Option<&'static str>,
    /// `ultraBullet` … `correspondence`.
    pub speed: &'static str,
    /// `rated` or `casual`: what the `Event` tag says, else rated (both
    /// players have a rating), as `import --rated-only` decides.
    pub mode: &'static str,
    /// White.
    pub white: Player,
    /// Black.
    pub black: Player,
    /// The year it was played.
    pub year: u16,
    /// The month it was played, `YYYY-MM`.
    pub month: String,
}

/// A top or recent game, with the move it played in the position.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ListedGame {
    /// The move, in UCI as [`MoveStats::uci`].
    pub uci: String,
    /// The game.
    #[serde(flatten)]
    pub game: Game,
}

/// The explorer's answer, keys in Lichess's order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Answer {
    /// Results of every counted game that continued from the position.
    #[serde(flatten)]
    pub score: Score,
    /// The most played moves, most played first.
    pub moves: Vec<MoveStats>,
    /// The most recent games that reached the position, but the top ones.
    pub recent_games: Vec<ListedGame>,
    /// The top games that reached the position, in Lichess's order (see
    /// [`TOP_SCAN`](sql::TOP_SCAN)).
    pub top_games: Vec<ListedGame>,
    /// The opening: the last named position on the way (the position
    /// asked, then after each move played), as Lichess names it.
    pub opening: Option<Opening>,
    /// The position's normalized FEN.
    #[serde(skip)]
    pub fen: String,
    /// Games counted, over all moves.
    #[serde(skip)]
    pub games: i64,
}

/// The position a request names: its FEN (or the variant's start
/// position) with its moves played. Every bad input is an
/// [`Error::Request`] saying what is wrong.
pub fn resolve_position(
    variant: GameVariant,
    fen: Option<&str>,
    play: &[String],
) -> Result<VariantPosition, Error> {
    play_moves(variant, fen, play, |_| Ok(()))
}

/// [`resolve_position`], calling `visit` on the position asked and after
/// each move.
fn play_moves(
    variant: GameVariant,
    fen: Option<&str>,
    play: &[String],
    mut visit: impl FnMut(&VariantPosition) -> Result<(), Error>,
) -> Result<VariantPosition, Error> {
    let chess960 = variant == GameVariant::Chess960;
    let mut position = match fen {
        Some(fen) => {
            refuse_other_variants(fen, variant)?;
            position_from_fen(fen, variant.rules(), chess960)
                .map_err(|e| Error::Request(format!("{e} (variant {})", variant.as_db_label())))?
        }
        None if chess960 => {
            return Err(Error::Request(
                "chess960 has no single start position: give its FEN".to_owned(),
            ));
        }
        None => VariantPosition::new(variant.rules()),
    };
    visit(&position)?;
    for (i, text) in play.iter().enumerate() {
        let m = parse_move(&position, text.trim()).map_err(|why| {
            Error::Request(format!(
                "--play move {} ({text:?}) in {}: {why}",
                i + 1,
                normalized_fen(&position)
            ))
        })?;
        position.play_unchecked(m);
        visit(&position)?;
    }
    Ok(position)
}

/// The position a request reaches and the opening named on the way (the
/// last named position, from the position asked through each move
/// played): with the filter and the limits, all of a question that its
/// answer depends on, so two spellings of one question (a FEN or the
/// moves to it, SAN or UCI, move counters) reach the same [`Reached`].
/// What `pgnload serve` keeps answers by, then answers a miss from
/// ([`explore_reached`]) without playing the moves again. Bad input is an
/// [`Error::Request`], as for [`resolve_position`].
pub fn reached(variant: GameVariant, fen: Option<&str>, play: &[String]) -> Result<Reached, Error> {
    let mut opening = None;
    let position = play_moves(variant, fen, play, |p| {
        if let Some(named) = openings::classify(variant, p)? {
            opening = Some(named);
        }
        Ok(())
    })?;
    Ok(Reached {
        fen: normalized_fen(&position),
        position,
        opening,
    })
}

/// What [`reached`] found: the position, its normalized FEN and the
/// opening named on the way.
#[derive(Debug, Clone)]
pub struct Reached {
    /// The position reached.
    pub position: VariantPosition,
    /// Its normalized FEN (the counters' key, and the cache's).
    pub fen: String,
    /// The last named opening from the position asked to it.
    pub opening: Option<Opening>,
}

/// A move of `position` written in UCI (`e2e4`, `e1g1` or `e1h1`) or SAN
/// (`e4`, `O-O`, `Nbd7`, check marks optional). No text is a legal move in
/// both that are different moves: a UCI text read as SAN is a pawn move
/// from its first square to its second.
fn parse_move(position: &VariantPosition, text: &str) -> Result<shakmaty::Move, String> {
    if let Ok(uci) = UciMove::from_ascii(text.as_bytes())
        && let Ok(m) = uci.to_move(position)
    {
        return Ok(m);
    }
    let san = SanPlus::from_ascii(text.as_bytes())
        .map(|san| san.san)
        .or_else(|_| San::from_ascii(text.as_bytes()));
    match san {
        Ok(san) => san
            .to_move(position)
            .map_err(|e| format!("not a legal move here ({e})")),
        Err(_) => Err("neither a UCI nor a SAN move".to_owned()),
    }
}

/// Refuses a FEN written for another variant than `variant`: pockets
/// (`[…]`) outside crazyhouse, check counters outside three-check. (The
/// FEN reader accepts both whatever the variant, and would drop them.)
fn refuse_other_variants(fen: &str, variant: GameVariant) -> Result<(), Error> {
    let Ok(parsed) = Fen::from_ascii(fen.trim().as_bytes()) else {
        // Not FEN syntax: position_from_fen says why.
        return Ok(());
    };
    let setup = parsed.as_setup();
    let other = if setup.pockets.is_some() && variant != GameVariant::Crazyhouse {
        Some("crazyhouse pockets")
    } else if setup.remaining_checks.is_some() && variant != GameVariant::ThreeCheck {
        Some("three-check counters")
    } else {
        None
    };
    match other {
        Some(what) => Err(Error::Request(format!(
            "the FEN {fen:?} has {what}: it is not a {} position (give --variant)",
            variant.as_db_label()
        ))),
        None => Ok(()),
    }
}

/// The move of `position` stored as `code`, in UCI (castling king to
/// rook, as Lichess writes it in every variant) and SAN, and the position
/// after it. A code no legal move has (a database written by other rules)
/// is an [`Error::Inconsistent`] naming it.
fn describe_move(
    position: &VariantPosition,
    code: i16,
) -> Result<(String, String, VariantPosition), Error> {
    let code = code.cast_unsigned();
    let m = position
        .legal_moves()
        .into_iter()
        .find(|m| encode_move(*m) == code)
        .ok_or_else(|| {
            Error::inconsistent(format!(
                "explorer_moves holds move code {code:#06x} ({}), which is not legal in {}",
                decode_move_uci(code, true),
                normalized_fen(position)
            ))
        })?;
    let mut after = position.clone();
    let san = SanPlus::from_move_and_play_unchecked(&mut after, m).to_string();
    Ok((decode_move_uci(code, true), san, after))
}

/// A request's variant and filter as the values of the conditions of the
/// answers' texts ([`sql`]): `$2` to `$6`.
struct BoundFilter {
    variant: &'static str,
    speeds: Option<Vec<i16>>,
    ratings: Option<Vec<i16>>,
    since: Option<i32>,
    until: Option<i32>,
}

impl BoundFilter {
    fn new(request: &Request) -> BoundFilter {
        let filter = &request.filter;
        BoundFilter {
            variant: request.variant.as_db_label(),
            speeds: (!filter.speeds.is_empty())
                .then(|| filter.speeds.iter().map(|s| s.code()).collect()),
            ratings: (!filter.ratings.is_empty())
                .then(|| filter.ratings.iter().map(|r| r.lower_bound()).collect()),
            since: filter.since.map(Month::code),
            until: filter.until.map(Month::code),
        }
    }

    /// `$1` (the position `id`) to `$6` of the answers' texts.
    fn params<'a>(&'a self, id: &'a i64) -> Vec<&'a (dyn ToSql + Sync)> {
        vec![
            id,
            &self.variant,
            &self.speeds,
            &self.ratings,
            &self.since,
            &self.until,
        ]
    }
}

/// A position found in the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Found {
    /// Its id.
    pub id: i64,
    /// Whether it is answered from its rows in `explorer_moves` (else from
    /// its games: see [`sql::FIND_POSITION`]).
    pub counted: bool,
    /// Whether it has more rows than are read whole (see
    /// [`sql::FIND_POSITION`]): then they are grouped by the database.
    pub many_rows: bool,
}

/// The position of normalized FEN `fen` (`None`: no game reached it), in
/// one round trip that also checks that the counters are usable
/// ([`admin::usable`]). Asked with every answer, not once per connection
/// or server: `db explorer disable` and a bulk load (which holds counter
/// rows in memory, and drops the indexes every later question reads)
/// change that under a running server, and its answers must then say so
/// at once rather than count without them or scan whole tables; the check
/// costs three reads of tiny tables in a round trip made anyway.
pub async fn find(db: Prepared<'_>, fen: &str) -> Result<Option<Found>, Error> {
    let row = db
        .query_one(sql::FIND_POSITION, &[&fen])
        .await
        .map_err(db_err("looking up the position and the explorer's state"))?;
    admin::usable(row.get(0), row.get(1), row.get(2))?;
    Ok(row.get::<_, Option<i64>>(3).map(|id| Found {
        id,
        counted: row.get(4),
        many_rows: row.get(5),
    }))
}

/// `variant`'s start position as [`find`] finds it (`None`: Chess960 has
/// none, or no game of the variant started there).
async fn find_start(db: Prepared<'_>, variant: GameVariant) -> Result<Option<Found>, Error> {
    if variant == GameVariant::Chess960 {
        return Ok(None);
    }
    let start = VariantPosition::new(variant.rules());
    find(db, &normalized_fen(&start)).await
}

/// Answers `request`: the position's counted moves, its opening, its top
/// and recent games. A position no counted game reached is an empty
/// answer, not an error; counters not kept or not complete are an error
/// ([`find`]).
pub async fn explore(
    db: Prepared<'_>,
    request: &Request,
    everywhere: &Everywhere,
) -> Result<Answer, Error> {
    let at = reached(request.variant, request.fen.as_deref(), &request.play)?;
    explore_reached(db, request, at, everywhere).await
}

/// [`explore`] of the position `request` reaches, `at`, found before
/// ([`reached`]).
pub async fn explore_reached(
    db: Prepared<'_>,
    request: &Request,
    at: Reached,
    everywhere: &Everywhere,
) -> Result<Answer, Error> {
    let variant = request.variant;
    let Reached {
        position,
        fen,
        opening,
    } = at;
    let mut answer = Answer {
        score: Score::default(),
        moves: Vec::new(),
        recent_games: Vec::new(),
        top_games: Vec::new(),
        opening,
        fen,
        games: 0,
    };
    let Some(found) = find(db, &answer.fen).await? else {
        return Ok(answer);
    };
    let few = if !found.counted {
        few_games(db, found.id, request).await?
    } else if !found.many_rows {
        Some(few_rows(db, found.id, request).await?)
    } else {
        None
    };
    let mut counts = match few {
        Some(few) => few,
        None => counts(db, found, request).await?,
    };
    for (i, row) in counts.moves.iter().enumerate() {
        answer.score.white += row.score.white;
        answer.score.draws += row.score.draws;
        answer.score.black += row.score.black;
        answer.games += row.games;
        if i >= request.moves {
            continue;
        }
        let (uci, san, after) = describe_move(&position, row.code)?;
        answer.moves.push(MoveStats {
            uci,
            san,
            average_rating: (row.mover_rated > 0).then(|| {
                (2 * row.mover_rating_sum + row.mover_rated).div_euclid(2 * row.mover_rated)
            }),
            score: row.score,
            game: None,
            opening: openings::classify(variant, &after)?,
            games: row.games,
            code: row.code,
        });
    }
    if answer.games > 0 {
        list_games(
            db,
            found,
            request,
            &position,
            &mut counts,
            everywhere,
            &mut answer,
        )
        .await?;
    }
    Ok(answer)
}

/// Prepares every statement of an answer on `db`'s connection and runs
/// each once, asking for a position no game reached (id -1) with no
/// games to list, so that the connection has planned them all before its
/// first question: what a server's new connection does
/// (`plan_cache_mode = force_generic_plan` there: each is planned once,
/// at its first run, 1–2 ms apiece, which the first answers on each
/// connection would otherwise pay). While a bulk load is unfinished only
/// the first is run (the others would read tables without indexes).
///
/// # Errors
///
/// A database error: a statement that cannot be prepared or run.
pub async fn plan_once(db: Prepared<'_>) -> Result<(), Error> {
    let request = Request {
        variant: GameVariant::Standard,
        fen: None,
        play: Vec::new(),
        filter: Filter::default(),
        moves: 0,
        top_games: 0,
        recent_games: 0,
    };
    let row = db
        .query_one(sql::FIND_POSITION, &[&""])
        .await
        .map_err(db_err("planning the position lookup"))?;
    if row.get::<_, Option<i64>>(2).is_some() {
        // A bulk load is unfinished: the statements below would read
        // `moves` and `positions` without their indexes (whole), and the
        // plans made now would be remade once they are back anyway. Each
        // is planned at its first use instead.
        return Ok(());
    }
    // A class that no game of position -1 is in: the walk takes none of it.
    let walk = TopWalk {
        speed: 0,
        group: TOP_BANDS[0],
        above: false,
        rank: 0,
        limit: 0,
        reaching: 1,
    };
    for counted in [true, false] {
        let found = Found {
            id: -1,
            counted,
            many_rows: true,
        };
        counts(db, found, &request).await?;
        games_of_moves(db, found, &request, None, &[0]).await?;
    }
    few_games(db, -1, &request).await?;
    few_rows(db, -1, &request).await?;
    for plan in [Plan::Scan, Plan::Walk] {
        top_games(db, -1, &request, plan, &[walk]).await?;
        recent_games(db, -1, &request, plan, &[], 0).await?;
    }
    listed_games(db, &[-1], -1, &HashMap::new()).await?;
    Ok(())
}

/// A move's counts at a position under a filter.
#[derive(Debug, Clone, Copy)]
struct MoveCounts {
    code: i16,
    games: i64,
    score: Score,
    mover_rated: i64,
    mover_rating_sum: i64,
}

/// A position's counts under a filter: its moves, the most played first,
/// its listable games per class, and how many of its rows can list games
/// (what reading their lists costs, [`from_rows`]); and what is known of
/// its listable games so far.
struct PositionCounts {
    moves: Vec<MoveCounts>,
    classes: Vec<(i16, i16, i64)>,
    listing_rows: i64,
    /// The lists its top and recent games and a move's single game are
    /// found in ([`from_rows`]), once read: its rows' ([`read_lists`]), or
    /// its games' as rows of one game each ([`few_games`]).
    lists: Option<Vec<from_rows::ListedRow>>,
    /// Its listable games as listed, when read with its counts
    /// ([`few_games`]): nothing more is read to list them.
    listed: Option<ListedGames>,
}

impl PositionCounts {
    /// Nothing counted yet.
    fn new() -> PositionCounts {
        PositionCounts {
            moves: Vec::new(),
            classes: Vec::new(),
            listing_rows: 0,
            lists: None,
            listed: None,
        }
    }

    /// Adds `counted` to its move's counts.
    fn add_move(&mut self, counted: &MoveCounts) {
        if let Some(known) = self.moves.iter_mut().find(|m| m.code == counted.code) {
            known.games += counted.games;
            known.score.white += counted.score.white;
            known.score.draws += counted.score.draws;
            known.score.black += counted.score.black;
            known.mover_rated += counted.mover_rated;
            known.mover_rating_sum += counted.mover_rating_sum;
        } else {
            self.moves.push(*counted);
        }
    }

    /// Adds `listable` games in `rows` rows that can list them to the
    /// class `speed` and `group`.
    fn add_class(&mut self, speed: i16, group: i16, listable: i64, rows: i64) {
        if let Some(class) = self
            .classes
            .iter_mut()
            .find(|c| (c.0, c.1) == (speed, group))
        {
            class.2 += listable;
        } else {
            self.classes.push((speed, group, listable));
        }
        self.listing_rows += rows;
    }

    /// What [`sql::MOVES_FROM_ROWS`] returns of what was added: the moves
    /// played (the most played first, then by code) and the classes with
    /// listable games.
    fn finish(&mut self) {
        self.moves.retain(|m| m.games > 0);
        self.moves
            .sort_unstable_by_key(|m| (std::cmp::Reverse(m.games), m.code));
        self.classes.retain(|c| c.2 > 0);
    }
}

impl MoveCounts {
    /// The counts of one game that played `code` and ended as `result`
    /// (none: not finished), whose mover has rating `mover_rating`.
    fn of_game(
        code: i16,
        result: Option<i16>,
        mover_rating: Option<i32>,
    ) -> Result<MoveCounts, String> {
        let mut score = Score::default();
        match result {
            Some(1) => score.white = 1,
            Some(0) => score.draws = 1,
            Some(-1) => score.black = 1,
            None => {}
            Some(other) => {
                return Err(format!(
                    "result {other} (games_result_check allows 1, 0, -1)"
                ));
            }
        }
        Ok(MoveCounts {
            code,
            games: 1,
            score,
            mover_rated: i64::from(mover_rating.is_some()),
            mover_rating_sum: mover_rating.map_or(0, i64::from),
        })
    }
}

/// Listed games by id, each with the move it played at the position
/// (its code; `None` if it did not reach it).
type ListedGames = HashMap<i64, (Game, Option<i16>)>;

/// How many games of a position without counter rows [`few_games`] reads
/// at most: one game reached nearly every such position (a position gets
/// rows with its second game); one queued for a recount may have many,
/// and is then answered as any other.
const FEW_GAMES: usize = 16;

/// The counts of position `id` under `request`'s filter, its lists and
/// its listed games, all from its games read whole in one statement
/// ([`sql::POSITION_GAMES`]), where the position has no more than
/// [`FEW_GAMES`] of them under the filter (`None`: more, which are read
/// as [`counts`] and the lists read them). Counted as the import counts
/// a game (`crate::explorer::GameCounts`): its move at its last visit,
/// its result, its mover's rating.
async fn few_games(
    db: Prepared<'_>,
    id: i64,
    request: &Request,
) -> Result<Option<PositionCounts>, Error> {
    let bound = BoundFilter::new(request);
    let limit = i64::try_from(FEW_GAMES + 1).unwrap_or(i64::MAX);
    let mut params = bound.params(&id);
    params.push(&limit);
    let rows = db
        .query(sql::POSITION_GAMES, &params)
        .await
        .map_err(db_err(
            "reading the games of a position without counter rows",
        ))?;
    if rows.len() > FEW_GAMES {
        return Ok(None);
    }
    let mut counts = PositionCounts::new();
    let mut lists = Vec::new();
    let mut listed = HashMap::new();
    for row in &rows {
        let code: i16 = row.get(12);
        let game = MoveCounts::of_game(code, row.get(3), row.get(13))
            .map_err(|e| Error::inconsistent(format!("game {}: {e}", row.get::<_, i64>(0))))?;
        counts.add_move(&game);
        if row.get::<_, bool>(16) {
            let (speed, group): (i16, i16) = (row.get(14), row.get(15));
            let (game_id, game, entry) = listed_game(row).ok_or_else(|| {
                Error::bug("a game explorer_games finds listable lacks a listed game's fields")
            })?;
            counts.add_class(speed, group, 1, 1);
            lists.push(from_rows::ListedRow {
                speed,
                group,
                listable: 1,
                code,
                games: vec![entry],
            });
            listed.insert(game_id, (game, Some(code)));
        }
    }
    counts.finish();
    counts.lists = Some(lists);
    counts.listed = Some(listed);
    Ok(Some(counts))
}

/// The counts of position `found` under `request`'s filter, from its rows
/// or its games, in one statement ([`sql::MOVES_FROM_ROWS`]).
async fn counts(
    db: Prepared<'_>,
    found: Found,
    request: &Request,
) -> Result<PositionCounts, Error> {
    let bound = BoundFilter::new(request);
    let sql = if found.counted {
        sql::MOVES_FROM_ROWS
    } else {
        sql::MOVES_FROM_GAMES
    };
    let rows = db
        .query(sql, &bound.params(&found.id))
        .await
        .map_err(db_err("reading the explorer counters"))?;
    let mut counts = PositionCounts::new();
    for row in &rows {
        match (row.get::<_, Option<i16>>(0), row.get(1), row.get(2)) {
            (Some(code), _, _) => counts.moves.push(MoveCounts {
                code,
                games: row.get(3),
                score: Score {
                    white: row.get(4),
                    draws: row.get(5),
                    black: row.get(6),
                },
                mover_rated: row.get(7),
                mover_rating_sum: row.get(8),
            }),
            (None, Some(speed), Some(group)) => {
                counts.classes.push((speed, group, row.get(9)));
                counts.listing_rows += row.get::<_, i64>(10);
            }
            (None, _, _) => {
                return Err(Error::bug(
                    "the explorer counters' grouping returned a row of neither a move nor a class",
                ));
            }
        }
    }
    Ok(counts)
}

/// The ways to a position's listed games through its games, priced with
/// the start position's classes ([`Everywhere`]).
struct Ways {
    everywhere: Option<Arc<Vec<(i16, i16, i64)>>>,
    top: Priced,
}

impl Ways {
    /// The ways for `walks` at a position of `games` games.
    async fn price(
        db: Prepared<'_>,
        request: &Request,
        everywhere: &Everywhere,
        walks: &[TopWalk],
        games: i64,
    ) -> Result<Ways, Error> {
        let everywhere = everywhere.classes(db, request).await?;
        let top = choose_top_plan(walks, everywhere.as_deref().map(Vec::as_slice), games);
        Ok(Ways { everywhere, top })
    }

    /// The way to the `wanted` most recent games of a position of `games`
    /// games, `here` its classes.
    fn recent(&self, here: &Classes, wanted: usize, games: i64) -> Priced {
        choose_recent_plan(
            here,
            self.everywhere.as_deref().map(Vec::as_slice),
            wanted,
            games,
        )
    }
}

/// A position's top and recent games (ids, in order): from the lists
/// already read ([`PositionCounts::lists`]), else from the lists of its
/// rows where they are cheaper to read than the games a scan or walks
/// would (kept in `counts` then, for the game of a move played once),
/// else from its games; the top games also from its games where the lists
/// may not hold them ([`from_rows::top`]).
async fn top_and_recent(
    db: Prepared<'_>,
    found: Found,
    request: &Request,
    counts: &mut PositionCounts,
    everywhere: &Everywhere,
    games: i64,
) -> Result<(Vec<i64>, Vec<i64>), Error> {
    let id = found.id;
    // The position's listable games: where there are none, there is
    // nothing to look for.
    let listable: i64 = counts.classes.iter().map(|c| c.2).sum();
    if (request.top_games == 0 && request.recent_games == 0) || listable <= 0 {
        return Ok((Vec::new(), Vec::new()));
    }
    let here = counts.classes.as_slice();
    let walks = top_group(&request.filter).map_or_else(Vec::new, |g| top_walks(here, g));
    let mut ways = None;
    if counts.lists.is_none() {
        let priced = Ways::price(db, request, everywhere, &walks, games).await?;
        // The rows' lists hold both lists (see [`from_rows`]), read with
        // each row's games in one read: taken where there are fewer rows
        // than the games the scan or walks would read.
        let recent = priced.recent(here, LISTED_MAX, games);
        let otherwise: i128 = [
            (!walks.is_empty(), priced.top),
            (request.recent_games > 0, recent),
        ]
        .iter()
        .filter_map(|(asked, plan)| asked.then_some(plan.reads))
        .sum();
        if found.counted && i128::from(counts.listing_rows) < otherwise {
            counts.lists = Some(read_lists(db, id, request).await?);
        }
        ways = Some(priced);
    }
    let here = counts.classes.as_slice();
    let rows = counts.lists.as_deref();
    let mut top = match rows.and_then(|rows| from_rows::top(rows, &walks)) {
        Some(top) => top,
        None if walks.is_empty() => Vec::new(),
        None => {
            let plan = match &ways {
                Some(ways) => ways.top.plan,
                None => {
                    Ways::price(db, request, everywhere, &walks, games)
                        .await?
                        .top
                        .plan
                }
            };
            top_games(db, id, request, plan, &walks).await?
        }
    };
    // Lichess's rule: the recent games fill what the top games (before
    // the request's limit) leave of the games it lists.
    let wanted = usize::try_from(request.recent_games)
        .unwrap_or(usize::MAX)
        .min(LISTED_MAX - top.len());
    top.truncate(usize::try_from(request.top_games).unwrap_or(usize::MAX));
    let left = listable > i64::try_from(top.len()).unwrap_or(i64::MAX);
    if wanted == 0 || !left {
        return Ok((top, Vec::new()));
    }
    let recent = match (rows, ways) {
        (Some(rows), _) => from_rows::recent(rows, &top, wanted),
        (None, Some(ways)) => {
            let plan = ways.recent(here, wanted, games).plan;
            recent_games(db, id, request, plan, &top, wanted).await?
        }
        (None, None) => {
            return Err(Error::bug(
                "a position's games are neither listed nor priced",
            ));
        }
    };
    Ok((top, recent))
}

/// Fills `answer`'s lists: its top and recent games, and the game of each
/// move played once.
async fn list_games(
    db: Prepared<'_>,
    found: Found,
    request: &Request,
    position: &VariantPosition,
    counts: &mut PositionCounts,
    everywhere: &Everywhere,
    answer: &mut Answer,
) -> Result<(), Error> {
    let (top, recent) =
        top_and_recent(db, found, request, counts, everywhere, answer.games).await?;
    let once: Vec<i16> = answer
        .moves
        .iter()
        .filter_map(|m| (m.games == 1).then_some(m.code))
        .collect();
    let game_of_move = games_of_moves(db, found, request, counts.lists.as_deref(), &once).await?;
    let games = if let Some(games) = counts.listed.take() {
        games
    } else {
        let listed: Vec<i64> = top
            .iter()
            .chain(&recent)
            .chain(game_of_move.values())
            .copied()
            .collect();
        // A game from a row's list played the row's move.
        let moves: HashMap<i64, i16> = counts
            .lists
            .iter()
            .flatten()
            .flat_map(|row| row.games.iter().map(|game| (game.id, row.code)))
            .collect();
        listed_games(db, &listed, found.id, &moves).await?
    };
    let with_move = |ids: &[i64]| -> Result<Vec<ListedGame>, Error> {
        let mut out = Vec::new();
        for game_id in ids {
            if let Some((game, Some(code))) = games.get(game_id) {
                let (uci, _, _) = describe_move(position, *code)?;
                out.push(ListedGame {
                    uci,
                    game: game.clone(),
                });
            }
        }
        Ok(out)
    };
    answer.top_games = with_move(&top)?;
    answer.recent_games = with_move(&recent)?;
    for m in &mut answer.moves {
        m.game = game_of_move
            .get(&m.code)
            .and_then(|game_id| games.get(game_id))
            .map(|(game, _)| game.clone());
    }
    Ok(())
}

/// The game of each move of `once` (moves played once under `request`'s
/// filter) at position `found`: from the lists of its rows, read already
/// (`rows`) or now (a listable game is in its one row's list), or from
/// its games.
async fn games_of_moves(
    db: Prepared<'_>,
    found: Found,
    request: &Request,
    rows: Option<&[from_rows::ListedRow]>,
    once: &[i16],
) -> Result<HashMap<i16, i64>, Error> {
    if let Some(rows) = rows {
        return Ok(from_rows::game_of_moves(rows, once));
    }
    let mut game_of_move = HashMap::new();
    if !once.is_empty() {
        let bound = BoundFilter::new(request);
        let mut params = bound.params(&found.id);
        params.push(&once);
        let sql = if found.counted {
            sql::GAMES_OF_MOVES_FROM_ROWS
        } else {
            sql::GAMES_OF_MOVES_FROM_GAMES
        };
        for row in db
            .query(sql, &params)
            .await
            .map_err(db_err("reading the games of the moves played once"))?
        {
            game_of_move.insert(row.get::<_, i16>(0), row.get::<_, i64>(1));
        }
    }
    Ok(game_of_move)
}

/// A counter row of a position as [`sql::POSITION_ROWS`] reads it.
struct CounterRow {
    counts: MoveCounts,
    speed: i16,
    group: i16,
    month: i32,
    /// Its lists, if it lists games.
    listed: Option<from_rows::ListedRow>,
}

/// Position `id`'s rows under `request`'s filter, whole
/// ([`sql::POSITION_ROWS`]).
///
/// # Errors
///
/// A database error, or lists of different lengths (which the table's
/// check forbids).
async fn read_rows(db: Prepared<'_>, id: i64, request: &Request) -> Result<Vec<CounterRow>, Error> {
    let bound = BoundFilter::new(request);
    let rows = db
        .query(sql::POSITION_ROWS, &bound.params(&id))
        .await
        .map_err(db_err("reading the explorer counters"))?;
    rows.iter()
        .map(|row| {
            let counts = MoveCounts {
                code: row.get(0),
                games: i64::from(row.get::<_, i32>(4)),
                score: Score {
                    white: i64::from(row.get::<_, i32>(5)),
                    draws: i64::from(row.get::<_, i32>(6)),
                    black: i64::from(row.get::<_, i32>(7)),
                },
                mover_rated: i64::from(row.get::<_, i32>(8)),
                mover_rating_sum: row.get(9),
            };
            let (speed, group) = (row.get(1), row.get(2));
            let listed = match (
                row.get::<_, Option<Vec<i64>>>(10),
                row.get::<_, Option<Vec<DateTime<Utc>>>>(11),
                row.get::<_, Option<Vec<i64>>>(12),
            ) {
                (Some(ids), Some(started), Some(ratings))
                    if ids.len() == started.len() && ids.len() == ratings.len() =>
                {
                    Some(from_rows::ListedRow {
                        speed,
                        group,
                        listable: counts.score.white + counts.score.draws + counts.score.black,
                        code: counts.code,
                        games: ids
                            .iter()
                            .zip(&started)
                            .zip(&ratings)
                            .map(|((&id, started), &ratings)| ListEntry {
                                started_us: started.timestamp_micros(),
                                id,
                                ratings,
                            })
                            .collect(),
                    })
                }
                (None, None, None) => None,
                _ => {
                    return Err(Error::bug(
                        "an explorer counter row's lists differ in length \
                         (explorer_moves_listed_games_check)",
                    ));
                }
            };
            Ok(CounterRow {
                counts,
                speed,
                group,
                month: row.get(3),
                listed,
            })
        })
        .collect()
}

/// The lists of position `id`'s rows under `request`'s filter, for
/// [`from_rows`].
///
/// # Errors
///
/// As [`read_rows`].
pub async fn read_lists(
    db: Prepared<'_>,
    id: i64,
    request: &Request,
) -> Result<Vec<from_rows::ListedRow>, Error> {
    Ok(read_rows(db, id, request)
        .await?
        .into_iter()
        .filter_map(|row| row.listed)
        .collect())
}

/// The counts of position `id` under `request`'s filter and its rows'
/// lists, from its rows read whole (a position of few rows: see
/// [`sql::FIND_POSITION`]), counted as [`sql::MOVES_FROM_ROWS`] groups them: in
/// a row of a rating group and a month, the games with a result are
/// listable.
async fn few_rows(db: Prepared<'_>, id: i64, request: &Request) -> Result<PositionCounts, Error> {
    let mut counts = PositionCounts::new();
    let mut lists = Vec::new();
    for row in read_rows(db, id, request).await? {
        counts.add_move(&row.counts);
        if row.group >= 0 && row.month >= 0 {
            let score = row.counts.score;
            counts.add_class(
                row.speed,
                row.group,
                score.white + score.draws + score.black,
                1,
            );
        }
        lists.extend(row.listed);
    }
    counts.finish();
    counts.lists = Some(lists);
    Ok(counts)
}

/// A position's top and recent games, and the game of a move played
/// once, taken from the lists of its rows (`explorer_moves`' most recent
/// listable games of each row, [`super::ListedGames`]) instead of its
/// games: pure functions of what [`read_lists`] read.
pub mod from_rows {
    use std::collections::HashMap;

    use super::{LISTED_MAX, SPLIT_GROUP, TOP_MAX, TopWalk};
    use crate::explorer::{ListEntry, sql};

    /// A counter row's lists.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct ListedRow {
        /// The speed's code.
        pub speed: i16,
        /// The rating group.
        pub group: i16,
        /// Its listable games: all listed when no more than its list.
        pub listable: i64,
        /// The move's code.
        pub code: i16,
        /// Its list, the most recent first.
        pub games: Vec<ListEntry>,
    }

    impl ListedRow {
        /// Whether its list holds every listable game of the row.
        fn whole(&self) -> bool {
            i64::try_from(self.games.len()).is_ok_and(|len| len >= self.listable)
        }
    }

    /// Whether a game of the 2500 group ranks in Lichess's 3200 band: an
    /// average of [`sql::TOP_BAND_FLOOR`] or more.
    fn above(ratings: i64) -> bool {
        ratings.div_euclid(2) >= i64::from(sql::TOP_BAND_FLOOR)
    }

    /// The first [`TOP_MAX`] top games in Lichess's order among the
    /// classes `walks` ([`super::top_walks`]), from `rows`; `None` where
    /// the lists may not hold them: a class's first games are among the
    /// most recent of their rows, but a 2500-group row that lists only
    /// part of its games may leave out the older of its 2800+ games (and
    /// then also its others: the 2800+ class is ranked first).
    pub fn top(rows: &[ListedRow], walks: &[TopWalk]) -> Option<Vec<i64>> {
        let partial = |walk: &TopWalk| {
            walk.above
                && rows
                    .iter()
                    .any(|r| (r.speed, r.group) == (walk.speed, walk.group) && !r.whole())
        };
        if walks.iter().any(partial) {
            return None;
        }
        let mut ranked: Vec<(i32, &ListEntry)> = Vec::new();
        for row in rows {
            for game in &row.games {
                let class = (
                    row.speed,
                    row.group,
                    row.group >= SPLIT_GROUP && above(game.ratings),
                );
                if let Some(walk) = walks.iter().find(|w| (w.speed, w.group, w.above) == class) {
                    ranked.push((walk.rank, game));
                }
            }
        }
        ranked.sort_unstable_by_key(|(rank, game)| (*rank, game.order()));
        Some(
            ranked
                .iter()
                .take(TOP_MAX)
                .map(|(_, game)| game.id)
                .collect(),
        )
    }

    /// The `wanted` most recent games of `rows` but the games `but`. Each
    /// is among the `wanted + but.len()` (at most [`LISTED_MAX`]) most
    /// recent of its row, which its list holds.
    pub fn recent(rows: &[ListedRow], but: &[i64], wanted: usize) -> Vec<i64> {
        debug_assert!(wanted + but.len() <= LISTED_MAX);
        let mut games: Vec<&ListEntry> = rows
            .iter()
            .flat_map(|row| &row.games)
            .filter(|game| !but.contains(&game.id))
            .collect();
        games.sort_unstable_by_key(|game| game.order());
        games.iter().take(wanted).map(|game| game.id).collect()
    }

    /// The listed game of each move of `once` (moves played once under
    /// the filter): its one row lists it if it is listable.
    pub fn game_of_moves(rows: &[ListedRow], once: &[i16]) -> HashMap<i16, i64> {
        rows.iter()
            .filter(|row| once.contains(&row.code))
            .flat_map(|row| row.games.iter().map(|game| (row.code, game.id)))
            .collect()
    }
}

/// The games `ids` that can be listed, by id, each with the move it
/// played at position `id` (its code; `None` if it did not reach it): as
/// `moves` says, else looked up.
async fn listed_games(
    db: Prepared<'_>,
    ids: &[i64],
    id: i64,
    moves: &HashMap<i64, i16>,
) -> Result<ListedGames, Error> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let unknown: Vec<i64> = ids
        .iter()
        .filter(|game_id| !moves.contains_key(game_id))
        .copied()
        .collect();
    let rows = db
        .query(sql::LISTED_GAMES, &[&ids, &id, &unknown])
        .await
        .map_err(db_err("reading the listed games"))?;
    let mut games = HashMap::new();
    for row in rows {
        let Some((game_id, game, _)) = listed_game(&row) else {
            continue;
        };
        let code = match (moves.get(&game_id), row.get::<_, Option<&[u8]>>(12)) {
            (Some(&code), _) => Some(code),
            (None, None) => None,
            (None, Some(&[high, low])) => Some(i16::from_be_bytes([high, low])),
            (None, Some(bytes)) => {
                return Err(Error::inconsistent(format!(
                    "game {game_id}'s moves end inside the move at position {id} ({} bytes)",
                    bytes.len()
                )));
            }
        };
        games.insert(game_id, (game, code));
    }
    Ok(games)
}

/// The game of a row that starts with [`sql`]'s listed columns, as
/// listed, with its id and its entry in a row's list; `None` if it cannot
/// be listed (see [`Game`]).
fn listed_game(row: &tokio_postgres::Row) -> Option<(i64, Game, ListEntry)> {
    let game_id: i64 = row.get(0);
    let source: String = row.get(1);
    let external_id: String = row.get(2);
    let clock = match (row.get(8), row.get(9)) {
        (Some(initial_s), Some(increment_s)) => Some(TimeControl {
            initial_s,
            increment_s,
        }),
        _ => None,
    };
    let speed = Speed::from_clock(clock);
    let started_at: Option<DateTime<Utc>> = row.get(11);
    let (Some(result), Some(white_elo), Some(black_elo), Some(started_at)) = (
        row.get::<_, Option<i16>>(3),
        row.get::<_, Option<i32>>(5),
        row.get::<_, Option<i32>>(7),
        started_at,
    ) else {
        return None;
    };
    // A game without a month is not listable (`sql::listable!`).
    let month = Month::of_time(started_at)?;
    let player = |name: Option<String>, rating: i32| Player {
        name: name.unwrap_or_else(|| "?".to_owned()),
        rating,
    };
    let event: Option<String> = row.get(10);
    let game = Game {
        id: if source == "lichess" {
            external_id
        } else {
            format!("{source}:{external_id}")
        },
        winner: match result {
            1 => Some("white"),
            -1 => Some("black"),
            _ => None,
        },
        speed: speed.as_str(),
        mode: if rated_by_event(event.as_deref(), true) {
            "rated"
        } else {
            "casual"
        },
        white: player(row.get(4), white_elo),
        black: player(row.get(6), black_elo),
        year: month.year(),
        month: month.to_string(),
    };
    let entry = ListEntry {
        started_us: started_at.timestamp_micros(),
        id: game_id,
        ratings: i64::from(white_elo) + i64::from(black_elo),
    };
    Some((game_id, game, entry))
}

/// The lowest rating band whose games can be top games under `filter`
/// (Lichess's `top_group`): the lowest of 2000, 2200, 2500 from which
/// every band up is in the filter; none if 2500 is not (then Lichess
/// lists no top games).
pub fn top_group(filter: &Filter) -> Option<i16> {
    let selected = |band: i16| {
        filter.ratings.is_empty() || filter.ratings.iter().any(|r| r.lower_bound() == band)
    };
    TOP_BANDS
        .iter()
        .rev()
        .take_while(|&&band| selected(band))
        .last()
        .copied()
}

/// Listable games of a position per class: (speed code, rating group,
/// games).
pub type Classes = [(i16, i16, i64)];

/// The position `found`'s listable games under `request`'s filter per
/// speed and rating group, from its counters: what prices and bounds the
/// walks.
pub async fn listable_by_class(
    db: Prepared<'_>,
    found: Found,
    request: &Request,
) -> Result<Vec<(i16, i16, i64)>, Error> {
    Ok(counts(db, found, request).await?.classes)
}

/// The listable games per class of each variant's start position under
/// each filter asked (which nearly every game passes: what prices a walk,
/// [`choose_top_plan`]), kept for [`Everywhere::KEPT`] and for at most
/// [`Everywhere::MOST`] questions: one read of the start position's many
/// rows instead of one with every answer. Only the choice between a scan
/// and a walk, which list the same games, reads it: an estimate from
/// before an import changes what an answer costs, never what it says.
#[derive(Debug, Default)]
pub struct Everywhere {
    kept: Mutex<HashMap<(GameVariant, Filter), Kept>>,
}

/// A start position's classes as read at a time (`None`: the variant has
/// no start position with games).
type Kept = (Instant, Option<Arc<Vec<(i16, i16, i64)>>>);

impl Everywhere {
    /// How long a start position's classes are used before they are read
    /// again.
    pub const KEPT: Duration = Duration::from_mins(1);
    /// How many (variant, filter) questions are kept at most: past that,
    /// all are forgotten (each costs one read of the start position).
    pub const MOST: usize = 256;

    /// The classes of `request`'s variant's start position under its
    /// filter: kept ones if read within [`Everywhere::KEPT`], else read
    /// now.
    async fn classes(
        &self,
        db: Prepared<'_>,
        request: &Request,
    ) -> Result<Option<Arc<Vec<(i16, i16, i64)>>>, Error> {
        let key = (request.variant, request.filter.clone());
        let now = Instant::now();
        if let Ok(kept) = self.kept.lock()
            && let Some((at, classes)) = kept.get(&key)
            && now.duration_since(*at) < Self::KEPT
        {
            return Ok(classes.clone());
        }
        let classes = match find_start(db, request.variant).await? {
            Some(start) => Some(Arc::new(listable_by_class(db, start, request).await?)),
            None => None,
        };
        if let Ok(mut kept) = self.kept.lock() {
            if kept.len() >= Self::MOST {
                kept.clear();
            }
            kept.insert(key, (now, classes.clone()));
        }
        Ok(classes)
    }
}

/// One class of a position's top games in Lichess's order, and how many
/// of its games a walk takes: [`sql::TOP_WALK`] walks each class of a list
/// of them, the most recent game first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopWalk {
    /// The speed's code.
    pub speed: i16,
    /// The rating group (2000, 2200 or 2500).
    pub group: i16,
    /// In the 2500 group, whether these are the games of an average of
    /// 2800 or more (Lichess's 3200 band, [`sql::TOP_BAND`]) or the
    /// others; `false` below it.
    pub above: bool,
    /// Lichess's rank of the class's games (`highscore - band`, lower
    /// first).
    pub rank: i32,
    /// How many of its games are taken at most.
    pub limit: i64,
    /// The position's listable games of the class's rating group and
    /// speed (the 2500 group's two classes share them: the counters do not
    /// split it).
    pub reaching: i64,
}

/// The walks that find the first [`TOP_MAX`] top games of a position from
/// its listable games per class (`here`), from rating group `top_group`
/// up, in Lichess's rank order: each class as far as it can hold games
/// among the first [`TOP_MAX`], given the games the classes ranked before
/// it are known to hold; none past the class that completes them. Its
/// classes' counts are exact, but for the 2500 group's two (the counters
/// do not split it): its 3200 band's walk counts on none of the group's
/// games, its 2500 band's on the group's.
pub fn top_walks(here: &Classes, top_group: i16) -> Vec<TopWalk> {
    let top_band = i32::try_from(sql::TOP_BAND).unwrap_or(i32::MAX);
    let mut walks: Vec<TopWalk> = Vec::new();
    for &(speed, group, reaching) in here {
        if group < top_group || reaching <= 0 {
            continue;
        }
        let highscore = Speed::from_code(speed).map_or(0, Speed::highscore);
        let walk = TopWalk {
            speed,
            group,
            above: false,
            rank: highscore - i32::from(group),
            limit: 0,
            reaching,
        };
        if group >= SPLIT_GROUP {
            walks.push(TopWalk {
                above: true,
                rank: highscore - top_band,
                ..walk
            });
        }
        walks.push(walk);
    }
    walks.sort_unstable_by_key(|w| (w.rank, w.speed, w.group, !w.above));
    let top_max = i64::try_from(TOP_MAX).unwrap_or(i64::MAX);
    // Games certainly found by the classes ranked strictly before.
    let mut known = 0i64;
    let mut from = 0;
    while from < walks.len() {
        let rank = walks[from].rank;
        let to = from + walks[from..].iter().take_while(|w| w.rank == rank).count();
        let room = (top_max - known).max(0);
        for walk in &mut walks[from..to] {
            walk.limit = walk.reaching.min(room);
            if !walk.above {
                known += walk.limit;
            }
        }
        from = to;
    }
    walks.retain(|w| w.limit > 0);
    walks
}

/// How listed games are found. Both give the same games; they differ in
/// what they read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// Every counted game at the position, from its moves rows, sorted:
    /// cost grows with the games at the position (fine when it is rare).
    Scan,
    /// The variant's games in the order asked (from the top rating
    /// groups; from the most recent), keeping those with a moves row at
    /// the position: cost grows with the games passed (fine when the
    /// position is frequent).
    Walk,
}

/// A way to listed games and about how many games (or rows) it reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Priced {
    /// The way.
    pub plan: Plan,
    /// What it reads: the games a walk passes, the games a scan sorts.
    pub reads: i128,
}

impl Priced {
    /// The scan of a position's `games`.
    fn scan(games: i64) -> Priced {
        Priced {
            plan: Plan::Scan,
            reads: i128::from(games),
        }
    }

    /// The cheaper of this and a walk that passes `passed` games.
    fn or_walk(self, passed: i128) -> Priced {
        if passed < self.reads {
            Priced {
                plan: Plan::Walk,
                reads: passed,
            }
        } else {
            self
        }
    }
}

/// The cheaper way to the top games: each walk passes about `limit ×
/// everywhere / reaching` games of its class (`everywhere`: the variant's
/// start position, which nearly every game passes; the position's games
/// spread evenly in the class's time), a scan reads the position's
/// `games`. Without `everywhere` (Chess960) the scan, whose cost is known.
pub fn choose_top_plan(walks: &[TopWalk], everywhere: Option<&Classes>, games: i64) -> Priced {
    let scan = Priced::scan(games);
    let Some(everywhere) = everywhere else {
        return scan;
    };
    let passed: i128 = walks
        .iter()
        .map(|walk| {
            let class: i64 = everywhere
                .iter()
                .filter(|c| (c.0, c.1) == (walk.speed, walk.group))
                .map(|c| c.2)
                .sum();
            // Games that did not start from the start position are not in
            // its counts: the class holds at least the position's own.
            let class = i128::from(class.max(walk.reaching));
            (i128::from(walk.limit) * class / i128::from(walk.reaching)).min(class)
        })
        .sum();
    scan.or_walk(passed)
}

/// The cheaper way to the `wanted` most recent games: a walk from the
/// most recent game passes about `wanted × everywhere / here` games (the
/// position's games spread evenly in time), a scan reads its `games`.
pub fn choose_recent_plan(
    here: &Classes,
    everywhere: Option<&Classes>,
    wanted: usize,
    games: i64,
) -> Priced {
    let scan = Priced::scan(games);
    let total = |classes: &Classes| -> i64 { classes.iter().map(|c| c.2).sum() };
    let reaching = total(here);
    match everywhere {
        Some(everywhere) if reaching > 0 => {
            let wanted = i128::try_from(wanted).unwrap_or(i128::MAX);
            let passed =
                wanted.saturating_mul(i128::from(total(everywhere))) / i128::from(reaching);
            scan.or_walk(passed)
        }
        _ => scan,
    }
}

/// The first [`TOP_MAX`] top games of position `id` under `request`'s
/// filter in Lichess's order (by rating band below the best rating of the
/// speed, then the most recent), among the classes `walks` ([`top_walks`]),
/// found as `plan` says.
pub async fn top_games(
    db: Prepared<'_>,
    id: i64,
    request: &Request,
    plan: Plan,
    walks: &[TopWalk],
) -> Result<Vec<i64>, Error> {
    let Some(low) = walks.iter().map(|w| w.group).min() else {
        return Ok(Vec::new());
    };
    let limit = i64::try_from(TOP_MAX).unwrap_or(i64::MAX);
    let bound = BoundFilter::new(request);
    let mut params = bound.params(&id);
    params.push(&limit);
    let highscores: Vec<i32> = Speed::ALL.iter().map(|s| s.highscore()).collect();
    let speeds: Vec<i16> = walks.iter().map(|w| w.speed).collect();
    let groups: Vec<i16> = walks.iter().map(|w| w.group).collect();
    let above: Vec<bool> = walks.iter().map(|w| w.above).collect();
    let limits: Vec<i64> = walks.iter().map(|w| w.limit).collect();
    let ranks: Vec<i32> = walks.iter().map(|w| w.rank).collect();
    let sql = match plan {
        Plan::Scan => {
            params.extend([&low as &(dyn ToSql + Sync), &highscores]);
            sql::TOP_SCAN
        }
        Plan::Walk => {
            params.extend([
                &speeds as &(dyn ToSql + Sync),
                &groups,
                &above,
                &limits,
                &ranks,
            ]);
            sql::TOP_WALK
        }
    };
    let rows = db
        .query(sql, &params)
        .await
        .map_err(db_err("reading the top games"))?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// The `wanted` most recent games of position `id` under `request`'s
/// filter but the games `but`, found as `plan` says.
pub async fn recent_games(
    db: Prepared<'_>,
    id: i64,
    request: &Request,
    plan: Plan,
    but: &[i64],
    wanted: usize,
) -> Result<Vec<i64>, Error> {
    let limit = i64::try_from(wanted).unwrap_or(i64::MAX);
    let but = but.to_vec();
    let bound = BoundFilter::new(request);
    let mut params = bound.params(&id);
    params.extend([&limit as &(dyn ToSql + Sync), &but]);
    let sql = match plan {
        Plan::Scan => sql::RECENT_SCAN,
        Plan::Walk => sql::RECENT_WALK,
    };
    let rows = db
        .query(sql, &params)
        .await
        .map_err(db_err("reading the recent games"))?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bands(bounds: &[&str]) -> Filter {
        Filter {
            ratings: bounds.iter().map(|b| b.parse().expect("a band")).collect(),
            ..Filter::default()
        }
    }

    #[test]
    fn top_games_come_from_the_bands_from_2000_up_that_the_filter_selects_to_the_top() {
        assert_eq!(top_group(&Filter::default()), Some(2000));
        assert_eq!(
            top_group(&bands(&["1600", "2000", "2200", "2500"])),
            Some(2000)
        );
        assert_eq!(top_group(&bands(&["2200", "2500"])), Some(2200));
        // A gap: from the band above it.
        assert_eq!(top_group(&bands(&["2000", "2500"])), Some(2500));
        // Without 2500, none (as Lichess: its top band is always 2500+).
        assert_eq!(top_group(&bands(&["2000", "2200"])), None);
        assert_eq!(top_group(&bands(&["1600"])), None);
    }

    /// The (speed, group, above, limit) of each walk.
    fn walked(here: &Classes, top_group: i16) -> Vec<(i16, i16, bool, i64)> {
        top_walks(here, top_group)
            .iter()
            .map(|w| (w.speed, w.group, w.above, w.limit))
            .collect()
    }

    #[test]
    fn top_walks_take_each_class_in_lichess_order_as_far_as_the_first_four_need() {
        let (blitz, classical, correspondence) = (2, 4, 5);
        // Ranks (highscore - band): classical 2800+ -667, blitz 2800+
        // -226, classical 2500 33, blitz 2500 474, blitz 2200 774,
        // correspondence 2800+ 800, correspondence 2500 1500. The 2500
        // group's 2800+ games are not counted apart: their walk counts on
        // none, the group's other walk on all of them.
        let here = [
            (blitz, 2200, 50),
            (classical, 2500, 2),
            (correspondence, 2500, 7),
        ];
        assert_eq!(
            walked(&here, 2000),
            [
                (classical, 2500, true, 2),
                (classical, 2500, false, 2),
                (blitz, 2200, false, 2),
            ]
        );
        // Four games in the classes ranked first: nothing after them.
        let here = [(blitz, 2200, 50), (classical, 2500, 3), (blitz, 2500, 1)];
        assert_eq!(
            walked(&here, 2000),
            [
                (classical, 2500, true, 3),
                (blitz, 2500, true, 1),
                (classical, 2500, false, 3),
                (blitz, 2500, false, 1),
            ]
        );
        // Fewer than four games from the top group up: all of them.
        assert_eq!(
            walked(&[(blitz, 2500, 2)], 2000),
            [(blitz, 2500, true, 2), (blitz, 2500, false, 2)]
        );
        // Only games below the top group: nothing to walk.
        assert_eq!(walked(&[(blitz, 1600, 90)], 2200), []);
        assert_eq!(walked(&[(blitz, 2000, 90)], 2200), []);
        // A class that holds the first four ends the walks.
        let here = [(blitz, 2000, 9), (blitz, 2200, 9)];
        assert_eq!(
            walked(&here, 2000),
            [(blitz, 2200, false, 4)],
            "blitz 2200 (774) holds the first four before blitz 2000 (974)"
        );
    }

    /// A row of `speed`, `group` and move `code` with `listable` games,
    /// listing `games` as (time, id, ratings).
    fn listed_row(
        speed: i16,
        group: i16,
        code: i16,
        listable: i64,
        games: &[(i64, i64, i64)],
    ) -> from_rows::ListedRow {
        from_rows::ListedRow {
            speed,
            group,
            listable,
            code,
            games: games
                .iter()
                .map(|&(started_us, id, ratings)| ListEntry {
                    started_us,
                    id,
                    ratings,
                })
                .collect(),
        }
    }

    #[test]
    fn the_lists_of_the_rows_give_lichess_s_top_and_recent_games() {
        let (blitz, classical) = (2, 4);
        // Ranks: classical 2800+ -667, classical 2500 33, blitz 2200 774.
        let mut rows = vec![
            listed_row(
                blitz,
                2200,
                1,
                3,
                &[(50, 1, 4500), (40, 2, 4500), (30, 3, 4500)],
            ),
            listed_row(classical, 2500, 1, 2, &[(45, 5, 5000), (10, 4, 5600)]),
            listed_row(classical, 2500, 2, 2, &[(20, 6, 5599), (20, 8, 5001)]),
            listed_row(blitz, 1600, 3, 1, &[(60, 7, 3200)]),
        ];
        let walks = top_walks(&[(blitz, 2200, 3), (classical, 2500, 4)], 2000);
        // The 2800+ game first whatever its date (5600: an average of
        // 2800; 5599 is 2799), then the 2500 band by date, ties by the
        // highest id; the blitz 2200 class holds the fourth.
        let top = from_rows::top(&rows, &walks).expect("every 2500 row lists all its games");
        assert_eq!(top, [4, 5, 8, 6]);
        // The recent games: the most recent of the others, of any group.
        assert_eq!(from_rows::recent(&rows, &top, 4), [7, 1, 2, 3]);
        assert_eq!(from_rows::recent(&rows, &[], 2), [7, 1]);
        // The game of a move played once: its row's.
        assert_eq!(
            from_rows::game_of_moves(&rows, &[3]),
            HashMap::from([(3, 7)])
        );
        // A row of another group listing part of its games: its class's
        // first games are still its most recent.
        rows[0].listable = 40;
        assert_eq!(from_rows::top(&rows, &walks), Some(top.clone()));
        // A 2500 row listing part of its games may have left out a 2800+
        // one: not from the lists.
        rows[2].listable = 9;
        assert_eq!(from_rows::top(&rows, &walks), None);
        // Unless no 2800+ class is walked (blitz games only).
        let walks = top_walks(&[(blitz, 2200, 3)], 2000);
        let blitz_rows = [rows[0].clone(), rows[3].clone()];
        assert_eq!(from_rows::top(&blitz_rows, &walks), Some(vec![1, 2, 3]));
    }

    #[test]
    fn the_cheaper_of_scan_and_walk_is_chosen_from_the_counts() {
        let blitz = 2;
        let everywhere = [
            (blitz, 2500, 3000),
            (blitz, 2200, 30_000),
            (blitz, 1600, 900_000),
        ];
        // The start position itself: its walks pass the games they list.
        let walks = top_walks(&everywhere, 2000);
        assert_eq!(
            choose_top_plan(&walks, Some(&everywhere), 933_000).plan,
            Plan::Walk
        );
        // A frequent position, a tenth of the games: a walk passes about
        // ten games per game listed, a scan all 93,300.
        let frequent = [(blitz, 2500, 300), (blitz, 1600, 93_000)];
        let walks = top_walks(&frequent, 2000);
        assert_eq!(
            choose_top_plan(&walks, Some(&everywhere), 93_300),
            // Two walks of the 2500 group (its 3200 band, its 2500 band),
            // each of 4 games passing 3,000 / 300 games per game.
            Priced {
                plan: Plan::Walk,
                reads: 2 * 4 * 3_000 / 300
            }
        );
        // A rare position: its 40 games, where a walk passes thousands.
        let rare = [(blitz, 2500, 1), (blitz, 1600, 39)];
        let walks = top_walks(&rare, 2000);
        let scan = Priced {
            plan: Plan::Scan,
            reads: 40,
        };
        assert_eq!(choose_top_plan(&walks, Some(&everywhere), 40), scan);
        // No start position to price the walk with (Chess960).
        assert_eq!(choose_top_plan(&walks, None, 40), scan);
        // Recent games: 8 of a position of 10% of the games pass about 80.
        let frequent = [(blitz, 1600, 93_300)];
        assert_eq!(
            choose_recent_plan(&frequent, Some(&everywhere), 8, 93_300),
            Priced {
                plan: Plan::Walk,
                reads: 8 * 933_000 / 93_300
            }
        );
        assert_eq!(choose_recent_plan(&rare, Some(&everywhere), 8, 40), scan);
    }

    #[test]
    fn moves_are_read_as_uci_or_san() {
        let position = VariantPosition::new(GameVariant::Standard.rules());
        let play = |moves: &[&str]| {
            let moves: Vec<String> = moves.iter().map(|m| (*m).to_owned()).collect();
            resolve_position(GameVariant::Standard, None, &moves).map(|p| normalized_fen(&p))
        };
        let italian = ["e2e4", "e5", "Nf3", "b8c6", "Bc4", "Bc5+"];
        let castled = |castle: &str| {
            let mut moves = italian.to_vec();
            moves.pop();
            moves.extend(["Bc5", castle]);
            play(&moves).expect("legal")
        };
        assert_eq!(castled("O-O"), castled("e1g1"));
        assert_eq!(castled("e1h1"), castled("e1g1"));
        assert!(play(&["e4", "Ke2"]).is_err());
        assert!(play(&["e2e5"]).is_err());
        assert_eq!(
            parse_move(&position, "Nf3").expect("legal"),
            parse_move(&position, "g1f3").expect("legal")
        );
    }
}
