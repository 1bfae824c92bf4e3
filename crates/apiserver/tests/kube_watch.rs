//! kube-rs watches (api-surface §4): the `watcher` state machine (list-watch and streaming
//! lists), raw watches resumed from a resourceVersion, selectors on watch, timeouts,
//! bookmarks, and the in-stream 410 that makes the watcher re-list after compaction.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::{TestServer, WAIT, config_map, expect_api_error, within};
use futures::{Stream, StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{
    DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::runtime::watcher::{self, Event};
use kube::{Api, ResourceExt};
use serde_json::json;

async fn create(api: &Api<ConfigMap>, name: &str, labels: &[(&str, &str)]) -> ConfigMap {
    within(
        WAIT,
        api.create(&PostParams::default(), &config_map(name, labels)),
    )
    .await
    .unwrap_or_else(|e| panic!("create {name}: {e}"))
}

async fn merge_patch(api: &Api<ConfigMap>, name: &str, patch: serde_json::Value) -> ConfigMap {
    within(
        WAIT,
        api.patch(name, &PatchParams::default(), &Patch::Merge(patch)),
    )
    .await
    .unwrap_or_else(|e| panic!("patch {name}: {e}"))
}

async fn delete(api: &Api<ConfigMap>, name: &str) {
    within(WAIT, api.delete(name, &DeleteParams::default()))
        .await
        .unwrap_or_else(|e| panic!("delete {name}: {e}"));
}

fn rv_of(object: &ConfigMap) -> i64 {
    object
        .resource_version()
        .expect("a resourceVersion")
        .parse()
        .expect("a numeric resourceVersion")
}

/// A watcher event reduced to something comparable: ("Init", ""), ("InitApply", name), …
fn describe(event: &Event<ConfigMap>) -> (&'static str, String) {
    match event {
        Event::Init => ("Init", String::new()),
        Event::InitApply(o) => ("InitApply", o.name_any()),
        Event::InitDone => ("InitDone", String::new()),
        Event::Apply(o) => ("Apply", o.name_any()),
        Event::Delete(o) => ("Delete", o.name_any()),
    }
}

/// The next item of a watcher stream, within the default wait.
async fn next_event<S>(stream: &mut S) -> Result<Event<ConfigMap>, watcher::Error>
where
    S: Stream<Item = Result<Event<ConfigMap>, watcher::Error>> + Unpin,
{
    within(WAIT, stream.next())
        .await
        .expect("the watcher stream does not end")
}

/// The next watcher event, failing the test on a watcher error.
async fn next_ok<S>(stream: &mut S) -> Event<ConfigMap>
where
    S: Stream<Item = Result<Event<ConfigMap>, watcher::Error>> + Unpin,
{
    next_event(stream)
        .await
        .unwrap_or_else(|e| panic!("watcher error: {e}"))
}

/// Reads one initial listing (Init, InitApply…, InitDone) and returns the names applied.
async fn read_init<S>(stream: &mut S) -> BTreeSet<String>
where
    S: Stream<Item = Result<Event<ConfigMap>, watcher::Error>> + Unpin,
{
    read_init_keyed(stream, ResourceExt::name_any).await
}

/// Reads one initial listing and returns `key` of every object applied, each at most once.
async fn read_init_keyed<S>(stream: &mut S, key: fn(&ConfigMap) -> String) -> BTreeSet<String>
where
    S: Stream<Item = Result<Event<ConfigMap>, watcher::Error>> + Unpin,
{
    assert_eq!(describe(&next_ok(stream).await).0, "Init");
    let mut keys = BTreeSet::new();
    loop {
        match next_ok(stream).await {
            Event::InitApply(object) => {
                let key = key(&object);
                assert!(keys.insert(key.clone()), "{key} applied twice");
            }
            Event::InitDone => return keys,
            other => panic!(
                "unexpected event during the initial listing: {:?}",
                describe(&other)
            ),
        }
    }
}

/// Collects a raw watch until the server ends it, skipping bookmarks.
async fn collect_raw_watch(
    api: &Api<ConfigMap>,
    params: &WatchParams,
    rv: &str,
    limit: Duration,
) -> Vec<(&'static str, String, i64)> {
    let stream = within(WAIT, api.watch(params, rv))
        .await
        .expect("open the watch");
    let events: Vec<WatchEvent<ConfigMap>> = within(limit, stream.try_collect())
        .await
        .expect("the watch stream reads cleanly");
    events
        .into_iter()
        .filter_map(|event| match event {
            WatchEvent::Added(o) => Some(("ADDED", o.name_any(), rv_of(&o))),
            WatchEvent::Modified(o) => Some(("MODIFIED", o.name_any(), rv_of(&o))),
            WatchEvent::Deleted(o) => Some(("DELETED", o.name_any(), rv_of(&o))),
            WatchEvent::Bookmark(_) => None,
            WatchEvent::Error(status) => panic!("unexpected in-stream error: {status:?}"),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watcher_lists_then_applies_and_deletes_in_order() {
    let server = TestServer::start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(server.client.clone());
    create(&api, "before", &[]).await;

    let mut stream = watcher::watcher(api.clone(), watcher::Config::default()).boxed();
    assert_eq!(
        read_init(&mut stream).await,
        BTreeSet::from(["before".to_string()])
    );

    let created = create(&api, "live", &[]).await;
    let event = next_ok(&mut stream).await;
    assert_eq!(describe(&event), ("Apply", "live".to_string()));

    let modified = merge_patch(&api, "live", json!({"data": {"key": "changed"}})).await;
    match next_ok(&mut stream).await {
        Event::Apply(object) => {
            assert_eq!(object.name_any(), "live");
            assert_eq!(
                object.data.as_ref().unwrap().get("key").map(String::as_str),
                Some("changed")
            );
            assert_eq!(object.resource_version(), modified.resource_version());
        }
        other => panic!("expected Apply, got {:?}", describe(&other)),
    }
    assert!(rv_of(&modified) > rv_of(&created));

    delete(&api, "live").await;
    match next_ok(&mut stream).await {
        Event::Delete(object) => {
            assert_eq!(object.name_any(), "live");
            // The deleted object carries the deletion's resourceVersion.
            assert!(rv_of(&object) > rv_of(&modified));
        }
        other => panic!("expected Delete, got {:?}", describe(&other)),
    }
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watcher_with_streaming_lists_gets_init_done_then_live_events() {
    let server = TestServer::start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(server.client.clone());
    create(&api, "s1", &[]).await;
    create(&api, "s2", &[]).await;

    let config = watcher::Config::default().streaming_lists();
    let mut stream = watcher::watcher(api.clone(), config).boxed();
    assert_eq!(
        read_init(&mut stream).await,
        BTreeSet::from(["s1".to_string(), "s2".to_string()])
    );
    create(&api, "s3", &[]).await;
    assert_eq!(
        describe(&next_ok(&mut stream).await),
        ("Apply", "s3".to_string())
    );
    delete(&api, "s1").await;
    assert_eq!(
        describe(&next_ok(&mut stream).await),
        ("Delete", "s1".to_string())
    );
    server.shutdown().await;
}

/// Creates 20 objects, modifies and deletes two, then watches from the revision after the
/// fifth create: exactly the later events, each once, in revision order.
async fn check_resume_replays_later_events_exactly_once(server: &TestServer) {
    let api: Api<ConfigMap> = Api::default_namespaced(server.client.clone());
    let mut resume_from = 0;
    for i in 0..20 {
        let created = create(&api, &format!("r{i:02}"), &[]).await;
        if i == 4 {
            resume_from = rv_of(&created);
        }
    }
    merge_patch(&api, "r10", json!({"data": {"key": "again"}})).await;
    delete(&api, "r11").await;

    let events = collect_raw_watch(
        &api,
        &WatchParams::default().timeout(2),
        &resume_from.to_string(),
        Duration::from_secs(8),
    )
    .await;
    let mut expected: Vec<(&str, String)> =
        (5..20).map(|i| ("ADDED", format!("r{i:02}"))).collect();
    expected.push(("MODIFIED", "r10".into()));
    expected.push(("DELETED", "r11".into()));
    let got: Vec<(&str, String)> = events.iter().map(|(t, n, _)| (*t, n.clone())).collect();
    assert_eq!(got, expected);
    let revisions: Vec<i64> = events.iter().map(|(_, _, rv)| *rv).collect();
    assert!(
        revisions.windows(2).all(|w| w[0] < w[1]),
        "revisions increase strictly: {revisions:?}"
    );
    assert!(revisions[0] > resume_from);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_from_an_old_resource_version_replays_each_later_event_once() {
    let server = TestServer::start().await;
    check_resume_replays_later_events_exactly_once(&server).await;
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_older_than_the_cache_history_replays_from_the_store_once() {
    // A two-event cache history: the resume point is older, so the store's history serves it.
    let server = TestServer::start_with(|config| config.watch_cache.history_capacity = 2).await;
    check_resume_replays_later_events_exactly_once(&server).await;
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_with_a_label_selector_sends_deleted_and_added_on_selector_transitions() {
    let server = TestServer::start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(server.client.clone());
    create(&api, "leaves", &[("app", "w")]).await;
    let last = create(&api, "joins", &[("app", "other")]).await;

    let stream = within(
        WAIT,
        api.watch(
            &WatchParams::default().labels("app=w").disable_bookmarks(),
            &rv_of(&last).to_string(),
        ),
    )
    .await
    .expect("open the watch");
    let mut stream = stream.boxed();

    create(&api, "ignored", &[("app", "other")]).await;
    let touched = merge_patch(&api, "leaves", json!({"data": {"key": "touched"}})).await;
    let left = merge_patch(
        &api,
        "leaves",
        json!({"metadata": {"labels": {"app": "gone"}}}),
    )
    .await;
    let joined = merge_patch(&api, "joins", json!({"metadata": {"labels": {"app": "w"}}})).await;
    delete(&api, "joins").await;

    let mut got = Vec::new();
    while got.len() < 4 {
        let event = within(WAIT, stream.next())
            .await
            .expect("the watch does not end")
            .expect("a watch event");
        got.push(match event {
            WatchEvent::Added(o) => ("ADDED", o.name_any(), rv_of(&o)),
            WatchEvent::Modified(o) => ("MODIFIED", o.name_any(), rv_of(&o)),
            WatchEvent::Deleted(o) => ("DELETED", o.name_any(), rv_of(&o)),
            WatchEvent::Bookmark(_) => continue,
            WatchEvent::Error(status) => panic!("in-stream error: {status:?}"),
        });
    }
    assert_eq!(
        got.iter()
            .map(|(t, n, _)| (*t, n.as_str()))
            .collect::<Vec<_>>(),
        vec![
            ("MODIFIED", "leaves"),
            ("DELETED", "leaves"),
            ("ADDED", "joins"),
            ("DELETED", "joins"),
        ]
    );
    assert_eq!(got[0].2, rv_of(&touched));
    assert_eq!(
        got[1].2,
        rv_of(&left),
        "DELETED carries the revision of the change"
    );
    assert_eq!(got[2].2, rv_of(&joined));
    // Nothing else: the non-matching create never appears.
    let extra = tokio::time::timeout(Duration::from_millis(300), stream.next()).await;
    assert!(extra.is_err(), "unexpected extra event: {extra:?}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_timeout_seconds_ends_the_stream() {
    let server = TestServer::start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(server.client.clone());
    let list = within(WAIT, api.list(&ListParams::default()))
        .await
        .unwrap();
    let rv = list.metadata.resource_version.unwrap();
    let started = Instant::now();
    let stream = within(WAIT, api.watch(&WatchParams::default().timeout(2), &rv))
        .await
        .expect("open the watch");
    let events: Vec<_> = within(Duration::from_secs(10), stream.collect::<Vec<_>>()).await;
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(1500),
        "ended too early: {elapsed:?}"
    );
    assert!(
        elapsed < Duration::from_secs(6),
        "ended too late: {elapsed:?}"
    );
    for event in events {
        assert!(
            matches!(event, Ok(WatchEvent::Bookmark(_))),
            "nothing changed, so nothing but bookmarks: {event:?}"
        );
    }
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bookmarks_arrive_when_requested_and_advance_past_filtered_writes() {
    let server = TestServer::start_with(|config| {
        config.watch_cache.bookmark_interval = Duration::from_millis(500);
    })
    .await;
    let api: Api<ConfigMap> = Api::default_namespaced(server.client.clone());
    let first = create(&api, "b0", &[("app", "other")]).await;

    // A filtered watch sees none of these writes, but its bookmarks move past them.
    let stream = within(
        WAIT,
        api.watch(
            &WatchParams::default().labels("app=none").timeout(10),
            &rv_of(&first).to_string(),
        ),
    )
    .await
    .expect("open the watch");
    let mut stream = stream.boxed();
    let mut last = first;
    for i in 1..4 {
        last = create(&api, &format!("b{i}"), &[("app", "other")]).await;
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut bookmarks = 0;
    loop {
        assert!(
            Instant::now() < deadline,
            "no bookmark past the last write within 5 s"
        );
        let event = within(WAIT, stream.next())
            .await
            .expect("the watch does not end")
            .expect("a watch event");
        match event {
            WatchEvent::Bookmark(bookmark) => {
                bookmarks += 1;
                assert_eq!(bookmark.types.kind, "ConfigMap");
                assert_eq!(bookmark.types.api_version, "v1");
                let rv: i64 = bookmark.metadata.resource_version.parse().unwrap();
                if rv >= rv_of(&last) {
                    break;
                }
            }
            other => panic!("unexpected event on a filtered watch: {other:?}"),
        }
    }
    assert!(bookmarks >= 1);

    // Without allowWatchBookmarks, none arrive.
    let events: Vec<_> = within(
        Duration::from_secs(8),
        within(
            WAIT,
            api.watch(
                &WatchParams::default().disable_bookmarks().timeout(2),
                &rv_of(&last).to_string(),
            ),
        )
        .await
        .expect("open the watch")
        .collect::<Vec<_>>(),
    )
    .await;
    assert!(events.is_empty(), "no events expected: {events:?}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_from_a_compacted_resource_version_gets_an_in_stream_410() {
    let server = TestServer::start_with(|config| config.watch_cache.history_capacity = 2).await;
    let api: Api<ConfigMap> = Api::default_namespaced(server.client.clone());
    let old = create(&api, "c0", &[]).await;
    for i in 1..10 {
        create(&api, &format!("c{i}"), &[]).await;
    }
    let store = server.registry().store().clone();
    let current = store.current_revision().await.unwrap();
    within(WAIT, store.compact(current)).await.expect("compact");

    // The watch request itself succeeds (HTTP 200); the expiry is an ERROR event in the
    // stream, after which the stream ends.
    let stream = within(
        WAIT,
        api.watch(
            &WatchParams::default().timeout(10),
            &rv_of(&old).to_string(),
        ),
    )
    .await
    .expect("the watch request is accepted");
    let events: Vec<_> = within(WAIT, stream.collect::<Vec<_>>()).await;
    assert_eq!(events.len(), 1, "one ERROR event, then the end: {events:?}");
    match &events[0] {
        Ok(WatchEvent::Error(status)) => {
            assert_eq!(status.code, 410, "{status:?}");
            assert!(
                matches!(status.reason.as_str(), "Expired" | "Gone"),
                "{status:?}"
            );
        }
        other => panic!("expected an in-stream 410, got {other:?}"),
    }

    // A list from a continue token older than the compaction is an HTTP 410 (api-surface §5).
    let token = {
        let fresh = create(&api, "d0", &[]).await;
        let page = within(WAIT, api.list(&ListParams::default().limit(2)))
            .await
            .unwrap();
        for i in 1..4 {
            create(&api, &format!("d{i}"), &[]).await;
        }
        let current = store.current_revision().await.unwrap();
        assert!(current > rv_of(&fresh));
        within(WAIT, store.compact(current)).await.expect("compact");
        page.metadata.continue_.expect("a continue token")
    };
    expect_api_error(
        within(
            WAIT,
            api.list(&ListParams::default().limit(2).continue_token(&token)),
        )
        .await,
        410,
        "Expired",
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watcher_relists_after_an_in_stream_410_and_converges() {
    // A tiny cache history, so that a watch from before a burst of writes is served from the
    // store, which is then compacted past it.
    let server = TestServer::start_with(|config| config.watch_cache.history_capacity = 2).await;
    let api: Api<ConfigMap> = Api::default_namespaced(server.client.clone());
    create(&api, "a1", &[]).await;
    create(&api, "a2", &[]).await;

    let mut stream = watcher::watcher(api.clone(), watcher::Config::default()).boxed();
    assert_eq!(
        read_init(&mut stream).await,
        BTreeSet::from(["a1".to_string(), "a2".to_string()])
    );
    // The watcher opens its watch (from the list's resourceVersion) only when polled after
    // InitDone. While it is not polled, change the world and compact the store past that
    // resourceVersion, so the watch it then opens gets the in-stream 410.
    delete(&api, "a1").await;
    create(&api, "a3", &[]).await;
    for i in 0..5 {
        create(&api, &format!("b{i}"), &[]).await;
    }
    let store = server.registry().store().clone();
    let current = store.current_revision().await.unwrap();
    within(WAIT, store.compact(current)).await.expect("compact");

    // Expect a 410 watch error, then a complete re-list.
    let mut saw_expired = false;
    loop {
        match next_event(&mut stream).await {
            Err(watcher::Error::WatchError(status)) if status.code == 410 => {
                saw_expired = true;
            }
            Err(other) => panic!("unexpected watcher error: {other}"),
            Ok(Event::Init) => break,
            Ok(other) => panic!(
                "the watcher saw a change instead of re-listing: {:?}",
                describe(&other)
            ),
        }
    }
    assert!(saw_expired, "the re-list follows an in-stream 410");
    let mut relisted = BTreeSet::new();
    loop {
        match next_ok(&mut stream).await {
            Event::InitApply(object) => {
                relisted.insert(object.name_any());
            }
            Event::InitDone => break,
            other => panic!(
                "unexpected event during the re-list: {:?}",
                describe(&other)
            ),
        }
    }
    let expected: BTreeSet<String> = ["a2", "a3", "b0", "b1", "b2", "b3", "b4"]
        .iter()
        .map(|n| n.to_string())
        .collect();
    assert_eq!(relisted, expected);

    // After the re-list the watcher is live again.
    create(&api, "after", &[]).await;
    assert_eq!(
        describe(&next_ok(&mut stream).await),
        ("Apply", "after".to_string())
    );
    delete(&api, "a2").await;
    assert_eq!(
        describe(&next_ok(&mut stream).await),
        ("Delete", "a2".to_string())
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_from_resource_version_zero_starts_with_the_current_objects() {
    let server = TestServer::start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(server.client.clone());
    create(&api, "z1", &[]).await;
    create(&api, "z2", &[]).await;
    let stream = within(
        WAIT,
        api.watch(&WatchParams::default().disable_bookmarks(), "0"),
    )
    .await
    .expect("open the watch");
    let mut stream = stream.boxed();
    let mut initial = BTreeSet::new();
    for _ in 0..2 {
        match within(WAIT, stream.next())
            .await
            .expect("an event")
            .expect("ok")
        {
            WatchEvent::Added(object) => {
                initial.insert(object.name_any());
            }
            other => panic!("expected ADDED, got {other:?}"),
        }
    }
    assert_eq!(
        initial,
        BTreeSet::from(["z1".to_string(), "z2".to_string()])
    );
    create(&api, "z3", &[]).await;
    match within(WAIT, stream.next())
        .await
        .expect("an event")
        .expect("ok")
    {
        WatchEvent::Added(object) => assert_eq!(object.name_any(), "z3"),
        other => panic!("expected ADDED z3, got {other:?}"),
    }
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_served_from_the_store_continues_live() {
    let server = TestServer::start_with(|config| config.watch_cache.history_capacity = 2).await;
    let api: Api<ConfigMap> = Api::default_namespaced(server.client.clone());
    let first = create(&api, "h0", &[]).await;
    for i in 1..6 {
        create(&api, &format!("h{i}"), &[]).await;
    }
    let stream = within(
        WAIT,
        api.watch(
            &WatchParams::default().disable_bookmarks(),
            &rv_of(&first).to_string(),
        ),
    )
    .await
    .expect("open the watch");
    let mut stream = stream.boxed();
    let mut names = Vec::new();
    for _ in 1..6 {
        match within(WAIT, stream.next())
            .await
            .expect("an event")
            .expect("ok")
        {
            WatchEvent::Added(object) => names.push(object.name_any()),
            other => panic!("expected ADDED, got {other:?}"),
        }
    }
    assert_eq!(names, ["h1", "h2", "h3", "h4", "h5"]);
    let live = create(&api, "live", &[]).await;
    match within(WAIT, stream.next())
        .await
        .expect("an event")
        .expect("ok")
    {
        WatchEvent::Added(object) => {
            assert_eq!(object.name_any(), "live");
            assert_eq!(rv_of(&object), rv_of(&live));
        }
        other => panic!("expected ADDED live, got {other:?}"),
    }
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watcher_with_small_pages_and_any_semantic_lists_everything() {
    let server = TestServer::start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(server.client.clone());
    let mut expected = BTreeSet::new();
    for i in 0..7 {
        let name = format!("p{i}");
        create(&api, &name, &[]).await;
        expected.insert(name);
    }
    let config = watcher::Config::default().page_size(2).any_semantic();
    let mut stream = watcher::watcher(api.clone(), config).boxed();
    assert_eq!(read_init(&mut stream).await, expected);
    create(&api, "p7", &[]).await;
    assert_eq!(
        describe(&next_ok(&mut stream).await),
        ("Apply", "p7".to_string())
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn await_condition_sees_a_change_through_a_name_field_selector() {
    let server = TestServer::start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(server.client.clone());
    create(&api, "target", &[]).await;
    create(&api, "other", &[]).await;
    let waiter = tokio::spawn(kube::runtime::wait::await_condition(
        api.clone(),
        "target",
        |object: Option<&ConfigMap>| {
            object
                .and_then(|o| o.data.as_ref())
                .and_then(|d| d.get("key"))
                .is_some_and(|v| v == "ready")
        },
    ));
    tokio::time::sleep(Duration::from_millis(200)).await;
    merge_patch(&api, "other", json!({"data": {"key": "ready"}})).await;
    merge_patch(&api, "target", json!({"data": {"key": "ready"}})).await;
    let found = within(WAIT, waiter)
        .await
        .expect("the waiter task")
        .expect("await_condition")
        .expect("the object exists");
    assert_eq!(found.name_any(), "target");

    // And deletion, as `kubectl delete --wait` and is_deleted wait for it.
    let uid = found.metadata.uid.clone().unwrap();
    let deleted_api = api.clone();
    let waiter = tokio::spawn(async move {
        kube::runtime::wait::await_condition(
            deleted_api,
            "target",
            kube::runtime::wait::conditions::is_deleted(&uid),
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    delete(&api, "target").await;
    within(WAIT, waiter)
        .await
        .expect("the waiter task")
        .expect("await_condition for deletion");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_wide_watcher_with_a_namespace_field_selector() {
    let server = TestServer::start().await;
    let client = server.client.clone();
    common::create_namespace(&client, "ns-a").await;
    common::create_namespace(&client, "ns-b").await;
    let in_a: Api<ConfigMap> = Api::namespaced(client.clone(), "ns-a");
    let in_b: Api<ConfigMap> = Api::namespaced(client.clone(), "ns-b");
    create(&in_a, "x", &[]).await;
    create(&in_b, "x", &[]).await;

    let all: Api<ConfigMap> = Api::all(client.clone());
    let config = watcher::Config::default().fields("metadata.namespace=ns-a");
    let mut stream = watcher::watcher(all.clone(), config).boxed();
    assert_eq!(
        read_init(&mut stream).await,
        BTreeSet::from(["x".to_string()])
    );
    create(&in_b, "y", &[]).await;
    create(&in_a, "y", &[]).await;
    match next_ok(&mut stream).await {
        Event::Apply(object) => {
            assert_eq!(
                (object.namespace().as_deref(), object.name_any().as_str()),
                (Some("ns-a"), "y")
            );
        }
        other => panic!("expected Apply ns-a/y, got {:?}", describe(&other)),
    }
    delete(&in_b, "x").await;
    delete(&in_a, "x").await;
    match next_ok(&mut stream).await {
        Event::Delete(object) => {
            assert_eq!(object.namespace().as_deref(), Some("ns-a"));
            assert_eq!(object.name_any(), "x");
        }
        other => panic!("expected Delete ns-a/x, got {:?}", describe(&other)),
    }

    // An unfiltered cluster-wide watcher sees both namespaces.
    let mut everything = watcher::watcher(all, watcher::Config::default()).boxed();
    let keys = read_init_keyed(&mut everything, |o| {
        format!("{}/{}", o.namespace().unwrap_or_default(), o.name_any())
    })
    .await;
    assert_eq!(
        keys,
        BTreeSet::from(["ns-a/y".to_string(), "ns-b/y".to_string()])
    );
    server.shutdown().await;
}
