//! Rules of built-in kinds that are more than table data: the defaulting and validation
//! hooks that `resources.rs` names for a kind, and the names (labels, finalizers) that a
//! kind's controller and the API server share. Below the registry and the controllers, so
//! both can use them.

pub mod certificates;
pub mod event;
pub mod hpa;
pub mod job;
