//! `controllers_fence.rs` once more with the server on a fresh etcd member: the fence is a
//! compare in the same etcd `Txn` as the write. A test binary named `…_on_etcd` makes the
//! fixtures start etcd; see `finale_e2e::test_store_is_etcd`.

#[path = "controllers_fence.rs"]
mod suite;
