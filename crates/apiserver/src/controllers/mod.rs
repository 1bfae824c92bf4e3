//! Controllers that run inside the server and act through the registry, never around it
//! (design decision 5): same rules as HTTP clients, without the HTTP cost.

pub mod crd;
pub mod events;
pub mod gc;
pub mod namespace;
