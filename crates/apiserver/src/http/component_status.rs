//! `v1 componentstatuses`, deprecated upstream since 1.19 and still served by a default
//! kube-apiserver: nothing is stored; each get or list builds the objects from the server's
//! own health checks ([`super::health::components`]), as upstream builds them from probes.

use serde_json::{Value, json};

use super::health::{Health, components};
use crate::selectors::{FieldSelector, LabelSelector};
use crate::status::{ApiError, ApiResult};

/// The `Warning` upstream sends with every componentstatuses response.
pub const DEPRECATION: &str = "v1 ComponentStatus is deprecated in v1.19+";

/// GET `componentstatuses/NAME`. An unknown name is upstream's plain error, which reaches the
/// client as a 500 rather than a NotFound.
pub async fn get(health: &Health, name: &str) -> ApiResult<Value> {
    let found = components(health)
        .await
        .into_iter()
        .find(|(component, _)| *component == name);
    match found {
        Some((component, result)) => {
            let mut object = component_status(component, &result);
            object["kind"] = json!("ComponentStatus");
            object["apiVersion"] = json!("v1");
            Ok(object)
        }
        None => Err(ApiError::internal(format!(
            "Internal error occurred: Component not found: {name}"
        ))),
    }
}

/// GET `componentstatuses`: every component, checked now, that the list's label and field
/// selectors match. As upstream, they are applied even though the objects have no labels: a
/// selector that requires a label matches nothing.
pub async fn list(
    health: &Health,
    labels: Option<&LabelSelector>,
    fields: Option<&FieldSelector>,
) -> Value {
    let items: Vec<Value> = components(health)
        .await
        .iter()
        .map(|(component, result)| component_status(component, result))
        .filter(|object| crate::registry::matches_selectors(object, labels, fields))
        .collect();
    json!({"kind": "ComponentStatusList", "apiVersion": "v1", "metadata": {}, "items": items})
}

/// One component's object: a `Healthy` condition, `True` with message `ok`, or `False` with
/// the failing check's reason as its `error`.
fn component_status(name: &str, result: &Result<(), String>) -> Value {
    let condition = match result {
        Ok(()) => json!({"type": "Healthy", "status": "True", "message": "ok"}),
        Err(reason) => json!({"type": "Healthy", "status": "False", "error": reason}),
    };
    json!({"metadata": {"name": name}, "conditions": [condition]})
}
