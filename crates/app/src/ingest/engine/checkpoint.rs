//! An input's checkpoint in `import_files`: where its import resumes,
//! whether it is imported already or changed since, how it ended, and its
//! counts as the database committed them (so that a batch committed once
//! is counted once, however many attempts a lost connection forced).
//!
//! It must not read the input's games nor write any: it works on the
//! input's row on the control connection (and, when it forgets the position
//! map after a lost connection, marks a bulk load for a duplicate merge).

use std::path::Path;

use super::{BulkState, Importer, InputEnd, sniff_compression};
use crate::{
    error::Error,
    ingest::{
        dedup::PositionCache,
        report::Notice,
        source::{self, Compression},
        writer::BatchStats,
    },
    store::db::db_err,
};

/// The start of an input's import, kept across retried attempts so that
/// its counts come from what the database committed, however many
/// attempts it took.
#[derive(Debug, Clone, Copy)]
pub(super) struct InputAttempt {
    /// `import_files.id`.
    file_id: i64,
    /// The input's counters in `import_files` when the first attempt began.
    committed_before: GameCounts,
    /// The run's totals when the first attempt began.
    totals_before: BatchStats,
}

impl InputAttempt {
    /// Games of the input rejected before this run began (none after a
    /// `--restart`, which starts its record again). A counter below zero,
    /// which no statement writes, counts as none.
    pub(super) fn rejected_before(&self) -> u64 {
        self.committed_before.rejected.try_into().unwrap_or(0)
    }
}

/// Where an input's import starts, as its `import_files` row says.
#[derive(Debug, Clone, Copy)]
pub(super) struct Checkpoint {
    /// `import_files.id`.
    pub(super) file_id: i64,
    /// Decompressed bytes already imported (the checkpoint the next
    /// batch's commit must find).
    pub(super) bytes_done: i64,
    /// The same, as the pipeline skips it.
    pub(super) skip_bytes: u64,
    /// Games already read.
    pub(super) skip_games: u64,
}

/// What became of an earlier, unfinished import of a file at the same path
/// under another fingerprint.
enum Predecessor {
    /// There is none (or `--restart` retired it).
    None,
    /// The file only grew since: its row now carries the new fingerprint.
    Adopted,
    /// The file changed inside the part imported: the input ends so.
    Refused(InputEnd),
}

/// An input's game counters, as `import_files` holds them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct GameCounts {
    imported: i64,
    present: i64,
    rejected: i64,
    filtered: i64,
}

impl GameCounts {
    /// The counters from a row of `(games_imported, games_present,
    /// games_rejected, games_filtered)` starting at column `first`.
    fn from_row(row: &tokio_postgres::Row, first: usize) -> GameCounts {
        GameCounts {
            imported: row.get(first),
            present: row.get(first + 1),
            rejected: row.get(first + 2),
            filtered: row.get(first + 3),
        }
    }
}

/// How a changed input is refused: `message` says why.
fn refused(name: &str, message: String) -> Predecessor {
    Predecessor::Refused(InputEnd::Failed(Error::Input {
        file: name.to_owned(),
        message,
    }))
}

/// A file's size as `import_files.size_bytes` holds it.
fn size_bytes(size: Option<u64>) -> Option<i64> {
    size.map(|size| {
        i64::try_from(size).expect("a file size comes from st_size, a non-negative 64-bit off_t")
    })
}

impl Importer<'_> {
    /// Reads (or registers) the input's checkpoint and marks it running:
    /// where to resume, or how the input ends without reading it (already
    /// imported, changed since an interrupted import, an impossible
    /// checkpoint). Forgets first what a lost connection made stale.
    pub(super) async fn open_checkpoint(
        &mut self,
        name: &str,
        path: &str,
        fingerprint: &str,
        size: Option<u64>,
    ) -> Result<Result<Checkpoint, InputEnd>, Error> {
        if std::mem::take(&mut self.stale) {
            self.forget_unverified().await?;
        }
        // `--restart` applies to an input's first attempt only: a retry
        // after a lost connection continues from what the first committed.
        let retrying = self.tally.attempt.is_some();
        let restart = self.run.job.restart && !retrying;
        let scope = self.run.settings.scope.identity();
        let mut row = self.checkpoint_row(fingerprint).await?;
        if row.is_none() && !source::is_stream(name) {
            match self.changed_since(name, path, fingerprint, size).await? {
                Predecessor::None => {}
                Predecessor::Adopted => row = self.checkpoint_row(fingerprint).await?,
                Predecessor::Refused(end) => return Ok(Err(end)),
            }
        }
        let (file_id, games_done, bytes_done) = match row {
            Some(row) => match self.recorded(&row, name, restart, retrying, &scope)? {
                Ok((games, bytes)) => (row.get::<_, i64>(0), games, bytes),
                Err(end) => return Ok(Err(end)),
            },
            None => (
                self.register_input(name, path, fingerprint, size, &scope)
                    .await?,
                0,
                0,
            ),
        };
        let (Ok(skip_bytes), Ok(skip_games)) =
            (u64::try_from(bytes_done), u64::try_from(games_done))
        else {
            return Ok(Err(InputEnd::Failed(Error::inconsistent(format!(
                "import_files row {file_id} holds a negative checkpoint \
                 ({games_done} games, byte {bytes_done}); refusing to guess where to resume"
            )))));
        };
        let committed = self
            .mark_running(file_id, path, (games_done, bytes_done), restart, &scope)
            .await?;
        if retrying {
            // The run's counts become what the database holds for the
            // input (a batch committed though its acknowledgement was lost
            // is counted), so that `--max-rejects` goes on from the truth.
            self.account_input(committed)?;
        } else {
            self.tally.attempt = Some(InputAttempt {
                file_id,
                committed_before: committed,
                totals_before: self.tally.totals.games,
            });
        }
        Ok(Ok(Checkpoint {
            file_id,
            bytes_done,
            skip_bytes,
            skip_games,
        }))
    }

    /// Where the input recorded in `row` ([`Self::checkpoint_row`])
    /// resumes, as `(games_done, bytes_done)` (from the start on
    /// `restart`), or how it ends without reading it: recorded under
    /// another scope, or done (when `retrying`, by the attempt that lost
    /// its connection: its counts are the run's).
    fn recorded(
        &mut self,
        row: &tokio_postgres::Row,
        name: &str,
        restart: bool,
        retrying: bool,
        scope: &str,
    ) -> Result<Result<(i64, i64), InputEnd>, Error> {
        let state: String = row.get(1);
        let recorded: String = row.get(8);
        if !restart && recorded != scope {
            return Ok(Err(InputEnd::Failed(scope_changed(name, &recorded, scope))));
        }
        if state == "done" && !restart {
            if retrying {
                // The attempt that lost its connection had finished.
                self.account_input(GameCounts::from_row(row, 4))?;
                return Ok(Err(InputEnd::Done));
            }
            return Ok(Err(InputEnd::AlreadyImported));
        }
        let (games, bytes): (i64, i64) = if restart {
            (0, 0)
        } else {
            (row.get(2), row.get(3))
        };
        if bytes > 0 {
            self.run.reporter.notice(&Notice::Resuming {
                input: name,
                games,
                bytes,
            });
        }
        Ok(Ok((games, bytes)))
    }

    /// The input's row in `import_files`, by fingerprint: `(id, state,
    /// games_done, bytes_done, the four counters, scope)`.
    async fn checkpoint_row(
        &self,
        fingerprint: &str,
    ) -> Result<Option<tokio_postgres::Row>, Error> {
        self.conns
            .control
            .client
            .query_opt(
                "SELECT id, state, games_done, bytes_done, games_imported, games_present, games_rejected,
                     games_filtered, scope
                 FROM import_files WHERE fingerprint = $1",
                &[&fingerprint],
            )
            .await
            .map_err(db_err("reading the input's checkpoint"))
    }

    /// A file not seen before at `path`, whose import there was interrupted
    /// (or failed) under another fingerprint. If the file only grew since
    /// (its first bytes are those the import read: a download finished),
    /// that import continues: its row adopts the new fingerprint and size.
    /// Otherwise it changed inside the part imported: refused (resuming
    /// would mix two files), or with `--restart` the old checkpoint is
    /// retired. An import there that committed nothing (a file that was
    /// not PGN, a kill before the first batch) has nothing to mix: the new
    /// file is imported.
    async fn changed_since(
        &self,
        name: &str,
        path: &str,
        fingerprint: &str,
        size: Option<u64>,
    ) -> Result<Predecessor, Error> {
        let client = &self.conns.control.client;
        let Some(old) = client
            .query_opt(
                "SELECT id, fingerprint FROM import_files
                 WHERE path = $1 AND fingerprint <> $2 AND state <> 'done' AND bytes_done > 0
                 ORDER BY updated_at DESC LIMIT 1",
                &[&path, &fingerprint],
            )
            .await
            .map_err(db_err("checking for a changed input"))?
        else {
            return Ok(Predecessor::None);
        };
        let (old_id, old): (i64, String) = (old.get(0), old.get(1));
        if self.run.job.restart {
            client
                .execute(
                    "UPDATE import_files SET state = 'failed', last_error = 'superseded: the file changed', updated_at = now()
                     WHERE id = $1",
                    &[&old_id],
                )
                .await
                .map_err(db_err("retiring the old checkpoint"))?;
            return Ok(Predecessor::None);
        }
        // Exchange inputs resume by game number, and their files are
        // rewritten in place rather than appended to: never "grown".
        let stored = matches!(
            sniff_compression(Path::new(name)),
            Compression::Sqlite | Compression::Dcg
        );
        let grown = if stored {
            Ok(None)
        } else {
            source::grown_from(Path::new(name), &old, &self.run.interrupts)
        };
        let from = match grown {
            Ok(Some(from)) => from,
            Ok(None) => {
                return Ok(refused(
                    name,
                    format!(
                        "changed inside the part its interrupted import read (fingerprint {old} then, \
                     {fingerprint} now; not a file that only grew); refusing to resume. Pass \
                     --restart to import it from the start (games already imported are \
                     recognized and skipped)"
                    ),
                ));
            }
            Err(e) if source::is_cancelled(&e) => {
                return Ok(Predecessor::Refused(InputEnd::Interrupted));
            }
            Err(e) => return Ok(Predecessor::Refused(InputEnd::Failed(e))),
        };
        self.adopt(name, (old_id, &old), fingerprint, size, from)
            .await
    }

    /// Adopts the interrupted import `(old_id, old)` (its id and
    /// fingerprint) of a file that grew from `from` bytes to `size`: its
    /// row takes the new fingerprint and size, unless another pgnload is
    /// still running it.
    async fn adopt(
        &self,
        name: &str,
        (old_id, old): (i64, &str),
        fingerprint: &str,
        size: Option<u64>,
        from: u64,
    ) -> Result<Predecessor, Error> {
        let client = &self.conns.control.client;
        // The old import may still be running in another pgnload (it holds
        // the old fingerprint's lock): its row is not ours to take.
        let old_key = super::lock_key(old);
        let free: bool = client
            .query_one("SELECT pg_try_advisory_lock($1)", &[&old_key])
            .await
            .map_err(db_err("locking the input's earlier import"))?
            .get(0);
        if !free {
            return Ok(refused(
                name,
                format!(
                    "grew since another pgnload began importing it (fingerprint {old}), and that \
                     import is still running; rerun once it ends"
                ),
            ));
        }
        let size_bytes = size_bytes(size);
        let adopted = client
            .execute(
                "UPDATE import_files SET fingerprint = $2, size_bytes = $3, updated_at = now()
                 WHERE id = $1",
                &[&old_id, &fingerprint, &size_bytes],
            )
            .await
            .map_err(db_err("recording the grown input"));
        let _ = client
            .execute("SELECT pg_advisory_unlock($1)", &[&old_key])
            .await;
        adopted?;
        self.run.reporter.notice(&Notice::Grown {
            input: name,
            from,
            to: size.unwrap_or(from),
        });
        Ok(Predecessor::Adopted)
    }

    /// Registers an input seen for the first time; returns its
    /// `import_files.id`.
    async fn register_input(
        &self,
        name: &str,
        path: &str,
        fingerprint: &str,
        size: Option<u64>,
        scope: &str,
    ) -> Result<i64, Error> {
        let compression = if source::is_stream(name) {
            "unknown".to_owned()
        } else {
            sniff_compression(Path::new(name)).to_string()
        };
        let size_bytes = size_bytes(size);
        Ok(self
            .conns
            .control
            .client
            .query_one(
                "INSERT INTO import_files (fingerprint, path, size_bytes, compression, state, scope)
                 VALUES ($1, $2, $3, $4, 'running', $5) RETURNING id",
                &[&fingerprint, &path, &size_bytes, &compression, &scope],
            )
            .await
            .map_err(db_err("registering the input"))?
            .get(0))
    }

    /// Marks the input running from its checkpoint (`(games_done,
    /// bytes_done)`) under `scope`; returns its counters as committed. A
    /// restart reads the input again from its first game, so its record
    /// starts again from nothing, in the same statement: the rejects
    /// recorded for it are recorded again (and only once), and its counters
    /// count the games read again (and only once), so that `games_done =
    /// imported + present + rejected + filtered` holds after any sequence
    /// of restarts and kills. It may change the scope the input is
    /// recorded with.
    async fn mark_running(
        &self,
        file_id: i64,
        path: &str,
        (games_done, bytes_done): (i64, i64),
        restart: bool,
        scope: &str,
    ) -> Result<GameCounts, Error> {
        self.conns
            .control
            .client
            .query_one(
                "WITH forgotten AS (DELETE FROM import_rejects WHERE file_id = $1 AND $5)
                 UPDATE import_files SET state = 'running', last_error = NULL, path = $2,
                     games_done = $3, bytes_done = $4, updated_at = now(), finished_at = NULL,
                     scope = $6,
                     games_imported = CASE WHEN $5 THEN 0 ELSE games_imported END,
                     games_present = CASE WHEN $5 THEN 0 ELSE games_present END,
                     games_rejected = CASE WHEN $5 THEN 0 ELSE games_rejected END,
                     games_filtered = CASE WHEN $5 THEN 0 ELSE games_filtered END
                 WHERE id = $1
                 RETURNING games_imported, games_present, games_rejected, games_filtered",
                &[&file_id, &path, &games_done, &bytes_done, &restart, &scope],
            )
            .await
            .map(|row| GameCounts::from_row(&row, 0))
            .map_err(db_err("marking the input running"))
    }

    /// Records how the input ended, and sets the run's counts for it from
    /// what the database committed.
    pub(super) async fn record_end(
        &mut self,
        file_id: i64,
        end: InputEnd,
    ) -> Result<InputEnd, Error> {
        let (state, error) = match end {
            InputEnd::Done | InputEnd::AlreadyImported | InputEnd::Busy => ("done", None),
            InputEnd::Interrupted | InputEnd::TooManyRejects => ("interrupted", None),
            // With its causes, as the final message prints it.
            InputEnd::Failed(ref e) => ("failed", Some(crate::error::report(e))),
        };
        let committed = self
            .retrying_control(async |this: &mut Self| {
                this.conns
                    .control
                    .client
                    .query_one(
                        "UPDATE import_files SET state = $2, last_error = $3, updated_at = now(),
                             finished_at = CASE WHEN $2 = 'done' THEN now() END
                         WHERE id = $1
                         RETURNING games_imported, games_present, games_rejected, games_filtered",
                        &[&file_id, &state, &error],
                    )
                    .await
                    .map(|row| GameCounts::from_row(&row, 0))
                    .map_err(db_err("recording the input's state"))
            })
            .await?;
        self.account_input(committed)?;
        Ok(end)
    }

    /// Sets the run's game counts for the current input to what the
    /// database committed for it (`committed`: its counters now), so that
    /// a batch whose commit was acknowledged and then lost to a server
    /// crash, or committed though its acknowledgement was lost, is counted
    /// exactly once.
    fn account_input(&mut self, committed: GameCounts) -> Result<(), Error> {
        let Some(attempt) = self.tally.attempt else {
            return Err(Error::bug("an input ended before its import began"));
        };
        let before = attempt.committed_before;
        let delta = |now: i64, then: i64| {
            u64::try_from(now - then).map_err(|_| {
                Error::inconsistent(format!(
                    "the counters of import_files row {} went down during the import ({then} → {now})",
                    attempt.file_id
                ))
            })
        };
        let imported = delta(committed.imported, before.imported)?;
        let present = delta(committed.present, before.present)?;
        let rejected = delta(committed.rejected, before.rejected)?;
        let filtered = delta(committed.filtered, before.filtered)?;
        let games = &mut self.tally.totals.games;
        let base = attempt.totals_before;
        games.imported = base.imported + imported;
        games.present = base.present + present;
        games.rejected = base.rejected + rejected;
        games.filtered = base.filtered + filtered;
        games.read = base.read + imported + present + rejected + filtered;
        Ok(())
    }

    /// Forgets what a lost connection may have made untrue: position ids,
    /// and what the explorer's memory learnt, from commits a server crash
    /// can have undone. In a bulk load the forgotten positions come again
    /// as new rows, so the load is marked to merge duplicates at its
    /// finish.
    async fn forget_unverified(&mut self) -> Result<(), Error> {
        self.cache = PositionCache::new(self.run.settings.cache_positions);
        self.memory.clear();
        if let BulkState::Open(load) = self.load.bulk {
            self.conns.control
                .client
                .execute(
                    "UPDATE import_bulk_loads SET needs_dedup = true, updated_at = now() WHERE id = $1",
                    &[&load],
                )
                .await
                .map_err(db_err("marking the bulk load for a duplicate merge"))?;
        }
        Ok(())
    }
}

/// The error of a rerun whose scope differs from the one the input was
/// imported (or began importing) under: continuing would leave the input
/// "done" with games neither scope chose, or skip it as done though games
/// the new scope wants were left out.
fn scope_changed(name: &str, recorded: &str, wanted: &str) -> Error {
    let shown = |scope: &str| {
        if scope.is_empty() {
            "every game".to_owned()
        } else {
            scope.to_owned()
        }
    };
    Error::Input {
        file: name.to_owned(),
        message: format!(
            "imported under the scope [{}], and this run asks for [{}]; refusing to mix them. \
             Pass --restart to read it again under the new scope (games already imported are \
             recognized and skipped)",
            shown(recorded),
            shown(wanted)
        ),
    }
}
