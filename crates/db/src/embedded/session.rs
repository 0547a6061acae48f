//! Who starts and stops the server: the transition lock that serializes
//! them, the shared lock every live session holds, and the mark
//! `pgnload db start` leaves to keep the server up.

use std::{
    fs::{self, File, OpenOptions, TryLockError},
    io::{self, Write as _},
    os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt},
    path::Path,
    thread,
    time::{Duration, Instant},
};

use nix::{fcntl::OFlag, unistd::geteuid};

use super::{
    RELOCATION_ROOT, SERVICE_USER,
    cluster::EmbeddedCluster,
    error::{EmbeddedError, Result, io_err},
    safe_fs::{create_fresh, ensure_private_dir, refuse, remove_if_present},
    service_user::{ServiceAccount, check_traversable, service_account},
};

/// How long a lock of the data directory is waited for silently before
/// pgnload says what it is waiting for.
const LOCK_GRACE: Duration = Duration::from_secs(2);

impl EmbeddedCluster {
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
                "it must be a directory owned by root that no other user can write",
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
