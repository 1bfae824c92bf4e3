//! The Database operator end to end: the built `finale` binary as API server and as operator
//! (child processes that the tests stop, kill and restart), a real PostgreSQL on loopback,
//! kube-rs and kubectl as clients.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::{Env, USER_DATABASES, binary, kube_client, postgres_client, postgres_names};
use finale_e2e::Postgres;
use finale_e2e::operator::OperatorProcess;
use finale_operator_database::Database;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

/// The bound on every wait for the operator to converge.
const CONVERGE: Duration = Duration::from_secs(90);

struct Harness {
    env: Env,
    postgres: Postgres,
    client: Client,
    namespace: String,
}

impl Harness {
    async fn start() -> Harness {
        let env = Env::start();
        let postgres = Postgres::start().expect("start PostgreSQL");
        let client = kube_client(&env.server).await;
        let harness = Harness {
            env,
            postgres,
            client,
            namespace: "shop".to_string(),
        };
        harness.env.ok(&["create", "namespace", &harness.namespace]);
        harness.create_secret("postgres-admin").await;
        harness
    }

    /// An operator with short timings, so failures are retried within the test's bounds.
    fn operator(&self, identity: &str, extra: &[&str]) -> OperatorProcess {
        let mut args = vec!["--lease-duration", "3s", "--max-backoff", "2s"];
        args.extend_from_slice(extra);
        OperatorProcess::start(
            binary(),
            "database",
            &self.env.server.kubeconfig,
            self.env.dir.path(),
            identity,
            &args,
        )
        .expect("start the database operator")
    }

    async fn create_secret(&self, name: &str) {
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), &self.namespace);
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": name},
            "stringData": {"url": self.postgres.url()},
        }))
        .expect("secret");
        secrets
            .create(&PostParams::default(), &secret)
            .await
            .expect("create the connection Secret");
    }

    fn databases(&self) -> Api<Database> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    async fn create(&self, name: &str, spec: Value) -> Database {
        let mut spec = spec;
        if spec.get("connectionSecretRef").is_none() {
            spec["connectionSecretRef"] = json!({"name": "postgres-admin"});
        }
        let database: Database = serde_json::from_value(json!({
            "apiVersion": "finale.dev/v1alpha1", "kind": "Database",
            "metadata": {"name": name}, "spec": spec,
        }))
        .expect("a Database");
        self.databases()
            .create(&PostParams::default(), &database)
            .await
            .unwrap_or_else(|e| panic!("create Database {name}: {e}"))
    }

    /// Waits until `check` holds for the Database `name` (None = it is gone).
    async fn wait_for(
        &self,
        name: &str,
        what: &str,
        check: impl Fn(Option<&Database>) -> bool,
    ) -> Option<Database> {
        let deadline = Instant::now() + CONVERGE;
        loop {
            let current = self.databases().get_opt(name).await.expect("get Database");
            if check(current.as_ref()) {
                return current;
            }
            assert!(
                Instant::now() < deadline,
                "Database {name} never became {what}; last seen: {current:#?}{}",
                self.env.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn wait_state(&self, name: &str, state: &str) -> Database {
        self.wait_for(name, state, |db| {
            db.and_then(|db| db.status.as_ref())
                .and_then(|s| s.state.as_deref())
                == Some(state)
        })
        .await
        .expect("present")
    }

    async fn wait_gone(&self, name: &str) {
        self.wait_for(name, "gone", |db| db.is_none()).await;
    }

    async fn wait_all_gone(&self) {
        let deadline = Instant::now() + CONVERGE;
        loop {
            let left = self
                .databases()
                .list(&ListParams::default())
                .await
                .expect("list")
                .items;
            if left.is_empty() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{} Databases still there, e.g. {:#?}",
                left.len(),
                left.first()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The names of the databases on the PostgreSQL server (templates and `postgres` aside).
    async fn pg_databases(&self) -> BTreeSet<String> {
        postgres_names(&self.postgres.url(), USER_DATABASES).await
    }

    async fn pg_roles(&self) -> BTreeSet<String> {
        postgres_names(
            &self.postgres.url(),
            "SELECT rolname FROM pg_roles WHERE rolname NOT LIKE 'pg\\_%' AND rolname <> 'postgres'",
        )
        .await
    }

    async fn pg_execute(&self, statement: &str) {
        postgres_client(&self.postgres.url())
            .await
            .batch_execute(statement)
            .await
            .unwrap_or_else(|e| panic!("{statement}: {e}"));
    }

    fn kubectl_delete(&self, args: &[&str]) {
        let mut all = vec!["delete", "-n", self.namespace.as_str()];
        all.extend_from_slice(args);
        self.env.ok(&all);
    }
}

fn ready_condition(db: &Database) -> Option<(String, String, String)> {
    db.status.as_ref().and_then(|s| {
        s.conditions
            .iter()
            .find(|c| c.type_ == "Ready")
            .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
    })
}

fn names(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[tokio::test]
async fn a_deleted_database_is_dropped_with_its_role_before_the_object_goes() {
    let h = Harness::start().await;
    let _operator = h.operator("solo", &["--leader-elect=false"]);
    h.create(
        "orders",
        json!({"dbName": "orders", "owner": "orders_owner"}),
    )
    .await;
    let ready = h.wait_state("orders", "Ready").await;
    assert_eq!(
        ready_condition(&ready).map(|c| c.0),
        Some("True".to_string())
    );
    assert_eq!(ready.finalizers().len(), 3, "{:?}", ready.finalizers());
    assert_eq!(h.pg_databases().await, names(&["orders"]));
    assert_eq!(h.pg_roles().await, names(&["orders_owner"]));
    // The connection Secret is held while a Database needs it.
    let secret = Api::<Secret>::namespaced(h.client.clone(), &h.namespace)
        .get("postgres-admin")
        .await
        .expect("secret");
    assert!(
        secret
            .finalizers()
            .iter()
            .any(|f| f == "finale.dev/in-use-by-databases")
    );

    h.kubectl_delete(&["database", "orders", "--wait=true", "--timeout=60s"]);
    h.wait_gone("orders").await;
    assert!(h.pg_databases().await.is_empty(), "the database is dropped");
    assert!(
        h.pg_roles().await.is_empty(),
        "the role it created is dropped"
    );
    let secret = Api::<Secret>::namespaced(h.client.clone(), &h.namespace)
        .get("postgres-admin")
        .await
        .expect("secret");
    assert!(secret.finalizers().is_empty(), "the Secret is released");
    let events = h.env.ok(&[
        "get",
        "events",
        "-n",
        "shop",
        "-o",
        "jsonpath={.items[*].reason}",
    ]);
    assert!(
        events.contains("Created") && events.contains("CleanupComplete"),
        "{events}"
    );
}

#[tokio::test]
async fn deletes_made_while_the_operator_is_down_are_all_carried_out_when_it_returns() {
    let h = Harness::start().await;
    let mut operator = h.operator("solo", &["--leader-elect=false"]);
    for i in 0..50 {
        h.create(
            &format!("db{i}"),
            json!({"dbName": format!("app_{i}"), "owner": "app_owner"}),
        )
        .await;
    }
    for i in 0..50 {
        h.wait_state(&format!("db{i}"), "Ready").await;
    }
    assert_eq!(h.pg_databases().await.len(), 50);
    operator.stop().expect("stop the operator");

    h.kubectl_delete(&["databases", "--all", "--wait=false"]);
    // Nobody is there to clean up: every object waits, terminating, with its finalizers.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let waiting = h
        .databases()
        .list(&ListParams::default())
        .await
        .expect("list")
        .items;
    assert_eq!(waiting.len(), 50);
    assert!(
        waiting
            .iter()
            .all(|db| db.metadata.deletion_timestamp.is_some()
                && db.finalizers().iter().any(|f| f == "finale.dev/database"))
    );
    assert_eq!(
        h.pg_databases().await.len(),
        50,
        "nothing dropped while down"
    );

    operator.start_again().expect("restart the operator");
    h.wait_all_gone().await;
    assert!(h.pg_databases().await.is_empty(), "no database left over");
    assert!(h.pg_roles().await.is_empty(), "no role left over");
}

#[tokio::test]
async fn a_postgres_outage_keeps_the_finalizer_and_says_why_until_it_comes_back() {
    let mut h = Harness::start().await;
    let operator = h.operator("solo", &["--leader-elect=false"]);
    for name in ["a", "b", "c"] {
        h.create(
            name,
            json!({"dbName": format!("outage_{name}"), "owner": "outage_owner"}),
        )
        .await;
        h.wait_state(name, "Ready").await;
    }
    h.postgres.stop().expect("stop PostgreSQL");
    // A Database created meanwhile says what is failing.
    h.create(
        "late",
        json!({"dbName": "outage_late", "owner": "outage_owner"}),
    )
    .await;
    let late = h.wait_state("late", "Error").await;
    let (status, reason, message) = ready_condition(&late).expect("Ready condition");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "ReconcileFailed")
    );
    assert!(
        message.contains("cannot connect to PostgreSQL"),
        "{message}"
    );
    h.kubectl_delete(&["databases", "--all", "--wait=false"]);

    let stuck = h
        .wait_for("a", "reported as failing to clean up", |db| {
            db.and_then(|db| db.status.as_ref())
                .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Deleting"))
                .is_some_and(|c| c.reason == "CleanupFailed")
        })
        .await
        .expect("still there");
    let deleting = stuck
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Deleting"))
        .expect("Deleting condition");
    assert!(
        deleting.message.contains("finale.dev/database"),
        "{}",
        deleting.message
    );
    assert!(
        deleting.message.contains("next retry at"),
        "{}",
        deleting.message
    );
    let progress = stuck
        .status
        .as_ref()
        .and_then(|s| s.deletion.clone())
        .expect("progress");
    assert_eq!(progress.step, "finale.dev/database");
    assert!(
        progress.attempts >= 1 && progress.next_retry.is_some(),
        "{progress:?}"
    );
    assert!(
        progress
            .last_error
            .is_some_and(|e| e.contains("PostgreSQL"))
    );
    assert!(
        stuck
            .finalizers()
            .iter()
            .any(|f| f == "finale.dev/database")
    );
    // kubectl describe shows the reason to a person.
    let described = h.env.ok(&["describe", "database", "a", "-n", "shop"]);
    assert!(described.contains("CleanupFailed"), "{described}");
    assert!(
        operator
            .metric("finalizer_execution_failures_total{controller=\"database\",finalizer=\"finale.dev/database\"}")
            .is_some_and(|v| v >= 1.0),
        "{}",
        operator.metrics().unwrap_or_default()
    );
    assert!(operator.metric("terminating_objects{controller=\"database\"}") >= Some(1.0));

    h.postgres.start_again().expect("restart PostgreSQL");
    h.wait_all_gone().await;
    assert!(h.pg_databases().await.is_empty());
    assert!(h.pg_roles().await.is_empty());
}

#[tokio::test]
async fn the_orphan_policy_lets_the_object_go_and_keeps_the_database() {
    let h = Harness::start().await;
    let _operator = h.operator("solo", &["--leader-elect=false"]);
    h.create(
        "kept",
        json!({"dbName": "kept", "owner": "kept_owner", "deletionPolicy": "Orphan"}),
    )
    .await;
    h.create(
        "annotated",
        json!({"dbName": "annotated", "owner": "annotated_owner"}),
    )
    .await;
    h.wait_state("kept", "Ready").await;
    h.wait_state("annotated", "Ready").await;
    // The annotation switches cleanup off for one object whose spec says Delete.
    h.env.ok(&[
        "annotate",
        "database",
        "annotated",
        "-n",
        "shop",
        "finale.dev/deletion-policy=Orphan",
    ]);
    h.kubectl_delete(&["database", "kept", "annotated", "--timeout=60s"]);
    h.wait_gone("kept").await;
    h.wait_gone("annotated").await;
    assert_eq!(h.pg_databases().await, names(&["annotated", "kept"]));
    let events = h.env.ok(&[
        "get",
        "events",
        "-n",
        "shop",
        "-o",
        "jsonpath={.items[*].reason}",
    ]);
    assert!(events.contains("Orphaned"), "{events}");
}

#[tokio::test]
async fn a_database_it_did_not_create_is_never_adopted_nor_dropped() {
    let h = Harness::start().await;
    h.pg_execute("CREATE DATABASE legacy").await;
    let _operator = h.operator("solo", &["--leader-elect=false"]);
    h.create(
        "legacy",
        json!({"dbName": "legacy", "owner": "legacy_owner"}),
    )
    .await;
    let refused = h.wait_state("legacy", "NotAdopted").await;
    let (status, reason, message) = ready_condition(&refused).expect("Ready condition");
    assert_eq!((status.as_str(), reason.as_str()), ("False", "NotAdopted"));
    assert!(
        message.contains("not created by this Database"),
        "{message}"
    );

    h.kubectl_delete(&["database", "legacy", "--timeout=60s"]);
    h.wait_gone("legacy").await;
    assert!(
        h.pg_databases().await.contains("legacy"),
        "the foreign database stays"
    );
}

#[tokio::test]
async fn a_bad_spec_is_reported_and_creates_nothing() {
    let h = Harness::start().await;
    let _operator = h.operator("solo", &["--leader-elect=false"]);
    h.create(
        "bad",
        json!({"dbName": "Robert'); DROP TABLE students;--", "owner": "o"}),
    )
    .await;
    let failed = h.wait_state("bad", "Failed").await;
    let (status, reason, message) = ready_condition(&failed).expect("Ready condition");
    assert_eq!((status.as_str(), reason.as_str()), ("False", "InvalidSpec"));
    assert!(message.contains("spec.dbName"), "{message}");

    h.create(
        "later",
        json!({"dbName": "later", "owner": "later_owner", "connectionSecretRef": {"name": "later-url"}}),
    )
    .await;
    let pending = h.wait_state("later", "Pending").await;
    let (_, reason, message) = ready_condition(&pending).expect("Ready condition");
    assert_eq!(reason, "SecretNotFound");
    assert!(message.contains("later-url"), "{message}");
    assert!(
        h.pg_databases().await.is_empty(),
        "nothing created for either"
    );
    assert!(h.pg_roles().await.is_empty());

    // Creating the Secret is enough: its watch wakes the Database.
    h.create_secret("later-url").await;
    h.wait_state("later", "Ready").await;
    // Deleting the invalid one needs no PostgreSQL work at all.
    h.kubectl_delete(&["database", "bad", "later", "--timeout=60s"]);
    h.wait_all_gone().await;
    assert!(h.pg_databases().await.is_empty());
}

async fn lease_holder(client: &Client) -> Option<String> {
    Api::<Lease>::namespaced(client.clone(), "kube-system")
        .get_opt("finale-database-operator")
        .await
        .ok()
        .flatten()
        .and_then(|lease| lease.spec)
        .and_then(|spec| spec.holder_identity)
}

#[tokio::test]
async fn with_two_replicas_only_the_leader_acts_and_killing_it_hands_over() {
    let h = Harness::start().await;
    let mut first = h.operator("first", &[]);
    let deadline = Instant::now() + CONVERGE;
    while lease_holder(&h.client).await.as_deref() != Some("first") {
        assert!(
            Instant::now() < deadline,
            "first never led: {}",
            first.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let second = h.operator("second", &[]);
    h.create("one", json!({"dbName": "one", "owner": "one_owner"}))
        .await;
    h.wait_state("one", "Ready").await;
    assert_eq!(first.metric("leader{controller=\"database\"}"), Some(1.0));
    assert_eq!(second.metric("leader{controller=\"database\"}"), Some(0.0));
    assert_eq!(
        second
            .metric("reconcile_total{controller=\"database\"}")
            .unwrap_or(0.0),
        0.0,
        "the standby never reconciles"
    );

    first.kill9().expect("kill the leader");
    h.create("two", json!({"dbName": "two", "owner": "two_owner"}))
        .await;
    h.wait_state("two", "Ready").await;
    assert_eq!(lease_holder(&h.client).await.as_deref(), Some("second"));
    assert_eq!(second.metric("leader{controller=\"database\"}"), Some(1.0));
    // A graceful stop gives the Lease up before the process exits, so a successor need not
    // wait for it to expire.
    let mut second = second;
    let _third = h.operator("third", &[]);
    second.stop().expect("stop the leader with SIGTERM");
    assert_ne!(lease_holder(&h.client).await.as_deref(), Some("second"));
    assert!(
        second.log().contains("released the leader Lease"),
        "{}",
        second.log()
    );
    h.databases()
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .expect("delete all");
    h.wait_all_gone().await;
    assert!(h.pg_databases().await.is_empty());
}
