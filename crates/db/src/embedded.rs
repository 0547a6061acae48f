//! pgnload's private PostgreSQL cluster (the "embedded default").
//!
//! With no database URL, pgnload runs its own cluster so that a new user can
//! import a file with one command and no database administration. The cluster
//! uses the PostgreSQL server programs installed on the machine (found by
//! [`PgBinaries::locate`]); nothing is downloaded.
//!
//! # Layout of the data directory
//!
//! The directory the user names (default `./pgnload-data`) belongs to pgnload;
//! the PostgreSQL cluster proper lives in a subdirectory. `initdb` refuses a
//! non-empty directory, yet the lock files must exist *before* `initdb` runs
//! (two first-time imports started together must not both initialize), so the
//! two cannot share one directory.
//!
//! ```text
//! <data_dir>/
//!   pgdata/            the cluster (PGDATA); appears only once fully initialized
//!   pgdata.init/       a cluster being initialized (renamed to pgdata when done)
//!   run/               Unix socket directory (unless the path is too long, see below)
//!   log/server.log     server log (rotated to server.log.1 at start when large)
//!   transition.lock    held exclusively while starting or stopping the server
//!   sessions.lock      held shared by every live [`SessionGuard`]
//!   persistent         present while `pgnload db start` asked the server to stay up
//! ```
//!
//! # Connections
//!
//! The server listens on a Unix socket only (`listen_addresses = ''`): a private
//! cluster has no business on the network, and the socket is faster. Local
//! connections use `trust` authentication, so the socket directory is private
//! (mode 0700): whoever can reach the socket is a database superuser. The
//! database and its superuser are both called `pgnload`.
//!
//! A Unix socket path is limited to 107 bytes (`sun_path`), counting the
//! `/.s.PGSQL.5432` file name. When `<data_dir>/run` would exceed that, the
//! socket directory is `/tmp/pgnload-<xxh64 of the data dir path>` instead,
//! stable for one data directory and checked to be owned by the server's user.
//!
//! # Running as root
//!
//! PostgreSQL refuses to run as root, and containers and CI often run as
//! root. Then the server programs run as the unprivileged system user
//! `postgres` (created with `useradd` if missing): the cluster, socket and log
//! directories are handed to that user, and every ancestor of the data
//! directory must be traversable by it. A new data directory that is not
//! (say `./pgnload-data` in a checkout under `/root`, mode 0700) is created
//! under `/var/lib/pgnload` instead, with a symlink where the user asked; an
//! existing one is refused with a message saying why. Root never follows a
//! link or opens a path by name inside a directory that user owns (it could
//! plant links there): such files are created anew with `O_EXCL`, opened
//! with `O_NOFOLLOW`, and chowned through their handle. pgnload itself keeps
//! running as root and connects through the socket as database user `pgnload`.
//!
//! # Concurrency
//!
//! Several pgnload processes may share one data directory (two imports at
//! once). `transition.lock` (exclusive `flock`) serializes initialization,
//! start and stop. Each [`SessionGuard`] holds a shared lock on
//! `sessions.lock`; when a guard is dropped it releases its lock, takes the
//! transition lock, and stops the server only if an exclusive `try_lock` on
//! `sessions.lock` succeeds (no other live session) and the server was not
//! started with `pgnload db start`. `flock` locks die with their process, so a
//! killed pgnload never blocks anyone: it just leaves the server running, and
//! the next session reuses it (and stops it when done).
//!
//! Every function here blocks (it runs `pg_ctl` and waits for it): call them
//! outside async code or through `tokio::task::spawn_blocking`.

use std::{
    ffi::OsStr,
    fmt::Write as _,
    fs::{self, File, OpenOptions, TryLockError},
    io::{self, Read, Seek, SeekFrom, Write as _},
    os::unix::{
        fs::{MetadataExt, OpenOptionsExt, PermissionsExt, fchown},
        process::CommandExt,
    },
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    thread,
    time::{Duration, Instant},
};

use nix::{
    errno::Errno,
    fcntl::OFlag,
    sys::signal::kill,
    unistd::{Gid, Pid, Uid, UnlinkatFlags, User, geteuid, unlinkat},
};

/// Name of the database pgnload imports into, and of its superuser role.
const DB_NAME: &str = "pgnload";
/// The superuser created by `initdb -U`; pgnload connects as this role.
const DB_USER: &str = "pgnload";
/// The port only names the socket file (`.s.PGSQL.<port>`): there is no TCP.
/// It is fixed so that a `PGPORT` in the environment cannot move the socket.
const PORT: u16 = 5432;
/// Socket file name for [`PORT`].
const SOCKET_FILE: &str = ".s.PGSQL.5432";
/// `sizeof(sockaddr_un.sun_path)` on Linux is 108, including the final NUL.
const MAX_SOCKET_PATH: usize = 107;
/// Unprivileged user the server runs as when pgnload runs as root.
const SERVICE_USER: &str = "postgres";
/// Where root keeps a cluster whose requested data directory the service
/// user cannot reach (see [`EmbeddedCluster::new`]).
const RELOCATION_ROOT: &str = "/var/lib/pgnload";
/// Programs pgnload cannot manage a cluster without.
const REQUIRED_TOOLS: [&str; 3] = ["initdb", "pg_ctl", "postgres"];
/// Where Debian/Ubuntu install versioned server binaries (`<root>/<version>/bin`).
const DEBIAN_PG_ROOT: &str = "/usr/lib/postgresql";
/// How long `pg_ctl` waits for start or stop. Generous on purpose: after a
/// crash, recovery may replay up to `max_wal_size` (up to 16 GB) of WAL, and the
/// shutdown checkpoint after a bulk load may write gigabytes of buffers.
const PG_CTL_TIMEOUT_SECS: &str = "600";
/// How many lines of the server log an error quotes.
const LOG_TAIL_LINES: usize = 20;
/// The server log is rotated at start once it exceeds this size.
const LOG_ROTATE_BYTES: u64 = 16 << 20;
/// How long to wait for leftover server processes of a crashed postmaster to
/// exit before starting a new one (they hold the old shared memory).
const ORPHAN_WAIT: Duration = Duration::from_secs(10);
/// How long a lock of the data directory is waited for silently before
/// pgnload says what it is waiting for.
const LOCK_GRACE: Duration = Duration::from_secs(2);
/// Memory assumed when /proc/meminfo cannot be read.
const FALLBACK_MEMORY: u64 = 4 << 30;
const MIB: u64 = 1 << 20;
/// `max_wal_size` when the disk has room: 16 GiB.
const MAX_WAL_MB: u64 = 16 * 1024;
/// The smallest `max_wal_size` pgnload sets however full the disk is.
const MIN_MAX_WAL_MB: u64 = 256;

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

type Result<T, E = EmbeddedError> = std::result::Result<T, E>;

/// Formats an optional multi-line section of an error message.
fn section(title: &str, text: &str) -> String {
    let text = text.trim_end();
    if text.is_empty() {
        String::new()
    } else {
        format!("\n--- {title} ---\n{text}")
    }
}

fn io_err(context: impl Into<String>, path: &Path) -> impl FnOnce(io::Error) -> EmbeddedError {
    let context = context.into();
    let path = path.to_path_buf();
    move |source| EmbeddedError::Io {
        context,
        path,
        source,
    }
}

fn sys_err(context: impl Into<String>) -> impl FnOnce(Errno) -> EmbeddedError {
    let context = context.into();
    move |source| EmbeddedError::System { context, source }
}

// ---------------------------------------------------------------------------
// Binaries
// ---------------------------------------------------------------------------

/// Where the PostgreSQL server programs are. pgnload uses the installed
/// server rather than bundling one, so the cluster is always the version the
/// system's package manager keeps patched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgBinaries {
    /// The directory holding `initdb`, `pg_ctl`, `postgres` (and usually
    /// `createdb` and `psql`).
    pub bin_dir: PathBuf,
}

impl PgBinaries {
    /// Finds the server programs: the `PG_BIN` environment variable (a
    /// directory) first, then `initdb` on `PATH` (symlinks resolved, since
    /// distributions link a few tools into `/usr/bin` but keep the rest in a
    /// versioned directory), then the highest `/usr/lib/postgresql/*/bin`.
    /// A directory counts only if it has all of `initdb`, `pg_ctl` and
    /// `postgres`. An explicit `PG_BIN` that lacks them is an error rather
    /// than silently ignored.
    pub fn locate() -> Result<PgBinaries, EmbeddedError> {
        let pg_bin = std::env::var_os("PG_BIN");
        let path = std::env::var_os("PATH");
        Self::locate_in(pg_bin.as_deref().map(Path::new), path.as_deref())
    }

    /// The pure core of [`PgBinaries::locate`], with the environment passed
    /// in, so that tests (which run in parallel threads sharing one
    /// environment) need not set variables.
    pub fn locate_in(
        pg_bin: Option<&Path>,
        path_env: Option<&OsStr>,
    ) -> Result<PgBinaries, EmbeddedError> {
        locate_with(pg_bin, path_env, Path::new(DEBIAN_PG_ROOT))
    }

    /// The path of one program in [`PgBinaries::bin_dir`].
    pub fn tool(&self, name: &str) -> PathBuf {
        self.bin_dir.join(name)
    }
}

fn is_executable(path: &Path) -> bool {
    fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn missing_tools(dir: &Path) -> Vec<String> {
    REQUIRED_TOOLS
        .iter()
        .filter(|t| !is_executable(&dir.join(t)))
        .map(|t| (*t).to_owned())
        .collect()
}

/// Parses a Debian version directory name (`15`, `9.6`) for ordering.
fn parse_version(name: &OsStr) -> Option<Vec<u32>> {
    name.to_str()?
        .split('.')
        .map(|part| part.parse().ok())
        .collect()
}

fn locate_with(
    pg_bin: Option<&Path>,
    path_env: Option<&OsStr>,
    versions_root: &Path,
) -> Result<PgBinaries> {
    let all_missing = || REQUIRED_TOOLS.iter().map(|t| (*t).to_owned()).collect();
    if let Some(dir) = pg_bin.filter(|d| !d.as_os_str().is_empty()) {
        let missing = missing_tools(dir);
        if missing.is_empty() {
            return Ok(PgBinaries {
                bin_dir: dir.to_path_buf(),
            });
        }
        return Err(EmbeddedError::MissingBinaries {
            missing,
            searched: vec![format!("PG_BIN={}", dir.display())],
        });
    }

    let mut searched = Vec::new();
    // The candidate missing the fewest tools names what is missing.
    let mut best_missing: Option<Vec<String>> = None;
    let consider = |dir: &Path, best: &mut Option<Vec<String>>| {
        let missing = missing_tools(dir);
        if missing.is_empty() {
            return true;
        }
        if best.as_ref().is_none_or(|b| missing.len() < b.len()) {
            *best = Some(missing);
        }
        false
    };

    searched.push("initdb on PATH".to_owned());
    for dir in path_env.map(std::env::split_paths).into_iter().flatten() {
        if dir.as_os_str().is_empty() {
            continue;
        }
        let initdb = dir.join("initdb");
        if !is_executable(&initdb) {
            continue;
        }
        let real_dir = fs::canonicalize(&initdb)
            .ok()
            .and_then(|p| p.parent().map(Path::to_path_buf))
            .unwrap_or(dir);
        if consider(&real_dir, &mut best_missing) {
            return Ok(PgBinaries { bin_dir: real_dir });
        }
        searched.push(real_dir.display().to_string());
    }

    searched.push(format!("{}/*/bin", versions_root.display()));
    let mut versions: Vec<(Vec<u32>, PathBuf)> = fs::read_dir(versions_root)
        .into_iter()
        .flatten()
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let version = parse_version(&entry.file_name())?;
            Some((version, entry.path().join("bin")))
        })
        .collect();
    versions.sort_by(|a, b| b.0.cmp(&a.0));
    for (_, dir) in versions {
        if consider(&dir, &mut best_missing) {
            return Ok(PgBinaries { bin_dir: dir });
        }
    }

    Err(EmbeddedError::MissingBinaries {
        missing: best_missing.unwrap_or_else(all_missing),
        searched,
    })
}

// ---------------------------------------------------------------------------
// Settings
// ---------------------------------------------------------------------------

/// Server settings tuned for bulk loading, written to `pgnload.conf` at
/// every start (so they follow the machine's memory if it changes). Memory
/// sizes are in MiB. Users can still override any of them with
/// `ALTER SYSTEM`, whose file PostgreSQL reads after `pgnload.conf`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterSettings {
    /// The memory the sizes were derived from, in bytes (for reports).
    pub total_memory: u64,
    /// `shared_buffers`: 1/8 of memory, at least 128 MiB (PostgreSQL's
    /// default) and at most 4 GiB: beyond that the OS page cache serves a
    /// load-then-index workload as well, and a larger pool only lengthens
    /// checkpoints.
    pub shared_buffers_mb: u64,
    /// `effective_cache_size`: 3/4 of memory. Only a planner hint (no
    /// allocation): most of the machine's memory caches table files.
    pub effective_cache_size_mb: u64,
    /// `maintenance_work_mem`: 1/8 of memory, 64 MiB to 1 GiB. Index builds
    /// after the bulk load sort in this memory; more memory means fewer
    /// external-sort passes.
    pub maintenance_work_mem_mb: u64,
    /// `autovacuum_work_mem`: 1/32 of memory, 64 to 256 MiB. Without it each
    /// of the three autovacuum workers could take `maintenance_work_mem`.
    pub autovacuum_work_mem_mb: u64,
    /// `work_mem`: 1/128 of memory, 4 to 64 MiB. Per sort or hash node of
    /// every query, so it stays moderate; pgnload's queries are simple.
    pub work_mem_mb: u64,
    /// `max_wal_size`: 16 GiB, so that bulk loading is not interrupted by
    /// checkpoints forced by WAL volume (each rewrites full pages into WAL);
    /// but at most 1/8 of the disk space free at server start (at least
    /// 256 MiB), because WAL up to this size stays on disk between
    /// checkpoints and must never be what fills the disk.
    pub max_wal_size_mb: u64,
    /// `min_wal_size`: a quarter of `max_wal_size`, 80 MiB (PostgreSQL's
    /// default) to 1 GiB: WAL segments kept for reuse instead of being
    /// deleted and recreated between checkpoints.
    pub min_wal_size_mb: u64,
    /// `checkpoint_timeout`: 30 minutes, for the same reason as
    /// `max_wal_size`: fewer checkpoints, fewer full-page images.
    pub checkpoint_timeout: Duration,
    /// `wal_compression`: compresses the full-page images that dominate the
    /// WAL of an incremental load (every index page first touched after a
    /// checkpoint), with lz4 when the server was built with it: pglz costs
    /// so much CPU that an incremental import ran 26% faster with lz4.
    pub wal_compression: WalCompression,
    /// `synchronous_commit`: off. A crash may lose the last few hundred
    /// milliseconds of commits but never corrupts anything; that is safe for
    /// pgnload because each batch commits its resume checkpoint together
    /// with its rows, so a lost commit is simply imported again.
    pub synchronous_commit: bool,
    /// `max_connections`: 50, room for several concurrent imports (one
    /// connection per writer) plus psql sessions, without the per-connection
    /// shared memory of the default 100.
    pub max_connections: u32,
}

/// How the server compresses full-page images in WAL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WalCompression {
    /// Fast; only in servers built `--with-lz4` (Debian's are).
    Lz4,
    /// PostgreSQL's own compressor, always available.
    Pglz,
}

impl WalCompression {
    /// The `postgresql.conf` value.
    pub fn as_conf(self) -> &'static str {
        match self {
            WalCompression::Lz4 => "lz4",
            WalCompression::Pglz => "pglz",
        }
    }
}

impl ClusterSettings {
    /// Settings for this machine and a cluster in `data_dir`:
    /// [`ClusterSettings::for_resources`] of the total memory (from
    /// `/proc/meminfo`, lowered to the cgroup memory limit inside a
    /// container; 4 GiB when unreadable) and of the disk space free there.
    pub fn for_machine(data_dir: &Path) -> ClusterSettings {
        Self::for_resources(total_memory(), free_disk(data_dir))
    }

    /// Settings for a machine with `total_bytes` of memory and, when known,
    /// `free_disk` bytes free where the cluster lives. Pure, so the sizing
    /// rules can be tested; each field's documentation says why.
    pub fn for_resources(total_bytes: u64, free_disk: Option<u64>) -> ClusterSettings {
        let mb = total_bytes / MIB;
        let max_wal_size_mb = free_disk.map_or(MAX_WAL_MB, |free| {
            (free / MIB / 8).clamp(MIN_MAX_WAL_MB, MAX_WAL_MB)
        });
        ClusterSettings {
            total_memory: total_bytes,
            shared_buffers_mb: (mb / 8).clamp(128, 4096),
            effective_cache_size_mb: (mb / 4 * 3).max(128),
            maintenance_work_mem_mb: (mb / 8).clamp(64, 1024),
            autovacuum_work_mem_mb: (mb / 32).clamp(64, 256),
            work_mem_mb: (mb / 128).clamp(4, 64),
            max_wal_size_mb,
            min_wal_size_mb: (max_wal_size_mb / 4).clamp(80, 1024),
            checkpoint_timeout: Duration::from_secs(30 * 60),
            wal_compression: WalCompression::Pglz,
            synchronous_commit: false,
            max_connections: 50,
        }
    }

    /// The `postgresql.conf` lines for these settings, with the socket in
    /// `socket_dir`. Besides the sized settings it fixes the ones that make
    /// the cluster private and bulk-load friendly, each with a comment
    /// saying why, so that a user reading `pgnload.conf` sees the reasons.
    pub fn to_conf(&self, socket_dir: &Path) -> String {
        let on = |b: bool| if b { "on" } else { "off" };
        let mut s = format!(
            "# pgnload's settings for bulk loading, written at every server start:\n\
             # edits here are overwritten. Override a setting with ALTER SYSTEM\n\
             # (postgresql.auto.conf is read after this file).\n\
             # Sized for {} MiB of memory.\n\n",
            self.total_memory / MIB
        );
        let mut line = |setting: String, why: &str| {
            // Writing into a String cannot fail.
            let _ = writeln!(s, "# {why}\n{setting}\n");
        };
        line(
            "listen_addresses = ''".into(),
            "No TCP: the cluster is private to pgnload and reached through its Unix socket only.",
        );
        line(
            format!("port = {PORT}"),
            "Fixed: names the socket file; a PGPORT in the environment must not move it.",
        );
        line(
            format!(
                "unix_socket_directories = {}",
                conf_quote(&list_quote(&socket_dir.to_string_lossy()))
            ),
            "The private socket directory (mode 0700).",
        );
        line(
            "unix_socket_permissions = 0700".into(),
            "Local connections use trust authentication: whoever opens the socket is a superuser.",
        );
        line(
            format!("max_connections = {}", self.max_connections),
            "Several concurrent imports plus psql sessions; less shared memory than the default 100.",
        );
        line(
            format!("shared_buffers = {}MB", self.shared_buffers_mb),
            "1/8 of memory, 128 MB to 4 GB: the OS page cache does the rest; more only lengthens checkpoints.",
        );
        line(
            format!("effective_cache_size = {}MB", self.effective_cache_size_mb),
            "Planner hint only: most memory caches table files.",
        );
        line(
            format!("maintenance_work_mem = {}MB", self.maintenance_work_mem_mb),
            "Index builds after the bulk load sort in this memory.",
        );
        line(
            format!("autovacuum_work_mem = {}MB", self.autovacuum_work_mem_mb),
            "Otherwise each autovacuum worker may take maintenance_work_mem.",
        );
        line(
            format!("work_mem = {}MB", self.work_mem_mb),
            "Per sort/hash node of every query: moderate.",
        );
        line(
            format!("max_wal_size = {}MB", self.max_wal_size_mb),
            "Bulk loading should not be interrupted by checkpoints forced by WAL volume; at most 1/8 of the free disk.",
        );
        line(
            format!("min_wal_size = {}MB", self.min_wal_size_mb),
            "Recycle WAL segments rather than delete and recreate them.",
        );
        line(
            format!(
                "checkpoint_timeout = {}s",
                self.checkpoint_timeout.as_secs()
            ),
            "Fewer checkpoints, fewer full-page images in WAL.",
        );
        line(
            "checkpoint_completion_target = 0.9".into(),
            "Spread checkpoint writes over the interval.",
        );
        line(
            format!("wal_compression = {}", self.wal_compression.as_conf()),
            "Compress full-page images; lz4 when the server has it, at a fraction of pglz's CPU.",
        );
        line(
            "wal_level = minimal\nmax_wal_senders = 0\narchive_mode = off".into(),
            "No replication or archiving for a private cluster; with wal_level minimal, COPY into a \
             table created or truncated in the same transaction skips WAL entirely.",
        );
        line(
            format!("synchronous_commit = {}", on(self.synchronous_commit)),
            "A crash may lose the last commits but never corrupts: pgnload commits each batch's \
             resume checkpoint with its rows, so a lost commit is simply imported again.",
        );
        line(
            "fsync = on\nfull_page_writes = on".into(),
            "Stay on: turning them off risks a corrupt cluster after a power loss.",
        );
        line(
            "autovacuum = on".into(),
            "Keeps statistics current after the load for the queries that follow.",
        );
        line(
            "jit = off".into(),
            "JIT compilation costs more than it saves on pgnload's short queries.",
        );
        s
    }
}

/// Quotes a value for postgresql.conf (single quotes; `'` doubled and `\`
/// escaped, since the parser processes backslash escapes).
fn conf_quote(value: &str) -> String {
    format!("'{}'", value.replace('\\', "\\\\").replace('\'', "''"))
}

/// Quotes one element of a comma-separated GUC list (double quotes, `"`
/// doubled), so that a directory containing a comma stays one element.
fn list_quote(value: &str) -> String {
    format!("\"{}\"", value.replace('"', "\"\""))
}

/// Total memory in bytes: MemTotal, lowered to the cgroup limit (containers
/// see the host's MemTotal), 4 GiB if /proc/meminfo is unreadable.
fn total_memory() -> u64 {
    let meminfo = fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| parse_meminfo(&text));
    let cgroup = [
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ]
    .iter()
    .filter_map(|p| fs::read_to_string(p).ok())
    .filter_map(|text| text.trim().parse::<u64>().ok())
    .min();
    match (meminfo, cgroup) {
        (Some(m), Some(c)) => m.min(c),
        (Some(m), None) => m,
        (None, Some(c)) if c < (1 << 50) => c,
        _ => FALLBACK_MEMORY,
    }
}

/// Bytes available to unprivileged users on the file system holding
/// `path` (or its nearest existing ancestor), if it can be read.
fn free_disk(path: &Path) -> Option<u64> {
    let existing = path.ancestors().find(|p| p.exists())?;
    let stat = nix::sys::statvfs::statvfs(existing).ok()?;
    stat.blocks_available().checked_mul(stat.fragment_size())
}

/// The `MemTotal:` line of /proc/meminfo, in bytes.
fn parse_meminfo(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let mut fields = line["MemTotal:".len()..].split_whitespace();
    let value: u64 = fields.next()?.parse().ok()?;
    match fields.next() {
        Some("kB") => value.checked_mul(1024),
        None => Some(value),
        Some(_) => None,
    }
}

// ---------------------------------------------------------------------------
// Cluster
// ---------------------------------------------------------------------------

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

/// The unprivileged user the server runs as when pgnload runs as root.
#[derive(Debug, Clone)]
struct ServiceAccount {
    name: String,
    uid: Uid,
    gid: Gid,
    home: PathBuf,
}

impl From<User> for ServiceAccount {
    fn from(user: User) -> Self {
        ServiceAccount {
            name: user.name,
            uid: user.uid,
            gid: user.gid,
            home: user.dir,
        }
    }
}

/// pgnload's private PostgreSQL cluster in one data directory. Cheap to
/// clone; holds only paths (all state is on disk, shared between processes).
#[derive(Debug, Clone)]
pub struct EmbeddedCluster {
    data_dir: PathBuf,
    pgdata: PathBuf,
    socket_dir: PathBuf,
    bins: PgBinaries,
    /// The directory the user asked for, when the cluster lives elsewhere:
    /// the first start makes it a symlink to `data_dir`.
    pointer: Option<PathBuf>,
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

    /// Initializes the cluster if needed and starts the server if it is not
    /// running; the returned guard keeps it running. Used by every command
    /// that needs the database. When the last guard (in any process) is
    /// dropped, the server stops, unless `pgnload db start` made it
    /// persistent.
    pub fn start_session(&self) -> Result<SessionGuard, EmbeddedError> {
        let acct = service_account()?;
        let _transition = self.begin_start(acct.as_ref())?;
        let sessions_path = self.sessions_lock_path();
        let sessions = open_lock_file(&sessions_path)?;
        lock_announced(
            &sessions,
            &sessions_path,
            LockMode::Shared,
            "the embedded server's session lock",
        )?;
        self.ensure_initialized(acct.as_ref())?;
        self.ensure_running(&self.pgdata, acct.as_ref())?;
        Ok(SessionGuard {
            cluster: self.clone(),
            sessions: Some(sessions),
        })
    }

    /// `pgnload db start`: starts the server and keeps it running after
    /// this process exits, until [`EmbeddedCluster::stop`] (useful to query
    /// the database with psql between imports).
    pub fn start_persistent(&self) -> Result<(), EmbeddedError> {
        let acct = service_account()?;
        let _transition = self.begin_start(acct.as_ref())?;
        self.ensure_initialized(acct.as_ref())?;
        self.ensure_running(&self.pgdata, acct.as_ref())?;
        let mark = self.persistent_mark_path();
        create_fresh(&mark)?
            .write_all(
                b"The server was started by `pgnload db start`; `pgnload db stop` removes \
                  this file.\n",
            )
            .map_err(io_err("writing", &mark))
    }

    /// `pgnload db stop`: clears the persistent mark and stops the server
    /// now (fast shutdown: open transactions are rolled back). If other
    /// pgnload processes are using it, it is left to stop when the last of
    /// them finishes, and [`EmbeddedError::InUse`] says so.
    pub fn stop(&self) -> Result<(), EmbeddedError> {
        if !self.data_dir.exists() {
            return Ok(());
        }
        let acct = service_account()?;
        let _transition = self.lock_transition()?;
        remove_if_present(&self.persistent_mark_path())?;
        let sessions_path = self.sessions_lock_path();
        let sessions = open_lock_file(&sessions_path)?;
        match sessions.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                return Err(EmbeddedError::InUse {
                    data_dir: self.data_dir.clone(),
                });
            }
            Err(TryLockError::Error(e)) => return Err(io_err("locking", &sessions_path)(e)),
        }
        self.stop_server(&self.pgdata, acct.as_ref(), "fast")
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

    fn transition_lock_path(&self) -> PathBuf {
        self.data_dir.join("transition.lock")
    }

    fn sessions_lock_path(&self) -> PathBuf {
        self.data_dir.join("sessions.lock")
    }

    fn persistent_mark_path(&self) -> PathBuf {
        self.data_dir.join("persistent")
    }

    fn log_dir(&self) -> PathBuf {
        self.data_dir.join("log")
    }

    /// Before a start: checks that the service user can reach the data
    /// directory and the programs (before creating anything, so a refused
    /// location is left untouched), creates the data directory, takes the
    /// transition lock, and creates the log and socket directories.
    fn begin_start(&self, acct: Option<&ServiceAccount>) -> Result<File> {
        if let Some(pointer) = &self.pointer {
            self.link_pointer(pointer)?;
        }
        if let Some(acct) = acct {
            check_traversable(&self.data_dir, acct)?;
            check_traversable(&self.bins.bin_dir, acct)?;
        }
        if !self.data_dir.exists() {
            fs::create_dir_all(&self.data_dir)
                .map_err(io_err("creating the data directory", &self.data_dir))?;
            // Whatever the umask, the server's user must be able to enter it
            // (the subdirectories holding data, log and socket are 0700).
            fs::set_permissions(&self.data_dir, fs::Permissions::from_mode(0o755))
                .map_err(io_err("setting permissions of", &self.data_dir))?;
        }
        if acct.is_some() {
            // Root creates and removes files here: another account owning
            // the directory could swap them for links to anything.
            let owner = fs::metadata(&self.data_dir)
                .map_err(io_err("inspecting", &self.data_dir))?
                .uid();
            if owner != 0 {
                return Err(refuse(
                    &self.data_dir,
                    format!(
                        "running as root, pgnload keeps its files only in a data directory \
                         root owns; this one belongs to uid {owner}"
                    ),
                ));
            }
        }
        let transition = self.lock_transition()?;
        if let Some(acct) = acct {
            // The directory may have existed with a restrictive mode.
            check_traversable(&self.data_dir, acct)?;
        }
        ensure_private_dir(&self.log_dir(), acct, true)?;
        let ours = self.socket_dir.starts_with(&self.data_dir);
        ensure_private_dir(&self.socket_dir, acct, ours)?;
        if let Some(acct) = acct.filter(|_| !ours) {
            check_traversable(&self.socket_dir, acct)?;
        }
        Ok(transition)
    }

    /// Creates the relocated data directory's parent and the symlink to it
    /// where the user asked (see [`EmbeddedCluster::new`]), saying so once.
    fn link_pointer(&self, pointer: &Path) -> Result<()> {
        let root = Path::new(RELOCATION_ROOT);
        match fs::create_dir(root) {
            Ok(()) => fs::set_permissions(root, fs::Permissions::from_mode(0o755))
                .map_err(io_err("setting permissions of", root))?,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io_err("creating", root)(e)),
        }
        let meta = fs::symlink_metadata(root).map_err(io_err("inspecting", root))?;
        if !meta.is_dir() || meta.uid() != 0 || meta.mode() & 0o022 != 0 {
            return Err(refuse(
                root,
                "it must be a directory owned by root that no other user can write".into(),
            ));
        }
        if let Some(parent) = pointer.parent() {
            fs::create_dir_all(parent).map_err(io_err("creating", parent))?;
        }
        match std::os::unix::fs::symlink(&self.data_dir, pointer) {
            Ok(()) => {
                stderr_line!(
                    "pgnload: user {SERVICE_USER}, which runs the server, cannot reach {}, so \
                     the cluster lives in {} and {} links to it",
                    pointer.display(),
                    self.data_dir.display(),
                    pointer.display()
                );
                Ok(())
            }
            // Made meanwhile by a concurrent first start.
            Err(e)
                if e.kind() == io::ErrorKind::AlreadyExists
                    && fs::read_link(pointer).is_ok_and(|to| to == self.data_dir) =>
            {
                Ok(())
            }
            Err(e) => Err(io_err(
                format!("linking to the cluster in {}", self.data_dir.display()),
                pointer,
            )(e)),
        }
    }

    /// Takes the transition lock (the data directory must exist).
    fn lock_transition(&self) -> Result<File> {
        let path = self.transition_lock_path();
        let file = open_lock_file(&path)?;
        lock_announced(
            &file,
            &path,
            LockMode::Exclusive,
            "the lock that serializes starting and stopping the embedded server",
        )?;
        Ok(file)
    }

    /// Runs `initdb` and creates the `pgnload` database if the cluster does
    /// not exist yet. Initialization happens in `pgdata.init`, renamed to
    /// `pgdata` only when complete, so an interrupted first run never leaves
    /// a half-made cluster that looks usable. Transition lock held.
    fn ensure_initialized(&self, acct: Option<&ServiceAccount>) -> Result<()> {
        if self.pgdata.join("PG_VERSION").exists() {
            return Ok(());
        }
        if self.pgdata.exists() {
            let empty = fs::read_dir(&self.pgdata)
                .map_err(io_err("reading", &self.pgdata))?
                .next()
                .is_none();
            if !empty {
                return Err(EmbeddedError::NotACluster {
                    pgdata: self.pgdata.clone(),
                });
            }
            fs::remove_dir(&self.pgdata).map_err(io_err("removing", &self.pgdata))?;
        }

        let init = self.data_dir.join("pgdata.init");
        if init.exists() {
            // Left by an interrupted first run; its server may still run.
            if running_pid(&init)?.is_some() {
                self.stop_server(&init, acct, "immediate")?;
            }
            fs::remove_dir_all(&init).map_err(io_err("removing the leftover", &init))?;
        }
        // A new, empty cluster where one was expected (a relative data
        // directory under cron's working directory) must not go unnoticed.
        stderr_line!(
            "pgnload: creating a new PostgreSQL cluster in {} (there is none yet)",
            self.data_dir.display()
        );
        fs::create_dir(&init).map_err(io_err("creating", &init))?;
        let handle = open_dir_no_follow(&init)?;
        hand_over(&handle, &init, acct)?;

        let mut initdb = self.command("initdb", acct);
        initdb.arg("-D").arg(&init).args([
            "-U",
            DB_USER,
            "--auth=trust",
            "-E",
            "UTF8",
            "--locale=C",
        ]);
        self.run(initdb, acct, None)?;

        let conf = init.join("postgresql.conf");
        // Written by initdb as the server's user, in its directory: opened
        // without following links and checked to be that user's own file
        // before root appends to it.
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .custom_flags(OFlag::O_NOFOLLOW.bits())
            .open(&conf)
            .map_err(io_err("opening", &conf))?;
        let meta = file.metadata().map_err(io_err("inspecting", &conf))?;
        let owner = acct.map_or_else(geteuid, |a| a.uid);
        if !meta.is_file() || meta.uid() != owner.as_raw() || meta.nlink() != 1 {
            return Err(EmbeddedError::Io {
                context: format!(
                    "refusing to append to a file that initdb did not write (owner uid {}, \
                     {} links)",
                    meta.uid(),
                    meta.nlink()
                ),
                path: conf,
                source: io::Error::from(io::ErrorKind::PermissionDenied),
            });
        }
        let mut text = String::new();
        file.read_to_string(&mut text)
            .map_err(io_err("reading", &conf))?;
        let include = "include_if_exists = 'pgnload.conf'";
        if !text.lines().any(|l| l.trim() == include) {
            let addition = format!(
                "\n# pgnload's settings (rewritten by pgnload at every start)\n{include}\n"
            );
            file.write_all(addition.as_bytes())
                .map_err(io_err("appending to", &conf))?;
        }
        drop(file);

        self.ensure_running(&init, acct)?;
        let mut createdb = self.command("createdb", None);
        createdb.arg("-h").arg(&self.socket_dir).args([
            "-p",
            &PORT.to_string(),
            "-U",
            DB_USER,
            DB_NAME,
        ]);
        let created = self.run(createdb, None, None);
        self.stop_server(&init, acct, "fast")?;
        created?;

        fs::rename(&init, &self.pgdata).map_err(io_err(
            format!("renaming {} to", init.display()),
            &self.pgdata,
        ))
    }

    /// Starts the server on `pgdata` unless it runs. Transition lock held.
    fn ensure_running(&self, pgdata: &Path, acct: Option<&ServiceAccount>) -> Result<()> {
        if running_pid(pgdata)?.is_some() {
            return Ok(());
        }
        self.write_conf(pgdata, acct)?;
        let pid_file = pgdata.join("postmaster.pid");
        if fs::symlink_metadata(&pid_file).is_ok() {
            // Left by a crashed postmaster. A new one refuses to start while
            // the old one's children still hold its shared memory, so give
            // them a moment to notice and exit. PostgreSQL also refuses
            // while the recorded pid exists at all, which a crashed
            // postmaster does as a zombie until reaped (and some container
            // init processes never reap); once /proc shows that no process
            // works in the cluster any more, the pid file is certainly stale
            // and is removed, with the socket lock file that names the same
            // pid (the socket directory belongs to this cluster alone).
            if wait_for_orphans(pgdata) {
                remove_if_present(&pid_file)?;
                // Through the directory's handle: a socket directory in /tmp
                // could be swapped for a link by the user owning it.
                let socket_lock = format!("{SOCKET_FILE}.lock");
                match unlinkat(
                    open_dir_no_follow(&self.socket_dir)?,
                    socket_lock.as_str(),
                    UnlinkatFlags::NoRemoveDir,
                ) {
                    Ok(()) | Err(Errno::ENOENT) => {}
                    Err(e) => {
                        return Err(sys_err(format!(
                            "removing the stale {}",
                            self.socket_dir.join(&socket_lock).display()
                        ))(e));
                    }
                }
            }
        }
        let log = self.log_file();
        rotate_log(&log)?;
        let log_start = fs::symlink_metadata(&log).map(|m| m.len()).unwrap_or(0);
        let mut pg_ctl = self.command("pg_ctl", acct);
        pg_ctl
            .args(["start", "-w", "-s", "-t", PG_CTL_TIMEOUT_SECS, "-D"])
            .arg(pgdata)
            .arg("-l")
            .arg(&log);
        self.run(pg_ctl, acct, Some(log_start))?;
        Ok(())
    }

    /// Stops the server on `pgdata` if it runs. Transition lock held.
    fn stop_server(&self, pgdata: &Path, acct: Option<&ServiceAccount>, mode: &str) -> Result<()> {
        if running_pid(pgdata)?.is_none() {
            return Ok(());
        }
        let log = self.log_file();
        let log_start = fs::symlink_metadata(&log).map(|m| m.len()).unwrap_or(0);
        let mut pg_ctl = self.command("pg_ctl", acct);
        pg_ctl
            .args([
                "stop",
                "-w",
                "-s",
                "-t",
                PG_CTL_TIMEOUT_SECS,
                "-m",
                mode,
                "-D",
            ])
            .arg(pgdata);
        self.run(pg_ctl, acct, Some(log_start))?;
        Ok(())
    }

    /// Writes `pgnload.conf` (atomically) for the current machine.
    fn write_conf(&self, pgdata: &Path, acct: Option<&ServiceAccount>) -> Result<()> {
        let mut settings = ClusterSettings::for_machine(pgdata);
        if self.server_accepts(pgdata, acct, "wal_compression", "lz4") {
            settings.wal_compression = WalCompression::Lz4;
        }
        let text = settings.to_conf(&self.socket_dir);
        let tmp = pgdata.join("pgnload.conf.tmp");
        let path = pgdata.join("pgnload.conf");
        // The cluster directory belongs to the server's user: the file is
        // created anew and handed over by its handle.
        let mut file = create_fresh(&tmp)?;
        file.write_all(text.as_bytes())
            .map_err(io_err("writing", &tmp))?;
        hand_over(&file, &tmp, acct)?;
        drop(file);
        fs::rename(&tmp, &path).map_err(io_err("renaming into place", &path))
    }

    /// Whether the server binary accepts `name = value` (`postgres -C`
    /// validates the value and exits), for settings whose values depend on
    /// build options.
    fn server_accepts(
        &self,
        pgdata: &Path,
        acct: Option<&ServiceAccount>,
        name: &str,
        value: &str,
    ) -> bool {
        let mut probe = self.command("postgres", acct);
        probe
            .arg("-D")
            .arg(pgdata)
            .args(["-C", name, "-c", &format!("{name}={value}")]);
        self.run(probe, acct, None).is_ok()
    }

    /// A command for one PostgreSQL program: run as the service account
    /// when given, in the data directory, without the caller's `PG*`
    /// variables (PGDATA, PGPORT, PGHOST... would redirect the tools).
    fn command(&self, tool: &str, acct: Option<&ServiceAccount>) -> Command {
        let mut cmd = Command::new(self.bins.tool(tool));
        for (key, _) in std::env::vars_os() {
            if key.as_encoded_bytes().starts_with(b"PG") {
                cmd.env_remove(key);
            }
        }
        cmd.current_dir(&self.data_dir).stdin(Stdio::null());
        if let Some(acct) = acct {
            let home = if acct.home.is_dir() {
                acct.home.clone()
            } else {
                self.data_dir.clone()
            };
            cmd.uid(acct.uid.as_raw())
                .gid(acct.gid.as_raw())
                .env("HOME", home)
                .env("USER", &acct.name)
                .env("LOGNAME", &acct.name);
        }
        cmd
    }

    /// Runs a command to completion, capturing its output; failure becomes
    /// [`EmbeddedError::Command`] with the output and, when `log_from` is
    /// given, what the server logged since that offset.
    fn run(
        &self,
        mut cmd: Command,
        acct: Option<&ServiceAccount>,
        log_from: Option<u64>,
    ) -> Result<Output> {
        let mut command = std::iter::once(cmd.get_program())
            .chain(cmd.get_args())
            .map(|a| a.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ");
        if let Some(acct) = acct {
            let _ = write!(command, " (as user {})", acct.name);
        }
        let output = cmd.output().map_err(|source| EmbeddedError::Spawn {
            command: command.clone(),
            source,
        })?;
        if output.status.success() {
            return Ok(output);
        }
        let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&output.stderr));
        Err(EmbeddedError::Command {
            command,
            data_dir: self.data_dir.clone(),
            status: output.status.to_string(),
            output: text,
            log_tail: log_from
                .map(|from| log_tail(&self.log_file(), from))
                .unwrap_or_default(),
        })
    }

    /// After a session ends: stops the server if no other session uses it
    /// and it is not persistent.
    fn stop_if_idle(&self) -> Result<()> {
        let acct = service_account()?;
        let _transition = self.lock_transition()?;
        let path = self.sessions_lock_path();
        let sessions = open_lock_file(&path)?;
        match sessions.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => return Ok(()),
            Err(TryLockError::Error(e)) => return Err(io_err("locking", &path)(e)),
        }
        if self.persistent_mark_path().exists() {
            return Ok(());
        }
        self.stop_server(&self.pgdata, acct.as_ref(), "fast")
    }
}

/// Keeps the embedded server running while alive. Dropping it stops the
/// server only if no other session (in this or another process) uses it and
/// `pgnload db start` did not make it persistent. Dropping blocks while the
/// server shuts down; use [`SessionGuard::close`] to see errors.
#[derive(Debug)]
pub struct SessionGuard {
    cluster: EmbeddedCluster,
    /// Shared lock on `sessions.lock`; `None` once released.
    sessions: Option<File>,
}

impl SessionGuard {
    /// The cluster this session uses.
    pub fn cluster(&self) -> &EmbeddedCluster {
        &self.cluster
    }

    /// Ends the session like dropping the guard, but returns the error if
    /// stopping the server failed (drop can only print it).
    pub fn close(mut self) -> Result<(), EmbeddedError> {
        self.release()
    }

    fn release(&mut self) -> Result<()> {
        match self.sessions.take() {
            // Closing the file releases the shared lock.
            Some(file) => {
                drop(file);
                self.cluster.stop_if_idle()
            }
            None => Ok(()),
        }
    }
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        if let Err(e) = self.release() {
            stderr_line!("pgnload: warning: stopping the embedded PostgreSQL server: {e}");
        }
    }
}

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

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

/// Opens (creating if missing) a lock file of the data directory. `flock`
/// needs only a descriptor, and any readable file gives one: a lock file
/// other users can open is a lock they can hold forever. So it is created
/// mode 0600, never through a link, and an existing one must belong to the
/// user running pgnload (one left 0644 by an older pgnload is tightened).
fn open_lock_file(path: &Path) -> Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(OFlag::O_NOFOLLOW.bits())
        .open(path)
        .map_err(io_err("opening the lock file", path))?;
    let meta = file
        .metadata()
        .map_err(io_err("inspecting the lock file", path))?;
    let me = geteuid().as_raw();
    if !meta.is_file() || meta.uid() != me {
        return Err(refuse(
            path,
            format!(
                "a lock file must be a plain file of uid {me}, running pgnload; this one \
                 belongs to uid {}: remove it",
                meta.uid()
            ),
        ));
    }
    if meta.mode() & 0o077 != 0 {
        file.set_permissions(fs::Permissions::from_mode(0o600))
            .map_err(io_err("setting permissions of", path))?;
    }
    Ok(file)
}

/// Which way [`lock_announced`] locks.
#[derive(Debug, Clone, Copy)]
enum LockMode {
    Shared,
    Exclusive,
}

/// Takes a lock, waiting as long as it takes; if it is still held after
/// [`LOCK_GRACE`], says once on stderr which lock and which file it waits
/// for, so a wait behind another process is never silent.
fn lock_announced(file: &File, path: &Path, mode: LockMode, what: &str) -> Result<()> {
    let deadline = Instant::now() + LOCK_GRACE;
    loop {
        let attempt = match mode {
            LockMode::Shared => file.try_lock_shared(),
            LockMode::Exclusive => file.try_lock(),
        };
        match attempt {
            Ok(()) => return Ok(()),
            Err(TryLockError::WouldBlock) if Instant::now() < deadline => {
                thread::sleep(Duration::from_millis(50));
            }
            Err(TryLockError::WouldBlock) => break,
            Err(TryLockError::Error(e)) => return Err(io_err("locking", path)(e)),
        }
    }
    stderr_line!(
        "pgnload: waiting for {what} ({}), held by another process",
        path.display()
    );
    match mode {
        LockMode::Shared => file.lock_shared(),
        LockMode::Exclusive => file.lock(),
    }
    .map_err(io_err("locking", path))
}

/// The postmaster pid of the server running on `pgdata`, if one runs: the
/// pid in `postmaster.pid` must be alive and, where /proc tells, have
/// `pgdata` as its working directory (a crashed server's pid may have been
/// reused by an unrelated process).
fn running_pid(pgdata: &Path) -> Result<Option<u32>> {
    let pid_file = pgdata.join("postmaster.pid");
    let mut text = String::new();
    match open_no_follow(&pid_file).and_then(|mut f| f.read_to_string(&mut text)) {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        // A symlink (ELOOP) is no pid file the server wrote: no server.
        Err(e) if e.raw_os_error() == Some(Errno::ELOOP as i32) => return Ok(None),
        Err(e) => return Err(io_err("reading", &pid_file)(e)),
    }
    let Some(pid) = text
        .lines()
        .next()
        .and_then(|l| l.trim().parse::<i32>().ok())
        .filter(|&p| p > 0)
    else {
        // Being written or truncated: no usable server.
        return Ok(None);
    };
    match kill(Pid::from_raw(pid), None) {
        Ok(()) | Err(Errno::EPERM) => {}
        Err(_) => return Ok(None),
    }
    // A killed postmaster stays a zombie until reaped (and some container
    // init processes never reap): kill() still finds it.
    if let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) {
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next());
        if matches!(state, Some("Z" | "X")) {
            return Ok(None);
        }
    }
    if let Ok(cwd) = fs::read_link(format!("/proc/{pid}/cwd")) {
        let ours = fs::canonicalize(pgdata).unwrap_or_else(|_| pgdata.to_path_buf());
        if cwd != ours {
            return Ok(None);
        }
    }
    u32::try_from(pid).map(Some).or(Ok(None))
}

/// Waits (up to [`ORPHAN_WAIT`]) until no process has `pgdata` as its
/// working directory: children of a killed postmaster exit on their own
/// shortly, and a new postmaster cannot start while they hold the old
/// shared memory. Returns true only if /proc confirmed that none remain
/// (false on timeout or without /proc).
fn wait_for_orphans(pgdata: &Path) -> bool {
    let Ok(ours) = fs::canonicalize(pgdata) else {
        return false;
    };
    let deadline = Instant::now() + ORPHAN_WAIT;
    loop {
        let Ok(entries) = fs::read_dir("/proc") else {
            return false;
        };
        let mut busy = false;
        for entry in entries.flatten() {
            let name = entry.file_name();
            if !name.as_encoded_bytes().iter().all(u8::is_ascii_digit) {
                continue;
            }
            match fs::read_link(entry.path().join("cwd")) {
                Ok(cwd) if cwd == ours => busy = true,
                // Gone meanwhile, a zombie, or a process we may not inspect:
                // the server's processes run as us (or, when we are root, as
                // `postgres`, which root may inspect), so none of these is one.
                Ok(_) | Err(_) => {}
            }
        }
        if !busy {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(50));
    }
}

/// Renames the log to `server.log.1` when it is large, so it cannot grow
/// without bound across starts.
fn rotate_log(log: &Path) -> Result<()> {
    if fs::symlink_metadata(log).is_ok_and(|m| m.len() > LOG_ROTATE_BYTES) {
        let old = log.with_extension("log.1");
        fs::rename(log, &old).map_err(io_err("rotating", log))?;
    }
    Ok(())
}

/// The last [`LOG_TAIL_LINES`] lines written to the log since offset `from`
/// (all of it if the file is shorter, e.g. rotated). Empty if unreadable.
fn log_tail(log: &Path, from: u64) -> String {
    // The log directory belongs to the server's user: a link there must not
    // make root quote another file in an error message.
    let Ok(mut file) = open_no_follow(log) else {
        return String::new();
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let start = if from <= len { from } else { 0 };
    let start = start.max(len.saturating_sub(64 * 1024));
    let mut bytes = Vec::new();
    if file.seek(SeekFrom::Start(start)).is_err() || file.read_to_end(&mut bytes).is_err() {
        return String::new();
    }
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
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

/// `None` unless running as root; then the `postgres` user, created if
/// missing, that the server programs run as.
fn service_account() -> Result<Option<ServiceAccount>> {
    if !geteuid().is_root() {
        return Ok(None);
    }
    let lookup = || User::from_name(SERVICE_USER).map_err(sys_err("looking up user postgres"));
    let user = match lookup()? {
        Some(user) => user,
        None => {
            create_service_user()?;
            lookup()?.ok_or_else(|| {
                EmbeddedError::ServiceUser(format!(
                    "useradd reported success but user `{SERVICE_USER}` still does not exist"
                ))
            })?
        }
    };
    Ok(Some(ServiceAccount::from(user)))
}

fn create_service_user() -> Result<()> {
    let hint = format!(
        "PostgreSQL refuses to run as root, so pgnload runs it as the system user \
         `{SERVICE_USER}`, which does not exist"
    );
    let output = Command::new("useradd")
        .args([
            "--system",
            "--no-create-home",
            "--shell",
            "/usr/sbin/nologin",
            SERVICE_USER,
        ])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| {
            EmbeddedError::ServiceUser(format!(
                "{hint}, and running `useradd` to create it failed: {e}. Create it \
                 (`useradd --system postgres`) or run pgnload as an unprivileged user"
            ))
        })?;
    if output.status.success() {
        return Ok(());
    }
    Err(EmbeddedError::ServiceUser(format!(
        "{hint}, and `useradd --system --no-create-home --shell /usr/sbin/nologin \
         {SERVICE_USER}` failed ({}): {}{}. Create the user or run pgnload as an \
         unprivileged user",
        output.status,
        String::from_utf8_lossy(&output.stdout).trim(),
        String::from_utf8_lossy(&output.stderr).trim()
    )))
}

/// Gives a file or directory, by its open handle, the private mode (0700
/// for a directory, 0600 for a file) and, when root, to the service
/// account. Handles, not paths: a path inside a directory the service
/// account owns can be swapped for a link between a check and a `chown`.
fn hand_over(handle: &File, path: &Path, acct: Option<&ServiceAccount>) -> Result<()> {
    let meta = handle.metadata().map_err(io_err("inspecting", path))?;
    let mode = if meta.is_dir() { 0o700 } else { 0o600 };
    handle
        .set_permissions(fs::Permissions::from_mode(mode))
        .map_err(io_err("setting permissions of", path))?;
    match acct {
        Some(acct) => fchown(handle, Some(acct.uid.as_raw()), Some(acct.gid.as_raw()))
            .map_err(io_err(format!("handing over to user {}", acct.name), path)),
        None => Ok(()),
    }
}

/// Opens an existing file for reading, failing (`ELOOP`) on a symlink
/// instead of following it: for files in directories the server's user
/// owns, which root must never be redirected from. `O_NONBLOCK` so that a
/// FIFO planted there cannot block root (it reads as empty).
fn open_no_follow(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags((OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK).bits())
        .open(path)
}

/// Opens a directory itself (not a symlink to one) to work on its handle.
fn open_dir_no_follow(dir: &Path) -> Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags((OFlag::O_NOFOLLOW | OFlag::O_DIRECTORY).bits())
        .open(dir)
        .map_err(io_err("opening the directory (not following links)", dir))
}

/// Creates `path` anew, mode 0600: whatever is there (a leftover, or a link
/// planted to redirect root's write) is removed, never followed, and
/// `O_EXCL` creation does not follow links either.
fn create_fresh(path: &Path) -> Result<File> {
    remove_if_present(path)?;
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(OFlag::O_NOFOLLOW.bits())
        .open(path)
        .map_err(io_err("creating", path))
}

/// Removes a file or symlink (never what a symlink points to) if present.
fn remove_if_present(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err("removing", path)(e)),
    }
}

/// The error for a path pgnload refuses to use because another account
/// could have put it there.
fn refuse(path: &Path, why: String) -> EmbeddedError {
    EmbeddedError::Io {
        context: format!("refusing to use ({why})"),
        path: path.to_path_buf(),
        source: io::Error::from(io::ErrorKind::PermissionDenied),
    }
}

/// Creates a 0700 directory owned by the account the server runs as, or
/// checks an existing one: a real directory (not a symlink), owned by that
/// account (re-owned if `ours`, i.e. inside pgnload's data directory).
fn ensure_private_dir(dir: &Path, acct: Option<&ServiceAccount>, ours: bool) -> Result<()> {
    let owner = acct.map_or_else(geteuid, |a| a.uid);
    let created = match fs::create_dir(dir) {
        Ok(()) => true,
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => false,
        Err(e) => return Err(io_err("creating", dir)(e)),
    };
    let unsafe_dir = |reason: String| EmbeddedError::UnsafeSocketDir {
        dir: dir.to_path_buf(),
        reason,
    };
    if !fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir()) {
        return Err(unsafe_dir("not a directory (or a symlink)".into()));
    }
    // From here on only the handle: the entry may be swapped meanwhile.
    let handle = open_dir_no_follow(dir)?;
    if created {
        return hand_over(&handle, dir, acct);
    }
    let meta = handle.metadata().map_err(io_err("inspecting", dir))?;
    if meta.uid() != owner.as_raw() || meta.mode() & 0o077 != 0 {
        if !ours {
            return Err(unsafe_dir(format!(
                "owned by uid {} with mode {:o}; it must be owned by uid {owner} that runs \
                 the server, with no access for other users",
                meta.uid(),
                meta.mode() & 0o7777
            )));
        }
        hand_over(&handle, dir, acct)?;
    }
    Ok(())
}

/// Fails unless `acct` can search (enter) every directory from `/` down to
/// `target`. Only the primary group counts: `Command::uid` drops
/// supplementary groups when leaving root.
fn check_traversable(target: &Path, acct: &ServiceAccount) -> Result<()> {
    for dir in target.ancestors().collect::<Vec<_>>().into_iter().rev() {
        let Ok(meta) = fs::metadata(dir) else {
            // Not created yet: it will be created with a traversable mode.
            continue;
        };
        if !meta.is_dir() {
            continue;
        }
        let mode = meta.mode();
        let bits = if meta.uid() == acct.uid.as_raw() {
            mode >> 6
        } else if meta.gid() == acct.gid.as_raw() {
            mode >> 3
        } else {
            mode
        };
        if bits & 0o1 == 0 {
            return Err(EmbeddedError::Untraversable {
                dir: dir.to_path_buf(),
                mode: mode & 0o7777,
                user: acct.name.clone(),
                target: target.to_path_buf(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn settings_for_a_large_machine_hit_the_caps() {
        let s = ClusterSettings::for_resources(64 * GIB, None);
        assert_eq!(s.shared_buffers_mb, 4096);
        assert_eq!(s.maintenance_work_mem_mb, 1024);
        assert_eq!(s.autovacuum_work_mem_mb, 256);
        assert_eq!(s.work_mem_mb, 64);
        assert_eq!(s.effective_cache_size_mb, 48 * 1024);
        assert_eq!(s.max_wal_size_mb, 16 * 1024);
        assert_eq!(s.checkpoint_timeout, Duration::from_secs(1800));
        assert_eq!(s.max_connections, 50);
        assert_eq!(s.wal_compression, WalCompression::Pglz);
        assert!(!s.synchronous_commit);
    }

    #[test]
    fn settings_scale_with_memory() {
        let s = ClusterSettings::for_resources(8 * GIB, None);
        assert_eq!(s.shared_buffers_mb, 1024);
        assert_eq!(s.maintenance_work_mem_mb, 1024);
        assert_eq!(s.autovacuum_work_mem_mb, 256);
        assert_eq!(s.work_mem_mb, 64);
        assert_eq!(s.effective_cache_size_mb, 6 * 1024);

        let s = ClusterSettings::for_resources(4 * GIB, None);
        assert_eq!(s.shared_buffers_mb, 512);
        assert_eq!(s.maintenance_work_mem_mb, 512);
        assert_eq!(s.autovacuum_work_mem_mb, 128);
        assert_eq!(s.work_mem_mb, 32);
    }

    #[test]
    fn settings_for_a_tiny_machine_keep_the_floors() {
        for total in [0, 256 << 20, GIB] {
            let s = ClusterSettings::for_resources(total, None);
            assert_eq!(s.shared_buffers_mb, 128, "{total}");
            assert_eq!(
                s.maintenance_work_mem_mb,
                64.max(total / MIB / 8),
                "{total}"
            );
            assert_eq!(s.autovacuum_work_mem_mb, 64, "{total}");
            assert!(s.work_mem_mb >= 4, "{total}");
            assert!(s.effective_cache_size_mb >= 128, "{total}");
        }
    }

    #[test]
    fn settings_are_monotonic_in_memory() {
        let mut prev = ClusterSettings::for_resources(0, None);
        for gib in 1..=256 {
            let s = ClusterSettings::for_resources(gib * GIB, None);
            assert!(s.shared_buffers_mb >= prev.shared_buffers_mb);
            assert!(s.maintenance_work_mem_mb >= prev.maintenance_work_mem_mb);
            assert!(s.work_mem_mb >= prev.work_mem_mb);
            assert!(s.shared_buffers_mb * MIB <= (gib * GIB / 8).max(128 * MIB));
            prev = s;
        }
    }

    #[test]
    fn conf_has_the_fixed_settings() {
        let conf =
            ClusterSettings::for_resources(16 * GIB, None).to_conf(Path::new("/d/it's,here/run"));
        for expected in [
            "listen_addresses = ''",
            "port = 5432",
            r#"unix_socket_directories = '"/d/it''s,here/run"'"#,
            "shared_buffers = 2048MB",
            "maintenance_work_mem = 1024MB",
            "work_mem = 64MB",
            "max_wal_size = 16384MB",
            "checkpoint_timeout = 1800s",
            "wal_compression = pglz",
            "wal_level = minimal",
            "max_wal_senders = 0",
            "synchronous_commit = off",
            "fsync = on",
            "full_page_writes = on",
            "autovacuum = on",
            "max_connections = 50",
            "jit = off",
        ] {
            assert!(
                conf.lines().any(|l| l == expected),
                "missing {expected:?} in\n{conf}"
            );
        }
    }

    #[test]
    fn conf_quote_escapes() {
        assert_eq!(conf_quote(r"a'b\c"), r"'a''b\\c'");
        assert_eq!(list_quote(r#"a"b"#), r#""a""b""#);
    }

    #[test]
    fn wal_size_follows_free_disk() {
        let roomy = ClusterSettings::for_resources(8 * GIB, Some(500 * GIB));
        assert_eq!(
            (roomy.max_wal_size_mb, roomy.min_wal_size_mb),
            (16 * 1024, 1024)
        );
        let s = ClusterSettings::for_resources(8 * GIB, Some(8 * GIB));
        assert_eq!((s.max_wal_size_mb, s.min_wal_size_mb), (1024, 256));
        let full = ClusterSettings::for_resources(8 * GIB, Some(100 * MIB));
        assert_eq!((full.max_wal_size_mb, full.min_wal_size_mb), (256, 80));
        assert!(free_disk(Path::new("/no/such/dir/under/root")).is_some_and(|b| b > 0));
    }

    #[test]
    fn meminfo_parsing() {
        let text = "MemTotal:       24684084 kB\nMemFree:  1 kB\n";
        assert_eq!(parse_meminfo(text), Some(24684084 * 1024));
        assert_eq!(parse_meminfo("MemFree: 1 kB\n"), None);
        assert!(total_memory() > 0);
    }

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
    fn versions_pick_the_highest_complete_dir()
    -> std::result::Result<(), Box<dyn std::error::Error>> {
        let root = tempfile::tempdir()?;
        for (version, tools) in [
            ("9.6", &REQUIRED_TOOLS[..]),
            ("16", &REQUIRED_TOOLS[..]),
            ("17", &["initdb"][..]),
            ("notaversion", &REQUIRED_TOOLS[..]),
        ] {
            let bin = root.path().join(version).join("bin");
            fs::create_dir_all(&bin)?;
            for tool in tools {
                let path = bin.join(tool);
                fs::write(&path, "#!/bin/sh\n")?;
                fs::set_permissions(&path, fs::Permissions::from_mode(0o755))?;
            }
        }
        let found = locate_with(None, None, root.path())?;
        assert_eq!(found.bin_dir, root.path().join("16").join("bin"));

        let empty = tempfile::tempdir()?;
        match locate_with(None, Some(OsStr::new("")), empty.path()) {
            Err(EmbeddedError::MissingBinaries { missing, .. }) => {
                assert_eq!(missing, ["initdb", "pg_ctl", "postgres"]);
            }
            other => panic!("expected MissingBinaries, got {other:?}"),
        }
        Ok(())
    }

    #[test]
    fn version_parsing() {
        assert_eq!(parse_version(OsStr::new("15")), Some(vec![15]));
        assert_eq!(parse_version(OsStr::new("9.6")), Some(vec![9, 6]));
        assert_eq!(parse_version(OsStr::new("x")), None);
        assert!(parse_version(OsStr::new("10")) > parse_version(OsStr::new("9.6")));
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
