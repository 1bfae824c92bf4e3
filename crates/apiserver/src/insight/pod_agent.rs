//! Who will stop a Pod's containers, for explain and plan: the agent of the Node it is bound
//! to, judged by that Node's heartbeat Lease (`kube-node-lease/NODE`), as the node lifecycle
//! controller judges it.
//!
//! A deleted Pod goes when its agent confirms that its containers stopped (a delete with
//! grace 0 and its uid). So the question "why is this Pod still here" is answered by the
//! agent: running its grace period (progressing), up but not confirming long after the grace
//! period ended (stuck: seed 001's process it cannot kill), or gone (stuck: seed 001's lost
//! node), with the remedy for each.

use chrono::{DateTime, Duration, Utc};
use serde_json::Value;

use super::api::{CauseNode, CauseState, CauseType, ObjectRef};
use super::claims::LeaseState;
use super::review::{Explainer, evidence, human, node};
use crate::controllers::node_lifecycle::NODE_LEASE_NAMESPACE;
use crate::object;
use crate::status::ApiResult;
use crate::taints::OUT_OF_SERVICE;

/// How long after its grace period an agent that is up may take to confirm a Pod before the
/// Pod counts as stuck (an agent kills and confirms within a second or two).
const CONFIRMATION_ALLOWANCE_SECONDS: i64 = 30;

/// The agent that answers for a Pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Agent {
    /// Not bound to a Node: nothing runs it, and a delete removes it at once.
    Unbound,
    /// Bound to a Node that does not exist: the pod GC force-deletes it.
    NodeMissing { node: String },
    /// The Node's agent renews its Lease.
    Live {
        node: String,
        renewed: DateTime<Utc>,
    },
    /// The Node's agent has not renewed its Lease within its duration, or never had one.
    Gone {
        node: String,
        last_renewed: Option<DateTime<Utc>>,
        out_of_service: bool,
    },
}

impl Explainer<'_> {
    pub(crate) async fn pod_agent(&mut self, pod: &Value) -> ApiResult<Agent> {
        let Some(node_name) = pod
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
        else {
            return Ok(Agent::Unbound);
        };
        let node_name = node_name.to_string();
        let stored = match self.catalog().lookup("", "v1", "nodes") {
            Some(nodes) => self.snapshot().get(&nodes, None, &node_name).await?,
            None => None,
        };
        let Some(stored) = stored else {
            return Ok(Agent::NodeMissing { node: node_name });
        };
        let out_of_service = crate::taints::taints(&stored)
            .iter()
            .any(|t| t.get("key").and_then(Value::as_str) == Some(OUT_OF_SERVICE));
        // The node lifecycle controller's verdict counts too: it judges the Lease by
        // --node-monitor-grace-period, which may be shorter than the Lease's own duration.
        let judged_unknown = object::condition_status(&stored, "Ready") == Some("Unknown");
        Ok(match self.lease(NODE_LEASE_NAMESPACE, &node_name).await? {
            LeaseState::Live { renewed, .. } if !out_of_service && !judged_unknown => Agent::Live {
                node: node_name,
                renewed,
            },
            LeaseState::Live { renewed, .. } | LeaseState::Expired { renewed, .. } => Agent::Gone {
                node: node_name,
                last_renewed: Some(renewed),
                out_of_service,
            },
            _ => Agent::Gone {
                node: node_name,
                last_renewed: None,
                out_of_service,
            },
        })
    }

    /// `PodGracePeriod` for a Pod being deleted: what its agent is doing about it.
    pub(crate) async fn pod_shutdown(
        &mut self,
        this: &ObjectRef,
        pod: &Value,
    ) -> ApiResult<Option<CauseNode>> {
        let Some(ends) =
            object::meta_str(pod, "deletionTimestamp").and_then(crate::object::parse_timestamp)
        else {
            return Ok(None);
        };
        let grace = object::metadata(pod)
            .and_then(|m| m.get("deletionGracePeriodSeconds"))
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let now = self.now();
        let agent = self.pod_agent(pod).await?;
        let remedy = |node: &str| {
            format!(
                "restore the node (start `finale node` on it), or, if it is down for good, taint it out of service: `kubectl taint node {node} {OUT_OF_SERVICE}=nodeshutdown:NoExecute`, and the Pod is force-deleted"
            )
        };
        let grace_text = if ends > now {
            format!(
                "its grace period of {grace}s runs until {} ({} left)",
                object::timestamp(ends),
                human(ends - now)
            )
        } else {
            format!("its grace period ended {} ago", human(now - ends))
        };
        let (state, message) = match &agent {
            Agent::Unbound => {
                if grace == 0 {
                    return Ok(None);
                }
                (
                    CauseState::Progressing,
                    format!("the Pod is on no node, so nothing runs it: {grace_text}"),
                )
            }
            Agent::NodeMissing { node } => (
                CauseState::Progressing,
                format!(
                    "the Pod is bound to node {node}, which does not exist: the pod garbage collector force-deletes it once the node has been gone for --node-monitor-grace-period"
                ),
            ),
            Agent::Live { node, .. } if ends > now => (
                CauseState::Progressing,
                format!(
                    "the Pod's grace period of {grace}s runs until {} ({} left): the agent on node {node} is stopping its containers (preStop hooks, then SIGTERM; SIGKILL when the grace period ends)",
                    object::timestamp(ends),
                    human(ends - now)
                ),
            ),
            Agent::Live { node, renewed }
                if now - ends > Duration::seconds(CONFIRMATION_ALLOWANCE_SECONDS) =>
            {
                (
                    CauseState::Stuck,
                    format!(
                        "{grace_text}, and the agent on node {node} is up (its Lease was renewed {} ago) but has not confirmed that the Pod's containers stopped: a process it cannot kill (uninterruptible sleep, `ps -o pid,stat,cmd` on the node shows state D), or an agent failing to reach the API server; see its log. Once the processes are gone, remove the Pod with `kubectl delete pod {} -n {} --grace-period=0 --force`",
                        human(now - *renewed),
                        this.name,
                        this.namespace
                    ),
                )
            }
            Agent::Live { node, .. } => (
                CauseState::Progressing,
                format!(
                    "{grace_text}: the agent on node {node} kills what is left of the Pod and confirms the deletion"
                ),
            ),
            Agent::Gone {
                node,
                out_of_service: true,
                ..
            } => (
                CauseState::Progressing,
                format!(
                    "node {node} is tainted out of service: the pod garbage collector force-deletes the Pod without its agent"
                ),
            ),
            Agent::Gone {
                node, last_renewed, ..
            } => (
                CauseState::Stuck,
                format!(
                    "no agent runs node {node}: {}, so nothing will stop the Pod's containers or confirm its deletion ({grace_text}). To finish it, {}",
                    match last_renewed {
                        Some(renewed) =>
                            format!("its Lease was last renewed {} ago", human(now - *renewed)),
                        None => "it has no heartbeat Lease".to_string(),
                    },
                    remedy(node)
                ),
            ),
        };
        let since = if ends > now || matches!(agent, Agent::Gone { .. }) {
            ends - Duration::seconds(grace)
        } else {
            ends
        };
        let mut cause = node(
            Some(this.clone()),
            CauseType::PodGracePeriod,
            state,
            message,
            Some(object::timestamp(since)),
        );
        evidence(&mut cause, "gracePeriodSeconds", grace.to_string());
        evidence(&mut cause, "deletionTimestamp", object::timestamp(ends));
        agent_evidence(&mut cause, &agent, now);
        Ok(Some(cause))
    }
}

/// The node and its agent's heartbeat, as evidence.
pub(crate) fn agent_evidence(cause: &mut CauseNode, agent: &Agent, now: DateTime<Utc>) {
    match agent {
        Agent::Unbound => {}
        Agent::NodeMissing { node } => {
            evidence(cause, "node", node.clone());
            evidence(cause, "agent", "NodeMissing");
        }
        Agent::Live { node, renewed } => {
            evidence(cause, "node", node.clone());
            evidence(cause, "agent", "Live");
            evidence(cause, "nodeLeaseRenewed", object::timestamp(*renewed));
        }
        Agent::Gone {
            node,
            last_renewed,
            out_of_service,
        } => {
            evidence(cause, "node", node.clone());
            evidence(cause, "agent", "Gone");
            if let Some(renewed) = last_renewed {
                evidence(cause, "nodeLeaseRenewed", object::timestamp(*renewed));
                evidence(cause, "agentGoneFor", human(now - *renewed));
            }
            if *out_of_service {
                evidence(cause, "outOfService", "true");
            }
        }
    }
}
