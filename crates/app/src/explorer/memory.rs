//! What an import run remembers of the explorer counters of the positions
//! it wrote, so that a batch neither queues nor looks up what an earlier
//! batch of the run already knew:
//!
//! * the positions the run created that one of its games alone has
//!   reached so far, each with that game's contribution: when a later
//!   batch reaches one again, it writes the position's first rows for
//!   both games itself, instead of queueing it for a recount from `games`
//!   and `moves` at the end of the run (about 60 µs a position, most of
//!   what the counters cost an import: measured on 50,000 games);
//! * positions known to have rows, which a later batch adds to without
//!   looking them up (rows are never removed while imports run, see
//!   `sql/0012_explorer_shared_positions.sql`).
//!
//! Why the contribution is still exact when used: nobody else gives such
//! a position rows while the run holds the import lock (a batch writes
//! rows only for positions that have rows or that it created; recounts
//! take the lock exclusively and advance `explorer_rows_epoch`, which
//! empties the map), and anybody else who adds a game there, or takes the
//! remembered game out (`game delete`, `game put`, a backfill), queues
//! the position (`remove_games` queues the positions without rows of the
//! games it removes), so that the rows written from the map are recounted
//! before they are trusted.
//!
//! Bounded: it holds at most `capacity` lone visits remembered, the oldest
//! batches forgotten first (a forgotten position is queued when reached
//! again, as without the map), and `capacity` positions with rows (all
//! forgotten at once past it: they are looked up again). Entries are added
//! only for batches that committed, and all is forgotten whenever a
//! connection was lost (a server crash can undo commits the importer saw
//! succeed) or `explorer_rows_epoch` moved.

use std::collections::VecDeque;

use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};

use super::{
    GameCounts,
    held::{Held, HeldRows},
};

/// A position one game has reached: that game and the move of its last
/// visit there (`moves.move_code`, as the counters key it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoneVisit {
    /// The position (`positions.id`).
    pub position: i64,
    /// The game (`games.id`).
    pub game: i64,
    /// The move of the game's last visit to the position.
    pub code: i16,
    /// Whether White moves at the position (whose rating the row sums).
    pub white_moves: bool,
}

/// What a committed batch teaches [`RunMemory`].
#[derive(Debug, Clone, Default)]
pub struct Learnt {
    /// `explorer_rows_epoch` under which the batch trusted its positions.
    pub epoch: i64,
    /// The positions it created and reached with one game.
    pub visits: Vec<LoneVisit>,
    /// The category and result of each game of `visits`.
    pub games: Vec<(i64, GameCounts)>,
    /// Positions that have rows now: the ones it gave their first rows,
    /// and the ones it found with rows (or, in a bulk load, gave held
    /// rows).
    pub with_rows: Vec<i64>,
    /// Its counter rows, if they are held, or whether it wrote the held
    /// rows.
    pub held: Held,
}

/// What a run remembers of its positions' counters (module doc).
#[derive(Debug)]
pub struct RunMemory {
    /// How many visits are held at most (counted as remembered, taken
    /// ones included until their batch is forgotten, so that the games
    /// they name are bounded too).
    capacity: usize,
    /// `explorer_rows_epoch` of the entries held.
    epoch: i64,
    /// Position → its one game's visit.
    visits: HashMap<i64, LoneVisit>,
    /// The games the visits name.
    games: HashMap<i64, GameCounts>,
    /// The remembered batches, oldest first: their positions and games,
    /// to forget them together.
    batches: VecDeque<(Vec<i64>, Vec<i64>)>,
    /// Visits remembered by the batches held.
    held: usize,
    /// Positions known to have rows.
    with_rows: HashSet<i64>,
    /// A bulk load's counter rows not yet written ([`super::held`]).
    rows: HeldRows,
    /// How many rows are held at most before a batch writes them.
    rows_capacity: usize,
}

impl RunMemory {
    /// Remembers nothing yet, and at most `capacity` visits and positions
    /// with rows (0: nothing, every position is looked up and queued as
    /// without it), and holds about `rows_capacity` counter rows of a bulk
    /// load (0: each batch writes its own).
    pub fn new(capacity: usize, rows_capacity: usize) -> Self {
        Self {
            capacity,
            rows: HeldRows::default(),
            rows_capacity,
            epoch: 0,
            visits: HashMap::new(),
            games: HashMap::new(),
            batches: VecDeque::new(),
            held: 0,
            with_rows: HashSet::new(),
        }
    }

    /// Forgets everything (a lost connection: what was learnt from
    /// commits is no longer trusted), held rows included: the records of
    /// their games stay in `explorer_deferred` for the load's finish.
    pub fn clear(&mut self) {
        *self = Self::new(self.capacity, self.rows_capacity);
    }

    /// The bulk load's counter rows not yet written.
    pub fn held_rows(&self) -> &HeldRows {
        &self.rows
    }

    /// Takes the bulk load's counter rows not yet written out, for the
    /// load's finish to write ([`super::flush_once`]): they are no longer
    /// the run's to write, whatever becomes of them.
    pub fn take_held_rows(&mut self) -> HeldRows {
        std::mem::take(&mut self.rows)
    }

    /// Whether a batch of a bulk load adds its rows to the held ones
    /// rather than writing them all.
    pub fn holds_more(&self) -> bool {
        self.rows.len() < self.rows_capacity
    }

    /// The held rows were written ([`super::flush`] committed).
    pub fn held_written(&mut self) {
        self.rows = HeldRows::default();
    }

    /// Forgets everything unless the entries were made under `epoch`
    /// (`explorer_rows_epoch` as read now): a recount since may have given
    /// their positions rows.
    pub fn keep_if_epoch(&mut self, epoch: i64) {
        if epoch != self.epoch {
            self.clear();
            self.epoch = epoch;
        }
    }

    /// Whether the position is known to have rows.
    pub fn has_rows(&self, position: i64) -> bool {
        self.with_rows.contains(&position)
    }

    /// Takes the position's one game out of the map (it is reached again:
    /// it is no longer one game's), with that game's categories.
    pub fn take(&mut self, position: i64) -> Option<(LoneVisit, GameCounts)> {
        let visit = self.visits.remove(&position)?;
        let counts = *self.games.get(&visit.game)?;
        Some((visit, counts))
    }

    /// Learns what a committed batch says, forgetting the oldest lone
    /// visits past the capacity. A batch made under another epoch than the
    /// entries held replaces them.
    pub fn learn(&mut self, batch: Learnt) {
        self.keep_if_epoch(batch.epoch);
        match batch.held {
            Held::Unheld => {}
            Held::Add(rows) => self.rows.add(rows),
            Held::Written => self.held_written(),
        }
        if self.capacity == 0 {
            return;
        }
        if self.with_rows.len() + batch.with_rows.len() > self.capacity {
            self.with_rows.clear();
        }
        if batch.with_rows.len() <= self.capacity {
            self.with_rows.extend(batch.with_rows);
        }
        if batch.visits.is_empty() {
            return;
        }
        let positions: Vec<i64> = batch.visits.iter().map(|visit| visit.position).collect();
        self.held += positions.len();
        for visit in &batch.visits {
            self.visits.insert(visit.position, *visit);
        }
        let game_ids: Vec<i64> = batch.games.iter().map(|(id, _)| *id).collect();
        self.games.extend(batch.games);
        self.batches.push_back((positions, game_ids));
        while self.held > self.capacity {
            let Some((positions, games)) = self.batches.pop_front() else {
                break;
            };
            self.held -= positions.len();
            for position in positions {
                self.visits.remove(&position);
            }
            for game in games {
                self.games.remove(&game);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(month: i32) -> GameCounts {
        GameCounts {
            month,
            ..GameCounts::default()
        }
    }

    fn batch(epoch: i64, game: i64, positions: &[i64]) -> Learnt {
        Learnt {
            epoch,
            visits: positions
                .iter()
                .map(|&position| LoneVisit {
                    position,
                    game,
                    code: 7,
                    white_moves: position % 2 == 0,
                })
                .collect(),
            games: vec![(game, counts(i32::try_from(game).expect("small")))],
            with_rows: vec![-game],
            held: Held::Unheld,
        }
    }

    #[test]
    fn a_position_is_taken_once_with_its_game() {
        let mut lone = RunMemory::new(10, 0);
        lone.learn(batch(3, 1, &[100, 101]));
        lone.keep_if_epoch(3);
        let (visit, game) = lone.take(100).expect("remembered");
        assert_eq!(
            visit,
            LoneVisit {
                position: 100,
                game: 1,
                code: 7,
                white_moves: true,
            }
        );
        assert_eq!(game.month, 1);
        assert_eq!(lone.take(100), None, "a second game was there: not lone");
        assert!(
            lone.take(101).is_some(),
            "the game's other position is kept"
        );
        assert!(lone.visits.is_empty());
        assert!(lone.has_rows(-1) && !lone.has_rows(100));
    }

    #[test]
    fn another_epoch_forgets_everything() {
        let mut lone = RunMemory::new(10, 0);
        lone.learn(batch(3, 1, &[100]));
        lone.keep_if_epoch(4);
        assert_eq!(lone.take(100), None);
        assert!(!lone.has_rows(-1), "a recount may have removed rows");
        lone.learn(batch(4, 2, &[200]));
        lone.learn(batch(5, 3, &[300]));
        assert_eq!(lone.take(200), None, "a batch of a later epoch replaces");
        assert!(lone.take(300).is_some());
    }

    #[test]
    fn the_oldest_batches_are_forgotten_past_the_capacity_taken_visits_counted() {
        let mut lone = RunMemory::new(4, 0);
        lone.learn(batch(1, 1, &[10, 11]));
        lone.learn(batch(1, 2, &[20, 21]));
        assert!(lone.take(10).is_some());
        // 10 taken, but its batch still holds game 1: five remembered > 4.
        lone.learn(batch(1, 3, &[30]));
        assert_eq!(lone.visits.len(), 3);
        assert_eq!(lone.take(11), None, "batch of game 1 forgotten");
        assert!(!lone.games.contains_key(&1), "its game too");
        assert!(lone.take(20).is_some() && lone.take(30).is_some());
        assert!(lone.has_rows(-1) && lone.has_rows(-3));
        // A batch larger than the map is not held at all.
        let mut large = batch(1, 4, &[40, 41, 42, 43, 44]);
        large.with_rows = vec![1, 2, 3, 4, 5];
        lone.learn(large);
        assert!(lone.visits.is_empty() && lone.games.is_empty());
        assert!(
            lone.with_rows.is_empty(),
            "positions with rows forgotten past the capacity"
        );
        let mut none = RunMemory::new(0, 0);
        none.learn(batch(1, 5, &[50]));
        assert!(none.visits.is_empty());
    }
}
