//! The Kubernetes clients an operator uses: found the way kubectl finds its cluster, and with
//! every call bounded in time.
//!
//! # Where the configuration comes from
//! kubectl's precedence, nothing else:
//! 1. an explicit kubeconfig (`--kubeconfig`), which must exist;
//! 2. else `$KUBECONFIG`, a list of files separated by `:`; files that do not exist are
//!    skipped, the rest are merged as kubectl merges them (the first file to set a value or a
//!    named cluster, user or context wins; `current-context` from the first file that sets it);
//! 3. else `~/.kube/config`, if it exists;
//! 4. else the in-cluster service account (`KUBERNETES_SERVICE_HOST` and the mounted token).
//!
//! A local `finale server`'s `finale-data/kubeconfig` is deliberately *not* a fallback: a file
//! picked up from the working directory would silently point an operator at another cluster
//! than the one kubectl uses. The server prints the `export KUBECONFIG=…` line to use instead.
//!
//! # Timeouts
//! kube-client sets no read timeout by default, so a request to an API server that stopped
//! answering (a dead link without a reset, a stalled proxy) never returns. [`Clients`] holds two
//! clients on one configuration:
//! - `requests`, for every ordinary call (get, list, create, patch, delete): connect, write and
//!   read timeouts ([`Timeouts`]). The read timeout counts from when the request is written
//!   (`reset_reader_on_write`), not from when a pooled connection went idle.
//! - `watches`, for watch streams and the lists that start them: the same connect and write
//!   timeouts, and a read timeout of 300 s. A watch is idle for as long as nothing changes, so a
//!   read timeout must be longer than a watch lives: kube-runtime's watcher asks the server to
//!   end each watch after 290 s, and itself drops a watch that delivered nothing for 295 s
//!   (then lists and watches again). 300 s never cuts a healthy watch, and still bounds a list
//!   or a watch whose server has vanished. (A `watcher::Config::timeout` above 295 s would
//!   need a longer one.)
//!
//! Leader election does not rely on these: it bounds each Lease call by what is left of its
//! renew deadline ([`crate::leader`]).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

/// Bounds on each call of the `requests` client.
#[derive(Clone, Copy, Debug)]
pub struct Timeouts {
    /// Establishing the connection, TLS handshake included.
    pub connect: Duration,
    /// Waiting for the response once the request is written (between reads of the body).
    pub read: Duration,
    /// Writing the request.
    pub write: Duration,
    /// Waiting for the next bytes of a watch (or of the list before it): longer than a
    /// watch lives (see the module documentation).
    pub watch_read: Duration,
}

impl Default for Timeouts {
    /// 10 s to connect, 30 s to answer, 30 s to send: generous for an API server, which
    /// answers ordinary calls in milliseconds and ends its own requests after 60 s; 300 s
    /// between the bytes of a watch.
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(10),
            read: Duration::from_secs(30),
            write: Duration::from_secs(30),
            watch_read: Duration::from_secs(300),
        }
    }
}

/// The two clients of an operator; see the module documentation.
#[derive(Clone)]
pub struct Clients {
    /// Ordinary calls, each bounded by [`Timeouts`].
    pub requests: Client,
    /// Watch streams and their lists: a read timeout longer than a watch lives.
    pub watches: Client,
}

impl Clients {
    /// Clients for `config` with the default [`Timeouts`].
    pub fn new(config: Config) -> Result<Clients, ClientError> {
        Self::with_timeouts(config, Timeouts::default())
    }

    pub fn with_timeouts(config: Config, timeouts: Timeouts) -> Result<Clients, ClientError> {
        let mut requests = config.clone();
        requests.connect_timeout = Some(timeouts.connect);
        requests.read_timeout = Some(timeouts.read);
        requests.write_timeout = Some(timeouts.write);
        requests.reset_reader_on_write = true;
        let mut watches = config;
        watches.connect_timeout = Some(timeouts.connect);
        watches.read_timeout = Some(timeouts.watch_read);
        watches.write_timeout = Some(timeouts.write);
        // Else the time a pooled connection sat idle (up to 90 s) would count against it.
        watches.reset_reader_on_write = true;
        Ok(Clients {
            requests: Client::try_from(requests).map_err(ClientError::Build)?,
            watches: Client::try_from(watches).map_err(ClientError::Build)?,
        })
    }
}

/// Where a configuration came from, for the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// `--kubeconfig`.
    Explicit(PathBuf),
    /// The files of `$KUBECONFIG` that exist, in merge order.
    Env(Vec<PathBuf>),
    /// `~/.kube/config`.
    Home(PathBuf),
    InCluster,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Explicit(path) => write!(f, "--kubeconfig {}", path.display()),
            Source::Env(paths) => {
                let paths: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
                write!(f, "$KUBECONFIG ({})", paths.join(":"))
            }
            Source::Home(path) => write!(f, "{}", path.display()),
            Source::InCluster => write!(f, "the in-cluster service account"),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot read the kubeconfig {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("the kubeconfig from {source_name} is not usable: {source}")]
    Unusable {
        source_name: String,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("the in-cluster configuration is not usable: {0}")]
    InCluster(#[source] kube::config::InClusterError),
    #[error(
        "no Kubernetes API configured{missing}: pass --kubeconfig, set $KUBECONFIG, or create ~/.kube/config (a local `finale server` prints the `export KUBECONFIG=…` line to use)"
    )]
    NothingFound { missing: String },
    #[error("cannot build a Kubernetes client: {0}")]
    Build(#[source] kube::Error),
}

/// What the search looks at besides the flag: the process environment, or a test's.
#[derive(Clone, Debug, Default)]
pub struct Environment {
    /// `$KUBECONFIG`.
    pub kubeconfig: Option<OsString>,
    /// `$HOME`.
    pub home: Option<PathBuf>,
    /// Whether `KUBERNETES_SERVICE_HOST` and `KUBERNETES_SERVICE_PORT` are set.
    pub in_cluster: bool,
}

impl Environment {
    pub fn of_process() -> Environment {
        Environment {
            kubeconfig: std::env::var_os("KUBECONFIG"),
            home: std::env::var_os("HOME").map(PathBuf::from),
            in_cluster: std::env::var_os("KUBERNETES_SERVICE_HOST").is_some()
                && std::env::var_os("KUBERNETES_SERVICE_PORT").is_some(),
        }
    }
}

/// What the search chose, before it is turned into a [`Config`].
#[derive(Debug)]
enum Found {
    Kubeconfig(Box<Kubeconfig>, Source),
    InCluster,
}

fn read(path: &Path) -> Result<Kubeconfig, ClientError> {
    Kubeconfig::read_from(path).map_err(|source| ClientError::Read {
        path: path.to_path_buf(),
        source,
    })
}

fn find(explicit: Option<&Path>, environment: &Environment) -> Result<Found, ClientError> {
    if let Some(path) = explicit {
        return Ok(Found::Kubeconfig(
            Box::new(read(path)?),
            Source::Explicit(path.to_path_buf()),
        ));
    }
    let mut missing = Vec::new();
    if let Some(list) = environment.kubeconfig.as_ref() {
        let paths: Vec<PathBuf> = std::env::split_paths(list)
            .filter(|p| !p.as_os_str().is_empty())
            .collect();
        if !paths.is_empty() {
            let mut merged: Option<Kubeconfig> = None;
            let mut used = Vec::new();
            for path in paths {
                if !path.exists() {
                    missing.push(path);
                    continue;
                }
                let next = read(&path)?;
                merged = Some(match merged {
                    None => next,
                    Some(merged) => merged.merge(next).map_err(|source| ClientError::Unusable {
                        source_name: format!("$KUBECONFIG ({})", path.display()),
                        source,
                    })?,
                });
                used.push(path);
            }
            // With $KUBECONFIG set, kubectl never reads ~/.kube/config, even when none of the
            // listed files exist.
            return match merged {
                Some(merged) => Ok(Found::Kubeconfig(Box::new(merged), Source::Env(used))),
                None if environment.in_cluster => Ok(Found::InCluster),
                None => Err(nothing_found(&missing)),
            };
        }
    }
    if let Some(home) = environment.home.as_ref() {
        let path = home.join(".kube").join("config");
        if path.exists() {
            return Ok(Found::Kubeconfig(
                Box::new(read(&path)?),
                Source::Home(path),
            ));
        }
        missing.push(path);
    }
    if environment.in_cluster {
        return Ok(Found::InCluster);
    }
    Err(nothing_found(&missing))
}

fn nothing_found(missing: &[PathBuf]) -> ClientError {
    let missing = if missing.is_empty() {
        String::new()
    } else {
        let paths: Vec<String> = missing.iter().map(|p| p.display().to_string()).collect();
        format!(" (not found: {})", paths.join(", "))
    };
    ClientError::NothingFound { missing }
}

/// The client configuration kubectl would use, with `context` instead of the current one if
/// given; and where it came from.
pub async fn load_config(
    explicit: Option<&Path>,
    context: Option<&str>,
    environment: &Environment,
) -> Result<(Config, Source), ClientError> {
    let options = KubeConfigOptions {
        context: context.map(str::to_string),
        ..KubeConfigOptions::default()
    };
    match find(explicit, environment)? {
        Found::Kubeconfig(kubeconfig, source) => {
            let config = Config::from_custom_kubeconfig(*kubeconfig, &options)
                .await
                .map_err(|e| ClientError::Unusable {
                    source_name: source.to_string(),
                    source: e,
                })?;
            Ok((config, source))
        }
        Found::InCluster => Ok((
            Config::incluster().map_err(ClientError::InCluster)?,
            Source::InCluster,
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kubeconfig whose only context points at `server`.
    fn kubeconfig(dir: &Path, file: &str, context: &str, server: &str) -> PathBuf {
        let path = dir.join(file);
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: {context}\n  cluster:\n    server: {server}\n\
                 users:\n- name: {context}\n  user:\n    token: t\ncontexts:\n- name: {context}\n  context:\n    cluster: {context}\n    user: {context}\n\
                 current-context: {context}\n"
            ),
        )
        .expect("write a kubeconfig");
        path
    }

    async fn server_of(
        explicit: Option<&Path>,
        environment: &Environment,
    ) -> Result<(String, Source), ClientError> {
        let (config, source) = load_config(explicit, None, environment).await?;
        Ok((config.cluster_url.to_string(), source))
    }

    #[tokio::test]
    async fn precedence_is_kubectls() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let dir = tempfile::tempdir().expect("tempdir");
        let home = dir.path().join("home");
        std::fs::create_dir_all(home.join(".kube")).expect("mkdir");
        let in_home = kubeconfig(&home.join(".kube"), "config", "home", "https://home:1");
        let flag = kubeconfig(dir.path(), "flag", "flag", "https://flag:1");
        let first = kubeconfig(dir.path(), "first", "first", "https://first:1");
        let second = kubeconfig(dir.path(), "second", "second", "https://second:1");
        let missing = dir.path().join("missing");
        let list = std::env::join_paths([&missing, &first, &second]).expect("join");
        let environment = Environment {
            kubeconfig: Some(list),
            home: Some(home.clone()),
            in_cluster: false,
        };

        // The flag beats everything.
        let (server, source) = server_of(Some(&flag), &environment).await.expect("flag");
        assert_eq!(server, "https://flag:1/");
        assert_eq!(source, Source::Explicit(flag.clone()));
        // Then $KUBECONFIG: missing files skipped, the first file's current-context wins.
        let (server, source) = server_of(None, &environment).await.expect("env");
        assert_eq!(server, "https://first:1/");
        assert_eq!(source, Source::Env(vec![first.clone(), second.clone()]));
        // Merged: the second file's context is there too.
        let (config, _) = load_config(None, Some("second"), &environment)
            .await
            .expect("the second file's context");
        assert_eq!(config.cluster_url.to_string(), "https://second:1/");
        // Then ~/.kube/config.
        let without_env = Environment {
            kubeconfig: None,
            ..environment.clone()
        };
        let (server, source) = server_of(None, &without_env).await.expect("home");
        assert_eq!(server, "https://home:1/");
        assert_eq!(source, Source::Home(in_home.clone()));
        // An empty $KUBECONFIG counts as unset.
        let empty_env = Environment {
            kubeconfig: Some(OsString::new()),
            ..environment.clone()
        };
        assert_eq!(
            server_of(None, &empty_env).await.expect("home").0,
            "https://home:1/"
        );
        // $KUBECONFIG set but naming no existing file: not ~/.kube/config (kubectl's rule).
        let only_missing = Environment {
            kubeconfig: Some(missing.clone().into_os_string()),
            ..environment.clone()
        };
        let error = server_of(None, &only_missing).await.expect_err("nothing");
        assert!(
            error.to_string().contains(&missing.display().to_string()),
            "{error}"
        );
        // A missing explicit file is an error, not a fallback.
        let error = server_of(Some(&missing), &environment)
            .await
            .expect_err("missing flag file");
        assert!(matches!(error, ClientError::Read { .. }), "{error}");
        // Nothing at all: the message says what to do.
        let nothing = Environment {
            kubeconfig: None,
            home: Some(dir.path().join("empty-home")),
            in_cluster: false,
        };
        let error = server_of(None, &nothing).await.expect_err("nothing");
        assert!(error.to_string().contains("--kubeconfig"), "{error}");
    }
}
