//! One file per subcommand: parse its arguments, call the library, print.
//!
//! Nothing here may hold work another front end would need (importing,
//! checking, talking to the database): that belongs to the layers below
//! (`ingest`, `verify`, `store`, `chess`), which never import `cmd`.

pub mod db;
pub mod explore;
pub mod export;
pub mod game;
pub mod games;
pub mod hash;
pub mod import;
pub mod positions;
pub mod serve;
pub mod status;
pub mod verify;

use std::{
    borrow::Cow,
    fmt::Write as _,
    io::Write,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
};

use crate::{cli, config, error};

/// Runs one command line.
pub fn run(cli: &cli::Cli) -> crate::Result<error::ExitStatus> {
    let file = match &cli.global.config {
        Some(path) => config::load_file(path)?,
        None => config::FileConfig::default(),
    };
    let settings = config::Settings::resolve(file, cli.overrides())?;
    if settings.threads > 0 {
        // The global pool is built nowhere else, so a failure is the system
        // refusing the threads (a process limit): say so rather than run on
        // rayon's default pool with another thread count than asked.
        rayon::ThreadPoolBuilder::new()
            .num_threads(settings.threads)
            .build_global()
            .map_err(|e| {
                crate::Error::Config(format!(
                    "starting {} worker threads (--threads): {e}",
                    settings.threads
                ))
            })?;
    }
    match &cli.command {
        cli::Command::Hash(args) => hash::run(args),
        cli::Command::Positions(args) => positions::run(args, settings.pipeline),
        cli::Command::Db(command) => db::run(command, &settings, cli.global.quiet),
        cli::Command::Import(args) => import::run(args, &settings, cli.global.quiet),
        cli::Command::Status(args) => status::run(args, &settings),
        cli::Command::Verify(args) => verify::run(args, &settings, cli.global.quiet),
        cli::Command::Games(args) => games::run(args, &settings),
        cli::Command::Game(command) => game::run(command, &settings),
        cli::Command::Export(args) => export::run(args, &settings, cli.global.quiet),
        cli::Command::Explore(args) => explore::run(args, &settings),
        cli::Command::Serve(args) => serve::run(args, &settings),
    }
}

/// `text` as a table or a line for people shows it: every control
/// character (C0, DEL, C1) as a `\u{1b}` escape, so a name read from a
/// file can neither drive the terminal (move the cursor, recolour, clear
/// the screen) nor break a table's lines. Everything else is shown as it
/// is. JSON output is escaped by serde, and PGN output keeps tags as read.
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for ch in text.chars() {
        if ch.is_control() {
            let _ = write!(out, "\\u{{{:x}}}", u32::from(ch));
        } else {
            out.push(ch);
        }
    }
    Cow::Owned(out)
}

/// A time as every JSON output writes it: RFC 3339 in UTC to the second,
/// `2026-11-26T17:01:09Z`, the one form that JavaScript's `Date`, jq's
/// `fromdate`, Python's `datetime.fromisoformat` and RFC 3339 parsers all
/// read. Formatted here, from the value, never by PostgreSQL's text output
/// (whose `+00` offset they reject).
pub fn json_time(at: chrono::DateTime<chrono::Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// Writes to stdout without panicking when the reader went away (`| head`):
/// the error surfaces as [`crate::Error::Output`], of kind
/// [`error::ErrorKind::ReaderGone`], which ends a command with 0.
pub fn print(text: &str) -> Result<(), crate::Error> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(crate::Error::Output)
}

/// [`print`] for the summary of a command whose exit status says more
/// than its text (`verify`'s mismatches, an interrupted check): a reader
/// that went away (`| head`) is no error, so the status still says how
/// the command ended (through [`print`], `main` would make it 0); any
/// other failure to write (a full disk) is.
pub fn print_outcome(text: &str) -> Result<(), crate::Error> {
    match print(text) {
        Err(e) if e.kind() == error::ErrorKind::ReaderGone => Ok(()),
        written => written,
    }
}

/// Ctrl-C and SIGTERM for a command that stops cleanly: the first adds one
/// to `interrupts` and prints `first` (the command stops at its next safe
/// point and exits with code 3); a second prints `second` and exits with
/// code 3 at once. The handlers are installed before this returns, so a
/// signal that arrives once the command has visibly started is never lost
/// to the default action (which would kill the process unflushed).
pub fn watch_signals(
    runtime: &tokio::runtime::Runtime,
    interrupts: Arc<AtomicUsize>,
    first: &'static str,
    second: &'static str,
) -> Result<(), crate::Error> {
    watch_signals_then(runtime, interrupts, first, second, || {})
}

/// [`watch_signals`], with `after_first` run once the first signal is
/// counted and said: for a command whose work must be told at once, not at
/// its next safe point (`db backup` stops its running tool there).
pub fn watch_signals_then(
    runtime: &tokio::runtime::Runtime,
    interrupts: Arc<AtomicUsize>,
    first: &'static str,
    second: &'static str,
    after_first: impl Fn() + Send + 'static,
) -> Result<(), crate::Error> {
    use tokio::signal::unix::{SignalKind, signal};
    let _entered = runtime.enter();
    let installed = |kind: SignalKind| {
        signal(kind).map_err(|source| crate::Error::System {
            what: "installing a signal handler",
            source,
        })
    };
    let (mut int, mut term) = (
        installed(SignalKind::interrupt())?,
        installed(SignalKind::terminate())?,
    );
    runtime.spawn(async move {
        loop {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
            if interrupts.fetch_add(1, Ordering::SeqCst) == 0 {
                stderr_line!("pgnload: {first}");
                after_first();
            } else {
                stderr_line!("pgnload: {second}");
                std::process::exit(i32::from(crate::error::ExitStatus::Interrupted.code()));
            }
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::printable;

    #[test]
    fn control_characters_are_shown_escaped() {
        assert_eq!(printable("Magnus"), "Magnus");
        assert_eq!(printable("J\u{f6}rg \u{5f20}"), "J\u{f6}rg \u{5f20}");
        assert_eq!(printable("a\u{1b}[31mred"), "a\\u{1b}[31mred");
        assert_eq!(
            printable("\0\t\n\r\u{7f}\u{85}\u{9b}x"),
            "\\u{0}\\u{9}\\u{a}\\u{d}\\u{7f}\\u{85}\\u{9b}x"
        );
    }
}
