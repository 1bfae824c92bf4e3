//! Controllers that run inside the server and act through the registry, never around it
//! (design decision 5): same rules as HTTP clients, without the HTTP cost.
//!
//! All but the CRD serving loop run on one replica, under the controllers' Lease
//! ([`leadership`]): the garbage collector, the namespace, CRD and ClusterRole aggregation
//! controllers, the [`job`] controller, the [`scheduler`], the [`node_lifecycle`]
//! controller and the three [`certificates`] controllers (signing, approving, cleaning).

pub mod certificates;
pub mod clusterrole_aggregation;
pub mod crd;
pub mod events;
pub mod gc;
pub mod job;
pub mod leadership;
pub mod namespace;
pub mod node_lifecycle;
pub mod scheduler;

use std::time::Duration;

use tokio::sync::mpsc;

/// Puts `name` back on a controller's work queue after `delay` (at once when it is zero).
/// The timer holds only the queue, so it never keeps the registry alive past shutdown.
fn enqueue_after(queue: &mpsc::UnboundedSender<String>, name: String, delay: Duration) {
    if delay.is_zero() {
        let _ = queue.send(name);
        return;
    }
    let queue = queue.clone();
    tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        let _ = queue.send(name);
    });
}
