//! `finale plan` against a real `finale server` (the binary), with objects made by kubectl:
//! the exact text (summary first, the tree, the hangs), the golden `-o json` document with
//! its uids and resourceVersion masked, `--cascade` values and exit codes (0 completes,
//! 2 hangs, 1 error).

mod common;

use std::time::{Duration, Instant};

use common::{Env, Run};
use serde_json::{Value, json};

/// `finale plan ARGS --kubeconfig <the server's>`, bounded.
fn plan(env: &Env, args: &[&str]) -> Run {
    let mut all = vec!["plan"];
    all.extend_from_slice(args);
    common::finale(env, &all)
}

fn apply(env: &Env, name: &str, owner: Option<(&str, &str, bool)>, finalizer: Option<&str>) {
    let finalizers = finalizer
        .map(|f| format!("  finalizers:\n  - {f}\n"))
        .unwrap_or_default();
    let owners = owner
        .map(|(owner, uid, block)| {
            format!(
                "  ownerReferences:\n  - apiVersion: v1\n    kind: ConfigMap\n    name: {owner}\n    uid: {uid}\n    blockOwnerDeletion: {block}\n"
            )
        })
        .unwrap_or_default();
    env.ok_with_stdin(
        &["apply", "-f", "-"],
        &format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: default\n{finalizers}{owners}"
        ),
    );
}

/// Replaces every `"uid"` and the `resourceVersion` with placeholders.
fn mask(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, field) in map.iter_mut() {
                if key == "uid" || key == "resourceVersion" {
                    *field = json!("<masked>");
                } else {
                    mask(field);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(mask),
        _ => {}
    }
}

#[test]
fn plan_prints_the_summary_the_tree_and_the_hangs() {
    let env = Env::start();
    // Given app, a dependent app-config holding a finalizer nobody claims, and app-cache,
    apply(&env, "app", None, None);
    let owner = env.get_json(&["configmap", "app"]);
    let uid = owner["metadata"]["uid"].as_str().expect("owner uid");
    apply(
        &env,
        "app-config",
        Some(("app", uid, true)),
        Some("example.com/hold"),
    );
    apply(&env, "app-cache", Some(("app", uid, false)), None);

    // (the collector learns of the dependents from its watch: wait, bounded, until the plan
    // counts them — the precondition of the text below),
    let deadline = Instant::now() + common::CLI_RUN_LIMIT;
    let json = loop {
        let run = plan(&env, &["cm/app", "-o", "json"]);
        let status: Value = serde_json::from_str(&run.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", run.describe()));
        if status["plan"]["deleted"] == 3 {
            assert_eq!(run.code, Some(2), "{}", run.describe());
            break status;
        }
        assert!(Instant::now() < deadline, "{}", run.describe());
        std::thread::sleep(Duration::from_millis(100));
    };

    // when `finale plan cm/app` runs, then it prints the summary, the tree and the hang, and
    // exits 2;
    let run = plan(&env, &["cm/app", "--color=never"]);
    assert_eq!(run.code, Some(2), "{}", run.describe());
    let hold = "no controller claims finalizer example.com/hold (owner unknown): nothing may \
                ever remove it. Find the controller that added it and make sure it runs, or \
                declare it with a FinalizerClaim; remove the finalizer by hand only once you \
                know what it was meant to clean up";
    assert_eq!(
        run.stdout,
        format!(
            "WillHang: DELETE ConfigMap default/app (Background) deletes 3 objects of 1 kind; 1 will hang\n\
             \n\
             ConfigMap/app  deleted by the request (propagationPolicy Background)\n\
             │    outcome: Deleted\n\
             ├─ ConfigMap/app-config  deleted by the garbage collector: none of its owners stays, but it will hang: nobody will remove what holds it\n\
             │  │    hangs: true\n\
             │  │    outcome: Deleted\n\
             │  └─ ConfigMap/app-config  {hold}\n\
             │          claim: none\n\
             │          finalizer: example.com/hold\n\
             └─ ConfigMap/app-cache  deleted by the garbage collector: none of its owners stays\n\
             \x20       outcome: Deleted\n\
             \n\
             Will hang:\n\
             \x20 ConfigMap default/app-config: {hold}\n"
        ),
        "{}",
        run.describe()
    );

    // the JSON document is the golden one (uids and resourceVersion masked);
    let mut json = json;
    mask(&mut json);
    let reference = |name: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "namespace": "default", "name": name,
            "uid": "<masked>"})
    };
    let hold_cause = json!({"object": reference("app-config"), "type": "Finalizer",
        "state": "Stuck", "message": hold,
        "evidence": {"claim": "none", "finalizer": "example.com/hold"}});
    assert_eq!(
        json,
        json!({
            "verdict": "WillHang",
            "resourceVersion": "<masked>",
            "summary": "DELETE ConfigMap default/app (Background) deletes 3 objects of 1 kind; 1 will hang",
            "causes": [{
                "object": reference("app"), "type": "Deletes", "state": "Stuck",
                "message": "deleted by the request (propagationPolicy Background)",
                "evidence": {"outcome": "Deleted"},
                "children": [
                    {"object": reference("app-config"), "type": "Deletes", "state": "Stuck",
                        "message": "deleted by the garbage collector: none of its owners stays, but it will hang: nobody will remove what holds it",
                        "evidence": {"hangs": "true", "outcome": "Deleted"},
                        "children": [hold_cause.clone()]},
                    {"object": reference("app-cache"), "type": "Deletes", "state": "Progressing",
                        "message": "deleted by the garbage collector: none of its owners stays",
                        "evidence": {"outcome": "Deleted"}}
                ]
            }],
            "plan": {
                "propagationPolicy": "Background", "policySource": "Request",
                "deleted": 3, "deletedByKind": {"ConfigMap": 3},
                "orphaned": 0, "kept": 0, "hangs": 1, "blocked": 0,
                "hangCauses": [hold_cause]
            }
        })
    );

    // with --cascade=orphan only app goes and nothing hangs: exit 0;
    let run = plan(
        &env,
        &["configmap", "app", "--cascade=orphan", "--color=never"],
    );
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert!(
        run.stdout.starts_with(
            "WillComplete: DELETE ConfigMap default/app (Orphan) deletes 1 object of 1 kind; orphans 2\n"
        ),
        "{}",
        run.describe()
    );

    // and an unknown --cascade value or type is an error: exit 1 (clap's usage error is 2,
    // so the value check is clap's: it names the accepted values).
    let run = plan(&env, &["cm/app", "--cascade=sideways"]);
    assert_ne!(run.code, Some(0), "{}", run.describe());
    assert!(
        run.stderr
            .contains("[possible values: background, foreground, orphan, default]"),
        "{}",
        run.describe()
    );
    let run = plan(&env, &["gizmo/app"]);
    assert_eq!(run.code, Some(1), "{}", run.describe());
    assert!(
        run.stderr
            .contains("the server doesn't have a resource type \"gizmo\""),
        "{}",
        run.describe()
    );
}

/// The discovery cache file `finale` keeps for this server, as kubectl names the folder.
fn cache_file(env: &Env) -> std::path::PathBuf {
    let host = env
        .server
        .url
        .trim_start_matches("https://")
        .trim_end_matches('/')
        .replace(':', "_");
    env.cache_dir()
        .join("discovery")
        .join(host)
        .join("finale-aggregated.json")
}

/// Rewrites the cached copy with `change`.
fn edit_cache(env: &Env, change: impl FnOnce(&mut Value)) {
    let file = cache_file(env);
    let text =
        std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("read {}: {e}", file.display()));
    let mut cached: Value = serde_json::from_str(&text).expect("the cache is JSON");
    change(&mut cached);
    std::fs::write(&file, cached.to_string()).expect("rewrite the cache");
}

/// Adds the short name `zzcm`, which no server serves, to ConfigMaps in the cached copy: a
/// command that resolves `zzcm` read the copy, not the server.
fn add_sentinel_short_name(cached: &mut Value) {
    let resources = cached["core"]["items"][0]["versions"][0]["resources"]
        .as_array_mut()
        .expect("the core group's resources");
    let config_maps = resources
        .iter_mut()
        .find(|r| r["resource"] == "configmaps")
        .expect("configmaps in the cached core group");
    config_maps["shortNames"] = json!(["cm", "zzcm"]);
}

#[test]
fn discovery_is_cached_per_server_and_read_again_on_a_miss() {
    let env = Env::start();
    // The first command reads discovery from the server and keeps it, for this server.
    let first = plan(&env, &["cm/absent", "-o", "json"]);
    assert_eq!(first.code, Some(0), "{}", first.describe());
    let file = cache_file(&env);
    let cached: Value = serde_json::from_str(
        &std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("no cache at {}: {e}", file.display())),
    )
    .expect("the cache is JSON");
    assert_eq!(
        cached["server"].as_str().map(|s| s.trim_end_matches('/')),
        Some(env.server.url.trim_end_matches('/')),
        "{cached}"
    );

    // A fresh copy answers without the server: a short name only the copy knows resolves.
    edit_cache(&env, add_sentinel_short_name);
    let from_copy = plan(&env, &["zzcm/absent", "-o", "json"]);
    assert_eq!(from_copy.code, Some(0), "{}", from_copy.describe());

    // A copy made for another CA (a cluster re-created at this address) is not used,
    edit_cache(&env, |cached| cached["caSha256"] = json!("another cluster"));
    let other_cluster = plan(&env, &["zzcm/absent", "-o", "json"]);
    assert_eq!(other_cluster.code, Some(1), "{}", other_cluster.describe());
    assert!(
        other_cluster
            .stderr
            .contains("the server doesn't have a resource type \"zzcm\""),
        "{}",
        other_cluster.describe()
    );
    // nor is one older than six hours,
    edit_cache(&env, |cached| {
        add_sentinel_short_name(cached);
        cached["fetchedAt"] = json!("2000-01-01T00:00:00Z");
    });
    let expired = plan(&env, &["zzcm/absent", "-o", "json"]);
    assert_eq!(expired.code, Some(1), "{}", expired.describe());

    // and a type the copy does not name (a CRD created since) is looked up again.
    let fresh_copy = plan(&env, &["cm/absent", "-o", "json"]);
    assert_eq!(fresh_copy.code, Some(0), "{}", fresh_copy.describe());
    env.ok_with_stdin(
        &["apply", "-f", "-"],
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: widgets.example.com\nspec:\n  group: example.com\n  scope: Namespaced\n  names: {kind: Widget, plural: widgets, singular: widget}\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema:\n        type: object\n        x-kubernetes-preserve-unknown-fields: true\n",
    );
    env.ok(&[
        "wait",
        "--for=condition=Established",
        "crd/widgets.example.com",
        "--timeout=30s",
    ]);
    let new_type = plan(&env, &["widget/absent", "-o", "json"]);
    assert_eq!(new_type.code, Some(0), "{}", new_type.describe());
    let cached = std::fs::read_to_string(&file).expect("the cache");
    assert!(
        cached.contains("\"widgets\""),
        "the refreshed copy names widgets"
    );

    // An empty --cache-dir turns the cache off (the sentinel is not seen).
    edit_cache(&env, add_sentinel_short_name);
    assert_eq!(plan(&env, &["zzcm/absent", "-o", "json"]).code, Some(0));
    let off = plan(&env, &["zzcm/absent", "-o", "json", "--cache-dir", ""]);
    assert_eq!(off.code, Some(1), "{}", off.describe());
}
