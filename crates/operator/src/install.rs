//! Installing an operator's CustomResourceDefinition at start-up.

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Client, ResourceExt};

/// Applies `crd` with server-side apply (so re-running is a no-op and other managers' fields
/// are kept) and waits until the API server serves it.
pub async fn install_crd(
    client: Client,
    crd: &CustomResourceDefinition,
    field_manager: &str,
) -> anyhow::Result<()> {
    let name = crd.name_any();
    let crds: Api<CustomResourceDefinition> = Api::all(client);
    crds.patch(
        &name,
        &PatchParams::apply(field_manager).force(),
        &Patch::Apply(crd),
    )
    .await
    .map_err(|e| {
        anyhow::anyhow!(
            "installing the CustomResourceDefinition {name} failed: {e} \
             (the operator needs permission to create CustomResourceDefinitions, \
             or install it beforehand and pass --skip-crd-install)"
        )
    })?;
    let established = await_condition(crds, &name, conditions::is_crd_established());
    tokio::time::timeout(Duration::from_secs(30), established)
        .await
        .map_err(|_| {
            anyhow::anyhow!("the CustomResourceDefinition {name} was not Established within 30 s")
        })?
        .map_err(|e| anyhow::anyhow!("waiting for {name} to be Established: {e}"))?;
    Ok(())
}
