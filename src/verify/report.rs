//! The TSV report of `pgnload verify`: one line per finding, fields
//! escaped so that no stored text can break the columns.

use super::checks::Finding;

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
