//! `finale server` as a process: start, signals, restart on the same data, file permissions,
//! port conflicts, authentication, and how bad requests are refused over raw HTTPS.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{Api, Env, binary, configmap, resource_version};
use finale_e2e::{FinaleServer, Signal};
use serde_json::{Value, json};

const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";

fn mode(path: &std::path::Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("stat {}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

/// Sends `signal` with a `kubectl get -w` open; the server must exit 0 within a few seconds
/// and the watch must end.
fn stops_cleanly_on(signal: Signal) {
    let mut env = Env::start();
    let api = env.api();
    assert_eq!(
        api.post_json(CONFIGMAPS, &configmap("before", &[("k", "v")]))
            .unwrap()
            .status,
        201
    );
    let mut watch = env
        .kubectl
        .spawn(&["get", "configmaps", "-w"])
        .expect("start kubectl get -w");
    watch
        .wait_for(Duration::from_secs(30), "the initial list", |out| {
            out.contains("before")
        })
        .unwrap_or_else(|e| panic!("{e:#}{}", env.log()));
    // Make sure the watch request itself is established, not just the list.
    assert_eq!(
        api.post_json(CONFIGMAPS, &configmap("during", &[("k", "v")]))
            .unwrap()
            .status,
        201
    );
    watch
        .wait_for(
            Duration::from_secs(30),
            "the object created while watching",
            |out| out.contains("during"),
        )
        .unwrap_or_else(|e| panic!("{e:#}{}", env.log()));

    let started = Instant::now();
    let code = env
        .server
        .terminate(signal)
        .unwrap_or_else(|e| panic!("{e:#}{}", env.log()));
    let took = started.elapsed();
    assert_eq!(code, Some(0), "exit code after {signal}{}", env.log());
    assert!(
        took < Duration::from_secs(5),
        "the server took {took:?} to stop after {signal}{}",
        env.log()
    );
    let log = env.server.log();
    assert!(log.contains("stopped cleanly"), "{}", env.log());

    // The watch stream ends with the server; kubectl exits instead of hanging.
    let status = watch.wait_exit(Duration::from_secs(10));
    let out = watch.kill();
    assert!(
        status.is_some(),
        "kubectl get -w still runs 10 s after the server stopped:\n{out}"
    );
}

#[test]
fn sigterm_stops_the_server_with_exit_0_even_with_an_open_watch() {
    stops_cleanly_on(Signal::SIGTERM);
}

#[test]
fn sigint_stops_the_server_with_exit_0_even_with_an_open_watch() {
    stops_cleanly_on(Signal::SIGINT);
}

#[test]
fn sigterm_during_a_write_load_drains_and_keeps_every_acknowledged_write() {
    let mut env = Env::start();
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..8)
        .map(|id| {
            let api = env.api();
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let (mut acked, mut answered_otherwise) = (Vec::new(), Vec::new());
                for seq in 0.. {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let name = format!("w{id}-{seq}");
                    match api.post_json(CONFIGMAPS, &configmap(&name, &[("seq", &seq.to_string())]))
                    {
                        Ok(r) if r.status == 201 => acked.push(name),
                        Ok(r) => {
                            answered_otherwise.push(format!("{name}: {} {}", r.status, r.body))
                        }
                        // The server closed the connection or stopped listening: done.
                        Err(_) => break,
                    }
                }
                (acked, answered_otherwise)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1500));
    let code = env
        .server
        .terminate(Signal::SIGTERM)
        .unwrap_or_else(|e| panic!("{e:#}{}", env.log()));
    stop.store(true, Ordering::SeqCst);
    assert_eq!(
        code,
        Some(0),
        "exit code after SIGTERM under load{}",
        env.log()
    );
    let (mut acked, mut other) = (Vec::new(), Vec::new());
    for writer in writers {
        let (a, o) = writer.join().expect("writer");
        acked.extend(a);
        other.extend(o);
    }
    assert!(!acked.is_empty(), "no write was acknowledged{}", env.log());
    assert!(
        other.is_empty(),
        "during a graceful stop a request is either served or refused at the connection: {other:?}"
    );
    env.server.restart().unwrap_or_else(|e| panic!("{e:#}"));
    let stored: std::collections::HashSet<String> =
        env.api().configmap_names("default").into_iter().collect();
    let lost: Vec<&String> = acked.iter().filter(|n| !stored.contains(*n)).collect();
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged writes lost over a clean stop: {:?}",
        lost.len(),
        acked.len(),
        &lost[..lost.len().min(10)]
    );
}

#[test]
fn data_survives_a_clean_restart_and_resource_versions_keep_increasing() {
    let mut env = Env::start();
    let api = env.api();
    let created = api
        .post_json(CONFIGMAPS, &configmap("durable", &[("answer", "42")]))
        .unwrap();
    assert_eq!(created.status, 201, "{}", created.body);
    let created = created.json();
    let patched = api
        .request(
            reqwest::Method::PATCH,
            &format!("{CONFIGMAPS}/durable"),
            Some("application/merge-patch+json"),
            Some(br#"{"metadata":{"labels":{"v":"2"}}}"#.to_vec()),
        )
        .unwrap();
    assert_eq!(patched.status, 200, "{}", patched.body);
    let before = patched.json();
    let list_rv_before = resource_version(&api.get(CONFIGMAPS).unwrap().json());

    let port = env.server.port();
    assert_eq!(
        env.server.terminate(Signal::SIGTERM).unwrap(),
        Some(0),
        "{}",
        env.log()
    );
    env.server.restart().unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(env.server.port(), port, "restart() reuses the address");

    // The same token and CA still work: the kubeconfig handed out earlier stays valid.
    let after = api.get(&format!("{CONFIGMAPS}/durable")).unwrap();
    assert_eq!(after.status, 200, "{}{}", after.body, env.log());
    let after = after.json();
    assert_eq!(after, before, "the object is unchanged by the restart");
    assert_eq!(after["metadata"]["uid"], created["metadata"]["uid"]);
    assert_eq!(after["data"]["answer"], "42");

    let list_rv_after = resource_version(&api.get(CONFIGMAPS).unwrap().json());
    assert!(
        list_rv_after >= list_rv_before,
        "the list resourceVersion went back from {list_rv_before} to {list_rv_after}"
    );
    let next = api
        .post_json(CONFIGMAPS, &configmap("after-restart", &[]))
        .unwrap();
    assert_eq!(next.status, 201, "{}", next.body);
    assert!(
        resource_version(&next.json()) > resource_version(&before),
        "resourceVersions must keep increasing across restarts: {} then {}",
        resource_version(&before),
        next.body
    );
    // kubectl, with the same kubeconfig, sees both.
    let names = env.ok(&["get", "configmaps", "-o", "name"]);
    assert!(
        names.contains("configmap/durable") && names.contains("configmap/after-restart"),
        "{names}"
    );
    // The system namespaces are not duplicated or reset by the second bootstrap.
    let namespaces = env.ok(&["get", "namespaces", "-o", "name"]);
    assert_eq!(namespaces.lines().count(), 4, "{namespaces}");
}

#[test]
fn listen_on_port_0_prints_the_real_port() {
    let env = Env::start();
    let port = env.server.port();
    assert_ne!(
        port, 0,
        "the printed URL must carry the bound port: {}",
        env.server.url
    );
    assert!(
        env.server.url.starts_with("https://127.0.0.1:"),
        "{}",
        env.server.url
    );
    std::net::TcpStream::connect(("127.0.0.1", port))
        .unwrap_or_else(|e| panic!("nothing listens on the printed port {port}: {e}"));
    let kubeconfig = std::fs::read_to_string(&env.server.kubeconfig).unwrap();
    assert!(
        kubeconfig.contains(&format!("server: https://127.0.0.1:{port}")),
        "the kubeconfig points at the bound port:\n{kubeconfig}"
    );
    let health = env.api().get("/healthz").unwrap();
    assert_eq!((health.status, health.body.as_str()), (200, "ok"));
}

#[test]
fn kubeconfig_and_pki_files_are_private() {
    let env = Env::start();
    assert_eq!(mode(&env.server.kubeconfig), 0o600, "kubeconfig mode");
    assert_eq!(mode(&env.server.data_dir), 0o700, "data directory mode");
    let pki = env.server.data_dir.join("pki");
    assert_eq!(mode(&pki), 0o700, "pki directory mode");
    let mut files = 0;
    for entry in std::fs::read_dir(&pki).unwrap() {
        let path = entry.unwrap().path();
        assert_eq!(mode(&path), 0o600, "{} mode", path.display());
        files += 1;
    }
    for expected in [
        "ca.crt",
        "ca.key",
        "apiserver.crt",
        "apiserver.key",
        "admin.token",
    ] {
        assert!(pki.join(expected).exists(), "pki/{expected} missing");
    }
    assert!(files >= 5);
    // The token in the kubeconfig is the one on disk.
    let token = std::fs::read_to_string(pki.join("admin.token")).unwrap();
    assert_eq!(env.server.token().unwrap(), token.trim());
}

#[test]
fn a_second_server_on_an_occupied_port_fails_with_a_clear_message() {
    let env = Env::start();
    let other = env.dir.path().join("other-data");
    let error = match FinaleServer::start_with(binary(), &other, env.server.addr(), &[]) {
        Ok(_) => panic!(
            "a second server started on the occupied {}",
            env.server.addr()
        ),
        Err(error) => format!("{error:#}"),
    };
    assert!(
        error.contains(&format!("cannot listen on {}", env.server.addr())),
        "the error names the address: {error}"
    );
    assert!(
        error.contains("--listen"),
        "the error suggests --listen: {error}"
    );
    assert!(error.contains("exit status: 1"), "it exits 1: {error}");
    // One readable line, not a Debug dump with backtrace frames (RUST_BACKTRACE may be set).
    let log = std::fs::read_to_string(other.join("server.log")).unwrap();
    let last = log.lines().last().unwrap_or_default();
    assert!(
        last.starts_with(&format!("Error: cannot listen on {}", env.server.addr())),
        "the last line states the error: {log}"
    );
    assert!(
        !log.contains("Stack backtrace"),
        "no backtrace for a user error: {log}"
    );
    assert!(
        !log.contains('\u{1b}'),
        "no colour codes in a log file: {log}"
    );
    // The first server is unaffected.
    assert_eq!(env.api().get("/healthz").unwrap().status, 200);
    env.ok(&["get", "namespaces"]);
}

#[test]
fn a_second_server_on_the_same_data_directory_fails_with_a_clear_message() {
    let env = Env::start();
    let started = Instant::now();
    let result = FinaleServer::start_with(binary(), &env.server.data_dir, "127.0.0.1:0", &[]);
    let error = match result {
        Ok(_) => panic!("two servers run on one data directory"),
        Err(error) => format!("{error:#}"),
    };
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "refusing took {:?}",
        started.elapsed()
    );
    assert!(
        error.contains("cannot open the store") && error.contains("already open"),
        "the error says the store is in use: {error}"
    );
    assert!(!error.contains("Stack backtrace"), "{error}");
    // The first server still serves.
    let api = env.api();
    assert_eq!(
        api.post_json(CONFIGMAPS, &configmap("still-fine", &[]))
            .unwrap()
            .status,
        201
    );
}

#[test]
fn requests_without_a_valid_token_get_401_unauthorized() {
    let env = Env::start();
    let anonymous = Api::with_token(&env.server, None).unwrap();
    let wrong = Api::with_token(&env.server, Some("not-the-token".into())).unwrap();
    for (who, api) in [("no token", &anonymous), ("a wrong token", &wrong)] {
        for path in [
            "/version",
            "/api",
            "/apis",
            CONFIGMAPS,
            "/metrics",
            "/openapi/v3",
        ] {
            let response = api.get(path).unwrap();
            let status = response.expect_status(401, "Unauthorized");
            assert!(
                status["message"].as_str().unwrap().contains("kubeconfig"),
                "{who} on {path}: the message points at the kubeconfig: {status}"
            );
        }
        let write = api
            .post_json(CONFIGMAPS, &configmap("sneaky", &[]))
            .unwrap();
        write.expect_status(401, "Unauthorized");
    }
    // The admin token works…
    let admitted = env.api().get("/version").unwrap();
    assert_eq!(
        admitted.status, 200,
        "the admin token works: {}",
        admitted.body
    );
    // …but only as a Bearer token: other schemes are refused even with the right secret.
    let client = reqwest::blocking::Client::builder()
        .add_root_certificate(
            reqwest::Certificate::from_pem(env.server.ca_pem().unwrap().as_bytes()).unwrap(),
        )
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let token = env.server.token().unwrap();
    let response = client
        .get(format!("{}/version", env.server.url))
        .basic_auth("admin", Some(token))
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 401);
    let status: Value = response.json().unwrap();
    assert_eq!(status["reason"], "Unauthorized", "{status}");

    assert_eq!(
        env.api().configmap_names("default"),
        Vec::<String>::new(),
        "nothing stored"
    );
    // kubectl with a broken token reports the failure.
    let kubeconfig = std::fs::read_to_string(&env.server.kubeconfig)
        .unwrap()
        .replace(&env.server.token().unwrap(), "wrong-token");
    let bad_kubeconfig = env.dir.path().join("bad-kubeconfig");
    std::fs::write(&bad_kubeconfig, kubeconfig).unwrap();
    let kubectl = finale_e2e::Kubectl::new(&bad_kubeconfig).unwrap();
    let out = kubectl.run(&["get", "configmaps"]).unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("You must be logged in to the server") || stderr.contains("Unauthorized"),
        "{stderr}"
    );
}

#[test]
fn health_endpoints_answer_without_a_token() {
    let env = Env::start();
    let anonymous = Api::with_token(&env.server, None).unwrap();
    for path in ["/healthz", "/livez", "/readyz"] {
        let response = anonymous.get(path).unwrap();
        assert_eq!(response.status, 200, "{path}: {}", response.body);
        assert_eq!(response.body, "ok", "{path}");
    }
}

#[test]
fn malformed_json_gets_400_bad_request_and_stores_nothing() {
    let env = Env::start();
    let api = env.api();
    for body in [&b"{not json"[..], b"", b"[1,2,3", b"\"just a string\""] {
        let response = api
            .request(
                reqwest::Method::POST,
                CONFIGMAPS,
                Some("application/json"),
                Some(body.to_vec()),
            )
            .unwrap();
        let status = response.expect_status(400, "BadRequest");
        let message = status["message"].as_str().unwrap();
        assert!(
            message.len() > 10,
            "a useful message for {body:?}: {status}"
        );
    }
    let invalid = api
        .request(
            reqwest::Method::POST,
            CONFIGMAPS,
            Some("application/json"),
            Some(b"{\"kind\":".to_vec()),
        )
        .unwrap();
    let status = invalid.expect_status(400, "BadRequest");
    assert!(
        status["message"].as_str().unwrap().contains("JSON"),
        "the message says what is wrong: {status}"
    );
    // A malformed patch is refused the same way.
    assert_eq!(
        api.post_json(CONFIGMAPS, &configmap("target", &[("k", "v")]))
            .unwrap()
            .status,
        201
    );
    let patch = api
        .request(
            reqwest::Method::PATCH,
            &format!("{CONFIGMAPS}/target"),
            Some("application/merge-patch+json"),
            Some(b"{oops".to_vec()),
        )
        .unwrap();
    patch.expect_status(400, "BadRequest");
    let stored = api.get(&format!("{CONFIGMAPS}/target")).unwrap().json();
    assert_eq!(stored["data"], json!({"k": "v"}));
    assert_eq!(
        api.configmap_names("default"),
        ["target"],
        "only the valid create stored"
    );
}

#[test]
fn a_body_over_3_mib_gets_413_and_stores_nothing() {
    let env = Env::start();
    let api = env.api();
    let big = "x".repeat(3 * 1024 * 1024 + 1024);
    let body = serde_json::to_vec(&configmap("too-big", &[("blob", &big)])).unwrap();
    let response = api
        .request(
            reqwest::Method::POST,
            CONFIGMAPS,
            Some("application/json"),
            Some(body),
        )
        .unwrap_or_else(|e| {
            panic!(
                "the server must answer an oversized body with a Status: {e:#}{}",
                env.log()
            )
        });
    let status = response.expect_status(413, "RequestEntityTooLarge");
    assert!(
        status["message"].as_str().unwrap().contains("3145728"),
        "{status}"
    );
    // Just under the limit is accepted (bodies are limited, not objects by a smaller rule).
    let fits = "y".repeat(512 * 1024);
    let ok = api
        .post_json(CONFIGMAPS, &configmap("fits", &[("blob", &fits)]))
        .unwrap();
    assert_eq!(ok.status, 201, "{}", &ok.body[..ok.body.len().min(300)]);
    assert_eq!(api.configmap_names("default"), ["fits"]);
    // The server keeps serving after refusing.
    assert_eq!(api.get("/healthz").unwrap().status, 200);
}

#[test]
fn a_body_of_the_wrong_kind_for_the_url_gets_400() {
    let env = Env::start();
    let api = env.api();
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "misrouted"}});
    let response = api.post_json(CONFIGMAPS, &secret).unwrap();
    let status = response.expect_status(400, "BadRequest");
    let message = status["message"].as_str().unwrap();
    assert!(
        message.contains("Secret") && message.contains("ConfigMap"),
        "the message names both kinds: {status}"
    );
    let wrong_version =
        json!({"apiVersion": "apps/v1", "kind": "ConfigMap", "metadata": {"name": "misrouted"}});
    api.post_json(CONFIGMAPS, &wrong_version)
        .unwrap()
        .expect_status(400, "BadRequest");
    assert_eq!(
        api.configmap_names("default"),
        Vec::<String>::new(),
        "nothing stored"
    );
    let secrets = api
        .get("/api/v1/namespaces/default/secrets")
        .unwrap()
        .json();
    assert_eq!(
        secrets["items"],
        json!([]),
        "nothing stored as a Secret either"
    );
}

#[test]
fn an_invalid_name_gets_422_invalid_with_causes() {
    let env = Env::start();
    let api = env.api();
    let response = api
        .post_json(CONFIGMAPS, &configmap("Not_Valid", &[("k", "v")]))
        .unwrap();
    let status = response.expect_status(422, "Invalid");
    assert_eq!(status["details"]["name"], "Not_Valid", "{status}");
    assert_eq!(status["details"]["kind"], "ConfigMap", "{status}");
    let causes = status["details"]["causes"].as_array().expect("causes");
    assert!(
        causes
            .iter()
            .any(|c| c["field"] == "metadata.name" && c["reason"] == "FieldValueInvalid"),
        "a cause for metadata.name: {status}"
    );
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .starts_with(r#"ConfigMap "Not_Valid" is invalid: metadata.name"#),
        "{status}"
    );
    let too_long = "a".repeat(254);
    api.post_json(CONFIGMAPS, &configmap(&too_long, &[]))
        .unwrap()
        .expect_status(422, "Invalid");
    let nameless = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}});
    let status = api
        .post_json(CONFIGMAPS, &nameless)
        .unwrap()
        .expect_status(422, "Invalid");
    assert!(
        status["details"]["causes"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["field"] == "metadata.name")),
        "{status}"
    );
    assert_eq!(
        api.configmap_names("default"),
        Vec::<String>::new(),
        "nothing stored"
    );
}
