//! Single-key writes as one etcd `Txn`, and what to do when etcd's answer is lost.
//!
//! The txn: `If <precondition> Then Put|DeleteRange (prev_kv) Else Range(key)`, as
//! kube-apiserver's `GuaranteedUpdate`, so a failed precondition returns the current state
//! without a second round trip.
//!
//! # Guarantees
//! - A write that certainly did not reach etcd (the connection could not be made) is simply
//!   retried on another member.
//! - A write that may have reached etcd is resolved by reading the key: if it still is as the
//!   precondition requires, the write did not happen and is sent again (the compare keeps a
//!   second attempt from applying twice); if it now holds our value, the write happened; if
//!   someone else changed it, the precondition failed.
//!
//! # Caveats
//! - See the crate docs for the two corner cases where an ambiguous write is misreported.
//! - A resolved delete reports the revision of the re-read, which is at or after the
//!   deletion's own revision.

use finale_etcd_rpc::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use finale_etcd_rpc::etcdserverpb::request_op::Request;
use finale_etcd_rpc::etcdserverpb::response_op::Response;
use finale_etcd_rpc::etcdserverpb::{
    Compare, DeleteRangeRequest, PutRequest, RangeRequest as EtcdRange, RequestOp, TxnRequest,
    TxnResponse,
};
use finale_store::{
    KeyValue, Precondition, RangeRequest, Revision, Store, StoreError, StoreResult, WriteOp,
    WriteOutcome, WriteResult,
};
use tokio::time::Instant;

use crate::EtcdStore;
use crate::members::{Backoff, describe, is_retryable, never_sent};

fn compare(key: &[u8], precondition: Precondition) -> Vec<Compare> {
    let (result, target, value) = match precondition {
        Precondition::None => return Vec::new(),
        Precondition::MustNotExist => (
            CompareResult::Equal,
            CompareTarget::Mod,
            TargetUnion::ModRevision(0),
        ),
        Precondition::ModRevision(revision) => (
            CompareResult::Equal,
            CompareTarget::Mod,
            TargetUnion::ModRevision(revision),
        ),
        Precondition::MustExist => (
            CompareResult::Greater,
            CompareTarget::Create,
            TargetUnion::CreateRevision(0),
        ),
    };
    vec![Compare {
        result: result as i32,
        target: target as i32,
        key: key.to_vec(),
        range_end: Vec::new(),
        target_union: Some(value),
    }]
}

fn txn(store: &EtcdStore, op: &WriteOp, precondition: Precondition) -> TxnRequest {
    let key = store.full_key(op.key());
    let then = match op {
        WriteOp::Put { value, .. } => Request::RequestPut(PutRequest {
            key: key.clone(),
            value: value.clone(),
            // A put that may only create has no previous value to return: asking would cost
            // etcd a read of the key on every create.
            prev_kv: precondition != Precondition::MustNotExist,
            ..Default::default()
        }),
        WriteOp::Delete { .. } => Request::RequestDeleteRange(DeleteRangeRequest {
            key: key.clone(),
            range_end: Vec::new(),
            prev_kv: true,
        }),
    };
    TxnRequest {
        compare: compare(&key, precondition),
        success: vec![RequestOp {
            request: Some(then),
        }],
        failure: vec![RequestOp {
            request: Some(Request::RequestRange(EtcdRange {
                key,
                ..Default::default()
            })),
        }],
    }
}

/// The outcome etcd's answer to the txn describes.
fn outcome(store: &EtcdStore, op: &WriteOp, response: TxnResponse) -> StoreResult<WriteOutcome> {
    let revision = crate::header_revision(response.header)?;
    let first = response
        .responses
        .into_iter()
        .next()
        .and_then(|response| response.response);
    if !response.succeeded {
        let Some(Response::ResponseRange(range)) = first else {
            return Err(StoreError::Backend(
                "etcd answered a failed txn without the key's state".into(),
            ));
        };
        return Ok(WriteOutcome::PreconditionFailed {
            current: range.kvs.into_iter().next().map(|kv| store.finale_kv(kv)),
        });
    }
    match (op, first) {
        (WriteOp::Put { key, value }, Some(Response::ResponsePut(put))) => {
            let previous = put.prev_kv.map(|kv| store.finale_kv(kv));
            let current = KeyValue {
                key: key.clone(),
                value: value.clone(),
                create_revision: previous.as_ref().map_or(revision, |p| p.create_revision),
                mod_revision: revision,
                version: previous.as_ref().map_or(1, |p| p.version + 1),
            };
            Ok(WriteOutcome::Committed(WriteResult {
                revision,
                current: Some(current),
                previous,
            }))
        }
        (WriteOp::Delete { .. }, Some(Response::ResponseDeleteRange(deleted))) => {
            if deleted.deleted == 0 {
                // Nothing was there: etcd wrote nothing and used no revision.
                return Ok(WriteOutcome::PreconditionFailed { current: None });
            }
            Ok(WriteOutcome::Committed(WriteResult {
                revision,
                current: None,
                previous: deleted
                    .prev_kvs
                    .into_iter()
                    .next()
                    .map(|kv| store.finale_kv(kv)),
            }))
        }
        _ => Err(StoreError::Backend(
            "etcd answered a txn with a response of the wrong kind".into(),
        )),
    }
}

/// What a re-read after an ambiguous failure says about the write.
enum Resolution {
    /// The key is as the precondition needs: the write did not happen; send it again.
    Retry,
    Settled(WriteOutcome),
}

/// The key at `revision`, if history there is still readable.
async fn key_at(store: &EtcdStore, key: &[u8], revision: Revision) -> Option<KeyValue> {
    if revision <= 0 {
        return None;
    }
    let mut end = key.to_vec();
    end.push(0);
    store
        .range(RangeRequest {
            range: key.to_vec()..end,
            limit: 1,
            revision,
        })
        .await
        .ok()
        .and_then(|response| response.kvs.into_iter().next())
}

async fn resolve(
    store: &EtcdStore,
    op: &WriteOp,
    precondition: Precondition,
) -> StoreResult<Resolution> {
    let (current, read_at) = store.get(op.key()).await?;
    let required_mod = match precondition {
        Precondition::MustNotExist => Some(0),
        Precondition::ModRevision(revision) => Some(revision),
        Precondition::None | Precondition::MustExist => None,
    };
    let current_mod = current.as_ref().map_or(0, |kv| kv.mod_revision);
    let resolution = match op {
        WriteOp::Put { value, .. } => match (required_mod, current) {
            (Some(required), _) if current_mod == required => Resolution::Retry,
            (_, Some(kv)) if &kv.value == value => {
                let previous = match required_mod {
                    Some(required) => key_at(store, op.key(), required).await,
                    None => key_at(store, op.key(), kv.mod_revision - 1).await,
                };
                Resolution::Settled(WriteOutcome::Committed(WriteResult {
                    revision: kv.mod_revision,
                    current: Some(kv),
                    previous,
                }))
            }
            (Some(_), current) => Resolution::Settled(WriteOutcome::PreconditionFailed { current }),
            (None, None) if precondition == Precondition::MustExist => {
                Resolution::Settled(WriteOutcome::PreconditionFailed { current: None })
            }
            (None, _) => Resolution::Retry,
        },
        WriteOp::Delete { .. } => match (required_mod, current) {
            (Some(required), Some(_)) if current_mod == required => Resolution::Retry,
            (Some(required), None) if required > 0 => {
                Resolution::Settled(WriteOutcome::Committed(WriteResult {
                    revision: read_at,
                    current: None,
                    previous: key_at(store, op.key(), required).await,
                }))
            }
            (Some(_), current) => Resolution::Settled(WriteOutcome::PreconditionFailed { current }),
            (None, Some(_)) => Resolution::Retry,
            // Gone, but we cannot tell whether we deleted it: report it as not found.
            (None, None) => Resolution::Settled(WriteOutcome::PreconditionFailed { current: None }),
        },
    };
    Ok(resolution)
}

pub(crate) async fn write(
    store: &EtcdStore,
    op: WriteOp,
    precondition: Precondition,
) -> StoreResult<WriteOutcome> {
    let request = txn(store, &op, precondition);
    let members = &store.members;
    let deadline = Instant::now() + members.call_deadline();
    let mut backoff = Backoff::default();
    loop {
        if members.is_closed() {
            return Err(StoreError::Closed);
        }
        let member = members.pick();
        let attempt = tokio::time::timeout(
            members.attempt_timeout(),
            member.client.kv().txn(request.clone()),
        )
        .await;
        // `ambiguous`: the txn may have been applied; find out before sending it again.
        let (reason, ambiguous) = match attempt {
            Ok(Ok(response)) => return outcome(store, &op, response.into_inner()),
            Ok(Err(status)) if !is_retryable(&status) => {
                return Err(crate::unexpected("a write", &status));
            }
            Ok(Err(status)) => (describe(&status), !never_sent(&status)),
            Err(_) => (
                format!("no answer within {:?}", members.attempt_timeout()),
                true,
            ),
        };
        members.mark_failed(&member, &reason);
        if ambiguous {
            tracing::debug!(endpoint = %member.url, %reason, "resolving an ambiguous etcd write");
            if let Resolution::Settled(outcome) = resolve(store, &op, precondition).await? {
                return Ok(outcome);
            }
        }
        let pause = backoff.next_pause();
        if Instant::now() + pause >= deadline {
            return Err(StoreError::Unavailable {
                reason: format!(
                    "etcd cannot serve a write (last tried {}): {reason}",
                    member.url
                ),
            });
        }
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = members.closed().cancelled() => return Err(StoreError::Closed),
        }
    }
}

/// Several writes as one etcd `Txn`: a compare per key (a delete without a precondition
/// compares `create_revision > 0`, so that deleting a missing key fails the whole txn, as on
/// the embedded engine), every put and delete on success, and a read of every key on
/// failure. etcd gives the writes one shared revision.
///
/// An attempt whose answer is lost is resolved by re-reading when the txn writes one key
/// (guards only compare, so the written key tells whether it landed), as a single write is.
///
/// Caveat: with several written keys it is not (several keys may have changed since); it is
/// reported as `Unavailable`, and the caller's retry meets the preconditions again: a txn
/// that did land then fails them.
pub(crate) async fn write_all(
    store: &EtcdStore,
    writes: Vec<(WriteOp, Precondition)>,
    guards: Vec<finale_store::Guard>,
) -> StoreResult<finale_store::TxnOutcome> {
    let mut seen = std::collections::HashSet::new();
    if !writes.iter().all(|(op, _)| seen.insert(op.key().to_vec())) {
        return Err(StoreError::Backend(
            "a transaction may write each key only once".into(),
        ));
    }
    if guards.iter().any(|guard| seen.contains(&guard.key)) {
        return Err(StoreError::Backend(
            "a transaction guards a key it writes".into(),
        ));
    }
    let mut request = TxnRequest::default();
    for (op, precondition) in &writes {
        let precondition = match (op, precondition) {
            (WriteOp::Delete { .. }, Precondition::None) => Precondition::MustExist,
            (_, precondition) => *precondition,
        };
        let single = txn(store, op, precondition);
        request.compare.extend(single.compare);
        request.success.extend(single.success);
        request.failure.extend(single.failure);
    }
    // A guard compares and reads on failure; it writes nothing, so `success` has one answer
    // per write and `failure` one per write, then one per guard.
    for guard in &guards {
        let key = store.full_key(&guard.key);
        request
            .compare
            .extend(compare(&key, Precondition::ModRevision(guard.mod_revision)));
        request.failure.push(RequestOp {
            request: Some(Request::RequestRange(EtcdRange {
                key,
                ..Default::default()
            })),
        });
    }
    let members = &store.members;
    let deadline = Instant::now() + members.call_deadline();
    let mut backoff = Backoff::default();
    loop {
        if members.is_closed() {
            return Err(StoreError::Closed);
        }
        let member = members.pick();
        let attempt = tokio::time::timeout(
            members.attempt_timeout(),
            member.client.kv().txn(request.clone()),
        )
        .await;
        let reason = match attempt {
            Ok(Ok(response)) => return outcome_all(store, &writes, response.into_inner()),
            Ok(Err(status)) if !is_retryable(&status) => {
                return Err(crate::unexpected("a transaction", &status));
            }
            Ok(Err(status)) if never_sent(&status) => describe(&status),
            Ok(Err(status)) if writes.len() == 1 => {
                let reason = describe(&status);
                members.mark_failed(&member, &reason);
                if let Some(settled) = resolve_single(store, &writes[0], &guards).await? {
                    return Ok(settled);
                }
                reason
            }
            Err(_) if writes.len() == 1 => {
                let reason = format!("no answer within {:?}", members.attempt_timeout());
                members.mark_failed(&member, &reason);
                if let Some(settled) = resolve_single(store, &writes[0], &guards).await? {
                    return Ok(settled);
                }
                reason
            }
            Ok(Err(status)) => {
                members.mark_failed(&member, &describe(&status));
                return Err(StoreError::Unavailable {
                    reason: format!(
                        "etcd's answer to a transaction was lost ({}); it may or may not have been applied",
                        describe(&status)
                    ),
                });
            }
            Err(_) => {
                let reason = format!("no answer within {:?}", members.attempt_timeout());
                members.mark_failed(&member, &reason);
                return Err(StoreError::Timeout {
                    reason: format!(
                        "etcd did not answer a transaction ({reason}); it may or may not have been applied"
                    ),
                });
            }
        };
        members.mark_failed(&member, &reason);
        let pause = backoff.next_pause();
        if Instant::now() + pause >= deadline {
            return Err(StoreError::Unavailable {
                reason: format!(
                    "etcd cannot serve a transaction (last tried {}): {reason}",
                    member.url
                ),
            });
        }
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = members.closed().cancelled() => return Err(StoreError::Closed),
        }
    }
}

/// After a lost answer to a one-write txn: whether it landed, read from the written key (the
/// guards' keys are read too when it did not, for the caller). `None`: not applied, send it
/// again.
async fn resolve_single(
    store: &EtcdStore,
    (op, precondition): &(WriteOp, Precondition),
    guards: &[finale_store::Guard],
) -> StoreResult<Option<finale_store::TxnOutcome>> {
    tracing::debug!("resolving an ambiguous etcd transaction");
    let precondition = match (op, precondition) {
        (WriteOp::Delete { .. }, Precondition::None) => Precondition::MustExist,
        (_, precondition) => *precondition,
    };
    match resolve(store, op, precondition).await? {
        Resolution::Retry => Ok(None),
        Resolution::Settled(WriteOutcome::Committed(result)) => {
            Ok(Some(finale_store::TxnOutcome::Committed(vec![result])))
        }
        Resolution::Settled(WriteOutcome::PreconditionFailed { current }) => {
            let mut states = vec![current];
            for guard in guards {
                states.push(store.get(&guard.key).await?.0);
            }
            Ok(Some(finale_store::TxnOutcome::PreconditionFailed {
                current: states,
            }))
        }
    }
}

fn outcome_all(
    store: &EtcdStore,
    writes: &[(WriteOp, Precondition)],
    response: TxnResponse,
) -> StoreResult<finale_store::TxnOutcome> {
    let revision = crate::header_revision(response.header)?;
    if !response.succeeded {
        let current = response
            .responses
            .into_iter()
            .map(|answer| match answer.response {
                Some(Response::ResponseRange(range)) => {
                    Ok(range.kvs.into_iter().next().map(|kv| store.finale_kv(kv)))
                }
                _ => Err(StoreError::Backend(
                    "etcd answered a failed txn without the keys' state".into(),
                )),
            })
            .collect::<StoreResult<Vec<_>>>()?;
        return Ok(finale_store::TxnOutcome::PreconditionFailed { current });
    }
    if response.responses.len() != writes.len() {
        return Err(StoreError::Backend(
            "etcd answered a txn with the wrong number of responses".into(),
        ));
    }
    let mut results = Vec::with_capacity(writes.len());
    for ((op, _), answer) in writes.iter().zip(response.responses) {
        let single = TxnResponse {
            header: Some(finale_etcd_rpc::etcdserverpb::ResponseHeader {
                revision,
                ..Default::default()
            }),
            succeeded: true,
            responses: vec![answer],
        };
        match outcome(store, op, single)? {
            WriteOutcome::Committed(result) => results.push(result),
            WriteOutcome::PreconditionFailed { .. } => {
                return Err(StoreError::Backend(
                    "etcd applied a txn whose delete found no key".into(),
                ));
            }
        }
    }
    Ok(finale_store::TxnOutcome::Committed(results))
}
