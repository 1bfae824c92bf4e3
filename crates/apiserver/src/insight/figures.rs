//! What the terminating index says, computed on read: a `FinalizerClaim`'s `status` and the
//! deletion metrics.
//!
//! # Claim status
//! Filled in on every GET and LIST of `finalizerclaims` (and so in `kubectl get`), never
//! stored: a Lease renewal would otherwise rewrite every claim every few seconds.
//! - `live`, `leaseState`, `holder`, `renewTime`, `leaseExpires`: the Lease read at the
//!   moment of the request (the same judgement reviews make, [`claims::lease_state`]);
//! - `pending`: objects being deleted that carry a finalizer the claim covers, on a resource
//!   it lists; `oldestPending`: the one deleting longest, with its `deletionTimestamp`;
//! - `lastProgress`: the last time this server saw a covered finalizer leave a terminating
//!   object (in memory: empty after a restart until it happens again).
//!
//! # Metrics (Prometheus, on `/metrics`)
//! - `finale_terminating_objects{resource}`: objects being deleted, per `group/resource`
//!   (`configmaps` for the core group). Bounded by the number of served resources.
//! - `finale_finalizer_pending_objects{finalizer}`: objects being deleted that carry the
//!   finalizer. At most [`MAX_FINALIZER_SERIES`] finalizers (those with the most objects);
//!   the rest are summed under `finalizer="other"`, so a flood of distinct names cannot
//!   grow the series without bound.
//! - `finale_unclaimed_finalizers`: distinct finalizers on objects being deleted that no
//!   claim covers (system finalizers aside). One series.
//! - `finale_oldest_stuck_object_age_seconds`: how long the oldest object that is stuck by
//!   the cheap test below has been deleting; 0 when none. One series.
//!
//! # Caveats
//! - The metrics' notion of "stuck" is the index's quick one: an object carrying a finalizer
//!   that no claim covers, or whose covering claims' Leases are all not live. A review
//!   (`finale explain`) is the full judgement (foreground chains, namespace content, Pods'
//!   grace periods); the metric may miss those.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::api::FinalizerClaimSpec;
use super::claims::{self, Claim, LeaseState};
use super::terminating::{Terminating, TerminatingIndex};
use crate::object;
use crate::registry::Registry;
use crate::status::ApiResult;

/// The most `finalizer` label values `finale_finalizer_pending_objects` carries.
pub const MAX_FINALIZER_SERIES: usize = 50;

/// The deletion figures at one moment, for the metrics.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Figures {
    pub terminating_by_resource: BTreeMap<String, i64>,
    pub pending_by_finalizer: BTreeMap<String, i64>,
    pub unclaimed_finalizers: i64,
    pub oldest_stuck_age_seconds: f64,
}

/// Reads Leases once each per computation.
struct Leases<'a> {
    registry: &'a Registry,
    now: DateTime<Utc>,
    seen: HashMap<(String, String), LeaseState>,
}

impl Leases<'_> {
    async fn state(&mut self, namespace: &str, name: &str) -> ApiResult<LeaseState> {
        let key = (namespace.to_string(), name.to_string());
        if let Some(state) = self.seen.get(&key) {
            return Ok(state.clone());
        }
        let lease = match self
            .registry
            .catalog()
            .lookup("coordination.k8s.io", "v1", "leases")
        {
            Some(leases) => match self.registry.get(&leases, Some(namespace), name).await {
                Ok(lease) => Some(lease),
                Err(error) if error.code == 404 => None,
                Err(error) => return Err(error),
            },
            None => None,
        };
        let state = claims::lease_state(lease.as_ref(), self.now);
        self.seen.insert(key, state.clone());
        Ok(state)
    }
}

/// Fills in `status` of a stored `FinalizerClaim` object.
pub async fn claim_status(
    registry: &Registry,
    index: &TerminatingIndex,
    claim: &mut Value,
) -> ApiResult<()> {
    let Some(spec) = claim
        .get("spec")
        .cloned()
        .and_then(|spec| serde_json::from_value::<FinalizerClaimSpec>(spec).ok())
    else {
        return Ok(());
    };
    let now = Utc::now();
    let mut leases = Leases {
        registry,
        now,
        seen: HashMap::new(),
    };
    let lease = leases
        .state(&spec.lease.namespace, &spec.lease.name)
        .await?;
    let (pending, progress) = index.pending(
        |finalizer| claims::covers_finalizer(&spec, finalizer),
        |group, resource| claims::covers_resource(&spec, group, resource),
    );
    let mut status = json!({
        "live": lease.is_live(),
        "pending": pending.len(),
    });
    let (state, holder) = match &lease {
        LeaseState::Missing => ("Missing", None),
        LeaseState::NoHolder => ("NoHolder", None),
        LeaseState::Expired {
            holder,
            renewed,
            expired,
        } => {
            status["renewTime"] = json!(object::timestamp(*renewed));
            status["leaseExpires"] = json!(object::timestamp(*expired));
            ("Expired", Some(holder))
        }
        LeaseState::Live {
            holder,
            renewed,
            expires,
        } => {
            status["renewTime"] = json!(object::timestamp(*renewed));
            status["leaseExpires"] = json!(object::timestamp(*expires));
            ("Live", Some(holder))
        }
        LeaseState::Unknown { holder } => ("Unknown", Some(holder)),
    };
    status["leaseState"] = json!(state);
    if let Some(holder) = holder {
        status["holder"] = json!(holder);
    }
    if let Some(oldest) = oldest(&pending) {
        status["oldestPending"] = json!({
            "apiVersion": oldest.api_version,
            "kind": oldest.kind,
            "namespace": oldest.namespace,
            "name": oldest.name,
            "uid": oldest.uid,
            "deletionTimestamp": oldest.deletion_timestamp,
        });
        if oldest.namespace.is_empty()
            && let Some(map) = status["oldestPending"].as_object_mut()
        {
            map.remove("namespace");
        }
    }
    if let Some(progress) = progress {
        status["lastProgress"] = json!(object::timestamp(progress));
    }
    if let Some(map) = claim.as_object_mut() {
        map.insert("status".into(), status);
    }
    Ok(())
}

fn oldest(objects: &[Terminating]) -> Option<&Terminating> {
    objects.iter().min_by(|a, b| {
        (
            crate::object::parse_timestamp(&a.deletion_timestamp),
            &a.key,
        )
            .cmp(&(
                crate::object::parse_timestamp(&b.deletion_timestamp),
                &b.key,
            ))
    })
}

/// The figures for `/metrics`.
pub async fn figures(registry: &Arc<Registry>, index: &TerminatingIndex) -> ApiResult<Figures> {
    let now = Utc::now();
    let claims: Vec<Claim> = claims::load(Arc::clone(registry.store()), registry.catalog()).await?;
    let mut leases = Leases {
        registry,
        now,
        seen: HashMap::new(),
    };
    let mut figures = Figures::default();
    let mut pending: HashMap<String, i64> = HashMap::new();
    let mut unclaimed = std::collections::HashSet::new();
    let mut oldest_stuck: Option<DateTime<Utc>> = None;
    for object in index.all() {
        let resource = if object.group.is_empty() {
            object.resource.clone()
        } else {
            format!("{}/{}", object.group, object.resource)
        };
        *figures.terminating_by_resource.entry(resource).or_default() += 1;
        let mut stuck = false;
        for finalizer in &object.finalizers {
            *pending.entry(finalizer.clone()).or_default() += 1;
            if claims::is_system_finalizer(finalizer) {
                continue;
            }
            let (covering, _) =
                claims::matching(&claims, finalizer, &object.group, &object.resource);
            if covering.is_empty() {
                unclaimed.insert(finalizer.clone());
                stuck = true;
                continue;
            }
            let mut any_live = false;
            for claim in covering {
                if leases
                    .state(&claim.spec.lease.namespace, &claim.spec.lease.name)
                    .await?
                    .is_live()
                {
                    any_live = true;
                    break;
                }
            }
            stuck |= !any_live;
        }
        if stuck && let Some(since) = crate::object::parse_timestamp(&object.deletion_timestamp) {
            oldest_stuck = Some(oldest_stuck.map_or(since, |o| o.min(since)));
        }
    }
    let mut ranked: Vec<(String, i64)> = pending.into_iter().collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    for (rank, (finalizer, count)) in ranked.into_iter().enumerate() {
        let label = if rank < MAX_FINALIZER_SERIES {
            finalizer
        } else {
            "other".to_string()
        };
        *figures.pending_by_finalizer.entry(label).or_default() += count;
    }
    figures.unclaimed_finalizers = unclaimed.len() as i64;
    figures.oldest_stuck_age_seconds = oldest_stuck
        .map(|since| ((now - since).num_milliseconds().max(0) as f64) / 1000.0)
        .unwrap_or(0.0);
    Ok(figures)
}
