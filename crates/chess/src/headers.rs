//! A game's tags stored once and written back as they were read: the
//! typed columns say most of them, and `games.tags` keeps only what the
//! columns cannot say exactly.
//!
//! [`Columns::render`] is the one place that turns the typed columns into
//! tag text. The import keeps ([`StoredTags`]) every tag whose values
//! differ from that rendering, every tag no column holds, and the order of
//! the tags when the rendering's order is not theirs; the export
//! ([`written_tags`]) renders the columns and lets `games.tags` replace
//! what they say. So a game is written with each of its tags once, with
//! its exact value, the Seven Tag Roster first (as python-chess writes
//! them) and the others in the order they were read; a Lichess game, whose
//! tags are its columns' rendering in Lichess's order, keeps nothing.

use std::{borrow::Cow, fmt, ops::Range};

use chrono::{DateTime, Datelike, NaiveTime, Timelike, Utc};
use serde_json::{Map, Value};

use crate::{
    annotation::digits,
    model::{GameMeta, GameResult, GameVariant, Tags, termination_label},
};

/// The Seven Tag Roster, in its order, with the value python-chess gives a
/// game that lacks the tag: written first, always.
const ROSTER: [(&str, &str); 7] = [
    ("Event", "?"),
    ("Site", "?"),
    ("Date", "????.??.??"),
    ("Round", "?"),
    ("White", "?"),
    ("Black", "?"),
    ("Result", "*"),
];

/// The other tags a column holds, in the order they are rendered: Lichess's
/// order, so that its games need no stored order.
const TYPED: [&str; 15] = [
    "UTCDate",
    "UTCTime",
    "WhiteElo",
    "BlackElo",
    "WhiteRatingDiff",
    "BlackRatingDiff",
    "WhiteTitle",
    "BlackTitle",
    "Variant",
    "ECO",
    "Opening",
    "TimeControl",
    "Termination",
    "FEN",
    "SetUp",
];

/// The number of tags a column holds: [`ROSTER`], then [`TYPED`].
const SLOTS: usize = ROSTER.len() + TYPED.len();

/// The place of `name` in [`ROSTER`] then [`TYPED`]: the tag a column
/// holds, if `name` is one. One `match`, not a search of both lists: the
/// import looks up every tag of every game.
fn slot(name: &str) -> Option<usize> {
    Some(match name {
        "Event" => 0,
        "Site" => 1,
        "Date" => 2,
        "Round" => 3,
        "White" => 4,
        "Black" => 5,
        "Result" => 6,
        "UTCDate" => 7,
        "UTCTime" => 8,
        "WhiteElo" => 9,
        "BlackElo" => 10,
        "WhiteRatingDiff" => 11,
        "BlackRatingDiff" => 12,
        "WhiteTitle" => 13,
        "BlackTitle" => 14,
        "Variant" => 15,
        "ECO" => 16,
        "Opening" => 17,
        "TimeControl" => 18,
        "Termination" => 19,
        "FEN" => 20,
        "SetUp" => 21,
        _ => return None,
    })
}

/// The key of `games.tags` that holds the names of the tags after the
/// roster, in the order they were read (a name once per tag), when the
/// rendering's order is not theirs. No tag can be called so: a tag's name
/// ends at the first `]` or `"`.
pub const ORDER_KEY: &str = "]order";

/// A game's typed columns, as the import writes them and the export reads
/// them back: what [`Columns::render`] turns into tags.
#[derive(Debug, Clone, Default)]
pub struct Columns<'a> {
    /// A Lichess game (its `Round` placeholder is `-`, and its start time
    /// is always written).
    pub lichess: bool,
    /// `Event` (the event's name).
    pub event: Option<&'a str>,
    /// `Site`.
    pub site: Option<&'a str>,
    /// `Round`.
    pub round: Option<&'a str>,
    /// White's name.
    pub white: Option<&'a str>,
    /// Black's name.
    pub black: Option<&'a str>,
    /// `games.result`: 1, 0, -1, or none (`*`).
    pub result: Option<i16>,
    /// `games.started_at`.
    pub started_at: Option<DateTime<Utc>>,
    /// `WhiteElo`.
    pub white_elo: Option<i32>,
    /// `BlackElo`.
    pub black_elo: Option<i32>,
    /// `WhiteRatingDiff`.
    pub white_rating_diff: Option<i32>,
    /// `BlackRatingDiff`.
    pub black_rating_diff: Option<i32>,
    /// `WhiteTitle`.
    pub white_title: Option<&'a str>,
    /// `BlackTitle`.
    pub black_title: Option<&'a str>,
    /// The variant.
    pub variant: GameVariant,
    /// `ECO`.
    pub eco: Option<&'a str>,
    /// `Opening`.
    pub opening: Option<&'a str>,
    /// `TimeControl`.
    pub time_control: Option<&'a str>,
    /// The `game_termination` label.
    pub termination: Option<&'a str>,
    /// `games.start_fen`.
    pub start_fen: Option<&'a str>,
}

/// The `Variant` tag of a variant, as Lichess writes it; none for standard.
fn variant_tag(variant: GameVariant) -> Option<&'static str> {
    Some(match variant {
        GameVariant::Standard => return None,
        GameVariant::Chess960 => "Chess960",
        GameVariant::Antichess => "Antichess",
        GameVariant::Atomic => "Atomic",
        GameVariant::Crazyhouse => "Crazyhouse",
        GameVariant::Horde => "Horde",
        GameVariant::KingOfTheHill => "King of the Hill",
        GameVariant::RacingKings => "Racing Kings",
        GameVariant::ThreeCheck => "Three-check",
    })
}

/// The `Termination` tag of a `game_termination` label, as Lichess writes
/// it; `other` says no more than `-`.
fn termination_tag(label: &str) -> &'static str {
    match label {
        "normal" => "Normal",
        "time_forfeit" => "Time forfeit",
        "abandoned" => "Abandoned",
        "rules_infraction" => "Rules infraction",
        "unterminated" => "Unterminated",
        _ => "-",
    }
}

/// The `Result` tag of a `games.result` value.
pub fn result_tag(result: Option<i16>) -> &'static str {
    match result {
        Some(1) => "1-0",
        Some(-1) => "0-1",
        Some(0) => "1/2-1/2",
        _ => "*",
    }
}

impl<'a> Columns<'a> {
    /// The columns the import writes for a game read with `meta`, replayed
    /// under `variant` from `start_fen` to `result`.
    pub fn imported(
        meta: &'a GameMeta,
        variant: GameVariant,
        start_fen: Option<&'a str>,
        result: Option<GameResult>,
    ) -> Self {
        Columns {
            lichess: meta.lichess_id.is_some(),
            event: meta.event.as_deref(),
            site: meta.site.as_deref(),
            round: meta.round.as_deref(),
            white: meta.white.name.as_deref(),
            black: meta.black.name.as_deref(),
            result: result.and_then(GameResult::score),
            started_at: meta.started_at,
            white_elo: meta.white.elo,
            black_elo: meta.black.elo,
            white_rating_diff: meta.white.rating_diff,
            black_rating_diff: meta.black.rating_diff,
            white_title: meta.white.title.as_deref(),
            black_title: meta.black.title.as_deref(),
            variant,
            eco: meta.eco.as_deref(),
            opening: meta.opening.as_deref(),
            time_control: meta.time_control.as_deref(),
            termination: meta.termination.as_deref().map(termination_label),
            start_fen,
        }
    }

    /// The tags the columns say, in the order written: the roster, each
    /// with its placeholder when unknown, then the typed tags with a value.
    /// UTCDate/UTCTime come with a known time of day (always for Lichess,
    /// whose games carry them), FEN with `SetUp "1"`; a Lichess game's ECO
    /// and Opening are `?` when unknown, as Lichess writes them.
    pub fn render(&self) -> Vec<(&'static str, Cow<'a, str>)> {
        let mut scratch = String::new();
        let values = self.rendering(&mut scratch);
        let names = ROSTER.iter().map(|(name, _)| *name).chain(TYPED);
        names
            .zip(values)
            .filter_map(|(name, text)| {
                let value = match text? {
                    Text::Borrowed(text) => Cow::Borrowed(text),
                    Text::Written(at) => Cow::Owned(scratch[at].to_owned()),
                };
                Some((name, value))
            })
            .collect()
    }

    /// The start's date (`Date`, and `UTCDate` with `UTCTime`) and its
    /// `UTCTime` when the time of day is known, written in `scratch`.
    fn start_texts(&self, scratch: &mut String) -> (Option<Range<usize>>, Option<Range<usize>>) {
        // UTC's own fields, without converting to a zone for each of them.
        let started_at = self.started_at.map(|at| at.naive_utc());
        let day = started_at.map(|at| {
            written(scratch, |out| {
                // By hand: chrono's `format` parses its pattern for every
                // game, which was most of the import's cost for the tags. A
                // year outside 0..=9999 (which needs a sign) is left to chrono.
                match u32::try_from(at.year()) {
                    Ok(year) if year <= 9999 => digits(year, 4, out),
                    _ => out.push_str(&at.format("%Y").to_string()),
                }
                out.push('.');
                digits(at.month(), 2, out);
                out.push('.');
                digits(at.day(), 2, out);
            })
        });
        let utc_time = match started_at {
            Some(at) if self.lichess || at.time() != NaiveTime::MIN => {
                Some(written(scratch, |out| {
                    digits(at.hour(), 2, out);
                    out.push(':');
                    digits(at.minute(), 2, out);
                    out.push(':');
                    digits(at.second(), 2, out);
                }))
            }
            _ => None,
        };
        (day, utc_time)
    }

    /// [`Columns::render`] without an allocation per value, by slot
    /// ([`slot`]; none for a tag not written): the values the columns do
    /// not hold as text (dates, times, numbers) are written one after the
    /// other in `scratch`. The import renders every game's columns to
    /// compare them with its tags, and these allocations were most of that
    /// cost (callgrind).
    fn rendering(&self, scratch: &mut String) -> [Option<Text<'a>>; SLOTS] {
        scratch.clear();
        let (day, utc_time) = self.start_texts(scratch);
        let utc_date = utc_time.as_ref().and(day.clone());
        let mut integer = |n: Option<i32>, plus: bool| {
            n.map(|n| {
                written(scratch, |out| {
                    if n < 0 {
                        out.push('-');
                    } else if plus {
                        out.push('+');
                    }
                    digits(n.unsigned_abs(), 1, out);
                })
            })
        };
        let numbers = [
            integer(self.white_elo, false),
            integer(self.black_elo, false),
            integer(self.white_rating_diff, true),
            integer(self.black_rating_diff, true),
        ];
        let text = |value: Option<&'a str>| value.map(Text::Borrowed);
        let fixed = |value: &'static str| Some(Text::Borrowed(value));
        // Lichess writes `?` for an opening it does not name (its variant
        // games): its ECO and Opening tags are always there.
        let lichess_placeholder = |value: Option<&'a str>| {
            text(value).or_else(|| if self.lichess { fixed("?") } else { None })
        };
        let [white_elo, black_elo, white_rating_diff, black_rating_diff] = numbers;
        [
            // ROSTER
            text(self.event).or(fixed("?")),
            text(self.site).or(fixed("?")),
            day.map(Text::Written).or(fixed("????.??.??")),
            text(self.round).or(fixed(if self.lichess { "-" } else { "?" })),
            text(self.white).or(fixed("?")),
            text(self.black).or(fixed("?")),
            fixed(result_tag(self.result)),
            // TYPED
            utc_date.map(Text::Written),
            utc_time.map(Text::Written),
            white_elo.map(Text::Written),
            black_elo.map(Text::Written),
            white_rating_diff.map(Text::Written),
            black_rating_diff.map(Text::Written),
            text(self.white_title),
            text(self.black_title),
            variant_tag(self.variant).and_then(fixed),
            lichess_placeholder(self.eco),
            lichess_placeholder(self.opening),
            text(self.time_control),
            self.termination
                .and_then(|label| fixed(termination_tag(label))),
            text(self.start_fen),
            self.start_fen.and_then(|_| fixed("1")),
        ]
    }
}

/// A value of [`Columns::rendering`]: a column's text (or a fixed one), or
/// the bytes of the scratch buffer it was written in.
enum Text<'a> {
    Borrowed(&'a str),
    Written(Range<usize>),
}

impl<'a> Text<'a> {
    /// The value, `scratch` being the buffer it was rendered with.
    fn get<'s>(&'s self, scratch: &'s str) -> &'s str
    where
        'a: 's,
    {
        match self {
            Text::Borrowed(text) => text,
            Text::Written(at) => &scratch[at.clone()],
        }
    }
}

/// Appends what `write` writes to `out`: where it is in `out`.
fn written(out: &mut String, write: impl FnOnce(&mut String)) -> Range<usize> {
    let start = out.len();
    write(out);
    start..out.len()
}

/// A stored `games.tags` that does not say tags: a value that is neither
/// text nor an array of texts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    /// The key.
    pub name: String,
    /// Its value, as JSON.
    pub value: String,
}

impl fmt::Display for Unreadable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "tag {} holds {}, not text", self.name, self.value)
    }
}

/// Whether `name` is a tag a column holds (its stored values replace the
/// rendering's).
fn is_typed(name: &str) -> bool {
    slot(name).is_some()
}

/// The tags as [`written_tags`] writes them without a stored order: the
/// roster, the typed tags in the rendering's order, then the other names
/// in byte order (each name's values in turn). `rendered`: the names of
/// [`Columns::render`], in its order; `stored`: each name of `games.tags`
/// with its number of values.
fn default_order<'a>(
    rendered: impl Iterator<Item = &'static str>,
    stored: &[(&'a str, usize)],
) -> Vec<&'a str> {
    let count = |name: &str| stored.iter().find(|(n, _)| *n == name).map(|&(_, n)| n);
    // The rendering gives the typed names in TYPED's order, after the
    // roster: one walk along both, not a search of the rendering per name.
    let mut typed_rendered = rendered.skip(ROSTER.len()).peekable();
    let mut names: Vec<&str> = TYPED
        .iter()
        .copied()
        .filter(|name| typed_rendered.next_if(|r| r == name).is_some() || count(name).is_some())
        .flat_map(|name| std::iter::repeat_n(name, count(name).unwrap_or(1)))
        .collect();
    let mut others: Vec<(&str, usize)> = stored
        .iter()
        .copied()
        .filter(|(name, _)| !is_typed(name))
        .collect();
    others.sort_unstable_by(|a, b| a.0.cmp(b.0));
    for (name, values) in others {
        names.extend(std::iter::repeat_n(name, values));
    }
    names
}

/// The values of `games.tags` by name, in the map's order, without the
/// stored order.
struct StoredValues(Vec<(String, Vec<String>)>);

impl StoredValues {
    fn read(tags: &Map<String, Value>) -> Result<(Self, Option<Vec<String>>), Unreadable> {
        let texts = |name: &str, value: &Value| -> Result<Vec<String>, Unreadable> {
            let unreadable = || Unreadable {
                name: name.to_owned(),
                value: value.to_string(),
            };
            match value {
                Value::String(text) => Ok(vec![text.clone()]),
                Value::Array(values) => values
                    .iter()
                    .map(|v| v.as_str().map(str::to_owned).ok_or_else(unreadable))
                    .collect(),
                _ => Err(unreadable()),
            }
        };
        let mut values = Vec::with_capacity(tags.len());
        let mut order = None;
        for (name, value) in tags {
            if name == ORDER_KEY {
                order = Some(texts(name, value)?);
            } else {
                values.push((name.clone(), texts(name, value)?));
            }
        }
        Ok((Self(values), order))
    }

    fn get(&self, name: &str) -> Option<&[String]> {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_slice())
    }
}

/// The tags to write for a game with `columns` and `games.tags` `stored`:
/// the roster first, a stored value replacing the rendered one, then the
/// other tags in the stored order (else the rendering's, then the other
/// names in byte order). Every stored value is written, once.
pub fn written_tags(
    columns: &Columns<'_>,
    stored: &Map<String, Value>,
) -> Result<Vec<(String, String)>, Unreadable> {
    let rendered = columns.render();
    let (values, order) = StoredValues::read(stored)?;
    let rendered_value = |name: &str| {
        rendered
            .iter()
            .find(|(r, _)| *r == name)
            .map(|(_, v)| v.clone().into_owned())
    };
    let mut out = Vec::with_capacity(rendered.len() + values.0.len());
    for (name, _) in ROSTER {
        match values.get(name) {
            Some(stored) => out.extend(stored.iter().map(|v| (name.to_owned(), v.clone()))),
            None => out.extend(rendered_value(name).map(|v| (name.to_owned(), v))),
        }
    }
    let names: Vec<&str> = if let Some(order) = &order {
        order.iter().map(String::as_str).collect()
    } else {
        let counts: Vec<(&str, usize)> = values
            .0
            .iter()
            .map(|(n, v)| (n.as_str(), v.len()))
            .collect();
        default_order(rendered.iter().map(|&(name, _)| name), &counts)
    };
    // The next stored value of each name, in turn.
    let mut taken: Vec<usize> = vec![0; values.0.len()];
    for name in names {
        match values.0.iter().position(|(n, _)| n == name) {
            Some(i) => {
                if let Some(value) = values.0[i].1.get(taken[i]) {
                    out.push((name.to_owned(), value.clone()));
                    taken[i] += 1;
                }
            }
            None => out.extend(rendered_value(name).map(|v| (name.to_owned(), v))),
        }
    }
    // Nothing stored is left out, whatever the stored order says.
    for ((name, stored), &from) in values.0.iter().zip(&taken) {
        if !ROSTER.iter().any(|(roster, _)| roster == name) {
            out.extend(stored[from..].iter().map(|v| (name.clone(), v.clone())));
        }
    }
    Ok(out)
}

/// Adds a value of the tag `name` to `games.tags`: its text, or when the
/// name has values already, the array of them in file order.
pub(crate) fn push_value(map: &mut Map<String, Value>, name: &str, value: &str) {
    let value = Value::String(value.to_owned());
    match map.get_mut(name) {
        None => {
            map.insert(name.to_owned(), value);
        }
        Some(Value::Array(values)) => values.push(value),
        Some(single) => {
            let earlier = single.take();
            *single = Value::Array(vec![earlier, value]);
        }
    }
}

/// What `games.tags` keeps of a game read with [`Tags`] (file order): what
/// [`written_tags`] needs to give them back. Each name whose values are
/// not the rendering's single value keeps all its values (so a name is
/// never half rendered, half stored), a roster tag the game lacks keeps
/// python-chess's placeholder when the rendering would say more (except
/// `Result`, whose column comes from the movetext then), and the order of
/// the tags after the roster is kept when it is not the one
/// [`written_tags`] would write. A game whose tags are exactly its
/// columns' rendering, as a Lichess game's are, keeps nothing.
///
/// It says which tags, not their text: the replay (in parallel) decides,
/// without an allocation, and the game's own tags give the text when it is
/// written ([`StoredTags::json`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoredTags {
    /// By [`slot`]: the columns' tags whose values are all kept (bit
    /// `slot`). A tag no column holds is always kept.
    typed: u32,
    /// By place in [`ROSTER`]: the roster tags the game lacks whose
    /// placeholder is kept.
    placeholders: u8,
    /// Whether the names after the roster are kept in the order read.
    order: bool,
}

impl StoredTags {
    /// What `games.tags` keeps of `tags` read for a game whose columns are
    /// `columns`. One pass over the tags, each looked up by [`slot`].
    pub fn of(tags: &Tags, columns: &Columns<'_>) -> StoredTags {
        let mut scratch = String::with_capacity(64);
        let rendering = columns.rendering(&mut scratch);
        let rendered = |slot: usize| rendering[slot].as_ref().map(|text| text.get(&scratch));
        // By slot: how many tags of that name, and whether one's value is
        // not the rendering's.
        let mut count = [0_usize; SLOTS];
        let mut differs = 0_u32;
        // The order [`written_tags`] writes without a stored one: the
        // columns' tags in TYPED's order, then the others in byte order.
        let mut order = false;
        let mut last_typed = 0;
        let mut last_other: Option<&str> = None;
        for (name, value) in tags {
            if let Some(slot) = slot(name) {
                count[slot] += 1;
                if rendered(slot) != Some(value) {
                    differs |= 1 << slot;
                }
                if slot >= ROSTER.len() {
                    order |= last_other.is_some() || slot < last_typed;
                    last_typed = slot;
                }
            } else {
                order |= last_other.is_some_and(|last| last > name);
                last_other = Some(name);
            }
        }
        let mut stored = StoredTags::default();
        for (slot, &n) in count.iter().enumerate() {
            if n > 1 || (n == 1 && differs & (1 << slot) != 0) {
                stored.typed |= 1 << slot;
            }
            // A tag the rendering writes and the game lacks: only a stored
            // order (which leaves it out) gives the game back.
            if slot >= ROSTER.len() && n == 0 && rendering[slot].is_some() {
                order = true;
            }
        }
        for (at, (name, placeholder)) in ROSTER.iter().enumerate() {
            let says_more = rendered(at).is_some_and(|v| v != *placeholder);
            if count[at] == 0 && says_more && *name != "Result" {
                stored.placeholders |= 1 << at;
            }
        }
        stored.order = order;
        stored
    }

    /// Whether the tags called `name` are kept.
    fn keeps(self, name: &str) -> bool {
        slot(name).is_none_or(|slot| self.typed & (1 << slot) != 0)
    }

    /// `games.tags`: the values kept of `tags` (the tags [`StoredTags::of`]
    /// read), a name read more than once as an array of its values in file
    /// order; the placeholders kept; and under [`ORDER_KEY`] the names
    /// after the roster in the order read, when that order is kept.
    pub fn json(self, tags: &Tags) -> Map<String, Value> {
        let mut map = Map::new();
        for (name, value) in tags {
            if !self.keeps(name) {
                continue;
            }
            push_value(&mut map, name, value);
        }
        for (at, (name, placeholder)) in ROSTER.iter().enumerate() {
            if self.placeholders & (1 << at) != 0 {
                map.insert((*name).to_owned(), Value::String((*placeholder).to_owned()));
            }
        }
        if self.order {
            let names = tags
                .iter()
                .filter(|(name, _)| !ROSTER.iter().any(|(roster, _)| roster == name))
                .map(|(name, _)| Value::String(name.to_owned()))
                .collect();
            map.insert(ORDER_KEY.to_owned(), Value::Array(names));
        }
        map
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags(pairs: &[(&str, &str)]) -> Tags {
        pairs.iter().copied().collect()
    }

    fn owned(tags: &Tags) -> Vec<(String, String)> {
        tags.iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }

    /// What the import stores of `read`, and what the export writes back.
    fn round_trip(read: &Tags) -> (Map<String, Value>, Vec<(String, String)>) {
        let meta = GameMeta::from_tags(read);
        let variant = meta_variant(read);
        let columns = Columns::imported(&meta, variant, None, meta.result);
        let stored = StoredTags::of(read, &columns).json(read);
        let written = written_tags(&columns, &stored).expect("readable");
        (stored, written)
    }

    fn meta_variant(read: &Tags) -> GameVariant {
        read.first("Variant")
            .and_then(GameVariant::from_tag)
            .unwrap_or_default()
    }

    /// `read` as it must be written: the roster first (a missing one as
    /// python-chess's placeholder), then the others in the order read.
    fn faithful(read: &Tags) -> Vec<(String, String)> {
        let read = owned(read);
        let mut out = Vec::new();
        for (name, placeholder) in ROSTER {
            let values: Vec<_> = read.iter().filter(|(n, _)| n == name).cloned().collect();
            if values.is_empty() {
                out.push((name.to_owned(), placeholder.to_owned()));
            }
            out.extend(values);
        }
        out.extend(
            read.iter()
                .filter(|(n, _)| !ROSTER.iter().any(|(r, _)| r == n))
                .cloned(),
        );
        out
    }

    const LICHESS: &[(&str, &str)] = &[
        ("Event", "Rated Blitz game"),
        ("Site", "https://lichess.org/ENPo6ReH"),
        ("Date", "2025.05.01"),
        ("Round", "-"),
        ("White", "alanbrito4"),
        ("Black", "Meridyan"),
        ("Result", "0-1"),
        ("UTCDate", "2025.05.01"),
        ("UTCTime", "00:00:06"),
        ("WhiteElo", "1028"),
        ("BlackElo", "1132"),
        ("WhiteRatingDiff", "-5"),
        ("BlackRatingDiff", "+5"),
        ("BlackTitle", "BOT"),
        ("ECO", "C46"),
        ("Opening", "Three Knights Opening"),
        ("TimeControl", "300+3"),
        ("Termination", "Normal"),
    ];

    #[test]
    fn a_lichess_game_keeps_nothing_and_is_written_as_read() {
        let read = tags(LICHESS);
        let (stored, written) = round_trip(&read);
        assert_eq!(stored, Map::new());
        assert_eq!(written, owned(&read));
        // A variant game says `?` for its opening, as Lichess writes it.
        let mut variant = LICHESS.to_vec();
        variant.insert(14, ("Variant", "Atomic"));
        variant[15].1 = "?";
        variant[16].1 = "?";
        let variant = tags(&variant);
        let (stored, written) = round_trip(&variant);
        assert_eq!(stored, Map::new());
        assert_eq!(written, owned(&variant));
    }

    #[test]
    fn every_tag_is_written_once_with_its_value_in_the_order_read() {
        let cases: &[&[(&str, &str)]] = &[
            // Partial dates, `?` values, tags in TWIC's order.
            &[
                ("Event", "IBM Man-Machine"),
                ("Site", "01"),
                ("Date", "1997.??.??"),
                ("EventDate", "?"),
                ("Round", "?"),
                ("Result", "1-0"),
                ("White", "Garry Kasparov"),
                ("Black", "Deep Blue"),
                ("ECO", "A06"),
                ("WhiteElo", "?"),
                ("BlackElo", "?"),
                ("PlyCount", "89"),
            ],
            // Date and UTCDate differ; Round "-" off Lichess.
            &[
                ("Event", "E"),
                ("Date", "2024.01.02"),
                ("Round", "-"),
                ("Result", "*"),
                ("UTCDate", "2024.01.01"),
                ("UTCTime", "23:59:00"),
            ],
            // UTCTime at midnight, which the columns do not write.
            &[
                ("Date", "2024.01.01"),
                ("UTCDate", "2024.01.01"),
                ("UTCTime", "00:00:00"),
            ],
            // Values the columns hold in another form, names written twice.
            &[
                ("White", "First"),
                ("White", "Second"),
                ("WhiteElo", " 1500 "),
                ("BlackElo", "2700?"),
                ("Termination", "Adjudication"),
                ("Annotator", "a"),
                ("Variant", "fischerandom"),
                ("Annotator", "b"),
                ("TimeControl", "40/7200:3600"),
                ("Result", "1-0 (forfeit)"),
                ("Date", "????.??.??"),
            ],
            // A Lichess game without Date, Round or UTCTime.
            &[
                ("Site", "https://lichess.org/ENPo6ReH"),
                ("UTCDate", "2025.05.01"),
                ("WhiteElo", "1500"),
            ],
            &[],
        ];
        for case in cases {
            let read = tags(case);
            let (stored, written) = round_trip(&read);
            assert_eq!(written, faithful(&read), "stored {stored:?}");
        }
    }

    #[test]
    fn the_rendering_is_the_roster_then_the_typed_tags_in_order() {
        // default_order walks the rendering's typed names in TYPED's order.
        let columns = Columns {
            lichess: true,
            started_at: DateTime::from_timestamp(1_000_000_000, 0),
            white_elo: Some(1),
            black_elo: Some(2),
            white_rating_diff: Some(3),
            black_rating_diff: Some(4),
            white_title: Some("GM"),
            black_title: Some("IM"),
            variant: GameVariant::Atomic,
            time_control: Some("60+0"),
            termination: Some("normal"),
            start_fen: Some("8/8/8/8/8/8/8/K6k w - - 0 1"),
            ..Columns::default()
        };
        let names: Vec<&str> = columns.render().into_iter().map(|(name, _)| name).collect();
        let expected: Vec<&str> = ROSTER.iter().map(|(name, _)| *name).chain(TYPED).collect();
        assert_eq!(names, expected);
    }

    #[test]
    fn numbers_are_rendered_as_format_writes_them() {
        for n in [i32::MIN, -2850, -10, -1, 0, 1, 9, 10, 2850, i32::MAX] {
            let columns = Columns {
                white_elo: Some(n),
                black_elo: Some(n),
                white_rating_diff: Some(n),
                black_rating_diff: Some(n),
                ..Columns::default()
            };
            let rendered = columns.render();
            let value = |name: &str| {
                rendered
                    .iter()
                    .find(|(r, _)| *r == name)
                    .map(|(_, v)| v.to_string())
            };
            assert_eq!(value("WhiteElo"), Some(n.to_string()));
            assert_eq!(value("BlackElo"), Some(n.to_string()));
            assert_eq!(value("WhiteRatingDiff"), Some(format!("{n:+}")));
            assert_eq!(value("BlackRatingDiff"), Some(format!("{n:+}")));
        }
    }

    #[test]
    fn slots_are_the_places_in_the_roster_then_the_typed_tags() {
        let names = ROSTER.iter().map(|(name, _)| *name).chain(TYPED);
        for (at, name) in names.enumerate() {
            assert_eq!(slot(name), Some(at), "{name}");
        }
        for other in ["event", "GameNo", "", "]order", "FEN "] {
            assert_eq!(slot(other), None, "{other}");
        }
    }

    #[test]
    fn stored_tags_say_which_tags_and_json_gives_their_values() {
        // A tag no column holds, after the typed ones: kept, the order too
        // (written_tags would put GameNo last).
        let mut read = LICHESS.to_vec();
        read.insert(14, ("GameNo", "7"));
        read.push(("Annotator", "a"));
        read.push(("Annotator", "b"));
        let read = tags(&read);
        let meta = GameMeta::from_tags(&read);
        let columns = Columns::imported(&meta, GameVariant::Standard, None, meta.result);
        let stored = StoredTags::of(&read, &columns);
        assert_eq!(stored.typed, 0);
        assert_eq!(stored.placeholders, 0);
        assert!(stored.order);
        let json = Value::Object(stored.json(&read));
        let names: Vec<&str> = read
            .iter()
            .skip(ROSTER.len())
            .map(|(name, _)| name)
            .collect();
        assert_eq!(
            json,
            serde_json::json!({
                "GameNo": "7",
                "Annotator": ["a", "b"],
                ORDER_KEY: names,
            })
        );
        // A typed tag the columns hold in another form, a missing roster
        // tag: the value as read, the placeholder.
        let read = tags(&[
            ("Event", "E"),
            ("WhiteElo", " 1500 "),
            ("Date", "2024.01.02"),
        ]);
        let meta = GameMeta::from_tags(&read);
        let columns = Columns::imported(&meta, GameVariant::Standard, None, meta.result);
        let stored = StoredTags::of(&read, &columns);
        assert_eq!(stored.typed, 1 << slot("WhiteElo").expect("typed"));
        assert!(!stored.order);
        assert_eq!(
            Value::Object(stored.json(&read)),
            serde_json::json!({ "WhiteElo": " 1500 " })
        );
        let read = tags(&[("Event", "E")]);
        let columns = Columns {
            // 2001-09-09 at midnight: a Date, no UTCDate or UTCTime.
            started_at: DateTime::from_timestamp(999_993_600, 0),
            event: Some("E"),
            ..Columns::default()
        };
        assert_eq!(
            Value::Object(StoredTags::of(&read, &columns).json(&read)),
            serde_json::json!({ "Date": "????.??.??" })
        );
    }

    #[test]
    fn a_missing_result_is_the_columns() {
        // The column comes from the movetext then: `*` would be another game.
        let read = tags(&[("Event", "E")]);
        let meta = GameMeta::from_tags(&read);
        let columns = Columns::imported(&meta, GameVariant::Standard, None, Some(GameResult::Draw));
        let stored = StoredTags::of(&read, &columns);
        assert_eq!(stored, StoredTags::default());
        let stored = stored.json(&read);
        let written = written_tags(&columns, &stored).expect("readable");
        assert_eq!(written[6], ("Result".to_owned(), "1/2-1/2".to_owned()));
    }

    #[test]
    fn rows_of_earlier_versions_write_each_tag_once() {
        // Earlier versions kept a partial Date raw, without an order.
        let meta = GameMeta::from_tags(&tags(&[("Date", "1997.??.??"), ("PlyCount", "89")]));
        let columns = Columns::imported(
            &meta,
            GameVariant::Standard,
            None,
            Some(GameResult::WhiteWins),
        );
        let stored = meta.tags_json();
        let written = written_tags(&columns, &stored).expect("readable");
        let dates: Vec<_> = written.iter().filter(|(n, _)| n == "Date").collect();
        assert_eq!(dates, [&("Date".to_owned(), "1997.??.??".to_owned())]);
        assert!(written.contains(&("PlyCount".to_owned(), "89".to_owned())));
    }

    #[test]
    fn stored_values_that_are_not_text_are_refused() {
        let mut stored = Map::new();
        stored.insert("Annotator".into(), Value::Bool(true));
        let error = written_tags(&Columns::default(), &stored).expect_err("not text");
        assert_eq!(error.to_string(), "tag Annotator holds true, not text");
        // An order that leaves a stored value out loses nothing.
        let mut stored = Map::new();
        stored.insert("PlyCount".into(), Value::String("3".into()));
        stored.insert(ORDER_KEY.into(), Value::Array(vec![]));
        let written = written_tags(&Columns::default(), &stored).expect("readable");
        assert_eq!(
            written.last(),
            Some(&("PlyCount".to_owned(), "3".to_owned()))
        );
    }
}
