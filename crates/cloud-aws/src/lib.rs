//! The AWS side of external-resource GC: [`AwsCloud`] implements the engine's
//! [`CloudApi`](finale_operator_cloud_gc::cloud::CloudApi) with the official AWS SDK for Rust
//! (EC2, classic ELB, ELBv2 and the Resource Groups Tagging API), and [`AwsConnector`] builds
//! one per target.
//!
//! Kept in its own crate because the SDK is heavy to compile (aws-sdk-ec2 alone is over a
//! million lines): the engine, the operator and their unit tests build without it.
//!
//! # Guarantees
//! - One HTTP stack: hyper 1 with rustls on `ring` (no aws-lc, no C crypto, no legacy
//!   hyper 0.14 connector); `http://` endpoints (emulators) are spoken in plain HTTP.
//! - Every call is bounded: 5 s to connect, 30 s per attempt, 90 s per operation with the SDK's
//!   standard retries (3 attempts, with jittered backoff on throttling).
//! - Every listing is paged to the end: `GetResources`, `DescribeSecurityGroups`,
//!   `DescribeNetworkInterfaces`, `DescribeVolumes`, ELB and ELBv2 `DescribeLoadBalancers` and
//!   `DescribeTargetGroups`; ELB tags are read 20 resources per `DescribeTags`, the API's limit.
//! - [`AwsCloud::calls`] counts the HTTP operations sent (each page is one).
//!
//! # Caveats
//! - Describing ELB resources by id lists them all and filters, because the ELB APIs fail the
//!   whole call when one of the names is gone; a single id is asked for directly.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use aws_config::BehaviorVersion;
use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_credential_types::Credentials;
use aws_sdk_ec2::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_ec2::types::{Filter, IpPermission, UserIdGroupPair};
use finale_operator_cloud_gc::cloud::{
    Action, CloudApi, CloudError, Connector, Kind, Query, Resource, Target,
};

// The SDK crates, for callers that create resources (tests, benchmarks) with the same
// configuration as the engine.
pub use aws_sdk_ec2 as ec2;
pub use aws_sdk_elasticloadbalancing as elb;
pub use aws_sdk_elasticloadbalancingv2 as elbv2;
pub use aws_sdk_resourcegroupstagging as tagging;

/// How many ids or values go in one filter (AWS accepts up to 200 values per filter).
const FILTER_CHUNK: usize = 100;
/// ELB `DescribeTags` takes at most 20 resources.
const TAGS_CHUNK: usize = 20;

/// The SDK clients for one target.
pub struct AwsCloud {
    ec2: aws_sdk_ec2::Client,
    elb: aws_sdk_elasticloadbalancing::Client,
    elbv2: aws_sdk_elasticloadbalancingv2::Client,
    tagging: aws_sdk_resourcegroupstagging::Client,
    calls: AtomicU64,
}

/// Builds [`AwsCloud`]s.
#[derive(Clone, Debug, Default)]
pub struct AwsConnector;

#[async_trait]
impl Connector for AwsConnector {
    async fn connect(&self, target: &Target) -> anyhow::Result<Arc<dyn CloudApi>> {
        Ok(Arc::new(AwsCloud::connect(target).await))
    }
}

fn cloud_error<E, R>(error: SdkError<E, R>) -> CloudError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    match error.as_service_error() {
        Some(service) if service.code().is_some() => {
            CloudError::from_code(service.code(), service.message().unwrap_or_default())
        }
        _ => CloudError::other(DisplayErrorContext(&error).to_string()),
    }
}

fn tag_map<'a>(
    tags: impl IntoIterator<Item = (Option<&'a str>, Option<&'a str>)>,
) -> BTreeMap<String, String> {
    tags.into_iter()
        .filter_map(|(k, v)| Some((k?.to_string(), v.unwrap_or_default().to_string())))
        .collect()
}

fn ec2_tags(tags: &[aws_sdk_ec2::types::Tag]) -> BTreeMap<String, String> {
    tag_map(tags.iter().map(|t| (t.key(), t.value())))
}

/// The EC2 filters that select `query` for a kind whose id filter is `id_filter`.
fn ec2_filters(query: &Query, id_filter: &str) -> Vec<Vec<Filter>> {
    let filter = |name: &str, values: &[String]| {
        Filter::builder()
            .name(name)
            .set_values(Some(values.to_vec()))
            .build()
    };
    match query {
        Query::Ids(ids) => ids
            .chunks(FILTER_CHUNK)
            .map(|chunk| vec![filter(id_filter, chunk)])
            .collect(),
        Query::Tagged { key, value } => vec![vec![filter(
            &format!("tag:{key}"),
            std::slice::from_ref(value),
        )]],
        Query::UsingGroups(groups) => groups
            .chunks(FILTER_CHUNK)
            .map(|chunk| vec![filter("group-id", chunk)])
            .collect(),
    }
}

/// The SDK configuration for `target`: its region, endpoint override and static credentials
/// (else the SDK's default chain), with the HTTP client, retries and timeouts described above.
pub async fn sdk_config(target: &Target) -> aws_config::SdkConfig {
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(aws_smithy_http_client::tls::Provider::Rustls(
            aws_smithy_http_client::tls::rustls_provider::CryptoMode::Ring,
        ))
        .build_https();
    let mut loader = aws_config::defaults(BehaviorVersion::v2026_01_12())
        .region(aws_config::Region::new(target.region.clone()))
        .http_client(http)
        .retry_config(RetryConfig::standard().with_max_attempts(3))
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(Duration::from_secs(5))
                .operation_attempt_timeout(Duration::from_secs(30))
                .operation_timeout(Duration::from_secs(90))
                .build(),
        );
    if let Some(endpoint) = &target.endpoint {
        loader = loader.endpoint_url(endpoint);
    }
    if let Some(credentials) = &target.credentials {
        loader = loader.credentials_provider(Credentials::new(
            credentials.access_key_id.clone(),
            credentials.secret_access_key.clone(),
            credentials.session_token.clone(),
            None,
            "finale-credentials-secret",
        ));
    }
    loader.load().await
}

impl AwsCloud {
    /// Clients for `target` ([`sdk_config`]).
    pub async fn connect(target: &Target) -> AwsCloud {
        let config = sdk_config(target).await;
        AwsCloud {
            ec2: aws_sdk_ec2::Client::new(&config),
            elb: aws_sdk_elasticloadbalancing::Client::new(&config),
            elbv2: aws_sdk_elasticloadbalancingv2::Client::new(&config),
            tagging: aws_sdk_resourcegroupstagging::Client::new(&config),
            calls: AtomicU64::new(0),
        }
    }

    /// HTTP operations sent so far (each page counts).
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    fn count(&self) {
        self.calls.fetch_add(1, Ordering::Relaxed);
    }

    async fn security_groups(&self, query: &Query) -> Result<Vec<Resource>, CloudError> {
        let mut found = Vec::new();
        for filters in ec2_filters(query, "group-id") {
            let mut pages = self
                .ec2
                .describe_security_groups()
                .set_filters(Some(filters))
                .into_paginator()
                .send();
            loop {
                self.count();
                let Some(page) = pages.next().await else {
                    break;
                };
                for group in page.map_err(cloud_error)?.security_groups() {
                    let Some(id) = group.group_id() else { continue };
                    let references: BTreeSet<String> = group
                        .ip_permissions()
                        .iter()
                        .chain(group.ip_permissions_egress())
                        .flat_map(|p| p.user_id_group_pairs())
                        .filter_map(|pair| pair.group_id())
                        .filter(|g| *g != id)
                        .map(str::to_string)
                        .collect();
                    let mut resource = Resource::new(Kind::SecurityGroup, id);
                    resource.name = group.group_name().map(str::to_string);
                    resource.tags = ec2_tags(group.tags());
                    resource.default_group = group.group_name() == Some("default");
                    resource.references = references.into_iter().collect();
                    found.push(resource);
                }
            }
        }
        Ok(found)
    }

    async fn network_interfaces(&self, query: &Query) -> Result<Vec<Resource>, CloudError> {
        let mut found = Vec::new();
        for filters in ec2_filters(query, "network-interface-id") {
            let mut pages = self
                .ec2
                .describe_network_interfaces()
                .set_filters(Some(filters))
                .into_paginator()
                .send();
            loop {
                self.count();
                let Some(page) = pages.next().await else {
                    break;
                };
                for eni in page.map_err(cloud_error)?.network_interfaces() {
                    let Some(id) = eni.network_interface_id() else {
                        continue;
                    };
                    let mut resource = Resource::new(Kind::NetworkInterface, id);
                    resource.tags = ec2_tags(eni.tag_set());
                    resource.security_groups = eni
                        .groups()
                        .iter()
                        .filter_map(|g| g.group_id())
                        .map(str::to_string)
                        .collect();
                    let available = eni.status().map(|s| s.as_str()) == Some("available");
                    if !available {
                        resource.attached_to = Some(
                            eni.attachment()
                                .and_then(|a| a.instance_id())
                                .map(str::to_string)
                                .or_else(|| eni.description().map(|d| format!("{d:?}")))
                                .unwrap_or_else(|| "something (in use)".to_string()),
                        );
                    }
                    found.push(resource);
                }
            }
        }
        Ok(found)
    }

    async fn addresses(&self, query: &Query) -> Result<Vec<Resource>, CloudError> {
        let mut found = Vec::new();
        for filters in ec2_filters(query, "allocation-id") {
            self.count();
            let answer = self
                .ec2
                .describe_addresses()
                .set_filters(Some(filters))
                .send()
                .await
                .map_err(cloud_error)?;
            for address in answer.addresses() {
                let Some(id) = address.allocation_id() else {
                    continue;
                };
                let mut resource = Resource::new(Kind::ElasticIp, id);
                resource.name = address.public_ip().map(str::to_string);
                resource.tags = ec2_tags(address.tags());
                resource.association = address.association_id().map(str::to_string);
                resource.network_interface = address.network_interface_id().map(str::to_string);
                found.push(resource);
            }
        }
        Ok(found)
    }

    async fn volumes(&self, query: &Query) -> Result<Vec<Resource>, CloudError> {
        let mut found = Vec::new();
        for filters in ec2_filters(query, "volume-id") {
            let mut pages = self
                .ec2
                .describe_volumes()
                .set_filters(Some(filters))
                .into_paginator()
                .send();
            loop {
                self.count();
                let Some(page) = pages.next().await else {
                    break;
                };
                for volume in page.map_err(cloud_error)?.volumes() {
                    let Some(id) = volume.volume_id() else {
                        continue;
                    };
                    let mut resource = Resource::new(Kind::Volume, id);
                    resource.tags = ec2_tags(volume.tags());
                    let in_use = volume.state().map(|s| s.as_str()) != Some("available");
                    if in_use {
                        resource.attached_to = Some(
                            volume
                                .attachments()
                                .iter()
                                .find_map(|a| a.instance_id())
                                .unwrap_or("an instance")
                                .to_string(),
                        );
                    }
                    found.push(resource);
                }
            }
        }
        Ok(found)
    }

    /// ELBv2 load balancers: all of them, or the one `single` names (`None` when gone).
    async fn load_balancers_v2(&self, single: Option<&str>) -> Result<Vec<Resource>, CloudError> {
        let mut found = Vec::new();
        let mut pages = self
            .elbv2
            .describe_load_balancers()
            .set_load_balancer_arns(single.map(|id| vec![id.to_string()]))
            .into_paginator()
            .send();
        loop {
            self.count();
            let Some(page) = pages.next().await else {
                break;
            };
            let page = match page.map_err(cloud_error) {
                Err(error) if single.is_some() && is_not_found(&error) => return Ok(Vec::new()),
                other => other?,
            };
            for lb in page.load_balancers() {
                let Some(arn) = lb.load_balancer_arn() else {
                    continue;
                };
                let mut resource = Resource::new(Kind::LoadBalancer, arn);
                resource.name = lb.load_balancer_name().map(str::to_string);
                resource.security_groups = lb.security_groups().to_vec();
                found.push(resource);
            }
        }
        Ok(found)
    }

    async fn target_groups(&self, single: Option<&str>) -> Result<Vec<Resource>, CloudError> {
        let mut found = Vec::new();
        let mut pages = self
            .elbv2
            .describe_target_groups()
            .set_target_group_arns(single.map(|id| vec![id.to_string()]))
            .into_paginator()
            .send();
        loop {
            self.count();
            let Some(page) = pages.next().await else {
                break;
            };
            let page = match page.map_err(cloud_error) {
                Err(error) if single.is_some() && is_not_found(&error) => return Ok(Vec::new()),
                other => other?,
            };
            for group in page.target_groups() {
                let Some(arn) = group.target_group_arn() else {
                    continue;
                };
                let mut resource = Resource::new(Kind::TargetGroup, arn);
                resource.name = group.target_group_name().map(str::to_string);
                resource.load_balancers = group.load_balancer_arns().to_vec();
                found.push(resource);
            }
        }
        Ok(found)
    }

    /// Fills in the tags of ELBv2 resources, 20 per call.
    async fn elbv2_tags(&self, resources: &mut [Resource]) -> Result<(), CloudError> {
        for chunk in resources.chunks_mut(TAGS_CHUNK) {
            self.count();
            let answer = self
                .elbv2
                .describe_tags()
                .set_resource_arns(Some(chunk.iter().map(|r| r.id.clone()).collect()))
                .send()
                .await
                .map_err(cloud_error)?;
            for description in answer.tag_descriptions() {
                let tags = tag_map(description.tags().iter().map(|t| (t.key(), t.value())));
                if let Some(resource) = chunk
                    .iter_mut()
                    .find(|r| Some(r.id.as_str()) == description.resource_arn())
                {
                    resource.tags = tags;
                }
            }
        }
        Ok(())
    }

    async fn classic_load_balancers(
        &self,
        single: Option<&str>,
    ) -> Result<Vec<Resource>, CloudError> {
        let mut found = Vec::new();
        let mut pages = self
            .elb
            .describe_load_balancers()
            .set_load_balancer_names(single.map(|id| vec![id.to_string()]))
            .into_paginator()
            .send();
        loop {
            self.count();
            let Some(page) = pages.next().await else {
                break;
            };
            let page = match page.map_err(cloud_error) {
                Err(error) if single.is_some() && is_not_found(&error) => return Ok(Vec::new()),
                other => other?,
            };
            for lb in page.load_balancer_descriptions() {
                let Some(name) = lb.load_balancer_name() else {
                    continue;
                };
                let mut resource = Resource::new(Kind::ClassicLoadBalancer, name);
                resource.security_groups = lb.security_groups().to_vec();
                found.push(resource);
            }
        }
        for chunk in found.chunks_mut(TAGS_CHUNK) {
            self.count();
            let answer = self
                .elb
                .describe_tags()
                .set_load_balancer_names(Some(chunk.iter().map(|r| r.id.clone()).collect()))
                .send()
                .await
                .map_err(cloud_error)?;
            for description in answer.tag_descriptions() {
                let tags = tag_map(
                    description
                        .tags()
                        .iter()
                        .map(|t| (Some(t.key()), t.value())),
                );
                if let Some(resource) = chunk
                    .iter_mut()
                    .find(|r| Some(r.id.as_str()) == description.load_balancer_name())
                {
                    resource.tags = tags;
                }
            }
        }
        Ok(found)
    }

    /// The rules of `group` that reference `referenced`, ingress and egress.
    async fn revoke_references(&self, group: &str, referenced: &str) -> Result<(), CloudError> {
        self.count();
        let answer = self
            .ec2
            .describe_security_groups()
            .filters(Filter::builder().name("group-id").values(group).build())
            .send()
            .await
            .map_err(cloud_error)?;
        let Some(stored) = answer.security_groups().first() else {
            return Ok(());
        };
        let only_referencing = |permissions: &[IpPermission]| -> Vec<IpPermission> {
            permissions
                .iter()
                .filter(|p| {
                    p.user_id_group_pairs()
                        .iter()
                        .any(|pair| pair.group_id() == Some(referenced))
                })
                .map(|p| {
                    IpPermission::builder()
                        .set_ip_protocol(p.ip_protocol().map(str::to_string))
                        .set_from_port(p.from_port())
                        .set_to_port(p.to_port())
                        .user_id_group_pairs(
                            UserIdGroupPair::builder().group_id(referenced).build(),
                        )
                        .build()
                })
                .collect()
        };
        let ingress = only_referencing(stored.ip_permissions());
        if !ingress.is_empty() {
            self.count();
            self.ec2
                .revoke_security_group_ingress()
                .group_id(group)
                .set_ip_permissions(Some(ingress))
                .send()
                .await
                .map_err(cloud_error)?;
        }
        let egress = only_referencing(stored.ip_permissions_egress());
        if !egress.is_empty() {
            self.count();
            self.ec2
                .revoke_security_group_egress()
                .group_id(group)
                .set_ip_permissions(Some(egress))
                .send()
                .await
                .map_err(cloud_error)?;
        }
        Ok(())
    }
}

fn is_not_found(error: &CloudError) -> bool {
    error.class == finale_operator_cloud_gc::cloud::ErrorClass::NotFound
}

/// Keeps the resources `query` selects, from a full listing of an ELB kind.
fn select(resources: Vec<Resource>, query: &Query) -> Vec<Resource> {
    match query {
        Query::Ids(ids) => {
            let wanted: BTreeSet<&String> = ids.iter().collect();
            resources
                .into_iter()
                .filter(|r| wanted.contains(&r.id))
                .collect()
        }
        Query::Tagged { key, value } => resources
            .into_iter()
            .filter(|r| r.tags.get(key) == Some(value))
            .collect(),
        Query::UsingGroups(groups) => resources
            .into_iter()
            .filter(|r| r.security_groups.iter().any(|g| groups.contains(g)))
            .collect(),
    }
}

fn single(query: &Query) -> Option<&str> {
    match query {
        Query::Ids(ids) if ids.len() == 1 => Some(ids[0].as_str()),
        _ => None,
    }
}

#[async_trait]
impl CloudApi for AwsCloud {
    async fn tagged(&self, key: &str, value: &str) -> Result<Vec<String>, CloudError> {
        let filter = aws_sdk_resourcegroupstagging::types::TagFilter::builder()
            .key(key)
            .values(value)
            .build();
        let mut pages = self
            .tagging
            .get_resources()
            .tag_filters(filter)
            .resources_per_page(100)
            .into_paginator()
            .send();
        let mut arns = Vec::new();
        loop {
            self.count();
            let Some(page) = pages.next().await else {
                break;
            };
            for mapping in page.map_err(cloud_error)?.resource_tag_mapping_list() {
                if let Some(arn) = mapping.resource_arn() {
                    arns.push(arn.to_string());
                }
            }
        }
        Ok(arns)
    }

    async fn describe(&self, kind: Kind, query: &Query) -> Result<Vec<Resource>, CloudError> {
        if matches!(query, Query::Ids(ids) if ids.is_empty()) {
            return Ok(Vec::new());
        }
        match kind {
            Kind::SecurityGroup => self.security_groups(query).await,
            Kind::NetworkInterface => self.network_interfaces(query).await,
            Kind::ElasticIp => self.addresses(query).await,
            Kind::Volume => self.volumes(query).await,
            Kind::LoadBalancer | Kind::TargetGroup => {
                let one = single(query);
                let mut listed = if kind == Kind::LoadBalancer {
                    self.load_balancers_v2(one).await?
                } else {
                    self.target_groups(one).await?
                };
                // Tags only for what the query can keep (ids) or needs them to decide (tags).
                if let Query::Ids(_) | Query::UsingGroups(_) = query {
                    listed = select(listed, query);
                }
                self.elbv2_tags(&mut listed).await?;
                Ok(select(listed, query))
            }
            Kind::ClassicLoadBalancer => {
                let listed = self.classic_load_balancers(single(query)).await?;
                Ok(select(listed, query))
            }
        }
    }

    async fn act(&self, action: &Action) -> Result<(), CloudError> {
        self.count();
        match action {
            Action::Delete { kind, id } => match kind {
                Kind::LoadBalancer => self
                    .elbv2
                    .delete_load_balancer()
                    .load_balancer_arn(id)
                    .send()
                    .await
                    .map(|_| ())
                    .map_err(cloud_error),
                Kind::ClassicLoadBalancer => self
                    .elb
                    .delete_load_balancer()
                    .load_balancer_name(id)
                    .send()
                    .await
                    .map(|_| ())
                    .map_err(cloud_error),
                Kind::TargetGroup => self
                    .elbv2
                    .delete_target_group()
                    .target_group_arn(id)
                    .send()
                    .await
                    .map(|_| ())
                    .map_err(cloud_error),
                Kind::SecurityGroup => self
                    .ec2
                    .delete_security_group()
                    .group_id(id)
                    .send()
                    .await
                    .map(|_| ())
                    .map_err(cloud_error),
                Kind::NetworkInterface => self
                    .ec2
                    .delete_network_interface()
                    .network_interface_id(id)
                    .send()
                    .await
                    .map(|_| ())
                    .map_err(cloud_error),
                Kind::ElasticIp => self
                    .ec2
                    .release_address()
                    .allocation_id(id)
                    .send()
                    .await
                    .map(|_| ())
                    .map_err(cloud_error),
                Kind::Volume => self
                    .ec2
                    .delete_volume()
                    .volume_id(id)
                    .send()
                    .await
                    .map(|_| ())
                    .map_err(cloud_error),
            },
            Action::RevokeReferences { group, referenced } => {
                self.revoke_references(group, referenced).await
            }
            Action::Disassociate { association } => self
                .ec2
                .disassociate_address()
                .association_id(association)
                .send()
                .await
                .map(|_| ())
                .map_err(cloud_error),
        }
    }
}
