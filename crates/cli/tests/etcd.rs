//! `finale server --etcd-servers` against a real etcd member (Debian's etcd-server 3.4, or
//! `ETCD`) on loopback, with data on /dev/shm: what users see when etcd goes away and comes
//! back. Every wait is bounded.
//!
//! The rest of the suites run on etcd too with `FINALE_TEST_STORE=etcd` (kill -9 under load:
//! `crash.rs`).

mod common;

use std::time::{Duration, Instant};

use common::{Env, configmap, eventually, kubectl_watch_opened, resource_version};
use finale_e2e::stall_proxy::StallProxy;
use finale_e2e::{Etcd, Kubectl};

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

/// How many successful lists of the ConfigMap `target` kubectl's `-v=6` log shows.
fn target_lists(output: &str) -> usize {
    output
        .lines()
        .filter(|line| {
            line.contains("/configmaps?")
                && line.contains("fieldSelector=metadata.name%3Dtarget")
                && !line.contains("watch=true")
                && line.contains("200 OK")
        })
        .count()
}

/// kubectl's informers (here `kubectl wait --for=delete`) start over with a list when the
/// resourceVersion they resume a watch from has been compacted: the server answers 410
/// Expired, as kube-apiserver does, and client-go re-lists. The watch cache keeps 5 changes,
/// so a resume from before 20 writes is served from etcd, which has compacted it.
#[test]
fn kubectl_relists_when_its_watch_resumes_from_a_compacted_revision() {
    let etcd = Etcd::start_in_memory().expect("start etcd");
    let env = Env::start_with(&[
        "--etcd-servers",
        &etcd.endpoint,
        "--default-watch-cache-size=5",
        "--etcd-compaction-interval=0",
    ]);
    let api = env.api();
    let created = api
        .post_json(CONFIGMAPS, &configmap("target", &[]))
        .expect("create");
    assert_eq!(created.status, 201, "{}", created.body);

    // kubectl through a proxy that can cut its connection, as a network failure would.
    let proxy = StallProxy::start(env.server.addr().parse().expect("server address"))
        .expect("start the proxy");
    let kubeconfig = std::fs::read_to_string(&env.server.kubeconfig).expect("kubeconfig");
    let direct = format!("https://{}", env.server.addr());
    assert!(kubeconfig.contains(&direct), "{kubeconfig}");
    let proxied = env.dir.path().join("proxied-kubeconfig");
    std::fs::write(
        &proxied,
        kubeconfig.replace(&direct, &format!("https://127.0.0.1:{}", proxy.port())),
    )
    .expect("write the proxied kubeconfig");
    let kubectl = Kubectl::new(&proxied).expect("kubectl fixture");
    let mut wait = kubectl
        .spawn(&[
            "wait",
            "--for=delete",
            "configmap/target",
            "--timeout=120s",
            "-v=6",
        ])
        .expect("kubectl wait");
    let opened = wait
        .wait_for(
            Duration::from_secs(30),
            "the watch to open",
            kubectl_watch_opened,
        )
        .expect("watch opened");
    let lists_before = target_lists(&opened);
    // client-go re-lists after any watch that ends within a second having delivered nothing
    // ("very short watch"); this one must outlive that rule, so that only a 410 can make
    // kubectl list again.
    std::thread::sleep(Duration::from_millis(1500));

    // While kubectl's connection is held, the world moves past the cache's history and etcd
    // compacts it away; then the connection breaks and kubectl resumes its watch.
    proxy.stall();
    let mut last = 0;
    for index in 0..20 {
        let created = api
            .post_json(CONFIGMAPS, &configmap(&format!("filler-{index}"), &[]))
            .expect("create a filler");
        assert_eq!(created.status, 201, "{}", created.body);
        last = resource_version(&created.json());
    }
    etcd.compact(last).expect("compact etcd");
    proxy.sever();
    proxy.resume();

    // Precondition: the resumed watch was refused and kubectl listed again.
    let relisted = wait
        .wait_for(
            Duration::from_secs(60),
            "a list after the refused watch",
            |output| target_lists(output) > lists_before,
        )
        .unwrap_or_else(|e| panic!("{e:#}{}", env.log()));
    assert!(
        relisted.contains("too old resource version"),
        "kubectl re-listed without a 410: {relisted}"
    );
    assert!(
        wait.wait_exit(Duration::from_millis(1)).is_none(),
        "{relisted}"
    );

    // Its new watch works: the deletion ends the wait.
    let deleted = api
        .request(
            reqwest::Method::DELETE,
            &format!("{CONFIGMAPS}/target"),
            None,
            None,
        )
        .expect("delete the target");
    assert_eq!(deleted.status, 200, "{}", deleted.body);
    let status = wait
        .wait_exit(Duration::from_secs(30))
        .unwrap_or_else(|| panic!("kubectl wait did not end: {}", wait.output()));
    let output = wait.output();
    assert!(status.success(), "{output}");
    assert!(
        output.contains("configmap/target condition met"),
        "{output}"
    );
}
