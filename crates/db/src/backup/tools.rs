//! Which `pg_dump` / `pg_restore`: the one of the server's major version,
//! found where the server's programs are.

use std::{
    fs,
    path::PathBuf,
    process::{Command, Stdio},
};

use super::BackupError;
use crate::{
    db::{self, Target},
    embedded::{EmbeddedCluster, PgBinaries},
    error::Error,
};

/// The server's version: its text and its major number.
#[derive(Debug, Clone)]
pub(super) struct ServerVersion {
    text: String,
    major: u32,
}

pub(super) async fn server_version(
    client: &tokio_postgres::Client,
) -> Result<ServerVersion, Error> {
    let row = client
        .query_one(
            "SELECT current_setting('server_version'), \
                    current_setting('server_version_num')::int",
            &[],
        )
        .await
        .map_err(db::db_err("reading the server's version"))?;
    let num: i32 = row.get(1);
    let num = u32::try_from(num)
        .map_err(|_| Error::inconsistent(format!("server_version_num is {num}")))?;
    Ok(ServerVersion {
        text: row.get(0),
        major: major_of_num(num),
    })
}

/// The major version in `server_version_num` form: 170006 → 17, and for
/// the old two-part majors 90624 → 906.
fn major_of_num(num: u32) -> u32 {
    if num >= 100_000 {
        num / 10_000
    } else {
        num / 100
    }
}

/// The major version a tool's `--version` prints (`pg_dump (PostgreSQL)
/// 17.6 (Debian 17.6-1)` → 17, `9.6.24` → 906), and the version text.
fn tool_major(version_output: &str) -> Option<(u32, String)> {
    let version = version_output
        .split(") ")
        .nth(1)?
        .split_whitespace()
        .next()?;
    let mut parts = version
        .split(|c: char| !c.is_ascii_digit())
        .filter(|p| !p.is_empty())
        .map(str::parse::<u32>);
    let first = parts.next()?.ok()?;
    let major = if first >= 10 {
        first
    } else {
        first * 100 + parts.next()?.ok()?
    };
    Some((major, version.to_owned()))
}

/// Finds `tool` for a server of `server.major` and checks its version:
/// `PG_BIN` alone when set (as for the embedded cluster's programs); else
/// beside the embedded cluster's server programs, the Debian directory of
/// the server's major version, the server programs' directory pgnload
/// would use, then `PATH`.
pub(super) fn locate_tool(
    tool: &'static str,
    target: &Target,
    server: &ServerVersion,
) -> Result<PathBuf, BackupError> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(dir) = std::env::var_os("PG_BIN").filter(|d| !d.is_empty()) {
        dirs.push(PathBuf::from(dir));
    } else {
        if let Target::Embedded(data_dir) = target
            && let Ok(cluster) = EmbeddedCluster::new(data_dir)
        {
            dirs.push(cluster.binaries().bin_dir.clone());
        }
        dirs.push(PathBuf::from(format!(
            "/usr/lib/postgresql/{}/bin",
            server.major
        )));
        if let Ok(bins) = PgBinaries::locate() {
            dirs.push(bins.bin_dir);
        }
        dirs.extend(
            std::env::var_os("PATH")
                .iter()
                .flat_map(std::env::split_paths),
        );
    }
    let found = dirs.iter().map(|d| d.join(tool)).find(|p| {
        fs::metadata(p).is_ok_and(|m| {
            use std::os::unix::fs::PermissionsExt;
            m.is_file() && m.permissions().mode() & 0o111 != 0
        })
    });
    let Some(path) = found else {
        let mut searched: Vec<String> = Vec::new();
        for dir in &dirs {
            let dir = dir.display().to_string();
            if !searched.contains(&dir) {
                searched.push(dir);
            }
        }
        return Err(BackupError::ToolMissing {
            tool,
            major: server.major,
            searched,
        });
    };
    let output = Command::new(&path)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .map_err(|source| BackupError::Spawn {
            path: path.clone(),
            source,
        })?;
    let text = String::from_utf8_lossy(&output.stdout);
    match tool_major(&text) {
        Some((major, _)) if major == server.major => Ok(path),
        parsed => Err(BackupError::VersionMismatch {
            tool_version: parsed.map_or_else(|| text.trim().to_owned(), |(_, v)| v),
            path,
            server_version: server.text.clone(),
            server_major: server.major,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_from_tool_and_server() {
        assert_eq!(
            tool_major("pg_dump (PostgreSQL) 17.6 (Debian 17.6-1.pgdg12+1)\n"),
            Some((17, "17.6".to_owned()))
        );
        assert_eq!(
            tool_major("pg_restore (PostgreSQL) 9.6.24\n"),
            Some((906, "9.6.24".to_owned()))
        );
        assert_eq!(
            tool_major("pg_dump (PostgreSQL) 18beta1"),
            Some((18, "18beta1".to_owned()))
        );
        assert_eq!(tool_major("garbage"), None);
        assert_eq!(major_of_num(170_006), 17);
        assert_eq!(major_of_num(90_624), 906);
    }
}
