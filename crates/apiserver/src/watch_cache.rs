//! The watch cache: one store watch, decoded once, fanned out to every API watcher.
//!
//! A single task follows the store's ordered event stream for all of `/registry/`, decodes
//! each event once and keeps a bounded history. A watch request is served from that history
//! and then live; a request older than the history falls back to a direct store watch, and one
//! older than the store's retained history gets the in-stream `410 Expired` error that makes
//! clients re-list (api-surface §4.3). Events are never produced by any other code path
//! (design decision 4).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use finale_store::{EventKind, Revision, Store, StoreError, WatchEvent, prefix_range};
use futures::StreamExt;
use futures::stream::BoxStream;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;

use crate::registry::{matches_selectors, set_resource_version};
use crate::resources::ResourceType;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::status::ApiError;

/// One committed change, decoded.
#[derive(Debug)]
pub struct CachedEvent {
    pub revision: Revision,
    pub key: String,
    /// The object after a put, with its new resourceVersion. None for deletes.
    pub object: Option<Arc<Value>>,
    /// The object before the change, with the resourceVersion it had then.
    pub previous: Option<Arc<Value>>,
}

/// What an API watcher receives.
#[derive(Clone, Debug)]
pub enum WatchItem {
    /// ADDED, MODIFIED or DELETED with the object to send.
    Change {
        event_type: &'static str,
        object: Arc<Value>,
    },
    /// A BOOKMARK at this revision; `initial_events_end` marks the end of a streaming list.
    Bookmark {
        revision: Revision,
        initial_events_end: bool,
    },
    /// An in-stream ERROR; the stream ends after it.
    Error(ApiError),
}

pub type WatchStream = BoxStream<'static, WatchItem>;

pub struct WatchRequest {
    pub resource: Arc<ResourceType>,
    pub namespace: Option<String>,
    pub labels: Option<LabelSelector>,
    pub fields: Option<FieldSelector>,
    /// Deliver changes with revision strictly greater than this.
    pub after_revision: Revision,
    /// Objects to send as ADDED before any change (a watch without resourceVersion, or a
    /// streaming list).
    pub initial_objects: Option<Vec<Value>>,
    /// Send the `k8s.io/initial-events-end` bookmark after the initial objects.
    pub send_initial_events_end: bool,
}

#[derive(Clone, Debug)]
pub struct WatchCacheOptions {
    /// How many recent events are kept in memory for watchers to resume from.
    pub history_capacity: usize,
    /// How often a watcher that asked for bookmarks gets one.
    pub bookmark_interval: Duration,
    /// How many decoded changes the live fan-out holds for a receiver that has not taken them
    /// yet. A receiver further behind lags: an API watcher is closed (its client re-watches
    /// from the history) and an in-process controller resynchronises from a list. Tests make
    /// it tiny to force that path.
    pub change_stream_capacity: usize,
}

impl Default for WatchCacheOptions {
    fn default() -> Self {
        WatchCacheOptions {
            history_capacity: 100_000,
            bookmark_interval: Duration::from_secs(60),
            change_stream_capacity: 8192,
        }
    }
}

struct History {
    events: VecDeque<Arc<CachedEvent>>,
    /// Every event with revision > `covered_after` is in `events`.
    covered_after: Revision,
    /// The last revision the cache has processed.
    head: Revision,
}

pub struct WatchCache {
    store: Arc<dyn Store>,
    history: Mutex<History>,
    live: broadcast::Sender<Arc<CachedEvent>>,
    options: WatchCacheOptions,
    shutdown: CancellationToken,
}

const WATCHER_BUFFER: usize = 256;

fn decode_value(key: &[u8], value: &[u8], revision: Revision) -> Option<Arc<Value>> {
    match serde_json::from_slice::<Value>(value) {
        Ok(mut object) => {
            set_resource_version(&mut object, revision);
            Some(Arc::new(object))
        }
        Err(error) => {
            tracing::error!(key = %String::from_utf8_lossy(key), %error, "stored object is not valid JSON; skipping its watch event");
            None
        }
    }
}

fn decode_event(event: &WatchEvent) -> CachedEvent {
    let revision = event.revision();
    let object = match event.kind {
        EventKind::Put => decode_value(&event.kv.key, &event.kv.value, revision),
        EventKind::Delete => None,
    };
    let previous = event
        .prev_kv
        .as_ref()
        .and_then(|prev| decode_value(&prev.key, &prev.value, prev.mod_revision));
    CachedEvent {
        revision,
        key: String::from_utf8_lossy(&event.kv.key).into_owned(),
        object,
        previous,
    }
}

impl WatchCache {
    /// Starts following the store from its current revision.
    pub async fn start(
        store: Arc<dyn Store>,
        options: WatchCacheOptions,
        shutdown: CancellationToken,
    ) -> Result<Arc<Self>, StoreError> {
        let head = store.current_revision().await?;
        let (live, _) = broadcast::channel(options.change_stream_capacity.max(1));
        let cache = Arc::new(WatchCache {
            store,
            history: Mutex::new(History {
                events: VecDeque::new(),
                covered_after: head,
                head,
            }),
            live,
            options,
            shutdown,
        });
        let follower = Arc::clone(&cache);
        tokio::spawn(async move { follower.follow_store().await });
        Ok(cache)
    }

    fn lock_history(&self) -> std::sync::MutexGuard<'_, History> {
        self.history
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Every change from now on, decoded, for in-process controllers. A receiver that lags
    /// gets `RecvError::Lagged` and should resynchronise from a list.
    pub fn subscribe_changes(&self) -> broadcast::Receiver<Arc<CachedEvent>> {
        self.live.subscribe()
    }

    /// The last revision the cache has seen.
    pub fn head(&self) -> Revision {
        self.lock_history().head
    }

    async fn follow_store(self: Arc<Self>) {
        let everything = prefix_range(b"/registry/");
        loop {
            let from = self.head();
            let stream = tokio::select! {
                _ = self.shutdown.cancelled() => return,
                stream = self.store.watch(everything.clone(), from) => stream,
            };
            let mut stream = match stream {
                Ok(stream) => stream,
                Err(StoreError::Closed) => return,
                Err(error) => {
                    tracing::error!(%error, from, "watch cache cannot follow the store; retrying");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            };
            loop {
                let next = tokio::select! {
                    _ = self.shutdown.cancelled() => return,
                    next = stream.next() => next,
                };
                match next {
                    Some(Ok(event)) => self.publish(decode_event(&event)),
                    Some(Err(StoreError::Closed)) | None => {
                        if self.shutdown.is_cancelled() {
                            return;
                        }
                        break;
                    }
                    Some(Err(error)) => {
                        tracing::warn!(%error, "watch cache stream ended; resuming from the last revision");
                        break;
                    }
                }
            }
        }
    }

    fn publish(&self, event: CachedEvent) {
        let event = Arc::new(event);
        let mut history = self.lock_history();
        if event.revision <= history.head {
            return;
        }
        history.head = event.revision;
        history.events.push_back(Arc::clone(&event));
        while history.events.len() > self.options.history_capacity {
            if let Some(dropped) = history.events.pop_front() {
                history.covered_after = dropped.revision;
            }
        }
        // Sent under the lock so that a watcher's history snapshot and its live subscription
        // meet without a gap or an overlap.
        let _ = self.live.send(event);
    }

    /// Opens a watch. Never fails up front: problems arrive as an in-stream ERROR.
    pub fn watch(self: &Arc<Self>, request: WatchRequest) -> WatchStream {
        let (sender, receiver) = mpsc::channel(WATCHER_BUFFER);
        let cache = Arc::clone(self);
        tokio::spawn(async move { cache.serve_watcher(request, sender).await });
        tokio_stream_from(receiver)
    }

    async fn serve_watcher(
        self: Arc<Self>,
        request: WatchRequest,
        sender: mpsc::Sender<WatchItem>,
    ) {
        let filter = EventFilter::new(&request);
        if let Some(objects) = &request.initial_objects {
            for object in objects {
                let mut object = object.clone();
                if let Some(map) = object.as_object_mut() {
                    map.insert("apiVersion".into(), json!(request.resource.api_version()));
                    map.insert("kind".into(), json!(request.resource.kind));
                }
                if sender
                    .send(WatchItem::Change {
                        event_type: "ADDED",
                        object: Arc::new(object),
                    })
                    .await
                    .is_err()
                {
                    return;
                }
            }
            if request.send_initial_events_end {
                let end = WatchItem::Bookmark {
                    revision: request.after_revision,
                    initial_events_end: true,
                };
                if sender.send(end).await.is_err() {
                    return;
                }
            }
        }

        let from_cache = {
            let history = self.lock_history();
            (request.after_revision >= history.covered_after).then(|| {
                let backlog: Vec<Arc<CachedEvent>> = history
                    .events
                    .iter()
                    .filter(|e| e.revision > request.after_revision)
                    .cloned()
                    .collect();
                (
                    backlog,
                    self.live.subscribe(),
                    history.head.max(request.after_revision),
                )
            })
        };
        let Some((backlog, mut live, start)) = from_cache else {
            self.serve_from_store(request, filter, sender).await;
            return;
        };

        let mut position = request.after_revision;
        for event in backlog {
            position = event.revision;
            if let Some(item) = filter.convert(&event)
                && sender.send(item).await.is_err()
            {
                return;
            }
        }
        position = position.max(start);

        let mut bookmarks = tokio::time::interval(self.options.bookmark_interval);
        bookmarks.tick().await;
        loop {
            tokio::select! {
                _ = self.shutdown.cancelled() => return,
                _ = sender.closed() => return,
                _ = bookmarks.tick() => {
                    if sender.send(WatchItem::Bookmark { revision: position, initial_events_end: false }).await.is_err() {
                        return;
                    }
                }
                received = live.recv() => match received {
                    Ok(event) => {
                        if event.revision <= position {
                            continue;
                        }
                        position = event.revision;
                        if let Some(item) = filter.convert(&event)
                            && sender.send(item).await.is_err()
                        {
                            return;
                        }
                    }
                    // A watcher that cannot keep up is closed; the client re-watches from the
                    // last resourceVersion it saw, which the history still covers.
                    Err(broadcast::error::RecvError::Lagged(_)) | Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        }
    }

    /// Serves a watch older than the in-memory history straight from the store's history.
    async fn serve_from_store(
        &self,
        request: WatchRequest,
        filter: EventFilter,
        sender: mpsc::Sender<WatchItem>,
    ) {
        let range = prefix_range(
            request
                .resource
                .collection_prefix(request.namespace.as_deref())
                .as_bytes(),
        );
        let mut stream = match self.store.watch(range, request.after_revision).await {
            Ok(stream) => stream,
            Err(StoreError::Compacted {
                requested,
                compacted,
            }) => {
                let _ = sender
                    .send(WatchItem::Error(expired(requested, compacted)))
                    .await;
                return;
            }
            Err(error) => {
                let _ = sender.send(WatchItem::Error(error.into())).await;
                return;
            }
        };
        let mut position = request.after_revision;
        let mut bookmarks = tokio::time::interval(self.options.bookmark_interval);
        bookmarks.tick().await;
        loop {
            tokio::select! {
                _ = self.shutdown.cancelled() => return,
                _ = sender.closed() => return,
                _ = bookmarks.tick() => {
                    if sender.send(WatchItem::Bookmark { revision: position, initial_events_end: false }).await.is_err() {
                        return;
                    }
                }
                next = stream.next() => match next {
                    Some(Ok(event)) => {
                        let event = decode_event(&event);
                        position = event.revision;
                        if let Some(item) = filter.convert(&event)
                            && sender.send(item).await.is_err()
                        {
                            return;
                        }
                    }
                    _ => return,
                }
            }
        }
    }
}

fn expired(requested: Revision, compacted: Revision) -> ApiError {
    ApiError::expired(format!(
        "too old resource version: {requested} ({compacted})"
    ))
}

fn tokio_stream_from(mut receiver: mpsc::Receiver<WatchItem>) -> WatchStream {
    futures::stream::poll_fn(move |cx| receiver.poll_recv(cx)).boxed()
}

/// Decides what, if anything, one watcher is sent for one change: its resource and namespace,
/// and its selectors, where an object that starts matching is ADDED and one that stops
/// matching is DELETED (api-surface §4.3).
struct EventFilter {
    prefix: String,
    labels: Option<LabelSelector>,
    fields: Option<FieldSelector>,
    /// Set when objects are stored in another version than the one watched (custom
    /// resources served in several versions): events carry the watched apiVersion.
    served_api_version: Option<String>,
}

impl EventFilter {
    fn new(request: &WatchRequest) -> Self {
        EventFilter {
            prefix: request
                .resource
                .collection_prefix(request.namespace.as_deref()),
            labels: request.labels.clone(),
            fields: request.fields.clone(),
            served_api_version: request
                .resource
                .storage_version
                .as_ref()
                .filter(|v| **v != request.resource.version)
                .map(|_| request.resource.api_version()),
        }
    }

    fn change(&self, event_type: &'static str, object: Arc<Value>) -> WatchItem {
        let object = match &self.served_api_version {
            Some(api_version) => {
                let mut copy = (*object).clone();
                if let Some(map) = copy.as_object_mut() {
                    map.insert("apiVersion".into(), json!(api_version));
                }
                Arc::new(copy)
            }
            None => object,
        };
        WatchItem::Change { event_type, object }
    }

    fn matches(&self, object: &Value) -> bool {
        matches_selectors(object, self.labels.as_ref(), self.fields.as_ref())
    }

    fn convert(&self, event: &CachedEvent) -> Option<WatchItem> {
        if !event.key.starts_with(&self.prefix) {
            return None;
        }
        let was = event.previous.as_ref().filter(|prev| self.matches(prev));
        match &event.object {
            Some(object) => {
                let now = self.matches(object);
                match (was.is_some(), now) {
                    (false, true) => Some(self.change("ADDED", Arc::clone(object))),
                    (true, true) => Some(self.change("MODIFIED", Arc::clone(object))),
                    (true, false) => {
                        let mut gone = (**was?).clone();
                        set_resource_version(&mut gone, event.revision);
                        Some(self.change("DELETED", Arc::new(gone)))
                    }
                    (false, false) => None,
                }
            }
            None => {
                // W-rules: DELETED carries the last stored state at the deletion's revision.
                let mut last = (**was?).clone();
                set_resource_version(&mut last, event.revision);
                Some(self.change("DELETED", Arc::new(last)))
            }
        }
    }
}
