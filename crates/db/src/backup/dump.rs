//! `pgnload db backup`: `pg_dump` into a staging name, moved into place once complete.

use std::{num::NonZeroUsize, path::Path, time::Instant};

use tokio::runtime::Runtime;

use super::{
    BackupError, Format, Interrupts, Outcome,
    archive::{check_destination, disk_bytes, publish, remove_all, staging_path, trim_slash},
    cores,
    link::Link,
    tools::{locate_tool, server_version},
};
use crate::{
    db::{self, Target},
    error::Error,
    progress::{Count, Step, Steps, Unit, copies_out},
    shards,
};

/// `pgnload db backup`: `pg_dump` of `target` into `path`, written under a
/// temporary name beside it and moved into place only once complete, so
/// that a failed or interrupted backup never leaves a file that looks like
/// one. `jobs` (directory format only) defaults to one per core. `steps`
/// hears of each table dumped (`pg_dump --verbose`) and of the bytes written.
/// `interrupts` says when the front end saw Ctrl-C or SIGTERM (its
/// handlers run on `runtime`, which the backup uses too).
pub fn backup(
    target: &Target,
    path: &Path,
    format: Option<Format>,
    jobs: Option<NonZeroUsize>,
    runtime: &Runtime,
    interrupts: &Interrupts,
    steps: Steps<'_>,
) -> Result<Outcome, Error> {
    let format = format.unwrap_or_else(|| Format::for_path(path));
    let jobs = match (format, jobs) {
        (Format::Custom, Some(jobs)) if jobs.get() > 1 => {
            return Err(BackupError::Options(format!(
                "--jobs {jobs}: pg_dump writes a single-file (custom format) backup with one \
                 job; back up to a directory (`--format directory`, or a path ending in /) \
                 for parallel jobs"
            ))
            .into());
        }
        (Format::Custom, _) => 1,
        (Format::Directory, Some(jobs)) => jobs.get(),
        (Format::Directory, None) => cores(),
    };
    let path = trim_slash(path);
    check_destination(&path, format)?;
    let staging = staging_path(&path);
    let database = runtime.block_on(db::connect(target))?;
    let result = (|| {
        runtime.block_on(shards::refuse_if_sharded(
            &database.client,
            "`db backup`",
            "pg_dump of the coordinator would save the shards' table definitions, \
             not their rows; back up the coordinator and each shard with pg_dump",
        ))?;
        let server = runtime.block_on(server_version(&database.client))?;
        let link = Link::new(target)?;
        let tool = locate_tool("pg_dump", target, &server)?;
        interrupts.check("pg_dump")?;
        steps(Step::Said(&format!(
            "backing up {} with {} ({} format, {jobs} job{}) to {}",
            database.description,
            tool.display(),
            format.name(),
            if jobs == 1 { "" } else { "s" },
            path.display()
        )));
        let mut cmd = link.command(&tool);
        cmd.arg("--verbose")
            .arg(format!("--format={}", format.name()))
            .arg("--file")
            .arg(&staging);
        if format == Format::Directory {
            cmd.arg(format!("--jobs={jobs}"));
        }
        // Its sessions' COPY found by name (a name the connection string
        // gives instead hides them: the bytes are still counted).
        let application = format!("pgnload db backup {}", std::process::id());
        cmd.env("PGAPPNAME", &application);
        let started = Instant::now();
        steps(Step::Phase("reading the schema"));
        let mut watch = watch_dump(steps, runtime, &database.client, &application, &staging);
        let ran = interrupts
            .run_tool(cmd, &tool, "pg_dump", &mut watch)
            .map(drop);
        let seconds = started.elapsed().as_secs_f64();
        if let Err(e) = ran.and_then(|()| publish(&staging, &path)) {
            remove_all(&staging);
            return Err(e
                .leaving(format!("no backup was written at {}", path.display()))
                .into());
        }
        Ok::<_, Error>(Outcome {
            bytes: disk_bytes(&path),
            seconds,
            migrations: Vec::new(),
        })
    })();
    let closed = database.close();
    let outcome = result?;
    closed?;
    Ok(outcome)
}

/// What `db backup` shows of a running `pg_dump` (a `watch` of
/// [`Interrupts::run_tool`]): each table's data a phase; the archive's
/// bytes written to `staging` so far (compressed: there is no total to
/// hold them against), and the rows of the tables being copied by the
/// sessions named `application`, as the server counts them (read on
/// `monitor`, idle meanwhile).
fn watch_dump<'a>(
    steps: Steps<'a>,
    runtime: &'a Runtime,
    monitor: &'a tokio_postgres::Client,
    application: &'a str,
    staging: &'a Path,
) -> impl FnMut(Option<&str>) + 'a {
    move |table| {
        if let Some(table) = table {
            steps(Step::Phase(&format!("dumping {table}")));
        }
        let copies = runtime
            .block_on(copies_out(monitor, application))
            .unwrap_or_default();
        let mut detail = String::from("written");
        for copy in &copies {
            detail.push_str("; ");
            detail.push_str(&copy.describe());
        }
        steps(Step::Count(Count {
            done: disk_bytes(staging),
            total: None,
            unit: Unit::Bytes,
            detail: &detail,
        }));
    }
}
