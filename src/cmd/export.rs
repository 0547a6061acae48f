//! `pgnload export`: the games a filter selects (all by default) as PGN,
//! in import order, streamed to a file or stdout in constant memory.
//!
//! A file is written under a `.partial` name and renamed when complete,
//! so a file with the asked name is always a whole export; a device or a
//! pipe that already exists (`/dev/null`, a FIFO) is written to directly.
//!
//! `--format dcg` and `--format ocgdb` write the exchange formats of
//! [`crate::export::dcg`] and [`crate::export::ocgdb`] instead, from the
//! same filter and the same stream; they hold standard chess only, so
//! other games are skipped and counted (exported + skipped = selected).

use std::{
    fs,
    io::{self, Write},
    path::PathBuf,
};

use rayon::prelude::*;

use crate::{
    chess::model::GameVariant,
    config::Settings,
    error::{Error, ExitStatus},
    export::{dcg::DcgWriter, ocgdb::OcgdbWriter, pgn},
    ingest::source,
    progress::Progress,
    query::{
        filter::FilterArgs,
        games::{self, Order},
    },
    store::db,
};

/// Games formatted into one text by one parallel task.
const FORMATTED_TOGETHER: usize = 50;

/// Options of `pgnload export`.
#[derive(Debug, Clone, clap::Args)]
pub struct ExportArgs {
    /// Which games (all by default).
    #[command(flatten)]
    pub filter: FilterArgs,
    /// Where to write: a file, or - for stdout (PGN only); for dcg the
    /// base name of the five files (BASE.dci, .dcg, .dcn, .dcs, .dce).
    #[arg(long, short, default_value = "-")]
    pub output: String,
    /// The format written.
    #[arg(long, value_enum, default_value_t = Format::Pgn)]
    pub format: Format,
}

/// What `pgnload export` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// PGN.
    Pgn,
    /// Simple Chess Database files (.dci/.dcg/.dcn/.dcs/.dce), as pgn2dcg writes them.
    Dcg,
    /// An ocgdb / En Croissant SQLite database (.ocgdb.db3).
    Ocgdb,
}

/// Why an exchange export left a selected game out.
#[derive(Debug, Default)]
struct Skipped {
    /// Not standard chess.
    variant: u64,
    /// A null move, which ocgdb's `Moves2` cannot hold.
    null_move: u64,
}

/// Runs `pgnload export --format dcg|ocgdb`: both formats' writers behind
/// one stream, one progress reporter and one summary.
fn run_exchange(args: &ExportArgs, settings: &Settings, quiet: bool) -> Result<ExitStatus, Error> {
    if args.output == "-" {
        return Err(Error::Config(format!(
            "--format {} writes files: name them with --output",
            if args.format == Format::Dcg {
                "dcg"
            } else {
                "ocgdb"
            }
        )));
    }
    let target = PathBuf::from(&args.output);
    enum Writer {
        Dcg(DcgWriter),
        Ocgdb(OcgdbWriter),
    }
    let mut skipped = Skipped::default();
    let mut exported = 0u64;
    let runtime = db::runtime()?;
    let (selected, writer) = runtime.block_on(async {
        let mut database = db::connect(&settings.target()).await?;
        db::migrate(&mut database.client).await?;
        let filter = args.filter.resolve(&database.client).await?;
        // Created once the filter is known good: no partial files for a
        // mistyped player.
        let mut writer = match args.format {
            Format::Dcg => Writer::Dcg(DcgWriter::create(&target)?),
            _ => Writer::Ocgdb(OcgdbWriter::create(&target)?),
        };
        let mut progress = Progress::counting_for(quiet, "export", "games");
        progress.set_total(Some(games::count(&database.client, &filter).await?));
        let mut helper = db::connect(&settings.target()).await?;
        let selected = games::for_each(
            &mut database.client,
            Some(&mut helper.client),
            &filter,
            Order::Imported,
            true,
            |game, moves| {
                progress.add(1, 0);
                if game.variant != GameVariant::Standard {
                    skipped.variant += 1;
                    return Ok(());
                }
                let written = match &mut writer {
                    Writer::Dcg(w) => w.write(game, moves).map(|()| true)?,
                    Writer::Ocgdb(w) => w.write(game, moves)?,
                };
                if written {
                    exported += 1;
                } else {
                    skipped.null_move += 1;
                }
                Ok(())
            },
        )
        .await?;
        progress.finish();
        helper.close()?;
        database.close()?;
        Ok::<_, Error>((selected, writer))
    })?;
    match writer {
        Writer::Dcg(w) => w.finish()?,
        Writer::Ocgdb(w) => w.finish()?,
    }
    let skipped_total = skipped.variant + skipped.null_move;
    if exported + skipped_total != selected {
        return Err(Error::Internal(format!(
            "export counted {exported} exported + {skipped_total} skipped of {selected} selected"
        )));
    }
    super::print(&format!(
        "exported {exported} games to {}, skipped {skipped_total} ({} not standard chess, \
         {} with a null move) of {selected} selected\n",
        target.display(),
        skipped.variant,
        skipped.null_move
    ))?;
    Ok(ExitStatus::Clean)
}

/// Runs `pgnload export`.
pub fn run(args: &ExportArgs, settings: &Settings, quiet: bool) -> Result<ExitStatus, Error> {
    if args.format != Format::Pgn {
        return run_exchange(args, settings, quiet);
    }
    let target = (args.output != "-").then(|| PathBuf::from(&args.output));
    // A device or a pipe (`/dev/null`, a FIFO) is written to as it is:
    // renaming a finished file onto it would replace it.
    let partial = target
        .as_ref()
        .filter(|path| !source::is_stream(&path.to_string_lossy()))
        .map(|path| {
            let mut name = path.as_os_str().to_owned();
            name.push(".partial");
            PathBuf::from(name)
        });
    let open_err = |path: &PathBuf| {
        let path = path.clone();
        move |source| Error::Open { path, source }
    };
    let sink: Box<dyn Write> = match (&partial, &target) {
        (Some(path), _) => Box::new(fs::File::create(path).map_err(open_err(path))?),
        (None, Some(device)) => Box::new(
            fs::OpenOptions::new()
                .write(true)
                .open(device)
                .map_err(open_err(device))?,
        ),
        (None, None) => Box::new(io::stdout().lock()),
    };
    let mut out = io::BufWriter::with_capacity(1 << 16, sink);
    let runtime = db::runtime()?;
    let written = runtime.block_on(async {
        let mut database = db::connect(&settings.target()).await?;
        db::migrate(&mut database.client).await?;
        let filter = args.filter.resolve(&database.client).await?;
        let mut progress = Progress::counting_for(quiet, "export", "games");
        progress.set_total(Some(games::count(&database.client, &filter).await?));
        let mut helper = db::connect(&settings.target()).await?;
        let written = games::for_each_batch(
            &mut database.client,
            Some(&mut helper.client),
            &filter,
            Order::Imported,
            true,
            |batch| {
                // Formatting is most of the client's work: the batch's
                // games are formatted in parallel, a run of games into one
                // text (one allocation and one write per run, not per
                // game), then written in order.
                let texts = batch
                    .par_chunks(FORMATTED_TOGETHER)
                    .map(|games| {
                        let mut text = String::with_capacity(games.len() * 2560);
                        for (game, moves) in games {
                            pgn::write_game(game, moves, &mut text)?;
                        }
                        Ok(text)
                    })
                    .collect::<Result<Vec<String>, Error>>()?;
                for text in texts {
                    out.write_all(text.as_bytes()).map_err(Error::Output)?;
                }
                progress.add(batch.len() as u64, 0);
                Ok(())
            },
        )
        .await?;
        progress.finish();
        helper.close()?;
        database.close()?;
        Ok::<_, Error>(written)
    })?;
    out.flush().map_err(Error::Output)?;
    drop(out);
    let summary = format!("exported {written} games");
    match (&partial, &target) {
        (Some(partial), Some(target)) => {
            fs::rename(partial, target).map_err(open_err(target))?;
            super::print(&format!("{summary} to {}\n", target.display()))?;
        }
        (None, Some(device)) => {
            super::print(&format!("{summary} to {}\n", device.display()))?;
        }
        _ => stderr_line!("pgnload: {summary}"),
    }
    Ok(ExitStatus::Clean)
}
