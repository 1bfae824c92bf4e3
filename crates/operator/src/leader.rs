//! Leader election for operators: the shared election ([`finale_lease`], client-go's
//! algorithm) over the kube-rs client.
//!
//! See [`finale_lease`] for the guarantees (a deposed leader stops no later than the renew
//! deadline after its last successful renewal; every write is a compare-and-swap) and
//! caveats (a paused process cannot notice its deadline).

use futures::FutureExt;
use futures::future::BoxFuture;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use kube::api::{Api, PostParams};

pub use finale_lease::{LeaderError, LeaseConfig, RELEASE_TIMEOUT, Released};

/// The Lease calls over the kube-rs client, in the Lease's namespace.
#[derive(Clone)]
pub struct KubeLeases {
    api: Api<Lease>,
}

impl KubeLeases {
    pub fn new(client: Client, namespace: &str) -> KubeLeases {
        KubeLeases {
            api: Api::namespaced(client, namespace),
        }
    }
}

impl finale_lease::LeaseApi for KubeLeases {
    fn get<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Lease>, finale_lease::ApiError>> {
        async move { self.api.get_opt(name).await.map_err(Into::into) }.boxed()
    }

    fn create<'a>(
        &'a self,
        lease: &'a Lease,
    ) -> BoxFuture<'a, Result<Lease, finale_lease::ApiError>> {
        async move {
            self.api
                .create(&PostParams::default(), lease)
                .await
                .map_err(Into::into)
        }
        .boxed()
    }

    fn replace<'a>(
        &'a self,
        name: &'a str,
        lease: &'a Lease,
    ) -> BoxFuture<'a, Result<Lease, finale_lease::ApiError>> {
        async move {
            self.api
                .replace(name, &PostParams::default(), lease)
                .await
                .map_err(Into::into)
        }
        .boxed()
    }

    fn status_code(error: &finale_lease::ApiError) -> Option<u16> {
        match error.downcast_ref::<kube::Error>() {
            Some(kube::Error::Api(status)) => Some(status.code),
            _ => None,
        }
    }
}

/// An operator's elector, over the kube-rs client.
pub type LeaderElector = finale_lease::LeaderElector<KubeLeases>;
/// Leadership held by an operator.
pub type Leadership = finale_lease::Leadership<KubeLeases>;

/// An elector for `config`'s Lease, through `client`.
pub fn elector(client: Client, config: LeaseConfig) -> LeaderElector {
    let leases = KubeLeases::new(client, &config.namespace);
    finale_lease::LeaderElector::new(leases, config)
}
