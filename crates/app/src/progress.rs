//! The one progress reporter of the long commands: a bar on a terminal, one
//! log line every few seconds otherwise (cron, CI), nothing with `--quiet`.
//!
//! `import` shows bytes of the current input (compressed bytes for
//! compressed inputs, so the ETA is honest); `verify` shows rows (or lines)
//! checked. The commands made of named steps (`db backup`, `db restore`,
//! `db explorer`, `verify --explorer`, a bulk load's finish) show the
//! [`Step`]s the library reports: each phase by name with its elapsed time,
//! and a count where PostgreSQL or the tool gives one, never an ETA where
//! there is no rate to base it on. All share how the output is chosen, the
//! log cadence and the bar's clearing; only what a line says differs.
//! Progress goes to stderr only: stdout is the commands' summary, which
//! this must never write.

use std::{
    io::IsTerminal,
    time::{Duration, Instant},
};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

pub use crate::store::progress::{Count, Step, Steps, Unit};

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
    /// `import`: the current input was read to its end, its last batches
    /// are being written (the bar shows no ETA then: there is no rate of
    /// bytes left to base one on).
    tail: bool,
    /// Steps: the bar's shape for the current phase's counts.
    shape: Option<(bool, Unit)>,
}

impl Progress {
    /// A reporter for `import`, fitting stderr: a bar on a terminal, log
    /// lines otherwise.
    pub fn new(quiet: bool) -> Progress {
        Progress::labelled(quiet, String::new(), "verify", true)
    }

    /// A reporter for `verify`, counting `noun` ("positions", …).
    pub fn counting(quiet: bool, noun: &str) -> Progress {
        Progress::labelled(quiet, noun.to_owned(), "verify", true)
    }

    /// A reporter for another command that counts `noun` without checking
    /// anything (`export` counting games); `add` takes 0 mismatches.
    pub fn counting_for(quiet: bool, command: &'static str, noun: &str) -> Progress {
        Progress::labelled(quiet, noun.to_owned(), command, false)
    }

    /// A reporter for a command made of named steps (`db backup`, …),
    /// shown as `pgnload COMMAND: …` ([`Progress::show`]).
    pub fn steps(quiet: bool, command: &'static str) -> Progress {
        Progress::labelled(quiet, String::new(), command, false)
    }

    fn labelled(quiet: bool, label: String, command: &'static str, checks: bool) -> Progress {
        let mode = if quiet {
            Mode::Quiet
        } else if std::io::stderr().is_terminal() {
            Mode::Bar(Progress::new_bar())
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
            command,
            checks,
            tail: false,
            shape: None,
        }
    }

    fn new_bar() -> ProgressBar {
        ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr())
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
        self.tail = false;
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
                if !self.tail && self.len.is_some_and(|len| len > 0 && now.bytes >= len) {
                    // The reader runs batches ahead of the database: what
                    // is left is writing them, at no rate of bytes.
                    self.tail = true;
                    Progress::style(
                        bar,
                        "{prefix} {spinner} read to its end, writing its last batches: {msg}",
                    );
                    bar.enable_steady_tick(Duration::from_millis(200));
                }
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
    /// a spinner). A log says at once what the run is about to count, so
    /// that a short run says it too.
    pub fn set_total(&self, total: Option<u64>) {
        if let Mode::Log { .. } = &self.mode {
            stderr_line!(
                "{}",
                start_line(self.command, &self.label, self.checks, total)
            );
        }
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

    /// Shows one step of a command made of steps ([`Progress::steps`]): a
    /// phase replaces the bar's text (and is a line of its own in a log,
    /// at once: phases are few), a count fills the bar (and a log line
    /// every few seconds), a message is a line above the bar.
    pub fn show(&mut self, step: Step<'_>) {
        let began = !self.label.is_empty();
        if let Step::Phase(name) = step {
            name.clone_into(&mut self.label);
            self.started = Instant::now();
        }
        match &mut self.mode {
            Mode::Quiet => {}
            Mode::Log { last } => {
                let due = last.elapsed() >= LOG_EVERY;
                if let Some(line) = log_line(self.command, &self.label, step, due) {
                    *last = Instant::now();
                    stderr_line!("{line}");
                }
            }
            Mode::Bar(bar) => {
                if bar.is_finished() {
                    *bar = Progress::new_bar();
                }
                match step {
                    // Before the first phase there is no bar to keep.
                    Step::Said(text) if !began => stderr_line!("pgnload: {text}"),
                    Step::Said(text) => bar.suspend(|| stderr_line!("pgnload: {text}")),
                    Step::Phase(name) => {
                        // The counts of the phases before stay on the bar
                        // (they count the same list) until new ones come.
                        if self.shape.is_none() {
                            Progress::style(bar, "{prefix} {spinner} {wide_msg} {elapsed}");
                        }
                        bar.reset_elapsed();
                        bar.set_message(name.to_owned());
                        bar.set_prefix(self.command);
                        bar.enable_steady_tick(Duration::from_millis(200));
                    }
                    Step::Count(count) => {
                        let shape = (count.total.is_some(), count.unit);
                        if self.shape != Some(shape) {
                            self.shape = Some(shape);
                            Progress::style(bar, bar_template(shape));
                        }
                        bar.set_length(count.total.unwrap_or(0));
                        bar.set_position(count.done);
                        bar.set_message(phase_text(&self.label, count.detail));
                    }
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

/// A bar still shown when its command ends early (an error) is cleared
/// before the error is printed.
impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

/// The log's first line of a counting command (`verify`: `checks`;
/// `export`), with its total when known (`verify`'s is an estimate).
fn start_line(command: &str, noun: &str, checks: bool, total: Option<u64>) -> String {
    match (checks, total) {
        (true, Some(total)) => format!("pgnload {command}: checking about {total} {noun}"),
        (true, None) => format!("pgnload {command}: checking {noun}"),
        (false, Some(total)) => format!("pgnload {command}: {total} {noun} to write"),
        (false, None) => format!("pgnload {command}: writing {noun}"),
    }
}

/// The bar of a phase's counts: (whether the total is known, the unit).
fn bar_template(shape: (bool, Unit)) -> &'static str {
    match shape {
        (true, Unit::Bytes) => "{prefix} [{bar:25}] {bytes}/{total_bytes} {wide_msg} {elapsed}",
        (true, Unit::Items) => "{prefix} [{bar:25}] {pos}/{len} {wide_msg} {elapsed}",
        (false, Unit::Bytes) => "{prefix} {spinner} {bytes} {wide_msg} {elapsed}",
        (false, Unit::Items) => "{prefix} {spinner} {pos} {wide_msg} {elapsed}",
    }
}

/// A phase's name with what is under way in it.
fn phase_text(phase: &str, detail: &str) -> String {
    if detail.is_empty() {
        phase.to_owned()
    } else {
        format!("{phase}: {detail}")
    }
}

/// The log line of `step` of `command` in `phase` (the current one, after
/// `step` if it begins one), or `None`: a count is written only when
/// `due` (the log's cadence), every phase and message at once.
fn log_line(command: &str, phase: &str, step: Step<'_>, due: bool) -> Option<String> {
    match step {
        Step::Said(text) => Some(format!("pgnload: {text}")),
        Step::Phase(name) => Some(format!("pgnload {command}: {name}")),
        Step::Count(count) if due => {
            let amount = |n: u64| match count.unit {
                Unit::Bytes => format!("{:.1} MiB", n as f64 / f64::from(1u32 << 20)),
                Unit::Items => n.to_string(),
            };
            let done = match count.total {
                Some(total) => format!("{} of {}", amount(count.done), amount(total)),
                None => amount(count.done),
            };
            let detail = if count.detail.is_empty() {
                String::new()
            } else {
                format!(", {}", count.detail)
            };
            Some(format!("pgnload {command}: {phase}: {done}{detail}"))
        }
        Step::Count(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(done: u64, total: Option<u64>, unit: Unit, detail: &str) -> Step<'_> {
        Step::Count(Count {
            done,
            total,
            unit,
            detail,
        })
    }

    /// Phases and messages are written at once whatever the cadence; a
    /// count only when due, naming its phase and its unit.
    #[test]
    fn log_lines_name_the_command_and_the_phase() {
        assert_eq!(
            log_line(
                "db restore",
                "",
                Step::Phase("index public.moves_pkey"),
                false
            ),
            Some("pgnload db restore: index public.moves_pkey".into())
        );
        assert_eq!(
            log_line("db backup", "x", Step::Said("backing up"), false),
            Some("pgnload: backing up".into())
        );
        assert_eq!(
            log_line(
                "db backup",
                "tables",
                count(1, None, Unit::Bytes, ""),
                false
            ),
            None
        );
        assert_eq!(
            log_line(
                "db backup",
                "table public.games",
                count(3 << 20, None, Unit::Bytes, ""),
                true
            ),
            Some("pgnload db backup: table public.games: 3.0 MiB".into())
        );
        assert_eq!(
            log_line(
                "import",
                "rebuilding indexes",
                count(2, Some(17), Unit::Items, "moves_pkey (sorting live tuples)"),
                true
            ),
            Some(
                "pgnload import: rebuilding indexes: 2 of 17, moves_pkey (sorting live tuples)"
                    .into()
            )
        );
    }

    /// A counting command's log begins with what it counts.
    #[test]
    fn a_counting_log_says_what_it_counts_first() {
        assert_eq!(
            start_line("export", "games", false, Some(438)),
            "pgnload export: 438 games to write"
        );
        assert_eq!(
            start_line("verify", "positions", true, Some(26846)),
            "pgnload verify: checking about 26846 positions"
        );
        assert_eq!(
            start_line("verify", "lines", true, None),
            "pgnload verify: checking lines"
        );
    }

    /// Every shape of count has a template indicatif accepts (a refused
    /// one would silently leave the default style).
    #[test]
    fn every_bar_template_is_accepted() {
        for shape in [
            (true, Unit::Bytes),
            (true, Unit::Items),
            (false, Unit::Bytes),
            (false, Unit::Items),
        ] {
            assert!(ProgressStyle::with_template(bar_template(shape)).is_ok());
        }
    }
}
