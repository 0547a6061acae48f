//! `pgnload import` against a real PostgreSQL (the shared embedded test
//! cluster, one fresh database per test).

use std::{
    path::{Path, PathBuf},
    process::Output,
};

use crate::common::{TestDb, data, data_pgns, fresh_db, migrated_db, pgnload, run};

pub fn import(db: &TestDb, args: &[&str], files: &[PathBuf]) -> Output {
    let mut cmd = db.pgnload();
    cmd.arg("import").args(args).args(files);
    run(cmd)
}

pub fn assert_ok(out: &Output, codes: &[i32]) {
    let code = out.status.code().unwrap_or(-1);
    assert!(
        codes.contains(&code),
        "exit {code}\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `pgnload positions` lines rebuilt from the database for one input file.
fn positions_from_db(db: &TestDb, file: &Path) -> String {
    let path = std::fs::canonicalize(file).expect("canonical path");
    db.psql(&format!(
        "SELECT concat_ws(E'\\t', key, ply, normalized_fen, fen_hash) FROM (
             SELECT g.game_number, CASE WHEN g.source = 'lichess' THEN g.external_id
                                       ELSE g.game_number::text END AS key,
                    0 AS ply, p.normalized_fen, p.fen_hash
             FROM games g JOIN import_files f ON f.id = g.import_file_id
             JOIN positions p ON p.id = g.initial_position_id
             WHERE f.path = '{0}'
             UNION ALL
             SELECT g.game_number, CASE WHEN g.source = 'lichess' THEN g.external_id
                                       ELSE g.game_number::text END,
                    m.ply, p.normalized_fen, p.fen_hash
             FROM games g JOIN import_files f ON f.id = g.import_file_id
             JOIN moves m ON m.game_id = g.id
             JOIN positions p ON p.id = m.position_after_id
             WHERE f.path = '{0}'
         ) x ORDER BY game_number, ply",
        path.display()
    ))
}

/// Everything an import writes, without ids and timestamps, ordered.
pub fn content_dump(db: &TestDb) -> String {
    db.psql(
        "SELECT 'positions', count(*), md5(string_agg(normalized_fen || fen_hash || piece_placement
                 || active_color || castling || en_passant, '|' ORDER BY normalized_fen)) FROM positions
         UNION ALL
         SELECT 'games', count(*), md5(string_agg(concat_ws(',', g.source, g.external_id, w.username,
                 b.username, e.name, g.white_elo, g.black_elo, g.result, g.variant, g.termination,
                 g.started_at, ip.normalized_fen, fp.normalized_fen, g.ply_count,
                 encode(g.moves, 'hex'), g.tags::text), '|' ORDER BY g.source, g.external_id))
         FROM games g JOIN positions ip ON ip.id = g.initial_position_id
         JOIN positions fp ON fp.id = g.final_position_id
         LEFT JOIN players w ON w.id = g.white_player_id
         LEFT JOIN players b ON b.id = g.black_player_id
         LEFT JOIN events e ON e.id = g.event_id
         UNION ALL
         SELECT 'moves', count(*), md5(string_agg(concat_ws(',', g.source, g.external_id, m.ply,
                 pb.normalized_fen, pa.normalized_fen, m.uci, m.san, m.clock_ms, m.eval_cp,
                 m.eval_mate, m.nag), '|' ORDER BY g.source, g.external_id, m.ply))
         FROM moves m JOIN games g ON g.id = m.game_id
         JOIN positions pb ON pb.id = m.position_id JOIN positions pa ON pa.id = m.position_after_id
         UNION ALL
         SELECT 'players', count(*), md5(string_agg(source || username_key || coalesce(title, '')
                 || is_bot, '|' ORDER BY source, username_key)) FROM players
         UNION ALL
         SELECT 'rejects', count(*), md5(string_agg(f.path || r.game_number || r.reason
                 || encode(r.raw, 'hex'), '|' ORDER BY f.path, r.game_number))
         FROM import_rejects r JOIN import_files f ON f.id = r.file_id
         ORDER BY 1",
    )
}

#[test]
fn imported_database_holds_exactly_the_positions_of_every_game() {
    let db = fresh_db("exact");
    let files = data_pgns();
    assert_ok(&import(&db, &["-q"], &files), &[0]);
    for file in &files {
        let expected = run({
            let mut c = pgnload();
            c.arg("positions").arg(file);
            c
        });
        let expected = String::from_utf8_lossy(&expected.stdout);
        let actual = positions_from_db(&db, file);
        assert_eq!(
            actual.lines().count(),
            expected.lines().count(),
            "{}",
            file.display()
        );
        crate::common::assert_same_lines(file, expected.trim_end().as_bytes(), actual.as_bytes());
    }
    let unique = db.psql(
        "SELECT count(*) = count(DISTINCT normalized_fen) AND count(*) = count(DISTINCT id) FROM positions",
    );
    assert_eq!(unique, "t");
}

#[test]
fn reimporting_changes_no_row_and_is_a_fast_no_op() {
    let db = fresh_db("reimport");
    let files = data_pgns();
    assert_ok(&import(&db, &["-q"], &files), &[0]);
    let before = content_dump(&db);
    let again = import(&db, &[], &files);
    assert_ok(&again, &[0]);
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(stderr.contains("already imported"), "{stderr}");
    assert!(stderr.contains("0 read = 0 imported"), "{stderr}");
    assert_eq!(content_dump(&db), before);
    // Forced from the start: every game is recognized as present.
    let restart = import(&db, &["--restart"], &[data("lichess-2025-05-sample.pgn")]);
    assert_ok(&restart, &[0]);
    let stderr = String::from_utf8_lossy(&restart.stderr);
    assert!(
        stderr.contains("438 read = 0 imported + 438 already present + 0 rejected"),
        "{stderr}"
    );
    assert_eq!(content_dump(&db), before);
}

/// Splits the Lichess sample into two overlapping files (games 1–300 and 200–438).
pub fn overlapping_halves(dir: &Path) -> (PathBuf, PathBuf) {
    let text = std::fs::read_to_string(data("lichess-2025-05-sample.pgn")).expect("sample");
    let games: Vec<&str> = text.split("\n\n[Event ").collect();
    let join = |range: std::ops::Range<usize>| {
        range
            .map(|i| {
                if i == 0 {
                    games[0].to_owned()
                } else {
                    format!("[Event {}", games[i])
                }
            })
            .collect::<Vec<_>>()
            .join("\n\n")
            + "\n"
    };
    assert_eq!(games.len(), 438);
    let a = dir.join("first.pgn");
    let b = dir.join("second.pgn");
    std::fs::write(&a, join(0..300)).expect("write");
    std::fs::write(&b, join(199..438)).expect("write");
    (a, b)
}

#[test]
fn concurrent_incremental_imports_of_overlapping_files_leave_no_duplicates() {
    concurrent_imports_of_overlapping_files("incremental");
}

/// In auto mode on an empty database one of the two takes a bulk load and
/// the other waits for it, then adds what is left incrementally.
#[test]
fn concurrent_auto_imports_of_overlapping_files_leave_no_duplicates() {
    concurrent_imports_of_overlapping_files("auto");
}

fn concurrent_imports_of_overlapping_files(mode: &str) {
    let db = migrated_db("concurrent");
    let dir = tempfile::tempdir().expect("temp dir");
    let (a, b) = overlapping_halves(dir.path());
    let spawn = |files: Vec<PathBuf>| {
        let mut cmd = db.pgnload();
        cmd.args(["-q", "import", "--batch-games", "25", "--mode", mode])
            .args(files);
        cmd.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn pgnload")
    };
    let first = spawn(vec![a.clone(), b.clone()]);
    let second = spawn(vec![b.clone(), a.clone()]);
    for child in [first, second] {
        assert_ok(&child.wait_with_output().expect("wait"), &[0]);
    }
    assert_eq!(
        db.psql("SELECT count(*), count(DISTINCT external_id) FROM games"),
        "438|438"
    );
    let clean = fresh_db("concurrent_ref");
    assert_ok(
        &import(&clean, &["-q"], &[data("lichess-2025-05-sample.pgn")]),
        &[0],
    );
    let positions = "SELECT count(*), count(DISTINCT normalized_fen) FROM positions";
    assert_eq!(db.psql(positions), clean.psql(positions));
    assert_eq!(
        db.psql("SELECT count(*) FROM moves"),
        clean.psql("SELECT count(*) FROM moves")
    );
}

/// The start position's row with id 424242, as a writer other than
/// pgnload would insert it: the statement.
pub fn start_position_row() -> String {
    let start = "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq -";
    let digest = pgnload::chess::hash::fen_digest(start);
    format!(
        "INSERT INTO positions (id, normalized_fen, fen_hash, piece_placement, active_color, castling, en_passant)
         VALUES (424242, '{start}', {digest}, 'rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR', 'w', 'KQkq', '-')"
    )
}

/// The start position kept its id 424242 ([`start_position_row`]), and
/// every game (all from the start position) and first move uses it.
pub fn assert_start_position_reused(db: &TestDb) {
    assert_eq!(
        db.psql(
            "SELECT id FROM positions
             WHERE normalized_fen = 'rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq -'"
        ),
        "424242"
    );
    assert_eq!(
        db.psql(
            "SELECT (SELECT count(*) FROM games WHERE initial_position_id <> 424242)
                  + (SELECT count(*) FROM moves WHERE ply = 1 AND position_id <> 424242)"
        ),
        "0"
    );
}

#[test]
fn existing_positions_keep_their_ids_and_are_reused() {
    let db = migrated_db("preexisting");
    db.psql(&start_position_row());
    assert_ok(
        &import(&db, &["-q"], &[data("lichess-2025-05-sample.pgn")]),
        &[0],
    );
    assert_start_position_reused(&db);
}

#[test]
fn game_moves_decode_to_the_uci_of_the_moves_rows() {
    let db = fresh_db("decode");
    assert_ok(&import(&db, &["-q"], &data_pgns()), &[0]);
    let rows = db.psql(
        "SELECT g.variant, encode(g.moves, 'hex'), coalesce(string_agg(m.uci, ' ' ORDER BY m.ply), '')
         FROM games g LEFT JOIN moves m ON m.game_id = g.id GROUP BY g.id ORDER BY g.id",
    );
    let mut games = 0;
    for row in rows.lines() {
        let mut fields = row.split('|');
        let (variant, hex, ucis) = (
            fields.next().expect("variant"),
            fields.next().expect("moves"),
            fields.next().expect("uci"),
        );
        let bytes: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
            .collect();
        let decoded: Vec<String> = bytes
            .chunks(2)
            .map(|pair| {
                pgnload::chess::encoding::decode_move_uci(
                    u16::from_be_bytes([pair[0], pair[1]]),
                    variant == "chess960",
                )
            })
            .collect();
        assert_eq!(decoded.join(" "), ucis, "game {games} ({variant})");
        games += 1;
    }
    assert_eq!(games, 473);
}

#[test]
fn lichess_metadata_lands_in_typed_columns() {
    let db = fresh_db("metadata");
    assert_ok(
        &import(&db, &["-q"], &[data("lichess-2025-05-sample.pgn")]),
        &[0],
    );
    let row = db.psql(
        "SELECT w.username, b.username, white_elo, black_elo, white_rating_diff, black_rating_diff,
                time_control, time_initial_s, time_increment_s, result, eco, opening, variant,
                termination, started_at AT TIME ZONE 'UTC', ply_count, e.name, g.site
         FROM games g JOIN players w ON w.id = white_player_id JOIN players b ON b.id = black_player_id
         JOIN events e ON e.id = g.event_id
         WHERE g.source = 'lichess' AND g.external_id = 'ENPo6ReH'",
    );
    assert_eq!(
        row,
        "alanbrito4|Meridyan|1028|1132|-5|5|300+3|300|3|-1|C46|Three Knights Opening|standard|normal|2025-05-01 00:00:06|42|Rated Blitz game|https://lichess.org/ENPo6ReH"
    );
    let clocks = db.psql(
        "SELECT string_agg(coalesce(clock_ms::text, '-'), ',' ORDER BY ply) FROM moves m
         JOIN games g ON g.id = m.game_id WHERE g.external_id = 'ENPo6ReH' AND ply <= 4",
    );
    assert_eq!(clocks, "300000,300000,301000,302000");
    assert_eq!(
        db.psql("SELECT count(*) FROM players WHERE username_key <> lower(username)"),
        "0"
    );
}

#[test]
fn the_password_in_a_connection_url_is_never_printed() {
    let secret = "Sup3rS3cretPw";
    // A server that is not there: the error names the target without the
    // password, in the retry messages too (one second of them, not the
    // default two minutes a cron job would wait).
    let dir = crate::common::scratch_dir("pgnload-secret-");
    let config = dir.path().join("short-retry.toml");
    std::fs::write(&config, "[import]\nretry_seconds = 1\n").expect("write config");
    let out = run({
        let mut c = pgnload();
        c.env(
            "DATABASE_URL",
            format!("postgres://someone:{secret}@127.0.0.1:1/nowhere?connect_timeout=2"),
        )
        .arg("--config")
        .arg(&config)
        .args(["import", "-"]);
        c
    });
    assert_eq!(out.status.code(), Some(2));
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!all.contains(secret), "{all}");
    assert!(all.contains("***"), "{all}");
    // A working server (trust auth ignores the password): progress and summary stay clean.
    let db = fresh_db("secret");
    let url = db.url.replacen(
        "postgresql:///",
        &format!("postgresql://pgnload:{secret}@/"),
        1,
    );
    let out = run({
        let mut c = pgnload();
        c.env("DATABASE_URL", &url)
            .args(["import"])
            .arg(data("molinari-bordais-1979.pgn"));
        c
    });
    assert_ok(&out, &[0]);
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!all.contains(secret), "{all}");
    assert!(all.contains("import summary"), "{all}");
}

/// Three games with one Event, Site, Date, Round, players and moves, told
/// apart only by typed tags (Result and `WhiteElo`, Variant): three games.
const TYPED_TWINS: &str = "[Event \"Twins\"]\n[Site \"Club\"]\n[Date \"2024.03.01\"]\n[Round \"1\"]\n[White \"A\"]\n[Black \"B\"]\n[Result \"1-0\"]\n[WhiteElo \"1500\"]\n\n1. e4 e5 2. Qh5 Nc6 1-0\n\n\
[Event \"Twins\"]\n[Site \"Club\"]\n[Date \"2024.03.01\"]\n[Round \"1\"]\n[White \"A\"]\n[Black \"B\"]\n[Result \"0-1\"]\n[WhiteElo \"2500\"]\n\n1. e4 e5 2. Qh5 Nc6 0-1\n\n\
[Event \"Twins\"]\n[Site \"Club\"]\n[Date \"2024.03.01\"]\n[Round \"1\"]\n[White \"A\"]\n[Black \"B\"]\n[Result \"1-0\"]\n[WhiteElo \"1500\"]\n[Variant \"King of the Hill\"]\n\n1. e4 e5 2. Qh5 Nc6 1-0\n\n";

/// The import summary's `N read = ...` line.
fn read_line(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    stderr
        .lines()
        .find_map(|l| l.trim().strip_prefix("games:"))
        .unwrap_or_else(|| panic!("no summary in {stderr}"))
        .trim()
        .to_owned()
}

#[test]
fn games_differing_only_in_typed_tags_are_different_games() {
    let dir = crate::common::scratch_dir("pgnload-twins-");
    let file = dir.path().join("twins.pgn");
    std::fs::write(&file, TYPED_TWINS).expect("write");
    let db = fresh_db("twins");
    let first = import(&db, &[], std::slice::from_ref(&file));
    assert_ok(&first, &[0]);
    assert!(
        read_line(&first).starts_with("3 read = 3 imported + 0 already present"),
        "{}",
        read_line(&first)
    );
    assert_eq!(
        db.psql(
            "SELECT string_agg(result || ' ' || white_elo || ' ' || variant, ', ' ORDER BY id) FROM games"
        ),
        "1 1500 standard, -1 2500 standard, 1 1500 king_of_the_hill"
    );
    let again = import(&db, &["--restart"], std::slice::from_ref(&file));
    assert_ok(&again, &[0]);
    assert!(
        read_line(&again).starts_with("3 read = 0 imported + 3 already present"),
        "{}",
        read_line(&again)
    );
    assert_eq!(db.psql("SELECT count(*) FROM games"), "3");
}

/// A database written by a version before the v2 digest holds its games
/// under the legacy digest: re-importing its file changes nothing, and a
/// game that digest had wrongly merged into a stored one is imported now.
#[test]
fn games_stored_under_the_legacy_digest_are_recognized() {
    use pgnload::{
        chess::reader::GameSplitter,
        ingest::pipeline::{Outcome, PipelineConfig, process_chunk},
    };
    let limits = PipelineConfig::default().limits;
    let mut splitter = GameSplitter::new(
        TYPED_TWINS.as_bytes(),
        std::sync::Arc::from("t.pgn"),
        0,
        0,
        limits,
    );
    let mut legacy = Vec::new();
    while let Some(chunk) = splitter.next_chunk().expect("in-memory input") {
        match process_chunk(chunk, limits) {
            Outcome::Game(g) => {
                assert!(g.external_id().starts_with("v2-"));
                legacy.push(g.legacy_external_id());
            }
            Outcome::Rejected(r) => panic!("{}", r.rejection.reason),
        }
    }
    assert!(legacy.iter().all(|id| *id == legacy[0]), "{legacy:?}");

    let dir = crate::common::scratch_dir("pgnload-legacy-");
    let first = dir.path().join("first.pgn");
    let whole = dir.path().join("twins.pgn");
    let first_game = TYPED_TWINS.split("\n\n[Event").next().expect("a game");
    std::fs::write(&first, format!("{first_game}\n\n")).expect("write");
    std::fs::write(&whole, TYPED_TWINS).expect("write");
    let db = fresh_db("legacy");
    assert_ok(&import(&db, &["-q"], std::slice::from_ref(&first)), &[0]);
    // What the earlier version stored: the legacy digest as the key.
    db.psql(&format!("UPDATE games SET external_id = '{}'", legacy[0]));
    let again = import(&db, &["--restart"], std::slice::from_ref(&first));
    assert_ok(&again, &[0]);
    assert!(
        read_line(&again).starts_with("1 read = 0 imported + 1 already present"),
        "{}",
        read_line(&again)
    );
    let twins = import(&db, &[], std::slice::from_ref(&whole));
    assert_ok(&twins, &[0]);
    assert!(
        read_line(&twins).starts_with("3 read = 2 imported + 1 already present"),
        "{}",
        read_line(&twins)
    );
    let rerun = import(&db, &["--restart"], std::slice::from_ref(&whole));
    assert_ok(&rerun, &[0]);
    assert!(
        read_line(&rerun).starts_with("3 read = 0 imported + 3 already present"),
        "{}",
        read_line(&rerun)
    );
    assert_eq!(
        db.psql(
            "SELECT string_agg(result || ' ' || white_elo || ' ' || variant || ' ' || (external_id LIKE 'v2-%'), ', '
                 ORDER BY external_id LIKE 'v2-%', variant::text, result) FROM games"
        ),
        "1 1500 standard false, 1 1500 king_of_the_hill true, -1 2500 standard true"
    );
    // `game put` finds it too: the game is re-keyed, not stored twice.
    let put = db.quiet(&["game", "put", &first.display().to_string()]);
    let stdout = String::from_utf8_lossy(&put.stdout);
    assert_eq!(
        put.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&put.stderr)
    );
    assert!(
        stdout.starts_with(&format!(
            "replaced game {}",
            db.psql("SELECT min(id) FROM games")
        )),
        "{stdout}"
    );
    assert_eq!(
        db.psql("SELECT count(*), count(*) FILTER (WHERE external_id LIKE 'v2-%') FROM games"),
        "3|3"
    );
}
