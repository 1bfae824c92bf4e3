//! The server's PKI: a private CA, a serving certificate, an admin client certificate, an
//! admin token and the admin kubeconfig. Checking what clients present is `authn`'s job.
//!
//! On first start [`Pki::load_or_create`] generates, under `<data-dir>/pki/`:
//!
//! | file | what |
//! |---|---|
//! | `ca.crt`, `ca.key` | ECDSA P-256 CA, `CN=finale-ca`, basicConstraints critical `CA:TRUE`, keyUsage keyCertSign + cRLSign, 10 years |
//! | `apiserver.crt`, `apiserver.key` | serving leaf signed by the CA: `CA:FALSE`, digitalSignature, EKU serverAuth, SANs `127.0.0.1`, `::1`, `localhost` + extra SANs, 1 year |
//! | `admin.crt`, `admin.key` | client leaf signed by the CA: `CN=admin, O=system:masters`, EKU clientAuth, 1 year |
//! | `admin.token` | 32 random bytes, base64url without padding, one line |
//! | `sa.key`, `sa.pub` | ECDSA P-256 key (PKCS#8) that signs service-account tokens, and its public half (SubjectPublicKeyInfo), kubeadm's names |
//!
//! Why a separate leaf: rustls (kube-rs) rejects a `CA:TRUE` certificate used as the serving
//! certificate (`CaUsedAsEndEntity`), and both kubectl and kube-rs ignore the CN, so every
//! address clients use must be a SAN (spec `api-surface.md` §9).
//!
//! # Guarantees
//! - Every file is written with mode 0600, directories are created with mode 0700.
//! - Writes are atomic: temp file in the same directory, `fsync`, `rename`, `fsync` of the
//!   directory. A crash never leaves a half-written file behind; at worst a stray
//!   `.<name>.tmp-*` file.
//! - The CA and the admin token are never replaced once they exist, so kubeconfigs handed
//!   out earlier keep working across restarts. Leaves are disposable: the serving and admin
//!   certificates are re-issued from the existing CA when missing, unreadable, not matching
//!   their key, not signed by the current CA, expiring within 30 days, or (serving) not
//!   covering every requested SAN.
//! - Bearer tokens are compared in constant time.
//!
//! # Assumptions
//! - One server process owns a data directory at a time (no file locking here).
//! - Unix file permissions (the project targets Linux).
//!
//! # Caveats
//! - Certificates are checked only at startup; a server running for more than ~11 months
//!   without a restart serves an expired certificate.
//! - The CA certificate's own expiry (10 years) is not checked or renewed.
//! - `ca.crt` must have been created by this module: issuing relies on its subject being
//!   exactly `CN=finale-ca`. A foreign CA is detected (the fresh leaf fails verification) and
//!   reported as an error rather than silently replaced.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::net::IpAddr;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use rand::RngCore as _;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, PKCS_ECDSA_P256_SHA256, SanType, SerialNumber,
};
use rustls::RootCertStore;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::ServerCertVerifier as _;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::sign::CertifiedKey;

// Authentication moved to `authn`; these names stay reachable here.
use crate::authn::ClientCertAuthenticator;
pub use crate::authn::{AuthError, Identity, TokenAuthenticator, identity_from_client_cert};

/// Subdirectory of the data directory that holds every PKI file.
pub const PKI_DIR: &str = "pki";
pub const CA_CERT_FILE: &str = "ca.crt";
pub const CA_KEY_FILE: &str = "ca.key";
pub const SERVING_CERT_FILE: &str = "apiserver.crt";
pub const SERVING_KEY_FILE: &str = "apiserver.key";
pub const ADMIN_CERT_FILE: &str = "admin.crt";
pub const ADMIN_KEY_FILE: &str = "admin.key";
pub const ADMIN_TOKEN_FILE: &str = "admin.token";
/// The key that signs service-account tokens (kube-apiserver's
/// `--service-account-signing-key-file`), and its public half (`--service-account-key-file`).
pub const SERVICE_ACCOUNT_KEY_FILE: &str = "sa.key";
pub const SERVICE_ACCOUNT_PUBLIC_KEY_FILE: &str = "sa.pub";
/// Conventional name of the admin kubeconfig inside the data directory; see
/// [`default_kubeconfig_path`].
pub const KUBECONFIG_FILE: &str = "kubeconfig";

/// SANs every serving certificate carries, so loopback clients work without configuration.
pub const DEFAULT_SERVING_SANS: [&str; 3] = ["127.0.0.1", "::1", "localhost"];

/// User name and groups of the built-in admin identity. `system:masters` is what Kubernetes
/// grants unconditional access to, so RBAC added later keeps treating the admin as admin.
pub const ADMIN_USER: &str = "admin";
pub const MASTERS_GROUP: &str = "system:masters";
pub const AUTHENTICATED_GROUP: &str = "system:authenticated";

/// Subject CN of the CA. Issuing from a reloaded CA rebuilds its subject from this constant
/// (rcgen cannot parse certificates without the x509-parser feature).
const CA_COMMON_NAME: &str = "finale-ca";
const SERVING_COMMON_NAME: &str = "finale-apiserver";

const CA_VALIDITY: Duration = Duration::from_secs(3650 * 24 * 60 * 60);
const LEAF_VALIDITY: Duration = Duration::from_secs(365 * 24 * 60 * 60);
/// Leaves expiring within this window are re-issued at startup.
const RENEW_BEFORE: Duration = Duration::from_secs(30 * 24 * 60 * 60);
/// Certificates start one hour in the past to tolerate clock skew between hosts.
const BACKDATE: Duration = Duration::from_secs(60 * 60);
/// How far before now a certificate signed for a CertificateSigningRequest starts.
const SIGNED_BACKDATE: Duration = Duration::from_secs(5 * 60);
const TOKEN_BYTES: usize = 32;

/// Everything that can go wrong loading, creating or using the PKI. Each variant names the
/// file or the step involved.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    #[error("cannot {op} {}: {error}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        error: io::Error,
    },
    /// A file that must be kept (CA, token) exists but cannot be used.
    #[error("{}: {reason}", path.display())]
    Invalid { path: PathBuf, reason: String },
    #[error(
        "CA certificate {} exists but its key {} is missing: restore the key, or delete the \
         certificate to create a new CA (kubeconfigs issued so far will then stop working)",
        cert.display(),
        key.display()
    )]
    CaKeyMissing { cert: PathBuf, key: PathBuf },
    #[error("generating {what}: {error}")]
    Generate {
        what: &'static str,
        error: rcgen::Error,
    },
    /// rcgen keeps one value per attribute type in a subject.
    #[error(
        "a client certificate issued here carries at most one group (subject O), got {0}; \
         issue one with openssl to put a user in several groups"
    )]
    TooManyGroups(usize),
    #[error("invalid subject alternative name {san:?}: {reason}")]
    InvalidSan { san: String, reason: String },
    #[error("building the TLS configuration ({what}): {error}")]
    Tls {
        what: &'static str,
        error: rustls::Error,
    },
    #[error("building the client certificate verifier: {error}")]
    ClientVerifier {
        error: rustls::server::VerifierBuilderError,
    },
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> PkiError + 'a {
    move |error| PkiError::Io {
        op,
        path: path.to_path_buf(),
        error,
    }
}

fn gen_err(what: &'static str) -> impl FnOnce(rcgen::Error) -> PkiError {
    move |error| PkiError::Generate { what, error }
}

/// The loaded (or freshly created) PKI of one data directory.
pub struct Pki {
    dir: PathBuf,
    ca_pem: String,
    ca_der: CertificateDer<'static>,
    serving_cert_pem: String,
    serving_key_pem: String,
    admin_cert_pem: String,
    admin_key_pem: String,
    admin_token: String,
    service_account_key_pem: String,
    serving_sans: Vec<String>,
}

impl fmt::Debug for Pki {
    // Keys and the token are secrets; never let them reach a log line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pki")
            .field("dir", &self.dir)
            .field("serving_sans", &self.serving_sans)
            .finish_non_exhaustive()
    }
}

impl Pki {
    /// Loads the PKI from `dir/pki/`, creating whatever is missing (see the module docs).
    ///
    /// `extra_sans` are added to the serving certificate next to [`DEFAULT_SERVING_SANS`]:
    /// entries that parse as IP addresses (optionally in `[...]`) become IP SANs, others DNS
    /// SANs (`*.example.com` wildcards allowed). Empty entries are ignored.
    pub fn load_or_create(dir: &Path, extra_sans: &[String]) -> Result<Pki, PkiError> {
        Pki::load_or_create_in(&dir.join(PKI_DIR), extra_sans)
    }

    /// As [`Pki::load_or_create`], with the files directly in `pki_dir`: `finale server
    /// --pki-dir`, a directory several API servers share so that they present one CA, one
    /// serving certificate and one admin token. The serving certificate must then name every
    /// replica's address (`--tls-san`); the first replica to start creates the files.
    pub fn load_or_create_in(pki_dir: &Path, extra_sans: &[String]) -> Result<Pki, PkiError> {
        let sans = normalize_sans(extra_sans)?;
        let pki_dir = pki_dir.to_path_buf();
        create_private_dir(&pki_dir)?;
        let provider = ring_provider();

        let ca = load_or_create_ca(&pki_dir, &provider)?;
        let admin_token = load_or_create_token(&pki_dir)?;
        let service_account_key_pem = load_or_create_service_account_key(&pki_dir)?;
        let (serving_cert_pem, serving_key_pem) =
            load_or_issue_leaf(&pki_dir, &ca, &LeafKind::Serving(&sans), &provider)?;
        let (admin_cert_pem, admin_key_pem) =
            load_or_issue_leaf(&pki_dir, &ca, &LeafKind::AdminClient, &provider)?;

        Ok(Pki {
            dir: pki_dir,
            ca_pem: ca.cert_pem,
            ca_der: ca.cert_der,
            serving_cert_pem,
            serving_key_pem,
            admin_cert_pem,
            admin_key_pem,
            admin_token,
            service_account_key_pem,
            serving_sans: sans.iter().map(San::to_string).collect(),
        })
    }

    /// The `pki` directory all files live in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// PEM of the CA certificate: what clients put in `certificate-authority-data`.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The admin bearer token (stable across restarts).
    pub fn admin_token(&self) -> &str {
        &self.admin_token
    }

    /// PKCS#8 PEM of the ECDSA P-256 key that signs service-account tokens. Replicas that
    /// share a PKI directory share it, so each accepts the tokens the others issue.
    pub fn service_account_key_pem(&self) -> &str {
        &self.service_account_key_pem
    }

    /// PEM of the current serving certificate (leaf only).
    pub fn serving_cert_pem(&self) -> &str {
        &self.serving_cert_pem
    }

    /// SANs the serving certificate was checked to cover, defaults first.
    pub fn serving_sans(&self) -> &[String] {
        &self.serving_sans
    }

    /// PEM of the admin client certificate (`CN=admin, O=system:masters`).
    pub fn admin_client_cert_pem(&self) -> &str {
        &self.admin_cert_pem
    }

    /// PKCS#8 PEM of the admin client certificate's key.
    pub fn admin_client_key_pem(&self) -> &str {
        &self.admin_key_pem
    }

    /// A token table holding the admin token, mapped to [`Identity::admin`].
    pub fn token_authenticator(&self) -> TokenAuthenticator {
        let mut auth = TokenAuthenticator::new();
        auth.insert(self.admin_token.clone(), Identity::admin());
        auth
    }

    /// rustls server configuration for the API port.
    ///
    /// - ring provider passed explicitly: with both ring and aws-lc-rs in the dependency
    ///   graph rustls refuses to pick a process default.
    /// - ALPN `h2`, `http/1.1`.
    /// - Serves the leaf only, like kube-apiserver: clients hold the CA already.
    /// - Client certificates are requested but optional, and any is accepted in the
    ///   handshake as long as the client proves it holds the key: whether it is trusted is
    ///   for [`Pki::client_cert_authenticator`] to say, so an untrusted one gets a 401
    ///   `Status`, as from kube-apiserver. Clients without one authenticate with a token.
    pub fn server_tls_config(&self) -> Result<Arc<rustls::ServerConfig>, PkiError> {
        let provider = ring_provider();
        let serving_cert_path = self.dir.join(SERVING_CERT_FILE);
        let leaf = parse_cert_pem(&self.serving_cert_pem).map_err(|reason| PkiError::Invalid {
            path: serving_cert_path,
            reason,
        })?;
        let key = parse_key_pem(&self.serving_key_pem).map_err(|reason| PkiError::Invalid {
            path: self.dir.join(SERVING_KEY_FILE),
            reason,
        })?;
        let verifier = self.client_cert_authenticator()?.handshake_verifier();
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|error| PkiError::Tls {
                what: "protocol versions",
                error,
            })?
            .with_client_cert_verifier(verifier)
            .with_single_cert(vec![leaf], key)
            .map_err(|error| PkiError::Tls {
                what: "serving certificate and key",
                error,
            })?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }

    /// Checks client certificates against this CA (chain, validity, clientAuth usage) and
    /// maps them to identities.
    pub fn client_cert_authenticator(&self) -> Result<ClientCertAuthenticator, PkiError> {
        let verifier =
            WebPkiClientVerifier::builder_with_provider(self.ca_roots()?, ring_provider())
                .allow_unauthenticated()
                .build()
                .map_err(|error| PkiError::ClientVerifier { error })?;
        Ok(ClientCertAuthenticator::new(verifier))
    }

    /// Issues a client certificate (and its key, both PEM) for `user` in `groups`, signed by
    /// the CA and valid for a year: what `kubectl` and other clients present as
    /// `client-certificate-data` / `client-key-data`. Nothing is written to disk. At most one
    /// group: rcgen keeps one subject O (openssl can write several, and the server reads them).
    pub fn issue_client_certificate(
        &self,
        user: &str,
        groups: &[&str],
    ) -> Result<(String, String), PkiError> {
        const WHAT: &str = "client certificate";
        if groups.len() > 1 {
            return Err(PkiError::TooManyGroups(groups.len()));
        }
        let ca = load_or_create_ca(&self.dir, &ring_provider())?;
        let mut params = CertificateParams::default();
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.use_authority_key_identifier_extension = true;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, user);
        for group in groups {
            dn.push(DnType::OrganizationName, *group);
        }
        params.distinguished_name = dn;
        set_validity(&mut params, LEAF_VALIDITY);
        params.serial_number = Some(random_serial());
        let key = generate_key(WHAT)?;
        let cert = params
            .signed_by(&key, &ca.issuer())
            .map_err(gen_err(WHAT))?;
        Ok((cert.pem(), key.serialize_pem()))
    }

    /// Signs a PKCS#10 request (DER) with the CA, as kube-controller-manager's `csrsigning`
    /// signers do: the subject, subject alternative names and public key come from the
    /// request, the key and extended key usages from `usages` (the
    /// CertificateSigningRequest's `spec.usages`, already checked by the caller), and the
    /// certificate is valid from a little before now for `validity`, never past the CA's own
    /// expiry. Returns the certificate as PEM.
    pub fn sign_request(
        &self,
        request_der: &[u8],
        usages: &[&str],
        validity: Duration,
    ) -> Result<String, PkiError> {
        const WHAT: &str = "a certificate for a CertificateSigningRequest";
        let ca = load_or_create_ca(&self.dir, &ring_provider())?;
        let request = rustls::pki_types::CertificateSigningRequestDer::from(request_der);
        let mut signed =
            rcgen::CertificateSigningRequestParams::from_der(&request).map_err(gen_err(WHAT))?;
        let params = &mut signed.params;
        params.is_ca = IsCa::ExplicitNoCa;
        // Upstream's `keyUsageDict` and `extKeyUsageDict`: each usage is a key usage or an
        // extended one.
        params.key_usages = Vec::new();
        params.extended_key_usages = Vec::new();
        for usage in usages {
            let key_usage = match *usage {
                "digital signature" | "signing" => Some(KeyUsagePurpose::DigitalSignature),
                "key encipherment" => Some(KeyUsagePurpose::KeyEncipherment),
                "content commitment" => Some(KeyUsagePurpose::ContentCommitment),
                "data encipherment" => Some(KeyUsagePurpose::DataEncipherment),
                "key agreement" => Some(KeyUsagePurpose::KeyAgreement),
                "cert sign" => Some(KeyUsagePurpose::KeyCertSign),
                "crl sign" => Some(KeyUsagePurpose::CrlSign),
                "encipher only" => Some(KeyUsagePurpose::EncipherOnly),
                "decipher only" => Some(KeyUsagePurpose::DecipherOnly),
                _ => None,
            };
            let extended = match *usage {
                "client auth" => Some(ExtendedKeyUsagePurpose::ClientAuth),
                "server auth" => Some(ExtendedKeyUsagePurpose::ServerAuth),
                "code signing" => Some(ExtendedKeyUsagePurpose::CodeSigning),
                "email protection" | "s/mime" => Some(ExtendedKeyUsagePurpose::EmailProtection),
                "timestamping" => Some(ExtendedKeyUsagePurpose::TimeStamping),
                "ocsp signing" => Some(ExtendedKeyUsagePurpose::OcspSigning),
                "any" => Some(ExtendedKeyUsagePurpose::Any),
                _ => None,
            };
            if let Some(purpose) = key_usage.filter(|p| !params.key_usages.contains(p)) {
                params.key_usages.push(purpose);
            }
            if let Some(purpose) = extended.filter(|p| !params.extended_key_usages.contains(p)) {
                params.extended_key_usages.push(purpose);
            }
        }
        params.use_authority_key_identifier_extension = true;
        params.serial_number = Some(random_serial());
        // Whatever extensions the requester asked for are not granted: the signer decides.
        params.custom_extensions.clear();
        let (_, ca_cert) = x509_parser::parse_x509_certificate(&ca.cert_der).map_err(|error| {
            PkiError::Invalid {
                path: self.dir.join(CA_CERT_FILE),
                reason: format!("unreadable CA certificate: {error}"),
            }
        })?;
        let ca_expiry = rcgen::date_time_ymd(1970, 1, 1)
            + Duration::from_secs(
                u64::try_from(ca_cert.validity().not_after.timestamp()).unwrap_or_default(),
            );
        // Backdated a little for clocks behind the server's, and valid for `validity` in all,
        // as upstream's signer (`certificate.authority`) issues them.
        let epoch = rcgen::date_time_ymd(1970, 1, 1);
        let not_before = unix_now().saturating_sub(SIGNED_BACKDATE);
        params.not_before = epoch + not_before;
        params.not_after = epoch + not_before + validity;
        if params.not_after > ca_expiry {
            params.not_after = ca_expiry;
        }
        let cert = signed.signed_by(&ca.issuer()).map_err(gen_err(WHAT))?;
        Ok(cert.pem())
    }

    /// Writes an admin kubeconfig for this PKI (see [`write_kubeconfig`]).
    pub fn write_admin_kubeconfig(
        &self,
        path: &Path,
        server_url: &str,
        cluster_name: &str,
    ) -> Result<(), PkiError> {
        write_kubeconfig(
            path,
            server_url,
            cluster_name,
            &self.ca_pem,
            &self.admin_token,
        )
    }

    fn ca_roots(&self) -> Result<Arc<RootCertStore>, PkiError> {
        roots_for(&self.ca_der).map_err(|reason| PkiError::Invalid {
            path: self.dir.join(CA_CERT_FILE),
            reason,
        })
    }
}

/// `<data_dir>/kubeconfig`: where the server is expected to write the admin kubeconfig, and
/// what the 401 messages point users to.
pub fn default_kubeconfig_path(data_dir: &Path) -> PathBuf {
    data_dir.join(KUBECONFIG_FILE)
}

fn ring_provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

// ---------------------------------------------------------------------------------------
// CA

struct Ca {
    cert_pem: String,
    cert_der: CertificateDer<'static>,
    key: KeyPair,
    /// Parameters equivalent to the CA certificate's subject, used to build the issuer.
    params: CertificateParams,
}

impl Ca {
    fn issuer(&self) -> Issuer<'_, &KeyPair> {
        Issuer::from_params(&self.params, &self.key)
    }
}

fn ca_params() -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, CA_COMMON_NAME);
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params
}

fn self_sign_ca(key: &KeyPair) -> Result<String, PkiError> {
    let mut params = ca_params();
    set_validity(&mut params, CA_VALIDITY);
    // rcgen derives the serial from the key when none is set; a re-signed CA (same key)
    // must not reuse the serial of the previous certificate.
    params.serial_number = Some(random_serial());
    Ok(params
        .self_signed(key)
        .map_err(gen_err("CA certificate"))?
        .pem())
}

fn load_or_create_ca(pki_dir: &Path, provider: &CryptoProvider) -> Result<Ca, PkiError> {
    let cert_path = pki_dir.join(CA_CERT_FILE);
    let key_path = pki_dir.join(CA_KEY_FILE);
    let cert_pem = read_optional(&cert_path)?;
    let key_pem = read_optional(&key_path)?;

    let (cert_pem, key) = match (cert_pem, key_pem) {
        (None, None) => {
            let key = generate_key("CA key")?;
            // Key first: a crash before the certificate is written leaves the recoverable
            // "key without certificate" state handled below.
            write_atomic(&key_path, key.serialize_pem().as_bytes())?;
            let cert_pem = self_sign_ca(&key)?;
            write_atomic(&cert_path, cert_pem.as_bytes())?;
            tracing::info!(path = %cert_path.display(), "created a new cluster CA");
            (cert_pem, key)
        }
        (None, Some(key_pem)) => {
            // Same key and subject give a certificate that verifies exactly what the lost one
            // did, so kubeconfigs holding the old CA certificate keep working.
            let key = parse_ca_key(&key_path, &key_pem)?;
            let cert_pem = self_sign_ca(&key)?;
            write_atomic(&cert_path, cert_pem.as_bytes())?;
            tracing::warn!(path = %cert_path.display(), "CA certificate was missing; re-created it from the existing CA key");
            (cert_pem, key)
        }
        (Some(_), None) => {
            return Err(PkiError::CaKeyMissing {
                cert: cert_path,
                key: key_path,
            });
        }
        (Some(cert_pem), Some(key_pem)) => {
            warn_if_readable_by_others(&key_path);
            (cert_pem, parse_ca_key(&key_path, &key_pem)?)
        }
    };

    let cert_der = parse_cert_pem(&cert_pem).map_err(|reason| PkiError::Invalid {
        path: cert_path.clone(),
        reason: format!("{reason}; restore it or delete it to re-create it from {CA_KEY_FILE}"),
    })?;
    check_key_matches(&cert_der, &key.serialize_pem(), provider).map_err(|reason| {
        PkiError::Invalid {
            path: cert_path.clone(),
            reason: format!("does not belong to {}: {reason}", key_path.display()),
        }
    })?;
    Ok(Ca {
        cert_pem,
        cert_der,
        key,
        params: ca_params(),
    })
}

fn parse_ca_key(path: &Path, pem: &str) -> Result<KeyPair, PkiError> {
    KeyPair::from_pem(pem).map_err(|error| PkiError::Invalid {
        path: path.to_path_buf(),
        reason: format!("not a usable PEM private key ({error}); restore it from a backup"),
    })
}

// ---------------------------------------------------------------------------------------
// Token

fn load_or_create_token(pki_dir: &Path) -> Result<String, PkiError> {
    let path = pki_dir.join(ADMIN_TOKEN_FILE);
    if let Some(contents) = read_optional(&path)? {
        warn_if_readable_by_others(&path);
        let token = contents.trim();
        // Operators may put their own token here; accept anything that fits in an HTTP
        // header as one word.
        if token.is_empty() || !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(PkiError::Invalid {
                path,
                reason: "must hold one token of printable ASCII without spaces; delete the \
                         file to generate a new token (existing kubeconfigs will then need \
                         the new token)"
                    .to_string(),
            });
        }
        return Ok(token.to_string());
    }
    let token = generate_token();
    write_atomic(&path, format!("{token}\n").as_bytes())?;
    tracing::info!(path = %path.display(), "created a new admin token");
    Ok(token)
}

/// The service-account signing key: never replaced once it exists (tokens issued with it
/// must keep verifying), created on first start; `sa.pub` is rewritten from it when missing.
fn load_or_create_service_account_key(pki_dir: &Path) -> Result<String, PkiError> {
    let path = pki_dir.join(SERVICE_ACCOUNT_KEY_FILE);
    let pem = match read_optional(&path)? {
        Some(pem) => {
            warn_if_readable_by_others(&path);
            pem
        }
        None => {
            let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)
                .map_err(gen_err("service-account signing key"))?;
            let pem = key.serialize_pem();
            write_atomic(&path, pem.as_bytes())?;
            tracing::info!(path = %path.display(), "created a new service-account signing key");
            pem
        }
    };
    let key = KeyPair::from_pem(&pem).map_err(|error| PkiError::Invalid {
        path: path.clone(),
        reason: format!(
            "not a PKCS#8 PEM private key ({error}); delete the file to generate a new one \
             (tokens issued with the old key then stop working)"
        ),
    })?;
    if key.algorithm() != &PKCS_ECDSA_P256_SHA256 {
        return Err(PkiError::Invalid {
            path,
            reason: "service-account tokens are signed with ES256: the key must be ECDSA P-256 \
                     (RSA keys, kubeadm's default, are not supported); delete the file to \
                     generate one"
                .to_string(),
        });
    }
    let public = pki_dir.join(SERVICE_ACCOUNT_PUBLIC_KEY_FILE);
    if read_optional(&public)?.is_none() {
        write_atomic(&public, key.public_key_pem().as_bytes())?;
    }
    Ok(pem)
}

fn generate_token() -> String {
    let mut bytes = [0u8; TOKEN_BYTES];
    // ThreadRng is a CSPRNG seeded from the OS.
    rand::rng().fill_bytes(&mut bytes);
    URL_SAFE_NO_PAD.encode(bytes)
}

// ---------------------------------------------------------------------------------------
// Leaves

enum LeafKind<'a> {
    Serving(&'a [San]),
    AdminClient,
}

impl LeafKind<'_> {
    fn what(&self) -> &'static str {
        match self {
            LeafKind::Serving(_) => "serving certificate",
            LeafKind::AdminClient => "admin client certificate",
        }
    }

    fn files(&self) -> (&'static str, &'static str) {
        match self {
            LeafKind::Serving(_) => (SERVING_CERT_FILE, SERVING_KEY_FILE),
            LeafKind::AdminClient => (ADMIN_CERT_FILE, ADMIN_KEY_FILE),
        }
    }

    fn params(&self) -> Result<CertificateParams, PkiError> {
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.use_authority_key_identifier_extension = true;
        match self {
            LeafKind::Serving(sans) => {
                dn.push(DnType::CommonName, SERVING_COMMON_NAME);
                params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
                params.subject_alt_names =
                    sans.iter().map(San::to_rcgen).collect::<Result<_, _>>()?;
            }
            LeafKind::AdminClient => {
                // Kubernetes maps CN to the user name and O to groups.
                dn.push(DnType::CommonName, ADMIN_USER);
                dn.push(DnType::OrganizationName, MASTERS_GROUP);
                params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
            }
        }
        params.distinguished_name = dn;
        set_validity(&mut params, LEAF_VALIDITY);
        params.serial_number = Some(random_serial());
        Ok(params)
    }

    /// Why the leaf cannot be kept, or `None` if it is fine for at least [`RENEW_BEFORE`].
    fn problem(
        &self,
        cert_pem: &str,
        key_pem: &str,
        ca: &Ca,
        provider: &Arc<CryptoProvider>,
    ) -> Option<String> {
        let cert = match parse_cert_pem(cert_pem) {
            Ok(cert) => cert,
            Err(reason) => return Some(reason),
        };
        if let Err(reason) = check_key_matches(&cert, key_pem, provider) {
            return Some(reason);
        }
        let roots = match roots_for(&ca.cert_der) {
            Ok(roots) => roots,
            Err(reason) => return Some(reason),
        };
        let now = unix_now();
        // Checking at `now` catches not-yet-valid certificates, at `now + RENEW_BEFORE`
        // expiring ones.
        let times = [now, now + RENEW_BEFORE].map(UnixTime::since_unix_epoch);
        match self {
            LeafKind::Serving(sans) => {
                let verifier =
                    match WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
                        .build()
                    {
                        Ok(verifier) => verifier,
                        Err(error) => return Some(error.to_string()),
                    };
                for san in sans.iter() {
                    let Some(name) = san.probe_name() else {
                        return Some(format!("{san} is not a valid server name"));
                    };
                    for time in times {
                        if let Err(error) =
                            verifier.verify_server_cert(&cert, &[], &name, &[], time)
                        {
                            return Some(format!("not valid for {san}: {error}"));
                        }
                    }
                }
            }
            LeafKind::AdminClient => {
                let verifier =
                    match WebPkiClientVerifier::builder_with_provider(roots, provider.clone())
                        .build()
                    {
                        Ok(verifier) => verifier,
                        Err(error) => return Some(error.to_string()),
                    };
                for time in times {
                    if let Err(error) = verifier.verify_client_cert(&cert, &[], time) {
                        return Some(error.to_string());
                    }
                }
            }
        }
        None
    }
}

/// Returns `(cert_pem, key_pem)` of a leaf that passes [`LeafKind::problem`], issuing and
/// persisting a new one from the CA if the stored one does not.
fn load_or_issue_leaf(
    pki_dir: &Path,
    ca: &Ca,
    kind: &LeafKind<'_>,
    provider: &Arc<CryptoProvider>,
) -> Result<(String, String), PkiError> {
    let (cert_file, key_file) = kind.files();
    let cert_path = pki_dir.join(cert_file);
    let key_path = pki_dir.join(key_file);
    let existing = (read_optional(&cert_path)?, read_optional(&key_path)?);
    let reason = match existing {
        (Some(cert_pem), Some(key_pem)) => match kind.problem(&cert_pem, &key_pem, ca, provider) {
            None => {
                warn_if_readable_by_others(&key_path);
                return Ok((cert_pem, key_pem));
            }
            Some(problem) => problem,
        },
        (None, None) => "none exists yet".to_string(),
        (None, Some(_)) => format!("{cert_file} is missing"),
        (Some(_), None) => format!("{key_file} is missing"),
    };
    tracing::info!(path = %cert_path.display(), %reason, "issuing a new {}", kind.what());

    let key = generate_key(kind.what())?;
    let cert_pem = kind
        .params()?
        .signed_by(&key, &ca.issuer())
        .map_err(gen_err(kind.what()))?
        .pem();
    let key_pem = key.serialize_pem();
    // A fresh leaf that fails our own checks means the CA is not what this module created
    // (e.g. a different subject); fail loudly instead of writing certificates clients reject.
    if let Some(problem) = kind.problem(&cert_pem, &key_pem, ca, provider) {
        return Err(PkiError::Invalid {
            path: pki_dir.join(CA_CERT_FILE),
            reason: format!(
                "a {} freshly issued from this CA fails verification ({problem}); the CA was \
                 not created by finale or is damaged",
                kind.what()
            ),
        });
    }
    // Key first: a crash in between leaves a key/cert mismatch, which the next start detects
    // and repairs by issuing again.
    write_atomic(&key_path, key_pem.as_bytes())?;
    write_atomic(&cert_path, cert_pem.as_bytes())?;
    Ok((cert_pem, key_pem))
}

fn generate_key(what: &'static str) -> Result<KeyPair, PkiError> {
    KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(gen_err(what))
}

fn random_serial() -> SerialNumber {
    let mut bytes = [0u8; 16];
    rand::rng().fill_bytes(&mut bytes);
    // Positive (top bit clear) and a fixed 16-byte length (next bit set).
    bytes[0] = (bytes[0] & 0x7f) | 0x40;
    SerialNumber::from_slice(&bytes)
}

fn unix_now() -> Duration {
    // A clock before 1970 is not worth an error path; it would produce expired certificates
    // that get re-issued once the clock is right.
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    Duration::from_secs(now.as_secs())
}

fn set_validity(params: &mut CertificateParams, validity: Duration) {
    // rcgen takes `time::OffsetDateTime`, which this crate does not depend on directly;
    // epoch + std Duration builds one without naming the type.
    let epoch = rcgen::date_time_ymd(1970, 1, 1);
    let now = unix_now();
    params.not_before = epoch + now.saturating_sub(BACKDATE);
    params.not_after = epoch + now + validity;
}

fn parse_cert_pem(pem: &str) -> Result<CertificateDer<'static>, String> {
    match rustls_pemfile::certs(&mut pem.as_bytes()).next() {
        Some(Ok(cert)) => Ok(cert),
        Some(Err(error)) => Err(format!("unreadable PEM certificate: {error}")),
        None => Err("no PEM certificate found".to_string()),
    }
}

fn parse_key_pem(pem: &str) -> Result<PrivateKeyDer<'static>, String> {
    match rustls_pemfile::private_key(&mut pem.as_bytes()) {
        Ok(Some(key)) => Ok(key),
        Ok(None) => Err("no PEM private key found".to_string()),
        Err(error) => Err(format!("unreadable PEM private key: {error}")),
    }
}

fn check_key_matches(
    cert: &CertificateDer<'static>,
    key_pem: &str,
    provider: &CryptoProvider,
) -> Result<(), String> {
    let key = parse_key_pem(key_pem)?;
    let signing_key = provider
        .key_provider
        .load_private_key(key)
        .map_err(|error| format!("unusable private key: {error}"))?;
    CertifiedKey::new(vec![cert.clone()], signing_key)
        .keys_match()
        .map_err(|error| format!("certificate and key do not match: {error}"))
}

fn roots_for(ca: &CertificateDer<'static>) -> Result<Arc<RootCertStore>, String> {
    let mut roots = RootCertStore::empty();
    roots
        .add(ca.clone())
        .map_err(|error| format!("not a usable CA certificate: {error}"))?;
    Ok(Arc::new(roots))
}

// ---------------------------------------------------------------------------------------
// SANs

#[derive(Clone, Debug, PartialEq, Eq)]
enum San {
    Ip(IpAddr),
    /// Lower-cased; may start with `*.`.
    Dns(String),
}

impl fmt::Display for San {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            San::Ip(ip) => write!(f, "{ip}"),
            San::Dns(name) => f.write_str(name),
        }
    }
}

impl San {
    fn parse(raw: &str) -> Result<Option<San>, PkiError> {
        let trimmed = raw.trim();
        if trimmed.is_empty() {
            return Ok(None);
        }
        let unbracketed = trimmed
            .strip_prefix('[')
            .and_then(|s| s.strip_suffix(']'))
            .unwrap_or(trimmed);
        if let Ok(ip) = unbracketed.parse::<IpAddr>() {
            return Ok(Some(San::Ip(ip)));
        }
        let san = San::Dns(trimmed.to_ascii_lowercase());
        // Validate with the same parser clients' rustls uses, so we never issue a SAN that
        // could not be matched.
        if ServerName::try_from(san.probe_string()).is_err() {
            return Err(PkiError::InvalidSan {
                san: raw.to_string(),
                reason: "neither an IP address nor a valid DNS name".to_string(),
            });
        }
        Ok(Some(san))
    }

    /// A concrete name this SAN must match: wildcards are probed with one label.
    fn probe_string(&self) -> String {
        match self {
            San::Ip(ip) => ip.to_string(),
            San::Dns(name) => match name.strip_prefix("*.") {
                Some(rest) => format!("finale-probe.{rest}"),
                None => name.clone(),
            },
        }
    }

    /// How a client would name the server for this SAN (`None` only for names `parse`
    /// rejects).
    fn probe_name(&self) -> Option<ServerName<'static>> {
        ServerName::try_from(self.probe_string()).ok()
    }

    fn to_rcgen(&self) -> Result<SanType, PkiError> {
        Ok(match self {
            San::Ip(ip) => SanType::IpAddress(*ip),
            San::Dns(name) => {
                SanType::DnsName(name.clone().try_into().map_err(|error: rcgen::Error| {
                    PkiError::InvalidSan {
                        san: name.clone(),
                        reason: error.to_string(),
                    }
                })?)
            }
        })
    }
}

/// Defaults plus `extra`, parsed, deduplicated, in order.
fn normalize_sans(extra: &[String]) -> Result<Vec<San>, PkiError> {
    let mut sans: Vec<San> = Vec::new();
    for raw in DEFAULT_SERVING_SANS
        .iter()
        .copied()
        .chain(extra.iter().map(String::as_str))
    {
        if let Some(san) = San::parse(raw)?
            && !sans.contains(&san)
        {
            sans.push(san);
        }
    }
    Ok(sans)
}

// ---------------------------------------------------------------------------------------
// Files

fn create_private_dir(path: &Path) -> Result<(), PkiError> {
    // Durably, or a power cut could take the directory and the synced files in it away.
    finale_store::durable_fs::create_dir_all_durably_with_mode(path, 0o700)
        .map_err(io_err("create directory", path))?;
    if let Ok(meta) = fs::metadata(path)
        && meta.permissions().mode() & 0o077 != 0
    {
        tracing::warn!(path = %path.display(), mode = format_args!("{:o}", meta.permissions().mode() & 0o777), "PKI directory is accessible by other users; expected 0700");
    }
    Ok(())
}

fn read_optional(path: &Path) -> Result<Option<String>, PkiError> {
    match fs::read_to_string(path) {
        Ok(contents) => Ok(Some(contents)),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(PkiError::Io {
            op: "read",
            path: path.to_path_buf(),
            error,
        }),
    }
}

fn warn_if_readable_by_others(path: &Path) {
    if let Ok(meta) = fs::metadata(path)
        && meta.permissions().mode() & 0o077 != 0
    {
        tracing::warn!(path = %path.display(), mode = format_args!("{:o}", meta.permissions().mode() & 0o777), "secret file is accessible by other users; expected 0600");
    }
}

/// Replaces `path` with `contents` atomically and durably, mode 0600.
///
/// The temp file lives in the target directory so `rename` stays within one filesystem
/// (atomic); the directory is fsynced so the rename itself survives a crash.
fn write_atomic(path: &Path, contents: &[u8]) -> Result<(), PkiError> {
    let parent = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| PkiError::Io {
            op: "write",
            path: path.to_path_buf(),
            error: io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"),
        })?;
    let tmp = parent.join(format!(
        ".{name}.tmp-{}-{:016x}",
        std::process::id(),
        rand::rng().next_u64()
    ));

    let result = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(io_err("create", &tmp))?;
        // `mode` is filtered by the umask; set it explicitly so the result is exactly 0600.
        file.set_permissions(fs::Permissions::from_mode(0o600))
            .map_err(io_err("chmod", &tmp))?;
        file.write_all(contents).map_err(io_err("write", &tmp))?;
        file.sync_all().map_err(io_err("fsync", &tmp))?;
        fs::rename(&tmp, path).map_err(io_err("rename into place", path))
    })();
    if result.is_err() {
        // Best effort: the original error is what matters.
        let _ = fs::remove_file(&tmp);
        return result;
    }
    File::open(parent)
        .and_then(|dir| dir.sync_all())
        .map_err(io_err("fsync directory", parent))
}

// ---------------------------------------------------------------------------------------
// Kubeconfig

/// Writes a kubeconfig (mode 0600, atomically) with one cluster, one `admin` user holding
/// `token`, and one context (namespace `default`) that is also the current context.
///
/// The CA goes in as `certificate-authority-data` (base64 of the PEM), so the file is
/// self-contained. Missing parent directories are created with mode 0700.
pub fn write_kubeconfig(
    path: &Path,
    server_url: &str,
    cluster_name: &str,
    ca_pem: &str,
    token: &str,
) -> Result<(), PkiError> {
    if let Some(parent) = path.parent()
        && !parent.as_os_str().is_empty()
    {
        create_private_dir(parent)?;
    }
    write_atomic(
        path,
        render_kubeconfig(server_url, cluster_name, ca_pem, token).as_bytes(),
    )
}

fn render_kubeconfig(server_url: &str, cluster_name: &str, ca_pem: &str, token: &str) -> String {
    let name = yaml_scalar(cluster_name);
    let server = yaml_scalar(server_url);
    let ca_data = STANDARD.encode(ca_pem.as_bytes());
    let token = yaml_scalar(token);
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: {name}
  cluster:
    server: {server}
    certificate-authority-data: {ca_data}
users:
- name: {ADMIN_USER}
  user:
    token: {token}
contexts:
- name: {name}
  context:
    cluster: {name}
    user: {ADMIN_USER}
    namespace: default
current-context: {name}
"
    )
}

/// `s` as a YAML scalar: plain when that is unambiguous (a string starting with a letter,
/// made of URL-ish characters, not a YAML 1.1 boolean or null), double-quoted otherwise.
fn yaml_scalar(s: &str) -> String {
    const KEYWORDS: [&str; 10] = [
        "true", "false", "yes", "no", "on", "off", "y", "n", "null", "~",
    ];
    let plain = s.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "._/:@+=-".contains(c))
        && !KEYWORDS.iter().any(|k| s.eq_ignore_ascii_case(k));
    if plain {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_scalar_quotes_only_when_needed() {
        assert_eq!(yaml_scalar("finale"), "finale");
        assert_eq!(
            yaml_scalar("https://127.0.0.1:6443"),
            "https://127.0.0.1:6443"
        );
        assert_eq!(yaml_scalar("yes"), "\"yes\"");
        assert_eq!(yaml_scalar("123"), "\"123\"");
        assert_eq!(yaml_scalar("-abc_"), "\"-abc_\"");
        assert_eq!(yaml_scalar("a b"), "\"a b\"");
        assert_eq!(yaml_scalar("a\"b\\c\n"), "\"a\\\"b\\\\c\\u000a\"");
        assert_eq!(yaml_scalar(""), "\"\"");
    }

    #[test]
    fn yaml_scalars_round_trip_through_a_yaml_parser() {
        for s in [
            "finale", "yes", "123", "1e3", "-x", "a: b", "#c", "x\ny", "~", "null", "ünï", "[1]",
            "{a}", "'q'", "\"q\"", "a\tb",
        ] {
            let doc = format!("k: {}\n", yaml_scalar(s));
            let parsed: serde_json::Value =
                serde_saphyr::from_str(&doc).unwrap_or_else(|e| panic!("{doc:?}: {e}"));
            assert_eq!(
                parsed["k"],
                serde_json::Value::String(s.to_string()),
                "{doc:?}"
            );
        }
    }

    #[test]
    fn san_parsing() {
        let sans = normalize_sans(&[
            " 10.0.0.1 ".to_string(),
            "[fe80::1]".to_string(),
            "Example.COM".to_string(),
            "*.apps.example.com".to_string(),
            "localhost".to_string(),
            String::new(),
        ])
        .unwrap();
        let rendered: Vec<String> = sans.iter().map(San::to_string).collect();
        assert_eq!(
            rendered,
            [
                "127.0.0.1",
                "::1",
                "localhost",
                "10.0.0.1",
                "fe80::1",
                "example.com",
                "*.apps.example.com"
            ]
        );
        assert!(matches!(
            normalize_sans(&["not a name".to_string()]),
            Err(PkiError::InvalidSan { .. })
        ));
    }
}
