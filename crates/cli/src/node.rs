//! `finale node`: a node agent ([`finale_node`]) against any Kubernetes API found through a
//! kubeconfig, with the kubelet's flag names.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use finale_node::{AgentConfig, CrashLoopBackoff, Taint};
use finale_operator::client::{Clients, Environment, load_config};
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

#[derive(clap::Args)]
pub struct NodeArgs {
    /// The kubeconfig to use. Default, as kubectl: $KUBECONFIG (a `:`-separated list,
    /// merged), else ~/.kube/config, else the in-cluster service account.
    #[arg(long, value_name = "PATH")]
    kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use.
    #[arg(long)]
    context: Option<String>,
    /// The Node's name (default: this host's name, lower-cased).
    #[arg(long, value_name = "NAME")]
    hostname_override: Option<String>,
    /// Where pods live: `<root-dir>/pods/<uid>/` holds each one's working directory, logs and
    /// state. Keep it across restarts: it is how a restarted agent adopts its pods.
    #[arg(long, value_name = "DIR", default_value = "./finale-node")]
    root_dir: PathBuf,
    /// Pods that may run at once; more are rejected (OutOfpods).
    #[arg(long, value_name = "N", default_value_t = 110)]
    max_pods: u32,
    /// The IP the log endpoint listens on; also the Node's InternalIP and every pod's IP (pods
    /// share the host's network).
    #[arg(long, value_name = "IP", default_value = "127.0.0.1")]
    address: IpAddr,
    /// The port of the log endpoint (HTTPS, `/containerLogs/...`); 0 picks a free one.
    #[arg(long, value_name = "PORT", default_value_t = 10250)]
    port: u16,
    /// Labels to add to the Node: `key=value,key=value`.
    #[arg(long, value_name = "KEY=VALUE[,...]", value_delimiter = ',', value_parser = parse_label)]
    node_labels: Vec<(String, String)>,
    /// Taints to register the Node with: `key=value:Effect,key:Effect` (Effect: NoSchedule,
    /// PreferNoSchedule or NoExecute). Only applied when the Node is created.
    #[arg(long, value_name = "KEY[=VALUE]:EFFECT[,...]", value_delimiter = ',', value_parser = parse_taint)]
    register_with_taints: Vec<Taint>,
    /// How often the Node's status (Ready and the pressure conditions) is posted.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
    node_status_update_frequency: Duration,
    /// The node Lease's `leaseDurationSeconds`; it is renewed every quarter of it.
    #[arg(long, value_name = "SECONDS", default_value_t = 40,
          value_parser = clap::value_parser!(i32).range(1..))]
    node_lease_duration_seconds: i32,
    /// The first wait before a crashed container is restarted again (it doubles each time).
    /// The kubelet's is fixed at 10 s; lower it to watch restarts quickly.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
    crash_loop_backoff_base: Duration,
    /// The longest crash-loop back-off (the kubelet's 5 minutes).
    #[arg(long, value_name = "DURATION", default_value = "300s", value_parser = humantime::parse_duration)]
    crash_loop_backoff_max: Duration,
}

/// `key=value` of `--node-labels`.
fn parse_label(text: &str) -> Result<(String, String), String> {
    let (key, value) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?}: a label is key=value"))?;
    if key.is_empty() {
        return Err(format!("{text:?}: the label key is empty"));
    }
    Ok((key.to_string(), value.to_string()))
}

/// `key=value:Effect` or `key:Effect` of `--register-with-taints`.
fn parse_taint(text: &str) -> Result<Taint, String> {
    let (key_value, effect) = text
        .rsplit_once(':')
        .ok_or_else(|| format!("{text:?}: a taint is key=value:Effect or key:Effect"))?;
    if !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
        return Err(format!(
            "{text:?}: the effect must be NoSchedule, PreferNoSchedule or NoExecute"
        ));
    }
    let (key, value) = match key_value.split_once('=') {
        Some((key, value)) => (key, Some(value.to_string())),
        None => (key_value, None),
    };
    if key.is_empty() {
        return Err(format!("{text:?}: the taint key is empty"));
    }
    Ok(Taint {
        key: key.to_string(),
        value,
        effect: effect.to_string(),
        time_added: None,
    })
}

impl NodeArgs {
    fn config(&self) -> anyhow::Result<AgentConfig> {
        let node_name = self
            .hostname_override
            .clone()
            .unwrap_or_else(finale_node::hostname);
        if self.node_status_update_frequency.is_zero() {
            anyhow::bail!("--node-status-update-frequency must be positive");
        }
        if self.crash_loop_backoff_base.is_zero()
            || self.crash_loop_backoff_max < self.crash_loop_backoff_base
        {
            anyhow::bail!(
                "--crash-loop-backoff-base must be positive and at most --crash-loop-backoff-max"
            );
        }
        let mut config = AgentConfig::new(node_name);
        config.root_dir = self.root_dir.clone();
        config.max_pods = self.max_pods;
        config.serve_address = SocketAddr::new(self.address, self.port);
        config.labels = self.node_labels.iter().cloned().collect::<BTreeMap<_, _>>();
        config.taints = self.register_with_taints.clone();
        config.status_update_frequency = self.node_status_update_frequency;
        config.lease_duration_seconds = self.node_lease_duration_seconds;
        // The kubelet renews every quarter of the Lease's duration.
        config.renew_interval =
            Duration::from_secs(u64::try_from(self.node_lease_duration_seconds).unwrap_or(40)) / 4;
        config.crash_loop_backoff = CrashLoopBackoff {
            base: self.crash_loop_backoff_base,
            max: self.crash_loop_backoff_max,
        };
        Ok(config)
    }
}

/// The agent's client and the cluster CA, from a kubeconfig.
async fn connect(
    kubeconfig: Option<&std::path::Path>,
    context: Option<&str>,
) -> anyhow::Result<(kube::Client, Option<String>)> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (kube_config, source) =
        load_config(kubeconfig, context, &Environment::of_process()).await?;
    tracing::info!(kubeconfig = %source, server = %kube_config.cluster_url, "Kubernetes API");
    // The CA that signs the API server's certificates also signs the client certificate it
    // presents to the log endpoint.
    let cluster_ca = kube_config
        .root_cert
        .as_deref()
        .filter(|certificates| !certificates.is_empty())
        .map(finale_node::pem_from_der);
    // One client for the watch and every other call: the watch client's long read timeout
    // never cuts a quiet watch, and the agent bounds its other calls itself.
    Ok((Clients::new(kube_config)?.watches, cluster_ca))
}

/// `finale server --with-node`: an agent in the server's process, talking to it over HTTPS
/// as `finale node` would, named after the host, its Pods under `DATA_DIR/node`, its log
/// endpoint on a free loopback port.
pub struct InProcess {
    shutdown: CancellationToken,
    agent: finale_node::RunningAgent,
}

impl InProcess {
    pub async fn start(
        kubeconfig: &std::path::Path,
        data_dir: &std::path::Path,
    ) -> anyhow::Result<InProcess> {
        let (client, cluster_ca) = connect(Some(kubeconfig), None).await?;
        let mut config = AgentConfig::new(finale_node::hostname());
        config.root_dir = data_dir.join("node");
        config.serve_address = SocketAddr::from(([127, 0, 0, 1], 0));
        let shutdown = CancellationToken::new();
        let agent = finale_node::start(client, cluster_ca, config, shutdown.clone()).await?;
        Ok(InProcess { shutdown, agent })
    }

    pub fn node_name(&self) -> &str {
        &self.agent.node_name
    }

    /// Stops the agent; its Pods keep running, as the kubelet's do, and the next start
    /// adopts them.
    pub async fn stop(self) {
        self.shutdown.cancel();
        if let Err(error) = self.agent.wait().await {
            tracing::warn!(error = %format!("{error:#}"), "the in-process node agent stopped with an error");
        }
    }
}

pub async fn run(args: NodeArgs) -> anyhow::Result<()> {
    let config = args.config()?;
    let (client, cluster_ca) = connect(args.kubeconfig.as_deref(), args.context.as_deref()).await?;
    let shutdown = CancellationToken::new();
    let mut terminate = signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("cannot listen for SIGINT")?;
    let trigger = shutdown.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = terminate.recv() => tracing::info!("SIGTERM received; stopping (pods keep running)"),
            _ = interrupt.recv() => tracing::info!("SIGINT received; stopping (pods keep running)"),
        }
        trigger.cancel();
    });
    let agent = finale_node::start(client, cluster_ca, config, shutdown).await?;
    println!(
        "finale node {} is running; its log endpoint is https://{}",
        agent.node_name, agent.serve_address
    );
    agent.wait().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn taints_and_labels_parse_in_kubelet_syntax() {
        let taint = parse_taint("dedicated=gpu:NoSchedule").expect("taint");
        assert_eq!(
            (
                taint.key.as_str(),
                taint.value.as_deref(),
                taint.effect.as_str()
            ),
            ("dedicated", Some("gpu"), "NoSchedule")
        );
        let taint = parse_taint("example.com/edge:NoExecute").expect("taint");
        assert_eq!(
            (taint.key.as_str(), taint.value),
            ("example.com/edge", None)
        );
        assert!(parse_taint("dedicated=gpu").is_err());
        assert!(parse_taint("dedicated=gpu:Sometimes").is_err());
        assert!(parse_taint(":NoSchedule").is_err());
        assert_eq!(
            parse_label("tier=edge"),
            Ok(("tier".to_string(), "edge".to_string()))
        );
        assert!(parse_label("tier").is_err());
    }
}
