//! `finale server --with-operators`: the bundled Database, Tenant and CloudCluster operators
//! declare their finalizers as `FinalizerClaim`s through the toolkit, and the server reads them
//! as live (their leader Leases are held and renewed), as kubectl shows them. Each runs as its
//! own ServiceAccount with the least privilege `finale operator NAME --print-rbac` prints.

mod common;

use std::time::{Duration, Instant};

use common::binary;
use finale_e2e::{FinaleServer, Kubectl};
use serde_json::Value;

#[test]
fn with_operators_the_bundled_operators_claims_are_present_and_live() {
    const OPERATORS: [&str; 3] = [
        "finale-database-operator",
        "finale-tenant-operator",
        "finale-cloud-gc-operator",
    ];
    let dir = tempfile::tempdir().expect("tempdir");
    let audit_log = dir.path().join("audit.log");
    let server = FinaleServer::start_with(
        binary(),
        &dir.path().join("data"),
        "127.0.0.1:0",
        &[
            "--with-operators",
            "--operator-metrics-addr",
            "127.0.0.1:0",
            "--audit-log-path",
            audit_log.to_str().expect("a UTF-8 path"),
        ],
    )
    .expect("start the server");
    let kubectl = Kubectl::new(&server.kubeconfig).expect("kubectl fixture");
    let deadline = Instant::now() + Duration::from_secs(60);
    let claims = loop {
        let text = kubectl
            .ok(&["get", "finalizerclaims", "-o", "json"])
            .unwrap_or_else(|e| panic!("{e:#}\n{}", server.log_tail(40)));
        let list: Value = serde_json::from_str(&text).expect("a JSON list");
        let items = list["items"].as_array().cloned().unwrap_or_default();
        let live_of = |controller: &str| {
            items.iter().any(|claim| {
                claim["spec"]["controller"] == controller && claim["status"]["live"] == true
            })
        };
        if OPERATORS.iter().all(|operator| live_of(operator)) {
            break items;
        }
        assert!(
            Instant::now() < deadline,
            "the operators' claims never read live: {list:#}\n{}",
            server.log_tail(40)
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    // Every claim of the bundled operators is live, held through its own Lease.
    for claim in &claims {
        let controller = claim["spec"]["controller"].as_str().unwrap_or_default();
        assert!(OPERATORS.contains(&controller), "{claim:#}");
        assert_eq!(claim["status"]["live"], true, "{claim:#}");
        assert_eq!(
            claim["spec"]["lease"]["name"], controller,
            "held through its own leader Lease: {claim:#}"
        );
        assert!(claim["status"]["holder"].is_string(), "{claim:#}");
    }
    // The Database operator claims its own finalizer on databases.
    assert!(
        claims
            .iter()
            .any(|c| c["spec"]["finalizer"] == "finale.dev/database"
                && c["spec"]["resources"][0]["resource"] == "databases"),
        "{claims:#?}"
    );
    // kubectl get shows them live.
    let table = kubectl
        .ok(&["get", "finalizerclaims"])
        .unwrap_or_else(|e| panic!("{e:#}"));
    let header: Vec<&str> = table
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        ["NAME", "FINALIZER", "LIVE", "HOLDER", "PENDING", "AGE"]
    );
    assert!(
        table
            .lines()
            .skip(1)
            .all(|row| row.split_whitespace().nth(2) == Some("True")),
        "{table}"
    );
    // Each wrote its claims as its own ServiceAccount, never as the admin.
    let records: Vec<Value> = std::fs::read_to_string(&audit_log)
        .expect("the audit log")
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON audit event"))
        .collect();
    let claim_writers: std::collections::BTreeSet<&str> = records
        .iter()
        .filter(|r| {
            r["objectRef"]["resource"] == "finalizerclaims"
                && ["create", "patch", "update"].contains(&r["verb"].as_str().unwrap_or_default())
        })
        .filter_map(|r| r["user"]["username"].as_str())
        .collect();
    let expected: std::collections::BTreeSet<String> = OPERATORS
        .iter()
        .map(|o| format!("system:serviceaccount:finale-system:{o}"))
        .collect();
    assert_eq!(
        claim_writers,
        expected.iter().map(String::as_str).collect(),
        "who wrote the FinalizerClaims"
    );
    // Their tokens are kept beside the admin kubeconfig (DATA_DIR/operators), owner-only.
    use std::os::unix::fs::PermissionsExt;
    for operator in OPERATORS {
        let token = server
            .kubeconfig
            .parent()
            .expect("the data directory")
            .join("operators")
            .join(format!("{operator}.token"));
        let mode = std::fs::metadata(&token)
            .unwrap_or_else(|e| panic!("{}: {e}", token.display()))
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{}", token.display());
    }
    // The ServiceAccount may not do what its role does not grant.
    let forbidden = kubectl
        .run(&[
            "auth",
            "can-i",
            "delete",
            "namespaces",
            "--as",
            "system:serviceaccount:finale-system:finale-database-operator",
        ])
        .expect("kubectl auth can-i");
    assert_eq!(
        String::from_utf8_lossy(&forbidden.stdout).trim(),
        "no",
        "{forbidden:?}"
    );
}
