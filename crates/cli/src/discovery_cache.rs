//! The API discovery a client command needs, kept on disk between invocations as kubectl
//! keeps its own: under `--cache-dir` (else `$KUBECACHEDIR`, else `~/.kube/cache`), in
//! `discovery/<host>_<port>/`, for six hours.
//!
//! Every `finale explain`, `plan`, `tree` and `finalize` needs the server's aggregated
//! discovery (`/api` and `/apis`) to turn the TYPE a person typed into a resource, and to know
//! whether the server answers `DeletionReview`s. With the whole Kubernetes API served, those
//! two documents are most of what a command reads and parses, so a command that found them
//! here makes one request (the review) instead of three.
//!
//! # Guarantees
//! - A cached copy is used only for the server it was read from: the file records the
//!   server's URL and a SHA-256 of the CA bundle the kubeconfig trusts for it, so a cluster
//!   re-created at the same address (kind, minikube, a test server on a reused port) is never
//!   answered from its predecessor's copy.
//! - A miss is never final: a TYPE the copy does not name, or a copy that says the server does
//!   not serve `deletion.finale.dev`, is checked against fresh discovery before the command
//!   gives up or computes in the client ([`Discovery::refresh`]).
//! - Files are written whole (a temporary file, then a rename) and readable by their owner
//!   only; a file that cannot be read or parsed is ignored and replaced.
//!
//! # Caveats
//! - Within the six hours, a resource whose scope or preferred version changed is resolved as
//!   it was (kubectl has the same window); `--cache-dir ''` turns the cache off.
//! - The file is Finale's own (`finale-aggregated.json`), beside kubectl's files in the same
//!   folder; kubectl never reads it.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use chrono::{DateTime, Utc};
use kube::client::APIGroupDiscoveryList;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::explain::resolve::Served;

/// How long a copy is trusted without asking the server: kubectl's discovery TTL.
pub const TTL: Duration = Duration::from_secs(6 * 60 * 60);

/// The file, in the server's folder.
const FILE_NAME: &str = "finale-aggregated.json";

/// What is stored: the two documents and whose they are. Borrowed when written, owned when
/// read back.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Cached<'a> {
    server: Cow<'a, str>,
    ca_sha256: Cow<'a, str>,
    /// RFC 3339.
    fetched_at: String,
    core: Cow<'a, APIGroupDiscoveryList>,
    named: Cow<'a, APIGroupDiscoveryList>,
}

/// Where one server's copy lives, and whose it must be.
pub struct DiscoveryCache {
    file: PathBuf,
    server: String,
    ca_sha256: String,
}

impl DiscoveryCache {
    /// The cache for `server` (its URL) trusted through `root_certs` (DER), under
    /// `cache_dir`; `None` when caching is off (an empty `--cache-dir`, or no home).
    pub fn new(
        cache_dir: Option<&Path>,
        server: &str,
        root_certs: Option<&[Vec<u8>]>,
    ) -> Option<DiscoveryCache> {
        let base = match cache_dir {
            Some(dir) if dir.as_os_str().is_empty() => return None,
            Some(dir) => dir.to_path_buf(),
            None => default_cache_dir()?,
        };
        let mut hasher = Sha256::new();
        for cert in root_certs.unwrap_or_default() {
            hasher.update((cert.len() as u64).to_be_bytes());
            hasher.update(cert);
        }
        Some(DiscoveryCache {
            file: base
                .join("discovery")
                .join(folder_of(server))
                .join(FILE_NAME),
            server: server.to_string(),
            ca_sha256: hex(&hasher.finalize()),
        })
    }

    /// The copy, if it is this server's and younger than [`TTL`].
    pub fn load(&self, now: DateTime<Utc>) -> Option<Served> {
        let bytes = std::fs::read(&self.file).ok()?;
        let cached: Cached = match serde_json::from_slice(&bytes) {
            Ok(cached) => cached,
            Err(error) => {
                tracing::debug!(file = %self.file.display(), %error, "ignoring an unreadable discovery cache");
                return None;
            }
        };
        let fetched_at = DateTime::parse_from_rfc3339(&cached.fetched_at).ok()?;
        let age = now.signed_duration_since(fetched_at);
        let fresh = age >= chrono::TimeDelta::zero() && age.to_std().is_ok_and(|age| age < TTL);
        (fresh && cached.server == self.server && cached.ca_sha256 == self.ca_sha256)
            .then(|| Served::new(cached.core.into_owned(), cached.named.into_owned()))
    }

    /// Stores a fresh copy; a failure is only logged (the command has its answer anyway).
    pub fn store(&self, core: &APIGroupDiscoveryList, named: &APIGroupDiscoveryList) {
        if let Err(error) = self.try_store(core, named) {
            tracing::debug!(file = %self.file.display(), error = format!("{error:#}"), "cannot write the discovery cache");
        }
    }

    fn try_store(
        &self,
        core: &APIGroupDiscoveryList,
        named: &APIGroupDiscoveryList,
    ) -> anyhow::Result<()> {
        let folder = self.file.parent().context("the cache file has no folder")?;
        std::fs::create_dir_all(folder).with_context(|| format!("create {}", folder.display()))?;
        let bytes = serde_json::to_vec(&Cached {
            server: Cow::Borrowed(&self.server),
            ca_sha256: Cow::Borrowed(&self.ca_sha256),
            fetched_at: Utc::now().to_rfc3339(),
            core: Cow::Borrowed(core),
            named: Cow::Borrowed(named),
        })?;
        let mut file = tempfile::NamedTempFile::new_in(folder)
            .with_context(|| format!("create a temporary file in {}", folder.display()))?;
        std::io::Write::write_all(&mut file, &bytes).context("write the copy")?;
        file.persist(&self.file)
            .with_context(|| format!("rename onto {}", self.file.display()))?;
        Ok(())
    }
}

/// `--cache-dir`'s default as kubectl has it: `$KUBECACHEDIR`, else `~/.kube/cache`.
fn default_cache_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("KUBECACHEDIR").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir));
    }
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty())?;
    Some(PathBuf::from(home).join(".kube").join("cache"))
}

/// The server's folder as kubectl names it: the URL without its scheme, every character but
/// letters, digits, `.` and `/` turned into `_`, and `/` too (one folder per server).
fn folder_of(server: &str) -> String {
    let host = server
        .strip_prefix("https://")
        .or_else(|| server.strip_prefix("http://"))
        .unwrap_or(server);
    host.trim_end_matches('/')
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folders_are_named_as_kubectl_names_them() {
        assert_eq!(folder_of("https://127.0.0.1:6443/"), "127.0.0.1_6443");
        assert_eq!(folder_of("https://[::1]:6443"), "___1__6443");
        assert_eq!(
            folder_of("https://example.com:443/prefix"),
            "example.com_443_prefix"
        );
    }

    #[test]
    fn an_empty_cache_dir_turns_the_cache_off() {
        assert!(DiscoveryCache::new(Some(Path::new("")), "https://a:1", None).is_none());
        let dir = DiscoveryCache::new(Some(Path::new("/c")), "https://a:1", None)
            .expect("a cache under /c");
        assert_eq!(
            dir.file,
            Path::new("/c/discovery/a_1/finale-aggregated.json")
        );
    }

    #[test]
    fn a_copy_is_used_only_for_its_server_and_ca_within_the_ttl() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let ca = vec![b"ca one".to_vec()];
        let cache = DiscoveryCache::new(Some(dir.path()), "https://a:1", Some(&ca)).expect("cache");
        let empty = APIGroupDiscoveryList::default();
        cache.store(&empty, &empty);
        let now = Utc::now();
        assert!(
            cache.load(now).is_some(),
            "a fresh copy of this server is used"
        );
        assert!(
            cache.load(now + chrono::TimeDelta::hours(7)).is_none(),
            "expired"
        );
        assert!(
            cache.load(now - chrono::TimeDelta::hours(1)).is_none(),
            "from the future"
        );
        let other_ca = vec![b"ca two".to_vec()];
        let other =
            DiscoveryCache::new(Some(dir.path()), "https://a:1", Some(&other_ca)).expect("cache");
        assert!(other.load(now).is_none(), "another CA at the same address");
        std::fs::write(&cache.file, b"{not json").expect("corrupt the copy");
        assert!(cache.load(now).is_none(), "an unreadable copy is ignored");
    }
}
