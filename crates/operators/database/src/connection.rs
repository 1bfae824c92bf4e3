//! How the operator reaches a PostgreSQL server: the connection URL from the Secret, libpq's
//! `sslmode` on rustls, and the session settings and bounds every connection gets.
//!
//! `sslmode` follows libpq:
//!
//! | `sslmode` | TLS | server certificate |
//! |---|---|---|
//! | `disable` | never | — |
//! | `prefer` (default) | if the server offers it | not verified (verified like `verify-ca` when the Secret has a CA) |
//! | `require` | always | not verified (verified like `verify-ca` when the Secret has a CA) |
//! | `verify-ca` | always | signed by the CA |
//! | `verify-full` | always | signed by the CA, and names the URL's host |
//!
//! The CA is the PEM under [`CA_KEY`] in the connection Secret, else the system's roots (the
//! platform store, through `rustls-native-certs`). TLS is rustls with the `ring` provider, as
//! everywhere else in Finale.
//!
//! Every session starts with `statement_timeout` and `lock_timeout` set (in the startup
//! packet, so no statement runs without them); options in the URL's own `options` parameter
//! come after and win.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};

/// The key of the connection Secret that may hold the PEM certificate(s) of the CA that signed
/// the server's certificate.
pub const CA_KEY: &str = "ca.crt";

/// libpq's `sslmode` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    fn parse(value: &str) -> Result<SslMode, String> {
        Ok(match value {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            // libpq's `allow` tries without TLS first; there is no such order in tokio-postgres.
            other => {
                return Err(format!(
                    "sslmode={other} is not supported: use disable, prefer, require, verify-ca or verify-full"
                ));
            }
        })
    }
}

/// Bounds on the operator's calls to PostgreSQL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// Connecting: TCP, TLS and authentication together.
    pub connect: Duration,
    /// The server's `statement_timeout` for the operator's sessions.
    pub statement: Duration,
    /// The server's `lock_timeout`: how long a statement waits for a lock another session holds.
    pub lock: Duration,
}

/// What the client waits for a statement beyond the server's own `statement_timeout`, before
/// it gives up on the connection (a server that timed out answers at once; one that does not
/// answer at all is unreachable).
pub const CLIENT_GRACE: Duration = Duration::from_secs(5);

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(10),
            statement: Duration::from_secs(60),
            lock: Duration::from_secs(10),
        }
    }
}

impl Timeouts {
    /// The client-side bound of one statement or query.
    pub fn per_call(&self) -> Duration {
        self.statement + CLIENT_GRACE
    }
}

/// A connection URL taken apart: tokio-postgres's config (with `sslmode` mapped onto the three
/// modes it knows) and the mode asked for.
#[derive(Debug)]
pub struct Target {
    pub config: tokio_postgres::Config,
    pub sslmode: SslMode,
    /// `host:port` of the first host, for messages and the rate-limit key.
    pub server: String,
}

/// Parses `url` (`postgres://…` or libpq's `key=value` form), takes `sslmode` out (tokio-
/// postgres does not know the `verify-*` modes) and sets the session options.
pub fn parse(url: &str, timeouts: &Timeouts) -> Result<Target, String> {
    let (rest, sslmode) = take_sslmode(url)?;
    let mut config: tokio_postgres::Config = rest.parse().map_err(|e| format!("{e}"))?;
    config.ssl_mode(match sslmode {
        SslMode::Disable => tokio_postgres::config::SslMode::Disable,
        SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
        SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => {
            tokio_postgres::config::SslMode::Require
        }
    });
    let ours = format!(
        "-c statement_timeout={} -c lock_timeout={}",
        timeouts.statement.as_millis(),
        timeouts.lock.as_millis()
    );
    let options = match config.get_options() {
        Some(theirs) if !theirs.trim().is_empty() => format!("{ours} {theirs}"),
        _ => ours,
    };
    config.options(options);
    config.connect_timeout(timeouts.connect);
    let server = config
        .get_hosts()
        .iter()
        .zip(config.get_ports().iter().chain(std::iter::repeat(&5432)))
        .map(|(host, port)| match host {
            tokio_postgres::config::Host::Tcp(name) => format!("{name}:{port}"),
            tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
        })
        .next()
        .unwrap_or_else(|| "localhost:5432".to_string());
    Ok(Target {
        config,
        sslmode,
        server,
    })
}

/// `host:port` of the (first) server a URL names, without credentials: what a Database records
/// as the server its database is on, and the rate-limit key.
pub fn server_of(url: &str) -> Result<String, String> {
    parse(url, &Timeouts::default()).map(|target| target.server)
}

/// Removes the `sslmode` parameter from a URL's query or from a `key=value` string; returns
/// the rest and the mode (`prefer` when absent, as in libpq).
fn take_sslmode(url: &str) -> Result<(String, SslMode), String> {
    let mut mode = None;
    let rest = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        match url.split_once('?') {
            None => url.to_string(),
            Some((base, query)) => {
                let mut kept = Vec::new();
                for pair in query.split('&') {
                    let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
                    if key == "sslmode" {
                        let value: String = form_urlencoded::parse(format!("v={value}").as_bytes())
                            .map(|(_, v)| v.into_owned())
                            .next()
                            .unwrap_or_default();
                        mode = Some(SslMode::parse(&value)?);
                    } else if !pair.is_empty() {
                        kept.push(pair);
                    }
                }
                if kept.is_empty() {
                    base.to_string()
                } else {
                    format!("{base}?{}", kept.join("&"))
                }
            }
        }
    } else {
        // key=value form; sslmode values need no quoting, but may have it.
        let mut kept = Vec::new();
        for token in url.split_whitespace() {
            match token.strip_prefix("sslmode=") {
                Some(value) => mode = Some(SslMode::parse(value.trim_matches('\''))?),
                None => kept.push(token),
            }
        }
        kept.join(" ")
    };
    Ok((rest, mode.unwrap_or(SslMode::Prefer)))
}

fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    Arc::clone(PROVIDER.get_or_init(|| Arc::new(rustls::crypto::ring::default_provider())))
}

/// The platform's trusted roots, loaded once per process.
fn system_roots() -> Arc<RootCertStore> {
    static ROOTS: OnceLock<Arc<RootCertStore>> = OnceLock::new();
    Arc::clone(ROOTS.get_or_init(|| {
        let loaded = rustls_native_certs::load_native_certs();
        for error in &loaded.errors {
            tracing::debug!(%error, "could not load some system root certificates");
        }
        let mut roots = RootCertStore::empty();
        let (added, ignored) = roots.add_parsable_certificates(loaded.certs);
        tracing::debug!(added, ignored, "system root certificates");
        Arc::new(roots)
    }))
}

/// The rustls client configuration for `sslmode` and an optional CA (PEM) from the Secret.
pub fn tls_config(sslmode: SslMode, ca_pem: Option<&[u8]>) -> Result<rustls::ClientConfig, String> {
    let provider = provider();
    // libpq: with a root certificate present, `require` (and `prefer`) verify like `verify-ca`.
    let check = match (sslmode, ca_pem.is_some()) {
        (SslMode::VerifyFull, _) => Check::Full,
        (SslMode::VerifyCa, _) | (SslMode::Require | SslMode::Prefer, true) => Check::Chain,
        _ => Check::Nothing,
    };
    let roots = match ca_pem {
        Some(pem) => {
            let mut roots = RootCertStore::empty();
            let mut count = 0;
            for certificate in CertificateDer::pem_slice_iter(pem) {
                let certificate = certificate
                    .map_err(|e| format!("the Secret's {CA_KEY} is not a PEM certificate: {e}"))?;
                roots.add(certificate).map_err(|e| {
                    format!("the Secret's {CA_KEY} holds a certificate rustls cannot use: {e}")
                })?;
                count += 1;
            }
            if count == 0 {
                return Err(format!(
                    "the Secret's {CA_KEY} holds no PEM certificate (-----BEGIN CERTIFICATE-----)"
                ));
            }
            Arc::new(roots)
        }
        None => system_roots(),
    };
    let webpki = match check {
        Check::Nothing => None,
        Check::Chain | Check::Full => Some(
            WebPkiServerVerifier::builder_with_provider(roots, Arc::clone(&provider))
                .build()
                .map_err(|e| format!("no usable CA certificate: {e}"))?,
        ),
    };
    let verifier = Arc::new(PostgresVerifier {
        webpki,
        check_name: check == Check::Full,
        provider: Arc::clone(&provider),
    });
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Check {
    Nothing,
    Chain,
    Full,
}

/// Verifies the server's certificate as the `sslmode` asks: not at all, its chain only
/// (`verify-ca`), or its chain and name (`verify-full`). Handshake signatures are always
/// checked, so the session is bound to the certificate's key either way.
#[derive(Debug)]
struct PostgresVerifier {
    webpki: Option<Arc<WebPkiServerVerifier>>,
    check_name: bool,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for PostgresVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(webpki) = &self.webpki else {
            return Ok(ServerCertVerified::assertion());
        };
        match webpki.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            // The name is checked after the chain: a name error means the chain is good.
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if !self.check_name => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sslmode_of(url: &str) -> (String, SslMode) {
        take_sslmode(url).expect(url)
    }

    #[test]
    fn sslmode_is_taken_out_of_urls_and_key_value_strings() {
        assert_eq!(
            sslmode_of("postgres://u:p@db:5433/postgres?sslmode=verify-full"),
            (
                "postgres://u:p@db:5433/postgres".into(),
                SslMode::VerifyFull
            )
        );
        assert_eq!(
            sslmode_of(
                "postgresql://db/postgres?application_name=x&sslmode=require&connect_timeout=3"
            ),
            (
                "postgresql://db/postgres?application_name=x&connect_timeout=3".into(),
                SslMode::Require
            )
        );
        assert_eq!(
            sslmode_of("postgres://db/postgres?sslmode=verify%2Dca"),
            ("postgres://db/postgres".into(), SslMode::VerifyCa)
        );
        assert_eq!(
            sslmode_of("postgres://db/postgres"),
            ("postgres://db/postgres".into(), SslMode::Prefer)
        );
        assert_eq!(
            sslmode_of("host=db user=u sslmode='disable' dbname=postgres"),
            ("host=db user=u dbname=postgres".into(), SslMode::Disable)
        );
        let error = take_sslmode("postgres://db/postgres?sslmode=allow").expect_err("allow");
        assert!(error.contains("sslmode=allow is not supported"), "{error}");
    }

    #[test]
    fn sessions_get_the_timeouts_and_the_url_options_win() {
        let timeouts = Timeouts {
            connect: Duration::from_secs(3),
            statement: Duration::from_secs(30),
            lock: Duration::from_millis(1500),
        };
        let target =
            parse("postgres://postgres@127.0.0.1:5433/postgres", &timeouts).expect("parse");
        assert_eq!(
            target.config.get_options(),
            Some("-c statement_timeout=30000 -c lock_timeout=1500")
        );
        assert_eq!(
            target.config.get_connect_timeout(),
            Some(&Duration::from_secs(3))
        );
        assert_eq!(target.server, "127.0.0.1:5433");
        assert_eq!(target.sslmode, SslMode::Prefer);
        let target = parse(
            "postgres://db/postgres?options=-c%20lock_timeout%3D100&sslmode=verify-full",
            &timeouts,
        )
        .expect("parse");
        assert_eq!(
            target.config.get_options(),
            Some("-c statement_timeout=30000 -c lock_timeout=1500 -c lock_timeout=100")
        );
        assert_eq!(
            target.config.get_ssl_mode(),
            tokio_postgres::config::SslMode::Require
        );
        assert_eq!(target.server, "db:5432");
    }

    #[test]
    fn the_server_of_a_url_has_no_credentials() {
        assert_eq!(
            server_of("postgres://admin:s3cret@db.example:5433/postgres?sslmode=disable"),
            Ok("db.example:5433".to_string())
        );
        assert_eq!(
            server_of("postgresql://127.0.0.1/postgres"),
            Ok("127.0.0.1:5432".to_string())
        );
        assert_eq!(
            server_of("host=db port=6432 user=u password=p dbname=postgres"),
            Ok("db:6432".to_string())
        );
        assert!(server_of("postgres://db/x?sslmode=sometimes").is_err());
    }

    #[test]
    fn a_ca_that_is_not_pem_is_refused_with_the_key_named() {
        let error = tls_config(SslMode::VerifyFull, Some(b"not a certificate")).expect_err("bad");
        assert!(error.contains("ca.crt"), "{error}");
        assert!(tls_config(SslMode::Require, None).is_ok());
    }
}
