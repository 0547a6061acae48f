//! Configuration: one validated [`Settings`] built before any I/O.
//!
//! Precedence is command-line flag > environment variable > config file >
//! built-in default. Flags and variables are read by clap (each flag names
//! its `PGNLOAD_*` variable); the file is TOML with every key documented in
//! `config/pgnload.toml`; unknown keys are an error.

use std::{
    num::NonZeroUsize,
    path::{Path, PathBuf},
};

use serde::Deserialize;

use crate::{error::Error, pipeline::PipelineConfig, reader::ParseLimits, source::SourceOptions};

/// Positions in the dedup map by default: ~40 bytes each with the hash
/// tables' slack (see `dedup`), so ~500 MiB at most, leaving room for the
/// pipeline's batches within 1 GiB of RSS; in bulk mode a load with fewer
/// distinct positions than this needs no duplicate pass.
pub const DEFAULT_CACHE_POSITIONS: usize = 12_000_000;

/// The config file as written (every key optional).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// `database_url`.
    pub database_url: Option<String>,
    /// `data_dir`.
    pub data_dir: Option<PathBuf>,
    /// `threads`.
    pub threads: Option<usize>,
    /// `[pipeline]`.
    #[serde(default)]
    pub pipeline: PipelineSection,
    /// `[import]`.
    #[serde(default)]
    pub import: ImportSection,
}

/// `[pipeline]` keys.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineSection {
    /// Games per batch.
    pub batch_games: Option<NonZeroUsize>,
    /// Bytes per batch.
    pub batch_bytes: Option<NonZeroUsize>,
    /// Channel capacity in batches.
    pub channel_capacity: Option<NonZeroUsize>,
    /// Per-game byte limit.
    pub max_game_bytes: Option<NonZeroUsize>,
    /// Per-game ply limit.
    pub max_plies: Option<u32>,
    /// zstd window limit (log2).
    pub zstd_window_log_max: Option<u32>,
}

/// `[import]` keys.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImportSection {
    /// Source label of non-Lichess games.
    pub source: Option<String>,
    /// Dedup cache size in positions.
    pub cache_positions: Option<usize>,
    /// Reject threshold.
    pub max_rejects: Option<u64>,
    /// Reconnect budget in seconds.
    pub retry_seconds: Option<u64>,
    /// auto, bulk or incremental.
    pub mode: Option<crate::bulk::Mode>,
}

/// Reads and parses a config file.
pub fn load_file(path: &Path) -> Result<FileConfig, Error> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::Config(format!("{}: {e}", path.display())))?;
    toml::from_str(&text).map_err(|e| Error::Config(format!("{}: {e}", path.display())))
}

/// Settings after precedence is applied.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Connection string, if any.
    pub database_url: Option<String>,
    /// Embedded cluster directory.
    pub data_dir: PathBuf,
    /// Worker threads (0 = per core).
    pub threads: usize,
    /// Parse-side sizes.
    pub pipeline: PipelineConfig,
    /// Source label override for non-Lichess games.
    pub source: Option<String>,
    /// Dedup cache capacity.
    pub cache_positions: usize,
    /// 0 = unlimited.
    pub max_rejects: u64,
    /// Reconnect budget.
    pub retry_seconds: u64,
    /// How positions are written.
    pub mode: crate::bulk::Mode,
}

/// Values given on the command line or in the environment (clap merges those two).
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `--database-url` / `DATABASE_URL`.
    pub database_url: Option<String>,
    /// `--data-dir` / `PGNLOAD_DATA_DIR`.
    pub data_dir: Option<PathBuf>,
    /// `--threads` / `PGNLOAD_THREADS`.
    pub threads: Option<usize>,
    /// `--batch-games` / `PGNLOAD_BATCH_GAMES`.
    pub batch_games: Option<NonZeroUsize>,
    /// `--cache-positions` / `PGNLOAD_CACHE_POSITIONS`.
    pub cache_positions: Option<usize>,
    /// `--source` / `PGNLOAD_SOURCE`.
    pub source: Option<String>,
    /// `--max-rejects` / `PGNLOAD_MAX_REJECTS`.
    pub max_rejects: Option<u64>,
    /// `--mode` / `PGNLOAD_MODE`.
    pub mode: Option<crate::bulk::Mode>,
}

impl Settings {
    /// Applies the precedence rules.
    pub fn resolve(file: FileConfig, cli: Overrides) -> Result<Settings, Error> {
        let defaults = PipelineConfig::default();
        let p = file.pipeline;
        let zstd_window_log_max = p
            .zstd_window_log_max
            .unwrap_or(defaults.source.zstd_window_log_max);
        if !(10..=31).contains(&zstd_window_log_max) {
            return Err(Error::Config(format!(
                "pipeline.zstd_window_log_max must be between 10 and 31, not {zstd_window_log_max}"
            )));
        }
        let pipeline = PipelineConfig {
            batch_games: cli
                .batch_games
                .or(p.batch_games)
                .map_or(defaults.batch_games, NonZeroUsize::get),
            batch_bytes: p
                .batch_bytes
                .map_or(defaults.batch_bytes, NonZeroUsize::get),
            channel_capacity: p
                .channel_capacity
                .map_or(defaults.channel_capacity, NonZeroUsize::get),
            limits: ParseLimits {
                max_plies: p.max_plies.unwrap_or(defaults.limits.max_plies),
                max_game_bytes: p
                    .max_game_bytes
                    .map_or(defaults.limits.max_game_bytes, |n| n.get() as u64),
            },
            source: SourceOptions {
                zstd_window_log_max,
            },
        };
        Ok(Settings {
            database_url: cli.database_url.or(file.database_url),
            data_dir: cli
                .data_dir
                .or(file.data_dir)
                .unwrap_or_else(|| PathBuf::from("./pgnload-data")),
            threads: cli.threads.or(file.threads).unwrap_or(0),
            pipeline,
            source: cli.source.or(file.import.source),
            cache_positions: cli
                .cache_positions
                .or(file.import.cache_positions)
                .unwrap_or(DEFAULT_CACHE_POSITIONS),
            max_rejects: cli.max_rejects.or(file.import.max_rejects).unwrap_or(0),
            retry_seconds: file.import.retry_seconds.unwrap_or(120),
            mode: cli
                .mode
                .or(file.import.mode)
                .unwrap_or(crate::bulk::Mode::Auto),
        })
    }

    /// Where the database is.
    pub fn target(&self) -> crate::db::Target {
        crate::db::Target::choose(self.database_url.clone(), self.data_dir.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_config_file_parses_and_matches_the_defaults() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/pgnload.toml");
        let file = load_file(&path).expect("config/pgnload.toml is valid");
        let from_file = Settings::resolve(file, Overrides::default()).expect("valid");
        let defaults =
            Settings::resolve(FileConfig::default(), Overrides::default()).expect("valid");
        assert_eq!(format!("{from_file:?}"), format!("{defaults:?}"));
    }

    #[test]
    fn unknown_keys_are_errors() {
        assert!(toml::from_str::<FileConfig>("bogus = 1").is_err());
        assert!(toml::from_str::<FileConfig>("[pipeline]\nbatch_gmes = 5").is_err());
    }

    #[test]
    fn command_line_beats_file_beats_default() {
        let file: FileConfig =
            toml::from_str("threads = 3\n[import]\ncache_positions = 10").expect("valid");
        let settings = Settings::resolve(
            file,
            Overrides {
                threads: Some(1),
                ..Overrides::default()
            },
        )
        .expect("valid");
        assert_eq!(settings.threads, 1);
        assert_eq!(settings.cache_positions, 10);
        assert_eq!(settings.max_rejects, 0);
    }

    #[test]
    fn zstd_window_limit_is_bounded() {
        let file: FileConfig =
            toml::from_str("[pipeline]\nzstd_window_log_max = 40").expect("toml");
        assert!(Settings::resolve(file, Overrides::default()).is_err());
    }
}
