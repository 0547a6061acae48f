//! `pgnload db restore`: the archive read through first, then `pg_restore`
//! into a database that holds nothing yet, then the migrations.

use std::{fs, num::NonZeroUsize, path::Path, process::Command, time::Instant};

use tokio::runtime::Runtime;

use super::{
    BackupError, Interrupts, Outcome,
    archive::{disk_bytes, trim_slash},
    cores,
    link::Link,
    tools::{locate_tool, server_version},
};
use crate::{
    db::{self, Target},
    error::Error,
};

/// Objects named when a restore target is refused as not empty.
const OBJECTS_NAMED: usize = 5;

/// `pgnload db restore`: `pg_restore` of the archive at `path` into
/// `target`, which must hold no table, view, sequence or type (a fresh
/// embedded data dir, or a new database). The archive is read through
/// once (`pg_restore --list`) before the database is touched, so a file
/// that is no backup changes nothing. With one job the restore is one
/// transaction: a failure leaves the database empty. With more (the
/// default for a directory), a failure can leave part of it. The schema's
/// migrations are then checked and applied as before any import.
/// `interrupts` says when the front end saw Ctrl-C or SIGTERM (its
/// handlers run on `runtime`, which the restore uses too).
pub fn restore(
    target: &Target,
    path: &Path,
    jobs: Option<NonZeroUsize>,
    runtime: &Runtime,
    interrupts: &Interrupts,
    progress: &dyn Fn(&str),
) -> Result<Outcome, Error> {
    let path = trim_slash(path);
    let metadata = fs::metadata(&path).map_err(|source| BackupError::NoBackup {
        path: path.clone(),
        source,
    })?;
    let jobs = match jobs {
        Some(jobs) => jobs.get(),
        None if metadata.is_dir() => cores(),
        None => 1,
    };
    let mut database = runtime.block_on(db::connect(target))?;
    let result = (|| {
        let server = runtime.block_on(server_version(&database.client))?;
        let link = Link::new(target)?;
        let tool = locate_tool("pg_restore", target, &server)?;
        read_through(&link, &tool, &path, interrupts)?;
        runtime.block_on(ensure_empty(&database.client, &database.description))?;
        interrupts.check("pg_restore")?;
        progress(&format!(
            "restoring {} into {} with {} ({jobs} job{})",
            path.display(),
            database.description,
            tool.display(),
            if jobs == 1 { ", one transaction" } else { "s" },
        ));
        let started = Instant::now();
        interrupts
            .run_tool(
                restore_command(&link, &tool, &path, jobs),
                &tool,
                "pg_restore",
            )
            .map_err(|e| e.leaving(aftermath(jobs, &database.description)))?;
        let seconds = started.elapsed().as_secs_f64();
        let migrations = runtime.block_on(db::migrate(&mut database.client))?;
        Ok::<_, Error>(Outcome {
            bytes: disk_bytes(&path),
            seconds,
            migrations,
        })
    })();
    let closed = database.close();
    let outcome = result?;
    closed?;
    Ok(outcome)
}

/// Reads the archive through (`pg_restore --list`) before the database is
/// touched: a file that is no backup changes nothing.
fn read_through(
    link: &Link,
    tool: &Path,
    path: &Path,
    interrupts: &Interrupts,
) -> Result<(), BackupError> {
    let mut list = link.command(tool);
    list.arg("--list").arg(path);
    interrupts
        .run_tool(list, tool, "pg_restore")
        .map_err(|e| match e {
            BackupError::Failed { stderr, .. } => BackupError::NotAnArchive {
                path: path.to_path_buf(),
                stderr,
            },
            other => other.leaving("nothing was changed".into()),
        })
}

/// The `pg_restore` of `path`: one transaction with one job, else `jobs`
/// in parallel.
fn restore_command(link: &Link, tool: &Path, path: &Path, jobs: usize) -> Command {
    let mut cmd = link.command(tool);
    // Objects belong to whoever restores (a --database-url role need
    // not be the embedded cluster's `pgnload`); the first error stops
    // the restore rather than leaving a database with holes.
    cmd.args(["--no-owner", "--no-privileges", "--exit-on-error"]);
    if jobs == 1 {
        cmd.arg("--single-transaction");
    } else {
        cmd.arg(format!("--jobs={jobs}"));
    }
    cmd.arg(path);
    cmd
}

/// What a failed or interrupted `pg_restore` left in `description`.
fn aftermath(jobs: usize, description: &str) -> String {
    if jobs == 1 {
        format!("the restore was rolled back: {description} is still empty")
    } else {
        format!(
            "{description} now holds part of the backup: empty it (a new --data-dir, or \
             DROP and CREATE DATABASE) before restoring again"
        )
    }
}

/// Refuses a restore target that holds any table, view, sequence or type
/// of its own (objects of installed extensions do not count).
async fn ensure_empty(client: &tokio_postgres::Client, description: &str) -> Result<(), Error> {
    let rows = client
        .query(
            "SELECT format('%I.%I', n.nspname, o.name)
             FROM (
                 SELECT c.relname AS name, c.relnamespace AS nsp, c.oid, 'pg_class'::regclass AS cls
                 FROM pg_class c WHERE c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')
                 UNION ALL
                 SELECT t.typname, t.typnamespace, t.oid, 'pg_type'::regclass
                 FROM pg_type t WHERE t.typtype IN ('e', 'd', 'r', 'm')
             ) o
             JOIN pg_namespace n ON n.oid = o.nsp
             WHERE n.nspname NOT IN ('pg_catalog', 'information_schema')
               AND n.nspname !~ '^pg_(toast|temp_)'
               AND NOT EXISTS (SELECT FROM pg_depend d
                               WHERE d.classid = o.cls AND d.objid = o.oid AND d.deptype = 'e')
             ORDER BY o.name NOT IN ('pgnload_migrations', 'games', 'positions', 'moves'), 1",
            &[],
        )
        .await
        .map_err(db::db_err("listing what the restore target holds"))?;
    if rows.is_empty() {
        return Ok(());
    }
    Err(BackupError::NotEmpty {
        target: description.to_owned(),
        count: rows.len(),
        names: rows
            .iter()
            .take(OBJECTS_NAMED)
            .map(|row| row.get(0))
            .collect(),
    }
    .into())
}
