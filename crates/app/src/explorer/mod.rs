//! The opening explorer: per position, the moves played there and how
//! they scored, by variant, speed, rating group and month, as the Lichess
//! explorer answers. Its counters (`explorer_moves`) are opt-in per
//! database ([`admin`]), kept by the import in the same transactions as
//! the games they count ([`counting`], [`held`], [`memory`]), corrected
//! when games are deleted, recounted by `pgnload verify --explorer`
//! ([`recount`]), and read by `pgnload explore` ([`answers`]). Every SQL
//! text is a constant of [`sql`].
//!
//! This file is the one definition of a counter row: its key
//! ([`CounterKey`]), what a game adds to it ([`GameCounts`],
//! [`Counts::add`]), how two rows of a key meet ([`Counts::merge`]) and
//! the most recent games it lists ([`ListedGames`]). The SQL that counts the
//! games from the view `explorer_game_moves` (`sql/0004_explorer.sql`),
//! merges rows by upsert or folds a shard's is written to equal it, and
//! the tests check that it does.

use crate::chess::{
    category::{Month, RatingGroup, Speed},
    model::{GameResult, GameVariant},
    replay::GameRecord,
};

/// The columns of a counter row, declared once: for each, its name, its
/// binary type (a [`tokio_postgres::types::Type`] constant, as the import
/// `COPY`s it) and its value in a staged row (a field path of the
/// `StagedRow` of [`counting`]). The key, then the counts, then the
/// anchor that only a sharded layout's rows have. Calls `$then!` with
/// `$args` then the three lists: the column lists of [`sql`] and the
/// `COPY` row of [`counting`] are written from it, so that they cannot
/// disagree on a column, its place or its type.
macro_rules! counter_columns {
    ($then:ident ! ($($args:tt)*)) => {
        $then! {
            $($args)*
            key [
                position_id: INT8 = (key.0),
                // The enum `game_variant`: its binary form is its label's text.
                variant: TEXT = (variant),
                speed: INT2 = (key.2),
                rating_group: INT2 = (key.3),
                month: INT4 = (key.4),
                move: INT2 = (key.5),
            ]
            counts [
                games: INT4 = (counts.games),
                white: INT4 = (counts.white),
                draws: INT4 = (counts.draws),
                black: INT4 = (counts.black),
                mover_rated_games: INT4 = (counts.mover_rated_games),
                mover_rating_sum: INT8 = (counts.mover_rating_sum),
                last_played: TIMESTAMPTZ = (counts.last_played),
                listed_game_ids: INT8_ARRAY = (listed.ids),
                listed_game_started: TIMESTAMPTZ_ARRAY = (listed.started),
                listed_game_ratings: INT8_ARRAY = (listed.ratings),
            ]
            anchor [
                anchor_game_id: INT8 = (anchor),
            ]
        }
    };
}

pub mod admin;
pub mod answers;
pub mod counting;
pub mod held;
pub mod memory;
pub mod openings;
pub mod recount;
pub mod sql;

pub use self::{
    admin::{enabled, require_usable},
    counting::{
        Counting, Fresh, add_batch, count_pending, count_pending_if_alone, flush, flush_once,
        merge_positions, queue_deferred, remove_games,
    },
};

/// How many of its most recent listable games a counter row lists
/// (`sql/0025_explorer_recent_lists.sql`): as many as Lichess lists at
/// most, top and recent games together, so that `explore` can take both
/// lists of a position from its rows. (Defined with the SQL texts that
/// keep them.)
pub const LISTED_PER_ROW: usize = sql::LISTED_PER_ROW;

/// The key of a counter row: position, variant, speed, rating group,
/// month, move (as [`sql::KEY`]). (The variant as the enum, not its label: a
/// key is hashed and compared for every counter of a batch and every row
/// held.)
pub type CounterKey = (i64, GameVariant, i16, i16, i32, i16);

/// What one game adds to each counter row that counts it, but the
/// position and the move: its categories, result and ratings (and what a
/// remembered lone visit keeps of its game, see [`memory`]). Which of its
/// ratings a row sums depends on the position (its side to move): see
/// [`Counts::add`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct GameCounts {
    /// The variant.
    pub variant: GameVariant,
    /// [`Speed::code`].
    pub speed: i16,
    /// [`RatingGroup::lower_bound`], -1 without both ratings.
    pub rating_group: i16,
    /// [`Month::code`], -1 without a date.
    pub month: i32,
    /// 1, 0, -1 for a white win, a draw, a black win.
    pub score: Option<i16>,
    /// Both ratings added, if both are known: what ranks a top game (its
    /// average's band).
    pub ratings: Option<i64>,
    /// White's rating, if known (what a row of a position where White
    /// moves sums).
    pub white_rating: Option<i32>,
    /// Black's rating, if known.
    pub black_rating: Option<i32>,
    /// When it was played.
    pub started_at: Option<chrono::DateTime<chrono::Utc>>,
}

impl GameCounts {
    /// The categories of `game`, as [`crate::chess::category`] and the
    /// view `explorer_game_moves` compute them.
    pub fn of(game: &GameRecord) -> Self {
        let meta = &game.meta;
        Self {
            variant: game.variant,
            speed: Speed::from_clock(meta.clock).code(),
            rating_group: RatingGroup::of_game(meta.white.elo, meta.black.elo)
                .map_or(-1, RatingGroup::lower_bound),
            month: meta
                .started_at
                .and_then(Month::of_time)
                .map_or(-1, Month::code),
            score: game.result.and_then(GameResult::score),
            ratings: match (meta.white.elo, meta.black.elo) {
                (Some(white), Some(black)) => Some(i64::from(white) + i64::from(black)),
                _ => None,
            },
            white_rating: meta.white.elo,
            black_rating: meta.black.elo,
            started_at: meta.started_at,
        }
    }

    /// The rating of the player who moves at a position where White
    /// moves (`white_moves`) or Black does, if known: what Lichess
    /// averages (`averageRating` is the mover's, not the game's).
    pub fn mover_rating(&self, white_moves: bool) -> Option<i32> {
        if white_moves {
            self.white_rating
        } else {
            self.black_rating
        }
    }

    /// Whether `explore` can list it (a result, both ratings, a date: as
    /// `sql::listable!`), and so whether a row lists it.
    pub fn listable(&self) -> bool {
        self.score.is_some() && self.ratings.is_some() && self.month >= 0
    }

    /// The key of the row counting this game's `code` move at `position`.
    pub fn key(&self, position: i64, code: i16) -> CounterKey {
        (
            position,
            self.variant,
            self.speed,
            self.rating_group,
            self.month,
            code,
        )
    }
}

/// The values of a counter row: [`sql::COUNTS`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Games counted.
    pub games: i32,
    /// White won.
    pub white: i32,
    /// Drawn.
    pub draws: i32,
    /// Black won.
    pub black: i32,
    /// Games whose player to move at the position (the one who played the
    /// move) has a rating.
    pub mover_rated_games: i32,
    /// Those players' ratings added: Lichess's `averageRating` is this
    /// over `mover_rated_games`.
    pub mover_rating_sum: i64,
    /// The latest `started_at`.
    pub last_played: Option<chrono::DateTime<chrono::Utc>>,
    /// The most recent listable games.
    pub listed: ListedGames,
}

impl Counts {
    /// Counts the game `id`, of `game`'s categories, in this row, whose
    /// position has White to move (`white_moves`) or Black.
    pub fn add(&mut self, id: i64, game: &GameCounts, white_moves: bool) {
        self.games += 1;
        match game.score {
            Some(1) => self.white += 1,
            Some(0) => self.draws += 1,
            Some(-1) => self.black += 1,
            _ => {}
        }
        if let Some(rating) = game.mover_rating(white_moves) {
            self.mover_rated_games += 1;
            self.mover_rating_sum += i64::from(rating);
        }
        if let (true, Some(started_at), Some(ratings)) =
            (game.listable(), game.started_at, game.ratings)
        {
            self.listed.offer(ListEntry {
                started_us: started_at.timestamp_micros(),
                id,
                ratings,
            });
        }
        self.last_played = self.last_played.max(game.started_at);
    }

    /// Adds `other`'s games, as if each had been [`Self::add`]ed here:
    /// the one definition of how two rows of a key meet, which the SQL of
    /// the import's upsert ([`sql::ADD_STAGED`]) and of a shard's fold
    /// ([`sql::compact_shard`]) follow (`tests/explorer.rs` checks both
    /// against this on random rows).
    pub fn merge(&mut self, other: &Counts) {
        self.games += other.games;
        self.white += other.white;
        self.draws += other.draws;
        self.black += other.black;
        self.mover_rated_games += other.mover_rated_games;
        self.mover_rating_sum += other.mover_rating_sum;
        self.last_played = self.last_played.max(other.last_played);
        for &game in other.listed.kept() {
            self.listed.offer(game);
        }
    }
}

/// A game a counter row lists: when it was played, its id, both its
/// ratings added (what ranks it as a top game). Its time in microseconds
/// since the Unix epoch (`timestamptz`'s precision): a bulk load holds up
/// to [`LISTED_PER_ROW`] of these per row, for up to a million rows.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ListEntry {
    /// Its `started_at`, in microseconds since 1970-01-01 UTC.
    pub started_us: i64,
    /// Its id.
    pub id: i64,
    /// White's and Black's ratings added.
    pub ratings: i64,
}

impl ListEntry {
    /// The listing order, first the least: the most recent first, then
    /// the highest id (as Lichess lists recent games, and each class of
    /// top games).
    pub fn order(&self) -> (std::cmp::Reverse<i64>, std::cmp::Reverse<i64>) {
        (
            std::cmp::Reverse(self.started_us),
            std::cmp::Reverse(self.id),
        )
    }
}

/// The games a counter row being built lists, as
/// `sql/0025_explorer_recent_lists.sql` keeps them: its [`LISTED_PER_ROW`]
/// most recent listable games, the most recent first (then the highest
/// id). Every game of a position's [`LISTED_PER_ROW`] most recent under a
/// filter is among the most recent of its own row, and so is every game
/// of the first top games of a class that a row holds whole: both lists
/// of `explore` are found among the lists of the rows a filter selects.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ListedGames {
    /// The first `len` are kept, in order.
    games: [ListEntry; LISTED_PER_ROW],
    len: usize,
}

/// The arrays of a row's lists as written: ids, start times, ratings
/// (each `None` when the row lists no game).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ListedArrays {
    /// `listed_game_ids`.
    pub ids: Option<Vec<i64>>,
    /// `listed_game_started`.
    pub started: Option<Vec<chrono::DateTime<chrono::Utc>>>,
    /// `listed_game_ratings`.
    pub ratings: Option<Vec<i64>>,
}

impl ListedGames {
    /// Keeps the game if it is among the most recent so far.
    pub fn offer(&mut self, game: ListEntry) {
        let at = self
            .kept()
            .partition_point(|kept| kept.order() < game.order());
        if at == self.games.len() {
            return;
        }
        let len = (self.len + 1).min(self.games.len());
        self.games.copy_within(at..len - 1, at + 1);
        self.games[at] = game;
        self.len = len;
    }

    /// The games kept, the most recent first.
    pub fn kept(&self) -> &[ListEntry] {
        &self.games[..self.len]
    }

    /// The kept games as the row's arrays.
    ///
    /// # Panics
    ///
    /// Never: each time came from a chrono time ([`GameCounts::started_at`]).
    pub fn arrays(&self) -> ListedArrays {
        if self.len == 0 {
            return ListedArrays::default();
        }
        ListedArrays {
            ids: Some(self.kept().iter().map(|game| game.id).collect()),
            started: Some(
                self.kept()
                    .iter()
                    .map(|game| {
                        chrono::DateTime::from_timestamp_micros(game.started_us)
                            .expect("a listed game's time came from a chrono time")
                    })
                    .collect(),
            ),
            ratings: Some(self.kept().iter().map(|game| game.ratings).collect()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A listed game of id `id` started `started_us` (ratings 4000).
    fn listed(started_us: i64, id: i64) -> ListEntry {
        ListEntry {
            started_us,
            id,
            ratings: 4000,
        }
    }

    #[test]
    fn a_row_lists_its_most_recent_games_then_highest_ids_first() {
        let mut games = ListedGames::default();
        assert!(games.kept().is_empty());
        assert_eq!(games.arrays(), ListedArrays::default());
        for (started, id) in [
            (30, 9),
            (31, 4),
            (30, 2),
            (29, 1),
            (30, 5),
            (40, 7),
            (10, 3),
            (12, 8),
            (11, 6),
        ] {
            games.offer(listed(started, id));
        }
        let order = |games: &ListedGames| -> Vec<(i64, i64)> {
            games.kept().iter().map(|g| (g.started_us, g.id)).collect()
        };
        assert_eq!(
            order(&games),
            [
                (40, 7),
                (31, 4),
                (30, 9),
                (30, 5),
                (30, 2),
                (29, 1),
                (12, 8),
                (11, 6)
            ]
        );
        // Older than the last kept: not kept; newer: the last one drops.
        games.offer(listed(11, 5));
        assert_eq!(games.kept().last().map(|g| g.id), Some(6));
        games.offer(listed(11, 10));
        assert_eq!(
            games.kept().last().map(|g| (g.started_us, g.id)),
            Some((11, 10))
        );
        // Any time, before 1970 included.
        let mut old = ListedGames::default();
        old.offer(listed(-5, 3));
        old.offer(listed(i64::from(i32::MIN) * 1_000_000, 1));
        assert_eq!(order(&old), [(-5, 3), (i64::from(i32::MIN) * 1_000_000, 1)]);
        let arrays = old.arrays();
        assert_eq!(arrays.ids, Some(vec![3, 1]));
        assert_eq!(arrays.ratings, Some(vec![4000, 4000]));
        assert_eq!(
            arrays
                .started
                .map(|t| t.iter().map(chrono::DateTime::timestamp_micros).collect()),
            Some(vec![-5, i64::from(i32::MIN) * 1_000_000])
        );
    }

    #[test]
    fn a_row_lists_only_the_games_explore_can_list() {
        let at = chrono::DateTime::from_timestamp(1_700_000_000, 0);
        let listable = GameCounts {
            score: Some(0),
            ratings: Some(4100),
            month: 24_000,
            started_at: at,
            ..GameCounts::default()
        };
        let mut row = Counts::default();
        row.add(1, &listable, true);
        row.add(
            2,
            &GameCounts {
                score: None,
                ..listable
            },
            true,
        );
        row.add(
            3,
            &GameCounts {
                ratings: None,
                ..listable
            },
            true,
        );
        row.add(
            4,
            &GameCounts {
                month: -1,
                ..listable
            },
            true,
        );
        assert_eq!(row.games, 4);
        assert_eq!(
            row.listed.kept(),
            [ListEntry {
                started_us: 1_700_000_000_000_000,
                id: 1,
                ratings: 4100
            }]
        );
    }

    #[test]
    fn a_row_sums_the_rating_of_the_player_who_moved_where_that_one_is_rated() {
        let game = |white_rating, black_rating| GameCounts {
            white_rating,
            black_rating,
            ratings: white_rating
                .zip(black_rating)
                .map(|(w, b): (i32, i32)| i64::from(w) + i64::from(b)),
            ..GameCounts::default()
        };
        let mut white_moves = Counts::default();
        let mut black_moves = Counts::default();
        for (id, counted) in [
            (1, game(Some(1500), Some(2500))),
            (2, game(Some(1700), None)),
            (3, game(None, Some(2300))),
            (4, game(None, None)),
        ] {
            white_moves.add(id, &counted, true);
            black_moves.add(id, &counted, false);
        }
        assert_eq!(
            (white_moves.mover_rated_games, white_moves.mover_rating_sum),
            (2, 1500 + 1700)
        );
        assert_eq!(
            (black_moves.mover_rated_games, black_moves.mover_rating_sum),
            (2, 2500 + 2300)
        );
        assert_eq!(white_moves.games, 4);
        // Without a result, no game is listed.
        assert!(white_moves.listed.kept().is_empty());
    }
}
