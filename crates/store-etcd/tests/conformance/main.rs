//! One conformance suite for every `Store` backend: each case in `cases.rs` (and the model
//! test in `model.rs`) runs against the embedded redb engine and against a real etcd (Debian's
//! etcd-server 3.4, or `ETCD`), a single member started per test on loopback with its data on
//! /dev/shm. Kubernetes runs its storage tests the same way: one backend-neutral suite,
//! several backends.
//!
//! Tests specific to one backend stay with it: redb's options, reopen and crash behaviour in
//! `crates/store/tests`; etcd's failure handling in this crate's `failures.rs`.

mod cases;
mod harness;
mod model;

/// Each test is bounded: a hung backend fails it instead of the whole run.
const LIMIT: std::time::Duration = std::time::Duration::from_secs(120);

macro_rules! conformance {
    ($($case:ident),* $(,)?) => {
        mod redb {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let fixture = crate::harness::redb().await;
                    tokio::time::timeout(crate::LIMIT, crate::cases::$case(fixture))
                        .await
                        .expect("the case finishes in time");
                }
            )*
        }
        mod etcd {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let fixture = crate::harness::etcd().await;
                    tokio::time::timeout(crate::LIMIT, crate::cases::$case(fixture))
                        .await
                        .expect("the case finishes in time");
                }
            )*
        }
    };
}

conformance!(
    put_get_and_per_key_revisions,
    create_only_conflicts,
    compare_and_swap_on_mod_revision,
    delete_then_recreate,
    range_with_limit_and_more,
    range_at_older_revisions,
    compaction_bounds_reads_and_watches,
    watch_prev_kv_deletes_and_range_filter,
    watch_replays_then_goes_live_without_gap_or_duplicate,
    concurrent_writers_get_distinct_revisions,
    concurrent_creates_have_one_winner,
    data_survives_reopen,
    large_values_and_responses,
    write_all_commits_every_write_or_none,
    guards_fence_a_transaction_on_another_key,
);
