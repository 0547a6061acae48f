//! Resolution: precedence, defaults, passwords, TLS settings.

use std::{collections::HashMap, fs, os::unix::fs::PermissionsExt, path::Path};

use super::*;

fn env(vars: &[(&str, &str)], home: &Path) -> Environment {
    let vars: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    Environment::new(vars, Some(home.to_path_buf()))
}

fn write(path: &Path, mode: u32, text: &str) {
    fs::write(path, text).expect("write");
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).expect("chmod");
}

fn param<'a>(settings: &'a ConnectionSettings, key: &str) -> Option<&'a str> {
    get(&settings.tool_params, key)
}

#[test]
fn the_string_beats_the_service_which_beats_the_environment() {
    let home = tempfile::tempdir().expect("tmp");
    write(
        &home.path().join(".pg_service.conf"),
        0o644,
        "[chess]\nhost=svc.example\nport=6000\ndbname=svc_db\n",
    );
    let env = env(
        &[
            ("PGSERVICE", "chess"),
            ("PGPORT", "7000"),
            ("PGUSER", "env_user"),
            ("PGHOST", "env.example"),
            ("PGAPPNAME", "cron-import"),
        ],
        home.path(),
    );
    let settings = ConnectionSettings::resolve(Some("dbname=url_db"), &env).expect("resolves");
    assert_eq!(param(&settings, "dbname"), Some("url_db"));
    assert_eq!(param(&settings, "host"), Some("svc.example"));
    assert_eq!(param(&settings, "port"), Some("6000"));
    assert_eq!(param(&settings, "user"), Some("env_user"));
    assert_eq!(param(&settings, "application_name"), Some("cron-import"));
    assert_eq!(param(&settings, "sslmode"), Some("prefer"));
    assert_eq!(settings.tls.mode, SslMode::Prefer);
    let alone = ConnectionSettings::resolve(None, &env).expect("environment alone");
    assert_eq!(
        alone.description,
        "service=chess host=svc.example port=6000 dbname=svc_db user=env_user"
    );
}

#[test]
fn passwords_come_from_the_string_the_environment_or_a_private_password_file() {
    let home = tempfile::tempdir().expect("tmp");
    let pgpass = home.path().join(".pgpass");
    write(&pgpass, 0o600, "db.example:5432:chess:alice:from\\:file\n");
    let url = "postgresql://alice@db.example/chess";
    let resolve = |vars: &[(&str, &str)], url: &str| {
        ConnectionSettings::resolve(Some(url), &env(vars, home.path())).expect("resolves")
    };
    assert_eq!(resolve(&[], url).password.as_deref(), Some("from:file"));
    assert_eq!(
        resolve(&[("PGPASSWORD", "from_env")], url)
            .password
            .as_deref(),
        Some("from_env")
    );
    assert_eq!(
        resolve(
            &[("PGPASSWORD", "from_env")],
            "postgresql://alice:in_url@db.example/chess"
        )
        .password
        .as_deref(),
        Some("in_url")
    );
    assert_eq!(
        resolve(&[], "postgresql://bob@db.example/chess").password,
        None
    );
    fs::set_permissions(&pgpass, fs::Permissions::from_mode(0o644)).expect("chmod");
    let open = resolve(&[], url);
    assert_eq!(open.password, None);
    assert_eq!(open.warnings.len(), 1, "{:?}", open.warnings);
    assert!(open.warnings[0].contains("0600"), "{:?}", open.warnings);
    let elsewhere = home.path().join("elsewhere");
    write(&elsewhere, 0o600, "*:*:*:*:anywhere\n");
    let named = resolve(&[("PGPASSFILE", &elsewhere.to_string_lossy())], url);
    assert_eq!(named.password.as_deref(), Some("anywhere"));
    assert!(!named.tool_conninfo().contains("anywhere"));
    assert!(!format!("{named:?}").contains("anywhere"));
}

#[test]
fn tls_follows_libpq_rules() {
    let home = tempfile::tempdir().expect("tmp");
    let resolve = |vars: &[(&str, &str)], url: &str| {
        ConnectionSettings::resolve(Some(url), &env(vars, home.path()))
    };
    let require = resolve(&[], "host=db sslmode=require").expect("resolves");
    assert_eq!(
        require.tls.root, None,
        "require without a root certificate verifies nothing"
    );
    let missing = resolve(&[("PGSSLMODE", "verify-full")], "host=db").expect_err("no root");
    assert!(
        matches!(&missing, ResolveError::Settings(why) if why.contains("root.crt")),
        "{missing:?}"
    );
    fs::create_dir(home.path().join(".postgresql")).expect("mkdir");
    let root = home.path().join(".postgresql/root.crt");
    write(&root, 0o644, "not read until connecting");
    let default_root = resolve(&[], "host=db sslmode=require").expect("resolves");
    assert_eq!(default_root.tls.root, Some(RootCert::File(root.clone())));
    assert_eq!(
        param(&default_root, "sslrootcert"),
        Some(root.to_string_lossy().as_ref())
    );
    let unix = resolve(&[("PGSSLMODE", "verify-full")], "host=/tmp").expect("socket");
    assert_eq!(unix.tls.mode, SslMode::Disable, "no TLS over Unix sockets");
    let weak = resolve(&[], "host=db sslrootcert=system sslmode=require").expect_err("weak");
    assert!(matches!(weak, ResolveError::Settings(_)), "{weak:?}");
    let (cert, key) = (home.path().join("c.crt"), home.path().join("c.key"));
    write(&cert, 0o644, "certificate");
    write(&key, 0o604, "key");
    let client = format!(
        "host=db sslcert={} sslkey={}",
        cert.display(),
        key.display()
    );
    let open = resolve(&[], &client).expect_err("a key others may read");
    assert!(
        matches!(&open, ResolveError::Settings(why) if why.contains("0600")),
        "{open:?}"
    );
    fs::set_permissions(&key, fs::Permissions::from_mode(0o600)).expect("chmod");
    let private = resolve(&[], &client).expect("a private key");
    assert_eq!(private.tls.client, Some((cert, key)));
    let bad = resolve(&[], "host=db sslmode=verify").expect_err("invalid mode");
    assert!(matches!(&bad, ResolveError::Settings(why) if why.contains("verify-full")));
}

#[test]
fn unknown_parameters_and_services_are_refused_without_quoting_secrets() {
    let home = tempfile::tempdir().expect("tmp");
    let env = env(&[], home.path());
    let unknown = ConnectionSettings::resolve(Some("host=db colour=blue"), &env);
    assert_eq!(
        unknown.expect_err("unknown"),
        ResolveError::Syntax("unknown or unsupported parameter \"colour\"".into())
    );
    let service = ConnectionSettings::resolve(Some("service=nope"), &env).expect_err("missing");
    assert!(matches!(&service, ResolveError::Settings(why) if why.contains("\"nope\" not found")));
}

#[test]
fn only_server_variables_mean_a_server_of_ones_own() {
    let home = tempfile::tempdir().expect("tmp");
    assert!(
        !env(
            &[("PGPASSWORD", "x"), ("PGSSLMODE", "require")],
            home.path()
        )
        .names_a_server()
    );
    for var in SERVER_VARIABLES {
        assert!(env(&[(var, "x")], home.path()).names_a_server(), "{var}");
    }
}

#[test]
fn the_driver_gets_every_value_as_given() {
    let home = tempfile::tempdir().expect("tmp");
    let settings = ConnectionSettings::resolve(
        Some(
            r"host=db,db2 port=1,2 dbname='it\'s a \\ db' user=al password='p w' connect_timeout=7",
        ),
        &env(&[], home.path()),
    )
    .expect("resolves");
    let driver = &settings.driver;
    assert_eq!(driver.get_dbname(), Some(r"it's a \ db"));
    assert_eq!(driver.get_ports(), [1, 2]);
    assert_eq!(driver.get_hosts().len(), 2);
    assert_eq!(driver.get_password(), Some(&b"p w"[..]));
    assert_eq!(driver.get_application_name(), Some("pgnload"));
    assert_eq!(
        driver.get_connect_timeout(),
        Some(&std::time::Duration::from_secs(7))
    );
    assert_eq!(
        settings.tool_conninfo(),
        r"host='db,db2' port='1,2' dbname='it\'s a \\ db' user='al' connect_timeout='7' application_name='pgnload' sslmode='prefer'"
    );
}
