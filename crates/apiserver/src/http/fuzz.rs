//! Property-based fuzzing of the request decoders (issue 17, item 5): every function that
//! turns client bytes into something the server acts on — object bodies (JSON, YAML,
//! protobuf), the four patch formats, label and field selectors, URL paths, query parameters,
//! DeleteOptions, resourceVersions — is fed generated input, half of it shaped like real
//! requests (so it gets past the first checks) and half of it noise.
//!
//! # Guarantees checked
//! - No input panics (a panic fails the case; proptest then shrinks it to a minimal input).
//! - Every rejection is an `ApiError` whose `Status` is a `Failure` with a 4xx code, a reason
//!   and a message: a client mistake is never a 500.
//! - A patch that succeeds yields a document no deeper than [`patch::MAX_NESTING_DEPTH`].
//!
//! These are unit-level: no server, no store, so "no stored change" holds by construction.
//!
//! # Budget
//! Each property runs `PROPTEST_CASES` cases (proptest's own variable; 256 by default, a few
//! seconds for all of them in a debug build). Run longer on demand, e.g.
//! `PROPTEST_CASES=20000 cargo test -p finale-apiserver --lib http::fuzz`
//! (see the README's test section). A crash found becomes a named regression test at the
//! end of this file.

use http::{HeaderMap, HeaderValue, header};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

use super::path;
use super::resource::{self, Query};
use crate::patch::{self, ApplyError, ApplyRequest, nesting_depth};
use crate::registry::{self, Actor, PatchFormat};
use crate::selectors::{FieldSelector, LabelSelector};
use crate::status::ApiError;

/// The rejection is a Kubernetes `Status` for a client error.
fn assert_client_error(error: &ApiError, input: &dyn std::fmt::Debug) {
    let status = error.to_status();
    assert_eq!(status["kind"], "Status", "{status}");
    assert_eq!(status["apiVersion"], "v1", "{status}");
    assert_eq!(status["status"], "Failure", "{status}");
    let code = status["code"].as_u64().unwrap_or_default();
    assert!(
        (400..500).contains(&code),
        "a rejected request must be a 4xx Status, got {status} for {input:?}"
    );
    assert!(
        status["reason"].as_str().is_some_and(|r| !r.is_empty()),
        "{status}"
    );
    assert!(
        status["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{status}"
    );
}

fn headers(content_type: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    if let Ok(value) = HeaderValue::from_str(content_type) {
        headers.insert(header::CONTENT_TYPE, value);
    }
    headers
}

// ---------------------------------------------------------------------------------------------
// Generators

/// Keys that mean something to some decoder: object structure, patch directives, list keys.
const KEYS: &[&str] = &[
    "apiVersion",
    "kind",
    "metadata",
    "name",
    "namespace",
    "labels",
    "annotations",
    "finalizers",
    "managedFields",
    "ownerReferences",
    "resourceVersion",
    "spec",
    "status",
    "data",
    "containers",
    "ports",
    "containerPort",
    "protocol",
    "env",
    "volumes",
    "items",
    "op",
    "path",
    "from",
    "value",
    "$patch",
    "$retainKeys",
    "$setElementOrder/containers",
    "$deleteFromPrimitiveList/finalizers",
    "$setElementOrder/finalizers",
    "gracePeriodSeconds",
    "propagationPolicy",
    "orphanDependents",
    "preconditions",
    "uid",
    "dryRun",
    "",
    "a",
    "b/c",
    "~",
];

const WORDS: &[&str] = &[
    "",
    "v1",
    "apps/v1",
    "ConfigMap",
    "Pod",
    "DeleteOptions",
    "add",
    "remove",
    "replace",
    "move",
    "copy",
    "test",
    "merge",
    "delete",
    "replace",
    "retainKeys",
    "deleteFromPrimitiveList",
    "/",
    "/-",
    "/metadata",
    "/metadata/labels/a",
    "/spec/containers/0",
    "/spec/containers/-",
    "/data/~1x",
    "/data/~2",
    "/a/b/c/d/e",
    "Foreground",
    "Background",
    "Orphan",
    "All",
    "TCP",
    "main",
    "-1",
    "0",
    "1",
];

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        (-1e9f64..1e9).prop_map(|f| json!(f)),
        prop::sample::select(WORDS).prop_map(|w| json!(w)),
        "\\PC{0,12}".prop_map(Value::String),
    ]
}

/// JSON values shaped like Kubernetes objects and patches, up to 6 levels deep.
fn value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(6, 96, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((prop::sample::select(KEYS), inner), 0..6).prop_map(|pairs| {
                Value::Object(
                    pairs
                        .into_iter()
                        .map(|(k, v)| (k.to_string(), v))
                        .collect::<Map<_, _>>(),
                )
            }),
        ]
    })
}

/// An object as the server stores it: a ConfigMap or a Pod, with generated extras.
fn object() -> impl Strategy<Value = Value> {
    (value(), value(), any::<bool>()).prop_map(|(spec, extra, pod)| {
        let mut object = if pod {
            json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "p", "namespace": "default", "labels": {"a": "b"},
                             "finalizers": ["x", "y"]},
                "spec": {"containers": [{"name": "main", "image": "i",
                                         "ports": [{"containerPort": 80, "protocol": "TCP"}]}]},
            })
        } else {
            json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "c", "namespace": "default"},
                "data": {"a": "1"},
            })
        };
        object["extra"] = extra;
        if let Some(spec_obj) = object.get_mut("spec").and_then(Value::as_object_mut) {
            spec_obj.insert("generated".into(), spec);
        }
        object
    })
}

/// A JSON patch (RFC 6902): a list of operations, mostly well-formed.
fn json_patch() -> impl Strategy<Value = Value> {
    let operation = (
        prop::sample::select(vec![
            "add", "remove", "replace", "move", "copy", "test", "bogus",
        ]),
        prop::sample::select(WORDS),
        prop::sample::select(WORDS),
        value(),
        0..4u8,
    )
        .prop_map(|(op, path, from, value, shape)| match shape {
            0 => json!({"op": op, "path": path, "value": value}),
            1 => json!({"op": op, "path": path, "from": from}),
            2 => json!({"op": op, "path": path}),
            _ => json!({"op": op, "path": value, "from": from, "value": path}),
        });
    prop_oneof![
        4 => prop::collection::vec(operation, 0..8).prop_map(Value::Array),
        1 => value(),
    ]
}

/// Label and field selector text: the grammar's tokens, and noise.
fn selector_text() -> impl Strategy<Value = String> {
    let token = prop::sample::select(vec![
        "a",
        "b.c/d",
        "metadata.name",
        "status.phase",
        "=",
        "==",
        "!=",
        "!",
        ",",
        " ",
        "in",
        "notin",
        "(",
        ")",
        "x",
        "y-1",
        "<",
        ">",
        "3",
        "\\",
        "\\,",
        "=\\=",
        "é",
    ]);
    prop_oneof![
        3 => prop::collection::vec(token, 0..16).prop_map(|t| t.concat()),
        1 => "\\PC{0,40}",
    ]
}

/// URL paths: API path segments, and noise.
fn url_path() -> impl Strategy<Value = String> {
    let segment = prop::sample::select(vec![
        "api",
        "apis",
        "v1",
        "apps",
        "namespaces",
        "default",
        "configmaps",
        "pods",
        "status",
        "scale",
        "finalize",
        "watch",
        "proxy",
        "log",
        "x",
        "",
        "..",
        "%2F",
        "a%00b",
        "deployments",
        "apps.example.com",
    ]);
    prop_oneof![
        3 => prop::collection::vec(segment, 0..9).prop_map(|s| format!("/{}", s.join("/"))),
        1 => "\\PC{0,60}",
    ]
}

/// A query string: known parameters with plausible and implausible values, and noise.
fn query_text() -> impl Strategy<Value = String> {
    let name = prop::sample::select(vec![
        "limit",
        "continue",
        "resourceVersion",
        "resourceVersionMatch",
        "labelSelector",
        "fieldSelector",
        "watch",
        "dryRun",
        "fieldManager",
        "fieldValidation",
        "force",
        "gracePeriodSeconds",
        "propagationPolicy",
        "orphanDependents",
        "timeoutSeconds",
        "allowWatchBookmarks",
        "sendInitialEvents",
        "",
        "x",
    ]);
    let value = prop_oneof![
        prop::sample::select(WORDS).prop_map(str::to_string),
        prop::sample::select(vec![
            "Strict",
            "Warn",
            "Ignore",
            "true",
            "false",
            "9223372036854775808",
            "-5",
            "%ZZ",
            "a=b"
        ])
        .prop_map(str::to_string),
        "\\PC{0,16}",
    ];
    prop_oneof![
        3 => prop::collection::vec((name, value), 0..8).prop_map(|pairs| {
            pairs
                .into_iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join("&")
        }),
        1 => "\\PC{0,60}",
    ]
}

/// YAML text: the syntax that breaks parsers (anchors, aliases, merge keys, tags, block
/// scalars, flow collections, documents), and noise.
fn yaml_text() -> impl Strategy<Value = String> {
    let token = prop::sample::select(vec![
        "a",
        "b",
        ": ",
        ":",
        "- ",
        "\n",
        "  ",
        "&x ",
        "*x",
        "<<: ",
        "!!binary ",
        "!!str ",
        "!tag ",
        "|\n",
        ">-\n",
        "{",
        "}",
        "[",
        "]",
        ",",
        "'q'",
        "\"d\\u00e9\"",
        "~",
        "null",
        "1e999",
        "0x1F",
        "---\n",
        "...\n",
        "%YAML 1.2\n",
        "? ",
        "#c\n",
        "\t",
        "apiVersion: v1\n",
        "kind: ConfigMap\n",
        "metadata:\n  name: n\n",
    ]);
    prop_oneof![
        4 => prop::collection::vec(token, 0..40).prop_map(|t| t.concat()),
        1 => "\\PC{0,80}",
    ]
}

/// The recorded protobuf bodies of kubectl's typed clients (see protobuf/testdata).
const PROTOBUF_SEEDS: &[&[u8]] = &[
    include_bytes!("../protobuf/testdata/configmap.pb"),
    include_bytes!("../protobuf/testdata/deployment.pb"),
    include_bytes!("../protobuf/testdata/job.pb"),
    include_bytes!("../protobuf/testdata/secret.pb"),
    include_bytes!("../protobuf/testdata/service-clusterip.pb"),
    include_bytes!("../protobuf/testdata/cronjob.pb"),
];

/// A protobuf body: a recorded one with bytes flipped, inserted, removed or cut off.
fn protobuf_body() -> impl Strategy<Value = Vec<u8>> {
    let edit = (0..4u8, any::<prop::sample::Index>(), any::<u8>());
    (
        prop::sample::select(PROTOBUF_SEEDS),
        prop::collection::vec(edit, 0..6),
    )
        .prop_map(|(seed, edits)| {
            let mut body = seed.to_vec();
            for (kind, at, byte) in edits {
                if body.is_empty() {
                    body.push(byte);
                    continue;
                }
                let i = at.index(body.len());
                match kind {
                    0 => body[i] ^= byte | 1,
                    1 => body.insert(i, byte),
                    2 => {
                        body.remove(i);
                    }
                    _ => body.truncate(i),
                }
            }
            body
        })
}

// ---------------------------------------------------------------------------------------------
// Properties

proptest! {
    #[test]
    fn json_bodies_decode_or_are_refused_with_a_status(
        bytes in prop_oneof![
            value().prop_map(|v| v.to_string().into_bytes()),
            (value(), any::<prop::sample::Index>()).prop_map(|(v, cut)| {
                let text = v.to_string().into_bytes();
                let at = cut.index(text.len() + 1);
                text[..at].to_vec()
            }),
            (1..4000usize).prop_map(|depth| "[".repeat(depth).into_bytes()),
            prop::collection::vec(any::<u8>(), 0..256),
        ],
        content_type in prop::sample::select(vec!["", "application/json", "*/*", "application/json; charset=utf-8"]),
    ) {
        if let Err(error) = resource::decode_object(&headers(content_type), &bytes) {
            assert_client_error(&error, &String::from_utf8_lossy(&bytes));
        }
    }

    #[test]
    fn yaml_bodies_decode_or_are_refused_with_a_status(
        text in yaml_text(),
        content_type in prop::sample::select(vec!["application/yaml", "application/x-yaml", "text/yaml"]),
    ) {
        if let Err(error) = resource::decode_object(&headers(content_type), text.as_bytes()) {
            assert_client_error(&error, &text);
        }
        // The apply body: JSON, else YAML.
        if let Err(error) = resource::parse_json(text.as_bytes())
            .or_else(|_| resource::parse_yaml(text.as_bytes()))
        {
            assert_client_error(&error, &text);
        }
    }

    #[test]
    fn protobuf_bodies_decode_or_are_refused_with_a_status(
        body in prop_oneof![
            3 => protobuf_body(),
            1 => prop::collection::vec(any::<u8>(), 0..128).prop_map(|tail| {
                let mut body = b"k8s\0".to_vec();
                body.extend(tail);
                body
            }),
        ],
    ) {
        let headers = headers(crate::protobuf::PROTOBUF_MEDIA_TYPE);
        if let Err(error) = resource::decode_object(&headers, &body) {
            assert_client_error(&error, &body);
        }
    }

    #[test]
    fn json_merge_and_strategic_patches_apply_or_are_refused_with_a_status(
        target in object(),
        json in json_patch(),
        merge in value(),
    ) {
        for (format, patch) in [
            (PatchFormat::Json, &json),
            (PatchFormat::Merge, &merge),
            (PatchFormat::Strategic, &merge),
        ] {
            match registry::apply_patch_format(format, &target, patch) {
                Ok(patched) => assert!(
                    nesting_depth(&patched) <= patch::MAX_NESTING_DEPTH,
                    "a patch nested the document too deep"
                ),
                Err(error) => assert_client_error(&error, &(format, patch)),
            }
        }
    }

    #[test]
    fn server_side_apply_applies_or_is_refused_with_a_status(
        live in prop::option::of(object()),
        applied in prop_oneof![object(), value()],
        force in any::<bool>(),
    ) {
        let request = ApplyRequest {
            live: live.as_ref(),
            applied: &applied,
            manager: "fuzz",
            force,
            subresource: None,
            api_version: "v1",
            now: "2026-11-29T00:00:00Z",
            schema: &patch::BuiltinSchema,
        };
        match patch::server_side_apply(&request) {
            Ok(result) => assert!(nesting_depth(&result) <= patch::MAX_NESTING_DEPTH),
            // A conflict is a 409, an invalid configuration a 400 (registry::update maps them).
            Err(ApplyError::Conflicts(conflicts)) => assert!(!conflicts.is_empty()),
            Err(ApplyError::Invalid(message)) => assert!(
                !message.is_empty() && !message.starts_with("failed to decode managed fields"),
                "generated objects carry no managed fields: {message}"
            ),
        }
    }

    #[test]
    fn selectors_parse_or_are_refused_with_a_status(text in selector_text()) {
        // As registry::read maps them: a selector that does not parse is a 400.
        match LabelSelector::parse(&text) {
            Ok(selector) => {
                let _ = selector.matches(None);
            }
            Err(error) => assert_client_error(&ApiError::bad_request(error.to_string()), &text),
        }
        match FieldSelector::parse(&text) {
            Ok(selector) => {
                let _ = selector.matches_object(&json!({"metadata": {"name": "x"}}));
                let _ = selector.validate_fields(&["metadata.name", "metadata.namespace"]);
            }
            Err(error) => assert_client_error(&ApiError::bad_request(error.to_string()), &text),
        }
    }

    #[test]
    fn paths_and_query_parameters_parse_or_are_refused_with_a_status(
        url in url_path(),
        query in query_text(),
    ) {
        let _ = path::parse(&url);
        let query = Query::parse(Some(query.as_str()));
        for result in [
            query.list_options().map(drop),
            query.dry_run().map(drop),
            query.write_options(&HeaderMap::new(), "CreateOptions").map(drop),
            resource::delete_options(&query, b"", Actor::default()).map(drop),
        ] {
            if let Err(error) = result {
                assert_client_error(&error, &query_debug(&query));
            }
        }
        if let Ok(options) = query.list_options()
            && let Some(rv) = options.resource_version.as_deref()
            && let Err(error) = registry::parse_resource_version(rv, "resourceVersion")
        {
            assert_client_error(&error, &rv);
        }
    }

    #[test]
    fn delete_options_bodies_decode_or_are_refused_with_a_status(
        body in prop_oneof![
            value().prop_map(|v| v.to_string().into_bytes()),
            (value(), value(), value(), value()).prop_map(|(grace, policy, orphan, pre)| {
                json!({"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": grace,
                       "propagationPolicy": policy, "orphanDependents": orphan,
                       "preconditions": pre, "dryRun": ["All"]})
                    .to_string()
                    .into_bytes()
            }),
            prop::collection::vec(any::<u8>(), 0..64),
        ],
    ) {
        let query = Query::parse(None);
        if let Err(error) = resource::delete_options(&query, &body, Actor::default()) {
            assert_client_error(&error, &String::from_utf8_lossy(&body));
        }
    }
}

fn query_debug(query: &Query) -> String {
    [
        "limit",
        "continue",
        "resourceVersion",
        "dryRun",
        "fieldValidation",
        "gracePeriodSeconds",
    ]
    .iter()
    .map(|k| format!("{k}={:?}", query.get(k)))
    .collect::<Vec<_>>()
    .join(" ")
}

// ---------------------------------------------------------------------------------------------
// Regression tests for crashes the fuzzing found (none so far beyond those below).

/// A body nested past serde_json's recursion limit is a 400, not a stack overflow.
#[test]
fn a_deeply_nested_json_body_is_a_400() {
    let body = "[".repeat(100_000);
    let error = resource::decode_object(&headers("application/json"), body.as_bytes())
        .expect_err("deeply nested");
    assert_client_error(&error, &"[[[…");
}
