//! libpq's two connection files: the password file (`~/.pgpass`,
//! `PGPASSFILE`) and the connection service file (`~/.pg_service.conf`,
//! `PGSERVICEFILE`, `PGSYSCONFDIR/pg_service.conf`), read as libpq reads
//! them. Nothing here quotes a line of either file in a message: both may
//! hold passwords.

use std::{
    fs,
    io::ErrorKind,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
};

use super::parse::{Params, set};

/// What a password file gave for one connection.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Passfile {
    /// The password of the first line that matched.
    Found(String),
    /// No file, or no line matched.
    NotFound,
    /// The file was not used, and why (libpq's warning).
    Ignored(String),
}

/// The fields a password-file line is matched against: host (`localhost`
/// for a Unix socket, as libpq matches it), port, database, user.
pub(crate) struct PassfileKey<'a> {
    pub host: &'a str,
    pub port: &'a str,
    pub dbname: &'a str,
    pub user: &'a str,
}

/// Looks `key` up in the password file at `path`. Like libpq, a file that
/// is not a plain file, or that its group or others may read, is ignored
/// with a warning; an absent or unreadable file is no password.
pub(crate) fn passfile_password(path: &Path, key: &PassfileKey<'_>) -> Passfile {
    let Ok(meta) = fs::metadata(path) else {
        return Passfile::NotFound;
    };
    if !meta.is_file() {
        return Passfile::Ignored(format!(
            "password file \"{}\" is not a plain file",
            path.display()
        ));
    }
    if meta.permissions().mode() & 0o077 != 0 {
        return Passfile::Ignored(format!(
            "password file \"{}\" has group or world access; permissions should be u=rw (0600) \
             or less: it is ignored",
            path.display()
        ));
    }
    let Ok(text) = fs::read_to_string(path) else {
        return Passfile::NotFound;
    };
    let wanted = [key.host, key.port, key.dbname, key.user];
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let fields = split_passfile_line(line);
        let [host, port, dbname, user, password] = fields.as_slice() else {
            continue;
        };
        let matches = [host, port, dbname, user]
            .iter()
            .zip(wanted)
            .all(|(field, want)| field.as_str() == "*" || field.as_str() == want);
        if matches {
            return Passfile::Found(password.clone());
        }
    }
    Passfile::NotFound
}

/// The five fields of a password-file line: `:` separates, `\` escapes
/// the next character; the fifth field (the password) runs to the end.
fn split_passfile_line(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => fields.last_mut().expect("never empty").extend(chars.next()),
            ':' if fields.len() < 5 => fields.push(String::new()),
            c => fields.last_mut().expect("never empty").push(c),
        }
    }
    fields
}

/// The parameters of `service` from the first file that defines it: the
/// user's (`PGSERVICEFILE`, else `~/.pg_service.conf`), then the system's
/// (`PGSYSCONFDIR/pg_service.conf`). An error says why none could be used,
/// never quoting a line.
pub(crate) fn service_params(service: &str, files: &[PathBuf]) -> Result<Params, String> {
    for path in files {
        let text = match fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == ErrorKind::NotFound => continue,
            Err(e) => return Err(format!("service file \"{}\": {e}", path.display())),
        };
        if let Some(params) = find_service(&text, service)
            .map_err(|reason| format!("service file \"{}\": {reason}", path.display()))?
        {
            return Ok(params);
        }
    }
    let looked: Vec<String> = files
        .iter()
        .map(|p| format!("\"{}\"", p.display()))
        .collect();
    Err(format!(
        "definition of service \"{service}\" not found (looked in {})",
        looked.join(" and ")
    ))
}

/// The section `[service]` of a service file, or `None` if it has none:
/// `key=value` lines, `#` comments, blank lines; whitespace around a line,
/// a key and a value is not part of them.
fn find_service(text: &str, service: &str) -> Result<Option<Params>, String> {
    let mut found: Option<Params> = None;
    let mut inside = false;
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            if found.is_some() {
                break;
            }
            inside = name == service;
            if inside {
                found = Some(Params::new());
            }
            continue;
        }
        let Some(params) = found.as_mut().filter(|_| inside) else {
            continue;
        };
        let Some((key, value)) = line.split_once('=') else {
            return Err(format!("syntax error on line {} (no \"=\")", number + 1));
        };
        let key = key.trim();
        if key == "service" {
            return Err(format!(
                "line {}: nested service specifications are not supported",
                number + 1
            ));
        }
        set(params, key, value.trim().to_owned());
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn file(dir: &Path, name: &str, mode: u32, text: &str) -> PathBuf {
        let path = dir.join(name);
        let mut f = fs::File::create(&path).expect("create");
        f.write_all(text.as_bytes()).expect("write");
        fs::set_permissions(&path, fs::Permissions::from_mode(mode)).expect("chmod");
        path
    }

    #[test]
    fn a_password_file_matches_as_libpq_does() {
        let dir = tempfile::tempdir().expect("tmp");
        let text = "# comment\n\
                    other:5432:*:*:wrong\n\
                    db.example:5432:chess:al\\:ice:first\\:pw\n\
                    *:*:*:bob:bobs:pw:with:colons\n\
                    localhost:*:*:*:socket\n";
        let path = file(dir.path(), "pgpass", 0o600, text);
        let key = |host, user| PassfileKey {
            host,
            port: "5432",
            dbname: "chess",
            user,
        };
        assert_eq!(
            passfile_password(&path, &key("db.example", "al:ice")),
            Passfile::Found("first:pw".into())
        );
        assert_eq!(
            passfile_password(&path, &key("anywhere", "bob")),
            Passfile::Found("bobs:pw:with:colons".into())
        );
        assert_eq!(
            passfile_password(&path, &key("localhost", "x")),
            Passfile::Found("socket".into())
        );
        assert_eq!(
            passfile_password(&path, &key("db.example", "x")),
            Passfile::NotFound
        );
        let open = file(dir.path(), "open", 0o644, text);
        let Passfile::Ignored(why) = passfile_password(&open, &key("anywhere", "bob")) else {
            panic!("a 0644 password file must be ignored");
        };
        assert!(why.contains("group or world access"), "{why}");
        assert!(!why.contains("bobs"), "{why}");
        assert_eq!(
            passfile_password(&dir.path().join("absent"), &key("h", "u")),
            Passfile::NotFound
        );
    }

    #[test]
    fn a_service_comes_from_the_first_file_that_defines_it() {
        let dir = tempfile::tempdir().expect("tmp");
        let user = file(
            dir.path(),
            "user.conf",
            0o600,
            "[other]\nhost=x\n\n[chess]\n# c\n host = db.example \nport=6543\npassword=s3cret\n[after]\nport=1\n",
        );
        let system = file(dir.path(), "sys.conf", 0o644, "[sys]\ndbname=from_sys\n");
        let files = [user, system];
        let chess = service_params("chess", &files).expect("defined");
        assert_eq!(
            chess,
            vec![
                ("host".to_owned(), "db.example".to_owned()),
                ("port".to_owned(), "6543".to_owned()),
                ("password".to_owned(), "s3cret".to_owned())
            ]
        );
        assert_eq!(
            service_params("sys", &files).expect("system file"),
            vec![("dbname".to_owned(), "from_sys".to_owned())]
        );
        let missing = service_params("nope", &files).expect_err("undefined");
        assert!(missing.contains("\"nope\" not found"), "{missing}");
        let bad = file(dir.path(), "bad.conf", 0o600, "[s]\npassword s3cret\n");
        let why = service_params("s", &[bad]).expect_err("syntax");
        assert!(!why.contains("s3cret"), "{why}");
    }
}
