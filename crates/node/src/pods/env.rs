//! A container's environment and command line, as the kubelet builds them
//! (`makeEnvironmentVariables`, `ExpandContainerCommandAndArgs`).
//!
//! The environment is what a container image would start with, minus the image: `PATH`
//! (the agent's, or the usual default), `HOSTNAME` (the pod's name, as in a container), `HOME`
//! (the agent user's); then `envFrom` sources in order, then `env` in order, each value
//! expanded with the `$(VAR)` references defined before it. `command` and `args` are expanded
//! with the complete environment. The agent's own environment is *not* passed on: a container
//! gets what its spec says.
//!
//! Supported `valueFrom`: `fieldRef` (`metadata.name`, `metadata.namespace`, `metadata.uid`,
//! `metadata.labels['…']`, `metadata.annotations['…']`, `spec.nodeName`,
//! `spec.serviceAccountName`, `status.hostIP`, `status.hostIPs`, `status.podIP`,
//! `status.podIPs`), `configMapKeyRef` and `secretKeyRef` (read from the API, `optional`
//! honoured). `resourceFieldRef` is refused (the process runtime sets no resource limits to
//! report), as are the service-link variables (`KUBERNETES_SERVICE_HOST`, …), which are not set.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Container, EnvVar, Pod, Secret};
use kube::Api;

/// The default `PATH` of container images, when the agent has none.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// `expansion.Expand`: replaces `$(NAME)` with `lookup(NAME)` when it is defined, keeps the
/// reference as written when it is not, and turns `$$` into `$`. Works on bytes as Go does.
pub(crate) fn expand(input: &str, lookup: &dyn Fn(&str) -> Option<String>) -> String {
    let bytes = input.as_bytes();
    let mut out: Vec<u8> = Vec::with_capacity(bytes.len());
    let mut checkpoint = 0;
    let mut cursor = 0;
    while cursor < bytes.len() {
        if bytes[cursor] == b'$' && cursor + 1 < bytes.len() {
            out.extend_from_slice(&bytes[checkpoint..cursor]);
            let rest = &bytes[cursor + 1..];
            let advance = match rest[0] {
                b'$' => {
                    out.push(b'$');
                    1
                }
                b'(' => match rest.iter().position(|&b| b == b')') {
                    Some(close) => {
                        let name = String::from_utf8_lossy(&rest[1..close]);
                        match lookup(&name) {
                            Some(value) => out.extend_from_slice(value.as_bytes()),
                            None => {
                                out.extend_from_slice(b"$(");
                                out.extend_from_slice(name.as_bytes());
                                out.push(b')');
                            }
                        }
                        close + 1
                    }
                    // An unclosed reference is kept as written.
                    None => {
                        out.extend_from_slice(b"$(");
                        1
                    }
                },
                other => {
                    out.push(b'$');
                    out.push(other);
                    1
                }
            };
            cursor += advance;
            checkpoint = cursor + 1;
        }
        cursor += 1;
    }
    if checkpoint < bytes.len() {
        out.extend_from_slice(&bytes[checkpoint..]);
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// An ordered environment: later definitions replace earlier ones in place, as a Go map
/// then a list would.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Environment {
    order: Vec<String>,
    values: BTreeMap<String, String>,
}

impl Environment {
    pub(crate) fn set(&mut self, name: &str, value: String) {
        if self.values.insert(name.to_string(), value).is_none() {
            self.order.push(name.to_string());
        }
    }

    pub(crate) fn get(&self, name: &str) -> Option<String> {
        self.values.get(name).cloned()
    }

    pub(crate) fn pairs(&self) -> Vec<(String, String)> {
        self.order
            .iter()
            .filter_map(|name| Some((name.clone(), self.values.get(name)?.clone())))
            .collect()
    }

    /// `$(VAR)` expansion against this environment.
    pub(crate) fn expand(&self, input: &str) -> String {
        expand(input, &|name| self.get(name))
    }
}

/// Why a container cannot be started as specified: its `waiting.reason` is
/// `CreateContainerConfigError` with this message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct ConfigError(pub String);

/// What the kubelet knows about the pod besides its spec.
pub(crate) struct PodFacts<'a> {
    pub pod: &'a Pod,
    pub node_name: &'a str,
    pub host_ip: &'a str,
}

/// Resolves `fieldRef.fieldPath` (the downward API), as `podFieldSelectorRuntimeValue`.
pub(crate) fn field_ref(facts: &PodFacts<'_>, path: &str) -> Result<String, ConfigError> {
    let metadata = &facts.pod.metadata;
    let spec = facts.pod.spec.as_ref();
    let value = match path {
        "metadata.name" => metadata.name.clone().unwrap_or_default(),
        "metadata.namespace" => metadata.namespace.clone().unwrap_or_default(),
        "metadata.uid" => metadata.uid.clone().unwrap_or_default(),
        "spec.nodeName" => facts.node_name.to_string(),
        "spec.serviceAccountName" => spec
            .and_then(|spec| spec.service_account_name.clone())
            .unwrap_or_default(),
        // Processes share the host's network: the pod's IP is the node's.
        "status.hostIP" | "status.hostIPs" | "status.podIP" | "status.podIPs" => {
            facts.host_ip.to_string()
        }
        _ => {
            let quoted = |prefix: &str| {
                path.strip_prefix(prefix)
                    .and_then(|rest| rest.strip_suffix("']"))
                    .map(str::to_string)
            };
            if let Some(key) = quoted("metadata.labels['") {
                metadata
                    .labels
                    .as_ref()
                    .and_then(|labels| labels.get(&key).cloned())
                    .unwrap_or_default()
            } else if let Some(key) = quoted("metadata.annotations['") {
                metadata
                    .annotations
                    .as_ref()
                    .and_then(|annotations| annotations.get(&key).cloned())
                    .unwrap_or_default()
            } else {
                return Err(ConfigError(format!(
                    "unsupported fieldPath: {path} (the process runtime resolves \
                     metadata.name, metadata.namespace, metadata.uid, metadata.labels['…'], \
                     metadata.annotations['…'], spec.nodeName, spec.serviceAccountName, \
                     status.hostIP(s) and status.podIP(s))"
                )));
            }
        }
    };
    Ok(value)
}

/// The start of every container's environment: what an image's runtime would set.
pub(crate) fn base_environment(pod_name: &str) -> Environment {
    let mut environment = Environment::default();
    let path = std::env::var("PATH")
        .ok()
        .filter(|path| !path.is_empty())
        .unwrap_or_else(|| DEFAULT_PATH.to_string());
    environment.set("PATH", path);
    environment.set("HOSTNAME", pod_name.to_string());
    if let Some(home) = std::env::var_os("HOME") {
        environment.set("HOME", home.to_string_lossy().into_owned());
    }
    environment
}

/// Reads ConfigMaps and Secrets for `configMapKeyRef`, `secretKeyRef` and `envFrom`, each at
/// most once per container start.
pub(crate) struct Sources<'a> {
    client: &'a kube::Client,
    namespace: &'a str,
    config_maps: BTreeMap<String, Option<BTreeMap<String, String>>>,
    secrets: BTreeMap<String, Option<BTreeMap<String, String>>>,
}

impl<'a> Sources<'a> {
    pub(crate) fn new(client: &'a kube::Client, namespace: &'a str) -> Sources<'a> {
        Sources {
            client,
            namespace,
            config_maps: BTreeMap::new(),
            secrets: BTreeMap::new(),
        }
    }

    async fn config_map(
        &mut self,
        name: &str,
    ) -> Result<Option<&BTreeMap<String, String>>, ConfigError> {
        if !self.config_maps.contains_key(name) {
            let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), self.namespace);
            let found = crate::api::bounded(api.get_opt(name))
                .await
                .map_err(|error| ConfigError(format!("cannot read configmap {name:?}: {error:#}")))?
                .map(|config_map| {
                    let mut data = config_map.data.unwrap_or_default();
                    for (key, value) in config_map.binary_data.unwrap_or_default() {
                        data.insert(key, String::from_utf8_lossy(&value.0).into_owned());
                    }
                    data
                });
            self.config_maps.insert(name.to_string(), found);
        }
        Ok(self.config_maps.get(name).and_then(Option::as_ref))
    }

    async fn secret(
        &mut self,
        name: &str,
    ) -> Result<Option<&BTreeMap<String, String>>, ConfigError> {
        if !self.secrets.contains_key(name) {
            let api: Api<Secret> = Api::namespaced(self.client.clone(), self.namespace);
            let found = crate::api::bounded(api.get_opt(name))
                .await
                .map_err(|error| ConfigError(format!("cannot read secret {name:?}: {error:#}")))?
                .map(|secret| {
                    let mut data: BTreeMap<String, String> = secret
                        .data
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(key, value)| (key, String::from_utf8_lossy(&value.0).into_owned()))
                        .collect();
                    data.extend(secret.string_data.unwrap_or_default());
                    data
                });
            self.secrets.insert(name.to_string(), found);
        }
        Ok(self.secrets.get(name).and_then(Option::as_ref))
    }
}

/// The container's environment, in the kubelet's order; a `ConfigError` names what is missing
/// or unsupported.
pub(crate) async fn environment(
    facts: &PodFacts<'_>,
    container: &Container,
    sources: &mut Sources<'_>,
) -> Result<Environment, ConfigError> {
    let pod_name = facts.pod.metadata.name.as_deref().unwrap_or_default();
    let namespace = facts.pod.metadata.namespace.as_deref().unwrap_or("default");
    let mut environment = base_environment(pod_name);
    for from in container.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        if let Some(reference) = &from.config_map_ref {
            let optional = reference.optional.unwrap_or(false);
            match sources.config_map(&reference.name).await? {
                Some(data) => {
                    for (key, value) in data {
                        environment.set(&format!("{prefix}{key}"), value.clone());
                    }
                }
                None if optional => {}
                None => {
                    return Err(ConfigError(format!(
                        "configmap {:?} not found",
                        reference.name
                    )));
                }
            }
        }
        if let Some(reference) = &from.secret_ref {
            let optional = reference.optional.unwrap_or(false);
            match sources.secret(&reference.name).await? {
                Some(data) => {
                    for (key, value) in data {
                        environment.set(&format!("{prefix}{key}"), value.clone());
                    }
                }
                None if optional => {}
                None => {
                    return Err(ConfigError(format!(
                        "secret {:?} not found",
                        reference.name
                    )));
                }
            }
        }
    }
    for variable in container.env.iter().flatten() {
        if let Some(value) = value_of(facts, namespace, variable, &environment, sources).await? {
            environment.set(&variable.name, value);
        }
    }
    Ok(environment)
}

/// One `env` entry's value; `None` for an optional reference that is absent.
async fn value_of(
    facts: &PodFacts<'_>,
    namespace: &str,
    variable: &EnvVar,
    so_far: &Environment,
    sources: &mut Sources<'_>,
) -> Result<Option<String>, ConfigError> {
    let Some(from) = &variable.value_from else {
        return Ok(Some(so_far.expand(variable.value.as_deref().unwrap_or(""))));
    };
    if let Some(field) = &from.field_ref {
        return field_ref(facts, &field.field_path).map(Some);
    }
    if let Some(key_ref) = &from.config_map_key_ref {
        let optional = key_ref.optional.unwrap_or(false);
        return match sources.config_map(&key_ref.name).await? {
            Some(data) => match data.get(&key_ref.key) {
                Some(value) => Ok(Some(value.clone())),
                None if optional => Ok(None),
                None => Err(ConfigError(format!(
                    "couldn't find key {} in ConfigMap {namespace}/{}",
                    key_ref.key, key_ref.name
                ))),
            },
            None if optional => Ok(None),
            None => Err(ConfigError(format!(
                "configmap {:?} not found",
                key_ref.name
            ))),
        };
    }
    if let Some(key_ref) = &from.secret_key_ref {
        let optional = key_ref.optional.unwrap_or(false);
        return match sources.secret(&key_ref.name).await? {
            Some(data) => match data.get(&key_ref.key) {
                Some(value) => Ok(Some(value.clone())),
                None if optional => Ok(None),
                None => Err(ConfigError(format!(
                    "couldn't find key {} in Secret {namespace}/{}",
                    key_ref.key, key_ref.name
                ))),
            },
            None if optional => Ok(None),
            None => Err(ConfigError(format!("secret {:?} not found", key_ref.name))),
        };
    }
    Err(ConfigError(format!(
        "env {}: resourceFieldRef is not supported by the process runtime (it sets no \
         resource limits)",
        variable.name
    )))
}

/// `command` + `args` expanded with the container's environment; the program is the first
/// word. The process runtime has no image entrypoint to fall back on, so `command` is
/// required.
pub(crate) fn command_line(
    container: &Container,
    environment: &Environment,
) -> Result<Vec<String>, ConfigError> {
    let command = container.command.clone().unwrap_or_default();
    if command.is_empty() {
        return Err(ConfigError(format!(
            "container {:?} has no command: the process runtime runs `command` + `args` as a \
             host process and never pulls or runs the image {:?}, so it has no entrypoint to \
             start",
            container.name,
            container.image.as_deref().unwrap_or("")
        )));
    }
    Ok(command
        .iter()
        .chain(container.args.iter().flatten())
        .map(|word| environment.expand(word))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(name: &str) -> Option<String> {
        match name {
            "VAR_A" => Some("A".to_string()),
            "VAR_B" => Some("B".to_string()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    /// Cases from upstream's `expand_test.go`.
    #[test]
    fn expansion_matches_upstream() {
        let cases = [
            ("$(VAR_A)", "A"),
            ("___$(VAR_B)___", "___B___"),
            ("$(VAR_A)-$(VAR_A)", "A-A"),
            ("$(VAR_A)$(VAR_B)", "AB"),
            ("$(EMPTY)", ""),
            ("$(UNDEFINED)", "$(UNDEFINED)"),
            ("$$(VAR_A)", "$(VAR_A)"),
            ("$$$(VAR_A)", "$A"),
            ("$$$$(VAR_A)", "$$(VAR_A)"),
            ("f000-$$VAR_A", "f000-$VAR_A"),
            ("$(VAR_A", "$(VAR_A"),
            ("$VAR_A", "$VAR_A"),
            ("$", "$"),
            ("$$", "$"),
            ("foo$", "foo$"),
            ("$()", "$()"),
            ("héllo $(VAR_A) wörld", "héllo A wörld"),
            ("no references", "no references"),
        ];
        for (input, expected) in cases {
            assert_eq!(expand(input, &lookup), expected, "input {input:?}");
        }
    }

    #[test]
    fn later_definitions_replace_earlier_ones_in_place() {
        let mut environment = Environment::default();
        environment.set("A", "1".into());
        environment.set("B", "2".into());
        environment.set("A", "3".into());
        assert_eq!(
            environment.pairs(),
            [
                ("A".to_string(), "3".to_string()),
                ("B".to_string(), "2".to_string())
            ]
        );
        assert_eq!(environment.expand("$(A)$(B)"), "32");
    }

    #[test]
    fn command_is_required_and_expanded_with_args() {
        let mut environment = Environment::default();
        environment.set("GREETING", "hello".into());
        let container = Container {
            name: "c".into(),
            image: Some("busybox".into()),
            command: Some(vec!["/bin/echo".into(), "$(GREETING)".into()]),
            args: Some(vec!["$(MISSING)".into(), "$$(GREETING)".into()]),
            ..Container::default()
        };
        assert_eq!(
            command_line(&container, &environment),
            Ok(vec![
                "/bin/echo".to_string(),
                "hello".to_string(),
                "$(MISSING)".to_string(),
                "$(GREETING)".to_string()
            ])
        );
        let no_command = Container {
            name: "c".into(),
            image: Some("nginx".into()),
            args: Some(vec!["-g".into()]),
            ..Container::default()
        };
        let error = command_line(&no_command, &environment).expect_err("no command");
        assert!(error.0.contains("has no command"), "{error}");
        assert!(error.0.contains("nginx"), "{error}");
    }

    #[test]
    fn the_downward_api_resolves_pod_fields() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u-1",
                          "labels": {"app": "web"}, "annotations": {"note": "x"}},
            "spec": {"containers": [], "serviceAccountName": "sa"}
        }))
        .expect("pod");
        let facts = PodFacts {
            pod: &pod,
            node_name: "node-1",
            host_ip: "127.0.0.1",
        };
        let get = |path: &str| field_ref(&facts, path);
        assert_eq!(get("metadata.name").as_deref(), Ok("p"));
        assert_eq!(get("metadata.namespace").as_deref(), Ok("ns"));
        assert_eq!(get("metadata.uid").as_deref(), Ok("u-1"));
        assert_eq!(get("metadata.labels['app']").as_deref(), Ok("web"));
        assert_eq!(get("metadata.annotations['note']").as_deref(), Ok("x"));
        assert_eq!(get("spec.nodeName").as_deref(), Ok("node-1"));
        assert_eq!(get("spec.serviceAccountName").as_deref(), Ok("sa"));
        assert_eq!(get("status.podIP").as_deref(), Ok("127.0.0.1"));
        assert!(get("spec.containers").is_err());
    }
}
