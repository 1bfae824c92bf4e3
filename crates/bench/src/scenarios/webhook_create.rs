//! `webhook-create`: the cost of an admission webhook (issue #16's figure). ConfigMap
//! creates/s over HTTPS with 64 clients on a server where a `ValidatingWebhookConfiguration`
//! matches every ConfigMap create, against the same creates on a second server without any
//! webhook configuration, in the same run (the two alternate, in turn first).
//!
//! The webhook is this harness's own HTTPS server on 127.0.0.1 (a CA of its own, made with
//! rcgen, given to the configuration as its `caBundle`) that allows every review after
//! checking that it is one: so each measured create includes a real TLS request to a real
//! webhook, as in a cluster, and the figure is the API server's overhead plus the webhook's
//! own (small) work, both on this machine's CPUs.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context, bail};
use base64::Engine;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use serde_json::{Value, json};

use crate::finale::{client_for, locate_binary, start_server};
use crate::report::Report;
use crate::scenarios::http_create::create_configmaps;
use crate::scenarios::{LoadFigures, Settings, Side, payload, progress_load};

const SCENARIO: &str = "webhook-create";
const CLIENTS: usize = 64;

/// An HTTPS admission webhook on loopback that allows every review; counts what it answered.
struct AllowingWebhook {
    url: String,
    ca_pem: String,
    reviews: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for AllowingWebhook {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl AllowingWebhook {
    async fn start() -> anyhow::Result<AllowingWebhook> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let ca_key = KeyPair::generate().context("generate the webhook CA's key")?;
        let mut ca_params = CertificateParams::new(Vec::new()).context("webhook CA")?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "finale-bench webhook CA");
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_cert = ca_params
            .self_signed(&ca_key)
            .context("self-sign the webhook CA")?;
        let issuer = Issuer::from_params(&ca_params, &ca_key);
        let serving_key = KeyPair::generate().context("generate the webhook's key")?;
        let mut serving_params =
            CertificateParams::new(Vec::new()).context("webhook serving certificate")?;
        serving_params
            .subject_alt_names
            .push(SanType::IpAddress(std::net::Ipv4Addr::LOCALHOST.into()));
        let serving_cert = serving_params
            .signed_by(&serving_key, &issuer)
            .context("sign the webhook's certificate")?;
        let key = rustls::pki_types::PrivateKeyDer::try_from(serving_key.serialize_der())
            .map_err(|e| anyhow::anyhow!("the webhook's key: {e}"))?;
        let mut tls = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(vec![serving_cert.der().clone()], key)
            .context("the webhook's TLS configuration")?;
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .context("bind the webhook's port on 127.0.0.1")?;
        let port = listener.local_addr().context("the webhook's port")?.port();
        let reviews = Arc::new(AtomicU64::new(0));
        let counted = Arc::clone(&reviews);
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (acceptor, counted) = (acceptor.clone(), Arc::clone(&counted));
                tokio::spawn(async move {
                    let Ok(stream) = acceptor.accept(stream).await else {
                        return;
                    };
                    let service = hyper::service::service_fn(move |request| {
                        let counted = Arc::clone(&counted);
                        async move { Ok::<_, Infallible>(allow(request, &counted).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(AllowingWebhook {
            url: format!("https://127.0.0.1:{port}/allow"),
            ca_pem: ca_cert.pem(),
            reviews,
            task,
        })
    }
}

/// Allows a well-formed `AdmissionReview` (echoing its uid, as the API requires); answers 400
/// to anything else, which the API server reports as a failed call.
async fn allow(
    request: hyper::Request<hyper::body::Incoming>,
    reviews: &AtomicU64,
) -> hyper::Response<Full<Bytes>> {
    let body = match request.into_body().collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => Bytes::new(),
    };
    let uid = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|review| review["request"]["uid"].as_str().map(str::to_string));
    let (status, answer) = match uid {
        Some(uid) => {
            reviews.fetch_add(1, Ordering::Relaxed);
            (
                hyper::StatusCode::OK,
                json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                    "response": {"uid": uid, "allowed": true}}),
            )
        }
        None => (
            hyper::StatusCode::BAD_REQUEST,
            json!({"error": "not an AdmissionReview"}),
        ),
    };
    let mut response = hyper::Response::new(Full::new(Bytes::from(answer.to_string())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}

pub async fn run(settings: &Settings, report: &mut Report) -> anyhow::Result<()> {
    let binary = locate_binary(settings.finale_bin.as_deref())?;
    let dir = tempfile::tempdir().context("create a temporary data directory")?;
    let mut plain = start_server(&binary, &dir.path().join("plain")).await?;
    let mut hooked = start_server(&binary, &dir.path().join("hooked")).await?;
    let webhook = AllowingWebhook::start().await?;

    let admin = client_for(&hooked)?;
    let configurations = format!(
        "{}/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
        hooked.url
    );
    let response = admin
        .post(&configurations)
        .json(&json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "bench-allow"},
            "webhooks": [{
                "name": "allow.bench.finale.dev",
                "clientConfig": {
                    "url": webhook.url,
                    "caBundle": base64::engine::general_purpose::STANDARD.encode(&webhook.ca_pem),
                },
                "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                    "resources": ["configmaps"]}],
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
            }],
        }))
        .send()
        .await
        .context("create the ValidatingWebhookConfiguration")?;
    if !response.status().is_success() {
        bail!(
            "creating the ValidatingWebhookConfiguration answered {}: {}",
            response.status(),
            response.text().await.unwrap_or_default()
        );
    }

    let data: Arc<str> = payload().into();
    let clients_of = |server: &finale_e2e::FinaleServer| {
        (0..CLIENTS)
            .map(|_| client_for(server))
            .collect::<anyhow::Result<Vec<_>>>()
    };
    let url_of = |server: &finale_e2e::FinaleServer| -> Arc<str> {
        format!("{}/api/v1/namespaces/default/configmaps", server.url).into()
    };
    let sides = [
        (
            Side::Finale,
            clients_of(&hooked)?,
            url_of(&hooked),
            "webhook",
        ),
        (
            Side::Etcd,
            clients_of(&plain)?,
            url_of(&plain),
            "no-webhook",
        ),
    ];
    let mut figures = LoadFigures::new(
        SCENARIO,
        &format!(
            "HTTPS creates/s with a validating webhook matching every create, {CLIENTS} clients"
        ),
        &format!("HTTPS create latency with a validating webhook, {CLIENTS} clients,"),
        &format!("the same creates on a server without webhooks, {CLIENTS} clients"),
        None,
    );
    let mut measured_with_webhook = 0u64;
    let load = format!("{CLIENTS} clients");
    for run in 0..settings.runs {
        let spec = settings.load_spec(CLIENTS);
        // Alternate which goes first, so neither always meets a warmer or quieter machine.
        let order: [usize; 2] = if run % 2 == 0 { [0, 1] } else { [1, 0] };
        for side in order {
            let (which, clients, url, label) = &sides[side];
            let prefix = format!("hook-r{run}-{label}");
            let result = create_configmaps(&spec, clients, url, &prefix, &data).await?;
            progress_load(SCENARIO, run, settings.runs, &load, label, &result);
            if *which == Side::Finale {
                measured_with_webhook += result.ops;
            }
            figures.push(
                *which,
                &result,
                report,
                &format!("{SCENARIO} run {}", run + 1),
            );
            report.raw.push(json!({
                "scenario": SCENARIO, "run": run, "clients": CLIENTS, "target": label,
                "result": result.summary(),
            }));
        }
    }
    // The precondition of the figure: every measured create on the hooked server was
    // reviewed by the webhook (it also saw the warm-up's creates, if any).
    let reviewed = webhook.reviews.load(Ordering::Relaxed);
    if reviewed < measured_with_webhook {
        bail!(
            "the webhook reviewed {reviewed} creates, fewer than the {measured_with_webhook} measured with it"
        );
    }
    report.figures.extend(figures.into_figures());
    for (server, which) in [(&mut plain, "plain"), (&mut hooked, "hooked")] {
        if !server.is_running() {
            bail!(
                "the {which} finale server exited during the benchmark; its log ends:\n{}",
                server.log_tail(30)
            );
        }
    }
    Ok(())
}
