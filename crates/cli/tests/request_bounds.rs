//! Requests that try to make the server build something far larger than they are: each is
//! answered with the right `Status`, nothing is stored, and the server's peak memory stays
//! small (issue #18, item 2).
//!
//! The server is the real binary in a child process, so its memory is its own: the test reads
//! the peak resident set (`VmHWM` in `/proc/<pid>/status`) after the attacks. So that an
//! unbounded server cannot take the machine down with it, its address space is capped with
//! `prlimit` at start: without the bounds, the first amplifying request makes an allocation
//! fail and the server die, and the test reports which request killed it.

mod common;

use std::time::{Duration, Instant};

use common::{Env, configmap};
use serde_json::{Value, json};

const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";

/// Headroom the server gets on top of its address space at start. Every attack below, left
/// unbounded, needs far more than this; a bounded server needs a small fraction of it.
const ADDRESS_SPACE_HEADROOM: u64 = 2 << 30;

/// The peak resident set the server may reach over the whole test. An idle server uses a few
/// tens of MiB; each bounded attack needs at most a few times the 3 MiB request limit.
const PEAK_RSS_LIMIT: u64 = 256 << 20;

/// One value from `/proc/<pid>/status`, in bytes (the file gives kB).
fn proc_status_bytes(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("read /proc/{pid}/status: {e}"));
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.trim().strip_suffix("kB"))
        .and_then(|kb| kb.trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status:\n{status}"))
}

/// Caps the running server's address space at its current size plus the headroom.
fn cap_address_space(pid: u32) {
    let limit = proc_status_bytes(pid, "VmSize") + ADDRESS_SPACE_HEADROOM;
    let output = std::process::Command::new("prlimit")
        .arg("--pid")
        .arg(pid.to_string())
        .arg(format!("--as={limit}:{limit}"))
        .output()
        .expect("run prlimit (util-linux) to cap the server's memory");
    assert!(
        output.status.success(),
        "prlimit failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

struct Attack {
    name: &'static str,
    method: reqwest::Method,
    path: String,
    content_type: &'static str,
    body: Vec<u8>,
    code: u16,
    reason: &'static str,
    /// Fragments the `Status` message must contain, so a person can tell what to fix.
    message: &'static [&'static str],
}

/// Sends one attack and checks the answer; panics with the server log if the server died.
fn run(env: &mut Env, attack: Attack) {
    let pid = env.server.pid().expect("the server runs");
    let api = env.api();
    let started = Instant::now();
    let response = api.request(
        attack.method,
        &attack.path,
        Some(attack.content_type),
        Some(attack.body),
    );
    let elapsed = started.elapsed();
    let alive = env.server.is_running();
    let response = match response {
        Ok(response) if alive => response,
        other => panic!(
            "{}: the server did not answer ({}); it {} (peak RSS so far: {} MiB){}",
            attack.name,
            other.map_or_else(|e| format!("{e:#}"), |r| format!("HTTP {}", r.status)),
            if alive {
                "is still running"
            } else {
                "died: an unbounded amplification ran into the memory cap or the stack"
            },
            if alive {
                proc_status_bytes(pid, "VmHWM") >> 20
            } else {
                0
            },
            env.log()
        ),
    };
    let status = response.expect_status(attack.code, attack.reason);
    let message = status["message"].as_str().unwrap_or_default();
    for fragment in attack.message {
        assert!(
            message.contains(fragment),
            "{}: the message should contain {fragment:?}: {status}",
            attack.name
        );
    }
    assert!(
        elapsed < Duration::from_secs(10),
        "{}: answering took {elapsed:?}",
        attack.name
    );
}

fn json_patch(name: &str, operations: &[Value]) -> (String, Vec<u8>) {
    (
        format!("{CONFIGMAPS}/{name}"),
        serde_json::to_vec(operations).expect("encode the patch"),
    )
}

/// `n` nested YAML anchors, each a list of ten aliases to the previous one, over one scalar of
/// `scalar_bytes`: `10^n` copies of the scalar once every alias is expanded ("billion laughs").
fn alias_bomb(levels: usize, scalar_bytes: usize) -> String {
    let mut yaml = format!("l0: &l0 \"{}\"\n", "x".repeat(scalar_bytes));
    for level in 1..=levels {
        let previous = format!("*l{}", level - 1);
        let aliases = [previous.as_str(); 10].join(", ");
        yaml.push_str(&format!("l{level}: &l{level} [{aliases}]\n"));
    }
    yaml
}

/// A `k8s\0` protobuf envelope around a ConfigMap whose bytes open `depth` nested groups of an
/// unknown field and close them again.
fn deeply_nested_protobuf(depth: usize) -> Vec<u8> {
    fn field(number: u8, bytes: &[u8]) -> Vec<u8> {
        let mut out = vec![(number << 3) | 2];
        let mut length = bytes.len();
        loop {
            let byte = (length & 0x7f) as u8;
            length >>= 7;
            if length == 0 {
                out.push(byte);
                break;
            }
            out.push(byte | 0x80);
        }
        out.extend_from_slice(bytes);
        out
    }
    // Field 15: start group is (15 << 3) | 3, end group (15 << 3) | 4.
    let mut raw = vec![0x7b; depth];
    raw.extend(std::iter::repeat_n(0x7c, depth));
    let mut type_meta = field(1, b"v1");
    type_meta.extend(field(2, b"ConfigMap"));
    let mut unknown = field(1, &type_meta);
    unknown.extend(field(2, &raw));
    let mut body = b"k8s\0".to_vec();
    body.extend(unknown);
    body
}

#[test]
fn amplifying_requests_are_refused_and_peak_memory_stays_small() {
    let mut env = Env::start();
    let pid = env.server.pid().expect("the server runs");
    cap_address_space(pid);
    let api = env.api();

    // Targets: a ConfigMap with 1 KiB of data, and one whose data holds a 10-level chain.
    let kib = "k".repeat(1024);
    let created = api
        .post_json(CONFIGMAPS, &configmap("target", &[("blob", &kib)]))
        .unwrap();
    assert_eq!(created.status, 201, "{}", created.body);
    let before = api.get(&format!("{CONFIGMAPS}/target")).unwrap().json();

    // 1. `copy` of a map into its own child doubles it: 30 of them would be a terabyte.
    let doubling: Vec<Value> = (0..30)
        .map(|i| json!({"op": "copy", "from": "/data", "path": format!("/data/copy{i}")}))
        .collect();
    let (path, body) = json_patch("target", &doubling);
    run(
        &mut env,
        Attack {
            name: "JSON patch copy doubling",
            method: reqwest::Method::PATCH,
            path,
            content_type: "application/json-patch+json",
            body,
            code: 422,
            reason: "Invalid",
            message: &[
                "the accumulated size increase of copy is",
                "exceeding the limit 3145728",
            ],
        },
    );

    // 2. More operations than upstream's maximum: 413 before anything is applied.
    let many: Vec<Value> = (0..10_001)
        .map(|_| json!({"op": "test", "path": "/metadata/name", "value": "target"}))
        .collect();
    let (path, body) = json_patch("target", &many);
    run(
        &mut env,
        Attack {
            name: "JSON patch with 10001 operations",
            method: reqwest::Method::PATCH,
            path,
            content_type: "application/json-patch+json",
            body,
            code: 413,
            reason: "RequestEntityTooLarge",
            message: &[
                "Request entity too large: The allowed maximum operations in a JSON patch is 10000, got 10001",
            ],
        },
    );

    // 3. Copying a chain over its own leaf doubles its depth: past some ten thousand levels,
    // cloning, dropping or serializing the document overflows the stack.
    let mut chain = json!("leaf");
    for _ in 0..10 {
        chain = json!({ "n": chain });
    }
    let mut deepening = vec![json!({"op": "add", "path": "/chain", "value": chain})];
    let mut depth = 10;
    for _ in 0..17 {
        let leaf = format!("/chain{}", "/n".repeat(depth));
        deepening.push(json!({"op": "copy", "from": "/chain", "path": leaf}));
        depth *= 2;
    }
    let (path, body) = json_patch("target", &deepening);
    assert!(body.len() < 3 << 20, "the patch fits the body limit");
    run(
        &mut env,
        Attack {
            name: "JSON patch depth doubling",
            method: reqwest::Method::PATCH,
            path,
            content_type: "application/json-patch+json",
            body,
            code: 422,
            reason: "Invalid",
            message: &["nested more than 127 levels"],
        },
    );

    // 4. A YAML alias bomb as a create body: 10^6 copies of a 4 KiB scalar.
    let bomb = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bomb\ndata:\n  k: v\n{}",
        alias_bomb(6, 4096)
    );
    run(
        &mut env,
        Attack {
            name: "YAML alias bomb (create)",
            method: reqwest::Method::POST,
            path: CONFIGMAPS.to_string(),
            content_type: "application/yaml",
            body: bomb.clone().into_bytes(),
            code: 400,
            reason: "BadRequest",
            message: &["aliases"],
        },
    );

    // 5. The same as a server-side apply body (kubectl apply --server-side sends YAML's
    // superset, JSON, but YAML is the declared format).
    run(
        &mut env,
        Attack {
            name: "YAML alias bomb (server-side apply)",
            method: reqwest::Method::PATCH,
            path: format!("{CONFIGMAPS}/bomb?fieldManager=attacker"),
            content_type: "application/apply-patch+yaml",
            body: bomb.into_bytes(),
            code: 400,
            reason: "BadRequest",
            message: &["aliases"],
        },
    );

    // 6. JSON nested 100 000 levels deep.
    let deep_json = format!(
        "{{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{{\"name\":\"deep\"}},\"x\":{}{}}}",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    run(
        &mut env,
        Attack {
            name: "JSON nested 100000 levels",
            method: reqwest::Method::POST,
            path: CONFIGMAPS.to_string(),
            content_type: "application/json",
            body: deep_json.into_bytes(),
            code: 400,
            reason: "BadRequest",
            message: &["recursion limit"],
        },
    );

    // 7. Protobuf with 100 000 nested groups.
    run(
        &mut env,
        Attack {
            name: "protobuf nested 100000 levels",
            method: reqwest::Method::POST,
            path: CONFIGMAPS.to_string(),
            content_type: "application/vnd.kubernetes.protobuf",
            body: deeply_nested_protobuf(100_000),
            code: 400,
            reason: "BadRequest",
            message: &["recursion limit"],
        },
    );

    // 8. A strategic merge patch whose directive lists are as long as the body allows: list
    // elements must be matched through indexes, or the merge takes hours. The patch also
    // renames the object, so once merged it is refused and nothing is stored.
    let finalizers: Vec<String> = (0..60_000)
        .map(|i| format!("example.com/f{i:07}"))
        .collect();
    let strategic = json!({"metadata": {
        "name": "renamed",
        "$setElementOrder/finalizers": finalizers,
        "finalizers": finalizers,
    }});
    let body = serde_json::to_vec(&strategic).unwrap();
    assert!(body.len() < 3 << 20, "the patch fits the body limit");
    run(
        &mut env,
        Attack {
            name: "strategic merge patch with 60000-element directive lists",
            method: reqwest::Method::PATCH,
            path: format!("{CONFIGMAPS}/target"),
            content_type: "application/strategic-merge-patch+json",
            body,
            code: 400,
            reason: "BadRequest",
            message: &["a patch cannot rename an object"],
        },
    );

    // Nothing was stored or changed, and the server still serves.
    assert_eq!(api.configmap_names("default"), ["target"]);
    let after = api.get(&format!("{CONFIGMAPS}/target")).unwrap().json();
    assert_eq!(after, before, "the target is unchanged");
    let peak = proc_status_bytes(pid, "VmHWM");
    assert!(
        peak < PEAK_RSS_LIMIT,
        "the server's peak resident set reached {} MiB (limit {} MiB){}",
        peak >> 20,
        PEAK_RSS_LIMIT >> 20,
        env.log()
    );
}

/// `apiserver_terminated_watchers_total` for ConfigMaps, from `/metrics`.
fn terminated_configmap_watchers(api: &common::Api) -> u64 {
    let metrics = api.get("/metrics").expect("GET /metrics");
    metrics
        .body
        .lines()
        .find_map(|line| {
            line.strip_prefix(
                "apiserver_terminated_watchers_total{group=\"\",resource=\"configmaps\"} ",
            )
        })
        .map(|count| count.trim().parse().expect("counter value"))
        .unwrap_or(0)
}

/// A client that stops reading its watch does not make the server queue events for it: once
/// the watcher's bounded buffer is full and stays full, the server closes the watch (counted
/// in `apiserver_terminated_watchers_total`, as kube-apiserver counts the unresponsive
/// watchers it closes), and the client, reading again, finds its stream ended early and
/// resumes from the last resourceVersion it read, missing nothing.
#[test]
fn a_watcher_that_stops_reading_is_closed_and_its_client_resumes() {
    use std::io::{BufRead, BufReader};

    let env = Env::start();
    let api = env.api();
    let created = api
        .post_json(CONFIGMAPS, &configmap("stalled", &[("blob", "")]))
        .expect("create");
    assert_eq!(created.status, 201, "{}{}", created.body, env.log());
    let from = common::resource_version(&created.json());
    assert_eq!(terminated_configmap_watchers(&api), 0);

    // The watch is opened and then not read: no timeoutSeconds, so only the server's
    // unresponsive-watcher rule can end it.
    let ca = reqwest::Certificate::from_pem(env.server.ca_pem().expect("CA").as_bytes())
        .expect("CA certificate");
    let client = reqwest::blocking::Client::builder()
        .add_root_certificate(ca)
        .timeout(Duration::from_secs(120))
        .build()
        .expect("client");
    let watch = client
        .get(format!(
            "{}{CONFIGMAPS}?watch=1&resourceVersion={from}&fieldSelector=metadata.name%3Dstalled",
            env.server.url
        ))
        .bearer_auth(env.server.token().expect("token"))
        .send()
        .expect("open the watch");
    assert_eq!(watch.status().as_u16(), 200);

    // Each update is a 64 KiB event for the watcher; the socket buffers and the watcher's
    // buffer fill after a few hundred. Bounded in count and time.
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut updates = 0u32;
    let mut last_written = from;
    while terminated_configmap_watchers(&api) == 0 {
        assert!(
            updates < 4000 && Instant::now() < deadline,
            "the stalled watcher was never closed after {updates} updates{}",
            env.log()
        );
        for _ in 0..20 {
            updates += 1;
            let blob = format!("{updates:08}{}", "x".repeat(64 * 1024));
            let patch = serde_json::to_vec(&json!({"data": {"blob": blob}})).expect("patch");
            let patched = api
                .request(
                    reqwest::Method::PATCH,
                    &format!("{CONFIGMAPS}/stalled"),
                    Some("application/merge-patch+json"),
                    Some(patch),
                )
                .expect("patch");
            assert_eq!(patched.status, 200, "{}{}", patched.body, env.log());
            last_written = common::resource_version(&patched.json());
        }
    }
    assert_eq!(terminated_configmap_watchers(&api), 1);
    assert!(
        env.server.log_tail(200).contains("unresponsive"),
        "the server should say why it closed the watch{}",
        env.log()
    );

    // Reading again: what was buffered arrives, then the stream ends, short of the last write.
    let mut last_read = from;
    let mut read = 0u32;
    for line in BufReader::new(watch).lines() {
        let line = line.expect("the closed watch ends cleanly, not by the client's timeout");
        let event: Value = serde_json::from_str(&line).expect("watch event JSON");
        assert_eq!(event["type"], "MODIFIED", "{line:.200}");
        last_read = common::resource_version(&event["object"]);
        read += 1;
    }
    assert!(
        last_read < last_written && read < updates,
        "the watch was cut short: read {read} of {updates} updates, up to {last_read} of {last_written}"
    );

    // The client resumes from the last resourceVersion it read and misses nothing.
    let rest = common::watch_until(
        &env.server,
        &format!("{CONFIGMAPS}?fieldSelector=metadata.name%3Dstalled"),
        last_read,
        |_, object| common::resource_version(object) == last_written,
    );
    assert_eq!(
        rest.len() as u32,
        updates - read,
        "every update after the cut arrives on the re-watch"
    );
    assert_eq!(rest.last().map(|(rv, _, _)| *rv), Some(last_written));
}
