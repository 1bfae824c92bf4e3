//! A webhook server for the webhook suites (admission, CRD conversion): HTTPS on 127.0.0.1
//! with a CA of its own (rcgen), served with tokio-rustls. Its certificate names the loopback
//! address and `webhook.hooks.svc`, the Service name the API server verifies when a webhook
//! is reached by Service reference. Every call is recorded (path and JSON body, in call
//! order), so a suite can prove a webhook was, or was not, called.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use base64::Engine;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use serde_json::Value;
use tokio::net::TcpListener;

/// Each call's path and JSON body (Null when the body is not JSON), in call order.
pub type Calls = Arc<Mutex<Vec<(String, Value)>>>;

/// What the server answers: a JSON body for a path and a request body.
pub type Handler =
    Arc<dyn Fn(String, Value) -> Pin<Box<dyn Future<Output = Value> + Send>> + Send + Sync>;

pub struct TlsWebhook {
    pub port: u16,
    pub ca_pem: String,
    pub calls: Calls,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TlsWebhook {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl TlsWebhook {
    /// The base64 `caBundle` of this server's CA.
    pub fn ca_bundle(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(&self.ca_pem)
    }

    pub fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.port)
    }

    pub fn calls(&self) -> Vec<(String, Value)> {
        self.calls.lock().expect("calls lock").clone()
    }

    /// Starts the server on an ephemeral loopback port; `handler` answers every call.
    pub async fn start(handler: Handler) -> TlsWebhook {
        let ca_key = KeyPair::generate().expect("CA key");
        let mut ca_params = CertificateParams::new(Vec::new()).expect("CA params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "webhook test CA");
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_cert = ca_params.self_signed(&ca_key).expect("CA certificate");
        let issuer = Issuer::from_params(&ca_params, &ca_key);
        let server_key = KeyPair::generate().expect("server key");
        let mut server_params =
            CertificateParams::new(vec!["webhook.hooks.svc".to_string()]).expect("params");
        server_params
            .subject_alt_names
            .push(SanType::IpAddress("127.0.0.1".parse().expect("IP")));
        let server_cert = server_params
            .signed_by(&server_key, &issuer)
            .expect("server certificate");

        let certs = vec![server_cert.der().clone()];
        let key = rustls::pki_types::PrivateKeyDer::try_from(server_key.serialize_der())
            .expect("server key DER");
        let mut tls = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .expect("TLS config");
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("address").port();
        let calls: Calls = Arc::default();
        let recorded = Arc::clone(&calls);
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let acceptor = acceptor.clone();
                let calls = Arc::clone(&recorded);
                let handler = Arc::clone(&handler);
                tokio::spawn(async move {
                    let Ok(stream) = acceptor.accept(stream).await else {
                        return;
                    };
                    let service = hyper::service::service_fn(move |request| {
                        let calls = Arc::clone(&calls);
                        let handler = Arc::clone(&handler);
                        async move { Ok::<_, Infallible>(answer(request, calls, handler).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        TlsWebhook {
            port,
            ca_pem: ca_cert.pem(),
            calls,
            task,
        }
    }
}

async fn answer(
    request: hyper::Request<hyper::body::Incoming>,
    calls: Calls,
    handler: Handler,
) -> hyper::Response<Full<Bytes>> {
    let path = request.uri().path().to_string();
    let body = request
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    calls
        .lock()
        .expect("calls lock")
        .push((path.clone(), body.clone()));
    let response = handler(path, body).await;
    hyper::Response::builder()
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(
            serde_json::to_vec(&response).unwrap_or_default(),
        )))
        .unwrap_or_default()
}
