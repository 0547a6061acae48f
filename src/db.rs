//! Database connections, the embedded default, secret-safe URLs, and the
//! migration runner.
//!
//! Migrations are the numbered files in `sql/`, embedded at compile time and
//! applied in order, each in its own transaction under an advisory lock (two
//! importers starting at once apply them once). Each applied file is
//! recorded with a checksum; a changed file is refused, which keeps `sql/`
//! append-only. A ~40-line runner is used instead of a migration crate
//! because the popular ones (sqlx, refinery) bring their own Postgres
//! drivers or async runtimes alongside tokio-postgres.

use std::{path::PathBuf, time::Duration};

use tokio_postgres::{Client, NoTls};

use crate::{
    embedded::{EmbeddedCluster, SessionGuard},
    error::Error,
};

/// One migration file from `sql/`.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    /// The number in the file name.
    pub version: i32,
    /// The file name.
    pub name: &'static str,
    /// Its SQL.
    pub sql: &'static str,
}

/// Every migration, in order. A test checks this list against `sql/`.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "0001_schema.sql",
        sql: include_str!("../sql/0001_schema.sql"),
    },
    Migration {
        version: 2,
        name: "0002_bulk_loads.sql",
        sql: include_str!("../sql/0002_bulk_loads.sql"),
    },
    Migration {
        version: 3,
        name: "0003_game_identity.sql",
        sql: include_str!("../sql/0003_game_identity.sql"),
    },
];

/// Checksum recorded for an applied migration.
pub fn checksum(sql: &str) -> String {
    format!("{:016x}", xxhash_rust::xxh3::xxh3_64(sql.as_bytes()))
}

/// Key of the advisory lock that serializes migrations ("pgnload migrate").
const MIGRATION_LOCK: i64 = 0x7067_6e6c_6f61_6401;

/// Where the database is.
#[derive(Debug, Clone)]
pub enum Target {
    /// A server named by a connection string (URL or key=value form).
    Url(String),
    /// pgnload's own cluster in this data directory.
    Embedded(PathBuf),
}

impl Target {
    /// `--database-url`, else `DATABASE_URL`, else the embedded cluster in `data_dir`.
    pub fn choose(url: Option<String>, data_dir: PathBuf) -> Target {
        match url.filter(|u| !u.trim().is_empty()) {
            Some(url) => Target::Url(url),
            None => Target::Embedded(data_dir),
        }
    }

    /// A description safe to print (no password).
    pub fn describe(&self) -> String {
        match self {
            Target::Url(url) => redact_url(url),
            Target::Embedded(dir) => format!("embedded cluster in {}", dir.display()),
        }
    }
}

/// Replaces any password in a connection string with `***`, in both the URL
/// form (`postgres://user:secret@host/db`, `?password=secret`) and the
/// key=value form (`password=secret`).
pub fn redact_url(url: &str) -> String {
    let mut out = url.to_owned();
    if let Some(scheme_end) = out.find("://") {
        let rest_start = scheme_end + 3;
        let authority_end = out[rest_start..]
            .find(['/', '?'])
            .map_or(out.len(), |i| rest_start + i);
        if let Some(at) = out[rest_start..authority_end].rfind('@') {
            let userinfo = &out[rest_start..rest_start + at];
            if let Some(colon) = userinfo.find(':') {
                let start = rest_start + colon + 1;
                out.replace_range(start..rest_start + at, "***");
            }
        }
    }
    redact_key_values(&out)
}

fn redact_key_values(s: &str) -> String {
    let lower = s.to_ascii_lowercase();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while let Some(found) = lower[i..].find("password=") {
        let value_start = i + found + "password=".len();
        out.push_str(&s[i..value_start]);
        out.push_str("***");
        let bytes = s.as_bytes();
        let mut end = value_start;
        if bytes.get(end) == Some(&b'\'') {
            end += 1;
            while end < bytes.len() && bytes[end] != b'\'' {
                end += if bytes[end] == b'\\' { 2 } else { 1 };
            }
            end = (end + 1).min(bytes.len());
        } else {
            while end < bytes.len() && !matches!(bytes[end], b' ' | b'&') {
                end += 1;
            }
        }
        i = end;
    }
    out.push_str(&s[i..]);
    out
}

/// A live database: the client, its connection task, and (for the embedded
/// cluster) the session that keeps the server up while it is used.
pub struct Database {
    /// The client.
    pub client: Client,
    /// Description for messages (no password).
    pub description: String,
    connection: tokio::task::JoinHandle<()>,
    session: Option<SessionGuard>,
}

impl Database {
    /// Stops the embedded server if this was its last session.
    pub fn close(self) -> Result<(), Error> {
        drop(self.client);
        self.connection.abort();
        if let Some(session) = self.session {
            session.close()?;
        }
        Ok(())
    }
}

/// Connects to `target`, starting the embedded cluster if needed. Must run
/// inside a tokio runtime (the connection task is spawned on it).
pub async fn connect(target: &Target) -> Result<Database, Error> {
    let (config, session, description) = match target {
        Target::Url(url) => {
            let mut config: tokio_postgres::Config =
                url.parse().map_err(|cause| Error::Database {
                    context: format!("parsing the connection string {}", redact_url(url)),
                    cause,
                })?;
            if config.get_application_name().is_none() {
                // Lets operators find (and tests terminate) pgnload's sessions.
                config.application_name("pgnload");
            }
            (config, None, redact_url(url))
        }
        Target::Embedded(dir) => {
            let dir = dir.clone();
            let (config, session) = tokio::task::spawn_blocking(move || {
                let cluster = EmbeddedCluster::new(dir)?;
                let session = cluster.start_session()?;
                Ok::<_, Error>((cluster.pg_config(), session))
            })
            .await
            .map_err(|e| Error::Config(format!("starting the embedded cluster: {e}")))??;
            (config, Some(session), target.describe())
        }
    };
    // Every session commits synchronously, whatever the server's default
    // (the embedded cluster's is off): the importer acts on what a commit
    // acknowledged — position ids go into the dedup map, a batch's games
    // into the run's counts, a bulk load's dropped indexes into its record —
    // so an acknowledged commit must survive a server crash. It costs one
    // WAL flush per phase of a batch of thousands of games.
    let mut client_config = config.clone();
    let options = match client_config.get_options() {
        Some(own) if !own.trim().is_empty() => format!("{own} -c synchronous_commit=on"),
        _ => "-c synchronous_commit=on".to_owned(),
    };
    client_config.options(&options);
    let (client, connection) =
        client_config
            .connect(NoTls)
            .await
            .map_err(|cause| Error::Database {
                context: format!("connecting to {description}"),
                cause,
            })?;
    let connection = tokio::spawn(async move {
        // Errors surface on the client's next call; nothing to do here.
        let _ = connection.await;
    });
    Ok(Database {
        client,
        description,
        connection,
        session,
    })
}

/// Wraps a driver error with what pgnload was doing.
pub fn db_err(context: impl Into<String>) -> impl FnOnce(tokio_postgres::Error) -> Error {
    let context = context.into();
    move |cause| Error::Database { context, cause }
}

/// Applies pending migrations; returns the names applied now. The whole
/// run holds a session-level advisory lock, taken before anything is
/// created (`CREATE TABLE IF NOT EXISTS` is not safe against a concurrent
/// twin: one of them fails on the catalog), so that importers starting
/// together apply each migration once and the others wait, then see it.
pub async fn migrate(client: &mut Client) -> Result<Vec<&'static str>, Error> {
    client
        .execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(db_err("waiting for the migration lock"))?;
    let applied = apply_migrations(client).await;
    let unlocked = client
        .execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(db_err("releasing the migration lock"));
    let applied = applied?;
    unlocked?;
    Ok(applied)
}

/// The body of [`migrate`], run under its lock.
async fn apply_migrations(client: &mut Client) -> Result<Vec<&'static str>, Error> {
    client
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS pgnload_migrations (
                 version    integer PRIMARY KEY,
                 name       text NOT NULL,
                 checksum   text NOT NULL,
                 applied_at timestamptz NOT NULL DEFAULT now()
             )",
        )
        .await
        .map_err(db_err("creating pgnload_migrations"))?;
    let mut applied = Vec::new();
    for migration in MIGRATIONS {
        let tx = client
            .transaction()
            .await
            .map_err(db_err("starting a migration"))?;
        let row = tx
            .query_opt(
                "SELECT checksum FROM pgnload_migrations WHERE version = $1",
                &[&migration.version],
            )
            .await
            .map_err(db_err("reading pgnload_migrations"))?;
        let sum = checksum(migration.sql);
        match row {
            Some(row) => {
                let recorded: String = row.get(0);
                if recorded != sum {
                    return Err(Error::Config(format!(
                        "migration {} was changed after it was applied (checksum {recorded} in the database, {sum} now); migrations are append-only",
                        migration.name
                    )));
                }
            }
            None => {
                tx.batch_execute(migration.sql)
                    .await
                    .map_err(db_err(format!("applying {}", migration.name)))?;
                tx.execute(
                    "INSERT INTO pgnload_migrations (version, name, checksum) VALUES ($1, $2, $3)",
                    &[&migration.version, &migration.name, &sum],
                )
                .await
                .map_err(db_err("recording a migration"))?;
                applied.push(migration.name);
            }
        }
        tx.commit()
            .await
            .map_err(db_err(format!("committing {}", migration.name)))?;
    }
    Ok(applied)
}

/// A multi-threaded tokio runtime with one worker: the connection task runs
/// there while the pipeline's threads do the CPU work.
pub fn runtime() -> Result<tokio::runtime::Runtime, Error> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("pgnload-db")
        .enable_all()
        .build()
        .map_err(|e| Error::Config(format!("starting the async runtime: {e}")))
}

/// Backoff delays for reconnecting after a dropped connection.
pub fn backoff(attempt: u32) -> Duration {
    Duration::from_millis(250u64.saturating_mul(1 << attempt.min(6)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted_in_every_form() {
        for (url, hidden) in [
            ("postgres://alice:s3cret@db.example/chess", "s3cret"),
            (
                "postgresql://alice:p%40ss@host:5432/db?sslmode=disable",
                "p%40ss",
            ),
            ("postgres://host/db?user=a&password=hunter2&x=1", "hunter2"),
            ("host=db user=a password=topsecret dbname=x", "topsecret"),
            ("host=db password='quoted secret' dbname=x", "quoted secret"),
        ] {
            let shown = redact_url(url);
            assert!(!shown.contains(hidden), "{url} → {shown}");
            assert!(shown.contains("***"), "{url} → {shown}");
        }
        assert_eq!(
            redact_url("postgres://alice@host/db"),
            "postgres://alice@host/db"
        );
        assert_eq!(
            redact_url("postgres://alice:x@host/db"),
            "postgres://alice:***@host/db"
        );
    }

    #[test]
    fn every_sql_file_is_a_migration_in_order() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("sql");
        let mut files: Vec<String> = std::fs::read_dir(dir)
            .expect("sql/ exists")
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".sql"))
            .collect();
        files.sort();
        let names: Vec<&str> = MIGRATIONS.iter().map(|m| m.name).collect();
        assert_eq!(files, names);
        for (i, m) in MIGRATIONS.iter().enumerate() {
            assert_eq!(m.version as usize, i + 1);
            assert!(m.name.starts_with(&format!("{:04}_", m.version)));
        }
    }
}
