//! What an import says while it runs and when it ends: the [`Reporter`]
//! the front end supplies, the [`Notice`]s of a run in progress, and the
//! [`Summary`] of a finished one.
//!
//! It exists so that the engine prints nothing itself: `cmd::import`
//! decides what is shown, where and how (a bar or log lines on stderr,
//! nothing with `--quiet`), and another front end can show it otherwise.
//! Nothing here may write to a terminal or a file.

use std::{fmt, time::Duration};

/// The counts a summary holds, for front ends to read.
pub use crate::ingest::writer::{BatchStats, RejectCounts};
use crate::{
    error::{Error, SourcePos},
    ingest::{bulk::FinishReport, writer::Conflict},
    progress::{Snapshot, Step},
};

/// Where an import's progress and messages go. Methods take `&self`
/// because both write phases of a batch may report at once (a retry on
/// each connection).
pub trait Reporter: Sync {
    /// An input was opened: its name and length in bytes (compressed bytes
    /// of a compressed file), when known.
    fn input_opened(&self, name: &str, len: Option<u64>);
    /// A batch committed: where the run stands.
    fn progress(&self, now: Snapshot);
    /// The inputs are over; what follows is the bulk finish and the summary.
    fn inputs_ended(&self);
    /// Something the user should know while the run goes on.
    fn notice(&self, notice: &Notice<'_>);
    /// A step of a bulk load's finish, after the inputs (merging
    /// duplicates, each index and constraint rebuilt, analyzing), with the
    /// counts PostgreSQL gives of the index builds.
    fn step(&self, step: Step<'_>);
    /// What the run did, given before its connections close.
    fn summary(&self, summary: &Summary);
}

/// A message of a run in progress. Its `Display` is the message's text,
/// without the program's name.
#[derive(Debug)]
pub enum Notice<'a> {
    /// A server setting worth changing (databases given by URL only).
    Advice(&'a str),
    /// `--no-wait`, and a bulk load holds the database: the run is skipped.
    DatabaseBusy,
    /// The run continues an unfinished bulk load.
    ContinuingBulkLoad,
    /// A transient failure, retried after `delay`.
    Retrying {
        /// What failed.
        error: &'a Error,
        /// The wait before the next attempt.
        delay: Duration,
    },
    /// Replacing a dropped connection failed; the next retry tries again.
    ReconnectFailed(&'a Error),
    /// An input imported by an earlier run, skipped.
    AlreadyImported(&'a str),
    /// `--no-wait`, and another pgnload imports this input: skipped.
    InputBusy(&'a str),
    /// Another pgnload imports this input: the run waits for it.
    WaitingForInput(&'a str),
    /// An input resumes from its checkpoint.
    Resuming {
        /// The input as given.
        input: &'a str,
        /// Games read before the checkpoint.
        games: i64,
        /// Decompressed bytes before the checkpoint.
        bytes: i64,
    },
    /// An input whose import was interrupted (or failed) only grew since:
    /// its first `from` bytes are the ones imported from, so it resumes
    /// from its checkpoint under its new fingerprint (a download finished).
    Grown {
        /// The input as given.
        input: &'a str,
        /// Its size when its import began, in bytes.
        from: u64,
        /// Its size now.
        to: u64,
    },
    /// More games than `--max-rejects` were rejected: the run stops.
    TooManyRejects(u64),
    /// An input finished whose earlier runs rejected games: this run
    /// exits 1 for them.
    RejectedBefore {
        /// The input as given.
        input: &'a str,
        /// Games its earlier runs rejected.
        games: u64,
    },
    /// An input failed; the others go on.
    InputFailed {
        /// The input as given.
        input: &'a str,
        /// Why.
        error: &'a Error,
    },
    /// A game whose identity another game with other moves holds (the
    /// first few of a run; `import_conflicts` has them all).
    Conflict {
        /// Where the game is.
        game: &'a SourcePos,
        /// Its identity and the game holding it.
        conflict: &'a Conflict,
    },
    /// Conflicts past the first few are not shown.
    MoreConflicts,
    /// A step of a bulk load's finish (merge, rebuild, analyze).
    BulkLoad(&'a str),
    /// `--mode bulk` waits for the incremental imports running to end.
    WaitingForImports,
    /// An incremental import waits for a bulk load to finish.
    WaitingForBulkLoad,
}

impl fmt::Display for Notice<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Notice::Advice(advice) => write!(f, "advice: {advice}"),
            Notice::DatabaseBusy => f.write_str(
                "a bulk load holds the database (or other imports block one); skipped (--no-wait)",
            ),
            Notice::ContinuingBulkLoad => f.write_str("continuing an unfinished bulk load"),
            Notice::Retrying { error, delay } => {
                write!(f, "{error}; retrying in {:.1}s", delay.as_secs_f64())
            }
            Notice::ReconnectFailed(error) => write!(f, "reconnect: {error}"),
            Notice::AlreadyImported(input) => write!(f, "{input}: already imported, skipped"),
            Notice::InputBusy(input) => write!(
                f,
                "{input}: another pgnload is importing it; skipped (--no-wait)"
            ),
            Notice::WaitingForInput(input) => write!(
                f,
                "{input}: another pgnload is importing it; waiting for it"
            ),
            Notice::Resuming {
                input,
                games,
                bytes,
            } => write!(
                f,
                "{input}: resuming after game #{games} (byte {bytes} of the decompressed stream)"
            ),
            Notice::Grown { input, from, to } => write!(
                f,
                "{input}: grew from {from} to {to} bytes since its interrupted import, its first \
                 {from} bytes unchanged; continuing that import"
            ),
            Notice::TooManyRejects(max) => write!(
                f,
                "more than {max} games rejected; stopping (rerun to continue)"
            ),
            Notice::RejectedBefore { input, games } => write!(
                f,
                "{input}: {games} of its games were rejected by earlier runs \
                 (kept in import_rejects; `pgnload status` counts them)"
            ),
            Notice::InputFailed { input, error } => {
                let text = crate::error::report(*error);
                if text.contains(input) {
                    f.write_str(&text)
                } else {
                    write!(f, "{input}: {text}")
                }
            }
            Notice::Conflict { game, conflict } => {
                let holder = &conflict.holder;
                let place = match (holder.game_number, holder.byte_offset) {
                    (Some(number), Some(offset)) => format!("game #{number} at byte {offset}"),
                    (Some(number), None) => format!("game #{number}"),
                    _ => "a game".to_owned(),
                };
                let held_by = match (&holder.game_id, &holder.path) {
                    (Some(id), Some(path)) => format!("games.id {id} ({path}, {place})"),
                    (Some(id), None) => format!("games.id {id}"),
                    (None, _) => format!("{place} of the same input"),
                };
                write!(
                    f,
                    "{game}: id {}:{} is already held by {held_by} with other moves; \
                     not imported (recorded in import_conflicts)",
                    conflict.source, conflict.external_id
                )
            }
            Notice::MoreConflicts => {
                f.write_str("more conflicts are not shown; see import_conflicts")
            }
            Notice::BulkLoad(text) => write!(f, "bulk load: {text}"),
            Notice::WaitingForImports => f.write_str(
                "waiting for the other imports to end (bulk mode needs the database to itself)",
            ),
            Notice::WaitingForBulkLoad => f.write_str("waiting for a bulk load to finish"),
        }
    }
}

/// Totals of a run; `read = imported + present + rejected` always holds.
#[derive(Debug, Clone, Copy, Default)]
pub struct Totals {
    /// Game, position and move counts.
    pub games: BatchStats,
    /// Inputs imported to their end.
    pub files_done: u64,
    /// Inputs skipped: imported already, or busy with `--no-wait`.
    pub files_skipped: u64,
    /// Inputs that failed (the others go on).
    pub files_failed: u64,
    /// Inputs stopped by a signal or `--max-rejects`; a rerun resumes them.
    pub files_interrupted: u64,
    /// Inputs never begun: the run stopped (a signal, `--max-rejects`, a
    /// failure that ends the run) before them. With the four counts above
    /// they make up every input given, each counted once.
    pub files_not_started: u64,
    /// Games that earlier runs rejected in the inputs this run finished
    /// (kept in `import_rejects`, not counted in `games`): the run that
    /// finishes an input exits 1 if any of its games were rejected, by
    /// whichever run, so that a script checking exit codes sees them.
    pub rejected_before: u64,
}

/// How one input of a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputOutcome {
    /// Imported to its end.
    Imported,
    /// Skipped: imported by an earlier run.
    AlreadyImported,
    /// Skipped: another pgnload imports it (`--no-wait`).
    Busy,
    /// Stopped by a signal; a rerun resumes it.
    Interrupted,
    /// Stopped at `--max-rejects`; a rerun resumes it.
    TooManyRejects,
    /// Failed (the error is in [`InputReport::error`]).
    Failed,
    /// Never begun: the run stopped before it.
    NotStarted,
}

impl InputOutcome {
    /// Its name in machine-readable output, stable.
    pub fn name(self) -> &'static str {
        match self {
            InputOutcome::Imported => "imported",
            InputOutcome::AlreadyImported => "already_imported",
            InputOutcome::Busy => "busy",
            InputOutcome::Interrupted => "interrupted",
            InputOutcome::TooManyRejects => "too_many_rejects",
            InputOutcome::Failed => "failed",
            InputOutcome::NotStarted => "not_started",
        }
    }
}

/// What a run did with one of its inputs.
#[derive(Debug, Clone)]
pub struct InputReport {
    /// The input as given.
    pub input: String,
    /// How it ended.
    pub outcome: InputOutcome,
    /// The counts this run added for it (read = imported + present +
    /// rejected + filtered, as in the totals).
    pub games: BatchStats,
    /// Why it failed, as the error is printed.
    pub error: Option<String>,
    /// Games its earlier runs rejected, for an input this run finished
    /// (see [`Totals::rejected_before`]).
    pub rejected_before: u64,
}

/// What a run did, handed to the front end to show.
#[derive(Debug, Clone)]
pub struct Summary {
    /// The database, described without its password.
    pub target: String,
    /// Counts of the run.
    pub totals: Totals,
    /// Each input given, in order, once.
    pub inputs: Vec<InputReport>,
    /// Time since the run began.
    pub elapsed: Duration,
    /// What became of the bulk load, if the run chose one.
    pub bulk: BulkOutcome,
}

/// How the run's load mode ended.
#[derive(Debug, Clone, Copy)]
pub enum BulkOutcome {
    /// Incremental mode.
    Incremental,
    /// Bulk mode was chosen, but no input had games to read: no load
    /// began, and the indexes were left alone.
    NothingToLoad,
    /// Bulk load `load` finished: indexes rebuilt.
    Finished {
        /// `import_bulk_loads.id`.
        load: i64,
        /// What its finish did.
        report: FinishReport,
    },
    /// Bulk load `load` is unfinished: a rerun rebuilds the indexes.
    Unfinished {
        /// `import_bulk_loads.id`.
        load: i64,
    },
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::ingest::writer::Holder;

    /// Each notice's line as the engine printed it before it had a
    /// reporter, byte for byte (after the `pgnload: ` that `cmd::import`
    /// puts first).
    fn assert_read_as_printed<const N: usize>(cases: [(Notice<'_>, String); N]) {
        for (notice, text) in cases {
            assert_eq!(notice.to_string(), text, "{notice:?}");
        }
    }

    /// The notices about the run: the database, locks, retries, the bulk
    /// load, rejects.
    #[test]
    fn run_notices_read_as_the_engine_printed_them() {
        let error = Error::Conflict("lost the import lock".into());
        let cases: [(Notice<'_>, String); 9] = [
            (
                Notice::Advice("raise work_mem"),
                "advice: raise work_mem".into(),
            ),
            (
                Notice::DatabaseBusy,
                "a bulk load holds the database (or other imports block one); skipped (--no-wait)"
                    .into(),
            ),
            (
                Notice::ContinuingBulkLoad,
                "continuing an unfinished bulk load".into(),
            ),
            (
                Notice::Retrying {
                    error: &error,
                    delay: Duration::from_millis(250),
                },
                format!("{error}; retrying in 0.2s"),
            ),
            (
                Notice::ReconnectFailed(&error),
                format!("reconnect: {error}"),
            ),
            (
                Notice::TooManyRejects(5),
                "more than 5 games rejected; stopping (rerun to continue)".into(),
            ),
            (
                Notice::BulkLoad("merging duplicate positions"),
                "bulk load: merging duplicate positions".into(),
            ),
            (
                Notice::WaitingForImports,
                "waiting for the other imports to end (bulk mode needs the database to itself)"
                    .into(),
            ),
            (
                Notice::WaitingForBulkLoad,
                "waiting for a bulk load to finish".into(),
            ),
        ];
        assert_read_as_printed(cases);
    }

    /// The notices about one input.
    #[test]
    fn input_notices_read_as_the_engine_printed_them() {
        let error = Error::Conflict("lost the import lock".into());
        let cases: [(Notice<'_>, String); 7] = [
            (
                Notice::AlreadyImported("a.pgn"),
                "a.pgn: already imported, skipped".into(),
            ),
            (
                Notice::InputBusy("a.pgn"),
                "a.pgn: another pgnload is importing it; skipped (--no-wait)".into(),
            ),
            (
                Notice::WaitingForInput("a.pgn"),
                "a.pgn: another pgnload is importing it; waiting for it".into(),
            ),
            (
                Notice::Resuming {
                    input: "a.pgn",
                    games: 10,
                    bytes: 999,
                },
                "a.pgn: resuming after game #10 (byte 999 of the decompressed stream)".into(),
            ),
            (
                Notice::Grown {
                    input: "a.pgn",
                    from: 10,
                    to: 25,
                },
                "a.pgn: grew from 10 to 25 bytes since its interrupted import, its first 10 bytes \
                 unchanged; continuing that import"
                    .into(),
            ),
            (
                Notice::RejectedBefore {
                    input: "a.pgn",
                    games: 3,
                },
                "a.pgn: 3 of its games were rejected by earlier runs (kept in import_rejects; \
                 `pgnload status` counts them)"
                    .into(),
            ),
            (
                Notice::InputFailed {
                    input: "a.pgn",
                    error: &error,
                },
                format!("a.pgn: {}", crate::error::report(&error)),
            ),
        ];
        assert_read_as_printed(cases);
    }

    /// The notices about a game whose identity another game holds.
    #[test]
    fn conflict_notices_read_as_the_engine_printed_them() {
        let game = SourcePos {
            file: Arc::from("a.pgn"),
            game_number: 7,
            byte_offset: 120,
        };
        let conflict = |holder| Conflict {
            index: 0,
            source: "lichess".into(),
            external_id: "abcd1234".into(),
            holder,
        };
        let held = conflict(Holder {
            game_id: Some(42),
            file_id: Some(3),
            path: Some("/d/b.pgn".into()),
            game_number: Some(2),
            byte_offset: Some(0),
        });
        let same_input = conflict(Holder {
            game_id: None,
            file_id: Some(3),
            path: None,
            game_number: Some(5),
            byte_offset: None,
        });
        let cases: [(Notice<'_>, String); 3] = [
            (
                Notice::Conflict {
                    game: &game,
                    conflict: &held,
                },
                format!(
                    "{game}: id lichess:abcd1234 is already held by games.id 42 \
                     (/d/b.pgn, game #2 at byte 0) with other moves; not imported \
                     (recorded in import_conflicts)"
                ),
            ),
            (
                Notice::Conflict {
                    game: &game,
                    conflict: &same_input,
                },
                format!(
                    "{game}: id lichess:abcd1234 is already held by game #5 of the same input \
                     with other moves; not imported (recorded in import_conflicts)"
                ),
            ),
            (
                Notice::MoreConflicts,
                "more conflicts are not shown; see import_conflicts".into(),
            ),
        ];
        assert_read_as_printed(cases);
    }

    /// A failed input whose error names it already is not named twice.
    #[test]
    fn a_failure_naming_its_input_is_not_prefixed_again() {
        let error = Error::Input {
            file: "a.pgn".into(),
            message: "changed since its interrupted import".into(),
        };
        let text = Notice::InputFailed {
            input: "a.pgn",
            error: &error,
        }
        .to_string();
        assert_eq!(text, crate::error::report(&error));
        assert!(
            text.contains("a.pgn") && !text.starts_with("a.pgn: a.pgn"),
            "{text}"
        );
    }
}
