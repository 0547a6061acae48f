//! The nightly cron job (`scripts/nightly-import.sh`) and what it relies on
//! in pgnload: files appended to during a run, dumps still downloading, a
//! download finished after an import of its first part, a server restart in
//! the middle of a night — and no night that needs a human.
//!
//! What happens "during a run" is made deterministic with hooks, not timing:
//! a `pgnload` wrapper runs a shell snippet after the real `import` returns,
//! and a `sleep` in front of the script's PATH runs one instead of waiting
//! out the settle interval.

use std::{
    fs::OpenOptions,
    io::Write,
    path::{Path, PathBuf},
    process::{Command, Output},
    thread,
    time::{Duration, Instant},
};

use nix::{
    sys::signal::{Signal, kill},
    unistd::Pid,
};
use pgnload::store::embedded::{ClusterStatus, EmbeddedCluster};

use crate::{
    common::{TestDb, fresh_db, games_of, repo, run, scratch_dir, stderr},
    import::content_dump,
    reliability::hold_advisory_lock,
    resume::renamed_sample,
};

/// `count` distinct Lichess games, each ending in a blank line: the shipped
/// sample's, with their ids rotated (copies 1, 2, …; at most 7 × 438).
fn lichess_games(count: usize) -> Vec<String> {
    (1..=7)
        .flat_map(|copy| games_of(&renamed_sample(copy)))
        .take(count)
        .collect()
}

/// Appends `bytes` to `path`.
fn append(path: &Path, bytes: &[u8]) {
    OpenOptions::new()
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(bytes))
        .unwrap_or_else(|e| panic!("appending to {}: {e}", path.display()));
}

fn both(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A `bin` directory holding a `pgnload` that runs the real one and then,
/// after an `import`, the snippet `hooks/after-import` (once); and a `sleep`
/// that runs `hooks/settle` (once) instead of sleeping.
struct Hooks {
    dir: PathBuf,
}

impl Hooks {
    fn new(root: &Path) -> Hooks {
        let dir = root.join("hooks");
        std::fs::create_dir_all(dir.join("bin")).expect("mkdir");
        let once = |hook: &str| {
            format!(
                "if [ -f '{0}/{hook}' ]; then sh '{0}/{hook}'; rm -f '{0}/{hook}'; fi",
                dir.display()
            )
        };
        let scripts = [
            (
                "pgnload",
                format!(
                    "#!/bin/sh\n'{}' \"$@\"\nrc=$?\nif [ \"$1\" = import ]; then {}; fi\nexit $rc\n",
                    env!("CARGO_BIN_EXE_pgnload"),
                    once("after-import")
                ),
            ),
            ("sleep", format!("#!/bin/sh\n{}\nexit 0\n", once("settle"))),
        ];
        for (name, text) in scripts {
            let path = dir.join("bin").join(name);
            std::fs::write(&path, text).expect("write");
            std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
                .expect("chmod");
        }
        Hooks { dir }
    }

    /// Runs `snippet` once, after the next `pgnload import` returns.
    fn after_import(&self, snippet: &str) {
        std::fs::write(self.dir.join("after-import"), snippet).expect("write");
    }

    /// Runs `snippet` once, in the script's settle interval.
    fn in_settle(&self, snippet: &str) {
        std::fs::write(self.dir.join("settle"), snippet).expect("write");
    }

    /// `scripts/nightly-import.sh DUMPS ARGS…` with the hooked `pgnload`
    /// and `sleep`, a settle interval of one (hooked) second, and no
    /// database chosen yet.
    fn nightly(&self, dumps: &Path, args: &[&str]) -> Command {
        let bin = self.dir.join("bin");
        let path = format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut c = Command::new("bash");
        c.arg(repo().join("scripts/nightly-import.sh"))
            .arg(dumps)
            .args(args)
            .env("PATH", path)
            .env("PGNLOAD_BIN", bin.join("pgnload"))
            .env("PGNLOAD_SETTLE_SECONDS", "1")
            .env_remove("DATABASE_URL")
            .env_remove("PGNLOAD_DATA_DIR");
        c
    }
}

/// A dumps directory beside the hooks.
fn dumps_dir(root: &Path) -> PathBuf {
    let dumps = root.join("dumps");
    std::fs::create_dir_all(&dumps).expect("mkdir");
    dumps
}

#[test]
fn a_file_appended_to_during_its_import_is_passed_again_the_next_night() {
    let root = scratch_dir("pgnload-nightly-append-");
    let (hooks, dumps) = (Hooks::new(root.path()), dumps_dir(root.path()));
    let games = lichess_games(3_000);
    let dump = dumps.join("a.pgn");
    std::fs::write(&dump, games[..2_000].concat()).expect("write");
    let tail = root.path().join("tail.pgn");
    std::fs::write(&tail, games[2_000..].concat()).expect("write");
    let db = fresh_db("nightly_append");
    let nightly = || {
        let mut c = hooks.nightly(&dumps, &[]);
        c.env("DATABASE_URL", &db.url);
        run(c)
    };
    // The 1,000 games come while the run imports: after pgnload read the
    // file, before the script records it.
    hooks.after_import(&format!("cat '{}' >> '{}'", tail.display(), dump.display()));
    let first = nightly();
    assert_eq!(first.status.code(), Some(0), "{}", both(&first));
    assert_eq!(db.psql("SELECT count(*) FROM games"), "2000");
    let second = nightly();
    assert_eq!(second.status.code(), Some(0), "{}", both(&second));
    assert!(
        both(&second).contains("1 new or changed of 1 file"),
        "{}",
        both(&second)
    );
    assert_eq!(db.psql("SELECT count(*) FROM games"), "3000");
    let third = nightly();
    assert!(
        both(&third).contains("nothing new among 1 PGN file"),
        "{}",
        both(&third)
    );
}

#[test]
fn files_still_being_written_are_left_for_a_later_night_and_said() {
    let root = scratch_dir("pgnload-nightly-settle-");
    let (hooks, dumps) = (Hooks::new(root.path()), dumps_dir(root.path()));
    let games = lichess_games(30);
    let done = dumps.join("done.pgn");
    std::fs::write(&done, games[..10].concat()).expect("write");
    // A browser's download: the final name, empty, beside its `.part`.
    let browser = dumps.join("browser.pgn");
    std::fs::write(&browser, "").expect("write");
    std::fs::write(dumps.join("browser.pgn.part"), games[10..20].concat()).expect("write");
    // A download written in place, growing while the script looks.
    let growing = dumps.join("growing.pgn");
    std::fs::write(&growing, games[20..25].concat()).expect("write");
    let rest = root.path().join("rest.pgn");
    std::fs::write(&rest, games[25..].concat()).expect("write");
    hooks.in_settle(&format!(
        "cat '{}' >> '{}'",
        rest.display(),
        growing.display()
    ));
    let db = fresh_db("nightly_settle");
    let nightly = || {
        let mut c = hooks.nightly(&dumps, &[]);
        c.env("DATABASE_URL", &db.url);
        run(c)
    };
    let first = nightly();
    let text = both(&first);
    assert_eq!(first.status.code(), Some(0), "{text}");
    assert!(
        stderr(&first).contains(&format!(
            "skipped {}: still downloading ({}.part is beside it)",
            browser.display(),
            browser.display()
        )),
        "{text}"
    );
    assert!(
        stderr(&first).contains(&format!(
            "skipped {}: still being written (it changed within 1 s)",
            growing.display()
        )),
        "{text}"
    );
    assert_eq!(db.psql("SELECT count(*) FROM games"), "10", "{text}");
    assert_eq!(
        db.psql("SELECT count(*) FROM import_files"),
        "1",
        "only done.pgn was read: {text}"
    );
    // The downloads finish: the next night takes both.
    std::fs::rename(dumps.join("browser.pgn.part"), &browser).expect("rename");
    let second = nightly();
    assert_eq!(second.status.code(), Some(0), "{}", both(&second));
    assert!(
        both(&second).contains("2 new or changed of 3 file"),
        "{}",
        both(&second)
    );
    assert_eq!(db.psql("SELECT count(*) FROM games"), "30");
    // A settle interval that is not a number is refused before anything.
    let mut c = hooks.nightly(&dumps, &[]);
    c.env("DATABASE_URL", &db.url)
        .env("PGNLOAD_SETTLE_SECONDS", "1m");
    let bad = run(c);
    assert_eq!(bad.status.code(), Some(2), "{}", both(&bad));
    assert!(
        stderr(&bad).contains("PGNLOAD_SETTLE_SECONDS"),
        "{}",
        both(&bad)
    );
}

#[test]
fn options_after_a_double_dash_reach_pgnload_import() {
    let root = scratch_dir("pgnload-nightly-options-");
    let (hooks, dumps) = (Hooks::new(root.path()), dumps_dir(root.path()));
    std::fs::write(dumps.join("a.pgn"), lichess_games(20).concat()).expect("write");
    let db = fresh_db("nightly_options");
    // Every game of the sample is from 2025: all filtered out.
    let mut c = hooks.nightly(&dumps, &["--", "--since", "2030-01-01"]);
    c.env("DATABASE_URL", &db.url);
    let out = run(c);
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
    assert_eq!(
        db.psql("SELECT games_filtered, games_imported FROM import_files"),
        "20|0"
    );
    // Anything else after the directory is a usage error.
    let mut c = hooks.nightly(&dumps, &["--since"]);
    c.env("DATABASE_URL", &db.url);
    let out = run(c);
    assert_eq!(out.status.code(), Some(2), "{}", both(&out));
    assert!(stderr(&out).contains("usage:"), "{}", both(&out));
}

#[test]
fn the_script_finds_pgnload_without_path_or_pgnload_bin_or_says_so() {
    let root = scratch_dir("pgnload-nightly-bin-");
    // A checkout of its own: the script, and a release binary beside it.
    let checkout = root.path().join("checkout");
    std::fs::create_dir_all(checkout.join("scripts")).expect("mkdir");
    std::fs::create_dir_all(checkout.join("target/release")).expect("mkdir");
    let script = checkout.join("scripts/nightly-import.sh");
    std::fs::copy(repo().join("scripts/nightly-import.sh"), &script).expect("copy");
    let release = checkout.join("target/release/pgnload");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_pgnload"), &release).expect("symlink");
    let dumps = dumps_dir(root.path());
    std::fs::write(dumps.join("a.pgn"), lichess_games(5).concat()).expect("write");
    let home = root.path().join("home");
    std::fs::create_dir_all(&home).expect("mkdir");
    let db = fresh_db("nightly_bin");
    // As cron runs it: its PATH, a HOME without cargo's bin.
    let cron = || {
        let mut c = Command::new("/bin/bash");
        c.arg(&script)
            .arg(&dumps)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", &home)
            .env("PGNLOAD_SETTLE_SECONDS", "0")
            .env("DATABASE_URL", &db.url);
        run(c)
    };
    let out = cron();
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
    assert_eq!(db.psql("SELECT count(*) FROM games"), "5");
    std::fs::remove_file(&release).expect("rm");
    std::fs::write(dumps.join("b.pgn"), lichess_games(6)[5..].concat()).expect("write");
    let out = cron();
    assert_eq!(out.status.code(), Some(2), "{}", both(&out));
    assert!(stderr(&out).contains("no pgnload binary"), "{}", both(&out));
}

/// The zstd dump of `games`, in one frame of many blocks.
fn zstd_dump(games: &[String]) -> Vec<u8> {
    zstd::encode_all(games.concat().as_bytes(), 3).expect("zstd")
}

/// `import_files` rows whose games read differ from imported + present +
/// rejected + filtered.
fn records_not_adding_up(db: &TestDb) -> String {
    db.psql(
        "SELECT count(*) FROM import_files
         WHERE games_done <> games_imported + games_present + games_rejected + games_filtered",
    )
}

#[test]
fn a_zst_imported_while_downloading_continues_once_complete_as_a_clean_import() {
    let root = scratch_dir("pgnload-grown-zst-");
    let games = lichess_games(1_300);
    let full = zstd_dump(&games);
    let dump = root.path().join("month.pgn.zst");
    // Cut inside the frame, blocks in: the games before the cut are read.
    std::fs::write(&dump, &full[..full.len() * 2 / 5]).expect("write");
    let db = fresh_db("grown_zst");
    let import = |db: &TestDb| {
        run({
            let mut c = db.pgnload();
            c.args(["import", "--batch-games", "100"]).arg(&dump);
            c
        })
    };
    let cut = import(&db);
    assert_eq!(cut.status.code(), Some(2), "{}", stderr(&cut));
    let read: i64 = db
        .psql("SELECT games_done FROM import_files WHERE state = 'failed'")
        .parse()
        .unwrap_or_else(|e| panic!("one failed record: {e}\n{}", stderr(&cut)));
    assert!(
        (1..1_300).contains(&read),
        "{read} games read before the cut"
    );
    // Only whole games were read: none cut short, none rejected.
    assert_eq!(db.psql("SELECT count(*) FROM games"), read.to_string());
    assert_eq!(db.psql("SELECT count(*) FROM import_rejects"), "0");
    // The download finishes: the import continues where it stopped.
    std::fs::write(&dump, &full).expect("write");
    let rest = import(&db);
    let text = stderr(&rest);
    assert_eq!(rest.status.code(), Some(0), "{text}");
    assert!(
        text.contains(&format!(
            "grew from {} to {} bytes since its interrupted import",
            full.len() * 2 / 5,
            full.len()
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!("resuming after game #{read}")),
        "{text}"
    );
    assert_eq!(
        db.psql("SELECT state, games_done, size_bytes, fingerprint LIKE $$xxh3-128:$$ || size_bytes || $$:%$$ FROM import_files"),
        format!("done|1300|{}|t", full.len())
    );
    assert_eq!(records_not_adding_up(&db), "0");
    let clean = fresh_db("grown_zst_ref");
    assert_eq!(import(&clean).status.code(), Some(0));
    assert_eq!(content_dump(&db), content_dump(&clean));
}

#[test]
fn a_file_changed_inside_its_imported_part_is_still_refused() {
    let root = scratch_dir("pgnload-changed-zst-");
    let games = lichess_games(1_300);
    let full = zstd_dump(&games);
    let dump = root.path().join("month.pgn.zst");
    std::fs::write(&dump, &full[..full.len() / 2]).expect("write");
    let db = fresh_db("changed_zst");
    let import = |restart: bool| {
        run({
            let mut c = db.pgnload();
            c.args(["import", "--batch-games", "100"]);
            if restart {
                c.arg("--restart");
            }
            c.arg(&dump);
            c
        })
    };
    assert_eq!(import(false).status.code(), Some(2));
    // Longer, but not the same first bytes: other games in front.
    let mut other = games.clone();
    other.rotate_left(1);
    std::fs::write(&dump, zstd_dump(&[&other[..], &games[..1]].concat())).expect("write");
    let refused = import(false);
    let text = stderr(&refused);
    assert_eq!(refused.status.code(), Some(2), "{text}");
    assert!(
        text.contains("changed inside the part its interrupted import read")
            && text.contains("Pass --restart"),
        "{text}"
    );
    let restarted = import(true);
    assert_eq!(restarted.status.code(), Some(0), "{}", stderr(&restarted));
    assert_eq!(db.psql("SELECT count(*) FROM games"), "1300");
}

/// Polls `sql` (one boolean) until it is true; fails after two minutes.
fn wait_for(db: &TestDb, sql: &str) {
    let started = Instant::now();
    while db.psql(sql) != "t" {
        assert!(
            started.elapsed() < Duration::from_mins(2),
            "timed out: {sql}"
        );
        thread::sleep(Duration::from_millis(20));
    }
}

/// The advisory lock pgnload takes on an input while importing it (as
/// `engine::lock_key`): of its fingerprint, the xxh3-128 of its bytes.
fn input_lock_key(path: &Path) -> i64 {
    let bytes = std::fs::read(path).expect("read");
    let fingerprint = format!(
        "xxh3-128:{}:{:032x}",
        bytes.len(),
        xxhash_rust::xxh3::xxh3_128(&bytes)
    );
    pgnload::chess::hash::to_signed(xxhash_rust::xxh64::xxh64(
        fingerprint.as_bytes(),
        0x7067_6e6c,
    ))
}

/// Months of nights, compressed: a dump written in chunks (one arrives
/// during a run's settle interval, one night catches it cut mid-frame after
/// its download stalled), a dump appended to during a run, and a server
/// crash and restart in the middle of a night's run, then nights with
/// nothing new. After the last, the database equals a clean import of the
/// final files, every input's record adds up, and no night was given
/// `--restart` or anything else by hand.
///
/// Long: one scenario, step by step; split, its steps would read out of
/// order.
#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one scenario, step by step; split, its steps would read out of order"
)]
fn a_month_of_nights_ends_as_a_clean_import_of_the_final_files() {
    let root = scratch_dir("pgnload-nightly-sim-");
    let (hooks, dumps) = (Hooks::new(root.path()), dumps_dir(root.path()));
    let data_dir = root.path().join("cluster");
    let cluster = EmbeddedCluster::new(&data_dir).expect("cluster");
    let games = lichess_games(2_500);
    let zst = dumps.join("2025-01.pgn.zst");
    let full = zstd_dump(&games[..1_200]);
    let (cut1, cut2) = (full.len() * 2 / 5, full.len() * 7 / 10);
    let plain = dumps.join("2025-02.pgn");
    let appended = root.path().join("appended.pgn");
    std::fs::write(&appended, games[2_000..2_400].concat()).expect("write");
    let late = dumps.join("2025-03.pgn");
    let late_text = format!(
        "{}[Event \"illegal\"]\n[Site \"https://lichess.org/illegal1\"]\n[Result \"1-0\"]\n\n\
         1. e4 e5 2. Ke3 1-0\n\n",
        games[2_400..].concat()
    );
    let chunk = root.path().join("chunk");
    let mut log = Vec::new();
    let mut night = |what: &str, expected: i32| -> String {
        let mut c = hooks.nightly(&dumps, &[]);
        c.env("PGNLOAD_DATA_DIR", &data_dir);
        let out = run(c);
        let text = both(&out);
        log.push(format!("{what}: exit {:?}", out.status.code()));
        assert_eq!(
            out.status.code(),
            Some(expected),
            "{}\n{text}",
            log.join("\n")
        );
        text
    };

    // Night 1: the January dump is 40% there and grows while the script
    // looks; February is complete.
    std::fs::write(&zst, &full[..cut1]).expect("write");
    std::fs::write(&plain, games[1_200..2_000].concat()).expect("write");
    std::fs::write(&chunk, &full[cut1..cut2]).expect("write");
    hooks.in_settle(&format!("cat '{}' >> '{}'", chunk.display(), zst.display()));
    let text = night("night 1", 0);
    assert!(text.contains("still being written"), "{text}");

    // Night 2: the download stalled at 70%, cut inside a frame: its import
    // fails (exit 2). Meanwhile February gets 400 more games, after
    // pgnload read it and before the script records what it passed.
    hooks.after_import(&format!(
        "cat '{}' >> '{}'",
        appended.display(),
        plain.display()
    ));
    night("night 2", 2);

    // Night 3: January's download finished and March arrived. The server
    // crashes while the run waits for March (its lock held here), and is
    // started again; the run goes on by itself.
    std::fs::write(&chunk, &full[cut2..]).expect("write");
    append(&zst, &std::fs::read(&chunk).expect("read"));
    std::fs::write(&late, &late_text).expect("write");
    cluster.start_persistent().expect("start");
    let db = TestDb::existing(cluster.connection_url());
    let mut holder = hold_advisory_lock(&db, input_lock_key(&late));
    let crash = thread::scope(|scope| {
        let script = scope.spawn(|| night("night 3", 1));
        wait_for(
            &db,
            "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted)",
        );
        let done_before = db.psql("SELECT count(*) FROM import_files WHERE state = 'done'");
        let Ok(ClusterStatus::Running { pid }) = cluster.status() else {
            panic!("the server runs");
        };
        kill(
            Pid::from_raw(i32::try_from(pid).expect("pid fits")),
            Signal::SIGQUIT,
        )
        .expect("immediate stop");
        let started = Instant::now();
        // (pgnload may start it again itself: a new postmaster.)
        while matches!(cluster.status(), Ok(ClusterStatus::Running { pid: p }) if p == pid) {
            assert!(
                started.elapsed() < Duration::from_mins(1),
                "server stopping"
            );
            thread::sleep(Duration::from_millis(20));
        }
        // The persistent mark is still there: clear it, start again.
        let _ = cluster.stop();
        cluster.start_persistent().expect("restart");
        (done_before, script.join().expect("night 3"))
    });
    let _ = holder.wait();
    let (done_before, text) = crash;
    // January and February were finished before the crash, in this run.
    assert_eq!(done_before, "3", "{text}");
    assert!(text.contains("grew from"), "{text}");

    // Nights 4 and 5: nothing new.
    for n in 4..=5 {
        let text = night(&format!("night {n}"), 0);
        assert!(text.contains("nothing new among 3 PGN file"), "{text}");
    }

    let dump = content_dump(&db);
    let not_adding_up = records_not_adding_up(&db);
    let not_done = db.psql("SELECT count(*) FROM import_files WHERE state <> 'done'");
    let january = db.psql(&format!(
        "SELECT count(*), min(games_done) FROM import_files WHERE path = '{}'",
        zst.display()
    ));
    cluster.stop().expect("stop");
    let clean = fresh_db("nightly_sim_ref");
    let reference = run({
        let mut c = clean.pgnload();
        c.arg("import").args([&zst, &plain, &late]);
        c
    });
    assert_eq!(reference.status.code(), Some(1), "{}", stderr(&reference));
    assert_eq!(dump, content_dump(&clean), "{}", log.join("\n"));
    assert_eq!(not_adding_up, "0");
    assert_eq!(not_done, "0");
    // January's interrupted import was continued, not begun again.
    assert_eq!(january, "1|1200");
}

#[test]
fn quiet_imports_print_no_advice() {
    let root = scratch_dir("pgnload-quiet-advice-");
    let file = root.path().join("a.pgn");
    std::fs::write(&file, lichess_games(3).concat()).expect("write");
    let db = fresh_db("quiet_tuning");
    // A session setting that earns advice, whatever the test cluster's.
    let url = format!("{}&options=-c%20maintenance_work_mem%3D64MB", db.url);
    let import = |quiet: bool| {
        run({
            let mut c = db.pgnload();
            c.env("DATABASE_URL", &url);
            if quiet {
                c.arg("-q");
            }
            c.args(["import", "--restart"]).arg(&file);
            c
        })
    };
    // Shown without -q…
    let loud = import(false);
    assert_eq!(loud.status.code(), Some(0), "{}", stderr(&loud));
    assert!(stderr(&loud).contains("advice: "), "{}", stderr(&loud));
    // …and not with it (the summary still is).
    let quiet = import(true);
    assert_eq!(quiet.status.code(), Some(0), "{}", stderr(&quiet));
    assert!(!stderr(&quiet).contains("advice: "), "{}", stderr(&quiet));
    assert!(
        stderr(&quiet).contains("import summary"),
        "{}",
        stderr(&quiet)
    );
}

#[test]
fn the_data_dir_is_named_absolute_and_a_missing_or_stopped_cluster_is_said() {
    let root = scratch_dir("pgnload-data-dir-");
    let absolute = root.path().join("data");
    // Relative, as cron would resolve it against its working directory.
    let db = |args: &[&str]| {
        run({
            let mut c = crate::common::pgnload();
            c.current_dir(root.path())
                .env_remove("DATABASE_URL")
                .env_remove("PGNLOAD_DATA_DIR")
                .args(["--data-dir", "data", "db"])
                .args(args);
            c
        })
    };
    let url = db(&["url"]);
    assert_eq!(url.status.code(), Some(0), "{}", stderr(&url));
    assert!(String::from_utf8_lossy(&url.stdout).starts_with("postgresql://"));
    assert!(
        stderr(&url).contains(&format!(
            "warning: there is no embedded cluster in {}",
            absolute.display()
        )),
        "{}",
        stderr(&url)
    );
    assert!(!absolute.exists(), "db url created nothing");
    // A restore of something that is no backup leaves no cluster behind.
    let not_a_backup = root.path().join("notes.txt");
    std::fs::write(&not_a_backup, "not a backup\n").expect("write");
    let restore = db(&["restore", not_a_backup.to_str().expect("utf-8 temp path")]);
    assert_eq!(restore.status.code(), Some(2), "{}", stderr(&restore));
    assert!(
        stderr(&restore).contains(&format!(
            "creating a new PostgreSQL cluster in {}",
            absolute.display()
        )),
        "{}",
        stderr(&restore)
    );
    assert!(
        !absolute.exists(),
        "the restore left {}: {}",
        absolute.display(),
        stderr(&restore)
    );
    // A cluster that exists but is stopped.
    let start = db(&["start"]);
    assert_eq!(start.status.code(), Some(0), "{}", stderr(&start));
    let stop = db(&["stop"]);
    assert_eq!(stop.status.code(), Some(0), "{}", stderr(&stop));
    let url = db(&["url"]);
    assert_eq!(url.status.code(), Some(0), "{}", stderr(&url));
    assert!(
        stderr(&url).contains(&format!(
            "warning: the embedded cluster in {} is not running",
            absolute.display()
        )),
        "{}",
        stderr(&url)
    );
}
