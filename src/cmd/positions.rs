//! `pgnload positions`: the contract in a form any script can diff.
//!
//! For every position of every accepted game:
//! `game_key<TAB>ply<TAB>normalized_fen<TAB>signed_digest`, with `game_key` the
//! Lichess id, else the game number within its file. Rejected games go to
//! stderr with their reason. `scripts/py_digests.py` prints the same lines
//! from python-chess.

use std::io::{self, Write};

use crate::{
    chess::replay::GameRecord,
    error::Error,
    error::ExitStatus,
    ingest::pipeline::{Event, InputSpec, Outcome, Pipeline, PipelineConfig},
};

/// Options of `pgnload positions`.
#[derive(Debug, Clone, clap::Args)]
pub struct PositionsArgs {
    /// PGN files (plain, .zst, .bz2, .gz) or `-` for stdin.
    #[arg(required = true)]
    pub inputs: Vec<String>,
}

/// Writes the TSV lines of one game.
pub fn write_game(out: &mut impl Write, game: &GameRecord) -> io::Result<()> {
    let key = game.key();
    for (ply, (fen, digest)) in game.positions.iter().enumerate() {
        writeln!(out, "{key}\t{ply}\t{fen}\t{digest}")?;
    }
    Ok(())
}

/// Runs `pgnload positions`.
pub fn run(args: &PositionsArgs, config: PipelineConfig) -> Result<ExitStatus, Error> {
    let inputs = args.inputs.iter().map(InputSpec::whole).collect();
    let pipeline = Pipeline::start(inputs, config);
    let stdout = io::stdout();
    let mut out = io::BufWriter::with_capacity(1 << 16, stdout.lock());
    let mut rejected = 0u64;
    let mut failed = 0u64;
    for event in &pipeline.events {
        match event {
            Event::Batch(batch) => {
                for outcome in &batch.outcomes {
                    match outcome {
                        Outcome::Game(game) => write_game(&mut out, game).map_err(Error::Output)?,
                        Outcome::Rejected(r) => {
                            rejected += 1;
                            stderr_line!("REJECT\t{}", r.rejection);
                        }
                    }
                }
            }
            Event::Failed { error, .. } => {
                failed += 1;
                stderr_line!("error: {error}");
            }
            Event::Opened { .. } | Event::Finished { .. } => {}
        }
    }
    out.flush().map_err(Error::Output)?;
    Ok(if failed > 0 {
        ExitStatus::Failed
    } else if rejected > 0 {
        ExitStatus::CompletedWithRejects
    } else {
        ExitStatus::Clean
    })
}
