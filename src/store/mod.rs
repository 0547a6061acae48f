//! PostgreSQL itself.
pub mod db;
pub mod embedded;
pub mod tuning;
