//! Where objects cross between versions through a CRD's conversion webhook
//! ([`crate::crd::conversion`]): reads convert what is stored to the request's version, and
//! writes convert the request's object to the storage version as they commit it.
//!
//! Only types with a webhook ([`ResourceType::conversion`]) come through here; with
//! `strategy: None` the stored object serves every version ([`served`]).
//!
//! # Guarantees
//! - Validation, admission and the update rules see the object in the request's version, as
//!   upstream's handler, which uses the request's version as its in-memory form, does: a
//!   custom object is validated against the schema of the version it arrives in.
//! - What is stored is always in the storage version: a write in another version fails,
//!   storing nothing, when the webhook fails.
//! - Objects already in the wanted version never reach the webhook, so reads, writes and
//!   deletes in the storage version of objects stored in it work while the webhook is down,
//!   and the in-process controllers pick the storage version
//!   ([`crate::resources::Catalog::lookup_resource`]).
//! - A DELETE in another version converts the stored object once before it changes
//!   anything, as upstream decodes it into the request's version: its answer and its
//!   admission webhooks' `oldObject` are in the request's version, and it fails, changing
//!   nothing, when the webhook does. The delete's own rules work on the stored form.

use super::*;
use crate::crd::conversion::Shape;

impl Registry {
    /// `object` (as stored, or as the watch cache holds it) in `resource`'s version.
    pub(super) async fn to_request_version(
        &self,
        resource: &ResourceType,
        object: Value,
    ) -> ApiResult<Value> {
        if resource.conversion.is_none() {
            return Ok(object);
        }
        self.converter
            .convert_one(resource, object, &resource.api_version())
            .await
    }

    /// The items of a list in `resource`'s version, converted in one review.
    pub(super) async fn list_to_request_version(
        &self,
        resource: &ResourceType,
        items: Vec<Value>,
    ) -> ApiResult<Vec<Value>> {
        if resource.conversion.is_none() {
            return Ok(items);
        }
        self.converter
            .convert(resource, items, &resource.api_version(), Shape::List)
            .await
    }

    /// The stored object at `kv` in `resource`'s version.
    pub(super) async fn decode_in_request_version(
        &self,
        resource: &ResourceType,
        kv: &KeyValue,
    ) -> ApiResult<Value> {
        let object = decode_as(resource, kv)?;
        self.to_request_version(resource, object).await
    }

    /// A stored object about to be deleted through `resource`, in its version: None when it
    /// is in it already (or its type has no webhook).
    pub(super) async fn shown_for_delete(
        &self,
        resource: &ResourceType,
        stored: &Value,
    ) -> ApiResult<Option<Value>> {
        if resource.conversion.is_none()
            || stored.get("apiVersion").and_then(Value::as_str)
                == Some(resource.api_version().as_str())
        {
            return Ok(None);
        }
        self.to_request_version(resource, stored.clone())
            .await
            .map(Some)
    }

    /// `object` in the storage version, for the store; None when it is in it already (or
    /// its type has no webhook).
    pub(super) async fn to_storage_version(
        &self,
        resource: &ResourceType,
        object: &Value,
    ) -> ApiResult<Option<Value>> {
        if resource.conversion.is_none() {
            return Ok(None);
        }
        let stored = resource.stored_api_version();
        if object.get("apiVersion").and_then(Value::as_str) == Some(stored.as_str()) {
            return Ok(None);
        }
        let mut converted = self
            .converter
            .convert_one(resource, object.clone(), &stored)
            .await?;
        // The stored form has no resourceVersion; the webhook may have echoed one.
        metadata_mut(&mut converted).remove("resourceVersion");
        Ok(Some(converted))
    }

    /// A watch of a type with a webhook: each event's object in the watched version. A
    /// failed conversion ends the watch with an ERROR event carrying it.
    pub(super) fn convert_watch(
        &self,
        resource: Arc<ResourceType>,
        stream: WatchStream,
    ) -> WatchStream {
        if resource.conversion.is_none() {
            return stream;
        }
        let converter = Arc::clone(&self.converter);
        let desired = resource.api_version();
        stream
            .then(move |item| {
                let converter = Arc::clone(&converter);
                let resource = Arc::clone(&resource);
                let desired = desired.clone();
                async move {
                    match item {
                        // The line encoded for the stored version is not the converted
                        // object's: the converted change carries none.
                        WatchItem::Change {
                            event_type, object, ..
                        } if object.get("apiVersion").and_then(Value::as_str)
                            != Some(desired.as_str()) =>
                        {
                            match converter
                                .convert_one(&resource, (*object).clone(), &desired)
                                .await
                            {
                                Ok(converted) => WatchItem::Change {
                                    event_type,
                                    object: Arc::new(converted),
                                    line: None,
                                },
                                Err(error) => WatchItem::Error(error),
                            }
                        }
                        other => other,
                    }
                }
            })
            .scan(false, |ended, item| {
                // Nothing follows an ERROR.
                if *ended {
                    return futures::future::ready(None);
                }
                *ended = matches!(item, WatchItem::Error(_));
                futures::future::ready(Some(item))
            })
            .boxed()
    }
}
