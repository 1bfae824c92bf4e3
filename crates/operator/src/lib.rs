//! The Finale operator toolkit, on kube-rs.
pub mod backoff;
pub mod condition;
pub mod events;
pub mod finalizers;
pub mod install;
pub mod leader;
pub mod metrics;
pub mod policy;
pub mod runtime;
