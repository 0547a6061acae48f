//! Import scope: which games an import keeps (`--rated-only`,
//! `--min-rating`, `--speeds`, `--variants`, `--since/--until`,
//! `--exclude-bots`), decided from a replayed game alone, and how much of
//! each kept game becomes positions and moves rows
//! (`--positions-max-ply`, `--games-only`).
//!
//! It lives in the pure core so that the decision is one function, unit
//! tested without a database or channels, and so that a game is put in a
//! speed or variant exactly as the explorer and the `games` filters put it
//! ([`Speed::from_clock`], [`GameVariant`]). A game out of scope is neither
//! imported nor rejected: the import counts it as "filtered".

use std::fmt;

use shakmaty::{CastlingMode, Position, san::SanPlus, uci::UciMove};

use crate::{
    category::Speed,
    encoding::decode_move_uci,
    model::{DateSpan, GameVariant},
    replay::{GameRecord, initial_position, null_move},
    selection::Selection,
};

/// Which games an import keeps. The default keeps every game.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scope {
    /// Only rated games: see [`is_rated`].
    pub rated_only: bool,
    /// The criteria the import shares with `games`, `export` and
    /// `explore` (`--min-rating`, `--speeds`, `--variants`,
    /// `--since/--until`), decided by [`in_scope`] from the game's tags.
    pub selection: Selection,
    /// Leave out games where either player has the title `BOT`.
    pub exclude_bots: bool,
    /// Positions and moves rows only for the first N plies (see
    /// [`stored_plies`]); `Some(0)` is `--games-only`. `None`: every ply.
    /// Not a filter: a capped game is imported whole in `games.moves`.
    pub positions_max_ply: Option<u32>,
}

/// Why a game is out of scope: the first option it fails, in the order
/// `--rated-only`, [`Selection`]'s fields, `--exclude-bots`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FilterReason {
    /// `--rated-only`, and the game is not rated (see [`is_rated`]).
    Unrated,
    /// `--min-rating`, and a player's Elo is below it or missing.
    BelowMinRating,
    /// `--speeds`, and the game's speed is not listed.
    Speed(Speed),
    /// `--variants`, and the game's variant is not listed.
    Variant(GameVariant),
    /// `--since`/`--until`, and the game has no date with a known year.
    NoDate,
    /// `--since`, and the game was (or may have been) played before.
    BeforeSince,
    /// `--until`, and the game was (or may have been) played after.
    AfterUntil,
    /// `--exclude-bots`, and a player is a bot.
    Bot,
}

impl fmt::Display for FilterReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FilterReason::Unrated => f.write_str("not rated"),
            FilterReason::BelowMinRating => f.write_str("a rating below --min-rating or missing"),
            FilterReason::Speed(speed) => write!(f, "speed {speed} not in --speeds"),
            FilterReason::Variant(variant) => {
                write!(f, "variant {variant} not in --variants")
            }
            FilterReason::NoDate => f.write_str("no date with a known year for --since/--until"),
            FilterReason::BeforeSince => f.write_str("played before --since"),
            FilterReason::AfterUntil => f.write_str("played after --until"),
            FilterReason::Bot => f.write_str("a BOT player"),
        }
    }
}

impl Scope {
    /// Whether this scope keeps every game (no filter given; the
    /// positions cap filters no game).
    pub fn is_everything(&self) -> bool {
        Scope {
            positions_max_ply: None,
            ..self.clone()
        } == Scope::default()
    }

    /// The scope as a stable text, recorded with each input
    /// (`import_files.scope`) so that a rerun under another scope is told
    /// apart from a rerun of the same import. Empty for every game; the
    /// lists are sorted and deduplicated, so the order options were given
    /// in does not matter.
    pub fn identity(&self) -> String {
        let mut parts = Vec::new();
        let selection = &self.selection;
        if self.rated_only {
            parts.push("rated-only".to_owned());
        }
        if let Some(min) = selection.min_rating {
            parts.push(format!("min-rating={min}"));
        }
        if !selection.speeds.is_empty() {
            let mut speeds = selection.speeds.clone();
            speeds.sort();
            speeds.dedup();
            let names: Vec<&str> = speeds.iter().map(|s| s.as_str()).collect();
            parts.push(format!("speeds={}", names.join(",")));
        }
        if !selection.variants.is_empty() {
            let mut names: Vec<&str> = selection.variants.iter().map(|v| v.as_db_label()).collect();
            names.sort_unstable();
            names.dedup();
            parts.push(format!("variants={}", names.join(",")));
        }
        if let Some(since) = selection.since {
            parts.push(format!("since={since}"));
        }
        if let Some(until) = selection.until {
            parts.push(format!("until={until}"));
        }
        if self.exclude_bots {
            parts.push("exclude-bots".to_owned());
        }
        match self.positions_max_ply {
            None => {}
            Some(0) => parts.push("games-only".to_owned()),
            Some(cap) => parts.push(format!("positions-max-ply={cap}")),
        }
        parts.join(" ")
    }
}

/// Whether `game` is in `scope`; `Err` says which option leaves it out.
pub fn in_scope(game: &GameRecord, scope: &Scope) -> Result<(), FilterReason> {
    let meta = &game.meta;
    let selection = &scope.selection;
    if scope.rated_only && !is_rated(game) {
        return Err(FilterReason::Unrated);
    }
    if let Some(min) = selection.min_rating {
        let rated = |elo: Option<i32>| elo.is_some_and(|elo| elo >= i32::from(min));
        if !(rated(meta.white.elo) && rated(meta.black.elo)) {
            return Err(FilterReason::BelowMinRating);
        }
    }
    if !selection.speeds.is_empty() {
        let speed = Speed::from_clock(meta.clock);
        if !selection.speeds.contains(&speed) {
            return Err(FilterReason::Speed(speed));
        }
    }
    if !selection.variants.is_empty() && !selection.variants.contains(&game.variant) {
        return Err(FilterReason::Variant(game.variant));
    }
    if selection.since.is_some() || selection.until.is_some() {
        // A partial date is in the period when all its days are.
        let span = match meta.started_at {
            Some(at) => DateSpan {
                first: at.date_naive(),
                last: at.date_naive(),
            },
            None => meta.partial_date.ok_or(FilterReason::NoDate)?,
        };
        if selection.since.is_some_and(|since| span.first < since) {
            return Err(FilterReason::BeforeSince);
        }
        if selection.until.is_some_and(|until| span.last > until) {
            return Err(FilterReason::AfterUntil);
        }
    }
    if scope.exclude_bots && (meta.white.is_bot() || meta.black.is_bot()) {
        return Err(FilterReason::Bot);
    }
    Ok(())
}

/// Whether a game counts as rated for `--rated-only`. Lichess writes
/// `Rated …` or `Casual …` at the start of `Event`, and those words decide;
/// its swiss games (`Blitz swiss https://…`) and other sources' games say
/// neither, and count as rated when both players have an Elo tag (a
/// rating is what a rated game is played for; a game without one cannot
/// be put in a rating band anyway).
pub fn is_rated(game: &GameRecord) -> bool {
    let meta = &game.meta;
    rated_by_event(
        meta.event.as_deref(),
        meta.white.elo.is_some() && meta.black.elo.is_some(),
    )
}

/// [`is_rated`] from what the database keeps of a game: its `Event` text
/// and whether both players have a rating (the explorer's `mode`).
pub fn rated_by_event(event: Option<&str>, both_ratings: bool) -> bool {
    match event.and_then(|event| event.split_whitespace().next()) {
        Some(word) if word.eq_ignore_ascii_case("rated") => true,
        Some(word) if word.eq_ignore_ascii_case("casual") => false,
        _ => both_ratings,
    }
}

/// How many plies of a game of `plies` plies get `moves` rows under the
/// cap `cap` (`--positions-max-ply`): the first `min(cap, plies)`. The
/// start position is ply 0, so the positions stored are plies
/// `0..=stored_plies` (`--games-only`, a cap of 0: the start position
/// alone, which `games.initial_position_id` needs).
pub fn stored_plies(cap: Option<u32>, plies: usize) -> usize {
    cap.and_then(|cap| usize::try_from(cap).ok())
        .map_or(plies, |cap| cap.min(plies))
}

/// The cap recorded with a game (`games.positions_max_ply`): `None` when
/// every ply has its rows (no cap, or a game no longer than it), so that
/// `NULL` means "complete" whatever cap the game was imported under.
pub fn recorded_cap(cap: Option<u32>, plies: usize) -> Option<u32> {
    cap.filter(|&cap| stored_plies(Some(cap), plies) < plies)
}

/// The SAN of plies `from + 1..` of a stored game, replayed from its
/// `games.moves` (two bytes per ply) from its start position: what a
/// capped game has no `moves` rows for, so that `export` and `game show`
/// still write every move (past the cap without clocks, evaluations or
/// NAGs, which only the rows hold). `Err` says why the moves do not replay.
pub fn sans_after(
    variant: GameVariant,
    start_fen: Option<&str>,
    moves: &[u8],
    from: usize,
) -> Result<Vec<String>, String> {
    let mut board = initial_position(variant, start_fen).map_err(|e| e.to_string())?;
    let chess960 = board.castles().mode() == CastlingMode::Chess960;
    if !moves.len().is_multiple_of(2) {
        return Err(format!("{} bytes of moves: not two per ply", moves.len()));
    }
    let mut sans = Vec::with_capacity((moves.len() / 2).saturating_sub(from));
    for (i, pair) in moves.chunks_exact(2).enumerate() {
        let code = u16::from_be_bytes([pair[0], pair[1]]);
        let ply = i + 1;
        if code == 0 {
            board = null_move(board).map_err(|e| format!("ply {ply}: null move: {e}"))?;
            if i >= from {
                sans.push("--".to_owned());
            }
            continue;
        }
        let uci = decode_move_uci(code, chess960);
        let m = uci
            .parse::<UciMove>()
            .map_err(|e| e.to_string())
            .and_then(|m| m.to_move(&board).map_err(|e| e.to_string()))
            .map_err(|e| format!("ply {ply}: {uci}: {e}"))?;
        if i >= from {
            sans.push(SanPlus::from_move_and_play_unchecked(&mut board, m).to_string());
        } else {
            board.play_unchecked(m);
        }
    }
    Ok(sans)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        reader::{GameSplitter, ParseLimits, take_game},
        replay::replay_game,
        selection::parse_since,
    };
    use std::sync::Arc;

    fn game(tags: &str) -> GameRecord {
        let pgn = format!("{tags}\n\n1. e4 e5 *\n");
        let limits = ParseLimits {
            max_plies: 100,
            max_game_bytes: 1 << 20,
        };
        let mut splitter = GameSplitter::new(pgn.as_bytes(), Arc::from("t"), 0, 0, limits);
        let mut chunk = splitter.next_chunk().expect("reads").expect("one game");
        let raw = take_game(&mut chunk, limits).expect("parses");
        replay_game(raw, chunk.pos.clone()).expect("replays")
    }

    const LICHESS: &str = "[Event \"Rated Blitz game\"]\n[UTCDate \"2024.03.05\"]\n\
        [WhiteElo \"1850\"]\n[BlackElo \"2010\"]\n[TimeControl \"180+2\"]";

    #[test]
    fn everything_keeps_every_game() {
        assert!(Scope::default().is_everything());
        assert_eq!(in_scope(&game(""), &Scope::default()), Ok(()));
        assert_eq!(Scope::default().identity(), "");
        let capped = Scope {
            positions_max_ply: Some(50),
            ..Scope::default()
        };
        assert!(capped.is_everything(), "a cap filters no game");
        assert_eq!(capped.identity(), "positions-max-ply=50");
        let games_only = Scope {
            positions_max_ply: Some(0),
            ..Scope::default()
        };
        assert_eq!(games_only.identity(), "games-only");
    }

    #[test]
    fn sans_after_replays_the_stored_moves_past_a_ply() {
        let record = game("[Event \"x\"]");
        let moves = record.encoded_moves();
        assert_eq!(
            sans_after(GameVariant::Standard, None, &moves, 0),
            Ok(vec!["e4".to_owned(), "e5".to_owned()])
        );
        assert_eq!(
            sans_after(GameVariant::Standard, None, &moves, 1),
            Ok(vec!["e5".to_owned()])
        );
        assert_eq!(
            sans_after(GameVariant::Standard, None, &moves, 2),
            Ok(vec![])
        );
        assert!(sans_after(GameVariant::Standard, None, &moves[..3], 0).is_err());
        // e4 twice: the second is illegal for Black.
        let twice = [&moves[..2], &moves[..2]].concat();
        assert!(sans_after(GameVariant::Standard, None, &twice, 0).is_err());
    }

    #[test]
    fn the_cap_counts_plies_from_the_start_position() {
        assert_eq!(stored_plies(None, 80), 80);
        assert_eq!(stored_plies(Some(50), 80), 50);
        assert_eq!(stored_plies(Some(50), 30), 30);
        assert_eq!(stored_plies(Some(0), 30), 0);
        assert_eq!(recorded_cap(Some(50), 80), Some(50));
        assert_eq!(recorded_cap(Some(50), 50), None, "every ply stored");
        assert_eq!(recorded_cap(Some(0), 0), None);
        assert_eq!(recorded_cap(Some(0), 1), Some(0));
        assert_eq!(recorded_cap(None, 10), None);
    }

    #[test]
    fn rated_only_reads_the_event_word() {
        let scope = Scope {
            rated_only: true,
            ..Scope::default()
        };
        assert_eq!(in_scope(&game(LICHESS), &scope), Ok(()));
        let casual = game("[Event \"Casual Blitz game\"]");
        assert_eq!(in_scope(&casual, &scope), Err(FilterReason::Unrated));
        let tournament =
            game("[Event \"Rated Bullet tournament https://lichess.org/tournament/x\"]");
        assert_eq!(in_scope(&tournament, &scope), Ok(()));
        // Neither word: rated when both players have an Elo.
        let swiss = "[Event \"Blitz swiss https://lichess.org/swiss/x\"]";
        let elos = "[WhiteElo \"1500\"]\n[BlackElo \"1600\"]";
        assert_eq!(in_scope(&game(&format!("{swiss}\n{elos}")), &scope), Ok(()));
        assert_eq!(in_scope(&game(swiss), &scope), Err(FilterReason::Unrated));
        assert_eq!(
            in_scope(
                &game(&format!("[Event \"Casual Rapid game\"]\n{elos}")),
                &scope
            ),
            Err(FilterReason::Unrated)
        );
        assert_eq!(in_scope(&game(elos), &scope), Ok(()));
        assert_eq!(in_scope(&game(""), &scope), Err(FilterReason::Unrated));
    }

    #[test]
    fn min_rating_needs_both_players() {
        let scope = |min| Scope {
            selection: Selection {
                min_rating: Some(min),
                ..Selection::default()
            },
            ..Scope::default()
        };
        assert_eq!(in_scope(&game(LICHESS), &scope(1850)), Ok(()));
        // The average (1930) is above 1900, White is not.
        assert_eq!(
            in_scope(&game(LICHESS), &scope(1900)),
            Err(FilterReason::BelowMinRating)
        );
        assert_eq!(
            in_scope(&game("[WhiteElo \"2500\"]"), &scope(1000)),
            Err(FilterReason::BelowMinRating)
        );
    }

    #[test]
    fn speeds_and_variants_use_the_shared_categories() {
        let blitz = Scope {
            selection: Selection {
                speeds: vec![Speed::Blitz],
                ..Selection::default()
            },
            ..Scope::default()
        };
        assert_eq!(in_scope(&game(LICHESS), &blitz), Ok(()));
        assert_eq!(
            in_scope(&game("[TimeControl \"60+0\"]"), &blitz),
            Err(FilterReason::Speed(Speed::Bullet))
        );
        assert_eq!(
            in_scope(&game(""), &blitz),
            Err(FilterReason::Speed(Speed::Correspondence))
        );
        let chess960 = Scope {
            selection: Selection {
                variants: vec![GameVariant::Chess960],
                ..Selection::default()
            },
            ..Scope::default()
        };
        assert_eq!(
            in_scope(&game(""), &chess960),
            Err(FilterReason::Variant(GameVariant::Standard))
        );
    }

    #[test]
    fn dates_are_inclusive_utc_days() {
        let day = |s| parse_since(s).expect("a day");
        let scope = Scope {
            selection: Selection {
                since: Some(day("2024-03-05")),
                until: Some(day("2024-03-05")),
                ..Selection::default()
            },
            ..Scope::default()
        };
        assert_eq!(in_scope(&game(LICHESS), &scope), Ok(()));
        let later = game("[UTCDate \"2024.03.06\"]");
        assert_eq!(in_scope(&later, &scope), Err(FilterReason::AfterUntil));
        let earlier = game("[Date \"2024.03.04\"]");
        assert_eq!(in_scope(&earlier, &scope), Err(FilterReason::BeforeSince));
        // A partial date is in a period when all its days are.
        let partial = game("[Date \"2024.??.??\"]");
        assert_eq!(in_scope(&partial, &scope), Err(FilterReason::BeforeSince));
        let no_year = game("[Date \"????.03.05\"]");
        assert_eq!(in_scope(&no_year, &scope), Err(FilterReason::NoDate));
        assert!(parse_since("2024-13-01").is_err());
    }

    #[test]
    fn a_partial_date_is_in_a_period_that_holds_all_its_days() {
        let period = |since: Option<&str>, until: Option<&str>| Scope {
            selection: Selection {
                since: since.map(|s| parse_since(s).expect("a day")),
                until: until.map(|s| parse_since(s).expect("a day")),
                ..Selection::default()
            },
            ..Scope::default()
        };
        let year = game("[Date \"1997.??.??\"]");
        let month = game("[Date \"1997.05.??\"]");
        let whole_1997 = period(Some("1997-01-01"), Some("1997-12-31"));
        assert_eq!(in_scope(&year, &whole_1997), Ok(()));
        assert_eq!(in_scope(&month, &whole_1997), Ok(()));
        let days = period(Some("1997-05-04"), Some("1997-05-06"));
        assert_eq!(in_scope(&year, &days), Err(FilterReason::BeforeSince));
        assert_eq!(in_scope(&month, &days), Err(FilterReason::BeforeSince));
        let may = period(Some("1997-05-01"), Some("1997-05-31"));
        assert_eq!(in_scope(&month, &may), Ok(()));
        assert_eq!(in_scope(&year, &may), Err(FilterReason::BeforeSince));
        assert_eq!(in_scope(&year, &period(Some("1997-01-01"), None)), Ok(()));
        assert_eq!(
            in_scope(&year, &period(None, Some("1997-12-30"))),
            Err(FilterReason::AfterUntil)
        );
        assert_eq!(
            in_scope(&game("[Date \"????.??.??\"]"), &whole_1997),
            Err(FilterReason::NoDate)
        );
        // A full start time wins over a partial Date.
        let utc = game("[Date \"1997.??.??\"]\n[UTCDate \"1997.05.05\"]");
        assert_eq!(in_scope(&utc, &days), Ok(()));
    }

    #[test]
    fn bots_are_left_out_on_either_side() {
        let scope = Scope {
            exclude_bots: true,
            ..Scope::default()
        };
        assert_eq!(in_scope(&game(LICHESS), &scope), Ok(()));
        assert_eq!(
            in_scope(&game("[BlackTitle \"BOT\"]"), &scope),
            Err(FilterReason::Bot)
        );
        assert_eq!(in_scope(&game("[WhiteTitle \"GM\"]"), &scope), Ok(()));
    }

    #[test]
    fn identity_ignores_order_and_repeats() {
        let a = Scope {
            selection: Selection {
                speeds: vec![Speed::Rapid, Speed::Blitz, Speed::Rapid],
                variants: vec![GameVariant::Standard, GameVariant::Chess960],
                min_rating: Some(1800),
                ..Selection::default()
            },
            ..Scope::default()
        };
        let b = Scope {
            selection: Selection {
                speeds: vec![Speed::Blitz, Speed::Rapid],
                variants: vec![GameVariant::Chess960, GameVariant::Standard],
                min_rating: Some(1800),
                ..Selection::default()
            },
            ..Scope::default()
        };
        assert_eq!(a.identity(), b.identity());
        assert_eq!(
            a.identity(),
            "min-rating=1800 speeds=blitz,rapid variants=chess960,standard"
        );
        assert!(!a.is_everything());
    }
}
