//! `pgnload explore` (the moves played in a position, from the explorer
//! counters) and the summary of `pgnload verify --explorer` (those
//! counters against a recount from games + moves, which the library runs:
//! [`crate::explorer::recount`]).

use std::{fmt::Write as _, path::Path};

use crate::{
    chess::{
        category::{Month, RatingGroup},
        model::GameVariant,
    },
    cmd::{print, printable},
    config::Settings,
    error::{Error, ExitStatus},
    explorer::{
        self,
        answers::{Answer, Filter, Request, explore},
        recount::Recounted,
    },
    store::db,
};

/// Options of `pgnload explore`.
#[derive(Debug, Clone, clap::Args)]
pub struct ExploreArgs {
    /// The position (FEN; move counters optional) [default: the variant's
    /// start position].
    pub fen: Option<String>,
    /// Moves to play from that position first, each in UCI or SAN:
    /// e2e4,e7e5 or e4,e5,Nf3 (castling e1g1, e1h1 or O-O).
    #[arg(long, value_name = "MOVE,MOVE,…", value_delimiter = ',')]
    pub play: Vec<String>,
    /// The variant (any spelling: `king_of_the_hill`, `kingOfTheHill`, `koth`…).
    #[arg(long, default_value = "standard", value_parser = crate::cli::VariantParser)]
    pub variant: GameVariant,
    /// Which speeds.
    #[command(flatten)]
    pub speed: crate::cli::SpeedFlags,
    /// Only games whose average rating is in these groups (their lower
    /// bounds: 0, 1000, 1200, 1400, 1600, 1800, 2000, 2200, 2500).
    #[arg(long, value_name = "GROUP,…", value_delimiter = ',')]
    pub ratings: Vec<RatingGroup>,
    /// Only games played in this month or later (YYYY-MM).
    #[arg(long, value_name = "YYYY-MM")]
    pub since: Option<Month>,
    /// Only games played in this month or earlier (YYYY-MM).
    #[arg(long, value_name = "YYYY-MM")]
    pub until: Option<Month>,
    /// How many moves to list, the most played first.
    #[arg(long, value_name = "N", default_value_t = 12)]
    pub top: usize,
    /// How many top games reaching the position to list (at most 4, as
    /// Lichess): rated 2000 and up, by rating band, then the most recent.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub top_games: u32,
    /// How many recent games reaching the position to list (at most 8
    /// less the top games found, as Lichess), the most recent first.
    #[arg(long, value_name = "N", default_value_t = 8)]
    pub recent_games: u32,
    /// Print the Lichess explorer's JSON shape instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Runs `pgnload explore`.
pub fn run(args: &ExploreArgs, settings: &Settings) -> Result<ExitStatus, Error> {
    if let (Some(since), Some(until)) = (args.since, args.until)
        && since > until
    {
        return Err(Error::Request(format!(
            "--since {since} is after --until {until}: no month is in both"
        )));
    }
    let request = Request {
        variant: args.variant,
        fen: args.fen.clone(),
        play: args.play.clone(),
        filter: Filter {
            speeds: args.speed.speeds.clone(),
            ratings: args.ratings.clone(),
            since: args.since,
            until: args.until,
        },
        moves: args.top,
        top_games: args.top_games,
        recent_games: args.recent_games,
    };
    // Bad input is refused before any database is touched.
    explorer::answers::resolve_position(request.variant, request.fen.as_deref(), &request.play)?;
    let runtime = db::runtime()?;
    let answer = runtime.block_on(async {
        let mut database = db::connect(&settings.target()).await?;
        db::migrate(&mut database.client).await?;
        // Checks that the counters are usable with its first question.
        explore(
            db::Prepared::new(&database.client, &db::Statements::default()),
            &request,
            &explorer::answers::Everywhere::default(),
        )
        .await
    })?;
    let text = if args.json {
        let mut json = serde_json::to_string(&answer)
            .map_err(|e| Error::bug_from("serializing the explorer answer", e))?;
        json.push('\n');
        json
    } else {
        table(&answer)
    };
    print(&text)?;
    Ok(ExitStatus::Clean)
}

/// `part` of `whole` in percent, one decimal.
fn percent(part: i64, whole: i64) -> String {
    if whole == 0 {
        "-".to_owned()
    } else {
        format!("{:.1}%", part as f64 * 100.0 / whole as f64)
    }
}

/// The human form of an answer.
fn table(answer: &Answer) -> String {
    let mut out = String::new();
    let score = answer.score;
    let decided = score.white + score.draws + score.black;
    let _ = writeln!(out, "position: {}", answer.fen);
    if let Some(opening) = &answer.opening {
        let _ = writeln!(
            out,
            "opening: {} {}",
            printable(&opening.eco),
            printable(&opening.name)
        );
    }
    if answer.games == 0 {
        let _ = writeln!(out, "no counted game continued from this position");
        return out;
    }
    let _ = writeln!(
        out,
        "{} games: white {} draws {} black {}",
        answer.games,
        percent(score.white, decided),
        percent(score.draws, decided),
        percent(score.black, decided)
    );
    let _ = writeln!(
        out,
        "{:<8} {:<6} {:>9} {:>7} {:>7} {:>7} {:>6}",
        "SAN", "UCI", "games", "white", "draws", "black", "avg"
    );
    for m in &answer.moves {
        let decided = m.score.white + m.score.draws + m.score.black;
        let _ = writeln!(
            out,
            "{:<8} {:<6} {:>9} {:>7} {:>7} {:>7} {:>6}",
            m.san,
            m.uci,
            m.games,
            percent(m.score.white, decided),
            percent(m.score.draws, decided),
            percent(m.score.black, decided),
            m.average_rating.map_or("-".to_owned(), |r| r.to_string())
        );
    }
    for (title, games) in [
        ("top games", &answer.top_games),
        ("recent games", &answer.recent_games),
    ] {
        if games.is_empty() {
            continue;
        }
        let _ = writeln!(out, "{title}:");
        for listed in games {
            let game = &listed.game;
            let side =
                |p: &explorer::answers::Player| format!("{} ({})", printable(&p.name), p.rating);
            let _ = writeln!(
                out,
                "  {:<12} {:<6} {} - {}  {}  {} {}  {}",
                printable(&game.id),
                listed.uci,
                side(&game.white),
                side(&game.black),
                game.winner.unwrap_or("draw"),
                game.speed,
                game.mode,
                game.month
            );
        }
    }
    out
}

/// `pgnload verify --explorer`: recounts (its steps shown unless
/// `quiet`), the report written by the library, and prints a summary.
/// Exit status as verify's: 0 clean, 1 differences.
pub fn verify(settings: &Settings, report: &Path, quiet: bool) -> Result<ExitStatus, Error> {
    let runtime = db::runtime()?;
    let shown = std::sync::Mutex::new(crate::progress::Progress::steps(quiet, "verify"));
    let steps = |step: crate::progress::Step<'_>| {
        let mut shown = shown
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        shown.show(step);
    };
    let recounted = explorer::recount::verify(settings, &runtime, report, &steps);
    drop(shown); // the bar cleared before the summary
    let Recounted { total, differences } = recounted?;
    if total == 0 {
        super::print_outcome(&format!(
            "explorer counters match a recount from games and moves: no mismatches\n\
             report: {}\n",
            report.display()
        ))?;
        return Ok(ExitStatus::Clean);
    }
    let mut text = format!(
        "{total} explorer counter rows differ from a recount from games and moves \
         (key: {}; counts: {})\n",
        explorer::sql::KEY.replace(", ", " "),
        explorer::sql::COUNTS.replace(", ", " ")
    );
    for difference in differences.iter().take(20) {
        let _ = writeln!(
            text,
            "  {}: stored {}, recount {}",
            difference.key,
            difference.stored.as_deref().unwrap_or("none"),
            difference.expected.as_deref().unwrap_or("none")
        );
    }
    let _ = writeln!(
        text,
        "report: {} (the first {} rows)",
        report.display(),
        differences.len()
    );
    super::print_outcome(&text)?;
    Ok(ExitStatus::CompletedWithRejects)
}
