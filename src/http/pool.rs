//! The server's database connections: a bb8 pool whose every connection
//! is opened by `store::db::connect`, as every command opens its one, so
//! that `serve` reaches the same server the same way (connection string,
//! service, `PG*` variables, TLS modes, the embedded default and its
//! session).

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use super::ApiError;
use crate::{
    error::Error,
    explorer::answers::plan_once,
    store::db::{self, Database, Prepared, Statements, Target},
};

/// Opens connections to one target.
pub struct Manager {
    target: Target,
    /// The session settings of every connection ([`Manager::settings`]).
    settings: String,
}

impl Manager {
    /// What every connection sets first: generic plans ([`GENERIC_PLANS`]),
    /// and its time limits. `query` bounds every statement
    /// (`statement_timeout`): a bulk load's finish waits for the readers
    /// of the tables whose keys it adds again, and every reader that comes
    /// after waits for the finish, so one long read (an explorer question
    /// that began just as a load dropped its indexes ran 11–13 minutes)
    /// held up the load and the whole server; nothing the server asks
    /// takes more than a fraction of a second on an indexed database.
    /// `lock` bounds a wait for a lock (`lock_timeout`): a request behind
    /// such a finish is answered 503 then, not held. Its sessions are
    /// named `pgnload serve` (`application_name`) in `pg_stat_activity`.
    fn settings(query: Duration, lock: Duration) -> String {
        format!(
            "{GENERIC_PLANS}; SET statement_timeout = {}; SET lock_timeout = {}; \
             SET application_name = 'pgnload serve'",
            query.as_millis(),
            lock.as_millis()
        )
    }
}

/// What every connection of the pool runs first: its prepared statements
/// are planned once, not with every answer. PostgreSQL plans a statement
/// for its parameters (a custom plan) until it judges a plan for any
/// parameters (generic) no dearer, which for the explorer's statements it
/// never did: at a million games, serving new questions to 16 clients,
/// planning took 31 of PostgreSQL's 41 seconds (1–2 ms per statement,
/// the views' expressions), and the generic plans run as fast (each
/// statement's mean within 10%; p95 53 → 20 ms, 437 → 1,308 answers/s,
/// docs/serve.md). The explorer's SQL does not depend on the plan for its
/// choices: `explore` picks a scan or a walk itself, each its own
/// statement, written so that a generic plan reads its index (the tests
/// check the walk's).
const GENERIC_PLANS: &str = "SET plan_cache_mode = force_generic_plan";

/// A connection of the pool, with the statements prepared on it: the
/// explorer asks the same dozen questions with every answer, each one
/// round trip instead of two once prepared ([`Statements`] says why a
/// kept statement never gives a wrong answer after a schema change).
pub struct Pooled {
    /// The connection.
    pub database: Database,
    statements: Statements,
}

impl Pooled {
    /// The client with its prepared statements.
    pub fn prepared(&self) -> Prepared<'_> {
        Prepared::new(&self.database.client, &self.statements)
    }
}

impl bb8::ManageConnection for Manager {
    type Connection = Pooled;
    type Error = Error;

    async fn connect(&self) -> Result<Pooled, Error> {
        let database = db::connect(&self.target).await?;
        database
            .client
            .batch_execute(&self.settings)
            .await
            .map_err(db::db_err(
                "setting generic plans and time limits for the server's statements",
            ))?;
        let pooled = Pooled {
            database,
            statements: Statements::default(),
        };
        // Not a reason to refuse the connection: its other endpoints may
        // still answer, and the explorer's statements are prepared again
        // when asked (and fail then, with the request's error).
        if let Err(error) = plan_once(pooled.prepared()).await {
            super::log(&format!(
                "planning the explorer's statements: {}",
                crate::error::report(&error)
            ));
        }
        Ok(pooled)
    }

    /// Checked when lent, without a round trip: a connection the
    /// database closed while it was idle (a restart, a terminated session:
    /// the client notices at once) is replaced, not lent to fail its
    /// request.
    async fn is_valid(&self, pooled: &mut Pooled) -> Result<(), Error> {
        if pooled.database.client.is_closed() {
            Err(Error::Disconnected {
                context: "replacing a pooled connection the database closed".to_owned(),
            })
        } else {
            Ok(())
        }
    }

    fn has_broken(&self, pooled: &mut Pooled) -> bool {
        pooled.database.client.is_closed()
    }
}

/// Whether opening a connection failed last: bb8 hands the error to its
/// error sink, which says it in the server's log, and answers a waiting
/// request only that it timed out; the pool keeps whether that was
/// because the database could not be reached, which is what a client is
/// told ([`super::DATABASE_UNAVAILABLE`]), never the error itself (it may
/// name the data directory, `pg_ctl`, the server's log lines).
#[derive(Debug, Clone, Default)]
struct Failing(Arc<AtomicBool>);

impl bb8::ErrorSink<Error> for Failing {
    fn sink(&self, error: Error) {
        super::log(&format!("connecting: {}", crate::error::report(&error)));
        self.0.store(true, Ordering::SeqCst);
    }

    fn boxed_clone(&self) -> Box<dyn bb8::ErrorSink<Error>> {
        Box::new(self.clone())
    }
}

/// A connection of the pool, given back when dropped.
pub type Connection = bb8::PooledConnection<'static, Manager>;

/// The pool.
#[derive(Clone)]
pub struct Pool {
    pool: bb8::Pool<Manager>,
    failing: Failing,
}

impl Pool {
    /// A pool of `size` connections to `target`, opened from the start
    /// in the background (the first answers do not wait for them to open
    /// and plan; a database that is down is answered with 503 until it is
    /// back), lent within `wait` or not at all. A connection found closed
    /// when lent is replaced ([`Manager::is_valid`]); one lost during a
    /// request fails it with 503 and is replaced. Every connection's
    /// statements and lock waits are bounded by `query` and `wait`
    /// ([`Manager::settings`]).
    pub fn new(target: Target, size: u32, wait: Duration, query: Duration) -> Pool {
        let failing = Failing::default();
        let pool = bb8::Pool::builder()
            .max_size(size)
            .min_idle(Some(size))
            .connection_timeout(wait)
            .test_on_check_out(true)
            .error_sink(Box::new(failing.clone()))
            .build_unchecked(Manager {
                target,
                settings: Manager::settings(query, wait),
            });
        Pool { pool, failing }
    }

    /// A connection, waiting for one to be free or opened.
    pub async fn checkout(&self) -> Result<Connection, ApiError> {
        match self.pool.get_owned().await {
            Ok(connection) => {
                // Connected since: an old failure is no reason now.
                self.failing.0.store(false, Ordering::SeqCst);
                Ok(connection)
            }
            Err(bb8::RunError::User(error)) => Err(error.into()),
            Err(bb8::RunError::TimedOut) => {
                let why = if self.failing.0.load(Ordering::SeqCst) {
                    super::DATABASE_UNAVAILABLE
                } else {
                    "every connection is busy; try again"
                };
                Err(ApiError::unavailable(format!(
                    "no database connection in time: {why}"
                )))
            }
        }
    }
}
