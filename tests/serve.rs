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
    common::{TestDb, data, data_pgns, enable_explorer, fresh_db, run},
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
        let mut child = db
            .pgnload()
            .args(["serve", "--listen", "127.0.0.1:0"])
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

#[test]
fn a_lost_connection_is_a_503_then_replaced_and_sigterm_stops_with_0() {
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
    let reply = get(&server, "/lichess");
    assert_eq!(reply.status, 503, "{}", reply.body);
    assert_eq!(reply.header("retry-after"), Some("1"));
    assert!(reply.error().contains("connection"), "{}", reply.body);
    // The lost connection was not given back: the next one is new.
    let reply = get(&server, "/lichess");
    assert_eq!(reply.status, 200, "{}", reply.body);
    let (status, stderr) = server.terminate();
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("pgnload serve: stopped"), "{stderr}");
}

/// The server keeps the start position's counts that price its walks
/// (`explorer::answers::Everywhere`) between answers: an import after an
/// answer must still be in the next one, which says what `explore --json`
/// (which keeps nothing) says.
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
    let after = ask();
    let expected: Value =
        serde_json::from_str(&stdout_of(&db, &["explore", "--json"])).expect("JSON");
    assert_eq!(after, expected);
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
