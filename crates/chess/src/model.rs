//! The typed game record that flows through the pipeline, and the pure
//! parsers that turn PGN tag text into typed fields.
//!
//! Tag parsing is lenient by design: a malformed `WhiteElo` or `UTCDate`
//! leaves that field empty (the raw tag is still kept) instead of rejecting a
//! game whose moves are fine.
//!
//! It never rejects a game (the reader and replay decide that) and reads
//! nothing but the text it is given.

use std::{fmt, sync::Arc};

use chrono::{DateTime, NaiveDate, NaiveTime, Utc};

use crate::{
    reader::decode_text,
    reject::{RejectReason, SourcePos},
};

/// A game as read from PGN, before replay: tags and the mainline as written.
#[derive(Debug, Clone, Default)]
pub struct RawGame {
    /// All tags in file order, values decoded (UTF-8, else Latin-1).
    pub tags: Tags,
    /// Mainline moves with their annotations.
    pub moves: Vec<RawMove>,
    /// The termination marker of the movetext, if any.
    pub movetext_result: Option<GameResult>,
    /// What the plies carry beyond their typed fields (comments the typed
    /// clock and evaluation do not reproduce, NAGs after the first,
    /// variations), by ply: empty for most games.
    pub notes: Vec<crate::annotation::PlyNotes>,
}

impl RawGame {
    /// The value of the first tag called `name`.
    pub fn tag(&self, name: &str) -> Option<&str> {
        self.tags.first(name)
    }
}

/// A game's tags in file order, as read: every name and value, once each,
/// in one buffer. A game has a dozen tags or more, and a `String` for each
/// name and value (two allocations and two frees per tag) was the largest
/// part of their cost (callgrind); the game keeps them whole until it is
/// written (`games.tags`, [`crate::headers::StoredTags`]).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Tags {
    /// The names and values, one after the other.
    text: String,
    /// Each tag's name end and value end in `text`; its name starts where
    /// the previous tag's value ends.
    ends: Vec<(usize, usize)>,
}

impl Tags {
    /// The tags whose names and values are `bytes`, one after the other
    /// (`ends` as [`Tags`] holds them), each name and value decoded as
    /// [`decode_text`] decodes it: UTF-8, else Latin-1. The tags of nearly
    /// every game are UTF-8: checked as one text, which costs far less than
    /// a check per name and value.
    pub(crate) fn decoded(bytes: Vec<u8>, ends: Vec<(usize, usize)>) -> Tags {
        let bytes = match String::from_utf8(bytes) {
            // Each name and value is UTF-8 when all are and none is cut in
            // the middle of a character (a Latin-1 name ending in `Ã`
            // before a value beginning with `©`).
            Ok(text)
                if ends.iter().all(|&(name, value)| {
                    text.is_char_boundary(name) && text.is_char_boundary(value)
                }) =>
            {
                return Tags { text, ends };
            }
            Ok(text) => text.into_bytes(),
            Err(error) => error.into_bytes(),
        };
        let mut tags = Tags::default();
        let mut start = 0;
        for (name_end, value_end) in ends {
            tags.push(
                &decode_text(&bytes[start..name_end]),
                &decode_text(&bytes[name_end..value_end]),
            );
            start = value_end;
        }
        tags
    }

    /// Appends a tag.
    pub fn push(&mut self, name: &str, value: &str) {
        self.text.push_str(name);
        let name_end = self.text.len();
        self.text.push_str(value);
        self.ends.push((name_end, self.text.len()));
    }

    /// The number of tags.
    #[inline]
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether there is no tag.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The tags in file order, as (name, value).
    #[inline]
    pub fn iter(&self) -> TagIter<'_> {
        TagIter {
            text: &self.text,
            ends: self.ends.iter(),
            start: 0,
        }
    }

    /// The value of the first tag called `name`.
    pub fn first(&self, name: &str) -> Option<&str> {
        self.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
    }

    /// Whether a name or value holds `c`: one search of all the text.
    fn contain(&self, c: char) -> bool {
        self.text.contains(c)
    }
}

impl fmt::Debug for Tags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<'a> FromIterator<(&'a str, &'a str)> for Tags {
    fn from_iter<I: IntoIterator<Item = (&'a str, &'a str)>>(pairs: I) -> Tags {
        let mut tags = Tags::default();
        for (name, value) in pairs {
            tags.push(name, value);
        }
        tags
    }
}

impl<'a> IntoIterator for &'a Tags {
    type Item = (&'a str, &'a str);
    type IntoIter = TagIter<'a>;

    fn into_iter(self) -> TagIter<'a> {
        self.iter()
    }
}

/// The tags of a [`Tags`], in file order.
#[derive(Clone)]
pub struct TagIter<'a> {
    text: &'a str,
    ends: std::slice::Iter<'a, (usize, usize)>,
    /// Where the next tag's name starts.
    start: usize,
}

impl<'a> Iterator for TagIter<'a> {
    type Item = (&'a str, &'a str);

    #[inline]
    fn next(&mut self) -> Option<(&'a str, &'a str)> {
        let &(name_end, value_end) = self.ends.next()?;
        let tag = (
            &self.text[self.start..name_end],
            &self.text[name_end..value_end],
        );
        self.start = value_end;
        Some(tag)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.ends.size_hint()
    }
}

impl ExactSizeIterator for TagIter<'_> {}

/// One mainline move as written, with what the comments and NAGs after it said.
#[derive(Debug, Clone)]
pub struct RawMove {
    /// The move token as pgn-reader parsed it (SAN, or a UCI-like
    /// fully-specified move such as `e2e4`).
    pub san: shakmaty::san::SanPlus,
    /// Clock after the move, from `[%clk h:mm:ss]`, in milliseconds.
    pub clock_ms: Option<i32>,
    /// Engine evaluation after the move, from `[%eval ...]`.
    pub eval: Option<Eval>,
    /// First numeric annotation glyph after the move (`!?` is NAG 5).
    pub nag: Option<u8>,
}

/// An engine evaluation from a `%eval` comment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Eval {
    /// Centipawns from White's point of view.
    Centipawns(i32),
    /// Mate in N moves; negative when Black mates.
    MateIn(i32),
}

/// Result of a game: 1 white wins, -1 black wins, 0 draw (stored as `smallint`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GameResult {
    /// `1-0`.
    WhiteWins,
    /// `0-1`.
    BlackWins,
    /// `1/2-1/2`.
    Draw,
    /// `*`: unknown or ongoing.
    Unknown,
}

impl GameResult {
    /// Parses a `Result` tag value.
    pub fn from_tag(value: &str) -> Option<GameResult> {
        match value.trim() {
            "1-0" => Some(GameResult::WhiteWins),
            "0-1" => Some(GameResult::BlackWins),
            "1/2-1/2" | "½-½" => Some(GameResult::Draw),
            "*" => Some(GameResult::Unknown),
            _ => None,
        }
    }

    /// The value stored in `games.result`: 1, -1, 0, or none.
    pub fn score(self) -> Option<i16> {
        match self {
            GameResult::WhiteWins => Some(1),
            GameResult::BlackWins => Some(-1),
            GameResult::Draw => Some(0),
            GameResult::Unknown => None,
        }
    }
}

/// Which rules a game is played under. Chess960 is standard chess with
/// Chess960 castling; "From Position" games are standard games with a FEN.
/// Declared in the order of the `game_variant` database enum, so that
/// `Ord` sorts as PostgreSQL does; standard, as a game without a `Variant`
/// tag is, by default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum GameVariant {
    /// Standard chess.
    #[default]
    Standard,
    /// Chess960 / Fischer Random.
    Chess960,
    /// Antichess (Lichess rules).
    Antichess,
    /// Atomic.
    Atomic,
    /// Crazyhouse.
    Crazyhouse,
    /// Horde.
    Horde,
    /// King of the Hill.
    KingOfTheHill,
    /// Racing Kings.
    RacingKings,
    /// Three-check.
    ThreeCheck,
}

impl GameVariant {
    /// Every variant, in the order of the `game_variant` database enum.
    pub const ALL: [GameVariant; 9] = [
        GameVariant::Standard,
        GameVariant::Chess960,
        GameVariant::Antichess,
        GameVariant::Atomic,
        GameVariant::Crazyhouse,
        GameVariant::Horde,
        GameVariant::KingOfTheHill,
        GameVariant::RacingKings,
        GameVariant::ThreeCheck,
    ];

    /// Interprets a `Variant` tag the way python-chess 1.11 does
    /// (`Headers.is_chess960()` and `chess.variant.find_variant()` aliases,
    /// case-insensitive, otherwise exact: `racing-kings` is no tag python-chess
    /// reads). `None` for variants shakmaty cannot replay.
    pub fn from_tag(value: &str) -> Option<GameVariant> {
        let v = value.trim().to_ascii_lowercase();
        TAG_NAMES
            .iter()
            .find(|(name, _)| *name == v)
            .map(|&(_, variant)| variant)
    }

    /// The shakmaty rules behind this variant.
    pub fn rules(self) -> shakmaty::variant::Variant {
        use shakmaty::variant::Variant;
        match self {
            GameVariant::Standard | GameVariant::Chess960 => Variant::Chess,
            GameVariant::Antichess => Variant::Antichess,
            GameVariant::Atomic => Variant::Atomic,
            GameVariant::Crazyhouse => Variant::Crazyhouse,
            GameVariant::Horde => Variant::Horde,
            GameVariant::KingOfTheHill => Variant::KingOfTheHill,
            GameVariant::RacingKings => Variant::RacingKings,
            GameVariant::ThreeCheck => Variant::ThreeCheck,
        }
    }

    /// The label stored in the `game_variant` database enum.
    pub fn as_db_label(self) -> &'static str {
        match self {
            GameVariant::Standard => "standard",
            GameVariant::Chess960 => "chess960",
            GameVariant::Antichess => "antichess",
            GameVariant::Atomic => "atomic",
            GameVariant::Crazyhouse => "crazyhouse",
            GameVariant::Horde => "horde",
            GameVariant::KingOfTheHill => "king_of_the_hill",
            GameVariant::RacingKings => "racing_kings",
            GameVariant::ThreeCheck => "three_check",
        }
    }

    /// The variant whose `game_variant` label is exactly `label`, the
    /// inverse of [`GameVariant::as_db_label`]: rows read back are matched
    /// exactly, not through the aliases `GameVariant`'s `FromStr` accepts
    /// from people.
    pub fn from_db_label(label: &str) -> Option<GameVariant> {
        GameVariant::ALL
            .into_iter()
            .find(|v| v.as_db_label() == label)
    }
}

/// Every `Variant` tag value python-chess 1.11 reads (lowercase), and the
/// variant it names: the one list of aliases, read exactly by
/// [`GameVariant::from_tag`] (parity with python-chess) and loosely by
/// `GameVariant`'s `FromStr` (names people type).
const TAG_NAMES: &[(&str, GameVariant)] = &[
    ("chess960", GameVariant::Chess960),
    ("chess 960", GameVariant::Chess960),
    ("fischerandom", GameVariant::Chess960),
    ("fischerrandom", GameVariant::Chess960),
    ("fischer random", GameVariant::Chess960),
    ("standard", GameVariant::Standard),
    ("chess", GameVariant::Standard),
    ("classical", GameVariant::Standard),
    ("normal", GameVariant::Standard),
    ("illegal", GameVariant::Standard),
    ("from position", GameVariant::Standard),
    ("wild/0", GameVariant::Standard),
    ("wild/1", GameVariant::Standard),
    ("wild/2", GameVariant::Standard),
    ("wild/3", GameVariant::Standard),
    ("wild/4", GameVariant::Standard),
    ("wild/5", GameVariant::Standard),
    ("wild/6", GameVariant::Standard),
    ("wild/7", GameVariant::Standard),
    ("wild/8", GameVariant::Standard),
    ("wild/8a", GameVariant::Standard),
    ("antichess", GameVariant::Antichess),
    ("anti chess", GameVariant::Antichess),
    ("anti", GameVariant::Antichess),
    ("atomic", GameVariant::Atomic),
    ("atom", GameVariant::Atomic),
    ("atomic chess", GameVariant::Atomic),
    ("crazyhouse", GameVariant::Crazyhouse),
    ("crazy house", GameVariant::Crazyhouse),
    ("house", GameVariant::Crazyhouse),
    ("zh", GameVariant::Crazyhouse),
    ("horde", GameVariant::Horde),
    ("horde chess", GameVariant::Horde),
    ("king of the hill", GameVariant::KingOfTheHill),
    ("koth", GameVariant::KingOfTheHill),
    ("kingofthehill", GameVariant::KingOfTheHill),
    ("racing kings", GameVariant::RacingKings),
    ("racing", GameVariant::RacingKings),
    ("race", GameVariant::RacingKings),
    ("racingkings", GameVariant::RacingKings),
    ("three-check", GameVariant::ThreeCheck),
    ("three check", GameVariant::ThreeCheck),
    ("threecheck", GameVariant::ThreeCheck),
    ("three check chess", GameVariant::ThreeCheck),
    ("3-check", GameVariant::ThreeCheck),
    ("3 check", GameVariant::ThreeCheck),
    ("3check", GameVariant::ThreeCheck),
];

/// `name` as `GameVariant`'s `FromStr` compares it: lowercase, without the
/// separators people write differently (`_`, `-`, spaces), so
/// `king_of_the_hill`, `kingOfTheHill` and `King of the Hill` are one name.
fn squashed(name: &str) -> String {
    name.chars()
        .filter(|c| !matches!(c, '_' | '-' | ' '))
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

impl std::str::FromStr for GameVariant {
    type Err = crate::category::CategoryParseError;

    /// A variant as a person or a config file names it: its database label
    /// (`king_of_the_hill`), its Lichess API name (`kingOfTheHill`) or a
    /// `Variant` tag value (`King of the Hill`, `koth`, `zh`, `3check`),
    /// case-insensitively and whatever the separators (`racing-kings`).
    /// Every command reads variants through this one parser; a command
    /// that cannot serve a variant refuses it itself, saying why.
    fn from_str(s: &str) -> Result<GameVariant, Self::Err> {
        let name = squashed(s.trim());
        let labels = GameVariant::ALL.map(|v| (v.as_db_label(), v));
        labels
            .iter()
            .chain(TAG_NAMES)
            .find(|(known, _)| !name.is_empty() && squashed(known) == name)
            .map(|&(_, variant)| variant)
            .ok_or_else(|| {
                let names: Vec<&str> = GameVariant::ALL.iter().map(|v| v.as_db_label()).collect();
                crate::category::CategoryParseError::new("variant", s, names.join(", "))
            })
    }
}

impl fmt::Display for GameVariant {
    /// The database label (`king_of_the_hill`): what messages, the import
    /// scope's identity and the `Variant` tag pgnload writes say.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_db_label())
    }
}

/// One side's player as the tags describe them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlayerTags {
    /// `White` / `Black`.
    pub name: Option<String>,
    /// `WhiteElo` / `BlackElo`.
    pub elo: Option<i32>,
    /// `WhiteRatingDiff` / `BlackRatingDiff`.
    pub rating_diff: Option<i32>,
    /// `WhiteTitle` / `BlackTitle` (`BOT` marks a bot).
    pub title: Option<String>,
}

impl PlayerTags {
    /// Lichess marks bot accounts with the title `BOT`.
    pub fn is_bot(&self) -> bool {
        self.title.as_deref() == Some("BOT")
    }
}

/// A Lichess tournament referenced from the `Event` tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventRef {
    /// `arena` or `swiss`.
    pub kind: &'static str,
    /// The tournament id from the URL.
    pub external_id: String,
}

/// Base time and increment from a `TimeControl` tag like `300+3`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeControl {
    /// Initial time in seconds.
    pub initial_s: i32,
    /// Increment per move in seconds.
    pub increment_s: i32,
}

/// The typed view of a game's tags.
#[derive(Debug, Clone, Default)]
pub struct GameMeta {
    /// Lichess game id from `Site` (`https://lichess.org/ENPo6ReH` → `ENPo6ReH`).
    pub lichess_id: Option<String>,
    /// `Event`.
    pub event: Option<String>,
    /// Tournament referenced from `Event`.
    pub event_ref: Option<EventRef>,
    /// `Site`.
    pub site: Option<String>,
    /// `Round`.
    pub round: Option<String>,
    /// White's tags.
    pub white: PlayerTags,
    /// Black's tags.
    pub black: PlayerTags,
    /// `UTCDate` + `UTCTime`, else `Date`, as a UTC timestamp.
    pub started_at: Option<DateTime<Utc>>,
    /// Without a start time: the days a `Date` with an unknown month or
    /// day (`1997.??.??`, `1997.05.??`) spans ([`DateSpan::of_pgn`]).
    pub partial_date: Option<DateSpan>,
    /// `TimeControl` as written.
    pub time_control: Option<String>,
    /// `TimeControl` parsed (`-` and unparsable values give none).
    pub clock: Option<TimeControl>,
    /// `Termination`.
    pub termination: Option<String>,
    /// `ECO`.
    pub eco: Option<String>,
    /// `Opening`.
    pub opening: Option<String>,
    /// `Result` tag.
    pub result: Option<GameResult>,
    /// Every tag not mapped to a field above, in file order. Part of the
    /// content digest ([`crate::replay::GameRecord::external_id`]).
    pub other_tags: Vec<(String, String)>,
    /// Mapped tags that their field does not hold as written (a partial
    /// `Date`, an Elo of `2700?`, a second `White`, a `Termination` outside
    /// the enum), kept raw so nothing written is lost. Not part of the
    /// content digest, which must stay what earlier versions computed.
    pub kept_tags: Vec<(String, String)>,
}

/// Tags that [`GameMeta::from_tags`] maps to typed fields (and so leaves out
/// of `other_tags`), by slot. `Variant`, `FEN` and `SetUp` are consumed by
/// replay. One `match` per tag instead of a search of the tag list per field.
#[derive(Clone, Copy)]
enum Typed {
    Event,
    Site,
    Round,
    White,
    Black,
    WhiteElo,
    BlackElo,
    WhiteRatingDiff,
    BlackRatingDiff,
    WhiteTitle,
    BlackTitle,
    Date,
    UtcDate,
    UtcTime,
    TimeControl,
    Termination,
    Eco,
    Opening,
    Result,
    Variant,
    Fen,
    SetUp,
}

impl Typed {
    const COUNT: usize = Typed::SetUp as usize + 1;

    fn of(name: &str) -> Option<Typed> {
        Some(match name {
            "Event" => Typed::Event,
            "Site" => Typed::Site,
            "Round" => Typed::Round,
            "White" => Typed::White,
            "Black" => Typed::Black,
            "WhiteElo" => Typed::WhiteElo,
            "BlackElo" => Typed::BlackElo,
            "WhiteRatingDiff" => Typed::WhiteRatingDiff,
            "BlackRatingDiff" => Typed::BlackRatingDiff,
            "WhiteTitle" => Typed::WhiteTitle,
            "BlackTitle" => Typed::BlackTitle,
            "Date" => Typed::Date,
            "UTCDate" => Typed::UtcDate,
            "UTCTime" => Typed::UtcTime,
            "TimeControl" => Typed::TimeControl,
            "Termination" => Typed::Termination,
            "ECO" => Typed::Eco,
            "Opening" => Typed::Opening,
            "Result" => Typed::Result,
            "Variant" => Typed::Variant,
            "FEN" => Typed::Fen,
            "SetUp" => Typed::SetUp,
            _ => return None,
        })
    }
}

/// Tags as (name, value) pairs, in file order.
type TagList = Vec<(String, String)>;

/// The first value of each typed tag of a game, as [`GameMeta::from_tags`]
/// reads them: the steps of building the typed view, each over these.
struct FirstTags<'a> {
    /// By [`Typed`]: the tag's name as written and its value.
    first: [Option<(&'a str, &'a str)>; Typed::COUNT],
}

impl<'a> FirstTags<'a> {
    /// One pass over `tags`: the first value of each typed tag, the other
    /// tags, and the later typed tags whose value differs from the first
    /// (kept raw).
    fn sort(tags: &'a Tags) -> (Self, TagList, TagList) {
        let mut first: [Option<(&str, &str)>; Typed::COUNT] = [None; Typed::COUNT];
        let mut other_tags = Vec::new();
        let mut later = Vec::new();
        for (name, value) in tags {
            match Typed::of(name) {
                Some(typed) => match first[typed as usize] {
                    None => first[typed as usize] = Some((name, value)),
                    Some((_, earlier)) if earlier != value => {
                        later.push((name.to_owned(), value.to_owned()));
                    }
                    Some(_) => {}
                },
                None => other_tags.push((name.to_owned(), value.to_owned())),
            }
        }
        (Self { first }, other_tags, later)
    }

    /// The value of `typed`, trimmed; `None` if absent, empty or `?`.
    fn get(&self, typed: Typed) -> Option<&'a str> {
        self.first[typed as usize]
            .map(|(_, value)| value.trim())
            .filter(|v| !v.is_empty() && *v != "?")
    }

    /// [`Self::get`], owned.
    fn owned(&self, typed: Typed) -> Option<String> {
        self.get(typed).map(str::to_owned)
    }

    /// A side's player tags.
    fn player(&self, name: Typed, elo: Typed, rating_diff: Typed, title: Typed) -> PlayerTags {
        PlayerTags {
            name: self.owned(name),
            elo: self.get(elo).and_then(parse_int),
            rating_diff: self.get(rating_diff).and_then(parse_int),
            title: self.owned(title),
        }
    }

    /// The first value of `typed` as written, if its field does not hold
    /// it (`held` false) and it says something (a letter or digit).
    fn lost(&self, typed: Typed, held: bool) -> Option<(String, String)> {
        let has_data = self
            .get(typed)
            .is_some_and(|v| v.bytes().any(|b| b.is_ascii_alphanumeric()));
        self.first[typed as usize]
            .filter(|_| !held && has_data)
            .map(|(name, value)| (name.to_owned(), value.to_owned()))
    }

    /// Whether `typed` parses as a rating (or rating difference).
    fn is_int(&self, typed: Typed) -> bool {
        self.get(typed).and_then(parse_int).is_some()
    }

    /// The first values their field cannot hold as written, kept raw.
    fn unheld(&self) -> [Option<(String, String)>; 9] {
        let utc_day = self.get(Typed::UtcDate).and_then(parse_pgn_date);
        let date_held = match (utc_day, self.get(Typed::Date).and_then(parse_pgn_date)) {
            (None, Some(_)) => true,
            (Some(utc), Some(date)) => utc == date,
            (_, None) => false,
        };
        [
            self.lost(Typed::WhiteElo, self.is_int(Typed::WhiteElo)),
            self.lost(Typed::BlackElo, self.is_int(Typed::BlackElo)),
            self.lost(Typed::WhiteRatingDiff, self.is_int(Typed::WhiteRatingDiff)),
            self.lost(Typed::BlackRatingDiff, self.is_int(Typed::BlackRatingDiff)),
            self.lost(Typed::UtcDate, utc_day.is_some()),
            self.lost(
                Typed::UtcTime,
                utc_day.is_some()
                    && self
                        .get(Typed::UtcTime)
                        .is_some_and(|t| parse_pgn_time(t).is_some()),
            ),
            self.lost(Typed::Date, date_held),
            self.lost(
                Typed::Termination,
                self.get(Typed::Termination)
                    .is_some_and(|t| termination_label(t) != "other"),
            ),
            self.lost(
                Typed::Result,
                self.get(Typed::Result)
                    .and_then(GameResult::from_tag)
                    .is_some(),
            ),
        ]
    }
}

impl GameMeta {
    /// Builds the typed view of `tags`. A field comes from the first tag of
    /// its name, trimmed; empty and `?` values count as absent.
    pub fn from_tags(tags: &Tags) -> GameMeta {
        let (first, other_tags, later) = FirstTags::sort(tags);
        // First values their field cannot hold as written, kept raw (before
        // the later duplicates, so a name's first raw value comes first).
        let kept_tags: Vec<(String, String)> =
            first.unheld().into_iter().flatten().chain(later).collect();
        let time_control = first.owned(Typed::TimeControl);
        let started_at = started_at(
            first.get(Typed::UtcDate),
            first.get(Typed::UtcTime),
            first.get(Typed::Date),
        );
        GameMeta {
            lichess_id: first
                .get(Typed::Site)
                .and_then(lichess_game_id)
                .map(str::to_owned),
            event: first.owned(Typed::Event),
            event_ref: first.get(Typed::Event).and_then(lichess_event_ref),
            site: first.owned(Typed::Site),
            round: first.owned(Typed::Round).filter(|r| r != "-"),
            white: first.player(
                Typed::White,
                Typed::WhiteElo,
                Typed::WhiteRatingDiff,
                Typed::WhiteTitle,
            ),
            black: first.player(
                Typed::Black,
                Typed::BlackElo,
                Typed::BlackRatingDiff,
                Typed::BlackTitle,
            ),
            started_at,
            partial_date: started_at
                .is_none()
                .then(|| first.get(Typed::Date).and_then(DateSpan::of_pgn))
                .flatten(),
            clock: time_control.as_deref().and_then(parse_time_control),
            time_control,
            termination: first.owned(Typed::Termination),
            eco: first.owned(Typed::Eco),
            opening: first.owned(Typed::Opening),
            result: first.get(Typed::Result).and_then(GameResult::from_tag),
            other_tags,
            kept_tags,
        }
    }

    /// `games.tags`: every tag no column holds as written (`other_tags`,
    /// then `kept_tags`), as a JSON object. A name written more than once
    /// maps to an array of its values in file order, so none is lost.
    pub fn tags_json(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut map = serde_json::Map::new();
        for (name, value) in self.other_tags.iter().chain(&self.kept_tags) {
            crate::headers::push_value(&mut map, name, value);
        }
        map
    }
}

/// Longest player or event name pgnload stores, in bytes. PostgreSQL's
/// B-tree indexes refuse entries over 2,704 bytes, and the unique keys
/// `players (source, username_key)` and `events (source, event_key)` hold
/// the name (lowercased for Lichess, which can grow it by half) plus the
/// source label; 1,024 bytes leaves room for both.
pub const MAX_NAME_BYTES: usize = 1024;

/// Checks that every tag can be stored: PostgreSQL `text` and `jsonb`
/// cannot hold a NUL byte, and the names that are indexed must fit the
/// index. Tags are the only text from the file that reaches the database
/// (moves, FENs and clocks are written by pgnload), so checking them before
/// replay keeps a bad game from failing the batch it would be written in.
pub fn check_storable(tags: &Tags) -> Result<(), RejectReason> {
    let nul = tags.contain('\0');
    for (name, value) in tags {
        if nul && (name.contains('\0') || value.contains('\0')) {
            return Err(RejectReason::NulByte {
                tag: name.escape_default().to_string(),
            });
        }
        if matches!(name, "White" | "Black" | "Event") && value.len() > MAX_NAME_BYTES {
            return Err(RejectReason::NameTooLong {
                tag: name.to_owned(),
                bytes: value.len(),
                limit: MAX_NAME_BYTES,
            });
        }
    }
    Ok(())
}

fn parse_int(s: &str) -> Option<i32> {
    s.strip_prefix('+').unwrap_or(s).parse().ok()
}

/// How a game is named on the command line: its `games.id`,
/// `SOURCE:EXTERNAL_ID` (`lichess:ENPo6ReH`), a Lichess game's URL
/// (`https://lichess.org/ENPo6ReH/black#12`) or its bare id (`ENPo6ReH`):
/// every form pgnload prints a game by (`games`, `explore`'s top games,
/// `game put`) and the one a browser shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GameRef {
    /// `games.id`.
    Id(i64),
    /// The natural key.
    Key {
        /// `games.source`.
        source: String,
        /// `games.external_id`.
        external_id: String,
    },
}

impl GameRef {
    /// The Lichess game `id`.
    fn lichess(id: &str) -> GameRef {
        GameRef::Key {
            source: "lichess".to_owned(),
            external_id: id.to_owned(),
        }
    }
}

impl std::str::FromStr for GameRef {
    type Err = String;

    /// A number is an id (so a Lichess id of digits only needs its
    /// `lichess:`); a Lichess URL (with or without its scheme) names its
    /// game, also in the 12-character form a player's own view has (the
    /// game id and 4 characters of the player's); otherwise the text after
    /// the last `:` is the external id (ids and digests never hold one; a
    /// source label may); 8 letters and digits alone are a Lichess id.
    fn from_str(text: &str) -> Result<GameRef, String> {
        let text = text.trim();
        if let Ok(id) = text.parse::<i64>() {
            return Ok(GameRef::Id(id));
        }
        if let Some(path) = lichess_path(text) {
            return lichess_id_at(path, LICHESS_ID_LEN)
                .or_else(|| lichess_id_at(path, LICHESS_FULL_ID_LEN))
                .map(|full| GameRef::lichess(&full[..LICHESS_ID_LEN]))
                .ok_or_else(|| format!("{text:?} is a Lichess URL but no game's"));
        }
        match text.rsplit_once(':') {
            Some((source, external_id)) if !source.is_empty() && !external_id.is_empty() => {
                Ok(GameRef::Key {
                    source: source.to_owned(),
                    external_id: external_id.to_owned(),
                })
            }
            _ if lichess_id_at(text, LICHESS_ID_LEN).is_some() => Ok(GameRef::lichess(text)),
            _ => Err(format!(
                "{text:?} is neither a game id, SOURCE:EXTERNAL_ID (e.g. lichess:ENPo6ReH), \
                 a Lichess game URL nor a Lichess game id"
            )),
        }
    }
}

impl std::fmt::Display for GameRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GameRef::Id(id) => write!(f, "{id}"),
            GameRef::Key {
                source,
                external_id,
            } => write!(f, "{source}:{external_id}"),
        }
    }
}

/// The key that identifies a player of `source` (`players.username_key`):
/// Lichess usernames are case-insensitive, so their key is the lower-case
/// name; other sources keep names as written. One function, so that the
/// import and the searches agree on who a player is.
pub fn username_key(source: &str, name: &str) -> String {
    if source == "lichess" {
        name.to_lowercase()
    } else {
        name.to_owned()
    }
}

/// The length of a Lichess game id.
const LICHESS_ID_LEN: usize = 8;

/// The length of the id in the URL of a player's own view of a game: the
/// game id and 4 characters of the player's.
const LICHESS_FULL_ID_LEN: usize = 12;

/// What follows the host of a Lichess URL (`lichess.org/`), if `url` is
/// one. Scheme and host are compared without regard to case, as URLs are
/// (`HTTPS://Lichess.org/…` is the same page as `https://lichess.org/…`),
/// `www.` may precede the host and the scheme may be missing.
fn lichess_path(url: &str) -> Option<&str> {
    fn strip<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
        let head = text.get(..prefix.len())?;
        head.eq_ignore_ascii_case(prefix)
            .then(|| &text[prefix.len()..])
    }
    let rest = strip(url, "https://")
        .or_else(|| strip(url, "http://"))
        .unwrap_or(url);
    let rest = strip(rest, "www.").unwrap_or(rest);
    strip(rest, "lichess.org/")
}

/// The id of `len` letters and digits that `path` starts with, if nothing
/// but the end, a `/`, `?` or `#` follows it.
fn lichess_id_at(path: &str, len: usize) -> Option<&str> {
    let id = path.get(..len)?;
    let tail = &path[len..];
    let id_ok = id.bytes().all(|b| b.is_ascii_alphanumeric());
    let tail_ok = tail.is_empty() || tail.starts_with(['/', '?', '#']);
    (id_ok && tail_ok).then_some(id)
}

/// The 8-character Lichess game id in a `Site` URL, if it is one (see
/// [`lichess_path`] for the URLs read); the id keeps its case, because
/// Lichess ids are case-sensitive.
pub fn lichess_game_id(site: &str) -> Option<&str> {
    lichess_id_at(lichess_path(site)?, LICHESS_ID_LEN)
}

/// A Lichess arena or swiss tournament referenced in an `Event` tag.
pub fn lichess_event_ref(event: &str) -> Option<EventRef> {
    for (marker, kind) in [
        ("lichess.org/tournament/", "arena"),
        ("lichess.org/swiss/", "swiss"),
    ] {
        if let Some(at) = event.find(marker) {
            let id: String = event[at + marker.len()..]
                .chars()
                .take_while(char::is_ascii_alphanumeric)
                .collect();
            if !id.is_empty() {
                return Some(EventRef {
                    kind,
                    external_id: id,
                });
            }
        }
    }
    None
}

/// `300+3` → 300 s + 3 s; `60` → 60 s + 0; `-` (correspondence) and
/// anything else (`10+0.05`, `40/7200`) → none; the raw tag is kept anyway.
pub fn parse_time_control(tc: &str) -> Option<TimeControl> {
    let (initial, increment) = tc.split_once('+').unwrap_or((tc, "0"));
    Some(TimeControl {
        initial_s: initial.parse().ok()?,
        increment_s: increment.parse().ok()?,
    })
}

/// PGN dates are `YYYY.MM.DD`, possibly with `??` parts (then none).
/// The exact `YYYY.MM.DD` shape is read directly: chrono's format parser
/// costs several times more, and a game asks for up to three dates. Any
/// other shape goes to chrono, so the accepted set is chrono's.
fn parse_pgn_date(s: &str) -> Option<NaiveDate> {
    match fixed_digits(s, b"dddd.dd.dd") {
        Some([y, m, d]) => NaiveDate::from_ymd_opt(i32::try_from(y).ok()?, m, d),
        None => NaiveDate::parse_from_str(s, "%Y.%m.%d").ok(),
    }
}

/// The days a PGN date stands for, first and last included: one day for a
/// full date, a month when only the day is unknown (`1997.05.??`), a year
/// when the month is (`1997.??.??`). A date matches a period
/// (`--since/--until`) when all its days lie in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DateSpan {
    /// The first day.
    pub first: NaiveDate,
    /// The last day.
    pub last: NaiveDate,
}

impl DateSpan {
    /// The span of a `Date` value `YYYY.MM.DD` whose month or day may be
    /// `??`; a known day under an unknown month says nothing more than
    /// the year. `None` when the year is unknown or `0000`, the month is
    /// not `01`–`12`, a day is not one of its month, or the text has
    /// another shape: such a date matches no bounded period. The same rule
    /// as `PARTIAL_DATE_SPAN` in the game filter's SQL.
    pub fn of_pgn(text: &str) -> Option<DateSpan> {
        let bytes = text.as_bytes();
        let digits = |range: std::ops::Range<usize>| -> Option<u32> {
            let part = bytes.get(range)?;
            part.iter()
                .all(u8::is_ascii_digit)
                .then(|| part.iter().fold(0, |n, &b| n * 10 + u32::from(b - b'0')))
        };
        let unknown = |range: std::ops::Range<usize>| bytes.get(range) == Some(b"??".as_slice());
        if bytes.len() != 10 || bytes[4] != b'.' || bytes[7] != b'.' {
            return None;
        }
        let year = i32::try_from(digits(0..4)?).ok().filter(|&y| y > 0)?;
        let day = |month, day| NaiveDate::from_ymd_opt(year, month, day);
        if unknown(5..7) {
            return (unknown(8..10) || digits(8..10).is_some()).then_some(DateSpan {
                first: day(1, 1)?,
                last: day(12, 31)?,
            });
        }
        let month = digits(5..7)?;
        let first = day(month, 1)?;
        if unknown(8..10) {
            let last = first
                .checked_add_months(chrono::Months::new(1))
                .and_then(|next| next.pred_opt())?;
            return Some(DateSpan { first, last });
        }
        let one = day(month, digits(8..10)?)?;
        Some(DateSpan {
            first: one,
            last: one,
        })
    }
}

/// A `UTCTime` value, `HH:MM:SS`: as [`parse_pgn_date`], the exact shape
/// directly and anything else (a leap second `23:59:60` too) through chrono.
fn parse_pgn_time(s: &str) -> Option<NaiveTime> {
    match fixed_digits(s, b"dd:dd:dd") {
        Some([h, m, sec]) if sec < 60 => NaiveTime::from_hms_opt(h, m, sec),
        _ => NaiveTime::parse_from_str(s, "%H:%M:%S").ok(),
    }
}

/// The three numbers of `s` when it has exactly the shape `pattern`: `d`
/// stands for an ASCII digit, any other byte for itself.
fn fixed_digits(s: &str, pattern: &[u8]) -> Option<[u32; 3]> {
    let bytes = s.as_bytes();
    if bytes.len() != pattern.len() {
        return None;
    }
    let mut numbers = [0u32; 3];
    let mut field = 0;
    for (&b, &p) in bytes.iter().zip(pattern) {
        if p == b'd' {
            if !b.is_ascii_digit() {
                return None;
            }
            numbers[field] = numbers[field] * 10 + u32::from(b - b'0');
        } else if b == p {
            field += 1;
        } else {
            return None;
        }
    }
    Some(numbers)
}

fn started_at(
    utc_date: Option<&str>,
    utc_time: Option<&str>,
    date: Option<&str>,
) -> Option<DateTime<Utc>> {
    let day = utc_date
        .and_then(parse_pgn_date)
        .or_else(|| date.and_then(parse_pgn_date))?;
    let time = utc_date
        .and(utc_time)
        .and_then(parse_pgn_time)
        .unwrap_or(NaiveTime::MIN);
    Some(day.and_time(time).and_utc())
}

/// Parses the `%clk` and `%eval` commands in a comment. Lichess writes
/// `[%clk 0:05:00]`, sometimes with tenths (`0:00:09.3`), and
/// `[%eval 0.17]` / `[%eval #-3]` (with an optional `,depth`).
pub fn parse_comment_commands(comment: &[u8]) -> (Option<i32>, Option<Eval>) {
    // Lichess's usual comment, ` [%clk h:mm:ss] ` alone, without the search
    // loop (the loop would find that one command and nothing else).
    if let Some(value) = comment
        .trim_ascii()
        .strip_prefix(b"[%clk")
        .and_then(|rest| rest.strip_suffix(b"]"))
        .filter(|value| !value.iter().any(|&b| b == b'[' || b == b']'))
    {
        return (clock_value(value), None);
    }
    scan_comment_commands(comment)
}

/// [`parse_comment_commands`] for any comment: every `[...]` in turn, the
/// first valid `%clk` and `%eval` win.
fn scan_comment_commands(comment: &[u8]) -> (Option<i32>, Option<Eval>) {
    let mut clock = None;
    let mut eval = None;
    let mut rest = comment;
    while let Some(start) = memchr_pos(rest, b'[') {
        rest = &rest[start + 1..];
        let end = memchr_pos(rest, b']').unwrap_or(rest.len());
        let command = &rest[..end];
        if let Some(value) = command.strip_prefix(b"%clk") {
            clock = clock.or_else(|| clock_value(value));
        } else if let Some(value) = command.strip_prefix(b"%eval") {
            eval = eval.or_else(|| trim_ascii(value).and_then(parse_eval));
        }
        rest = &rest[end..];
    }
    (clock, eval)
}

/// The value of a `%clk` command (the bytes after `%clk`).
fn clock_value(value: &[u8]) -> Option<i32> {
    let value = value.trim_ascii();
    clock_digits(value).unwrap_or_else(|| trim_ascii(value).and_then(parse_clock))
}

fn memchr_pos(haystack: &[u8], needle: u8) -> Option<usize> {
    haystack.iter().position(|&b| b == needle)
}

/// The text of a comment's value, trimmed; `None` if it is not UTF-8 (then
/// it is no clock or evaluation, as for python-chess, whose patterns need
/// ASCII digits).
fn trim_ascii(s: &[u8]) -> Option<&str> {
    std::str::from_utf8(s.trim_ascii()).ok()
}

/// Lichess's own layout of a clock, `h:mm:ss` (one digit of hours),
/// read by position: its milliseconds, or `None` for any other bytes.
pub(crate) fn positional_clock(value: &[u8]) -> Option<i32> {
    let &[h, b':', m1, m2, b':', s1, s2] = value else {
        return None;
    };
    if ![h, m1, m2, s1, s2].iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = |d: u8| i32::from(d - b'0');
    Some(((n(h) * 60 + n(m1) * 10 + n(m2)) * 60 + n(s1) * 10 + n(s2)) * 1000)
}

/// [`parse_clock`] for the form Lichess writes on every move, without
/// `str` parsing (which was most of the comment cost): `Some` when `value`
/// is `h:m:s[.f]` with 1–9 ASCII digits per number and at most 3 fraction
/// digits, where it agrees with `parse_clock`; `None` for anything else,
/// which `parse_clock` then judges.
#[expect(
    clippy::option_option,
    reason = "the outer `None` is \"not this form, ask parse_clock\", the inner one \"no clock\""
)]
fn clock_digits(value: &[u8]) -> Option<Option<i32>> {
    if let Some(ms) = positional_clock(value) {
        return Some(Some(ms));
    }
    // One pass: hours, minutes, whole seconds, then fraction digits.
    let mut numbers = [0i64; 3];
    let mut digits = [0u32; 3];
    let mut field = 0;
    let (mut frac, mut frac_digits, mut in_frac) = (0i64, 0u32, false);
    for &b in value {
        match b {
            b'0'..=b'9' if in_frac && frac_digits < 3 => {
                frac = frac * 10 + i64::from(b - b'0');
                frac_digits += 1;
            }
            b'0'..=b'9' if !in_frac && digits[field] < 9 => {
                numbers[field] = numbers[field] * 10 + i64::from(b - b'0');
                digits[field] += 1;
            }
            b':' if !in_frac && field < 2 => field += 1,
            b'.' if !in_frac && field == 2 => in_frac = true,
            _ => return None,
        }
    }
    if field != 2 || digits.contains(&0) {
        return None;
    }
    // At most 3 fraction digits: the shift is 1, 10 or 100 (or none at all).
    let frac_ms = frac * 10i64.pow(3 - frac_digits);
    // Below 4e15 with 9-digit numbers: no overflow.
    let [h, m, whole] = numbers;
    Some(i32::try_from(((h * 60 + m) * 60 + whole) * 1000 + frac_ms).ok())
}

fn parse_clock(s: &str) -> Option<i32> {
    let mut parts = s.split(':');
    let (h, m, sec) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let h: i64 = h.parse().ok()?;
    let m: i64 = m.parse().ok()?;
    let (whole, frac) = sec.split_once('.').unwrap_or((sec, ""));
    let whole: i64 = whole.parse().ok()?;
    let frac_ms: i64 = match frac.len() {
        0 => 0,
        1..=3 => frac.parse::<i64>().ok()? * [100, 10, 1][frac.len() - 1],
        _ => return None,
    };
    let ms = ((h * 60 + m) * 60 + whole)
        .checked_mul(1000)?
        .checked_add(frac_ms)?;
    i32::try_from(ms).ok()
}

#[expect(
    clippy::cast_possible_truncation,
    reason = "the centipawns are range-checked before the cast"
)]
fn parse_eval(s: &str) -> Option<Eval> {
    let value = s.split(',').next()?.trim();
    if let Some(mate) = value.strip_prefix('#') {
        return mate.parse().ok().map(Eval::MateIn);
    }
    let pawns: f64 = value.parse().ok()?;
    let cp = (pawns * 100.0).round();
    // Range-checked just before, so the cast is exact.
    (cp.is_finite() && cp.abs() < f64::from(i32::MAX)).then_some(Eval::Centipawns(cp as i32))
}

/// The key `pgnload positions` prints for a game: its Lichess id, else its
/// game number within the file.
pub fn game_key(meta: &GameMeta, pos: &SourcePos) -> Arc<str> {
    match &meta.lichess_id {
        Some(id) => Arc::from(id.as_str()),
        None => Arc::from(pos.game_number.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_game_is_named_by_id_or_source_and_external_id() {
        let key = |source: &str, external_id: &str| GameRef::Key {
            source: source.to_owned(),
            external_id: external_id.to_owned(),
        };
        assert_eq!("42".parse(), Ok(GameRef::Id(42)));
        assert_eq!("lichess:abcd1234".parse(), Ok(key("lichess", "abcd1234")));
        // A source label may hold a colon; an external id never does.
        assert_eq!("my:src:e6d1".parse(), Ok(key("my:src", "e6d1")));
        for bad in [
            "",
            "abc",
            "ENPo6ReH1",
            "ENPo6Re!",
            ":x",
            "x:",
            "99999999999999999999",
            "https://lichess.org/ENPo6Re",
            "lichess.org/ENPo6ReH1",
            "https://lichess.org/tournament/kMtyy84D",
        ] {
            assert!(bad.parse::<GameRef>().is_err(), "{bad}");
        }
        // A Lichess game as a browser shows it, or its bare id.
        for lichess in [
            "ENPo6ReH",
            " ENPo6ReH ",
            "https://lichess.org/ENPo6ReH",
            "https://lichess.org/ENPo6ReH/black",
            "https://lichess.org/ENPo6ReH#12",
            "https://lichess.org/ENPo6ReH/white#41",
            "http://www.lichess.org/ENPo6ReH?x=1",
            "lichess.org/ENPo6ReH",
            "HTTPS://Lichess.org/ENPo6ReH",
            "https://lichess.org/ENPo6ReHab12",
            "lichess.org/ENPo6ReHab12#3",
        ] {
            assert_eq!(
                lichess.parse(),
                Ok(key("lichess", "ENPo6ReH")),
                "{lichess:?}"
            );
        }
        // Digits alone are a games.id; the key names such a Lichess game.
        assert_eq!("12345678".parse(), Ok(GameRef::Id(12_345_678)));
        assert_eq!("lichess:12345678".parse(), Ok(key("lichess", "12345678")));
        for text in ["42", "lichess:abcd1234", "my:src:e6d1"] {
            assert_eq!(
                text.parse::<GameRef>().map(|g| g.to_string()),
                Ok(text.to_owned())
            );
        }
    }

    fn tags(pairs: &[(&str, &str)]) -> Tags {
        pairs.iter().copied().collect()
    }

    #[test]
    fn tags_give_back_each_name_and_value_as_pushed() {
        let pairs = [
            ("Event", "Rated \"Blitz\" game"),
            ("Site", ""),
            ("", "no name"),
            ("White", "Jörg"),
            ("Event", "second"),
            ("X", ""),
        ];
        let read = tags(&pairs);
        assert_eq!(read.len(), 6);
        assert!(!read.is_empty());
        assert_eq!(read.iter().collect::<Vec<_>>(), pairs);
        assert_eq!(read.iter().len(), 6);
        assert_eq!(read.first("Event"), Some("Rated \"Blitz\" game"));
        assert_eq!(read.first("X"), Some(""));
        assert_eq!(read.first("Black"), None);
        assert_eq!(format!("{read:?}"), format!("{pairs:?}"));
        let empty = Tags::default();
        assert!(empty.is_empty());
        assert_eq!(empty.iter().next(), None);
    }

    /// `pairs` as their bytes one after the other, and the ends.
    fn joined(pairs: &[(&[u8], &[u8])]) -> (Vec<u8>, Vec<(usize, usize)>) {
        let mut bytes = Vec::new();
        let mut ends = Vec::new();
        for (name, value) in pairs {
            bytes.extend_from_slice(name);
            let name_end = bytes.len();
            bytes.extend_from_slice(value);
            ends.push((name_end, bytes.len()));
        }
        (bytes, ends)
    }

    #[test]
    fn tags_decode_each_name_and_value_on_its_own() {
        let decoded = |pairs: &[(&[u8], &[u8])]| {
            let (bytes, ends) = joined(pairs);
            let tags = Tags::decoded(bytes, ends);
            let by_piece: Vec<(String, String)> = pairs
                .iter()
                .map(|(n, v)| (decode_text(n).into_owned(), decode_text(v).into_owned()))
                .collect();
            let read: Vec<(String, String)> = tags
                .iter()
                .map(|(n, v)| (n.to_owned(), v.to_owned()))
                .collect();
            assert_eq!(read, by_piece);
            read
        };
        let utf8 = decoded(&[(b"White", "Jörg".as_bytes()), (b"Site", b"")]);
        assert_eq!(utf8[0].1, "Jörg");
        // One Latin-1 value: only it is read as Latin-1.
        let latin1 = decoded(&[(b"White", b"J\xf6rg"), (b"Black", "Jörg".as_bytes())]);
        assert_eq!(
            (latin1[0].1.as_str(), latin1[1].1.as_str()),
            ("Jörg", "Jörg")
        );
        // UTF-8 as a whole, but `é` cut between a name and its value: two
        // Latin-1 characters.
        let cut = decoded(&[(b"A\xc3", b"\xa9"), (b"B", b"b")]);
        assert_eq!((cut[0].0.as_str(), cut[0].1.as_str()), ("AÃ", "©"));
        assert!(decoded(&[]).is_empty());
    }

    #[test]
    fn a_nul_byte_in_any_tag_is_refused() {
        assert!(check_storable(&tags(&[("White", "x"), ("Black", "y")])).is_ok());
        for (name, value) in [("A\0", "x"), ("A", "\0"), ("A", "x\0y")] {
            let read = tags(&[("White", "x"), (name, value), ("Black", "y")]);
            assert_eq!(
                check_storable(&read),
                Err(RejectReason::NulByte {
                    tag: name.escape_default().to_string()
                })
            );
        }
    }

    fn owned(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn dates_and_times_read_directly_are_what_chrono_reads() {
        let mut direct = 0;
        for year in ["0000", "0001", "1970", "2000", "2024", "2025", "9999"] {
            for month in 0..=13 {
                for day in 0..=32 {
                    let s = format!("{year}.{month:02}.{day:02}");
                    let chrono = NaiveDate::parse_from_str(&s, "%Y.%m.%d").ok();
                    assert_eq!(parse_pgn_date(&s), chrono, "{s}");
                    direct += usize::from(chrono.is_some());
                }
            }
        }
        for s in [
            "2025.5.01",
            "2025.05.1",
            "+2025.05.01",
            "2025.05.??",
            "2025-05-01",
            " 2025.05.01",
        ] {
            assert_eq!(
                parse_pgn_date(s),
                NaiveDate::parse_from_str(s, "%Y.%m.%d").ok(),
                "{s}"
            );
        }
        for hour in 0..=25 {
            for minute in 0..=61 {
                for second in 0..=61 {
                    let s = format!("{hour:02}:{minute:02}:{second:02}");
                    let chrono = NaiveTime::parse_from_str(&s, "%H:%M:%S").ok();
                    assert_eq!(parse_pgn_time(&s), chrono, "{s}");
                    direct += usize::from(chrono.is_some());
                }
            }
        }
        for s in ["1:02:03", "01:02:3", "01:02:03.5", "01.02.03", "??:??:??"] {
            assert_eq!(
                parse_pgn_time(s),
                NaiveTime::parse_from_str(s, "%H:%M:%S").ok(),
                "{s}"
            );
        }
        // Valid dates and times were compared, not only rejections.
        assert!(direct > 80_000, "{direct}");
    }

    #[test]
    fn lichess_tags_become_typed_fields() {
        let meta = GameMeta::from_tags(&tags(&[
            (
                "Event",
                "Rated Blitz tournament https://lichess.org/tournament/4XV2LWOm",
            ),
            ("Site", "https://lichess.org/ENPo6ReH"),
            ("White", "alanbrito4"),
            ("WhiteElo", "1028"),
            ("WhiteRatingDiff", "-5"),
            ("BlackRatingDiff", "+5"),
            ("BlackTitle", "BOT"),
            ("UTCDate", "2025.05.01"),
            ("UTCTime", "00:00:06"),
            ("Date", "2025.04.30"),
            ("TimeControl", "300+3"),
            ("Result", "0-1"),
            ("Annotator", "lichess.org"),
        ]));
        assert_eq!(meta.lichess_id.as_deref(), Some("ENPo6ReH"));
        assert_eq!(
            meta.event_ref,
            Some(EventRef {
                kind: "arena",
                external_id: "4XV2LWOm".into()
            })
        );
        assert_eq!(meta.white.elo, Some(1028));
        assert_eq!(meta.white.rating_diff, Some(-5));
        assert_eq!(meta.black.rating_diff, Some(5));
        assert!(meta.black.is_bot());
        assert!(!meta.white.is_bot());
        assert_eq!(
            meta.started_at.map(|t| t.to_rfc3339()),
            Some("2025-05-01T00:00:06+00:00".into())
        );
        assert_eq!(
            meta.clock,
            Some(TimeControl {
                initial_s: 300,
                increment_s: 3
            })
        );
        assert_eq!(meta.result.and_then(GameResult::score), Some(-1));
        assert_eq!(meta.other_tags, owned(&[("Annotator", "lichess.org")]));
    }

    #[test]
    fn the_first_tag_of_a_name_counts_even_when_empty() {
        let meta = GameMeta::from_tags(&tags(&[
            ("White", "?"),
            ("White", "later"),
            ("BlackElo", " 1500 "),
            ("BlackElo", "1600"),
            ("Round", "-"),
            ("SetUp", "1"),
            ("Annotator", "a"),
            ("Annotator", "b"),
        ]));
        assert_eq!(meta.white.name, None);
        assert_eq!(meta.black.elo, Some(1500));
        assert_eq!(meta.round, None);
        assert_eq!(
            meta.other_tags,
            owned(&[("Annotator", "a"), ("Annotator", "b")])
        );
    }

    #[test]
    fn tags_no_column_holds_as_written_are_kept_raw() {
        let meta = GameMeta::from_tags(&tags(&[
            ("Date", "1997.05.??"),
            ("White", "First"),
            ("White", "Second"),
            ("White", "First"),
            ("WhiteElo", "2700?"),
            ("BlackElo", "2650"),
            ("Termination", "Adjudication"),
            ("Result", "1-0 (forfeit)"),
            ("UTCTime", "12:00:00"),
            ("Annotator", "a"),
            ("Annotator", "b"),
            ("Round", "?"),
        ]));
        assert_eq!(meta.white.name.as_deref(), Some("First"));
        assert_eq!(meta.started_at, None);
        assert_eq!(
            meta.kept_tags,
            owned(&[
                ("WhiteElo", "2700?"),
                ("UTCTime", "12:00:00"),
                ("Date", "1997.05.??"),
                ("Termination", "Adjudication"),
                ("Result", "1-0 (forfeit)"),
                ("White", "Second"),
            ])
        );
        let json = serde_json::Value::Object(meta.tags_json()).to_string();
        assert_eq!(
            json,
            r#"{"Annotator":["a","b"],"Date":"1997.05.??","Result":"1-0 (forfeit)","Termination":"Adjudication","UTCTime":"12:00:00","White":"Second","WhiteElo":"2700?"}"#
        );
        // Held exactly (or carrying nothing): nothing kept.
        let lichess = GameMeta::from_tags(&tags(&[
            ("Date", "2025.05.01"),
            ("UTCDate", "2025.05.01"),
            ("UTCTime", "00:00:06"),
            ("WhiteElo", "1500"),
            ("BlackElo", "?"),
            ("WhiteRatingDiff", "+5"),
            ("Termination", "Time forfeit"),
            ("Result", "1-0"),
            ("Date", "2025.05.01"),
        ]));
        assert_eq!(lichess.kept_tags, []);
        let unknown = GameMeta::from_tags(&tags(&[("Date", "????.??.??")]));
        assert_eq!(unknown.kept_tags, []);
    }

    #[test]
    fn unstorable_tags_are_refused() {
        assert_eq!(
            check_storable(&tags(&[("White", "Jo\0hn")])),
            Err(RejectReason::NulByte {
                tag: "White".into()
            })
        );
        assert_eq!(
            check_storable(&tags(&[("A\0", "x")])),
            Err(RejectReason::NulByte {
                tag: "A\\u{0}".into()
            })
        );
        let long = "x".repeat(MAX_NAME_BYTES + 1);
        assert!(matches!(
            check_storable(&tags(&[("Event", long.as_str())])),
            Err(RejectReason::NameTooLong { bytes, .. }) if bytes == MAX_NAME_BYTES + 1
        ));
        let fits = "x".repeat(MAX_NAME_BYTES);
        assert_eq!(
            check_storable(&tags(&[
                ("Black", fits.as_str()),
                ("Opening", long.as_str())
            ])),
            Ok(())
        );
    }

    #[test]
    fn site_must_be_a_lichess_game_url() {
        assert_eq!(
            lichess_game_id("https://lichess.org/ENPo6ReH"),
            Some("ENPo6ReH")
        );
        assert_eq!(
            lichess_game_id("https://lichess.org/ENPo6ReH/black"),
            Some("ENPo6ReH")
        );
        assert_eq!(lichess_game_id("https://lichess.org/ENPo6ReHx"), None);
        for spelling in [
            "https://Lichess.org/ENPo6ReH",
            "HTTPS://LICHESS.ORG/ENPo6ReH",
            "http://lichess.org/ENPo6ReH",
            "https://www.lichess.org/ENPo6ReH",
            "lichess.org/ENPo6ReH",
            "WWW.Lichess.Org/ENPo6ReH#12",
        ] {
            assert_eq!(lichess_game_id(spelling), Some("ENPo6ReH"), "{spelling}");
        }
        assert_eq!(lichess_game_id("https://lichess.org.evil/ENPo6ReH"), None);
        assert_eq!(lichess_game_id("https://notlichess.org/ENPo6ReH"), None);
        assert_eq!(
            lichess_game_id("https://lichess.org/enpo6reh"),
            Some("enpo6reh")
        );
        assert_eq!(lichess_game_id("https://lichess.org/short"), None);
        assert_eq!(lichess_game_id("CCRL"), None);
        assert_eq!(
            lichess_event_ref("Swiss https://lichess.org/swiss/abcDEF12").map(|e| e.kind),
            Some("swiss")
        );
    }

    #[test]
    fn partial_dates_span_their_unknown_parts() {
        let day = |y, m, d| NaiveDate::from_ymd_opt(y, m, d).expect("a day");
        let span = |first, last| Some(DateSpan { first, last });
        assert_eq!(
            DateSpan::of_pgn("1997.??.??"),
            span(day(1997, 1, 1), day(1997, 12, 31))
        );
        assert_eq!(
            DateSpan::of_pgn("1997.??.05"),
            span(day(1997, 1, 1), day(1997, 12, 31))
        );
        assert_eq!(
            DateSpan::of_pgn("2024.02.??"),
            span(day(2024, 2, 1), day(2024, 2, 29))
        );
        assert_eq!(
            DateSpan::of_pgn("1997.05.11"),
            span(day(1997, 5, 11), day(1997, 5, 11))
        );
        for none in [
            "????.??.??",
            "????.05.11",
            "0000.??.??",
            "1997.13.??",
            "1997.00.??",
            "1997.02.30",
            "1997.?.??",
            "1997",
            "97.05.??",
            "1997-05-??",
            "1997.05.??x",
        ] {
            assert_eq!(DateSpan::of_pgn(none), None, "{none}");
        }
        let meta = GameMeta::from_tags(&tags(&[("Date", " 1997.05.?? ")]));
        assert_eq!(meta.partial_date, span(day(1997, 5, 1), day(1997, 5, 31)));
        let timed =
            GameMeta::from_tags(&tags(&[("Date", "1997.??.??"), ("UTCDate", "1997.05.11")]));
        assert_eq!(timed.partial_date, None);
    }

    #[test]
    fn time_controls_and_dates_degrade_to_none() {
        assert_eq!(parse_time_control("-"), None);
        assert_eq!(parse_time_control("10+0.05"), None);
        assert_eq!(
            parse_time_control("60"),
            Some(TimeControl {
                initial_s: 60,
                increment_s: 0
            })
        );
        assert_eq!(started_at(None, None, Some("1997.??.??")), None);
        assert_eq!(
            started_at(None, Some("12:00:00"), Some("1997.05.11")).map(|t| t.to_rfc3339()),
            Some("1997-05-11T00:00:00+00:00".into())
        );
    }

    #[test]
    fn comment_commands_give_clock_and_eval() {
        assert_eq!(
            parse_comment_commands(b" [%eval 0.17] [%clk 0:05:00] "),
            (Some(300_000), Some(Eval::Centipawns(17)))
        );
        assert_eq!(
            parse_comment_commands(b"[%clk 0:00:09.3]"),
            (Some(9_300), None)
        );
        assert_eq!(
            parse_comment_commands(b"[%eval #-3,20]"),
            (None, Some(Eval::MateIn(-3)))
        );
        assert_eq!(
            parse_comment_commands(b"[%clk garbage] [%eval nan]"),
            (None, None)
        );
        assert_eq!(
            parse_comment_commands(b"[%clk 999999999:00:00]"),
            (None, None)
        );
    }

    #[test]
    fn lone_clock_comments_read_like_any_comment() {
        for comment in [
            &b" [%clk 0:03:00] "[..],
            b"[%clk 0:00:09.3]",
            b"\n[%clk\t1:00:00]\r\n",
            b"[%clk]",
            b"[%clk 1:00:00] [%clk 2:00:00]",
            b"[%clk 1:00:00]x",
            b"[%clk garbage] [%eval 1.5]",
            b"[%clk 0:01:00] ]",
            b"[[%clk 0:01:00]",
            b"[%clkx 0:01:00]",
        ] {
            assert_eq!(
                parse_comment_commands(comment),
                scan_comment_commands(comment),
                "{}",
                String::from_utf8_lossy(comment)
            );
        }
    }

    #[test]
    fn clock_fast_path_agrees_with_parse_clock() {
        let numbers = [
            "",
            "0",
            "5",
            "05",
            "59",
            "+1",
            "-1",
            " 1",
            "123456789",
            "1234567890",
            "99999999999999999999",
        ];
        let fractions = ["", ".", ".3", ".30", ".305", ".3000", ".+1", ".-", "..1"];
        let mut fast = 0;
        for h in numbers {
            for m in numbers {
                for s in numbers {
                    for f in fractions {
                        let value = format!("{h}:{m}:{s}{f}");
                        if let Some(clock) = clock_digits(value.as_bytes()) {
                            assert_eq!(clock, parse_clock(&value), "{value:?}");
                            fast += 1;
                        }
                    }
                }
            }
        }
        assert!(fast > 500, "the fast path took only {fast} cases");
        assert_eq!(clock_digits(b"0:05"), None);
        assert_eq!(clock_digits(b"0:05:00:00"), None);
    }

    #[test]
    fn variant_tags_follow_python_chess_aliases() {
        assert_eq!(
            GameVariant::from_tag("fischerandom"),
            Some(GameVariant::Chess960)
        );
        assert_eq!(
            GameVariant::from_tag("Three-check"),
            Some(GameVariant::ThreeCheck)
        );
        assert_eq!(
            GameVariant::from_tag("From Position"),
            Some(GameVariant::Standard)
        );
        assert_eq!(GameVariant::from_tag("Suicide"), None);
        // Tags are read exactly as python-chess reads them.
        assert_eq!(GameVariant::from_tag("racing-kings"), None);
    }

    #[test]
    fn variant_names_parse_whatever_their_spelling_and_display_as_labels() {
        for text in [
            "king_of_the_hill",
            "kingOfTheHill",
            "King of the Hill",
            "koth",
            "KOTH",
            "king-of-the-hill",
            " kingofthehill ",
        ] {
            assert_eq!(text.parse(), Ok(GameVariant::KingOfTheHill), "{text:?}");
        }
        for (text, variant) in [
            ("racing-kings", GameVariant::RacingKings),
            ("racingKings", GameVariant::RacingKings),
            ("threeCheck", GameVariant::ThreeCheck),
            ("3check", GameVariant::ThreeCheck),
            ("Three-check", GameVariant::ThreeCheck),
            ("zh", GameVariant::Crazyhouse),
            ("Chess960", GameVariant::Chess960),
            ("fischerandom", GameVariant::Chess960),
            ("From Position", GameVariant::Standard),
            ("wild/8a", GameVariant::Standard),
        ] {
            assert_eq!(text.parse(), Ok(variant), "{text:?}");
        }
        for variant in GameVariant::ALL {
            assert_eq!(variant.to_string().parse(), Ok(variant));
            assert_eq!(variant.to_string(), variant.as_db_label());
        }
        for bad in ["", "  ", "suicide", "shogi", "king of the"] {
            let error = bad.parse::<GameVariant>().expect_err(bad).to_string();
            assert!(error.contains("is not a variant"), "{bad:?}: {error}");
            assert!(error.contains("king_of_the_hill"), "{error}");
        }
    }
}

/// Maps a Lichess `Termination` tag to the `game_termination` enum label.
pub fn termination_label(termination: &str) -> &'static str {
    // Compared ignoring ASCII case rather than lowercased: every game asks,
    // and lowercasing allocates.
    let termination = termination.trim();
    [
        ("normal", "normal"),
        ("time forfeit", "time_forfeit"),
        ("abandoned", "abandoned"),
        ("rules infraction", "rules_infraction"),
        ("unterminated", "unterminated"),
    ]
    .into_iter()
    .find(|(tag, _)| tag.eq_ignore_ascii_case(termination))
    .map_or("other", |(_, label)| label)
}

#[cfg(test)]
mod termination_tests {
    use super::*;

    #[test]
    fn lichess_terminations_map_to_enum_labels() {
        assert_eq!(termination_label("Time forfeit"), "time_forfeit");
        assert_eq!(termination_label("Normal"), "normal");
        assert_eq!(termination_label("Adjudication"), "other");
        // Any ASCII case, blanks around; other letters are not folded.
        assert_eq!(termination_label(" RULES infraction\t"), "rules_infraction");
        assert_eq!(termination_label("unTERMINATED"), "unterminated");
        assert_eq!(termination_label("Abandoned."), "other");
        assert_eq!(termination_label("NORMAL\u{130}"), "other");
        assert_eq!(termination_label(""), "other");
    }
}
