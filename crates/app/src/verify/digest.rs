//! Digest files (`verify --digests`): parsing one line of an external
//! digest file (TSV or CSV, signed or unsigned digests) and checking it
//! against its FEN and, optionally, against the stored `positions` row.
//! Pure like [`super::checks`]: reading the file and querying the
//! database belong to the engine, not here.

use std::{collections::HashMap, hash::BuildHasher};

use super::checks::{Finding, MismatchKind, is_normalized};
use crate::chess::{
    fen::normalize_fen_text,
    hash::{fen_digest, fen_digest_unsigned, to_signed, to_unsigned},
};

/// How a digest was written in a file. The 64-bit pattern of a value is the
/// same whichever way it is read, except for the notation itself: a negative
/// number can only be signed, one ≥ 2^63 only unsigned, and one in
/// `0..2^63` means the same digest either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notation {
    /// Negative: a signed digest.
    Negative,
    /// In `0..2^63`: the same under both readings.
    Low,
    /// At least 2^63: an unsigned digest.
    High,
}

/// A digest as read from a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileDigest {
    /// The 64-bit pattern (unsigned reading).
    pub bits: u64,
    /// How it was written.
    pub notation: Notation,
}

impl FileDigest {
    /// Parses a decimal 64-bit digest, signed or unsigned.
    pub fn parse(text: &str) -> Option<FileDigest> {
        let text = text.trim();
        if text.starts_with('-') {
            let value: i64 = text.parse().ok()?;
            Some(FileDigest {
                bits: to_unsigned(value),
                notation: if value < 0 {
                    Notation::Negative
                } else {
                    Notation::Low
                },
            })
        } else {
            let value: u64 = text.parse().ok()?;
            Some(FileDigest {
                bits: value,
                notation: if value >= 1 << 63 {
                    Notation::High
                } else {
                    Notation::Low
                },
            })
        }
    }

    /// The value as `positions.fen_hash` stores it.
    pub fn signed(self) -> i64 {
        to_signed(self.bits)
    }
}

/// Which column of a line a digest came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DigestColumn {
    /// The only digest of a `fen, digest` or `game_key, ply, fen, digest` line.
    Single,
    /// The signed column of a `fen, signed, unsigned` line.
    Signed,
    /// The unsigned column of a `fen, signed, unsigned` line.
    Unsigned,
}

/// The line shapes a digest file may have (told apart by column count, per line).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DigestShape {
    /// `fen, digest` (a legacy export).
    FenDigest,
    /// `fen, signed, unsigned` (`py_digests.py --fens`, `pgnload hash`).
    FenSignedUnsigned,
    /// `game_key, ply, fen, digest` (`py_digests.py FILE`, `pgnload positions`).
    KeyPlyFenDigest,
}

/// One parsed digest-file line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DigestLine {
    /// The FEN as written (CSV quotes removed).
    pub fen: String,
    /// The shape.
    pub shape: DigestShape,
    /// Digests with their column and their text as written.
    pub digests: Vec<(DigestColumn, String)>,
}

/// Splits one line of a digest file into fields: on tabs when it has one
/// (TSV), else as CSV (commas, `"`-quoted fields with `""` escapes). FENs
/// contain neither tabs nor commas, so deciding per line is unambiguous.
pub fn split_fields(line: &str) -> Vec<String> {
    if line.contains('\t') {
        return line.split('\t').map(str::to_owned).collect();
    }
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut chars = line.chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            (true, '"') => quoted = false,
            (false, '"') if field.trim().is_empty() => {
                field.clear();
                quoted = true;
            }
            (false, ',') => fields.push(std::mem::take(&mut field)),
            (_, c) => field.push(c),
        }
    }
    fields.push(field);
    fields
}

/// Parses one digest-file line. `Ok(None)` for blank lines and `#` comments;
/// `Err` says why a line cannot be read.
pub fn parse_digest_line(line: &str) -> Result<Option<DigestLine>, String> {
    let line = line.strip_suffix('\r').unwrap_or(line);
    let line = line.strip_prefix('\u{feff}').unwrap_or(line);
    if line.trim().is_empty() || line.starts_with('#') {
        return Ok(None);
    }
    let fields = split_fields(line);
    let numeric = |s: &str| FileDigest::parse(s).is_some();
    let (shape, fen, digests) = match fields.as_slice() {
        [fen, digest] => (
            DigestShape::FenDigest,
            fen,
            vec![(DigestColumn::Single, digest)],
        ),
        [fen, signed, unsigned] => (
            DigestShape::FenSignedUnsigned,
            fen,
            vec![
                (DigestColumn::Signed, signed),
                (DigestColumn::Unsigned, unsigned),
            ],
        ),
        [_key, ply, fen, digest] if ply.trim().parse::<u32>().is_ok() => (
            DigestShape::KeyPlyFenDigest,
            fen,
            vec![(DigestColumn::Single, digest)],
        ),
        _ => {
            return Err(format!(
                "{} fields; expected fen,digest or fen,signed,unsigned or game_key,ply,fen,digest",
                fields.len()
            ));
        }
    };
    if let Some((_, bad)) = digests.iter().find(|(_, d)| !numeric(d)) {
        return Err(format!("digest {bad:?} is not a 64-bit integer"));
    }
    Ok(Some(DigestLine {
        fen: fen.clone(),
        shape,
        digests: digests
            .into_iter()
            .map(|(column, text)| (column, text.trim().to_owned()))
            .collect(),
    }))
}

/// How the digests of a file are to be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SignMode {
    /// Detected from the values (see [`SignDetector`]).
    #[default]
    Auto,
    /// `--signed`: every digest is signed; of a `fen, signed, unsigned` line
    /// only the signed column is checked.
    Signed,
    /// `--unsigned`: every digest is unsigned; of a `fen, signed, unsigned`
    /// line only the unsigned column is checked.
    Unsigned,
}

/// Per-file signedness detection over the single-digest columns: any value
/// ≥ 2^63 means unsigned, any negative one signed, neither is ambiguous.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SignDetector {
    /// Negative values seen.
    pub negative: u64,
    /// Values ≥ 2^63 seen.
    pub high: u64,
}

impl SignDetector {
    /// Notes one value.
    pub fn note(&mut self, digest: FileDigest) {
        match digest.notation {
            Notation::Negative => self.negative += 1,
            Notation::High => self.high += 1,
            Notation::Low => {}
        }
    }

    /// What the file looks like, for the summary (with a hint when an
    /// override contradicts the values).
    pub fn describe(&self, mode: SignMode) -> String {
        match (mode, self.negative > 0, self.high > 0) {
            (SignMode::Signed, _, true) => format!(
                "signed (--signed), but {} values are ≥ 2^63: the file looks unsigned",
                self.high
            ),
            (SignMode::Signed, ..) => "signed (--signed)".into(),
            (SignMode::Unsigned, true, _) => format!(
                "unsigned (--unsigned), but {} values are negative: the file looks signed",
                self.negative
            ),
            (SignMode::Unsigned, ..) => "unsigned (--unsigned)".into(),
            (SignMode::Auto, true, true) => {
                "MIXED signed and unsigned (each value read as written)".into()
            }
            (SignMode::Auto, true, false) => "signed (detected)".into(),
            (SignMode::Auto, false, true) => "unsigned (detected)".into(),
            (SignMode::Auto, false, false) => {
                "ambiguous, read as signed (no value < 0 or ≥ 2^63)".into()
            }
        }
    }
}

/// The result of checking one digest-file line against its FEN.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineCheck {
    /// What is wrong with the line itself, if anything.
    pub finding: Option<Finding>,
    /// The FEN to look up in the database (`--against-db`): set when the FEN
    /// is normalized.
    pub lookup: Option<String>,
    /// The digest the file claims, as stored in the database, when it
    /// matches the FEN (then a different `fen_hash` is a database error).
    pub claimed: Option<i64>,
}

/// Checks one parsed line (number `line_no`): each digest column that `mode`
/// selects must be a value of its column's signedness and equal the FEN's
/// xxh64; the FEN must be normalized. Single-digest columns feed `detector`.
///
/// # Panics
///
/// Only on a line number beyond `i64::MAX`, which no file reaches.
pub fn check_digest_line(
    line_no: u64,
    line: &DigestLine,
    mode: SignMode,
    detector: &mut SignDetector,
) -> LineCheck {
    let id = i64::try_from(line_no).expect("a digest file has far fewer than 2^63 lines");
    let finding = |(kind, stored, expected)| Finding {
        id,
        normalized_fen: line.fen.clone(),
        stored,
        expected,
        kind,
    };
    let digest = fen_digest_unsigned(&line.fen);
    let mut first_problem = None;
    let mut claimed = None;
    for (column, text) in &line.digests {
        match check_column(*column, text, mode, digest, detector) {
            None => {}
            Some(Ok(value)) => claimed = Some(value),
            Some(Err(problem)) => {
                first_problem.get_or_insert_with(|| finding(problem));
            }
        }
    }
    let normalized = is_normalized(&line.fen);
    if first_problem.is_none() && !normalized {
        first_problem = Some(finding((
            MismatchKind::NotNormalized,
            line.fen.clone(),
            normalize_fen_text(&line.fen),
        )));
    }
    let clean = first_problem.is_none();
    LineCheck {
        finding: first_problem,
        lookup: normalized.then(|| line.fen.clone()),
        claimed: claimed.filter(|_| clean),
    }
}

/// One digest column (`text`) of a line whose FEN's digest is `digest`:
/// `None` when `mode` skips the column, else the stored (signed) value it
/// claims when it is right, or what is wrong with it (kind, stored,
/// expected). A single-digest column feeds `detector`.
fn check_column(
    column: DigestColumn,
    text: &str,
    mode: SignMode,
    digest: u64,
    detector: &mut SignDetector,
) -> Option<Result<i64, (MismatchKind, String, String)>> {
    if matches!(
        (column, mode),
        (DigestColumn::Signed, SignMode::Unsigned) | (DigestColumn::Unsigned, SignMode::Signed)
    ) {
        return None;
    }
    let Some(value) = FileDigest::parse(text) else {
        return Some(Err((
            MismatchKind::BadLine,
            text.to_owned(),
            "a 64-bit integer".into(),
        )));
    };
    if column == DigestColumn::Single {
        detector.note(value);
    }
    let unsigned_column = match (column, mode) {
        (DigestColumn::Unsigned, _) | (DigestColumn::Single, SignMode::Unsigned) => Some(true),
        (DigestColumn::Signed, _) | (DigestColumn::Single, SignMode::Signed) => Some(false),
        (DigestColumn::Single, SignMode::Auto) => None,
    };
    let misfit = matches!(
        (unsigned_column, value.notation),
        (Some(true), Notation::Negative) | (Some(false), Notation::High)
    );
    if misfit {
        let want = if unsigned_column == Some(true) {
            "an unsigned digest (0 ≤ d < 2^64)"
        } else {
            "a signed digest (-2^63 ≤ d < 2^63)"
        };
        return Some(Err((MismatchKind::BadLine, text.to_owned(), want.into())));
    }
    if value.bits == digest {
        return Some(Ok(value.signed()));
    }
    // Show the expected value in the notation the line uses.
    let as_unsigned = unsigned_column.unwrap_or(value.notation == Notation::High);
    let expected = if as_unsigned {
        digest.to_string()
    } else {
        to_signed(digest).to_string()
    };
    Some(Err((
        MismatchKind::DigestMismatch,
        text.to_owned(),
        expected,
    )))
}

/// Compares one line with what the database holds for its FEN
/// (`--against-db`): missing, or a different `fen_hash` when the file's
/// digest is right.
///
/// # Panics
///
/// Only on a line number beyond `i64::MAX`, which no file reaches.
pub fn check_against_db<S: BuildHasher>(
    line_no: u64,
    check: &LineCheck,
    db: &HashMap<String, i64, S>,
) -> Option<Finding> {
    let fen = check.lookup.as_ref()?;
    let id = i64::try_from(line_no).expect("a digest file has far fewer than 2^63 lines");
    match (db.get(fen), check.claimed) {
        (None, _) => Some(Finding {
            id,
            normalized_fen: fen.clone(),
            stored: String::new(),
            expected: fen_digest(fen).to_string(),
            kind: MismatchKind::DbMissing,
        }),
        (Some(&stored), Some(claimed)) if stored != claimed => Some(Finding {
            id,
            normalized_fen: fen.clone(),
            stored: stored.to_string(),
            expected: claimed.to_string(),
            kind: MismatchKind::DbMismatch,
        }),
        _ => None,
    }
}
