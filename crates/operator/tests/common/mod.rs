//! Fixtures for the toolkit's integration suites: a real Finale API server in process (HTTPS on
//! an ephemeral loopback port), a `Widget` custom resource, and a reconciler that records who
//! reconciled what and when.
//!
//! The one fake is `finale_e2e::stall_proxy::StallProxy`, a loopback TCP proxy that can be made
//! to stop answering: it injects what the real server cannot produce on demand, a network path
//! on which requests are sent and never answered.

#![allow(dead_code)]

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use finale_apiserver::server::{RunningServer, ServerConfig, start};
use finale_operator::metrics::Metrics;
use finale_operator::runtime::{Applied, Cleanup, Context, Reconciler};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config, CustomResource, CustomResourceExt, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tempfile::TempDir;

pub use finale_e2e::stall_proxy::StallProxy;

/// The bound on any single wait in these suites.
pub const WAIT: Duration = Duration::from_secs(20);

pub const NAMESPACE: &str = "widgets";
pub const FINALIZER: &str = "example.com/widget";

/// A Finale API server in this process, on its own data directory.
pub struct Server {
    pub running: RunningServer,
    pub client: Client,
    _dir: TempDir,
}

impl Server {
    pub async fn start() -> Server {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let dir = tempfile::tempdir().expect("a temporary data directory");
        let mut config = ServerConfig::new(
            dir.path().join("data"),
            "127.0.0.1:0".parse().expect("a loopback address"),
        );
        // Tests need no fsync; nothing here restarts the store.
        config.store.durable_commits = false;
        let running = within(WAIT, start(config))
            .await
            .expect("the server starts");
        let client = Client::try_from(Self::config_of(&running).await).expect("a kube client");
        let server = Server {
            running,
            client,
            _dir: dir,
        };
        server.install_widgets().await;
        server
    }

    async fn config_of(running: &RunningServer) -> Config {
        let kubeconfig = Kubeconfig::read_from(&running.kubeconfig).expect("the kubeconfig");
        Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .expect("a client configuration")
    }

    /// A client configuration for this server, as the kubeconfig gives it.
    pub async fn config(&self) -> Config {
        Self::config_of(&self.running).await
    }

    /// A client configuration that reaches this server through `proxy`.
    pub async fn config_via(&self, proxy: &StallProxy) -> Config {
        let mut config = self.config().await;
        config.cluster_url = format!("https://127.0.0.1:{}", proxy.port())
            .parse()
            .expect("a proxy URL");
        config
    }

    async fn install_widgets(&self) {
        finale_operator::install::install_crd(self.client.clone(), &Widget::crd(), "tests")
            .await
            .expect("install the Widget CRD");
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(self.client.clone());
        let namespace =
            serde_json::from_value(json!({"metadata": {"name": NAMESPACE}})).expect("a Namespace");
        namespaces
            .create(&PostParams::default(), &namespace)
            .await
            .expect("create the namespace");
    }

    pub fn widgets(&self) -> Api<Widget> {
        Api::namespaced(self.client.clone(), NAMESPACE)
    }

    pub async fn create_widget(&self, name: &str, behaviour: Behaviour) -> Widget {
        let widget = Widget::new(name, WidgetSpec { behaviour });
        self.widgets()
            .create(&PostParams::default(), &widget)
            .await
            .unwrap_or_else(|e| panic!("create widget {name}: {e}"))
    }

    pub async fn shutdown(self) {
        within(Duration::from_secs(30), self.running.shutdown()).await;
    }
}

/// What the recording reconciler does with a widget.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum Behaviour {
    /// *apply* writes the status and asks to be called again in 100 ms: a steady stream of
    /// reconciles, each with an API call.
    #[default]
    Tick,
    /// *apply* succeeds once and waits for a change.
    Settle,
    /// *apply* always fails.
    Fail,
    /// *cleanup* never completes on the replicas listed in [`Recorder::hang_cleanup_on`].
    HangCleanup,
    /// *cleanup* always fails.
    FailCleanup,
}

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
#[kube(
    group = "example.com",
    version = "v1",
    kind = "Widget",
    namespaced,
    status = "WidgetStatus"
)]
pub struct WidgetSpec {
    pub behaviour: Behaviour,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
pub struct WidgetStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reconciled_by: Option<String>,
}

/// How a recorded callback ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    Returned,
    /// Its future was dropped before it returned: cancelled.
    Dropped,
}

/// One callback run by one replica.
#[derive(Clone, Debug)]
pub struct Run {
    pub replica: &'static str,
    pub widget: String,
    pub callback: &'static str,
    pub started: Instant,
    pub ended: Option<(Instant, Ending)>,
}

/// Every callback run by every replica of a test, in start order.
#[derive(Clone, Default)]
pub struct Journal(Arc<Mutex<Vec<Run>>>);

impl Journal {
    pub fn runs(&self) -> Vec<Run> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn begin(&self, replica: &'static str, widget: String, callback: &'static str) -> RunGuard {
        let mut runs = self.0.lock().unwrap_or_else(|e| e.into_inner());
        runs.push(Run {
            replica,
            widget,
            callback,
            started: Instant::now(),
            ended: None,
        });
        RunGuard {
            journal: self.clone(),
            index: runs.len() - 1,
            returned: false,
        }
    }

    /// Runs of `replica`.
    pub fn of(&self, replica: &str) -> Vec<Run> {
        self.runs()
            .into_iter()
            .filter(|r| r.replica == replica)
            .collect()
    }

    /// Waits until `check` holds for the journal.
    pub async fn wait_for(&self, what: &str, check: impl Fn(&[Run]) -> bool) {
        let deadline = Instant::now() + WAIT;
        loop {
            let runs = self.runs();
            if check(&runs) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; journal: {runs:#?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Marks its run ended when dropped: returned if [`RunGuard::returned`] was called, else
/// dropped (the future was cancelled).
struct RunGuard {
    journal: Journal,
    index: usize,
    returned: bool,
}

impl RunGuard {
    fn returned(mut self) {
        self.returned = true;
    }
}

impl Drop for RunGuard {
    fn drop(&mut self) {
        let ending = if self.returned {
            Ending::Returned
        } else {
            Ending::Dropped
        };
        let mut runs = self.journal.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(run) = runs.get_mut(self.index) {
            run.ended = Some((Instant::now(), ending));
        }
    }
}

/// A reconciler that journals every callback it runs.
pub struct Recorder {
    pub replica: &'static str,
    pub journal: Journal,
    /// The replicas on which a `HangCleanup` widget's cleanup never completes.
    pub hang_cleanup_on: &'static [&'static str],
}

impl Reconciler for Recorder {
    type Resource = Widget;

    fn name(&self) -> &'static str {
        "widget"
    }

    fn finalizers(&self) -> &'static [&'static str] {
        &[FINALIZER]
    }

    async fn apply(&self, widget: Arc<Widget>, context: &Context) -> anyhow::Result<Applied> {
        let run = self.journal.begin(self.replica, widget.name_any(), "apply");
        let outcome = match widget.spec.behaviour {
            Behaviour::Tick => {
                let api: Api<Widget> = Api::namespaced(context.client.clone(), NAMESPACE);
                api.patch_status(
                    &widget.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {"reconciled_by": self.replica}})),
                )
                .await?;
                Ok(Applied::RequeueAfter(Duration::from_millis(100)))
            }
            Behaviour::Settle | Behaviour::HangCleanup | Behaviour::FailCleanup => {
                Ok(Applied::AwaitChange)
            }
            Behaviour::Fail => Err(anyhow::anyhow!("this widget always fails")),
        };
        run.returned();
        outcome
    }

    async fn cleanup(
        &self,
        _finalizer: &str,
        widget: Arc<Widget>,
        _context: &Context,
    ) -> anyhow::Result<Cleanup> {
        let run = self
            .journal
            .begin(self.replica, widget.name_any(), "cleanup");
        if widget.spec.behaviour == Behaviour::HangCleanup
            && self.hang_cleanup_on.contains(&self.replica)
        {
            std::future::pending::<()>().await;
        }
        run.returned();
        if widget.spec.behaviour == Behaviour::FailCleanup {
            return Err(anyhow::anyhow!("this widget's cleanup always fails"));
        }
        Ok(Cleanup::Done)
    }
}

/// The value of one series of the operators' metrics, e.g. `leader{controller="widget"}`.
pub fn metric(metrics: &Metrics, series: &str) -> Option<f64> {
    let text = metrics.encode().expect("encode the metrics");
    text.lines().find_map(|line| {
        line.strip_prefix(series)
            .and_then(|rest| rest.strip_prefix(' '))
            .and_then(|value| value.trim().parse().ok())
    })
}

/// Awaits `future`, failing the test if it takes longer than `limit`.
pub async fn within<T>(limit: Duration, future: impl Future<Output = T>) -> T {
    match tokio::time::timeout(limit, future).await {
        Ok(value) => value,
        Err(_) => panic!("timed out after {limit:?}"),
    }
}

/// Polls `check` every 20 ms until it returns `Some`, for at most `limit`.
pub async fn eventually<T>(limit: Duration, mut check: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = check() {
            return Some(value);
        }
        if Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
