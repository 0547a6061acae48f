//! pgnload's integration tests: one binary, a module per concern.
//!
//! Tests that need python-chess fail (not skip) when it is missing: `.ci/run`
//! installs it, and a parity test that silently skips proves nothing.

mod bulk;
mod common;
mod embedded;
mod import;
mod parity;
mod resume;
mod robustness;
mod secrets;
mod status;
mod verify;
