//! The built-in kinds Finale stores without running their controllers (issue 16, item 1):
//! discovery as upstream 1.33 lists them, kubectl's create, get, scale and delete, server-side
//! field validation from their k8s-openapi types, and the columns `kubectl get` prints for
//! them (upstream 1.33's Table printers).

mod common;

use common::Env;

/// `kubectl api-resources` rows of upstream 1.33 (NAME SHORTNAMES APIVERSION NAMESPACED KIND,
/// whitespace collapsed) for the kinds added here.
const UPSTREAM_ROWS: &[&str] = &[
    "podtemplates v1 true PodTemplate",
    "replicationcontrollers rc v1 true ReplicationController",
    "endpoints ep v1 true Endpoints",
    "persistentvolumeclaims pvc v1 true PersistentVolumeClaim",
    "persistentvolumes pv v1 false PersistentVolume",
    "limitranges limits v1 true LimitRange",
    "resourcequotas quota v1 true ResourceQuota",
    "controllerrevisions apps/v1 true ControllerRevision",
    "daemonsets ds apps/v1 true DaemonSet",
    "statefulsets sts apps/v1 true StatefulSet",
    "cronjobs cj batch/v1 true CronJob",
    "poddisruptionbudgets pdb policy/v1 true PodDisruptionBudget",
    "ingressclasses networking.k8s.io/v1 false IngressClass",
    "ingresses ing networking.k8s.io/v1 true Ingress",
    "networkpolicies netpol networking.k8s.io/v1 true NetworkPolicy",
    "endpointslices discovery.k8s.io/v1 true EndpointSlice",
    "csidrivers storage.k8s.io/v1 false CSIDriver",
    "csinodes storage.k8s.io/v1 false CSINode",
    "storageclasses sc storage.k8s.io/v1 false StorageClass",
    "volumeattachments storage.k8s.io/v1 false VolumeAttachment",
    "priorityclasses pc scheduling.k8s.io/v1 false PriorityClass",
    "runtimeclasses node.k8s.io/v1 false RuntimeClass",
    "horizontalpodautoscalers hpa autoscaling/v2 true HorizontalPodAutoscaler",
    "mutatingwebhookconfigurations admissionregistration.k8s.io/v1 false MutatingWebhookConfiguration",
    "validatingadmissionpolicies admissionregistration.k8s.io/v1 false ValidatingAdmissionPolicy",
    "validatingadmissionpolicybindings admissionregistration.k8s.io/v1 false ValidatingAdmissionPolicyBinding",
    "validatingwebhookconfigurations admissionregistration.k8s.io/v1 false ValidatingWebhookConfiguration",
    "apiservices apiregistration.k8s.io/v1 false APIService",
    "flowschemas flowcontrol.apiserver.k8s.io/v1 false FlowSchema",
    "prioritylevelconfigurations flowcontrol.apiserver.k8s.io/v1 false PriorityLevelConfiguration",
    "ipaddresses ip networking.k8s.io/v1 false IPAddress",
    "servicecidrs networking.k8s.io/v1 false ServiceCIDR",
    "csistoragecapacities storage.k8s.io/v1 true CSIStorageCapacity",
    "bindings v1 true Binding",
    "componentstatuses cs v1 false ComponentStatus",
    "certificatesigningrequests csr certificates.k8s.io/v1 false CertificateSigningRequest",
];

/// One object of each kind, as a chart would render it.
const MANIFESTS: &str = r#"
apiVersion: v1
kind: PodTemplate
metadata: {name: tpl}
template: {spec: {containers: [{name: c, image: busybox}]}}
---
apiVersion: v1
kind: ReplicationController
metadata: {name: rc}
spec: {replicas: 1, selector: {app: rc}, template: {metadata: {labels: {app: rc}}, spec: {containers: [{name: c, image: busybox}]}}}
---
apiVersion: v1
kind: Endpoints
metadata: {name: ep}
subsets: [{addresses: [{ip: 10.0.0.1}], ports: [{port: 80}]}]
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data}
spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: pv-1}
spec: {capacity: {storage: 1Gi}, accessModes: [ReadWriteOnce], hostPath: {path: /tmp/pv-1}}
---
apiVersion: v1
kind: LimitRange
metadata: {name: limits}
spec: {limits: [{type: Container, default: {cpu: 500m}}]}
---
apiVersion: v1
kind: ResourceQuota
metadata: {name: quota}
spec: {hard: {pods: "10"}}
---
apiVersion: apps/v1
kind: ControllerRevision
metadata: {name: rev-1}
revision: 1
data: {spec: {template: {}}}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent}
spec: {selector: {matchLabels: {app: agent}}, template: {metadata: {labels: {app: agent}}, spec: {containers: [{name: c, image: busybox}]}}}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec: {replicas: 1, serviceName: db, selector: {matchLabels: {app: db}}, template: {metadata: {labels: {app: db}}, spec: {containers: [{name: c, image: busybox}]}}}
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: nightly}
spec: {schedule: "0 3 * * *", jobTemplate: {spec: {template: {spec: {restartPolicy: Never, containers: [{name: c, image: busybox}]}}}}}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: db}
spec: {minAvailable: 1, selector: {matchLabels: {app: db}}}
---
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {name: nginx}
spec: {controller: k8s.io/ingress-nginx}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: web}
spec: {ingressClassName: nginx, rules: [{host: example.com, http: {paths: [{path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}]}}]}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: deny-all}
spec: {podSelector: {}, policyTypes: [Ingress]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-1, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
endpoints: [{addresses: [10.0.0.2]}]
ports: [{port: 80}]
---
apiVersion: storage.k8s.io/v1
kind: CSIDriver
metadata: {name: csi.example.com}
spec: {attachRequired: false}
---
apiVersion: storage.k8s.io/v1
kind: CSINode
metadata: {name: node-1}
spec: {drivers: []}
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: fast}
provisioner: csi.example.com
---
apiVersion: storage.k8s.io/v1
kind: VolumeAttachment
metadata: {name: attach-1}
spec: {attacher: csi.example.com, nodeName: node-1, source: {persistentVolumeName: pv-1}}
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 1000
---
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: gvisor}
handler: runsc
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: db}
spec: {scaleTargetRef: {apiVersion: apps/v1, kind: StatefulSet, name: db}, maxReplicas: 5}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: policy.example.com}
webhooks:
- name: policy.example.com
  clientConfig: {service: {namespace: default, name: policy, path: /validate}}
  rules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}]
  admissionReviewVersions: [v1]
  sideEffects: None
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: defaults.example.com}
webhooks:
- name: defaults.example.com
  clientConfig: {service: {namespace: default, name: defaults}}
  admissionReviewVersions: [v1]
  sideEffects: None
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: replicas-limit}
spec:
  matchConstraints: {resourceRules: [{apiGroups: [apps], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [deployments]}]}
  validations: [{expression: "object.spec.replicas <= 5"}]
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: replicas-limit}
spec: {policyName: replicas-limit, validationActions: [Deny]}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {name: batch}
spec: {type: Limited, limited: {nominalConcurrencyShares: 10, limitResponse: {type: Reject}}}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: batch}
spec: {priorityLevelConfiguration: {name: batch}, matchingPrecedence: 500, rules: [{subjects: [{kind: Group, group: {name: batch}}], resourceRules: [{verbs: ["*"], apiGroups: ["*"], resources: ["*"], namespaces: ["*"]}]}]}
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1beta1.metrics.k8s.io}
spec: {group: metrics.k8s.io, version: v1beta1, groupPriorityMinimum: 100, versionPriority: 100, service: {namespace: kube-system, name: metrics-server}}
---
apiVersion: networking.k8s.io/v1
kind: ServiceCIDR
metadata: {name: extra}
spec: {cidrs: [10.100.0.0/24]}
---
apiVersion: networking.k8s.io/v1
kind: IPAddress
metadata: {name: 10.100.0.10}
spec: {parentRef: {group: "", resource: services, namespace: default, name: web}}
---
apiVersion: storage.k8s.io/v1
kind: CSIStorageCapacity
metadata: {name: fast-zone-a}
storageClassName: fast
capacity: 100Gi
"#;

const CREATED: &[&str] = &[
    "podtemplate/tpl",
    "replicationcontroller/rc",
    "endpoints/ep",
    "persistentvolumeclaim/data",
    "persistentvolume/pv-1",
    "limitrange/limits",
    "resourcequota/quota",
    "controllerrevision.apps/rev-1",
    "daemonset.apps/agent",
    "statefulset.apps/db",
    "cronjob.batch/nightly",
    "poddisruptionbudget.policy/db",
    "ingressclass.networking.k8s.io/nginx",
    "ingress.networking.k8s.io/web",
    "networkpolicy.networking.k8s.io/deny-all",
    "endpointslice.discovery.k8s.io/web-1",
    "csidriver.storage.k8s.io/csi.example.com",
    "csinode.storage.k8s.io/node-1",
    "storageclass.storage.k8s.io/fast",
    "volumeattachment.storage.k8s.io/attach-1",
    "priorityclass.scheduling.k8s.io/high",
    "runtimeclass.node.k8s.io/gvisor",
    "horizontalpodautoscaler.autoscaling/db",
    "validatingwebhookconfiguration.admissionregistration.k8s.io/policy.example.com",
    "mutatingwebhookconfiguration.admissionregistration.k8s.io/defaults.example.com",
    "validatingadmissionpolicy.admissionregistration.k8s.io/replicas-limit",
    "validatingadmissionpolicybinding.admissionregistration.k8s.io/replicas-limit",
    "prioritylevelconfiguration.flowcontrol.apiserver.k8s.io/batch",
    "flowschema.flowcontrol.apiserver.k8s.io/batch",
    "apiservice.apiregistration.k8s.io/v1beta1.metrics.k8s.io",
    "servicecidr.networking.k8s.io/extra",
    "ipaddress.networking.k8s.io/10.100.0.10",
    "csistoragecapacity.storage.k8s.io/fast-zone-a",
];

fn collapse(line: &str) -> String {
    line.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn discovery_lists_the_stored_kinds_as_upstream_does() {
    let env = Env::start();
    let listed: Vec<String> = env
        .ok(&["api-resources", "--no-headers"])
        .lines()
        .map(collapse)
        .collect();
    for row in UPSTREAM_ROWS {
        assert!(
            listed.iter().any(|line| line == row),
            "`kubectl api-resources` lacks upstream's row {row:?}:\n{}",
            listed.join("\n")
        );
    }
    let all = env.ok(&["api-resources", "--categories=all", "-o", "name"]);
    for name in [
        "replicationcontrollers",
        "statefulsets.apps",
        "daemonsets.apps",
        "cronjobs.batch",
    ] {
        assert!(all.lines().any(|line| line == name), "{name} in all: {all}");
    }
}

#[test]
fn every_stored_kind_round_trips_through_kubectl() {
    let env = Env::start();
    let applied = env.ok_with_stdin(&["apply", "-f", "-"], MANIFESTS);
    for name in CREATED {
        assert!(
            applied.contains(&format!("{name} created")),
            "{name}: {applied}"
        );
    }
    let listed = env.ok(&[
        "get",
        "sts,ds,cj,pdb,ing,netpol,rc,pvc,ep,limits,quota,podtemplates,controllerrevisions,endpointslices,hpa,csistoragecapacities",
        "-o",
        "name",
    ]);
    let cluster_scoped = [
        "ingressclass",
        "csidriver",
        "csinode",
        "storageclass",
        "volumeattachment",
        "persistentvolume/",
        "scheduling",
        "runtimeclass",
        "admissionregistration",
        "flowcontrol",
        "apiregistration",
        "servicecidr",
        "ipaddress",
    ];
    for name in CREATED
        .iter()
        .filter(|name| !cluster_scoped.iter().any(|scoped| name.contains(scoped)))
    {
        assert!(
            listed.lines().any(|line| line == *name),
            "{name} listed: {listed}"
        );
    }

    // StatefulSets and ReplicationControllers scale as Deployments do.
    env.ok(&["scale", "statefulset/db", "--replicas=3"]);
    let replicas = env.ok(&["get", "sts", "db", "-o", "jsonpath={.spec.replicas}"]);
    assert_eq!(replicas, "3");
    env.ok(&["scale", "rc/rc", "--replicas=2"]);
    let replicas = env.ok(&["get", "rc", "rc", "-o", "jsonpath={.spec.replicas}"]);
    assert_eq!(replicas, "2");
    let scale = env.ok(&[
        "get",
        "--raw",
        "/api/v1/namespaces/default/replicationcontrollers/rc/scale",
    ]);
    assert!(scale.contains(r#""selector":"app=rc""#), "{scale}");

    // Field validation knows these kinds' fields: a typo is refused, nothing stored.
    let typo = env.run_with_stdin(
        &["create", "-f", "-"],
        "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: typo}\nspec: {replica: 1, serviceName: x, selector: {matchLabels: {a: b}}, template: {metadata: {labels: {a: b}}, spec: {containers: [{name: c, image: i}]}}}\n",
    );
    assert_ne!(typo.code, Some(0), "{}", typo.describe());
    assert!(
        typo.stderr.contains(r#"unknown field "spec.replica""#),
        "{}",
        typo.describe()
    );
    let absent = env.run(&["get", "sts", "typo"]);
    assert!(absent.stderr.contains("NotFound"), "{}", absent.describe());

    let deleted = env.ok_with_stdin(&["delete", "-f", "-", "--wait=false"], MANIFESTS);
    for name in CREATED {
        let (resource, object) = name.split_once('/').unwrap_or_default();
        assert!(
            deleted.contains(&format!("{resource} \"{object}\" deleted")),
            "{name}: {deleted}"
        );
    }
}

/// One HorizontalPodAutoscaler, two versions: written as `autoscaling/v1`, it is read as v2
/// with its CPU target as a metric; v2's other metrics survive an update through v1.
#[test]
fn autoscaling_v1_and_v2_serve_one_object() {
    let env = Env::start();
    env.ok_with_stdin(
        &["create", "-f", "-"],
        "apiVersion: autoscaling/v1\nkind: HorizontalPodAutoscaler\nmetadata: {name: web}\nspec: {scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}, maxReplicas: 4, targetCPUUtilizationPercentage: 60}\n",
    );
    let v2 = env.get_json(&["horizontalpodautoscalers.v2.autoscaling", "web"]);
    assert_eq!(v2["apiVersion"], "autoscaling/v2");
    assert_eq!(v2["spec"]["minReplicas"], 1, "v1's default: {v2}");
    assert_eq!(
        v2["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"], 60,
        "{v2}"
    );

    // A memory metric added through v2 is kept when v1 changes the CPU target.
    env.ok(&[
        "patch",
        "horizontalpodautoscalers.v2.autoscaling",
        "web",
        "--type=json",
        "-p",
        r#"[{"op":"add","path":"/spec/metrics/-","value":{"type":"Resource","resource":{"name":"memory","target":{"type":"AverageValue","averageValue":"500Mi"}}}}]"#,
    ]);
    let v1 = env.get_json(&["horizontalpodautoscalers.v1.autoscaling", "web"]);
    assert_eq!(v1["apiVersion"], "autoscaling/v1");
    assert_eq!(v1["spec"]["targetCPUUtilizationPercentage"], 60);
    assert!(v1["spec"].get("metrics").is_none(), "{v1}");
    env.ok(&[
        "patch",
        "horizontalpodautoscalers.v1.autoscaling",
        "web",
        "--type=merge",
        "-p",
        r#"{"spec":{"targetCPUUtilizationPercentage":75}}"#,
    ]);
    let v2 = env.get_json(&["horizontalpodautoscalers.v2.autoscaling", "web"]);
    let metrics = v2["spec"]["metrics"].as_array().expect("metrics");
    assert_eq!(metrics.len(), 2, "{v2}");
    assert_eq!(metrics[0]["resource"]["target"]["averageUtilization"], 75);
    assert_eq!(metrics[1]["resource"]["target"]["averageValue"], "500Mi");
    assert!(
        v2["metadata"].get("annotations").is_none(),
        "the v1 annotations are not stored: {v2}"
    );
}

/// Objects for the printer test: each kind's row depends on fields set here.
const PRINTED: &str = r#"
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec: {replicas: 1, serviceName: db, selector: {matchLabels: {app: db}}, template: {metadata: {labels: {app: db}}, spec: {containers: [{name: c, image: busybox}]}}}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent}
spec: {selector: {matchLabels: {app: agent}}, template: {metadata: {labels: {app: agent}}, spec: {nodeSelector: {kubernetes.io/os: linux}, containers: [{name: c, image: busybox}]}}}
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: nightly}
spec: {schedule: "0 3 * * *", jobTemplate: {spec: {template: {spec: {restartPolicy: Never, containers: [{name: c, image: busybox}]}}}}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data}
spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: web}
spec: {ingressClassName: nginx, rules: [{host: example.com, http: {paths: [{path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}]}}]}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: db}
spec: {minAvailable: 1, selector: {matchLabels: {app: db}}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: readers}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: view}
subjects: [{kind: User, apiGroup: rbac.authorization.k8s.io, name: alice}, {kind: ServiceAccount, name: ci, namespace: default}]
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: fast, annotations: {storageclass.kubernetes.io/is-default-class: "true"}}
provisioner: csi.example.com
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 1000
"#;

/// Whether a cell reads like the age of an object made moments ago (`0s`, `75s`, `2m3s`).
fn is_fresh_age(cell: &str) -> bool {
    cell.starts_with(|c: char| c.is_ascii_digit())
        && cell.ends_with(['s', 'm'])
        && cell.chars().all(|c| c.is_ascii_alphanumeric())
}

/// Asserts that `kubectl get ARGS` prints `header` and then the one row `row`, whitespace
/// collapsed (so empty cells vanish). `{age}` in `row` stands for the Age cell.
fn assert_printed(env: &Env, args: &[&str], header: &str, row: &str) {
    let printed = env.ok(args);
    let lines: Vec<String> = printed.lines().map(collapse).collect();
    let what = format!("kubectl {}", args.join(" "));
    assert_eq!(
        lines.len(),
        2,
        "{what} prints a header and one row:\n{printed}"
    );
    assert_eq!(lines[0], header, "{what} header:\n{printed}");
    let expected: Vec<&str> = row.split(' ').collect();
    let cells: Vec<&str> = lines[1].split(' ').collect();
    let matches = expected.len() == cells.len()
        && expected
            .iter()
            .zip(&cells)
            .all(|(want, got)| *want == *got || (*want == "{age}" && is_fresh_age(got)));
    assert!(matches, "{what} row: expected {row:?}\n{printed}");
}

#[test]
fn kubectl_get_prints_upstream_columns_for_the_stored_kinds() {
    let env = Env::start();
    env.ok_with_stdin(&["apply", "-f", "-"], PRINTED);

    assert_printed(
        &env,
        &["get", "statefulset", "db"],
        "NAME READY AGE",
        "db 0/1 {age}",
    );
    assert_printed(
        &env,
        &["get", "daemonset", "agent"],
        "NAME DESIRED CURRENT READY UP-TO-DATE AVAILABLE NODE SELECTOR AGE",
        "agent 0 0 0 0 0 kubernetes.io/os=linux {age}",
    );
    assert_printed(
        &env,
        &["get", "daemonset", "agent", "-o", "wide"],
        "NAME DESIRED CURRENT READY UP-TO-DATE AVAILABLE NODE SELECTOR AGE CONTAINERS IMAGES SELECTOR",
        "agent 0 0 0 0 0 kubernetes.io/os=linux {age} c busybox app=agent",
    );
    assert_printed(
        &env,
        &["get", "cronjob", "nightly"],
        "NAME SCHEDULE TIMEZONE SUSPEND ACTIVE LAST SCHEDULE AGE",
        "nightly 0 3 * * * <none> False 0 <none> {age}",
    );
    assert_printed(
        &env,
        &["get", "pvc", "data"],
        "NAME STATUS VOLUME CAPACITY ACCESS MODES STORAGECLASS VOLUMEATTRIBUTESCLASS AGE",
        "data Pending <unset> {age}",
    );
    assert_printed(
        &env,
        &["get", "ingress", "web"],
        "NAME CLASS HOSTS ADDRESS PORTS AGE",
        "web nginx example.com 80 {age}",
    );
    assert_printed(
        &env,
        &["get", "pdb", "db"],
        "NAME MIN AVAILABLE MAX UNAVAILABLE ALLOWED DISRUPTIONS AGE",
        "db 1 N/A 0 {age}",
    );
    assert_printed(
        &env,
        &["get", "rolebinding", "readers"],
        "NAME ROLE AGE",
        "readers ClusterRole/view {age}",
    );
    assert_printed(
        &env,
        &["get", "rolebinding", "readers", "-o", "wide"],
        "NAME ROLE AGE USERS GROUPS SERVICEACCOUNTS",
        "readers ClusterRole/view {age} alice default/ci",
    );
    assert_printed(
        &env,
        &["get", "storageclass", "fast"],
        "NAME PROVISIONER RECLAIMPOLICY VOLUMEBINDINGMODE ALLOWVOLUMEEXPANSION AGE",
        "fast (default) csi.example.com Delete Immediate false {age}",
    );
    assert_printed(
        &env,
        &["get", "priorityclass", "high"],
        "NAME VALUE GLOBAL-DEFAULT AGE PREEMPTIONPOLICY",
        "high 1000 false {age} PreemptLowerPriority",
    );
}
