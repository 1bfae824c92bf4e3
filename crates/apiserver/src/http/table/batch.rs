//! Printers for `batch/v1`: jobs and cron jobs.

use serde_json::{Value, json};

use super::{
    AGE, CONTAINERS, Clock, Column, IMAGES, NAME, condition_true, container_cells, count,
    creation_age, flag, format_label_selector, human_duration, int, list, name_cell, optional_text,
    text,
};
use crate::object;

pub(super) const JOB_COLUMNS: &[Column] = &[
    NAME,
    Column::string(
        "Status",
        "The job's state: Running, Complete, Failed, Suspended, …",
    ),
    Column::string(
        "Completions",
        "Succeeded pods out of the completions wanted.",
    ),
    Column::string("Duration", "How long the job ran, or has been running."),
    AGE,
    CONTAINERS,
    IMAGES,
    Column::string("Selector", "Label selector of the job's pods.").wide(),
];

pub(super) const CRON_JOB_COLUMNS: &[Column] = &[
    NAME,
    Column::string("Schedule", "When jobs are started, in cron format."),
    Column::string(
        "Timezone",
        "The time zone the schedule is read in (the controller's own when <none>).",
    ),
    Column::new(
        "Suspend",
        "boolean",
        "Whether starting new jobs is suspended.",
    ),
    Column::new("Active", "integer", "Number of jobs running now."),
    Column::string("Last Schedule", "Time since a job was last scheduled."),
    AGE,
    CONTAINERS,
    IMAGES,
    Column::string("Selector", "Label selector of the jobs' pods.").wide(),
];

pub(super) fn job_cells(item: &Value, clock: &Clock) -> Vec<Value> {
    let succeeded = int(item, "/status/succeeded");
    let completions = match item.pointer("/spec/completions").and_then(Value::as_i64) {
        Some(completions) => format!("{succeeded}/{completions}"),
        None => match int(item, "/spec/parallelism") {
            parallelism if parallelism > 1 => format!("{succeeded}/1 of {parallelism}"),
            _ => format!("{succeeded}/1"),
        },
    };
    let started = Clock::parse(optional_text(item, "/status/startTime"));
    let completed = Clock::parse(optional_text(item, "/status/completionTime"));
    let duration = match (started, completed) {
        (None, _) => String::new(),
        (Some(start), None) => human_duration((clock.now - start).num_seconds()),
        (Some(start), Some(end)) => human_duration((end - start).num_seconds()),
    };
    let conditions = list(item, "/status/conditions");
    let status = if condition_true(conditions, "Complete") {
        "Complete"
    } else if condition_true(conditions, "Failed") {
        "Failed"
    } else if object::is_terminating(item) {
        "Terminating"
    } else if condition_true(conditions, "Suspended") {
        "Suspended"
    } else if condition_true(conditions, "FailureTarget") {
        "FailureTarget"
    } else {
        "Running"
    };
    let (containers, images) = container_cells(item, "/spec/template");
    vec![
        name_cell(item),
        json!(status),
        json!(completions),
        json!(duration),
        creation_age(item, clock),
        containers,
        images,
        json!(format_label_selector(item.pointer("/spec/selector"))),
    ]
}

/// `spec.suspend` is defaulted to false, as upstream defaults it; upstream prints it as the
/// words True and False although the column is typed boolean.
pub(super) fn cron_job_cells(item: &Value, clock: &Clock) -> Vec<Value> {
    let time_zone = item
        .pointer("/spec/timeZone")
        .and_then(Value::as_str)
        .unwrap_or("<none>");
    let last_schedule = match optional_text(item, "/status/lastScheduleTime") {
        Some(time) => clock.since(Some(time)),
        None => "<none>".into(),
    };
    let (containers, images) = container_cells(item, "/spec/jobTemplate/spec/template");
    vec![
        name_cell(item),
        json!(text(item, "/spec/schedule")),
        json!(time_zone),
        json!(if flag(item, "/spec/suspend", false) {
            "True"
        } else {
            "False"
        }),
        json!(count(item, "/status/active")),
        json!(last_schedule),
        creation_age(item, clock),
        containers,
        images,
        json!(format_label_selector(
            item.pointer("/spec/jobTemplate/spec/selector")
        )),
    ]
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    #[test]
    fn running_jobs() {
        let resource = builtin("batch", "jobs");
        assert_eq!(
            headers(&resource)
                .iter()
                .map(|(n, _)| n.as_str())
                .collect::<Vec<_>>(),
            [
                "Name",
                "Status",
                "Completions",
                "Duration",
                "Age",
                "Containers",
                "Images",
                "Selector"
            ]
        );
        let job = json!({
            "metadata": meta("backup", 600),
            "spec": {"completions": 3, "parallelism": 2, "template": template(),
                     "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "u-1"}}},
            "status": {"succeeded": 1, "startTime": ago(590)}
        });
        assert_eq!(
            cells(&resource, &job),
            [
                json!("backup"),
                json!("Running"),
                json!("1/3"),
                json!("9m50s"),
                json!("10m"),
                json!("app,log"),
                json!("nginx:1.27,busybox"),
                json!("batch.kubernetes.io/controller-uid=u-1")
            ]
        );
    }

    #[test]
    fn job_completions_and_status() {
        let resource = builtin("batch", "jobs");
        let job = |spec: Value, status: Value| {
            cells(
                &resource,
                &json!({"metadata": meta("j", 600), "spec": spec, "status": status}),
            )
        };
        let c = job(json!({"parallelism": 4}), json!({"succeeded": 2}));
        assert_eq!(
            (&c[1], &c[2], &c[3], &c[7]),
            (
                &json!("Running"),
                &json!("2/1 of 4"),
                &json!(""),
                &json!("<none>")
            )
        );
        let c = job(json!({}), json!({}));
        assert_eq!(c[2], json!("0/1"));
        let c = job(
            json!({"completions": 1}),
            json!({"succeeded": 1, "startTime": ago(500), "completionTime": ago(200),
                   "conditions": [{"type": "Complete", "status": "True"}]}),
        );
        assert_eq!(
            (&c[1], &c[2], &c[3]),
            (&json!("Complete"), &json!("1/1"), &json!("5m"))
        );
        let c = job(
            json!({}),
            json!({"conditions": [{"type": "Failed", "status": "True"}]}),
        );
        assert_eq!(c[1], json!("Failed"));
        let c = job(
            json!({}),
            json!({"conditions": [{"type": "Suspended", "status": "True"}]}),
        );
        assert_eq!(c[1], json!("Suspended"));
        let c = job(
            json!({}),
            json!({"conditions": [{"type": "FailureTarget", "status": "True"}]}),
        );
        assert_eq!(c[1], json!("FailureTarget"));
        let c = job(
            json!({}),
            json!({"conditions": [{"type": "Complete", "status": "False"}]}),
        );
        assert_eq!(c[1], json!("Running"));

        let mut deleted = json!({"metadata": meta("j", 600), "spec": {},
            "status": {"conditions": [{"type": "Suspended", "status": "True"}]}});
        deleted["metadata"]["deletionTimestamp"] = json!(ago(1));
        assert_eq!(cells(&resource, &deleted)[1], json!("Terminating"));
    }

    #[test]
    fn cron_jobs() {
        let resource = builtin("batch", "cronjobs");
        assert_eq!(
            header_line(&resource),
            [
                "Name:string:0",
                "Schedule:string:0",
                "Timezone:string:0",
                "Suspend:boolean:0",
                "Active:integer:0",
                "Last Schedule:string:0",
                "Age:string:0",
                "Containers:string:1",
                "Images:string:1",
                "Selector:string:1"
            ]
        );
        let cron_job = json!({
            "metadata": meta("nightly", 2 * 86_400),
            "spec": {"schedule": "0 3 * * *", "timeZone": "Europe/Paris", "suspend": true,
                     "jobTemplate": {"spec": {"template": template(),
                         "selector": {"matchLabels": {"job": "nightly"}}}}},
            "status": {"active": [{"kind": "Job", "name": "nightly-1"}],
                       "lastScheduleTime": ago(3600)}
        });
        assert_eq!(
            cells(&resource, &cron_job),
            [
                json!("nightly"),
                json!("0 3 * * *"),
                json!("Europe/Paris"),
                json!("True"),
                json!(1),
                json!("60m"),
                json!("2d"),
                json!("app,log"),
                json!("nginx:1.27,busybox"),
                json!("job=nightly")
            ]
        );
        // Never scheduled, no time zone, suspend defaulted to false.
        let fresh = json!({"metadata": meta("new", 5),
            "spec": {"schedule": "@hourly", "jobTemplate": {"spec": {"template": template()}}}});
        assert_eq!(
            cells(&resource, &fresh),
            [
                json!("new"),
                json!("@hourly"),
                json!("<none>"),
                json!("False"),
                json!(0),
                json!("<none>"),
                json!("5s"),
                json!("app,log"),
                json!("nginx:1.27,busybox"),
                json!("<none>")
            ]
        );
    }
}
