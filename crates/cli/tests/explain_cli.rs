//! `finale explain` end to end: the built `finale` binary run as a child process against a real
//! `finale server` (started by the e2e fixtures), as a person or a script would run it, and as
//! the kubectl plugin `kubectl finale explain` through a `kubectl-finale` symlink on PATH.
//!
//! Every child run is bounded (60 s, then killed); `--watch` runs pass `--timeout`.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Env, Run, run_bounded};
use serde_json::Value;

const REMOVE_FINALIZERS: &str = r#"[{"op":"remove","path":"/metadata/finalizers"}]"#;

/// `finale explain ARGS --kubeconfig <the server's>`, bounded.
fn explain(env: &Env, args: &[&str]) -> Run {
    let mut all = vec!["explain"];
    all.extend_from_slice(args);
    common::finale(env, &all)
}

fn configmap_yaml(name: &str, namespace: &str, finalizer: Option<&str>) -> String {
    let finalizers = finalizer
        .map(|f| format!("  finalizers:\n  - {f}\n"))
        .unwrap_or_default();
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {namespace}\n{finalizers}data:\n  key: {name}\n"
    )
}

/// The verdict word a text answer starts with.
fn verdict_of(run: &Run) -> &str {
    run.stdout
        .split_once(':')
        .map(|(verdict, _)| verdict)
        .unwrap_or_else(|| panic!("no verdict line: {}", run.describe()))
}

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
    // `added by admin 2s ago (kubectl/v1.33.1 …)` → `added by admin <age> (<user-agent>)`.
    out.lines()
        .map(|line| match line.split_once("added by ") {
            Some((indent, rest)) if indent.chars().all(|c| c == ' ' || c == '│') => {
                let user = rest.split(' ').next().unwrap_or_default();
                format!("{indent}added by {user} <age> (<user-agent>)\n")
            }
            _ => format!("{line}\n"),
        })
        .collect::<String>()
        .trim_end_matches('\n')
        .to_string()
        + if text.ends_with('\n') { "\n" } else { "" }
}

/// A ConfigMap that nobody deletes, then deleted while an unclaimed finalizer holds it
/// (Stuck, with the exact tree), then released (Gone); `-o json` is the review's status;
/// `--watch` ends by itself once the object is gone.
#[test]
fn not_deleting_stuck_then_gone() {
    let env = Env::start();
    env.ok_with_stdin(
        &["apply", "-f", "-"],
        &configmap_yaml("held", "default", Some("example.com/hold")),
    );

    let run = explain(&env, &["configmap/held"]);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert_eq!(verdict_of(&run), "NotDeleting", "{}", run.describe());

    env.ok(&["delete", "configmap", "held", "--wait=false"]);
    let cm = env.get_json(&["configmap", "held"]);
    assert!(cm["metadata"]["deletionTimestamp"].is_string(), "{cm:#}");

    let run = explain(&env, &["cm/held", "--color=never"]);
    assert_eq!(run.code, Some(3), "{}", run.describe());
    assert_eq!(
        mask_ages(&run.stdout),
        "Stuck: ConfigMap default/held is stuck: no controller claims finalizer example.com/hold (owner unknown)\n\
         \n\
         ConfigMap/held  no controller claims finalizer example.com/hold (owner unknown): nothing may \
         ever remove it. Find the controller that added it and make sure it runs, or declare it with a \
         FinalizerClaim; remove the finalizer by hand only once you know what it was meant to clean up  \
         (since <age>)\n\
         \x20    added by admin <age> (<user-agent>)\n\
         \x20    claim: none\n\
         \x20    finalizer: example.com/hold\n\
         \n\
         Next: ConfigMap default/held: Find the controller that added it and make sure it runs, or \
         declare it with a FinalizerClaim; remove the finalizer by hand only once you know what it was \
         meant to clean up\n",
        "{}",
        run.describe()
    );
    // Piped and asked for colour: escape codes; `never` and the piped default: none.
    assert!(!run.stdout.contains('\u{1b}'), "{}", run.describe());
    let piped = explain(&env, &["cm/held"]);
    assert!(!piped.stdout.contains('\u{1b}'), "{}", piped.describe());
    let coloured = explain(&env, &["cm/held", "--color=always"]);
    assert!(
        coloured.stdout.starts_with("\u{1b}[1m\u{1b}[31mStuck"),
        "{}",
        coloured.describe()
    );

    // -o json is the status a DeletionReview created by kubectl gets, at the same revision.
    let run = explain(&env, &["configmap", "held", "-o", "json"]);
    assert_eq!(run.code, Some(3), "{}", run.describe());
    let printed: Value = serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", run.describe()));
    let review = env.ok_with_stdin(
        &["create", "-f", "-", "-o", "json"],
        "apiVersion: deletion.finale.dev/v1alpha1\nkind: DeletionReview\nspec:\n  target:\n    apiVersion: v1\n    kind: ConfigMap\n    namespace: default\n    name: held\n",
    );
    let review: Value = serde_json::from_str(&review).expect("kubectl's review as JSON");
    assert_eq!(printed, review["status"], "{}", run.describe());
    let yaml = explain(&env, &["configmap", "held", "-o", "yaml"]);
    assert_eq!(yaml.code, Some(3), "{}", yaml.describe());
    assert!(
        yaml.stdout.starts_with("verdict: Stuck\n") || yaml.stdout.contains("\nverdict: Stuck"),
        "{}",
        yaml.describe()
    );

    // --watch follows the object until it is gone: release it once the watcher has drawn the
    // Stuck answer, and the watcher ends by itself with Gone (its --timeout is far beyond this
    // test's wait, so only seeing Gone ends it in time).
    let mut watcher = Command::new(common::binary())
        .args([
            "explain",
            "cm/held",
            "--watch",
            "--timeout",
            "5m",
            "--color=never",
        ])
        .arg("--kubeconfig")
        .arg(&env.server.kubeconfig)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start finale explain --watch");
    let lines = {
        let stdout = watcher.stdout.take().expect("watcher stdout");
        let (sender, receiver) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufRead::lines(std::io::BufReader::new(stdout)) {
                let Ok(line) = line else { break };
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        receiver
    };
    let mut seen = Vec::new();
    let deadline = Instant::now() + common::CLI_RUN_LIMIT;
    while !seen.iter().any(|line: &String| line.starts_with("Stuck: ")) {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => seen.push(line),
            Err(e) => {
                let _ = watcher.kill();
                panic!("the watcher printed no Stuck answer ({e}): {seen:#?}");
            }
        }
    }
    env.ok(&[
        "patch",
        "configmap",
        "held",
        "--type=json",
        "-p",
        REMOVE_FINALIZERS,
    ]);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => seen.push(line),
            // The watcher closed its stdout: it ended.
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            Err(e) => {
                let _ = watcher.kill();
                panic!("the watcher did not end once the object was gone ({e}): {seen:#?}");
            }
        }
    }
    let status = watcher.wait().expect("watcher exit");
    assert_eq!(status.code(), Some(0), "{seen:#?}");
    assert!(
        seen.iter().any(|line| line.starts_with("Gone: ")),
        "{seen:#?}"
    );

    let run = explain(&env, &["configmap/held"]);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert_eq!(verdict_of(&run), "Gone", "{}", run.describe());
}

/// A two-level tree from the server, drawn exactly: a ConfigMap deleted in the foreground waits
/// for a dependent that blocks it, which an unclaimed finalizer holds.
#[test]
fn foreground_chain_is_drawn_as_a_tree() {
    let env = Env::start();
    env.ok_with_stdin(
        &["apply", "-f", "-"],
        &configmap_yaml("app", "default", None),
    );
    let owner = env.get_json(&["configmap", "app"]);
    let uid = owner["metadata"]["uid"].as_str().expect("owner uid");
    env.ok_with_stdin(
        &["apply", "-f", "-"],
        &format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app-config\n  namespace: default\n  finalizers:\n  - example.com/hold\n\
             \x20 ownerReferences:\n  - apiVersion: v1\n    kind: ConfigMap\n    name: app\n    uid: {uid}\n    blockOwnerDeletion: true\n"
        ),
    );
    env.ok(&[
        "delete",
        "configmap",
        "app",
        "--cascade=foreground",
        "--wait=false",
    ]);

    // The collector learns of the dependent from its watch: wait (bounded) until the answer
    // names it, the precondition of the text below.
    let deadline = Instant::now() + common::CLI_RUN_LIMIT;
    loop {
        let run = explain(&env, &["cm/app", "-o", "json"]);
        let status: Value = serde_json::from_str(&run.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", run.describe()));
        if status["causes"][0]["type"] == "ForegroundDependents" {
            break;
        }
        assert!(Instant::now() < deadline, "{}", run.describe());
        std::thread::sleep(Duration::from_millis(100));
    }

    let run = explain(&env, &["cm/app", "--color=never"]);
    assert_eq!(run.code, Some(3), "{}", run.describe());
    assert_eq!(
        mask_ages(&run.stdout),
        "Stuck: ConfigMap default/app is stuck: ConfigMap default/app-config: no controller claims \
         finalizer example.com/hold (owner unknown)\n\
         \n\
         ConfigMap/app  foreground deletion waits for 1 dependent that blocks it \
         (blockOwnerDeletion): ConfigMap default/app-config  (since <age>)\n\
         │    added by admin <age> (<user-agent>)\n\
         │    blockingDependents: 1\n\
         │    kind: ConfigMap\n\
         └─ ConfigMap/app-config  no controller claims finalizer example.com/hold (owner unknown): \
         nothing may ever remove it. Find the controller that added it and make sure it runs, or \
         declare it with a FinalizerClaim; remove the finalizer by hand only once you know what it \
         was meant to clean up  (since <age>)\n\
         \x20       added by admin <age> (<user-agent>)\n\
         \x20       claim: none\n\
         \x20       finalizer: example.com/hold\n\
         \n\
         Next: ConfigMap default/app-config: Find the controller that added it and make sure it \
         runs, or declare it with a FinalizerClaim; remove the finalizer by hand only once you know \
         what it was meant to clean up\n",
        "{}",
        run.describe()
    );
}

/// A finalizer claimed by a controller whose Lease is live: Progressing, exit 2.
#[test]
fn claimed_finalizer_with_a_live_lease_is_progressing() {
    let env = Env::start();
    let now = chrono_now();
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
         \x20 controller: cache-operator\n  lease:\n    namespace: kube-system\n    name: cache-operator\n",
    );
    env.ok(&["create", "namespace", "shop"]);
    env.ok_with_stdin(
        &["apply", "-f", "-"],
        &configmap_yaml("orders", "shop", Some("cache.example.com/flush")),
    );
    env.ok(&[
        "delete",
        "configmap",
        "orders",
        "-n",
        "shop",
        "--wait=false",
    ]);

    let run = explain(&env, &["cm/orders", "-n", "shop", "--color=never"]);
    assert_eq!(run.code, Some(2), "{}", run.describe());
    assert_eq!(verdict_of(&run), "Progressing", "{}", run.describe());
    assert!(run.stdout.contains("cache-operator"), "{}", run.describe());
    assert!(run.stdout.contains("leaseLive: true"), "{}", run.describe());
}

/// The current time as RFC 3339 with microseconds (a Lease's MicroTime), via `date`.
fn chrono_now() -> String {
    let out = Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%M:%S.000000Z"])
        .output()
        .expect("date");
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .trim()
        .to_string()
}

/// TYPE in every form kubectl accepts, the context's namespace as default, and a TYPE
/// nobody serves (exit 1, naming it).
#[test]
fn types_resolve_like_kubectl_and_unknown_types_fail() {
    let env = Env::start();
    env.ok_with_stdin(
        &["apply", "-f", "-"],
        &configmap_yaml("app", "default", None),
    );
    env.ok_with_stdin(
        &["apply", "-f", "-"],
        "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: l\n  namespace: default\nspec:\n  holderIdentity: x\n",
    );
    for args in [
        &["cm/app"][..],
        &["configmap", "app"],
        &["configmaps/app"],
        &["ConfigMap/app"],
        &["configmaps.v1./app"],
        &["lease/l"],
        &["leases.coordination.k8s.io/l"],
        &["Lease.coordination.k8s.io", "l"],
        &["leases.v1.coordination.k8s.io/l"],
        &["ns/default"],
    ] {
        let run = explain(&env, args);
        assert_eq!(run.code, Some(0), "{}", run.describe());
        assert_eq!(verdict_of(&run), "NotDeleting", "{}", run.describe());
    }
    // A name in another namespace than the context's is Gone there, NotDeleting in its own.
    let run = explain(&env, &["cm/app", "-n", "kube-system"]);
    assert_eq!(verdict_of(&run), "Gone", "{}", run.describe());

    let run = explain(&env, &["gadgets/x"]);
    assert_eq!(run.code, Some(1), "{}", run.describe());
    assert!(run.stdout.is_empty(), "{}", run.describe());
    assert!(
        run.stderr.contains("resource type \"gadgets\""),
        "{}",
        run.describe()
    );
    let run = explain(&env, &["leases.apps/l"]);
    assert_eq!(run.code, Some(1), "{}", run.describe());
    assert!(run.stderr.contains("\"leases.apps\""), "{}", run.describe());
}

/// `kubectl finale explain …` through a `kubectl-finale` symlink first on PATH, with the
/// cluster taken from `$KUBECONFIG` as kubectl passes it on.
#[test]
fn kubectl_plugin_runs_explain() {
    let env = Env::start();
    env.ok_with_stdin(
        &["apply", "-f", "-"],
        &configmap_yaml("held", "default", Some("example.com/hold")),
    );
    env.ok(&["delete", "configmap", "held", "--wait=false"]);
    let plugins = tempfile::tempdir().expect("plugin directory");
    std::os::unix::fs::symlink(common::binary(), plugins.path().join("kubectl-finale"))
        .expect("symlink kubectl-finale");
    let path = std::env::join_paths(std::iter::once(plugins.path().to_path_buf()).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .expect("PATH");
    let mut command = Command::new(kubectl());
    command
        .args(["finale", "explain", "cm/held", "--color=never"])
        .env("PATH", path)
        .env("KUBECONFIG", &env.server.kubeconfig)
        .env("HOME", plugins.path());
    let run = run_bounded(command, "kubectl finale explain cm/held".into());
    assert_eq!(run.code, Some(3), "{}", run.describe());
    assert_eq!(verdict_of(&run), "Stuck", "{}", run.describe());
    assert!(
        run.stdout.contains("example.com/hold"),
        "{}",
        run.describe()
    );

    let mut help = Command::new(kubectl());
    help.args(["finale", "explain", "--help"])
        .env(
            "PATH",
            std::env::join_paths([plugins.path(), Path::new("/usr/bin"), Path::new("/bin")])
                .expect("PATH"),
        )
        .env("HOME", plugins.path());
    let run = run_bounded(help, "kubectl finale explain --help".into());
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert!(
        run.stdout.contains("kubectl finale explain"),
        "{}",
        run.describe()
    );
}

/// kubectl as the fixtures use it.
fn kubectl() -> String {
    finale_e2e::Kubectl::binary()
}
