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
    progress::{Count, Step, Steps, Unit},
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
    steps: Steps<'_>,
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
        steps(Step::Phase("reading the archive through"));
        let total = named_steps(&read_through(&link, &tool, &path, interrupts)?);
        runtime.block_on(ensure_empty(&database.client, &database.description))?;
        interrupts.check("pg_restore")?;
        steps(Step::Said(&format!(
            "restoring {} into {} with {} ({jobs} job{})",
            path.display(),
            database.description,
            tool.display(),
            if jobs == 1 { ", one transaction" } else { "s" },
        )));
        let started = Instant::now();
        steps(Step::Phase("creating the schema"));
        let mut begun = 0;
        let mut watch = |step: Option<&str>| {
            if let Some(step) = step {
                begun += 1;
                let place = if begun <= total {
                    format!("{begun} of {total}")
                } else {
                    begun.to_string()
                };
                steps(Step::Phase(&format!("restoring {step} ({place})")));
                steps(Step::Count(Count {
                    done: begun - 1,
                    total: Some(total.max(begun)),
                    unit: Unit::Items,
                    detail: "",
                }));
            }
        };
        interrupts
            .run_tool(
                restore_command(&link, &tool, &path, jobs),
                &tool,
                "pg_restore",
                &mut watch,
            )
            .map_err(|e| e.leaving(aftermath(jobs, &database.description)))?;
        let seconds = started.elapsed().as_secs_f64();
        steps(Step::Count(Count {
            done: begun,
            total: Some(total.max(begun)),
            unit: Unit::Items,
            detail: "",
        }));
        steps(Step::Phase("applying migrations"));
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
/// touched: a file that is no backup changes nothing. Returns its table
/// of contents.
fn read_through(
    link: &Link,
    tool: &Path,
    path: &Path,
    interrupts: &Interrupts,
) -> Result<String, BackupError> {
    let mut list = link.command(tool);
    list.arg("--list").arg(path);
    interrupts
        .run_tool(list, tool, "pg_restore", &mut |_| {})
        .map_err(|e| match e {
            BackupError::Failed { stderr, .. } => BackupError::NotAnArchive {
                path: path.to_path_buf(),
                stderr,
            },
            other => other.leaving("nothing was changed".into()),
        })
}

/// The entries of a table of contents (`pg_restore --list`) that
/// `pg_restore --verbose` names as steps ([`super::run::classify`]): each
/// table's data, index and constraint. A line is `ID; CATALOG OID TYPE
/// SCHEMA NAME OWNER`; comments begin with `;`.
fn named_steps(list: &str) -> u64 {
    let count = list
        .lines()
        .filter(|line| !line.starts_with(';'))
        .filter_map(|line| line.split_once("; "))
        .filter_map(|(_, entry)| entry.splitn(3, ' ').nth(2))
        .filter(|entry| {
            ["TABLE DATA ", "INDEX ", "CONSTRAINT ", "FK CONSTRAINT "]
                .iter()
                .any(|kind| entry.starts_with(kind))
        })
        .count();
    count as u64
}

/// The `pg_restore` of `path`: one transaction with one job, else `jobs`
/// in parallel; `--verbose`, whose steps are shown.
fn restore_command(link: &Link, tool: &Path, path: &Path, jobs: usize) -> Command {
    let mut cmd = link.command(tool);
    cmd.arg("--verbose");
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The entries counted are the ones `--verbose` names (table data,
    /// indexes, constraints, foreign keys), in `pg_restore --list`'s form.
    #[test]
    fn the_steps_of_a_table_of_contents_are_counted() {
        let list = "\
;
; Archive created at 2026-11-27 07:40:01 UTC
;     dbname: pgnload
;
3759; 0 16385 TABLE DATA public pgnload_migrations pgnload
3761; 0 16508 TABLE DATA public positions pgnload
225; 1259 16394 TABLE public games pgnload
3560; 2606 16605 CONSTRAINT public games games_pkey pgnload
3590; 1259 16630 INDEX public moves_game_idx pgnload
3600; 2606 16640 FK CONSTRAINT public moves moves_game_id_fkey pgnload
4001; 0 0 COMMENT public TABLE games pgnload
;3762; 0 16509 TABLE DATA public excluded pgnload
";
        assert_eq!(named_steps(list), 5);
        assert_eq!(named_steps(""), 0);
    }
}
