//! Plan mode against the real DELETE, by property testing (issue 11): for random ownership
//! graphs, Plan's prediction is what the garbage collector then does.
//!
//! A case is a random DAG of ConfigMaps (each may name up to two earlier ones as owners, each
//! reference with a random `blockOwnerDeletion`); some carry a finalizer a live controller
//! claims (`plan-model.finale.dev/live`, whose claim's Lease the test keeps live and which the
//! test itself removes from terminating objects, acting as that controller) or one nobody
//! claims (`plan-model.finale.dev/stuck`). One object is deleted with a random policy (or
//! none). Each case runs in a namespace of its own on one in-process server:
//!
//! 1. Plan is asked; its tree gives each object's predicted fate.
//! 2. The DELETE is sent, and the test waits until the namespace stops changing (checked
//!    across a garbage-collector sentinel, not after a sleep). While the hangs last, the
//!    objects Plan says stay are there and not terminating, every object hanging on the stuck
//!    finalizer is one Plan counts as deleted, and Plan's verdict is `WillHang` exactly when
//!    something hangs. Which deleted objects are already gone at that point is not asserted:
//!    in foreground deletion it depends on the collector's timing (a dependent reached before
//!    or after its other owner's `foregroundDeletion` goes), and both orders happen.
//! 3. The test then removes the stuck finalizers too (the hangs resolved by hand); the
//!    namespace must settle with exactly the objects Plan said are deleted gone, and every
//!    survivor's ownerReferences naming only surviving owners.
//!
//! Deterministic: `PLAN_MODEL_SEED` (a number) picks the run, printed on failure;
//! `PROPTEST_CASES` lengthens it.

mod common;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::TestServer;
use common::raw::{Http, uid};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestError, TestRng, TestRunner};
use serde_json::{Value, json};

const LIVE: &str = "plan-model.finale.dev/live";
const STUCK: &str = "plan-model.finale.dev/stuck";
/// The bound on settling after one step.
const SETTLE: Duration = Duration::from_secs(10);
const DEFAULT_SEED: u64 = 0x5EED_0011;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Finalizer {
    None,
    Live,
    Stuck,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct OwnerLink {
    owner: usize,
    block: bool,
}

#[derive(Clone, PartialEq, Eq)]
struct Scenario {
    owners: Vec<Vec<OwnerLink>>,
    finalizers: Vec<Finalizer>,
    target: usize,
    policy: Option<&'static str>,
}

impl fmt::Debug for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, owners) in self.owners.iter().enumerate() {
            let owners: Vec<String> = owners
                .iter()
                .map(|l| format!("c{}{}", l.owner, if l.block { "*" } else { "" }))
                .collect();
            writeln!(
                f,
                "  c{index} owners=[{}] finalizer={:?}",
                owners.join(", "),
                self.finalizers[index]
            )?;
        }
        writeln!(
            f,
            "  DELETE c{} propagationPolicy={:?}",
            self.target, self.policy
        )
    }
}

fn owner_links(index: usize) -> BoxedStrategy<Vec<OwnerLink>> {
    if index == 0 {
        return Just(Vec::new()).boxed();
    }
    let link = (prop_oneof![Just(index - 1), 0..index], any::<bool>())
        .prop_map(|(owner, block)| OwnerLink { owner, block });
    (
        prop::option::weighted(0.85, link.clone()),
        prop::option::weighted(0.4, link),
    )
        .prop_map(|(first, second)| {
            let mut links: Vec<OwnerLink> = Vec::new();
            for link in [first, second].into_iter().flatten() {
                if links.iter().all(|l| l.owner != link.owner) {
                    links.push(link);
                }
            }
            links.sort_by_key(|l| l.owner);
            links
        })
        .boxed()
}

fn scenarios() -> impl Strategy<Value = Scenario> {
    (2usize..=8).prop_flat_map(|count| {
        let owners: Vec<BoxedStrategy<Vec<OwnerLink>>> = (0..count).map(owner_links).collect();
        let finalizer = prop_oneof![
            6 => Just(Finalizer::None),
            2 => Just(Finalizer::Live),
            1 => Just(Finalizer::Stuck)
        ];
        let policy = prop_oneof![
            Just(None),
            Just(Some("Background")),
            Just(Some("Foreground")),
            Just(Some("Orphan"))
        ];
        (
            owners,
            prop::collection::vec(finalizer, count),
            prop_oneof![3 => 0..count.min(2), 1 => 0..count],
            policy,
        )
            .prop_map(|(owners, finalizers, target, policy)| Scenario {
                owners,
                finalizers,
                target,
                policy,
            })
    })
}

/// One object as observed: terminating or not, and the names of its owners.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Seen {
    terminating: bool,
    owners: Vec<String>,
}

/// Name → what is there (absent names are gone).
type State = BTreeMap<String, Seen>;

async fn observe(http: &Http, namespace: &str) -> Result<(State, Vec<Value>), String> {
    let reply = http
        .get(&format!("/api/v1/namespaces/{namespace}/configmaps"))
        .await;
    if reply.status != 200 {
        return Err(format!("cannot list {namespace}: {}", reply.body));
    }
    let items: Vec<Value> = reply.body["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|i| {
            i["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with('c'))
        })
        .collect();
    let mut state = State::new();
    for item in &items {
        let metadata = &item["metadata"];
        let mut owners: Vec<String> = metadata["ownerReferences"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["name"].as_str().map(str::to_string))
            .collect();
        owners.sort();
        state.insert(
            metadata["name"].as_str().unwrap_or_default().to_string(),
            Seen {
                terminating: metadata["deletionTimestamp"].is_string(),
                owners,
            },
        );
    }
    Ok((state, items))
}

/// Removes `finalizers` from every terminating object that has one, as their controller
/// would. Returns whether it removed any.
async fn finalize(http: &Http, namespace: &str, items: &[Value], finalizers: &[&str]) -> bool {
    let mut removed = false;
    for item in items {
        let metadata = &item["metadata"];
        if !metadata["deletionTimestamp"].is_string() {
            continue;
        }
        let list: Vec<&str> = metadata["finalizers"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        if !list.iter().any(|f| finalizers.contains(f)) {
            continue;
        }
        let kept: Vec<&str> = list
            .into_iter()
            .filter(|f| !finalizers.contains(f))
            .collect();
        let name = metadata["name"].as_str().unwrap_or_default();
        // A conflict or 404 just means it changed meanwhile; the next round looks again.
        let _ = http
            .merge_patch(
                &format!("/api/v1/namespaces/{namespace}/configmaps/{name}"),
                &json!({"metadata": {"finalizers": kept, "resourceVersion": metadata["resourceVersion"]}}),
            )
            .await;
        removed = true;
    }
    removed
}

/// Settles the namespace at `expected`, acting as the controller of `finalizers`; checked
/// again after the collector worked through a sentinel.
async fn settle(
    http: &Http,
    namespace: &str,
    expected: &State,
    finalizers: &[&str],
) -> Result<(), String> {
    let started = tokio::time::Instant::now();
    loop {
        let (observed, items) = observe(http, namespace).await?;
        let acted = finalize(http, namespace, &items, finalizers).await;
        if !acted && observed == *expected {
            http.collector_caught_up(namespace).await;
            let (after, items) = observe(http, namespace).await?;
            let acted = finalize(http, namespace, &items, finalizers).await;
            if !acted && after == *expected {
                return Ok(());
            }
        }
        if started.elapsed() >= SETTLE {
            return Err(format!(
                "after {SETTLE:?} the namespace differs from the plan.\nexpected: {expected:#?}\nobserved: {observed:#?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Name → the plan's node about it (outcome and hang evidence).
fn predictions(status: &Value) -> BTreeMap<String, Value> {
    fn walk(node: &Value, out: &mut BTreeMap<String, Value>) {
        if matches!(node["type"].as_str(), Some("Deletes" | "Orphans" | "Keeps"))
            && let Some(name) = node["object"]["name"].as_str()
        {
            out.insert(name.to_string(), node["evidence"].clone());
        }
        for child in node["children"].as_array().into_iter().flatten() {
            walk(child, out);
        }
    }
    let mut out = BTreeMap::new();
    for root in status["causes"].as_array().into_iter().flatten() {
        walk(root, &mut out);
    }
    out
}

async fn run_case(http: &Http, namespace: &str, scenario: &Scenario) -> Result<(), String> {
    http.post(
        "/api/v1/namespaces",
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}),
    )
    .await
    .expect(201);
    let mut created: Vec<Value> = Vec::new();
    let mut initial = State::new();
    for (index, owners) in scenario.owners.iter().enumerate() {
        let references: Vec<Value> = owners
            .iter()
            .map(|link| {
                let owner = &created[link.owner];
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "name": owner["metadata"]["name"], "uid": uid(owner),
                    "blockOwnerDeletion": link.block})
            })
            .collect();
        let finalizers: Vec<&str> = match scenario.finalizers[index] {
            Finalizer::None => vec![],
            Finalizer::Live => vec![LIVE],
            Finalizer::Stuck => vec![STUCK],
        };
        let name = format!("c{index}");
        let object = http
            .post(
                &format!("/api/v1/namespaces/{namespace}/configmaps"),
                &json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": name, "ownerReferences": references,
                        "finalizers": finalizers}}),
            )
            .await
            .expect(201);
        let mut owner_names: Vec<String> = owners.iter().map(|l| format!("c{}", l.owner)).collect();
        owner_names.sort();
        initial.insert(
            name,
            Seen {
                terminating: false,
                owners: owner_names,
            },
        );
        created.push(object);
    }
    // The collector must know the graph Plan reads from before Plan is asked.
    http.collector_caught_up(namespace).await;

    let target = format!("c{}", scenario.target);
    let mut spec = json!({"target": {"apiVersion": "v1", "kind": "ConfigMap",
        "namespace": namespace, "name": target}, "mode": "Plan", "maxNodes": 10000});
    if let Some(policy) = scenario.policy {
        spec["propagationPolicy"] = json!(policy);
    }
    let answer = http
        .post(
            "/apis/deletion.finale.dev/v1alpha1/deletionreviews",
            &json!({"apiVersion": "deletion.finale.dev/v1alpha1", "kind": "DeletionReview", "spec": spec}),
        )
        .await
        .expect(201);
    let status = &answer["status"];
    let predicted = predictions(status);
    let context = |why: String| format!("{why}\nplan: {:#}", status);

    let path = format!("/api/v1/namespaces/{namespace}/configmaps/{target}");
    let reply = match scenario.policy {
        Some(policy) => {
            http.delete_with(&path, &json!({"propagationPolicy": policy}))
                .await
        }
        None => http.delete(&path).await,
    };
    if reply.status != 200 && reply.status != 202 {
        return Err(format!("DELETE {path}: {} {}", reply.status, reply.body));
    }
    // While hangs last: survivors are there and not deleted; whatever is terminating with
    // the stuck finalizer is an object Plan counts as hanging. (Which deleted objects are
    // gone or still wait at this point depends on the collector's timing in foreground
    // deletion — both orders happen — so it is not asserted.)
    let meanwhile = quiesce(http, namespace, &[LIVE]).await.map_err(context)?;
    for (name, seen) in &initial {
        let fate = predicted.get(name);
        let deleted = fate.is_some_and(|e| e["outcome"] == "Deleted");
        let now = meanwhile.get(name);
        if !deleted && now.is_none_or(|s| s.terminating) {
            return Err(context(format!(
                "{name} was predicted to stay ({fate:?}) but is {now:?} while hangs last"
            )));
        }
        let stuck =
            scenario.finalizers[name[1..].parse::<usize>().unwrap_or_default()] == Finalizer::Stuck;
        if stuck && now.is_some_and(|s| s.terminating) && !deleted {
            return Err(context(format!("{name} hangs but Plan did not count it")));
        }
        let _ = seen;
    }
    let hanging = meanwhile
        .iter()
        .filter(|(name, s)| {
            s.terminating
                && scenario.finalizers[name[1..].parse::<usize>().unwrap_or_default()]
                    == Finalizer::Stuck
        })
        .count() as u64;
    let predicted_hangs = status["plan"]["hangs"].as_u64().unwrap_or_default();
    if hanging > predicted_hangs || (predicted_hangs > 0) != (status["verdict"] == "WillHang") {
        return Err(context(format!(
            "{hanging} objects hang now; Plan predicted {predicted_hangs} (verdict {})",
            status["verdict"]
        )));
    }
    if hanging == 0 && predicted_hangs > 0 {
        return Err(context(format!(
            "Plan predicted {predicted_hangs} hangs but nothing hangs"
        )));
    }

    // Once the hangs are resolved.
    let mut end = State::new();
    for (name, seen) in &initial {
        let deleted = predicted
            .get(name)
            .is_some_and(|e| e["outcome"] == "Deleted");
        if !deleted {
            end.insert(name.clone(), seen.clone());
        }
    }
    let survivors: Vec<String> = end.keys().cloned().collect();
    for seen in end.values_mut() {
        seen.owners.retain(|o| survivors.contains(o));
    }
    settle(http, namespace, &end, &[LIVE, STUCK])
        .await
        .map_err(context)?;
    let count = |key: &str| status["plan"][key].as_u64().unwrap_or_default() as usize;
    let deleted = predicted
        .values()
        .filter(|e| e["outcome"] == "Deleted")
        .count();
    if count("deleted") != deleted || initial.len() - end.len() != deleted {
        return Err(context(format!(
            "Plan counts {} deleted, its tree {deleted}, the DELETE removed {}",
            count("deleted"),
            initial.len() - end.len()
        )));
    }
    Ok(())
}

/// Acts as the controller of `finalizers` until the namespace stops changing, checked
/// across a garbage-collector sentinel; returns the state it settled at.
async fn quiesce(http: &Http, namespace: &str, finalizers: &[&str]) -> Result<State, String> {
    let started = tokio::time::Instant::now();
    loop {
        let (observed, items) = observe(http, namespace).await?;
        let acted = finalize(http, namespace, &items, finalizers).await;
        if !acted {
            http.collector_caught_up(namespace).await;
            let (after, items) = observe(http, namespace).await?;
            let acted = finalize(http, namespace, &items, finalizers).await;
            if !acted && after == observed {
                return Ok(after);
            }
        }
        if started.elapsed() >= SETTLE {
            return Err(format!(
                "the namespace kept changing for {SETTLE:?}; last: {observed:#?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[test]
fn plans_match_what_the_delete_does() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("cannot build a tokio runtime: {e}"));
    let server = runtime.block_on(TestServer::start());
    let http = Http::new(&server);
    // The live controller: a claim whose Lease stays live for the whole run.
    runtime.block_on(async {
        let renewed = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string();
        http.post(
            "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases",
            &json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": "plan-model", "namespace": "kube-system"},
                "spec": {"holderIdentity": "plan-model-0", "leaseDurationSeconds": 3600,
                    "renewTime": renewed}}),
        )
        .await
        .expect(201);
        http.post(
            "/apis/deletion.finale.dev/v1alpha1/finalizerclaims",
            &json!({"apiVersion": "deletion.finale.dev/v1alpha1", "kind": "FinalizerClaim",
                "metadata": {"name": "plan-model"},
                "spec": {"finalizer": LIVE, "resources": [{"group": "", "resource": "configmaps"}],
                    "controller": "plan-model", "lease": {"namespace": "kube-system", "name": "plan-model"}}}),
        )
        .await
        .expect(201);
    });
    let seed = std::env::var("PLAN_MODEL_SEED")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(DEFAULT_SEED);
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let config = Config {
        cases,
        max_shrink_iters: 32,
        max_shrink_time: 60_000,
        failure_persistence: None,
        ..Config::default()
    };
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let mut runner = TestRunner::new_with_rng(
        config,
        TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes),
    );
    let sequence = AtomicUsize::new(0);
    let result = runner.run(&scenarios(), |scenario| {
        let namespace = format!("plan-model-{}", sequence.fetch_add(1, Ordering::Relaxed));
        runtime
            .block_on(run_case(&http, &namespace, &scenario))
            .map_err(TestCaseError::fail)
    });
    runtime.block_on(server.shutdown());
    match result {
        Ok(()) => {}
        Err(TestError::Fail(why, scenario)) => {
            panic!("PLAN_MODEL_SEED={seed}: {why}\nminimal failing scenario:\n{scenario:?}")
        }
        Err(TestError::Abort(why)) => panic!("the property run aborted: {why}"),
    }
}
