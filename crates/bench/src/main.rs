//! `finale-bench`: the benchmark harness. Each scenario measures Finale and a baseline (etcd
//! 3.4, a client-side walk, an ordered script: the table says which) in the same invocation on the same machine, several times, and prints one table of
//! medians and ratios on stdout; progress goes to stderr, one line per run.
//!
//! ```text
//! cargo build --release -p finale -p finale-bench
//! cargo run --release -p finale-bench -- all --runs 5 --seconds 5 --json bench.json
//! ```
//!
//! Every child process (servers, etcd) is killed and reaped, and every temporary directory
//! removed, when its owner is dropped: on success, on error, and on Ctrl-C or SIGTERM, which
//! cancel the running scenario (dropping its fixtures) instead of killing the harness outright.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use tokio::signal::unix::{SignalKind, signal};

mod disk;
mod etcd;
mod finale;
mod load;
mod report;
mod scenarios;
mod stats;

use report::{Context as MachineContext, Report};
use scenarios::Settings;

/// Benchmarks for Finale, each against a baseline measured in the same run.
#[derive(Parser)]
#[command(name = "finale-bench", about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    scenario: Scenario,
    /// Runs per figure; the table shows the median.
    #[arg(long, global = true, default_value_t = 5)]
    runs: usize,
    /// Measured seconds per load run (store, http-create).
    #[arg(long, global = true, default_value_t = 5.0)]
    seconds: f64,
    /// Uncounted warm-up seconds before each load run.
    #[arg(long, global = true, default_value_t = 0.5)]
    warmup: f64,
    /// Hard cap on operations per load run.
    #[arg(long, global = true, default_value_t = 10_000_000)]
    max_ops: u64,
    /// Also write every figure and run as JSON to this file.
    #[arg(long, global = true, value_name = "FILE")]
    json: Option<PathBuf>,
    /// The finale binary [default: `finale` next to this executable, i.e. target/release/finale].
    #[arg(long, global = true, value_name = "PATH")]
    finale_bin: Option<PathBuf>,
    /// ConfigMaps in the deleted namespace, one figure each (namespace-teardown).
    #[arg(
        long,
        global = true,
        value_name = "N,N,…",
        value_delimiter = ',',
        default_values_t = [0, 1_000, 10_000]
    )]
    sizes: Vec<u64>,
    /// Custom resources in the deleted namespace, one more figure; 0 leaves it out
    /// (namespace-teardown).
    #[arg(long, global = true, value_name = "N", default_value_t = 1_000)]
    custom_resources: u64,
    /// Terminating ConfigMaps whose finalizers each run removes (finalizer-removal).
    #[arg(long, global = true, value_name = "N", default_value_t = 2_000)]
    finalizer_objects: u64,
    /// Dependents of one owner in the background and orphan cascades (garbage-collection).
    #[arg(long, global = true, value_name = "N", default_value_t = 10_000)]
    gc_dependents: u64,
    /// Leaves of the foreground tree, under 10 middles (garbage-collection).
    #[arg(long, global = true, value_name = "N", default_value_t = 1_000)]
    gc_leaves: u64,
    /// Databases created and deleted per run (database-operator).
    #[arg(long, global = true, value_name = "N", default_value_t = 500)]
    databases: u64,
    /// The operator's DDL statements per second toward PostgreSQL (database-operator).
    #[arg(long, global = true, value_name = "N", default_value_t = 50)]
    ddl_rate: u32,
    /// The operator's DDL burst above the rate (database-operator).
    #[arg(long, global = true, value_name = "N", default_value_t = 10)]
    ddl_burst: u32,
    /// Seconds PostgreSQL stays down with every delete pending (database-operator).
    #[arg(long, global = true, value_name = "S", default_value_t = 30)]
    outage_seconds: u64,
    /// Namespaces of the benchmarked tenant (tenant-teardown).
    #[arg(long, global = true, value_name = "N", default_value_t = 50)]
    tenant_namespaces: u64,
    /// ConfigMaps in each of the tenant's namespaces (tenant-teardown).
    #[arg(long, global = true, value_name = "N", default_value_t = 20)]
    tenant_configmaps: u64,
    /// Objects in the namespace whose stuck objects are explained (deletion-insight); 100 of
    /// them are stuck.
    #[arg(long, global = true, value_name = "N", default_value_t = 50_000)]
    insight_objects: u64,
    /// Dependents of the owner whose deletion is planned (deletion-insight).
    #[arg(long, global = true, value_name = "N", default_value_t = 10_000)]
    plan_dependents: u64,
    /// Pods created, deleted and failed per batch (pods).
    #[arg(long, global = true, value_name = "N", default_value_t = 100)]
    pods: u64,
    /// Sizes, in ConfigMaps of 1 KiB, at which memory reads both sides' resident memory.
    #[arg(
        long,
        global = true,
        value_name = "N,N,…",
        value_delimiter = ',',
        default_values_t = [0, 10_000, 100_000, 300_000]
    )]
    memory_sizes: Vec<u64>,
    /// Which parts of high-availability to run: creates, failover, write-gap.
    #[arg(
        long,
        global = true,
        value_name = "PART,PART,…",
        value_delimiter = ',',
        default_values_t = ["creates".to_string(), "failover".to_string(), "write-gap".to_string()]
    )]
    ha_parts: Vec<String>,
    /// ConfigMaps of 1 KiB in the listed collection (lists).
    #[arg(long, global = true, value_name = "N", default_value_t = 100_000)]
    list_objects: u64,
    /// Watchers of each target (watch-fanout).
    #[arg(long, global = true, value_name = "N", default_value_t = 1_000)]
    watchers: u64,
    /// Writes per second during --seconds (watch-fanout).
    #[arg(long, global = true, value_name = "N", default_value_t = 200)]
    watch_rate: u64,
    /// Where the audited server of rbac-create writes its audit log (default: beside its
    /// store, on the same filesystem); a directory on another filesystem, e.g. /dev/shm,
    /// separates the log's disk writes from the store's.
    #[arg(long, global = true, value_name = "DIR")]
    audit_log_dir: Option<std::path::PathBuf>,
}

/// The most objects a deletion scenario will create in one run.
const MAX_OBJECTS: u64 = 1_000_000;
/// The most Pods (host processes) one batch of the `pods` scenario will start.
const MAX_PODS: u64 = 2_000;

#[derive(Subcommand, Clone, Copy, PartialEq, Eq, Debug)]
enum Scenario {
    /// Durable writes/s of the embedded store with 1 and 64 writers, against etcd puts.
    Store,
    /// ConfigMap creates/s over HTTPS with 64 clients, against etcd puts with 64 writers.
    HttpCreate,
    /// ConfigMap creates/s over HTTPS with 64 clients as a user under RBAC with 200 roles and
    /// bindings, against the same creates as the admin on the same server.
    RbacCreate,
    /// ConfigMap creates/s over HTTPS with 64 clients when a validating admission webhook
    /// matches every create, against the same on a server without webhooks.
    WebhookCreate,
    /// Spawn to first successful request, fresh and existing data dir, against etcd.
    ColdStart,
    /// Resident memory of an idle server after a few requests, against etcd.
    IdleRss,
    /// Resident memory holding 0, 10 000, 100 000 and 300 000 ConfigMaps of 1 KiB, against
    /// etcd holding the same keys.
    Memory,
    /// A list of 100 000 ConfigMaps of 1 KiB in pages of 500 and in one response: time and
    /// peak memory added, against etcd ranges of the same keys.
    Lists,
    /// Delivery latency to 1 000 watchers (of the type, of one namespace) with 200 writes/s,
    /// and the server's CPU, against etcd watches of the same keys.
    WatchFanout,
    /// DELETE of a namespace holding 0, 1 000, 10 000 ConfigMaps, or 1 000 custom resources,
    /// until it is gone, against etcd deletes of as many keys with 64 writers.
    NamespaceTeardown,
    /// Finalizer removals/s (PATCH) on terminating ConfigMaps with 64 clients, against etcd puts.
    FinalizerRemoval,
    /// The garbage collector: background cascade of 10 000 dependents (against etcd deletes),
    /// foreground cascade of a 1 000-leaf tree, orphaning 10 000 dependents, CPU per object.
    GarbageCollection,
    /// The Database operator against a real PostgreSQL: 500 Databases created then deleted,
    /// reconcile p50/p99, and the peak DDL rate after a 30 s outage, against raw DDL.
    DatabaseOperator,
    /// A tenant of 50 namespaces × 20 ConfigMaps × 1 Database: delete → gone, against the
    /// same namespaces deleted directly.
    TenantTeardown,
    /// `finale explain` of a stuck object in a namespace of 50 000 objects and `finale plan`
    /// of an owner of 10 000 dependents, against the same commands computed in the client.
    DeletionInsight,
    /// The external-resource GC engine against moto: 300 owned resources (100 load balancers,
    /// 100 target groups, 100 security groups) torn down, time and AWS API calls, against a
    /// script that already knows the order and the ids.
    CloudGc,
    /// Finale on etcd: creates/s through one and two replicas (against etcd puts and one
    /// replica), controller failover after SIGKILL of the Lease holder, and the longest write
    /// gap when the etcd leader is killed (against etcd's own leaderless time).
    HighAvailability,
    /// The node agent (`finale node`): N Pods created until Running (bound, and through the
    /// scheduler) and deleted until gone, against the same processes spawned and SIGTERMed
    /// directly; an agent SIGKILLed until its Pods are not ready, against a heartbeat file.
    Pods,
    /// All of the above, in order, with one table at the end.
    All,
}

impl Scenario {
    const ALL: [Scenario; 18] = [
        Scenario::Store,
        Scenario::HttpCreate,
        Scenario::RbacCreate,
        Scenario::WebhookCreate,
        Scenario::ColdStart,
        Scenario::IdleRss,
        Scenario::Memory,
        Scenario::Lists,
        Scenario::WatchFanout,
        Scenario::DeletionInsight,
        Scenario::CloudGc,
        Scenario::HighAvailability,
        Scenario::Pods,
        Scenario::NamespaceTeardown,
        Scenario::FinalizerRemoval,
        Scenario::GarbageCollection,
        Scenario::DatabaseOperator,
        Scenario::TenantTeardown,
    ];

    fn name(self) -> &'static str {
        match self {
            Scenario::Store => "store",
            Scenario::HttpCreate => "http-create",
            Scenario::RbacCreate => "rbac-create",
            Scenario::WebhookCreate => "webhook-create",
            Scenario::ColdStart => "cold-start",
            Scenario::IdleRss => "idle-rss",
            Scenario::Memory => "memory",
            Scenario::Lists => "lists",
            Scenario::WatchFanout => "watch-fanout",
            Scenario::NamespaceTeardown => "namespace-teardown",
            Scenario::FinalizerRemoval => "finalizer-removal",
            Scenario::GarbageCollection => "garbage-collection",
            Scenario::DatabaseOperator => "database-operator",
            Scenario::TenantTeardown => "tenant-teardown",
            Scenario::DeletionInsight => "deletion-insight",
            Scenario::CloudGc => "cloud-gc",
            Scenario::HighAvailability => "high-availability",
            Scenario::Pods => "pods",
            Scenario::All => "all",
        }
    }

    async fn run(self, settings: &Settings, report: &mut Report) -> anyhow::Result<()> {
        match self {
            Scenario::Store => scenarios::store::run(settings, report, true).await,
            Scenario::HttpCreate => scenarios::http_create::run(settings, report).await,
            Scenario::RbacCreate => scenarios::rbac_create::run(settings, report).await,
            Scenario::WebhookCreate => scenarios::webhook_create::run(settings, report).await,
            Scenario::ColdStart => scenarios::cold_start::run(settings, report).await,
            Scenario::IdleRss => scenarios::idle_rss::run(settings, report).await,
            Scenario::Memory => scenarios::memory::run(settings, report).await,
            Scenario::Lists => scenarios::lists::run(settings, report).await,
            Scenario::WatchFanout => scenarios::watch_fanout::run(settings, report).await,
            Scenario::NamespaceTeardown => {
                scenarios::namespace_teardown::run(settings, report).await
            }
            Scenario::FinalizerRemoval => scenarios::finalizer_removal::run(settings, report).await,
            Scenario::GarbageCollection => {
                scenarios::garbage_collection::run(settings, report).await
            }
            Scenario::DatabaseOperator => {
                scenarios::operators::database_operator(settings, report).await
            }
            Scenario::TenantTeardown => {
                scenarios::operators::tenant_teardown(settings, report).await
            }
            Scenario::DeletionInsight => scenarios::deletion_insight::run(settings, report).await,
            Scenario::CloudGc => scenarios::cloud_gc::run(settings, report).await,
            Scenario::HighAvailability => scenarios::high_availability::run(settings, report).await,
            Scenario::Pods => scenarios::pods::run(settings, report).await,
            Scenario::All => bail!("`all` is not a single scenario"),
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if cli.runs == 0 {
        bail!("--runs must be at least 1");
    }
    let duration = |what: &str, seconds: f64| {
        Duration::try_from_secs_f64(seconds)
            .ok()
            .filter(|d| *d <= Duration::from_secs(3600))
            .with_context(|| format!("--{what} must be between 0 and 3600 seconds"))
    };
    let settings = Settings {
        runs: cli.runs,
        window: duration("seconds", cli.seconds)?,
        warmup: duration("warmup", cli.warmup)?,
        max_ops: cli.max_ops,
        finale_bin: cli.finale_bin.clone(),
        // Each size is one row and one namespace name per run: no duplicates.
        teardown_sizes: cli.sizes.iter().fold(Vec::new(), |mut sizes, &size| {
            if !sizes.contains(&size) {
                sizes.push(size);
            }
            sizes
        }),
        teardown_custom_resources: cli.custom_resources,
        finalizer_objects: cli.finalizer_objects,
        gc_dependents: cli.gc_dependents,
        gc_leaves: cli.gc_leaves,
        databases: cli.databases,
        ddl_rate: cli.ddl_rate,
        ddl_burst: cli.ddl_burst,
        outage: Duration::from_secs(cli.outage_seconds),
        tenant_namespaces: cli.tenant_namespaces,
        tenant_configmaps: cli.tenant_configmaps,
        insight_objects: cli.insight_objects,
        plan_dependents: cli.plan_dependents,
        pods: cli.pods,
        memory_sizes: cli.memory_sizes.clone(),
        list_objects: cli.list_objects,
        ha_parts: cli.ha_parts.clone(),
        watchers: cli.watchers,
        watch_rate: cli.watch_rate,
        audit_log_dir: cli.audit_log_dir.clone(),
    };
    if !(1..=10_000).contains(&settings.watchers) || !(1..=10_000).contains(&settings.watch_rate) {
        bail!("--watchers and --watch-rate must be between 1 and 10000");
    }
    if let Some(unknown) = settings
        .ha_parts
        .iter()
        .find(|part| !["creates", "failover", "write-gap"].contains(&part.as_str()))
    {
        bail!("--ha-parts: unknown part {unknown:?}; the parts are creates, failover, write-gap");
    }
    if !(1..=MAX_OBJECTS).contains(&settings.list_objects) {
        bail!("--list-objects must be between 1 and {MAX_OBJECTS}");
    }
    if settings.memory_sizes.iter().any(|&n| n > MAX_OBJECTS) {
        bail!("--memory-sizes must each be at most {MAX_OBJECTS}");
    }
    if !(100..=MAX_OBJECTS).contains(&settings.insight_objects)
        || !(1..=MAX_OBJECTS).contains(&settings.plan_dependents)
    {
        bail!(
            "--insight-objects must be between 100 and {MAX_OBJECTS}, --plan-dependents between 1 and {MAX_OBJECTS}"
        );
    }
    if !(1..=MAX_PODS).contains(&settings.pods) {
        bail!("--pods must be between 1 and {MAX_PODS}");
    }
    if !(1..=100_000).contains(&settings.databases) {
        bail!("--databases must be between 1 and 100000");
    }
    if settings.ddl_rate == 0 || settings.ddl_burst == 0 {
        bail!("--ddl-rate and --ddl-burst must be at least 1");
    }
    if cli.outage_seconds > 3600 {
        bail!("--outage-seconds must be at most 3600");
    }
    if !(1..=1000).contains(&settings.tenant_namespaces) || settings.tenant_configmaps > 10_000 {
        bail!("--tenant-namespaces must be between 1 and 1000, --tenant-configmaps at most 10000");
    }
    if settings.teardown_sizes.is_empty()
        || settings.teardown_sizes.iter().any(|&n| n > MAX_OBJECTS)
    {
        bail!("--sizes must list at least one size, each at most {MAX_OBJECTS}");
    }
    if settings.teardown_custom_resources > MAX_OBJECTS {
        bail!("--custom-resources must be at most {MAX_OBJECTS}");
    }
    if !(1..=MAX_OBJECTS).contains(&settings.finalizer_objects) {
        bail!("--finalizer-objects must be between 1 and {MAX_OBJECTS}");
    }
    if !(1..=MAX_OBJECTS).contains(&settings.gc_dependents) {
        bail!("--gc-dependents must be between 1 and {MAX_OBJECTS}");
    }
    if !(1..=MAX_OBJECTS).contains(&settings.gc_leaves) {
        bail!("--gc-leaves must be between 1 and {MAX_OBJECTS}");
    }
    if settings.window.is_zero() {
        bail!("--seconds must be more than 0");
    }

    let context = MachineContext::capture(cli.runs, cli.seconds);
    eprint!("{}", context.render());
    let mut report = Report::new(context);

    let selected: Vec<Scenario> = match cli.scenario {
        Scenario::All => Scenario::ALL.to_vec(),
        one => vec![one],
    };
    let mut failed = Vec::new();
    let mut interrupted = None;
    let mut terminate = signal(SignalKind::terminate()).context("listen for SIGTERM")?;
    for scenario in selected {
        eprintln!("== {} ==", scenario.name());
        // Cancelling drops the scenario's future, and with it every fixture it holds: that is
        // what kills the child processes and removes the temporary directories.
        let outcome = tokio::select! {
            outcome = scenario.run(&settings, &mut report) => outcome,
            _ = tokio::signal::ctrl_c() => {
                interrupted = Some("interrupted (SIGINT)");
                Err(anyhow::anyhow!("interrupted (SIGINT)"))
            }
            _ = terminate.recv() => {
                interrupted = Some("terminated (SIGTERM)");
                Err(anyhow::anyhow!("terminated (SIGTERM)"))
            }
        };
        if let Err(error) = outcome {
            eprintln!("[{}] failed: {error:#}", scenario.name());
            report
                .warnings
                .push(format!("scenario {} failed: {error:#}", scenario.name()));
            failed.push(scenario.name());
            if interrupted.is_some() {
                break;
            }
        }
    }

    println!();
    print!("{}", report.context.render());
    println!();
    print!("{}", report.table());
    if let Some(path) = &cli.json {
        let json = report.to_json().context("serialise the results")?;
        std::fs::write(path, json).with_context(|| format!("write {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    if let Some(why) = interrupted {
        bail!(
            "{why}; scenarios that did not complete: {}",
            failed.join(", ")
        );
    }
    if !failed.is_empty() {
        bail!("scenarios that did not complete: {}", failed.join(", "));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deletion_flags_have_defaults_and_parse_lists() {
        let cli = Cli::try_parse_from(["finale-bench", "all"]).unwrap();
        assert_eq!(cli.sizes, vec![0, 1_000, 10_000]);
        assert_eq!(cli.custom_resources, 1_000);
        assert_eq!(cli.finalizer_objects, 2_000);
        assert_eq!(cli.gc_dependents, 10_000);
        assert_eq!(cli.gc_leaves, 1_000);
        let cli = Cli::try_parse_from([
            "finale-bench",
            "namespace-teardown",
            "--sizes",
            "5,50",
            "--custom-resources",
            "0",
            "--finalizer-objects",
            "10",
            "--gc-dependents",
            "20",
            "--gc-leaves",
            "30",
        ])
        .unwrap();
        assert_eq!(cli.scenario, Scenario::NamespaceTeardown);
        assert_eq!(cli.sizes, vec![5, 50]);
        assert_eq!(cli.custom_resources, 0);
        assert_eq!(cli.finalizer_objects, 10);
        assert_eq!(cli.gc_dependents, 20);
        assert_eq!(cli.gc_leaves, 30);
        let cli = Cli::try_parse_from(["finale-bench", "garbage-collection"]).unwrap();
        assert_eq!(cli.scenario, Scenario::GarbageCollection);
    }

    #[test]
    fn pods_takes_a_pod_count() {
        let cli = Cli::try_parse_from(["finale-bench", "pods"]).unwrap();
        assert_eq!((cli.scenario, cli.pods), (Scenario::Pods, 100));
        let cli =
            Cli::try_parse_from(["finale-bench", "pods", "--pods", "20", "--runs", "3"]).unwrap();
        assert_eq!((cli.pods, cli.runs), (20, 3));
        assert!(Scenario::ALL.contains(&Scenario::Pods));
    }

    #[test]
    fn all_runs_the_deletion_scenarios_last() {
        let names: Vec<_> = Scenario::ALL.iter().map(|s| s.name()).collect();
        assert_eq!(
            names[names.len() - 5..],
            [
                "namespace-teardown",
                "finalizer-removal",
                "garbage-collection",
                "database-operator",
                "tenant-teardown"
            ]
        );
    }
}
