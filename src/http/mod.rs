//! `pgnload serve`: the explorer, the games of a player and single games
//! over HTTP, for programs that speak the Lichess explorer's API rather
//! than spawn the CLI. A second front end beside the command line, so it
//! lives in the binary like `cmd`: it parses requests and writes
//! responses, and everything it answers is the library's (`explorer`,
//! `query`, `export`), read as the matching command reads it.
//!
//! # Limits
//!
//! Each request that reads the database first takes one of
//! [`Limits::requests`] admissions, else it is refused at once with 503
//! and `Retry-After` (a full server says so rather than letting queues
//! grow); an admitted request then waits, in order, for one of the pool's
//! [`Limits::connections`] connections, up to [`Limits::wait`], else 503.
//! A request refused for its parameters is answered before either, and an
//! explorer answer kept in [`cache`] without either. Every statement is
//! bounded in time ([`Limits::query`], and [`Limits::wait`] for a lock),
//! and so are the client connections ([`server`]).

pub mod cache;
pub mod games;
pub mod lichess;
pub mod pool;
pub mod server;
pub mod socket;

use std::{sync::Arc, time::Duration};

use axum::{
    Router,
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
    routing::get,
};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_postgres::error::SqlState;
use tower_http::cors::{Any, CorsLayer};

use crate::{
    error::{Error, ErrorKind},
    explorer::answers::Everywhere,
    store::db::Target,
};

/// How much the server takes on at once.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Database connections in the pool: the requests answered at once.
    pub connections: u32,
    /// Requests admitted at once (answered or waiting for a connection);
    /// one more is refused with 503.
    pub requests: usize,
    /// How long an admitted request waits for a connection before 503
    /// (given to the pool), and a statement for a lock.
    pub wait: Duration,
    /// The longest a statement may run (`statement_timeout` of the pool's
    /// sessions, see [`pool::Manager`]).
    pub query: Duration,
}

/// What every handler shares: the pool, the admissions, and what the
/// explorer keeps between answers.
#[derive(Clone)]
pub struct Shared {
    pool: pool::Pool,
    admissions: Arc<Semaphore>,
    limits: Limits,
    /// The start positions' counts that price the explorer's walks.
    pub everywhere: Arc<Everywhere>,
    /// The explorer's answers kept.
    pub cache: Arc<cache::Cache>,
}

/// A request's hold on the database: its admission and its connection,
/// both given back when dropped.
pub struct Checkout {
    /// The connection.
    pub connection: pool::Connection,
    _admitted: OwnedSemaphorePermit,
}

impl Shared {
    /// The state of a server answering from `target` within `limits`,
    /// keeping explorer answers in `cache` (which `cache::keep_in_step`
    /// keeps in step with the database).
    pub fn new(target: Target, limits: Limits, cache: Arc<cache::Cache>) -> Shared {
        Shared {
            pool: pool::Pool::new(target, limits.connections, limits.wait, limits.query),
            admissions: Arc::new(Semaphore::new(limits.requests)),
            limits,
            everywhere: Arc::default(),
            cache,
        }
    }

    /// Admits the request and waits for a connection (see the module's
    /// "Limits").
    pub async fn checkout(&self) -> Result<Checkout, ApiError> {
        let admitted = Arc::clone(&self.admissions)
            .try_acquire_owned()
            .map_err(|_| {
                ApiError::unavailable(format!(
                    "the server is answering {} requests already; try again",
                    self.limits.requests
                ))
            })?;
        let connection = self.pool.checkout().await?;
        Ok(Checkout {
            connection,
            _admitted: admitted,
        })
    }
}

/// The routes, with CORS open to every origin (the answers are public
/// reads, as Lichess's are), a JSON 404 for any other path, and every
/// other error the framework answers (405, a path it cannot decode) made
/// JSON ([`json_errors`]). pgnload's own headers are exposed too: a
/// browser page on another origin reads only the headers CORS names, and
/// these say where an answer came from and what it left out.
pub fn router(shared: Shared) -> Router {
    Router::new()
        .route("/lichess", get(lichess::answer))
        .route("/game/{id}", get(games::game))
        .route("/api/games/user/{name}", get(games::of_player))
        .fallback(|| async { ApiError::not_found("no such endpoint".to_owned()) })
        .layer(axum::middleware::map_response(json_errors))
        .layer(
            CorsLayer::new()
                .allow_origin(Any)
                .allow_methods(Any)
                .expose_headers([lichess::X_CACHE, games::SKIPPED]),
        )
        .with_state(shared)
}

/// The most bytes of a framework's error text kept in its JSON form (they
/// are a line or two).
const MOST_ERROR_TEXT: usize = 4096;

/// An error answer that is not JSON (one of the framework's: 405 with an
/// empty body, a rejection's text) as the JSON error every error is, its
/// text (else the status's name) as the message, its other headers
/// (`Allow`) kept. hyper's own answers to requests it cannot read never
/// reach a middleware: [`socket`] rewrites those.
async fn json_errors(response: Response) -> Response {
    let status = response.status();
    let json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|value| value.as_bytes().starts_with(b"application/json"));
    if !(status.is_client_error() || status.is_server_error()) || json {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, MOST_ERROR_TEXT)
        .await
        .map(|bytes| String::from_utf8_lossy(&bytes).trim().to_owned())
        .unwrap_or_default();
    let message = if text.is_empty() {
        status.canonical_reason().unwrap_or("error").to_owned()
    } else {
        text
    };
    parts.headers.remove(header::CONTENT_LENGTH);
    // The JSON answer's own headers (its type, Retry-After) over the old.
    let (json, body) = ApiError { status, message }.into_response().into_parts();
    for (name, value) in &json.headers {
        parts.headers.insert(name, value.clone());
    }
    Response::from_parts(parts, body)
}

/// Writes `pgnload serve: TEXT` on stderr, each control character of
/// `text` escaped (`\u{a}`): what a client sent (a name, a path) reaches
/// the log only through here, so it can neither forge a line of its own
/// (a newline, then `pgnload serve: stopped`) nor drive a terminal.
pub fn log(text: &str) {
    stderr_line!("pgnload serve: {}", crate::cmd::printable(text));
}

/// The least time between two lines of a kind that a flood of requests
/// or connections can make ([`Throttled`], the connection limit's).
pub const SAID_EVERY: Duration = Duration::from_secs(10);

/// A kind of log line said at most once per [`SAID_EVERY`], with the
/// count of those left unsaid in between: what a flood of requests makes
/// (every answer 503 while the database is down) fills no disk.
#[derive(Default)]
pub struct Throttled(std::sync::Mutex<(Option<std::time::Instant>, u64)>);

impl Throttled {
    /// [`log`]s `text` unless a line was said less than [`SAID_EVERY`] ago
    /// (then it is counted, and said with the next line).
    pub fn log(&self, text: &str) {
        let mut state = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (last, unsaid) = &mut *state;
        if last.is_some_and(|at| at.elapsed() < SAID_EVERY) {
            *unsaid += 1;
            return;
        }
        if *unsaid > 0 {
            log(&format!(
                "{text} (and {unsaid} more since the last such line)"
            ));
        } else {
            log(text);
        }
        *last = Some(std::time::Instant::now());
        *unsaid = 0;
    }
}

/// An error answered as JSON, `{"error": "…"}`, with its HTTP status.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    /// 400: the request cannot be answered as asked; `message` says why.
    pub fn bad_request(message: String) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message,
        }
    }

    /// 404: what the request names does not exist.
    pub fn not_found(message: String) -> ApiError {
        ApiError {
            status: StatusCode::NOT_FOUND,
            message,
        }
    }

    /// 503: the server cannot answer now (busy, or its database is not
    /// reachable or not ready); the client may retry.
    pub fn unavailable(message: String) -> ApiError {
        ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message,
        }
    }
}

/// What a client is told of an error of the database or the machine:
/// why in general, never what the error says (it may name the data
/// directory, the `pg_ctl` command, the server's version or its log
/// lines), which goes to the server's log ([`UNAVAILABLE_LOG`]).
const DATABASE_UNAVAILABLE: &str =
    "the database is not available now (the server's log says why); try again";

/// The server's log of the errors it answers 503 for.
static UNAVAILABLE_LOG: std::sync::LazyLock<Throttled> =
    std::sync::LazyLock::new(Throttled::default);

/// A library error by its kind: bad input is the client's (400, its
/// message, which names what the client sent); the explorer not ready
/// (counters off, a bulk load unfinished: the library's own words, which
/// say what to wait for) and a database that is unreachable, busy, or
/// slower than the server's timeouts are temporary (503); the rest is ours
/// (500). Only the 400s and the explorer's state are said to the client as
/// they are: every other error is said in the server's log, and the client
/// is told its kind.
impl From<Error> for ApiError {
    fn from(error: Error) -> ApiError {
        let said = crate::error::report(&error);
        if let Error::Database { cause, .. } = &error
            && cause.code().is_some_and(|code| {
                [SqlState::QUERY_CANCELED, SqlState::LOCK_NOT_AVAILABLE].contains(code)
            })
        {
            UNAVAILABLE_LOG.log(&format!("503: {said}"));
            return ApiError::unavailable(
                "the database did not answer within the server's time limits (a bulk load's \
                 finish, a long statement); try again"
                    .to_owned(),
            );
        }
        match error.kind() {
            ErrorKind::Input => ApiError::bad_request(said),
            ErrorKind::Configuration | ErrorKind::Conflict => ApiError::unavailable(said),
            ErrorKind::Database { transient: true } | ErrorKind::System => {
                UNAVAILABLE_LOG.log(&format!("503: {said}"));
                ApiError::unavailable(DATABASE_UNAVAILABLE.to_owned())
            }
            _ => {
                log(&format!("error: {said}"));
                ApiError {
                    status: StatusCode::INTERNAL_SERVER_ERROR,
                    message: "internal error (the server's log says what)".to_owned(),
                }
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "error": self.message }).to_string();
        let mut response = (
            self.status,
            [(header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response();
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}
