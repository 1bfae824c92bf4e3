//! The toolkit writes its operators' `FinalizerClaim`s, against a real Finale API server: once
//! the widget operator runs, its claim exists and a `DeletionReview` of a widget it is cleaning
//! up names it and says Progressing; once it dies and its Lease expires, the same review says
//! Stuck.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Behaviour, FINALIZER, Journal, NAMESPACE, Recorder, Server, WAIT, within};
use finale_apiserver::insight::api::{
    CauseState, DeletionReview, DeletionReviewSpec, DeletionReviewStatus, FinalizerClaim,
    ForcePolicy, GroupResource, TargetRef, Verdict,
};
use finale_operator::backoff::{RateLimit, RateLimits};
use finale_operator::client::Clients;
use finale_operator::leader::LeaseConfig;
use finale_operator::metrics::Metrics;
use finale_operator::runtime::{self, Settings};
use kube::api::{Api, DeleteParams, PostParams};
use kube::{Client, ResourceExt};
use tokio_util::sync::CancellationToken;

const LEASE: &str = "finale-widget-operator";
const CLAIM: &str = "finale-widget-operator.example.com-widget";

fn settings() -> Settings {
    let mut settings = Settings::new("replica-a");
    let mut lease = LeaseConfig::new("kube-system".into(), LEASE.into(), "replica-a".into());
    lease.lease_duration = Duration::from_secs(2);
    lease.renew_deadline = Duration::from_millis(1400);
    lease.retry_period = Duration::from_millis(200);
    settings.leader_election = Some(lease);
    settings
}

async fn review(client: &Client, name: &str) -> DeletionReviewStatus {
    let reviews: Api<DeletionReview> = Api::all(client.clone());
    let request = DeletionReview::new(DeletionReviewSpec {
        target: TargetRef {
            api_version: "example.com/v1".into(),
            kind: "Widget".into(),
            namespace: NAMESPACE.into(),
            name: name.into(),
            ..TargetRef::default()
        },
        ..DeletionReviewSpec::default()
    });
    within(WAIT, reviews.create(&PostParams::default(), &request))
        .await
        .expect("create a DeletionReview")
        .status
        .expect("the review's answer")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operators_claim_names_it_while_alive_and_reads_stuck_once_its_lease_expires() {
    let server = Server::start().await;
    let journal = Journal::default();
    let rate_limits = Arc::new(RateLimits::new(
        RateLimit::new(1000, 100).expect("a rate limit"),
    ));
    let operator = tokio::spawn(runtime::run(
        Clients::new(server.config().await).expect("clients"),
        Recorder {
            replica: "replica-a",
            journal: journal.clone(),
            hang_cleanup_on: &["replica-a"],
        },
        settings(),
        Arc::new(Metrics::new()),
        rate_limits,
        CancellationToken::new(),
    ));

    // The claim exists, with no code in the operator.
    let claims: Api<FinalizerClaim> = Api::all(server.client.clone());
    let deadline = tokio::time::Instant::now() + WAIT;
    let claim = loop {
        if let Some(found) = claims.get_opt(CLAIM).await.expect("read the claim") {
            break found;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the toolkit never wrote the operator's FinalizerClaim {CLAIM}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(claim.spec.finalizer, FINALIZER);
    assert_eq!(
        claim.spec.resources,
        [GroupResource {
            group: "example.com".into(),
            resource: "widgets".into()
        }]
    );
    assert_eq!(claim.spec.controller, "finale-widget-operator");
    assert_eq!(
        (
            claim.spec.lease.namespace.as_str(),
            claim.spec.lease.name.as_str()
        ),
        ("kube-system", LEASE)
    );
    assert_eq!(claim.spec.force_policy, ForcePolicy::WhenOwnerDead);

    // A widget whose cleanup never completes, deleted while the operator runs: Progressing,
    // naming the controller.
    server.create_widget("held", Behaviour::HangCleanup).await;
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let widget = server.widgets().get("held").await.expect("read the widget");
        if widget.finalizers().iter().any(|f| f == FINALIZER) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the operator never added its finalizer"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    within(
        WAIT,
        server.widgets().delete("held", &DeleteParams::default()),
    )
    .await
    .expect("delete the widget");
    journal
        .wait_for("the cleanup to start", |runs| {
            runs.iter()
                .any(|r| r.widget == "held" && r.callback == "cleanup")
        })
        .await;
    let alive = review(&server.client, "held").await;
    assert_eq!(alive.verdict, Verdict::Progressing, "{alive:#?}");
    let cause = &alive.causes[0];
    assert_eq!(cause.state, CauseState::Progressing, "{cause:#?}");
    assert!(
        cause.message.contains("finale-widget-operator"),
        "the cause names the controller: {cause:#?}"
    );

    // The operator dies without releasing its Lease; once the Lease expires, Stuck.
    operator.abort();
    let _ = operator.await;
    let deadline = tokio::time::Instant::now() + WAIT;
    let dead = loop {
        let status = review(&server.client, "held").await;
        if status.verdict == Verdict::Stuck {
            break status;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the review never said Stuck after the operator died: {status:#?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let cause = &dead.causes[0];
    assert_eq!(cause.state, CauseState::Stuck, "{cause:#?}");
    assert!(
        cause.message.contains("finale-widget-operator"),
        "{cause:#?}"
    );
    server.shutdown().await;
}

/// Polls the claim until `done` holds for it (None: absent), within [`WAIT`].
async fn claim_until(
    claims: &Api<FinalizerClaim>,
    what: &str,
    done: impl Fn(Option<&FinalizerClaim>) -> bool,
) -> Option<FinalizerClaim> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let found = claims.get_opt(CLAIM).await.expect("read the claim");
        if done(found.as_ref()) {
            return found;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: never happened; the claim is {found:#?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_or_changed_claim_is_written_again_while_the_operator_runs() {
    let server = Server::start().await;
    let shutdown = CancellationToken::new();
    let operator = tokio::spawn(runtime::run(
        Clients::new(server.config().await).expect("clients"),
        Recorder {
            replica: "replica-a",
            journal: Journal::default(),
            hang_cleanup_on: &[],
        },
        settings(),
        Arc::new(Metrics::new()),
        Arc::new(RateLimits::new(
            RateLimit::new(1000, 100).expect("a rate limit"),
        )),
        shutdown.clone(),
    ));
    let claims: Api<FinalizerClaim> = Api::all(server.client.clone());
    let first = claim_until(&claims, "the first write", |c| c.is_some())
        .await
        .expect("the claim");

    // Its status, computed by the server, says the operator is alive (it holds the Lease).
    let raw: Api<kube::api::DynamicObject> = Api::all_with(
        server.client.clone(),
        &kube::discovery::ApiResource::erase::<FinalizerClaim>(&()),
    );
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let object = raw.get(CLAIM).await.expect("read the claim");
        if object.data["status"]["live"] == true {
            assert_eq!(object.data["status"]["holder"], "replica-a");
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the claim never read live: {:#}",
            object.data
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Deleted by hand: written again (a new object).
    claims
        .delete(CLAIM, &DeleteParams::default())
        .await
        .expect("delete the claim");
    let again = claim_until(&claims, "the re-creation", |c| {
        c.is_some_and(|c| c.metadata.uid != first.metadata.uid)
    })
    .await
    .expect("the claim");
    assert_eq!(again.spec, first.spec);

    // Changed by hand: corrected back to what the operator declares.
    let mut changed = again.clone();
    changed.spec.force_policy = ForcePolicy::Always;
    changed.spec.controller = "someone-else".into();
    claims
        .replace(CLAIM, &PostParams::default(), &changed)
        .await
        .expect("change the claim");
    let corrected = claim_until(&claims, "the correction", |c| {
        c.is_some_and(|c| {
            c.metadata.resource_version != again.metadata.resource_version && c.spec == first.spec
        })
    })
    .await
    .expect("the claim");
    assert_eq!(corrected.spec.force_policy, ForcePolicy::WhenOwnerDead);

    shutdown.cancel();
    let _ = within(WAIT, operator).await;
    server.shutdown().await;
}
