//! The categories users filter games by, as the Lichess opening explorer
//! defines them: speed (from the clock), rating group (from the average
//! rating) and month.
//!
//! They exist once, here, so that the explorer counters kept by the import,
//! the `explore` and `games` filters, and the import's own scope options
//! put a game in the same category. Each has a stable text form (for the
//! command line and JSON) and a stable small-integer code (for the
//! database); both round-trip. Pure: nothing here knows SQL.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Datelike, Utc};

use crate::model::TimeControl;

/// Why a category's text was not understood; names the accepted values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{value:?} is not a {what} (expected {expected})")]
pub struct CategoryParseError {
    what: &'static str,
    value: String,
    expected: String,
}

impl CategoryParseError {
    /// `value` is not a `what`; `expected` lists what is.
    pub(crate) fn new(what: &'static str, value: &str, expected: String) -> CategoryParseError {
        CategoryParseError {
            what,
            value: value.to_owned(),
            expected,
        }
    }
}

/// How fast a game was played, from its clock as Lichess computes it: the
/// estimated duration is `initial + 40 × increment` seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Speed {
    /// Under 30 s estimated.
    UltraBullet,
    /// 30 s to under 3 min.
    Bullet,
    /// 3 min to under 8 min.
    Blitz,
    /// 8 min to under 25 min.
    Rapid,
    /// 25 min to under 6 h.
    Classical,
    /// 6 h and more, or no clock at all (Lichess counts a game without a
    /// clock as correspondence; so do other sources' games without a
    /// `TimeControl` pgnload can read, e.g. over-the-board `40/7200`).
    Correspondence,
}

impl Speed {
    /// Every speed, fastest first (also the order of their codes).
    pub const ALL: [Speed; 6] = [
        Speed::UltraBullet,
        Speed::Bullet,
        Speed::Blitz,
        Speed::Rapid,
        Speed::Classical,
        Speed::Correspondence,
    ];

    /// The upper bounds (exclusive) of the estimated duration in seconds of
    /// each speed but correspondence, in `ALL` order: what a query turns
    /// into ranges over `time_initial_s + 40 * time_increment_s`.
    pub const UPPER_BOUNDS_S: [i64; 5] = [30, 180, 480, 1500, 21600];

    /// The speed of a game with this clock (none: correspondence).
    pub fn from_clock(clock: Option<TimeControl>) -> Speed {
        let Some(clock) = clock else {
            return Speed::Correspondence;
        };
        let estimate = i64::from(clock.initial_s) + 40 * i64::from(clock.increment_s);
        Speed::ALL
            .into_iter()
            .zip(Speed::UPPER_BOUNDS_S)
            .find(|&(_, bound)| estimate < bound)
            .map_or(Speed::Correspondence, |(speed, _)| speed)
    }

    /// The best rating on the Lichess leaderboard of this speed, as the
    /// Lichess explorer fixes it (lila-openingexplorer, "as of
    /// 2024-07-27"; correspondence, without a leaderboard, 4000): it
    /// ranks a top game by how far its rating band is below this.
    pub fn highscore(self) -> i32 {
        match self {
            Speed::UltraBullet => 2644,
            Speed::Bullet => 3352,
            Speed::Blitz => 2974,
            Speed::Rapid => 2949,
            Speed::Classical => 2533,
            Speed::Correspondence => 4000,
        }
    }

    /// The Lichess API name (`ultraBullet`, `blitz`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Speed::UltraBullet => "ultraBullet",
            Speed::Bullet => "bullet",
            Speed::Blitz => "blitz",
            Speed::Rapid => "rapid",
            Speed::Classical => "classical",
            Speed::Correspondence => "correspondence",
        }
    }

    /// The database code: the position in `ALL` (0 … 5).
    pub fn code(self) -> i16 {
        match self {
            Speed::UltraBullet => 0,
            Speed::Bullet => 1,
            Speed::Blitz => 2,
            Speed::Rapid => 3,
            Speed::Classical => 4,
            Speed::Correspondence => 5,
        }
    }

    /// The speed stored as `code`; none for a code no version wrote.
    pub fn from_code(code: i16) -> Option<Speed> {
        usize::try_from(code)
            .ok()
            .and_then(|index| Speed::ALL.get(index).copied())
    }
}

impl fmt::Display for Speed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Speed {
    type Err = CategoryParseError;

    /// The Lichess name, case-insensitively (`ultrabullet` is accepted).
    fn from_str(s: &str) -> Result<Speed, CategoryParseError> {
        Speed::ALL
            .into_iter()
            .find(|speed| speed.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                let names: Vec<&str> = Speed::ALL.iter().map(|speed| speed.as_str()).collect();
                CategoryParseError::new("speed", s, names.join(", "))
            })
    }
}

/// The band of a game's average rating, as the Lichess explorer groups
/// games: named by its lower bound (0, 1000, 1200, …, 2500).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RatingGroup {
    lower_bound: i16,
}

impl RatingGroup {
    /// The lower bounds of the bands, ascending; the last band is open.
    pub const LOWER_BOUNDS: [i16; 9] = [0, 1000, 1200, 1400, 1600, 1800, 2000, 2200, 2500];

    /// Every band, lowest first.
    pub fn all() -> impl Iterator<Item = RatingGroup> {
        RatingGroup::LOWER_BOUNDS
            .into_iter()
            .map(|lower_bound| RatingGroup { lower_bound })
    }

    /// The band of an average rating; below 1000 (negative included, as a
    /// tag may say) is the lowest band, whose bound is 0.
    pub fn from_average(average: i64) -> RatingGroup {
        let lower_bound = RatingGroup::LOWER_BOUNDS
            .into_iter()
            .rev()
            .find(|&bound| average >= i64::from(bound))
            .unwrap_or(0);
        RatingGroup { lower_bound }
    }

    /// The band of a game: the average of both players' ratings (rounded
    /// down, as Lichess does), none unless both are known.
    pub fn of_game(white_elo: Option<i32>, black_elo: Option<i32>) -> Option<RatingGroup> {
        let (white, black) = (white_elo?, black_elo?);
        Some(RatingGroup::from_average(
            (i64::from(white) + i64::from(black)).div_euclid(2),
        ))
    }

    /// The band's lower bound, also its database code and its name.
    pub fn lower_bound(self) -> i16 {
        self.lower_bound
    }

    /// The band stored as `code`; none for a code that is not a bound.
    pub fn from_code(code: i16) -> Option<RatingGroup> {
        RatingGroup::LOWER_BOUNDS
            .contains(&code)
            .then_some(RatingGroup { lower_bound: code })
    }
}

impl fmt::Display for RatingGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.lower_bound)
    }
}

impl FromStr for RatingGroup {
    type Err = CategoryParseError;

    /// A band's lower bound exactly (`1600`), as the Lichess API's
    /// `ratings=` takes them: another number names no band.
    fn from_str(s: &str) -> Result<RatingGroup, CategoryParseError> {
        s.parse::<i16>()
            .ok()
            .and_then(RatingGroup::from_code)
            .ok_or_else(|| {
                let bounds: Vec<String> = RatingGroup::LOWER_BOUNDS
                    .iter()
                    .map(i16::to_string)
                    .collect();
                CategoryParseError::new("rating group", s, bounds.join(", "))
            })
    }
}

/// A calendar month (`YYYY-MM`), the time unit of the explorer counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Month {
    year: u16,
    month: u8,
}

impl Month {
    /// The month `year-month`; none outside years 0–9999 or months 1–12.
    pub fn new(year: i32, month: u32) -> Option<Month> {
        let year = u16::try_from(year).ok().filter(|&year| year <= 9999)?;
        let month = u8::try_from(month)
            .ok()
            .filter(|month| (1..=12).contains(month))?;
        Some(Month { year, month })
    }

    /// The month a game started in (its UTC date); none for a year
    /// outside 0–9999.
    pub fn of_time(time: DateTime<Utc>) -> Option<Month> {
        Month::new(time.year(), time.month())
    }

    /// The year.
    pub fn year(self) -> u16 {
        self.year
    }

    /// The month of the year, 1–12.
    pub fn month(self) -> u8 {
        self.month
    }

    /// The database code: months since January of year 0
    /// (`year * 12 + month - 1`), so that codes order like months.
    pub fn code(self) -> i32 {
        i32::from(self.year) * 12 + i32::from(self.month) - 1
    }

    /// The month stored as `code`; none for a code outside years 0–9999.
    pub fn from_code(code: i32) -> Option<Month> {
        let month = u32::try_from(code.rem_euclid(12) + 1).ok()?;
        Month::new(code.div_euclid(12), month)
    }
}

impl fmt::Display for Month {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04}-{:02}", self.year, self.month)
    }
}

impl FromStr for Month {
    type Err = CategoryParseError;

    /// `YYYY-MM`, four digits and two.
    fn from_str(s: &str) -> Result<Month, CategoryParseError> {
        let invalid = || CategoryParseError::new("month", s, "YYYY-MM, e.g. 2024-01".to_owned());
        let (year, month) = s.split_once('-').ok_or_else(invalid)?;
        let digits =
            |part: &str, len: usize| part.len() == len && part.bytes().all(|b| b.is_ascii_digit());
        if !digits(year, 4) || !digits(month, 2) {
            return Err(invalid());
        }
        let year = year.parse().map_err(|_| invalid())?;
        let month = month.parse().map_err(|_| invalid())?;
        Month::new(year, month).ok_or_else(invalid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[expect(
        clippy::unnecessary_wraps,
        reason = "Speed::from_clock takes the Option a game's tags give"
    )]
    fn clock(initial_s: i32, increment_s: i32) -> Option<TimeControl> {
        Some(TimeControl {
            initial_s,
            increment_s,
        })
    }

    #[test]
    fn speeds_follow_the_lichess_estimate() {
        assert_eq!(Speed::from_clock(clock(15, 0)), Speed::UltraBullet);
        assert_eq!(Speed::from_clock(clock(29, 0)), Speed::UltraBullet);
        assert_eq!(Speed::from_clock(clock(30, 0)), Speed::Bullet);
        assert_eq!(Speed::from_clock(clock(60, 1)), Speed::Bullet);
        assert_eq!(Speed::from_clock(clock(120, 1)), Speed::Bullet);
        assert_eq!(Speed::from_clock(clock(180, 0)), Speed::Blitz);
        assert_eq!(Speed::from_clock(clock(300, 3)), Speed::Blitz);
        assert_eq!(Speed::from_clock(clock(480, 0)), Speed::Rapid);
        assert_eq!(Speed::from_clock(clock(600, 5)), Speed::Rapid);
        assert_eq!(Speed::from_clock(clock(900, 10)), Speed::Rapid);
        assert_eq!(Speed::from_clock(clock(1500, 0)), Speed::Classical);
        assert_eq!(Speed::from_clock(clock(1800, 20)), Speed::Classical);
        assert_eq!(Speed::from_clock(clock(21600, 0)), Speed::Correspondence);
        assert_eq!(Speed::from_clock(None), Speed::Correspondence);
        // No overflow for absurd tags.
        assert_eq!(
            Speed::from_clock(clock(i32::MAX, i32::MAX)),
            Speed::Correspondence
        );
    }

    #[test]
    fn speed_names_and_codes_round_trip() {
        for speed in Speed::ALL {
            assert_eq!(speed.to_string().parse::<Speed>(), Ok(speed));
            assert_eq!(Speed::from_code(speed.code()), Some(speed));
        }
        assert_eq!("ULTRABULLET".parse::<Speed>(), Ok(Speed::UltraBullet));
        assert!("fast".parse::<Speed>().is_err());
        assert_eq!(Speed::from_code(6), None);
        assert_eq!(Speed::from_code(-1), None);
    }

    #[test]
    fn rating_groups_are_the_lichess_bands() {
        let group = |w, b| RatingGroup::of_game(Some(w), Some(b)).map(RatingGroup::lower_bound);
        assert_eq!(group(800, 900), Some(0));
        assert_eq!(group(999, 1000), Some(0));
        assert_eq!(group(1000, 1001), Some(1000));
        assert_eq!(group(1500, 1700), Some(1600));
        assert_eq!(group(2499, 2500), Some(2200));
        assert_eq!(group(3000, 3100), Some(2500));
        assert_eq!(group(-50, -10), Some(0));
        assert_eq!(RatingGroup::of_game(Some(1500), None), None);
        assert_eq!(RatingGroup::of_game(None, None), None);
        assert!("1500".parse::<RatingGroup>().is_err());
        assert!("x".parse::<RatingGroup>().is_err());
        assert_eq!(RatingGroup::from_code(1100), None);
    }

    #[test]
    fn months_parse_strictly() {
        assert_eq!("2024-01".parse::<Month>().map(Month::code), Ok(2024 * 12));
        for bad in [
            "2024-13", "2024-00", "2024-1", "24-01", "2024/01", "+024-01", "",
        ] {
            assert!(bad.parse::<Month>().is_err(), "{bad}");
        }
        assert_eq!(Month::new(10_000, 1), None);
        assert_eq!(Month::new(-1, 1), None);
    }

    proptest! {
        #[test]
        fn rating_groups_round_trip(average in -5000i64..5000) {
            let group = RatingGroup::from_average(average);
            prop_assert_eq!(group.to_string().parse::<RatingGroup>(), Ok(group));
            prop_assert_eq!(RatingGroup::from_code(group.lower_bound()), Some(group));
            prop_assert!(average < 1000 || average >= i64::from(group.lower_bound()));
        }

        #[test]
        fn months_round_trip(year in 0i32..=9999, month in 1u32..=12) {
            let value = Month::new(year, month).expect("in range by construction");
            prop_assert_eq!(value.to_string().parse::<Month>(), Ok(value));
            prop_assert_eq!(Month::from_code(value.code()), Some(value));
        }

        #[test]
        fn month_codes_order_like_months(a in 0i32..120_000, b in 0i32..120_000) {
            let (x, y) = (Month::from_code(a), Month::from_code(b));
            prop_assert_eq!(x.cmp(&y), a.cmp(&b));
        }
    }
}
