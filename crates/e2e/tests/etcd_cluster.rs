//! The 3-member etcd fixture that the member-failure suites stand on: it elects a leader,
//! names it, and elects another when the leader is killed.

use std::time::Duration;

use finale_e2e::EtcdCluster;

#[test]
fn a_three_member_cluster_elects_a_new_leader_when_the_leader_is_killed() {
    let mut cluster = EtcdCluster::start_in_memory(3).expect("start a 3-member etcd");
    assert_eq!(cluster.endpoints().split(',').count(), 3);
    let first = cluster.leader().expect("a leader");
    cluster.members[first].stop().expect("kill the leader");
    // A quorum of two remains: they elect one of themselves.
    cluster
        .wait_healthy(Duration::from_secs(20))
        .expect("two members regain a leader");
    let second = cluster.leader().expect("a new leader");
    assert_ne!(first, second, "the killed member cannot lead");
    assert!(cluster.members[second].is_running());
}
