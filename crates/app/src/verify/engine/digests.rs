//! `verify --digests`: a digest file (Python's, a legacy system's) read
//! line by line through `ingest::source` (the one way inputs are opened:
//! compression sniffed, `-` for stdin), each line checked against its FEN
//! and, optionally, looked up in `positions`. It reads, never writes.

use std::{
    collections::HashMap,
    io::{self, BufRead, BufReader},
    path::PathBuf,
};

use rayon::prelude::*;

use tokio::runtime::Runtime;

use super::{Checked, Interrupt, Run};
use crate::{
    config::Settings,
    error::Error,
    ingest::source::open_input,
    store::db::{self, db_err},
    verify::{
        FileDigest, Finding, LineCheck, MismatchKind, SignDetector, SignMode, check_against_db,
        check_digest_line, parse_digest_line, split_fields,
    },
};

/// Digest-file lines checked at a time (and looked up with one query).
const DIGEST_BATCH: usize = 8192;

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

/// Removes a header from `lines`, the first lines of the file read since
/// none held data: the first line that is not blank or a comment is the
/// header if it does not parse as a digest line. Returns whether that
/// first line was among them, and the header's line number.
fn take_header(lines: &mut Vec<RawLine>) -> (bool, Option<u64>) {
    let first_data = lines.iter().position(|l| {
        l.text
            .as_ref()
            .map_or(true, |t| parse_digest_line(t) != Ok(None))
    });
    let Some(i) = first_data else {
        return (false, None);
    };
    if lines[i].text.as_deref().is_ok_and(is_header) {
        (true, Some(lines.remove(i).number))
    } else {
        (true, None)
    }
}

/// Whether the first data line is a header (`fen,digest`, …): it does not
/// parse, and its last field is not a number.
fn is_header(text: &str) -> bool {
    parse_digest_line(text).is_err()
        && split_fields(text.trim_end_matches('\r'))
            .last()
            .is_some_and(|f| FileDigest::parse(f).is_none())
}

/// `verify --digests` over `file`: each line checked against its FEN, and
/// with `against_db` looked up in `positions` a batch at a time; the
/// summary says how the file's digests read and which line was a header.
pub(super) fn verify_digests(
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
    let lookup = if against_db {
        match Lookup::open(settings, runtime, interrupt)? {
            Some(lookup) => Some(lookup),
            None => return Ok(Checked::stopped()),
        }
    } else {
        None
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
            (data_seen, header) = take_header(&mut lines);
        }
        let checked: Vec<(Option<LineCheck>, SignDetector)> =
            lines.par_iter().map(|l| check_raw_line(l, mode)).collect();
        let db_hashes = match &lookup {
            Some(lookup) => {
                let Some(hashes) = lookup.hashes(runtime, interrupt, &checked)? else {
                    complete = false;
                    break;
                };
                hashes
            }
            None => HashMap::new(),
        };
        for (line, (check, found)) in lines.iter().zip(&checked) {
            detector.negative += found.negative;
            detector.high += found.high;
            let Some(check) = check else { continue };
            if let Some(finding) = &check.finding {
                report.write(finding)?;
            }
            if lookup.is_some()
                && let Some(finding) = check_against_db(line.number, check, &db_hashes)
            {
                report.write(&finding)?;
            }
        }
        meter.add(count, report.counts.total());
    }
    if let Some(lookup) = lookup {
        lookup.database.close()?;
    }
    let mut extra = vec![format!("digests: {}", detector.describe(mode))];
    if let Some(line) = header {
        extra.push(format!("line {line} skipped as a header"));
    }
    Ok(Checked { extra, complete })
}

/// `--against-db`: the database and the prepared query that looks a
/// batch's FENs up in `positions`.
struct Lookup {
    database: db::Database,
    statement: tokio_postgres::Statement,
}

impl Lookup {
    /// Connects and prepares the query; `None` if a signal came first.
    fn open(
        settings: &Settings,
        runtime: &Runtime,
        interrupt: &Interrupt,
    ) -> Result<Option<Lookup>, Error> {
        let Some(database) = runtime
            .block_on(interrupt.or_stop(db::connect(&settings.target())))
            .transpose()?
        else {
            return Ok(None);
        };
        let statement = runtime
            .block_on(database.client.prepare(
                "SELECT normalized_fen, fen_hash FROM positions WHERE normalized_fen = ANY($1)",
            ))
            .map_err(db_err("preparing the positions lookup"))?;
        Ok(Some(Lookup {
            database,
            statement,
        }))
    }

    /// The stored digest of each FEN of `checked` to look up that has a
    /// `positions` row; `None` if a signal came first.
    fn hashes(
        &self,
        runtime: &Runtime,
        interrupt: &Interrupt,
        checked: &[(Option<LineCheck>, SignDetector)],
    ) -> Result<Option<HashMap<String, i64>>, Error> {
        let mut fens: Vec<&str> = checked
            .iter()
            .filter_map(|(c, _)| c.as_ref()?.lookup.as_deref())
            .collect();
        fens.sort_unstable();
        fens.dedup();
        let client = &self.database.client;
        let Some(rows) =
            runtime.block_on(interrupt.or_stop(client.query(&self.statement, &[&fens])))
        else {
            return Ok(None);
        };
        let hashes = rows
            .map_err(db_err("looking FENs up in positions"))?
            .iter()
            .map(|row| Ok((row.try_get(0)?, row.try_get(1)?)))
            .collect::<Result<_, tokio_postgres::Error>>()
            .map_err(db_err("decoding a positions row"))?;
        Ok(Some(hashes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_are_recognized_only_when_they_do_not_parse() {
        assert!(is_header("normalized_fen,digest"));
        assert!(is_header("fen\tsigned\tunsigned"));
        assert!(!is_header("8/8/8/8/8/8/8/8 w - -\t12"));
    }
}
