//! The sharded layout: positions, games, moves and the re-import keys
//! hash-partitioned over several PostgreSQL servers, each partition a
//! `postgres_fdw` foreign table, so that importers and queries talk to one
//! coordinator database as they talk to a single node (docs/scaling-out.md).
//!
//! Why through the coordinator, not to the shards directly: the
//! coordinator routes every row to its shard with PostgreSQL's own hash
//! partitioning, so no client computes a shard, and every query, `verify`
//! and `psql` session sees one database. What does not cross a foreign
//! table is replaced by what does (see the application crate's
//! `ingest::writer`): no unique index spans the partitions, so uniqueness
//! is each shard's, on a key that includes the partition key; `ON
//! CONFLICT` has no target;
//! `RETURNING` would send rows one at a time, so ids are drawn first and
//! rows inserted in batches.
//!
//! The layout, by table (partition key, and the unique key each shard
//! keeps, which is global because equal keys hash to one shard):
//! * `positions` by `fen_hash`, a digest of `normalized_fen`: unique
//!   `normalized_fen`;
//! * `games` by `id` and `moves` by `game_id`: a game's moves are on its
//!   shard, so a game and its moves commit together;
//! * `game_keys` by `external_id`: unique `(external_id, lichess)`, the
//!   re-import identity (`games` cannot keep it unique across shards);
//! * `explorer_moves` by `anchor_game_id`: counts added per batch, each row
//!   on the shard of a game it counts (see `EXPLORER_DELTAS_DDL`);
//! * everything else (players, events, the import bookkeeping) stays on
//!   the coordinator.
//!
//! Ids come from sequences on the coordinator, so they are unique across
//! shards. A shard is a database migrated like a single node, minus the
//! foreign keys of `games` to tables that stay on the coordinator.
//!
//! It must not know about batches or games (that is `ingest`): it builds
//! the layout and says which one a database has.

use std::{fmt::Write as _, sync::Arc};

use tokio_postgres::{Client, GenericClient};

use crate::{
    conninfo::{Environment, param, parse_conninfo},
    db::{self, Server, Target, db_err, redact_url},
    error::Error,
};

/// A database's layout when it is sharded: how many shards its tables are
/// partitioned over. (A single node has none: `Option<Shards>`.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shards {
    count: u32,
}

/// The tables partitioned over the shards, each with its partition key,
/// in the order they are built.
const PARTITIONED: [(&str, &str); 5] = [
    ("positions", "fen_hash"),
    ("games", "id"),
    ("moves", "game_id"),
    ("game_keys", "external_id"),
    ("explorer_moves", "anchor_game_id"),
];

/// The explorer counters of a sharded layout: rows of counts added, not
/// one row per key updated in place (`ON CONFLICT DO UPDATE` does not
/// cross a foreign table), each anchored on a game of the batch that
/// counted it and stored on that game's shard, so that counts commit with
/// the games they count even when a commit reaches one shard only. Readers
/// sum a key's rows, as they sum categories anyway.
const EXPLORER_DELTAS_DDL: &str = "
ALTER TABLE explorer_moves DROP CONSTRAINT IF EXISTS explorer_moves_pkey;
ALTER TABLE explorer_moves ADD COLUMN IF NOT EXISTS anchor_game_id bigint NOT NULL;
COMMENT ON COLUMN explorer_moves.anchor_game_id IS 'Sharded layout: a game the row counts, whose shard holds the row (a key may have several rows: sum them).';
CREATE INDEX IF NOT EXISTS explorer_moves_position_idx ON explorer_moves (position_id)";

/// The views over partitioned tables (migrations 0004, 0009 and 0019),
/// which the rebuild of their tables drops and recreates, with their
/// comments, in dependency order. `tests/schema.rs` checks that no other
/// view exists.
pub const VIEWS: [&str; 4] = [
    "explorer_games",
    "explorer_game_moves",
    "games_readable",
    "explorer_moves_readable",
];

/// The re-import key of a sharded layout: one row per game identity (a
/// Lichess id, or the content digest of any other game), claimed before
/// the game is written, with the id the game gets and the input position
/// that claimed it, so that the run that claimed it, or its rerun, writes
/// that game and nobody else does.
const GAME_KEYS_DDL: &str = "
CREATE TABLE IF NOT EXISTS game_keys (
    external_id    text    NOT NULL,
    lichess        boolean NOT NULL,
    game_id        bigint  NOT NULL,
    import_file_id bigint,
    game_number    bigint,
    PRIMARY KEY (external_id, lichess)
);
COMMENT ON TABLE game_keys IS 'Sharded layout: one row per game identity, claimed before the game is written (games cannot keep (source, external_id) unique across shards).';
COMMENT ON COLUMN game_keys.external_id IS 'games.external_id.';
COMMENT ON COLUMN game_keys.lichess IS 'Whether games.source is lichess.';
COMMENT ON COLUMN game_keys.game_id IS 'The games.id the game gets.';
COMMENT ON COLUMN game_keys.import_file_id IS 'import_files.id of the input that claimed it.';
COMMENT ON COLUMN game_keys.game_number IS 'Its number in that input.'";

/// What marks a database as a shard, and whose.
const SHARD_MARK_DDL: &str = "
CREATE TABLE IF NOT EXISTS pgnload_shard_of (
    singleton   boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    coordinator text    NOT NULL,
    shard       integer NOT NULL,
    shards      integer NOT NULL
);
COMMENT ON TABLE pgnload_shard_of IS 'This database is a shard of a sharded layout: one row saying whose.';
COMMENT ON COLUMN pgnload_shard_of.singleton IS 'Always true: keeps the table at one row.';
COMMENT ON COLUMN pgnload_shard_of.coordinator IS 'The coordinator: its system identifier / database name.';
COMMENT ON COLUMN pgnload_shard_of.shard IS 'This shard''s number, 0-based.';
COMMENT ON COLUMN pgnload_shard_of.shards IS 'How many shards the layout has.'";

impl Shards {
    /// The number of shards.
    pub fn count(self) -> u32 {
        self.count
    }

    /// An SQL expression giving the shard (0-based) that a row of
    /// `table` whose partition key is `key` lives on. Statements that
    /// take row locks order their rows by it, then by the key, so that
    /// concurrent importers lock in one global order: PostgreSQL detects
    /// no deadlock that spans two servers.
    pub fn shard_of(self, table: &str, key: &str) -> String {
        let mut sql = String::from("CASE");
        for shard in 0..self.count {
            let _ = write!(
                sql,
                " WHEN satisfies_hash_partition('{table}'::regclass, {}, {shard}, {key}) THEN {shard}",
                self.count
            );
        }
        sql.push_str(" END");
        sql
    }
}

/// The layout of a migrated database: `None` for a single node.
pub async fn layout(client: &impl GenericClient) -> Result<Option<Shards>, Error> {
    let count: i64 = match client
        .query_one("SELECT count(*) FROM pgnload_shards", &[])
        .await
    {
        Ok(row) => row.get(0),
        // A database migrated before 0011 is a single node.
        Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::UNDEFINED_TABLE) => {
            return Ok(None);
        }
        Err(e) => return Err(db_err("reading pgnload_shards")(e)),
    };
    if count == 0 {
        return Ok(None);
    }
    let count = u32::try_from(count)
        .map_err(|_| Error::inconsistent(format!("pgnload_shards holds {count} rows")))?;
    Ok(Some(Shards { count }))
}

/// A configuration error when the database is sharded: `what` is a
/// single-node feature, and `instead` says what to do.
pub async fn refuse_if_sharded(
    client: &impl GenericClient,
    what: &str,
    instead: &str,
) -> Result<(), Error> {
    match layout(client).await? {
        None => Ok(()),
        Some(shards) => Err(Error::Config(format!(
            "{what} is not available on a sharded layout ({} shards): {instead}",
            shards.count
        ))),
    }
}

/// Where a shard server is, from its connection string: what the
/// coordinator's `CREATE SERVER` and user mapping need.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ShardAddress {
    /// Host name, address, or socket directory.
    host: String,
    port: u16,
    dbname: String,
    user: Option<String>,
    password: Option<String>,
    /// TLS parameters as the string gives them (`sslmode`, `sslrootcert`,
    /// `sslcert`, `sslkey`): the coordinator's `postgres_fdw` server gets
    /// them, so that it reaches the shard as pgnload does (file paths are
    /// then the coordinator's).
    tls: Vec<(String, String)>,
    /// The connection string with any password hidden, for messages.
    shown: String,
}

impl ShardAddress {
    fn parse(url: &str) -> Result<ShardAddress, Error> {
        let shown = redact_url(url);
        let params = parse_conninfo(url).map_err(|why| {
            Error::Config(format!(
                "shard {shown}: not a valid connection string: {why}"
            ))
        })?;
        let host = match param(&params, "host").map(|h| h.split(',').collect::<Vec<_>>()) {
            None => {
                return Err(Error::Config(format!(
                    "shard {shown}: name its host (the coordinator connects to it, not pgnload)"
                )));
            }
            Some(hosts) if hosts.len() > 1 => {
                return Err(Error::Config(format!(
                    "shard {shown}: one host per shard (a shard is one server)"
                )));
            }
            Some(hosts) => hosts.concat(),
        };
        let port = match param(&params, "port") {
            None | Some("") => 5432,
            Some(port) => port.parse().map_err(|_| {
                Error::Config(format!("shard {shown}: one port per shard, a number"))
            })?,
        };
        Ok(ShardAddress {
            host,
            port,
            dbname: param(&params, "dbname").unwrap_or("postgres").to_owned(),
            user: param(&params, "user").map(str::to_owned),
            password: param(&params, "password").map(str::to_owned),
            tls: params
                .iter()
                .filter(|(key, _)| TLS_OPTIONS.contains(&key.as_str()))
                .cloned()
                .collect(),
            shown,
        })
    }
}

/// The libpq TLS parameters a shard's `postgres_fdw` server is given.
const TLS_OPTIONS: [&str; 4] = ["sslmode", "sslrootcert", "sslcert", "sslkey"];

/// What [`shard_out`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShardOutcome {
    /// The layout was built over these shards (their redacted URLs).
    Built(Vec<String>),
    /// The database already had this layout: nothing changed.
    Already(u32),
}

/// Turns the freshly migrated, empty database of `coordinator` into the
/// coordinator of a sharded layout over `urls` (in order: shard 0 first):
/// each shard is migrated and prepared, then the coordinator's
/// partitioned tables are rebuilt as partitioned tables whose partitions
/// are foreign tables on the shards, in one transaction.
///
/// Refused when the coordinator holds games or positions (rows cannot be
/// moved by this command: export, then import into the new layout), when
/// a shard holds any, or when the coordinator is already sharded
/// differently. Rerunning it with the same shards changes nothing.
pub async fn shard_out(
    coordinator: &mut Client,
    coordinator_name: &str,
    urls: &[String],
) -> Result<ShardOutcome, Error> {
    if urls.len() < 2 {
        return Err(Error::Config(format!(
            "--shards names {} server(s); a sharded layout needs at least two",
            urls.len()
        )));
    }
    let addresses = urls
        .iter()
        .map(|url| ShardAddress::parse(url))
        .collect::<Result<Vec<_>, _>>()?;
    let count =
        u32::try_from(addresses.len()).map_err(|_| Error::Config("too many shards".to_owned()))?;
    if let Some(existing) = existing_layout(coordinator, &addresses).await? {
        return Ok(ShardOutcome::Already(existing));
    }
    refuse_unless_empty(
        coordinator,
        coordinator_name,
        &["positions", "games", "moves"],
    )
    .await?;
    let explorer: bool = coordinator
        .query_one("SELECT enabled FROM explorer_state", &[])
        .await
        .map_err(db_err("reading explorer_state"))?
        .get(0);
    if explorer {
        return Err(Error::Config(
            "the explorer counters are enabled: run `pgnload db explorer disable` first, \
             then enable them again on the sharded layout"
                .to_owned(),
        ));
    }
    let identity: String = coordinator
        .query_one(
            "SELECT system_identifier::text || '/' || current_database() FROM pg_control_system()",
            &[],
        )
        .await
        .map_err(db_err("reading the coordinator's identity"))?
        .get(0);
    let mut schemas = Vec::with_capacity(addresses.len());
    for (shard, (url, address)) in (0..count).zip(urls.iter().zip(&addresses)) {
        schemas.push(prepare_shard(url, address, &identity, shard, count).await?);
    }
    build_coordinator(coordinator, &addresses, &schemas).await?;
    Ok(ShardOutcome::Built(
        addresses.iter().map(|a| a.shown.clone()).collect(),
    ))
}

/// The coordinator's shard count if it is sharded over exactly
/// `addresses` (same hosts, ports and databases, in order); `None` if it
/// is a single node; an error if it is sharded otherwise.
async fn existing_layout(
    coordinator: &Client,
    addresses: &[ShardAddress],
) -> Result<Option<u32>, Error> {
    let rows = coordinator
        .query(
            "SELECT host, port, dbname FROM pgnload_shards ORDER BY shard",
            &[],
        )
        .await
        .map_err(db_err("reading pgnload_shards"))?;
    if rows.is_empty() {
        return Ok(None);
    }
    let recorded: Vec<(String, i32, String)> = rows
        .iter()
        .map(|row| (row.get(0), row.get(1), row.get(2)))
        .collect();
    let asked: Vec<(String, i32, String)> = addresses
        .iter()
        .map(|a| (a.host.clone(), i32::from(a.port), a.dbname.clone()))
        .collect();
    if recorded == asked {
        return Ok(Some(u32::try_from(recorded.len()).map_err(|_| {
            Error::inconsistent("pgnload_shards holds over 2^32 rows")
        })?));
    }
    let listed: Vec<String> = recorded
        .iter()
        .map(|(host, port, dbname)| format!("{host}:{port}/{dbname}"))
        .collect();
    Err(Error::Config(format!(
        "this database is already sharded over {} ({}); changing the shards of a layout \
         (resharding) is not supported: export, then import into a new layout",
        listed.len(),
        listed.join(", ")
    )))
}

/// An error unless each of `tables` is empty in the database `name`.
async fn refuse_unless_empty(client: &Client, name: &str, tables: &[&str]) -> Result<(), Error> {
    for table in tables {
        let any: bool = client
            .query_one(&format!("SELECT EXISTS (SELECT 1 FROM {table})"), &[])
            .await
            .map_err(db_err(format!("looking into {table}")))?
            .get(0);
        if any {
            return Err(Error::Config(format!(
                "{name}: {table} is not empty; a sharded layout is built on empty databases \
                 (export the games, build the layout, import them)"
            )));
        }
    }
    Ok(())
}

/// Migrates shard `shard` of `count` like a single node, then makes it a
/// shard: `games` loses its foreign keys to the tables that stay on the
/// coordinator, `game_keys` is created, and the shard is marked as
/// `coordinator`'s (a database already marked for another coordinator or
/// another position is refused). Returns the schema its tables are in.
async fn prepare_shard(
    url: &str,
    address: &ShardAddress,
    coordinator: &str,
    shard: u32,
    count: u32,
) -> Result<String, Error> {
    let name = format!("shard {shard} ({})", address.shown);
    let server = Server::new(Some(url.to_owned()), Environment::process());
    let mut database = db::connect(&Target::Server(Arc::new(server))).await?;
    let client = &mut database.client;
    db::migrate(client).await?;
    if layout(&*client).await?.is_some() {
        return Err(Error::Config(format!(
            "{name} is itself the coordinator of a sharded layout"
        )));
    }
    refuse_unless_empty(client, &name, &["positions", "games", "moves"]).await?;
    let tx = client
        .transaction()
        .await
        .map_err(db_err(format!("preparing {name}")))?;
    tx.batch_execute(&format!(
        "{GAME_KEYS_DDL};
         {SHARD_MARK_DDL};
         {EXPLORER_DELTAS_DDL};
         DO $$
         DECLARE constraint_name name;
         BEGIN
             FOR constraint_name IN
                 SELECT conname FROM pg_constraint
                 WHERE conrelid = 'games'::regclass AND contype = 'f'
             LOOP
                 EXECUTE format('ALTER TABLE games DROP CONSTRAINT %I', constraint_name);
             END LOOP;
         END
         $$;"
    ))
    .await
    .map_err(db_err(format!("preparing {name}")))?;
    // `shard_out` counted the shards into a u32 from a list of addresses.
    let (Ok(shard_i32), Ok(count_i32)) = (i32::try_from(shard), i32::try_from(count)) else {
        return Err(Error::Config(format!("{name}: too many shards")));
    };
    let marked = tx
        .query_opt(
            "INSERT INTO pgnload_shard_of (coordinator, shard, shards) VALUES ($1, $2, $3)
             ON CONFLICT (singleton) DO UPDATE SET singleton = true
             WHERE pgnload_shard_of.coordinator = $1 AND pgnload_shard_of.shard = $2
               AND pgnload_shard_of.shards = $3
             RETURNING true",
            &[&coordinator, &shard_i32, &count_i32],
        )
        .await
        .map_err(db_err(format!("marking {name}")))?;
    if marked.is_none() {
        return Err(Error::Config(format!(
            "{name} is already a shard of another layout (pgnload_shard_of)"
        )));
    }
    let schema: String = tx
        .query_one("SELECT current_schema()", &[])
        .await
        .map_err(db_err(format!("reading {name}'s schema")))?
        .get(0);
    tx.commit()
        .await
        .map_err(db_err(format!("committing {name}")))?;
    database.close()?;
    Ok(schema)
}

/// Creates the coordinator's user mapping for `server`, with the shard's
/// user and password, so that no server log, statistics view or error
/// message ever holds the password: a statement's text is what the server
/// logs (`log_statement`, and the `STATEMENT:` line of an error) and
/// `pg_stat_statements` keeps verbatim for DDL, so the password travels only
/// as a bind parameter of a temporary function that builds the DDL inside
/// the server. Its errors are raised again without their context (which
/// would quote the built statement), and a superuser's session also turns
/// statement and parameter logging off for the call.
async fn create_user_mapping(
    tx: &tokio_postgres::Transaction<'_>,
    server: &str,
    address: &ShardAddress,
) -> Result<(), Error> {
    const FUNCTION: &str = "
        CREATE OR REPLACE FUNCTION pg_temp.pgnload_user_mapping(server text, usr text, pw text)
        RETURNS void LANGUAGE plpgsql AS $f$
        BEGIN
            EXECUTE format('CREATE USER MAPPING FOR CURRENT_USER SERVER %I', server)
                || coalesce(' OPTIONS (' || nullif(concat_ws(', ',
                       'user ' || quote_literal(usr),
                       'password ' || quote_literal(pw)), '') || ')', '');
        EXCEPTION WHEN OTHERS THEN
            RAISE EXCEPTION USING ERRCODE = SQLSTATE, MESSAGE = SQLERRM;
        END
        $f$";
    // The settings are superuser-only; `TO DEFAULT` gives back the
    // session's own values for the rest of the transaction.
    const QUIET: &str = "
        DO $q$ BEGIN
            IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
                SET LOCAL log_statement = 'none';
                SET LOCAL log_min_duration_statement = -1;
                SET LOCAL log_min_error_statement = 'panic';
                SET LOCAL log_parameter_max_length = 0;
                SET LOCAL log_parameter_max_length_on_error = 0;
            END IF;
        END $q$";
    const LOUD_AGAIN: &str = "
        DO $q$ BEGIN
            IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
                SET LOCAL log_statement TO DEFAULT;
                SET LOCAL log_min_duration_statement TO DEFAULT;
                SET LOCAL log_min_error_statement TO DEFAULT;
                SET LOCAL log_parameter_max_length TO DEFAULT;
                SET LOCAL log_parameter_max_length_on_error TO DEFAULT;
            END IF;
        END $q$";
    let context = || format!("creating the user mapping of {server} ({})", address.shown);
    tx.batch_execute(QUIET).await.map_err(db_err(context()))?;
    tx.batch_execute(FUNCTION)
        .await
        .map_err(db_err(context()))?;
    tx.execute(
        "SELECT pg_temp.pgnload_user_mapping($1, $2, $3)",
        &[&server, &address.user, &address.password],
    )
    .await
    .map_err(db_err(context()))?;
    tx.batch_execute(LOUD_AGAIN)
        .await
        .map_err(db_err(context()))?;
    Ok(())
}

/// Rebuilds the coordinator's partitioned tables over the shards, in one
/// transaction: the foreign servers and user mappings, each table as a
/// hash-partitioned table of the same columns, defaults and checks
/// (ids from coordinator sequences), one foreign partition per shard, the
/// views over them, and `pgnload_shards`.
async fn build_coordinator(
    coordinator: &mut Client,
    addresses: &[ShardAddress],
    schemas: &[String],
) -> Result<(), Error> {
    let count = addresses.len();
    let tx = coordinator
        .transaction()
        .await
        .map_err(db_err("starting the coordinator's rebuild"))?;
    tx.batch_execute("CREATE EXTENSION IF NOT EXISTS postgres_fdw")
        .await
        .map_err(db_err("creating extension postgres_fdw"))?;
    let views = read_views(&tx).await?;
    create_servers(&tx, addresses).await?;
    tx.batch_execute(&format!("{GAME_KEYS_DDL}; {EXPLORER_DELTAS_DDL}"))
        .await
        .map_err(db_err("creating game_keys"))?;
    for (table, key) in PARTITIONED {
        let comments = read_comments(&tx, table).await?;
        tx.batch_execute(&partition_ddl(table, key, schemas, count))
            .await
            .map_err(db_err(format!("partitioning {table} over the shards")))?;
        tx.batch_execute(&comments)
            .await
            .map_err(db_err(format!("commenting {table} again")))?;
    }
    for (view, definition, comments) in views {
        tx.batch_execute(&format!("CREATE VIEW {view} AS {definition}; {comments}"))
            .await
            .map_err(db_err(format!("recreating view {view}")))?;
    }
    record_shards(&tx, addresses).await?;
    tx.commit()
        .await
        .map_err(db_err("committing the sharded layout"))
}

/// The definitions of the views over the tables about to be replaced,
/// and their comments, to recreate them over the partitioned ones.
async fn read_views(
    tx: &tokio_postgres::Transaction<'_>,
) -> Result<Vec<(&'static str, String, String)>, Error> {
    let mut views = Vec::with_capacity(VIEWS.len());
    for view in VIEWS {
        let definition: String = tx
            .query_one("SELECT pg_get_viewdef($1::text::regclass)", &[&view])
            .await
            .map_err(db_err(format!("reading view {view}")))?
            .get(0);
        views.push((view, definition, read_comments(tx, view).await?));
    }
    Ok(views)
}

/// The `COMMENT` statements that give the table or view `relation`, and
/// its columns, their comments again after it is rebuilt (`CREATE TABLE
/// ... LIKE` and `CREATE VIEW` copy none): every object of the schema
/// explains itself (`sql/0019_schema_comments.sql`), on a sharded layout too.
async fn read_comments(
    tx: &tokio_postgres::Transaction<'_>,
    relation: &str,
) -> Result<String, Error> {
    Ok(tx
        .query_one(
            "SELECT coalesce(string_agg(statement, '; '), '')
             FROM (SELECT format('COMMENT ON %s %I IS %L',
                                 CASE c.relkind WHEN 'v' THEN 'VIEW' ELSE 'TABLE' END,
                                 c.relname, d.description) AS statement
                   FROM pg_class c JOIN pg_description d
                     ON d.objoid = c.oid AND d.classoid = 'pg_class'::regclass AND d.objsubid = 0
                   WHERE c.oid = $1::text::regclass
                   UNION ALL
                   SELECT format('COMMENT ON COLUMN %I.%I IS %L', c.relname, a.attname, d.description)
                   FROM pg_class c
                   JOIN pg_attribute a ON a.attrelid = c.oid
                   JOIN pg_description d ON d.objoid = c.oid
                     AND d.classoid = 'pg_class'::regclass AND d.objsubid = a.attnum
                   WHERE c.oid = $1::text::regclass AND a.attnum > 0) s",
            &[&relation],
        )
        .await
        .map_err(db_err(format!("reading the comments of {relation}")))?
        .get(0))
}

/// One `postgres_fdw` server per shard, with its user mapping.
async fn create_servers(
    tx: &tokio_postgres::Transaction<'_>,
    addresses: &[ShardAddress],
) -> Result<(), Error> {
    for (shard, address) in addresses.iter().enumerate() {
        let server = server_name(shard);
        let port = address.port.to_string();
        // format() quotes every value: a host is data here. The password
        // is not in this text: see create_user_mapping.
        let ddl: String = tx
            .query_one(
                "SELECT format('CREATE SERVER %I FOREIGN DATA WRAPPER postgres_fdw
                         OPTIONS (host %L, port %L, dbname %L, batch_size ''1000'',
                                  fetch_size ''10000'', async_capable ''true'')', $1::text, $2::text, $3::text, $4::text)",
                &[&server, &address.host, &port, &address.dbname],
            )
            .await
            .map_err(db_err("writing the servers' DDL"))?
            .get(0);
        tx.batch_execute(&ddl).await.map_err(db_err(format!(
            "creating server {server} ({})",
            address.shown
        )))?;
        for (option, value) in &address.tls {
            let ddl: String = tx
                .query_one(
                    "SELECT format('ALTER SERVER %I OPTIONS (ADD %I %L)', $1::text, $2::text, $3::text)",
                    &[&server, option, value],
                )
                .await
                .map_err(db_err("writing the servers' DDL"))?
                .get(0);
            tx.batch_execute(&ddl).await.map_err(db_err(format!(
                "setting {option} of server {server} ({})",
                address.shown
            )))?;
        }
        create_user_mapping(tx, &server, address).await?;
    }
    Ok(())
}

/// `table` replaced by a table hash-partitioned on `key` over `count`
/// shards, one foreign partition per shard (in its schema of `schemas`),
/// its ids from a coordinator sequence.
fn partition_ddl(table: &str, key: &str, schemas: &[String], count: usize) -> String {
    let mut ddl = format!(
        "CREATE TABLE pgnload_sharded_{table} (LIKE {table} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
             PARTITION BY HASH ({key});
         DROP TABLE {table} CASCADE;
         ALTER TABLE pgnload_sharded_{table} RENAME TO {table};"
    );
    if matches!(table, "positions" | "games") {
        let _ = write!(
            ddl,
            "CREATE SEQUENCE {table}_id_seq AS bigint OWNED BY {table}.id;
             ALTER TABLE {table} ALTER COLUMN id SET DEFAULT nextval('{table}_id_seq');"
        );
    }
    for (shard, schema) in schemas.iter().enumerate() {
        let server = server_name(shard);
        let _ = write!(
            ddl,
            "CREATE FOREIGN TABLE {table}_shard_{shard} PARTITION OF {table}
             FOR VALUES WITH (MODULUS {count}, REMAINDER {shard})
             SERVER {server} OPTIONS (schema_name '{}', table_name '{table}');
             COMMENT ON FOREIGN TABLE {table}_shard_{shard} IS
                 'Partition of {table} on a shard server (postgres_fdw): query {table}.';",
            schema.replace('\'', "''")
        );
    }
    ddl
}

/// `pgnload_shards`: which server is which shard.
async fn record_shards(
    tx: &tokio_postgres::Transaction<'_>,
    addresses: &[ShardAddress],
) -> Result<(), Error> {
    for (shard, address) in addresses.iter().enumerate() {
        let shard_i32 = i32::try_from(shard).expect("shard counts were checked to fit a u32");
        tx.execute(
            "INSERT INTO pgnload_shards (shard, server, host, port, dbname) VALUES ($1, $2, $3, $4, $5)",
            &[
                &shard_i32,
                &server_name(shard),
                &address.host,
                &i32::from(address.port),
                &address.dbname,
            ],
        )
        .await
        .map_err(db_err("recording the shards"))?;
    }
    Ok(())
}

/// The `postgres_fdw` server of shard `shard`.
fn server_name(shard: usize) -> String {
    format!("pgnload_shard_{shard}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shard_is_told_by_its_connection_string_without_showing_the_password() {
        let a = ShardAddress::parse("postgresql://alice:s3cret@10.0.0.7:6432/chess").unwrap();
        assert_eq!(
            (a.host.as_str(), a.port, a.dbname.as_str()),
            ("10.0.0.7", 6432, "chess")
        );
        assert_eq!(a.user.as_deref(), Some("alice"));
        assert_eq!(a.password.as_deref(), Some("s3cret"));
        assert!(!a.shown.contains("s3cret"), "{}", a.shown);
        assert!(a.tls.is_empty());
        let b = ShardAddress::parse("host=/tmp/s port=5433 dbname=x").unwrap();
        assert_eq!((b.host.as_str(), b.port), ("/tmp/s", 5433));
        let tls = ShardAddress::parse("host=h sslmode=verify-full sslrootcert=/ca.crt").unwrap();
        assert_eq!(
            tls.tls,
            [
                ("sslmode".to_owned(), "verify-full".to_owned()),
                ("sslrootcert".to_owned(), "/ca.crt".to_owned())
            ]
        );
        let none = ShardAddress::parse("dbname=x").unwrap_err().to_string();
        assert!(none.contains("name its host"), "{none}");
        let two = ShardAddress::parse("postgresql://h1,h2/x")
            .unwrap_err()
            .to_string();
        assert!(two.contains("one host per shard"), "{two}");
    }

    #[test]
    fn the_shard_expression_names_every_shard_once() {
        let sql = Shards { count: 3 }.shard_of("games", "s.id");
        for shard in 0..3 {
            assert!(
                sql.contains(&format!("3, {shard}, s.id) THEN {shard}")),
                "{sql}"
            );
        }
        assert!(sql.starts_with("CASE") && sql.ends_with(" END"), "{sql}");
    }
}
