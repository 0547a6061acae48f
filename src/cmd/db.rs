//! `pgnload db …`: migrations, the embedded cluster's lifecycle, backup
//! and restore.

use std::{
    fmt::Write as _,
    num::NonZeroUsize,
    path::PathBuf,
    sync::{Arc, Mutex, PoisonError, atomic::AtomicUsize},
    time::Instant,
};

use crate::{
    config::Settings,
    error::Error,
    error::ExitStatus,
    explorer::admin::{self, Compacted, Switched},
    progress::{Progress, Step, Steps},
    store::{
        backup::{self, BackupError, Format, Outcome},
        db::{self, Target},
        embedded::{ClusterStatus, EmbeddedCluster},
        shards::{self, ShardOutcome},
    },
};

/// `pgnload db` subcommands.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum DbCommand {
    /// Apply pending migrations from sql/ (imports do this automatically);
    /// with --shards, make this empty database the coordinator of a sharded layout.
    Migrate(MigrateArgs),
    /// Start the embedded cluster and keep it running (for psql) until `db stop`.
    Start,
    /// Stop the embedded cluster.
    Stop,
    /// Say whether the embedded cluster is initialized and running.
    Status,
    /// Print a connection URL for psql (`psql "$(pgnload db url)"`); warns
    /// when the cluster is stopped or missing.
    Url,
    /// Back the database up with `pg_dump`: one file, or a directory (parallel jobs).
    Backup(BackupArgs),
    /// Restore a backup with `pg_restore` into an empty database (a new --data-dir).
    Restore(RestoreArgs),
    /// Switch the opening explorer's counters on or off for this database.
    #[command(subcommand)]
    Explorer(ExplorerCommand),
}

/// `pgnload db explorer` subcommands. The counters are opt-in: keeping
/// them costs imports about half their time again, which users who only
/// import should not pay.
#[derive(Debug, Clone, Copy, clap::Subcommand)]
pub enum ExplorerCommand {
    /// Count the games already imported and keep the counters from now on
    /// (waits for running imports; refused while a bulk load is unfinished).
    Enable,
    /// Drop the counters and stop keeping them (imports get faster; `explore` stops working).
    Disable,
    /// Count the positions imports queued (single node; waits for running
    /// imports), or on shards fold the rows each batch added into one per
    /// key and shard (safe while imports run): either keeps `explore` fast.
    Compact,
}

/// Options of `pgnload db migrate`.
#[derive(Debug, Clone, clap::Args)]
pub struct MigrateArgs {
    /// Connection URLs of the shard servers, comma-separated, shard 0
    /// first: positions, games and moves are hash-partitioned over them
    /// through `postgres_fdw` (docs/scaling-out.md). Each must be reachable
    /// from the database server itself. In the environment, the URLs (and
    /// their passwords) stay out of the process list.
    #[arg(
        long,
        env = "PGNLOAD_SHARDS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub shards: Vec<String>,
}

/// Options of `pgnload db backup`.
#[derive(Debug, Clone, clap::Args)]
pub struct BackupArgs {
    /// Where to write the backup; it must not exist (a directory may be empty).
    pub path: PathBuf,
    /// custom: one compressed file; directory: one file per table, written
    /// with parallel jobs [default: directory for a path ending in / or an
    /// existing directory, else custom].
    #[arg(long, value_parser = crate::cli::choice::<Format>())]
    pub format: Option<Format>,
    /// Parallel `pg_dump` jobs, directory format only [default: one per core].
    #[arg(long)]
    pub jobs: Option<NonZeroUsize>,
}

/// Options of `pgnload db restore`.
#[derive(Debug, Clone, clap::Args)]
pub struct RestoreArgs {
    /// A backup written by `pgnload db backup` (or `pg_dump` -Fc / -Fd).
    pub path: PathBuf,
    /// Parallel `pg_restore` jobs; with one, the restore is a single
    /// transaction [default: one per core for a directory, else 1].
    #[arg(long)]
    pub jobs: Option<NonZeroUsize>,
}

fn embedded(settings: &Settings) -> Result<EmbeddedCluster, Error> {
    match settings.target() {
        Target::Embedded(dir) => Ok(EmbeddedCluster::new(dir)?),
        Target::Server(_) => Err(Error::Config(
            "this command manages the embedded cluster; unset --database-url / DATABASE_URL, \
             or give --data-dir (the PG* variables PGHOST, PGPORT, PGDATABASE, PGUSER, \
             PGSERVICE... name a server otherwise)"
                .into(),
        )),
    }
}

/// The summary line of a backup or restore.
fn done(what: &str, path: &std::path::Path, outcome: &Outcome) -> String {
    let mut message = format!(
        "{what} {} ({:.1} MiB) in {:.1} s",
        path.display(),
        outcome.bytes as f64 / f64::from(1u32 << 20),
        outcome.seconds
    );
    for name in &outcome.migrations {
        let _ = write!(message, "\napplied {name}");
    }
    message
}

/// A backup or restore stopped by Ctrl-C / SIGTERM is not a failure: it
/// says what it left and ends with exit code 3 (`None`).
fn unless_interrupted(result: Result<Outcome, Error>) -> Result<Option<Outcome>, Error> {
    match result {
        Err(Error::Backup(stopped @ BackupError::Interrupted { .. })) => {
            stderr_line!("pgnload: {stopped}");
            Ok(None)
        }
        other => other.map(Some),
    }
}

/// Removes the cluster a failed `db restore` created in `dir`, which did
/// not exist before it (and the directory it lives in, if running as root
/// placed it elsewhere and `dir` links to it). Says what it did, or why it
/// could not.
fn remove_new_cluster(dir: &std::path::Path) {
    if std::fs::symlink_metadata(dir).is_err() {
        return; // the restore failed before creating it
    }
    let removed = (|| -> Result<(), String> {
        let cluster = EmbeddedCluster::new(dir).map_err(|e| e.to_string())?;
        cluster.stop().map_err(|e| e.to_string())?;
        let real = cluster.data_dir();
        let io = |e: std::io::Error| format!("removing {}: {e}", real.display());
        std::fs::remove_dir_all(real).map_err(io)?;
        if std::fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_symlink()) {
            std::fs::remove_file(dir).map_err(io)?;
        }
        Ok(())
    })();
    match removed {
        Ok(()) => stderr_line!(
            "pgnload: removed the new cluster in {} (the restore did not complete)",
            dir.display()
        ),
        Err(e) => stderr_line!(
            "pgnload: warning: could not remove the cluster this restore created in {}: {e}",
            dir.display()
        ),
    }
}

/// Runs `pgnload db explorer compact`; returns the summary line.
fn compact_explorer(settings: &Settings, steps: Steps<'_>) -> Result<String, Error> {
    let started = Instant::now();
    let waiting = || steps(Step::Said("waiting for running imports to finish"));
    let compacted = db::runtime()?.block_on(async {
        let mut database = db::connect(&settings.target()).await?;
        db::migrate(&mut database.client).await?;
        let compacted = admin::compact(&mut database.client, &waiting, steps).await?;
        database.close()?;
        Ok::<_, Error>(compacted)
    })?;
    let seconds = started.elapsed().as_secs_f64();
    Ok(match compacted {
        Compacted::Queue { positions } => {
            format!("explorer counters: {positions} queued positions counted in {seconds:.1} s")
        }
        Compacted::Shards { before, after } => {
            format!("explorer counters compacted: {before} rows into {after} in {seconds:.1} s")
        }
    })
}

/// Runs `pgnload db explorer enable` (`enable`) or `disable`; returns the
/// summary line.
fn switch_explorer(enable: bool, settings: &Settings, steps: Steps<'_>) -> Result<String, Error> {
    let started = Instant::now();
    let waiting = || steps(Step::Said("waiting for running imports to finish"));
    let runtime = db::runtime()?;
    let switched = runtime.block_on(async {
        let mut database = db::connect(&settings.target()).await?;
        db::migrate(&mut database.client).await?;
        let switched = if enable {
            // The key's build is watched from a second connection.
            let monitor = db::connect(&settings.target()).await?;
            let switched =
                admin::enable(&mut database.client, &waiting, &monitor.client, steps).await;
            monitor.close()?;
            switched?
        } else {
            admin::disable(&mut database.client, &waiting).await?
        };
        database.close()?;
        Ok::<_, Error>(switched)
    })?;
    let seconds = started.elapsed().as_secs_f64();
    let state = if enable { "enabled" } else { "disabled" };
    Ok(match switched {
        Switched::Already => format!("explorer counters already {state}; nothing to do"),
        Switched::Changed { rows } if enable => {
            format!("explorer counters enabled: {rows} rows counted in {seconds:.1} s")
        }
        Switched::Changed { rows } => {
            format!("explorer counters disabled: {rows} rows removed in {seconds:.1} s")
        }
    })
}

/// Runs a `pgnload db` subcommand; `quiet` silences the progress of
/// backup, restore and the explorer's switches.
pub fn run(command: &DbCommand, settings: &Settings, quiet: bool) -> Result<ExitStatus, Error> {
    let name = match command {
        DbCommand::Backup(_) => "db backup",
        DbCommand::Restore(_) => "db restore",
        _ => "db explorer",
    };
    let shown = Mutex::new(Progress::steps(quiet, name));
    let progress = |step: Step<'_>| {
        shown
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .show(step);
    };
    let message = match command {
        DbCommand::Backup(args) => match backup(args, settings, &progress)? {
            Some(message) => message,
            None => return Ok(ExitStatus::Interrupted),
        },
        DbCommand::Restore(args) => match restore(args, settings, &progress)? {
            Some(message) => message,
            None => return Ok(ExitStatus::Interrupted),
        },
        DbCommand::Migrate(args) => migrate(args, settings)?,
        DbCommand::Start => {
            let cluster = embedded(settings)?;
            cluster.start_persistent()?;
            format!(
                "running; connect with: psql \"{}\"",
                cluster.connection_url()
            )
        }
        DbCommand::Stop => {
            embedded(settings)?.stop()?;
            "stopped".to_owned()
        }
        DbCommand::Status => status(settings)?,
        DbCommand::Url => url(settings)?,
        DbCommand::Explorer(ExplorerCommand::Enable) => switch_explorer(true, settings, &progress)?,
        DbCommand::Explorer(ExplorerCommand::Disable) => {
            switch_explorer(false, settings, &progress)?
        }
        DbCommand::Explorer(ExplorerCommand::Compact) => compact_explorer(settings, &progress)?,
    };
    shown
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .finish();
    super::print(&format!("{message}\n"))?;
    Ok(ExitStatus::Clean)
}

/// Ctrl-C and SIGTERM during a backup or restore: the first stops the
/// running tool, whose unfinished output the library removes before the
/// command ends with exit code 3; a second exits at once. Installed before
/// the library starts anything, so no signal kills pgnload before it could
/// clean up after the tool.
fn watch_tool_signals(runtime: &tokio::runtime::Runtime) -> Result<backup::Interrupts, Error> {
    let count = Arc::new(AtomicUsize::new(0));
    let interrupts = backup::Interrupts::new(Arc::clone(&count));
    let tool = interrupts.clone();
    super::watch_signals_then(
        runtime,
        count,
        "interrupted: stopping (again to exit at once)",
        "interrupted again: exiting now",
        move || tool.stop_tool(),
    )?;
    Ok(interrupts)
}

/// `pgnload db backup`: the summary line, or `None` when interrupted.
fn backup(
    args: &BackupArgs,
    settings: &Settings,
    progress: Steps<'_>,
) -> Result<Option<String>, Error> {
    let runtime = db::runtime()?;
    let interrupts = watch_tool_signals(&runtime)?;
    let result = backup::backup(
        &settings.target(),
        &args.path,
        args.format,
        args.jobs,
        &runtime,
        &interrupts,
        progress,
    );
    Ok(unless_interrupted(result)?.map(|outcome| done("backup written:", &args.path, &outcome)))
}

/// `pgnload db restore`: the summary line, or `None` when interrupted.
fn restore(
    args: &RestoreArgs,
    settings: &Settings,
    progress: Steps<'_>,
) -> Result<Option<String>, Error> {
    let target = settings.target();
    // Restoring into a data directory that does not exist yet
    // creates a cluster there: one that received no backup is no
    // one's, and must not be left for the next command to find.
    let new_dir = match &target {
        Target::Embedded(dir) if std::fs::symlink_metadata(dir).is_err() => Some(dir),
        _ => None,
    };
    let runtime = db::runtime()?;
    let interrupts = watch_tool_signals(&runtime)?;
    let result = unless_interrupted(backup::restore(
        &target,
        &args.path,
        args.jobs,
        &runtime,
        &interrupts,
        progress,
    ));
    if let (Some(dir), Ok(None) | Err(_)) = (new_dir, &result) {
        remove_new_cluster(dir);
    }
    Ok(result?.map(|outcome| done("restored", &args.path, &outcome)))
}

/// `pgnload db migrate`: the migrations applied, and with `--shards` the
/// sharded layout built.
fn migrate(args: &MigrateArgs, settings: &Settings) -> Result<String, Error> {
    let runtime = db::runtime()?;
    runtime.block_on(async {
        let mut database = db::connect(&settings.target()).await?;
        let applied = db::migrate(&mut database.client).await?;
        let mut lines: Vec<String> = applied
            .iter()
            .map(|name| format!("applied {name}"))
            .collect();
        if !args.shards.is_empty() {
            let outcome =
                shards::shard_out(&mut database.client, &database.description, &args.shards)
                    .await?;
            lines.push(match outcome {
                ShardOutcome::Built(shown) => {
                    format!("sharded over {} servers: {}", shown.len(), shown.join(", "))
                }
                ShardOutcome::Already(count) => {
                    format!("already sharded over these {count} servers; nothing to do")
                }
            });
        }
        if lines.is_empty() {
            lines.push(format!("schema up to date ({})", database.description));
        }
        database.close()?;
        Ok::<_, Error>(lines.join("\n"))
    })
}

/// `pgnload db status`: whether the embedded cluster exists and runs.
fn status(settings: &Settings) -> Result<String, Error> {
    let cluster = embedded(settings)?;
    let dir = cluster.data_dir().display();
    Ok(match cluster.status()? {
        ClusterStatus::NotInitialized => format!("not initialized ({dir})"),
        ClusterStatus::Stopped => format!("stopped ({dir})"),
        ClusterStatus::Running { pid } => format!(
            "running, pid {pid} ({dir}); psql \"{}\"",
            cluster.connection_url()
        ),
    })
}

/// `pgnload db url`: the connection URL, with a warning when a psql on it
/// would fail without saying why.
fn url(settings: &Settings) -> Result<String, Error> {
    let cluster = embedded(settings)?;
    let dir = cluster.data_dir().display();
    // The URL is printed anyway (scripts build it before a start),
    // but a psql on it would fail without saying why.
    match cluster.status()? {
        ClusterStatus::Running { .. } => {}
        ClusterStatus::Stopped => stderr_line!(
            "pgnload: warning: the embedded cluster in {dir} is not running; \
             `pgnload db start` starts it"
        ),
        ClusterStatus::NotInitialized => stderr_line!(
            "pgnload: warning: there is no embedded cluster in {dir} (is --data-dir \
             right?); the first import or `pgnload db start` creates one"
        ),
    }
    Ok(cluster.connection_url())
}
