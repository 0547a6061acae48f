//! `pgnload verify`: the flags, their validation, and the summary. The
//! checks themselves are the library's ([`crate::verify::engine`]); this
//! file only turns flags into its [`Options`], installs the signal
//! handling, and prints what it found.
//!
//! Every finding goes to a TSV report (`id, normalized_fen, stored,
//! expected, kind`, with `line` instead of `id` for digest files); the
//! summary counts them per kind. Exit status 0 means clean, 1 mismatches
//! found, 2 an error stopped the run, 3 a signal stopped it (partial).

use std::{
    fmt::Write as _,
    path::PathBuf,
    sync::{Arc, atomic::AtomicUsize},
    time::Instant,
};

use crate::{
    cmd::watch_signals,
    config::Settings,
    error::ExitStatus,
    progress::Progress,
    store::db,
    verify::{
        IdRange, SignMode,
        engine::{self, Check, Interrupt, Options, Outcome, Selection},
    },
};

/// Options of `pgnload verify`.
#[derive(Debug, Clone, clap::Args)]
#[expect(
    clippy::struct_excessive_bools,
    reason = "each bool is a command-line switch, as clap declares them"
)]
pub struct VerifyArgs {
    /// Recount the opening explorer's counters (`explorer_moves`) from games
    /// and moves and report every row that differs.
    #[arg(long, conflicts_with_all = ["games", "digests", "canonical", "sample", "id_range", "limit"])]
    pub explorer: bool,
    /// Replay games from games.moves and check their moves rows and
    /// initial/final/per-ply positions (instead of checking positions).
    #[arg(long, conflicts_with = "digests")]
    pub games: bool,
    /// Check a digest file instead: TSV or CSV lines of `fen,digest`,
    /// `fen,signed,unsigned` (`py_digests.py` --fens, pgnload hash) or
    /// `game_key,ply,fen,digest` (`py_digests.py` FILE, pgnload positions);
    /// plain, gzip or zstd; `-` for stdin.
    #[arg(long, value_name = "FILE", value_parser = utf8_file_name())]
    pub digests: Option<String>,
    /// With --digests: also look every FEN up in `positions` and report FENs
    /// that are missing or have another `fen_hash`.
    #[arg(long, requires = "digests")]
    pub against_db: bool,
    /// With --digests: the file's digests are unsigned (of a
    /// fen,signed,unsigned file, check only the unsigned column).
    #[arg(long, requires = "digests", conflicts_with = "signed")]
    pub unsigned: bool,
    /// With --digests: the file's digests are signed (of a
    /// fen,signed,unsigned file, check only the signed column).
    #[arg(long, requires = "digests")]
    pub signed: bool,
    /// Also check that every FEN is what python-chess writes for its
    /// position (legal position, en passant only when capturable; the
    /// variant is inferred from the FEN). Slower.
    #[arg(long, conflicts_with_all = ["games", "digests"])]
    pub canonical: bool,
    /// Check a random sample of this fraction of the rows (2^-32 ≤ FRACTION ≤ 1;
    /// server-side TABLESAMPLE BERNOULLI).
    #[arg(long, value_name = "FRACTION", value_parser = parse_fraction, conflicts_with = "digests")]
    pub sample: Option<f64>,
    /// Only rows (positions or games) with ids in this range: A..B
    /// (half-open), A..=B, A.. or ..B.
    #[arg(long, value_name = "A..B", value_parser = IdRange::parse, conflicts_with = "digests")]
    pub id_range: Option<IdRange>,
    /// Check at most N rows (the lowest ids; 1 ≤ N ≤ 2^63 − 1).
    #[arg(long, value_name = "N", value_parser = parse_limit, conflicts_with = "digests")]
    pub limit: Option<u64>,
    /// Where to write the TSV report of every mismatch (overwritten; just the
    /// header when everything is clean).
    #[arg(long, value_name = "FILE", default_value = "pgnload-verify-report.tsv")]
    pub report: PathBuf,
}

/// `--digests`: inputs are named by UTF-8 strings (`-` is stdin), so a
/// file name that is not UTF-8 is refused naming the flag, with a way out.
fn utf8_file_name() -> impl clap::builder::TypedValueParser<Value = String> {
    use clap::builder::TypedValueParser as _;
    // clap's message shows the name (lossily) before this reason.
    clap::builder::OsStringValueParser::new().try_map(|name| {
        name.into_string()
            .map_err(|_| "the file name is not UTF-8; rename the file or pass it on stdin as -")
    })
}

/// The smallest `--sample`: PostgreSQL's BERNOULLI keeps a row when a 32-bit
/// random number is below `round(2^32 × fraction)`, so a smaller fraction
/// rounds to a sample of nothing.
const MIN_SAMPLE: f64 = 1.0 / 4_294_967_296.0;

/// `--sample`: a finite fraction that BERNOULLI can sample with (NaN and
/// infinities fail both comparisons).
fn parse_fraction(text: &str) -> Result<f64, String> {
    let f: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number"))?;
    if (MIN_SAMPLE..=1.0).contains(&f) {
        Ok(f)
    } else if f > 0.0 && f < MIN_SAMPLE {
        Err(format!(
            "{text} is below 2^-32 ({MIN_SAMPLE:e}), the smallest fraction PostgreSQL's \
             TABLESAMPLE BERNOULLI can sample; it would select no row"
        ))
    } else {
        Err(format!("{text} is not a fraction in (0, 1]"))
    }
}

/// `--limit`: a row count the database's `LIMIT` (a bigint) accepts; 0 would
/// check nothing and report the database clean.
fn parse_limit(text: &str) -> Result<u64, String> {
    let n: u64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a whole number of rows"))?;
    match n {
        0 => Err("0 would check no row; give at least 1".to_owned()),
        n if i64::try_from(n).is_err() => Err(format!(
            "{n} is more than {} (PostgreSQL's largest LIMIT, a bigint)",
            i64::MAX
        )),
        n => Ok(n),
    }
}

impl VerifyArgs {
    /// The engine's options for these flags (which clap has already
    /// checked for conflicts and ranges).
    fn options(&self) -> Options {
        let check = match &self.digests {
            Some(file) => Check::Digests {
                file: file.clone(),
                against_db: self.against_db,
                sign: match (self.signed, self.unsigned) {
                    (true, _) => SignMode::Signed,
                    (_, true) => SignMode::Unsigned,
                    _ => SignMode::Auto,
                },
            },
            None if self.games => Check::Games,
            None => Check::Positions {
                canonical: self.canonical,
            },
        };
        Options {
            check,
            selection: Selection {
                sample: self.sample,
                id_range: self.id_range,
                limit: self.limit,
                sharded: false,
            },
            report: self.report.clone(),
        }
    }
}

/// Runs `pgnload verify`.
pub fn run(args: &VerifyArgs, settings: &Settings, quiet: bool) -> crate::Result<ExitStatus> {
    if args.explorer {
        return crate::cmd::explore::verify(settings, &args.report, quiet);
    }
    let started = Instant::now();
    let options = args.options();
    let noun = options.check.noun();
    let runtime = db::runtime()?;
    let interrupts = Arc::new(AtomicUsize::new(0));
    // Before the report exists: once its header is written, a signal is
    // always handled here.
    watch_signals(
        &runtime,
        Arc::clone(&interrupts),
        "interrupted; verify stops and writes the report so far (again to exit at once)",
        "aborted; the report may end in a cut line",
    )?;
    let interrupt = Interrupt::new(interrupts);
    let mut progress = Progress::counting(quiet, noun);
    let outcome = engine::verify(&options, settings, &runtime, &interrupt, &mut progress);
    progress.finish();
    let Outcome {
        report: path,
        counts,
        extra,
        complete,
    } = outcome?;
    let elapsed = started.elapsed().as_secs_f64();
    let mut text = String::new();
    if !complete {
        text.push_str("verify interrupted: partial result, not every row was checked\n");
    }
    let _ = writeln!(
        text,
        "verified {} {noun} in {elapsed:.2} s ({:.0} {noun}/s)",
        progress.done(),
        progress.done() as f64 / elapsed.max(1e-9)
    );
    for line in extra {
        let _ = writeln!(text, "{line}");
    }
    if counts.total() == 0 {
        let _ = writeln!(
            text,
            "no mismatches{}",
            if complete { "" } else { " so far" }
        );
    } else {
        let _ = writeln!(
            text,
            "{} mismatches{}:",
            counts.total(),
            if complete { "" } else { " so far" }
        );
        for (kind, n) in counts.nonzero() {
            let _ = writeln!(text, "  {:<18} {n}", kind.label());
        }
    }
    let _ = writeln!(
        text,
        "report: {}{}",
        path.display(),
        if complete { "" } else { " (partial)" }
    );
    super::print_outcome(&text)?;
    Ok(if !complete {
        ExitStatus::Interrupted
    } else if counts.total() > 0 {
        ExitStatus::CompletedWithRejects
    } else {
        ExitStatus::Clean
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Wrapper {
        #[command(flatten)]
        args: VerifyArgs,
    }

    fn parse(argv: &[&str]) -> Result<VerifyArgs, clap::Error> {
        Wrapper::try_parse_from(std::iter::once("verify").chain(argv.iter().copied()))
            .map(|w| w.args)
    }

    #[test]
    fn options_combine_sensibly() {
        assert!(parse(&["--against-db"]).is_err(), "needs --digests");
        assert!(parse(&["--digests", "f", "--signed", "--unsigned"]).is_err());
        assert!(parse(&["--digests", "f", "--games"]).is_err());
        assert!(parse(&["--sample", "0"]).is_err());
        assert!(parse(&["--sample", "1.5"]).is_err());
        assert!(parse(&["--games", "--canonical"]).is_err());
        let args =
            parse(&["--sample", "0.25", "--id-range", "10..=20", "--limit", "5"]).expect("valid");
        let options = args.options();
        assert!(matches!(
            options.check,
            Check::Positions { canonical: false }
        ));
        assert_eq!(options.selection.sample, Some(0.25));
        assert_eq!(
            options.selection.id_range,
            Some(IdRange { start: 10, end: 20 })
        );
        assert_eq!(options.selection.limit, Some(5));
        let args = parse(&[]).expect("valid");
        assert_eq!(args.report, PathBuf::from("pgnload-verify-report.tsv"));
        assert_eq!(args.options().check.noun(), "positions");
        let options = parse(&["--games"]).expect("valid").options();
        assert!(matches!(options.check, Check::Games));
        let options = parse(&["--digests", "-", "--against-db", "--unsigned"])
            .expect("valid")
            .options();
        assert!(
            matches!(
                &options.check,
                Check::Digests { file, against_db: true, sign: SignMode::Unsigned } if file == "-"
            ),
            "{options:?}"
        );
        assert_eq!(options.check.first_column(), "line");
        let options = parse(&["--digests", "f", "--signed"])
            .expect("valid")
            .options();
        assert!(matches!(
            options.check,
            Check::Digests {
                against_db: false,
                sign: SignMode::Signed,
                ..
            }
        ));
    }

    #[test]
    fn the_smallest_sample_is_accepted() {
        let args = parse(&["--sample", &MIN_SAMPLE.to_string()]).expect("the smallest");
        assert_eq!(args.sample, Some(MIN_SAMPLE));
    }

    /// The message clap prints for `argv`, which must be refused.
    fn refusal(argv: &[&str]) -> String {
        match parse(argv) {
            Ok(parsed) => panic!("{argv:?} accepted: {parsed:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn samples_postgresql_cannot_take_are_argument_errors() {
        for bad in [
            "1e-300",
            "1e-10",
            "NaN",
            "inf",
            "-0.5",
            "0",
            "-0",
            "1.0000001",
            "x",
        ] {
            let message = refusal(&[&format!("--sample={bad}")]);
            assert!(message.contains("--sample"), "{bad}: {message}");
        }
        assert!(refusal(&["--sample", "1e-300"]).contains("select no row"));
        assert!(parse(&["--sample", "1"]).is_ok());
        assert!(parse(&["--sample", "1e-9"]).is_ok());
    }

    #[test]
    fn limits_beyond_a_bigint_or_zero_are_argument_errors() {
        let message = refusal(&["--limit", "18446744073709551615"]);
        assert!(
            message.contains("--limit") && message.contains("bigint"),
            "{message}"
        );
        assert!(refusal(&["--limit", "9223372036854775808"]).contains("--limit"));
        assert!(refusal(&["--limit", "0"]).contains("--limit"));
        assert!(refusal(&["--limit=-1"]).contains("--limit"));
        let args = parse(&["--limit", "9223372036854775807"]).expect("i64::MAX fits");
        assert_eq!(args.limit, Some(9_223_372_036_854_775_807));
    }

    #[test]
    fn a_digest_file_name_that_is_not_utf8_is_refused_naming_the_flag() {
        use std::os::unix::ffi::OsStringExt;
        let argv = [
            "verify".into(),
            "--digests".into(),
            std::ffi::OsString::from_vec(b"/tmp/d\xff.tsv".to_vec()),
        ];
        let message = match Wrapper::try_parse_from(argv) {
            Ok(w) => panic!("accepted: {:?}", w.args),
            Err(e) => e.to_string(),
        };
        assert!(
            message.contains("--digests") && message.contains("not UTF-8"),
            "{message}"
        );
        let parsed = parse(&["--digests", "-"]).expect("stdin");
        assert_eq!(parsed.digests.as_deref(), Some("-"));
    }

    #[test]
    fn malformed_id_ranges_are_argument_errors() {
        for bad in [
            "5",
            "1...5",
            "..=",
            "5..5",
            "9..1",
            "a..b",
            "1..2..3",
            "..-9223372036854775808",
            "1..=99999999999999999999",
        ] {
            let message = refusal(&[&format!("--id-range={bad}")]);
            assert!(message.contains("--id-range"), "{bad}: {message}");
        }
        let args = parse(&["--id-range", "..", "--limit", "3"]).expect("every id");
        assert_eq!(
            args.id_range,
            Some(IdRange {
                start: i64::MIN,
                end: i64::MAX
            })
        );
    }
}
