//! Custom resources: CustomResourceDefinitions turned into served resource types.
//!
//! - [`schema`]: the structural schema of one CRD version — pruning, defaulting and
//!   validation of custom objects;
//! - [`cel`]: the CEL rules (`x-kubernetes-validations`) of one CRD version, compiled with its
//!   schema and run on every write of a custom object;
//! - [`conversion`]: conversion webhooks (`spec.conversion.strategy: Webhook`), called
//!   when an object is needed in another version than the one it is in;
//! - [`definition`]: checks and defaults for CRD objects themselves, and the
//!   [`ResourceType`](crate::resources::ResourceType)s a CRD serves.

pub mod cel;
pub mod conversion;
pub mod definition;
pub mod schema;
