//! `pgnload status`: the import state of every input seen, from the
//! bookkeeping tables (so it works while an import runs, from any machine).
//!
//! A recorded `running` state is only what the last importer wrote: a killed
//! importer never updates it. An importer holds the advisory lock
//! `lock_key` of its input on its control connection for as long as it
//! works on it, and the server drops that lock with the connection, so a
//! `running` input whose lock nobody holds is shown as `interrupted`.

use std::collections::HashSet;

use super::printable;
use crate::{
    config::Settings,
    error::Error,
    error::ExitStatus,
    ingest::engine::lock_key,
    store::db::{self, db_err},
};

/// Options of `pgnload status`.
#[derive(Debug, Clone, clap::Args)]
pub struct StatusArgs {
    /// Print JSON (one object per input) instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Runs `pgnload status`.
pub fn run(args: &StatusArgs, settings: &Settings) -> Result<ExitStatus, Error> {
    let runtime = db::runtime()?;
    runtime.block_on(async {
        let mut database = db::connect(&settings.target()).await?;
        db::migrate(&mut database.client).await?;
        let rows = database
            .client
            .query(
                "SELECT f.path, f.fingerprint, f.state, f.games_done, f.bytes_done, f.size_bytes,
                        f.compression, f.games_imported, f.games_present,
                        (SELECT count(*) FROM import_rejects r WHERE r.file_id = f.id),
                        f.last_error, f.updated_at,
                        f.games_filtered, f.scope
                 FROM import_files f ORDER BY f.id",
                &[],
            )
            .await
            .map_err(db_err("reading import_files"))?;
        let held = held_locks(&database.client).await?;
        let inputs: Vec<Input> = rows.iter().map(|row| Input::from_row(row, &held)).collect();
        let mut table;
        if args.json {
            let out: Vec<serde_json::Value> = inputs.iter().map(Input::json).collect();
            table = serde_json::to_string_pretty(&out)
                .map_err(|e| Error::bug_from("serializing status", e))?;
            table.push('\n');
        } else {
            table = inputs.iter().map(Input::line).collect();
            if rows.is_empty() {
                table = format!("no inputs imported yet ({})\n", database.description);
            }
            if let Some(line) = unfinished_bulk_load(&database.client).await? {
                table.push_str(&line);
            }
        }
        database.close()?;
        super::print(&table)?;
        Ok(ExitStatus::Clean)
    })
}

/// The advisory locks held in this database. Locks on one bigint key
/// appear in `pg_locks` as its high and low halves (classid, objid) with
/// objsubid 1. Only looked at, never taken: a status must not make a
/// starting importer think the input is busy.
async fn held_locks(client: &tokio_postgres::Client) -> Result<HashSet<i64>, Error> {
    Ok(client
        .query(
            "SELECT (classid::bigint << 32) | objid::bigint FROM pg_locks
             WHERE locktype = 'advisory' AND objsubid = 1 AND granted
               AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            &[],
        )
        .await
        .map_err(db_err("reading pg_locks"))?
        .iter()
        .map(|row| row.get(0))
        .collect())
}

/// The line saying a bulk load is unfinished, if one is.
async fn unfinished_bulk_load(client: &tokio_postgres::Client) -> Result<Option<String>, Error> {
    let row = client
        .query_opt(
            "SELECT id, state, runs FROM import_bulk_loads WHERE state <> 'done'",
            &[],
        )
        .await
        .map_err(db_err("reading import_bulk_loads"))?;
    Ok(row.map(|row| {
        let (id, state, runs): (i64, String, i32) = (row.get(0), row.get(1), row.get(2));
        format!(
            "bulk load #{id} unfinished ({state}, {runs} runs so far): positions and moves \
             have no indexes until a rerun of pgnload import finishes it\n"
        )
    }))
}

/// One `import_files` row as status shows it.
struct Input {
    path: String,
    fingerprint: String,
    /// `interrupted` for a recorded `running` whose lock nobody holds.
    state: String,
    recorded: String,
    importer_active: bool,
    games: i64,
    bytes: i64,
    size: Option<i64>,
    compression: String,
    imported: i64,
    present: i64,
    rejects: i64,
    last_error: Option<String>,
    updated: chrono::DateTime<chrono::Utc>,
    filtered: i64,
    scope: String,
}

impl Input {
    /// Reads the row of `run`'s query; `held`: the advisory locks held.
    fn from_row(row: &tokio_postgres::Row, held: &HashSet<i64>) -> Input {
        let fingerprint: String = row.get(1);
        let recorded: String = row.get(2);
        let importer_active = held.contains(&lock_key(&fingerprint));
        let state = if recorded == "running" && !importer_active {
            "interrupted".to_owned()
        } else {
            recorded.clone()
        };
        Input {
            path: row.get(0),
            fingerprint,
            state,
            recorded,
            importer_active,
            games: row.get(3),
            bytes: row.get(4),
            size: row.get(5),
            compression: row.get(6),
            imported: row.get(7),
            present: row.get(8),
            rejects: row.get(9),
            last_error: row.get(10),
            updated: row.get(11),
            filtered: row.get(12),
            scope: row.get(13),
        }
    }

    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "path": self.path, "fingerprint": self.fingerprint, "state": self.state,
            "recorded_state": self.recorded, "importer_active": self.importer_active,
            "games_done": self.games, "bytes_done": self.bytes, "size_bytes": self.size,
            "compression": self.compression, "games_imported": self.imported,
            "games_present": self.present, "rejects": self.rejects,
            "games_filtered": self.filtered, "scope": self.scope,
            "last_error": self.last_error, "updated_at": super::json_time(self.updated),
        })
    }

    /// The table's line, names made printable.
    fn line(&self) -> String {
        let Input {
            state,
            games,
            bytes,
            rejects,
            filtered,
            fingerprint,
            ..
        } = self;
        let path = printable(&self.path);
        let scope = if self.scope.is_empty() {
            String::new()
        } else {
            format!("  scope: {}", printable(&self.scope))
        };
        let last_error = self
            .last_error
            .as_ref()
            .map_or(String::new(), |e| format!("  last error: {}", printable(e)));
        format!(
            "{state:<11} {games:>10} games {bytes:>14} bytes {rejects:>6} rejects {filtered:>8} filtered  {path}  [{fingerprint}]{scope}{last_error}\n"
        )
    }
}
