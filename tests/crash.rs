//! The server crashing under an import: immediate shutdowns and SIGKILLs of
//! the postmaster of the embedded cluster pgnload runs itself, then the
//! same command again. The database must equal a clean import, and
//! `verify --games` must find every position a game or move points at.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use nix::{
    sys::signal::{Signal, kill},
    unistd::Pid,
};
use pgnload::store::embedded::{ClusterStatus, EmbeddedCluster};

use crate::{
    common::{
        TestDb, assert_games_verify_clean, embedded_pgnload, enable_explorer, fresh_db, run,
        scratch_dir,
    },
    import::content_dump,
    resume::corpus_with_copies,
};

/// `pgnload import` on the embedded cluster in `data_dir` (no URL).
fn embedded_import(data_dir: &Path, mode: &str, files: &[PathBuf]) -> Command {
    let mut cmd = embedded_pgnload(data_dir);
    cmd.args(["-q", "import", "--batch-games", "50", "--mode", mode])
        .args(files)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd
}

/// The postmaster's pid once the cluster runs and the import has written
/// something (a checkpoint moved), so that the crash lands mid-import.
fn postmaster_when_importing(cluster: &EmbeddedCluster, child: &mut std::process::Child) -> u32 {
    let started = Instant::now();
    loop {
        assert!(
            started.elapsed() < Duration::from_mins(1),
            "the import never got going"
        );
        assert!(
            child.try_wait().expect("wait").is_none(),
            "the import ended before the crash"
        );
        if let Ok(ClusterStatus::Running { pid }) = cluster.status() {
            let db = TestDb::existing(cluster.connection_url());
            let written = Command::new("psql")
                .args(["-X", "-A", "-t", &db.url, "-c"])
                .arg("SELECT coalesce(sum(games_done), 0) FROM import_files")
                .output()
                .ok()
                .and_then(|o| String::from_utf8(o.stdout).ok())
                .and_then(|s| s.trim().parse::<i64>().ok())
                .unwrap_or(0);
            if written > 0 {
                return pid;
            }
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until the postmaster is gone (its backends with it).
fn wait_stopped(cluster: &EmbeddedCluster, pid: u32) {
    let started = Instant::now();
    while kill(Pid::from_raw(i32::try_from(pid).expect("pid")), None).is_ok() {
        assert!(
            started.elapsed() < Duration::from_mins(1),
            "postmaster {pid} did not stop"
        );
        thread::sleep(Duration::from_millis(20));
    }
    let _ = cluster.status();
}

/// One trial: import, crash the server with `signal` some time in, let the
/// first run end however it ends, rerun, and compare.
fn crash_trial(dir: &Path, trial: usize, mode: &str, signal: Signal, delay: Duration) -> String {
    let data_dir = dir.join(format!("cluster-{mode}-{trial}"));
    let files = corpus_with_copies(dir, 4);
    let cluster = EmbeddedCluster::new(&data_dir).expect("cluster");
    // Counters on, so that the verify below proves them crash-safe too.
    enable_explorer(embedded_pgnload(&data_dir));
    let mut child = embedded_import(&data_dir, mode, &files)
        .spawn()
        .expect("spawn pgnload");
    let pid = postmaster_when_importing(&cluster, &mut child);
    thread::sleep(delay);
    kill(Pid::from_raw(i32::try_from(pid).expect("pid")), signal).expect("signal postmaster");
    wait_stopped(&cluster, pid);
    // The first run reconnects (pgnload restarts its cluster) and goes on,
    // or gives up; either way the rerun must complete the import exactly.
    let first = child.wait_with_output().expect("first run");
    let first_err = String::from_utf8_lossy(&first.stderr).into_owned();
    assert!(
        matches!(first.status.code(), Some(0 | 2)),
        "trial {trial}: first run: {:?}\n{first_err}",
        first.status
    );
    assert!(
        !first_err.contains("another process"),
        "trial {trial}: a crash is not another process:\n{first_err}"
    );
    let rerun = run(embedded_import(&data_dir, mode, &files));
    let rerun_err = String::from_utf8_lossy(&rerun.stderr);
    assert_eq!(
        rerun.status.code(),
        Some(0),
        "trial {trial}: rerun:\n{rerun_err}\nfirst run:\n{first_err}"
    );
    let report = dir.join(format!("verify-{mode}-{trial}.tsv"));
    assert_games_verify_clean(
        &data_dir,
        &report,
        &format!("trial {trial}, after the crash"),
    );
    cluster.start_persistent().expect("start for the dump");
    let db = TestDb::existing(cluster.connection_url());
    let dump = content_dump(&db);
    let counted = db.psql("SELECT enabled FROM explorer_state");
    cluster.stop().expect("stop");
    assert_eq!(counted, "t", "trial {trial}: the counters were verified");
    dump
}

/// A clean import of the same corpus, in the same mode, for comparison.
fn clean_dump(dir: &Path, mode: &str) -> String {
    let files = corpus_with_copies(dir, 4);
    let clean = fresh_db("servercrash_ref");
    let mut cmd = clean.pgnload();
    cmd.args(["-q", "import", "--batch-games", "50", "--mode", mode])
        .args(&files);
    let out = run(cmd);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    content_dump(&clean)
}

#[test]
fn server_crashes_during_incremental_imports_then_rerun_equals_a_clean_import() {
    let dir = scratch_dir("pgnload-servercrash-inc");
    let expected = clean_dump(dir.path(), "incremental");
    for (trial, delay_ms) in [0u64, 150, 400, 700].into_iter().enumerate() {
        let signal = if trial % 2 == 0 {
            Signal::SIGQUIT // pg_ctl stop -m immediate
        } else {
            Signal::SIGKILL
        };
        let dump = crash_trial(
            dir.path(),
            trial,
            "incremental",
            signal,
            Duration::from_millis(delay_ms),
        );
        assert_eq!(
            dump, expected,
            "trial {trial} ({signal:?} after {delay_ms} ms)"
        );
    }
}

#[test]
fn server_crashes_during_bulk_loads_then_rerun_equals_a_clean_import() {
    let dir = scratch_dir("pgnload-servercrash-bulk");
    let expected = clean_dump(dir.path(), "bulk");
    for (trial, delay_ms) in [100u64, 500, 900].into_iter().enumerate() {
        let signal = if trial % 2 == 0 {
            Signal::SIGKILL
        } else {
            Signal::SIGQUIT
        };
        let dump = crash_trial(
            dir.path(),
            trial,
            "bulk",
            signal,
            Duration::from_millis(delay_ms),
        );
        assert_eq!(
            dump, expected,
            "trial {trial} ({signal:?} after {delay_ms} ms)"
        );
    }
}
