//! Where a server is and how to reach it, resolved once as libpq resolves
//! it, so that pgnload connects like psql and every other libpq tool:
//!
//! 1. the connection string (`--database-url`, `DATABASE_URL` or the
//!    config file's `database_url`), URL or `key=value`;
//! 2. the service it names (`service=`, else `PGSERVICE`) in the user's
//!    service file (`PGSERVICEFILE`, else `~/.pg_service.conf`), else in
//!    `PGSYSCONFDIR/pg_service.conf` (default `/etc/postgresql-common`, as
//!    Debian's libpq): its values fill what the string left out;
//! 3. the `PG*` variables (`PGHOST`, `PGPORT`, `PGSSLMODE`, ...) fill what
//!    is still missing;
//! 4. defaults: the Unix socket in `/var/run/postgresql` (else `/tmp`),
//!    port 5432, the login name as user and database, `sslmode=prefer`;
//! 5. without a password so far, the password file (`passfile=`,
//!    `PGPASSFILE`, else `~/.pgpass`), ignored with a warning unless only
//!    its owner may read it.
//!
//! The service file comes before the environment because libpq does it in
//! that order (a service names a whole server; a stray `PGPORT` must not
//! move it). The result, [`ConnectionSettings`], is used for pgnload's own
//! connections, for `pg_dump` / `pg_restore` (as a connection string
//! without the password, which goes through a memory file) and for shards.
//!
//! No message here holds a password or quotes a connection string except
//! through [`crate::db::redact_url`]; no file line is ever quoted.

mod files;
mod parse;
pub mod tls;

use std::{
    collections::HashMap,
    ffi::OsStr,
    fmt::Write as _,
    path::{Path, PathBuf},
};

use files::{Passfile, PassfileKey, passfile_password, service_params};
use parse::{Params, get, set, shown_key};
pub(crate) use parse::{get as param, parse as parse_conninfo};
use tls::{RootCert, SslMode, TlsSettings};

/// The `PG*` variables that name a server: any of them set (not empty)
/// means "connect to the server they describe", not to pgnload's embedded
/// cluster. The others (`PGPASSWORD`, `PGSSLMODE`, `PGAPPNAME`, ...) only
/// say how to reach a server named otherwise.
pub const SERVER_VARIABLES: [&str; 6] = [
    "PGHOST",
    "PGHOSTADDR",
    "PGPORT",
    "PGDATABASE",
    "PGUSER",
    "PGSERVICE",
];

/// Who handles each libpq parameter pgnload accepts.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Handler {
    /// Passed to the driver (tokio-postgres) and to the child tools.
    Driver,
    /// TLS: resolved here, passed to the tools resolved.
    Tls,
    /// Used while resolving; never passed on as it is.
    Resolver,
}

/// Every parameter accepted, with its environment variable.
const PARAMETERS: &[(&str, Option<&str>, Handler)] = &[
    ("host", Some("PGHOST"), Handler::Driver),
    ("hostaddr", Some("PGHOSTADDR"), Handler::Driver),
    ("port", Some("PGPORT"), Handler::Driver),
    ("dbname", Some("PGDATABASE"), Handler::Driver),
    ("user", Some("PGUSER"), Handler::Driver),
    ("options", Some("PGOPTIONS"), Handler::Driver),
    ("application_name", Some("PGAPPNAME"), Handler::Driver),
    (
        "connect_timeout",
        Some("PGCONNECT_TIMEOUT"),
        Handler::Driver,
    ),
    (
        "target_session_attrs",
        Some("PGTARGETSESSIONATTRS"),
        Handler::Driver,
    ),
    ("channel_binding", Some("PGCHANNELBINDING"), Handler::Driver),
    (
        "load_balance_hosts",
        Some("PGLOADBALANCEHOSTS"),
        Handler::Driver,
    ),
    ("sslnegotiation", Some("PGSSLNEGOTIATION"), Handler::Driver),
    ("keepalives", None, Handler::Driver),
    ("keepalives_idle", None, Handler::Driver),
    ("keepalives_interval", None, Handler::Driver),
    ("tcp_user_timeout", None, Handler::Driver),
    ("sslmode", Some("PGSSLMODE"), Handler::Tls),
    ("sslrootcert", Some("PGSSLROOTCERT"), Handler::Tls),
    ("sslcert", Some("PGSSLCERT"), Handler::Tls),
    ("sslkey", Some("PGSSLKEY"), Handler::Tls),
    ("password", Some("PGPASSWORD"), Handler::Resolver),
    ("passfile", Some("PGPASSFILE"), Handler::Resolver),
    ("service", Some("PGSERVICE"), Handler::Resolver),
    ("fallback_application_name", None, Handler::Resolver),
];

/// The handler of `key`, or an error naming it (if it may be named).
fn handler(key: &str) -> Result<Handler, String> {
    PARAMETERS
        .iter()
        .find(|(name, _, _)| *name == key)
        .map(|(_, _, handler)| *handler)
        .ok_or_else(|| format!("unknown or unsupported parameter {}", shown_key(key)))
}

/// What libpq reads from the process: its `PG*` variables and the home
/// directory (for `~/.pgpass`, `~/.pg_service.conf`, `~/.postgresql/`).
/// A value, so that tests can give one without touching the process's.
#[derive(Debug, Clone, Default)]
pub struct Environment {
    vars: HashMap<String, String>,
    home: Option<PathBuf>,
}

impl Environment {
    /// This process's: its non-empty `PG*` variables, and `HOME` (else
    /// the account's home directory), as libpq finds them.
    pub fn process() -> Environment {
        let vars = std::env::vars_os()
            .filter_map(|(key, value)| Some((key.into_string().ok()?, value.into_string().ok()?)))
            .filter(|(key, value)| key.starts_with("PG") && !value.is_empty())
            .collect();
        let home = std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from)
            .or_else(|| {
                nix::unistd::User::from_uid(nix::unistd::geteuid())
                    .ok()
                    .flatten()
                    .map(|user| user.dir)
            });
        Environment { vars, home }
    }

    /// One with these variables and home directory (tests, and callers
    /// that must not depend on the process's).
    pub fn new(vars: HashMap<String, String>, home: Option<PathBuf>) -> Environment {
        Environment { vars, home }
    }

    fn var(&self, name: &str) -> Option<&str> {
        self.vars.get(name).map(String::as_str)
    }

    /// Whether a variable of [`SERVER_VARIABLES`] is set.
    pub fn names_a_server(&self) -> bool {
        SERVER_VARIABLES.iter().any(|name| self.var(name).is_some())
    }

    fn in_home(&self, rest: &str) -> Option<PathBuf> {
        self.home.as_ref().map(|home| home.join(rest))
    }
}

/// Why settings could not be resolved: the connection string itself is
/// malformed, or what it (or the environment, or a file) says cannot be
/// used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResolveError {
    /// The string is not a connection string; the reason quotes none of it.
    Syntax(String),
    /// A value cannot be used (unknown service, missing root certificate...).
    Settings(String),
}

/// A server and how to reach it, resolved (see the module's text).
#[derive(Clone)]
pub struct ConnectionSettings {
    /// The driver's configuration, password included.
    pub(crate) driver: tokio_postgres::Config,
    /// The resolved parameters the child tools need, without the password;
    /// the TLS ones as resolved (mode, files).
    pub(crate) tool_params: Params,
    /// The password, from wherever it came.
    pub(crate) password: Option<String>,
    /// TLS as it will be used (off for Unix sockets, as in libpq).
    pub tls: TlsSettings,
    /// Where the server is, for messages: no password.
    pub description: String,
    /// What libpq would warn about (a password file others may read).
    pub warnings: Vec<String>,
}

/// Never shows the password: only the description.
impl std::fmt::Debug for ConnectionSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectionSettings")
            .field("description", &self.description)
            .field("tls", &self.tls)
            .finish_non_exhaustive()
    }
}

impl ConnectionSettings {
    /// Resolves `conninfo` (none: the environment alone) in `env`.
    pub fn resolve(
        conninfo: Option<&str>,
        env: &Environment,
    ) -> Result<ConnectionSettings, ResolveError> {
        let mut params = match conninfo {
            Some(text) => parse::parse(text).map_err(ResolveError::Syntax)?,
            None => Params::new(),
        };
        for (key, _) in &params {
            handler(key).map_err(ResolveError::Syntax)?;
        }
        let service = get(&params, "service")
            .or_else(|| env.var("PGSERVICE"))
            .map(str::to_owned);
        if let Some(service) = &service {
            let mut files: Vec<PathBuf> = Vec::new();
            files.extend(
                env.var("PGSERVICEFILE")
                    .map(PathBuf::from)
                    .or_else(|| env.in_home(".pg_service.conf")),
            );
            let sysconf = env.var("PGSYSCONFDIR").unwrap_or("/etc/postgresql-common");
            files.push(Path::new(sysconf).join("pg_service.conf"));
            for (key, value) in service_params(service, &files).map_err(ResolveError::Settings)? {
                handler(&key)
                    .map_err(|e| ResolveError::Settings(format!("service \"{service}\": {e}")))?;
                if get(&params, &key).is_none() {
                    set(&mut params, &key, value);
                }
            }
        }
        for (key, var, _) in PARAMETERS {
            if let Some(value) = var.and_then(|var| env.var(var))
                && get(&params, key).is_none()
            {
                set(&mut params, key, value.to_owned());
            }
        }
        apply_defaults(&mut params);
        let mut warnings = Vec::new();
        let password = password(&params, env, &mut warnings);
        let tls = resolve_tls(&params, env).map_err(ResolveError::Settings)?;
        let driver = driver_config(&params, password.as_deref(), tls.mode)?;
        let description = match conninfo {
            Some(text) => crate::db::redact_url(text),
            None => describe(&params, service.as_deref()),
        };
        Ok(ConnectionSettings {
            driver,
            tool_params: tool_params(&params, &tls),
            password,
            tls,
            description,
            warnings,
        })
    }

    /// The child tools' connection string: `key='value'` pairs, every
    /// resolved parameter but the password (and the service and password
    /// file, already applied), TLS as resolved.
    pub(crate) fn tool_conninfo(&self) -> String {
        quote_pairs(
            self.tool_params
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str())),
        )
    }
}

/// libpq's defaults for what nothing gave: a Unix socket, the login name
/// as user (and database), `pgnload` as the application name.
fn apply_defaults(params: &mut Params) {
    if get(params, "host").is_none() && get(params, "hostaddr").is_none() {
        let socket = ["/var/run/postgresql", "/tmp"]
            .into_iter()
            .find(|dir| Path::new(dir).is_dir())
            .unwrap_or("/tmp");
        set(params, "host", socket.to_owned());
    }
    if get(params, "user").is_none()
        && let Ok(Some(user)) = nix::unistd::User::from_uid(nix::unistd::geteuid())
    {
        set(params, "user", user.name);
    }
    if get(params, "application_name").is_none() {
        // Lets operators find (and tests terminate) pgnload's sessions.
        let name = get(params, "fallback_application_name").unwrap_or("pgnload");
        set(params, "application_name", name.to_owned());
    }
}

/// The password given, else the password file's for the first host (a
/// Unix socket matches as `localhost`, as in libpq).
fn password(params: &Params, env: &Environment, warnings: &mut Vec<String>) -> Option<String> {
    if let Some(password) = get(params, "password") {
        return Some(password.to_owned());
    }
    let path = get(params, "passfile")
        .map(PathBuf::from)
        .or_else(|| env.in_home(".pgpass"))?;
    let first = |key: &str| {
        get(params, key)
            .and_then(|v| v.split(',').next())
            .unwrap_or("")
            .to_owned()
    };
    // libpq matches the host name, else the address, and a Unix socket
    // as `localhost`.
    let host = match first("host") {
        h if h.is_empty() => first("hostaddr"),
        h => h,
    };
    let host = match host {
        h if h.is_empty() || h.starts_with('/') || h.starts_with('@') => "localhost".to_owned(),
        h => h,
    };
    let port = match first("port") {
        p if p.is_empty() => "5432".to_owned(),
        p => p,
    };
    let user = first("user");
    let dbname = get(params, "dbname").unwrap_or(&user).to_owned();
    let key = PassfileKey {
        host: &host,
        port: &port,
        dbname: &dbname,
        user: &user,
    };
    match passfile_password(&path, &key) {
        Passfile::Found(password) => Some(password),
        Passfile::NotFound => None,
        Passfile::Ignored(why) => {
            warnings.push(why);
            None
        }
    }
}

/// Whether every host is a Unix socket directory (libpq never uses TLS
/// over those).
fn only_unix_sockets(params: &Params) -> bool {
    get(params, "hostaddr").is_none()
        && get(params, "host").is_some_and(|hosts| {
            hosts
                .split(',')
                .all(|h| h.starts_with('/') || h.starts_with('@'))
        })
}

/// The TLS settings: mode, root certificate, client certificate.
fn resolve_tls(params: &Params, env: &Environment) -> Result<TlsSettings, String> {
    let name = get(params, "sslmode").unwrap_or("prefer");
    let mode = SslMode::parse(name).ok_or_else(|| {
        format!(
            "invalid sslmode \"{name}\": use disable, allow, prefer, require, verify-ca or \
             verify-full"
        )
    })?;
    if mode == SslMode::Disable || only_unix_sockets(params) {
        return Ok(TlsSettings {
            mode: SslMode::Disable,
            root: None,
            client: None,
        });
    }
    let root_path = get(params, "sslrootcert")
        .map(PathBuf::from)
        .or_else(|| env.in_home(".postgresql/root.crt"));
    let root = match root_path {
        Some(path) if path.as_os_str() == OsStr::new("system") => {
            if mode != SslMode::VerifyFull {
                return Err(format!(
                    "weak sslmode \"{name}\" may not be used with sslrootcert=system (use \
                     \"verify-full\")"
                ));
            }
            Some(RootCert::System)
        }
        Some(path) if path.is_file() => Some(RootCert::File(path)),
        other => {
            if matches!(mode, SslMode::VerifyCa | SslMode::VerifyFull) {
                let shown = other.map_or_else(
                    || "~/.postgresql/root.crt".to_owned(),
                    |p| p.display().to_string(),
                );
                return Err(format!(
                    "sslmode={name} verifies the server's certificate, but the root \
                     certificate file \"{shown}\" does not exist: give one with sslrootcert \
                     (or PGSSLROOTCERT), use sslrootcert=system for the system's roots, or \
                     use sslmode=require, which does not verify"
                ));
            }
            None
        }
    };
    let cert = get(params, "sslcert")
        .map(PathBuf::from)
        .or_else(|| env.in_home(".postgresql/postgresql.crt"));
    let key = get(params, "sslkey")
        .map(PathBuf::from)
        .or_else(|| env.in_home(".postgresql/postgresql.key"));
    let client = match (cert.filter(|c| c.is_file()), key) {
        (None, _) => None,
        (Some(cert), Some(key)) if key.is_file() => {
            check_key_access(&key)?;
            Some((cert, key))
        }
        (Some(cert), key) => {
            return Err(format!(
                "client certificate \"{}\" is there, but not its private key file{}",
                cert.display(),
                key.map(|k| format!(" \"{}\"", k.display()))
                    .unwrap_or_default()
            ));
        }
    };
    Ok(TlsSettings { mode, root, client })
}

/// libpq's rule for a client key: readable by its owner only (0600), or,
/// owned by root, by root's group too (0640). `pg_dump` would refuse any
/// other, so pgnload does too, with libpq's reason.
fn check_key_access(key: &Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(key)
        .map_err(|e| format!("private key file \"{}\": {e}", key.display()))?;
    let allowed = if meta.uid() == 0 { 0o037 } else { 0o077 };
    if meta.mode() & allowed != 0 {
        return Err(format!(
            "private key file \"{}\" has group or world access; it must have permissions \
             u=rw (0600) or less if owned by its user, or u=rw,g=r (0640) or less if owned by \
             root",
            key.display()
        ));
    }
    Ok(())
}

/// `key='value'` pairs, quoted and escaped as libpq reads them.
pub(crate) fn quote_pairs<'a>(pairs: impl Iterator<Item = (&'a str, &'a str)>) -> String {
    let mut out = String::new();
    for (key, value) in pairs {
        if !out.is_empty() {
            out.push(' ');
        }
        let _ = write!(
            out,
            "{key}='{}'",
            value.replace('\\', "\\\\").replace('\'', "\\'")
        );
    }
    out
}

/// The driver's configuration: the driver's parameters as a `key=value`
/// string it parses (so that it validates ports, timeouts...; the string
/// holds no password, so its complaints cannot show one), then the
/// password and the first attempt's TLS mode.
fn driver_config(
    params: &Params,
    password: Option<&str>,
    mode: SslMode,
) -> Result<tokio_postgres::Config, ResolveError> {
    let text = quote_pairs(
        params
            .iter()
            .filter(|(key, _)| handler(key) == Ok(Handler::Driver))
            .map(|(k, v)| (k.as_str(), v.as_str())),
    );
    let mut config: tokio_postgres::Config = text.parse().map_err(|e: tokio_postgres::Error| {
        ResolveError::Settings(crate::db::redact_url(&crate::db::driver_message(&e)))
    })?;
    if let Some(password) = password {
        config.password(password);
    }
    config.ssl_mode(mode.first_attempt());
    Ok(config)
}

/// The tools' parameters: the driver's, then TLS as resolved.
fn tool_params(params: &Params, tls: &TlsSettings) -> Params {
    let mut out: Params = params
        .iter()
        .filter(|(key, _)| handler(key) == Ok(Handler::Driver))
        .cloned()
        .collect();
    set(&mut out, "sslmode", tls.mode.name().to_owned());
    match &tls.root {
        Some(RootCert::File(path)) => set(&mut out, "sslrootcert", path.display().to_string()),
        Some(RootCert::System) => set(&mut out, "sslrootcert", "system".to_owned()),
        None => {}
    }
    if let Some((cert, key)) = &tls.client {
        set(&mut out, "sslcert", cert.display().to_string());
        set(&mut out, "sslkey", key.display().to_string());
    }
    out
}

/// A description of a server named by the service and the environment
/// only: `service=chess host=db port=5432 dbname=chess user=alice`.
fn describe(params: &Params, service: Option<&str>) -> String {
    let mut parts = Vec::new();
    if let Some(service) = service {
        parts.push(format!("service={service}"));
    }
    for key in ["host", "hostaddr", "port", "dbname", "user"] {
        if let Some(value) = get(params, key) {
            parts.push(format!("{key}={value}"));
        }
    }
    parts.join(" ")
}

#[cfg(test)]
mod tests;
