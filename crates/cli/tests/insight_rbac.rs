//! The deletion tools under RBAC (issues #11 and #14): a `DeletionReview` or an
//! `OwnershipReview` answers only about what its caller may `get`, and counts the rest as
//! "N hidden"; reviewing an object one may not get is the 403 of that get; forcing a
//! finalizer off (`FinalizerRemoval`) needs its own permission, which editing does not give,
//! and the record names who did it.

mod common;

use std::time::Duration;

use common::{Env, Run, eventually};
use serde_json::{Value, json};

const TOKENS: &str = "ann-token,ann,10\n";

fn start() -> Env {
    let dir = tempfile::tempdir().expect("temporary directory");
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, TOKENS).expect("write the token file");
    let env = Env::start_with(&["--token-auth-file", tokens.to_str().expect("UTF-8 path")]);
    drop(dir);
    env
}

fn as_ann(env: &Env, args: &[&str]) -> Run {
    let mut all = args.to_vec();
    all.extend(["--token", "ann-token"]);
    env.run(&all)
}

fn as_ann_with_stdin(env: &Env, args: &[&str], stdin: &str) -> Run {
    let mut all = args.to_vec();
    all.extend(["--token", "ann-token"]);
    env.run_with_stdin(&all, stdin)
}

/// Waits, bounded, until ann may do `args` (a grant reaches the authorizer through a watch).
fn wait_until_ann_may(env: &Env, args: &[&str]) {
    let mut all = vec!["auth", "can-i"];
    all.extend_from_slice(args);
    eventually(Duration::from_secs(10), || {
        (as_ann(env, &all).stdout.trim() == "yes").then_some(())
    })
    .unwrap_or_else(|| panic!("ann was never allowed {args:?}{}", env.log()));
}

/// Posts `review` with kubectl as ann (or as the admin) and returns the answer.
fn review(env: &Env, review: &Value, as_admin: bool) -> Run {
    let body = review.to_string();
    let args = ["create", "-f", "-", "-o", "json"];
    if as_admin {
        env.run_with_stdin(&args, &body)
    } else {
        as_ann_with_stdin(env, &args, &body)
    }
}

fn deletion_review(kind: &str, namespace: &str, name: &str) -> Value {
    let api_version = if kind == "ClusterRole" {
        "rbac.authorization.k8s.io/v1"
    } else {
        "v1"
    };
    json!({
        "apiVersion": "deletion.finale.dev/v1alpha1", "kind": "DeletionReview",
        "spec": {"target": {"apiVersion": api_version, "kind": kind, "namespace": namespace, "name": name}},
    })
}

/// A ClusterRole `owner-x`, deleted in the foreground, waits for two dependents that a
/// finalizer holds: `shown` in team-a, which ann may read, and `concealed` in team-b, which
/// she may not.
fn setup(env: &Env) {
    env.ok(&["create", "namespace", "team-a"]);
    env.ok(&["create", "namespace", "team-b"]);
    env.ok(&[
        "create",
        "clusterrole",
        "owner-x",
        "--verb=get",
        "--resource=configmaps",
    ]);
    let owner_uid = env.get_json(&["clusterrole", "owner-x"])["metadata"]["uid"]
        .as_str()
        .expect("uid")
        .to_string();
    for (namespace, name) in [("team-a", "shown"), ("team-b", "concealed")] {
        env.ok_with_stdin(
            &["create", "-f", "-"],
            &json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {
                    "name": name, "namespace": namespace,
                    "finalizers": ["example.com/hold"],
                    "ownerReferences": [{
                        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                        "name": "owner-x", "uid": owner_uid, "blockOwnerDeletion": true,
                    }],
                },
            })
            .to_string(),
        );
    }
    env.ok(&[
        "create",
        "rolebinding",
        "ann-edit",
        "--clusterrole=edit",
        "--user=ann",
        "-n",
        "team-a",
    ]);
    env.ok(&[
        "create",
        "clusterrole",
        "read-owner-x",
        "--verb=get",
        "--resource=clusterroles",
        "--resource-name=owner-x",
    ]);
    env.ok(&[
        "create",
        "clusterrolebinding",
        "ann-read-owner-x",
        "--clusterrole=read-owner-x",
        "--user=ann",
    ]);
    env.ok(&[
        "delete",
        "clusterrole",
        "owner-x",
        "--cascade=foreground",
        "--wait=false",
    ]);
    // The precondition: the owner waits on both dependents, each being deleted and held.
    eventually(Duration::from_secs(20), || {
        let a = env.get_json(&["configmap", "shown", "-n", "team-a"]);
        let b = env.get_json(&["configmap", "concealed", "-n", "team-b"]);
        (a["metadata"]["deletionTimestamp"].is_string()
            && b["metadata"]["deletionTimestamp"].is_string())
        .then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "the foreground cascade never reached both dependents{}",
            env.log()
        )
    });
    let owner = env.get_json(&["clusterrole", "owner-x"]);
    assert!(
        owner["metadata"]["deletionTimestamp"].is_string(),
        "{owner:#}"
    );
    wait_until_ann_may(env, &["get", "clusterroles/owner-x"]);
    wait_until_ann_may(env, &["get", "configmaps", "-n", "team-a"]);
}

#[test]
fn reviews_show_only_what_the_caller_may_get_and_count_the_rest_as_hidden() {
    let env = start();
    setup(&env);
    let target = deletion_review("ClusterRole", "", "owner-x");

    // The admin sees both dependents, nothing hidden.
    let run = review(&env, &target, true);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    let answer: Value = serde_json::from_str(&run.stdout).expect("JSON");
    let text = answer["status"].to_string();
    assert!(
        text.contains("concealed") && text.contains("shown"),
        "{answer:#}"
    );
    assert!(answer["status"].get("hidden").is_none(), "{answer:#}");

    // Ann sees hers and a count in place of the other, whose name, namespace and uid are gone.
    let run = review(&env, &target, false);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    let answer: Value = serde_json::from_str(&run.stdout).expect("JSON");
    let status = &answer["status"];
    let text = status.to_string();
    assert!(text.contains("shown"), "{answer:#}");
    assert!(
        !text.contains("concealed") && !text.contains("team-b"),
        "{answer:#}"
    );
    assert_eq!(status["hidden"], 1, "{answer:#}");
    assert!(
        status["summary"]
            .as_str()
            .unwrap_or_default()
            .ends_with("(1 hidden)"),
        "{answer:#}"
    );
    assert!(
        text.contains("1 hidden: an object you may not get"),
        "{answer:#}"
    );
    assert_eq!(status["verdict"], "Stuck", "{answer:#}");

    // The ownership tree the same way.
    let tree = json!({
        "apiVersion": "deletion.finale.dev/v1alpha1", "kind": "OwnershipReview",
        "spec": {"target": {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "name": "owner-x"}},
    });
    let run = review(&env, &tree, false);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    let answer: Value = serde_json::from_str(&run.stdout).expect("JSON");
    let root = &answer["status"]["root"];
    let names: Vec<&str> = root["children"]
        .as_array()
        .expect("children")
        .iter()
        .filter_map(|c| c["object"]["name"].as_str())
        .collect();
    assert_eq!(names, ["shown"], "{answer:#}");
    assert_eq!(root["hidden"], 1, "{answer:#}");
    let run = review(&env, &tree, true);
    let answer: Value = serde_json::from_str(&run.stdout).expect("JSON");
    assert_eq!(
        answer["status"]["root"]["children"]
            .as_array()
            .map(Vec::len),
        Some(2),
        "{answer:#}"
    );

    // Reviewing what she may not get is the 403 of that get, and names nothing more.
    let run = review(
        &env,
        &deletion_review("ConfigMap", "team-b", "concealed"),
        false,
    );
    assert_eq!(run.code, Some(1), "{}", run.describe());
    assert!(
        run.stderr.contains(
            r#"configmaps "concealed" is forbidden: User "ann" cannot get resource "configmaps" in API group "" in the namespace "team-b""#
        ),
        "{}",
        run.describe()
    );
}

#[test]
fn forcing_a_finalizer_off_needs_its_own_permission_and_names_who_did() {
    let env = start();
    setup(&env);
    let shown = env.get_json(&["configmap", "shown", "-n", "team-a"]);
    let removal = json!({
        "apiVersion": "deletion.finale.dev/v1alpha1", "kind": "FinalizerRemoval",
        "metadata": {"generateName": "shown-"},
        "spec": {
            "target": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "team-a", "name": "shown",
                       "uid": shown["metadata"]["uid"]},
            "resourceVersion": shown["metadata"]["resourceVersion"],
            "finalizer": "example.com/hold",
            "reason": "its controller was uninstalled",
        },
    })
    .to_string();
    // `edit` in the namespace lets ann remove the finalizer by a patch, but not force it off
    // through the tool that keeps a record.
    let run = as_ann_with_stdin(&env, &["create", "-f", "-"], &removal);
    assert_eq!(run.code, Some(1), "{}", run.describe());
    assert!(
        run.stderr.contains(
            r#"is forbidden: User "ann" cannot create resource "finalizerremovals" in API group "deletion.finale.dev" at the cluster scope"#
        ),
        "{}",
        run.describe()
    );
    let still = env.get_json(&["configmap", "shown", "-n", "team-a"]);
    assert_eq!(
        still["metadata"]["finalizers"],
        json!(["example.com/hold"]),
        "{still:#}"
    );
    // Granted, she may; the record says it was her.
    env.ok(&[
        "create",
        "clusterrole",
        "finalizer-remover",
        "--verb=create,get,list",
        "--resource=finalizerremovals.deletion.finale.dev",
    ]);
    env.ok(&[
        "create",
        "clusterrolebinding",
        "ann-finalizer-remover",
        "--clusterrole=finalizer-remover",
        "--user=ann",
    ]);
    wait_until_ann_may(&env, &["create", "finalizerremovals.deletion.finale.dev"]);
    let run = as_ann_with_stdin(&env, &["create", "-f", "-", "-o", "json"], &removal);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    let record: Value = serde_json::from_str(&run.stdout).expect("JSON");
    assert_eq!(record["status"]["removedBy"], "ann", "{record:#}");
    assert_eq!(record["status"]["phase"], "Removed", "{record:#}");
    let run = env.run(&["get", "configmap", "shown", "-n", "team-a"]);
    assert!(
        run.stderr.contains("NotFound") || run.stderr.contains("not found"),
        "the released ConfigMap is gone: {}",
        run.describe()
    );
}
