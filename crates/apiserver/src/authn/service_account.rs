//! Service-account tokens: kube-apiserver's TokenRequest (`POST
//! /api/v1/namespaces/NS/serviceaccounts/NAME/token`, what `kubectl create token` sends) and
//! the authenticator that accepts the bound JWTs it issues.
//!
//! A token is a JWT signed with ES256 by the key in the PKI directory (`sa.key`, see
//! [`crate::pki`]), with upstream's claims: `iss` (`--service-account-issuer`), `sub`
//! (`system:serviceaccount:NS:NAME`), `aud`, `exp`, `iat`, `nbf`, `jti`, and the private claim
//! `kubernetes.io` naming the namespace, the ServiceAccount (name and uid) and the object the
//! token is bound to (a Pod or a Secret, name and uid).
//!
//! # Guarantees
//! - A token authenticates only while its ServiceAccount exists with the uid it was issued
//!   for, and so does the object it is bound to: deleting either, or re-creating it (a new
//!   uid), invalidates every token issued for it at once. The objects are read on every
//!   request, never cached. As upstream, an object whose deletion started less than 60 s ago
//!   still validates its tokens (a terminating Pod may still call the API server).
//! - A token must name an audience the server accepts (`--api-audiences`, by default the
//!   issuer) and be within `nbf`..`exp`. A `TokenReview` may ask for other audiences.
//! - Replicas that share a PKI directory share the key, so each accepts the others' tokens.
//!
//! # Assumptions
//! - The signing key is ECDSA P-256 (what the PKI generates). Further verification keys
//!   (`--service-account-key-file`) are P-256 public keys or private keys in PEM.
//!
//! # Caveats
//! - Signatures are verified once per token and the result cached (bounded) until the
//!   token expires; the checks of claims and of the bound objects run on every request.
//! - Tokens bound to Nodes are refused at issue: this server does not serve Nodes yet.
//! - Upstream's legacy Secret-based tokens (`kubernetes.io/service-account-token` Secrets)
//!   are not issued or accepted.
//! - The OIDC discovery documents (`/.well-known/openid-configuration`, `/openid/v1/jwks`) are
//!   not served.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use rcgen::PublicKeyData as _;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

use super::{AuthError, Identity};
use crate::pki::AUTHENTICATED_GROUP;
use crate::registry::Registry;
use crate::resources::ResourceType;
use crate::status::{ApiError, ApiResult};
use crate::validation::FieldError;

/// kubeadm's and most distributions' `--service-account-issuer`.
pub const DEFAULT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";
/// Every service account is in this group, and in `system:serviceaccounts:NS`.
pub const SERVICE_ACCOUNTS_GROUP: &str = "system:serviceaccounts";
/// User names of service accounts: `system:serviceaccount:NS:NAME`.
pub const SERVICE_ACCOUNT_USER_PREFIX: &str = "system:serviceaccount:";

/// TokenRequest's `spec.expirationSeconds` default, minimum and maximum (upstream's).
const DEFAULT_EXPIRATION_SECONDS: i64 = 3600;
const MIN_EXPIRATION_SECONDS: i64 = 600;
const MAX_EXPIRATION_SECONDS: i64 = 1 << 32;
/// Upstream keeps accepting the tokens of an object for this long after its deletion began.
const DELETION_GRACE_SECONDS: i64 = 60;
/// How many verified signatures are remembered; beyond it the cache starts over.
const VERIFIED_CACHE_ENTRIES: usize = 8192;

/// The extras upstream attaches to a service account's user info.
pub const EXTRA_CREDENTIAL_ID: &str = "authentication.kubernetes.io/credential-id";
pub const EXTRA_POD_NAME: &str = "authentication.kubernetes.io/pod-name";
pub const EXTRA_POD_UID: &str = "authentication.kubernetes.io/pod-uid";

/// kube-apiserver's service-account flags.
#[derive(Clone, Debug)]
pub struct ServiceAccountTokenOptions {
    /// `--service-account-issuer`: the `iss` of issued tokens, the only one accepted.
    pub issuer: String,
    /// `--api-audiences`: what a token must be meant for to authenticate to this server;
    /// empty means the issuer.
    pub api_audiences: Vec<String>,
    /// `--service-account-key-file`: further public keys (PEM) tokens may be signed with,
    /// beside the signing key's own.
    pub key_files: Vec<PathBuf>,
    /// `--service-account-max-token-expiration`: longer requests are shortened to it.
    pub max_expiration_seconds: Option<i64>,
}

impl Default for ServiceAccountTokenOptions {
    fn default() -> Self {
        ServiceAccountTokenOptions {
            issuer: DEFAULT_ISSUER.to_string(),
            api_audiences: Vec::new(),
            key_files: Vec::new(),
            max_expiration_seconds: None,
        }
    }
}

/// The claims of a service-account token.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Claims {
    pub iss: String,
    pub sub: String,
    #[serde(deserialize_with = "one_or_many")]
    pub aud: Vec<String>,
    pub exp: i64,
    pub iat: i64,
    pub nbf: i64,
    #[serde(default)]
    pub jti: String,
    #[serde(rename = "kubernetes.io")]
    pub kubernetes: KubernetesClaims,
}

/// The private claim `kubernetes.io`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct KubernetesClaims {
    pub namespace: String,
    pub serviceaccount: ObjectClaim,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<ObjectClaim>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<ObjectClaim>,
}

/// A name and uid the token is tied to.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ObjectClaim {
    pub name: String,
    pub uid: String,
}

/// `aud` is a string or a list of strings (RFC 7519 §4.1.3).
fn one_or_many<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    Ok(match OneOrMany::deserialize(deserializer)? {
        OneOrMany::One(one) => vec![one],
        OneOrMany::Many(many) => many,
    })
}

/// A key tokens may be signed with, named as upstream names it in the JWT header: the
/// base64url SHA-256 of its SubjectPublicKeyInfo.
struct VerifyingKey {
    kid: String,
    key: DecodingKey,
}

/// The keys: one that signs, several that verify.
pub struct TokenKeys {
    signing: EncodingKey,
    signing_kid: String,
    verifying: Vec<VerifyingKey>,
}

/// A key that cannot be used; the message names the file.
#[derive(Debug, thiserror::Error)]
#[error("{what} {path}: {problem}")]
pub struct KeyError {
    what: &'static str,
    path: String,
    problem: String,
}

impl TokenKeys {
    /// The signing key (PKCS#8 PEM, ECDSA P-256) and the extra verification key files.
    pub fn new(signing_key_pem: &str, key_files: &[PathBuf]) -> Result<TokenKeys, KeyError> {
        let key_error = |what: &'static str, path: &str, problem: String| KeyError {
            what,
            path: path.to_string(),
            problem,
        };
        let signing_flag = "--service-account-signing-key-file";
        let pair = rcgen::KeyPair::from_pem(signing_key_pem)
            .map_err(|e| key_error(signing_flag, "sa.key", e.to_string()))?;
        let signing = EncodingKey::from_ec_pem(signing_key_pem.as_bytes())
            .map_err(|e| key_error(signing_flag, "sa.key", e.to_string()))?;
        let signing_kid = key_id(&pair.subject_public_key_info());
        let mut verifying = vec![VerifyingKey {
            kid: signing_kid.clone(),
            key: DecodingKey::from_ec_pem(pair.public_key_pem().as_bytes())
                .map_err(|e| key_error(signing_flag, "sa.key", e.to_string()))?,
        }];
        for file in key_files {
            let shown = file.display().to_string();
            let flag = "--service-account-key-file";
            let text = std::fs::read_to_string(file)
                .map_err(|e| key_error(flag, &shown, format!("cannot read it: {e}")))?;
            let (public_pem, der) =
                public_key_of(&text).map_err(|problem| key_error(flag, &shown, problem))?;
            let key = DecodingKey::from_ec_pem(public_pem.as_bytes()).map_err(|e| {
                key_error(flag, &shown, format!("not an ECDSA P-256 public key: {e}"))
            })?;
            verifying.push(VerifyingKey {
                kid: key_id(&der),
                key,
            });
        }
        Ok(TokenKeys {
            signing,
            signing_kid,
            verifying,
        })
    }

    /// Signs `claims`.
    pub fn sign(&self, claims: &Claims) -> Result<String, jsonwebtoken::errors::Error> {
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(self.signing_kid.clone());
        jsonwebtoken::encode(&header, claims, &self.signing)
    }

    /// The claims of `token` if one of the keys signed it and it names `issuer`; `None` when
    /// it is not a JWT of this issuer at all (another authenticator may know it). Time and
    /// audience are not checked here: see [`check_claims`].
    pub fn verify(&self, token: &str, issuer: &str) -> Result<Option<Claims>, AuthError> {
        let Ok(header) = jsonwebtoken::decode_header(token) else {
            return Ok(None);
        };
        if header.alg != Algorithm::ES256 {
            return Ok(None);
        }
        let mut validation = Validation::new(Algorithm::ES256);
        validation.validate_exp = false;
        validation.validate_nbf = false;
        validation.validate_aud = false;
        validation.required_spec_claims.clear();
        // A key named by `kid` first; tokens without one try every key, as upstream.
        let mut candidates: Vec<&VerifyingKey> = self
            .verifying
            .iter()
            .filter(|k| header.kid.as_deref() == Some(k.kid.as_str()))
            .collect();
        if candidates.is_empty() {
            candidates = self.verifying.iter().collect();
        }
        let mut last_error = None;
        for candidate in candidates {
            match jsonwebtoken::decode::<Value>(token, &candidate.key, &validation) {
                Ok(data) => {
                    if data.claims.get("iss").and_then(Value::as_str) != Some(issuer) {
                        return Ok(None);
                    }
                    return serde_json::from_value(data.claims).map(Some).map_err(|e| {
                        AuthError::InvalidServiceAccountToken {
                            reason: format!("its claims are malformed: {e}"),
                        }
                    });
                }
                Err(error) => last_error = Some(error),
            }
        }
        // A JWT none of the keys verifies: ours tampered with, or another issuer's.
        match unverified_issuer(token) {
            Some(iss) if iss == issuer => Err(AuthError::InvalidServiceAccountToken {
                reason: format!(
                    "invalid signature ({}): it was not signed by this server's \
                     service-account key",
                    last_error.map(|e| e.to_string()).unwrap_or_default()
                ),
            }),
            _ => Ok(None),
        }
    }
}

/// The `iss` of a JWT whose signature is not (yet) checked: only to word an error.
fn unverified_issuer(token: &str) -> Option<String> {
    let payload = token.split('.').nth(1)?;
    let bytes = URL_SAFE_NO_PAD.decode(payload).ok()?;
    let claims: Value = serde_json::from_slice(&bytes).ok()?;
    claims.get("iss")?.as_str().map(str::to_string)
}

/// Upstream's key id: base64url (no padding) of the SHA-256 of the DER SubjectPublicKeyInfo.
fn key_id(spki_der: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(spki_der))
}

/// The public half of a PEM key file, as PEM and DER (SubjectPublicKeyInfo).
fn public_key_of(text: &str) -> Result<(String, Vec<u8>), String> {
    if text.contains("PRIVATE KEY") {
        let pair = rcgen::KeyPair::from_pem(text)
            .map_err(|e| format!("not a PKCS#8 ECDSA private key: {e}"))?;
        return Ok((pair.public_key_pem(), pair.subject_public_key_info()));
    }
    let mut reader = std::io::BufReader::new(text.as_bytes());
    for item in rustls_pemfile::read_all(&mut reader) {
        if let Ok(rustls_pemfile::Item::SubjectPublicKeyInfo(der)) = item {
            return Ok((text.to_string(), der.as_ref().to_vec()));
        }
    }
    Err("holds no `PUBLIC KEY` or `PRIVATE KEY` PEM block".to_string())
}

/// Checks what a verified token says against the time and the audiences asked for; returns
/// the audiences the token and the request share (what a `TokenReview` reports).
pub fn check_claims(
    claims: &Claims,
    now: i64,
    audiences: &[String],
) -> Result<Vec<String>, AuthError> {
    let invalid = |reason: String| AuthError::InvalidServiceAccountToken { reason };
    if now >= claims.exp {
        return Err(invalid("service account token has expired".to_string()));
    }
    if now < claims.nbf {
        return Err(invalid(
            "service account token is not valid yet".to_string(),
        ));
    }
    let shared: Vec<String> = audiences
        .iter()
        .filter(|a| claims.aud.contains(a))
        .cloned()
        .collect();
    if shared.is_empty() {
        return Err(invalid(format!(
            "token audiences {:?} is invalid for the target audiences {:?}",
            claims.aud, audiences
        )));
    }
    Ok(shared)
}

/// The identity a service account's token stands for (upstream's `UserInfo` of it).
pub fn identity_of(claims: &Claims) -> Identity {
    let k = &claims.kubernetes;
    let mut extra = BTreeMap::new();
    if !claims.jti.is_empty() {
        extra.insert(
            EXTRA_CREDENTIAL_ID.to_string(),
            vec![format!("JTI={}", claims.jti)],
        );
    }
    if let Some(pod) = &k.pod {
        extra.insert(EXTRA_POD_NAME.to_string(), vec![pod.name.clone()]);
        extra.insert(EXTRA_POD_UID.to_string(), vec![pod.uid.clone()]);
    }
    Identity {
        user: service_account_user(&k.namespace, &k.serviceaccount.name),
        uid: k.serviceaccount.uid.clone(),
        groups: vec![
            SERVICE_ACCOUNTS_GROUP.to_string(),
            format!("{SERVICE_ACCOUNTS_GROUP}:{}", k.namespace),
            AUTHENTICATED_GROUP.to_string(),
        ],
        extra,
    }
}

/// `system:serviceaccount:NS:NAME`.
pub fn service_account_user(namespace: &str, name: &str) -> String {
    format!("{SERVICE_ACCOUNT_USER_PREFIX}{namespace}:{name}")
}

/// Issues tokens for ServiceAccounts and accepts them, checking the objects they are bound
/// to in the registry.
pub struct ServiceAccountTokens {
    keys: TokenKeys,
    issuer: String,
    api_audiences: Vec<String>,
    max_expiration_seconds: Option<i64>,
    registry: Arc<Registry>,
    /// SHA-256 of a token whose signature verified → its claims.
    verified: Mutex<HashMap<[u8; 32], Arc<Claims>>>,
    /// What the bound-object checks last read of each object, kept current by the registry's
    /// change feed ([`BoundObjects`]).
    bound_objects: Mutex<BoundObjects>,
}

/// The facts a bound-object check needs of one object.
#[derive(Clone, Debug)]
struct ObjectFacts {
    uid: String,
    deletion_timestamp: Option<String>,
}

/// What bound-object checks read, by store key, so that a token's every request need not
/// read its ServiceAccount from the store (upstream reads it from an informer's memory).
///
/// Every change the registry commits is seen, in order, through `changes` before a lookup;
/// a change to a ServiceAccount, Pod or Secret evicts its key and is remembered with its
/// revision in `changed_at`, so that a store read that raced with it (the change seen by
/// another request between that read and its insert) is not cached: an entry goes in only if
/// no change to its key newer than the object read was seen. When the feed lags, or
/// `changed_at` grows past its bound, everything is forgotten and `epoch` moves on, so that
/// no read begun before is cached.
struct BoundObjects {
    changes: Option<crate::watch_cache::ChangeReceiver>,
    /// The key prefixes of the kinds a token may be bound to.
    prefixes: Vec<String>,
    known: HashMap<String, ObjectFacts>,
    changed_at: HashMap<String, finale_store::Revision>,
    epoch: u64,
}

/// The most keys [`BoundObjects`] keeps in each map; past it, it starts afresh.
const BOUND_OBJECT_ENTRIES: usize = 16_384;

impl BoundObjects {
    /// Applies every change delivered so far.
    fn catch_up(&mut self) {
        use tokio::sync::broadcast::error::TryRecvError;
        loop {
            let Some(changes) = self.changes.as_mut() else {
                return;
            };
            match changes.try_recv() {
                Ok(event) => {
                    if !self
                        .prefixes
                        .iter()
                        .any(|p| event.key.starts_with(p.as_str()))
                    {
                        continue;
                    }
                    self.known.remove(&event.key);
                    self.changed_at.insert(event.key.clone(), event.revision);
                    if self.changed_at.len() > BOUND_OBJECT_ENTRIES {
                        self.forget();
                    }
                }
                Err(TryRecvError::Empty) => return,
                Err(TryRecvError::Lagged(_)) => self.forget(),
                Err(TryRecvError::Closed) => {
                    self.changes = None;
                    self.forget();
                    return;
                }
            }
        }
    }

    fn forget(&mut self) {
        self.known.clear();
        self.changed_at.clear();
        self.epoch += 1;
    }

    /// Caches `facts` of `key`, read at `read_revision` by a lookup begun in `epoch`, unless
    /// a newer change to it was seen meanwhile.
    fn remember(
        &mut self,
        key: String,
        facts: ObjectFacts,
        read_revision: finale_store::Revision,
        epoch: u64,
    ) {
        self.catch_up();
        let newer_change = self
            .changed_at
            .get(&key)
            .is_some_and(|changed| *changed > read_revision);
        if epoch != self.epoch || newer_change || self.changes.is_none() {
            return;
        }
        if self.known.len() >= BOUND_OBJECT_ENTRIES {
            self.known.clear();
        }
        self.known.insert(key, facts);
    }
}

impl std::fmt::Debug for ServiceAccountTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceAccountTokens")
            .field("issuer", &self.issuer)
            .field("api_audiences", &self.api_audiences)
            .finish_non_exhaustive()
    }
}

/// The object a token request binds to, as checked at issue.
struct Bound {
    kind: &'static str,
    claim: ObjectClaim,
}

impl ServiceAccountTokens {
    pub fn new(
        keys: TokenKeys,
        options: &ServiceAccountTokenOptions,
        registry: Arc<Registry>,
    ) -> ServiceAccountTokens {
        let api_audiences = if options.api_audiences.is_empty() {
            vec![options.issuer.clone()]
        } else {
            options.api_audiences.clone()
        };
        ServiceAccountTokens {
            keys,
            issuer: options.issuer.clone(),
            api_audiences,
            max_expiration_seconds: options.max_expiration_seconds,
            bound_objects: Mutex::new(BoundObjects {
                changes: Some(registry.subscribe_changes()),
                prefixes: ["serviceaccounts", "pods", "secrets"]
                    .iter()
                    .filter_map(|plural| registry.catalog().lookup("", "v1", plural))
                    .map(|resource| resource.key_prefix())
                    .collect(),
                known: HashMap::new(),
                changed_at: HashMap::new(),
                epoch: 0,
            }),
            registry,
            verified: Mutex::new(HashMap::new()),
        }
    }

    /// What a token must be meant for to authenticate to this server.
    pub fn api_audiences(&self) -> &[String] {
        &self.api_audiences
    }

    /// Who `token` stands for, if it is a service-account token of this server meant for
    /// one of `audiences`; `Ok(None)` when it is not a JWT of this issuer at all. Also returns
    /// the audiences the token and `audiences` share.
    pub async fn authenticate(
        &self,
        token: &str,
        audiences: &[String],
    ) -> Result<Option<(Identity, Vec<String>)>, AuthError> {
        let Some(claims) = self.verified_claims(token)? else {
            return Ok(None);
        };
        let shared = check_claims(&claims, chrono::Utc::now().timestamp(), audiences)?;
        self.check_bound_objects(&claims.kubernetes).await?;
        Ok(Some((identity_of(&claims), shared)))
    }

    fn verified_claims(&self, token: &str) -> Result<Option<Arc<Claims>>, AuthError> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(claims) = self.lock_cache().get(&digest) {
            return Ok(Some(Arc::clone(claims)));
        }
        let Some(claims) = self.keys.verify(token, &self.issuer)? else {
            return Ok(None);
        };
        let claims = Arc::new(claims);
        let mut cache = self.lock_cache();
        if cache.len() >= VERIFIED_CACHE_ENTRIES {
            let now = chrono::Utc::now().timestamp();
            cache.retain(|_, claims| claims.exp > now);
            if cache.len() >= VERIFIED_CACHE_ENTRIES {
                cache.clear();
            }
        }
        cache.insert(digest, Arc::clone(&claims));
        Ok(Some(claims))
    }

    fn lock_cache(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], Arc<Claims>>> {
        // The cache holds only verified claims; a panic elsewhere cannot make it lie.
        self.verified
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Upstream's validator: the ServiceAccount and the bound object still exist with the
    /// uids in the claims, and have not been deleting for more than 60 s.
    async fn check_bound_objects(&self, claims: &KubernetesClaims) -> Result<(), AuthError> {
        let namespace = &claims.namespace;
        self.check_object(
            "serviceaccounts",
            "service account",
            namespace,
            &claims.serviceaccount,
        )
        .await?;
        if let Some(pod) = &claims.pod {
            self.check_object("pods", "pod", namespace, pod).await?;
        }
        if let Some(secret) = &claims.secret {
            self.check_object("secrets", "secret", namespace, secret)
                .await?;
        }
        Ok(())
    }

    async fn check_object(
        &self,
        plural: &str,
        what: &str,
        namespace: &str,
        claim: &ObjectClaim,
    ) -> Result<(), AuthError> {
        let invalid = |reason: String| AuthError::InvalidServiceAccountToken { reason };
        let object = match self.facts(plural, namespace, &claim.name).await {
            Ok(object) => object,
            Err(error) if error.code == 404 => {
                return Err(invalid(format!(
                    "service account token has been invalidated: {what} {namespace}/{} no \
                     longer exists",
                    claim.name
                )));
            }
            Err(error) => {
                return Err(invalid(format!(
                    "cannot check the {what} {namespace}/{} the token is bound to: {}",
                    claim.name, error.message
                )));
            }
        };
        let uid = &object.uid;
        if *uid != claim.uid {
            return Err(invalid(format!(
                "{what} UID ({uid}) does not match claim ({}): {namespace}/{} was deleted and \
                 re-created since the token was issued",
                claim.uid, claim.name
            )));
        }
        if let Some(deleting) = object
            .deletion_timestamp
            .as_deref()
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            && deleting.timestamp() + DELETION_GRACE_SECONDS < chrono::Utc::now().timestamp()
        {
            return Err(invalid(format!(
                "{what} {namespace}/{} has been deleted",
                claim.name
            )));
        }
        Ok(())
    }

    /// The core/v1 resource `plural` (a kind a token names or is bound to).
    fn core_resource(&self, plural: &str) -> ApiResult<Arc<ResourceType>> {
        self.registry
            .catalog()
            .lookup("", "v1", plural)
            .ok_or_else(|| ApiError::internal(format!("{plural} are not served")))
    }

    async fn get(&self, plural: &str, namespace: &str, name: &str) -> ApiResult<Value> {
        let resource = self.core_resource(plural)?;
        self.registry.get(&resource, Some(namespace), name).await
    }

    /// The uid and deletion time of an object a token is bound to: from memory when no change
    /// to it was committed since it was read ([`BoundObjects`]), else from the store.
    async fn facts(&self, plural: &str, namespace: &str, name: &str) -> ApiResult<ObjectFacts> {
        let resource = self.core_resource(plural)?;
        let key = resource.object_key(Some(namespace), name);
        let epoch = {
            let mut cache = self.lock_bound_objects();
            cache.catch_up();
            if let Some(known) = cache.known.get(&key) {
                return Ok(known.clone());
            }
            cache.epoch
        };
        let object = self.registry.get(&resource, Some(namespace), name).await?;
        let facts = ObjectFacts {
            uid: crate::object::uid(&object).to_string(),
            deletion_timestamp: object
                .pointer("/metadata/deletionTimestamp")
                .and_then(Value::as_str)
                .map(str::to_string),
        };
        if let Some(read_revision) = crate::object::meta_str(&object, "resourceVersion")
            .and_then(|rv| rv.parse::<finale_store::Revision>().ok())
        {
            self.lock_bound_objects()
                .remember(key, facts.clone(), read_revision, epoch);
        }
        Ok(facts)
    }

    fn lock_bound_objects(&self) -> std::sync::MutexGuard<'_, BoundObjects> {
        // Holds only what the store said; a panic elsewhere cannot make it lie.
        self.bound_objects
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// TokenRequest: a token for the ServiceAccount `name` in `namespace`, as `posted`
    /// (`authentication.k8s.io/v1` `TokenRequest`) asks. Answers the request with `status`.
    pub async fn request_token(
        &self,
        namespace: &str,
        name: &str,
        mut posted: Value,
    ) -> ApiResult<Value> {
        let spec = posted.get("spec").cloned().unwrap_or_else(|| json!({}));
        let expiration = match spec.get("expirationSeconds") {
            None | Some(Value::Null) => DEFAULT_EXPIRATION_SECONDS,
            Some(value) => value.as_i64().ok_or_else(|| {
                ApiError::bad_request(format!(
                    "spec.expirationSeconds must be an integer, not {value}"
                ))
            })?,
        };
        let mut errors = Vec::new();
        if expiration < MIN_EXPIRATION_SECONDS {
            errors.push(FieldError::invalid(
                "spec.expirationSeconds",
                expiration.to_string(),
                "may not specify a duration less than 10 minutes",
            ));
        }
        if expiration > MAX_EXPIRATION_SECONDS {
            errors.push(FieldError::invalid(
                "spec.expirationSeconds",
                expiration.to_string(),
                "may not specify a duration larger than 2^32 seconds",
            ));
        }
        let audiences: Vec<String> = match spec.get("audiences") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .map(|a| {
                    a.as_str().map(str::to_string).ok_or_else(|| {
                        ApiError::bad_request("spec.audiences must be a list of strings")
                    })
                })
                .collect::<ApiResult<_>>()?,
            Some(_) => {
                return Err(ApiError::bad_request(
                    "spec.audiences must be a list of strings",
                ));
            }
        };
        if !errors.is_empty() {
            return Err(ApiError::invalid(
                "TokenRequest",
                "authentication.k8s.io",
                name,
                &errors,
            ));
        }
        let account = self.get("serviceaccounts", namespace, name).await?;
        let bound = match spec.get("boundObjectRef").filter(|r| !r.is_null()) {
            Some(reference) => Some(self.bound_object(namespace, name, reference).await?),
            None => None,
        };
        let audiences = if audiences.is_empty() {
            self.api_audiences.clone()
        } else {
            audiences
        };
        let expiration = match self.max_expiration_seconds {
            Some(max) if expiration > max => max,
            _ => expiration,
        };
        let now = chrono::Utc::now().timestamp();
        let mut kubernetes = KubernetesClaims {
            namespace: namespace.to_string(),
            serviceaccount: ObjectClaim {
                name: name.to_string(),
                uid: crate::object::uid(&account).to_string(),
            },
            ..KubernetesClaims::default()
        };
        match bound {
            Some(Bound { kind: "Pod", claim }) => kubernetes.pod = Some(claim),
            Some(Bound { claim, .. }) => kubernetes.secret = Some(claim),
            None => {}
        }
        let claims = Claims {
            iss: self.issuer.clone(),
            sub: service_account_user(namespace, name),
            aud: audiences.clone(),
            exp: now + expiration,
            iat: now,
            nbf: now,
            jti: uuid::Uuid::new_v4().to_string(),
            kubernetes,
        };
        let token = self
            .keys
            .sign(&claims)
            .map_err(|e| ApiError::internal(format!("failed to generate token: {e}")))?;
        let expires = chrono::DateTime::from_timestamp(claims.exp, 0)
            .map(crate::object::timestamp)
            .unwrap_or_default();
        posted["apiVersion"] = json!("authentication.k8s.io/v1");
        posted["kind"] = json!("TokenRequest");
        posted["metadata"] = json!({
            "name": name,
            "namespace": namespace,
            "creationTimestamp": crate::object::now(),
        });
        posted["spec"]["audiences"] = json!(audiences);
        posted["spec"]["expirationSeconds"] = json!(expiration);
        posted["status"] = json!({"token": token, "expirationTimestamp": expires});
        Ok(posted)
    }

    /// Upstream's checks of `spec.boundObjectRef`: a Pod (running as this ServiceAccount) or a
    /// Secret in the namespace, with the uid the request names if it names one.
    async fn bound_object(
        &self,
        namespace: &str,
        account: &str,
        reference: &Value,
    ) -> ApiResult<Bound> {
        let field = |key: &str| {
            reference
                .get(key)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let (api_version, kind, name, uid) = (
            field("apiVersion"),
            field("kind"),
            field("name"),
            field("uid"),
        );
        let (plural, kind) = match (api_version.as_str(), kind.as_str()) {
            ("v1" | "", "Pod") => ("pods", "Pod"),
            ("v1" | "", "Secret") => ("secrets", "Secret"),
            _ => {
                return Err(ApiError::bad_request(format!(
                    "cannot bind token to object of type {}, Kind={kind}: only Pods and \
                     Secrets can be bound here (Nodes are not served by this server)",
                    if api_version.is_empty() {
                        "/v1"
                    } else {
                        &api_version
                    }
                )));
            }
        };
        if name.is_empty() {
            return Err(ApiError::invalid(
                "TokenRequest",
                "authentication.k8s.io",
                account,
                &[FieldError::required(
                    "spec.boundObjectRef.name",
                    "name of the object to bind the token to",
                )],
            ));
        }
        let object = self.get(plural, namespace, &name).await?;
        if kind == "Pod" {
            let runs_as = object
                .pointer("/spec/serviceAccountName")
                .and_then(Value::as_str)
                .unwrap_or("default");
            if runs_as != account {
                return Err(ApiError::bad_request(format!(
                    "cannot bind token for serviceaccount {account:?} to pod running with \
                     serviceaccount {runs_as:?}"
                )));
            }
        }
        let actual = crate::object::uid(&object).to_string();
        if !uid.is_empty() && uid != actual {
            return Err(ApiError::conflict(
                crate::status::Target {
                    group: "",
                    resource: kind,
                    name: &name,
                },
                &format!(
                    "the UID in the bound object reference ({uid}) does not match the UID in \
                     record ({actual}). The object might have been deleted and then recreated"
                ),
            ));
        }
        Ok(Bound {
            kind,
            claim: ObjectClaim { name, uid: actual },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new_keys() -> (TokenKeys, String) {
        let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let pem = pair.serialize_pem();
        (TokenKeys::new(&pem, &[]).unwrap(), pem)
    }

    fn claims(exp: i64) -> Claims {
        Claims {
            iss: DEFAULT_ISSUER.to_string(),
            sub: service_account_user("t", "x"),
            aud: vec![DEFAULT_ISSUER.to_string()],
            exp,
            iat: 0,
            nbf: 0,
            jti: "j".to_string(),
            kubernetes: KubernetesClaims {
                namespace: "t".to_string(),
                serviceaccount: ObjectClaim {
                    name: "x".to_string(),
                    uid: "u".to_string(),
                },
                ..KubernetesClaims::default()
            },
        }
    }

    #[test]
    fn a_signed_token_verifies_with_its_key_only() {
        let (keys, _) = new_keys();
        let token = keys.sign(&claims(100)).unwrap();
        let verified = keys.verify(&token, DEFAULT_ISSUER).unwrap().unwrap();
        assert_eq!(verified, claims(100));
        let (other, _) = new_keys();
        let refused = other.verify(&token, DEFAULT_ISSUER).unwrap_err();
        assert!(
            refused.to_string().contains("invalid signature"),
            "{refused}"
        );
        // Another issuer's token is not ours to judge.
        assert!(keys.verify(&token, "https://other").unwrap().is_none());
        assert!(keys.verify("not-a-jwt", DEFAULT_ISSUER).unwrap().is_none());
    }

    #[test]
    fn a_tampered_payload_is_refused() {
        let (keys, _) = new_keys();
        let token = keys.sign(&claims(100)).unwrap();
        let mut parts: Vec<String> = token.split('.').map(str::to_string).collect();
        let mut forged = claims(100);
        forged.kubernetes.serviceaccount.name = "admin".to_string();
        parts[1] = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&forged).unwrap());
        let error = keys.verify(&parts.join("."), DEFAULT_ISSUER).unwrap_err();
        assert!(error.to_string().contains("invalid signature"), "{error}");
    }

    #[test]
    fn an_extra_key_file_verifies_tokens_of_its_private_key() {
        let (old, old_pem) = new_keys();
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("old.pub");
        let public = rcgen::KeyPair::from_pem(&old_pem).unwrap().public_key_pem();
        std::fs::write(&file, public).unwrap();
        let (_, new_pem) = new_keys();
        let rotated = TokenKeys::new(&new_pem, &[file]).unwrap();
        let token = old.sign(&claims(100)).unwrap();
        assert!(rotated.verify(&token, DEFAULT_ISSUER).unwrap().is_some());
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "hello").unwrap();
        let error = TokenKeys::new(&new_pem, &[junk]).err().unwrap().to_string();
        assert!(
            error.starts_with("--service-account-key-file") && error.contains("junk.pem"),
            "{error}"
        );
    }

    #[test]
    fn claims_are_checked_for_time_and_audience() {
        let aud = vec![DEFAULT_ISSUER.to_string()];
        assert_eq!(check_claims(&claims(100), 99, &aud).unwrap(), aud);
        let expired = check_claims(&claims(100), 100, &aud).unwrap_err();
        assert!(expired.to_string().contains("has expired"), "{expired}");
        let mut early = claims(100);
        early.nbf = 50;
        assert!(check_claims(&early, 10, &aud).is_err());
        let wrong = check_claims(&claims(100), 1, &["vault".to_string()]).unwrap_err();
        assert!(
            wrong
                .to_string()
                .contains("is invalid for the target audiences [\"vault\"]"),
            "{wrong}"
        );
    }

    #[test]
    fn the_identity_is_upstreams() {
        let mut c = claims(1);
        c.kubernetes.pod = Some(ObjectClaim {
            name: "p".to_string(),
            uid: "pu".to_string(),
        });
        let identity = identity_of(&c);
        assert_eq!(identity.user, "system:serviceaccount:t:x");
        assert_eq!(identity.uid, "u");
        assert_eq!(
            identity.groups,
            [
                "system:serviceaccounts",
                "system:serviceaccounts:t",
                "system:authenticated"
            ]
        );
        assert_eq!(identity.extra[EXTRA_CREDENTIAL_ID], ["JTI=j"]);
        assert_eq!(identity.extra[EXTRA_POD_NAME], ["p"]);
        assert_eq!(identity.extra[EXTRA_POD_UID], ["pu"]);
    }

    #[test]
    fn aud_may_be_one_string() {
        let mut value = serde_json::to_value(claims(1)).unwrap();
        value["aud"] = json!("one");
        let parsed: Claims = serde_json::from_value(value).unwrap();
        assert_eq!(parsed.aud, ["one"]);
    }
}
