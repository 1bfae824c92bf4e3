//! OpenAPI documents of the served API: `/openapi/v2` (Swagger 2.0, in protobuf and JSON) and
//! `/openapi/v3` (an index, and one OpenAPI 3.0 document per group/version).
//!
//! They are generated from the schemas the server validates with (`definitions.rs`): the
//! k8s-openapi types of the built-in kinds, and the structural schemas of custom resources. So
//! `kubectl explain` works for every served kind, and kubectl's client-side validation (which it
//! applies to the items of a `kind: List`) checks against what the server would accept.
//!
//! # Guarantees
//! - A document changes exactly when the catalog does (a CRD established, changed or removed):
//!   documents are rendered once per catalog generation and kept.
//! - Every document has an ETag, the upper-case hex SHA-512 of its bytes as upstream computes
//!   it; `If-None-Match` gets 304. The v3 index links each document with `?hash=` that ETag, so
//!   kubectl's disk cache refetches whenever one changes; a stale hash is redirected (301) to
//!   the current one, and a current one is served `immutable`.
//!
//! # Caveats
//! - The documents carry no operations except the PATCH stubs of v3 (see `v3.rs`), so clients
//!   that generate code from them (rather than read schemas) get nothing useful.
//! - v3 is served in JSON only; v2 in JSON and gnostic protobuf.

mod definitions;
mod gnostic;
mod v2;
mod v3;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use schemars::generate::SchemaSettings;
use serde_json::{Value, json};
use sha2::{Digest, Sha512};

use crate::resources::Catalog;

/// The media type of `/openapi/v2` in protobuf, as upstream labels the response. Clients ask
/// for the older `…spec.v2@v1.0+protobuf`, which Go's MIME parser refuses as a content type
/// (`mime: unexpected content after media subtype`), so it is never sent back.
pub const V2_PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";

/// One rendering of a document: its bytes and the ETag that names them.
#[derive(Clone, Debug)]
pub struct Rendered {
    pub body: Bytes,
    /// The hash without quotes (the v3 index's `?hash=`); the ETag header quotes it.
    pub hash: String,
}

impl Rendered {
    fn new(body: Vec<u8>) -> Rendered {
        let digest = Sha512::digest(&body);
        let hash = digest.iter().map(|byte| format!("{byte:02X}")).collect();
        Rendered {
            body: Bytes::from(body),
            hash,
        }
    }

    fn json(value: &Value) -> Rendered {
        Rendered::new(value.to_string().into_bytes())
    }

    /// The `ETag` header value.
    pub fn etag(&self) -> String {
        format!("\"{}\"", self.hash)
    }
}

/// `/openapi/v2` in both encodings.
pub struct V2 {
    pub json: Rendered,
    pub protobuf: Rendered,
}

/// `/openapi/v3` and its documents.
pub struct V3 {
    pub index: Rendered,
    /// Keyed by index path (`api/v1`, `apis/apps/v1`).
    pub documents: BTreeMap<String, Rendered>,
}

/// The rendered documents, kept per catalog generation.
#[derive(Default)]
pub struct OpenApi {
    v2: Cached<V2>,
    v3: Cached<V3>,
}

impl OpenApi {
    pub fn v2(&self, catalog: &Catalog) -> Arc<V2> {
        self.v2.get(catalog, |catalog| {
            let document = v2::document(&catalog.all());
            V2 {
                protobuf: Rendered::new(gnostic::encode_document(&document)),
                json: Rendered::json(&document),
            }
        })
    }

    pub fn v3(&self, catalog: &Catalog) -> Arc<V3> {
        self.v3.get(catalog, |catalog| {
            let all = definitions::definitions(&catalog.all(), SchemaSettings::openapi3()).schemas;
            let mut documents = BTreeMap::new();
            for (group, versions) in catalog.groups() {
                for version in versions {
                    let types = catalog.resources_in(&group, &version);
                    let document = v3::document(&group, &version, &types, &all);
                    documents.insert(v3::index_path(&group, &version), Rendered::new(document));
                }
            }
            let paths: serde_json::Map<String, Value> = documents
                .iter()
                .map(|(path, document)| {
                    let url = format!("/openapi/v3/{path}?hash={}", document.hash);
                    (path.clone(), json!({"serverRelativeURL": url}))
                })
                .collect();
            V3 {
                index: Rendered::json(&json!({"paths": paths})),
                documents,
            }
        })
    }
}

/// A value rendered from the catalog, kept until the catalog changes.
struct Cached<T> {
    current: Mutex<Option<(u64, Arc<T>)>>,
}

impl<T> Default for Cached<T> {
    fn default() -> Self {
        Cached {
            current: Mutex::new(None),
        }
    }
}

impl<T> Cached<T> {
    fn get(&self, catalog: &Catalog, render: impl FnOnce(&Catalog) -> T) -> Arc<T> {
        // Read before rendering: a change made while rendering leaves an older generation
        // stored, so the next request renders again.
        let generation = catalog.generation();
        let mut current = self
            .current
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some((rendered_at, value)) = current.as_ref()
            && *rendered_at == generation
        {
            return value.clone();
        }
        let value = Arc::new(render(catalog));
        *current = Some((generation, value.clone()));
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_are_rendered_again_only_when_the_catalog_changes() {
        let catalog = Catalog::with_builtins();
        let openapi = OpenApi::default();
        let first = openapi.v3(&catalog);
        assert!(Arc::ptr_eq(&first, &openapi.v3(&catalog)));
        let mut widget =
            crate::resources::ResourceType::builtin("example.com", "v1", "Widget", "widgets", true);
        widget.builtin = false;
        catalog.add(widget);
        let second = openapi.v3(&catalog);
        assert!(!Arc::ptr_eq(&first, &second));
        assert!(second.documents.contains_key("apis/example.com/v1"));
        let linked = serde_json::from_slice::<Value>(&second.index.body).expect("index is JSON");
        assert_eq!(
            linked["paths"]["api/v1"]["serverRelativeURL"],
            format!(
                "/openapi/v3/api/v1?hash={}",
                second.documents["api/v1"].hash
            )
        );
    }
}
