//! The Database operator end to end: the built `finale` binary as API server and as operator
//! (child processes that the tests stop, kill and restart), a real PostgreSQL on loopback,
//! kube-rs and kubectl as clients.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::{Env, USER_DATABASES, binary, kube_client, postgres_client, postgres_names};
use finale_e2e::operator::{OperatorProcess, least_privilege_kubeconfig};
use finale_e2e::{Postgres, PostgresOptions};
use finale_operator_database::Database;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
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
        Self::start_with(PostgresOptions::default()).await
    }

    /// A server, and a PostgreSQL set up as `options` say.
    async fn start_with(options: PostgresOptions) -> Harness {
        let env = Env::start();
        let postgres = Postgres::start_with(options).expect("start PostgreSQL");
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

    /// An operator with short timings, so failures are retried within the test's bounds,
    /// running with the least privilege `--print-rbac` gives it.
    fn operator(&self, identity: &str, extra: &[&str]) -> OperatorProcess {
        let mut args = vec!["--lease-duration", "3s", "--max-backoff", "2s"];
        args.extend_from_slice(extra);
        let kubeconfig = least_privilege_kubeconfig(
            binary(),
            "database",
            &self.env.server.kubeconfig,
            self.env.dir.path(),
        )
        .expect("the database operator's least-privilege kubeconfig");
        OperatorProcess::start(
            binary(),
            "database",
            &kubeconfig,
            self.env.dir.path(),
            identity,
            &args,
        )
        .expect("start the database operator")
    }

    async fn create_secret(&self, name: &str) {
        self.create_secret_with(name, json!({"url": self.postgres.url()}))
            .await;
    }

    /// A Secret with `string_data` (for instance a URL with `sslmode` and a `ca.crt`).
    async fn create_secret_with(&self, name: &str, string_data: Value) {
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), &self.namespace);
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": name},
            "stringData": string_data,
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

    /// The names of the databases on the PostgreSQL server (templates and `postgres` aside),
    /// read through the Unix socket, which works whatever the TCP rules demand.
    async fn pg_databases(&self) -> BTreeSet<String> {
        postgres_names(&self.postgres.socket_url(), USER_DATABASES).await
    }

    async fn pg_roles(&self) -> BTreeSet<String> {
        postgres_names(
            &self.postgres.socket_url(),
            "SELECT rolname FROM pg_roles WHERE rolname NOT LIKE 'pg\\_%' AND rolname <> 'postgres'",
        )
        .await
    }

    async fn pg_execute(&self, statement: &str) {
        postgres_client(&self.postgres.socket_url())
            .await
            .batch_execute(statement)
            .await
            .unwrap_or_else(|e| panic!("{statement}: {e}"));
    }

    /// The Secrets of the test namespace that still carry a finalizer.
    async fn secrets_with_finalizers(&self) -> Vec<(String, Vec<String>)> {
        Api::<Secret>::namespaced(self.client.clone(), &self.namespace)
            .list(&ListParams::default())
            .await
            .expect("list Secrets")
            .items
            .into_iter()
            .filter(|s| !s.finalizers().is_empty())
            .map(|s| (s.name_any(), s.finalizers().to_vec()))
            .collect()
    }

    /// Deletes the test namespace and waits (bounded) until it is gone: nothing in it may be
    /// left holding a finalizer.
    async fn delete_namespace_and_wait(&self) {
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        namespaces
            .delete(&self.namespace, &DeleteParams::default())
            .await
            .expect("delete the namespace");
        let deadline = Instant::now() + CONVERGE;
        loop {
            let Some(left) = namespaces
                .get_opt(&self.namespace)
                .await
                .expect("get the namespace")
            else {
                return;
            };
            assert!(
                Instant::now() < deadline,
                "namespace {} is stuck terminating: {:#?}; Secrets with finalizers: {:?}",
                self.namespace,
                left.status,
                self.secrets_with_finalizers().await
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
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
    // Nobody is there to clean up. A sentinel deleted after them, which no operator ever gave
    // finalizers, goes at once: the server has carried the deletes out, and the 50 wait.
    h.create(
        "sentinel",
        json!({"dbName": "sentinel", "owner": "sentinel_owner"}),
    )
    .await;
    h.kubectl_delete(&["database", "sentinel", "--wait=true", "--timeout=60s"]);
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

/// What the operator said about an edit of an immutable field: the Ready condition's reason
/// and message, and whether a Warning Event with that reason was published.
/// The server's answer to a refused edit.
struct Refusal {
    code: u16,
    message: String,
}

/// Creates a Database, tries to edit `edit` into its spec once it is Ready, then deletes it and
/// its namespace. The CRD's transition rules (`self == oldSelf`, CEL) make the server refuse the
/// edit before the operator sees it (the operator's own `ImmutableField` check is for servers
/// that do not evaluate CEL). Whatever the edit, the teardown must remove what was created: the
/// database and the role it made, the Secret's finalizer, and then the namespace.
async fn edit_then_delete(edit: Value) -> Refusal {
    let h = Harness::start().await;
    h.create_secret("other-admin").await;
    let _operator = h.operator("solo", &["--leader-elect=false"]);
    h.create(
        "edited",
        json!({"dbName": "edited_db", "owner": "edited_owner"}),
    )
    .await;
    h.wait_state("edited", "Ready").await;
    assert_eq!(h.pg_databases().await, names(&["edited_db"]));
    assert_eq!(h.pg_roles().await, names(&["edited_owner"]));

    // The installed CRD carries the transition rules, which the server evaluates.
    let crd = h.env.get_json(&["crd", "databases.finale.dev"]);
    let fields = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
    for field in ["dbName", "owner", "connectionSecretRef"] {
        assert_eq!(
            fields[field]["x-kubernetes-validations"][0]["rule"], "self == oldSelf",
            "{field}: {fields:#}"
        );
    }

    let refusal = match h
        .databases()
        .patch(
            "edited",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": edit })),
        )
        .await
    {
        Err(kube::Error::Api(status)) => Refusal {
            code: status.code,
            message: status.message,
        },
        other => panic!("the server refuses the edit: {other:?}"),
    };

    h.kubectl_delete(&["database", "edited", "--wait=false"]);
    h.wait_gone("edited").await;
    assert!(
        h.pg_databases().await.is_empty(),
        "the database created before the edit is dropped"
    );
    assert!(
        h.pg_roles().await.is_empty(),
        "the role created before the edit is dropped"
    );
    assert_eq!(
        h.secrets_with_finalizers().await,
        vec![],
        "no Secret keeps a finalizer"
    );
    h.delete_namespace_and_wait().await;
    refusal
}

fn assert_rejected(refusal: &Refusal, field: &str) {
    assert_eq!(refusal.code, 422, "{}", refusal.message);
    assert!(
        refusal
            .message
            .contains(&format!("{field}: Invalid value: "))
            && refusal.message.contains("cannot change"),
        "{}",
        refusal.message
    );
}

#[tokio::test]
async fn a_renamed_database_is_still_dropped_on_delete() {
    let rejection = edit_then_delete(json!({"dbName": "renamed_db"})).await;
    assert_rejected(&rejection, "spec.dbName");
}

#[tokio::test]
async fn a_retargeted_secret_ref_still_drops_the_database_and_releases_the_first_secret() {
    let rejection = edit_then_delete(json!({"connectionSecretRef": {"name": "other-admin"}})).await;
    assert_rejected(&rejection, "spec.connectionSecretRef");
}

#[tokio::test]
async fn a_changed_owner_still_drops_the_role_created_first() {
    let rejection = edit_then_delete(json!({"owner": "other_owner"})).await;
    assert_rejected(&rejection, "spec.owner");
}

/// Waits until the Database's `Deleting` condition satisfies `check`; returns it.
async fn wait_deleting(
    h: &Harness,
    name: &str,
    what: &str,
    check: impl Fn(&k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition) -> bool,
) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
    let db = h
        .wait_for(name, what, |db| {
            db.and_then(|db| db.status.as_ref())
                .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Deleting"))
                .is_some_and(&check)
        })
        .await
        .expect("still there");
    db.status
        .and_then(|s| s.conditions.into_iter().find(|c| c.type_ == "Deleting"))
        .expect("Deleting condition")
}

#[tokio::test]
async fn a_drop_stuck_behind_a_lock_times_out_says_so_and_finishes_once_the_lock_goes() {
    let h = Harness::start().await;
    let _operator = h.operator("solo", &["--leader-elect=false", "--pg-lock-timeout", "1s"]);
    h.create(
        "locked",
        json!({"dbName": "locked_db", "owner": "locked_owner"}),
    )
    .await;
    h.wait_state("locked", "Ready").await;
    // Another session holds a lock that DROP DATABASE needs (it deletes the database's
    // comment), and does not let go: without a lock timeout the drop would wait forever.
    let blocker = postgres_client(&h.postgres.socket_url()).await;
    blocker
        .batch_execute("BEGIN; LOCK TABLE pg_shdescription IN EXCLUSIVE MODE")
        .await
        .expect("take the lock");
    h.kubectl_delete(&["database", "locked", "--wait=false"]);
    let deleting = wait_deleting(&h, "locked", "reporting the lock timeout", |c| {
        c.message.contains("lock timeout")
    })
    .await;
    assert_eq!(deleting.reason, "CleanupFailed", "{}", deleting.message);
    assert!(
        deleting.message.contains("finale.dev/database"),
        "{}",
        deleting.message
    );
    assert!(
        h.pg_databases().await.contains("locked_db"),
        "nothing dropped while the lock is held"
    );

    blocker.batch_execute("ROLLBACK").await.expect("release");
    h.wait_gone("locked").await;
    assert!(h.pg_databases().await.is_empty());
    assert!(h.pg_roles().await.is_empty());
}

#[tokio::test]
async fn a_failure_between_create_database_and_its_tag_is_recovered() {
    let h = Harness::start().await;
    // The URL's own lock timeout, so that a COMMENT held up by the lock below fails rather than
    // waits, whatever timeouts the operator sets itself.
    h.create_secret_with(
        "short-locks",
        json!({"url": format!("{}?options=-c%20lock_timeout%3D1000", h.postgres.url())}),
    )
    .await;
    let _operator = h.operator("solo", &["--leader-elect=false"]);
    // The owner role exists already (created with a first Database), so that the next
    // Database's first statement that writes a comment is the one tagging its database.
    h.create(
        "first",
        json!({"dbName": "first_db", "owner": "shared_owner",
               "connectionSecretRef": {"name": "short-locks"}}),
    )
    .await;
    h.wait_state("first", "Ready").await;
    let blocker = postgres_client(&h.postgres.socket_url()).await;
    blocker
        .batch_execute("BEGIN; LOCK TABLE pg_shdescription IN EXCLUSIVE MODE")
        .await
        .expect("take the lock");
    let created = h
        .create(
            "tagged",
            json!({"dbName": "tagged_db", "owner": "shared_owner",
                   "connectionSecretRef": {"name": "short-locks"}}),
        )
        .await;
    let failing = h
        .wait_for("tagged", "failing to tag its database", |db| {
            db.and_then(|db| db.status.as_ref())
                .and_then(|s| s.message.as_deref())
                .is_some_and(|m| m.contains("lock timeout"))
        })
        .await
        .expect("present");
    // The precondition: the failure fell between CREATE DATABASE and its COMMENT, so an
    // untagged database of this object's making is on the server.
    let untagged = postgres_names(
        &h.postgres.socket_url(),
        "SELECT datname FROM pg_database WHERE NOT datistemplate AND datname <> 'postgres' \
         AND shobj_description(oid, 'pg_database') IS NULL",
    )
    .await;
    assert_eq!(
        untagged.len(),
        1,
        "{untagged:?}; status {:?}",
        failing.status
    );

    blocker.batch_execute("ROLLBACK").await.expect("release");
    h.wait_state("tagged", "Ready").await;
    assert_eq!(h.pg_databases().await, names(&["first_db", "tagged_db"]));
    let tag = postgres_names(
        &h.postgres.socket_url(),
        "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = 'tagged_db'",
    )
    .await;
    assert_eq!(
        tag,
        names(&[&format!(
            "finale.dev/owner-uid={}",
            created.uid().expect("uid")
        )])
    );
    h.kubectl_delete(&["databases", "--all", "--wait=false"]);
    h.wait_all_gone().await;
    assert!(h.pg_databases().await.is_empty());
    assert!(h.pg_roles().await.is_empty());
}

#[tokio::test]
async fn a_wrong_password_is_a_permanent_error_in_the_status_until_the_secret_is_fixed() {
    let h = Harness::start_with(PostgresOptions {
        password: Some("right-password".into()),
        tcp_hba: vec!["host all all 127.0.0.1/32 scram-sha-256".into()],
        ..PostgresOptions::default()
    })
    .await;
    let wrong = h.postgres.url().replace("right-password", "wrong-password");
    h.create_secret_with("stale-password", json!({ "url": wrong }))
        .await;
    let _operator = h.operator("solo", &["--leader-elect=false"]);
    h.create(
        "locked-out",
        json!({"dbName": "locked_out", "owner": "locked_out_owner",
               "connectionSecretRef": {"name": "stale-password"}}),
    )
    .await;
    let failed = h.wait_state("locked-out", "Error").await;
    let (status, reason, message) = ready_condition(&failed).expect("Ready condition");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "PermanentError"),
        "{message}"
    );
    assert!(
        message.contains("password authentication failed") && message.contains("Secret"),
        "says what failed and what to fix: {message}"
    );

    // Its teardown meets the same error, and says so in the Deleting condition.
    h.kubectl_delete(&["database", "locked-out", "--wait=false"]);
    let deleting = wait_deleting(&h, "locked-out", "failing permanently", |c| {
        c.reason == "PermanentError"
    })
    .await;
    assert!(
        deleting.message.contains("password authentication failed"),
        "{}",
        deleting.message
    );

    // Fixing the Secret is enough.
    Api::<Secret>::namespaced(h.client.clone(), &h.namespace)
        .patch(
            "stale-password",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"url": h.postgres.url()}})),
        )
        .await
        .expect("fix the Secret");
    h.wait_gone("locked-out").await;
    assert!(h.pg_databases().await.is_empty());
    assert!(h.pg_roles().await.is_empty());
}

/// A CA and a server certificate for `localhost` (DNS name only) signed by it, and a second,
/// unrelated CA.
struct TestPki {
    ca: String,
    server_cert: String,
    server_key: String,
    other_ca: String,
}

impl TestPki {
    fn new() -> TestPki {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose,
        };
        let ca = |name: &str| {
            let mut params = CertificateParams::default();
            params.distinguished_name.push(DnType::CommonName, name);
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
            let key = KeyPair::generate().expect("CA key");
            let cert = params.self_signed(&key).expect("CA certificate");
            (params, key, cert.pem())
        };
        let (ca_params, ca_key, ca_pem) = ca("finale test PostgreSQL CA");
        let (_, _, other_ca) = ca("some other CA");
        let server_key = KeyPair::generate().expect("server key");
        let mut params =
            CertificateParams::new(vec!["localhost".to_string()]).expect("server params");
        params
            .distinguished_name
            .push(DnType::CommonName, "localhost");
        let server_cert = params
            .signed_by(&server_key, &Issuer::from_params(&ca_params, &ca_key))
            .expect("server certificate");
        TestPki {
            ca: ca_pem,
            server_cert: server_cert.pem(),
            server_key: server_key.serialize_pem(),
            other_ca,
        }
    }
}

#[tokio::test]
async fn sslmode_verifies_the_server_against_the_ca_in_the_secret_and_refuses_a_wrong_one() {
    let pki = TestPki::new();
    let h = Harness::start_with(PostgresOptions {
        tls: Some((pki.server_cert.clone(), pki.server_key.clone())),
        // TCP clients must use TLS.
        tcp_hba: vec!["hostssl all all 127.0.0.1/32 trust".into()],
        ..PostgresOptions::default()
    })
    .await;
    let port = h.postgres.port();
    let url = |host: &str, mode: &str| {
        format!("postgres://postgres@{host}:{port}/postgres?sslmode={mode}")
    };
    for (secret, data) in [
        // The certificate names `localhost`; verify-full checks the name, verify-ca does not.
        (
            "verify-full",
            json!({"url": url("localhost", "verify-full"), "ca.crt": pki.ca}),
        ),
        (
            "verify-ca",
            json!({"url": url("127.0.0.1", "verify-ca"), "ca.crt": pki.ca}),
        ),
        // Encryption without verification.
        ("require", json!({"url": url("127.0.0.1", "require")})),
        (
            "wrong-ca",
            json!({"url": url("localhost", "verify-full"), "ca.crt": pki.other_ca}),
        ),
        (
            "wrong-name",
            json!({"url": url("127.0.0.1", "verify-full"), "ca.crt": pki.ca}),
        ),
        // pg_hba.conf has no rule for a connection without TLS.
        ("disable", json!({"url": url("127.0.0.1", "disable")})),
    ] {
        h.create_secret_with(secret, data).await;
    }
    let _operator = h.operator("solo", &["--leader-elect=false"]);
    for secret in [
        "verify-full",
        "verify-ca",
        "require",
        "wrong-ca",
        "wrong-name",
        "disable",
    ] {
        let db_name = secret.replace('-', "_");
        h.create(
            secret,
            json!({"dbName": db_name, "owner": format!("{db_name}_owner"),
                   "connectionSecretRef": {"name": secret}}),
        )
        .await;
    }
    for ready in ["verify-full", "verify-ca", "require"] {
        h.wait_state(ready, "Ready").await;
    }
    for (refused, expected) in [
        ("wrong-ca", "certificate"),
        ("wrong-name", "certificate"),
        ("disable", "pg_hba.conf"),
    ] {
        let failed = h.wait_state(refused, "Error").await;
        let (_, reason, message) = ready_condition(&failed).expect("Ready condition");
        assert_eq!(reason, "PermanentError", "{refused}: {message}");
        assert!(message.contains(expected), "{refused}: {message}");
    }
    assert_eq!(
        h.pg_databases().await,
        names(&["require", "verify_ca", "verify_full"])
    );

    // The refused ones go once their Secret is right (same server: a Database does not follow
    // its Secret to another one); the others drop their databases. With a CA in the Secret,
    // `require` verifies the chain as libpq does, so a wrong-name fix drops the CA too.
    for (refused, fixed) in [
        ("wrong-ca", json!({"stringData": {"ca.crt": pki.ca}})),
        (
            "wrong-name",
            json!({"data": {"ca.crt": null},
                              "stringData": {"url": url("127.0.0.1", "require")}}),
        ),
        (
            "disable",
            json!({"stringData": {"url": url("127.0.0.1", "require")}}),
        ),
    ] {
        Api::<Secret>::namespaced(h.client.clone(), &h.namespace)
            .patch(refused, &PatchParams::default(), &Patch::Merge(fixed))
            .await
            .expect("fix the Secret");
    }
    h.kubectl_delete(&["databases", "--all", "--wait=false"]);
    h.wait_all_gone().await;
    assert!(h.pg_databases().await.is_empty());
    assert!(h.pg_roles().await.is_empty());
}

#[tokio::test]
async fn a_secret_repointed_at_another_server_does_not_let_the_database_go_unnoticed() {
    let h = Harness::start().await;
    let elsewhere = Postgres::start().expect("a second PostgreSQL");
    let _operator = h.operator("solo", &["--leader-elect=false"]);
    h.create(
        "moved",
        json!({"dbName": "moved_db", "owner": "moved_owner"}),
    )
    .await;
    h.wait_state("moved", "Ready").await;
    let repoint = async |url: String| {
        Api::<Secret>::namespaced(h.client.clone(), &h.namespace)
            .patch(
                "postgres-admin",
                &PatchParams::default(),
                &Patch::Merge(json!({"stringData": {"url": url}})),
            )
            .await
            .expect("edit the Secret");
    };
    // The Secret now names another server, where no such database exists: dropping "nothing"
    // there would orphan the real one.
    repoint(elsewhere.url()).await;
    h.kubectl_delete(&["database", "moved", "--wait=false"]);
    let deleting = wait_deleting(&h, "moved", "refusing to look elsewhere", |c| {
        c.reason == "PermanentError"
    })
    .await;
    let created_on = format!("127.0.0.1:{}", h.postgres.port());
    assert!(
        deleting.message.contains(&created_on),
        "names the server the database is on: {}",
        deleting.message
    );
    assert!(
        h.pg_databases().await.contains("moved_db"),
        "the database is not given up on"
    );

    // Pointed back, the teardown finishes where the database is.
    repoint(h.postgres.url()).await;
    h.wait_gone("moved").await;
    assert!(h.pg_databases().await.is_empty());
    assert!(h.pg_roles().await.is_empty());
    assert!(
        postgres_names(&elsewhere.socket_url(), USER_DATABASES)
            .await
            .is_empty(),
        "nothing was created on the other server"
    );
}
