//! Command-line definition (clap). Kept apart from the commands so help text
//! and flags live in one place. Every global flag names the environment
//! variable it can come from; see `config/pgnload.toml` for the file form.
//!
//! It must not act on the flags: `config` resolves them, `cmd` runs them.

use std::{ffi::OsString, path::PathBuf};

use chrono::NaiveDate;

use clap::{
    Args, Parser, Subcommand,
    builder::{
        OsStringValueParser, PossibleValue, PossibleValuesParser, StringValueParser,
        TypedValueParser,
    },
};

use crate::{
    chess::{
        category::Speed,
        model::{GameResult, GameVariant},
        selection::{Selection, parse_since, parse_until},
    },
    cmd::{
        db::DbCommand, explore::ExploreArgs, export::ExportArgs, game::GameCommand,
        games::GamesArgs, hash::HashArgs, import::ImportArgs, positions::PositionsArgs,
        serve::ServeArgs, status::StatusArgs, verify::VerifyArgs,
    },
    config::{LoadMode, Overrides, ScopeOverrides},
    query::filter::{FilterArgs, Side, parse_result},
    store::backup::Format as BackupFormat,
};

/// Bulk-import chess games from PGN into PostgreSQL.
#[derive(Debug, Parser)]
#[command(name = "pgnload", version, about, long_about = None)]
pub struct Cli {
    /// Options shared by every command.
    #[command(flatten)]
    pub global: GlobalArgs,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Options shared by every command.
#[derive(Debug, Clone, Args)]
pub struct GlobalArgs {
    /// TOML config file (every key is documented in config/pgnload.toml).
    #[arg(long, global = true, env = "PGNLOAD_CONFIG")]
    pub config: Option<PathBuf>,
    /// PostgreSQL connection string, URL or key=value, read as libpq reads
    /// it (sslmode, sslrootcert, service, ~/.pgpass, PG* variables...).
    /// Without one: the server the PG* variables name (PGHOST, PGPORT,
    /// PGDATABASE, PGUSER, PGSERVICE...) unless --data-dir is given, else
    /// pgnload's own cluster in --data-dir.
    #[arg(long, global = true, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
    /// Data directory of the embedded cluster [default: ./pgnload-data].
    #[arg(long, global = true, env = "PGNLOAD_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Worker threads for parsing and replay (0 = one per core; at most 256
    /// or the core count, if larger).
    #[arg(long, global = true, env = "PGNLOAD_THREADS")]
    pub threads: Option<usize>,
    /// No progress output nor advice, only the summary, warnings and errors.
    #[arg(long, short, global = true, env = "PGNLOAD_QUIET")]
    pub quiet: bool,
}

impl Cli {
    /// The flag/environment layer of the settings (clap reads each
    /// flag's environment variable as the flag): every flag that is a
    /// setting, of every command, gathered here and nowhere else;
    /// [`crate::config::Settings::resolve`] lays it over the config file.
    pub fn overrides(&self) -> Overrides {
        let global = &self.global;
        let mut overrides = Overrides {
            database_url: global.database_url.clone(),
            data_dir: global.data_dir.clone(),
            threads: global.threads,
            ..Overrides::default()
        };
        match &self.command {
            Command::Import(args) => {
                overrides.source.clone_from(&args.source);
                overrides.cache_positions = args.cache_positions;
                overrides.batch_games = args.batch_games;
                overrides.max_rejects = args.max_rejects;
                overrides.mode = args.mode;
                overrides.scope = ScopeOverrides {
                    rated_only: args.rated_only,
                    selection: args.selection.selection(args.variants.clone()),
                    exclude_bots: args.exclude_bots,
                    positions_max_ply: args.positions_max_ply,
                    games_only: args.games_only,
                };
            }
            Command::Game(GameCommand::Put(args)) => overrides.source.clone_from(&args.source),
            _ => {}
        }
        overrides
    }
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Import PGN files (plain, .zst, .bz2, .gz, or - for stdin) into PostgreSQL.
    Import(ImportArgs),
    /// Show the import state of every input file seen.
    Status(StatusArgs),
    /// Check positions (and games) in the database against recomputed digests.
    Verify(VerifyArgs),
    /// Manage the database: migrations and the embedded cluster.
    #[command(subcommand)]
    Db(DbCommand),
    /// Print normalized FEN and signed/unsigned xxh64 digests of FENs.
    Hash(HashArgs),
    /// Print every position of every game: `game_key`, ply, normalized FEN, signed digest.
    Positions(PositionsArgs),
    /// List the games a filter selects (player, opponent, position, dates, …).
    Games(GamesArgs),
    /// One game: show it as PGN, or delete it.
    #[command(subcommand)]
    Game(GameCommand),
    /// Write the games a filter selects (all by default) as PGN.
    Export(ExportArgs),
    /// The moves played in a position and how they scored (opening explorer).
    Explore(ExploreArgs),
    /// Answer the explorer (Lichess's /lichess API), games and players over HTTP.
    Serve(ServeArgs),
}

/// Parser of input names: pgnload keeps an input's name as text (messages,
/// rejects, `import_files.path`), so a name that is not UTF-8 is refused
/// before anything runs, named (lossily) and with a way around, instead of
/// clap's "invalid UTF-8 was detected" that does not say which argument.
pub fn utf8_input() -> impl TypedValueParser<Value = String> {
    OsStringValueParser::new().try_map(|name: OsString| {
        name.into_string().map_err(|name| {
            format!(
                "the file name {:?} is not valid UTF-8; rename the file, or pass it on \
                 stdin (`pgnload import - < FILE`)",
                name.to_string_lossy()
            )
        })
    })
}

/// The parser of every flag that names a variant (`games`, `export`,
/// `explore`, `hash --variant`, `import --variants`): `GameVariant`'s one
/// `FromStr`, which takes any spelling of a name (`king_of_the_hill`,
/// `kingOfTheHill`, `King of the Hill`, `koth`), with the database labels
/// listed as the possible values in `--help`, so every command shows the
/// one spelling its messages and output use.
#[derive(Debug, Clone, Copy)]
pub struct VariantParser;

impl TypedValueParser for VariantParser {
    type Value = GameVariant;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<GameVariant, clap::Error> {
        StringValueParser::new()
            .try_map(|name| name.parse::<GameVariant>())
            .parse_ref(cmd, arg, value)
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        Some(Box::new(
            GameVariant::ALL
                .iter()
                .map(|variant| PossibleValue::new(variant.as_db_label())),
        ))
    }
}

/// `--speeds` (also spelled `--speed`): one flag for every command that
/// selects games by speed (`games`, `export`, `import`, `explore`).
#[derive(Debug, Clone, Default, Args)]
pub struct SpeedFlags {
    /// Only games of these speeds, comma-separated (ultraBullet, bullet,
    /// blitz, rapid, classical, correspondence), from the time control as
    /// Lichess computes it; a game without a readable clock is
    /// correspondence.
    #[arg(
        long,
        visible_alias = "speed",
        value_name = "SPEED,…",
        value_delimiter = ','
    )]
    pub speeds: Vec<Speed>,
}

/// The flags of a [`Selection`] but its variants (`games` and `export`
/// take one `--variant`, `import` several `--variants`): the criteria
/// `games`, `export` and `import` spell the same.
#[derive(Debug, Clone, Default, Args)]
pub struct SelectionFlags {
    /// Which speeds.
    #[command(flatten)]
    pub speed: SpeedFlags,
    /// Only games played on or after this UTC day (YYYY-MM-DD; a month,
    /// YYYY-MM, from its first day), from `UTCDate`, else Date; a game
    /// without a full date is left out.
    #[arg(long, value_parser = parse_since)]
    pub since: Option<NaiveDate>,
    /// Only games played on or before this UTC day (YYYY-MM-DD; a month,
    /// YYYY-MM, to its last day).
    #[arg(long, value_parser = parse_until)]
    pub until: Option<NaiveDate>,
    /// Only games where both players are rated at least this (a game
    /// missing either rating is left out).
    #[arg(long)]
    pub min_rating: Option<u16>,
}

impl SelectionFlags {
    /// The selection these flags ask for, of `variants`.
    pub fn selection(&self, variants: Vec<GameVariant>) -> Selection {
        Selection {
            speeds: self.speed.speeds.clone(),
            variants,
            since: self.since,
            until: self.until,
            min_rating: self.min_rating,
        }
    }
}

/// The game-filter flags of `games` and `export`: [`FilterArgs`] as the
/// command line spells it.
#[derive(Debug, Clone, Default, Args)]
pub struct FilterFlags {
    /// Games of this player, the name in any case (every source); an
    /// unknown name is refused with the nearest names stored.
    #[arg(long)]
    pub player: Option<String>,
    /// Only games against this player (needs --player).
    #[arg(long, requires = "player")]
    pub opponent: Option<String>,
    /// Only games where --player had this color.
    #[arg(long, value_parser = choice::<Side>(), requires = "player")]
    pub color: Option<Side>,
    /// Games that reached this position (FEN, read under --variant), the
    /// final position included.
    #[arg(long)]
    pub fen: Option<String>,
    /// The criteria shared with `import` and `explore`.
    #[command(flatten)]
    pub selection: SelectionFlags,
    /// Games of this variant (any spelling: `king_of_the_hill`,
    /// `kingOfTheHill`, `King of the Hill`, `koth`…); also the rules --fen
    /// is read under.
    #[arg(long, value_parser = VariantParser)]
    pub variant: Option<GameVariant>,
    /// Games with this result: 1-0, 0-1, 1/2-1/2 or * (also white, black, draw).
    #[arg(long, value_parser = parse_result)]
    pub result: Option<GameResult>,
    /// At most this many games.
    #[arg(long)]
    pub limit: Option<u32>,
}

impl FilterFlags {
    /// The filter these flags ask for.
    pub fn filter(&self) -> FilterArgs {
        FilterArgs {
            selection: self.selection.selection(self.variant.into_iter().collect()),
            player: self.player.clone(),
            opponent: self.opponent.clone(),
            color: self.color,
            fen: self.fen.clone(),
            result: self.result,
            limit: self.limit,
        }
    }
}

/// A library type the command line offers by name. clap lives in this crate
/// only, so the library's enums cannot derive clap's `ValueEnum`; each
/// names its values itself and is listed here once.
pub trait Choice: Copy + Send + Sync + 'static {
    /// Every value, in the order `--help` lists them.
    fn all() -> &'static [Self];
    /// The value's name on the command line.
    fn name(self) -> &'static str;
}

/// The parser of a [`Choice`] flag: exactly its names, listed in `--help`
/// and in the error for any other word.
pub fn choice<T: Choice>() -> impl TypedValueParser<Value = T> {
    PossibleValuesParser::new(T::all().iter().map(|value| value.name())).map(|name| {
        *T::all()
            .iter()
            .find(|value| value.name() == name)
            .expect("clap accepts only the names listed from T::all()")
    })
}

impl Choice for Side {
    fn all() -> &'static [Self] {
        &Side::ALL
    }
    fn name(self) -> &'static str {
        Side::name(self)
    }
}

impl Choice for LoadMode {
    fn all() -> &'static [Self] {
        &LoadMode::ALL
    }
    fn name(self) -> &'static str {
        LoadMode::name(self)
    }
}

impl Choice for BackupFormat {
    fn all() -> &'static [Self] {
        &BackupFormat::ALL
    }
    fn name(self) -> &'static str {
        BackupFormat::name(self)
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    /// `args` (after `pgnload`) as clap parses them.
    fn parsed(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("pgnload").chain(args.iter().copied()))
    }

    #[test]
    fn every_command_reads_variants_alike() {
        let spellings = [
            "racing-kings",
            "racing_kings",
            "racingKings",
            "Racing Kings",
        ];
        for variant in spellings {
            let Command::Games(games) = parsed(&["games", "--variant", variant])
                .expect("games")
                .command
            else {
                panic!("not games")
            };
            assert_eq!(games.filter.variant, Some(GameVariant::RacingKings));
            let Command::Explore(explore) = parsed(&["explore", "--variant", variant])
                .expect("explore")
                .command
            else {
                panic!("not explore")
            };
            assert_eq!(explore.variant, GameVariant::RacingKings);
            let Command::Hash(hash) = parsed(&["hash", "--canonical", "--variant", variant])
                .expect("hash")
                .command
            else {
                panic!("not hash")
            };
            assert_eq!(hash.variant, GameVariant::RacingKings);
            for flag in ["--variants", "--variant"] {
                let import =
                    parsed(&["import", "a.pgn", flag, &format!("{variant},zh")]).expect("import");
                assert_eq!(
                    import.overrides().scope.selection.variants,
                    [GameVariant::RacingKings, GameVariant::Crazyhouse]
                );
            }
        }
        // `--help` lists one spelling, the one output and messages use,
        // and each is read back as its variant.
        let listed: Vec<String> = VariantParser
            .possible_values()
            .expect("listed")
            .map(|value| value.get_name().to_owned())
            .collect();
        let labels: Vec<String> = GameVariant::ALL.iter().map(ToString::to_string).collect();
        assert_eq!(listed, labels);
        for (name, variant) in listed.iter().zip(GameVariant::ALL) {
            assert_eq!(name.parse::<GameVariant>(), Ok(variant));
        }
        for command in [
            vec!["games", "--variant", "shogi"],
            vec!["explore", "--variant", "shogi"],
            vec!["import", "a.pgn", "--variants", "shogi"],
            vec!["hash", "--variant", "shogi"],
        ] {
            let error = parsed(&command).expect_err("shogi").to_string();
            assert!(error.contains("is not a variant"), "{command:?}: {error}");
        }
    }

    #[test]
    fn the_shared_criteria_are_one_flag_each() {
        let day = |text| NaiveDate::parse_from_str(text, "%Y-%m-%d").expect("a day");
        for speed_flag in ["--speed", "--speeds"] {
            let cli = parsed(&[
                "import",
                "a.pgn",
                speed_flag,
                "blitz,rapid",
                "--since",
                "2024-02",
                "--until",
                "2024-02",
                "--min-rating",
                "1800",
            ])
            .expect("import");
            let selection = cli.overrides().scope.selection;
            assert_eq!(selection.speeds, [Speed::Blitz, Speed::Rapid]);
            assert_eq!(selection.since, Some(day("2024-02-01")));
            assert_eq!(selection.until, Some(day("2024-02-29")));
            assert_eq!(selection.min_rating, Some(1800));
            let Command::Games(games) = parsed(&[
                "games",
                speed_flag,
                "blitz,rapid",
                "--since",
                "2024-02",
                "--min-rating",
                "1800",
            ])
            .expect("games")
            .command
            else {
                panic!("not games")
            };
            let filter = games.filter.filter().selection;
            assert_eq!(filter.speeds, selection.speeds);
            assert_eq!(filter.since, selection.since);
            assert_eq!(filter.min_rating, selection.min_rating);
            let Command::Explore(explore) = parsed(&["explore", speed_flag, "blitz,rapid"])
                .expect("explore")
                .command
            else {
                panic!("not explore")
            };
            assert_eq!(explore.speed.speeds, selection.speeds);
        }
        // A rating is never negative: one type, refused alike.
        for command in [
            vec!["games", "--min-rating=-5"],
            vec!["export", "--min-rating=-5"],
            vec!["import", "a.pgn", "--min-rating=-5"],
        ] {
            assert!(parsed(&command).is_err(), "{command:?}");
        }
        // The explorer counts by month: a day is refused by its own parser.
        let error = parsed(&["explore", "--since", "2024-02-10"])
            .expect_err("a day")
            .to_string();
        assert!(error.contains("is not a month"), "{error}");
    }

    #[test]
    fn the_flag_layer_is_gathered_from_every_command() {
        let cli = parsed(&["--threads", "3", "game", "put", "a.pgn", "--source", "twic"])
            .expect("game put");
        let overrides = cli.overrides();
        assert_eq!(overrides.threads, Some(3));
        assert_eq!(overrides.source.as_deref(), Some("twic"));
        let cli = parsed(&["import", "a.pgn", "--games-only", "--rated-only"]).expect("import");
        let scope = cli.overrides().scope;
        assert!(scope.games_only && scope.rated_only && !scope.exclude_bots);
    }
}
