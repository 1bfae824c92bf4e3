//! The API server's client for node agents (upstream's "kubelet client"): `pods/log` is
//! answered by the agent that runs the Pod, and this module finds it and streams its answer
//! back.
//!
//! The agent is found from its Node: the first `InternalIP` (else `Hostname`) address and
//! `status.daemonEndpoints.kubeletEndpoint.Port`, as kube-apiserver's default
//! `--kubelet-preferred-address-types` picks. The request is the kubelet's
//! `GET /containerLogs/{namespace}/{pod}/{container}` with the client's log options.
//!
//! # Guarantees
//! - The server authenticates to agents with a client certificate the cluster CA signed,
//!   `CN=kube-apiserver-kubelet-client, O=system:masters` (kubeadm's
//!   `apiserver-kubelet-client`); agents accept nothing else. It is issued in memory at
//!   start and never written to disk.
//! - A followed log streams as the agent writes it; nothing is buffered whole.
//!
//! # Caveats
//! - The agent's serving certificate is not verified, as kube-apiserver does not verify
//!   kubelets without `--kubelet-certificate-authority`: an agent is self-signed (docs/nodes.md).
//!   The log request carries no credential an impostor could reuse: mutual TLS proves the
//!   server to the agent, not the other way round.

use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use http::{HeaderValue, StatusCode, header};
use serde_json::Value;

use crate::status::{ApiError, ApiResult};

/// The client identity agents authorize (kubeadm's name for it).
pub const KUBELET_CLIENT_USER: &str = "kube-apiserver-kubelet-client";
const KUBELET_CLIENT_GROUP: &str = "system:masters";

/// How long connecting to an agent may take before the request fails.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The log options passed on to the agent: upstream's `PodLogOptions` query names.
const LOG_OPTIONS: [&str; 7] = [
    "follow",
    "previous",
    "tailLines",
    "limitBytes",
    "sinceSeconds",
    "sinceTime",
    "timestamps",
];

/// The log options that are booleans.
const BOOLEAN_LOG_OPTIONS: [&str; 3] = ["follow", "previous", "timestamps"];

#[derive(Clone)]
pub struct NodeClient {
    http: reqwest::Client,
}

impl NodeClient {
    /// A client presenting a certificate signed by `pki`'s CA.
    pub fn new(pki: &crate::pki::Pki) -> anyhow::Result<NodeClient> {
        use anyhow::Context as _;
        let (cert, key) = pki
            .issue_client_certificate(KUBELET_CLIENT_USER, &[KUBELET_CLIENT_GROUP])
            .context("cannot issue the node agents' client certificate")?;
        let identity = reqwest::Identity::from_pem(format!("{cert}{key}").as_bytes())
            .context("cannot load the node agents' client certificate")?;
        let http = reqwest::Client::builder()
            .use_rustls_tls()
            .identity(identity)
            .danger_accept_invalid_certs(true)
            .connect_timeout(CONNECT_TIMEOUT)
            .build()
            .context("cannot build the node agents' HTTPS client")?;
        Ok(NodeClient { http })
    }

    /// GET `pods/NAME/log`: the container's log as the agent on `node` serves it.
    pub async fn container_logs(
        &self,
        node: &Value,
        pod: &Value,
        query: &[(String, String)],
    ) -> ApiResult<Response> {
        let pod_name = crate::object::name(pod);
        let container = log_container(pod, query)?;
        let mut forwarded = Vec::new();
        for (key, value) in query {
            if LOG_OPTIONS.contains(&key.as_str()) {
                validate_log_option(key, value)?;
                // Booleans reach the agent as the API server decoded them, as upstream
                // re-encodes its PodLogOptions.
                let value = if BOOLEAN_LOG_OPTIONS.contains(&key.as_str()) {
                    if crate::query::flag(Some(value)) {
                        "true"
                    } else {
                        "false"
                    }
                } else {
                    value.as_str()
                };
                forwarded.push((key.as_str(), value));
            }
        }
        let base = agent_url(node)?;
        let url = format!(
            "{base}/containerLogs/{}/{}/{}",
            crate::object::namespace(pod).unwrap_or_default(),
            pod_name,
            container
        );
        let node_name = crate::object::name(node);
        let answer = self
            .http
            .get(&url)
            .query(&forwarded)
            .send()
            .await
            .map_err(|error| {
                ApiError::new(
                    503,
                    "ServiceUnavailable",
                    format!(
                        "cannot reach the agent of node {node_name} at {base}: {error}; is `finale node` running there?"
                    ),
                )
            })?;
        let status = answer.status();
        if !status.is_success() {
            let text = answer.text().await.unwrap_or_default();
            let code = status.as_u16();
            let reason = match code {
                400 => "BadRequest",
                403 => "Forbidden",
                404 => "NotFound",
                _ => "InternalError",
            };
            return Err(ApiError::new(
                if code == 401 || code == 403 {
                    500
                } else {
                    code
                },
                reason,
                format!("node {node_name}: {}", text.trim()),
            ));
        }
        let content_type = answer
            .headers()
            .get(header::CONTENT_TYPE)
            .cloned()
            .unwrap_or_else(|| HeaderValue::from_static("text/plain"));
        let mut response = Response::new(Body::from_stream(answer.bytes_stream()));
        *response.status_mut() = StatusCode::OK;
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, content_type);
        Ok(response)
    }
}

/// The container a log request means: the `container` parameter, or the Pod's only
/// container; upstream's messages otherwise.
fn log_container(pod: &Value, query: &[(String, String)]) -> ApiResult<String> {
    let names = |field: &str| -> Vec<String> {
        pod.pointer(&format!("/spec/{field}"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|c| c.get("name").and_then(Value::as_str).map(str::to_string))
            .collect()
    };
    let containers = names("containers");
    let init = names("initContainers");
    let pod_name = crate::object::name(pod);
    match query
        .iter()
        .find(|(key, _)| key == "container")
        .map(|(_, value)| value.as_str())
        .filter(|value| !value.is_empty())
    {
        Some(wanted) if containers.iter().chain(&init).any(|c| c == wanted) => {
            Ok(wanted.to_string())
        }
        Some(wanted) => Err(ApiError::bad_request(format!(
            "container {wanted} is not valid for pod {pod_name}"
        ))),
        None if containers.len() == 1 => Ok(containers[0].clone()),
        None => {
            let mut message = format!(
                "a container name must be specified for pod {pod_name}, choose one of: [{}]",
                containers.join(" ")
            );
            if !init.is_empty() {
                message.push_str(&format!(
                    " or one of the init containers: [{}]",
                    init.join(" ")
                ));
            }
            Err(ApiError::bad_request(message))
        }
    }
}

/// Upstream's PodLogOptions validation, so a bad value is the server's 400, not the agent's.
fn validate_log_option(key: &str, value: &str) -> ApiResult<()> {
    let number = |minimum: i64, rule: &str| -> ApiResult<()> {
        match value.parse::<i64>() {
            Ok(n) if n >= minimum => Ok(()),
            _ => Err(ApiError::bad_request(format!(
                "invalid value {value:?} for {key}: {rule}"
            ))),
        }
    };
    match key {
        "tailLines" => number(0, "must be a non-negative integer"),
        "limitBytes" | "sinceSeconds" => number(1, "must be a positive integer"),
        "sinceTime" => chrono::DateTime::parse_from_rfc3339(value)
            .map(|_| ())
            .map_err(|_| {
                ApiError::bad_request(format!(
                    "invalid value {value:?} for sinceTime: expected an RFC 3339 time"
                ))
            }),
        _ => Ok(()),
    }
}

/// `https://ADDRESS:PORT` of the agent the Node advertises.
fn agent_url(node: &Value) -> ApiResult<String> {
    let name = crate::object::name(node);
    let addresses = node
        .pointer("/status/addresses")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let address = ["InternalIP", "Hostname", "ExternalIP"]
        .iter()
        .find_map(|kind| {
            addresses
                .iter()
                .find(|a| a.get("type").and_then(Value::as_str) == Some(kind))
                .and_then(|a| a.get("address").and_then(Value::as_str))
                .filter(|a| !a.is_empty())
        })
        .ok_or_else(|| {
            ApiError::new(
                503,
                "ServiceUnavailable",
                format!("node {name} has no address: its agent has not reported one"),
            )
        })?;
    let port = node
        .pointer("/status/daemonEndpoints/kubeletEndpoint/Port")
        .and_then(Value::as_u64)
        .filter(|port| *port > 0 && *port <= u64::from(u16::MAX))
        .ok_or_else(|| {
            ApiError::new(
                503,
                "ServiceUnavailable",
                format!("node {name} does not publish its agent's port (status.daemonEndpoints)"),
            )
        })?;
    let host = match address.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V6(v6)) => format!("[{v6}]"),
        _ => address.to_string(),
    };
    Ok(format!("https://{host}:{port}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn query(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_container_is_named_or_the_only_one() {
        let one = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a"}]}});
        assert_eq!(log_container(&one, &query(&[])).ok().as_deref(), Some("a"));
        let two = json!({"metadata": {"name": "p"}, "spec": {
            "containers": [{"name": "a"}, {"name": "b"}], "initContainers": [{"name": "i"}]}});
        let error = log_container(&two, &query(&[])).err().map(|e| e.message);
        assert_eq!(
            error.as_deref(),
            Some(
                "a container name must be specified for pod p, choose one of: [a b] or one of the init containers: [i]"
            )
        );
        assert_eq!(
            log_container(&two, &query(&[("container", "i")]))
                .ok()
                .as_deref(),
            Some("i")
        );
        let error = log_container(&two, &query(&[("container", "z")]))
            .err()
            .map(|e| e.message);
        assert_eq!(error.as_deref(), Some("container z is not valid for pod p"));
    }

    #[test]
    fn the_agent_is_found_from_the_node() {
        let node = json!({"metadata": {"name": "n"}, "status": {
            "addresses": [{"type": "Hostname", "address": "h"}, {"type": "InternalIP", "address": "::1"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}}}});
        assert_eq!(
            agent_url(&node).ok().as_deref(),
            Some("https://[::1]:10250")
        );
        let portless = json!({"metadata": {"name": "n"}, "status": {
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}]}});
        assert_eq!(agent_url(&portless).err().map(|e| e.code), Some(503));
    }

    #[test]
    fn log_options_are_checked_before_they_are_forwarded() {
        assert!(validate_log_option("tailLines", "0").is_ok());
        assert!(validate_log_option("tailLines", "-1").is_err());
        assert!(validate_log_option("limitBytes", "0").is_err());
        assert!(
            validate_log_option("follow", "yes").is_ok(),
            "any value but false or 0 is true"
        );
        assert!(validate_log_option("sinceTime", "2025-01-01T00:00:00Z").is_ok());
    }
}
