//! The Database operator's reconciler: what *apply* and each cleanup step do.
//!
//! Cleanup runs in three ordered steps, one finalizer each:
//! 1. [`DATABASE_FINALIZER`]: close the connections and drop the database (only if its comment
//!    carries this object's uid);
//! 2. [`ROLE_FINALIZER`]: drop the owner role (only if Finale created it);
//! 3. [`SECRET_FINALIZER`]: release the connection Secret. While any Database still needs it,
//!    the Secret carries [`SECRET_IN_USE_FINALIZER`], so deleting the namespace cannot take the
//!    connection URL away before the databases are dropped.
//!
//! # What cleanup acts on
//! Cleanup drops what the object *created*, never what its spec says now: the database name,
//! the owner role, the connection Secret and the server it is on are recorded in `status`
//! (`dbName`, `owner`, `connectionSecretRef`, `server`), and each step reads them from there.
//! The order makes the record impossible to lose:
//!
//! 1. the Secret is read (while it is missing nothing is created, nor recorded);
//! 2. the records are written to `status`, with the object's `resourceVersion` as a
//!    precondition (so a stale view cannot record values another pass did not use);
//! 3. only then is the Secret protected, and the role and the database created, with exactly
//!    the recorded values.
//!
//! A crash between 2 and 3 leaves a record of something that does not exist, which cleanup
//! treats as already gone; there is no crash point that leaves something created and not
//! recorded. A Secret whose URL later names another server is refused (a permanent error naming
//! both servers) instead of followed: "not there" on the new server would orphan the database
//! on the old one. Objects from before the records existed fall back to the spec (and the
//! Secret's current server) for whatever is not recorded.
//!
//! # Immutable fields
//! `spec.dbName`, `spec.owner` and `spec.connectionSecretRef` cannot change once recorded. An
//! edit is refused with the `Ready` condition (reason `ImmutableField`) and a Warning Event,
//! and nothing is done for the new values; deleting the object still drops what was created.
//! The CRD carries the same rule as CEL (`self == oldSelf`), which Finale and kube-apiserver
//! apply before the edit is stored; this check covers servers that do not evaluate CEL.
//!
//! # Errors
//! PostgreSQL errors are sorted ([`postgres::PgError::class`]): those a person must fix (bad
//! credentials, missing privileges, a certificate that does not verify, …) are marked
//! permanent for the toolkit, which shows them with reason `PermanentError` and retries slowly.

use std::sync::Arc;

use anyhow::Context as _;
use std::time::Duration;

use finale_operator::claims::OtherFinalizer;
use finale_operator::condition::{self, READY};
use finale_operator::error::{is_permanent, permanent_with_remedy};
use finale_operator::events::EventType;
use finale_operator::finalizers;
use finale_operator::policy::DeletionPolicy;
use finale_operator::runtime::{self, Applied, Cleanup, Context, Reconciler};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::Controller;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::connection::{self, CA_KEY, Timeouts};
use crate::crd::{Database, DatabaseStatus, SecretKeyRef};
use crate::postgres::{self, Class, DatabaseState, DropOutcome, PgError, PgServer, RoleState};

pub const DATABASE_FINALIZER: &str = "finale.dev/database";
pub const ROLE_FINALIZER: &str = "finale.dev/database-role";
pub const SECRET_FINALIZER: &str = "finale.dev/database-secret";
/// Put on a connection Secret while Databases depend on it.
pub const SECRET_IN_USE_FINALIZER: &str = "finale.dev/in-use-by-databases";

const FINALIZERS: &[&str] = &[DATABASE_FINALIZER, ROLE_FINALIZER, SECRET_FINALIZER];

/// How long a Database waiting for its Secret is left before it is looked at again (the Secret
/// watch normally wakes it at once).
const SECRET_RECHECK: Duration = Duration::from_secs(60);

/// The Database operator, with the bounds of its PostgreSQL calls.
#[derive(Clone, Debug, Default)]
pub struct DatabaseReconciler {
    timeouts: Timeouts,
}

/// Why a Database cannot be acted on; reported in its status.
struct Blocked {
    state: &'static str,
    reason: &'static str,
    message: String,
}

/// What an object manages: its status records, else (objects from before the records) its
/// spec.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Managed {
    db_name: String,
    owner: String,
    secret: SecretKeyRef,
    /// `None` until recorded: the server is known only from the Secret.
    server: Option<String>,
}

impl Managed {
    fn of(database: &Database) -> Managed {
        let status = database.status.as_ref();
        let spec = &database.spec;
        Managed {
            db_name: status
                .and_then(|s| s.db_name.clone())
                .unwrap_or_else(|| spec.db_name.clone()),
            owner: status
                .and_then(|s| s.owner.clone())
                .unwrap_or_else(|| spec.owner.clone()),
            secret: status
                .and_then(|s| s.connection_secret_ref.clone())
                .unwrap_or_else(|| spec.connection_secret_ref.clone()),
            server: status.and_then(|s| s.server.clone()),
        }
    }

    fn is_recorded(database: &Database) -> bool {
        database.status.as_ref().is_some_and(|s| {
            s.db_name.is_some()
                && s.owner.is_some()
                && s.connection_secret_ref.is_some()
                && s.server.is_some()
        })
    }

    /// Refuses a Secret whose URL names another server than the one recorded.
    fn check_server(&self, current: &str) -> anyhow::Result<()> {
        match &self.server {
            Some(recorded) if recorded != current => Err(permanent_with_remedy(
                anyhow::anyhow!(
                    "Secret {:?} now points at PostgreSQL {current}, but database {:?} was created on {recorded}",
                    self.secret.name,
                    self.db_name
                ),
                format!(
                    "point the Secret's URL back at {recorded}, where the database is; to leave it there instead, delete with the annotation finale.dev/deletion-policy=Orphan"
                ),
            )),
            _ => Ok(()),
        }
    }
}

/// Converts a PostgreSQL error for the toolkit, marking those a person must fix as permanent.
fn pg(error: PgError) -> anyhow::Error {
    match error.class() {
        Class::Transient => anyhow::Error::new(error),
        Class::Permanent(remedy) => permanent_with_remedy(anyhow::Error::new(error), remedy),
    }
}

/// What the connection Secret holds.
struct Connection {
    secret: Secret,
    url: String,
    ca: Option<Vec<u8>>,
}

impl Connection {
    /// `host:port` of the server the URL names (also the rate-limit key).
    fn server(&self) -> anyhow::Result<String> {
        connection::server_of(&self.url).map_err(|e| pg(PgError::BadUrl(e)))
    }
}

impl DatabaseReconciler {
    pub fn new(timeouts: Timeouts) -> DatabaseReconciler {
        DatabaseReconciler { timeouts }
    }

    fn uid(database: &Database) -> anyhow::Result<String> {
        database
            .uid()
            .ok_or_else(|| anyhow::anyhow!("the Database has no uid"))
    }

    fn validate(database: &Database) -> Result<(), Blocked> {
        let spec = &database.spec;
        let status = database.status.as_ref();
        let mut changed = Vec::new();
        if let Some(recorded) = status.and_then(|s| s.db_name.as_ref())
            && *recorded != spec.db_name
        {
            changed.push(format!(
                "spec.dbName cannot change from {recorded:?} to {:?}",
                spec.db_name
            ));
        }
        if let Some(recorded) = status.and_then(|s| s.owner.as_ref())
            && *recorded != spec.owner
        {
            changed.push(format!(
                "spec.owner cannot change from {recorded:?} to {:?}",
                spec.owner
            ));
        }
        if let Some(recorded) = status.and_then(|s| s.connection_secret_ref.as_ref())
            && *recorded != spec.connection_secret_ref
        {
            changed.push(format!(
                "spec.connectionSecretRef cannot change from {recorded:?} to {:?}",
                spec.connection_secret_ref
            ));
        }
        if !changed.is_empty() {
            let managed = Managed::of(database);
            return Err(Blocked {
                state: "Failed",
                reason: "ImmutableField",
                message: format!(
                    "{}: this Database still manages database {:?} owned by {:?} through Secret {:?}, and drops them when deleted; set the fields back, or create a new Database",
                    changed.join("; "),
                    managed.db_name,
                    managed.owner,
                    managed.secret.name
                ),
            });
        }
        let invalid = |message: String| Blocked {
            state: "Failed",
            reason: "InvalidSpec",
            message,
        };
        postgres::validate_name("spec.dbName", &spec.db_name).map_err(invalid)?;
        postgres::validate_name("spec.owner", &spec.owner).map_err(invalid)?;
        if spec.connection_secret_ref.name.is_empty() {
            return Err(invalid(
                "spec.connectionSecretRef.name is empty: name the Secret that holds the PostgreSQL URL".into(),
            ));
        }
        Ok(())
    }

    /// Records what this object is about to create, on `server`, before it creates anything
    /// (see the module docs). Returns the object as stored with its records, or `None` when it
    /// changed meanwhile (the next pass looks again).
    async fn record(
        client: &Client,
        database: &Database,
        server: &str,
    ) -> anyhow::Result<Option<Database>> {
        if Managed::is_recorded(database) {
            return Ok(Some(database.clone()));
        }
        let managed = Managed::of(database);
        let mut recorded = database.clone();
        let status = recorded.status.get_or_insert_with(DatabaseStatus::default);
        status.db_name = Some(managed.db_name);
        status.owner = Some(managed.owner);
        status.connection_secret_ref = Some(managed.secret);
        status.server = Some(managed.server.unwrap_or_else(|| server.to_string()));
        let api: Api<Database> =
            Api::namespaced(client.clone(), &database.namespace().unwrap_or_default());
        // A replace carries the resourceVersion: it fails if anyone changed the object since
        // this view, so the record always matches the spec it was taken from.
        match api
            .replace_status(&database.name_any(), &PostParams::default(), &recorded)
            .await
        {
            Ok(stored) => Ok(Some(stored)),
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(None),
            Err(error) => {
                Err(error).context("recording the database, role and Secret in the status")
            }
        }
    }

    /// The connection from the Secret `reference` names; `Ok(None)` when the Secret is absent.
    async fn connection(
        client: &Client,
        namespace: &str,
        reference: &SecretKeyRef,
    ) -> anyhow::Result<Option<Connection>> {
        let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
        let Some(secret) = secrets
            .get_opt(&reference.name)
            .await
            .with_context(|| format!("reading Secret {namespace}/{}", reference.name))?
        else {
            return Ok(None);
        };
        let value = |key: &str| -> Option<Vec<u8>> {
            secret
                .data
                .as_ref()
                .and_then(|data| data.get(key))
                .map(|bytes| bytes.0.clone())
                .or_else(|| {
                    secret
                        .string_data
                        .as_ref()
                        .and_then(|data| data.get(key))
                        .map(|text| text.clone().into_bytes())
                })
        };
        let url =
            value(&reference.key).map(|bytes| String::from_utf8_lossy(&bytes).trim().to_string());
        let ca = value(CA_KEY).filter(|ca| !ca.iter().all(u8::is_ascii_whitespace));
        match url {
            Some(url) if !url.is_empty() => Ok(Some(Connection { secret, url, ca })),
            _ => Err(permanent_with_remedy(
                anyhow::anyhow!(
                    "Secret {namespace}/{} has no key {:?}",
                    reference.name,
                    reference.key
                ),
                format!(
                    "put the PostgreSQL URL (postgres://user:password@host:port/database) under {:?} in the Secret",
                    reference.key
                ),
            )),
        }
    }

    async fn connect(&self, connection: &Connection) -> anyhow::Result<PgServer> {
        postgres::connect(&connection.url, connection.ca.as_deref(), &self.timeouts)
            .await
            .map_err(pg)
    }

    async fn write_status(
        client: &Client,
        database: &Database,
        state: &str,
        ready: bool,
        reason: &str,
        message: &str,
    ) -> anyhow::Result<()> {
        let previous = database.status.clone().unwrap_or_default();
        let mut conditions = previous.conditions.clone();
        condition::upsert(
            &mut conditions,
            condition::new(READY, ready, reason, message, database.metadata.generation),
        );
        // The records and the deletion progress are kept as they are.
        let next = DatabaseStatus {
            state: Some(state.to_string()),
            message: Some(message.to_string()),
            conditions,
            observed_generation: database.metadata.generation,
            ..previous.clone()
        };
        // Writing only on change keeps a resync from costing an API write per object.
        if next == previous {
            return Ok(());
        }
        let api: Api<Database> =
            Api::namespaced(client.clone(), &database.namespace().unwrap_or_default());
        api.patch_status(
            &database.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": next })),
        )
        .await
        .context("writing the status")?;
        Ok(())
    }

    async fn report_blocked(
        context: &Context,
        database: &Database,
        blocked: &Blocked,
    ) -> anyhow::Result<()> {
        let already = database.status.as_ref().and_then(|s| s.message.as_deref())
            == Some(blocked.message.as_str());
        Self::write_status(
            &context.client,
            database,
            blocked.state,
            false,
            blocked.reason,
            &blocked.message,
        )
        .await?;
        if !already {
            context
                .event(
                    database,
                    EventType::Warning,
                    blocked.reason,
                    "Reconcile",
                    blocked.message.clone(),
                )
                .await;
        }
        Ok(())
    }

    async fn converge(
        &self,
        database: &Arc<Database>,
        context: &Context,
    ) -> anyhow::Result<Applied> {
        if let Err(blocked) = Self::validate(database) {
            Self::report_blocked(context, database, &blocked).await?;
            return Ok(Applied::AwaitChange);
        }
        let namespace = database.namespace().unwrap_or_default();
        let Some(connection) =
            Self::connection(&context.client, &namespace, &Managed::of(database).secret).await?
        else {
            let managed = Managed::of(database);
            let blocked = Blocked {
                state: "Pending",
                reason: "SecretNotFound",
                message: format!(
                    "Secret {:?} not found in namespace {namespace:?}: create it with the PostgreSQL URL under key {:?}; nothing has been created yet",
                    managed.secret.name, managed.secret.key
                ),
            };
            Self::report_blocked(context, database, &blocked).await?;
            return Ok(Applied::RequeueAfter(SECRET_RECHECK));
        };
        let system = connection.server()?;
        let Some(database) = Self::record(&context.client, database, &system).await? else {
            return Ok(Applied::RequeueAfter(Duration::from_millis(200)));
        };
        let database = &database;
        let managed = Managed::of(database);
        managed.check_server(&system)?;
        Self::protect_secret(&context.client, &connection.secret).await?;
        let uid = Self::uid(database)?;
        let server = self.connect(&connection).await?;
        // Reads first: a converged Database (every resync, every status echo) costs no DDL and
        // no share of the rate limit.
        let role = match server
            .inspect_role(&managed.owner)
            .await
            .map_err(pg)
            .with_context(|| format!("reading role {:?}", managed.owner))?
        {
            Some(role) => role,
            None => {
                context.rate_limits.acquire(&system).await;
                server
                    .ensure_role(&managed.owner, &uid)
                    .await
                    .map_err(pg)
                    .with_context(|| format!("creating role {:?}", managed.owner))?
            }
        };
        let state = match server
            .inspect_database(&managed.db_name, &managed.owner, &uid)
            .await
            .map_err(pg)
            .with_context(|| format!("reading database {:?}", managed.db_name))?
        {
            Some((state @ DatabaseState::Foreign { .. }, _)) | Some((state, true)) => state,
            Some((_, false)) | None => {
                context.rate_limits.acquire(&system).await;
                server
                    .ensure_database(&managed.db_name, &managed.owner, &uid)
                    .await
                    .map_err(pg)
                    .with_context(|| format!("creating database {:?}", managed.db_name))?
            }
        };
        match state {
            DatabaseState::Foreign { comment } => {
                let blocked = Blocked {
                    state: "NotAdopted",
                    reason: "NotAdopted",
                    message: format!(
                        "database {:?} already exists and was not created by this Database (its comment is {}); it is left untouched and will never be dropped by Finale: delete this Database and create one with another spec.dbName",
                        managed.db_name,
                        comment.map_or_else(|| "empty".to_string(), |c| format!("{c:?}"))
                    ),
                };
                Self::report_blocked(context, database, &blocked).await?;
                Ok(Applied::AwaitChange)
            }
            DatabaseState::Created | DatabaseState::Ours => {
                if matches!(state, DatabaseState::Created) {
                    context
                        .event(
                            database,
                            EventType::Normal,
                            "Created",
                            "Reconcile",
                            format!(
                                "created database {:?} owned by {:?}",
                                managed.db_name, managed.owner
                            ),
                        )
                        .await;
                }
                let role_note = match role {
                    RoleState::Foreign => " (existing role, kept on delete)",
                    RoleState::Created | RoleState::Managed => "",
                };
                Self::write_status(
                    &context.client,
                    database,
                    "Ready",
                    true,
                    "Ready",
                    &format!(
                        "database {:?} is ready, owned by role {:?}{role_note}",
                        managed.db_name, managed.owner
                    ),
                )
                .await?;
                Ok(Applied::Ready)
            }
        }
    }

    /// Keeps the connection Secret from going while this Database may still need it.
    async fn protect_secret(client: &Client, secret: &Secret) -> anyhow::Result<()> {
        let api: Api<Secret> =
            Api::namespaced(client.clone(), &secret.namespace().unwrap_or_default());
        if let Some(patch) = finalizers::add_patch(
            secret.metadata.finalizers.as_deref(),
            &[SECRET_IN_USE_FINALIZER],
        ) {
            finalizers::send(&api, secret, patch)
                .await
                .with_context(|| format!("protecting Secret {}", secret.name_any()))?;
        }
        Ok(())
    }

    /// Takes [`SECRET_IN_USE_FINALIZER`] off the Secret this Database used, unless another
    /// Database still has cleanup to do with it.
    async fn release_secret(database: &Database, context: &Context) -> anyhow::Result<Cleanup> {
        let namespace = database.namespace().unwrap_or_default();
        let secret_name = Managed::of(database).secret.name;
        let databases: Api<Database> = Api::namespaced(context.client.clone(), &namespace);
        let others = databases
            .list(&ListParams::default())
            .await
            .with_context(|| format!("listing Databases in {namespace}"))?;
        let still_needed = others.items.iter().any(|other| {
            other.uid() != database.uid()
                && Managed::of(other).secret.name == secret_name
                && other
                    .finalizers()
                    .iter()
                    .any(|f| f == DATABASE_FINALIZER || f == ROLE_FINALIZER)
        });
        if still_needed {
            return Ok(Cleanup::Done);
        }
        let secrets: Api<Secret> = Api::namespaced(context.client.clone(), &namespace);
        let Some(secret) = secrets
            .get_opt(&secret_name)
            .await
            .with_context(|| format!("reading Secret {namespace}/{secret_name}"))?
        else {
            return Ok(Cleanup::Done);
        };
        if let Some(patch) = finalizers::remove_patch(secret.finalizers(), SECRET_IN_USE_FINALIZER)
        {
            match finalizers::send(&secrets, &secret, patch).await {
                Ok(_) => {}
                Err(e) if finalizers::is_conflict(&e) => {
                    anyhow::bail!(
                        "Secret {namespace}/{secret_name} changed while releasing it; retrying"
                    )
                }
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(e) => anyhow::bail!("releasing Secret {namespace}/{secret_name}: {e}"),
            }
        }
        Ok(Cleanup::Done)
    }
}

impl Reconciler for DatabaseReconciler {
    type Resource = Database;

    fn name(&self) -> &'static str {
        "database"
    }

    fn finalizers(&self) -> &'static [&'static str] {
        FINALIZERS
    }

    fn cleans_up(&self, finalizer: &str) -> &'static [&'static str] {
        match finalizer {
            DATABASE_FINALIZER => &["PostgreSQL database"],
            ROLE_FINALIZER => &["PostgreSQL role"],
            SECRET_FINALIZER => &["connection Secret protection"],
            SECRET_IN_USE_FINALIZER => &[
                "nothing: it keeps the connection Secret until the Databases using it are dropped",
            ],
            _ => &[],
        }
    }

    fn other_finalizers(&self) -> &'static [OtherFinalizer] {
        &[OtherFinalizer {
            finalizer: SECRET_IN_USE_FINALIZER,
            group: "",
            resource: "secrets",
        }]
    }

    fn deletion_policy(&self, database: &Database) -> Option<DeletionPolicy> {
        Some(database.spec.deletion_policy)
    }

    fn watches(&self, controller: Controller<Database>, client: &Client) -> Controller<Database> {
        // A Secret created or changed after its Databases wakes them at once.
        let databases = controller.store();
        controller.watches(
            Api::<Secret>::all(client.clone()),
            watcher::Config::default(),
            move |secret: Secret| {
                let namespace = secret.namespace();
                let name = secret.name_any();
                databases
                    .state()
                    .into_iter()
                    .filter(|db| {
                        db.namespace() == namespace
                            && (Managed::of(db).secret.name == name
                                || db.spec.connection_secret_ref.name == name)
                    })
                    .map(|db| ObjectRef::from_obj(&*db))
                    .collect::<Vec<_>>()
            },
        )
    }

    async fn apply(&self, database: Arc<Database>, context: &Context) -> anyhow::Result<Applied> {
        let outcome = self.converge(&database, context).await;
        if let Err(error) = &outcome {
            // The toolkit retries with backoff; the status says what is failing meanwhile.
            let (reason, message) = if is_permanent(error) {
                (
                    runtime::PERMANENT_ERROR,
                    format!(
                        "{}; this will not pass by waiting, so it is retried only slowly",
                        runtime::describe_error(error)
                    ),
                )
            } else {
                ("ReconcileFailed", format!("{error:#}; retrying"))
            };
            if let Err(status_error) =
                Self::write_status(&context.client, &database, "Error", false, reason, &message)
                    .await
            {
                tracing::debug!(error = %status_error, "could not report the failure in the status");
            }
        }
        outcome
    }

    async fn cleanup(
        &self,
        finalizer: &str,
        database: Arc<Database>,
        context: &Context,
    ) -> anyhow::Result<Cleanup> {
        if finalizer == SECRET_FINALIZER {
            return Self::release_secret(&database, context).await;
        }
        // What was created, as recorded; never the current spec.
        let managed = Managed::of(&database);
        // Unrecorded names that never passed validation: nothing was created under them.
        if postgres::validate_name("dbName", &managed.db_name).is_err()
            || postgres::validate_name("owner", &managed.owner).is_err()
        {
            return Ok(Cleanup::Done);
        }
        let namespace = database.namespace().unwrap_or_default();
        let Some(connection) =
            Self::connection(&context.client, &namespace, &managed.secret).await?
        else {
            // The Secret is protected by a finalizer from before anything is created, so its
            // absence means nothing was.
            return Ok(Cleanup::Done);
        };
        let system = connection.server()?;
        managed.check_server(&system)?;
        let uid = Self::uid(&database)?;
        let server = self.connect(&connection).await?;
        context.rate_limits.acquire(&system).await;
        if finalizer == DATABASE_FINALIZER {
            let outcome = server
                .drop_database(&managed.db_name, &uid)
                .await
                .map_err(pg)
                .with_context(|| format!("dropping database {:?}", managed.db_name))?;
            if let DropOutcome::NotOurs = outcome {
                context
                    .event(
                        &*database,
                        EventType::Normal,
                        "NotDropped",
                        "Delete",
                        format!(
                            "database {:?} was not created by this Database; left in place",
                            managed.db_name
                        ),
                    )
                    .await;
            }
            return Ok(Cleanup::Done);
        }
        let outcome = server
            .drop_role(&managed.owner)
            .await
            .map_err(pg)
            .with_context(|| format!("dropping role {:?}", managed.owner))?;
        if let DropOutcome::StillInUse(detail) = outcome {
            // Another database still belongs to the role; its own teardown drops the role.
            context
                .event(
                    &*database,
                    EventType::Normal,
                    "RoleKept",
                    "Delete",
                    format!(
                        "role {:?} still owns other objects, so it stays for them: {detail}",
                        managed.owner
                    ),
                )
                .await;
        }
        Ok(Cleanup::Done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each finalizer's `FinalizerClaim` tells a person what its cleanup removes, and the
    /// finalizer the operator puts on Secrets is claimed for Secrets.
    #[test]
    fn every_finalizer_is_claimed_with_what_it_cleans_up() {
        let reconciler = DatabaseReconciler::new(Timeouts::default());
        for finalizer in reconciler.finalizers() {
            assert!(!reconciler.cleans_up(finalizer).is_empty(), "{finalizer}");
        }
        let others = reconciler.other_finalizers();
        assert_eq!(others.len(), 1);
        assert_eq!(
            (others[0].finalizer, others[0].group, others[0].resource),
            (SECRET_IN_USE_FINALIZER, "", "secrets")
        );
        assert!(!reconciler.cleans_up(SECRET_IN_USE_FINALIZER).is_empty());
    }
}
