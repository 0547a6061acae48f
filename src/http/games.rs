//! Games over HTTP: one game as PGN (`GET /game/{id}`, as `game show`
//! prints it) and the games of a player, newest first, shaped after
//! Lichess's `GET /api/games/user/{username}` (as `games --player`
//! lists them).

use std::collections::HashMap;

use axum::{
    extract::{
        Path, Query, State,
        rejection::{PathRejection, QueryRejection},
    },
    http::{HeaderMap, HeaderName, header},
    response::{IntoResponse, Response},
};

use super::{ApiError, Checkout, Shared};
use crate::{
    chess::model::GameRef,
    cmd::games::json_line,
    error::Error,
    export::{Unwritten, pgn},
    query::{
        filter::{FilterArgs, Side},
        games::{self, Order},
        unfinished_bulk_load,
    },
};

/// The PGN media type Lichess answers with.
const PGN: &str = "application/x-chess-pgn";
/// The NDJSON media type a client asks for with `Accept`, as at Lichess.
const NDJSON: &str = "application/x-ndjson";
/// The header counting the games an answer leaves out because PGN cannot
/// hold them (the reasons go to the server's stderr, as `games` prints them).
pub(super) const SKIPPED: HeaderName = HeaderName::from_static("x-pgnload-skipped-games");
/// Games listed when `max` is not given.
const DEFAULT_MAX: u32 = 100;
/// The most games one answer lists (it is built whole before it is sent).
const MOST: u32 = 10_000;

/// `GET /game/{id}`: the game as PGN. `id` is what `game show` takes (its
/// id, or `SOURCE:EXTERNAL_ID`) or a Lichess game id alone, as the
/// explorer's top games name their games.
pub async fn game(
    State(shared): State<Shared>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let Path(id) = path.map_err(|e| ApiError::bad_request(e.body_text()))?;
    if id.contains('\0') {
        return Err(ApiError::not_found(format!(
            "no game {id:?} in the database (no stored id holds a NUL byte)"
        )));
    }
    let game = id.parse::<GameRef>().or_else(|why| {
        if !id.is_empty() && id.bytes().all(|b| b.is_ascii_alphanumeric()) {
            Ok(GameRef::Key {
                source: "lichess".to_owned(),
                external_id: id.clone(),
            })
        } else {
            Err(ApiError::bad_request(why))
        }
    })?;
    let checkout = shared.checkout().await?;
    indexed(&checkout).await?;
    let found = games::find(&checkout.connection.database.client, &game).await?;
    drop(checkout);
    let (game, moves) =
        found.ok_or_else(|| ApiError::not_found(format!("no game {id} in the database")))?;
    let mut text = String::new();
    pgn::write_game(&game, &moves, &mut text)?;
    Ok(([(header::CONTENT_TYPE, PGN)], text).into_response())
}

/// `GET /api/games/user/{name}`: the player's games, newest first, as
/// PGN, or as JSON lines (those of `games --format json`) when `Accept`
/// asks for `application/x-ndjson`; games PGN cannot hold are left out and
/// counted in the `x-pgnload-skipped-games` header. Parameters: `max` (default 100, at
/// most 10000), `color` (`white` or `black`), `vs` (an opponent). An
/// unknown player is a 404.
pub async fn of_player(
    State(shared): State<Shared>,
    path: Result<Path<String>, PathRejection>,
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let Path(name) = path.map_err(|e| ApiError::bad_request(e.body_text()))?;
    if name.contains('\0') {
        return Err(ApiError::not_found(format!(
            "no player named {name:?} (no stored name holds a NUL byte)"
        )));
    }
    let Query(params) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let args = player_filter(name, &params)?;
    let ndjson = headers
        .get(header::ACCEPT)
        .and_then(|accept| accept.to_str().ok())
        .is_some_and(|accept| accept.contains(NDJSON));
    let mut checkout = shared.checkout().await?;
    indexed(&checkout).await?;
    let client = &mut checkout.connection.database.client;
    // An unknown name is the one `Input` error of resolving a filter
    // without a FEN: here it names a resource that does not exist.
    let filter = args.resolve(client).await.map_err(|e| match e {
        Error::Input { message, .. } => ApiError::not_found(message),
        other => other.into(),
    })?;
    let mut text = String::new();
    let mut unwritable = Unwritten::default();
    let listed = games::for_each(
        client,
        None,
        &filter,
        Order::Newest,
        !ndjson,
        |game, moves| {
            if ndjson {
                text.push_str(&json_line(game).to_string());
                text.push('\n');
            } else {
                let start = text.len();
                if unwritable
                    .skip(pgn::write_game(game, moves, &mut text))?
                    .is_none()
                {
                    text.truncate(start);
                }
            }
            Ok(())
        },
    );
    // `for_each` blocks its thread while another reads the cursor (see
    // `query::games::for_each_batch`): this worker's tasks, the
    // connection's among them, are handed to another worker meanwhile.
    tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(listed))?;
    drop(checkout);
    for line in unwritable.report() {
        super::log(&line);
    }
    let media = if ndjson { NDJSON } else { PGN };
    let mut response = ([(header::CONTENT_TYPE, media)], text).into_response();
    if unwritable.count > 0 {
        // Said to the client too: the list is short of these games.
        response
            .headers_mut()
            .insert(SKIPPED, axum::http::HeaderValue::from(unwritable.count));
    }
    Ok(response)
}

/// A 503 while a bulk load is unfinished: `moves` and the indexes of
/// `games` by player and date are dropped until its finish, so a game's
/// moves or a player's games would be read from whole tables, for minutes
/// on a large database, holding a lock the load's finish then waits for
/// (docs/serve.md, "During a bulk load"). One round trip, on the
/// connection the request then reads with.
async fn indexed(checkout: &Checkout) -> Result<(), ApiError> {
    match unfinished_bulk_load(&checkout.connection.database.client).await? {
        None => Ok(()),
        Some(load) => Err(ApiError::unavailable(format!(
            "bulk load #{load} is unfinished: until it finishes, games and moves have no \
             indexes to answer from; try again later"
        ))),
    }
}

/// The filter of a player's games that `params` ask for.
fn player_filter(name: String, params: &HashMap<String, String>) -> Result<FilterArgs, ApiError> {
    let max = match params.get("max") {
        None => DEFAULT_MAX,
        Some(text) => text
            .parse::<u32>()
            .ok()
            .filter(|&max| max <= MOST)
            .ok_or_else(|| {
                ApiError::bad_request(format!("max={text:?}: expected a count up to {MOST}"))
            })?,
    };
    let color = match params.get("color").map(String::as_str) {
        None => None,
        Some(text) => Some(
            Side::ALL
                .into_iter()
                .find(|side| side.name() == text)
                .ok_or_else(|| {
                    ApiError::bad_request(format!("color={text:?}: expected white or black"))
                })?,
        ),
    };
    let opponent = params.get("vs").cloned();
    if let Some(vs) = opponent.as_ref().filter(|vs| vs.contains('\0')) {
        return Err(ApiError::bad_request(format!(
            "vs={vs:?}: a name holds no NUL byte"
        )));
    }
    Ok(FilterArgs {
        player: Some(name),
        opponent,
        color,
        limit: Some(max),
        ..FilterArgs::default()
    })
}
