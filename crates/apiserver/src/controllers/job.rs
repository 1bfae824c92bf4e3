//! The Job controller: runs a Job's Pods to completion and tracks every one of them, as
//! kube-controller-manager 1.33's `job-controller` does for NonIndexed Jobs, with the
//! `ttl-after-finished-controller` alongside. It runs with the other controllers, under
//! their Lease, and acts through the registry.
//!
//! Per Job, each pass:
//! - **Pods.** It keeps `min(parallelism, completions - succeeded)` Pods active (for a Job
//!   without `completions`: `parallelism` until one succeeds), created from the template with
//!   `generateName: <job>-`, a controller ownerReference with `blockOwnerDeletion`, and the
//!   finalizer `batch.kubernetes.io/job-tracking`; extra active Pods are deleted, newest
//!   first. A terminating Pod is not active and is replaced at once
//!   (`podReplacementPolicy: TerminatingOrFailed`). After failures, new Pods wait upstream's
//!   back-off: 10 s doubling per failure since the last success, at most 10 minutes.
//! - **Counting, exactly once.** A finished Pod (Succeeded; Failed, or deleted before it
//!   succeeded) is first recorded by uid in `status.uncountedTerminatedPods`, then its
//!   tracking finalizer is removed, and only then is it moved into `succeeded` or `failed`.
//!   A crash between any two steps repeats nothing and loses nothing.
//! - **Finishing.** `succeeded >= completions` with none active adds `SuccessCriteriaMet`,
//!   then `Complete` (with `completionTime`) once no Pod is terminating; more than
//!   `backoffLimit` failures, or `activeDeadlineSeconds` passed, adds `FailureTarget`, deletes
//!   the active Pods, then `Failed` — reasons and messages as upstream, with Events.
//! - **Suspend.** `spec.suspend: true` deletes the active Pods and sets `Suspended=True`;
//!   resuming sets it False and restarts `startTime`.
//! - **Deletion.** Pods whose Job is gone (deleted with any propagation policy, or orphaned
//!   by `--cascade=orphan`) lose their tracking finalizer, so the garbage collector's
//!   deletions finish and orphans are not held. A Job being deleted gets no new Pods.
//! - **TTL.** A finished Job with `ttlSecondsAfterFinished` is deleted that long after it
//!   finished, with foreground propagation and a uid precondition, as upstream.
//!
//! # Caveats
//! - `completionMode: Indexed`, `podFailurePolicy`, `backoffLimitPerIndex`, `successPolicy`
//!   and `managedBy` are stored and served but not acted on: such a Job runs as NonIndexed.
//! - A pass lists the Pods of the Job's namespace; the back-off is kept in memory, so a new
//!   leader starts it afresh.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use futures::{FutureExt, StreamExt};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::kinds::job::TRACKING_FINALIZER;
use crate::object;
use crate::registry::{
    DeleteOptions, ListOptions, Preconditions, Registry, Subresource, WriteOptions,
};
use crate::resources::ResourceType;
use crate::status::{ApiError, ApiResult};
use crate::watch_cache::WatchItem;

/// The identity the controller writes as.
pub const JOB_CONTROLLER_USER: &str = "system:serviceaccount:kube-system:job-controller";
const COMPONENT: &str = "job-controller";
/// Upstream's `DefaultJobPodFailureBackOff` and `MaxJobPodFailureBackOff`.
const BACKOFF_BASE: Duration = Duration::from_secs(10);
const BACKOFF_MAX: Duration = Duration::from_secs(600);
/// Upstream's `MaxPodCreateDeletePerSync`.
const MAX_CREATES_PER_PASS: i64 = 500;

pub fn spawn(registry: Arc<Registry>, shutdown: CancellationToken) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let (Some(jobs), Some(pods)) = (
            registry.catalog().lookup("batch", "v1", "jobs"),
            registry.catalog().lookup("", "v1", "pods"),
        ) else {
            tracing::error!("the job controller cannot start: jobs or pods are not served");
            return;
        };
        JobController {
            registry,
            jobs,
            pods,
            backoff: HashMap::new(),
        }
        .run(shutdown)
        .await
    })
}

struct JobController {
    registry: Arc<Registry>,
    jobs: Arc<ResourceType>,
    pods: Arc<ResourceType>,
    /// Per Job uid: failures since its last success, and when the newest was seen.
    backoff: HashMap<String, (u32, Instant)>,
}

/// A Job by namespace and name, as the work queue carries it (`ns/name`).
fn job_key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

impl JobController {
    async fn run(mut self, shutdown: CancellationToken) {
        let (queue, mut due) = mpsc::unbounded_channel::<String>();
        loop {
            let watches = futures::future::try_join(
                self.registry
                    .watch(Arc::clone(&self.jobs), None, &ListOptions::default(), false),
                self.registry
                    .watch(Arc::clone(&self.pods), None, &ListOptions::default(), false),
            )
            .await;
            let mut events = match watches {
                Ok((job_events, pod_events)) => futures::stream::select(job_events, pod_events),
                Err(error) => {
                    tracing::warn!(error = %error.message, "the job controller cannot watch Jobs and Pods; retrying");
                    tokio::select! {
                        _ = shutdown.cancelled() => return,
                        _ = tokio::time::sleep(Duration::from_millis(500)) => continue,
                    }
                }
            };
            loop {
                let mut keys = HashSet::new();
                let mut broken = false;
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    item = events.next() => match item {
                        Some(WatchItem::Error(_)) | None => broken = true,
                        Some(item) => self.route(&item, &mut keys).await,
                    },
                    Some(key) = due.recv() => { keys.insert(key); }
                }
                // A burst of changes (the initial events, a Job's Pods all starting) is one pass
                // per Job.
                while !broken && let Some(Some(item)) = events.next().now_or_never() {
                    if matches!(item, WatchItem::Error(_)) {
                        broken = true;
                    } else {
                        self.route(&item, &mut keys).await;
                    }
                }
                while let Ok(key) = due.try_recv() {
                    keys.insert(key);
                }
                for key in keys {
                    let Some((namespace, name)) = key.split_once('/') else {
                        continue;
                    };
                    match self.sync(namespace, name).await {
                        Ok(Some(again)) => super::enqueue_after(&queue, key.clone(), again),
                        Ok(None) => {}
                        Err(error) => {
                            tracing::warn!(job = %key, error = %error.message, "a Job pass failed; retrying");
                            super::enqueue_after(&queue, key.clone(), Duration::from_secs(1));
                        }
                    }
                }
                if broken {
                    break;
                }
            }
        }
    }

    /// Which Job a change concerns; a Pod that lost its Job's controller reference (orphaned
    /// by the garbage collector) is released of the tracking finalizer here.
    async fn route(&self, item: &WatchItem, keys: &mut HashSet<String>) {
        let WatchItem::Change { object, .. } = item else {
            return;
        };
        let namespace = object::namespace(object).unwrap_or_default();
        if object.get("kind").and_then(Value::as_str) == Some("Job") {
            keys.insert(job_key(namespace, object::name(object)));
            return;
        }
        if let Some(owner) = controller_job(object) {
            let owner = owner
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            keys.insert(job_key(namespace, owner));
        } else if has_tracking_finalizer(object)
            && let Err(error) = self.release(object).await
        {
            tracing::warn!(pod = %object::name(object), error = %error.message, "cannot remove the job-tracking finalizer of an orphaned Pod");
        }
    }

    /// One pass over a Job; returns when to look again, if a timer is due (back-off,
    /// deadline, TTL).
    async fn sync(&mut self, namespace: &str, name: &str) -> ApiResult<Option<Duration>> {
        let job = match self.registry.get(&self.jobs, Some(namespace), name).await {
            Ok(job) => Some(job),
            Err(error) if error.code == 404 => None,
            Err(error) => return Err(error),
        };
        let listed = self
            .registry
            .list(&self.pods, Some(namespace), &ListOptions::default())
            .await?;
        let named: Vec<&Value> = items(&listed)
            .iter()
            .filter(|pod| {
                controller_job(pod)
                    .and_then(|o| o.get("name"))
                    .and_then(Value::as_str)
                    == Some(name)
            })
            .collect();
        let job_uid = job.as_ref().map(|j| object::uid(j).to_string());
        // Pods of an earlier Job of this name, or of this one now deleted: nothing will count
        // them, so nothing may hold them.
        for pod in &named {
            let owner_uid = controller_job(pod)
                .and_then(|o| o.get("uid"))
                .and_then(Value::as_str);
            if has_tracking_finalizer(pod) && owner_uid != job_uid.as_deref() {
                self.release(pod).await?;
            }
        }
        let Some(job) = job else {
            return Ok(None);
        };
        let uid = object::uid(&job).to_string();
        let mine: Vec<&Value> = named
            .into_iter()
            .filter(|pod| {
                controller_job(pod)
                    .and_then(|o| o.get("uid"))
                    .and_then(Value::as_str)
                    == Some(uid.as_str())
            })
            .collect();
        let status = job.get("status").cloned().unwrap_or_else(|| json!({}));
        if let Some(finished) = finished_at(&status) {
            self.backoff.remove(&uid);
            for pod in mine.iter().filter(|p| has_tracking_finalizer(p)) {
                self.release(pod).await?;
            }
            return self.expire(&job, finished).await;
        }

        // Count finished Pods exactly once: record, release, then count.
        let mut uncounted = Uncounted::of(&status);
        let mut newly_failed = 0;
        for pod in mine.iter().filter(|p| has_tracking_finalizer(p)) {
            let pod_uid = object::uid(pod).to_string();
            if uncounted.contains(&pod_uid) {
                continue;
            }
            if phase(pod) == "Succeeded" {
                uncounted.succeeded.push(pod_uid);
                self.backoff.remove(&uid);
            } else if is_failed(pod) {
                uncounted.failed.push(pod_uid);
                newly_failed += 1;
            }
        }
        if newly_failed > 0 {
            let entry = self
                .backoff
                .entry(uid.clone())
                .or_insert((0, Instant::now()));
            *entry = (entry.0 + newly_failed, Instant::now());
        }
        if uncounted != Uncounted::of(&status) {
            let recorded = uncounted.clone();
            self.write_status(&job, move |status| {
                status.insert("uncountedTerminatedPods".into(), recorded.to_json());
            })
            .await?;
        }
        let mut succeeded = count(&status, "succeeded");
        let mut failed = count(&status, "failed");
        for pod in &mine {
            if uncounted.contains(object::uid(pod)) && has_tracking_finalizer(pod) {
                self.release(pod).await?;
            }
        }
        succeeded += uncounted.succeeded.len() as i64;
        failed += uncounted.failed.len() as i64;
        uncounted = Uncounted::default();

        let active: Vec<&Value> = mine.iter().copied().filter(|p| is_active(p)).collect();
        let terminating = mine
            .iter()
            .filter(|p| object::is_terminating(p) && !is_terminal(p))
            .count() as i64;
        let spec = job.get("spec").cloned().unwrap_or_default();
        let parallelism = spec_count(&spec, "parallelism").unwrap_or(1);
        let completions = spec_count(&spec, "completions");
        let backoff_limit = spec_count(&spec, "backoffLimit").unwrap_or(6);
        let suspended = spec.get("suspend") == Some(&Value::Bool(true));
        let now = Utc::now();
        let mut start_time = status
            .get("startTime")
            .and_then(Value::as_str)
            .and_then(crate::object::parse_timestamp);
        let mut conditions = conditions(&status);
        let mut again: Option<Duration> = None;
        let mut events: Vec<(&str, &str, String)> = Vec::new();
        let mut to_delete: Vec<&Value> = Vec::new();
        let mut to_create = 0;

        let target = condition_true(&conditions, "FailureTarget")
            .or_else(|| condition_true(&conditions, "SuccessCriteriaMet"));
        if target.is_none() {
            let complete = match completions {
                None => succeeded > 0 && active.is_empty(),
                Some(completions) => succeeded >= completions && active.is_empty(),
            };
            let deadline = spec_count(&spec, "activeDeadlineSeconds")
                .zip(start_time)
                .map(|(seconds, start)| start + chrono::Duration::seconds(seconds));
            if failed > backoff_limit {
                set_condition(
                    &mut conditions,
                    "FailureTarget",
                    "True",
                    "BackoffLimitExceeded",
                    "Job has reached the specified backoff limit",
                    now,
                );
                events.push((
                    "Warning",
                    "BackoffLimitExceeded",
                    "Job has reached the specified backoff limit".into(),
                ));
            } else if !suspended && deadline.is_some_and(|d| d <= now) {
                set_condition(
                    &mut conditions,
                    "FailureTarget",
                    "True",
                    "DeadlineExceeded",
                    "Job was active longer than specified deadline",
                    now,
                );
                events.push((
                    "Warning",
                    "DeadlineExceeded",
                    "Job was active longer than specified deadline".into(),
                ));
            } else if complete {
                set_condition(
                    &mut conditions,
                    "SuccessCriteriaMet",
                    "True",
                    "CompletionsReached",
                    "Reached expected number of succeeded pods",
                    now,
                );
            } else if let Some(deadline) = deadline.filter(|_| !suspended) {
                again = (deadline - now).to_std().ok();
            }
        }
        let finishing = condition_true(&conditions, "FailureTarget")
            .or_else(|| condition_true(&conditions, "SuccessCriteriaMet"));
        let mut completion_time = None;
        if let Some((kind, reason, message)) = finishing {
            to_delete.extend(active.iter().copied());
            if terminating == 0 && to_delete.is_empty() {
                let last = if kind == "FailureTarget" {
                    "Failed"
                } else {
                    "Complete"
                };
                set_condition(&mut conditions, last, "True", &reason, &message, now);
                if last == "Complete" {
                    completion_time = Some(object::timestamp(now));
                    events.push(("Normal", "Completed", "Job completed".into()));
                }
            }
        } else if suspended {
            to_delete.extend(active.iter().copied());
            if condition_true(&conditions, "Suspended").is_none() {
                set_condition(
                    &mut conditions,
                    "Suspended",
                    "True",
                    "JobSuspended",
                    "Job suspended",
                    now,
                );
                events.push(("Normal", "Suspended", "Job suspended".into()));
            }
        } else if object::is_terminating(&job) {
            // Being deleted: no new Pods; the garbage collector removes the rest.
        } else {
            if condition_true(&conditions, "Suspended").is_some() {
                set_condition(
                    &mut conditions,
                    "Suspended",
                    "False",
                    "JobResumed",
                    "Job resumed",
                    now,
                );
                events.push(("Normal", "Resumed", "Job resumed".into()));
                start_time = Some(now);
            }
            if start_time.is_none() {
                start_time = Some(now);
            }
            let want = match completions {
                None if succeeded > 0 => active.len() as i64,
                None => parallelism,
                Some(completions) => (completions - succeeded).clamp(0, parallelism),
            };
            let active_count = active.len() as i64;
            if active_count > want {
                let mut newest: Vec<&Value> = active.clone();
                newest.sort_by(|a, b| {
                    object::meta_str(b, "creationTimestamp")
                        .cmp(&object::meta_str(a, "creationTimestamp"))
                });
                to_delete.extend(newest.into_iter().take((active_count - want) as usize));
            } else if active_count < want {
                match self.backoff_remaining(&uid) {
                    Some(wait) => again = Some(again.map_or(wait, |a| a.min(wait))),
                    None => to_create = (want - active_count).min(MAX_CREATES_PER_PASS),
                }
            }
        }

        let mut created = 0;
        for _ in 0..to_create {
            match self.create_pod(&job).await {
                Ok(pod) => {
                    created += 1;
                    events.push((
                        "Normal",
                        "SuccessfulCreate",
                        format!("Created pod: {}", object::name(&pod)),
                    ));
                }
                // The namespace is being deleted: nothing more will start in it.
                Err(error) if error.code == 403 => break,
                Err(error) => return Err(error),
            }
        }
        for pod in &to_delete {
            if self.delete_pinned(&self.pods, pod, None).await? {
                events.push((
                    "Normal",
                    "SuccessfulDelete",
                    format!("Deleted pod: {}", object::name(pod)),
                ));
            }
        }
        let ready = active
            .iter()
            .filter(|p| !to_delete.iter().any(|d| object::uid(d) == object::uid(p)))
            .filter(|p| pod_ready(p))
            .count() as i64;
        let active_now = active.len() as i64 + created
            - to_delete.iter().filter(|p| is_active(p)).count() as i64;
        let terminating_now = terminating + to_delete.len() as i64;
        let mut next = status.as_object().cloned().unwrap_or_default();
        // As upstream serialises it: the counts are omitted when zero, `ready` and
        // `terminating` (pointers there) are always present.
        for (field, value) in [
            ("active", active_now),
            ("succeeded", succeeded),
            ("failed", failed),
        ] {
            if value > 0 {
                next.insert(field.into(), json!(value));
            } else {
                next.remove(field);
            }
        }
        next.insert("ready".into(), json!(ready));
        next.insert("terminating".into(), json!(terminating_now));
        next.insert("uncountedTerminatedPods".into(), uncounted.to_json());
        if let Some(start) = start_time {
            next.insert("startTime".into(), json!(object::timestamp(start)));
        }
        if let Some(time) = completion_time {
            next.insert("completionTime".into(), json!(time));
        }
        if !conditions.is_empty() {
            next.insert("conditions".into(), json!(conditions));
        }
        if Value::Object(next.clone()) != status {
            self.write_status(&job, move |status| *status = next.clone())
                .await?;
        }
        for (event_type, reason, message) in events {
            super::events::record(
                &self.registry,
                &self.jobs,
                &job,
                event_type,
                reason,
                &message,
                COMPONENT,
            )
            .await;
        }
        Ok(again)
    }

    /// How long new Pods must still wait after the Job's recent failures, if at all.
    fn backoff_remaining(&self, uid: &str) -> Option<Duration> {
        let (failures, last) = self.backoff.get(uid)?;
        let delay = BACKOFF_BASE
            .saturating_mul(
                1u32.checked_shl(failures.saturating_sub(1))
                    .unwrap_or(u32::MAX),
            )
            .min(BACKOFF_MAX);
        delay.checked_sub(last.elapsed()).filter(|d| !d.is_zero())
    }

    /// A finished Job with a TTL is deleted when it runs out (the ttl-after-finished
    /// controller); otherwise, when to look again.
    async fn expire(&self, job: &Value, finished: DateTime<Utc>) -> ApiResult<Option<Duration>> {
        let Some(ttl) = job
            .pointer("/spec/ttlSecondsAfterFinished")
            .and_then(Value::as_i64)
        else {
            return Ok(None);
        };
        if object::is_terminating(job) {
            return Ok(None);
        }
        let expires = finished + chrono::Duration::seconds(ttl);
        if let Ok(left) = (expires - Utc::now()).to_std()
            && !left.is_zero()
        {
            return Ok(Some(left));
        }
        if self
            .delete_pinned(&self.jobs, job, Some("Foreground"))
            .await?
        {
            tracing::info!(job = %object::name(job), "deleted a finished Job whose ttlSecondsAfterFinished ran out");
        }
        Ok(None)
    }

    /// Deletes `object` only while it is the same object (a uid precondition); true when this
    /// call deleted it, false when it was gone or replaced already.
    async fn delete_pinned(
        &self,
        resource: &ResourceType,
        object: &Value,
        propagation: Option<&str>,
    ) -> ApiResult<bool> {
        let options = DeleteOptions {
            propagation_policy: propagation.map(str::to_string),
            preconditions: Preconditions {
                uid: Some(object::uid(object).to_string()),
                ..Preconditions::default()
            },
            ..DeleteOptions::default()
        };
        match self
            .registry
            .delete(
                resource,
                object::namespace(object),
                object::name(object),
                &options,
            )
            .await
        {
            Ok(_) => Ok(true),
            Err(error) if error.code == 404 || error.code == 409 => Ok(false),
            Err(error) => Err(error),
        }
    }

    async fn create_pod(&self, job: &Value) -> ApiResult<Value> {
        let template = job.pointer("/spec/template").cloned().unwrap_or_default();
        let mut metadata = serde_json::Map::new();
        for field in ["labels", "annotations"] {
            if let Some(value) = template.pointer(&format!("/metadata/{field}")) {
                metadata.insert(field.into(), value.clone());
            }
        }
        let mut finalizers = object::string_list(template.pointer("/metadata/finalizers"));
        finalizers.push(TRACKING_FINALIZER.to_string());
        metadata.insert(
            "generateName".into(),
            json!(format!("{}-", object::name(job))),
        );
        metadata.insert("finalizers".into(), json!(finalizers));
        metadata.insert(
            "ownerReferences".into(),
            json!([{
                "apiVersion": "batch/v1",
                "kind": "Job",
                "name": object::name(job),
                "uid": object::uid(job),
                "controller": true,
                "blockOwnerDeletion": true,
            }]),
        );
        let pod = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": metadata,
            "spec": template.get("spec").cloned().unwrap_or_else(|| json!({})),
        });
        let options = WriteOptions {
            field_manager: Some("kube-controller-manager".into()),
            ..WriteOptions::default()
        };
        Ok(self
            .registry
            .create(&self.pods, object::namespace(job), pod, &options)
            .await?
            .object)
    }

    /// Removes the tracking finalizer from `pod`; a Pod gone or replaced meanwhile is fine.
    async fn release(&self, pod: &Value) -> ApiResult<()> {
        let result = self
            .update_pinned(&self.pods, pod, Subresource::Main, |next| {
                let kept: Vec<String> = object::finalizers(next)
                    .into_iter()
                    .filter(|f| f != TRACKING_FINALIZER)
                    .collect();
                object::metadata_mut(next).insert("finalizers".into(), json!(kept));
            })
            .await;
        match result {
            Err(error) if error.code == 404 || error.code == 409 => Ok(()),
            other => other,
        }
    }

    async fn write_status(
        &self,
        job: &Value,
        change: impl Fn(&mut serde_json::Map<String, Value>),
    ) -> ApiResult<()> {
        self.update_pinned(&self.jobs, job, Subresource::Status, |next| {
            if !next.get("status").is_some_and(Value::is_object) {
                next["status"] = json!({});
            }
            if let Some(status) = next.get_mut("status").and_then(Value::as_object_mut) {
                change(status);
            }
        })
        .await
    }

    /// Changes `object` as stored, only while it is the same object (its uid): 409 otherwise.
    async fn update_pinned(
        &self,
        resource: &ResourceType,
        object: &Value,
        subresource: Subresource,
        change: impl Fn(&mut Value),
    ) -> ApiResult<()> {
        let uid = object::uid(object).to_string();
        self.registry
            .guarded_update(
                resource,
                object::namespace(object),
                object::name(object),
                None,
                subresource,
                &WriteOptions::default(),
                |current| {
                    if object::uid(current) != uid {
                        return Err(ApiError::new(
                            409,
                            "Conflict",
                            "another object of that name",
                        ));
                    }
                    let mut next = current.clone();
                    change(&mut next);
                    Ok(next)
                },
            )
            .await
            .map(|_| ())
    }
}

/// `status.uncountedTerminatedPods`: finished Pods recorded but not yet counted.
#[derive(Clone, Debug, Default, PartialEq)]
struct Uncounted {
    succeeded: Vec<String>,
    failed: Vec<String>,
}

impl Uncounted {
    fn of(status: &Value) -> Self {
        let list = |field: &str| {
            object::string_list(status.pointer(&format!("/uncountedTerminatedPods/{field}")))
        };
        Uncounted {
            succeeded: list("succeeded"),
            failed: list("failed"),
        }
    }

    fn contains(&self, uid: &str) -> bool {
        self.succeeded.iter().chain(&self.failed).any(|u| u == uid)
    }

    fn to_json(&self) -> Value {
        let mut map = serde_json::Map::new();
        if !self.succeeded.is_empty() {
            map.insert("succeeded".into(), json!(self.succeeded));
        }
        if !self.failed.is_empty() {
            map.insert("failed".into(), json!(self.failed));
        }
        Value::Object(map)
    }
}

fn items(list: &Value) -> &[Value] {
    list.get("items")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// The ownerReference of `pod` that names a `batch` Job as its controller.
fn controller_job(pod: &Value) -> Option<&Value> {
    pod.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)?
        .iter()
        .find(|owner| {
            owner.get("controller") == Some(&Value::Bool(true))
                && owner.get("kind").and_then(Value::as_str) == Some("Job")
                && owner
                    .get("apiVersion")
                    .and_then(Value::as_str)
                    .is_some_and(|v| v.starts_with("batch/"))
        })
}

fn has_tracking_finalizer(pod: &Value) -> bool {
    object::finalizers(pod)
        .iter()
        .any(|f| f == TRACKING_FINALIZER)
}

fn phase(pod: &Value) -> &str {
    pod.pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn is_terminal(pod: &Value) -> bool {
    matches!(phase(pod), "Succeeded" | "Failed")
}

/// Upstream's `isPodFailed` under `podReplacementPolicy: TerminatingOrFailed`: a deleted
/// Pod that had not succeeded is a failure (it may never reach the Failed phase).
fn is_failed(pod: &Value) -> bool {
    phase(pod) == "Failed" || (object::is_terminating(pod) && phase(pod) != "Succeeded")
}

/// Upstream's `FilterActivePods`: neither finished nor being deleted.
fn is_active(pod: &Value) -> bool {
    !is_terminal(pod) && !object::is_terminating(pod)
}

fn pod_ready(pod: &Value) -> bool {
    object::condition_status(pod, "Ready") == Some("True")
}

fn count(status: &Value, field: &str) -> i64 {
    status.get(field).and_then(Value::as_i64).unwrap_or(0)
}

fn spec_count(spec: &Value, field: &str) -> Option<i64> {
    spec.get(field).and_then(Value::as_i64)
}

fn conditions(status: &Value) -> Vec<Value> {
    status
        .get("conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// The reason and message of condition `kind` when it is True.
fn condition_true(conditions: &[Value], kind: &str) -> Option<(String, String, String)> {
    conditions
        .iter()
        .find(|c| {
            c.get("type").and_then(Value::as_str) == Some(kind)
                && c.get("status").and_then(Value::as_str) == Some("True")
        })
        .map(|c| {
            let text = |field: &str| {
                c.get(field)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            };
            (kind.to_string(), text("reason"), text("message"))
        })
}

/// When the Job finished: its `Complete` or `Failed` condition's transition.
fn finished_at(status: &Value) -> Option<DateTime<Utc>> {
    let conditions = conditions(status);
    ["Complete", "Failed"].iter().find_map(|kind| {
        conditions
            .iter()
            .find(|c| {
                c.get("type").and_then(Value::as_str) == Some(kind)
                    && c.get("status").and_then(Value::as_str) == Some("True")
            })
            .map(|c| {
                c.get("lastTransitionTime")
                    .and_then(Value::as_str)
                    .and_then(crate::object::parse_timestamp)
                    .unwrap_or_else(Utc::now)
            })
    })
}

/// Sets condition `kind` as upstream's Job conditions are set: `lastProbeTime` and
/// `lastTransitionTime` move when the status changes.
fn set_condition(
    conditions: &mut Vec<Value>,
    kind: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: DateTime<Utc>,
) {
    let now = object::timestamp(now);
    let condition = json!({
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastProbeTime": now,
        "lastTransitionTime": now,
    });
    match conditions
        .iter_mut()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(kind))
    {
        Some(existing) if existing.get("status").and_then(Value::as_str) == Some(status) => {}
        Some(existing) => *existing = condition,
        None => conditions.push(condition),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deleted_pod_that_had_not_succeeded_counts_as_failed() {
        let running = json!({"metadata": {}, "status": {"phase": "Running"}});
        let deleted = json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"},
                             "status": {"phase": "Running"}});
        let done = json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"},
                          "status": {"phase": "Succeeded"}});
        assert!(is_active(&running) && !is_failed(&running));
        assert!(!is_active(&deleted) && is_failed(&deleted));
        assert!(!is_active(&done) && !is_failed(&done));
    }

    #[test]
    fn uncounted_pods_round_trip_without_empty_lists() {
        let status = json!({"uncountedTerminatedPods": {"failed": ["a"]}});
        let uncounted = Uncounted::of(&status);
        assert!(uncounted.contains("a") && !uncounted.contains("b"));
        assert_eq!(uncounted.to_json(), json!({"failed": ["a"]}));
        assert_eq!(Uncounted::default().to_json(), json!({}));
    }

    #[test]
    fn a_condition_moves_only_when_its_status_changes() {
        let then = Utc::now() - chrono::Duration::seconds(60);
        let mut conditions = Vec::new();
        set_condition(
            &mut conditions,
            "Suspended",
            "True",
            "JobSuspended",
            "Job suspended",
            then,
        );
        set_condition(
            &mut conditions,
            "Suspended",
            "True",
            "JobSuspended",
            "Job suspended",
            Utc::now(),
        );
        assert_eq!(conditions[0]["lastTransitionTime"], object::timestamp(then));
        set_condition(
            &mut conditions,
            "Suspended",
            "False",
            "JobResumed",
            "Job resumed",
            Utc::now(),
        );
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0]["reason"], "JobResumed");
    }
}
