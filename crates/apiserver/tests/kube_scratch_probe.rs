mod common;
use common::*;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::*;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe() {
    let server = TestServer::start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(server.client.clone());
    api.create(&PostParams::default(), &config_map("a", &[]))
        .await
        .unwrap();
    let r = api
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata":{"resourceVersion":null},"data":{"x":"1"}})),
        )
        .await;
    println!("merge rv null: {:?}", r.map(|o| o.data));
    let mut cm = api.get("a").await.unwrap();
    cm.metadata.resource_version = None;
    let r = api.replace("a", &PostParams::default(), &cm).await;
    println!("replace no rv: {:?}", r.is_ok());
    let mut cm = config_map("b", &[]);
    cm.metadata.namespace = Some("other".into());
    println!(
        "ns mismatch: {:?}",
        api.create(&PostParams::default(), &cm).await.err()
    );
    println!(
        "bad label: {:?}",
        api.create(
            &PostParams::default(),
            &config_map("c", &[("k", "bad value!")])
        )
        .await
        .err()
    );
    let r = api
        .watch(&WatchParams::default().fields("spec.x=1"), "0")
        .await;
    println!("watch bad field: {:?}", r.err());
    let r = api.list(&ListParams::default().at("999999")).await;
    println!("list future rv: {:?}", r.err());
    let r = api
        .list(&ListParams::default().at("1").matching(VersionMatch::Exact))
        .await;
    println!("list exact 1: {:?}", r.map(|l| l.items.len()));
    let r = api
        .patch(
            "missing",
            &PatchParams::default(),
            &Patch::Merge(json!({"data":{"x":"1"}})),
        )
        .await;
    println!("patch missing: {:?}", r.err());
    let r = api
        .patch(
            "a",
            &PatchParams::apply("me"),
            &Patch::Apply(json!({"apiVersion":"v1","kind":"ConfigMap","data":{"x":"1"}})),
        )
        .await;
    println!("apply: {:?}", r.err());
    let r = api.get_metadata("a").await;
    println!("get_metadata: {:?}", r.map(|m| m.metadata.name));
    let r = api.list_metadata(&ListParams::default()).await;
    println!("list_metadata: {:?}", r.map(|m| m.items.len()));
    server.shutdown().await;
}
