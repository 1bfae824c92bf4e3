//! The Tenant operator end to end, with the Database operator and a real PostgreSQL: the
//! whole teardown chain from `kubectl delete tenant` to dropped databases, in order.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::{Env, USER_DATABASES, binary, kube_client, postgres_names};
use finale_e2e::Postgres;
use finale_e2e::operator::{OperatorProcess, least_privilege_kubeconfig};
use finale_operator_database::Database;
use finale_operator_tenant::Tenant;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

const CONVERGE: Duration = Duration::from_secs(90);

struct Harness {
    env: Env,
    postgres: Postgres,
    client: Client,
}

impl Harness {
    /// A server; with `in_process`, it runs the operators itself (`--with-operators`).
    async fn start(in_process: bool) -> Harness {
        Harness::start_with(in_process, &[]).await
    }

    /// [`Harness::start`] with more `finale server` arguments.
    async fn start_with(in_process: bool, extra: &[&str]) -> Harness {
        let mut args: Vec<&str> = extra.to_vec();
        if in_process {
            args.extend(["--with-operators", "--operator-metrics-addr", "127.0.0.1:0"]);
        }
        let env = Env::start_with(&args);
        let postgres = Postgres::start().expect("start PostgreSQL");
        let client = kube_client(&env.server).await;
        let harness = Harness {
            env,
            postgres,
            client,
        };
        harness.env.ok(&["create", "namespace", "platform"]);
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": "postgres-admin", "namespace": "platform"},
            "stringData": {"url": harness.postgres.url()},
        }))
        .expect("secret");
        Api::<Secret>::namespaced(harness.client.clone(), "platform")
            .create(&PostParams::default(), &secret)
            .await
            .expect("create the admin Secret");
        harness
    }

    async fn wait_for_crd(&self) {
        let deadline = Instant::now() + CONVERGE;
        while self.env.run(&["get", "crd", "tenants.finale.dev"]).code != Some(0) {
            assert!(
                Instant::now() < deadline,
                "the Tenant CRD never appeared{}",
                self.env.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn tenants(&self) -> Api<Tenant> {
        Api::all(self.client.clone())
    }

    async fn create_tenant(&self, name: &str, spec: Value) {
        self.wait_for_crd().await;
        let tenant: Tenant = serde_json::from_value(json!({
            "apiVersion": "finale.dev/v1alpha1", "kind": "Tenant",
            "metadata": {"name": name}, "spec": spec,
        }))
        .expect("a Tenant");
        self.tenants()
            .create(&PostParams::default(), &tenant)
            .await
            .unwrap_or_else(|e| panic!("create Tenant {name}: {e}"));
    }

    async fn eventually<T>(&self, what: &str, mut check: impl AsyncFnMut() -> Option<T>) -> T {
        let deadline = Instant::now() + CONVERGE;
        loop {
            if let Some(value) = check().await {
                return value;
            }
            assert!(Instant::now() < deadline, "never {what}{}", self.env.log());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn tenant_state(&self, name: &str) -> Option<String> {
        self.tenants()
            .get_opt(name)
            .await
            .expect("get tenant")
            .and_then(|t| t.status)
            .and_then(|s| s.state)
    }

    async fn wait_ready(&self, tenant: &str, namespaces: &[&str]) {
        self.eventually("tenant Ready", async || {
            (self.tenant_state(tenant).await.as_deref() == Some("Ready")).then_some(())
        })
        .await;
        for namespace in namespaces {
            let databases: Api<Database> = Api::namespaced(self.client.clone(), namespace);
            self.eventually("database Ready", async || {
                let db = databases.get_opt("database").await.ok().flatten()?;
                (db.status?.state.as_deref() == Some("Ready")).then_some(())
            })
            .await;
        }
    }

    async fn namespace_names(&self) -> BTreeSet<String> {
        Api::<Namespace>::all(self.client.clone())
            .list(&ListParams::default())
            .await
            .expect("list namespaces")
            .items
            .iter()
            .map(ResourceExt::name_any)
            .collect()
    }

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

    async fn wait_tenant_gone(&self, name: &str) {
        self.eventually("tenant gone", async || {
            self.tenants()
                .get_opt(name)
                .await
                .expect("get")
                .is_none()
                .then_some(())
        })
        .await;
    }
}

fn database_spec() -> Value {
    json!({"connectionSecretRef": {"namespace": "platform", "name": "postgres-admin"}})
}

/// The resourceVersion at which each object was deleted, from DELETED watch events: the
/// store's revisions order deletions across kinds.
async fn record_deletions<K>(
    api: Api<K>,
    kind: &'static str,
    into: tokio::sync::mpsc::UnboundedSender<(String, i64)>,
) where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let stream = api
        .watch(&WatchParams::default().timeout(120), "0")
        .await
        .expect("watch");
    tokio::spawn(async move {
        let mut stream = stream.boxed();
        while let Ok(Some(event)) = stream.try_next().await {
            if let WatchEvent::Deleted(object) = event {
                let at = object
                    .meta()
                    .resource_version
                    .as_deref()
                    .and_then(|rv| rv.parse().ok())
                    .unwrap_or(i64::MAX);
                let name = match object.meta().namespace.as_deref() {
                    Some(ns) => format!(
                        "{kind} {ns}/{}",
                        object.meta().name.clone().unwrap_or_default()
                    ),
                    None => format!("{kind} {}", object.meta().name.clone().unwrap_or_default()),
                };
                let _ = into.send((name, at));
            }
        }
    });
}

#[tokio::test]
async fn deleting_a_tenant_drops_the_databases_then_the_namespaces_then_the_tenant() {
    let h = Harness::start(true).await;
    let namespaces = ["acme-web", "acme-api", "acme-jobs"];
    h.create_tenant(
        "acme",
        json!({"namespaces": {"names": namespaces}, "labels": {"team": "acme"},
               "database": database_spec(), "adminGroup": "acme-admins"}),
    )
    .await;
    h.wait_ready("acme", &namespaces).await;
    assert_eq!(
        h.pg_databases().await,
        ["acme_acme_api", "acme_acme_jobs", "acme_acme_web"]
            .map(String::from)
            .into()
    );
    for namespace in namespaces {
        let ns = Api::<Namespace>::all(h.client.clone())
            .get(namespace)
            .await
            .expect("namespace");
        assert_eq!(ns.labels().get("team").map(String::as_str), Some("acme"));
        let owner = ns
            .owner_references()
            .first()
            .cloned()
            .expect("owner reference");
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str()),
            ("Tenant", "acme")
        );
        assert_eq!(
            (owner.controller, owner.block_owner_deletion),
            (Some(true), Some(true))
        );
        // Ordinary content, which the namespace controller deletes.
        Api::<ConfigMap>::namespaced(h.client.clone(), namespace)
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": "settings"}})).expect("cm"),
            )
            .await
            .expect("configmap");
        h.env
            .ok(&["get", "rolebinding", "tenant-admins", "-n", namespace]);
    }

    let (sender, mut deletions) = tokio::sync::mpsc::unbounded_channel();
    record_deletions(h.tenants(), "Tenant", sender.clone()).await;
    record_deletions(
        Api::<Namespace>::all(h.client.clone()),
        "Namespace",
        sender.clone(),
    )
    .await;
    record_deletions(Api::<Database>::all(h.client.clone()), "Database", sender).await;
    h.env.ok(&["delete", "tenant", "acme", "--wait=false"]);
    h.wait_tenant_gone("acme").await;
    assert!(
        h.pg_databases().await.is_empty(),
        "no database left in PostgreSQL"
    );
    let left = h.namespace_names().await;
    assert!(namespaces.iter().all(|ns| !left.contains(*ns)), "{left:?}");

    let mut at: BTreeMap<String, i64> = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while at.len() < 7 && Instant::now() < deadline {
        if let Ok(Some((name, revision))) =
            tokio::time::timeout(Duration::from_millis(200), deletions.recv()).await
        {
            at.insert(name, revision);
        }
    }
    let tenant_gone = at["Tenant acme"];
    for namespace in namespaces {
        let database = at[&format!("Database {namespace}/database")];
        let namespace_gone = at[&format!("Namespace {namespace}")];
        assert!(database < namespace_gone, "{namespace}: {at:?}");
        assert!(namespace_gone < tenant_gone, "{namespace}: {at:?}");
    }
}

#[tokio::test]
async fn cascade_orphan_keeps_the_namespaces() {
    let h = Harness::start(true).await;
    h.create_tenant("keep", json!({"namespaces": {"count": 2}}))
        .await;
    h.wait_ready("keep", &[]).await;
    h.env.ok(&[
        "delete",
        "tenant",
        "keep",
        "--cascade=orphan",
        "--timeout=60s",
    ]);
    h.wait_tenant_gone("keep").await;
    for namespace in ["keep-0", "keep-1"] {
        let ns = Api::<Namespace>::all(h.client.clone())
            .get(namespace)
            .await
            .expect("kept");
        assert!(
            ns.metadata.deletion_timestamp.is_none(),
            "{namespace} is not deleted"
        );
        assert!(ns.owner_references().is_empty(), "{namespace} is orphaned");
    }
}

#[tokio::test]
async fn shrinking_the_spec_deletes_the_namespaces_dropped_from_it() {
    let h = Harness::start(true).await;
    h.create_tenant(
        "shrink",
        json!({"namespaces": {"count": 3}, "database": database_spec()}),
    )
    .await;
    h.wait_ready("shrink", &["shrink-0", "shrink-1", "shrink-2"])
        .await;
    h.tenants()
        .patch(
            "shrink",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"namespaces": {"count": 2}}})),
        )
        .await
        .expect("shrink");
    h.eventually("shrink-2 gone", async || {
        (!h.namespace_names().await.contains("shrink-2")).then_some(())
    })
    .await;
    assert_eq!(
        h.pg_databases().await,
        ["shrink_shrink_0", "shrink_shrink_1"]
            .map(String::from)
            .into()
    );
    assert!(h.namespace_names().await.contains("shrink-1"));
    let status = h
        .tenants()
        .get("shrink")
        .await
        .expect("tenant")
        .status
        .expect("status");
    assert_eq!(status.namespaces_ready, 2);
}

#[tokio::test]
async fn a_namespace_it_did_not_create_is_not_adopted() {
    let h = Harness::start(true).await;
    h.env.ok(&["create", "namespace", "taken"]);
    h.create_tenant(
        "grab",
        json!({"namespaces": {"names": ["taken", "grab-own"]}}),
    )
    .await;
    h.eventually("tenant in conflict", async || {
        (h.tenant_state("grab").await.as_deref() == Some("Conflict")).then_some(())
    })
    .await;
    let tenant = h.tenants().get("grab").await.expect("tenant");
    let message = tenant.status.and_then(|s| s.message).unwrap_or_default();
    assert!(
        message.contains("taken") && message.contains("not adopted"),
        "{message}"
    );
    let taken = Api::<Namespace>::all(h.client.clone())
        .get("taken")
        .await
        .expect("ns");
    assert!(taken.owner_references().is_empty());
    h.env.ok(&["delete", "tenant", "grab", "--timeout=60s"]);
    h.wait_tenant_gone("grab").await;
    let left = h.namespace_names().await;
    assert!(
        left.contains("taken") && !left.contains("grab-own"),
        "{left:?}"
    );
}

#[tokio::test]
async fn an_operator_restart_mid_teardown_still_finishes_it() {
    let mut h = Harness::start(false).await;
    let kubeconfig =
        least_privilege_kubeconfig(binary(), "all", &h.env.server.kubeconfig, h.env.dir.path())
            .expect("the operators' least-privilege kubeconfig");
    let mut operators = OperatorProcess::start(
        binary(),
        "all",
        &kubeconfig,
        h.env.dir.path(),
        "ops",
        &["--leader-elect=false", "--max-backoff", "2s"],
    )
    .expect("start finale operator all");
    h.create_tenant(
        "halt",
        json!({"namespaces": {"count": 2}, "database": database_spec()}),
    )
    .await;
    h.wait_ready("halt", &["halt-0", "halt-1"]).await;
    // PostgreSQL is down: the teardown gets stuck at the databases, and says so.
    h.postgres.stop().expect("stop PostgreSQL");
    h.env.ok(&["delete", "tenant", "halt", "--wait=false"]);
    let message = h
        .eventually("tenant explaining its wait", async || {
            let tenant = h.tenants().get_opt("halt").await.ok().flatten()?;
            let deleting = tenant
                .status?
                .conditions
                .into_iter()
                .find(|c| c.type_ == "Deleting")?;
            deleting
                .message
                .contains("Database database")
                .then_some(deleting.message)
        })
        .await;
    assert!(
        message.contains("halt-0") && message.contains("halt-1"),
        "{message}"
    );
    assert!(
        message.contains("PostgreSQL"),
        "the databases' own error shows: {message}"
    );

    operators.kill9().expect("kill the operators mid-teardown");
    h.postgres.start_again().expect("PostgreSQL is back");
    operators.start_again().expect("restart the operators");
    h.wait_tenant_gone("halt").await;
    assert!(h.pg_databases().await.is_empty());
    let left = h.namespace_names().await;
    assert!(
        !left.contains("halt-0") && !left.contains("halt-1"),
        "{left:?}"
    );
}

#[tokio::test]
async fn edits_to_a_tenant_and_its_databases_leave_nothing_behind_when_it_goes() {
    let h = Harness::start(true).await;
    // A second admin Secret for the same server, for retargeting the template.
    let second: Secret = serde_json::from_value(json!({
        "metadata": {"name": "postgres-admin-2", "namespace": "platform"},
        "stringData": {"url": h.postgres.url()},
    }))
    .expect("secret");
    Api::<Secret>::namespaced(h.client.clone(), "platform")
        .create(&PostParams::default(), &second)
        .await
        .expect("create the second admin Secret");
    h.create_tenant(
        "edit",
        json!({"namespaces": {"names": ["edit-a", "edit-b"]}, "database": database_spec()}),
    )
    .await;
    h.wait_ready("edit", &["edit-a", "edit-b"]).await;
    assert_eq!(
        h.pg_databases().await,
        ["edit_edit_a", "edit_edit_b"].map(String::from).into()
    );
    assert_eq!(h.pg_roles().await, ["edit_owner"].map(String::from).into());

    // A person's edit of one tenant Database's name, owner and Secret is refused by the
    // server (the CRD's `self == oldSelf` CEL rules) before the operator sees it...
    let databases: Api<Database> = Api::namespaced(h.client.clone(), "edit-a");
    let refused = databases
        .patch(
            "database",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"dbName": "renamed", "owner": "someone_else",
                                          "connectionSecretRef": {"name": "elsewhere"}}}),
            ),
        )
        .await
        .expect_err("the server refuses an edit of immutable fields");
    let kube::Error::Api(status) = refused else {
        panic!("not an API error: {refused}");
    };
    assert_eq!(status.code, 422, "{status:?}");
    for field in ["spec.dbName", "spec.owner", "spec.connectionSecretRef"] {
        assert!(
            status.message.contains(&format!("{field} cannot change")),
            "{field} is named: {status:?}"
        );
    }
    // ...and the tenant's template is edited too (owner and Secret).
    let tenant = h
        .tenants()
        .patch(
            "edit",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"database": {"owner": "new_owner",
                "connectionSecretRef": {"namespace": "platform", "name": "postgres-admin-2"}}}})),
        )
        .await
        .expect("edit the tenant");
    h.eventually("the tenant edit observed", async || {
        let status = h.tenants().get_opt("edit").await.ok().flatten()?.status?;
        (status.observed_generation == tenant.metadata.generation
            && status.state.as_deref() == Some("Ready"))
        .then_some(())
    })
    .await;
    assert_eq!(
        h.pg_databases().await,
        ["edit_edit_a", "edit_edit_b"].map(String::from).into(),
        "the edits created nothing"
    );

    h.env.ok(&["delete", "tenant", "edit", "--wait=false"]);
    h.wait_tenant_gone("edit").await;
    assert!(h.pg_databases().await.is_empty(), "no database left");
    assert!(h.pg_roles().await.is_empty(), "no role left");
    let left = h.namespace_names().await;
    assert!(
        !left.contains("edit-a") && !left.contains("edit-b"),
        "{left:?}"
    );
    let platform = Api::<Secret>::namespaced(h.client.clone(), "platform")
        .list(&ListParams::default())
        .await
        .expect("list");
    assert!(
        platform.items.iter().all(|s| s.finalizers().is_empty()),
        "the admin Secrets are free"
    );
}

/// Issue #14: a Tenant's `adminGroup` is enforced. A member (a `--token-auth-file` user in the
/// group) manages its tenant's namespaces and nothing else: not another tenant's namespace,
/// not its own namespaces' deletion, not the Tenant.
#[tokio::test]
async fn a_tenant_admin_group_member_is_confined_to_its_tenants_namespaces() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, "ann-token,ann,100,\"acme-admins\"\n").expect("write tokens");
    let h = Harness::start_with(
        true,
        &["--token-auth-file", tokens.to_str().expect("UTF-8")],
    )
    .await;
    h.create_tenant(
        "acme",
        json!({"namespaces": {"names": ["acme-dev", "acme-prod"]}, "adminGroup": "acme-admins"}),
    )
    .await;
    h.create_tenant("globex", json!({"namespaces": {"names": ["globex-dev"]}}))
        .await;
    h.wait_ready("acme", &[]).await;
    h.wait_ready("globex", &[]).await;
    let ann = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--token", "ann-token"]);
        h.env.run(&all)
    };
    // The operator's RoleBindings reach the authorizer through its watch: wait, bounded.
    h.eventually("ann may create in acme-dev", async || {
        (ann(&["auth", "can-i", "create", "configmaps", "-n", "acme-dev"])
            .stdout
            .trim()
            == "yes")
            .then_some(())
    })
    .await;
    for namespace in ["acme-dev", "acme-prod"] {
        let run = ann(&["create", "configmap", "ann-was-here", "-n", namespace]);
        assert_eq!(run.code, Some(0), "{}", run.describe());
        let run = ann(&[
            "create",
            "rolebinding",
            "viewers",
            "-n",
            namespace,
            "--clusterrole=view",
            "--group=acme-viewers",
        ]);
        assert_eq!(
            run.code,
            Some(0),
            "the tenant admin grants within its namespaces: {}",
            run.describe()
        );
    }
    let refusals: [(&[&str], &str); 4] = [
        (
            &["create", "configmap", "x", "-n", "globex-dev"],
            r#"configmaps is forbidden: User "ann" cannot create resource "configmaps" in API group "" in the namespace "globex-dev""#,
        ),
        (
            &["delete", "namespace", "globex-dev"],
            r#"namespaces "globex-dev" is forbidden: User "ann" cannot delete resource "namespaces" in API group "" in the namespace "globex-dev""#,
        ),
        (
            &["delete", "namespace", "acme-dev"],
            r#"namespaces "acme-dev" is forbidden: User "ann" cannot delete resource "namespaces" in API group "" in the namespace "acme-dev""#,
        ),
        (
            &["delete", "tenant", "acme"],
            r#"tenants.finale.dev "acme" is forbidden: User "ann" cannot delete resource "tenants" in API group "finale.dev" at the cluster scope"#,
        ),
    ];
    for (args, message) in refusals {
        let run = ann(args);
        assert_eq!(run.code, Some(1), "{}", run.describe());
        assert!(run.stderr.contains(message), "{}", run.describe());
    }
    // Nothing the refusals asked for happened.
    let names = h.namespace_names().await;
    for namespace in ["acme-dev", "acme-prod", "globex-dev"] {
        assert!(names.contains(namespace), "{names:?}");
    }
    assert_eq!(h.tenant_state("acme").await.as_deref(), Some("Ready"));
    let globex: Api<ConfigMap> = Api::namespaced(h.client.clone(), "globex-dev");
    assert!(globex.get_opt("x").await.expect("get").is_none());
}
