//! `finalizer-removal`: how fast 64 clients can release terminating objects by removing their
//! finalizers, against a `finale server` process; raw etcd 3.4 puts with 64 writers (the
//! `http-create` baseline), as many as there are objects, measured in the same invocation.
//!
//! Each Finale run uses a fresh namespace. Set-up, not timed: create N ConfigMaps (default
//! 2 000, `--finalizer-objects`) holding the finalizer `bench.finale.dev/hold`, then DELETE each,
//! which only marks it terminating. Timed: 64 clients each take the next ConfigMap and send
//! `PATCH` with `application/merge-patch+json` `{"metadata":{"finalizers":null}}`, awaiting
//! each `200` before sending the next, until all N are patched. An update that empties the
//! finalizers of a terminating object removes it, so each PATCH is an update plus a removal;
//! a list afterwards (not timed) checks that none is left. The rate is N over the time until
//! the last PATCH completed; latency is per PATCH.
//!
//! The etcd side mirrors the set-up with N untimed puts, then times N puts of fresh keys
//! with 64 writers over one shared gRPC connection.
//!
//! This is what a controller does when it finishes its clean-up (and what `kubectl patch`
//! does by hand): it costs a read, a merge, validation, and the removal of the object.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use reqwest::StatusCode;

use crate::etcd;
use crate::finale::{client_for, cpu_seconds, locate_binary, start_server};
use crate::load::{LoadSpec, Tickets};
use crate::report::Report;
use crate::scenarios::objects::{self, Action, Collection, Kind, Owners, send_expect};
use crate::scenarios::{LoadFigures, Settings, Side, payload, progress_load, store};
use crate::stats::median;

const SCENARIO: &str = "finalizer-removal";
const CLIENTS: usize = 64;

/// The bound on each phase of `count` objects; generous but finite.
fn limit_for(count: u64) -> Duration {
    Duration::from_secs(30) + Duration::from_millis(count.saturating_mul(5))
}

pub async fn run(settings: &Settings, report: &mut Report) -> anyhow::Result<()> {
    let count = settings.finalizer_objects;
    let binary = locate_binary(settings.finale_bin.as_deref())?;
    let dir = tempfile::tempdir().context("create a temporary data directory")?;
    let mut server = start_server(&binary, &dir.path().join("finale")).await?;
    let etcd = tokio::task::spawn_blocking(finale_e2e::Etcd::start)
        .await
        .context("etcd start task")?
        .context("start etcd")?;
    let etcd_client = etcd::connect(&etcd.endpoint).await?;

    let control = client_for(&server)?;
    let clients = (0..CLIENTS)
        .map(|_| client_for(&server))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let data: Arc<str> = payload().into();
    let server_pid = server.pid().context("the server has exited")?;
    let limit = limit_for(count);

    let mut figures = LoadFigures::new(
        SCENARIO,
        &format!("finalizer removals/s (PATCH), {CLIENTS} clients"),
        &format!("finalizer removal latency, {CLIENTS} clients,"),
        &format!("etcd 3.4 puts, {CLIENTS} writers, {count} keys"),
        None,
    );
    let mut server_cores = Vec::new();
    let mut harness_cores = Vec::new();
    let what = format!("{count} objects, {CLIENTS} clients");
    for run in 0..settings.runs {
        for side in Side::order(run) {
            let result = match side {
                Side::Finale => {
                    let namespace = format!("bench-fin-r{run}");
                    objects::create_namespace(&control, &server.url, &namespace).await?;
                    let collection = Collection::new(Kind::ConfigMap, &server.url, &namespace);
                    let create = Action::Create {
                        data: Arc::clone(&data),
                        finalizer: true,
                        owners: Owners::none(),
                    };
                    objects::setup(&clients, &collection, count, create, limit).await?;
                    objects::setup(&clients, &collection, count, Action::Delete, limit).await?;
                    let terminating = objects::count_objects(&control, &collection).await?;
                    if terminating as u64 != count {
                        bail!(
                            "{terminating} ConfigMaps are terminating after the DELETEs, not {count}"
                        );
                    }

                    let cpu_before = (cpu_seconds(server_pid)?, cpu_seconds(std::process::id())?);
                    let started = Instant::now();
                    let tickets = Tickets::new(count);
                    let result = objects::timed(
                        &clients,
                        &collection,
                        &tickets,
                        Action::RemoveFinalizers,
                        limit,
                    )
                    .await?;
                    let wall = started.elapsed().as_secs_f64().max(1e-9);
                    let cores = (cpu_seconds(server_pid)? - cpu_before.0) / wall;
                    let harness = (cpu_seconds(std::process::id())? - cpu_before.1) / wall;
                    server_cores.push(cores);
                    harness_cores.push(harness);

                    let left = objects::count_objects(&control, &collection).await?;
                    if left > 0 {
                        report.warnings.push(format!(
                            "{SCENARIO} run {}: {left} ConfigMaps were still there after their \
                             finalizers were removed",
                            run + 1
                        ));
                    }
                    eprintln!(
                        "[{SCENARIO}] run {}/{}: CPU cores used: server {cores:.2}, harness \
                         {harness:.2}; {left} ConfigMaps left",
                        run + 1,
                        settings.runs
                    );
                    // Clean-up, not timed: the namespace is empty, so it goes at once.
                    send_expect(
                        control.delete(format!("{}/api/v1/namespaces/{namespace}", server.url)),
                        StatusCode::OK,
                        &format!("delete namespace {namespace}"),
                    )
                    .await?;
                    result
                }
                Side::Etcd => {
                    let spec = LoadSpec::exactly(CLIENTS, count, limit);
                    // Not timed, like Finale's creates and deletes: the same writers and
                    // connection warmed up by as many writes just before.
                    let setup =
                        store::measure_etcd(&etcd_client, &spec, &format!("fin-r{run}-setup"))
                            .await?;
                    if setup.ops != count || setup.errors > 0 {
                        bail!(
                            "etcd set-up puts: {} of {count} done; first error: {}",
                            setup.ops,
                            setup.first_error.as_deref().unwrap_or("none")
                        );
                    }
                    store::measure_etcd(&etcd_client, &spec, &format!("fin-r{run}")).await?
                }
            };
            progress_load(SCENARIO, run, settings.runs, &what, side.name(), &result);
            figures.push(
                side,
                &result,
                report,
                &format!("{SCENARIO} run {}, {what}", run + 1),
            );
            report.raw.push(serde_json::json!({
                "scenario": SCENARIO,
                "run": run,
                "objects": count,
                "clients": CLIENTS,
                "target": side.name(),
                "result": result.summary(),
            }));
        }
    }
    report.figures.extend(figures.into_figures());
    if let (Some(server), Some(harness)) = (median(&server_cores), median(&harness_cores)) {
        report.notes.push(format!(
            "during the finalizer removals the finale server used {server:.2} CPU cores and the \
             harness ({CLIENTS} TLS clients) {harness:.2}, of {} (medians)",
            report.context.nproc
        ));
    }
    if !server.is_running() {
        bail!(
            "finale server exited during the benchmark; its log ends:\n{}",
            server.log_tail(30)
        );
    }
    // Dropping the fixtures kills and reaps both processes; the temp dirs go after them.
    drop(server);
    drop(etcd);
    Ok(())
}
