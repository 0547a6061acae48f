//! Movetext tokens pgn-reader would skip silently (neither a move, a move
//! number, a result, a NAG nor an annotation): found so the game is
//! rejected instead of imported as something other than what was written.

use pgn_reader::SanPlus;

use super::decode_text;

/// Finds a movetext token that is neither a move, a move number, a result,
/// a NAG nor an annotation. pgn-reader skips such tokens silently; pgnload
/// rejects the game instead of importing something other than what was
/// written.
pub(super) fn find_garbage(chunk: &[u8]) -> Option<String> {
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
                if !is_movetext_token(token) {
                    let shown = &token[..token.len().min(40)];
                    return Some(decode_text(shown).into_owned());
                }
                i = end;
                line_start = false;
                continue;
            }
        }
        line_start = false;
        i += 1;
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

pub(super) fn is_movetext_token(token: &[u8]) -> bool {
    // A move number, possibly glued to the move: `12.`, `12...`, `7.N1f3`.
    const RESULTS: &[&[u8]] = &[b"1-0", b"0-1", b"1/2-1/2", b"*", "½-½".as_bytes()];
    const SYMBOLS: &[&[u8]] = &[
        b"e.p.", b"ep", b"+-", b"-+", b"=", b"+/-", b"-/+", b"+=", b"=+", b"+/=", b"=/+", b"0-0",
        b"0-0-0", b"0-0+", b"0-0-0+", b"0-0#", b"0-0-0#",
    ];
    let digits = token.iter().take_while(|b| b.is_ascii_digit()).count();
    let dots = token[digits..].iter().take_while(|&&b| b == b'.').count();
    let rest = if digits > 0 && (dots > 0 || digits == token.len()) {
        &token[digits + dots..]
    } else {
        token
    };
    if rest.is_empty() || is_plain_san(rest) {
        return true;
    }
    if RESULTS.contains(&rest) || SYMBOLS.contains(&rest) {
        return true;
    }
    if let Some(nag) = rest.strip_prefix(b"$") {
        return !nag.is_empty() && nag.iter().all(u8::is_ascii_digit);
    }
    let annotations = rest
        .iter()
        .rev()
        .take_while(|&&b| b == b'!' || b == b'?')
        .count();
    let mv = &rest[..rest.len() - annotations];
    mv.is_empty() || SanPlus::from_ascii(mv).is_ok()
}

/// The common SAN shapes (`e4`, `exd5`, `Nbd7`, `R1xe2+`, `e8=Q#`:
/// `[NBRQK]?[a-h]?[1-8]?x?[a-h][1-8](=[NBRQ])?[+#]?`), checked without
/// running the SAN parser again. Every such token parses as `SanPlus`, so
/// this only skips work: anything else still goes to the parser.
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
