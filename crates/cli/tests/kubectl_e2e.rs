//! kubectl against a real `finale server`: the everyday commands, their output formats, and
//! their errors. kubectl is the machine's (`/usr/bin/kubectl`, gcloud's dispatcher, which runs
//! kubectl 1.33 for Finale's reported v1.33.0), with a private cache directory per test.

mod common;

use std::time::Duration;

use common::{Env, eventually, kubectl_watch_opened};
use serde_json::Value;

/// ConfigMap + Secret + Service + a Deployment with two containers, each with env.
const APP_V1: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata:
  name: app-config
  labels:
    app: web
data:
  mode: prod
  level: info
---
apiVersion: v1
kind: Secret
metadata:
  name: app-secret
type: Opaque
data:
  password: aHVudGVyMg==
---
apiVersion: v1
kind: Service
metadata:
  name: app
spec:
  selector:
    app: web
  ports:
  - name: http
    port: 80
    targetPort: 8080
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels:
    app: web
spec:
  replicas: 2
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
    spec:
      containers:
      - name: app
        image: nginx:1.27
        ports:
        - containerPort: 8080
        env:
        - name: MODE
          value: prod
        - name: LEVEL
          value: info
        - name: OBSOLETE
          value: remove-me
      - name: sidecar
        image: busybox:1.36
        args: ["sleep", "infinity"]
        env:
        - name: SIDE
          value: car
"#;

/// APP_V1 with `LEVEL` changed and `OBSOLETE` removed from the `app` container.
fn app_v2() -> String {
    let changed = APP_V1
        .replace(
            "        - name: LEVEL\n          value: info\n",
            "        - name: LEVEL\n          value: debug\n",
        )
        .replace("        - name: OBSOLETE\n          value: remove-me\n", "");
    assert_ne!(changed, APP_V1);
    assert!(!changed.contains("OBSOLETE"));
    changed
}

fn write_manifest(env: &Env, file: &str, text: &str) -> String {
    let path = env.dir.path().join(file);
    std::fs::write(&path, text).expect("write manifest");
    path.to_str().expect("utf-8 path").to_string()
}

fn container<'a>(deployment: &'a Value, name: &str) -> &'a Value {
    deployment["spec"]["template"]["spec"]["containers"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == name))
        .unwrap_or_else(|| panic!("no container {name:?} in {deployment:#}"))
}

/// `[(name, value)]` of a container's env, in order.
fn env_of(container: &Value) -> Vec<(String, String)> {
    container["env"]
        .as_array()
        .map(|env| {
            env.iter()
                .map(|e| {
                    (
                        e["name"].as_str().unwrap_or_default().to_string(),
                        e["value"].as_str().unwrap_or_default().to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
    items
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn apply_configmap(env: &Env, name: &str) {
    let manifest = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  key: value\n"
    );
    env.ok_with_stdin(&["apply", "-f", "-"], &manifest);
}

#[test]
fn apply_creates_every_object_of_a_multi_document_manifest() {
    let env = Env::start();
    let manifest = write_manifest(&env, "app.yaml", APP_V1);
    let out = env.ok(&["apply", "-f", &manifest]);
    for line in [
        "configmap/app-config created",
        "secret/app-secret created",
        "service/app created",
        "deployment.apps/web created",
    ] {
        assert!(out.contains(line), "missing {line:?} in:\n{out}");
    }

    let cm = env.get_json(&["configmap", "app-config"]);
    assert_eq!(cm["data"]["mode"], "prod");
    assert_eq!(cm["data"]["level"], "info");
    assert_eq!(cm["metadata"]["namespace"], "default");
    assert!(
        cm["metadata"]["uid"]
            .as_str()
            .is_some_and(|u| !u.is_empty())
    );
    assert!(cm["metadata"]["creationTimestamp"].is_string());
    assert!(
        cm["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .is_string(),
        "client-side apply records its configuration: {cm:#}"
    );

    let secret = env.get_json(&["secret", "app-secret"]);
    assert_eq!(secret["data"]["password"], "aHVudGVyMg==");
    assert_eq!(secret["type"], "Opaque");

    let service = env.get_json(&["service", "app"]);
    assert_eq!(service["spec"]["ports"][0]["port"], 80);
    assert_eq!(service["spec"]["selector"]["app"], "web");

    let deployment = env.get_json(&["deployment", "web"]);
    assert_eq!(deployment["spec"]["replicas"], 2);
    assert_eq!(deployment["metadata"]["generation"], 1);
    assert_eq!(
        env_of(container(&deployment, "app")),
        pairs(&[
            ("MODE", "prod"),
            ("LEVEL", "info"),
            ("OBSOLETE", "remove-me")
        ])
    );
    assert_eq!(
        env_of(container(&deployment, "sidecar")),
        pairs(&[("SIDE", "car")])
    );

    // Applying the same manifest again changes nothing.
    let again = env.ok(&["apply", "-f", &manifest]);
    assert!(
        again.contains("configmap/app-config unchanged")
            && again.contains("deployment.apps/web unchanged"),
        "a second identical apply must be a no-op:\n{again}"
    );
    let same = env.get_json(&["deployment", "web"]);
    assert_eq!(
        same["metadata"]["resourceVersion"], deployment["metadata"]["resourceVersion"],
        "an unchanged apply must not write"
    );
}

#[test]
fn reapply_with_changed_env_merges_strategically_and_keeps_other_containers() {
    let env = Env::start();
    let v1 = write_manifest(&env, "v1.yaml", APP_V1);
    env.ok(&["apply", "-f", &v1]);
    // A change made outside the manifest (e.g. by an operator): the re-apply must keep it,
    // which only a strategic merge by container and env name does.
    env.ok(&[
        "patch",
        "deployment",
        "web",
        "-p",
        r#"{"spec":{"template":{"spec":{"containers":[{"name":"sidecar","env":[{"name":"LIVE","value":"kept"}]}]}}}}"#,
    ]);
    let before = env.get_json(&["deployment", "web"]);
    assert_eq!(
        env_of(container(&before, "sidecar")),
        pairs(&[("LIVE", "kept"), ("SIDE", "car")]),
        "a strategic patch merges env by name: {before:#}"
    );

    let v2 = write_manifest(&env, "v2.yaml", &app_v2());
    let out = env.ok(&["apply", "-f", &v2]);
    assert!(
        out.contains("deployment.apps/web configured"),
        "the changed Deployment must be patched:\n{out}"
    );
    assert!(out.contains("configmap/app-config unchanged"), "{out}");

    let after = env.get_json(&["deployment", "web"]);
    let containers = after["spec"]["template"]["spec"]["containers"]
        .as_array()
        .expect("containers");
    assert_eq!(
        containers.len(),
        2,
        "no container may be lost or added: {after:#}"
    );
    let app = container(&after, "app");
    assert_eq!(
        env_of(app),
        pairs(&[("MODE", "prod"), ("LEVEL", "debug")]),
        "LEVEL changed and OBSOLETE removed, MODE kept: {after:#}"
    );
    assert_eq!(app["image"], "nginx:1.27", "{after:#}");
    assert_eq!(app["ports"][0]["containerPort"], 8080, "{after:#}");
    let sidecar = container(&after, "sidecar");
    assert_eq!(sidecar["image"], "busybox:1.36", "{after:#}");
    assert_eq!(sidecar["args"], serde_json::json!(["sleep", "infinity"]));
    let sidecar_env = env_of(sidecar);
    assert!(
        sidecar_env.contains(&("SIDE".into(), "car".into()))
            && sidecar_env.contains(&("LIVE".into(), "kept".into())),
        "the sidecar keeps its env, including the live-only LIVE: {after:#}"
    );
    let text = after.to_string();
    for directive in [
        "$setElementOrder",
        "$patch",
        "$retainKeys",
        "$deleteFromPrimitiveList",
    ] {
        assert!(
            !text.contains(directive),
            "patch directive {directive} stored: {after:#}"
        );
    }
    assert_eq!(
        after["metadata"]["generation"].as_i64(),
        before["metadata"]["generation"].as_i64().map(|g| g + 1),
        "a spec change bumps the generation by one"
    );
    assert!(
        common::resource_version(&after) > common::resource_version(&before),
        "resourceVersion must increase"
    );
}

#[test]
fn get_prints_a_table_and_json_and_yaml() {
    let env = Env::start();
    let manifest = write_manifest(&env, "app.yaml", APP_V1);
    env.ok(&["apply", "-f", &manifest]);

    let table = env.ok(&["get", "configmaps"]);
    let header = table.lines().next().unwrap_or_default();
    let columns: Vec<&str> = header.split_whitespace().collect();
    assert_eq!(columns.first(), Some(&"NAME"), "table header: {table}");
    assert!(columns.contains(&"AGE"), "table header: {table}");
    assert!(
        table
            .lines()
            .any(|l| l.split_whitespace().next() == Some("app-config")),
        "{table}"
    );

    // Several kinds at once: rows are prefixed with the kind.
    let mixed = env.ok(&["get", "configmaps,deployments,services"]);
    for row in ["configmap/app-config", "deployment.apps/web", "service/app"] {
        assert!(mixed.contains(row), "missing {row:?} in:\n{mixed}");
    }

    let one = env.get_json(&["configmap", "app-config"]);
    assert_eq!(one["kind"], "ConfigMap");
    assert_eq!(one["apiVersion"], "v1");
    assert_eq!(one["metadata"]["name"], "app-config");
    assert_eq!(one["data"]["mode"], "prod");

    let list = env.get_json(&["configmaps", "-l", "app=web"]);
    assert_eq!(list["kind"], "List", "{list:#}");
    let names: Vec<&str> = list["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|i| i["metadata"]["name"].as_str())
        .collect();
    assert_eq!(names, ["app-config"], "label selector: {list:#}");

    let yaml = env.ok(&["get", "configmap", "app-config", "-o", "yaml"]);
    for line in [
        "apiVersion: v1",
        "kind: ConfigMap",
        "  name: app-config",
        "  namespace: default",
        "  mode: prod",
    ] {
        assert!(
            yaml.lines().any(|l| l == line),
            "missing line {line:?} in:\n{yaml}"
        );
    }

    let name = env.ok(&["get", "deployments", "-o", "name"]);
    assert_eq!(name.trim(), "deployment.apps/web");

    let jsonpath = env.ok(&[
        "get",
        "deployment",
        "web",
        "-o",
        "jsonpath={.spec.template.spec.containers[*].name}",
    ]);
    assert_eq!(jsonpath.trim(), "app sidecar");
}

#[test]
fn get_watch_prints_objects_created_modified_and_deleted_meanwhile() {
    let env = Env::start();
    apply_configmap(&env, "before-watch");
    let watch = env
        .kubectl
        .spawn(&["get", "configmaps", "--watch", "--output-watch-events"])
        .expect("start kubectl get -w");
    // The initial list arrives as ADDED events.
    watch
        .wait_for(Duration::from_secs(30), "the initial list", |out| {
            out.lines()
                .any(|l| l.starts_with("ADDED") && l.contains("before-watch"))
        })
        .unwrap_or_else(|e| panic!("{e:#}{}", env.log()));

    apply_configmap(&env, "watched");
    env.ok(&["label", "configmap", "watched", "stage=two"]);
    env.ok(&["delete", "configmap", "watched"]);

    let events = |out: &str| -> Vec<(String, String)> {
        out.lines()
            .filter_map(|l| {
                let mut words = l.split_whitespace();
                Some((words.next()?.to_string(), words.next()?.to_string()))
            })
            .filter(|(_, name)| name == "watched")
            .collect()
    };
    let out = watch
        .wait_for(Duration::from_secs(30), "ADDED, MODIFIED, DELETED", |out| {
            events(out).iter().any(|(e, _)| e == "DELETED")
        })
        .unwrap_or_else(|e| panic!("{e:#}{}", env.log()));
    let kinds: Vec<String> = events(&out).into_iter().map(|(e, _)| e).collect();
    assert_eq!(
        kinds,
        ["ADDED", "MODIFIED", "DELETED"],
        "events for `watched` in order:\n{out}"
    );
    assert!(
        !out.contains("error"),
        "the watch reported an error:\n{out}"
    );
}

#[test]
fn get_watch_with_request_timeout_ends_by_itself() {
    let env = Env::start();
    apply_configmap(&env, "seen");
    let mut watch = env
        .kubectl
        .spawn(&["get", "configmaps", "-w", "--request-timeout=3s"])
        .expect("start kubectl get -w");
    watch
        .wait_for(Duration::from_secs(30), "the initial list", |out| {
            out.contains("seen")
        })
        .unwrap_or_else(|e| panic!("{e:#}{}", env.log()));
    apply_configmap(&env, "seen-too");
    let status = watch.wait_exit(Duration::from_secs(30));
    let out = watch.kill();
    assert!(
        status.is_some(),
        "kubectl get -w --request-timeout=3s is still running after 30 s:\n{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.split_whitespace().next() == Some("seen-too")),
        "the watch must print the object created meanwhile:\n{out}"
    );
}

#[test]
fn label_and_annotate_add_overwrite_and_remove_metadata() {
    let env = Env::start();
    apply_configmap(&env, "meta");

    let out = env.ok(&["label", "configmap", "meta", "color=blue", "tier=web"]);
    assert!(out.contains("configmap/meta labeled"), "{out}");
    let out = env.ok(&["annotate", "configmap", "meta", "note=hello world"]);
    assert!(out.contains("configmap/meta annotated"), "{out}");
    let cm = env.get_json(&["configmap", "meta"]);
    assert_eq!(cm["metadata"]["labels"]["color"], "blue", "{cm:#}");
    assert_eq!(cm["metadata"]["labels"]["tier"], "web", "{cm:#}");
    assert_eq!(
        cm["metadata"]["annotations"]["note"], "hello world",
        "{cm:#}"
    );

    // Selectors see the new labels.
    let selected = env.ok(&["get", "configmaps", "-l", "color=blue", "-o", "name"]);
    assert_eq!(selected.trim(), "configmap/meta");

    // An existing label is only replaced with --overwrite.
    let refused = env.run(&["label", "configmap", "meta", "color=red"]);
    assert_ne!(refused.code, Some(0), "{}", refused.describe());
    assert!(
        refused.stderr.contains("already has a value"),
        "{}",
        refused.describe()
    );
    env.ok(&["label", "configmap", "meta", "color=red", "--overwrite"]);
    let cm = env.get_json(&["configmap", "meta"]);
    assert_eq!(cm["metadata"]["labels"]["color"], "red", "{cm:#}");

    // `key-` removes.
    env.ok(&["label", "configmap", "meta", "color-"]);
    env.ok(&["annotate", "configmap", "meta", "note-"]);
    let cm = env.get_json(&["configmap", "meta"]);
    let labels = cm["metadata"]["labels"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    assert!(!labels.contains_key("color"), "label not removed: {cm:#}");
    assert_eq!(labels.get("tier"), Some(&Value::from("web")), "{cm:#}");
    assert!(
        cm["metadata"]["annotations"].get("note").is_none(),
        "annotation not removed: {cm:#}"
    );
    assert_eq!(cm["data"]["key"], "value", "metadata edits keep the data");
    let none = env.ok(&["get", "configmaps", "-l", "color", "-o", "name"]);
    assert_eq!(none.trim(), "", "no object carries `color` any more");
}

#[test]
fn delete_removes_objects_by_name_and_by_manifest() {
    let env = Env::start();
    let manifest = write_manifest(&env, "app.yaml", APP_V1);
    env.ok(&["apply", "-f", &manifest]);
    apply_configmap(&env, "doomed");

    let out = env.ok(&["delete", "configmap", "doomed"]);
    assert!(out.contains(r#"configmap "doomed" deleted"#), "{out}");
    let gone = env.run(&["get", "configmap", "doomed"]);
    assert_eq!(gone.code, Some(1), "{}", gone.describe());
    assert!(gone.stderr.contains("NotFound"), "{}", gone.describe());

    let out = env.ok(&["delete", "-f", &manifest]);
    for line in [
        r#"configmap "app-config" deleted"#,
        r#"secret "app-secret" deleted"#,
        r#"service "app" deleted"#,
        r#"deployment.apps "web" deleted"#,
    ] {
        assert!(out.contains(line), "missing {line:?} in:\n{out}");
    }
    let left = env.ok(&[
        "get",
        "configmaps,secrets,services,deployments",
        "-o",
        "name",
    ]);
    assert_eq!(left.trim(), "", "everything from the manifest is gone");

    let again = env.run(&["delete", "configmap", "doomed"]);
    assert_eq!(again.code, Some(1), "{}", again.describe());
    assert!(again.stderr.contains("NotFound"), "{}", again.describe());
    let ignored = env.ok(&["delete", "configmap", "doomed", "--ignore-not-found"]);
    assert_eq!(ignored.trim(), "");
}

#[test]
fn wait_for_delete_returns_once_the_last_finalizer_is_removed() {
    let env = Env::start();
    env.ok_with_stdin(
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: guarded\n  finalizers:\n  - example.com/cleanup\ndata:\n  key: value\n",
    );

    let out = env.ok(&["delete", "configmap", "guarded", "--wait=false"]);
    assert!(out.contains(r#"configmap "guarded" deleted"#), "{out}");

    // Still there, terminating.
    let cm = env.get_json(&["configmap", "guarded"]);
    assert!(
        cm["metadata"]["deletionTimestamp"].is_string(),
        "a deleted object with a finalizer keeps existing with a deletionTimestamp: {cm:#}"
    );
    assert_eq!(
        cm["metadata"]["finalizers"],
        serde_json::json!(["example.com/cleanup"])
    );
    let table = env.ok(&["get", "configmaps"]);
    assert!(table.contains("guarded"), "{table}");

    // While the finalizer is there, waiting times out.
    let early = env.run(&["wait", "--for=delete", "configmap/guarded", "--timeout=1s"]);
    assert_ne!(early.code, Some(0), "{}", early.describe());

    // A waiter started before the finalizer goes must see the deletion through its watch.
    let mut waiter = env
        .kubectl
        .spawn(&[
            "wait",
            "--for=delete",
            "configmap/guarded",
            "--timeout=60s",
            "-v=6",
        ])
        .expect("start kubectl wait");
    waiter
        .wait_for(
            Duration::from_secs(20),
            "its watch request",
            kubectl_watch_opened,
        )
        .unwrap_or_else(|e| panic!("{e:#}{}", env.log()));
    assert!(
        waiter.wait_exit(Duration::ZERO).is_none(),
        "kubectl wait returned while the finalizer is still there: {}",
        waiter.output()
    );

    // The manual escape hatch: remove the finalizer with a JSON patch.
    let out = env.ok(&[
        "patch",
        "configmap",
        "guarded",
        "--type",
        "json",
        "-p",
        r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
    ]);
    assert!(out.contains("configmap/guarded patched"), "{out}");

    let status = waiter.wait_exit(Duration::from_secs(30));
    let output = waiter.kill();
    let status = status.unwrap_or_else(|| {
        panic!(
            "kubectl wait did not return within 30 s of the finalizer's removal:\n{output}{}",
            env.log()
        )
    });
    assert!(
        status.success(),
        "kubectl wait failed ({status}):\n{output}"
    );

    // And a fresh `wait` on the now absent object returns 0 at once.
    env.ok(&["wait", "--for=delete", "configmap/guarded", "--timeout=10s"]);
    let gone = env.run(&["get", "configmap", "guarded"]);
    assert_eq!(gone.code, Some(1), "{}", gone.describe());
    assert!(gone.stderr.contains("NotFound"), "{}", gone.describe());
}

#[test]
fn api_resources_lists_the_served_kinds() {
    let env = Env::start();
    let out = env.ok(&["api-resources"]);
    let header: Vec<&str> = out
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        ["NAME", "SHORTNAMES", "APIVERSION", "NAMESPACED", "KIND"],
        "{out}"
    );
    let rows: Vec<Vec<&str>> = out
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    let row = |name: &str, api_version: &str| -> Vec<&str> {
        rows.iter()
            .find(|r| r.first() == Some(&name) && r.contains(&api_version))
            .cloned()
            .unwrap_or_else(|| panic!("api-resources lacks {name} {api_version}:\n{out}"))
    };
    assert_eq!(
        row("configmaps", "v1"),
        ["configmaps", "cm", "v1", "true", "ConfigMap"]
    );
    assert_eq!(
        row("namespaces", "v1"),
        ["namespaces", "ns", "v1", "false", "Namespace"]
    );
    assert_eq!(
        row("deployments", "apps/v1"),
        ["deployments", "deploy", "apps/v1", "true", "Deployment"]
    );
    assert_eq!(
        row("leases", "coordination.k8s.io/v1"),
        ["leases", "coordination.k8s.io/v1", "true", "Lease"]
    );
    for (name, api_version) in [
        ("secrets", "v1"),
        ("services", "v1"),
        ("serviceaccounts", "v1"),
        ("pods", "v1"),
        ("events", "v1"),
    ] {
        row(name, api_version);
    }

    let namespaced = env.ok(&["api-resources", "--namespaced=false", "-o", "name"]);
    assert!(
        namespaced.lines().any(|l| l == "namespaces"),
        "{namespaced}"
    );
    assert!(
        !namespaced.lines().any(|l| l == "configmaps"),
        "{namespaced}"
    );
}

#[test]
fn get_raw_reaches_version_and_collection_paths() {
    let env = Env::start();
    let version: Value =
        serde_json::from_str(&env.ok(&["get", "--raw", "/version"])).expect("/version JSON");
    assert_eq!(version["major"], "1", "{version}");
    assert_eq!(version["minor"], "33", "{version}");
    assert_eq!(version["gitVersion"], "v1.33.0", "{version}");

    apply_configmap(&env, "raw");
    let list: Value =
        serde_json::from_str(&env.ok(&["get", "--raw", "/api/v1/namespaces/default/configmaps"]))
            .expect("list JSON");
    assert_eq!(list["kind"], "ConfigMapList", "{list}");
    assert_eq!(list["apiVersion"], "v1", "{list}");
    assert!(
        list["metadata"]["resourceVersion"]
            .as_str()
            .is_some_and(|rv| rv.parse::<u64>().is_ok()),
        "a list carries the current resourceVersion: {list}"
    );
    let items = list["items"].as_array().expect("items");
    assert!(
        items.iter().any(|i| i["metadata"]["name"] == "raw"),
        "{list}"
    );

    let empty: Value = serde_json::from_str(&env.ok(&[
        "get",
        "--raw",
        "/api/v1/namespaces/kube-public/configmaps",
    ]))
    .expect("list JSON");
    assert_eq!(
        empty["items"],
        serde_json::json!([]),
        "an empty list still has items: {empty}"
    );

    let missing = env.run(&["get", "--raw", "/api/v1/namespaces/default/configmaps/nope"]);
    assert_ne!(missing.code, Some(0), "{}", missing.describe());
    assert!(
        missing.stderr.contains("NotFound") || missing.stderr.contains("not found"),
        "{}",
        missing.describe()
    );
}

#[test]
fn create_with_generate_name_picks_distinct_random_names() {
    let env = Env::start();
    let manifest =
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  generateName: gen-\ndata:\n  key: value\n";
    let mut names = Vec::new();
    for _ in 0..2 {
        let out = env.ok_with_stdin(&["create", "-f", "-", "-o", "name"], manifest);
        let name = out
            .trim()
            .strip_prefix("configmap/")
            .unwrap_or_else(|| panic!("unexpected output {out:?}"))
            .to_string();
        let suffix = name
            .strip_prefix("gen-")
            .unwrap_or_else(|| panic!("{name} lacks the prefix"));
        assert_eq!(suffix.len(), 5, "a 5-character suffix: {name}");
        assert!(
            suffix
                .chars()
                .all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c)),
            "upstream's suffix alphabet: {name}"
        );
        let cm = env.get_json(&["configmap", &name]);
        assert_eq!(cm["metadata"]["generateName"], "gen-", "{cm:#}");
        assert_eq!(cm["data"]["key"], "value");
        names.push(name);
    }
    assert_ne!(names[0], names[1]);
}

#[test]
fn get_namespaces_shows_the_four_system_namespaces() {
    let env = Env::start();
    let out = env.ok(&["get", "namespaces"]);
    let header: Vec<&str> = out
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(header.first(), Some(&"NAME"), "{out}");
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        let row: Vec<&str> = out
            .lines()
            .find(|l| l.split_whitespace().next() == Some(ns))
            .unwrap_or_else(|| panic!("namespace {ns} missing:\n{out}"))
            .split_whitespace()
            .collect();
        assert!(row.contains(&"Active"), "{ns} is Active:\n{out}");
        let json = env.get_json(&["namespace", ns]);
        assert_eq!(
            json["metadata"]["labels"]["kubernetes.io/metadata.name"], ns,
            "{json:#}"
        );
    }
    // Namespaces are cluster-scoped: no namespace on the objects.
    let json = env.get_json(&["namespace", "default"]);
    assert!(json["metadata"].get("namespace").is_none(), "{json:#}");
}

#[test]
fn explain_describes_kinds_and_refuses_fields_they_lack() {
    let env = Env::start();
    let kind = env.ok(&["explain", "configmaps"]);
    assert!(kind.contains("KIND:       ConfigMap"), "{kind}");
    assert!(kind.contains("data\t<map[string]string>"), "{kind}");

    let out = env.run(&["explain", "configmaps.nosuchfield"]);
    assert_ne!(out.code, Some(0), "{}", out.describe());
    assert!(
        out.code.is_some(),
        "kubectl died of a signal: {}",
        out.describe()
    );
    assert!(
        out.stderr.contains("nosuchfield"),
        "the error names the field: {}",
        out.describe()
    );
    for crash in ["panic", "goroutine", "SIGSEGV"] {
        assert!(
            !out.stderr.contains(crash),
            "kubectl crashed: {}",
            out.describe()
        );
    }
    // The server is unharmed.
    env.ok(&["get", "namespaces"]);
    let log = env.server.log();
    assert!(
        !log.contains("panicked"),
        "the server panicked:{}",
        env.log()
    );
}

#[test]
fn get_of_a_missing_object_exits_1_with_not_found() {
    let env = Env::start();
    let out = env.run(&["get", "configmap", "does-not-exist"]);
    assert_eq!(out.code, Some(1), "{}", out.describe());
    assert!(
        out.stderr
            .contains(r#"Error from server (NotFound): configmaps "does-not-exist" not found"#),
        "{}",
        out.describe()
    );
    assert_eq!(out.stdout, "", "{}", out.describe());

    let in_missing_ns = env.run(&["get", "configmaps", "-n", "no-such-namespace", "-o", "json"]);
    // Listing in a namespace that does not exist is an empty list upstream.
    assert_eq!(in_missing_ns.code, Some(0), "{}", in_missing_ns.describe());

    let unknown_kind = env.run(&["get", "frobnicators"]);
    assert_eq!(unknown_kind.code, Some(1), "{}", unknown_kind.describe());
    assert!(
        unknown_kind
            .stderr
            .contains(r#"the server doesn't have a resource type "frobnicators""#),
        "{}",
        unknown_kind.describe()
    );
}

#[test]
fn apply_of_an_invalid_name_reports_the_field() {
    let env = Env::start();
    let out = env.run_with_stdin(
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: Not_A_Valid_Name\ndata:\n  key: value\n",
    );
    assert_ne!(out.code, Some(0), "{}", out.describe());
    for part in [
        r#"The ConfigMap "Not_A_Valid_Name" is invalid"#,
        "metadata.name",
        r#"Invalid value: "Not_A_Valid_Name""#,
        "RFC 1123",
    ] {
        assert!(
            out.stderr.contains(part),
            "missing {part:?}: {}",
            out.describe()
        );
    }
    let names = env.ok(&["get", "configmaps", "-o", "name"]);
    assert_eq!(names.trim(), "", "nothing was stored");

    // A namespace that does not exist is a NotFound naming it.
    let out = env.run_with_stdin(
        &["apply", "-f", "-", "-n", "missing-ns"],
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: fine\ndata:\n  key: value\n",
    );
    assert_ne!(out.code, Some(0), "{}", out.describe());
    assert!(
        out.stderr.contains(r#"namespaces "missing-ns" not found"#),
        "{}",
        out.describe()
    );
}

#[test]
fn create_namespace_workaround_with_client_dry_run_and_apply_works() {
    let env = Env::start();
    let manifest = env.ok(&[
        "create",
        "namespace",
        "team-a",
        "--dry-run=client",
        "-o",
        "yaml",
    ]);
    assert!(manifest.contains("kind: Namespace"), "{manifest}");
    let out = env.ok_with_stdin(&["apply", "-f", "-"], &manifest);
    assert!(out.contains("namespace/team-a created"), "{out}");

    let ns = env.get_json(&["namespace", "team-a"]);
    assert_eq!(ns["status"]["phase"], "Active", "{ns:#}");
    assert_eq!(
        ns["metadata"]["labels"]["kubernetes.io/metadata.name"],
        "team-a"
    );
    // The same workaround for a ConfigMap, then the namespace is usable.
    let cm = env.ok(&[
        "create",
        "configmap",
        "settings",
        "-n",
        "team-a",
        "--from-literal=color=blue",
        "--dry-run=client",
        "-o",
        "yaml",
    ]);
    env.ok_with_stdin(&["apply", "-f", "-"], &cm);
    let stored = env.get_json(&["configmap", "settings", "-n", "team-a"]);
    assert_eq!(stored["data"]["color"], "blue", "{stored:#}");
    assert!(
        eventually(Duration::from_secs(5), || {
            env.ok(&["get", "namespaces", "-o", "name"])
                .contains("namespace/team-a")
                .then_some(())
        })
        .is_some()
    );
}

#[test]
fn apply_of_a_secret_with_string_data_stores_it_base64_encoded_in_data() {
    // Upstream merges `stringData` into `data` (base64) on every write and never stores
    // `stringData`; manifests rely on it.
    let env = Env::start();
    let secret = |password: &str| {
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: creds\nstringData:\n  password: {password}\ndata:\n  user: YWRtaW4=\n"
        )
    };
    env.ok_with_stdin(&["apply", "-f", "-"], &secret("hunter2"));
    let stored = env.get_json(&["secret", "creds"]);
    assert_eq!(
        stored["data"],
        serde_json::json!({"user": "YWRtaW4=", "password": "aHVudGVyMg=="}),
        "stringData merged into data, base64-encoded: {stored:#}"
    );
    assert!(
        stored.get("stringData").is_none(),
        "stringData is write-only: {stored:#}"
    );
    let table = env.ok(&["get", "secret", "creds"]);
    let row: Vec<&str> = table
        .lines()
        .nth(1)
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(row.get(2), Some(&"2"), "DATA counts both keys:\n{table}");

    // Changing stringData on a re-apply updates data.
    env.ok_with_stdin(&["apply", "-f", "-"], &secret("s3cret"));
    let stored = env.get_json(&["secret", "creds"]);
    assert_eq!(stored["data"]["password"], "czNjcmV0", "{stored:#}");
}
