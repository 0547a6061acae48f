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
                        f.last_error, to_char(f.updated_at, 'YYYY-MM-DD\"T\"HH24:MI:SSOF'),
                        f.games_filtered, f.scope
                 FROM import_files f ORDER BY f.id",
                &[],
            )
            .await
            .map_err(db_err("reading import_files"))?;
        // Advisory locks on one bigint key appear in pg_locks as its high and
        // low halves (classid, objid) with objsubid 1. Only looked at, never
        // taken: a status must not make a starting importer think the
        // input is busy.
        let held: HashSet<i64> = database
            .client
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
            .collect();
        let mut out = Vec::new();
        let mut table = String::new();
        for row in &rows {
            let path: String = row.get(0);
            let fingerprint: String = row.get(1);
            let state: String = row.get(2);
            let games: i64 = row.get(3);
            let bytes: i64 = row.get(4);
            let size: Option<i64> = row.get(5);
            let compression: String = row.get(6);
            let imported: i64 = row.get(7);
            let present: i64 = row.get(8);
            let rejects: i64 = row.get(9);
            let last_error: Option<String> = row.get(10);
            let updated: String = row.get(11);
            let filtered: i64 = row.get(12);
            let scope: String = row.get(13);
            let importer_active = held.contains(&lock_key(&fingerprint));
            let recorded = state.clone();
            let state = if state == "running" && !importer_active {
                "interrupted".to_owned()
            } else {
                state
            };
            if args.json {
                out.push(serde_json::json!({
                    "path": path, "fingerprint": fingerprint, "state": state,
                    "recorded_state": recorded, "importer_active": importer_active,
                    "games_done": games, "bytes_done": bytes, "size_bytes": size,
                    "compression": compression, "games_imported": imported,
                    "games_present": present, "rejects": rejects,
                    "games_filtered": filtered, "scope": scope,
                    "last_error": last_error, "updated_at": updated,
                }));
            } else {
                let path = printable(&path);
                table.push_str(&format!(
                    "{state:<11} {games:>10} games {bytes:>14} bytes {rejects:>6} rejects {filtered:>8} filtered  {path}  [{fingerprint}]{}{}\n",
                    if scope.is_empty() { String::new() } else { format!("  scope: {}", printable(&scope)) },
                    last_error.map_or(String::new(), |e| format!("  last error: {}", printable(&e)))
                ));
            }
        }
        if args.json {
            table = serde_json::to_string_pretty(&out)
                .map_err(|e| Error::bug_from("serializing status", e))?;
            table.push('\n');
        } else {
            if rows.is_empty() {
                table = format!("no inputs imported yet ({})\n", database.description);
            }
            if let Some(row) = database
                .client
                .query_opt(
                    "SELECT id, state, runs FROM import_bulk_loads WHERE state <> 'done'",
                    &[],
                )
                .await
                .map_err(db_err("reading import_bulk_loads"))?
            {
                let (id, state, runs): (i64, String, i32) = (row.get(0), row.get(1), row.get(2));
                table.push_str(&format!(
                    "bulk load #{id} unfinished ({state}, {runs} runs so far): positions and moves \
                     have no indexes until a rerun of pgnload import finishes it\n"
                ));
            }
        }
        database.close()?;
        super::print(&table)?;
        Ok(ExitStatus::Clean)
    })
}
