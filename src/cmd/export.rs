//! `pgnload export`: the games a filter selects (all by default) as PGN,
//! in import order, streamed to a file or stdout in constant memory.
//!
//! A file is written under a `.partial` name and renamed when complete,
//! so a file with the asked name is always a whole export; a device or a
//! pipe that already exists (`/dev/null`, a FIFO) is written to directly.
//!
//! `--format dcg`, `--format ocgdb` and `--format encroissant` write the
//! exchange formats of [`crate::export::dcg`], [`crate::export::ocgdb`] and
//! [`crate::export::encroissant`] instead, from the
//! same filter and the same stream; they hold standard chess only, so
//! other games are skipped and counted (exported + skipped = selected).
//!
//! A stored game a format cannot write (a negative clock written by an
//! earlier version or by hand) is skipped in every format, counted and
//! said, and the export exits with code 1. An output name that is a
//! directory is refused before any work; an export that fails or is
//! interrupted (Ctrl-C, SIGTERM: exit code 3) removes its temporary files.

use std::{
    fs,
    io::{self, Write},
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
};

use rayon::prelude::*;

use crate::{
    chess::{annotation::NoteCounts, model::GameVariant},
    config::Settings,
    error::{Error, ExitStatus},
    export::{
        Unwritten, dcg, dcg::DcgWriter, encroissant::EncroissantWriter, ocgdb::OcgdbWriter, pgn,
    },
    ingest::source,
    progress::Progress,
    query::games::{self, Order},
    store::db,
};

/// Games formatted into one text by one parallel task.
const FORMATTED_TOGETHER: usize = 50;

/// Options of `pgnload export`.
#[derive(Debug, Clone, clap::Args)]
pub struct ExportArgs {
    /// Which games (all by default).
    #[command(flatten)]
    pub filter: crate::cli::FilterFlags,
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
    /// An ocgdb SQLite database (.ocgdb.db3).
    Ocgdb,
    /// An En Croissant SQLite database (.db3), which En Croissant opens.
    Encroissant,
}

impl Format {
    /// The format's name on the command line.
    fn name(self) -> &'static str {
        match self {
            Format::Pgn => "pgn",
            Format::Dcg => "dcg",
            Format::Ocgdb => "ocgdb",
            Format::Encroissant => "encroissant",
        }
    }
}

/// Why an exchange export left a selected game out.
#[derive(Debug, Default)]
struct Skipped {
    /// Not standard chess.
    variant: u64,
    /// A null move, which ocgdb's `Moves2` and En Croissant's `Moves` cannot hold.
    null_move: u64,
    /// A stored value the format cannot say.
    unwritable: Unwritten,
}

/// Files an export writes under temporary names: removed when it is
/// dropped before [`Leftovers::keep`], so an export that fails or is
/// interrupted leaves no `.partial` file behind.
struct Leftovers(Vec<PathBuf>);

impl Leftovers {
    /// The export completed: its files are its output now.
    fn keep(mut self) {
        self.0.clear();
    }
}

impl Drop for Leftovers {
    fn drop(&mut self) {
        for path in &self.0 {
            match fs::remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => stderr_line!(
                    "pgnload: warning: could not remove the unfinished {}: {e}",
                    path.display()
                ),
            }
        }
    }
}

/// Refuses, before any work, output names that are directories: the
/// export would otherwise run to its end and fail at the rename. (An
/// existing file is replaced, once the export is whole.)
fn check_targets<'a>(targets: impl IntoIterator<Item = &'a Path>) -> Result<(), Error> {
    for target in targets {
        if target.is_dir() {
            return Err(Error::Config(format!(
                "--output {}: is a directory; name the file to write",
                target.display()
            )));
        }
    }
    Ok(())
}

/// Ctrl-C and SIGTERM stop an export at once (see [`until_interrupted`]);
/// its temporary files are then removed and it exits with code 3.
fn watch_interrupts(runtime: &tokio::runtime::Runtime) -> Result<Arc<AtomicUsize>, Error> {
    let interrupts = Arc::new(AtomicUsize::new(0));
    super::watch_signals(
        runtime,
        Arc::clone(&interrupts),
        "interrupted; stopping the export and removing its unfinished files",
        "interrupted again; exiting now (unfinished .partial files may be left)",
    )?;
    Ok(interrupts)
}

/// Runs `work` until it ends or a signal comes, whichever is first: an
/// export waiting on the server (a lock, a slow query) must stop at once
/// too. Dropping `work` drops its connections; what it wrote is removed
/// by the caller's [`Leftovers`].
async fn until_interrupted<T>(
    interrupts: &AtomicUsize,
    work: impl Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    let signalled = async {
        while interrupts.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    };
    tokio::select! {
        result = work => result,
        () = signalled => Err(Error::Request("export interrupted".to_owned())),
    }
}

/// Whether a signal stopped the export (the stream's error is then beside
/// the point): said on stderr; the caller exits with code 3 once its
/// temporary files are removed.
fn was_interrupted(interrupts: &AtomicUsize) -> bool {
    let stopped = interrupts.load(Ordering::SeqCst) > 0;
    if stopped {
        stderr_line!("pgnload: export interrupted; removing its unfinished files");
    }
    stopped
}

/// The writer of an exchange format, created once the filter is known
/// good (no partial files for a mistyped player).
enum Writer {
    Dcg(DcgWriter),
    Ocgdb(OcgdbWriter),
    Encroissant(EncroissantWriter),
}

impl Writer {
    fn create(format: Format, target: &Path) -> Result<Writer, Error> {
        Ok(match format {
            Format::Dcg => Writer::Dcg(DcgWriter::create(target)?),
            Format::Encroissant => Writer::Encroissant(EncroissantWriter::create(target)?),
            _ => Writer::Ocgdb(OcgdbWriter::create(target)?),
        })
    }

    /// Writes one standard-chess game: `Some(true)` written, `Some(false)`
    /// left out for its null move, `None` a value the format cannot say
    /// (counted in `unwritable`).
    fn write(
        &mut self,
        game: &games::StoredGame,
        moves: &[games::StoredMove],
        unwritable: &mut Unwritten,
    ) -> Result<Option<bool>, Error> {
        match self {
            Writer::Dcg(w) => unwritable.skip(w.write(game, moves).map(|()| true)),
            Writer::Ocgdb(w) => unwritable.skip(w.write(game, moves)),
            Writer::Encroissant(w) => unwritable.skip(w.write(game, moves)),
        }
    }

    /// Writes the last files; what the games written held that the
    /// format cannot carry.
    fn finish(self) -> Result<NoteCounts, Error> {
        match self {
            Writer::Dcg(w) => {
                let dropped = w.dropped();
                w.finish().map(|()| dropped)
            }
            Writer::Ocgdb(w) => {
                let dropped = w.dropped();
                w.finish().map(|()| dropped)
            }
            // Carries every comment, NAG and variation.
            Writer::Encroissant(w) => w.finish().map(|()| NoteCounts::default()),
        }
    }
}

/// Runs `pgnload export --format dcg|ocgdb|encroissant`: the formats' writers behind
/// one stream, one progress reporter and one summary.
fn run_exchange(args: &ExportArgs, settings: &Settings, quiet: bool) -> Result<ExitStatus, Error> {
    if args.output == "-" {
        return Err(Error::Config(format!(
            "--format {} writes files: name them with --output",
            args.format.name()
        )));
    }
    let target = PathBuf::from(&args.output);
    let (temporary, finals) = match args.format {
        Format::Dcg => dcg::files(&target),
        _ => (vec![OcgdbWriter::partial(&target)], vec![target.clone()]),
    };
    check_targets(finals.iter().map(PathBuf::as_path))?;
    let mut skipped = Skipped::default();
    let mut exported = 0u64;
    let runtime = db::runtime()?;
    let interrupts = watch_interrupts(&runtime)?;
    let leftovers = Leftovers(temporary);
    let result = runtime.block_on(until_interrupted(&interrupts, async {
        let mut database = db::connect(&settings.target()).await?;
        db::migrate(&mut database.client).await?;
        let filter = args.filter.filter().resolve(&database.client).await?;
        let mut writer = Writer::create(args.format, &target)?;
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
                match writer.write(game, moves, &mut skipped.unwritable)? {
                    Some(true) => exported += 1,
                    Some(false) => skipped.null_move += 1,
                    None => {}
                }
                Ok(())
            },
        )
        .await?;
        progress.finish();
        helper.close()?;
        database.close()?;
        Ok::<_, Error>((selected, writer))
    }));
    if was_interrupted(&interrupts) {
        drop(leftovers);
        return Ok(ExitStatus::Interrupted);
    }
    let (selected, writer) = result?;
    let dropped = writer.finish()?;
    leftovers.keep();
    let status = exchange_summary(&target, exported, &skipped, selected)?;
    if !dropped.is_empty() {
        super::print(&format!(
            "not carried by the {} format: {} comments, {} variations, {} NAGs \
             (`export --format pgn` keeps them)\n",
            args.format.name(),
            dropped.comments,
            dropped.variations,
            dropped.nags
        ))?;
    }
    Ok(status)
}

/// Says what an exchange export did, once its files are in place: the
/// counts must add up to the games selected.
fn exchange_summary(
    target: &Path,
    exported: u64,
    skipped: &Skipped,
    selected: u64,
) -> Result<ExitStatus, Error> {
    let unwritable = skipped.unwritable.count;
    let skipped_total = skipped.variant + skipped.null_move + unwritable;
    if exported + skipped_total != selected {
        return Err(Error::bug(format!(
            "export counted {exported} exported + {skipped_total} skipped of {selected} selected"
        )));
    }
    for line in skipped.unwritable.report() {
        stderr_line!("pgnload: {line}");
    }
    // The third reason only when it happened: the line stays what it was
    // for every export that wrote all it could.
    let unwritten = if unwritable > 0 {
        format!(", {unwritable} that cannot be written")
    } else {
        String::new()
    };
    super::print(&format!(
        "exported {exported} games to {}, skipped {skipped_total} ({} not standard chess, \
         {} with a null move{unwritten}) of {selected} selected\n",
        target.display(),
        skipped.variant,
        skipped.null_move
    ))?;
    Ok(if unwritable > 0 {
        ExitStatus::CompletedWithRejects
    } else {
        ExitStatus::Clean
    })
}

/// Runs `pgnload export`.
pub fn run(args: &ExportArgs, settings: &Settings, quiet: bool) -> Result<ExitStatus, Error> {
    if args.format != Format::Pgn {
        return run_exchange(args, settings, quiet);
    }
    let target = (args.output != "-").then(|| PathBuf::from(&args.output));
    check_targets(target.as_deref())?;
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
    let runtime = db::runtime()?;
    let interrupts = watch_interrupts(&runtime)?;
    let leftovers = Leftovers(partial.iter().cloned().collect());
    let mut out =
        io::BufWriter::with_capacity(1 << 16, pgn_sink(partial.as_ref(), target.as_ref())?);
    let mut unwritable = Unwritten::default();
    let result = runtime.block_on(until_interrupted(&interrupts, async {
        let mut database = db::connect(&settings.target()).await?;
        db::migrate(&mut database.client).await?;
        let filter = args.filter.filter().resolve(&database.client).await?;
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
                for (text, skipped) in format_batch(batch)? {
                    out.write_all(text.as_bytes()).map_err(Error::Output)?;
                    unwritable.merge(skipped);
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
    }));
    if was_interrupted(&interrupts) {
        drop(out);
        drop(leftovers);
        return Ok(ExitStatus::Interrupted);
    }
    let selected = result?;
    out.flush().map_err(Error::Output)?;
    drop(out);
    finish_pgn(
        selected,
        &unwritable,
        partial.as_ref(),
        target.as_ref(),
        leftovers,
    )
}

/// Puts a PGN export's file in place (`partial` renamed to its target)
/// and says what it did; a game that could not be written makes it exit
/// with code 1.
fn finish_pgn(
    selected: u64,
    unwritable: &Unwritten,
    partial: Option<&PathBuf>,
    target: Option<&PathBuf>,
    leftovers: Leftovers,
) -> Result<ExitStatus, Error> {
    for line in unwritable.report() {
        stderr_line!("pgnload: {line}");
    }
    let exported = selected.checked_sub(unwritable.count).ok_or_else(|| {
        Error::bug(format!(
            "export skipped {} of {selected} games",
            unwritable.count
        ))
    })?;
    let note = if unwritable.count > 0 {
        format!(
            ", skipped {} that cannot be written, of {selected} selected",
            unwritable.count
        )
    } else {
        String::new()
    };
    match (partial, target) {
        (Some(partial), Some(target)) => {
            fs::rename(partial, target).map_err(open_err(target))?;
            leftovers.keep();
            super::print(&format!(
                "exported {exported} games to {}{note}\n",
                target.display()
            ))?;
        }
        (None, Some(device)) => {
            super::print(&format!(
                "exported {exported} games to {}{note}\n",
                device.display()
            ))?;
        }
        _ => stderr_line!("pgnload: exported {exported} games{note}"),
    }
    Ok(if unwritable.count > 0 {
        ExitStatus::CompletedWithRejects
    } else {
        ExitStatus::Clean
    })
}

/// An error opening `path` for the export.
fn open_err(path: &Path) -> impl FnOnce(io::Error) -> Error {
    let path = path.to_owned();
    move |source| Error::Open { path, source }
}

/// Where PGN goes: the `partial` file (created), a device or pipe that
/// `target` names (opened as it is), or stdout.
fn pgn_sink(partial: Option<&PathBuf>, target: Option<&PathBuf>) -> Result<Box<dyn Write>, Error> {
    Ok(match (partial, target) {
        (Some(path), _) => Box::new(fs::File::create(path).map_err(open_err(path))?),
        (None, Some(device)) => Box::new(
            fs::OpenOptions::new()
                .write(true)
                .open(device)
                .map_err(open_err(device))?,
        ),
        (None, None) => Box::new(io::stdout().lock()),
    })
}

/// A batch's games as PGN, with what could not be written of them.
/// Formatting is most of the client's work: the batch's games are
/// formatted in parallel, a run of games into one text (one allocation and
/// one write per run, not per game), then written in order. A game that
/// cannot be written is taken back out of its run's text.
fn format_batch(batch: &[games::GameWithMoves]) -> Result<Vec<(String, Unwritten)>, Error> {
    batch
        .par_chunks(FORMATTED_TOGETHER)
        .map(|games| {
            let mut text = String::with_capacity(games.len() * 2560);
            let mut skipped = Unwritten::default();
            for (game, moves) in games {
                let start = text.len();
                if skipped
                    .skip(pgn::write_game(game, moves, &mut text))?
                    .is_none()
                {
                    text.truncate(start);
                }
            }
            Ok((text, skipped))
        })
        .collect()
}
