//! What a client may hold of the server (issue #18, item 6): a slowloris client is
//! disconnected after the header read timeout; connections beyond `--max-connections` wait
//! to be accepted; requests beyond `--max-mutating-requests-inflight` get upstream's 429;
//! and request metrics keep a fixed set of label values whatever the method.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::raw::Http;
use common::{TestServer, WAIT, install_crypto_provider, within};
use finale_apiserver::pki::Pki;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

fn pki_dir(server: &TestServer) -> std::path::PathBuf {
    server.dir.path().join("data").join("pki")
}

fn connector(server: &TestServer) -> TlsConnector {
    install_crypto_provider();
    let ca = std::fs::read(pki_dir(server).join("ca.crt")).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pemfile::certs(&mut ca.as_slice()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    TlsConnector::from(Arc::new(config))
}

async fn tls_connect(server: &TestServer) -> TlsStream<TcpStream> {
    let tcp = TcpStream::connect(server.running.local_addr).await.unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    within(WAIT, connector(server).connect(name, tcp))
        .await
        .expect("TLS handshake")
}

/// Sends one `GET /version` with the admin token and reads the answer's first bytes.
async fn version_over(stream: &mut TlsStream<TcpStream>, token: &str) -> String {
    let request = format!(
        "GET /version HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let n = within(WAIT, stream.read(&mut buf)).await.unwrap();
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_finishes_its_headers_is_disconnected() {
    let server = TestServer::start_with(|config| {
        config.limits.header_read_timeout = Duration::from_secs(1);
    })
    .await;
    let mut stream = tls_connect(&server).await;
    stream
        .write_all(b"GET /version HTTP/1.1\r\nHost: localhost\r\n")
        .await
        .unwrap();
    // One more header line every 200 ms, never the blank line that ends them.
    let started = Instant::now();
    let closed_after = loop {
        let mut buf = [0u8; 256];
        // EOF, a reset, or whatever the server says before closing: it gave up on us.
        let read = tokio::time::timeout(Duration::from_millis(200), stream.read(&mut buf)).await;
        if read.is_ok() {
            break started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the server still waits for headers after 10 s"
        );
        if stream.write_all(b"X-Slow: yes\r\n").await.is_err() {
            break started.elapsed();
        }
    };
    assert!(
        closed_after < Duration::from_secs(5),
        "disconnected after {closed_after:?}"
    );
    // Clients that send their headers are served as before.
    let token = std::fs::read_to_string(pki_dir(&server).join("admin.token")).unwrap();
    let mut stream = tls_connect(&server).await;
    let answer = version_over(&mut stream, token.trim()).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_cap_wait_until_one_closes() {
    let server = TestServer::start_with(|config| {
        config.limits.max_connections = 2;
    })
    .await;
    let token = std::fs::read_to_string(pki_dir(&server).join("admin.token")).unwrap();
    let token = token.trim();
    // The kube client of the fixture may hold a connection; start from a known state by
    // opening our two and checking each is served.
    let mut first = tls_connect(&server).await;
    assert!(
        version_over(&mut first, token)
            .await
            .starts_with("HTTP/1.1 200")
    );
    let second = tokio::time::timeout(Duration::from_secs(2), async {
        let tcp = TcpStream::connect(server.running.local_addr).await.unwrap();
        connector(&server)
            .connect(ServerName::try_from("localhost").unwrap(), tcp)
            .await
    })
    .await;
    let mut second = match second {
        Ok(Ok(stream)) => stream,
        other => panic!("the second connection is within the cap: {other:?}"),
    };
    assert!(
        version_over(&mut second, token)
            .await
            .starts_with("HTTP/1.1 200")
    );

    // A third is accepted by the kernel but not by the server: its handshake waits.
    let tcp = TcpStream::connect(server.running.local_addr).await.unwrap();
    let third = tokio::spawn({
        let connector = connector(&server);
        async move {
            connector
                .connect(ServerName::try_from("localhost").unwrap(), tcp)
                .await
        }
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        !third.is_finished(),
        "a third connection was served while two were open"
    );
    // Closing one lets it in.
    drop(first);
    let mut third = within(WAIT, third)
        .await
        .unwrap()
        .expect("the third handshake completes once a connection closed");
    assert!(
        version_over(&mut third, token)
            .await
            .starts_with("HTTP/1.1 200")
    );
    drop((second, third));
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutating_requests_beyond_the_limit_get_429_with_retry_after() {
    let server = TestServer::start_with(|config| {
        config.limits.max_mutating_requests_inflight = 1;
        config.limits.max_requests_inflight = 1;
    })
    .await;
    // An ordinary user: system:masters (the admin) is never limited, as upstream. Her
    // group may edit in default.
    common::grant_in_namespace(&server.running, "default", "team-a", "edit").await;
    let pki = Pki::load_or_create(&server.dir.path().join("data"), &[]).unwrap();
    let (cert, key) = pki.issue_client_certificate("alice", &["team-a"]).unwrap();
    let ca = std::fs::read(pki_dir(&server).join("ca.crt")).unwrap();
    let alice = reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(&ca).unwrap())
        .identity(reqwest::Identity::from_pem(format!("{cert}\n{key}").as_bytes()).unwrap())
        .timeout(WAIT)
        .build()
        .unwrap();
    let base = format!("https://localhost:{}", server.running.local_addr.port());
    let configmaps = format!("{base}/api/v1/namespaces/default/configmaps");

    // A create whose body arrives slowly holds the only mutating slot while it uploads.
    let start_slow_create = || {
        let (chunks, body) = tokio::sync::mpsc::channel::<Result<Vec<u8>, std::io::Error>>(4);
        let request = alice
            .post(&configmaps)
            .header("Content-Type", "application/json")
            .body(reqwest::Body::wrap_stream(tokio_stream_from(body)));
        let task = tokio::spawn(request.send());
        (chunks, task)
    };
    let dry_run = format!("{configmaps}?dryRun=All");
    let probe =
        serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "probe"}});
    // Once the slow create holds its slot, the next mutating request is refused. A probe may
    // hold the slot at the very moment the slow create arrives, which then gets the 429
    // itself and ends: start it again.
    let deadline = Instant::now() + WAIT;
    let (chunks, slow, refused) = 'admitted: loop {
        let (chunks, slow) = start_slow_create();
        chunks
            .send(Ok(br#"{"apiVersion":"v1","kind":"ConfigMap","#.to_vec()))
            .await
            .unwrap();
        loop {
            assert!(Instant::now() < deadline, "never refused");
            tokio::time::sleep(Duration::from_millis(50)).await;
            if slow.is_finished() {
                let early = slow.await.unwrap().unwrap();
                assert_eq!(early.status(), 429, "the slow create ended early");
                continue 'admitted;
            }
            let response = alice.post(&dry_run).json(&probe).send().await.unwrap();
            if response.status() == 429 {
                break 'admitted (chunks, slow, response);
            }
            assert_eq!(response.status(), 201, "{:?}", response.text().await);
        }
    };
    assert_eq!(refused.headers()["retry-after"], "1");
    let status: serde_json::Value = refused.json().await.unwrap();
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["code"], 429);
    assert_eq!(status["reason"], "TooManyRequests");
    assert_eq!(
        status["message"],
        "Too many requests, please try again later."
    );
    assert_eq!(status["details"]["retryAfterSeconds"], 1);

    // Reads have their own pool, and the admin (system:masters) is exempt.
    let read = alice.get(&configmaps).send().await.unwrap();
    assert_eq!(read.status(), 200);
    let admin = Http::new(&server);
    let admin_write = admin
        .client
        .post(&dry_run)
        .bearer_auth(&admin.token)
        .json(&probe)
        .send()
        .await
        .unwrap();
    assert_eq!(admin_write.status(), 201);

    // Finishing the upload frees the slot.
    chunks
        .send(Ok(br#""metadata":{"name":"slow"}}"#.to_vec()))
        .await
        .unwrap();
    drop(chunks);
    let created = within(WAIT, slow).await.unwrap().unwrap();
    assert_eq!(created.status(), 201);
    let after = alice.post(&dry_run).json(&probe).send().await.unwrap();
    assert_eq!(after.status(), 201);

    let metrics = admin
        .client
        .get(format!("{base}/metrics"))
        .bearer_auth(&admin.token)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("apiserver_dropped_requests_total{request_kind=\"mutating\"}"),
        "{metrics}"
    );
    server.shutdown().await;
}

/// A stream of body chunks from a channel.
fn tokio_stream_from(
    mut receiver: tokio::sync::mpsc::Receiver<Result<Vec<u8>, std::io::Error>>,
) -> impl futures::Stream<Item = Result<Vec<u8>, std::io::Error>> {
    futures::stream::poll_fn(move |cx| receiver.poll_recv(cx))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn junk_methods_create_no_new_metric_series() {
    let server = TestServer::start().await;
    let http = Http::new(&server);
    let base = format!("https://localhost:{}", server.running.local_addr.port());
    for method in ["FOO123", "BAR456", "GETX"] {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        for token in [Some(http.token.as_str()), None] {
            let mut request = http
                .client
                .request(method.clone(), format!("{base}/version"));
            if let Some(token) = token {
                request = request.bearer_auth(token);
            }
            let response = request.send().await.unwrap();
            assert!(response.status().is_client_error(), "{}", response.status());
        }
    }
    let metrics = http
        .client
        .get(format!("{base}/metrics"))
        .bearer_auth(&http.token)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for junk in ["FOO123", "BAR456", "GETX"] {
        assert!(!metrics.contains(junk), "a series for {junk}:\n{metrics}");
    }
    assert!(
        metrics
            .lines()
            .any(|line| line.starts_with("apiserver_request_total{verb=\"other\"")),
        "junk methods are counted as verb=\"other\":\n{metrics}"
    );
    server.shutdown().await;
}
