//! The Finale operator toolkit, on kube-rs.
pub mod leader;
