//! The import: inputs read, split and replayed on worker threads
//! (`source`, `pipeline`), positions deduplicated in memory (`dedup`),
//! batches written in two phases (`writer`), bulk loads (`bulk`), and the
//! engine that drives them with checkpoints, retries (`retry`) and resume
//! (`engine`), telling the front end what happens through a reporter
//! (`report`); and one game at a time, out (`delete`) or in (`put`).
//!
//! It exists apart from `cmd` so that importing needs no command line, and
//! apart from `store` so that PostgreSQL's own concerns (connections,
//! migrations, the private cluster) are not mixed with the import's. It
//! must not parse arguments nor print summaries (that is `cmd::import`), and
//! the chess core must never reach back into it.

pub(crate) mod bulk;
pub(crate) mod dedup;
pub mod delete;
pub mod engine;
pub(crate) mod exchange;
pub mod pipeline;
pub mod put;
pub mod replay;
pub mod report;
pub(crate) mod retry;
pub mod source;
pub(crate) mod writer;
