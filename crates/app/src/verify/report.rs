//! The TSV report of `pgnload verify`: one line per finding, fields
//! escaped so that no stored text can break the columns.
//!
//! It must not decide what is a finding (the checks do): it only writes
//! them.

use std::{
    fs::File,
    io::{BufWriter, Write},
    path::PathBuf,
};

use super::checks::{Finding, KindCounts};
use crate::error::Error;

/// Escapes a report field like PostgreSQL's text COPY format (backslash,
/// tab, newline, carriage return), so a corrupt FEN cannot break the TSV.
pub fn escape_tsv(field: &str) -> std::borrow::Cow<'_, str> {
    if !field.contains(['\\', '\t', '\n', '\r']) {
        return std::borrow::Cow::Borrowed(field);
    }
    let mut out = String::with_capacity(field.len() + 8);
    for c in field.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Writes one report line (no trailing newline handling beyond `\n`).
pub fn write_finding(out: &mut impl std::io::Write, finding: &Finding) -> std::io::Result<()> {
    writeln!(
        out,
        "{}\t{}\t{}\t{}\t{}",
        finding.id,
        escape_tsv(&finding.normalized_fen),
        escape_tsv(&finding.stored),
        escape_tsv(&finding.expected),
        finding.kind
    )
}

/// The report file and the per-kind counts of what went into it.
pub struct Report {
    path: PathBuf,
    out: BufWriter<File>,
    /// Findings written so far, per kind.
    pub counts: KindCounts,
}

impl Report {
    /// Creates (overwrites) the report at `path` and writes its header;
    /// `first_column` is `id` for rows, `line` for digest-file lines.
    pub fn create(path: PathBuf, first_column: &str) -> Result<Report, Error> {
        let file = File::create(&path).map_err(|source| Error::Open {
            path: path.clone(),
            source,
        })?;
        let mut out = BufWriter::with_capacity(1 << 16, file);
        writeln!(
            out,
            "{first_column}\tnormalized_fen\tstored\texpected\tkind"
        )
        .map_err(Error::Output)?;
        Ok(Report {
            path,
            out,
            counts: KindCounts::default(),
        })
    }

    /// Writes one finding and counts it.
    pub fn write(&mut self, finding: &Finding) -> Result<(), Error> {
        self.counts.add(finding.kind);
        write_finding(&mut self.out, finding).map_err(Error::Output)
    }

    /// Writes findings in order.
    pub fn write_all<'a>(
        &mut self,
        findings: impl IntoIterator<Item = &'a Finding>,
    ) -> Result<(), Error> {
        findings.into_iter().try_for_each(|f| self.write(f))
    }

    /// Flushes the report: its path and the counts of what is in it.
    pub fn finish(mut self) -> Result<(PathBuf, KindCounts), Error> {
        self.out.flush().map_err(Error::Output)?;
        Ok((self.path, self.counts))
    }
}
