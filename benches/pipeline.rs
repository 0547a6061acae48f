//! Parse + replay + normalize + hash throughput over the shipped Lichess
//! sample, against a parse-only pgn-reader pass measured in the same run
//! (and, when python-chess is installed, against `scripts/py_digests.py`).
//!
//! Criterion measures each stage; a final table prints games/s,
//! positions/s and the ratios, because absolute numbers alone mean little
//! on a noisy machine. The table gives both wall-clock rates and rates per
//! CPU-second (`getrusage`): on a machine shared with other work, wall time
//! measures the neighbours as much as the code, while CPU time is what one
//! core actually spent on the games.

use std::{
    hint::black_box,
    path::Path,
    process::Command,
    sync::Arc,
    time::{Duration, Instant},
};

use criterion::{Criterion, Throughput};
use nix::sys::{
    resource::{UsageWho, getrusage},
    time::{TimeVal, TimeValLike},
};
use pgnload::{
    chess::reader::{GameChunk, GameSplitter, scan_only},
    ingest::pipeline::{Outcome, PipelineConfig, process_chunk},
};
use rayon::prelude::*;

const SAMPLE: &str = "tests/data/lichess-2025-05-sample.pgn";

fn chunks(pgn: &[u8]) -> Vec<GameChunk> {
    let mut splitter = GameSplitter::new(
        pgn,
        Arc::from("bench"),
        0,
        0,
        PipelineConfig::default().limits,
    );
    let mut out = Vec::new();
    while let Ok(Some(chunk)) = splitter.next_chunk() {
        out.push(chunk);
    }
    out
}

/// Full per-position work; returns positions produced.
fn full(pgn: &[u8], parallel: bool) -> usize {
    let limits = PipelineConfig::default().limits;
    let count = |o: Outcome| match o {
        Outcome::Game(g) => g.positions.len(),
        Outcome::Rejected(_) => 0,
    };
    let chunks = chunks(pgn);
    if parallel {
        chunks
            .into_par_iter()
            .map(|c| count(process_chunk(c, limits)))
            .sum()
    } else {
        chunks
            .into_iter()
            .map(|c| count(process_chunk(c, limits)))
            .sum()
    }
}

/// CPU seconds (user + system) spent so far by this process. Linux reads
/// the running thread's clock exactly for `RUSAGE_SELF` (for
/// `RUSAGE_THREAD` only to the last scheduler tick, too coarse for a
/// millisecond pass). In a one-thread pass rayon's workers sleep, so this is
/// the calling thread's time; in a parallel pass it is all workers' time.
fn cpu_now() -> f64 {
    let usage = getrusage(UsageWho::RUSAGE_SELF).expect("getrusage of this process cannot fail");
    let secs = |t: TimeVal| t.num_microseconds() as f64 / 1e6;
    secs(usage.user_time()) + secs(usage.system_time())
}

/// Median wall-clock and median CPU seconds of `runs` calls of `f`.
fn median_secs(mut f: impl FnMut(), runs: usize) -> (f64, f64) {
    let (mut wall, mut cpu): (Vec<f64>, Vec<f64>) = (0..runs)
        .map(|_| {
            let c = cpu_now();
            let t = Instant::now();
            f();
            (t.elapsed().as_secs_f64(), cpu_now() - c)
        })
        .unzip();
    wall.sort_by(f64::total_cmp);
    cpu.sort_by(f64::total_cmp);
    (wall[runs / 2], cpu[runs / 2])
}

fn main() {
    let pgn = std::fs::read(SAMPLE).expect("run `cargo bench` from the repository root");
    let stats = scan_only(&pgn[..]).expect("sample parses");
    let games = stats.games;
    let positions = full(&pgn, false) as u64;

    let mut c = Criterion::default()
        .configure_from_args()
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_secs(1));
    let mut group = c.benchmark_group("lichess_sample");
    group.throughput(Throughput::Elements(games));
    group.bench_function("parse_only", |b| {
        b.iter(|| scan_only(black_box(&pgn[..])).expect("parses"));
    });
    group.bench_function("full_1_thread", |b| b.iter(|| full(black_box(&pgn), false)));
    group.bench_function("full_all_cores", |b| b.iter(|| full(black_box(&pgn), true)));
    group.finish();

    let (single, multi) = ratio_table(&pgn, games, positions);
    python_reference(games, single.0, multi.0);
}

/// The ratio table, measured here in one run: (wall, CPU) seconds of the
/// full pipeline on 1 thread and on all of them.
fn ratio_table(pgn: &[u8], games: u64, positions: u64) -> ((f64, f64), (f64, f64)) {
    let runs = 15;
    let parse = median_secs(
        || {
            let _ = black_box(scan_only(pgn));
        },
        runs,
    );
    let single = median_secs(
        || {
            black_box(full(pgn, false));
        },
        runs,
    );
    let threads = rayon::current_num_threads();
    let multi = median_secs(
        || {
            black_box(full(pgn, true));
        },
        runs,
    );
    let rate = |secs: f64| games as f64 / secs;
    println!();
    println!("corpus: {SAMPLE}: {games} games, {positions} positions");
    println!(
        "{:<34}{:>14}{:>16}{:>8}{:>16}{:>8}",
        "stage", "games/s", "positions/s", "ratio", "games/CPU-s", "ratio"
    );
    println!(
        "{:<34}{:>14.0}{:>16}{:>8}{:>16.0}{:>8}",
        "parse only (pgn-reader visitor)",
        rate(parse.0),
        "-",
        "1.00",
        rate(parse.1),
        "1.00"
    );
    for (name, (wall, cpu)) in [
        ("full, 1 thread", single),
        (&*format!("full, {threads} threads"), multi),
    ] {
        println!(
            "{name:<34}{:>14.0}{:>16.0}{:>8.3}{:>16.0}{:>8.3}",
            rate(wall),
            positions as f64 / wall,
            parse.0 / wall,
            rate(cpu),
            parse.1 / cpu
        );
    }
    println!(
        "full work per core (1 thread): {:.0} games/s wall, {:.0} games per CPU-second",
        rate(single.0),
        rate(single.1)
    );
    (single, multi)
}

/// The python-chess reference, if it can run: how many times faster
/// pgnload is (`single`, `multi`: wall seconds on 1 thread and all).
fn python_reference(games: u64, single: f64, multi: f64) {
    let threads = rayon::current_num_threads();
    let rate = |secs: f64| games as f64 / secs;
    let script = Path::new("scripts/py_digests.py");
    let python = || {
        Command::new("python3")
            .arg(script)
            .arg(SAMPLE)
            .stdout(std::process::Stdio::null())
            .status()
    };
    match python() {
        Ok(status) if status.success() => {
            let reference = median_secs(|| drop(python()), 3).0;
            println!(
                "python-chess reference (scripts/py_digests.py): {:.0} games/s; pgnload is {:.0}x faster on 1 thread, {:.0}x on {threads}",
                rate(reference),
                reference / single,
                reference / multi
            );
        }
        _ => println!("python-chess reference not run (python3 with chess and xxhash needed)"),
    }
}
