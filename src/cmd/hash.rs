//! `pgnload hash`: FENs in, `normalized_fen<TAB>signed<TAB>unsigned` out.

use std::io::{self, BufRead, Write};

use crate::{
    chess::{
        fen::{canonical_fen, normalize_fen_text},
        hash::fen_digest_unsigned,
        hash::to_signed,
        model::GameVariant,
    },
    error::Error,
    error::ExitStatus,
};

/// Options of `pgnload hash`.
#[derive(Debug, Clone, clap::Args)]
pub struct HashArgs {
    /// FENs to hash; none reads one FEN per line from stdin.
    pub fens: Vec<String>,
    /// Parse each FEN and re-emit it as python-chess would (legal en passant
    /// only, cleaned castling rights) instead of only normalizing the text.
    #[arg(long)]
    pub canonical: bool,
    /// Variant rules for `--canonical` (any spelling: `king_of_the_hill`,
    /// `kingOfTheHill`, python-chess's `King of the Hill`…).
    #[arg(long, default_value = "standard", value_parser = crate::cli::VariantParser)]
    pub variant: GameVariant,
}

/// Hashes one FEN: the line printed, or why it could not be canonicalized.
pub fn hash_line(raw: &str, canonical: Option<GameVariant>) -> Result<String, String> {
    let fen = match canonical {
        Some(variant) => canonical_fen(raw, variant.rules(), variant == GameVariant::Chess960)
            .map_err(|e| e.to_string())?,
        None => normalize_fen_text(raw),
    };
    let unsigned = fen_digest_unsigned(&fen);
    Ok(format!("{fen}\t{}\t{unsigned}", to_signed(unsigned)))
}

/// Runs `pgnload hash`.
pub fn run(args: &HashArgs) -> Result<ExitStatus, Error> {
    let variant = args.canonical.then_some(args.variant);
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    let mut failures = 0u64;
    let mut emit = |raw: &str| -> Result<(), Error> {
        if raw.trim().is_empty() {
            return Ok(());
        }
        match hash_line(raw, variant) {
            Ok(line) => writeln!(out, "{line}").map_err(Error::Output),
            Err(reason) => {
                failures += 1;
                stderr_line!("ERROR\t{}\t{reason}", raw.trim());
                Ok(())
            }
        }
    };
    if args.fens.is_empty() {
        for line in io::stdin().lock().lines() {
            emit(&line.map_err(Error::Output)?)?;
        }
    } else {
        for fen in &args.fens {
            emit(fen)?;
        }
    }
    out.flush().map_err(Error::Output)?;
    Ok(if failures > 0 {
        ExitStatus::CompletedWithRejects
    } else {
        ExitStatus::Clean
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_mode_pads_and_hashes() {
        let line = hash_line("8/8/8/8/8/8/8/8 w", None).expect("text mode never fails");
        let mut parts = line.split('\t');
        assert_eq!(parts.next(), Some("8/8/8/8/8/8/8/8 w - -"));
        let signed: i64 = parts.next().expect("signed").parse().expect("number");
        let unsigned: u64 = parts.next().expect("unsigned").parse().expect("number");
        assert_eq!(to_signed(unsigned), signed);
    }

    #[test]
    fn canonical_mode_reports_impossible_positions() {
        assert!(hash_line("8/8/8/8/8/8/8/8 w - - 0 1", Some(GameVariant::Standard)).is_err());
    }
}
