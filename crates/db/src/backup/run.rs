//! Running a tool to completion, and stopping it when the front end
//! reports an interrupt (the signals themselves belong to the binary).

use std::{
    fmt::Write as _,
    io::{self, Read},
    path::Path,
    process::{Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicI32, AtomicUsize, Ordering},
    },
};

use nix::{
    sys::signal::{Signal, kill},
    unistd::Pid,
};

use super::BackupError;

/// How much of a tool's stderr is kept for the error message: its first
/// lines name the problem, and a runaway tool must not fill memory.
const STDERR_LIMIT: usize = 32 << 10;

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

    /// Runs a tool to completion with stdout discarded and stderr kept
    /// (its first [`STDERR_LIMIT`] bytes; the rest is read and counted, so
    /// the tool never blocks on a full pipe).
    pub(super) fn run_tool(
        &self,
        mut cmd: Command,
        path: &Path,
        tool: &'static str,
    ) -> Result<(), BackupError> {
        let mut child = cmd
            .stdout(Stdio::null())
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
        let mut kept = Vec::new();
        let mut dropped = 0u64;
        if let Some(mut stderr) = child.stderr.take() {
            let mut buf = [0u8; 8192];
            loop {
                match stderr.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        let room = STDERR_LIMIT.saturating_sub(kept.len()).min(n);
                        kept.extend_from_slice(&buf[..room]);
                        dropped += (n - room) as u64;
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    // The tool's exit status still says how it went.
                    Err(_) => break,
                }
            }
        }
        let status = child.wait();
        self.child.store(0, Ordering::SeqCst);
        let status = status.map_err(|source| BackupError::Spawn {
            path: path.to_path_buf(),
            source,
        })?;
        let mut stderr = String::from_utf8_lossy(&kept).into_owned();
        if dropped > 0 {
            let _ = write!(stderr, "\n(… {dropped} more bytes of {tool}'s output)");
        }
        if status.success() {
            if !stderr.trim().is_empty() {
                stderr_line!("pgnload: {tool} said:\n{}", stderr.trim_end());
            }
            return Ok(());
        }
        if self.interrupted() {
            return Err(BackupError::Interrupted {
                tool,
                aftermath: String::new(),
            });
        }
        Err(BackupError::Failed {
            tool,
            status,
            aftermath: String::new(),
            stderr,
        })
    }
}
