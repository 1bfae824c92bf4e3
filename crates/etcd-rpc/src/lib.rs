//! etcd v3's gRPC API as Rust types, and a tonic client for it: what Finale's benchmark
//! baseline and its etcd store backend talk to etcd with.
//!
//! - [`etcdserverpb`]: the KV service (`Range`, `Put`, `DeleteRange`, `Txn`, `Compact`),
//!   `Watch`, `Lease` (`LeaseGrant`, `LeaseRevoke`, `LeaseKeepAlive`) and `Maintenance.Status`,
//!   with their request and response messages and the generated client stubs.
//! - [`mvccpb`]: the records they carry (`KeyValue`, `Event`).
//! - [`Client`]: one HTTP/2 channel to an etcd endpoint, handing out those stubs with the
//!   message size limits of [`ConnectOptions`] applied.
//! - [`prefix_range_end`] and [`is_compacted`]: the two etcd conventions every caller needs.
//!
//! The types come from our own description of the wire API (`proto/`), not from etcd's files:
//! only the services and fields Finale uses, under etcd's names and field numbers.
//!
//! # Why the generated code is checked in
//! Building this crate runs no protobuf compiler at all: `src/generated/` holds the output of
//! prost and tonic's generator, and `tests/bindings.rs` regenerates it with protox (a pure-Rust
//! protobuf compiler) and fails if anything differs, so the protos and the Rust code cannot
//! drift apart. The alternative, a build script running protox, would also need no `protoc`,
//! but every clean build (including `cargo run --release -p finale -- server` once the server
//! talks to etcd) would compile protox, prost-build and tonic-build and run them; this way
//! only the test does, and the generated API stays readable in the repository.
//!
//! # Guarantees
//! - No build-time dependency on `protoc` or any other system tool.
//! - Responses up to 2 GiB are accepted by default (etcd's own Go client does the same), so
//!   a large range or a burst of watch events does not fail at tonic's 4 MiB default. The
//!   limits are settable in [`ConnectOptions`].
//!
//! # Caveats
//! - A [`Client`] talks to one endpoint over plain HTTP (loopback tests and benchmarks). It
//!   does not balance over several members, retry, or speak TLS; a caller that needs those
//!   builds its own channel and wraps it with [`Client::from_channel`].
//! - gRPC status codes alone are ambiguous: etcd reports "compacted", "future revision" and a
//!   too-large response all as `OutOfRange`. Use [`is_compacted`], which also checks the
//!   message.

mod client;

pub use client::{Client, ConnectError, ConnectOptions, is_compacted, prefix_range_end};
/// The tonic this crate's stubs are built on, for `Status`, `Code` and `Streaming`.
pub use tonic;

/// Records of etcd's multi-version store: a key at a revision, and a watch event.
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod mvccpb {
    include!("generated/mvccpb.rs");
}

/// etcd's gRPC services (the subset Finale uses), their messages and client stubs.
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod etcdserverpb {
    include!("generated/etcdserverpb.rs");
}
