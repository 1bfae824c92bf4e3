//! `/healthz`, `/livez` and `/readyz`: kube-apiserver's health endpoints, with named checks.
//!
//! | check | in | fails when |
//! |---|---|---|
//! | `ping` | all | never (the process answers) |
//! | `store` | all | the store is closed, or a read fails or takes over 2 s |
//! | `etcd` | `/readyz`, with `--etcd-servers` only | a linearizable read of `<prefix>/health` fails or takes over 2 s (no member answers, or etcd has no quorum) |
//! | `store-writable` | `/readyz` | the store refuses writes: a write batch failed (e.g. its disk is full) and the store has not recovered yet; it retries by itself with backoff and passes again once its files accept writes |
//! | `controllers` | `/readyz` | an in-process controller (CRD, namespace, garbage collector) has stopped |
//! | `shutdown` | `/readyz` | the server is shutting down |
//!
//! `store` plays upstream's `etcd` check: it is part of liveness because a store that cannot
//! even be read needs the restart that reopens it. `/healthz` is upstream's deprecated
//! endpoint with the liveness checks.
//!
//! The text format is upstream's (`k8s.io/apiserver/pkg/server/healthz`): `ok` on success;
//! with `?verbose`, one `[+]<name> ok` line per check and `<endpoint> check passed`; on
//! failure, always verbose, status 500, the failing checks as `[-]<name> failed: reason
//! withheld` and `<endpoint> check failed`. `?exclude=<name>` (repeatable) skips a check
//! (`[+]<name> excluded: ok`), and names that match no check are reported in a `warn:` line.
//! `/<endpoint>/<name>` runs one check and shows its reason: `internal server error:
//! <reason>` with 500. The endpoints need no credentials; reasons are logged at `warn`.
//!
//! The same checks judge the components `componentstatuses` lists ([`components`]).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, Request, State};
use axum::response::{IntoResponse, Response};
use finale_store::{Store, StoreHealth};
use http::{HeaderValue, StatusCode, header};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::AppState;

/// How long the `store` check waits for its read (upstream's `--etcd-healthcheck-timeout`).
const STORE_CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// A key no object lives under, read by the `store` check.
const PROBE_KEY: &[u8] = b"/finale/health-probe";

/// The in-process controllers, by name, so that readiness can tell whether they all run.
#[derive(Default)]
pub struct Controllers {
    tasks: Mutex<Vec<(&'static str, JoinHandle<()>)>>,
    /// The controllers of the current leadership term (empty on a standby replica); their
    /// tasks belong to the leader-election task, which waits for them.
    term: Mutex<Vec<(&'static str, tokio::task::AbortHandle)>>,
}

impl Controllers {
    /// The controllers now running under this replica's leadership; `[]` when it ends.
    pub fn set_term(&self, term: Vec<(&'static str, tokio::task::AbortHandle)>) {
        *self
            .term
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = term;
    }

    pub fn add(&self, name: &'static str, task: JoinHandle<()>) {
        self.lock().push((name, task));
    }

    /// The controllers whose task has ended (returned or panicked).
    pub fn stopped(&self) -> Vec<&'static str> {
        let mut stopped: Vec<&'static str> = self
            .lock()
            .iter()
            .filter(|(_, task)| task.is_finished())
            .map(|(name, _)| *name)
            .collect();
        let term = self
            .term
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        stopped.extend(
            term.iter()
                .filter(|(_, task)| task.is_finished())
                .map(|(name, _)| *name),
        );
        stopped
    }

    /// Hands the tasks over, for shutdown to wait on.
    pub fn take(&self) -> Vec<(&'static str, JoinHandle<()>)> {
        std::mem::take(&mut *self.lock())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(&'static str, JoinHandle<()>)>> {
        self.tasks
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// What the checks look at.
pub struct Health {
    pub store: Arc<dyn Store>,
    /// The etcd backend, when the server runs on one (`--etcd-servers`).
    pub etcd: Option<Arc<finale_store_etcd::EtcdStore>>,
    pub controllers: Arc<Controllers>,
    pub shutdown: CancellationToken,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Check {
    Ping,
    Store,
    Etcd,
    StoreWritable,
    Controllers,
    Shutdown,
}

impl Check {
    fn name(self) -> &'static str {
        match self {
            Check::Ping => "ping",
            Check::Store => "store",
            Check::Etcd => "etcd",
            Check::StoreWritable => "store-writable",
            Check::Controllers => "controllers",
            Check::Shutdown => "shutdown",
        }
    }

    /// Whether the check exists on this server (`etcd` only with an etcd backend).
    fn applies(self, health: &Health) -> bool {
        self != Check::Etcd || health.etcd.is_some()
    }

    async fn run(self, health: &Health) -> Result<(), String> {
        match self {
            Check::Ping => Ok(()),
            Check::Etcd => match &health.etcd {
                Some(etcd) => etcd.check_health(STORE_CHECK_TIMEOUT).await,
                None => Ok(()),
            },
            Check::Store => {
                if health.store.health() == StoreHealth::Closed {
                    return Err("the store is closed".into());
                }
                match tokio::time::timeout(STORE_CHECK_TIMEOUT, health.store.get(PROBE_KEY)).await {
                    Ok(Ok(_)) => Ok(()),
                    Ok(Err(error)) => Err(format!("reading from the store failed: {error}")),
                    Err(_) => Err(format!(
                        "reading from the store took longer than {STORE_CHECK_TIMEOUT:?}"
                    )),
                }
            }
            Check::StoreWritable => match health.store.health() {
                StoreHealth::Serving => Ok(()),
                StoreHealth::RefusingWrites { reason } => {
                    Err(format!("the store refuses writes: {reason}"))
                }
                StoreHealth::Closed => Err("the store is closed".into()),
            },
            Check::Controllers => match health.controllers.stopped().as_slice() {
                [] => Ok(()),
                stopped => Err(format!(
                    "in-process controllers stopped: {}",
                    stopped.join(", ")
                )),
            },
            Check::Shutdown => {
                if health.shutdown.is_cancelled() {
                    Err("process is shutting down".into())
                } else {
                    Ok(())
                }
            }
        }
    }
}

/// The components `componentstatuses` reports, in upstream's order: the scheduler, the
/// controller-manager and the store. Upstream probes the processes of those names; Finale's
/// are in-process, so each is judged by the checks `/readyz` runs for it: the scheduler and
/// the other controllers by whether their tasks still run, the store (`etcd-0` on an etcd
/// backend, `store` on the embedded one) by a read and, embedded, by whether it takes writes.
pub async fn components(health: &Health) -> Vec<(&'static str, Result<(), String>)> {
    let stopped = health.controllers.stopped();
    let scheduler = if stopped.contains(&"scheduler") {
        Err("the in-process scheduler has stopped".to_string())
    } else {
        Ok(())
    };
    let others: Vec<&str> = stopped
        .iter()
        .copied()
        .filter(|name| *name != "scheduler")
        .collect();
    let controller_manager = if others.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "in-process controllers stopped: {}",
            others.join(", ")
        ))
    };
    let store = if health.etcd.is_some() {
        ("etcd-0", Check::Etcd.run(health).await)
    } else {
        let read = Check::Store.run(health).await;
        let writable = match read {
            Ok(()) => Check::StoreWritable.run(health).await,
            failed => failed,
        };
        ("store", writable)
    };
    vec![
        ("scheduler", scheduler),
        ("controller-manager", controller_manager),
        store,
    ]
}

/// The three endpoints and their checks, in the order they are reported.
#[derive(Clone, Copy, Debug)]
enum Endpoint {
    Healthz,
    Livez,
    Readyz,
}

impl Endpoint {
    fn parse(name: &str) -> Option<Endpoint> {
        match name {
            "healthz" => Some(Endpoint::Healthz),
            "livez" => Some(Endpoint::Livez),
            "readyz" => Some(Endpoint::Readyz),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Endpoint::Healthz => "healthz",
            Endpoint::Livez => "livez",
            Endpoint::Readyz => "readyz",
        }
    }

    fn checks(self) -> &'static [Check] {
        match self {
            Endpoint::Healthz | Endpoint::Livez => &[Check::Ping, Check::Store],
            Endpoint::Readyz => &[
                Check::Ping,
                Check::Store,
                Check::Etcd,
                Check::StoreWritable,
                Check::Controllers,
                Check::Shutdown,
            ],
        }
    }
}

/// `GET /healthz`, `/livez`, `/readyz`.
pub async fn endpoint(State(state): State<AppState>, request: Request) -> Response {
    let path = request.uri().path().trim_start_matches('/');
    let Some(endpoint) = Endpoint::parse(path) else {
        return super::not_found(request).await;
    };
    let query = request.uri().query().unwrap_or_default();
    let mut verbose = false;
    let mut excluded = BTreeSet::new();
    for (key, value) in form_urlencoded::parse(query.as_bytes()) {
        match key.as_ref() {
            "verbose" => verbose = true,
            "exclude" => {
                excluded.insert(value.into_owned());
            }
            _ => {}
        }
    }

    let mut report = String::new();
    let mut failures = Vec::new();
    for check in endpoint.checks() {
        if !check.applies(&state.health) {
            continue;
        }
        if excluded.remove(check.name()) {
            report.push_str(&format!("[+]{} excluded: ok\n", check.name()));
            continue;
        }
        match check.run(&state.health).await {
            Ok(()) => report.push_str(&format!("[+]{} ok\n", check.name())),
            Err(reason) => {
                // The endpoint is public: the reason goes to the log and to the per-check
                // path, not into this answer.
                report.push_str(&format!("[-]{} failed: reason withheld\n", check.name()));
                failures.push(format!("[-]{} failed: {reason}", check.name()));
            }
        }
    }
    if !excluded.is_empty() {
        let names: Vec<String> = excluded.iter().map(|name| format!("{name:?}")).collect();
        report.push_str(&format!(
            "warn: some health checks cannot be excluded: no matches for {}\n",
            names.join(",")
        ));
    }
    if !failures.is_empty() {
        tracing::warn!(
            endpoint = endpoint.name(),
            failures = %failures.join("; "),
            "health check failed"
        );
        report.push_str(&format!("{} check failed\n", endpoint.name()));
        return text(StatusCode::INTERNAL_SERVER_ERROR, report);
    }
    if !verbose {
        return text(StatusCode::OK, "ok".into());
    }
    report.push_str(&format!("{} check passed\n", endpoint.name()));
    text(StatusCode::OK, report)
}

/// `GET /healthz/<check>`, `/livez/<check>`, `/readyz/<check>`: one check, with its reason.
pub async fn single(
    State(state): State<AppState>,
    Path(name): Path<String>,
    request: Request,
) -> Response {
    let endpoint = request
        .uri()
        .path()
        .trim_start_matches('/')
        .split('/')
        .next()
        .and_then(Endpoint::parse);
    let check = endpoint.and_then(|endpoint| {
        endpoint
            .checks()
            .iter()
            .find(|c| c.name() == name && c.applies(&state.health))
    });
    let Some(check) = check else {
        return super::not_found(request).await;
    };
    match check.run(&state.health).await {
        Ok(()) => text(StatusCode::OK, "ok".into()),
        Err(reason) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("internal server error: {reason}\n"),
        ),
    }
}

/// A plain-text answer with the headers Go's `http.Error` and upstream's handler set.
fn text(code: StatusCode, body: String) -> Response {
    (
        code,
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            ),
            (
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
        ],
        body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use finale_store::{RedbStore, RedbStoreOptions};

    fn health(dir: &std::path::Path) -> (Health, Arc<RedbStore>) {
        let store = RedbStore::open(dir, RedbStoreOptions::default()).expect("open a store");
        let health = Health {
            store: store.clone(),
            etcd: None,
            controllers: Arc::new(Controllers::default()),
            shutdown: CancellationToken::new(),
        };
        (health, store)
    }

    #[tokio::test]
    async fn readiness_checks_follow_controllers_shutdown_and_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let (health, store) = health(dir.path());
        for check in Endpoint::Readyz.checks() {
            assert_eq!(check.run(&health).await, Ok(()), "{}", check.name());
        }

        // A controller whose task ended (here: returned at once) is named.
        let running = tokio::spawn(std::future::pending::<()>());
        health.controllers.add("namespace", running);
        health
            .controllers
            .add("garbage-collector", tokio::spawn(async {}));
        tokio::task::yield_now().await;
        let stopped = eventually_stopped(&health.controllers).await;
        assert_eq!(stopped, ["garbage-collector"]);
        assert_eq!(
            Check::Controllers.run(&health).await,
            Err("in-process controllers stopped: garbage-collector".to_string())
        );

        health.shutdown.cancel();
        assert_eq!(
            Check::Shutdown.run(&health).await,
            Err("process is shutting down".to_string())
        );

        store.close().await;
        assert_eq!(
            Check::Store.run(&health).await,
            Err("the store is closed".to_string())
        );
        assert_eq!(
            Check::StoreWritable.run(&health).await,
            Err("the store is closed".to_string())
        );
        for (_, task) in health.controllers.take() {
            task.abort();
        }
    }

    async fn eventually_stopped(controllers: &Controllers) -> Vec<&'static str> {
        for _ in 0..100 {
            let stopped = controllers.stopped();
            if !stopped.is_empty() {
                return stopped;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        controllers.stopped()
    }

    #[test]
    fn liveness_has_no_readiness_only_checks() {
        let live: Vec<&str> = Endpoint::Livez.checks().iter().map(|c| c.name()).collect();
        assert_eq!(live, ["ping", "store"]);
        let healthz: Vec<&str> = Endpoint::Healthz
            .checks()
            .iter()
            .map(|c| c.name())
            .collect();
        assert_eq!(healthz, live);
    }
}
