//! The client-side fallback: on a cluster that does not serve `deletion.finale.dev`, the CLI
//! copies the cluster and runs the server's own answering code over the copy.
//!
//! [`ClusterCopy::load`] lists every listable resource that discovery names (the preferred
//! version of each), loads the objects into an in-memory [`Snapshot`] under the keys the
//! server's store uses, builds the garbage collector's ownership index over them
//! ([`GcView::of_objects`]) and a catalog of the served types. `explain` and `tree` then call
//! [`finale_apiserver::insight::explain_at`] and [`tree_at`] exactly as the server does, so
//! the output is the same; a Plan answer plugs in the same way.
//!
//! # Guarantees
//! - Answers computed here are marked: a line on stderr ([`ClusterCopy::announce`]) in text
//!   mode and `computedBy: client` in JSON and YAML ([`encode_answer`]).
//! - While listing, the number of objects listed so far is shown on stderr when stderr is a
//!   terminal (and only then: logs and pipes stay clean).
//!
//! # Caveats
//! - The copy is as consistent as its LISTs: each resource is listed at its own
//!   resourceVersion; the answer reports the newest one.
//! - The garbage collector's queues are not visible from a client: causes that depend on them
//!   say so (`gcWork: unknown`) instead of judging.
//! - A resource whose LIST fails (forbidden, an unavailable aggregated API) is left out, with
//!   a warning on stderr naming it.
//! - The walk reads the whole cluster: it takes as long as listing it does.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::Context;
use finale_apiserver::controllers::gc::GcView;
use finale_apiserver::insight::snapshot::Snapshot;
use finale_apiserver::resources::{Catalog, ResourceType};
use futures::StreamExt;
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde::Serialize;
use serde_json::Value;

use crate::cluster::Session;
use crate::explain::resolve::Resolved;

/// How many objects one LIST page asks for.
const PAGE_SIZE: u32 = 500;
/// How many resources are listed at once.
const PARALLEL_LISTS: usize = 4;

/// A copy of a cluster, in the shape the server's answering code reads.
pub struct ClusterCopy {
    pub catalog: Catalog,
    pub snapshot: Snapshot,
    pub gc: GcView,
    /// How many objects and resources were copied (for the marker line).
    pub objects: usize,
    pub resources: usize,
}

impl ClusterCopy {
    /// Lists the cluster behind `session` and builds the copy. `command` names the command in
    /// progress and warning lines.
    pub async fn load(session: &mut Session, command: &str) -> anyhow::Result<ClusterCopy> {
        let catalog = Catalog::default();
        let builtins = Catalog::with_builtins();
        let mut to_list = Vec::new();
        for (resolved, preferred) in session.served_now().await?.listable() {
            let resource = resource_type(&builtins, &resolved);
            if preferred {
                to_list.push((resolved, resource.clone()));
            }
            catalog.add(resource);
        }
        let progress = Progress::new(command, to_list.len());
        let lists = futures::stream::iter(to_list.into_iter().map(|(resolved, resource)| {
            let client = session.clients.requests.clone();
            let progress = &progress;
            async move {
                let listed = list_all(client, &resolved, progress).await;
                (resolved, resource, listed)
            }
        }))
        .buffer_unordered(PARALLEL_LISTS)
        .collect::<Vec<_>>()
        .await;
        progress.finish();
        let mut objects = BTreeMap::new();
        let mut revision = 0;
        let mut resources = 0;
        for (resolved, resource, listed) in lists {
            let (items, list_revision) = match listed {
                Ok(listed) => listed,
                Err(error) => {
                    eprintln!(
                        "{command}: warning: cannot list {} ({error:#}); the answer leaves them out",
                        qualified(&resolved)
                    );
                    continue;
                }
            };
            resources += 1;
            revision = revision.max(list_revision);
            for object in items {
                let namespace = finale_apiserver::object::meta_str(&object, "namespace")
                    .filter(|n| !n.is_empty())
                    .map(str::to_string);
                let key = resource.object_key(
                    namespace.as_deref(),
                    finale_apiserver::object::name(&object),
                );
                objects.insert(key, object);
            }
        }
        let gc = GcView::of_objects(objects.values());
        let count = objects.len();
        Ok(ClusterCopy {
            catalog,
            snapshot: Snapshot::of_objects(objects, revision),
            gc,
            objects: count,
            resources,
        })
    }

    /// The served type of `resolved` in the copy.
    pub fn resource(&self, resolved: &Resolved) -> anyhow::Result<Arc<ResourceType>> {
        self.catalog
            .lookup(&resolved.group, &resolved.version, &resolved.plural)
            .with_context(|| {
                format!(
                    "{} cannot be listed, so the client cannot answer for it",
                    qualified(resolved)
                )
            })
    }

    /// The stderr line that marks an answer computed here.
    pub fn announce(&self, session: &Session, command: &str) {
        eprintln!(
            "{command}: computed by the client: {} does not serve {}, so this answer comes from listing {} objects of {} resources",
            session.cluster,
            finale_apiserver::insight::API_VERSION,
            self.objects,
            self.resources
        );
    }
}

/// An answer as JSON (pretty, with a final newline) or YAML, with `computedBy: client` after
/// its own fields when the client computed it. Encoded straight from the typed answer: a plan
/// of ten thousand objects is not first copied into a `serde_json::Value` tree.
pub fn encode_answer<T: Serialize>(
    answer: &T,
    computed_by_client: bool,
    yaml: bool,
) -> anyhow::Result<String> {
    #[derive(Serialize)]
    struct Printed<'a, T> {
        #[serde(flatten)]
        answer: &'a T,
        #[serde(rename = "computedBy", skip_serializing_if = "Option::is_none")]
        computed_by: Option<&'static str>,
    }
    let printed = Printed {
        answer,
        computed_by: computed_by_client.then_some("client"),
    };
    if yaml {
        return serde_saphyr::to_string(&printed).context("encode YAML");
    }
    let mut json = serde_json::to_string_pretty(&printed).context("encode JSON")?;
    json.push('\n');
    Ok(json)
}

/// The server's own type for a kind it compiles in (Pods keep their grace period rules, and
/// so on), else a plain type built from discovery.
fn resource_type(builtins: &Catalog, resolved: &Resolved) -> ResourceType {
    match builtins.lookup(&resolved.group, &resolved.version, &resolved.plural) {
        Some(known) if known.kind == resolved.kind && known.namespaced == resolved.namespaced => {
            (*known).clone()
        }
        _ => ResourceType::builtin(
            &resolved.group,
            &resolved.version,
            &resolved.kind,
            &resolved.plural,
            resolved.namespaced,
        ),
    }
}

fn qualified(resolved: &Resolved) -> String {
    if resolved.group.is_empty() {
        resolved.plural.clone()
    } else {
        format!("{}.{}", resolved.plural, resolved.group)
    }
}

/// Every object of `resolved`, page by page, with the list's resourceVersion; each object
/// carries its apiVersion and kind (list items may omit them).
async fn list_all(
    client: kube::Client,
    resolved: &Resolved,
    progress: &Progress,
) -> anyhow::Result<(Vec<Value>, i64)> {
    let gvk = GroupVersionKind::gvk(&resolved.group, &resolved.version, &resolved.kind);
    let api_resource = ApiResource::from_gvk_with_plural(&gvk, &resolved.plural);
    let api: Api<DynamicObject> = Api::all_with(client, &api_resource);
    let mut objects = Vec::new();
    let mut params = ListParams::default().limit(PAGE_SIZE);
    let mut revision = 0;
    loop {
        let page = api.list(&params).await?;
        if let Some(rv) = page.metadata.resource_version.as_deref() {
            revision = revision.max(rv.parse().unwrap_or(0));
        }
        let count = page.items.len();
        for item in page.items {
            let mut object = serde_json::to_value(item).context("encode a listed object")?;
            if let Some(map) = object.as_object_mut() {
                map.insert("apiVersion".into(), Value::String(resolved.api_version()));
                map.insert("kind".into(), Value::String(resolved.kind.clone()));
            }
            objects.push(object);
        }
        progress.listed(count);
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    progress.resource_done();
    Ok((objects, revision))
}

/// "listed 12345 objects (40/57 resources)" on one redrawn stderr line, on a terminal only.
struct Progress {
    command: String,
    shown: bool,
    objects: AtomicUsize,
    done: AtomicUsize,
    total: usize,
}

impl Progress {
    fn new(command: &str, total: usize) -> Progress {
        Progress {
            command: command.to_string(),
            shown: std::io::stderr().is_terminal(),
            objects: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            total,
        }
    }

    fn listed(&self, count: usize) {
        self.objects.fetch_add(count, Ordering::Relaxed);
        self.draw();
    }

    fn resource_done(&self) {
        self.done.fetch_add(1, Ordering::Relaxed);
        self.draw();
    }

    fn draw(&self) {
        if !self.shown {
            return;
        }
        let mut stderr = std::io::stderr().lock();
        let _ = write!(
            stderr,
            "\r\u{1b}[2K{}: listing the cluster: {} objects ({}/{} resources)",
            self.command,
            self.objects.load(Ordering::Relaxed),
            self.done.load(Ordering::Relaxed),
            self.total
        );
        let _ = stderr.flush();
    }

    fn finish(&self) {
        if self.shown {
            let mut stderr = std::io::stderr().lock();
            let _ = write!(stderr, "\r\u{1b}[2K");
            let _ = stderr.flush();
        }
    }
}
