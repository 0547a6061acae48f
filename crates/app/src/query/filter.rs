//! The one game filter: the options of `games` and `export` (and of the
//! exports to come), resolved against the database into a [`GameFilter`]
//! that builds a parameterized `WHERE` clause over `games g`. The criteria
//! it shares with the import scope and the explorer are a
//! [`Selection`]; the rest (player, position, result, limit) are its own.
//!
//! Names and FENs are looked up before the query so that a typo is an
//! error (an unknown player, an illegal FEN) rather than an empty answer;
//! a known player or position with no game matching is an empty answer.

use chrono::NaiveTime;
use tokio_postgres::{Client, types::ToSql};

use crate::{
    chess::{
        category::Speed,
        model::{GameResult, GameVariant},
        selection::Selection,
    },
    error::Error,
    query::position::position_id,
    store::db::db_err,
};

/// Which side the `--player` played.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The player had the white pieces.
    White,
    /// The player had the black pieces.
    Black,
}

impl Side {
    /// Both sides, in the order `--help` lists them.
    pub const ALL: [Side; 2] = [Side::White, Side::Black];

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Side::White => "white",
            Side::Black => "black",
        }
    }
}

/// The filter options, as typed. Shared by every command that selects
/// games, so each reads them the same way (the binary's flags fill it).
#[derive(Debug, Clone, Default)]
pub struct FilterArgs {
    /// The criteria shared with the import scope and the explorer: speeds,
    /// variants (`--variant` gives at most one: also the rules --fen is
    /// read under), the period, the rating floor.
    pub selection: Selection,
    /// Games of this player, the name in any case (every source).
    pub player: Option<String>,
    /// Only games against this player (needs --player).
    pub opponent: Option<String>,
    /// Only games where --player had this color.
    pub color: Option<Side>,
    /// Games that reached this position (FEN, read under --variant), the
    /// final position included.
    pub fen: Option<String>,
    /// Games with this result: 1-0, 0-1, 1/2-1/2 or * (also white, black, draw).
    pub result: Option<GameResult>,
    /// At most this many games.
    pub limit: Option<u32>,
}

/// A result as `--result` takes it: the PGN marker or a word.
pub fn parse_result(text: &str) -> Result<GameResult, String> {
    match text.to_ascii_lowercase().as_str() {
        "white" => Ok(GameResult::WhiteWins),
        "black" => Ok(GameResult::BlackWins),
        "draw" => Ok(GameResult::Draw),
        _ => GameResult::from_tag(text).ok_or_else(|| {
            format!("{text:?}: expected 1-0, 0-1, 1/2-1/2, *, white, black or draw")
        }),
    }
}

/// The filter with names and FEN resolved to ids: what the SQL needs.
#[derive(Debug, Clone, Default)]
pub struct GameFilter {
    /// `players.id` of --player (one per source that knows the name).
    pub player: Option<Vec<i64>>,
    /// `players.id` of --opponent.
    pub opponent: Option<Vec<i64>>,
    /// --color.
    pub color: Option<Side>,
    /// --fen: `Some(None)` when no stored game reached the position.
    pub position: Option<Option<Reached>>,
    /// --result.
    pub result: Option<GameResult>,
    /// The shared criteria; its variants are standard when only --fen is
    /// given (the position is one of that variant).
    pub selection: Selection,
    /// --limit.
    pub limit: Option<u32>,
    /// Whether the database holds games with a `Date` but no start time
    /// (partial dates): only then does a period ask for their span, a
    /// condition the start time's indexes cannot serve.
    pub partial_dates: bool,
}

/// The days the partial date of `games g` spans, as a `daterange`: its
/// first `Date` kept in `games.tags` (a text, or an array of the values of
/// a name written more than once), read as
/// [`crate::chess::model::DateSpan::of_pgn`] reads it: a year when the
/// month is unknown, a month when only the day is; NULL when the year is
/// unknown (or `0000`) and for any other text. Asked only of games without
/// a start time, whose `Date` is no full date.
const PARTIAL_DATE_SPAN: &str = r"(SELECT CASE
        WHEN d[2] = '??'
            THEN daterange(make_date(d[1]::int, 1, 1), make_date(d[1]::int + 1, 1, 1))
        WHEN d[3] = '??' AND d[2]::int BETWEEN 1 AND 12
            THEN daterange(make_date(d[1]::int, d[2]::int, 1),
                           (make_date(d[1]::int, d[2]::int, 1) + interval '1 month')::date)
    END
    FROM regexp_match(coalesce(g.tags->'Date'->>0, g.tags->>'Date'),
                      '^\s*([0-9]{4})\.([0-9]{2}|\?\?)\.([0-9]{2}|\?\?)\s*$') AS d
    WHERE d[1] <> '0000')";

/// A position to search for, and how: both ways select the same games;
/// they differ in what they read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reached {
    /// `positions.id`.
    pub id: i64,
    /// Reached by so many games that walking the games in the order asked
    /// and checking each (one lookup of `moves (position_id, game_id)`)
    /// reaches the limit sooner than collecting every game that reached
    /// it: the start position and the common openings. Otherwise the games
    /// are found from the position (the same index, read for the position
    /// alone, and `games.final_position_id`).
    pub walk: bool,
}

/// Whether a search for a position reached by `reached` games (counted up
/// to `cap`, see [`walk_cap`]) should walk the games: a walk reads about
/// `limit × games / reached` games, a lookup `reached` moves rows.
fn should_walk(reached: u64, limit: Option<u32>, games: u64) -> bool {
    limit.is_some_and(|limit| reached.saturating_mul(reached) > u64::from(limit) * games)
}

/// How many moves rows to count at most before deciding: past
/// `sqrt(limit × games)` the walk wins whatever the true number.
fn walk_cap(limit: Option<u32>, games: u64) -> i64 {
    let product = limit.map_or(0, |l| u64::from(l) * games);
    // Square root by f64: exact enough for a threshold, and far from 2^53.
    #[expect(
        clippy::cast_possible_truncation,
        reason = "the square root of a u64 is below 2^32"
    )]
    let root = (product as f64).sqrt().ceil() as i64;
    root.saturating_add(1)
}

/// A `WHERE` clause over `games g` and the values of its `$n` parameters.
#[derive(Debug, Default)]
pub struct Where {
    /// `true`, or conditions joined by `AND`.
    pub clause: String,
    /// The parameters, in `$n` order.
    pub params: Vec<Box<dyn ToSql + Sync + Send>>,
}

impl Where {
    /// Adds a parameter; returns its placeholder.
    fn param(&mut self, value: impl ToSql + Sync + Send + 'static) -> String {
        self.params.push(Box::new(value));
        format!("${}", self.params.len())
    }

    fn and(&mut self, condition: &str) {
        if !self.clause.is_empty() {
            self.clause.push_str(" AND ");
        }
        self.clause.push('(');
        self.clause.push_str(condition);
        self.clause.push(')');
    }

    /// The parameters as the driver takes them.
    pub fn values(&self) -> Vec<&(dyn ToSql + Sync)> {
        self.params
            .iter()
            .map(|p| p.as_ref() as &(dyn ToSql + Sync))
            .collect()
    }
}

/// The ids of the players whose name is `$1` in any case: the lookup of
/// `--player` and `--opponent` (public so that a test can check that
/// `players_username_lower_idx` serves it).
pub const PLAYER_IDS: &str = "SELECT id FROM players WHERE lower(username) = lower($1) ORDER BY id";

/// The ids of the players called `name`, whatever its case, in every
/// source (`players_username_lower_idx`, `sql/0020_player_names.sql`): a
/// PGN's `Kasparov, Garry` is the one a user types as `kasparov, garry`,
/// as Lichess names always were. An unknown name is an error naming the
/// option, with the names [`similar_names`] finds.
async fn player_ids(client: &Client, option: &str, name: &str) -> Result<Vec<i64>, Error> {
    let rows = client
        .query(PLAYER_IDS, &[&name])
        .await
        .map_err(db_err("looking up a player"))?;
    if rows.is_empty() {
        let similar = similar_names(client, name).await?;
        return Err(Error::Input {
            file: option.to_owned(),
            message: format!(
                "no player called {name:?} in the database{}",
                did_you_mean(&similar)
            ),
        });
    }
    Ok(rows.iter().map(|row| row.get(0)).collect())
}

/// How many names a "did you mean" offers at most.
const SUGGESTIONS: i64 = 5;

/// The stored names nearest `name` by trigrams (`players_username_trgm_idx`,
/// which `pg_trgm`'s `%` and `<%` read), the nearest first: similar as a
/// whole (`Gary Kasparow`), or holding it as a word (`Kasparov` in
/// `Garry Kasparov`), at `pg_trgm`'s thresholds.
async fn similar_names(client: &Client, name: &str) -> Result<Vec<String>, Error> {
    let rows = client
        .query(
            "SELECT username FROM players
             WHERE username % $1 OR $1 <% username
             GROUP BY username
             ORDER BY max(greatest(similarity(username, $1), word_similarity($1, username))) DESC,
                      username
             LIMIT $2",
            &[&name, &SUGGESTIONS],
        )
        .await
        .map_err(db_err("looking for similar player names"))?;
    Ok(rows.iter().map(|row| row.get(0)).collect())
}

/// The end of an unknown-name message: `; did you mean "A", "B" or "C"?`,
/// nothing without names. Names are quoted as Rust debug-prints them, so a
/// control character in a stored name cannot drive the terminal.
fn did_you_mean(names: &[String]) -> String {
    let quoted: Vec<String> = names.iter().map(|name| format!("{name:?}")).collect();
    match quoted.split_last() {
        None => String::new(),
        Some((last, [])) => format!("; did you mean {last}?"),
        Some((last, rest)) => format!("; did you mean {} or {last}?", rest.join(", ")),
    }
}

/// How to search for position `id` with `limit` (see [`Reached::walk`]):
/// counts the moves rows of the position up to [`walk_cap`], against the
/// planner's estimate of the number of games.
async fn reached(client: &Client, id: i64, limit: Option<u32>) -> Result<Reached, Error> {
    if limit.is_none() {
        return Ok(Reached { id, walk: false });
    }
    let games: f32 = client
        .query_one(
            "SELECT greatest(reltuples, 0) FROM pg_class WHERE oid = 'games'::regclass",
            &[],
        )
        .await
        .map_err(db_err("estimating the number of games"))?
        .get(0);
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "a float estimate of a row count: non-negative (greatest), far below 2^64"
    )]
    let games = games as u64;
    let count: i64 = client
        .query_one(
            "SELECT count(*) FROM (SELECT 1 FROM moves WHERE position_id = $1 LIMIT $2) s",
            &[&id, &walk_cap(limit, games)],
        )
        .await
        .map_err(db_err("counting the games that reached a position"))?
        .get(0);
    let count = u64::try_from(count).unwrap_or(0);
    Ok(Reached {
        id,
        walk: should_walk(count, limit, games),
    })
}

impl FilterArgs {
    /// Looks up the names and the FEN: an unknown player or an illegal FEN
    /// is an error; a position no game reached selects no game.
    pub async fn resolve(&self, client: &Client) -> Result<GameFilter, Error> {
        self.selection.check_dates().map_err(|e| {
            Error::Config(format!("--since {} is after --until {}", e.since, e.until))
        })?;
        let player = match &self.player {
            Some(name) => Some(player_ids(client, "--player", name).await?),
            None => None,
        };
        let opponent = match &self.opponent {
            Some(name) => Some(player_ids(client, "--opponent", name).await?),
            None => None,
        };
        let mut selection = self.selection.clone();
        let position = match &self.fen {
            Some(fen) => {
                let variant = match selection.variants.as_slice() {
                    [] => GameVariant::Standard,
                    &[variant] => variant,
                    more => {
                        return Err(Error::Config(format!(
                            "--fen is read under one variant; {} are selected",
                            more.len()
                        )));
                    }
                };
                selection.variants = vec![variant];
                match position_id(client, variant, fen).await? {
                    Some(id) => Some(Some(reached(client, id, self.limit).await?)),
                    None => Some(None),
                }
            }
            None => None,
        };
        let partial_dates = (selection.since.is_some() || selection.until.is_some())
            && client
                .query_one(
                    "SELECT EXISTS (SELECT 1 FROM games WHERE started_at IS NULL AND tags ? 'Date')",
                    &[],
                )
                .await
                .map_err(db_err("looking for partial dates"))?
                .get::<_, bool>(0);
        Ok(GameFilter {
            player,
            opponent,
            color: self.color,
            position,
            result: self.result,
            selection,
            limit: self.limit,
            partial_dates,
        })
    }
}

impl GameFilter {
    /// The conditions over `games g`, every value a parameter.
    pub fn where_clause(&self) -> Where {
        let mut w = Where::default();
        if let Some(player) = &self.player {
            let p = w.param(player.clone());
            let opponent = self.opponent.as_ref().map(|o| w.param(o.clone()));
            let as_white = match &opponent {
                Some(o) => format!("g.white_player_id = ANY({p}) AND g.black_player_id = ANY({o})"),
                None => format!("g.white_player_id = ANY({p})"),
            };
            let as_black = match &opponent {
                Some(o) => format!("g.black_player_id = ANY({p}) AND g.white_player_id = ANY({o})"),
                None => format!("g.black_player_id = ANY({p})"),
            };
            w.and(&match self.color {
                Some(Side::White) => as_white,
                Some(Side::Black) => as_black,
                None => format!("({as_white}) OR ({as_black})"),
            });
        }
        match self.position {
            // OFFSET 0 keeps the planner from turning the check into a
            // hash of every game that reached the position.
            Some(Some(Reached { id, walk: true })) => {
                let x = w.param(id);
                w.and(&format!(
                    "EXISTS (SELECT 1 FROM moves m WHERE m.game_id = g.id AND m.position_id = {x}
                             OFFSET 0)
                     OR g.final_position_id = {x}"
                ));
            }
            Some(Some(Reached { id, walk: false })) => {
                let x = w.param(id);
                w.and(&format!(
                    "g.id IN (SELECT m.game_id FROM moves m WHERE m.position_id = {x}
                              UNION ALL SELECT f.id FROM games f WHERE f.final_position_id = {x})"
                ));
            }
            Some(None) => w.and("false"),
            None => {}
        }
        match self.result.map(GameResult::score) {
            Some(Some(score)) => {
                let r = w.param(score);
                w.and(&format!("g.result = {r}"));
            }
            Some(None) => w.and("g.result IS NULL"),
            None => {}
        }
        self.select(&mut w);
        if w.clause.is_empty() {
            w.clause.push_str("true");
        }
        w
    }

    /// The conditions of the shared criteria ([`Selection`]).
    fn select(&self, w: &mut Where) {
        let selection = &self.selection;
        let mut period = Vec::new();
        if let Some(since) = selection.since {
            let at = w.param(since.and_time(NaiveTime::MIN).and_utc());
            period.push(format!("g.started_at >= {at}"));
        }
        if let Some(until) = selection.until {
            // Inclusive: before the first instant of the next day (none
            // after the last representable day: every game is before it).
            match until.succ_opt() {
                Some(next) => {
                    let at = w.param(next.and_time(NaiveTime::MIN).and_utc());
                    period.push(format!("g.started_at < {at}"));
                }
                None => period.push("g.started_at IS NOT NULL".to_owned()),
            }
        }
        if !period.is_empty() {
            let started = period.join(" AND ");
            if self.partial_dates {
                // A partial date is in the period when all its days are.
                let (since, until) = (w.param(selection.since), w.param(selection.until));
                w.and(&format!(
                    "({started}) OR (g.started_at IS NULL
                     AND {PARTIAL_DATE_SPAN} <@ daterange({since}, {until}, '[]'))"
                ));
            } else {
                w.and(&started);
            }
        }
        match selection.variants.as_slice() {
            [] => {}
            [variant] => {
                let v = w.param(variant.as_db_label().to_owned());
                w.and(&format!("g.variant::text = {v}"));
            }
            variants => {
                let labels: Vec<String> = variants.iter().map(ToString::to_string).collect();
                let v = w.param(labels);
                w.and(&format!("g.variant::text = ANY({v})"));
            }
        }
        if !selection.speeds.is_empty() {
            let ranges: Vec<String> = selection
                .speeds
                .iter()
                .map(|&s| speed_condition(s))
                .collect();
            w.and(&ranges.join(" OR "));
        }
        if let Some(min) = selection.min_rating {
            let m = w.param(i32::from(min));
            w.and(&format!("g.white_elo >= {m} AND g.black_elo >= {m}"));
        }
    }
}

/// The range of `time_initial_s + 40 * time_increment_s` of `speed`, from
/// [`Speed::UPPER_BOUNDS_S`] (constants of the program, not user values);
/// a game without a readable clock is correspondence, as
/// [`Speed::from_clock`] decides.
fn speed_condition(speed: Speed) -> String {
    let estimate = "(g.time_initial_s::bigint + 40 * g.time_increment_s::bigint)";
    let index = Speed::ALL
        .iter()
        .position(|&s| s == speed)
        .expect("every speed is in Speed::ALL");
    let lower = index
        .checked_sub(1)
        .and_then(|i| Speed::UPPER_BOUNDS_S.get(i));
    match (lower, Speed::UPPER_BOUNDS_S.get(index)) {
        (None, Some(upper)) => format!("{estimate} < {upper}"),
        (Some(lower), Some(upper)) => format!("{estimate} >= {lower} AND {estimate} < {upper}"),
        (Some(lower), None) => format!("g.time_initial_s IS NULL OR {estimate} >= {lower}"),
        (None, None) => "true".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chess::model::TimeControl;
    use crate::chess::selection::parse_since;
    use chrono::NaiveDate;

    #[test]
    fn speed_ranges_match_speed_from_clock() {
        // Each estimate at and around every bound falls in exactly the
        // range of the speed from_clock gives it.
        for estimate in [
            0i64, 29, 30, 179, 180, 479, 480, 1499, 1500, 21599, 21600, 99999,
        ] {
            let clock = TimeControl {
                initial_s: i32::try_from(estimate).expect("small test value"),
                increment_s: 0,
            };
            let expected = Speed::from_clock(Some(clock));
            for speed in Speed::ALL {
                let sql = speed_condition(speed);
                // Evaluate the condition's bounds by reading them back.
                let holds = sql
                    .split(" AND ")
                    .map(|part| part.rsplit(' ').collect::<Vec<_>>())
                    .all(|words| {
                        let bound: i64 = words[0].parse().unwrap_or(i64::MIN);
                        match words.get(1).copied() {
                            Some("<") => estimate < bound,
                            Some(">=") => estimate >= bound,
                            _ => true,
                        }
                    });
                assert_eq!(holds, speed == expected, "{estimate} s vs {speed}: {sql}");
            }
        }
        assert_eq!(
            speed_condition(Speed::Correspondence),
            "g.time_initial_s IS NULL OR (g.time_initial_s::bigint + 40 * g.time_increment_s::bigint) >= 21600"
        );
    }

    #[test]
    fn user_values_are_parameters_never_sql() {
        let filter = GameFilter {
            player: Some(vec![7]),
            opponent: Some(vec![9]),
            position: Some(Some(Reached {
                id: 42,
                walk: false,
            })),
            result: Some(GameResult::Draw),
            selection: Selection {
                since: NaiveDate::from_ymd_opt(2024, 1, 1),
                until: NaiveDate::from_ymd_opt(2024, 1, 31),
                variants: vec![GameVariant::Crazyhouse],
                min_rating: Some(2000),
                ..Selection::default()
            },
            ..GameFilter::default()
        };
        let w = filter.where_clause();
        assert_eq!(w.params.len(), 8, "{}", w.clause);
        for value in ["42", "2000", "crazyhouse", "2024"] {
            assert!(!w.clause.contains(value), "{value} inlined: {}", w.clause);
        }
        assert_eq!(GameFilter::default().where_clause().clause, "true");
    }

    #[test]
    fn a_position_is_walked_only_when_the_limit_comes_sooner() {
        // 100 games asked of 1,000,000: walk past 10,000 games reaching it.
        assert_eq!(walk_cap(Some(100), 1_000_000), 10_001);
        assert!(should_walk(10_001, Some(100), 1_000_000));
        assert!(!should_walk(10_000, Some(100), 1_000_000));
        assert!(
            !should_walk(1_000_000, None, 1_000_000),
            "no limit: every game is read"
        );
        assert_eq!(walk_cap(None, 1_000_000), 1);
        let walked = GameFilter {
            position: Some(Some(Reached { id: 7, walk: true })),
            ..GameFilter::default()
        };
        assert!(walked.where_clause().clause.contains("EXISTS"));
    }

    #[test]
    fn an_unknown_name_lists_the_names_found_quoted() {
        let names = |list: &[&str]| list.iter().map(|&n| n.to_owned()).collect::<Vec<_>>();
        assert_eq!(did_you_mean(&[]), "");
        assert_eq!(
            did_you_mean(&names(&["Garry Kasparov"])),
            "; did you mean \"Garry Kasparov\"?"
        );
        assert_eq!(
            did_you_mean(&names(&["A", "B", "C"])),
            "; did you mean \"A\", \"B\" or \"C\"?"
        );
        assert_eq!(
            did_you_mean(&names(&["bad\u{1b}[2J"])),
            "; did you mean \"bad\\u{1b}[2J\"?"
        );
    }

    #[test]
    fn options_parse_as_documented() {
        assert_eq!(parse_result("1/2-1/2"), Ok(GameResult::Draw));
        assert_eq!(parse_result("White"), Ok(GameResult::WhiteWins));
        assert!(parse_result("2-0").is_err());
        assert_eq!("king_of_the_hill".parse(), Ok(GameVariant::KingOfTheHill));
        assert_eq!("Three-check".parse(), Ok(GameVariant::ThreeCheck));
        assert!("suicide".parse::<GameVariant>().is_err());
        assert!(parse_since("2024-02-30").is_err());
    }
}
