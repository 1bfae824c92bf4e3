//! The ClusterRole aggregation controller (kube-controller-manager's `clusterrole-aggregation`):
//! a ClusterRole with an `aggregationRule` holds the rules of every ClusterRole its selectors
//! pick (`admin`, `edit` and `view` grow with the roles labelled
//! `rbac.authorization.k8s.io/aggregate-to-admin|edit|view: "true"`).
//!
//! On every ClusterRole change it recomputes each aggregated role and writes the ones whose
//! rules differ; a role made of aggregated roles (admin from edit from view) settles within
//! as many passes as the chain is long, each pass started by the previous one's write.

use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use tokio_util::sync::CancellationToken;

use crate::authz::bootstrap::{aggregate_all, cluster_role_type};
use crate::registry::{ListOptions, Registry};
use crate::watch_cache::WatchItem;

const MANAGER: &str = "clusterrole-aggregation-controller";

pub fn spawn(registry: Arc<Registry>, shutdown: CancellationToken) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move { run(registry, shutdown).await })
}

async fn run(registry: Arc<Registry>, shutdown: CancellationToken) {
    loop {
        let watched = match cluster_role_type(&registry) {
            Ok(resource) => {
                registry
                    .watch(resource, None, &ListOptions::default(), false)
                    .await
            }
            Err(error) => Err(error),
        };
        match watched {
            Ok(mut events) => loop {
                // Coalesce a burst of changes (the initial events, a bootstrap) into one pass.
                let first = tokio::select! {
                    _ = shutdown.cancelled() => return,
                    item = events.next() => item,
                };
                match first {
                    Some(WatchItem::Error(_)) | None => break,
                    Some(_) => {}
                }
                while let Some(Some(item)) = events.next().now_or_never() {
                    if matches!(item, WatchItem::Error(_)) {
                        break;
                    }
                }
                if let Err(error) = aggregate_all(&registry, MANAGER).await {
                    tracing::warn!(error = %error.message, "ClusterRole aggregation failed; retrying");
                    tokio::select! {
                        _ = shutdown.cancelled() => return,
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    }
                    break;
                }
            },
            Err(error) => {
                tracing::warn!(error = %error.message, "cannot watch ClusterRoles to aggregate them; retrying");
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                }
            }
        }
    }
}
