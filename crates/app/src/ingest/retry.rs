//! The retry policy of the import: a transient database failure (a server
//! restarting, `too_many_connections`, a terminated session) is retried
//! with exponential backoff for a bounded time, replacing a dropped
//! connection where the caller can re-read what it needs.
//!
//! It decides by the error's kind, as the one policy table says
//! ([`crate::error::ErrorKind::policy`]), never by its text, and must not
//! retry what a retry cannot fix (a conflict, bad input, a bug): those end
//! the step at once.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use crate::{
    error::Error,
    ingest::{
        report::{Notice, Reporter},
        writer::prepare_connection,
    },
    store::db::{self, Database, Target},
};

/// How often a wait looks at the interrupt counter: a signal ends it within
/// this time.
const INTERRUPT_POLL: Duration = Duration::from_millis(50);

/// Bounded retrying of transient database errors: exponential backoff
/// until `retry_seconds` have passed since the first failure, ended at
/// once by the run's first interrupt.
pub(crate) struct Retry {
    deadline: Instant,
    attempt: u32,
    /// The run's interrupt counter (Ctrl-C, SIGTERM).
    interrupts: Arc<AtomicUsize>,
}

impl Retry {
    /// Retries for `seconds` from now, unless `interrupts` becomes non-zero.
    pub(crate) fn new(seconds: u64, interrupts: &Arc<AtomicUsize>) -> Retry {
        Retry {
            deadline: Instant::now() + Duration::from_secs(seconds),
            attempt: 0,
            interrupts: Arc::clone(interrupts),
        }
    }

    /// Waits before the next attempt (`Ok`), or gives `error` back when it
    /// is not worth retrying (its kind's policy; but whatever a step on a
    /// connection that is gone (`closed`) says, it failed for that) or
    /// time is up. A signal before or during the wait ends it at once
    /// with [`Error::Interrupted`]: the first Ctrl-C or SIGTERM must stop
    /// a run that waits for a server that is down (a service stop, cron's
    /// `timeout`), and a failed step has no batch in flight to finish.
    pub(crate) async fn wait(
        &mut self,
        error: Error,
        closed: bool,
        reporter: &dyn Reporter,
    ) -> Result<(), Error> {
        if matches!(error, Error::Interrupted { .. })
            || !(closed || error.policy().retried)
            || Instant::now() >= self.deadline
        {
            return Err(error);
        }
        let delay = db::backoff(self.attempt);
        self.attempt += 1;
        reporter.notice(&Notice::Retrying {
            error: &error,
            delay,
        });
        let until = Instant::now() + delay;
        loop {
            if self.interrupts.load(Ordering::SeqCst) > 0 {
                return Err(Error::Interrupted {
                    last: Box::new(error),
                });
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(());
            }
            tokio::time::sleep(left.min(INTERRUPT_POLL)).await;
        }
    }
}

/// Runs `op` on a data connection until it succeeds, retrying transient
/// failures as `retry` allows. With `reconnect`, a dropped
/// connection is replaced and `op` runs again (for steps that re-read all
/// they need, such as the bulk finish); without it, a dropped connection
/// ends the retrying: the caller must re-read its state first (see
/// the engine's `lost_or_failed`).
pub(crate) async fn retry_on<T>(
    db: &mut Database,
    target: &Target,
    mut retry: Retry,
    reconnect_dropped: bool,
    reporter: &dyn Reporter,
    mut op: impl AsyncFnMut(&mut tokio_postgres::Client) -> Result<T, Error>,
) -> Result<T, Error> {
    loop {
        let error = if db.client.is_closed() {
            Error::Disconnected {
                context: "a write step".into(),
            }
        } else {
            match op(&mut db.client).await {
                Ok(value) => return Ok(value),
                Err(error) => {
                    // A failed COMMIT can leave the session in an aborted
                    // transaction block (postgres_fdw failing to close a
                    // cursor on a restarted shard: the next BEGIN got
                    // 25P02); ROLLBACK ends it, and only warns outside a
                    // block. Its own failure is the connection's, which
                    // the next step sees.
                    let _ = db.client.batch_execute("ROLLBACK").await;
                    error
                }
            }
        };
        let closed = db.client.is_closed();
        if closed && !reconnect_dropped {
            return Err(error);
        }
        retry.wait(error, closed, reporter).await?;
        if db.client.is_closed() {
            reconnect(db, target, true, reporter).await;
        }
    }
}

/// Replaces a dropped connection; failures are left for the next retry.
pub(crate) async fn reconnect(
    slot: &mut Database,
    target: &Target,
    staging: bool,
    reporter: &dyn Reporter,
) {
    match db::connect(target).await {
        Ok(db) => {
            if staging && let Err(e) = prepare_connection(&db.client).await {
                reporter.notice(&Notice::ReconnectFailed(&e));
                return;
            }
            let old = std::mem::replace(slot, db);
            let _ = old.close();
        }
        Err(e) => reporter.notice(&Notice::ReconnectFailed(&e)),
    }
}
