//! Custom resources: CustomResourceDefinitions turned into served resource types.
//!
//! - [`schema`]: the structural schema of one CRD version — pruning, defaulting and
//!   validation of custom objects;
//! - [`definition`]: checks and defaults for CRD objects themselves, and the
//!   [`ResourceType`](crate::resources::ResourceType)s a CRD serves.

pub mod definition;
pub mod schema;
