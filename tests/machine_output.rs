//! Machine-readable output (issue 28, item 7): every JSON output's times
//! are RFC 3339, and `import --summary-json` says what the run did, adding
//! up, as the human summary does.

use std::{path::Path, process::Command};

use crate::{
    common::{TestDb, data, fresh_db, run, scratch_dir, stderr},
    import::assert_ok,
};

/// Checks with python3 that `json` parses with its `json` module and that
/// every value of a key ending in `_at` is a string that
/// `datetime.fromisoformat` reads and that has the strict RFC 3339 shape
/// JavaScript's `Date` and jq's `fromdate` read (`YYYY-MM-DDTHH:MM:SSZ`);
/// returns how many times were checked.
fn python_checks_times(json: &str) -> usize {
    const SCRIPT: &str = r#"
import datetime, json, re, sys
RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})")
seen = 0
def walk(value):
    global seen
    if isinstance(value, dict):
        for key, item in value.items():
            if key.endswith("_at") and item is not None:
                assert isinstance(item, str) and RFC3339.fullmatch(item), (key, item)
                assert item.endswith("Z"), (key, item)
                datetime.datetime.fromisoformat(item)
                seen += 1
            walk(item)
    elif isinstance(value, list):
        for item in value:
            walk(item)
walk(json.loads(sys.stdin.read()))
print(seen)
"#;
    let mut child = Command::new("python3")
        .args(["-c", SCRIPT])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    std::io::Write::write_all(child.stdin.as_mut().expect("stdin"), json.as_bytes())
        .expect("write to python3");
    let out = child.wait_with_output().expect("python3");
    assert!(out.status.success(), "{}\n{json}", stderr(&out));
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("a count")
}

#[test]
fn every_json_output_writes_rfc3339_times() {
    let db = fresh_db("json_times");
    assert_ok(
        &run({
            let mut c = db.pgnload();
            c.args(["-q", "import"])
                .arg(data("lichess-2025-05-sample.pgn"));
            c
        }),
        &[0],
    );
    let status = db.quiet_ok(&["status", "--json"]);
    assert_eq!(python_checks_times(&status), 1, "{status}");
    // One JSON document per game: checked as a list.
    let games = db.quiet_ok(&["games", "--format", "json", "--limit", "5"]);
    let list = format!("[{}]", games.trim_end().replace('\n', ","));
    assert_eq!(python_checks_times(&list), 5, "{games}");
}

/// The numbers of the human summary's `games:` line: read, imported,
/// present, rejected, filtered.
fn human_counts(stderr: &str) -> Vec<u64> {
    let line = stderr
        .lines()
        .find(|l| l.trim_start().starts_with("games:"))
        .unwrap_or_else(|| panic!("no summary in {stderr}"));
    line.split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().expect("number"))
        .collect()
}

/// `value[key]` as a number.
fn n(value: &serde_json::Value, key: &str) -> u64 {
    value[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} in {value}"))
}

/// Asserts `games` (an object with `games` and `rejects_by_reason`) adds
/// up: read = imported + present + rejected + filtered, and the rejects by
/// reason add up to rejected.
fn assert_adds_up(counts: &serde_json::Value) {
    let games = &counts["games"];
    assert_eq!(
        n(games, "read"),
        n(games, "imported") + n(games, "present") + n(games, "rejected") + n(games, "filtered"),
        "{counts}"
    );
    let by_reason: u64 = counts["rejects_by_reason"]
        .as_object()
        .expect("rejects_by_reason")
        .values()
        .map(|v| v.as_u64().expect("count"))
        .sum();
    assert_eq!(by_reason, n(games, "rejected"), "{counts}");
}

/// An input with one game of each of two kinds of reject and one good game.
fn bad_input(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("bad.pgn");
    std::fs::write(
        &path,
        "[Event \"a\"]\n\n1. e4 e5 2. Ke3 *\n\n[Event \"b\"]\n\n1. e4 xyz 1-0\n\n\
         [Event \"c\"]\n\n1. d4 d5 *\n\n",
    )
    .expect("write");
    path
}

#[test]
fn the_summary_json_adds_up_and_equals_the_human_summary() {
    let dir = scratch_dir("pgnload-summary-json-");
    let db = fresh_db("summary_json");
    let file = dir.path().join("summary.json");
    let missing = dir.path().join("missing.pgn");
    let out = run({
        let mut c = db.pgnload();
        c.args(["import", "--summary-json"])
            .arg(&file)
            .arg(data("lichess-2025-05-sample.pgn"))
            .arg(bad_input(dir.path()))
            .arg(&missing);
        c
    });
    // An input failed: exit 2, and the summary says so.
    assert_ok(&out, &[2]);
    let text = std::fs::read_to_string(&file).expect("the summary was written");
    assert_eq!(python_checks_times(&text), 2, "{text}");
    let json: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(json["exit_code"], 2);
    assert_eq!(json["exit_status"], "failed");
    let totals = &json["totals"];
    assert_adds_up(totals);
    let human = human_counts(&stderr(&out));
    let games = &totals["games"];
    assert_eq!(
        human,
        ["read", "imported", "present", "rejected", "filtered"].map(|k| n(games, k))
    );
    assert_eq!(
        totals["rejects_by_reason"],
        serde_json::json!({"garbage": 1, "illegal_move": 1})
    );
    // Per input, in order, each adding up, together the totals.
    let inputs = json["inputs"].as_array().expect("inputs");
    let outcomes: Vec<&str> = inputs
        .iter()
        .map(|i| i["outcome"].as_str().expect("outcome"))
        .collect();
    assert_eq!(outcomes, ["imported", "imported", "failed"]);
    assert!(
        inputs[2]["error"]
            .as_str()
            .is_some_and(|e| e.contains("missing.pgn")),
        "{}",
        inputs[2]
    );
    for key in ["read", "imported", "present", "rejected", "filtered"] {
        let sum: u64 = inputs.iter().map(|i| n(&i["games"], key)).sum();
        assert_eq!(sum, n(games, key), "{key}");
    }
    for input in inputs {
        assert_adds_up(input);
    }
    assert_eq!(n(&inputs[1]["games"], "imported"), 1);
    assert_eq!(n(&totals["inputs"], "failed"), 1);
    assert_eq!(n(&totals["inputs"], "imported"), 2);
    assert_eq!(n(&totals["inputs"], "given"), 3);
    assert_eq!(json["mode"], "bulk");
    assert!(json["bulk_load"]["rebuild_seconds"].as_f64().is_some());
    assert!(json["import_seconds"].as_f64().is_some());

    // Imported again to stdout: every game present, exit 0 (the rejects
    // were the earlier run's).
    let again = run({
        let mut c = db.pgnload();
        c.args(["-q", "import", "--restart", "--summary-json", "-"])
            .arg(data("lichess-2025-05-sample.pgn"));
        c
    });
    assert_ok(&again, &[0]);
    let json: serde_json::Value = serde_json::from_slice(&again.stdout).expect("JSON on stdout");
    assert_eq!(json["exit_code"], 0);
    assert_eq!(json["mode"], "incremental");
    assert_adds_up(&json["totals"]);
    assert_eq!(
        n(&json["totals"]["games"], "present"),
        n(&json["totals"]["games"], "read")
    );
}

#[test]
fn a_run_that_fails_before_its_inputs_still_writes_its_summary() {
    let dir = scratch_dir("pgnload-summary-json-fail-");
    let db: TestDb = fresh_db("summary_json_fail");
    let out = run({
        let mut c = db.pgnload();
        c.args(["-q", "import", "--summary-json", "-", "--rejects"])
            .arg(dir.path().join("no-such-dir/rejects.pgn"))
            .arg(data("lichess-2025-05-sample.pgn"));
        c
    });
    assert_ok(&out, &[2]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert_eq!(json["exit_code"], 2);
    assert!(
        json["error"]
            .as_str()
            .is_some_and(|e| e.contains("rejects.pgn")),
        "{json}"
    );
    assert_eq!(json["totals"], serde_json::Value::Null);
    assert_eq!(
        python_checks_times(&String::from_utf8_lossy(&out.stdout)),
        2
    );
}
