//! pgnload's integration tests: one binary, a module per concern.
//!
//! Tests that need python-chess fail (not skip) when it is missing: `.ci/run`
//! installs it, and a parity test that silently skips proves nothing.

mod accounting;
mod annotations;
mod backup;
mod bulk;
mod common;
mod connecting;
mod crash;
mod embedded;
mod encroissant;
mod exchange;
mod exchange_import;
mod explorer;
mod explorer_lichess;
mod faults;
mod footprint;
mod hostile;
mod import;
mod inputs;
mod layering;
mod machine_output;
mod nightly;
mod parity;
mod progress;
mod put;
mod query;
mod reliability;
mod resume;
mod robustness;
mod runs;
mod schema;
mod scope;
mod secrets;
mod serve;
mod shard_cluster;
mod shards;
mod status;
mod storage;
mod verify;
