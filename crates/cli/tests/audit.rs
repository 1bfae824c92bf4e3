//! The audit log (issue #14, audit): `--audit-log-path` records who did what, in
//! kube-apiserver's `audit.k8s.io/v1` Event JSON lines, at the levels and stages the policy
//! (`--audit-policy-file`, or the default `Metadata` for all but reads of Events) says. A
//! deletion and a finalizer removal are answerable from a `Metadata` log: who, when, from where.
//! A bad policy stops the server with a message naming the line.
//!
//! Events are written by a background thread: tests wait (bounded) for a sentinel event that
//! follows what they check, so that an absent event is proven absent, not merely late.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{Env, binary, eventually};
use finale_e2e::FinaleServer;
use serde_json::{Value, json};

const TOKENS: &str = "editor-token,editor,2\n";

fn audit_events(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).expect("every audit line is JSON"))
        .collect()
}

/// Waits until an event matching `wanted` is in the log; returns every event by then.
fn wait_for(env: &Env, log: &Path, what: &str, wanted: impl Fn(&Value) -> bool) -> Vec<Value> {
    eventually(Duration::from_secs(10), || {
        let events = audit_events(log);
        events.iter().any(&wanted).then_some(events)
    })
    .unwrap_or_else(|| {
        panic!(
            "no audit event for {what}; the log holds:\n{}{}",
            std::fs::read_to_string(log).unwrap_or_default(),
            env.log()
        )
    })
}

fn is(event: &Value, verb: &str, resource: &str, name: &str, stage: &str) -> bool {
    event["verb"] == verb
        && event["objectRef"]["resource"] == resource
        && (name.is_empty() || event["objectRef"]["name"] == name)
        && event["stage"] == stage
}

fn start(extra: &[&str]) -> (Env, PathBuf, tempfile::TempDir) {
    let files = tempfile::tempdir().expect("temporary directory");
    let tokens = files.path().join("tokens.csv");
    std::fs::write(&tokens, TOKENS).expect("write the token file");
    let log = files.path().join("logs/audit.log");
    let mut args = vec![
        "--token-auth-file".to_string(),
        tokens.display().to_string(),
        "--audit-log-path".to_string(),
        log.display().to_string(),
    ];
    args.extend(extra.iter().map(|a| a.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    (Env::start_with(&args), log, files)
}

#[test]
fn the_default_policy_records_who_wrote_deleted_and_removed_a_finalizer_at_metadata_level() {
    let (env, log, _files) = start(&[]);
    // The file is created at start, 0600, as upstream's.
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&log)
            .expect("the log exists")
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o600, "audit log mode {mode:o}");

    env.ok(&["create", "namespace", "t"]);
    env.ok(&[
        "create",
        "rolebinding",
        "editor-edit",
        "-n",
        "t",
        "--clusterrole=edit",
        "--user=editor",
    ]);
    // A refusal is recorded with the authorizer's decision.
    let refused = env.run(&[
        "get",
        "secrets",
        "-n",
        "kube-system",
        "--token",
        "editor-token",
    ]);
    assert_eq!(refused.code, Some(1), "{}", refused.describe());

    eventually(Duration::from_secs(10), || {
        (env.run(&[
            "auth",
            "can-i",
            "create",
            "configmaps",
            "-n",
            "t",
            "--token",
            "editor-token",
        ])
        .stdout
        .trim()
            == "yes")
            .then_some(())
    })
    .expect("the grant reaches the authorizer");
    let editor = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--token", "editor-token"]);
        env.ok(&all)
    };
    editor(&["create", "configmap", "c", "-n", "t", "--from-literal=k=v"]);
    editor(&["label", "configmap", "c", "-n", "t", "tier=web"]);
    editor(&[
        "patch",
        "configmap",
        "c",
        "-n",
        "t",
        "--type=merge",
        "-p",
        r#"{"data":{"k":"w"}}"#,
    ]);
    // The admin holds it with a finalizer; the editor takes the finalizer off.
    env.ok(&[
        "patch",
        "configmap",
        "c",
        "-n",
        "t",
        "--type=merge",
        "-p",
        r#"{"metadata":{"finalizers":["example.com/hold"]}}"#,
    ]);
    editor(&[
        "patch",
        "configmap",
        "c",
        "-n",
        "t",
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/metadata/finalizers/0"}]"#,
    ]);
    editor(&["delete", "configmap", "c", "-n", "t"]);
    // A watch: ResponseStarted when it opens, ResponseComplete when it ends.
    editor(&[
        "get",
        "configmaps",
        "-n",
        "t",
        "--watch-only",
        "--request-timeout=1s",
    ]);
    // Reads of Events are not recorded by the default policy.
    editor(&["get", "events", "-n", "t"]);
    editor(&["create", "configmap", "sentinel", "-n", "t"]);

    let events = wait_for(&env, &log, "the sentinel's create", |e| {
        is(e, "create", "configmaps", "sentinel", "ResponseComplete")
    });
    let of_editor = |e: &&Value| e["user"]["username"] == "editor";

    let deleted = events
        .iter()
        .filter(of_editor)
        .find(|e| is(e, "delete", "configmaps", "c", "ResponseComplete"))
        .unwrap_or_else(|| panic!("no delete event: {events:#?}"));
    // Who, what, when, from where — and, at Metadata level, no bodies.
    assert_eq!(deleted["kind"], "Event");
    assert_eq!(deleted["apiVersion"], "audit.k8s.io/v1");
    assert_eq!(deleted["level"], "Metadata");
    assert_eq!(deleted["objectRef"]["namespace"], "t");
    assert_eq!(deleted["objectRef"]["apiVersion"], "v1");
    assert_eq!(deleted["sourceIPs"], json!(["127.0.0.1"]));
    assert!(
        deleted["userAgent"]
            .as_str()
            .unwrap_or_default()
            .starts_with("kubectl"),
        "{deleted}"
    );
    assert_eq!(deleted["responseStatus"]["code"], 200, "{deleted}");
    assert_eq!(
        deleted["annotations"]["authorization.k8s.io/decision"],
        "allow"
    );
    assert!(
        deleted["annotations"]["authorization.k8s.io/reason"]
            .as_str()
            .unwrap_or_default()
            .contains("RoleBinding \"editor-edit/t\""),
        "{deleted}"
    );
    assert!(deleted.get("requestObject").is_none(), "{deleted}");
    assert!(deleted.get("responseObject").is_none(), "{deleted}");
    assert!(
        deleted["requestReceivedTimestamp"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z') && t.len() == "2026-01-01T00:00:00.000000Z".len()),
        "{deleted}"
    );
    // Each request has its own audit id; the default policy omits RequestReceived.
    assert_eq!(
        events
            .iter()
            .filter(|e| e["auditID"] == deleted["auditID"])
            .count(),
        1,
        "{events:#?}"
    );
    assert!(
        !events.iter().any(|e| e["stage"] == "RequestReceived"),
        "{events:#?}"
    );
    // create, update (label sends a patch) and the patches.
    for verb in ["create", "patch"] {
        assert!(
            events.iter().filter(of_editor).any(|e| is(
                e,
                verb,
                "configmaps",
                "c",
                "ResponseComplete"
            )),
            "no {verb}: {events:#?}"
        );
    }
    // Who removed the finalizer, and who added it.
    let removed = events
        .iter()
        .filter(|e| e["annotations"]["finale.dev/finalizers-removed"] == "example.com/hold")
        .collect::<Vec<_>>();
    assert_eq!(removed.len(), 1, "{events:#?}");
    assert_eq!(removed[0]["user"]["username"], "editor");
    assert_eq!(removed[0]["verb"], "patch");
    assert!(events.iter().any(|e| {
        e["annotations"]["finale.dev/finalizers-added"] == "example.com/hold"
            && e["user"]["username"] == "admin"
    }));
    // The refusal.
    let forbidden = events
        .iter()
        .filter(of_editor)
        .find(|e| is(e, "list", "secrets", "", "ResponseComplete"))
        .unwrap_or_else(|| panic!("no refused list: {events:#?}"));
    assert_eq!(
        forbidden["annotations"]["authorization.k8s.io/decision"],
        "forbid"
    );
    assert_eq!(forbidden["responseStatus"]["code"], 403);
    assert_eq!(forbidden["responseStatus"]["reason"], "Forbidden");
    // The watch's stages.
    for stage in ["ResponseStarted", "ResponseComplete"] {
        assert!(
            events
                .iter()
                .filter(of_editor)
                .any(|e| is(e, "watch", "configmaps", "", stage)),
            "no watch {stage}: {events:#?}"
        );
    }
    // No read of events, though it came before the sentinel.
    assert!(
        !events
            .iter()
            .any(|e| e["objectRef"]["resource"] == "events" && e["verb"] == "list"),
        "{events:#?}"
    );
}

#[test]
fn a_policy_file_sets_levels_and_stages_per_resource() {
    let policy_dir = tempfile::tempdir().expect("temporary directory");
    let policy = policy_dir.path().join("policy.yaml");
    std::fs::write(
        &policy,
        "apiVersion: audit.k8s.io/v1\n\
         kind: Policy\n\
         omitStages: [RequestReceived]\n\
         rules:\n\
         - level: RequestResponse\n\
         \x20 resources: [{group: \"\", resources: [configmaps]}]\n\
         - level: Request\n\
         \x20 verbs: [create]\n\
         \x20 resources: [{group: \"\", resources: [secrets]}]\n\
         - level: None\n",
    )
    .expect("write the policy");
    let (env, log, _files) = start(&["--audit-policy-file", policy.to_str().expect("UTF-8")]);
    env.ok(&["create", "namespace", "p"]);
    env.ok(&[
        "create",
        "secret",
        "generic",
        "s",
        "-n",
        "p",
        "--from-literal=k=v",
    ]);
    env.ok(&["create", "configmap", "c", "-n", "p", "--from-literal=k=v"]);

    let events = wait_for(&env, &log, "the configmap's create", |e| {
        is(e, "create", "configmaps", "c", "ResponseComplete")
    });
    let configmap = events
        .iter()
        .find(|e| is(e, "create", "configmaps", "c", "ResponseComplete"))
        .expect("found above");
    assert_eq!(configmap["level"], "RequestResponse");
    assert_eq!(configmap["requestObject"]["data"]["k"], "v", "{configmap}");
    assert_eq!(configmap["responseObject"]["metadata"]["name"], "c");
    assert!(configmap["responseObject"]["metadata"]["uid"].is_string());
    assert_eq!(configmap["responseStatus"]["code"], 201);
    let secret = events
        .iter()
        .find(|e| is(e, "create", "secrets", "s", "ResponseComplete"))
        .unwrap_or_else(|| panic!("no secret create: {events:#?}"));
    assert_eq!(secret["level"], "Request");
    assert!(secret["requestObject"].is_object(), "{secret}");
    assert!(secret.get("responseObject").is_none(), "{secret}");
    // `None` for the rest (the namespace came first), and no RequestReceived stage at all.
    assert!(
        !events
            .iter()
            .any(|e| e["objectRef"]["resource"] == "namespaces"),
        "{events:#?}"
    );
    assert!(
        !events.iter().any(|e| e["stage"] == "RequestReceived"),
        "{events:#?}"
    );
}

#[test]
fn a_bad_policy_file_stops_the_server_naming_the_line() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let policy = dir.path().join("policy.yaml");
    std::fs::write(
        &policy,
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Everything\n",
    )
    .expect("write the policy");
    let data = dir.path().join("data");
    let log = dir.path().join("audit.log");
    let error = match FinaleServer::start_with(
        binary(),
        &data,
        "127.0.0.1:0",
        &[
            "--audit-log-path",
            log.to_str().expect("UTF-8"),
            "--audit-policy-file",
            policy.to_str().expect("UTF-8"),
        ],
    ) {
        Ok(_) => panic!("the server started with a policy of an unknown level"),
        Err(error) => format!("{error:#}"),
    };
    assert!(error.contains("exit status: 1"), "it exits 1: {error}");
    let server_log = std::fs::read_to_string(data.join("server.log")).expect("server log");
    let last = server_log.lines().last().unwrap_or_default();
    assert!(
        last.contains("--audit-policy-file")
            && last.contains("policy.yaml")
            && last.contains("line 4")
            && last.contains("Everything"),
        "the last line names the file and the line: {server_log}"
    );
}
