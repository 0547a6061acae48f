//! Issue 28 items 1-3: pgnload reaches a server as libpq tools do. A
//! private PostgreSQL server per test, TLS only (`hostssl`, no plain TCP
//! entry) with scram-sha-256 passwords and one certificate-authenticated
//! user, and a CA, server and client certificates the test makes with the
//! `openssl` program. Every pgnload runs with a scratch `HOME` and none of
//! the caller's `PG*` variables, so that nothing but what a test gives is
//! used.

use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
};

use crate::common::{data, pgnload, run, scratch_dir, stderr};

/// alice's password: it must never appear in any output.
const PASSWORD: &str = "alice-s3cret-pw";

/// A private TLS-only server and the files of its certificates.
struct TlsServer {
    dir: PathBuf,
    port: u16,
    bin: PathBuf,
    /// Removed on drop unless the test failed.
    scratch: Option<tempfile::TempDir>,
}

/// `cmd` run as the `postgres` user when the tests run as root
/// (PostgreSQL refuses to run as root).
fn as_server_user(program: &Path) -> Command {
    if nix::unistd::geteuid().is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

fn assert_success(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs the `openssl` program in `dir`.
fn openssl(dir: &Path, args: &[&str]) {
    let out = run({
        let mut c = Command::new("openssl");
        c.args(args).current_dir(dir);
        c
    });
    assert_success(&out, &format!("openssl {args:?}"));
}

/// A CA (`NAME.crt`, `NAME.key`) in `dir`.
fn make_ca(dir: &Path, name: &str) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "3",
            "-subj",
            &format!("/CN={name}"),
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.crt"),
        ],
    );
}

/// A certificate `NAME.crt` (key `NAME.key`, mode 0600) for `cn`, signed
/// by the CA `ca`, with the subjectAltName `san` if given.
fn make_cert(dir: &Path, name: &str, cn: &str, ca: &str, san: Option<&str>) {
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            &format!("/CN={cn}"),
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
        ],
    );
    let ext = dir.join(format!("{name}.ext"));
    std::fs::write(
        &ext,
        san.map(|san| format!("subjectAltName={san}\n"))
            .unwrap_or_default(),
    )
    .expect("write extensions");
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            &format!("{ca}.crt"),
            "-CAkey",
            &format!("{ca}.key"),
            "-CAcreateserial",
            "-days",
            "3",
            "-extfile",
            &ext.to_string_lossy(),
            "-out",
            &format!("{name}.crt"),
        ],
    );
    std::fs::set_permissions(
        dir.join(format!("{name}.key")),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .expect("chmod key");
}

/// A free TCP port on loopback (the server binds it right after).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

impl TlsServer {
    /// `initdb`, certificates, a TLS-only `pg_hba.conf`, start; then the users
    /// `alice` (password [`PASSWORD`]) and `certuser` (certificate) and
    /// the databases `chess` and `restored`, owned by alice.
    fn start(label: &str) -> TlsServer {
        let scratch = scratch_dir(&format!("pgnload-tls-{label}-"));
        let dir = scratch.path().to_path_buf();
        let bin = pgnload::store::embedded::PgBinaries::locate()
            .unwrap_or_else(|e| panic!("PostgreSQL programs: {e}"))
            .bin_dir;
        let certs = dir.join("certs");
        std::fs::create_dir(&certs).expect("mkdir certs");
        make_ca(&certs, "ca");
        make_ca(&certs, "other-ca");
        make_cert(
            &certs,
            "server",
            "localhost",
            "ca",
            Some("DNS:localhost,IP:127.0.0.1"),
        );
        make_cert(&certs, "client", "certuser", "ca", None);
        let server = TlsServer {
            dir,
            port: free_port(),
            bin,
            scratch: Some(scratch),
        };
        if nix::unistd::geteuid().is_root() {
            let postgres = nix::unistd::User::from_name("postgres")
                .expect("users")
                .expect("a postgres user to run the server as");
            for path in [server.dir.clone(), certs.join("server.key")] {
                nix::unistd::chown(&path, Some(postgres.uid), Some(postgres.gid)).expect("chown");
            }
        }
        server.init(&certs);
        server
    }

    fn init(&self, certs: &Path) {
        let pgdata = self.dir.join("data");
        let out = run({
            let mut c = as_server_user(&self.bin.join("initdb"));
            c.arg("-D")
                .arg(&pgdata)
                .args(["-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C"])
                .current_dir("/");
            c
        });
        assert_success(&out, "initdb");
        let conf = format!(
            "\nlisten_addresses = '127.0.0.1'\nport = {}\nunix_socket_directories = '{}'\n\
             ssl = on\nssl_cert_file = '{}'\nssl_key_file = '{}'\nssl_ca_file = '{}'\n\
             password_encryption = 'scram-sha-256'\nfsync = off\nshared_buffers = 32MB\n",
            self.port,
            self.dir.display(),
            certs.join("server.crt").display(),
            certs.join("server.key").display(),
            certs.join("ca.crt").display(),
        );
        let hba = "local all all trust\n\
                   hostssl all certuser 127.0.0.1/32 cert\n\
                   hostssl all all 127.0.0.1/32 scram-sha-256\n";
        for (file, text, append) in [
            ("postgresql.conf", conf.as_str(), true),
            ("pg_hba.conf", hba, false),
        ] {
            let path = pgdata.join(file);
            let mut all = if append {
                std::fs::read_to_string(&path).expect("read conf")
            } else {
                String::new()
            };
            all.push_str(text);
            std::fs::write(&path, all).expect("write conf");
        }
        let out = run({
            let mut c = as_server_user(&self.bin.join("pg_ctl"));
            c.args(["start", "-w", "-s", "-t", "120", "-D"])
                .arg(&pgdata)
                .arg("-l")
                .arg(self.dir.join("server.log"))
                .current_dir("/");
            c
        });
        assert_success(&out, "pg_ctl start");
        for sql in [
            format!("CREATE USER alice PASSWORD '{PASSWORD}'"),
            "CREATE USER certuser".to_owned(),
            "CREATE DATABASE chess OWNER alice".to_owned(),
            "CREATE DATABASE restored OWNER alice".to_owned(),
            "CREATE DATABASE certdb OWNER certuser".to_owned(),
        ] {
            self.admin("postgres", &sql);
        }
    }

    /// Runs SQL as the superuser over the Unix socket, in `db`.
    fn admin(&self, db: &str, sql: &str) -> String {
        let out = run({
            let mut c = Command::new("psql");
            c.args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h"])
                .arg(&self.dir)
                .args([
                    "-p",
                    &self.port.to_string(),
                    "-U",
                    "postgres",
                    "-d",
                    db,
                    "-c",
                    sql,
                ])
                .env_remove("PGPASSWORD");
            c
        });
        assert_success(&out, sql);
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    fn cert(&self, name: &str) -> String {
        self.dir
            .join("certs")
            .join(name)
            .to_string_lossy()
            .into_owned()
    }

    /// alice's URL to `db` on `host`, with `query` (`key=value&...`).
    fn url(&self, host: &str, db: &str, query: &str) -> String {
        format!(
            "postgresql://alice:{PASSWORD}@{host}:{}/{db}?{query}",
            self.port
        )
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        let _ = run({
            let mut c = as_server_user(&self.bin.join("pg_ctl"));
            c.args(["stop", "-w", "-s", "-m", "immediate", "-D"])
                .arg(self.dir.join("data"))
                .current_dir("/");
            c
        });
        if std::thread::panicking()
            && let Some(scratch) = self.scratch.take()
        {
            eprintln!("TLS server kept in {}", scratch.keep().display());
        }
    }
}

/// pgnload with `home` as HOME, none of the caller's `PG*` variables nor
/// `DATABASE_URL`, then `vars`.
fn pgnload_in(home: &Path, vars: &[(&str, String)]) -> Command {
    let mut c = pgnload();
    for (key, _) in std::env::vars_os() {
        if key.as_encoded_bytes().starts_with(b"PG") || key == "DATABASE_URL" {
            c.env_remove(key);
        }
    }
    c.env("HOME", home).current_dir(home);
    for (key, value) in vars {
        c.env(key, value);
    }
    c
}

/// Runs `pgnload ARGS` with `--database-url url` (none: the environment
/// alone) and asserts the password is in none of its output.
fn pgnload_run(home: &Path, vars: &[(&str, String)], url: Option<&str>, args: &[&str]) -> Output {
    let out = run({
        let mut c = pgnload_in(home, vars);
        if let Some(url) = url {
            c.arg("--database-url").arg(url);
        }
        c.args(args);
        c
    });
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !text.contains(PASSWORD),
        "{args:?} printed the password:\n{text}"
    );
    out
}

/// `status` through `url`: its output, after asserting it succeeded.
fn status_ok(home: &Path, vars: &[(&str, String)], url: Option<&str>) -> String {
    let out = pgnload_run(home, vars, url, &["status"]);
    assert_success(&out, &format!("status via {url:?} {vars:?}"));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `status` through `url`, which must fail: its stderr.
fn status_fails(home: &Path, url: &str) -> String {
    let out = pgnload_run(home, &[], Some(url), &["status"]);
    assert!(!out.status.success(), "status via {url} succeeded");
    stderr(&out)
}

#[test]
fn tls_modes_verify_as_libpq_does() {
    let server = TlsServer::start("modes");
    let home = scratch_dir("pgnload-tls-home-");
    let home = home.path();
    let ca = server.cert("ca.crt");
    for query in [
        "sslmode=require".to_owned(),
        "sslmode=prefer".to_owned(),
        "sslmode=allow".to_owned(),
        String::new(),
        format!("sslmode=verify-full&sslrootcert={ca}"),
    ] {
        status_ok(home, &[], Some(&server.url("localhost", "chess", &query)));
    }
    status_ok(
        home,
        &[],
        Some(&server.url(
            "127.0.0.1",
            "chess",
            &format!("sslmode=verify-ca&sslrootcert={ca}"),
        )),
    );
    // (pg_hba has no entry without TLS: each success above was encrypted.)

    let other = server.cert("other-ca.crt");
    let wrong_ca = status_fails(
        home,
        &server.url(
            "localhost",
            "chess",
            &format!("sslmode=verify-full&sslrootcert={other}"),
        ),
    );
    assert!(wrong_ca.contains("certificate verify failed"), "{wrong_ca}");
    assert!(
        wrong_ca.contains(&other),
        "names the root certificate: {wrong_ca}"
    );

    let wrong_host = status_fails(
        home,
        &format!(
            "host=wrong.example hostaddr=127.0.0.1 port={} user=alice password={PASSWORD} \
             dbname=chess sslmode=verify-full sslrootcert={ca}",
            server.port
        ),
    );
    assert!(
        wrong_host.to_lowercase().contains("hostname mismatch"),
        "{wrong_host}"
    );

    let plain = status_fails(home, &server.url("localhost", "chess", "sslmode=disable"));
    assert!(plain.contains("no encryption"), "{plain}");

    let no_root = status_fails(
        home,
        &server.url("localhost", "chess", "sslmode=verify-full"),
    );
    assert!(no_root.contains("root.crt"), "{no_root}");

    default_root_and_client_certificates(&server, home);
}

/// libpq's default root certificate, which makes `require` verify, and
/// a client certificate that authenticates `certuser` (`cert` in `pg_hba.conf`).
fn default_root_and_client_certificates(server: &TlsServer, home: &Path) {
    let (ca, other) = (server.cert("ca.crt"), server.cert("other-ca.crt"));
    // libpq's rule: with ~/.postgresql/root.crt, `require` verifies too.
    std::fs::create_dir(home.join(".postgresql")).expect("mkdir");
    std::fs::copy(&other, home.join(".postgresql/root.crt")).expect("copy");
    let verified = status_fails(home, &server.url("localhost", "chess", "sslmode=require"));
    assert!(verified.contains("certificate verify failed"), "{verified}");
    std::fs::copy(&ca, home.join(".postgresql/root.crt")).expect("copy");
    status_ok(
        home,
        &[],
        Some(&server.url("localhost", "chess", "sslmode=require")),
    );

    // A client certificate authenticates certuser (pg_hba `cert`).
    let cert_url = |files: &str| {
        format!(
            "postgresql://certuser@localhost:{}/certdb?sslmode=verify-full&sslrootcert={ca}{files}",
            server.port
        )
    };
    status_ok(
        home,
        &[],
        Some(&cert_url(&format!(
            "&sslcert={}&sslkey={}",
            server.cert("client.crt"),
            server.cert("client.key")
        ))),
    );
    let no_cert = status_fails(home, &cert_url(""));
    assert!(no_cert.contains("certuser"), "{no_cert}");
}

#[test]
fn every_command_works_over_tls() {
    let server = TlsServer::start("commands");
    let home = scratch_dir("pgnload-tls-home-");
    let home = home.path();
    let query = format!("sslmode=verify-full&sslrootcert={}", server.cert("ca.crt"));
    let url = server.url("localhost", "chess", &query);
    let url = Some(url.as_str());
    let sample = data("kasparov-deep-blue-1997.pgn");
    let ok = |url: Option<&str>, args: &[&str]| {
        let out = pgnload_run(home, &[], url, args);
        assert_success(&out, &format!("{args:?}"));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    ok(url, &["-q", "import", &sample.to_string_lossy()]);
    let games = ok(url, &["games", "--format", "json"]);
    assert_eq!(games.lines().count(), 6, "{games}");
    let pgn = home.join("all.pgn");
    ok(url, &["-q", "export", "-o", &pgn.to_string_lossy()]);
    let exported = std::fs::read_to_string(&pgn).expect("exported");
    assert_eq!(exported.matches("[Event ").count(), 6);
    ok(url, &["-q", "verify"]);
    let status = ok(url, &["status"]);
    assert!(status.contains("kasparov-deep-blue-1997.pgn"), "{status}");
    let backup = home.join("chess.dump");
    ok(url, &["-q", "db", "backup", &backup.to_string_lossy()]);
    let restored = server.url("localhost", "restored", &query);
    ok(
        Some(&restored),
        &["-q", "db", "restore", &backup.to_string_lossy()],
    );
    assert_eq!(ok(Some(&restored), &["games", "--format", "json"]), games);
}

#[test]
fn passwords_come_from_the_environment_a_password_file_or_a_service() {
    let server = TlsServer::start("libpq");
    let home = scratch_dir("pgnload-tls-home-");
    let home = home.path();
    let port = server.port.to_string();
    let server_vars = vec![
        ("PGHOST", "localhost".to_owned()),
        ("PGPORT", port.clone()),
        ("PGUSER", "alice".to_owned()),
        ("PGDATABASE", "chess".to_owned()),
        ("PGSSLMODE", "require".to_owned()),
    ];
    // No password anywhere: refused by the server.
    let out = pgnload_run(home, &server_vars, None, &["status"]);
    assert!(!out.status.success(), "no password, yet connected");

    // PGPASSWORD alone, with the server named by the environment alone:
    // status, and a backup (pg_dump gets the password too).
    let mut with_password = server_vars.clone();
    with_password.push(("PGPASSWORD", PASSWORD.to_owned()));
    status_ok(home, &with_password, None);
    let backup = home.join("env.dump");
    let out = pgnload_run(
        home,
        &with_password,
        None,
        &["-q", "db", "backup", &backup.to_string_lossy()],
    );
    assert_success(&out, "db backup with PGPASSWORD");

    // ~/.pgpass alone (mode 0600), for a URL without a password.
    let url = format!("postgresql://alice@localhost:{port}/chess?sslmode=require");
    let pgpass = home.join(".pgpass");
    std::fs::write(
        &pgpass,
        format!("# test\nlocalhost:{port}:chess:alice:{PASSWORD}\n"),
    )
    .expect("write .pgpass");
    let chmod = |path: &Path, mode| {
        std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(mode))
            .expect("chmod");
    };
    chmod(&pgpass, 0o600);
    status_ok(home, &[], Some(&url));
    let backup = home.join("pgpass.dump");
    let out = pgnload_run(
        home,
        &[],
        Some(&url),
        &["-q", "db", "backup", &backup.to_string_lossy()],
    );
    assert_success(&out, "db backup with ~/.pgpass");
    // Readable by others: ignored, with libpq's warning.
    chmod(&pgpass, 0o644);
    let out = pgnload_run(home, &[], Some(&url), &["status"]);
    assert!(!out.status.success(), "a 0644 .pgpass was used");
    let said = stderr(&out);
    assert!(said.contains("group or world access"), "{said}");
    // PGPASSFILE names another one.
    let elsewhere = home.join("passwords");
    std::fs::rename(&pgpass, &elsewhere).expect("move");
    chmod(&elsewhere, 0o600);
    status_ok(
        home,
        &[("PGPASSFILE", elsewhere.to_string_lossy().into_owned())],
        Some(&url),
    );

    service_files(&server, home);
}

/// A service file alone gives the whole server, password included.
fn service_files(server: &TlsServer, home: &Path) {
    let port = server.port.to_string();
    // A service file alone: ~/.pg_service.conf, PGSERVICEFILE, or
    // PGSYSCONFDIR/pg_service.conf, named by PGSERVICE or service=.
    let service = format!(
        "[chess]\nhost=localhost\nport={port}\ndbname=chess\nuser=alice\npassword={PASSWORD}\n\
         sslmode=verify-full\nsslrootcert={}\n",
        server.cert("ca.crt")
    );
    std::fs::write(home.join(".pg_service.conf"), &service).expect("write service file");
    status_ok(home, &[("PGSERVICE", "chess".to_owned())], None);
    status_ok(home, &[], Some("service=chess"));
    let sysconf = home.join("sysconf");
    std::fs::create_dir(&sysconf).expect("mkdir");
    std::fs::rename(
        home.join(".pg_service.conf"),
        sysconf.join("pg_service.conf"),
    )
    .expect("move");
    status_ok(
        home,
        &[
            ("PGSERVICE", "chess".to_owned()),
            ("PGSYSCONFDIR", sysconf.to_string_lossy().into_owned()),
        ],
        None,
    );
    let backup = home.join("service.dump");
    let out = pgnload_run(
        home,
        &[("PGSYSCONFDIR", sysconf.to_string_lossy().into_owned())],
        Some("service=chess"),
        &["-q", "db", "backup", &backup.to_string_lossy()],
    );
    assert_success(&out, "db backup through a service");
    // The string beats the service: another database, same server.
    let out = pgnload_run(
        home,
        &[("PGSYSCONFDIR", sysconf.to_string_lossy().into_owned())],
        Some("service=chess dbname=restored"),
        &["status"],
    );
    assert_success(&out, "status on restored");
    assert_eq!(
        server.admin(
            "restored",
            "SELECT count(*) FROM pg_tables WHERE tablename = 'pgnload_migrations'"
        ),
        "1",
        "status migrated the database the string named"
    );
}

/// Shards that accept TLS only: pgnload's own connections to them and the
/// coordinator's `postgres_fdw` servers both use the TLS settings of each
/// shard's connection string.
#[test]
fn shards_that_require_tls_are_reached_over_tls() {
    let shards = [TlsServer::start("shard1"), TlsServer::start("shard2")];
    let urls: Vec<String> = shards
        .iter()
        .map(|server| {
            server.url(
                "localhost",
                "chess",
                &format!("sslmode=verify-full&sslrootcert={}", server.cert("ca.crt")),
            )
        })
        .collect();
    let coordinator = crate::common::fresh_db("tls_coordinator");
    let out = run({
        let mut c = coordinator.pgnload();
        c.args(["-q", "db", "migrate", "--shards", &urls.join(",")]);
        c
    });
    assert_success(&out, "db migrate --shards");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!said.contains(PASSWORD), "{said}");
    coordinator.quiet_ok(&[
        "import",
        &data("kasparov-deep-blue-1997.pgn").to_string_lossy(),
    ]);
    let games = coordinator.quiet_ok(&["games", "--format", "json"]);
    assert_eq!(games.lines().count(), 6, "{games}");
    let stored: Vec<String> = shards
        .iter()
        .map(|server| server.admin("chess", "SELECT count(*) FROM games"))
        .collect();
    assert_eq!(
        stored
            .iter()
            .map(|n| n.parse::<u32>().expect("a count"))
            .sum::<u32>(),
        6,
        "{stored:?}"
    );
    assert_eq!(
        coordinator.psql(
            "SELECT count(*) FROM pg_foreign_server \
             WHERE 'sslmode=verify-full' = ANY (srvoptions)"
        ),
        "2"
    );
}
