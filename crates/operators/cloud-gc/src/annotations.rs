//! The per-object switches of external-resource GC, as annotations on a `CloudCluster`:
//! [`GC_ANNOTATION`] (opt out) and [`TASKS_ANNOTATION`] (what is collected).
//!
//! # Guarantees
//! - A tasks value is accepted only if every entry is a known task: an unknown one is an error
//!   naming it and the valid ones, never ignored (CAPA mapped unknown tasks to a nil function).
//! - The default task set is every task but [`Task::Volume`]: EBS volumes hold data, so they
//!   are collected only when a person asks for them.
//!
//! The same rules run twice: in the API server, which refuses a write that breaks them (see
//! `finale-apiserver`'s `registry::cloud_gc`), and in the operator, which reports them in the
//! `Ready` condition for servers without that check (a real Kubernetes cluster).

use std::collections::BTreeSet;
use std::fmt;

/// `"false"` opts a cluster out of external-resource GC; `"true"` or absent opts it in.
pub const GC_ANNOTATION: &str = "cloud.finale.dev/external-resource-gc";
/// A comma-separated list of [`Task`]s; absent or empty means [`TaskSet::default`].
pub const TASKS_ANNOTATION: &str = "cloud.finale.dev/external-resource-gc-tasks";

/// One kind of cloud resource GC may collect.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Task {
    LoadBalancer,
    TargetGroup,
    SecurityGroup,
    NetworkInterface,
    ElasticIp,
    Volume,
}

impl Task {
    pub const ALL: [Task; 6] = [
        Task::LoadBalancer,
        Task::TargetGroup,
        Task::SecurityGroup,
        Task::NetworkInterface,
        Task::ElasticIp,
        Task::Volume,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Task::LoadBalancer => "load-balancer",
            Task::TargetGroup => "target-group",
            Task::SecurityGroup => "security-group",
            Task::NetworkInterface => "network-interface",
            Task::ElasticIp => "elastic-ip",
            Task::Volume => "volume",
        }
    }

    pub fn parse(text: &str) -> Option<Task> {
        Task::ALL.into_iter().find(|task| task.name() == text)
    }
}

impl fmt::Display for Task {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The tasks a cluster's GC runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskSet(BTreeSet<Task>);

impl Default for TaskSet {
    /// Every task but `volume`.
    fn default() -> Self {
        TaskSet(
            Task::ALL
                .into_iter()
                .filter(|t| *t != Task::Volume)
                .collect(),
        )
    }
}

impl TaskSet {
    pub fn of(tasks: impl IntoIterator<Item = Task>) -> TaskSet {
        TaskSet(tasks.into_iter().collect())
    }

    pub fn contains(&self, task: Task) -> bool {
        self.0.contains(&task)
    }

    pub fn iter(&self) -> impl Iterator<Item = Task> + '_ {
        self.0.iter().copied()
    }

    /// `load-balancer,target-group,…`, the annotation's form.
    pub fn to_annotation(&self) -> String {
        self.iter().map(Task::name).collect::<Vec<_>>().join(",")
    }

    /// Parses the annotation's value; an empty value means the default.
    pub fn parse(value: &str) -> Result<TaskSet, String> {
        let mut tasks = BTreeSet::new();
        let mut unknown = Vec::new();
        for entry in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            match Task::parse(entry) {
                Some(task) => {
                    tasks.insert(task);
                }
                None => unknown.push(format!("{entry:?}")),
            }
        }
        if !unknown.is_empty() {
            return Err(format!(
                "unknown external-resource GC task{} {}: the tasks are {}",
                if unknown.len() == 1 { "" } else { "s" },
                unknown.join(", "),
                Task::ALL.map(Task::name).join(", ")
            ));
        }
        if tasks.is_empty() {
            return Ok(TaskSet::default());
        }
        Ok(TaskSet(tasks))
    }
}

/// Reads the opt-out annotation: `Ok(None)` when absent.
pub fn gc_switch(value: Option<&str>) -> Result<Option<bool>, String> {
    match value.map(str::trim) {
        None => Ok(None),
        Some("true") => Ok(Some(true)),
        Some("false") => Ok(Some(false)),
        Some(other) => Err(format!(
            "{GC_ANNOTATION} must be \"true\" or \"false\", not {other:?}"
        )),
    }
}

/// Every problem with the two annotations, as `(annotation, message)`.
pub fn problems(gc: Option<&str>, tasks: Option<&str>) -> Vec<(&'static str, String)> {
    let mut problems = Vec::new();
    if let Err(message) = gc_switch(gc) {
        problems.push((GC_ANNOTATION, message));
    }
    if let Some(tasks) = tasks
        && let Err(message) = TaskSet::parse(tasks)
    {
        problems.push((TASKS_ANNOTATION, message));
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_collects_everything_but_volumes() {
        let default = TaskSet::default();
        assert!(!default.contains(Task::Volume));
        assert_eq!(default.iter().count(), 5);
        assert_eq!(TaskSet::parse(" , ").expect("empty"), default);
    }

    #[test]
    fn an_unknown_task_is_rejected_by_name() {
        let error = TaskSet::parse("load-balancer,volumes,nat").expect_err("unknown");
        assert!(error.contains("\"volumes\", \"nat\""), "{error}");
        assert!(error.contains("load-balancer, target-group"), "{error}");
        let tasks = TaskSet::parse("volume, security-group").expect("valid");
        assert_eq!(tasks.to_annotation(), "security-group,volume");
    }

    #[test]
    fn the_switch_is_a_strict_boolean() {
        assert_eq!(gc_switch(None), Ok(None));
        assert_eq!(gc_switch(Some("false")), Ok(Some(false)));
        assert!(gc_switch(Some("no")).is_err());
        assert_eq!(problems(Some("no"), Some("x")).len(), 2);
    }
}
