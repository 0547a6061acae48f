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
//!
//! It must not let a password out: every connection error and description
//! of a database goes through the redaction here.

use std::{
    collections::HashMap,
    path::PathBuf,
    sync::{Arc, OnceLock},
    time::Duration,
};

use tokio_postgres::{
    AsyncMessage, Client, NoTls, Row, Socket, Statement, tls::MakeTlsConnect, types::ToSql,
};

use crate::{
    conninfo::{ConnectionSettings, Environment, ResolveError, tls::SslMode},
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
        sql: include_str!("../../../sql/0001_schema.sql"),
    },
    Migration {
        version: 2,
        name: "0002_bulk_loads.sql",
        sql: include_str!("../../../sql/0002_bulk_loads.sql"),
    },
    Migration {
        version: 3,
        name: "0003_game_identity.sql",
        sql: include_str!("../../../sql/0003_game_identity.sql"),
    },
    Migration {
        version: 4,
        name: "0004_explorer.sql",
        sql: include_str!("../../../sql/0004_explorer.sql"),
    },
    Migration {
        version: 5,
        name: "0005_query_indexes.sql",
        sql: include_str!("../../../sql/0005_query_indexes.sql"),
    },
    Migration {
        version: 6,
        name: "0006_storage.sql",
        sql: include_str!("../../../sql/0006_storage.sql"),
    },
    Migration {
        version: 7,
        name: "0007_storage_fillfactor.sql",
        sql: include_str!("../../../sql/0007_storage_fillfactor.sql"),
    },
    Migration {
        version: 8,
        name: "0008_import_scope.sql",
        sql: include_str!("../../../sql/0008_import_scope.sql"),
    },
    Migration {
        version: 9,
        name: "0009_explorer_games.sql",
        sql: include_str!("../../../sql/0009_explorer_games.sql"),
    },
    Migration {
        version: 10,
        name: "0010_positions_cap.sql",
        sql: include_str!("../../../sql/0010_positions_cap.sql"),
    },
    Migration {
        version: 11,
        name: "0011_shards.sql",
        sql: include_str!("../../../sql/0011_shards.sql"),
    },
    Migration {
        version: 12,
        name: "0012_explorer_shared_positions.sql",
        sql: include_str!("../../../sql/0012_explorer_shared_positions.sql"),
    },
    Migration {
        version: 13,
        name: "0013_explorer_top_games.sql",
        sql: include_str!("../../../sql/0013_explorer_top_games.sql"),
    },
    Migration {
        version: 14,
        name: "0014_moves_position_game.sql",
        sql: include_str!("../../../sql/0014_moves_position_game.sql"),
    },
    Migration {
        version: 15,
        name: "0015_explorer_inline_top_games.sql",
        sql: include_str!("../../../sql/0015_explorer_inline_top_games.sql"),
    },
    Migration {
        version: 16,
        name: "0016_explorer_deferred.sql",
        sql: include_str!("../../../sql/0016_explorer_deferred.sql"),
    },
    Migration {
        version: 17,
        name: "0017_positions_index_order.sql",
        sql: include_str!("../../../sql/0017_positions_index_order.sql"),
    },
    Migration {
        version: 18,
        name: "0018_game_annotations.sql",
        sql: include_str!("../../../sql/0018_game_annotations.sql"),
    },
    Migration {
        version: 19,
        name: "0019_schema_comments.sql",
        sql: include_str!("../../../sql/0019_schema_comments.sql"),
    },
    Migration {
        version: 20,
        name: "0020_player_names.sql",
        sql: include_str!("../../../sql/0020_player_names.sql"),
    },
    Migration {
        version: 21,
        name: "0021_explorer_mover_rating.sql",
        sql: include_str!("../../../sql/0021_explorer_mover_rating.sql"),
    },
    Migration {
        version: 22,
        name: "0022_serve_cache_notify.sql",
        sql: include_str!("../../../sql/0022_serve_cache_notify.sql"),
    },
    Migration {
        version: 23,
        name: "0023_explorer_category_statistics.sql",
        sql: include_str!("../../../sql/0023_explorer_category_statistics.sql"),
    },
    Migration {
        version: 24,
        name: "0024_explorer_top_games_order.sql",
        sql: include_str!("../../../sql/0024_explorer_top_games_order.sql"),
    },
    Migration {
        version: 25,
        name: "0025_explorer_recent_lists.sql",
        sql: include_str!("../../../sql/0025_explorer_recent_lists.sql"),
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
    /// A server of the user's, named by a connection string (URL or
    /// key=value form), a service, the `PG*` variables, or all of them,
    /// resolved as libpq resolves them ([`crate::conninfo`]).
    Server(Arc<Server>),
    /// pgnload's own cluster in this data directory.
    Embedded(PathBuf),
}

impl Target {
    /// `--database-url` (else `DATABASE_URL`, else the config file's
    /// `database_url`); else the embedded cluster in `data_dir` when a data
    /// directory was given (`--data-dir`, `PGNLOAD_DATA_DIR`, the config
    /// file: `explicit_dir`), since pgnload's own setting outranks libpq's
    /// general ones; else the server the `PG*` variables name (any of
    /// [`crate::conninfo::SERVER_VARIABLES`] set); else the embedded
    /// cluster in the default `data_dir`. The data directory is made
    /// absolute: every message then names the directory meant (a relative
    /// default resolves against the working directory, cron's is the home
    /// directory).
    pub fn choose(url: Option<String>, data_dir: PathBuf, explicit_dir: bool) -> Target {
        Self::choose_in(url, data_dir, explicit_dir, Environment::process())
    }

    /// [`Target::choose`] in the environment `env`.
    pub fn choose_in(
        url: Option<String>,
        data_dir: PathBuf,
        explicit_dir: bool,
        env: Environment,
    ) -> Target {
        match url.filter(|u| !u.trim().is_empty()) {
            Some(url) => Target::Server(Arc::new(Server::new(Some(url), env))),
            None if !explicit_dir && env.names_a_server() => {
                Target::Server(Arc::new(Server::new(None, env)))
            }
            None => Target::Embedded(std::path::absolute(&data_dir).unwrap_or(data_dir)),
        }
    }

    /// A description safe to print (no password).
    pub fn describe(&self) -> String {
        match self {
            Target::Server(server) => server.describe(),
            Target::Embedded(dir) => format!("embedded cluster in {}", dir.display()),
        }
    }
}

/// A server of the user's: what names it, and its settings, resolved on
/// first use and kept, so that the files are read and their warnings
/// printed once per run however many connections it opens.
pub struct Server {
    conninfo: Option<String>,
    env: Environment,
    resolved: OnceLock<Result<ConnectionSettings, ResolveError>>,
}

/// Shows only the redacted description.
impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Server({})", self.describe())
    }
}

impl Server {
    /// The server `conninfo` names (none: the environment alone) in `env`.
    pub fn new(conninfo: Option<String>, env: Environment) -> Server {
        Server {
            conninfo,
            env,
            resolved: OnceLock::new(),
        }
    }

    /// Its settings, resolved at the first call; a warning (a password file
    /// others may read) is printed then, once.
    pub fn settings(&self) -> Result<&ConnectionSettings, Error> {
        let resolved = self.resolved.get_or_init(|| {
            let resolved = ConnectionSettings::resolve(self.conninfo.as_deref(), &self.env);
            if let Ok(settings) = &resolved {
                for warning in &settings.warnings {
                    stderr_line!("pgnload: warning: {warning}");
                }
            }
            resolved
        });
        resolved.as_ref().map_err(|e| {
            let shown = self.shown();
            Error::Config(match e {
                ResolveError::Syntax(why) => format!("invalid connection string {shown}: {why}"),
                ResolveError::Settings(why) => format!("connecting to {shown}: {why}"),
            })
        })
    }

    /// The redacted connection string, or what names the server.
    fn shown(&self) -> String {
        match &self.conninfo {
            Some(text) => redact_url(text),
            None => "the server the PG* environment variables name".to_owned(),
        }
    }

    /// Its description: the resolved one, else what names it.
    pub fn describe(&self) -> String {
        match self.resolved.get() {
            Some(Ok(settings)) => settings.description.clone(),
            _ => self.shown(),
        }
    }
}

/// Replaces every secret in a connection string with `***`, so that the
/// string can appear in messages. Handles the URL form
/// (`postgres://user:secret@host/db`, `?password=secret`), the key=value form
/// with or without spaces around `=` (`password = secret`, quoted values),
/// and, because a typo must not print a password either, a scheme-less
/// `user:secret@host/db` and keys that merely look secret (`passwd`,
/// `sslpassword`, `pwd`...). When in doubt it hides: a value it cannot
/// delimit is hidden to the end of the string.
pub fn redact_url(url: &str) -> String {
    match url.find("://") {
        Some(end)
            if url[..end]
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b)) =>
        {
            redact_uri(url, end + 3)
        }
        _ => redact_key_values(url),
    }
}

/// The driver's reason for rejecting a connection string, without the
/// character it quotes after "but got" (it may be a password's first one).
pub(crate) fn driver_message(e: &tokio_postgres::Error) -> String {
    let text = std::error::Error::source(e).map_or_else(|| e.to_string(), ToString::to_string);
    match text.find(" but got") {
        Some(cut) => text[..cut].to_owned(),
        None => text,
    }
}

/// Whether a parameter name may hold a secret. Deliberately broad.
pub(crate) fn is_secret_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    ["pass", "pwd", "secret", "token"]
        .iter()
        .any(|word| key.contains(word))
}

/// Hides the password between the first `:` and the last `@` of a userinfo
/// part (`user:secret@host`); the last `@`, because a careless password
/// may itself contain one.
fn redact_userinfo(text: &str) -> String {
    match (text.find(':'), text.rfind('@')) {
        (Some(colon), Some(at)) if colon < at => {
            format!("{}***{}", &text[..=colon], &text[at..])
        }
        _ => text.to_owned(),
    }
}

/// The URL form: userinfo, then every secret-looking query parameter.
fn redact_uri(url: &str, rest_start: usize) -> String {
    let query_start = url[rest_start..].find('?').map(|i| rest_start + i);
    let before_query = &url[rest_start..query_start.unwrap_or(url.len())];
    let mut out = format!("{}{}", &url[..rest_start], redact_userinfo(before_query));
    if let Some(q) = query_start {
        out.push('?');
        let params: Vec<String> = url[q + 1..]
            .split('&')
            .map(|param| match param.split_once('=') {
                Some((key, _)) if is_secret_key(key) => format!("{key}=***"),
                // A bare word that looks secret: hide it.
                None if is_secret_key(param) => "***".to_owned(),
                Some(_) | None => param.to_owned(),
            })
            .collect();
        out.push_str(&params.join("&"));
    }
    out
}

/// The index after the character at `i`, or after the character a `\` at
/// `i` escapes (a whole UTF-8 character, so slicing stays on boundaries).
fn past_escape(s: &str, i: usize) -> usize {
    let i = if s.as_bytes()[i] == b'\\' { i + 1 } else { i };
    i + s[i..].chars().next().map_or(0, char::len_utf8)
}

/// The key=value form, parsed as libpq does: whitespace may surround `=`;
/// a value is a single-quoted string (with `\` escapes) or runs to the next
/// whitespace. Anything that is not `key = value` is shown only after
/// [`redact_userinfo`], and a secret-looking key with no `=` after it hides
/// the rest of the string.
fn redact_key_values(s: &str) -> String {
    let bytes = s.as_bytes();
    let skip_ws = |mut i: usize| {
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        i
    };
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < bytes.len() {
        let key_start = skip_ws(i);
        out.push_str(&s[i..key_start]);
        let mut key_end = key_start;
        while key_end < bytes.len()
            && !bytes[key_end].is_ascii_whitespace()
            && bytes[key_end] != b'='
        {
            key_end += 1;
        }
        if key_end == key_start && key_end == bytes.len() {
            break;
        }
        let key = &s[key_start..key_end];
        let eq = skip_ws(key_end);
        if bytes.get(eq) != Some(&b'=') {
            // Not key=value here. A word that still looks secret once a
            // `user:secret@` in it is hidden is shown only if it is a plain
            // name (`password`): `secretpw@host` is a password.
            let key = redact_userinfo(key);
            if is_secret_key(&key) {
                let plain = key.bytes().all(|b| b.is_ascii_alphabetic() || b == b'_');
                out.push_str(if plain { &key } else { "***" });
                if !s[key_end..].trim().is_empty() {
                    out.push_str(" ***");
                }
                return out;
            }
            out.push_str(&key);
            i = key_end;
            continue;
        }
        let value_start = skip_ws(eq + 1);
        let mut end = value_start;
        if bytes.get(end) == Some(&b'\'') {
            end += 1;
            while end < bytes.len() && bytes[end] != b'\'' {
                end = past_escape(s, end);
            }
            end = (end + 1).min(bytes.len());
        } else {
            while end < bytes.len() && !bytes[end].is_ascii_whitespace() {
                end = past_escape(s, end);
            }
        }
        out.push_str(&redact_userinfo(key));
        out.push_str(&s[key_end..value_start]);
        if is_secret_key(key) {
            out.push_str("***");
        } else {
            out.push_str(&redact_userinfo(&s[value_start..end]));
        }
        i = end;
    }
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
    connect_with(target, None).await
}

/// The channel on which the schema announces every statement that changes
/// a table an explorer answer reads, with the table's name as payload
/// (`sql/0022_serve_cache_notify.sql`): what `pgnload serve` listens to so
/// that it never answers from what it kept after such a write.
pub const CHANGES_CHANNEL: &str = "pgnload_changes";

/// A connection to `target` that listens on [`CHANGES_CHANNEL`]: once this
/// returns, every transaction that commits a change is announced on the
/// receiver (its payloads, in commit order). The receiver ends when the
/// connection does (the server went away, the network failed), after the
/// notifications that arrived before.
pub async fn listen_for_changes(
    target: &Target,
) -> Result<(Database, tokio::sync::mpsc::UnboundedReceiver<String>), Error> {
    let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
    let database = connect_with(target, Some(&sender)).await?;
    database
        .client
        .batch_execute(&format!("LISTEN {CHANGES_CHANNEL}"))
        .await
        .map_err(db_err(format!("listening on {CHANGES_CHANNEL}")))?;
    Ok((database, receiver))
}

/// [`connect`], the connection's notifications sent to `notify` (else
/// dropped).
async fn connect_with(target: &Target, notify: Option<&Notify>) -> Result<Database, Error> {
    let (client, connection, session, description) = match target {
        Target::Server(server) => {
            let settings = server.settings()?;
            let (client, connection) = open_server(settings, notify).await?;
            (client, connection, None, settings.description.clone())
        }
        Target::Embedded(dir) => {
            let dir = dir.clone();
            let (config, session) = tokio::task::spawn_blocking(move || {
                let cluster = EmbeddedCluster::new(dir)?;
                let session = cluster.start_session()?;
                Ok::<_, Error>((cluster.pg_config(), session))
            })
            .await
            .map_err(|e| Error::bug_from("starting the embedded cluster", e))??;
            let description = target.describe();
            let (client, connection) = open(&config, NoTls, notify)
                .await
                .map_err(db_err(format!("connecting to {description}")))?;
            (client, connection, Some(session), description)
        }
    };
    Ok(Database {
        client,
        description,
        connection,
        session,
    })
}

/// Connects to a server of the user's with its TLS settings: `allow`
/// tries without TLS first and, if the server refuses that, with TLS, as
/// libpq does. A failure says which TLS settings were used, so that a
/// certificate refused reads as such.
async fn open_server(
    settings: &ConnectionSettings,
    notify: Option<&Notify>,
) -> Result<(Client, tokio::task::JoinHandle<()>), Error> {
    let tls = &settings.tls;
    let failed = |cause| Error::Database {
        context: match tls.mode {
            SslMode::Disable => format!("connecting to {}", settings.description),
            _ => format!(
                "connecting to {} ({})",
                settings.description,
                tls.describe()
            ),
        },
        cause,
    };
    if tls.mode == SslMode::Disable {
        return open(&settings.driver, NoTls, notify).await.map_err(failed);
    }
    let connector = tls
        .connector()
        .map_err(|why| Error::Config(format!("connecting to {}: {why}", settings.description)))?;
    if tls.mode != SslMode::Allow {
        return open(&settings.driver, connector, notify)
            .await
            .map_err(failed);
    }
    match open(&settings.driver, NoTls, notify).await {
        Err(refused) if refused.as_db_error().is_some() => {
            let mut with_tls = settings.driver.clone();
            with_tls.ssl_mode(tokio_postgres::config::SslMode::Require);
            open(&with_tls, connector, notify).await.map_err(failed)
        }
        other => other.map_err(failed),
    }
}

/// Opens one connection with `config` and spawns its task. Every session
/// commits synchronously, whatever the server's default (the embedded
/// cluster's is off): the importer acts on what a commit acknowledged —
/// position ids go into the dedup map, a batch's games into the run's
/// counts, a bulk load's dropped indexes into its record — so an
/// acknowledged commit must survive a server crash. It costs one WAL flush
/// per phase of a batch of thousands of games. The connection's
/// notifications go to `notify`, if given.
async fn open<T>(
    config: &tokio_postgres::Config,
    tls: T,
    notify: Option<&Notify>,
) -> Result<(Client, tokio::task::JoinHandle<()>), tokio_postgres::Error>
where
    T: MakeTlsConnect<Socket>,
    T::Stream: Send + 'static,
{
    let mut config = config.clone();
    let options = match config.get_options() {
        Some(own) if !own.trim().is_empty() => format!("{own} -c synchronous_commit=on"),
        _ => "-c synchronous_commit=on".to_owned(),
    };
    config.options(&options);
    let (client, mut connection) = config.connect(tls).await?;
    let notify = notify.cloned();
    let connection = tokio::spawn(async move {
        // Errors surface on the client's next call; nothing to do here but
        // hand on the notifications (the rest are notices, not kept).
        while let Some(Ok(message)) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
            if let (Some(notify), AsyncMessage::Notification(notification)) = (&notify, message) {
                // The receiver gone: nobody wants them any more.
                let _ = notify.send(notification.payload().to_owned());
            }
        }
    });
    Ok((client, connection))
}

/// Where a connection's notifications go: their payloads.
type Notify = tokio::sync::mpsc::UnboundedSender<String>;

/// Wraps a driver error with what pgnload was doing.
pub fn db_err(context: impl Into<String>) -> impl FnOnce(tokio_postgres::Error) -> Error {
    let context = context.into();
    move |cause| Error::Database { context, cause }
}

/// A connection's prepared statements, by their text, so that a question
/// asked again on the same connection takes one round trip (bind and
/// execute) instead of two: `Client::query` with a text parses and
/// describes it first, every time. What `pgnload serve` answers many
/// times per pooled connection. Keeping a statement is safe across schema
/// changes: PostgreSQL plans a prepared statement again when a table it
/// reads changes, and one whose columns went away or whose result would
/// change type fails with an error (never a wrong answer), after which it
/// is forgotten and prepared again by the next call.
#[derive(Debug, Default)]
pub struct Statements(std::sync::Mutex<HashMap<&'static str, Statement>>);

impl Statements {
    /// The map, also after a panic elsewhere while it was held (it holds
    /// only complete entries: an insert or a removal is one call).
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<&'static str, Statement>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A client with its connection's [`Statements`]: what a reader asked
/// many times on one connection queries through. Its queries take
/// constant texts only, so that the cache is bounded by the program's
/// texts.
#[derive(Debug, Clone, Copy)]
pub struct Prepared<'a> {
    /// The client.
    pub client: &'a Client,
    statements: &'a Statements,
}

impl<'a> Prepared<'a> {
    /// `client` with `statements`, the ones prepared on its connection.
    pub fn new(client: &'a Client, statements: &'a Statements) -> Prepared<'a> {
        Prepared { client, statements }
    }

    /// `sql` prepared on this connection, once.
    async fn statement(&self, sql: &'static str) -> Result<Statement, tokio_postgres::Error> {
        if let Some(statement) = self.statements.map().get(sql) {
            return Ok(statement.clone());
        }
        let statement = self.client.prepare(sql).await?;
        self.statements.map().insert(sql, statement.clone());
        Ok(statement)
    }

    /// `result` of `sql`, which is forgotten if it failed (prepared again
    /// next time: see [`Statements`]).
    fn forget_failed<T>(
        &self,
        sql: &'static str,
        result: Result<T, tokio_postgres::Error>,
    ) -> Result<T, tokio_postgres::Error> {
        if result.is_err() {
            self.statements.map().remove(sql);
        }
        result
    }

    /// `Client::query` of `sql`, prepared once.
    pub async fn query(
        &self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, tokio_postgres::Error> {
        let statement = self.statement(sql).await?;
        let result = self.client.query(&statement, params).await;
        self.forget_failed(sql, result)
    }

    /// `Client::query_one` of `sql`, prepared once.
    pub async fn query_one(
        &self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Row, tokio_postgres::Error> {
        let statement = self.statement(sql).await?;
        let result = self.client.query_one(&statement, params).await;
        self.forget_failed(sql, result)
    }
}

/// Applies pending migrations; returns the names applied now. The whole
/// run holds a session-level advisory lock, taken before anything is
/// created (`CREATE TABLE IF NOT EXISTS` is not safe against a concurrent
/// twin: one of them fails on the catalog), so that importers starting
/// together apply each migration once and the others wait, then see it.
///
/// Every command migrates first, and a search's whole answer takes a few
/// round trips: when every migration is already recorded with its
/// checksum (one query, no lock) there is nothing to do, so the ~20 round
/// trips of the locked check are skipped (they were most of a search's
/// wall time). Anything else takes the locked path, which applies what is
/// missing and reports a changed migration.
pub async fn migrate(client: &mut Client) -> Result<Vec<&'static str>, Error> {
    if all_applied(client).await? {
        return Ok(Vec::new());
    }
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

/// Whether `pgnload_migrations` records every migration with its current
/// checksum, in one round trip (a simple query: no prepare). A database
/// without the table is not migrated (`false`).
async fn all_applied(client: &Client) -> Result<bool, Error> {
    let messages = match client
        .simple_query("SELECT version, checksum FROM pgnload_migrations")
        .await
    {
        Ok(messages) => messages,
        Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::UNDEFINED_TABLE) => {
            return Ok(false);
        }
        Err(e) => return Err(db_err("reading pgnload_migrations")(e)),
    };
    let recorded: HashMap<String, String> = messages
        .iter()
        .filter_map(|message| match message {
            tokio_postgres::SimpleQueryMessage::Row(row) => Some(row),
            _ => None,
        })
        .filter_map(|row| Some((row.get(0)?.to_owned(), row.get(1)?.to_owned())))
        .collect();
    Ok(MIGRATIONS.iter().all(|migration| {
        recorded.get(&migration.version.to_string()) == Some(&checksum(migration.sql))
    }))
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
        if let Some(row) = row {
            let recorded: String = row.get(0);
            if recorded != sum {
                return Err(Error::Config(format!(
                    "migration {} was changed after it was applied (checksum {recorded} in the database, {sum} now); migrations are append-only",
                    migration.name
                )));
            }
        } else {
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
        .map_err(|source| Error::System {
            what: "starting the async runtime",
            source,
        })
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
        for (url, hidden) in [
            // Issue 12 item 8: spaces around `=` are valid for libpq.
            ("host=db password = hunter2 dbname=x", "hunter2"),
            ("host=db password= hunter2", "hunter2"),
            ("host=db password =hunter2", "hunter2"),
            ("host=db\tpassword\t=\t'hun ter2' dbname=x", "hun ter2"),
            ("host=db PASSWORD=hunter2", "hunter2"),
            (r"host=db password='it\'s hunter2'", "hunter2"),
            ("host=db password='unterminated hunter2", "hunter2"),
            // Issue 12 item 22: scheme-less userinfo, misspelt keys.
            ("alice:hunter2@db.example/chess", "hunter2"),
            ("alice:hunt@er2@db.example/chess", "hunt@er2"),
            ("host=db passwd=hunter2 dbname=x", "hunter2"),
            ("host=db pass = hunter2", "hunter2"),
            ("host=db sslpassword=hunter2", "hunter2"),
            ("host=db password hunter2", "hunter2"),
            ("postgres://host/db?passwd=hunter2", "hunter2"),
            ("postgres://alice:hunt/er2@host/db", "hunt/er2"),
            ("postgres://alice:hunter2@host/db?password=other2", "other2"),
            ("unknown option `alice:hunter2@host`", "hunter2"),
            ("host=db password=\\é'hunter2 x=\\", "hunter2"),
            ("host=db password='é\\", "é"),
            // Issue 28: a typo in the scheme, with a password that looks
            // secret.
            ("postgres//chess:secretpw@127.0.0.1:55100/chess", "secretpw"),
            ("postgres//chess:hunter2@h/db", "hunter2"),
            ("secretpw@host", "secretpw"),
        ] {
            let shown = redact_url(url);
            assert!(!shown.contains(hidden), "{url} → {shown}");
            assert!(shown.contains("***"), "{url} → {shown}");
        }
        assert_eq!(
            redact_url("host=db password = hunter2 dbname=x"),
            "host=db password = *** dbname=x"
        );
        assert_eq!(
            redact_url("host=/tmp/x user=alice dbname=chess"),
            "host=/tmp/x user=alice dbname=chess"
        );
        assert_eq!(
            redact_url("postgresql:///pgnload?host=%2Ftmp%2Fx&port=5432&user=pgnload"),
            "postgresql:///pgnload?host=%2Ftmp%2Fx&port=5432&user=pgnload"
        );
        assert_eq!(
            redact_url("postgres://alice@host/db"),
            "postgres://alice@host/db"
        );
        assert_eq!(
            redact_url("postgres://alice:x@host/db"),
            "postgres://alice:***@host/db"
        );
    }

    /// Issue 28: which variables mean "a server of my own", and what
    /// outranks them.
    #[test]
    fn the_target_is_the_url_a_data_dir_the_pg_variables_or_the_default() {
        let env = |vars: &[(&str, &str)]| {
            Environment::new(
                vars.iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
                None,
            )
        };
        let server = [("PGHOST", "db.example")];
        let choose = |url: Option<&str>, explicit, vars: &[(&str, &str)]| {
            Target::choose_in(url.map(str::to_owned), "d".into(), explicit, env(vars))
        };
        assert!(matches!(
            choose(Some("host=x"), true, &server),
            Target::Server(_)
        ));
        assert!(matches!(choose(None, false, &server), Target::Server(_)));
        assert!(matches!(choose(None, true, &server), Target::Embedded(_)));
        assert!(matches!(
            choose(
                None,
                false,
                &[("PGPASSWORD", "x"), ("PGSSLMODE", "require")]
            ),
            Target::Embedded(_)
        ));
        assert!(matches!(
            choose(Some("  "), false, &[]),
            Target::Embedded(_)
        ));
    }

    #[test]
    fn every_sql_file_is_a_migration_in_order() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../sql");
        let mut files: Vec<String> = std::fs::read_dir(dir)
            .expect("sql/ exists")
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| {
                std::path::Path::new(n)
                    .extension()
                    .is_some_and(|e| e == "sql")
            })
            .collect();
        files.sort();
        let names: Vec<&str> = MIGRATIONS.iter().map(|m| m.name).collect();
        assert_eq!(files, names);
        for (i, m) in MIGRATIONS.iter().enumerate() {
            assert_eq!(usize::try_from(m.version), Ok(i + 1));
            assert!(m.name.starts_with(&format!("{:04}_", m.version)));
        }
    }
}
