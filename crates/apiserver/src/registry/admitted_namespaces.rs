//! The namespaces creates were recently admitted into, with the revision each was seen at, so
//! that a create need not read its namespace from the store every time. On etcd that read is
//! linearizable: a second round trip per create, beside the write itself.
//!
//! Guarantees:
//! - Never less safe than reading: a create's write is guarded on the namespace's
//!   `mod_revision` as remembered. If the namespace changed since (a label, its deletion
//!   beginning, a delete and re-create), the guarded write does not commit, and the create
//!   reads the namespace from the store, checks it again and refreshes the entry.
//! - Only namespaces that accepted a create are remembered; a missing or terminating one is
//!   forgotten, so its errors always come from a fresh read.
//!
//! Caveats: bounded at [`CAPACITY`] namespaces; when full it is emptied and refills as creates
//! arrive (one read each), which is simpler than an LRU and costs one read per namespace.

use std::collections::HashMap;
use std::sync::Mutex;

use finale_store::Revision;

/// Namespaces remembered at most.
const CAPACITY: usize = 4096;

#[derive(Debug, Default)]
pub(super) struct AdmittedNamespaces {
    revisions: Mutex<HashMap<String, Revision>>,
}

impl AdmittedNamespaces {
    /// The `mod_revision` `namespace` had when a create was last admitted into it.
    pub(super) fn get(&self, namespace: &str) -> Option<Revision> {
        self.lock().get(namespace).copied()
    }

    pub(super) fn remember(&self, namespace: &str, revision: Revision) {
        let mut revisions = self.lock();
        if revisions.len() >= CAPACITY && !revisions.contains_key(namespace) {
            revisions.clear();
        }
        revisions.insert(namespace.to_string(), revision);
    }

    pub(super) fn forget(&self, namespace: &str) {
        self.lock().remove(namespace);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Revision>> {
        // A panic while holding the lock cannot leave the map inconsistent: every operation
        // is a single insert, remove or clear.
        self.revisions.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_forgets_and_stays_bounded() {
        let admitted = AdmittedNamespaces::default();
        admitted.remember("a", 7);
        assert_eq!(admitted.get("a"), Some(7));
        admitted.remember("a", 9);
        assert_eq!(admitted.get("a"), Some(9));
        admitted.forget("a");
        assert_eq!(admitted.get("a"), None);
        for i in 0..CAPACITY {
            admitted.remember(&format!("ns-{i}"), 1);
        }
        admitted.remember("ns-0", 2);
        assert_eq!(
            admitted.get("ns-0"),
            Some(2),
            "a known namespace does not empty it"
        );
        admitted.remember("one-more", 3);
        assert_eq!(admitted.get("one-more"), Some(3));
        assert_eq!(admitted.get("ns-1"), None, "full: emptied, then refilled");
    }
}
