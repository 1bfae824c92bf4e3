//! Tests of the strategic merge patch, table-driven from upstream's cases where they exist.

use super::*;
use serde_json::json;

fn smp(target: Value, patch: Value) -> Value {
    apply_strategic_merge_patch(&target, &patch, &BuiltinSchema).unwrap()
}

fn smp_err(target: Value, patch: Value) -> PatchError {
    apply_strategic_merge_patch(&target, &patch, &BuiltinSchema).unwrap_err()
}

/// No key of the result, at any depth, is a directive.
fn assert_no_directives(value: &Value) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                assert!(!k.starts_with('$'), "directive {k} stored in {value}");
                assert_no_directives(v);
            }
        }
        Value::Array(items) => items.iter().for_each(assert_no_directives),
        _ => {}
    }
}

/// The schema of apimachinery's strategicpatch tests (`MergeItem`): `mergingList` by
/// `name`, `mergingIntList` merge primitives, the rest atomic.
struct MergeItemSchema;

impl PatchSchema for MergeItemSchema {
    fn list_strategy(&self, path: &[&str]) -> ListStrategy {
        match path.last().copied() {
            Some("mergingList" | "retainKeysMergingList") => ListStrategy::MergeByKey("name"),
            Some("mergingIntList") => ListStrategy::MergePrimitives,
            _ => ListStrategy::Replace,
        }
    }
}

fn item_smp(target: Value, patch: Value) -> Result<Value, PatchError> {
    apply_strategic_merge_patch(&target, &patch, &MergeItemSchema)
}

#[test]
fn builtin_schema_table() {
    let s = BuiltinSchema;
    let pod_spec = ["spec", "template", "spec"];
    let at = |tail: &[&'static str]| -> ListStrategy {
        let path: Vec<&str> = pod_spec.iter().chain(tail).copied().collect();
        s.list_strategy(&path)
    };
    assert_eq!(at(&["containers"]), ListStrategy::MergeByKey("name"));
    assert_eq!(at(&["initContainers"]), ListStrategy::MergeByKey("name"));
    assert_eq!(at(&["containers", "env"]), ListStrategy::MergeByKey("name"));
    assert_eq!(
        at(&["containers", "ports"]),
        ListStrategy::MergeByKey("containerPort")
    );
    assert_eq!(
        at(&["containers", "volumeMounts"]),
        ListStrategy::MergeByKey("mountPath")
    );
    assert_eq!(at(&["containers", "args"]), ListStrategy::Replace);
    assert_eq!(at(&["volumes"]), ListStrategy::MergeByKey("name"));
    assert_eq!(at(&["tolerations"]), ListStrategy::Replace);
    assert_eq!(
        s.list_strategy(&["spec", "containers"]),
        ListStrategy::MergeByKey("name")
    );
    assert_eq!(
        s.list_strategy(&[
            "spec",
            "jobTemplate",
            "spec",
            "template",
            "spec",
            "containers"
        ]),
        ListStrategy::MergeByKey("name")
    );
    assert_eq!(
        s.list_strategy(&["metadata", "finalizers"]),
        ListStrategy::MergePrimitives
    );
    assert_eq!(
        s.list_strategy(&["spec", "template", "metadata", "finalizers"]),
        ListStrategy::MergePrimitives
    );
    assert_eq!(
        s.list_strategy(&["spec", "finalizers"]),
        ListStrategy::Replace
    );
    assert_eq!(
        s.list_strategy(&["metadata", "ownerReferences"]),
        ListStrategy::MergeByKey("uid")
    );
    assert_eq!(
        s.list_strategy(&["metadata", "managedFields"]),
        ListStrategy::Replace
    );
    assert_eq!(
        s.list_strategy(&["spec", "ports"]),
        ListStrategy::MergeByKey("port")
    );
    assert_eq!(
        BuiltinSchema::for_kind("Deployment").list_strategy(&["spec", "ports"]),
        ListStrategy::Replace
    );
    assert_eq!(
        s.list_strategy(&["status", "conditions"]),
        ListStrategy::MergeByKey("type")
    );
    assert_eq!(
        BuiltinSchema::for_kind("CustomResourceDefinition")
            .list_strategy(&["status", "conditions"]),
        ListStrategy::Replace
    );
    // ServiceAccount imagePullSecrets are atomic; PodSpec's merge by name.
    assert_eq!(
        s.list_strategy(&["imagePullSecrets"]),
        ListStrategy::Replace
    );
    assert_eq!(
        s.list_strategy(&["spec", "imagePullSecrets"]),
        ListStrategy::MergeByKey("name")
    );
    assert_eq!(
        BuiltinSchema::for_kind("PodDisruptionBudget").map_strategy(&["spec", "selector"]),
        MapStrategy::Replace
    );
    assert_eq!(s.map_strategy(&["spec", "selector"]), MapStrategy::Merge);
    assert_eq!(
        MergePatchSchema.list_strategy(&["spec", "containers"]),
        ListStrategy::Replace
    );
}

/// The patch kubectl sent after changing one image and one env var (api-surface §6.5).
#[test]
fn kubectl_apply_deployment_example() {
    let live = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {
            "replicas": 2,
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [
                    {
                        "name": "c",
                        "image": "nginx:1",
                        "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                        "ports": [{"containerPort": 80, "protocol": "TCP"}]
                    },
                    {"name": "side", "image": "busybox", "args": ["sleep", "1d"]}
                ]}
            }
        }
    });
    let patch = json!({"spec": {"template": {"spec": {
        "$setElementOrder/containers": [{"name": "c"}, {"name": "side"}],
        "containers": [{
            "name": "c",
            "image": "nginx:2",
            "$setElementOrder/env": [{"name": "A"}, {"name": "C"}],
            "env": [{"name": "C", "value": "3"}, {"$patch": "delete", "name": "B"}]
        }]
    }}}});
    let patched = smp(live.clone(), patch);
    let mut expected = live;
    expected["spec"]["template"]["spec"]["containers"] = json!([
        {
            "name": "c",
            "image": "nginx:2",
            "env": [{"name": "A", "value": "1"}, {"name": "C", "value": "3"}],
            "ports": [{"containerPort": 80, "protocol": "TCP"}]
        },
        {"name": "side", "image": "busybox", "args": ["sleep", "1d"]}
    ]);
    assert_eq!(patched, expected);
    assert_no_directives(&patched);
}

#[test]
fn labels_add_and_remove() {
    let live = json!({"metadata": {"name": "x", "labels": {"a": "1", "c": "3"}}});
    let patched = smp(live, json!({"metadata": {"labels": {"a": null, "b": "2"}}}));
    assert_eq!(
        patched,
        json!({"metadata": {"name": "x", "labels": {"b": "2", "c": "3"}}})
    );
    // labels on an object that has none; the null for a missing key is dropped
    let patched = smp(
        json!({"metadata": {"name": "x"}}),
        json!({"metadata": {"labels": {"b": "2", "gone": null}}}),
    );
    assert_eq!(
        patched,
        json!({"metadata": {"name": "x", "labels": {"b": "2"}}})
    );
}

#[test]
fn finalizers_union_and_delete() {
    let live = json!({"metadata": {"finalizers": ["a", "b"]}});
    assert_eq!(
        smp(
            live.clone(),
            json!({"metadata": {"finalizers": ["b", "c"]}})
        ),
        json!({"metadata": {"finalizers": ["a", "b", "c"]}})
    );
    assert_eq!(
        smp(
            live.clone(),
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}})
        ),
        json!({"metadata": {"finalizers": ["b"]}})
    );
    // both at once, as kubectl sends them with an order
    let patched = smp(
        json!({"metadata": {"finalizers": ["a", "b", "c"]}}),
        json!({"metadata": {
            "$setElementOrder/finalizers": ["b", "d"],
            "$deleteFromPrimitiveList/finalizers": ["a", "c"],
            "finalizers": ["d"]
        }}),
    );
    assert_eq!(patched, json!({"metadata": {"finalizers": ["b", "d"]}}));
    // deleting what is not there is harmless
    assert_eq!(
        smp(
            json!({"metadata": {}}),
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["x"]}})
        ),
        json!({"metadata": {}})
    );
    assert!(matches!(
        smp_err(
            live,
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": "a"}})
        ),
        PatchError::Malformed(_)
    ));
}

#[test]
fn primitive_list_order_follows_upstream() {
    // apimachinery "preserve the order from the patch in a merging int list"
    assert_eq!(
        item_smp(
            json!({"mergingIntList": [1, 2, 3]}),
            json!({"mergingIntList": [3, 1]})
        )
        .unwrap(),
        json!({"mergingIntList": [2, 3, 1]})
    );
    // apimachinery "delete an item in a list of primitives and preserve order"
    assert_eq!(
        item_smp(
            json!({"mergingIntList": [1, 2, 3]}),
            json!({
                "$setElementOrder/mergingIntList": [2, 1],
                "$deleteFromPrimitiveList/mergingIntList": [3]
            })
        )
        .unwrap(),
        json!({"mergingIntList": [2, 1]})
    );
}

#[test]
fn owner_references_merge_by_uid() {
    let live = json!({"metadata": {"ownerReferences": [
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u1"},
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "cm", "uid": "u2"}
    ]}});
    let patched = smp(
        live,
        json!({"metadata": {"ownerReferences": [
            {"uid": "u1", "controller": true, "blockOwnerDeletion": true},
            {"$patch": "delete", "uid": "u2"},
            {"apiVersion": "v1", "kind": "Secret", "name": "s", "uid": "u3"}
        ]}}),
    );
    // u2 is gone; u3 is new and follows u1 in the patch's order.
    assert_eq!(
        patched,
        json!({"metadata": {"ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u1",
             "controller": true, "blockOwnerDeletion": true},
            {"apiVersion": "v1", "kind": "Secret", "name": "s", "uid": "u3"}
        ]}})
    );
}

#[test]
fn new_keyed_items_go_before_server_only_items() {
    // upstream mergeSortedSlice: an item the live list lacks is not "after" anything.
    let live = json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}]}});
    let patched = smp(
        live,
        json!({"spec": {"containers": [{"name": "n", "image": "x"}]}}),
    );
    assert_eq!(
        patched["spec"]["containers"],
        json!([{"name": "n", "image": "x"}, {"name": "a"}, {"name": "b"}])
    );
    // ... and server-only items that precede a patched item stay before it.
    let live = json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}, {"name": "c"}]}});
    let patched = smp(
        live,
        json!({"spec": {"containers": [{"name": "b", "image": "y"}, {"name": "n"}]}}),
    );
    assert_eq!(
        patched["spec"]["containers"],
        json!([{"name": "a"}, {"name": "b", "image": "y"}, {"name": "n"}, {"name": "c"}])
    );
}

#[test]
fn keyed_list_order_follows_upstream() {
    // apimachinery "preserve the order from the patch in a merging list 2"
    let live = json!({"mergingList": [
        {"name": "1"}, {"name": "2", "value": "b"}, {"name": "3"}
    ]});
    assert_eq!(
        item_smp(
            live.clone(),
            json!({"mergingList": [{"name": "3", "value": "c"}, {"name": "1", "value": "a"}]})
        )
        .unwrap(),
        json!({"mergingList": [
            {"name": "2", "value": "b"}, {"name": "3", "value": "c"}, {"name": "1", "value": "a"}
        ]})
    );
    // design proposal example: live [B, C, A], patch [A', B', D] => [C, A', B', D]
    assert_eq!(
        item_smp(
            json!({"mergingList": [{"name": "B"}, {"name": "C"}, {"name": "A"}]}),
            json!({"mergingList": [
                {"name": "A", "value": "1"}, {"name": "B", "value": "1"}, {"name": "D"}
            ]})
        )
        .unwrap(),
        json!({"mergingList": [
            {"name": "C"}, {"name": "A", "value": "1"}, {"name": "B", "value": "1"}, {"name": "D"}
        ]})
    );
}

#[test]
fn set_element_order_reorders_and_keeps_server_items() {
    // apimachinery "add an item in a list and preserve order" (three-way patch)
    let live = json!({"mergingList": [
        {"name": "1", "other": "a"}, {"name": "2", "value": "2", "other": "b"}
    ]});
    let patch = json!({
        "$setElementOrder/mergingList": [{"name": "3"}, {"name": "1"}, {"name": "2"}],
        "mergingList": [{"name": "3", "value": "3"}]
    });
    assert_eq!(
        item_smp(live, patch).unwrap(),
        json!({"mergingList": [
            {"name": "3", "value": "3"},
            {"name": "1", "other": "a"},
            {"name": "2", "value": "2", "other": "b"}
        ]})
    );
    // reorder only; entries the list lacks are ignored
    assert_eq!(
        item_smp(
            json!({"mergingList": [{"name": "B"}, {"name": "A"}]}),
            json!({"$setElementOrder/mergingList": [{"name": "C"}, {"name": "A"}, {"name": "B"}]})
        )
        .unwrap(),
        json!({"mergingList": [{"name": "A"}, {"name": "B"}]})
    );
    // server-only items interleave by their live position (design proposal example,
    // as upstream's implementation orders it)
    assert_eq!(
        item_smp(
            json!({"mergingList": [
                {"name": "C"}, {"name": "B"}, {"name": "D"}, {"name": "A"}, {"name": "E"}
            ]}),
            json!({
                "$setElementOrder/mergingList": [{"name": "A"}, {"name": "B"}],
                "mergingList": [{"name": "A", "v": 1}, {"name": "B", "v": 1}]
            })
        )
        .unwrap(),
        json!({"mergingList": [
            {"name": "C"}, {"name": "D"}, {"name": "A", "v": 1}, {"name": "B", "v": 1},
            {"name": "E"}
        ]})
    );
}

#[test]
fn set_element_order_after_deleting_keeps_upstreams_order() {
    // apimachinery "add map and delete map from merging list with conflict": with an
    // element deleted in the same patch, the new elements land after server-only ones.
    assert_eq!(
        item_smp(
            json!({"mergingList": [{"name": "1", "other": "a"}, {"name": "4", "other": "c"}]}),
            json!({
                "$setElementOrder/mergingList": [{"name": "2"}, {"name": "3"}],
                "mergingList": [{"name": "2"}, {"name": "3"}, {"name": "1", "$patch": "delete"}]
            })
        )
        .unwrap(),
        json!({"mergingList": [{"name": "4", "other": "c"}, {"name": "2"}, {"name": "3"}]})
    );
    // kubectl apply renaming env B to C while a webhook added X: [A, X, C].
    let live = json!({"spec": {"containers": [{"name": "c", "env": [
        {"name": "A", "value": "1"}, {"name": "B", "value": "2"}, {"name": "X", "value": "w"}
    ]}]}});
    let patched = smp(
        live,
        json!({"spec": {"containers": [{
            "name": "c",
            "$setElementOrder/env": [{"name": "A"}, {"name": "C"}],
            "env": [{"name": "C", "value": "2"}, {"$patch": "delete", "name": "B"}]
        }]}}),
    );
    assert_eq!(
        patched["spec"]["containers"][0]["env"],
        json!([{"name": "A", "value": "1"}, {"name": "X", "value": "w"}, {"name": "C", "value": "2"}])
    );
}

#[test]
fn set_element_order_for_a_new_list() {
    let patched = smp(
        json!({"spec": {"containers": [{"name": "c"}]}}),
        json!({"spec": {"containers": [{
            "name": "c",
            "$setElementOrder/env": [{"name": "B"}, {"name": "A"}],
            "env": [{"name": "B", "value": "2"}, {"name": "A", "value": "1"}]
        }]}}),
    );
    assert_eq!(
        patched,
        json!({"spec": {"containers": [{"name": "c", "env": [
            {"name": "B", "value": "2"}, {"name": "A", "value": "1"}
        ]}]}})
    );
}

#[test]
fn set_element_order_must_agree_with_the_patch() {
    // apimachinery "should check if order in $setElementOrder and patch list match"
    let err = item_smp(
        json!({"mergingList": [{"name": "1"}, {"name": "3"}, {"name": "2"}]}),
        json!({
            "$setElementOrder/mergingList": [{"name": "1"}, {"name": "2"}, {"name": "3"}],
            "mergingList": [{"name": "3", "value": "3"}, {"name": "1", "value": "1"}]
        }),
    )
    .unwrap_err();
    assert!(
        matches!(&err, PatchError::Malformed(m) if m.contains("doesn't match")),
        "{err:?}"
    );
    assert!(matches!(
        item_smp(
            json!({}),
            json!({"$setElementOrder/mergingList": {"name": "1"}})
        ),
        Err(PatchError::Malformed(_))
    ));
    assert!(matches!(
        item_smp(json!({}), json!({"$setElementOrder": []})),
        Err(PatchError::Malformed(_))
    ));
}

#[test]
fn patch_replace_on_a_map() {
    let live = json!({"spec": {"selector": {"matchLabels": {"a": "1", "b": "2"}}, "x": 1}});
    let patched = smp(
        live,
        json!({"spec": {"selector": {"$patch": "replace", "matchLabels": {"c": "3"}}}}),
    );
    assert_eq!(
        patched,
        json!({"spec": {"selector": {"matchLabels": {"c": "3"}}, "x": 1}})
    );
    // at the root: apimachinery "add key and delete all keys from map"
    assert_eq!(
        item_smp(
            json!({"name": "1", "value": "1"}),
            json!({"other": "a", "$patch": "replace"})
        )
        .unwrap(),
        json!({"other": "a"})
    );
    // PodDisruptionBudget's selector has patchStrategy replace
    let pdb = json!({"spec": {"selector": {"matchLabels": {"a": "1"}}}});
    let patched = apply_strategic_merge_patch(
        &pdb,
        &json!({"spec": {"selector": {"matchLabels": {"b": "2"}}}}),
        &BuiltinSchema::for_kind("PodDisruptionBudget"),
    )
    .unwrap();
    assert_eq!(
        patched,
        json!({"spec": {"selector": {"matchLabels": {"b": "2"}}}})
    );
}

#[test]
fn patch_delete_on_a_map_and_list_elements() {
    let live = json!({"metadata": {"annotations": {"a": "1"}, "labels": {"l": "1"}}});
    assert_eq!(
        smp(
            live,
            json!({"metadata": {"annotations": {"$patch": "delete"}}})
        ),
        json!({"metadata": {"labels": {"l": "1"}}})
    );
    // apimachinery "delete all duplicate entries in a merging list"
    assert_eq!(
        item_smp(
            json!({"mergingList": [
                {"name": "1"}, {"name": "1"}, {"name": "2", "value": "a"},
                {"name": "3"}, {"name": "3"}
            ]}),
            json!({"mergingList": [
                {"name": "1", "$patch": "delete"}, {"name": "3", "$patch": "delete"}
            ]})
        )
        .unwrap(),
        json!({"mergingList": [{"name": "2", "value": "a"}]})
    );
    // deleting an element that does not exist is harmless
    assert_eq!(
        smp(
            json!({"spec": {"volumes": [{"name": "v"}]}}),
            json!({"spec": {"volumes": [{"name": "w", "$patch": "delete"}]}})
        ),
        json!({"spec": {"volumes": [{"name": "v"}]}})
    );
}

#[test]
fn patch_replace_on_a_list() {
    // apimachinery "delete all items from merging list"
    assert_eq!(
        item_smp(
            json!({"mergingList": [{"name": "1"}, {"name": "2"}]}),
            json!({"mergingList": [{"$patch": "replace"}]})
        )
        .unwrap(),
        json!({"mergingList": []})
    );
    assert_eq!(
        smp(
            json!({"spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b"}]}}),
            json!({"spec": {"containers": [{"name": "c", "image": "2"}, {"$patch": "replace"}]}})
        ),
        json!({"spec": {"containers": [{"name": "c", "image": "2"}]}})
    );
}

#[test]
fn retain_keys_clears_other_fields() {
    // kubectl apply switching a Deployment from RollingUpdate to Recreate.
    let live = json!({"spec": {"strategy": {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}
    }}});
    let patched = smp(
        live,
        json!({"spec": {"strategy": {
            "$retainKeys": ["type"],
            "type": "Recreate",
            "rollingUpdate": null
        }}}),
    );
    assert_eq!(patched, json!({"spec": {"strategy": {"type": "Recreate"}}}));

    // volumes (merge,retainKeys): the volume source changes kind
    let live = json!({"spec": {"volumes": [
        {"name": "v", "emptyDir": {}},
        {"name": "w", "secret": {"secretName": "s"}}
    ]}});
    let patched = smp(
        live,
        json!({"spec": {"volumes": [
            {"$retainKeys": ["configMap", "name"], "name": "v", "configMap": {"name": "cm"}}
        ]}}),
    );
    assert_eq!(
        patched,
        json!({"spec": {"volumes": [
            {"name": "v", "configMap": {"name": "cm"}},
            {"name": "w", "secret": {"secretName": "s"}}
        ]}})
    );

    // every key the patch sets must be retained
    assert!(matches!(
        smp_err(
            json!({"spec": {"strategy": {}}}),
            json!({"spec": {"strategy": {"$retainKeys": ["type"], "rollingUpdate": {}}}})
        ),
        PatchError::Malformed(m) if m == "invalid patch format of retainKeys"
    ));
    assert!(matches!(
        smp_err(json!({}), json!({"spec": {"$retainKeys": "type"}})),
        PatchError::Malformed(_)
    ));
}

#[test]
fn ports_merge_by_their_keys() {
    let svc = json!({"kind": "Service", "spec": {"ports": [
        {"name": "http", "port": 80, "targetPort": 8080},
        {"name": "https", "port": 443}
    ]}});
    let patched = apply_strategic_merge_patch(
        &svc,
        &json!({"spec": {"ports": [{"port": 80, "targetPort": 9090}]}}),
        &BuiltinSchema::for_kind("Service"),
    )
    .unwrap();
    assert_eq!(
        patched["spec"]["ports"],
        json!([{"name": "http", "port": 80, "targetPort": 9090}, {"name": "https", "port": 443}])
    );
    let pod = json!({"spec": {"containers": [{"name": "c", "ports": [
        {"containerPort": 80}, {"containerPort": 81}
    ]}]}});
    let patched = smp(
        pod,
        json!({"spec": {"containers": [{"name": "c", "ports": [
            {"containerPort": 81, "name": "metrics"}
        ]}]}}),
    );
    assert_eq!(
        patched["spec"]["containers"][0]["ports"],
        json!([{"containerPort": 80}, {"containerPort": 81, "name": "metrics"}])
    );
}

#[test]
fn atomic_lists_and_scalars_are_replaced() {
    let live = json!({"spec": {
        "containers": [{"name": "c", "args": ["a", "b"], "image": "x"}],
        "tolerations": [{"key": "k"}],
        "replicas": 1
    }});
    let patched = smp(
        live,
        json!({"spec": {
            "containers": [{"name": "c", "args": ["z"]}],
            "tolerations": [{"key": "t", "value": null}],
            "replicas": {"weird": true}
        }}),
    );
    assert_eq!(
        patched,
        json!({"spec": {
            "containers": [{"name": "c", "args": ["z"], "image": "x"}],
            "tolerations": [{"key": "t"}],
            "replicas": {"weird": true}
        }})
    );
}

#[test]
fn merge_patch_schema_replaces_lists() {
    let live = json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}], "m": {"x": 1}}});
    let patched = apply_strategic_merge_patch(
        &live,
        &json!({"spec": {"containers": [{"name": "b", "image": "i"}], "m": {"y": 2}}}),
        &MergePatchSchema,
    )
    .unwrap();
    assert_eq!(
        patched,
        json!({"spec": {"containers": [{"name": "b", "image": "i"}], "m": {"x": 1, "y": 2}}})
    );
}

#[test]
fn new_values_have_directives_applied_and_nulls_dropped() {
    let patched = smp(
        json!({"spec": {}}),
        json!({"spec": {
            "template": {"spec": {"containers": [
                {"name": "c", "env": [{"name": "A", "value": null}, {"$patch": "delete", "name": "B"}]}
            ]}},
            "replaced": {"$patch": "replace", "a": 1},
            "deleted": {"$patch": "delete", "a": 1}
        }}),
    );
    assert_eq!(
        patched,
        json!({"spec": {
            "template": {"spec": {"containers": [{"name": "c", "env": [{"name": "A"}]}]}},
            "replaced": {"a": 1}
        }})
    );
    assert_no_directives(&patched);
}

#[test]
fn malformed_directives() {
    let live = json!({"spec": {"containers": [{"name": "c"}]}});
    assert!(matches!(
        smp_err(live.clone(), json!({"spec": {"$patch": "explode"}})),
        PatchError::Malformed(m) if m.starts_with("unknown patch type: explode")
    ));
    assert!(matches!(
        smp_err(
            live.clone(),
            json!({"spec": {"containers": [{"$patch": "explode", "name": "c"}]}})
        ),
        PatchError::Malformed(_)
    ));
    assert!(matches!(
        smp_err(
            live.clone(),
            json!({"spec": {"containers": [{"$patch": "merge", "name": "c"}]}})
        ),
        PatchError::Malformed(_)
    ));
    // an element without the merge key
    assert!(matches!(
        smp_err(live.clone(), json!({"spec": {"containers": [{"image": "x"}]}})),
        PatchError::Malformed(m) if m.contains("does not contain declared merge key: name")
    ));
    assert!(matches!(
        smp_err(
            live.clone(),
            json!({"spec": {"containers": [{"$patch": "delete"}]}})
        ),
        PatchError::Malformed(_)
    ));
    assert!(matches!(
        smp_err(live.clone(), json!({"spec": {"containers": ["c"]}})),
        PatchError::Malformed(_)
    ));
    assert!(matches!(
        smp_err(
            json!({"metadata": {"finalizers": ["x"]}}),
            json!({"metadata": {"finalizers": [{"a": 1}]}})
        ),
        PatchError::Malformed(_)
    ));
    assert!(matches!(
        smp_err(live.clone(), json!([1])),
        PatchError::Malformed(_)
    ));
    assert!(matches!(
        apply_strategic_merge_patch(&json!([]), &json!({}), &BuiltinSchema),
        Err(PatchError::CannotApply(_))
    ));
    // $patch: merge on a map is accepted
    assert_eq!(
        smp(live.clone(), json!({"spec": {"$patch": "merge", "x": 1}})),
        json!({"spec": {"containers": [{"name": "c"}], "x": 1}})
    );
    // a live list holding something other than maps cannot be merged by key
    assert!(matches!(
        smp_err(
            json!({"spec": {"containers": ["oops"]}}),
            json!({"spec": {"containers": [{"name": "c"}]}})
        ),
        PatchError::CannotApply(_)
    ));
}

fn arbitrary_json() -> impl proptest::strategy::Strategy<Value = Value> {
    use proptest::prelude::*;
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (0i64..4).prop_map(|n| json!(n)),
        "[xy]".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::btree_map("[abc]", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest::proptest! {
    /// Without directives and with every list atomic, a strategic merge patch is a JSON
    /// merge patch.
    #[test]
    fn without_directives_it_is_a_merge_patch(
        target in proptest::collection::btree_map("[abc]", arbitrary_json(), 0..4),
        patch in proptest::collection::btree_map("[abc]", arbitrary_json(), 0..4),
    ) {
        let target = Value::Object(target.into_iter().collect());
        let patch = Value::Object(patch.into_iter().collect());
        let strategic = apply_strategic_merge_patch(&target, &patch, &MergePatchSchema);
        let merge = crate::patch::apply_merge_patch(&target, &patch);
        proptest::prop_assert_eq!(strategic, merge);
    }
}

#[test]
fn root_directives() {
    assert_eq!(smp(json!({"a": 1}), json!({"$patch": "delete"})), json!({}));
    assert_eq!(smp(json!({"a": 1}), json!({})), json!({"a": 1}));
}

#[test]
fn value_keys_are_equal_exactly_when_values_are() {
    let values = [
        json!(null),
        json!(true),
        json!(1),
        json!(1.0),
        json!(-0.0),
        json!(0.0),
        json!("a"),
        json!("a\",\"b"),
        json!(["a", "b"]),
        json!({"k": "v", "j": [1]}),
        json!({"j": [1], "k": "v"}),
    ];
    for a in &values {
        for b in &values {
            assert_eq!(value_key(a) == value_key(b), a == b, "{a} vs {b}");
        }
    }
}

#[test]
fn long_lists_merge_in_linear_time() {
    // 20 000 elements each way: quadratic matching would be 4e8 comparisons.
    let live: Vec<Value> = (0..20_000)
        .map(|i| json!({"name": format!("c{i}"), "image": "old"}))
        .collect();
    let patch: Vec<Value> = (0..20_000)
        .rev()
        .map(|i| json!({"name": format!("c{i}"), "image": "new"}))
        .collect();
    // The final order: reversed, as the patch lists them.
    let order: Vec<Value> = (0..20_000)
        .rev()
        .map(|i| json!({"name": format!("c{i}")}))
        .collect();
    let target = json!({"spec": {"containers": live}});
    let started = std::time::Instant::now();
    let merged = apply_strategic_merge_patch(
        &target,
        &json!({"spec": {"containers": patch, "$setElementOrder/containers": order}}),
        &BuiltinSchema,
    )
    .unwrap();
    let containers = merged["spec"]["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 20_000);
    assert_eq!(containers[0], json!({"name": "c19999", "image": "new"}));
    assert_eq!(containers[19_999]["name"], "c0");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
}
