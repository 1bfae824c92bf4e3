//! The HTTPS client webhooks are called with, shared by admission webhooks
//! ([`crate::admission`]) and CRD conversion webhooks ([`crate::crd::conversion`]): one
//! review POSTed to a webhook, trusting its `caBundle` (or the system's roots when it has
//! none), bounded by a timeout; where a `clientConfig` points (its URL, or a Service resolved
//! through its Endpoints or EndpointSlices); and upstream's checks of a `clientConfig`.
//!
//! Failures are worded as client-go words them, since upstream puts that text into the
//! `Status` a client sees (`failed to call webhook: Post "URL": dial tcp ADDR: connect:
//! connection refused`).
//!
//! # Guarantees
//! - TLS verifies the URL's host, or `<service>.<namespace>.svc` for a Service reference,
//!   against the `caBundle` alone when one is given.
//! - Redirects are never followed.
//!
//! # Assumptions
//! - Finale has no cluster network: a Service is reached at the first ready address of its
//!   Endpoints (or, failing that, of an EndpointSlice), as kube-apiserver's endpoint routing
//!   does, never at its cluster IP.

use std::collections::HashMap;
use std::error::Error as _;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Duration;

use finale_store::{RangeRequest, Store, prefix_range};
use serde_json::Value;

use crate::validation::FieldError;

/// Clients kept at once (one per distinct CA bundle and address override); past it the
/// cache starts over, which only costs building clients again.
const MAX_CLIENTS: usize = 64;

/// Where one call goes.
#[derive(Clone, Debug)]
pub struct Target {
    /// What the request is sent to.
    pub url: String,
    /// The URL as upstream would print it in errors (for a Service: its `.svc` name and the
    /// Service's port rather than the endpoint's).
    pub shown_url: String,
    /// For a Service reference: connect to this address, while TLS verifies the host name of
    /// `url` (`<service>.<namespace>.svc`).
    pub connect_to: Option<(String, SocketAddr)>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct ClientKey {
    ca_bundle: Vec<u8>,
    connect_to: Option<(String, SocketAddr)>,
}

/// Where a webhook is reached (a `clientConfig`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Endpoint {
    Url(String),
    Service {
        namespace: String,
        name: String,
        port: u16,
        path: String,
    },
}

/// Which review a call carries, for the wording of its failures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Review {
    Admission,
    Conversion,
}

impl Review {
    fn kind(self) -> &'static str {
        match self {
            Review::Admission => "AdmissionReview",
            Review::Conversion => "ConversionReview",
        }
    }

    /// The URL a call POSTs to: client-go tells an admission webhook its deadline in whole
    /// seconds (`?timeout=10s`); upstream's conversion client sets no per-request timeout,
    /// so its URL stays as configured.
    fn url(self, url: &str, timeout: Duration) -> String {
        match self {
            Review::Admission => {
                let separator = if url.contains('?') { '&' } else { '?' };
                format!("{url}{separator}timeout={}s", timeout.as_secs().max(1))
            }
            Review::Conversion => url.to_string(),
        }
    }

    /// A transport failure as upstream words it: admission's `failed to call webhook: `
    /// prefix, then Go's `url.Error` (`Post "URL": why`).
    fn failed(self, shown_url: &str, why: &str) -> CallError {
        match self {
            Review::Admission => {
                CallError(format!("failed to call webhook: Post {shown_url:?}: {why}"))
            }
            Review::Conversion => CallError(format!("Post {shown_url:?}: {why}")),
        }
    }
}

/// Why a call produced no usable answer (for admission: the text after `failed calling
/// webhook "NAME": `).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallError(pub String);

/// HTTPS clients for webhooks, shared by every request.
#[derive(Default)]
pub struct Clients {
    cache: Mutex<HashMap<ClientKey, reqwest::Client>>,
}

impl Clients {
    fn client(&self, ca_bundle: &[u8], target: &Target) -> Result<reqwest::Client, String> {
        let key = ClientKey {
            ca_bundle: ca_bundle.to_vec(),
            connect_to: target.connect_to.clone(),
        };
        let mut cache = self
            .cache
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(client) = cache.get(&key) {
            return Ok(client.clone());
        }
        let mut builder = reqwest::Client::builder()
            .use_rustls_tls()
            // A webhook answers; it does not send the server elsewhere.
            .redirect(reqwest::redirect::Policy::none())
            .pool_idle_timeout(Duration::from_secs(90));
        if !ca_bundle.is_empty() {
            let certificates = reqwest::Certificate::from_pem_bundle(ca_bundle)
                .map_err(|e| format!("could not load caBundle: {e}"))?;
            if certificates.is_empty() {
                return Err("caBundle holds no PEM certificate".into());
            }
            builder = builder.tls_built_in_root_certs(false);
            for certificate in certificates {
                builder = builder.add_root_certificate(certificate);
            }
        }
        if let Some((host, address)) = &target.connect_to {
            builder = builder.resolve(host, *address);
        }
        let client = builder
            .build()
            .map_err(|e| format!("could not build an HTTPS client: {e}"))?;
        if cache.len() >= MAX_CLIENTS {
            cache.clear();
        }
        cache.insert(key, client.clone());
        Ok(client)
    }

    /// POSTs `review` and returns the decoded answer, within `timeout`.
    pub async fn post(
        &self,
        ca_bundle: &[u8],
        target: &Target,
        timeout: Duration,
        review: &Value,
        kind: Review,
    ) -> Result<Value, CallError> {
        let url = kind.url(&target.url, timeout);
        let shown = kind.url(&target.shown_url, timeout);
        let failed = |why: String| kind.failed(&shown, &why);
        let client = self
            .client(ca_bundle, target)
            .map_err(|e| CallError(format!("could not get REST client: {e}")))?;
        let body = serde_json::to_vec(review).map_err(|e| {
            CallError(match kind {
                Review::Admission => format!("could not create admission objects: {e}"),
                Review::Conversion => format!("could not encode the ConversionReview: {e}"),
            })
        })?;
        let exchange = async {
            let response = client
                .post(&url)
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .header(reqwest::header::ACCEPT, "application/json")
                .body(body)
                .send()
                .await
                .map_err(|e| failed(describe(&e, target)))?;
            let status = response.status();
            let bytes = response
                .bytes()
                .await
                .map_err(|e| failed(describe(&e, target)))?;
            Ok::<_, CallError>((status, bytes))
        };
        let (status, bytes) = match tokio::time::timeout(timeout, exchange).await {
            Ok(result) => result?,
            Err(_) => return Err(failed("context deadline exceeded".into())),
        };
        if !status.is_success() {
            // client-go's wording for an answer that is not a Status.
            let text = String::from_utf8_lossy(&bytes);
            let text: String = text.chars().take(256).collect();
            return Err(failed(format!(
                "an error on the server ({text:?}) has prevented the request from succeeding (post {} {})",
                status.as_u16(),
                status.canonical_reason().unwrap_or("")
            )));
        }
        serde_json::from_slice(&bytes).map_err(|e| {
            CallError(format!(
                "received invalid webhook response: the answer is not an {} in JSON: {e}",
                kind.kind()
            ))
        })
    }
}

/// A transport error in Go's words where the kind is known: refused connections, timeouts
/// and certificate failures; the error chain otherwise.
fn describe(error: &reqwest::Error, target: &Target) -> String {
    if error.is_timeout() {
        return "context deadline exceeded".into();
    }
    let address = match &target.connect_to {
        Some((_, address)) => address.to_string(),
        None => error
            .url()
            .map(|u| {
                format!(
                    "{}:{}",
                    u.host_str().unwrap_or_default(),
                    u.port_or_known_default().unwrap_or(443)
                )
            })
            .unwrap_or_default(),
    };
    let mut source = error.source();
    let mut chain = Vec::new();
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            match io.kind() {
                std::io::ErrorKind::ConnectionRefused => {
                    return format!("dial tcp {address}: connect: connection refused");
                }
                std::io::ErrorKind::TimedOut => {
                    return format!("dial tcp {address}: i/o timeout");
                }
                _ => {}
            }
            if let Some(tls) = io.get_ref().and_then(|e| e.downcast_ref::<rustls::Error>()) {
                return tls_text(tls);
            }
        }
        if let Some(tls) = cause.downcast_ref::<rustls::Error>() {
            return tls_text(tls);
        }
        chain.push(cause.to_string());
        source = cause.source();
    }
    if chain.is_empty() {
        error.to_string()
    } else {
        chain.join(": ")
    }
}

fn tls_text(error: &rustls::Error) -> String {
    match error {
        rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer) => {
            "tls: failed to verify certificate: x509: certificate signed by unknown authority"
                .into()
        }
        rustls::Error::InvalidCertificate(why) => {
            format!("tls: failed to verify certificate: x509: {why:?}")
        }
        other => format!("tls: {other}"),
    }
}

/// Where calls to `endpoint` go: its URL, or its Service resolved to an endpoint address
/// (read from `store`).
pub async fn target(
    store: &dyn Store,
    endpoint: &Endpoint,
    timeout: Duration,
    kind: Review,
) -> Result<Target, CallError> {
    match endpoint {
        Endpoint::Url(url) => Ok(Target {
            url: url.clone(),
            shown_url: url.clone(),
            connect_to: None,
        }),
        Endpoint::Service {
            namespace,
            name,
            port,
            path,
        } => {
            let host = format!("{name}.{namespace}.svc");
            let shown_url = format!("https://{host}:{port}{path}");
            let failed = |why: String| kind.failed(&kind.url(&shown_url, timeout), &why);
            let address = resolve_service(store, namespace, name, *port)
                .await
                .map_err(failed)?;
            Ok(Target {
                url: format!("https://{host}:{}{path}", address.port()),
                shown_url,
                connect_to: Some((host, address)),
            })
        }
    }
}

/// A Service's port to one ready endpoint address, as kube-apiserver's endpoint routing
/// does: the Service port named by the webhook, its target port, and the first ready
/// address of the Endpoints object (or, failing that, of an EndpointSlice).
async fn resolve_service(
    store: &dyn Store,
    namespace: &str,
    name: &str,
    port: u16,
) -> Result<std::net::SocketAddr, String> {
    let read = |key: String| async move {
        match store.get(key.as_bytes()).await {
            Ok((Some(kv), _)) => serde_json::from_slice::<Value>(&kv.value).ok(),
            _ => None,
        }
    };
    let service = read(format!("/registry/core/services/{namespace}/{name}"))
        .await
        .ok_or_else(|| format!("service \"{name}\" not found"))?;
    let service_port = service
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|p| p.get("port").and_then(Value::as_u64) == Some(u64::from(port)))
        .ok_or_else(|| format!("no service port {port} found for service \"{name}\""))?;
    let port_name = service_port
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if service.pointer("/spec/type").and_then(Value::as_str) == Some("ExternalName") {
        let external = service
            .pointer("/spec/externalName")
            .and_then(Value::as_str)
            .unwrap_or_default();
        return tokio::net::lookup_host((external, port))
            .await
            .ok()
            .and_then(|mut addresses| addresses.next())
            .ok_or_else(|| format!("cannot resolve externalName {external:?}"));
    }
    if let Some(endpoints) = read(format!("/registry/core/endpoints/{namespace}/{name}")).await {
        for subset in endpoints
            .get("subsets")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let endpoint_port = named_port(subset, port_name);
            let ip = subset
                .get("addresses")
                .and_then(Value::as_array)
                .and_then(|a| a.first())
                .and_then(|a| a.get("ip").and_then(Value::as_str))
                .and_then(|ip| ip.parse::<std::net::IpAddr>().ok());
            if let (Some(ip), Some(endpoint_port)) = (ip, endpoint_port) {
                return Ok(std::net::SocketAddr::new(ip, endpoint_port));
            }
        }
    }
    let slices = store
        .range(RangeRequest {
            range: prefix_range(
                format!("/registry/discovery.k8s.io/endpointslices/{namespace}/").as_bytes(),
            ),
            limit: 0,
            revision: 0,
        })
        .await
        .map_err(|e| format!("cannot read endpoint slices: {e}"))?;
    for kv in &slices.kvs {
        let Ok(slice) = serde_json::from_slice::<Value>(&kv.value) else {
            continue;
        };
        if slice
            .pointer("/metadata/labels/kubernetes.io~1service-name")
            .and_then(Value::as_str)
            != Some(name)
        {
            continue;
        }
        let endpoint_port = named_port(&slice, port_name);
        let ip = slice
            .get("endpoints")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|e| e.pointer("/conditions/ready").and_then(Value::as_bool) != Some(false))
            .flat_map(|e| {
                e.get("addresses")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default()
            })
            .find_map(|a| {
                a.as_str()
                    .and_then(|ip| ip.parse::<std::net::IpAddr>().ok())
            });
        if let (Some(ip), Some(endpoint_port)) = (ip, endpoint_port) {
            return Ok(std::net::SocketAddr::new(ip, endpoint_port));
        }
    }
    Err(format!("no endpoints available for service \"{name}\""))
}

/// Upstream's checks of a webhook `clientConfig` (`ValidateWebhookURL` with https forced,
/// `ValidateWebhookService`); `at` is the path of the `clientConfig` itself.
pub fn validate_client_config(client: Option<&Value>, at: &str) -> Vec<FieldError> {
    let Some(client) = client else {
        return vec![FieldError::required(
            at,
            "exactly one of url or service is required",
        )];
    };
    let mut errors = Vec::new();
    match (
        text(client, "url"),
        client.get("service").filter(|s| !s.is_null()),
    ) {
        (Some(_), Some(_)) | (None, None) => errors.push(FieldError::required(
            at,
            "exactly one of url or service is required",
        )),
        (Some(url), None) => {
            let field = format!("{at}.url");
            match reqwest::Url::parse(url) {
                Err(e) => errors.push(FieldError::invalid(
                    &field,
                    url,
                    &format!("host must be specified ({e})"),
                )),
                Ok(parsed) => {
                    if parsed.scheme() != "https" {
                        errors.push(FieldError::invalid(
                            &field,
                            url,
                            "'https' is the only allowed URL scheme",
                        ));
                    }
                    if parsed.host_str().is_none_or(str::is_empty) {
                        errors.push(FieldError::invalid(&field, url, "host must be specified"));
                    }
                    if !parsed.username().is_empty() || parsed.password().is_some() {
                        errors.push(FieldError::invalid(
                            &field,
                            url,
                            "user information is not permitted in the URL",
                        ));
                    }
                    if parsed.fragment().is_some() {
                        errors.push(FieldError::invalid(
                            &field,
                            url,
                            "fragments are not permitted in the URL",
                        ));
                    }
                    if parsed.query().is_some() {
                        errors.push(FieldError::invalid(
                            &field,
                            url,
                            "query parameters are not permitted in the URL",
                        ));
                    }
                }
            }
        }
        (None, Some(service)) => {
            let field = format!("{at}.service");
            for key in ["name", "namespace"] {
                if text(service, key).is_none_or(str::is_empty) {
                    errors.push(FieldError::required(
                        &format!("{field}.{key}"),
                        &format!("service {key} is required"),
                    ));
                }
            }
            if let Some(p) = text(service, "path")
                && !p.is_empty()
                && !p.starts_with('/')
            {
                errors.push(FieldError::invalid(
                    &format!("{field}.path"),
                    p,
                    "must start with a '/'",
                ));
            }
            if let Some(port) = service.get("port").and_then(Value::as_i64)
                && !(1..=65535).contains(&port)
            {
                errors.push(FieldError::invalid_literal(
                    &format!("{field}.port"),
                    port.to_string(),
                    "port is not valid: must be between 1 and 65535, inclusive",
                ));
            }
        }
    }
    errors
}

fn text<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    value.get(key).and_then(Value::as_str)
}

/// The number of the port named `port_name` among `holder.ports` (an Endpoints subset or an
/// EndpointSlice; an unnamed port is named "").
fn named_port(holder: &Value, port_name: &str) -> Option<u16> {
    holder
        .get("ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|p| p.get("name").and_then(Value::as_str).unwrap_or_default() == port_name)
        .and_then(|p| p.get("port").and_then(Value::as_u64))
        .and_then(|p| u16::try_from(p).ok())
}
