//! Issue 12 items 8 and 22: no password from a connection string ever
//! reaches stdout or stderr, whatever form the string has and however the
//! command fails.

use crate::common::{data, migrated_db, pgnload, run, scratch_dir, test_cluster};

const SECRET: &str = "hunter2";

/// Runs import, verify and status against `url` and asserts the secret
/// appears nowhere in their output.
fn assert_never_printed(url: &str) {
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
            c.arg("--config")
                .arg(&config)
                .args(&args)
                .env("DATABASE_URL", url)
                .current_dir(cwd.path());
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
