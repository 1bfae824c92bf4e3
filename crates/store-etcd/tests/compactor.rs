//! kube-apiserver's compactor on a real etcd member: two stores on one prefix (two Finale
//! replicas) compact once per interval between them, history still reaches back one interval,
//! a watcher that keeps up sees every write, and one left behind gets `Compacted`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use finale_e2e::Etcd;
use finale_etcd_rpc::etcdserverpb::RangeRequest as EtcdRange;
use finale_etcd_rpc::{Client, ConnectOptions};
use finale_store::{Precondition, Store, StoreError, WriteOp, prefix_range};
use finale_store_etcd::{COMPACT_REV_KEY, EtcdStore, EtcdStoreOptions};
use futures::StreamExt;

const INTERVAL: Duration = Duration::from_millis(400);

async fn compact_key_version(client: &Client) -> i64 {
    let mut key = b"/t".to_vec();
    key.extend_from_slice(COMPACT_REV_KEY);
    let response = client
        .kv()
        .range(EtcdRange {
            key,
            ..Default::default()
        })
        .await
        .expect("read the compaction key")
        .into_inner();
    response.kvs.first().map_or(0, |kv| kv.version)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_compact_once_per_interval_and_a_watcher_that_keeps_up_sees_every_write() {
    tokio::time::timeout(Duration::from_secs(90), async {
        let etcd = tokio::task::spawn_blocking(Etcd::start_in_memory)
            .await
            .expect("etcd start task")
            .expect("start etcd");
        let mut options = EtcdStoreOptions::new(vec![etcd.endpoint.clone()]);
        options.prefix = b"/t".to_vec();
        let replicas: Vec<Arc<EtcdStore>> = vec![
            EtcdStore::connect(options.clone()).await.expect("connect"),
            EtcdStore::connect(options).await.expect("connect"),
        ];
        let raw = Client::connect(etcd.endpoint.clone(), &ConnectOptions::new())
            .await
            .expect("raw client");
        let start = replicas[0].current_revision().await.expect("revision");
        let mut keeping_up = replicas[1]
            .watch(prefix_range(b"/w/"), start)
            .await
            .expect("watch");
        let started = Instant::now();
        for replica in &replicas {
            replica.start_compactor(INTERVAL);
        }

        // Write through both replicas until compaction has passed the first writes.
        let mut written = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut i = 0;
        while replicas[0].compacted_revision().await.expect("compacted") <= start + 10 {
            assert!(Instant::now() < deadline, "no compaction within 30 s");
            let result = replicas[i % 2]
                .write(
                    WriteOp::Put {
                        key: format!("/w/{}", i % 7).into_bytes(),
                        value: i.to_string().into_bytes(),
                    },
                    Precondition::None,
                )
                .await
                .expect("write");
            written.push(match result {
                finale_store::WriteOutcome::Committed(result) => result.revision,
                other => panic!("unconditional put refused: {other:?}"),
            });
            i += 1;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let elapsed = started.elapsed();

        // One winner per round: the key's version counts rounds, not rounds × replicas.
        let rounds = (elapsed.as_millis() / INTERVAL.as_millis()) as i64;
        let version = compact_key_version(&raw).await;
        assert!(
            version >= 2 && version <= rounds + 1,
            "compact_rev_key version {version} after {elapsed:?} ({rounds} intervals, 2 replicas)"
        );
        // History reaches back at least one interval: compaction lags the newest write.
        let compacted = replicas[1].compacted_revision().await.expect("compacted");
        assert!(compacted < *written.last().expect("writes"));

        // The watcher that kept up saw every write, in order, across the compactions.
        for revision in &written {
            let event = tokio::time::timeout(Duration::from_secs(10), keeping_up.next())
                .await
                .expect("event within 10 s")
                .expect("stream open")
                .expect("no error for a watcher that keeps up");
            assert_eq!(event.revision(), *revision);
        }
        // A watcher from before the compaction point is told so.
        match replicas[0].watch(prefix_range(b"/w/"), start).await {
            Err(StoreError::Compacted {
                requested,
                compacted: reported,
            }) => {
                assert_eq!(requested, start + 1);
                assert!(reported >= compacted);
            }
            Err(other) => panic!("expected Compacted, got {other}"),
            Ok(_) => panic!("expected Compacted, got a stream"),
        }
    })
    .await
    .expect("the test finishes in time");
}
