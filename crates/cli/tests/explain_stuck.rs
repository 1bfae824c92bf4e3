//! `finale explain --stuck [-n NS | -A]` and finalizer provenance, end to end: the built
//! `finale` binary against a real `finale server`, objects written by real kubectl.
//!
//! Every child run is bounded (60 s, then killed).

mod common;

use common::{Env, Run};
use serde_json::Value;

/// `finale explain ARGS --kubeconfig <the server's>`, bounded.
fn explain(env: &Env, args: &[&str]) -> Run {
    let mut all = vec!["explain"];
    all.extend_from_slice(args);
    common::finale(env, &all)
}

fn held_configmap(name: &str, namespace: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {namespace}\n  finalizers:\n  - example.com/hold\n"
    )
}

/// Checks that `row`'s cells start where `header`'s column names do (kubectl's alignment),
/// and returns the cells.
fn aligned_cells<'a>(header: &str, row: &'a str) -> Vec<&'a str> {
    let starts: Vec<usize> = ["NAMESPACE", "OBJECT", "VERDICT", "DELETING", "ROOT CAUSE"]
        .iter()
        .map(|name| header.find(name).expect("a column"))
        .collect();
    let mut cells = Vec::new();
    for (index, start) in starts.iter().enumerate() {
        let end = starts.get(index + 1).copied().unwrap_or(row.len());
        assert!(
            *start == 0 || row.as_bytes()[start - 1] == b' ',
            "column {index} is not aligned:\n{header}\n{row}"
        );
        cells.push(row[*start..end].trim_end());
    }
    cells
}

/// Given objects held by an unclaimed finalizer in two namespaces, `--stuck` lists the
/// stuck ones of the namespace (or, with -A, of the cluster) one line each with the root
/// cause, exits 3, and exits 0 once nothing is stuck.
#[test]
fn explain_stuck_lists_every_stuck_object_one_line_each() {
    let env = Env::start();
    env.ok(&["create", "namespace", "shop"]);
    env.ok_with_stdin(&["apply", "-f", "-"], &held_configmap("held", "default"));
    env.ok_with_stdin(&["apply", "-f", "-"], &held_configmap("orders", "shop"));
    env.ok(&["create", "configmap", "plain"]);

    // Nothing is being deleted yet: exit 0.
    let run = explain(&env, &["--stuck", "--color=never"]);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert_eq!(
        run.stdout,
        "NotDeleting: nothing is being deleted in namespace default\n",
        "{}",
        run.describe()
    );

    env.ok(&["delete", "configmap", "held", "--wait=false"]);
    env.ok(&[
        "delete",
        "configmap",
        "orders",
        "-n",
        "shop",
        "--wait=false",
    ]);
    env.ok(&["delete", "configmap", "plain"]);

    // The context's namespace: one line for the stuck object, exit 3.
    let run = explain(&env, &["--stuck", "--color=never"]);
    assert_eq!(run.code, Some(3), "{}", run.describe());
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(
        lines[..3],
        [
            "Stuck: 1 of 1 object being deleted in namespace default is stuck",
            "",
            "NAMESPACE   OBJECT           VERDICT   DELETING   ROOT CAUSE"
        ],
        "{}",
        run.describe()
    );
    assert_eq!(lines.len(), 4, "{}", run.describe());
    let cells = aligned_cells(lines[2], lines[3]);
    assert_eq!(
        cells[..3],
        ["default", "ConfigMap/held", "Stuck"],
        "{}",
        run.describe()
    );
    assert!(
        cells[3].ends_with('s'),
        "an age in seconds: {}",
        run.describe()
    );
    assert_eq!(
        cells[4],
        "no controller claims finalizer example.com/hold (owner unknown)"
    );

    // -A: both namespaces.
    let run = explain(&env, &["--stuck", "-A", "--color=never"]);
    assert_eq!(run.code, Some(3), "{}", run.describe());
    let rows: Vec<&str> = run.stdout.lines().skip(3).collect();
    assert_eq!(rows.len(), 2, "{}", run.describe());
    assert!(
        run.stdout
            .starts_with("Stuck: 2 of 2 objects being deleted in the cluster are stuck\n"),
        "{}",
        run.describe()
    );
    assert!(
        rows.iter()
            .any(|r| r.starts_with("default ") && r.contains("ConfigMap/held")),
        "{}",
        run.describe()
    );
    assert!(
        rows.iter()
            .any(|r| r.starts_with("shop ") && r.contains("ConfigMap/orders")),
        "{}",
        run.describe()
    );

    // -n shop -o json: the review's status, with the stuck list.
    let run = explain(&env, &["--stuck", "-n", "shop", "-o", "json"]);
    assert_eq!(run.code, Some(3), "{}", run.describe());
    let status: Value = serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", run.describe()));
    assert_eq!(status["verdict"], "Stuck");
    let stuck = status["stuck"].as_array().expect("a stuck list");
    assert_eq!(stuck.len(), 1, "{status:#}");
    assert_eq!(stuck[0]["object"]["name"], "orders");
    assert_eq!(stuck[0]["object"]["namespace"], "shop");
    assert_eq!(
        stuck[0]["rootCause"],
        "no controller claims finalizer example.com/hold (owner unknown)"
    );

    // The one-object answer says who added the finalizer: kubectl, as the admin user.
    let run = explain(&env, &["configmap/held", "--color=never"]);
    assert_eq!(run.code, Some(3), "{}", run.describe());
    let added = run
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("added by "))
        .unwrap_or_else(|| panic!("no provenance line: {}", run.describe()));
    assert!(
        added.trim_start().starts_with("added by admin ") && added.contains(" ago (kubectl/"),
        "{added}"
    );

    // Released: nothing is stuck any more, exit 0.
    for (name, namespace) in [("held", "default"), ("orders", "shop")] {
        env.ok(&[
            "patch",
            "configmap",
            name,
            "-n",
            namespace,
            "--type=json",
            "-p",
            r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
        ]);
    }
    let run = explain(&env, &["--stuck", "-A", "--color=never"]);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert_eq!(verdict(&run), "NotDeleting", "{}", run.describe());
}

fn verdict(run: &Run) -> &str {
    run.stdout
        .split_once(':')
        .map(|(v, _)| v)
        .unwrap_or_default()
}
