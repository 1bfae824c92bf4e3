//! Raw HTTPS access to an in-process server, for suites that check exact status codes,
//! bodies, `Warning` headers and watch events (what a kube-rs client would hide).

use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;
use tokio::sync::mpsc;

use super::{TestServer, WAIT, within};

/// A fixed wait, only for a check no sentinel can end (a controller held back for every
/// object alike); "no watch event" is proved with a sentinel ([`Watch::expect_quiet`]).
pub const QUIET: Duration = Duration::from_millis(300);

/// An object's `metadata.uid`.
pub fn uid(object: &Value) -> String {
    object["metadata"]["uid"]
        .as_str()
        .unwrap_or_else(|| panic!("no uid in {object}"))
        .to_string()
}

/// The names of a list's items, in the list's order.
pub fn item_names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|item| item["metadata"]["name"].as_str().map(str::to_string))
        .collect()
}

/// An object's `metadata.resourceVersion` as a number.
pub fn rv(object: &Value) -> i64 {
    object["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|rv| rv.parse().ok())
        .unwrap_or_else(|| panic!("no resourceVersion in {object}"))
}

/// A response read in full: status, `Warning` header values, and the body (JSON, or the raw
/// text as a JSON string when it is not JSON).
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub warnings: Vec<String>,
    pub body: Value,
}

impl Reply {
    /// Asserts the HTTP status, printing the body otherwise; returns the body.
    pub fn expect(self, status: u16) -> Value {
        assert_eq!(self.status, status, "unexpected HTTP status: {}", self.body);
        self.body
    }

    /// Asserts a failure `Status` with this code and reason; returns it.
    pub fn expect_failure(self, code: u16, reason: &str) -> Value {
        let body = self.expect(code);
        assert_eq!(body["kind"], "Status", "{body}");
        assert_eq!(body["apiVersion"], "v1", "{body}");
        assert_eq!(body["status"], "Failure", "{body}");
        assert_eq!(body["code"], code, "{body}");
        if reason.is_empty() {
            // Upstream leaves an empty reason out of a Status (omitempty).
            assert!(body.get("reason").is_none(), "no reason expected: {body}");
        } else {
            assert_eq!(body["reason"], reason, "{body}");
        }
        body
    }
}

/// An HTTPS client trusting only the server's CA, sending the admin token.
pub struct Http {
    pub client: reqwest::Client,
    pub base: String,
    pub token: String,
}

impl Http {
    pub fn new(server: &TestServer) -> Http {
        let pki = server.dir.path().join("data").join("pki");
        let token = std::fs::read_to_string(pki.join("admin.token"))
            .expect("read the admin token")
            .trim()
            .to_string();
        let ca = std::fs::read(pki.join("ca.crt")).expect("read the CA certificate");
        let client = reqwest::Client::builder()
            .tls_built_in_root_certs(false)
            .add_root_certificate(reqwest::Certificate::from_pem(&ca).expect("a PEM CA"))
            .connect_timeout(Duration::from_secs(5))
            .build()
            .expect("an HTTPS client");
        Http {
            client,
            base: format!("https://{}", server.running.local_addr),
            token,
        }
    }

    pub async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        content_type: &str,
        body: Option<&Value>,
    ) -> Reply {
        let bytes = body.map(|b| serde_json::to_vec(b).expect("serialise the body"));
        self.send_bytes(method, path, content_type, bytes).await
    }

    /// Sends a body as given (malformed JSON, duplicate keys, protobuf…).
    pub async fn send_bytes(
        &self,
        method: reqwest::Method,
        path: &str,
        content_type: &str,
        body: Option<Vec<u8>>,
    ) -> Reply {
        let mut request = self
            .client
            .request(method.clone(), format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .timeout(WAIT);
        if let Some(body) = body {
            request = request
                .header(reqwest::header::CONTENT_TYPE, content_type)
                .body(body);
        }
        let response = request
            .send()
            .await
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let status = response.status().as_u16();
        let warnings = response
            .headers()
            .get_all(reqwest::header::WARNING)
            .iter()
            .map(|v| v.to_str().expect("an ASCII Warning header").to_string())
            .collect();
        let text = response.text().await.expect("read the response body");
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Reply {
            status,
            warnings,
            body,
        }
    }

    pub async fn get(&self, path: &str) -> Reply {
        self.send(reqwest::Method::GET, path, "", None).await
    }

    pub async fn post(&self, path: &str, body: &Value) -> Reply {
        self.send(reqwest::Method::POST, path, "application/json", Some(body))
            .await
    }

    pub async fn put(&self, path: &str, body: &Value) -> Reply {
        self.send(reqwest::Method::PUT, path, "application/json", Some(body))
            .await
    }

    pub async fn merge_patch(&self, path: &str, patch: &Value) -> Reply {
        self.send(
            reqwest::Method::PATCH,
            path,
            "application/merge-patch+json",
            Some(patch),
        )
        .await
    }

    pub async fn json_patch(&self, path: &str, patch: &Value) -> Reply {
        self.send(
            reqwest::Method::PATCH,
            path,
            "application/json-patch+json",
            Some(patch),
        )
        .await
    }

    /// DELETE with no body: options, if any, come from the query (H2).
    pub async fn delete(&self, path: &str) -> Reply {
        self.send(reqwest::Method::DELETE, path, "", None).await
    }

    /// DELETE with a `DeleteOptions` body (H2: the query is then ignored).
    pub async fn delete_with(&self, path: &str, options: &Value) -> Reply {
        self.send(
            reqwest::Method::DELETE,
            path,
            "application/json",
            Some(options),
        )
        .await
    }

    /// The value of one sample on `/metrics` (a metric without labels); None when absent.
    pub async fn metric(&self, name: &str) -> Option<f64> {
        let reply = self.get("/metrics").await;
        assert_eq!(reply.status, 200, "GET /metrics: {}", reply.body);
        let text = reply.body.as_str().unwrap_or_default().to_string();
        text.lines()
            .filter_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
            .find_map(|value| value.trim().parse().ok())
    }

    /// Waits until the garbage collector has worked through everything it observed before
    /// this call: a sentinel Secret in `namespace`, owned by a ConfigMap that never existed,
    /// is created and must be collected. The collector observes changes in revision order
    /// and takes queued work in order, and collecting the sentinel takes two rounds of it
    /// (verify the unseen owner, then delete the dependent), so once the sentinel is gone
    /// the work queued before it has been taken up and, in practice, done. This is how
    /// "the collector did nothing" is proved without a fixed sleep.
    pub async fn collector_caught_up(&self, namespace: &str) {
        static SENTINELS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let sequence = SENTINELS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let name = format!("gc-sentinel-{sequence}");
        let path = format!("/api/v1/namespaces/{namespace}/secrets");
        self.post(
            &path,
            &serde_json::json!({"apiVersion": "v1", "kind": "Secret", "metadata": {
                "name": name,
                "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap",
                    "name": format!("{name}-owner"),
                    "uid": format!("00000000-0000-4000-8000-{sequence:012}")}]}}),
        )
        .await
        .expect(201);
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let reply = self.get(&format!("{path}/{name}")).await;
            if reply.status == 404 {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the garbage collector never collected the sentinel {namespace}/{name}: {}",
                reply.body
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Writes something the watch on `collection` must see, and returns the event it makes
    /// (type, object name): with a `metadata.name` field selector, an annotation on that
    /// object (or the object itself, created, once it is gone); otherwise a new object in the
    /// collection (ConfigMaps, Pods, Namespaces).
    pub async fn write_watch_sentinel(&self, collection: &str) -> (&'static str, String) {
        static SENTINELS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let sequence = SENTINELS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let (path, query) = collection.split_once('?').unwrap_or((collection, ""));
        let plural = path.rsplit('/').next().unwrap_or_default();
        let selected = query
            .split('&')
            .find_map(|part| part.strip_prefix("fieldSelector=metadata.name%3D"));
        let name = match selected {
            Some(name) => {
                let annotate = serde_json::json!({"metadata": {"annotations": {
                    "test.finale.dev/watch-sentinel": sequence.to_string()}}});
                let reply = self.merge_patch(&format!("{path}/{name}"), &annotate).await;
                match reply.status {
                    200 => return ("MODIFIED", name.to_string()),
                    404 => name.to_string(),
                    _ => panic!(
                        "cannot annotate {path}/{name} as a watch sentinel: {}",
                        reply.body
                    ),
                }
            }
            None => format!("watch-sentinel-{sequence}"),
        };
        let object = match plural {
            "configmaps" => {
                serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}})
            }
            "namespaces" => {
                serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
            }
            // Another scheduler's Pod: the in-process scheduler leaves it alone, so the
            // sentinel's ADDED is its only event.
            "pods" => {
                serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                "spec": {"schedulerName": "watch-sentinel",
                         "containers": [{"name": "c", "image": "busybox:1.36"}]}})
            }
            other => panic!("no watch sentinel for the collection {other}"),
        };
        self.post(path, &object).await.expect(201);
        ("ADDED", name)
    }

    /// Opens `?watch=true&resourceVersion=rv` on a collection: every event after `rv`.
    pub async fn watch(&self, collection: &str, rv: i64) -> Watch {
        let separator = if collection.contains('?') { '&' } else { '?' };
        let url = format!(
            "{}{collection}{separator}watch=true&resourceVersion={rv}",
            self.base
        );
        let response = within(WAIT, self.client.get(url).bearer_auth(&self.token).send())
            .await
            .expect("open the watch");
        assert_eq!(response.status().as_u16(), 200, "the watch is refused");
        let (events, received) = mpsc::unbounded_channel();
        let reader = tokio::spawn(async move {
            let mut body = response.bytes_stream();
            let mut buffer: Vec<u8> = Vec::new();
            while let Some(Ok(chunk)) = body.next().await {
                buffer.extend_from_slice(&chunk);
                while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = buffer.drain(..=end).collect();
                    let event: Value = serde_json::from_slice(&line[..end])
                        .unwrap_or_else(|e| panic!("a watch line is not JSON ({e})"));
                    let kind = event["type"].as_str().unwrap_or_default().to_string();
                    if kind != "BOOKMARK" && events.send((kind, event["object"].clone())).is_err() {
                        return;
                    }
                }
            }
        });
        Watch {
            collection: collection.to_string(),
            received,
            reader,
        }
    }
}

/// A raw watch whose events are collected by a background reader.
pub struct Watch {
    /// The collection (with its query) this watch follows.
    pub collection: String,
    pub received: mpsc::UnboundedReceiver<(String, Value)>,
    pub reader: tokio::task::JoinHandle<()>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

impl Watch {
    /// The next event, within [`WAIT`].
    pub async fn next(&mut self) -> (String, Value) {
        within(WAIT, self.received.recv())
            .await
            .expect("the watch stream ended")
    }

    /// The next event, which must be `kind` for the object `name`; returns its object.
    pub async fn expect(&mut self, kind: &str, name: &str) -> Value {
        let (got, object) = self.next().await;
        assert_eq!(
            (got.as_str(), object["metadata"]["name"].as_str()),
            (kind, Some(name)),
            "unexpected event: {got} {object}"
        );
        object
    }

    /// W1 without a fixed wait: nothing arrives before a sentinel written now
    /// ([`Http::write_watch_sentinel`]). A watch is served in revision order, so an event for
    /// anything written before the sentinel would come first. The sentinel's event is consumed.
    pub async fn expect_quiet(&mut self, http: &Http) {
        let (kind, name) = http.write_watch_sentinel(&self.collection).await;
        let (got, object) = self.next().await;
        assert_eq!(
            (got.as_str(), object["metadata"]["name"].as_str()),
            (kind, Some(name.as_str())),
            "expected no watch event before the sentinel ({kind} {name}), got {got} {object}"
        );
    }

    /// Every event before a sentinel written now ([`Http::write_watch_sentinel`]), as (type,
    /// name, rv); the sentinel's event is consumed.
    pub async fn drain(&mut self, http: &Http) -> Vec<(String, String, i64)> {
        let (sentinel_kind, sentinel) = http.write_watch_sentinel(&self.collection).await;
        let mut events = Vec::new();
        loop {
            let (kind, object) = self.next().await;
            let name = object["metadata"]["name"]
                .as_str()
                .unwrap_or("")
                .to_string();
            if kind == sentinel_kind && name == sentinel {
                return events;
            }
            events.push((kind, name, rv(&object)));
            assert!(events.len() < 100, "the sentinel never came: {events:?}");
        }
    }
}
