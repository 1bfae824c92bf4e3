//! The watch cache: one store watch, decoded once, fanned out to every API watcher.
//!
//! A single task follows the store's ordered event stream for all of `/registry/`, decodes
//! each event once and keeps a bounded history. A watch request is served from that history
//! and then live; a request older than the history falls back to a direct store watch, and one
//! older than the store's retained history gets the in-stream `410 Expired` error that makes
//! clients re-list (api-surface §4.3). Events are never produced by any other code path
//! (design decision 4).
//!
//! If the cache itself falls behind the store's compaction (its store watch answers
//! `Compacted`: the store was unreachable while another replica compacted, say), the events in
//! between are gone for good. The cache then resynchronises: it starts again from the store's
//! current revision with an empty history, every API watcher served live is ended (the client
//! re-watches, and gets `410 Expired` if its resourceVersion is gone too), and every
//! [`ChangeReceiver`] answers `Lagged`, so in-process controllers re-list, as they do when
//! they fall behind. kube-apiserver's cacher does the same when its reflector re-lists.
//!
//! Each event is encoded once for all the watchers that send it unchanged, as kube-apiserver's
//! `cachingObject` does: the first watcher's task writes the JSON line, the others share its
//! bytes while any of them still holds it (see [`CachedEvent::line`]). With a thousand
//! watchers, encoding per watcher would cost a thousand serialisations of every object.
//!
//! Each API watcher has a bounded buffer ([`WATCHER_BUFFER`] items). A watcher whose client
//! stops reading fills it; once a live event has waited
//! [`WatchCacheOptions::unresponsive_watcher_timeout`] for room, the watch is closed and
//! counted in `apiserver_terminated_watchers_total{group,resource}`, as kube-apiserver's
//! cacher forces an unresponsive watcher closed. The client re-watches from the last
//! resourceVersion it read. So a stalled client holds at most its buffer and its connection's
//! socket buffers, never a growing queue.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use bytes::Bytes;

use finale_store::{EventKind, Revision, Store, StoreError, WatchEvent, prefix_range};
use futures::StreamExt;
use futures::stream::BoxStream;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
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
    /// The bytes of the stored values it was decoded from (object and previous object): what
    /// the history's byte bound counts.
    pub stored_bytes: usize,
    /// The watch lines encoded for this event, by event type, while some watcher still holds
    /// them. Weak, so that an event kept in the history does not also keep its encodings:
    /// memory stays bounded by what is in flight to clients.
    lines: Mutex<[Weak<Vec<u8>>; 3]>,
    /// The previous object at this event's revision, which every watcher that sees this event
    /// as DELETED sends: made by the first, shared with the others while one holds it (weak,
    /// as the lines are).
    gone: Mutex<Weak<Value>>,
}

impl CachedEvent {
    pub fn new(
        revision: Revision,
        key: String,
        object: Option<Arc<Value>>,
        previous: Option<Arc<Value>>,
        stored_bytes: usize,
    ) -> Self {
        CachedEvent {
            revision,
            key,
            object,
            previous,
            stored_bytes,
            lines: Mutex::default(),
            gone: Mutex::default(),
        }
    }

    /// What a DELETED event of this change carries: the previous object, with this event's
    /// revision as its resourceVersion (api-surface §4.3). Copied once for all the watchers
    /// sending it, rather than once each. None when there was no previous object.
    fn previous_at_revision(&self) -> Option<Arc<Value>> {
        let previous = self.previous.as_ref()?;
        // As for the lines: a poisoned lock still holds a valid weak reference.
        let mut gone = self.gone.lock().unwrap_or_else(|e| e.into_inner());
        Some(shared_or_made(&mut gone, || {
            let mut copy = (**previous).clone();
            set_resource_version(&mut copy, self.revision);
            copy
        }))
    }

    /// The JSON watch line of this event sent as `event_type` with `object`, encoded by the
    /// first watcher that asks and shared with every other watcher that asks while one of
    /// them still holds it. Callers guarantee that every watcher asking for one event type
    /// sends the same object (see [`EventFilter::shares_lines`]).
    fn line(&self, event_type: &'static str, object: &Value) -> Bytes {
        let Some(slot) = ["ADDED", "MODIFIED", "DELETED"]
            .iter()
            .position(|known| *known == event_type)
        else {
            return event_line(event_type, object);
        };
        // A poisoned lock only means another watcher panicked while encoding: the slots are
        // still valid weak references.
        let mut lines = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        let encoded = shared_or_made(&mut lines[slot], || encode_line(event_type, object));
        Bytes::from_owner(SharedLine(encoded))
    }
}

/// What `slot` still points at, if a watcher holds it; else a value from `make`, which `slot`
/// then points at weakly, so that the event keeps nothing once no watcher does.
fn shared_or_made<T>(slot: &mut Weak<T>, make: impl FnOnce() -> T) -> Arc<T> {
    if let Some(shared) = slot.upgrade() {
        return shared;
    }
    let made = Arc::new(make());
    *slot = Arc::downgrade(&made);
    made
}

/// An encoded watch line owned jointly by the watchers sending it.
struct SharedLine(Arc<Vec<u8>>);

impl AsRef<[u8]> for SharedLine {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// One watch event as the wire carries it: `{"type":…,"object":…}` in compact JSON, then a
/// newline (kube-rs splits the stream on newlines; api-surface §4.2).
pub fn event_line(event_type: &str, object: &Value) -> Bytes {
    Bytes::from(encode_line(event_type, object))
}

fn encode_line(event_type: &str, object: &Value) -> Vec<u8> {
    /// Serialised in place: building a `Value` around the object would copy it.
    #[derive(serde::Serialize)]
    struct Event<'a> {
        #[serde(rename = "type")]
        event_type: &'a str,
        object: &'a Value,
    }
    let mut bytes = Vec::with_capacity(128);
    // Writing a `Value` into a `Vec` cannot fail: its map keys are strings.
    let _ = serde_json::to_writer(&mut bytes, &Event { event_type, object });
    bytes.push(b'\n');
    bytes
}

/// What an API watcher receives.
#[derive(Clone, Debug)]
pub enum WatchItem {
    /// ADDED, MODIFIED or DELETED with the object to send.
    Change {
        event_type: &'static str,
        object: Arc<Value>,
        /// The event's JSON line ([`event_line`] of the two above), already encoded and shared
        /// with the other watchers, for a watch that asked for it
        /// ([`WatchRequest::json_lines`]) and sends the cache's object unchanged.
        line: Option<Bytes>,
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
    /// The client reads plain JSON events: hand over each change's encoded line, shared among
    /// watchers, with it.
    pub json_lines: bool,
}

/// How many recent events the cache keeps by default (`--default-watch-cache-size`).
pub const DEFAULT_HISTORY_CAPACITY: u32 = 100_000;
/// How many bytes of stored objects the history keeps by default, in mebibytes
/// (`--watch-cache-max-mb`).
pub const DEFAULT_HISTORY_MEGABYTES: u32 = 16;

#[derive(Clone, Debug)]
pub struct WatchCacheOptions {
    /// How many recent events are kept in memory for watchers to resume from.
    pub history_capacity: usize,
    /// How many bytes of events (counted as their stored values) the history keeps, at most;
    /// the oldest events leave first, whichever bound is reached. The newest event always
    /// stays.
    pub history_max_bytes: usize,
    /// How often a watcher that asked for bookmarks gets one.
    pub bookmark_interval: Duration,
    /// How many decoded changes the live fan-out holds for a receiver that has not taken them
    /// yet. A receiver further behind lags: an API watcher is closed (its client re-watches
    /// from the history) and an in-process controller resynchronises from a list. Tests make
    /// it tiny to force that path.
    pub change_stream_capacity: usize,
    /// How long a live event may wait for room in a watcher's full buffer before the watch is
    /// closed as unresponsive. kube-apiserver's cacher gives a blocked watcher at most 100 ms,
    /// because there one blocked watcher delays delivery to all; here each watcher has its own
    /// task and a stalled one delays no one, so the wait can be longer and a client paused
    /// briefly (a garbage-collection pause, a slow link) keeps its watch.
    pub unresponsive_watcher_timeout: Duration,
}

impl Default for WatchCacheOptions {
    fn default() -> Self {
        WatchCacheOptions {
            history_capacity: DEFAULT_HISTORY_CAPACITY as usize,
            history_max_bytes: (DEFAULT_HISTORY_MEGABYTES as usize) << 20,
            bookmark_interval: Duration::from_secs(60),
            change_stream_capacity: 8192,
            unresponsive_watcher_timeout: Duration::from_secs(1),
        }
    }
}

/// A subscription to the cache's changes ([`WatchCache::subscribe_changes`]).
pub struct ChangeReceiver {
    events: broadcast::Receiver<Arc<CachedEvent>>,
    resyncs: tokio::sync::watch::Receiver<u64>,
}

impl ChangeReceiver {
    /// The next change; `Lagged` when this receiver fell behind or the cache skipped events
    /// (re-list then), `Closed` when the cache is gone.
    pub async fn recv(&mut self) -> Result<Arc<CachedEvent>, broadcast::error::RecvError> {
        tokio::select! {
            biased;
            resynced = self.resyncs.changed() => match resynced {
                Ok(()) => {
                    self.resyncs.borrow_and_update();
                    Err(broadcast::error::RecvError::Lagged(0))
                }
                Err(_) => Err(broadcast::error::RecvError::Closed),
            },
            event = self.events.recv() => event,
        }
    }

    /// The next change already delivered, without waiting: `Empty` when there is none,
    /// `Lagged` when this receiver fell behind or the cache skipped events.
    pub fn try_recv(&mut self) -> Result<Arc<CachedEvent>, broadcast::error::TryRecvError> {
        match self.resyncs.has_changed() {
            Ok(true) => {
                self.resyncs.borrow_and_update();
                return Err(broadcast::error::TryRecvError::Lagged(0));
            }
            Ok(false) => {}
            Err(_) => return Err(broadcast::error::TryRecvError::Closed),
        }
        self.events.try_recv()
    }
}

struct History {
    events: VecDeque<Arc<CachedEvent>>,
    /// The sum of the events' `stored_bytes`.
    bytes: usize,
    /// Every event with revision > `covered_after` is in `events`.
    covered_after: Revision,
    /// The last revision the cache has processed.
    head: Revision,
}

/// Labels of `apiserver_terminated_watchers_total`, as upstream's: the watched resource.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WatcherLabels {
    group: String,
    resource: String,
}

pub struct WatchCache {
    store: Arc<dyn Store>,
    history: Mutex<History>,
    live: broadcast::Sender<Arc<CachedEvent>>,
    /// Counts resynchronisations: each one tells every subscriber that events were skipped.
    resyncs: tokio::sync::watch::Sender<u64>,
    options: WatchCacheOptions,
    shutdown: CancellationToken,
    /// Watchers closed because their client stopped reading.
    terminated_watchers: Family<WatcherLabels, Counter>,
}

/// Items an API watcher may have queued and not yet sent to its client.
pub const WATCHER_BUFFER: usize = 256;

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
    let stored_bytes = match event.kind {
        EventKind::Put => event.kv.value.len(),
        EventKind::Delete => 0,
    } + event.prev_kv.as_ref().map_or(0, |prev| prev.value.len());
    CachedEvent::new(
        revision,
        String::from_utf8_lossy(&event.kv.key).into_owned(),
        object,
        previous,
        stored_bytes,
    )
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
                bytes: 0,
                covered_after: head,
                head,
            }),
            live,
            resyncs: tokio::sync::watch::Sender::new(0),
            options,
            shutdown,
            terminated_watchers: Family::default(),
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

    /// Every change from now on, decoded, for in-process controllers. A receiver that lags,
    /// or whose cache had to resynchronise, gets `RecvError::Lagged` and should resynchronise
    /// from a list.
    pub fn subscribe_changes(&self) -> ChangeReceiver {
        ChangeReceiver {
            events: self.live.subscribe(),
            resyncs: self.resyncs.subscribe(),
        }
    }

    /// Starts again from the store's current revision after the store compacted past the
    /// cache's head: the history is dropped and every subscriber told to re-list.
    async fn resynchronise(&self, requested: Revision, compacted: Revision) {
        let current = loop {
            match self.store.current_revision().await {
                Ok(current) => break current,
                Err(StoreError::Closed) => return,
                Err(error) => {
                    tracing::warn!(%error, "watch cache cannot read the store's revision to resynchronise; retrying");
                    tokio::select! {
                        _ = self.shutdown.cancelled() => return,
                        _ = tokio::time::sleep(Duration::from_millis(200)) => {}
                    }
                }
            }
        };
        tracing::warn!(
            requested,
            compacted,
            current,
            "watch cache fell behind the store's compaction: the events in between are gone; resynchronising (watchers end and re-list)"
        );
        {
            let mut history = self.lock_history();
            history.events.clear();
            history.bytes = 0;
            history.head = history.head.max(current);
            history.covered_after = history.head;
        }
        self.resyncs.send_modify(|count| *count += 1);
    }

    /// `apiserver_terminated_watchers_total`: watchers closed because their client stopped
    /// reading, by resource.
    pub fn terminated_watchers(&self) -> &Family<WatcherLabels, Counter> {
        &self.terminated_watchers
    }

    /// Queues a live event for a watcher: `false` when the watch is over, because its client
    /// went away or because the event waited too long for room in the watcher's full buffer
    /// (the watcher is then counted and logged as unresponsive).
    async fn deliver(
        &self,
        sender: &mpsc::Sender<WatchItem>,
        item: WatchItem,
        resource: &ResourceType,
    ) -> bool {
        let item = match sender.try_send(item) {
            Ok(()) => return true,
            Err(mpsc::error::TrySendError::Closed(_)) => return false,
            Err(mpsc::error::TrySendError::Full(item)) => item,
        };
        let timeout = self.options.unresponsive_watcher_timeout;
        match tokio::time::timeout(timeout, sender.send(item)).await {
            Ok(sent) => sent.is_ok(),
            Err(_) => {
                tracing::warn!(
                    group = %resource.group,
                    resource = %resource.plural,
                    buffered = WATCHER_BUFFER,
                    waited_ms = timeout.as_millis() as u64,
                    "forcing watcher close due to unresponsiveness: its client has not read its buffered events; the client re-watches from the last resourceVersion it read"
                );
                self.terminated_watchers
                    .get_or_create(&WatcherLabels {
                        group: resource.group.clone(),
                        resource: resource.plural.clone(),
                    })
                    .inc();
                false
            }
        }
    }

    /// The last revision the cache has seen.
    pub fn head(&self) -> Revision {
        self.lock_history().head
    }

    async fn follow_store(self: Arc<Self>) {
        let everything = prefix_range(crate::resources::OBJECTS_PREFIX.as_bytes());
        loop {
            let from = self.head();
            let stream = tokio::select! {
                _ = self.shutdown.cancelled() => return,
                stream = self.store.watch(everything.clone(), from) => stream,
            };
            let mut stream = match stream {
                Ok(stream) => stream,
                Err(StoreError::Closed) => return,
                Err(StoreError::Compacted {
                    requested,
                    compacted,
                }) => {
                    self.resynchronise(requested, compacted).await;
                    continue;
                }
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
                    Some(Err(StoreError::Compacted {
                        requested,
                        compacted,
                    })) => {
                        self.resynchronise(requested, compacted).await;
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
        history.bytes += event.stored_bytes;
        history.events.push_back(Arc::clone(&event));
        while history.events.len() > self.options.history_capacity
            || (history.bytes > self.options.history_max_bytes && history.events.len() > 1)
        {
            if let Some(dropped) = history.events.pop_front() {
                history.covered_after = dropped.revision;
                history.bytes -= dropped.stored_bytes;
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
                        line: None,
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
                    self.subscribe_changes(),
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
                    let bookmark = WatchItem::Bookmark { revision: position, initial_events_end: false };
                    if !self.deliver(&sender, bookmark, &request.resource).await {
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
                            && !self.deliver(&sender, item, &request.resource).await
                        {
                            return;
                        }
                    }
                    // A watcher that cannot keep up, or whose cache resynchronised, is closed;
                    // the client re-watches from the last resourceVersion it saw. If the store
                    // has compacted that away (the cache fell behind a compaction, so it
                    // resynchronised), the watcher gets the 410 Expired now, in its stream,
                    // that its re-watch would get.
                    Err(broadcast::error::RecvError::Lagged(_)) | Err(broadcast::error::RecvError::Closed) => {
                        if let Ok(compacted) = self.store.compacted_revision().await
                            && position < compacted
                        {
                            let _ = sender.send(WatchItem::Error(expired(position, compacted))).await;
                        }
                        return;
                    }
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
                    let bookmark = WatchItem::Bookmark { revision: position, initial_events_end: false };
                    if !self.deliver(&sender, bookmark, &request.resource).await {
                        return;
                    }
                }
                next = stream.next() => match next {
                    Some(Ok(event)) => {
                        let event = decode_event(&event);
                        position = event.revision;
                        if let Some(item) = filter.convert(&event)
                            && !self.deliver(&sender, item, &request.resource).await
                        {
                            return;
                        }
                    }
                    // etcd accepts a watch from a compacted revision and then cancels it: the
                    // client gets the same in-stream 410 as when the store refuses up front.
                    Some(Err(StoreError::Compacted { requested, compacted })) => {
                        let _ = sender
                            .send(WatchItem::Error(expired(requested, compacted)))
                            .await;
                        return;
                    }
                    // The stream ended (the store closed, or this watcher fell behind): the
                    // client re-watches from the last resourceVersion it saw.
                    Some(Err(_)) | None => return,
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
    /// Set for a resource served as a view of stored objects in another form (see
    /// [`crate::resources::StorageView`]): events are converted before they are matched.
    from_storage: Option<fn(Value) -> Value>,
    /// The client reads plain JSON events ([`WatchRequest::json_lines`]).
    json_lines: bool,
}

impl EventFilter {
    fn new(request: &WatchRequest) -> Self {
        EventFilter {
            prefix: request
                .resource
                .collection_prefix(request.namespace.as_deref()),
            labels: request.labels.clone(),
            fields: request.fields.clone(),
            // With a conversion webhook, the registry converts the events' objects instead
            // (`registry::convert`), and needs their stored apiVersion to know which to.
            served_api_version: request
                .resource
                .storage_version
                .as_ref()
                .filter(|v| {
                    **v != request.resource.version && request.resource.conversion.is_none()
                })
                .map(|_| request.resource.api_version()),
            from_storage: request.resource.view.map(|view| view.from_storage),
            json_lines: request.json_lines,
        }
    }

    /// Whether this watcher sends the cache's objects unchanged, so that its lines are the
    /// same bytes as every other such watcher's and can be shared.
    fn shares_lines(&self) -> bool {
        self.json_lines && self.served_api_version.is_none() && self.from_storage.is_none()
    }

    fn change(
        &self,
        event: &CachedEvent,
        event_type: &'static str,
        object: Arc<Value>,
    ) -> WatchItem {
        if self.shares_lines() {
            let line = Some(event.line(event_type, &object));
            return WatchItem::Change {
                event_type,
                object,
                line,
            };
        }
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
        WatchItem::Change {
            event_type,
            object,
            line: None,
        }
    }

    fn matches(&self, object: &Value) -> bool {
        matches_selectors(object, self.labels.as_ref(), self.fields.as_ref())
    }

    fn convert(&self, event: &CachedEvent) -> Option<WatchItem> {
        if !event.key.starts_with(&self.prefix) {
            return None;
        }
        let viewed;
        let event = match self.from_storage {
            Some(convert) => {
                let view = |object: &Option<Arc<Value>>| {
                    object
                        .as_ref()
                        .map(|object| Arc::new(convert((**object).clone())))
                };
                viewed = CachedEvent::new(
                    event.revision,
                    event.key.clone(),
                    view(&event.object),
                    view(&event.previous),
                    event.stored_bytes,
                );
                &viewed
            }
            None => event,
        };
        let was = event.previous.as_ref().filter(|prev| self.matches(prev));
        match &event.object {
            Some(object) => {
                let now = self.matches(object);
                match (was.is_some(), now) {
                    (false, true) => Some(self.change(event, "ADDED", Arc::clone(object))),
                    (true, true) => Some(self.change(event, "MODIFIED", Arc::clone(object))),
                    (true, false) => {
                        Some(self.change(event, "DELETED", event.previous_at_revision()?))
                    }
                    (false, false) => None,
                }
            }
            None => {
                // W-rules: DELETED carries the last stored state at the deletion's revision.
                was?;
                Some(self.change(event, "DELETED", event.previous_at_revision()?))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! The resynchronisation after the store compacted past the cache. A real store cannot be
    //! made to compact under a live watch on cue, so a wrapper around a real `RedbStore`
    //! injects the `Compacted` ending into the cache's store watch; everything else is real.

    use std::ops::Range;

    use async_trait::async_trait;
    use finale_store::{
        Precondition, RangeRequest, RangeResponse, RedbStore, RedbStoreOptions, StoreResult,
        TxnOutcome, WatchStream, WriteOp, WriteOutcome,
    };
    use futures::stream;

    use super::*;

    /// Delegates to a real store; `end_watches_with` ends every open store watch with an
    /// error, as a store that compacted past it would.
    struct Interruptible {
        inner: Arc<RedbStore>,
        endings: Mutex<Vec<mpsc::UnboundedSender<StoreError>>>,
    }

    impl Interruptible {
        /// A real store in `dir`, with nothing to interrupt yet.
        fn open(dir: &std::path::Path) -> Arc<Interruptible> {
            let inner = RedbStore::open(dir, RedbStoreOptions::default()).expect("open");
            Arc::new(Interruptible {
                inner,
                endings: Mutex::new(Vec::new()),
            })
        }

        fn end_watches_with(&self, error: impl Fn() -> StoreError) {
            for ending in self.endings.lock().expect("endings").drain(..) {
                let _ = ending.send(error());
            }
        }
    }

    #[async_trait]
    impl Store for Interruptible {
        async fn get(&self, key: &[u8]) -> StoreResult<(Option<finale_store::KeyValue>, Revision)> {
            self.inner.get(key).await
        }
        async fn range(&self, request: RangeRequest) -> StoreResult<RangeResponse> {
            self.inner.range(request).await
        }
        async fn write(
            &self,
            op: WriteOp,
            precondition: Precondition,
        ) -> StoreResult<WriteOutcome> {
            self.inner.write(op, precondition).await
        }
        async fn write_all_guarded(
            &self,
            writes: Vec<(WriteOp, Precondition)>,
            guards: Vec<finale_store::Guard>,
        ) -> StoreResult<TxnOutcome> {
            self.inner.write_all_guarded(writes, guards).await
        }
        async fn watch(
            &self,
            range: Range<Vec<u8>>,
            after_revision: Revision,
        ) -> StoreResult<WatchStream> {
            let events = self.inner.watch(range, after_revision).await?;
            let (ending, endings) = mpsc::unbounded_channel();
            self.endings.lock().expect("endings").push(ending);
            let endings = stream::unfold(endings, |mut endings| async move {
                endings.recv().await.map(|error| (Err(error), endings))
            });
            Ok(stream::select(events, endings).boxed())
        }
        async fn current_revision(&self) -> StoreResult<Revision> {
            self.inner.current_revision().await
        }
        async fn compacted_revision(&self) -> StoreResult<Revision> {
            self.inner.compacted_revision().await
        }
        async fn compact(&self, revision: Revision) -> StoreResult<()> {
            self.inner.compact(revision).await
        }
    }

    /// A cache following `store`, and the token that stops it.
    async fn start_cache(
        store: &Arc<Interruptible>,
        options: WatchCacheOptions,
    ) -> (Arc<WatchCache>, CancellationToken) {
        let shutdown = CancellationToken::new();
        let cache = WatchCache::start(
            Arc::clone(store) as Arc<dyn Store>,
            options,
            shutdown.clone(),
        )
        .await
        .expect("start the cache");
        (cache, shutdown)
    }

    async fn put(store: &Interruptible, name: &str) -> Revision {
        put_object(
            store,
            format!("/registry/configmaps/default/{name}"),
            json!({"metadata": {"name": name, "namespace": "default"}}),
        )
        .await
    }

    /// Stores `object` under `key`.
    async fn put_object(store: &Interruptible, key: String, object: Value) -> Revision {
        let key = key.into_bytes();
        let value = object.to_string();
        match store
            .write(
                WriteOp::Put {
                    key,
                    value: value.into_bytes(),
                },
                Precondition::None,
            )
            .await
            .expect("put")
        {
            WriteOutcome::Committed(result) => result.revision,
            other => panic!("an unconditional put was refused: {other:?}"),
        }
    }

    async fn next_change(changes: &mut ChangeReceiver) -> Result<Arc<CachedEvent>, String> {
        tokio::time::timeout(Duration::from_secs(10), changes.recv())
            .await
            .map_err(|_| "no change within 10 s".to_string())?
            .map_err(|error| format!("{error:?}"))
    }

    #[tokio::test]
    async fn a_cache_behind_the_compaction_resynchronises_and_subscribers_relist() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Interruptible::open(dir.path());
        let (cache, shutdown) = start_cache(&store, WatchCacheOptions::default()).await;
        let mut changes = cache.subscribe_changes();
        let first = put(&store, "before").await;
        let seen = next_change(&mut changes).await.expect("the first change");
        assert_eq!(seen.revision, first);

        // The store compacts past the cache: the cache's watch ends with Compacted.
        let head = cache.head();
        store.end_watches_with(|| StoreError::Compacted {
            requested: head,
            compacted: head + 1,
        });
        // The subscriber is told to re-list (Lagged), not left waiting for events that are
        // gone, and not closed.
        let told = tokio::time::timeout(Duration::from_secs(10), changes.recv())
            .await
            .expect("the subscriber hears of the resynchronisation");
        assert!(
            matches!(told, Err(broadcast::error::RecvError::Lagged(_))),
            "{told:?}"
        );

        // The cache follows the store again: a new subscriber (as after a re-list) sees the
        // next write. Bounded: the write must arrive within the timeout.
        let mut changes = cache.subscribe_changes();
        let after = put(&store, "after").await;
        let seen = next_change(&mut changes)
            .await
            .expect("a change after the resync");
        assert_eq!(seen.revision, after);
        assert!(cache.head() >= after);
        shutdown.cancel();
    }

    /// The history keeps at most `history_max_bytes` of stored values: the oldest changes
    /// leave first, and what it covers moves with them, so a watch from before it is served
    /// from the store instead.
    #[tokio::test]
    async fn the_history_is_bounded_by_the_bytes_it_holds() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Interruptible::open(dir.path());
        // Every value below has the same length: names of one digit.
        let one_value = json!({"metadata": {"name": "0", "namespace": "default"}})
            .to_string()
            .len();
        let options = WatchCacheOptions {
            history_max_bytes: 3 * one_value,
            ..WatchCacheOptions::default()
        };
        let (cache, shutdown) = start_cache(&store, options).await;
        let mut changes = cache.subscribe_changes();
        let mut revisions = Vec::new();
        for name in ["1", "2", "3", "4", "5"] {
            revisions.push(put(&store, name).await);
            next_change(&mut changes).await.expect("the change");
        }
        let history = cache.lock_history();
        let kept: Vec<Revision> = history.events.iter().map(|e| e.revision).collect();
        assert_eq!(kept, revisions[2..], "the three newest creates fit");
        assert_eq!(history.bytes, 3 * one_value);
        assert_eq!(history.covered_after, revisions[1]);
        drop(history);
        shutdown.cancel();
    }

    /// The next change a watch delivers, within 10 s.
    async fn next_item(
        stream: &mut super::WatchStream,
    ) -> (&'static str, Arc<Value>, Option<Bytes>) {
        match tokio::time::timeout(Duration::from_secs(10), stream.next()).await {
            Ok(Some(WatchItem::Change {
                event_type,
                object,
                line,
            })) => (event_type, object, line),
            other => panic!("expected a change, got {other:?}"),
        }
    }

    /// Watchers that send the cache's objects unchanged share one encoded line per event and
    /// type, byte for byte what encoding it themselves would give; a watcher whose selector
    /// turns the change into DELETED gets that line; the shared bytes are not kept once no
    /// watcher holds them; an in-process watch gets no line.
    #[tokio::test]
    async fn watchers_share_each_events_encoded_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Interruptible::open(dir.path());
        let (cache, shutdown) = start_cache(&store, WatchCacheOptions::default()).await;
        let configmaps = Arc::new(ResourceType::builtin(
            "",
            "v1",
            "ConfigMap",
            "configmaps",
            true,
        ));
        let open = |labels: Option<&str>, json_lines: bool| {
            cache.watch(WatchRequest {
                resource: Arc::clone(&configmaps),
                namespace: Some("default".into()),
                labels: labels.map(|l| LabelSelector::parse(l).expect("selector")),
                fields: None,
                after_revision: cache.head(),
                initial_objects: None,
                send_initial_events_end: false,
                json_lines,
            })
        };
        let (mut first, mut second) = (open(None, true), open(None, true));
        let mut selective = open(Some("tier=web"), true);
        let mut in_process = open(None, false);

        let created = json!({"metadata": {"name": "a", "namespace": "default",
            "labels": {"tier": "web"}}, "data": {"k": "v"}});
        let key = configmaps.object_key(Some("default"), "a");
        let revision = put_object(&store, key.clone(), created.clone()).await;
        let (kind, object, one) = next_item(&mut first).await;
        let (_, _, other) = next_item(&mut second).await;
        let (one, other) = (one.expect("a line"), other.expect("a line"));
        assert_eq!(kind, "ADDED");
        assert_eq!(one.as_ptr(), other.as_ptr(), "one encoding, shared");
        assert_eq!(one, event_line("ADDED", &object));
        let sent: Value = serde_json::from_slice(&one).expect("the line is JSON");
        assert_eq!(sent["type"], "ADDED");
        assert_eq!(sent["object"]["data"], created["data"]);
        assert_eq!(
            sent["object"]["metadata"]["resourceVersion"],
            revision.to_string()
        );
        assert!(one.ends_with(b"\n") && !one[..one.len() - 1].contains(&b'\n'));
        let (_, _, line) = next_item(&mut selective).await;
        assert_eq!(line.expect("a line").as_ptr(), one.as_ptr());
        let (_, _, none) = next_item(&mut in_process).await;
        assert!(none.is_none(), "an in-process watch gets objects only");

        // No watcher holds the ADDED line any more: the event keeps no copy of it.
        drop((one, other));
        let event = cache.lock_history().events.back().cloned().expect("event");
        assert!(event.lines.lock().expect("lines")[0].upgrade().is_none());

        // The label goes: MODIFIED for the plain watchers, DELETED (the last matching state at
        // the new revision) for the selective one.
        let relabelled = json!({"metadata": {"name": "a", "namespace": "default",
            "labels": {"tier": "db"}}, "data": {"k": "v"}});
        let changed = put_object(&store, key.clone(), relabelled).await;
        let (kind, _, line) = next_item(&mut first).await;
        assert_eq!(kind, "MODIFIED");
        drop(line);
        let (kind, object, line) = next_item(&mut selective).await;
        assert_eq!(kind, "DELETED");
        let line = line.expect("a line");
        assert_eq!(line, event_line("DELETED", &object));
        let sent: Value = serde_json::from_slice(&line).expect("JSON");
        assert_eq!(sent["object"]["metadata"]["labels"]["tier"], "web");
        assert_eq!(
            sent["object"]["metadata"]["resourceVersion"],
            changed.to_string()
        );

        // A delete: every watcher sends one copy of the last state, at the delete's revision.
        drop((object, line));
        next_item(&mut second).await;
        next_item(&mut in_process).await;
        let deleted = match store
            .write(
                WriteOp::Delete {
                    key: key.into_bytes(),
                },
                Precondition::None,
            )
            .await
            .expect("delete")
        {
            WriteOutcome::Committed(result) => result.revision,
            other => panic!("an unconditional delete was refused: {other:?}"),
        };
        let (kind, one, _) = next_item(&mut first).await;
        let (_, other, _) = next_item(&mut second).await;
        let (_, in_process_copy, _) = next_item(&mut in_process).await;
        assert_eq!(kind, "DELETED");
        assert!(Arc::ptr_eq(&one, &other) && Arc::ptr_eq(&one, &in_process_copy));
        assert_eq!(one["metadata"]["resourceVersion"], deleted.to_string());
        assert_eq!(one["metadata"]["labels"]["tier"], "db");
        drop((one, other, in_process_copy));
        let event = cache.lock_history().events.back().cloned().expect("event");
        assert!(event.gone.lock().expect("gone").upgrade().is_none());
        shutdown.cancel();
    }
}
