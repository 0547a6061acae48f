//! Switching the explorer counters on and off for a database (`pgnload
//! db explorer enable|disable`), compacting them (`db explorer compact`),
//! and what every reader asks first: whether they are kept and complete.
//! Each switch holds the import lock exclusively, so that an import sees
//! one state for its whole run.

use tokio_postgres::{Client, GenericClient};

use super::{counting, sql};
use crate::{
    error::Error,
    progress::{Count, Step, Steps, Unit},
    store::progress::{IndexBuild, backend_pid, watching_index_builds},
};

/// Whether this database keeps the counters. An import reads it once,
/// with the import lock held (so [`enable`] and [`disable`], which take it
/// exclusively, cannot change it during the run); `lock` adds `FOR SHARE`,
/// for a transaction that must keep it unchanged until it commits.
pub async fn enabled(client: &impl GenericClient, lock: bool) -> Result<bool, Error> {
    let sql = if lock {
        "SELECT enabled FROM explorer_state FOR SHARE"
    } else {
        "SELECT enabled FROM explorer_state"
    };
    client
        .query_opt(sql, &[])
        .await
        .map_err(crate::store::db::db_err("reading explorer_state"))?
        .map(|row| row.get(0))
        .ok_or_else(|| {
            Error::inconsistent("explorer_state has no row (sql/0004_explorer.sql inserts it)")
        })
}

/// A configuration error unless the counters are kept: a database without
/// them would answer every question with nothing, which looks real. A
/// conflict while a bulk load holds or lost the rows of some games (their
/// records in `explorer_deferred`, see [`super::held`]): the counters lack them
/// until the load finishes. A conflict too while a bulk load is unfinished
/// ([`crate::ingest::bulk::unfinished`]), whatever the counters hold:
/// `positions` and `moves` then have no indexes and a position may be
/// listed twice (until the load's merge), so a reader's question would be
/// a scan of the whole tables (minutes on a large database, holding a lock
/// the load's finish waits for) or fail on the second row.
pub async fn require_usable(client: &impl GenericClient) -> Result<(), Error> {
    let enabled = enabled(client, false).await?;
    let uncounted: i64 = client
        .query_one(sql::UNCOUNTED, &[])
        .await
        .map_err(crate::store::db::db_err("reading explorer_deferred"))?
        .get(0);
    let load = crate::ingest::bulk::unfinished(client).await?;
    usable(Some(enabled), uncounted, load)
}

/// [`require_usable`]'s answer from what it reads: `explorer_state`'s
/// `enabled` (`None`: the table has no row), [`sql::UNCOUNTED`] and the
/// unfinished bulk load's id. (`explore` reads the three with its first
/// question, in one round trip.)
pub fn usable(enabled: Option<bool>, uncounted: i64, load: Option<i64>) -> Result<(), Error> {
    let Some(enabled) = enabled else {
        return Err(Error::inconsistent(
            "explorer_state has no row (sql/0004_explorer.sql inserts it)",
        ));
    };
    if !enabled {
        return Err(Error::Config(
            "this database keeps no explorer counters; run `pgnload db explorer enable` \
             (it counts the games already imported, and imports keep them from then on)"
                .to_owned(),
        ));
    }
    if uncounted > 0 {
        return Err(Error::Conflict(format!(
            "a bulk load has not counted {uncounted} of its games into the explorer counters \
             yet (it does at its finish): wait for it to end, or if it stopped, run `pgnload \
             import` again to finish it"
        )));
    }
    if let Some(load) = load {
        return Err(Error::Conflict(format!(
            "bulk load #{load} is unfinished: until it finishes, positions and moves have no \
             indexes and a position may be listed twice, so the explorer does not answer; wait \
             for it to end, or if it stopped, run `pgnload import` again to finish it"
        )));
    }
    Ok(())
}

/// What [`enable`] or [`disable`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Switched {
    /// The counters were already in the asked state; nothing changed.
    Already,
    /// The state changed; `rows` counter rows were written (enable) or
    /// removed (disable).
    Changed {
        /// Counter rows written or removed.
        rows: u64,
    },
}

/// Takes the import lock ([`bulk::LOCK`](crate::ingest::bulk::LOCK))
/// exclusively for this session, calling `waiting` first if imports hold
/// it: no import runs while the counters are switched, so each import sees
/// one state for its whole run.
async fn lock_imports(client: &Client, waiting: &dyn Fn()) -> Result<(), Error> {
    if !try_lock_imports(client).await? {
        waiting();
        client
            .execute("SELECT pg_advisory_lock($1)", &[&crate::ingest::bulk::LOCK])
            .await
            .map_err(crate::store::db::db_err("waiting for the import lock"))?;
    }
    Ok(())
}

/// Takes the import lock exclusively for this session if nobody else
/// holds it (a lock this session holds already does not count): whether
/// it was taken.
pub(super) async fn try_lock_imports(client: &Client) -> Result<bool, Error> {
    Ok(client
        .query_one(
            "SELECT pg_try_advisory_lock($1)",
            &[&crate::ingest::bulk::LOCK],
        )
        .await
        .map_err(crate::store::db::db_err("taking the import lock"))?
        .get(0))
}

/// Starts keeping the counters: with the import lock held exclusively
/// (`waiting` is called if imports hold it), and refused while a bulk load
/// is unfinished (its games get counted only at its finish), counts every
/// game already in the database and sets the flag, in one transaction: a
/// crash leaves the counters either off and empty or on and complete.
/// The table is filled without its primary key, which is added back
/// after (one index build instead of one insert per row into it). Each of
/// the two is a phase of `steps`; the key's build is watched on `monitor`
/// (another connection: this one is busy building it).
pub async fn enable(
    client: &mut Client,
    waiting: &dyn Fn(),
    monitor: &Client,
    steps: Steps<'_>,
) -> Result<Switched, Error> {
    let err = crate::store::db::db_err;
    lock_imports(client, waiting).await?;
    let pid = backend_pid(client).await?;
    if let Some(load) = crate::ingest::bulk::unfinished(client).await? {
        return Err(Error::Conflict(format!(
            "bulk load {load} is unfinished: run `pgnload import` again to finish it, then enable \
             the explorer counters"
        )));
    }
    let tx = client
        .transaction()
        .await
        .map_err(err("starting to enable the explorer counters"))?;
    let on: bool = tx
        .query_one("SELECT enabled FROM explorer_state FOR UPDATE", &[])
        .await
        .map_err(err("reading explorer_state"))?
        .get(0);
    if on {
        return Ok(Switched::Already);
    }
    // Disabled means empty (disable truncates in the flag's transaction).
    counting::advance_epoch(&tx).await?;
    steps(Step::Phase(
        "counting the games imported into the explorer counters",
    ));
    let rows = match crate::store::shards::layout(&tx).await? {
        None => {
            tx.batch_execute("ALTER TABLE explorer_moves DROP CONSTRAINT explorer_moves_pkey")
                .await
                .map_err(err("dropping the explorer counters' key"))?;
            let rows = tx
                .execute(sql::INSERT_SHARED_ALL, &[])
                .await
                .map_err(err("counting the games into the explorer counters"))?;
            steps(Step::Phase("building the explorer counters' key"));
            let show = |builds: &[IndexBuild]| show_builds(builds, steps);
            watching_index_builds(
                monitor,
                &[pid],
                &show,
                tx.batch_execute(sql::ADD_PRIMARY_KEY),
            )
            .await
            .map_err(err("building the explorer counters' key"))?;
            rows
        }
        // Shards: no key to drop; each row counts the games of one shard,
        // anchored on one of them (see crate::store::shards).
        Some(shards) => tx
            .execute(
                &sql::insert_by_shard(&shards.shard_of("games", "game_id")),
                &[],
            )
            .await
            .map_err(err("counting the games into the explorer counters"))?,
    };
    tx.execute(
        "UPDATE explorer_state SET enabled = true, changed_at = now()",
        &[],
    )
    .await
    .map_err(err("recording the explorer counters enabled"))?;
    tx.commit()
        .await
        .map_err(err("committing the explorer counters"))?;
    Ok(Switched::Changed { rows })
}

/// An index build as a count of `steps`: PostgreSQL's share of its
/// current phase, in percent, when it counts one.
fn show_builds(builds: &[IndexBuild], steps: Steps<'_>) {
    for build in builds {
        steps(Step::Count(Count {
            done: 0,
            total: None,
            unit: Unit::Items,
            detail: &build.describe(),
        }));
    }
}

/// What [`compact`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compacted {
    /// A single node: the queued positions counted.
    Queue {
        /// Positions taken from `explorer_pending`.
        positions: u64,
    },
    /// A sharded layout: counter rows before and after.
    Shards {
        /// Rows before.
        before: u64,
        /// Rows after: one per key and shard.
        after: u64,
    },
}

/// On a single node, counts the positions queued in `explorer_pending`
/// ([`counting::count_pending`]), with the import lock taken exclusively (`waiting`
/// is called if imports hold it), so that `explore` reads their rows
/// instead of grouping their games.
///
/// On a sharded layout, folds each shard's counter rows into one per key (a
/// batch adds rows rather than updating them, see the module doc), so that
/// `explore` sums few rows however many batches counted a position.
///
/// Each shard is folded in one transaction of its own (`postgres_fdw`
/// reads and writes a shard in one remote transaction, at one snapshot):
/// its rows are deleted and their sums inserted back on that shard,
/// anchored on the lowest of their anchors, which is on that shard. Rows
/// an import adds meanwhile are not in the snapshot and stay as they are,
/// so the counts stay exact while imports run. Each count, and each
/// shard, is a phase of `steps`.
///
/// # Panics
///
/// Never: `count(*)` is not negative.
pub async fn compact(
    client: &mut Client,
    waiting: &dyn Fn(),
    steps: Steps<'_>,
) -> Result<Compacted, Error> {
    let err = crate::store::db::db_err;
    let Some(shards) = crate::store::shards::layout(&*client).await? else {
        lock_imports(client, waiting).await?;
        steps(Step::Phase("counting the positions imports queued"));
        return Ok(Compacted::Queue {
            positions: counting::count_pending(client).await?,
        });
    };
    let (mut before_all, mut after_all) = (0u64, 0u64);
    for shard in 0..shards.count() {
        let table = format!("explorer_moves_shard_{shard}");
        steps(Step::Phase(&format!(
            "compacting {table} ({} of {})",
            shard + 1,
            shards.count()
        )));
        let tx = client
            .transaction()
            .await
            .map_err(err(format!("starting to compact {table}")))?;
        let before: i64 = tx
            .query_one(&format!("SELECT count(*) FROM {table}"), &[])
            .await
            .map_err(err(format!("counting {table}")))?
            .get(0);
        let after = tx
            .execute(&sql::compact_shard(&table), &[])
            .await
            .map_err(err(format!("compacting {table}")))?;
        tx.commit()
            .await
            .map_err(err(format!("committing the compaction of {table}")))?;
        before_all += u64::try_from(before).expect("count(*) is never negative");
        after_all += after;
    }
    Ok(Compacted::Shards {
        before: before_all,
        after: after_all,
    })
}

/// Stops keeping the counters: with the import lock held exclusively,
/// empties the table and clears the flag in one transaction.
///
/// # Panics
///
/// Never: `count(*)` is not negative.
pub async fn disable(client: &mut Client, waiting: &dyn Fn()) -> Result<Switched, Error> {
    let err = crate::store::db::db_err;
    lock_imports(client, waiting).await?;
    let tx = client
        .transaction()
        .await
        .map_err(err("starting to disable the explorer counters"))?;
    let on: bool = tx
        .query_one("SELECT enabled FROM explorer_state FOR UPDATE", &[])
        .await
        .map_err(err("reading explorer_state"))?
        .get(0);
    if !on {
        return Ok(Switched::Already);
    }
    let rows: i64 = tx
        .query_one("SELECT count(*) FROM explorer_moves", &[])
        .await
        .map_err(err("counting the explorer counters"))?
        .get(0);
    tx.batch_execute(
        "TRUNCATE explorer_moves, explorer_pending, explorer_deferred;
         UPDATE explorer_state SET enabled = false, changed_at = now();",
    )
    .await
    .map_err(err("emptying the explorer counters"))?;
    tx.commit()
        .await
        .map_err(err("committing the explorer counters disabled"))?;
    Ok(Switched::Changed {
        rows: u64::try_from(rows).expect("count(*) is never negative"),
    })
}
