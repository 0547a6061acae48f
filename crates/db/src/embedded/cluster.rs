//! The handle on one data directory: where its cluster, socket and log
//! live, how to connect, and whether the server runs. Starting and stopping
//! are in `session.rs`; running the server programs in `server.rs`.

use std::{
    ffi::OsStr,
    fmt::Write as _,
    fs, io,
    path::{Path, PathBuf},
};

use nix::unistd::{User, geteuid};

use super::{
    DB_NAME, DB_USER, MAX_SOCKET_PATH, PORT, RELOCATION_ROOT, SERVICE_USER, SOCKET_FILE,
    binaries::PgBinaries,
    error::{EmbeddedError, Result, io_err},
    server::running_pid,
    service_user::{ServiceAccount, check_traversable},
};

/// Whether the cluster exists and whether its server runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClusterStatus {
    /// No complete cluster yet: the first session will run `initdb`.
    NotInitialized,
    /// Initialized, no server running.
    Stopped,
    /// A server runs on this cluster.
    Running {
        /// The postmaster's process id (from `postmaster.pid`, checked alive).
        pid: u32,
    },
}

/// pgnload's private PostgreSQL cluster in one data directory. Cheap to
/// clone; holds only paths (all state is on disk, shared between processes).
#[derive(Debug, Clone)]
pub struct EmbeddedCluster {
    pub(super) data_dir: PathBuf,
    pub(super) pgdata: PathBuf,
    pub(super) socket_dir: PathBuf,
    pub(super) bins: PgBinaries,
    /// The directory the user asked for, when the cluster lives elsewhere:
    /// the first start makes it a symlink to `data_dir`.
    pub(super) pointer: Option<PathBuf>,
}

impl EmbeddedCluster {
    /// A handle on the cluster in `data_dir` (created on first start).
    /// Locates the server programs now, so that a missing installation is
    /// reported before any work; the path is made absolute (symlinks in its
    /// existing part resolved) so that every process sharing the directory
    /// derives the same socket directory.
    ///
    /// Running as root, a data directory that does not exist yet and that
    /// the service user could not reach (a checkout under `/root`, mode
    /// 0700) is placed under `/var/lib/pgnload` instead, and the first start
    /// leaves a symlink where the user asked, saying so once: the README's
    /// first command then works without changing any permissions, and every
    /// later command finds the cluster through the link. An existing
    /// directory is never moved.
    pub fn new(data_dir: impl Into<PathBuf>) -> Result<Self, EmbeddedError> {
        let data_dir = data_dir.into();
        let requested = canonical_absolute(&data_dir)
            .map_err(io_err("resolving the data directory", &data_dir))?;
        let bins = PgBinaries::locate()?;
        Ok(match relocation_for(&requested) {
            Some(real) => EmbeddedCluster {
                pointer: Some(requested),
                ..Self::with_binaries(real, bins)
            },
            None => Self::with_binaries(requested, bins),
        })
    }

    fn with_binaries(data_dir: PathBuf, bins: PgBinaries) -> Self {
        EmbeddedCluster {
            pgdata: data_dir.join("pgdata"),
            socket_dir: socket_dir_for(&data_dir),
            data_dir,
            bins,
            pointer: None,
        }
    }

    /// The pgnload data directory (absolute).
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The PostgreSQL cluster directory (PGDATA) inside the data directory,
    /// for tools like `pg_dump` or `pg_ctl` run by hand.
    pub fn pgdata(&self) -> &Path {
        &self.pgdata
    }

    /// The directory holding the server's Unix socket.
    pub fn socket_dir(&self) -> &Path {
        &self.socket_dir
    }

    /// The server log, where PostgreSQL explains failures.
    pub fn log_file(&self) -> PathBuf {
        self.data_dir.join("log").join("server.log")
    }

    /// The server programs this cluster uses.
    pub fn binaries(&self) -> &PgBinaries {
        &self.bins
    }

    /// Whether the cluster exists and its server runs. A `postmaster.pid`
    /// left by a crashed server does not count as running.
    pub fn status(&self) -> Result<ClusterStatus, EmbeddedError> {
        if !self.pgdata.join("PG_VERSION").exists() {
            return Ok(ClusterStatus::NotInitialized);
        }
        Ok(match running_pid(&self.pgdata)? {
            Some(pid) => ClusterStatus::Running { pid },
            None => ClusterStatus::Stopped,
        })
    }

    /// A libpq connection URL for psql and other tools:
    /// `postgresql:///pgnload?host=<socket dir>&port=5432&user=pgnload`,
    /// the socket path percent-encoded. The port is included because it
    /// names the socket file and a `PGPORT` in the environment would
    /// otherwise override it.
    pub fn connection_url(&self) -> String {
        format!(
            "postgresql:///{DB_NAME}?host={}&port={PORT}&user={DB_USER}",
            percent_encode(self.socket_dir.as_os_str())
        )
    }

    /// tokio-postgres configuration for the cluster: the socket directory
    /// as host, user and database `pgnload` (trust authentication).
    pub fn pg_config(&self) -> tokio_postgres::Config {
        let mut config = tokio_postgres::Config::new();
        config
            .host_path(&self.socket_dir)
            .port(PORT)
            .user(DB_USER)
            .dbname(DB_NAME)
            .application_name("pgnload");
        config
    }

    pub(super) fn transition_lock_path(&self) -> PathBuf {
        self.data_dir.join("transition.lock")
    }

    pub(super) fn sessions_lock_path(&self) -> PathBuf {
        self.data_dir.join("sessions.lock")
    }

    pub(super) fn persistent_mark_path(&self) -> PathBuf {
        self.data_dir.join("persistent")
    }

    pub(super) fn log_dir(&self) -> PathBuf {
        self.data_dir.join("log")
    }
}

/// Absolute form of `path` with symlinks resolved in its existing part.
fn canonical_absolute(path: &Path) -> io::Result<PathBuf> {
    let absolute = std::path::absolute(path)?;
    let mut existing = absolute.as_path();
    let mut rest: Vec<&OsStr> = Vec::new();
    loop {
        if let Ok(mut real) = fs::canonicalize(existing) {
            real.extend(rest.iter().rev());
            return Ok(real);
        }
        match (existing.file_name(), existing.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                existing = parent;
            }
            _ => return Ok(absolute),
        }
    }
}

/// Where a new data directory at `requested` goes instead when pgnload runs
/// as root and the service user could not reach it: a directory under
/// [`RELOCATION_ROOT`] named after it (stable, so every process agrees).
/// `None` when it can stay (or already exists, or there is no service user
/// yet to check for; the start then explains what is wrong).
fn relocation_for(requested: &Path) -> Option<PathBuf> {
    if !geteuid().is_root() || fs::symlink_metadata(requested).is_ok() {
        return None;
    }
    let acct = ServiceAccount::from(User::from_name(SERVICE_USER).ok().flatten()?);
    check_traversable(requested, &acct).err()?;
    let name: String = requested
        .file_name()
        .map_or_else(
            || "pgnload-data".into(),
            |n| n.to_string_lossy().into_owned(),
        )
        .chars()
        .take(40)
        .collect();
    let hash = xxhash_rust::xxh64::xxh64(requested.as_os_str().as_encoded_bytes(), 0);
    Some(Path::new(RELOCATION_ROOT).join(format!("{name}-{hash:016x}")))
}

/// `<data_dir>/run` if the socket path fits in `sun_path`, else a stable
/// directory under /tmp named from a hash of the data directory path.
fn socket_dir_for(data_dir: &Path) -> PathBuf {
    let run = data_dir.join("run");
    if run.as_os_str().len() + 1 + SOCKET_FILE.len() <= MAX_SOCKET_PATH {
        return run;
    }
    let hash = xxhash_rust::xxh64::xxh64(data_dir.as_os_str().as_encoded_bytes(), 0);
    PathBuf::from(format!("/tmp/pgnload-{hash:016x}"))
}

/// Percent-encodes a path for a URL query value, keeping `/` readable.
fn percent_encode(value: &OsStr) -> String {
    let mut out = String::new();
    for &b in value.as_encoded_bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_dir_short_and_long() {
        let short = Path::new("/srv/pgnload-data");
        assert_eq!(socket_dir_for(short), short.join("run"));
        let long = PathBuf::from(format!("/srv/{}", "x".repeat(90)));
        let dir = socket_dir_for(&long);
        assert!(dir.starts_with("/tmp"), "{}", dir.display());
        assert_eq!(dir, socket_dir_for(&long), "stable");
        assert_ne!(dir, socket_dir_for(&long.join("y")));
        assert!(dir.as_os_str().len() + 1 + SOCKET_FILE.len() <= MAX_SOCKET_PATH);
        // The limit itself: exactly MAX_SOCKET_PATH bytes stays in the data dir.
        let n = MAX_SOCKET_PATH - "/run/".len() - SOCKET_FILE.len();
        let edge = PathBuf::from(format!("/{}", "e".repeat(n - 1)));
        assert_eq!(socket_dir_for(&edge), edge.join("run"));
        let over = PathBuf::from(format!("/{}", "e".repeat(n)));
        assert!(socket_dir_for(&over).starts_with("/tmp"));
    }

    #[test]
    fn url_encoding() {
        assert_eq!(percent_encode(OsStr::new("/a b/c%d&e")), "/a%20b/c%25d%26e");
    }

    #[test]
    fn canonical_absolute_keeps_missing_tail() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let real = fs::canonicalize(dir.path())?;
        let p = canonical_absolute(&dir.path().join("a/b"))?;
        assert_eq!(p, real.join("a").join("b"));
        Ok(())
    }
}
