//! "Finale instead of envtest" (README): an operator's test starts `finale server` in a
//! temporary directory, connects kube-rs through the kubeconfig it prints, and runs against a
//! real API server: a CRD with a CEL rule, a finalizer, and the garbage collector, which
//! envtest does not run. This file is the README's example, kept true by running it; it uses
//! only what an operator's own crate has (kube, k8s-openapi, tokio, tempfile), not this
//! repository's fixtures.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Client, Config, CustomResource, CustomResourceExt, KubeSchema, Resource};
use serde::{Deserialize, Serialize};

/// How long the server may take to start, and any wait below.
const WAIT: Duration = Duration::from_secs(30);

/// The custom resource under test, with a validation rule the server enforces.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug)]
#[kube(group = "example.com", version = "v1", kind = "Widget", namespaced)]
#[x_kube(validation = Rule::new("self.replicas <= 10").message("at most 10 replicas"))]
pub struct WidgetSpec {
    replicas: i32,
}

/// A `finale server` for one test, on a free loopback port, its data in a temporary
/// directory; killed when dropped.
struct Finale {
    child: Child,
    kubeconfig: PathBuf,
    _data: tempfile::TempDir,
}

impl Finale {
    fn start() -> Finale {
        let data = tempfile::tempdir().expect("a temporary directory");
        // In an operator's own crate: `Command::new("finale")`, with finale on PATH.
        let mut child = Command::new(env!("CARGO_BIN_EXE_finale"))
            .args(["server", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start finale server");
        // Once it serves, it prints `export KUBECONFIG=<its admin kubeconfig>`. Its stdout is
        // drained until it exits, so it never writes into a closed pipe.
        let stdout = child.stdout.take().expect("the server's stdout");
        let (found, kubeconfig) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(path) = line.strip_prefix("export KUBECONFIG=") {
                    let _ = found.send(PathBuf::from(path));
                }
            }
        });
        let kubeconfig = kubeconfig
            .recv_timeout(WAIT)
            .expect("finale server printed its kubeconfig");
        Finale {
            child,
            kubeconfig,
            _data: data,
        }
    }

    async fn client(&self) -> Client {
        let kubeconfig = Kubeconfig::read_from(&self.kubeconfig).expect("read the kubeconfig");
        let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .expect("a client configuration");
        Client::try_from(config).expect("a client")
    }
}

impl Drop for Finale {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn an_operator_test_runs_against_finale_as_it_would_against_envtest() {
    // kube's TLS needs a process-wide crypto provider when several are linked in.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let finale = Finale::start();
    let client = finale.client().await;

    // Install the CRD as the operator would, and wait until it is served.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.patch(
        "widgets.example.com",
        &PatchParams::apply("widget-operator"),
        &Patch::Apply(Widget::crd()),
    )
    .await
    .expect("apply the CRD");
    tokio::time::timeout(
        WAIT,
        await_condition(
            crds,
            "widgets.example.com",
            conditions::is_crd_established(),
        ),
    )
    .await
    .expect("the CRD is established in time")
    .expect("watch the CRD");

    // The CRD's CEL rule is enforced, as kube-apiserver does (envtest too).
    let widgets: Api<Widget> = Api::namespaced(client.clone(), "default");
    let mut too_big = Widget::new("too-big", WidgetSpec { replicas: 11 });
    too_big.metadata.finalizers = Some(vec!["example.com/cleanup".into()]);
    let refused = widgets
        .create(&PostParams::default(), &too_big)
        .await
        .expect_err("a Widget over its rule is refused");
    let kube::Error::Api(status) = refused else {
        panic!("not an API error: {refused}");
    };
    assert_eq!(status.code, 422, "{status:?}");
    assert!(status.message.contains("at most 10 replicas"), "{status:?}");

    // A Widget that holds a finalizer, and a ConfigMap it owns.
    let mut widget = Widget::new("app", WidgetSpec { replicas: 3 });
    widget.metadata.finalizers = Some(vec!["example.com/cleanup".into()]);
    let widget = widgets
        .create(&PostParams::default(), &widget)
        .await
        .expect("create the Widget");
    let owner = widget
        .controller_owner_ref(&())
        .expect("the Widget has a uid");
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let owned = ConfigMap {
        metadata: ObjectMeta {
            name: Some("app-settings".into()),
            owner_references: Some(vec![OwnerReference {
                block_owner_deletion: Some(true),
                ..owner
            }]),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    };
    let owned_uid = config_maps
        .create(&PostParams::default(), &owned)
        .await
        .expect("create the owned ConfigMap")
        .metadata
        .uid
        .expect("a created object has a uid");

    // Deleting the Widget in the foreground: the garbage collector (which envtest does not
    // run) deletes the ConfigMap, while the finalizer keeps the Widget until the operator
    // removes it.
    widgets
        .delete("app", &DeleteParams::foreground())
        .await
        .expect("delete the Widget");
    tokio::time::timeout(
        WAIT,
        await_condition(
            config_maps,
            "app-settings",
            conditions::is_deleted(&owned_uid),
        ),
    )
    .await
    .expect("the garbage collector deletes the ConfigMap in time")
    .expect("watch the ConfigMap");
    let terminating = widgets.get("app").await.expect("the Widget is still there");
    assert!(
        terminating.metadata.deletion_timestamp.is_some(),
        "the Widget is being deleted: {:?}",
        terminating.metadata
    );

    // The operator's cleanup is done: it removes its finalizer, and the Widget is gone.
    let widget_uid = terminating.metadata.uid.clone().unwrap_or_default();
    widgets
        .patch(
            "app",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"finalizers": null}})),
        )
        .await
        .expect("remove the finalizer");
    tokio::time::timeout(
        WAIT,
        await_condition(widgets, "app", conditions::is_deleted(&widget_uid)),
    )
    .await
    .expect("the Widget is gone in time")
    .expect("watch the Widget");
}
