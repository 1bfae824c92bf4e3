//! `lists`: reading a large collection (issue 17, item 3: "paginated lists (limit 500) of
//! 100 000 objects, and an unpaginated list of them: time and peak memory, against etcd ranges
//! of the same keys").
//!
//! Each run starts a `finale server` and a single-member etcd on fresh data directories and
//! fills both, untimed, with `--list-objects` (default 100 000) values of 1 KiB: ConfigMaps
//! created over HTTPS by 64 clients in one namespace, and etcd puts of the same keys
//! kube-apiserver would use by 64 writers. Then each side is read twice, sides alternating
//! which goes first from run to run:
//! - **paginated**: pages of `limit=500`, each request carrying the previous page's `continue`
//!   token until a page has none (etcd: ranges of 500 keys at the first page's revision, each
//!   from the key after the last one read, until `more` is false);
//! - **unpaginated**: one request for the whole collection (etcd: one range of every key).
//!
//! Timed: from the first request until the last byte of the last page has been read. Peak
//! memory: the process's `VmHWM` is reset to its current `VmRSS` just before the read
//! (`/proc/PID/clear_refs`) and read after it; the figure is that peak minus `VmRSS` just
//! before, the memory the read needed at once. Every read must return exactly the objects
//! written, or the run fails.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use finale_etcd_rpc::etcdserverpb::RangeRequest;
use finale_etcd_rpc::prefix_range_end;
use reqwest::StatusCode;
use serde::Deserialize;
use serde::de::IgnoredAny;

use crate::etcd::EtcdAction;
use crate::finale::{locate_binary, memory_of, reset_peak_memory};
use crate::report::{Figure, Report, Unit};
use crate::scenarios::namespace_teardown::{etcd_batch, limit_for};
use crate::scenarios::objects::{self, Action, Collection, Kind, Owners, send_expect};
use crate::scenarios::{Settings, Side, SideBySide, payload};

const SCENARIO: &str = "lists";
const CLIENTS: usize = 64;
/// The page size of the paginated reads: what the issue names, and kubectl's default chunk.
const PAGE: u64 = 500;
/// The namespace (and etcd key prefix) the objects are written to.
const NAMESPACE: &str = "bench-lists";
/// How long one whole read may take: generous, but finite.
const READ_LIMIT: Duration = Duration::from_secs(300);

/// The two reads each side does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Read {
    Paginated,
    Unpaginated,
}

impl Read {
    const BOTH: [Read; 2] = [Read::Paginated, Read::Unpaginated];

    fn name(self) -> &'static str {
        match self {
            Read::Paginated => "paginated",
            Read::Unpaginated => "unpaginated",
        }
    }
}

/// The time and the peak memory of one read, across runs.
struct ReadFigures {
    read: Read,
    time: Figure,
    peak: Figure,
}

impl ReadFigures {
    fn new(read: Read, objects: u64) -> ReadFigures {
        let (what, baseline) = match read {
            Read::Paginated => (
                format!("list of {objects} ConfigMaps of 1 KiB, pages of {PAGE}"),
                format!("etcd 3.4 ranges of {PAGE} keys"),
            ),
            Read::Unpaginated => (
                format!("list of {objects} ConfigMaps of 1 KiB, one response"),
                format!("etcd 3.4 range of all {objects} keys"),
            ),
        };
        ReadFigures {
            read,
            time: Figure::new(
                SCENARIO,
                &format!("{what} (ms)"),
                Unit::Millis,
                &format!("{baseline} (ms)"),
            ),
            peak: Figure::new(
                SCENARIO,
                &format!("{what}, peak memory added (MB)"),
                Unit::Megabytes,
                &format!("{baseline}, peak memory added (MB)"),
            ),
        }
    }

    fn push(&mut self, side: Side, measured: Measured) {
        let ms = measured.elapsed.as_secs_f64() * 1e3;
        match side {
            Side::Finale => {
                self.time.finale.push(ms);
                self.peak.finale.push(measured.peak_added_mb);
            }
            Side::Etcd => {
                self.time.baseline.push(ms);
                self.peak.baseline.push(measured.peak_added_mb);
            }
        }
    }
}

/// One read's figures.
#[derive(Clone, Copy, Debug)]
struct Measured {
    elapsed: Duration,
    peak_added_mb: f64,
    pages: u64,
}

/// The parts of a list response the harness checks; items are skipped, not built.
#[derive(Deserialize)]
struct ListPage {
    items: Vec<IgnoredAny>,
    metadata: ListMeta,
}

#[derive(Deserialize)]
struct ListMeta {
    #[serde(rename = "continue", default)]
    continue_token: Option<String>,
}

/// The most pages a read of `objects` may take before the harness calls it a loop.
fn page_bound(objects: u64) -> u64 {
    objects / PAGE + 2
}

/// Reads the collection at `url` from Finale; returns the objects read and the pages.
async fn read_finale(
    client: &reqwest::Client,
    url: &str,
    read: Read,
    objects: u64,
) -> anyhow::Result<(u64, u64)> {
    let mut continue_token: Option<String> = None;
    let (mut items, mut pages) = (0u64, 0u64);
    loop {
        let mut request = client.get(url);
        if read == Read::Paginated {
            request = request.query(&[("limit", PAGE.to_string())]);
        }
        if let Some(token) = &continue_token {
            request = request.query(&[("continue", token)]);
        }
        let body = send_expect(request, StatusCode::OK, "list configmaps").await?;
        let page: ListPage =
            serde_json::from_slice(body.as_ref()).context("parse the configmaps list")?;
        items += page.items.len() as u64;
        pages += 1;
        match page
            .metadata
            .continue_token
            .filter(|token| !token.is_empty())
        {
            Some(token) if read == Read::Paginated => continue_token = Some(token),
            Some(_) => bail!("an unpaginated list answered with a continue token"),
            None => return Ok((items, pages)),
        }
        ensure!(
            pages < page_bound(objects),
            "{pages} pages for {objects} objects: the continue tokens do not end"
        );
    }
}

/// Reads the keys under `prefix` from etcd; returns the keys read and the ranges.
async fn read_etcd(
    client: &finale_etcd_rpc::Client,
    prefix: &str,
    read: Read,
    objects: u64,
) -> anyhow::Result<(u64, u64)> {
    let mut kv = client.kv();
    let range_end = prefix_range_end(prefix.as_bytes());
    let limit = match read {
        Read::Paginated => PAGE as i64,
        Read::Unpaginated => 0,
    };
    let (mut start, mut revision) = (prefix.as_bytes().to_vec(), 0);
    let (mut keys, mut ranges) = (0u64, 0u64);
    loop {
        let response = kv
            .range(RangeRequest {
                key: start.clone(),
                range_end: range_end.clone(),
                limit,
                revision,
                ..Default::default()
            })
            .await
            .context("etcd range")?
            .into_inner();
        if revision == 0 {
            // Every later page reads at the first page's revision, as a continue token does.
            revision = response.header.as_ref().map_or(0, |header| header.revision);
        }
        keys += response.kvs.len() as u64;
        ranges += 1;
        if !response.more {
            return Ok((keys, ranges));
        }
        let last = response
            .kvs
            .last()
            .context("etcd said more but sent no keys")?;
        start = last.key.clone();
        start.push(0);
        ensure!(
            ranges < page_bound(objects),
            "{ranges} ranges for {objects} keys: the ranges do not end"
        );
    }
}

/// Runs `read` against the process `pid`, timing it and taking the peak memory it added.
async fn measure<F>(pid: u32, objects: u64, read: F) -> anyhow::Result<Measured>
where
    F: std::future::Future<Output = anyhow::Result<(u64, u64)>>,
{
    let before = memory_of(pid)?;
    reset_peak_memory(pid)?;
    let started = Instant::now();
    let (items, pages) = tokio::time::timeout(READ_LIMIT, read)
        .await
        .with_context(|| format!("the read took over {READ_LIMIT:?}"))??;
    let elapsed = started.elapsed();
    let after = memory_of(pid)?;
    ensure!(
        items == objects,
        "the read returned {items} objects of the {objects} written"
    );
    Ok(Measured {
        elapsed,
        peak_added_mb: (after.hwm_mb - before.rss_mb).max(0.0),
        pages,
    })
}

pub async fn run(settings: &Settings, report: &mut Report) -> anyhow::Result<()> {
    let binary = locate_binary(settings.finale_bin.as_deref())?;
    let objects = settings.list_objects;
    let mut figures: Vec<ReadFigures> = Read::BOTH
        .iter()
        .map(|&read| ReadFigures::new(read, objects))
        .collect();
    let data: Arc<str> = format!("{0}{0}", payload()).into();

    for run in 0..settings.runs {
        let dir = tempfile::tempdir().context("create a temporary directory")?;
        let both = SideBySide::start(&binary, dir.path(), CLIENTS).await?;
        let (server, clients, etcd_client) = (&both.server, &both.clients, &both.etcd_client);
        let (server_pid, etcd_pid) = (both.server_pid, both.etcd_pid);

        objects::create_namespace(&clients[0], &server.url, NAMESPACE).await?;
        let collection = Collection::new(Kind::ConfigMap, &server.url, NAMESPACE);
        let action = Action::Create {
            data: Arc::clone(&data),
            finalizer: false,
            owners: Owners::none(),
        };
        let filled = Instant::now();
        objects::setup(clients, &collection, objects, action, limit_for(objects)).await?;
        let finale_fill = filled.elapsed();
        let prefix = Kind::ConfigMap.etcd_key_prefix(NAMESPACE);
        let filled = Instant::now();
        etcd_batch(
            etcd_client,
            &prefix,
            objects,
            EtcdAction::Put(data.as_bytes().to_vec()),
        )
        .await?;
        eprintln!(
            "[{SCENARIO}] run {}/{}: {objects} objects written: finale {:.1} s, etcd {:.1} s",
            run + 1,
            settings.runs,
            finale_fill.as_secs_f64(),
            filled.elapsed().as_secs_f64()
        );

        let sides = if run % 2 == 0 {
            [Side::Finale, Side::Etcd]
        } else {
            [Side::Etcd, Side::Finale]
        };
        for side in sides {
            for figures in &mut figures {
                let read = figures.read;
                let measured = match side {
                    Side::Finale => {
                        measure(
                            server_pid,
                            objects,
                            read_finale(&clients[0], &collection.url, read, objects),
                        )
                        .await?
                    }
                    Side::Etcd => {
                        measure(
                            etcd_pid,
                            objects,
                            read_etcd(etcd_client, &prefix, read, objects),
                        )
                        .await?
                    }
                };
                eprintln!(
                    "[{SCENARIO}] run {}/{}, {side:?} {} read: {:.1} ms in {} request(s), peak memory added {:.1} MB",
                    run + 1,
                    settings.runs,
                    read.name(),
                    measured.elapsed.as_secs_f64() * 1e3,
                    measured.pages,
                    measured.peak_added_mb
                );
                report.raw.push(serde_json::json!({
                    "scenario": SCENARIO,
                    "run": run,
                    "side": format!("{side:?}"),
                    "read": read.name(),
                    "objects": objects,
                    "ms": measured.elapsed.as_secs_f64() * 1e3,
                    "requests": measured.pages,
                    "peak_added_mb": measured.peak_added_mb,
                }));
                figures.push(side, measured);
            }
        }
        drop(both);
    }
    for figures in figures {
        report.figures.push(figures.time);
        report.figures.push(figures.peak);
    }
    Ok(())
}
