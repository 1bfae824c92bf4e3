//! `kube_list.rs` once more with the server on a fresh etcd member (issue #13: the kube-rs
//! end-to-end suites run against the etcd backend too). A test binary named `…_on_etcd` makes
//! the fixtures start etcd; see `finale_e2e::test_store_is_etcd`.

#[path = "kube_list.rs"]
mod suite;
