//! Webhook configurations as data: `ValidatingWebhookConfiguration` and
//! `MutatingWebhookConfiguration` objects compiled into [`Hook`]s, their defaults as upstream's
//! `SetDefaults_*` write them into the stored object, and upstream's
//! `ValidateValidatingWebhookConfiguration` / `ValidateMutatingWebhookConfiguration` (with the
//! `matchConditions` parsed by [`super::match_conditions`]).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::match_conditions::{self, MatchConditions};
use crate::object::string_list;
use crate::selectors::{LabelSelector, selector_string};
use crate::validation::{self, FieldError};

/// Upstream's default and largest `timeoutSeconds`.
pub const DEFAULT_TIMEOUT_SECONDS: i64 = 10;
pub const MAX_TIMEOUT_SECONDS: i64 = 30;

/// Which of the two configuration kinds a hook came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HookType {
    Mutating,
    Validating,
}

impl HookType {
    /// The `type` label of upstream's webhook metrics: `admit` for mutating webhooks.
    pub fn metric_label(self) -> &'static str {
        match self {
            HookType::Mutating => "admit",
            HookType::Validating => "validating",
        }
    }
}

/// `sideEffects`: what a call does besides answering.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SideEffects {
    None,
    NoneOnDryRun,
    /// `Unknown`, `Some`, or absent: such a webhook is never called for a dry run.
    Unsafe,
}

pub use crate::webhook_client::Endpoint;

/// One `rules` entry.
#[derive(Clone, Debug, Default)]
pub struct Rule {
    pub operations: Vec<String>,
    pub groups: Vec<String>,
    pub versions: Vec<String>,
    /// `resource[/subresource]`, split at the first `/`.
    pub resources: Vec<(String, Option<String>)>,
    /// `*`, `Cluster` or `Namespaced`.
    pub scope: String,
}

impl Rule {
    /// A `RuleWithOperations` as webhooks and admission policies state it.
    pub fn from_json(rule: &Value) -> Rule {
        Rule {
            operations: string_list(rule.get("operations")),
            groups: string_list(rule.get("apiGroups")),
            versions: string_list(rule.get("apiVersions")),
            resources: string_list(rule.get("resources"))
                .into_iter()
                .map(|r| match r.split_once('/') {
                    Some((resource, sub)) => (resource.to_string(), Some(sub.to_string())),
                    None => (r, None),
                })
                .collect(),
            scope: text(rule, "scope").unwrap_or("*").to_string(),
        }
    }
}

/// One webhook of a configuration, ready to be matched and called.
#[derive(Clone, Debug)]
pub struct Hook {
    pub hook_type: HookType,
    /// The configuration's name: hooks run in the order of it, then of their index.
    pub configuration: String,
    pub index: usize,
    pub name: String,
    pub endpoint: Endpoint,
    /// PEM certificates to trust; empty means the system roots.
    pub ca_bundle: Vec<u8>,
    pub rules: Vec<Rule>,
    /// `matchPolicy: Exact` (else Equivalent).
    pub exact: bool,
    /// Empty selectors match everything. An unparsable selector is kept as its error, which
    /// fails the request when the hook's rules match (upstream's internal error).
    pub namespace_selector: Result<LabelSelector, String>,
    pub object_selector: Result<LabelSelector, String>,
    /// `failurePolicy: Ignore`.
    pub fail_open: bool,
    pub timeout: Duration,
    pub side_effects: SideEffects,
    /// `admissionReviewVersions` includes `v1` (the only version Finale sends).
    pub speaks_v1: bool,
    /// `reinvocationPolicy: IfNeeded` (mutating only).
    pub reinvoke_if_needed: bool,
    /// The parsed `matchConditions`, evaluated after the rules and selectors matched.
    pub match_conditions: Option<Arc<MatchConditions>>,
}

impl Hook {
    /// A stable identity within one snapshot, for reinvocation bookkeeping.
    pub fn key(&self) -> (&str, usize) {
        (&self.configuration, self.index)
    }
}

/// Compiles every webhook of one configuration object. Malformed entries (which validation
/// keeps out of the store) are skipped with a log line rather than failing every write.
pub fn compile(hook_type: HookType, configuration: &Value) -> Vec<Hook> {
    let config_name = crate::object::name(configuration).to_string();
    let mut hooks = Vec::new();
    let webhooks = configuration
        .get("webhooks")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for (index, webhook) in webhooks.iter().enumerate() {
        match compile_one(hook_type, &config_name, index, webhook) {
            Ok(hook) => hooks.push(hook),
            Err(why) => tracing::warn!(
                configuration = %config_name,
                index,
                %why,
                "skipping a webhook that cannot be compiled"
            ),
        }
    }
    hooks
}

fn text<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    value.get(key).and_then(Value::as_str)
}

fn selector(value: Option<&Value>) -> Result<LabelSelector, String> {
    match value {
        None | Some(Value::Null) => Ok(LabelSelector::default()),
        Some(selector) => {
            let line = selector_string(selector);
            LabelSelector::parse(&line).map_err(|e| format!("invalid label selector {line:?}: {e}"))
        }
    }
}

fn compile_one(
    hook_type: HookType,
    configuration: &str,
    index: usize,
    webhook: &Value,
) -> Result<Hook, String> {
    let name = text(webhook, "name").unwrap_or_default().to_string();
    let client = webhook
        .get("clientConfig")
        .ok_or("the webhook has no clientConfig")?;
    let endpoint = match (text(client, "url"), client.get("service")) {
        (Some(url), _) => Endpoint::Url(url.to_string()),
        (None, Some(service)) => Endpoint::Service {
            namespace: text(service, "namespace").unwrap_or_default().to_string(),
            name: text(service, "name").unwrap_or_default().to_string(),
            port: service
                .get("port")
                .and_then(Value::as_u64)
                .and_then(|p| u16::try_from(p).ok())
                .unwrap_or(443),
            path: text(service, "path").unwrap_or_default().to_string(),
        },
        (None, None) => return Err("clientConfig has neither url nor service".into()),
    };
    let ca_bundle = match text(client, "caBundle") {
        Some(encoded) if !encoded.is_empty() => {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .map_err(|e| format!("caBundle is not base64: {e}"))?
        }
        _ => Vec::new(),
    };
    let rules = webhook
        .get("rules")
        .and_then(Value::as_array)
        .map(|rules| rules.iter().map(Rule::from_json).collect())
        .unwrap_or_default();
    let timeout = webhook
        .get("timeoutSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(DEFAULT_TIMEOUT_SECONDS)
        .clamp(1, MAX_TIMEOUT_SECONDS);
    let side_effects = match text(webhook, "sideEffects") {
        Some("None") => SideEffects::None,
        Some("NoneOnDryRun") => SideEffects::NoneOnDryRun,
        _ => SideEffects::Unsafe,
    };
    Ok(Hook {
        hook_type,
        configuration: configuration.to_string(),
        index,
        name,
        endpoint,
        ca_bundle,
        rules,
        exact: text(webhook, "matchPolicy") == Some("Exact"),
        namespace_selector: selector(webhook.get("namespaceSelector")),
        object_selector: selector(webhook.get("objectSelector")),
        fail_open: text(webhook, "failurePolicy") == Some("Ignore"),
        timeout: Duration::from_secs(timeout as u64),
        side_effects,
        speaks_v1: string_list(webhook.get("admissionReviewVersions"))
            .iter()
            .any(|v| v == "v1"),
        reinvoke_if_needed: hook_type == HookType::Mutating
            && text(webhook, "reinvocationPolicy") == Some("IfNeeded"),
        match_conditions: MatchConditions::compile(webhook.get("matchConditions"))?,
    })
}

/// Upstream's `SetDefaults_*Webhook*`: what a stored configuration carries when the client
/// left it out (kubectl get -o yaml shows these).
fn default_webhooks(object: &mut Value, mutating: bool) {
    let Some(webhooks) = object.get_mut("webhooks").and_then(Value::as_array_mut) else {
        return;
    };
    for webhook in webhooks.iter_mut().filter_map(Value::as_object_mut) {
        let defaults = [
            ("failurePolicy", json!("Fail")),
            ("matchPolicy", json!("Equivalent")),
            ("namespaceSelector", json!({})),
            ("objectSelector", json!({})),
            ("timeoutSeconds", json!(DEFAULT_TIMEOUT_SECONDS)),
        ];
        for (key, value) in defaults {
            if webhook.get(key).is_none_or(Value::is_null) {
                webhook.insert(key.to_string(), value);
            }
        }
        if mutating && webhook.get("reinvocationPolicy").is_none_or(Value::is_null) {
            webhook.insert("reinvocationPolicy".into(), json!("Never"));
        }
        if let Some(rules) = webhook.get_mut("rules").and_then(Value::as_array_mut) {
            for rule in rules.iter_mut().filter_map(Value::as_object_mut) {
                if rule.get("scope").is_none_or(Value::is_null) {
                    rule.insert("scope".into(), json!("*"));
                }
            }
        }
        if let Some(service) = webhook
            .get_mut("clientConfig")
            .and_then(|c| c.get_mut("service"))
            .and_then(Value::as_object_mut)
            && service.get("port").is_none_or(Value::is_null)
        {
            service.insert("port".into(), json!(443));
        }
    }
}

/// Write defaults of `MutatingWebhookConfiguration`: applied on create and on every update,
/// as upstream defaults any decoded body, so a PUT without them still stores them.
pub fn default_mutating(object: &mut Value) {
    default_webhooks(object, true);
}

/// Write defaults of `ValidatingWebhookConfiguration` (see [`default_mutating`]).
pub fn default_validating(object: &mut Value) {
    default_webhooks(object, false);
}

/// Validation hook of `MutatingWebhookConfiguration`.
pub fn validate_mutating(object: &Value, old: Option<&Value>) -> Vec<FieldError> {
    validate_configuration(object, old, true)
}

/// Validation hook of `ValidatingWebhookConfiguration`.
pub fn validate_validating(object: &Value, old: Option<&Value>) -> Vec<FieldError> {
    validate_configuration(object, old, false)
}

/// Whether every webhook of `old` declares no side effects: upstream then requires the same
/// of the update (`requireNoSideEffects`), and always of a create.
fn old_has_no_side_effects(old: Option<&Value>) -> bool {
    let Some(old) = old else { return true };
    old.get("webhooks")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .all(|w| matches!(text(w, "sideEffects"), Some("None" | "NoneOnDryRun")))
}

fn validate_configuration(object: &Value, old: Option<&Value>, mutating: bool) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let require_no_side_effects = old_has_no_side_effects(old);
    let webhooks = object
        .get("webhooks")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut names = std::collections::HashSet::new();
    for (i, webhook) in webhooks.iter().enumerate() {
        let path = format!("webhooks[{i}]");
        let name = text(webhook, "name").unwrap_or_default();
        if name.is_empty() {
            errors.push(FieldError::required(&format!("{path}.name"), ""));
        } else {
            for message in validation::is_dns1123_subdomain(name) {
                errors.push(FieldError::invalid(&format!("{path}.name"), name, &message));
            }
            if name.split('.').count() < 3 {
                errors.push(FieldError::invalid(
                    &format!("{path}.name"),
                    name,
                    "should be a domain with at least three segments separated by dots",
                ));
            }
            if !names.insert(name.to_string()) {
                errors.push(FieldError::duplicate(&format!("{path}.name"), name));
            }
        }
        let versions = string_list(webhook.get("admissionReviewVersions"));
        if versions.is_empty() {
            errors.push(FieldError::required(
                &format!("{path}.admissionReviewVersions"),
                "must specify one of v1, v1beta1",
            ));
        } else if !versions.iter().any(|v| v == "v1" || v == "v1beta1") {
            errors.push(FieldError::invalid(
                &format!("{path}.admissionReviewVersions"),
                format!("{versions:?}"),
                "must include at least one of v1, v1beta1",
            ));
        }
        match text(webhook, "sideEffects") {
            Some("None" | "NoneOnDryRun") => {}
            // Kept on an update of a configuration that already had them (upstream).
            Some("Unknown" | "Some") if !require_no_side_effects => {}
            Some(other) => errors.push(FieldError::not_supported(
                &format!("{path}.sideEffects"),
                other,
                &["None", "NoneOnDryRun"],
            )),
            None => errors.push(FieldError::required(
                &format!("{path}.sideEffects"),
                "must specify one of None, NoneOnDryRun",
            )),
        }
        for (field, supported) in [
            ("failurePolicy", &["Fail", "Ignore"][..]),
            ("matchPolicy", &["Equivalent", "Exact"][..]),
        ] {
            if let Some(value) = text(webhook, field)
                && !supported.contains(&value)
            {
                errors.push(FieldError::not_supported(
                    &format!("{path}.{field}"),
                    value,
                    supported,
                ));
            }
        }
        if mutating
            && let Some(value) = text(webhook, "reinvocationPolicy")
            && !["Never", "IfNeeded"].contains(&value)
        {
            errors.push(FieldError::not_supported(
                &format!("{path}.reinvocationPolicy"),
                value,
                &["IfNeeded", "Never"],
            ));
        }
        if let Some(timeout) = webhook.get("timeoutSeconds").and_then(Value::as_i64)
            && !(1..=MAX_TIMEOUT_SECONDS).contains(&timeout)
        {
            errors.push(FieldError::invalid_literal(
                &format!("{path}.timeoutSeconds"),
                timeout.to_string(),
                "the timeout value must be between 1 and 30 seconds",
            ));
        }
        errors.extend(crate::webhook_client::validate_client_config(
            webhook.get("clientConfig"),
            &format!("{path}.clientConfig"),
        ));
        for (r, rule) in webhook
            .get("rules")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            errors.extend(validate_rule(rule, &format!("{path}.rules[{r}]")));
        }
        for field in ["namespaceSelector", "objectSelector"] {
            if let Err(why) = selector(webhook.get(field)) {
                errors.push(FieldError::invalid(
                    &format!("{path}.{field}"),
                    webhook.get(field).map(Value::to_string).unwrap_or_default(),
                    &why,
                ));
            }
        }
        errors.extend(match_conditions::validate(
            webhook.get("matchConditions"),
            &format!("{path}.matchConditions"),
        ));
    }
    errors
}

pub(crate) fn validate_rule(rule: &Value, path: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let operations = string_list(rule.get("operations"));
    if operations.is_empty() {
        errors.push(FieldError::required(&format!("{path}.operations"), ""));
    }
    const OPERATIONS: [&str; 5] = ["*", "CONNECT", "CREATE", "DELETE", "UPDATE"];
    for (i, op) in operations.iter().enumerate() {
        if !OPERATIONS.contains(&op.as_str()) {
            errors.push(FieldError::not_supported(
                &format!("{path}.operations[{i}]"),
                op,
                &OPERATIONS,
            ));
        }
    }
    if operations.len() > 1 && operations.iter().any(|o| o == "*") {
        errors.push(FieldError::invalid(
            &format!("{path}.operations"),
            format!("{operations:?}"),
            "if '*' is present, must not specify other operations",
        ));
    }
    for field in ["apiGroups", "apiVersions", "resources"] {
        if string_list(rule.get(field)).is_empty() {
            errors.push(FieldError::required(&format!("{path}.{field}"), ""));
        }
    }
    if let Some(scope) = text(rule, "scope")
        && !["*", "Cluster", "Namespaced"].contains(&scope)
    {
        errors.push(FieldError::not_supported(
            &format!("{path}.scope"),
            scope,
            &["*", "Cluster", "Namespaced"],
        ));
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(webhook: Value) -> Value {
        json!({"metadata": {"name": "c"}, "webhooks": [webhook]})
    }

    fn hook() -> Value {
        json!({
            "name": "deny.example.com",
            "clientConfig": {"url": "https://127.0.0.1:8443/validate"},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}],
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
        })
    }

    #[test]
    fn a_well_formed_configuration_is_valid_and_defaulted() {
        let mut object = config(hook());
        default_validating(&mut object);
        assert!(validate_validating(&object, None).is_empty());
        let webhook = &object["webhooks"][0];
        assert_eq!(webhook["failurePolicy"], "Fail");
        assert_eq!(webhook["matchPolicy"], "Equivalent");
        assert_eq!(webhook["timeoutSeconds"], 10);
        assert_eq!(webhook["rules"][0]["scope"], "*");
        let hooks = compile(HookType::Validating, &object);
        assert_eq!(hooks.len(), 1);
        assert!(!hooks[0].fail_open);
        assert_eq!(hooks[0].timeout, Duration::from_secs(10));
    }

    #[test]
    fn side_effects_unknown_is_refused_on_create_and_kept_on_update() {
        let mut webhook = hook();
        webhook["sideEffects"] = json!("Unknown");
        let object = config(webhook);
        let errors = validate_validating(&object, None);
        assert!(
            errors.iter().any(|e| e.field.contains("sideEffects")),
            "{errors:?}"
        );
        assert!(validate_validating(&object, Some(&object)).is_empty());
    }

    #[test]
    fn bad_names_urls_and_timeouts_are_refused() {
        let mut webhook = hook();
        webhook["name"] = json!("deny");
        webhook["clientConfig"] = json!({"url": "http://example.com/x"});
        webhook["timeoutSeconds"] = json!(31);
        let errors = validate_validating(&config(webhook), None);
        let text: Vec<String> = errors.iter().map(FieldError::body).collect();
        assert!(
            text.iter().any(|t| t.contains("three segments")),
            "{text:?}"
        );
        assert!(text.iter().any(|t| t.contains("'https'")), "{text:?}");
        assert!(
            text.iter().any(|t| t.contains("between 1 and 30")),
            "{text:?}"
        );
    }
}
