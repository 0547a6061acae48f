//! The sharded layout (`db migrate --shards`): a coordinator and two shard
//! servers started by `scripts/shard-cluster.sh`, fed by concurrent
//! importers, a killed importer, a restarted shard; each time the result
//! must equal a single-node import of the same files, by natural keys.

use std::{
    path::PathBuf,
    process::{Child, Output, Stdio},
    time::{Duration, Instant},
};

use nix::{
    sys::signal::{Signal, kill},
    unistd::Pid,
};

use crate::{
    common::{ShardCluster, TestDb, data, data_pgns, fresh_db, psql_on},
    explorer::{BEFORE_0021, BEFORE_0025},
    import::{assert_ok, import, overlapping_halves},
    schema::assert_every_object_commented,
};

/// The coordinator of `cluster`, sharded over all its shards.
fn sharded(cluster: &ShardCluster) -> TestDb {
    let db = TestDb::existing(cluster.coordinator_url.clone());
    let out = db.quiet(&["db", "migrate", "--shards", &cluster.shard_urls.join(",")]);
    assert_ok(&out, &[0]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("sharded over 2 servers"), "{said}");
    // Every test keeps the explorer counters, which must stay exact.
    let enabled = db.quiet_ok(&["db", "explorer", "enable"]);
    assert!(enabled.contains("enabled"), "{enabled}");
    db
}

/// Everything an import stores, by natural keys (ids differ between
/// layouts): positions, games with their positions, players and event,
/// moves with theirs. One line per table: a row count and a digest of the
/// sorted rows, so a difference fails the comparison without printing
/// thousands of rows.
fn natural_dump(db: &TestDb) -> String {
    let tables = [
        (
            "positions",
            "SELECT count(*), md5(string_agg(concat_ws('|', normalized_fen, fen_hash, piece_placement,
                 active_color, castling, en_passant), E'\\n' ORDER BY normalized_fen))
             FROM positions",
        ),
        (
            "games",
            "SELECT count(*), md5(string_agg(concat_ws('|', g.source, g.external_id, g.variant, g.result,
                 g.ply_count, encode(g.moves, 'hex'), pi.normalized_fen, pf.normalized_fen,
                 g.white_elo, g.black_elo, g.started_at, g.tags::text, w.username, b.username,
                 e.name, g.start_fen, g.termination, g.time_control, g.positions_max_ply),
                 E'\\n' ORDER BY g.source, g.external_id))
             FROM games g
             JOIN positions pi ON pi.id = g.initial_position_id
             JOIN positions pf ON pf.id = g.final_position_id
             LEFT JOIN players w ON w.id = g.white_player_id
             LEFT JOIN players b ON b.id = g.black_player_id
             LEFT JOIN events e ON e.id = g.event_id",
        ),
        (
            "moves",
            "SELECT count(*), md5(string_agg(concat_ws('|', g.source, g.external_id, m.ply, m.uci, m.san,
                 pb.normalized_fen, pa.normalized_fen, m.clock_ms, m.eval_cp, m.eval_mate, m.nag),
                 E'\\n' ORDER BY g.source, g.external_id, m.ply))
             FROM moves m
             JOIN games g ON g.id = m.game_id
             JOIN positions pb ON pb.id = m.position_id
             JOIN positions pa ON pa.id = m.position_after_id",
        ),
    ];
    tables
        .iter()
        .map(|(name, sql)| format!("{name}: {}", db.psql(sql)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `natural_dump` of a single-node import of `files`.
fn single_node_dump(files: &[PathBuf]) -> String {
    let db = fresh_db("single_ref");
    assert_ok(&import(&db, &["-q"], files), &[0]);
    natural_dump(&db)
}

/// An importer of `files` into `db`, small batches so that importers
/// interleave, its output captured.
fn spawn_import(db: &TestDb, files: &[PathBuf]) -> Child {
    let mut cmd = db.pgnload();
    cmd.args(["import", "--batch-games", "20"])
        .args(files)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd.spawn().expect("spawn pgnload")
}

/// The numbers of an import summary's `games:` line: read, imported,
/// present, rejected, filtered.
fn summary_counts(out: &Output) -> [u64; 5] {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stderr
        .lines()
        .find(|l| l.trim_start().starts_with("games:"))
        .unwrap_or_else(|| panic!("no summary in {stderr}"));
    let numbers: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().expect("number"))
        .collect();
    numbers
        .try_into()
        .unwrap_or_else(|n| panic!("summary {line:?}: {n:?}"))
}

/// Waits until the inputs' checkpoints say `wanted` games or more were
/// committed: `true`, or `false` if `child` (the import) ended first.
fn committed_past(db: &TestDb, child: &mut Child, wanted: u64) -> bool {
    let started = Instant::now();
    loop {
        let done: u64 = db
            .psql("SELECT coalesce(sum(games_done), 0) FROM import_files")
            .parse()
            .expect("count");
        if done >= wanted {
            return true;
        }
        if child.try_wait().expect("try_wait").is_some() {
            return false;
        }
        assert!(
            started.elapsed() < Duration::from_mins(5),
            "import made no progress"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Rows of `table` on each shard server.
fn per_shard(cluster: &ShardCluster, table: &str) -> Vec<u64> {
    cluster
        .shard_urls
        .iter()
        .map(|url| {
            psql_on(url, &format!("SELECT count(*) FROM {table}"))
                .parse()
                .expect("count")
        })
        .collect()
}

/// What every sharded database must satisfy: each table's rows are on
/// the shards and add up to what the coordinator shows, every shard has
/// some, a game's moves are on its shard, every game has a key naming
/// it, and both verify modes are clean.
fn assert_sharded_and_sound(cluster: &ShardCluster, db: &TestDb) {
    for table in ["positions", "games", "moves", "game_keys", "explorer_moves"] {
        let counts = per_shard(cluster, table);
        assert!(
            counts.iter().all(|&n| n > 0),
            "{table}: rows on every shard: {counts:?}"
        );
        let total: u64 = db
            .psql(&format!("SELECT count(*) FROM {table}"))
            .parse()
            .expect("count");
        assert_eq!(counts.iter().sum::<u64>(), total, "{table} on the shards");
    }
    for url in &cluster.shard_urls {
        assert_eq!(
            psql_on(
                url,
                "SELECT count(*) FROM moves m WHERE NOT EXISTS (SELECT 1 FROM games g WHERE g.id = m.game_id)"
            ),
            "0",
            "moves away from their game's shard"
        );
        assert_eq!(
            psql_on(
                url,
                "SELECT count(*) FROM explorer_moves e
                 WHERE NOT EXISTS (SELECT 1 FROM games g WHERE g.id = e.anchor_game_id)"
            ),
            "0",
            "counters away from the shard of the games they count"
        );
    }
    assert_eq!(
        db.psql(
            "SELECT count(*) FROM games g WHERE NOT EXISTS (
                 SELECT 1 FROM game_keys k WHERE k.external_id = g.external_id
                 AND k.lichess = (g.source = 'lichess') AND k.game_id = g.id)"
        ),
        "0",
        "games without their key"
    );
    assert_eq!(
        db.psql(
            "SELECT count(*) FROM game_keys k WHERE NOT EXISTS (SELECT 1 FROM games g WHERE g.id = k.game_id)"
        ),
        "0",
        "claims left without their game"
    );
    for mode in [
        &["verify"][..],
        &["verify", "--games"][..],
        &["verify", "--explorer"][..],
    ] {
        let report = tempfile::NamedTempFile::new().expect("report file");
        let report_path = report.path().to_str().expect("UTF-8 path");
        let mut args = mode.to_vec();
        args.extend(["--report", report_path]);
        let out = db.quiet(&args);
        assert_ok(&out, &[0]);
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(said.contains("no mismatches"), "{mode:?}: {said}");
    }
}

/// Long: one scenario, step by step; split, its steps would read out of
/// order.
#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one scenario, step by step; split, its steps would read out of order"
)]
fn concurrent_importers_through_the_coordinator_equal_a_single_node_import() {
    let cluster = ShardCluster::start("concurrent", 2);
    let db = sharded(&cluster);
    let dir = tempfile::tempdir().expect("temp dir");
    let (a, b) = overlapping_halves(dir.path());
    // The sample again behind one other game: another input (its own
    // fingerprint and lock) whose games come in step with the sample's,
    // so that two importers race for the same identities.
    let shifted = dir.path().join("shifted.pgn");
    let mut text = std::fs::read(data("molinari-bordais-1979.pgn")).expect("read");
    text.extend(b"\n");
    text.extend(std::fs::read(data("lichess-2025-05-sample.pgn")).expect("read"));
    std::fs::write(&shifted, text).expect("write");
    let mut everything = data_pgns();
    let sample_first: Vec<PathBuf> = everything
        .iter()
        .filter(|p| p.ends_with("lichess-2025-05-sample.pgn"))
        .chain(
            everything
                .iter()
                .filter(|p| !p.ends_with("lichess-2025-05-sample.pgn")),
        )
        .cloned()
        .collect();
    let importers = [
        spawn_import(&db, &sample_first),
        spawn_import(&db, &[shifted]),
        spawn_import(&db, &[b, a]),
    ];
    let mut imported = 0;
    for child in importers {
        let out = child.wait_with_output().expect("wait");
        assert_ok(&out, &[0]);
        let [read, new, present, rejected, filtered] = summary_counts(&out);
        assert_eq!(read, new + present + rejected + filtered, "accounting");
        imported += new;
    }
    let games: u64 = db
        .psql("SELECT count(*) FROM games")
        .parse()
        .expect("count");
    assert_eq!(
        imported, games,
        "each game imported by exactly one importer"
    );
    everything.sort();
    assert_eq!(natural_dump(&db), single_node_dump(&everything));
    assert_sharded_and_sound(&cluster, &db);

    // Queries answer as on one node (ids aside).
    let single = fresh_db("single_queries");
    single.quiet_ok(&["db", "explorer", "enable"]);
    assert_ok(&import(&single, &["-q"], &everything), &[0]);
    // The explorer's moves and totals (its top and recent games tie by
    // id, which differ between layouts), before and after the counters'
    // rows are folded into one per key and shard.
    let explore_as_on_one_node = || {
        for play in ["", "e2e4", "e2e4,c7c5", "d2d4,g8f6,c2c4"] {
            let mut args = vec![
                "explore",
                "--json",
                "--top-games",
                "0",
                "--recent-games",
                "0",
                "--top",
                "50",
            ];
            if !play.is_empty() {
                args.extend(["--play", play]);
            }
            let on_shards = db.quiet_ok(&args);
            assert!(on_shards.contains("\"uci\""), "{args:?}: {on_shards}");
            assert_eq!(on_shards, single.quiet_ok(&args), "{args:?}");
        }
    };
    explore_as_on_one_node();
    let rows = || -> u64 {
        db.psql("SELECT count(*) FROM explorer_moves")
            .parse()
            .expect("count")
    };
    let before = rows();
    let said = db.quiet_ok(&["db", "explorer", "compact"]);
    let after = rows();
    assert!(after < before, "{before} rows, then {after}: {said}");
    assert!(
        said.starts_with(&format!(
            "explorer counters compacted: {before} rows into {after} in "
        )),
        "{said}"
    );
    assert_eq!(
        db.psql(
            "SELECT count(*) FROM (SELECT 1 FROM explorer_moves
             GROUP BY tableoid, position_id, variant, speed, rating_group, month, move
             HAVING count(*) > 1) k"
        ),
        "0",
        "one row per key and shard after the compaction"
    );
    explore_as_on_one_node();
    assert_sharded_and_sound(&cluster, &db);
    let single_said = single.quiet_ok(&["db", "explorer", "compact"]);
    assert!(
        single_said.starts_with("explorer counters: 0 queued positions counted in "),
        "{single_said}"
    );
    let fen = "rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq -";
    let queries: [&[&str]; 4] = [
        &["games", "--player", "vnnewbie", "--format", "pgn"],
        &["games", "--fen", fen, "--limit", "1000", "--format", "pgn"],
        &[
            "games",
            "--min-rating",
            "2000",
            "--limit",
            "50",
            "--format",
            "pgn",
        ],
        &["game", "show", "lichess:06BDd1Cq"],
    ];
    // Games that tie on the listing order come in id order, and ids
    // differ between layouts: compared as sets of games.
    let games_of = |db: &TestDb, args: &[&str]| {
        let text = db.quiet_ok(args);
        let mut games: Vec<String> = text
            .split("\n\n[")
            .map(|game| game.trim_start_matches('[').trim_end().to_owned())
            .collect();
        games.sort();
        games
    };
    for args in queries.iter().copied().chain([&["export"][..]]) {
        let on_shards = games_of(&db, args);
        assert!(
            on_shards.len() > 1 || !on_shards[0].trim().is_empty(),
            "{args:?} found nothing"
        );
        let on_one_node = games_of(&single, args);
        assert!(
            on_shards == on_one_node,
            "{args:?}: {} games on shards, {} on one node",
            on_shards.len(),
            on_one_node.len()
        );
    }
}

#[test]
fn an_importer_killed_repeatedly_then_rerun_equals_a_single_node_import() {
    let cluster = ShardCluster::start("kill", 2);
    let db = sharded(&cluster);
    let files = data_pgns();
    let mut kills = 0;
    for wanted in [20u64, 120, 260] {
        let mut child = spawn_import(&db, &files);
        // Kill it once it has committed past `wanted` games (or finished).
        committed_past(&db, &mut child, wanted);
        if child.try_wait().expect("try_wait").is_none() {
            let pid = Pid::from_raw(i32::try_from(child.id()).expect("pid"));
            kill(pid, Signal::SIGKILL).expect("kill -9");
            kills += 1;
        }
        let _ = child.wait();
    }
    assert!(kills > 0, "every import finished before it could be killed");
    assert_ok(&import(&db, &["-q"], &files), &[0]);
    assert_eq!(natural_dump(&db), single_node_dump(&files));
    assert_sharded_and_sound(&cluster, &db);
}

#[test]
fn a_shard_restarted_mid_import_leaves_no_partial_batch_after_the_rerun() {
    let cluster = ShardCluster::start("restart", 2);
    let db = sharded(&cluster);
    let files = data_pgns();
    let mut child = spawn_import(&db, &files);
    assert!(
        committed_past(&db, &mut child, 40),
        "the import finished before the shard could be restarted"
    );
    cluster.restart_shard(1);
    // Retried (exit 0) or failed cleanly (exit 1 after its retries); either
    // way the rerun completes it.
    let out = child.wait_with_output().expect("wait");
    assert_ok(&out, &[0, 1]);
    assert_ok(&import(&db, &["-q"], &files), &[0]);
    assert_eq!(natural_dump(&db), single_node_dump(&files));
    assert_sharded_and_sound(&cluster, &db);
    // Every game has all its moves: no batch half written.
    assert_eq!(
        db.psql(
            "SELECT count(*) FROM games g
             WHERE g.ply_count <> (SELECT count(*) FROM moves m WHERE m.game_id = g.id)"
        ),
        "0"
    );
}

#[test]
fn single_node_features_are_refused_on_shards_and_the_layout_is_built_once() {
    let cluster = ShardCluster::start("refusals", 2);
    let db = sharded(&cluster);
    // The same shards again: nothing to do.
    let again = db.quiet_ok(&["db", "migrate", "--shards", &cluster.shard_urls.join(",")]);
    assert!(
        again.contains("already sharded over these 2 servers"),
        "{again}"
    );
    // Other shards: refused, nothing changed.
    let swapped = format!("{},{}", cluster.shard_urls[1], cluster.shard_urls[0]);
    let out = db.quiet(&["db", "migrate", "--shards", &swapped]);
    assert_ok(&out, &[2]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("resharding"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sample = data("lichess-2025-05-sample.pgn");
    let sample = sample.to_str().expect("UTF-8 path");
    for (args, says) in [
        (&["import", "--mode", "bulk", sample][..], "--mode bulk"),
        (&["game", "delete", "1"][..], "delete games"),
        (
            &["db", "backup", "/tmp/pgnload-never-written"][..],
            "db backup",
        ),
    ] {
        let out = db.quiet(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_ok(&out, &[2]);
        assert!(
            stderr.contains(says) && stderr.contains("sharded layout"),
            "{args:?}: {stderr}"
        );
    }
    assert_eq!(db.psql("SELECT count(*) FROM games"), "0");
    // The counters switch off (emptied on every shard) and on again.
    assert_ok(
        &import(&db, &["-q"], &[data("kasparov-deep-blue-1997.pgn")]),
        &[0],
    );
    assert!(per_shard(&cluster, "explorer_moves").iter().sum::<u64>() > 0);
    // The schema explains itself on the coordinator too: the rebuilt
    // tables and views kept their comments, and the decoders read the
    // partitioned tables.
    assert_every_object_commented(&db);
    assert_eq!(
        db.psql(
            "SELECT count(*) FROM games_readable
             WHERE cardinality(moves_uci) = ply_count AND cardinality(moves_san) = ply_count"
        ),
        db.psql("SELECT count(*) FROM games")
    );
    let off = db.quiet_ok(&["db", "explorer", "disable"]);
    assert!(off.contains("disabled"), "{off}");
    assert_eq!(per_shard(&cluster, "explorer_moves"), [0, 0]);
    let on = db.quiet_ok(&["db", "explorer", "enable"]);
    assert!(on.contains("enabled"), "{on}");
    assert_ok(
        &db.quiet(&["verify", "--explorer", "--report", "/dev/null"]),
        &[0],
    );
    assert_layout_counted_before_0021_is_recounted(&cluster, &db);
    // A coordinator with games cannot be sharded again elsewhere, nor can
    // a single node that holds games.
    let single = fresh_db("shard_nonempty");
    assert_ok(&import(&single, &["-q"], &[data("utf8-bom.pgn")]), &[0]);
    let out = single.quiet(&["db", "migrate", "--shards", &cluster.shard_urls.join(",")]);
    assert_ok(&out, &[2]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is not empty"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A sharded layout counted before migration 0021 (the averages of both
/// ratings) takes it: the coordinator migrated first answers with an
/// error naming the column its shards lack, not with numbers; each shard
/// migrated then recounts its rows, and the answers are those of before.
fn assert_layout_counted_before_0021_is_recounted(cluster: &ShardCluster, db: &TestDb) {
    // A rated game (the Kasparov games have no ratings): a move with an
    // average rating, here 2795 (1.e4 by White).
    assert_ok(
        &import(db, &["-q"], &[data("nepomniachtchi-liren-game1.pgn")]),
        &[0],
    );
    let start = || db.quiet_ok(&["explore", "--json"]);
    let before = start();
    assert!(before.contains("\"averageRating\":2795"), "{before}");
    let shards: Vec<TestDb> = cluster
        .shard_urls
        .iter()
        .map(|url| TestDb::existing(url.clone()))
        .collect();
    for shard in &shards {
        shard.psql(BEFORE_0025);
        shard.psql(BEFORE_0021);
    }
    db.psql(BEFORE_0025);
    db.psql(BEFORE_0021);
    let migrated = db.quiet_ok(&["db", "migrate"]);
    assert!(migrated.contains("applied 0021"), "{migrated}");
    let out = db.quiet(&["explore", "--json"]);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("mover_rated_games"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for shard in &shards {
        let migrated = shard.quiet_ok(&["db", "migrate"]);
        assert!(migrated.contains("applied 0021"), "{migrated}");
    }
    assert_eq!(start(), before);
    assert_ok(
        &db.quiet(&["verify", "--explorer", "--report", "/dev/null"]),
        &[0],
    );
}

/// A claim left by an input that nobody imports any more (interrupted
/// between its claims and its games, then changed and restarted under a
/// new fingerprint, say) is taken over by the next input holding the game:
/// otherwise that game would count as present and be written by nobody.
#[test]
fn a_claim_left_by_an_abandoned_input_is_taken_over() {
    let cluster = ShardCluster::start("orphan", 2);
    let db = sharded(&cluster);
    let sample = data("lichess-2025-05-sample.pgn");
    let text = std::fs::read_to_string(&sample).expect("sample");
    let site = text
        .lines()
        .find_map(|l| l.strip_prefix("[Site \"https://lichess.org/"))
        .expect("a Lichess game");
    let id = &site[..8];
    db.psql(&format!(
        "INSERT INTO import_files (id, fingerprint, path, compression, state, games_done)
             VALUES (990001, 'abandoned', '/gone.pgn', 'none', 'interrupted', 0);
         INSERT INTO game_keys (external_id, lichess, game_id, import_file_id, game_number)
             VALUES ('{id}', true, nextval('games_id_seq'), 990001, 7)"
    ));
    let out = import(&db, &[], std::slice::from_ref(&sample));
    assert_ok(&out, &[0]);
    assert_eq!(summary_counts(&out), [438, 438, 0, 0, 0]);
    assert_eq!(
        db.psql(&format!(
            "SELECT k.import_file_id <> 990001, count(g.id)
             FROM game_keys k LEFT JOIN games g ON g.id = k.game_id
             WHERE k.external_id = '{id}' GROUP BY 1"
        )),
        "t|1"
    );
    assert_eq!(natural_dump(&db), single_node_dump(&[sample]));
    assert_sharded_and_sound(&cluster, &db);
}

/// No password of a shard reaches the coordinator's server log (issue 26,
/// item 12), even with every statement logged and with the setup failing at
/// the step that creates the shards' servers and user mappings.
#[test]
fn shard_passwords_never_reach_the_coordinators_log() {
    const SECRET: &str = "hunter2-shard-secret";
    let cluster = ShardCluster::start("secret-log", 2);
    let coordinator = TestDb::existing(cluster.coordinator_url.clone());
    coordinator.psql("ALTER DATABASE pgnload SET log_statement = 'all'");
    let with_password: Vec<String> = cluster
        .shard_urls
        .iter()
        .map(|url| url.replacen("postgres@", &format!("postgres:{SECRET}@"), 1))
        .collect();
    assert_ne!(with_password, cluster.shard_urls, "unexpected URL form");
    let shards = with_password.join(",");
    // First a failing setup: a server of the name the setup gives the
    // second shard exists already.
    coordinator.psql(
        "CREATE EXTENSION IF NOT EXISTS postgres_fdw; \
         CREATE SERVER pgnload_shard_1 FOREIGN DATA WRAPPER postgres_fdw",
    );
    let failed = coordinator.quiet(&["db", "migrate", "--shards", &shards]);
    assert_ok(&failed, &[2]);
    coordinator.psql("DROP SERVER pgnload_shard_1");
    let built = coordinator.quiet(&["db", "migrate", "--shards", &shards]);
    assert_ok(&built, &[0]);
    assert_ok(
        &import(
            &coordinator,
            &["-q"],
            &[data("kasparov-deep-blue-1997.pgn")],
        ),
        &[0],
    );
    for out in [&failed, &built] {
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!said.contains(SECRET), "printed: {said}");
    }
    let log = std::fs::read_to_string(cluster.dir.join("coordinator.log")).expect("server log");
    assert!(
        log.contains("CREATE SERVER"),
        "statements are not being logged, so the test proves nothing:\n{log}"
    );
    let leaks: Vec<&str> = log.lines().filter(|l| l.contains(SECRET)).collect();
    assert!(
        leaks.is_empty(),
        "the password in the server log: {leaks:#?}"
    );
}
