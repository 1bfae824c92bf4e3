//! `garbage-collection`: how fast the server's garbage collector acts on owner references,
//! against a `finale server` process. Four figures, each per run, median over `--runs`:
//!
//! 1. **Background cascade.** One owner ConfigMap and N dependent ConfigMaps (`--gc-dependents`,
//!    default 10 000), each with an owner reference to the owner's uid. Timed: from just
//!    before `DELETE owner` (no options: the default policy, Background) until a watch on the
//!    namespace's ConfigMaps, opened from the resourceVersion of a list taken after the fill,
//!    has delivered a `DELETED` event for every dependent. Also as deletions/s. The baseline
//!    is the `namespace-teardown` one: raw etcd 3.4 deletes of as many keys with 64 writers.
//! 2. **Foreground cascade.** A three-level tree: a root, 10 middles owned by it, and L leaves
//!    (`--gc-leaves`, default 1 000) dealt round-robin over the middles; every reference has
//!    `blockOwnerDeletion: true`. Timed: from just before
//!    `DELETE root?propagationPolicy=Foreground` until a watch on the root delivers its
//!    `DELETED`, which the collector allows only once every middle, and so every leaf, is
//!    gone.
//! 3. **Orphaning.** One owner and N dependents, as for 1. Timed: from just before
//!    `DELETE owner?propagationPolicy=Orphan` until a watch on the owner delivers its
//!    `DELETED`: the collector removes the `orphan` finalizer only after it has removed the
//!    owner reference from every dependent. Also as dependents/s. A list afterwards (not
//!    timed) checks that all N dependents remain, none still naming the owner.
//! 4. **Server CPU per object.** The server process's CPU time (user + system) during 1,
//!    divided by N. This includes the API server's own work for each delete (the registry,
//!    the store's commit, the watch events to the harness), not only the collector's. The
//!    baseline is etcd's CPU time during its timed deletes, divided by as many keys.
//!
//! Set-up is not timed: a fresh namespace per figure and run, the owner (and middles) created
//! one at a time to learn their uids, and the N dependents (or L leaves) from 64 HTTPS clients
//! with the same 512-byte payload as the other deletion scenarios. Each namespace is deleted
//! and awaited after its figure, so clean-up never overlaps a timed part. Every wait is
//! bounded; a cascade that does not finish fails the scenario with the collector's
//! `/metrics` gauges (graph nodes, queue depth, deleted objects) in the message.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::etcd::{self, EtcdAction, EtcdProcess};
use crate::finale::{client_for, cpu_seconds, locate_binary, start_server};
use crate::report::{Figure, Goal, Report, Unit};
use crate::scenarios::namespace_teardown::{etcd_batch, limit_for};
use crate::scenarios::objects::{
    self, Action, Collection, Kind, OwnerRef, Owners, Watch, WatchFrom, send_expect,
};
use crate::scenarios::{Settings, Side, payload};
use crate::stats::median;

const SCENARIO: &str = "garbage-collection";
const CLIENTS: usize = 64;
/// The goals from the issue: 10 000 dependents gone within 10 s of their owner (≥ 1 000
/// deletions/s), and a tree of 1 000 leaves deleted in the foreground within 2 s.
const GOAL_DEPENDENTS: u64 = 10_000;
const GOAL_BACKGROUND_MS: f64 = 10_000.0;
const GOAL_LEAVES: u64 = 1_000;
const GOAL_FOREGROUND_MS: f64 = 2_000.0;
/// Middles of the foreground tree (fewer if there are fewer leaves).
const MIDDLES: u64 = 10;
/// The owner of figures 1 and 3, and the root of figure 2.
const OWNER: &str = "owner";
const ROOT: &str = "root";
/// How long an initial `ADDED` event may take.
const WATCH_START: Duration = Duration::from_secs(10);
/// Polling step of the count fallback when the watch of figure 1 ends early; a list of
/// thousands of objects is not free, so not too often.
const COUNT_POLL: Duration = Duration::from_millis(50);

/// The foreground tree: one root, `middles` owned by it, `leaves` owned by the middles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Tree {
    middles: u64,
    leaves: u64,
}

impl Tree {
    /// `leaves` is at least 1 (the command line makes sure).
    fn new(leaves: u64) -> Tree {
        Tree {
            middles: MIDDLES.min(leaves).max(1),
            leaves,
        }
    }

    fn middle_name(index: u64) -> String {
        format!("middle-{index}")
    }

    /// Root, middles and leaves.
    fn objects(self) -> u64 {
        1 + self.middles + self.leaves
    }

    /// "root + 10 middles + 1000 leaves", as the figure names it.
    fn describe(self) -> String {
        format!("root + {} middles + {} leaves", self.middles, self.leaves)
    }
}

/// A reference to the ConfigMap `name` with uid `uid`.
fn configmap_owner(name: &str, uid: String, block_owner_deletion: bool) -> OwnerRef {
    OwnerRef {
        kind: Kind::ConfigMap,
        name: name.to_string(),
        uid,
        block_owner_deletion,
    }
}

/// The rows of the table.
struct Figures {
    dependents: u64,
    background_ms: Figure,
    background_rate: Figure,
    foreground_ms: Figure,
    orphan_ms: Figure,
    orphan_rate: Figure,
    cpu_per_object: Figure,
    /// Server CPU cores during each run's background cascade, for a note.
    background_cores: Vec<f64>,
}

impl Figures {
    fn new(dependents: u64, tree: Tree) -> Figures {
        let mut background_ms = Figure::new(
            SCENARIO,
            &format!("GC background cascade, {dependents} dependents (ms)"),
            Unit::Millis,
            &format!("etcd 3.4 deletes of {dependents} keys, {CLIENTS} writers (ms)"),
        );
        if dependents == GOAL_DEPENDENTS {
            background_ms = background_ms.with_goal(Goal::AtMost(GOAL_BACKGROUND_MS));
        }
        let background_rate = Figure::new(
            SCENARIO,
            &format!("GC background cascade, {dependents} dependents, deletions/s"),
            Unit::PerSecond,
            &format!("etcd 3.4 deletes/s, {CLIENTS} writers"),
        );
        let mut foreground_ms = Figure::new(
            SCENARIO,
            &format!("GC foreground cascade, {} (ms)", tree.describe()),
            Unit::Millis,
            "none",
        );
        if tree.leaves == GOAL_LEAVES {
            foreground_ms = foreground_ms.with_goal(Goal::AtMost(GOAL_FOREGROUND_MS));
        }
        Figures {
            dependents,
            background_ms,
            background_rate,
            foreground_ms,
            orphan_ms: Figure::new(
                SCENARIO,
                &format!("GC orphaning {dependents} dependents (ms)"),
                Unit::Millis,
                "none",
            ),
            orphan_rate: Figure::new(
                SCENARIO,
                &format!("GC orphaning {dependents} dependents, dependents/s"),
                Unit::PerSecond,
                "none",
            ),
            cpu_per_object: Figure::new(
                SCENARIO,
                "server CPU per cascaded object, GC + API deletes (µs)",
                Unit::Micros,
                "etcd 3.4 CPU per raw key delete (µs)",
            ),
            background_cores: Vec::new(),
        }
    }

    fn push_background(&mut self, cascade: &Cascade) {
        let seconds = cascade.elapsed.as_secs_f64().max(1e-9);
        self.background_ms.finale.push(seconds * 1e3);
        self.background_rate
            .finale
            .push(self.dependents as f64 / seconds);
        self.cpu_per_object
            .finale
            .push(per_object_micros(cascade.server_cpu, self.dependents));
        self.background_cores.push(cascade.server_cpu / seconds);
    }

    fn push_etcd(&mut self, elapsed: Duration, etcd_cpu: f64) {
        let seconds = elapsed.as_secs_f64().max(1e-9);
        self.background_ms.baseline.push(seconds * 1e3);
        self.background_rate
            .baseline
            .push(self.dependents as f64 / seconds);
        self.cpu_per_object
            .baseline
            .push(per_object_micros(etcd_cpu, self.dependents));
    }

    fn push_orphan(&mut self, elapsed: Duration) {
        let seconds = elapsed.as_secs_f64().max(1e-9);
        self.orphan_ms.finale.push(seconds * 1e3);
        self.orphan_rate
            .finale
            .push(self.dependents as f64 / seconds);
    }

    fn into_figures(self) -> [Figure; 6] {
        [
            self.background_ms,
            self.background_rate,
            self.foreground_ms,
            self.orphan_ms,
            self.orphan_rate,
            self.cpu_per_object,
        ]
    }
}

/// CPU seconds spread over `objects`, in µs each.
fn per_object_micros(cpu_seconds: f64, objects: u64) -> f64 {
    cpu_seconds * 1e6 / objects.max(1) as f64
}

/// The garbage collector's lines of a `/metrics` text, as `name value` without the common
/// prefix: "graph_nodes 12, queue_depth 0, deleted_objects_total 10000".
fn gc_gauges(metrics: &str) -> String {
    let gauges: Vec<String> = metrics
        .lines()
        .filter_map(|line| line.strip_prefix("apiserver_garbage_collector_"))
        .map(|line| line.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    if gauges.is_empty() {
        "no apiserver_garbage_collector_* metrics".to_string()
    } else {
        gauges.join(", ")
    }
}

/// The server's garbage collector gauges now, or why they could not be read: for progress
/// lines and for the message of a cascade that did not finish.
async fn gc_state(client: &reqwest::Client, url: &str) -> String {
    let read = async {
        let body = send_expect(
            client.get(format!("{url}/metrics")),
            StatusCode::OK,
            "GET /metrics",
        )
        .await?;
        anyhow::Ok(gc_gauges(&String::from_utf8_lossy(body.as_ref())))
    };
    match tokio::time::timeout(Duration::from_secs(5), read).await {
        Ok(Ok(gauges)) => gauges,
        Ok(Err(error)) => format!("metrics unavailable: {error:#}"),
        Err(_) => "metrics unavailable: no answer within 5 s".to_string(),
    }
}

/// What one Finale measurement uses.
struct Fixture {
    url: String,
    /// Creates and deletes of single objects, lists and polls: one warm connection.
    control: reqwest::Client,
    /// The watch, on its own connection.
    watcher: reqwest::Client,
    /// The 64 clients that fill a namespace.
    bulk: Vec<reqwest::Client>,
    data: Arc<str>,
    server_pid: u32,
}

impl Fixture {
    /// A fresh namespace and its ConfigMaps.
    async fn namespace(&self, name: &str) -> anyhow::Result<Collection> {
        objects::create_namespace(&self.control, &self.url, name).await?;
        Ok(Collection::new(Kind::ConfigMap, &self.url, name))
    }

    /// Creates the owner and `count` dependents referring to it (`cm-0`, `cm-1`, …); returns
    /// the owner's uid and the fill's creates/s.
    async fn fill_owned(
        &self,
        collection: &Collection,
        count: u64,
    ) -> anyhow::Result<(String, f64)> {
        let uid =
            objects::create_object(&self.control, collection, OWNER, None, &self.data).await?;
        let create = Action::Create {
            data: Arc::clone(&self.data),
            finalizer: false,
            owners: Owners::round_robin(vec![configmap_owner(OWNER, uid.clone(), false)]),
        };
        let fill = objects::setup(&self.bulk, collection, count, create, limit_for(count)).await?;
        Ok((uid, fill.per_second()))
    }

    /// An error for a cascade that did not finish, with what the collector says of itself.
    async fn stuck(&self, error: anyhow::Error) -> anyhow::Error {
        let state = gc_state(&self.control, &self.url).await;
        error.context(format!("the garbage collector's gauges now: {state}"))
    }
}

/// One timed cascade.
struct Cascade {
    elapsed: Duration,
    /// Server CPU seconds during it.
    server_cpu: f64,
    /// Creates/s of the untimed fill, for context.
    fill_per_second: f64,
    /// "watch", or "poll" if the watch ended early.
    observed_by: &'static str,
}

/// Reads `watch` (opened from a list) until it has delivered a `DELETED` event for `count`
/// objects whose names start with `prefix`. Returns how many it saw: fewer if the watch ended
/// or failed first (the caller then polls instead). Fails at `deadline`.
async fn count_deletions(
    watch: &mut Watch,
    prefix: &str,
    count: u64,
    deadline: Instant,
) -> anyhow::Result<u64> {
    let mut seen = 0;
    while seen < count {
        let event = match tokio::time::timeout_at(deadline.into(), watch.next()).await {
            Ok(event) => event,
            Err(_) => bail!("{seen} of {count} dependents deleted at the time limit"),
        };
        match event {
            Ok(Some((kind, object))) if kind == "DELETED" => {
                let name = object
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                if name.starts_with(prefix) {
                    seen += 1;
                }
            }
            Ok(Some((kind, object))) if kind == "ERROR" => {
                eprintln!("[{SCENARIO}] the ConfigMap watch failed ({object}); polling instead");
                break;
            }
            Ok(Some(_)) => {}
            Ok(None) => {
                eprintln!("[{SCENARIO}] the ConfigMap watch ended; polling instead");
                break;
            }
            Err(error) => {
                eprintln!("[{SCENARIO}] the ConfigMap watch failed ({error:#}); polling instead");
                break;
            }
        }
    }
    Ok(seen)
}

/// Lists the collection every [`COUNT_POLL`] until it is empty; fails at `deadline`.
async fn poll_until_empty(
    client: &reqwest::Client,
    collection: &Collection,
    deadline: Instant,
) -> anyhow::Result<()> {
    loop {
        let left = objects::count_objects(client, collection).await?;
        if left == 0 {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("{left} ConfigMaps are left at the time limit");
        }
        tokio::time::sleep(COUNT_POLL).await;
    }
}

/// Figure 1 (and 4): the owner's background delete until every dependent is gone.
async fn background(
    fixture: &Fixture,
    namespace: &str,
    dependents: u64,
) -> anyhow::Result<Cascade> {
    let limit = limit_for(dependents);
    let collection = fixture.namespace(namespace).await?;
    let (_, fill_per_second) = fixture.fill_owned(&collection, dependents).await?;
    let list = objects::list(&fixture.control, &collection).await?;
    let listed = objects::items(&list).len() as u64;
    if listed != dependents + 1 {
        bail!("the namespace holds {listed} ConfigMaps after the fill, not {dependents} + 1");
    }
    let revision = list
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .context("the ConfigMap list has no metadata.resourceVersion")?;
    let mut watch = Watch::open(
        &fixture.watcher,
        &collection.url,
        WatchFrom::After(revision),
        limit,
    )
    .await?;

    let cpu_before = cpu_seconds(fixture.server_pid)?;
    let started = Instant::now();
    let deadline = started + limit;
    send_expect(
        fixture
            .control
            .delete(format!("{}/{OWNER}", collection.url)),
        StatusCode::OK,
        &format!("delete configmap {OWNER}"),
    )
    .await?;
    let prefix = Kind::ConfigMap.name_prefix();
    let observed_by = match count_deletions(&mut watch, prefix, dependents, deadline).await {
        Ok(seen) if seen == dependents => "watch",
        Ok(_) => match poll_until_empty(&fixture.control, &collection, deadline).await {
            Ok(()) => "poll",
            Err(error) => return Err(fixture.stuck(error).await),
        },
        Err(error) => return Err(fixture.stuck(error).await),
    };
    let elapsed = started.elapsed();
    let server_cpu = cpu_seconds(fixture.server_pid)? - cpu_before;
    drop(watch);

    // Not timed: the events said so, and a list must agree (the owner went first).
    let left = objects::count_objects(&fixture.control, &collection).await?;
    if left != 0 {
        bail!("{left} ConfigMaps are left after every dependent's DELETED event");
    }
    objects::delete_namespace(&fixture.control, &fixture.url, namespace, limit).await?;
    Ok(Cascade {
        elapsed,
        server_cpu,
        fill_per_second,
        observed_by,
    })
}

/// DELETEs `name` with `policy` and waits, through a watch opened before, until it is gone.
async fn delete_and_await(
    fixture: &Fixture,
    collection: &Collection,
    name: &str,
    policy: &str,
    limit: Duration,
) -> anyhow::Result<(Duration, &'static str)> {
    let mut watch =
        Watch::open_named(&fixture.watcher, &collection.url, name, limit, WATCH_START).await?;
    let object_url = format!("{}/{name}", collection.url);
    let started = Instant::now();
    send_expect(
        fixture
            .control
            .delete(format!("{object_url}?propagationPolicy={policy}")),
        StatusCode::OK,
        &format!("delete configmap {name} ({policy})"),
    )
    .await?;
    let observed_by = objects::wait_until_deleted(
        &mut watch,
        &fixture.control,
        &object_url,
        &format!("configmap {name}"),
        started,
        limit,
        SCENARIO,
    )
    .await;
    let elapsed = started.elapsed();
    match observed_by {
        Ok(observed_by) => Ok((elapsed, observed_by)),
        Err(error) => Err(fixture.stuck(error).await),
    }
}

/// Figure 2: the root's foreground delete until the root is gone.
async fn foreground(fixture: &Fixture, namespace: &str, tree: Tree) -> anyhow::Result<Cascade> {
    let limit = limit_for(tree.objects());
    let collection = fixture.namespace(namespace).await?;
    let root =
        objects::create_object(&fixture.control, &collection, ROOT, None, &fixture.data).await?;
    let root = configmap_owner(ROOT, root, true);
    let mut middles = Vec::new();
    for index in 0..tree.middles {
        let name = Tree::middle_name(index);
        let uid = objects::create_object(
            &fixture.control,
            &collection,
            &name,
            Some(&root),
            &fixture.data,
        )
        .await?;
        middles.push(configmap_owner(&name, uid, true));
    }
    let create = Action::Create {
        data: Arc::clone(&fixture.data),
        finalizer: false,
        owners: Owners::round_robin(middles),
    };
    let fill = objects::setup(&fixture.bulk, &collection, tree.leaves, create, limit).await?;

    let cpu_before = cpu_seconds(fixture.server_pid)?;
    let (elapsed, observed_by) =
        delete_and_await(fixture, &collection, ROOT, "Foreground", limit).await?;
    let server_cpu = cpu_seconds(fixture.server_pid)? - cpu_before;

    // Not timed: the root goes last, so nothing of the tree may be left.
    let left = objects::count_objects(&fixture.control, &collection).await?;
    if left != 0 {
        bail!("{left} ConfigMaps of the tree are left after the root's DELETED event");
    }
    objects::delete_namespace(&fixture.control, &fixture.url, namespace, limit).await?;
    Ok(Cascade {
        elapsed,
        server_cpu,
        fill_per_second: fill.per_second(),
        observed_by,
    })
}

/// Dependents of a list that still name the owner `uid` in their owner references.
fn still_owned(items: &[Value], uid: &str) -> usize {
    items
        .iter()
        .filter(|item| {
            item.pointer("/metadata/ownerReferences")
                .and_then(Value::as_array)
                .is_some_and(|refs| refs.iter().any(|r| r["uid"] == uid))
        })
        .count()
}

/// Figure 3: the owner's orphaning delete until the owner is gone. Returns the cascade and
/// a complaint if the dependents are not as orphaning must leave them.
async fn orphan(
    fixture: &Fixture,
    namespace: &str,
    dependents: u64,
) -> anyhow::Result<(Cascade, Option<String>)> {
    let limit = limit_for(dependents);
    let collection = fixture.namespace(namespace).await?;
    let (owner_uid, fill_per_second) = fixture.fill_owned(&collection, dependents).await?;

    let cpu_before = cpu_seconds(fixture.server_pid)?;
    let (elapsed, observed_by) =
        delete_and_await(fixture, &collection, OWNER, "Orphan", limit).await?;
    let server_cpu = cpu_seconds(fixture.server_pid)? - cpu_before;

    // Not timed: every dependent stays, and none names the owner any more.
    let list = objects::list(&fixture.control, &collection).await?;
    let items = objects::items(&list);
    let owned = still_owned(items, &owner_uid);
    let complaint = (items.len() as u64 != dependents || owned > 0).then(|| {
        format!(
            "after the orphaning delete {} ConfigMaps remain (expected {dependents}), {owned} \
             of them still naming the deleted owner",
            items.len()
        )
    });
    objects::delete_namespace(&fixture.control, &fixture.url, namespace, limit).await?;
    Ok((
        Cascade {
            elapsed,
            server_cpu,
            fill_per_second,
            observed_by,
        },
        complaint,
    ))
}

/// The etcd side of figures 1 and 4: puts `count` keys (not timed), then times deleting them
/// with 64 writers; returns the time and etcd's CPU seconds during the deletes.
async fn etcd_deletes(
    client: &finale_etcd_rpc::Client,
    etcd_pid: u32,
    tag: &str,
    count: u64,
    value: &[u8],
) -> anyhow::Result<(Duration, f64)> {
    let prefix = Kind::ConfigMap.etcd_key_prefix(tag);
    etcd_batch(client, &prefix, count, EtcdAction::Put(value.to_vec())).await?;
    let cpu_before = cpu_seconds(etcd_pid)?;
    let elapsed = etcd_batch(client, &prefix, count, EtcdAction::Delete).await?;
    Ok((elapsed, cpu_seconds(etcd_pid)? - cpu_before))
}

/// One progress line for a Finale cascade.
fn progress(run: usize, runs: usize, what: &str, cascade: &Cascade, rate: &str, gauges: &str) {
    let seconds = cascade.elapsed.as_secs_f64();
    eprintln!(
        "[{SCENARIO}] run {}/{runs}, {what}: finale {:.1} ms ({rate}filled at {:.0} creates/s; \
         seen by {}; server used {:.2} CPU cores; GC after: {gauges})",
        run + 1,
        seconds * 1e3,
        cascade.fill_per_second,
        cascade.observed_by,
        cascade.server_cpu / seconds.max(1e-9),
    );
}

fn raw(run: usize, figure: &str, cascade: &Cascade, objects: u64, gauges: &str) -> Value {
    json!({
        "scenario": SCENARIO,
        "run": run,
        "figure": figure,
        "target": "finale",
        "objects": objects,
        "ms": cascade.elapsed.as_secs_f64() * 1e3,
        "server_cpu_seconds": cascade.server_cpu,
        "observed_by": cascade.observed_by,
        "fill_creates_per_second": cascade.fill_per_second,
        "gc_gauges_after": gauges,
    })
}

pub async fn run(settings: &Settings, report: &mut Report) -> anyhow::Result<()> {
    let dependents = settings.gc_dependents;
    let tree = Tree::new(settings.gc_leaves);
    let binary = locate_binary(settings.finale_bin.as_deref())?;
    let dir = tempfile::tempdir().context("create a temporary data directory")?;
    let mut server = start_server(&binary, &dir.path().join("finale")).await?;
    // The harness's own etcd process rather than the e2e fixture: its pid gives the CPU
    // baseline.
    let etcd = EtcdProcess::start(&dir.path().join("etcd")).await?;
    let etcd_pid = etcd.pid().context("etcd has exited")?;
    let etcd_client = etcd::connect(&etcd.endpoint).await?;

    let fixture = Fixture {
        url: server.url.clone(),
        control: client_for(&server)?,
        watcher: client_for(&server)?,
        bulk: (0..CLIENTS)
            .map(|_| client_for(&server))
            .collect::<anyhow::Result<Vec<_>>>()?,
        data: payload().into(),
        server_pid: server.pid().context("the server has exited")?,
    };
    let value = payload().into_bytes();
    let mut figures = Figures::new(dependents, tree);
    let runs = settings.runs;
    for run in 0..runs {
        let tag = format!("bench-gc-r{run}");
        for side in Side::order(run) {
            match side {
                Side::Finale => {
                    let what = format!("background cascade of {dependents} dependents");
                    let cascade = background(&fixture, &format!("{tag}-bg"), dependents).await?;
                    let gauges = gc_state(&fixture.control, &fixture.url).await;
                    let rate = format!(
                        "{:.0} deletions/s, {:.1} µs server CPU each; ",
                        dependents as f64 / cascade.elapsed.as_secs_f64().max(1e-9),
                        per_object_micros(cascade.server_cpu, dependents),
                    );
                    progress(run, runs, &what, &cascade, &rate, &gauges);
                    figures.push_background(&cascade);
                    report
                        .raw
                        .push(raw(run, "background", &cascade, dependents, &gauges));
                }
                Side::Etcd => {
                    let (elapsed, cpu) =
                        etcd_deletes(&etcd_client, etcd_pid, &tag, dependents, &value).await?;
                    let seconds = elapsed.as_secs_f64();
                    eprintln!(
                        "[{SCENARIO}] run {}/{runs}: etcd {:.1} ms to delete {dependents} keys \
                         ({:.0} deletes/s, {CLIENTS} writers; {:.1} µs etcd CPU each)",
                        run + 1,
                        seconds * 1e3,
                        dependents as f64 / seconds.max(1e-9),
                        per_object_micros(cpu, dependents),
                    );
                    figures.push_etcd(elapsed, cpu);
                    report.raw.push(json!({
                        "scenario": SCENARIO,
                        "run": run,
                        "figure": "background",
                        "target": "etcd",
                        "objects": dependents,
                        "delete_ms": seconds * 1e3,
                        "etcd_cpu_seconds": cpu,
                    }));
                }
            }
        }

        let cascade = foreground(&fixture, &format!("{tag}-fg"), tree).await?;
        let gauges = gc_state(&fixture.control, &fixture.url).await;
        let what = format!("foreground cascade of {}", tree.describe());
        progress(run, runs, &what, &cascade, "", &gauges);
        figures
            .foreground_ms
            .finale
            .push(cascade.elapsed.as_secs_f64() * 1e3);
        report
            .raw
            .push(raw(run, "foreground", &cascade, tree.objects(), &gauges));

        let (cascade, complaint) = orphan(&fixture, &format!("{tag}-or"), dependents).await?;
        let gauges = gc_state(&fixture.control, &fixture.url).await;
        let rate = format!(
            "{:.0} dependents/s; ",
            dependents as f64 / cascade.elapsed.as_secs_f64().max(1e-9)
        );
        let what = format!("orphaning {dependents} dependents");
        progress(run, runs, &what, &cascade, &rate, &gauges);
        figures.push_orphan(cascade.elapsed);
        report
            .raw
            .push(raw(run, "orphan", &cascade, dependents, &gauges));
        if let Some(complaint) = complaint {
            eprintln!("[{SCENARIO}] run {}/{runs}: {complaint}", run + 1);
            report
                .warnings
                .push(format!("{SCENARIO} run {}: {complaint}", run + 1));
        }
    }

    if let Some(cores) = median(&figures.background_cores) {
        report.notes.push(format!(
            "during the background cascades of {dependents} dependents the finale server used \
             {cores:.2} CPU cores, of {} (median)",
            report.context.nproc
        ));
    }
    report.figures.extend(figures.into_figures());
    if !server.is_running() {
        bail!(
            "finale server exited during the benchmark; its log ends:\n{}",
            server.log_tail(30)
        );
    }
    // Dropping the fixtures kills and reaps both processes; the temp dir goes after them.
    drop(server);
    drop(etcd);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_tree_is_ten_middles_of_a_hundred_leaves() {
        let tree = Tree::new(1_000);
        assert_eq!(
            tree,
            Tree {
                middles: 10,
                leaves: 1_000
            }
        );
        assert_eq!(tree.objects(), 1_011);
        assert_eq!(tree.describe(), "root + 10 middles + 1000 leaves");
        // The leaves are dealt over the middles as the fill deals them.
        let middles: Vec<OwnerRef> = (0..tree.middles)
            .map(|i| configmap_owner(&Tree::middle_name(i), format!("u{i}"), true))
            .collect();
        let owners = Owners::round_robin(middles);
        let mut per_middle = [0u64; 10];
        for leaf in 0..tree.leaves {
            let owner = owners.of(leaf).unwrap();
            assert!(owner.block_owner_deletion);
            let index: usize = owner.name.strip_prefix("middle-").unwrap().parse().unwrap();
            per_middle[index] += 1;
        }
        assert_eq!(per_middle, [100; 10]);
    }

    #[test]
    fn small_trees_have_no_leafless_middles() {
        assert_eq!(Tree::new(3).middles, 3);
        assert_eq!(Tree::new(3).objects(), 7);
        assert_eq!(Tree::new(1).middles, 1);
        assert_eq!(Tree::new(25).middles, 10);
    }

    #[test]
    fn rows_are_named_after_their_sizes_and_hold_the_goals_at_the_issue_sizes() {
        let figures = Figures::new(10_000, Tree::new(1_000));
        let names: Vec<String> = figures
            .into_figures()
            .iter()
            .map(|f| format!("{} | {} | {:?}", f.name, f.baseline_name, f.goal))
            .collect();
        assert_eq!(
            names,
            [
                "GC background cascade, 10000 dependents (ms) | etcd 3.4 deletes of 10000 keys, \
                 64 writers (ms) | Some(AtMost(10000.0))",
                "GC background cascade, 10000 dependents, deletions/s | etcd 3.4 deletes/s, 64 \
                 writers | None",
                "GC foreground cascade, root + 10 middles + 1000 leaves (ms) | none | \
                 Some(AtMost(2000.0))",
                "GC orphaning 10000 dependents (ms) | none | None",
                "GC orphaning 10000 dependents, dependents/s | none | None",
                "server CPU per cascaded object, GC + API deletes (µs) | etcd 3.4 CPU per raw \
                 key delete (µs) | None",
            ]
        );
        let other = Figures::new(500, Tree::new(50));
        assert_eq!(other.background_ms.goal, None);
        assert_eq!(other.foreground_ms.goal, None);
    }

    #[test]
    fn background_runs_give_time_rate_and_cpu_per_object() {
        let mut figures = Figures::new(10_000, Tree::new(1_000));
        figures.push_background(&Cascade {
            elapsed: Duration::from_millis(2_500),
            server_cpu: 1.5,
            fill_per_second: 0.0,
            observed_by: "watch",
        });
        figures.push_etcd(Duration::from_millis(500), 0.25);
        assert_eq!(figures.background_ms.finale, [2_500.0]);
        assert_eq!(figures.background_rate.finale, [4_000.0]);
        assert_eq!(figures.background_rate.baseline, [20_000.0]);
        assert_eq!(figures.background_rate.ratio(), Some(0.2));
        assert_eq!(figures.cpu_per_object.finale, [150.0]);
        assert_eq!(figures.cpu_per_object.baseline, [25.0]);
        assert_eq!(figures.background_cores, [0.6]);
        figures.push_orphan(Duration::from_secs(4));
        assert_eq!(figures.orphan_rate.finale, [2_500.0]);
        assert_eq!(figures.orphan_ms.finale, [4_000.0]);
    }

    #[test]
    fn gauges_are_read_from_the_metrics_text() {
        let metrics = "# HELP apiserver_garbage_collector_graph_nodes Objects\n\
                       # TYPE apiserver_garbage_collector_graph_nodes gauge\n\
                       apiserver_garbage_collector_graph_nodes 12\n\
                       apiserver_request_total{verb=\"GET\",code=\"200\"} 5\n\
                       apiserver_garbage_collector_queue_depth 0\n\
                       apiserver_garbage_collector_deleted_objects_total 10000\n\
                       # EOF\n";
        assert_eq!(
            gc_gauges(metrics),
            "graph_nodes 12, queue_depth 0, deleted_objects_total 10000"
        );
        assert_eq!(
            gc_gauges("# EOF\n"),
            "no apiserver_garbage_collector_* metrics"
        );
    }

    #[test]
    fn orphaned_dependents_must_not_name_the_owner() {
        let items = [
            json!({"metadata": {"name": "cm-0"}}),
            json!({"metadata": {"name": "cm-1", "ownerReferences": []}}),
            json!({"metadata": {"name": "cm-2", "ownerReferences": [{"uid": "other"}]}}),
            json!({"metadata": {"name": "cm-3", "ownerReferences": [{"uid": "gone"}]}}),
        ];
        assert_eq!(still_owned(&items, "gone"), 1);
        assert_eq!(still_owned(&items, "absent"), 0);
    }
}
