//! The Database operator's reconciler: what *apply* and each cleanup step do.
//!
//! Cleanup runs in three ordered steps, one finalizer each:
//! 1. [`DATABASE_FINALIZER`]: close the connections and drop the database (only if its comment
//!    carries this object's uid);
//! 2. [`ROLE_FINALIZER`]: drop the owner role (only if this object created it);
//! 3. [`SECRET_FINALIZER`]: release the connection Secret. While any Database still needs it,
//!    the Secret carries [`SECRET_IN_USE_FINALIZER`], so deleting the namespace cannot take the
//!    connection URL away before the databases are dropped.

use std::sync::Arc;

use anyhow::Context as _;
use std::time::Duration;

use finale_operator::condition::{self, READY};
use finale_operator::events::EventType;
use finale_operator::finalizers;
use finale_operator::policy::DeletionPolicy;
use finale_operator::runtime::{Applied, Cleanup, Context, Reconciler};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::Controller;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::crd::{Database, DatabaseStatus};
use crate::postgres::{self, DatabaseState, DropOutcome, PgServer, RoleState};

pub const DATABASE_FINALIZER: &str = "finale.dev/database";
pub const ROLE_FINALIZER: &str = "finale.dev/database-role";
pub const SECRET_FINALIZER: &str = "finale.dev/database-secret";
/// Put on a connection Secret while Databases depend on it.
pub const SECRET_IN_USE_FINALIZER: &str = "finale.dev/in-use-by-databases";

const FINALIZERS: &[&str] = &[DATABASE_FINALIZER, ROLE_FINALIZER, SECRET_FINALIZER];

/// How long a Database waiting for its Secret is left before it is looked at again (the Secret
/// watch normally wakes it at once).
const SECRET_RECHECK: Duration = Duration::from_secs(60);

pub struct DatabaseReconciler;

/// Why a Database cannot be acted on; reported in its status.
struct Blocked {
    state: &'static str,
    reason: &'static str,
    message: String,
}

impl DatabaseReconciler {
    fn uid(database: &Database) -> anyhow::Result<String> {
        database
            .uid()
            .ok_or_else(|| anyhow::anyhow!("the Database has no uid"))
    }

    fn validate(database: &Database) -> Result<(), Blocked> {
        let spec = &database.spec;
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
        if let Some(created) = database.status.as_ref().and_then(|s| s.db_name.as_ref())
            && *created != spec.db_name
        {
            return Err(invalid(format!(
                "spec.dbName cannot change from {created:?} to {:?}: create a new Database instead",
                spec.db_name
            )));
        }
        Ok(())
    }

    /// The connection URL from the referenced Secret; `Ok(None)` when the Secret is absent.
    async fn connection_url(
        client: &Client,
        database: &Database,
    ) -> anyhow::Result<Option<(Secret, String)>> {
        let namespace = database.namespace().unwrap_or_default();
        let reference = &database.spec.connection_secret_ref;
        let secrets: Api<Secret> = Api::namespaced(client.clone(), &namespace);
        let Some(secret) = secrets
            .get_opt(&reference.name)
            .await
            .with_context(|| format!("reading Secret {namespace}/{}", reference.name))?
        else {
            return Ok(None);
        };
        let url = secret
            .data
            .as_ref()
            .and_then(|data| data.get(&reference.key))
            .map(|bytes| String::from_utf8_lossy(&bytes.0).trim().to_string())
            .or_else(|| {
                secret
                    .string_data
                    .as_ref()
                    .and_then(|data| data.get(&reference.key).cloned())
            });
        match url {
            Some(url) if !url.is_empty() => Ok(Some((secret, url))),
            _ => anyhow::bail!(
                "Secret {namespace}/{} has no key {:?}: put the PostgreSQL URL (postgres://user:password@host:port/db) there",
                reference.name,
                reference.key
            ),
        }
    }

    async fn connect(url: &str) -> anyhow::Result<PgServer> {
        Ok(postgres::connect(url).await?)
    }

    async fn write_status(
        client: &Client,
        database: &Database,
        state: &str,
        ready: bool,
        reason: &str,
        message: &str,
        created: Option<&str>,
    ) -> anyhow::Result<()> {
        let previous = database.status.clone().unwrap_or_default();
        let mut conditions = previous.conditions.clone();
        condition::upsert(
            &mut conditions,
            condition::new(READY, ready, reason, message, database.metadata.generation),
        );
        let next = DatabaseStatus {
            state: Some(state.to_string()),
            message: Some(message.to_string()),
            conditions,
            observed_generation: database.metadata.generation,
            db_name: created.map(str::to_string).or(previous.db_name.clone()),
            deletion: previous.deletion.clone(),
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
            None,
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

    async fn converge(database: &Arc<Database>, context: &Context) -> anyhow::Result<Applied> {
        let database = Arc::clone(database);
        if let Err(blocked) = Self::validate(&database) {
            Self::report_blocked(context, &database, &blocked).await?;
            return Ok(Applied::AwaitChange);
        }
        let Some((secret, url)) = Self::connection_url(&context.client, &database).await? else {
            let reference = &database.spec.connection_secret_ref;
            let blocked = Blocked {
                state: "Pending",
                reason: "SecretNotFound",
                message: format!(
                    "Secret {:?} not found in namespace {:?}: create it with the PostgreSQL URL under key {:?}; nothing has been created yet",
                    reference.name,
                    database.namespace().unwrap_or_default(),
                    reference.key
                ),
            };
            Self::report_blocked(context, &database, &blocked).await?;
            return Ok(Applied::RequeueAfter(SECRET_RECHECK));
        };
        Self::protect_secret(&context.client, &secret).await?;
        let uid = Self::uid(&database)?;
        let spec = &database.spec;
        let server = Self::connect(&url).await?;
        let system = system_of(&url);
        // Reads first: a converged Database (every resync, every status echo) costs no DDL and
        // no share of the rate limit.
        let role = match server
            .inspect_role(&spec.owner)
            .await
            .with_context(|| format!("reading role {:?}", spec.owner))?
        {
            Some(role) => role,
            None => {
                context.rate_limits.acquire(&system).await;
                server
                    .ensure_role(&spec.owner, &uid)
                    .await
                    .with_context(|| format!("creating role {:?}", spec.owner))?
            }
        };
        let state = match server
            .inspect_database(&spec.db_name, &spec.owner, &uid)
            .await
            .with_context(|| format!("reading database {:?}", spec.db_name))?
        {
            Some((state @ DatabaseState::Foreign { .. }, _)) | Some((state, true)) => state,
            Some((_, false)) | None => {
                context.rate_limits.acquire(&system).await;
                server
                    .ensure_database(&spec.db_name, &spec.owner, &uid)
                    .await
                    .with_context(|| format!("creating database {:?}", spec.db_name))?
            }
        };
        match state {
            DatabaseState::Foreign { comment } => {
                let blocked = Blocked {
                    state: "NotAdopted",
                    reason: "NotAdopted",
                    message: format!(
                        "database {:?} already exists and was not created by this Database (its comment is {}); it is left untouched and will never be dropped by Finale: choose another spec.dbName",
                        spec.db_name,
                        comment.map_or_else(|| "empty".to_string(), |c| format!("{c:?}"))
                    ),
                };
                Self::report_blocked(context, &database, &blocked).await?;
                Ok(Applied::AwaitChange)
            }
            DatabaseState::Created | DatabaseState::Ours => {
                if matches!(state, DatabaseState::Created) {
                    context
                        .event(
                            &*database,
                            EventType::Normal,
                            "Created",
                            "Reconcile",
                            format!(
                                "created database {:?} owned by {:?}",
                                spec.db_name, spec.owner
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
                    &database,
                    "Ready",
                    true,
                    "Ready",
                    &format!(
                        "database {:?} is ready, owned by role {:?}{role_note}",
                        spec.db_name, spec.owner
                    ),
                    Some(&spec.db_name),
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

    async fn release_secret(database: &Database, context: &Context) -> anyhow::Result<Cleanup> {
        let namespace = database.namespace().unwrap_or_default();
        let secret_name = &database.spec.connection_secret_ref.name;
        let databases: Api<Database> = Api::namespaced(context.client.clone(), &namespace);
        let others = databases
            .list(&ListParams::default())
            .await
            .with_context(|| format!("listing Databases in {namespace}"))?;
        let still_needed = others.items.iter().any(|other| {
            other.uid() != database.uid()
                && other.spec.connection_secret_ref.name == *secret_name
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
            .get_opt(secret_name)
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

/// The rate-limit key of a PostgreSQL URL: its host and port, never its credentials.
fn system_of(url: &str) -> String {
    let without_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = without_scheme
        .split(['/', '?'])
        .next()
        .unwrap_or(without_scheme);
    authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host)
        .to_string()
}

impl Reconciler for DatabaseReconciler {
    type Resource = Database;

    fn name(&self) -> &'static str {
        "database"
    }

    fn finalizers(&self) -> &'static [&'static str] {
        FINALIZERS
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
                        db.namespace() == namespace && db.spec.connection_secret_ref.name == name
                    })
                    .map(|db| ObjectRef::from_obj(&*db))
                    .collect::<Vec<_>>()
            },
        )
    }

    async fn apply(&self, database: Arc<Database>, context: &Context) -> anyhow::Result<Applied> {
        let outcome = Self::converge(&database, context).await;
        if let Err(error) = &outcome {
            // The toolkit retries with backoff; the status says what is failing meanwhile.
            let message = format!("{error:#}; retrying");
            if let Err(status_error) = Self::write_status(
                &context.client,
                &database,
                "Error",
                false,
                "ReconcileFailed",
                &message,
                None,
            )
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
        // An invalid spec never got past validation: nothing exists to drop.
        if Self::validate(&database).is_err() {
            return Ok(Cleanup::Done);
        }
        let Some((_, url)) = Self::connection_url(&context.client, &database).await? else {
            // The Secret is protected by a finalizer from before anything is created, so its
            // absence means nothing was.
            return Ok(Cleanup::Done);
        };
        let uid = Self::uid(&database)?;
        let spec = &database.spec;
        let server = Self::connect(&url).await?;
        context.rate_limits.acquire(&system_of(&url)).await;
        if finalizer == DATABASE_FINALIZER {
            let outcome = server
                .drop_database(&spec.db_name, &uid)
                .await
                .with_context(|| format!("dropping database {:?}", spec.db_name))?;
            if let DropOutcome::NotOurs = outcome {
                context
                    .event(
                        &*database,
                        EventType::Normal,
                        "NotDropped",
                        "Delete",
                        format!(
                            "database {:?} was not created by this Database; left in place",
                            spec.db_name
                        ),
                    )
                    .await;
            }
            return Ok(Cleanup::Done);
        }
        let outcome = server
            .drop_role(&spec.owner)
            .await
            .with_context(|| format!("dropping role {:?}", spec.owner))?;
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
                        spec.owner
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

    #[test]
    fn the_rate_limit_key_is_the_server_without_credentials() {
        assert_eq!(
            system_of("postgres://admin:s3cret@db.example:5433/postgres?sslmode=disable"),
            "db.example:5433"
        );
        assert_eq!(system_of("postgresql://127.0.0.1:5432"), "127.0.0.1:5432");
    }
}
