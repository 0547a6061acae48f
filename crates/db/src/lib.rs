//! PostgreSQL itself: connecting (with passwords redacted from every
//! message), the migrations of `sql/`, pgnload's private cluster, backups with
//! PostgreSQL's own tools, and advice
//! on a server pgnload does not own.
//!
//! It exists so that every command reaches the database the same way. It
//! must not know about games, batches or checkpoints (that is `ingest`) nor
//! print anything but the server's own diagnostics.

/// `eprintln!` that cannot panic. The standard macro panics when stderr
/// cannot be written (a full disk, `2>/dev/full`; a reader gone,
/// `2>&1 | head -1`, since Rust ignores `SIGPIPE`), and a panic is exit
/// code 101, which no script expects. A message that cannot be written is
/// lost; the command goes on and exits with the code that says how it
/// ended. Every message to stderr goes through here (`tests/layering.rs`
/// checks); it is defined in the lowest crate that prints.
#[macro_export]
macro_rules! stderr_line {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

pub mod backup;
pub mod child;
pub mod conninfo;
pub mod db;
pub mod embedded;
pub mod error;
pub mod progress;
pub mod shards;
pub mod tuning;

pub use error::{Error, Result};
