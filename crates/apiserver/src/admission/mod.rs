//! Admission webhooks: the `MutatingWebhookConfiguration`s and
//! `ValidatingWebhookConfiguration`s of `admissionregistration.k8s.io/v1`, called for real;
//! and `ValidatingAdmissionPolicy`s with their bindings, evaluated in process ([`policy`]).
//!
//! The registry calls [`Webhooks::mutate`] and [`Webhooks::validate`] from its admission
//! step, so every write goes through them: HTTP requests and the in-process controllers
//! alike, as upstream's controllers are API clients whose writes pass admission. A call is an
//! `admission.k8s.io/v1` `AdmissionReview` POSTed over HTTPS to `clientConfig.url`, or to a
//! Service reference resolved through its Endpoints or EndpointSlices (Finale has no cluster
//! network to reach a Service's cluster IP), with TLS verifying `<service>.<namespace>.svc`.
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
//! - A webhook's `matchConditions` (CEL) are parsed once per configuration read and decide,
//!   after its rules and selectors, whether it is called; one that fails to evaluate follows
//!   the webhook's `failurePolicy` as upstream's do ([`match_conditions`]).
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

mod client;
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

use config::{Endpoint, Hook, HookType};

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
    clients: client::Clients,
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
        Webhooks {
            store,
            catalog,
            epoch: AtomicU64::new(1),
            snapshot: RwLock::new(None),
            clients: client::Clients::default(),
            metrics: Arc::new(WebhookMetrics::default()),
            policy_cache: std::sync::Mutex::default(),
        }
    }

    pub fn metrics(&self) -> &Arc<WebhookMetrics> {
        &self.metrics
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
    async fn target(&self, hook: &Hook) -> Result<client::Target, client::CallError> {
        match &hook.endpoint {
            Endpoint::Url(url) => Ok(client::Target {
                url: url.clone(),
                shown_url: url.clone(),
                connect_to: None,
            }),
            Endpoint::Service {
                namespace,
                name,
                port,
                path,
            } => {
                let host = format!("{name}.{namespace}.svc");
                let shown_url = format!("https://{host}:{port}{path}");
                let failed = |why: String| {
                    client::CallError(format!(
                        "failed to call webhook: Post \"{shown_url}?timeout={}s\": {why}",
                        hook.timeout.as_secs()
                    ))
                };
                let address = self
                    .resolve_service(namespace, name, *port)
                    .await
                    .map_err(failed)?;
                Ok(client::Target {
                    url: format!("https://{host}:{}{path}", address.port()),
                    shown_url,
                    connect_to: Some((host, address)),
                })
            }
        }
    }

    /// A Service's port to one ready endpoint address, as kube-apiserver's endpoint routing
    /// does: the Service port named by the webhook, its target port, and the first ready
    /// address of the Endpoints object (or, failing that, of an EndpointSlice).
    async fn resolve_service(
        &self,
        namespace: &str,
        name: &str,
        port: u16,
    ) -> Result<std::net::SocketAddr, String> {
        let read = |key: String| async move {
            match self.store.get(key.as_bytes()).await {
                Ok((Some(kv), _)) => serde_json::from_slice::<Value>(&kv.value).ok(),
                _ => None,
            }
        };
        let service = read(format!("/registry/core/services/{namespace}/{name}"))
            .await
            .ok_or_else(|| format!("service \"{name}\" not found"))?;
        let service_port = service
            .pointer("/spec/ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|p| p.get("port").and_then(Value::as_u64) == Some(u64::from(port)))
            .ok_or_else(|| format!("no service port {port} found for service \"{name}\""))?;
        let port_name = service_port
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if service.pointer("/spec/type").and_then(Value::as_str) == Some("ExternalName") {
            let external = service
                .pointer("/spec/externalName")
                .and_then(Value::as_str)
                .unwrap_or_default();
            return tokio::net::lookup_host((external, port))
                .await
                .ok()
                .and_then(|mut addresses| addresses.next())
                .ok_or_else(|| format!("cannot resolve externalName {external:?}"));
        }
        if let Some(endpoints) = read(format!("/registry/core/endpoints/{namespace}/{name}")).await
        {
            for subset in endpoints
                .get("subsets")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let endpoint_port = subset
                    .get("ports")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .find(|p| {
                        p.get("name").and_then(Value::as_str).unwrap_or_default() == port_name
                    })
                    .and_then(|p| p.get("port").and_then(Value::as_u64))
                    .and_then(|p| u16::try_from(p).ok());
                let ip = subset
                    .get("addresses")
                    .and_then(Value::as_array)
                    .and_then(|a| a.first())
                    .and_then(|a| a.get("ip").and_then(Value::as_str))
                    .and_then(|ip| ip.parse::<std::net::IpAddr>().ok());
                if let (Some(ip), Some(endpoint_port)) = (ip, endpoint_port) {
                    return Ok(std::net::SocketAddr::new(ip, endpoint_port));
                }
            }
        }
        let slices = self
            .store
            .range(RangeRequest {
                range: prefix_range(
                    format!("/registry/discovery.k8s.io/endpointslices/{namespace}/").as_bytes(),
                ),
                limit: 0,
                revision: 0,
            })
            .await
            .map_err(|e| format!("cannot read endpoint slices: {e}"))?;
        for kv in &slices.kvs {
            let Ok(slice) = serde_json::from_slice::<Value>(&kv.value) else {
                continue;
            };
            if slice
                .pointer("/metadata/labels/kubernetes.io~1service-name")
                .and_then(Value::as_str)
                != Some(name)
            {
                continue;
            }
            let endpoint_port = slice
                .get("ports")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .find(|p| p.get("name").and_then(Value::as_str).unwrap_or_default() == port_name)
                .and_then(|p| p.get("port").and_then(Value::as_u64))
                .and_then(|p| u16::try_from(p).ok());
            let ip = slice
                .get("endpoints")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter(|e| e.pointer("/conditions/ready").and_then(Value::as_bool) != Some(false))
                .flat_map(|e| {
                    e.get("addresses")
                        .and_then(Value::as_array)
                        .cloned()
                        .unwrap_or_default()
                })
                .find_map(|a| {
                    a.as_str()
                        .and_then(|ip| ip.parse::<std::net::IpAddr>().ok())
                });
            if let (Some(ip), Some(endpoint_port)) = (ip, endpoint_port) {
                return Ok(std::net::SocketAddr::new(ip, endpoint_port));
            }
        }
        Err(format!("no endpoints available for service \"{name}\""))
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
