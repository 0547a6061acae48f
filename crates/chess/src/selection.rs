//! Which games: the criteria that `games`, `export`, `explore` and the
//! import scope have in common (speeds, variants, a period of UTC days, a
//! rating floor), declared once so that each reads them the same way and
//! a new criterion is added in one place.
//!
//! Each user decides what a criterion means against its data: the import
//! against a replayed game ([`crate::scope::in_scope`]), `games` and
//! `export` in SQL over the stored games, the explorer over its counters
//! (which know months, not days). A user that cannot serve a criterion
//! refuses it itself, saying why. Pure: no SQL, no command line.

use std::fmt;

use chrono::NaiveDate;

use crate::{
    category::{Month, Speed},
    model::GameVariant,
};

/// Which games, by the criteria every command shares. The default selects
/// every game.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    /// Games of these speeds (empty: all), as [`Speed::from_clock`]
    /// computes them (no readable clock: correspondence).
    pub speeds: Vec<Speed>,
    /// Games of these variants (empty: all).
    pub variants: Vec<GameVariant>,
    /// Games played on or after this UTC day.
    pub since: Option<NaiveDate>,
    /// Games played on or before this UTC day.
    pub until: Option<NaiveDate>,
    /// Games where BOTH players are rated at least this (the Lichess
    /// explorer's rating bands use both ratings); a game missing either
    /// rating is left out. Ratings are never negative, hence `u16`.
    pub min_rating: Option<u16>,
}

/// A period whose first day is after its last: it selects nothing, which
/// is a mistake rather than a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DatesOutOfOrder {
    /// The first day asked for.
    pub since: NaiveDate,
    /// The last day asked for, before `since`.
    pub until: NaiveDate,
}

impl fmt::Display for DatesOutOfOrder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "since {} is after until {}", self.since, self.until)
    }
}

impl Selection {
    /// Refuses a period that selects no day (since after until).
    pub fn check_dates(&self) -> Result<(), DatesOutOfOrder> {
        match (self.since, self.until) {
            (Some(since), Some(until)) if since > until => Err(DatesOutOfOrder { since, until }),
            _ => Ok(()),
        }
    }
}

/// The first day of a period as `--since` and the config file's `since`
/// take it: a day (`YYYY-MM-DD`), or a month (`YYYY-MM`) from its first
/// day, so that `--since 2024-05` means the same to `games`, `export`,
/// `import` and `explore` (whose counters know months only).
pub fn parse_since(text: &str) -> Result<NaiveDate, String> {
    day_or_month(text, |month| month)
}

/// The last day of a period as `--until` and `until` take it: a day
/// (`YYYY-MM-DD`), or a month (`YYYY-MM`) to its last day.
pub fn parse_until(text: &str) -> Result<NaiveDate, String> {
    day_or_month(text, |first| {
        first
            .checked_add_months(chrono::Months::new(1))
            .and_then(|next| next.pred_opt())
            .unwrap_or(NaiveDate::MAX)
    })
}

/// `text` as a day, or as a month whose first day `day` moves.
fn day_or_month(text: &str, day: impl Fn(NaiveDate) -> NaiveDate) -> Result<NaiveDate, String> {
    if let Ok(month) = text.parse::<Month>()
        && let Some(first) = NaiveDate::from_ymd_opt(month.year().into(), month.month().into(), 1)
    {
        return Ok(day(first));
    }
    NaiveDate::parse_from_str(text, "%Y-%m-%d")
        .map_err(|e| format!("{text:?} is not a day as YYYY-MM-DD nor a month as YYYY-MM: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_period_must_hold_a_day() {
        let day = |s| parse_since(s).expect("a day");
        let period = |since, until| Selection {
            since: Some(day(since)),
            until: Some(day(until)),
            ..Selection::default()
        };
        assert_eq!(period("2024-03-05", "2024-03-05").check_dates(), Ok(()));
        assert_eq!(
            period("2024-03-06", "2024-03-05")
                .check_dates()
                .map_err(|e| e.to_string()),
            Err("since 2024-03-06 is after until 2024-03-05".to_owned())
        );
        assert_eq!(Selection::default().check_dates(), Ok(()));
        assert!(parse_since("2024-02-30").is_err());
    }

    #[test]
    fn a_month_is_a_period_of_days() {
        let day = |s| parse_since(s).expect("a day");
        assert_eq!(parse_since("2024-02"), Ok(day("2024-02-01")));
        assert_eq!(parse_until("2024-02"), Ok(day("2024-02-29")));
        assert_eq!(parse_until("2023-12"), Ok(day("2023-12-31")));
        assert_eq!(parse_since("2024-02-10"), Ok(day("2024-02-10")));
        assert_eq!(parse_until("2024-02-10"), Ok(day("2024-02-10")));
        for bad in ["2024-13", "2024-02-30", "2024", "24-02", ""] {
            assert!(parse_since(bad).is_err(), "{bad:?}");
            assert!(parse_until(bad).is_err(), "{bad:?}");
        }
    }
}
