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
//! explorer answer kept in [`cache`] without either.

pub mod cache;
pub mod games;
pub mod lichess;
pub mod pool;

use std::{sync::Arc, time::Duration};

use axum::{
    Router,
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
    routing::get,
};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
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
    /// (given to the pool).
    pub wait: Duration,
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
            pool: pool::Pool::new(target, limits.connections, limits.wait),
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
/// reads, as Lichess's are) and a JSON 404 for any other path. pgnload's
/// own headers are exposed too: a browser page on another origin reads
/// only the headers CORS names, and these say where an answer came from
/// and what it left out.
pub fn router(shared: Shared) -> Router {
    Router::new()
        .route("/lichess", get(lichess::answer))
        .route("/game/{id}", get(games::game))
        .route("/api/games/user/{name}", get(games::of_player))
        .fallback(|| async { ApiError::not_found("no such endpoint".to_owned()) })
        .layer(
            CorsLayer::new()
                .allow_origin(Any)
                .allow_methods(Any)
                .expose_headers([lichess::X_CACHE, games::SKIPPED]),
        )
        .with_state(shared)
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

/// A library error by its kind: bad input is the client's (400), a
/// database that is unreachable, busy or not ready to answer (explorer
/// off, a bulk load counting) is temporary (503), the rest is ours (500).
impl From<Error> for ApiError {
    fn from(error: Error) -> ApiError {
        let message = crate::error::report(&error);
        let status = match error.kind() {
            ErrorKind::Input => StatusCode::BAD_REQUEST,
            ErrorKind::Database { transient: true }
            | ErrorKind::System
            | ErrorKind::Configuration
            | ErrorKind::Conflict => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        if status == StatusCode::INTERNAL_SERVER_ERROR {
            stderr_line!("pgnload serve: error: {message}");
        }
        ApiError { status, message }
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
