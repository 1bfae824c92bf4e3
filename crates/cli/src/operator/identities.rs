//! The identities of the operators inside `finale server --with-operators`: each bundled
//! operator runs as its own ServiceAccount (`finale-system/finale-<name>-operator`), bound to
//! the least-privilege roles `finale operator NAME --print-rbac` prints, never as the admin.
//!
//! The server's admin applies those objects and asks for each ServiceAccount's token through
//! the TokenRequest API, as an installer and the kubelet would; the token goes to a file that
//! kube-rs re-reads every minute, and is renewed long before it expires.
//!
//! # Guarantees
//! - A token file is replaced whole (written beside it, then renamed) and readable by its owner
//!   only.
//! - A renewal that fails is retried every [`RETRY`]; the token in use stays valid for
//!   [`TOKEN_LIFETIME`] - [`RENEW_EVERY`] after the last success.
//!
//! # Caveats
//! - Deleting an operator's ServiceAccount invalidates its token at once; the next renewal
//!   (within [`RENEW_EVERY`]) re-creates the account and issues a new one.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use finale_operator::client::Clients;
use finale_operator::rbac::{self, Placement};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::{Client, Config};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::Bundled;

/// How long each issued token is valid.
pub const TOKEN_LIFETIME: Duration = Duration::from_secs(3600);
/// How often tokens are renewed (and the RBAC objects re-applied): a third of their lifetime,
/// so two renewals in a row may fail before a token lapses.
pub const RENEW_EVERY: Duration = Duration::from_secs(1200);
/// How soon a failed renewal is tried again.
pub const RETRY: Duration = Duration::from_secs(60);

/// The field manager of the applied RBAC objects.
const FIELD_MANAGER: &str = "finale-server";

/// One operator's ServiceAccount and where its token is kept.
#[derive(Clone)]
struct Identity {
    operator: Bundled,
    service_account: String,
    token_file: PathBuf,
}

/// Gives each of `operators` its ServiceAccount, roles and a token in `token_dir`, and keeps
/// the tokens fresh until `shutdown`. Returns each operator's clients, authenticated as its
/// ServiceAccount against the server `admin` points at.
pub async fn provision(
    admin: Config,
    operators: &[Bundled],
    placement: &Placement,
    token_dir: &Path,
    shutdown: CancellationToken,
) -> anyhow::Result<Vec<(Bundled, Clients)>> {
    create_private_dir(token_dir)?;
    let admin_client = Client::try_from(admin.clone()).context("the admin's client")?;
    let identities: Vec<Identity> = operators
        .iter()
        .map(|&operator| {
            let service_account = rbac::object_name(operator.name());
            Identity {
                operator,
                token_file: token_dir.join(format!("{service_account}.token")),
                service_account,
            }
        })
        .collect();
    let mut clients = Vec::with_capacity(identities.len());
    for identity in &identities {
        renew(&admin_client, identity, placement).await?;
        let mut config = admin.clone();
        config.auth_info = kube::config::AuthInfo {
            token_file: Some(identity.token_file.display().to_string()),
            ..kube::config::AuthInfo::default()
        };
        clients.push((identity.operator, Clients::new(config)?));
        tracing::info!(
            operator = identity.operator.name(),
            service_account = %format!("{}/{}", placement.namespace, identity.service_account),
            "the operator runs as its own ServiceAccount"
        );
    }
    tokio::spawn(keep_renewing(
        admin_client,
        identities,
        placement.clone(),
        shutdown,
    ));
    Ok(clients)
}

/// Applies `identity`'s RBAC objects and writes a new token for it.
async fn renew(client: &Client, identity: &Identity, placement: &Placement) -> anyhow::Result<()> {
    let objects = rbac::manifests(
        &identity.service_account,
        &[identity.operator.permissions()],
        placement,
    )?;
    apply(client, &objects).await?;
    let token = request_token(client, &placement.namespace, &identity.service_account).await?;
    write_private(&identity.token_file, token.as_bytes())
}

async fn keep_renewing(
    client: Client,
    identities: Vec<Identity>,
    placement: Placement,
    shutdown: CancellationToken,
) {
    let mut wait = RENEW_EVERY;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
        wait = RENEW_EVERY;
        for identity in &identities {
            if let Err(error) = renew(&client, identity, &placement).await {
                tracing::warn!(
                    operator = identity.operator.name(),
                    error = format!("{error:#}"),
                    retry_in = ?RETRY,
                    "cannot renew the operator's token"
                );
                wait = RETRY;
            }
        }
    }
}

/// Server-side applies `objects` (each with `apiVersion`, `kind` and `metadata.name`).
async fn apply(client: &Client, objects: &[Value]) -> anyhow::Result<()> {
    let params = PatchParams::apply(FIELD_MANAGER).force();
    for object in objects {
        let field = |pointer: &str| {
            object
                .pointer(pointer)
                .and_then(Value::as_str)
                .with_context(|| format!("an RBAC object without {pointer}: {object}"))
        };
        let (api_version, kind, name) = (
            field("/apiVersion")?,
            field("/kind")?,
            field("/metadata/name")?,
        );
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
        let api: Api<DynamicObject> = match field("/metadata/namespace") {
            Ok(namespace) => Api::namespaced_with(client.clone(), namespace, &resource),
            Err(_) => Api::all_with(client.clone(), &resource),
        };
        api.patch(name, &params, &Patch::Apply(object))
            .await
            .with_context(|| format!("applying {kind} {name}"))?;
    }
    Ok(())
}

/// A token of `namespace/service_account` for the server's own audiences.
async fn request_token(
    client: &Client,
    namespace: &str,
    service_account: &str,
) -> anyhow::Result<String> {
    let request = TokenRequest {
        spec: TokenRequestSpec {
            expiration_seconds: Some(TOKEN_LIFETIME.as_secs() as i64),
            ..TokenRequestSpec::default()
        },
        ..TokenRequest::default()
    };
    let issued = Api::<ServiceAccount>::namespaced(client.clone(), namespace)
        .create_token_request(service_account, &PostParams::default(), &request)
        .await
        .with_context(|| format!("requesting a token for {namespace}/{service_account}"))?;
    issued
        .status
        .map(|status| status.token)
        .filter(|token| !token.is_empty())
        .with_context(|| {
            format!("the TokenRequest for {namespace}/{service_account} returned no token")
        })
}

fn create_private_dir(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("creating {}", dir.display()))
}

/// Replaces `path` with `contents`, owner-readable only, whole or not at all.
fn write_private(path: &Path, contents: &[u8]) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let partial = path.with_extension("token.partial");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&partial)
        .with_context(|| format!("writing {}", partial.display()))?;
    file.write_all(contents)
        .and_then(|()| file.sync_all())
        .with_context(|| format!("writing {}", partial.display()))?;
    std::fs::rename(&partial, path)
        .with_context(|| format!("replacing {} with {}", path.display(), partial.display()))
}
