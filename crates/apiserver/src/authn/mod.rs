//! Authentication: who sent a request. Like kube-apiserver's union of authenticators, a
//! request is authenticated by the first that accepts it:
//!
//! 1. a client certificate (x509): the TLS layer requests one and checks that the client
//!    holds its key; [`ClientCertAuthenticator`] then checks, once per connection, that it
//!    chains to the cluster CA, is valid now and is meant for client authentication. Its
//!    subject's CN is the user, its O values are the groups;
//! 2. a bearer token from the static table ([`TokenAuthenticator`]): the admin token, and
//!    those of `--token-auth-file` ([`load_token_file`], kube-apiserver's CSV format);
//! 3. a service-account token ([`service_account`]): a JWT this server issued through
//!    TokenRequest, valid while its ServiceAccount (and bound object) exist.
//!
//! [`token_review`] answers `TokenReview`s with the same chain of token authenticators.
//!
//! Every authenticated user is also in `system:authenticated`. A request neither accepts is
//! a 401 `Unauthorized` `Status` whose message says what to present.
//!
//! # Guarantees
//! - A certificate that does not chain to the CA, is expired or not yet valid, or lacks the
//!   clientAuth usage never authenticates anyone, whatever its subject says.
//! - Bearer tokens are compared in constant time.
//!
//! # Caveats
//! - Unlike upstream, whose 401 body says only `Unauthorized`, the message explains what to
//!   fix; it never echoes a token.

pub mod service_account;
pub mod token_review;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};
use subtle::ConstantTimeEq as _;

use crate::pki::{
    ADMIN_TOKEN_FILE, ADMIN_USER, AUTHENTICATED_GROUP, CA_CERT_FILE, KUBECONFIG_FILE,
    MASTERS_GROUP, PKI_DIR,
};

/// An authenticated user: Kubernetes' `user.Info` without extras.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Identity {
    pub user: String,
    /// Empty when the authenticator knows none (client certificates, the admin token).
    pub uid: String,
    pub groups: Vec<String>,
    /// Upstream's `user.Info` extras: what else the authenticator knows (a service-account
    /// token's id and bound Pod).
    pub extra: BTreeMap<String, Vec<String>>,
}

impl Identity {
    /// `admin` in `system:masters` and `system:authenticated`.
    pub fn admin() -> Identity {
        Identity {
            user: ADMIN_USER.to_string(),
            uid: String::new(),
            groups: vec![MASTERS_GROUP.to_string(), AUTHENTICATED_GROUP.to_string()],
            extra: BTreeMap::new(),
        }
    }

    /// The `UserInfo` of reviews (`TokenReview`, `SelfSubjectReview`): empty fields omitted.
    pub fn user_info(&self) -> serde_json::Value {
        let mut info = serde_json::json!({"username": self.user, "groups": self.groups});
        if !self.uid.is_empty() {
            info["uid"] = serde_json::Value::from(self.uid.clone());
        }
        if !self.extra.is_empty() {
            info["extra"] = serde_json::json!(self.extra);
        }
        info
    }

    /// Kubernetes adds `system:authenticated` to every authenticated user.
    fn with_authenticated_group(mut self) -> Identity {
        if !self.groups.iter().any(|g| g == AUTHENTICATED_GROUP) {
            self.groups.push(AUTHENTICATED_GROUP.to_string());
        }
        self
    }
}

/// Why a request could not be authenticated. Every variant maps to HTTP 401 `Unauthorized`;
/// the messages tell the user what to fix and never echo a token.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error(
        "missing credentials: present a client certificate signed by this server's CA or send \
         `Authorization: Bearer <token>`; the server writes an admin kubeconfig with a token to \
         <data-dir>/{KUBECONFIG_FILE} (use it with --kubeconfig or KUBECONFIG; note kubectl \
         sends no credentials over plain http://)"
    )]
    MissingCredentials,
    #[error(
        "invalid client certificate: {reason}; present one signed by this server's CA \
         (<data-dir>/{PKI_DIR}/{CA_CERT_FILE}) for client authentication, or use the admin \
         kubeconfig in <data-dir>/{KUBECONFIG_FILE}"
    )]
    InvalidClientCertificate { reason: String },
    #[error(
        "unsupported authorization scheme {scheme:?}: only `Authorization: Bearer <token>` is \
         accepted; use the admin kubeconfig in <data-dir>/{KUBECONFIG_FILE}"
    )]
    UnsupportedScheme { scheme: String },
    #[error(
        "invalid bearer token: it matches no token of this server (the admin token, or one of \
         --token-auth-file); use the token from the admin kubeconfig in <data-dir>/{KUBECONFIG_FILE} (also in \
         <data-dir>/{PKI_DIR}/{ADMIN_TOKEN_FILE}); tokens change only if that file is deleted"
    )]
    InvalidToken,
    /// A service-account token of this server that no longer (or does not) authenticate.
    #[error(
        "invalid bearer token: {reason}; request a new one with `kubectl create token \
         SERVICEACCOUNT`"
    )]
    InvalidServiceAccountToken { reason: String },
}

#[derive(Clone)]
struct TokenEntry {
    token: Box<[u8]>,
    identity: Identity,
}

/// A table of static bearer tokens, each mapped to an [`Identity`].
///
/// Lookups compare the presented token against every entry in constant time per entry and
/// never stop early, so timing reveals neither token bytes nor which entry matched (only the
/// length of a token can leak, and generated tokens all have the same length).
#[derive(Clone, Default)]
pub struct TokenAuthenticator {
    entries: Arc<Vec<TokenEntry>>,
}

impl fmt::Debug for TokenAuthenticator {
    // Tokens are secrets; show only who can log in.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenAuthenticator")
            .field(
                "users",
                &self
                    .entries
                    .iter()
                    .map(|e| e.identity.user.as_str())
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl TokenAuthenticator {
    /// An empty table: every request is rejected.
    pub fn new() -> TokenAuthenticator {
        TokenAuthenticator::default()
    }

    /// Adds `token` for `identity`, replacing an entry with the same token. Empty tokens are
    /// ignored (they could never be presented).
    pub fn insert(&mut self, token: impl Into<String>, identity: Identity) {
        let token: String = token.into();
        if token.is_empty() {
            return;
        }
        // Copy-on-write: clones handed out earlier keep their snapshot.
        let entries = Arc::make_mut(&mut self.entries);
        entries.retain(|e| *e.token != *token.as_bytes());
        entries.push(TokenEntry {
            token: token.into_bytes().into_boxed_slice(),
            identity,
        });
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Authenticates the value of an `Authorization` header (`None` when absent).
    ///
    /// Accepts `Bearer <token>` with the scheme in any case and surrounding whitespace
    /// trimmed, like kube-apiserver.
    pub fn authenticate(&self, authorization: Option<&str>) -> Result<Identity, AuthError> {
        self.lookup(bearer_token_of(authorization)?)
    }

    /// The identity of `token`, a bare token without its `Bearer ` scheme.
    pub fn lookup(&self, token: &str) -> Result<Identity, AuthError> {
        let mut matched: Option<&Identity> = None;
        for entry in self.entries.iter() {
            let equal: bool = entry.token.ct_eq(token.as_bytes()).into();
            if equal && matched.is_none() {
                matched = Some(&entry.identity);
            }
        }
        matched
            .map(|identity| identity.clone().with_authenticated_group())
            .ok_or(AuthError::InvalidToken)
    }

    /// [`authenticate`](Self::authenticate) on a request's headers (see
    /// [`authorization_header`]).
    pub fn authenticate_headers(&self, headers: &http::HeaderMap) -> Result<Identity, AuthError> {
        self.authenticate(authorization_header(headers)?)
    }
}

/// A request's one `Authorization` header, `None` when it has none. A header that is not
/// valid visible ASCII cannot hold a token and counts as invalid; several `Authorization`
/// headers are rejected as ambiguous.
pub fn authorization_header(headers: &http::HeaderMap) -> Result<Option<&str>, AuthError> {
    let mut values = headers.get_all(http::header::AUTHORIZATION).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(AuthError::InvalidToken);
    }
    value
        .to_str()
        .map(Some)
        .map_err(|_| AuthError::InvalidToken)
}

/// The token of an `Authorization` header value: `Bearer <token>`, the scheme in any case.
fn bearer_token_of(authorization: Option<&str>) -> Result<&str, AuthError> {
    let header = authorization.map(str::trim).unwrap_or_default();
    if header.is_empty() {
        return Err(AuthError::MissingCredentials);
    }
    let (scheme, token) = header
        .split_once(|c: char| c.is_ascii_whitespace())
        .unwrap_or((header, ""));
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(AuthError::UnsupportedScheme {
            scheme: sanitize_scheme(scheme),
        });
    }
    let token = token.trim();
    if token.is_empty() {
        return Err(AuthError::MissingCredentials);
    }
    Ok(token)
}

/// Echoes the scheme only when it looks like one (`Basic`, `Negotiate`, ...): a client that
/// sends a bare token without `Bearer ` must not find its secret in error messages or logs.
fn sanitize_scheme(scheme: &str) -> String {
    if !scheme.is_empty() && scheme.len() <= 16 && scheme.bytes().all(|b| b.is_ascii_alphabetic()) {
        scheme.to_string()
    } else {
        "<not a scheme name; missing `Bearer `?>".to_string()
    }
}

/// Maps a client certificate that the TLS layer has already verified against our CA (see
/// [`Pki::server_tls_config`]) to an identity the Kubernetes way: subject CN → user,
/// subject O values → groups, plus `system:authenticated`.
///
/// Returns `None` when the certificate cannot be parsed or has no usable CN. Never call this
/// on an unverified certificate: it checks nothing but the subject.
pub fn identity_from_client_cert(cert: &CertificateDer<'_>) -> Option<Identity> {
    let (user, groups) = der::subject_cn_and_orgs(cert.as_ref())?;
    if user.is_empty() {
        return None;
    }
    Some(
        Identity {
            user,
            uid: String::new(),
            groups,
            extra: BTreeMap::new(),
        }
        .with_authenticated_group(),
    )
}

/// Just enough DER to read a certificate's subject; avoids an x509 parser dependency.
mod der {
    const SEQUENCE: u8 = 0x30;
    const SET: u8 = 0x31;
    const OID: u8 = 0x06;
    const VERSION_TAG: u8 = 0xA0;
    const UTF8_STRING: u8 = 0x0C;
    const PRINTABLE_STRING: u8 = 0x13;
    const IA5_STRING: u8 = 0x16;
    /// 2.5.4.3 and 2.5.4.10.
    const OID_COMMON_NAME: &[u8] = &[0x55, 0x04, 0x03];
    const OID_ORGANIZATION: &[u8] = &[0x55, 0x04, 0x0A];

    /// Splits one TLV off `input`: `(tag, content, rest)`.
    pub(super) fn read_tlv(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
        let (&tag, rest) = input.split_first()?;
        let (&first, rest) = rest.split_first()?;
        let (len, rest) = if first < 0x80 {
            (usize::from(first), rest)
        } else {
            let n = usize::from(first & 0x7f);
            if n == 0 || n > 4 || rest.len() < n {
                return None;
            }
            let len = rest[..n]
                .iter()
                .fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
            (len, &rest[n..])
        };
        if rest.len() < len {
            return None;
        }
        Some((tag, &rest[..len], &rest[len..]))
    }

    fn expect(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
        let (found, content, rest) = read_tlv(input)?;
        (found == tag).then_some((content, rest))
    }

    /// `(CN, [O...])` of the subject. With several CNs the last wins, as in Go's `pkix.Name`.
    pub(super) fn subject_cn_and_orgs(cert: &[u8]) -> Option<(String, Vec<String>)> {
        let (cert, _) = expect(cert, SEQUENCE)?;
        let (tbs, _) = expect(cert, SEQUENCE)?;
        let mut rest = tbs;
        if rest.first() == Some(&VERSION_TAG) {
            rest = read_tlv(rest)?.2;
        }
        let (_serial_tag, _serial, rest) = read_tlv(rest)?;
        let (_signature_alg, rest) = expect(rest, SEQUENCE)?;
        let (_issuer, rest) = expect(rest, SEQUENCE)?;
        let (_validity, rest) = expect(rest, SEQUENCE)?;
        let (mut subject, _) = expect(rest, SEQUENCE)?;

        let mut cn = None;
        let mut orgs = Vec::new();
        while !subject.is_empty() {
            let (mut rdn, next) = expect(subject, SET)?;
            subject = next;
            while !rdn.is_empty() {
                let (attribute, next) = expect(rdn, SEQUENCE)?;
                rdn = next;
                let (oid, value) = expect(attribute, OID)?;
                let (value_tag, value, _) = read_tlv(value)?;
                let text = match value_tag {
                    UTF8_STRING | PRINTABLE_STRING | IA5_STRING => {
                        std::str::from_utf8(value).ok()?.to_string()
                    }
                    // Other string types never appear in certificates we issue.
                    _ => continue,
                };
                if oid == OID_COMMON_NAME {
                    cn = Some(text);
                } else if oid == OID_ORGANIZATION {
                    orgs.push(text);
                }
            }
        }
        Some((cn?, orgs))
    }
}

// ---------------------------------------------------------------------------------------
// Client certificates

/// What a connection's client certificate proved, decided once per connection after the
/// TLS handshake and attached to each of its requests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientCertificate {
    /// The client presented none.
    Absent,
    /// It chains to the cluster CA: this is who the client is.
    Verified(Identity),
    /// It was presented but is not acceptable, for this reason.
    Rejected(String),
}

/// Checks client certificates the way upstream's x509 authenticator does: chain to the
/// cluster CA, validity period, extended key usage clientAuth; then subject CN → user and
/// O → groups.
#[derive(Clone)]
pub struct ClientCertAuthenticator {
    verifier: Arc<dyn ClientCertVerifier>,
}

impl fmt::Debug for ClientCertAuthenticator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientCertAuthenticator")
            .finish_non_exhaustive()
    }
}

impl ClientCertAuthenticator {
    /// `verifier` decides whether a chain is trusted (a `WebPkiClientVerifier` over the CA).
    pub fn new(verifier: Arc<dyn ClientCertVerifier>) -> ClientCertAuthenticator {
        ClientCertAuthenticator { verifier }
    }

    /// Judges the chain a client presented (leaf first), if any.
    pub fn check(&self, chain: Option<&[CertificateDer<'_>]>) -> ClientCertificate {
        let Some((leaf, intermediates)) = chain.and_then(<[_]>::split_first) else {
            return ClientCertificate::Absent;
        };
        if let Err(error) = self
            .verifier
            .verify_client_cert(leaf, intermediates, UnixTime::now())
        {
            return ClientCertificate::Rejected(error.to_string());
        }
        match identity_from_client_cert(leaf) {
            Some(identity) => ClientCertificate::Verified(identity),
            None => ClientCertificate::Rejected(
                "its subject has no common name (CN), which names the user".into(),
            ),
        }
    }

    /// A TLS verifier that asks clients for a certificate and checks that they hold its key,
    /// but accepts any certificate: trust is decided by [`check`](Self::check) after the
    /// handshake, so that an untrusted certificate gets a 401 `Status` instead of a failed
    /// handshake (upstream's `tls.RequestClientCert`). The CA is still sent as the hint of
    /// acceptable issuers, so clients with several certificates pick the right one.
    pub fn handshake_verifier(&self) -> Arc<dyn ClientCertVerifier> {
        Arc::new(RequestClientCert {
            inner: Arc::clone(&self.verifier),
        })
    }
}

#[derive(Debug)]
struct RequestClientCert {
    inner: Arc<dyn ClientCertVerifier>,
}

impl ClientCertVerifier for RequestClientCert {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    // The proof that the client holds the certificate's key: always checked.
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

// ---------------------------------------------------------------------------------------
// The union

/// Client certificates first, then static bearer tokens, then service-account tokens, as
/// kube-apiserver orders them.
#[derive(Clone, Debug)]
pub struct Authenticator {
    pub tokens: TokenAuthenticator,
    /// None only where no registry exists (unit tests of the static chain).
    pub service_accounts: Option<Arc<service_account::ServiceAccountTokens>>,
}

impl Authenticator {
    /// Who sent a request that came with `certificate` (its connection's) and `headers`.
    pub async fn authenticate(
        &self,
        certificate: &ClientCertificate,
        headers: &http::HeaderMap,
    ) -> Result<Identity, AuthError> {
        if let ClientCertificate::Verified(identity) = certificate {
            return Ok(identity.clone());
        }
        let token = match authorization_header(headers).and_then(bearer_token_of) {
            Ok(token) => token,
            Err(AuthError::MissingCredentials) => {
                return Err(match certificate {
                    ClientCertificate::Rejected(reason) => AuthError::InvalidClientCertificate {
                        reason: reason.clone(),
                    },
                    _ => AuthError::MissingCredentials,
                });
            }
            Err(error) => return Err(error),
        };
        if let Ok(identity) = self.tokens.lookup(token) {
            return Ok(identity);
        }
        let service_accounts = self
            .service_accounts
            .as_ref()
            .ok_or(AuthError::InvalidToken)?;
        match service_accounts
            .authenticate(token, service_accounts.api_audiences())
            .await?
        {
            Some((identity, _)) => Ok(identity),
            None => Err(AuthError::InvalidToken),
        }
    }
}

/// A `--token-auth-file` that cannot be used; the message names the file and the line.
#[derive(Debug, thiserror::Error)]
#[error("--token-auth-file {path}: {problem}")]
pub struct TokenFileError {
    path: String,
    problem: String,
}

/// Adds the tokens of a static token file to `tokens`, in kube-apiserver's format: CSV, one
/// `token,user,uid[,"group1,group2,…"]` per line (the groups column quoted when it lists
/// several). As upstream, a line with fewer than three columns is refused, a line with an
/// empty token is skipped with a warning, and a later line with the same token wins.
/// Unlike upstream, lines starting with `#` are comments. Returns how many tokens it added.
pub fn load_token_file(
    path: &std::path::Path,
    tokens: &mut TokenAuthenticator,
) -> Result<usize, TokenFileError> {
    let error = |problem: String| TokenFileError {
        path: path.display().to_string(),
        problem,
    };
    let text = std::fs::read(path).map_err(|e| error(format!("cannot read it: {e}")))?;
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .comment(Some(b'#'))
        .trim(csv::Trim::All)
        .from_reader(text.as_slice());
    let mut added = 0;
    for record in reader.records() {
        let record = record.map_err(|e| {
            let line = e.position().map_or(0, |p| p.line());
            error(format!("line {line}: not valid CSV: {e}"))
        })?;
        let line = record.position().map_or(0, |p| p.line());
        if record.len() < 3 {
            return Err(error(format!(
                "line {line}: must have at least 3 columns (token, user name, user uid), found {}",
                record.len()
            )));
        }
        if record[0].is_empty() {
            tracing::warn!(file = %path.display(), line, "empty token in the token file; line skipped");
            continue;
        }
        if record[1].is_empty() {
            return Err(error(format!("line {line}: the user name is empty")));
        }
        let groups = record
            .get(3)
            .filter(|groups| !groups.is_empty())
            .map(|groups| groups.split(',').map(|g| g.trim().to_string()).collect())
            .unwrap_or_default();
        tokens.insert(
            record[0].to_string(),
            Identity {
                user: record[1].to_string(),
                uid: record[2].to_string(),
                groups,
                extra: Default::default(),
            },
        );
        added += 1;
    }
    Ok(added)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn der_reader_rejects_truncated_input() {
        assert!(der::read_tlv(&[0x30]).is_none());
        assert!(der::read_tlv(&[0x30, 0x05, 0x01]).is_none());
        assert!(der::read_tlv(&[0x30, 0x81]).is_none());
        assert!(der::read_tlv(&[0x30, 0x80]).is_none());
        assert_eq!(
            der::read_tlv(&[0x04, 0x81, 0x01, 0xAA, 0xBB]),
            Some((0x04, &[0xAA][..], &[0xBB][..]))
        );
        assert!(der::subject_cn_and_orgs(&[0x30, 0x00]).is_none());
        assert!(der::subject_cn_and_orgs(b"garbage").is_none());
    }

    #[test]
    fn token_table_replaces_duplicates_and_hides_tokens() {
        let mut auth = TokenAuthenticator::new();
        auth.insert("t1", Identity::admin());
        let snapshot = auth.clone();
        auth.insert(
            "t1",
            Identity {
                user: "bob".into(),
                uid: String::new(),
                groups: vec![],
                extra: Default::default(),
            },
        );
        auth.insert("", Identity::admin());
        assert_eq!(auth.len(), 1);
        assert_eq!(auth.authenticate(Some("Bearer t1")).unwrap().user, "bob");
        // Clones are independent snapshots.
        assert_eq!(
            snapshot.authenticate(Some("Bearer t1")).unwrap().user,
            "admin"
        );
        assert!(!format!("{auth:?}").contains("t1"));
    }

    #[tokio::test]
    async fn certificates_come_first_then_tokens() {
        let mut tokens = TokenAuthenticator::new();
        tokens.insert("t1", Identity::admin());
        let authenticator = Authenticator {
            tokens,
            service_accounts: None,
        };
        let alice = Identity {
            user: "alice".into(),
            uid: String::new(),
            groups: vec![AUTHENTICATED_GROUP.into()],
            extra: Default::default(),
        };
        let mut with_token = http::HeaderMap::new();
        with_token.insert(http::header::AUTHORIZATION, "Bearer t1".parse().unwrap());
        let mut wrong_token = http::HeaderMap::new();
        wrong_token.insert(http::header::AUTHORIZATION, "Bearer nope".parse().unwrap());
        let none = http::HeaderMap::new();

        let verified = ClientCertificate::Verified(alice.clone());
        assert_eq!(
            authenticator.authenticate(&verified, &wrong_token).await,
            Ok(alice)
        );
        let rejected = ClientCertificate::Rejected("BadSignature".into());
        assert_eq!(
            authenticator.authenticate(&rejected, &none).await,
            Err(AuthError::InvalidClientCertificate {
                reason: "BadSignature".into()
            })
        );
        // A token still authenticates next to a certificate that does not.
        assert_eq!(
            authenticator
                .authenticate(&rejected, &with_token)
                .await
                .map(|i| i.user),
            Ok(ADMIN_USER.to_string())
        );
        assert_eq!(
            authenticator.authenticate(&rejected, &wrong_token).await,
            Err(AuthError::InvalidToken)
        );
        assert_eq!(
            authenticator
                .authenticate(&ClientCertificate::Absent, &none)
                .await,
            Err(AuthError::MissingCredentials)
        );
    }

    fn token_file(text: &str) -> (tempfile::NamedTempFile, TokenAuthenticator) {
        let file = tempfile::NamedTempFile::new().expect("temporary file");
        std::fs::write(file.path(), text).expect("write the token file");
        (file, TokenAuthenticator::new())
    }

    #[test]
    fn a_token_file_in_kubes_format_adds_users_with_uids_and_groups() {
        let (file, mut tokens) = token_file(
            "# team tokens\n\
             tok-alice,alice,1001,\"dev,ops\"\n\
             \n\
             tok-bob, bob ,1002\n\
             ,nobody,1003\n",
        );
        assert_eq!(load_token_file(file.path(), &mut tokens).expect("load"), 2);
        let alice = tokens
            .authenticate(Some("Bearer tok-alice"))
            .expect("alice");
        assert_eq!(alice.user, "alice");
        assert_eq!(alice.uid, "1001");
        assert_eq!(alice.groups, ["dev", "ops", AUTHENTICATED_GROUP]);
        let bob = tokens.authenticate(Some("Bearer tok-bob")).expect("bob");
        assert_eq!((bob.user.as_str(), bob.groups.len()), ("bob", 1));
        assert_eq!(
            tokens.authenticate(Some("Bearer ")),
            Err(AuthError::MissingCredentials)
        );
    }

    #[test]
    fn a_bad_token_file_is_refused_naming_the_line() {
        let (file, mut tokens) = token_file("tok-a,alice,1\ntok-b,bob\n");
        let error = load_token_file(file.path(), &mut tokens).expect_err("two columns");
        let message = error.to_string();
        assert!(
            message.contains(
                "line 2: must have at least 3 columns (token, user name, user uid), found 2"
            ),
            "{message}"
        );
        assert!(message.starts_with("--token-auth-file "), "{message}");
        let (file, mut tokens) = token_file("tok-a,\"alice,1\n");
        let message = load_token_file(file.path(), &mut tokens)
            .expect_err("an unterminated quote")
            .to_string();
        assert!(message.contains("line 1"), "{message}");
        let missing = load_token_file(std::path::Path::new("/nonexistent/tokens.csv"), &mut tokens)
            .expect_err("no file")
            .to_string();
        assert!(missing.contains("cannot read it"), "{missing}");
    }
}
