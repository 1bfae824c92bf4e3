//! Metadata-only responses: what a client gets when its `Accept` asks for
//! `as=PartialObjectMetadata` (one object, or each object of a watch) or
//! `as=PartialObjectMetadataList` (a list), with `g=meta.k8s.io` and `v=v1` (or `v1beta1`).
//!
//! kube-rs's `Api::get_metadata`, `list_metadata`, `watch_metadata` and
//! `kube::runtime::metadata_watcher`, and client-go's metadata informers, ask for these so that
//! a controller that only needs names, labels, owners and finalizers does not pay for whole
//! objects. Every verb that answers with an object honours it (get, list, watch, create,
//! update, patch, delete, deletecollection), as upstream does; a `Status` is sent as it is.
//!
//! # Guarantees
//! - An object is `{"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
//!   "metadata": …}` with the object's whole `metadata`; a list is a
//!   `PartialObjectMetadataList` of those, with the list's `metadata` (resourceVersion,
//!   continue, remainingItemCount).
//! - Asking for the list form of one object, or the object form of a list, is 406
//!   `NotAcceptable`, as upstream answers it.
//!
//! # Caveats
//! - The media types in `Accept` are tried in order and the first one Finale can send decides;
//!   protobuf ones are passed over (responses are JSON), so client-go's
//!   `application/vnd.kubernetes.protobuf;as=…,application/json;as=…` gets the JSON form.

use http::{HeaderMap, header};
use serde_json::{Value, json};

use crate::status::ApiError;

/// What the client asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetadataOnly {
    /// `PartialObjectMetadataList` rather than `PartialObjectMetadata`.
    pub list: bool,
    /// `meta.k8s.io/v1` or `meta.k8s.io/v1beta1`.
    pub api_version: String,
}

/// The metadata-only form the first media type Finale can send asks for, if any.
pub fn requested(headers: &HeaderMap) -> Option<MetadataOnly> {
    let accept = headers.get(header::ACCEPT)?.to_str().ok()?;
    for media_type in accept.split(',') {
        let mut parts = media_type.split(';').map(str::trim);
        let essence = parts.next().unwrap_or_default();
        if !matches!(essence, "application/json" | "application/*" | "*/*") {
            continue;
        }
        let (mut as_kind, mut group, mut version) = (None, None, None);
        for parameter in parts {
            match parameter.split_once('=') {
                Some(("as", value)) => as_kind = Some(value),
                Some(("g", value)) => group = Some(value),
                Some(("v", value)) => version = Some(value),
                _ => {}
            }
        }
        let list = match (as_kind, group) {
            (Some("PartialObjectMetadata"), Some("meta.k8s.io")) => false,
            (Some("PartialObjectMetadataList"), Some("meta.k8s.io")) => true,
            // Plain JSON (or a Table, which the table module answers) decides.
            _ => return None,
        };
        let version = version
            .filter(|version| matches!(*version, "v1" | "v1beta1"))
            .unwrap_or("v1");
        return Some(MetadataOnly {
            list,
            api_version: format!("meta.k8s.io/{version}"),
        });
    }
    None
}

impl MetadataOnly {
    /// The response body in the form asked for; a `Status` is kept as it is.
    pub fn convert(&self, body: &Value) -> Result<Value, ApiError> {
        if body.get("kind").and_then(Value::as_str) == Some("Status") {
            return Ok(body.clone());
        }
        let is_list = body.get("items").is_some_and(Value::is_array);
        match (self.list, is_list) {
            (true, true) => Ok(self.list_of(body)),
            (false, false) => Ok(self.object(body)),
            (true, false) => Err(not_acceptable(
                "you requested PartialObjectMetadataList, but the requested object is not a list",
            )),
            (false, true) => Err(not_acceptable(
                "you requested PartialObjectMetadata, but the requested object is a list; ask for PartialObjectMetadataList",
            )),
        }
    }

    /// One object's metadata, for watch events as for single responses.
    pub fn object(&self, object: &Value) -> Value {
        json!({
            "apiVersion": self.api_version,
            "kind": "PartialObjectMetadata",
            "metadata": object.get("metadata").cloned().unwrap_or_else(|| json!({})),
        })
    }

    fn list_of(&self, list: &Value) -> Value {
        let items: Vec<Value> = list
            .get("items")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|item| self.object(item))
            .collect();
        json!({
            "apiVersion": self.api_version,
            "kind": "PartialObjectMetadataList",
            "metadata": list.get("metadata").cloned().unwrap_or_else(|| json!({})),
            "items": items,
        })
    }
}

fn not_acceptable(message: &str) -> ApiError {
    ApiError::new(406, "NotAcceptable", message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn accept(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::ACCEPT,
            HeaderValue::from_str(value).expect("header"),
        );
        headers
    }

    #[test]
    fn the_first_media_type_finale_can_send_decides() {
        let client_go = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
        assert_eq!(
            requested(&accept(client_go)),
            Some(MetadataOnly {
                list: true,
                api_version: "meta.k8s.io/v1".into()
            })
        );
        let kube_rs = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1beta1";
        assert_eq!(
            requested(&accept(kube_rs)).map(|m| (m.list, m.api_version)),
            Some((false, "meta.k8s.io/v1beta1".into()))
        );
        assert_eq!(
            requested(&accept(
                "application/json, application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
            )),
            None
        );
        assert_eq!(
            requested(&accept("application/json;as=Table;g=meta.k8s.io;v=v1")),
            None
        );
        assert_eq!(requested(&HeaderMap::new()), None);
    }

    #[test]
    fn objects_and_lists_keep_only_their_metadata() {
        let one = MetadataOnly {
            list: false,
            api_version: "meta.k8s.io/v1".into(),
        };
        let object = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "finalizers": ["x"]}, "data": {"k": "v"}});
        assert_eq!(
            one.convert(&object).expect("object"),
            json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                   "metadata": {"name": "a", "finalizers": ["x"]}})
        );
        let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Success"});
        assert_eq!(one.convert(&status).expect("status"), status);

        let many = MetadataOnly {
            list: true,
            ..one.clone()
        };
        let list = json!({"apiVersion": "v1", "kind": "ConfigMapList",
            "metadata": {"resourceVersion": "7", "continue": "c"}, "items": [object]});
        let converted = many.convert(&list).expect("list");
        assert_eq!(converted["kind"], "PartialObjectMetadataList");
        assert_eq!(converted["metadata"]["continue"], "c");
        assert_eq!(converted["items"][0]["kind"], "PartialObjectMetadata");
        assert!(converted["items"][0].get("data").is_none());

        assert_eq!(one.convert(&list).map_err(|e| e.code).err(), Some(406));
        assert_eq!(many.convert(&object).map_err(|e| e.code).err(), Some(406));
    }
}
