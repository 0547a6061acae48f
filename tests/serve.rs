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
    time::{Duration, Instant},
};

use serde_json::{Value, json};

use crate::{
    common::{
        ShardCluster, TestDb, data, data_pgns, embedded_pgnload, enable_explorer, fresh_db, run,
        scratch_dir,
    },
    import::{assert_ok, import},
    resume::renamed_sample,
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

/// A fresh database holding the six games of Kasparov against Deep Blue
/// (1997), with the explorer counters.
fn kasparov_db(label: &str) -> TestDb {
    let db = fresh_db(label);
    assert_ok(
        &import(&db, &["-q"], &[data("kasparov-deep-blue-1997.pgn")]),
        &[0],
    );
    enable_explorer(db.pgnload());
    db
}

/// A running `pgnload serve`, stopped (SIGKILL) if a test fails first.
struct Server {
    child: Child,
    /// `host:port`.
    address: String,
    /// Its stderr, read as it comes (a server that logs much would
    /// otherwise block on a full pipe).
    stderr: Option<std::thread::JoinHandle<String>>,
}

impl Server {
    /// Starts the server on `db` on any free loopback port, and reads the
    /// address from the line it prints once it listens.
    fn start(db: &TestDb) -> Server {
        Server::start_with(db, &[])
    }

    /// [`Server::start`] with more options of `serve`.
    fn start_with(db: &TestDb, options: &[&str]) -> Server {
        let mut command = db.pgnload();
        command
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(options);
        Server::spawn(command)
    }

    /// Runs `command`, a `pgnload serve` on a loopback port, until it
    /// prints its address.
    fn spawn(mut command: Command) -> Server {
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start pgnload serve");
        let mut pipe = child.stderr.take().expect("piped stderr");
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        });
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
            let _ = child.wait();
            panic!(
                "no address in {line:?}; stderr: {}",
                stderr.join().unwrap_or_default()
            );
        };
        assert!(address.starts_with("127.0.0.1:"), "{line}");
        Server {
            child,
            address,
            stderr: Some(stderr),
        }
    }

    /// The base URL.
    fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// The process id.
    fn pid(&self) -> nix::unistd::Pid {
        nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).expect("a pid fits an i32"))
    }

    /// Sends SIGTERM and waits: the exit status and stderr.
    fn terminate(mut self) -> (ExitStatus, String) {
        nix::sys::signal::kill(self.pid(), nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
        let status = self.child.wait().expect("wait for serve");
        let stderr = self
            .stderr
            .take()
            .expect("stderr read once")
            .join()
            .expect("the stderr reader");
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
    // A server that takes the connection and never answers fails the test
    // rather than hangs it.
    stream
        .set_read_timeout(Some(Duration::from_mins(1)))
        .expect("a read timeout");
    let mut raw = String::new();
    stream
        .read_to_string(&mut raw)
        .unwrap_or_else(|e| panic!("no whole reply to {method} {path} within a minute: {e}"));
    let (head, body) = raw.split_once("\r\n\r\n").expect("a header block");
    let (status, headers) = status_and_headers(head);
    Reply {
        status,
        headers,
        body: body.to_owned(),
    }
}

/// An answer's head (without its blank line) read: its status and its
/// headers (names lowercase).
fn status_and_headers(head: &str) -> (u16, Vec<(String, String)>) {
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
    (status, headers)
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
    let db = kasparov_db("serve_stop");
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

/// The bytes `server` sends back for `sent` written on one connection, up
/// to its end (or what came within `wait`, then `None` as the end).
fn raw(server: &Server, sent: &[u8], wait: Duration) -> (Vec<u8>, Option<Duration>) {
    let started = Instant::now();
    let mut stream = TcpStream::connect(&server.address).expect("connect to serve");
    stream.set_read_timeout(Some(wait)).expect("a read timeout");
    stream.write_all(sent).expect("send");
    let mut got = Vec::new();
    let mut buf = [0_u8; 8192];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return (got, Some(started.elapsed())),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                return (got, Some(started.elapsed()));
            }
            Err(_) => return (got, None),
        }
    }
}

/// The answers in `bytes`, in order: status, headers (names lowercase) and
/// body, read by their `content-length` (a HEAD's answer: no body).
fn answers(mut bytes: &[u8], heads: &[bool]) -> Vec<Reply> {
    let mut out = Vec::new();
    for &head_only in heads {
        let end = bytes
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .unwrap_or_else(|| panic!("no head in {:?}", String::from_utf8_lossy(bytes)));
        let (status, headers) = status_and_headers(&String::from_utf8_lossy(&bytes[..end]));
        let length: usize = headers
            .iter()
            .find(|(n, _)| n == "content-length")
            .map_or(0, |(_, v)| v.parse().expect("a length"));
        let body_len = if head_only { 0 } else { length };
        let body = String::from_utf8_lossy(&bytes[end + 4..end + 4 + body_len]).into_owned();
        bytes = &bytes[end + 4 + body_len..];
        out.push(Reply {
            status,
            headers,
            body,
        });
    }
    assert!(
        bytes.is_empty(),
        "more than the answers: {:?}",
        String::from_utf8_lossy(bytes)
    );
    out
}

/// Issue 45 item 12: every error is JSON, also those the framework and
/// hyper answer before any handler (a method not allowed, a path that
/// does not decode, a head too large or unreadable), and a keep-alive
/// connection's answers stay whole around them: a HEAD's answer (no body),
/// then answers, then hyper's own answer to a malformed request, in one
/// pipelined write.
#[test]
fn every_error_is_json_even_the_http_layers() {
    let server = Server::start(corpus());
    let method = request(&server, "POST", "/lichess", &[]);
    assert_eq!(method.status, 405);
    assert!(!method.error().is_empty());
    assert!(method.header("allow").is_some_and(|a| a.contains("GET")));
    let undecodable = get(&server, "/game/%FF%FE");
    assert_eq!(undecodable.status, 400);
    assert!(
        undecodable.error().contains("UTF-8"),
        "{}",
        undecodable.body
    );
    let big = "x".repeat(20_000);
    let too_large = request(&server, "GET", "/lichess", &[("X-Big", &big)]);
    assert_eq!(too_large.status, 431);
    assert!(
        too_large.error().contains("too large"),
        "{}",
        too_large.body
    );
    assert_eq!(too_large.header("access-control-allow-origin"), Some("*"));
    let long_url = get(&server, &format!("/lichess?play={big}"));
    assert_eq!(long_url.status, 431);
    long_url.error();
    let (bytes, end) = raw(&server, b"GARBAGE\r\n\r\n", Duration::from_secs(30));
    assert!(end.is_some(), "the connection is closed after it");
    let garbage = answers(&bytes, &[false]);
    assert_eq!(garbage[0].status, 400);
    garbage[0].error();

    let host = format!("Host: {}\r\n", server.address);
    let mut pipelined = Vec::new();
    for line in [
        "HEAD /lichess?play=e2e4 HTTP/1.1\r\n",
        "GET /lichess?play=e2e4 HTTP/1.1\r\n",
        "GET /no-such-thing HTTP/1.1\r\n",
    ] {
        pipelined.extend_from_slice(line.as_bytes());
        pipelined.extend_from_slice(host.as_bytes());
        pipelined.extend_from_slice(b"\r\n");
    }
    pipelined.extend_from_slice(b"GET /lichess HTTP/1.1\r\nBroken header line\r\n\r\n");
    let (bytes, end) = raw(&server, &pipelined, Duration::from_secs(30));
    assert!(end.is_some(), "the connection is closed after the last");
    let replies = answers(&bytes, &[true, false, false, false]);
    let statuses: Vec<u16> = replies.iter().map(|r| r.status).collect();
    assert_eq!(statuses, [200, 200, 404, 400]);
    assert_eq!(
        replies[0].header("content-length"),
        replies[1].header("content-length")
    );
    serde_json::from_str::<Value>(&replies[1].body).expect("the answer whole");
    replies[2].error();
    assert!(
        replies[3].error().contains("HTTP/1.1"),
        "{}",
        replies[3].body
    );
    let (status, stderr) = server.terminate();
    assert!(status.success(), "{stderr}");
}

/// Issue 45 item 11: a NUL byte in a game id, a player's name or `vs=`
/// (which PostgreSQL text cannot hold) is a 404 or a 400, never a 500;
/// and nothing a client sends or the database holds reaches the server's
/// log unescaped: a player whose stored tags the PGN writer cannot write
/// (a tag name holding a newline, a forged log line and an ESC) is
/// skipped, and the log says so on one line, escaped.
#[test]
fn a_nul_is_a_404_or_400_and_the_log_is_escaped() {
    let db = fresh_db("serve_nul");
    assert_ok(
        &import(&db, &["-q"], &[data("kasparov-deep-blue-1997.pgn")]),
        &[0],
    );
    db.psql(
        "UPDATE games SET tags = tags || jsonb_build_object(E'X\\npgnload serve: stopped\\u001b[2J', 5) \
         WHERE id = (SELECT min(id) FROM games)",
    );
    let server = Server::start(&db);
    for (path, status) in [
        ("/game/lichess:a%00b", 404),
        ("/game/x%0Apgnload%20serve:%20stopped%00", 404),
        (
            "/api/games/user/Garry%20Kasparov%00%0Apgnload%20serve:%20stopped",
            404,
        ),
        ("/api/games/user/Garry%20Kasparov?vs=Deep%20Blue%00%1B", 400),
    ] {
        let reply = get(&server, path);
        assert_eq!(reply.status, status, "{path}: {}", reply.body);
        assert!(reply.error().contains("NUL"), "{path}: {}", reply.body);
    }
    let skipping = get(&server, "/api/games/user/Garry%20Kasparov");
    assert_eq!(skipping.status, 200, "{}", skipping.body);
    assert_eq!(skipping.header("x-pgnload-skipped-games"), Some("1"));
    let (status, stderr) = server.terminate();
    assert!(status.success(), "{stderr}");
    assert!(!stderr.contains('\u{1b}'), "{stderr:?}");
    let stopped = stderr
        .lines()
        .filter(|line| line.starts_with("pgnload serve: stopped"))
        .count();
    assert_eq!(stopped, 1, "a forged line: {stderr}");
    assert!(
        stderr.contains("tag X\\u{a}pgnload serve: stopped\\u{1b}[2J holds 5"),
        "{stderr}"
    );
}

/// Issue 45 item 9: under a file descriptor limit of 128 (`prlimit`), 600
/// connections held open and idle by one client never keep another
/// client out: the server holds at most 88 (128 less 32 and two per
/// database connection), closes the oldest idle one for each new one,
/// answers the new client at once, and says so on stderr.
#[test]
fn idle_connections_never_exhaust_the_file_descriptors() {
    let db = kasparov_db("serve_fds");
    let pgnload = db.pgnload();
    let mut command = Command::new("prlimit");
    command
        .arg("--nofile=128")
        .arg("--")
        .arg(pgnload.get_program())
        .args(["serve", "--listen", "127.0.0.1:0", "--connections", "4"])
        .env("DATABASE_URL", &db.url);
    let server = Server::spawn(command);
    let held: Vec<TcpStream> = (0..600)
        .map(|i| {
            TcpStream::connect(&server.address)
                .unwrap_or_else(|e| panic!("connection {i} of the idle ones: {e}"))
        })
        .collect();
    for _ in 0..3 {
        let started = Instant::now();
        let reply = get(&server, "/lichess?play=e2e4");
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "answered in {:?}",
            started.elapsed()
        );
    }
    let closed = held
        .iter()
        .filter(|stream| {
            stream
                .set_read_timeout(Some(Duration::from_millis(20)))
                .expect("a read timeout");
            match (&**stream).read(&mut [0_u8; 1]) {
                Ok(n) => n == 0,
                Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
            }
        })
        .count();
    assert!(
        closed >= 600 - 88,
        "{closed} of the idle connections closed"
    );
    let (status, stderr) = server.terminate();
    assert!(status.success(), "{stderr}");
    assert!(
        stderr.contains("at the connection limit (88 connections, from ulimit -n 128)"),
        "{stderr}"
    );
}

/// Issue 45 item 9: a client trickling its request head (a header line
/// every 300 ms) is dropped once `--idle-seconds` have passed, and so is
/// an idle keep-alive connection after its answer.
#[test]
fn a_trickled_head_and_an_idle_connection_are_dropped_after_idle_seconds() {
    let server = Server::start_with(corpus(), &["--idle-seconds", "2"]);
    let started = Instant::now();
    let mut stream = TcpStream::connect(&server.address).expect("connect");
    stream
        .write_all(b"GET /lichess HTTP/1.1\r\n")
        .expect("the request line");
    let mut dropped = None;
    for _ in 0..40 {
        std::thread::sleep(Duration::from_millis(300));
        // The first write after the close may still pass; the next fails.
        if stream.write_all(b"X-Slow: 1\r\n").is_err() {
            dropped = Some(started.elapsed());
            break;
        }
    }
    let took = dropped.expect("a trickling client is dropped");
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(8),
        "dropped after {took:?}"
    );

    let host = format!(
        "GET /no-such-thing HTTP/1.1\r\nHost: {}\r\n\r\n",
        server.address
    );
    let (bytes, end) = raw(&server, host.as_bytes(), Duration::from_secs(10));
    assert_eq!(answers(&bytes, &[false])[0].status, 404);
    let end = end.expect("the idle connection is closed");
    assert!(
        end >= Duration::from_secs(2) && end < Duration::from_secs(8),
        "closed after {end:?}"
    );
    let (status, stderr) = server.terminate();
    assert!(status.success(), "{stderr}");
}

/// Runs `sql` in a psql session held open (for up to a minute) once it
/// has run: a lock it takes is held until the session is killed.
fn holding(db: &TestDb, sql: &str) -> Child {
    let mut psql = Command::new("psql")
        .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", &db.url])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("psql");
    let mut stdin = psql.stdin.take().expect("piped stdin");
    writeln!(stdin, "BEGIN; {sql}; SELECT 'held';").expect("send the SQL");
    let mut line = String::new();
    BufReader::new(psql.stdout.take().expect("piped stdout"))
        .read_line(&mut line)
        .expect("read psql");
    assert_eq!(line.trim(), "held", "{line}");
    // Kept open: psql waits for more on its stdin.
    std::mem::forget(stdin);
    psql
}

/// Waits (up to a minute) until `count` sessions of pgnload on `db` are
/// in `state` (a condition on `pg_stat_activity`).
fn until_sessions(db: &TestDb, state: &str, count: usize) {
    let deadline = Instant::now() + Duration::from_mins(1);
    let sql = format!(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
         AND application_name LIKE 'pgnload%' AND {state}"
    );
    while db.psql(&sql) != count.to_string() {
        assert!(Instant::now() < deadline, "not {count} sessions {state}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until the server's sessions (its 4 pooled connections, the one
/// following changes, the one holding the database) are open and idle
/// (each pooled one plans its statements first, reading `explorer_state`).
fn pool_ready(db: &TestDb) {
    until_sessions(db, "state = 'idle'", 6);
}

/// Issue 45 items 8 and 9: a statement of the server that waits for a
/// lock (here `explorer_state`'s, held by a psql session) gives up after
/// `--wait-seconds` and its request is answered 503, not held; and after
/// SIGTERM the server exits within `--shutdown-seconds` although a request
/// is still under way (waiting for that lock) and another client has sent
/// half a request.
#[test]
fn a_waiting_request_is_503_and_sigterm_exits_by_the_deadline() {
    let db = kasparov_db("serve_deadline");
    let lock = "LOCK TABLE explorer_state IN ACCESS EXCLUSIVE MODE";

    let server = Server::start_with(&db, &["--wait-seconds", "1"]);
    pool_ready(&db);
    let mut locker = holding(&db, lock);
    let started = Instant::now();
    let reply = get(&server, "/lichess?play=d2d4");
    assert_eq!(reply.status, 503, "{}", reply.body);
    assert!(reply.error().contains("time limits"), "{}", reply.body);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let (status, stderr) = server.terminate();
    assert!(status.success(), "{stderr}");
    assert!(stderr.contains("lock timeout"), "{stderr}");
    let _ = locker.kill();
    let _ = locker.wait();

    let server = Server::start_with(&db, &["--wait-seconds", "60", "--shutdown-seconds", "2"]);
    pool_ready(&db);
    let mut locker = holding(&db, lock);
    let address = server.address.clone();
    let waiting = std::thread::spawn(move || {
        let mut stream = TcpStream::connect(&address).expect("connect");
        let _ = stream.write_all(b"GET /lichess?play=c2c4 HTTP/1.1\r\nHost: x\r\n\r\n");
        let mut rest = Vec::new();
        let _ = stream.read_to_end(&mut rest);
        rest
    });
    let mut half = TcpStream::connect(&server.address).expect("connect");
    half.write_all(b"GET /lichess HTTP/1.1\r\nHost: x\r\n")
        .expect("half a request");
    // The request waits for the lock.
    until_sessions(&db, "wait_event_type = 'Lock'", 1);
    let stopping = Instant::now();
    let (status, stderr) = server.terminate();
    let took = stopping.elapsed();
    assert!(status.success(), "{stderr}");
    assert!(took < Duration::from_secs(8), "exited after {took:?}");
    assert!(
        stderr.contains("1 connections still answering at the shutdown deadline (2 s): closed"),
        "{stderr}"
    );
    assert!(waiting.join().expect("the waiting client").is_empty());
    let _ = locker.kill();
    let _ = locker.wait();
}

/// What an unfinished bulk load leaves a reader, made by hand (a real one
/// is below): its row in `import_bulk_loads`, `positions` without its key,
/// and a position twice. Issue 45 item 8: `/lichess` answered 500 ("query
/// returned an unexpected number of rows") there. Now every endpoint is a
/// 503 naming the load, at once, and `explore` says the same (exit 2):
/// neither looks the position up.
#[test]
fn while_a_bulk_load_is_unfinished_serve_and_explore_refuse_at_once() {
    let db = kasparov_db("serve_unfinished");
    let server = Server::start(&db);
    let load = db.psql(
        "ALTER TABLE positions DROP CONSTRAINT positions_normalized_fen_key;
         CREATE TEMP TABLE twice AS SELECT * FROM positions
             WHERE id = (SELECT initial_position_id FROM games ORDER BY id LIMIT 1);
         UPDATE twice SET id = (SELECT max(id) + 1 FROM positions);
         INSERT INTO positions SELECT * FROM twice;
         INSERT INTO import_bulk_loads (state, needs_dedup) VALUES ('loading', true) RETURNING id",
    );
    let named = format!("bulk load #{load} is unfinished");
    for path in [
        "/lichess",
        "/lichess?play=e2e4",
        "/game/1",
        "/api/games/user/Garry%20Kasparov",
    ] {
        let started = Instant::now();
        let reply = request(&server, "GET", path, &[("Cache-Control", "no-cache")]);
        assert_eq!(reply.status, 503, "{path}: {}", reply.body);
        assert!(reply.error().contains(&named), "{path}: {}", reply.body);
        assert_eq!(reply.header("retry-after"), Some("1"));
        assert!(started.elapsed() < Duration::from_secs(5), "{path}");
    }
    let out = db.quiet(&["explore", "--json"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&named),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stdout.is_empty());
    let (status, stderr) = server.terminate();
    assert!(status.success(), "{stderr}");
}

/// The longest a statement of the server ran, and the longest a session
/// of the bulk load waited for a lock a session of the server held, in
/// seconds, as sampled from `pg_stat_activity` (every 100 ms) until
/// `done`.
fn watch_serve_sessions(db: &TestDb, done: &std::sync::atomic::AtomicBool) -> (f64, f64) {
    let (mut ran, mut blocked) = (0_f64, 0_f64);
    while !done.load(std::sync::atomic::Ordering::SeqCst) {
        let sample = db.psql(
            "SELECT coalesce(max(extract(epoch FROM clock_timestamp() - query_start)) \
                 FILTER (WHERE application_name = 'pgnload serve' AND state = 'active'), 0), \
             coalesce(max(extract(epoch FROM clock_timestamp() - query_start)) \
                 FILTER (WHERE application_name <> 'pgnload serve' AND EXISTS ( \
                     SELECT 1 FROM pg_stat_activity b \
                     WHERE b.pid = ANY (pg_blocking_pids(a.pid)) \
                       AND b.application_name = 'pgnload serve')), 0) \
             FROM pg_stat_activity a WHERE datname = current_database()",
        );
        let (a, b) = sample.split_once('|').expect("two values");
        ran = ran.max(a.parse().expect("seconds"));
        blocked = blocked.max(b.parse().expect("seconds"));
        std::thread::sleep(Duration::from_millis(100));
    }
    (ran, blocked)
}

/// Issue 45 item 8, with a real bulk load (3,504 games) under a running
/// server asked without pause for an explorer answer, a game and a
/// player's games: every answer comes at once (within `--query-seconds`,
/// 5 here) and is a JSON 503 with `Retry-After` (while the load is
/// unfinished) or right (what it was before the load, or what `explore`
/// and `games` say after it); no statement of the server runs longer than
/// 5 s, and none holds up the load (the stated bound: no session of the
/// load waits longer than 5 s for a lock a session of the server holds).
#[test]
fn during_a_bulk_load_every_answer_is_at_once_a_503_or_right() {
    let dir = scratch_dir("pgnload-serve-bulk-");
    let db = kasparov_db("serve_bulk");
    let corpus = dir.path().join("corpus.pgn");
    std::fs::write(&corpus, (1..=8).map(renamed_sample).collect::<String>()).expect("corpus");
    let server = Server::start_with(&db, &["--query-seconds", "5"]);
    let game = db.psql("SELECT source || ':' || external_id FROM games ORDER BY id LIMIT 1");
    let paths = [
        "/lichess?play=e2e4".to_owned(),
        format!("/game/{game}"),
        "/api/games/user/Garry%20Kasparov".to_owned(),
    ];
    let before: Vec<String> = paths
        .iter()
        .map(|path| {
            let reply = get(&server, path);
            assert_eq!(reply.status, 200, "{path}: {}", reply.body);
            reply.body
        })
        .collect();

    let done = std::sync::atomic::AtomicBool::new(false);
    let (replies, watched, load) = std::thread::scope(|scope| {
        let watcher = scope.spawn(|| watch_serve_sessions(&db, &done));
        let mut load = db
            .pgnload()
            .args(["-q", "import", "--mode", "bulk"])
            .arg(&corpus)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the bulk load");
        let mut replies = Vec::new();
        while matches!(load.try_wait(), Ok(None)) {
            for (i, path) in paths.iter().enumerate() {
                let started = Instant::now();
                let reply = get(&server, path);
                replies.push((i, reply, started.elapsed()));
            }
        }
        let load = load.wait_with_output().expect("the bulk load");
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        (replies, watcher.join().expect("the watcher"), load)
    });
    assert_ok(&load, &[0]);

    let after = [
        stdout_of(&db, &["explore", "--json", "--play", "e2e4"]),
        stdout_of(&db, &["game", "show", &game]),
        stdout_of(
            &db,
            &["games", "--player", "Garry Kasparov", "--format", "pgn"],
        ),
    ];
    let refused = refused_else_right(&paths, &replies, &before, &after);
    assert!(
        refused.iter().all(|&n| n > 0),
        "asked during the load: {refused:?} 503s of {} answers",
        replies.len()
    );
    let (ran, blocked) = watched;
    assert!(ran < 6.0, "a statement of the server ran {ran} s");
    assert!(blocked < 6.0, "the load waited {blocked} s for the server");
    let (status, stderr) = server.terminate();
    assert!(status.success(), "{stderr}");
}

/// Checks each of `replies` (the index of its path in `paths`, the reply,
/// how long it took) to questions asked during a bulk load: within 5 s, a
/// 503 naming the load, or right (`before` or `after` the load, the
/// answer's JSON compared for the explorer's, the text for the others,
/// which the load does not change). Returns the 503s of each path.
fn refused_else_right(
    paths: &[String],
    replies: &[(usize, Reply, Duration)],
    before: &[String],
    after: &[String],
) -> [usize; 3] {
    let mut refused = [0; 3];
    for (i, reply, took) in replies {
        assert!(
            *took < Duration::from_secs(5),
            "{} took {took:?}: {} {}",
            paths[*i],
            reply.status,
            reply.body
        );
        match reply.status {
            503 => {
                refused[*i] += 1;
                assert!(reply.error().contains("bulk load"), "{}", reply.body);
                assert_eq!(reply.header("retry-after"), Some("1"));
            }
            200 if *i == 0 => {
                let answer: Value = serde_json::from_str(&reply.body).expect("JSON");
                let right = [&before[0], &after[0]]
                    .iter()
                    .any(|text| serde_json::from_str::<Value>(text).ok() == Some(answer.clone()));
                assert!(right, "neither before nor after: {}", reply.body);
            }
            200 => assert!(
                reply.body == before[*i] && reply.body == after[*i],
                "{}: {}",
                paths[*i],
                reply.body
            ),
            _ => panic!("{}: {} {}", paths[*i], reply.status, reply.body),
        }
    }
    refused
}

/// Issue 45 item 13: a 503 tells the client why in general, never what
/// the error says: here the embedded server was stopped and cannot start
/// again (a bad setting), and the error that the server's log shows names
/// the data directory, `pg_ctl`, and quotes the server log's lines.
#[test]
fn a_503_names_no_path_command_or_server_log() {
    let dir = scratch_dir("pgnload-serve-embedded-");
    let data_dir = dir.path().join("data");
    let imported = run({
        let mut c = embedded_pgnload(&data_dir);
        c.args(["-q", "import"])
            .arg(data("kasparov-deep-blue-1997.pgn"));
        c
    });
    assert_ok(&imported, &[0]);
    enable_explorer(embedded_pgnload(&data_dir));
    let mut command = embedded_pgnload(&data_dir);
    command.args(["serve", "--listen", "127.0.0.1:0", "--wait-seconds", "1"]);
    let server = Server::spawn(command);
    assert_eq!(get(&server, "/lichess").status, 200);
    let cluster = pgnload::store::embedded::EmbeddedCluster::new(&data_dir).expect("the cluster");
    let auto_conf = cluster.pgdata().join("postgresql.auto.conf");
    let saved = std::fs::read_to_string(&auto_conf).expect("postgresql.auto.conf");
    std::fs::write(&auto_conf, format!("{saved}work_mem = 'lots'\n")).expect("a bad setting");
    let postmaster: i32 = std::fs::read_to_string(cluster.pgdata().join("postmaster.pid"))
        .expect("postmaster.pid")
        .lines()
        .next()
        .and_then(|pid| pid.trim().parse().ok())
        .expect("the server's pid");
    // An immediate shutdown: the server is gone, and its next start fails.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(postmaster),
        nix::sys::signal::Signal::SIGQUIT,
    )
    .expect("stop the server");
    // Once the pool has tried to connect again (a request under way when
    // the server went may get a 503 of its own before).
    let reply = until(&server, "/lichess?play=e2e4", |reply| {
        reply.status == 503 && reply.body.contains("no database connection in time")
    });
    assert!(reply.error().contains("not available"), "{}", reply.body);
    for secret in [
        &dir.path().display().to_string(),
        "pg_ctl",
        "lots",
        "work_mem",
        "PostgreSQL",
        "server log",
    ] {
        assert!(!reply.body.contains(secret), "{secret:?} in {}", reply.body);
    }
    let (_, stderr) = server.terminate();
    assert!(
        stderr.contains("pg_ctl") && stderr.contains("lots"),
        "{stderr}"
    );
}
