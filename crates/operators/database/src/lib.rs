//! The Database operator.
pub mod postgres;
