//! `/livez`, `/readyz` and `/healthz` as kube-apiserver serves them, and readiness that
//! follows the store: a store whose disk is full refuses writes with a Status naming the
//! cause, `/readyz` says so and names the check (issue #18, item 5), reads keep working, and
//! writes resume by themselves once space is freed (issue #17, item 5).

mod common;

use std::time::Duration;

use common::{Api, Env, binary, configmap, eventually};
use finale_e2e::FinaleServer;
use finale_faultfs::tmpfs::Tmpfs;

const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";

fn get_text(api: &Api, path: &str) -> (u16, String, String) {
    let response = api
        .get(path)
        .unwrap_or_else(|e| panic!("GET {path}: {e:#}"));
    (response.status, response.content_type, response.body)
}

#[test]
fn health_endpoints_report_named_checks_in_upstreams_format() {
    let env = Env::start();
    let anonymous = Api::with_token(&env.server, None).unwrap();

    for endpoint in ["healthz", "livez", "readyz"] {
        let (code, content_type, body) = get_text(&anonymous, &format!("/{endpoint}"));
        assert_eq!((code, body.as_str()), (200, "ok"), "/{endpoint}");
        assert_eq!(content_type, "text/plain; charset=utf-8", "/{endpoint}");
    }
    let (code, _, body) = get_text(&anonymous, "/readyz?verbose");
    assert_eq!(code, 200);
    assert_eq!(
        body,
        "[+]ping ok\n[+]store ok\n[+]store-writable ok\n[+]controllers ok\n[+]shutdown ok\nreadyz check passed\n"
    );
    let (_, _, body) = get_text(&anonymous, "/livez?verbose");
    assert_eq!(body, "[+]ping ok\n[+]store ok\nlivez check passed\n");
    let (_, _, body) = get_text(&anonymous, "/healthz?verbose=1");
    assert_eq!(body, "[+]ping ok\n[+]store ok\nhealthz check passed\n");

    let (code, _, body) = get_text(
        &anonymous,
        "/readyz?verbose&exclude=store-writable&exclude=etcd&exclude=informer-sync",
    );
    assert_eq!(code, 200);
    assert_eq!(
        body,
        "[+]ping ok\n[+]store ok\n[+]store-writable excluded: ok\n[+]controllers ok\n[+]shutdown ok\n\
         warn: some health checks cannot be excluded: no matches for \"etcd\",\"informer-sync\"\n\
         readyz check passed\n"
    );

    for path in [
        "/readyz/store-writable",
        "/readyz/shutdown",
        "/livez/store",
        "/healthz/ping",
    ] {
        let (code, _, body) = get_text(&anonymous, path);
        assert_eq!((code, body.as_str()), (200, "ok"), "{path}");
    }
    // A check an endpoint does not have is not found there.
    let (code, _, _) = get_text(&anonymous, "/livez/store-writable");
    assert_eq!(code, 404);
    let (code, _, _) = get_text(&anonymous, "/readyz/etcd");
    assert_eq!(code, 404);
}

#[test]
fn a_full_disk_refuses_writes_with_a_clear_status_keeps_reads_and_recovers_once_space_is_freed() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    // Only the store is on the small filesystem: the log and the PKI stay writable.
    let tmpfs = Tmpfs::mount(&data_dir.join("store"), "16m");
    let mut server =
        FinaleServer::start_with(binary(), &data_dir, "127.0.0.1:0", &[]).expect("start");
    let log = |server: &FinaleServer| format!("\n--- server log ---\n{}", server.log_tail(40));
    let anonymous = Api::with_token(&server, None).unwrap();
    let api = Api::new(&server).unwrap();
    assert_eq!(get_text(&anonymous, "/readyz").2, "ok");
    let stored = api
        .post_json(CONFIGMAPS, &configmap("before", &[("k", "v")]))
        .unwrap();
    assert_eq!(stored.status, 201, "{}", stored.body);

    let filler = tmpfs.fill();
    // Writes that need new blocks now fail with ENOSPC, and the store refuses writes until
    // it has recovered.
    let blob = "x".repeat(1 << 20);
    let mut acknowledged = vec!["before".to_string()];
    let mut refused = None;
    for i in 0..20 {
        let name = format!("big{i}");
        let response = api
            .post_json(CONFIGMAPS, &configmap(&name, &[("blob", &blob)]))
            .unwrap();
        if response.status >= 500 {
            refused = Some((name, response));
            break;
        }
        assert_eq!(response.status, 201, "{}", response.body);
        acknowledged.push(name);
    }
    let (failed_name, refused) = refused
        .unwrap_or_else(|| panic!("no write failed with the store's disk full{}", log(&server)));
    // As kube-apiserver on etcd's "database space exceeded": a 500 InternalError Status whose
    // message names the cause, here with what to do about it.
    let status = refused.expect_status(500, "InternalError");
    let message = status["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("the store's disk is full, so writes are refused (reads still work)")
            && message.contains("No space left on device")
            && message.contains("writes resume by themselves once there is room"),
        "the Status names the full disk and what to do: {status}"
    );
    // Still full: the next write is refused the same way (the store does not recover while
    // its disk has no room).
    let again = api
        .post_json(CONFIGMAPS, &configmap("refused", &[("k", "v")]))
        .unwrap();
    let status = again.expect_status(500, "InternalError");
    assert!(
        status["message"]
            .as_str()
            .is_some_and(|m| m.contains("disk is full")),
        "{status}"
    );

    let (code, content_type, body) = get_text(&anonymous, "/readyz");
    assert_eq!(code, 500, "{body}{}", log(&server));
    assert_eq!(content_type, "text/plain; charset=utf-8");
    assert!(
        body.contains("[-]store-writable failed: reason withheld\n"),
        "readiness names the failing check: {body}"
    );
    assert!(body.ends_with("readyz check failed\n"), "{body}");
    assert!(body.contains("[+]ping ok\n"), "{body}");
    let (code, _, reason) = get_text(&anonymous, "/readyz/store-writable");
    assert_eq!(code, 500);
    assert!(
        reason.starts_with(
            "internal server error: the store refuses writes: the store's disk is full"
        ) && reason.contains("No space left on device"),
        "the per-check path gives the reason: {reason}"
    );
    // Liveness, like upstream's, needs the store to answer reads, which it still does.
    let (code, _, body) = get_text(&anonymous, "/livez?verbose");
    assert_eq!(
        (code, body.as_str()),
        (200, "[+]ping ok\n[+]store ok\nlivez check passed\n")
    );
    // Reads keep working: every acknowledged object is listed, the refused ones are not.
    let names = api.configmap_names("default");
    for name in &acknowledged {
        assert!(
            names.contains(name),
            "{name} is listed while the disk is full"
        );
    }
    assert!(!names.contains(&"refused".to_string()), "{names:?}");
    let metrics = api.get("/metrics").unwrap().body;
    assert!(
        metrics.contains("apiserver_store_state{state=\"refusing-writes\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("apiserver_store_state{state=\"serving\"} 0"));

    // Free the space: the store recovers by itself, without a restart, and readiness and
    // writes come back.
    std::fs::remove_file(filler).unwrap();
    let ready = eventually(Duration::from_secs(20), || {
        let (code, _, body) = get_text(&anonymous, "/readyz");
        (code == 200).then_some(body)
    });
    assert!(
        ready.is_some(),
        "ready again once space is freed, without a restart{}",
        log(&server)
    );
    let after = api
        .post_json(CONFIGMAPS, &configmap("after", &[("k", "v")]))
        .unwrap();
    assert_eq!(after.status, 201, "{}", after.body);
    acknowledged.push("after".to_string());
    let metrics = api.get("/metrics").unwrap().body;
    assert!(metrics.contains("apiserver_store_state{state=\"serving\"} 1"));

    // Every acknowledged object survives a restart; the refused one never existed, and the
    // one whose write failed is there only if it reached the disk whole.
    server
        .restart()
        .expect("restart on the same data directory");
    let anonymous = Api::with_token(&server, None).unwrap();
    let ready = eventually(Duration::from_secs(20), || {
        (get_text(&anonymous, "/readyz").0 == 200).then_some(())
    });
    assert!(ready.is_some(), "ready after a restart{}", log(&server));
    let api = Api::new(&server).unwrap();
    let names = api.configmap_names("default");
    for name in &acknowledged {
        assert!(names.contains(name), "{name} after a restart: {names:?}");
    }
    assert!(!names.contains(&"refused".to_string()), "{names:?}");
    if names.contains(&failed_name) {
        let object = api
            .get(&format!("{CONFIGMAPS}/{failed_name}"))
            .unwrap()
            .json();
        assert_eq!(object["data"]["blob"].as_str().map(str::len), Some(1 << 20));
    }
    drop(server);
    drop(tmpfs);
}

/// The memory and start-up flags of the embedded store and the watch cache: a server with a
/// small page cache, no integrity check at open and a 1 MiB watch history serves writes and
/// reads; values out of range are refused before anything starts, naming the flag.
#[test]
fn storage_and_watch_cache_flags_are_accepted_and_checked() {
    let flags = [
        "--storage-cache-mb",
        "8",
        "--storage-check-integrity=false",
        "--watch-cache-max-mb",
        "1",
    ];
    let env = Env::start_with(&flags);
    env.ok(&["create", "configmap", "flags", "--from-literal=k=v"]);
    let value = env.ok(&["get", "configmap", "flags", "-o", "jsonpath={.data.k}"]);
    assert_eq!(value, "v");

    for (flag, value) in [
        ("--storage-cache-mb", "0"),
        ("--watch-cache-max-mb", "0"),
        ("--storage-check-integrity", "maybe"),
    ] {
        let dir = tempfile::tempdir().expect("temporary directory");
        let output = std::process::Command::new(binary())
            .args(["server", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.path())
            .args([flag, value])
            .output()
            .expect("run finale server");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{flag} {value} was accepted");
        assert!(stderr.contains(flag), "{flag} {value}: {stderr}");
        assert!(
            !dir.path().join("store").exists(),
            "{flag} {value}: nothing is created before the flags are checked"
        );
    }
}
