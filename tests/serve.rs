//! `pgnload serve`: the real binary on an ephemeral loopback port, over a
//! database holding every file of `tests/data` with the explorer enabled.
//! The real `berserk` client (its explorer URL pointed at the server) gets
//! the answers `explore --json` prints for the same questions; plain HTTP
//! checks the errors (JSON with their status: 400, 404, 503), CORS, the
//! games endpoints against `game show` and `games`, and that SIGTERM stops
//! the server with exit code 0.

use std::{
    fmt::Write as _,
    io::{BufRead, BufReader, Read, Write},
    net::TcpStream,
    process::{Child, Command, ExitStatus, Stdio},
    sync::OnceLock,
};

use serde_json::{Value, json};

use crate::{
    common::{ShardCluster, TestDb, data, data_pgns, enable_explorer, fresh_db, run},
    import::{assert_ok, import},
};

/// A Chess960 start position of `tests/data/cutechess-fischerrandom.pgn`.
const CHESS960: &str = "nbbrknrq/pppppppp/8/8/8/8/PPPPPPPP/NBBRKNRQ w KQkq - 0 1";

/// The position after 1.e4 e5 2.Nf3, as a FEN.
const AFTER_NF3: &str = "rnbqkbnr/pppp1ppp/8/4p3/4P3/5N2/PPPP1PPP/RNBQKB1R b KQkq - 1 2";

/// A database with every file of `tests/data` and its explorer counters,
/// built once for the tests that only read it.
fn corpus() -> &'static TestDb {
    static DB: OnceLock<TestDb> = OnceLock::new();
    DB.get_or_init(|| {
        let db = fresh_db("serve");
        assert_ok(&import(&db, &["-q"], &data_pgns()), &[0, 1]);
        enable_explorer(db.pgnload());
        db
    })
}

/// A running `pgnload serve`, stopped (SIGKILL) if a test fails first.
struct Server {
    child: Child,
    /// `host:port`.
    address: String,
}

impl Server {
    /// Starts the server on `db` on any free loopback port, and reads the
    /// address from the line it prints once it listens.
    fn start(db: &TestDb) -> Server {
        Server::start_with(db, &[])
    }

    /// [`Server::start`] with more options of `serve`.
    fn start_with(db: &TestDb, options: &[&str]) -> Server {
        let mut child = db
            .pgnload()
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(options)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start pgnload serve");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("piped stdout"))
            .read_line(&mut line)
            .expect("read the startup line");
        let Some(address) = line
            .split("http://")
            .nth(1)
            .and_then(|rest| rest.split('/').next())
            .map(str::to_owned)
        else {
            let _ = child.kill();
            let out = child.wait_with_output().expect("wait");
            panic!(
                "no address in {line:?}; stderr: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        assert!(address.starts_with("127.0.0.1:"), "{line}");
        Server { child, address }
    }

    /// The base URL.
    fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Sends SIGTERM and waits: the exit status and stderr.
    fn terminate(mut self) -> (ExitStatus, String) {
        let pid =
            nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).expect("a pid fits an i32"));
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
        let status = self.child.wait().expect("wait for serve");
        let mut stderr = String::new();
        if let Some(mut pipe) = self.child.stderr.take() {
            pipe.read_to_string(&mut stderr).expect("read stderr");
        }
        (status, stderr)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// An HTTP answer: status, headers (names lowercase), body.
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Reply {
    /// The value of header `name`.
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as the JSON error every error is, and its message.
    fn error(&self) -> String {
        assert_eq!(self.header("content-type"), Some("application/json"));
        let value: Value = serde_json::from_str(&self.body).expect("an error is JSON");
        value["error"]
            .as_str()
            .unwrap_or_else(|| panic!("no error message in {}", self.body))
            .to_owned()
    }
}

/// `method path` with `headers`, over one plain HTTP/1.1 connection.
fn request(server: &Server, method: &str, path: &str, headers: &[(&str, &str)]) -> Reply {
    let mut stream = TcpStream::connect(&server.address).expect("connect to serve");
    let mut text = format!(
        "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n",
        server.address
    );
    for (name, value) in headers {
        let _ = write!(text, "{name}: {value}\r\n");
    }
    text.push_str("\r\n");
    stream.write_all(text.as_bytes()).expect("send");
    let mut raw = String::new();
    stream.read_to_string(&mut raw).expect("read the reply");
    let (head, body) = raw.split_once("\r\n\r\n").expect("a header block");
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|line| line.split(' ').nth(1))
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head}"));
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Reply {
        status,
        headers,
        body: body.to_owned(),
    }
}

/// `GET path`.
fn get(server: &Server, path: &str) -> Reply {
    request(server, "GET", path, &[])
}

/// `pgnload ARGS` on `db`, which must succeed: its stdout.
fn stdout_of(db: &TestDb, args: &[&str]) -> String {
    let out = run({
        let mut c = db.pgnload();
        c.args(args);
        c
    });
    assert_ok(&out, &[0]);
    String::from_utf8(out.stdout).expect("UTF-8")
}

/// Questions as berserk's `get_lichess_games` takes them, each with the
/// `explore` arguments that ask the same.
fn questions() -> Vec<(Value, Vec<&'static str>)> {
    vec![
        (json!({}), vec![]),
        (
            json!({"play": ["e2e4", "e7e5"]}),
            vec!["--play", "e2e4,e7e5"],
        ),
        (
            json!({"position": AFTER_NF3, "speeds": ["blitz", "bullet"], "moves": 3, "top_games": 2}),
            vec![
                AFTER_NF3,
                "--speeds",
                "blitz,bullet",
                "--top",
                "3",
                "--top-games",
                "2",
            ],
        ),
        (
            json!({"ratings": ["1600", "1800", "2000"], "since": "2025-01", "until": "2025-12"}),
            vec![
                "--ratings",
                "1600,1800,2000",
                "--since",
                "2025-01",
                "--until",
                "2025-12",
            ],
        ),
        (
            json!({"variant": "crazyhouse"}),
            vec!["--variant", "crazyhouse"],
        ),
        (
            json!({"variant": "antichess"}),
            vec!["--variant", "antichess"],
        ),
        (
            json!({"variant": "chess960", "position": CHESS960}),
            vec!["--variant", "chess960", CHESS960],
        ),
        (
            json!({"top_games": 0, "recent_games": 2}),
            vec!["--top-games", "0", "--recent-games", "2"],
        ),
    ]
}

/// Asks every question through berserk's `OpeningExplorer` at `url`.
fn berserk_answers(url: &str, questions: &[Value]) -> Vec<Value> {
    const SCRIPT: &str = r"
import json, sys
import berserk
client = berserk.Client(explorer_url=sys.argv[1])
answers = [client.opening_explorer.get_lichess_games(**q) for q in json.loads(sys.argv[2])]
print(json.dumps(answers))
";
    let out = run({
        let mut c = Command::new("python3");
        c.args(["-c", SCRIPT, url])
            .arg(Value::from(questions.to_vec()).to_string());
        c
    });
    assert!(
        out.status.success(),
        "berserk (pip install berserk): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("berserk's answers as JSON")
}

#[test]
fn berserk_gets_what_explore_json_prints() {
    let db = corpus();
    let server = Server::start(db);
    let questions = questions();
    let asked: Vec<Value> = questions.iter().map(|(q, _)| q.clone()).collect();
    let answers = berserk_answers(&server.url(), &asked);
    assert_eq!(answers.len(), questions.len());
    for ((question, args), answer) in questions.iter().zip(&answers) {
        let mut cli = vec!["explore", "--json"];
        cli.extend(args);
        let expected: Value =
            serde_json::from_str(&stdout_of(db, &cli)).expect("explore --json is JSON");
        assert_eq!(answer, &expected, "question {question}");
    }
    // The questions reach counted positions (a test of empty answers
    // would pass whatever the server read).
    let played = |answer: &Value| answer["moves"].as_array().map_or(0, Vec::len);
    assert!(played(&answers[0]) >= 10, "{}", answers[0]);
    assert!(
        answers.iter().all(|answer| played(answer) > 0),
        "{answers:?}"
    );
    assert!(
        !answers[0]["topGames"]
            .as_array()
            .expect("topGames")
            .is_empty()
    );
}

#[test]
fn bad_requests_are_json_400s_and_unknown_names_404s() {
    let server = Server::start(corpus());
    for (path, says) in [
        ("/lichess?fen=not-a-fen", "FEN"),
        ("/lichess?play=e2e5", "e2e5"),
        ("/lichess?variant=chess960", "chess960"),
        ("/lichess?variant=chess2", "variant"),
        ("/lichess?speeds=blitz,slow", "speeds"),
        ("/lichess?ratings=high", "ratings"),
        ("/lichess?since=2024-13", "since"),
        ("/lichess?since=2025-02&until=2025-01", "after"),
        ("/lichess?moves=-1", "moves"),
        ("/lichess?topGames=x", "topGames"),
        ("/lichess?recentGames=-2", "recentGames"),
        ("/lichess?history=true", "history"),
        ("/game/a%20b", "neither a game id"),
        ("/api/games/user/Garry%20Kasparov?max=many", "max"),
        ("/api/games/user/Garry%20Kasparov?color=red", "color"),
    ] {
        let reply = get(&server, path);
        assert_eq!(reply.status, 400, "{path}: {}", reply.body);
        let message = reply.error();
        assert!(message.contains(says), "{path}: {message}");
    }
    for (path, says) in [
        ("/game/987654321", "987654321"),
        ("/game/lichess:nosuchid", "lichess:nosuchid"),
        ("/game/NoSuchId", "NoSuchId"),
        ("/api/games/user/nobody-at-all", "nobody-at-all"),
        ("/nothing/here", "no such endpoint"),
    ] {
        let reply = get(&server, path);
        assert_eq!(reply.status, 404, "{path}: {}", reply.body);
        let message = reply.error();
        assert!(message.contains(says), "{path}: {message}");
    }
}

#[test]
fn every_origin_may_read_the_answers() {
    let server = Server::start(corpus());
    let origin = [("Origin", "https://example.org")];
    let reply = request(&server, "GET", "/lichess?play=d2d4", &origin);
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.header("access-control-allow-origin"), Some("*"));
    // pgnload's own headers, readable by a page on another origin.
    let exposed = reply
        .header("access-control-expose-headers")
        .unwrap_or_default()
        .to_ascii_lowercase();
    for name in ["x-cache", "x-pgnload-skipped-games"] {
        assert!(
            exposed.split(',').any(|h| h.trim() == name),
            "{name} not in {exposed:?}"
        );
    }
    let reply = request(&server, "GET", "/lichess?fen=bad", &origin);
    assert_eq!(reply.status, 400);
    assert_eq!(reply.header("access-control-allow-origin"), Some("*"));
    // A browser's preflight.
    let reply = request(
        &server,
        "OPTIONS",
        "/lichess",
        &[
            ("Origin", "https://example.org"),
            ("Access-Control-Request-Method", "GET"),
        ],
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.header("access-control-allow-origin"), Some("*"));
}

#[test]
fn games_are_served_as_game_show_and_games_print_them() {
    let db = corpus();
    let server = Server::start(db);
    // A Lichess id as the explorer's top games give it (bare), and another
    // source's game as SOURCE:EXTERNAL_ID, from `games --format json`.
    let answer: Value =
        serde_json::from_str(&get(&server, "/lichess?topGames=4").body).expect("JSON");
    let lichess = answer["topGames"]
        .as_array()
        .expect("topGames")
        .iter()
        .filter_map(|game| game["id"].as_str())
        .find(|id| !id.contains(':'))
        .expect("a Lichess id")
        .to_owned();
    let kasparov = stdout_of(
        db,
        &[
            "games",
            "--player",
            "Garry Kasparov",
            "--limit",
            "1",
            "--format",
            "json",
        ],
    );
    let kasparov: Value = serde_json::from_str(kasparov.trim()).expect("a JSON line");
    let other = format!(
        "{}:{}",
        kasparov["source"].as_str().expect("source"),
        kasparov["external_id"].as_str().expect("external_id")
    );
    for (id, show) in [
        (lichess.as_str(), format!("lichess:{lichess}")),
        (other.as_str(), other.clone()),
    ] {
        let reply = get(&server, &format!("/game/{id}"));
        assert_eq!(reply.status, 200, "{id}: {}", reply.body);
        assert_eq!(
            reply.header("content-type"),
            Some("application/x-chess-pgn")
        );
        assert_eq!(reply.body, stdout_of(db, &["game", "show", &show]), "{id}");
    }
    let path = "/api/games/user/Garry%20Kasparov";
    let player = ["games", "--player", "Garry Kasparov", "--format"];
    let pgn = get(&server, path);
    assert_eq!(pgn.status, 200, "{}", pgn.body);
    let expected = stdout_of(db, &[&player[..], &["pgn"]].concat());
    assert_eq!(pgn.body, expected);
    assert_eq!(pgn.body.matches("[Event ").count(), 6);
    let lines = request(&server, "GET", path, &[("Accept", "application/x-ndjson")]);
    assert_eq!(lines.header("content-type"), Some("application/x-ndjson"));
    assert_eq!(
        lines.body,
        stdout_of(db, &[&player[..], &["json"]].concat())
    );
    let one = request(
        &server,
        "GET",
        &format!("{path}?color=white&max=1"),
        &[("Accept", "application/x-ndjson")],
    );
    let only = stdout_of(
        db,
        &[&player[..], &["json", "--color", "white", "--limit", "1"]].concat(),
    );
    assert_eq!(one.body, only);
    assert_eq!(one.body.lines().count(), 1);
}

/// Every server connection of the database ended by hand: the pooled
/// ones, idle, are found closed when next lent and replaced (no request
/// fails), which the server says; the one following changes is noticed,
/// said, and listens again (polled: it retries every second).
#[test]
fn a_lost_connection_is_replaced_and_sigterm_stops_with_0() {
    let db = fresh_db("serve_stop");
    assert_ok(
        &import(&db, &["-q"], &[data("kasparov-deep-blue-1997.pgn")]),
        &[0],
    );
    enable_explorer(db.pgnload());
    let server = Server::start(&db);
    assert_eq!(get(&server, "/lichess").status, 200);
    // Every server process of this database but psql's ends (waiting up to
    // 10 s for each): the pool's idle connection is lost.
    let ended = db.psql(
        "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 10000)) FROM pg_stat_activity \
         WHERE datname = current_database() AND pid <> pg_backend_pid()",
    );
    assert_ne!(ended, "0", "the server held connections");
    // The next request is answered: the pool's connections, all lost,
    // are passed over for a new one. (Each client knows its connection
    // closed once its task has read the end of the socket, at once; a
    // moment's slack.)
    std::thread::sleep(std::time::Duration::from_millis(200));
    let reply = get(&server, "/lichess");
    assert_eq!(reply.status, 200, "{}", reply.body);
    // The connection following changes was lost too: the cache is used
    // again once it listens again (it tries every second; polled).
    until(&server, "/lichess", |reply| {
        reply.header("x-cache") == Some("hit")
    });
    let (status, stderr) = server.terminate();
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("answering without the cache until changes can be followed again"),
        "{stderr}"
    );
    assert!(
        stderr.contains("replacing a pooled connection the database closed"),
        "{stderr}"
    );
    assert!(stderr.contains("pgnload serve: stopped"), "{stderr}");
}

/// The server keeps the start position's counts that price its walks
/// (`explorer::answers::Everywhere`) between answers, and the answers
/// themselves: an import after an answer must be in the answers after it,
/// which say what `explore --json` (which keeps nothing) says. Polled
/// ([`settled`]): the kept answer is forgotten when the import's commit is
/// announced to the server, just after the import returned.
#[test]
fn an_answer_after_an_import_counts_the_new_games() {
    let db = fresh_db("serve_import_between");
    enable_explorer(db.pgnload());
    assert_ok(
        &import(&db, &["-q"], &[data("kasparov-deep-blue-1997.pgn")]),
        &[0],
    );
    let server = Server::start(&db);
    let games = |answer: &Value| {
        ["white", "draws", "black"]
            .iter()
            .map(|k| answer[k].as_i64().expect("a count"))
            .sum::<i64>()
    };
    let ask = || -> Value {
        let reply = get(&server, "/lichess");
        assert_eq!(reply.status, 200, "{}", reply.body);
        serde_json::from_str(&reply.body).expect("JSON")
    };
    let before = ask();
    assert_ok(
        &import(&db, &["-q"], &[data("lichess-2025-05-sample.pgn")]),
        &[0],
    );
    let after = settled(&server, &db, "/lichess", &[]);
    assert!(games(&after) > games(&before), "{before} then {after}");
    assert!(
        !after["recentGames"]
            .as_array()
            .expect("recentGames")
            .is_empty(),
        "{after}"
    );
    let (status, stderr) = server.terminate();
    assert!(status.success(), "{stderr}");
}

/// `path`'s answer once it is what `explore --json ARGS` prints now (a
/// 200), asked again until then, for up to a minute. After a write, the
/// server forgets the answers it kept when PostgreSQL's notification of
/// the commit reaches it (docs/serve.md, "Cache"): after the writer's
/// commit returned, so a request sent at once may still get the answer
/// from before. Nothing is timed: a minute only bounds a failure.
fn settled(server: &Server, db: &TestDb, path: &str, args: &[&str]) -> Value {
    let mut cli = vec!["explore", "--json"];
    cli.extend(args);
    let expected: Value = serde_json::from_str(&stdout_of(db, &cli)).expect("JSON");
    let reply = until(server, path, |reply| {
        reply.status == 200
            && serde_json::from_str::<Value>(&reply.body).ok() == Some(expected.clone())
    });
    serde_json::from_str(&reply.body).expect("JSON")
}

/// `path`'s reply once `done` holds for it, asked again until then for up
/// to a minute (see [`settled`] for why).
fn until(server: &Server, path: &str, done: impl Fn(&Reply) -> bool) -> Reply {
    let deadline = std::time::Instant::now() + std::time::Duration::from_mins(1);
    loop {
        let reply = get(server, path);
        if done(&reply) {
            return reply;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{path} still answers, after a minute: {} {}",
            reply.status,
            reply.body
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn a_question_asked_again_or_spelled_otherwise_is_answered_from_the_cache() {
    let server = Server::start(corpus());
    let path = "/lichess?play=e2e4,e7e5&speeds=blitz,bullet&ratings=1600,2000";
    let first = get(&server, path);
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(first.header("x-cache"), Some("miss"));
    let answer: Value = serde_json::from_str(&first.body).expect("JSON");
    assert!(
        !answer["moves"].as_array().expect("moves").is_empty(),
        "{answer}"
    );
    // Asked again, and spelled otherwise: SAN; the FEN reached, with other
    // move counters; speeds in another order, repeated; ratings naming the
    // same bands.
    for again in [
        path,
        "/lichess?play=e4,e5&speeds=bullet,blitz,blitz&ratings=2199,1799",
        "/lichess?fen=rnbqkbnr/pppp1ppp/8/4p3/4P3/8/PPPP1PPP/RNBQKBNR%20w%20KQkq%20-%200%207\
         &speeds=bullet,blitz&ratings=1700,2100",
    ] {
        let reply = get(&server, again);
        assert_eq!(reply.status, 200, "{again}: {}", reply.body);
        assert_eq!(reply.header("x-cache"), Some("hit"), "{again}");
        assert_eq!(reply.body, first.body, "{again}");
    }
    // Asked with no-cache: from the database.
    let fresh = request(&server, "GET", path, &[("Cache-Control", "no-cache")]);
    assert_eq!(fresh.header("x-cache"), Some("miss"));
    assert_eq!(fresh.body, first.body);
    // Another question is not.
    let other = get(&server, "/lichess?play=e2e4,e7e5&speeds=blitz");
    assert_eq!(other.header("x-cache"), Some("miss"));
    assert_ne!(other.body, first.body);
    // Errors are not kept.
    for _ in 0..2 {
        let bad = get(&server, "/lichess?play=e2e5");
        assert_eq!(bad.status, 400);
        assert_eq!(bad.header("x-cache"), None);
    }
    let (status, stderr) = server.terminate();
    assert!(status.success(), "{stderr}");
    assert!(stderr.contains("cache: 3 hits, 3 misses"), "{stderr}");
}

#[test]
fn with_cache_size_0_nothing_is_kept() {
    let server = Server::start_with(corpus(), &["--cache-size", "0"]);
    for _ in 0..3 {
        let reply = get(&server, "/lichess?play=e2e4");
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert_eq!(reply.header("x-cache"), Some("bypass"));
    }
    let (status, stderr) = server.terminate();
    assert!(status.success(), "{stderr}");
    assert!(!stderr.contains("cache:"), "{stderr}");
}

/// An answer kept is never given after a write that changes it, whoever
/// writes: the real `pgnload import`, a game deleted and inserted again by
/// hand (psql), `db explorer disable`. Each write is checked to change
/// the answer (a server that kept the old one would fail), and the
/// answers after it are polled until they say what `explore --json` says
/// ([`settled`] says why they are polled).
#[test]
fn a_kept_answer_is_forgotten_after_every_writers_change() {
    let db = fresh_db("serve_cache_writes");
    enable_explorer(db.pgnload());
    assert_ok(
        &import(&db, &["-q"], &[data("kasparov-deep-blue-1997.pgn")]),
        &[0],
    );
    let server = Server::start(&db);
    let first = get(&server, "/lichess");
    assert_eq!(first.header("x-cache"), Some("miss"));
    assert_eq!(get(&server, "/lichess").header("x-cache"), Some("hit"));
    let first: Value = serde_json::from_str(&first.body).expect("JSON");

    assert_ok(
        &import(&db, &["-q"], &[data("lichess-2025-05-sample.pgn")]),
        &[0],
    );
    let imported = settled(&server, &db, "/lichess", &[]);
    assert_ne!(imported, first);

    // By hand: the most recent game, deleted (its moves with it), then
    // inserted again.
    let recent = imported["recentGames"][0]["id"]
        .as_str()
        .expect("a recent game's id")
        .to_owned();
    db.psql(&format!(
        "CREATE TABLE kept_game AS SELECT * FROM games WHERE external_id = '{recent}';
         CREATE TABLE kept_moves AS SELECT * FROM moves
             WHERE game_id = (SELECT id FROM kept_game)"
    ));
    db.psql("DELETE FROM games WHERE id = (SELECT id FROM kept_game)");
    let deleted = settled(&server, &db, "/lichess", &[]);
    assert_ne!(deleted, imported);
    assert_ne!(
        deleted["recentGames"][0]["id"],
        imported["recentGames"][0]["id"]
    );
    db.psql(
        "INSERT INTO games SELECT * FROM kept_game; INSERT INTO moves SELECT * FROM kept_moves",
    );
    assert_eq!(settled(&server, &db, "/lichess", &[]), imported);

    db.quiet_ok(&["db", "explorer", "disable"]);
    let off = until(&server, "/lichess", |reply| reply.status == 503);
    assert!(off.error().contains("explorer enable"), "{}", off.body);
    let (status, stderr) = server.terminate();
    assert!(status.success(), "{stderr}");
}

/// On the coordinator of a sharded layout nothing is kept: a write made
/// straight to a shard would notify no listener there. Also when the
/// database is sharded under a running server: its insert into
/// `pgnload_shards` is announced, and from then on nothing is kept
/// (polled, as [`settled`] says why).
#[test]
fn on_a_sharded_layout_nothing_is_kept() {
    let cluster = ShardCluster::start("serve_sharded", 2);
    let db = TestDb::existing(cluster.coordinator_url.clone());
    assert_ok(&db.quiet(&["db", "migrate"]), &[0]);
    enable_explorer(db.pgnload());
    let server = Server::start(&db);
    assert_eq!(get(&server, "/lichess").header("x-cache"), Some("miss"));
    assert_eq!(get(&server, "/lichess").header("x-cache"), Some("hit"));
    // The counters are switched on again on the sharded layout.
    db.quiet_ok(&["db", "explorer", "disable"]);
    let shards = cluster.shard_urls.join(",");
    assert_ok(&db.quiet(&["db", "migrate", "--shards", &shards]), &[0]);
    enable_explorer(db.pgnload());
    until(&server, "/lichess", |reply| {
        reply.header("x-cache") == Some("bypass")
    });
    assert_ok(
        &import(&db, &["-q"], &[data("kasparov-deep-blue-1997.pgn")]),
        &[0],
    );
    let reply = get(&server, "/lichess");
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.header("x-cache"), Some("bypass"));
    let expected: Value =
        serde_json::from_str(&stdout_of(&db, &["explore", "--json"])).expect("JSON");
    assert_eq!(
        serde_json::from_str::<Value>(&reply.body).expect("JSON"),
        expected
    );
    let (status, stderr) = server.terminate();
    assert!(status.success(), "{stderr}");
    assert!(
        stderr.contains("cache off: the database is sharded"),
        "{stderr}"
    );
}
