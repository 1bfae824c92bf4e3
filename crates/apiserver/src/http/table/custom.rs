//! Custom resources: Name, then one column per CRD `additionalPrinterColumns` entry (or Age
//! when there are none), each cell found with the JSONPath dialect of
//! [`super::super::jsonpath`] and converted to the column's type as upstream converts it.

use std::borrow::Cow;

use serde_json::{Value, json};

use super::super::jsonpath::{self, JsonPath};
use super::{CREATED_DESCRIPTION, Clock, Column};
use crate::resources::PrinterColumn;

/// One CRD printer column with its parsed path.
pub(super) struct CustomColumn {
    pub(super) column: Column,
    path: JsonPath,
}

pub(super) fn custom_columns(printer_columns: &[PrinterColumn]) -> Vec<CustomColumn> {
    // A CRD without printer columns is served with one Age column, as upstream defaults it.
    let default_age;
    let printer_columns = if printer_columns.is_empty() {
        default_age = [PrinterColumn {
            name: "Age".into(),
            type_: "date".into(),
            format: String::new(),
            description: CREATED_DESCRIPTION.into(),
            priority: 0,
            json_path: ".metadata.creationTimestamp".into(),
        }];
        &default_age[..]
    } else {
        printer_columns
    };
    let mut columns = Vec::with_capacity(printer_columns.len());
    for printer_column in printer_columns {
        let path = match JsonPath::parse(&printer_column.json_path) {
            Ok(path) => path,
            Err(error) => {
                tracing::debug!(%error, "invalid printer column; printing the columns before it");
                break;
            }
        };
        let description = if printer_column.description.is_empty() {
            format!(
                "Custom resource definition column (in JSONPath format): {}",
                printer_column.json_path
            )
        } else {
            printer_column.description.clone()
        };
        columns.push(CustomColumn {
            column: Column {
                name: Cow::Owned(printer_column.name.clone()),
                kind: Cow::Owned(printer_column.type_.clone()),
                format: Cow::Owned(printer_column.format.clone()),
                description: Cow::Owned(description),
                priority: printer_column.priority,
            },
            path,
        });
    }
    columns
}

/// One CRD column's cell. Only the first match counts (upstream prints `[*]` paths' first
/// result); anything missing or of the wrong type is a `null` cell, which kubectl shows as
/// `<none>`.
pub(super) fn custom_cell(custom: &CustomColumn, item: &Value, clock: &Clock) -> Value {
    let Ok(found) = custom.path.find(item) else {
        return Value::Null;
    };
    let Some(value) = found.first() else {
        return Value::Null;
    };
    let value: &Value = value;
    match (custom.column.kind.as_ref(), value) {
        ("string", value) => Value::String(jsonpath::print(value)),
        ("integer", Value::Number(n)) => match n.as_i64() {
            Some(i) => json!(i),
            // Upstream converts a float by truncation.
            None => n.as_f64().map_or(Value::Null, |f| json!(f.trunc() as i64)),
        },
        // Upstream converts to a float, which JSON writes without a fraction when integral.
        ("number", Value::Number(n)) => match n.as_f64() {
            Some(f) if f.fract() == 0.0 && f.abs() < 1e15 => json!(f as i64),
            Some(f) => json!(f),
            None => Value::Null,
        },
        ("boolean", Value::Bool(b)) => json!(b),
        ("date", Value::String(text)) if text.is_empty() || text == "null" => json!("<unknown>"),
        ("date", Value::String(text)) => match Clock::parse(Some(text)) {
            Some(_) => json!(clock.since(Some(text))),
            None => json!("<invalid>"),
        },
        _ => Value::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::resources::ResourceType;

    fn custom(columns: Vec<PrinterColumn>) -> ResourceType {
        let mut resource = builtin("apps", "deployments");
        resource.group = "example.com".into();
        resource.kind = "Widget".into();
        resource.list_kind = "WidgetList".into();
        resource.plural = "widgets".into();
        resource.builtin = false;
        resource.printer_columns = columns;
        resource
    }

    fn printer_column(name: &str, type_: &str, json_path: &str) -> PrinterColumn {
        PrinterColumn {
            name: name.into(),
            type_: type_.into(),
            format: String::new(),
            description: String::new(),
            priority: 0,
            json_path: json_path.into(),
        }
    }

    fn widget() -> Value {
        json!({
            "apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w1", "namespace": "default", "creationTimestamp": ago(7200),
                         "labels": {"app": "shop"}},
            "spec": {"replicas": 3, "ratio": 0.75, "paused": false, "since": ago(90),
                     "items": [{"name": "bolt"}, {"name": "nut"}],
                     "list": [{"name": "x"}, {"name": "y"}],
                     "tags": ["a", "b"], "owner": {"team": "core"}},
            "status": {"conditions": [{"type": "Synced", "status": "True"},
                                      {"type": "Ready", "status": "False"}]}
        })
    }

    #[test]
    fn custom_resources_without_printer_columns_show_name_and_age() {
        let resource = custom(Vec::new());
        assert_eq!(
            rendered(&resource, &widget())["columnDefinitions"][1],
            json!({"name": "Age", "type": "date", "format": "",
                   "description": CREATED_DESCRIPTION, "priority": 0})
        );
        assert_eq!(cells(&resource, &widget()), [json!("w1"), json!("120m")]);
    }

    #[test]
    fn custom_resource_columns_of_every_type() {
        let mut described = printer_column("Replicas", "integer", ".spec.replicas");
        described.description = "Desired widgets".into();
        described.priority = 1;
        let resource = custom(vec![
            described,
            printer_column("Ratio", "number", ".spec.ratio"),
            printer_column("Paused", "boolean", ".spec.paused"),
            printer_column("App", "string", ".metadata.labels.app"),
            printer_column("Since", "date", ".spec.since"),
            printer_column(
                "Ready",
                "string",
                r#".status.conditions[?(@.type=="Ready")].status"#,
            ),
            printer_column("First", "string", ".spec.items[0].name"),
            printer_column("Names", "string", ".spec.list[*].name"),
        ]);
        let table = rendered(&resource, &widget());
        assert_eq!(
            table["columnDefinitions"][1],
            json!({"name": "Replicas", "type": "integer", "format": "",
                   "description": "Desired widgets", "priority": 1})
        );
        assert_eq!(
            table["columnDefinitions"][2]["description"],
            "Custom resource definition column (in JSONPath format): .spec.ratio"
        );
        assert_eq!(
            table["rows"][0]["cells"],
            // Upstream prints only the first result of a path that selects several.
            json!(["w1", 3, 0.75, false, "shop", "90s", "False", "bolt", "x"])
        );
        assert_eq!(table["rows"][0]["object"]["kind"], "PartialObjectMetadata");
    }

    #[test]
    fn missing_or_mistyped_custom_values_are_null_cells() {
        let resource = custom(vec![
            printer_column("Missing", "string", ".spec.nope"),
            printer_column(
                "Gone",
                "string",
                r#".status.conditions[?(@.type=="Gone")].status"#,
            ),
            printer_column("OutOfRange", "string", ".spec.items[5].name"),
            printer_column("NotANumber", "integer", ".metadata.name"),
            printer_column("NotABool", "boolean", ".spec.replicas"),
            printer_column("NotAString", "string", ".spec.owner.team.deeper"),
            printer_column("NotADate", "date", ".spec.replicas"),
        ]);
        let c = cells(&resource, &widget());
        assert_eq!(c[1..], vec![Value::Null; 7]);
    }

    #[test]
    fn custom_values_convert_like_upstream() {
        let mut object = widget();
        object["spec"]["big"] = json!(7.9);
        object["spec"]["whole"] = json!(2.0);
        object["spec"]["when"] = json!("soon");
        object["spec"]["blank"] = json!("");
        object["spec"]["future"] = json!("2026-11-22T12:00:05Z");
        object["spec"]["nothing"] = Value::Null;
        let resource = custom(vec![
            printer_column("Truncated", "integer", ".spec.big"),
            printer_column("AsFloat", "number", ".spec.replicas"),
            printer_column("Integral", "number", ".spec.whole"),
            printer_column("Count", "string", ".spec.replicas"),
            printer_column("Fraction", "string", ".spec.ratio"),
            printer_column("Flag", "string", ".spec.paused"),
            printer_column("Tags", "string", ".spec.tags"),
            printer_column("Owner", "string", ".spec.owner"),
            printer_column("BadDate", "date", ".spec.when"),
            printer_column("NoDate", "date", ".spec.blank"),
            printer_column("Future", "date", ".spec.future"),
            printer_column("NullString", "string", ".spec.nothing"),
            printer_column("NullNumber", "integer", ".spec.nothing"),
        ]);
        assert_eq!(
            cells(&resource, &object)[1..],
            [
                json!(7),
                json!(3),
                json!(2),
                json!("3"),
                json!("0.75"),
                json!("false"),
                json!(r#"["a","b"]"#),
                json!(r#"{"team":"core"}"#),
                json!("<invalid>"),
                json!("<unknown>"),
                json!("<invalid>"),
                json!("<no value>"),
                Value::Null
            ]
        );
    }

    #[test]
    fn an_unparsable_custom_column_ends_the_column_list() {
        let resource = custom(vec![
            printer_column("Replicas", "integer", ".spec.replicas"),
            printer_column("Broken", "string", ".spec.items[0"),
            printer_column("After", "string", ".metadata.name"),
        ]);
        assert_eq!(
            headers(&resource),
            [("Name".into(), 0), ("Replicas".into(), 0)]
        );
        assert_eq!(cells(&resource, &widget()), [json!("w1"), json!(3)]);
    }

    #[test]
    fn a_custom_resource_with_an_items_field_is_still_one_object() {
        let resource = custom(vec![printer_column(
            "Replicas",
            "integer",
            ".spec.replicas",
        )]);
        let mut object = widget();
        object["items"] = json!([{"metadata": {"name": "not-a-row"}}]);
        let table = rendered(&resource, &object);
        assert_eq!(table["rows"].as_array().map(Vec::len), Some(1));
        assert_eq!(table["rows"][0]["cells"], json!(["w1", 3]));
        let list = json!({"kind": "WidgetList", "apiVersion": "example.com/v1",
                          "metadata": {"resourceVersion": "3"}, "items": [widget(), widget()]});
        assert_eq!(
            rendered(&resource, &list)["rows"].as_array().map(Vec::len),
            Some(2)
        );
    }
}
