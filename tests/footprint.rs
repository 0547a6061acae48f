//! The storage footprint options (`--positions-max-ply N`, `--games-only`):
//! what a capped import stores against an independent python-chess
//! recount, that nothing of the game itself is lost (`games.moves`,
//! export, `verify --games`), and the backfill (`import --restart`
//! without the cap) giving the rows of a full import, across SIGKILLs too,
//! with the explorer counters equal to a recount throughout.

use std::{
    path::PathBuf,
    process::{Output, Stdio},
    thread,
    time::{Duration, Instant},
};

use nix::{
    sys::signal::{Signal, kill},
    unistd::Pid,
};

use crate::{
    common::{Lcg, TestDb, data, enable_explorer, fresh_db, python_script, run, scratch_dir},
    import::content_dump,
    resume::corpus_with_copies,
};

/// Shipped files that import without a reject and hold no game twice:
/// several variants, start positions, clocks and evaluations.
fn files() -> Vec<PathBuf> {
    [
        "lichess-2025-05-sample.pgn",
        "cutechess-fischerrandom.pgn",
        "saturs-jannlee-zh-lichess.pgn",
        "antichess-programfox.pgn",
        "kasparov-deep-blue-1997.pgn",
    ]
    .into_iter()
    .map(data)
    .collect()
}

/// The cap the tests use: below most games' length, above some.
const CAP: u32 = 12;

/// `(positions, moves, games)` python-chess counts under each of `caps`
/// (`None`: no cap).
fn python_counts(caps: &[Option<u32>]) -> Vec<(u64, u64, u64)> {
    let labels: Vec<String> = caps
        .iter()
        .map(|c| c.map_or_else(|| "all".to_owned(), |c| c.to_string()))
        .collect();
    let mut cmd = python_script("py_footprint.py");
    cmd.arg(labels.join(",")).args(files());
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
            let n: Vec<u64> = line
                .split('\t')
                .skip(1)
                .map(|n| n.parse().expect("count"))
                .collect();
            (n[0], n[1], n[2])
        })
        .collect()
}

fn import(db: &TestDb, args: &[&str]) -> Output {
    let mut cmd = db.pgnload();
    cmd.args(["-q", "import", "--batch-games", "50"])
        .args(args)
        .args(files());
    let out = run(cmd);
    assert_eq!(
        out.status.code(),
        Some(0),
        "import {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `(positions, moves, games)` rows of `db`.
fn counts(db: &TestDb) -> (u64, u64, u64) {
    let line = db.psql(
        "SELECT (SELECT count(*) FROM positions), (SELECT count(*) FROM moves),
                (SELECT count(*) FROM games)",
    );
    let n: Vec<u64> = line.split('|').map(|n| n.parse().expect("n")).collect();
    (n[0], n[1], n[2])
}

/// Runs `verify` with `what` (`--games`, `--explorer`) on `db` and fails
/// unless it is clean.
fn assert_verify_clean(db: &TestDb, what: &str, context: &str) {
    let dir = scratch_dir("footprint-verify");
    let report = dir.path().join("report.tsv");
    let mut cmd = db.pgnload();
    cmd.args(["-q", "verify", what, "--report"]).arg(&report);
    let out = run(cmd);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{context}: verify {what}:\n{}\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        std::fs::read_to_string(&report).unwrap_or_default()
    );
}

/// Every game's `(source, external_id, moves)`, in key order.
fn game_moves(db: &TestDb) -> String {
    db.psql(
        "SELECT string_agg(source || ',' || external_id || ',' || encode(moves, 'hex'), '|'
                ORDER BY source, external_id) FROM games",
    )
}

#[test]
fn a_capped_import_stores_the_first_plies_python_counts_and_loses_no_move() {
    let expected = python_counts(&[None, Some(CAP), Some(0)]);
    let full = fresh_db("footprint_full");
    import(&full, &[]);
    assert_eq!(
        counts(&full),
        expected[0],
        "the recount matches a full import"
    );

    let capped = fresh_db("footprint_capped");
    import(&capped, &["--positions-max-ply", &CAP.to_string()]);
    assert_eq!(
        counts(&capped),
        expected[1],
        "positions, moves, games at cap {CAP}"
    );
    assert!(expected[1].1 < expected[0].1, "the cap must leave rows out");
    // games.moves, ply_count and everything but the rows: as a full import.
    assert_eq!(game_moves(&capped), game_moves(&full));
    assert_eq!(
        capped.psql("SELECT scope FROM import_files ORDER BY id LIMIT 1"),
        format!("positions-max-ply={CAP}")
    );
    // The cap is recorded on the games it cut, and only on those.
    assert_eq!(
        capped.psql(&format!(
            "SELECT count(*) FILTER (WHERE positions_max_ply = {CAP}),
                    count(*) FILTER (WHERE ply_count > {CAP}),
                    count(*) FILTER (WHERE positions_max_ply IS NULL AND ply_count <= {CAP})
                    = count(*) FILTER (WHERE ply_count <= {CAP})
             FROM games"
        )),
        {
            let long = capped.psql(&format!(
                "SELECT count(*) FROM games WHERE ply_count > {CAP}"
            ));
            format!("{long}|{long}|t")
        }
    );
    // The final position of a capped game is the one after its last row.
    assert_eq!(
        capped.psql(
            "SELECT count(*) FROM games g JOIN moves m
                 ON m.game_id = g.id AND m.ply = g.positions_max_ply
             WHERE g.final_position_id <> m.position_after_id"
        ),
        "0"
    );
    assert_verify_clean(&capped, "--games", "capped import");

    // Export writes every move: its import (uncapped) holds the same games.
    let dir = scratch_dir("footprint-export");
    let exported = dir.path().join("capped.pgn");
    let exported = exported.to_str().expect("a UTF-8 scratch path");
    capped.quiet_ok(&["export", "-o", exported]);
    let again = fresh_db("footprint_reexport");
    again.quiet_ok(&["import", exported]);
    assert_eq!(game_moves(&again), game_moves(&full), "every move exported");
    assert_eq!(counts(&again), counts(&full));

    let games_only = fresh_db("footprint_games_only");
    import(&games_only, &["--games-only"]);
    assert_eq!(
        counts(&games_only),
        expected[2],
        "games only: start positions, no moves"
    );
    assert_eq!(counts(&games_only).1, 0);
    assert_eq!(game_moves(&games_only), game_moves(&full));
    assert_verify_clean(&games_only, "--games", "games-only import");
}

#[test]
fn a_backfill_after_games_only_or_a_cap_gives_the_rows_of_a_full_import() {
    let full = fresh_db("footprint_bf_full");
    enable_explorer(full.pgnload());
    import(&full, &[]);
    let cap = CAP.to_string();
    // Both load modes backfill. (Auto would import incrementally: the
    // database, given by URL, holds games.)
    for (label, scope, mode) in [
        ("games_only", vec!["--games-only"], "bulk"),
        (
            "capped",
            vec!["--positions-max-ply", cap.as_str()],
            "incremental",
        ),
    ] {
        let db = fresh_db(&format!("footprint_bf_{label}"));
        enable_explorer(db.pgnload());
        import(&db, &scope);
        assert_verify_clean(&db, "--explorer", &format!("{label} import"));
        assert_ne!(
            content_dump(&db),
            content_dump(&full),
            "{label}: rows left out"
        );
        // Without --restart the other scope is refused; with it, the games
        // present get their missing rows.
        let mut cmd = db.pgnload();
        cmd.args(["-q", "import"]).args(files());
        assert_ne!(
            run(cmd).status.code(),
            Some(0),
            "{label}: scope change refused"
        );
        let out = import(&db, &["--restart", "--mode", mode]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let games = counts(&full).2;
        assert!(
            stderr.contains(&format!(
                "{games} read = 0 imported + {games} already present"
            )),
            "{label}: {stderr}"
        );
        let shown = if mode == "bulk" {
            "mode:      bulk"
        } else {
            "mode:      incremental"
        };
        assert!(stderr.contains(shown), "{label}: {stderr}");
        // The games the cap cut: longer than it (a game of no move is
        // complete even under --games-only).
        let cut = if label == "games_only" { 0 } else { CAP };
        let capped_games = full.psql(&format!(
            "SELECT count(*) FROM games WHERE ply_count > {cut}"
        ));
        assert!(
            stderr.contains(&format!(
                "backfill:  {capped_games} of the present games got their positions"
            )),
            "{label}: {stderr}"
        );
        assert_eq!(
            content_dump(&db),
            content_dump(&full),
            "{label}: backfilled"
        );
        assert_eq!(
            db.psql("SELECT count(*) FROM games WHERE positions_max_ply IS NOT NULL"),
            "0",
            "{label}"
        );
        assert_verify_clean(&db, "--games", &format!("{label} backfilled"));
        assert_verify_clean(&db, "--explorer", &format!("{label} backfilled"));
        // The rows of the positions two games reached, which every mode
        // keeps (a bulk load also keeps the others', sql/0012).
        let shared_rows = "SELECT count(*) FROM explorer_moves WHERE games > 0 AND position_id IN
            (SELECT position_id FROM explorer_moves GROUP BY position_id HAVING sum(games) >= 2)";
        assert_eq!(db.psql(shared_rows), full.psql(shared_rows), "{label}");
        // A rerun under the cap again removes nothing.
        let restart_capped: Vec<&str> = scope.iter().copied().chain(["--restart"]).collect();
        import(&db, &restart_capped);
        assert_eq!(content_dump(&db), content_dump(&full), "{label}: rerun");
    }
}

#[test]
fn a_killed_backfill_rerun_gives_the_rows_of_a_full_import() {
    let dir = scratch_dir("footprint-kill");
    let files = corpus_with_copies(dir.path(), 3);
    let full = fresh_db("footprint_kill_full");
    let import_files = |db: &TestDb, args: &[&str]| {
        let mut cmd = db.pgnload();
        cmd.args(["-q", "import", "--batch-games", "20"])
            .args(args)
            .args(&files)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        cmd
    };
    enable_explorer(full.pgnload());
    let out = run(import_files(&full, &[]));
    assert!(matches!(out.status.code(), Some(0 | 2)), "{out:?}");
    let db = fresh_db("footprint_kill");
    enable_explorer(db.pgnload());
    let out = run(import_files(&db, &["--games-only"]));
    assert!(matches!(out.status.code(), Some(0 | 2)), "{out:?}");
    assert_eq!(db.psql("SELECT count(*) FROM moves"), "0");

    let mut rng = Lcg(20_261_124);
    let mut kills = 0;
    for runs in 1.. {
        assert!(runs < 200, "the backfill never finished");
        let mut child = import_files(&db, &["--restart"])
            .spawn()
            .expect("spawn pgnload");
        let delay = Duration::from_millis(50 + rng.below(400));
        let started = Instant::now();
        let finished = loop {
            if let Some(status) = child.try_wait().expect("wait") {
                break Some(status);
            }
            if kills < 5 && started.elapsed() >= delay {
                break None;
            }
            thread::sleep(Duration::from_millis(5));
        };
        if let Some(status) = finished {
            assert!(matches!(status.code(), Some(0 | 2)), "{status:?}");
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
    assert!(kills >= 5, "only {kills} kills landed");
    assert_eq!(content_dump(&db), content_dump(&full));
    assert_verify_clean(&db, "--games", "killed backfill");
    assert_verify_clean(&db, "--explorer", "killed backfill");
}
