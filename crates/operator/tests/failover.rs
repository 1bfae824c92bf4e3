//! Two replicas of an operator against a real Finale API server: what happens to in-flight work
//! when the leader loses its Lease or shuts down.
//!
//! Every callback is journalled with its start and end (or the moment its future was dropped),
//! so the tests can check the one property that matters: no callback of the old leader runs
//! once the new leader has started acting.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{
    Behaviour, Ending, Journal, Recorder, Run, Server, StallProxy, WAIT, eventually, metric, within,
};
use finale_operator::backoff::{Backoff, RateLimit, RateLimits};
use finale_operator::client::Clients;
use finale_operator::leader::LeaseConfig;
use finale_operator::metrics::Metrics;
use finale_operator::runtime::{self, Settings};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

const LEASE: &str = "finale-widget-operator";
const LEADER: &str = "leader{controller=\"widget\"}";
const RENEW_DEADLINE: Duration = Duration::from_secs(2);

fn settings(replica: &str) -> Settings {
    let mut settings = Settings::new(replica);
    settings.backoff = Backoff {
        base: Duration::from_millis(100),
        cap: Duration::from_millis(500),
    };
    let mut lease = LeaseConfig::new("kube-system".into(), LEASE.into(), replica.into());
    lease.lease_duration = Duration::from_secs(3);
    lease.renew_deadline = RENEW_DEADLINE;
    lease.retry_period = Duration::from_millis(300);
    settings.leader_election = Some(lease);
    settings
}

/// One replica of the widget operator, running in this process.
struct Replica {
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
    task: JoinHandle<anyhow::Result<()>>,
}

impl Replica {
    fn start(
        client: kube::Config,
        name: &'static str,
        journal: &Journal,
        hang_cleanup_on: &'static [&'static str],
    ) -> Replica {
        Self::start_with(client, name, journal, hang_cleanup_on, settings(name))
    }

    fn start_with(
        client: kube::Config,
        name: &'static str,
        journal: &Journal,
        hang_cleanup_on: &'static [&'static str],
        settings: Settings,
    ) -> Replica {
        let metrics = Arc::new(Metrics::new());
        let shutdown = CancellationToken::new();
        let reconciler = Recorder {
            replica: name,
            journal: journal.clone(),
            hang_cleanup_on,
        };
        let rate_limits = Arc::new(RateLimits::new(
            RateLimit::new(1000, 100).expect("a rate limit"),
        ));
        let task = tokio::spawn(runtime::run(
            Clients::new(client).expect("clients"),
            reconciler,
            settings,
            Arc::clone(&metrics),
            rate_limits,
            shutdown.clone(),
        ));
        Replica {
            metrics,
            shutdown,
            task,
        }
    }

    fn leading(&self) -> bool {
        metric(&self.metrics, LEADER) == Some(1.0)
    }

    async fn wait_leading(&self, what: &str) {
        if eventually(WAIT, || self.leading().then_some(()))
            .await
            .is_none()
        {
            panic!("{what} never became the leader");
        }
    }
}

async fn lease_holder(client: &Client) -> Option<String> {
    Api::<Lease>::namespaced(client.clone(), "kube-system")
        .get_opt(LEASE)
        .await
        .expect("read the Lease")
        .and_then(|lease| lease.spec)
        .and_then(|spec| spec.holder_identity)
}

/// Samples both replicas' `leader` gauges until stopped; true if both were ever 1 at once.
fn watch_for_two_leaders(a: Arc<Metrics>, b: Arc<Metrics>) -> (Arc<AtomicBool>, JoinHandle<()>) {
    let seen = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&seen);
    let task = tokio::spawn(async move {
        loop {
            if metric(&a, LEADER) == Some(1.0) && metric(&b, LEADER) == Some(1.0) {
                flag.store(true, Ordering::SeqCst);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    (seen, task)
}

fn first_start(runs: &[Run]) -> Option<Instant> {
    runs.iter().map(|r| r.started).min()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_the_api_stops_acting_before_the_standby_takes_over() {
    let server = Server::start().await;
    let proxy = StallProxy::start(server.running.local_addr).expect("start the proxy");
    let journal = Journal::default();
    let a = Replica::start(server.config_via(&proxy).await, "a", &journal, &["a"]);
    a.wait_leading("replica a").await;

    // A steady stream of reconciles (each writes the status), and a cleanup that hangs on a.
    server.create_widget("ticker", Behaviour::Tick).await;
    server.create_widget("stuck", Behaviour::HangCleanup).await;
    journal
        .wait_for("a to apply both widgets", |runs| {
            ["ticker", "stuck"].iter().all(|w| {
                runs.iter()
                    .any(|r| r.replica == "a" && r.widget == *w && r.ended.is_some())
            })
        })
        .await;
    server
        .widgets()
        .delete("stuck", &DeleteParams::default())
        .await
        .expect("delete the stuck widget");
    journal
        .wait_for("a's cleanup of the stuck widget to start", |runs| {
            runs.iter()
                .any(|r| r.replica == "a" && r.callback == "cleanup")
        })
        .await;

    let b = Replica::start(server.config().await, "b", &journal, &["a"]);
    let (two_leaders, sampler) = watch_for_two_leaders(a.metrics.clone(), b.metrics.clone());
    // Precondition: b stands by while a renews.
    assert_eq!(lease_holder(&server.client).await.as_deref(), Some("a"));
    assert!(journal.of("b").is_empty(), "the standby never reconciles");

    proxy.stall();
    let stalled_at = Instant::now();
    let bound = RENEW_DEADLINE + Duration::from_millis(500);
    if eventually(bound, || (!a.leading()).then_some(()))
        .await
        .is_none()
    {
        panic!(
            "replica a still led {:?} after the API stopped answering it (renew deadline {RENEW_DEADLINE:?})",
            stalled_at.elapsed()
        );
    }
    let stepped_down = Instant::now();

    // b takes over once the Lease expires, reconciles the ticker and finishes the cleanup.
    b.wait_leading("replica b").await;
    journal
        .wait_for("b to finish the stuck widget's cleanup", |runs| {
            runs.iter().any(|r| {
                r.replica == "b"
                    && r.widget == "stuck"
                    && r.callback == "cleanup"
                    && matches!(r.ended, Some((_, Ending::Returned)))
            })
        })
        .await;
    let deadline = Instant::now() + WAIT;
    while server
        .widgets()
        .get_opt("stuck")
        .await
        .expect("get")
        .is_some()
    {
        assert!(Instant::now() < deadline, "the stuck widget never went");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let a_runs = journal.of("a");
    let b_started = first_start(&journal.of("b")).expect("b reconciled");
    for run in &a_runs {
        let Some((ended, _)) = run.ended else {
            panic!("a callback of the deposed leader never ended: {run:#?}");
        };
        assert!(
            ended <= b_started,
            "a callback of the old leader ran on after the new leader started acting: {run:#?}, \
             b started {:?} after a's run ended",
            b_started.saturating_duration_since(ended)
        );
        assert!(
            run.started <= stepped_down,
            "the deposed leader started work after stepping down: {run:#?}"
        );
    }
    let hung = a_runs
        .iter()
        .find(|r| r.callback == "cleanup" && r.widget == "stuck")
        .expect("a's hung cleanup");
    assert_eq!(
        hung.ended.map(|(_, how)| how),
        Some(Ending::Dropped),
        "the hung cleanup was cancelled"
    );
    assert!(
        !two_leaders.load(Ordering::SeqCst),
        "both replicas reported leading at once"
    );
    sampler.abort();
    a.shutdown.cancel();
    b.shutdown.cancel();
    let _ = within(WAIT, b.task).await;
    a.task.abort();
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_the_lease_cancels_in_flight_work_at_once() {
    let server = Server::start().await;
    let journal = Journal::default();
    let a = Replica::start(server.config().await, "a", &journal, &["a"]);
    a.wait_leading("replica a").await;
    server.create_widget("stuck", Behaviour::HangCleanup).await;
    journal
        .wait_for("a to apply the widget", |runs| {
            runs.iter()
                .any(|r| r.widget == "stuck" && r.ended.is_some())
        })
        .await;
    server
        .widgets()
        .delete("stuck", &DeleteParams::default())
        .await
        .expect("delete");
    journal
        .wait_for("the hung cleanup to start", |runs| {
            runs.iter().any(|r| r.callback == "cleanup")
        })
        .await;

    // Another candidate takes the Lease (as after a long pause of this one).
    let leases: Api<Lease> = Api::namespaced(server.client.clone(), "kube-system");
    let mut lease = leases.get(LEASE).await.expect("the Lease");
    if let Some(spec) = lease.spec.as_mut() {
        spec.holder_identity = Some("usurper".into());
        spec.lease_duration_seconds = Some(3600);
    }
    leases
        .replace(LEASE, &PostParams::default(), &lease)
        .await
        .expect("take the Lease over");
    let taken_at = Instant::now();
    journal
        .wait_for("the hung cleanup to be cancelled", |runs| {
            runs.iter()
                .any(|r| r.callback == "cleanup" && r.ended.is_some())
        })
        .await;
    let cleanup = journal
        .runs()
        .into_iter()
        .find(|r| r.callback == "cleanup")
        .expect("the cleanup");
    let (ended, how) = cleanup.ended.expect("ended");
    assert_eq!(how, Ending::Dropped);
    // Noticed at the next renewal (every 300 ms), cancelled at once.
    assert!(
        ended.saturating_duration_since(taken_at) < RENEW_DEADLINE,
        "cancelled {:?} after the Lease was lost",
        ended.saturating_duration_since(taken_at)
    );
    if eventually(Duration::from_secs(1), || (!a.leading()).then_some(()))
        .await
        .is_none()
    {
        panic!("replica a still reports leading after losing the Lease");
    }

    // While the usurper holds the Lease a does nothing; once it is free again a leads and
    // picks the work up. Nothing of a's may have started between the two.
    let lost_at = Instant::now();
    let mut lease = leases.get(LEASE).await.expect("the Lease");
    if let Some(spec) = lease.spec.as_mut() {
        spec.holder_identity = None;
    }
    let freed_at = Instant::now();
    leases
        .replace(LEASE, &PostParams::default(), &lease)
        .await
        .expect("free the Lease");
    a.wait_leading("replica a, again").await;
    journal
        .wait_for("a to resume the cleanup", |runs| {
            runs.iter().filter(|r| r.callback == "cleanup").count() >= 2
        })
        .await;
    for run in journal.runs() {
        assert!(
            run.started <= lost_at || run.started >= freed_at,
            "a acted while another replica held the Lease: {run:#?}"
        );
    }
    a.task.abort();
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_is_bounded_even_when_a_reconcile_hangs() {
    let server = Server::start().await;
    let journal = Journal::default();
    let grace = Duration::from_secs(1);
    let mut with_grace = settings("a");
    with_grace.graceful_shutdown_timeout = grace;
    let a = Replica::start_with(server.config().await, "a", &journal, &["a"], with_grace);
    a.wait_leading("replica a").await;
    server.create_widget("stuck", Behaviour::HangCleanup).await;
    journal
        .wait_for("a to apply the widget", |runs| {
            runs.iter()
                .any(|r| r.widget == "stuck" && r.ended.is_some())
        })
        .await;
    server
        .widgets()
        .delete("stuck", &DeleteParams::default())
        .await
        .expect("delete");
    journal
        .wait_for("the hung cleanup to start", |runs| {
            runs.iter().any(|r| r.callback == "cleanup")
        })
        .await;

    let stopping = Instant::now();
    a.shutdown.cancel();
    // The grace period, then at most a second to confirm the cancellation and the release's
    // bound; over loopback both take milliseconds.
    let limit = grace + Duration::from_secs(1) + finale_operator::leader::RELEASE_TIMEOUT;
    let Ok(finished) = tokio::time::timeout(limit, a.task).await else {
        panic!("the operator did not stop within {limit:?} of its shutdown");
    };
    finished.expect("no panic").expect("a clean stop");
    let took = stopping.elapsed();
    assert!(
        took >= grace,
        "in-flight work gets the grace period ({took:?})"
    );
    let cleanup = journal
        .runs()
        .into_iter()
        .find(|r| r.callback == "cleanup")
        .expect("the cleanup");
    assert_eq!(cleanup.ended.map(|(_, how)| how), Some(Ending::Dropped));
    assert_eq!(
        lease_holder(&server.client).await,
        None,
        "the Lease is released on the way out (stopped after {took:?})"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_backoff_of_an_object_deleted_while_failing_is_forgotten() {
    const BACKING_OFF: &str = "backoff_objects{controller=\"widget\"}";
    let server = Server::start().await;
    let journal = Journal::default();
    let a = Replica::start(server.config().await, "a", &journal, &[]);
    a.wait_leading("replica a").await;
    // One object that keeps failing and stays, one whose cleanup fails until a person removes
    // its finalizer by hand (the documented way to give up on a cleanup).
    server.create_widget("failing", Behaviour::Fail).await;
    server.create_widget("doomed", Behaviour::FailCleanup).await;
    journal
        .wait_for("doomed to be applied", |runs| {
            runs.iter()
                .any(|r| r.widget == "doomed" && r.ended.is_some())
        })
        .await;
    server
        .widgets()
        .delete("doomed", &DeleteParams::default())
        .await
        .expect("delete");
    if eventually(WAIT, || {
        (metric(&a.metrics, BACKING_OFF) == Some(2.0)).then_some(())
    })
    .await
    .is_none()
    {
        panic!(
            "both failing objects should be backing off: {:?}",
            metric(&a.metrics, BACKING_OFF)
        );
    }
    server
        .widgets()
        .patch(
            "doomed",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"finalizers": null}})),
        )
        .await
        .expect("remove the finalizer by hand");
    let deadline = Instant::now() + WAIT;
    while server
        .widgets()
        .get_opt("doomed")
        .await
        .expect("get")
        .is_some()
    {
        assert!(Instant::now() < deadline, "doomed never went");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if eventually(WAIT, || {
        (metric(&a.metrics, BACKING_OFF) == Some(1.0)).then_some(())
    })
    .await
    .is_none()
    {
        panic!(
            "the deleted object's backoff state was kept: {:?} objects backing off",
            metric(&a.metrics, BACKING_OFF)
        );
    }
    // The object that is still there keeps its backoff.
    assert_eq!(metric(&a.metrics, BACKING_OFF), Some(1.0));
    a.shutdown.cancel();
    let _ = within(WAIT, a.task).await;
    server.shutdown().await;
}
