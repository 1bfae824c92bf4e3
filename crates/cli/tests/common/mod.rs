//! Shared helpers for the `finale` end-to-end suites: a server on a private data directory,
//! kubectl against it, and a raw HTTPS client that trusts the server's CA.
//!
//! Every helper is bounded in time and talks to 127.0.0.1 only. Failures carry the tail of
//! the server log.

// Each suite uses a different subset of these helpers.
#![allow(dead_code)]

pub mod agent;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use finale_e2e::{FinaleServer, Kubectl};
use serde_json::Value;

/// The `finale` binary cargo built for this test run.
pub fn binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_finale"))
}

/// How many server log lines assertion messages carry.
const LOG_TAIL: usize = 60;

/// A running server on a temporary data directory, plus kubectl pointed at it.
pub struct Env {
    pub server: FinaleServer,
    pub kubectl: Kubectl,
    /// Removed on drop, after the server (declared after it) has been killed.
    pub dir: tempfile::TempDir,
}

impl Env {
    pub fn start() -> Env {
        Self::start_with(&[])
    }

    /// A server started with extra `finale server` arguments.
    pub fn start_with(extra_args: &[&str]) -> Env {
        let dir = tempfile::tempdir().expect("temporary directory");
        let data_dir = dir.path().join("data");
        let server = FinaleServer::start_with(binary(), &data_dir, "127.0.0.1:0", extra_args)
            .expect("start finale server");
        let kubectl = Kubectl::new(&server.kubeconfig).expect("kubectl fixture");
        Env {
            server,
            kubectl,
            dir,
        }
    }

    /// The tail of the server log, for assertion messages.
    pub fn log(&self) -> String {
        format!(
            "\n--- server log (last {LOG_TAIL} lines) ---\n{}",
            self.server.log_tail(LOG_TAIL)
        )
    }

    /// Where `finale` commands run by [`finale`] cache discovery (`$KUBECACHEDIR`).
    pub fn cache_dir(&self) -> std::path::PathBuf {
        self.dir.path().join("kube-cache")
    }

    /// Runs kubectl and returns stdout; panics with stderr and the server log unless it
    /// exits 0.
    pub fn ok(&self, args: &[&str]) -> String {
        self.kubectl
            .ok(args)
            .unwrap_or_else(|e| panic!("{e:#}{}", self.log()))
    }

    pub fn ok_with_stdin(&self, args: &[&str], stdin: &str) -> String {
        self.kubectl
            .ok_with_stdin(args, Some(stdin))
            .unwrap_or_else(|e| panic!("{e:#}{}", self.log()))
    }

    /// Runs kubectl whatever its exit code.
    pub fn run(&self, args: &[&str]) -> Run {
        let output = self
            .kubectl
            .run(args)
            .unwrap_or_else(|e| panic!("cannot run kubectl {}: {e:#}", args.join(" ")));
        Run::new(args, output)
    }

    pub fn run_with_stdin(&self, args: &[&str], stdin: &str) -> Run {
        let output = self
            .kubectl
            .run_with_stdin(args, Some(stdin))
            .unwrap_or_else(|e| panic!("cannot run kubectl {}: {e:#}", args.join(" ")));
        Run::new(args, output)
    }

    /// `kubectl get … -o json`, parsed.
    pub fn get_json(&self, args: &[&str]) -> Value {
        let mut all = vec!["get"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["-o", "json"]);
        let out = self.ok(&all);
        serde_json::from_str(&out).unwrap_or_else(|e| {
            panic!(
                "kubectl {} printed invalid JSON ({e}):\n{out}",
                all.join(" ")
            )
        })
    }

    /// A raw HTTPS client with the admin token.
    pub fn api(&self) -> Api {
        Api::new(&self.server).unwrap_or_else(|e| panic!("{e:#}{}", self.log()))
    }
}

/// A finished run of kubectl or of the `finale` CLI.
pub struct Run {
    /// The command line, for messages (`kubectl get …`, `finale explain …`).
    pub what: String,
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    fn new(args: &[&str], output: Output) -> Run {
        Run {
            what: format!("kubectl {}", args.join(" ")),
            code: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// For assertion messages.
    pub fn describe(&self) -> String {
        format!(
            "{} exited {:?}\nstdout:\n{}\nstderr:\n{}",
            self.what, self.code, self.stdout, self.stderr
        )
    }
}

/// How long one CLI run may take before it is killed.
pub const CLI_RUN_LIMIT: Duration = Duration::from_secs(60);

/// Runs `command` to its end (bounded by [`CLI_RUN_LIMIT`]), collecting its output. Colour is
/// decided by the flags under test, never by the environment running them.
pub fn run_bounded(mut command: std::process::Command, what: String) -> Run {
    command
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .env_remove("NO_COLOR");
    let mut child = command
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
    let started = Instant::now();
    while child.try_wait().expect("wait for the child").is_none() {
        if started.elapsed() > CLI_RUN_LIMIT {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = child.wait_with_output().expect("child output");
    Run {
        what,
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// `finale ARGS --kubeconfig <the server's>`, bounded.
pub fn finale(env: &Env, args: &[&str]) -> Run {
    let mut command = std::process::Command::new(binary());
    command
        .args(args)
        .arg("--kubeconfig")
        .arg(&env.server.kubeconfig)
        // The discovery cache stays with the test's files, not in the user's ~/.kube.
        .env("KUBECACHEDIR", env.cache_dir());
    run_bounded(command, format!("finale {}", args.join(" ")))
}

/// A response read in full.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub content_type: String,
    pub body: String,
}

impl Response {
    /// The body as JSON; panics with the body when it is not JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| {
            panic!("HTTP {} body is not JSON ({e}): {}", self.status, self.body)
        })
    }

    /// Asserts a Kubernetes `Status` failure with this code and reason; returns it.
    pub fn expect_status(&self, code: u16, reason: &str) -> Value {
        assert_eq!(
            self.status, code,
            "unexpected HTTP status; body: {}",
            self.body
        );
        assert!(
            self.content_type.starts_with("application/json"),
            "a Status must be JSON, got content type {:?}",
            self.content_type
        );
        let status = self.json();
        assert_eq!(status["kind"], "Status", "{status}");
        assert_eq!(status["apiVersion"], "v1", "{status}");
        assert_eq!(status["status"], "Failure", "{status}");
        assert_eq!(status["code"], code, "{status}");
        assert_eq!(status["reason"], reason, "{status}");
        assert!(
            status["message"].as_str().is_some_and(|m| !m.is_empty()),
            "a Status needs a message: {status}"
        );
        status
    }
}

/// Raw HTTPS to the server: trusts its CA, optionally sends a bearer token, HTTP/1.1.
#[derive(Clone)]
pub struct Api {
    client: reqwest::blocking::Client,
    pub base: String,
    token: Option<String>,
}

impl Api {
    /// A client with the admin token.
    pub fn new(server: &FinaleServer) -> anyhow::Result<Api> {
        let token = server.token()?;
        Api::with_token(server, Some(token))
    }

    /// A client that sends `token` (or no `Authorization` header at all).
    pub fn with_token(server: &FinaleServer, token: Option<String>) -> anyhow::Result<Api> {
        let ca = reqwest::Certificate::from_pem(server.ca_pem()?.as_bytes())?;
        let client = reqwest::blocking::Client::builder()
            .add_root_certificate(ca)
            .timeout(Duration::from_secs(15))
            .connect_timeout(Duration::from_secs(5))
            // Many writer threads share one client; keep enough idle connections.
            .pool_max_idle_per_host(64)
            .build()?;
        Ok(Api {
            client,
            base: server.url.clone(),
            token,
        })
    }

    pub fn request(
        &self,
        method: reqwest::Method,
        path: &str,
        content_type: Option<&str>,
        body: Option<Vec<u8>>,
    ) -> anyhow::Result<Response> {
        let mut request = self.client.request(method, format!("{}{path}", self.base));
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        if let Some(content_type) = content_type {
            request = request.header(reqwest::header::CONTENT_TYPE, content_type);
        }
        if let Some(body) = body {
            request = request.body(body);
        }
        let response = request.send()?;
        let status = response.status().as_u16();
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let body = response.text()?;
        Ok(Response {
            status,
            content_type,
            body,
        })
    }

    pub fn get(&self, path: &str) -> anyhow::Result<Response> {
        self.request(reqwest::Method::GET, path, None, None)
    }

    pub fn post_json(&self, path: &str, body: &Value) -> anyhow::Result<Response> {
        self.request(
            reqwest::Method::POST,
            path,
            Some("application/json"),
            Some(serde_json::to_vec(body)?),
        )
    }

    /// Names of the ConfigMaps in `namespace`, read with a list (asserting it succeeds).
    pub fn configmap_names(&self, namespace: &str) -> Vec<String> {
        let response = self
            .get(&format!("/api/v1/namespaces/{namespace}/configmaps"))
            .expect("list configmaps");
        assert_eq!(response.status, 200, "list failed: {}", response.body);
        response.json()["items"]
            .as_array()
            .expect("a list has items")
            .iter()
            .map(|item| item["metadata"]["name"].as_str().unwrap_or("").to_string())
            .collect()
    }
}

/// A minimal ConfigMap manifest as JSON.
pub fn configmap(name: &str, data: &[(&str, &str)]) -> Value {
    let data: serde_json::Map<String, Value> = data
        .iter()
        .map(|(k, v)| (k.to_string(), Value::String(v.to_string())))
        .collect();
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name},
        "data": data,
    })
}

/// Polls `check` every 50 ms until it returns `Some`, for at most `timeout`.
pub fn eventually<T>(timeout: Duration, mut check: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check() {
            return Some(value);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether a kubectl run with `-v=6` has logged an answered watch request (a `watch=true`
/// request with `200 OK`): its initial list is done and its watch is open. A test waits for
/// this instead of sleeping while a background kubectl "gets going".
pub fn kubectl_watch_opened(output: &str) -> bool {
    output
        .lines()
        .any(|line| line.contains("watch=true") && line.contains("200 OK"))
}

/// `metadata.resourceVersion` as a number (it is the store revision).
pub fn resource_version(object: &Value) -> i64 {
    object["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|rv| rv.parse().ok())
        .unwrap_or_else(|| panic!("no numeric resourceVersion in {object}"))
}

/// A kube-rs client from the server's kubeconfig.
pub async fn kube_client(server: &FinaleServer) -> kube::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let kubeconfig = kube::config::Kubeconfig::read_from(&server.kubeconfig).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .expect("client config from the kubeconfig");
    kube::Client::try_from(config).expect("kube client")
}

/// A connection to the PostgreSQL at `url`, for assertions about what exists there.
pub async fn postgres_client(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect to PostgreSQL");
    tokio::spawn(connection);
    client
}

/// The first column of `query`'s rows, as a set of names.
pub async fn postgres_names(url: &str, query: &str) -> std::collections::BTreeSet<String> {
    postgres_client(url)
        .await
        .query(query, &[])
        .await
        .unwrap_or_else(|e| panic!("{query}: {e}"))
        .iter()
        .map(|row| row.get::<_, String>(0))
        .collect()
}

/// The databases on a PostgreSQL server, templates and `postgres` aside.
pub const USER_DATABASES: &str =
    "SELECT datname FROM pg_database WHERE NOT datistemplate AND datname <> 'postgres'";

/// Events of one raw watch (`path` must already hold a `?`), from `from`, as (resourceVersion, type, object), read until `done` says so.
pub fn watch_until(
    server: &FinaleServer,
    path: &str,
    from: i64,
    mut done: impl FnMut(&str, &Value) -> bool,
) -> Vec<(i64, String, Value)> {
    let ca = reqwest::Certificate::from_pem(server.ca_pem().expect("CA").as_bytes())
        .expect("CA certificate");
    let client = reqwest::blocking::Client::builder()
        .add_root_certificate(ca)
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client");
    let url = format!(
        "{}{path}&watch=1&resourceVersion={from}&timeoutSeconds=25",
        server.url
    );
    let response = client
        .get(url)
        .bearer_auth(server.token().expect("token"))
        .send()
        .expect("watch");
    assert_eq!(response.status().as_u16(), 200, "watch {path}");
    let mut events = Vec::new();
    for line in BufReader::new(response).lines() {
        let Ok(line) = line else { break };
        let event: Value = serde_json::from_str(&line).expect("watch event JSON");
        let kind = event["type"].as_str().unwrap_or("").to_string();
        let object = event["object"].clone();
        let stop = done(&kind, &object);
        events.push((resource_version(&object), kind, object));
        if stop {
            break;
        }
    }
    events
}
