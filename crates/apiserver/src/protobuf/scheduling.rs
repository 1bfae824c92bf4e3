//! scheduling.k8s.io/v1: PriorityClass.

use k8s_pb::api::scheduling::v1 as scheduling;

use super::json::{Converted, convert};
use super::meta::object_meta;

pub(super) fn priority_class(class: scheduling::PriorityClass) -> Converted {
    convert!(class, scheduling::PriorityClass {
        metadata => value_message("metadata", object_meta),
        value => always("value"),
        global_default => non_zero("globalDefault"),
        description => non_zero("description"),
        preemption_policy => pointer("preemptionPolicy"),
    })
}
