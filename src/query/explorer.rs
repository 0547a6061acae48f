//! The opening explorer: the moves played in a position and how they
//! scored, from the counters the import keeps (`explorer_moves`, see
//! [`crate::ingest::explorer`]), never from a scan of `moves`; plus a few
//! top-rated games that reached the position.
//!
//! The answer has the shape of the Lichess opening explorer's, so that the
//! tools that read that API can read ours.

use serde::Serialize;
use shakmaty::{Position, fen::Fen, san::SanPlus, uci::UciMove, variant::VariantPosition};
use tokio_postgres::Client;

use crate::{
    chess::{
        category::{Month, RatingGroup, Speed},
        encoding::{decode_move_uci, encode_move},
        fen::{normalized_fen, position_from_fen},
        model::GameVariant,
    },
    error::Error,
    query::position::position_id,
    store::db::db_err,
};

/// Which games to count: empty lists mean every speed / rating group; a
/// month bound leaves out the games without a date.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
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
    /// Moves (UCI) played from that position first.
    pub play: Vec<String>,
    /// Which games count.
    pub filter: Filter,
    /// How many moves to list (the most played).
    pub moves: usize,
    /// How many top-rated games to list.
    pub top_games: u32,
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
    /// The move in UCI (king to its destination for standard castling,
    /// king to rook in Chess960, as Lichess writes them).
    pub uci: String,
    /// The move in SAN, with check marks.
    pub san: String,
    /// The average of the games' average ratings (rounded down), over the
    /// games with both ratings; null when there is none.
    pub average_rating: Option<i64>,
    /// Results.
    #[serde(flatten)]
    pub score: Score,
    /// Games counted (also those without a result).
    #[serde(skip)]
    pub games: i64,
}

/// A player of a top game.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Player {
    /// The name as last seen.
    pub name: Option<String>,
    /// The rating in this game.
    pub rating: Option<i32>,
}

/// A top-rated game that reached the position.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TopGame {
    /// The Lichess id, else `source:external_id`.
    pub id: String,
    /// `white`, `black`, or null for a draw or no result.
    pub winner: Option<&'static str>,
    /// White.
    pub white: Player,
    /// Black.
    pub black: Player,
    /// The year it was played.
    pub year: Option<i32>,
    /// The month it was played, `YYYY-MM`.
    pub month: Option<String>,
}

/// The explorer's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Answer {
    /// Results of every counted game that continued from the position.
    #[serde(flatten)]
    pub score: Score,
    /// The most played moves, most played first.
    pub moves: Vec<MoveStats>,
    /// Top-rated games that reached the position, best first.
    pub top_games: Vec<TopGame>,
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
    for (i, text) in play.iter().enumerate() {
        let before = normalized_fen(&position);
        let illegal = |why: String| {
            Error::Request(format!(
                "--play move {} ({text:?}) in {before}: {why}",
                i + 1
            ))
        };
        let uci = UciMove::from_ascii(text.trim().as_bytes())
            .map_err(|e| illegal(format!("not a UCI move: {e}")))?;
        let m = uci
            .to_move(&position)
            .map_err(|e| illegal(format!("not legal here: {e}")))?;
        position = position
            .play(m)
            .map_err(|e| illegal(format!("not legal here: {e}")))?;
    }
    Ok(position)
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

/// The move of `position` stored as `code`, in UCI and SAN. A code no
/// legal move has (a database written by other rules) is an internal
/// error naming it.
fn describe_move(
    position: &VariantPosition,
    code: i16,
    chess960: bool,
) -> Result<(String, String), Error> {
    let code = code.cast_unsigned();
    let m = position
        .legal_moves()
        .into_iter()
        .find(|m| encode_move(*m) == code)
        .ok_or_else(|| {
            Error::Internal(format!(
                "explorer_moves holds move code {code:#06x} ({}), which is not legal in {}",
                decode_move_uci(code, chess960),
                normalized_fen(position)
            ))
        })?;
    let san = SanPlus::from_move(position.clone(), m).to_string();
    Ok((decode_move_uci(code, chess960), san))
}

/// Answers `request`: the position's counted moves and top games. A
/// position no counted game reached is an empty answer, not an error.
pub async fn explore(client: &Client, request: &Request) -> Result<Answer, Error> {
    let variant = request.variant;
    let chess960 = variant == GameVariant::Chess960;
    let position = resolve_position(variant, request.fen.as_deref(), &request.play)?;
    let fen = normalized_fen(&position);
    let mut answer = Answer {
        score: Score::default(),
        moves: Vec::new(),
        top_games: Vec::new(),
        fen,
        games: 0,
    };
    let Some(id) = position_id(client, variant, &answer.fen).await? else {
        return Ok(answer);
    };
    let filter = &request.filter;
    let speeds: Option<Vec<i16>> =
        (!filter.speeds.is_empty()).then(|| filter.speeds.iter().map(|s| s.code()).collect());
    let ratings: Option<Vec<i16>> = (!filter.ratings.is_empty())
        .then(|| filter.ratings.iter().map(|r| r.lower_bound()).collect());
    let since = filter.since.map(Month::code);
    let until = filter.until.map(Month::code);
    let label = variant.as_db_label();
    // The same conditions as the counters' categories, on the view that
    // defines them (for the top games) and on the counters.
    let conditions = "variant = $2::text::game_variant
          AND ($3::smallint[] IS NULL OR speed = ANY($3))
          AND ($4::smallint[] IS NULL OR rating_group = ANY($4))
          AND ($5::integer IS NULL OR month >= $5)
          AND ($6::integer IS NULL OR month BETWEEN 0 AND $6)";
    let rows = client
        .query(
            &format!(
                "SELECT move, sum(games)::bigint, sum(white)::bigint, sum(draws)::bigint,
                        sum(black)::bigint, sum(rated_games)::bigint, sum(rating_sum)::bigint
                 FROM explorer_moves
                 WHERE position_id = $1 AND {conditions}
                 GROUP BY move ORDER BY 2 DESC, move"
            ),
            &[&id, &label, &speeds, &ratings, &since, &until],
        )
        .await
        .map_err(db_err("reading the explorer counters"))?;
    for (i, row) in rows.iter().enumerate() {
        let score = Score {
            white: row.get(2),
            draws: row.get(3),
            black: row.get(4),
        };
        let games: i64 = row.get(1);
        answer.score.white += score.white;
        answer.score.draws += score.draws;
        answer.score.black += score.black;
        answer.games += games;
        if i >= request.moves {
            continue;
        }
        let (uci, san) = describe_move(&position, row.get(0), chess960)?;
        let rated: i64 = row.get(5);
        let sum: i64 = row.get(6);
        answer.moves.push(MoveStats {
            uci,
            san,
            average_rating: (rated > 0).then(|| sum.div_euclid(rated)),
            score,
            games,
        });
    }
    if request.top_games > 0 && answer.games > 0 {
        answer.top_games = top_games(
            client,
            id,
            conditions,
            request,
            &[&speeds, &ratings, &since, &until],
        )
        .await?;
    }
    Ok(answer)
}

/// The `limit` games of highest average rating among those the counters
/// counted at position `id`.
async fn top_games(
    client: &Client,
    id: i64,
    conditions: &str,
    request: &Request,
    filters: &[&(dyn tokio_postgres::types::ToSql + Sync); 4],
) -> Result<Vec<TopGame>, Error> {
    let limit = i64::from(request.top_games);
    let label = request.variant.as_db_label();
    let rows = client
        .query(
            &format!(
                "SELECT g.source, g.external_id, g.result, wp.username, g.white_elo,
                        bp.username, g.black_elo,
                        extract(year FROM g.started_at AT TIME ZONE 'UTC')::integer,
                        to_char(g.started_at AT TIME ZONE 'UTC', 'YYYY-MM')
                 FROM (SELECT game_id, average FROM explorer_game_moves
                       WHERE position_id = $1 AND average IS NOT NULL AND {conditions}
                       ORDER BY average DESC, game_id LIMIT $7) t
                 JOIN games g ON g.id = t.game_id
                 LEFT JOIN players wp ON wp.id = g.white_player_id
                 LEFT JOIN players bp ON bp.id = g.black_player_id
                 ORDER BY t.average DESC, t.game_id"
            ),
            &[
                &id, &label, filters[0], filters[1], filters[2], filters[3], &limit,
            ],
        )
        .await
        .map_err(db_err("reading the top games"))?;
    Ok(rows
        .iter()
        .map(|row| {
            let source: String = row.get(0);
            let external_id: String = row.get(1);
            TopGame {
                id: if source == "lichess" {
                    external_id
                } else {
                    format!("{source}:{external_id}")
                },
                winner: match row.get::<_, Option<i16>>(2) {
                    Some(1) => Some("white"),
                    Some(-1) => Some("black"),
                    _ => None,
                },
                white: Player {
                    name: row.get(3),
                    rating: row.get(4),
                },
                black: Player {
                    name: row.get(5),
                    rating: row.get(6),
                },
                year: row.get(7),
                month: row.get(8),
            }
        })
        .collect())
}
