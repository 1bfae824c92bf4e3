//! `cloud-gc`: the external-resource GC engine against moto (`moto_server` on loopback).
//!
//! Per run, on a reset moto: 100 security groups, 100 ELBv2 load balancers (each using one of
//! the groups) and 100 target groups (each forwarded to by a listener of one load balancer),
//! all tagged `kubernetes.io/cluster/bench=owned`: 300 owned resources. Timed: the engine's
//! teardown (discovery, graph, passes, re-describe before each delete, 8 deletes in flight)
//! until a discovery finds nothing. Baseline, on the same footprint re-created: a script that
//! already knows the order and the ids deletes the load balancers, then the target groups,
//! then the groups, 8 in flight, with no discovery and no checks (the lower bound). Both count
//! the AWS API operations they send (every page counts). No rate limit on either side.

use std::time::Instant;

use anyhow::Context;
use finale_cloud_aws::{AwsCloud, ec2, elbv2};
use finale_operator::backoff::{RateLimit, RateLimits};
use finale_operator_cloud_gc::annotations::TaskSet;
use finale_operator_cloud_gc::cloud::{Action, CloudApi, Kind, StaticCredentials, Target};
use finale_operator_cloud_gc::engine::{self, Discovery, Scope};
use futures::StreamExt;

use crate::report::{Figure, Goal, Report, Unit};
use crate::scenarios::Settings;

const SCENARIO: &str = "cloud-gc";
const EACH: usize = 100;
const IN_FLIGHT: usize = 8;
/// The goals: at most 1.5× the ordered script's time and 1.3× its API calls.
const GOAL_TIME_RATIO: f64 = 1.5;
const GOAL_CALLS_RATIO: f64 = 1.3;

/// What a discovery finds collectable: the precondition (all 300 are there) and the end
/// (nothing is left), checked on both sides.
async fn collectable(cloud: &AwsCloud, scope: &Scope) -> anyhow::Result<usize> {
    let inventory = engine::discover(cloud, scope)
        .await
        .map_err(|e| anyhow::anyhow!("discovery: {e}"))?;
    Ok(inventory.collectable().count())
}

struct Footprint {
    load_balancers: Vec<String>,
    target_groups: Vec<String>,
    groups: Vec<String>,
}

async fn create(target: &Target) -> anyhow::Result<Footprint> {
    let config = finale_cloud_aws::sdk_config(target).await;
    let ec2 = ec2::Client::new(&config);
    let elbv2 = elbv2::Client::new(&config);
    let vpc = ec2
        .create_vpc()
        .cidr_block("10.0.0.0/16")
        .send()
        .await?
        .vpc()
        .and_then(|v| v.vpc_id())
        .context("vpc id")?
        .to_string();
    let mut subnets = Vec::new();
    for (i, zone) in ["us-east-1a", "us-east-1b"].iter().enumerate() {
        subnets.push(
            ec2.create_subnet()
                .vpc_id(&vpc)
                .cidr_block(format!("10.0.{i}.0/24"))
                .availability_zone(*zone)
                .send()
                .await?
                .subnet()
                .and_then(|s| s.subnet_id())
                .context("subnet id")?
                .to_string(),
        );
    }
    let owned = ec2::types::Tag::builder()
        .key("kubernetes.io/cluster/bench")
        .value("owned")
        .build();
    let elb_owned = elbv2::types::Tag::builder()
        .key("kubernetes.io/cluster/bench")
        .value("owned")
        .build();
    let mut footprint = Footprint {
        load_balancers: Vec::new(),
        target_groups: Vec::new(),
        groups: Vec::new(),
    };
    for i in 0..EACH {
        let group = ec2
            .create_security_group()
            .group_name(format!("bench-{i}"))
            .description("bench")
            .vpc_id(&vpc)
            .tag_specifications(
                ec2::types::TagSpecification::builder()
                    .resource_type(ec2::types::ResourceType::SecurityGroup)
                    .tags(owned.clone())
                    .build(),
            )
            .send()
            .await?
            .group_id()
            .context("group id")?
            .to_string();
        let lb = elbv2
            .create_load_balancer()
            .name(format!("bench-{i}"))
            .set_subnets(Some(subnets.clone()))
            .security_groups(&group)
            .tags(elb_owned.clone())
            .send()
            .await?
            .load_balancers()
            .first()
            .and_then(|lb| lb.load_balancer_arn())
            .context("lb arn")?
            .to_string();
        let tg = elbv2
            .create_target_group()
            .name(format!("bench-{i}"))
            .protocol(elbv2::types::ProtocolEnum::Http)
            .port(80)
            .vpc_id(&vpc)
            .tags(elb_owned.clone())
            .send()
            .await?
            .target_groups()
            .first()
            .and_then(|tg| tg.target_group_arn())
            .context("tg arn")?
            .to_string();
        elbv2
            .create_listener()
            .load_balancer_arn(&lb)
            .protocol(elbv2::types::ProtocolEnum::Http)
            .port(80)
            .default_actions(
                elbv2::types::Action::builder()
                    .r#type(elbv2::types::ActionTypeEnum::Forward)
                    .target_group_arn(&tg)
                    .build(),
            )
            .send()
            .await?;
        footprint.groups.push(group);
        footprint.load_balancers.push(lb);
        footprint.target_groups.push(tg);
    }
    Ok(footprint)
}

/// The ordered script: each kind in turn, `IN_FLIGHT` at once.
async fn baseline(cloud: &AwsCloud, footprint: &Footprint) -> anyhow::Result<()> {
    for (kind, ids) in [
        (Kind::LoadBalancer, &footprint.load_balancers),
        (Kind::TargetGroup, &footprint.target_groups),
        (Kind::SecurityGroup, &footprint.groups),
    ] {
        let results: Vec<_> = futures::stream::iter(ids.iter())
            .map(|id| async move {
                cloud
                    .act(&Action::Delete {
                        kind,
                        id: id.clone(),
                    })
                    .await
            })
            .buffer_unordered(IN_FLIGHT)
            .collect()
            .await;
        for result in results {
            result.map_err(|e| anyhow::anyhow!("baseline delete: {e}"))?;
        }
    }
    Ok(())
}

pub async fn run(settings: &Settings, report: &mut Report) -> anyhow::Result<()> {
    let dir = tempfile::tempdir().context("temporary directory")?;
    let path = dir.path().to_path_buf();
    let moto = tokio::task::spawn_blocking(move || finale_e2e::moto::Moto::start(&path))
        .await
        .context("moto start task")??;
    let target = Target {
        region: "us-east-1".into(),
        endpoint: Some(moto.url()),
        credentials: Some(StaticCredentials {
            access_key_id: "bench".into(),
            secret_access_key: "bench".into(),
            session_token: None,
        }),
    };
    let scope = Scope {
        cluster_name: "bench".into(),
        tasks: TaskSet::default(),
        load_balancer_controller_tag: false,
        discovery: Discovery::Tagging,
    };
    let options = engine::Options {
        concurrency: IN_FLIGHT,
        budget: std::time::Duration::from_secs(600),
        account: target.account_key(),
    };
    let limits = RateLimits::new(RateLimit::new(100_000, 100_000).context("limit")?);
    let total = 3 * EACH;
    let mut time = Figure::new(
        SCENARIO,
        &format!("{total} owned resources: teardown (ms)"),
        Unit::Millis,
        "ordered script, ids known",
    )
    .with_goal(Goal::RatioAtMost(GOAL_TIME_RATIO));
    let mut calls = Figure::new(
        SCENARIO,
        &format!("{total} owned resources: AWS API calls"),
        Unit::Count,
        "ordered script, ids known",
    )
    .with_goal(Goal::RatioAtMost(GOAL_CALLS_RATIO));
    for run in 0..settings.runs {
        eprintln!(
            "[{SCENARIO}] run {}/{}: creating {total} resources",
            run + 1,
            settings.runs
        );
        moto.reset()?;
        create(&target).await?;
        let checker = AwsCloud::connect(&target).await;
        let found = collectable(&checker, &scope).await?;
        anyhow::ensure!(
            found == total,
            "the footprint was not created whole: discovery finds {found} of {total}"
        );
        let cloud = AwsCloud::connect(&target).await;
        let started = Instant::now();
        loop {
            let report = engine::teardown(&cloud, &scope, &options, &limits)
                .await
                .map_err(|(e, _)| anyhow::anyhow!("teardown: {e}"))?;
            if report.complete {
                break;
            }
            anyhow::ensure!(
                started.elapsed() < std::time::Duration::from_secs(600),
                "the teardown did not finish within 10 minutes"
            );
        }
        let finale_ms = started.elapsed().as_secs_f64() * 1000.0;
        let left = collectable(&checker, &scope).await?;
        anyhow::ensure!(left == 0, "the engine said complete, yet {left} are left");
        time.finale.push(finale_ms);
        calls.finale.push(cloud.calls() as f64);

        moto.reset()?;
        let footprint = create(&target).await?;
        let cloud = AwsCloud::connect(&target).await;
        let started = Instant::now();
        baseline(&cloud, &footprint).await?;
        let baseline_ms = started.elapsed().as_secs_f64() * 1000.0;
        let left = collectable(&checker, &scope).await?;
        anyhow::ensure!(left == 0, "the ordered script left {left} resources");
        time.baseline.push(baseline_ms);
        calls.baseline.push(cloud.calls() as f64);
        eprintln!(
            "[{SCENARIO}] run {}: teardown {finale_ms:.0} ms, {} calls; ordered script {baseline_ms:.0} ms, {} calls",
            run + 1,
            calls.finale.last().copied().unwrap_or_default(),
            calls.baseline.last().copied().unwrap_or_default(),
        );
    }
    report.figures.push(time);
    report.figures.push(calls);
    Ok(())
}
