//! kube-apiserver's etcd compactor (`k8s.io/apiserver/pkg/storage/etcd3/compact.go`), so that
//! several Finale replicas on one etcd compact once per interval between them.
//!
//! Every interval each replica runs one txn on [`COMPACT_REV_KEY`] (under the prefix):
//! `If version(key) == <the version this replica last saw> Then Put(key, <revision seen one
//! interval ago>) Else Get(key)`. The put bumps the key's version, so exactly one replica wins
//! each round; the winner compacts etcd to the revision it saw at its previous round, and the
//! others adopt the new version. History therefore reaches back at least one interval (5 min
//! by default), enough for watchers and paged lists to resume.
//!
//! # Differences from kube-apiserver
//! - The key lives under Finale's prefix (kube keeps `compact_rev_key` at the root of the
//!   keyspace, outside `/registry`), so that two Finale clusters on one etcd do not share it.
//!   Compaction itself is still global to the etcd cluster (see the crate docs).

use std::sync::Arc;
use std::time::Duration;

use finale_etcd_rpc::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use finale_etcd_rpc::etcdserverpb::request_op::Request;
use finale_etcd_rpc::etcdserverpb::response_op::Response;
use finale_etcd_rpc::etcdserverpb::{
    Compare, PutRequest, RangeRequest as EtcdRange, RequestOp, TxnRequest,
};
use finale_store::{Revision, Store, StoreError};
use tokio::task::JoinHandle;

use crate::EtcdStore;

/// The key (under the prefix) whose version counts compaction rounds.
pub const COMPACT_REV_KEY: &[u8] = b"/compact_rev_key";

impl EtcdStore {
    /// Starts the compactor: one round every `interval` until the store closes. An interval of
    /// zero disables it (kube's `--etcd-compaction-interval=0`).
    pub fn start_compactor(self: &Arc<Self>, interval: Duration) -> Option<JoinHandle<()>> {
        if interval.is_zero() {
            return None;
        }
        let store = Arc::downgrade(self);
        let closed = self.closed.clone();
        Some(tokio::spawn(async move {
            let mut version = 0;
            let mut revision = 0;
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(interval) => {}
                    _ = closed.cancelled() => return,
                }
                let Some(store) = store.upgrade() else {
                    return;
                };
                match store.compaction_round(version, revision).await {
                    Ok((next_version, next_revision)) => {
                        version = next_version;
                        revision = next_revision;
                    }
                    Err(error) => tracing::warn!(%error, "etcd compaction round failed"),
                }
            }
        }))
    }

    /// One round: returns the key's version and the revision to compact to next round.
    async fn compaction_round(
        &self,
        version: i64,
        revision: Revision,
    ) -> Result<(i64, Revision), StoreError> {
        let key = self.full_key(COMPACT_REV_KEY);
        let request = TxnRequest {
            compare: vec![Compare {
                result: CompareResult::Equal as i32,
                target: CompareTarget::Version as i32,
                key: key.clone(),
                range_end: Vec::new(),
                target_union: Some(TargetUnion::Version(version)),
            }],
            success: vec![RequestOp {
                request: Some(Request::RequestPut(PutRequest {
                    key: key.clone(),
                    value: revision.to_string().into_bytes(),
                    ..Default::default()
                })),
            }],
            failure: vec![RequestOp {
                request: Some(Request::RequestRange(EtcdRange {
                    key,
                    ..Default::default()
                })),
            }],
        };
        let response = self
            .members
            .call("a compaction round", |client| {
                let request = request.clone();
                async move { Ok(client.kv().txn(request).await?.into_inner()) }
            })
            .await?
            .map_err(|status| crate::unexpected("a compaction round", &status))?;
        let current = crate::header_revision(response.header)?;
        if !response.succeeded {
            // Another replica won this round; adopt its version.
            let seen = match response
                .responses
                .into_iter()
                .next()
                .and_then(|r| r.response)
            {
                Some(Response::ResponseRange(range)) => {
                    range.kvs.first().map_or(0, |kv| kv.version)
                }
                _ => version,
            };
            return Ok((seen, current));
        }
        if revision > 0 {
            match self.compact(revision).await {
                // Someone compacted past it already: nothing to do.
                Ok(()) | Err(StoreError::Compacted { .. }) => {
                    tracing::debug!(revision, "compacted etcd")
                }
                Err(error) => return Err(error),
            }
        }
        Ok((version + 1, current))
    }
}
