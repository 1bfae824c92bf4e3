//! coordination.k8s.io/v1: Lease.

use k8s_pb::api::coordination::v1 as coordination;

use super::json::{Converted, convert};
use super::meta::object_meta;

pub(super) fn lease(lease: coordination::Lease) -> Converted {
    convert!(lease, coordination::Lease {
        metadata => value_message("metadata", object_meta),
        spec => value_message("spec", lease_spec),
    })
}

fn lease_spec(spec: coordination::LeaseSpec) -> Converted {
    convert!(spec, coordination::LeaseSpec {
        holder_identity => pointer("holderIdentity"),
        lease_duration_seconds => pointer("leaseDurationSeconds"),
        acquire_time => micro_time("acquireTime"),
        renew_time => micro_time("renewTime"),
        lease_transitions => pointer("leaseTransitions"),
        strategy => pointer("strategy"),
        preferred_holder => pointer("preferredHolder"),
    })
}
