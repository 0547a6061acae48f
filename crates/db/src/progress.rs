//! What a long operation tells its front end while it runs ([`Step`]),
//! and what PostgreSQL itself knows of an index build's progress
//! (`pg_stat_progress_create_index`, read from a second connection while
//! the building one is busy).
//!
//! The steps are defined here, in the lowest crate that runs long
//! operations (backup and restore), so that every layer reports in one
//! vocabulary; how they are shown (a bar, log lines, nothing with
//! `--quiet`) is `pgnload::progress`'s alone.

use std::{fmt::Write as _, future::Future, time::Duration};

use tokio_postgres::Client;

/// One report of a long operation in progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step<'a> {
    /// A message shown once, as a line of its own (what is about to be
    /// done, with which tool, where).
    Said(&'a str),
    /// A named phase begins; it lasts until the next one (or the end).
    Phase(&'a str),
    /// Where the current phase stands.
    Count(Count<'a>),
}

/// How far the current phase is: `done` of `total` (`None`: not known, so
/// no share and no ETA can be shown), with what is under way (`detail`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Count<'a> {
    /// Units done.
    pub done: u64,
    /// Units in all, when known.
    pub total: Option<u64>,
    /// What is counted.
    pub unit: Unit,
    /// What is under way, possibly empty.
    pub detail: &'a str,
}

/// What a [`Count`] counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Bytes (shown as KiB, MiB, …).
    Bytes,
    /// Steps of a known list (tables, indexes).
    Items,
}

/// Where a long operation's steps go: a front end's function, called from
/// whichever thread or task runs the step.
pub type Steps<'a> = &'a (dyn Fn(Step<'_>) + Sync);

/// One index build in progress, as `pg_stat_progress_create_index` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexBuild {
    /// The index (or, before it has a name, its table).
    pub name: String,
    /// PostgreSQL's name of the phase ("building index: scanning table", …).
    pub phase: String,
    /// Table blocks scanned, of `blocks_total` (0: not this phase's measure).
    pub blocks_done: i64,
    /// Table blocks to scan.
    pub blocks_total: i64,
    /// Tuples loaded into the index, of `tuples_total`.
    pub tuples_done: i64,
    /// Tuples to load.
    pub tuples_total: i64,
}

impl IndexBuild {
    /// The build as a short text: its name, phase and, when PostgreSQL
    /// counts the phase, its share done (blocks while scanning, tuples
    /// while loading). Nothing is guessed for a phase it does not count.
    pub fn describe(&self) -> String {
        let phase = self
            .phase
            .strip_prefix("building index: ")
            .unwrap_or(&self.phase);
        let mut text = format!("{} ({phase}", self.name);
        let share = if self.blocks_total > 0 && self.blocks_done <= self.blocks_total {
            Some((self.blocks_done, self.blocks_total))
        } else if self.tuples_total > 0 && self.tuples_done <= self.tuples_total {
            Some((self.tuples_done, self.tuples_total))
        } else {
            None
        };
        if let Some((done, total)) = share {
            let _ = write!(text, " {}%", done * 100 / total);
        }
        text.push(')');
        text
    }
}

/// The index builds running now on the backends `pids`.
const INDEX_BUILDS_SQL: &str = "
SELECT coalesce(nullif(index_relid, 0)::regclass::text, relid::regclass::text),
       phase, blocks_done, blocks_total, tuples_done, tuples_total
FROM pg_stat_progress_create_index
WHERE pid = ANY($1)
ORDER BY pid";

/// The index builds running now on the backends `pids`, read on `monitor`.
pub async fn index_builds(
    monitor: &Client,
    pids: &[i32],
) -> Result<Vec<IndexBuild>, tokio_postgres::Error> {
    Ok(monitor
        .query(INDEX_BUILDS_SQL, &[&pids])
        .await?
        .iter()
        .map(|row| IndexBuild {
            name: row.get(0),
            phase: row.get(1),
            blocks_done: row.get(2),
            blocks_total: row.get(3),
            tuples_done: row.get(4),
            tuples_total: row.get(5),
        })
        .collect())
}

/// One `COPY … TO` in progress (`pg_stat_progress_copy`, PostgreSQL 14
/// and later), with its table's row estimate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyOut {
    /// The table copied.
    pub table: String,
    /// Rows copied so far.
    pub rows: i64,
    /// The planner's estimate of the table's rows (`pg_class.reltuples`;
    /// not positive when the table was never analyzed).
    pub estimate: i64,
}

impl CopyOut {
    /// The copy as a short text: rows so far, of about the estimate when
    /// there is one (an estimate, and said to be one).
    pub fn describe(&self) -> String {
        if self.estimate > 0 {
            format!(
                "{} {} of about {} rows",
                self.table, self.rows, self.estimate
            )
        } else {
            format!("{} {} rows", self.table, self.rows)
        }
    }
}

/// The `COPY … TO` of the sessions named `application` in this database.
const COPIES_SQL: &str = "
SELECT c.relid::regclass::text, c.tuples_processed, greatest(t.reltuples, 0)::bigint
FROM pg_stat_progress_copy c
JOIN pg_stat_activity a ON a.pid = c.pid
JOIN pg_class t ON t.oid = c.relid
WHERE a.application_name = $1 AND c.datname = current_database() AND c.command = 'COPY TO'
ORDER BY c.pid";

/// The `COPY … TO` of the sessions named `application` (a tool started
/// with that `application_name`), read on `monitor`. PostgreSQL before 14
/// has no such view: the error says so, and the caller shows no rows.
pub async fn copies_out(
    monitor: &Client,
    application: &str,
) -> Result<Vec<CopyOut>, tokio_postgres::Error> {
    Ok(monitor
        .query(COPIES_SQL, &[&application])
        .await?
        .iter()
        .map(|row| CopyOut {
            table: row.get(0),
            rows: row.get(1),
            estimate: row.get(2),
        })
        .collect())
}

/// How often a running index build is looked at.
pub const POLL_EVERY: Duration = Duration::from_millis(500);

/// Runs `work`, calling `show` with the index builds of the backends
/// `pids` (read on `monitor`, a connection `work` does not use) every
/// [`POLL_EVERY`] until it ends. A failed look is skipped: progress is
/// never worth failing the work it watches, which reports its own errors.
pub async fn watching_index_builds<T>(
    monitor: &Client,
    pids: &[i32],
    show: &(dyn Fn(&[IndexBuild]) + Sync),
    work: impl Future<Output = T>,
) -> T {
    let mut work = std::pin::pin!(work);
    let mut tick = tokio::time::interval(POLL_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            done = &mut work => return done,
            _ = tick.tick() => {
                if let Ok(builds) = index_builds(monitor, pids).await {
                    show(&builds);
                }
            }
        }
    }
}

/// The backend pid of `client`'s session, for [`watching_index_builds`].
pub async fn backend_pid(client: &Client) -> Result<i32, crate::Error> {
    Ok(client
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .map_err(crate::db::db_err("reading the session's pid"))?
        .get(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(phase: &str, blocks: (i64, i64), tuples: (i64, i64)) -> IndexBuild {
        IndexBuild {
            name: "moves_pkey".into(),
            phase: phase.into(),
            blocks_done: blocks.0,
            blocks_total: blocks.1,
            tuples_done: tuples.0,
            tuples_total: tuples.1,
        }
    }

    #[test]
    fn a_copy_shows_its_rows_and_the_estimate_only_when_there_is_one() {
        let copy = |estimate| CopyOut {
            table: "public.moves".into(),
            rows: 1200,
            estimate,
        };
        assert_eq!(
            copy(3400).describe(),
            "public.moves 1200 of about 3400 rows"
        );
        assert_eq!(copy(0).describe(), "public.moves 1200 rows");
    }

    #[test]
    fn a_build_shows_the_share_postgresql_counts_and_no_other() {
        assert_eq!(
            build("building index: scanning table", (25, 100), (0, 0)).describe(),
            "moves_pkey (scanning table 25%)"
        );
        assert_eq!(
            build("building index: loading tuples in tree", (0, 0), (3, 4)).describe(),
            "moves_pkey (loading tuples in tree 75%)"
        );
        // Sorting has no count: no share is made up for it.
        assert_eq!(
            build("building index: sorting live tuples", (0, 0), (0, 0)).describe(),
            "moves_pkey (sorting live tuples)"
        );
        assert_eq!(
            build("initializing", (0, 0), (0, 0)).describe(),
            "moves_pkey (initializing)"
        );
        // A count past its total (a concurrent insert) shows no share over 100%.
        assert_eq!(
            build("building index: scanning table", (120, 100), (0, 0)).describe(),
            "moves_pkey (scanning table)"
        );
    }
}
