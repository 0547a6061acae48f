//! The import pipeline.
pub mod bulk;
pub mod dedup;
pub mod engine;
pub mod pipeline;
pub mod source;
pub mod writer;
