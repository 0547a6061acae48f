//! Verification: recompute what an import stored and report every
//! difference, so that a database (ours or one another importer filled) can
//! be trusted or repaired. The checks are pure functions ([`checks`],
//! [`digest`]), unit-tested without a database; [`engine`] streams rows to
//! them and [`report`] writes what they find.
//!
//! It must not depend on the CLI (`cmd`, clap) nor on the import engine: it
//! reads only what is stored (it opens a digest file with
//! `ingest::source`, as `import` opens its inputs), and it never writes to
//! the database.

pub mod checks;
pub mod digest;
pub mod engine;
pub mod report;

pub use checks::*;
pub use digest::*;
pub use report::*;
