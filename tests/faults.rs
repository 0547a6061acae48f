//! Fault injection: one import pushed through a random sequence of server
//! crashes (immediate shutdown, SIGKILL of the postmaster), terminated
//! backends, SIGKILLs of pgnload and `--restart`s, then run to the end.
//! The database must equal a clean import, `verify --games` must pass, and
//! every run that got to its summary must account for every game it read.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Output, Stdio},
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
        Lcg, TestDb, assert_games_verify_clean, embedded_pgnload, enable_explorer, fresh_db, run,
        scratch_dir,
    },
    import::content_dump,
    resume::corpus_with_copies,
};

/// The faults injected, one per run.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// `pg_ctl stop -m immediate`: SIGQUIT to the postmaster.
    ServerImmediateStop,
    /// SIGKILL of the postmaster.
    ServerKill,
    /// `pg_terminate_backend` of every pgnload session.
    TerminateBackends,
    /// SIGKILL of pgnload.
    KillImporter,
}

const FAULTS: [Fault; 4] = [
    Fault::ServerImmediateStop,
    Fault::ServerKill,
    Fault::TerminateBackends,
    Fault::KillImporter,
];

/// The corpus: the shipped files, renamed compressed copies of the sample,
/// and a file with rejects (an illegal move, garbage, a cut-off game).
fn corpus(dir: &Path) -> Vec<PathBuf> {
    let mut files = corpus_with_copies(dir, 3);
    let bad = dir.join("with-rejects.pgn");
    std::fs::write(
        &bad,
        "[Event \"ok\"]\n[Site \"https://lichess.org/faultok1\"]\n[Result \"1-0\"]\n\n1. e4 e5 2. Qh5 Nc6 3. Bc4 Nf6 4. Qxf7# 1-0\n\n\
         [Event \"illegal\"]\n[Result \"1-0\"]\n\n1. e4 e5 2. Ke3 1-0\n\n\
         [Event \"garbage\"]\n[Result \"*\"]\n\n1. e4 @@@ *\n\n\
         [Event \"cut\"]\n[Result \"*\"]\n\n1. d4 d5 2. c4\n",
    )
    .expect("write");
    files.push(bad);
    files
}

fn import_args(cmd: &mut Command, restart: bool, files: &[PathBuf]) {
    cmd.args(["import", "--batch-games", "40"]);
    if restart {
        cmd.arg("--restart");
    }
    cmd.args(files);
}

/// `read = imported + present + rejected + filtered` in a run's summary, if
/// it printed one.
fn assert_summary_adds_up(stderr: &str) {
    let Some(line) = stderr.lines().find(|l| l.contains(" read = ")) else {
        return;
    };
    let numbers: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter(|w| !w.is_empty())
        .map(|w| w.parse().expect("number"))
        .collect();
    assert_eq!(numbers.len(), 5, "{line}");
    assert_eq!(numbers[0], numbers[1..].iter().sum::<u64>(), "{line}");
}

fn postmaster(cluster: &EmbeddedCluster) -> Option<u32> {
    match cluster.status() {
        Ok(ClusterStatus::Running { pid }) => Some(pid),
        _ => None,
    }
}

fn signal_pid(pid: u32, signal: Signal) {
    let _ = kill(Pid::from_raw(i32::try_from(pid).expect("pid fits")), signal);
}

/// Waits for `child` to exit, at most two minutes.
fn finish(mut child: Child) -> Output {
    let started = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if started.elapsed() > Duration::from_mins(2) {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "pgnload did not end:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

/// One run with one fault injected `delay` after the import got going.
fn run_with_fault(
    data_dir: &Path,
    cluster: &EmbeddedCluster,
    files: &[PathBuf],
    fault: Fault,
    restart: bool,
    delay: Duration,
) -> Output {
    let mut cmd = embedded_pgnload(data_dir);
    import_args(&mut cmd, restart, files);
    let child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn pgnload");
    // Let it reach the server (it may start the cluster itself), then wait.
    let started = Instant::now();
    while postmaster(cluster).is_none() && started.elapsed() < Duration::from_secs(30) {
        thread::sleep(Duration::from_millis(20));
    }
    thread::sleep(delay);
    match fault {
        Fault::ServerImmediateStop => {
            if let Some(pid) = postmaster(cluster) {
                signal_pid(pid, Signal::SIGQUIT);
            }
        }
        Fault::ServerKill => {
            if let Some(pid) = postmaster(cluster) {
                signal_pid(pid, Signal::SIGKILL);
            }
        }
        Fault::TerminateBackends => {
            let db = TestDb::existing(cluster.connection_url());
            let _ = Command::new("psql")
                .args(["-X", "-q", "-A", "-t", &db.url, "-c"])
                .arg(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                     WHERE application_name LIKE 'pgnload%' AND pid <> pg_backend_pid()",
                )
                .output();
        }
        Fault::KillImporter => signal_pid(child.id(), Signal::SIGKILL),
    }
    finish(child)
}

#[test]
fn an_import_through_random_faults_equals_a_clean_import() {
    let dir = scratch_dir("pgnload-faults");
    let files = corpus(dir.path());

    let clean = fresh_db("faults_ref");
    let out = run({
        let mut c = clean.pgnload();
        import_args(&mut c, false, &files);
        c
    });
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let expected = content_dump(&clean);
    let expected_done =
        clean.psql("SELECT string_agg(games_done::text, ',' ORDER BY path) FROM import_files");

    let data_dir = dir.path().join("cluster");
    let cluster = EmbeddedCluster::new(&data_dir).expect("cluster");
    // Counters on, so that the verify below proves them fault-safe too.
    enable_explorer(embedded_pgnload(&data_dir));
    let mut rng = Lcg(20_261_123);
    let mut log = Vec::new();
    for round in 0..10 {
        let fault = FAULTS[usize::try_from(rng.below(4)).expect("small")];
        let restart = rng.below(5) == 0;
        let delay = Duration::from_millis(rng.below(700));
        let out = run_with_fault(&data_dir, &cluster, &files, fault, restart, delay);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        log.push(format!(
            "round {round}: {fault:?} after {delay:?}, restart {restart} → {:?}",
            out.status.code()
        ));
        // Exit 0/1 (finished), 2 (gave up after a fault), or killed.
        assert!(
            matches!(out.status.code(), Some(0..=2) | None),
            "{}\n{stderr}",
            log.join("\n")
        );
        assert!(
            !stderr.contains("another process"),
            "{}\n{stderr}",
            log.join("\n")
        );
        assert_summary_adds_up(&stderr);
    }

    // Then to the end, undisturbed.
    let out = run({
        let mut c = embedded_pgnload(&data_dir);
        import_args(&mut c, false, &files);
        c
    });
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "{}\n{stderr}",
        log.join("\n")
    );
    assert_summary_adds_up(&stderr);
    let report = dir.path().join("verify.tsv");
    assert_games_verify_clean(&data_dir, &report, &log.join("\n"));
    cluster.start_persistent().expect("start for the dump");
    let db = TestDb::existing(cluster.connection_url());
    let dump = content_dump(&db);
    let done = db.psql(
        "SELECT string_agg(games_done::text, ',' ORDER BY path) FROM import_files WHERE state = 'done'",
    );
    let not_done = db.psql("SELECT count(*) FROM import_files WHERE state <> 'done'");
    let open_loads = db.psql("SELECT count(*) FROM import_bulk_loads WHERE state <> 'done'");
    let counted = db.psql("SELECT enabled FROM explorer_state");
    cluster.stop().expect("stop");
    assert_eq!(counted, "t", "the counters were verified");
    assert_eq!(dump, expected, "{}", log.join("\n"));
    // Every game of every input read, to the last one.
    assert_eq!(done, expected_done, "{}", log.join("\n"));
    assert_eq!(not_done, "0");
    assert_eq!(open_loads, "0");
}
