//! `finale tree`, `finale finalize` and the client-side fallback, end to end: the built
//! `finale` binary run as a child process against real `finale server`s (one with
//! `deletion.finale.dev` served, one with it switched off by `--runtime-config`).
//!
//! Every child run is bounded (60 s, then killed); every wait polls with a deadline.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Env, Run, finale};
use serde_json::Value;

const API_OFF: &str = "--runtime-config=deletion.finale.dev/v1alpha1=false";

/// `(since 3m ago)` → `(since <age>)`, so a golden text does not depend on the clock.
fn mask_ages(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("(since ") {
        out.push_str(&rest[..start]);
        let after = &rest[start..];
        let end = after.find(')').expect("closing parenthesis");
        out.push_str("(since <age>)");
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out
}

/// `text` without the "added by USER AGE ago" evidence lines.
fn without_provenance(text: &str) -> String {
    text.lines()
        .filter(|line| !line.trim_start_matches(['│', ' ']).starts_with("added by "))
        .map(|line| format!("{line}\n"))
        .collect()
}

fn configmap_yaml(name: &str, finalizer: Option<&str>, owner: Option<(&str, &str)>) -> String {
    let owners: Vec<(&str, &str, bool)> =
        owner.map(|(o, uid)| (o, uid, true)).into_iter().collect();
    format!(
        "{}data:\n  key: {name}\n",
        dependent_yaml("ConfigMap", name, &owners, finalizer)
    )
}

fn uid_of(env: &Env, args: &[&str]) -> String {
    env.get_json(args)["metadata"]["uid"]
        .as_str()
        .expect("uid")
        .to_string()
}

/// The tree of the tests: ConfigMap `app` owns `c-1`…`c-4` (identical leaves), `held`
/// (deleted, held by an unclaimed finalizer), `mid` (which owns `leaf`) and Secret `s`.
fn build_tree(env: &Env) {
    env.ok_with_stdin(&["apply", "-f", "-"], &configmap_yaml("app", None, None));
    let app = uid_of(env, &["configmap", "app"]);
    let mut documents = Vec::new();
    for name in ["c-1", "c-2", "c-3", "c-4", "mid"] {
        documents.push(configmap_yaml(name, None, Some(("app", &app))));
    }
    documents.push(configmap_yaml(
        "held",
        Some("example.com/hold"),
        Some(("app", &app)),
    ));
    documents.push(format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\n  namespace: default\n  ownerReferences:\n  - apiVersion: v1\n    kind: ConfigMap\n    name: app\n    uid: {app}\nstringData:\n  k: v\n"
    ));
    env.ok_with_stdin(&["apply", "-f", "-"], &documents.join("---\n"));
    let mid = uid_of(env, &["configmap", "mid"]);
    env.ok_with_stdin(
        &["apply", "-f", "-"],
        &configmap_yaml("leaf", None, Some(("mid", &mid))),
    );
    env.ok(&["delete", "configmap", "held", "--wait=false"]);
}

fn count_nodes(node: &Value) -> usize {
    1 + node["children"]
        .as_array()
        .map(|children| children.iter().map(count_nodes).sum())
        .unwrap_or(0)
}

/// Waits (bounded) until the server's tree of `app` holds all 9 objects: the collector
/// learns of dependents from its watch, so this is the precondition of every golden text.
fn wait_for_tree(env: &Env) {
    let deadline = Instant::now() + common::CLI_RUN_LIMIT;
    loop {
        let run = finale(env, &["tree", "cm/app", "-o", "json"]);
        if run.code == Some(0) {
            let status: Value = serde_json::from_str(&run.stdout)
                .unwrap_or_else(|e| panic!("not JSON ({e}): {}", run.describe()));
            if count_nodes(&status["root"]) == 9 {
                return;
            }
        }
        assert!(Instant::now() < deadline, "{}", run.describe());
        std::thread::sleep(Duration::from_millis(100));
    }
}

const TREE_GOLDEN: &str = "\
NAMESPACE  NAME                                DELETION
default    ConfigMap/app                       -
default    ├─ ConfigMap x4 (c-1, c-2, …, c-4)  -
default    ├─ ConfigMap/held                   Terminating (since <age>); finalizers: example.com/hold
default    ├─ ConfigMap/mid                    -
default    │  └─ ConfigMap/leaf                -
default    └─ Secret/s                         -
";

const TREE_UP_GOLDEN: &str = "\
NAMESPACE  NAME                 DELETION
default    ConfigMap/leaf       -
default    └─ ConfigMap/mid     -
default       └─ ConfigMap/app  -
";

/// The tree from the server: exact text with grouping, `--up`, `-o json`, `-o dot`.
#[test]
fn tree_is_drawn_grouped_up_and_as_json_and_dot() {
    let env = Env::start();
    build_tree(&env);
    wait_for_tree(&env);

    let run = finale(&env, &["tree", "cm/app", "--color=never"]);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert_eq!(mask_ages(&run.stdout), TREE_GOLDEN, "{}", run.describe());
    assert!(run.stderr.is_empty(), "{}", run.describe());

    let run = finale(&env, &["tree", "configmap", "leaf", "--up"]);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert_eq!(run.stdout, TREE_UP_GOLDEN, "{}", run.describe());

    // JSON: every node, ungrouped, with the edge flags and the deletion state.
    let run = finale(&env, &["tree", "cm/app", "-o", "json"]);
    let status: Value = serde_json::from_str(&run.stdout).expect("JSON");
    assert!(status.get("computedBy").is_none(), "{status:#}");
    let root = &status["root"];
    assert_eq!(root["object"]["name"], "app", "{status:#}");
    let children = root["children"].as_array().expect("children");
    let names: Vec<&str> = children
        .iter()
        .map(|c| c["object"]["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names, ["c-1", "c-2", "c-3", "c-4", "held", "mid", "s"]);
    let held = &children[4];
    assert!(held["deletionTimestamp"].is_string(), "{held:#}");
    assert_eq!(held["finalizers"], serde_json::json!(["example.com/hold"]));
    assert_eq!(held["blockOwnerDeletion"], true, "{held:#}");
    assert!(
        children[6].get("blockOwnerDeletion").is_none(),
        "{status:#}"
    );
    assert_eq!(children[5]["children"][0]["object"]["name"], "leaf");

    // dot: a digraph with one node per line of the table and edges from owner to dependent.
    let run = finale(&env, &["tree", "cm/app", "-o", "dot"]);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    let graph = graphviz_rust::parse(&run.stdout)
        .unwrap_or_else(|e| panic!("not DOT ({e}): {}", run.describe()));
    let graphviz_rust::dot_structures::Graph::DiGraph { stmts, .. } = graph else {
        panic!("not a digraph: {}", run.describe());
    };
    let nodes = stmts
        .iter()
        .filter(|s| matches!(s, graphviz_rust::dot_structures::Stmt::Node(_)))
        .count();
    let edges = stmts
        .iter()
        .filter(|s| matches!(s, graphviz_rust::dot_structures::Stmt::Edge(_)))
        .count();
    assert_eq!((nodes, edges), (6, 5), "{}", run.stdout);
    assert!(run.stdout.contains("n0 -> n1;"), "{}", run.stdout);

    // A name nobody has: exit 1, saying so.
    let run = finale(&env, &["tree", "cm/nothing"]);
    assert_eq!(run.code, Some(1), "{}", run.describe());
    assert!(run.stderr.contains("not found"), "{}", run.describe());
}

/// The `Confirmation digest: …` line of a dry run.
fn digest_of(run: &Run) -> String {
    run.stdout
        .lines()
        .find_map(|line| line.strip_prefix("Confirmation digest: "))
        .unwrap_or_else(|| panic!("no digest: {}", run.describe()))
        .to_string()
}

fn removals(env: &Env) -> Vec<Value> {
    env.get_json(&["finalizerremovals"])["items"]
        .as_array()
        .expect("items")
        .clone()
}

/// Dry run (changes nothing), a wrong digest and a stale one (refused), the right one
/// (exactly one record, finalizer gone), and a live Lease (refused with the evidence).
#[test]
fn finalize_dry_run_confirm_and_refusals() {
    let env = Env::start();
    env.ok_with_stdin(
        &["apply", "-f", "-"],
        &configmap_yaml("held", Some("example.com/hold"), None),
    );
    env.ok(&["delete", "configmap", "held", "--wait=false"]);
    let before = env.get_json(&["configmap", "held"]);
    let rv_before = before["metadata"]["resourceVersion"].clone();

    let run = finale(
        &env,
        &[
            "finalize",
            "cm/held",
            "--finalizer",
            "example.com/hold",
            "--reason",
            "the cache it flushed is gone",
        ],
    );
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert!(run.stdout.starts_with("Dry run: "), "{}", run.describe());
    assert!(
        run.stdout.contains("ownerUnknown: true"),
        "{}",
        run.describe()
    );
    let digest = digest_of(&run);
    assert!(
        run.stdout.contains(&format!(
            "finale finalize configmaps/held -n default --finalizer example.com/hold --reason 'the cache it flushed is gone' --confirm {digest}"
        )),
        "{}",
        run.describe()
    );
    // The dry run has answered, so it is over: the object is as it was and nothing is recorded.
    let after = env.get_json(&["configmap", "held"]);
    assert_eq!(after["metadata"]["resourceVersion"], rv_before, "{after:#}");
    assert_eq!(
        after["metadata"]["finalizers"],
        serde_json::json!(["example.com/hold"])
    );
    assert!(removals(&env).is_empty());

    // A digest that was never printed: refused, nothing changes.
    let run = finale(
        &env,
        &[
            "finalize",
            "cm/held",
            "--finalizer",
            "example.com/hold",
            "--confirm",
            "000000000000",
        ],
    );
    assert_eq!(run.code, Some(1), "{}", run.describe());
    assert!(
        run.stderr.contains("changed since the dry run"),
        "{}",
        run.describe()
    );
    // The object changes after the dry run: its digest is stale and refused.
    env.ok(&["annotate", "configmap", "held", "touched=yes"]);
    let run = finale(
        &env,
        &[
            "finalize",
            "cm/held",
            "--finalizer",
            "example.com/hold",
            "--confirm",
            &digest,
        ],
    );
    assert_eq!(run.code, Some(1), "{}", run.describe());
    assert!(
        run.stderr.contains("changed since the dry run")
            && run.stderr.contains("Nothing was removed"),
        "{}",
        run.describe()
    );
    assert!(removals(&env).is_empty());
    let held = env.get_json(&["configmap", "held"]);
    assert_eq!(
        held["metadata"]["finalizers"],
        serde_json::json!(["example.com/hold"])
    );

    // A fresh dry run and its digest: removed, exactly one record.
    let run = finale(
        &env,
        &["finalize", "cm/held", "--finalizer", "example.com/hold"],
    );
    assert_eq!(run.code, Some(0), "{}", run.describe());
    let fresh = digest_of(&run);
    assert_ne!(fresh, digest, "the annotation changed the resourceVersion");
    let run = finale(
        &env,
        &[
            "finalize",
            "cm/held",
            "--finalizer",
            "example.com/hold",
            "--reason",
            "released by the test",
            "--confirm",
            &fresh,
        ],
    );
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert!(
        run.stdout
            .starts_with("Removed finalizer example.com/hold from ConfigMap default/held.\n"),
        "{}",
        run.describe()
    );
    assert!(run.stdout.contains("phase Removed"), "{}", run.describe());
    let records = removals(&env);
    assert_eq!(records.len(), 1, "{records:#?}");
    assert_eq!(records[0]["spec"]["finalizer"], "example.com/hold");
    assert_eq!(records[0]["spec"]["reason"], "released by the test");
    assert_eq!(records[0]["status"]["phase"], "Removed");
    // Its only finalizer gone, the deleted object is gone.
    let gone = env.run(&["get", "configmap", "held"]);
    assert_ne!(gone.code, Some(0), "{}", gone.describe());
    assert!(gone.stderr.contains("NotFound"), "{}", gone.describe());

    // A claimed finalizer whose controller's Lease is live: refused with the evidence, dry
    // run and confirmation alike.
    let now = utc_now();
    env.ok_with_stdin(
        &["apply", "-f", "-"],
        &format!(
            "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: cache-operator\n  namespace: kube-system\n\
             spec:\n  holderIdentity: cache-operator-1\n  leaseDurationSeconds: 3600\n  renewTime: \"{now}\"\n  acquireTime: \"{now}\"\n"
        ),
    );
    env.ok_with_stdin(
        &["apply", "-f", "-"],
        "apiVersion: deletion.finale.dev/v1alpha1\nkind: FinalizerClaim\nmetadata:\n  name: cache-operator\n\
         spec:\n  finalizer: cache.example.com/\n  resources:\n  - group: \"\"\n    resource: configmaps\n\
         \x20 controller: cache-operator\n  lease:\n    namespace: kube-system\n    name: cache-operator\n  forcePolicy: Always\n",
    );
    env.ok_with_stdin(
        &["apply", "-f", "-"],
        &configmap_yaml("orders", Some("cache.example.com/flush"), None),
    );
    env.ok(&["delete", "configmap", "orders", "--wait=false"]);
    let orders = env.get_json(&["configmap", "orders"]);
    let live_digest = {
        // The digest a dry run would have printed, computed as the CLI does, to show that
        // even a matching confirmation is refused while the controller lives.
        let run = finale(
            &env,
            &[
                "finalize",
                "cm/orders",
                "--finalizer",
                "cache.example.com/flush",
            ],
        );
        assert_eq!(run.code, Some(1), "{}", run.describe());
        assert!(
            run.stderr
                .contains("the server refuses to remove finalizer cache.example.com/flush")
                && run
                    .stderr
                    .contains("cache-operator-1 holds Lease kube-system/cache-operator")
                && run.stderr.contains("it is alive"),
            "{}",
            run.describe()
        );
        assert!(run.stdout.is_empty(), "{}", run.describe());
        sha256_digest(
            orders["metadata"]["uid"].as_str().expect("uid"),
            orders["metadata"]["resourceVersion"].as_str().expect("rv"),
            "cache.example.com/flush",
        )
    };
    let run = finale(
        &env,
        &[
            "finalize",
            "cm/orders",
            "--finalizer",
            "cache.example.com/flush",
            "--confirm",
            &live_digest,
        ],
    );
    assert_eq!(run.code, Some(1), "{}", run.describe());
    assert!(run.stderr.contains("it is alive"), "{}", run.describe());
    assert_eq!(removals(&env).len(), 1, "no second record");
    let orders = env.get_json(&["configmap", "orders"]);
    assert_eq!(
        orders["metadata"]["finalizers"],
        serde_json::json!(["cache.example.com/flush"])
    );
}

/// The CLI's digest, recomputed independently with `sha256sum`: the first 12 hex digits of
/// SHA-256 over uid NUL resourceVersion NUL finalizer.
fn sha256_digest(uid: &str, resource_version: &str, finalizer: &str) -> String {
    use std::io::Write;
    let mut child = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("sha256sum");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(format!("{uid}\0{resource_version}\0{finalizer}").as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("sha256sum output");
    String::from_utf8(out.stdout).expect("utf-8")[..12].to_string()
}

/// The current time as RFC 3339 with microseconds (a Lease's MicroTime), via `date`.
fn utc_now() -> String {
    let out = Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%M:%S.000000Z"])
        .output()
        .expect("date");
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .trim()
        .to_string()
}

/// The same scenario on a server with `deletion.finale.dev` and on one with it switched off:
/// the group is gone from discovery and its paths 404, and `explain` and `tree` print the
/// same answers, computed by the client and marked so.
#[test]
fn with_the_api_switched_off_the_client_answers_the_same() {
    let on = Env::start();
    let off = Env::start_with(&[API_OFF]);

    // Off: absent from both discovery forms, its paths 404.
    let groups = off.ok(&["api-resources", "-o", "name"]);
    assert!(!groups.contains("deletion.finale.dev"), "{groups}");
    assert!(
        on.ok(&["api-resources", "-o", "name"])
            .contains("deletionreviews.deletion.finale.dev")
    );
    let apis: Value = serde_json::from_str(&off.ok(&["get", "--raw", "/apis"])).expect("JSON");
    assert!(
        !apis.to_string().contains("deletion.finale.dev"),
        "{apis:#}"
    );
    // The aggregated form: the CLI decides from it (`computed by the client` below).
    let raw = off.run(&["get", "--raw", "/apis/deletion.finale.dev/v1alpha1"]);
    assert_ne!(raw.code, Some(0), "{}", raw.describe());
    assert!(raw.stderr.contains("NotFound"), "{}", raw.describe());

    // Off, no claim can exist, so adding a finalizer draws no unclaimed-finalizer warning
    // (on, it does).
    let manifest = configmap_yaml("warned", Some("example.com/hold"), None);
    let applied = off.run_with_stdin(&["apply", "-f", "-"], &manifest);
    assert_eq!(applied.code, Some(0), "{}", applied.describe());
    assert!(
        !applied.stderr.contains("not claimed"),
        "{}",
        applied.describe()
    );
    let applied = on.run_with_stdin(&["apply", "-f", "-"], &manifest);
    assert!(
        applied.stderr.contains("not claimed"),
        "{}",
        applied.describe()
    );

    for env in [&on, &off] {
        build_tree(env);
        // The foreground chain of the explain tests: `fg` waits for `fg-child`, held by an
        // unclaimed finalizer.
        env.ok_with_stdin(&["apply", "-f", "-"], &configmap_yaml("fg", None, None));
        let fg = uid_of(env, &["configmap", "fg"]);
        env.ok_with_stdin(
            &["apply", "-f", "-"],
            &configmap_yaml("fg-child", Some("example.com/hold"), Some(("fg", &fg))),
        );
        env.ok(&[
            "delete",
            "configmap",
            "fg",
            "--cascade=foreground",
            "--wait=false",
        ]);
    }
    wait_for_tree(&on);
    // The server's collector learns of `fg-child` from its watch: wait until it names it.
    let deadline = Instant::now() + common::CLI_RUN_LIMIT;
    loop {
        let run = finale(&on, &["explain", "cm/fg", "-o", "json"]);
        let status: Value = serde_json::from_str(&run.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", run.describe()));
        if status["causes"][0]["type"] == "ForegroundDependents" {
            break;
        }
        assert!(Instant::now() < deadline, "{}", run.describe());
        std::thread::sleep(Duration::from_millis(100));
    }

    let marker = "computed by the client";
    for args in [
        &["explain", "cm/fg", "--color=never"][..],
        &["explain", "cm/held", "--color=never"],
        &["explain", "cm/app", "--color=never"],
        &["explain", "cm/gone-never-was", "--color=never"],
        &["tree", "cm/app", "--color=never"],
        &["tree", "cm/leaf", "--up", "--color=never"],
        &["tree", "cm/fg", "--color=never"],
        &["plan", "cm/app", "--color=never"],
        &["plan", "cm/app", "--cascade=orphan", "--color=never"],
        &["plan", "cm/held", "--color=never"],
    ] {
        let served = finale(&on, args);
        let computed = finale(&off, args);
        assert_eq!(
            served.code,
            computed.code,
            "{}\n{}",
            served.describe(),
            computed.describe()
        );
        // Who added a finalizer is known to the server only (its side records are not
        // served), so the client's answer lacks those lines and nothing else.
        assert_eq!(
            without_provenance(&mask_ages(&served.stdout)),
            mask_ages(&computed.stdout),
            "{}\n{}",
            served.describe(),
            computed.describe()
        );
        assert!(!served.stderr.contains(marker), "{}", served.describe());
        assert!(
            computed
                .stderr
                .contains(&format!("{marker}: https://127.0.0.1:")),
            "{}",
            computed.describe()
        );
    }
    assert_eq!(
        mask_ages(&finale(&off, &["tree", "cm/app", "--color=never"]).stdout),
        TREE_GOLDEN
    );
    let stuck = finale(&off, &["explain", "cm/fg", "--color=never"]);
    assert_eq!(stuck.code, Some(3), "{}", stuck.describe());
    // `--client-side` asks for the client's answer where the server could give it.
    let forced = finale(&on, &["plan", "cm/app", "--client-side", "--color=never"]);
    assert_eq!(
        forced.stdout,
        finale(&on, &["plan", "cm/app", "--color=never"]).stdout,
        "{}",
        forced.describe()
    );
    assert!(forced.stderr.contains(marker), "{}", forced.describe());

    // JSON: the same document but for the marker and the resourceVersion it was read at.
    for args in [
        &["explain", "cm/fg", "-o", "json"][..],
        &["tree", "cm/app", "-o", "json"],
        &["plan", "cm/app", "-o", "json"],
    ] {
        let mut served: Value = serde_json::from_str(&finale(&on, args).stdout).expect("JSON");
        let mut computed: Value = serde_json::from_str(&finale(&off, args).stdout).expect("JSON");
        assert_eq!(computed["computedBy"], "client", "{computed:#}");
        assert!(served.get("computedBy").is_none(), "{served:#}");
        for document in [&mut served, &mut computed] {
            let map = document.as_object_mut().expect("object");
            map.remove("computedBy");
            map.remove("resourceVersion");
            strip_uids_and_times(document);
        }
        assert_eq!(served, computed, "{}", args.join(" "));
    }
}

/// uids and timestamps differ between the two servers; everything else must not.
fn strip_uids_and_times(value: &mut Value) {
    match value {
        Value::Object(map) => {
            // Provenance is the server's alone (see `without_provenance`).
            for key in ["addedBy", "addedAt", "addedByUserAgent"] {
                map.remove(key);
            }
            for key in ["uid", "since", "deletionTimestamp"] {
                if map.contains_key(key) {
                    map.insert(key.into(), Value::String("<masked>".into()));
                }
            }
            for (_, child) in map.iter_mut() {
                strip_uids_and_times(child);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(strip_uids_and_times),
        _ => {}
    }
}

/// A ConfigMap (or Secret) in `default` naming `owners` as (name, uid, blockOwnerDeletion),
/// without data.
fn dependent_yaml(
    kind: &str,
    name: &str,
    owners: &[(&str, &str, bool)],
    finalizer: Option<&str>,
) -> String {
    let mut yaml =
        format!("apiVersion: v1\nkind: {kind}\nmetadata:\n  name: {name}\n  namespace: default\n");
    if let Some(finalizer) = finalizer {
        yaml.push_str(&format!("  finalizers:\n  - {finalizer}\n"));
    }
    if !owners.is_empty() {
        yaml.push_str("  ownerReferences:\n");
        for (owner, uid, block) in owners {
            yaml.push_str(&format!(
                "  - apiVersion: v1\n    kind: ConfigMap\n    name: {owner}\n    uid: {uid}\n    blockOwnerDeletion: {block}\n"
            ));
        }
    }
    yaml
}

/// The server answers a plan from the collector's graph, where it replays each class of
/// identical leaves (same type, namespace and owner references; no finalizer; owning
/// nothing) as one node; `--client-side` plans over a copy read from the store, object by
/// object. On one server, so uids match, the two JSON answers must be the same document:
/// counts, outcomes, and the tree's order and cut, with classes whose names interleave
/// (blocking and non-blocking references), objects held by a finalizer among them, a class
/// also owned by an object that stays, and one reached from two deleted owners.
#[test]
fn plans_of_identical_leaves_match_the_object_by_object_answer() {
    let env = Env::start();
    let mut documents = vec![
        dependent_yaml("ConfigMap", "big", &[], None),
        dependent_yaml("ConfigMap", "other", &[], None),
    ];
    env.ok_with_stdin(&["apply", "-f", "-"], &documents.join("---\n"));
    let big = uid_of(&env, &["configmap", "big"]);
    let other = uid_of(&env, &["configmap", "other"]);
    env.ok_with_stdin(
        &["apply", "-f", "-"],
        &dependent_yaml("ConfigMap", "mid", &[("big", &big, true)], None),
    );
    let mid = uid_of(&env, &["configmap", "mid"]);
    documents.clear();
    for i in 0..60 {
        let block = i % 2 == 0;
        let name = format!("leaf-{i:02}");
        documents.push(dependent_yaml(
            "ConfigMap",
            &name,
            &[("big", &big, block)],
            None,
        ));
    }
    for name in ["leaf-07h", "leaf-33h"] {
        documents.push(dependent_yaml(
            "ConfigMap",
            name,
            &[("big", &big, true)],
            Some("example.com/hold"),
        ));
    }
    for i in 0..20 {
        let owners = [
            ("big", big.as_str(), false),
            ("other", other.as_str(), false),
        ];
        documents.push(dependent_yaml(
            "ConfigMap",
            &format!("two-{i:02}"),
            &owners,
            None,
        ));
    }
    for i in 0..10 {
        let owners = [("big", big.as_str(), true), ("mid", mid.as_str(), false)];
        documents.push(dependent_yaml(
            "ConfigMap",
            &format!("both-{i:02}"),
            &owners,
            None,
        ));
    }
    for i in 0..15 {
        let owners = [("big", big.as_str(), false)];
        documents.push(dependent_yaml(
            "Secret",
            &format!("sec-{i:02}"),
            &owners,
            None,
        ));
    }
    env.ok_with_stdin(&["apply", "-f", "-"], &documents.join("---\n"));

    let answer = |args: &[&str]| -> Value {
        let run = finale(&env, args);
        assert!(matches!(run.code, Some(0 | 2)), "{}", run.describe());
        let mut document: Value = serde_json::from_str(&run.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", run.describe()));
        let map = document.as_object_mut().expect("an object");
        map.remove("computedBy");
        map.remove("resourceVersion");
        without_provenance_keys(&mut document);
        document
    };
    let mut compared = 0;
    for (target, cascade) in [
        ("cm/big", "background"),
        ("cm/big", "foreground"),
        ("cm/big", "orphan"),
        ("cm/mid", "background"),
    ] {
        for max_nodes in ["500", "7", "1"] {
            let cascade = format!("--cascade={cascade}");
            let args = [
                "plan",
                target,
                &cascade,
                "--max-nodes",
                max_nodes,
                "-o",
                "json",
            ];
            let served = answer(&args);
            let mut client_args = args.to_vec();
            client_args.push("--client-side");
            let computed = answer(&client_args);
            assert_eq!(served, computed, "{}", args.join(" "));
            compared += 1;
        }
    }
    assert_eq!(compared, 12);
    // The precondition: the server took the dependents from the collector's graph (the
    // only place classes are formed), and counted every member.
    let metrics = env.ok(&["get", "--raw", "/metrics"]);
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("finale_deletion_plans_total{dependents=\"collector\"}")),
        "{metrics}"
    );
    let background = answer(&["plan", "cm/big", "-o", "json"]);
    // big, mid, 60 leaves, 2 held, 10 both-*, 15 Secrets; the 20 two-* stay (other keeps
    // them).
    assert_eq!(background["plan"]["deleted"], 89, "{background:#}");
    assert_eq!(background["plan"]["kept"], 20, "{background:#}");
    assert_eq!(background["plan"]["hangs"], 2, "{background:#}");
}

/// Removes who-added-it evidence, which the server alone records (see `without_provenance`).
fn without_provenance_keys(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for key in ["addedBy", "addedAt", "addedByUserAgent"] {
                map.remove(key);
            }
            map.values_mut().for_each(without_provenance_keys);
        }
        Value::Array(items) => items.iter_mut().for_each(without_provenance_keys),
        _ => {}
    }
}

/// An unknown group version in `--runtime-config` stops the server at start-up, naming it.
#[test]
fn runtime_config_with_an_unknown_group_is_a_startup_error() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let mut child = Command::new(common::binary())
        .args([
            "server",
            "--listen",
            "127.0.0.1:0",
            "--runtime-config=batch/v1=false",
        ])
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start finale server");
    let started = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if started.elapsed() > common::CLI_RUN_LIMIT {
            let _ = child.kill();
            panic!("the server started with an unknown --runtime-config group");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = child.wait_with_output().expect("output");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("--runtime-config: unknown api groups batch/v1"),
        "{stderr}"
    );
}
