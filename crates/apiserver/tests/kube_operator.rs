//! kube-runtime operators against Finale: a `Controller` that owns ConfigMaps, and the
//! `finalizer` helper adding and removing its finalizer while other writers race it.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{TestServer, WAIT, apply_crd, create_namespace, within};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::finalizer::{Event, finalizer};
use kube::runtime::watcher;
use kube::{CustomResource, CustomResourceExt, Resource, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
#[kube(group = "ops.example.com", version = "v1", kind = "Gadget", namespaced)]
pub struct GadgetSpec {
    pub size: i32,
}

const NAMESPACE: &str = "ops";

/// Cleanups run per object name: what the finalizer test's reconciler records.
type Cleaned = Arc<Mutex<BTreeMap<String, usize>>>;
const FINALIZER: &str = "ops.example.com/cleanup";

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct ReconcileError(String);

async fn install(server: &TestServer) -> Api<Gadget> {
    apply_crd(&server.client, Gadget::crd(), "gadget-operator").await;
    create_namespace(&server.client, NAMESPACE).await;
    Api::namespaced(server.client.clone(), NAMESPACE)
}

fn gadget(name: &str, size: i32) -> Gadget {
    Gadget::new(name, GadgetSpec { size })
}

/// Polls `check` until it holds, within the suite's bound.
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Merge-patches a gadget; a 409 Conflict is retried (a few times), anything else fails the
/// test: a concurrent writer's outcome is checked, never discarded.
async fn write_until_accepted(gadgets: &Api<Gadget>, name: &str, patch: &serde_json::Value) {
    for _ in 0..10 {
        match gadgets
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => return,
            Err(kube::Error::Api(status)) if status.code == 409 => {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(error) => panic!("patching {name} with {patch} failed: {error}"),
        }
    }
    panic!("patching {name} with {patch}: still a conflict after 10 tries");
}

#[tokio::test]
async fn controller_owns_config_maps_and_repairs_them() {
    let server = TestServer::start().await;
    let gadgets = install(&server).await;
    let config_maps: Api<ConfigMap> = Api::namespaced(server.client.clone(), NAMESPACE);

    let reconcile = |gadget: Arc<Gadget>, cms: Arc<Api<ConfigMap>>| async move {
        let owner = gadget
            .controller_owner_ref(&())
            .ok_or_else(|| ReconcileError("gadget has no uid".into()))?;
        let desired = ConfigMap {
            metadata: ObjectMeta {
                name: Some(format!("{}-config", gadget.name_any())),
                owner_references: Some(vec![owner]),
                ..ObjectMeta::default()
            },
            data: Some(BTreeMap::from([(
                "size".to_string(),
                gadget.spec.size.to_string(),
            )])),
            ..ConfigMap::default()
        };
        cms.patch(
            &format!("{}-config", gadget.name_any()),
            &PatchParams::apply("gadget-operator").force(),
            &Patch::Apply(&desired),
        )
        .await
        .map_err(|e| ReconcileError(e.to_string()))?;
        Ok::<_, ReconcileError>(Action::await_change())
    };
    let controller = Controller::new(gadgets.clone(), watcher::Config::default())
        .owns(config_maps.clone(), watcher::Config::default())
        .run(
            reconcile,
            |_, _, _| Action::requeue(Duration::from_millis(200)),
            Arc::new(config_maps.clone()),
        )
        .for_each(|_| async {});
    let running = tokio::spawn(controller);

    gadgets
        .create(&PostParams::default(), &gadget("g1", 3))
        .await
        .expect("create");
    let size_is = |want: &'static str| {
        let config_maps = config_maps.clone();
        move || {
            let config_maps = config_maps.clone();
            async move {
                config_maps
                    .get_opt("g1-config")
                    .await
                    .ok()
                    .flatten()
                    .and_then(|cm| cm.data)
                    .and_then(|d| d.get("size").cloned())
                    .as_deref()
                    == Some(want)
            }
        }
    };
    eventually("the owned ConfigMap", size_is("3")).await;
    let cm = config_maps.get("g1-config").await.expect("get");
    let owner = &cm.owner_references()[0];
    assert_eq!(owner.kind, "Gadget");
    assert_eq!(owner.controller, Some(true));

    // A spec change reaches the child; deleting the child brings it back (owns()).
    gadgets
        .patch(
            "g1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 4}})),
        )
        .await
        .expect("patch");
    eventually("the updated ConfigMap", size_is("4")).await;
    config_maps
        .delete("g1-config", &DeleteParams::default())
        .await
        .expect("delete the child");
    eventually("the recreated ConfigMap", size_is("4")).await;
    running.abort();
    server.shutdown().await;
}

#[tokio::test]
async fn finalizer_helper_holds_objects_until_cleanup_under_concurrent_writers() {
    let server = TestServer::start().await;
    let gadgets = install(&server).await;
    let cleaned: Cleaned = Arc::default();

    let reconcile = |gadget: Arc<Gadget>, ctx: Arc<(Api<Gadget>, Cleaned)>| async move {
        let (api, cleaned) = (&ctx.0, Arc::clone(&ctx.1));
        finalizer(api, FINALIZER, gadget, |event| async move {
            if let Event::Cleanup(gadget) = event {
                let mut cleaned = cleaned.lock().unwrap_or_else(|p| p.into_inner());
                *cleaned.entry(gadget.name_any()).or_default() += 1;
            }
            Ok::<_, ReconcileError>(Action::await_change())
        })
        .await
        .map_err(|e| ReconcileError(e.to_string()))
    };
    const COUNT: usize = 20;
    const WRITERS: usize = 4;
    let names: Vec<String> = (0..COUNT).map(|i| format!("g{i}")).collect();
    for name in &names {
        gadgets
            .create(&PostParams::default(), &gadget(name, 1))
            .await
            .expect("create");
    }
    // Four writers change labels and spec of every gadget in rounds. They start before the
    // controller, and each goes on until the finalizer is on every gadget and it has
    // finished one more round, so their writes race the helper's. Each write must succeed
    // (a 409 Conflict is retried); each writer returns its last round.
    let finalized = Arc::new(AtomicBool::new(false));
    let (round_zero_done, mut rounds_zero_done) = tokio::sync::mpsc::channel::<()>(WRITERS);
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let gadgets = gadgets.clone();
            let names = names.clone();
            let finalized = Arc::clone(&finalized);
            let round_zero_done = round_zero_done.clone();
            tokio::spawn(async move {
                let mut round = 0;
                loop {
                    let done = finalized.load(Ordering::SeqCst);
                    for name in &names {
                        let patch = json!({"metadata": {"labels": {format!("writer-{w}"): round.to_string()}},
                                           "spec": {"size": round}});
                        write_until_accepted(&gadgets, name, &patch).await;
                    }
                    if round == 0 {
                        round_zero_done.send(()).await.expect("the test is waiting");
                    }
                    if done {
                        return round;
                    }
                    round += 1;
                    assert!(round < 1000, "writer-{w}: the finalizers never all arrived");
                }
            })
        })
        .collect();
    drop(round_zero_done);
    for _ in 0..WRITERS {
        within(WAIT, rounds_zero_done.recv())
            .await
            .expect("every writer finishes its first round");
    }

    let controller = Controller::new(gadgets.clone(), watcher::Config::default())
        .run(
            reconcile,
            |_, _, _| Action::requeue(Duration::from_millis(100)),
            Arc::new((gadgets.clone(), Arc::clone(&cleaned))),
        )
        .for_each(|_| async {});
    let running = tokio::spawn(controller);
    eventually("the finalizer on every gadget", || async {
        let listed = gadgets.list(&ListParams::default()).await.expect("list");
        listed.items.len() == COUNT
            && listed
                .items
                .iter()
                .all(|g| g.finalizers().iter().any(|f| f == FINALIZER))
    })
    .await;
    finalized.store(true, Ordering::SeqCst);
    let mut last_rounds = Vec::new();
    for writer in writers {
        last_rounds.push(within(WAIT, writer).await.expect("writer finished"));
    }
    // Every write landed, none was lost to another, and no writer removed the finalizer the
    // helper added.
    let listed = gadgets.list(&ListParams::default()).await.expect("list");
    assert_eq!(listed.items.len(), COUNT);
    for gadget in &listed.items {
        assert_eq!(
            gadget.finalizers(),
            [FINALIZER.to_string()],
            "{}",
            gadget.name_any()
        );
        for (w, last) in last_rounds.iter().enumerate() {
            assert_eq!(
                gadget.labels().get(&format!("writer-{w}")),
                Some(&last.to_string()),
                "{}: writer-{w}'s last write is not there: {:?}",
                gadget.name_any(),
                gadget.labels()
            );
        }
        assert!(
            last_rounds.contains(&gadget.spec.size),
            "{}: size {} is no writer's last write ({last_rounds:?})",
            gadget.name_any(),
            gadget.spec.size
        );
    }

    // Watch deletions: each object may leave only after its cleanup ran.
    let mut events = watcher(gadgets.clone(), watcher::Config::default()).boxed();
    // The watch must be established before the deletions start, or an object could be
    // gone before the initial list and never be seen leaving.
    within(WAIT, async {
        while !matches!(events.next().await, Some(Ok(watcher::Event::InitDone))) {}
    })
    .await;
    for name in &names {
        gadgets
            .delete(name, &DeleteParams::default())
            .await
            .expect("delete");
    }
    let mut gone = BTreeSet::new();
    within(Duration::from_secs(20), async {
        while gone.len() < COUNT {
            match events.next().await {
                Some(Ok(watcher::Event::Delete(gadget))) => {
                    let name = gadget.name_any();
                    let done = cleaned
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .contains_key(&name);
                    assert!(done, "{name} left storage before its cleanup ran");
                    gone.insert(name);
                }
                Some(_) => {}
                None => panic!("the watch ended"),
            }
        }
    })
    .await;
    let cleaned = cleaned.lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert_eq!(cleaned.keys().cloned().collect::<Vec<_>>(), {
        let mut sorted = names.clone();
        sorted.sort();
        sorted
    });
    running.abort();
    server.shutdown().await;
}
