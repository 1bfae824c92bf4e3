//! `finale gc`: external-resource GC from the command line, on kubeconfig like kubectl.
//!
//! - `enable|disable NAME` set the opt-out annotation of a `CloudCluster` and add or remove its
//!   finalizer (on a terminating object only the annotation changes; the operator reads it);
//! - `configure NAME --task …` sets the tasks (none: back to the default);
//! - `plan NAME` is the dry run: the owned inventory in deletion order, with what blocks what,
//!   computed by the same engine the operator deletes with;
//! - `status NAME` shows what is left during a deletion, and why;
//! - `run --region R --cluster-name N [--endpoint URL] [--yes]` sweeps an account without any
//!   `CloudCluster` (out-of-cluster cleanup); it only plans unless given `--yes`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use finale_operator::backoff::{RateLimit, RateLimits};
use finale_operator::client::{Clients, Environment, load_config};
use finale_operator_cloud_gc::annotations::{GC_ANNOTATION, TASKS_ANNOTATION, TaskSet};
use finale_operator_cloud_gc::cloud::{Connector, Target};
use finale_operator_cloud_gc::engine::{self, Discovery, Disposition, Inventory, Scope};
use finale_operator_cloud_gc::{CloudCluster, GC_FINALIZER, reconciler};
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;

#[derive(clap::Subcommand)]
pub enum Gc {
    /// Opt a CloudCluster in: its cloud resources go with it.
    Enable(Named),
    /// Opt a CloudCluster out: its cloud resources stay when it is deleted.
    Disable(Named),
    /// Choose what is collected (`--task` repeated; none: every task but volume).
    Configure(Configure),
    /// Dry run: the owned inventory, in deletion order, with what blocks what.
    Plan(Named),
    /// What is left during a deletion, and why.
    Status(Named),
    /// One-shot sweep of an account for a cluster name, without a CloudCluster. Only plans
    /// unless given --yes.
    Run(RunArgs),
}

#[derive(clap::Args)]
pub struct Kube {
    /// The kubeconfig to use (else $KUBECONFIG, then ~/.kube/config).
    #[arg(long, value_name = "PATH")]
    kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use.
    #[arg(long)]
    context: Option<String>,
    /// The CloudCluster's namespace.
    #[arg(short, long, default_value = "default")]
    namespace: String,
}

#[derive(clap::Args)]
pub struct Named {
    /// The CloudCluster.
    name: String,
    #[command(flatten)]
    kube: Kube,
}

#[derive(clap::Args)]
pub struct Configure {
    name: String,
    /// load-balancer, target-group, security-group, network-interface, elastic-ip or volume.
    #[arg(long = "task", value_name = "TASK")]
    tasks: Vec<String>,
    #[command(flatten)]
    kube: Kube,
}

#[derive(clap::Args)]
pub struct RunArgs {
    #[arg(long)]
    region: String,
    /// Resources tagged kubernetes.io/cluster/<NAME>=owned are collected.
    #[arg(long, value_name = "NAME")]
    cluster_name: String,
    /// A URL replacing every AWS endpoint (an emulator, a private endpoint).
    #[arg(long)]
    endpoint: Option<String>,
    /// What to collect (repeatable; default: every task but volume).
    #[arg(long = "task", value_name = "TASK")]
    tasks: Vec<String>,
    #[arg(long, default_value = "tagging")]
    discovery: Discovery,
    /// Also own what carries elbv2.k8s.aws/cluster=<NAME>.
    #[arg(long)]
    load_balancer_controller_tags: bool,
    /// Delete. Without it, only the plan is printed and nothing is deleted.
    #[arg(long)]
    yes: bool,
    /// How long to keep retrying blocked resources with --yes.
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    timeout: Duration,
}

pub async fn run(command: Gc) -> anyhow::Result<std::process::ExitCode> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    match command {
        Gc::Enable(named) => switch(&named, true).await,
        Gc::Disable(named) => switch(&named, false).await,
        Gc::Configure(args) => configure(args).await,
        Gc::Plan(named) => plan(&named).await,
        Gc::Status(named) => status(&named).await,
        Gc::Run(args) => sweep(args).await,
    }
}

async fn client(kube: &Kube) -> anyhow::Result<Client> {
    let (config, _) = load_config(
        kube.kubeconfig.as_deref(),
        kube.context.as_deref(),
        &Environment::of_process(),
    )
    .await?;
    Ok(Clients::new(config)?.requests)
}

async fn cluster(kube: &Kube, name: &str) -> anyhow::Result<(Client, CloudCluster)> {
    let client = client(kube).await?;
    let api: Api<CloudCluster> = Api::namespaced(client.clone(), &kube.namespace);
    let cluster = api
        .get_opt(name)
        .await
        .with_context(|| format!("reading CloudCluster {}/{name}", kube.namespace))?
        .with_context(|| format!("CloudCluster {}/{name} not found", kube.namespace))?;
    Ok((client, cluster))
}

fn parse_tasks(tasks: &[String]) -> anyhow::Result<TaskSet> {
    TaskSet::parse(&tasks.join(",")).map_err(anyhow::Error::msg)
}

/// How many times `gc enable|disable` re-reads and retries when the operator wrote the object
/// between our read and our patch (its finalizer list is guarded by resourceVersion).
const CONFLICT_RETRIES: usize = 5;

async fn switch(named: &Named, on: bool) -> anyhow::Result<std::process::ExitCode> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        match switch_once(named, on).await {
            Err(error) if attempt < CONFLICT_RETRIES && is_conflict(&error) => {
                tracing::debug!(attempt, "CloudCluster changed under us; reading it again");
            }
            Err(error) => return Err(error),
            Ok(()) => break,
        }
    }
    println!(
        "cloudcluster {}/{}: external-resource GC {}",
        named.kube.namespace,
        named.name,
        if on {
            "enabled"
        } else {
            "disabled: its cloud resources stay when it is deleted"
        }
    );
    Ok(std::process::ExitCode::SUCCESS)
}

fn is_conflict(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        matches!(
            cause.downcast_ref::<kube::Error>(),
            Some(kube::Error::Api(status)) if status.code == 409
        )
    })
}

async fn switch_once(named: &Named, on: bool) -> anyhow::Result<()> {
    let (client, cluster) = cluster(&named.kube, &named.name).await?;
    let api: Api<CloudCluster> = Api::namespaced(client, &named.kube.namespace);
    let value = if on { "true" } else { "false" };
    let mut metadata = json!({"annotations": {GC_ANNOTATION: value}});
    // The finalizer too, at once (the operator would do it on its next pass); a terminating
    // object keeps its finalizers: its cleanup reads the annotation.
    if cluster.metadata.deletion_timestamp.is_none() {
        let mut finalizers: Vec<String> = cluster
            .finalizers()
            .iter()
            .filter(|f| *f != GC_FINALIZER)
            .cloned()
            .collect();
        if on {
            finalizers.push(GC_FINALIZER.to_string());
        }
        metadata["finalizers"] = json!(finalizers);
        metadata["resourceVersion"] = json!(cluster.resource_version());
    }
    api.patch(
        &named.name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "metadata": metadata })),
    )
    .await
    .with_context(|| {
        format!(
            "updating CloudCluster {}/{}",
            named.kube.namespace, named.name
        )
    })?;
    Ok(())
}

async fn configure(args: Configure) -> anyhow::Result<std::process::ExitCode> {
    let tasks = parse_tasks(&args.tasks)?;
    let (client, _) = cluster(&args.kube, &args.name).await?;
    let api: Api<CloudCluster> = Api::namespaced(client, &args.kube.namespace);
    let value = if args.tasks.is_empty() {
        serde_json::Value::Null
    } else {
        json!(tasks.to_annotation())
    };
    api.patch(
        &args.name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {TASKS_ANNOTATION: value}}})),
    )
    .await
    .with_context(|| {
        format!(
            "updating CloudCluster {}/{}",
            args.kube.namespace, args.name
        )
    })?;
    println!(
        "cloudcluster {}/{}: tasks {}",
        args.kube.namespace,
        args.name,
        tasks.to_annotation()
    );
    Ok(std::process::ExitCode::SUCCESS)
}

/// Prints an inventory's plan: the deletion order with blockers, then what is kept.
fn print_plan(inventory: &Inventory) {
    let plan = inventory.plan();
    println!("{:>4}  {:<22} {:<40} WAITS FOR", "STEP", "TYPE", "RESOURCE");
    for (step, (resource, blockers)) in plan.iter().enumerate() {
        let waits = blockers
            .iter()
            .map(|b| b.label.clone())
            .collect::<Vec<_>>()
            .join(", ");
        println!(
            "{:>4}  {:<22} {:<40} {}",
            step + 1,
            resource.kind.name(),
            resource.name.as_deref().unwrap_or(&resource.id),
            if waits.is_empty() { "-".into() } else { waits }
        );
    }
    for item in &inventory.items {
        if let Disposition::Keep(reason) = &item.disposition {
            println!("kept: {} ({reason})", item.resource.label());
        }
    }
    println!("{} to delete", plan.len());
}

async fn plan(named: &Named) -> anyhow::Result<std::process::ExitCode> {
    let (client, cluster) = cluster(&named.kube, &named.name).await?;
    let scope = reconciler::scope(&cluster, Discovery::Tagging).map_err(anyhow::Error::msg)?;
    let target = reconciler::target(&client, &cluster).await?;
    let cloud = finale_cloud_aws::AwsConnector.connect(&target).await?;
    let inventory = engine::discover(cloud.as_ref(), &scope)
        .await
        .with_context(|| {
            format!(
                "discovering the resources of cluster {}",
                scope.cluster_name
            )
        })?;
    println!(
        "cluster {} in {} (tag {}=owned, tasks {}); nothing is deleted by a plan",
        scope.cluster_name,
        target.region,
        scope.owned_tag(),
        scope.tasks.to_annotation()
    );
    print_plan(&inventory);
    Ok(std::process::ExitCode::SUCCESS)
}

async fn status(named: &Named) -> anyhow::Result<std::process::ExitCode> {
    let (_, cluster) = cluster(&named.kube, &named.name).await?;
    let status = cluster.status.clone().unwrap_or_default();
    println!(
        "cloudcluster {}/{}: GC {}, tasks {}, cluster {}{}",
        named.kube.namespace,
        named.name,
        status.gc.as_deref().unwrap_or("unknown"),
        status.tasks.as_deref().unwrap_or("-"),
        reconciler::cluster_name(&cluster),
        if cluster.metadata.deletion_timestamp.is_some() {
            ", deleting"
        } else {
            ""
        }
    );
    for condition in &status.conditions {
        println!(
            "{}={} ({}): {}",
            condition.type_, condition.status, condition.reason, condition.message
        );
    }
    if !status.deleted.is_empty() {
        println!("deleted: {}", reconciler::counts(&status.deleted));
    }
    if !status.inventory.is_empty() {
        println!("{:<22} {:<40} {:<8} WHY", "TYPE", "RESOURCE", "STATE");
        for item in &status.inventory {
            let mut why = item.blocked_by.join(", ");
            if let Some(error) = &item.last_error {
                why = if why.is_empty() {
                    error.clone()
                } else {
                    format!("{why} ({error})")
                };
            }
            println!(
                "{:<22} {:<40} {:<8} {}",
                item.type_,
                item.name.as_deref().unwrap_or(&item.id),
                item.state,
                why
            );
        }
    }
    Ok(std::process::ExitCode::SUCCESS)
}

async fn sweep(args: RunArgs) -> anyhow::Result<std::process::ExitCode> {
    let scope = Scope {
        cluster_name: args.cluster_name.clone(),
        tasks: parse_tasks(&args.tasks)?,
        load_balancer_controller_tag: args.load_balancer_controller_tags,
        discovery: args.discovery,
    };
    let target = Target {
        region: args.region.clone(),
        endpoint: args.endpoint.clone(),
        credentials: None,
    };
    let cloud = finale_cloud_aws::AwsConnector.connect(&target).await?;
    let inventory = engine::discover(cloud.as_ref(), &scope)
        .await
        .with_context(|| {
            format!(
                "discovering the resources of cluster {}",
                scope.cluster_name
            )
        })?;
    print_plan(&inventory);
    if !args.yes {
        println!("dry run: nothing was deleted (add --yes to delete)");
        return Ok(std::process::ExitCode::SUCCESS);
    }
    let limits = RateLimits::new(RateLimit::new(20, 40).context("rate")?);
    let options = engine::Options {
        concurrency: 8,
        budget: Duration::from_secs(30),
        account: target.account_key(),
    };
    let deadline = Instant::now() + args.timeout;
    let mut deleted = 0;
    loop {
        let report = engine::teardown(cloud.as_ref(), &scope, &options, &limits)
            .await
            .map_err(|(error, _)| anyhow::anyhow!("discovering: {error}"))?;
        for resource in &report.deleted {
            println!("deleted {}", resource.label());
        }
        deleted += report.deleted.len();
        if report.complete {
            println!("done: {deleted} deleted, nothing owned is left");
            return Ok(std::process::ExitCode::SUCCESS);
        }
        if Instant::now() > deadline {
            for (resource, by, error) in report.blocked() {
                eprintln!(
                    "blocked: {} by {}{}",
                    resource.label(),
                    by.join(", "),
                    error.map(|e| format!(" ({e})")).unwrap_or_default()
                );
            }
            for (resource, error) in report.failures() {
                eprintln!("failed: {}: {error}", resource.label());
            }
            anyhow::bail!(
                "{} owned resources are left after {:?}",
                report.inventory.collectable().count(),
                args.timeout
            );
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use finale_operator_cloud_gc::annotations::Task;

    #[test]
    fn tasks_parse_like_the_annotation() {
        assert_eq!(parse_tasks(&[]).expect("default"), TaskSet::default());
        assert!(parse_tasks(&["volumes".into()]).is_err());
        assert!(
            parse_tasks(&["volume".into()])
                .expect("volume")
                .contains(Task::Volume)
        );
    }
}
