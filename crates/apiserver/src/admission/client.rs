//! The HTTPS calls: one `AdmissionReview` POSTed to a webhook, trusting its `caBundle` (or
//! the system's roots when it has none), bounded by its `timeoutSeconds`.
//!
//! Failures are worded as client-go words them, since upstream puts that text into the
//! `Status` a client sees (`failed calling webhook "NAME": failed to call webhook: Post
//! "URL": dial tcp ADDR: connect: connection refused`).

use std::collections::HashMap;
use std::error::Error as _;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Duration;

use serde_json::Value;

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

/// Why a call produced no usable answer: the text after `failed calling webhook "NAME": `.
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
    ) -> Result<Value, CallError> {
        // client-go tells the webhook its deadline in whole seconds (`?timeout=10s`).
        let seconds = timeout.as_secs().max(1);
        let with_timeout = |url: &str| {
            let separator = if url.contains('?') { '&' } else { '?' };
            format!("{url}{separator}timeout={seconds}s")
        };
        let url = with_timeout(&target.url);
        let shown = with_timeout(&target.shown_url);
        let failed =
            |why: String| CallError(format!("failed to call webhook: Post {shown:?}: {why}"));
        let client = self
            .client(ca_bundle, target)
            .map_err(|e| CallError(format!("could not get REST client: {e}")))?;
        let body = serde_json::to_vec(review)
            .map_err(|e| CallError(format!("could not create admission objects: {e}")))?;
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
                "received invalid webhook response: the answer is not an AdmissionReview in JSON: {e}"
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
