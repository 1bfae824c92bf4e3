//! `kubectl delete --cascade=background|foreground|orphan` against a real `finale server` and
//! its garbage collector (`shared/spec/deletion-semantics.md` §9.4–9.7, GC21).
//!
//! Dependents carry hand-written `ownerReferences`: each test reads the owner's uid with
//! `kubectl get -o jsonpath={.metadata.uid}` and writes the dependents with `kubectl apply -f -`.
//! Owners are ConfigMaps, a namespaced custom resource, a Namespace and a cluster-scoped custom
//! resource; dependents are ConfigMaps, Secrets and custom resources.
//!
//! Every kubectl run is bounded (the fixture kills it after 120 s; waits pass `--timeout`), and
//! every wait for the collector is an [`eventually`] bounded by [`COLLECT`].

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{Env, eventually};
use serde_json::{Value, json};

/// The bound on anything the collector does in these tests (it acts within milliseconds).
const COLLECT: Duration = Duration::from_secs(20);

/// The JSON patch that drops every finalizer.
const REMOVE_FINALIZERS: &str = r#"[{"op":"remove","path":"/metadata/finalizers"}]"#;

/// A namespaced custom resource, `Widget`.
const WIDGET_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {kind: Widget, plural: widgets, singular: widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
"#;

/// A cluster-scoped custom resource, `Gadget`.
const GADGET_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.example.com
spec:
  group: example.com
  scope: Cluster
  names: {kind: Gadget, plural: gadgets, singular: gadget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
"#;

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// An object's coordinates as kubectl arguments: `["configmap", "a", "-n", "default"]`.
fn at<'a>(kind: &'a str, name: &'a str, namespace: Option<&'a str>) -> Vec<&'a str> {
    let mut args = vec![kind, name];
    if let Some(namespace) = namespace {
        args.extend(["-n", namespace]);
    }
    args
}

/// `kubectl get <object> -o jsonpath=<path>`.
fn jsonpath(env: &Env, object: &[&str], path: &str) -> String {
    let mut args = vec!["get"];
    args.extend_from_slice(object);
    let output = format!("jsonpath={path}");
    args.extend(["-o", output.as_str()]);
    env.ok(&args)
}

/// An owner reference to the object, its uid read with kubectl.
fn reference_to(env: &Env, api_version: &str, kind: &str, object: &[&str], block: bool) -> Value {
    let uid = jsonpath(env, object, "{.metadata.uid}");
    assert!(!uid.is_empty(), "no uid for {object:?}");
    json!({"apiVersion": api_version, "kind": kind, "name": object[1], "uid": uid,
           "blockOwnerDeletion": block})
}

/// A manifest with optional owner references and finalizers.
fn manifest(
    api_version: &str,
    kind: &str,
    name: &str,
    namespace: Option<&str>,
    owners: &[&Value],
    finalizers: &[&str],
) -> Value {
    let mut metadata = json!({"name": name});
    if let Some(namespace) = namespace {
        metadata["namespace"] = json!(namespace);
    }
    if !owners.is_empty() {
        metadata["ownerReferences"] = json!(owners);
    }
    if !finalizers.is_empty() {
        metadata["finalizers"] = json!(finalizers);
    }
    json!({"apiVersion": api_version, "kind": kind, "metadata": metadata})
}

fn config_map(name: &str, owners: &[&Value], finalizers: &[&str]) -> Value {
    manifest("v1", "ConfigMap", name, None, owners, finalizers)
}

fn secret(name: &str, owners: &[&Value]) -> Value {
    manifest("v1", "Secret", name, None, owners, &[])
}

/// `kubectl apply -f -` of the objects as one multi-document stream (JSON is YAML).
fn apply(env: &Env, objects: &[Value]) {
    let stream: Vec<String> = objects.iter().map(Value::to_string).collect();
    env.ok_with_stdin(&["apply", "-f", "-"], &stream.join("\n---\n"));
}

fn install_crd(env: &Env, manifest: &str, name: &str) {
    env.ok_with_stdin(&["apply", "-f", "-"], manifest);
    env.ok(&[
        "wait",
        "--for=condition=Established",
        &format!("crd/{name}"),
        "--timeout=20s",
    ]);
}

/// Whether `kubectl get <object>` finds it; anything but found or NotFound fails the test.
fn exists(env: &Env, object: &[&str]) -> bool {
    let mut args = vec!["get"];
    args.extend_from_slice(object);
    let run = env.run(&args);
    match run.code {
        Some(0) => true,
        Some(1) if run.stderr.contains("NotFound") => false,
        _ => panic!("{}{}", run.describe(), env.log()),
    }
}

/// Waits (within [`COLLECT`]) until the object is gone.
fn collected(env: &Env, object: &[&str]) {
    eventually(COLLECT, || (!exists(env, object)).then_some(())).unwrap_or_else(|| {
        panic!(
            "{object:?} was not collected within {COLLECT:?}: {}{}",
            jsonpath(env, object, "{.metadata}"),
            env.log()
        )
    });
}

/// Waits until the collector has worked through everything it observed before this call: a
/// sentinel Secret owned by a ConfigMap that never existed is applied and must be collected.
/// The collector observes changes in revision order and takes queued work in order, and
/// collecting the sentinel takes two rounds of it (verify the unseen owner, then delete the
/// dependent), so once the sentinel is gone the work queued before it has been taken up and,
/// in practice, done. This proves "the collector did nothing" without a fixed sleep.
fn collector_caught_up(env: &Env) {
    static SENTINELS: AtomicUsize = AtomicUsize::new(0);
    let sequence = SENTINELS.fetch_add(1, Ordering::SeqCst);
    let name = format!("gc-sentinel-{sequence}");
    let never_existed = json!({"apiVersion": "v1", "kind": "ConfigMap", "name": format!("{name}-owner"),
                               "uid": format!("00000000-0000-4000-8000-{sequence:012}")});
    apply(env, &[secret(&name, &[&never_existed])]);
    collected(env, &["secret", &name]);
}

/// The names in the object's ownerReferences, in order.
fn owner_names(env: &Env, object: &[&str]) -> Vec<String> {
    jsonpath(env, object, "{.metadata.ownerReferences[*].name}")
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// Waits (within [`COLLECT`]) until the object's owners are exactly `expected`.
fn owned_by(env: &Env, object: &[&str], expected: &[&str]) {
    eventually(COLLECT, || {
        (owner_names(env, object) == expected).then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "{object:?} never had exactly the owners {expected:?}: {}{}",
            jsonpath(env, object, "{.metadata}"),
            env.log()
        )
    });
}

/// `kubectl delete` that must succeed and report the deletion.
fn delete(env: &Env, kind: &str, name: &str, namespace: Option<&str>, cascade: &str) {
    let mut args = vec!["delete"];
    args.extend(at(kind, name, namespace));
    let cascade = format!("--cascade={cascade}");
    args.extend([cascade.as_str(), "--timeout=60s"]);
    let out = env.ok(&args);
    assert!(out.contains(&format!("\"{name}\" deleted")), "{out}");
}

/// `kubectl delete <owner> --cascade=foreground` while `held`, a dependent that blocks the
/// owner, is kept by a finalizer: kubectl keeps waiting and the owner stays terminating with
/// `foregroundDeletion` until `held` is released; then both go and kubectl returns 0.
fn foreground_waits_for(env: &Env, owner: &[&str], held: &[&str]) {
    let mut args = vec!["delete"];
    args.extend_from_slice(owner);
    args.extend(["--cascade=foreground", "--timeout=60s"]);
    let mut deleting = env
        .kubectl
        .spawn(&args)
        .unwrap_or_else(|e| panic!("cannot start kubectl delete: {e:#}"));
    deleting
        .wait_for(COLLECT, "the deletion", |out| {
            out.contains(&format!("\"{}\" deleted", owner[1]))
        })
        .unwrap_or_else(|e| panic!("{e:#}{}", env.log()));
    eventually(COLLECT, || {
        (!jsonpath(env, held, "{.metadata.deletionTimestamp}").is_empty()).then_some(())
    })
    .unwrap_or_else(|| panic!("{held:?} was never deleted{}", env.log()));
    collector_caught_up(env);
    assert!(
        exists(env, owner),
        "{owner:?} went while {held:?} still blocks it{}",
        env.log()
    );
    assert_eq!(
        jsonpath(env, owner, "{.metadata.finalizers}"),
        r#"["foregroundDeletion"]"#,
        "{owner:?} must wait for {held:?}"
    );
    assert!(!jsonpath(env, owner, "{.metadata.deletionTimestamp}").is_empty());
    assert!(
        deleting.wait_exit(Duration::ZERO).is_none(),
        "kubectl delete returned while {held:?} blocks {owner:?}: {}",
        deleting.output()
    );

    let mut patch = vec!["patch"];
    patch.extend_from_slice(held);
    patch.extend(["--type", "json", "-p", REMOVE_FINALIZERS]);
    env.ok(&patch);
    let status = deleting.wait_exit(COLLECT);
    let output = deleting.kill();
    let status = status.unwrap_or_else(|| {
        panic!(
            "kubectl delete did not return within {COLLECT:?} of the release:\n{output}{}",
            env.log()
        )
    });
    assert!(
        status.success(),
        "kubectl delete failed ({status}):\n{output}"
    );
    assert!(!exists(env, owner));
    assert!(!exists(env, held));
}

// ---------------------------------------------------------------------------------------------
// ConfigMap owners
// ---------------------------------------------------------------------------------------------

/// Background: the owner goes at once; its ConfigMap and Secret dependents follow, down a
/// chain; a dependent with another live owner stays and loses only the deleted owner's
/// reference (GC11, GC18); objects without owners are untouched.
#[test]
fn background_cascade_collects_configmap_and_secret_dependents() {
    let env = Env::start();
    apply(
        &env,
        &[
            config_map("owner", &[], &[]),
            config_map("keeper", &[], &[]),
            config_map("bystander", &[], &[]),
        ],
    );
    let owner = reference_to(&env, "v1", "ConfigMap", &["configmap", "owner"], false);
    let keeper = reference_to(&env, "v1", "ConfigMap", &["configmap", "keeper"], true);
    apply(
        &env,
        &[
            config_map("child", &[&owner], &[]),
            secret("child-secret", &[&owner]),
            config_map("shared", &[&owner, &keeper], &[]),
        ],
    );
    let child = reference_to(&env, "v1", "ConfigMap", &["configmap", "child"], true);
    apply(&env, &[secret("grandchild", &[&child])]);

    // Without waiting: a background delete removes the owner at once, before any dependent.
    let out = env.ok(&[
        "delete",
        "configmap",
        "owner",
        "--cascade=background",
        "--wait=false",
    ]);
    assert!(out.contains(r#"configmap "owner" deleted"#), "{out}");
    assert!(!exists(&env, &["configmap", "owner"]));
    for object in [
        ["configmap", "child"],
        ["secret", "child-secret"],
        ["secret", "grandchild"],
    ] {
        collected(&env, &object);
    }
    owned_by(&env, &["configmap", "shared"], &["keeper"]);
    let shared = env.get_json(&["configmap", "shared"]);
    assert_eq!(
        shared["metadata"]["ownerReferences"],
        json!([keeper]),
        "the surviving reference is kept as written: {shared:#}"
    );
    assert!(exists(&env, &["configmap", "keeper"]));
    assert!(exists(&env, &["configmap", "bystander"]));
}

/// Foreground: kubectl waits while the owner is terminating with `foregroundDeletion`; its
/// non-blocking Secret dependent and the blocking dependent's own dependent go; the blocking
/// dependent, held by a finalizer, keeps the owner until it is released; then the owner goes
/// last and kubectl returns (GC12–GC14).
#[test]
fn foreground_cascade_waits_for_blocking_dependents() {
    let env = Env::start();
    apply(&env, &[config_map("owner", &[], &[])]);
    let owner = reference_to(&env, "v1", "ConfigMap", &["configmap", "owner"], true);
    let owner_non_blocking = reference_to(&env, "v1", "ConfigMap", &["configmap", "owner"], false);
    apply(
        &env,
        &[
            config_map("blocker", &[&owner], &["example.com/hold"]),
            secret("loose", &[&owner_non_blocking]),
        ],
    );
    let blocker = reference_to(&env, "v1", "ConfigMap", &["configmap", "blocker"], true);
    apply(&env, &[config_map("under-blocker", &[&blocker], &[])]);

    let watch = env
        .kubectl
        .spawn(&["get", "configmaps", "--watch", "--output-watch-events"])
        .unwrap_or_else(|e| panic!("cannot start kubectl get --watch: {e:#}"));
    watch
        .wait_for(COLLECT, "the initial list", |out| {
            out.contains("under-blocker")
        })
        .unwrap_or_else(|e| panic!("{e:#}{}", env.log()));

    let mut deleting = env
        .kubectl
        .spawn(&[
            "delete",
            "configmap",
            "owner",
            "--cascade=foreground",
            "--timeout=60s",
        ])
        .unwrap_or_else(|e| panic!("cannot start kubectl delete: {e:#}"));
    deleting
        .wait_for(COLLECT, "the deletion", |out| {
            out.contains(r#"configmap "owner" deleted"#)
        })
        .unwrap_or_else(|e| panic!("{e:#}{}", env.log()));

    collected(&env, &["secret", "loose"]);
    collected(&env, &["configmap", "under-blocker"]);
    // The blocker's own foreground deletion is over (its dependent is gone); its finalizer
    // holds it, and it holds the owner.
    eventually(COLLECT, || {
        let blocker = env.get_json(&["configmap", "blocker"]);
        (blocker["metadata"]["finalizers"] == json!(["example.com/hold"])).then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "the blocker never settled on its own finalizer: {}{}",
            jsonpath(&env, &["configmap", "blocker"], "{.metadata}"),
            env.log()
        )
    });
    collector_caught_up(&env);
    assert!(
        exists(&env, &["configmap", "owner"]),
        "the owner went while the blocker still blocks it{}",
        env.log()
    );
    let blocker_now = env.get_json(&["configmap", "blocker"]);
    assert!(
        blocker_now["metadata"]["deletionTimestamp"].is_string(),
        "{blocker_now:#}"
    );
    let owner_now = env.get_json(&["configmap", "owner"]);
    assert!(
        owner_now["metadata"]["deletionTimestamp"].is_string(),
        "{owner_now:#}"
    );
    assert_eq!(
        owner_now["metadata"]["finalizers"],
        json!(["foregroundDeletion"]),
        "{owner_now:#}"
    );
    assert!(
        deleting.wait_exit(Duration::ZERO).is_none(),
        "kubectl delete returned while a blocking dependent exists: {}",
        deleting.output()
    );

    env.ok(&[
        "patch",
        "configmap",
        "blocker",
        "--type",
        "json",
        "-p",
        REMOVE_FINALIZERS,
    ]);
    let status = deleting.wait_exit(COLLECT);
    let output = deleting.kill();
    let status = status.unwrap_or_else(|| {
        panic!(
            "kubectl delete did not return within {COLLECT:?} of the release:\n{output}{}",
            env.log()
        )
    });
    assert!(
        status.success(),
        "kubectl delete failed ({status}):\n{output}"
    );
    assert!(!exists(&env, &["configmap", "owner"]));
    assert!(!exists(&env, &["configmap", "blocker"]));

    // The watch saw the dependents go first, the owner last.
    let events = watch
        .wait_for(COLLECT, "the owner's DELETED event", |out| {
            deleted_order(out).contains(&"owner".to_string())
        })
        .unwrap_or_else(|e| panic!("{e:#}{}", env.log()));
    assert_eq!(
        deleted_order(&events),
        ["under-blocker", "blocker", "owner"],
        "{events}"
    );
}

/// The names in `kubectl get --watch --output-watch-events` DELETED lines, in order.
fn deleted_order(output: &str) -> Vec<String> {
    output
        .lines()
        .filter_map(|line| {
            let mut columns = line.split_whitespace();
            (columns.next() == Some("DELETED"))
                .then(|| columns.next().map(str::to_string))
                .flatten()
        })
        .collect()
}

/// Orphan: kubectl returns once the owner is gone; its dependents stay without the
/// reference to it, other references intact, and nothing further down is collected (GC16).
#[test]
fn orphan_cascade_keeps_dependents_without_the_reference() {
    let env = Env::start();
    apply(
        &env,
        &[
            config_map("owner", &[], &[]),
            config_map("keeper", &[], &[]),
        ],
    );
    let owner = reference_to(&env, "v1", "ConfigMap", &["configmap", "owner"], true);
    let keeper = reference_to(&env, "v1", "ConfigMap", &["configmap", "keeper"], false);
    apply(
        &env,
        &[
            config_map("child", &[&owner], &[]),
            secret("child-secret", &[&owner]),
            config_map("shared", &[&owner, &keeper], &[]),
        ],
    );
    let child = reference_to(&env, "v1", "ConfigMap", &["configmap", "child"], false);
    apply(&env, &[config_map("grandchild", &[&child], &[])]);

    delete(&env, "configmap", "owner", None, "orphan");
    assert!(!exists(&env, &["configmap", "owner"]));
    // The references went before the owner did (GC16): no waiting needed.
    for object in [["configmap", "child"], ["secret", "child-secret"]] {
        assert_eq!(
            jsonpath(&env, &object, "{.metadata.ownerReferences}"),
            "",
            "{object:?} still refers to an owner"
        );
    }
    let shared = env.get_json(&["configmap", "shared"]);
    assert_eq!(shared["metadata"]["ownerReferences"], json!([keeper]));
    // Nothing is collected later either.
    collector_caught_up(&env);
    assert!(exists(&env, &["configmap", "child"]));
    assert!(exists(&env, &["secret", "child-secret"]));
    assert_eq!(owner_names(&env, &["configmap", "grandchild"]), ["child"]);
}

// ---------------------------------------------------------------------------------------------
// Custom resource owners and dependents
// ---------------------------------------------------------------------------------------------

/// A namespaced custom resource as owner (and dependent): background collects a ConfigMap and
/// a child Widget; foreground returns only once its blocking dependents are gone; orphan
/// leaves a child Widget and a Secret without the reference (a custom resource's
/// ownerReferences rewritten by the collector).
///
/// A foreground delete waits for a dependent held by a finalizer; a blocking dependent must be
/// gone before its owner is, so once kubectl has returned none is left.
#[test]
fn custom_resource_owner_with_each_policy() {
    let env = Env::start();
    install_crd(&env, WIDGET_CRD, "widgets.example.com");
    let widget = |name: &str, owners: &[&Value]| {
        manifest("example.com/v1", "Widget", name, None, owners, &[])
    };
    apply(
        &env,
        &[widget("bg", &[]), widget("fg", &[]), widget("or", &[])],
    );
    let owner = |name: &str, block: bool| {
        reference_to(&env, "example.com/v1", "Widget", &["widget", name], block)
    };
    let (bg, fg, or) = (owner("bg", false), owner("fg", true), owner("or", true));
    apply(
        &env,
        &[
            config_map("bg-cm", &[&bg], &[]),
            widget("bg-child", &[&bg]),
            config_map("fg-cm", &[&fg], &[]),
            config_map("fg-held", &[&fg], &["example.com/hold"]),
            widget("fg-child", &[&fg]),
            widget("or-child", &[&or]),
            secret("or-secret", &[&or]),
        ],
    );

    delete(&env, "widget", "bg", None, "background");
    collected(&env, &["configmap", "bg-cm"]);
    collected(&env, &["widget", "bg-child"]);

    foreground_waits_for(&env, &["widget", "fg"], &["configmap", "fg-held"]);
    // The other blocking dependents went before the owner, i.e. before kubectl returned.
    assert!(!exists(&env, &["configmap", "fg-cm"]));
    assert!(!exists(&env, &["widget", "fg-child"]));

    delete(&env, "widget", "or", None, "orphan");
    assert!(!exists(&env, &["widget", "or"]));
    for object in [["widget", "or-child"], ["secret", "or-secret"]] {
        assert_eq!(
            jsonpath(&env, &object, "{.metadata.ownerReferences}"),
            "",
            "{object:?} still refers to its owner"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Cluster-scoped owners of namespaced dependents (GC21)
// ---------------------------------------------------------------------------------------------

/// A Namespace owning ConfigMaps and Secrets in two other namespaces: once it is deleted (and
/// gone, after the namespace controller), its dependents are collected; a namespaced object
/// owned by it and by a live ConfigMap keeps the ConfigMap.
#[test]
fn namespace_owner_collects_dependents_in_other_namespaces() {
    let env = Env::start();
    env.ok(&["create", "namespace", "owner-ns"]);
    env.ok(&["create", "namespace", "other"]);
    let owner = reference_to(&env, "v1", "Namespace", &["namespace", "owner-ns"], false);
    apply(&env, &[config_map("keeper", &[], &[])]);
    let keeper = reference_to(&env, "v1", "ConfigMap", &["configmap", "keeper"], false);
    apply(
        &env,
        &[
            config_map("in-default", &[&owner], &[]),
            manifest("v1", "ConfigMap", "in-other", Some("other"), &[&owner], &[]),
            manifest(
                "v1",
                "Secret",
                "secret-in-other",
                Some("other"),
                &[&owner],
                &[],
            ),
            config_map("shared", &[&owner, &keeper], &[]),
        ],
    );
    // Valid (GC21): nothing is collected while the owner exists.
    collector_caught_up(&env);
    assert!(exists(&env, &["configmap", "in-default"]));
    assert!(exists(&env, &at("configmap", "in-other", Some("other"))));

    delete(&env, "namespace", "owner-ns", None, "background");
    assert!(!exists(&env, &["namespace", "owner-ns"]));
    collected(&env, &["configmap", "in-default"]);
    collected(&env, &at("configmap", "in-other", Some("other")));
    collected(&env, &at("secret", "secret-in-other", Some("other")));
    owned_by(&env, &["configmap", "shared"], &["keeper"]);
    assert!(exists(&env, &["namespace", "other"]));
}

/// A cluster-scoped custom resource owning dependents in two namespaces: valid while it
/// lives (GC21); a foreground delete waits for a blocking dependent held by a finalizer in
/// another namespace and returns only once every blocking one is gone; an orphan delete of
/// a second one leaves its dependents without the reference.
#[test]
fn cluster_scoped_custom_resource_owner() {
    let env = Env::start();
    install_crd(&env, GADGET_CRD, "gadgets.example.com");
    env.ok(&["create", "namespace", "other"]);
    let gadget = |name: &str| manifest("example.com/v1", "Gadget", name, None, &[], &[]);
    apply(&env, &[gadget("fg"), gadget("or")]);
    let owner = |name: &str, block: bool| {
        reference_to(&env, "example.com/v1", "Gadget", &["gadget", name], block)
    };
    let (fg, or) = (owner("fg", true), owner("or", true));
    apply(
        &env,
        &[
            config_map("fg-default", &[&fg], &[]),
            manifest("v1", "Secret", "fg-other", Some("other"), &[&fg], &[]),
            manifest(
                "v1",
                "ConfigMap",
                "fg-held",
                Some("other"),
                &[&fg],
                &["example.com/hold"],
            ),
            config_map("or-default", &[&or], &[]),
            manifest("v1", "ConfigMap", "or-other", Some("other"), &[&or], &[]),
        ],
    );
    collector_caught_up(&env);
    assert_eq!(owner_names(&env, &["configmap", "fg-default"]), ["fg"]);
    assert_eq!(
        owner_names(&env, &at("secret", "fg-other", Some("other"))),
        ["fg"]
    );

    foreground_waits_for(
        &env,
        &["gadget", "fg"],
        &at("configmap", "fg-held", Some("other")),
    );
    assert!(!exists(&env, &["configmap", "fg-default"]));
    assert!(!exists(&env, &at("secret", "fg-other", Some("other"))));

    delete(&env, "gadget", "or", None, "orphan");
    assert!(!exists(&env, &["gadget", "or"]));
    for object in [
        at("configmap", "or-default", None),
        at("configmap", "or-other", Some("other")),
    ] {
        assert_eq!(
            jsonpath(&env, &object, "{.metadata.ownerReferences}"),
            "",
            "{object:?} still refers to its owner"
        );
    }
}
