//! Finding the installed PostgreSQL server programs (nothing is downloaded).

use std::{
    ffi::OsStr,
    fs,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
};

use super::error::{EmbeddedError, Result};

/// Programs pgnload cannot manage a cluster without.
const REQUIRED_TOOLS: [&str; 3] = ["initdb", "pg_ctl", "postgres"];
/// Where Debian/Ubuntu install versioned server binaries (`<root>/<version>/bin`).
const DEBIAN_PG_ROOT: &str = "/usr/lib/postgresql";

/// Where the PostgreSQL server programs are. pgnload uses the installed
/// server rather than bundling one, so the cluster is always the version the
/// system's package manager keeps patched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgBinaries {
    /// The directory holding `initdb`, `pg_ctl`, `postgres` (and usually
    /// `createdb` and `psql`).
    pub bin_dir: PathBuf,
}

impl PgBinaries {
    /// Finds the server programs: the `PG_BIN` environment variable (a
    /// directory) first, then `initdb` on `PATH` (symlinks resolved, since
    /// distributions link a few tools into `/usr/bin` but keep the rest in a
    /// versioned directory), then the highest `/usr/lib/postgresql/*/bin`.
    /// A directory counts only if it has all of `initdb`, `pg_ctl` and
    /// `postgres`. An explicit `PG_BIN` that lacks them is an error rather
    /// than silently ignored.
    pub fn locate() -> Result<PgBinaries, EmbeddedError> {
        let pg_bin = std::env::var_os("PG_BIN");
        let path = std::env::var_os("PATH");
        Self::locate_in(pg_bin.as_deref().map(Path::new), path.as_deref())
    }

    /// The pure core of [`PgBinaries::locate`], with the environment passed
    /// in, so that tests (which run in parallel threads sharing one
    /// environment) need not set variables.
    pub fn locate_in(
        pg_bin: Option<&Path>,
        path_env: Option<&OsStr>,
    ) -> Result<PgBinaries, EmbeddedError> {
        locate_with(pg_bin, path_env, Path::new(DEBIAN_PG_ROOT))
    }

    /// The path of one program in [`PgBinaries::bin_dir`].
    pub fn tool(&self, name: &str) -> PathBuf {
        self.bin_dir.join(name)
    }
}

fn is_executable(path: &Path) -> bool {
    fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn missing_tools(dir: &Path) -> Vec<String> {
    REQUIRED_TOOLS
        .iter()
        .filter(|t| !is_executable(&dir.join(t)))
        .map(|t| (*t).to_owned())
        .collect()
}

/// Parses a Debian version directory name (`15`, `9.6`) for ordering.
fn parse_version(name: &OsStr) -> Option<Vec<u32>> {
    name.to_str()?
        .split('.')
        .map(|part| part.parse().ok())
        .collect()
}

fn locate_with(
    pg_bin: Option<&Path>,
    path_env: Option<&OsStr>,
    versions_root: &Path,
) -> Result<PgBinaries> {
    let all_missing = || REQUIRED_TOOLS.iter().map(|t| (*t).to_owned()).collect();
    if let Some(dir) = pg_bin.filter(|d| !d.as_os_str().is_empty()) {
        let missing = missing_tools(dir);
        if missing.is_empty() {
            return Ok(PgBinaries {
                bin_dir: dir.to_path_buf(),
            });
        }
        return Err(EmbeddedError::MissingBinaries {
            missing,
            searched: vec![format!("PG_BIN={}", dir.display())],
        });
    }

    let mut searched = Vec::new();
    // The candidate missing the fewest tools names what is missing.
    let mut best_missing: Option<Vec<String>> = None;
    let consider = |dir: &Path, best: &mut Option<Vec<String>>| {
        let missing = missing_tools(dir);
        if missing.is_empty() {
            return true;
        }
        if best.as_ref().is_none_or(|b| missing.len() < b.len()) {
            *best = Some(missing);
        }
        false
    };

    searched.push("initdb on PATH".to_owned());
    for dir in path_env.map(std::env::split_paths).into_iter().flatten() {
        if dir.as_os_str().is_empty() {
            continue;
        }
        let initdb = dir.join("initdb");
        if !is_executable(&initdb) {
            continue;
        }
        let real_dir = fs::canonicalize(&initdb)
            .ok()
            .and_then(|p| p.parent().map(Path::to_path_buf))
            .unwrap_or(dir);
        if consider(&real_dir, &mut best_missing) {
            return Ok(PgBinaries { bin_dir: real_dir });
        }
        searched.push(real_dir.display().to_string());
    }

    searched.push(format!("{}/*/bin", versions_root.display()));
    let mut versions: Vec<(Vec<u32>, PathBuf)> = fs::read_dir(versions_root)
        .into_iter()
        .flatten()
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let version = parse_version(&entry.file_name())?;
            Some((version, entry.path().join("bin")))
        })
        .collect();
    versions.sort_by(|a, b| b.0.cmp(&a.0));
    for (_, dir) in versions {
        if consider(&dir, &mut best_missing) {
            return Ok(PgBinaries { bin_dir: dir });
        }
    }

    Err(EmbeddedError::MissingBinaries {
        missing: best_missing.unwrap_or_else(all_missing),
        searched,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_pick_the_highest_complete_dir()
    -> std::result::Result<(), Box<dyn std::error::Error>> {
        let root = tempfile::tempdir()?;
        for (version, tools) in [
            ("9.6", &REQUIRED_TOOLS[..]),
            ("16", &REQUIRED_TOOLS[..]),
            ("17", &["initdb"][..]),
            ("notaversion", &REQUIRED_TOOLS[..]),
        ] {
            let bin = root.path().join(version).join("bin");
            fs::create_dir_all(&bin)?;
            for tool in tools {
                let path = bin.join(tool);
                fs::write(&path, "#!/bin/sh\n")?;
                fs::set_permissions(&path, fs::Permissions::from_mode(0o755))?;
            }
        }
        let found = locate_with(None, None, root.path())?;
        assert_eq!(found.bin_dir, root.path().join("16").join("bin"));

        let empty = tempfile::tempdir()?;
        match locate_with(None, Some(OsStr::new("")), empty.path()) {
            Err(EmbeddedError::MissingBinaries { missing, .. }) => {
                assert_eq!(missing, ["initdb", "pg_ctl", "postgres"]);
            }
            other => panic!("expected MissingBinaries, got {other:?}"),
        }
        Ok(())
    }

    #[test]
    fn version_parsing() {
        assert_eq!(parse_version(OsStr::new("15")), Some(vec![15]));
        assert_eq!(parse_version(OsStr::new("9.6")), Some(vec![9, 6]));
        assert_eq!(parse_version(OsStr::new("x")), None);
        assert!(parse_version(OsStr::new("10")) > parse_version(OsStr::new("9.6")));
    }
}
