//! Running a tool to completion, and stopping it when the front end
//! reports an interrupt (the signals themselves belong to the binary).

use std::{
    collections::VecDeque,
    fmt::Write as _,
    io::{self, BufRead as _, BufReader, Read},
    path::Path,
    process::{Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicI32, AtomicUsize, Ordering},
        mpsc,
    },
    time::Duration,
};

use nix::{
    sys::signal::{Signal, kill},
    unistd::Pid,
};

use super::BackupError;

/// How much of a tool's stderr is kept for the error message: its last
/// lines name the problem (it stops at the first error; `--verbose`
/// writes hundreds of lines before), and a runaway tool must not fill
/// memory.
const STDERR_LIMIT: usize = 32 << 10;

/// How much of a tool's stdout is kept (`pg_restore --list`'s table of
/// contents; the other runs write to a file or a database).
const OUTPUT_LIMIT: u64 = 64 << 20;

/// How often `watch` hears from a running tool that said nothing.
const TICK: Duration = Duration::from_secs(1);

/// The last lines of a tool's stderr, at most [`STDERR_LIMIT`] bytes.
#[derive(Debug, Default)]
struct Tail {
    lines: VecDeque<String>,
    bytes: usize,
    /// Bytes of the lines dropped from the front.
    dropped: u64,
}

impl Tail {
    fn push(&mut self, line: String) {
        self.bytes += line.len() + 1;
        self.lines.push_back(line);
        while self.bytes > STDERR_LIMIT
            && let Some(first) = self.lines.pop_front()
        {
            self.bytes -= first.len() + 1;
            self.dropped += first.len() as u64 + 1;
        }
    }
}

/// Reads `stderr` to its end on a thread of its own, telling `watch` of
/// each step it names and ticking it meanwhile; returns its last lines.
fn follow(
    stderr: impl Read + Send + 'static,
    tool: &'static str,
    watch: &mut dyn FnMut(Option<&str>),
) -> Tail {
    let (sender, lines) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stderr).split(b'\n') {
            let Ok(line) = line else { break };
            let line = String::from_utf8_lossy(&line).trim_end().to_owned();
            if sender.send(line).is_err() {
                break;
            }
        }
    });
    let mut tail = Tail::default();
    loop {
        match lines.recv_timeout(TICK) {
            Ok(line) => {
                if let Line::Step(step) = classify(tool, &line) {
                    watch(Some(&step));
                }
                tail.push(line);
            }
            Err(mpsc::RecvTimeoutError::Timeout) => watch(None),
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    let _ = reader.join();
    tail
}

/// What a line of a tool's stderr is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Line {
    /// `--verbose` names a step worth showing: a table's data dumped or
    /// restored, an index or constraint built.
    Step(String),
    /// Other information (`--verbose`'s other lines, the context of an
    /// error): kept for a failure's message, not shown on success.
    Info,
    /// An error, warning, detail or hint, or a line of no known form:
    /// shown on success too.
    Message,
}

/// The lines of `--verbose` that begin a step ([`Line::Step`]), and the
/// step's name.
const STEPS: [(&str, &str); 5] = [
    ("dumping contents of table ", "table"),
    ("processing data for table ", "table data"),
    ("creating INDEX ", "index"),
    ("creating CONSTRAINT ", "constraint"),
    ("creating FK CONSTRAINT ", "foreign key"),
];

/// What `line` of `tool`'s stderr is (with `LC_MESSAGES=C`: PostgreSQL's
/// tools prefix every line they log with their name, then the level for
/// any but information).
pub(super) fn classify(tool: &str, line: &str) -> Line {
    let Some(rest) = line
        .strip_prefix(tool)
        .and_then(|rest| rest.strip_prefix(": "))
    else {
        return Line::Message;
    };
    if ["error:", "warning:", "detail:", "hint:"]
        .iter()
        .any(|level| rest.starts_with(level))
    {
        return Line::Message;
    }
    STEPS
        .iter()
        .find_map(|(said, step)| {
            let name = rest.strip_prefix(said)?.trim_matches('"');
            Some(Line::Step(format!("{step} {name}")))
        })
        .unwrap_or(Line::Info)
}

/// Ctrl-C and SIGTERM while pgnload backs up or restores, as the front end
/// that owns the signals reports them: it counts each one in the count
/// given to [`Interrupts::new`] and calls [`Interrupts::stop_tool`] at the
/// first. The running tool then stops (SIGTERM; in a terminal, Ctrl-C
/// reaches it directly too), no further tool starts, its unfinished output
/// is removed, and the command ends with [`BackupError::Interrupted`].
#[derive(Debug, Clone)]
pub struct Interrupts {
    count: Arc<AtomicUsize>,
    /// The running tool's pid, 0 when none runs.
    child: Arc<AtomicI32>,
}

impl Interrupts {
    /// Interrupts counted in `count` (more than 0: interrupted).
    pub fn new(count: Arc<AtomicUsize>) -> Interrupts {
        Interrupts {
            count,
            child: Arc::default(),
        }
    }

    fn interrupted(&self) -> bool {
        self.count.load(Ordering::SeqCst) > 0
    }

    /// Before a tool starts: an interrupt already received ends the command.
    pub(super) fn check(&self, tool: &'static str) -> Result<(), BackupError> {
        if self.interrupted() {
            return Err(BackupError::Interrupted {
                tool,
                aftermath: "it did not start".into(),
            });
        }
        Ok(())
    }

    /// Stops the running tool, if one runs (SIGTERM).
    pub fn stop_tool(&self) {
        let pid = self.child.load(Ordering::SeqCst);
        if pid > 0 {
            // It may have exited already (then it is a zombie until waited
            // for, so the pid is still its own): nothing to do.
            let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
        }
    }

    /// Runs a tool to completion; returns its stdout (the first
    /// [`OUTPUT_LIMIT`] bytes). `watch` is called with each step its
    /// `--verbose` output names ([`classify`]) and with `None` about every
    /// [`TICK`] while it runs. Of its stderr the last [`STDERR_LIMIT`] bytes
    /// are kept for the error message (where a tool says what failed), and
    /// on success its warnings are shown; all of it is read, so the tool
    /// never blocks on a full pipe.
    pub(super) fn run_tool(
        &self,
        mut cmd: Command,
        path: &Path,
        tool: &'static str,
        watch: &mut dyn FnMut(Option<&str>),
    ) -> Result<String, BackupError> {
        // Its messages in English, which `classify` reads.
        cmd.env_remove("LC_ALL").env("LC_MESSAGES", "C");
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| BackupError::Spawn {
                path: path.to_path_buf(),
                source,
            })?;
        self.child
            .store(i32::try_from(child.id()).unwrap_or(0), Ordering::SeqCst);
        // An interrupt between the check before the spawn and the store
        // above found no child to stop.
        if self.interrupted() {
            self.stop_tool();
        }
        let stdout = child.stdout.take().map(|mut out| {
            std::thread::spawn(move || {
                let mut kept = Vec::new();
                let _ = io::copy(&mut (&mut out).take(OUTPUT_LIMIT), &mut kept);
                // The rest is read and dropped, so the tool can finish.
                let _ = io::copy(&mut out, &mut io::sink());
                kept
            })
        });
        let lines = child
            .stderr
            .take()
            .map_or_else(Tail::default, |stderr| follow(stderr, tool, watch));
        let status = child.wait();
        self.child.store(0, Ordering::SeqCst);
        let stdout = stdout
            .and_then(|reader| reader.join().ok())
            .unwrap_or_default();
        let status = status.map_err(|source| BackupError::Spawn {
            path: path.to_path_buf(),
            source,
        })?;
        if status.success() {
            let said: Vec<&str> = lines
                .lines
                .iter()
                .map(String::as_str)
                .filter(|line| classify(tool, line) == Line::Message && !line.trim().is_empty())
                .collect();
            if !said.is_empty() {
                stderr_line!("pgnload: {tool} said:\n{}", said.join("\n"));
            }
            return Ok(String::from_utf8_lossy(&stdout).into_owned());
        }
        if self.interrupted() {
            return Err(BackupError::Interrupted {
                tool,
                aftermath: String::new(),
            });
        }
        let mut stderr = String::new();
        if lines.dropped > 0 {
            let _ = writeln!(
                stderr,
                "(… {} earlier bytes of {tool}'s output)",
                lines.dropped
            );
        }
        stderr.push_str(&Vec::from(lines.lines).join("\n"));
        Err(BackupError::Failed {
            tool,
            status,
            aftermath: String::new(),
            stderr,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The steps `--verbose` names, in the forms PostgreSQL 13 to 17 write
    /// them; errors and their details are messages however long the run.
    #[test]
    fn verbose_lines_name_their_steps_and_errors_stay_messages() {
        let step = |name: &str| Line::Step(name.to_owned());
        let cases = [
            (
                "pg_dump",
                "pg_dump: dumping contents of table \"public.games\"",
                step("table public.games"),
            ),
            (
                "pg_restore",
                "pg_restore: processing data for table \"public.moves\"",
                step("table data public.moves"),
            ),
            (
                "pg_restore",
                "pg_restore: creating INDEX \"public.moves_game_idx\"",
                step("index public.moves_game_idx"),
            ),
            (
                "pg_restore",
                "pg_restore: creating CONSTRAINT \"public.games games_pkey\"",
                step("constraint public.games games_pkey"),
            ),
            (
                "pg_restore",
                "pg_restore: creating FK CONSTRAINT \"public.moves moves_game_id_fkey\"",
                step("foreign key public.moves moves_game_id_fkey"),
            ),
            ("pg_dump", "pg_dump: reading extensions", Line::Info),
            (
                "pg_restore",
                "pg_restore: while PROCESSING TOC:",
                Line::Info,
            ),
            (
                "pg_dump",
                "pg_dump: error: query failed: server closed the connection",
                Line::Message,
            ),
            (
                "pg_dump",
                "pg_dump: warning: there are circular foreign-key constraints",
                Line::Message,
            ),
            (
                "pg_restore",
                "pg_restore: detail: Key (id)=(1) already exists.",
                Line::Message,
            ),
            (
                "pg_restore",
                "Command was: CREATE TABLE games ();",
                Line::Message,
            ),
            // Another tool's name is no prefix of this one's.
            (
                "pg_dump",
                "pg_restore: creating INDEX \"public.x\"",
                Line::Message,
            ),
        ];
        for (tool, line, expected) in cases {
            assert_eq!(classify(tool, line), expected, "{line}");
        }
    }

    /// The tail keeps the last lines within its limit and counts the rest.
    #[test]
    fn the_tail_keeps_the_last_lines() {
        let mut tail = Tail::default();
        let line = "x".repeat(1023);
        for _ in 0..40 {
            tail.push(line.clone());
        }
        tail.push("pg_dump: error: the end".into());
        assert_eq!(
            tail.lines.back().map(String::as_str),
            Some("pg_dump: error: the end")
        );
        assert!(tail.bytes <= STDERR_LIMIT, "{}", tail.bytes);
        assert_eq!(tail.dropped + tail.bytes as u64, 40 * 1024 + 24);
    }
}
