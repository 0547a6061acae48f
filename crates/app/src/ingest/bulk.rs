//! Bulk loads: a backfill into an empty (or small) database at the speed of
//! PostgreSQL's own `COPY`, not of its index maintenance.
//!
//! The unique text index on `positions.normalized_fen` makes every new
//! position cost a random B-tree probe and insert; in a backfill those
//! dominate everything else. A bulk load therefore:
//!
//! 1. takes the database for itself (the exclusive side of [`LOCK`];
//!    incremental importers hold the shared side, so they wait for the
//!    bulk load and it waits for them);
//! 2. drops the indexes and constraints of `positions` and `moves`, and the
//!    foreign keys and plain indexes of `games`, recording each with its
//!    `CREATE` statement in `import_bulk_objects` in the same transaction
//!    (`games` keeps its primary and unique keys and the index on the
//!    content digest of non-Lichess games: they are how a re-imported game
//!    is recognized, and cost one probe per game);
//! 3. dedups positions in the importer: the position map
//!    ([`crate::ingest::dedup::PositionCache`]) is the dedup, a miss gets the next
//!    id ([`crate::ingest::writer::IdSequence`]) and is `COPY`ed straight in, and
//!    so are games;
//! 4. finishes ([`finish`]): merges duplicate positions if any can exist
//!    (the table was not empty, a run resumed the load, or the map had to
//!    evict), rebuilds the recorded objects on two connections at once,
//!    validates the foreign keys as they are added, analyzes the tables,
//!    and queues for the explorer counters the positions of games whose
//!    held counter rows a run lost ([`explorer::queue_deferred`]).
//!
//! Tables stay logged throughout: an unlogged table is emptied by a server
//! crash, which would break "crash, rerun, same database". A crash of the
//! importer at any point is resumable: every batch commits with its
//! checkpoint as in incremental mode, and a rerun of any `pgnload import`
//! sees the unfinished load, drops again whatever a half-done finish
//! rebuilt, continues the inputs and finishes. While a load is unfinished
//! the tables have no indexes: queries work but are slow.
//!
//! No step may leave the database in a state a rerun cannot finish.

use std::{
    collections::VecDeque,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use futures_util::{StreamExt, stream::FuturesUnordered};
use tokio_postgres::{Client, GenericClient};

use crate::{
    config::LoadMode,
    error::Error,
    explorer::{self, held::HeldRows},
    ingest::{
        report::{Notice, Reporter},
        writer::{self, IdSequence, WriteMode},
    },
    progress::{Count, Step, Unit},
    store::{
        db::{self, Target, db_err},
        progress::{IndexBuild, backend_pid, watching_index_builds},
    },
};

/// Advisory lock key: held exclusively by a bulk load, shared by
/// incremental imports ("pgnload bulk").
pub const LOCK: i64 = 0x7067_6e6c_6275_6c6b;

/// Advisory lock key held (shared, for the session) by every run that
/// holds or awaits [`LOCK`] exclusively for a bulk load ("pgnlbrun"):
/// it tells a bulk load from the other exclusive holders (`db explorer`,
/// an import counting queued positions), which a single-game change waits
/// for while it refuses to wait for a bulk load (see
/// [`run_waiting_or_starting`]). Nobody takes it exclusively, so taking it
/// never waits.
pub const RUN: i64 = 0x7067_6e6c_6272_756e;

/// Marks this session as a bulk load's ([`RUN`]).
async fn mark_bulk_run(control: &Client) -> Result<(), Error> {
    control
        .execute("SELECT pg_advisory_lock_shared($1)", &[&RUN])
        .await
        .map_err(db_err("marking the session a bulk load's"))?;
    Ok(())
}

/// Whether a bulk load's run holds or awaits the import lock ([`RUN`] is
/// held), read from `pg_locks` (as `status` reads the inputs' locks):
/// taking the marker would make that run wait.
pub async fn run_waiting_or_starting(client: &impl GenericClient) -> Result<bool, Error> {
    Ok(client
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_locks
                 WHERE locktype = 'advisory' AND objsubid = 1 AND granted
                   AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
                   AND ((classid::bigint << 32) | objid::bigint) = $1)",
            &[&RUN],
        )
        .await
        .map_err(db_err("reading pg_locks"))?
        .get(0))
}

/// The mode a run got, with the lock that goes with it held on the
/// control connection. (What the user asked for is a
/// [`LoadMode`]; how the writer assigns ids is a
/// [`WriteMode`], once a bulk load has begun.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Chosen {
    /// Exclusive lock held; `resuming` when an unfinished load exists.
    Bulk {
        /// Whether an earlier run's load is being continued.
        resuming: bool,
    },
    /// Shared lock held.
    Incremental,
}

impl Chosen {
    /// Takes this mode's side of [`LOCK`] again without waiting, after the
    /// session that held it was lost (someone taking it meanwhile is not
    /// safe to join). Returns whether it was taken.
    pub async fn relock(self, control: &Client) -> Result<bool, Error> {
        let sql = match self {
            Chosen::Bulk { .. } => "SELECT pg_try_advisory_lock($1)",
            Chosen::Incremental => "SELECT pg_try_advisory_lock_shared($1)",
        };
        let taken = control
            .query_one(sql, &[&LOCK])
            .await
            .map_err(db_err("re-taking the import lock"))?
            .get(0);
        if taken && let Chosen::Bulk { .. } = self {
            mark_bulk_run(control).await?;
        }
        Ok(taken)
    }
}

/// Decides the mode and takes its lock. Returns `None` if the lock is
/// taken and `no_wait` is set. An explicit mode is obeyed or refused, never
/// changed: `--mode incremental` waits for a running bulk load to end and
/// refuses to write into a database whose bulk load stopped unfinished
/// (its tables have no indexes); `--mode bulk` waits for running imports.
/// `--mode auto` continues an unfinished bulk load (the tables have no
/// indexes until it finishes), else picks by the database's size, but
/// never bulk on a `shared` database (one given by URL, see
/// [`auto_may_bulk_load`]) that already holds games.
pub async fn choose(
    control: &Client,
    requested: LoadMode,
    incoming_positions: u64,
    shared: bool,
    no_wait: bool,
    reporter: &dyn Reporter,
) -> Result<Option<Chosen>, Error> {
    let try_lock = |sql: &'static str| async move {
        control
            .query_one(sql, &[&LOCK])
            .await
            .map(|row| row.get::<_, bool>(0))
            .map_err(db_err("taking the import lock"))
    };
    let lock = |sql: &'static str| async move {
        control
            .execute(sql, &[&LOCK])
            .await
            .map_err(db_err("waiting for the import lock"))
    };
    loop {
        let open = unfinished(control).await?;
        let want_bulk = match requested {
            LoadMode::Bulk => true,
            LoadMode::Incremental => false,
            LoadMode::Auto => {
                open.is_some()
                    || (auto_may_bulk_load(control, shared).await?
                        && position_count(control, incoming_positions).await? <= incoming_positions)
            }
        };
        if want_bulk {
            if try_lock("SELECT pg_try_advisory_lock($1)").await? {
                mark_bulk_run(control).await?;
                return Ok(Some(Chosen::Bulk {
                    resuming: unfinished(control).await?.is_some(),
                }));
            }
            if open.is_some() || requested == LoadMode::Bulk {
                if no_wait {
                    return Ok(None);
                }
                // Before the wait: a single-game change meanwhile is
                // refused, not queued behind the load.
                mark_bulk_run(control).await?;
                reporter.notice(&Notice::WaitingForImports);
                lock("SELECT pg_advisory_lock($1)").await?;
                return Ok(Some(Chosen::Bulk {
                    resuming: unfinished(control).await?.is_some(),
                }));
            }
            // Auto, and others are importing: join them incrementally.
        }
        if !try_lock("SELECT pg_try_advisory_lock_shared($1)").await? {
            if no_wait {
                return Ok(None);
            }
            reporter.notice(&Notice::WaitingForBulkLoad);
            lock("SELECT pg_advisory_lock_shared($1)").await?;
        }
        let Some(load) = unfinished(control).await? else {
            return Ok(Some(Chosen::Incremental));
        };
        lock("SELECT pg_advisory_unlock_shared($1)").await?;
        if requested == LoadMode::Incremental {
            return Err(Error::Conflict(format!(
                "bulk load #{load} stopped unfinished: positions and moves have no indexes until it \
                 finishes, so --mode incremental will not write into them. Finish it with \
                 `pgnload import --mode bulk` (or --mode auto) and the inputs of the stopped load, \
                 then import incrementally"
            )));
        }
        // Auto: a bulk load began (and stopped unfinished) while we
        // waited; go round and continue it.
    }
}

/// Whether `--mode auto` may begin a bulk load here: always on the
/// embedded cluster, which is pgnload's alone; on a `shared` database (any
/// `--database-url`, a server pgnload does not own) only while it holds no
/// game. A bulk load drops the indexes of `positions`, `moves` and
/// `games` until it finishes, and other users' queries on a server that
/// already holds games rely on them; so there the default stays
/// incremental and a bulk load is only begun when asked for (`--mode
/// bulk`). An empty database has nobody to slow down: the first backfill
/// of a new server still gets one.
async fn auto_may_bulk_load(control: &Client, shared: bool) -> Result<bool, Error> {
    if !shared {
        return Ok(true);
    }
    let holds_games: bool = control
        .query_one("SELECT EXISTS (SELECT 1 FROM games)", &[])
        .await
        .map_err(db_err("looking for games"))?
        .get(0);
    Ok(!holds_games)
}

/// Positions in the table, counted up to `limit + 1` at most (an exact
/// count of a billion rows would take minutes; the planner's estimate is
/// used when the table was analyzed).
async fn position_count(client: &Client, limit: u64) -> Result<u64, Error> {
    let estimate: f32 = client
        .query_one(
            "SELECT reltuples FROM pg_class WHERE oid = 'positions'::regclass",
            &[],
        )
        .await
        .map_err(db_err("estimating the positions table"))?
        .get(0);
    if estimate >= 0.0 && f64::from(estimate) > 1e6 {
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "non-negative, checked above; a row estimate is far below 2^64 \
                      (and an estimate's fraction means nothing)"
        )]
        return Ok(estimate as u64);
    }
    let limit = i64::try_from(limit.saturating_add(1)).unwrap_or(i64::MAX);
    let count: i64 = client
        .query_one(
            "SELECT count(*) FROM (SELECT 1 FROM positions LIMIT $1) p",
            &[&limit],
        )
        .await
        .map_err(db_err("counting positions"))?
        .get(0);
    Ok(u64::try_from(count).expect("count(*) is never negative"))
}

/// The unfinished bulk load, if any.
pub async fn unfinished(client: &impl GenericClient) -> Result<Option<i64>, Error> {
    Ok(client
        .query_opt(
            "SELECT id FROM import_bulk_loads WHERE state <> 'done'",
            &[],
        )
        .await
        .map_err(db_err("reading import_bulk_loads"))?
        .map(|row| row.get("id")))
}

/// A bulk load in progress.
#[derive(Debug)]
pub struct BulkLoad {
    /// `import_bulk_loads.id`.
    pub id: i64,
    /// [`WriteMode::Bulk`], with the next ids of positions and games.
    pub mode: WriteMode,
}

/// The indexes and constraints a bulk load drops, with the statements that
/// drop and recreate them: all of `positions` and `moves`, the foreign
/// keys and plain indexes of `games`, in the order the rebuild takes them:
/// the longest builds first, so that the last one to start is short and
/// the [`REBUILD_CONNECTIONS`] finish together. GIN indexes first (the GIN
/// index on `positions.fen_hash` took 11.1 s of a 16.9 s rebuild of 20,000
/// generated games, started fourth; a B-tree on as many rows takes 1.6 to
/// 2.8 s), then the indexes of primary and unique keys, then plain indexes,
/// then the keys themselves and foreign keys (validated when added), the
/// keys of a table with a GIN index last: making them keys waits for that
/// build, and whatever comes before them in the list does not.
///
/// Why a key is two steps, its index built by `CREATE UNIQUE INDEX` and
/// then made the key by `ADD CONSTRAINT … USING INDEX` (instant): `ADD
/// CONSTRAINT` building its own index holds the table's exclusive lock
/// throughout, so the other connection's build on the same table (the GIN
/// index of `positions`) waited for it and it for that build: in a
/// rebuild of 10,000 games, `positions_pkey` (0.7 s of work) ended 6 s
/// after it began. `CREATE INDEX` builds share the table. The index row's
/// `DROP INDEX IF EXISTS` does nothing at the start of the load: the key's
/// own drop, before it, drops its index.
const OBJECTS_SQL: &str = "
SELECT table_name, object_name, kind, drop_sql, create_sql FROM (
    SELECT c.conrelid::regclass::text AS table_name, c.conname::text AS object_name,
           'constraint' AS kind,
           format('ALTER TABLE %s DROP CONSTRAINT %I', c.conrelid::regclass, c.conname) AS drop_sql,
           CASE WHEN c.contype IN ('p', 'u')
               THEN format('ALTER TABLE %s ADD CONSTRAINT %I %s USING INDEX %I',
                           c.conrelid::regclass, c.conname,
                           CASE c.contype WHEN 'p' THEN 'PRIMARY KEY' ELSE 'UNIQUE' END,
                           c.conindid::regclass::text)
               -- pg_get_constraintdef leaves out the index's options (fillfactor).
               ELSE format('ALTER TABLE %s ADD CONSTRAINT %I %s%s', c.conrelid::regclass, c.conname,
                           pg_get_constraintdef(c.oid),
                           (SELECT ' WITH (' || array_to_string(ic.reloptions, ', ') || ')'
                            FROM pg_class ic
                            WHERE c.contype <> 'f' AND ic.oid = c.conindid AND ic.reloptions IS NOT NULL))
           END AS create_sql,
           CASE WHEN c.contype = 'f' THEN 4 WHEN c.contype = 'x' THEN 1
                -- The keys of a table with a GIN index wait for that build.
                WHEN EXISTS (SELECT FROM pg_index gi JOIN pg_class gc ON gc.oid = gi.indexrelid
                             JOIN pg_am ga ON ga.oid = gc.relam
                             WHERE gi.indrelid = c.conrelid AND ga.amname = 'gin') THEN 5
                ELSE 3 END AS rank,
           pg_relation_size(c.conindid) AS size
    FROM pg_constraint c
    WHERE (c.conrelid IN ('positions'::regclass, 'moves'::regclass)
           AND c.contype IN ('p', 'u', 'x', 'f'))
       OR (c.conrelid = 'games'::regclass AND c.contype = 'f')
    UNION ALL
    SELECT i.indrelid::regclass::text, ic.relname::text, 'index',
           format('DROP INDEX IF EXISTS %s', i.indexrelid::regclass),
           pg_get_indexdef(i.indexrelid),
           CASE WHEN am.amname = 'gin' THEN 0 WHEN c.contype IS NOT NULL THEN 1 ELSE 2 END,
           pg_relation_size(i.indexrelid)
    FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid JOIN pg_am am ON am.oid = ic.relam
    LEFT JOIN pg_constraint c ON c.conindid = i.indexrelid AND c.conrelid = i.indrelid
    WHERE i.indrelid IN ('positions'::regclass, 'moves'::regclass, 'games'::regclass)
      -- How a batch's non-Lichess games are recognized, like games' unique key.
      AND ic.relname <> 'games_external_id_not_lichess_idx'
      -- The indexes of primary and unique keys of positions and moves;
      -- every plain index.
      AND (c.oid IS NULL
           OR (c.contype IN ('p', 'u') AND i.indrelid IN ('positions'::regclass, 'moves'::regclass)))
) o
ORDER BY rank, table_name DESC, object_name";

/// Whether a recorded object exists now.
const EXISTS_SQL: &str = "
SELECT CASE WHEN $3::text = 'constraint'
    THEN EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = $1::text::regclass AND conname = $2::text)
    ELSE EXISTS (SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
                 WHERE i.indrelid = $1::text::regclass AND c.relname = $2::text)
END";

/// Begins a bulk load, or continues the unfinished one. Call with the
/// exclusive [`LOCK`] held.
pub async fn begin(client: &mut Client) -> Result<BulkLoad, Error> {
    end_orphaned_rebuilds(client).await?;
    let tx = client
        .transaction()
        .await
        .map_err(db_err("beginning the bulk load"))?;
    let open: Option<i64> = tx
        .query_opt(
            "SELECT id FROM import_bulk_loads WHERE state <> 'done' FOR UPDATE",
            &[],
        )
        .await
        .map_err(db_err("reading import_bulk_loads"))?
        .map(|row| row.get("id"));
    let id = match open {
        Some(id) => {
            resume_load(&tx, id).await?;
            id
        }
        None => start_load(&tx).await?,
    };
    // Positions' primary key is gone while a load is open: only a fresh
    // load can look for the largest id cheaply (earlier runs of an open
    // load took their ids from the sequence, so it is already past them).
    let positions = next_ids(&tx, "positions", open.is_none()).await?;
    let games = next_ids(&tx, "games", true).await?;
    tx.commit()
        .await
        .map_err(db_err("committing the bulk load's start"))?;
    Ok(BulkLoad {
        id,
        mode: WriteMode::Bulk { positions, games },
    })
}

/// Continues the unfinished load `id`: marks it loading again and drops
/// once more whatever a finish that was cut short rebuilt.
async fn resume_load(tx: &tokio_postgres::Transaction<'_>, id: i64) -> Result<(), Error> {
    // Positions loaded by earlier runs are not in this process's
    // map, so they may come again.
    tx.execute(
        "UPDATE import_bulk_loads SET state = 'loading', needs_dedup = true,
             runs = runs + 1, updated_at = now() WHERE id = $1",
        &[&id],
    )
    .await
    .map_err(db_err("resuming the bulk load"))?;
    // A finish that was cut short rebuilt some objects: drop them again.
    let objects = tx
        .query(
            "SELECT table_name, object_name, kind, drop_sql FROM import_bulk_objects
             WHERE load_id = $1 ORDER BY position DESC",
            &[&id],
        )
        .await
        .map_err(db_err("reading import_bulk_objects"))?;
    for object in objects {
        let (table, name, kind, drop_sql): (String, String, String, String) = (
            object.get("table_name"),
            object.get("object_name"),
            object.get("kind"),
            object.get("drop_sql"),
        );
        let exists: bool = tx
            .query_one(EXISTS_SQL, &[&table, &name, &kind])
            .await
            .map_err(db_err("checking a dropped object"))?
            .get(0);
        if exists {
            tx.batch_execute(&drop_sql)
                .await
                .map_err(db_err(format!("dropping {name} again")))?;
        }
    }
    Ok(())
}

/// Records a new load and drops the indexes and constraints it rebuilds
/// when it finishes, each recorded with its statements first. Returns the
/// load's id.
async fn start_load(tx: &tokio_postgres::Transaction<'_>) -> Result<i64, Error> {
    let not_empty: bool = tx
        .query_one("SELECT EXISTS (SELECT 1 FROM positions)", &[])
        .await
        .map_err(db_err("looking at positions"))?
        .get(0);
    let id: i64 = tx
        .query_one(
            "INSERT INTO import_bulk_loads (state, needs_dedup) VALUES ('loading', $1) RETURNING id",
            &[&not_empty],
        )
        .await
        .map_err(db_err("recording the bulk load"))?
        .get("id");
    let objects = tx
        .query(OBJECTS_SQL, &[])
        .await
        .map_err(db_err("listing indexes and constraints"))?;
    for (position, object) in objects.iter().enumerate() {
        let position = i32::try_from(position)
            .expect("three tables have far fewer than 2^31 indexes and constraints");
        tx.execute(
            "INSERT INTO import_bulk_objects
                 (load_id, position, table_name, object_name, kind, drop_sql, create_sql)
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
            &[
                &id,
                &position,
                &object.get::<_, String>("table_name"),
                &object.get::<_, String>("object_name"),
                &object.get::<_, String>("kind"),
                &object.get::<_, String>("drop_sql"),
                &object.get::<_, String>("create_sql"),
            ],
        )
        .await
        .map_err(db_err("recording a dropped object"))?;
    }
    // Drop foreign keys before the keys they may depend on.
    for object in objects.iter().rev() {
        let name: String = object.get("object_name");
        let drop_sql: String = object.get("drop_sql");
        tx.batch_execute(&drop_sql)
            .await
            .map_err(db_err(format!("dropping {name}")))?;
    }
    Ok(id)
}

/// The table's identity sequence, moved past the largest id in the table
/// when `past_max`: rows inserted with explicit ids do not advance it, and
/// new ids must sort after every existing one, because the duplicate merge
/// keeps the smallest id (so the pre-existing row).
async fn next_ids(
    tx: &tokio_postgres::Transaction<'_>,
    table: &str,
    past_max: bool,
) -> Result<IdSequence, Error> {
    let what = |w: &str| db_err(format!("{w} of {table}.id"));
    let sequence: String = tx
        .query_one("SELECT pg_get_serial_sequence($1, 'id')", &[&table])
        .await
        .map_err(what("finding the sequence"))?
        .get(0);
    if past_max {
        tx.execute(
            &format!(
                "SELECT setval($1::text::regclass, m) FROM (SELECT max(id) AS m FROM {table}) x
                 WHERE m > coalesce(pg_sequence_last_value($1::text::regclass), 0)"
            ),
            &[&sequence],
        )
        .await
        .map_err(what("moving the sequence past the largest id"))?;
    }
    let next: i64 = tx
        .query_one("SELECT nextval($1::text::regclass)", &[&sequence])
        .await
        .map_err(what("reserving the next id"))?
        .get(0);
    Ok(IdSequence { next, sequence })
}

/// What finishing a bulk load did.
#[derive(Debug, Clone, Copy, Default)]
pub struct FinishReport {
    /// Duplicate position rows merged into their oldest twin.
    pub duplicates_merged: u64,
    /// Seconds spent merging duplicates.
    pub dedup_s: f64,
    /// Seconds spent rebuilding indexes and constraints and analyzing.
    pub rebuild_s: f64,
}

/// Finds duplicate positions: one aggregate over `fen_hash` finds the
/// candidates, the FEN text decides (an xxh64 collision stays two rows).
const DEDUP_SQL: [&str; 2] = [
    "CREATE TEMP TABLE pgnload_position_remap ON COMMIT DROP AS
     SELECT id AS old_id, keep_id FROM (
         SELECT p.id, min(p.id) OVER (PARTITION BY p.normalized_fen) AS keep_id
         FROM positions p
         WHERE p.fen_hash IN (SELECT fen_hash FROM positions GROUP BY fen_hash HAVING count(*) > 1)
     ) d
     WHERE id <> keep_id",
    "ANALYZE pgnload_position_remap",
];

/// Points moves and games at the surviving row, then deletes the others.
const REMAP_SQL: [&str; 5] = [
    "UPDATE moves m SET position_id = r.keep_id FROM pgnload_position_remap r WHERE m.position_id = r.old_id",
    "UPDATE moves m SET position_after_id = r.keep_id FROM pgnload_position_remap r WHERE m.position_after_id = r.old_id",
    "UPDATE games g SET initial_position_id = r.keep_id FROM pgnload_position_remap r WHERE g.initial_position_id = r.old_id",
    "UPDATE games g SET final_position_id = r.keep_id FROM pgnload_position_remap r WHERE g.final_position_id = r.old_id",
    "DELETE FROM positions p USING pgnload_position_remap r WHERE p.id = r.old_id",
];

/// Merges duplicate positions into the row with the smallest id (so
/// positions that existed before the load keep their ids), in one
/// transaction, with their explorer counters if the database keeps them
/// (`explorer`). Returns the number of rows merged.
async fn merge_duplicates(client: &mut Client, load_id: i64, explorer: bool) -> Result<u64, Error> {
    let tx = client
        .transaction()
        .await
        .map_err(db_err("merging duplicate positions"))?;
    for sql in DEDUP_SQL {
        tx.batch_execute(sql)
            .await
            .map_err(db_err("finding duplicate positions"))?;
    }
    let merged: i64 = tx
        .query_one("SELECT count(*) FROM pgnload_position_remap", &[])
        .await
        .map_err(db_err("counting duplicate positions"))?
        .get(0);
    if merged > 0 {
        for sql in REMAP_SQL {
            tx.batch_execute(sql)
                .await
                .map_err(db_err("merging duplicate positions"))?;
        }
        if explorer {
            explorer::merge_positions(&tx).await.map_err(db_err(
                "merging the explorer counters of duplicate positions",
            ))?;
        }
    }
    tx.execute(
        "UPDATE import_bulk_loads SET needs_dedup = false, updated_at = now(),
             duplicates_merged = coalesce(duplicates_merged, 0) + $2
         WHERE id = $1",
        &[&load_id, &merged],
    )
    .await
    .map_err(db_err("recording the merge"))?;
    tx.commit().await.map_err(db_err("committing the merge"))?;
    Ok(u64::try_from(merged).expect("count(*) is never negative"))
}

/// `application_name` of the sessions that rebuild a bulk load's indexes,
/// so that a later run can find the ones a killed run left behind.
const REBUILD_APPLICATION: &str = "pgnload bulk rebuild";

/// How long the index builds a killed run left may take to end once
/// terminated (a backend ends at its next interrupt check).
const ORPHAN_GRACE: std::time::Duration = std::time::Duration::from_mins(2);

/// Ends the index builds a killed run left running on the server. A client
/// killed mid-rebuild leaves its sessions building (the server notices the
/// client is gone only when the statement ends), and a rerun's own DROP or
/// CREATE of the same objects would then fail ("already exists") or
/// deadlock. Call with the exclusive [`LOCK`] held: every rebuild session
/// is then an orphan. Their open transactions roll back.
async fn end_orphaned_rebuilds(client: &Client) -> Result<(), Error> {
    let started = Instant::now();
    loop {
        let left: i64 = client
            .query_one(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
                 WHERE datname = current_database() AND application_name = $1
                   AND pid <> pg_backend_pid()",
                &[&REBUILD_APPLICATION],
            )
            .await
            .map_err(db_err("ending index builds left by a stopped run"))?
            .get(0);
        if left == 0 {
            return Ok(());
        }
        if started.elapsed() > ORPHAN_GRACE {
            return Err(Error::Conflict(format!(
                "{left} index builds left by a stopped run (application_name '{REBUILD_APPLICATION}') \
                 did not end within {} s of pg_terminate_backend; end them, then rerun",
                ORPHAN_GRACE.as_secs()
            )));
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Connections rebuilding indexes at once: PostgreSQL builds one index per
/// backend (plus its parallel workers), and positions' text index and
/// moves' keys are independent sorts.
const REBUILD_CONNECTIONS: usize = 2;

/// Finishes the bulk load: merge duplicates if any can exist, rebuild what
/// was dropped, analyze, mark it done. `evicted` says whether this run's
/// position map dropped entries; `explorer` whether the database keeps the
/// explorer counters (as the run read it), and `held` the counter rows the
/// run holds, written here ([`explorer::flush_once`]): beside the
/// rebuilds, on a connection of their own ([`write_held_rows`]; the rows
/// touch no table rebuilt), or first if duplicate positions are to be
/// merged, which merges their rows too. Returns `None` if interrupted (the
/// load stays open; a rerun finishes it).
#[allow(clippy::too_many_arguments)]
pub async fn finish(
    target: &Target,
    client: &mut Client,
    load_id: i64,
    evicted: bool,
    explorer: bool,
    held: &mut Option<HeldRows>,
    interrupts: &Arc<AtomicUsize>,
    reporter: &dyn Reporter,
) -> Result<Option<FinishReport>, Error> {
    let started = Instant::now();
    let say = |text: &str| reporter.notice(&Notice::BulkLoad(text));
    let needs_dedup: bool = client
        .query_one(
            "UPDATE import_bulk_loads SET state = 'finishing', updated_at = now(),
                 needs_dedup = needs_dedup OR $2
             WHERE id = $1 RETURNING needs_dedup",
            &[&load_id, &evicted],
        )
        .await
        .map_err(db_err("marking the bulk load finishing"))?
        .get(0);
    end_orphaned_rebuilds(client).await?;
    let mut report = FinishReport::default();
    if needs_dedup {
        explorer::flush_once(client, held).await?;
        reporter.step(Step::Phase("merging duplicate positions"));
        report.duplicates_merged = merge_duplicates(client, load_id, explorer).await?;
        report.dedup_s = started.elapsed().as_secs_f64();
        say(&format!(
            "{} duplicate positions merged in {:.1} s",
            report.duplicates_merged, report.dedup_s
        ));
    }
    if interrupts.load(Ordering::SeqCst) > 0 {
        explorer::flush_once(client, held).await?;
        return Ok(None);
    }
    let objects = objects_to_rebuild(client, load_id).await?;
    say(&format!(
        "rebuilding {} indexes and constraints, then analyzing",
        objects.len()
    ));
    let work = with_statistics(objects);
    let rebuild_started = Instant::now();
    rebuild(target, client, work, held, interrupts, reporter).await?;
    if interrupts.load(Ordering::SeqCst) > 0 {
        return Ok(None);
    }
    report.rebuild_s = rebuild_started.elapsed().as_secs_f64();
    if explorer {
        // Games whose held counter rows were lost: counted at the end of
        // the run with the other queued positions.
        let games = explorer::queue_deferred(client).await?;
        if games > 0 {
            say(&format!(
                "the positions of {games} games whose explorer counter rows were lost (a stopped \
                 run, a lost connection) are queued for a recount"
            ));
        }
    }
    client
        .execute(
            "UPDATE import_bulk_loads SET state = 'done', finished_at = now(), updated_at = now(),
                 finish_seconds = $2
             WHERE id = $1",
            &[&load_id, &started.elapsed().as_secs_f64()],
        )
        .await
        .map_err(db_err("marking the bulk load done"))?;
    say(&format!(
        "indexes and constraints rebuilt, tables analyzed in {:.1} s",
        report.rebuild_s
    ));
    Ok(Some(report))
}

/// The tables a bulk load analyzes at its finish, once rebuilt.
const ANALYZED: [&str; 3] = ["positions", "moves", "games"];

/// A recorded object to rebuild: its table, its name as the steps show it
/// (`index x`, `constraint y`) and the statement that recreates it.
#[derive(Debug, Clone, PartialEq)]
struct Rebuild {
    table: String,
    name: String,
    sql: String,
}

/// The finish's statements, as (name, statement): the objects in their
/// order, each table's `ANALYZE` right after the last of its objects (at
/// the end for a table with none left to rebuild). Why there and not all
/// at the end: `ANALYZE` waits for the builds on its own table only, so
/// `moves` and `games` are analyzed while the GIN index of `positions`,
/// the longest build, is still being built on the other connection.
fn with_statistics(objects: Vec<Rebuild>) -> VecDeque<Work> {
    let lasts: Vec<bool> = (0..objects.len())
        .map(|at| {
            let table = &objects[at].table;
            !objects[at + 1..].iter().any(|later| &later.table == table)
        })
        .collect();
    let untouched: Vec<&str> = ANALYZED
        .into_iter()
        .filter(|table| !objects.iter().any(|o| o.table == *table))
        .collect();
    let names: Vec<String> = objects.iter().map(|o| o.name.clone()).collect();
    let mut work = VecDeque::new();
    for (object, last) in objects.into_iter().zip(lasts) {
        let analyzed = last && ANALYZED.contains(&object.table.as_str());
        // A key made from its index (`… USING INDEX`) waits for that build.
        let index = object
            .name
            .strip_prefix("constraint ")
            .map(|key| format!("index {key}"))
            .filter(|index| names.contains(index));
        work.push_back(Work {
            name: object.name,
            sql: object.sql,
            after: index,
        });
        if analyzed {
            work.push_back(analyze(&object.table));
        }
    }
    work.extend(untouched.into_iter().map(analyze));
    work
}

/// The step that analyzes `table`.
fn analyze(table: &str) -> Work {
    Work {
        name: format!("statistics of {table}"),
        sql: format!("ANALYZE {table}"),
        after: None,
    }
}

/// A statement of the finish: its name as the steps show it, the
/// statement, and the step it must wait for (a key made from an index
/// waits for that index's build, which the other connection may still be
/// running or only about to start: the key's `ALTER TABLE` would not find
/// it).
#[derive(Debug, Clone, PartialEq)]
struct Work {
    name: String,
    sql: String,
    after: Option<String>,
}

/// The recorded objects of load `load_id` that do not exist now (a finish
/// cut short may have rebuilt some), in the recorded order.
async fn objects_to_rebuild(client: &Client, load_id: i64) -> Result<Vec<Rebuild>, Error> {
    let mut work = Vec::new();
    for row in client
        .query(
            "SELECT table_name, object_name, kind, create_sql FROM import_bulk_objects
             WHERE load_id = $1 ORDER BY position",
            &[&load_id],
        )
        .await
        .map_err(db_err("reading import_bulk_objects"))?
    {
        let (table, name, kind, create_sql): (String, String, String, String) = (
            row.get("table_name"),
            row.get("object_name"),
            row.get("kind"),
            row.get("create_sql"),
        );
        let exists: bool = client
            .query_one(EXISTS_SQL, &[&table, &name, &kind])
            .await
            .map_err(db_err("checking a dropped object"))?
            .get(0);
        if !exists {
            work.push(Rebuild {
                table,
                name: format!("{kind} {name}"),
                sql: create_sql,
            });
        }
    }
    Ok(work)
}

/// Where the rebuild stands, for its steps: statements begun and done
/// of `total`.
struct Rebuilt<'a> {
    total: usize,
    begun: AtomicUsize,
    done: AtomicUsize,
    /// The names of the statements done, which a [`Work::after`] waits for.
    finished: Mutex<Vec<String>>,
    /// Set when a worker failed: a statement waiting for one of its steps
    /// would wait for ever.
    failed: AtomicBool,
    reporter: &'a dyn Reporter,
}

impl Rebuilt<'_> {
    /// Whether the statement `name` is done.
    fn finished(&self, name: &str) -> bool {
        let finished = self.finished.lock().unwrap_or_else(PoisonError::into_inner);
        finished.iter().any(|done| done == name)
    }

    /// A statement begins: its phase, named, with its place in the list.
    fn begin(&self, name: &str) {
        let place = self.begun.fetch_add(1, Ordering::SeqCst) + 1;
        self.reporter.step(Step::Phase(&format!(
            "rebuilding {name} ({place} of {})",
            self.total
        )));
    }

    /// The statements done, and the index builds PostgreSQL reports.
    fn show(&self, builds: &[IndexBuild]) {
        let detail: Vec<String> = builds.iter().map(IndexBuild::describe).collect();
        self.reporter.step(Step::Count(Count {
            done: self.done.load(Ordering::SeqCst) as u64,
            total: Some(self.total as u64),
            unit: Unit::Items,
            detail: &detail.join("; "),
        }));
    }
}

/// Runs the statements of `work` on [`REBUILD_CONNECTIONS`] connections
/// of their own ([`rebuild_worker`]) while the held rows are written
/// ([`write_held_rows`]), each statement a phase of its own, and the index
/// builds' progress read on `monitor` (idle meanwhile). Every worker is
/// waited for, and the held rows' write; the first failure is returned.
async fn rebuild(
    target: &Target,
    monitor: &Client,
    work: VecDeque<Work>,
    held: &mut Option<HeldRows>,
    interrupts: &Arc<AtomicUsize>,
    reporter: &dyn Reporter,
) -> Result<(), Error> {
    let rebuilt = Rebuilt {
        total: work.len(),
        begun: AtomicUsize::new(0),
        done: AtomicUsize::new(0),
        finished: Mutex::new(Vec::new()),
        failed: AtomicBool::new(false),
        reporter,
    };
    let work = Arc::new(Mutex::new(work));
    let mut workers = Vec::new();
    let mut pids = Vec::new();
    for _ in 0..REBUILD_CONNECTIONS {
        let connection = db::connect(target).await?;
        connection
            .client
            .execute(
                "SELECT set_config('application_name', $1, false)",
                &[&REBUILD_APPLICATION],
            )
            .await
            .map_err(db_err("naming a rebuild session"))?;
        pids.push(backend_pid(&connection.client).await?);
        workers.push(rebuild_worker(
            connection,
            Arc::clone(&work),
            Arc::clone(interrupts),
            &rebuilt,
        ));
    }
    let rebuilding = async {
        let mut failure = None;
        let mut workers: FuturesUnordered<_> = workers.into_iter().collect();
        while let Some(done) = workers.next().await {
            let ended = match done {
                Ok(connection) => connection.close(),
                Err(error) => Err(error),
            };
            if let Err(error) = ended {
                failure.get_or_insert(error);
            }
        }
        failure.map_or(Ok(()), Err)
    };
    let show = |builds: &[IndexBuild]| rebuilt.show(builds);
    let watched = watching_index_builds(monitor, &pids, &show, rebuilding);
    let (rebuilt, flushed) = tokio::join!(watched, write_held_rows(target, held));
    rebuilt.and(flushed)
}

/// Writes the held counter rows, if not yet written, on a connection of
/// their own while the indexes are rebuilt. Why beside the rebuilds: their
/// `COPY` (0.85 s for 50,000 games) on the first rebuild connection out of
/// work made the finish 0.6 to 1.7 s longer, since the other connection's
/// last index was mostly done by then; started with the rebuilds, the
/// machine's cores share it with them from the start (0.3 to 0.6 s,
/// `scripts/bench_query.sh`'s corpus).
async fn write_held_rows(target: &Target, held: &mut Option<HeldRows>) -> Result<(), Error> {
    if held.is_none() {
        return Ok(());
    }
    let mut connection = db::connect(target).await?;
    writer::prepare_connection(&connection.client).await?;
    explorer::flush_once(&mut connection.client, held).await?;
    connection.close()
}

/// Takes statements off the shared queue until it is empty (or an
/// interrupt came, or the other worker failed), each in its own
/// transaction; returns its connection. A statement whose step is not done
/// yet stays at the head of the queue until it is.
async fn rebuild_worker(
    connection: db::Database,
    work: Arc<Mutex<VecDeque<Work>>>,
    interrupts: Arc<AtomicUsize>,
    rebuilt: &Rebuilt<'_>,
) -> Result<db::Database, Error> {
    while interrupts.load(Ordering::SeqCst) == 0 && !rebuilt.failed.load(Ordering::SeqCst) {
        let next = {
            let mut queue = work.lock().unwrap_or_else(PoisonError::into_inner);
            match queue.front() {
                None => break,
                Some(Work {
                    after: Some(step), ..
                }) if !rebuilt.finished(step) => None,
                Some(_) => queue.pop_front(),
            }
        };
        let Some(Work { name, sql, .. }) = next else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        rebuilt.begin(&name);
        let started = Instant::now();
        if let Err(error) = connection.client.batch_execute(&sql).await {
            rebuilt.failed.store(true, Ordering::SeqCst);
            return Err(db_err(format!("rebuilding {name}"))(error));
        }
        rebuilt.done.fetch_add(1, Ordering::SeqCst);
        let seconds = started.elapsed().as_secs_f64();
        if seconds >= 1.0 {
            rebuilt
                .reporter
                .notice(&Notice::BulkLoad(&format!("{name} in {seconds:.1} s")));
        }
        (rebuilt
            .finished
            .lock()
            .unwrap_or_else(PoisonError::into_inner))
        .push(name);
    }
    Ok(connection)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(table: &str, name: &str) -> Rebuild {
        Rebuild {
            table: table.to_owned(),
            name: name.to_owned(),
            sql: format!("-- {name}"),
        }
    }

    #[test]
    fn each_table_is_analyzed_right_after_its_last_object_and_a_table_with_none_at_the_end() {
        let work = with_statistics(vec![
            object("positions", "index gin"),
            object("moves", "index pkey"),
            object("games", "constraint fkey"),
            object("moves", "constraint fkey"),
            object("positions", "constraint pkey"),
        ]);
        let names: Vec<&str> = work.iter().map(|step| step.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "index gin",
                "index pkey",
                "constraint fkey",
                "statistics of games",
                "constraint fkey",
                "statistics of moves",
                "constraint pkey",
                "statistics of positions",
            ]
        );
        assert_eq!(work[3].sql, "ANALYZE games");
        // A key waits for its index's build when that build is in the
        // list (not when a finish cut short had done it already).
        let after: Vec<Option<&str>> = work.iter().map(|step| step.after.as_deref()).collect();
        assert_eq!(
            after,
            [None, None, None, None, None, None, Some("index pkey"), None]
        );
        let resumed = with_statistics(vec![object("moves", "index pkey")]);
        let names: Vec<&str> = resumed.iter().map(|step| step.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "index pkey",
                "statistics of moves",
                "statistics of positions",
                "statistics of games",
            ]
        );
    }
}
