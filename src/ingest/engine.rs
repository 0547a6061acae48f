//! The import engine: files in, rows out, resumable.
//!
//! It exists apart from `cmd::import` so that anything (the command today,
//! other front ends later) can import without clap: it takes settings, an
//! [`ImportJob`] and an interrupt counter, and hands back an
//! [`ExitStatus`]; what it has to say (progress, retries, resumes, skipped
//! inputs, the summary) goes to the front end's [`Reporter`]. It must not
//! parse arguments nor print.
//!
//! Inputs are imported one at a time. For each: identify it by fingerprint,
//! take an advisory lock on it (two cron runs never import one file at
//! once), resume from its checkpoint, then stream batches through the parse
//! pipeline into the writer's two phases: [`crate::ingest::writer::resolve_positions`]
//! of batch N+1 on one connection while [`crate::ingest::writer::write_games`] of
//! batch N (with its checkpoint) runs on another.
//! A lost connection is retried with backoff for a bounded time; a bad game
//! is a reject, never an error; an interrupt finishes the batch in flight
//! and ends the run as interrupted (exit code 3).

use std::{
    fs::{File, OpenOptions},
    io::Write,
    path::Path,
    sync::{
        Arc,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    time::Instant,
};

use crate::{
    config::Settings,
    error::{Error, ExitStatus},
    ingest::report::{BulkOutcome, Notice, Reporter, Summary, Totals},
    ingest::{
        bulk::{self, BulkLoad, Chosen, FinishReport},
        dedup::PositionCache,
        pipeline::{Batch, Event, InputSpec, Outcome, Pipeline},
        retry::{Retry, reconnect, retry_on},
        source::{self, Compression, fingerprint},
        writer::{
            BatchStats, Conflict, FileContext, PendingIds, ResolvedBatch, WriteMode, WrittenBatch,
            prepare_connection, resolve_positions, to_i64, write_games,
        },
    },
    progress::Snapshot,
    store::db::{self, Database, Target, db_err},
};

/// What an import needs beyond the settings: the command line's inputs
/// and how to treat them.
#[derive(Debug, Clone, Copy)]
pub struct ImportJob<'a> {
    /// PGN files, or `-` for stdin, imported in this order.
    pub inputs: &'a [String],
    /// Also append rejected games, verbatim, to this file.
    pub rejects: Option<&'a Path>,
    /// Import inputs again from their start (see `--restart`).
    pub restart: bool,
    /// Skip a busy input or database instead of waiting (see `--no-wait`).
    pub no_wait: bool,
}

/// How one input ended.
enum InputEnd {
    Done,
    AlreadyImported,
    Busy,
    Interrupted,
    TooManyRejects,
    Failed(Error),
}

/// Everything an input's import needs, grouped by idea.
struct Importer<'a> {
    /// What the run was given, and its identity.
    run: RunContext<'a>,
    /// The run's three database sessions.
    conns: Connections,
    /// The load mode and where its bulk load stands.
    load: Load,
    /// Position ids known to be committed, so that a batch's positions are
    /// resolved without the database where possible.
    cache: PositionCache,
    /// Set when an attempt at an input failed: a connection may have been
    /// replaced, and a server crash may have lost commits the importer
    /// saw succeed, so the position map and the checkpoint are re-read
    /// from the database before anything is written again.
    stale: bool,
    /// The run's counts.
    tally: Tally,
}

/// What a run was given and what identifies it; fixed for the run.
struct RunContext<'a> {
    settings: &'a Settings,
    job: &'a ImportJob<'a>,
    target: Target,
    /// `import_runs.id`.
    id: i64,
    interrupts: Arc<AtomicUsize>,
    reporter: &'a dyn Reporter,
    /// `--rejects`, opened for appending.
    rejects_file: Option<File>,
    started: Instant,
}

/// The run's database sessions: two data connections, so that PostgreSQL
/// works on both phases of the write at once, and one for bookkeeping and
/// the locks, which live as long as its session.
struct Connections {
    /// Writes games, moves and checkpoints (and finishes a bulk load).
    db: Database,
    /// Resolves positions, one batch ahead of `db`.
    positions_db: Database,
    /// Runs, inputs, checkpoints' states and the advisory locks.
    control: Database,
}

impl Connections {
    /// Closes the three sessions, reporting the first failure.
    fn close(self) -> Result<(), Error> {
        self.db.close()?;
        self.positions_db.close()?;
        self.control.close()
    }
}

/// The run's load mode.
struct Load {
    /// The mode and lock this run holds (taken again after the control
    /// connection was replaced).
    chosen: Chosen,
    /// How batches are written (a bulk load's id sequences, or none).
    write_mode: WriteMode,
    bulk: BulkState,
}

impl Load {
    /// The load of a run that chose `chosen` and found the unfinished bulk
    /// load `resumed`, if any.
    fn new(chosen: Chosen, resumed: Option<BulkLoad>, reporter: &dyn Reporter) -> Load {
        match (chosen, resumed) {
            // An unfinished load is continued (its tables have no indexes
            // until it finishes, whatever this run imports); a new one
            // begins with the first input that has games to read.
            (Chosen::Bulk { .. }, Some(BulkLoad { id, mode })) => {
                reporter.notice(&Notice::ContinuingBulkLoad);
                Load {
                    chosen,
                    write_mode: mode,
                    bulk: BulkState::Open(id),
                }
            }
            (Chosen::Bulk { .. }, None) => Load {
                chosen,
                write_mode: WriteMode::Incremental,
                bulk: BulkState::Pending,
            },
            (Chosen::Incremental, _) => Load {
                chosen,
                write_mode: WriteMode::Incremental,
                bulk: BulkState::None,
            },
        }
    }
}

/// Where the run's bulk load stands.
#[derive(Debug, Clone, Copy)]
enum BulkState {
    /// Incremental mode: no bulk load.
    None,
    /// Bulk mode was chosen but no load begun yet: it begins (dropping the
    /// indexes) with the first input that has games to read, so that a run
    /// whose inputs were all imported already leaves the indexes alone.
    Pending,
    /// Bulk load `import_bulk_loads.id` is open: begun or continued.
    Open(i64),
    /// Bulk load `import_bulk_loads.id` was finished by this run.
    Finished(i64, FinishReport),
}

impl BulkState {
    /// What the summary says of it.
    fn outcome(self) -> BulkOutcome {
        match self {
            BulkState::None => BulkOutcome::Incremental,
            BulkState::Pending => BulkOutcome::NothingToLoad,
            BulkState::Open(load) => BulkOutcome::Unfinished { load },
            BulkState::Finished(load, report) => BulkOutcome::Finished { load, report },
        }
    }
}

/// The run's counts, and the input whose counts are being taken.
struct Tally {
    totals: Totals,
    /// The input being imported, across the attempts a lost connection
    /// forces: what the database and the totals held when it began.
    attempt: Option<InputAttempt>,
}

/// The start of an input's import, kept across retried attempts so that
/// its counts come from what the database committed, however many
/// attempts it took.
#[derive(Debug, Clone, Copy)]
struct InputAttempt {
    /// `import_files.id`.
    file_id: i64,
    /// The input's counters in `import_files` when the first attempt began.
    committed_before: GameCounts,
    /// The run's totals when the first attempt began.
    totals_before: BatchStats,
}

/// Where an input's import starts, as its `import_files` row says.
#[derive(Debug, Clone, Copy)]
struct Checkpoint {
    /// `import_files.id`.
    file_id: i64,
    /// Decompressed bytes already imported (the checkpoint the next
    /// batch's commit must find).
    bytes_done: i64,
    /// The same, as the pipeline skips it.
    skip_bytes: u64,
    /// Games already read.
    skip_games: u64,
}

/// An input's game counters, as `import_files` holds them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct GameCounts {
    imported: i64,
    present: i64,
    rejected: i64,
}

impl GameCounts {
    /// The counters from a row of `(games_imported, games_present, games_rejected)`
    /// starting at column `first`.
    fn from_row(row: &tokio_postgres::Row, first: usize) -> GameCounts {
        GameCounts {
            imported: row.get(first),
            present: row.get(first + 1),
            rejected: row.get(first + 2),
        }
    }
}

/// Runs an import: `job.inputs` one at a time into the database of
/// `settings`, stopping at the next batch boundary once `interrupts` is
/// non-zero. `reporter` is told what happens, and given the summary before
/// the connections close; the status says how the run ended.
pub async fn import(
    settings: &Settings,
    job: &ImportJob<'_>,
    interrupts: Arc<AtomicUsize>,
    reporter: &dyn Reporter,
) -> Result<ExitStatus, Error> {
    let target = settings.target();
    let rejects_file = match job.rejects {
        Some(path) => Some(
            OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|source| Error::Open {
                    path: path.to_path_buf(),
                    source,
                })?,
        ),
        None => None,
    };
    let Start {
        conns,
        run_id,
        chosen,
        resumed,
    } = start_retrying(&target, settings, job, reporter).await?;
    if let Target::Url(_) = &target {
        for advice in crate::store::tuning::advice(&conns.control.client).await? {
            reporter.notice(&Notice::Advice(&advice));
        }
    }
    let Some(chosen) = chosen else {
        reporter.notice(&Notice::DatabaseBusy);
        conns
            .control
            .client
            .execute(
                "UPDATE import_runs SET finished_at = now(), status = 'skipped' WHERE id = $1",
                &[&run_id],
            )
            .await
            .map_err(db_err("recording the run"))?;
        conns.close()?;
        return Ok(ExitStatus::Clean);
    };
    let load = Load::new(chosen, resumed, reporter);
    let mut importer = Importer {
        run: RunContext {
            settings,
            job,
            target,
            id: run_id,
            interrupts,
            reporter,
            rejects_file,
            started: Instant::now(),
        },
        conns,
        load,
        cache: PositionCache::new(settings.cache_positions),
        stale: false,
        tally: Tally {
            totals: Totals::default(),
            attempt: None,
        },
    };
    let status = importer.run_all().await;
    reporter.inputs_ended();
    let status = importer.end_run(status).await;
    reporter.summary(&importer.summary());
    importer.conns.close()?;
    status
}

/// [`start`], retried as a whole after a transient failure.
async fn start_retrying(
    target: &Target,
    settings: &Settings,
    job: &ImportJob<'_>,
    reporter: &dyn Reporter,
) -> Result<Start, Error> {
    let mut retry = Retry::new(settings.retry_seconds);
    loop {
        match start(target, settings, job, reporter).await {
            Ok(start) => return Ok(start),
            Err(error) => {
                if !retry.wait(&error, false, reporter).await {
                    return Err(error);
                }
            }
        }
    }
}

fn hostname() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
}

/// Advisory lock key of an input fingerprint.
pub fn lock_key(fingerprint: &str) -> i64 {
    crate::chess::hash::to_signed(xxhash_rust::xxh64::xxh64(
        fingerprint.as_bytes(),
        0x7067_6e6c,
    ))
}

/// The connections and decisions a run starts with.
struct Start {
    conns: Connections,
    run_id: i64,
    /// `None`: skipped, because the lock is taken and `--no-wait` was given.
    chosen: Option<Chosen>,
    /// The unfinished bulk load this run continues, if any.
    resumed: Option<BulkLoad>,
}

/// Opens a run: connections, migrations, the mode and its lock, the
/// unfinished bulk load if one is continued, and the run's record (last, so
/// that a failed attempt leaves no record behind). The caller retries it
/// as a whole after a transient failure (a server starting up or
/// restarting, `too_many_connections`, a terminated session): a 3 a.m.
/// cron job that starts while the server restarts waits for it.
async fn start(
    target: &Target,
    settings: &Settings,
    job: &ImportJob<'_>,
    reporter: &dyn Reporter,
) -> Result<Start, Error> {
    let mut db = db::connect(target).await?;
    db::migrate(&mut db.client).await?;
    prepare_connection(&db.client).await?;
    let positions_db = db::connect(target).await?;
    prepare_connection(&positions_db.client).await?;
    let control = db::connect(target).await?;
    let incoming = estimated_positions(job.inputs);
    let chosen = bulk::choose(
        &control.client,
        settings.mode,
        incoming,
        job.no_wait,
        reporter,
    )
    .await?;
    let resumed = match chosen {
        Some(Chosen::Bulk { resuming: true }) => Some(bulk::begin(&mut db.client).await?),
        _ => None,
    };
    let run_id: i64 = control
        .client
        .query_one(
            "INSERT INTO import_runs (pgnload_version, host, pid) VALUES ($1, $2, $3) RETURNING id",
            &[
                &env!("CARGO_PKG_VERSION"),
                &hostname(),
                &i32::try_from(std::process::id()).ok(),
            ],
        )
        .await
        .map_err(db_err("registering the run"))?
        .get(0);
    Ok(Start {
        conns: Connections {
            db,
            positions_db,
            control,
        },
        run_id,
        chosen,
        resumed,
    })
}

impl Importer<'_> {
    /// Runs a bookkeeping statement on the control connection, reconnecting
    /// and retrying if the connection dropped.
    async fn control_execute(
        &mut self,
        what: &str,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<u64, Error> {
        self.retrying_control(async |this: &mut Self| {
            this.conns
                .control
                .client
                .execute(sql, params)
                .await
                .map_err(db_err(what))
        })
        .await
    }

    /// Runs `op`, which works on the control connection, until it
    /// succeeds: like [`retry_on`], but a replaced control connection also
    /// re-takes the import lock that went with the old session. `op` gets
    /// the whole importer because bookkeeping steps use its state.
    async fn retrying_control<T>(
        &mut self,
        mut op: impl AsyncFnMut(&mut Self) -> Result<T, Error>,
    ) -> Result<T, Error> {
        let mut retry = Retry::new(self.run.settings.retry_seconds);
        loop {
            let error = match op(self).await {
                Ok(value) => return Ok(value),
                Err(error) => error,
            };
            let closed = [
                &self.conns.control,
                &self.conns.db,
                &self.conns.positions_db,
            ]
            .iter()
            .any(|db| db.client.is_closed());
            if !retry.wait(&error, closed, self.run.reporter).await {
                return Err(error);
            }
            for data in [&mut self.conns.db, &mut self.conns.positions_db] {
                if data.client.is_closed() {
                    reconnect(data, &self.run.target, true, self.run.reporter).await;
                }
            }
            if self.conns.control.client.is_closed() {
                reconnect(
                    &mut self.conns.control,
                    &self.run.target,
                    false,
                    self.run.reporter,
                )
                .await;
                self.relock().await?;
            }
        }
    }

    /// The import lock went with the old control session: take it again,
    /// without waiting (someone taking it meanwhile is not safe to join).
    async fn relock(&mut self) -> Result<(), Error> {
        if self.conns.control.client.is_closed() {
            return Ok(());
        }
        if self.load.chosen.relock(&self.conns.control.client).await? {
            Ok(())
        } else {
            Err(Error::Conflict(
                "lost the import lock with the database connection, and another import took it"
                    .into(),
            ))
        }
    }

    /// Finishes the bulk load, retrying (on a new connection if needed)
    /// after transient failures: every step is idempotent.
    async fn finish_bulk(&mut self, load: i64) -> Result<Option<FinishReport>, Error> {
        let evicted = self.cache.evicted() > 0;
        let (target, interrupts, reporter) =
            (&self.run.target, &self.run.interrupts, self.run.reporter);
        retry_on(
            &mut self.conns.db,
            target,
            self.run.settings.retry_seconds,
            true,
            reporter,
            async |client| bulk::finish(target, client, load, evicted, interrupts, reporter).await,
        )
        .await
    }

    /// [`Self::import_input`], started again after a transient failure or
    /// a lost connection (its steps are idempotent: the input's checkpoint
    /// in the database says where to resume, and a failed attempt marks
    /// the importer's own state stale so that it is re-read first).
    async fn import_input_retrying(&mut self, index: usize, name: &str) -> Result<InputEnd, Error> {
        self.tally.attempt = None;
        self.retrying_control(async |this: &mut Self| {
            let end = this.import_input(index, name).await;
            if end.is_err() {
                this.stale = true;
            }
            end
        })
        .await
    }

    /// Forgets what a lost connection may have made untrue: position ids
    /// learnt from commits a server crash can have undone. In a bulk load
    /// the forgotten positions come again as new rows, so the load is
    /// marked to merge duplicates at its finish.
    async fn forget_unverified(&mut self) -> Result<(), Error> {
        self.cache = PositionCache::new(self.run.settings.cache_positions);
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

    /// Ends the run after its inputs: finishes the bulk load unless the
    /// run was interrupted (the user asked to stop now, and a rerun
    /// finishes it; stopped for too many rejects, the load is finished so
    /// that the database is not left without indexes while the rejects are
    /// fixed), then records how the run ended.
    async fn end_run(
        &mut self,
        mut status: Result<ExitStatus, Error>,
    ) -> Result<ExitStatus, Error> {
        if let (
            Ok(
                ExitStatus::Clean
                | ExitStatus::CompletedWithRejects
                | ExitStatus::Failed
                | ExitStatus::TooManyRejects,
            ),
            BulkState::Open(load),
        ) = (&status, self.load.bulk)
        {
            match self.finish_bulk(load).await {
                Ok(Some(report)) => self.load.bulk = BulkState::Finished(load, report),
                Ok(None) => status = Ok(ExitStatus::Interrupted),
                Err(error) => status = Err(error),
            }
        }
        if let Ok(code) = status {
            self.record_run(code).await?;
        }
        status
    }

    /// Imports the inputs in order; the status says how the run ended.
    async fn run_all(&mut self) -> Result<ExitStatus, Error> {
        let inputs = self.run.job.inputs;
        let mut status = ExitStatus::Clean;
        for (index, name) in inputs.iter().enumerate() {
            // A signal between two inputs: the rest are not started, and
            // the run ends as interrupted (exit 3), not clean.
            if self.interrupted() {
                status = ExitStatus::Interrupted;
                break;
            }
            match self.import_input_retrying(index, name).await? {
                InputEnd::Done => self.tally.totals.files_done += 1,
                InputEnd::AlreadyImported => {
                    self.tally.totals.files_skipped += 1;
                    self.run.reporter.notice(&Notice::AlreadyImported(name));
                }
                InputEnd::Busy => {
                    self.tally.totals.files_skipped += 1;
                    self.run.reporter.notice(&Notice::InputBusy(name));
                }
                InputEnd::Interrupted => {
                    self.tally.totals.files_interrupted += 1;
                    status = ExitStatus::Interrupted;
                    break;
                }
                InputEnd::TooManyRejects => {
                    self.tally.totals.files_interrupted += 1;
                    self.run
                        .reporter
                        .notice(&Notice::TooManyRejects(self.run.settings.max_rejects));
                    status = ExitStatus::TooManyRejects;
                    break;
                }
                InputEnd::Failed(error) => {
                    self.tally.totals.files_failed += 1;
                    self.run.reporter.notice(&Notice::InputFailed {
                        input: name,
                        error: &error,
                    });
                }
            }
        }
        if status == ExitStatus::Clean {
            if self.tally.totals.files_failed > 0 {
                status = ExitStatus::Failed;
            } else if self.tally.totals.games.rejected > 0 || self.tally.totals.games.conflicts > 0
            {
                status = ExitStatus::CompletedWithRejects;
            }
        }
        Ok(status)
    }

    /// Records how the run ended in `import_runs`.
    async fn record_run(&mut self, status: ExitStatus) -> Result<(), Error> {
        let t = self.tally.totals.games;
        let (run_id, label) = (self.run.id, format!("{status:?}").to_lowercase());
        // The totals add up counters PostgreSQL holds as bigints, so they
        // fit unless a bug inflated them: an error then, not a clamp.
        let bigint = |n: u64| {
            i64::try_from(n).map_err(|_| {
                Error::Internal(format!(
                    "run {run_id}: a game count of {n} is past PostgreSQL's bigint"
                ))
            })
        };
        let counts = [
            bigint(t.read)?,
            bigint(t.imported)?,
            bigint(t.present)?,
            bigint(t.rejected)?,
        ];
        self.control_execute(
            "recording the run",
            "UPDATE import_runs SET finished_at = now(), status = $2, games_read = $3,
                 games_imported = $4, games_present = $5, games_rejected = $6
             WHERE id = $1",
            &[
                &run_id, &label, &counts[0], &counts[1], &counts[2], &counts[3],
            ],
        )
        .await?;
        Ok(())
    }

    fn interrupted(&self) -> bool {
        self.run.interrupts.load(Ordering::SeqCst) > 0
    }

    /// Imports one input. `Err` only for failures that stop the whole run
    /// (the bookkeeping connection is gone); input-level failures are
    /// [`InputEnd::Failed`].
    async fn import_input(&mut self, index: usize, name: &str) -> Result<InputEnd, Error> {
        // A stream (stdin, a pipe, a FIFO) is read once: an identity of
        // this run only, never resumed.
        let (print_name, fingerprint, size) = if source::is_stream(name) {
            (
                name.to_owned(),
                format!("stream:{}:{index}", self.run.id),
                None,
            )
        } else {
            let path = Path::new(name);
            let absolute = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
            match fingerprint(path, &self.run.interrupts) {
                Ok((fp, size)) => (absolute.display().to_string(), fp, Some(size)),
                Err(e) if source::is_cancelled(&e) => return Ok(InputEnd::Interrupted),
                Err(e) => return Ok(InputEnd::Failed(e)),
            }
        };
        let key = lock_key(&fingerprint);
        let locked: bool = self
            .conns
            .control
            .client
            .query_one("SELECT pg_try_advisory_lock($1)", &[&key])
            .await
            .map_err(db_err("locking the input"))?
            .get(0);
        if !locked {
            if self.run.job.no_wait {
                return Ok(InputEnd::Busy);
            }
            self.run.reporter.notice(&Notice::WaitingForInput(name));
            self.conns
                .control
                .client
                .execute("SELECT pg_advisory_lock($1)", &[&key])
                .await
                .map_err(db_err("waiting for the input's lock"))?;
        }
        let end = self
            .import_locked(name, &print_name, &fingerprint, size)
            .await;
        // A replaced control connection released the lock with the old session.
        if !self.conns.control.client.is_closed() {
            let _ = self
                .conns
                .control
                .client
                .execute("SELECT pg_advisory_unlock($1)", &[&key])
                .await;
        }
        end
    }

    /// Imports an input whose lock is held: its checkpoint, its batches,
    /// and how it ended.
    async fn import_locked(
        &mut self,
        name: &str,
        path: &str,
        fingerprint: &str,
        size: Option<u64>,
    ) -> Result<InputEnd, Error> {
        let checkpoint = match self.open_checkpoint(name, path, fingerprint, size).await? {
            Ok(checkpoint) => checkpoint,
            Err(end) => return Ok(end),
        };
        let file_id = checkpoint.file_id;
        // A lost connection: the caller re-reads its state and retries.
        let end = self.stream_batches(name, checkpoint).await?;
        self.record_end(file_id, end).await
    }

    /// Reads (or registers) the input's checkpoint and marks it running:
    /// where to resume, or how the input ends without reading it (already
    /// imported, changed since an interrupted import, an impossible
    /// checkpoint). Forgets first what a lost connection made stale.
    async fn open_checkpoint(
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
        let row = self
            .conns
            .control
            .client
            .query_opt(
                "SELECT id, state, games_done, bytes_done, games_imported, games_present, games_rejected
                 FROM import_files WHERE fingerprint = $1",
                &[&fingerprint],
            )
            .await
            .map_err(db_err("reading the input's checkpoint"))?;
        let (file_id, games_done, bytes_done) = match row {
            Some(row) => {
                let state: String = row.get(1);
                if state == "done" && !restart {
                    if retrying {
                        // The attempt that lost its connection had finished.
                        self.account_input(GameCounts::from_row(&row, 4))?;
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
                (row.get::<_, i64>(0), games, bytes)
            }
            None => {
                if !source::is_stream(name)
                    && let Some(end) = self.refuse_changed(name, path, fingerprint).await?
                {
                    return Ok(Err(end));
                }
                (
                    self.register_input(name, path, fingerprint, size).await?,
                    0,
                    0,
                )
            }
        };
        let (skip_bytes, skip_games) = match (u64::try_from(bytes_done), u64::try_from(games_done))
        {
            (Ok(bytes), Ok(games)) => (bytes, games),
            _ => {
                return Ok(Err(InputEnd::Failed(Error::Internal(format!(
                    "import_files row {file_id} holds a negative checkpoint \
                     ({games_done} games, byte {bytes_done}); refusing to guess where to resume"
                )))));
            }
        };
        let committed = self
            .mark_running(file_id, path, games_done, bytes_done, restart)
            .await?;
        if !retrying {
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

    /// A file not seen before at `path` whose import there was interrupted
    /// under another fingerprint has changed since: refused (resuming would
    /// mix two files), or with `--restart` the old checkpoint is retired.
    async fn refuse_changed(
        &self,
        name: &str,
        path: &str,
        fingerprint: &str,
    ) -> Result<Option<InputEnd>, Error> {
        let client = &self.conns.control.client;
        let Some(old) = client
            .query_opt(
                "SELECT fingerprint FROM import_files
                 WHERE path = $1 AND fingerprint <> $2 AND state <> 'done'
                 ORDER BY updated_at DESC LIMIT 1",
                &[&path, &fingerprint],
            )
            .await
            .map_err(db_err("checking for a changed input"))?
        else {
            return Ok(None);
        };
        let old: String = old.get(0);
        if !self.run.job.restart {
            return Ok(Some(InputEnd::Failed(Error::Input {
                file: name.to_owned(),
                message: format!(
                    "changed since its interrupted import (fingerprint {old} then, {fingerprint} now); \
                     refusing to resume. Pass --restart to import it from the start \
                     (games already imported are recognized and skipped)"
                ),
            })));
        }
        client
            .execute(
                "UPDATE import_files SET state = 'failed', last_error = 'superseded: the file changed', updated_at = now()
                 WHERE path = $1 AND fingerprint = $2",
                &[&path, &old],
            )
            .await
            .map_err(db_err("retiring the old checkpoint"))?;
        Ok(None)
    }

    /// Registers an input seen for the first time; returns its
    /// `import_files.id`.
    async fn register_input(
        &self,
        name: &str,
        path: &str,
        fingerprint: &str,
        size: Option<u64>,
    ) -> Result<i64, Error> {
        let compression = if source::is_stream(name) {
            "unknown".to_owned()
        } else {
            sniff_compression(Path::new(name)).to_string()
        };
        let size_bytes = size.map(|size| {
            i64::try_from(size)
                .expect("a file size comes from st_size, a non-negative 64-bit off_t")
        });
        Ok(self
            .conns
            .control
            .client
            .query_one(
                "INSERT INTO import_files (fingerprint, path, size_bytes, compression, state)
                 VALUES ($1, $2, $3, $4, 'running') RETURNING id",
                &[&fingerprint, &path, &size_bytes, &compression],
            )
            .await
            .map_err(db_err("registering the input"))?
            .get(0))
    }

    /// Marks the input running from its checkpoint; returns its counters
    /// as committed. A restart reads the input again from its first game,
    /// so the rejects recorded for it are recorded again (and only once).
    async fn mark_running(
        &self,
        file_id: i64,
        path: &str,
        games_done: i64,
        bytes_done: i64,
        restart: bool,
    ) -> Result<GameCounts, Error> {
        self.conns
            .control
            .client
            .query_one(
                "WITH forgotten AS (DELETE FROM import_rejects WHERE file_id = $1 AND $5)
                 UPDATE import_files SET state = 'running', last_error = NULL, path = $2,
                     games_done = $3, bytes_done = $4, updated_at = now(), finished_at = NULL
                 WHERE id = $1
                 RETURNING games_imported, games_present, games_rejected",
                &[&file_id, &path, &games_done, &bytes_done, &restart],
            )
            .await
            .map(|row| GameCounts::from_row(&row, 0))
            .map_err(db_err("marking the input running"))
    }

    /// Streams the input from its checkpoint through the parse pipeline
    /// and the two write phases. `Err` when a data connection was lost
    /// (the caller re-reads its state and retries).
    async fn stream_batches(
        &mut self,
        name: &str,
        checkpoint: Checkpoint,
    ) -> Result<InputEnd, Error> {
        let source =
            (self.run.settings.source.clone()).unwrap_or_else(|| DEFAULT_SOURCE.to_owned());
        let mut file = FileContext {
            file_id: checkpoint.file_id,
            source,
            expected_bytes_done: checkpoint.bytes_done,
        };
        let spec = InputSpec {
            name: name.to_owned(),
            skip_bytes: checkpoint.skip_bytes,
            skip_games: checkpoint.skip_games,
        };
        if let BulkState::Pending = self.load.bulk {
            let BulkLoad { id, mode } = bulk::begin(&mut self.conns.db.client).await?;
            self.load.write_mode = mode;
            self.load.bulk = BulkState::Open(id);
        }
        let pipeline = Pipeline::start_interruptible(
            vec![spec],
            self.run.settings.pipeline,
            Arc::clone(&self.run.interrupts),
        );
        let mut consumed = None;
        // Batches move through two phases (see `Self::step`): `ready` has
        // its positions committed and waits for its games to be written.
        let mut ready: Option<(Batch, ResolvedBatch)> = None;
        let mut upstream_end = None;
        let end = loop {
            let next = match upstream_end {
                Some(_) => None,
                None => match self.next_batch(&pipeline, name, &mut consumed) {
                    Ok(batch) => Some(batch),
                    Err(end) => {
                        upstream_end = Some(end);
                        None
                    }
                },
            };
            if next.is_none() && ready.is_none() {
                break Ok(upstream_end.unwrap_or(InputEnd::Done));
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
                if let Some(end) = self.after_batch(&batch, consumed.as_deref()) {
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
                    return Err(InputEnd::Failed(Error::Internal(
                        "the parse pipeline stopped before the end of the input".into(),
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
        let max = self.run.settings.max_rejects;
        if max > 0 && games.rejected > max {
            Some(InputEnd::TooManyRejects)
        } else if self.interrupted() {
            Some(InputEnd::Interrupted)
        } else {
            None
        }
    }

    /// Records how the input ended, and sets the run's counts for it from
    /// what the database committed.
    async fn record_end(&mut self, file_id: i64, end: InputEnd) -> Result<InputEnd, Error> {
        let (state, error) = match end {
            InputEnd::Done => ("done", None),
            InputEnd::Interrupted | InputEnd::TooManyRejects => ("interrupted", None),
            InputEnd::Failed(ref e) => ("failed", Some(e.to_string())),
            InputEnd::AlreadyImported | InputEnd::Busy => ("done", None),
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
                         RETURNING games_imported, games_present, games_rejected",
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

    /// How an input ends after a failed write: a dropped data connection
    /// (server crash or restart, terminated backend) is an `Err`, after
    /// which nothing the importer derived from earlier commits is trusted
    /// and the input starts again from the checkpoint the database holds;
    /// anything else fails the input.
    fn lost_or_failed(&self, error: Error) -> Result<InputEnd, Error> {
        if self.conns.db.client.is_closed() || self.conns.positions_db.client.is_closed() {
            Err(error)
        } else {
            Ok(InputEnd::Failed(error))
        }
    }

    /// Sets the run's game counts for the current input to what the
    /// database committed for it (`committed`: its counters now), so that
    /// a batch whose commit was acknowledged and then lost to a server
    /// crash, or committed though its acknowledgement was lost, is counted
    /// exactly once.
    fn account_input(&mut self, committed: GameCounts) -> Result<(), Error> {
        let Some(attempt) = self.tally.attempt else {
            return Err(Error::Internal(
                "an input ended before its import began".into(),
            ));
        };
        let before = attempt.committed_before;
        let delta = |now: i64, then: i64| {
            u64::try_from(now - then).map_err(|_| {
                Error::Internal(format!(
                    "the counters of import_files row {} went down during the import ({then} → {now})",
                    attempt.file_id
                ))
            })
        };
        let imported = delta(committed.imported, before.imported)?;
        let present = delta(committed.present, before.present)?;
        let rejected = delta(committed.rejected, before.rejected)?;
        let games = &mut self.tally.totals.games;
        let base = attempt.totals_before;
        games.imported = base.imported + imported;
        games.present = base.present + present;
        games.rejected = base.rejected + rejected;
        games.read = base.read + imported + present + rejected;
        Ok(())
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
        let retry_seconds = self.run.settings.retry_seconds;
        let (target, reporter) = (&self.run.target, self.run.reporter);
        let (mut position_seq, mut game_seq) = self.load.write_mode.sequences();
        let cache = &mut self.cache;
        let positions_db = &mut self.conns.positions_db;
        let db = &mut self.conns.db;
        let resolve = async {
            let batch = next?;
            Some(
                retry_on(
                    positions_db,
                    target,
                    retry_seconds,
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
                retry_on(db, target, retry_seconds, false, reporter, async |client| {
                    write_games(client, batch, file, resolved, game_seq.as_deref_mut()).await
                })
                .await,
            )
        };
        tokio::join!(resolve, write)
    }

    /// Accounts for a batch whose games committed.
    fn after_commit(&mut self, batch: &Batch, written: WrittenBatch) -> Result<(), Error> {
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

    /// What the run did, for the summary.
    fn summary(&self) -> Summary {
        Summary {
            target: self.run.target.describe(),
            totals: self.tally.totals,
            elapsed: self.run.started.elapsed(),
            bulk: self.load.bulk.outcome(),
        }
    }
}

/// `games.source` of games without a Lichess id when `--source` is not
/// given: one label for every file, so that a player named alike in two
/// files is one player (games are recognized by content whatever their
/// label).
pub const DEFAULT_SOURCE: &str = "pgn";

/// Uncompressed PGN bytes per new position, roughly, for a Lichess month
/// (games of ~1.5 kB with clocks, ~35 positions each not seen before).
const BYTES_PER_NEW_POSITION: u64 = 40;
/// How much a compressed dump grows when decompressed, roughly.
const COMPRESSION_RATIO: u64 = 5;

/// How many new positions the inputs may bring: the scale `--mode auto`
/// compares with the database's positions (stdin counts as nothing).
fn estimated_positions(inputs: &[String]) -> u64 {
    inputs
        .iter()
        .filter(|name| name.as_str() != "-")
        .map(|name| {
            let path = Path::new(name);
            let size = std::fs::metadata(path).map_or(0, |m| m.len());
            let plain = if sniff_compression(path) == Compression::None {
                size
            } else {
                size.saturating_mul(COMPRESSION_RATIO)
            };
            plain / BYTES_PER_NEW_POSITION
        })
        .sum()
}

fn sniff_compression(path: &Path) -> Compression {
    source::sniff_file(path).unwrap_or(Compression::None)
}
