//! Leader election against a real Finale API server: stepping down on the renew deadline while
//! Lease calls hang, no renewal after the leadership is dropped, and a release that never
//! clears a Lease someone else holds.

mod common;

use std::time::{Duration, Instant};

use common::{Server, StallProxy, WAIT, within};
use finale_operator::leader::{Leadership, LeaseConfig, Released};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use kube::api::{Api, PostParams};
use tokio_util::sync::CancellationToken;

const LEASE: &str = "test-leader";

/// Short timings with client-go's proportions: the renew deadline well inside the lease.
fn lease_config(identity: &str) -> LeaseConfig {
    let mut config = LeaseConfig::new("kube-system".into(), LEASE.into(), identity.into());
    config.lease_duration = Duration::from_secs(3);
    config.renew_deadline = Duration::from_secs(2);
    config.retry_period = Duration::from_millis(300);
    config
}

async fn acquire(client: Client, identity: &str) -> Leadership {
    let elector = finale_operator::leader::elector(client, lease_config(identity));
    within(WAIT, elector.acquire(&CancellationToken::new()))
        .await
        .expect("leader election works")
        .expect("not shut down")
}

async fn lease(client: &Client) -> Lease {
    Api::<Lease>::namespaced(client.clone(), "kube-system")
        .get(LEASE)
        .await
        .expect("read the Lease")
}

fn holder(lease: &Lease) -> Option<String> {
    lease.spec.as_ref()?.holder_identity.clone()
}

fn renew_time(lease: &Lease) -> Option<String> {
    Some(format!("{:?}", lease.spec.as_ref()?.renew_time.as_ref()?))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_lease_calls_hang_steps_down_within_the_renew_deadline() {
    let server = Server::start().await;
    let proxy = StallProxy::start(server.running.local_addr).expect("start the proxy");
    // No client-side timeouts at all: the election must bound its calls itself.
    let through_proxy = Client::try_from(server.config_via(&proxy).await).expect("client");
    let leadership = acquire(through_proxy, "a").await;
    let lost = leadership.lost();

    // Precondition: renewals pass through the proxy.
    let first = renew_time(&lease(&server.client).await);
    let deadline = Instant::now() + WAIT;
    while renew_time(&lease(&server.client).await) == first {
        assert!(Instant::now() < deadline, "the leader never renewed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!lost.is_cancelled(), "still leading while renewals work");

    proxy.stall();
    let stalled_at = Instant::now();
    let renew_deadline = lease_config("a").renew_deadline;
    // The last successful renewal was sent before the stall, so its deadline is at most
    // `renew_deadline` after it; allow a little for scheduling.
    let bound = renew_deadline + Duration::from_millis(300);
    if tokio::time::timeout(bound, lost.cancelled()).await.is_err() {
        panic!(
            "the leader still considered itself leading {:?} after its Lease calls started to hang \
             (renew deadline {renew_deadline:?})",
            stalled_at.elapsed()
        );
    }

    // A standby (direct connection) takes over once the Lease expires.
    let successor = acquire(server.client.clone(), "b").await;
    assert_eq!(holder(&lease(&server.client).await).as_deref(), Some("b"));
    assert!(lost.is_cancelled());
    drop(successor);
    drop(leadership);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_leadership_stops_renewing() {
    let server = Server::start().await;
    let leadership = acquire(server.client.clone(), "a").await;
    let lost = leadership.lost();
    drop(leadership);
    assert!(
        lost.is_cancelled(),
        "whoever watches `lost` must stop acting once the leadership is dropped"
    );
    // Without renewals the Lease expires and a standby takes it; with the renewer still
    // running it never would.
    let started = Instant::now();
    let elector = finale_operator::leader::elector(server.client.clone(), lease_config("b"));
    let limit = lease_config("b").lease_duration * 3;
    let Ok(successor) =
        tokio::time::timeout(limit, elector.acquire(&CancellationToken::new())).await
    else {
        panic!(
            "no standby could take the Lease within {limit:?}: the dropped leader still renews it ({:?})",
            lease(&server.client).await.spec
        );
    };
    let successor = successor.expect("election works").expect("not shut down");
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "it had to expire first"
    );
    assert_eq!(holder(&lease(&server.client).await).as_deref(), Some("b"));
    drop(successor);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_hands_the_lease_over_only_while_it_is_ours() {
    let server = Server::start().await;
    // Released while held: the holder is cleared and a standby takes over at once, long
    // before the Lease would have expired.
    let leadership = acquire(server.client.clone(), "a").await;
    let released = within(WAIT, leadership.release()).await.expect("release");
    assert_eq!(released, Released::Released);
    assert_eq!(holder(&lease(&server.client).await), None);
    let started = Instant::now();
    let second = acquire(server.client.clone(), "b").await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "a released Lease is free at once ({:?})",
        started.elapsed()
    );

    // Someone else wrote the Lease meanwhile (a successor after a pause, a person): the
    // release must not clear their claim.
    let leases: Api<Lease> = Api::namespaced(server.client.clone(), "kube-system");
    let mut taken = lease(&server.client).await;
    if let Some(spec) = taken.spec.as_mut() {
        spec.holder_identity = Some("usurper".into());
        spec.lease_duration_seconds = Some(3600);
    }
    leases
        .replace(LEASE, &PostParams::default(), &taken)
        .await
        .expect("overwrite the Lease");
    let released = within(WAIT, second.release()).await.expect("release");
    assert_eq!(released, Released::NotHeld);
    assert_eq!(
        holder(&lease(&server.client).await).as_deref(),
        Some("usurper"),
        "the release cleared a Lease that was no longer ours"
    );
    server.shutdown().await;
}
