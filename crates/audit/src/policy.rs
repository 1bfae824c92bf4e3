//! The audit policy (`audit.k8s.io/v1` `Policy`): reading it as upstream's `reader.go` does,
//! validating it as `validation.go` does, and deciding per request what to record as
//! `checker.go` does.
//!
//! Evaluation is a walk over the rules with string comparisons, no allocation: it runs on every
//! request, before the handler.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer};

mod read;
#[cfg(test)]
mod tests;

/// How much of a request is recorded (`audit.k8s.io/v1` `Level`). Ordered as upstream's
/// `Level.Less`: `None < Metadata < Request < RequestResponse`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, serde::Serialize,
)]
pub enum Level {
    /// No event at all.
    None,
    /// Who did what to which object, and the outcome; no bodies.
    Metadata,
    /// Metadata and the request body.
    Request,
    /// Metadata, the request body and the response body.
    RequestResponse,
}

/// When in a request's life an event is written (`audit.k8s.io/v1` `Stage`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, serde::Serialize)]
pub enum Stage {
    /// As soon as the request is received, before it is handled.
    RequestReceived,
    /// Once the response headers are sent, before the body; only long-running requests
    /// (watch) have it.
    ResponseStarted,
    /// Once the response is complete.
    ResponseComplete,
    /// When the handler panicked.
    Panic,
}

impl Stage {
    /// Every stage, in the order of a request's life.
    pub const ALL: [Stage; 4] = [
        Stage::RequestReceived,
        Stage::ResponseStarted,
        Stage::ResponseComplete,
        Stage::Panic,
    ];

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// A set of stages. A bit set rather than upstream's slice: the result of every policy
/// evaluation carries one, and this one is `Copy` and allocation-free.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StageSet(u8);

impl StageSet {
    /// No stage.
    pub const EMPTY: StageSet = StageSet(0);

    /// Whether `stage` is in the set.
    pub fn contains(self, stage: Stage) -> bool {
        self.0 & stage.bit() != 0
    }

    /// The set with `stage` added.
    #[must_use]
    pub fn with(self, stage: Stage) -> StageSet {
        StageSet(self.0 | stage.bit())
    }

    /// Both sets' stages.
    #[must_use]
    pub fn union(self, other: StageSet) -> StageSet {
        StageSet(self.0 | other.0)
    }
}

impl FromIterator<Stage> for StageSet {
    fn from_iter<I: IntoIterator<Item = Stage>>(stages: I) -> Self {
        stages.into_iter().fold(StageSet::EMPTY, StageSet::with)
    }
}

/// An audit policy: the first rule that matches a request decides its level.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    /// The rules, tried in order.
    pub rules: Vec<PolicyRule>,
    /// Stages never written, whatever the rule.
    pub omit_stages: Vec<Stage>,
    /// Drop `metadata.managedFields` from recorded bodies, unless a rule says otherwise.
    pub omit_managed_fields: bool,
    /// Keys the decoder did not know, as paths (`rules[0].levle`). Upstream decodes strictly
    /// first and, when that fails, warns and decodes again leniently: such a policy loads.
    unknown_fields: Vec<String>,
}

/// One rule of a [`Policy`]. Every non-empty list must match; an empty list matches all.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyRule {
    /// What to record for the requests this rule matches.
    pub level: Level,
    /// User names (exact).
    #[serde(default, deserialize_with = "nullable")]
    pub users: Vec<String>,
    /// Groups, any of which the user must be in.
    #[serde(default, deserialize_with = "nullable")]
    pub user_groups: Vec<String>,
    /// Verbs (`get`, `list`, `watch`, `create`, …; lower-case HTTP methods for non-resource
    /// requests). No wildcard: `*` matches only a verb named `*`.
    #[serde(default, deserialize_with = "nullable")]
    pub verbs: Vec<String>,
    /// Resources; a non-empty list matches only resource requests.
    #[serde(default, deserialize_with = "nullable")]
    pub resources: Vec<GroupResources>,
    /// Namespaces; `""` is cluster-scoped. A non-empty list matches only resource requests.
    #[serde(default, deserialize_with = "nullable")]
    pub namespaces: Vec<String>,
    /// Paths of non-resource requests (`/healthz`, `/api*`); `*` alone matches all.
    #[serde(default, rename = "nonResourceURLs", deserialize_with = "nullable")]
    pub non_resource_urls: Vec<String>,
    /// Stages not written for the requests this rule matches, on top of the policy's.
    #[serde(default, deserialize_with = "nullable")]
    pub omit_stages: Vec<Stage>,
    /// Overrides the policy's `omitManagedFields` when set.
    #[serde(default)]
    pub omit_managed_fields: Option<bool>,
}

/// Resources of one API group in a [`PolicyRule`].
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupResources {
    /// The API group; `""` is the core group. No wildcard.
    #[serde(default, deserialize_with = "nullable")]
    pub group: String,
    /// `pods`, `pods/log` (a subresource), `pods/*` (pods and all their subresources),
    /// `*/scale` (that subresource of any resource), `*` (everything). Empty: all.
    #[serde(default, deserialize_with = "nullable")]
    pub resources: Vec<String>,
    /// Object names; needs `resources`.
    #[serde(default, deserialize_with = "nullable")]
    pub resource_names: Vec<String>,
}

/// What the policy needs to know about a request: the authorizer's attributes.
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestAttributes<'a> {
    /// The authenticated user's name; `None` when authentication failed, and then rules
    /// naming `users` or `userGroups` never match (upstream: a nil user).
    pub user: Option<&'a str>,
    /// The user's groups.
    pub groups: &'a [String],
    /// The verb (`get`, `list`, `watch`, `create`, `update`, `patch`, `delete`,
    /// `deletecollection`; for non-resource requests the lower-case HTTP method).
    pub verb: &'a str,
    /// Whether the request is for a resource (`/api/…`, `/apis/…` with a resource).
    pub resource_request: bool,
    /// The API group, `""` for core.
    pub api_group: &'a str,
    /// The API version (`v1`); recorded in the event's `objectRef`, not matched.
    pub api_version: &'a str,
    /// The resource (`pods`).
    pub resource: &'a str,
    /// The subresource (`log`), or `""`.
    pub subresource: &'a str,
    /// The namespace, `""` for cluster-scoped requests.
    pub namespace: &'a str,
    /// The object's name, `""` for collections.
    pub name: &'a str,
    /// The URL path, matched by `nonResourceURLs`.
    pub path: &'a str,
}

/// What to record for one request: the result of [`Policy::evaluate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestAuditConfig {
    /// The level; [`Level::None`] means no event at all.
    pub level: Level,
    /// Stages not written.
    pub omit_stages: StageSet,
    /// Drop `metadata.managedFields` from recorded bodies.
    pub omit_managed_fields: bool,
}

/// Why a policy could not be loaded. The message names the file (as the flag that gave it)
/// and, for syntax and type errors, the line and column.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// The file could not be read.
    #[error("--audit-policy-file {}: cannot read it: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The text is not YAML or JSON, or does not have the shape of a `Policy`.
    #[error("{origin}: {}{message}", location.map(|(l, c)| format!("line {l} column {c}: ")).unwrap_or_default())]
    Parse {
        /// Where the text came from: `--audit-policy-file PATH` or `audit policy`.
        origin: String,
        /// Line and column (1-based) of the offending node, when known.
        location: Option<(u64, u64)>,
        /// The decoder's message.
        message: String,
    },
    /// The policy decoded but breaks upstream's validation rules.
    #[error("{origin}: {}", problems.join("; "))]
    Invalid {
        /// Where the text came from.
        origin: String,
        /// One entry per broken rule, as `field.path: what is wrong`.
        problems: Vec<String>,
    },
}

impl Policy {
    /// A policy with these rules, no omitted stage, managed fields kept. It is not validated:
    /// [`Policy::validate`] says what upstream would refuse.
    pub fn new(rules: Vec<PolicyRule>) -> Policy {
        Policy {
            rules,
            omit_stages: Vec::new(),
            omit_managed_fields: false,
            unknown_fields: Vec::new(),
        }
    }

    /// Reads, decodes and validates a policy file (YAML or JSON), as kube-apiserver's
    /// `--audit-policy-file`. Unknown fields are logged (`tracing::warn!`) and available from
    /// [`Policy::unknown_fields`], as upstream warns and falls back to lenient decoding.
    pub fn load(path: impl AsRef<Path>) -> Result<Policy, PolicyError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| PolicyError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        read::decode(&text, &format!("--audit-policy-file {}", path.display()))
    }

    /// Decodes and validates a policy from text (YAML or JSON), as [`Policy::load`].
    pub fn from_yaml_str(text: &str) -> Result<Policy, PolicyError> {
        read::decode(text, "audit policy")
    }

    /// Finale's policy when `--audit-log-path` is given without `--audit-policy-file`
    /// (kube-apiserver would audit nothing): reads of Events are not recorded — they are
    /// frequent and say nothing about who changed what — and every other request is
    /// recorded at `Metadata`, once complete (`RequestReceived` is omitted).
    pub fn default_metadata() -> Policy {
        let strings = |items: &[&str]| items.iter().map(|s| (*s).to_owned()).collect();
        let events = |group: &str| GroupResources {
            group: group.to_owned(),
            resources: strings(&["events"]),
            resource_names: Vec::new(),
        };
        Policy {
            omit_stages: vec![Stage::RequestReceived],
            ..Policy::new(vec![
                PolicyRule {
                    verbs: strings(&["get", "list", "watch"]),
                    resources: vec![events(""), events("events.k8s.io")],
                    ..PolicyRule::new(Level::None)
                },
                PolicyRule::new(Level::Metadata),
            ])
        }
    }

    /// Keys of the file that upstream's strict decoder would have refused, as paths
    /// (`rules[2].levle`). The policy loads anyway, as upstream's lenient fallback does; a
    /// caller that wants strictness refuses a policy with any.
    pub fn unknown_fields(&self) -> &[String] {
        &self.unknown_fields
    }

    /// What to record for a request: the first matching rule's level, its `omitStages`
    /// united with the policy's, and its `omitManagedFields` (else the policy's). No rule
    /// matches: level `None` (upstream `checker.go`).
    pub fn evaluate(&self, request: &RequestAttributes<'_>) -> RequestAuditConfig {
        let policy_stages: StageSet = self.omit_stages.iter().copied().collect();
        match self.rules.iter().find(|rule| rule.matches(request)) {
            Some(rule) => RequestAuditConfig {
                level: rule.level,
                omit_stages: policy_stages.union(rule.omit_stages.iter().copied().collect()),
                omit_managed_fields: rule.omit_managed_fields.unwrap_or(self.omit_managed_fields),
            },
            None => RequestAuditConfig {
                level: Level::None,
                omit_stages: policy_stages,
                omit_managed_fields: self.omit_managed_fields,
            },
        }
    }
}

impl PolicyRule {
    /// A rule at `level` that matches every request.
    pub fn new(level: Level) -> PolicyRule {
        PolicyRule {
            level,
            users: Vec::new(),
            user_groups: Vec::new(),
            verbs: Vec::new(),
            resources: Vec::new(),
            namespaces: Vec::new(),
            non_resource_urls: Vec::new(),
            omit_stages: Vec::new(),
            omit_managed_fields: None,
        }
    }

    /// Upstream's `ruleMatches`.
    fn matches(&self, request: &RequestAttributes<'_>) -> bool {
        if !self.users.is_empty() && !request.user.is_some_and(|user| has(&self.users, user)) {
            return false;
        }
        if !self.user_groups.is_empty()
            && (request.user.is_none()
                || !request
                    .groups
                    .iter()
                    .any(|group| has(&self.user_groups, group)))
        {
            return false;
        }
        if !self.verbs.is_empty() && !has(&self.verbs, request.verb) {
            return false;
        }
        if !self.namespaces.is_empty() || !self.resources.is_empty() {
            return self.matches_resource(request);
        }
        if !self.non_resource_urls.is_empty() {
            return !request.resource_request
                && self
                    .non_resource_urls
                    .iter()
                    .any(|spec| path_matches(request.path, spec));
        }
        true
    }

    /// Upstream's `ruleMatchesResource`.
    fn matches_resource(&self, request: &RequestAttributes<'_>) -> bool {
        if !request.resource_request {
            return false;
        }
        // Cluster-scoped requests have the namespace "", which a rule lists as "".
        if !self.namespaces.is_empty() && !has(&self.namespaces, request.namespace) {
            return false;
        }
        if self.resources.is_empty() {
            return true;
        }
        let (resource, subresource) = (request.resource, request.subresource);
        self.resources
            .iter()
            .filter(|gr| gr.group == request.api_group)
            .any(|gr| {
                if gr.resources.is_empty() {
                    return true;
                }
                if !gr.resource_names.is_empty() && !has(&gr.resource_names, request.name) {
                    return false;
                }
                gr.resources.iter().any(|spec| {
                    spec == "*"
                        || combined_is(spec, resource, subresource)
                        || (!subresource.is_empty() && spec.strip_prefix("*/") == Some(subresource))
                        // `pods/*` also matches `pods` itself, as upstream.
                        || spec.strip_suffix("/*") == Some(resource)
                })
            })
    }
}

/// Whether `spec` is `resource` (no subresource) or `resource/subresource`.
fn combined_is(spec: &str, resource: &str, subresource: &str) -> bool {
    if subresource.is_empty() {
        return spec == resource;
    }
    spec.strip_prefix(resource)
        .and_then(|rest| rest.strip_prefix('/'))
        == Some(subresource)
}

/// Upstream's `pathMatches`: `*`, the exact path, or a prefix ending in `*`.
fn path_matches(path: &str, spec: &str) -> bool {
    if spec == "*" || spec == path {
        return true;
    }
    // Upstream trims every trailing `*` (strings.TrimRight), so `/api**` is `/api*`.
    spec.ends_with('*') && path.starts_with(spec.trim_end_matches('*'))
}

fn has(list: &[String], value: &str) -> bool {
    list.iter().any(|item| item == value)
}

/// Reads `null` (`users: ~`, or a key with nothing after it) as the empty value, as Go's
/// decoder leaves a nil slice.
fn nullable<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}
