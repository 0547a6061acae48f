//! Files and directories another account may own (the service user's, a
//! socket directory under /tmp), handled so that root is never redirected:
//! created anew, opened without following links, changed through handles.

use std::{
    fs::{self, File, OpenOptions},
    io,
    os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt, fchown},
    path::Path,
};

use nix::{fcntl::OFlag, unistd::geteuid};

use super::{
    error::{EmbeddedError, Result, io_err},
    service_user::ServiceAccount,
};

/// Gives a file or directory, by its open handle, the private mode (0700
/// for a directory, 0600 for a file) and, when root, to the service
/// account. Handles, not paths: a path inside a directory the service
/// account owns can be swapped for a link between a check and a `chown`.
pub(super) fn hand_over(handle: &File, path: &Path, acct: Option<&ServiceAccount>) -> Result<()> {
    let meta = handle.metadata().map_err(io_err("inspecting", path))?;
    let mode = if meta.is_dir() { 0o700 } else { 0o600 };
    handle
        .set_permissions(fs::Permissions::from_mode(mode))
        .map_err(io_err("setting permissions of", path))?;
    match acct {
        Some(acct) => fchown(handle, Some(acct.uid.as_raw()), Some(acct.gid.as_raw()))
            .map_err(io_err(format!("handing over to user {}", acct.name), path)),
        None => Ok(()),
    }
}

/// Opens an existing file for reading, failing (`ELOOP`) on a symlink
/// instead of following it: for files in directories the server's user
/// owns, which root must never be redirected from. `O_NONBLOCK` so that a
/// FIFO planted there cannot block root (it reads as empty).
pub(super) fn open_no_follow(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags((OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK).bits())
        .open(path)
}

/// Opens a directory itself (not a symlink to one) to work on its handle.
pub(super) fn open_dir_no_follow(dir: &Path) -> Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags((OFlag::O_NOFOLLOW | OFlag::O_DIRECTORY).bits())
        .open(dir)
        .map_err(io_err("opening the directory (not following links)", dir))
}

/// Creates `path` anew, mode 0600: whatever is there (a leftover, or a link
/// planted to redirect root's write) is removed, never followed, and
/// `O_EXCL` creation does not follow links either.
pub(super) fn create_fresh(path: &Path) -> Result<File> {
    remove_if_present(path)?;
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(OFlag::O_NOFOLLOW.bits())
        .open(path)
        .map_err(io_err("creating", path))
}

/// Removes a file or symlink (never what a symlink points to) if present.
pub(super) fn remove_if_present(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err("removing", path)(e)),
    }
}

/// The error for a path pgnload refuses to use because another account
/// could have put it there.
pub(super) fn refuse(path: &Path, why: impl std::fmt::Display) -> EmbeddedError {
    EmbeddedError::Io {
        context: format!("refusing to use ({why})"),
        path: path.to_path_buf(),
        source: io::Error::from(io::ErrorKind::PermissionDenied),
    }
}

/// Creates a 0700 directory owned by the account the server runs as, or
/// checks an existing one: a real directory (not a symlink), owned by that
/// account (re-owned if `ours`, i.e. inside pgnload's data directory).
pub(super) fn ensure_private_dir(
    dir: &Path,
    acct: Option<&ServiceAccount>,
    ours: bool,
) -> Result<()> {
    let owner = acct.map_or_else(geteuid, |a| a.uid);
    let created = match fs::create_dir(dir) {
        Ok(()) => true,
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => false,
        Err(e) => return Err(io_err("creating", dir)(e)),
    };
    let unsafe_dir = |reason: String| EmbeddedError::UnsafeSocketDir {
        dir: dir.to_path_buf(),
        reason,
    };
    if !fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir()) {
        return Err(unsafe_dir("not a directory (or a symlink)".into()));
    }
    // From here on only the handle: the entry may be swapped meanwhile.
    let handle = open_dir_no_follow(dir)?;
    if created {
        return hand_over(&handle, dir, acct);
    }
    let meta = handle.metadata().map_err(io_err("inspecting", dir))?;
    if meta.uid() != owner.as_raw() || meta.mode() & 0o077 != 0 {
        if !ours {
            return Err(unsafe_dir(format!(
                "owned by uid {} with mode {:o}; it must be owned by uid {owner} that runs \
                 the server, with no access for other users",
                meta.uid(),
                meta.mode() & 0o7777
            )));
        }
        hand_over(&handle, dir, acct)?;
    }
    Ok(())
}
