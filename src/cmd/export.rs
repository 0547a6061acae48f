//! `pgnload export`: the games a filter selects (all by default) as PGN,
//! in import order, streamed to a file or stdout in constant memory.
//!
//! A file is written under a `.partial` name and renamed when complete,
//! so a file with the asked name is always a whole export.

use std::{
    fs,
    io::{self, Write},
    path::PathBuf,
};

use rayon::prelude::*;

use crate::{
    config::Settings,
    error::{Error, ExitStatus},
    export::pgn,
    progress::Progress,
    query::{
        filter::FilterArgs,
        games::{self, Order},
    },
    store::db,
};

/// Options of `pgnload export`.
#[derive(Debug, Clone, clap::Args)]
pub struct ExportArgs {
    /// Which games (all by default).
    #[command(flatten)]
    pub filter: FilterArgs,
    /// Where to write: a file, or - for stdout.
    #[arg(long, short, default_value = "-")]
    pub output: String,
}

/// Runs `pgnload export`.
pub fn run(args: &ExportArgs, settings: &Settings, quiet: bool) -> Result<ExitStatus, Error> {
    let target = (args.output != "-").then(|| PathBuf::from(&args.output));
    let partial = target.as_ref().map(|path| {
        let mut name = path.as_os_str().to_owned();
        name.push(".partial");
        PathBuf::from(name)
    });
    let sink: Box<dyn Write> = match &partial {
        Some(path) => Box::new(fs::File::create(path).map_err(|source| Error::Open {
            path: path.clone(),
            source,
        })?),
        None => Box::new(io::stdout().lock()),
    };
    let mut out = io::BufWriter::with_capacity(1 << 16, sink);
    let runtime = db::runtime()?;
    let written = runtime.block_on(async {
        let mut database = db::connect(&settings.target()).await?;
        db::migrate(&mut database.client).await?;
        let filter = args.filter.resolve(&database.client).await?;
        let mut progress = Progress::counting_for(quiet, "export", "games");
        progress.set_total(Some(games::count(&database.client, &filter).await?));
        let written = games::for_each_batch(
            &mut database.client,
            &filter,
            Order::Imported,
            true,
            |batch| {
                // Formatting is most of the client's work: the batch's
                // games are formatted in parallel, then written in order.
                let texts = batch
                    .par_iter()
                    .map(|(game, moves)| {
                        let mut text = String::with_capacity(2048);
                        pgn::write_game(game, moves, &mut text).map(|()| text)
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
        database.close()?;
        Ok::<_, Error>(written)
    })?;
    out.flush().map_err(Error::Output)?;
    drop(out);
    let summary = format!("exported {written} games");
    match (&partial, &target) {
        (Some(partial), Some(target)) => {
            fs::rename(partial, target).map_err(|source| Error::Open {
                path: target.clone(),
                source,
            })?;
            super::print(&format!("{summary} to {}\n", target.display()))?;
        }
        _ => eprintln!("pgnload: {summary}"),
    }
    Ok(ExitStatus::Clean)
}
