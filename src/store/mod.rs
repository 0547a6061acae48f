//! PostgreSQL itself: connecting (with passwords redacted from every
//! message), the migrations of `sql/`, pgnload's private cluster, backups with
//! PostgreSQL's own tools, and advice
//! on a server pgnload does not own.
//!
//! It exists so that every command reaches the database the same way. It
//! must not know about games, batches or checkpoints (that is `ingest`) nor
//! print anything but the server's own diagnostics.

pub mod backup;
pub mod child;
pub mod counts;
pub mod db;
pub mod embedded;
pub mod shards;
pub(crate) mod tuning;
