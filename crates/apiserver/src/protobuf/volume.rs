//! Pod volumes.
//!
//! Converted: hostPath, emptyDir, secret, configMap, persistentVolumeClaim, downwardAPI,
//! projected (secret, configMap, downwardAPI and serviceAccountToken projections), nfs,
//! csi and image. The in-tree cloud and legacy sources (gcePersistentDisk,
//! awsElasticBlockStore, gitRepo, iscsi, glusterfs, rbd, flexVolume, cinder, cephfs,
//! flocker, fc, azureFile, vsphereVolume, quobyte, azureDisk, photonPersistentDisk,
//! portworxVolume, scaleIO, storageos), `ephemeral` (a whole PVC template), and the
//! clusterTrustBundle and podCertificate projections are refused with 415 when set.

use k8s_pb::api::core::v1 as core;

use super::core_v1::local_object_reference;
use super::json::{Converted, convert};

pub(super) fn volume(volume: core::Volume) -> Converted {
    convert!(volume, core::Volume {
        name => always("name"),
        volume_source => inline(volume_source),
    })
}

fn volume_source(source: core::VolumeSource) -> Converted {
    convert!(source, core::VolumeSource {
        host_path => pointer_message("hostPath", host_path_volume_source),
        empty_dir => pointer_message("emptyDir", empty_dir_volume_source),
        gce_persistent_disk => reject("gcePersistentDisk"),
        aws_elastic_block_store => reject("awsElasticBlockStore"),
        git_repo => reject("gitRepo"),
        secret => pointer_message("secret", secret_volume_source),
        nfs => pointer_message("nfs", nfs_volume_source),
        iscsi => reject("iscsi"),
        glusterfs => reject("glusterfs"),
        persistent_volume_claim =>
            pointer_message("persistentVolumeClaim", persistent_volume_claim_volume_source),
        rbd => reject("rbd"),
        flex_volume => reject("flexVolume"),
        cinder => reject("cinder"),
        cephfs => reject("cephfs"),
        flocker => reject("flocker"),
        downward_api => pointer_message("downwardAPI", downward_api_volume_source),
        fc => reject("fc"),
        azure_file => reject("azureFile"),
        config_map => pointer_message("configMap", config_map_volume_source),
        vsphere_volume => reject("vsphereVolume"),
        quobyte => reject("quobyte"),
        azure_disk => reject("azureDisk"),
        photon_persistent_disk => reject("photonPersistentDisk"),
        projected => pointer_message("projected", projected_volume_source),
        portworx_volume => reject("portworxVolume"),
        scale_io => reject("scaleIO"),
        storageos => reject("storageos"),
        csi => pointer_message("csi", csi_volume_source),
        ephemeral => reject("ephemeral"),
        image => pointer_message("image", image_volume_source),
    })
}

fn host_path_volume_source(source: core::HostPathVolumeSource) -> Converted {
    convert!(source, core::HostPathVolumeSource {
        path => always("path"),
        r#type => pointer("type"),
    })
}

fn empty_dir_volume_source(source: core::EmptyDirVolumeSource) -> Converted {
    convert!(source, core::EmptyDirVolumeSource {
        medium => non_zero("medium"),
        size_limit => pointer_quantity("sizeLimit"),
    })
}

fn secret_volume_source(source: core::SecretVolumeSource) -> Converted {
    convert!(source, core::SecretVolumeSource {
        secret_name => non_zero("secretName"),
        items => list("items", key_to_path),
        default_mode => pointer("defaultMode"),
        optional => pointer("optional"),
    })
}

fn config_map_volume_source(source: core::ConfigMapVolumeSource) -> Converted {
    convert!(source, core::ConfigMapVolumeSource {
        local_object_reference => inline(local_object_reference),
        items => list("items", key_to_path),
        default_mode => pointer("defaultMode"),
        optional => pointer("optional"),
    })
}

fn key_to_path(item: core::KeyToPath) -> Converted {
    convert!(item, core::KeyToPath {
        key => always("key"),
        path => always("path"),
        mode => pointer("mode"),
    })
}

fn nfs_volume_source(source: core::NfsVolumeSource) -> Converted {
    convert!(source, core::NfsVolumeSource {
        server => always("server"),
        path => always("path"),
        read_only => non_zero("readOnly"),
    })
}

fn persistent_volume_claim_volume_source(
    source: core::PersistentVolumeClaimVolumeSource,
) -> Converted {
    convert!(source, core::PersistentVolumeClaimVolumeSource {
        claim_name => always("claimName"),
        read_only => non_zero("readOnly"),
    })
}

fn downward_api_volume_source(source: core::DownwardAPIVolumeSource) -> Converted {
    convert!(source, core::DownwardAPIVolumeSource {
        items => list("items", downward_api_volume_file),
        default_mode => pointer("defaultMode"),
    })
}

fn downward_api_volume_file(file: core::DownwardAPIVolumeFile) -> Converted {
    convert!(file, core::DownwardAPIVolumeFile {
        path => always("path"),
        field_ref => pointer_message("fieldRef", object_field_selector),
        resource_field_ref => pointer_message("resourceFieldRef", resource_field_selector),
        mode => pointer("mode"),
    })
}

pub(super) fn object_field_selector(selector: core::ObjectFieldSelector) -> Converted {
    convert!(selector, core::ObjectFieldSelector {
        api_version => non_zero("apiVersion"),
        field_path => always("fieldPath"),
    })
}

pub(super) fn resource_field_selector(selector: core::ResourceFieldSelector) -> Converted {
    convert!(selector, core::ResourceFieldSelector {
        container_name => non_zero("containerName"),
        resource => always("resource"),
        divisor => value_quantity("divisor"),
    })
}

fn projected_volume_source(source: core::ProjectedVolumeSource) -> Converted {
    convert!(source, core::ProjectedVolumeSource {
        sources => always_list("sources", volume_projection),
        default_mode => pointer("defaultMode"),
    })
}

fn volume_projection(projection: core::VolumeProjection) -> Converted {
    convert!(projection, core::VolumeProjection {
        secret => pointer_message("secret", secret_projection),
        downward_api => pointer_message("downwardAPI", downward_api_projection),
        config_map => pointer_message("configMap", config_map_projection),
        service_account_token =>
            pointer_message("serviceAccountToken", service_account_token_projection),
        cluster_trust_bundle => reject("clusterTrustBundle"),
        pod_certificate => reject("podCertificate"),
    })
}

fn secret_projection(projection: core::SecretProjection) -> Converted {
    convert!(projection, core::SecretProjection {
        local_object_reference => inline(local_object_reference),
        items => list("items", key_to_path),
        optional => pointer("optional"),
    })
}

fn config_map_projection(projection: core::ConfigMapProjection) -> Converted {
    convert!(projection, core::ConfigMapProjection {
        local_object_reference => inline(local_object_reference),
        items => list("items", key_to_path),
        optional => pointer("optional"),
    })
}

fn downward_api_projection(projection: core::DownwardAPIProjection) -> Converted {
    convert!(projection, core::DownwardAPIProjection {
        items => list("items", downward_api_volume_file),
    })
}

fn service_account_token_projection(projection: core::ServiceAccountTokenProjection) -> Converted {
    convert!(projection, core::ServiceAccountTokenProjection {
        audience => non_zero("audience"),
        expiration_seconds => pointer("expirationSeconds"),
        path => always("path"),
    })
}

fn csi_volume_source(source: core::CSIVolumeSource) -> Converted {
    convert!(source, core::CSIVolumeSource {
        driver => always("driver"),
        read_only => pointer("readOnly"),
        fs_type => pointer("fsType"),
        volume_attributes => string_map("volumeAttributes"),
        node_publish_secret_ref => pointer_message("nodePublishSecretRef", local_object_reference),
    })
}

fn image_volume_source(source: core::ImageVolumeSource) -> Converted {
    convert!(source, core::ImageVolumeSource {
        reference => non_zero("reference"),
        pull_policy => non_zero("pullPolicy"),
    })
}
