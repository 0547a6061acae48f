//! `pgnload import`: files in, rows out, resumable.
//!
//! Inputs are imported one at a time. For each: identify it by fingerprint,
//! take an advisory lock on it (two cron runs never import one file at
//! once), resume from its checkpoint, then stream batches through the parse
//! pipeline into the writer's two phases: [`crate::writer::resolve_positions`]
//! of batch N+1 on one connection while [`crate::writer::write_games`] of
//! batch N (with its checkpoint) runs on another.
//! A lost connection is retried with backoff for a bounded time; a bad game
//! is a reject, never an error; Ctrl-C/SIGTERM finishes the batch in flight
//! and exits with code 3 (a second one exits at once — the open transaction
//! rolls back).

use std::{
    fs::{File, OpenOptions},
    io::Write,
    num::NonZeroUsize,
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use crate::{
    bulk::{self, BulkLoad, Chosen, FinishReport, Mode},
    cmd::ExitStatus,
    config::{Overrides, Settings},
    db::{self, Database, Target, db_err},
    dedup::PositionCache,
    error::Error,
    pipeline::{Batch, Event, InputSpec, Outcome, Pipeline},
    progress::{Progress, Snapshot},
    source::{Compression, fingerprint},
    writer::{
        BatchStats, FileContext, PendingIds, ResolvedBatch, WriteMode, prepare_connection,
        resolve_positions, write_games,
    },
};

/// Options of `pgnload import`.
#[derive(Debug, Clone, clap::Args)]
pub struct ImportArgs {
    /// PGN files (plain, .zst, .bz2, .gz, detected from their first bytes) or
    /// `-` for stdin.
    #[arg(required = true)]
    pub inputs: Vec<String>,
    /// Source label for games without a Lichess id [default: the file stem].
    #[arg(long, env = "PGNLOAD_SOURCE")]
    pub source: Option<String>,
    /// Positions kept in the in-memory dedup cache.
    #[arg(long, env = "PGNLOAD_CACHE_POSITIONS")]
    pub cache_positions: Option<usize>,
    /// Games per batch (one transaction and one checkpoint each).
    #[arg(long, env = "PGNLOAD_BATCH_GAMES")]
    pub batch_games: Option<NonZeroUsize>,
    /// Stop cleanly (exit code 4) once more games than this were rejected.
    #[arg(long, env = "PGNLOAD_MAX_REJECTS")]
    pub max_rejects: Option<u64>,
    /// Also append rejected games, verbatim, to this PGN file (each preceded
    /// by a `%` comment line with its origin and reason), to fix and re-import.
    #[arg(long)]
    pub rejects: Option<PathBuf>,
    /// Import inputs again from their start: changed files whose earlier
    /// import was interrupted, and files already imported. Games already in
    /// the database are recognized and skipped.
    #[arg(long)]
    pub restart: bool,
    /// Skip an input another pgnload is importing right now instead of
    /// waiting for it (and skip the run if a bulk load holds the database).
    #[arg(long)]
    pub no_wait: bool,
    /// bulk: drop indexes, dedup in memory, rebuild at the end (backfills);
    /// incremental: keep indexes (nightly imports, concurrent importers);
    /// auto: bulk when the database holds fewer positions than the inputs
    /// should bring and no other import runs [default: auto].
    #[arg(long, value_enum, env = "PGNLOAD_MODE")]
    pub mode: Option<Mode>,
}

impl ImportArgs {
    /// Adds this command's flags to the override layer.
    pub fn add_overrides(&self, overrides: &mut Overrides) {
        overrides.source = self.source.clone();
        overrides.cache_positions = self.cache_positions;
        overrides.batch_games = self.batch_games;
        overrides.max_rejects = self.max_rejects;
        overrides.mode = self.mode;
    }
}

/// Totals of a run; `read = imported + present + rejected` always holds.
#[derive(Debug, Clone, Copy, Default)]
struct Totals {
    games: BatchStats,
    files_done: u64,
    files_skipped: u64,
    files_failed: u64,
    files_interrupted: u64,
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

/// Everything an input's import needs.
struct Importer<'a> {
    settings: &'a Settings,
    args: &'a ImportArgs,
    target: Target,
    /// Writes games, moves and checkpoints (and finishes a bulk load).
    db: Database,
    /// Resolves positions, one batch ahead of `db`.
    positions_db: Database,
    control: Database,
    cache: PositionCache,
    write_mode: WriteMode,
    /// The bulk load this run is part of.
    bulk_load: Option<i64>,
    bulk_report: Option<FinishReport>,
    /// Re-takes the import lock after the control connection was replaced.
    relock_sql: &'static str,
    progress: Progress,
    totals: Totals,
    run_id: i64,
    interrupts: Arc<AtomicUsize>,
    rejects_file: Option<File>,
    started: Instant,
}

/// Runs `pgnload import`.
pub fn run(args: &ImportArgs, settings: &Settings, quiet: bool) -> Result<ExitStatus, Error> {
    let runtime = db::runtime()?;
    let interrupts = Arc::new(AtomicUsize::new(0));
    runtime.spawn(watch_signals(Arc::clone(&interrupts)));
    runtime.block_on(async {
        let target = settings.target();
        let mut db = db::connect(&target).await?;
        db::migrate(&mut db.client).await?;
        prepare_connection(&db.client).await?;
        let positions_db = db::connect(&target).await?;
        prepare_connection(&positions_db.client).await?;
        let control = db::connect(&target).await?;
        let run_id: i64 = control
            .client
            .query_one(
                "INSERT INTO import_runs (pgnload_version, host, pid) VALUES ($1, $2, $3) RETURNING id",
                &[
                    &env!("CARGO_PKG_VERSION"),
                    &hostname(),
                    &i32::try_from(std::process::id()).unwrap_or(0),
                ],
            )
            .await
            .map_err(db_err("registering the run"))?
            .get(0);
        let rejects_file = match &args.rejects {
            Some(path) => Some(
                OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(|source| Error::Open {
                        path: path.clone(),
                        source,
                    })?,
            ),
            None => None,
        };
        if let Target::Url(_) = &target {
            for advice in crate::tuning::advice(&control.client).await? {
                eprintln!("pgnload: advice: {advice}");
            }
        }
        let incoming = estimated_positions(&args.inputs);
        let Some(chosen) =
            bulk::choose(&control.client, settings.mode, incoming, args.no_wait).await?
        else {
            eprintln!(
                "pgnload: a bulk load holds the database (or other imports block one); skipped (--no-wait)"
            );
            control
                .client
                .execute(
                    "UPDATE import_runs SET finished_at = now(), status = 'skipped' WHERE id = $1",
                    &[&run_id],
                )
                .await
                .map_err(db_err("recording the run"))?;
            db.close()?;
            positions_db.close()?;
            control.close()?;
            return Ok(ExitStatus::Clean);
        };
        let (write_mode, bulk_load, relock_sql) = match chosen {
            Chosen::Incremental => (
                WriteMode::Incremental,
                None,
                "SELECT pg_try_advisory_lock_shared($1)",
            ),
            Chosen::Bulk { resuming } => {
                if resuming {
                    eprintln!("pgnload: continuing an unfinished bulk load");
                }
                let BulkLoad { id, mode } = bulk::begin(&mut db.client).await?;
                (
                    mode,
                    Some(id),
                    "SELECT pg_try_advisory_lock($1)",
                )
            }
        };
        let mut importer = Importer {
            settings,
            args,
            target,
            db,
            positions_db,
            control,
            cache: PositionCache::new(settings.cache_positions),
            write_mode,
            bulk_load,
            bulk_report: None,
            relock_sql,
            progress: Progress::new(quiet),
            totals: Totals::default(),
            run_id,
            interrupts,
            rejects_file,
            started: Instant::now(),
        };
        let mut status = importer.run_all().await;
        importer.progress.finish();
        if let (Ok(ExitStatus::Clean | ExitStatus::CompletedWithRejects | ExitStatus::Failed), Some(load)) =
            (&status, importer.bulk_load)
        {
            match importer.finish_bulk(load, quiet).await {
                Ok(Some(report)) => importer.bulk_report = Some(report),
                Ok(None) => status = Ok(ExitStatus::Interrupted),
                Err(error) => status = Err(error),
            }
        }
        if let Ok(code) = status {
            importer.record_run(code).await?;
        }
        importer.print_summary();
        let Importer {
            db,
            positions_db,
            control,
            ..
        } = importer;
        db.close()?;
        positions_db.close()?;
        control.close()?;
        status
    })
}

async fn watch_signals(interrupts: Arc<AtomicUsize>) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        return;
    };
    loop {
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
        if interrupts.fetch_add(1, Ordering::SeqCst) == 0 {
            eprintln!(
                "pgnload: interrupted; finishing the batch in flight (again to abort at once)"
            );
        } else {
            eprintln!("pgnload: aborted; the open transaction rolls back, rerun to resume");
            std::process::exit(i32::from(ExitStatus::Interrupted.code()));
        }
    }
}

fn hostname() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
}

/// Advisory lock key of an input fingerprint.
pub(crate) fn lock_key(fingerprint: &str) -> i64 {
    crate::hash::to_signed(xxhash_rust::xxh64::xxh64(
        fingerprint.as_bytes(),
        0x7067_6e6c,
    ))
}

/// Errors worth retrying: the connection or server went away, or the
/// transaction lost a deadlock / serialization race.
fn is_transient(error: &Error) -> bool {
    let Error::Database { source, .. } = error else {
        return false;
    };
    if source.is_closed() {
        return true;
    }
    match source.code() {
        Some(code) => {
            let code = code.code();
            code.starts_with("08")
                || matches!(
                    code,
                    "57P01" | "57P02" | "57P03" | "40001" | "40P01" | "53300"
                )
        }
        // No SQLSTATE: an I/O error on the socket.
        None => true,
    }
}

/// Bounded retrying of transient database errors: exponential backoff
/// until `retry_seconds` have passed since the first failure.
struct Retry {
    deadline: Instant,
    attempt: u32,
}

impl Retry {
    fn new(seconds: u64) -> Retry {
        Retry {
            deadline: Instant::now() + Duration::from_secs(seconds),
            attempt: 0,
        }
    }

    /// Waits before the next attempt; `false` when `error` is not worth
    /// retrying or time is up.
    async fn wait(&mut self, error: &Error, closed: bool) -> bool {
        if !(closed || is_transient(error)) || Instant::now() >= self.deadline {
            return false;
        }
        let delay = db::backoff(self.attempt);
        self.attempt += 1;
        eprintln!(
            "pgnload: {error}; rolled back, retrying in {:.1}s",
            delay.as_secs_f64()
        );
        tokio::time::sleep(delay).await;
        true
    }
}

/// Runs `op` on a data connection until it succeeds, retrying transient
/// failures with backoff for `retry_seconds` and replacing the connection
/// when it dropped (the control connection needs more than that: see
/// [`Importer::retrying_control`]).
async fn retry_on<T>(
    db: &mut Database,
    target: &Target,
    retry_seconds: u64,
    mut op: impl AsyncFnMut(&mut tokio_postgres::Client) -> Result<T, Error>,
) -> Result<T, Error> {
    let mut retry = Retry::new(retry_seconds);
    loop {
        let error = if db.client.is_closed() {
            Error::Internal("connection closed".into())
        } else {
            match op(&mut db.client).await {
                Ok(value) => return Ok(value),
                Err(error) => error,
            }
        };
        if !retry.wait(&error, db.client.is_closed()).await {
            return Err(error);
        }
        if db.client.is_closed() {
            reconnect(db, target, true).await;
        }
    }
}

/// Replaces a dropped connection; failures are left for the next retry.
async fn reconnect(slot: &mut Database, target: &Target, staging: bool) {
    match db::connect(target).await {
        Ok(db) => {
            if staging && let Err(e) = prepare_connection(&db.client).await {
                eprintln!("pgnload: reconnect: {e}");
                return;
            }
            let old = std::mem::replace(slot, db);
            let _ = old.close();
        }
        Err(e) => eprintln!("pgnload: reconnect: {e}"),
    }
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
            this.control
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
        let mut retry = Retry::new(self.settings.retry_seconds);
        loop {
            let error = match op(self).await {
                Ok(value) => return Ok(value),
                Err(error) => error,
            };
            if !retry.wait(&error, self.control.client.is_closed()).await {
                return Err(error);
            }
            if self.control.client.is_closed() {
                reconnect(&mut self.control, &self.target, false).await;
                self.relock().await?;
            }
        }
    }

    /// The import lock went with the old control session: take it again,
    /// without waiting (someone taking it meanwhile is not safe to join).
    async fn relock(&mut self) -> Result<(), Error> {
        if self.control.client.is_closed() {
            return Ok(());
        }
        let locked: bool = self
            .control
            .client
            .query_one(self.relock_sql, &[&bulk::LOCK])
            .await
            .map_err(db_err("re-taking the import lock"))?
            .get(0);
        if locked {
            Ok(())
        } else {
            Err(Error::Internal(
                "lost the import lock with the database connection, and another import took it"
                    .into(),
            ))
        }
    }

    /// Finishes the bulk load, retrying (on a new connection if needed)
    /// after transient failures: every step is idempotent.
    async fn finish_bulk(&mut self, load: i64, quiet: bool) -> Result<Option<FinishReport>, Error> {
        let evicted = self.cache.evicted() > 0;
        let (target, interrupts) = (&self.target, &self.interrupts);
        retry_on(
            &mut self.db,
            target,
            self.settings.retry_seconds,
            async |client| bulk::finish(target, client, load, evicted, interrupts, quiet).await,
        )
        .await
    }

    /// [`Self::import_input`], started again after a transient failure of
    /// the bookkeeping connection (its steps are idempotent: the input's
    /// checkpoint says where to resume).
    async fn import_input_retrying(&mut self, index: usize, name: &str) -> Result<InputEnd, Error> {
        self.retrying_control(async |this: &mut Self| this.import_input(index, name).await)
            .await
    }

    async fn run_all(&mut self) -> Result<ExitStatus, Error> {
        let inputs = self.args.inputs.clone();
        let mut status = ExitStatus::Clean;
        for (index, name) in inputs.iter().enumerate() {
            // A signal between two inputs: the rest are not started, and
            // the run ends as interrupted (exit 3), not clean.
            if self.interrupted() {
                status = ExitStatus::Interrupted;
                break;
            }
            match self.import_input_retrying(index, name).await? {
                InputEnd::Done => self.totals.files_done += 1,
                InputEnd::AlreadyImported => {
                    self.totals.files_skipped += 1;
                    eprintln!("pgnload: {name}: already imported, skipped");
                }
                InputEnd::Busy => {
                    self.totals.files_skipped += 1;
                    eprintln!(
                        "pgnload: {name}: another pgnload is importing it; skipped (--no-wait)"
                    );
                }
                InputEnd::Interrupted => {
                    self.totals.files_interrupted += 1;
                    status = ExitStatus::Interrupted;
                    break;
                }
                InputEnd::TooManyRejects => {
                    self.totals.files_interrupted += 1;
                    eprintln!(
                        "pgnload: more than {} games rejected; stopping (rerun to continue)",
                        self.settings.max_rejects
                    );
                    status = ExitStatus::TooManyRejects;
                    break;
                }
                InputEnd::Failed(error) => {
                    self.totals.files_failed += 1;
                    eprintln!("pgnload: {name}: {error}");
                }
            }
        }
        if status == ExitStatus::Clean {
            if self.totals.files_failed > 0 {
                status = ExitStatus::Failed;
            } else if self.totals.games.rejected > 0 {
                status = ExitStatus::CompletedWithRejects;
            }
        }
        Ok(status)
    }

    /// Records how the run ended in `import_runs`.
    async fn record_run(&mut self, status: ExitStatus) -> Result<(), Error> {
        let t = self.totals.games;
        let (run_id, label) = (self.run_id, format!("{status:?}").to_lowercase());
        let counts = [t.read, t.imported, t.present, t.rejected].map(to_i64);
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
        self.interrupts.load(Ordering::SeqCst) > 0
    }

    /// Imports one input. `Err` only for failures that stop the whole run
    /// (the bookkeeping connection is gone); input-level failures are
    /// [`InputEnd::Failed`].
    async fn import_input(&mut self, index: usize, name: &str) -> Result<InputEnd, Error> {
        let (print_name, fingerprint, size) = if name == "-" {
            (
                "-".to_owned(),
                format!("stdin:{}:{index}", self.run_id),
                None,
            )
        } else {
            let path = Path::new(name);
            let absolute = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
            match fingerprint(path) {
                Ok(fp) => (
                    absolute.display().to_string(),
                    fp,
                    std::fs::metadata(path).ok().map(|m| m.len()),
                ),
                Err(source) => {
                    return Ok(InputEnd::Failed(Error::Open {
                        path: path.to_path_buf(),
                        source,
                    }));
                }
            }
        };
        let key = lock_key(&fingerprint);
        let locked: bool = self
            .control
            .client
            .query_one("SELECT pg_try_advisory_lock($1)", &[&key])
            .await
            .map_err(db_err("locking the input"))?
            .get(0);
        if !locked {
            if self.args.no_wait {
                return Ok(InputEnd::Busy);
            }
            eprintln!("pgnload: {name}: another pgnload is importing it; waiting for it");
            self.control
                .client
                .execute("SELECT pg_advisory_lock($1)", &[&key])
                .await
                .map_err(db_err("waiting for the input's lock"))?;
        }
        let end = self
            .import_locked(name, &print_name, &fingerprint, size)
            .await;
        // A replaced control connection released the lock with the old session.
        if !self.control.client.is_closed() {
            let _ = self
                .control
                .client
                .execute("SELECT pg_advisory_unlock($1)", &[&key])
                .await;
        }
        end
    }

    async fn import_locked(
        &mut self,
        name: &str,
        path: &str,
        fingerprint: &str,
        size: Option<u64>,
    ) -> Result<InputEnd, Error> {
        let client = &self.control.client;
        let row = client
            .query_opt(
                "SELECT id, state, games_done, bytes_done FROM import_files WHERE fingerprint = $1",
                &[&fingerprint],
            )
            .await
            .map_err(db_err("reading the input's checkpoint"))?;
        let changed = client
            .query_opt(
                "SELECT fingerprint FROM import_files
                 WHERE path = $1 AND fingerprint <> $2 AND state <> 'done'
                 ORDER BY updated_at DESC LIMIT 1",
                &[&path, &fingerprint],
            )
            .await
            .map_err(db_err("checking for a changed input"))?;
        if let (None, true, Some(old)) = (&row, name != "-", changed) {
            {
                let old: String = old.get(0);
                if !self.args.restart {
                    return Ok(InputEnd::Failed(Error::Config(format!(
                        "changed since its interrupted import (fingerprint {old} then, {fingerprint} now); \
                         refusing to resume. Pass --restart to import it from the start \
                         (games already imported are recognized and skipped)"
                    ))));
                }
                client
                    .execute(
                        "UPDATE import_files SET state = 'failed', last_error = 'superseded: the file changed', updated_at = now()
                         WHERE path = $1 AND fingerprint = $2",
                        &[&path, &old],
                    )
                    .await
                    .map_err(db_err("retiring the old checkpoint"))?;
            }
        }
        let (file_id, games_done, bytes_done) = match row {
            Some(row) => {
                let state: String = row.get(1);
                if state == "done" && !self.args.restart {
                    return Ok(InputEnd::AlreadyImported);
                }
                let (games, bytes): (i64, i64) = if self.args.restart {
                    (0, 0)
                } else {
                    (row.get(2), row.get(3))
                };
                if bytes > 0 {
                    eprintln!(
                        "pgnload: {name}: resuming after game #{games} (byte {bytes} of the decompressed stream)"
                    );
                }
                (row.get::<_, i64>(0), games, bytes)
            }
            None => {
                let compression = if name == "-" {
                    "unknown".to_owned()
                } else {
                    sniff_compression(Path::new(name)).to_string()
                };
                let id: i64 = client
                    .query_one(
                        "INSERT INTO import_files (fingerprint, path, size_bytes, compression, state)
                         VALUES ($1, $2, $3, $4, 'running') RETURNING id",
                        &[&fingerprint, &path, &size.map(to_i64), &compression],
                    )
                    .await
                    .map_err(db_err("registering the input"))?
                    .get(0);
                (id, 0, 0)
            }
        };
        client
            .execute(
                "UPDATE import_files SET state = 'running', last_error = NULL, path = $2,
                     games_done = $3, bytes_done = $4, updated_at = now(), finished_at = NULL
                 WHERE id = $1",
                &[&file_id, &path, &games_done, &bytes_done],
            )
            .await
            .map_err(db_err("marking the input running"))?;

        let source = self.settings.source.clone().unwrap_or_else(|| {
            Path::new(name).file_stem().map_or_else(
                || "stdin".to_owned(),
                |s| strip_pgn_suffix(&s.to_string_lossy()),
            )
        });
        let mut file = FileContext {
            file_id,
            source,
            expected_bytes_done: bytes_done,
        };
        let spec = InputSpec {
            name: name.to_owned(),
            skip_bytes: u64::try_from(bytes_done).unwrap_or(0),
            skip_games: u64::try_from(games_done).unwrap_or(0),
        };
        let pipeline = Pipeline::start(vec![spec], self.settings.pipeline);
        let mut consumed = None;
        // Batches move through two phases (see `Self::step`): `ready` has
        // its positions committed and waits for its games to be written.
        let mut ready: Option<(Batch, ResolvedBatch)> = None;
        let mut upstream_end = None;
        let end = loop {
            let next = if upstream_end.is_some() {
                None
            } else {
                match pipeline.events.recv() {
                    Ok(Event::Opened {
                        len, consumed: c, ..
                    }) => {
                        self.progress.start_input(name, len);
                        consumed = Some(c);
                        continue;
                    }
                    Ok(Event::Batch(batch)) => Some(batch),
                    Ok(Event::Finished { .. }) | Err(_) => {
                        upstream_end = Some(InputEnd::Done);
                        None
                    }
                    // The batches before the failure are still written.
                    Ok(Event::Failed { error, .. }) => {
                        upstream_end = Some(InputEnd::Failed(error));
                        None
                    }
                }
            };
            if next.is_none() && ready.is_none() {
                break upstream_end.unwrap_or(InputEnd::Done);
            }
            let (resolved, written) = self
                .step(next.as_ref(), ready.as_ref().map(|(b, r)| (b, r)), &file)
                .await;
            if let (Some((batch, _)), Some(written)) = (ready.take(), written) {
                if let Err(error) = written.and_then(|stats| self.after_commit(&batch, stats)) {
                    break InputEnd::Failed(error);
                }
                file.expected_bytes_done = to_i64(batch.end_offset);
                let bytes = consumed
                    .as_ref()
                    .map_or(batch.end_offset, |c| c.load(Ordering::Relaxed));
                self.progress.update(Snapshot {
                    games: self.totals.games.read,
                    positions: self.totals.games.positions_new + self.totals.games.positions_reused,
                    memory_hit_rate: self.totals.games.memory_hit_rate(),
                    bytes,
                });
                let max = self.settings.max_rejects;
                if max > 0 && self.totals.games.rejected > max {
                    break InputEnd::TooManyRejects;
                }
                if self.interrupted() {
                    break InputEnd::Interrupted;
                }
            }
            if let (Some(batch), Some(resolved)) = (next, resolved) {
                match resolved {
                    Ok((resolved, pending)) => {
                        for (key, id) in pending {
                            self.cache.insert(key, id);
                        }
                        ready = Some((batch, resolved));
                    }
                    Err(error) => break InputEnd::Failed(error),
                }
            }
        };
        pipeline.stop();
        drop(pipeline);
        let (state, error) = match &end {
            InputEnd::Done => ("done", None),
            InputEnd::Interrupted | InputEnd::TooManyRejects => ("interrupted", None),
            InputEnd::Failed(e) => ("failed", Some(e.to_string())),
            InputEnd::AlreadyImported | InputEnd::Busy => ("done", None),
        };
        self.control_execute(
            "recording the input's state",
            "UPDATE import_files SET state = $2, last_error = $3, updated_at = now(),
                 finished_at = CASE WHEN $2 = 'done' THEN now() END
             WHERE id = $1",
            &[&file_id, &state, &error],
        )
        .await?;
        Ok(end)
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
        Option<Result<BatchStats, Error>>,
    ) {
        let retry_seconds = self.settings.retry_seconds;
        let target = &self.target;
        let (mut position_seq, mut game_seq) = self.write_mode.sequences();
        let cache = &mut self.cache;
        let positions_db = &mut self.positions_db;
        let db = &mut self.db;
        let resolve = async {
            let batch = next?;
            Some(
                retry_on(positions_db, target, retry_seconds, async |client| {
                    resolve_positions(client, batch, file, cache, position_seq.as_deref_mut()).await
                })
                .await,
            )
        };
        let write = async {
            let (batch, resolved) = ready?;
            Some(
                retry_on(db, target, retry_seconds, async |client| {
                    write_games(client, batch, file, resolved, game_seq.as_deref_mut()).await
                })
                .await,
            )
        };
        tokio::join!(resolve, write)
    }

    /// Accounts for a batch whose games committed.
    fn after_commit(&mut self, batch: &Batch, stats: BatchStats) -> Result<(), Error> {
        self.totals.games.add(stats);
        if let Some(out) = &mut self.rejects_file {
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

    fn print_summary(&self) {
        let t = &self.totals;
        let g = t.games;
        let secs = self.started.elapsed().as_secs_f64().max(1e-9);
        let positions = g.positions_new + g.positions_reused;
        eprintln!("pgnload: import summary ({})", self.target.describe());
        eprintln!(
            "  inputs:    {} imported, {} skipped, {} interrupted, {} failed",
            t.files_done, t.files_skipped, t.files_interrupted, t.files_failed
        );
        eprintln!(
            "  games:     {} read = {} imported + {} already present + {} rejected",
            g.read, g.imported, g.present, g.rejected
        );
        eprintln!(
            "  positions: {} new, {} reused; {:.1}% resolved in memory",
            g.positions_new,
            g.positions_reused,
            100.0 * g.memory_hit_rate()
        );
        eprintln!("  moves:     {}", g.moves);
        match (self.bulk_load, &self.bulk_report) {
            (None, _) => eprintln!("  mode:      incremental"),
            (Some(load), Some(r)) => eprintln!(
                "  mode:      bulk (load #{load}); {} duplicate positions merged in {:.1} s; \
                 indexes rebuilt and tables analyzed in {:.1} s",
                r.duplicates_merged, r.dedup_s, r.rebuild_s
            ),
            (Some(load), None) => eprintln!(
                "  mode:      bulk (load #{load}), unfinished: the indexes are rebuilt when a rerun completes"
            ),
        }
        eprintln!(
            "  elapsed:   {secs:.2} s; {:.0} games/s, {:.0} positions/s, {:.0} moves/s",
            g.read as f64 / secs,
            positions as f64 / secs,
            g.moves as f64 / secs
        );
    }
}

fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// `lichess_db_2025-05.pgn.zst` → `lichess_db_2025-05` (file_stem leaves `.pgn`).
fn strip_pgn_suffix(stem: &str) -> String {
    stem.strip_suffix(".pgn").unwrap_or(stem).to_owned()
}

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
    let mut head = [0u8; 4];
    let n = File::open(path)
        .and_then(|mut f| std::io::Read::read(&mut f, &mut head))
        .unwrap_or(0);
    Compression::sniff(&head[..n])
}
