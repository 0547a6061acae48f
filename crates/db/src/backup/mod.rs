//! `pgnload db backup` / `pgnload db restore`: PostgreSQL's own `pg_dump`
//! and `pg_restore`, pointed at the database pgnload itself uses.
//!
//! pgnload does not write its own dump format: `pg_dump` takes one
//! consistent snapshot of every table (an import running meanwhile is
//! either in it up to a committed checkpoint or not at all), and its
//! archives are what any PostgreSQL operator can read. What pgnload adds is
//! what is easy to get wrong by hand: reaching the embedded cluster (start
//! it, its socket, its user), taking the tools of the server's own major
//! version, passing a password without showing it (`ps` shows every
//! argument, so it goes into a 0600 password file), never leaving a
//! half-written archive where a backup is expected, and never restoring
//! into a database that already holds something, where `pg_restore` would
//! merge two histories.

mod archive;
mod dump;
mod error;
mod link;
mod restore;
mod run;
mod tools;

use std::{num::NonZeroUsize, path::Path};

pub use dump::backup;
pub use error::BackupError;
pub use restore::restore;
pub use run::Interrupts;

/// The archive formats pgnload writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// One file (`pg_dump --format=custom`), compressed; restored in
    /// parallel too, but written by one job.
    Custom,
    /// A directory of one file per table (`pg_dump --format=directory`),
    /// written and restored with parallel jobs.
    Directory,
}

impl Format {
    /// Both formats, in the order `--help` lists them.
    pub const ALL: [Format; 2] = [Format::Custom, Format::Directory];

    /// The format a path asks for when none is given: a directory for a
    /// path ending in `/` or naming an existing directory, else one file.
    pub fn for_path(path: &Path) -> Format {
        if path.as_os_str().as_encoded_bytes().ends_with(b"/") || path.is_dir() {
            Format::Directory
        } else {
            Format::Custom
        }
    }

    /// `pg_dump`'s name for it, which is also its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Format::Custom => "custom",
            Format::Directory => "directory",
        }
    }
}

/// What [`backup`] and [`restore`] did, for the summary line.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Bytes of the archive (all files of a directory archive).
    pub bytes: u64,
    /// Wall time of the tool.
    pub seconds: f64,
    /// Migrations applied after a restore (the backup's schema was older).
    pub migrations: Vec<&'static str>,
}

/// One job per core, the default for directory archives.
fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, NonZeroUsize::get)
}
