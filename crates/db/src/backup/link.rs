//! How the tools reach the database: a connection string without the
//! password, which goes into a password file held in memory only.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use tokio_postgres::config::Host;

use super::BackupError;
use crate::{
    child::{SecretFile, guarded},
    conninfo::quote_pairs,
    db::Target,
    embedded::EmbeddedCluster,
    error::Error,
};

/// How the tools reach the database pgnload uses: a libpq connection
/// string with every parameter pgnload's own connection has except the
/// password, which goes into a password file (libpq's `PGPASSFILE`) held
/// in memory only ([`SecretFile`]): it never exists on a disk, so a killed
/// pgnload leaves none behind.
pub(super) struct Link {
    conninfo: String,
    passfile: Option<SecretFile>,
}

impl Link {
    pub(super) fn new(target: &Target) -> Result<Link, Error> {
        let (conninfo, password) = match target {
            Target::Embedded(dir) => (conninfo(&EmbeddedCluster::new(dir)?.pg_config()), None),
            Target::Server(server) => {
                let settings = server.settings()?;
                (settings.tool_conninfo(), settings.password.as_deref())
            }
        };
        let passfile = match password {
            Some(password) => Some(write_passfile(password.as_bytes())?),
            None => None,
        };
        Ok(Link { conninfo, passfile })
    }

    /// `tool --dbname=… --no-password`, with none of the caller's `PG*`
    /// variables (the connection string holds what pgnload resolved from
    /// them, and the tool must not resolve them again differently: a
    /// `PGSERVICE` would fill what the string left out) except the
    /// password file;
    /// started [`guarded`], so that it dies with pgnload.
    pub(super) fn command(&self, tool: &Path) -> Command {
        let mut cmd = guarded(tool);
        for (key, _) in std::env::vars_os() {
            if key.as_encoded_bytes().starts_with(b"PG") {
                cmd.env_remove(key);
            }
        }
        if let Some(passfile) = &self.passfile {
            cmd.env("PGPASSFILE", passfile.path());
        }
        cmd.arg(format!("--dbname={}", self.conninfo))
            .arg("--no-password")
            .stdin(Stdio::null());
        cmd
    }
}

/// The libpq connection string of the embedded cluster's `config`
/// (a Unix socket: no password, no TLS).
fn conninfo(config: &tokio_postgres::Config) -> String {
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .map(|host| match host {
            Host::Tcp(name) => name.clone(),
            Host::Unix(dir) => dir.display().to_string(),
        })
        .collect();
    let ports: Vec<String> = config.get_ports().iter().map(ToString::to_string).collect();
    let (hosts, ports) = (hosts.join(","), ports.join(","));
    let mut pairs = vec![("host", hosts.as_str()), ("port", ports.as_str())];
    for (key, value) in [
        ("user", config.get_user()),
        ("dbname", config.get_dbname()),
        ("application_name", config.get_application_name()),
    ] {
        pairs.extend(value.map(|value| (key, value)));
    }
    pairs.push(("sslmode", "disable"));
    quote_pairs(pairs.into_iter())
}

/// The password file of `password`: `*:*:*:*:password` (`:` and `\`
/// escaped as libpq reads them) in a [`SecretFile`]. A line break cannot
/// be written in that format, so a password holding one is refused rather
/// than cut.
fn write_passfile(password: &[u8]) -> Result<SecretFile, BackupError> {
    if password.iter().any(|&b| b == b'\n' || b == b'\r') {
        return Err(BackupError::Options(
            "the connection string's password holds a line break, which pg_dump's password \
             file cannot hold"
                .into(),
        ));
    }
    let mut line = b"*:*:*:*:".to_vec();
    for &b in password {
        if b == b':' || b == b'\\' {
            line.push(b'\\');
        }
        line.push(b);
    }
    line.push(b'\n');
    SecretFile::new("pgnload-passfile", &line).map_err(|source| BackupError::Io {
        context: "writing the password file in memory",
        path: PathBuf::from("memfd:pgnload-passfile"),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The password never reaches the command line nor a disk: the
    /// connection string given to the tool has every other parameter, and
    /// the password sits in a 0600 memory file named by `/dev/fd/N`. The
    /// tool runs behind the guard that ties its life to pgnload's.
    #[test]
    fn the_password_goes_to_a_private_memory_file_not_the_command_line() {
        use std::{fs, os::unix::fs::PermissionsExt};
        let target = Target::choose_in(
            Some("postgres://alice:s3:cr\\et@db.example:6543/chess?application_name=x'y".into()),
            PathBuf::new(),
            false,
            crate::conninfo::Environment::default(),
        );
        let link = Link::new(&target).expect("a valid URL");
        let cmd = link.command(Path::new("/bin/true"));
        let args: Vec<String> = cmd
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert!(args.iter().all(|a| !a.contains("s3")), "{args:?}");
        assert_eq!(args[0], crate::child::GUARD_ARG);
        assert_eq!(args[2], "/bin/true");
        assert_eq!(
            args[3],
            "--dbname=user='alice' host='db.example' port='6543' dbname='chess' \
             application_name='x\\'y' sslmode='prefer'"
        );
        let passfile = link.passfile.as_ref().expect("a password file").path();
        assert!(passfile.starts_with("/dev/fd"), "{}", passfile.display());
        let env: Vec<_> = cmd.get_envs().collect();
        assert!(
            env.iter()
                .any(|(k, v)| *k == "PGPASSFILE" && *v == Some(passfile.as_os_str())),
            "{env:?}"
        );
        let meta = fs::metadata(&passfile).expect("the password file exists");
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert_eq!(
            fs::read_to_string(&passfile).expect("readable"),
            "*:*:*:*:s3\\:cr\\\\et\n"
        );
    }

    #[test]
    fn a_password_with_a_line_break_is_refused() {
        assert!(matches!(
            write_passfile(b"a\nb"),
            Err(BackupError::Options(_))
        ));
    }
}
