//! Configuration: one validated [`Settings`] built before any I/O.
//!
//! Precedence is command-line flag > environment variable > config file >
//! built-in default. Flags and variables are read by clap (each flag names
//! its `PGNLOAD_*` variable); the file is TOML with every key documented in
//! `config/pgnload.toml`; unknown keys are an error.
//!
//! It must not connect to anything nor read files other than the config
//! file: the settings are whole before any command starts. (Which server
//! is meant also depends on the `PG*` variables, read here; the libpq files
//! they may name are read at the first connection.)

use std::{
    num::NonZeroUsize,
    path::{Path, PathBuf},
};

use serde::Deserialize;

use crate::{
    chess::{
        reader::ParseLimits,
        scope::Scope,
        selection::{Selection, parse_since, parse_until},
    },
    error::Error,
    ingest::{pipeline::PipelineConfig, source::SourceOptions},
};

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
    pub mode: Option<LoadMode>,
    /// Only rated games.
    pub rated_only: Option<bool>,
    /// Both players rated at least this.
    pub min_rating: Option<u16>,
    /// Speeds kept (Lichess names).
    pub speeds: Option<Vec<String>>,
    /// Variants kept.
    pub variants: Option<Vec<String>>,
    /// First UTC day kept, `YYYY-MM-DD` (a month, `YYYY-MM`, from its first day).
    pub since: Option<String>,
    /// Last UTC day kept, `YYYY-MM-DD` (a month, `YYYY-MM`, to its last day).
    pub until: Option<String>,
    /// Leave out games with a BOT player.
    pub exclude_bots: Option<bool>,
    /// Positions and moves rows only for the first N plies.
    pub positions_max_ply: Option<u32>,
    /// Games only: no positions or moves rows past the start position.
    pub games_only: Option<bool>,
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
    pub mode: LoadMode,
    /// Which games an import keeps.
    pub scope: Scope,
    /// Where the database is, chosen once from `database_url`, the `PG*`
    /// variables and `data_dir`; a server's settings are resolved (its
    /// files read) on first use, once for the whole run.
    target: crate::store::db::Target,
}

/// Values given on the command line or in the environment (clap merges
/// those two): the layer [`Settings::resolve`] puts over the config file.
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
    pub mode: Option<LoadMode>,
    /// `import --rated-only`, `--min-rating`, … (flags only: each replaces
    /// its key of the config file when given).
    pub scope: ScopeOverrides,
}

/// The import scope options given on the command line.
#[derive(Debug, Clone, Default)]
pub struct ScopeOverrides {
    /// `--rated-only` (true when given).
    pub rated_only: bool,
    /// `--min-rating`, `--speeds`, `--variants`, `--since`, `--until`
    /// (an empty list, `None`: not given).
    pub selection: Selection,
    /// `--exclude-bots` (true when given).
    pub exclude_bots: bool,
    /// `--positions-max-ply`.
    pub positions_max_ply: Option<u32>,
    /// `--games-only` (true when given).
    pub games_only: bool,
}

/// Fewest explicit worker threads refused as absurd: above this (or the
/// core count, if larger) a thread only adds start-up and scheduling cost —
/// 1,024 threads took a second to start on two cores, 10,000 over a minute.
pub const MAX_THREADS_FLOOR: usize = 256;

/// Largest `batch_games`: a batch is one transaction, and the chunks of a
/// batch are allocated up front.
pub const MAX_BATCH_GAMES: usize = 1_000_000;

/// Largest `channel_capacity × batch_bytes`: what one stage may queue, so the
/// pipeline's memory stays a few GiB at worst (1 GiB at most per batch).
pub const MAX_QUEUED_BYTES: usize = 4 << 30;

/// Largest `max_game_bytes`: a game is buffered whole up to this size.
pub const MAX_GAME_BYTES: usize = 1 << 30;

/// Largest `max_plies`: replay keeps every position's FEN of a game in one
/// buffer that must stay far below 4 GiB (≈ 100 bytes per ply).
pub const MAX_PLIES: u32 = 1_000_000;

/// Largest `cache_positions` (2^32, ≈ 170 GB of map): beyond any machine's
/// memory.
pub const MAX_CACHE_POSITIONS: usize = 1 << 32;

/// Largest `retry_seconds` (one day): longer is a hang, not a retry.
pub const MAX_RETRY_SECONDS: u64 = 86_400;

/// The most worker threads `threads` may ask for on this machine.
pub fn max_threads() -> usize {
    std::thread::available_parallelism()
        .map_or(1, NonZeroUsize::get)
        .max(MAX_THREADS_FLOOR)
}

/// A setting as an error should name it: its flag when the value came from
/// the command line or the environment (`flag` is `Some`), else its key in
/// the config file (defaults are always within bounds).
fn origin(flag: Option<&str>, key: &str) -> String {
    match flag {
        Some(flag) => flag.to_owned(),
        None => format!("{key} in the config file"),
    }
}

/// `value` if it is within `min..=max`; else an error naming the setting
/// (`origin`), the bounds and why they exist.
fn within<T: PartialOrd + std::fmt::Display + Copy>(
    value: T,
    min: T,
    max: T,
    origin: &str,
    why: &str,
) -> Result<T, Error> {
    if value < min || value > max {
        Err(Error::Config(format!(
            "{origin} is {value}; it must be between {min} and {max} ({why})"
        )))
    } else {
        Ok(value)
    }
}

impl Settings {
    /// The one merge of the settings, by one rule for every setting: the
    /// command line (`cli`, gathered by the binary in one place; clap puts
    /// a flag's environment variable in the flag's place) over the config
    /// file over the built-in default (`cli.x.or(file.x).unwrap_or(default)`;
    /// a list flag given replaces its key). Refuses any value that would
    /// make a run hang, overflow or exhaust memory, naming the setting as
    /// the user gave it (flag or key).
    pub fn resolve(file: FileConfig, cli: Overrides) -> Result<Settings, Error> {
        let pipeline = resolve_pipeline(&file.pipeline, cli.batch_games)?;
        let threads = within(
            cli.threads.or(file.threads).unwrap_or(0),
            0,
            max_threads(),
            &origin(
                cli.threads.and(Some("--threads (or PGNLOAD_THREADS)")),
                "threads",
            ),
            &format!(
                "0 = one per core; more than the larger of {MAX_THREADS_FLOOR} and the core \
                 count only cost start-up time"
            ),
        )?;
        let cache_positions = within(
            cli.cache_positions
                .or(file.import.cache_positions)
                .unwrap_or(DEFAULT_CACHE_POSITIONS),
            0,
            MAX_CACHE_POSITIONS,
            &origin(
                cli.cache_positions
                    .and(Some("--cache-positions (or PGNLOAD_CACHE_POSITIONS)")),
                "import.cache_positions",
            ),
            "≈ 40 bytes of memory each",
        )?;
        let scope = resolve_scope(&file.import, cli.scope)?;
        let retry_seconds = within(
            file.import.retry_seconds.unwrap_or(120),
            0,
            MAX_RETRY_SECONDS,
            &origin(None, "import.retry_seconds"),
            "at most one day of reconnecting",
        )?;
        let database_url = cli.database_url.or(file.database_url);
        let explicit_dir = cli.data_dir.or(file.data_dir);
        let data_dir = explicit_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from("./pgnload-data"));
        Ok(Settings {
            target: crate::store::db::Target::choose(
                database_url.clone(),
                data_dir.clone(),
                explicit_dir.is_some(),
            ),
            database_url,
            data_dir,
            threads,
            pipeline,
            source: storable_source(cli.source.or(file.import.source))?,
            cache_positions,
            max_rejects: cli.max_rejects.or(file.import.max_rejects).unwrap_or(0),
            retry_seconds,
            mode: cli.mode.or(file.import.mode).unwrap_or(LoadMode::Auto),
            scope,
        })
    }

    /// Where the database is.
    pub fn target(&self) -> crate::store::db::Target {
        self.target.clone()
    }
}

/// The `[pipeline]` section over its defaults, with `--batch-games`
/// (`cli_batch_games`) over its key: every size the import's memory and
/// transactions depend on, each within its bounds.
fn resolve_pipeline(
    p: &PipelineSection,
    cli_batch_games: Option<NonZeroUsize>,
) -> Result<PipelineConfig, Error> {
    let defaults = PipelineConfig::default();
    let zstd_window_log_max = within(
        p.zstd_window_log_max
            .unwrap_or(defaults.source.zstd_window_log_max),
        10,
        31,
        &origin(None, "pipeline.zstd_window_log_max"),
        "a power of two; zstd allows no more",
    )?;
    let batch_games = within(
        cli_batch_games
            .or(p.batch_games)
            .map_or(defaults.batch_games, NonZeroUsize::get),
        1,
        MAX_BATCH_GAMES,
        &origin(
            cli_batch_games.and(Some("--batch-games (or PGNLOAD_BATCH_GAMES)")),
            "pipeline.batch_games",
        ),
        "games per transaction",
    )?;
    let batch_bytes = p
        .batch_bytes
        .map_or(defaults.batch_bytes, NonZeroUsize::get);
    let channel_capacity = p
        .channel_capacity
        .map_or(defaults.channel_capacity, NonZeroUsize::get);
    within(
        batch_bytes,
        1,
        MAX_QUEUED_BYTES / channel_capacity,
        &origin(None, "pipeline.batch_bytes"),
        &format!(
            "pipeline.channel_capacity = {channel_capacity} batches of it are queued per stage, \
             at most {MAX_QUEUED_BYTES} bytes"
        ),
    )?;
    let max_game_bytes = within(
        p.max_game_bytes
            .map_or(defaults.limits.max_game_bytes, |n| n.get() as u64),
        1,
        MAX_GAME_BYTES as u64,
        &origin(None, "pipeline.max_game_bytes"),
        "a game is held in memory whole up to this size",
    )?;
    let max_plies = within(
        p.max_plies.unwrap_or(defaults.limits.max_plies),
        1,
        MAX_PLIES,
        &origin(None, "pipeline.max_plies"),
        "every position of a game is kept in memory",
    )?;
    Ok(PipelineConfig {
        batch_games,
        batch_bytes,
        channel_capacity,
        limits: ParseLimits {
            max_plies,
            max_game_bytes,
        },
        source: SourceOptions {
            zstd_window_log_max,
        },
    })
}

/// The import scope: each flag given replaces its key of the config file
/// (a flag can only narrow: `rated_only = true` in the file is not undone
/// from the command line). Refuses an unknown speed or variant, a day that
/// is not `YYYY-MM-DD` (or a month), and `since` after `until` (a scope keeping nothing
/// is a mistake, not a request).
fn resolve_scope(file: &ImportSection, cli: ScopeOverrides) -> Result<Scope, Error> {
    fn given<T>(flag: Vec<T>, file: Vec<T>) -> Vec<T> {
        if flag.is_empty() { file } else { flag }
    }
    let positions_max_ply = positions_cap(file, &cli)?;
    let flags = cli.selection;
    let file_selection = file_selection(file)?;
    let selection = Selection {
        speeds: given(flags.speeds, file_selection.speeds),
        variants: given(flags.variants, file_selection.variants),
        since: flags.since.or(file_selection.since),
        until: flags.until.or(file_selection.until),
        min_rating: flags.min_rating.or(file_selection.min_rating),
    };
    selection.check_dates().map_err(|e| {
        Error::Config(format!(
            "the import scope's since ({}) is after its until ({}): no game would be kept",
            e.since, e.until
        ))
    })?;
    Ok(Scope {
        rated_only: cli.rated_only || file.rated_only.unwrap_or(false),
        selection,
        exclude_bots: cli.exclude_bots || file.exclude_bots.unwrap_or(false),
        positions_max_ply,
    })
}

/// The `[import]` keys of the criteria shared with `games` and `explore`,
/// read by the parsers the command line uses; a value they refuse is an
/// error naming its key.
fn file_selection(file: &ImportSection) -> Result<Selection, Error> {
    fn each<T: std::str::FromStr<Err: std::fmt::Display>>(
        name: &str,
        texts: Option<&[String]>,
    ) -> Result<Vec<T>, Error> {
        texts
            .into_iter()
            .flatten()
            .map(|text| {
                text.parse()
                    .map_err(|e| Error::Config(format!("{}: {e}", key(name))))
            })
            .collect()
    }
    fn key(name: &str) -> String {
        origin(None, &format!("import.{name}"))
    }
    let day = |name: &str, text: &Option<String>, parse: fn(&str) -> Result<_, String>| {
        text.as_deref()
            .map(|text| parse(text).map_err(|e| Error::Config(format!("{}: {e}", key(name)))))
            .transpose()
    };
    Ok(Selection {
        speeds: each("speeds", file.speeds.as_deref())?,
        variants: each("variants", file.variants.as_deref())?,
        since: day("since", &file.since, parse_since)?,
        until: day("until", &file.until, parse_until)?,
        min_rating: file.min_rating,
    })
}

/// The positions cap: `--games-only` is a cap of 0; a flag replaces both
/// keys of the config file; the two keys together are refused (which one
/// was meant cannot be told).
fn positions_cap(file: &ImportSection, cli: &ScopeOverrides) -> Result<Option<u32>, Error> {
    if cli.games_only {
        return Ok(Some(0));
    }
    if cli.positions_max_ply.is_some() {
        return Ok(cli.positions_max_ply);
    }
    match (file.games_only, file.positions_max_ply) {
        (Some(true), Some(cap)) => Err(Error::Config(format!(
            "{} and {} = {cap} are both set: games_only is a cap of 0; keep one",
            origin(None, "import.games_only"),
            origin(None, "import.positions_max_ply"),
        ))),
        (Some(true), None) => Ok(Some(0)),
        (_, cap) => Ok(cap),
    }
}

/// The load mode the user asks for (`--mode`, `PGNLOAD_MODE`,
/// `import.mode`): a setting, so it lives with the settings; the import
/// decides what it means against the database (`ingest::bulk::choose`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LoadMode {
    /// Bulk when the database holds fewer positions than the inputs are
    /// expected to bring and no other import is running, but never on a
    /// database given by URL that already holds games (other users rely
    /// on its indexes); else incremental.
    Auto,
    /// Drop indexes, dedup in memory, rebuild at the end; takes the
    /// database for itself.
    Bulk,
    /// Keep every index; get-or-create positions; runs beside other imports.
    Incremental,
}

impl LoadMode {
    /// Every mode, in the order `--help` lists them.
    pub const ALL: [LoadMode; 3] = [LoadMode::Auto, LoadMode::Bulk, LoadMode::Incremental];

    /// Its name on the command line and in the config file.
    pub fn name(self) -> &'static str {
        match self {
            LoadMode::Auto => "auto",
            LoadMode::Bulk => "bulk",
            LoadMode::Incremental => "incremental",
        }
    }
}

/// Longest `--source` label: it is part of the unique keys of players
/// and events (with a name of up to `model::MAX_NAME_BYTES`), whose rows
/// PostgreSQL's B-tree caps at about 2.7 kB.
pub const MAX_SOURCE_BYTES: usize = 64;

/// The `--source` label, if it can be stored: not empty, no NUL byte
/// (PostgreSQL text cannot hold one), at most [`MAX_SOURCE_BYTES`], and not
/// `lichess`, which names the games identified by their Lichess id.
fn storable_source(source: Option<String>) -> Result<Option<String>, Error> {
    let Some(label) = source else {
        return Ok(None);
    };
    let problem = if label.trim().is_empty() {
        Some("is empty".to_owned())
    } else if label.contains('\0') {
        Some("holds a NUL byte".to_owned())
    } else if label.len() > MAX_SOURCE_BYTES {
        Some(format!(
            "is {} bytes long; at most {MAX_SOURCE_BYTES}",
            label.len()
        ))
    } else if label == "lichess" {
        Some("is `lichess`, the label of games identified by their Lichess id".to_owned())
    } else {
        None
    };
    match problem {
        Some(problem) => Err(Error::Config(format!(
            "--source (or PGNLOAD_SOURCE, or import.source) {problem}"
        ))),
        None => Ok(Some(label)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_labels_that_cannot_be_stored_are_refused() {
        for bad in ["", "  ", "a\0b", "lichess"] {
            assert!(storable_source(Some(bad.to_owned())).is_err(), "{bad:?}");
        }
        assert!(storable_source(Some("x".repeat(MAX_SOURCE_BYTES + 1))).is_err());
        assert_eq!(
            storable_source(Some("twic".to_owned())).expect("fine"),
            Some("twic".to_owned())
        );
        assert_eq!(storable_source(None).expect("fine"), None);
    }

    #[test]
    fn shipped_config_file_parses_and_matches_the_defaults() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/pgnload.toml");
        let file = load_file(&path).expect("config/pgnload.toml is valid");
        let from_file = Settings::resolve(file, Overrides::default()).expect("valid");
        let defaults =
            Settings::resolve(FileConfig::default(), Overrides::default()).expect("valid");
        assert_eq!(format!("{from_file:?}"), format!("{defaults:?}"));
    }

    #[test]
    fn scope_flags_replace_their_config_keys_and_bad_values_are_named() {
        let file: FileConfig = toml::from_str(
            "[import]\nspeeds = [\"blitz\"]\nvariants = [\"King of the Hill\"]\n\
             min_rating = 1500\nsince = \"2024-01-01\"\nexclude_bots = true",
        )
        .expect("valid");
        let mut cli = Overrides::default();
        cli.scope.selection.speeds = vec![crate::chess::category::Speed::Rapid];
        cli.scope.rated_only = true;
        let scope = Settings::resolve(file, cli).expect("valid").scope;
        assert_eq!(
            scope.identity(),
            "rated-only min-rating=1500 speeds=rapid variants=king_of_the_hill \
             since=2024-01-01 exclude-bots"
        );
        for (bad, named) in [
            ("speeds = [\"fast\"]", "import.speeds"),
            ("variants = [\"shogi\"]", "import.variants"),
            ("until = \"2024-02-30\"", "import.until"),
            (
                "since = \"2024-03-02\"\nuntil = \"2024-03-01\"",
                "after its until",
            ),
        ] {
            let file: FileConfig = toml::from_str(&format!("[import]\n{bad}")).expect("toml");
            let message = Settings::resolve(file, Overrides::default())
                .expect_err(bad)
                .to_string();
            assert!(message.contains(named), "{bad}: {message}");
        }
        assert!(toml::from_str::<FileConfig>("[import]\nmin_rating = -5").is_err());
    }

    #[test]
    fn positions_cap_flags_replace_both_keys_and_both_keys_are_refused() {
        let cap = |toml_text: &str, cli: ScopeOverrides| {
            let file: FileConfig = toml::from_str(toml_text).expect("toml");
            let overrides = Overrides {
                scope: cli,
                ..Overrides::default()
            };
            Settings::resolve(file, overrides).map(|s| s.scope.positions_max_ply)
        };
        let none = ScopeOverrides::default;
        assert_eq!(
            cap("[import]\npositions_max_ply = 50", none()).ok(),
            Some(Some(50))
        );
        assert_eq!(
            cap("[import]\ngames_only = true", none()).ok(),
            Some(Some(0))
        );
        assert_eq!(cap("[import]\ngames_only = false", none()).ok(), Some(None));
        let flag = ScopeOverrides {
            positions_max_ply: Some(20),
            ..none()
        };
        assert_eq!(
            cap("[import]\ngames_only = true", flag).ok(),
            Some(Some(20))
        );
        let games_only = ScopeOverrides {
            games_only: true,
            ..none()
        };
        assert_eq!(
            cap("[import]\npositions_max_ply = 9", games_only).ok(),
            Some(Some(0))
        );
        let both = cap("[import]\ngames_only = true\npositions_max_ply = 9", none())
            .expect_err("both keys");
        assert!(both.to_string().contains("import.games_only"), "{both}");
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

    /// The error of resolving `toml` with `cli`, which must be one.
    fn refused(toml: &str, cli: Overrides) -> String {
        let file: FileConfig = toml::from_str(toml).expect("valid TOML");
        match Settings::resolve(file, cli) {
            Ok(settings) => panic!("accepted: {settings:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn absurd_thread_counts_are_refused_naming_their_origin() {
        let message = refused(
            "",
            Overrides {
                threads: Some(10_000),
                ..Overrides::default()
            },
        );
        assert!(
            message.contains("--threads (or PGNLOAD_THREADS) is 10000"),
            "{message}"
        );
        let message = refused(
            &format!("threads = {}", max_threads() + 1),
            Overrides::default(),
        );
        assert!(message.contains("threads in the config file"), "{message}");
        let file: FileConfig =
            toml::from_str(&format!("threads = {}", max_threads())).expect("toml");
        assert!(Settings::resolve(file, Overrides::default()).is_ok());
    }

    #[test]
    fn numeric_settings_that_would_hang_or_exhaust_memory_are_refused() {
        for (toml, name) in [
            (
                "[pipeline]\nbatch_games = 1000000000000",
                "pipeline.batch_games",
            ),
            (
                "[pipeline]\nbatch_bytes = 1099511627776",
                "pipeline.batch_bytes",
            ),
            (
                "[pipeline]\nchannel_capacity = 100000000000",
                "pipeline.batch_bytes",
            ),
            (
                "[pipeline]\nmax_game_bytes = 1099511627776",
                "pipeline.max_game_bytes",
            ),
            ("[pipeline]\nmax_plies = 0", "pipeline.max_plies"),
            ("[pipeline]\nmax_plies = 4000000000", "pipeline.max_plies"),
            (
                "[pipeline]\nzstd_window_log_max = 40",
                "pipeline.zstd_window_log_max",
            ),
            (
                "[import]\ncache_positions = 1099511627776",
                "import.cache_positions",
            ),
            (
                "[import]\nretry_seconds = 18446744073709551615",
                "import.retry_seconds",
            ),
        ] {
            let message = refused(toml, Overrides::default());
            assert!(
                message.contains(&format!("{name} in the config file is")),
                "{message}"
            );
        }
        let message = refused(
            "",
            Overrides {
                batch_games: NonZeroUsize::new(usize::MAX),
                cache_positions: Some(usize::MAX),
                ..Overrides::default()
            },
        );
        assert!(message.contains("--batch-games"), "{message}");
        let message = refused(
            "",
            Overrides {
                cache_positions: Some(usize::MAX),
                ..Overrides::default()
            },
        );
        assert!(message.contains("--cache-positions"), "{message}");
    }

    #[test]
    fn zstd_window_limit_is_bounded() {
        let file: FileConfig =
            toml::from_str("[pipeline]\nzstd_window_log_max = 40").expect("toml");
        assert!(Settings::resolve(file, Overrides::default()).is_err());
    }
}
