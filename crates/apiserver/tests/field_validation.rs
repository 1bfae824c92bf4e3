//! `?fieldValidation=Strict|Warn|Ignore` on built-in kinds over HTTP (api-surface §6.7):
//! unknown and duplicate fields rejected, reported as warnings, or dropped — never stored.

mod common;

use common::TestServer;
use common::raw::Http;
use serde_json::json;

const CONFIG_MAPS: &str = "/api/v1/namespaces/default/configmaps";

fn config_map_with_extras(name: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "bogus": 1},
           "data": {"a": "b"}, "extra": {"x": true}})
}

#[tokio::test]
async fn strict_rejects_unknown_fields_with_upstreams_message() {
    let server = TestServer::start().await;
    let raw = Http::new(&server);
    let status = raw
        .post(
            &format!("{CONFIG_MAPS}?fieldValidation=Strict"),
            &config_map_with_extras("strict"),
        )
        .await
        .expect_failure(400, "BadRequest");
    assert_eq!(
        status["message"],
        "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: strict decoding error: unknown field \"extra\", unknown field \"metadata.bogus\""
    );
    raw.get(&format!("{CONFIG_MAPS}/strict"))
        .await
        .expect_failure(404, "NotFound");
    server.shutdown().await;
}

#[tokio::test]
async fn warn_is_the_default_and_drops_the_fields() {
    let server = TestServer::start().await;
    let raw = Http::new(&server);
    let reply = raw
        .post(CONFIG_MAPS, &config_map_with_extras("warned"))
        .await;
    let warnings = reply.warnings.clone();
    let created = reply.expect(201);
    assert_eq!(
        warnings,
        vec![
            r#"299 - "unknown field \"extra\"""#.to_string(),
            r#"299 - "unknown field \"metadata.bogus\"""#.to_string(),
        ]
    );
    assert!(created.get("extra").is_none(), "{created}");
    assert!(created["metadata"].get("bogus").is_none(), "{created}");
    let stored = raw.get(&format!("{CONFIG_MAPS}/warned")).await.expect(200);
    assert!(stored.get("extra").is_none(), "{stored}");
    assert_eq!(stored["data"], json!({"a": "b"}));
    server.shutdown().await;
}

#[tokio::test]
async fn ignore_drops_silently_and_bad_values_are_422() {
    let server = TestServer::start().await;
    let raw = Http::new(&server);
    let reply = raw
        .post(
            &format!("{CONFIG_MAPS}?fieldValidation=Ignore"),
            &config_map_with_extras("ignored"),
        )
        .await;
    assert!(reply.warnings.is_empty(), "{:?}", reply.warnings);
    let created = reply.expect(201);
    assert!(created.get("extra").is_none(), "{created}");

    let status = raw
        .post(
            &format!("{CONFIG_MAPS}?fieldValidation=strict"),
            &config_map_with_extras("lowercase"),
        )
        .await
        .expect_failure(422, "Invalid");
    assert_eq!(
        status["message"],
        "CreateOptions.meta.k8s.io \"\" is invalid: fieldValidation: Unsupported value: \"strict\": supported values: \"\", \"Ignore\", \"Strict\", \"Warn\""
    );
    server.shutdown().await;
}

#[tokio::test]
async fn strict_rejects_duplicate_fields_in_the_body() {
    let server = TestServer::start().await;
    let raw = Http::new(&server);
    let body = br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"dup","name":"dup"},"data":{"a":"1"}}"#;
    let reply = raw
        .send_bytes(
            reqwest::Method::POST,
            &format!("{CONFIG_MAPS}?fieldValidation=Strict"),
            "application/json",
            Some(body.to_vec()),
        )
        .await;
    let status = reply.expect_failure(400, "BadRequest");
    assert!(
        status["message"].as_str().is_some_and(
            |m| m.ends_with("strict decoding error: duplicate field \"metadata.name\"")
        ),
        "{status}"
    );
    server.shutdown().await;
}
