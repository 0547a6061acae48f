//! Why a backup or restore could not run, or failed, and what it left behind.

use std::{io, path::PathBuf, process::ExitStatus};

use crate::error::ErrorKind;

/// Why a backup or restore could not run, or failed.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// `pg_dump` or `pg_restore` is not installed where pgnload looks.
    #[error(
        "{tool} not found (looked in: {searched}); it comes with the PostgreSQL client \
         programs (Debian package `postgresql-client-{major}`), or point PG_BIN at the \
         directory holding it",
        searched = .searched.join(", ")
    )]
    ToolMissing {
        /// `pg_dump` or `pg_restore`.
        tool: &'static str,
        /// The server's major version.
        major: u32,
        /// The directories searched.
        searched: Vec<String>,
    },
    /// The tool found is of another major version than the server.
    #[error(
        "{} is PostgreSQL {tool_version} but the server is PostgreSQL {server_version}: \
         use the tools of the server's major version (PG_BIN=/usr/lib/postgresql/{server_major}/bin)",
        path.display()
    )]
    VersionMismatch {
        /// The tool's path.
        path: PathBuf,
        /// What `--version` printed, after the program name.
        tool_version: String,
        /// The server's `server_version`.
        server_version: String,
        /// The server's major version.
        server_major: u32,
    },
    /// The backup destination exists: a backup never overwrites anything.
    #[error(
        "{} already exists; pgnload never overwrites a backup: remove it or choose another name",
        path.display()
    )]
    Exists {
        /// The destination.
        path: PathBuf,
    },
    /// An impossible combination of options.
    #[error("{0}")]
    Options(String),
    /// The backup to restore is not there.
    #[error("no backup at {}: {source}", path.display())]
    NoBackup {
        /// The path given.
        path: PathBuf,
        /// Why it cannot be read.
        #[source]
        source: io::Error,
    },
    /// `pg_restore --list` cannot read the archive: not a backup, or a
    /// damaged one. Nothing was changed.
    #[error(
        "{} is not a backup pg_restore can read (nothing was changed){}",
        path.display(),
        section(stderr)
    )]
    NotAnArchive {
        /// The path given.
        path: PathBuf,
        /// What `pg_restore --list` said.
        stderr: String,
    },
    /// The restore target holds tables or types already: a restore would
    /// merge two databases.
    #[error(
        "{target} is not empty: it holds {count} {what} ({names}{more}); a restore only goes \
         into an empty database, it never merges: restore into a new --data-dir, or into a \
         new database (CREATE DATABASE) given with --database-url",
        what = if *.count == 1 { "object" } else { "objects" },
        names = .names.join(", "),
        more = if *.count > .names.len() { ", …" } else { "" }
    )]
    NotEmpty {
        /// The database, as safe to print.
        target: String,
        /// How many tables, views, sequences and types it holds.
        count: usize,
        /// The first few, pgnload's own first.
        names: Vec<String>,
    },
    /// A file pgnload manages around the tool (the password file, the
    /// finished archive) could not be written or moved.
    #[error("{context} {}: {source}", path.display())]
    Io {
        /// What pgnload was doing.
        context: &'static str,
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The tool could not be started.
    #[error("could not run {}: {source}", path.display())]
    Spawn {
        /// The program.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// Ctrl-C or SIGTERM stopped the tool: the user's choice, of kind
    /// [`ErrorKind::Interrupted`] like every other interruption (exit 3).
    #[error("{tool} was stopped by an interrupt; {aftermath}")]
    Interrupted {
        /// `pg_dump` or `pg_restore`.
        tool: &'static str,
        /// What the interruption left behind.
        aftermath: String,
    },
    /// The tool ran and failed; its stderr, once.
    #[error("{tool} failed ({status}); {aftermath}{}", section(stderr))]
    Failed {
        /// `pg_dump` or `pg_restore`.
        tool: &'static str,
        /// Its exit status.
        status: ExitStatus,
        /// What the failure left behind.
        aftermath: String,
        /// Its stderr (its first 32 KiB: a runaway tool must not fill memory).
        stderr: String,
    },
}

impl BackupError {
    /// The kind of failure, for [`Error::kind`](crate::error::Error::kind).
    pub fn kind(&self) -> ErrorKind {
        match self {
            BackupError::ToolMissing { .. }
            | BackupError::VersionMismatch { .. }
            | BackupError::Options(_) => ErrorKind::Configuration,
            BackupError::Exists { .. } | BackupError::NotEmpty { .. } => ErrorKind::Conflict,
            BackupError::NoBackup { .. } | BackupError::NotAnArchive { .. } => ErrorKind::Input,
            BackupError::Io { .. } | BackupError::Spawn { .. } => ErrorKind::System,
            BackupError::Interrupted { .. } => ErrorKind::Interrupted,
            BackupError::Failed { .. } => ErrorKind::Database { transient: false },
        }
    }

    /// Says what a failed or interrupted tool left behind.
    pub(super) fn leaving(self, what: String) -> BackupError {
        match self {
            BackupError::Failed {
                tool,
                status,
                stderr,
                ..
            } => BackupError::Failed {
                tool,
                status,
                aftermath: what,
                stderr,
            },
            BackupError::Interrupted { tool, .. } => BackupError::Interrupted {
                tool,
                aftermath: what,
            },
            other => other,
        }
    }
}

/// A tool's stderr as the tail of a message.
fn section(stderr: &str) -> String {
    let stderr = stderr.trim_end();
    if stderr.is_empty() {
        String::new()
    } else {
        format!("\n{stderr}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{Error, ExitStatus};

    /// A stopped `pg_dump` is the user's interruption, not the machine
    /// refusing something: the interrupted kind, exit code 3.
    #[test]
    fn an_interrupted_tool_is_an_interruption() {
        let stopped = Error::Backup(BackupError::Interrupted {
            tool: "pg_dump",
            aftermath: "no backup was written".into(),
        });
        assert_eq!(stopped.kind(), ErrorKind::Interrupted);
        assert_eq!(stopped.policy().exit, ExitStatus::Interrupted);
        assert_eq!(stopped.policy().exit.code(), 3);
    }
}
