//! Admission webhooks: the `MutatingWebhookConfiguration`s and
//! `ValidatingWebhookConfiguration`s of `admissionregistration.k8s.io/v1`, called for real;
//! and `ValidatingAdmissionPolicy`s with their bindings, evaluated in process ([`policy`]).
//!
//! The registry calls [`Webhooks::mutate`] and [`Webhooks::validate`] from its admission
//! step, so every write goes through them: HTTP requests and the in-process controllers
//! alike, as upstream's controllers are API clients whose writes pass admission. A call is an
//! `admission.k8s.io/v1` `AdmissionReview` POSTed over HTTPS to `clientConfig.url`, or to a
//! Service reference resolved through its Endpoints or EndpointSlices (Finale has no cluster
//! network to reach a Service's cluster IP), with TLS verifying `<service>.<namespace>.svc`,
//! through the HTTPS client shared with CRD conversion webhooks ([`crate::webhook_client`]).
//!
//! # Guarantees
//! - Mutating webhooks run first, in the order of their configuration's name, then of their
//!   position in it; `JSONPatch` answers apply in turn. If one changed the object, the
//!   `reinvocationPolicy: IfNeeded` webhooks called before that change are called once more.
//!   Validating webhooks then run in parallel; the first denial (in webhook order) answers.
//! - A denial is upstream's `Status`: `admission webhook "NAME" denied the request: MESSAGE`
//!   with the answer's code (400 when it gives none below 400). A webhook that cannot be
//!   called fails the write with upstream's 500 `failed calling webhook "NAME": …` under
//!   `failurePolicy: Fail`, and is skipped under `Ignore`.
//! - A dry run never calls a webhook whose `sideEffects` is not `None`/`NoneOnDryRun`: the
//!   request is refused with upstream's `admission webhook "NAME" does not support dry run`.
//! - ValidatingAdmissionPolicies run in the validating step, before the validating webhooks
//!   (upstream's plugin order); a denial by one means no validating webhook is called.
//! - Configuration changes (webhook configurations, policies and bindings alike) take effect
//!   on the next request: a write of a configuration
//!   through this replica invalidates the cached set before it is acknowledged, and writes
//!   through other replicas invalidate it when their watch event arrives.
//! - Webhooks are never called for the admission configuration kinds themselves.
//! - A webhook matched through `matchPolicy: Equivalent` to another version of a custom
//!   resource whose CRD has a conversion webhook is sent the objects converted by it, and a
//!   patched object converted back ([`crate::crd::conversion`]); a failed conversion fails the
//!   request with upstream's internal error, whatever the `failurePolicy`.
//! - A webhook's `matchConditions` (CEL) are parsed once per configuration read and decide,
//!   after its rules and selectors, whether it is called; one that fails to evaluate follows
//!   the webhook's `failurePolicy` as upstream's do ([`match_conditions`]).
//! - A webhook's `auditAnnotations` reach the request's audit event as `<webhook>/<key>`
//!   ([`audit_annotations`]).
//!
//! # Assumptions
//! - Configurations passed validation ([`config`]); a malformed one that is somehow stored
//!   is skipped with a log line rather than blocking every write.
//! - The registry runs its own validation after mutation, so a webhook's patch cannot store
//!   what a client could not; identity and deletion metadata are restored from the request.
//!
//! # Caveats
//! - `matchConditions` are evaluated without the `authorizer` variable and without static type
//!   checking ([`match_conditions`] lists how they differ from upstream).
//! - Mutating webhooks on DELETE are called but their patches are refused (no object), as
//!   upstream refuses them.
//! - Warnings of a request that is then denied are not sent (the error carries none).
//! - Only `admissionReviewVersions` `v1` is spoken; a webhook without it is a call failure.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use finale_store::{RangeRequest, Store, prefix_range};
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::resources::{Catalog, ResourceType};
use crate::status::{ApiError, ApiResult};
use crate::webhook_client;

pub mod audit_annotations;
pub mod config;
mod dispatch;
pub mod match_conditions;
pub mod matching;
pub mod metrics;
pub mod policy;
pub mod refusals;

pub use config::{default_mutating, default_validating, validate_mutating, validate_validating};
pub use metrics::WebhookMetrics;
pub use policy::{default_binding, default_policy, validate_binding, validate_policy};

use config::{Hook, HookType};

/// Where the two configuration kinds are stored.
const MUTATING_PREFIX: &str =
    "/registry/admissionregistration.k8s.io/mutatingwebhookconfigurations/";
const VALIDATING_PREFIX: &str =
    "/registry/admissionregistration.k8s.io/validatingwebhookconfigurations/";

/// The admission operation of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
    Delete,
    Connect,
}

impl Operation {
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
        }
    }

    /// The kind of the `options` an `AdmissionRequest` carries.
    fn options_kind(self) -> &'static str {
        match self {
            Operation::Create => "CreateOptions",
            Operation::Update => "UpdateOptions",
            Operation::Delete => "DeleteOptions",
            Operation::Connect => "ConnectOptions",
        }
    }
}

/// What admission knows of one request (upstream's `admission.Attributes`).
#[derive(Clone, Copy, Debug)]
pub struct Attributes<'a> {
    pub resource: &'a ResourceType,
    /// `status`, `scale`…; None for the main resource.
    pub subresource: Option<&'a str>,
    pub operation: Operation,
    /// The request's namespace; for a Namespace, its own name (as upstream).
    pub namespace: Option<&'a str>,
    /// Empty on a create whose name is still to be generated.
    pub name: &'a str,
    pub object: Option<&'a Value>,
    pub old_object: Option<&'a Value>,
    pub dry_run: bool,
    /// `CreateOptions`/`UpdateOptions`/`DeleteOptions` as the request gave them.
    pub options: &'a Value,
    /// The `UserInfo` of the request.
    pub user: &'a Value,
    /// The kind the objects are sent as when it is not the resource's own: `autoscaling/v1`
    /// `Scale` for the `scale` subresource, as upstream sends it.
    pub kind_override: Option<(&'static str, &'static str, &'static str)>,
}

/// Every compiled hook, as of one read of the configurations.
#[derive(Debug, Default)]
struct Snapshot {
    epoch: u64,
    mutating: Vec<Hook>,
    validating: Vec<Hook>,
    /// ValidatingAdmissionPolicies with their bindings ([`policy`]).
    policies: Vec<policy::PolicyHook>,
}

/// The admission webhooks of one server: the cached configurations, the HTTPS clients and
/// the metrics. Shared by every clone of the registry.
pub struct Webhooks {
    store: Arc<dyn Store>,
    catalog: Arc<Catalog>,
    /// Bumped by every change of a configuration; a snapshot of an older epoch is reloaded.
    epoch: AtomicU64,
    snapshot: RwLock<Option<Arc<Snapshot>>>,
    clients: Arc<webhook_client::Clients>,
    /// CRD conversion webhooks, for custom objects sent in another version than requested.
    converter: Arc<crate::crd::conversion::Converter>,
    metrics: Arc<WebhookMetrics>,
    /// Compiled policies and bindings, reused across reloads while unchanged.
    policy_cache: std::sync::Mutex<policy::CompileCache>,
}

impl std::fmt::Debug for Webhooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhooks")
            .field("epoch", &self.epoch.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Webhooks {
    pub fn new(store: Arc<dyn Store>, catalog: Arc<Catalog>) -> Self {
        let clients = Arc::new(webhook_client::Clients::default());
        let converter = Arc::new(crate::crd::conversion::Converter::new(
            Arc::clone(&store),
            Arc::clone(&clients),
        ));
        Webhooks {
            store,
            catalog,
            epoch: AtomicU64::new(1),
            snapshot: RwLock::new(None),
            clients,
            converter,
            metrics: Arc::new(WebhookMetrics::default()),
            policy_cache: std::sync::Mutex::default(),
        }
    }

    pub fn metrics(&self) -> &Arc<WebhookMetrics> {
        &self.metrics
    }

    /// The HTTPS clients.
    pub fn clients(&self) -> &Arc<webhook_client::Clients> {
        &self.clients
    }

    /// The CRD conversion webhooks' converter, shared with the registry (one client cache,
    /// one metric).
    pub fn converter(&self) -> &Arc<crate::crd::conversion::Converter> {
        &self.converter
    }

    /// Whether a store key holds a webhook configuration, an admission policy or a binding.
    pub fn is_configuration_key(key: &str) -> bool {
        [
            MUTATING_PREFIX,
            VALIDATING_PREFIX,
            policy::POLICY_PREFIX,
            policy::BINDING_PREFIX,
        ]
        .iter()
        .any(|prefix| key.starts_with(prefix))
    }

    /// Forgets the cached configurations: the next request reads them again.
    pub fn invalidate(&self) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
    }

    /// Follows the committed changes (this replica's and, on etcd, every other's) and
    /// invalidates the cache when a configuration changes, until `shutdown`.
    pub fn spawn_invalidation(
        self: &Arc<Self>,
        mut changes: crate::watch_cache::ChangeReceiver,
        shutdown: CancellationToken,
    ) -> tokio::task::JoinHandle<()> {
        let webhooks = Arc::clone(self);
        tokio::spawn(async move {
            loop {
                let next = tokio::select! {
                    _ = shutdown.cancelled() => return,
                    next = changes.recv() => next,
                };
                match next {
                    Ok(event) if Self::is_configuration_key(&event.key) => webhooks.invalidate(),
                    Ok(_) => {}
                    // Missed events may have been configuration changes.
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        webhooks.invalidate()
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                }
            }
        })
    }

    /// The configurations as of now: the cached snapshot while no change happened since it
    /// was read, else a fresh read.
    async fn snapshot(&self) -> ApiResult<Arc<Snapshot>> {
        let epoch = self.epoch.load(Ordering::Acquire);
        if let Some(snapshot) = self
            .snapshot
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .as_ref()
            .filter(|s| s.epoch == epoch)
        {
            return Ok(Arc::clone(snapshot));
        }
        let mut mutating = self.load(MUTATING_PREFIX, HookType::Mutating).await?;
        let validating = self.load(VALIDATING_PREFIX, HookType::Validating).await?;
        let policies = self.load_policies().await?;
        // Upstream sorts mutating webhooks by configuration name, then position.
        mutating.sort_by(|a, b| (&a.configuration, a.index).cmp(&(&b.configuration, b.index)));
        let snapshot = Arc::new(Snapshot {
            epoch,
            mutating,
            validating,
            policies,
        });
        let mut slot = self
            .snapshot
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if slot.as_ref().is_none_or(|s| s.epoch <= epoch) {
            *slot = Some(Arc::clone(&snapshot));
        }
        Ok(snapshot)
    }

    async fn load(&self, prefix: &str, hook_type: HookType) -> ApiResult<Vec<Hook>> {
        let response = self
            .store
            .range(RangeRequest {
                range: prefix_range(prefix.as_bytes()),
                limit: 0,
                revision: 0,
            })
            .await?;
        let mut hooks = Vec::new();
        for kv in &response.kvs {
            match serde_json::from_slice::<Value>(&kv.value) {
                Ok(configuration) => {
                    hooks.extend(config::compile(hook_type, &configuration));
                }
                Err(error) => tracing::warn!(
                    key = %String::from_utf8_lossy(&kv.key),
                    %error,
                    "skipping a webhook configuration that is not valid JSON"
                ),
            }
        }
        Ok(hooks)
    }

    /// Whether any webhook could apply to writes of `resource` (a cheap pre-check, so that a
    /// write with no configurations in the cluster pays one atomic load and a lock read).
    pub async fn any_for(&self, resource: &ResourceType) -> ApiResult<bool> {
        if matching::is_exempt(resource) {
            return Ok(false);
        }
        let snapshot = self.snapshot().await?;
        Ok(!snapshot.mutating.is_empty()
            || !snapshot.validating.is_empty()
            || !snapshot.policies.is_empty())
    }

    /// The labels of namespace `name`, read from the store; a missing namespace is upstream's
    /// NotFound.
    async fn namespace_labels(&self, name: &str) -> ApiResult<Map<String, Value>> {
        let key = format!("/registry/core/namespaces/{name}");
        let (kv, _) = self.store.get(key.as_bytes()).await?;
        let kv = kv.ok_or_else(|| ApiError::namespace_not_found(name))?;
        let namespace: Value = serde_json::from_slice(&kv.value)
            .map_err(|e| ApiError::internal(format!("stored namespace {name} is not JSON: {e}")))?;
        Ok(crate::object::labels(&namespace)
            .cloned()
            .unwrap_or_default())
    }

    /// Where a hook's calls go: its URL, or its Service resolved to an endpoint address.
    async fn target(
        &self,
        hook: &Hook,
    ) -> Result<webhook_client::Target, webhook_client::CallError> {
        webhook_client::target(
            self.store.as_ref(),
            &hook.endpoint,
            hook.timeout,
            webhook_client::Review::Admission,
        )
        .await
    }
}

/// The `UserInfo` of a request: who the registry was told makes it. Writes that name no one
/// (the server's own bootstrap) are `system:apiserver` in `system:masters`, as upstream's
/// loopback client is.
pub fn user_info(actor: Option<&crate::registry::Actor>) -> Value {
    let Some(actor) = actor else {
        return serde_json::json!({
            "username": crate::registry::provenance::IN_PROCESS_USER,
            "uid": "",
            "groups": ["system:masters"],
        });
    };
    let mut groups = actor.groups.clone();
    // An in-process controller acts as its ServiceAccount, whose groups upstream's token
    // authenticator would have given it.
    if groups.is_empty()
        && let Some(rest) = actor.user.strip_prefix("system:serviceaccount:")
        && let Some((namespace, _)) = rest.split_once(':')
    {
        groups = vec![
            "system:serviceaccounts".to_string(),
            format!("system:serviceaccounts:{namespace}"),
            "system:authenticated".to_string(),
        ];
    }
    let mut info = serde_json::json!({"username": actor.user, "groups": groups});
    if !actor.uid.is_empty() {
        info["uid"] = Value::from(actor.uid.clone());
    }
    if !actor.extra.is_empty() {
        info["extra"] = serde_json::json!(actor.extra);
    }
    info
}
