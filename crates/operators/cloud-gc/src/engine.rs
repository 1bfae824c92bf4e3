//! The GC engine: finds a cluster's owned cloud resources, orders them by what blocks what, and
//! deletes them in passes. The operator's cleanup and `finale gc plan|run` share it, so a plan
//! lists exactly what a teardown deletes.
//!
//! # The model
//! 1. **Discovery** ([`discover`]): the Resource Groups Tagging API's `GetResources` with the
//!    tag filter `kubernetes.io/cluster/<name>=owned` and no type filter, every page; then
//!    Describe calls for the ARNs found (the tags decide, again, on what Describe returns),
//!    for Elastic IPs (the tagging API may not index them) and for the ENIs that use an owned
//!    security group (cloud-managed ENIs carry no tag). [`Discovery::Describe`] uses Describe
//!    calls only, for accounts that cannot reach the tagging API.
//! 2. **The graph** ([`Inventory::blockers`]): a load balancer goes before its security groups
//!    and the target groups its listeners use; an ENI before its security groups; an Elastic IP
//!    is disassociated before its ENI goes, and before it is released.
//! 3. **Passes** ([`teardown`]): each pass deletes, with bounded concurrency and the account's
//!    rate limit, every resource nothing blocks; at the start of the pass, those resources are
//!    described again, in one batch per kind (a load balancer's fresh state costs one page and
//!    a tags call per 20, not two calls each), and each delete acts on that fresh state.
//!    Not-found is done; "in use" (`DependencyViolation`, `ResourceInUse`, …) is *blocked*,
//!    retried next pass; other errors are failures, retried with backoff by the caller. Passes
//!    go on over what the discovery found, less what they deleted, while they make progress;
//!    once nothing found is left, a fresh discovery decides: done, or another round of passes
//!    for what appeared meanwhile.
//!
//! # Guarantees
//! - Nothing is deleted unless its tags, as described again at the start of the pass that
//!   deletes it, carry `kubernetes.io/cluster/<name>=owned` (or, when enabled,
//!   `elbv2.k8s.aws/cluster=<name>`); `shared` is never owned. The one exception is an ENI with no cluster tag at all that is
//!   detached and uses only owned security groups: the cloud created it for an owned resource.
//! - Never deleted: default security groups, resources tagged `aws:eks:*`, volumes unless the
//!   `volume` task is on, and any volume or ENI that is attached.
//! - Before a security group is deleted, the rules of the *other owned* groups that reference
//!   it are revoked; groups that are not owned are never modified.
//! - [`teardown`] reports complete only when a discovery finds nothing left to collect.
//!
//! # Caveats
//! - Ownership is only as good as the tags: a resource someone tagged `owned` by mistake is
//!   collected. `finale gc plan` shows the list first.
//! - Resources owned but outside the tasks (a load balancer with `load-balancer` off) are kept,
//!   and whatever they block stays blocked, with a status that says so.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use finale_operator::backoff::RateLimits;
use futures::StreamExt;

use crate::annotations::{Task, TaskSet};
use crate::cloud::{Action, CloudApi, CloudError, ErrorClass, Kind, Query, Resource};

/// The tag prefix whose `<prefix><cluster>=owned` marks ownership.
pub const CLUSTER_TAG_PREFIX: &str = "kubernetes.io/cluster/";
/// The AWS Load Balancer Controller's cluster tag (value: the cluster name).
pub const LOAD_BALANCER_CONTROLLER_TAG: &str = "elbv2.k8s.aws/cluster";
/// Tags with this prefix mark resources EKS manages.
pub const EKS_TAG_PREFIX: &str = "aws:eks:";

/// How resources are found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Discovery {
    /// The tagging API, plus Describe for what it misses.
    #[default]
    Tagging,
    /// Describe calls with tag filters only.
    Describe,
}

impl std::str::FromStr for Discovery {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "tagging" => Ok(Discovery::Tagging),
            "describe" => Ok(Discovery::Describe),
            other => Err(format!(
                "unknown discovery mode {other:?}: use \"tagging\" or \"describe\""
            )),
        }
    }
}

/// Whose resources, and which kinds, to collect.
#[derive(Clone, Debug)]
pub struct Scope {
    pub cluster_name: String,
    pub tasks: TaskSet,
    /// Also own what carries `elbv2.k8s.aws/cluster=<cluster>`.
    pub load_balancer_controller_tag: bool,
    pub discovery: Discovery,
}

impl Scope {
    pub fn owned_tag(&self) -> String {
        format!("{CLUSTER_TAG_PREFIX}{}", self.cluster_name)
    }

    /// Why `resource` is not owned, or `None` when it is.
    pub fn not_owned(&self, resource: &Resource) -> Option<String> {
        let tag = self.owned_tag();
        let by_cluster_tag = resource.tags.get(&tag).map(String::as_str);
        let by_controller_tag = self.load_balancer_controller_tag
            && resource
                .tags
                .get(LOAD_BALANCER_CONTROLLER_TAG)
                .is_some_and(|v| *v == self.cluster_name);
        match by_cluster_tag {
            Some("owned") => None,
            Some(other) if !by_controller_tag => Some(format!("tagged {tag}={other}")),
            _ if by_controller_tag => None,
            _ => Some(format!("not tagged {tag}=owned")),
        }
    }

    /// Why an owned `resource` must be kept, or `None` when it may be collected.
    fn keep_reason(&self, resource: &Resource) -> Option<String> {
        if let Some(key) = resource.tags.keys().find(|k| k.starts_with(EKS_TAG_PREFIX)) {
            return Some(format!("managed by EKS (tag {key})"));
        }
        if resource.default_group {
            return Some("the VPC's default security group".into());
        }
        let task = task_of(resource.kind);
        if !self.tasks.contains(task) {
            return Some(format!("task {task} is not enabled"));
        }
        None
    }
}

/// The task that collects `kind`.
pub fn task_of(kind: Kind) -> Task {
    match kind {
        Kind::LoadBalancer | Kind::ClassicLoadBalancer => Task::LoadBalancer,
        Kind::TargetGroup => Task::TargetGroup,
        Kind::SecurityGroup => Task::SecurityGroup,
        Kind::NetworkInterface => Task::NetworkInterface,
        Kind::ElasticIp => Task::ElasticIp,
        Kind::Volume => Task::Volume,
    }
}

/// What discovery decided about one resource.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Disposition {
    /// Owned and collected.
    Collect,
    /// Owned but kept (the reason says why).
    Keep(String),
    /// Not owned, but it uses an owned resource (an attached ENI in an owned group).
    Bystander(String),
}

#[derive(Clone, Debug)]
pub struct Item {
    pub resource: Resource,
    pub disposition: Disposition,
}

/// What blocks a resource.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Blocker {
    /// The blocking resource's label, or what holds it (`attached to i-123`).
    pub label: String,
    /// Whether the engine itself will remove the blocker.
    pub collected: bool,
}

/// Everything discovery found, in a stable order.
#[derive(Clone, Debug, Default)]
pub struct Inventory {
    pub items: Vec<Item>,
}

impl Inventory {
    pub fn collectable(&self) -> impl Iterator<Item = &Item> {
        self.items
            .iter()
            .filter(|i| i.disposition == Disposition::Collect)
    }

    pub fn is_done(&self) -> bool {
        self.collectable().next().is_none()
    }

    /// What must be gone before `resource` can be deleted (the dependency graph's in-edges).
    pub fn blockers(&self, resource: &Resource) -> Vec<Blocker> {
        let mut blockers = Vec::new();
        let mut add = |item: &Item| {
            blockers.push(Blocker {
                label: item.resource.label(),
                collected: item.disposition == Disposition::Collect,
            })
        };
        for item in &self.items {
            let other = &item.resource;
            if other.id == resource.id {
                continue;
            }
            let blocks = match (other.kind, resource.kind) {
                (Kind::LoadBalancer | Kind::ClassicLoadBalancer, Kind::SecurityGroup)
                | (Kind::NetworkInterface, Kind::SecurityGroup) => {
                    other.security_groups.contains(&resource.id)
                }
                (Kind::LoadBalancer, Kind::TargetGroup) => {
                    resource.load_balancers.contains(&other.id)
                }
                (Kind::ElasticIp, Kind::NetworkInterface) => {
                    other.network_interface.as_deref() == Some(resource.id.as_str())
                }
                _ => false,
            };
            if blocks {
                add(item);
            }
        }
        if matches!(resource.kind, Kind::NetworkInterface | Kind::Volume)
            && let Some(holder) = &resource.attached_to
        {
            blockers.push(Blocker {
                label: format!("attached to {holder}"),
                collected: false,
            });
        }
        blockers
    }

    /// The collectable resources in deletion order, each with what blocks it: a topological
    /// order of the graph, ties broken by kind then label. Resources on a cycle or blocked by
    /// something never collected come last.
    pub fn plan(&self) -> Vec<(Resource, Vec<Blocker>)> {
        let mut pending: Vec<(Resource, Vec<Blocker>)> = self
            .collectable()
            .map(|i| (i.resource.clone(), self.blockers(&i.resource)))
            .collect();
        pending.sort_by_key(|a| (a.0.kind.rank(), a.0.label()));
        let mut placed: BTreeSet<String> = BTreeSet::new();
        let mut order = Vec::new();
        loop {
            let (ready, rest): (Vec<_>, Vec<_>) = pending.into_iter().partition(|(_, blockers)| {
                blockers
                    .iter()
                    .all(|b| b.collected && placed.contains(&b.label))
            });
            pending = rest;
            if ready.is_empty() {
                break;
            }
            for (resource, blockers) in ready {
                placed.insert(resource.label());
                order.push((resource, blockers));
            }
        }
        order.extend(pending);
        order
    }
}

/// The kind an ARN names, and the id its delete call takes.
pub fn parse_arn(arn: &str) -> Option<(Kind, String)> {
    let mut parts = arn.splitn(6, ':');
    let (_, _, service, _, _, resource) = (
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
    );
    let (kind, id) = match service {
        "elasticloadbalancing" => {
            if let Some(rest) = resource.strip_prefix("loadbalancer/") {
                if rest.starts_with("app/") || rest.starts_with("net/") || rest.starts_with("gwy/")
                {
                    (Kind::LoadBalancer, arn.to_string())
                } else {
                    (Kind::ClassicLoadBalancer, rest.to_string())
                }
            } else if resource.starts_with("targetgroup/") {
                (Kind::TargetGroup, arn.to_string())
            } else {
                return None;
            }
        }
        "ec2" => {
            let (prefix, id) = resource.split_once('/')?;
            let kind = match prefix {
                "security-group" => Kind::SecurityGroup,
                "network-interface" => Kind::NetworkInterface,
                "elastic-ip" => Kind::ElasticIp,
                "volume" => Kind::Volume,
                _ => return None,
            };
            (kind, id.to_string())
        }
        _ => return None,
    };
    Some((kind, id))
}

/// Finds every resource the scope owns, with what uses it.
pub async fn discover(api: &dyn CloudApi, scope: &Scope) -> Result<Inventory, CloudError> {
    let tag = scope.owned_tag();
    let mut found: BTreeMap<(Kind, String), Resource> = BTreeMap::new();
    let add_all = |resources: Vec<Resource>, found: &mut BTreeMap<(Kind, String), Resource>| {
        for resource in resources {
            found.insert((resource.kind, resource.id.clone()), resource);
        }
    };
    let owned_query = Query::Tagged {
        key: tag.clone(),
        value: "owned".into(),
    };
    let controller_query = Query::Tagged {
        key: LOAD_BALANCER_CONTROLLER_TAG.into(),
        value: scope.cluster_name.clone(),
    };
    match scope.discovery {
        Discovery::Tagging => {
            let mut arns = api.tagged(&tag, "owned").await?;
            if scope.load_balancer_controller_tag {
                arns.extend(
                    api.tagged(LOAD_BALANCER_CONTROLLER_TAG, &scope.cluster_name)
                        .await?,
                );
            }
            let mut by_kind: BTreeMap<Kind, BTreeSet<String>> = BTreeMap::new();
            for arn in &arns {
                if let Some((kind, id)) = parse_arn(arn) {
                    by_kind.entry(kind).or_default().insert(id);
                }
            }
            for (kind, ids) in by_kind {
                let described = api
                    .describe(kind, &Query::Ids(ids.into_iter().collect()))
                    .await?;
                add_all(described, &mut found);
            }
            // The tagging API may not index Elastic IPs (moto does not).
            add_all(
                api.describe(Kind::ElasticIp, &owned_query).await?,
                &mut found,
            );
        }
        Discovery::Describe => {
            for kind in Kind::ALL {
                if kind == Kind::Volume && !scope.tasks.contains(Task::Volume) {
                    continue;
                }
                add_all(api.describe(kind, &owned_query).await?, &mut found);
                if scope.load_balancer_controller_tag
                    && matches!(
                        kind,
                        Kind::LoadBalancer | Kind::TargetGroup | Kind::SecurityGroup
                    )
                {
                    add_all(api.describe(kind, &controller_query).await?, &mut found);
                }
            }
        }
    }
    let mut items: Vec<Item> = Vec::new();
    for resource in found.into_values() {
        // Describe answered, but what it describes decides.
        if scope.not_owned(&resource).is_some() {
            continue;
        }
        let disposition = match scope.keep_reason(&resource) {
            Some(reason) => Disposition::Keep(reason),
            None => Disposition::Collect,
        };
        items.push(Item {
            resource,
            disposition,
        });
    }
    // ENIs in owned security groups: the cloud creates them for owned load balancers without
    // tags. Detached ones whose groups are all owned are collected; the rest block the groups.
    let owned_groups: BTreeSet<String> = items
        .iter()
        .filter(|i| i.resource.kind == Kind::SecurityGroup)
        .map(|i| i.resource.id.clone())
        .collect();
    if !owned_groups.is_empty() {
        let known: BTreeSet<String> = items.iter().map(|i| i.resource.id.clone()).collect();
        let enis = api
            .describe(
                Kind::NetworkInterface,
                &Query::UsingGroups(owned_groups.iter().cloned().collect()),
            )
            .await?;
        for eni in enis {
            if known.contains(&eni.id) {
                continue;
            }
            let untagged = !eni.tags.keys().any(|k| k.starts_with(CLUSTER_TAG_PREFIX));
            let only_owned_groups = eni.security_groups.iter().all(|g| owned_groups.contains(g));
            let disposition = if untagged
                && only_owned_groups
                && eni.attached_to.is_none()
                && scope.tasks.contains(Task::NetworkInterface)
            {
                Disposition::Collect
            } else {
                Disposition::Bystander(match &eni.attached_to {
                    Some(holder) => format!("not owned; attached to {holder}"),
                    None => "not owned".into(),
                })
            };
            items.push(Item {
                resource: eni,
                disposition,
            });
        }
    }
    items.sort_by_key(|item| (item.resource.kind.rank(), item.resource.label()));
    Ok(Inventory { items })
}

/// Where one resource stands after a pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Deleted now, or found gone.
    Deleted,
    /// Waits on others: what blocks it, and the cloud's words if it refused.
    Blocked {
        by: Vec<String>,
        error: Option<String>,
    },
    /// Failed for another reason; retried with backoff.
    Failed(CloudError),
    /// No longer owned when described again; left alone.
    Skipped(String),
}

/// How a teardown runs.
#[derive(Clone, Debug)]
pub struct Options {
    /// Deletes in flight at once.
    pub concurrency: usize,
    /// How long one [`teardown`] call may keep starting passes.
    pub budget: Duration,
    /// The rate-limit key of the account ([`crate::cloud::Target::account_key`]).
    pub account: String,
}

/// What one [`teardown`] call did.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub passes: u32,
    /// Every resource deleted (or found gone) by this call, in order.
    pub deleted: Vec<Resource>,
    /// What is left of the last discovery's inventory: less what the passes since deleted, or
    /// found no longer owned (empty when complete).
    pub inventory: Inventory,
    /// The last pass's outcome for each resource it looked at, by id.
    pub outcomes: HashMap<String, Outcome>,
    /// Every API call made.
    pub calls: u64,
    /// Nothing is left to collect.
    pub complete: bool,
}

impl Report {
    pub fn failures(&self) -> Vec<(&Resource, &CloudError)> {
        self.inventory
            .collectable()
            .filter_map(|i| match self.outcomes.get(&i.resource.id) {
                Some(Outcome::Failed(error)) => Some((&i.resource, error)),
                _ => None,
            })
            .collect()
    }

    pub fn blocked(&self) -> Vec<(&Resource, &[String], Option<&str>)> {
        self.inventory
            .collectable()
            .filter_map(|i| match self.outcomes.get(&i.resource.id) {
                Some(Outcome::Blocked { by, error }) => {
                    Some((&i.resource, by.as_slice(), error.as_deref()))
                }
                _ => None,
            })
            .collect()
    }
}

/// Counts calls on the way to the cloud, and waits for the account's rate limit before each.
struct Metered<'a> {
    api: &'a dyn CloudApi,
    limits: &'a RateLimits,
    account: &'a str,
    calls: AtomicU64,
}

#[async_trait::async_trait]
impl CloudApi for Metered<'_> {
    async fn tagged(&self, key: &str, value: &str) -> Result<Vec<String>, CloudError> {
        self.limits.acquire(self.account).await;
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.api.tagged(key, value).await
    }

    async fn describe(&self, kind: Kind, query: &Query) -> Result<Vec<Resource>, CloudError> {
        self.limits.acquire(self.account).await;
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.api.describe(kind, query).await
    }

    async fn act(&self, action: &Action) -> Result<(), CloudError> {
        self.limits.acquire(self.account).await;
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.api.act(action).await
    }
}

/// Discovery alone, under the account's rate limit: what a teardown would find now.
pub async fn inventory(
    api: &dyn CloudApi,
    scope: &Scope,
    limits: &RateLimits,
    account: &str,
) -> Result<Inventory, CloudError> {
    let metered = Metered {
        api,
        limits,
        account,
        calls: AtomicU64::new(0),
    };
    discover(&metered, scope).await
}

/// Discovers, then deletes in passes until nothing is left, a pass makes no progress, or the
/// budget is spent. A discovery failure is returned as the error (nothing is known, so nothing
/// is deleted); per-resource failures are in the report.
pub async fn teardown(
    api: &dyn CloudApi,
    scope: &Scope,
    options: &Options,
    limits: &RateLimits,
) -> Result<Report, (CloudError, Report)> {
    let started = Instant::now();
    let metered = Metered {
        api,
        limits,
        account: &options.account,
        calls: AtomicU64::new(0),
    };
    let mut report = Report::default();
    'discoveries: loop {
        let inventory = match discover(&metered, scope).await {
            Ok(inventory) => inventory,
            Err(error) => {
                report.calls = metered.calls.load(Ordering::Relaxed);
                return Err((error, report));
            }
        };
        report.inventory = inventory;
        if report.inventory.is_done() {
            report.complete = true;
            break;
        }
        // Passes over what this discovery found, while they make progress; the next
        // discovery, not this inventory, decides whether the teardown is complete.
        loop {
            if report.passes > 0 && started.elapsed() >= options.budget {
                break 'discoveries;
            }
            let outcomes = pass(&metered, scope, &report.inventory, options.concurrency).await;
            report.passes += 1;
            let mut progress = false;
            let mut settled = BTreeSet::new();
            for (resource, outcome) in &outcomes {
                match outcome {
                    Outcome::Deleted => {
                        progress = true;
                        report.deleted.push(resource.clone());
                        settled.insert(resource.id.clone());
                    }
                    // No longer ours: not waited on, not deleted.
                    Outcome::Skipped(_) => {
                        settled.insert(resource.id.clone());
                    }
                    Outcome::Blocked { .. } | Outcome::Failed(_) => {}
                }
            }
            report
                .inventory
                .items
                .retain(|item| !settled.contains(&item.resource.id));
            report.outcomes = outcomes
                .into_iter()
                .map(|(resource, outcome)| (resource.id, outcome))
                .collect();
            if !progress {
                break 'discoveries;
            }
            if report.inventory.is_done() {
                break;
            }
        }
    }
    report.calls = metered.calls.load(Ordering::Relaxed);
    Ok(report)
}

/// One pass: every collectable resource that nothing blocks is deleted (concurrently); the
/// rest are reported blocked by what blocks them.
async fn pass(
    api: &Metered<'_>,
    scope: &Scope,
    inventory: &Inventory,
    concurrency: usize,
) -> Vec<(Resource, Outcome)> {
    let mut outcomes = Vec::new();
    let mut ready = Vec::new();
    for item in inventory.collectable() {
        let blockers = inventory.blockers(&item.resource);
        if blockers.is_empty() {
            ready.push(item.resource.clone());
        } else {
            outcomes.push((
                item.resource.clone(),
                Outcome::Blocked {
                    by: blockers.into_iter().map(|b| b.label).collect(),
                    error: None,
                },
            ));
        }
    }
    // Described again, one batch per kind: what each delete acts on is at most one pass old.
    let mut fresh: HashMap<String, Result<Option<Resource>, CloudError>> = HashMap::new();
    let mut by_kind: BTreeMap<Kind, Vec<String>> = BTreeMap::new();
    for resource in &ready {
        by_kind
            .entry(resource.kind)
            .or_default()
            .push(resource.id.clone());
    }
    for (kind, ids) in by_kind {
        match api.describe(kind, &Query::Ids(ids.clone())).await {
            Ok(found) => {
                let mut found: HashMap<String, Resource> =
                    found.into_iter().map(|r| (r.id.clone(), r)).collect();
                for id in ids {
                    let now = found.remove(&id);
                    fresh.insert(id, Ok(now));
                }
            }
            Err(error) if error.class == ErrorClass::NotFound => {
                for id in ids {
                    fresh.insert(id, Ok(None));
                }
            }
            Err(error) => {
                for id in ids {
                    fresh.insert(id, Err(error.clone()));
                }
            }
        }
    }
    let deleted: Vec<(Resource, Outcome)> = futures::stream::iter(ready)
        .map(|resource| {
            let now = fresh
                .remove(&resource.id)
                .unwrap_or_else(|| Ok(Some(resource.clone())));
            async move {
                let outcome = match now {
                    Ok(Some(now)) => delete_one(api, scope, inventory, now).await,
                    // Gone since discovery: done.
                    Ok(None) => Outcome::Deleted,
                    Err(error) => Outcome::Failed(error),
                };
                (resource, outcome)
            }
        })
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    outcomes.extend(deleted);
    outcomes
}

/// Deletes `fresh` (a resource as just described again) if it is still owned and free.
async fn delete_one(
    api: &Metered<'_>,
    scope: &Scope,
    inventory: &Inventory,
    fresh: Resource,
) -> Outcome {
    // An untagged ENI was owned through its groups; anything else must still carry the tag.
    let tag_owned = scope.not_owned(&fresh).is_none();
    let eni_through_groups = fresh.kind == Kind::NetworkInterface
        && !fresh.tags.keys().any(|k| k.starts_with(CLUSTER_TAG_PREFIX));
    if !tag_owned && !eni_through_groups {
        return Outcome::Skipped("no longer tagged as owned".into());
    }
    if let Some(holder) = &fresh.attached_to
        && matches!(fresh.kind, Kind::NetworkInterface | Kind::Volume)
    {
        return Outcome::Blocked {
            by: vec![format!("attached to {holder}")],
            error: None,
        };
    }
    if fresh.kind == Kind::SecurityGroup {
        for item in inventory.collectable() {
            let other = &item.resource;
            if other.kind == Kind::SecurityGroup
                && other.id != fresh.id
                && other.references.contains(&fresh.id)
            {
                let revoke = Action::RevokeReferences {
                    group: other.id.clone(),
                    referenced: fresh.id.clone(),
                };
                match api.act(&revoke).await {
                    Err(error) if error.class != ErrorClass::NotFound => {
                        return classify_failure(inventory, &fresh, error);
                    }
                    _ => {}
                }
            }
        }
    }
    if fresh.kind == Kind::ElasticIp
        && let Some(association) = &fresh.association
    {
        let disassociate = Action::Disassociate {
            association: association.clone(),
        };
        match api.act(&disassociate).await {
            Err(error) if error.class != ErrorClass::NotFound => {
                return classify_failure(inventory, &fresh, error);
            }
            _ => {}
        }
    }
    let delete = Action::Delete {
        kind: fresh.kind,
        id: fresh.id.clone(),
    };
    match api.act(&delete).await {
        Ok(()) => Outcome::Deleted,
        Err(error) => classify_failure(inventory, &fresh, error),
    }
}

fn classify_failure(inventory: &Inventory, resource: &Resource, error: CloudError) -> Outcome {
    match error.class {
        ErrorClass::NotFound => Outcome::Deleted,
        ErrorClass::InUse => {
            let mut by: Vec<String> = inventory
                .blockers(resource)
                .into_iter()
                .map(|b| b.label)
                .collect();
            if by.is_empty() {
                by.push("a dependent object the cloud did not name".into());
            }
            Outcome::Blocked {
                by,
                error: Some(error.to_string()),
            }
        }
        _ => Outcome::Failed(error),
    }
}

#[cfg(test)]
mod tests;
