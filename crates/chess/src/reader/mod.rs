//! PGN reading: the only module that touches pgn-reader's `Visitor` API, so
//! that crate's API churn stays in one file. It holds two visitors: the
//! game parser behind [`take_game`], and the bare token counter of
//! [`scan_only`] (the benchmark's parse-only baseline).
//!
//! Two steps, on purpose:
//!
//! 1. [`GameSplitter`] (one thread, over the decompressed stream) finds
//!    where each game ends and where its tags are, with a small state
//!    machine that follows pgn-reader's own rules, so the game boundaries
//!    (and game numbers, offsets and tags of well-formed games) are
//!    exactly pgn-reader's. Where pgn-reader would lose its footing in the
//!    tags (a quote inside a value, a value cut by a newline, a stray `]`)
//!    and split one game into a fragment and a phantom game, the splitter
//!    keeps the game whole. Where python-chess draws other boundaries (a
//!    second empty line after the tags ends a game of tags only; moves after
//!    a tag on its line keep the tags going; a BOM starting a game's first
//!    line is skipped), the splitter draws python-chess's, so game numbers
//!    agree with it. A lone CR ends a line, as in python-chess.
//!    Each game keeps its verbatim bytes (for the rejects table), its game
//!    number and the byte offset of its first byte. Memory is bounded: a
//!    game larger than `max_game_bytes` is kept only as its first bytes and
//!    marked too large, whatever its size, and at most [`MAX_TAGS`] tags
//!    are recorded.
//! 2. [`take_game`] (in parallel, per chunk) decodes the tags, parses the
//!    movetext with pgn-reader (mainline, clocks, evals, NAGs) after
//!    writing the move notations python-chess reads and pgn-reader does not
//!    (`e2-e4`, `d7d8q`, `b1Q`, `Qxf7++`, `exd6e.p.`, `0000`) as SAN, makes the
//!    checks that need the raw bytes (size, garbage, a game cut off
//!    mid-token, bytes PostgreSQL cannot store) and hands the
//!    [`RawGame`](crate::model::RawGame) on to replay.
//!
//! It must not replay moves (that is `replay`) nor read anything but the
//! `Read` it is given.

mod game;
mod garbage;
mod splitter;

use std::borrow::Cow;
use std::ops::Range;

use crate::reject::{RejectReason, SourcePos};

pub use game::{ParseLimits, ScanStats, scan_only, take_game};
pub use splitter::GameSplitter;

/// Longest tag line pgn-reader is asked to support in [`scan_only`], and
/// how far the splitter looks past a tag value cut by a newline for the
/// rest of that value.
const TAG_LINE_BYTES: usize = 4096;

/// Tags recorded per game at most; a game with more is rejected. Real games
/// carry a few dozen; without a bound, a hostile game of tiny tags costs
/// ~100 bytes of memory per 7 bytes of input.
pub const MAX_TAGS: usize = 1000;

/// One game as read: its verbatim bytes and where its parts are.
#[derive(Debug, Clone)]
pub struct GameChunk {
    /// Where the game is.
    pub pos: SourcePos,
    /// The game's bytes; only the first `max_game_bytes` when `total_len` is larger.
    pub bytes: Vec<u8>,
    /// The game's full length in the stream.
    pub total_len: u64,
    /// Where the splitter found the tags and the movetext.
    scan: GameScan,
}

impl GameChunk {
    /// A game of an exchange format that cannot be rendered as PGN: it is
    /// rejected for `reason` by [`take_game`], `bytes` (what was stored)
    /// kept as its raw bytes.
    pub fn undecodable(pos: SourcePos, bytes: Vec<u8>, reason: String) -> GameChunk {
        GameChunk {
            pos,
            total_len: bytes.len() as u64,
            bytes,
            scan: GameScan {
                problem: Some(RejectReason::Undecodable(reason)),
                ..GameScan::default()
            },
        }
    }

    /// Whether the chunk holds only the head of a larger game.
    pub fn is_truncated(&self) -> bool {
        self.total_len > self.bytes.len() as u64
    }
}

/// A tag found by the splitter, by offsets into the game's bytes.
#[derive(Debug, Clone)]
enum TagSpan {
    /// `[Name "value"]` as pgn-reader reads it: the name is what precedes
    /// the opening quote (less one space); the value is backslash-escaped.
    Quoted {
        name: Range<usize>,
        value: Range<usize>,
    },
    /// A whole tag line pgn-reader misreads (`[Event "The "Big" Open"]`):
    /// read as python-chess reads it, else the game is rejected.
    Line(Range<usize>),
}

/// What the splitter learnt about one game.
#[derive(Debug, Clone, Default)]
struct GameScan {
    tags: Vec<TagSpan>,
    /// Offset of the movetext in the game's bytes (its length when none).
    movetext: Option<usize>,
    /// Why the game cannot be read, when the splitter already knows.
    problem: Option<RejectReason>,
}

/// Tag text is UTF-8 in modern PGN; older files use Latin-1, which is
/// decoded byte-for-char rather than replaced, so names survive.
pub fn decode_text(bytes: &[u8]) -> Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(s) => Cow::Borrowed(s),
        Err(_) => Cow::Owned(bytes.iter().map(|&b| char::from(b)).collect()),
    }
}

#[cfg(test)]
mod tests {
    use std::{fmt::Write as _, sync::Arc};

    use pgn_reader::SanPlus;

    use super::{
        game::lone_cr_as_newline,
        garbage::{Reading, is_plain_san, read_token, skip_to},
        *,
    };
    use crate::{
        annotation::{LEVEL_COST, MOVE_COST, PAREN_COST},
        model::{GameResult, RawGame},
    };

    #[test]
    fn plain_san_shapes_all_parse_as_san() {
        // Every string of up to 5 bytes over SAN's alphabet: whatever the
        // shortcut accepts, the parser accepts too.
        let alphabet = b"NBRQKPaeh18x=+#-O@";
        let mut tokens: Vec<Vec<u8>> = vec![Vec::new()];
        let mut accepted = 0;
        for _ in 0..5 {
            tokens = tokens
                .iter()
                .flat_map(|t| {
                    alphabet.iter().map(move |&b| {
                        let mut next = t.clone();
                        next.push(b);
                        next
                    })
                })
                .collect();
            for token in &tokens {
                if is_plain_san(token) {
                    assert!(
                        SanPlus::from_ascii(token).is_ok(),
                        "{}",
                        String::from_utf8_lossy(token)
                    );
                    accepted += 1;
                }
            }
        }
        assert!(accepted > 1000, "only {accepted} tokens took the shortcut");
        assert!(is_plain_san(b"Qh4xe1#") && is_plain_san(b"Nb1c3") && is_plain_san(b"e8=Q+"));
    }

    #[test]
    fn skip_to_finds_the_first_needle_at_any_offset() {
        let text: Vec<u8> = (0..200u32)
            .map(|i| b"ab}\n{x"[(i * 7 % 11 % 6) as usize])
            .collect();
        for from in 0..=text.len() {
            for needle in [b'}', b'\n', b'{', b'z'] {
                let expected = text[from..]
                    .iter()
                    .position(|&c| c == needle)
                    .map_or(text.len(), |p| from + p);
                assert_eq!(skip_to(&text, from, needle), expected, "from {from}");
            }
        }
    }

    #[test]
    fn only_lone_crs_become_newlines_wherever_they_are() {
        let naive = |bytes: &[u8]| -> Vec<u8> {
            (0..bytes.len())
                .map(|i| match (bytes[i], bytes.get(i + 1)) {
                    (b'\r', Some(b'\n')) => b'\r',
                    (b'\r', _) => b'\n',
                    (b, _) => b,
                })
                .collect()
        };
        // Every placement of a CR, a CRLF and a CRCRLF in a 19-byte line,
        // across the eight-byte steps of the search.
        let mut changed = 0;
        for at in 0..19 {
            for insert in [&b"\r"[..], b"\r\n", b"\r\r\n", b"\r\nx\r"] {
                let mut text = b"1. e4 e5 2. Nf3 *\r\n".to_vec();
                text.splice(at..at, insert.iter().copied());
                let out = lone_cr_as_newline(&text);
                assert_eq!(&*out, &naive(&text)[..], "{text:?}");
                assert_eq!(matches!(out, Cow::Borrowed(_)), *out == *text, "{text:?}");
                changed += usize::from(*out != *text);
            }
        }
        assert!(changed >= 19 * 3, "{changed}");
        assert!(matches!(
            lone_cr_as_newline(b"no cr at all"),
            Cow::Borrowed(_)
        ));
    }

    fn split_all(pgn: &[u8], cap: u64) -> Vec<GameChunk> {
        let limits = ParseLimits {
            max_game_bytes: cap,
            ..LIMITS
        };
        let mut splitter = GameSplitter::new(pgn, Arc::from("t.pgn"), 0, 0, limits);
        let mut chunks = Vec::new();
        while let Some(chunk) = splitter.next_chunk().expect("in-memory source cannot fail") {
            chunks.push(chunk);
        }
        chunks
    }

    const LIMITS: ParseLimits = ParseLimits {
        max_plies: 1000,
        max_game_bytes: 1 << 20,
    };

    #[test]
    fn splitter_gives_offsets_and_numbers_of_each_game() {
        let pgn = b"\xef\xbb\xbf[Event \"a\"]\n\n1. e4 e5 1-0\n\n[Event \"b\"]\n\n1. d4 *\n";
        let chunks = split_all(pgn, 1 << 20);
        assert_eq!(chunks.len(), 2);
        assert_eq!(chunks[0].pos.byte_offset, 3);
        assert_eq!(chunks[0].pos.game_number, 1);
        assert!(chunks[0].bytes.starts_with(b"[Event \"a\"]"));
        let second = usize::try_from(chunks[1].pos.byte_offset).expect("a short test input");
        assert!(pgn[second..].starts_with(b"[Event \"b\"]"));
        assert_eq!(chunks[1].bytes, &pgn[second..]);
        assert_eq!(chunks[1].pos.game_number, 2);
    }

    #[test]
    fn parse_keeps_mainline_clock_eval_and_nag() {
        let pgn = b"[Site \"https://lichess.org/abcdefgh\"]\n\n1. e4 { [%eval 0.2] [%clk 0:05:00] } e5?! (1... c5 2. Nf3) 2. Nf3 $1 *\n";
        let mut chunk = split_all(pgn, 1 << 20).remove(0);
        let game = take_game(&mut chunk, LIMITS).expect("valid game");
        assert_eq!(game.moves.len(), 3);
        assert_eq!(game.moves[0].clock_ms, Some(300_000));
        assert_eq!(game.moves[1].nag, Some(6));
        assert_eq!(game.moves[2].nag, Some(1));
        assert_eq!(game.movetext_result, Some(GameResult::Unknown));
    }

    #[test]
    fn oversized_game_is_cut_but_the_next_game_survives() {
        let mut pgn = b"[Event \"big\"]\n\n1. e4 {".to_vec();
        pgn.extend(std::iter::repeat_n(b'x', 2_000_000));
        pgn.extend_from_slice(b"} e5 *\n\n[Event \"small\"]\n\n1. d4 *\n");
        let mut chunks = split_all(&pgn, 1000);
        assert_eq!(chunks.len(), 2);
        assert!(chunks[0].is_truncated());
        assert_eq!(chunks[0].bytes.len(), 1000);
        assert!(matches!(
            take_game(&mut chunks[0], LIMITS),
            Err(RejectReason::TooLarge { .. })
        ));
        assert!(chunks[1].bytes.starts_with(b"[Event \"small\"]"));
        assert!(take_game(&mut chunks[1], LIMITS).is_ok());
    }

    /// Variations are counted against the byte cap as they are read (see
    /// `annotation::Held`): a game whose variations would take more to
    /// hold is rejected at the first byte past it, wide or deep.
    #[test]
    fn variations_are_counted_against_the_game_cap_as_read() {
        let read = |movetext: &str, cap: u64| {
            let limits = ParseLimits {
                max_plies: 1000,
                max_game_bytes: cap,
            };
            let pgn = format!("[Event \"x\"]\n\n{movetext} *\n");
            let mut splitter = GameSplitter::new(pgn.as_bytes(), Arc::from("t.pgn"), 0, 0, limits);
            let mut chunk = splitter.next_chunk().expect("in memory").expect("one game");
            take_game(&mut chunk, limits).map(|game| game.notes.len())
        };
        let siblings = format!("1. Nf3 {}", "( 1. Nc3 ) ".repeat(100_000));
        let wide = 100_000 * (MOVE_COST + 2 * PAREN_COST) + LEVEL_COST;
        let mut nested = String::from("1. Nf3 a6");
        for level in 1..=10_000 {
            let knight = ["Nf3", "Nf6", "Ng1", "Ng8"][level % 4];
            let pawn = if level.is_multiple_of(2) { "a6" } else { "a3" };
            let _ = write!(nested, " ( {knight} {pawn}");
        }
        nested.push_str(&" )".repeat(10_000));
        let deep = 10_000 * (2 * MOVE_COST + 2 * PAREN_COST + LEVEL_COST);
        for (movetext, cost) in [(&siblings, wide), (&nested, deep)] {
            assert_eq!(read(movetext, cost), Ok(1));
            assert_eq!(
                read(movetext, cost - 1),
                Err(RejectReason::VariationsTooLarge { limit: cost - 1 })
            );
        }
    }

    #[test]
    fn garbage_unterminated_and_long_games_are_rejected() {
        let reject = |pgn: &[u8], limits: ParseLimits| {
            let mut splitter = GameSplitter::new(pgn, Arc::from("t.pgn"), 0, 0, limits);
            let mut chunk = splitter.next_chunk().expect("in memory").expect("one game");
            take_game(&mut chunk, limits)
        };
        assert!(matches!(
            reject(b"[Event \"x\"]\n\n1. e4 fooo e5 *\n", LIMITS),
            Err(RejectReason::Garbage { .. })
        ));
        assert!(matches!(
            reject(b"[Event \"x\"]\n\n1. e4 } e5 *\n", LIMITS),
            Err(RejectReason::Garbage { .. })
        ));
        assert!(matches!(
            reject(b"[Event \"x\"]\n\n1. e4 e5 2. N\n", LIMITS),
            Err(RejectReason::Unterminated)
        ));
        assert!(matches!(
            reject(b"[Event \"x\"]\n\n1. e4 e5 2. N e4\n", LIMITS),
            Err(RejectReason::Garbage { .. })
        ));
        let unmarked = reject(b"[Event \"x\"]\n\n1. e4 e5\n", LIMITS).expect("read to its end");
        assert_eq!((unmarked.moves.len(), unmarked.movetext_result), (2, None));
        assert!(matches!(
            reject(b"[Event \"x\"]\n\n1. e4 {never closed\n", LIMITS),
            Err(RejectReason::Syntax(_))
        ));
        let short = ParseLimits {
            max_plies: 1,
            ..LIMITS
        };
        assert!(matches!(
            reject(b"1. e4 e5 *\n", short),
            Err(RejectReason::TooManyPlies { limit: 1 })
        ));
    }

    #[test]
    fn common_movetext_forms_are_not_garbage() {
        for token in [
            &b"12."[..],
            b"12...",
            b"7.N1f3",
            b"Bg6?!",
            b"e4!!",
            b"$14",
            b"O-O-O+",
            b"0-0",
            b"1/2-1/2",
            b"P@e4",
            b"e8=Q#",
            b"e2e4",
            b"--",
            b"Z0",
            b"1...e5",
        ] {
            assert_eq!(
                read_token(token),
                Reading::Kept,
                "{}",
                String::from_utf8_lossy(token)
            );
        }
        for token in [
            &b"foo"[..],
            b"1-",
            b"$",
            b"e9",
            b"}",
            b"e2e4e5",
            b"Pe2-e4",
            b"e4+x",
        ] {
            assert_eq!(
                read_token(token),
                Reading::Garbage,
                "{}",
                String::from_utf8_lossy(token)
            );
        }
    }

    #[test]
    fn notations_python_chess_reads_are_written_as_pgn_reader_reads_them() {
        for (token, from, read) in [
            (&b"d7d8q"[..], 0, &b"d7d8=Q"[..]),
            (b"d7d8Q", 0, b"d7d8=Q"),
            (b"e2-e4", 0, b"e2e4"),
            (b"12.Ng1-f3", 3, b"Ng1f3"),
            (b"Nb1-c3!?", 0, b"Nb1c3!?"),
            (b"b1Q+", 0, b"b1=Q"),
            (b"a8k", 0, b"a8=K"),
            (b"Qxf7++", 0, b"Qxf7"),
            (b"exd6e.p.", 0, b"exd6"),
            (b"exd6ep+", 0, b"exd6"),
            (b"0-0++", 0, b"O-O"),
            (b"0-0-0++", 0, b"O-O-O"),
            (b"0000", 0, b"--"),
            (b"@@@@", 0, b"--"),
            ("\u{feff}e5".as_bytes(), 0, b"e5"),
            ("\u{feff}e2-e4".as_bytes(), 0, b"e2e4"),
        ] {
            let expected = Reading::As {
                from,
                text: read.to_vec(),
            };
            assert_eq!(
                read_token(token),
                expected,
                "{}",
                String::from_utf8_lossy(token)
            );
            // What the token becomes is a move pgn-reader reads whole.
            let san =
                &read[..read.len() - read.iter().rev().take_while(|b| b"!?".contains(b)).count()];
            assert!(
                SanPlus::from_ascii(san).is_ok(),
                "{}",
                String::from_utf8_lossy(read)
            );
        }
    }

    #[test]
    fn each_game_is_read_alone_by_the_reader_a_thread_keeps() {
        // One thread reads one game after another with the same reader,
        // whatever the game before left: a long game, a game stopped at
        // the ply cap, a game cut in a comment, a game of tags only.
        let games: [&[u8]; 6] = [
            b"[Event \"a\"]\n\n1. e4 e5 2. Nf3 Nc6 3. Bb5 a6 { long } 4. Ba4 Nf6 1-0\n",
            b"[Event \"b\"]\n\n1. d4 *\n",
            b"[Event \"c\"]\n\n1. c4 e5 2. Nc3 Nf6 3. g3 *\n",
            b"[Event \"d\"]\n\n1. e4 {never closed\n",
            b"[Event \"e\"]\n\n",
            b"[Event \"f\"]\n\n1. Nf3 d5 0-1\n",
        ];
        let limits = ParseLimits {
            max_plies: 4,
            ..LIMITS
        };
        let read = |pgn: &[u8]| take_game(&mut split_all(pgn, 1 << 20).remove(0), limits);
        let sans = |game: &RawGame| -> Vec<String> {
            game.moves.iter().map(|m| m.san.to_string()).collect()
        };
        for _ in 0..2 {
            assert!(matches!(
                read(games[0]),
                Err(RejectReason::TooManyPlies { limit: 4 })
            ));
            let b = read(games[1]).expect("valid");
            assert_eq!(
                (sans(&b), b.movetext_result),
                (vec!["d4".to_owned()], Some(GameResult::Unknown))
            );
            assert!(matches!(
                read(games[2]),
                Err(RejectReason::TooManyPlies { limit: 4 })
            ));
            assert!(matches!(read(games[3]), Err(RejectReason::Syntax(_))));
            let e = read(games[4]).expect("tags only");
            assert_eq!((e.moves.len(), e.movetext_result), (0, None));
            let f = read(games[5]).expect("valid");
            assert_eq!(sans(&f), ["Nf3", "d5"]);
            assert_eq!(f.movetext_result, Some(GameResult::BlackWins));
            assert_eq!(f.tags.iter().collect::<Vec<_>>(), [("Event", "f")]);
        }
    }

    #[test]
    fn tags_are_kept_exactly_as_read() {
        // Escapes, a quote python-chess reads inside a value, Latin-1,
        // empty values and names written twice, in file order.
        let pgn = b"[Event \"A \\\"B\\\" \\\\ C\"]\n[Site \"\"]\n[White \"J\xf6rg\"]\n\
            [Event \"The \"Big\" Open\"]\n[Annotator \"x\"]\n[Annotator \"\"]\n\n1. e4 *\n";
        let game = take_game(&mut split_all(pgn, 1 << 20).remove(0), LIMITS).expect("valid");
        let read: Vec<(&str, &str)> = game.tags.iter().collect();
        assert_eq!(
            read,
            [
                ("Event", "A \"B\" \\ C"),
                ("Site", ""),
                ("White", "Jörg"),
                ("Event", "The \"Big\" Open"),
                ("Annotator", "x"),
                ("Annotator", ""),
            ]
        );
        assert_eq!(game.tag("Event"), Some("A \"B\" \\ C"));
    }

    #[test]
    fn latin1_tags_are_decoded_byte_for_char() {
        assert_eq!(decode_text(b"J\xf6rg"), "Jörg");
        assert_eq!(decode_text("Jörg".as_bytes()), "Jörg");
    }
}
