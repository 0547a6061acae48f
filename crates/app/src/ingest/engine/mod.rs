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
//! pipeline into the writer's two phases: `writer::resolve_positions`
//! of batch N+1 on one connection while `writer::write_games` of
//! batch N (with its checkpoint) runs on another.
//! A lost connection is retried with backoff for a bounded time; a bad game
//! is a reject, never an error; an interrupt finishes the batch in flight
//! and ends the run as interrupted (exit code 3).
//!
//! This file holds the run: its start, its inputs one by one, its end.
//! An input's row in `import_files` is `checkpoint`'s, its batches through
//! the two phases are `batches`'s, and the retry policy is
//! `ingest::retry`'s.

mod batches;
mod checkpoint;

use std::{
    fs::{File, OpenOptions},
    path::Path,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Instant,
};

use self::checkpoint::InputAttempt;

use crate::{
    config::{LoadMode, Settings},
    error::{Error, ExitStatus},
    explorer::{self, memory::RunMemory},
    ingest::{
        bulk::{self, BulkLoad, Chosen, FinishReport},
        dedup::PositionCache,
        exchange,
        replay::StreamReplay,
        report::{BulkOutcome, InputOutcome, InputReport, Notice, Reporter, Summary, Totals},
        retry::{Retry, reconnect, retry_on},
        source::{self, Compression, fingerprint},
        writer::{self, BatchStats, WriteMode, prepare_connection},
    },
    store::{
        db::{self, Database, Target, db_err},
        shards::{self, Shards},
    },
};

/// How many positions the dedup map may hold per position the explorer's
/// [`RunMemory`] holds (of each kind): a third of `cache_positions` (4
/// million by default, ~50 bytes each for lone visits, ~20 for positions
/// with rows: ~280 MiB at most), enough for the lone positions of the last
/// 50,000 games or so (measured: 2.6 million new positions per 50,000
/// generated games, most reached once), which is where nearly all the
/// second games of a position come from within a run.
const CACHED_PER_REMEMBERED: usize = 3;

/// How many positions the dedup map may hold per counter row a bulk load
/// holds ([`explorer::held`]): a twelfth of `cache_positions` (1 million
/// rows by default, ~360 bytes each since a row lists 8 games, migration
/// 25, ~230 before: ~360 MiB at most, plus one batch's), the rows of about
/// 56,000 games (measured: 894,000 rows, a key counted once per batch that
/// has it, per 50,000 generated games). Kept at a million rather than
/// halved back to the old memory: fewer rows held is more writes of them
/// during a load.
const CACHED_PER_HELD_ROW: usize = 12;

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

impl InputEnd {
    /// How the summary says it ended.
    fn outcome(&self) -> InputOutcome {
        match self {
            InputEnd::Done => InputOutcome::Imported,
            InputEnd::AlreadyImported => InputOutcome::AlreadyImported,
            InputEnd::Busy => InputOutcome::Busy,
            InputEnd::Interrupted => InputOutcome::Interrupted,
            InputEnd::TooManyRejects => InputOutcome::TooManyRejects,
            InputEnd::Failed(_) => InputOutcome::Failed,
        }
    }
}

/// How many batches' bytes a stream input keeps for a retry at most
/// ([`StreamReplay`]): the batches in flight of a usual run (Lichess games
/// fill a batch's game count long before its byte cap), with room to
/// spare, and far below what an oversized game streams through.
const REPLAY_BATCHES: usize = 4;

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
    /// What the run knows of its positions' explorer counters (see
    /// [`RunMemory`]).
    memory: RunMemory,
    /// Set when an attempt at an input failed: a connection may have been
    /// replaced, and a server crash may have lost commits the importer
    /// saw succeed, so the position map and the checkpoint are re-read
    /// from the database before anything is written again.
    stale: bool,
    /// The input being imported, if it is a stream: kept open with its
    /// uncommitted bytes across the attempts of its import.
    replay: Option<Arc<StreamReplay>>,
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
    /// Whether the database keeps the explorer counters: read once, with
    /// the import lock held, which `db explorer enable|disable` take
    /// exclusively.
    explorer: bool,
    /// The database's layout: `Some` when it is the coordinator of shards.
    shards: Option<Shards>,
}

impl RunContext<'_> {
    /// The retry policy of one step: `retry_seconds` from now, ended by
    /// the run's first interrupt.
    fn retry(&self) -> Retry {
        Retry::new(self.settings.retry_seconds, &self.interrupts)
    }
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
    /// indexes) with the first batch an input yields, so that a run whose
    /// inputs were all imported already, or all fail to open, leaves the
    /// indexes alone.
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
    /// Each input ended so far, in order.
    inputs: Vec<InputReport>,
    /// The input being imported, across the attempts a lost connection
    /// forces: what the database and the totals held when it began.
    attempt: Option<InputAttempt>,
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
    let rejects_file = job.rejects.map(open_rejects_file).transpose()?;
    let Start {
        conns,
        run_id,
        chosen,
        resumed,
        explorer,
        shards,
        advice,
    } = start_retrying(&target, settings, job, &interrupts, reporter).await?;
    for advice in &advice {
        reporter.notice(&Notice::Advice(advice));
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
            explorer,
            shards,
        },
        conns,
        load,
        cache: PositionCache::new(settings.cache_positions),
        memory: RunMemory::new(
            settings.cache_positions / CACHED_PER_REMEMBERED,
            settings.cache_positions / CACHED_PER_HELD_ROW,
        ),
        stale: false,
        replay: None,
        tally: Tally {
            totals: Totals::default(),
            inputs: Vec::new(),
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

/// The `--rejects` file, opened to append to.
fn open_rejects_file(path: &Path) -> Result<File, Error> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|source| Error::Open {
            path: path.to_path_buf(),
            source,
        })
}

/// [`start`], retried as a whole after a transient failure.
async fn start_retrying(
    target: &Target,
    settings: &Settings,
    job: &ImportJob<'_>,
    interrupts: &Arc<AtomicUsize>,
    reporter: &dyn Reporter,
) -> Result<Start, Error> {
    let mut retry = Retry::new(settings.retry_seconds, interrupts);
    loop {
        match start(target, settings, job, reporter).await {
            Ok(start) => return Ok(start),
            Err(error) => retry.wait(error, false, reporter).await?,
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
    /// Whether the database keeps the explorer counters (read once the
    /// lock is held; `false` when skipped).
    explorer: bool,
    /// The database's layout.
    shards: Option<Shards>,
    /// Advice on the server's settings (none for the embedded cluster,
    /// which pgnload configures): read with the start, so that a session
    /// lost while reading them is retried with it.
    advice: Vec<String>,
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
    let advice = match target {
        Target::Server(_) => crate::store::tuning::advice(&db.client).await?,
        Target::Embedded(_) => Vec::new(),
    };
    let positions_db = db::connect(target).await?;
    prepare_connection(&positions_db.client).await?;
    let control = db::connect(target).await?;
    let shards = shards::layout(&control.client).await?;
    let mode = match (shards, settings.mode) {
        (None, mode) => mode,
        (Some(shards), LoadMode::Bulk) => {
            return Err(Error::Config(format!(
                "--mode bulk is not available on a sharded layout ({} shards): it drops the \
                 indexes of tables that live on the shards, which the coordinator cannot do; \
                 import with --mode incremental (which --mode auto picks there)",
                shards.count()
            )));
        }
        (Some(_), _) => LoadMode::Incremental,
    };
    let incoming = estimated_positions(job.inputs);
    let shared = matches!(target, Target::Server(_));
    let chosen = bulk::choose(
        &control.client,
        mode,
        incoming,
        shared,
        job.no_wait,
        reporter,
    )
    .await?;
    let resumed = match chosen {
        Some(Chosen::Bulk { resuming: true }) => Some(bulk::begin(&mut db.client).await?),
        _ => None,
    };
    // After the lock: enable and disable take it exclusively, so the flag
    // holds for the whole run.
    let explorer = match chosen {
        Some(_) => explorer::enabled(&control.client, false).await?,
        None => false,
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
        explorer,
        shards,
        advice,
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
        let mut retry = self.run.retry();
        // Set when the control connection was replaced: the lock is taken
        // again before `op`, as part of the attempt, so that the new
        // session dropping too is retried like any other failure.
        let mut relock = false;
        loop {
            let attempt = if relock {
                match self.relock().await {
                    Ok(()) => {
                        relock = false;
                        op(self).await
                    }
                    Err(error) => Err(error),
                }
            } else {
                op(self).await
            };
            let error = match attempt {
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
            retry.wait(error, closed, self.run.reporter).await?;
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
                relock = true;
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
            // Without the lock, the counters may have been switched.
            if explorer::enabled(&self.conns.control.client, false).await? == self.run.explorer {
                Ok(())
            } else {
                Err(Error::Conflict(
                    "the explorer counters were enabled or disabled while this import had lost \
                     its lock with the database connection; run the import again"
                        .into(),
                ))
            }
        } else {
            Err(Error::Conflict(
                "lost the import lock with the database connection, and another import took it"
                    .into(),
            ))
        }
    }

    /// Finishes the bulk load, the explorer counter rows the run holds
    /// written with it, retrying (on a new connection if needed) after
    /// transient failures: every step is idempotent, and the rows are
    /// written once ([`explorer::flush_once`]).
    async fn finish_bulk(&mut self, load: i64) -> Result<Option<FinishReport>, Error> {
        let evicted = self.cache.evicted() > 0;
        let mut held = Some(self.memory.take_held_rows()).filter(|rows| !rows.is_empty());
        let (target, interrupts, reporter, explorer) = (
            &self.run.target,
            &self.run.interrupts,
            self.run.reporter,
            self.run.explorer,
        );
        retry_on(
            &mut self.conns.db,
            target,
            self.run.retry(),
            true,
            reporter,
            async |client| {
                bulk::finish(
                    target, client, load, evicted, explorer, &mut held, interrupts, reporter,
                )
                .await
            },
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

    /// Ends the run after its inputs: finishes the bulk load unless the
    /// run was interrupted (the user asked to stop now, and a rerun
    /// finishes it; stopped for too many rejects, the load is finished so
    /// that the database is not left without indexes while the rejects are
    /// fixed), then records how the run ended. The explorer counter rows
    /// the load holds are written by its finish (beside its index
    /// rebuilds), or here if it does not finish.
    async fn end_run(
        &mut self,
        mut status: Result<ExitStatus, Error>,
    ) -> Result<ExitStatus, Error> {
        let finishing = match (&status, self.load.bulk) {
            (
                Ok(
                    ExitStatus::Clean
                    | ExitStatus::CompletedWithRejects
                    | ExitStatus::Failed
                    | ExitStatus::TooManyRejects,
                ),
                BulkState::Open(load),
            ) => Some(load),
            _ => None,
        };
        if status.is_ok()
            && finishing.is_none()
            && !self.memory.held_rows().is_empty()
            && let Err(error) = self.write_held_rows().await
        {
            status = Err(error);
        }
        if let Some(load) = finishing {
            match self.finish_bulk(load).await {
                Ok(Some(report)) => self.load.bulk = BulkState::Finished(load, report),
                Ok(None) => status = Ok(ExitStatus::Interrupted),
                Err(error) => status = Err(error),
            }
        }
        if status.is_ok() && self.run.explorer && self.run.shards.is_none() {
            self.count_queued_positions().await;
        }
        if status.is_ok() && self.run.shards.is_none() {
            merge_pending_hash_entries(&self.conns.control.client, self.run.reporter).await;
        }
        if let Ok(code) = status {
            self.record_run(code).await?;
        }
        status
    }

    /// Writes the explorer counter rows the bulk load holds
    /// ([`explorer::held`]). A lost connection forgets them instead (a
    /// server crash may have undone batches they count): the records of
    /// their games make the load's finish queue their positions.
    async fn write_held_rows(&mut self) -> Result<(), Error> {
        let memory = &self.memory;
        let written = retry_on(
            &mut self.conns.db,
            &self.run.target,
            self.run.retry(),
            false,
            self.run.reporter,
            async |client| explorer::flush(client, memory.held_rows()).await,
        )
        .await;
        match written {
            Ok(()) => self.memory.held_written(),
            Err(_) if self.conns.db.client.is_closed() => self.memory.clear(),
            Err(error) => return Err(error),
        }
        Ok(())
    }

    /// Counts the positions this run's batches queued for the explorer
    /// counters ([`explorer::count_pending`]) if no other import runs; else,
    /// or if that fails, says how to count them later. The games are
    /// imported either way: until then `explore` groups the games of those
    /// positions, which is exact but slower.
    async fn count_queued_positions(&mut self) {
        let later =
            "`pgnload db explorer compact` counts them (or the next import that runs alone)";
        match explorer::count_pending_if_alone(&mut self.conns.control.client).await {
            Ok(Some(_)) => {}
            Ok(None) => self.run.reporter.notice(&Notice::Advice(&format!(
                "other imports are running, so the positions this run queued for the explorer \
                 counters stay queued: {later}"
            ))),
            Err(error) => self.run.reporter.notice(&Notice::Advice(&format!(
                "counting the positions queued for the explorer counters failed ({error}): {later}"
            ))),
        }
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
            let before = self.tally.totals.games;
            let cap = REPLAY_BATCHES * self.run.settings.pipeline.batch_bytes;
            self.replay = source::is_stream(name).then(|| Arc::new(StreamReplay::new(name, cap)));
            let end = self.import_input_retrying(index, name).await;
            self.replay = None;
            let end = match end {
                Ok(end) => end,
                // The failure that stops the run is this input's.
                Err(error) => {
                    self.tally.totals.files_failed += 1;
                    self.report_input(name, InputOutcome::Failed, &before, Some(&error), 0);
                    self.count_not_started();
                    return Err(error);
                }
            };
            let earlier = match &end {
                InputEnd::Done => (self.tally.attempt).map_or(0, |a| a.rejected_before()),
                _ => 0,
            };
            let error = match &end {
                InputEnd::Failed(error) => Some(error),
                _ => None,
            };
            self.report_input(name, end.outcome(), &before, error, earlier);
            match end {
                InputEnd::Done => {
                    self.tally.totals.files_done += 1;
                    self.count_rejected_before(name);
                }
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
        self.count_not_started();
        let totals = &self.tally.totals;
        if status == ExitStatus::Clean {
            if totals.files_failed > 0 {
                status = ExitStatus::Failed;
            } else if totals.games.rejected > 0
                || totals.games.conflicts > 0
                || totals.rejected_before > 0
            {
                status = ExitStatus::CompletedWithRejects;
            }
        }
        Ok(status)
    }

    /// Counts the inputs the run never began: those its other counts leave
    /// out, so that every input given is counted once, and reports them.
    fn count_not_started(&mut self) {
        let t = &mut self.tally.totals;
        let counted = t.files_done + t.files_skipped + t.files_interrupted + t.files_failed;
        t.files_not_started = (self.run.job.inputs.len() as u64).saturating_sub(counted);
        let inputs = self.run.job.inputs;
        for name in inputs.iter().skip(self.tally.inputs.len()) {
            let now = self.tally.totals.games;
            self.report_input(name, InputOutcome::NotStarted, &now, None, 0);
        }
    }

    /// Records how input `name` ended: its counts are what the totals
    /// gained since `before`.
    fn report_input(
        &mut self,
        name: &str,
        outcome: InputOutcome,
        before: &BatchStats,
        error: Option<&Error>,
        rejected_before: u64,
    ) {
        self.tally.inputs.push(InputReport {
            input: name.to_owned(),
            outcome,
            games: self.tally.totals.games.since(before),
            error: error.map(|e| crate::error::report(e)),
            rejected_before,
        });
    }

    /// After input `name` finished: counts (and says) the games its earlier
    /// runs rejected, which this run's status must not hide.
    fn count_rejected_before(&mut self, name: &str) {
        let games = self
            .tally
            .attempt
            .map_or(0, |attempt| attempt.rejected_before());
        if games > 0 {
            self.tally.totals.rejected_before += games;
            self.run
                .reporter
                .notice(&Notice::RejectedBefore { input: name, games });
        }
    }

    /// Records how the run ended in `import_runs`.
    async fn record_run(&mut self, status: ExitStatus) -> Result<(), Error> {
        let t = self.tally.totals.games;
        let (run_id, label) = (self.run.id, format!("{status:?}").to_lowercase());
        // The totals add up counters PostgreSQL holds as bigints, so they
        // fit unless a bug inflated them: an error then, not a clamp.
        let bigint = |n: u64| {
            i64::try_from(n).map_err(|_| {
                Error::bug(format!(
                    "run {run_id}: a game count of {n} is past PostgreSQL's bigint"
                ))
            })
        };
        let counts = [
            bigint(t.read)?,
            bigint(t.imported)?,
            bigint(t.present)?,
            bigint(t.rejected)?,
            bigint(t.filtered)?,
        ];
        self.control_execute(
            "recording the run",
            "UPDATE import_runs SET finished_at = now(), status = $2, games_read = $3,
                 games_imported = $4, games_present = $5, games_rejected = $6,
                 games_filtered = $7
             WHERE id = $1",
            &[
                &run_id, &label, &counts[0], &counts[1], &counts[2], &counts[3], &counts[4],
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
            // An exchange input is identified by every file it is read from.
            let identity = match source::sniff_file(path) {
                Some(format @ (Compression::Sqlite | Compression::Dcg)) => {
                    exchange::fingerprint(path, format, &self.run.interrupts)
                }
                _ => fingerprint(path, &self.run.interrupts),
            };
            match identity {
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

    /// What the run did, for the summary.
    fn summary(&self) -> Summary {
        Summary {
            target: self.run.target.describe(),
            totals: self.tally.totals,
            inputs: self.tally.inputs.clone(),
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

/// How many new positions the inputs may bring: the scale `--mode auto`
/// compares with the database's positions (a stream counts as nothing).
fn estimated_positions(inputs: &[String]) -> u64 {
    inputs
        .iter()
        .filter_map(|name| source::estimated_plain_bytes(name))
        .map(|plain| plain / BYTES_PER_NEW_POSITION)
        .sum()
}

fn sniff_compression(path: &Path) -> Compression {
    source::sniff_file(path).unwrap_or(Compression::None)
}

/// Merges the `fen_hash` index entries the run's batches left pending
/// ([`writer::merge_pending_hash_entries`]): after each input's last
/// positions on one node (beside its last games), and at the end of the
/// run for what an interrupted input left (then mostly nothing, a few
/// milliseconds). The games are imported either way: if it fails, lookups
/// by `fen_hash` stay correct, only slower until the next vacuum, and the
/// notice says how to merge them.
async fn merge_pending_hash_entries(client: &tokio_postgres::Client, reporter: &dyn Reporter) {
    if let Err(error) = writer::merge_pending_hash_entries(client).await {
        reporter.notice(&Notice::Advice(&format!(
            "merging the pending entries of positions' fen_hash index failed ({error}); \
             lookups by fen_hash stay correct but slower until `VACUUM positions` merges them"
        )));
    }
}
