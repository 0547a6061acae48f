//! The archive on disk: where it may be written, its staging name, moving
//! it into place without replacing anything, and its size.

use std::{
    ffi::{OsStr, OsString},
    fs, io,
    os::unix::ffi::OsStrExt,
    path::{Path, PathBuf},
};

use super::{BackupError, Format};

/// `dir/` as `dir`, so that the staging name is a sibling, not a child.
pub(super) fn trim_slash(path: &Path) -> PathBuf {
    let bytes = path.as_os_str().as_encoded_bytes();
    let trimmed = bytes.len() - bytes.iter().rev().take_while(|&&b| b == b'/').count();
    if trimmed == 0 {
        return path.to_path_buf();
    }
    PathBuf::from(OsStr::from_bytes(&bytes[..trimmed]))
}

/// A custom-format destination must not exist; a directory one must not
/// exist or be empty (`pg_dump`'s own rule).
pub(super) fn check_destination(path: &Path, format: Format) -> Result<(), BackupError> {
    let exists = || BackupError::Exists {
        path: path.to_path_buf(),
    };
    match fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(BackupError::Io {
            context: "checking the backup destination",
            path: path.to_path_buf(),
            source,
        }),
        Ok(meta) if format == Format::Directory && meta.is_dir() => {
            let mut entries = fs::read_dir(path).map_err(|source| BackupError::Io {
                context: "reading the backup destination",
                path: path.to_path_buf(),
                source,
            })?;
            if entries.next().is_some() {
                Err(exists())
            } else {
                Ok(())
            }
        }
        Ok(_) => Err(exists()),
    }
}

/// Where `pg_dump` writes before the archive is complete: beside the
/// destination (same file system, so the final move is a rename), named
/// after it and this process.
pub(super) fn staging_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().map(OsString::from).unwrap_or_default();
    name.push(format!(".partial-{}", std::process::id()));
    path.with_file_name(name)
}

/// Moves the finished archive into place without replacing anything that
/// appeared there meanwhile: a file by a hard link (which fails if the
/// name exists) then removal of the staging name; a directory by rename,
/// which replaces only an empty directory.
pub(super) fn publish(staging: &Path, path: &Path) -> Result<(), BackupError> {
    let io = |context| {
        move |source| BackupError::Io {
            context,
            path: path.to_path_buf(),
            source,
        }
    };
    if staging.is_dir() {
        fs::rename(staging, path).map_err(io("moving the finished backup to"))
    } else {
        fs::hard_link(staging, path).map_err(io("moving the finished backup to"))?;
        fs::remove_file(staging).map_err(io("removing the temporary name of"))
    }
}

/// Removes a failed backup's staging file or directory (best effort: it
/// is named `.partial-PID`, so a leftover is recognizable).
pub(super) fn remove_all(path: &Path) {
    let _ = if path.is_dir() {
        fs::remove_dir_all(path)
    } else {
        fs::remove_file(path)
    };
}

/// Bytes of a file, or of all files in a directory (one level: what
/// `pg_dump`'s directory format writes).
pub(super) fn disk_bytes(path: &Path) -> u64 {
    match fs::read_dir(path) {
        Ok(entries) => entries
            .filter_map(|e| e.ok()?.metadata().ok())
            .filter(fs::Metadata::is_file)
            .map(|m| m.len())
            .sum(),
        Err(_) => fs::metadata(path).map_or(0, |m| m.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_and_staging_names_follow_the_path() {
        assert_eq!(
            Format::for_path(Path::new("/x/new-dir/")),
            Format::Directory
        );
        assert_eq!(Format::for_path(Path::new("/")), Format::Directory);
        assert_eq!(
            Format::for_path(Path::new("/x/backup.dump")),
            Format::Custom
        );
        assert_eq!(trim_slash(Path::new("a/b//")), PathBuf::from("a/b"));
        assert_eq!(trim_slash(Path::new("/")), PathBuf::from("/"));
        assert_eq!(
            staging_path(Path::new("/x/b.dump")),
            PathBuf::from(format!("/x/b.dump.partial-{}", std::process::id()))
        );
    }
}
