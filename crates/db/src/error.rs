//! Errors that stop a run. One bad game is not one of them: that is a
//! rejection (`pgnload_chess::reject`), counted and kept while the run goes
//! on. An [`Error`] says the run itself cannot go on (unreadable file, corrupt
//! compressed stream, database unreachable). It carries the context needed
//! to act on it: file, byte offset, game number.
//!
//! Each error has an [`ErrorKind`], and [`ErrorKind::policy`] is the one
//! table of what pgnload does about it: retried or not, the advice of its
//! last line, the exit code (`docs/errors.md` shows it).
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
    /// Something that cannot happen did: a bug in pgnload, reported
    /// instead of a panic. Only for what pgnload itself guarantees (its
    /// own counts, its pipeline, values its code keeps in range); what the
    /// database holds is [`Error::Inconsistent`].
    #[error("internal error: {detail}")]
    Bug {
        /// What went wrong, and where (input, batch, game).
        detail: String,
        /// The error that revealed it, when there is one: printed after
        /// `detail` by [`report`].
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// The database broke a rule pgnload relies on: it holds, or its
    /// server answered, what pgnload's schema and PostgreSQL rule out (a
    /// row changed by hand, a damaged table). Not pgnload's bug, and a
    /// retry cannot fix it.
    #[error("database inconsistent: {detail}")]
    Inconsistent {
        /// What the database holds or said, and where (table, row, game).
        detail: String,
    },
    /// A format pgnload writes cannot hold what it was asked to write
    /// (a `.dcg` name file past 4 GiB): the output cannot be written.
    #[error("{format} cannot hold {detail}")]
    FormatLimit {
        /// The format, as the message names it (`the .dcg format`).
        format: &'static str,
        /// What did not fit.
        detail: String,
    },
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

/// What kind of failure an [`Error`] is. Everything pgnload does about an
/// error follows its kind through [`ErrorKind::policy`] (whether it is
/// retried, what the final message advises, the exit code), so that no
/// caller matches error text or variants to decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// An input is unreadable or cannot be imported as it is, or a
    /// request cannot be answered as asked.
    Input,
    /// Our own output could not be written.
    Output,
    /// The reader of our output went away (`| head`): it had what it
    /// wanted.
    ReaderGone,
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
    /// The database holds or answered what its schema and PostgreSQL
    /// rule out.
    Inconsistent,
    /// Another process changed what this run relied on.
    Conflict,
    /// Something that cannot happen did: a bug in pgnload.
    Bug,
    /// The user stopped the run (Ctrl-C, SIGTERM).
    Interrupted,
}

/// What pgnload does about an error of one kind: the one table that the
/// import's retry loop and `main` (final message, exit code) read, so
/// that they cannot disagree. `docs/errors.md` shows it; a unit test
/// checks that the two say the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Whether the import retries it, with backoff, for `retry_seconds`
    /// (`crate::db::backoff`).
    pub retried: bool,
    /// How the line that ends the command reads, or that there is none.
    pub message: Message,
    /// How a command that it ends exits.
    pub exit: ExitStatus,
}

/// The line printed on stderr when an error ends a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Message {
    /// None: nothing went wrong for the user.
    Silent,
    /// `pgnload: error: <error><advice>`.
    Failure {
        /// Appended to the error, as it reads (`" (…)"`), or `""`.
        advice: &'static str,
    },
    /// `pgnload: <error><advice>`, without "error": the user asked for it.
    Notice {
        /// Appended to the error, as it reads.
        advice: &'static str,
    },
}

impl ErrorKind {
    /// Every kind, for the tests and the documentation's table.
    pub const ALL: [ErrorKind; 11] = [
        ErrorKind::Input,
        ErrorKind::Output,
        ErrorKind::ReaderGone,
        ErrorKind::Configuration,
        ErrorKind::System,
        ErrorKind::Database { transient: true },
        ErrorKind::Database { transient: false },
        ErrorKind::Inconsistent,
        ErrorKind::Conflict,
        ErrorKind::Bug,
        ErrorKind::Interrupted,
    ];

    /// The kind's name, as `docs/errors.md` lists it.
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::Input => "input",
            ErrorKind::Output => "output",
            ErrorKind::ReaderGone => "reader gone",
            ErrorKind::Configuration => "configuration",
            ErrorKind::System => "system",
            ErrorKind::Database { transient: true } => "database, transient",
            ErrorKind::Database { transient: false } => "database",
            ErrorKind::Inconsistent => "database inconsistent",
            ErrorKind::Conflict => "conflict",
            ErrorKind::Bug => "bug",
            ErrorKind::Interrupted => "interrupted",
        }
    }

    /// What pgnload does about an error of this kind. Only a transient
    /// database error is retried: anything else would fail the same way
    /// again (a conflict is retried by rerunning, once its cause is
    /// understood).
    pub fn policy(self) -> Policy {
        const FAILED: Message = Message::Failure { advice: "" };
        let (retried, message, exit) = match self {
            ErrorKind::Input
            | ErrorKind::Output
            | ErrorKind::Configuration
            | ErrorKind::System
            | ErrorKind::Database { transient: false }
            | ErrorKind::Conflict => (false, FAILED, ExitStatus::Failed),
            ErrorKind::ReaderGone => (false, Message::Silent, ExitStatus::Clean),
            ErrorKind::Database { transient: true } => (
                true,
                Message::Failure {
                    advice: " (still failing when retry_seconds ran out; rerun to resume)",
                },
                ExitStatus::Failed,
            ),
            ErrorKind::Inconsistent => (
                false,
                Message::Failure {
                    advice: " (the database is not as pgnload and PostgreSQL keep it: \
                             changed by hand, or damaged)",
                },
                ExitStatus::Failed,
            ),
            ErrorKind::Bug => (
                false,
                Message::Failure {
                    advice: " (a bug in pgnload: please report it with the command line)",
                },
                ExitStatus::Failed,
            ),
            ErrorKind::Interrupted => (
                false,
                Message::Notice {
                    advice: "; rerun to resume",
                },
                ExitStatus::Interrupted,
            ),
        };
        Policy {
            retried,
            message,
            exit,
        }
    }
}

impl Error {
    /// The kind of this error: a database error's by its SQLSTATE class,
    /// an output error's by whether the reader went away.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Open { .. }
            | Error::InputBroken { .. }
            | Error::Input { .. }
            | Error::Request(_)
            | Error::Unwritable { .. } => ErrorKind::Input,
            Error::Output(e) if e.kind() == io::ErrorKind::BrokenPipe => ErrorKind::ReaderGone,
            Error::Output(_) | Error::FormatLimit { .. } => ErrorKind::Output,
            Error::Config(_) => ErrorKind::Configuration,
            Error::System { .. } | Error::Embedded(_) => ErrorKind::System,
            Error::Backup(e) => e.kind(),
            Error::Bug { .. } => ErrorKind::Bug,
            Error::Inconsistent { .. } => ErrorKind::Inconsistent,
            Error::Conflict(_) => ErrorKind::Conflict,
            Error::Interrupted { .. } => ErrorKind::Interrupted,
            Error::Disconnected { .. } => ErrorKind::Database { transient: true },
            Error::Database { cause, .. } => ErrorKind::Database {
                transient: postgres_error_is_transient(cause),
            },
        }
    }

    /// What pgnload does about this error: its kind's [`Policy`].
    pub fn policy(&self) -> Policy {
        self.kind().policy()
    }

    /// The line that ends a command this error stopped, without the
    /// `pgnload: ` every line starts with: the error and its causes once
    /// ([`report`]), then its kind's advice. `None` when nothing is said.
    pub fn final_message(&self) -> Option<String> {
        match self.policy().message {
            Message::Silent => None,
            Message::Failure { advice } => Some(format!("error: {}{advice}", report(self))),
            Message::Notice { advice } => Some(format!("{}{advice}", report(self))),
        }
    }

    /// A [`Error::Bug`] with nothing more to say than `detail`.
    pub fn bug(detail: impl Into<String>) -> Error {
        Error::Bug {
            detail: detail.into(),
            source: None,
        }
    }

    /// A [`Error::Bug`] that `source` revealed.
    pub fn bug_from(
        detail: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Error {
        Error::Bug {
            detail: detail.into(),
            source: Some(source.into()),
        }
    }

    /// An [`Error::Inconsistent`] saying `detail`.
    pub fn inconsistent(detail: impl Into<String>) -> Error {
        Error::Inconsistent {
            detail: detail.into(),
        }
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
        assert!(!conflict.policy().retried);
        for other in [
            Error::bug("x"),
            Error::inconsistent("x"),
            Error::Config("x".into()),
            Error::Output(io::Error::other("x")),
        ] {
            assert!(!other.policy().retried, "{other}");
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
        assert!(lost.policy().retried);
        let changed = Error::Input {
            file: "dump.pgn".into(),
            message: "changed since its interrupted import".into(),
        };
        assert_eq!(changed.kind(), ErrorKind::Input);
        assert!(!changed.policy().retried);
        assert_eq!(
            changed.to_string(),
            "dump.pgn: changed since its interrupted import"
        );
        assert_eq!(Error::bug("x").kind(), ErrorKind::Bug);
        assert_eq!(Error::inconsistent("x").kind(), ErrorKind::Inconsistent);
        let limit = Error::FormatLimit {
            format: "the .dcg format",
            detail: "more than 2^32 distinct names".into(),
        };
        assert_eq!(limit.kind(), ErrorKind::Output);
        assert_eq!(
            limit.to_string(),
            "the .dcg format cannot hold more than 2^32 distinct names"
        );
        assert_eq!(Error::Config("x".into()).kind(), ErrorKind::Configuration);
        let system = Error::System {
            what: "starting the async runtime",
            source: io::Error::other("no threads"),
        };
        assert_eq!(system.kind(), ErrorKind::System);
        assert_eq!(report(&system), "starting the async runtime: no threads");
    }

    /// Only a transient database error is worth retrying: everything else
    /// fails the same way again, and a retry would only delay the message.
    #[test]
    fn transient_database_errors_are_the_only_retried_kind() {
        for kind in ErrorKind::ALL {
            assert_eq!(
                kind.policy().retried,
                kind == ErrorKind::Database { transient: true },
                "{kind:?}"
            );
        }
    }

    /// Every kind is listed once, under its own name, and ends a command
    /// with one of the README's exit codes for a run that did not finish:
    /// 0 only when the reader of the output went away, 3 only for an
    /// interrupt, 2 for every failure.
    #[test]
    fn every_kind_has_one_name_and_a_documented_exit_code() {
        for (i, kind) in ErrorKind::ALL.iter().enumerate() {
            assert!(!ErrorKind::ALL[..i].contains(kind), "{kind:?} twice");
            assert!(
                ErrorKind::ALL[..i].iter().all(|k| k.name() != kind.name()),
                "{} names two kinds",
                kind.name()
            );
            let expected = match kind {
                ErrorKind::ReaderGone => ExitStatus::Clean,
                ErrorKind::Interrupted => ExitStatus::Interrupted,
                _ => ExitStatus::Failed,
            };
            assert_eq!(kind.policy().exit, expected, "{kind:?}");
        }
        let readme = include_str!("../../../README.md");
        let codes = readme
            .split("### Exit codes")
            .nth(1)
            .expect("the README has an Exit codes section");
        for kind in ErrorKind::ALL {
            let row = format!("\n| {} |", kind.policy().exit.code());
            assert!(codes.contains(&row), "the README has no row {row:?}");
        }
    }

    /// `docs/errors.md` shows the policy table row for row: kind, exit
    /// code, retried, and the final line's shape with its advice. A
    /// change to either without the other fails here.
    #[test]
    fn the_documented_table_is_the_policy_table() {
        let doc = include_str!("../../../docs/errors.md");
        let rows: Vec<Vec<&str>> = doc
            .lines()
            .filter(|line| line.starts_with("| `"))
            .map(|line| line.trim_matches('|').split(" | ").map(str::trim).collect())
            .collect();
        let documented: Vec<&str> = rows.iter().map(|row| row[0].trim_matches('`')).collect();
        let names: Vec<&str> = ErrorKind::ALL.iter().map(|k| k.name()).collect();
        assert_eq!(documented, names, "the table lists every kind, in order");
        for (row, kind) in rows.iter().zip(ErrorKind::ALL) {
            let policy = kind.policy();
            assert_eq!(row.len(), 5, "{row:?}");
            assert_eq!(row[2], policy.exit.code().to_string(), "{row:?}");
            assert_eq!(row[3].starts_with("yes"), policy.retried, "{row:?}");
            assert!(row[3].starts_with("yes") || row[3] == "no", "{row:?}");
            let line = match policy.message {
                Message::Silent => "none".to_owned(),
                Message::Failure { advice } => format!("`pgnload: error: …{advice}`"),
                Message::Notice { advice } => format!("`pgnload: …{advice}`"),
            };
            assert_eq!(row[4], line, "{row:?}");
        }
    }

    /// Each error is printed once with its causes and its kind's advice:
    /// a bug's source after its detail, an interrupt without "error", a
    /// closed stdout not at all.
    #[test]
    fn the_final_line_follows_the_kind() {
        let bug = Error::bug_from("formatting a comment", std::fmt::Error);
        assert_eq!(bug.to_string(), "internal error: formatting a comment");
        assert_eq!(
            bug.final_message().as_deref(),
            Some(
                "error: internal error: formatting a comment: an error occurred when formatting \
                 an argument (a bug in pgnload: please report it with the command line)"
            )
        );
        let stopped = Error::Interrupted {
            last: Box::new(Error::Disconnected {
                context: "connecting".into(),
            }),
        };
        assert_eq!(
            stopped.final_message().as_deref(),
            Some(
                "interrupted while waiting to retry: database: connecting: connection lost; \
                 rerun to resume"
            )
        );
        assert_eq!(stopped.policy().exit, ExitStatus::Interrupted);
        let gone = Error::Output(io::Error::from(io::ErrorKind::BrokenPipe));
        assert_eq!(gone.kind(), ErrorKind::ReaderGone);
        assert_eq!(gone.final_message(), None);
        assert_eq!(gone.policy().exit, ExitStatus::Clean);
        let full = Error::Output(io::Error::other("no space left on device"));
        assert_eq!(
            full.final_message().as_deref(),
            Some("error: writing output: no space left on device")
        );
        assert_eq!(full.policy().exit, ExitStatus::Failed);
    }
}
