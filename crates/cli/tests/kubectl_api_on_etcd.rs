//! `kubectl_api.rs` once more with every server on a fresh etcd member (issue #13: the kubectl
//! end-to-end suites run against the etcd backend too). A test binary named `…_on_etcd` makes
//! the fixtures start etcd; see `finale_e2e::test_store_is_etcd`.

#[path = "kubectl_api.rs"]
mod suite;
