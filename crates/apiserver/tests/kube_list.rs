//! kube-rs lists (api-surface §5): consistent pagination with `limit`/`continue`, label and
//! field selectors, and cluster-wide lists.

mod common;

use std::collections::BTreeSet;

use common::{TestServer, WAIT, config_map, create_namespace, expect_api_error, within};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DeleteParams, ListParams, PostParams, VersionMatch};
use kube::{Api, ResourceExt};

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|n| n.to_string()).collect()
}

/// `namespace/name` of every item.
fn qualified(items: &[ConfigMap]) -> BTreeSet<String> {
    items
        .iter()
        .map(|cm| format!("{}/{}", cm.namespace().unwrap_or_default(), cm.name_any()))
        .collect()
}

async fn create(api: &Api<ConfigMap>, name: &str, labels: &[(&str, &str)]) -> ConfigMap {
    within(
        WAIT,
        api.create(&PostParams::default(), &config_map(name, labels)),
    )
    .await
    .unwrap_or_else(|e| panic!("create {name}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pagination_reads_every_page_at_the_first_pages_revision() {
    let server = TestServer::start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(server.client.clone());
    for i in 0..25 {
        create(&api, &format!("cm-{i:02}"), &[]).await;
    }

    let first = within(WAIT, api.list(&ListParams::default().limit(10)))
        .await
        .expect("first page");
    assert_eq!(first.items.len(), 10);
    let snapshot_rv = first
        .metadata
        .resource_version
        .clone()
        .expect("list resourceVersion");
    let mut token = first.metadata.continue_.clone().expect("a continue token");
    let mut seen: Vec<String> = first.items.iter().map(ResourceExt::name_any).collect();

    // Written after the first page: in the range of later pages, but not in the snapshot.
    let late = create(&api, "cm-15-late", &[]).await;
    assert!(
        late.resource_version().unwrap().parse::<i64>().unwrap() > snapshot_rv.parse().unwrap()
    );

    let mut pages = 1;
    loop {
        let page = within(
            WAIT,
            api.list(&ListParams::default().limit(10).continue_token(&token)),
        )
        .await
        .expect("next page");
        pages += 1;
        assert!(page.items.len() <= 10);
        assert_eq!(
            page.metadata.resource_version.as_deref(),
            Some(snapshot_rv.as_str()),
            "every page reports the first page's resourceVersion"
        );
        seen.extend(page.items.iter().map(ResourceExt::name_any));
        match page.metadata.continue_.filter(|t| !t.is_empty()) {
            Some(next) => token = next,
            None => break,
        }
        assert!(pages < 10, "pagination does not end");
    }
    assert_eq!(pages, 3);
    let distinct: BTreeSet<String> = seen.iter().cloned().collect();
    assert_eq!(seen.len(), 25, "{seen:?}");
    assert_eq!(distinct.len(), 25, "{seen:?}");
    assert!(!distinct.contains("cm-15-late"));
    let mut sorted = seen.clone();
    sorted.sort();
    assert_eq!(seen, sorted, "pages are in key order");

    // A fresh list sees the late object.
    let fresh = within(WAIT, api.list(&ListParams::default()))
        .await
        .unwrap();
    assert_eq!(fresh.items.len(), 26);
    assert!(fresh.metadata.continue_.is_none_or(|t| t.is_empty()));
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pagination_with_a_label_selector_returns_exactly_the_matching_set() {
    let server = TestServer::start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(server.client.clone());
    let mut expected = BTreeSet::new();
    for i in 0..30 {
        let name = format!("obj-{i:02}");
        if i % 3 == 0 {
            create(&api, &name, &[("pick", "yes")]).await;
            expected.insert(name);
        } else {
            create(&api, &name, &[("pick", "no")]).await;
        }
    }
    let mut seen = Vec::new();
    let mut params = ListParams::default().labels("pick=yes").limit(4);
    let mut rv = None;
    for round in 0.. {
        assert!(round < 20, "pagination does not end");
        let page = within(WAIT, api.list(&params)).await.expect("page");
        assert!(page.items.len() <= 4, "a page exceeds the limit");
        if let Some(first_rv) = &rv {
            assert_eq!(page.metadata.resource_version.as_ref(), Some(first_rv));
        } else {
            rv = page.metadata.resource_version.clone();
        }
        seen.extend(page.items.iter().map(ResourceExt::name_any));
        match page.metadata.continue_.filter(|t| !t.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    assert_eq!(seen.len(), expected.len(), "{seen:?}");
    assert_eq!(seen.into_iter().collect::<BTreeSet<_>>(), expected);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_continue_token_is_a_bad_request() {
    let server = TestServer::start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(server.client.clone());
    create(&api, "one", &[]).await;
    for token in ["not-a-token!", "eyJub3QiOiJhIHRva2VuIn0"] {
        expect_api_error(
            within(
                WAIT,
                api.list(&ListParams::default().limit(1).continue_token(token)),
            )
            .await,
            400,
            "BadRequest",
        );
    }
    // A token from another collection is rejected too.
    create(&api, "two", &[]).await;
    let page = within(WAIT, api.list(&ListParams::default().limit(1)))
        .await
        .unwrap();
    let token = page.metadata.continue_.expect("a continue token");
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::default_namespaced(server.client.clone());
    expect_api_error(
        within(
            WAIT,
            secrets.list(&ListParams::default().limit(1).continue_token(&token)),
        )
        .await,
        400,
        "BadRequest",
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn label_selectors_select_the_right_sets() {
    let server = TestServer::start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(server.client.clone());
    create(&api, "l1", &[("env", "prod"), ("tier", "a")]).await;
    create(&api, "l2", &[("env", "dev")]).await;
    create(&api, "l3", &[("env", "staging"), ("tier", "b")]).await;
    create(&api, "l4", &[]).await;

    let cases: &[(&str, &[&str])] = &[
        ("env=prod", &["l1"]),
        ("env==dev", &["l2"]),
        ("env!=prod", &["l2", "l3", "l4"]),
        ("tier", &["l1", "l3"]),
        ("!tier", &["l2", "l4"]),
        ("env in (prod,dev)", &["l1", "l2"]),
        ("env notin (prod)", &["l2", "l3", "l4"]),
        ("env in (prod,staging),tier", &["l1", "l3"]),
        ("env=prod,tier=b", &[]),
        ("", &["l1", "l2", "l3", "l4"]),
    ];
    for (selector, expected) in cases {
        let listed = within(WAIT, api.list(&ListParams::default().labels(selector)))
            .await
            .unwrap_or_else(|e| panic!("list with {selector:?}: {e}"));
        let got: BTreeSet<String> = listed.items.iter().map(ResourceExt::name_any).collect();
        assert_eq!(got, set(expected), "labelSelector {selector:?}");
    }
    // A malformed selector is a 400, not an empty list.
    expect_api_error(
        within(
            WAIT,
            api.list(&ListParams::default().labels("env in (prod")),
        )
        .await,
        400,
        "BadRequest",
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn field_selectors_on_name_and_namespace_across_namespaces() {
    let server = TestServer::start().await;
    let client = server.client.clone();
    create_namespace(&client, "ns-a").await;
    create_namespace(&client, "ns-b").await;
    let in_a: Api<ConfigMap> = Api::namespaced(client.clone(), "ns-a");
    let in_b: Api<ConfigMap> = Api::namespaced(client.clone(), "ns-b");
    create(&in_a, "x", &[]).await;
    create(&in_a, "y", &[]).await;
    create(&in_b, "x", &[]).await;
    create(&Api::default_namespaced(client.clone()), "z", &[]).await;
    let all: Api<ConfigMap> = Api::all(client.clone());

    // Cluster-wide list: items from every namespace, each with its namespace set.
    let everything = within(WAIT, all.list(&ListParams::default()))
        .await
        .unwrap();
    let everything = qualified(&everything.items);
    for expected in ["ns-a/x", "ns-a/y", "ns-b/x", "default/z"] {
        assert!(
            everything.contains(expected),
            "{expected} in {everything:?}"
        );
    }

    let cases: &[(&str, &[&str])] = &[
        ("metadata.name=x", &["ns-a/x", "ns-b/x"]),
        ("metadata.namespace=ns-b", &["ns-b/x"]),
        ("metadata.namespace==ns-a", &["ns-a/x", "ns-a/y"]),
        ("metadata.name=x,metadata.namespace=ns-a", &["ns-a/x"]),
        ("metadata.name=nothing", &[]),
    ];
    for (selector, expected) in cases {
        let listed = within(WAIT, all.list(&ListParams::default().fields(selector)))
            .await
            .unwrap_or_else(|e| panic!("list with {selector:?}: {e}"));
        assert_eq!(
            qualified(&listed.items),
            set(expected),
            "fieldSelector {selector:?}"
        );
    }
    let not_x = within(
        WAIT,
        all.list(&ListParams::default().fields("metadata.name!=x")),
    )
    .await
    .unwrap();
    let not_x = qualified(&not_x.items);
    assert!(not_x.contains("ns-a/y") && not_x.contains("default/z"));
    assert!(!not_x.contains("ns-a/x") && !not_x.contains("ns-b/x"));

    // Within one namespace (the single-key read kubectl wait and await_condition use).
    let one = within(
        WAIT,
        in_b.list(&ListParams::default().fields("metadata.name=x")),
    )
    .await
    .unwrap();
    assert_eq!(qualified(&one.items), set(&["ns-b/x"]));
    let none = within(
        WAIT,
        in_b.list(&ListParams::default().fields("metadata.name=y")),
    )
    .await
    .unwrap();
    assert!(none.items.is_empty());
    assert!(none.metadata.resource_version.is_some());

    // An unsupported field label is a 400 naming it.
    let status = expect_api_error(
        within(
            WAIT,
            all.list(&ListParams::default().fields("spec.foo=bar")),
        )
        .await,
        400,
        "BadRequest",
    );
    assert!(
        status.message.contains("field label not supported"),
        "{status:?}"
    );
    server.shutdown().await;
}

/// A list without `limit` is read from the store and sent a batch at a time (the server's
/// streamed list; 256 keys a batch). What clients rely on must still hold across batches: every
/// item, selectors applied to each batch, and one revision for the whole list (shown by a list
/// at an older revision, after deletes spread over every batch, returning exactly the objects
/// of that revision).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unpaginated_list_of_several_batches_is_complete_and_at_one_revision() {
    const OBJECTS: usize = 600;
    let server = TestServer::start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(server.client.clone());
    let names: Vec<String> = (0..OBJECTS).map(|i| format!("cm-{i:04}")).collect();
    within(
        WAIT * 4,
        futures::stream::iter(names.iter().enumerate())
            .map(|(i, name)| {
                let api = api.clone();
                async move {
                    let pick = if i % 7 == 0 { "yes" } else { "no" };
                    api.create(&PostParams::default(), &config_map(name, &[("pick", pick)]))
                        .await
                }
            })
            .buffer_unordered(16)
            .try_collect::<Vec<_>>(),
    )
    .await
    .expect("create the ConfigMaps");

    let all = within(WAIT, api.list(&ListParams::default()))
        .await
        .expect("an unpaginated list");
    let listed: Vec<String> = all.items.iter().map(ResourceExt::name_any).collect();
    assert_eq!(listed, names, "every object, in key order");
    let revision = all
        .metadata
        .resource_version
        .clone()
        .expect("the list's resourceVersion");

    let picked = within(WAIT, api.list(&ListParams::default().labels("pick=yes")))
        .await
        .expect("a list with a label selector");
    let expected: Vec<String> = names.iter().step_by(7).cloned().collect();
    assert_eq!(
        picked
            .items
            .iter()
            .map(ResourceExt::name_any)
            .collect::<Vec<_>>(),
        expected
    );

    // Deletes spread over every batch, then a list at the first list's revision.
    let deleted: Vec<&String> = names.iter().step_by(5).collect();
    within(
        WAIT * 4,
        futures::stream::iter(deleted.iter())
            .map(|name| {
                let api = api.clone();
                async move { api.delete(name, &DeleteParams::default()).await }
            })
            .buffer_unordered(16)
            .try_collect::<Vec<_>>(),
    )
    .await
    .expect("delete every fifth ConfigMap");
    let now = within(WAIT, api.list(&ListParams::default()))
        .await
        .expect("a list after the deletes");
    assert_eq!(now.items.len(), OBJECTS - deleted.len());
    let then = within(
        WAIT,
        api.list(
            &ListParams::default()
                .at(&revision)
                .matching(VersionMatch::Exact),
        ),
    )
    .await
    .expect("a list at the first list's revision");
    assert_eq!(
        then.metadata.resource_version.as_deref(),
        Some(revision.as_str())
    );
    assert_eq!(
        then.items
            .iter()
            .map(ResourceExt::name_any)
            .collect::<Vec<_>>(),
        names,
        "the list at the older revision shows every object as it was"
    );

    // What can fail before the first byte fails as a Status (kube-rs retries a 504, so the
    // check uses a 400).
    expect_api_error(
        within(
            WAIT,
            api.list(&ListParams::default().labels("pick in (yes")),
        )
        .await,
        400,
        "BadRequest",
    );
    server.shutdown().await;
}
