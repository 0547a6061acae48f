//! A bulk load's counter rows, held in memory across its batches and
//! written together ([`super::flush`]) when there are many or the run
//! ends, instead of one write per batch.
//!
//! Why: a bulk load writes its games at `COPY` speed, and the counters
//! written per batch (upserts of every counter row the batch touched)
//! added half its time again (1.50×, measured by `scripts/bench_query.sh`
//! on 50,000 games). Held, a key that every batch touches (the start
//! position's, say) is written once, and the rows of the positions the
//! load created go by `COPY` straight into `explorer_moves`, in key
//! order.
//!
//! Why nothing is lost: every batch whose rows are held records its games
//! in `explorer_deferred` in its own transaction, and the write of the
//! held rows deletes those records in its transaction. Whatever held rows
//! a crash or a lost connection drops, their games stay recorded, and the
//! finish of the bulk load queues their positions for a recount
//! ([`super::queue_deferred`]). Until then `explore` and `verify
//! --explorer` refuse ([`super::require_usable`]): the counters lack
//! games.

use rayon::prelude::*;

use super::{CounterKey, Counts};

/// What a committed batch adds to the held rows.
#[derive(Debug, Clone, Default)]
pub struct BatchRows {
    /// Its counter rows, one per key, in key order.
    pub(super) rows: Vec<(CounterKey, Counts)>,
    /// The positions whose first rows are among them (no row in
    /// `explorer_moves` yet).
    pub(super) first: Vec<i64>,
    /// The `explorer_deferred` ids recording its games.
    pub(super) deferred: Vec<i64>,
}

/// What became of a batch's counter rows, for the run's memory to learn
/// once the batch committed.
#[derive(Debug, Clone, Default)]
pub enum Held {
    /// Written by the batch (not a bulk load's, or its rows not held).
    #[default]
    Unheld,
    /// To add to the held rows.
    Add(BatchRows),
    /// Written by the batch with the rows held before it: the held rows
    /// are in `explorer_moves` now.
    Written,
}

/// The counter rows of committed batches, not yet in `explorer_moves`:
/// each batch's as it came, added up by key only when written
/// (`added`). Why: adding each batch's rows into one map by key
/// took the writer, which every batch waits for, 0.4 s per 50,000 games
/// (measured with `perf`); sorted together at the end, about 0.1 s,
/// beside the index rebuilds.
#[derive(Debug, Default)]
pub struct HeldRows {
    /// Each batch's rows, in key order.
    batches: Vec<Vec<(CounterKey, Counts)>>,
    /// The rows of `batches`, a key counted once per batch that has it.
    len: usize,
    /// Positions whose first rows are held: written by `COPY`, since no
    /// row can be there (see the module doc of [`super`]).
    pub(super) first: Vec<i64>,
    /// The `explorer_deferred` ids of the games counted.
    pub(super) deferred: Vec<i64>,
}

impl HeldRows {
    /// Adds a committed batch's rows.
    pub fn add(&mut self, batch: BatchRows) {
        self.len += batch.rows.len();
        self.batches.push(batch.rows);
        self.first.extend(batch.first);
        self.deferred.extend(batch.deferred);
    }

    /// How many counter rows are held, a key counted once per batch that
    /// has it: what bounds their memory.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no batch's games are held (rows, or records of games that
    /// counted in no row).
    pub fn is_empty(&self) -> bool {
        self.len == 0 && self.deferred.is_empty()
    }

    /// The held rows, one per key, the batches' counts added, in key
    /// order.
    pub(super) fn added(&self) -> Vec<(CounterKey, Counts)> {
        let mut rows: Vec<&(CounterKey, Counts)> = self.batches.iter().flatten().collect();
        // Stable, and each batch's rows are a sorted run already.
        rows.par_sort_by(|a, b| a.0.cmp(&b.0));
        rows.chunk_by(|a, b| a.0 == b.0)
            .map(|same| {
                let (key, mut counts) = *same[0];
                for (_, more) in &same[1..] {
                    counts.merge(more);
                }
                (key, counts)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{chess::model::GameVariant, explorer::GameCounts};

    /// A row of game `id`, White rated `white` and Black `ratings -
    /// white`, at a position where White moves, played `id` seconds
    /// after another.
    fn counts(id: i64, ratings: i64, white: i32, month: i32) -> Counts {
        let mut counts = Counts::default();
        counts.add(
            id,
            &GameCounts {
                month,
                score: Some(1),
                ratings: Some(ratings),
                white_rating: Some(white),
                black_rating: i32::try_from(ratings - i64::from(white)).ok(),
                started_at: chrono::DateTime::from_timestamp(1_700_000_000 + id, 0),
                ..GameCounts::default()
            },
            true,
        );
        counts
    }

    #[test]
    fn batches_meeting_at_a_key_add_up_and_list_the_most_recent_games_of_both() {
        let key: CounterKey = (5, GameVariant::Standard, 2, 1600, 202_401, 77);
        let other: CounterKey = (6, GameVariant::Standard, 2, 1600, 202_401, 77);
        let mut held = HeldRows::default();
        held.add(BatchRows {
            rows: vec![
                (key, counts(1, 3000, 1400, 1)),
                (other, counts(2, 2000, 1000, 1)),
            ],
            first: vec![5],
            deferred: vec![10],
        });
        let mut second = counts(3, 3200, 1700, 1);
        second.merge(&counts(4, 3000, 1550, 1));
        held.add(BatchRows {
            rows: vec![(key, second)],
            first: vec![],
            deferred: vec![11],
        });
        assert_eq!(held.len(), 3, "a key counted per batch");
        let rows = held.added();
        assert_eq!(rows.len(), 2);
        assert_eq!((rows[0].0, rows[1].0), (key, other), "key order");
        let row = rows[0].1;
        assert_eq!((row.games, row.white, row.mover_rated_games), (3, 3, 3));
        // White's ratings (White moves here), not the games' averages.
        assert_eq!(row.mover_rating_sum, 1400 + 1700 + 1550);
        let listed: Vec<(i64, i64)> = row
            .listed
            .kept()
            .iter()
            .map(|g| (g.id, g.ratings))
            .collect();
        assert_eq!(listed, [(4, 3000), (3, 3200), (1, 3000)]);
        assert_eq!(rows[1].1.games, 1);
        assert_eq!(held.first, vec![5]);
        assert_eq!(held.deferred, vec![10, 11]);
        assert!(!held.is_empty() && HeldRows::default().is_empty());
    }

    #[test]
    fn a_held_row_is_the_size_the_memory_budget_counts() {
        // crate::ingest::engine's CACHED_PER_HELD_ROW and docs/schema.md
        // count on this: 136 bytes with 4 best-rated games a row, 264 with
        // 8 listed games (migration 25), ~230 and ~360 bytes a row held,
        // with the batches' vectors and the sort's pointers.
        assert_eq!(std::mem::size_of::<(CounterKey, Counts)>(), 264);
    }
}
