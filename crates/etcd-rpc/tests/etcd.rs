//! The client against a real etcd (Debian's etcd-server, or `ETCD`), one single-member etcd per
//! test on loopback, started by the e2e fixture. Each test is bounded by [`LIMIT`].
//!
//! Covers what the etcd store backend and the benchmark baseline rely on: the KV calls and the
//! shape of a conditional write, a watch from a past revision with previous values, the
//! compaction errors and how to tell them from look-alikes, responses over 4 MiB, leases and the
//! member status.

use std::future::Future;
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use finale_e2e::Etcd;
use finale_etcd_rpc::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use finale_etcd_rpc::etcdserverpb::request_op::Request;
use finale_etcd_rpc::etcdserverpb::response_op::Response;
use finale_etcd_rpc::etcdserverpb::watch_request::RequestUnion;
use finale_etcd_rpc::etcdserverpb::{
    CompactionRequest, Compare, DeleteRangeRequest, LeaseGrantRequest, LeaseKeepAliveRequest,
    LeaseRevokeRequest, PutRequest, RangeRequest, RequestOp, ResponseHeader, StatusRequest,
    TxnRequest, WatchCancelRequest, WatchCreateRequest, WatchRequest, WatchResponse,
};
use finale_etcd_rpc::mvccpb::event::EventType;
use finale_etcd_rpc::mvccpb::{Event, KeyValue};
use finale_etcd_rpc::{Client, ConnectError, ConnectOptions, is_compacted, prefix_range_end};
use futures::StreamExt;
use futures::channel::mpsc;
use tonic::Code;

/// The most any one test may take, etcd start included.
const LIMIT: Duration = Duration::from_secs(60);

/// Runs `test` against a fresh etcd, within [`LIMIT`].
async fn with_etcd<F, Fut>(test: F) -> anyhow::Result<()>
where
    F: FnOnce(Client, String) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    tokio::time::timeout(LIMIT, async {
        let etcd = tokio::task::spawn_blocking(Etcd::start)
            .await
            .context("etcd start task")?
            .context("start etcd")?;
        let client = Client::connect(etcd.endpoint.clone(), &options()).await?;
        let result = test(client, etcd.endpoint.clone()).await;
        drop(etcd);
        result
    })
    .await
    .context("test exceeded its time limit")?
}

fn options() -> ConnectOptions {
    ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(5))
        .with_request_timeout(Duration::from_secs(20))
}

fn revision(header: Option<ResponseHeader>) -> anyhow::Result<i64> {
    Ok(header.context("response without a header")?.revision)
}

async fn put(client: &Client, key: &str, value: &[u8]) -> anyhow::Result<i64> {
    let response = client
        .kv()
        .put(PutRequest {
            key: key.into(),
            value: value.to_vec(),
            ..Default::default()
        })
        .await
        .with_context(|| format!("put {key}"))?
        .into_inner();
    revision(response.header)
}

async fn get(client: &Client, key: &str) -> anyhow::Result<Option<KeyValue>> {
    let response = client
        .kv()
        .range(RangeRequest {
            key: key.into(),
            ..Default::default()
        })
        .await
        .with_context(|| format!("get {key}"))?
        .into_inner();
    ensure!(
        response.kvs.len() <= 1,
        "a single-key get returned {:?}",
        response.kvs
    );
    Ok(response.kvs.into_iter().next())
}

fn range_op(key: &str) -> RequestOp {
    RequestOp {
        request: Some(Request::RequestRange(RangeRequest {
            key: key.into(),
            ..Default::default()
        })),
    }
}

/// The store backend's write: put `value` if `key`'s mod_revision is still `expected` (0: the
/// key must not exist), returning the previous record; otherwise read the current one, in the
/// same round trip.
fn write_if_unchanged(key: &str, expected: i64, value: &[u8]) -> TxnRequest {
    TxnRequest {
        compare: vec![Compare {
            result: CompareResult::Equal as i32,
            target: CompareTarget::Mod as i32,
            key: key.into(),
            target_union: Some(TargetUnion::ModRevision(expected)),
            ..Default::default()
        }],
        success: vec![RequestOp {
            request: Some(Request::RequestPut(PutRequest {
                key: key.into(),
                value: value.to_vec(),
                prev_kv: true,
                ..Default::default()
            })),
        }],
        failure: vec![range_op(key)],
    }
}

fn keys(kvs: &[KeyValue]) -> Vec<String> {
    kvs.iter()
        .map(|kv| String::from_utf8_lossy(&kv.key).into_owned())
        .collect()
}

#[tokio::test]
async fn put_get_conditional_write_prefix_range_and_delete() -> anyhow::Result<()> {
    with_etcd(|client, _| async move {
        let created = put(&client, "/t/a", b"one").await?;
        let kv = get(&client, "/t/a")
            .await?
            .context("/t/a missing after put")?;
        assert_eq!(
            (
                kv.value.as_slice(),
                kv.create_revision,
                kv.mod_revision,
                kv.version
            ),
            (b"one".as_slice(), created, created, 1)
        );

        // Unchanged since `created`: the put runs and hands back the record it replaced.
        let mut kv_service = client.kv();
        let updated = kv_service
            .txn(write_if_unchanged("/t/a", created, b"two"))
            .await?
            .into_inner();
        assert!(
            updated.succeeded,
            "write at the current mod_revision failed"
        );
        let updated_revision = revision(updated.header)?;
        assert_eq!(updated_revision, created + 1);
        match updated.responses.as_slice() {
            [op] => match &op.response {
                Some(Response::ResponsePut(put)) => {
                    let previous = put.prev_kv.as_ref().context("no prev_kv")?;
                    assert_eq!(
                        (previous.value.as_slice(), previous.mod_revision),
                        (b"one".as_slice(), created)
                    );
                }
                other => bail!("success branch answered {other:?}"),
            },
            other => bail!("expected one response, got {other:?}"),
        }

        // A stale mod_revision: nothing is written, and the else branch reads the current
        // record, so the caller learns why without another call.
        let stale = kv_service
            .txn(write_if_unchanged("/t/a", created, b"lost"))
            .await?
            .into_inner();
        assert!(
            !stale.succeeded,
            "a write at a stale mod_revision succeeded"
        );
        assert_eq!(
            revision(stale.header)?,
            updated_revision,
            "a failed txn wrote"
        );
        match stale.responses.as_slice() {
            [op] => match &op.response {
                Some(Response::ResponseRange(range)) => {
                    let current = range.kvs.first().context("else branch read nothing")?;
                    assert_eq!(
                        (
                            current.value.as_slice(),
                            current.mod_revision,
                            current.version
                        ),
                        (b"two".as_slice(), updated_revision, 2)
                    );
                }
                other => bail!("failure branch answered {other:?}"),
            },
            other => bail!("expected one response, got {other:?}"),
        }
        assert_eq!(
            get(&client, "/t/a").await?.map(|kv| kv.value),
            Some(b"two".to_vec())
        );

        // "Must not exist" is mod_revision == 0.
        let exists = kv_service
            .txn(write_if_unchanged("/t/a", 0, b"again"))
            .await?
            .into_inner();
        assert!(!exists.succeeded, "create over an existing key succeeded");
        let fresh = kv_service
            .txn(write_if_unchanged("/t/b", 0, b"new"))
            .await?
            .into_inner();
        assert!(fresh.succeeded, "create of a missing key failed");

        // A prefix range covers exactly the keys under the prefix, in key order, and reports
        // what a limit left out. "/t0" sorts right after every "/t/..." key.
        put(&client, "/t0", b"sibling").await?;
        put(&client, "/s", b"before").await?;
        let all = kv_service
            .range(RangeRequest {
                key: "/t/".into(),
                range_end: prefix_range_end(b"/t/"),
                ..Default::default()
            })
            .await?
            .into_inner();
        assert_eq!(keys(&all.kvs), ["/t/a", "/t/b"]);
        assert_eq!((all.count, all.more), (2, false));
        let first = kv_service
            .range(RangeRequest {
                key: "/t/".into(),
                range_end: prefix_range_end(b"/t/"),
                limit: 1,
                ..Default::default()
            })
            .await?
            .into_inner();
        assert_eq!(keys(&first.kvs), ["/t/a"]);
        assert_eq!((first.count, first.more), (2, true));

        let deleted = kv_service
            .delete_range(DeleteRangeRequest {
                key: "/t/a".into(),
                prev_kv: true,
                ..Default::default()
            })
            .await?
            .into_inner();
        assert_eq!(deleted.deleted, 1);
        assert_eq!(
            deleted
                .prev_kvs
                .iter()
                .map(|kv| kv.value.as_slice())
                .collect::<Vec<_>>(),
            [b"two".as_slice()]
        );
        assert_eq!(get(&client, "/t/a").await?, None);
        let again = kv_service
            .delete_range(DeleteRangeRequest {
                key: "/t/a".into(),
                ..Default::default()
            })
            .await?
            .into_inner();
        assert_eq!(again.deleted, 0, "deleting a missing key deleted something");
        // The neighbours are untouched.
        assert!(get(&client, "/t/b").await?.is_some());
        assert!(get(&client, "/t0").await?.is_some());
        Ok(())
    })
    .await
}

/// A watch stream with its request side kept open (closing it ends the stream on etcd's side).
struct WatchStream {
    requests: mpsc::UnboundedSender<WatchRequest>,
    responses: tonic::Streaming<WatchResponse>,
}

impl WatchStream {
    async fn open(client: &Client, create: WatchCreateRequest) -> anyhow::Result<WatchStream> {
        let (requests, outgoing) = mpsc::unbounded();
        // The create request goes first: etcd sends the stream's headers with its answer.
        requests.unbounded_send(WatchRequest {
            request_union: Some(RequestUnion::CreateRequest(create)),
        })?;
        let responses = client
            .watch()
            .watch(outgoing)
            .await
            .context("open watch stream")?
            .into_inner();
        Ok(WatchStream {
            requests,
            responses,
        })
    }

    async fn next(&mut self) -> anyhow::Result<WatchResponse> {
        match tokio::time::timeout(Duration::from_secs(10), self.responses.next()).await {
            Err(_) => bail!("no watch response within 10 s"),
            Ok(None) => bail!("watch stream ended"),
            Ok(Some(response)) => Ok(response.context("watch stream failed")?),
        }
    }

    /// Reads responses until `count` events have arrived; fails on a cancellation.
    async fn events(&mut self, count: usize) -> anyhow::Result<Vec<Event>> {
        let mut events = Vec::new();
        while events.len() < count {
            let response = self.next().await?;
            ensure!(!response.canceled, "watch cancelled: {response:?}");
            events.extend(response.events);
        }
        ensure!(
            events.len() == count,
            "more events than expected: {events:?}"
        );
        Ok(events)
    }
}

#[tokio::test]
async fn watch_from_a_past_revision_delivers_history_then_live_events_with_prev_kv()
-> anyhow::Result<()> {
    with_etcd(|client, _| async move {
        let first = put(&client, "/w/k", b"1").await?;
        let second = put(&client, "/w/k", b"2").await?;
        let deleted = client
            .kv()
            .delete_range(DeleteRangeRequest {
                key: "/w/k".into(),
                ..Default::default()
            })
            .await?
            .into_inner();
        let deletion = revision(deleted.header)?;
        put(&client, "/x/outside", b"not watched").await?;

        let mut watch = WatchStream::open(
            &client,
            WatchCreateRequest {
                key: "/w/".into(),
                range_end: prefix_range_end(b"/w/"),
                start_revision: second,
                prev_kv: true,
                ..Default::default()
            },
        )
        .await?;
        let created = watch.next().await?;
        assert!(
            created.created,
            "first response is not the creation: {created:?}"
        );
        let watch_id = created.watch_id;

        // History from `second` on (the first put is before it), each with its previous value.
        let history = watch.events(2).await?;
        let put_event = &history[0];
        assert_eq!(put_event.r#type, EventType::Put as i32);
        let kv = put_event.kv.as_ref().context("put event without kv")?;
        assert_eq!(
            (kv.value.as_slice(), kv.mod_revision),
            (b"2".as_slice(), second)
        );
        let previous = put_event
            .prev_kv
            .as_ref()
            .context("put event without prev_kv")?;
        assert_eq!(
            (previous.value.as_slice(), previous.mod_revision),
            (b"1".as_slice(), first)
        );

        let delete_event = &history[1];
        assert_eq!(delete_event.r#type, EventType::Delete as i32);
        let kv = delete_event
            .kv
            .as_ref()
            .context("delete event without kv")?;
        assert_eq!(
            (kv.key.as_slice(), kv.mod_revision),
            (b"/w/k".as_slice(), deletion)
        );
        let previous = delete_event
            .prev_kv
            .as_ref()
            .context("delete without prev_kv")?;
        assert_eq!(previous.value, b"2");

        // Then live events; the key was deleted, so a re-create has no previous value.
        let recreated = put(&client, "/w/k", b"3").await?;
        let live = watch.events(1).await?;
        let kv = live[0].kv.as_ref().context("live event without kv")?;
        assert_eq!(
            (kv.value.as_slice(), kv.mod_revision, kv.version),
            (b"3".as_slice(), recreated, 1)
        );
        assert_eq!(live[0].prev_kv, None);

        watch.requests.unbounded_send(WatchRequest {
            request_union: Some(RequestUnion::CancelRequest(WatchCancelRequest { watch_id })),
        })?;
        let cancelled = watch.next().await?;
        assert!(
            cancelled.canceled && cancelled.watch_id == watch_id,
            "cancel answered {cancelled:?}"
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn compacted_revisions_are_reported_as_compacted_and_nothing_else_is() -> anyhow::Result<()> {
    with_etcd(|client, _| async move {
        let first = put(&client, "/c/k", b"1").await?;
        let second = put(&client, "/c/k", b"2").await?;
        let third = put(&client, "/c/k", b"3").await?;
        let mut kv_service = client.kv();
        kv_service
            .compact(CompactionRequest {
                revision: second,
                physical: true,
            })
            .await
            .context("compact")?;

        let read_at = |revision| RangeRequest {
            key: "/c/k".into(),
            revision,
            ..Default::default()
        };
        let error = kv_service
            .range(read_at(first))
            .await
            .expect_err("read below the compaction succeeded");
        assert!(is_compacted(&error), "not reported as compacted: {error:?}");

        // The compaction revision itself is still readable.
        let at_second = kv_service.range(read_at(second)).await?.into_inner();
        assert_eq!(
            at_second.kvs.first().map(|kv| kv.value.as_slice()),
            Some(b"2".as_slice())
        );

        // Same status code, different cause: a future revision is not "compacted".
        let future = kv_service
            .range(read_at(third + 100))
            .await
            .expect_err("read of a future revision succeeded");
        assert_eq!(future.code(), Code::OutOfRange);
        assert!(
            !is_compacted(&future),
            "future revision taken for compacted: {future:?}"
        );

        // Compacting again at an older revision is refused as compacted.
        let again = kv_service
            .compact(CompactionRequest {
                revision: first,
                physical: false,
            })
            .await
            .expect_err("compaction below the last one succeeded");
        assert!(is_compacted(&again), "not reported as compacted: {again:?}");

        // A watch from a compacted revision ends, naming the compaction revision.
        let mut watch = WatchStream::open(
            &client,
            WatchCreateRequest {
                key: "/c/k".into(),
                start_revision: first,
                ..Default::default()
            },
        )
        .await?;
        let mut responses = Vec::new();
        loop {
            let response = watch.next().await?;
            ensure!(
                response.events.is_empty(),
                "compacted watch sent events: {response:?}"
            );
            let done = response.compact_revision != 0;
            responses.push(response);
            if done {
                break;
            }
            ensure!(responses.len() < 3, "no compaction report: {responses:?}");
        }
        let report = responses.last().context("no responses")?;
        assert!(report.canceled, "compacted watch not cancelled: {report:?}");
        assert_eq!(report.compact_revision, second);
        Ok(())
    })
    .await
}

/// etcd refuses requests over 1.5 MiB, so a value of 1.25 MiB is about the largest one object
/// can be; four of them make a 5 MiB response.
const LARGE_VALUE: usize = 1_250_000;
const LARGE_VALUES: usize = 4;

#[tokio::test]
async fn responses_over_four_mebibytes_are_accepted_by_default_and_the_limit_is_settable()
-> anyhow::Result<()> {
    with_etcd(|client, endpoint| async move {
        let value = vec![b'x'; LARGE_VALUE];
        let mut first = None;
        for i in 0..LARGE_VALUES {
            let written = put(&client, &format!("/big/{i}"), &value).await?;
            first.get_or_insert(written);
        }
        let whole_prefix = RangeRequest {
            key: "/big/".into(),
            range_end: prefix_range_end(b"/big/"),
            ..Default::default()
        };

        let all = client.kv().range(whole_prefix.clone()).await?.into_inner();
        assert_eq!(all.kvs.len(), LARGE_VALUES);
        assert!(all.kvs.iter().all(|kv| kv.value.len() == LARGE_VALUE));

        // A watch catching up sends the whole backlog in one message, over 4 MiB as well.
        let mut watch = WatchStream::open(
            &client,
            WatchCreateRequest {
                key: "/big/".into(),
                range_end: prefix_range_end(b"/big/"),
                start_revision: first.context("nothing written")?,
                ..Default::default()
            },
        )
        .await?;
        assert!(watch.next().await?.created);
        assert_eq!(watch.events(LARGE_VALUES).await?.len(), LARGE_VALUES);

        // With tonic's default of 4 MiB the same read fails, and not as "compacted".
        let limited =
            Client::connect(endpoint, &options().with_max_response_bytes(4 << 20)).await?;
        let error = limited
            .kv()
            .range(whole_prefix)
            .await
            .expect_err("a 5 MiB response passed a 4 MiB limit");
        assert_eq!(error.code(), Code::OutOfRange, "{error:?}");
        assert!(
            !is_compacted(&error),
            "size limit taken for compaction: {error:?}"
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn a_lease_keeps_its_keys_until_revoked() -> anyhow::Result<()> {
    with_etcd(|client, _| async move {
        let mut leases = client.lease();
        let granted = leases
            .lease_grant(LeaseGrantRequest { ttl: 60, id: 0 })
            .await?
            .into_inner();
        assert!(
            granted.id != 0 && granted.ttl == 60,
            "grant answered {granted:?}"
        );
        client
            .kv()
            .put(PutRequest {
                key: "/l/k".into(),
                value: b"v".to_vec(),
                lease: granted.id,
                ..Default::default()
            })
            .await?;
        assert_eq!(
            get(&client, "/l/k").await?.map(|kv| kv.lease),
            Some(granted.id)
        );

        let (requests, outgoing) = mpsc::unbounded();
        requests.unbounded_send(LeaseKeepAliveRequest { id: granted.id })?;
        let mut renewals = leases.lease_keep_alive(outgoing).await?.into_inner();
        let renewal = tokio::time::timeout(Duration::from_secs(10), renewals.next())
            .await
            .context("no keepalive answer within 10 s")?
            .context("keepalive stream ended")??;
        assert_eq!(renewal.id, granted.id);
        assert!(renewal.ttl > 0, "a live lease renewed to {}", renewal.ttl);
        drop(requests);

        leases
            .lease_revoke(LeaseRevokeRequest { id: granted.id })
            .await?;
        assert_eq!(
            get(&client, "/l/k").await?,
            None,
            "key outlived its revoked lease"
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn status_names_the_version_and_the_leader() -> anyhow::Result<()> {
    with_etcd(|client, _| async move {
        let written = put(&client, "/s/k", b"v").await?;
        let status = client
            .maintenance()
            .status(StatusRequest {})
            .await?
            .into_inner();
        assert!(
            status.version.starts_with("3."),
            "version {:?}",
            status.version
        );
        let header = status.header.context("status without a header")?;
        assert!(header.revision >= written);
        // One member: it leads.
        assert_eq!(status.leader, header.member_id);
        assert!(status.db_size > 0 && status.raft_index > 0, "{status:?}");
        Ok(())
    })
    .await
}

#[tokio::test]
async fn connecting_where_nothing_listens_fails_within_the_connect_timeout() -> anyhow::Result<()> {
    let endpoint = format!("http://127.0.0.1:{}", finale_e2e::free_port()?);
    let started = std::time::Instant::now();
    let result = tokio::time::timeout(LIMIT, Client::connect(endpoint.clone(), &options()))
        .await
        .context("connect did not return")?;
    match result {
        Err(ConnectError::Connect {
            endpoint: named, ..
        }) => assert_eq!(named, endpoint),
        other => bail!("expected a connect error, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(6));

    let invalid = Client::connect("not a url", &options()).await;
    assert!(
        matches!(invalid, Err(ConnectError::InvalidEndpoint { .. })),
        "{invalid:?}"
    );
    Ok(())
}
