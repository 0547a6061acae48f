//! TLS as libpq does it, through OpenSSL (`postgres-openssl`): the six
//! `sslmode`s, the root certificate that decides whether the server's
//! certificate is verified, and the client certificate.
//!
//! libpq's rules, kept here: `disable` never uses TLS; `allow` tries
//! without, then with; `prefer` tries with, then without; `require` insists
//! on TLS. With a root certificate (`sslrootcert`, else
//! `~/.postgresql/root.crt` when it exists) every mode that uses TLS
//! verifies the server's chain against it, as `verify-ca` does; without
//! one `prefer` and `require` verify nothing. `verify-ca` and
//! `verify-full` need the root certificate; `verify-full` also checks that
//! the certificate names the host connected to. `sslrootcert=system` means
//! the system's trusted roots.

use std::path::{Path, PathBuf};

use openssl::{
    ssl::{SslConnector, SslFiletype, SslMethod, SslVerifyMode},
    x509::{X509, store::X509StoreBuilder},
};
use postgres_openssl::MakeTlsConnector;

/// libpq's `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    /// No TLS.
    Disable,
    /// Without TLS first; with TLS if the server refuses that.
    Allow,
    /// With TLS if the server offers it (libpq's default).
    Prefer,
    /// TLS or nothing; the chain verified only when a root certificate is
    /// there.
    Require,
    /// TLS, the chain verified against the root certificate.
    VerifyCa,
    /// As `VerifyCa`, and the certificate names the host.
    VerifyFull,
}

impl SslMode {
    /// The mode named `name`, as libpq spells it.
    pub fn parse(name: &str) -> Option<SslMode> {
        Some(match name {
            "disable" => SslMode::Disable,
            "allow" => SslMode::Allow,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            _ => return None,
        })
    }

    /// Its name, as libpq spells it.
    pub fn name(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Allow => "allow",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    /// The driver's mode for the first attempt (`allow`'s second attempt
    /// is [`tokio_postgres::config::SslMode::Require`]).
    pub(crate) fn first_attempt(self) -> tokio_postgres::config::SslMode {
        match self {
            SslMode::Disable | SslMode::Allow => tokio_postgres::config::SslMode::Disable,
            SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => {
                tokio_postgres::config::SslMode::Require
            }
        }
    }
}

/// The root certificates the server's chain is verified against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RootCert {
    /// The certificates in this PEM file, and no others.
    File(PathBuf),
    /// The system's trusted roots (`sslrootcert=system`).
    System,
}

/// Everything TLS needs, resolved (defaults applied, files found).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    /// The mode.
    pub mode: SslMode,
    /// What the chain is verified against; `None`: not verified.
    pub root: Option<RootCert>,
    /// The client certificate and its key (PEM), when there is one.
    pub client: Option<(PathBuf, PathBuf)>,
}

impl TlsSettings {
    /// A short account for messages: `sslmode=verify-full, root
    /// certificate /x/ca.crt`.
    pub fn describe(&self) -> String {
        let root = match &self.root {
            Some(RootCert::File(path)) => format!("root certificate {}", path.display()),
            Some(RootCert::System) => "the system's root certificates".to_owned(),
            None => "server certificate not verified".to_owned(),
        };
        format!("sslmode={}, {root}", self.mode.name())
    }

    /// The connector: OpenSSL with these roots, the client certificate,
    /// and host-name checking only for `verify-full`.
    pub(crate) fn connector(&self) -> Result<MakeTlsConnector, String> {
        let mut builder =
            SslConnector::builder(SslMethod::tls_client()).map_err(|e| format!("OpenSSL: {e}"))?;
        match &self.root {
            None => builder.set_verify(SslVerifyMode::NONE),
            Some(RootCert::System) => {}
            Some(RootCert::File(path)) => {
                builder.set_cert_store(store_of(path)?);
            }
        }
        if let Some((cert, key)) = &self.client {
            builder
                .set_certificate_chain_file(cert)
                .map_err(|e| format!("client certificate \"{}\": {e}", cert.display()))?;
            builder
                .set_private_key_file(key, SslFiletype::PEM)
                .map_err(|e| format!("client key \"{}\": {e}", key.display()))?;
            builder.check_private_key().map_err(|e| {
                format!(
                    "client key \"{}\" does not match certificate \"{}\": {e}",
                    key.display(),
                    cert.display()
                )
            })?;
        }
        let mut connector = MakeTlsConnector::new(builder.build());
        let check_host = self.mode == SslMode::VerifyFull;
        connector.set_callback(move |config, _domain| {
            config.set_verify_hostname(check_host);
            Ok(())
        });
        Ok(connector)
    }
}

/// A certificate store holding exactly the certificates of a PEM file.
fn store_of(path: &Path) -> Result<openssl::x509::store::X509Store, String> {
    let pem = std::fs::read(path)
        .map_err(|e| format!("root certificate file \"{}\": {e}", path.display()))?;
    let certs = X509::stack_from_pem(&pem)
        .map_err(|e| format!("root certificate file \"{}\": {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "root certificate file \"{}\" holds no certificate",
            path.display()
        ));
    }
    let mut store = X509StoreBuilder::new().map_err(|e| format!("OpenSSL: {e}"))?;
    for cert in certs {
        store
            .add_cert(cert)
            .map_err(|e| format!("root certificate file \"{}\": {e}", path.display()))?;
    }
    Ok(store.build())
}
