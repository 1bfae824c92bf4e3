//! What the terminating index answers (issue 11): a `FinalizerClaim`'s status computed on
//! read (GET, LIST, `kubectl get`'s Table) and the `finale_*` deletion metrics on
//! `/metrics`, against an in-process server over HTTPS.

mod common;

use std::time::Duration;

use common::raw::Http;
use common::{TestServer, WAIT};
use serde_json::{Value, json};

const CLAIMS: &str = "/apis/deletion.finale.dev/v1alpha1/finalizerclaims";
const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";
const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases";

fn config_map(name: &str, finalizers: &[&str]) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "finalizers": finalizers}})
}

fn lease(holder: &str, age: chrono::Duration, duration: i64) -> Value {
    let renewed = chrono::Utc::now() - age;
    json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "db-operator", "namespace": "kube-system"},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": duration,
            "renewTime": renewed.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()}})
}

/// Polls GET `path` until `done` holds, within [`WAIT`]; returns the body.
async fn eventually(http: &Http, path: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let reply = http.get(path).await;
        if done(&reply.body) {
            return reply.body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{path} never reached the expected state; last: {:#}",
            reply.body
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls `/metrics` until `done` holds for its text, within [`WAIT`]; returns the text.
async fn metrics_until(http: &Http, done: impl Fn(&str) -> bool) -> String {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let text = http.get("/metrics").await.expect(200);
        let text = text.as_str().unwrap_or_default().to_string();
        if done(&text) {
            return text;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "/metrics never reached the expected state; last:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .filter_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .find_map(|value| value.trim().parse().ok())
}

#[tokio::test]
async fn a_claims_status_is_computed_on_read_from_the_index() {
    let server = TestServer::start().await;
    let http = Http::new(&server);
    http.post(
        LEASES,
        &lease("db-operator-7d9f", chrono::Duration::seconds(2), 30),
    )
    .await
    .expect(201);
    http.post(
        CLAIMS,
        &json!({"apiVersion": "deletion.finale.dev/v1alpha1", "kind": "FinalizerClaim",
            "metadata": {"name": "db-example"},
            "spec": {"finalizer": "db.example.com/", "resources": [{"resource": "configmaps"}],
                "controller": "db-operator",
                "lease": {"namespace": "kube-system", "name": "db-operator"}}}),
    )
    .await
    .expect(201);
    let claim_path = format!("{CLAIMS}/db-example");

    // Given no object is being deleted, the claim is live with nothing pending.
    let claim = http.get(&claim_path).await.expect(200);
    assert_eq!(claim["status"]["live"], true, "{claim:#}");
    assert_eq!(claim["status"]["holder"], "db-operator-7d9f");
    assert_eq!(claim["status"]["pending"], 0);
    assert!(claim["status"].get("oldestPending").is_none(), "{claim:#}");

    // When two ConfigMaps holding its finalizer are deleted (first "first"), and one that
    // another claim would cover and a plain one too,
    for (name, finalizers) in [
        ("first", vec!["db.example.com/cleanup"]),
        ("second", vec!["db.example.com/cleanup"]),
        ("audited", vec!["keep.example.com/audit"]),
    ] {
        http.post(CONFIGMAPS, &config_map(name, &finalizers))
            .await
            .expect(201);
        http.delete(&format!("{CONFIGMAPS}/{name}"))
            .await
            .expect(200);
        // deletionTimestamp has seconds precision: keep "first" strictly the oldest.
        if name == "first" {
            tokio::time::sleep(Duration::from_millis(1100)).await;
        }
    }

    // then GET shows both pending, the oldest first deleted, and no progress yet;
    let claim = eventually(&http, &claim_path, |c| c["status"]["pending"] == 2).await;
    let status = &claim["status"];
    assert_eq!(status["oldestPending"]["name"], "first", "{status:#}");
    assert_eq!(status["oldestPending"]["namespace"], "default");
    assert!(status["oldestPending"]["deletionTimestamp"].is_string());
    assert!(status.get("lastProgress").is_none(), "{status:#}");
    assert_eq!(status["leaseState"], "Live");
    // and so does LIST.
    let list = http.get(CLAIMS).await.expect(200);
    assert_eq!(list["items"][0]["status"]["pending"], 2, "{list:#}");
    // The status is computed, never stored: the stored object has none.
    let stored = server
        .registry()
        .store()
        .get(b"/registry/deletion.finale.dev/finalizerclaims/db-example")
        .await
        .expect("read the stored claim")
        .0
        .expect("the claim is stored");
    let stored: Value = serde_json::from_slice(&stored.value).expect("JSON");
    assert!(stored.get("status").is_none(), "{stored:#}");

    // kubectl get: Finalizer, Live, Holder, Pending, Age (Lease and Policy with -o wide).
    let table = http
        .client
        .get(format!("{}{CLAIMS}", http.base))
        .bearer_auth(&http.token)
        .header("accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
        .send()
        .await
        .expect("GET the table")
        .json::<Value>()
        .await
        .expect("a JSON table");
    let columns: Vec<(&str, i64)> = table["columnDefinitions"]
        .as_array()
        .expect("columns")
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap_or_default(),
                c["priority"].as_i64().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(
        columns,
        [
            ("Name", 0),
            ("Finalizer", 0),
            ("Live", 0),
            ("Holder", 0),
            ("Pending", 0),
            ("Age", 0),
            ("Lease", 1),
            ("Policy", 1)
        ]
    );
    let cells = table["rows"][0]["cells"].as_array().expect("cells");
    assert_eq!(
        cells[..5],
        [
            json!("db-example"),
            json!("db.example.com/"),
            json!("True"),
            json!("db-operator-7d9f"),
            json!(2)
        ]
    );

    // When the controller removes its finalizer from "first", the claim shows the progress.
    http.merge_patch(
        &format!("{CONFIGMAPS}/first"),
        &json!({"metadata": {"finalizers": []}}),
    )
    .await
    .expect(200);
    let claim = eventually(&http, &claim_path, |c| c["status"]["pending"] == 1).await;
    assert_eq!(claim["status"]["oldestPending"]["name"], "second");
    assert!(claim["status"]["lastProgress"].is_string(), "{claim:#}");

    // When its Lease has expired, the claim is not live.
    http.put(
        &format!("{LEASES}/db-operator"),
        &lease("db-operator-7d9f", chrono::Duration::seconds(120), 30),
    )
    .await
    .expect(200);
    let claim = http.get(&claim_path).await.expect(200);
    assert_eq!(claim["status"]["live"], false, "{claim:#}");
    assert_eq!(claim["status"]["leaseState"], "Expired");
    server.shutdown().await;
}

#[tokio::test]
async fn deletion_metrics_count_terminating_objects_pending_finalizers_and_unclaimed_ones() {
    let server = TestServer::start().await;
    let http = Http::new(&server);

    // Given nothing is being deleted, the gauges are there and zero.
    let text = metrics_until(&http, |t| t.contains("finale_unclaimed_finalizers")).await;
    assert_eq!(
        sample(&text, "finale_unclaimed_finalizers"),
        Some(0.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "finale_oldest_stuck_object_age_seconds"),
        Some(0.0)
    );
    assert!(!text.contains("finale_terminating_objects{"), "{text}");

    // When a claimed finalizer (live controller) and an unclaimed one hold deleted objects,
    http.post(
        LEASES,
        &lease("db-operator-7d9f", chrono::Duration::seconds(1), 300),
    )
    .await
    .expect(201);
    http.post(
        CLAIMS,
        &json!({"apiVersion": "deletion.finale.dev/v1alpha1", "kind": "FinalizerClaim",
            "metadata": {"name": "db-example"},
            "spec": {"finalizer": "db.example.com/cleanup", "resources": [{"resource": "configmaps"}],
                "controller": "db-operator",
                "lease": {"namespace": "kube-system", "name": "db-operator"}}}),
    )
    .await
    .expect(201);
    for (name, finalizer) in [
        ("claimed-1", "db.example.com/cleanup"),
        ("claimed-2", "db.example.com/cleanup"),
        ("unclaimed", "keep.example.com/audit"),
    ] {
        http.post(CONFIGMAPS, &config_map(name, &[finalizer]))
            .await
            .expect(201);
        http.delete(&format!("{CONFIGMAPS}/{name}"))
            .await
            .expect(200);
    }

    // then the gauges count them, per resource and per finalizer;
    let text = metrics_until(&http, |t| {
        sample(t, "finale_terminating_objects{resource=\"configmaps\"}") == Some(3.0)
    })
    .await;
    assert_eq!(
        sample(
            &text,
            "finale_finalizer_pending_objects{finalizer=\"db.example.com/cleanup\"}"
        ),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "finale_finalizer_pending_objects{finalizer=\"keep.example.com/audit\"}"
        ),
        Some(1.0)
    );
    // only the unclaimed finalizer counts as unclaimed and makes its object stuck.
    assert_eq!(sample(&text, "finale_unclaimed_finalizers"), Some(1.0));
    let age = sample(&text, "finale_oldest_stuck_object_age_seconds").expect("the age gauge");
    assert!(age > 0.0 && age < 60.0, "{text}");

    // When objects go, their series go with them (no stale series).
    for name in ["claimed-1", "claimed-2", "unclaimed"] {
        http.merge_patch(
            &format!("{CONFIGMAPS}/{name}"),
            &json!({"metadata": {"finalizers": []}}),
        )
        .await
        .expect(200);
    }
    let text = metrics_until(&http, |t| !t.contains("finale_terminating_objects{")).await;
    assert!(
        !text.contains("finale_finalizer_pending_objects{"),
        "{text}"
    );
    assert_eq!(sample(&text, "finale_unclaimed_finalizers"), Some(0.0));

    // Cardinality is bounded: 60 distinct finalizers give 50 series and "other".
    let many: Vec<String> = (0..60).map(|i| format!("f{i:02}.example.com/x")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    http.post(CONFIGMAPS, &config_map("crowded", &many))
        .await
        .expect(201);
    http.delete(&format!("{CONFIGMAPS}/crowded"))
        .await
        .expect(200);
    let text = metrics_until(&http, |t| {
        sample(t, "finale_terminating_objects{resource=\"configmaps\"}") == Some(1.0)
    })
    .await;
    let series = text
        .lines()
        .filter(|l| l.starts_with("finale_finalizer_pending_objects{"))
        .count();
    assert_eq!(series, 51, "{text}");
    assert_eq!(
        sample(
            &text,
            "finale_finalizer_pending_objects{finalizer=\"other\"}"
        ),
        Some(10.0)
    );
    assert_eq!(sample(&text, "finale_unclaimed_finalizers"), Some(60.0));
    server.shutdown().await;
}
