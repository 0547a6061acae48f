//! The engine of `pgnload verify`: streams rows out of the database (or
//! lines out of a digest file), runs the pure checks of [`super::checks`]
//! and [`super::digest`] over them in parallel, and writes every finding to
//! the report. Three modes:
//!
//! * positions (default): every `positions` row is streamed out with
//!   `COPY … TO STDOUT (FORMAT binary)`, in batches through a bounded
//!   channel to a checker thread that runs [`super::check_position`] over
//!   each batch on the rayon pool. The database produces rows while the
//!   previous batch is checked, so the run goes at about the speed of a bare
//!   COPY.
//! * digests: an external digest file (Python, a legacy system) is checked
//!   line by line against its FENs and, optionally, against `positions`.
//! * games: games are replayed from `games.moves` and compared with their
//!   `moves` rows and the positions those reference; fetched a batch of
//!   games at a time through a server-side cursor, with one query for the
//!   batch's moves and one for its positions.
//!
//! One file per mode (`positions`, `games`, `digests`); this one holds
//! what they share: the options, the run, the interrupt, the sampling SQL.
//!
//! It knows nothing of the command line (no clap, nothing printed to
//! stdout): `cmd::verify` turns flags into [`Options`] and prints the
//! [`Outcome`]. It writes nothing to the database.

mod digests;
mod games;
mod positions;

use std::{
    fmt::Write as _,
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use tokio::runtime::Runtime;
use tokio_postgres::Client;

use self::{digests::verify_digests, games::verify_games, positions::verify_positions};
use super::{IdRange, KindCounts, Report, SignMode};
use crate::{config::Settings, error::Error, progress::Progress};

/// Which rows of `positions` or `games` are checked: the sampling options,
/// already validated (a fraction BERNOULLI can sample, a limit a bigint
/// holds), since they are written into the SQL.
#[derive(Debug, Clone, Copy, Default)]
pub struct Selection {
    /// Check a random sample of this fraction of the rows.
    pub sample: Option<f64>,
    /// Only rows with ids in this range.
    pub id_range: Option<IdRange>,
    /// At most this many rows, the lowest ids.
    pub limit: Option<u64>,
    /// Whether the tables are partitioned over shards, where PostgreSQL
    /// ignores TABLESAMPLE (set by `for_layout`, not by the options).
    pub sharded: bool,
}

/// `rows` for the database of `client`: sampled with a filter on a
/// sharded layout, whose foreign partitions PostgreSQL does not sample
/// (it reads them whole, silently).
async fn for_layout(client: &Client, rows: &Selection) -> Result<Selection, Error> {
    Ok(Selection {
        sharded: crate::store::shards::layout(client).await?.is_some(),
        ..*rows
    })
}

/// What one run checks.
#[derive(Debug, Clone)]
pub enum Check {
    /// Every selected `positions` row.
    Positions {
        /// Also check that every FEN is what python-chess writes (slower).
        canonical: bool,
    },
    /// Every selected game, replayed.
    Games,
    /// A digest file.
    Digests {
        /// The input, named as `import` names inputs (`-` is stdin).
        file: String,
        /// Also look every FEN up in `positions`.
        against_db: bool,
        /// How the file's digests are read.
        sign: SignMode,
    },
}

impl Check {
    /// The report's first column: what a finding is numbered by.
    pub fn first_column(&self) -> &'static str {
        match self {
            Check::Digests { .. } => "line",
            Check::Positions { .. } | Check::Games => "id",
        }
    }

    /// What is counted, for progress and the summary.
    pub fn noun(&self) -> &'static str {
        match self {
            Check::Positions { .. } => "positions",
            Check::Games => "games",
            Check::Digests { .. } => "lines",
        }
    }
}

/// What a run checks and where it reports (the database comes from the
/// settings).
#[derive(Debug, Clone)]
pub struct Options {
    /// What is checked.
    pub check: Check,
    /// Which rows (not used for digest files).
    pub selection: Selection,
    /// Where the TSV report goes (overwritten).
    pub report: PathBuf,
}

/// What a run found, for the summary.
#[derive(Debug)]
pub struct Outcome {
    /// The report written.
    pub report: PathBuf,
    /// Findings per kind.
    pub counts: KindCounts,
    /// The mode's extra summary lines.
    pub extra: Vec<String>,
    /// Whether every selected row (line) was checked; `false` after a signal.
    pub complete: bool,
}

/// Runs one check, writing the report. The report (its header) is created
/// first, so the caller's signal handling must be in place before this is
/// called. Whatever happens, the findings so far are flushed to the report.
pub fn verify(
    options: &Options,
    settings: &Settings,
    runtime: &Runtime,
    interrupt: &Interrupt,
    progress: &mut Progress,
) -> Result<Outcome, Error> {
    let mut report = Report::create(options.report.clone(), options.check.first_column())?;
    let run = Run {
        selection: &options.selection,
        settings,
        runtime,
        interrupt,
        meter: progress,
        report: &mut report,
    };
    let checked = match &options.check {
        Check::Positions { canonical } => verify_positions(*canonical, run),
        Check::Games => verify_games(run),
        Check::Digests {
            file,
            against_db,
            sign,
        } => verify_digests(file, *against_db, *sign, run),
    };
    // Whatever happened, keep the findings written so far.
    let (report, counts) = report.finish()?;
    let Checked { extra, complete } = checked?;
    Ok(Outcome {
        report,
        counts,
        extra,
        complete,
    })
}

/// Ctrl-C / SIGTERM as the checks see it: the first stops reading at the
/// next batch (or at once while waiting on the database), the findings so
/// far are flushed and the summary says the run is partial (exit 3).
pub struct Interrupt(Arc<AtomicUsize>);

/// How often a wait on the database looks at the interrupt flag.
const INTERRUPT_POLL: Duration = Duration::from_millis(50);

impl Interrupt {
    /// Watches `signals`, the count of signals received (kept by the
    /// binary's signal handler).
    pub fn new(signals: Arc<AtomicUsize>) -> Interrupt {
        Interrupt(signals)
    }

    fn requested(&self) -> bool {
        self.0.load(Ordering::SeqCst) > 0
    }

    /// `work`'s output, or `None` if a signal came first (`work` is dropped:
    /// every await in it must be a safe place to stop).
    async fn or_stop<T>(&self, work: impl Future<Output = T>) -> Option<T> {
        let signalled = async {
            while !self.requested() {
                tokio::time::sleep(INTERRUPT_POLL).await;
            }
        };
        tokio::select! {
            biased;
            () = signalled => None,
            out = work => Some(out),
        }
    }
}

/// What one check mode did.
struct Checked {
    /// Extra summary lines.
    extra: Vec<String>,
    /// Whether every selected row (line) was checked; `false` after a signal.
    complete: bool,
}

impl Checked {
    /// Stopped by a signal before anything was checked.
    fn stopped() -> Checked {
        Checked {
            extra: Vec::new(),
            complete: false,
        }
    }
}

/// One verify run: what every check mode needs.
struct Run<'a> {
    selection: &'a Selection,
    settings: &'a Settings,
    runtime: &'a Runtime,
    interrupt: &'a Interrupt,
    meter: &'a mut Progress,
    report: &'a mut Report,
}

/// The rows that the sampling options select, as SQL clauses after
/// `FROM table`; in id order when `ordered` or with `--limit` (which keeps
/// the lowest ids). Only validated numbers are interpolated.
fn selection_sql(rows: &Selection, ordered: bool) -> String {
    let mut sql = String::new();
    let mut filters = Vec::new();
    match rows.sample {
        Some(fraction) if rows.sharded => filters.push(format!("random() < {fraction}")),
        Some(fraction) => {
            let _ = write!(sql, " TABLESAMPLE BERNOULLI ({})", fraction * 100.0);
        }
        None => {}
    }
    if let Some(range) = rows.id_range {
        filters.push(format!("id BETWEEN {} AND {}", range.start, range.end));
    }
    if !filters.is_empty() {
        sql.push_str(" WHERE ");
        sql.push_str(&filters.join(" AND "));
    }
    if ordered || rows.limit.is_some() {
        sql.push_str(" ORDER BY id");
    }
    if let Some(limit) = rows.limit {
        let _ = write!(sql, " LIMIT {limit}");
    }
    sql
}

/// The planner's row count of `table` scaled by the options, for the
/// progress bar; `None` when unknown (never analyzed, or an id range).
async fn estimate(client: &Client, table: &str, rows: &Selection) -> Option<u64> {
    if rows.id_range.is_some() {
        return rows.limit;
    }
    let row = client
        .query_opt(
            "SELECT reltuples::float8 FROM pg_class WHERE oid = to_regclass($1)",
            &[&table],
        )
        .await
        .ok()??;
    let tuples: f64 = row.try_get(0).ok()?;
    let tuples = (tuples >= 0.0).then_some(tuples * rows.sample.unwrap_or(1.0))?;
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "a rounded estimate, non-negative (checked above); `as` saturates \
                  beyond u64, which is what a progress bar wants"
    )]
    let tuples = tuples.round() as u64;
    Some(rows.limit.map_or(tuples, |l| l.min(tuples)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiny_fractions_are_written_without_exponents() {
        for sample in [0.000_000_1, 1.0 / 4_294_967_296.0] {
            let rows = Selection {
                sample: Some(sample),
                ..Selection::default()
            };
            let sql = selection_sql(&rows, false);
            assert!(sql.contains("BERNOULLI (0.0000"), "{sql}");
            assert!(!sql.contains('e'), "{sql}");
        }
    }
}
