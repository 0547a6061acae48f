//! Movetext tokens pgn-reader would skip silently (neither a move, a move
//! number, a result, a NAG nor an annotation): found so the game is
//! rejected instead of imported as something other than what was written.

use std::ops::Range;

use pgn_reader::SanPlus;

use super::decode_text;

/// What the token walk found in a game's text.
#[derive(Debug, Default)]
pub(super) struct Tokens {
    /// Tokens python-chess reads as moves that pgn-reader would skip
    /// (`e2-e4`, `d7d8q`, `b1Q`, `Qxf7++`, `exd6e.p.`, `0000`): each range
    /// of the text with what pgn-reader reads as the same move, in order.
    pub rewrites: Vec<(Range<usize>, Vec<u8>)>,
    /// The first token that is neither a move, a move number, a result, a
    /// NAG nor an annotation, and whether nothing but whitespace follows it
    /// (a game cut off mid-token).
    pub garbage: Option<(String, bool)>,
    /// The NAGs above 255, which pgn-reader skips (its NAG is a byte) and
    /// python-chess keeps: each written in [`Tokens::rewrites`] as one NAG
    /// the game uses nowhere else, and read back in order.
    pub large_nags: LargeNags,
    /// Why a NAG cannot be kept: one above [`u32::MAX`], or NAGs above 255
    /// in a game that uses every NAG a placeholder could be.
    pub unkept_nag: Option<String>,
}

/// The NAGs above 255 of a game, in the order written, and the NAG each
/// was rewritten as (`None`: there are none).
#[derive(Debug, Default)]
pub(crate) struct LargeNags {
    pub placeholder: Option<u8>,
    pub values: Vec<u32>,
}

/// The move number (digits and dots) a movetext token starts with, if
/// any: its length. `0000` is python-chess's null move, not a number.
#[expect(
    clippy::inline_always,
    reason = "part of read_token, which the token walk needs inlined (see there)"
)]
#[inline(always)]
fn move_number(token: &[u8]) -> usize {
    let digits = token.iter().take_while(|b| b.is_ascii_digit()).count();
    let dots = token[digits..].iter().take_while(|&&b| b == b'.').count();
    if digits > 0 && (dots > 0 || digits == token.len()) && !token.starts_with(b"0000") {
        digits + dots
    } else {
        0
    }
}

/// The NAG a token read as kept is (`$N`, after a move number if any):
/// where its `$` is, and its value (`None`: above [`u32::MAX`]).
/// python-chess reads any number of digits.
fn nag_of(token: &[u8]) -> Option<(usize, Option<u32>)> {
    if !matches!(token.first(), Some(b'$' | b'0'..=b'9')) {
        return None;
    }
    let from = move_number(token);
    let digits = token[from..].strip_prefix(b"$")?;
    let value = digits.iter().try_fold(0_u32, |n, &d| {
        n.checked_mul(10)?.checked_add(u32::from(d - b'0'))
    });
    Some((from, value))
}

/// Walks the movetext tokens of a game's text (tag lines skipped) from
/// `movetext` on; tokens before it are only checked. pgn-reader skips a
/// token it cannot read silently; pgnload reads it as python-chess does
/// (through [`Tokens::rewrites`]) or rejects the game instead of importing
/// something other than what was written.
pub(super) fn read_tokens(chunk: &[u8], movetext: usize) -> Tokens {
    let mut found = Tokens::default();
    let mut nags = NagsSeen {
        used: [false; 256],
        large: Vec::new(),
    };
    let mut i = 0;
    let mut line_start = true;
    let mut in_tags = true;
    while let Some(&b) = chunk.get(i) {
        match b {
            b'\n' => {
                line_start = true;
                i += 1;
                continue;
            }
            b' ' | b'\t' | b'\r' | b'(' | b')' => {}
            b'[' if line_start && in_tags => {
                i = skip_to(chunk, i, b'\n');
                continue;
            }
            b'%' if line_start => {
                i = skip_to(chunk, i, b'\n');
                continue;
            }
            b'{' => {
                in_tags = false;
                i = skip_to(chunk, i, b'}') + 1;
                line_start = false;
                continue;
            }
            b';' => {
                in_tags = false;
                i = skip_to(chunk, i, b'\n');
                continue;
            }
            _ => {
                in_tags = false;
                // At least one byte: a stray `}` is a token of its own.
                let end = chunk[i + 1..]
                    .iter()
                    .position(|&c| TOKEN_END[usize::from(c)])
                    .map_or(chunk.len(), |p| i + 1 + p);
                let token = &chunk[i..end];
                match read_token(token) {
                    Reading::Kept if i >= movetext => nags.token(token, i, end, &mut found),
                    Reading::Kept => {}
                    Reading::As { from, text } if i >= movetext => {
                        found.rewrites.push((i + from..end, text));
                    }
                    Reading::As { .. } | Reading::Garbage => {
                        let shown = &token[..token.len().min(40)];
                        let last = chunk[end..].iter().all(u8::is_ascii_whitespace);
                        found.garbage = Some((decode_text(shown).into_owned(), last));
                        return found;
                    }
                }
                i = end;
                line_start = false;
                continue;
            }
        }
        line_start = false;
        i += 1;
    }
    if !nags.large.is_empty() {
        nags.placeholders(&mut found);
    }
    found
}

/// The NAGs of a game's movetext, as the token walk finds them: which
/// ones up to 255 it uses, and where the larger ones are.
struct NagsSeen {
    used: [bool; 256],
    large: Vec<(Range<usize>, u32)>,
}

impl NagsSeen {
    /// Notes the NAG a kept token at `at..end` of the text is, if it is
    /// one; one that cannot be kept is `found`'s `unkept_nag`.
    fn token(&mut self, token: &[u8], at: usize, end: usize, found: &mut Tokens) {
        let Some((from, value)) = nag_of(token) else {
            return;
        };
        let Some(nag) = value else {
            let shown = &token[from..token.len().min(from + 40)];
            found.unkept_nag = Some(format!(
                "NAG {} is above {}, the largest pgnload keeps",
                decode_text(shown),
                u32::MAX
            ));
            return;
        };
        match u8::try_from(nag) {
            Ok(byte) => self.used[usize::from(byte)] = true,
            Err(_) => self.large.push((at + from..end, nag)),
        }
    }

    /// Rewrites each NAG above 255 as a NAG from 7 to 255 (the glyphs `!`
    /// … `?!` are 1 to 6) that no NAG of the game uses, and records their
    /// values for the reader.
    fn placeholders(self, found: &mut Tokens) {
        let Some(placeholder) = (7..=u8::MAX).find(|&n| !self.used[usize::from(n)]) else {
            found.unkept_nag = Some(
                "NAGs above 255 in a game that also uses every NAG from 7 to 255: pgnload \
                 cannot tell them apart"
                    .to_owned(),
            );
            return;
        };
        let text = format!("${placeholder}").into_bytes();
        for (range, value) in self.large {
            found.rewrites.push((range, text.clone()));
            found.large_nags.values.push(value);
        }
        found.large_nags.placeholder = Some(placeholder);
        found
            .rewrites
            .sort_unstable_by_key(|(range, _)| range.start);
    }
}

/// How one movetext token reads.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Reading {
    /// As pgn-reader reads it.
    Kept,
    /// python-chess reads the token from byte `from` on as pgn-reader reads `text`.
    As { from: usize, text: Vec<u8> },
    /// Neither reads it.
    Garbage,
}

/// Reads a movetext token: a move number, possibly glued to the move
/// (`12.`, `12...`, `7.N1f3`), then a move, a result, a NAG or an annotation.
/// Inlined, with everything but move numbers and plain SAN out of line in
/// [`read_other`]: called from the token walk for every token, it cost
/// ~30 instructions per token more than the same checks inlined there
/// (callgrind), and a hint alone is not taken.
#[expect(
    clippy::inline_always,
    reason = "measured: the token walk needs it inlined, and a hint alone is not taken"
)]
#[inline(always)]
pub(super) fn read_token(token: &[u8]) -> Reading {
    let from = move_number(token);
    let rest = &token[from..];
    if rest.is_empty() || is_plain_san(rest) {
        return Reading::Kept;
    }
    read_other(rest, from)
}

/// [`read_token`] for a token that is neither a move number nor plain
/// SAN: `rest` is the token from byte `from` on, after its move number.
#[inline(never)]
fn read_other(rest: &[u8], from: usize) -> Reading {
    const RESULTS: &[&[u8]] = &[b"1-0", b"0-1", b"1/2-1/2", b"*", "½-½".as_bytes()];
    const SYMBOLS: &[&[u8]] = &[
        b"e.p.", b"ep", b"+-", b"-+", b"=", b"+/-", b"-/+", b"+=", b"=+", b"+/=", b"=/+", b"0-0",
        b"0-0-0", b"0-0+", b"0-0-0+", b"0-0#", b"0-0-0#",
    ];
    if RESULTS.contains(&rest) || SYMBOLS.contains(&rest) {
        return Reading::Kept;
    }
    if let Some(nag) = rest.strip_prefix(b"$") {
        return if !nag.is_empty() && nag.iter().all(u8::is_ascii_digit) {
            Reading::Kept
        } else {
            Reading::Garbage
        };
    }
    let annotations = rest
        .iter()
        .rev()
        .take_while(|&&b| b == b'!' || b == b'?')
        .count();
    let mv = &rest[..rest.len() - annotations];
    if mv.is_empty() || SanPlus::from_ascii(mv).is_ok() {
        return Reading::Kept;
    }
    // A byte-order mark before the move (files joined with `cat`):
    // python-chess skips it as it skips any character it cannot read.
    if let Some(after) = rest.strip_prefix("\u{feff}".as_bytes()) {
        return match read_token(after) {
            Reading::Kept => Reading::As {
                from,
                text: after.to_vec(),
            },
            Reading::As { from: inner, text } => {
                let mut whole = after[..inner].to_vec();
                whole.extend_from_slice(&text);
                Reading::As { from, text: whole }
            }
            Reading::Garbage => Reading::Garbage,
        };
    }
    match python_move(rest) {
        Some(text) => Reading::As { from, text },
        None => Reading::Garbage,
    }
}

/// A move as python-chess 1.11 reads it where pgn-reader does not: its
/// pattern (`[NBKRQ]?[a-h]?[1-8]?[-x]?[a-h][1-8](=?[nbrqkNBRQK])?`, the
/// castlings, `0000` and `@@@@` for a null move) matched at the start of
/// the token with the regex's backtracking order, followed only by what
/// python-chess skips there (check marks, an `e.p.` or `ep`) and by
/// annotation glyphs. Returns the same move written as pgn-reader reads it
/// (no `-` separator; `=` and an upper-case piece before a promotion), the
/// glyphs kept; `None` when python-chess would read something else.
fn python_move(token: &[u8]) -> Option<Vec<u8>> {
    let (mut text, len) = python_move_core(token)?;
    let mut rest = &token[len..];
    let checks = |r: &[u8]| r.iter().take_while(|&&b| b == b'+' || b == b'#').count();
    rest = &rest[checks(rest)..];
    rest = rest
        .strip_prefix(b"e.p.")
        .or_else(|| rest.strip_prefix(b"ep"))
        .unwrap_or(rest);
    rest = &rest[checks(rest)..];
    let glyphs = rest.len() <= 2 && rest.iter().all(|&b| b == b'!' || b == b'?');
    glyphs.then(|| {
        text.extend_from_slice(rest);
        text
    })
}

/// The start of python-chess's move pattern in `token` (see
/// [`python_move`]), written as pgn-reader reads it, and its length.
fn python_move_core(token: &[u8]) -> Option<(Vec<u8>, usize)> {
    for (written, read) in [
        (&b"O-O-O"[..], &b"O-O-O"[..]),
        (b"0-0-0", b"O-O-O"),
        (b"O-O", b"O-O"),
        (b"0-0", b"O-O"),
        (b"0000", b"--"),
        (b"@@@@", b"--"),
    ] {
        if token.starts_with(written) {
            return Some((read.to_vec(), written.len()));
        }
    }
    let piece = usize::from(matches!(
        token.first(),
        Some(b'N' | b'B' | b'K' | b'R' | b'Q')
    ));
    let t = &token[piece..];
    let is_file = |at: usize| t.get(at).is_some_and(|b| (b'a'..=b'h').contains(b));
    let is_rank = |at: usize| t.get(at).is_some_and(|b| (b'1'..=b'8').contains(b));
    // Greedy optional parts, the last one given up first, as the regex does.
    for combo in (0..8u8).rev() {
        let (file, rank, separator) = (combo & 4 != 0, combo & 2 != 0, combo & 1 != 0);
        let mut at = 0;
        let mut text = token[..piece].to_vec();
        if file {
            if !is_file(at) {
                continue;
            }
            text.push(t[at]);
            at += 1;
        }
        if rank {
            if !is_rank(at) {
                continue;
            }
            text.push(t[at]);
            at += 1;
        }
        if separator {
            match t.get(at) {
                Some(b'x') => text.push(b'x'),
                Some(b'-') => {}
                _ => continue,
            }
            at += 1;
        }
        if !(is_file(at) && is_rank(at + 1)) {
            continue;
        }
        text.extend_from_slice(&t[at..at + 2]);
        at += 2;
        let equals = usize::from(t.get(at) == Some(&b'='));
        if let Some(&role) = t.get(at + equals).filter(|b| b"nbrqkNBRQK".contains(b)) {
            text.push(b'=');
            text.push(role.to_ascii_uppercase());
            at += equals + 1;
        }
        return Some((text, piece + at));
    }
    None
}

/// Bytes that end a movetext token: whitespace, braces, parentheses, `;`.
const TOKEN_END: [bool; 256] = {
    let mut table = [false; 256];
    let ends = b" \t\r\n{}();";
    let mut k = 0;
    while k < ends.len() {
        table[ends[k] as usize] = true;
        k += 1;
    }
    table
};

/// The index of the first `needle` at or after `from`, else `chunk.len()`.
/// Eight bytes per step (tag lines and clock comments are most of a game's
/// bytes): a byte equal to `needle` becomes zero, and the classic zero-byte
/// test finds it; its lowest hit is always exact.
pub(super) fn skip_to(chunk: &[u8], from: usize, needle: u8) -> usize {
    const LOW: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    let splat = u64::from_ne_bytes([needle; 8]);
    let rest = chunk.get(from..).unwrap_or_default();
    let mut words = rest.chunks_exact(8);
    let mut at = from;
    for word in &mut words {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(word);
        let x = u64::from_le_bytes(bytes) ^ splat;
        let hits = x.wrapping_sub(LOW) & !x & HIGH;
        if hits != 0 {
            return at + (hits.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    words
        .remainder()
        .iter()
        .position(|&c| c == needle)
        .map_or(chunk.len(), |p| at + p)
}

/// The common SAN shapes (`e4`, `exd5`, `Nbd7`, `R1xe2+`, `e8=Q#`:
/// `[NBRQK]?[a-h]?[1-8]?x?[a-h][1-8](=[NBRQ])?[+#]?`), checked without
/// running the SAN parser again. Every such token parses as `SanPlus`, so
/// this only skips work: anything else still goes to the parser.
#[inline]
pub(super) fn is_plain_san(token: &[u8]) -> bool {
    let t = match token {
        [rest @ .., b'+' | b'#'] => rest,
        _ => token,
    };
    let t = match t {
        [rest @ .., b'=', b'N' | b'B' | b'R' | b'Q'] => rest,
        _ => t,
    };
    let [prefix @ .., b'a'..=b'h', b'1'..=b'8'] = t else {
        return false;
    };
    let mut prefix = prefix;
    if let [b'N' | b'B' | b'R' | b'Q' | b'K', rest @ ..] = prefix {
        prefix = rest;
    }
    if let [b'a'..=b'h', rest @ ..] = prefix {
        prefix = rest;
    }
    if let [b'1'..=b'8', rest @ ..] = prefix {
        prefix = rest;
    }
    if let [b'x', rest @ ..] = prefix {
        prefix = rest;
    }
    prefix.is_empty()
}
