//! kubectl's deletion workflows against a real `finale server` (`shared/spec/deletion-semantics.md`
//! M4, M5, §10 and §13 scenario 48): deleting objects held by finalizers, releasing them with a
//! JSON patch while `kubectl wait --for=delete` watches, deleting a namespace with content,
//! graceful and forced pod deletion without a kubelet, and waiting on a name that never existed.
//!
//! Every kubectl run is bounded (the fixture kills it after 120 s; waits pass `--timeout`).

mod common;

use std::time::{Duration, Instant};

use common::{Env, eventually, kubectl_watch_opened};
use serde_json::{Value, json};

/// The JSON patch that drops every finalizer: the manual escape hatch.
const REMOVE_FINALIZERS: &str = r#"[{"op":"remove","path":"/metadata/finalizers"}]"#;

fn configmap_yaml(name: &str, namespace: &str, finalizers: &[&str]) -> String {
    let finalizers = if finalizers.is_empty() {
        String::new()
    } else {
        let items: String = finalizers.iter().map(|f| format!("  - {f}\n")).collect();
        format!("  finalizers:\n{items}")
    };
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {namespace}\n{finalizers}data:\n  key: {name}\n"
    )
}

/// A pod bound to `node-1` (as if scheduled), set Running through `/status` as a kubelet would.
fn running_pod(env: &Env, name: &str) -> Value {
    env.ok_with_stdin(
        &["apply", "-f", "-"],
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  nodeName: node-1\n  terminationGracePeriodSeconds: 30\n  containers:\n  - name: c\n    image: busybox:1.36\n"
        ),
    );
    env.ok(&[
        "patch",
        "pod",
        name,
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"phase":"Running"}}"#,
    ]);
    let pod = env.get_json(&["pod", name]);
    assert_eq!(pod["spec"]["nodeName"], "node-1", "{pod:#}");
    assert_eq!(pod["status"]["phase"], "Running", "{pod:#}");
    pod
}

/// Asserts `kubectl get <args>` fails with NotFound.
fn assert_not_found(env: &Env, args: &[&str]) {
    let mut all = vec!["get"];
    all.extend_from_slice(args);
    let run = env.run(&all);
    assert_eq!(run.code, Some(1), "{}", run.describe());
    assert!(run.stderr.contains("NotFound"), "{}", run.describe());
}

/// `kubectl delete --wait=false` on an object with finalizers leaves it terminating; the JSON
/// patch that removes them lets a running `kubectl wait --for=delete` return 0 (U7, W4, M5).
#[test]
fn delete_with_finalizers_then_patch_releases_a_waiter() {
    let env = Env::start();
    env.ok_with_stdin(
        &["apply", "-f", "-"],
        &configmap_yaml("held", "default", &["example.com/x", "example.com/y"]),
    );

    let out = env.ok(&["delete", "configmap", "held", "--wait=false"]);
    assert!(out.contains(r#"configmap "held" deleted"#), "{out}");

    let cm = env.get_json(&["configmap", "held"]);
    assert!(cm["metadata"]["deletionTimestamp"].is_string(), "{cm:#}");
    assert_eq!(cm["metadata"]["deletionGracePeriodSeconds"], 0, "{cm:#}");
    assert_eq!(
        cm["metadata"]["finalizers"],
        json!(["example.com/x", "example.com/y"])
    );
    let table = env.ok(&["get", "configmaps"]);
    assert!(table.contains("held"), "{table}");

    // A second delete is accepted and changes nothing (D4).
    env.ok(&["delete", "configmap", "held", "--wait=false"]);
    let again = env.get_json(&["configmap", "held"]);
    assert_eq!(
        again["metadata"]["resourceVersion"],
        cm["metadata"]["resourceVersion"]
    );

    let mut waiter = env
        .kubectl
        .spawn(&[
            "wait",
            "--for=delete",
            "configmap/held",
            "--timeout=60s",
            "-v=6",
        ])
        .expect("start kubectl wait");
    // Once the waiter has listed the object and opened its watch, it must not return while
    // the finalizers hold.
    waiter
        .wait_for(
            Duration::from_secs(20),
            "its watch request",
            kubectl_watch_opened,
        )
        .unwrap_or_else(|e| panic!("{e:#}{}", env.log()));
    assert!(
        waiter.wait_exit(Duration::ZERO).is_none(),
        "kubectl wait returned while the finalizers are still there: {}",
        waiter.output()
    );

    let out = env.ok(&[
        "patch",
        "configmap",
        "held",
        "--type",
        "json",
        "-p",
        REMOVE_FINALIZERS,
    ]);
    assert!(out.contains("configmap/held patched"), "{out}");

    let status = waiter.wait_exit(Duration::from_secs(20));
    let output = waiter.kill();
    let status = status.unwrap_or_else(|| {
        panic!(
            "kubectl wait did not return within 20 s of the finalizer removal:\n{output}{}",
            env.log()
        )
    });
    assert!(
        status.success(),
        "kubectl wait failed ({status}):\n{output}"
    );
    assert_not_found(&env, &["configmap", "held"]);
}

/// `kubectl delete ns` with content: the namespace shows phase Terminating and the controller's
/// conditions while a finalizer holds one ConfigMap; everything else is gone; removing the
/// finalizer lets the namespace go (N6–N8).
#[test]
fn delete_namespace_with_content_waits_for_the_last_finalizer() {
    let env = Env::start();
    let manifest = [
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: doomed\n".to_string(),
        configmap_yaml("a", "doomed", &[]),
        configmap_yaml("b", "doomed", &[]),
        configmap_yaml("held", "doomed", &["example.com/x"]),
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\n  namespace: doomed\nstringData:\n  password: hunter2\n".to_string(),
    ]
    .join("---\n");
    env.ok_with_stdin(&["apply", "-f", "-"], &manifest);
    // Custom resources go with the namespace too, and their finalizers hold it as well.
    env.ok_with_stdin(&["apply", "-f", "-"], GIZMO_CRD);
    env.ok(&[
        "wait",
        "--for=condition=Established",
        "crd/gizmos.example.com",
        "--timeout=20s",
    ]);
    env.ok_with_stdin(
        &["apply", "-f", "-"],
        "apiVersion: example.com/v1\nkind: Gizmo\nmetadata:\n  name: g1\n  namespace: doomed\n  finalizers: [example.com/gizmo]\n---\napiVersion: example.com/v1\nkind: Gizmo\nmetadata:\n  name: g2\n  namespace: doomed\n",
    );

    let out = env.ok(&["delete", "namespace", "doomed", "--wait=false"]);
    assert!(out.contains(r#"namespace "doomed" deleted"#), "{out}");

    let reported = eventually(Duration::from_secs(10), || {
        let ns = env.get_json(&["namespace", "doomed"]);
        let conditions = ns["status"]["conditions"].as_array()?;
        conditions
            .iter()
            .any(|c| c["type"] == "NamespaceFinalizersRemaining" && c["status"] == "True")
            .then_some(ns)
    })
    .unwrap_or_else(|| {
        panic!(
            "the namespace conditions never reported the finalizer{}",
            env.log()
        )
    });
    assert_eq!(reported["status"]["phase"], "Terminating", "{reported:#}");

    let yaml = env.ok(&["get", "namespace", "doomed", "-o", "yaml"]);
    for expected in [
        "phase: Terminating",
        "deletionTimestamp:",
        "type: NamespaceContentRemaining",
        "reason: SomeResourcesRemain",
        "type: NamespaceFinalizersRemaining",
        "reason: SomeFinalizersRemain",
        "type: NamespaceDeletionContentFailure",
        "reason: ContentDeleted",
        "type: NamespaceDeletionDiscoveryFailure",
        "type: NamespaceDeletionGroupVersionParsingFailure",
    ] {
        assert!(yaml.contains(expected), "missing {expected:?} in:\n{yaml}");
    }
    // (YAML folds the long messages; compare them from JSON.)
    let message = |kind: &str| {
        reported["status"]["conditions"]
            .as_array()
            .and_then(|list| list.iter().find(|c| c["type"] == kind))
            .map(|c| c["message"].clone())
    };
    assert_eq!(
        message("NamespaceContentRemaining"),
        Some(json!(
            "Some resources are remaining: configmaps. has 1 resource instances, gizmos.example.com has 1 resource instances"
        ))
    );
    assert_eq!(
        message("NamespaceFinalizersRemaining"),
        Some(json!(
            "Some content in the namespace has finalizers remaining: example.com/gizmo in 1 resource instances, example.com/x in 1 resource instances"
        ))
    );
    let table = env.ok(&["get", "namespace", "doomed"]);
    assert!(table.contains("Terminating"), "{table}");

    // Only the held ConfigMap is left, terminating; the rest of the content is gone.
    let left = env.get_json(&["configmaps", "-n", "doomed"]);
    let names: Vec<&str> = left["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|i| i["metadata"]["name"].as_str())
        .collect();
    assert_eq!(names, ["held"], "{left:#}");
    assert!(left["items"][0]["metadata"]["deletionTimestamp"].is_string());
    assert_not_found(&env, &["secret", "s", "-n", "doomed"]);
    assert_not_found(&env, &["gizmo", "g2", "-n", "doomed"]);

    // No new content while terminating.
    let refused = env.run_with_stdin(
        &["create", "-f", "-"],
        &configmap_yaml("late", "doomed", &[]),
    );
    assert_eq!(refused.code, Some(1), "{}", refused.describe());
    assert!(
        refused.stderr.contains("because it is being terminated"),
        "{}",
        refused.describe()
    );

    env.ok(&[
        "patch",
        "configmap",
        "held",
        "-n",
        "doomed",
        "--type",
        "json",
        "-p",
        REMOVE_FINALIZERS,
    ]);
    env.ok(&[
        "patch",
        "gizmo",
        "g1",
        "-n",
        "doomed",
        "--type",
        "json",
        "-p",
        REMOVE_FINALIZERS,
    ]);
    env.ok(&["wait", "--for=delete", "namespace/doomed", "--timeout=20s"]);
    assert_not_found(&env, &["namespace", "doomed"]);
}

/// A namespaced custom resource with no schema constraints beyond an object.
const GIZMO_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gizmos.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {kind: Gizmo, plural: gizmos}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
"#;

/// Pods without a kubelet: a graceful `kubectl delete pod` leaves a scheduled running pod
/// Terminating with its 30 s grace period (PG2); `--force --grace-period=0` removes one at once
/// (M4, PG4), even one already terminating.
#[test]
fn pod_deletion_graceful_and_forced() {
    let env = Env::start();
    running_pod(&env, "graceful");
    running_pod(&env, "forced");

    let out = env.ok(&["delete", "pod", "graceful", "--wait=false"]);
    assert!(out.contains(r#"pod "graceful" deleted"#), "{out}");
    let pod = env.get_json(&["pod", "graceful"]);
    assert_eq!(pod["metadata"]["deletionGracePeriodSeconds"], 30, "{pod:#}");
    assert!(pod["metadata"]["deletionTimestamp"].is_string(), "{pod:#}");
    let table = env.ok(&["get", "pod", "graceful"]);
    assert!(table.contains("Terminating"), "{table}");

    let started = Instant::now();
    let forced = env.run(&["delete", "pod", "forced", "--force", "--grace-period=0"]);
    assert_eq!(forced.code, Some(0), "{}", forced.describe());
    assert!(
        forced.stdout.contains(r#"pod "forced" force deleted"#),
        "{}",
        forced.describe()
    );
    assert!(
        forced
            .stderr
            .contains("Immediate deletion does not wait for confirmation"),
        "{}",
        forced.describe()
    );
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_not_found(&env, &["pod", "forced"]);

    // Forcing a pod whose grace period is running removes it too (D3.5 shortening to 0).
    let forced = env.run(&["delete", "pod", "graceful", "--force", "--grace-period=0"]);
    assert_eq!(forced.code, Some(0), "{}", forced.describe());
    assert_not_found(&env, &["pod", "graceful"]);
}

/// 48 / M5: `kubectl wait --for=delete` on a name that never existed succeeds at once.
#[test]
fn s48_wait_for_delete_of_a_name_that_never_existed() {
    let env = Env::start();
    let started = Instant::now();
    let run = env.run(&[
        "wait",
        "--for=delete",
        "configmap/never-existed",
        "--timeout=30s",
    ]);
    let took = started.elapsed();
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert!(
        took < Duration::from_secs(10),
        "kubectl wait took {took:?} for a missing object"
    );
}
