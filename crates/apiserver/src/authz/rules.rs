//! RBAC's `PolicyRule`: what a rule allows, and whether one set of rules covers another
//! (privilege-escalation prevention). Both follow upstream's `rbac/v1` helpers exactly:
//! `*` matches every verb, group, resource (subresources included) and URL; `*/status`
//! matches the `status` subresource of every resource; a trailing `*` in a
//! `nonResourceURLs` entry matches by prefix; empty `resourceNames` means every name.

use serde::{Deserialize, Serialize};

use super::Attributes;

/// One rule of a Role or ClusterRole.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyRule {
    #[serde(default)]
    pub verbs: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub api_groups: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_names: Vec<String>,
    #[serde(
        default,
        rename = "nonResourceURLs",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub non_resource_urls: Vec<String>,
}

const ALL: &str = "*";

fn has(set: &[String], item: &str) -> bool {
    set.iter().any(|s| s == item)
}

impl PolicyRule {
    /// `*` verbs on `*` resources of `*` groups: what `system:masters` holds.
    pub fn everything() -> PolicyRule {
        PolicyRule {
            verbs: vec![ALL.into()],
            api_groups: vec![ALL.into()],
            resources: vec![ALL.into()],
            ..PolicyRule::default()
        }
    }

    /// `*` verbs on every non-resource URL.
    pub fn every_url() -> PolicyRule {
        PolicyRule {
            verbs: vec![ALL.into()],
            non_resource_urls: vec![ALL.into()],
            ..PolicyRule::default()
        }
    }

    /// Upstream's `RuleAllows`.
    pub fn allows(&self, request: &Attributes) -> bool {
        let verb = has(&self.verbs, ALL) || has(&self.verbs, &request.verb);
        if !verb {
            return false;
        }
        if !request.resource_request {
            return self
                .non_resource_urls
                .iter()
                .any(|url| url_covers(url, &request.path));
        }
        (has(&self.api_groups, ALL) || has(&self.api_groups, &request.api_group))
            && self.matches_resource(&request.combined_resource(), &request.subresource)
            && (self.resource_names.is_empty() || has(&self.resource_names, &request.name))
    }

    fn matches_resource(&self, combined: &str, subresource: &str) -> bool {
        self.resources.iter().any(|rule| {
            rule == ALL
                || rule == combined
                || (!subresource.is_empty() && rule.strip_prefix("*/") == Some(subresource))
        })
    }

    /// Upstream's `BreakdownRule`: one rule per group × resource × verb × name (or per URL ×
    /// verb), so that coverage can be checked piece by piece.
    fn breakdown(&self) -> Vec<PolicyRule> {
        let mut atoms = Vec::new();
        let names: Vec<Option<&String>> = if self.resource_names.is_empty() {
            vec![None]
        } else {
            self.resource_names.iter().map(Some).collect()
        };
        for group in &self.api_groups {
            for resource in &self.resources {
                for verb in &self.verbs {
                    for name in &names {
                        atoms.push(PolicyRule {
                            verbs: vec![verb.clone()],
                            api_groups: vec![group.clone()],
                            resources: vec![resource.clone()],
                            resource_names: name.map(|n| vec![n.clone()]).unwrap_or_default(),
                            non_resource_urls: Vec::new(),
                        });
                    }
                }
            }
        }
        for url in &self.non_resource_urls {
            for verb in &self.verbs {
                atoms.push(PolicyRule {
                    verbs: vec![verb.clone()],
                    non_resource_urls: vec![url.clone()],
                    ..PolicyRule::default()
                });
            }
        }
        atoms
    }

    /// Upstream's `ruleCovers`: everything `sub` grants, `self` grants too.
    fn covers(&self, sub: &PolicyRule) -> bool {
        let all_of = |owner: &[String], wanted: &[String]| {
            has(owner, ALL) || wanted.iter().all(|w| has(owner, w))
        };
        let resources = has(&self.resources, ALL)
            || sub.resources.iter().all(|wanted| {
                has(&self.resources, wanted)
                    || wanted
                        .split_once('/')
                        .is_some_and(|(_, sub)| has(&self.resources, &format!("*/{sub}")))
            });
        let urls = sub.non_resource_urls.iter().all(|wanted| {
            self.non_resource_urls
                .iter()
                .any(|url| url_covers(url, wanted))
        });
        let names = self.resource_names.is_empty()
            || (!sub.resource_names.is_empty()
                && sub
                    .resource_names
                    .iter()
                    .all(|n| has(&self.resource_names, n)));
        all_of(&self.verbs, &sub.verbs)
            && all_of(&self.api_groups, &sub.api_groups)
            && resources
            && names
            && urls
    }

    /// Upstream's `CompactString`, how escalation errors print a rule:
    /// `{APIGroups:[""], Resources:["pods"], Verbs:["get"]}`.
    pub fn compact(&self) -> String {
        let list = |values: &[String]| {
            values
                .iter()
                .map(|v| format!("{v:?}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let mut fields = Vec::new();
        for (name, values) in [
            ("APIGroups", &self.api_groups),
            ("Resources", &self.resources),
            ("ResourceNames", &self.resource_names),
            ("NonResourceURLs", &self.non_resource_urls),
            ("Verbs", &self.verbs),
        ] {
            if !values.is_empty() {
                fields.push(format!("{name}:[{}]", list(values)));
            }
        }
        format!("{{{}}}", fields.join(", "))
    }
}

/// A `nonResourceURLs` entry against a path: equal, `*`, or a prefix ending in `*`.
fn url_covers(rule: &str, path: &str) -> bool {
    rule == ALL
        || rule == path
        || rule
            .strip_suffix('*')
            .is_some_and(|prefix| path.starts_with(prefix))
}

/// Upstream's `Covers`: the atomic rules of `requested` that no rule of `owned` covers
/// (empty when `owned` covers them all).
pub fn uncovered(owned: &[PolicyRule], requested: &[PolicyRule]) -> Vec<PolicyRule> {
    requested
        .iter()
        .flat_map(PolicyRule::breakdown)
        .filter(|atom| !owned.iter().any(|rule| rule.covers(atom)))
        .collect()
}

/// Reads a role's `rules` (an absent list is no rules).
pub fn parse_rules(role: &serde_json::Value) -> Result<Vec<PolicyRule>, String> {
    match role.get("rules") {
        None | Some(serde_json::Value::Null) => Ok(Vec::new()),
        Some(rules) => {
            serde_json::from_value(rules.clone()).map_err(|e| format!("invalid rules: {e}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authn::Identity;

    fn rule(verbs: &[&str], groups: &[&str], resources: &[&str]) -> PolicyRule {
        let owned = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
        PolicyRule {
            verbs: owned(verbs),
            api_groups: owned(groups),
            resources: owned(resources),
            ..PolicyRule::default()
        }
    }

    fn request(verb: &str, group: &str, resource: &str, sub: &str, name: &str) -> Attributes {
        Attributes::resource(Identity::default(), verb, group, resource, sub, "ns", name)
    }

    #[test]
    fn rules_match_verbs_groups_resources_subresources_and_names() {
        let pods = rule(&["get", "list"], &[""], &["pods"]);
        assert!(pods.allows(&request("get", "", "pods", "", "p")));
        assert!(!pods.allows(&request("delete", "", "pods", "", "p")));
        assert!(!pods.allows(&request("get", "apps", "pods", "", "p")));
        assert!(
            !pods.allows(&request("get", "", "pods", "status", "p")),
            "a resource does not grant its subresources"
        );
        assert!(rule(&["*"], &["*"], &["*"]).allows(&request(
            "update",
            "apps",
            "deployments",
            "scale",
            "d"
        )));
        let status = rule(&["update"], &[""], &["*/status"]);
        assert!(status.allows(&request("update", "", "pods", "status", "p")));
        assert!(!status.allows(&request("update", "", "pods", "", "p")));
        let named = PolicyRule {
            resource_names: vec!["only".into()],
            ..rule(&["get"], &[""], &["configmaps"])
        };
        assert!(named.allows(&request("get", "", "configmaps", "", "only")));
        assert!(!named.allows(&request("get", "", "configmaps", "", "other")));
        assert!(!named.allows(&request("list", "", "configmaps", "", "")));
    }

    #[test]
    fn non_resource_urls_match_exactly_or_by_star_prefix() {
        let rule = PolicyRule {
            verbs: vec!["get".into()],
            non_resource_urls: vec!["/healthz".into(), "/apis/*".into()],
            ..PolicyRule::default()
        };
        let get = |path: &str| Attributes::non_resource(Identity::default(), "get", path);
        assert!(rule.allows(&get("/healthz")));
        assert!(rule.allows(&get("/apis/apps/v1")));
        assert!(!rule.allows(&get("/healthz/etcd")));
        assert!(!rule.allows(&get("/apis")));
        assert!(
            !rule.allows(&request("get", "", "healthz", "", "")),
            "URL rules never match resources"
        );
    }

    #[test]
    fn coverage_is_checked_atom_by_atom() {
        let owned = vec![
            rule(&["get", "list"], &["", "apps"], &["pods", "deployments"]),
            rule(&["update"], &[""], &["*/status"]),
        ];
        assert!(uncovered(&owned, &[rule(&["get"], &["apps"], &["deployments"])]).is_empty());
        assert!(uncovered(&owned, &[rule(&["update"], &[""], &["pods/status"])]).is_empty());
        let missing = uncovered(&owned, &[rule(&["get", "delete"], &[""], &["pods"])]);
        assert_eq!(missing, vec![rule(&["delete"], &[""], &["pods"])]);
        assert_eq!(
            missing[0].compact(),
            r#"{APIGroups:[""], Resources:["pods"], Verbs:["delete"]}"#
        );
        assert!(uncovered(&[rule(&["*"], &["*"], &["*"])], &owned).is_empty());
        // A named grant does not cover an unnamed one.
        let named = PolicyRule {
            resource_names: vec!["a".into()],
            ..rule(&["get"], &[""], &["pods"])
        };
        assert!(
            !uncovered(
                std::slice::from_ref(&named),
                &[rule(&["get"], &[""], &["pods"])]
            )
            .is_empty()
        );
        assert!(uncovered(&[rule(&["get"], &[""], &["pods"])], &[named]).is_empty());
    }
}
