//! `finale server --etcd-servers` against a real etcd member (Debian's etcd-server 3.4, or
//! `ETCD`) on loopback, with data on /dev/shm: what users see when etcd goes away and comes
//! back. Every wait is bounded.
//!
//! The rest of the suites run on etcd too with `FINALE_TEST_STORE=etcd` (kill -9 under load:
//! `crash.rs`).

mod common;

use std::time::{Duration, Instant};

use common::{Env, configmap, eventually, kubectl_watch_opened};
use finale_e2e::Etcd;

const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";

#[test]
fn while_etcd_is_down_readiness_fails_and_requests_get_a_503_status_then_all_resumes() {
    let mut etcd = Etcd::start_in_memory().expect("start etcd");
    let endpoint = etcd.endpoint.clone();
    let env = Env::start_with(&["--etcd-servers", &endpoint]);
    let api = env.api();
    let created = api
        .post_json(CONFIGMAPS, &configmap("before", &[("a", "1")]))
        .expect("create");
    assert_eq!(created.status, 201, "{}{}", created.body, env.log());
    assert_eq!(api.get("/readyz").expect("readyz").status, 200);
    // A watch open across the outage.
    let watch = env
        .kubectl
        .spawn(&["get", "configmaps", "--watch", "-o", "name", "-v=6"])
        .expect("kubectl watch");
    watch
        .wait_for(
            Duration::from_secs(20),
            "the watch to open",
            kubectl_watch_opened,
        )
        .expect("watch opened");

    etcd.stop().expect("stop etcd");

    let asked = Instant::now();
    let ready = api.get("/readyz").expect("readyz");
    assert_eq!(ready.status, 500, "readiness fails while etcd is down");
    assert!(
        ready.body.contains("[-]etcd failed"),
        "the etcd check names the failure: {}",
        ready.body
    );
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "readiness answered within its 2 s check timeout (took {:?})",
        asked.elapsed()
    );
    let check = api.get("/readyz/etcd").expect("readyz/etcd");
    assert_eq!(check.status, 500);
    assert!(check.body.contains("etcd"), "{}", check.body);

    // A write and a consistent read get a Status that names the cause, within the deadline.
    let asked = Instant::now();
    let refused = api
        .post_json(CONFIGMAPS, &configmap("during", &[("a", "2")]))
        .expect("create during the outage");
    let status = refused.expect_status(503, "ServiceUnavailable");
    let message = status["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("storage is unavailable") && message.contains("etcd"),
        "the message names the cause: {message}"
    );
    assert!(asked.elapsed() < Duration::from_secs(15));
    api.get(&format!("{CONFIGMAPS}/before"))
        .expect("get during the outage")
        .expect_status(503, "ServiceUnavailable");

    etcd.start_again().expect("start etcd again");
    eventually(Duration::from_secs(30), || {
        (api.get("/readyz").ok()?.status == 200).then_some(())
    })
    .unwrap_or_else(|| panic!("ready again once etcd is back{}", env.log()));
    assert_eq!(
        api.get(&format!("{CONFIGMAPS}/before"))
            .expect("get")
            .status,
        200
    );
    // The refused create left nothing behind.
    let missing = api.get(&format!("{CONFIGMAPS}/during")).expect("get");
    missing.expect_status(404, "NotFound");
    let after = api
        .post_json(CONFIGMAPS, &configmap("after", &[("a", "3")]))
        .expect("create after the outage");
    assert_eq!(after.status, 201, "{}{}", after.body, env.log());
    // The watch opened before the outage carries on and sees the new object.
    watch
        .wait_for(Duration::from_secs(20), "the watch to see 'after'", |out| {
            out.contains("configmap/after")
        })
        .unwrap_or_else(|e| panic!("{e:#}{}", env.log()));
    assert!(
        !watch.output().contains("configmap/during"),
        "nothing half-written reaches watchers"
    );
}
