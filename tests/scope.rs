//! Import scope (`--rated-only`, `--min-rating`, `--speeds`, `--variants`,
//! `--since/--until`, `--exclude-bots`): each option's filtered count
//! against an independent python-chess recount, the fourth term of the
//! accounting everywhere counts are kept, the scope as part of an input's
//! identity, and exact counts across SIGKILLs of pgnload.

use std::{
    path::PathBuf,
    process::{Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use nix::{
    sys::signal::{Signal, kill},
    unistd::Pid,
};

use crate::{
    common::{Lcg, TestDb, data, fresh_db, python_script, run},
    import::content_dump,
    resume::corpus_with_copies,
};

/// Shipped files that import without a reject, covering several variants,
/// dates (and none), clocks, titles and events.
fn files() -> Vec<PathBuf> {
    [
        "lichess-2025-05-sample.pgn",
        "cutechess-fischerrandom.pgn",
        "saturs-jannlee-zh-lichess.pgn",
        "antichess-programfox.pgn",
        "kasparov-deep-blue-1997.pgn",
        "molinari-bordais-1979.pgn",
        "nepomniachtchi-liren-game1.pgn",
    ]
    .into_iter()
    .map(data)
    .collect()
}

const MIN_RATING: &str = "1800";
const SPEEDS: &str = "blitz,rapid";
const VARIANTS: &str = "chess960,crazyhouse";
const SINCE: &str = "2016-08-01";
const UNTIL: &str = "2025-05-01";

/// The python-chess recount: games each option alone leaves out, and the total.
fn python_counts() -> Vec<(String, u64)> {
    let mut cmd = python_script("py_scope.py");
    cmd.args([MIN_RATING, SPEEDS, VARIANTS, SINCE, UNTIL])
        .args(files());
    let out = run(cmd);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .lines()
        .map(|line| {
            let (name, count) = line.split_once('\t').expect("name\tcount");
            (name.to_owned(), count.parse().expect("count"))
        })
        .collect()
}

/// The summary's `read = imported + present + rejected + filtered`, checked
/// to add up.
fn summary(stderr: &str) -> [u64; 5] {
    let line = stderr
        .lines()
        .find(|l| l.contains(" read = "))
        .unwrap_or_else(|| panic!("no summary in:\n{stderr}"));
    assert!(line.ends_with(" filtered"), "{line}");
    let numbers: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter(|w| !w.is_empty())
        .map(|w| w.parse().expect("number"))
        .collect();
    let numbers: [u64; 5] = numbers.try_into().expect("five counts");
    assert_eq!(numbers[0], numbers[1..].iter().sum::<u64>(), "{line}");
    numbers
}

fn import(db: &TestDb, scope: &[&str], files: &[PathBuf]) -> std::process::Output {
    let mut cmd = db.pgnload();
    cmd.args(["-q", "import", "--batch-games", "50"])
        .args(scope)
        .args(files);
    run(cmd)
}

/// `(imported, present, rejected, filtered, games_done)` summed over
/// `import_files`.
fn file_counters(db: &TestDb) -> String {
    db.psql(
        "SELECT sum(games_imported), sum(games_present), sum(games_rejected),
                sum(games_filtered), sum(games_done) FROM import_files",
    )
}

#[test]
fn each_scope_option_filters_the_games_python_counts() {
    let expected = python_counts();
    let total = expected
        .iter()
        .find(|(name, _)| name == "total")
        .expect("total")
        .1;
    let files = files();
    // Every game of these files imports: no reject blurs the recount.
    let all = fresh_db("scope_all");
    let out = import(&all, &[], &files);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(summary(&stderr), [total, total, 0, 0, 0], "{stderr}");

    let options: [(&str, Vec<&str>); 6] = [
        ("rated-only", vec!["--rated-only"]),
        ("min-rating", vec!["--min-rating", MIN_RATING]),
        ("speeds", vec!["--speeds", SPEEDS]),
        ("variants", vec!["--variants", VARIANTS]),
        ("dates", vec!["--since", SINCE, "--until", UNTIL]),
        ("exclude-bots", vec!["--exclude-bots"]),
    ];
    for (name, args) in options {
        let filtered = expected
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no python count for {name}"))
            .1;
        assert!(
            filtered > 0 && filtered < total,
            "{name}: the corpus must have games on both sides ({filtered} of {total})"
        );
        let db = fresh_db(&format!("scope_{}", name.replace('-', "_")));
        let out = import(&db, &args, &files);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{name}: {stderr}");
        let kept = total - filtered;
        assert_eq!(
            summary(&stderr),
            [total, kept, 0, 0, filtered],
            "{name}: {stderr}"
        );
        assert_eq!(
            db.psql("SELECT count(*) FROM games"),
            kept.to_string(),
            "{name}"
        );
        assert_eq!(
            file_counters(&db),
            format!("{kept}|0|0|{filtered}|{total}"),
            "{name}"
        );
        assert_eq!(
            db.psql("SELECT games_read, games_imported, games_filtered FROM import_runs"),
            format!("{total}|{kept}|{filtered}"),
            "{name}"
        );
        let mut status = db.pgnload();
        status.args(["status", "--json"]);
        let status = run(status);
        let json: serde_json::Value = serde_json::from_slice(&status.stdout).expect("json");
        let shown: u64 = json
            .as_array()
            .expect("array")
            .iter()
            .map(|f| f["games_filtered"].as_u64().expect("games_filtered"))
            .sum();
        assert_eq!(shown, filtered, "{name}: status --json");
    }
}

#[test]
fn a_rerun_under_another_scope_is_refused_until_restart() {
    let db = fresh_db("scope_identity");
    let sample = [data("lichess-2025-05-sample.pgn")];
    let out = import(&db, &["--exclude-bots"], &sample);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(summary(&stderr), [438, 435, 0, 0, 3], "{stderr}");
    assert_eq!(db.psql("SELECT scope FROM import_files"), "exclude-bots");

    // The same scope: already done.
    let out = import(&db, &["--exclude-bots"], &sample);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("already imported, skipped"), "{stderr}");

    // Every game now: refused, naming both scopes and the way out.
    let out = import(&db, &[], &sample);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("[exclude-bots]")
            && stderr.contains("[every game]")
            && stderr.contains("--restart"),
        "{stderr}"
    );
    assert_eq!(db.psql("SELECT count(*) FROM games"), "435");

    // --restart reads it again: the bots' games come in, the rest are present.
    let out = import(&db, &["--restart"], &sample);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(summary(&stderr), [438, 3, 435, 0, 0], "{stderr}");
    assert_eq!(db.psql("SELECT count(*) FROM games"), "438");
    // The restart starts the record again: it counts what the restarted
    // import read (438 = 3 + 435 + 0), not both imports (issue 26 item 8).
    assert_eq!(
        db.psql(
            "SELECT scope, games_done, games_imported, games_present, games_filtered
             FROM import_files"
        ),
        "|438|3|435|0"
    );
}

fn scoped_import_cmd(db: &TestDb, files: &[PathBuf]) -> Command {
    let mut cmd = db.pgnload();
    cmd.args([
        "-q",
        "import",
        "--batch-games",
        "10",
        "--min-rating",
        MIN_RATING,
    ])
    .args(files)
    .stdout(Stdio::null())
    .stderr(Stdio::piped());
    cmd
}

#[test]
fn killed_scoped_imports_then_rerun_count_every_filtered_game_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let files = corpus_with_copies(dir.path(), 4);
    let clean = fresh_db("scope_crash_ref");
    let out = run(scoped_import_cmd(&clean, &files));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(matches!(out.status.code(), Some(0 | 2)), "{stderr}");
    let counters = file_counters(&clean);
    let filtered: u64 = counters
        .split('|')
        .nth(3)
        .expect("filtered")
        .parse()
        .expect("n");
    assert!(filtered > 0, "{counters}");

    let db = fresh_db("scope_crash");
    let mut rng = Lcg(20_261_123);
    let mut kills = 0;
    for runs in 1.. {
        assert!(runs < 200, "the import never finished");
        let mut child = scoped_import_cmd(&db, &files)
            .spawn()
            .expect("spawn pgnload");
        let delay = Duration::from_millis(20 + rng.below(300));
        let started = Instant::now();
        let finished = loop {
            if let Some(status) = child.try_wait().expect("wait") {
                break Some(status);
            }
            if kills < 6 && started.elapsed() >= delay {
                break None;
            }
            thread::sleep(Duration::from_millis(5));
        };
        if finished.is_some() {
            break;
        }
        kill(
            Pid::from_raw(i32::try_from(child.id()).expect("pid fits")),
            Signal::SIGKILL,
        )
        .expect("SIGKILL");
        let _ = child.wait();
        kills += 1;
    }
    assert!(kills >= 6, "only {kills} kills landed");
    // A finished rerun of every input: counted once each, as in one clean run.
    let out = run(scoped_import_cmd(&db, &files));
    assert!(matches!(out.status.code(), Some(0 | 2)));
    assert_eq!(
        db.psql("SELECT count(*) FROM import_files WHERE state <> 'done'"),
        "0"
    );
    assert_eq!(file_counters(&db), counters);
    assert_eq!(content_dump(&db), content_dump(&clean));
}

/// `--since/--until` keep a game with a partial date when every day its
/// date stands for is in the period (`1997.??.??`: the year, `1997.05.??`:
/// May), and filter a date without a year from any bounded period.
#[test]
fn a_partial_date_is_in_the_period_when_all_its_days_are() {
    let files = [
        data("twic-partial-dates.pgn"),
        data("kasparov-deep-blue-1997.pgn"),
    ];
    // (since, until, games imported): the six Kasparov games and one Bern
    // game are `1997.??.??`, the other Bern game `1997.05.??`.
    for (since, until, imported) in [
        ("1997-01-01", "1997-12-31", 8),
        ("1997-01", "1997-12", 8),
        ("1997-05-01", "1997-05-31", 1),
        ("1997-05-04", "1997-05-06", 0),
        ("1996-12-31", "1997-12-30", 1),
        ("1997-05-02", "1997-12-31", 0),
    ] {
        let db = fresh_db("scope_partial");
        let out = import(&db, &["--since", since, "--until", until], &files);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let [read, done, present, rejected, filtered] =
            summary(&String::from_utf8_lossy(&out.stderr));
        assert_eq!(
            (read, done, present, rejected, filtered),
            (12, imported, 0, 0, 12 - imported),
            "{since}..{until}"
        );
    }
    // One bound is a period too; the game of an unknown year (????.05.11)
    // is in none, and in the import without one.
    let db = fresh_db("scope_partial_open");
    let out = import(&db, &["--since", "1000-01-01"], &files);
    let counts = summary(&String::from_utf8_lossy(&out.stderr));
    assert_eq!(counts, [12, 11, 0, 0, 1]);
    assert_eq!(
        db.psql("SELECT count(*) FROM games WHERE tags->>'Date' = '????.05.11'"),
        "0"
    );
}
