//! What the GC engine needs from a cloud account, as a small trait ([`CloudApi`]) over plain
//! data ([`Resource`], [`Action`], [`CloudError`]), so that the engine is tested on an in-memory
//! model and runs on the AWS SDK (`finale-cloud-aws`) unchanged.
//!
//! # Assumptions
//! - `describe` returns each resource's tags as the cloud stores them: ownership is decided on
//!   them, never on how the resource was found.
//! - A resource that no longer exists is absent from `describe`'s answer, or reported with an
//!   error of class [`ErrorClass::NotFound`]; both mean "gone".

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;

/// The kinds of resource the engine knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// ELBv2: an ALB or NLB; its id is the ARN. Listeners go with it.
    LoadBalancer,
    /// A classic ELB; its id is the name.
    ClassicLoadBalancer,
    /// An ELBv2 target group; its id is the ARN.
    TargetGroup,
    SecurityGroup,
    NetworkInterface,
    /// An Elastic IP; its id is the allocation id.
    ElasticIp,
    /// An EBS volume.
    Volume,
}

impl Kind {
    pub const ALL: [Kind; 7] = [
        Kind::LoadBalancer,
        Kind::ClassicLoadBalancer,
        Kind::TargetGroup,
        Kind::SecurityGroup,
        Kind::NetworkInterface,
        Kind::ElasticIp,
        Kind::Volume,
    ];

    /// The name used in status, plans and Events.
    pub fn name(self) -> &'static str {
        match self {
            Kind::LoadBalancer => "load-balancer",
            Kind::ClassicLoadBalancer => "classic-load-balancer",
            Kind::TargetGroup => "target-group",
            Kind::SecurityGroup => "security-group",
            Kind::NetworkInterface => "network-interface",
            Kind::ElasticIp => "elastic-ip",
            Kind::Volume => "volume",
        }
    }

    /// The fallback order when no edge says otherwise (lower goes first).
    pub fn rank(self) -> u8 {
        match self {
            Kind::LoadBalancer | Kind::ClassicLoadBalancer => 0,
            Kind::TargetGroup => 1,
            Kind::ElasticIp => 2,
            Kind::NetworkInterface => 3,
            Kind::SecurityGroup => 4,
            Kind::Volume => 5,
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One resource as described by the cloud, with what the dependency graph needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resource {
    pub kind: Kind,
    /// What the delete call takes (see [`Kind`]).
    pub id: String,
    /// A human name when the id is not one (an ARN's load balancer or target group name).
    pub name: Option<String>,
    pub tags: BTreeMap<String, String>,
    /// Load balancers and ENIs: the security groups they use.
    pub security_groups: Vec<String>,
    /// Target groups: the ARNs of the load balancers whose listeners use them.
    pub load_balancers: Vec<String>,
    /// Security groups: the other groups their rules reference (ingress and egress).
    pub references: Vec<String>,
    /// Security groups: the VPC's default group, which cannot and must not be deleted.
    pub default_group: bool,
    /// ENIs: attached to something (the instance, or the service that manages it); volumes:
    /// the instance they are attached to. `None` = available.
    pub attached_to: Option<String>,
    /// Elastic IPs: the association id, while associated.
    pub association: Option<String>,
    /// Elastic IPs: the ENI they are associated with.
    pub network_interface: Option<String>,
}

impl Resource {
    /// A resource with no tags and no relations yet.
    pub fn new(kind: Kind, id: impl Into<String>) -> Resource {
        Resource {
            kind,
            id: id.into(),
            name: None,
            tags: BTreeMap::new(),
            security_groups: Vec::new(),
            load_balancers: Vec::new(),
            references: Vec::new(),
            default_group: false,
            attached_to: None,
            association: None,
            network_interface: None,
        }
    }

    /// `kind/name-or-id`, for people.
    pub fn label(&self) -> String {
        format!("{}/{}", self.kind, self.name.as_deref().unwrap_or(&self.id))
    }
}

/// How to select resources for [`CloudApi::describe`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Query {
    /// Exactly these ids (the missing ones are simply absent from the answer).
    Ids(Vec<String>),
    /// Every resource of the kind carrying tag `key` = `value`.
    Tagged { key: String, value: String },
    /// ENIs only: every ENI using one of these security groups.
    UsingGroups(Vec<String>),
}

/// One mutating call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Deletes the resource (`kind`, `id`).
    Delete { kind: Kind, id: String },
    /// Revokes every rule of security group `group` that references group `referenced`.
    RevokeReferences { group: String, referenced: String },
    /// Disassociates an Elastic IP (by association id).
    Disassociate { association: String },
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Delete { kind, id } => write!(f, "delete {kind} {id}"),
            Action::RevokeReferences { group, referenced } => {
                write!(f, "revoke the rules of {group} that reference {referenced}")
            }
            Action::Disassociate { association } => write!(f, "disassociate {association}"),
        }
    }
}

/// What kind of failure a call met; decides what the engine does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorClass {
    /// The resource is gone: done.
    NotFound,
    /// Something still uses it (`DependencyViolation`, `ResourceInUse`, `…InUse`): blocked,
    /// retried next pass.
    InUse,
    /// The account is throttled: retried with backoff.
    Throttled,
    /// Credentials or permissions: a person must act.
    Denied,
    /// Anything else (network, 5xx, …): retried with backoff.
    Other,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}{message}", code.as_ref().map(|c| format!("{c}: ")).unwrap_or_default())]
pub struct CloudError {
    pub class: ErrorClass,
    /// The service's error code (`DependencyViolation`), when it sent one.
    pub code: Option<String>,
    pub message: String,
}

impl CloudError {
    /// Sorts an error by its service code.
    pub fn from_code(code: Option<&str>, message: impl Into<String>) -> CloudError {
        CloudError {
            class: code.map_or(ErrorClass::Other, classify),
            code: code.map(str::to_string),
            message: message.into(),
        }
    }

    pub fn other(message: impl Into<String>) -> CloudError {
        CloudError {
            class: ErrorClass::Other,
            code: None,
            message: message.into(),
        }
    }
}

/// The class of an AWS error code.
pub fn classify(code: &str) -> ErrorClass {
    match code {
        "DependencyViolation"
        | "ResourceInUse"
        | "VolumeInUse"
        | "InvalidIPAddress.InUse"
        | "InvalidNetworkInterface.InUse"
        | "InvalidConfigurationRequest" => ErrorClass::InUse,
        "Throttling" | "ThrottlingException" | "RequestLimitExceeded" | "TooManyRequests" => {
            ErrorClass::Throttled
        }
        "AccessDenied"
        | "AccessDeniedException"
        | "UnauthorizedOperation"
        | "AuthFailure"
        | "InvalidClientTokenId"
        | "SignatureDoesNotMatch" => ErrorClass::Denied,
        code if code.ends_with(".NotFound")
            || code.ends_with("NotFound")
            || code == "LoadBalancerNotFound"
            || code == "InvalidAllocationID.NotFound" =>
        {
            ErrorClass::NotFound
        }
        _ => ErrorClass::Other,
    }
}

/// One cloud account (region and credentials) as the engine sees it.
#[async_trait]
pub trait CloudApi: Send + Sync {
    /// The ARNs of every resource tagged `key` = `value`, every page of them (the Resource
    /// Groups Tagging API).
    async fn tagged(&self, key: &str, value: &str) -> Result<Vec<String>, CloudError>;

    /// The resources of `kind` that `query` selects, with their tags.
    async fn describe(&self, kind: Kind, query: &Query) -> Result<Vec<Resource>, CloudError>;

    /// Performs one mutating call.
    async fn act(&self, action: &Action) -> Result<(), CloudError>;
}

/// Where a cluster's resources live and how to reach them.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Target {
    pub region: String,
    /// Overrides every service's URL (an emulator, a private endpoint).
    pub endpoint: Option<String>,
    /// Static credentials; `None` uses the SDK's default credential chain.
    pub credentials: Option<StaticCredentials>,
}

#[derive(Clone, PartialEq, Eq, Hash)]
pub struct StaticCredentials {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: Option<String>,
}

impl fmt::Debug for StaticCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the secret.
        f.debug_struct("StaticCredentials")
            .field("access_key_id", &self.access_key_id)
            .finish_non_exhaustive()
    }
}

impl Target {
    /// The rate-limit key: one bucket per account (as far as the operator can tell without an
    /// STS call: the access key, or the default chain) and endpoint.
    pub fn account_key(&self) -> String {
        format!(
            "aws/{}/{}/{}",
            self.endpoint.as_deref().unwrap_or("default-endpoint"),
            self.region,
            self.credentials
                .as_ref()
                .map_or("default-credentials", |c| c.access_key_id.as_str())
        )
    }
}

/// Builds a [`CloudApi`] for a target.
#[async_trait]
pub trait Connector: Send + Sync {
    async fn connect(&self, target: &Target) -> anyhow::Result<Arc<dyn CloudApi>>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_codes_are_sorted_by_what_they_mean_for_teardown() {
        assert_eq!(classify("DependencyViolation"), ErrorClass::InUse);
        assert_eq!(classify("ResourceInUse"), ErrorClass::InUse);
        assert_eq!(classify("InvalidGroup.NotFound"), ErrorClass::NotFound);
        assert_eq!(classify("TargetGroupNotFound"), ErrorClass::NotFound);
        assert_eq!(classify("LoadBalancerNotFound"), ErrorClass::NotFound);
        assert_eq!(classify("RequestLimitExceeded"), ErrorClass::Throttled);
        assert_eq!(classify("UnauthorizedOperation"), ErrorClass::Denied);
        assert_eq!(classify("InternalError"), ErrorClass::Other);
        let error = CloudError::from_code(Some("DependencyViolation"), "in use");
        assert_eq!(error.to_string(), "DependencyViolation: in use");
    }
}
