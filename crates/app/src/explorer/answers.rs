//! What `pgnload explore` reads: the moves played in a position and how
//! they scored, from the counters the import keeps (`explorer_moves`, see
//! [`super::counting`]), never from a scan of `moves`; plus a few
//! top-rated games that reached the position.
//!
//! The answer has the shape of the Lichess opening explorer's, so that the
//! tools that read that API can read ours.

use serde::Serialize;
use shakmaty::{Position, fen::Fen, san::SanPlus, uci::UciMove, variant::VariantPosition};
use tokio_postgres::{Client, types::ToSql};

use crate::{
    chess::{
        category::{Month, RatingGroup, Speed},
        encoding::{decode_move_uci, encode_move},
        fen::{normalized_fen, position_from_fen},
        model::GameVariant,
    },
    error::Error,
    explorer::{TOP_GAMES, sql},
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
/// legal move has (a database written by other rules) is an
/// [`Error::Inconsistent`] naming it.
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
            Error::inconsistent(format!(
                "explorer_moves holds move code {code:#06x} ({}), which is not legal in {}",
                decode_move_uci(code, chess960),
                normalized_fen(position)
            ))
        })?;
    let san = SanPlus::from_move(position.clone(), m).to_string();
    Ok((decode_move_uci(code, chess960), san))
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
    let bound = BoundFilter::new(request);
    let counted = has_rows(client, id).await?;
    let sql = if counted {
        sql::MOVES_FROM_ROWS
    } else {
        sql::MOVES_FROM_GAMES
    };
    let rows = client
        .query(sql, &bound.params(&id))
        .await
        .map_err(db_err("reading the explorer counters"))?;
    // Games counted with both ratings: the candidates for the top games.
    let mut rated = 0i64;
    for (i, row) in rows.iter().enumerate() {
        let score = Score {
            white: row.get(2),
            draws: row.get(3),
            black: row.get(4),
        };
        let games: i64 = row.get(1);
        rated += row.get::<_, i64>(5);
        answer.score.white += score.white;
        answer.score.draws += score.draws;
        answer.score.black += score.black;
        answer.games += games;
        if i >= request.moves {
            continue;
        }
        let (uci, san) = describe_move(&position, row.get(0), chess960)?;
        let move_rated: i64 = row.get(5);
        let sum: i64 = row.get(6);
        answer.moves.push(MoveStats {
            uci,
            san,
            average_rating: (move_rated > 0).then(|| sum.div_euclid(move_rated)),
            score,
            games,
        });
    }
    if request.top_games > 0 && rated > 0 {
        let plan = if counted && request.top_games <= TOP_GAMES {
            // The rows list their best games: a few rows, a few games.
            TopGamesPlan::Stored
        } else if rated <= i64::from(request.top_games) {
            // Every rated game there is listed: nothing reads fewer.
            TopGamesPlan::Scan
        } else {
            let here = rated_by_group(client, id, request).await?;
            let start = match start_position_id(client, variant).await? {
                Some(start) => Some(rated_by_group(client, start, request).await?),
                None => None,
            };
            choose_plan(&here, start.as_deref(), request.top_games)
        };
        answer.top_games = top_games(client, id, request, plan).await?;
    }
    Ok(answer)
}

/// Whether position `id` is answered from its rows in `explorer_moves`:
/// it has rows and is not queued for a recount (a position has no rows
/// while one game reached it, and is queued until its rows are complete,
/// see `sql/0012_explorer_shared_positions.sql`).
async fn has_rows(client: &Client, id: i64) -> Result<bool, Error> {
    Ok(client
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM explorer_moves WHERE position_id = $1)
                    AND NOT EXISTS (SELECT 1 FROM explorer_pending WHERE position_id = $1)",
            &[&id],
        )
        .await
        .map_err(db_err("looking up the position's explorer counters"))?
        .get(0))
}

/// The id of `variant`'s start position (`None`: Chess960 has none, or no
/// game of the variant started there).
async fn start_position_id(client: &Client, variant: GameVariant) -> Result<Option<i64>, Error> {
    if variant == GameVariant::Chess960 {
        return Ok(None);
    }
    let start = VariantPosition::new(variant.rules());
    position_id(client, variant, &normalized_fen(&start)).await
}

/// The cheaper way to the top games of a position, from its rated games
/// per rating group (`here`) and those of the variant's start position
/// (`everywhere`: nearly every game of the variant passes there), both
/// under the request's filter. A scan reads every rated game at the
/// position; the walk of [`plan_walk`] passes the games of its bands
/// until `limit` of them reached the position, about `limit × games in
/// the bands / games of the bands at the position` (the position's games
/// spread evenly within a band). Both cost a random read per game, so the
/// smaller count wins. Without `everywhere` the walk cannot be priced, and
/// the scan, whose cost is known, is taken.
///
/// # Panics
///
/// Never: the walk's estimate is at most the games it passes.
pub fn choose_plan(
    here: &[(i16, i64)],
    everywhere: Option<&[(i16, i64)]>,
    limit: u32,
) -> TopGamesPlan {
    let walk = plan_walk(here, limit);
    let (Some(everywhere), TopGamesPlan::Walk { low, high }) = (everywhere, walk) else {
        return TopGamesPlan::Scan;
    };
    let walked = |group: i16| {
        let group = i64::from(group);
        low.is_none_or(|low| group >= low) && high.is_none_or(|high| group < high)
    };
    let in_bands =
        |groups: &[(i16, i64)]| -> i64 { groups.iter().filter(|g| walked(g.0)).map(|g| g.1).sum() };
    let (passed, reaching) = (in_bands(everywhere), in_bands(here));
    let scanned: i64 = here.iter().map(|g| g.1).sum();
    if reaching == 0 {
        return TopGamesPlan::Scan;
    }
    // `reaching` < `limit`: the walk passes its whole bands.
    let probes = if reaching < i64::from(limit) {
        passed
    } else {
        (i128::from(limit) * i128::from(passed) / i128::from(reaching))
            .try_into()
            .expect("limit × passed / reaching is at most passed, as reaching >= limit")
    };
    if probes < scanned {
        walk
    } else {
        TopGamesPlan::Scan
    }
}

/// How the top games of a position are found. All give the same games;
/// they differ in what they read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopGamesPlan {
    /// The best games listed by the position's counter rows that the
    /// filter selects (`sql/0013_explorer_top_games.sql`): the answer is
    /// among them when the position has rows (`has_rows`) and at most
    /// [`TOP_GAMES`] are asked for. Reads those rows and the games chosen.
    Stored,
    /// Every counted game at the position, from its moves rows, sorted:
    /// cost grows with the games at the position (fine when it is rare).
    Scan,
    /// Rated games from the best average down (index
    /// `games_rating_sum_idx`), with an average within `[low, high)`, keeping those
    /// with a moves row at the position: cost grows with the games passed
    /// before the limit is reached (fine when the position is frequent).
    /// The bounds come from the counters, so bands without a game at the
    /// position are not walked (`None`: unbounded).
    Walk {
        /// Lowest average that can be among the top games.
        low: Option<i64>,
        /// Averages from here up have no game at the position.
        high: Option<i64>,
    },
}

/// The walk's bounds from the position's rated games per rating group
/// (`(lower bound of the group, games)`, any order): from the best group
/// that has games down to the group in which `limit` games are reached (or
/// the lowest that has games). Every top game is inside: groups above have
/// none, and the groups walked hold `limit` or all there are.
pub fn plan_walk(by_group: &[(i16, i64)], limit: u32) -> TopGamesPlan {
    let mut groups: Vec<(i16, i64)> = by_group.iter().copied().filter(|g| g.1 > 0).collect();
    groups.sort_unstable_by_key(|&(group, _)| std::cmp::Reverse(group));
    let high = groups.first().and_then(|&(best, _)| {
        let bounds = RatingGroup::LOWER_BOUNDS;
        bounds
            .iter()
            .position(|&b| b == best)
            .and_then(|i| bounds.get(i + 1))
            .map(|&above| i64::from(above))
    });
    // The group where the limit is reached, else the lowest with games.
    let mut seen = 0i64;
    let lowest = groups
        .iter()
        .find(|&&(_, games)| {
            seen += games;
            seen >= i64::from(limit)
        })
        .or(groups.last());
    // The lowest band holds every average below 1000 too (negative ones).
    let low = lowest
        .filter(|&&(group, _)| group > 0)
        .map(|&(group, _)| i64::from(group));
    TopGamesPlan::Walk { low, high }
}

/// The rated games counted at position `id` under `request`'s filter, per
/// rating group (lower bound, games): what [`plan_walk`] bounds its walk
/// with.
pub async fn rated_by_group(
    client: &Client,
    id: i64,
    request: &Request,
) -> Result<Vec<(i16, i64)>, Error> {
    let bound = BoundFilter::new(request);
    // Its rows if it has them, else its games grouped as the import
    // counts them.
    let sql = if has_rows(client, id).await? {
        sql::RATED_BY_GROUP_FROM_ROWS
    } else {
        sql::RATED_BY_GROUP_FROM_GAMES
    };
    let rows = client
        .query(sql, &bound.params(&id))
        .await
        .map_err(db_err("reading the explorer counters by rating group"))?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// The `limit` games of highest average rating among those the counters
/// counted at position `id` (by the exact average, that is the sum of both
/// ratings; ties: lowest id first), found as `plan` says.
pub async fn top_games(
    client: &Client,
    id: i64,
    request: &Request,
    plan: TopGamesPlan,
) -> Result<Vec<TopGame>, Error> {
    let limit = i64::from(request.top_games);
    let bound = BoundFilter::new(request);
    let mut params = bound.params(&id);
    params.push(&limit);
    let sql = match &plan {
        TopGamesPlan::Stored => sql::TOP_STORED,
        TopGamesPlan::Scan => sql::TOP_SCAN,
        TopGamesPlan::Walk { low, high } => {
            if let Some(low) = low {
                params.push(low);
            }
            if let Some(high) = high {
                params.push(high);
            }
            match (low, high) {
                (None, None) => sql::TOP_WALK,
                (Some(_), None) => sql::TOP_WALK_LOW,
                (None, Some(_)) => sql::TOP_WALK_HIGH,
                (Some(_), Some(_)) => sql::TOP_WALK_BOTH,
            }
        }
    };
    let rows = client
        .query(sql, &params)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_walk_spans_the_best_groups_with_games_down_to_the_limit() {
        // 2 games at 2200+, 3 at 2000+, many below: the top 4 are all at
        // 2000 or more, and nothing is at 2500.
        let groups = [(1600, 500), (2200, 2), (0, 40), (2000, 3), (2500, 0)];
        assert_eq!(
            plan_walk(&groups, 4),
            TopGamesPlan::Walk {
                low: Some(2000),
                high: Some(2500)
            }
        );
        assert_eq!(
            plan_walk(&groups, 2),
            TopGamesPlan::Walk {
                low: Some(2200),
                high: Some(2500)
            }
        );
        // More than the 2200 and 2000 groups hold: down to 1600.
        assert_eq!(
            plan_walk(&groups, 6),
            TopGamesPlan::Walk {
                low: Some(1600),
                high: Some(2500)
            }
        );
    }

    #[test]
    fn the_cheaper_of_scan_and_walk_is_chosen_from_the_counts() {
        let everywhere = [(2200, 3460), (2000, 34513), (1600, 216_148)];
        // A frequent position (1.e3 among 1M games): 57 of its games in the
        // top band with games, which the walk passes 3460 games to find 5
        // of: about 300 probes instead of reading 18,599 games.
        let frequent = [(2200, 57), (2000, 642), (1600, 17900)];
        assert_eq!(
            choose_plan(&frequent, Some(&everywhere), 5),
            TopGamesPlan::Walk {
                low: Some(2200),
                high: Some(2500)
            }
        );
        // A rare one: a scan of 40 games beats passing thousands.
        let rare = [(2000, 2), (1600, 38)];
        assert_eq!(choose_plan(&rare, Some(&everywhere), 5), TopGamesPlan::Scan);
        // The start position itself: every game reaches it.
        assert_eq!(
            choose_plan(&everywhere, Some(&everywhere), 5),
            TopGamesPlan::Walk {
                low: Some(2200),
                high: Some(2500)
            }
        );
        // No start position to price the walk with (Chess960).
        assert_eq!(choose_plan(&frequent, None, 5), TopGamesPlan::Scan);
    }

    #[test]
    fn the_walk_is_open_at_the_ends_of_the_scale() {
        // Games in the top band: no upper bound.
        assert_eq!(
            plan_walk(&[(2500, 10)], 5),
            TopGamesPlan::Walk {
                low: Some(2500),
                high: None
            }
        );
        // Fewer games than the limit reach the lowest group, which holds
        // every average below 1000 (negative ones too): no lower bound.
        assert_eq!(
            plan_walk(&[(1000, 2), (0, 1)], 5),
            TopGamesPlan::Walk {
                low: None,
                high: Some(1200)
            }
        );
        // Fewer games than the limit: no lower than the lowest with games.
        assert_eq!(
            plan_walk(&[(1200, 2), (1600, 1)], 5),
            TopGamesPlan::Walk {
                low: Some(1200),
                high: Some(1800)
            }
        );
    }
}
