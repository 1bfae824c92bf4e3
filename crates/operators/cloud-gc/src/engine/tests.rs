//! The engine's ordering and safety logic on an in-memory cloud that models what moto does not:
//! a security group in use by a load balancer, an ENI or another group's rule refuses deletion
//! (`DependencyViolation`), as AWS does.

use std::collections::BTreeMap;
use std::sync::Mutex;

use finale_operator::backoff::{RateLimit, RateLimits};

use super::*;

const CLUSTER: &str = "c1";

#[derive(Default)]
struct FakeCloud {
    resources: Mutex<BTreeMap<String, Resource>>,
    /// Mutating calls, in order.
    log: Mutex<Vec<Action>>,
    /// `(action prefix, error, times)`: the next `times` matching calls fail.
    faults: Mutex<Vec<(String, CloudError, u32)>>,
}

fn owned() -> BTreeMap<String, String> {
    BTreeMap::from([(format!("{CLUSTER_TAG_PREFIX}{CLUSTER}"), "owned".into())])
}

fn tagged(key: &str, value: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(key.to_string(), value.to_string())])
}

fn arn_of(resource: &Resource) -> Option<String> {
    Some(match resource.kind {
        Kind::LoadBalancer | Kind::TargetGroup => resource.id.clone(),
        Kind::ClassicLoadBalancer => format!(
            "arn:aws:elasticloadbalancing:us-east-1:1:loadbalancer/{}",
            resource.id
        ),
        Kind::SecurityGroup => format!("arn:aws:ec2:us-east-1:1:security-group/{}", resource.id),
        Kind::NetworkInterface => {
            format!("arn:aws:ec2:us-east-1:1:network-interface/{}", resource.id)
        }
        Kind::Volume => format!("arn:aws:ec2:us-east-1:1:volume/{}", resource.id),
        // Like moto: the tagging API does not index Elastic IPs.
        Kind::ElasticIp => return None,
    })
}

fn in_use(code: &str, message: String) -> CloudError {
    CloudError::from_code(Some(code), message)
}

impl FakeCloud {
    fn with(resources: Vec<Resource>) -> FakeCloud {
        let cloud = FakeCloud::default();
        for resource in resources {
            cloud.add(resource);
        }
        cloud
    }

    fn add(&self, resource: Resource) {
        self.resources
            .lock()
            .unwrap()
            .insert(resource.id.clone(), resource);
    }

    fn ids(&self) -> BTreeSet<String> {
        self.resources.lock().unwrap().keys().cloned().collect()
    }

    fn fail(&self, prefix: &str, error: CloudError, times: u32) {
        self.faults
            .lock()
            .unwrap()
            .push((prefix.to_string(), error, times));
    }

    fn deletes(&self) -> Vec<String> {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter_map(|a| match a {
                Action::Delete { id, .. } => Some(id.clone()),
                _ => None,
            })
            .collect()
    }

    fn position(&self, id: &str) -> usize {
        self.deletes()
            .iter()
            .position(|d| d == id)
            .unwrap_or_else(|| panic!("{id} was never deleted: {:?}", self.deletes()))
    }

    /// Why AWS would refuse to delete `id` now.
    fn refusal(&self, kind: Kind, id: &str) -> Option<CloudError> {
        let resources = self.resources.lock().unwrap();
        let resource = resources.get(id)?;
        match kind {
            Kind::SecurityGroup => resources
                .values()
                .find(|r| {
                    r.security_groups.iter().any(|g| g == id)
                        || r.references.iter().any(|g| g == id)
                })
                .map(|user| {
                    in_use(
                        "DependencyViolation",
                        format!("resource {id} has a dependent object ({})", user.id),
                    )
                }),
            Kind::TargetGroup => resource
                .load_balancers
                .iter()
                .find(|lb| resources.contains_key(*lb))
                .map(|lb| in_use("ResourceInUse", format!("used by {lb}"))),
            Kind::NetworkInterface | Kind::Volume => resource.attached_to.as_ref().map(|holder| {
                in_use(
                    "InvalidNetworkInterface.InUse",
                    format!("attached to {holder}"),
                )
            }),
            Kind::ElasticIp => resource
                .association
                .as_ref()
                .map(|a| in_use("InvalidIPAddress.InUse", format!("associated ({a})"))),
            _ => None,
        }
    }
}

#[async_trait::async_trait]
impl CloudApi for FakeCloud {
    async fn tagged(&self, key: &str, value: &str) -> Result<Vec<String>, CloudError> {
        Ok(self
            .resources
            .lock()
            .unwrap()
            .values()
            .filter(|r| r.tags.get(key).map(String::as_str) == Some(value))
            .filter_map(arn_of)
            .collect())
    }

    async fn describe(&self, kind: Kind, query: &Query) -> Result<Vec<Resource>, CloudError> {
        Ok(self
            .resources
            .lock()
            .unwrap()
            .values()
            .filter(|r| r.kind == kind)
            .filter(|r| match query {
                Query::Ids(ids) => ids.contains(&r.id),
                Query::Tagged { key, value } => r.tags.get(key) == Some(value),
                Query::UsingGroups(groups) => r.security_groups.iter().any(|g| groups.contains(g)),
            })
            .cloned()
            .collect())
    }

    async fn act(&self, action: &Action) -> Result<(), CloudError> {
        self.log.lock().unwrap().push(action.clone());
        // Load balancers take a while to delete, as in AWS: concurrent calls interleave, so an
        // order that only holds because calls happen to run one after another fails here.
        if let Action::Delete {
            kind: Kind::LoadBalancer | Kind::ClassicLoadBalancer,
            ..
        } = action
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let text = action.to_string();
        {
            let mut faults = self.faults.lock().unwrap();
            if let Some(fault) = faults
                .iter_mut()
                .find(|(prefix, _, times)| *times > 0 && text.starts_with(prefix.as_str()))
            {
                fault.2 -= 1;
                return Err(fault.1.clone());
            }
        }
        match action {
            Action::Delete { kind, id } => {
                if let Some(refusal) = self.refusal(*kind, id) {
                    return Err(refusal);
                }
                match self.resources.lock().unwrap().remove(id) {
                    Some(_) => Ok(()),
                    None => Err(CloudError::from_code(
                        Some("InvalidGroup.NotFound"),
                        format!("{id} does not exist"),
                    )),
                }
            }
            Action::RevokeReferences { group, referenced } => {
                if let Some(g) = self.resources.lock().unwrap().get_mut(group) {
                    g.references.retain(|r| r != referenced);
                }
                Ok(())
            }
            Action::Disassociate { association } => {
                for r in self.resources.lock().unwrap().values_mut() {
                    if r.association.as_ref() == Some(association) {
                        r.association = None;
                        r.network_interface = None;
                    }
                }
                Ok(())
            }
        }
    }
}

fn resource(kind: Kind, id: &str, tags: BTreeMap<String, String>) -> Resource {
    Resource {
        tags,
        ..Resource::new(kind, id)
    }
}

fn lb(name: &str, groups: &[&str]) -> Resource {
    Resource {
        security_groups: groups.iter().map(|g| g.to_string()).collect(),
        name: Some(name.into()),
        ..resource(
            Kind::LoadBalancer,
            &format!("arn:aws:elasticloadbalancing:us-east-1:1:loadbalancer/app/{name}/1"),
            owned(),
        )
    }
}

fn tg(name: &str, lbs: &[&Resource]) -> Resource {
    Resource {
        load_balancers: lbs.iter().map(|l| l.id.clone()).collect(),
        name: Some(name.into()),
        ..resource(
            Kind::TargetGroup,
            &format!("arn:aws:elasticloadbalancing:us-east-1:1:targetgroup/{name}/1"),
            owned(),
        )
    }
}

fn scope(tasks: TaskSet) -> Scope {
    Scope {
        cluster_name: CLUSTER.into(),
        tasks,
        load_balancer_controller_tag: false,
        discovery: Discovery::Tagging,
    }
}

fn options() -> Options {
    Options {
        concurrency: 4,
        budget: Duration::from_secs(30),
        account: "test".into(),
    }
}

fn limits() -> RateLimits {
    RateLimits::new(RateLimit::new(10_000, 10_000).expect("limit"))
}

async fn run(cloud: &FakeCloud, scope: &Scope) -> Report {
    teardown(cloud, scope, &options(), &limits())
        .await
        .unwrap_or_else(|(error, _)| panic!("teardown: {error}"))
}

/// A footprint with one of everything, plus resources that are not ours.
fn footprint() -> FakeCloud {
    let lb1 = lb("web", &["sg-lb"]);
    let tg1 = tg("web", &[&lb1]);
    let classic = Resource {
        security_groups: vec!["sg-lb".into()],
        ..resource(Kind::ClassicLoadBalancer, "legacy", owned())
    };
    let eni = Resource {
        security_groups: vec!["sg-node".into()],
        ..resource(Kind::NetworkInterface, "eni-untagged", BTreeMap::new())
    };
    let eip = Resource {
        association: Some("eipassoc-1".into()),
        network_interface: Some("eni-owned".into()),
        ..resource(Kind::ElasticIp, "eipalloc-1", owned())
    };
    let owned_eni = Resource {
        security_groups: vec!["sg-node".into()],
        ..resource(Kind::NetworkInterface, "eni-owned", owned())
    };
    let node_group = Resource {
        references: vec!["sg-lb".into()],
        ..resource(Kind::SecurityGroup, "sg-node", owned())
    };
    let foreign_group = Resource {
        references: vec![],
        ..resource(
            Kind::SecurityGroup,
            "sg-other-cluster",
            tagged(&format!("{CLUSTER_TAG_PREFIX}c2"), "owned"),
        )
    };
    FakeCloud::with(vec![
        lb1,
        tg1,
        classic,
        resource(Kind::SecurityGroup, "sg-lb", owned()),
        node_group,
        eni,
        owned_eni,
        eip,
        resource(Kind::Volume, "vol-data", owned()),
        foreign_group,
        resource(
            Kind::SecurityGroup,
            "sg-shared",
            tagged(&format!("{CLUSTER_TAG_PREFIX}{CLUSTER}"), "shared"),
        ),
        resource(Kind::SecurityGroup, "sg-untagged", BTreeMap::new()),
        Resource {
            default_group: true,
            ..resource(Kind::SecurityGroup, "sg-default", owned())
        },
        Resource {
            tags: {
                let mut tags = owned();
                tags.insert("aws:eks:cluster-name".into(), CLUSTER.into());
                tags
            },
            ..Resource::new(Kind::SecurityGroup, "sg-eks")
        },
    ])
}

#[tokio::test]
async fn everything_owned_goes_in_dependency_order_and_nothing_else() {
    let cloud = footprint();
    let report = run(&cloud, &scope(TaskSet::default())).await;
    assert!(report.complete, "{report:?}");
    assert_eq!(
        cloud.ids(),
        BTreeSet::from(
            [
                "sg-other-cluster",
                "sg-shared",
                "sg-untagged",
                "sg-default",
                "sg-eks",
                "vol-data"
            ]
            .map(String::from)
        ),
        "only foreign, shared, untagged, default, EKS groups and the (not asked) volume stay"
    );
    let lb = lb("web", &[]).id;
    let tg = tg("web", &[]).id;
    assert!(
        cloud.position(&lb) < cloud.position(&tg),
        "LB before its TG"
    );
    assert!(cloud.position(&lb) < cloud.position("sg-lb"));
    assert!(cloud.position("legacy") < cloud.position("sg-lb"));
    assert!(cloud.position("eni-untagged") < cloud.position("sg-node"));
    assert!(cloud.position("eipalloc-1") < cloud.position("eni-owned"));
    assert!(cloud.position("eni-owned") < cloud.position("sg-node"));
    let log = cloud.log.lock().unwrap().clone();
    let revoke = log
        .iter()
        .position(|a| matches!(a, Action::RevokeReferences { group, referenced } if group == "sg-node" && referenced == "sg-lb"))
        .expect("the rule of sg-node that references sg-lb is revoked");
    let disassociate = log
        .iter()
        .position(|a| matches!(a, Action::Disassociate { .. }))
        .expect("the EIP is disassociated");
    let release = log
        .iter()
        .position(|a| matches!(a, Action::Delete { id, .. } if id == "eipalloc-1"))
        .expect("released");
    assert!(disassociate < release);
    assert!(
        revoke
            < log
                .iter()
                .position(|a| matches!(a, Action::Delete { id, .. } if id == "sg-lb"))
                .expect("sg-lb")
    );
    // The fake refuses out-of-order deletes, so a refusal would show as an extra Delete call.
    assert_eq!(report.deleted.len(), 8, "{:?}", cloud.deletes());
    assert_eq!(
        cloud.deletes().len(),
        8,
        "no delete was refused: {:?}",
        cloud.deletes()
    );
}

#[tokio::test]
async fn the_plan_lists_exactly_what_the_teardown_deletes_in_a_valid_order() {
    let cloud = footprint();
    let inventory = discover(&cloud, &scope(TaskSet::default()))
        .await
        .expect("discover");
    let plan: Vec<String> = inventory.plan().iter().map(|(r, _)| r.id.clone()).collect();
    run(&cloud, &scope(TaskSet::default())).await;
    let mut planned = plan.clone();
    planned.sort();
    let mut deleted = cloud.deletes();
    deleted.sort();
    assert_eq!(planned, deleted);
    let at = |id: &str| plan.iter().position(|p| p == id).expect(id);
    assert!(at(&lb("web", &[]).id) < at(&tg("web", &[]).id));
    assert!(at("legacy") < at("sg-lb"));
    assert!(at("eni-untagged") < at("sg-node"));
}

#[tokio::test]
async fn volumes_go_only_when_asked_and_never_while_attached() {
    let cloud = FakeCloud::with(vec![
        resource(Kind::Volume, "vol-free", owned()),
        Resource {
            attached_to: Some("i-123".into()),
            ..resource(Kind::Volume, "vol-attached", owned())
        },
    ]);
    let report = run(&cloud, &scope(TaskSet::default())).await;
    assert!(report.complete, "volumes are not collected by default");
    assert_eq!(cloud.ids().len(), 2);
    let report = run(&cloud, &scope(TaskSet::of([Task::Volume]))).await;
    assert!(!report.complete);
    assert_eq!(cloud.ids(), BTreeSet::from(["vol-attached".to_string()]));
    let blocked = report.blocked();
    assert_eq!(blocked.len(), 1);
    assert_eq!(blocked[0].1, ["attached to i-123"]);
    assert!(!cloud.deletes().contains(&"vol-attached".to_string()));
}

#[tokio::test]
async fn a_group_in_use_by_something_not_ours_is_blocked_and_names_the_blocker() {
    let cloud = FakeCloud::with(vec![
        resource(Kind::SecurityGroup, "sg-lb", owned()),
        Resource {
            security_groups: vec!["sg-lb".into()],
            attached_to: Some("ELB app/web".into()),
            ..resource(Kind::NetworkInterface, "eni-elb", BTreeMap::new())
        },
    ]);
    let report = run(&cloud, &scope(TaskSet::default())).await;
    assert!(!report.complete);
    let blocked = report.blocked();
    assert_eq!(blocked.len(), 1, "{report:?}");
    assert_eq!(blocked[0].0.id, "sg-lb");
    assert_eq!(blocked[0].1, ["network-interface/eni-elb"]);
    assert!(
        cloud.deletes().is_empty(),
        "nothing is attempted while blocked"
    );
    // The ENI goes (AWS removes it after its load balancer): the next teardown completes.
    cloud.resources.lock().unwrap().remove("eni-elb");
    assert!(run(&cloud, &scope(TaskSet::default())).await.complete);
}

#[tokio::test]
async fn an_unexpected_dependency_violation_blocks_until_the_next_pass() {
    let cloud = FakeCloud::with(vec![resource(Kind::SecurityGroup, "sg-1", owned())]);
    cloud.fail(
        "delete security-group sg-1",
        in_use(
            "DependencyViolation",
            "resource sg-1 has a dependent object".into(),
        ),
        1,
    );
    let report = run(&cloud, &scope(TaskSet::default())).await;
    assert!(!report.complete);
    let blocked = report.blocked();
    assert_eq!(blocked.len(), 1);
    assert!(
        blocked[0]
            .2
            .is_some_and(|e| e.starts_with("DependencyViolation")),
        "{blocked:?}"
    );
    assert!(report.failures().is_empty());
    assert!(run(&cloud, &scope(TaskSet::default())).await.complete);
}

#[tokio::test]
async fn other_errors_are_failures_and_a_discovery_error_deletes_nothing() {
    let cloud = FakeCloud::with(vec![resource(Kind::SecurityGroup, "sg-1", owned())]);
    cloud.fail(
        "delete",
        CloudError::from_code(Some("InternalError"), "try again"),
        1,
    );
    let report = run(&cloud, &scope(TaskSet::default())).await;
    assert_eq!(report.failures().len(), 1);
    assert!(!report.complete);
    assert!(run(&cloud, &scope(TaskSet::default())).await.complete);
}

#[tokio::test]
async fn a_resource_retagged_after_discovery_is_left_alone() {
    let cloud = FakeCloud::with(vec![resource(Kind::SecurityGroup, "sg-1", owned())]);
    let scope = scope(TaskSet::default());
    let inventory = discover(&cloud, &scope).await.expect("discover");
    assert_eq!(inventory.collectable().count(), 1);
    // Someone marks it shared between the discovery and the delete.
    cloud
        .resources
        .lock()
        .unwrap()
        .get_mut("sg-1")
        .expect("sg-1")
        .tags = tagged(&format!("{CLUSTER_TAG_PREFIX}{CLUSTER}"), "shared");
    let limits = limits();
    let metered = Metered {
        api: &cloud,
        limits: &limits,
        account: "test",
        calls: AtomicU64::new(0),
    };
    // The pass describes it again before deleting, and sees the new tag.
    let outcomes = pass(&metered, &scope, &inventory, 1).await;
    assert_eq!(outcomes.len(), 1, "{outcomes:?}");
    assert!(matches!(outcomes[0].1, Outcome::Skipped(_)), "{outcomes:?}");
    assert!(cloud.deletes().is_empty());
}

#[tokio::test]
async fn describe_mode_finds_the_same_footprint_without_the_tagging_api() {
    let tagging = footprint();
    let describe = footprint();
    let mut by_describe = scope(TaskSet::default());
    by_describe.discovery = Discovery::Describe;
    let a = discover(&tagging, &scope(TaskSet::default()))
        .await
        .expect("tagging");
    let b = discover(&describe, &by_describe).await.expect("describe");
    let ids = |i: &Inventory| {
        i.collectable()
            .map(|i| i.resource.id.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(ids(&a), ids(&b));
}

#[test]
fn arns_name_their_kind_and_delete_id() {
    assert_eq!(
        parse_arn("arn:aws:elasticloadbalancing:us-east-1:1:loadbalancer/clb1"),
        Some((Kind::ClassicLoadBalancer, "clb1".into()))
    );
    let alb = "arn:aws:elasticloadbalancing:us-east-1:1:loadbalancer/net/n/9";
    assert_eq!(parse_arn(alb), Some((Kind::LoadBalancer, alb.into())));
    assert_eq!(
        parse_arn("arn:aws:ec2:us-east-1:1:security-group/sg-1"),
        Some((Kind::SecurityGroup, "sg-1".into()))
    );
    assert_eq!(parse_arn("arn:aws:ec2:us-east-1:1:vpc/vpc-1"), None);
}

#[test]
fn shared_is_never_owned_and_the_controller_tag_is_opt_in() {
    let mut s = scope(TaskSet::default());
    let shared = resource(
        Kind::SecurityGroup,
        "sg",
        tagged(&format!("{CLUSTER_TAG_PREFIX}{CLUSTER}"), "shared"),
    );
    assert!(s.not_owned(&shared).is_some());
    let lbc = resource(
        Kind::LoadBalancer,
        "arn",
        tagged(LOAD_BALANCER_CONTROLLER_TAG, CLUSTER),
    );
    assert!(s.not_owned(&lbc).is_some());
    s.load_balancer_controller_tag = true;
    assert!(s.not_owned(&lbc).is_none());
    let other = resource(
        Kind::LoadBalancer,
        "arn",
        tagged(LOAD_BALANCER_CONTROLLER_TAG, "c2"),
    );
    assert!(s.not_owned(&other).is_some());
}
