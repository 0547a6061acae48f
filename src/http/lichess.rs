//! `GET /lichess`: the Lichess opening explorer's endpoint, its query
//! parameters read as lila-openingexplorer reads them (`src/api/query.rs`
//! there), answered by the library's `explorer::answers::explore` and
//! serialized exactly as `pgnload explore --json` prints it, or from the
//! answers kept ([`super::cache`]); the `X-Cache` header says which.
//!
//! Where Lichess's reading and ours differ, and why:
//! * `variant=chess960` is our Chess960 counters (Lichess reads it as
//!   standard chess), so a Chess960 question needs its `fen`.
//! * `ratings` values name the band holding that rating, as Lichess's do;
//!   ours has no band above 2500 (Lichess's 2800 and 3200 are in it).
//! * `topGames` is at most 4, Lichess's cap; more is not an error, as
//!   there. `recentGames` is at most 8, less the top games found, as
//!   Lichess lists them (8 by default).
//! * `since` after `until` is a 400, as `explore` says; `history=true` is
//!   a 400 (no monthly history is kept); unknown parameters are ignored.

use std::collections::HashMap;

use axum::{
    body::Bytes,
    extract::{Query, State, rejection::QueryRejection},
    http::{HeaderMap, HeaderName, header},
    response::{IntoResponse, Response},
};

use super::{
    ApiError, Shared,
    cache::{Lookup, Question},
};
use crate::{
    chess::{
        category::{Month, RatingGroup, Speed},
        model::GameVariant,
    },
    explorer::answers::{Filter, LISTED_MAX, Reached, Request, explore_reached, reached},
};

/// Lichess's most top games (`MAX_TOP_GAMES`).
const MAX_TOP_GAMES: usize = 4;
/// Lichess's default of `moves`.
const DEFAULT_MOVES: usize = 12;

/// The header saying where an answer came from: `hit` (kept), `miss`
/// (asked of the database, then kept), `bypass` (asked, not kept: the
/// cache is off or not following the database's changes).
pub(super) const X_CACHE: HeaderName = HeaderName::from_static("x-cache");

/// `GET /lichess`. A request with `Cache-Control: no-cache` is answered
/// from the database (and the answer kept): a client that must see its
/// own write at once asks so (docs/serve.md, "Cache").
pub async fn answer(
    State(shared): State<Shared>,
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let Query(params) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let request = &request(&params)?;
    // Bad positions and moves are refused before the cache or the
    // database is asked (errors are never kept).
    let at = reached(request.variant, request.fen.as_deref(), &request.play)?;
    let question = Question::new(request, at.fen.clone(), at.opening.clone());
    let fresh = headers
        .get_all(header::CACHE_CONTROL)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .any(|value| {
            value
                .split(',')
                .any(|directive| directive.trim().eq_ignore_ascii_case("no-cache"))
        });
    // The same question under way is waited for as long as a connection
    // would be.
    let lookup = shared.cache.lookup(question, fresh, shared.limits.wait);
    let (body, found) = match lookup.await {
        Lookup::Hit(body) => (body, "hit"),
        Lookup::Miss(ticket) => {
            let body = ask(&shared, request, at).await?;
            shared.cache.keep(ticket, body.clone());
            (body, "miss")
        }
        Lookup::Bypass => (ask(&shared, request, at).await?, "bypass"),
    };
    Ok((
        [(header::CONTENT_TYPE, "application/json"), (X_CACHE, found)],
        body,
    )
        .into_response())
}

/// `request`'s answer from the database, as JSON; `at`: the position it
/// reaches, found before.
async fn ask(shared: &Shared, request: &Request, at: Reached) -> Result<Bytes, ApiError> {
    let checkout = shared.checkout().await?;
    // `explore_reached` checks that the counters are usable with its first
    // question (`explorer::answers::find`).
    let answer = explore_reached(
        checkout.connection.prepared(),
        request,
        at,
        &shared.everywhere,
    )
    .await?;
    drop(checkout);
    let body = serde_json::to_vec(&answer)
        .map_err(|e| crate::Error::bug_from("serializing the explorer answer", e))?;
    Ok(Bytes::from(body))
}

/// The request `params` ask, every value checked; a bad one is a 400
/// naming the parameter.
pub fn request(params: &HashMap<String, String>) -> Result<Request, ApiError> {
    let param = |name: &str| params.get(name).map(String::as_str);
    let variant = match param("variant") {
        None => GameVariant::Standard,
        Some(text) => text.parse().map_err(|e| invalid("variant", text, &e))?,
    };
    let since = param("since")
        .map(|text| month("since", text))
        .transpose()?;
    let until = param("until")
        .map(|text| month("until", text))
        .transpose()?;
    if let (Some(since), Some(until)) = (since, until)
        && since > until
    {
        return Err(ApiError::bad_request(format!(
            "since {since} is after until {until}: no month is in both"
        )));
    }
    if let Some(text) = param("history")
        && ["true", "True", "on", "1", "yes"].contains(&text)
    {
        return Err(ApiError::bad_request(
            "history: the monthly history is not kept by pgnload".to_owned(),
        ));
    }
    let top_games = count(param("topGames"), "topGames", MAX_TOP_GAMES)?.min(MAX_TOP_GAMES);
    // Lichess's default is as many as it lists: the explorer then keeps
    // what the top games leave of them.
    let recent_games = count(param("recentGames"), "recentGames", LISTED_MAX)?.min(LISTED_MAX);
    Ok(Request {
        variant,
        fen: param("fen").map(str::to_owned),
        play: list(param("play")).map(str::to_owned).collect(),
        filter: Filter {
            speeds: list(param("speeds"))
                .map(|text| {
                    text.parse::<Speed>()
                        .map_err(|e| invalid("speeds", text, &e))
                })
                .collect::<Result<_, _>>()?,
            ratings: list(param("ratings"))
                .map(rating_group)
                .collect::<Result<_, _>>()?,
            since,
            until,
        },
        moves: count(param("moves"), "moves", DEFAULT_MOVES)?,
        top_games: u32::try_from(top_games).expect("at most MAX_TOP_GAMES, a small number"),
        recent_games: u32::try_from(recent_games).expect("at most LISTED_MAX, a small number"),
    })
}

/// A 400 for parameter `name`'s value `text`, saying why.
fn invalid(name: &str, text: &str, why: &dyn std::fmt::Display) -> ApiError {
    ApiError::bad_request(format!("{name}={text:?}: {why}"))
}

/// The items of a comma-separated list; none for an absent or empty one.
fn list(text: Option<&str>) -> impl Iterator<Item = &str> {
    text.unwrap_or_default()
        .split(',')
        .filter(|item| !item.is_empty())
}

/// A count (`moves`, `topGames`, `recentGames`): a non-negative integer,
/// else `default` when absent.
fn count(text: Option<&str>, name: &str, default: usize) -> Result<usize, ApiError> {
    text.map_or(Ok(default), |text| {
        text.parse()
            .map_err(|e| invalid(name, text, &format!("not a count: {e}")))
    })
}

/// A `ratings` item as Lichess reads it: a rating (0–65535), naming the
/// band that holds it.
fn rating_group(text: &str) -> Result<RatingGroup, ApiError> {
    text.parse::<u16>()
        .map(|rating| RatingGroup::from_average(i64::from(rating)))
        .map_err(|e| invalid("ratings", text, &format!("not a rating: {e}")))
}

/// A month as Lichess reads `since` and `until`: year and month joined by
/// `-` or `/`, the month 1–12 (`2024-1` too), the year 1952–3000.
fn month(name: &str, text: &str) -> Result<Month, ApiError> {
    let bad = || {
        invalid(
            name,
            text,
            &"expected a month YYYY-MM from 1952-01 to 3000-12",
        )
    };
    let (year, month) = text.split_once(['-', '/']).ok_or_else(bad)?;
    let year: u16 = year.parse().map_err(|_| bad())?;
    let month: u32 = month.parse().map_err(|_| bad())?;
    if !(1952..=3000).contains(&year) {
        return Err(bad());
    }
    Month::new(i32::from(year), month).ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(pairs: &[(&str, &str)]) -> Result<Request, ApiError> {
        request(
            &pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        )
    }

    #[test]
    fn defaults_are_lichess_defaults() {
        let r = asked(&[]).expect("no parameter is needed");
        assert_eq!(r.variant, GameVariant::Standard);
        assert_eq!((r.moves, r.top_games), (12, 4));
        assert!(r.fen.is_none() && r.play.is_empty());
        assert_eq!(r.filter, Filter::default());
    }

    #[test]
    fn values_are_read_as_lichess_reads_them() {
        let r = asked(&[
            ("variant", "kingOfTheHill"),
            ("play", "e2e4,e7e5"),
            ("speeds", "blitz,ultraBullet"),
            ("ratings", "1500,2800"),
            ("since", "2013/1"),
            ("until", "2024-02"),
            ("moves", "3"),
            ("topGames", "9"),
            ("recentGames", "9"),
        ])
        .expect("valid");
        assert_eq!(r.variant, GameVariant::KingOfTheHill);
        assert_eq!(r.play, ["e2e4", "e7e5"]);
        assert_eq!(r.filter.speeds, [Speed::Blitz, Speed::UltraBullet]);
        let bands: Vec<i16> = r.filter.ratings.iter().map(|g| g.lower_bound()).collect();
        assert_eq!(bands, [1400, 2500]);
        assert_eq!(r.filter.since, Month::new(2013, 1));
        assert_eq!(r.filter.until, Month::new(2024, 2));
        assert_eq!((r.moves, r.top_games), (3, 4));
        assert_eq!(asked(&[("topGames", "1")]).expect("valid").top_games, 1);
    }

    #[test]
    fn bad_values_name_their_parameter() {
        for (name, value) in [
            ("variant", "chess2"),
            ("speeds", "blitz,slow"),
            ("ratings", "-5"),
            ("since", "2024-13"),
            ("until", "1900-01"),
            ("moves", "many"),
            ("topGames", "-1"),
            ("recentGames", "x"),
        ] {
            let error = asked(&[(name, value)]).expect_err(value);
            assert_eq!(error.status, axum::http::StatusCode::BAD_REQUEST);
            assert!(error.message.starts_with(name), "{}", error.message);
        }
        let error = asked(&[("since", "2024-02"), ("until", "2024-01")]).expect_err("order");
        assert!(error.message.contains("after"), "{}", error.message);
        assert!(asked(&[("history", "true")]).is_err());
        assert!(asked(&[("history", "false")]).is_ok());
    }
}
