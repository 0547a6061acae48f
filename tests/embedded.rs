//! The embedded PostgreSQL cluster against the real server programs: no
//! mocks. Each test uses its own data directory under /tmp (not under the
//! working directory, which may be below /root where the `postgres` user
//! cannot go when the tests run as root).

use std::{
    error::Error,
    ffi::OsString,
    fs,
    os::unix::fs::PermissionsExt,
    path::Path,
    process::Command,
    thread,
    time::{Duration, Instant},
};

use nix::{
    sys::signal::{Signal, kill},
    unistd::{Pid, User, geteuid},
};
use pgnload::store::embedded::{ClusterStatus, EmbeddedCluster, EmbeddedError, PgBinaries};
use tempfile::TempDir;
use tokio_postgres::{NoTls, SimpleQueryMessage};

type TestResult = Result<(), Box<dyn Error>>;

/// A fresh directory under /tmp that the `postgres` user can enter
/// whatever the umask (a 0700 directory would stop the server user when root).
fn scratch() -> Result<TempDir, Box<dyn Error>> {
    let dir = tempfile::Builder::new()
        .prefix("pgnload-test-")
        .tempdir_in("/tmp")?;
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755))?;
    Ok(dir)
}

/// A cluster in a scratch directory that is stopped and removed even when
/// the test fails, so a failing test leaves no server behind.
struct Fixture {
    cluster: EmbeddedCluster,
    _root: TempDir,
}

impl Fixture {
    fn new(relative_data_dir: &str) -> Result<Fixture, Box<dyn Error>> {
        let root = scratch()?;
        let cluster = EmbeddedCluster::new(root.path().join(relative_data_dir))?;
        Ok(Fixture {
            cluster,
            _root: root,
        })
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = self.cluster.stop();
        if !self
            .cluster
            .socket_dir()
            .starts_with(self.cluster.data_dir())
        {
            let _ = fs::remove_dir_all(self.cluster.socket_dir());
        }
    }
}

/// Runs one statement over the cluster's socket and returns the first
/// column of every row as text.
fn query(cluster: &EmbeddedCluster, sql: &str) -> Result<Vec<String>, Box<dyn Error>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let (client, connection) = cluster.pg_config().connect(NoTls).await?;
        let driver = tokio::spawn(connection);
        let rows = client
            .simple_query(sql)
            .await?
            .into_iter()
            .filter_map(|m| match m {
                SimpleQueryMessage::Row(row) => Some(row.get(0).unwrap_or("").to_owned()),
                _ => None,
            })
            .collect();
        drop(client);
        driver.await??;
        Ok(rows)
    })
}

fn query_one(cluster: &EmbeddedCluster, sql: &str) -> Result<String, Box<dyn Error>> {
    let rows = query(cluster, sql)?;
    match rows.as_slice() {
        [one] => Ok(one.clone()),
        _ => Err(format!("{sql}: expected one row, got {rows:?}").into()),
    }
}

fn running_pid(cluster: &EmbeddedCluster) -> Result<u32, Box<dyn Error>> {
    match cluster.status()? {
        ClusterStatus::Running { pid } => Ok(pid),
        other => Err(format!("expected a running server, got {other:?}").into()),
    }
}

/// The real uid of a process, from /proc/<pid>/status.
fn process_uid(pid: u32) -> Result<u32, Box<dyn Error>> {
    let status = fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .ok_or("no Uid line")?;
    Ok(line
        .split_whitespace()
        .nth(1)
        .ok_or("short Uid line")?
        .parse()?)
}

/// Long: one scenario, step by step; split, its steps would read out of
/// order.
#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one scenario, step by step; split, its steps would read out of order"
)]
fn session_initializes_starts_and_stops() -> TestResult {
    let fixture = Fixture::new("pgnload-data")?;
    let cluster = &fixture.cluster;
    assert!(cluster.data_dir().is_absolute());
    assert_eq!(cluster.status()?, ClusterStatus::NotInitialized);

    let t = Instant::now();
    let guard = cluster.start_session()?;
    eprintln!(
        "first session (initdb + createdb + start): {:?}",
        t.elapsed()
    );
    let pid = running_pid(cluster)?;

    assert_eq!(query_one(cluster, "SELECT 1")?, "1");
    assert_eq!(query_one(cluster, "SHOW listen_addresses")?, "");
    assert_eq!(query_one(cluster, "SELECT current_user")?, "pgnload");
    assert_eq!(query_one(cluster, "SELECT current_database()")?, "pgnload");
    assert_eq!(query_one(cluster, "SHOW server_encoding")?, "UTF8");
    assert_eq!(
        query_one(
            cluster,
            "SELECT datcollate FROM pg_database WHERE datname = 'pgnload'"
        )?,
        "C"
    );
    // pgnload.conf is in effect.
    assert_eq!(query_one(cluster, "SHOW wal_level")?, "minimal");
    assert_eq!(query_one(cluster, "SHOW synchronous_commit")?, "off");
    assert_eq!(query_one(cluster, "SHOW jit")?, "off");
    assert_eq!(query_one(cluster, "SHOW max_connections")?, "50");
    assert_eq!(query_one(cluster, "SHOW fsync")?, "on");
    // lz4 exactly when this server was built with it (it then lists it).
    let has_lz4 = query_one(
        cluster,
        "SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'wal_compression'",
    )?;
    let expected = if has_lz4 == "t" { "lz4" } else { "pglz" };
    assert_eq!(query_one(cluster, "SHOW wal_compression")?, expected);
    // Sized from the free disk, within pgnload's bounds.
    let max_wal_mb: u64 = query_one(
        cluster,
        "SELECT setting FROM pg_settings WHERE name = 'max_wal_size'",
    )?
    .parse()?;
    assert!((256..=16 * 1024).contains(&max_wal_mb), "{max_wal_mb}");
    // Written double-quoted so that a comma in the path cannot split the list.
    assert_eq!(
        query_one(cluster, "SHOW unix_socket_directories")?,
        format!("\"{}\"", cluster.socket_dir().display())
    );
    assert!(cluster.socket_dir().starts_with(cluster.data_dir()));

    if geteuid().is_root() {
        let postgres = User::from_name("postgres")?.ok_or("no postgres user")?;
        assert_eq!(
            process_uid(pid)?,
            postgres.uid.as_raw(),
            "postmaster must run as postgres"
        );
    }

    // The URL works for psql as given.
    let psql = cluster.binaries().tool("psql");
    let out = Command::new(&psql)
        .arg(cluster.connection_url())
        .args(["-XtAc", "SELECT current_database() || ' ' || current_user"])
        .env("PGPORT", "1") // must be overridden by the URL
        .output()?;
    assert!(out.status.success(), "psql: {out:?}");
    assert_eq!(String::from_utf8(out.stdout)?.trim(), "pgnload pgnload");

    let t = Instant::now();
    drop(guard);
    eprintln!("drop (fast stop): {:?}", t.elapsed());
    assert_eq!(cluster.status()?, ClusterStatus::Stopped);

    // The next session restarts without initdb and keeps the data.
    let t = Instant::now();
    let guard = cluster.start_session()?;
    eprintln!("second session (start only): {:?}", t.elapsed());
    assert_eq!(query_one(cluster, "SELECT 2")?, "2");
    guard.close()?;
    assert_eq!(cluster.status()?, ClusterStatus::Stopped);

    // A start failure quotes the server log. postgresql.auto.conf (ALTER
    // SYSTEM) is read after pgnload.conf, so a bad value there breaks the start.
    let auto_conf = cluster.pgdata().join("postgresql.auto.conf");
    let saved = fs::read_to_string(&auto_conf)?;
    fs::write(&auto_conf, format!("{saved}work_mem = 'lots'\n"))?;
    match cluster.start_session() {
        Err(e @ EmbeddedError::Command { .. }) => {
            let message = e.to_string();
            for needle in ["pg_ctl start", "server log", "work_mem", "lots"] {
                assert!(message.contains(needle), "{needle:?} not in: {message}");
            }
        }
        other => return Err(format!("expected a start failure, got {other:?}").into()),
    }
    assert_eq!(cluster.status()?, ClusterStatus::Stopped);
    fs::write(&auto_conf, saved)?;
    cluster.start_session()?.close()?;

    let log = fs::read_to_string(cluster.log_file())?;
    assert!(log.contains("database system is ready"), "{log}");
    let conf = fs::read_to_string(cluster.pgdata().join("postgresql.conf"))?;
    assert_eq!(
        conf.matches("include_if_exists = 'pgnload.conf'").count(),
        1
    );
    Ok(())
}

#[test]
fn overlapping_sessions_share_one_server() -> TestResult {
    let fixture = Fixture::new("data")?;
    let cluster = &fixture.cluster;
    let first = cluster.start_session()?;
    let pid = running_pid(cluster)?;
    let second = cluster.start_session()?;
    assert_eq!(
        running_pid(cluster)?,
        pid,
        "the second session reuses the server"
    );

    drop(first);
    assert_eq!(
        running_pid(cluster)?,
        pid,
        "still in use by the second session"
    );
    assert_eq!(query_one(cluster, "SELECT 1")?, "1");

    drop(second);
    assert_eq!(cluster.status()?, ClusterStatus::Stopped);
    Ok(())
}

#[test]
fn concurrent_first_sessions_initialize_once() -> TestResult {
    let fixture = Fixture::new("data")?;
    let cluster = &fixture.cluster;
    // Each thread stands for one pgnload process: separate lock file
    // descriptions, so flock treats them like separate processes.
    let pids = thread::scope(|scope| -> Result<Vec<u32>, String> {
        let handles: Vec<_> = (0..3)
            .map(|_| {
                scope.spawn(|| -> Result<u32, String> {
                    let guard = cluster.start_session().map_err(|e| e.to_string())?;
                    let pid = running_pid(cluster).map_err(|e| e.to_string())?;
                    query_one(cluster, "SELECT 1").map_err(|e| e.to_string())?;
                    thread::sleep(Duration::from_millis(200));
                    guard.close().map_err(|e| e.to_string())?;
                    Ok(pid)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().map_err(|_| "thread panicked".to_owned())?)
            .collect()
    })?;
    assert_eq!(pids.len(), 3);
    assert_eq!(cluster.status()?, ClusterStatus::Stopped);
    assert!(!cluster.data_dir().join("pgdata.init").exists());
    Ok(())
}

#[test]
fn persistent_server_outlives_sessions_until_stop() -> TestResult {
    // Long enough that the socket cannot live in the data directory.
    let fixture = Fixture::new(&"d".repeat(100))?;
    let cluster = &fixture.cluster;
    assert!(
        cluster
            .socket_dir()
            .to_string_lossy()
            .starts_with("/tmp/pgnload-"),
        "{}",
        cluster.socket_dir().display()
    );

    cluster.start_persistent()?;
    let pid = running_pid(cluster)?;
    let guard = cluster.start_session()?;
    assert_eq!(query_one(cluster, "SELECT 1")?, "1");
    drop(guard);
    assert_eq!(
        running_pid(cluster)?,
        pid,
        "persistent server survives the session"
    );

    // stop() while a session is live leaves the server to that session...
    let guard = cluster.start_session()?;
    match cluster.stop() {
        Err(EmbeddedError::InUse { .. }) => {}
        other => return Err(format!("expected InUse, got {other:?}").into()),
    }
    assert_eq!(running_pid(cluster)?, pid);
    // ...which, the persistent mark now gone, stops it when done.
    drop(guard);
    assert_eq!(cluster.status()?, ClusterStatus::Stopped);

    cluster.start_persistent()?;
    running_pid(cluster)?;
    let t = Instant::now();
    cluster.stop()?;
    eprintln!("stop: {:?}", t.elapsed());
    assert_eq!(cluster.status()?, ClusterStatus::Stopped);
    cluster.stop()?; // stopping a stopped server is fine
    Ok(())
}

#[test]
fn restarts_after_a_crash() -> TestResult {
    let fixture = Fixture::new("data")?;
    let cluster = &fixture.cluster;
    cluster.start_persistent()?;
    // synchronous_commit is off in pgnload.conf: a crash may lose the last
    // commits. This one must survive, so it waits for its WAL flush.
    query(
        cluster,
        "SET synchronous_commit = on; CREATE TABLE t AS SELECT 42 AS x",
    )?;
    let pid = running_pid(cluster)?;
    kill(Pid::from_raw(i32::try_from(pid)?), Signal::SIGKILL)?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while cluster.status()? != ClusterStatus::Stopped {
        assert!(
            Instant::now() < deadline,
            "killed postmaster still reported running"
        );
        thread::sleep(Duration::from_millis(20));
    }
    assert!(
        cluster.pgdata().join("postmaster.pid").exists(),
        "the stale pid file is what this test is about"
    );

    let t = Instant::now();
    let guard = cluster.start_session()?;
    eprintln!("start after crash: {:?}", t.elapsed());
    let new_pid = running_pid(cluster)?;
    assert_ne!(new_pid, pid);
    assert_eq!(query_one(cluster, "SELECT x FROM t")?, "42");
    drop(guard);
    // Still persistent: the crash did not clear the mark.
    assert_eq!(running_pid(cluster)?, new_pid);
    cluster.stop()?;
    assert_eq!(cluster.status()?, ClusterStatus::Stopped);
    Ok(())
}

#[test]
fn untraversable_parent_is_refused_as_root() -> TestResult {
    let fixture = Fixture::new("data")?;
    let cluster = &fixture.cluster;
    let root = cluster.data_dir().parent().ok_or("data dir has a parent")?;
    fs::set_permissions(root, fs::Permissions::from_mode(0o700))?;
    let result = cluster.start_session();
    if geteuid().is_root() {
        match result {
            Err(e @ EmbeddedError::Untraversable { .. }) => {
                let message = e.to_string();
                assert!(message.contains(&*root.to_string_lossy()), "{message}");
                assert!(message.contains("--data-dir"), "{message}");
                assert!(
                    !cluster.data_dir().exists(),
                    "refused before creating anything"
                );
            }
            other => return Err(format!("expected Untraversable, got {other:?}").into()),
        }
    } else {
        // An unprivileged user runs the server itself: its own 0700 directory is fine.
        result?.close()?;
    }
    Ok(())
}

#[test]
fn missing_binaries_name_the_package() -> TestResult {
    let empty = scratch()?;
    match PgBinaries::locate_in(Some(empty.path()), None) {
        Err(e @ EmbeddedError::MissingBinaries { .. }) => {
            let message = e.to_string();
            for needle in [
                "apt-get install postgresql",
                "`postgresql`",
                "PG_BIN=",
                "initdb",
                "pg_ctl",
                &*empty.path().to_string_lossy(),
            ] {
                assert!(message.contains(needle), "{needle:?} not in: {message}");
            }
        }
        other => return Err(format!("expected MissingBinaries, got {other:?}").into()),
    }
    Ok(())
}

#[test]
fn path_symlinks_resolve_to_the_real_bin_dir() -> TestResult {
    let real = PgBinaries::locate()?;
    let links = scratch()?;
    for tool in ["initdb", "pg_ctl", "postgres"] {
        std::os::unix::fs::symlink(real.tool(tool), links.path().join(tool))?;
    }
    let path: OsString = std::env::join_paths([Path::new("/nonexistent"), links.path()])?;
    let found = PgBinaries::locate_in(None, Some(&path))?;
    assert_eq!(found.bin_dir, fs::canonicalize(&real.bin_dir)?);
    assert!(found.tool("createdb").exists());
    Ok(())
}

/// Set in the environment of the child process run by
/// `sessions_across_processes_and_a_killed_one`.
const CHILD_DATA_DIR: &str = "PGNLOAD_TEST_CHILD_DATA_DIR";

/// Not a test of its own: the body of the child process that
/// `sessions_across_processes_and_a_killed_one` runs (this test binary,
/// filtered to this function). Without the variable it has nothing to do.
#[test]
fn child_session_helper() -> TestResult {
    let Some(dir) = std::env::var_os(CHILD_DATA_DIR) else {
        return Ok(());
    };
    let cluster = EmbeddedCluster::new(dir)?;
    let guard = cluster.start_session()?;
    println!("CHILD-READY");
    let mut line = String::new();
    std::io::stdin().read_line(&mut line)?;
    if line.trim() == "die" {
        // Like a killed pgnload: the process ends without running the
        // guard's Drop; the kernel releases its lock.
        std::process::exit(0);
    }
    guard.close()?;
    Ok(())
}

#[test]
fn sessions_across_processes_and_a_killed_one() -> TestResult {
    use std::io::{BufRead, BufReader, Write};
    use std::process::Stdio;

    let fixture = Fixture::new("data")?;
    let cluster = &fixture.cluster;
    let mut child = Command::new(std::env::current_exe()?)
        .args(["--exact", "embedded::child_session_helper", "--nocapture"])
        .env(CHILD_DATA_DIR, cluster.data_dir())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let stdout = child.stdout.take().ok_or("child stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    loop {
        match lines.next().transpose()? {
            Some(line) if line == "CHILD-READY" => break,
            Some(_) => {}
            None => return Err(format!("child failed: {:?}", child.wait()?).into()),
        }
    }
    let pid = running_pid(cluster)?;

    // Another process's live session keeps the server up.
    let guard = cluster.start_session()?;
    assert_eq!(running_pid(cluster)?, pid);
    drop(guard);
    assert_eq!(
        running_pid(cluster)?,
        pid,
        "the child's session still uses it"
    );

    // The child dies without cleaning up: the server stays, unused...
    child
        .stdin
        .take()
        .ok_or("child stdin")?
        .write_all(b"die\n")?;
    assert!(child.wait()?.success());
    assert_eq!(running_pid(cluster)?, pid);

    // ...and the next session reuses it, then stops it.
    let guard = cluster.start_session()?;
    assert_eq!(running_pid(cluster)?, pid);
    assert_eq!(query_one(cluster, "SELECT 1")?, "1");
    drop(guard);
    assert_eq!(cluster.status()?, ClusterStatus::Stopped);
    Ok(())
}

/// A file standing for something root must never touch (never a real
/// system file): owned by the test's user, mode 0600, in a private directory.
struct Victim {
    path: std::path::PathBuf,
    _dir: TempDir,
}

const VICTIM_TEXT: &str = "victim: SECRET-VICTIM-LINE\n";

impl Victim {
    fn new() -> Result<Victim, Box<dyn Error>> {
        let dir = tempfile::Builder::new()
            .prefix("pgnload-victim-")
            .tempdir_in("/tmp")?;
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700))?;
        let path = dir.path().join("victim");
        fs::write(&path, VICTIM_TEXT)?;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600))?;
        Ok(Victim { path, _dir: dir })
    }

    /// Plants a symlink to the victim at `link` (replacing what is there).
    fn plant(&self, link: &Path) -> TestResult {
        match fs::remove_file(link) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
        }
        std::os::unix::fs::symlink(&self.path, link)?;
        Ok(())
    }

    fn assert_untouched(&self, after: &str) -> TestResult {
        use std::os::unix::fs::MetadataExt;
        let meta = fs::symlink_metadata(&self.path)?;
        assert_eq!(fs::read_to_string(&self.path)?, VICTIM_TEXT, "{after}");
        assert_eq!(meta.uid(), geteuid().as_raw(), "owner changed {after}");
        assert_eq!(meta.mode() & 0o7777, 0o600, "mode changed {after}");
        Ok(())
    }
}

/// Issue 12 item 7: links planted in the directories the server's user
/// owns (and in the data directory) never redirect pgnload's writes,
/// chowns or removals.
#[test]
fn planted_symlinks_never_redirect_writes() -> TestResult {
    let fixture = Fixture::new("data")?;
    let cluster = &fixture.cluster;
    cluster.start_persistent()?;
    cluster.stop()?;
    let victim = Victim::new()?;
    let pgdata = cluster.pgdata();
    for name in ["pgnload.conf.tmp", "pgnload.conf", "postmaster.pid"] {
        victim.plant(&pgdata.join(name))?;
    }
    victim.plant(&cluster.data_dir().join("persistent"))?;
    victim.plant(&cluster.socket_dir().join(".s.PGSQL.5432.lock"))?;
    cluster.start_persistent()?;
    victim.assert_untouched("after db start")?;
    let conf = fs::symlink_metadata(pgdata.join("pgnload.conf"))?;
    assert!(conf.is_file(), "pgnload.conf was replaced by a real file");
    assert!(!pgdata.join("pgnload.conf.tmp").exists());
    assert_eq!(query_one(cluster, "SHOW listen_addresses")?, "");
    cluster.stop()?;
    victim.assert_untouched("after db stop")?;

    // A FIFO in place of the pid file (pgnload reads it) must not block the
    // start: it reads as no pid file.
    let fifo = cluster.data_dir().join("fifo-source");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600))?;
    fs::rename(&fifo, pgdata.join("postmaster.pid"))?;
    cluster.start_session()?.close()?;
    Ok(())
}

/// Issue 12 item 7: when the server cannot start, the error quotes the
/// server log; a link planted there must not make root quote another file.
#[test]
fn error_never_quotes_a_planted_log_link() -> TestResult {
    let fixture = Fixture::new("data")?;
    let cluster = &fixture.cluster;
    cluster.start_session()?.close()?;
    let victim = Victim::new()?;
    victim.plant(&cluster.log_file())?;
    // Make the start fail after pg_ctl ran, so the log tail is quoted.
    fs::write(
        cluster.pgdata().join("postgresql.auto.conf"),
        "shared_buffers = 'not a size'\n",
    )?;
    let result = cluster.start_session();
    victim.assert_untouched("after a failed start")?;
    match result {
        Err(e) => {
            let message = e.to_string();
            assert!(message.contains("pg_ctl"), "{message}");
            assert!(!message.contains("SECRET-VICTIM-LINE"), "{message}");
        }
        Ok(_) => return Err("the start should fail on the invalid setting".into()),
    }
    Ok(())
}

/// Issue 12 item 9: the lock files are the user's alone (0600, never a
/// link), so no other account can take a lock and block pgnload.
#[test]
fn lock_files_are_private() -> TestResult {
    use std::os::unix::fs::MetadataExt;
    let fixture = Fixture::new("data")?;
    let cluster = &fixture.cluster;
    let data = cluster.data_dir();
    fs::create_dir_all(data)?;
    fs::set_permissions(data, fs::Permissions::from_mode(0o755))?;
    // As an older pgnload left it.
    fs::write(data.join("sessions.lock"), "")?;
    fs::set_permissions(
        data.join("sessions.lock"),
        fs::Permissions::from_mode(0o644),
    )?;
    cluster.start_session()?.close()?;
    for name in ["transition.lock", "sessions.lock"] {
        let meta = fs::symlink_metadata(data.join(name))?;
        assert!(meta.is_file(), "{name}");
        assert_eq!(meta.mode() & 0o7777, 0o600, "{name}");
        assert_eq!(meta.uid(), geteuid().as_raw(), "{name}");
    }
    if geteuid().is_root() {
        // Another account cannot even open them to lock.
        let nobody = User::from_name("nobody")?.ok_or("user nobody")?;
        let out = Command::new("setpriv")
            .arg(format!("--reuid={}", nobody.uid))
            .arg(format!("--regid={}", nobody.gid))
            .args(["--clear-groups", "flock", "-n", "-x"])
            .arg(data.join("transition.lock"))
            .arg("true")
            .output()?;
        assert!(
            !out.status.success(),
            "user nobody took the lock: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("Permission denied"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // A link in place of a lock file is refused, not followed.
    let victim = Victim::new()?;
    victim.plant(&data.join("transition.lock"))?;
    let result = cluster.start_session();
    victim.assert_untouched("after a start with a planted lock link")?;
    match result {
        Err(e) => assert!(e.to_string().contains("transition.lock"), "{e}"),
        Ok(_) => return Err("a symlinked lock file must be refused".into()),
    }
    fs::remove_file(data.join("transition.lock"))?;
    Ok(())
}

/// Issue 12 item 9: a start blocked by a held lock says once which lock
/// and which file it waits for, and goes on when it is released.
#[test]
fn a_held_lock_is_announced() -> TestResult {
    use std::io::{BufRead, BufReader, Write};
    use std::process::Stdio;

    let fixture = Fixture::new("data")?;
    let cluster = &fixture.cluster;
    cluster.start_session()?.close()?;
    let lock = cluster.data_dir().join("transition.lock");
    let mut holder = Command::new("flock")
        .arg("-x")
        .arg(&lock)
        .args(["-c", "echo held; cat"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let mut held = String::new();
    BufReader::new(holder.stdout.take().ok_or("holder stdout")?).read_line(&mut held)?;
    assert_eq!(held, "held\n");

    let mut start = Command::new(env!("CARGO_BIN_EXE_pgnload"))
        .arg("--data-dir")
        .arg(cluster.data_dir())
        .args(["db", "start"])
        .env_remove("DATABASE_URL")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let mut stderr = BufReader::new(start.stderr.take().ok_or("stderr")?);
    let mut line = String::new();
    stderr.read_line(&mut line)?;
    assert!(line.contains("waiting for"), "{line}");
    assert!(line.contains(&*lock.to_string_lossy()), "{line}");
    assert!(line.contains("starting and stopping"), "{line}");

    // Release: the start goes on, and says nothing more about the lock.
    holder.stdin.take().ok_or("holder stdin")?.write_all(b"")?;
    assert!(holder.wait()?.success());
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest)?;
    let status = start.wait()?;
    assert!(status.success(), "{rest}");
    assert!(!rest.contains("waiting for"), "{rest}");
    running_pid(cluster)?;
    cluster.stop()?;
    Ok(())
}

/// Issue 12 item 15: the README's first command, as root in a private home
/// (a 0700 directory the server's user cannot enter), works without any
/// change of permissions; the cluster lives where that user can reach it,
/// a link is left where the user asked, and pgnload says so once.
#[test]
fn a_data_dir_in_a_private_home_works() -> TestResult {
    // Removes the relocated cluster even when an assertion fails.
    struct Cleanup(Option<std::path::PathBuf>);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            if let Some(dir) = &self.0 {
                if let Ok(cluster) = EmbeddedCluster::new(dir) {
                    let _ = cluster.stop();
                }
                let _ = fs::remove_dir_all(dir);
            }
        }
    }
    let root = scratch()?;
    let home = root.path().join("home");
    fs::create_dir(&home)?;
    fs::set_permissions(&home, fs::Permissions::from_mode(0o700))?;
    let data = home.join("checkout").join("pgnload-data");
    let pgnload = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_pgnload"))
            .arg("--data-dir")
            .arg(&data)
            .args(args)
            .env_remove("DATABASE_URL")
            .env_remove("PGNLOAD_DATA_DIR")
            .current_dir(root.path())
            .output()
    };
    let sample =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/kasparov-deep-blue-1997.pgn");
    let first = pgnload(&["import", &sample.to_string_lossy()])?;
    let stderr = String::from_utf8_lossy(&first.stderr);
    let relocated = fs::read_link(&data).ok();
    let _cleanup = Cleanup(relocated.clone());
    assert!(first.status.success(), "{stderr}");
    let said: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("links to it"))
        .collect();
    if geteuid().is_root() {
        let real = relocated.ok_or("the data dir is a link to the cluster")?;
        assert!(real.starts_with("/var/lib/pgnload"), "{}", real.display());
        assert!(real.join("pgdata/PG_VERSION").exists());
        assert_eq!(said.len(), 1, "{stderr}");
        assert!(said[0].contains(&*data.to_string_lossy()), "{stderr}");
        assert!(said[0].contains(&*real.to_string_lossy()), "{stderr}");
    } else {
        // An unprivileged user runs the server itself: nothing to move.
        assert!(relocated.is_none());
        assert!(said.is_empty(), "{stderr}");
    }
    assert_eq!(fs::metadata(&home)?.permissions().mode() & 0o777, 0o700);

    // Every later command finds the cluster through the link, silently.
    let again = pgnload(&["import", &sample.to_string_lossy()])?;
    assert!(again.status.success());
    assert!(
        !String::from_utf8_lossy(&again.stderr).contains("links to it"),
        "said only once"
    );
    let status = pgnload(&["status"])?;
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(text.starts_with("done"), "{text}");
    let url = String::from_utf8(pgnload(&["db", "url"])?.stdout)?;
    let started = pgnload(&["db", "start"])?;
    assert!(started.status.success());
    let games = Command::new("psql")
        .args([
            "-X",
            "-A",
            "-t",
            url.trim(),
            "-c",
            "SELECT count(*) FROM games",
        ])
        .output()?;
    let count: u64 = String::from_utf8_lossy(&games.stdout).trim().parse()?;
    assert!(count > 0, "games imported into the relocated cluster");
    assert!(String::from_utf8_lossy(&pgnload(&["db", "status"])?.stdout).starts_with("running"));
    assert!(pgnload(&["db", "stop"])?.status.success());
    assert!(String::from_utf8_lossy(&pgnload(&["db", "status"])?.stdout).starts_with("stopped"));
    Ok(())
}
