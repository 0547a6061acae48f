//! `pgnload status` tells a live import from one whose importer died.

use std::{
    io::Write,
    process::{Child, Stdio},
    thread,
    time::Duration,
};

use nix::{
    sys::signal::{Signal, kill},
    unistd::Pid,
};

use crate::common::{TestDb, data, migrated_db, run};

/// `pgnload status --json` for the database's only input.
fn status_json(db: &TestDb) -> serde_json::Value {
    let out = run({
        let mut c = db.pgnload();
        c.args(["status", "--json"]);
        c
    });
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let all: serde_json::Value = serde_json::from_slice(&out.stdout).expect("status prints JSON");
    assert_eq!(all.as_array().map(Vec::len), Some(1), "{all}");
    all[0].clone()
}

/// Waits until the import of stdin is recorded as running (the importer
/// then holds its input's lock and waits for more input).
fn wait_until_running(db: &TestDb, importer: &mut Child) {
    loop {
        if db.psql("SELECT count(*) FROM import_files WHERE state = 'running'") == "1" {
            return;
        }
        if let Some(status) = importer.try_wait().expect("polling the importer") {
            panic!("the importer ended early: {status}");
        }
        thread::sleep(Duration::from_millis(50));
    }
}

/// Issue 12 item 22: after a SIGKILL the recorded state stays `running`;
/// status must show the input as interrupted, in text and JSON.
#[test]
fn a_killed_importer_is_shown_interrupted() {
    let db = migrated_db("status_kill");
    let mut importer = db
        .pgnload()
        .args(["import", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting pgnload import -");
    let mut stdin = importer.stdin.take().expect("piped stdin");
    stdin
        .write_all(&std::fs::read(data("kasparov-deep-blue-1997.pgn")).expect("test data"))
        .expect("feeding the importer");
    // stdin stays open: the importer keeps waiting for more games.
    wait_until_running(&db, &mut importer);

    let live = status_json(&db);
    assert_eq!(live["state"], "running", "{live}");
    assert_eq!(live["importer_active"], true, "{live}");

    let pid = i32::try_from(importer.id()).expect("pid fits");
    kill(Pid::from_raw(pid), Signal::SIGKILL).expect("SIGKILL");
    importer.wait().expect("reaping the importer");
    drop(stdin);
    // The server notices the dead client and drops its session's locks;
    // until then the lock (correctly) still looks held.
    let dead = loop {
        let dead = status_json(&db);
        if dead["importer_active"] != true {
            break dead;
        }
        thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(dead["state"], "interrupted", "{dead}");
    assert_eq!(dead["recorded_state"], "running", "{dead}");

    let out = run({
        let mut c = db.pgnload();
        c.arg("status");
        c
    });
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("interrupted"), "{text}");
    assert!(!text.contains("running"), "{text}");
}
