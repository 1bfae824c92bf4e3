//! A Kubernetes-compatible API server.
//!
//! Layers, from the wire inwards:
//! - [`http`]: routes, authentication, content negotiation, `Status` errors, watch streaming;
//! - [`registry`]: the object lifecycle, written once for every kind;
//! - [`watch_cache`]: the store's event stream, decoded once and fanned out to watchers;
//! - `finale_store`: revisioned key-value storage.
//!
//! [`server`] wires them together with the PKI ([`pki`]), authentication ([`authn`]) and the
//! TLS listener.

pub mod admission;
pub mod authn;
pub mod authz;
pub mod cel;
pub mod controllers;
pub mod crd;
pub mod deletion;
pub mod discovery;
pub mod field_validation;
pub mod http;
pub mod insight;
pub mod kinds;
pub mod metrics;
pub mod node_client;
pub mod object;
pub mod openapi;
pub mod patch;
pub mod pki;
pub mod protobuf;
pub mod query;
pub mod registry;
pub mod resources;
pub mod scale;
pub mod selectors;
pub mod server;
pub mod status;
pub mod taints;
pub mod validation;
pub mod watch_cache;
pub mod webhook_client;
