//! Issue 12 items 8 and 22: no password from a connection string ever
//! reaches stdout or stderr, whatever form the string has and however the
//! command fails.

use crate::common::{data, migrated_db, pgnload, run, scratch_dir, test_cluster};

const SECRET: &str = "hunter2";

/// Runs import, verify and status against `url` and asserts the secret
/// appears nowhere in their output.
fn assert_never_printed(url: &str) {
    assert_never_printed_in(Some(url), &[]);
}

/// [`assert_never_printed`] with `url` (none: the server the environment
/// names) and the variables `vars`, none of the caller's `PG*` ones, and a
/// scratch `HOME` unless `vars` gives one.
fn assert_never_printed_in(url: Option<&str>, vars: &[(&str, String)]) {
    let sample = data("kasparov-deep-blue-1997.pgn");
    // verify writes its report into the working directory. The config
    // file makes a failed first connection fail at once instead of being
    // waited for (retry_seconds) like a restarting server.
    let cwd = scratch_dir("pgnload-secrets-");
    let config = cwd.path().join("no-retry.toml");
    std::fs::write(&config, "[import]\nretry_seconds = 0\n").expect("write config");
    for args in [
        vec!["import".to_owned(), sample.to_string_lossy().into_owned()],
        vec!["verify".to_owned()],
        vec!["status".to_owned()],
    ] {
        let out = run({
            let mut c = pgnload();
            for (key, _) in std::env::vars_os() {
                if key.as_encoded_bytes().starts_with(b"PG") || key == "DATABASE_URL" {
                    c.env_remove(key);
                }
            }
            c.arg("--config")
                .arg(&config)
                .args(&args)
                .env("HOME", cwd.path())
                .current_dir(cwd.path());
            if let Some(url) = url {
                c.env("DATABASE_URL", url);
            }
            for (key, value) in vars {
                c.env(key, value);
            }
            c
        });
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            !text.contains(SECRET),
            "{args:?} with {url:?} printed the password:\n{text}"
        );
        assert!(
            !text.trim().is_empty(),
            "{args:?} with {url:?} said nothing"
        );
    }
}

#[test]
fn no_form_of_connection_string_prints_its_password() {
    let sock = test_cluster().socket_dir().to_string_lossy().into_owned();
    // Failing forms: a missing server, a scheme-less URL, unknown keys.
    for url in [
        "host=/nonexistent/socket password = hunter2 dbname=x".to_owned(),
        "host=/nonexistent/socket password =hunter2".to_owned(),
        "host=/nonexistent/socket password hunter2".to_owned(),
        "host=/nonexistent/socket password= 'hunter2' dbname=x".to_owned(),
        "alice:hunter2@localhost/chess".to_owned(),
        "alice:hunter2@localhost=chess".to_owned(),
        format!("host={sock} port=5432 user=pgnload passwd=hunter2 dbname=pgnload"),
        format!("host={sock} port=5432 user=pgnload password = hunter2 dbname=no_such_db"),
        "postgres://alice:hunter2@/chess?host=/nonexistent/socket".to_owned(),
        "postgres:///chess?host=/nonexistent/socket&password=hunter2".to_owned(),
    ] {
        assert_never_printed(&url);
    }
}

#[test]
fn a_working_key_value_string_with_spaces_is_not_printed() {
    // The test cluster trusts local connections, so the password is
    // accepted and ignored: the commands succeed and print their summaries,
    // which name the database.
    let db = migrated_db("secrets");
    let name = db
        .url
        .split('?')
        .next()
        .and_then(|u| u.rsplit('/').next())
        .expect("test database URL has a name")
        .to_owned();
    let sock = test_cluster().socket_dir().to_string_lossy().into_owned();
    let url = format!("host={sock} port=5432 user=pgnload password = hunter2 dbname={name}");
    assert_never_printed(&url);
    assert_eq!(db.psql("SELECT count(*) > 0 FROM games"), "t");
}

/// Issue 28 item 3: the libpq ways of giving a password (the environment,
/// a password file, a service file) and connection strings that fail to
/// parse, or name what cannot be used, print no password either.
#[test]
fn no_password_from_the_environment_or_libpq_files_is_printed() {
    let files = scratch_dir("pgnload-secrets-files-");
    let dir = files.path();
    let pgpass = dir.join("pgpass");
    std::fs::write(&pgpass, "*:*:*:*:hunter2\n").expect("write");
    let service = dir.join("services");
    std::fs::write(
        &service,
        "[broken]\nhost=/nonexistent/socket\npassword=hunter2\nsslmode=verify-full\n\
         [down]\nhost=127.0.0.1\nport=1\npassword=hunter2\n",
    )
    .expect("write");
    for mode in [0o600, 0o644] {
        std::fs::set_permissions(&pgpass, std::os::unix::fs::PermissionsExt::from_mode(mode))
            .expect("chmod");
        assert_never_printed_in(
            Some("postgresql://alice@127.0.0.1:1/chess"),
            &[("PGPASSFILE", pgpass.to_string_lossy().into_owned())],
        );
    }
    let file = || ("PGSERVICEFILE", service.to_string_lossy().into_owned());
    for name in ["broken", "down", "missing"] {
        assert_never_printed_in(None, &[("PGSERVICE", name.to_owned()), file()]);
        assert_never_printed_in(Some(&format!("service={name}")), &[file()]);
    }
    assert_never_printed_in(
        None,
        &[
            ("PGHOST", "127.0.0.1".to_owned()),
            ("PGPORT", "1".to_owned()),
            ("PGPASSWORD", "hunter2".to_owned()),
            ("PGSSLMODE", "require".to_owned()),
        ],
    );
    for url in [
        "postgres//chess:hunter2@127.0.0.1:55100/chess",
        "postgres//chess:secret-hunter2@127.0.0.1:55100/chess",
        "postgresql://chess:hunter2%zz@127.0.0.1:1/chess",
        "postgresql://chess:hunter2@127.0.0.1:1/chess?sslmode=verify-full&sslrootcert=/nonexistent",
        "postgresql://chess:hunter2@127.0.0.1:1/chess?sslmode=bogus",
        "postgresql://chess:hunter2@127.0.0.1:1/chess?colour=blue",
        "postgresql://chess:hunter2@127.0.0.1:notaport/chess",
        "host=127.0.0.1 port=1 password='hunter2 sslmode=require",
        "host=127.0.0.1 port=1 password=hunter2 sslmode=verify-ca sslrootcert=system",
        "host=127.0.0.1 port=1 password=hunter2 sslcert=/nonexistent/c.crt sslmode=require",
    ] {
        assert_never_printed(url);
    }
}
