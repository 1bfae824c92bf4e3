//! Unpaginated lists encoded as they are read, as kube-apiserver 1.33 does with its streaming
//! JSON list encoder (KEP-5116, `StreamingCollectionEncodingToJSON`, beta and on by default).
//!
//! A list without `limit` of a large collection used to be read whole from the store, decoded
//! whole, and encoded whole before the first byte left: 1.3 GB at once for 100 000 objects
//! of 1 KiB (`finale-bench lists`). Here the store is read a batch of keys at a time, at the revision of
//! the first batch, and each batch is encoded and handed to the response body before the next
//! is read, so the memory a list holds at once is a batch, whatever the collection's size.
//!
//! Guarantees:
//! - The same bytes a client parses as [`Registry::list`]'s answer (the same items, in key
//!   order, at one revision; metadata before items, as upstream writes them).
//! - Anything that can fail before the first byte (selectors, `resourceVersion` rules, the
//!   store unavailable) fails before it, with its `Status`.
//!
//! Caveats:
//! - A failure after the first byte (the store going away mid-list, or the revision compacted
//!   under a list that outlives `--etcd-compaction-interval`) ends the response early; the
//!   client sees a truncated body and retries, as with upstream's streaming encoder.
//! - Lists that cannot be cut into batches are not streamed: a page (`limit`), a type whose
//!   versions a conversion webhook converts (the webhook converts a page in one review), a
//!   single-name field selector (one key).

use std::sync::Arc;

use axum::body::Bytes;
use finale_store::{KeyValue, RangeRequest, Revision, prefix_range};
use futures::stream::{self, BoxStream, StreamExt};
use serde_json::Value;

use super::read::parse_selectors;
use super::{ListOptions, Registry, decode_as, matches_selectors, strip_type_meta};
use crate::resources::ResourceType;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::status::{ApiError, ApiResult};

/// Keys read from the store per batch: the bound on what a streamed list holds at once.
const BATCH: usize = 256;

/// A streamed list's body, chunk by chunk; an `Err` ends the response early.
pub type ListChunks = BoxStream<'static, Result<Bytes, ApiError>>;

/// What a batch after the first needs.
struct Reader {
    registry: Registry,
    resource: Arc<ResourceType>,
    labels: Option<LabelSelector>,
    fields: Option<FieldSelector>,
    /// The next key to read; None once the range is exhausted.
    next: Option<Vec<u8>>,
    end: Vec<u8>,
    revision: Revision,
    /// Whether an item has been written (the next one needs a comma).
    wrote_item: bool,
    /// The closing bytes are sent, or an error ended the body: nothing follows.
    finished: bool,
}

impl Reader {
    /// Encodes the items of `kvs` that match the selectors onto `out`.
    fn encode(&mut self, kvs: &[KeyValue], out: &mut Vec<u8>) -> ApiResult<()> {
        for kv in kvs {
            let mut object = decode_as(&self.resource, kv)?;
            if !matches_selectors(&object, self.labels.as_ref(), self.fields.as_ref()) {
                continue;
            }
            strip_type_meta(&mut object);
            if std::mem::replace(&mut self.wrote_item, true) {
                out.push(b',');
            }
            serde_json::to_writer(&mut *out, &object)
                .map_err(|e| ApiError::internal(format!("cannot encode a list item: {e}")))?;
        }
        Ok(())
    }

    /// Reads the batch at `self.next`, leaving where the one after it starts.
    async fn read(&mut self) -> ApiResult<Vec<KeyValue>> {
        let Some(start) = self.next.take() else {
            return Ok(Vec::new());
        };
        let response = self
            .registry
            .store
            .range(RangeRequest {
                range: start..self.end.clone(),
                limit: BATCH,
                revision: self.revision,
            })
            .await?;
        self.revision = response.revision;
        if response.more
            && let Some(last) = response.kvs.last()
        {
            let mut next = last.key.clone();
            next.push(0);
            self.next = Some(next);
        }
        Ok(response.kvs)
    }

    /// The next chunk of the body: a batch's encoded items, then the list's closing bytes;
    /// None after those, or after an error.
    async fn next_chunk(mut self) -> Option<(Result<Bytes, ApiError>, Reader)> {
        if self.finished {
            return None;
        }
        if self.next.is_none() {
            self.finished = true;
            return Some((Ok(Bytes::from_static(b"]}")), self));
        }
        let mut chunk = Vec::new();
        let encoded = match self.read().await {
            Ok(kvs) => self.encode(&kvs, &mut chunk),
            Err(error) => Err(error),
        };
        match encoded {
            Ok(()) => Some((Ok(Bytes::from(chunk)), self)),
            Err(error) => {
                tracing::warn!(
                    resource = %self.resource.plural,
                    revision = self.revision,
                    %error,
                    "a streamed list failed after its first byte; the response ends early"
                );
                self.finished = true;
                Some((Err(error), self))
            }
        }
    }
}

impl Registry {
    /// An unpaginated list of `resource`, read and encoded a batch at a time; None when the
    /// list cannot be streamed (see the module's caveats) and [`Registry::list`] answers it.
    pub async fn list_streamed(
        &self,
        resource: &Arc<ResourceType>,
        namespace: Option<&str>,
        options: &ListOptions,
    ) -> ApiResult<Option<ListChunks>> {
        let (labels, fields) = parse_selectors(resource, options)?;
        if options.limit != 0
            || options
                .continue_token
                .as_deref()
                .is_some_and(|token| !token.is_empty())
            || resource.conversion.is_some()
            || fields
                .as_ref()
                .and_then(FieldSelector::single_name)
                .is_some()
        {
            return Ok(None);
        }
        let range = prefix_range(resource.collection_prefix(namespace).as_bytes());
        let mut reader = Reader {
            registry: self.clone(),
            resource: Arc::clone(resource),
            labels,
            fields,
            next: Some(range.start),
            end: range.end,
            revision: self.list_revision(options).await?,
            wrote_item: false,
            finished: false,
        };
        // The first batch is read before anything is sent, so that its failure is a Status.
        let first = reader.read().await?;
        let mut head = list_head(resource, reader.revision);
        reader.encode(&first, &mut head)?;
        let head = stream::once(async move { Ok(Bytes::from(head)) });
        let rest = stream::unfold(reader, Reader::next_chunk);
        Ok(Some(head.chain(rest).boxed()))
    }
}

/// `{"kind":…,"apiVersion":…,"metadata":{"resourceVersion":…},"items":[`: the list's fields
/// in the order upstream writes them, metadata first, so a client reading the stream knows the
/// revision before the items.
fn list_head(resource: &ResourceType, revision: Revision) -> Vec<u8> {
    let text = |value: &str| Value::String(value.to_string()).to_string();
    format!(
        r#"{{"kind":{},"apiVersion":{},"metadata":{{"resourceVersion":{}}},"items":["#,
        text(&resource.list_kind),
        text(&resource.api_version()),
        text(&revision.to_string()),
    )
    .into_bytes()
}
