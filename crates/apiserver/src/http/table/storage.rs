//! Printers for storage: persistent volumes and their claims, storage classes, CSI drivers
//! and nodes, and volume attachments.
//!
//! Upstream defaults several of the fields printed here before anything prints them; absent
//! ones are read with those defaults: a volume's or claim's `Pending` phase and `Filesystem`
//! mode, a volume's `Retain` reclaim policy, a CSI driver's `Persistent` lifecycle mode.

use std::borrow::Cow;

use serde_json::{Value, json};

use super::{
    AGE, Clock, Column, NAME, creation_age, flag, list, name_cell, optional_text, quantity, text,
};
use crate::object;

pub(super) const PERSISTENT_VOLUME_CLAIM_COLUMNS: &[Column] = &[
    NAME,
    Column::string(
        "Status",
        "The claim's phase: Pending, Bound or Lost (Terminating once deleted).",
    ),
    Column::string("Volume", "The volume bound to the claim."),
    Column::string("Capacity", "Storage capacity of the bound volume."),
    Column::string(
        "Access Modes",
        "How the bound volume may be mounted: RWO, ROX, RWX, RWOP.",
    ),
    Column::string("StorageClass", "The storage class the claim asks for."),
    Column::string(
        "VolumeAttributesClass",
        "The volume attributes class the claim asks for.",
    ),
    AGE,
    Column::string("VolumeMode", "Filesystem or Block.").wide(),
];

pub(super) const PERSISTENT_VOLUME_COLUMNS: &[Column] = &[
    NAME,
    Column::string("Capacity", "Storage capacity of the volume."),
    Column::string(
        "Access Modes",
        "How the volume may be mounted: RWO, ROX, RWX, RWOP.",
    ),
    Column::string(
        "Reclaim Policy",
        "What happens to the volume when its claim goes: Retain, Delete or Recycle.",
    ),
    Column::string(
        "Status",
        "The volume's phase: Pending, Available, Bound, Released or Failed (Terminating once \
         deleted).",
    ),
    Column::string("Claim", "The claim bound to the volume, as namespace/name."),
    Column::string("StorageClass", "The storage class the volume belongs to."),
    Column::string(
        "VolumeAttributesClass",
        "The volume attributes class of the volume.",
    ),
    Column::string("Reason", "Why the volume is in its phase, when it says."),
    AGE,
    Column::string("VolumeMode", "Filesystem or Block.").wide(),
];

pub(super) const STORAGE_CLASS_COLUMNS: &[Column] = &[
    NAME,
    Column::string("Provisioner", "The volume plugin that provisions volumes."),
    Column::string(
        "ReclaimPolicy",
        "The reclaim policy of the volumes provisioned: Delete or Retain.",
    ),
    Column::string(
        "VolumeBindingMode",
        "When volumes are bound: Immediate or WaitForFirstConsumer.",
    ),
    // Upstream declares the column a string though its cells are booleans.
    Column::string(
        "AllowVolumeExpansion",
        "Whether claims of the class may grow.",
    ),
    AGE,
];

pub(super) const CSI_DRIVER_COLUMNS: &[Column] = &[
    NAME,
    Column::new(
        "AttachRequired",
        "boolean",
        "Whether volumes must be attached to a node before they are mounted.",
    ),
    Column::new(
        "PodInfoOnMount",
        "boolean",
        "Whether the driver is told about the pod when mounting.",
    ),
    Column::new(
        "StorageCapacity",
        "boolean",
        "Whether the scheduler considers the capacity the driver reports.",
    ),
    Column::string(
        "TokenRequests",
        "Audiences of the service account tokens passed to the driver.",
    ),
    Column::new(
        "RequiresRepublish",
        "boolean",
        "Whether the driver's NodePublishVolume is called again periodically.",
    ),
    Column::string(
        "Modes",
        "Volume lifecycle modes the driver supports: Persistent, Ephemeral.",
    ),
    AGE,
];

pub(super) const CSI_NODE_COLUMNS: &[Column] = &[
    NAME,
    Column::new(
        "Drivers",
        "integer",
        "Number of CSI drivers registered on the node.",
    ),
    AGE,
];

pub(super) const VOLUME_ATTACHMENT_COLUMNS: &[Column] = &[
    NAME,
    // Upstream gives this column the `name` format too.
    Column {
        name: Cow::Borrowed("Attacher"),
        kind: Cow::Borrowed("string"),
        format: Cow::Borrowed("name"),
        description: Cow::Borrowed("The CSI driver that attaches the volume."),
        priority: 0,
    },
    Column::string("PV", "The persistent volume being attached."),
    Column::string("Node", "The node the volume is attached to."),
    Column::new(
        "Attached",
        "boolean",
        "Whether the volume is attached (status.attached).",
    ),
    AGE,
];

/// Upstream's short forms of access modes, in its order (not the object's).
const ACCESS_MODES: &[(&str, &str)] = &[
    ("ReadWriteOnce", "RWO"),
    ("ReadOnlyMany", "ROX"),
    ("ReadWriteMany", "RWX"),
    ("ReadWriteOncePod", "RWOP"),
];

fn access_modes(modes: &[Value]) -> String {
    ACCESS_MODES
        .iter()
        .filter(|(mode, _)| modes.iter().any(|m| m.as_str() == Some(*mode)))
        .map(|(_, short)| *short)
        .collect::<Vec<_>>()
        .join(",")
}

/// The class named by the beta annotation, which wins when present (even empty), else
/// `spec.storageClassName`.
fn storage_class(item: &Value) -> &str {
    item.pointer("/metadata/annotations/volume.beta.kubernetes.io~1storage-class")
        .and_then(Value::as_str)
        .unwrap_or_else(|| text(item, "/spec/storageClassName"))
}

fn volume_attributes_class(item: &Value) -> &str {
    item.pointer("/spec/volumeAttributesClassName")
        .and_then(Value::as_str)
        .unwrap_or("<unset>")
}

fn volume_mode(item: &Value) -> &str {
    optional_text(item, "/spec/volumeMode").unwrap_or("Filesystem")
}

/// `status.phase`, or Terminating once deleted.
fn phase(item: &Value) -> &str {
    if object::is_terminating(item) {
        "Terminating"
    } else {
        optional_text(item, "/status/phase").unwrap_or("Pending")
    }
}

/// Capacity and access modes are the bound volume's, so an unbound claim shows neither.
pub(super) fn persistent_volume_claim_cells(item: &Value, clock: &Clock) -> Vec<Value> {
    let volume = text(item, "/spec/volumeName");
    let (capacity, modes) = if volume.is_empty() {
        (String::new(), String::new())
    } else {
        (
            storage_quantity(item, "/status/capacity"),
            access_modes(list(item, "/status/accessModes")),
        )
    };
    vec![
        name_cell(item),
        json!(phase(item)),
        json!(volume),
        json!(capacity),
        json!(modes),
        json!(storage_class(item)),
        json!(volume_attributes_class(item)),
        creation_age(item, clock),
        json!(volume_mode(item)),
    ]
}

pub(super) fn persistent_volume_cells(item: &Value, clock: &Clock) -> Vec<Value> {
    let claim = match item.pointer("/spec/claimRef").filter(|c| c.is_object()) {
        Some(claim) => format!("{}/{}", text(claim, "/namespace"), text(claim, "/name")),
        None => String::new(),
    };
    vec![
        name_cell(item),
        json!(storage_quantity(item, "/spec/capacity")),
        json!(access_modes(list(item, "/spec/accessModes"))),
        json!(optional_text(item, "/spec/persistentVolumeReclaimPolicy").unwrap_or("Retain")),
        json!(phase(item)),
        json!(claim),
        json!(storage_class(item)),
        json!(volume_attributes_class(item)),
        json!(text(item, "/status/reason")),
        creation_age(item, clock),
        json!(volume_mode(item)),
    ]
}

/// The `storage` entry of a resource list; 0 when absent, as upstream prints a zero quantity.
fn storage_quantity(item: &Value, resources_pointer: &str) -> String {
    item.pointer(resources_pointer)
        .and_then(|resources| resources.get("storage"))
        .and_then(quantity)
        .unwrap_or_else(|| "0".into())
}

/// The class marked default by annotation reads `name (default)`.
pub(super) fn storage_class_cells(item: &Value, clock: &Clock) -> Vec<Value> {
    let is_default = [
        "storageclass.kubernetes.io~1is-default-class",
        "storageclass.beta.kubernetes.io~1is-default-class",
    ]
    .iter()
    .any(|key| {
        item.pointer(&format!("/metadata/annotations/{key}"))
            .and_then(Value::as_str)
            == Some("true")
    });
    let name = object::name(item);
    let name = if is_default {
        format!("{name} (default)")
    } else {
        name.to_string()
    };
    vec![
        json!(name),
        json!(text(item, "/provisioner")),
        json!(optional_text(item, "/reclaimPolicy").unwrap_or("Delete")),
        json!(optional_text(item, "/volumeBindingMode").unwrap_or("Immediate")),
        json!(flag(item, "/allowVolumeExpansion", false)),
        creation_age(item, clock),
    ]
}

pub(super) fn csi_driver_cells(item: &Value, clock: &Clock) -> Vec<Value> {
    // Upstream tells an unset list from a set one, but an empty list does not survive its
    // storage, so that reads as unset too.
    let token_requests = match item
        .pointer("/spec/tokenRequests")
        .and_then(Value::as_array)
    {
        Some(requests) if !requests.is_empty() => requests
            .iter()
            .map(|r| text(r, "/audience"))
            .collect::<Vec<_>>()
            .join(","),
        _ => "<unset>".into(),
    };
    let modes: Vec<&str> = list(item, "/spec/volumeLifecycleModes")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let modes = if modes.is_empty() {
        "Persistent".to_string()
    } else {
        modes.join(",")
    };
    vec![
        name_cell(item),
        json!(flag(item, "/spec/attachRequired", true)),
        json!(flag(item, "/spec/podInfoOnMount", false)),
        json!(flag(item, "/spec/storageCapacity", false)),
        json!(token_requests),
        json!(flag(item, "/spec/requiresRepublish", false)),
        json!(modes),
        creation_age(item, clock),
    ]
}

pub(super) fn csi_node_cells(item: &Value, clock: &Clock) -> Vec<Value> {
    vec![
        name_cell(item),
        json!(list(item, "/spec/drivers").len()),
        creation_age(item, clock),
    ]
}

pub(super) fn volume_attachment_cells(item: &Value, clock: &Clock) -> Vec<Value> {
    vec![
        name_cell(item),
        json!(text(item, "/spec/attacher")),
        json!(text(item, "/spec/source/persistentVolumeName")),
        json!(text(item, "/spec/nodeName")),
        json!(flag(item, "/status/attached", false)),
        creation_age(item, clock),
    ]
}

/// No age column: upstream's definition has none.
pub(super) const CSI_STORAGE_CAPACITY_COLUMNS: &[Column] = &[
    NAME,
    Column::string(
        "StorageClassName",
        "The storage class the capacity is reported for.",
    ),
    Column::string(
        "Capacity",
        "The capacity available, as the driver reported it.",
    ),
];

pub(super) fn csi_storage_capacity_cells(item: &Value, _: &Clock) -> Vec<Value> {
    let capacity = item
        .get("capacity")
        .filter(|v| !v.is_null())
        .and_then(quantity)
        .unwrap_or_else(|| "<unset>".into());
    vec![
        name_cell(item),
        json!(text(item, "/storageClassName")),
        json!(capacity),
    ]
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    #[test]
    fn persistent_volume_claims() {
        let resource = builtin("", "persistentvolumeclaims");
        assert_eq!(
            header_line(&resource),
            [
                "Name:string:0",
                "Status:string:0",
                "Volume:string:0",
                "Capacity:string:0",
                "Access Modes:string:0",
                "StorageClass:string:0",
                "VolumeAttributesClass:string:0",
                "Age:string:0",
                "VolumeMode:string:1"
            ]
        );
        let bound = json!({
            "metadata": meta("data", 600),
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
                     "volumeName": "pv-1", "storageClassName": "fast", "volumeMode": "Block",
                     "volumeAttributesClassName": "gold"},
            "status": {"phase": "Bound", "capacity": {"storage": "2Gi"},
                       "accessModes": ["ReadWriteOncePod", "ReadOnlyMany", "ReadWriteOnce"]}
        });
        assert_eq!(
            cells(&resource, &bound),
            [
                json!("data"),
                json!("Bound"),
                json!("pv-1"),
                json!("2Gi"),
                json!("RWO,ROX,RWOP"),
                json!("fast"),
                json!("gold"),
                json!("10m"),
                json!("Block")
            ]
        );
        // Unbound, unclassed and as created: capacity and modes wait for a volume.
        let pending = json!({"metadata": meta("data", 5),
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}});
        assert_eq!(
            cells(&resource, &pending),
            [
                json!("data"),
                json!("Pending"),
                json!(""),
                json!(""),
                json!(""),
                json!(""),
                json!("<unset>"),
                json!("5s"),
                json!("Filesystem")
            ]
        );
        let mut annotated = pending.clone();
        annotated["metadata"]["annotations"] =
            json!({"volume.beta.kubernetes.io/storage-class": "legacy"});
        annotated["spec"]["storageClassName"] = json!("fast");
        annotated["metadata"]["deletionTimestamp"] = json!(ago(1));
        let c = cells(&resource, &annotated);
        assert_eq!((&c[1], &c[5]), (&json!("Terminating"), &json!("legacy")));
    }

    #[test]
    fn persistent_volumes() {
        let resource = builtin("", "persistentvolumes");
        assert_eq!(
            header_line(&resource),
            [
                "Name:string:0",
                "Capacity:string:0",
                "Access Modes:string:0",
                "Reclaim Policy:string:0",
                "Status:string:0",
                "Claim:string:0",
                "StorageClass:string:0",
                "VolumeAttributesClass:string:0",
                "Reason:string:0",
                "Age:string:0",
                "VolumeMode:string:1"
            ]
        );
        let bound = json!({
            "metadata": {"name": "pv-1", "creationTimestamp": ago(86_400)},
            "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteMany", "ReadWriteOnce"],
                     "persistentVolumeReclaimPolicy": "Delete", "storageClassName": "fast",
                     "claimRef": {"namespace": "default", "name": "data"}, "hostPath": {"path": "/x"}},
            "status": {"phase": "Failed", "reason": "ProvisioningFailed"}
        });
        assert_eq!(
            cells(&resource, &bound),
            [
                json!("pv-1"),
                json!("10Gi"),
                json!("RWO,RWX"),
                json!("Delete"),
                json!("Failed"),
                json!("default/data"),
                json!("fast"),
                json!("<unset>"),
                json!("ProvisioningFailed"),
                json!("24h"),
                json!("Filesystem")
            ]
        );
        // As created: upstream's defaults for the phase, reclaim policy and mode.
        let fresh = json!({"metadata": {"name": "pv-2", "creationTimestamp": ago(30)},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"]}});
        assert_eq!(
            cells(&resource, &fresh),
            [
                json!("pv-2"),
                json!("1Gi"),
                json!("RWO"),
                json!("Retain"),
                json!("Pending"),
                json!(""),
                json!(""),
                json!("<unset>"),
                json!(""),
                json!("30s"),
                json!("Filesystem")
            ]
        );
        let bare = json!({"metadata": {"name": "pv-3"}});
        assert_eq!(cells(&resource, &bare)[1], json!("0"));
    }

    #[test]
    fn storage_classes() {
        let resource = builtin("storage.k8s.io", "storageclasses");
        assert_eq!(
            header_line(&resource),
            [
                "Name:string:0",
                "Provisioner:string:0",
                "ReclaimPolicy:string:0",
                "VolumeBindingMode:string:0",
                "AllowVolumeExpansion:string:0",
                "Age:string:0"
            ]
        );
        let class = json!({"metadata": {"name": "fast", "creationTimestamp": ago(60),
                "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
            "provisioner": "csi.example.com", "reclaimPolicy": "Retain",
            "volumeBindingMode": "WaitForFirstConsumer", "allowVolumeExpansion": true});
        assert_eq!(
            cells(&resource, &class),
            [
                json!("fast (default)"),
                json!("csi.example.com"),
                json!("Retain"),
                json!("WaitForFirstConsumer"),
                json!(true),
                json!("60s")
            ]
        );
        let plain = json!({"metadata": {"name": "slow", "creationTimestamp": ago(60),
                "annotations": {"storageclass.beta.kubernetes.io/is-default-class": "false"}},
            "provisioner": "csi.example.com"});
        assert_eq!(
            cells(&resource, &plain),
            [
                json!("slow"),
                json!("csi.example.com"),
                json!("Delete"),
                json!("Immediate"),
                json!(false),
                json!("60s")
            ]
        );
        let mut beta = plain.clone();
        beta["metadata"]["annotations"] =
            json!({"storageclass.beta.kubernetes.io/is-default-class": "true"});
        assert_eq!(cells(&resource, &beta)[0], json!("slow (default)"));
    }

    #[test]
    fn csi_drivers() {
        let resource = builtin("storage.k8s.io", "csidrivers");
        assert_eq!(
            header_line(&resource),
            [
                "Name:string:0",
                "AttachRequired:boolean:0",
                "PodInfoOnMount:boolean:0",
                "StorageCapacity:boolean:0",
                "TokenRequests:string:0",
                "RequiresRepublish:boolean:0",
                "Modes:string:0",
                "Age:string:0"
            ]
        );
        let driver = json!({"metadata": {"name": "csi.example.com", "creationTimestamp": ago(60)},
            "spec": {"attachRequired": false, "podInfoOnMount": true, "storageCapacity": true,
                     "tokenRequests": [{"audience": "vault"}, {"audience": "gcp", "expirationSeconds": 600}],
                     "requiresRepublish": true,
                     "volumeLifecycleModes": ["Persistent", "Ephemeral"]}});
        assert_eq!(
            cells(&resource, &driver),
            [
                json!("csi.example.com"),
                json!(false),
                json!(true),
                json!(true),
                json!("vault,gcp"),
                json!(true),
                json!("Persistent,Ephemeral"),
                json!("60s")
            ]
        );
        let defaults = json!({"metadata": {"name": "d", "creationTimestamp": ago(60)}, "spec": {}});
        assert_eq!(
            cells(&resource, &defaults),
            [
                json!("d"),
                json!(true),
                json!(false),
                json!(false),
                json!("<unset>"),
                json!(false),
                json!("Persistent"),
                json!("60s")
            ]
        );
        let no_audiences = json!({"metadata": {"name": "d"}, "spec": {"tokenRequests": []}});
        assert_eq!(cells(&resource, &no_audiences)[4], json!("<unset>"));
    }

    #[test]
    fn csi_nodes_count_their_drivers() {
        let resource = builtin("storage.k8s.io", "csinodes");
        assert_eq!(
            header_line(&resource),
            ["Name:string:0", "Drivers:integer:0", "Age:string:0"]
        );
        let node = json!({"metadata": {"name": "node-1", "creationTimestamp": ago(60)},
            "spec": {"drivers": [{"name": "a", "nodeID": "n1"}, {"name": "b", "nodeID": "n1"}]}});
        assert_eq!(
            cells(&resource, &node),
            [json!("node-1"), json!(2), json!("60s")]
        );
        let empty = json!({"metadata": {"name": "node-2"}, "spec": {"drivers": []}});
        assert_eq!(cells(&resource, &empty)[1], json!(0));
    }

    #[test]
    fn volume_attachments() {
        let resource = builtin("storage.k8s.io", "volumeattachments");
        assert_eq!(
            header_line(&resource),
            [
                "Name:string:0",
                "Attacher:string:0",
                "PV:string:0",
                "Node:string:0",
                "Attached:boolean:0",
                "Age:string:0"
            ]
        );
        assert_eq!(
            rendered(&resource, &json!({"metadata": {"name": "a"}}))["columnDefinitions"][1]["format"],
            "name"
        );
        let attachment = json!({"metadata": {"name": "attach-1", "creationTimestamp": ago(60)},
            "spec": {"attacher": "csi.example.com", "nodeName": "node-1",
                     "source": {"persistentVolumeName": "pv-1"}},
            "status": {"attached": true}});
        assert_eq!(
            cells(&resource, &attachment),
            [
                json!("attach-1"),
                json!("csi.example.com"),
                json!("pv-1"),
                json!("node-1"),
                json!(true),
                json!("60s")
            ]
        );
        let inline = json!({"metadata": {"name": "attach-2", "creationTimestamp": ago(60)},
            "spec": {"attacher": "csi.example.com", "nodeName": "node-1",
                     "source": {"inlineVolumeSpec": {}}}});
        let c = cells(&resource, &inline);
        assert_eq!((&c[2], &c[4]), (&json!(""), &json!(false)));
    }

    #[test]
    fn csi_storage_capacities() {
        let resource = builtin("storage.k8s.io", "csistoragecapacities");
        let reported = json!({"metadata": meta("csisc-1", 60), "storageClassName": "fast",
            "capacity": "100Gi"});
        assert_eq!(
            cells(&resource, &reported),
            [json!("csisc-1"), json!("fast"), json!("100Gi")]
        );
        let unknown = json!({"metadata": meta("csisc-2", 60), "storageClassName": "fast"});
        assert_eq!(cells(&resource, &unknown)[2], json!("<unset>"));
    }
}
