use chrono::TimeZone;
use serde_json::json;

use super::*;
use crate::policy::StageSet;

fn at(micros: u32) -> DateTime<Utc> {
    let base = Utc
        .with_ymd_and_hms(2026, 11, 25, 10, 0, 0)
        .single()
        .expect("valid time");
    base + chrono::TimeDelta::microseconds(i64::from(micros))
}

fn config(level: Level) -> RequestAuditConfig {
    RequestAuditConfig {
        level,
        omit_stages: StageSet::EMPTY,
        omit_managed_fields: false,
    }
}

const GROUPS: [&str; 2] = ["system:masters", "system:authenticated"];

fn attributes(groups: &[String]) -> RequestAttributes<'_> {
    RequestAttributes {
        user: Some("admin"),
        groups,
        verb: "create",
        resource_request: true,
        api_group: "",
        api_version: "v1",
        resource: "configmaps",
        subresource: "",
        namespace: "default",
        name: "",
        path: "/api/v1/namespaces/default/configmaps",
    }
}

fn metadata() -> RequestMetadata {
    RequestMetadata {
        audit_id: Some("0b0d3c3e-5d1c-4e5e-9a55-2b3b7c9d4e1f".to_owned()),
        request_uri: "/api/v1/namespaces/default/configmaps?fieldManager=kubectl".to_owned(),
        user: UserInfo {
            username: "admin".to_owned(),
            groups: GROUPS.map(str::to_owned).to_vec(),
            ..UserInfo::default()
        },
        source_ips: vec!["127.0.0.1".to_owned()],
        user_agent: "kubectl/v1.33.0".to_owned(),
        received_at: at(123_456),
    }
}

fn start(config: RequestAuditConfig) -> RequestAudit {
    let groups = GROUPS.map(str::to_owned);
    RequestAudit::new(config, &attributes(&groups), metadata()).expect("level is not None")
}

fn configmap() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "settings",
            "namespace": "default",
            "uid": "6f1e",
            "resourceVersion": "42",
            "managedFields": [{"manager": "kubectl", "operation": "Apply"}],
        },
        "data": {"a": "1"},
    })
}

fn line(event: Option<&Event>) -> String {
    serde_json::to_string(event.expect("stage not omitted")).expect("encodes")
}

#[test]
fn metadata_event_has_upstreams_shape_and_no_bodies() {
    let mut audit = start(config(Level::Metadata));
    assert_eq!(
        line(audit.stage(Stage::RequestReceived, None)),
        concat!(
            r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","#,
            r#""auditID":"0b0d3c3e-5d1c-4e5e-9a55-2b3b7c9d4e1f","stage":"RequestReceived","#,
            r#""requestURI":"/api/v1/namespaces/default/configmaps?fieldManager=kubectl","verb":"create","#,
            r#""user":{"username":"admin","groups":["system:masters","system:authenticated"]},"#,
            r#""sourceIPs":["127.0.0.1"],"userAgent":"kubectl/v1.33.0","#,
            r#""objectRef":{"resource":"configmaps","namespace":"default","apiVersion":"v1"},"#,
            r#""requestReceivedTimestamp":"2026-11-25T10:00:00.123456Z","#,
            r#""stageTimestamp":"2026-11-25T10:00:00.123456Z"}"#,
        )
    );
    audit.request_object(&configmap());
    audit.response_object(&configmap());
    audit.annotate("authorization.k8s.io/decision", "allow");
    audit.annotate("authorization.k8s.io/reason", "");
    assert_eq!(
        line(audit.stage_at(
            Stage::ResponseComplete,
            Some(ResponseStatus::code(201)),
            at(654_321)
        )),
        concat!(
            r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","#,
            r#""auditID":"0b0d3c3e-5d1c-4e5e-9a55-2b3b7c9d4e1f","stage":"ResponseComplete","#,
            r#""requestURI":"/api/v1/namespaces/default/configmaps?fieldManager=kubectl","verb":"create","#,
            r#""user":{"username":"admin","groups":["system:masters","system:authenticated"]},"#,
            r#""sourceIPs":["127.0.0.1"],"userAgent":"kubectl/v1.33.0","#,
            r#""objectRef":{"resource":"configmaps","namespace":"default","name":"settings","uid":"6f1e","#,
            r#""apiVersion":"v1","resourceVersion":"42"},"#,
            r#""responseStatus":{"metadata":{},"code":201},"#,
            r#""requestReceivedTimestamp":"2026-11-25T10:00:00.123456Z","#,
            r#""stageTimestamp":"2026-11-25T10:00:00.654321Z","#,
            r#""annotations":{"authorization.k8s.io/decision":"allow","authorization.k8s.io/reason":""}}"#,
        )
    );
}

#[test]
fn request_level_keeps_the_request_body_only() {
    let mut audit = start(config(Level::Request));
    audit.request_object(&configmap());
    audit.response_object(&configmap());
    let event: Value =
        serde_json::from_str(&line(audit.stage(Stage::ResponseComplete, None))).expect("JSON");
    assert_eq!(event["requestObject"], configmap());
    assert!(event.get("responseObject").is_none(), "{event}");
}

#[test]
fn request_response_level_keeps_both_bodies_with_managed_fields() {
    let mut audit = start(config(Level::RequestResponse));
    audit.request_object(&configmap());
    audit.response_object(&configmap());
    let event: Value =
        serde_json::from_str(&line(audit.stage(Stage::ResponseComplete, None))).expect("JSON");
    assert_eq!(event["level"], "RequestResponse");
    assert_eq!(event["requestObject"], configmap());
    assert_eq!(event["responseObject"], configmap());
}

#[test]
fn managed_fields_are_omitted_when_the_policy_says_so() {
    let mut audit = start(RequestAuditConfig {
        omit_managed_fields: true,
        ..config(Level::RequestResponse)
    });
    let mut list = json!({"apiVersion": "v1", "kind": "ConfigMapList", "metadata": {}, "items": [configmap(), configmap()]});
    audit.request_object(&configmap());
    audit.response_object(&list);
    let event = audit
        .stage(Stage::ResponseComplete, None)
        .expect("not omitted")
        .clone();
    let mut expected = configmap();
    let Some(meta) = expected["metadata"].as_object_mut() else {
        panic!("metadata")
    };
    meta.remove("managedFields");
    assert_eq!(event.request_object, Some(expected.clone()));
    list["items"] = json!([expected.clone(), expected.clone()]);
    assert_eq!(event.response_object, Some(list));

    // A Table's rows carry objects too.
    let table = json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "rows": [{"cells": ["settings"], "object": configmap()}]});
    audit.response_object(&table);
    let rows = &audit.event().response_object.as_ref().expect("kept")["rows"];
    assert_eq!(rows[0]["object"], expected);
}

#[test]
fn failure_status_is_copied_from_the_status_body() {
    let mut audit = start(config(Level::Metadata));
    audit.response_object(&json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "configmaps \"settings\" already exists", "reason": "AlreadyExists",
        "details": {"name": "settings"}, "code": 409,
    }));
    let event = audit
        .stage(Stage::ResponseComplete, None)
        .expect("not omitted");
    assert_eq!(
        serde_json::to_string(&event.response_status).expect("encodes"),
        r#"{"metadata":{},"status":"Failure","message":"configmaps \"settings\" already exists","reason":"AlreadyExists","details":{"name":"settings"},"code":409}"#
    );
    assert!(event.response_object.is_none());
}

#[test]
fn failure_and_panic_statuses() {
    let failure =
        serde_json::to_string(&ResponseStatus::failure(403, "Forbidden", "no")).expect("encodes");
    assert_eq!(
        failure,
        r#"{"metadata":{},"status":"Failure","message":"no","reason":"Forbidden","code":403}"#
    );
    let panic = ResponseStatus::panic("boom");
    assert_eq!(
        (panic.code, panic.message.as_str()),
        (500, "APIServer panic'd: boom")
    );
}

#[test]
fn a_complete_request_without_status_gets_upstreams_stand_in() {
    let mut audit = start(config(Level::Metadata));
    let event = audit
        .stage(Stage::ResponseComplete, None)
        .expect("not omitted");
    let status = serde_json::to_string(&event.response_status).expect("encodes");
    assert_eq!(
        status,
        r#"{"metadata":{},"status":"Success","message":"Connection closed early","code":200}"#
    );
}

#[test]
fn omitted_stages_are_not_returned() {
    let mut audit = start(RequestAuditConfig {
        omit_stages: StageSet::EMPTY.with(Stage::RequestReceived),
        ..config(Level::Metadata)
    });
    assert!(audit.stage(Stage::RequestReceived, None).is_none());
    assert!(audit.stage(Stage::ResponseComplete, None).is_some());
}

#[test]
fn level_none_records_nothing() {
    let groups = GROUPS.map(str::to_owned);
    assert!(RequestAudit::new(config(Level::None), &attributes(&groups), metadata()).is_none());
}

#[test]
fn audit_id_comes_from_the_header_or_is_a_fresh_uuid() {
    assert_eq!(
        start(config(Level::Metadata)).audit_id(),
        "0b0d3c3e-5d1c-4e5e-9a55-2b3b7c9d4e1f"
    );
    let groups = GROUPS.map(str::to_owned);
    let fresh = |()| {
        let metadata = RequestMetadata {
            audit_id: None,
            ..metadata()
        };
        let audit = RequestAudit::new(config(Level::Metadata), &attributes(&groups), metadata)
            .expect("audited");
        audit.audit_id().to_owned()
    };
    let (a, b) = (fresh(()), fresh(()));
    for id in [&a, &b] {
        let parsed = uuid::Uuid::parse_str(id).unwrap_or_else(|e| panic!("{id}: {e}"));
        assert_eq!(parsed.get_version_num(), 4, "{id} is a random UUID");
        assert_eq!(parsed.get_variant(), uuid::Variant::RFC4122, "{id}");
    }
    assert_ne!(a, b);
}

#[test]
fn an_annotation_keeps_its_first_value() {
    let mut audit = start(config(Level::Metadata));
    audit.annotate("authorization.k8s.io/decision", "allow");
    audit.annotate("authorization.k8s.io/decision", "forbid");
    assert_eq!(
        audit.event().annotations["authorization.k8s.io/decision"],
        "allow"
    );
}

#[test]
fn long_user_agents_are_truncated() {
    let groups = GROUPS.map(str::to_owned);
    let metadata = RequestMetadata {
        user_agent: "é".repeat(600),
        ..metadata()
    };
    let audit = RequestAudit::new(config(Level::Metadata), &attributes(&groups), metadata)
        .expect("audited");
    let agent = &audit.event().user_agent;
    assert!(agent.ends_with("...TRUNCATED"), "{agent}");
    assert_eq!(agent.len(), 1024 + "...TRUNCATED".len());
    let short = start(config(Level::Metadata));
    assert_eq!(short.event().user_agent, "kubectl/v1.33.0");
}

#[test]
fn non_resource_requests_have_no_object_ref_and_optional_fields_are_omitted() {
    let request = RequestAttributes {
        user: None,
        verb: "get",
        path: "/healthz",
        ..RequestAttributes::default()
    };
    let metadata = RequestMetadata {
        request_uri: "/healthz".to_owned(),
        received_at: at(0),
        ..RequestMetadata::default()
    };
    let mut audit =
        RequestAudit::new(config(Level::Metadata), &request, metadata).expect("audited");
    let event: Value =
        serde_json::from_str(&line(audit.stage(Stage::RequestReceived, None))).expect("JSON");
    let mut keys: Vec<&str> = event
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    let mut expected = [
        "kind",
        "apiVersion",
        "level",
        "auditID",
        "stage",
        "requestURI",
        "verb",
        "user",
        "requestReceivedTimestamp",
        "stageTimestamp",
    ];
    expected.sort_unstable();
    assert_eq!(keys, expected, "{event}");
    assert_eq!(event["user"], json!({}));
    assert_eq!(event["stageTimestamp"], "2026-11-25T10:00:00.000000Z");
}
