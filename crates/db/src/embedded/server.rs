//! Running the server programs: `initdb`, `pg_ctl` start and stop, the
//! `pgnload.conf` written at every start, and what `postmaster.pid` and
//! `/proc` say about a server that runs (or crashed).

use std::{
    fmt::Write as _,
    fs::{self, OpenOptions},
    io::{self, Read, Seek, SeekFrom, Write as _},
    os::unix::{
        fs::{MetadataExt, OpenOptionsExt},
        process::CommandExt,
    },
    path::Path,
    process::{Command, Output, Stdio},
    thread,
    time::{Duration, Instant},
};

use nix::{
    errno::Errno,
    fcntl::OFlag,
    sys::signal::kill,
    unistd::{Pid, UnlinkatFlags, geteuid, unlinkat},
};

use super::{
    DB_NAME, DB_USER, PORT, SOCKET_FILE,
    cluster::EmbeddedCluster,
    error::{EmbeddedError, Result, io_err, sys_err},
    safe_fs::{create_fresh, hand_over, open_dir_no_follow, open_no_follow, remove_if_present},
    service_user::ServiceAccount,
    settings::{ClusterSettings, WalCompression},
};

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

impl EmbeddedCluster {
    /// Runs `initdb` and creates the `pgnload` database if the cluster does
    /// not exist yet. Initialization happens in `pgdata.init`, renamed to
    /// `pgdata` only when complete, so an interrupted first run never leaves
    /// a half-made cluster that looks usable. Transition lock held.
    pub(super) fn ensure_initialized(&self, acct: Option<&ServiceAccount>) -> Result<()> {
        if self.pgdata.join("PG_VERSION").exists() {
            return Ok(());
        }
        let init = self.data_dir.join("pgdata.init");
        self.clear_leftovers(&init, acct)?;
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
        include_pgnload_conf(&init, acct)?;
        self.create_database(&init, acct)?;

        fs::rename(&init, &self.pgdata).map_err(io_err(
            format!("renaming {} to", init.display()),
            &self.pgdata,
        ))
    }

    /// Removes what stands in the way of a new cluster: an empty `pgdata`
    /// (anything else in it is refused), and the `init` directory of an
    /// interrupted first run, its server stopped.
    fn clear_leftovers(&self, init: &Path, acct: Option<&ServiceAccount>) -> Result<()> {
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

        if init.exists() {
            // Left by an interrupted first run; its server may still run.
            if running_pid(init)?.is_some() {
                self.stop_server(init, acct, "immediate")?;
            }
            fs::remove_dir_all(init).map_err(io_err("removing the leftover", init))?;
        }
        Ok(())
    }

    /// Creates the `pgnload` database in the new cluster `init`, its
    /// server started for that and stopped again.
    fn create_database(&self, init: &Path, acct: Option<&ServiceAccount>) -> Result<()> {
        self.ensure_running(init, acct)?;
        let mut createdb = self.command("createdb", None);
        createdb.arg("-h").arg(&self.socket_dir).args([
            "-p",
            &PORT.to_string(),
            "-U",
            DB_USER,
            DB_NAME,
        ]);
        let created = self.run(createdb, None, None);
        self.stop_server(init, acct, "fast")?;
        created.map(drop)
    }

    /// Starts the server on `pgdata` unless it runs. Transition lock held.
    pub(super) fn ensure_running(
        &self,
        pgdata: &Path,
        acct: Option<&ServiceAccount>,
    ) -> Result<()> {
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
        let log_start = fs::symlink_metadata(&log).map_or(0, |m| m.len());
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
    pub(super) fn stop_server(
        &self,
        pgdata: &Path,
        acct: Option<&ServiceAccount>,
        mode: &str,
    ) -> Result<()> {
        if running_pid(pgdata)?.is_none() {
            return Ok(());
        }
        let log = self.log_file();
        let log_start = fs::symlink_metadata(&log).map_or(0, |m| m.len());
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
}

/// Makes the `postgresql.conf` initdb wrote in `init` include `pgnload.conf`.
fn include_pgnload_conf(init: &Path, acct: Option<&ServiceAccount>) -> Result<()> {
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
        let addition =
            format!("\n# pgnload's settings (rewritten by pgnload at every start)\n{include}\n");
        file.write_all(addition.as_bytes())
            .map_err(io_err("appending to", &conf))?;
    }
    Ok(())
}

/// The postmaster pid of the server running on `pgdata`, if one runs: the
/// pid in `postmaster.pid` must be alive and, where /proc tells, have
/// `pgdata` as its working directory (a crashed server's pid may have been
/// reused by an unrelated process).
pub(super) fn running_pid(pgdata: &Path) -> Result<Option<u32>> {
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
    let len = file.metadata().map_or(0, |m| m.len());
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
