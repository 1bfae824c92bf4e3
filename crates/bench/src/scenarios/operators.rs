//! `database-operator` and `tenant-teardown`: the operators against a real PostgreSQL, both
//! started by the harness on loopback with a `finale server` and a `finale operator` process.
//!
//! `database-operator`, per run, on a fresh server, PostgreSQL and operator:
//! - *create → all Ready*: POST `--databases` Databases (16 clients), poll until every one
//!   reports `status.state: Ready`. Baseline: the same number of `CREATE ROLE` + `CREATE
//!   DATABASE` + `COMMENT` statements sent straight to PostgreSQL from 16 connections.
//! - *delete → all dropped*: one DELETE of the collection, timed until no Database object and
//!   no database is left. Baseline: as many `DROP DATABASE` + `DROP ROLE` sent directly.
//! - *reconcile p50/p99*: from the operator's `reconcile_duration_seconds` histogram after the
//!   two steps above, interpolated within buckets as Prometheus' `histogram_quantile` does.
//! - *thundering herd*: with every Database Ready, PostgreSQL stops, all are deleted, it stays
//!   down `--outage-seconds`, then comes back. A sampler counts the remaining databases every
//!   50 ms; the figure is the most drops seen within any 1 s window, against the configured
//!   limit (`--ddl-rate`; the goal allows the `--ddl-burst` on top), plus the time from
//!   PostgreSQL's return until all are dropped.
//!
//! `tenant-teardown`: a Tenant with `--tenant-namespaces` namespaces, each holding
//! `--tenant-configmaps` ConfigMaps and one Database, run by `finale operator all`. Timed from
//! the DELETE of the tenant until it is gone (by then every namespace and database is too).
//! Baseline: as many namespaces with as many ConfigMaps and no operator work, deleted directly
//! and all at once, until the last is gone.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use finale_e2e::operator::OperatorProcess;
use finale_e2e::{FinaleServer, Postgres};
use futures::StreamExt;
use reqwest::StatusCode;
use reqwest::header::CONTENT_TYPE;
use serde_json::{Value, json};

use crate::finale::{client_for, locate_binary, start_server};
use crate::report::{Figure, Goal, Report, Unit};
use crate::scenarios::Settings;
use crate::scenarios::objects::send_expect;
use crate::stats::median;

const CLIENTS: usize = 16;
/// The bound on any one wait for the operators.
const CONVERGE: Duration = Duration::from_secs(600);
const POLL: Duration = Duration::from_millis(50);
const DATABASES: &str = "/apis/finale.dev/v1alpha1/namespaces/bench/databases";

/// A server, a PostgreSQL and an operator, dropped (killed) together.
struct Stack {
    operator: OperatorProcess,
    postgres: Postgres,
    server: FinaleServer,
    client: reqwest::Client,
    _dir: tempfile::TempDir,
}

impl Stack {
    async fn start(settings: &Settings, operator: &str, extra: &[String]) -> anyhow::Result<Stack> {
        if std::fs::read_dir("/usr/lib/postgresql").is_err()
            && std::env::var_os("FINALE_PG_BINDIR").is_none()
        {
            bail!("PostgreSQL is not installed (Debian package `postgresql`): skipping");
        }
        let binary = locate_binary(settings.finale_bin.as_deref())?;
        let dir = tempfile::tempdir().context("temporary directory")?;
        let server = start_server(&binary, &dir.path().join("data")).await?;
        let postgres = tokio::task::spawn_blocking(Postgres::start)
            .await
            .context("PostgreSQL start task")??;
        let kubeconfig = server.kubeconfig.clone();
        let log_dir = dir.path().to_path_buf();
        let name = operator.to_string();
        let mut args: Vec<String> = vec![
            "--leader-elect=false".into(),
            "--max-backoff".into(),
            "5s".into(),
        ];
        args.extend(extra.iter().cloned());
        let operator = tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            OperatorProcess::start(&binary, &name, &kubeconfig, &log_dir, "bench", &args)
        })
        .await
        .context("operator start task")??;
        let client = client_for(&server)?;
        let stack = Stack {
            operator,
            postgres,
            server,
            client,
            _dir: dir,
        };
        stack
            .post("/api/v1/namespaces", json!({"metadata": {"name": "bench"}}))
            .await?;
        stack
            .post(
                "/api/v1/namespaces/bench/secrets",
                json!({"metadata": {"name": "pg"}, "stringData": {"url": stack.postgres.url()}}),
            )
            .await?;
        Ok(stack)
    }

    async fn post(&self, path: &str, body: Value) -> anyhow::Result<()> {
        let request = self
            .client
            .post(format!("{}{path}", self.server.url))
            .header(CONTENT_TYPE, "application/json")
            .body(body.to_string());
        send_expect(request, StatusCode::CREATED, &format!("POST {path}")).await?;
        Ok(())
    }

    async fn get(&self, path: &str) -> anyhow::Result<Option<Value>> {
        let response = self
            .client
            .get(format!("{}{path}", self.server.url))
            .send()
            .await
            .with_context(|| format!("GET {path}"))?;
        match response.status() {
            StatusCode::NOT_FOUND => Ok(None),
            StatusCode::OK => Ok(Some(response.json().await.context("parse")?)),
            other => bail!("GET {path} answered {other}"),
        }
    }

    async fn delete(&self, path: &str) -> anyhow::Result<()> {
        let response = self
            .client
            .delete(format!("{}{path}", self.server.url))
            .send()
            .await
            .with_context(|| format!("DELETE {path}"))?;
        if !response.status().is_success() {
            bail!("DELETE {path} answered {}", response.status());
        }
        Ok(())
    }

    /// Objects of a list, with how many have `status.state == state`.
    async fn count(&self, path: &str, state: Option<&str>) -> anyhow::Result<(usize, usize)> {
        let list = self.get(path).await?.unwrap_or_default();
        let items = list
            .get("items")
            .and_then(Value::as_array)
            .map_or(&[][..], Vec::as_slice);
        let matching = items
            .iter()
            .filter(|i| {
                state.is_some() && i.pointer("/status/state").and_then(Value::as_str) == state
            })
            .count();
        Ok((items.len(), matching))
    }

    async fn wait(
        &self,
        what: &str,
        mut done: impl AsyncFnMut() -> anyhow::Result<bool>,
    ) -> anyhow::Result<()> {
        let deadline = Instant::now() + CONVERGE;
        while !done().await? {
            if Instant::now() > deadline {
                bail!(
                    "{what}: not done within {CONVERGE:?}; operator log tail:\n{}",
                    tail(&self.operator.log(), 20)
                );
            }
            tokio::time::sleep(POLL).await;
        }
        Ok(())
    }

    async fn create_databases(&self, count: u64) -> anyhow::Result<()> {
        let bodies: Vec<Value> = (0..count)
            .map(|i| {
                json!({"apiVersion": "finale.dev/v1alpha1", "kind": "Database",
                       "metadata": {"name": format!("db{i}")},
                       "spec": {"dbName": format!("bench_{i}"), "owner": format!("bench_owner_{i}"),
                                "connectionSecretRef": {"name": "pg"}}})
            })
            .collect();
        let results: Vec<anyhow::Result<()>> = futures::stream::iter(bodies)
            .map(|body| self.post(DATABASES, body))
            .buffer_unordered(CLIENTS)
            .collect()
            .await;
        results.into_iter().collect()
    }
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

async fn pg_connect(url: &str) -> anyhow::Result<tokio_postgres::Client> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .context("connect to PostgreSQL")?;
    tokio::spawn(connection);
    Ok(client)
}

/// Databases on the server whose name starts with `prefix`.
async fn pg_count(client: &tokio_postgres::Client, prefix: &str) -> anyhow::Result<i64> {
    let pattern = format!("{prefix}%");
    let row = client
        .query_one(
            "SELECT count(*) FROM pg_database WHERE datname LIKE $1",
            &[&pattern],
        )
        .await
        .context("count databases")?;
    Ok(row.get(0))
}

/// `q`-quantile of a Prometheus histogram's cumulative buckets, in milliseconds.
pub fn histogram_quantile(metrics: &str, series: &str, q: f64) -> Option<f64> {
    let prefix = format!("{series}_bucket{{");
    let mut buckets: Vec<(f64, f64)> = metrics
        .lines()
        .filter(|l| l.starts_with(&prefix))
        .filter_map(|line| {
            let le = line.split("le=\"").nth(1)?.split('"').next()?;
            let bound = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            let count = line.rsplit(' ').next()?.parse().ok()?;
            Some((bound, count))
        })
        .collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let mut lower = (0.0, 0.0);
    for &(bound, count) in &buckets {
        if count >= rank {
            if bound.is_infinite() {
                return Some(lower.0 * 1000.0);
            }
            let within = if count > lower.1 {
                (rank - lower.1) / (count - lower.1)
            } else {
                1.0
            };
            return Some((lower.0 + (bound - lower.0) * within) * 1000.0);
        }
        lower = (bound, count);
    }
    None
}

/// Raw DDL for `count` databases from `CLIENTS` connections: (create ms, drop ms).
async fn raw_ddl(url: &str, count: u64) -> anyhow::Result<(f64, f64)> {
    let mut connections = Vec::new();
    for _ in 0..CLIENTS {
        connections.push(Arc::new(pg_connect(url).await?));
    }
    let run = |statements: fn(u64) -> String| {
        let connections = connections.clone();
        async move {
            let started = Instant::now();
            let results: Vec<Result<(), tokio_postgres::Error>> = futures::stream::iter(0..count)
                .map(|i| {
                    let client = Arc::clone(&connections[(i as usize) % CLIENTS]);
                    async move { client.batch_execute(&statements(i)).await }
                })
                .buffer_unordered(CLIENTS)
                .collect()
                .await;
            for result in results {
                result.context("raw DDL")?;
            }
            anyhow::Ok(started.elapsed().as_secs_f64() * 1000.0)
        }
    };
    let create = run(|i| {
        format!("CREATE ROLE raw_owner_{i} NOLOGIN; COMMENT ON ROLE raw_owner_{i} IS 'bench'")
    })
    .await?;
    // CREATE DATABASE cannot share a multi-statement string: a second pass.
    let create_db = run(|i| format!("CREATE DATABASE raw_{i} OWNER raw_owner_{i}")).await?;
    let comment = run(|i| format!("COMMENT ON DATABASE raw_{i} IS 'bench'")).await?;
    let drop_db = run(|i| format!("DROP DATABASE raw_{i} WITH (FORCE)")).await?;
    let drop_role = run(|i| format!("DROP ROLE raw_owner_{i}")).await?;
    Ok((create + create_db + comment, drop_db + drop_role))
}

pub async fn database_operator(settings: &Settings, report: &mut Report) -> anyhow::Result<()> {
    let scenario = "database-operator";
    let count = settings.databases;
    let limit = settings.ddl_rate;
    let burst = settings.ddl_burst;
    let mut create = Figure::new(
        scenario,
        &format!("{count} Databases: create → all Ready"),
        Unit::Millis,
        "raw CREATE ROLE/DATABASE, 16 conns",
    );
    let mut delete = Figure::new(
        scenario,
        &format!("{count} Databases: delete → all dropped"),
        Unit::Millis,
        "raw DROP DATABASE/ROLE, 16 conns",
    );
    let mut p50 = Figure::new(scenario, "reconcile p50", Unit::Millis, "-");
    let mut p99 = Figure::new(scenario, "reconcile p99", Unit::Millis, "-");
    let mut peak = Figure::new(
        scenario,
        &format!(
            "peak drops/s after a {}s outage, {count} pending",
            settings.outage.as_secs()
        ),
        Unit::PerSecond,
        "configured --ddl-rate",
    )
    .with_goal(Goal::AtMost(f64::from(limit + burst)));
    let mut recovery = Figure::new(
        scenario,
        "PostgreSQL back → all dropped",
        Unit::Millis,
        &format!("{count} at the configured rate"),
    );
    let extra = vec![
        "--ddl-rate".to_string(),
        limit.to_string(),
        "--ddl-burst".to_string(),
        burst.to_string(),
    ];
    for run in 0..settings.runs {
        // Create and delete, timed.
        let mut stack = Stack::start(settings, "database", &extra).await?;
        let started = Instant::now();
        stack.create_databases(count).await?;
        stack
            .wait("all Ready", async || {
                Ok(stack.count(DATABASES, Some("Ready")).await?.1 == count as usize)
            })
            .await?;
        let created_ms = started.elapsed().as_secs_f64() * 1000.0;
        let pg = pg_connect(&stack.postgres.url()).await?;
        let started = Instant::now();
        stack.delete(DATABASES).await?;
        stack
            .wait("all dropped", async || {
                Ok(stack.count(DATABASES, None).await?.0 == 0
                    && pg_count(&pg, "bench_").await? == 0)
            })
            .await?;
        let deleted_ms = started.elapsed().as_secs_f64() * 1000.0;
        let metrics = stack.operator.metrics()?;
        let series = "reconcile_duration_seconds";
        let (q50, q99) = (
            histogram_quantile(&metrics, series, 0.5),
            histogram_quantile(&metrics, series, 0.99),
        );
        let (raw_create, raw_drop) = raw_ddl(&stack.postgres.url(), count).await?;
        eprintln!(
            "[{scenario}] run {}/{}: create→Ready {created_ms:.0} ms (raw {raw_create:.0} ms), delete→dropped {deleted_ms:.0} ms (raw {raw_drop:.0} ms), reconcile p50 {q50:?} ms p99 {q99:?} ms",
            run + 1,
            settings.runs
        );
        create.finale.push(created_ms);
        create.baseline.push(raw_create);
        delete.finale.push(deleted_ms);
        delete.baseline.push(raw_drop);
        p50.finale.extend(q50);
        p99.finale.extend(q99);

        // The outage: all pending deletes meet a PostgreSQL that comes back.
        stack.create_databases(count).await?;
        stack
            .wait("all Ready again", async || {
                Ok(stack.count(DATABASES, Some("Ready")).await?.1 == count as usize)
            })
            .await?;
        drop(pg);
        stack.postgres.stop()?;
        stack.delete(DATABASES).await?;
        tokio::time::sleep(settings.outage).await;
        stack.postgres.start_again()?;
        let back = Instant::now();
        let pg = pg_connect(&stack.postgres.url()).await?;
        let mut samples: VecDeque<(Instant, i64)> = VecDeque::new();
        let mut highest = 0.0f64;
        let deadline = back + CONVERGE;
        loop {
            let now = Instant::now();
            let remaining = pg_count(&pg, "bench_").await?;
            samples.push_back((now, remaining));
            while samples
                .front()
                .is_some_and(|(t, _)| now.duration_since(*t) > Duration::from_secs(1))
            {
                samples.pop_front();
            }
            if let Some((_, oldest)) = samples.front() {
                highest = highest.max((oldest - remaining) as f64);
            }
            if remaining == 0 {
                break;
            }
            if now > deadline {
                bail!("databases still left {CONVERGE:?} after PostgreSQL came back");
            }
            tokio::time::sleep(POLL).await;
        }
        let recovered_ms = back.elapsed().as_secs_f64() * 1000.0;
        eprintln!(
            "[{scenario}] run {}/{}: after a {:?} outage, peak {highest:.0} drops/s (limit {limit}/s + burst {burst}), all dropped {recovered_ms:.0} ms after PostgreSQL returned",
            run + 1,
            settings.runs,
            settings.outage
        );
        peak.finale.push(highest);
        peak.baseline.push(f64::from(limit));
        recovery.finale.push(recovered_ms);
        // Two DDL statements per database (drop database, drop role) at the configured rate.
        recovery
            .baseline
            .push(count as f64 * 2.0 / f64::from(limit) * 1000.0);
        drop(stack);
    }
    report
        .figures
        .extend([create, delete, p50, p99, peak, recovery]);
    Ok(())
}

pub async fn tenant_teardown(settings: &Settings, report: &mut Report) -> anyhow::Result<()> {
    let scenario = "tenant-teardown";
    let (namespaces, configmaps) = (settings.tenant_namespaces, settings.tenant_configmaps);
    let mut figure = Figure::new(
        scenario,
        &format!("tenant of {namespaces} ns × {configmaps} ConfigMaps × 1 Database: delete → gone"),
        Unit::Millis,
        "same namespaces, no tenant/DB, deleted directly",
    );
    for run in 0..settings.runs {
        let stack = Stack::start(settings, "all", &[]).await?;
        stack
            .post(
                "/apis/finale.dev/v1alpha1/tenants",
                json!({"apiVersion": "finale.dev/v1alpha1", "kind": "Tenant",
                       "metadata": {"name": "bench"},
                       "spec": {"namespaces": {"count": namespaces, "prefix": "bench-"},
                                "database": {"connectionSecretRef": {"namespace": "bench", "name": "pg"}}}}),
            )
            .await?;
        let databases =
            "/apis/finale.dev/v1alpha1/databases?labelSelector=finale.dev%2Ftenant%3Dbench";
        stack
            .wait("tenant databases Ready", async || {
                Ok(stack.count(databases, Some("Ready")).await?.1 == namespaces as usize)
            })
            .await?;
        fill(&stack, "bench-", namespaces, configmaps).await?;
        let started = Instant::now();
        stack
            .delete("/apis/finale.dev/v1alpha1/tenants/bench")
            .await?;
        stack
            .wait("tenant gone", async || {
                Ok(stack
                    .get("/apis/finale.dev/v1alpha1/tenants/bench")
                    .await?
                    .is_none())
            })
            .await?;
        let tenant_ms = started.elapsed().as_secs_f64() * 1000.0;
        let pg = pg_connect(&stack.postgres.url()).await?;
        let left = pg_count(&pg, "bench_bench").await?;
        if left != 0 {
            bail!("{left} tenant databases left after the tenant went");
        }
        // Baseline: the same namespaces and ConfigMaps without tenant or databases.
        for i in 0..namespaces {
            stack
                .post(
                    "/api/v1/namespaces",
                    json!({"metadata": {"name": format!("plain-{i}")}}),
                )
                .await?;
        }
        fill(&stack, "plain-", namespaces, configmaps).await?;
        let started = Instant::now();
        for i in 0..namespaces {
            stack
                .delete(&format!("/api/v1/namespaces/plain-{i}"))
                .await?;
        }
        stack
            .wait("plain namespaces gone", async || {
                for i in 0..namespaces {
                    if stack
                        .get(&format!("/api/v1/namespaces/plain-{i}"))
                        .await?
                        .is_some()
                    {
                        return Ok(false);
                    }
                }
                Ok(true)
            })
            .await?;
        let plain_ms = started.elapsed().as_secs_f64() * 1000.0;
        eprintln!(
            "[{scenario}] run {}/{}: tenant {tenant_ms:.0} ms, plain namespaces {plain_ms:.0} ms",
            run + 1,
            settings.runs
        );
        figure.finale.push(tenant_ms);
        figure.baseline.push(plain_ms);
    }
    if let Some(ms) = median(&figure.finale) {
        report
            .notes
            .push(format!("tenant teardown median {ms:.0} ms"));
    }
    report.figures.push(figure);
    Ok(())
}

/// `configmaps` ConfigMaps in each of `<prefix>0 … <prefix>{namespaces-1}`.
async fn fill(stack: &Stack, prefix: &str, namespaces: u64, configmaps: u64) -> anyhow::Result<()> {
    let requests: Vec<(String, Value)> = (0..namespaces)
        .flat_map(|n| {
            (0..configmaps).map(move |c| {
                (
                    format!("/api/v1/namespaces/{prefix}{n}/configmaps"),
                    json!({"metadata": {"name": format!("cm{c}")}, "data": {"k": "v"}}),
                )
            })
        })
        .collect();
    let results: Vec<anyhow::Result<()>> = futures::stream::iter(requests)
        .map(|(path, body)| async move { stack.post(&path, body).await })
        .buffer_unordered(CLIENTS)
        .collect()
        .await;
    results.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate_within_buckets() {
        let metrics = "\
reconcile_duration_seconds_bucket{controller=\"database\",le=\"0.001\"} 0
reconcile_duration_seconds_bucket{controller=\"database\",le=\"0.002\"} 50
reconcile_duration_seconds_bucket{controller=\"database\",le=\"0.004\"} 100
reconcile_duration_seconds_bucket{controller=\"database\",le=\"+Inf\"} 100
";
        let p50 = histogram_quantile(metrics, "reconcile_duration_seconds", 0.5).expect("p50");
        assert!((p50 - 2.0).abs() < 1e-9, "{p50}");
        let p75 = histogram_quantile(metrics, "reconcile_duration_seconds", 0.75).expect("p75");
        assert!((p75 - 3.0).abs() < 1e-9, "{p75}");
    }
}
