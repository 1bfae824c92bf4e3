//! Finalizer provenance: who added each finalizer of an object, and when.
//!
//! The record lives beside the object, never in it: one side key per object that carries at
//! least one finalizer with a known origin, under [`PREFIX`] (outside `/registry/`, so the
//! watch cache, which follows `/registry/` only, never turns it into a watch event). The
//! registry writes it in the same store transaction ([`finale_store::Store::write_all`]) as
//! the object write that adds or removes a finalizer, so the two never disagree.
//!
//! # Guarantees
//! - No extra write of the object and no extra watch event: the side key is a second write
//!   in the object write's own transaction, outside every watched prefix.
//! - Consistent with the object: the transaction commits both or neither, with a
//!   `mod_revision` precondition on each. The record holds entries only for finalizers the
//!   object carries; an entry goes in the transaction that removes its finalizer, and the
//!   whole record goes with the last finalizer (so also when the object leaves storage, which
//!   needs its finalizers gone).
//! - Durable like the object, so it survives restarts.
//!
//! # Caveats
//! - Finalizers added before this server recorded provenance (or written around the
//!   registry) have no entry; readers show them as "added by an unknown client".
//! - The user is the authenticated identity of the request; in-process writers record
//!   [`IN_PROCESS_USER`]. The User-Agent is kept beside it, as the client declared it.
//! - A write that only reorders finalizers keeps every entry; a finalizer removed and added
//!   back in one write keeps its first entry (the set did not change).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Where provenance records live: this prefix plus the object's key without `/registry/`.
pub const PREFIX: &str = "/finale/finalizer-provenance/";

/// The user recorded for writes by the server's own controllers.
pub const IN_PROCESS_USER: &str = "system:apiserver";

/// Who makes a write: the authenticated user and the client's User-Agent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Actor {
    pub user: String,
    pub user_agent: String,
    /// The rest of the authenticated identity, for admission webhooks' `userInfo`; empty
    /// when the writer is the server itself or a test.
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: std::collections::BTreeMap<String, Vec<String>>,
}

/// Who added one finalizer, and when.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FinalizerOrigin {
    pub user: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub user_agent: String,
    /// RFC 3339, seconds precision.
    pub added_at: String,
}

/// The side record of one object.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provenance {
    /// The object's uid: a record of another incarnation of the same name is ignored.
    pub uid: String,
    pub finalizers: BTreeMap<String, FinalizerOrigin>,
}

/// The side key of the object stored at `object_key`.
pub fn side_key(object_key: &str) -> String {
    format!(
        "{PREFIX}{}",
        object_key.strip_prefix("/registry/").unwrap_or(object_key)
    )
}

/// `metadata.finalizers` as a sorted set.
pub fn finalizer_set(object: Option<&Value>) -> Vec<String> {
    let mut names: Vec<String> = object
        .and_then(|o| o.pointer("/metadata/finalizers"))
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names.dedup();
    names
}

/// Decodes a stored record; a record that does not decode is treated as absent (and then
/// replaced), since it only ever explains and never decides anything.
pub fn decode(bytes: &[u8]) -> Option<Provenance> {
    match serde_json::from_slice(bytes) {
        Ok(record) => Some(record),
        Err(error) => {
            tracing::warn!(%error, "a finalizer provenance record does not decode; replacing it");
            None
        }
    }
}

/// The record after a write that turns `before` into `after` (None: the object goes).
/// Entries of finalizers that stay are kept, new finalizers get an entry naming `actor`, and
/// entries of finalizers that went are dropped. None when nothing is left to record.
pub fn next(
    previous: Option<&Provenance>,
    before: Option<&Value>,
    after: Option<&Value>,
    actor: &Actor,
    now: &str,
) -> Option<Provenance> {
    let after = after?;
    let uid = crate::object::uid(after).to_string();
    let previous = previous.filter(|p| p.uid == uid);
    let had = finalizer_set(before);
    let mut record = Provenance {
        uid,
        finalizers: BTreeMap::new(),
    };
    for finalizer in finalizer_set(Some(after)) {
        if let Some(origin) = previous.and_then(|p| p.finalizers.get(&finalizer)) {
            record.finalizers.insert(finalizer, origin.clone());
        } else if !had.contains(&finalizer) {
            record.finalizers.insert(
                finalizer,
                FinalizerOrigin {
                    user: actor.user.clone(),
                    user_agent: actor.user_agent.clone(),
                    added_at: now.to_string(),
                },
            );
        }
        // A finalizer the object already had, with no entry: added before provenance was
        // recorded. Its origin is unknown, and inventing one would mislead.
    }
    (!record.finalizers.is_empty()).then_some(record)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(uid: &str, finalizers: &[&str]) -> Value {
        json!({"metadata": {"uid": uid, "finalizers": finalizers}})
    }

    fn alice() -> Actor {
        Actor {
            user: "alice".into(),
            user_agent: "kubectl/v1.33.0".into(),
            ..Actor::default()
        }
    }

    #[test]
    fn a_new_finalizer_is_recorded_and_kept_until_it_goes() {
        let first = next(
            None,
            Some(&object("u", &[])),
            Some(&object("u", &["a.example.com/x"])),
            &alice(),
            "2026-01-01T00:00:00Z",
        )
        .expect("a record");
        assert_eq!(first.finalizers["a.example.com/x"].user, "alice");

        let bob = Actor {
            user: "bob".into(),
            user_agent: String::new(),
            ..Actor::default()
        };
        let second = next(
            Some(&first),
            Some(&object("u", &["a.example.com/x"])),
            Some(&object("u", &["b.example.com/y", "a.example.com/x"])),
            &bob,
            "2026-01-01T01:00:00Z",
        )
        .expect("a record");
        assert_eq!(
            second.finalizers["a.example.com/x"],
            first.finalizers["a.example.com/x"]
        );
        assert_eq!(second.finalizers["b.example.com/y"].user, "bob");

        let third = next(
            Some(&second),
            Some(&object("u", &["b.example.com/y", "a.example.com/x"])),
            Some(&object("u", &["b.example.com/y"])),
            &alice(),
            "2026-01-01T02:00:00Z",
        )
        .expect("a record");
        assert_eq!(
            third.finalizers.keys().collect::<Vec<_>>(),
            ["b.example.com/y"]
        );

        assert_eq!(
            next(
                Some(&third),
                Some(&object("u", &["b.example.com/y"])),
                Some(&object("u", &[])),
                &alice(),
                "now"
            ),
            None
        );
        assert_eq!(
            next(
                Some(&third),
                Some(&object("u", &["b.example.com/y"])),
                None,
                &alice(),
                "now"
            ),
            None
        );
    }

    #[test]
    fn unknown_origins_stay_unknown_and_other_incarnations_are_ignored() {
        // The object had the finalizer before provenance was recorded.
        assert_eq!(
            next(
                None,
                Some(&object("u", &["a.example.com/x"])),
                Some(&object("u", &["a.example.com/x"])),
                &alice(),
                "now"
            ),
            None
        );
        let stale = Provenance {
            uid: "old".into(),
            finalizers: BTreeMap::from([(
                "a.example.com/x".to_string(),
                FinalizerOrigin {
                    user: "mallory".into(),
                    user_agent: String::new(),
                    added_at: "then".into(),
                },
            )]),
        };
        let fresh = next(
            Some(&stale),
            None,
            Some(&object("new", &["a.example.com/x"])),
            &alice(),
            "now",
        )
        .expect("a record");
        assert_eq!(fresh.uid, "new");
        assert_eq!(fresh.finalizers["a.example.com/x"].user, "alice");
    }

    #[test]
    fn side_keys_sit_outside_the_watched_prefix() {
        let key = side_key("/registry/core/configmaps/default/app");
        assert_eq!(
            key,
            "/finale/finalizer-provenance/core/configmaps/default/app"
        );
        assert!(!key.starts_with("/registry/"));
    }
}

tokio::task_local! {
    static FINALIZER_CHANGES: FinalizerChanges;
}

/// The finalizers a request's writes added and removed, collected for the audit log: the
/// HTTP layer runs the request within [`FinalizerChanges::scope`], and every commit that
/// changes a finalizer set within it notes the change.
#[derive(Clone, Debug, Default)]
pub struct FinalizerChanges(Arc<Mutex<(Vec<String>, Vec<String>)>>);

impl FinalizerChanges {
    /// Runs `work`; the commits it makes note their finalizer changes here.
    pub async fn scope<F: std::future::Future>(&self, work: F) -> F::Output {
        FINALIZER_CHANGES.scope(self.clone(), work).await
    }

    /// (added, removed), each in the order first seen, without repeats.
    pub fn summary(&self) -> (Vec<String>, Vec<String>) {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Notes a commit that took the finalizers from `before` to `after`; nothing outside a
    /// scope (in-process controllers).
    pub(crate) fn note(before: &[String], after: &[String]) {
        let _ = FINALIZER_CHANGES.try_with(|changes| {
            let mut noted = changes
                .0
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            for name in after.iter().filter(|n| !before.contains(n)) {
                if !noted.0.contains(name) {
                    noted.0.push(name.clone());
                }
            }
            for name in before.iter().filter(|n| !after.contains(n)) {
                if !noted.1.contains(name) {
                    noted.1.push(name.clone());
                }
            }
        });
    }
}
