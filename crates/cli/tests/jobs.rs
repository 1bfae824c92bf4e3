//! Jobs with real Pods: the Job controller creates them, the scheduler binds them, the agent
//! of `finale server --with-node` runs them as processes, and the controller counts what
//! they did. `kubectl delete job` with each cascade policy then does what upstream does to
//! the Pods and their processes. Every wait is bounded.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::agent::{alive, kill_processes_under};
use common::{Env, eventually};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(45);
const TRACKING: &str = "batch.kubernetes.io/job-tracking";

/// Kills what the test's Pods left running when the test ends, pass or fail.
struct Reaper(PathBuf);

impl Drop for Reaper {
    fn drop(&mut self) {
        kill_processes_under(&self.0);
    }
}

fn start() -> (Env, Reaper) {
    let env = Env::start_with(&["--with-node"]);
    let reaper = Reaper(env.dir.path().to_path_buf());
    (env, reaper)
}

fn job_manifest(name: &str, spec: Value, script: &str) -> String {
    let mut spec = spec;
    spec["template"] = json!({"spec": {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 10,
        "containers": [{"name": "work", "image": "busybox",
                        "command": ["sh", "-c", script]}],
    }});
    json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": spec})
        .to_string()
}

fn job(env: &Env, name: &str) -> Option<Value> {
    let out = env.ok(&["get", "job", name, "--ignore-not-found", "-o", "json"]);
    (!out.trim().is_empty())
        .then(|| serde_json::from_str(&out).ok())
        .flatten()
}

fn pods_of(env: &Env, job: &str) -> Vec<Value> {
    let list = env.get_json(&["pods", "-l", &format!("batch.kubernetes.io/job-name={job}")]);
    list["items"].as_array().cloned().unwrap_or_default()
}

fn wait_job(env: &Env, name: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    eventually(WAIT, || job(env, name).filter(|j| done(j))).unwrap_or_else(|| {
        panic!(
            "job {name} never became {what}: {:#?}\npods: {:#?}{}",
            job(env, name),
            pods_of(env, name),
            env.log()
        )
    })
}

fn condition<'a>(job: &'a Value, kind: &str) -> Option<&'a Value> {
    job["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind && c["status"] == "True")
}

fn running_pids(env: &Env, job: &str, count: usize) -> Vec<i32> {
    eventually(WAIT, || {
        let pods = pods_of(env, job);
        let pids: Vec<i32> = pods
            .iter()
            .filter(|p| p["status"]["phase"] == "Running")
            .filter_map(|p| {
                p["status"]["containerStatuses"][0]["containerID"]
                    .as_str()?
                    .strip_prefix("process://")?
                    .parse()
                    .ok()
            })
            .collect();
        (pids.len() == count).then_some(pids)
    })
    .unwrap_or_else(|| {
        panic!(
            "job {job} never had {count} running pods: {:#?}{}",
            pods_of(env, job),
            env.log()
        )
    })
}

fn finalizers(object: &Value) -> Vec<String> {
    object["metadata"]["finalizers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f.as_str().map(str::to_string))
        .collect()
}

#[test]
fn a_job_runs_its_pods_to_completion_and_counts_each_once() {
    let (env, _reaper) = start();
    env.ok_with_stdin(
        &["apply", "-f", "-"],
        &job_manifest(
            "batch",
            json!({"completions": 3, "parallelism": 2}),
            "echo working; exit 0",
        ),
    );
    let done = wait_job(&env, "batch", "Complete", |j| {
        condition(j, "Complete").is_some()
    });
    assert_eq!(done["status"]["succeeded"], 3, "{done:#}");
    assert!(done["status"].get("failed").is_none(), "{done:#}");
    assert_eq!(
        done["status"]["uncountedTerminatedPods"],
        json!({}),
        "{done:#}"
    );
    let criteria = condition(&done, "SuccessCriteriaMet").expect("SuccessCriteriaMet first");
    assert_eq!(criteria["reason"], "CompletionsReached");
    assert_eq!(
        condition(&done, "Complete").map(|c| &c["message"]),
        Some(&json!("Reached expected number of succeeded pods"))
    );
    assert!(done["status"]["completionTime"].is_string(), "{done:#}");
    assert!(done["status"]["startTime"].is_string(), "{done:#}");
    // Upstream's generated selector and labels.
    let uid = done["metadata"]["uid"].as_str().unwrap_or_default();
    assert_eq!(
        done["spec"]["selector"]["matchLabels"]["batch.kubernetes.io/controller-uid"],
        uid
    );
    let pods = pods_of(&env, "batch");
    assert_eq!(pods.len(), 3, "exactly three Pods ran: {pods:#?}");
    for pod in &pods {
        assert_eq!(pod["status"]["phase"], "Succeeded", "{pod:#}");
        assert!(
            !finalizers(pod).contains(&TRACKING.to_string()),
            "counted, then released: {pod:#}"
        );
        let owner = &pod["metadata"]["ownerReferences"][0];
        assert_eq!(owner["uid"], uid);
        assert_eq!(owner["controller"], true);
        assert_eq!(owner["blockOwnerDeletion"], true);
        assert!(
            pod["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("batch-")),
            "{pod:#}"
        );
    }
    let table = env.ok(&["get", "job", "batch"]);
    assert!(
        table.contains("Complete") && table.contains("3/3"),
        "{table}"
    );
    let logs = env.ok(&["logs", "job/batch"]);
    assert_eq!(logs.trim(), "working");
    let events = env.ok(&[
        "get",
        "events",
        "--field-selector",
        "involvedObject.name=batch",
    ]);
    assert!(
        events.contains("SuccessfulCreate") && events.contains("Completed"),
        "{events}"
    );
}

#[test]
fn a_job_past_its_backoff_limit_fails_with_upstreams_reason() {
    let (env, _reaper) = start();
    env.ok_with_stdin(
        &["apply", "-f", "-"],
        &job_manifest("doomed", json!({"backoffLimit": 0}), "exit 3"),
    );
    let failed = wait_job(&env, "doomed", "Failed", |j| {
        condition(j, "Failed").is_some()
    });
    assert_eq!(failed["status"]["failed"], 1, "{failed:#}");
    let reason = condition(&failed, "Failed").map(|c| c["reason"].clone());
    assert_eq!(reason, Some(json!("BackoffLimitExceeded")), "{failed:#}");
    assert!(condition(&failed, "FailureTarget").is_some(), "{failed:#}");
    assert!(
        failed["status"].get("completionTime").is_none(),
        "{failed:#}"
    );
    let pods = pods_of(&env, "doomed");
    assert_eq!(pods.len(), 1, "no retry past the limit: {pods:#?}");
    assert_eq!(
        pods[0]["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"],
        3
    );
    // A Job's validation, as upstream's.
    let bad = env.run_with_stdin(
        &["apply", "-f", "-"],
        &json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "bad"},
                "spec": {"template": {"spec": {"restartPolicy": "Always",
                    "containers": [{"name": "c", "image": "busybox", "command": ["true"]}]}}}})
        .to_string(),
    );
    assert!(
        bad.code != Some(0)
            && bad.stderr.contains(
                "spec.template.spec.restartPolicy: Unsupported value: \"Always\": supported values: \"OnFailure\", \"Never\""
            ),
        "{}",
        bad.describe()
    );
}

#[test]
fn kubectl_delete_job_with_each_cascade_policy() {
    let (env, _reaper) = start();
    // Each Pod takes a second to stop after SIGTERM, so a foreground deletion can be seen
    // waiting for them.
    let script = "trap 'sleep 1; exit 0' TERM; while :; do sleep 0.1; done";
    for name in ["bg", "fg", "or"] {
        env.ok_with_stdin(
            &["apply", "-f", "-"],
            &job_manifest(name, json!({"completions": 2, "parallelism": 2}), script),
        );
    }

    // Background (kubectl's default): the Job goes at once, then its Pods, gracefully.
    let pids = running_pids(&env, "bg", 2);
    env.ok(&["delete", "job", "bg", "--wait=false"]);
    let gone = eventually(WAIT, || {
        (job(&env, "bg").is_none() && pods_of(&env, "bg").is_empty()).then_some(())
    });
    assert!(
        gone.is_some(),
        "bg: {:#?}{}",
        pods_of(&env, "bg"),
        env.log()
    );
    let dead = eventually(Duration::from_secs(10), || {
        pids.iter().all(|p| !alive(*p)).then_some(())
    });
    assert!(dead.is_some(), "bg's processes outlived their Pods");

    // Foreground: the Job waits, Terminating, until its Pods are gone.
    let pids = running_pids(&env, "fg", 2);
    env.ok(&[
        "delete",
        "job",
        "fg",
        "--cascade=foreground",
        "--wait=false",
    ]);
    let waiting = job(&env, "fg").expect("the Job waits for its Pods");
    assert!(
        finalizers(&waiting).contains(&"foregroundDeletion".to_string())
            && waiting["metadata"]["deletionTimestamp"].is_string(),
        "{waiting:#}"
    );
    assert!(
        pids.iter().any(|p| alive(*p)),
        "the precondition: the Pods were still stopping when the Job was seen waiting"
    );
    let gone = eventually(WAIT, || job(&env, "fg").is_none().then_some(()));
    assert!(
        gone.is_some(),
        "fg: {:#?}{}",
        pods_of(&env, "fg"),
        env.log()
    );
    assert!(
        pods_of(&env, "fg").is_empty(),
        "the Job went only after its Pods"
    );
    assert!(
        pids.iter().all(|p| !alive(*p)),
        "fg's processes were stopped"
    );

    // Orphan: the Job goes, the Pods stay running without an owner or the tracking
    // finalizer.
    let pids = running_pids(&env, "or", 2);
    env.ok(&["delete", "job", "or", "--cascade=orphan"]);
    assert!(job(&env, "or").is_none());
    let released = eventually(WAIT, || {
        let pods = pods_of(&env, "or");
        (pods.len() == 2
            && pods.iter().all(|p| {
                p["metadata"].get("ownerReferences").is_none()
                    && !finalizers(p).contains(&TRACKING.to_string())
            }))
        .then_some(pods)
    });
    assert!(
        released.is_some(),
        "or: {:#?}{}",
        pods_of(&env, "or"),
        env.log()
    );
    assert!(pids.iter().all(|p| alive(*p)), "orphaned Pods keep running");
    env.ok(&[
        "delete",
        "pods",
        "-l",
        "batch.kubernetes.io/job-name=or",
        "--wait=false",
    ]);
    let gone = eventually(WAIT, || pods_of(&env, "or").is_empty().then_some(()));
    assert!(
        gone.is_some(),
        "the orphans, deleted, go: {:#?}",
        pods_of(&env, "or")
    );
}

#[test]
fn a_finished_job_with_a_ttl_is_deleted_with_its_pods() {
    let (env, _reaper) = start();
    env.ok_with_stdin(
        &["apply", "-f", "-"],
        // Long enough to see the Job finished first: times have whole seconds, as upstream's,
        // so the Job may go up to a second early.
        &job_manifest("brief", json!({"ttlSecondsAfterFinished": 4}), "exit 0"),
    );
    let done = wait_job(&env, "brief", "Complete", |j| {
        condition(j, "Complete").is_some()
    });
    assert_eq!(done["status"]["succeeded"], 1, "{done:#}");
    let gone = eventually(WAIT, || {
        (job(&env, "brief").is_none() && pods_of(&env, "brief").is_empty()).then_some(())
    });
    assert!(
        gone.is_some(),
        "the TTL ran out but {:#?} {:#?} stayed{}",
        job(&env, "brief"),
        pods_of(&env, "brief"),
        env.log()
    );
}
