//! What every client command (`explain`, `plan`, `tree`, `finalize`) starts with: the cluster
//! found as kubectl finds it ([`finale_operator::client`]), its discovery (from kubectl's
//! cache folder when a fresh copy is there: [`crate::discovery_cache`]), and TYPE/NAME
//! resolved through it.

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::{Context, bail};
use finale_apiserver::insight::api as insight;
use finale_operator::client::{Clients, Environment, load_config};
use kube::client::APIGroupDiscoveryList;

use crate::discovery_cache::DiscoveryCache;
use crate::explain::resolve::{Resolved, Served};

/// The flags that pick the cluster and the namespace, as kubectl spells them.
#[derive(clap::Args, Clone, Debug)]
pub struct ClusterArgs {
    /// The kubeconfig to use (else `$KUBECONFIG`, then `~/.kube/config`).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (else the current one).
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
    /// The object's namespace (else the context's, else `default`); ignored for cluster-scoped
    /// kinds.
    #[arg(short = 'n', long, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
    /// Where discovery is cached, as kubectl's `--cache-dir` (else `$KUBECACHEDIR`, else
    /// `~/.kube/cache`); an empty value turns the cache off.
    // A string, not a path: clap refuses an empty path, and empty means "off".
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<String>,
}

/// `--color`.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum ColorChoice {
    Auto,
    Always,
    Never,
}

impl ColorChoice {
    /// Whether stdout gets colour: `auto` means a terminal and no (non-empty) `NO_COLOR`.
    pub fn enabled(self) -> bool {
        match self {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => {
                std::io::stdout().is_terminal()
                    && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
            }
        }
    }
}

/// A connected cluster and what it serves.
pub struct Session {
    pub clients: Clients,
    served: Served,
    /// Whether `served` was read from the server by this command (not from the cache).
    served_fresh: bool,
    cache: Option<DiscoveryCache>,
    /// Where the kubeconfig came from, for messages.
    source: String,
    /// The server's URL, for messages.
    pub cluster: String,
    pub default_namespace: String,
    namespace: Option<String>,
}

/// One object named on the command line, resolved.
pub struct Target {
    pub resolved: Resolved,
    /// Empty for cluster-scoped kinds.
    pub namespace: String,
    pub name: String,
}

impl Target {
    /// The review target of this object.
    pub fn target_ref(&self) -> insight::TargetRef {
        insight::TargetRef {
            api_version: self.resolved.api_version(),
            kind: self.resolved.kind.clone(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            ..insight::TargetRef::default()
        }
    }

    /// `ConfigMap default/app` or `Namespace shop`, for messages.
    pub fn display(&self) -> String {
        if self.namespace.is_empty() {
            format!("{} {}", self.resolved.kind, self.name)
        } else {
            format!("{} {}/{}", self.resolved.kind, self.namespace, self.name)
        }
    }
}

impl Session {
    /// Loads the kubeconfig, and discovery from the cache or else the server.
    pub async fn connect(args: &ClusterArgs) -> anyhow::Result<Session> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let (config, source) = load_config(
            args.kubeconfig.as_deref(),
            args.context.as_deref(),
            &Environment::of_process(),
        )
        .await?;
        let default_namespace = config.default_namespace.clone();
        let cluster = config.cluster_url.to_string();
        let cache = DiscoveryCache::new(
            args.cache_dir.as_deref().map(std::path::Path::new),
            &cluster,
            config.root_cert.as_deref(),
        );
        let clients = Clients::new(config)?;
        let mut session = Session {
            clients,
            served: Served::default(),
            served_fresh: false,
            cache,
            source: source.to_string(),
            cluster,
            default_namespace,
            namespace: args.namespace.clone(),
        };
        match session
            .cache
            .as_ref()
            .and_then(|cache| cache.load(chrono::Utc::now()))
        {
            Some(served) => session.served = served,
            None => session.refresh().await?,
        }
        Ok(session)
    }

    /// Reads discovery from the server (once per command) and caches it.
    async fn refresh(&mut self) -> anyhow::Result<()> {
        if self.served_fresh {
            return Ok(());
        }
        let (core, named) = discover(&self.clients.requests).await.with_context(|| {
            format!(
                "cannot read the API discovery of {} (from {})",
                self.cluster, self.source
            )
        })?;
        if let Some(cache) = &self.cache {
            cache.store(&core, &named);
        }
        self.served = Served::new(core, named);
        self.served_fresh = true;
        Ok(())
    }

    /// What the server serves, as it says now (the client-side walk lists every resource,
    /// so it must not miss one a cached copy predates).
    pub async fn served_now(&mut self) -> anyhow::Result<&Served> {
        self.refresh().await?;
        Ok(&self.served)
    }

    /// Whether the cluster serves `deletion.finale.dev` (else the client computes answers).
    /// A cached "no" is checked with the server: it may have been upgraded since.
    pub async fn serves_insight(&mut self) -> anyhow::Result<bool> {
        if !self.served.serves_group(insight::GROUP) {
            self.refresh().await?;
        }
        Ok(self.served.serves_group(insight::GROUP))
    }

    /// `TYPE/NAME` (or `TYPE NAME`) resolved through discovery, in the namespace asked for. A
    /// TYPE a cached copy does not name is looked up again in fresh discovery (a CRD created
    /// since), as kubectl does.
    pub async fn target(&mut self, target: &str, name: Option<&str>) -> anyhow::Result<Target> {
        let (type_, name) = split_target(target, name)?;
        if self.served.resolve(type_).is_none() {
            self.refresh().await?;
        }
        let resolved = self.served.resolve(type_).with_context(|| {
            format!("the server doesn't have a resource type \"{type_}\" (no resource, kind or short name of that name is served)")
        })?;
        let namespace = if resolved.namespaced {
            self.namespace
                .clone()
                .unwrap_or_else(|| self.default_namespace.clone())
        } else {
            String::new()
        };
        Ok(Target {
            resolved,
            namespace,
            name: name.to_string(),
        })
    }
}

/// `TYPE/NAME` or `TYPE NAME`, never both or neither.
pub fn split_target<'a>(
    target: &'a str,
    name: Option<&'a str>,
) -> anyhow::Result<(&'a str, &'a str)> {
    let (type_, name) = match (target.split_once('/'), name) {
        (Some((type_, name)), None) => (type_, name),
        (None, Some(name)) => (target, name),
        (Some(_), Some(extra)) => bail!(
            "there is no need to specify a resource type as a separate argument when passing arguments in resource/name form (got \"{target}\" and \"{extra}\")"
        ),
        (None, None) => {
            bail!("name the object: TYPE/NAME or TYPE NAME (e.g. `finale explain configmap/app`)")
        }
    };
    if type_.is_empty() || name.is_empty() || name.contains('/') {
        bail!("\"{target}\" is not TYPE/NAME (e.g. `configmap/app`)");
    }
    Ok((type_, name))
}

/// The core and named groups, from aggregated discovery: both requests at once, since
/// every command waits for them before it can ask anything.
async fn discover(
    client: &kube::Client,
) -> anyhow::Result<(APIGroupDiscoveryList, APIGroupDiscoveryList)> {
    let (core, named) = tokio::join!(
        client.list_core_api_versions_aggregated(),
        client.list_api_groups_aggregated(),
    );
    Ok((core.context("GET /api")?, named.context("GET /apis")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_target_forms_split() {
        assert_eq!(split_target("cm/app", None).expect("slash"), ("cm", "app"));
        assert_eq!(
            split_target("cm", Some("app")).expect("two words"),
            ("cm", "app")
        );
        assert!(split_target("cm/app", Some("other")).is_err());
        assert!(split_target("cm", None).is_err());
        assert!(split_target("cm/", None).is_err());
        assert!(split_target("cm/a/b", None).is_err());
    }
}
