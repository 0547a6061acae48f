//! `pgnload verify`: recompute what an import stored and report every
//! difference. The checks are pure functions ([`checks`], [`digest`]) so
//! they can be unit-tested without a database; [`report`] writes what they
//! find. This layer must not depend on the CLI (`cmd`) or on the import
//! (`ingest`): it reads what any importer stored.

pub mod checks;
pub mod digest;
pub mod report;

pub use checks::*;
pub use digest::*;
pub use report::*;
