//! kubectl end to end on the operator-grade API (issue 3): CRDs with printer columns and
//! scale, the `create` generators (protobuf bodies), server-side apply with conflicts, every
//! `patch --type`, `diff`, `--dry-run=server`, `scale`, `edit` and table output.

mod common;

use std::time::Duration;

use common::Env;
use serde_json::json;

/// A namespaced CRD with a status and a scale subresource and printer columns, as an operator
/// manifest writes it (no listKind, no singular: the server defaults them).
const WIDGET_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names:
    kind: Widget
    plural: widgets
    shortNames: [wd]
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
      scale:
        specReplicasPath: .spec.replicas
        statusReplicasPath: .status.replicas
    additionalPrinterColumns:
    - name: Replicas
      type: integer
      jsonPath: .spec.replicas
    - name: Color
      type: string
      jsonPath: .spec.color
    - name: Age
      type: date
      jsonPath: .metadata.creationTimestamp
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              replicas:
                type: integer
                minimum: 0
              color:
                type: string
                default: blue
          status:
            type: object
            properties:
              replicas:
                type: integer
"#;

fn install_widgets(env: &Env) {
    let out = env.ok_with_stdin(&["apply", "-f", "-"], WIDGET_CRD);
    assert!(out.contains("widgets.example.com created"), "{out}");
    env.ok(&[
        "wait",
        "--for=condition=Established",
        "crd/widgets.example.com",
        "--timeout=20s",
    ]);
}

fn widget(name: &str, replicas: i64) -> String {
    format!(
        "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: {name}\nspec:\n  replicas: {replicas}\n"
    )
}

/// The header and rows of a `kubectl get` table, split on runs of spaces.
fn table(out: &str) -> Vec<Vec<String>> {
    out.lines()
        .map(|line| {
            line.split("  ")
                .map(str::trim)
                .filter(|cell| !cell.is_empty())
                .map(str::to_string)
                .collect()
        })
        .collect()
}

#[test]
fn custom_resources_work_through_kubectl_with_printer_columns() {
    let env = Env::start();
    install_widgets(&env);
    let out = env.ok_with_stdin(&["apply", "-f", "-"], &widget("w1", 2));
    assert!(out.contains("widget.example.com/w1 created"), "{out}");

    // Defaulting from the schema; the printer columns, by short name too.
    let stored = env.get_json(&["widget", "w1"]);
    assert_eq!(stored["spec"]["color"], "blue", "{stored:#}");
    let rows = table(&env.ok(&["get", "wd"]));
    assert_eq!(rows[0], ["NAME", "REPLICAS", "COLOR", "AGE"], "{rows:?}");
    assert_eq!(rows[1][..3], ["w1", "2", "blue"], "{rows:?}");
    assert!(
        rows[1][3].ends_with('s') || rows[1][3].ends_with('m'),
        "a humanised age, not a timestamp: {rows:?}"
    );

    // A schema violation is refused with the field named, nothing stored.
    let bad = env.run_with_stdin(&["apply", "-f", "-"], &widget("w2", -1));
    assert_eq!(bad.code, Some(1), "{}", bad.describe());
    assert!(bad.stderr.contains("spec.replicas"), "{}", bad.describe());
    assert_eq!(env.run(&["get", "widget", "w2"]).code, Some(1));

    // kubectl's default strategic patch on a custom resource is taken as a merge patch.
    env.ok(&["patch", "widget", "w1", "-p", r#"{"spec":{"color":"red"}}"#]);
    assert_eq!(env.get_json(&["widget", "w1"])["spec"]["color"], "red");

    // scale goes through the scale subresource.
    let out = env.ok(&["scale", "widget", "w1", "--replicas=5"]);
    assert!(out.contains("scaled"), "{out}");
    assert_eq!(env.get_json(&["widget", "w1"])["spec"]["replicas"], 5);
}

#[test]
fn patch_accepts_every_type() {
    let env = Env::start();
    env.ok(&[
        "create",
        "configmap",
        "settings",
        "--from-literal=color=blue",
        "--from-literal=size=m",
    ]);
    env.ok(&[
        "patch",
        "configmap",
        "settings",
        "--type=strategic",
        "-p",
        r#"{"data":{"color":"green"}}"#,
    ]);
    env.ok(&[
        "patch",
        "configmap",
        "settings",
        "--type=merge",
        "-p",
        r#"{"data":{"size":null,"shape":"round"}}"#,
    ]);
    env.ok(&[
        "patch",
        "configmap",
        "settings",
        "--type=json",
        "-p",
        r#"[{"op":"test","path":"/data/color","value":"green"},{"op":"replace","path":"/data/color","value":"teal"}]"#,
    ]);
    let stored = env.get_json(&["configmap", "settings"]);
    assert_eq!(
        stored["data"],
        json!({"color": "teal", "shape": "round"}),
        "{stored:#}"
    );

    // A failed test changes nothing and says why.
    let failed = env.run(&[
        "patch",
        "configmap",
        "settings",
        "--type=json",
        "-p",
        r#"[{"op":"test","path":"/data/color","value":"blue"},{"op":"remove","path":"/data/color"}]"#,
    ]);
    assert_eq!(failed.code, Some(1), "{}", failed.describe());
    assert!(
        failed.stderr.contains("Invalid") || failed.stderr.contains("test"),
        "{}",
        failed.describe()
    );
    assert_eq!(
        env.get_json(&["configmap", "settings"])["data"]["color"],
        "teal"
    );
}

#[test]
fn diff_and_server_dry_run_store_nothing() {
    let env = Env::start();
    let v1 = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata:\n  mode: prod\n";
    env.ok_with_stdin(&["apply", "-f", "-"], v1);
    let before = env.get_json(&["configmap", "app"]);

    // diff exits 1 when there are differences and prints them.
    let v2 = v1.replace("mode: prod", "mode: debug");
    let diff = env.run_with_stdin(&["diff", "-f", "-"], &v2);
    assert_eq!(diff.code, Some(1), "{}", diff.describe());
    assert!(diff.stdout.contains("-  mode: prod"), "{}", diff.describe());
    assert!(
        diff.stdout.contains("+  mode: debug"),
        "{}",
        diff.describe()
    );
    let same = env.run_with_stdin(&["diff", "-f", "-"], v1);
    assert_eq!(same.code, Some(0), "{}", same.describe());

    let out = env.ok_with_stdin(&["apply", "--dry-run=server", "-f", "-"], &v2);
    assert!(out.contains("(server dry run)"), "{out}");
    let out = env.ok(&[
        "create",
        "configmap",
        "ghost",
        "--from-literal=a=b",
        "--dry-run=server",
    ]);
    assert!(out.contains("(server dry run)"), "{out}");
    assert_eq!(env.run(&["get", "configmap", "ghost"]).code, Some(1));
    let after = env.get_json(&["configmap", "app"]);
    assert_eq!(after, before, "dry runs changed nothing");
}

#[test]
fn scale_and_edit_change_a_deployment() {
    let env = Env::start();
    env.ok(&[
        "create",
        "deployment",
        "web",
        "--image=nginx:1.27",
        "--replicas=2",
    ]);
    let out = env.ok(&["scale", "deployment", "web", "--replicas=4"]);
    assert!(out.contains("deployment.apps/web scaled"), "{out}");
    let stored = env.get_json(&["deployment", "web"]);
    assert_eq!(stored["spec"]["replicas"], 4, "{stored:#}");
    assert_eq!(stored["metadata"]["generation"], 2, "{stored:#}");

    // edit with a scripted editor: kubectl sends the change as a strategic merge patch.
    let script = env.dir.path().join("editor.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\nsed -i 's/nginx:1.27/nginx:1.28/' \"$1\"\n",
    )
    .expect("write the editor script");
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("make it executable");
    let output = env
        .kubectl
        .command(&["edit", "deployment", "web"])
        .env("KUBE_EDITOR", &script)
        .output()
        .expect("run kubectl edit");
    assert!(
        output.status.success(),
        "kubectl edit: {}{}",
        String::from_utf8_lossy(&output.stderr),
        env.log()
    );
    let stored = env.get_json(&["deployment", "web"]);
    assert_eq!(
        stored["spec"]["template"]["spec"]["containers"][0]["image"], "nginx:1.28",
        "{stored:#}"
    );
    assert_eq!(
        stored["spec"]["replicas"], 4,
        "edit kept the scale: {stored:#}"
    );
}

#[test]
fn get_prints_the_columns_users_expect() {
    let env = Env::start();
    env.ok(&[
        "create",
        "deployment",
        "web",
        "--image=nginx:1.27",
        "--replicas=3",
    ]);
    env.ok(&["create", "service", "clusterip", "web", "--tcp=80:8080"]);
    env.ok_with_stdin(
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p1\nspec:\n  containers:\n  - name: a\n    image: busybox\n  - name: b\n    image: busybox\n",
    );
    let rows = table(&env.ok(&["get", "pods"]));
    assert_eq!(
        rows[0],
        ["NAME", "READY", "STATUS", "RESTARTS", "AGE"],
        "{rows:?}"
    );
    assert_eq!(rows[1][..4], ["p1", "0/2", "Pending", "0"], "{rows:?}");
    let wide = table(&env.ok(&["get", "pods", "-o", "wide"]));
    assert_eq!(
        wide[0],
        [
            "NAME",
            "READY",
            "STATUS",
            "RESTARTS",
            "AGE",
            "IP",
            "NODE",
            "NOMINATED NODE",
            "READINESS GATES"
        ],
        "{wide:?}"
    );
    let rows = table(&env.ok(&["get", "deployments"]));
    assert_eq!(
        rows[0],
        ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"],
        "{rows:?}"
    );
    assert_eq!(rows[1][..4], ["web", "0/3", "0", "0"], "{rows:?}");
    let rows = table(&env.ok(&["get", "services"]));
    assert_eq!(
        rows[0],
        [
            "NAME",
            "TYPE",
            "CLUSTER-IP",
            "EXTERNAL-IP",
            "PORT(S)",
            "AGE"
        ],
        "{rows:?}"
    );
    assert_eq!(rows[1][0], "web");
    assert_eq!(rows[1][1], "ClusterIP");
    assert_eq!(rows[1][4], "80/TCP", "{rows:?}");
    let rows = table(&env.ok(&["get", "namespaces"]));
    assert_eq!(rows[0], ["NAME", "STATUS", "AGE"], "{rows:?}");
    // -A adds the namespace from each row's object metadata; --show-labels its labels.
    let rows = table(&env.ok(&["get", "deployments", "-A", "--show-labels"]));
    assert_eq!(rows[0][0], "NAMESPACE", "{rows:?}");
    assert_eq!(
        rows[0].last().map(String::as_str),
        Some("LABELS"),
        "{rows:?}"
    );
    assert_eq!(rows[1][..2], ["default", "web"], "{rows:?}");
    assert_eq!(
        rows[1].last().map(String::as_str),
        Some("app=web"),
        "{rows:?}"
    );
}

#[test]
fn create_generators_send_protobuf_that_the_server_decodes() {
    let env = Env::start();
    let out = env.ok(&["create", "namespace", "team1"]);
    assert!(out.contains("namespace/team1 created"), "{out}");
    env.ok(&[
        "create",
        "configmap",
        "settings",
        "-n",
        "team1",
        "--from-literal=color=blue",
    ]);
    env.ok(&[
        "create",
        "secret",
        "generic",
        "creds",
        "-n",
        "team1",
        "--from-literal=password=hunter2",
    ]);
    env.ok(&["create", "serviceaccount", "robot", "-n", "team1"]);
    env.ok(&[
        "create",
        "deployment",
        "web",
        "-n",
        "team1",
        "--image=nginx:1.27",
        "--port=80",
        "--replicas=3",
    ]);
    env.ok(&[
        "create",
        "service",
        "clusterip",
        "web",
        "-n",
        "team1",
        "--tcp=80:8080",
    ]);
    env.ok(&[
        "create",
        "job",
        "once",
        "-n",
        "team1",
        "--image=busybox",
        "--",
        "echo",
        "hi",
    ]);

    let ns = env.get_json(&["namespace", "team1"]);
    assert_eq!(ns["status"]["phase"], "Active", "{ns:#}");
    let cm = env.get_json(&["configmap", "settings", "-n", "team1"]);
    assert_eq!(cm["data"], json!({"color": "blue"}), "{cm:#}");
    let secret = env.get_json(&["secret", "creds", "-n", "team1"]);
    assert_eq!(secret["data"]["password"], "aHVudGVyMg==", "{secret:#}");
    assert_eq!(secret["type"], "Opaque");
    env.get_json(&["serviceaccount", "robot", "-n", "team1"]);
    let deployment = env.get_json(&["deployment", "web", "-n", "team1"]);
    assert_eq!(deployment["spec"]["replicas"], 3, "{deployment:#}");
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], "nginx:1.27", "{deployment:#}");
    assert_eq!(container["ports"][0]["containerPort"], 80, "{deployment:#}");
    assert_eq!(
        deployment["spec"]["selector"]["matchLabels"]["app"], "web",
        "{deployment:#}"
    );
    let service = env.get_json(&["service", "web", "-n", "team1"]);
    assert_eq!(service["spec"]["ports"][0]["port"], 80, "{service:#}");
    assert_eq!(
        service["spec"]["ports"][0]["targetPort"], 8080,
        "{service:#}"
    );
    let job = env.get_json(&["job", "once", "-n", "team1"]);
    assert_eq!(
        job["spec"]["template"]["spec"]["containers"][0]["command"],
        json!(["echo", "hi"]),
        "{job:#}"
    );
}

/// The generators of the kinds added with the whole 1.33 API send protobuf too: each object
/// is stored as `kubectl create … --dry-run=client -o json` prints it.
#[test]
fn newer_create_generators_send_protobuf_that_the_server_decodes() {
    let env = Env::start();
    env.ok(&["create", "namespace", "team2"]);
    env.ok(&[
        "create",
        "cronjob",
        "nightly",
        "-n",
        "team2",
        "--image=busybox",
        "--schedule=*/5 * * * *",
        "--",
        "echo",
        "hi",
    ]);
    env.ok(&[
        "create",
        "ingress",
        "web",
        "-n",
        "team2",
        "--class=nginx",
        "--rule=foo.com/bar=svc1:8080,tls=my-cert",
    ]);
    env.ok(&[
        "create",
        "quota",
        "limits",
        "-n",
        "team2",
        "--hard=cpu=1,memory=1G,pods=2",
    ]);
    env.ok(&[
        "create",
        "priorityclass",
        "high",
        "--value=1000",
        "--description=high priority",
        "--preemption-policy=Never",
    ]);
    env.ok(&[
        "create",
        "poddisruptionbudget",
        "rails",
        "-n",
        "team2",
        "--selector=app=rails",
        "--min-available=50%",
    ]);

    let cronjob = env.get_json(&["cronjob", "nightly", "-n", "team2"]);
    assert_eq!(cronjob["spec"]["schedule"], "*/5 * * * *", "{cronjob:#}");
    let job = &cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"];
    assert_eq!(
        job["containers"][0]["command"],
        json!(["echo", "hi"]),
        "{cronjob:#}"
    );
    assert_eq!(job["restartPolicy"], "OnFailure", "{cronjob:#}");
    let ingress = env.get_json(&["ingress", "web", "-n", "team2"]);
    assert_eq!(
        ingress["spec"],
        json!({"ingressClassName": "nginx",
               "tls": [{"hosts": ["foo.com"], "secretName": "my-cert"}],
               "rules": [{"host": "foo.com", "http": {"paths": [{
                   "path": "/bar", "pathType": "Exact",
                   "backend": {"service": {"name": "svc1", "port": {"number": 8080}}}}]}}]}),
        "{ingress:#}"
    );
    let quota = env.get_json(&["resourcequota", "limits", "-n", "team2"]);
    assert_eq!(
        quota["spec"]["hard"],
        json!({"cpu": "1", "memory": "1G", "pods": "2"}),
        "{quota:#}"
    );
    let class = env.get_json(&["priorityclass", "high"]);
    assert_eq!(class["value"], 1000, "{class:#}");
    assert_eq!(class["description"], "high priority", "{class:#}");
    assert_eq!(class["preemptionPolicy"], "Never", "{class:#}");
    let budget = env.get_json(&["poddisruptionbudget", "rails", "-n", "team2"]);
    assert_eq!(
        budget["spec"],
        json!({"minAvailable": "50%", "selector": {"matchLabels": {"app": "rails"}}}),
        "{budget:#}"
    );

    // `kubectl autoscale` sends an autoscaling/v1 HorizontalPodAutoscaler in protobuf, and
    // `kubectl get` prints it with upstream's columns.
    env.ok(&[
        "create",
        "deployment",
        "rails",
        "-n",
        "team2",
        "--image=nginx",
    ]);
    let out = env.ok(&[
        "autoscale",
        "deployment",
        "rails",
        "-n",
        "team2",
        "--min=2",
        "--max=5",
        "--cpu-percent=80",
    ]);
    assert!(out.contains("autoscaled"), "{out}");
    let autoscaler = env.get_json(&[
        "horizontalpodautoscalers.v1.autoscaling",
        "rails",
        "-n",
        "team2",
    ]);
    assert_eq!(
        autoscaler["spec"],
        json!({"scaleTargetRef": {"kind": "Deployment", "name": "rails", "apiVersion": "apps/v1"},
               "minReplicas": 2, "maxReplicas": 5, "targetCPUUtilizationPercentage": 80}),
        "{autoscaler:#}"
    );
    let table = env.ok(&["get", "hpa", "rails", "-n", "team2"]);
    let header: Vec<&str> = table
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        [
            "NAME",
            "REFERENCE",
            "TARGETS",
            "MINPODS",
            "MAXPODS",
            "REPLICAS",
            "AGE"
        ],
        "{table}"
    );
    assert!(
        table.contains("Deployment/rails") && table.contains("cpu: <unknown>/80%"),
        "{table}"
    );
}

#[test]
fn server_side_apply_reports_conflicts_until_forced() {
    let env = Env::start();
    let manifest = |data: &str| {
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: shared\ndata:\n{data}")
    };
    let out = env.ok_with_stdin(
        &["apply", "--server-side", "-f", "-"],
        &manifest("  a: \"1\"\n  b: \"2\"\n"),
    );
    assert!(out.contains("configmap/shared serverside-applied"), "{out}");

    // Another manager setting a field kubectl owns, to another value: a conflict.
    let conflict = env.run_with_stdin(
        &["apply", "--server-side", "--field-manager=other", "-f", "-"],
        &manifest("  a: \"9\"\n"),
    );
    assert_eq!(conflict.code, Some(1), "{}", conflict.describe());
    assert!(
        conflict.stderr.contains("conflict with \"kubectl\"")
            && conflict.stderr.contains(".data.a")
            && conflict.stderr.contains("--force-conflicts"),
        "{}",
        conflict.describe()
    );
    assert_eq!(env.get_json(&["configmap", "shared"])["data"]["a"], "1");

    let out = env.ok_with_stdin(
        &[
            "apply",
            "--server-side",
            "--field-manager=other",
            "--force-conflicts",
            "-f",
            "-",
        ],
        &manifest("  a: \"9\"\n"),
    );
    assert!(out.contains("serverside-applied"), "{out}");
    let stored = env.get_json(&["configmap", "shared", "--show-managed-fields"]);
    assert_eq!(stored["data"], json!({"a": "9", "b": "2"}), "{stored:#}");
    let managers: Vec<&str> = stored["metadata"]["managedFields"]
        .as_array()
        .map(|entries| {
            entries
                .iter()
                .filter_map(|e| e["manager"].as_str())
                .collect()
        })
        .unwrap_or_default();
    assert!(
        managers.contains(&"other") && managers.contains(&"kubectl"),
        "{stored:#}"
    );

    // kubectl dropping `b` from its configuration removes it (it alone owns it).
    env.ok_with_stdin(
        &["apply", "--server-side", "-f", "-"],
        &manifest("  c: \"3\"\n"),
    );
    let stored = env.get_json(&["configmap", "shared"]);
    assert_eq!(stored["data"], json!({"a": "9", "c": "3"}), "{stored:#}");
}

/// kubectl's Table watch (`get -w`) of a custom resource prints rows with printer columns.
#[test]
fn watching_custom_resources_prints_printer_columns() {
    let env = Env::start();
    install_widgets(&env);
    env.ok_with_stdin(&["apply", "-f", "-"], &widget("w1", 1));
    let mut watch = env
        .kubectl
        .spawn(&["get", "widgets", "-w"])
        .expect("start kubectl get -w");
    env.ok(&["scale", "widget", "w1", "--replicas=3"]);
    let seen = watch.wait_for(Duration::from_secs(10), "a row with 3 replicas", |out| {
        out.lines()
            .any(|l| l.starts_with("w1") && l.split_whitespace().nth(1) == Some("3"))
    });
    let output = watch.kill();
    assert!(seen.is_ok(), "{seen:?}\n{output}");
}
