//! External-resource GC end to end: a real `finale server`, the `finale operator cloud-gc`
//! process, and `moto_server` as the AWS API (EC2, ELB, ELBv2, tagging) on loopback, with a
//! fault proxy ([`finale_e2e::aws_proxy`]) in front of moto for what moto does not model
//! (`DependencyViolation` on security groups) and for an API that goes down.
//!
//! The tests play the cloud controller: they create tagged resources in moto with the AWS SDK,
//! then delete the `CloudCluster` and check what is left in moto.

mod common;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::{Env, binary, kube_client};
use finale_cloud_aws::{ec2, elb, elbv2};
use finale_e2e::aws_proxy::{AwsProxy, Refusal};
use finale_e2e::moto::Moto;
use finale_e2e::operator::{OperatorProcess, least_privilege_kubeconfig};
use finale_operator_cloud_gc::annotations::Task;
use finale_operator_cloud_gc::cloud::{StaticCredentials, Target};
use finale_operator_cloud_gc::{CloudCluster, GC_FINALIZER};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

const REGION: &str = "us-east-1";
const NAMESPACE: &str = "default";
const CONVERGE: Duration = Duration::from_secs(90);

fn owned(cluster: &str) -> (String, String) {
    (format!("kubernetes.io/cluster/{cluster}"), "owned".into())
}

struct Harness {
    env: Env,
    moto: Moto,
    proxy: AwsProxy,
    operator: Option<OperatorProcess>,
    client: Client,
    ec2: ec2::Client,
    elb: elb::Client,
    elbv2: elbv2::Client,
    vpc: String,
    subnets: Vec<String>,
}

impl Harness {
    async fn start(operator_args: &[&str]) -> Harness {
        let env = Env::start();
        let moto = Moto::start(env.dir.path()).expect("start moto_server");
        let target: SocketAddr = format!("127.0.0.1:{}", moto.port).parse().expect("address");
        let proxy = AwsProxy::start(target).expect("start the AWS proxy");
        let client = kube_client(&env.server).await;
        let config = finale_cloud_aws::sdk_config(&Target {
            region: REGION.into(),
            endpoint: Some(moto.url()),
            credentials: Some(StaticCredentials {
                access_key_id: "test".into(),
                secret_access_key: "test".into(),
                session_token: None,
            }),
        })
        .await;
        let ec2 = ec2::Client::new(&config);
        let vpc = ec2
            .create_vpc()
            .cidr_block("10.0.0.0/16")
            .send()
            .await
            .expect("create a VPC")
            .vpc()
            .and_then(|v| v.vpc_id())
            .expect("vpc id")
            .to_string();
        let mut subnets = Vec::new();
        for (index, zone) in ["us-east-1a", "us-east-1b"].iter().enumerate() {
            subnets.push(
                ec2.create_subnet()
                    .vpc_id(&vpc)
                    .cidr_block(format!("10.0.{index}.0/24"))
                    .availability_zone(*zone)
                    .send()
                    .await
                    .expect("create a subnet")
                    .subnet()
                    .and_then(|s| s.subnet_id())
                    .expect("subnet id")
                    .to_string(),
            );
        }
        let mut args = vec!["--lease-duration", "3s", "--max-backoff", "2s"];
        args.extend_from_slice(operator_args);
        // With the least privilege `--print-rbac` gives it.
        let kubeconfig = least_privilege_kubeconfig(
            binary(),
            "cloud-gc",
            &env.server.kubeconfig,
            env.dir.path(),
        )
        .expect("the cloud-gc operator's least-privilege kubeconfig");
        let operator = OperatorProcess::start(
            binary(),
            "cloud-gc",
            &kubeconfig,
            env.dir.path(),
            "gc-1",
            &args,
        )
        .expect("start the cloud-gc operator");
        let harness = Harness {
            elb: elb::Client::new(&config),
            elbv2: elbv2::Client::new(&config),
            ec2,
            env,
            moto,
            proxy,
            operator: Some(operator),
            client,
            vpc,
            subnets,
        };
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": "aws", "namespace": NAMESPACE},
            "stringData": {"AccessKeyID": "test", "SecretAccessKey": "test"},
        }))
        .expect("secret");
        Api::<Secret>::namespaced(harness.client.clone(), NAMESPACE)
            .create(&PostParams::default(), &secret)
            .await
            .expect("create the credentials Secret");
        harness.wait_for_crd().await;
        harness
    }

    fn log(&self) -> String {
        format!(
            "{}\n--- operator log ---\n{}\n--- proxy log (last 30) ---\n{}",
            self.env.log(),
            self.operator
                .as_ref()
                .map(|o| o.log())
                .unwrap_or_default()
                .lines()
                .rev()
                .take(40)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join("\n"),
            self.proxy
                .log()
                .iter()
                .rev()
                .take(30)
                .map(|l| l.chars().take(200).collect::<String>())
                .collect::<Vec<_>>()
                .join("\n")
        )
    }

    async fn wait_for_crd(&self) {
        let clusters: Api<CloudCluster> = Api::namespaced(self.client.clone(), NAMESPACE);
        self.eventually("the CloudCluster CRD is served", async || {
            clusters.list(&Default::default()).await.ok().map(|_| ())
        })
        .await;
    }

    async fn eventually<T>(&self, what: &str, mut check: impl AsyncFnMut() -> Option<T>) -> T {
        let deadline = Instant::now() + CONVERGE;
        loop {
            if let Some(value) = check().await {
                return value;
            }
            assert!(Instant::now() < deadline, "never {what}{}", self.log());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn clusters(&self) -> Api<CloudCluster> {
        Api::namespaced(self.client.clone(), NAMESPACE)
    }

    /// Creates a CloudCluster pointed at the proxy, and waits until the operator has seen it.
    async fn create_cluster(&self, name: &str, annotations: Value) -> CloudCluster {
        let cluster: CloudCluster = serde_json::from_value(json!({
            "apiVersion": "cloud.finale.dev/v1alpha1", "kind": "CloudCluster",
            "metadata": {"name": name, "namespace": NAMESPACE, "annotations": annotations},
            "spec": {
                "provider": "aws", "region": REGION, "endpoint": self.proxy.url(),
                "credentialsSecretRef": {"name": "aws"},
            },
        }))
        .expect("a CloudCluster");
        self.clusters()
            .create(&PostParams::default(), &cluster)
            .await
            .unwrap_or_else(|e| panic!("create CloudCluster {name}: {e}"));
        self.eventually("the CloudCluster is reconciled", async || {
            let stored = self.clusters().get_opt(name).await.ok().flatten()?;
            stored.status.as_ref()?.gc.as_ref()?;
            Some(stored)
        })
        .await
    }

    async fn delete_cluster(&self, name: &str) {
        self.clusters()
            .delete(name, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("delete CloudCluster {name}: {e}"));
    }

    async fn wait_gone(&self, name: &str) {
        self.eventually("the CloudCluster is gone", async || {
            self.clusters()
                .get_opt(name)
                .await
                .ok()
                .and_then(|c| c.is_none().then_some(()))
        })
        .await;
    }

    // --- the "cloud controller": resources in moto ---------------------------------------

    fn ec2_tags(
        kind: ec2::types::ResourceType,
        tags: &[(String, String)],
    ) -> ec2::types::TagSpecification {
        let mut spec = ec2::types::TagSpecification::builder().resource_type(kind);
        for (key, value) in tags {
            spec = spec.tags(ec2::types::Tag::builder().key(key).value(value).build());
        }
        spec.build()
    }

    async fn security_group(&self, name: &str, tags: &[(String, String)]) -> String {
        let mut request = self
            .ec2
            .create_security_group()
            .group_name(name)
            .description(format!("test group {name}"))
            .vpc_id(&self.vpc);
        if !tags.is_empty() {
            request = request.tag_specifications(Self::ec2_tags(
                ec2::types::ResourceType::SecurityGroup,
                tags,
            ));
        }
        request
            .send()
            .await
            .expect("create a security group")
            .group_id()
            .expect("group id")
            .to_string()
    }

    /// Adds an ingress rule to `group` that references `referenced`.
    async fn reference(&self, group: &str, referenced: &str) {
        self.ec2
            .authorize_security_group_ingress()
            .group_id(group)
            .ip_permissions(
                ec2::types::IpPermission::builder()
                    .ip_protocol("tcp")
                    .from_port(80)
                    .to_port(80)
                    .user_id_group_pairs(
                        ec2::types::UserIdGroupPair::builder()
                            .group_id(referenced)
                            .build(),
                    )
                    .build(),
            )
            .send()
            .await
            .expect("authorize a rule");
    }

    async fn load_balancer(
        &self,
        name: &str,
        groups: &[&str],
        tags: &[(String, String)],
    ) -> String {
        let mut request = self
            .elbv2
            .create_load_balancer()
            .name(name)
            .set_subnets(Some(self.subnets.clone()))
            .set_security_groups(Some(groups.iter().map(|g| g.to_string()).collect()));
        for (key, value) in tags {
            request = request.tags(elbv2::types::Tag::builder().key(key).value(value).build());
        }
        request
            .send()
            .await
            .expect("create a load balancer")
            .load_balancers()
            .first()
            .and_then(|lb| lb.load_balancer_arn())
            .expect("arn")
            .to_string()
    }

    async fn target_group(&self, name: &str, tags: &[(String, String)]) -> String {
        let mut request = self
            .elbv2
            .create_target_group()
            .name(name)
            .protocol(elbv2::types::ProtocolEnum::Http)
            .port(80)
            .vpc_id(&self.vpc);
        for (key, value) in tags {
            request = request.tags(elbv2::types::Tag::builder().key(key).value(value).build());
        }
        request
            .send()
            .await
            .expect("create a target group")
            .target_groups()
            .first()
            .and_then(|tg| tg.target_group_arn())
            .expect("arn")
            .to_string()
    }

    async fn listener(&self, load_balancer: &str, target_group: &str) {
        self.elbv2
            .create_listener()
            .load_balancer_arn(load_balancer)
            .protocol(elbv2::types::ProtocolEnum::Http)
            .port(80)
            .default_actions(
                elbv2::types::Action::builder()
                    .r#type(elbv2::types::ActionTypeEnum::Forward)
                    .target_group_arn(target_group)
                    .build(),
            )
            .send()
            .await
            .expect("create a listener");
    }

    async fn classic_load_balancer(&self, name: &str, groups: &[&str], tags: &[(String, String)]) {
        let mut request = self
            .elb
            .create_load_balancer()
            .load_balancer_name(name)
            .listeners(
                elb::types::Listener::builder()
                    .protocol("HTTP")
                    .load_balancer_port(80)
                    .instance_port(80)
                    .build()
                    .expect("listener"),
            )
            .set_subnets(Some(self.subnets.clone()))
            .set_security_groups(Some(groups.iter().map(|g| g.to_string()).collect()));
        for (key, value) in tags {
            request = request.tags(
                elb::types::Tag::builder()
                    .key(key)
                    .value(value)
                    .build()
                    .expect("tag"),
            );
        }
        request
            .send()
            .await
            .expect("create a classic load balancer");
    }

    async fn network_interface(&self, groups: &[&str], tags: &[(String, String)]) -> String {
        let mut request = self
            .ec2
            .create_network_interface()
            .subnet_id(&self.subnets[0])
            .set_groups(Some(groups.iter().map(|g| g.to_string()).collect()));
        if !tags.is_empty() {
            request = request.tag_specifications(Self::ec2_tags(
                ec2::types::ResourceType::NetworkInterface,
                tags,
            ));
        }
        request
            .send()
            .await
            .expect("create an ENI")
            .network_interface()
            .and_then(|n| n.network_interface_id())
            .expect("eni id")
            .to_string()
    }

    async fn elastic_ip(&self, tags: &[(String, String)], interface: Option<&str>) -> String {
        let allocation = self
            .ec2
            .allocate_address()
            .domain(ec2::types::DomainType::Vpc)
            .send()
            .await
            .expect("allocate an address")
            .allocation_id()
            .expect("allocation id")
            .to_string();
        let mut request = self.ec2.create_tags().resources(&allocation);
        for (key, value) in tags {
            request = request.tags(ec2::types::Tag::builder().key(key).value(value).build());
        }
        request.send().await.expect("tag the address");
        if let Some(interface) = interface {
            self.ec2
                .associate_address()
                .allocation_id(&allocation)
                .network_interface_id(interface)
                .send()
                .await
                .expect("associate the address");
        }
        allocation
    }

    async fn volume(&self, tags: &[(String, String)]) -> String {
        self.ec2
            .create_volume()
            .availability_zone("us-east-1a")
            .size(1)
            .tag_specifications(Self::ec2_tags(ec2::types::ResourceType::Volume, tags))
            .send()
            .await
            .expect("create a volume")
            .volume_id()
            .expect("volume id")
            .to_string()
    }

    // --- what is there ----------------------------------------------------------------------

    async fn group_ids(&self) -> BTreeSet<String> {
        let mut ids = BTreeSet::new();
        let mut pages = self.ec2.describe_security_groups().into_paginator().send();
        while let Some(page) = pages.next().await {
            for group in page.expect("describe groups").security_groups() {
                if group.group_name() != Some("default") {
                    ids.insert(group.group_id().unwrap_or_default().to_string());
                }
            }
        }
        ids
    }

    async fn load_balancer_arns(&self) -> BTreeSet<String> {
        let answer = self
            .elbv2
            .describe_load_balancers()
            .send()
            .await
            .expect("describe LBs");
        answer
            .load_balancers()
            .iter()
            .filter_map(|lb| lb.load_balancer_arn().map(str::to_string))
            .collect()
    }

    async fn classic_names(&self) -> BTreeSet<String> {
        let answer = self
            .elb
            .describe_load_balancers()
            .send()
            .await
            .expect("describe ELBs");
        answer
            .load_balancer_descriptions()
            .iter()
            .filter_map(|lb| lb.load_balancer_name().map(str::to_string))
            .collect()
    }

    async fn target_group_arns(&self) -> BTreeSet<String> {
        let mut arns = BTreeSet::new();
        let mut pages = self.elbv2.describe_target_groups().into_paginator().send();
        while let Some(page) = pages.next().await {
            for group in page.expect("describe TGs").target_groups() {
                arns.insert(group.target_group_arn().unwrap_or_default().to_string());
            }
        }
        arns
    }

    async fn interface_ids(&self) -> BTreeSet<String> {
        let answer = self
            .ec2
            .describe_network_interfaces()
            .send()
            .await
            .expect("describe ENIs");
        answer
            .network_interfaces()
            .iter()
            .filter_map(|n| n.network_interface_id().map(str::to_string))
            .collect()
    }

    async fn allocation_ids(&self) -> BTreeSet<String> {
        let answer = self
            .ec2
            .describe_addresses()
            .send()
            .await
            .expect("describe addresses");
        answer
            .addresses()
            .iter()
            .filter_map(|a| a.allocation_id().map(str::to_string))
            .collect()
    }

    async fn volume_ids(&self) -> BTreeSet<String> {
        let answer = self
            .ec2
            .describe_volumes()
            .send()
            .await
            .expect("describe volumes");
        answer
            .volumes()
            .iter()
            .filter_map(|v| v.volume_id().map(str::to_string))
            .collect()
    }

    /// Index of the first proxy log entry with `action` whose body contains `id`.
    fn call_index(&self, action: &str, id: &str) -> usize {
        let encoded = id.replace(':', "%3A").replace('/', "%2F");
        self.proxy
            .log()
            .iter()
            .position(|l| {
                l.starts_with(&format!("{action} ")) && (l.contains(id) || l.contains(&encoded))
            })
            .unwrap_or_else(|| panic!("no {action} for {id}{}", self.log()))
    }
}

fn set(items: &[&String]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// Everything the cluster owns goes, in dependency order; resources of another cluster,
/// `shared` ones, untagged ones and (not asked for) volumes stay.
#[tokio::test]
async fn an_owned_footprint_goes_in_order_and_nothing_else_does() {
    let h = Harness::start(&[]).await;
    let mine = [owned("c1")];
    let lb_group = h.security_group("lb", &mine).await;
    let node_group = h.security_group("nodes", &mine).await;
    h.reference(&node_group, &lb_group).await;
    let alb = h.load_balancer("web", &[&lb_group], &mine).await;
    let tg = h.target_group("web", &mine).await;
    h.listener(&alb, &tg).await;
    h.classic_load_balancer("legacy", &[&lb_group], &mine).await;
    let eni = h.network_interface(&[&node_group], &mine).await;
    let untagged_eni = h.network_interface(&[&node_group], &[]).await;
    let eip = h.elastic_ip(&mine, Some(&eni)).await;
    let volume = h.volume(&mine).await;
    // Not ours.
    let other_cluster = h.security_group("other", &[owned("c2")]).await;
    let shared = h
        .security_group(
            "shared",
            &[("kubernetes.io/cluster/c1".into(), "shared".into())],
        )
        .await;
    let untagged = h.security_group("untagged", &[]).await;
    let foreign_lb = h
        .load_balancer("foreign", &[&other_cluster], &[owned("c2")])
        .await;
    let foreign_tg = h.target_group("foreign", &[]).await;
    let foreign_eip = h.elastic_ip(&[owned("c2")], None).await;
    // AWS refuses to delete a group a load balancer still uses; moto does not, so the proxy
    // does, until the load balancer's delete has been seen. No refusal may happen.
    for (lb_call, lb_id) in [
        ("DeleteLoadBalancer", alb.as_str()),
        ("DeleteLoadBalancer", "legacy"),
    ] {
        h.proxy.refuse(Refusal {
            action: "DeleteSecurityGroup".into(),
            contains: lb_group.clone(),
            code: "DependencyViolation".into(),
            message: format!("resource {lb_group} has a dependent object"),
            times: None,
            until_seen: Some((
                lb_call.into(),
                lb_id.replace(':', "%3A").replace('/', "%2F"),
            )),
        });
    }
    h.proxy.refuse(Refusal {
        action: "DeleteSecurityGroup".into(),
        contains: node_group.clone(),
        code: "DependencyViolation".into(),
        message: format!("resource {node_group} has a dependent object"),
        times: None,
        until_seen: Some(("DeleteNetworkInterface".into(), untagged_eni.clone())),
    });

    let cluster = h.create_cluster("c1", json!({})).await;
    assert!(
        cluster.finalizers().contains(&GC_FINALIZER.to_string()),
        "{cluster:?}"
    );
    h.delete_cluster("c1").await;
    h.wait_gone("c1").await;

    assert_eq!(
        h.group_ids().await,
        set(&[&other_cluster, &shared, &untagged]),
        "{}",
        h.log()
    );
    assert_eq!(h.load_balancer_arns().await, set(&[&foreign_lb]));
    assert!(h.classic_names().await.is_empty());
    assert_eq!(h.target_group_arns().await, set(&[&foreign_tg]));
    assert!(h.interface_ids().await.is_empty(), "both ENIs go");
    assert_eq!(h.allocation_ids().await, set(&[&foreign_eip]));
    assert_eq!(
        h.volume_ids().await,
        set(&[&volume]),
        "volumes only when asked"
    );
    assert!(
        h.proxy.refused().is_empty(),
        "an out-of-order delete: {:?}",
        h.proxy.refused()
    );
    assert!(h.call_index("DeleteLoadBalancer", &alb) < h.call_index("DeleteTargetGroup", &tg));
    assert!(h.call_index("DisassociateAddress", "") < h.call_index("ReleaseAddress", &eip));
    assert!(h.call_index("ReleaseAddress", &eip) < h.call_index("DeleteNetworkInterface", &eni));
    assert!(
        h.call_index("RevokeSecurityGroupIngress", &node_group)
            < h.call_index("DeleteSecurityGroup", &lb_group)
    );
}

/// More than a page of each of three types (the tagging API pages at 100 here): nothing is
/// missed (CAPA missed resources past the first page until 2026).
#[tokio::test]
async fn more_than_a_page_of_each_type_is_all_collected() {
    let h = Harness::start(&[]).await;
    let mine = [owned("big")];
    for i in 0..125 {
        h.security_group(&format!("g{i}"), &mine).await;
        h.target_group(&format!("t{i}"), &mine).await;
        h.volume(&mine).await;
    }
    let keep = h.security_group("keep", &[]).await;
    assert_eq!(h.group_ids().await.len(), 126);
    h.create_cluster("big", json!({"cloud.finale.dev/external-resource-gc-tasks": "security-group,target-group,volume"}))
        .await;
    h.delete_cluster("big").await;
    h.wait_gone("big").await;
    assert_eq!(h.group_ids().await, set(&[&keep]));
    assert!(h.target_group_arns().await.is_empty());
    assert!(h.volume_ids().await.is_empty());
    let pages = h
        .proxy
        .log()
        .iter()
        .filter(|l| l.starts_with("GetResources "))
        .count();
    assert!(
        pages >= 4,
        "375 resources take at least 4 pages of 100: {pages}"
    );
}

/// A security group the cloud refuses to delete (`DependencyViolation`, injected: moto does
/// not model it) is reported blocked, with the cloud's words, and retried until it goes.
#[tokio::test]
async fn a_dependency_violation_blocks_is_reported_and_retried() {
    let h = Harness::start(&[]).await;
    let mine = [owned("dv")];
    let group = h.security_group("lb", &mine).await;
    let alb = h.load_balancer("web", &[&group], &mine).await;
    h.proxy.refuse(Refusal {
        action: "DeleteSecurityGroup".into(),
        contains: group.clone(),
        code: "DependencyViolation".into(),
        message: format!("resource {group} has a dependent object"),
        times: None,
        until_seen: None,
    });
    h.create_cluster("dv", json!({})).await;
    h.delete_cluster("dv").await;
    let blocked = h
        .eventually("the group is reported blocked", async || {
            let cluster = h.clusters().get_opt("dv").await.ok().flatten()?;
            let status = cluster.status?;
            let item = status
                .inventory
                .iter()
                .find(|i| i.id == group && i.state == "Blocked")?
                .clone();
            let deleting = status
                .conditions
                .iter()
                .find(|c| c.type_ == "Deleting")?
                .clone();
            deleting
                .message
                .contains(&group)
                .then_some((item, deleting))
        })
        .await;
    let (item, deleting) = blocked;
    assert!(
        item.last_error
            .as_deref()
            .is_some_and(|e| e.contains("DependencyViolation")),
        "{item:?}"
    );
    // `finale explain` names what the cleanup is waiting on, from the claim's inventoryPath.
    let explained = finale_json(&h, &["explain", "cloudclusters/dv", "-n", NAMESPACE]);
    let waiting = evidence_values(&explained, "externalResources");
    assert!(
        waiting
            .iter()
            .any(|e| e.contains(&group) && e.contains("Blocked")),
        "explain names the blocked group: {explained:#}"
    );
    assert!(!item.blocked_by.is_empty(), "{item:?}");
    assert!(deleting.message.contains("blocked by"), "{deleting:?}");
    assert!(
        h.load_balancer_arns().await.is_empty(),
        "the load balancer went first"
    );
    assert!(h.call_index("DeleteLoadBalancer", &alb) < h.call_index("DeleteSecurityGroup", &group));
    // Retried: the cloud is asked again while blocked.
    h.eventually("a retry", async || {
        (h.proxy.refused().len() >= 2).then_some(())
    })
    .await;
    assert!(
        h.clusters().get_opt("dv").await.expect("get").is_some(),
        "the finalizer holds"
    );
    // The dependency goes (AWS removed the load balancer's ENI): the next pass succeeds.
    h.proxy.clear_rules();
    h.wait_gone("dv").await;
    assert!(h.group_ids().await.is_empty());
}

/// The API goes down mid-teardown: the finalizer stays, the status says why, and the teardown
/// completes when it is back. Then the operator is killed mid-teardown and completes on
/// restart.
#[tokio::test]
async fn teardown_survives_an_api_outage_and_an_operator_crash() {
    let mut h = Harness::start(&[]).await;
    let mine = [owned("c1")];
    let group = h.security_group("lb", &mine).await;
    h.load_balancer("web", &[&group], &mine).await;
    // Hold the teardown after the load balancer.
    h.proxy.refuse(Refusal {
        action: "DeleteSecurityGroup".into(),
        contains: group.clone(),
        code: "DependencyViolation".into(),
        message: "held by the test".into(),
        times: None,
        until_seen: None,
    });
    h.create_cluster("c1", json!({})).await;
    h.delete_cluster("c1").await;
    h.eventually("the load balancer is deleted", async || {
        h.load_balancer_arns().await.is_empty().then_some(())
    })
    .await;
    h.proxy.go_down();
    h.proxy.clear_rules();
    let message = h
        .eventually("the Deleting condition reports the outage", async || {
            let cluster = h.clusters().get_opt("c1").await.ok().flatten()?;
            let deleting = cluster
                .status?
                .conditions
                .into_iter()
                .find(|c| c.type_ == "Deleting")?;
            (deleting.reason == "CleanupFailed").then_some(deleting.message)
        })
        .await;
    // Discovery or a delete meets the outage first, depending on timing; either way the
    // condition carries the cause.
    assert!(message.contains("Connection refused"), "{message}");
    let cluster = h
        .clusters()
        .get_opt("c1")
        .await
        .expect("get")
        .expect("still there");
    assert!(cluster.finalizers().contains(&GC_FINALIZER.to_string()));
    assert_eq!(
        h.group_ids().await,
        set(&[&group]),
        "nothing more went while down"
    );

    // Back up, but the operator dies before it looks again.
    h.proxy.refuse(Refusal {
        action: "DeleteSecurityGroup".into(),
        contains: group.clone(),
        code: "DependencyViolation".into(),
        message: "held by the test".into(),
        times: None,
        until_seen: None,
    });
    h.proxy.come_back().expect("proxy back");
    h.eventually("the operator reaches the cloud again", async || {
        (!h.proxy.refused().is_empty()).then_some(())
    })
    .await;
    h.operator
        .as_mut()
        .expect("operator")
        .kill9()
        .expect("kill the operator");
    h.proxy.clear_rules();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        h.group_ids().await,
        set(&[&group]),
        "nobody deletes while the operator is dead"
    );
    assert!(h.clusters().get_opt("c1").await.expect("get").is_some());
    h.operator
        .as_mut()
        .expect("operator")
        .start_again()
        .expect("restart the operator");
    h.wait_gone("c1").await;
    assert!(h.group_ids().await.is_empty());
}

/// Opting out by annotation, at creation and afterwards, keeps the cloud resources; opting back
/// in restores the finalizer.
#[tokio::test]
async fn opting_out_keeps_the_footprint() {
    let h = Harness::start(&[]).await;
    let group = h.security_group("a", &[owned("out")]).await;
    let later = h.security_group("b", &[owned("later")]).await;
    let cluster = h
        .create_cluster(
            "out",
            json!({"cloud.finale.dev/external-resource-gc": "false"}),
        )
        .await;
    assert!(!cluster.finalizers().contains(&GC_FINALIZER.to_string()));
    assert_eq!(
        cluster.status.as_ref().and_then(|s| s.gc.as_deref()),
        Some("Disabled")
    );

    let cluster = h.create_cluster("later", json!({})).await;
    assert!(cluster.finalizers().contains(&GC_FINALIZER.to_string()));
    h.env.ok(&[
        "annotate",
        "cloudcluster",
        "later",
        "cloud.finale.dev/external-resource-gc=false",
    ]);
    h.eventually("the finalizer is removed", async || {
        let c = h.clusters().get_opt("later").await.ok().flatten()?;
        (!c.finalizers().contains(&GC_FINALIZER.to_string())).then_some(())
    })
    .await;
    h.delete_cluster("out").await;
    h.delete_cluster("later").await;
    h.wait_gone("out").await;
    h.wait_gone("later").await;
    assert_eq!(h.group_ids().await, set(&[&group, &later]));
}

/// With `--external-resource-gc=false`, a cluster without the annotation is marked opted out
/// and carries no finalizer.
#[tokio::test]
async fn the_feature_flag_off_marks_clusters_opted_out() {
    let h = Harness::start(&["--external-resource-gc=false"]).await;
    let group = h.security_group("a", &[owned("c1")]).await;
    h.create_cluster("c1", json!({})).await;
    let cluster = h
        .eventually("the cluster is marked opted out", async || {
            let c = h.clusters().get_opt("c1").await.ok().flatten()?;
            (c.annotations()
                .get("cloud.finale.dev/external-resource-gc")
                .map(String::as_str)
                == Some("false"))
            .then_some(c)
        })
        .await;
    assert!(!cluster.finalizers().contains(&GC_FINALIZER.to_string()));
    h.delete_cluster("c1").await;
    h.wait_gone("c1").await;
    assert_eq!(h.group_ids().await, set(&[&group]));
}

/// Unknown tasks and a non-boolean switch are refused when written, with a message that names
/// the valid tasks; every task the operator knows is accepted.
#[tokio::test]
async fn invalid_annotations_are_rejected_when_written() {
    let h = Harness::start(&[]).await;
    h.create_cluster("c1", json!({})).await;
    let run = h.env.run(&[
        "annotate",
        "cloudcluster",
        "c1",
        "cloud.finale.dev/external-resource-gc-tasks=load-balancer,volumes",
    ]);
    assert_ne!(run.code, Some(0));
    let stderr = run.describe();
    assert!(
        stderr.contains("unknown external-resource GC task \\\"volumes\\\"")
            || stderr.contains("unknown external-resource GC task \"volumes\""),
        "{stderr}"
    );
    assert!(
        stderr.contains("load-balancer, target-group, security-group"),
        "{stderr}"
    );
    let stored = h.clusters().get("c1").await.expect("get");
    assert!(
        !stored
            .annotations()
            .contains_key("cloud.finale.dev/external-resource-gc-tasks")
    );
    let run = h.env.run(&[
        "annotate",
        "cloudcluster",
        "c1",
        "cloud.finale.dev/external-resource-gc=off",
    ]);
    assert_ne!(run.code, Some(0), "{}", run.describe());
    // A create with an unknown task stores nothing.
    let bad: CloudCluster = serde_json::from_value(json!({
        "apiVersion": "cloud.finale.dev/v1alpha1", "kind": "CloudCluster",
        "metadata": {"name": "bad", "namespace": NAMESPACE,
                     "annotations": {"cloud.finale.dev/external-resource-gc-tasks": "nat-gateway"}},
        "spec": {"provider": "aws", "region": REGION},
    }))
    .expect("CloudCluster");
    match h.clusters().create(&PostParams::default(), &bad).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 422, "{status:?}");
            assert_eq!(status.reason, "Invalid");
        }
        other => panic!("an unknown task was accepted: {other:?}"),
    }
    assert!(h.clusters().get_opt("bad").await.expect("get").is_none());
    let all = Task::ALL.map(|t| t.name()).join(",");
    h.env.ok(&[
        "annotate",
        "cloudcluster",
        "c1",
        &format!("cloud.finale.dev/external-resource-gc-tasks={all}"),
    ]);
}

/// Volumes go only with the `volume` task.
#[tokio::test]
async fn volumes_go_only_when_asked() {
    let h = Harness::start(&[]).await;
    let kept = h.volume(&[owned("plain")]).await;
    let collected = h.volume(&[owned("withvol")]).await;
    h.create_cluster("plain", json!({})).await;
    h.create_cluster(
        "withvol",
        json!({"cloud.finale.dev/external-resource-gc-tasks": "volume"}),
    )
    .await;
    h.delete_cluster("plain").await;
    h.delete_cluster("withvol").await;
    h.wait_gone("plain").await;
    h.wait_gone("withvol").await;
    let volumes = h.volume_ids().await;
    assert!(volumes.contains(&kept));
    assert!(!volumes.contains(&collected));
    drop(h.moto.log());
}

/// Runs `finale ARGS` with the server's kubeconfig; panics unless it exits 0.
/// `finale ARGS -o json`, whatever its exit code (explain and plan exit non-zero on a stuck
/// or hanging answer), parsed.
fn finale_json(h: &Harness, args: &[&str]) -> Value {
    let output = std::process::Command::new(binary())
        .args(args)
        .args(["-o", "json"])
        .env("KUBECONFIG", &h.env.server.kubeconfig)
        .output()
        .expect("run finale");
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "finale {args:?} printed no JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

/// Every value of evidence `key` in a review's cause tree.
fn evidence_values(review: &Value, key: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![review];
    while let Some(value) = stack.pop() {
        match value {
            Value::Object(map) => {
                if let Some(text) = map
                    .get("evidence")
                    .and_then(|e| e.get(key))
                    .and_then(Value::as_str)
                {
                    found.push(text.to_string());
                }
                stack.extend(map.values());
            }
            Value::Array(items) => stack.extend(items),
            _ => {}
        }
    }
    found
}

/// A live CloudCluster lists what deleting it would remove; `finale plan` shows that list as
/// the external resources of its finalizer, and deletion then removes exactly those.
#[tokio::test]
async fn plan_shows_a_live_clusters_cloud_inventory() {
    let h = Harness::start(&[]).await;
    let mine = [owned("inv")];
    let group = h.security_group("inv-lb", &mine).await;
    let alb = h.load_balancer("inv-web", &[&group], &mine).await;
    let theirs = h.security_group("other", &[owned("someone-else")]).await;
    h.create_cluster("inv", json!({})).await;
    let listed = h
        .eventually("the live inventory", async || {
            let cluster = h.clusters().get_opt("inv").await.ok().flatten()?;
            let status = cluster.status?;
            status.inventory_time.as_ref()?;
            Some(status.inventory)
        })
        .await;
    let ids: BTreeSet<String> = listed.iter().map(|i| i.id.clone()).collect();
    assert_eq!(ids, set(&[&group, &alb]), "{listed:?}");
    assert!(listed.iter().all(|i| i.state == "Pending"), "{listed:?}");

    let plan = finale_json(&h, &["plan", "cloudclusters/inv", "-n", NAMESPACE]);
    let external = &plan["plan"]["externalResources"];
    let resource = external
        .as_array()
        .and_then(|all| {
            all.iter()
                .find(|r| r["finalizer"] == "cloud.finale.dev/external-resource-gc")
        })
        .unwrap_or_else(|| panic!("no external resources for the GC finalizer: {plan:#}"));
    assert_eq!(resource["inventoryCount"], 2, "{resource:#}");
    let inventory: Vec<&str> = resource["inventory"]
        .as_array()
        .map(|items| items.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    for id in [&group, &alb] {
        assert!(
            inventory.iter().any(|item| item.contains(id.as_str())),
            "{id} in {inventory:?}"
        );
    }
    assert!(
        !inventory.iter().any(|item| item.contains(theirs.as_str())),
        "another cluster's group is not listed: {inventory:?}"
    );
    // The human form lists them too.
    let text = std::process::Command::new(binary())
        .args(["plan", "cloudclusters/inv", "-n", NAMESPACE])
        .env("KUBECONFIG", &h.env.server.kubeconfig)
        .output()
        .expect("run finale plan");
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("it lists 2"), "{text}");

    h.delete_cluster("inv").await;
    h.wait_gone("inv").await;
    assert_eq!(h.group_ids().await, set(&[&theirs]));
    assert!(h.load_balancer_arns().await.is_empty());
}

fn finale(h: &Harness, args: &[&str]) -> String {
    let output = std::process::Command::new(binary())
        .args(args)
        .env("KUBECONFIG", &h.env.server.kubeconfig)
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env_remove("AWS_PROFILE")
        .output()
        .expect("run finale");
    assert!(
        output.status.success(),
        "finale {args:?}: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).to_string()
}

impl Harness {
    /// Every resource moto holds, as `kind/name-or-id` (the engine's labels).
    async fn everything(&self) -> BTreeSet<String> {
        let mut all = BTreeSet::new();
        let groups = self
            .ec2
            .describe_security_groups()
            .send()
            .await
            .expect("groups");
        for group in groups.security_groups() {
            if group.group_name() != Some("default") {
                all.insert(format!(
                    "security-group/{}",
                    group.group_name().unwrap_or_default()
                ));
            }
        }
        let lbs = self
            .elbv2
            .describe_load_balancers()
            .send()
            .await
            .expect("LBs");
        for lb in lbs.load_balancers() {
            all.insert(format!(
                "load-balancer/{}",
                lb.load_balancer_name().unwrap_or_default()
            ));
        }
        let tgs = self
            .elbv2
            .describe_target_groups()
            .send()
            .await
            .expect("TGs");
        for tg in tgs.target_groups() {
            all.insert(format!(
                "target-group/{}",
                tg.target_group_name().unwrap_or_default()
            ));
        }
        for eni in self.interface_ids().await {
            all.insert(format!("network-interface/{eni}"));
        }
        all
    }
}

/// `finale gc plan` lists exactly what the deletion then removes; `finale gc run` deletes
/// nothing without `--yes` and sweeps with it; `gc disable` and `gc enable` flip the finalizer.
#[tokio::test]
async fn the_gc_cli_plans_what_deletion_removes_and_runs_only_with_yes() {
    let h = Harness::start(&[]).await;
    let mine = [owned("c1")];
    let lb_group = h.security_group("lb", &mine).await;
    let node_group = h.security_group("nodes", &mine).await;
    let alb = h.load_balancer("web", &[&lb_group], &mine).await;
    let tg = h.target_group("web", &mine).await;
    h.listener(&alb, &tg).await;
    h.network_interface(&[&node_group], &[]).await;
    h.security_group("other", &[owned("c2")]).await;
    h.security_group("untagged", &[]).await;
    h.create_cluster("c1", json!({})).await;

    let plan = finale(&h, &["gc", "plan", "c1", "-n", NAMESPACE]);
    let planned: Vec<String> = plan
        .lines()
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        // `STEP TYPE RESOURCE WAITS-FOR` rows; not the header nor the `N to delete` total.
        .filter(|fields| fields.len() >= 4 && fields[0].parse::<u32>().is_ok())
        .map(|fields| format!("{}/{}", fields[1], fields[2]))
        .collect();
    assert_eq!(planned.len(), 5, "{plan}");
    assert!(
        planned.iter().position(|p| p == "load-balancer/web")
            < planned.iter().position(|p| p == "security-group/lb"),
        "{plan}"
    );
    let before = h.everything().await;
    h.delete_cluster("c1").await;
    h.wait_gone("c1").await;
    let after = h.everything().await;
    let removed: BTreeSet<String> = before.difference(&after).cloned().collect();
    assert_eq!(
        removed,
        planned.into_iter().collect::<BTreeSet<_>>(),
        "{plan}"
    );

    // Out of cluster: a dry run first.
    let before = h.everything().await;
    let dry = finale(
        &h,
        &[
            "gc",
            "run",
            "--region",
            REGION,
            "--cluster-name",
            "c2",
            "--endpoint",
            &h.moto.url(),
        ],
    );
    assert!(dry.contains("nothing was deleted"), "{dry}");
    assert!(dry.contains("other"), "{dry}");
    assert_eq!(
        h.everything().await,
        before,
        "a run without --yes deletes nothing"
    );
    let swept = finale(
        &h,
        &[
            "gc",
            "run",
            "--region",
            REGION,
            "--cluster-name",
            "c2",
            "--endpoint",
            &h.moto.url(),
            "--yes",
        ],
    );
    assert!(swept.contains("done: 1 deleted"), "{swept}");
    assert_eq!(
        h.everything().await,
        BTreeSet::from(["security-group/untagged".to_string()])
    );

    // The switch, from the CLI.
    h.create_cluster("c3", json!({})).await;
    finale(&h, &["gc", "disable", "c3", "-n", NAMESPACE]);
    let cluster = h.clusters().get("c3").await.expect("get");
    assert!(!cluster.finalizers().contains(&GC_FINALIZER.to_string()));
    assert_eq!(
        cluster
            .annotations()
            .get("cloud.finale.dev/external-resource-gc")
            .map(String::as_str),
        Some("false")
    );
    finale(&h, &["gc", "enable", "c3", "-n", NAMESPACE]);
    let cluster = h.clusters().get("c3").await.expect("get");
    assert!(cluster.finalizers().contains(&GC_FINALIZER.to_string()));
    finale(
        &h,
        &[
            "gc",
            "configure",
            "c3",
            "-n",
            NAMESPACE,
            "--task",
            "volume",
            "--task",
            "load-balancer",
        ],
    );
    let cluster = h.clusters().get("c3").await.expect("get");
    assert_eq!(
        cluster
            .annotations()
            .get("cloud.finale.dev/external-resource-gc-tasks")
            .map(String::as_str),
        Some("load-balancer,volume")
    );
    // The status is the operator's, written once its watch has seen the change: wait for it
    // (bounded), as reading it at once raced the operator.
    let status = h
        .eventually("the status saying GC Enabled", async || {
            let status = finale(&h, &["gc", "status", "c3", "-n", NAMESPACE]);
            status.contains("GC Enabled").then_some(status)
        })
        .await;
    assert!(status.contains("GC Enabled"), "{status}");
}

/// A Tenant with a `cloud` template gets a CloudCluster in its first namespace, owned by it;
/// deleting the Tenant waits until the cloud footprint is gone.
#[tokio::test]
async fn a_tenant_waits_for_its_cloud_footprint() {
    use finale_operator_tenant::Tenant;
    let h = Harness::start(&[]).await;
    let kubeconfig = least_privilege_kubeconfig(
        binary(),
        "tenant",
        &h.env.server.kubeconfig,
        h.env.dir.path(),
    )
    .expect("the tenant operator's least-privilege kubeconfig");
    let mut tenant_operator = OperatorProcess::start(
        binary(),
        "tenant",
        &kubeconfig,
        h.env.dir.path(),
        "tenant-1",
        &["--lease-duration", "3s", "--max-backoff", "2s"],
    )
    .expect("start the tenant operator");
    let mine = [owned("acme")];
    let group = h.security_group("lb", &mine).await;
    h.load_balancer("web", &[&group], &mine).await;
    // Hold the teardown at the security group, to see the tenant wait.
    h.proxy.refuse(Refusal {
        action: "DeleteSecurityGroup".into(),
        contains: group.clone(),
        code: "DependencyViolation".into(),
        message: "held by the test".into(),
        times: None,
        until_seen: None,
    });
    let tenants: Api<Tenant> = Api::all(h.client.clone());
    let tenant: Tenant = serde_json::from_value(json!({
        "apiVersion": "finale.dev/v1alpha1", "kind": "Tenant",
        "metadata": {"name": "acme"},
        "spec": {
            "namespaces": {"names": ["acme-a", "acme-b"]},
            "cloud": {
                "provider": "aws", "region": REGION, "endpoint": h.proxy.url(),
                "credentialsSecretRef": {"namespace": NAMESPACE, "name": "aws"},
            },
        },
    }))
    .expect("a Tenant");
    h.eventually("the Tenant CRD is served", async || {
        tenants.list(&Default::default()).await.ok().map(|_| ())
    })
    .await;
    tenants
        .create(&PostParams::default(), &tenant)
        .await
        .expect("create the Tenant");
    let clusters: Api<CloudCluster> = Api::namespaced(h.client.clone(), "acme-a");
    let cluster = h
        .eventually("the tenant's CloudCluster is armed", async || {
            let c = clusters.get_opt("cloud").await.ok().flatten()?;
            c.finalizers()
                .contains(&GC_FINALIZER.to_string())
                .then_some(c)
        })
        .await;
    let owner = &cluster.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("Tenant", "acme")
    );
    assert_eq!(owner.controller, Some(true));
    assert_eq!(owner.block_owner_deletion, Some(true));
    assert!(
        Api::<CloudCluster>::namespaced(h.client.clone(), "acme-b")
            .get_opt("cloud")
            .await
            .expect("get")
            .is_none(),
        "only the first namespace holds it"
    );

    tenants
        .delete("acme", &DeleteParams::default())
        .await
        .expect("delete the Tenant");
    h.eventually("the load balancer is deleted", async || {
        h.load_balancer_arns().await.is_empty().then_some(())
    })
    .await;
    h.eventually("the security group delete was refused", async || {
        (!h.proxy.refused().is_empty()).then_some(())
    })
    .await;
    assert!(
        tenants.get_opt("acme").await.expect("get").is_some(),
        "the tenant waits for its cloud footprint"
    );
    h.proxy.clear_rules();
    h.eventually("the Tenant is gone", async || {
        tenants
            .get_opt("acme")
            .await
            .ok()
            .and_then(|t| t.is_none().then_some(()))
    })
    .await;
    assert!(
        h.group_ids().await.is_empty(),
        "the footprint went before the tenant"
    );
    tenant_operator.stop().expect("stop the tenant operator");
}
