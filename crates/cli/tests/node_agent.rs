//! `finale node` against a real `finale server`: Pods bound to the node (`spec.nodeName` set
//! directly) run as host processes, report their status as the kubelet writes it, serve their
//! logs, and go the kubelet's way when deleted (`shared/spec/deletion-semantics.md` PG1–PG5):
//! preStop, `SIGTERM`, the grace period, `SIGKILL`, then the agent's `DELETE` with grace 0.
//! The agent's death leaves pods running and Terminating; its successor adopts and finishes
//! them.
//!
//! Every wait is bounded (at most 30 s); "not before" claims are measured with timestamps the
//! pods' own processes write, never with a fixed sleep.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::agent::{Agent, alive, kill_processes_under, processes_under};
use common::{Env, eventually};
use serde_json::{Value, json};

/// The node every test registers.
const NODE: &str = "node-1";

/// The longest any wait in this suite takes.
const WAIT: Duration = Duration::from_secs(30);

/// A server, an agent for [`NODE`], and a directory for the pods' marker files.
struct Cluster {
    agent: Agent,
    env: Env,
    /// The agent's `--root-dir`.
    root: PathBuf,
    /// Where pods write what the test reads.
    markers: PathBuf,
}

impl Cluster {
    fn start() -> Cluster {
        let env = Env::start();
        let root = env.dir.path().join("node");
        let markers = env.dir.path().join("markers");
        std::fs::create_dir_all(&markers).expect("markers dir");
        let args: Vec<String> = [
            "--kubeconfig",
            &env.server.kubeconfig.display().to_string(),
            "--hostname-override",
            NODE,
            "--root-dir",
            &root.display().to_string(),
            "--port",
            "0",
            "--node-labels",
            "tier=edge",
            "--register-with-taints",
            "example.com/dedicated=tests:NoSchedule",
            "--node-status-update-frequency",
            "1s",
            "--crash-loop-backoff-base",
            "500ms",
            "--crash-loop-backoff-max",
            "2s",
        ]
        .iter()
        .map(|arg| arg.to_string())
        .collect();
        let agent = Agent::spawn(args, env.dir.path().join("agent.log"));
        Cluster {
            agent,
            env,
            root,
            markers,
        }
    }

    /// The tails of the agent's and the server's logs, for assertion messages.
    fn logs(&self) -> String {
        let agent = std::fs::read_to_string(&self.agent.log_path).unwrap_or_default();
        let lines: Vec<&str> = agent.lines().collect();
        format!(
            "\n--- agent log (last 80 lines) ---\n{}{}",
            lines[lines.len().saturating_sub(80)..].join("\n"),
            self.env.log()
        )
    }

    fn create(&self, pod: Value) {
        self.env
            .kubectl
            .ok_with_stdin(&["create", "-f", "-"], Some(&pod.to_string()))
            .unwrap_or_else(|e| panic!("{e:#}{}", self.logs()));
    }

    fn kubectl(&self, args: &[&str]) -> String {
        self.env
            .kubectl
            .ok(args)
            .unwrap_or_else(|e| panic!("{e:#}{}", self.logs()))
    }

    /// The pod, or `None` once it is gone.
    fn pod(&self, name: &str) -> Option<Value> {
        let out = self.kubectl(&["get", "pod", name, "--ignore-not-found", "-o", "json"]);
        if out.trim().is_empty() {
            return None;
        }
        Some(serde_json::from_str(&out).expect("pod JSON"))
    }

    /// Polls the pod until `done` holds; panics after [`WAIT`] with the last pod and the logs.
    fn wait_pod(&self, name: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        let mut last = None;
        let found = eventually(WAIT, || {
            let pod = self.pod(name)?;
            let ok = done(&pod);
            last = Some(pod.clone());
            ok.then_some(pod)
        });
        found.unwrap_or_else(|| {
            panic!(
                "pod {name} did not become {what} within {WAIT:?}; last seen:\n{:#}{}",
                last.unwrap_or(Value::Null),
                self.logs()
            )
        })
    }

    /// Waits until the pod is gone from the API; returns when it was first seen gone.
    fn wait_gone(&self, name: &str) -> SystemTime {
        eventually(WAIT, || self.pod(name).is_none().then(SystemTime::now)).unwrap_or_else(|| {
            panic!(
                "pod {name} is still there after {WAIT:?}: {:#}{}",
                self.pod(name).unwrap_or(Value::Null),
                self.logs()
            )
        })
    }

    fn wait_running(&self, name: &str) -> Value {
        self.wait_pod(name, "Running", |pod| {
            pod["status"]["phase"] == "Running"
                && pod["status"]["containerStatuses"]
                    .as_array()
                    .is_some_and(|all| all.iter().all(|c| c["state"]["running"].is_object()))
        })
    }

    /// A file under the markers directory.
    fn marker(&self, name: &str) -> PathBuf {
        self.markers.join(name)
    }

    /// Events about `pod` with `reason`, once at least one exists.
    fn wait_event(&self, pod: &str, reason: &str) -> Vec<Value> {
        eventually(WAIT, || {
            let out = self.kubectl(&[
                "get",
                "events",
                "--field-selector",
                &format!("involvedObject.name={pod}"),
                "-o",
                "json",
            ]);
            let events: Value = serde_json::from_str(&out).ok()?;
            let matching: Vec<Value> = events["items"]
                .as_array()?
                .iter()
                .filter(|e| e["reason"] == reason)
                .cloned()
                .collect();
            (!matching.is_empty()).then_some(matching)
        })
        .unwrap_or_else(|| panic!("no {reason} Event for pod {pod}{}", self.logs()))
    }

    fn assert_nothing_left_running(&self) {
        let left = eventually(Duration::from_secs(10), || {
            let left = processes_under(self.env.dir.path());
            left.is_empty().then_some(())
        });
        assert!(
            left.is_some(),
            "processes of deleted pods are still running: {:?}{}",
            processes_under(self.env.dir.path()),
            self.logs()
        );
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // The agent first (it would restart what is killed), then whatever a failed test
        // left running.
        self.agent.kill9();
        kill_processes_under(self.env.dir.path());
    }
}

/// `THP_enabled` of a process (`/proc/PID/status`): "0" once prctl(PR_SET_THP_DISABLE).
fn thp_enabled(pid: i32) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("read /proc/{pid}/status: {e}"));
    status
        .lines()
        .find_map(|line| line.strip_prefix("THP_enabled:"))
        .map(|value| value.trim().to_string())
        .unwrap_or_else(|| panic!("no THP_enabled in /proc/{pid}/status"))
}

/// The pid in a container status's `containerID` (`process://<pid>`).
fn pid_of(pod: &Value, container: &str) -> i32 {
    pod["status"]["containerStatuses"]
        .as_array()
        .and_then(|all| all.iter().find(|c| c["name"] == container))
        .and_then(|c| c["containerID"].as_str())
        .and_then(|id| id.strip_prefix("process://"))
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("no process:// containerID for {container}: {pod:#}"))
}

fn container_status<'a>(pod: &'a Value, container: &str) -> &'a Value {
    pod["status"]["containerStatuses"]
        .as_array()
        .and_then(|all| all.iter().find(|c| c["name"] == container))
        .unwrap_or(&Value::Null)
}

fn condition<'a>(pod: &'a Value, kind: &str) -> &'a Value {
    pod["status"]["conditions"]
        .as_array()
        .and_then(|all| all.iter().find(|c| c["type"] == kind))
        .unwrap_or(&Value::Null)
}

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_nanos()
}

fn ns(time: SystemTime) -> u128 {
    time.duration_since(UNIX_EPOCH).expect("clock").as_nanos()
}

/// A nanosecond timestamp a pod wrote with `date +%s%N`.
fn stamp(path: &Path) -> Option<u128> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

const SECOND: u128 = 1_000_000_000;

/// A pod on [`NODE`] running `script` with `/bin/sh -c`.
fn shell_pod(name: &str, script: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": NODE,
            "containers": [{"name": "c", "image": "busybox:1.36",
                            "command": ["/bin/sh", "-c", script]}],
        },
    })
}

/// A process that ignores SIGTERM and writes a heartbeat (`date +%s%N`) every 200 ms.
fn stubborn_script(beat: &Path) -> String {
    format!(
        "trap '' TERM; while true; do date +%s%N > {}; sleep 0.2; done",
        beat.display()
    )
}

/// A Pod runs as a host process: the Node and its Lease are registered, the Pod reports
/// Running as the kubelet writes it, its output is in its log file and served by the log
/// endpoint (to the API server's kind of client certificate only), and deleting it stops
/// the process and removes its directory.
#[test]
fn a_pod_runs_reports_its_status_and_serves_its_logs() {
    let cluster = Cluster::start();
    let node = cluster.wait_node_ready();
    assert_eq!(node["metadata"]["labels"]["kubernetes.io/hostname"], NODE);
    assert_eq!(node["metadata"]["labels"]["kubernetes.io/os"], "linux");
    assert_eq!(node["metadata"]["labels"]["tier"], "edge");
    assert_eq!(node["spec"]["taints"][0]["key"], "example.com/dedicated");
    assert_eq!(
        node["status"]["nodeInfo"]["kubeletVersion"],
        "v1.33.0-finale"
    );
    assert_eq!(
        node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"],
        cluster.agent.port()
    );
    assert!(
        node["status"]["capacity"]["cpu"].is_string()
            && node["status"]["capacity"]["pods"] == "110",
        "{node:#}"
    );
    let lease: Value = serde_json::from_str(&cluster.kubectl(&[
        "get",
        "lease",
        "-n",
        "kube-node-lease",
        NODE,
        "-o",
        "json",
    ]))
    .expect("lease");
    assert_eq!(lease["spec"]["holderIdentity"], NODE, "{lease:#}");
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 40);
    assert!(lease["spec"]["renewTime"].is_string(), "{lease:#}");
    assert_eq!(lease["metadata"]["ownerReferences"][0]["kind"], "Node");
    assert_eq!(
        lease["metadata"]["ownerReferences"][0]["uid"],
        node["metadata"]["uid"]
    );

    let mut pod = shell_pod(
        "web",
        "echo \"hello $(GREETING) from $POD_NAME\"; echo second line; exec sleep 1000",
    );
    pod["spec"]["containers"][0]["env"] = json!([
        {"name": "GREETING", "value": "world"},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
    ]);
    cluster.create(pod);
    let pod = cluster.wait_pod("web", "Running and Ready", |pod| {
        pod["status"]["phase"] == "Running" && condition(pod, "Ready")["status"] == "True"
    });
    let status = &pod["status"];
    assert_eq!(status["podIP"], "127.0.0.1", "{pod:#}");
    assert_eq!(status["hostIP"], "127.0.0.1");
    assert_eq!(status["podIPs"][0]["ip"], "127.0.0.1");
    assert!(status["startTime"].is_string());
    for kind in [
        "PodReadyToStartContainers",
        "Initialized",
        "ContainersReady",
        "Ready",
    ] {
        assert_eq!(condition(&pod, kind)["status"], "True", "{kind}: {pod:#}");
    }
    let web = container_status(&pod, "c");
    assert!(web["state"]["running"]["startedAt"].is_string(), "{pod:#}");
    assert_eq!(web["ready"], true);
    assert_eq!(web["started"], true);
    assert_eq!(web["restartCount"], 0);
    assert_eq!(web["image"], "busybox:1.36");
    let pid = pid_of(&pod, "c");
    assert!(alive(pid));
    // `finale` runs without transparent huge pages; a Pod's process gets the host's default.
    let server = cluster.env.server.pid().expect("the server's pid");
    assert_eq!(thp_enabled(server as i32), "0", "the server turns THP off");
    assert_eq!(thp_enabled(pid), "1", "the pod's process has THP back");

    let uid = pod["metadata"]["uid"].as_str().expect("uid").to_string();
    let pod_dir = cluster.root.join("pods").join(&uid);
    let log_file = pod_dir.join("c").join("0.log");
    let text = eventually(WAIT, || {
        let text = std::fs::read_to_string(&log_file).ok()?;
        text.contains("second line").then_some(text)
    })
    .unwrap_or_else(|| panic!("no output in {}{}", log_file.display(), cluster.logs()));
    assert_eq!(text, "hello world from web\nsecond line\n");

    // The log endpoint, as the API server calls it: a client certificate from the cluster
    // CA in system:masters (the admin's).
    let pki = cluster.env.server.data_dir.join("pki");
    let admin = format!(
        "{}{}",
        std::fs::read_to_string(pki.join("admin.crt")).expect("admin.crt"),
        std::fs::read_to_string(pki.join("admin.key")).expect("admin.key")
    );
    let logs_url = format!("{}/containerLogs/default/web/c", cluster.agent.endpoint);
    let client = |identity: Option<&str>| {
        let mut builder = reqwest::blocking::Client::builder()
            .danger_accept_invalid_certs(true)
            .timeout(Duration::from_secs(15));
        if let Some(pem) = identity {
            builder =
                builder.identity(reqwest::Identity::from_pem(pem.as_bytes()).expect("identity"));
        }
        builder.build().expect("client")
    };
    let get = |identity: Option<&str>, query: &str| {
        let response = client(identity)
            .get(format!("{logs_url}{query}"))
            .send()
            .expect("log request");
        (
            response.status().as_u16(),
            response.text().unwrap_or_default(),
        )
    };
    assert_eq!(
        get(Some(&admin), ""),
        (200, "hello world from web\nsecond line\n".to_string())
    );
    assert_eq!(
        get(Some(&admin), "?tailLines=1"),
        (200, "second line\n".to_string())
    );
    assert_eq!(
        get(Some(&admin), "?limitBytes=5"),
        (200, "hello".to_string())
    );
    let (code, body) = get(Some(&admin), "?tailLines=-1");
    assert_eq!(code, 400, "{body}");
    let (code, body) = get(Some(&admin), "?previous=true");
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("previous terminated container"), "{body}");
    let (code, body) = get(None, "");
    assert_eq!(code, 401, "{body}");
    let viewer = finale_apiserver::pki::Pki::load_or_create_in(&pki, &[])
        .expect("the server's PKI")
        .issue_client_certificate("viewer", &["viewers"])
        .expect("a viewer certificate");
    let (code, body) = get(Some(&format!("{}{}", viewer.0, viewer.1)), "");
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("user=viewer"), "{body}");
    let response = client(Some(&admin))
        .get(format!(
            "{}/containerLogs/default/web/nope",
            cluster.agent.endpoint
        ))
        .send()
        .expect("log request");
    assert_eq!(response.status().as_u16(), 404);

    let started = cluster.wait_event("web", "Started");
    assert_eq!(started[0]["source"]["component"], "kubelet", "{started:#?}");
    assert_eq!(started[0]["reportingInstance"], NODE);
    assert_eq!(
        started[0]["involvedObject"]["fieldPath"],
        "spec.containers{c}"
    );

    // `sleep` dies of SIGTERM at once: the pod goes well before its 30 s grace.
    let asked = SystemTime::now();
    cluster.kubectl(&["delete", "pod", "web", "--wait=false"]);
    let gone = cluster.wait_gone("web");
    assert!(
        gone.duration_since(asked).unwrap_or_default() < Duration::from_secs(15),
        "{}",
        cluster.logs()
    );
    assert!(!alive(pid), "the process outlived its pod");
    assert!(
        eventually(Duration::from_secs(10), || (!pod_dir.exists())
            .then_some(()))
        .is_some(),
        "the pod directory is left{}",
        cluster.logs()
    );
    cluster.wait_event("web", "Killing");
    cluster.assert_nothing_left_running();
}

impl Cluster {
    fn wait_node_ready(&self) -> Value {
        eventually(WAIT, || {
            let out = self
                .env
                .kubectl
                .ok(&["get", "node", NODE, "-o", "json"])
                .ok()?;
            let node: Value = serde_json::from_str(&out).ok()?;
            let ready = node["status"]["conditions"].as_array()?.iter().any(|c| {
                c["type"] == "Ready" && c["status"] == "True" && c["reason"] == "KubeletReady"
            });
            ready.then_some(node)
        })
        .unwrap_or_else(|| panic!("node {NODE} never became Ready{}", self.logs()))
    }
}

/// A graceful delete: the preStop hook runs first, then SIGTERM, which the process traps to
/// write a marker and exit; the agent then deletes the pod without waiting out the grace.
#[test]
fn a_graceful_delete_runs_prestop_then_sigterm_and_the_pod_goes() {
    let cluster = Cluster::start();
    let term = cluster.marker("term");
    let prestop = cluster.marker("prestop");
    let mut pod = shell_pod(
        "graceful",
        &format!(
            "trap 'date +%s%N > {}; exit 0' TERM; while true; do sleep 0.1; done",
            term.display()
        ),
    );
    pod["spec"]["containers"][0]["lifecycle"] = json!({"preStop": {"exec": {"command": [
        "/bin/sh", "-c", format!("date +%s%N > {}; sleep 1", prestop.display())
    ]}}});
    cluster.create(pod);
    let pod = cluster.wait_running("graceful");
    let pid = pid_of(&pod, "c");

    let asked = now_ns();
    cluster.kubectl(&[
        "delete",
        "pod",
        "graceful",
        "--grace-period=8",
        "--wait=false",
    ]);
    let gone = ns(cluster.wait_gone("graceful"));
    let (Some(prestop_at), Some(term_at)) = (stamp(&prestop), stamp(&term)) else {
        panic!(
            "markers missing: preStop {:?}, TERM {:?}{}",
            stamp(&prestop),
            stamp(&term),
            cluster.logs()
        );
    };
    assert!(asked <= prestop_at, "the hook ran before the delete");
    // The hook takes a second; SIGTERM comes after it.
    assert!(
        term_at >= prestop_at + SECOND * 9 / 10,
        "SIGTERM {term_at} came before the preStop hook {prestop_at} finished"
    );
    // The process exited at SIGTERM: nothing waits for the rest of the 8 s grace.
    assert!(
        gone < asked + 8 * SECOND,
        "the pod went {} ms after the delete{}",
        (gone - asked) / 1_000_000,
        cluster.logs()
    );
    assert!(!alive(pid));
}

/// A process that ignores SIGTERM lives to the end of the grace period and no further: it
/// is still writing its heartbeat just before the deadline, and the pod is gone only after it.
#[test]
fn a_process_that_ignores_sigterm_is_killed_at_the_end_of_the_grace_period() {
    let cluster = Cluster::start();
    let beat = cluster.marker("beat");
    cluster.create(shell_pod("stubborn", &stubborn_script(&beat)));
    let pod = cluster.wait_running("stubborn");
    let pid = pid_of(&pod, "c");
    assert!(
        eventually(WAIT, || stamp(&beat)).is_some(),
        "no heartbeat{}",
        cluster.logs()
    );

    let asked = now_ns();
    cluster.kubectl(&[
        "delete",
        "pod",
        "stubborn",
        "--grace-period=3",
        "--wait=false",
    ]);
    let gone = ns(cluster.wait_gone("stubborn"));
    let last_beat = stamp(&beat).expect("heartbeat");
    assert!(
        gone >= asked + 3 * SECOND,
        "the pod went {} ms after a delete with a 3 s grace{}",
        (gone - asked) / 1_000_000,
        cluster.logs()
    );
    // Heartbeats every 200 ms: the last one is within a beat (and, on a loaded machine, some
    // scheduling delay) of the SIGKILL, which came no earlier than 3 s after the delete.
    assert!(
        last_beat + SECOND * 3 / 2 >= asked + 3 * SECOND,
        "the process stopped {} ms after the delete, before its 3 s grace ended{}",
        last_beat.saturating_sub(asked) / 1_000_000,
        cluster.logs()
    );
    assert!(
        gone < asked + 15 * SECOND,
        "SIGKILL came late: the pod went {} ms after the delete{}",
        (gone - asked) / 1_000_000,
        cluster.logs()
    );
    assert!(!alive(pid));
    assert!(
        last_beat < gone,
        "the process still beat after its pod was gone"
    );
}

/// A second delete with a shorter grace shortens the wait (counted from when the agent sees
/// it, as the kubelet restarts its kill); the first grace of 30 s is not waited out.
#[test]
fn a_shorter_second_delete_shortens_the_wait() {
    let cluster = Cluster::start();
    let beat = cluster.marker("beat");
    let mut pod = shell_pod("slow", &stubborn_script(&beat));
    pod["spec"]["terminationGracePeriodSeconds"] = json!(60);
    cluster.create(pod);
    let pod = cluster.wait_running("slow");
    let pid = pid_of(&pod, "c");

    let first = now_ns();
    cluster.kubectl(&["delete", "pod", "slow", "--grace-period=30", "--wait=false"]);
    // The agent has acted on the first delete (its Killing Event) before the second.
    cluster.wait_event("slow", "Killing");
    let pod = cluster.pod("slow").expect("still terminating");
    assert_eq!(pod["metadata"]["deletionGracePeriodSeconds"], 30, "{pod:#}");
    assert!(alive(pid));
    let second = now_ns();
    cluster.kubectl(&["delete", "pod", "slow", "--grace-period=2", "--wait=false"]);
    let gone = ns(cluster.wait_gone("slow"));
    assert!(
        gone < second + 12 * SECOND && gone < first + 20 * SECOND,
        "the pod went {} ms after the second delete (grace 2){}",
        (gone - second) / 1_000_000,
        cluster.logs()
    );
    let last_beat = stamp(&beat).expect("heartbeat");
    assert!(
        last_beat + SECOND * 3 / 2 >= second + 2 * SECOND,
        "killed {} ms after the second delete, before its 2 s grace{}",
        last_beat.saturating_sub(second) / 1_000_000,
        cluster.logs()
    );
    assert!(!alive(pid));
}

/// `kubectl delete --force --grace-period=0` removes the pod at once; the agent sees it gone
/// and kills its processes at once, whatever the grace they would have had.
#[test]
fn a_forced_delete_kills_the_processes_at_once() {
    let cluster = Cluster::start();
    let beat = cluster.marker("beat");
    cluster.create(shell_pod("forced", &stubborn_script(&beat)));
    let pod = cluster.wait_running("forced");
    let pid = pid_of(&pod, "c");
    let uid = pod["metadata"]["uid"].as_str().expect("uid").to_string();

    let asked = Instant::now();
    cluster.kubectl(&["delete", "pod", "forced", "--force", "--grace-period=0"]);
    assert!(
        cluster.pod("forced").is_none(),
        "a forced delete is immediate"
    );
    let died = eventually(WAIT, || (!alive(pid)).then(Instant::now))
        .unwrap_or_else(|| panic!("the process survived its forced delete{}", cluster.logs()));
    assert!(
        died.duration_since(asked) < Duration::from_secs(5),
        "the process died {:?} after the forced delete (its grace is 30 s){}",
        died.duration_since(asked),
        cluster.logs()
    );
    let pod_dir = cluster.root.join("pods").join(uid);
    assert!(
        eventually(Duration::from_secs(10), || (!pod_dir.exists())
            .then_some(()))
        .is_some(),
        "the pod directory is left{}",
        cluster.logs()
    );
    cluster.assert_nothing_left_running();
}

/// The agent is killed: its pods keep running; a pod deleted meanwhile stays Terminating with
/// its process alive past its grace period, and one force-deleted meanwhile keeps running
/// too. The restarted agent adopts the running pod (same process, not restarted), finishes
/// the termination, and kills the orphan.
#[test]
fn a_killed_agent_leaves_pods_running_and_its_successor_adopts_and_finishes_them() {
    let mut cluster = Cluster::start();
    let steady_beat = cluster.marker("steady");
    let stubborn_beat = cluster.marker("stubborn");
    let orphan_beat = cluster.marker("orphan");
    cluster.create(shell_pod(
        "steady",
        &format!(
            "while true; do date +%s%N > {}; sleep 0.2; done",
            steady_beat.display()
        ),
    ));
    cluster.create(shell_pod("stubborn", &stubborn_script(&stubborn_beat)));
    cluster.create(shell_pod("orphan", &stubborn_script(&orphan_beat)));
    let steady = cluster.wait_running("steady");
    let stubborn = cluster.wait_running("stubborn");
    let orphan = cluster.wait_running("orphan");
    let (steady_pid, stubborn_pid, orphan_pid) = (
        pid_of(&steady, "c"),
        pid_of(&stubborn, "c"),
        pid_of(&orphan, "c"),
    );

    cluster.agent.kill9();
    assert!(alive(steady_pid) && alive(stubborn_pid) && alive(orphan_pid));
    cluster.kubectl(&[
        "delete",
        "pod",
        "stubborn",
        "--grace-period=6",
        "--wait=false",
    ]);
    cluster.kubectl(&["delete", "pod", "orphan", "--force", "--grace-period=0"]);
    let terminating = cluster
        .pod("stubborn")
        .expect("stubborn stays while no agent runs");
    let deadline = terminating["metadata"]["deletionTimestamp"]
        .as_str()
        .and_then(|ts| chrono::DateTime::parse_from_rfc3339(ts).ok())
        .expect("a deletionTimestamp");
    // Measured, not slept: wait until the grace period is over by the API's clock (plus a
    // second), then the pod must still be there and its process still beating.
    let past_deadline = ns(SystemTime::from(deadline)) + SECOND;
    eventually(WAIT, || (now_ns() > past_deadline).then_some(())).expect("the clock moves");
    let still = cluster
        .pod("stubborn")
        .expect("no agent: the pod stays Terminating");
    assert!(still["metadata"]["deletionTimestamp"].is_string());
    assert!(
        alive(stubborn_pid),
        "the pod's process died without an agent"
    );
    let beat_after = eventually(WAIT, || {
        stamp(&stubborn_beat).filter(|b| *b > past_deadline)
    });
    assert!(beat_after.is_some(), "the process stopped beating");
    assert!(
        alive(orphan_pid),
        "the force-deleted pod's process died without an agent"
    );

    cluster.agent.restart();
    let restarted = SystemTime::now();
    let gone = cluster.wait_gone("stubborn");
    // The 6 s grace had run out: the successor does not start the clock again, it sends
    // SIGTERM and, 2 s later (the kubelet's minimum), SIGKILL.
    assert!(
        gone.duration_since(restarted).unwrap_or_default() < Duration::from_secs(5),
        "the successor took {:?} to finish an overdue termination{}",
        gone.duration_since(restarted).unwrap_or_default(),
        cluster.logs()
    );
    assert!(
        eventually(Duration::from_secs(10), || (!alive(stubborn_pid))
            .then_some(()))
        .is_some(),
        "the stubborn process survived{}",
        cluster.logs()
    );
    assert!(
        eventually(Duration::from_secs(10), || (!alive(orphan_pid))
            .then_some(()))
        .is_some(),
        "the orphan's process survived{}",
        cluster.logs()
    );
    let steady = cluster.wait_running("steady");
    assert_eq!(
        pid_of(&steady, "c"),
        steady_pid,
        "the adopted pod was restarted: {steady:#}"
    );
    assert_eq!(container_status(&steady, "c")["restartCount"], 0);
    assert!(alive(steady_pid));

    // The adopted pod is the agent's like any other: deleting it stops it.
    cluster.kubectl(&["delete", "pod", "steady", "--wait=false"]);
    cluster.wait_gone("steady");
    assert!(!alive(steady_pid));
    cluster.assert_nothing_left_running();
}

/// `restartPolicy`: OnFailure restarts a failure until it succeeds (Succeeded); Never keeps a
/// failure (Failed, with its exit code); Always restarts with the crash-loop back-off. A
/// container without `command` cannot run on the process runtime and says why.
#[test]
fn restart_policies_are_applied_with_the_crash_loop_back_off() {
    let cluster = Cluster::start();
    let mut on_failure = shell_pod(
        "on-failure",
        "if [ -e tried ]; then echo second; exit 0; fi; touch tried; echo first; exit 1",
    );
    on_failure["spec"]["restartPolicy"] = json!("OnFailure");
    let mut never = shell_pod("never", "exit 3");
    never["spec"]["restartPolicy"] = json!("Never");
    let always = shell_pod("always", "echo crash; exit 1");
    let mut no_command = shell_pod("no-command", "");
    no_command["spec"]["containers"][0]
        .as_object_mut()
        .expect("container")
        .remove("command");
    for pod in [on_failure, never, always, no_command] {
        cluster.create(pod);
    }

    let pod = cluster.wait_pod("on-failure", "Succeeded", |pod| {
        pod["status"]["phase"] == "Succeeded"
    });
    let c = container_status(&pod, "c");
    assert!(c["restartCount"].as_u64() >= Some(1), "{pod:#}");
    assert_eq!(c["state"]["terminated"]["exitCode"], 0);
    assert_eq!(c["state"]["terminated"]["reason"], "Completed");
    assert_eq!(c["lastState"]["terminated"]["exitCode"], 1);
    assert_eq!(c["lastState"]["terminated"]["reason"], "Error");
    assert_eq!(condition(&pod, "Ready")["reason"], "PodCompleted");
    let uid = pod["metadata"]["uid"].as_str().expect("uid");
    let logs = cluster.root.join("pods").join(uid).join("c");
    assert_eq!(
        std::fs::read_to_string(logs.join("0.log")).ok().as_deref(),
        Some("first\n")
    );
    assert_eq!(
        std::fs::read_to_string(logs.join("1.log")).ok().as_deref(),
        Some("second\n")
    );

    let pod = cluster.wait_pod("never", "Failed", |pod| pod["status"]["phase"] == "Failed");
    let c = container_status(&pod, "c");
    assert_eq!(c["state"]["terminated"]["exitCode"], 3, "{pod:#}");
    assert_eq!(c["state"]["terminated"]["reason"], "Error");
    assert_eq!(c["restartCount"], 0);

    let pod = cluster.wait_pod("always", "crash-looping", |pod| {
        let c = container_status(pod, "c");
        c["restartCount"].as_u64() >= Some(2)
            && c["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    });
    let c = container_status(&pod, "c");
    assert_eq!(pod["status"]["phase"], "Running", "{pod:#}");
    assert_eq!(c["lastState"]["terminated"]["exitCode"], 1);
    let message = c["state"]["waiting"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        message.starts_with("back-off ") && message.contains("restarting failed container=c"),
        "{message}"
    );
    cluster.wait_event("always", "BackOff");
    let restarts = c["restartCount"].as_u64().unwrap_or(0);
    cluster.wait_pod("always", "restarted again", |pod| {
        container_status(pod, "c")["restartCount"].as_u64() > Some(restarts)
    });

    let pod = cluster.wait_pod("no-command", "refused", |pod| {
        container_status(pod, "c")["state"]["waiting"]["reason"] == "CreateContainerConfigError"
    });
    assert_eq!(pod["status"]["phase"], "Pending");
    let message = container_status(&pod, "c")["state"]["waiting"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(message.contains("command"), "{message}");

    for name in ["on-failure", "never", "always", "no-command"] {
        cluster.kubectl(&["delete", "pod", name, "--wait=false"]);
    }
    for name in ["on-failure", "never", "always", "no-command"] {
        cluster.wait_gone(name);
    }
    cluster.assert_nothing_left_running();
}

/// Init containers run one at a time, in order, each to success, before the app container;
/// under `restartPolicy: Never` a failing one fails the pod and the app never runs.
#[test]
fn init_containers_run_in_order_before_the_app() {
    let cluster = Cluster::start();
    let order = cluster.marker("order");
    let append = |word: &str| {
        json!([
            "/bin/sh",
            "-c",
            format!("echo {word} >> {}", order.display())
        ])
    };
    let mut pod = shell_pod(
        "init",
        &format!("echo app >> {}; exec sleep 1000", order.display()),
    );
    pod["spec"]["initContainers"] = json!([
        {"name": "first", "image": "busybox", "command": append("first")},
        {"name": "second", "image": "busybox",
         "command": ["/bin/sh", "-c", format!("sleep 0.5; echo second >> {}", order.display())]},
    ]);
    cluster.create(pod);
    let pod = cluster.wait_running("init");
    assert_eq!(
        std::fs::read_to_string(&order).ok().as_deref(),
        Some("first\nsecond\napp\n")
    );
    let init = pod["status"]["initContainerStatuses"]
        .as_array()
        .expect("init statuses");
    assert_eq!(init.len(), 2, "{pod:#}");
    for status in init {
        assert_eq!(status["state"]["terminated"]["exitCode"], 0, "{pod:#}");
        assert_eq!(status["state"]["terminated"]["reason"], "Completed");
    }
    assert_eq!(condition(&pod, "Initialized")["status"], "True");

    let never_ran = cluster.marker("never-ran");
    let mut failing = shell_pod(
        "init-fails",
        &format!("touch {}; exec sleep 1000", never_ran.display()),
    );
    failing["spec"]["restartPolicy"] = json!("Never");
    failing["spec"]["initContainers"] =
        json!([{"name": "setup", "image": "busybox", "command": ["/bin/sh", "-c", "exit 7"]}]);
    cluster.create(failing);
    let pod = cluster.wait_pod("init-fails", "Failed", |pod| {
        pod["status"]["phase"] == "Failed"
    });
    assert_eq!(
        pod["status"]["initContainerStatuses"][0]["state"]["terminated"]["exitCode"], 7,
        "{pod:#}"
    );
    assert_eq!(condition(&pod, "Initialized")["status"], "False");
    assert!(
        container_status(&pod, "c")["state"]["waiting"].is_object(),
        "{pod:#}"
    );
    assert!(
        !never_ran.exists(),
        "the app container ran after a failed init container"
    );

    for name in ["init", "init-fails"] {
        cluster.kubectl(&["delete", "pod", name, "--wait=false"]);
    }
    for name in ["init", "init-fails"] {
        cluster.wait_gone(name);
    }
    cluster.assert_nothing_left_running();
}

/// An exec readiness probe drives `ready` and the Ready condition both ways; a failing exec
/// liveness probe gets the container killed and restarted.
#[test]
fn exec_probes_drive_readiness_and_restart_unhealthy_containers() {
    let cluster = Cluster::start();
    let ready_file = cluster.marker("ready");
    let sick_file = cluster.marker("sick");
    let mut pod = shell_pod("probed", "exec sleep 1000");
    pod["spec"]["terminationGracePeriodSeconds"] = json!(2);
    pod["spec"]["containers"][0]["readinessProbe"] = json!({
        "exec": {"command": ["test", "-e", ready_file.display().to_string()]},
        "periodSeconds": 1, "failureThreshold": 1,
    });
    pod["spec"]["containers"][0]["livenessProbe"] = json!({
        "exec": {"command": ["test", "!", "-e", sick_file.display().to_string()]},
        "periodSeconds": 1, "failureThreshold": 1,
    });
    cluster.create(pod);
    let pod = cluster.wait_running("probed");
    assert_eq!(container_status(&pod, "c")["ready"], false, "{pod:#}");
    assert_eq!(condition(&pod, "Ready")["status"], "False");
    assert_eq!(
        condition(&pod, "ContainersReady")["reason"],
        "ContainersNotReady"
    );
    let first_pid = pid_of(&pod, "c");

    std::fs::write(&ready_file, "").expect("ready file");
    cluster.wait_pod("probed", "Ready", |pod| {
        condition(pod, "Ready")["status"] == "True" && container_status(pod, "c")["ready"] == true
    });
    std::fs::remove_file(&ready_file).expect("remove ready file");
    cluster.wait_pod("probed", "not Ready again", |pod| {
        condition(pod, "Ready")["status"] == "False"
    });
    cluster.wait_event("probed", "Unhealthy");

    std::fs::write(&sick_file, "").expect("sick file");
    cluster.wait_pod("probed", "restarted", |pod| {
        container_status(pod, "c")["restartCount"].as_u64() >= Some(1)
    });
    std::fs::remove_file(&sick_file).expect("remove sick file");
    let killing = cluster.wait_event("probed", "Killing");
    assert!(
        killing
            .iter()
            .any(|e| e["message"] == "Container c failed liveness probe, will be restarted"),
        "{killing:#?}"
    );
    let pod = cluster.wait_pod("probed", "running again", |pod| {
        container_status(pod, "c")["state"]["running"].is_object()
    });
    assert_ne!(pid_of(&pod, "c"), first_pid);
    assert!(!alive(first_pid));
    let last = &container_status(&pod, "c")["lastState"]["terminated"];
    assert_eq!(last["exitCode"], 143, "killed by SIGTERM: {pod:#}");

    cluster.kubectl(&["delete", "pod", "probed", "--wait=false"]);
    cluster.wait_gone("probed");
    cluster.assert_nothing_left_running();
}

/// httpGet probes against a real HTTP server (python3's): readiness turns True once it
/// answers 200; when the liveness path starts answering 404 the container is restarted.
#[test]
fn http_probes_reach_the_pods_server_on_the_host_network() {
    let cluster = Cluster::start();
    let www = cluster.marker("www");
    std::fs::create_dir_all(&www).expect("www");
    std::fs::write(www.join("alive"), "ok").expect("alive file");
    let port = finale_e2e::free_port().expect("a free port");
    let mut pod = shell_pod("http", "");
    pod["spec"]["terminationGracePeriodSeconds"] = json!(2);
    let container = &mut pod["spec"]["containers"][0];
    container["command"] = json!([
        "python3",
        "-m",
        "http.server",
        port.to_string(),
        "--bind",
        "127.0.0.1"
    ]);
    container["workingDir"] = json!(www.display().to_string());
    container["readinessProbe"] = json!({
        "httpGet": {"path": "/alive", "port": port}, "periodSeconds": 1,
    });
    container["livenessProbe"] = json!({
        "httpGet": {"path": "/alive", "port": "http"}, "periodSeconds": 1,
        "initialDelaySeconds": 1, "failureThreshold": 2,
    });
    container["ports"] = json!([{"name": "http", "containerPort": port}]);
    cluster.create(pod);
    let pod = cluster.wait_pod("http", "Ready", |pod| {
        condition(pod, "Ready")["status"] == "True"
    });
    assert_eq!(container_status(&pod, "c")["restartCount"], 0, "{pod:#}");
    let pid = pid_of(&pod, "c");

    std::fs::remove_file(www.join("alive")).expect("remove alive");
    cluster.wait_pod("http", "restarted", |pod| {
        container_status(pod, "c")["restartCount"].as_u64() >= Some(1)
    });
    let unhealthy = cluster.wait_event("http", "Unhealthy");
    assert!(
        unhealthy.iter().any(|e| e["message"]
            .as_str()
            .is_some_and(|m| m.contains("HTTP probe failed with statuscode: 404"))),
        "{unhealthy:#?}"
    );
    assert!(
        eventually(Duration::from_secs(10), || (!alive(pid)).then_some(())).is_some(),
        "the unhealthy server survived{}",
        cluster.logs()
    );
    cluster.kubectl(&["delete", "pod", "http", "--wait=false"]);
    cluster.wait_gone("http");
    cluster.assert_nothing_left_running();
}
