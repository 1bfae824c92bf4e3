//! How the operators find their API server and their ports: kubectl's kubeconfig precedence
//! for `finale operator`, and the metrics address of `finale server --with-operators`.
//!
//! Which server an operator talks to is read from the server itself: the operator's leader
//! Lease there names the operator's identity.

mod common;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{binary, kube_client};
use finale_e2e::FinaleServer;
use finale_e2e::operator::{Environment, OperatorProcess};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;

const LEASE: &str = "finale-database-operator";

async fn lease_holder(server: &FinaleServer) -> Option<String> {
    Api::<Lease>::namespaced(kube_client(server).await, "kube-system")
        .get_opt(LEASE)
        .await
        .expect("read the Lease")
        .and_then(|lease| lease.spec)
        .and_then(|spec| spec.holder_identity)
}

/// Waits until `identity` holds the operator's Lease on `server`.
async fn wait_holder(server: &FinaleServer, identity: &str, operator: &OperatorProcess) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while lease_holder(server).await.as_deref() != Some(identity) {
        assert!(
            Instant::now() < deadline,
            "{identity} never led on {}; its log:\n{}",
            server.url,
            operator.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `dir/name`, a copy of `kubeconfig`.
fn copy_to(kubeconfig: &Path, dir: &Path, name: &str) -> PathBuf {
    std::fs::create_dir_all(dir).expect("mkdir");
    let path = dir.join(name);
    std::fs::copy(kubeconfig, &path).expect("copy the kubeconfig");
    path
}

struct TwoServers {
    chosen: FinaleServer,
    other: FinaleServer,
    dir: tempfile::TempDir,
}

impl TwoServers {
    fn start() -> TwoServers {
        let dir = tempfile::tempdir().expect("tempdir");
        let chosen = FinaleServer::start(binary(), &dir.path().join("chosen")).expect("server");
        let other = FinaleServer::start(binary(), &dir.path().join("other")).expect("server");
        TwoServers { chosen, other, dir }
    }

    /// Starts `finale operator database` as `identity` in `environment`, and checks that it
    /// leads on the chosen server and not on the other; then stops it (releasing the Lease).
    async fn expect_chosen(
        &self,
        identity: &str,
        kubeconfig: Option<&Path>,
        environment: Environment,
    ) {
        let mut operator = OperatorProcess::start_in(
            binary(),
            "database",
            kubeconfig,
            environment,
            self.dir.path(),
            identity,
            &["--lease-duration", "3s"],
        )
        .unwrap_or_else(|e| panic!("{identity}: the operator did not start: {e:#}"));
        wait_holder(&self.chosen, identity, &operator).await;
        assert_ne!(
            lease_holder(&self.other).await.as_deref(),
            Some(identity),
            "{identity} acts on both servers"
        );
        operator.stop().expect("stop the operator");
    }
}

#[tokio::test]
async fn operators_find_their_cluster_as_kubectl_does() {
    let servers = TwoServers::start();
    let base = servers.dir.path();
    let chosen = &servers.chosen.kubeconfig;
    let other = &servers.other.kubeconfig;
    // A working directory with a local server's kubeconfig in it, and a home whose
    // ~/.kube/config points at the other server: neither may beat $KUBECONFIG.
    let workdir = base.join("workdir");
    copy_to(other, &workdir.join("finale-data"), "kubeconfig");
    let home = base.join("home");
    copy_to(other, &home.join(".kube"), "config");
    let missing = base.join("no-such-kubeconfig");

    // $KUBECONFIG, a list: the missing file is skipped, and of the two that exist the first
    // one's current-context wins.
    let list = std::env::join_paths([missing.as_path(), chosen, other])
        .expect("a path list")
        .into_string()
        .expect("UTF-8 paths");
    servers
        .expect_chosen(
            "from-env",
            None,
            Environment {
                kubeconfig: Some(list),
                home: Some(home.clone()),
                current_dir: Some(workdir.clone()),
            },
        )
        .await;

    // --kubeconfig beats $KUBECONFIG.
    servers
        .expect_chosen(
            "from-flag",
            Some(chosen),
            Environment {
                kubeconfig: Some(other.display().to_string()),
                home: Some(home.clone()),
                current_dir: Some(workdir.clone()),
            },
        )
        .await;

    // Without either, ~/.kube/config; ./finale-data/kubeconfig is not consulted.
    let chosen_home = base.join("chosen-home");
    copy_to(chosen, &chosen_home.join(".kube"), "config");
    servers
        .expect_chosen(
            "from-home",
            None,
            Environment {
                kubeconfig: None,
                home: Some(chosen_home),
                current_dir: Some(workdir.clone()),
            },
        )
        .await;

    // Nothing configured (and not in a cluster): a clear error, even with a local server's
    // kubeconfig in the working directory.
    let empty_home = base.join("empty-home");
    std::fs::create_dir_all(&empty_home).expect("mkdir");
    let error = match OperatorProcess::start_in(
        binary(),
        "database",
        None,
        Environment {
            kubeconfig: None,
            home: Some(empty_home),
            current_dir: Some(workdir),
        },
        base,
        "from-nothing",
        &[],
    ) {
        Ok(mut operator) => {
            let _ = operator.stop();
            panic!(
                "the operator started with no kubeconfig configured; it must not pick up ./finale-data/kubeconfig"
            );
        }
        Err(error) => format!("{error:#}"),
    };
    assert!(
        error.contains("no Kubernetes API configured") && error.contains("--kubeconfig"),
        "the error says what to do: {error}"
    );
    assert_ne!(
        lease_holder(&servers.other).await.as_deref(),
        Some("from-nothing")
    );
}

/// Holds 127.0.0.1:`port` (or finds it already held by someone else: taken either way).
fn occupy(port: u16) -> Option<TcpListener> {
    TcpListener::bind(("127.0.0.1", port)).ok()
}

#[test]
fn with_operators_a_taken_metrics_port_fails_the_start_and_names_the_flag() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data_dir = dir.path().join("data");
    // The default address, as in the report; held for as short a time as possible.
    let _held = occupy(8080);
    let error =
        match FinaleServer::start_with(binary(), &data_dir, "127.0.0.1:0", &["--with-operators"]) {
            Ok(_) => panic!("finale server --with-operators started with 127.0.0.1:8080 taken"),
            Err(error) => format!("{error:#}"),
        };
    drop(_held);
    assert!(
        error.contains("127.0.0.1:8080") && error.contains("--operator-metrics-addr"),
        "the error names the address and the flag: {error}"
    );
    assert!(error.contains("exit status: 1"), "it exits 1: {error}");
    assert!(
        !data_dir.join("pki").exists(),
        "it failed before creating anything"
    );
}

#[test]
fn with_operators_metrics_port_0_picks_a_free_port_and_prints_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data_dir = dir.path().join("data");
    let server = FinaleServer::start_with(
        binary(),
        &data_dir,
        "127.0.0.1:0",
        &["--with-operators", "--operator-metrics-addr", "127.0.0.1:0"],
    )
    .expect("start the server");
    // The line follows the banner the fixture waits for.
    let deadline = Instant::now() + Duration::from_secs(60);
    let address = loop {
        let printed = server.stdout_lines().into_iter().find_map(|line| {
            line.strip_prefix("the bundled operators serve metrics on http://")
                .and_then(|rest| rest.strip_suffix("/metrics"))
                .map(str::to_string)
        });
        if let Some(address) = printed {
            break address;
        }
        assert!(
            Instant::now() < deadline,
            "the metrics address was never printed; stdout: {:?}\nlog: {}",
            server.stdout_lines(),
            server.log_tail(40)
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let port: u16 = address
        .strip_prefix("127.0.0.1:")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("a loopback address: {address}"));
    assert_ne!(port, 0);
    // The endpoint answers at once; each operator registers its gauges as it starts.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let metrics = reqwest::blocking::get(format!("http://{address}/metrics"))
            .expect("the metrics endpoint answers")
            .text()
            .expect("a body");
        if metrics.contains("leader{controller=") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the operators' leader gauges never appeared: {metrics}\nlog: {}",
            server.log_tail(40)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
