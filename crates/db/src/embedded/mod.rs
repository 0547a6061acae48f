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

mod binaries;
mod cluster;
mod error;
mod safe_fs;
mod server;
mod service_user;
mod session;
mod settings;

pub use binaries::PgBinaries;
pub use cluster::{ClusterStatus, EmbeddedCluster};
pub use error::EmbeddedError;
pub use session::SessionGuard;
pub use settings::{ClusterSettings, WalCompression};

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
