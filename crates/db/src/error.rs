//! Errors that stop a run. One bad game is not one of them: that is a
//! rejection (`pgnload_chess::reject`), counted and kept while the run goes
//! on. An [`Error`] says the run itself cannot go on (unreadable file, corrupt
//! compressed stream, database unreachable). It carries the context needed
//! to act on it: file, byte offset, game number.
//!
//! It lives in the database crate because its database kinds wrap the
//! driver's errors; every crate above uses it, the chess core does not.

use std::{io, path::PathBuf, sync::Arc};

/// Errors that stop a run (or one input of it).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An input file could not be opened or read.
    #[error("{}: {source}", path.display())]
    Open {
        /// The input path.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// Reading or decompressing an input failed part-way; every game before
    /// `byte_offset` was read.
    #[error(
        "{file}: input broken at byte {byte_offset} of the decompressed stream (after game #{games_read}): {source}"
    )]
    InputBroken {
        /// The input as named.
        file: Arc<str>,
        /// Decompressed bytes read successfully.
        byte_offset: u64,
        /// Games read before the break.
        games_read: u64,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// Writing output failed.
    #[error("writing output: {0}")]
    Output(#[source] io::Error),
    /// An input cannot be imported as it is, though it could be read (it
    /// changed since its interrupted import, it is an archive...): that
    /// input fails, the others go on.
    #[error("{file}: {message}")]
    Input {
        /// The input as named.
        file: String,
        /// What is wrong with it and what to do.
        message: String,
    },
    /// The configuration is invalid.
    #[error("configuration: {0}")]
    Config(String),
    /// The machine refused what a run needs to start (threads, the async
    /// runtime, signal handlers).
    #[error("{what}: {source}")]
    System {
        /// What pgnload was setting up.
        what: &'static str,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// A connection to the database is gone (the server restarted or
    /// crashed, the session was terminated): transient, retried.
    #[error("database: {context}: connection lost")]
    Disconnected {
        /// What pgnload was doing.
        context: String,
    },
    /// The embedded PostgreSQL cluster could not be managed.
    #[error(transparent)]
    Embedded(#[from] crate::embedded::EmbeddedError),
    /// `pgnload db backup` or `db restore` could not run or failed.
    #[error(transparent)]
    Backup(#[from] crate::backup::BackupError),
    /// A stored game that a writer cannot write in its format (a negative
    /// clock stored by an earlier version or by hand, a move that no
    /// longer replays): an export skips it and counts it, a command
    /// showing that one game fails with this.
    #[error("game {game} cannot be written: {reason}")]
    Unwritable {
        /// `games.id`.
        game: i64,
        /// What in the row the format cannot say.
        reason: String,
    },
    /// Something that cannot happen did; a bug, reported instead of a panic.
    #[error("internal error: {0}")]
    Internal(String),
    /// Another process changed what this run relied on (an input's
    /// checkpoint moved, the import lock was taken): nothing is wrong with
    /// pgnload or the data, and the work done so far was rolled back.
    #[error("conflict: {0}")]
    Conflict(String),
    /// A query cannot be answered as asked (an illegal FEN, a move that
    /// is not legal there, a game that does not exist): the user's to fix.
    #[error("{0}")]
    Request(String),
    /// A signal (Ctrl-C, SIGTERM) ended the wait before a retry of
    /// `last`, a transient failure (a server that is down): the first
    /// signal ends such a wait at once, since no batch is in flight to
    /// finish. Exit code 3; a rerun resumes.
    #[error("interrupted while waiting to retry")]
    Interrupted {
        /// The failure the run was waiting to retry.
        #[source]
        last: Box<Error>,
    },
    /// A database operation failed. The server's own message (with its
    /// SQLSTATE, detail and hint) is part of the text, once: the driver's
    /// error is kept as `cause`, not as a `source` that a printer would
    /// add again after its bare "db error".
    #[error("database: {context}: {}", describe_postgres_error(.cause))]
    Database {
        /// What pgnload was doing.
        context: String,
        /// The driver's error.
        cause: tokio_postgres::Error,
    },
}

/// What kind of failure an [`Error`] is: what retry decides on, and what
/// the final message tells the user to do about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// An input is unreadable or cannot be imported as it is.
    Input,
    /// Our own output could not be written.
    Output,
    /// The configuration (flags, environment, config file) is invalid.
    Configuration,
    /// The machine refused a resource the run needs.
    System,
    /// The database failed; `transient` when retrying can succeed (lost
    /// connection, server restarting, deadlock, too many connections).
    Database {
        /// Whether a retry can succeed.
        transient: bool,
    },
    /// Another process changed what this run relied on.
    Conflict,
    /// Something that cannot happen did: a bug in pgnload.
    Bug,
    /// The user stopped the run (Ctrl-C, SIGTERM).
    Interrupted,
}

impl Error {
    /// The kind of this error. Retry and the final message follow the
    /// kind (for a database error, its SQLSTATE class), so that no caller
    /// matches error text.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Open { .. }
            | Error::InputBroken { .. }
            | Error::Input { .. }
            | Error::Request(_)
            | Error::Unwritable { .. } => ErrorKind::Input,
            Error::Output(_) => ErrorKind::Output,
            Error::Config(_) => ErrorKind::Configuration,
            Error::System { .. } => ErrorKind::System,
            Error::Embedded(_) => ErrorKind::System,
            Error::Backup(e) => e.kind(),
            Error::Internal(_) => ErrorKind::Bug,
            Error::Conflict(_) => ErrorKind::Conflict,
            Error::Interrupted { .. } => ErrorKind::Interrupted,
            Error::Disconnected { .. } => ErrorKind::Database { transient: true },
            Error::Database { cause, .. } => ErrorKind::Database {
                transient: postgres_error_is_transient(cause),
            },
        }
    }

    /// Worth retrying: the connection or server went away, or the
    /// transaction lost a deadlock / serialization race.
    pub fn is_transient(&self) -> bool {
        self.kind() == ErrorKind::Database { transient: true }
    }
}

/// Whether a driver error is worth retrying: a closed connection, an
/// SQLSTATE of class 08 (connection), 57P01–03 (shutdown, crash, starting
/// up), 40001/40P01 (serialization, deadlock) or 53300 (too many
/// connections), or a socket that failed before the server answered.
fn postgres_error_is_transient(cause: &tokio_postgres::Error) -> bool {
    if cause.is_closed() {
        return true;
    }
    match cause.code() {
        Some(code) => {
            let code = code.code();
            code.starts_with("08")
                || matches!(
                    code,
                    "57P01" | "57P02" | "57P03" | "40001" | "40P01" | "53300"
                )
        }
        // No SQLSTATE: transient if the socket failed (refused, reset),
        // not if the connection string or the protocol is wrong.
        None => std::error::Error::source(cause)
            .is_some_and(|source| source.downcast_ref::<io::Error>().is_some()),
    }
}

/// What a driver error says, as a user needs it: the server's severity,
/// message and SQLSTATE (plus detail and hint) for an error the server
/// sent; "connection closed" for a closed connection; else the driver's
/// text with its causes (an I/O error, say).
pub fn describe_postgres_error(error: &tokio_postgres::Error) -> String {
    if let Some(db) = error.as_db_error() {
        let mut text = format!(
            "{}: {} (SQLSTATE {})",
            db.severity(),
            db.message(),
            db.code().code()
        );
        if let Some(detail) = db.detail() {
            text.push_str("; detail: ");
            text.push_str(detail);
        }
        if let Some(hint) = db.hint() {
            text.push_str("; hint: ");
            text.push_str(hint);
        }
        return text;
    }
    if error.is_closed() {
        return "connection closed".to_owned();
    }
    report(error)
}

/// An error and its chain of causes on one line, each cause added only if
/// the text so far does not already say it (most of pgnload's errors
/// quote their cause in their own message). This is how every error is
/// printed, so a message never repeats itself.
pub fn report(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(next) = cause {
        let said = next.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        cause = next.source();
    }
    text
}

/// Result alias for the library.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How a command ended; `main` turns it into the process exit code.
///
/// | code | meaning |
/// |------|---------|
/// | 0 | clean: everything read was imported / printed / verified |
/// | 1 | finished, but some games were rejected (or `verify` found mismatches) |
/// | 2 | failed: an input, the database or the configuration stopped the run |
/// | 3 | interrupted (Ctrl-C / SIGTERM); rerun the same command to resume |
/// | 4 | aborted: more rejects than `--max-rejects` allows |
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    /// Exit code 0.
    Clean,
    /// Exit code 1.
    CompletedWithRejects,
    /// Exit code 2.
    Failed,
    /// Exit code 3.
    Interrupted,
    /// Exit code 4.
    TooManyRejects,
}

impl ExitStatus {
    /// The process exit code.
    pub fn code(self) -> u8 {
        match self {
            ExitStatus::Clean => 0,
            ExitStatus::CompletedWithRejects => 1,
            ExitStatus::Failed => 2,
            ExitStatus::Interrupted => 3,
            ExitStatus::TooManyRejects => 4,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A checkpoint race or a lost lock is its own kind, said as such and
    /// never retried; before, both were "internal error" (a bug).
    #[test]
    fn a_conflict_is_reported_as_one_and_not_retried() {
        let conflict = Error::Conflict("the checkpoint of input 3 moved".into());
        assert_eq!(
            conflict.to_string(),
            "conflict: the checkpoint of input 3 moved"
        );
        assert!(!conflict.is_transient());
        for other in [
            Error::Internal("x".into()),
            Error::Config("x".into()),
            Error::Output(io::Error::other("x")),
        ] {
            assert!(!other.is_transient(), "{other}");
        }
    }

    /// Retry and the final message follow the kind: a lost connection is a
    /// transient database error (it used to be "internal error: connection
    /// closed", a bug that was retried), a changed input is an input error
    /// naming the file (it used to be a configuration error).
    #[test]
    fn each_error_has_the_kind_that_decides_its_handling() {
        let lost = Error::Disconnected {
            context: "a write step".into(),
        };
        assert_eq!(lost.kind(), ErrorKind::Database { transient: true });
        assert!(lost.is_transient());
        let changed = Error::Input {
            file: "dump.pgn".into(),
            message: "changed since its interrupted import".into(),
        };
        assert_eq!(changed.kind(), ErrorKind::Input);
        assert!(!changed.is_transient());
        assert_eq!(
            changed.to_string(),
            "dump.pgn: changed since its interrupted import"
        );
        assert_eq!(Error::Internal("x".into()).kind(), ErrorKind::Bug);
        assert_eq!(Error::Config("x".into()).kind(), ErrorKind::Configuration);
        let system = Error::System {
            what: "starting the async runtime",
            source: io::Error::other("no threads"),
        };
        assert_eq!(system.kind(), ErrorKind::System);
        assert_eq!(report(&system), "starting the async runtime: no threads");
    }
}
