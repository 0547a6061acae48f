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
//! the best-rated games it keeps ([`TopGames`]). The SQL that counts the
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
                top_game_ratings: INT8_ARRAY = (top_game_ratings),
                top_game_ids: INT8_ARRAY = (top_game_ids),
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

/// How many best-rated games a counter row keeps
/// (`sql/0013_explorer_top_games.sql`): `explore` reads the game of a move
/// played once from them (its top games, in Lichess's order by band and
/// recency, it finds from the games). (Defined with the SQL texts that
/// keep them.)
pub const TOP_GAMES: u32 = sql::TOP_GAMES;

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
    /// Both ratings added, if both are known: what orders the best-rated
    /// games.
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
    /// The best-rated games.
    pub top: TopGames,
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
        if let Some(ratings) = game.ratings {
            self.top.offer(ratings, id);
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
        for &(ratings, id) in other.top.kept() {
            self.top.offer(ratings, id);
        }
    }
}

/// The best-rated games of a counter row being built, as
/// `sql/0013_explorer_top_games.sql` keeps them:
/// at most [`TOP_GAMES`] `(white + black rating, game id)`, best first
/// (higher ratings first, then lower ids).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TopGames {
    /// The first `len` are kept, in order.
    games: [(i64, i64); TOP_GAMES as usize],
    len: usize,
}

impl TopGames {
    /// Keeps the game if it is among the best so far.
    pub fn offer(&mut self, ratings: i64, id: i64) {
        let order = |(ratings, id): (i64, i64)| (std::cmp::Reverse(ratings), id);
        let at = self
            .kept()
            .partition_point(|&kept| order(kept) < order((ratings, id)));
        if at == self.games.len() {
            return;
        }
        let len = (self.len + 1).min(self.games.len());
        self.games.copy_within(at..len - 1, at + 1);
        self.games[at] = (ratings, id);
        self.len = len;
    }

    /// The games kept, best first.
    pub fn kept(&self) -> &[(i64, i64)] {
        &self.games[..self.len]
    }

    /// The kept games' ratings and ids, as the row's two arrays (`None`
    /// when there are none).
    pub fn arrays(&self) -> (Option<Vec<i64>>, Option<Vec<i64>>) {
        if self.len == 0 {
            return (None, None);
        }
        (
            Some(self.kept().iter().map(|game| game.0).collect()),
            Some(self.kept().iter().map(|game| game.1).collect()),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_keeps_its_best_rated_games_highest_ratings_then_lowest_ids_first() {
        let mut top = TopGames::default();
        assert!(top.kept().is_empty());
        for (ratings, id) in [
            (3000, 9),
            (3100, 4),
            (3000, 2),
            (2900, 1),
            (3000, 5),
            (4000, 7),
        ] {
            top.offer(ratings, id);
        }
        assert_eq!(top.kept(), [(4000, 7), (3100, 4), (3000, 2), (3000, 5)]);
        // Worse than the last kept: not kept; better: the last one drops.
        top.offer(3000, 6);
        assert_eq!(top.kept().last(), Some(&(3000, 5)));
        top.offer(3000, 1);
        assert_eq!(top.kept(), [(4000, 7), (3100, 4), (3000, 1), (3000, 2)]);
        // Any ratings, negative included (the Elo tags are not bounded).
        let mut low = TopGames::default();
        low.offer(-5, 3);
        low.offer(i64::from(i32::MIN) * 2, 1);
        assert_eq!(low.kept(), [(-5, 3), (i64::from(i32::MIN) * 2, 1)]);
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
        // Best games still need both ratings.
        assert_eq!(white_moves.top.kept(), [(4000, 1)]);
    }
}
