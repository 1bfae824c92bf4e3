//! The `FinalizerClaim`s of an operator, written by the toolkit so that `DeletionReview`,
//! `finale explain` and the unclaimed-finalizer warning know who removes each finalizer and
//! whether that controller is alive.
//!
//! [`crate::runtime::run`] writes one claim per finalizer of the [`Reconciler`] (and per
//! finalizer it puts on other kinds, [`Reconciler::other_finalizers`]) with server-side apply,
//! as soon as the operator starts competing for its leader Lease, standby replicas included.
//! A claim names:
//! - `finalizer`: the exact finalizer name;
//! - `resources`: the Reconciler's resource type (group and plural), or the other kind's;
//! - `controller`: the operator's name, `finale-<name>-operator` (as in its Events);
//! - `lease`: its leader Lease (`namespace/name`), whose renewals prove the controller alive;
//! - `cleansUp`, `maxCleanupSeconds` and `forcePolicy` from the Reconciler
//!   ([`Reconciler::cleans_up`], [`Reconciler::max_cleanup`], [`Reconciler::force_policy`]).
//!
//! # Guarantees
//! - Writing claims never stops or delays reconciling: it runs in its own task. A failure is
//!   logged, counted in `finalizer_claim_write_failures_total`, and retried with backoff
//!   (1 s doubling to 1 min) until it succeeds or the operator shuts down.
//! - A cluster that does not serve `deletion.finale.dev` (404) is skipped quietly: one info
//!   log, no retries, no failure counted.
//! - Re-applying is idempotent: every replica applies the same content under the same field
//!   manager ([`FIELD_MANAGER`]), so replicas never conflict over a claim.
//! - The claims stay as written while the operator runs: once written, a watch on
//!   `finalizerclaims` re-applies any of them that is deleted or whose spec is changed, within
//!   moments (one apply per such change; a watch that drops re-lists, and claims deleted
//!   meanwhile are found missing then). Every replica keeps them, standbys included, as every
//!   replica writes them: they write the same content, so they agree.
//!
//! # Caveats
//! - Without leader election there is no Lease, and a claim whose Lease is missing reads as a
//!   dead controller (`Stuck`) to every reader. So the toolkit writes claims only when leader
//!   election is on (the default of `finale operator`); with `--leader-elect=false` it writes
//!   none and logs why, and adding its finalizers draws the unclaimed-finalizer warning.
//! - Claims are not deleted when the operator stops: a stopped controller is exactly what a
//!   claim with an expired Lease reports. Remove an uninstalled operator's claims by hand.

use std::time::Duration;

use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::discovery::ApiResource;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::leader::LeaseConfig;
use crate::metrics::Metrics;

/// The field manager of the toolkit's claim writes.
pub const FIELD_MANAGER: &str = "finale-operator-claims";

/// Whether a person may remove a claimed finalizer in the controller's place (with a
/// `FinalizerRemoval`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ForcePolicy {
    /// Never: the cleanup must happen, however long it takes.
    Never,
    /// Only while the controller's Lease is expired (it is dead, not merely slow).
    #[default]
    WhenOwnerDead,
    /// Whenever a person asks.
    Always,
}

impl ForcePolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            ForcePolicy::Never => "Never",
            ForcePolicy::WhenOwnerDead => "WhenOwnerDead",
            ForcePolicy::Always => "Always",
        }
    }
}

/// A finalizer an operator puts on objects of a kind other than its own resource (the
/// Database operator's in-use finalizer on Secrets).
#[derive(Clone, Copy, Debug)]
pub struct OtherFinalizer {
    pub finalizer: &'static str,
    /// Empty for the core group.
    pub group: &'static str,
    /// The plural resource name (`secrets`).
    pub resource: &'static str,
}

/// What one claim says, before it is rendered as an object.
#[derive(Clone, Debug, PartialEq)]
pub struct ClaimSpec {
    pub finalizer: String,
    pub group: String,
    pub resource: String,
    pub controller: String,
    pub lease_namespace: String,
    pub lease_name: String,
    pub cleans_up: Vec<String>,
    pub max_cleanup: Option<Duration>,
    pub force_policy: ForcePolicy,
    /// Where the claimed objects list what the cleanup will remove (a JSON pointer).
    pub inventory_path: Option<String>,
}

impl ClaimSpec {
    /// The claim's object name: `<controller>.<finalizer>`, with every character a name may
    /// not hold (`/`, `_`, upper case) made a `-`, e.g.
    /// `finale-database-operator.finale.dev-database`.
    pub fn name(&self) -> String {
        let raw = format!("{}.{}", self.controller, self.finalizer);
        let mut name: String = raw
            .chars()
            .map(|c| match c.to_ascii_lowercase() {
                c @ ('a'..='z' | '0'..='9' | '.' | '-') => c,
                _ => '-',
            })
            .collect();
        name.truncate(253);
        name.trim_matches(|c: char| !c.is_ascii_alphanumeric())
            .to_string()
    }

    /// The `FinalizerClaim` as server-side apply sends it.
    pub fn object(&self) -> Value {
        let mut spec = json!({
            "finalizer": self.finalizer,
            "resources": [{"group": self.group, "resource": self.resource}],
            "controller": self.controller,
            "lease": {"namespace": self.lease_namespace, "name": self.lease_name},
            "forcePolicy": self.force_policy.as_str(),
        });
        if !self.cleans_up.is_empty() {
            spec["cleansUp"] = json!(self.cleans_up);
        }
        if let Some(limit) = self.max_cleanup {
            spec["maxCleanupSeconds"] = json!(limit.as_secs().max(1));
        }
        if let Some(path) = &self.inventory_path {
            spec["inventoryPath"] = json!(path);
        }
        json!({
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {"name": self.name()},
            "spec": spec,
        })
    }
}

const API_VERSION: &str = "deletion.finale.dev/v1alpha1";
const KIND: &str = "FinalizerClaim";

fn claim_resource() -> ApiResource {
    ApiResource {
        group: "deletion.finale.dev".into(),
        version: "v1alpha1".into(),
        api_version: API_VERSION.into(),
        kind: KIND.into(),
        plural: "finalizerclaims".into(),
    }
}

/// The claims of `finalizers` on `group`/`resource` plus `others`, held through `lease`.
pub fn specs(
    controller: &str,
    lease: &LeaseConfig,
    group: &str,
    resource: &str,
    finalizers: &[&str],
    others: &[OtherFinalizer],
    describe: impl Fn(&str) -> (Vec<String>, Option<Duration>, ForcePolicy, Option<String>),
) -> Vec<ClaimSpec> {
    let own = finalizers.iter().map(|f| (*f, group, resource));
    let other = others.iter().map(|o| (o.finalizer, o.group, o.resource));
    own.chain(other)
        .map(|(finalizer, group, resource)| {
            let (cleans_up, max_cleanup, force_policy, inventory_path) = describe(finalizer);
            ClaimSpec {
                finalizer: finalizer.to_string(),
                group: group.to_string(),
                resource: resource.to_string(),
                controller: controller.to_string(),
                lease_namespace: lease.namespace.clone(),
                lease_name: lease.name.clone(),
                cleans_up,
                max_cleanup,
                force_policy,
                inventory_path,
            }
        })
        .collect()
}

/// How one round of writes ended.
#[derive(Debug)]
enum Written {
    All,
    /// The server does not serve `deletion.finale.dev`.
    NotServed,
}

async fn apply_all(client: &Client, claims: &[ClaimSpec]) -> Result<Written, kube::Error> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &claim_resource());
    let params = PatchParams::apply(FIELD_MANAGER).force();
    for claim in claims {
        match api
            .patch(&claim.name(), &params, &Patch::Apply(claim.object()))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => return Ok(Written::NotServed),
            Err(error) => return Err(error),
        }
    }
    Ok(Written::All)
}

/// Writes `claims` until every one is stored, the server turns out not to serve claims, or
/// `shutdown` fires; then keeps them as written ([`keep`]) until `shutdown`. Never fails:
/// failures are logged and counted, then retried.
pub async fn maintain(
    client: Client,
    controller_label: &'static str,
    claims: Vec<ClaimSpec>,
    metrics: std::sync::Arc<Metrics>,
    shutdown: CancellationToken,
) {
    const FIRST_RETRY: Duration = Duration::from_secs(1);
    const LAST_RETRY: Duration = Duration::from_secs(60);
    // Each round is bounded, so a hanging server delays only the claims, and only this long.
    const ROUND_LIMIT: Duration = Duration::from_secs(30);
    let mut retry = FIRST_RETRY;
    loop {
        let round = tokio::time::timeout(ROUND_LIMIT, apply_all(&client, &claims));
        let outcome = tokio::select! {
            _ = shutdown.cancelled() => return,
            outcome = round => outcome,
        };
        let error = match outcome {
            Ok(Ok(Written::All)) => {
                tracing::info!(
                    controller = controller_label,
                    claims = claims.len(),
                    "wrote the FinalizerClaims"
                );
                keep(client, controller_label, claims, metrics, shutdown).await;
                return;
            }
            Ok(Ok(Written::NotServed)) => {
                tracing::info!(
                    controller = controller_label,
                    "the API server does not serve deletion.finale.dev; no FinalizerClaims written"
                );
                return;
            }
            Ok(Err(error)) => error.to_string(),
            Err(_) => format!("no answer within {ROUND_LIMIT:?}"),
        };
        metrics.claim_write_failed(controller_label);
        tracing::warn!(
            controller = controller_label,
            %error,
            retry_in = ?retry,
            "could not write the FinalizerClaims (cleanup goes on; `finale explain` cannot name this controller until they are written)"
        );
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(retry) => {}
        }
        retry = (retry * 2).min(LAST_RETRY);
    }
}

/// Whether a stored claim still says what `claim` wants: every spec field the toolkit sets
/// is equal (fields the server defaults or a person added are left alone).
fn as_written(stored: &DynamicObject, claim: &ClaimSpec) -> bool {
    let wanted = claim.object();
    let Some(wanted) = wanted.get("spec").and_then(Value::as_object) else {
        return true;
    };
    let stored = stored.data.get("spec");
    wanted
        .iter()
        .all(|(field, value)| stored.and_then(|s| s.get(field)) == Some(value))
}

/// Keeps the claims as written while the operator runs: a watch on `finalizerclaims`
/// re-applies a claim that is deleted, or whose spec no longer says what the toolkit wrote.
/// Bounded: one apply per such change (the toolkit's own apply reads back as written, so it
/// does not loop), retried with the same backoff as the first write on failure.
async fn keep(
    client: Client,
    controller_label: &'static str,
    claims: Vec<ClaimSpec>,
    metrics: std::sync::Arc<Metrics>,
    shutdown: CancellationToken,
) {
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};

    let api: Api<DynamicObject> = Api::all_with(client.clone(), &claim_resource());
    let mut events = watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    // Names seen during a (re)list, to find claims deleted while the watch was down.
    let mut listed = std::collections::HashSet::new();
    loop {
        let event = tokio::select! {
            _ = shutdown.cancelled() => return,
            event = events.next() => event,
        };
        let damaged: Vec<&ClaimSpec> = match event {
            None => return,
            Some(Err(error)) => {
                tracing::debug!(controller = controller_label, %error, "the FinalizerClaim watch failed; it resumes");
                continue;
            }
            Some(Ok(watcher::Event::Init)) => {
                listed.clear();
                continue;
            }
            Some(Ok(watcher::Event::InitApply(object))) => {
                listed.insert(object.metadata.name.clone().unwrap_or_default());
                claims
                    .iter()
                    .filter(|c| Some(c.name()) == object.metadata.name && !as_written(&object, c))
                    .collect()
            }
            Some(Ok(watcher::Event::InitDone)) => claims
                .iter()
                .filter(|c| !listed.contains(&c.name()))
                .collect(),
            Some(Ok(watcher::Event::Apply(object))) => claims
                .iter()
                .filter(|c| Some(c.name()) == object.metadata.name && !as_written(&object, c))
                .collect(),
            Some(Ok(watcher::Event::Delete(object))) => claims
                .iter()
                .filter(|c| Some(c.name()) == object.metadata.name)
                .collect(),
        };
        for claim in damaged {
            tracing::info!(
                controller = controller_label,
                claim = %claim.name(),
                "a FinalizerClaim of this operator was deleted or changed; writing it again"
            );
            rewrite(&client, controller_label, claim, &metrics, &shutdown).await;
        }
    }
}

/// Applies one claim again, retrying with backoff until it is stored or `shutdown`.
async fn rewrite(
    client: &Client,
    controller_label: &'static str,
    claim: &ClaimSpec,
    metrics: &Metrics,
    shutdown: &CancellationToken,
) {
    const FIRST_RETRY: Duration = Duration::from_secs(1);
    const LAST_RETRY: Duration = Duration::from_secs(60);
    const ROUND_LIMIT: Duration = Duration::from_secs(30);
    let mut retry = FIRST_RETRY;
    loop {
        let round =
            tokio::time::timeout(ROUND_LIMIT, apply_all(client, std::slice::from_ref(claim)));
        let outcome = tokio::select! {
            _ = shutdown.cancelled() => return,
            outcome = round => outcome,
        };
        let error = match outcome {
            Ok(Ok(_)) => return,
            Ok(Err(error)) => error.to_string(),
            Err(_) => format!("no answer within {ROUND_LIMIT:?}"),
        };
        metrics.claim_write_failed(controller_label);
        tracing::warn!(controller = controller_label, claim = %claim.name(), %error, retry_in = ?retry, "could not write a FinalizerClaim again");
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(retry) => {}
        }
        retry = (retry * 2).min(LAST_RETRY);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(finalizer: &str) -> ClaimSpec {
        let lease = LeaseConfig::new("kube-system".into(), "lease".into(), "me".into());
        specs(
            "finale-database-operator",
            &lease,
            "finale.dev",
            "databases",
            &[finalizer],
            &[],
            |_| {
                (
                    vec!["PostgreSQL database".into()],
                    None,
                    ForcePolicy::default(),
                    None,
                )
            },
        )
        .remove(0)
    }

    #[test]
    fn names_are_valid_object_names_that_say_whose_and_which_finalizer() {
        assert_eq!(
            claim("finale.dev/database").name(),
            "finale-database-operator.finale.dev-database"
        );
        assert_eq!(
            claim("Example.COM/some_thing").name(),
            "finale-database-operator.example.com-some-thing"
        );
    }

    #[test]
    fn the_object_carries_the_lease_resource_and_policy() {
        let object = claim("finale.dev/database").object();
        assert_eq!(object["spec"]["finalizer"], "finale.dev/database");
        assert_eq!(
            object["spec"]["resources"],
            json!([{"group": "finale.dev", "resource": "databases"}])
        );
        assert_eq!(
            object["spec"]["lease"],
            json!({"namespace": "kube-system", "name": "lease"})
        );
        assert_eq!(object["spec"]["forcePolicy"], "WhenOwnerDead");
        assert_eq!(object["spec"]["cleansUp"], json!(["PostgreSQL database"]));
        assert!(object["spec"].get("maxCleanupSeconds").is_none());
    }
}
