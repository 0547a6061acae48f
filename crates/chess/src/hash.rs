//! The position digest: xxHash64 (seed 0) over the UTF-8 bytes of a
//! normalized FEN, stored as a signed 64-bit integer.
//!
//! Why signed: PostgreSQL has no unsigned 64-bit type, and the historical
//! Python importer stored `xxhash.xxh64(fen).intdigest()` mapped with
//! `d - 2**64 if d >= 2**63 else d`, which is exactly the two's-complement
//! reinterpretation `u64 as i64`. Any other mapping would split the
//! `positions.fen_hash` column into two hash spaces.

use xxhash_rust::xxh64::xxh64;

/// The unsigned digest, as Python's `xxhash.xxh64(data).intdigest()` returns it.
#[inline]
pub fn fen_digest_unsigned(normalized_fen: &str) -> u64 {
    xxh64(normalized_fen.as_bytes(), 0)
}

/// [`fen_digest`] of a FEN held as bytes (the replay loop's buffer).
#[inline]
pub fn fen_digest_bytes(normalized_fen: &[u8]) -> i64 {
    to_signed(xxh64(normalized_fen, 0))
}

/// The signed digest stored in `positions.fen_hash`.
#[inline]
pub fn fen_digest(normalized_fen: &str) -> i64 {
    to_signed(fen_digest_unsigned(normalized_fen))
}

/// Two's-complement reading of an unsigned digest (Python: `d - 2**64 if d >= 2**63 else d`).
#[inline]
pub const fn to_signed(digest: u64) -> i64 {
    i64::from_ne_bytes(digest.to_ne_bytes())
}

/// Inverse of [`to_signed`], for reports that print the unsigned form.
#[inline]
pub const fn to_unsigned(digest: i64) -> u64 {
    u64::from_ne_bytes(digest.to_ne_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signed_mapping_matches_the_python_formula() {
        for d in [0u64, 1, (1 << 63) - 1, 1 << 63, u64::MAX] {
            let python = if d >= 1 << 63 {
                i128::from(d) - (1i128 << 64)
            } else {
                i128::from(d)
            };
            assert_eq!(i128::from(to_signed(d)), python, "digest {d}");
            assert_eq!(to_unsigned(to_signed(d)), d);
        }
    }

    #[test]
    fn empty_input_has_the_published_xxh64_value() {
        // XXH64("", seed 0) from the reference implementation's test vectors.
        assert_eq!(fen_digest_unsigned(""), 0xEF46_DB37_51D8_E999);
    }
}

#[cfg(test)]
mod golden {
    use super::*;
    use crate::fen::normalize_fen_text;

    /// `tests/data/hash_golden.tsv` was written by `scripts/py_hash_golden.py`
    /// with Python's `xxhash`; every row must hash identically here.
    #[test]
    fn digests_match_the_python_golden_file_line_by_line() {
        let golden = include_str!("../../../tests/data/hash_golden.tsv");
        let mut rows = 0;
        for (index, line) in golden.lines().enumerate() {
            let n = index + 1;
            if line.starts_with('#') || line.is_empty() {
                continue;
            }
            let fields: Vec<&str> = line.split('\t').collect();
            assert_eq!(fields.len(), 3, "hash_golden.tsv line {n}: {line:?}");
            let (fen, signed, unsigned) = (fields[0], fields[1], fields[2]);
            let signed: i64 = signed
                .parse()
                .unwrap_or_else(|e| panic!("hash_golden.tsv line {n}: signed {signed:?}: {e}"));
            let unsigned: u64 = unsigned
                .parse()
                .unwrap_or_else(|e| panic!("hash_golden.tsv line {n}: unsigned {unsigned:?}: {e}"));
            assert_eq!(
                fen_digest_unsigned(fen),
                unsigned,
                "hash_golden.tsv line {n}: {fen}"
            );
            assert_eq!(fen_digest(fen), signed, "hash_golden.tsv line {n}: {fen}");
            assert_eq!(
                normalize_fen_text(fen),
                fen,
                "hash_golden.tsv line {n} is not normalized"
            );
            rows += 1;
        }
        assert!(rows >= 200, "hash_golden.tsv has only {rows} rows");
    }
}
