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
/// that runs `hooks/settle` (once) instead of sleeping. Each logs how it was
/// called: `hooks/calls` the pgnload commands, `hooks/slept` the waits.
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
                    "#!/bin/sh\necho \"$1\" >> '{}/calls'\n'{}' \"$@\"\nrc=$?\n\
                     if [ \"$1\" = import ]; then {}; fi\nexit $rc\n",
                    dir.display(),
                    env!("CARGO_BIN_EXE_pgnload"),
                    once("after-import")
                ),
            ),
            (
                "sleep",
                format!(
                    "#!/bin/sh\necho \"$@\" >> '{}/slept'\n{}\nexit 0\n",
                    dir.display(),
                    once("settle")
                ),
            ),
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

    /// What the hook named `log` wrote (`calls`, `slept`): one line a call.
    fn log(&self, log: &str) -> String {
        std::fs::read_to_string(self.dir.join(log)).unwrap_or_default()
    }

    /// `scripts/nightly-import.sh DUMPS ARGS…` with the hooked `pgnload`
    /// and `sleep`, a settle interval of one (hooked) second, no database
    /// chosen yet, in the hooks' directory (where a name that a shell
    /// would run, `$(touch pwned)`, would leave its file).
    fn nightly(&self, dumps: &Path, args: &[&str]) -> Command {
        self.nightly_by(Command::new("bash"), dumps, args)
    }

    /// As [`Hooks::nightly`], `bash` being run by `bash` (a command whose
    /// last word is bash, such as one run as another user).
    fn nightly_by(&self, bash: Command, dumps: &Path, args: &[&str]) -> Command {
        let bin = self.dir.join("bin");
        let path = format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut c = bash;
        c.arg(repo().join("scripts/nightly-import.sh"))
            .arg(dumps)
            .args(args)
            .env("PATH", path)
            .env("PGNLOAD_BIN", bin.join("pgnload"))
            .env("PGNLOAD_SETTLE_SECONDS", "1")
            .env_remove("DATABASE_URL")
            .env_remove("PGNLOAD_DATA_DIR")
            .current_dir(&self.dir);
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

/// Checks that `out` ended with `expected` and that its stdout and stderr
/// hold each of `says`; returns them.
fn assert_said(out: &Output, expected: i32, says: &[&str]) -> String {
    let text = both(out);
    assert_eq!(out.status.code(), Some(expected), "{text}");
    for said in says {
        assert!(text.contains(said), "{said:?} not in:\n{text}");
    }
    text
}

/// Runs the hooked script on `dumps` against `db`: [`assert_said`].
fn night(hooks: &Hooks, dumps: &Path, db: &TestDb, expected: i32, says: &[&str]) -> String {
    let mut c = hooks.nightly(dumps, &[]);
    c.env("DATABASE_URL", &db.url);
    assert_said(&run(c), expected, says)
}

/// Dump names that a list of a record a line, a shell or a command line
/// could trip on.
const AWKWARD_NAMES: [&str; 6] = [
    "new\nline.pgn",
    "a\ttab.pgn",
    " spaces  around .pgn",
    "-leading-dash.pgn",
    "back\\slash.pgn",
    "$(touch pwned) ]*?.pgn",
];

#[test]
fn dumps_with_any_byte_in_their_names_are_passed_again_once_grown() {
    let root = scratch_dir("pgnload-nightly-names-");
    let (hooks, dumps) = (Hooks::new(root.path()), dumps_dir(root.path()));
    let n = AWKWARD_NAMES.len();
    let games = lichess_games(n * 15);
    let (first, more) = games.split_at(n * 10);
    for (i, name) in AWKWARD_NAMES.iter().enumerate() {
        std::fs::write(dumps.join(name), first[i * 10..][..10].concat()).expect("write");
    }
    let db = fresh_db("nightly_names");
    // A night passes every dump, and the next one none.
    let two_nights = |games_then: usize| {
        let passed = format!("{n} new or changed of {n} file");
        night(&hooks, &dumps, &db, 0, &[&passed]);
        assert_eq!(
            db.psql("SELECT count(*) FROM games"),
            games_then.to_string()
        );
        let none = format!("nothing new among {n} PGN file");
        night(&hooks, &dumps, &db, 0, &[&none]);
    };
    two_nights(n * 10);
    // Every dump grows: every one is passed again, then recorded again.
    for (i, name) in AWKWARD_NAMES.iter().enumerate() {
        append(&dumps.join(name), more[i * 5..][..5].concat().as_bytes());
    }
    two_nights(n * 15);
    assert!(!hooks.dir.join("pwned").exists(), "a name was run");
}

#[test]
fn a_dump_whose_name_is_not_utf8_is_named_every_night_and_the_others_imported() {
    use std::os::unix::ffi::OsStrExt;
    let root = scratch_dir("pgnload-nightly-not-utf8-");
    let (hooks, dumps) = (Hooks::new(root.path()), dumps_dir(root.path()));
    let games = lichess_games(10);
    std::fs::write(dumps.join("good.pgn"), games[..5].concat()).expect("write");
    let bad = dumps.join(std::ffi::OsStr::from_bytes(b"bad\xff.pgn"));
    std::fs::write(&bad, games[5..].concat()).expect("write");
    let db = fresh_db("nightly_not_utf8");
    // pgnload refuses such a name (and with it its whole command line):
    // the file is not passed, and said, every night until it is renamed.
    let said = format!(
        "not imported $'{}/bad\\377.pgn': its name is not UTF-8, which pgnload refuses; rename it",
        dumps.display()
    );
    for _ in 0..2 {
        let text = night(&hooks, &dumps, &db, 2, &[&said, "1 file(s) not imported"]);
        assert_eq!(db.psql("SELECT count(*) FROM games"), "5", "{text}");
    }
    std::fs::rename(&bad, dumps.join("bad.pgn")).expect("rename");
    night(&hooks, &dumps, &db, 0, &["1 new or changed of 2 file"]);
    assert_eq!(db.psql("SELECT count(*) FROM games"), "10");
}

#[test]
fn a_list_of_imported_dumps_in_the_earlier_format_is_read_then_rewritten() {
    let root = scratch_dir("pgnload-nightly-old-list-");
    let (hooks, dumps) = (Hooks::new(root.path()), dumps_dir(root.path()));
    let games = lichess_games(15);
    let (plain, newline) = (dumps.join("a.pgn"), dumps.join("new\nline.pgn"));
    std::fs::write(&plain, games[..5].concat()).expect("write");
    std::fs::write(&newline, games[5..10].concat()).expect("write");
    let db = fresh_db("nightly_old_list");
    let imported = run({
        let mut c = db.pgnload();
        c.arg("import").args([&plain, &newline]);
        c
    });
    assert_eq!(imported.status.code(), Some(0), "{}", stderr(&imported));
    // The list as the earlier script wrote it: a `stat` line a file, the
    // second one's cut in two by the newline in its name.
    let lines = run({
        let mut c = Command::new("stat");
        c.args(["-c", "%s|%y|%z|%i|%n", "--"])
            .args([&plain, &newline]);
        c
    });
    assert!(lines.status.success(), "{}", stderr(&lines));
    let list = dumps.join(".pgnload-done");
    std::fs::write(&list, &lines.stdout).expect("write");
    // a.pgn's record still holds: it is not read again. The other one's
    // cannot be trusted: passed again, pgnload finds it imported.
    let text = night(&hooks, &dumps, &db, 0, &["1 new or changed of 2 file"]);
    assert!(
        text.contains("line.pgn: already imported, skipped"),
        "{text}"
    );
    assert!(!text.contains("a.pgn: already imported"), "{text}");
    assert_eq!(db.psql("SELECT count(*) FROM games"), "10");
    let rewritten = std::fs::read(&list).expect("read");
    assert!(
        rewritten.starts_with(b"pgnload-done 2\0"),
        "{}",
        String::from_utf8_lossy(&rewritten)
    );
    night(&hooks, &dumps, &db, 0, &["nothing new among 2 PGN file"]);
    // A record cut short (a crash while the list was written) does not
    // swallow the next one.
    append(&list, b"4242|2025-");
    std::fs::write(dumps.join("c.pgn"), games[10..].concat()).expect("write");
    night(&hooks, &dumps, &db, 0, &["1 new or changed of 3 file"]);
    night(&hooks, &dumps, &db, 0, &["nothing new among 3 PGN file"]);
    assert_eq!(db.psql("SELECT count(*) FROM games"), "15");
}

#[test]
fn a_dumps_directory_or_a_dump_given_as_a_symlink_is_followed() {
    use std::os::unix::fs::symlink;
    let root = scratch_dir("pgnload-nightly-symlinks-");
    let hooks = Hooks::new(root.path());
    let store = dumps_dir(root.path());
    // The directory given as a link, without a trailing slash.
    let dumps = root.path().join("linked-dumps");
    symlink(&store, &dumps).expect("symlink");
    let elsewhere = root.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).expect("mkdir");
    let games = lichess_games(40);
    std::fs::write(store.join("a.pgn"), games[..10].concat()).expect("write");
    let target = elsewhere.join("b.pgn");
    std::fs::write(&target, games[10..20].concat()).expect("write");
    let link = store.join("b.pgn");
    symlink(&target, &link).expect("symlink");
    let db = fresh_db("nightly_symlinks");
    night(&hooks, &dumps, &db, 0, &["2 new or changed of 2 file"]);
    assert_eq!(db.psql("SELECT count(*) FROM games"), "20");
    // Imported as the file the link leads to.
    assert_eq!(
        db.psql(&format!(
            "SELECT count(*) FROM import_files WHERE path = '{}'",
            target.display()
        )),
        "1"
    );
    night(&hooks, &dumps, &db, 0, &["nothing new among 2 PGN file"]);
    // The file the link leads to grows: passed again.
    append(&target, games[20..25].concat().as_bytes());
    night(&hooks, &dumps, &db, 0, &["1 new or changed of 2 file"]);
    assert_eq!(db.psql("SELECT count(*) FROM games"), "25");
    // The link leads to another file: passed.
    let other = elsewhere.join("c.pgn");
    std::fs::write(&other, games[25..30].concat()).expect("write");
    std::fs::remove_file(&link).expect("rm");
    symlink(&other, &link).expect("symlink");
    night(&hooks, &dumps, &db, 0, &["1 new or changed of 2 file"]);
    assert_eq!(db.psql("SELECT count(*) FROM games"), "30");
    // A link to nothing is named and fails the night, once the others are
    // imported.
    symlink(root.path().join("nowhere.pgn"), store.join("gone.pgn")).expect("symlink");
    std::fs::write(store.join("d.pgn"), games[30..].concat()).expect("write");
    let said = format!(
        "not imported {}/gone.pgn: it is a symbolic link to nothing",
        dumps.display()
    );
    night(
        &hooks,
        &dumps,
        &db,
        2,
        &[&said, "1 new or changed of 3 file"],
    );
    assert_eq!(db.psql("SELECT count(*) FROM games"), "40");
    night(
        &hooks,
        &dumps,
        &db,
        2,
        &[&said, "nothing new among 3 PGN file"],
    );
}

#[test]
fn a_dumps_directory_that_is_missing_or_cannot_be_read_fails_the_night() {
    let root = scratch_dir("pgnload-nightly-unreadable-");
    let (hooks, dumps) = (Hooks::new(root.path()), dumps_dir(root.path()));
    std::fs::write(dumps.join("a.pgn"), lichess_games(5).concat()).expect("write");
    let missing = root.path().join("missing");
    let said = format!("the directory {} does not exist", missing.display());
    assert_said(&run(hooks.nightly(&missing, &[])), 2, &[&said]);
    // Not readable, or readable but not searchable (its files' types cannot
    // be known), by a user other than root, who may read everything.
    for mode in [0o000, 0o444] {
        std::fs::set_permissions(&dumps, std::os::unix::fs::PermissionsExt::from_mode(mode))
            .expect("chmod");
        let bash = if nix::unistd::geteuid().is_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "-m", "--", "bash"]);
            c
        } else {
            Command::new("bash")
        };
        let said = format!(
            "cannot list the directory {} (above); nothing imported",
            dumps.display()
        );
        assert_said(&run(hooks.nightly_by(bash, &dumps, &[])), 2, &[&said]);
        assert_eq!(hooks.log("calls"), "", "mode {mode:o}: pgnload ran");
    }
    std::fs::set_permissions(&dumps, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
}

#[test]
fn a_dump_deleted_during_the_settle_wait_is_said_and_the_others_imported() {
    let root = scratch_dir("pgnload-nightly-vanished-");
    let (hooks, dumps) = (Hooks::new(root.path()), dumps_dir(root.path()));
    let games = lichess_games(15);
    for (i, name) in ["a.pgn", "b.pgn", "c.pgn"].iter().enumerate() {
        std::fs::write(dumps.join(name), games[i * 5..][..5].concat()).expect("write");
    }
    let vanishing = dumps.join("b.pgn");
    hooks.in_settle(&format!(
        "rm '{}'; echo settle-hook-ran",
        vanishing.display()
    ));
    let db = fresh_db("nightly_vanished");
    let mut c = hooks.nightly(&dumps, &[]);
    // Sixty seconds (not octal).
    c.env("DATABASE_URL", &db.url)
        .env("PGNLOAD_SETTLE_SECONDS", "0060");
    let out = run(c);
    let vanished = format!(
        "{} vanished during the settle wait; not imported",
        vanishing.display()
    );
    let text = assert_said(&out, 0, &[&vanished, "2 new or changed of 3 file"]);
    assert_eq!(db.psql("SELECT count(*) FROM games"), "10");
    // The wait is said, once, with its length, before it begins.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let said = "waiting 60 s (PGNLOAD_SETTLE_SECONDS)";
    assert_eq!(stdout.matches(said).count(), 1, "{text}");
    assert!(stdout.find(said) < stdout.find("settle-hook-ran"), "{text}");
    assert_eq!(hooks.log("slept"), "60\n");
}

#[test]
fn a_settle_interval_beyond_a_day_or_not_a_number_is_refused_before_anything() {
    let root = scratch_dir("pgnload-nightly-settle-bounds-");
    let (hooks, dumps) = (Hooks::new(root.path()), dumps_dir(root.path()));
    std::fs::write(dumps.join("a.pgn"), lichess_games(5).concat()).expect("write");
    let db = fresh_db("nightly_settle_bounds");
    let nightly = |settle: &str| {
        let mut c = hooks.nightly(&dumps, &[]);
        c.env("DATABASE_URL", &db.url)
            .env("PGNLOAD_SETTLE_SECONDS", settle);
        run(c)
    };
    // Too large for the shell's arithmetic, a day and a second, negative,
    // not whole, not decimal, not only digits.
    for settle in ["99999999999999999999", "86401", "-1", "1.5", "0x10", " 60"] {
        let said = format!(
            "PGNLOAD_SETTLE_SECONDS must be a whole number of seconds from 0 to 86400, \
             not '{settle}'"
        );
        assert_said(&nightly(settle), 2, &[&said]);
        assert_eq!(hooks.log("calls"), "", "{settle}: pgnload ran");
        assert_eq!(hooks.log("slept"), "", "{settle}: the script waited");
    }
    // A day is the longest wait.
    assert_said(&nightly("86400"), 0, &["1 new or changed of 1 file"]);
    assert_eq!(hooks.log("slept"), "86400\n");
    assert_eq!(db.psql("SELECT count(*) FROM games"), "5");
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
