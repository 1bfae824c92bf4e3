//! Events as two views of one store (issue 16): what kube-runtime's `Recorder` publishes
//! through `events.k8s.io/v1` is what `kubectl describe` and `kubectl get events` read through
//! `core/v1`, and a core Event is listed, watched and field-selected through `events.k8s.io`.
//! Upstream's validation of writes through `events.k8s.io` refuses bad events with a 422 and
//! stores nothing.

mod common;

use common::{Env, kube_client, resource_version, watch_until};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Resource;
use kube::api::{Api, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use serde_json::Value;

const CONTROLLER: &str = "example.com/widget-operator";

fn names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|item| {
            item["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_recorder_publishes_shows_in_kubectl_describe_and_in_both_apis() {
    let env = tokio::task::spawn_blocking(Env::start)
        .await
        .expect("start");
    let client = kube_client(&env.server).await;
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let web = config_maps
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({
                "metadata": {"name": "web"}, "data": {"colour": "blue"},
            }))
            .expect("ConfigMap"),
        )
        .await
        .expect("create the ConfigMap");
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: CONTROLLER.into(),
            instance: Some("operator-0".into()),
        },
    );
    let synced = Event {
        type_: EventType::Normal,
        reason: "Synced".into(),
        note: Some("the widget matches its spec".into()),
        action: "Reconcile".into(),
        secondary: None,
    };
    let reference = web.object_ref(&());
    // The first publish creates the Event; the second patches in a series (count 2), both
    // through events.k8s.io/v1.
    recorder
        .publish(&synced, &reference)
        .await
        .expect("create the Event through events.k8s.io");
    recorder
        .publish(&synced, &reference)
        .await
        .expect("patch the Event's series through events.k8s.io");

    tokio::task::spawn_blocking(move || {
        let described = env.ok(&["describe", "configmap", "web"]);
        for expected in ["Synced", "the widget matches its spec", CONTROLLER] {
            assert!(
                described.contains(expected),
                "kubectl describe shows no {expected:?}:\n{described}"
            );
        }

        let core = env.get_json(&[
            "events",
            "--field-selector",
            "involvedObject.name=web,involvedObject.kind=ConfigMap",
        ]);
        let [event] = core["items"].as_array().expect("items").as_slice() else {
            panic!("one core Event about the ConfigMap, got {core}");
        };
        assert_eq!(event["message"], "the widget matches its spec");
        assert_eq!(event["reportingComponent"], CONTROLLER);
        assert_eq!(
            event["involvedObject"]["uid"],
            reference.uid.clone().unwrap_or_default()
        );
        assert_eq!(event["series"]["count"], 2, "the Recorder's patch: {event}");
        assert!(event.get("regarding").is_none() && event.get("note").is_none());
        let name = event["metadata"]["name"]
            .as_str()
            .expect("name")
            .to_string();

        let events_api = env.get_json(&["events.events.k8s.io", &name]);
        assert_eq!(events_api["apiVersion"], "events.k8s.io/v1");
        assert_eq!(events_api["note"], "the widget matches its spec");
        assert_eq!(events_api["regarding"]["name"], "web");
        assert_eq!(events_api["reportingController"], CONTROLLER);
        assert_eq!(
            events_api["metadata"]["resourceVersion"], event["metadata"]["resourceVersion"],
            "one object, one resourceVersion"
        );

        // Field labels of each view, and a miss, so the selector is known to filter.
        let selected = env.get_json(&[
            "events.events.k8s.io",
            "--field-selector",
            "regarding.name=web,reportingController=example.com/widget-operator",
        ]);
        assert_eq!(names(&selected), std::slice::from_ref(&name));
        let missed = env.get_json(&[
            "events.events.k8s.io",
            "--field-selector",
            "regarding.name=other",
        ]);
        assert!(names(&missed).is_empty(), "{missed}");
        let refused = env.run(&[
            "get",
            "events.events.k8s.io",
            "--field-selector",
            "involvedObject.name=web",
        ]);
        assert!(
            refused.code != Some(0)
                && refused
                    .stderr
                    .contains("field label not supported: involvedObject.name"),
            "the core label is not one of events.k8s.io's: {}",
            refused.describe()
        );

        // An update through events.k8s.io may not rewrite the event (upstream's immutable
        // fields, named as core's), and a delete through it removes the core Event.
        let rewrite = env.run(&[
            "patch",
            "events.events.k8s.io",
            &name,
            "--type=merge",
            "-p",
            r#"{"note":"something else"}"#,
        ]);
        assert!(
            rewrite.code != Some(0)
                && rewrite
                    .stderr
                    .contains("message: Invalid value: \"something else\": field is immutable"),
            "{}",
            rewrite.describe()
        );
        env.ok(&["delete", "events.events.k8s.io", &name]);
        let gone = env.run(&["get", "event", &name]);
        assert!(
            gone.code != Some(0) && gone.stderr.contains("NotFound"),
            "deleted through one view, gone from the other: {}",
            gone.describe()
        );
    })
    .await
    .expect("kubectl checks");
}

const LEGACY_EVENT: &str = r#"
apiVersion: v1
kind: Event
metadata: {name: web.legacy, namespace: default}
involvedObject: {kind: Pod, name: web-0, namespace: default}
reason: Killing
message: Stopping container web
type: Normal
source: {component: kubelet, host: node-a}
count: 3
firstTimestamp: "2026-11-28T10:00:00Z"
lastTimestamp: "2026-11-28T10:05:00Z"
"#;

#[test]
fn a_core_event_is_read_watched_and_selected_through_events_k8s_io() {
    let env = Env::start();
    let listed = env.ok(&["get", "--raw", "/api/v1/namespaces/default/events"]);
    let before = resource_version(&serde_json::from_str(&listed).expect("an EventList"));
    env.ok_with_stdin(&["create", "-f", "-"], LEGACY_EVENT);

    let served = env.get_json(&["events.events.k8s.io", "web.legacy"]);
    assert_eq!(served["apiVersion"], "events.k8s.io/v1");
    assert_eq!(served["note"], "Stopping container web");
    assert_eq!(served["regarding"]["name"], "web-0");
    assert_eq!(served["deprecatedSource"]["component"], "kubelet");
    assert_eq!(served["deprecatedCount"], 3);
    assert_eq!(served["deprecatedLastTimestamp"], "2026-11-28T10:05:00Z");
    assert!(served.get("message").is_none() && served.get("involvedObject").is_none());

    // The watch cache delivers the core write in the events.k8s.io form.
    let events = watch_until(
        &env.server,
        "/apis/events.k8s.io/v1/namespaces/default/events?",
        before,
        |kind, object| kind == "ADDED" && object["metadata"]["name"] == "web.legacy",
    );
    let (_, kind, object) = events.last().expect("a watch event");
    assert_eq!(kind, "ADDED");
    assert_eq!(object["apiVersion"], "events.k8s.io/v1");
    assert_eq!(object["regarding"]["kind"], "Pod");
    assert!(object.get("involvedObject").is_none(), "{object}");

    // core/v1's `source` label reads `source.component`, as upstream's.
    let by_source = env.get_json(&["events", "--field-selector", "source=kubelet"]);
    assert_eq!(names(&by_source), ["web.legacy"]);
    let not_by_source = env.get_json(&["events", "--field-selector", "source=scheduler"]);
    assert!(names(&not_by_source).is_empty(), "{not_by_source}");

    // `kubectl get events.events.k8s.io` prints it with upstream's columns.
    let table = env.ok(&["get", "events.events.k8s.io"]);
    assert!(
        table.contains("Killing") && table.contains("pod/web-0"),
        "{table}"
    );
}

#[test]
fn a_bad_event_through_events_k8s_io_is_refused_and_nothing_is_stored() {
    let env = Env::start();
    let bad = r#"
apiVersion: events.k8s.io/v1
kind: Event
metadata: {name: bad, namespace: default}
regarding: {kind: ConfigMap, name: web, namespace: default}
reason: Synced
type: Fatal
deprecatedCount: 2
"#;
    let refused = env.run_with_stdin(&["create", "-f", "-"], bad);
    assert!(refused.code != Some(0), "{}", refused.describe());
    // kubectl prints the Status's causes one per line.
    for cause in [
        r#"The Event "bad" is invalid"#,
        "* eventTime: Required value",
        r#"* type: Invalid value: "": has invalid value: Fatal"#,
        r#"* count: Invalid value: "": needs to be unset"#,
    ] {
        assert!(
            refused.stderr.contains(cause),
            "{cause}: {}",
            refused.describe()
        );
    }
    let missing = env.run(&["get", "event", "bad"]);
    assert!(
        missing.code != Some(0) && missing.stderr.contains("NotFound"),
        "{}",
        missing.describe()
    );

    // A core Event in one namespace about an object in another is refused by the legacy
    // rules, which both views share.
    let elsewhere =
        LEGACY_EVENT.replace("namespace: default}\nreason", "namespace: other}\nreason");
    assert!(elsewhere.contains("namespace: other"));
    let refused = env.run_with_stdin(&["create", "-f", "-"], &elsewhere);
    assert!(
        refused.code != Some(0)
            && refused
                .stderr
                .contains(r#"involvedObject.namespace: Invalid value: "other": does not match event.namespace"#),
        "{}", refused.describe()
    );
}
