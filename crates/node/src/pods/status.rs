//! A Pod's status as the kubelet computes it, from what the agent knows about its containers:
//! the phase (`getPhase`), the conditions it owns (`PodReadyToStartContainers`, `Initialized`,
//! `ContainersReady`, `Ready`) and the container statuses. Pure: no I/O, no clock (callers pass
//! the times), so every rule has a unit test.
//!
//! Differences from kubelet 1.33: no sidecar (restartable init) containers and no readiness
//! gates (a gate's condition is never looked at: `Ready` follows `ContainersReady`).

use std::collections::BTreeMap;

use serde_json::{Value, json};

/// `spec.restartPolicy` (absent means `Always`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RestartPolicy {
    Always,
    OnFailure,
    Never,
}

impl RestartPolicy {
    pub(crate) fn parse(value: Option<&str>) -> RestartPolicy {
        match value {
            Some("Never") => RestartPolicy::Never,
            Some("OnFailure") => RestartPolicy::OnFailure,
            _ => RestartPolicy::Always,
        }
    }

    /// Whether a container that exited with `exit_code` is started again.
    pub(crate) fn restarts(self, exit_code: i32) -> bool {
        match self {
            RestartPolicy::Always => true,
            RestartPolicy::OnFailure => exit_code != 0,
            RestartPolicy::Never => false,
        }
    }
}

/// `status.phase`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    Pending,
    Running,
    Succeeded,
    Failed,
}

impl Phase {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Running => "Running",
            Phase::Succeeded => "Succeeded",
            Phase::Failed => "Failed",
        }
    }

    pub(crate) fn is_terminal(self) -> bool {
        matches!(self, Phase::Succeeded | Phase::Failed)
    }

    pub(crate) fn parse(value: Option<&str>) -> Option<Phase> {
        match value? {
            "Pending" => Some(Phase::Pending),
            "Running" => Some(Phase::Running),
            "Succeeded" => Some(Phase::Succeeded),
            "Failed" => Some(Phase::Failed),
            _ => None,
        }
    }
}

/// `containerStatuses[].state.terminated` (and `lastState.terminated`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Terminated {
    pub exit_code: i32,
    /// The signal that ended the process, when one did (the kubelet never fills this in; the
    /// process runtime knows it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// `Completed`, `Error`, `StartError` or `ContainerStatusUnknown`.
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    pub finished_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_id: Option<String>,
}

impl Terminated {
    /// The reason the kubelet gives a process that exited with `exit_code`.
    pub(crate) fn reason_for(exit_code: i32) -> &'static str {
        if exit_code == 0 { "Completed" } else { "Error" }
    }

    fn to_json(&self) -> Value {
        let mut terminated = json!({
            "exitCode": self.exit_code,
            "reason": self.reason,
            "finishedAt": self.finished_at,
        });
        if let Some(signal) = self.signal {
            terminated["signal"] = json!(signal);
        }
        if let Some(message) = &self.message {
            terminated["message"] = json!(message);
        }
        if let Some(started_at) = &self.started_at {
            terminated["startedAt"] = json!(started_at);
        }
        if let Some(container_id) = &self.container_id {
            terminated["containerID"] = json!(container_id);
        }
        terminated
    }
}

/// `containerStatuses[].state`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum StateView {
    Waiting {
        reason: String,
        message: Option<String>,
    },
    Running {
        started_at: String,
    },
    Terminated(Terminated),
}

/// What the status needs to know about one container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ContainerView {
    pub name: String,
    pub image: String,
    pub state: StateView,
    pub last_terminated: Option<Terminated>,
    pub restart_count: u32,
    pub ready: bool,
    pub started: bool,
    pub container_id: Option<String>,
}

impl ContainerView {
    fn is_running(&self) -> bool {
        matches!(self.state, StateView::Running { .. })
    }

    fn terminated(&self) -> Option<&Terminated> {
        match &self.state {
            StateView::Terminated(terminated) => Some(terminated),
            _ => None,
        }
    }

    /// `containerStatuses[]` as the kubelet writes it.
    pub(crate) fn to_json(&self) -> Value {
        let state = match &self.state {
            StateView::Waiting { reason, message } => {
                let mut waiting = json!({ "reason": reason });
                if let Some(message) = message {
                    waiting["message"] = json!(message);
                }
                json!({ "waiting": waiting })
            }
            StateView::Running { started_at } => json!({ "running": { "startedAt": started_at } }),
            StateView::Terminated(terminated) => json!({ "terminated": terminated.to_json() }),
        };
        let last_state = match &self.last_terminated {
            Some(terminated) => json!({ "terminated": terminated.to_json() }),
            None => json!({}),
        };
        let mut status = json!({
            "name": self.name,
            "image": self.image,
            // No image is pulled, so there is no digest to report.
            "imageID": "",
            "state": state,
            "lastState": last_state,
            "ready": self.ready,
            "restartCount": self.restart_count,
            "started": self.started,
        });
        if let Some(container_id) = &self.container_id {
            status["containerID"] = json!(container_id);
        }
        status
    }
}

/// `getPhase` of kubelet 1.33 (`pkg/kubelet/kubelet_pods.go`), sidecars aside.
/// `pod_is_terminal`: the agent has stopped every container for good (the pod was deleted),
/// so no restart policy applies any more.
pub(crate) fn phase(
    policy: RestartPolicy,
    init: &[ContainerView],
    app: &[ContainerView],
    pod_is_terminal: bool,
) -> Phase {
    let mut pending_initialization = 0;
    let mut failed_initialization = 0;
    for container in init {
        match &container.state {
            StateView::Running { .. } => pending_initialization += 1,
            StateView::Terminated(terminated) => {
                if terminated.exit_code != 0 {
                    failed_initialization += 1;
                }
            }
            StateView::Waiting { .. } => match &container.last_terminated {
                Some(last) if last.exit_code != 0 => failed_initialization += 1,
                Some(_) => {}
                None => pending_initialization += 1,
            },
        }
    }
    let (mut running, mut waiting, mut stopped, mut succeeded) = (0, 0, 0, 0);
    for container in app {
        match &container.state {
            StateView::Running { .. } => running += 1,
            StateView::Terminated(terminated) => {
                stopped += 1;
                if terminated.exit_code == 0 {
                    succeeded += 1;
                }
            }
            StateView::Waiting { .. } => {
                if container.last_terminated.is_some() {
                    stopped += 1;
                } else {
                    waiting += 1;
                }
            }
        }
    }
    if failed_initialization > 0 && policy == RestartPolicy::Never {
        return Phase::Failed;
    }
    let any_regular_started = any_regular_container_started(app);
    if (pending_initialization > 0 && !any_regular_started) || waiting > 0 {
        return Phase::Pending;
    }
    if running > 0 {
        return Phase::Running;
    }
    if stopped > 0 {
        if pod_is_terminal {
            return if stopped == succeeded {
                Phase::Succeeded
            } else {
                Phase::Failed
            };
        }
        if policy == RestartPolicy::Always {
            return Phase::Running;
        }
        if stopped == succeeded {
            return Phase::Succeeded;
        }
        if policy == RestartPolicy::Never {
            return Phase::Failed;
        }
        return Phase::Running;
    }
    Phase::Pending
}

/// `HasAnyRegularContainerStarted`: some app container is running or has run.
fn any_regular_container_started(app: &[ContainerView]) -> bool {
    app.iter().any(|container| {
        matches!(
            container.state,
            StateView::Running { .. } | StateView::Terminated(_)
        ) || container.last_terminated.is_some()
    })
}

/// One of the conditions the kubelet owns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Condition {
    pub kind: &'static str,
    pub status: bool,
    pub reason: Option<String>,
    pub message: Option<String>,
}

impl Condition {
    fn new(kind: &'static str, status: bool) -> Condition {
        Condition {
            kind,
            status,
            reason: None,
            message: None,
        }
    }

    fn because(mut self, reason: &str, message: Option<String>) -> Condition {
        self.reason = Some(reason.to_string());
        self.message = message;
        self
    }

    /// The condition as JSON, with `lastTransitionTime`.
    pub(crate) fn to_json(&self, last_transition_time: &str) -> Value {
        let mut condition = json!({
            "type": self.kind,
            "status": if self.status { "True" } else { "False" },
            "lastProbeTime": null,
            "lastTransitionTime": last_transition_time,
        });
        if let Some(reason) = &self.reason {
            condition["reason"] = json!(reason);
        }
        if let Some(message) = &self.message {
            condition["message"] = json!(message);
        }
        condition
    }
}

/// The condition types the agent writes; every other one (`PodScheduled`, `DisruptionTarget`)
/// is left as its writer set it.
pub(crate) const OWNED_CONDITIONS: [&str; 4] = [
    "PodReadyToStartContainers",
    "Initialized",
    "ContainersReady",
    "Ready",
];

/// Go's `fmt` of a `[]string`: `[a b]`.
fn go_list(names: &[&str]) -> String {
    format!("[{}]", names.join(" "))
}

/// The kubelet's conditions, in its order. `sandbox_ready`: the pod's directory exists and
/// its processes may run (false once the pod has terminated).
pub(crate) fn conditions(
    init: &[ContainerView],
    app: &[ContainerView],
    phase: Phase,
    sandbox_ready: bool,
) -> Vec<Condition> {
    vec![
        Condition::new("PodReadyToStartContainers", sandbox_ready),
        initialized(init, app, phase),
        ready("Ready", app, phase),
        ready("ContainersReady", app, phase),
    ]
}

/// `GeneratePodInitializedCondition`.
fn initialized(init: &[ContainerView], app: &[ContainerView], phase: Phase) -> Condition {
    if init.is_empty() {
        return Condition::new("Initialized", true);
    }
    if phase == Phase::Succeeded {
        return Condition::new("Initialized", true).because("PodCompleted", None);
    }
    if any_regular_container_started(app) {
        return Condition::new("Initialized", true);
    }
    let incomplete: Vec<&str> = init
        .iter()
        .filter(|c| c.terminated().is_none_or(|t| t.exit_code != 0))
        .map(|c| c.name.as_str())
        .collect();
    if incomplete.is_empty() {
        return Condition::new("Initialized", true);
    }
    Condition::new("Initialized", false).because(
        "ContainersNotInitialized",
        Some(format!(
            "containers with incomplete status: {}",
            go_list(&incomplete)
        )),
    )
}

/// `GenerateContainersReadyCondition` and `GeneratePodReadyCondition` (no readiness gates).
fn ready(kind: &'static str, app: &[ContainerView], phase: Phase) -> Condition {
    match phase {
        Phase::Succeeded => return Condition::new(kind, false).because("PodCompleted", None),
        Phase::Failed => return Condition::new(kind, false).because("PodFailed", None),
        _ => {}
    }
    let unready: Vec<&str> = app
        .iter()
        .filter(|c| !c.ready)
        .map(|c| c.name.as_str())
        .collect();
    if unready.is_empty() {
        return Condition::new(kind, true);
    }
    Condition::new(kind, false).because(
        "ContainersNotReady",
        Some(format!(
            "containers with unready status: {}",
            go_list(&unready)
        )),
    )
}

/// Keeps each condition's `lastTransitionTime` while its status stays the same, and stamps
/// `now` on a change. `previous` maps type to (status, lastTransitionTime) and is updated.
pub(crate) fn stamp_conditions(
    conditions: &[Condition],
    previous: &mut BTreeMap<String, (bool, String)>,
    now: &str,
) -> Vec<Value> {
    conditions
        .iter()
        .map(|condition| {
            let entry = previous
                .entry(condition.kind.to_string())
                .or_insert_with(|| (condition.status, now.to_string()));
            if entry.0 != condition.status {
                *entry = (condition.status, now.to_string());
            }
            condition.to_json(&entry.1)
        })
        .collect()
}

/// What `TerminatePod` does once a pod is stopped for good: a container that is not
/// terminated becomes `ContainerStatusUnknown` with exit code 137 (its outcome is not known,
/// so it is never counted as a success). App containers are left waiting if none ever ran
/// and the init containers had not finished (the init failure already tells the story).
pub(crate) fn terminate_unknown(init: &mut [ContainerView], app: &mut [ContainerView], now: &str) {
    let app_could_have_run = init.is_empty() || any_regular_container_started(app);
    for container in init.iter_mut() {
        mark_unknown(container, now);
    }
    if app_could_have_run {
        for container in app.iter_mut() {
            mark_unknown(container, now);
        }
    }
}

/// The message upstream writes for a container whose end the kubelet did not observe.
pub(crate) const STATUS_UNKNOWN_MESSAGE: &str =
    "The container could not be located when the pod was terminated";

fn mark_unknown(container: &mut ContainerView, now: &str) {
    if container.terminated().is_some() {
        return;
    }
    container.ready = false;
    container.started = false;
    container.state = StateView::Terminated(Terminated {
        exit_code: 137,
        signal: None,
        reason: "ContainerStatusUnknown".to_string(),
        message: Some(STATUS_UNKNOWN_MESSAGE.to_string()),
        started_at: None,
        finished_at: now.to_string(),
        container_id: None,
    });
}

/// Whether every app container has run to an end that the restart policy will not restart.
pub(crate) fn all_done(policy: RestartPolicy, app: &[ContainerView]) -> bool {
    !app.is_empty()
        && app.iter().all(|container| {
            !container.is_running()
                && container
                    .terminated()
                    .is_some_and(|terminated| !policy.restarts(terminated.exit_code))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiting(name: &str) -> ContainerView {
        ContainerView {
            name: name.to_string(),
            image: "busybox".to_string(),
            state: StateView::Waiting {
                reason: "ContainerCreating".to_string(),
                message: None,
            },
            last_terminated: None,
            restart_count: 0,
            ready: false,
            started: false,
            container_id: None,
        }
    }

    fn running(name: &str, ready: bool) -> ContainerView {
        ContainerView {
            state: StateView::Running {
                started_at: "2025-01-01T00:00:00Z".to_string(),
            },
            ready,
            started: true,
            ..waiting(name)
        }
    }

    fn exited(code: i32) -> Terminated {
        Terminated {
            exit_code: code,
            signal: None,
            reason: Terminated::reason_for(code).to_string(),
            message: None,
            started_at: None,
            finished_at: "2025-01-01T00:00:01Z".to_string(),
            container_id: None,
        }
    }

    fn terminated(name: &str, code: i32) -> ContainerView {
        ContainerView {
            state: StateView::Terminated(exited(code)),
            ..waiting(name)
        }
    }

    fn backing_off(name: &str, last_code: i32) -> ContainerView {
        ContainerView {
            state: StateView::Waiting {
                reason: "CrashLoopBackOff".to_string(),
                message: None,
            },
            last_terminated: Some(exited(last_code)),
            restart_count: 1,
            ..waiting(name)
        }
    }

    use RestartPolicy::{Always, Never, OnFailure};

    #[test]
    fn phase_follows_the_kubelets_get_phase() {
        // Nothing started yet.
        assert_eq!(phase(Always, &[], &[waiting("a")], false), Phase::Pending);
        // One running, one waiting to start: still Pending.
        assert_eq!(
            phase(Always, &[], &[running("a", true), waiting("b")], false),
            Phase::Pending
        );
        assert_eq!(
            phase(Always, &[], &[running("a", false)], false),
            Phase::Running
        );
        // Crash-looping after a run counts as stopped: Running under Always and OnFailure.
        assert_eq!(
            phase(Always, &[], &[backing_off("a", 1)], false),
            Phase::Running
        );
        assert_eq!(
            phase(OnFailure, &[], &[backing_off("a", 1)], false),
            Phase::Running
        );
        // All exited 0: Succeeded unless Always restarts them.
        assert_eq!(
            phase(OnFailure, &[], &[terminated("a", 0)], false),
            Phase::Succeeded
        );
        assert_eq!(
            phase(Never, &[], &[terminated("a", 0), terminated("b", 0)], false),
            Phase::Succeeded
        );
        assert_eq!(
            phase(Always, &[], &[terminated("a", 0)], false),
            Phase::Running
        );
        // A failure under Never: Failed.
        assert_eq!(
            phase(Never, &[], &[terminated("a", 3)], false),
            Phase::Failed
        );
        // Once the pod is terminal (deleted and stopped), the policy no longer matters.
        assert_eq!(
            phase(Always, &[], &[terminated("a", 0)], true),
            Phase::Succeeded
        );
        assert_eq!(
            phase(Always, &[], &[terminated("a", 143)], true),
            Phase::Failed
        );
    }

    #[test]
    fn init_containers_hold_the_pod_pending_and_a_failure_under_never_fails_it() {
        let app = [waiting("app")];
        assert_eq!(
            phase(Always, &[running("init", false)], &app, false),
            Phase::Pending
        );
        assert_eq!(
            phase(Always, &[waiting("init")], &app, false),
            Phase::Pending
        );
        // A failed init container restarting (OnFailure): Pending.
        assert_eq!(
            phase(OnFailure, &[backing_off("init", 1)], &app, false),
            Phase::Pending
        );
        assert_eq!(
            phase(Never, &[terminated("init", 1)], &app, false),
            Phase::Failed
        );
        // Init done, app running.
        assert_eq!(
            phase(
                Never,
                &[terminated("init", 0)],
                &[running("app", true)],
                false
            ),
            Phase::Running
        );
    }

    #[test]
    fn conditions_name_the_containers_that_hold_them() {
        let init = [terminated("one", 0), running("two", false)];
        let app = [waiting("app"), waiting("side")];
        let conditions = conditions(&init, &app, Phase::Pending, true);
        let by_kind: BTreeMap<&str, &Condition> = conditions.iter().map(|c| (c.kind, c)).collect();
        assert!(by_kind["PodReadyToStartContainers"].status);
        let initialized = by_kind["Initialized"];
        assert!(!initialized.status);
        assert_eq!(
            initialized.reason.as_deref(),
            Some("ContainersNotInitialized")
        );
        assert_eq!(
            initialized.message.as_deref(),
            Some("containers with incomplete status: [two]")
        );
        let ready = by_kind["Ready"];
        assert_eq!(ready.reason.as_deref(), Some("ContainersNotReady"));
        assert_eq!(
            ready.message.as_deref(),
            Some("containers with unready status: [app side]")
        );
        assert_eq!(by_kind["ContainersReady"].message, ready.message);

        let conditions = conditions_of(&[], &[running("a", true)], Phase::Running);
        assert!(conditions.iter().all(|c| c.status), "{conditions:?}");
    }

    fn conditions_of(
        init: &[ContainerView],
        app: &[ContainerView],
        phase: Phase,
    ) -> Vec<Condition> {
        conditions(init, app, phase, true)
    }

    #[test]
    fn terminal_phases_make_ready_false_with_the_phase_as_reason() {
        let done = conditions_of(&[], &[terminated("a", 0)], Phase::Succeeded);
        let ready = done
            .iter()
            .find(|c| c.kind == "Ready")
            .map(|c| c.reason.clone());
        assert_eq!(ready, Some(Some("PodCompleted".to_string())));
        let failed = conditions_of(&[], &[terminated("a", 1)], Phase::Failed);
        let ready = failed
            .iter()
            .find(|c| c.kind == "ContainersReady")
            .map(|c| c.reason.clone());
        assert_eq!(ready, Some(Some("PodFailed".to_string())));
    }

    #[test]
    fn last_transition_time_moves_only_when_the_status_changes() {
        let mut previous = BTreeMap::new();
        let not_ready = [Condition::new("Ready", false)];
        let first = stamp_conditions(&not_ready, &mut previous, "t1");
        assert_eq!(first[0]["lastTransitionTime"], "t1");
        let again = stamp_conditions(&not_ready, &mut previous, "t2");
        assert_eq!(again[0]["lastTransitionTime"], "t1");
        let ready = [Condition::new("Ready", true)];
        let flipped = stamp_conditions(&ready, &mut previous, "t3");
        assert_eq!(flipped[0]["lastTransitionTime"], "t3");
        assert_eq!(flipped[0]["status"], "True");
    }

    #[test]
    fn a_stopped_pod_reports_unobserved_containers_as_unknown() {
        let mut init = [];
        let mut app = [running("a", true), terminated("b", 0)];
        terminate_unknown(&mut init, &mut app, "t");
        let StateView::Terminated(a) = &app[0].state else {
            panic!("not terminated: {:?}", app[0]);
        };
        assert_eq!(a.exit_code, 137);
        assert_eq!(a.reason, "ContainerStatusUnknown");
        assert_eq!(a.message.as_deref(), Some(STATUS_UNKNOWN_MESSAGE));
        assert_eq!(app[1].state, StateView::Terminated(exited(0)));
        assert_eq!(phase(Always, &init, &app, true), Phase::Failed);

        // Deleted during initialization: the app container never ran and stays waiting.
        let mut init = [running("init", false)];
        let mut app = [waiting("app")];
        terminate_unknown(&mut init, &mut app, "t");
        assert!(matches!(init[0].state, StateView::Terminated(_)));
        assert!(matches!(app[0].state, StateView::Waiting { .. }));
    }

    #[test]
    fn all_done_applies_the_restart_policy() {
        assert!(all_done(Never, &[terminated("a", 1), terminated("b", 0)]));
        assert!(!all_done(OnFailure, &[terminated("a", 1)]));
        assert!(all_done(OnFailure, &[terminated("a", 0)]));
        assert!(!all_done(Always, &[terminated("a", 0)]));
        assert!(!all_done(Never, &[terminated("a", 0), running("b", true)]));
    }

    #[test]
    fn container_status_json_has_the_kubelets_fields() {
        let mut view = backing_off("c", 2);
        view.container_id = Some("process://42".to_string());
        let status = view.to_json();
        assert_eq!(status["state"]["waiting"]["reason"], "CrashLoopBackOff");
        assert_eq!(status["lastState"]["terminated"]["exitCode"], 2);
        assert_eq!(status["lastState"]["terminated"]["reason"], "Error");
        assert_eq!(status["restartCount"], 1);
        assert_eq!(status["containerID"], "process://42");
        assert_eq!(status["imageID"], "");
        assert_eq!(status["ready"], false);
        assert_eq!(status["started"], false);
    }
}
