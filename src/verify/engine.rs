//! The engine of `pgnload verify`: streams rows out of the database (or
//! lines out of a digest file), runs the pure checks of [`super::checks`]
//! and [`super::digest`] over them in parallel, and writes every finding to
//! the report. Three modes:
//!
//! * positions (default): every `positions` row is streamed out with
//!   `COPY … TO STDOUT (FORMAT binary)`, in batches through a bounded
//!   channel to a checker thread that runs [`super::check_position`] over
//!   each batch on the rayon pool. The database produces rows while the
//!   previous batch is checked, so the run goes at about the speed of a bare
//!   COPY.
//! * digests: an external digest file (Python, a legacy system) is checked
//!   line by line against its FENs and, optionally, against `positions`.
//! * games: games are replayed from `games.moves` and compared with their
//!   `moves` rows and the positions those reference; fetched a batch of
//!   games at a time through a server-side cursor, with one query for the
//!   batch's moves and one for its positions.
//!
//! It knows nothing of the command line (no clap, nothing printed to
//! stdout): `cmd::verify` turns flags into [`Options`] and prints the
//! [`Outcome`]. It writes nothing to the database.

use std::{
    collections::HashMap,
    io::{self, BufRead, BufReader},
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use crossbeam_channel::bounded;
use futures_util::StreamExt;
use rayon::prelude::*;
use tokio::runtime::Runtime;
use tokio_postgres::{
    Client,
    binary_copy::{BinaryCopyOutRow, BinaryCopyOutStream},
    types::Type,
};

use super::{
    FileDigest, Finding, IdRange, KindCounts, LineCheck, MismatchKind, Report, SignDetector,
    SignMode, StoredGame, StoredMove, StoredPosition, check_against_db, check_digest_line,
    check_game, check_position, parse_digest_line, split_fields,
};
use crate::{
    config::Settings,
    error::Error,
    ingest::source::open_input,
    progress::Progress,
    store::db::{self, db_err},
};

/// Which rows of `positions` or `games` are checked: the sampling options,
/// already validated (a fraction BERNOULLI can sample, a limit a bigint
/// holds), since they are written into the SQL.
#[derive(Debug, Clone, Copy, Default)]
pub struct Selection {
    /// Check a random sample of this fraction of the rows.
    pub sample: Option<f64>,
    /// Only rows with ids in this range.
    pub id_range: Option<IdRange>,
    /// At most this many rows, the lowest ids.
    pub limit: Option<u64>,
}

/// What one run checks.
#[derive(Debug, Clone)]
pub enum Check {
    /// Every selected `positions` row.
    Positions {
        /// Also check that every FEN is what python-chess writes (slower).
        canonical: bool,
    },
    /// Every selected game, replayed.
    Games,
    /// A digest file.
    Digests {
        /// The input, named as `import` names inputs (`-` is stdin).
        file: String,
        /// Also look every FEN up in `positions`.
        against_db: bool,
        /// How the file's digests are read.
        sign: SignMode,
    },
}

impl Check {
    /// The report's first column: what a finding is numbered by.
    pub fn first_column(&self) -> &'static str {
        match self {
            Check::Digests { .. } => "line",
            Check::Positions { .. } | Check::Games => "id",
        }
    }

    /// What is counted, for progress and the summary.
    pub fn noun(&self) -> &'static str {
        match self {
            Check::Positions { .. } => "positions",
            Check::Games => "games",
            Check::Digests { .. } => "lines",
        }
    }
}

/// What a run checks and where it reports (the database comes from the
/// settings).
#[derive(Debug, Clone)]
pub struct Options {
    /// What is checked.
    pub check: Check,
    /// Which rows (not used for digest files).
    pub selection: Selection,
    /// Where the TSV report goes (overwritten).
    pub report: PathBuf,
}

/// What a run found, for the summary.
#[derive(Debug)]
pub struct Outcome {
    /// The report written.
    pub report: PathBuf,
    /// Findings per kind.
    pub counts: KindCounts,
    /// The mode's extra summary lines.
    pub extra: Vec<String>,
    /// Whether every selected row (line) was checked; `false` after a signal.
    pub complete: bool,
}

/// Runs one check, writing the report. The report (its header) is created
/// first, so the caller's signal handling must be in place before this is
/// called. Whatever happens, the findings so far are flushed to the report.
pub fn verify(
    options: &Options,
    settings: &Settings,
    runtime: &Runtime,
    interrupt: &Interrupt,
    progress: &mut Progress,
) -> Result<Outcome, Error> {
    let mut report = Report::create(options.report.clone(), options.check.first_column())?;
    let run = Run {
        selection: &options.selection,
        settings,
        runtime,
        interrupt,
        meter: progress,
        report: &mut report,
    };
    let checked = match &options.check {
        Check::Positions { canonical } => verify_positions(*canonical, run),
        Check::Games => verify_games(run),
        Check::Digests {
            file,
            against_db,
            sign,
        } => verify_digests(file, *against_db, *sign, run),
    };
    // Whatever happened, keep the findings written so far.
    let (report, counts) = report.finish()?;
    let Checked { extra, complete } = checked?;
    Ok(Outcome {
        report,
        counts,
        extra,
        complete,
    })
}

/// Rows per batch handed from the COPY stream to the checker.
const POSITION_BATCH: usize = 8192;
/// Rows per rayon task within a batch.
const POSITION_CHUNK: usize = 1024;
/// Games fetched (and replayed in parallel) at a time.
const GAME_BATCH: i32 = 256;
/// Digest-file lines checked at a time (and looked up with one query).
const DIGEST_BATCH: usize = 8192;

/// Ctrl-C / SIGTERM as the checks see it: the first stops reading at the
/// next batch (or at once while waiting on the database), the findings so
/// far are flushed and the summary says the run is partial (exit 3).
pub struct Interrupt(Arc<AtomicUsize>);

/// How often a wait on the database looks at the interrupt flag.
const INTERRUPT_POLL: Duration = Duration::from_millis(50);

impl Interrupt {
    /// Watches `signals`, the count of signals received (kept by the
    /// binary's signal handler).
    pub fn new(signals: Arc<AtomicUsize>) -> Interrupt {
        Interrupt(signals)
    }

    fn requested(&self) -> bool {
        self.0.load(Ordering::SeqCst) > 0
    }

    /// `work`'s output, or `None` if a signal came first (`work` is dropped:
    /// every await in it must be a safe place to stop).
    async fn or_stop<T>(&self, work: impl Future<Output = T>) -> Option<T> {
        let signalled = async {
            while !self.requested() {
                tokio::time::sleep(INTERRUPT_POLL).await;
            }
        };
        tokio::select! {
            biased;
            () = signalled => None,
            out = work => Some(out),
        }
    }
}

/// What one check mode did.
struct Checked {
    /// Extra summary lines.
    extra: Vec<String>,
    /// Whether every selected row (line) was checked; `false` after a signal.
    complete: bool,
}

impl Checked {
    /// Stopped by a signal before anything was checked.
    fn stopped() -> Checked {
        Checked {
            extra: Vec::new(),
            complete: false,
        }
    }
}

/// One verify run: what every check mode needs.
struct Run<'a> {
    selection: &'a Selection,
    settings: &'a Settings,
    runtime: &'a Runtime,
    interrupt: &'a Interrupt,
    meter: &'a mut Progress,
    report: &'a mut Report,
}

/// The rows that the sampling options select, as SQL clauses after
/// `FROM table`; in id order when `ordered` or with `--limit` (which keeps
/// the lowest ids). Only validated numbers are interpolated.
fn selection_sql(rows: &Selection, ordered: bool) -> String {
    let mut sql = String::new();
    if let Some(fraction) = rows.sample {
        sql.push_str(&format!(" TABLESAMPLE BERNOULLI ({})", fraction * 100.0));
    }
    if let Some(range) = rows.id_range {
        sql.push_str(&format!(
            " WHERE id BETWEEN {} AND {}",
            range.start, range.end
        ));
    }
    if ordered || rows.limit.is_some() {
        sql.push_str(" ORDER BY id");
    }
    if let Some(limit) = rows.limit {
        sql.push_str(&format!(" LIMIT {limit}"));
    }
    sql
}

/// The planner's row count of `table` scaled by the options, for the
/// progress bar; `None` when unknown (never analyzed, or an id range).
async fn estimate(client: &Client, table: &str, rows: &Selection) -> Option<u64> {
    if rows.id_range.is_some() {
        return rows.limit;
    }
    let row = client
        .query_opt(
            "SELECT reltuples::float8 FROM pg_class WHERE oid = to_regclass($1)",
            &[&table],
        )
        .await
        .ok()??;
    let tuples: f64 = row.try_get(0).ok()?;
    let tuples = (tuples >= 0.0).then_some(tuples * rows.sample.unwrap_or(1.0))?;
    // Rounded estimate; a float→int conversion is what is wanted here.
    let tuples = tuples.round() as u64;
    Some(rows.limit.map_or(tuples, |l| l.min(tuples)))
}

const POSITION_COLUMNS: &str =
    "id, normalized_fen, fen_hash, piece_placement, active_color, castling, en_passant";
/// How the COPY columns are decoded. The text columns are declared BYTEA:
/// in the binary COPY format both are the raw bytes (in the client
/// encoding, UTF-8), and reading bytes lets the split columns skip a UTF-8
/// validation each (they are only compared byte for byte with the FEN's
/// fields) and lets a FEN that is not UTF-8 (a `SQL_ASCII` database) be
/// reported instead of stopping the run.
const POSITION_TYPES: [Type; 7] = [
    Type::INT8,
    Type::BYTEA,
    Type::INT8,
    Type::BYTEA,
    Type::BYTEA,
    Type::BYTEA,
    Type::BYTEA,
];

fn positions_copy(rows: &Selection) -> String {
    if rows.sample.is_none() && rows.id_range.is_none() && rows.limit.is_none() {
        // The whole table in physical order: no sort, no index.
        format!("COPY positions ({POSITION_COLUMNS}) TO STDOUT (FORMAT binary)")
    } else {
        format!(
            "COPY (SELECT {POSITION_COLUMNS} FROM positions{}) TO STDOUT (FORMAT binary)",
            selection_sql(rows, false)
        )
    }
}

/// Checks one COPY row, appending its findings to `out`.
fn check_copy_row(
    row: &BinaryCopyOutRow,
    canonical: bool,
    out: &mut Vec<Finding>,
) -> Result<(), tokio_postgres::Error> {
    let id: i64 = row.try_get(0)?;
    let fen: &[u8] = row.try_get(1)?;
    let Ok(normalized_fen) = std::str::from_utf8(fen) else {
        out.push(Finding {
            id,
            normalized_fen: String::from_utf8_lossy(fen).into_owned(),
            stored: String::from_utf8_lossy(fen).into_owned(),
            expected: "UTF-8 text".into(),
            kind: MismatchKind::NotNormalized,
        });
        return Ok(());
    };
    let row = StoredPosition {
        id,
        normalized_fen,
        fen_hash: row.try_get(2)?,
        piece_placement: row.try_get(3)?,
        active_color: row.try_get(4)?,
        castling: row.try_get(5)?,
        en_passant: row.try_get(6)?,
    };
    check_position(&row, canonical, out);
    Ok(())
}

/// Checks one batch in parallel; findings come back in row order.
fn check_position_batch(
    batch: &[BinaryCopyOutRow],
    canonical: bool,
) -> Result<Vec<Finding>, Error> {
    let chunks: Vec<Vec<Finding>> = batch
        .par_chunks(POSITION_CHUNK)
        .map(|chunk| {
            let mut out = Vec::new();
            for row in chunk {
                check_copy_row(row, canonical, &mut out)
                    .map_err(db_err("decoding a positions row"))?;
            }
            Ok(out)
        })
        .collect::<Result<_, Error>>()?;
    Ok(chunks.into_iter().flatten().collect())
}

fn verify_positions(canonical: bool, run: Run<'_>) -> Result<Checked, Error> {
    let Run {
        selection,
        settings,
        runtime,
        interrupt,
        meter,
        report,
    } = run;
    let Some(database) = runtime
        .block_on(interrupt.or_stop(db::connect(&settings.target())))
        .transpose()?
    else {
        return Ok(Checked::stopped());
    };
    meter.set_total(runtime.block_on(estimate(&database.client, "positions", selection)));
    let copy = positions_copy(selection);
    let (tx, rx) = bounded::<Vec<BinaryCopyOutRow>>(settings.pipeline.channel_capacity.max(1));
    // Each side says whether it went to the end; a signal stops both at
    // their next batch (the checker dropping `rx` also ends a blocked send).
    let (streamed, checked) = std::thread::scope(|scope| {
        let checker = scope.spawn(move || -> Result<bool, Error> {
            for batch in rx {
                if interrupt.requested() {
                    return Ok(false);
                }
                let findings = check_position_batch(&batch, canonical)?;
                report.write_all(&findings)?;
                meter.add(batch.len() as u64, report.counts.total());
            }
            Ok(true)
        });
        // The COPY is read on this thread; `send` blocks it when the checker
        // falls behind, which is the backpressure (the connection task runs
        // on the runtime's own worker thread, so blocking here is harmless).
        let streamed = runtime.block_on(interrupt.or_stop(async {
            let stream = database
                .client
                .copy_out(copy.as_str())
                .await
                .map_err(db_err("starting COPY of positions"))?;
            let rows = BinaryCopyOutStream::new(stream, &POSITION_TYPES);
            futures_util::pin_mut!(rows);
            let mut batch = Vec::with_capacity(POSITION_BATCH);
            while let Some(row) = rows.next().await {
                batch.push(row.map_err(db_err("reading positions"))?);
                if batch.len() == POSITION_BATCH {
                    let full = std::mem::replace(&mut batch, Vec::with_capacity(POSITION_BATCH));
                    // A send error means the checker stopped: its error, or
                    // a signal, is what it reports.
                    if interrupt.requested() || tx.send(full).is_err() {
                        return Ok(false);
                    }
                }
            }
            Ok::<bool, Error>(batch.is_empty() || tx.send(batch).is_ok())
        }));
        drop(tx);
        // A panic in the checker is a bug: let it surface as one.
        let checked = checker
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        (streamed, checked)
    });
    let checked = checked?;
    let streamed = streamed.transpose()?.unwrap_or(false);
    database.close()?;
    Ok(Checked {
        extra: Vec::new(),
        complete: streamed && checked,
    })
}

// ---------------------------------------------------------------------------
// --games
// ---------------------------------------------------------------------------

fn game_from_row(row: &tokio_postgres::Row) -> Result<StoredGame, tokio_postgres::Error> {
    Ok(StoredGame {
        id: row.try_get(0)?,
        variant: row.try_get(1)?,
        start_fen: row.try_get(2)?,
        moves: row.try_get(3)?,
        ply_count: row.try_get(4)?,
        initial_position_id: row.try_get(5)?,
        final_position_id: row.try_get(6)?,
    })
}

fn verify_games(run: Run<'_>) -> Result<Checked, Error> {
    let Run {
        selection,
        settings,
        runtime,
        interrupt,
        meter,
        report,
    } = run;
    let Some(mut database) = runtime
        .block_on(interrupt.or_stop(db::connect(&settings.target())))
        .transpose()?
    else {
        return Ok(Checked::stopped());
    };
    let mut plies = 0u64;
    // A batch's findings and counts are written with no await between them,
    // so stopping at any await leaves report and counts in step.
    let complete = runtime.block_on(interrupt.or_stop(async {
        meter.set_total(estimate(&database.client, "games", selection).await);
        // One snapshot for the cursor and the per-batch lookups.
        let tx = database
            .client
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await
            .map_err(db_err("starting a read-only transaction"))?;
        let query = format!(
            "SELECT id, variant::text, start_fen, moves, ply_count, initial_position_id, \
             final_position_id FROM games{}",
            selection_sql(selection, true)
        );
        let portal = tx
            .bind(query.as_str(), &[])
            .await
            .map_err(db_err("opening a cursor over games"))?;
        let moves_query = tx
            .prepare(
                "SELECT game_id, ply, uci, position_id, position_after_id FROM moves \
                 WHERE game_id = ANY($1) ORDER BY game_id, ply",
            )
            .await
            .map_err(db_err("preparing the moves lookup"))?;
        let positions_query = tx
            .prepare("SELECT id, normalized_fen FROM positions WHERE id = ANY($1)")
            .await
            .map_err(db_err("preparing the positions lookup"))?;
        loop {
            if interrupt.requested() {
                return Ok(false);
            }
            let rows = tx
                .query_portal(&portal, GAME_BATCH)
                .await
                .map_err(db_err("reading games"))?;
            if rows.is_empty() {
                break;
            }
            let games = rows
                .iter()
                .map(game_from_row)
                .collect::<Result<Vec<_>, _>>()
                .map_err(db_err("decoding a games row"))?;
            let ids: Vec<i64> = games.iter().map(|g| g.id).collect();
            let mut moves: HashMap<i64, Vec<StoredMove>> = HashMap::with_capacity(games.len());
            let mut position_ids: Vec<i64> = games
                .iter()
                .flat_map(|g| [g.initial_position_id, g.final_position_id])
                .collect();
            for row in tx
                .query(&moves_query, &[&ids])
                .await
                .map_err(db_err("reading moves"))?
            {
                let (game_id, m) = (|| {
                    Ok::<_, tokio_postgres::Error>((
                        row.try_get::<_, i64>(0)?,
                        StoredMove {
                            ply: row.try_get(1)?,
                            uci: row.try_get(2)?,
                            position_id: row.try_get(3)?,
                            position_after_id: row.try_get(4)?,
                        },
                    ))
                })()
                .map_err(db_err("decoding a moves row"))?;
                position_ids.extend([m.position_id, m.position_after_id]);
                moves.entry(game_id).or_default().push(m);
            }
            position_ids.sort_unstable();
            position_ids.dedup();
            let mut fens: HashMap<i64, String> = HashMap::with_capacity(position_ids.len());
            for row in tx
                .query(&positions_query, &[&position_ids])
                .await
                .map_err(db_err("reading positions"))?
            {
                let id: i64 = row.try_get(0).map_err(db_err("decoding a positions row"))?;
                let fen: String = row.try_get(1).map_err(db_err("decoding a positions row"))?;
                fens.insert(id, fen);
            }
            // Replay is the CPU part: all cores, results in game order.
            let findings: Vec<Vec<Finding>> = games
                .par_iter()
                .map(|game| {
                    let rows = moves.get(&game.id).map_or(&[][..], Vec::as_slice);
                    check_game(game, rows, |id| fens.get(&id).map(String::as_str))
                })
                .collect();
            report.write_all(findings.iter().flatten())?;
            plies += games.iter().map(|g| g.moves.len() as u64 / 2).sum::<u64>();
            meter.add(games.len() as u64, report.counts.total());
            if rows.len() < GAME_BATCH as usize {
                break;
            }
        }
        tx.commit()
            .await
            .map_err(db_err("ending the transaction"))?;
        Ok::<bool, Error>(true)
    }));
    let complete = complete.transpose()?.unwrap_or(false);
    database.close()?;
    Ok(Checked {
        extra: vec![format!("{plies} plies replayed")],
        complete,
    })
}

// ---------------------------------------------------------------------------
// --digests
// ---------------------------------------------------------------------------

/// One line read from the digest file, with its 1-based number.
struct RawLine {
    number: u64,
    text: Result<String, String>,
}

/// Reads up to `n` lines; an empty batch means end of file.
fn read_lines(reader: &mut impl BufRead, first: u64, n: usize) -> io::Result<Vec<RawLine>> {
    let mut lines = Vec::with_capacity(n);
    let mut buf = Vec::with_capacity(128);
    while lines.len() < n {
        buf.clear();
        if reader.read_until(b'\n', &mut buf)? == 0 {
            break;
        }
        if buf.last() == Some(&b'\n') {
            buf.pop();
        }
        let number = first + lines.len() as u64;
        let text = String::from_utf8(std::mem::take(&mut buf))
            .map_err(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
        lines.push(RawLine { number, text });
    }
    Ok(lines)
}

/// Checks one raw line: what is wrong with it, and what to look up.
fn check_raw_line(line: &RawLine, mode: SignMode) -> (Option<LineCheck>, SignDetector) {
    let mut detector = SignDetector::default();
    let id = i64::try_from(line.number).expect("a digest file has far fewer than 2^63 lines");
    let bad = |fen: String, reason: String| {
        LineCheck {
        finding: Some(Finding {
            id,
            normalized_fen: fen,
            stored: reason,
            expected: "fen<TAB>digest, fen<TAB>signed<TAB>unsigned or game_key<TAB>ply<TAB>fen<TAB>digest (TSV or CSV)".into(),
            kind: MismatchKind::BadLine,
        }),
        lookup: None,
        claimed: None,
    }
    };
    let checked = match &line.text {
        Err(lossy) => Some(bad(lossy.clone(), "not UTF-8".into())),
        Ok(text) => match parse_digest_line(text) {
            Ok(None) => None,
            Ok(Some(parsed)) => Some(check_digest_line(line.number, &parsed, mode, &mut detector)),
            Err(reason) => Some(bad(text.clone(), reason)),
        },
    };
    (checked, detector)
}

/// Whether the first data line is a header (`fen,digest`, …): it does not
/// parse, and its last field is not a number.
fn is_header(text: &str) -> bool {
    parse_digest_line(text).is_err()
        && split_fields(text.trim_end_matches('\r'))
            .last()
            .is_some_and(|f| FileDigest::parse(f).is_none())
}

fn verify_digests(
    file: &str,
    against_db: bool,
    mode: SignMode,
    run: Run<'_>,
) -> Result<Checked, Error> {
    let Run {
        selection: _,
        settings,
        runtime,
        interrupt,
        meter,
        report,
    } = run;
    let input = open_input(file, settings.pipeline.source)?;
    meter.set_total(None);
    let mut reader = BufReader::with_capacity(1 << 20, input.reader);
    let database = match against_db {
        true => {
            match runtime
                .block_on(interrupt.or_stop(db::connect(&settings.target())))
                .transpose()?
            {
                Some(database) => Some(database),
                None => return Ok(Checked::stopped()),
            }
        }
        false => None,
    };
    let lookup = match &database {
        Some(database) => Some(
            runtime
                .block_on(database.client.prepare(
                    "SELECT normalized_fen, fen_hash FROM positions WHERE normalized_fen = ANY($1)",
                ))
                .map_err(db_err("preparing the positions lookup"))?,
        ),
        None => None,
    };
    let mut detector = SignDetector::default();
    let mut next_line = 1u64;
    let mut header = None;
    let mut data_seen = false;
    // A signal stops the loop between batches (a read from a stalled pipe
    // is not interrupted: a second signal exits then).
    let mut complete = true;
    loop {
        if interrupt.requested() {
            complete = false;
            break;
        }
        let read_error = |source: io::Error| Error::Open {
            path: PathBuf::from(file),
            source: io::Error::new(source.kind(), format!("reading line {next_line}: {source}")),
        };
        let mut lines = read_lines(&mut reader, next_line, DIGEST_BATCH).map_err(read_error)?;
        let Some(last) = lines.last() else {
            break;
        };
        next_line = last.number + 1;
        let count = lines.len() as u64;
        if !data_seen {
            let first_data = lines.iter().position(|l| {
                l.text
                    .as_ref()
                    .map_or(true, |t| parse_digest_line(t) != Ok(None))
            });
            if let Some(i) = first_data {
                data_seen = true;
                if lines[i].text.as_deref().is_ok_and(is_header) {
                    header = Some(lines[i].number);
                    lines.remove(i);
                }
            }
        }
        let checked: Vec<(Option<LineCheck>, SignDetector)> =
            lines.par_iter().map(|l| check_raw_line(l, mode)).collect();
        let db_hashes: HashMap<String, i64> = match (&database, &lookup) {
            (Some(database), Some(statement)) => {
                let mut fens: Vec<&str> = checked
                    .iter()
                    .filter_map(|(c, _)| c.as_ref()?.lookup.as_deref())
                    .collect();
                fens.sort_unstable();
                fens.dedup();
                let Some(rows) =
                    runtime.block_on(interrupt.or_stop(database.client.query(statement, &[&fens])))
                else {
                    complete = false;
                    break;
                };
                rows.map_err(db_err("looking FENs up in positions"))?
                    .iter()
                    .map(|row| Ok((row.try_get(0)?, row.try_get(1)?)))
                    .collect::<Result<_, tokio_postgres::Error>>()
                    .map_err(db_err("decoding a positions row"))?
            }
            _ => HashMap::new(),
        };
        for (line, (check, found)) in lines.iter().zip(&checked) {
            detector.negative += found.negative;
            detector.high += found.high;
            let Some(check) = check else { continue };
            if let Some(finding) = &check.finding {
                report.write(finding)?;
            }
            if database.is_some()
                && let Some(finding) = check_against_db(line.number, check, &db_hashes)
            {
                report.write(&finding)?;
            }
        }
        meter.add(count, report.counts.total());
    }
    if let Some(database) = database {
        database.close()?;
    }
    let mut extra = vec![format!("digests: {}", detector.describe(mode))];
    if let Some(line) = header {
        extra.push(format!("line {line} skipped as a header"));
    }
    Ok(Checked { extra, complete })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_selection_becomes_sql() {
        let rows = Selection {
            sample: Some(0.25),
            id_range: Some(IdRange { start: 10, end: 20 }),
            limit: Some(5),
        };
        assert_eq!(
            positions_copy(&rows),
            "COPY (SELECT id, normalized_fen, fen_hash, piece_placement, active_color, castling, \
             en_passant FROM positions TABLESAMPLE BERNOULLI (25) WHERE id BETWEEN 10 AND 20 \
             ORDER BY id LIMIT 5) TO STDOUT (FORMAT binary)"
        );
        assert!(positions_copy(&Selection::default()).starts_with("COPY positions ("));
        let rows = Selection {
            limit: Some(9_223_372_036_854_775_807),
            ..Selection::default()
        };
        assert!(selection_sql(&rows, false).ends_with("LIMIT 9223372036854775807"));
        assert_eq!(selection_sql(&Selection::default(), true), " ORDER BY id");
    }

    #[test]
    fn tiny_fractions_are_written_without_exponents() {
        for sample in [0.000_000_1, 1.0 / 4_294_967_296.0] {
            let rows = Selection {
                sample: Some(sample),
                ..Selection::default()
            };
            let sql = selection_sql(&rows, false);
            assert!(sql.contains("BERNOULLI (0.0000"), "{sql}");
            assert!(!sql.contains('e'), "{sql}");
        }
    }

    #[test]
    fn headers_are_recognized_only_when_they_do_not_parse() {
        assert!(is_header("normalized_fen,digest"));
        assert!(is_header("fen\tsigned\tunsigned"));
        assert!(!is_header("8/8/8/8/8/8/8/8 w - -\t12"));
    }
}
