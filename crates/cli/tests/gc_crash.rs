//! The garbage collector after `kill -9`: a cascade interrupted by a crash completes after the
//! restart, because the collector rebuilds its graph from storage and re-detects unfinished
//! work — a foreground owner still waiting for its dependents, and dependents whose owner is
//! already gone.
//!
//! That the crash really interrupted the cascade is checked, not assumed: between the kill
//! and the restart the store is read offline, and some dependents must still be in it.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{Api, Env, eventually};
use finale_store::{RangeRequest, RedbStore, RedbStoreOptions, Store, prefix_range};
use serde_json::{Value, json};

const CM: &str = "/api/v1/namespaces/default/configmaps";

fn create(api: &Api, name: &str, owner: Option<&Value>, finalizers: &[&str]) -> Value {
    let mut metadata = json!({"name": name});
    if let Some(owner) = owner {
        metadata["ownerReferences"] = json!([{
            "apiVersion": "v1", "kind": "ConfigMap", "name": owner["metadata"]["name"],
            "uid": owner["metadata"]["uid"], "blockOwnerDeletion": true}]);
    }
    if !finalizers.is_empty() {
        metadata["finalizers"] = json!(finalizers);
    }
    let response = api
        .post_json(
            CM,
            &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata}),
        )
        .expect("create");
    assert_eq!(response.status, 201, "{}", response.body);
    response.json()
}

/// Names of the ConfigMaps in `default` starting with `prefix`, read straight from the store
/// of a stopped server. Opening the store replays its write-ahead log, exactly as the
/// server's own start would, so this is what the restarted server finds.
fn stored_config_maps(data_dir: &Path, prefix: &str) -> Vec<String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime to read the store");
    runtime.block_on(async {
        let store = RedbStore::open(&data_dir.join("store"), RedbStoreOptions::default())
            .expect("open the killed server's store");
        let key_prefix = format!("/registry/core/configmaps/default/{prefix}");
        let listed = store
            .range(RangeRequest {
                range: prefix_range(key_prefix.as_bytes()),
                ..RangeRequest::default()
            })
            .await
            .expect("read the ConfigMaps");
        store.close().await;
        listed
            .kvs
            .iter()
            .filter_map(|kv| {
                let key = String::from_utf8_lossy(&kv.key).into_owned();
                key.rsplit('/').next().map(str::to_string)
            })
            .collect()
    })
}

fn delete(api: &Api, path: &str) {
    let response = api
        .request(reqwest::Method::DELETE, path, None, None)
        .expect("delete");
    assert_eq!(response.status, 200, "{}", response.body);
}

#[test]
fn cascades_interrupted_by_a_crash_complete_after_the_restart() {
    let mut env = Env::start();
    let api = env.api();

    // Foreground: the owner waits for a dependent held by a finalizer.
    let root = create(&api, "root", None, &[]);
    create(&api, "held", Some(&root), &["example.com/hold"]);
    delete(&api, &format!("{CM}/root?propagationPolicy=Foreground"));
    // Background: 300 dependents of an owner that is removed at once.
    let owner = create(&api, "owner", None, &[]);
    for i in 0..300 {
        create(&api, &format!("dep-{i}"), Some(&owner), &[]);
    }
    let held_terminating = eventually(Duration::from_secs(10), || {
        let held = api.get(&format!("{CM}/held")).ok()?.json();
        held["metadata"]["deletionTimestamp"]
            .is_string()
            .then_some(())
    });
    assert!(
        held_terminating.is_some(),
        "the held dependent never started terminating{}",
        env.log()
    );
    delete(&api, &format!("{CM}/owner"));

    // Crash in the middle of the background cascade, then restart on the same data.
    env.server.kill9().expect("kill -9");
    let left_at_the_crash = stored_config_maps(&env.server.data_dir, "dep-");
    assert!(
        !left_at_the_crash.is_empty(),
        "precondition: the kill came after the cascade had finished (no dependent left in \
         storage), so the restart has nothing to complete{}",
        env.log()
    );
    eprintln!(
        "{} of 300 dependents left at the crash",
        left_at_the_crash.len()
    );
    let root_at_the_crash = stored_config_maps(&env.server.data_dir, "root");
    assert_eq!(
        root_at_the_crash,
        ["root"],
        "precondition: the foreground owner waits at the crash"
    );
    env.server.restart().expect("restart");
    let api = env.api();

    let left = eventually(Duration::from_secs(20), || {
        let names = api.configmap_names("default");
        (!names.iter().any(|n| n.starts_with("dep-"))).then_some(names)
    })
    .unwrap_or_else(|| {
        panic!(
            "dependents of the deleted owner were never collected{}",
            env.log()
        )
    });
    assert!(
        left.contains(&"root".to_string()),
        "the foreground owner waits: {left:?}"
    );

    // Releasing the held dependent lets the foreground owner go: the collector knew it was
    // waiting although it learned so only from storage after the crash.
    let response = api
        .request(
            reqwest::Method::PATCH,
            &format!("{CM}/held"),
            Some("application/json-patch+json"),
            Some(br#"[{"op":"remove","path":"/metadata/finalizers"}]"#.to_vec()),
        )
        .expect("patch");
    assert_eq!(response.status, 200, "{}", response.body);
    let gone = eventually(Duration::from_secs(20), || {
        (api.get(&format!("{CM}/root")).ok()?.status == 404).then_some(())
    });
    assert!(
        gone.is_some(),
        "the foreground owner never went{}",
        env.log()
    );
}
