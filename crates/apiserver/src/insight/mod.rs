//! Deletion insight: the built-in API group `deletion.finale.dev/v1alpha1`.
//!
//! - `FinalizerClaim` (cluster-scoped, stored, every verb): a controller declares the
//!   finalizers it removes and the Lease that shows it is alive ([`claims`]).
//! - `DeletionReview` (cluster-scoped, create-only, like `SubjectAccessReview`): POST a
//!   target and get it back with `status` filled in — why the object is not gone yet
//!   ([`review`]), or what a DELETE of it would do (`mode: Plan`, [`plan`]). Nothing is
//!   stored; every other verb is 405.
//! - `FinalizerRemoval` (cluster-scoped, create and read only): forces a finalizer off an
//!   object whose owner cannot remove it, after re-checking the evidence, and keeps the
//!   record ([`removal`]).
//! - `OwnershipReview` (cluster-scoped, create-only): the ownership tree of one object, down
//!   through the collector's owner → dependents index or up through its owner references
//!   ([`tree`]).
//!
//! `--runtime-config deletion.finale.dev/v1alpha1=false` switches the whole group off
//! ([`runtime_config`]). The answering code runs over a [`Snapshot`] and a [`GcView`], which
//! the CLI can also build from a copy of a cluster ([`explain_at`], [`tree::tree_at`]).
//!
//! Both are served from the catalog like any built-in kind, so discovery (legacy and
//! aggregated), the OpenAPI stub, kubectl and kube-rs see them without special cases. The
//! wire types are in [`api`].
//!
//! # Guarantees
//! - A review's answer is computed from one store revision, reported as
//!   `status.resourceVersion`, plus the garbage collector's live queues and graph.
//! - Bad input gets a 422 `Status` naming the field (a `propagationPolicy` outside Plan mode
//!   included).
//!
//! - A review with a `scope` instead of a target lists every stuck object in a namespace or
//!   the cluster (`finale explain --stuck`), from the [`terminating`] index.
//! - A `FinalizerClaim`'s `status` is computed on GET and LIST ([`figures`]), and so are the
//!   `finale_*` deletion metrics; both from the [`terminating`] index, never a store scan.
//!
//! # Caveats
//! - Claim status is not computed for watch events (they carry the stored object).

pub mod api;
pub mod claims;
pub mod figures;
pub mod plan;
mod pod_agent;
mod reached;
pub mod removal;
pub mod review;
pub mod runtime_config;
pub mod snapshot;
pub mod terminating;
pub mod tree;
pub mod visibility;

use std::sync::Arc;

use serde_json::{Value, json};

pub use api::{API_VERSION, GROUP, VERSION};

use crate::controllers::gc::GcView;
use crate::controllers::leadership::{LEASE_NAME, LEASE_NAMESPACE, LeaderFlag};
use crate::crd::schema::StructuralSchema;
use crate::field_validation::{self, FieldValidation};
use crate::object;
use crate::registry::Registry;
use crate::resources::ResourceType;
use crate::status::{ApiError, ApiResult};
use crate::validation::FieldError;
use api::{CauseState, DeletionReviewSpec, DeletionReviewStatus, ReviewMode, ReviewScope, Verdict};
use snapshot::Snapshot;

/// The largest `spec.maxNodes` a review may ask for.
pub const MAX_NODES_LIMIT: u32 = 10_000;

/// The structural schema of `DeletionReview`'s request part.
fn review_schema() -> Value {
    json!({
        "type": "object",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": {
                "type": "object",
                "properties": {
                    "target": {
                        "type": "object",
                        "required": ["apiVersion", "name"],
                        "properties": {
                            "apiVersion": {"type": "string", "minLength": 1},
                            "kind": {"type": "string"},
                            "resource": {"type": "string"},
                            "namespace": {"type": "string"},
                            "name": {"type": "string", "minLength": 1},
                            "uid": {"type": "string"}
                        }
                    },
                    "scope": {
                        "type": "object",
                        "properties": {
                            "namespace": {"type": "string"}
                        }
                    },
                    "mode": {"type": "string", "enum": ["Explain", "Plan"], "default": "Explain"},
                    "propagationPolicy": {
                        "type": "string",
                        "enum": ["Background", "Foreground", "Orphan"]
                    },
                    "maxNodes": {
                        "type": "integer",
                        "format": "int32",
                        "minimum": 1,
                        "maximum": MAX_NODES_LIMIT,
                        "default": api::DEFAULT_MAX_NODES
                    }
                }
            },
            // Answers only; whatever a client sends here is replaced.
            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
        }
    })
}

fn compiled(schema: &Value, what: &str) -> Arc<StructuralSchema> {
    match StructuralSchema::compile(schema, "schema") {
        Ok(schema) => Arc::new(schema),
        // A compile-time constant: a failure here is a bug caught by the unit tests.
        Err(errors) => panic!("the built-in {what} schema does not compile: {errors:?}"),
    }
}

/// A resource type of this group: cluster-scoped, with a structural schema.
fn resource_type(kind: &str, plural: &str, schema: Value) -> ResourceType {
    let mut resource = ResourceType::builtin(GROUP, VERSION, kind, plural, false);
    resource.tracks_generation = true;
    resource.schema = Some(compiled(&schema, kind));
    resource
}

/// The group's served types, for the catalog.
pub fn resource_types() -> Vec<ResourceType> {
    let mut claim = resource_type("FinalizerClaim", "finalizerclaims", claims::schema());
    claim.validation = Some(claims::validate);
    let mut review = resource_type("DeletionReview", "deletionreviews", review_schema());
    review.create_only = true;
    review.tracks_generation = false;
    let mut removal = resource_type(removal::KIND, removal::PLURAL, removal::schema());
    removal.tracks_generation = false;
    let mut tree = resource_type(tree::KIND, tree::PLURAL, tree::schema());
    tree.create_only = true;
    tree.tracks_generation = false;
    vec![claim, review, removal, tree]
}

/// A review's answer and the `Warning`s for the client.
pub struct Answer {
    pub object: Value,
    pub warnings: Vec<String>,
}

/// What answers reviews: the registry (for the store and the catalog) and the garbage
/// collector's view.
pub struct Insight {
    registry: Arc<Registry>,
    gc: GcView,
    index: Arc<terminating::TerminatingIndex>,
    /// Whether this replica holds the controllers' Lease (None: not known, single server).
    leader: Option<LeaderFlag>,
    /// Where plans are counted (`finale_deletion_plans_total`).
    metrics: Option<Arc<crate::metrics::Metrics>>,
}

impl Insight {
    pub fn new(
        registry: Arc<Registry>,
        gc: GcView,
        index: Arc<terminating::TerminatingIndex>,
    ) -> Self {
        Insight {
            registry,
            gc,
            index,
            leader: None,
            metrics: None,
        }
    }

    /// Counts plans in `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<crate::metrics::Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Reviews on a replica that does not hold the controllers' Lease read the ownership index
    /// from the store instead of this replica's idle collector (see [`Insight::gc_view`]).
    pub fn with_leadership(mut self, leader: LeaderFlag) -> Self {
        self.leader = Some(leader);
        self
    }

    /// The collector view a review at `snapshot` reads: this replica's collector when it runs;
    /// on a standby replica while another holds the controllers' Lease, the ownership index of
    /// the snapshot's objects, naming the replica whose collector does the work
    /// ([`GcView::on_another_replica`]); else this replica's idle view, which says that no
    /// collector runs.
    async fn gc_view(&self, snapshot: &Snapshot) -> ApiResult<GcView> {
        let standby = self.leader.as_ref().is_some_and(|flag| !flag.is_leader());
        if self.gc.running() || !standby {
            return Ok(self.gc.clone());
        }
        let catalog = self.registry.catalog();
        let Some(leases) = catalog.lookup("coordination.k8s.io", "v1", "leases") else {
            return Ok(self.gc.clone());
        };
        let holder = snapshot
            .get(&leases, Some(LEASE_NAMESPACE), LEASE_NAME)
            .await?
            .and_then(|lease| {
                lease
                    .pointer("/spec/holderIdentity")
                    .and_then(Value::as_str)
                    .filter(|holder| !holder.is_empty())
                    .map(str::to_string)
            });
        let Some(holder) = holder else {
            return Ok(self.gc.clone());
        };
        let mut objects = Vec::new();
        for resource in crate::controllers::gc::tracked_types_of(catalog) {
            objects.extend(snapshot.list_trimmed(&resource, None).await?);
        }
        // Freed off the request path: a large copy takes a while to drop.
        let view = GcView::on_another_replica(objects.iter(), holder);
        tokio::task::spawn_blocking(move || drop(objects));
        Ok(view)
    }

    /// The deletion figures for `/metrics`, from the terminating index.
    pub async fn figures(&self) -> ApiResult<figures::Figures> {
        figures::figures(&self.registry, &self.index).await
    }

    /// Fills in the computed `status` of a `FinalizerClaim` (or of each item of a list of
    /// them) as read from the registry.
    pub async fn with_claim_status(&self, object: &mut Value) -> ApiResult<()> {
        if let Some(items) = object.get_mut("items").and_then(Value::as_array_mut) {
            for item in items {
                figures::claim_status(&self.registry, &self.index, item).await?;
            }
            return Ok(());
        }
        figures::claim_status(&self.registry, &self.index, object).await
    }

    /// POST of a `DeletionReview`: validates it, answers it, stores nothing. With a
    /// `viewer`, the answer shows only what they may `get` ([`visibility`]).
    pub async fn review(
        &self,
        resource: &ResourceType,
        mut object: Value,
        field_validation: FieldValidation,
        viewer: Option<&visibility::Viewer>,
    ) -> ApiResult<Answer> {
        let (schema, warnings) = admit_body(resource, &mut object, field_validation)?;
        schema.apply_defaults(&mut object);
        if tree::is_tree(resource) {
            return self.tree(resource, schema, object, warnings, viewer).await;
        }
        let name = object::name(&object).to_string();
        let mut errors = schema.validate(&object);
        let has_target = object.pointer("/spec/target").is_some();
        let scoped = object.pointer("/spec/scope").is_some();
        match (has_target, scoped) {
            (true, true) => errors.push(FieldError::invalid(
                "spec.scope",
                "set",
                "give either a target (one object) or a scope (list the stuck objects in it), not both",
            )),
            (false, false) => errors.push(FieldError::required(
                "spec.target",
                "give the object to review (or spec.scope to list every stuck object in a namespace or the cluster)",
            )),
            _ => {}
        }
        let target_type = if errors.is_empty() && has_target {
            self.check_target(&object, &mut errors)
        } else {
            None
        };
        let invalid =
            |errors: &[FieldError]| ApiError::invalid(&resource.kind, GROUP, &name, errors);
        if !errors.is_empty() {
            return Err(invalid(&errors));
        }
        let spec: DeletionReviewSpec = object
            .get("spec")
            .cloned()
            .map(serde_json::from_value)
            .transpose()
            .map_err(|e| ApiError::bad_request(format!("spec does not decode: {e}")))?
            .unwrap_or_default();
        if spec.mode == ReviewMode::Explain
            && let Some(policy) = &spec.propagation_policy
        {
            return Err(invalid(&[FieldError::invalid(
                "spec.propagationPolicy",
                policy,
                "applies to mode Plan only (what a DELETE with this policy would do)",
            )]));
        }
        if let (Some(viewer), Some(target_type)) = (viewer, &target_type) {
            viewer.check_target(target_type, &spec.target.namespace, &spec.target.name)?;
        }
        let mut status = match (&spec.scope, target_type) {
            (Some(scope), _) => {
                let max = spec.max_nodes.unwrap_or(api::DEFAULT_MAX_NODES) as usize;
                self.stuck(scope, max).await?
            }
            (None, Some(target_type)) => match spec.mode {
                ReviewMode::Explain => self.explain(&target_type, &spec).await?,
                ReviewMode::Plan => self.plan(target_type, &spec).await?,
            },
            (None, None) => {
                return Err(ApiError::internal(
                    "the review's target type was not resolved",
                ));
            }
        };
        if let Some(viewer) = viewer {
            viewer.hide(self.registry.catalog(), &mut status);
        }
        let status = serde_json::to_value(status)
            .map_err(|e| ApiError::internal(format!("cannot encode the review's status: {e}")))?;
        if let Some(map) = object.as_object_mut() {
            map.insert("apiVersion".into(), json!(API_VERSION));
            map.insert("kind".into(), json!(resource.kind));
            map.entry("metadata").or_insert_with(|| json!({}));
            map.insert("status".into(), status);
        }
        Ok(Answer { object, warnings })
    }

    /// POST of an `OwnershipReview` (admitted and defaulted): validates it and answers it
    /// with the target's ownership tree.
    async fn tree(
        &self,
        resource: &ResourceType,
        schema: &StructuralSchema,
        mut object: Value,
        warnings: Vec<String>,
        viewer: Option<&visibility::Viewer>,
    ) -> ApiResult<Answer> {
        let name = object::name(&object).to_string();
        let mut errors = schema.validate(&object);
        let target_type = if errors.is_empty() {
            self.check_target(&object, &mut errors)
        } else {
            None
        };
        if !errors.is_empty() {
            return Err(ApiError::invalid(&resource.kind, GROUP, &name, &errors));
        }
        let (Some(target_type), Some(spec)) = (target_type, object.get("spec").cloned()) else {
            return Err(ApiError::internal("the review's target was not resolved"));
        };
        let spec: tree::OwnershipReviewSpec = serde_json::from_value(spec)
            .map_err(|e| ApiError::bad_request(format!("spec does not decode: {e}")))?;
        if let Some(viewer) = viewer {
            viewer.check_target(&target_type, &spec.target.namespace, &spec.target.name)?;
        }
        let snapshot = Snapshot::latest(Arc::clone(self.registry.store())).await?;
        let gc = self.gc_view(&snapshot).await?;
        let mut status =
            tree::tree_at(self.registry.catalog(), &snapshot, &gc, &target_type, &spec).await?;
        if let (Some(viewer), Some(root)) = (viewer, status.root.as_mut()) {
            viewer.hide_tree(self.registry.catalog(), root);
        }
        let status = serde_json::to_value(status)
            .map_err(|e| ApiError::internal(format!("cannot encode the review's status: {e}")))?;
        if let Some(map) = object.as_object_mut() {
            map.insert("apiVersion".into(), json!(API_VERSION));
            map.insert("kind".into(), json!(resource.kind));
            map.entry("metadata").or_insert_with(|| json!({}));
            map.insert("status".into(), status);
        }
        Ok(Answer { object, warnings })
    }

    /// The target's served type, or field errors: an unknown type, both or neither of `kind`
    /// and `resource`, a namespace that does not fit the type's scope.
    fn check_target(
        &self,
        object: &Value,
        errors: &mut Vec<FieldError>,
    ) -> Option<Arc<ResourceType>> {
        let text = |field: &str| {
            object
                .pointer(&format!("/spec/target/{field}"))
                .and_then(Value::as_str)
                .unwrap_or_default()
        };
        let (api_version, kind, plural, namespace) = (
            text("apiVersion"),
            text("kind"),
            text("resource"),
            text("namespace"),
        );
        let catalog = self.registry.catalog();
        let found = match (kind.is_empty(), plural.is_empty()) {
            (false, false) => {
                errors.push(FieldError::invalid(
                    "spec.target",
                    format!("kind {kind:?}, resource {plural:?}"),
                    "give either kind or resource, not both",
                ));
                return None;
            }
            (true, true) => {
                errors.push(FieldError::required(
                    "spec.target.kind",
                    "give the target's kind (or its plural resource name in spec.target.resource)",
                ));
                return None;
            }
            (false, true) => catalog.lookup_kind(api_version, kind).ok_or_else(|| {
                FieldError::invalid(
                    "spec.target.kind",
                    kind,
                    &format!("no resource of kind {kind} is served at {api_version}"),
                )
            }),
            (true, false) => {
                let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
                catalog.lookup(group, version, plural).ok_or_else(|| {
                    FieldError::invalid(
                        "spec.target.resource",
                        plural,
                        &format!("no resource {plural} is served at {api_version}"),
                    )
                })
            }
        };
        let target_type = match found {
            Ok(found) if found.create_only => {
                errors.push(FieldError::invalid(
                    "spec.target",
                    found.kind.clone(),
                    "reviews are not stored, so there is nothing to explain",
                ));
                return None;
            }
            Ok(found) => found,
            Err(error) => {
                errors.push(error);
                return None;
            }
        };
        match (target_type.namespaced, namespace.is_empty()) {
            (true, true) => errors.push(FieldError::required(
                "spec.target.namespace",
                &format!("{} is namespaced: give its namespace", target_type.kind),
            )),
            (false, false) => errors.push(FieldError::invalid(
                "spec.target.namespace",
                namespace,
                &format!(
                    "{} is cluster-scoped: leave the namespace empty",
                    target_type.kind
                ),
            )),
            _ => {}
        }
        Some(target_type)
    }

    /// Plan mode, at the store's latest revision.
    async fn plan(
        &self,
        target_type: Arc<ResourceType>,
        spec: &DeletionReviewSpec,
    ) -> ApiResult<DeletionReviewStatus> {
        let snapshot = Snapshot::latest(Arc::clone(self.registry.store())).await?;
        let gc = self.gc_view(&snapshot).await?;
        let answer = plan_at(self.registry.catalog(), &snapshot, &gc, target_type, spec).await?;
        if let (Some(metrics), Some(source)) = (&self.metrics, answer.dependents_read_from) {
            metrics.count_plan(source.label());
        }
        Ok(answer.status)
    }

    /// A scoped review: every stuck object in `scope`, from the terminating index, each
    /// explained at one store revision. Objects are taken in key order (resource, namespace,
    /// name) and listed oldest deletion first; at most `max` are listed.
    async fn stuck(&self, scope: &ReviewScope, max: usize) -> ApiResult<DeletionReviewStatus> {
        let snapshot = Snapshot::latest(Arc::clone(self.registry.store())).await?;
        let gc = self.gc_view(&snapshot).await?;
        let now = chrono::Utc::now();
        let catalog = self.registry.catalog();
        let mut explainer = review::Explainer::new(catalog, &snapshot, &gc, now).await?;
        let mut stuck = Vec::new();
        let mut deleting = 0usize;
        for entry in self.index.all() {
            if !scope.namespace.is_empty() && entry.namespace != scope.namespace {
                continue;
            }
            let Some(resource) = catalog.lookup_resource(&entry.group, &entry.resource) else {
                continue;
            };
            let namespace = Some(entry.namespace.as_str()).filter(|n| !n.is_empty());
            // The index may be a moment behind: the snapshot decides.
            let Some(object) = snapshot.get(&resource, namespace, &entry.name).await? else {
                continue;
            };
            if !object::is_terminating(&object) {
                continue;
            }
            deleting += 1;
            let causes = explainer.explain_object(&resource, &object, 0).await?;
            let Some(leaf) = review::leading_leaf(&causes, CauseState::Stuck) else {
                continue;
            };
            let this = review::object_ref(&resource, &object);
            let about = match &leaf.object {
                Some(o) if o.uid != this.uid => format!("{}: ", o.display()),
                _ => String::new(),
            };
            let first_sentence = leaf.message.split(": ").next().unwrap_or(&leaf.message);
            stuck.push(api::StuckObject {
                object: this,
                verdict: Verdict::Stuck,
                root_cause: format!("{about}{first_sentence}"),
                since: object::meta_str(&object, "deletionTimestamp").map(str::to_string),
            });
        }
        stuck.sort_by(|a, b| (&a.since, &a.object).cmp(&(&b.since, &b.object)));
        let found = stuck.len();
        stuck.truncate(max);
        let place = if scope.namespace.is_empty() {
            "in the cluster".to_string()
        } else {
            format!("in namespace {}", scope.namespace)
        };
        let (verdict, summary) = match (found, deleting) {
            (0, 0) => (
                Verdict::NotDeleting,
                format!("nothing is being deleted {place}"),
            ),
            (0, _) => (
                Verdict::Progressing,
                format!(
                    "{deleting} {} being deleted {place}, and none is stuck",
                    if deleting == 1 {
                        "object is"
                    } else {
                        "objects are"
                    }
                ),
            ),
            _ => {
                let mut summary = format!(
                    "{found} of {deleting} {} being deleted {place} {} stuck",
                    if deleting == 1 { "object" } else { "objects" },
                    if found == 1 { "is" } else { "are" }
                );
                if found > stuck.len() {
                    summary.push_str(&format!(" (the {} oldest are listed)", stuck.len()));
                }
                (Verdict::Stuck, summary)
            }
        };
        Ok(DeletionReviewStatus {
            verdict,
            resource_version: snapshot.revision().to_string(),
            summary,
            causes: Vec::new(),
            stuck,
            plan: None,
            hidden: None,
        })
    }

    /// Explain mode, at the store's latest revision.
    async fn explain(
        &self,
        target_type: &ResourceType,
        spec: &DeletionReviewSpec,
    ) -> ApiResult<DeletionReviewStatus> {
        let snapshot = Snapshot::latest(Arc::clone(self.registry.store())).await?;
        let gc = self.gc_view(&snapshot).await?;
        explain_at(self.registry.catalog(), &snapshot, &gc, target_type, spec).await
    }
}

/// The target at `snapshot`, or the `Gone` answer when it does not exist (or another
/// object of the same name stands in for the uid the caller meant).
async fn read_target(
    snapshot: &Snapshot,
    target_type: &ResourceType,
    spec: &DeletionReviewSpec,
    status: &mut DeletionReviewStatus,
) -> ApiResult<Option<Value>> {
    let target = &spec.target;
    let namespace = Some(target.namespace.as_str()).filter(|n| !n.is_empty());
    let shown = if target.namespace.is_empty() {
        format!("{} {}", target_type.kind, target.name)
    } else {
        format!("{} {}/{}", target_type.kind, target.namespace, target.name)
    };
    let Some(object) = snapshot.get(target_type, namespace, &target.name).await? else {
        status.verdict = Verdict::Gone;
        status.summary = format!("{shown} does not exist: it is gone (or never existed)");
        return Ok(None);
    };
    let uid = object::uid(&object);
    if !target.uid.is_empty() && target.uid != uid {
        status.verdict = Verdict::Gone;
        status.summary = format!(
            "{shown} with uid {} is gone; another object of the same name (uid {uid}) exists now",
            target.uid
        );
        return Ok(None);
    }
    Ok(Some(object))
}

/// A plan's answer, and where its dependents were found (None when the target is gone).
pub struct PlanAnswer {
    pub status: DeletionReviewStatus,
    pub dependents_read_from: Option<plan::DependentsSource>,
}

/// Plan mode over any snapshot and collector view (see [`explain_at`]).
pub async fn plan_at(
    catalog: &crate::resources::Catalog,
    snapshot: &Snapshot,
    gc: &GcView,
    target_type: Arc<ResourceType>,
    spec: &DeletionReviewSpec,
) -> ApiResult<PlanAnswer> {
    let mut status = DeletionReviewStatus {
        resource_version: snapshot.revision().to_string(),
        ..DeletionReviewStatus::default()
    };
    let Some(object) = read_target(snapshot, &target_type, spec, &mut status).await? else {
        return Ok(PlanAnswer {
            status,
            dependents_read_from: None,
        });
    };
    let planner = plan::Planner::new(catalog, snapshot, gc, chrono::Utc::now()).await?;
    let max_nodes = spec.max_nodes.unwrap_or(api::DEFAULT_MAX_NODES) as usize;
    let answer = planner
        .plan(
            target_type,
            object,
            spec.propagation_policy.as_deref(),
            max_nodes,
        )
        .await?;
    status.verdict = if answer.plan.hangs > 0 {
        Verdict::WillHang
    } else {
        Verdict::WillComplete
    };
    status.summary = answer.summary;
    status.causes = answer.causes;
    status.plan = Some(answer.plan);
    Ok(PlanAnswer {
        status,
        dependents_read_from: Some(answer.dependents_read_from),
    })
}

/// Explain mode over any snapshot and collector view: the server's store and live collector,
/// or a copy of a cluster the CLI loaded itself (its client-side fallback), so both answer
/// with the same code.
pub async fn explain_at(
    catalog: &crate::resources::Catalog,
    snapshot: &Snapshot,
    gc: &GcView,
    target_type: &ResourceType,
    spec: &DeletionReviewSpec,
) -> ApiResult<DeletionReviewStatus> {
    {
        let target = &spec.target;
        let shown = if target.namespace.is_empty() {
            format!("{} {}", target_type.kind, target.name)
        } else {
            format!("{} {}/{}", target_type.kind, target.namespace, target.name)
        };
        let mut status = DeletionReviewStatus {
            resource_version: snapshot.revision().to_string(),
            ..DeletionReviewStatus::default()
        };
        let Some(object) = read_target(snapshot, target_type, spec, &mut status).await? else {
            return Ok(status);
        };
        let uid = object::uid(&object);
        if !object::is_terminating(&object) {
            status.verdict = Verdict::NotDeleting;
            status.summary = format!("{shown} exists and is not being deleted");
            return Ok(status);
        }
        let now = chrono::Utc::now();
        let mut explainer = review::Explainer::new(catalog, snapshot, gc, now).await?;
        let mut causes = explainer.explain_object(target_type, &object, 0).await?;
        let stuck = causes.iter().any(|c| c.state == CauseState::Stuck);
        status.verdict = if stuck {
            Verdict::Stuck
        } else {
            Verdict::Progressing
        };
        let wanted = if stuck {
            CauseState::Stuck
        } else {
            CauseState::Progressing
        };
        status.summary = match review::leading_leaf(&causes, wanted) {
            Some(leaf) => {
                let about = match &leaf.object {
                    Some(o) if o.uid != uid => format!("{}: ", o.display()),
                    _ => String::new(),
                };
                let first_sentence = leaf.message.split(": ").next().unwrap_or(&leaf.message);
                let verb = if stuck {
                    "is stuck"
                } else {
                    "is being deleted"
                };
                format!("{shown} {verb}: {about}{first_sentence}")
            }
            None => format!("{shown} is being deleted and nothing holds it: it is about to go"),
        };
        let max_nodes = spec.max_nodes.unwrap_or(api::DEFAULT_MAX_NODES) as usize;
        review::limit_nodes(&mut causes, max_nodes);
        status.causes = causes;
        Ok(status)
    }
}

/// The body's kind and apiVersion, when given, must be this type's.
fn check_type_meta(resource: &ResourceType, object: &Value) -> ApiResult<()> {
    if !object.is_object() {
        return Err(ApiError::bad_request(format!(
            "the request body must be a JSON object (a {})",
            resource.kind
        )));
    }
    if let Some(kind) = object
        .get("kind")
        .and_then(Value::as_str)
        .filter(|k| !k.is_empty() && *k != resource.kind)
    {
        return Err(ApiError::bad_request(format!(
            "the kind in the body ({kind}) does not match the kind of the URL's resource ({})",
            resource.kind
        )));
    }
    if let Some(api_version) = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .filter(|v| !v.is_empty() && *v != API_VERSION)
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({api_version}) does not match the expected API version ({API_VERSION})"
        )));
    }
    Ok(())
}

/// What every request body of this group goes through first, as the registry does for stored
/// kinds: type meta, schema pruning and `fieldValidation` (Strict refuses unknown fields, Warn
/// returns them as warnings). Returns the kind's schema and the warnings to send.
pub(crate) fn admit_body<'a>(
    resource: &'a ResourceType,
    object: &mut Value,
    field_validation: FieldValidation,
) -> ApiResult<(&'a crate::crd::schema::StructuralSchema, Vec<String>)> {
    check_type_meta(resource, object)?;
    let schema = resource
        .schema
        .as_deref()
        .ok_or_else(|| ApiError::internal(format!("{} has no schema", resource.kind)))?;
    let unknown = schema.prune(object);
    let warnings = match field_validation {
        FieldValidation::Strict if !unknown.is_empty() => {
            return Err(ApiError::bad_request(
                field_validation::bad_request_message(
                    &resource.kind,
                    &resource.version,
                    &unknown,
                    &[],
                ),
            ));
        }
        FieldValidation::Warn => field_validation::warnings(&unknown, &[]),
        _ => Vec::new(),
    };
    Ok((schema, warnings))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schemas_compile() {
        let types = resource_types();
        assert_eq!(types.len(), 4);
        assert!(types.iter().all(|t| t.schema.is_some()));
    }
}
