//! An input's batches, from the parse pipeline through the writer's two
//! phases: positions of batch N+1 on one connection while the games of
//! batch N (with its checkpoint) are written on the other.
//!
//! It must not touch the input's row but through the writer's checkpoint:
//! where an input starts and how it ends are `checkpoint`'s.

use std::{
    io::Write,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

use super::{
    BulkState, DEFAULT_SOURCE, Importer, InputEnd, checkpoint::Checkpoint,
    merge_pending_hash_entries,
};
use crate::{
    error::Error,
    ingest::{
        bulk::{self, BulkLoad},
        pipeline::{Batch, Event, InputSpec, Outcome, Pipeline},
        report::Notice,
        retry::retry_on,
        source,
        writer::{
            Conflict, FileContext, PendingIds, ResolvedBatch, WrittenBatch, resolve_positions,
            to_i64, write_games,
        },
    },
    progress::Snapshot,
};

/// What [`Importer::stream_batches`] knows of the input upstream of the
/// writer.
struct Upstream {
    /// How the input ended upstream, once it did (the batches before are
    /// still written).
    end: Option<InputEnd>,
    /// The input's bytes read, once it opened.
    consumed: Option<Arc<AtomicU64>>,
    /// The run's rejects, committed or in a batch on its way to the
    /// database: what `--max-rejects` is checked against before a batch
    /// is written, so that the run commits one reject past the limit,
    /// never more.
    rejects_handed: u64,
    /// Whether the next batch is the first of an input read from its
    /// start: it is checked to be PGN before anything of it is written.
    first: bool,
}

impl Importer<'_> {
    /// Streams the input from its checkpoint through the parse pipeline
    /// and the two write phases. `Err` when a data connection was lost
    /// (the caller re-reads its state and retries).
    pub(super) async fn stream_batches(
        &mut self,
        name: &str,
        checkpoint: Checkpoint,
    ) -> Result<InputEnd, Error> {
        let mut file = self.file_context(&checkpoint);
        let spec = InputSpec {
            name: name.to_owned(),
            skip_bytes: checkpoint.skip_bytes,
            skip_games: checkpoint.skip_games,
            replay: self.replay.clone(),
        };
        let pipeline = Pipeline::start_interruptible(
            vec![spec],
            self.run.settings.pipeline,
            Arc::clone(&self.run.interrupts),
        );
        let mut upstream = Upstream {
            end: None,
            consumed: None,
            rejects_handed: self.tally.totals.games.rejected,
            first: checkpoint.skip_bytes == 0 && checkpoint.skip_games == 0,
        };
        if self.past_max_rejects(upstream.rejects_handed) {
            upstream.end = Some(InputEnd::TooManyRejects);
        }
        // Batches move through two phases (see `Self::step`): `ready` has
        // its positions committed and waits for its games to be written.
        let mut ready: Option<(Batch, ResolvedBatch)> = None;
        let end = loop {
            let next = self.pull(&pipeline, name, &mut upstream);
            if next.is_none() && ready.is_none() {
                break Ok(upstream.end.unwrap_or(InputEnd::Done));
            }
            // A pending bulk load begins (dropping the indexes) with the
            // first batch read, so once the input opened and yielded games:
            // a run whose inputs all fail to open (a file that is no
            // database, a corrupt stream) leaves the indexes alone.
            if next.is_some()
                && let Err(error) = self.begin_pending_bulk_load().await
            {
                break Err(error);
            }
            let (resolved, written) = self
                .step(next.as_ref(), ready.as_ref().map(|(b, r)| (b, r)), &file)
                .await;
            // Committed positions are learnt even if the other phase
            // failed: a bulk load must not insert them a second time.
            let resolved = match (next, resolved) {
                (Some(batch), Some(Ok((resolved, pending)))) => {
                    for (key, id) in pending {
                        self.cache.insert(key, id);
                    }
                    Some(Ok((batch, resolved)))
                }
                (_, Some(Err(error))) => Some(Err(error)),
                _ => None,
            };
            if let (Some((batch, _)), Some(written)) = (ready.take(), written) {
                if let Err(error) = written.and_then(|written| self.after_commit(&batch, written)) {
                    break self.lost_or_failed(error);
                }
                file.expected_bytes_done = to_i64(batch.end_offset);
                if let Some(replay) = &self.replay
                    && let Err(error) = replay.release(batch.end_offset)
                {
                    break Err(error);
                }
                if let Some(end) = self.after_batch(&batch, upstream.consumed.as_deref()) {
                    break Ok(end);
                }
            }
            match resolved {
                Some(Ok(resolved)) => ready = Some(resolved),
                Some(Err(error)) => break self.lost_or_failed(error),
                None => {}
            }
        };
        pipeline.stop();
        drop(pipeline);
        end
    }

    /// What the writer needs to know of the input at `checkpoint`.
    fn file_context(&self, checkpoint: &Checkpoint) -> FileContext {
        FileContext {
            file_id: checkpoint.file_id,
            source: (self.run.settings.source.clone()).unwrap_or_else(|| DEFAULT_SOURCE.to_owned()),
            expected_bytes_done: checkpoint.bytes_done,
            explorer: self.run.explorer,
            positions_max_ply: self.run.settings.scope.positions_max_ply,
            shards: self.run.shards,
        }
    }

    /// The next batch to write, checked and cut as the run's settings say
    /// (PGN on an input's first batch, `--max-rejects`, the scope); `None`
    /// once the input ended upstream (`upstream.end` says how).
    fn pull(&self, pipeline: &Pipeline, name: &str, upstream: &mut Upstream) -> Option<Batch> {
        if upstream.end.is_some() {
            return None;
        }
        match self.next_batch(pipeline, name, &mut upstream.consumed) {
            Ok(batch) if std::mem::take(&mut upstream.first) && !batch.reads_as_pgn() => {
                upstream.end = Some(InputEnd::Failed(not_pgn(name, &batch)));
                None
            }
            Ok(mut batch) => {
                if self.cut_at_max_rejects(&mut batch, &mut upstream.rejects_handed) {
                    upstream.end = Some(InputEnd::TooManyRejects);
                }
                batch.apply_scope(&self.run.settings.scope);
                Some(batch)
            }
            Err(end) => {
                upstream.end = Some(end);
                None
            }
        }
    }

    /// Begins the bulk load this run chose, if it has not begun yet.
    async fn begin_pending_bulk_load(&mut self) -> Result<(), Error> {
        if let BulkState::Pending = self.load.bulk {
            let BulkLoad { id, mode } = bulk::begin(&mut self.conns.db.client).await?;
            self.load.write_mode = mode;
            self.load.bulk = BulkState::Open(id);
        }
        Ok(())
    }

    /// The pipeline's next batch, or how the input ended upstream (the
    /// batches before a failure are still written). `consumed` is set to
    /// the input's byte counter when it opens.
    fn next_batch(
        &self,
        pipeline: &Pipeline,
        name: &str,
        consumed: &mut Option<Arc<AtomicU64>>,
    ) -> Result<Batch, InputEnd> {
        loop {
            match pipeline.events.recv() {
                Ok(Event::Opened {
                    len, consumed: c, ..
                }) => {
                    self.run.reporter.input_opened(name, len);
                    *consumed = Some(c);
                }
                Ok(Event::Batch(batch)) => return Ok(batch),
                Ok(Event::Finished { .. }) => return Err(InputEnd::Done),
                // The pipeline's threads are gone without saying how the
                // input ended: a bug, not the end of the input.
                Err(_) => {
                    return Err(InputEnd::Failed(Error::bug(
                        "the parse pipeline stopped before the end of the input",
                    )));
                }
                Ok(Event::Failed { error, .. }) => {
                    return Err(if source::is_cancelled(&error) {
                        InputEnd::Interrupted
                    } else {
                        InputEnd::Failed(error)
                    });
                }
            }
        }
    }

    /// Whether `rejects` (the run's) are more than `--max-rejects` allows.
    fn past_max_rejects(&self, rejects: u64) -> bool {
        let max = self.run.settings.max_rejects;
        max > 0 && rejects > max
    }

    /// Cuts `batch` at the reject that takes the run past `--max-rejects`
    /// (`handed`: the run's rejects before it, counted on), and says
    /// whether it did: the input then stops after that batch. Checked per
    /// game rather than per committed batch, the limit is exact: a run
    /// stops with `max_rejects + 1` rejects committed.
    fn cut_at_max_rejects(&self, batch: &mut Batch, handed: &mut u64) -> bool {
        let max = self.run.settings.max_rejects;
        let rejects = batch
            .outcomes
            .iter()
            .filter(|outcome| matches!(outcome, Outcome::Rejected(_)))
            .count() as u64;
        if max == 0 || *handed + rejects <= max {
            *handed += rejects;
            return false;
        }
        // `handed <= max` here: a run past the limit reads no batch.
        let allowed = max + 1 - *handed;
        *handed = max + 1;
        batch.cut_after_reject(allowed)
    }

    /// After a batch committed: reports progress (`consumed`: the input's
    /// bytes read, when it opened) and says whether the input stops here
    /// (too many rejects, an interrupt).
    fn after_batch(&self, batch: &Batch, consumed: Option<&AtomicU64>) -> Option<InputEnd> {
        let games = &self.tally.totals.games;
        self.run.reporter.progress(Snapshot {
            games: games.read,
            positions: games.positions_new + games.positions_reused,
            memory_hit_rate: games.memory_hit_rate(),
            bytes: consumed.map_or(batch.end_offset, |c| c.load(Ordering::Relaxed)),
        });
        if self.past_max_rejects(games.rejected) {
            Some(InputEnd::TooManyRejects)
        } else if self.interrupted() {
            Some(InputEnd::Interrupted)
        } else {
            None
        }
    }

    /// One step of the two-phase write: resolves the positions of `next`
    /// on the positions connection while the games of `ready` (whose
    /// positions a previous step committed) are written on the data
    /// connection, so that PostgreSQL works on both at once. Each phase
    /// retries transient failures on its own connection; a phase with
    /// nothing to do returns `None`.
    async fn step(
        &mut self,
        next: Option<&Batch>,
        ready: Option<(&Batch, &ResolvedBatch)>,
        file: &FileContext,
    ) -> (
        Option<Result<(ResolvedBatch, PendingIds), Error>>,
        Option<Result<WrittenBatch, Error>>,
    ) {
        let (positions_retry, games_retry) = (self.run.retry(), self.run.retry());
        let (target, reporter) = (&self.run.target, self.run.reporter);
        let (mut position_seq, mut game_seq) = self.load.write_mode.sequences();
        // The input's last games are written while the positions
        // connection, done with the input, merges what its batches added
        // to the `fen_hash` index's pending list (incremental mode on one
        // node: a bulk load rebuilds that index instead).
        let merge_pending = next.is_none()
            && ready.is_some()
            && position_seq.is_none()
            && self.run.shards.is_none();
        let cache = &mut self.cache;
        let memory = &mut self.memory;
        let positions_db = &mut self.conns.positions_db;
        let db = &mut self.conns.db;
        let resolve = async {
            let Some(batch) = next else {
                if merge_pending {
                    merge_pending_hash_entries(&positions_db.client, reporter).await;
                }
                return None;
            };
            Some(
                retry_on(
                    positions_db,
                    target,
                    positions_retry,
                    false,
                    reporter,
                    async |client| {
                        resolve_positions(client, batch, file, cache, position_seq.as_deref_mut())
                            .await
                    },
                )
                .await,
            )
        };
        let write = async {
            let (batch, resolved) = ready?;
            Some(
                retry_on(db, target, games_retry, false, reporter, async |client| {
                    write_games(
                        client,
                        batch,
                        file,
                        resolved,
                        game_seq.as_deref_mut(),
                        memory,
                    )
                    .await
                })
                .await,
            )
        };
        tokio::join!(resolve, write)
    }

    /// Accounts for a batch whose games committed.
    fn after_commit(&mut self, batch: &Batch, written: WrittenBatch) -> Result<(), Error> {
        self.memory.learn(written.learnt);
        let shown_before = self.tally.totals.games.conflicts;
        for (ordinal, conflict) in (shown_before..).zip(&written.conflicts) {
            self.warn_conflict(batch, conflict, ordinal);
        }
        self.tally.totals.games.add(written.stats);
        if let Some(out) = &mut self.run.rejects_file {
            for outcome in &batch.outcomes {
                if let Outcome::Rejected(r) = outcome {
                    let reason = r.rejection.to_string().replace(['\n', '\r'], " ");
                    let mut text = format!("% pgnload reject: {reason}\n").into_bytes();
                    text.extend_from_slice(r.raw.trim_ascii_end());
                    text.extend_from_slice(b"\n\n");
                    out.write_all(&text).map_err(Error::Output)?;
                }
            }
        }
        Ok(())
    }

    /// Says where a conflicting game and the game holding its id are (the
    /// first few of a run; `import_conflicts` has them all).
    fn warn_conflict(&self, batch: &Batch, conflict: &Conflict, ordinal: u64) {
        const SHOWN: u64 = 10;
        if ordinal >= SHOWN {
            if ordinal == SHOWN {
                self.run.reporter.notice(&Notice::MoreConflicts);
            }
            return;
        }
        if let Some(Outcome::Game(game)) = batch.outcomes.get(conflict.index) {
            self.run.reporter.notice(&Notice::Conflict {
                game: &game.pos,
                conflict,
            });
        }
    }

    /// How an input ends after a failed write: a dropped data connection
    /// (server crash or restart, terminated backend) is an `Err`, after
    /// which nothing the importer derived from earlier commits is trusted
    /// and the input starts again from the checkpoint the database holds;
    /// anything else fails the input.
    fn lost_or_failed(&self, error: Error) -> Result<InputEnd, Error> {
        if let Error::Interrupted { .. } = error {
            // A signal ended a retry's wait: the input stops where its
            // checkpoint stands, as after any interrupt.
            Ok(InputEnd::Interrupted)
        } else if self.conns.db.client.is_closed() || self.conns.positions_db.client.is_closed() {
            Err(error)
        } else {
            Ok(InputEnd::Failed(error))
        }
    }
}

/// The failure of an input that is not PGN (see [`Batch::reads_as_pgn`]):
/// it fails whole, with nothing of it written, so that its record says
/// `failed` and a rerun reads it again once it is replaced.
fn not_pgn(name: &str, batch: &Batch) -> Error {
    Error::Input {
        file: name.to_owned(),
        message: format!(
            "not a PGN file: none of its first {} games reads as PGN (no tag pair, no move \
             number, nothing that parses); nothing imported. Replace it with a PGN file, or \
             leave it out",
            batch.outcomes.len()
        ),
    }
}
