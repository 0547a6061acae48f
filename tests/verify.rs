//! `pgnload verify` against a real PostgreSQL (the shared embedded test
//! cluster, one fresh database per test). The rows are written here from
//! the library's own replay (not by `pgnload import`), so every test knows
//! exactly which rows it corrupted; one test also verifies a database that
//! `pgnload import` filled.

use std::{
    collections::{BTreeMap, HashMap},
    fmt::Write as _,
    fs::{File, OpenOptions},
    io::{BufRead, BufReader, Read, Write as _},
    path::{Path, PathBuf},
    process::{Output, Stdio},
    sync::Arc,
    time::Duration,
};

use nix::{
    sys::{
        signal::{Signal, kill},
        stat::Mode,
    },
    unistd::{Pid, mkfifo},
};

use pgnload::{
    chess::{
        fen::split_normalized,
        hash::{fen_digest, fen_digest_unsigned, to_signed},
        reader::GameSplitter,
        replay::GameRecord,
    },
    ingest::pipeline::{Outcome, PipelineConfig, process_chunk},
};

use crate::common::{TestDb, data, fresh_db, migrated_db, python_script, run};

/// Every accepted game of `file`, replayed by the library.
fn replayed(file: &Path) -> Vec<GameRecord> {
    let limits = PipelineConfig::default().limits;
    let bytes = std::fs::read(file).expect("test PGN");
    let mut splitter = GameSplitter::new(&bytes[..], Arc::from("t"), 0, 0, limits);
    let mut games = Vec::new();
    while let Some(chunk) = splitter.next_chunk().expect("in-memory read") {
        if let Outcome::Game(game) = process_chunk(chunk, limits) {
            games.push(*game);
        }
    }
    assert!(!games.is_empty(), "{} has no games", file.display());
    games
}

/// Loads `rows` (TSV lines) into `table (columns)` with psql's `\copy`.
fn copy_in(db: &TestDb, dir: &Path, table: &str, columns: &str, rows: &str) {
    let path = dir.join(format!("{table}.tsv"));
    std::fs::write(&path, rows).expect("write copy file");
    db.psql(&format!(
        "\\copy {table} ({columns}) FROM '{}'",
        path.display()
    ));
}

/// Writes the distinct positions of `games` into `positions` (ids from 1, in
/// order of appearance, with correct digests and split columns) and returns
/// FEN → id.
fn load_positions(db: &TestDb, dir: &Path, games: &[GameRecord]) -> HashMap<String, i64> {
    let mut ids: HashMap<String, i64> = HashMap::new();
    let mut rows = String::new();
    for game in games {
        for (fen, digest) in game.positions.iter() {
            if ids.contains_key(fen) {
                continue;
            }
            let id = i64::try_from(ids.len()).expect("a position count") + 1;
            ids.insert(fen.to_owned(), id);
            let p = split_normalized(fen).expect("replay writes normalized FENs");
            writeln!(
                rows,
                "{id}\t{fen}\t{digest}\t{}\t{}\t{}\t{}",
                p.piece_placement, p.active_color, p.castling, p.en_passant
            )
            .expect("string write");
        }
    }
    copy_in(
        db,
        dir,
        "positions",
        "id, normalized_fen, fen_hash, piece_placement, active_color, castling, en_passant",
        &rows,
    );
    ids
}

/// Writes `games` (ids from 1) and their `moves` rows, referencing the
/// positions loaded by [`load_positions`].
fn load_games(db: &TestDb, dir: &Path, games: &[GameRecord], ids: &HashMap<String, i64>) {
    let mut game_rows = String::new();
    let mut move_rows = String::new();
    for (index, game) in games.iter().enumerate() {
        let game_id = index + 1;
        let position = |ply: usize| ids[game.positions.fen(ply)];
        let hex: String = game
            .encoded_moves()
            .iter()
            .fold(String::new(), |mut hex, b| {
                let _ = write!(hex, "{b:02x}");
                hex
            });
        writeln!(
            game_rows,
            "{game_id}\ttest\tg{game_id}\t{}\t{}\t{}\t{}\t\\\\x{hex}\t{}",
            game.variant.as_db_label(),
            position(0),
            position(game.plies.len()),
            game.plies.len(),
            game.start_fen.as_deref().unwrap_or("\\N"),
        )
        .expect("string write");
        for (i, ply) in game.plies.iter().enumerate() {
            writeln!(
                move_rows,
                "{game_id}\t{}\t{}\t{}\t{}\t{}",
                i + 1,
                position(i),
                position(i + 1),
                ply.uci,
                ply.san
            )
            .expect("string write");
        }
    }
    copy_in(
        db,
        dir,
        "games",
        "id, source, external_id, variant, initial_position_id, final_position_id, ply_count, moves, start_fen",
        &game_rows,
    );
    copy_in(
        db,
        dir,
        "moves",
        "game_id, ply, position_id, position_after_id, uci, san",
        &move_rows,
    );
}

/// One report line: `id, normalized_fen, stored, expected, kind`.
#[derive(Debug, Clone)]
struct ReportLine {
    id: i64,
    fen: String,
    kind: String,
}

/// Runs `pgnload verify ARGS --report DIR/report.tsv`; returns the output
/// and the parsed report.
fn verify(db: &TestDb, dir: &Path, args: &[&str]) -> (Output, Vec<ReportLine>) {
    let report = dir.join("report.tsv");
    let _ = std::fs::remove_file(&report);
    let out = run({
        let mut c = db.pgnload();
        c.arg("verify").args(args).arg("--report").arg(&report);
        c
    });
    let text = std::fs::read_to_string(&report).unwrap_or_else(|e| {
        panic!(
            "no report ({e}); stdout: {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let mut lines = text.lines();
    let header = lines.next().expect("report has a header");
    assert!(
        header.ends_with("\tnormalized_fen\tstored\texpected\tkind"),
        "{header}"
    );
    let parsed = lines
        .map(|line| {
            let f: Vec<&str> = line.split('\t').collect();
            assert_eq!(f.len(), 5, "report line {line:?}");
            ReportLine {
                id: f[0].parse().expect("numeric id"),
                fen: f[1].to_owned(),
                kind: f[4].to_owned(),
            }
        })
        .collect();
    (out, parsed)
}

fn assert_exit(out: &Output, code: i32) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "stdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Report lines as id → kinds, to check "each row exactly once".
fn by_id(lines: &[ReportLine]) -> BTreeMap<i64, Vec<String>> {
    let mut map: BTreeMap<i64, Vec<String>> = BTreeMap::new();
    for line in lines {
        map.entry(line.id).or_default().push(line.kind.clone());
    }
    map
}

fn scratch() -> tempfile::TempDir {
    crate::common::scratch_dir("pgnload-verify-")
}

fn corpus(names: &[&str]) -> Vec<GameRecord> {
    names.iter().flat_map(|n| replayed(&data(n))).collect()
}

const SAMPLE: &str = "lichess-2025-05-sample.pgn";
/// Standard, Chess960, Crazyhouse, Antichess, null moves and UCI movetext.
const VARIANTS: [&str; 6] = [
    SAMPLE,
    "cutechess-fischerrandom.pgn",
    "knightvuillaume-jannlee-zh-lichess.pgn",
    "antichess-programfox.pgn",
    "uci-moves.pgn",
    "kasparov-deep-blue-1997.pgn",
];

#[test]
fn correct_positions_verify_clean_also_canonically() {
    let dir = scratch();
    let db = migrated_db("verify_clean");
    let ids = load_positions(&db, dir.path(), &corpus(&VARIANTS));
    assert!(ids.len() > 20_000, "only {} positions", ids.len());

    let (out, report) = verify(&db, dir.path(), &[]);
    assert_exit(&out, 0);
    assert!(report.is_empty(), "{report:?}");
    let text = stdout(&out);
    assert!(
        text.contains(&format!("verified {} positions", ids.len())),
        "{text}"
    );
    assert!(text.contains("no mismatches"), "{text}");

    // Crazyhouse pockets, Chess960 castling letters and antichess positions
    // without kings are all what python-chess writes.
    let (out, report) = verify(&db, dir.path(), &["--canonical", "--quiet"]);
    assert_exit(&out, 0);
    assert!(report.is_empty(), "{report:?}");
}

/// The first position id (in id order) whose FEN satisfies `pred`.
fn pick(db: &TestDb, ids: &HashMap<String, i64>, pred: impl Fn(&str) -> bool, not: &[i64]) -> i64 {
    let mut candidates: Vec<(i64, &String)> = ids
        .iter()
        .filter(|(fen, id)| pred(fen) && !not.contains(id))
        .map(|(fen, &id)| (id, fen))
        .collect();
    candidates.sort();
    let (id, _) = candidates.first().expect("a position fits");
    // Sanity: it is there.
    assert_eq!(
        db.psql(&format!("SELECT count(*) FROM positions WHERE id = {id}")),
        "1"
    );
    *id
}

/// Long: one scenario, step by step; split, its steps would read out of
/// order.
#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one scenario, step by step; split, its steps would read out of order"
)]
fn seeded_corruption_is_found_once_per_row_with_its_kind() {
    let dir = scratch();
    let db = migrated_db("verify_corrupt");
    let ids = load_positions(&db, dir.path(), &corpus(&[SAMPLE]));
    let fen_of: HashMap<i64, &str> = ids.iter().map(|(f, &i)| (i, f.as_str())).collect();
    let high = |fen: &str| fen_digest_unsigned(fen) >= 1 << 63;

    // A flipped bit in fen_hash.
    let flipped = pick(&db, &ids, |_| true, &[]);
    db.psql(&format!(
        "UPDATE positions SET fen_hash = fen_hash # 4096 WHERE id = {flipped}"
    ));
    // A FEN with five fields (hashed as stored, so only its form is wrong).
    let five = pick(&db, &ids, |_| true, &[flipped]);
    let five_fen = format!("{} 0", fen_of[&five]);
    db.psql(&format!(
        "UPDATE positions SET normalized_fen = '{five_fen}', fen_hash = {} WHERE id = {five}",
        fen_digest(&five_fen)
    ));
    // A wrong castling column.
    let castling = pick(&db, &ids, |f| f.ends_with(" KQkq -"), &[flipped, five]);
    db.psql(&format!(
        "UPDATE positions SET castling = 'KQ' WHERE id = {castling}"
    ));
    // Unsigned digests ≥ 2^63 stored without the two's-complement conversion:
    // with the top bit dropped (d mod 2^63), and clamped to the bigint maximum.
    let modulo = pick(&db, &ids, high, &[flipped, five, castling]);
    let clamped = pick(&db, &ids, high, &[flipped, five, castling, modulo]);
    db.psql(&format!(
        "UPDATE positions SET fen_hash = {} WHERE id = {modulo}",
        fen_digest_unsigned(fen_of[&modulo]) & (i64::MAX as u64)
    ));
    db.psql(&format!(
        "UPDATE positions SET fen_hash = {} WHERE id = {clamped}",
        i64::MAX
    ));

    let (out, report) = verify(&db, dir.path(), &[]);
    assert_exit(&out, 1);
    let expected: BTreeMap<i64, Vec<String>> = [
        (flipped, "hash_mismatch"),
        (five, "not_normalized"),
        (castling, "split_mismatch"),
        (modulo, "unsigned_digest"),
        (clamped, "unsigned_digest"),
    ]
    .into_iter()
    .map(|(id, kind)| (id, vec![kind.to_owned()]))
    .collect();
    assert_eq!(by_id(&report), expected, "{report:?}");
    let five_line = report.iter().find(|l| l.id == five).expect("reported");
    assert_eq!(five_line.fen, five_fen);
    let text = stdout(&out);
    assert!(text.contains("5 mismatches"), "{text}");
    assert!(text.contains("unsigned_digest    2"), "{text}");

    // The selection options narrow the rows read.
    let (out, report) = verify(
        &db,
        dir.path(),
        &["--id-range", &format!("{castling}..={castling}")],
    );
    assert_exit(&out, 1);
    assert_eq!(
        by_id(&report).keys().copied().collect::<Vec<_>>(),
        [castling]
    );
    assert!(
        stdout(&out).contains("verified 1 positions"),
        "{}",
        stdout(&out)
    );

    let first_clean = (1..=i64::MAX)
        .find(|id| !expected.contains_key(id))
        .expect("an id");
    let (out, report) = verify(
        &db,
        dir.path(),
        &["--id-range", &format!("{first_clean}.."), "--limit", "1"],
    );
    assert_exit(&out, 0);
    assert!(report.is_empty());
    assert!(
        stdout(&out).contains("verified 1 positions"),
        "{}",
        stdout(&out)
    );

    let (out, report) = verify(&db, dir.path(), &["--sample", "1"]);
    assert_exit(&out, 1);
    assert_eq!(by_id(&report), expected);
    let (out, _) = verify(&db, dir.path(), &["--sample", "0.05"]);
    assert!(matches!(out.status.code(), Some(0 | 1)), "{out:?}");
    let checked: u64 = stdout(&out)
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("verified N positions");
    assert!(
        checked < ids.len() as u64 / 5,
        "a 5% sample read {checked} of {}",
        ids.len()
    );
}

#[test]
fn replayed_games_verify_clean_and_broken_moves_rows_are_named() {
    let dir = scratch();
    let db = migrated_db("verify_games");
    let games = corpus(&VARIANTS);
    let ids = load_positions(&db, dir.path(), &games);
    load_games(&db, dir.path(), &games, &ids);

    let (out, report) = verify(&db, dir.path(), &["--games"]);
    assert_exit(&out, 0);
    assert!(report.is_empty(), "{report:?}");
    assert!(
        stdout(&out).contains(&format!("verified {} games", games.len())),
        "{}",
        stdout(&out)
    );

    // Game 1: ply 5 points after the move at the start position instead.
    // Game 2: ply 3 has another UCI. Game 3: the row of ply 4 is gone.
    let g1 = &games[0];
    let start = ids[g1.positions.fen(0)];
    assert_ne!(start, ids[g1.positions.fen(5)]);
    db.psql(&format!(
        "UPDATE moves SET position_after_id = {start} WHERE game_id = 1 AND ply = 5"
    ));
    db.psql("UPDATE moves SET uci = 'a1a1' WHERE game_id = 2 AND ply = 3");
    db.psql("DELETE FROM moves WHERE game_id = 3 AND ply = 4");
    // Game 4: its final position is its initial one.
    db.psql("UPDATE games SET final_position_id = initial_position_id WHERE id = 4");

    let (out, report) = verify(&db, dir.path(), &["--games"]);
    assert_exit(&out, 1);
    let expected: BTreeMap<i64, Vec<String>> = [
        (1, "position_mismatch"),
        (2, "move_mismatch"),
        (3, "missing_moves"),
        (4, "final_position"),
    ]
    .into_iter()
    .map(|(id, kind)| (id, vec![kind.to_owned()]))
    .collect();
    assert_eq!(by_id(&report), expected, "{report:?}");
    let wrong = report.iter().find(|l| l.id == 1).expect("game 1");
    assert_eq!(
        wrong.fen,
        g1.positions.fen(5),
        "the replayed position is shown"
    );

    // Sampling and ranges select games.
    let (out, report) = verify(&db, dir.path(), &["--games", "--id-range", "2..4"]);
    assert_exit(&out, 1);
    assert_eq!(by_id(&report).keys().copied().collect::<Vec<_>>(), [2, 3]);
    let (out, report) = verify(
        &db,
        dir.path(),
        &["--games", "--id-range", "5..", "--limit", "10"],
    );
    assert_exit(&out, 0);
    assert!(report.is_empty());
    assert!(
        stdout(&out).contains("verified 10 games"),
        "{}",
        stdout(&out)
    );
}

/// `SELECT normalized_fen FROM positions ORDER BY id` through
/// `py_digests.py --fens` (python-chess + xxhash): `fen, signed, unsigned`.
fn python_digest_file(db: &TestDb, dir: &Path) -> PathBuf {
    let fens = dir.join("fens.txt");
    let listed = db.psql("SELECT normalized_fen FROM positions ORDER BY id");
    std::fs::write(&fens, format!("{listed}\n")).expect("write FENs");
    let out = run({
        let mut c = python_script("py_digests.py");
        c.arg("--fens").stdin(File::open(&fens).expect("FEN list"));
        c
    });
    assert!(
        out.status.success(),
        "py_digests.py --fens: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let path = dir.join("digests.tsv");
    std::fs::write(&path, &out.stdout).expect("write digests");
    path
}

/// A line number as the report gives it.
fn line_number(n: usize) -> i64 {
    i64::try_from(n).expect("a test file's line number")
}

#[test]
fn a_python_digest_file_verifies_against_the_database() {
    let dir = scratch();
    let db = migrated_db("verify_digests");
    let ids = load_positions(&db, dir.path(), &corpus(&[SAMPLE]));
    let digests = python_digest_file(&db, dir.path());
    let file = digests.to_str().expect("utf-8 path");

    let (out, report) = verify(
        &db,
        dir.path(),
        &["--digests", file, "--unsigned", "--against-db"],
    );
    assert_exit(&out, 0);
    assert!(report.is_empty(), "{report:?}");
    assert!(
        stdout(&out).contains(&format!("verified {} lines", ids.len())),
        "{}",
        stdout(&out)
    );
    // Both columns checked when no signedness is given.
    let (out, report) = verify(&db, dir.path(), &["--digests", file]);
    assert_exit(&out, 0);
    assert!(report.is_empty(), "{report:?}");

    // Alter the unsigned digest of one line.
    let text = std::fs::read_to_string(&digests).expect("digest file");
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let target = 137; // 1-based line number
    let fields: Vec<&str> = lines[target - 1].split('\t').collect();
    let unsigned: u64 = fields[2].parse().expect("unsigned column");
    let altered_fen = fields[0].to_owned();
    lines[target - 1] = format!("{}\t{}\t{}", fields[0], fields[1], unsigned ^ 1);
    let altered = dir.path().join("altered.tsv");
    std::fs::write(&altered, lines.join("\n") + "\n").expect("write");
    let altered_name = altered.to_str().expect("utf-8 path");
    for args in [
        vec!["--digests", altered_name, "--unsigned", "--against-db"],
        vec!["--digests", altered_name],
    ] {
        let (out, report) = verify(&db, dir.path(), &args);
        assert_exit(&out, 1);
        assert_eq!(report.len(), 1, "{report:?}");
        assert_eq!(report[0].id, line_number(target));
        assert_eq!(report[0].kind, "digest_mismatch");
        assert_eq!(report[0].fen, altered_fen);
    }

    // The same check through gzip, as CSV with quotes and a header, signed
    // digests only, plus a FEN the database lacks.
    let missing = "8/8/8/8/8/8/k7/K7 w - -";
    let mut csv = String::from("fen,digest\n");
    for (i, line) in lines.iter().enumerate() {
        let fields: Vec<&str> = line.split('\t').collect();
        let signed = if i + 1 == target {
            to_signed(unsigned ^ 1).to_string()
        } else {
            fields[1].to_owned()
        };
        writeln!(csv, "\"{}\",{signed}", fields[0]).expect("string write");
    }
    writeln!(csv, "\"{missing}\",{}", fen_digest(missing)).expect("string write");
    let gz = dir.path().join("digests.csv.gz");
    let mut encoder = flate2::write::GzEncoder::new(
        File::create(&gz).expect("create"),
        flate2::Compression::fast(),
    );
    encoder.write_all(csv.as_bytes()).expect("gzip");
    encoder.finish().expect("gzip");
    let (out, report) = verify(
        &db,
        dir.path(),
        &["--digests", gz.to_str().expect("utf-8"), "--against-db"],
    );
    assert_exit(&out, 1);
    let got: Vec<(i64, &str)> = report.iter().map(|l| (l.id, l.kind.as_str())).collect();
    // Line numbers count the header line.
    assert_eq!(
        got,
        [
            (line_number(target + 1), "digest_mismatch"),
            (line_number(lines.len() + 2), "db_missing")
        ]
    );
    assert!(
        stdout(&out).contains("digests: signed (detected)"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn an_imported_database_verifies_clean() {
    let dir = scratch();
    let db = migrated_db("verify_imported");
    let out = run({
        let mut c = db.pgnload();
        c.args(["--quiet", "import"])
            .arg(data("molinari-bordais-1979.pgn"))
            .arg(data(SAMPLE));
        c
    });
    assert_exit(&out, 0);
    for args in [&["--canonical"][..], &["--games"][..]] {
        let (out, report) = verify(&db, dir.path(), args);
        assert_exit(&out, 0);
        assert!(report.is_empty(), "{args:?}: {report:?}");
    }
    assert_ne!(db.psql("SELECT count(*) FROM games"), "0");
}

#[test]
fn a_database_without_the_schema_is_an_error() {
    let dir = scratch();
    let db = fresh_db("verify_noschema");
    let (out, report) = verify(&db, dir.path(), &[]);
    assert_exit(&out, 2);
    assert!(report.is_empty());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("positions"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn impossible_arguments_are_refused_before_any_database_work() {
    let dir = scratch();
    let db = migrated_db("verify_args");
    let report = dir.path().join("report.tsv");
    for (args, env, named) in [
        (
            &["verify", "--limit", "18446744073709551615"][..],
            None,
            "--limit",
        ),
        (&["verify", "--sample", "1e-300"][..], None, "--sample"),
        (&["verify", "--id-range", "9..1"][..], None, "--id-range"),
        (&["--threads", "10000", "verify"][..], None, "--threads"),
        (&["verify"][..], Some("10000"), "PGNLOAD_THREADS"),
    ] {
        let out = run({
            let mut c = db.pgnload();
            c.args(args).arg("--report").arg(&report);
            if let Some(threads) = env {
                c.env("PGNLOAD_THREADS", threads);
            }
            c
        });
        let err = String::from_utf8_lossy(&out.stderr);
        assert_exit(&out, 2);
        assert!(err.contains(named), "{args:?}: {err}");
        assert!(!err.contains("database"), "{args:?}: {err}");
        assert!(!report.exists(), "{args:?} started verifying");
    }
}

/// Runs `pgnload verify --quiet ARGS` with its report written into a FIFO
/// that this test reads, and stops it with `signal` part-way: verify cannot
/// finish while nobody reads its report (many findings, a 64 KiB pipe), so
/// the signal always lands while it still has rows to check. The header
/// arriving proves the handler is installed (it is written after); the
/// report is read on only once verify says it is stopping. Returns the
/// output and the whole report text.
fn verify_interrupted(db: &TestDb, dir: &Path, args: &[&str], signal: Signal) -> (Output, String) {
    let fifo = dir.join("report.fifo");
    mkfifo(&fifo, Mode::S_IRUSR | Mode::S_IWUSR).expect("mkfifo");
    let mut child = db
        .pgnload()
        .args(["--quiet", "verify"])
        .args(args)
        .arg("--report")
        .arg(&fifo)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn pgnload");
    // Opening the read end waits for verify to open the write end; if verify
    // dies first, open the write end here to release the opener.
    let (opened_tx, opened_rx) = std::sync::mpsc::channel();
    let opener = {
        let fifo = fifo.clone();
        std::thread::spawn(move || opened_tx.send(File::open(&fifo)))
    };
    let file = loop {
        match opened_rx.recv_timeout(Duration::from_millis(100)) {
            Ok(file) => break file.expect("open the report FIFO"),
            Err(_) => {
                if child.try_wait().expect("poll pgnload").is_some() {
                    let _release = OpenOptions::new().write(true).open(&fifo);
                    let _ = opener.join();
                    let out = child.wait_with_output().expect("wait");
                    panic!("verify ended before opening its report: {out:?}");
                }
            }
        }
    };
    let mut report = BufReader::new(file);
    let mut text = String::new();
    report.read_line(&mut text).expect("report header");
    assert!(text.ends_with("kind\n"), "{text:?}");

    kill(
        Pid::from_raw(i32::try_from(child.id()).expect("pid fits")),
        signal,
    )
    .expect("send the signal");
    let mut stderr = BufReader::new(child.stderr.take().expect("piped stderr"));
    let mut said = String::new();
    loop {
        let mut line = String::new();
        let n = stderr.read_line(&mut line).expect("read stderr");
        said.push_str(&line);
        assert!(n > 0, "verify ended without saying it stops: {said}");
        if line.contains("interrupted; verify stops") {
            break;
        }
    }
    report.read_to_string(&mut text).expect("read the report");
    let out = child.wait_with_output().expect("wait");
    (out, text)
}

/// The report's lines after the header, each checked to be whole
/// (5 fields, a numeric id, the last line ended).
fn whole_lines(text: &str) -> Vec<ReportLine> {
    assert!(
        text.ends_with('\n'),
        "a cut last line: {:?}",
        &text[text.len().saturating_sub(200)..]
    );
    text.lines()
        .skip(1)
        .map(|line| {
            let f: Vec<&str> = line.split('\t').collect();
            assert_eq!(f.len(), 5, "report line {line:?}");
            ReportLine {
                id: f[0].parse().expect("numeric id"),
                fen: f[1].to_owned(),
                kind: f[4].to_owned(),
            }
        })
        .collect()
}

/// The N of the summary's "verified N …".
fn verified(out: &Output) -> u64 {
    stdout(out)
        .lines()
        .find_map(|l| l.strip_prefix("verified ")?.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no count: {}", stdout(out)))
}

#[test]
fn sigint_stops_verify_with_the_report_so_far_flushed_and_exit_3() {
    let dir = scratch();
    let db = migrated_db("verify_sigint");
    let ids = load_positions(&db, dir.path(), &corpus(&[SAMPLE]));
    // Bit 12: above what a float rounding changes, so every row is a plain
    // hash_mismatch.
    db.psql("UPDATE positions SET fen_hash = fen_hash # 4096");

    let (out, text) = verify_interrupted(&db, dir.path(), &[], Signal::SIGINT);
    assert_exit(&out, 3);
    let lines = whole_lines(&text);
    assert!(text.starts_with("id\tnormalized_fen\tstored\texpected\tkind\n"));
    let odd = lines.iter().find(|l| l.kind != "hash_mismatch");
    assert!(odd.is_none(), "{odd:?}");
    let checked = verified(&out);
    assert_eq!(lines.len() as u64, checked, "every checked row is reported");
    assert!(
        checked > 0 && checked < ids.len() as u64,
        "{checked} of {} checked",
        ids.len()
    );
    let summary = stdout(&out);
    assert!(
        summary.contains("verify interrupted: partial result"),
        "{summary}"
    );
    assert!(
        summary.contains(&format!("{checked} mismatches so far")),
        "{summary}"
    );
    assert!(summary.contains("(partial)"), "{summary}");
}

#[test]
fn sigterm_stops_verify_games_between_batches_with_whole_findings() {
    let dir = scratch();
    let db = migrated_db("verify_sigterm");
    let games = corpus(&[SAMPLE]);
    let ids = load_positions(&db, dir.path(), &games);
    load_games(&db, dir.path(), &games, &ids);
    db.psql("UPDATE moves SET uci = 'a1a1'");

    let (out, text) = verify_interrupted(&db, dir.path(), &["--games"], Signal::SIGTERM);
    assert_exit(&out, 3);
    let lines = whole_lines(&text);
    let checked = verified(&out);
    assert!(
        checked > 0 && checked < games.len() as u64,
        "{checked} of {} games checked",
        games.len()
    );
    // Games are read in id order: the first `checked` games, each with one
    // finding per ply, and nothing of the others.
    let odd = lines.iter().find(|l| {
        l.kind != "move_mismatch" || !matches!(u64::try_from(l.id), Ok(id) if id <= checked)
    });
    assert!(odd.is_none(), "{odd:?}");
    let plies: usize = games[..usize::try_from(checked).expect("a game count")]
        .iter()
        .map(|g| g.plies.len())
        .sum();
    assert_eq!(lines.len(), plies);
    assert!(
        stdout(&out).contains("verify interrupted"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn sigint_stops_a_digest_file_check_between_batches() {
    let dir = scratch();
    let db = fresh_db("verify_sigint_digests");
    let total = 30_000;
    let mut text = String::new();
    for n in 0..total {
        let fen = format!("8/8/8/8/8/8/{n}/8 w - -");
        writeln!(text, "{fen}\t{}", fen_digest(&fen) ^ 4096).expect("string write");
    }
    let digests = dir.path().join("digests.tsv");
    std::fs::write(&digests, text).expect("write digests");

    let file = digests.to_str().expect("utf-8 path");
    let (out, report) = verify_interrupted(&db, dir.path(), &["--digests", file], Signal::SIGINT);
    assert_exit(&out, 3);
    let lines = whole_lines(&report);
    let checked = verified(&out);
    assert!(checked > 0 && checked < total, "{checked} of {total} lines");
    assert_eq!(lines.len() as u64, checked);
    let odd = lines.iter().find(|l| {
        l.kind != "digest_mismatch" || !matches!(u64::try_from(l.id), Ok(id) if id <= checked)
    });
    assert!(odd.is_none(), "{odd:?}");
}
