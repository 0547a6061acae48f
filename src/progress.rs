//! Progress reporting: an indicatif bar over input bytes on a terminal
//! (compressed bytes for compressed inputs, so the ETA is honest), one log
//! line every few seconds otherwise (cron, CI), nothing with `--quiet`.

use std::{
    io::IsTerminal,
    time::{Duration, Instant},
};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// What the progress line shows.
#[derive(Debug, Clone, Copy, Default)]
pub struct Snapshot {
    /// Games read so far in this run.
    pub games: u64,
    /// Positions referenced so far.
    pub positions: u64,
    /// Fraction of position references resolved without the database.
    pub memory_hit_rate: f64,
    /// Bytes of the current input consumed.
    pub bytes: u64,
}

enum Mode {
    Quiet,
    Bar(ProgressBar),
    Log { last: Instant, every: Duration },
}

/// Reports progress of one input at a time.
pub struct Progress {
    mode: Mode,
    started: Instant,
    input: String,
    len: Option<u64>,
}

impl Progress {
    /// A reporter fitting stderr: a bar on a terminal, log lines otherwise.
    pub fn new(quiet: bool) -> Progress {
        let mode = if quiet {
            Mode::Quiet
        } else if std::io::stderr().is_terminal() {
            Mode::Bar(ProgressBar::with_draw_target(
                None,
                ProgressDrawTarget::stderr(),
            ))
        } else {
            Mode::Log {
                last: Instant::now(),
                every: Duration::from_secs(5),
            }
        };
        Progress {
            mode,
            started: Instant::now(),
            input: String::new(),
            len: None,
        }
    }

    /// A new input begins.
    pub fn start_input(&mut self, name: &str, len: Option<u64>) {
        self.input = name.to_owned();
        self.len = len;
        if let Mode::Bar(bar) = &self.mode {
            bar.reset();
            bar.set_length(len.unwrap_or(0));
            let template = if len.is_some() {
                "{prefix} [{bar:30}] {bytes}/{total_bytes} {msg} ETA {eta}"
            } else {
                "{prefix} {spinner} {bytes} {msg}"
            };
            if let Ok(style) = ProgressStyle::with_template(template) {
                bar.set_style(style.progress_chars("=> "));
            }
            bar.set_prefix(name.to_owned());
        }
    }

    /// Updates the display.
    pub fn update(&mut self, now: Snapshot) {
        let elapsed = self.started.elapsed().as_secs_f64().max(1e-9);
        let message = format!(
            "{} games ({:.0}/s), {:.0} positions/s, {:.1}% in memory",
            now.games,
            now.games as f64 / elapsed,
            now.positions as f64 / elapsed,
            100.0 * now.memory_hit_rate
        );
        match &mut self.mode {
            Mode::Quiet => {}
            Mode::Bar(bar) => {
                bar.set_position(now.bytes);
                bar.set_message(message);
            }
            Mode::Log { last, every } => {
                if last.elapsed() >= *every {
                    *last = Instant::now();
                    let share = self.len.filter(|&l| l > 0).map_or(String::new(), |l| {
                        format!(" {:.1}%", 100.0 * now.bytes as f64 / l as f64)
                    });
                    eprintln!("pgnload: {}{share}: {message}", self.input);
                }
            }
        }
    }

    /// Clears the bar before the summary is printed.
    pub fn finish(&self) {
        if let Mode::Bar(bar) = &self.mode {
            bar.finish_and_clear();
        }
    }
}
