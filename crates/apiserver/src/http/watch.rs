//! Watch responses: newline-delimited compact JSON events, streamed as they happen.
//!
//! kube-rs splits the stream on newlines, so every event is one compact line (api-surface
//! §4.2). Plain JSON watches get their lines already encoded by the watch cache, once for all
//! watchers (see [`crate::watch_cache`]). The stream ends at `timeoutSeconds`, at server
//! shutdown, or after an in-stream error.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use http::{HeaderValue, StatusCode, header};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::table::{self, TABLE_CONTENT_TYPE};
use crate::resources::ResourceType;
use crate::watch_cache::{WatchItem, WatchStream, event_line as line};

pub struct Framing {
    pub resource: Arc<ResourceType>,
    /// Send each object as a one-row Table (kubectl get -w).
    pub table: bool,
    /// Each object as `PartialObjectMetadata` (see the metadata module).
    pub metadata_only: Option<super::metadata::MetadataOnly>,
    /// The client asked for BOOKMARK events.
    pub bookmarks: bool,
    pub timeout: Duration,
    pub shutdown: CancellationToken,
}

pub fn response(stream: WatchStream, framing: Framing) -> Response {
    let Framing {
        resource,
        table,
        metadata_only,
        bookmarks,
        timeout,
        shutdown,
    } = framing;
    let deadline = tokio::time::sleep(timeout);
    let stopped = async move {
        tokio::select! {
            _ = deadline => {},
            _ = shutdown.cancelled() => {},
        }
    };
    let mut first_table = true;
    let lines = stream
        .take_until(Box::pin(stopped))
        .filter_map(move |item| {
            let out = match item {
                WatchItem::Change { event_type, object, line: encoded } => {
                    if table {
                        let with_definitions = std::mem::replace(&mut first_table, false);
                        Some(line(event_type, &table::table(&resource, &object, with_definitions)))
                    } else if let Some(metadata_only) = &metadata_only {
                        Some(line(event_type, &metadata_only.object(&object)))
                    } else {
                        Some(encoded.unwrap_or_else(|| line(event_type, &object)))
                    }
                }
                WatchItem::Bookmark { revision, initial_events_end } => {
                    if !bookmarks {
                        None
                    } else {
                        let mut metadata = json!({"resourceVersion": revision.to_string()});
                        if initial_events_end {
                            metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
                        }
                        Some(line("BOOKMARK", &json!({"kind": resource.kind, "apiVersion": resource.api_version(), "metadata": metadata})))
                    }
                }
                // The watch cache ends the stream right after an error.
                WatchItem::Error(error) => Some(line("ERROR", &error.to_status())),
            };
            futures::future::ready(out.map(Ok::<Bytes, std::io::Error>))
        });
    let content_type = if table {
        TABLE_CONTENT_TYPE
    } else {
        "application/json"
    };
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, HeaderValue::from_static(content_type))],
        Body::from_stream(lines),
    )
        .into_response()
}
