//! `pgnload db backup` / `pgnload db restore`: PostgreSQL's own `pg_dump`
//! and `pg_restore`, pointed at the database pgnload itself uses.
//!
//! pgnload does not write its own dump format: `pg_dump` takes one
//! consistent snapshot of every table (an import running meanwhile is
//! either in it up to a committed checkpoint or not at all), and its
//! archives are what any PostgreSQL operator can read. What pgnload adds is
//! what is easy to get wrong by hand: reaching the embedded cluster (start
//! it, its socket, its user), taking the tools of the server's own major
//! version, passing a password without showing it (`ps` shows every
//! argument, so it goes into a 0600 password file), never leaving a
//! half-written archive where a backup is expected, and never restoring
//! into a database that already holds something, where `pg_restore` would
//! merge two histories.

use std::{
    ffi::{OsStr, OsString},
    fmt::Write as _,
    fs,
    io::{self, Read},
    num::NonZeroUsize,
    os::unix::ffi::OsStrExt,
    path::{Path, PathBuf},
    process::{Command, ExitStatus, Stdio},
    sync::{
        Arc,
        atomic::{AtomicI32, AtomicUsize, Ordering},
    },
    time::Instant,
};

use nix::{
    sys::signal::{Signal, kill},
    unistd::Pid,
};

use tokio_postgres::config::{Host, SslMode};

use crate::{
    child::{SecretFile, guarded},
    db::{self, Target, redact_url},
    embedded::{EmbeddedCluster, PgBinaries},
    error::{Error, ErrorKind, ExitStatus as PgnloadExit},
    shards,
};

/// How much of a tool's stderr is kept for the error message: its first
/// lines name the problem, and a runaway tool must not fill memory.
const STDERR_LIMIT: usize = 32 << 10;
/// Objects named when a restore target is refused as not empty.
const OBJECTS_NAMED: usize = 5;

/// The archive formats pgnload writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// One file (`pg_dump --format=custom`), compressed; restored in
    /// parallel too, but written by one job.
    Custom,
    /// A directory of one file per table (`pg_dump --format=directory`),
    /// written and restored with parallel jobs.
    Directory,
}

impl Format {
    /// Both formats, in the order `--help` lists them.
    pub const ALL: [Format; 2] = [Format::Custom, Format::Directory];

    /// The format a path asks for when none is given: a directory for a
    /// path ending in `/` or naming an existing directory, else one file.
    pub fn for_path(path: &Path) -> Format {
        if path.as_os_str().as_encoded_bytes().ends_with(b"/") || path.is_dir() {
            Format::Directory
        } else {
            Format::Custom
        }
    }

    /// pg_dump's name for it, which is also its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Format::Custom => "custom",
            Format::Directory => "directory",
        }
    }
}

/// Why a backup or restore could not run, or failed.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// `pg_dump` or `pg_restore` is not installed where pgnload looks.
    #[error(
        "{tool} not found (looked in: {searched}); it comes with the PostgreSQL client \
         programs (Debian package `postgresql-client-{major}`), or point PG_BIN at the \
         directory holding it",
        searched = .searched.join(", ")
    )]
    ToolMissing {
        /// `pg_dump` or `pg_restore`.
        tool: &'static str,
        /// The server's major version.
        major: u32,
        /// The directories searched.
        searched: Vec<String>,
    },
    /// The tool found is of another major version than the server.
    #[error(
        "{} is PostgreSQL {tool_version} but the server is PostgreSQL {server_version}: \
         use the tools of the server's major version (PG_BIN=/usr/lib/postgresql/{server_major}/bin)",
        path.display()
    )]
    VersionMismatch {
        /// The tool's path.
        path: PathBuf,
        /// What `--version` printed, after the program name.
        tool_version: String,
        /// The server's `server_version`.
        server_version: String,
        /// The server's major version.
        server_major: u32,
    },
    /// The backup destination exists: a backup never overwrites anything.
    #[error(
        "{} already exists; pgnload never overwrites a backup: remove it or choose another name",
        path.display()
    )]
    Exists {
        /// The destination.
        path: PathBuf,
    },
    /// An impossible combination of options.
    #[error("{0}")]
    Options(String),
    /// The backup to restore is not there.
    #[error("no backup at {}: {source}", path.display())]
    NoBackup {
        /// The path given.
        path: PathBuf,
        /// Why it cannot be read.
        #[source]
        source: io::Error,
    },
    /// `pg_restore --list` cannot read the archive: not a backup, or a
    /// damaged one. Nothing was changed.
    #[error(
        "{} is not a backup pg_restore can read (nothing was changed){}",
        path.display(),
        section(stderr)
    )]
    NotAnArchive {
        /// The path given.
        path: PathBuf,
        /// What `pg_restore --list` said.
        stderr: String,
    },
    /// The restore target holds tables or types already: a restore would
    /// merge two databases.
    #[error(
        "{target} is not empty: it holds {count} {what} ({names}{more}); a restore only goes \
         into an empty database, it never merges: restore into a new --data-dir, or into a \
         new database (CREATE DATABASE) given with --database-url",
        what = if *.count == 1 { "object" } else { "objects" },
        names = .names.join(", "),
        more = if *.count > .names.len() { ", …" } else { "" }
    )]
    NotEmpty {
        /// The database, as safe to print.
        target: String,
        /// How many tables, views, sequences and types it holds.
        count: usize,
        /// The first few, pgnload's own first.
        names: Vec<String>,
    },
    /// A file pgnload manages around the tool (the password file, the
    /// finished archive) could not be written or moved.
    #[error("{context} {}: {source}", path.display())]
    Io {
        /// What pgnload was doing.
        context: &'static str,
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The tool could not be started.
    #[error("could not run {}: {source}", path.display())]
    Spawn {
        /// The program.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// Ctrl-C or SIGTERM stopped the tool.
    #[error("{tool} was stopped by an interrupt; {aftermath}")]
    Interrupted {
        /// `pg_dump` or `pg_restore`.
        tool: &'static str,
        /// What the interruption left behind.
        aftermath: String,
    },
    /// The tool ran and failed; its stderr, once.
    #[error("{tool} failed ({status}); {aftermath}{}", section(stderr))]
    Failed {
        /// `pg_dump` or `pg_restore`.
        tool: &'static str,
        /// Its exit status.
        status: ExitStatus,
        /// What the failure left behind.
        aftermath: String,
        /// Its stderr (the first [`STDERR_LIMIT`] bytes).
        stderr: String,
    },
}

impl BackupError {
    /// The kind of failure, for [`Error::kind`].
    pub fn kind(&self) -> ErrorKind {
        match self {
            BackupError::ToolMissing { .. }
            | BackupError::VersionMismatch { .. }
            | BackupError::Options(_) => ErrorKind::Configuration,
            BackupError::Exists { .. } | BackupError::NotEmpty { .. } => ErrorKind::Conflict,
            BackupError::NoBackup { .. } | BackupError::NotAnArchive { .. } => ErrorKind::Input,
            BackupError::Io { .. }
            | BackupError::Spawn { .. }
            | BackupError::Interrupted { .. } => ErrorKind::System,
            BackupError::Failed { .. } => ErrorKind::Database { transient: false },
        }
    }

    /// Says what a failed or interrupted tool left behind.
    fn leaving(self, what: String) -> BackupError {
        match self {
            BackupError::Failed {
                tool,
                status,
                stderr,
                ..
            } => BackupError::Failed {
                tool,
                status,
                aftermath: what,
                stderr,
            },
            BackupError::Interrupted { tool, .. } => BackupError::Interrupted {
                tool,
                aftermath: what,
            },
            other => other,
        }
    }
}

/// A tool's stderr as the tail of a message.
fn section(stderr: &str) -> String {
    let stderr = stderr.trim_end();
    if stderr.is_empty() {
        String::new()
    } else {
        format!("\n{stderr}")
    }
}

/// What [`backup`] and [`restore`] did, for the summary line.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Bytes of the archive (all files of a directory archive).
    pub bytes: u64,
    /// Wall time of the tool.
    pub seconds: f64,
    /// Migrations applied after a restore (the backup's schema was older).
    pub migrations: Vec<&'static str>,
}

/// `pgnload db backup`: `pg_dump` of `target` into `path`, written under a
/// temporary name beside it and moved into place only once complete, so
/// that a failed or interrupted backup never leaves a file that looks like
/// one. `jobs` (directory format only) defaults to one per core.
pub fn backup(
    target: &Target,
    path: &Path,
    format: Option<Format>,
    jobs: Option<NonZeroUsize>,
    progress: &dyn Fn(&str),
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
    let runtime = db::runtime()?;
    let interrupts = Interrupts::watch(&runtime)?;
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
        progress(&format!(
            "backing up {} with {} ({} format, {jobs} job{}) to {}",
            database.description,
            tool.display(),
            format.name(),
            if jobs == 1 { "" } else { "s" },
            path.display()
        ));
        let mut cmd = link.command(&tool);
        cmd.arg(format!("--format={}", format.name()))
            .arg("--file")
            .arg(&staging);
        if format == Format::Directory {
            cmd.arg(format!("--jobs={jobs}"));
        }
        let started = Instant::now();
        let ran = interrupts.run_tool(cmd, &tool, "pg_dump");
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

/// `pgnload db restore`: `pg_restore` of the archive at `path` into
/// `target`, which must hold no table, view, sequence or type (a fresh
/// embedded data dir, or a new database). The archive is read through
/// once (`pg_restore --list`) before the database is touched, so a file
/// that is no backup changes nothing. With one job the restore is one
/// transaction: a failure leaves the database empty. With more (the
/// default for a directory), a failure can leave part of it. The schema's
/// migrations are then checked and applied as before any import.
pub fn restore(
    target: &Target,
    path: &Path,
    jobs: Option<NonZeroUsize>,
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
    let runtime = db::runtime()?;
    let interrupts = Interrupts::watch(&runtime)?;
    let mut database = runtime.block_on(db::connect(target))?;
    let result = (|| {
        let server = runtime.block_on(server_version(&database.client))?;
        let link = Link::new(target)?;
        let tool = locate_tool("pg_restore", target, &server)?;
        let mut list = link.command(&tool);
        list.arg("--list").arg(&path);
        interrupts
            .run_tool(list, &tool, "pg_restore")
            .map_err(|e| match e {
                BackupError::Failed { stderr, .. } => BackupError::NotAnArchive {
                    path: path.clone(),
                    stderr,
                },
                other => other.leaving("nothing was changed".into()),
            })?;
        runtime.block_on(ensure_empty(&database.client, &database.description))?;
        interrupts.check("pg_restore")?;
        progress(&format!(
            "restoring {} into {} with {} ({jobs} job{})",
            path.display(),
            database.description,
            tool.display(),
            if jobs == 1 { ", one transaction" } else { "s" },
        ));
        let mut cmd = link.command(&tool);
        // Objects belong to whoever restores (a --database-url role need
        // not be the embedded cluster's `pgnload`); the first error stops
        // the restore rather than leaving a database with holes.
        cmd.args(["--no-owner", "--no-privileges", "--exit-on-error"]);
        if jobs == 1 {
            cmd.arg("--single-transaction");
        } else {
            cmd.arg(format!("--jobs={jobs}"));
        }
        cmd.arg(&path);
        let started = Instant::now();
        interrupts.run_tool(cmd, &tool, "pg_restore").map_err(|e| {
            e.leaving(if jobs == 1 {
                format!(
                    "the restore was rolled back: {} is still empty",
                    database.description
                )
            } else {
                format!(
                    "{} now holds part of the backup: empty it (a new --data-dir, or \
                     DROP and CREATE DATABASE) before restoring again",
                    database.description
                )
            })
        })?;
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

/// One job per core, the default for directory archives.
fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, NonZeroUsize::get)
}

/// `dir/` as `dir`, so that the staging name is a sibling, not a child.
fn trim_slash(path: &Path) -> PathBuf {
    let bytes = path.as_os_str().as_encoded_bytes();
    let trimmed = bytes.len() - bytes.iter().rev().take_while(|&&b| b == b'/').count();
    if trimmed == 0 {
        return path.to_path_buf();
    }
    PathBuf::from(OsStr::from_bytes(&bytes[..trimmed]))
}

/// A custom-format destination must not exist; a directory one must not
/// exist or be empty (pg_dump's own rule).
fn check_destination(path: &Path, format: Format) -> Result<(), BackupError> {
    let exists = || BackupError::Exists {
        path: path.to_path_buf(),
    };
    match fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(BackupError::Io {
            context: "checking the backup destination",
            path: path.to_path_buf(),
            source,
        }),
        Ok(meta) if format == Format::Directory && meta.is_dir() => {
            let mut entries = fs::read_dir(path).map_err(|source| BackupError::Io {
                context: "reading the backup destination",
                path: path.to_path_buf(),
                source,
            })?;
            if entries.next().is_some() {
                Err(exists())
            } else {
                Ok(())
            }
        }
        Ok(_) => Err(exists()),
    }
}

/// Where pg_dump writes before the archive is complete: beside the
/// destination (same file system, so the final move is a rename), named
/// after it and this process.
fn staging_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().map(OsString::from).unwrap_or_default();
    name.push(format!(".partial-{}", std::process::id()));
    path.with_file_name(name)
}

/// Moves the finished archive into place without replacing anything that
/// appeared there meanwhile: a file by a hard link (which fails if the
/// name exists) then removal of the staging name; a directory by rename,
/// which replaces only an empty directory.
fn publish(staging: &Path, path: &Path) -> Result<(), BackupError> {
    let io = |context| {
        move |source| BackupError::Io {
            context,
            path: path.to_path_buf(),
            source,
        }
    };
    if staging.is_dir() {
        fs::rename(staging, path).map_err(io("moving the finished backup to"))
    } else {
        fs::hard_link(staging, path).map_err(io("moving the finished backup to"))?;
        fs::remove_file(staging).map_err(io("removing the temporary name of"))
    }
}

/// Removes a failed backup's staging file or directory (best effort: it
/// is named `.partial-PID`, so a leftover is recognizable).
fn remove_all(path: &Path) {
    let _ = if path.is_dir() {
        fs::remove_dir_all(path)
    } else {
        fs::remove_file(path)
    };
}

/// Bytes of a file, or of all files in a directory (one level: what
/// pg_dump's directory format writes).
fn disk_bytes(path: &Path) -> u64 {
    match fs::read_dir(path) {
        Ok(entries) => entries
            .filter_map(|e| e.ok()?.metadata().ok())
            .filter(fs::Metadata::is_file)
            .map(|m| m.len())
            .sum(),
        Err(_) => fs::metadata(path).map_or(0, |m| m.len()),
    }
}

/// The server's version: its text and its major number.
#[derive(Debug, Clone)]
struct ServerVersion {
    text: String,
    major: u32,
}

async fn server_version(client: &tokio_postgres::Client) -> Result<ServerVersion, Error> {
    let row = client
        .query_one(
            "SELECT current_setting('server_version'), \
                    current_setting('server_version_num')::int",
            &[],
        )
        .await
        .map_err(db::db_err("reading the server's version"))?;
    let num: i32 = row.get(1);
    let num = u32::try_from(num)
        .map_err(|_| Error::inconsistent(format!("server_version_num is {num}")))?;
    Ok(ServerVersion {
        text: row.get(0),
        major: major_of_num(num),
    })
}

/// The major version in `server_version_num` form: 170006 → 17, and for
/// the old two-part majors 90624 → 906.
fn major_of_num(num: u32) -> u32 {
    if num >= 100_000 {
        num / 10_000
    } else {
        num / 100
    }
}

/// The major version a tool's `--version` prints (`pg_dump (PostgreSQL)
/// 17.6 (Debian 17.6-1)` → 17, `9.6.24` → 906), and the version text.
fn tool_major(version_output: &str) -> Option<(u32, String)> {
    let version = version_output
        .split(") ")
        .nth(1)?
        .split_whitespace()
        .next()?;
    let mut parts = version
        .split(|c: char| !c.is_ascii_digit())
        .filter(|p| !p.is_empty())
        .map(str::parse::<u32>);
    let first = parts.next()?.ok()?;
    let major = if first >= 10 {
        first
    } else {
        first * 100 + parts.next()?.ok()?
    };
    Some((major, version.to_owned()))
}

/// Finds `tool` for a server of `server.major` and checks its version:
/// `PG_BIN` alone when set (as for the embedded cluster's programs); else
/// beside the embedded cluster's server programs, the Debian directory of
/// the server's major version, the server programs' directory pgnload
/// would use, then `PATH`.
fn locate_tool(
    tool: &'static str,
    target: &Target,
    server: &ServerVersion,
) -> Result<PathBuf, BackupError> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    match std::env::var_os("PG_BIN").filter(|d| !d.is_empty()) {
        Some(dir) => dirs.push(PathBuf::from(dir)),
        None => {
            if let Target::Embedded(data_dir) = target
                && let Ok(cluster) = EmbeddedCluster::new(data_dir)
            {
                dirs.push(cluster.binaries().bin_dir.clone());
            }
            dirs.push(PathBuf::from(format!(
                "/usr/lib/postgresql/{}/bin",
                server.major
            )));
            if let Ok(bins) = PgBinaries::locate() {
                dirs.push(bins.bin_dir);
            }
            dirs.extend(
                std::env::var_os("PATH")
                    .iter()
                    .flat_map(std::env::split_paths),
            );
        }
    }
    let found = dirs.iter().map(|d| d.join(tool)).find(|p| {
        fs::metadata(p).is_ok_and(|m| {
            use std::os::unix::fs::PermissionsExt;
            m.is_file() && m.permissions().mode() & 0o111 != 0
        })
    });
    let Some(path) = found else {
        let mut searched: Vec<String> = Vec::new();
        for dir in &dirs {
            let dir = dir.display().to_string();
            if !searched.contains(&dir) {
                searched.push(dir);
            }
        }
        return Err(BackupError::ToolMissing {
            tool,
            major: server.major,
            searched,
        });
    };
    let output = Command::new(&path)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .map_err(|source| BackupError::Spawn {
            path: path.clone(),
            source,
        })?;
    let text = String::from_utf8_lossy(&output.stdout);
    match tool_major(&text) {
        Some((major, _)) if major == server.major => Ok(path),
        parsed => Err(BackupError::VersionMismatch {
            tool_version: parsed.map_or_else(|| text.trim().to_owned(), |(_, v)| v),
            path,
            server_version: server.text.clone(),
            server_major: server.major,
        }),
    }
}

/// How the tools reach the database pgnload uses: a libpq connection
/// string with every parameter pgnload's own connection has except the
/// password, which goes into a password file (libpq's `PGPASSFILE`) held
/// in memory only ([`SecretFile`]): it never exists on a disk, so a killed
/// pgnload leaves none behind.
struct Link {
    conninfo: String,
    passfile: Option<SecretFile>,
}

impl Link {
    fn new(target: &Target) -> Result<Link, Error> {
        let config = match target {
            Target::Embedded(dir) => EmbeddedCluster::new(dir)?.pg_config(),
            Target::Url(url) => url.parse().map_err(|_: tokio_postgres::Error| {
                Error::Config(format!("invalid connection string {}", redact_url(url)))
            })?,
        };
        let passfile = match config.get_password() {
            Some(password) => Some(write_passfile(password)?),
            None => None,
        };
        Ok(Link {
            conninfo: conninfo(&config),
            passfile,
        })
    }

    /// `tool --dbname=… --no-password`, with none of the caller's `PG*`
    /// variables (pgnload's own connection ignores them, so the tool must
    /// too: a `PGHOST` would send it elsewhere) except the password file;
    /// started [`guarded`], so that it dies with pgnload.
    fn command(&self, tool: &Path) -> Command {
        let mut cmd = guarded(tool);
        for (key, _) in std::env::vars_os() {
            if key.as_encoded_bytes().starts_with(b"PG") {
                cmd.env_remove(key);
            }
        }
        if let Some(passfile) = &self.passfile {
            cmd.env("PGPASSFILE", passfile.path());
        }
        cmd.arg(format!("--dbname={}", self.conninfo))
            .arg("--no-password")
            .stdin(Stdio::null());
        cmd
    }
}

/// A libpq `key='value'` connection string of `config`, without its
/// password.
fn conninfo(config: &tokio_postgres::Config) -> String {
    let mut parts: Vec<(&str, String)> = Vec::new();
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .map(|host| match host {
            Host::Tcp(name) => name.clone(),
            Host::Unix(dir) => dir.display().to_string(),
        })
        .collect();
    if !hosts.is_empty() {
        parts.push(("host", hosts.join(",")));
    }
    let addrs: Vec<String> = config
        .get_hostaddrs()
        .iter()
        .map(ToString::to_string)
        .collect();
    if !addrs.is_empty() {
        parts.push(("hostaddr", addrs.join(",")));
    }
    let ports: Vec<String> = config.get_ports().iter().map(ToString::to_string).collect();
    if !ports.is_empty() {
        parts.push(("port", ports.join(",")));
    }
    for (key, value) in [
        ("user", config.get_user()),
        ("dbname", config.get_dbname()),
        ("options", config.get_options()),
        ("application_name", config.get_application_name()),
    ] {
        if let Some(value) = value {
            parts.push((key, value.to_owned()));
        }
    }
    parts.push((
        "sslmode",
        match config.get_ssl_mode() {
            SslMode::Disable => "disable",
            SslMode::Require => "require",
            _ => "prefer",
        }
        .to_owned(),
    ));
    if let Some(timeout) = config.get_connect_timeout() {
        parts.push(("connect_timeout", timeout.as_secs().max(1).to_string()));
    }
    let mut out = String::new();
    for (key, value) in parts {
        if !out.is_empty() {
            out.push(' ');
        }
        let _ = write!(
            out,
            "{key}='{}'",
            value.replace('\\', "\\\\").replace('\'', "\\'")
        );
    }
    out
}

/// The password file of `password`: `*:*:*:*:password` (`:` and `\`
/// escaped as libpq reads them) in a [`SecretFile`]. A line break cannot
/// be written in that format, so a password holding one is refused rather
/// than cut.
fn write_passfile(password: &[u8]) -> Result<SecretFile, BackupError> {
    if password.iter().any(|&b| b == b'\n' || b == b'\r') {
        return Err(BackupError::Options(
            "the connection string's password holds a line break, which pg_dump's password \
             file cannot hold"
                .into(),
        ));
    }
    let mut line = b"*:*:*:*:".to_vec();
    for &b in password {
        if b == b':' || b == b'\\' {
            line.push(b'\\');
        }
        line.push(b);
    }
    line.push(b'\n');
    SecretFile::new("pgnload-passfile", &line).map_err(|source| BackupError::Io {
        context: "writing the password file in memory",
        path: PathBuf::from("memfd:pgnload-passfile"),
        source,
    })
}

/// Ctrl-C and SIGTERM while pgnload backs up or restores. The first one
/// stops the running tool (SIGTERM; in a terminal, Ctrl-C reaches it
/// directly too), whose unfinished output is then removed, and the command
/// ends with exit code 3; a second one exits at once. Without this, the
/// signal would end pgnload before it could clean up after the tool.
#[derive(Debug, Clone, Default)]
struct Interrupts {
    count: Arc<AtomicUsize>,
    /// The running tool's pid, 0 when none runs.
    child: Arc<AtomicI32>,
}

impl Interrupts {
    fn watch(runtime: &tokio::runtime::Runtime) -> Result<Interrupts, Error> {
        use tokio::signal::unix::{SignalKind, signal};
        let _entered = runtime.enter();
        let installed = |kind: SignalKind| {
            signal(kind).map_err(|source| Error::System {
                what: "installing a signal handler",
                source,
            })
        };
        let (mut int, mut term) = (
            installed(SignalKind::interrupt())?,
            installed(SignalKind::terminate())?,
        );
        let interrupts = Interrupts::default();
        let watcher = interrupts.clone();
        runtime.spawn(async move {
            loop {
                tokio::select! {
                    _ = int.recv() => {}
                    _ = term.recv() => {}
                }
                if watcher.count.fetch_add(1, Ordering::SeqCst) == 0 {
                    stderr_line!("pgnload: interrupted: stopping (again to exit at once)");
                    watcher.stop_child();
                } else {
                    stderr_line!("pgnload: interrupted again: exiting now");
                    std::process::exit(i32::from(PgnloadExit::Interrupted.code()));
                }
            }
        });
        Ok(interrupts)
    }

    fn interrupted(&self) -> bool {
        self.count.load(Ordering::SeqCst) > 0
    }

    /// Before a tool starts: an interrupt already received ends the command.
    fn check(&self, tool: &'static str) -> Result<(), BackupError> {
        if self.interrupted() {
            return Err(BackupError::Interrupted {
                tool,
                aftermath: "it did not start".into(),
            });
        }
        Ok(())
    }

    fn stop_child(&self) {
        let pid = self.child.load(Ordering::SeqCst);
        if pid > 0 {
            // It may have exited already (then it is a zombie until waited
            // for, so the pid is still its own): nothing to do.
            let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
        }
    }

    /// Runs a tool to completion with stdout discarded and stderr kept
    /// (its first [`STDERR_LIMIT`] bytes; the rest is read and counted, so
    /// the tool never blocks on a full pipe).
    fn run_tool(
        &self,
        mut cmd: Command,
        path: &Path,
        tool: &'static str,
    ) -> Result<(), BackupError> {
        let mut child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| BackupError::Spawn {
                path: path.to_path_buf(),
                source,
            })?;
        self.child
            .store(i32::try_from(child.id()).unwrap_or(0), Ordering::SeqCst);
        // An interrupt between the check before the spawn and the store
        // above found no child to stop.
        if self.interrupted() {
            self.stop_child();
        }
        let mut kept = Vec::new();
        let mut dropped = 0u64;
        if let Some(mut stderr) = child.stderr.take() {
            let mut buf = [0u8; 8192];
            loop {
                match stderr.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        let room = STDERR_LIMIT.saturating_sub(kept.len()).min(n);
                        kept.extend_from_slice(&buf[..room]);
                        dropped += (n - room) as u64;
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    // The tool's exit status still says how it went.
                    Err(_) => break,
                }
            }
        }
        let status = child.wait();
        self.child.store(0, Ordering::SeqCst);
        let status = status.map_err(|source| BackupError::Spawn {
            path: path.to_path_buf(),
            source,
        })?;
        let mut stderr = String::from_utf8_lossy(&kept).into_owned();
        if dropped > 0 {
            let _ = write!(stderr, "\n(… {dropped} more bytes of {tool}'s output)");
        }
        if status.success() {
            if !stderr.trim().is_empty() {
                stderr_line!("pgnload: {tool} said:\n{}", stderr.trim_end());
            }
            return Ok(());
        }
        if self.interrupted() {
            return Err(BackupError::Interrupted {
                tool,
                aftermath: String::new(),
            });
        }
        Err(BackupError::Failed {
            tool,
            status,
            aftermath: String::new(),
            stderr,
        })
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

    #[test]
    fn versions_parse_from_tool_and_server() {
        assert_eq!(
            tool_major("pg_dump (PostgreSQL) 17.6 (Debian 17.6-1.pgdg12+1)\n"),
            Some((17, "17.6".to_owned()))
        );
        assert_eq!(
            tool_major("pg_restore (PostgreSQL) 9.6.24\n"),
            Some((906, "9.6.24".to_owned()))
        );
        assert_eq!(
            tool_major("pg_dump (PostgreSQL) 18beta1"),
            Some((18, "18beta1".to_owned()))
        );
        assert_eq!(tool_major("garbage"), None);
        assert_eq!(major_of_num(170_006), 17);
        assert_eq!(major_of_num(90_624), 906);
    }

    /// The password never reaches the command line nor a disk: the
    /// connection string given to the tool has every other parameter, and
    /// the password sits in a 0600 memory file named by `/dev/fd/N`. The
    /// tool runs behind the guard that ties its life to pgnload's.
    #[test]
    fn the_password_goes_to_a_private_memory_file_not_the_command_line() {
        use std::os::unix::fs::PermissionsExt;
        let target = Target::Url(
            "postgres://alice:s3:cr\\et@db.example:6543/chess?application_name=x'y".into(),
        );
        let link = Link::new(&target).expect("a valid URL");
        let cmd = link.command(Path::new("/bin/true"));
        let args: Vec<String> = cmd
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert!(args.iter().all(|a| !a.contains("s3")), "{args:?}");
        assert_eq!(args[0], crate::child::GUARD_ARG);
        assert_eq!(args[2], "/bin/true");
        assert_eq!(
            args[3],
            "--dbname=host='db.example' port='6543' user='alice' dbname='chess' \
             application_name='x\\'y' sslmode='prefer'"
        );
        let passfile = link.passfile.as_ref().expect("a password file").path();
        assert!(passfile.starts_with("/dev/fd"), "{}", passfile.display());
        let env: Vec<_> = cmd.get_envs().collect();
        assert!(
            env.iter()
                .any(|(k, v)| *k == "PGPASSFILE" && *v == Some(passfile.as_os_str())),
            "{env:?}"
        );
        let meta = fs::metadata(&passfile).expect("the password file exists");
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert_eq!(
            fs::read_to_string(&passfile).expect("readable"),
            "*:*:*:*:s3\\:cr\\\\et\n"
        );
    }

    #[test]
    fn a_password_with_a_line_break_is_refused() {
        assert!(matches!(
            write_passfile(b"a\nb"),
            Err(BackupError::Options(_))
        ));
    }

    #[test]
    fn formats_and_staging_names_follow_the_path() {
        assert_eq!(
            Format::for_path(Path::new("/x/new-dir/")),
            Format::Directory
        );
        assert_eq!(Format::for_path(Path::new("/")), Format::Directory);
        assert_eq!(
            Format::for_path(Path::new("/x/backup.dump")),
            Format::Custom
        );
        assert_eq!(trim_slash(Path::new("a/b//")), PathBuf::from("a/b"));
        assert_eq!(trim_slash(Path::new("/")), PathBuf::from("/"));
        assert_eq!(
            staging_path(Path::new("/x/b.dump")),
            PathBuf::from(format!("/x/b.dump.partial-{}", std::process::id()))
        );
    }
}
