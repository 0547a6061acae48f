//! Shared helpers: paths, running the binary and the Python reference.

use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
    process::{Command, Output},
};

/// The repository root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `tests/data/NAME`.
pub fn data(name: &str) -> PathBuf {
    repo().join("tests/data").join(name)
}

/// Every `.pgn` file shipped in `tests/data`, sorted.
pub fn data_pgns() -> Vec<PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(repo().join("tests/data"))
        .expect("tests/data exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "pgn"))
        .collect();
    files.sort();
    files
}

/// The built `pgnload` binary.
pub fn pgnload() -> Command {
    Command::new(env!("CARGO_BIN_EXE_pgnload"))
}

/// Runs a command and returns its output, panicking with context if it could not start.
pub fn run(mut cmd: Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("could not run {cmd:?}: {e}"))
}

/// `python3` running a script from `scripts/`, after checking the reference
/// packages import. Fails the test with instructions when they do not.
pub fn python_script(script: &str) -> Command {
    let check = run({
        let mut c = Command::new("python3");
        c.args([
            "-c",
            "import chess, xxhash; assert chess.__version__.startswith('1.11')",
        ]);
        c
    });
    assert!(
        check.status.success(),
        "python-chess 1.11 and xxhash are required for the parity tests: \
         pip install chess==1.11.2 xxhash\n{}",
        String::from_utf8_lossy(&check.stderr)
    );
    let mut cmd = Command::new("python3");
    cmd.arg(repo().join("scripts").join(script));
    cmd
}

/// A command's stderr as text (lossy), for assertions and messages.
pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The games of a PGN text whose games each begin with an `[Event` line,
/// each ending with a blank line: what tests feed a pipe or a file piece
/// by piece.
pub fn games_of(text: &str) -> Vec<String> {
    text.split("\n[Event ")
        .enumerate()
        .map(|(i, game)| {
            let game = if i == 0 {
                game.to_owned()
            } else {
                format!("[Event {game}")
            };
            format!("{}\n\n", game.trim_end())
        })
        .collect()
}

/// Asserts two TSV outputs are identical, showing the first differing line.
pub fn assert_same_lines(what: &Path, expected: &[u8], actual: &[u8]) {
    if expected == actual {
        return;
    }
    let exp = String::from_utf8_lossy(expected);
    let act = String::from_utf8_lossy(actual);
    let (mut e, mut a) = (exp.lines(), act.lines());
    for line in 1.. {
        match (e.next(), a.next()) {
            (Some(x), Some(y)) if x == y => {}
            (x, y) => panic!(
                "{}: first difference at line {line}\n  python: {x:?}\n  rust:   {y:?}\n\
                 ({} python lines, {} rust lines)",
                what.display(),
                exp.lines().count(),
                act.lines().count()
            ),
        }
    }
}

/// A scratch database on the shared test cluster.
pub struct TestDb {
    /// Connection URL (libpq form, usable by pgnload and psql).
    pub url: String,
    /// The database's name on the shared test cluster, which dropping the
    /// `TestDb` drops; `None` for a database the test manages itself.
    owned: Option<String>,
}

/// Drops the database when its test passed, so that a run's disk use does
/// not grow with the number of tests; a failed test's database is kept for
/// inspection.
impl Drop for TestDb {
    fn drop(&mut self) {
        let Some(name) = &self.owned else { return };
        if std::thread::panicking() {
            return;
        }
        cluster_sql(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"));
    }
}

/// Runs one statement on the test cluster's own database, failing the test
/// if it fails.
fn cluster_sql(sql: &str) {
    let out = run({
        let mut c = Command::new("psql");
        c.args(["-X", "-q", "-v", "ON_ERROR_STOP=1"])
            .arg(test_cluster().connection_url())
            .args(["-c", sql]);
        c
    });
    assert!(
        out.status.success(),
        "{sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The test cluster: one embedded PostgreSQL per test process, shared by all
/// database tests, in a directory the `postgres` user can reach when the
/// tests run as root. Left running at exit (the next run reuses it);
/// `.ci/run` stops it.
pub fn test_cluster() -> &'static pgnload::store::embedded::EmbeddedCluster {
    use std::sync::OnceLock;
    static CLUSTER: OnceLock<(
        pgnload::store::embedded::EmbeddedCluster,
        pgnload::store::embedded::SessionGuard,
    )> = OnceLock::new();
    &CLUSTER
        .get_or_init(|| {
            let dir = test_cluster_dir();
            let cluster = pgnload::store::embedded::EmbeddedCluster::new(&dir)
                .unwrap_or_else(|e| panic!("test cluster in {}: {e}", dir.display()));
            let session = cluster
                .start_session()
                .unwrap_or_else(|e| panic!("starting the test cluster: {e}"));
            (cluster, session)
        })
        .0
}

/// Where the shared test cluster lives (`PGNLOAD_TEST_CLUSTER_DIR` overrides).
pub fn test_cluster_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("PGNLOAD_TEST_CLUSTER_DIR") {
        return PathBuf::from(dir);
    }
    let tag = xxhash_rust::xxh64::xxh64(repo().to_string_lossy().as_bytes(), 0);
    PathBuf::from(format!("/tmp/pgnload-test-cluster-{tag:016x}"))
}

/// Creates a fresh, empty database for one test.
pub fn fresh_db(label: &str) -> TestDb {
    use std::sync::atomic::{AtomicU32, Ordering};
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let cluster = test_cluster();
    let name = format!(
        "t_{}_{}_{}",
        label,
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    let admin = cluster.connection_url();
    cluster_sql(&format!("CREATE DATABASE {name}"));
    let url = admin.replacen(
        "postgresql:///pgnload?",
        &format!("postgresql:///{name}?"),
        1,
    );
    assert_ne!(url, admin, "unexpected embedded URL form {admin}");
    TestDb {
        url,
        owned: Some(name),
    }
}

/// A fresh database with the schema applied by `pgnload db migrate`.
pub fn migrated_db(label: &str) -> TestDb {
    let db = fresh_db(label);
    let out = run({
        let mut c = db.pgnload();
        c.args(["db", "migrate"]);
        c
    });
    assert!(
        out.status.success(),
        "db migrate: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    db
}

impl TestDb {
    /// A database outside the shared test cluster, left as it is when
    /// dropped.
    pub fn existing(url: String) -> TestDb {
        TestDb { url, owned: None }
    }

    /// Runs SQL with psql and returns its unaligned, tuples-only output.
    pub fn psql(&self, sql: &str) -> String {
        let out = run({
            let mut c = Command::new("psql");
            c.args([
                "-X",
                "-q",
                "-A",
                "-t",
                "-v",
                "ON_ERROR_STOP=1",
                &self.url,
                "-c",
                sql,
            ]);
            c
        });
        assert!(
            out.status.success(),
            "psql {sql:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim_end().to_owned()
    }

    /// `pgnload` pointed at this database.
    pub fn pgnload(&self) -> Command {
        let mut cmd = pgnload();
        cmd.env("DATABASE_URL", &self.url);
        cmd
    }

    /// Runs `pgnload -q ARGS` on this database.
    pub fn quiet(&self, args: &[&str]) -> Output {
        run({
            let mut c = self.pgnload();
            c.arg("-q").args(args);
            c
        })
    }

    /// `pgnload -q ARGS` on this database, which must succeed; its stdout.
    pub fn quiet_ok(&self, args: &[&str]) -> String {
        let out = self.quiet(args);
        assert!(
            out.status.success(),
            "pgnload {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("UTF-8 output")
    }
}

/// A scratch directory under /tmp with mode 0755: the `postgres` user (when
/// the tests run as root) and psql's `\copy` must be able to enter it
/// whatever the umask.
pub fn scratch_dir(prefix: &str) -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in("/tmp")
        .expect("temp dir");
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    dir
}

/// A tiny deterministic generator for fault timings (seeded, so a failure
/// can be replayed).
pub struct Lcg(pub u64);

impl Lcg {
    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

/// A game of a hostile corpus that must be rejected: where it is and why.
pub struct ExpectedReject {
    /// 1-based game number in the file.
    pub number: usize,
    /// Byte offset of its first byte.
    pub offset: usize,
    /// Its bytes, as they must be kept.
    pub bytes: Vec<u8>,
    /// A word of the reason it must be rejected with.
    pub reason: &'static str,
}

/// Concatenates `parts` (a game's bytes, and the reason it must be
/// rejected, `None` for a game to import) into one PGN, with the rejects
/// expected from it. Each part is one game, but the last may hold several.
pub fn hostile_corpus(parts: &[(Vec<u8>, Option<&'static str>)]) -> (Vec<u8>, Vec<ExpectedReject>) {
    let mut pgn = Vec::new();
    let mut rejects = Vec::new();
    for (i, (bytes, reason)) in parts.iter().enumerate() {
        if let Some(reason) = reason {
            rejects.push(ExpectedReject {
                number: i + 1,
                offset: pgn.len(),
                bytes: bytes.clone(),
                reason,
            });
        }
        pgn.extend_from_slice(bytes);
    }
    (pgn, rejects)
}

/// Asserts `import_rejects` holds exactly `expected`: number, offset,
/// reason and the verbatim bytes of each.
pub fn assert_rejects_kept(db: &TestDb, expected: &[ExpectedReject]) {
    let rows = db.psql(
        "SELECT game_number, byte_offset, reason, encode(raw, 'hex') FROM import_rejects ORDER BY game_number",
    );
    let rows: Vec<&str> = rows.lines().collect();
    assert_eq!(rows.len(), expected.len(), "{rows:?}");
    for (row, reject) in rows.iter().zip(expected) {
        let fields: Vec<&str> = row.split('|').collect();
        assert_eq!(fields[0], reject.number.to_string(), "{row}");
        assert_eq!(fields[1], reject.offset.to_string(), "{row}");
        assert!(fields[2].contains(reject.reason), "{row}");
        let hex: String = reject.bytes.iter().fold(String::new(), |mut hex, b| {
            let _ = write!(hex, "{b:02x}");
            hex
        });
        assert_eq!(fields[3], hex, "game {} not kept verbatim", reject.number);
    }
}

/// `pgnload` on the embedded cluster in `data_dir` (never a `DATABASE_URL`
/// from the environment).
pub fn embedded_pgnload(data_dir: &Path) -> Command {
    let mut cmd = pgnload();
    cmd.env_remove("DATABASE_URL")
        .arg("--data-dir")
        .arg(data_dir);
    cmd
}

/// Runs `verify --games` on the embedded cluster in `data_dir`, writing its
/// report to `report`, and fails with `context`, verify's stderr and the
/// report's first lines unless every game and position checks out.
pub fn assert_games_verify_clean(data_dir: &Path, report: &Path, context: &str) {
    let verify = run({
        let mut c = embedded_pgnload(data_dir);
        c.args(["-q", "verify", "--games", "--report"]).arg(report);
        c
    });
    assert_eq!(
        verify.status.code(),
        Some(0),
        "{context}: verify --games:\n{}\n{}",
        String::from_utf8_lossy(&verify.stderr),
        std::fs::read_to_string(report)
            .unwrap_or_default()
            .lines()
            .take(5)
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert_explorer_verify_clean(data_dir, &report.with_extension("explorer.tsv"), context);
}

/// What `verify --explorer` (and `explore`) say on a database that keeps
/// no explorer counters: the state row says so, nothing else.
pub const EXPLORER_DISABLED: &str =
    "this database keeps no explorer counters; run `pgnload db explorer enable`";

/// Runs `pgnload db explorer enable` with `cmd` (a `pgnload` command for
/// the database) and fails unless it succeeded; returns its stdout.
pub fn enable_explorer(mut cmd: Command) -> String {
    cmd.args(["-q", "db", "explorer", "enable"]);
    let out = run(cmd);
    assert_eq!(
        out.status.code(),
        Some(0),
        "db explorer enable:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `verify --explorer` on the embedded cluster in `data_dir` and fails
/// with `context` and its output unless the counters equal a recount, or
/// the database keeps none (its state says so: `verify` reads it and
/// refuses with [`EXPLORER_DISABLED`] and exit code 2).
pub fn assert_explorer_verify_clean(data_dir: &Path, report: &Path, context: &str) {
    let verify = run({
        let mut c = embedded_pgnload(data_dir);
        c.args(["-q", "verify", "--explorer", "--report"])
            .arg(report);
        c
    });
    if verify.status.code() == Some(2)
        && String::from_utf8_lossy(&verify.stderr).contains(EXPLORER_DISABLED)
    {
        return;
    }
    assert_eq!(
        verify.status.code(),
        Some(0),
        "{context}: verify --explorer:\n{}\n{}",
        String::from_utf8_lossy(&verify.stdout),
        String::from_utf8_lossy(&verify.stderr),
    );
}

/// `pgnload import -` into `db`, fed by `feed` from a thread (so that a
/// huge input needs no disk); returns pgnload's output and whether `feed`
/// wrote everything (an error means pgnload stopped reading).
pub fn import_streamed(
    db: &TestDb,
    feed: impl FnOnce(&mut std::process::ChildStdin) -> std::io::Result<()> + Send + 'static,
) -> (Output, std::io::Result<()>) {
    let mut child = db
        .pgnload()
        .args(["import", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn pgnload");
    let mut stdin = child.stdin.take().expect("piped stdin");
    let writer = std::thread::spawn(move || feed(&mut stdin));
    let output = child.wait_with_output().expect("wait for pgnload");
    let written = writer.join().expect("writer thread");
    (output, written)
}

/// The largest peak RSS of any child process this test binary waited for,
/// in KiB.
pub fn children_peak_rss_kib() -> i64 {
    nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN)
        .expect("getrusage")
        .max_rss()
}

/// A command that runs `program ARGS` with `cmd`'s program, arguments
/// and environment after them: `cmd` run through a wrapper.
pub fn through(program: &str, args: &[&str], cmd: &Command) -> Command {
    let mut wrapped = Command::new(program);
    wrapped
        .args(args)
        .arg(cmd.get_program())
        .args(cmd.get_args());
    for (name, value) in cmd.get_envs() {
        match value {
            Some(value) => wrapped.env(name, value),
            None => wrapped.env_remove(name),
        };
    }
    wrapped
}

/// `cmd` with the usual 8 MiB main-thread stack, whatever the test's own
/// limit (the threads pgnload starts, rayon's and tokio's, have 2 MiB).
pub fn with_usual_stack(cmd: &Command) -> Command {
    through("sh", &["-c", "ulimit -s 8192 && exec \"$0\" \"$@\""], cmd)
}

/// Runs `cmd` under a `python3` that waits for it and prints its peak RSS:
/// its output and that peak, in KiB. Unlike [`children_peak_rss_kib`], the
/// peak of this one process, whatever the tests running beside it start.
pub fn run_measured(cmd: &Command) -> (Output, i64) {
    let script = "import resource, subprocess, sys\n\
                  code = subprocess.run(sys.argv[1:]).returncode\n\
                  peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n\
                  print(f'peak_rss_kib {peak}', file=sys.stderr)\n\
                  sys.exit(code if code >= 0 else 128 - code)";
    let out = run(through("python3", &["-c", script], cmd));
    let text = String::from_utf8_lossy(&out.stderr);
    let peak = text
        .lines()
        .rev()
        .find_map(|line| line.strip_prefix("peak_rss_kib "))
        .and_then(|kib| kib.parse().ok())
        .unwrap_or_else(|| panic!("no peak RSS measured: {text}"));
    (out, peak)
}

/// `scripts/shard-cluster.sh`, which starts and stops the private
/// coordinator and shard servers of the sharded-layout tests.
pub fn shard_cluster_script() -> Command {
    Command::new(repo().join("scripts/shard-cluster.sh"))
}

/// A coordinator and shard servers started by `scripts/shard-cluster.sh`
/// in a scratch directory, for tests of the sharded layout: separate
/// PostgreSQL servers on loopback TCP, as a real deployment has, rather
/// than databases of the shared test cluster. Stopped when dropped; the
/// directory (data, logs) is removed, or kept for inspection when the test
/// failed.
pub struct ShardCluster {
    /// The script's DIR: `coordinator/`, `shard1/` ... and their logs.
    pub dir: PathBuf,
    /// `postgresql://postgres@127.0.0.1:PORT/pgnload` of the coordinator.
    pub coordinator_url: String,
    /// The shards' URLs, `shard1` first.
    pub shard_urls: Vec<String>,
    /// Removes `dir` on drop; taken (and kept) when the test failed.
    scratch: Option<tempfile::TempDir>,
}

impl ShardCluster {
    /// Starts a coordinator and `shards` shard servers, each on a free
    /// port, so that tests running in parallel get disjoint servers.
    pub fn start(label: &str, shards: usize) -> ShardCluster {
        Self::start_with_port_base(label, shards, None)
    }

    /// [`ShardCluster::start`] trying ports from `port_base` upwards
    /// (`SHARD_CLUSTER_PORT_BASE`) instead of from a random one: for tests
    /// of how the script skips ports that are taken.
    pub fn start_with_port_base(
        label: &str,
        shards: usize,
        port_base: Option<u16>,
    ) -> ShardCluster {
        let scratch = scratch_dir(&format!("pgnload-shards-{label}-"));
        // Built before starting, so that its drop stops whatever a failed
        // start left running.
        let mut cluster = ShardCluster {
            dir: scratch.path().to_path_buf(),
            coordinator_url: String::new(),
            shard_urls: Vec::new(),
            scratch: Some(scratch),
        };
        let out = run({
            let mut c = shard_cluster_script();
            c.arg("start").arg(&cluster.dir).arg(shards.to_string());
            if let Some(base) = port_base {
                c.env("SHARD_CLUSTER_PORT_BASE", base.to_string());
            }
            c
        });
        assert!(
            out.status.success(),
            "shard-cluster.sh start {}: {}",
            cluster.dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        (cluster.coordinator_url, cluster.shard_urls) = cluster.urls();
        assert_eq!(cluster.shard_urls.len(), shards, "{:?}", cluster.shard_urls);
        cluster
    }

    /// The coordinator's and the shards' URLs, as `shard-cluster.sh url`
    /// prints them.
    pub fn urls(&self) -> (String, Vec<String>) {
        let out = run({
            let mut c = shard_cluster_script();
            c.arg("url").arg(&self.dir);
            c
        });
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "shard-cluster.sh url: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut lines = stdout.lines();
        let (Some(coordinator), Some(shards), None) = (
            lines.next().and_then(|l| l.strip_prefix("coordinator=")),
            lines.next().and_then(|l| l.strip_prefix("shards=")),
            lines.next(),
        ) else {
            panic!("unexpected output of shard-cluster.sh url:\n{stdout}");
        };
        (
            coordinator.to_owned(),
            shards.split(',').map(str::to_owned).collect(),
        )
    }

    /// Restarts the server of `shard_urls[i]` (directory `shard{i+1}`) with
    /// `pg_ctl restart -m immediate`: what a crash and a restart of that
    /// server look like to its clients. Returns once it accepts
    /// connections again.
    pub fn restart_shard(&self, i: usize) {
        assert!(
            i < self.shard_urls.len(),
            "restart_shard({i}): there are {} shards (0-based index)",
            self.shard_urls.len()
        );
        let bins = pgnload::store::embedded::PgBinaries::locate()
            .unwrap_or_else(|e| panic!("PostgreSQL programs: {e}"));
        let name = format!("shard{}", i + 1);
        // PostgreSQL refuses to run as root: the script runs it as `postgres`.
        let mut cmd = if nix::unistd::geteuid().is_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(bins.tool("pg_ctl"));
            c
        } else {
            Command::new(bins.tool("pg_ctl"))
        };
        // `-l`: without it the server would keep this process's stdout
        // open, and waiting for its output would never end.
        cmd.args(["restart", "-w", "-s", "-m", "immediate", "-t", "600", "-D"])
            .arg(self.dir.join(&name))
            .arg("-l")
            .arg(self.dir.join(format!("{name}.log")))
            .current_dir("/");
        let out = run(cmd);
        assert!(
            out.status.success(),
            "pg_ctl restart {name}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Stops the servers (always: a failed test must not leave them running)
/// and removes the directory unless the test failed.
impl Drop for ShardCluster {
    fn drop(&mut self) {
        let out = shard_cluster_script().arg("stop").arg(&self.dir).output();
        let stopped = matches!(&out, Ok(o) if o.status.success());
        if (std::thread::panicking() || !stopped)
            && let Some(scratch) = self.scratch.take()
        {
            eprintln!("shard clusters kept in {}", scratch.keep().display());
        }
        assert!(
            stopped || std::thread::panicking(),
            "shard-cluster.sh stop {}: {}",
            self.dir.display(),
            out.map_or_else(
                |e| e.to_string(),
                |o| String::from_utf8_lossy(&o.stderr).into_owned()
            )
        );
    }
}

/// Runs SQL with psql on the database at `url` and returns its unaligned,
/// tuples-only output, as [`TestDb::psql`] does.
pub fn psql_on(url: &str, sql: &str) -> String {
    TestDb::existing(url.to_owned()).psql(sql)
}
