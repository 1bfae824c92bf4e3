//! Decoding and validation of a policy file, as upstream's `pkg/audit/policy/reader.go` and
//! `pkg/apis/audit/validation/validation.go` (kube-apiserver 1.33).

use serde::Deserialize;
use serde_saphyr::{DuplicateKeyPolicy, MessageFormatter};

use super::{GroupResources, Policy, PolicyError, PolicyRule, Stage, nullable};

#[cfg(test)]
mod tests;

/// The only group/version upstream 1.33 reads (`reader.go`'s `apiGroupVersions`);
/// `audit.k8s.io/v1beta1` and `v1alpha1` are no longer registered.
const API_VERSION: &str = "audit.k8s.io/v1";
const KIND: &str = "Policy";

/// The file as written: [`Policy`] plus its type and object metadata.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PolicyFile {
    #[serde(default, deserialize_with = "nullable")]
    api_version: String,
    #[serde(default, deserialize_with = "nullable")]
    kind: String,
    /// ObjectMeta; a policy may carry a name or labels, which nothing uses. A `Value`, not
    /// `IgnoredAny`, which `serde_ignored` would report as unknown.
    #[serde(default, rename = "metadata")]
    _metadata: Option<serde_json::Value>,
    #[serde(default, deserialize_with = "nullable")]
    rules: Vec<PolicyRule>,
    #[serde(default, deserialize_with = "nullable")]
    omit_stages: Vec<Stage>,
    #[serde(default, deserialize_with = "nullable")]
    omit_managed_fields: bool,
}

/// Decodes `text` (YAML, or JSON as a subset of it) and validates the policy; `origin` names
/// the text in messages.
pub(super) fn decode(text: &str, origin: &str) -> Result<Policy, PolicyError> {
    let options = serde_saphyr::options! {
        // Go's lenient JSON decoding, which upstream falls back to, keeps the last of
        // repeated keys.
        duplicate_keys: DuplicateKeyPolicy::LastWins,
        // Messages are one line: the location goes into our own prefix.
        with_snippet: false,
    };
    let mut unknown = Vec::new();
    let file: PolicyFile =
        serde_saphyr::with_deserializer_from_str_with_options(text, options, |deserializer| {
            serde_ignored::deserialize(deserializer, |path| unknown.push(render_path(&path)))
        })
        .map_err(|error| parse_error(&error, origin))?;

    let mut problems = Vec::new();
    if file.api_version != API_VERSION {
        problems.push(match file.api_version.as_str() {
            "" => format!("apiVersion: Required value: must be {API_VERSION}"),
            other => format!(
                "apiVersion: Unsupported value: {other:?}: kube-apiserver 1.33 reads only \
                 {API_VERSION} (the fields of older versions are the same: change apiVersion)"
            ),
        });
    }
    if file.kind != KIND {
        problems.push(match file.kind.as_str() {
            "" => format!("kind: Required value: must be {KIND}"),
            other => format!("kind: Unsupported value: {other:?}: must be {KIND}"),
        });
    }
    let policy = Policy {
        rules: file.rules,
        omit_stages: file.omit_stages,
        omit_managed_fields: file.omit_managed_fields,
        unknown_fields: unknown,
    };
    problems.extend(policy.problems());
    if !problems.is_empty() {
        return Err(PolicyError::Invalid {
            origin: origin.to_owned(),
            problems,
        });
    }
    for field in &policy.unknown_fields {
        // Upstream: "Audit policy contains errors, falling back to lenient decoding".
        tracing::warn!(%origin, %field, "audit policy: unknown field ignored");
    }
    Ok(policy)
}

impl Policy {
    /// Checks the policy as upstream's validation and reader do (the level and stages are
    /// checked by their types already).
    pub fn validate(&self) -> Result<(), PolicyError> {
        let problems = self.problems();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(PolicyError::Invalid {
                origin: "audit policy".to_owned(),
                problems,
            })
        }
    }

    fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        for (i, rule) in self.rules.iter().enumerate() {
            rule_problems(rule, &format!("rules[{i}]"), &mut problems);
        }
        if self.rules.is_empty() {
            // reader.go: "loaded illegal policy with 0 rules".
            problems.push("rules: Required value: a policy needs at least one rule".to_owned());
        }
        problems
    }
}

fn rule_problems(rule: &PolicyRule, path: &str, problems: &mut Vec<String>) {
    for (i, url) in rule.non_resource_urls.iter().enumerate() {
        if url == "*" {
            continue;
        }
        let at = format!("{path}.nonResourceURLs[{i}]: Invalid value: {url:?}");
        if !url.starts_with('/') {
            problems.push(format!(
                "{at}: non-resource URL rules must begin with a '/' character"
            ));
        }
        let mut all_but_last = url.chars();
        all_but_last.next_back();
        if all_but_last.as_str().contains('*') {
            problems.push(format!(
                "{at}: non-resource URL wildcards '*' must be the final character of the rule"
            ));
        }
    }
    for (i, group) in rule.resources.iter().enumerate() {
        group_problems(group, &format!("{path}.resources[{i}]"), problems);
    }
    if !rule.non_resource_urls.is_empty()
        && (!rule.resources.is_empty() || !rule.namespaces.is_empty())
    {
        problems.push(format!(
            "{path}.nonResourceURLs: Invalid value: {:?}: rules cannot apply to both regular \
             resources and non-resource URLs",
            rule.non_resource_urls
        ));
    }
}

fn group_problems(group: &GroupResources, path: &str, problems: &mut Vec<String>) {
    // "" is the core group; others must be DNS subdomains (`apps/v1` is a common mistake).
    if !group.group.is_empty() && !is_dns_subdomain(&group.group) {
        problems.push(format!(
            "{path}.group: Invalid value: {:?}: a lowercase RFC 1123 subdomain must consist of \
             lower case alphanumeric characters, '-' or '.', and must start and end with an \
             alphanumeric character (an API group has no version: `apps`, not `apps/v1`)",
            group.group
        ));
    }
    if !group.resource_names.is_empty() && group.resources.is_empty() {
        problems.push(format!(
            "{path}.resourceNames: Invalid value: {:?}: using resourceNames requires at least \
             one resource",
            group.resource_names
        ));
    }
}

/// apimachinery's `IsDNS1123Subdomain`: at most 253 characters, dot-separated labels of
/// `[a-z0-9-]` that start and end with an alphanumeric.
fn is_dns_subdomain(name: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    name.len() <= 253
        && name.split('.').all(|label| {
            label.starts_with(alnum)
                && label.ends_with(alnum)
                && label.chars().all(|c| alnum(c) || c == '-')
        })
}

fn parse_error(error: &serde_saphyr::Error, origin: &str) -> PolicyError {
    let location = error
        .location()
        .filter(|location| location.line() > 0)
        .map(|location| (location.line(), location.column()));
    // The bare message (the renderer would append "at line …"); control characters from the
    // input are replaced, as the renderer does, so the message stays one line.
    let message = serde_saphyr::DefaultMessageFormatter
        .format_message(error)
        .replace(char::is_control, " ");
    PolicyError::Parse {
        origin: origin.to_owned(),
        location,
        message,
    }
}

/// `rules[2].levle`, as field paths read in upstream's messages.
fn render_path(path: &serde_ignored::Path<'_>) -> String {
    use serde_ignored::Path;
    match path {
        Path::Root => String::new(),
        Path::Seq { parent, index } => format!("{}[{index}]", render_path(parent)),
        Path::Map { parent, key } => {
            let parent = render_path(parent);
            if parent.is_empty() {
                key.clone()
            } else {
                format!("{parent}.{key}")
            }
        }
        Path::Some { parent }
        | Path::NewtypeStruct { parent }
        | Path::NewtypeVariant { parent } => render_path(parent),
    }
}
