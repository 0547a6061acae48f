//! What can go wrong managing the embedded cluster: each error carries what
//! pgnload was doing and where, so the message alone is enough to act on.

use std::{
    io,
    path::{Path, PathBuf},
};

use nix::errno::Errno;

/// Errors managing the embedded cluster. Each carries what pgnload was doing
/// and where, so that the message alone is enough to act on.
#[derive(Debug, thiserror::Error)]
pub enum EmbeddedError {
    /// The PostgreSQL server programs are not installed or not found.
    #[error(
        "PostgreSQL server programs not found (missing: {missing}; looked in: {searched}). \
         pgnload runs its own PostgreSQL cluster when no database URL is given and needs \
         initdb, pg_ctl and postgres: install them with `apt-get install postgresql` \
         (Debian/Ubuntu package `postgresql`), then point pgnload at them with \
         PG_BIN=/usr/lib/postgresql/15/bin (the directory holding initdb) or by putting \
         that directory on PATH; or give a database URL to use an existing server",
        missing = .missing.join(", "),
        searched = .searched.join(", ")
    )]
    MissingBinaries {
        /// The required programs that were not found in the best candidate directory.
        missing: Vec<String>,
        /// The places searched, in order (e.g. `PG_BIN=/x`, `PATH`, `/usr/lib/postgresql/*/bin`).
        searched: Vec<String>,
    },
    /// A file system operation failed.
    #[error("{context} {}: {source}", path.display())]
    Io {
        /// What pgnload was doing.
        context: String,
        /// The file or directory involved.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// A system call other than file I/O failed (chown, user lookup).
    #[error("{context}: {source}")]
    System {
        /// What pgnload was doing.
        context: String,
        /// The errno.
        #[source]
        source: Errno,
    },
    /// A PostgreSQL program could not be started at all.
    #[error("could not run `{command}`: {source}")]
    Spawn {
        /// The command line.
        command: String,
        /// Why the spawn failed.
        #[source]
        source: io::Error,
    },
    /// A PostgreSQL program ran and failed.
    #[error(
        "`{command}` failed ({status}) for data directory {dir}{out}{log}",
        dir = .data_dir.display(),
        out = section("output", .output),
        log = section("server log (last lines)", .log_tail)
    )]
    Command {
        /// The command line (and the user it ran as).
        command: String,
        /// The pgnload data directory.
        data_dir: PathBuf,
        /// The exit status, as text.
        status: String,
        /// The program's stdout and stderr.
        output: String,
        /// The last lines the server wrote to its log during the attempt (may be empty).
        log_tail: String,
    },
    /// Running as root, the unprivileged `postgres` user is missing and could not be created.
    #[error("{0}")]
    ServiceUser(String),
    /// Running as root, a directory on the way to the data directory (or to
    /// the PostgreSQL programs) cannot be entered by the `postgres` user.
    #[error(
        "the PostgreSQL server must run as user `{user}` (it refuses to run as root), but \
         `{user}` cannot enter {dir} (mode {mode:o}), which it needs to reach {target}. \
         Use a data directory outside it (e.g. `--data-dir /var/tmp/pgnload-data` or one \
         under /srv), or allow traversal: `chmod o+x {dir}`",
        dir = .dir.display(),
        target = .target.display()
    )]
    Untraversable {
        /// The directory lacking search permission for the user.
        dir: PathBuf,
        /// Its permission bits.
        mode: u32,
        /// The user the server runs as.
        user: String,
        /// What the user needs to reach (data directory or binaries).
        target: PathBuf,
    },
    /// The socket directory exists but is not safe to use (wrong owner,
    /// symlink, not a directory): with trust authentication, anyone who
    /// controls it could impersonate or reach the server.
    #[error("unsafe socket directory {}: {reason}; remove it and retry", dir.display())]
    UnsafeSocketDir {
        /// The socket directory.
        dir: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// `stop` was asked while other pgnload processes use the server.
    #[error(
        "the PostgreSQL server of {} is in use by another pgnload process; it was not \
         stopped now and will stop when the last of them finishes",
        data_dir.display()
    )]
    InUse {
        /// The pgnload data directory.
        data_dir: PathBuf,
    },
    /// The cluster directory exists but does not hold a PostgreSQL cluster.
    #[error(
        "{} exists but is not a PostgreSQL data directory (no PG_VERSION); \
         move it away or choose another --data-dir",
        pgdata.display()
    )]
    NotACluster {
        /// The cluster directory.
        pgdata: PathBuf,
    },
}

pub(super) type Result<T, E = EmbeddedError> = std::result::Result<T, E>;

/// Formats an optional multi-line section of an error message.
fn section(title: &str, text: &str) -> String {
    let text = text.trim_end();
    if text.is_empty() {
        String::new()
    } else {
        format!("\n--- {title} ---\n{text}")
    }
}

pub(super) fn io_err(
    context: impl Into<String>,
    path: &Path,
) -> impl FnOnce(io::Error) -> EmbeddedError {
    let context = context.into();
    let path = path.to_path_buf();
    move |source| EmbeddedError::Io {
        context,
        path,
        source,
    }
}

pub(super) fn sys_err(context: impl Into<String>) -> impl FnOnce(Errno) -> EmbeddedError {
    let context = context.into();
    move |source| EmbeddedError::System { context, source }
}
