//! `pgnload import`: parses its arguments, runs the import engine
//! ([`crate::ingest::engine`]) under signal handling, prints the summary.
//!
//! Ctrl-C/SIGTERM finishes the batch in flight and exits with code 3 (a
//! second one exits at once — the open transaction rolls back). Nothing of
//! the import itself belongs here: a second front end must be able to
//! import through the engine alone.

use std::{
    num::NonZeroUsize,
    path::PathBuf,
    sync::{Arc, Mutex, PoisonError, atomic::AtomicUsize},
};

use crate::{
    chess::model::GameVariant,
    config::{LoadMode, Settings},
    error::{Error, ExitStatus},
    ingest::{
        engine::{self, ImportJob},
        report::{BatchStats, BulkOutcome, Notice, Reporter, Summary},
    },
    progress::{Progress, Snapshot, Step},
    store::db,
};

/// Options of `pgnload import`.
#[derive(Debug, Clone, clap::Args)]
#[expect(
    clippy::struct_excessive_bools,
    reason = "each bool is a command-line switch, as clap declares them"
)]
pub struct ImportArgs {
    /// PGN files (plain, .zst, .bz2, .gz, detected from their first bytes) or
    /// `-` for stdin.
    #[arg(required = true, value_parser = crate::cli::utf8_input())]
    pub inputs: Vec<String>,
    /// Source label for games without a Lichess id [default: pgn].
    #[arg(long, env = "PGNLOAD_SOURCE")]
    pub source: Option<String>,
    /// Positions kept in the in-memory dedup cache (with the explorer
    /// counters on, a third as many are remembered for them too).
    #[arg(long, env = "PGNLOAD_CACHE_POSITIONS")]
    pub cache_positions: Option<usize>,
    /// Games per batch (one transaction and one checkpoint each).
    #[arg(long, env = "PGNLOAD_BATCH_GAMES")]
    pub batch_games: Option<NonZeroUsize>,
    /// Stop cleanly (exit code 4) at the reject that makes more than this
    /// many in the run: the games up to it are committed, not one after,
    /// and a rerun resumes just after it (0: no limit).
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
    /// should bring and no other import runs, but never on a
    /// --database-url database that already holds games [default: auto].
    #[arg(long, value_parser = crate::cli::choice::<LoadMode>(), env = "PGNLOAD_MODE")]
    pub mode: Option<LoadMode>,
    /// Only rated games: Event starting "Rated" (Lichess) is rated, "Casual"
    /// is not; any other game is rated when both players have an Elo.
    #[arg(long)]
    pub rated_only: bool,
    /// Only games of these variants, comma-separated (any spelling:
    /// `king_of_the_hill`, `kingOfTheHill`, `koth`…).
    #[arg(
        long,
        visible_alias = "variant",
        value_delimiter = ',',
        value_parser = crate::cli::VariantParser
    )]
    pub variants: Vec<GameVariant>,
    /// The criteria shared with `games`, `export` and `explore`.
    #[command(flatten)]
    pub selection: crate::cli::SelectionFlags,
    /// Leave out games where either player has the title BOT.
    #[arg(long)]
    pub exclude_bots: bool,
    /// Positions and moves rows only for plies 0..=N (the start position is
    /// ply 0); games.moves keeps every move, so export loses nothing but
    /// the clocks, evals and NAGs past ply N.
    #[arg(long, value_name = "N")]
    pub positions_max_ply: Option<u32>,
    /// Games rows only (with games.moves): the start position, no moves
    /// rows (a cap of 0). `import --restart` of the same input without it
    /// fills the positions and moves in.
    #[arg(long, conflicts_with = "positions_max_ply")]
    pub games_only: bool,
    /// Also write the run's summary as JSON to FILE (`-`: standard
    /// output): counts per input, rejects by reason, timings, exit status
    /// (docs/import.md "Summary as JSON").
    #[arg(long, value_name = "FILE")]
    pub summary_json: Option<PathBuf>,
}

/// Runs `pgnload import`.
pub fn run(args: &ImportArgs, settings: &Settings, quiet: bool) -> Result<ExitStatus, Error> {
    let runtime = db::runtime()?;
    let interrupts = Arc::new(AtomicUsize::new(0));
    crate::cmd::watch_signals(
        &runtime,
        Arc::clone(&interrupts),
        "interrupted; finishing the batch in flight (again to abort at once)",
        "aborted; the open transaction rolls back, rerun to resume",
    )?;
    let job = ImportJob {
        inputs: &args.inputs,
        rejects: args.rejects.as_deref(),
        restart: args.restart,
        no_wait: args.no_wait,
    };
    let printer = Printer {
        progress: Mutex::new(Progress::new(quiet)),
        finish: Mutex::new(Progress::steps(quiet, "import")),
        quiet,
        summary: Mutex::new(None),
    };
    let started = chrono::Utc::now();
    let status = runtime.block_on(engine::import(settings, &job, interrupts, &printer));
    let Some(destination) = &args.summary_json else {
        return status;
    };
    let summary = printer
        .summary
        .into_inner()
        .unwrap_or_else(PoisonError::into_inner);
    let mut json = serde_json::to_string_pretty(&summary_json(summary.as_ref(), &status, started))
        .map_err(|e| Error::bug_from("serializing the summary", e))?;
    json.push('\n');
    let written = if destination.as_os_str() == "-" {
        super::print(&json)
    } else {
        std::fs::write(destination, json).map_err(Error::Output)
    };
    // The run's own error says more than a summary that could not be
    // written after it.
    match (status, written) {
        (Ok(_), Err(error)) => Err(error),
        (status, _) => status,
    }
}

/// The summary as `--summary-json` writes it: the run's `summary` (none
/// when the run failed before its inputs), how it ended, and when.
fn summary_json(
    summary: Option<&Summary>,
    status: &Result<ExitStatus, Error>,
    started: chrono::DateTime<chrono::Utc>,
) -> serde_json::Value {
    let (exit, error) = match status {
        Ok(status) => (*status, None),
        Err(error) => (error.policy().exit, Some(crate::error::report(error))),
    };
    let exit_status = match exit {
        ExitStatus::Clean => "clean",
        ExitStatus::CompletedWithRejects => "completed_with_rejects",
        ExitStatus::Failed => "failed",
        ExitStatus::Interrupted => "interrupted",
        ExitStatus::TooManyRejects => "too_many_rejects",
    };
    let finished = chrono::Utc::now();
    let mut json = serde_json::json!({
        "pgnload_version": env!("CARGO_PKG_VERSION"),
        "started_at": super::json_time(started),
        "finished_at": super::json_time(finished),
        "exit_code": exit.code(),
        "exit_status": exit_status,
        "error": error,
        "database": null, "mode": null, "bulk_load": null,
        "elapsed_seconds": (finished - started).as_seconds_f64(),
        "import_seconds": null,
        "totals": null, "inputs": [],
    });
    if let Some(summary) = summary {
        let t = &summary.totals;
        json["database"] = summary.target.clone().into();
        json["import_seconds"] = summary.elapsed.as_secs_f64().into();
        (json["mode"], json["bulk_load"]) = bulk_json(summary.bulk);
        json["totals"] = serde_json::json!({
            "inputs": {
                "given": summary.inputs.len(), "imported": t.files_done,
                "skipped": t.files_skipped, "interrupted": t.files_interrupted,
                "failed": t.files_failed, "not_started": t.files_not_started,
            },
            "rejected_before": t.rejected_before,
        });
        merge(&mut json["totals"], games_json(&t.games));
        json["inputs"] = summary
            .inputs
            .iter()
            .map(|input| {
                let mut entry = serde_json::json!({
                    "input": input.input, "outcome": input.outcome.name(),
                    "error": input.error, "rejected_before": input.rejected_before,
                });
                merge(&mut entry, games_json(&input.games));
                entry
            })
            .collect();
    }
    json
}

/// Adds the members of `more` (an object) to `object`.
fn merge(object: &mut serde_json::Value, more: serde_json::Value) {
    if let (Some(object), serde_json::Value::Object(more)) = (object.as_object_mut(), more) {
        object.extend(more);
    }
}

/// The game, reject, position and move counts of `games`.
fn games_json(games: &BatchStats) -> serde_json::Value {
    let rejects: serde_json::Map<String, serde_json::Value> = games
        .rejects
        .counted()
        .map(|(kind, n)| (kind.name().to_owned(), n.into()))
        .collect();
    serde_json::json!({
        "games": {
            "read": games.read, "imported": games.imported, "present": games.present,
            "rejected": games.rejected, "filtered": games.filtered,
            "conflicts": games.conflicts, "backfilled": games.backfilled,
        },
        "rejects_by_reason": rejects,
        "positions": { "new": games.positions_new, "reused": games.positions_reused },
        "moves": games.moves,
    })
}

/// The load mode's name, and the bulk load's object (null without one).
fn bulk_json(bulk: BulkOutcome) -> (serde_json::Value, serde_json::Value) {
    match bulk {
        BulkOutcome::Incremental => ("incremental".into(), serde_json::Value::Null),
        BulkOutcome::NothingToLoad => ("bulk".into(), serde_json::Value::Null),
        BulkOutcome::Finished { load, report } => (
            "bulk".into(),
            serde_json::json!({
                "id": load, "finished": true,
                "duplicates_merged": report.duplicates_merged,
                "dedup_seconds": report.dedup_s, "rebuild_seconds": report.rebuild_s,
            }),
        ),
        BulkOutcome::Unfinished { load } => (
            "bulk".into(),
            serde_json::json!({ "id": load, "finished": false }),
        ),
    }
}

/// Shows an import on stderr: the progress bar (or log lines), the
/// messages of the run, the summary.
struct Printer {
    /// Locked for each update only (the engine reports from both write
    /// phases, which run on one task).
    progress: Mutex<Progress>,
    /// The steps of a bulk load's finish, after the inputs' bar is cleared.
    finish: Mutex<Progress>,
    /// `--quiet`: no progress, no bulk-finish steps, no advice; messages that need
    /// attention (retries, skipped or failed inputs) are still shown.
    quiet: bool,
    /// The run's summary, kept for `--summary-json`.
    summary: Mutex<Option<Summary>>,
}

impl Printer {
    fn bar(&self) -> std::sync::MutexGuard<'_, Progress> {
        // A panic while drawing leaves nothing half-done worth refusing.
        self.progress.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Reporter for Printer {
    fn input_opened(&self, name: &str, len: Option<u64>) {
        self.bar().start_input(name, len);
    }

    fn progress(&self, now: Snapshot) {
        self.bar().update(now);
    }

    fn inputs_ended(&self) {
        self.bar().finish();
    }

    fn notice(&self, notice: &Notice<'_>) {
        if let Notice::BulkLoad(_) = notice {
            // Above the finish's bar, which quiet keeps silent.
            self.step(Step::Said(&notice.to_string()));
        } else if !(self.quiet && matches!(notice, Notice::Advice(_))) {
            stderr_line!("pgnload: {notice}");
        }
    }

    fn step(&self, step: Step<'_>) {
        self.finish
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .show(step);
    }

    fn summary(&self, summary: &Summary) {
        self.finish
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .finish();
        print_summary(summary);
        *self.summary.lock().unwrap_or_else(PoisonError::into_inner) = Some(summary.clone());
    }
}

/// Prints the run's summary to stderr.
fn print_summary(summary: &Summary) {
    let t = &summary.totals;
    let g = t.games;
    let secs = summary.elapsed.as_secs_f64().max(1e-9);
    let positions = g.positions_new + g.positions_reused;
    stderr_line!("pgnload: import summary ({})", summary.target);
    let not_started = if t.files_not_started > 0 {
        format!(", {} not started", t.files_not_started)
    } else {
        String::new()
    };
    stderr_line!(
        "  inputs:    {} imported, {} skipped, {} interrupted, {} failed{not_started}",
        t.files_done,
        t.files_skipped,
        t.files_interrupted,
        t.files_failed
    );
    stderr_line!(
        "  games:     {} read = {} imported + {} already present + {} rejected + {} filtered",
        g.read,
        g.imported,
        g.present,
        g.rejected,
        g.filtered
    );
    if t.rejected_before > 0 {
        stderr_line!(
            "  rejects:   {} more in the inputs this run finished, rejected by earlier runs (import_rejects)",
            t.rejected_before
        );
    }
    if g.conflicts > 0 {
        stderr_line!(
            "  conflicts: {} of the present games hold an id already taken by other moves (import_conflicts)",
            g.conflicts
        );
    }
    if g.backfilled > 0 {
        stderr_line!(
            "  backfill:  {} of the present games got their positions and moves past their cap",
            g.backfilled
        );
    }
    stderr_line!(
        "  positions: {} new, {} reused; {:.1}% resolved in memory",
        g.positions_new,
        g.positions_reused,
        100.0 * g.memory_hit_rate()
    );
    stderr_line!("  moves:     {}", g.moves);
    match summary.bulk {
        BulkOutcome::NothingToLoad => {
            stderr_line!(
                "  mode:      bulk, but nothing to import: no load begun, indexes untouched"
            );
        }
        BulkOutcome::Incremental => stderr_line!("  mode:      incremental"),
        BulkOutcome::Finished { load, report: r } => stderr_line!(
            "  mode:      bulk (load #{load}); {} duplicate positions merged in {:.1} s; \
                 indexes rebuilt and tables analyzed in {:.1} s",
            r.duplicates_merged,
            r.dedup_s,
            r.rebuild_s
        ),
        BulkOutcome::Unfinished { load } => stderr_line!(
            "  mode:      bulk (load #{load}), unfinished: the indexes are rebuilt when a rerun completes"
        ),
    }
    stderr_line!(
        "  elapsed:   {secs:.2} s; {:.0} games/s, {:.0} positions/s, {:.0} moves/s",
        g.read as f64 / secs,
        positions as f64 / secs,
        g.moves as f64 / secs
    );
}
