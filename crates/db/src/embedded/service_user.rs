//! Running as root: the unprivileged `postgres` user the server programs
//! run as, created when missing, and whether it can reach a directory.

use std::{
    fs,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use nix::unistd::{Gid, Uid, User, geteuid};

use super::{
    SERVICE_USER,
    error::{EmbeddedError, Result, sys_err},
};

/// The unprivileged user the server runs as when pgnload runs as root.
#[derive(Debug, Clone)]
pub(super) struct ServiceAccount {
    pub(super) name: String,
    pub(super) uid: Uid,
    pub(super) gid: Gid,
    pub(super) home: PathBuf,
}

impl From<User> for ServiceAccount {
    fn from(user: User) -> Self {
        ServiceAccount {
            name: user.name,
            uid: user.uid,
            gid: user.gid,
            home: user.dir,
        }
    }
}

/// `None` unless running as root; then the `postgres` user, created if
/// missing, that the server programs run as.
pub(super) fn service_account() -> Result<Option<ServiceAccount>> {
    if !geteuid().is_root() {
        return Ok(None);
    }
    let lookup = || User::from_name(SERVICE_USER).map_err(sys_err("looking up user postgres"));
    let user = if let Some(user) = lookup()? {
        user
    } else {
        create_service_user()?;
        lookup()?.ok_or_else(|| {
            EmbeddedError::ServiceUser(format!(
                "useradd reported success but user `{SERVICE_USER}` still does not exist"
            ))
        })?
    };
    Ok(Some(ServiceAccount::from(user)))
}

fn create_service_user() -> Result<()> {
    let hint = format!(
        "PostgreSQL refuses to run as root, so pgnload runs it as the system user \
         `{SERVICE_USER}`, which does not exist"
    );
    let output = Command::new("useradd")
        .args([
            "--system",
            "--no-create-home",
            "--shell",
            "/usr/sbin/nologin",
            SERVICE_USER,
        ])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| {
            EmbeddedError::ServiceUser(format!(
                "{hint}, and running `useradd` to create it failed: {e}. Create it \
                 (`useradd --system postgres`) or run pgnload as an unprivileged user"
            ))
        })?;
    if output.status.success() {
        return Ok(());
    }
    Err(EmbeddedError::ServiceUser(format!(
        "{hint}, and `useradd --system --no-create-home --shell /usr/sbin/nologin \
         {SERVICE_USER}` failed ({}): {}{}. Create the user or run pgnload as an \
         unprivileged user",
        output.status,
        String::from_utf8_lossy(&output.stdout).trim(),
        String::from_utf8_lossy(&output.stderr).trim()
    )))
}

/// Fails unless `acct` can search (enter) every directory from `/` down to
/// `target`. Only the primary group counts: `Command::uid` drops
/// supplementary groups when leaving root.
pub(super) fn check_traversable(target: &Path, acct: &ServiceAccount) -> Result<()> {
    for dir in target.ancestors().collect::<Vec<_>>().into_iter().rev() {
        let Ok(meta) = fs::metadata(dir) else {
            // Not created yet: it will be created with a traversable mode.
            continue;
        };
        if !meta.is_dir() {
            continue;
        }
        let mode = meta.mode();
        let bits = if meta.uid() == acct.uid.as_raw() {
            mode >> 6
        } else if meta.gid() == acct.gid.as_raw() {
            mode >> 3
        } else {
            mode
        };
        if bits & 0o1 == 0 {
            return Err(EmbeddedError::Untraversable {
                dir: dir.to_path_buf(),
                mode: mode & 0o7777,
                user: acct.name.clone(),
                target: target.to_path_buf(),
            });
        }
    }
    Ok(())
}
