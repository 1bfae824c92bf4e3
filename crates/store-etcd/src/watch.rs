//! Watches over etcd that survive member failures.
//!
//! Each [`watch`] runs one task that holds an etcd watch stream (created with `prev_kv`,
//! progress notifications, fragments, and `hasleader`, so that a member without a leader
//! ends the stream instead of leaving it silent), converts its events, and hands them to the
//! caller through a bounded channel (a slow caller slows the stream; nothing is dropped).
//!
//! # Guarantees
//! - The resume point moves only after a whole response (all its fragments) is delivered;
//!   etcd ends responses at revision boundaries. When the stream breaks, or etcd cancels it
//!   for a reason other than compaction, the task re-watches from the resume point on the
//!   next member in rotation, with jittered backoff, for as long as the caller listens: every
//!   event reaches the caller exactly once, in revision order.
//! - [`StoreError::Compacted`] ends the stream only when etcd reports it: a cancel with
//!   `compact_revision`, or an update or delete whose previous value is gone (kube-apiserver's
//!   `parseEvent` treats that the same way).
//! - Closing the store ends the stream with [`StoreError::Closed`].

use std::ops::Range;

use finale_etcd_rpc::etcdserverpb::watch_request::RequestUnion;
use finale_etcd_rpc::etcdserverpb::{WatchCreateRequest, WatchRequest, WatchResponse};
use finale_etcd_rpc::mvccpb::event::EventType;
use finale_etcd_rpc::tonic::metadata::MetadataValue;
use finale_etcd_rpc::{mvccpb, tonic};
use finale_store::{
    EventKind, KeyValue, Revision, StoreError, StoreResult, WatchEvent, WatchStream,
};
use futures::StreamExt;
use tokio::sync::mpsc;

use crate::EtcdStore;
use crate::members::{Backoff, describe};

/// Events buffered between the etcd stream and a caller that is slower than it.
const BUFFER: usize = 1024;

pub(crate) async fn watch(
    store: &EtcdStore,
    range: Range<Vec<u8>>,
    after: Revision,
) -> StoreResult<WatchStream> {
    // etcd reports a compacted start revision only after accepting the watch; a read tells
    // now, so that the caller gets the error from this call. The read is at `after`, not
    // `after + 1`: etcd accepts a watch from its compaction point C but has dropped any
    // tombstone written at C, so such a watch could silently miss a deletion.
    if after < store.compacted.load(std::sync::atomic::Ordering::Relaxed)
        || !store.readable_at(after.max(1)).await?
    {
        return Err(store.compacted_error(after + 1).await);
    }
    let (tx, rx) = mpsc::channel(BUFFER);
    let rx = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    let task = WatchTask {
        store: Resources {
            members: store.members.clone(),
            prefix: store.prefix.clone(),
        },
        range: store.etcd_range(&range),
        next: after + 1,
        tx,
    };
    tokio::spawn(task.run());
    Ok(rx.boxed())
}

/// What the task needs of the store (not the store itself, so that dropping the store ends
/// the task instead of being kept alive by it).
struct Resources {
    members: std::sync::Arc<crate::members::Members>,
    prefix: Vec<u8>,
}

struct WatchTask {
    store: Resources,
    /// etcd's `(key, range_end)`.
    range: (Vec<u8>, Vec<u8>),
    /// The first revision not yet delivered: where a new etcd watch starts.
    next: Revision,
    tx: mpsc::Sender<StoreResult<WatchEvent>>,
}

/// Why one etcd stream ended.
enum Ended {
    /// The caller went away, or the stream ended with an error delivered to it.
    Done,
    /// Open a new etcd stream from `next`.
    Resume(String),
}

impl WatchTask {
    async fn run(mut self) {
        let mut backoff = Backoff::default();
        let caller = self.tx.clone();
        loop {
            let closed = self.store.members.closed().clone();
            let ended = tokio::select! {
                ended = self.stream(&mut backoff) => ended,
                _ = closed.cancelled() => {
                    let _ = self.tx.send(Err(StoreError::Closed)).await;
                    return;
                }
                _ = closed_receiver(&caller) => return,
            };
            match ended {
                Ended::Done => return,
                Ended::Resume(reason) => {
                    tracing::debug!(next = self.next, %reason, "resuming an etcd watch");
                    let pause = backoff.next_pause();
                    tokio::select! {
                        _ = tokio::time::sleep(pause) => {}
                        _ = closed.cancelled() => {
                            let _ = self.tx.send(Err(StoreError::Closed)).await;
                            return;
                        }
                    }
                }
            }
        }
    }

    /// One etcd watch stream, from `self.next` until it breaks.
    async fn stream(&mut self, backoff: &mut Backoff) -> Ended {
        let member = self.store.members.pick();
        let (requests, receiver) = futures::channel::mpsc::unbounded();
        let create = WatchRequest {
            request_union: Some(RequestUnion::CreateRequest(WatchCreateRequest {
                key: self.range.0.clone(),
                range_end: self.range.1.clone(),
                start_revision: self.next,
                progress_notify: true,
                prev_kv: true,
                fragment: true,
                ..Default::default()
            })),
        };
        if requests.unbounded_send(create).is_err() {
            return Ended::Done;
        }
        let mut request = tonic::Request::new(receiver);
        request
            .metadata_mut()
            .insert("hasleader", MetadataValue::from_static("true"));
        let opened = tokio::time::timeout(
            self.store.members.attempt_timeout(),
            member.client.watch().watch(request),
        )
        .await;
        let mut responses = match opened {
            Ok(Ok(responses)) => responses.into_inner(),
            Ok(Err(status)) => {
                let reason = describe(&status);
                self.store.members.mark_failed(&member, &reason);
                return Ended::Resume(reason);
            }
            Err(_) => {
                let reason = "the watch was not accepted in time".to_string();
                self.store.members.mark_failed(&member, &reason);
                return Ended::Resume(reason);
            }
        };
        let mut pending: Vec<mvccpb::Event> = Vec::new();
        loop {
            // Keep `requests` open: dropping it would end the watch.
            let response: WatchResponse = match responses.message().await {
                Ok(Some(response)) => response,
                Ok(None) => return Ended::Resume("etcd ended the watch stream".into()),
                Err(status) => {
                    let reason = describe(&status);
                    if crate::members::is_retryable(&status) {
                        self.store.members.mark_failed(&member, &reason);
                    }
                    return Ended::Resume(reason);
                }
            };
            if response.compact_revision != 0 {
                let error = StoreError::Compacted {
                    requested: self.next,
                    compacted: response.compact_revision,
                };
                let _ = self.tx.send(Err(error)).await;
                return Ended::Done;
            }
            if response.canceled {
                return Ended::Resume(format!(
                    "etcd cancelled the watch: {}",
                    response.cancel_reason
                ));
            }
            if response.created {
                backoff.reset();
                continue;
            }
            pending.extend(response.events);
            if response.fragment {
                continue;
            }
            // A progress notification (no events) proves the stream is alive; it does not
            // move `next` (see the crate docs).
            let mut last = None;
            for event in std::mem::take(&mut pending) {
                let revision = event.kv.as_ref().map_or(0, |kv| kv.mod_revision);
                let converted = convert(&self.store.prefix, event).ok_or(StoreError::Compacted {
                    requested: revision,
                    compacted: revision,
                });
                let failed = converted.is_err();
                if self.tx.send(converted).await.is_err() || failed {
                    return Ended::Done;
                }
                last = Some(revision);
            }
            if let Some(last) = last {
                self.next = last + 1;
            }
        }
    }
}

/// Resolves when the caller has dropped its end of the stream.
async fn closed_receiver(tx: &mpsc::Sender<StoreResult<WatchEvent>>) {
    tx.closed().await;
}

pub(crate) fn strip(prefix: &[u8], kv: mvccpb::KeyValue) -> KeyValue {
    let key = kv
        .key
        .strip_prefix(prefix)
        .map(<[u8]>::to_vec)
        .unwrap_or(kv.key);
    KeyValue {
        key,
        value: kv.value,
        create_revision: kv.create_revision,
        mod_revision: kv.mod_revision,
        version: kv.version,
    }
}

/// An etcd event as a store event; `None` if its previous value is missing where one must
/// exist (an update or delete whose previous revision was compacted away).
fn convert(prefix: &[u8], event: mvccpb::Event) -> Option<WatchEvent> {
    let kv = strip(prefix, event.kv?);
    let prev_kv = event.prev_kv.map(|kv| strip(prefix, kv));
    let kind = match EventType::try_from(event.r#type).ok()? {
        EventType::Put => EventKind::Put,
        EventType::Delete => EventKind::Delete,
    };
    let needs_previous = kind == EventKind::Delete || kv.version > 1;
    if needs_previous && prev_kv.is_none() {
        return None;
    }
    Some(WatchEvent { kind, kv, prev_kv })
}
