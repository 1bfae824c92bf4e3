//! Per-kind field selectors (api-surface §12 P1.10): events by `involvedObject.*`
//! (`kubectl describe`), pods by `spec.nodeName` and `status.phase`, secrets by `type`; on list
//! and watch alike, and a clear 400 for labels a kind does not support.

mod common;

use common::TestServer;
use common::raw::{Http, item_names};
use serde_json::{Value, json};

/// The names of a list's items, sorted.
fn names(list: &Value) -> Vec<String> {
    let mut names = item_names(list);
    names.sort();
    names
}

#[tokio::test]
async fn events_select_by_involved_object() {
    let server = TestServer::start().await;
    let http = Http::new(&server);
    for (name, kind, object) in [
        ("e1", "Pod", "web"),
        ("e2", "Pod", "db"),
        ("e3", "ConfigMap", "web"),
    ] {
        http.post(
            "/api/v1/namespaces/default/events",
            &json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": name},
                    "involvedObject": {"kind": kind, "name": object, "namespace": "default", "uid": format!("uid-{name}")},
                    "reason": "Tested", "message": "m", "type": "Normal"}),
        )
        .await
        .expect(201);
    }
    let select = |selector: &str| {
        format!(
            "/api/v1/namespaces/default/events?fieldSelector={}",
            selector.replace('=', "%3D").replace(',', "%2C")
        )
    };
    let list = http
        .get(&select("involvedObject.name=web"))
        .await
        .expect(200);
    assert_eq!(names(&list), ["e1", "e3"]);
    let list = http
        .get(&select("involvedObject.kind=Pod,involvedObject.name=web"))
        .await
        .expect(200);
    assert_eq!(names(&list), ["e1"]);
    let list = http
        .get(&select("involvedObject.uid=uid-e2"))
        .await
        .expect(200);
    assert_eq!(names(&list), ["e2"]);
    server.shutdown().await;
}

#[tokio::test]
async fn pods_select_by_node_and_phase_and_secrets_by_type() {
    let server = TestServer::start().await;
    let http = Http::new(&server);
    for (name, node) in [("a", "node-1"), ("b", "node-2"), ("c", "")] {
        let mut spec = json!({"containers": [{"name": "c", "image": "busybox"}]});
        if !node.is_empty() {
            spec["nodeName"] = json!(node);
        }
        http.post(
            "/api/v1/namespaces/default/pods",
            &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}),
        )
        .await
        .expect(201);
    }
    let mut running = http
        .get("/api/v1/namespaces/default/pods/a")
        .await
        .expect(200);
    running["status"]["phase"] = json!("Running");
    http.put("/api/v1/namespaces/default/pods/a/status", &running)
        .await
        .expect(200);

    let list = http
        .get("/api/v1/namespaces/default/pods?fieldSelector=spec.nodeName%3Dnode-1")
        .await
        .expect(200);
    assert_eq!(names(&list), ["a"]);
    // Unscheduled pods, as a scheduler looks for them.
    let list = http
        .get("/api/v1/namespaces/default/pods?fieldSelector=spec.nodeName%3D")
        .await
        .expect(200);
    assert_eq!(names(&list), ["c"]);
    let list = http
        .get("/api/v1/pods?fieldSelector=status.phase%21%3DRunning")
        .await
        .expect(200);
    assert_eq!(names(&list), ["b", "c"]);

    for (name, kind) in [("s1", "Opaque"), ("s2", "kubernetes.io/tls")] {
        let mut secret =
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "type": kind});
        if kind == "kubernetes.io/tls" {
            secret["data"] = json!({"tls.crt": "", "tls.key": ""});
        }
        http.post("/api/v1/namespaces/default/secrets", &secret)
            .await
            .expect(201);
    }
    let list = http
        .get("/api/v1/namespaces/default/secrets?fieldSelector=type%3Dkubernetes.io%2Ftls")
        .await
        .expect(200);
    assert_eq!(names(&list), ["s2"]);

    // A label the kind does not have is a 400 that names it.
    let status = http
        .get("/api/v1/namespaces/default/configmaps?fieldSelector=spec.nodeName%3Dx")
        .await
        .expect_failure(400, "BadRequest");
    assert!(
        status["message"]
            .as_str()
            .is_some_and(|m| m.contains("spec.nodeName")),
        "{status}"
    );
    server.shutdown().await;
}
