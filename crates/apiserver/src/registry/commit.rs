//! Writes to the store: one object change with its finalizer provenance record, in one
//! transaction, fenced on the controllers' Lease when the registry is ([`super::fence`]).

use super::*;

impl Registry {
    /// Writes one object change, together with its finalizer provenance record when the
    /// change adds or removes a finalizer ([`provenance`]): both in one store transaction, or
    /// the plain write when the finalizers did not change. `before` and `after` are the object
    /// before and after (None: absent); `after` is what is put at `key`, or None to delete it. The outcome is the object write's; a conflict on the
    /// record alone reports the object as it is, so the caller's retry re-reads both.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn commit(
        &self,
        resource: &ResourceType,
        key: &str,
        precondition: Precondition,
        before: Option<&Value>,
        after: Option<&Value>,
        actor: Option<&Actor>,
    ) -> ApiResult<WriteOutcome> {
        self.commit_guarded(
            resource,
            key,
            precondition,
            before,
            after,
            actor,
            Vec::new(),
        )
        .await?
        .ok_or_else(|| ApiError::internal("a write without guards reported a moved guard"))
    }

    /// [`Registry::commit`], committed only while every key of `guards` is still at its
    /// revision (a namespace a create was checked against); `None` when one has moved and
    /// nothing was written, so that the caller checks again.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn commit_guarded(
        &self,
        resource: &ResourceType,
        key: &str,
        precondition: Precondition,
        before: Option<&Value>,
        after: Option<&Value>,
        actor: Option<&Actor>,
        guards: Vec<Guard>,
    ) -> ApiResult<Option<WriteOutcome>> {
        // A write in another version than the storage version is stored in the storage
        // version, converted by the CRD's webhook ([`super::convert`]).
        let converted = match after {
            Some(object) => self.to_storage_version(resource, object).await?,
            None => None,
        };
        let after = converted.as_ref().or(after);
        let outcome = self
            .commit_guarded_inner(resource, key, precondition, before, after, actor, guards)
            .await;
        if crate::admission::Webhooks::is_configuration_key(key) {
            // After the write, before its acknowledgement: a request that follows the
            // acknowledgement is admitted by the configurations as they are now.
            self.webhooks.invalidate();
        }
        outcome
    }

    #[allow(clippy::too_many_arguments)]
    async fn commit_guarded_inner(
        &self,
        resource: &ResourceType,
        key: &str,
        precondition: Precondition,
        before: Option<&Value>,
        after: Option<&Value>,
        actor: Option<&Actor>,
        guards: Vec<Guard>,
    ) -> ApiResult<Option<WriteOutcome>> {
        let op = match after {
            Some(object) => WriteOp::Put {
                key: key.as_bytes().to_vec(),
                value: encode_as(resource, object)?,
            },
            None => WriteOp::Delete {
                key: key.as_bytes().to_vec(),
            },
        };
        let (finalizers_before, finalizers_after) = (
            provenance::finalizer_set(before),
            provenance::finalizer_set(after),
        );
        if finalizers_before == finalizers_after {
            return self.commit_writes(vec![(op, precondition)], guards).await;
        }
        provenance::FinalizerChanges::note(&finalizers_before, &finalizers_after);
        let side_key = provenance::side_key(key);
        let (side, _) = self.store.get(side_key.as_bytes()).await?;
        let previous = side.as_ref().and_then(|kv| provenance::decode(&kv.value));
        let server = Actor {
            user: provenance::IN_PROCESS_USER.to_string(),
            ..Actor::default()
        };
        let record = provenance::next(
            previous.as_ref(),
            before,
            after,
            actor.or(self.default_actor()).unwrap_or(&server),
            &object::now(),
        );
        let side_precondition =
            Precondition::ModRevision(side.as_ref().map_or(0, |kv| kv.mod_revision));
        let side_op = match (record, &side) {
            (Some(record), _) => WriteOp::Put {
                key: side_key.into_bytes(),
                value: serde_json::to_vec(&record).map_err(|e| {
                    ApiError::internal(format!("cannot encode a finalizer provenance record: {e}"))
                })?,
            },
            (None, Some(_)) => WriteOp::Delete {
                key: side_key.into_bytes(),
            },
            (None, None) => return self.commit_writes(vec![(op, precondition)], guards).await,
        };
        // The record first, so the object's revision is the transaction's last: a read at the
        // store's revision right after sees the object at exactly that revision.
        self.commit_writes(
            vec![(side_op, side_precondition), (op, precondition)],
            guards,
        )
        .await
    }

    /// Commits `writes`, the object's own last, all or none, and returns the object write's
    /// outcome, or `None` when one of `guards` moved. On a fenced registry the transaction
    /// also carries the Lease guard; a write that loses it to this replica's own renewal is
    /// retried at the renewal's revision, one that loses it to anyone else is refused with
    /// 503 and writes nothing.
    async fn commit_writes(
        &self,
        mut writes: Vec<(WriteOp, Precondition)>,
        guards: Vec<Guard>,
    ) -> ApiResult<Option<WriteOutcome>> {
        let object_outcome = |outcome: TxnOutcome| match outcome {
            TxnOutcome::Committed(mut results) => match results.pop() {
                Some(result) => Ok(Some(WriteOutcome::Committed(result))),
                None => Err(ApiError::internal(
                    "the store committed a transaction without results",
                )),
            },
            TxnOutcome::PreconditionFailed { mut current } => {
                Ok(Some(WriteOutcome::PreconditionFailed {
                    current: current.pop().flatten(),
                }))
            }
        };
        // A failed transaction reports the writes' keys, then the guards' keys, in order:
        // which moved decides what the failure means.
        let moved = |wanted: &[Guard], states: &[Option<KeyValue>]| {
            wanted
                .iter()
                .zip(states)
                .any(|(guard, state)| !fence::LeaseFence::guard_held(guard, state.as_ref()))
        };
        let Some(lease_fence) = &self.fence else {
            if guards.is_empty() {
                if writes.len() == 1
                    && let Some((op, precondition)) = writes.pop()
                {
                    return Ok(Some(self.store.write(op, precondition).await?));
                }
                return object_outcome(self.store.write_all(writes).await?);
            }
            let count = writes.len();
            return match self.store.write_all_guarded(writes, guards.clone()).await? {
                TxnOutcome::PreconditionFailed { mut current } => {
                    let states = current.split_off(count);
                    if moved(&guards, &states) {
                        return Ok(None);
                    }
                    object_outcome(TxnOutcome::PreconditionFailed { current })
                }
                committed => object_outcome(committed),
            };
        };
        let refused = |why: &fence::Fenced| {
            tracing::warn!(reason = ?why, "a controller write was refused: this replica does not hold the controllers' Lease");
            ApiError::service_unavailable(lease_fence.refuse(why))
        };
        for _ in 0..=fence::FENCE_RETRIES {
            let lease_guard = lease_fence.guard().map_err(|why| refused(&why))?;
            let mut all = guards.clone();
            all.push(lease_guard.clone());
            let outcome = self.store.write_all_guarded(writes.clone(), all).await?;
            let TxnOutcome::PreconditionFailed { mut current } = outcome else {
                return object_outcome(outcome);
            };
            let mut states = current.split_off(writes.len());
            // The Lease's guard comes last.
            let lease = states.pop().flatten();
            if !fence::LeaseFence::guard_held(&lease_guard, lease.as_ref()) {
                lease_fence
                    .recheck(lease.as_ref())
                    .map_err(|why| refused(&why))?;
                continue;
            }
            if moved(&guards, &states) {
                return Ok(None);
            }
            return object_outcome(TxnOutcome::PreconditionFailed { current });
        }
        Err(ApiError::service_unavailable(
            "the controllers' Lease changed under every attempt of this write; try again",
        ))
    }

    /// The finalizer provenance record of the object stored at `object_key`, at the latest
    /// revision; None when it has none (or the record is of another incarnation).
    pub async fn finalizer_provenance(
        &self,
        object_key: &str,
        uid: &str,
    ) -> ApiResult<Option<provenance::Provenance>> {
        let (side, _) = self
            .store
            .get(provenance::side_key(object_key).as_bytes())
            .await?;
        Ok(side
            .and_then(|kv| provenance::decode(&kv.value))
            .filter(|record| record.uid == uid))
    }
}
