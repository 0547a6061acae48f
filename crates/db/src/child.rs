//! Child programs (`pg_dump`, `pg_restore`) that cannot outlive pgnload,
//! and a password handed to them that never touches a disk.
//!
//! A `kill -9` of pgnload runs no destructor: a child it started would go
//! on working (holding locks, writing an archive nobody will publish), and
//! any password file it wrote would stay in the temporary directory. So:
//!
//! * every child is started through pgnload's own binary in a guard role
//!   ([`GUARD_ARG`]), which asks the kernel for a parent-death signal
//!   (`PR_SET_PDEATHSIG`, kept across `exec`) and then becomes the tool.
//!   The signal is SIGTERM: `pg_dump` and `pg_restore` then cancel their
//!   queries on the server and exit. The guard exists because the signal
//!   must be set in the child between `fork` and `exec`, which std offers
//!   only through `unsafe` (`pre_exec`), forbidden in this crate;
//! * the password goes into an anonymous memory file (`memfd_create`, mode
//!   0600) inherited by the child and named to libpq as `/dev/fd/N`: it has
//!   no path, and it is gone when the last process holding it exits.

use std::{
    ffi::OsString,
    fs::File,
    io::Write,
    os::{
        fd::{AsRawFd, OwnedFd},
        unix::{fs::PermissionsExt, process::CommandExt},
    },
    path::{Path, PathBuf},
    process::Command,
};

use nix::{
    sys::{
        memfd::{MFdFlags, memfd_create},
        prctl,
        signal::Signal,
    },
    unistd::{Pid, getppid},
};

/// The first argument that makes the `pgnload` binary a guard:
/// `pgnload __pgnload-child-guard PARENT_PID TOOL ARGS…` (see
/// [`run_guard`]). Not a subcommand: users never type it.
pub const GUARD_ARG: &str = "__pgnload-child-guard";

/// A [`Command`] that runs `tool` as a child which receives SIGTERM when
/// pgnload dies, however it dies. Arguments, environment and stdio set on
/// the returned command reach the tool unchanged. Falls back to running the
/// tool directly when pgnload's own binary cannot be found (then a child can
/// outlive a killed pgnload, as any program's can).
pub fn guarded(tool: &Path) -> Command {
    match std::env::current_exe() {
        Ok(me) => {
            let mut cmd = Command::new(me);
            cmd.arg(GUARD_ARG)
                .arg(std::process::id().to_string())
                .arg(tool);
            cmd
        }
        Err(_) => Command::new(tool),
    }
}

/// The guard's whole life, called by `main` when the first argument is
/// [`GUARD_ARG`]: set the parent-death signal, check the parent is still
/// the pgnload that started us (it may have died before the signal was
/// set, which the kernel would then never send), and `exec` the tool.
/// Returns only on failure, with the exit code to use (127, as a shell
/// uses for a program that cannot run).
pub fn run_guard(mut args: impl Iterator<Item = OsString>) -> u8 {
    let parent = args
        .next()
        .and_then(|pid| pid.to_str().and_then(|p| p.parse::<i32>().ok()));
    let Some(parent) = parent else {
        stderr_line!("pgnload: {GUARD_ARG} is internal to pgnload and takes PARENT_PID TOOL ARGS…");
        return 127;
    };
    let Some(tool) = args.next() else {
        stderr_line!("pgnload: {GUARD_ARG}: no program to run");
        return 127;
    };
    if let Err(e) = prctl::set_pdeathsig(Signal::SIGTERM) {
        stderr_line!("pgnload: could not ask for a parent-death signal: {e}");
        return 127;
    }
    if getppid() != Pid::from_raw(parent) {
        // pgnload died before the signal was set: nobody waits for us.
        return 127;
    }
    let error = Command::new(&tool).args(args).exec();
    stderr_line!(
        "pgnload: could not run {}: {error}",
        Path::new(&tool).display()
    );
    127
}

/// A password held in an anonymous memory file that children inherit.
/// libpq reads it as a password file (`PGPASSFILE`) through
/// [`SecretFile::path`]; closing it (dropping this, or pgnload's death)
/// frees it.
#[derive(Debug)]
pub struct SecretFile {
    fd: OwnedFd,
}

impl SecretFile {
    /// A new memory file holding `contents`, readable by its owner only
    /// (libpq ignores a password file with group or other access) and left
    /// open across `exec` so that children can open it.
    pub fn new(name: &str, contents: &[u8]) -> std::io::Result<SecretFile> {
        // MFdFlags::empty(): no close-on-exec, so children inherit it.
        let fd = memfd_create(name, MFdFlags::empty()).map_err(std::io::Error::from)?;
        let mut file = File::from(fd);
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        file.write_all(contents)?;
        Ok(SecretFile {
            fd: OwnedFd::from(file),
        })
    }

    /// The name a child opens it by: `/dev/fd/N`, valid in any process
    /// that inherited the descriptor.
    pub fn path(&self) -> PathBuf {
        PathBuf::from(format!("/dev/fd/{}", self.fd.as_raw_fd()))
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    #[test]
    fn a_secret_file_is_private_and_readable_through_its_path() {
        let secret = SecretFile::new("test", b"*:*:*:*:pw\n").expect("memfd");
        let path = secret.path();
        let meta = std::fs::metadata(&path).expect("stat through /dev/fd");
        assert!(meta.is_file(), "libpq wants a plain file");
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        let mut text = String::new();
        File::open(&path)
            .expect("reopened")
            .read_to_string(&mut text)
            .expect("read");
        assert_eq!(text, "*:*:*:*:pw\n");
    }

    #[test]
    fn a_guarded_command_names_its_parent_and_the_tool() {
        let cmd = guarded(Path::new("/usr/bin/true"));
        let args: Vec<_> = cmd.get_args().collect();
        assert_eq!(args[0], GUARD_ARG);
        assert_eq!(args[1], std::process::id().to_string().as_str());
        assert_eq!(args[2], "/usr/bin/true");
    }
}
