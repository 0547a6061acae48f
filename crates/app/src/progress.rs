//! The one progress reporter of the long commands: a bar on a terminal, one
//! log line every few seconds otherwise (cron, CI), nothing with `--quiet`.
//!
//! `import` shows bytes of the current input (compressed bytes for
//! compressed inputs, so the ETA is honest); `verify` shows rows (or lines)
//! checked. Both share how the output is chosen, the log cadence and the
//! bar's clearing; only what a line says differs. Progress goes to stderr
//! only: stdout is the commands' summary, which this must never write.

use std::{
    io::IsTerminal,
    time::{Duration, Instant},
};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// What the import's progress line shows.
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

/// How often a log line is written when stderr is not a terminal.
const LOG_EVERY: Duration = Duration::from_secs(5);

enum Mode {
    Quiet,
    Bar(ProgressBar),
    Log { last: Instant },
}

/// Reports the progress of one command.
pub struct Progress {
    mode: Mode,
    started: Instant,
    /// `import`: the current input's name; `verify`: what is counted
    /// ("positions", "games", "lines").
    label: String,
    /// `import`: the current input's length in bytes, when known.
    len: Option<u64>,
    /// `verify`: rows (lines) checked so far.
    done: u64,
    /// The counting command (`verify`, `export`), and whether it counts
    /// mismatches (only `verify` checks anything).
    command: &'static str,
    checks: bool,
}

impl Progress {
    /// A reporter for `import`, fitting stderr: a bar on a terminal, log
    /// lines otherwise.
    pub fn new(quiet: bool) -> Progress {
        Progress::labelled(quiet, String::new())
    }

    /// A reporter for `verify`, counting `noun` ("positions", …).
    pub fn counting(quiet: bool, noun: &str) -> Progress {
        Progress::labelled(quiet, noun.to_owned())
    }

    /// A reporter for another command that counts `noun` without checking
    /// anything (`export` counting games); `add` takes 0 mismatches.
    pub fn counting_for(quiet: bool, command: &'static str, noun: &str) -> Progress {
        Progress {
            command,
            checks: false,
            ..Progress::labelled(quiet, noun.to_owned())
        }
    }

    fn labelled(quiet: bool, label: String) -> Progress {
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
            }
        };
        Progress {
            mode,
            started: Instant::now(),
            label,
            len: None,
            done: 0,
            command: "verify",
            checks: true,
        }
    }

    /// `n` per second since the start.
    fn rate(&self, n: u64) -> f64 {
        n as f64 / self.started.elapsed().as_secs_f64().max(1e-9)
    }

    /// Sets the bar's template (a template indicatif refuses leaves the
    /// default style: progress is never worth failing a command).
    fn style(bar: &ProgressBar, template: &str) {
        if let Ok(style) = ProgressStyle::with_template(template) {
            bar.set_style(style.progress_chars("=> "));
        }
    }

    /// `import`: a new input begins.
    pub fn start_input(&mut self, name: &str, len: Option<u64>) {
        name.clone_into(&mut self.label);
        self.len = len;
        if let Mode::Bar(bar) = &self.mode {
            bar.reset();
            bar.set_length(len.unwrap_or(0));
            Progress::style(
                bar,
                if len.is_some() {
                    "{prefix} [{bar:30}] {bytes}/{total_bytes} {msg} ETA {eta}"
                } else {
                    "{prefix} {spinner} {bytes} {msg}"
                },
            );
            bar.set_prefix(name.to_owned());
        }
    }

    /// `import`: updates the display.
    pub fn update(&mut self, now: Snapshot) {
        let message = format!(
            "{} games ({:.0}/s), {:.0} positions/s, {:.1}% in memory",
            now.games,
            self.rate(now.games),
            self.rate(now.positions),
            100.0 * now.memory_hit_rate
        );
        match &mut self.mode {
            Mode::Quiet => {}
            Mode::Bar(bar) => {
                bar.set_position(now.bytes);
                bar.set_message(message);
            }
            Mode::Log { last } => {
                if last.elapsed() >= LOG_EVERY {
                    *last = Instant::now();
                    let share = self.len.filter(|&l| l > 0).map_or(String::new(), |l| {
                        format!(" {:.1}%", 100.0 * now.bytes as f64 / l as f64)
                    });
                    stderr_line!("pgnload: {}{share}: {message}", self.label);
                }
            }
        }
    }

    /// `verify`: sets the expected total (an estimate is fine; `None` shows
    /// a spinner).
    pub fn set_total(&self, total: Option<u64>) {
        if let Mode::Bar(bar) = &self.mode {
            let template = match total {
                Some(total) => {
                    bar.set_length(total);
                    "{prefix} [{bar:20}] {human_pos}/~{human_len} {msg} ETA {eta}"
                }
                None => "{prefix} {spinner} {human_pos} {msg}",
            };
            Progress::style(bar, template);
            bar.set_prefix(self.command);
            bar.enable_steady_tick(Duration::from_millis(200));
        }
    }

    /// `verify`: `n` more rows checked, `mismatches` found so far.
    pub fn add(&mut self, n: u64, mismatches: u64) {
        self.done += n;
        let rate = self.rate(self.done);
        let bad = if self.checks {
            format!(", {mismatches} bad")
        } else {
            String::new()
        };
        match &mut self.mode {
            Mode::Quiet => {}
            Mode::Bar(bar) => {
                bar.set_position(self.done);
                bar.set_message(format!("{} {rate:.0}/s{bad}", self.label));
            }
            Mode::Log { last } => {
                if last.elapsed() >= LOG_EVERY {
                    *last = Instant::now();
                    if self.checks {
                        stderr_line!(
                            "pgnload verify: {} {} checked ({rate:.0}/s), {mismatches} mismatches",
                            self.done,
                            self.label
                        );
                    } else {
                        stderr_line!(
                            "pgnload {}: {} {} ({rate:.0}/s)",
                            self.command,
                            self.done,
                            self.label
                        );
                    }
                }
            }
        }
    }

    /// `verify`: rows (lines) checked so far, for the summary.
    pub fn done(&self) -> u64 {
        self.done
    }

    /// Clears the bar before the summary is printed.
    pub fn finish(&self) {
        if let Mode::Bar(bar) = &self.mode {
            bar.finish_and_clear();
        }
    }
}
