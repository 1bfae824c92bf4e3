//! OpenAPI v2 in protobuf, the only form kubectl reads `/openapi/v2` in.
//!
//! client-go asks for `application/com.github.proto-openapi.spec.v2@v1.0+protobuf` and decodes
//! gnostic's `openapi.v2.Document` (`gnostic-models/openapiv2/OpenAPIv2.proto`). The messages
//! below declare the part of that file a Kubernetes document uses — the document's version
//! and info, its definitions and every field of a schema except `xml` and `externalDocs` —
//! with the field numbers of `OpenAPIv2.proto`; prost derives the encoding, so the build needs
//! no `protoc`. No Rust crate publishes these messages.
//!
//! Values that protobuf cannot type (`default`, `example`, `enum`, vendor extensions) travel as
//! gnostic's `Any` with a `yaml` string. JSON is YAML, so the JSON text of the value is sent:
//! kube-openapi reads `x-kubernetes-group-version-kind` from it with a YAML decoder.

use prost::Message;
use serde_json::Value;

#[derive(Clone, PartialEq, Message)]
pub struct Document {
    #[prost(string, tag = "1")]
    pub swagger: String,
    #[prost(message, optional, tag = "2")]
    pub info: Option<Info>,
    #[prost(message, optional, tag = "8")]
    pub paths: Option<Paths>,
    #[prost(message, optional, tag = "9")]
    pub definitions: Option<Definitions>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Info {
    #[prost(string, tag = "1")]
    pub title: String,
    #[prost(string, tag = "2")]
    pub version: String,
}

/// Always empty here: the document carries no operations (see the module doc of `openapi`).
#[derive(Clone, PartialEq, Message)]
pub struct Paths {}

#[derive(Clone, PartialEq, Message)]
pub struct Definitions {
    #[prost(message, repeated, tag = "1")]
    pub additional_properties: Vec<NamedSchema>,
}

#[derive(Clone, PartialEq, Message)]
pub struct NamedSchema {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<Schema>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Any {
    #[prost(string, tag = "2")]
    pub yaml: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct NamedAny {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<Any>,
}

#[derive(Clone, PartialEq, Message)]
pub struct TypeItem {
    #[prost(string, repeated, tag = "1")]
    pub value: Vec<String>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ItemsItem {
    #[prost(message, repeated, tag = "1")]
    pub schema: Vec<Schema>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Properties {
    #[prost(message, repeated, tag = "1")]
    pub additional_properties: Vec<NamedSchema>,
}

#[derive(Clone, PartialEq, Message)]
pub struct AdditionalPropertiesItem {
    #[prost(oneof = "AdditionalProperties", tags = "1, 2")]
    pub oneof: Option<AdditionalProperties>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub enum AdditionalProperties {
    #[prost(message, tag = "1")]
    Schema(Box<Schema>),
    #[prost(bool, tag = "2")]
    Boolean(bool),
}

#[derive(Clone, PartialEq, Message)]
pub struct Schema {
    #[prost(string, tag = "1")]
    pub reference: String,
    #[prost(string, tag = "2")]
    pub format: String,
    #[prost(string, tag = "3")]
    pub title: String,
    #[prost(string, tag = "4")]
    pub description: String,
    #[prost(message, optional, tag = "5")]
    pub default: Option<Any>,
    #[prost(double, tag = "6")]
    pub multiple_of: f64,
    #[prost(double, tag = "7")]
    pub maximum: f64,
    #[prost(bool, tag = "8")]
    pub exclusive_maximum: bool,
    #[prost(double, tag = "9")]
    pub minimum: f64,
    #[prost(bool, tag = "10")]
    pub exclusive_minimum: bool,
    #[prost(int64, tag = "11")]
    pub max_length: i64,
    #[prost(int64, tag = "12")]
    pub min_length: i64,
    #[prost(string, tag = "13")]
    pub pattern: String,
    #[prost(int64, tag = "14")]
    pub max_items: i64,
    #[prost(int64, tag = "15")]
    pub min_items: i64,
    #[prost(bool, tag = "16")]
    pub unique_items: bool,
    #[prost(int64, tag = "17")]
    pub max_properties: i64,
    #[prost(int64, tag = "18")]
    pub min_properties: i64,
    #[prost(string, repeated, tag = "19")]
    pub required: Vec<String>,
    #[prost(message, repeated, tag = "20")]
    pub enumeration: Vec<Any>,
    #[prost(message, optional, boxed, tag = "21")]
    pub additional_properties: Option<Box<AdditionalPropertiesItem>>,
    #[prost(message, optional, tag = "22")]
    pub type_: Option<TypeItem>,
    #[prost(message, optional, tag = "23")]
    pub items: Option<ItemsItem>,
    #[prost(message, repeated, tag = "24")]
    pub all_of: Vec<Schema>,
    #[prost(message, optional, tag = "25")]
    pub properties: Option<Properties>,
    #[prost(string, tag = "26")]
    pub discriminator: String,
    #[prost(bool, tag = "27")]
    pub read_only: bool,
    #[prost(message, optional, tag = "30")]
    pub example: Option<Any>,
    #[prost(message, repeated, tag = "31")]
    pub vendor_extension: Vec<NamedAny>,
}

/// The protobuf encoding of a Swagger 2.0 document given as JSON (`swagger`, `info`,
/// `definitions`; paths are not carried).
pub fn encode_document(document: &Value) -> Vec<u8> {
    let text = |pointer: &str| {
        document
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let definitions = document
        .get("definitions")
        .and_then(Value::as_object)
        .map(|definitions| Definitions {
            additional_properties: definitions
                .iter()
                .map(|(name, schema)| NamedSchema {
                    name: name.clone(),
                    value: Some(schema_message(schema)),
                })
                .collect(),
        });
    Document {
        swagger: text("/swagger"),
        info: Some(Info {
            title: text("/info/title"),
            version: text("/info/version"),
        }),
        paths: Some(Paths {}),
        definitions,
    }
    .encode_to_vec()
}

fn any(value: &Value) -> Any {
    Any {
        yaml: value.to_string(),
    }
}

/// One JSON schema as gnostic's `Schema`; keywords Swagger 2.0 does not have are left out.
fn schema_message(schema: &Value) -> Schema {
    let mut message = Schema::default();
    let Some(map) = schema.as_object() else {
        return message;
    };
    for (key, value) in map {
        let string = || value.as_str().unwrap_or_default().to_string();
        let float = || value.as_f64().unwrap_or_default();
        let integer = || value.as_i64().unwrap_or_default();
        let flag = || value.as_bool().unwrap_or_default();
        match key.as_str() {
            "$ref" => message.reference = string(),
            "format" => message.format = string(),
            "title" => message.title = string(),
            "description" => message.description = string(),
            "default" => message.default = Some(any(value)),
            "multipleOf" => message.multiple_of = float(),
            "maximum" => message.maximum = float(),
            "exclusiveMaximum" => message.exclusive_maximum = flag(),
            "minimum" => message.minimum = float(),
            "exclusiveMinimum" => message.exclusive_minimum = flag(),
            "maxLength" => message.max_length = integer(),
            "minLength" => message.min_length = integer(),
            "pattern" => message.pattern = string(),
            "maxItems" => message.max_items = integer(),
            "minItems" => message.min_items = integer(),
            "uniqueItems" => message.unique_items = flag(),
            "maxProperties" => message.max_properties = integer(),
            "minProperties" => message.min_properties = integer(),
            "required" => {
                message.required = strings(value);
            }
            "enum" => {
                message.enumeration = value.as_array().into_iter().flatten().map(any).collect();
            }
            "additionalProperties" => {
                let oneof = match value {
                    Value::Bool(allowed) => AdditionalProperties::Boolean(*allowed),
                    other => AdditionalProperties::Schema(Box::new(schema_message(other))),
                };
                message.additional_properties =
                    Some(Box::new(AdditionalPropertiesItem { oneof: Some(oneof) }));
            }
            "type" => {
                let value = match value {
                    Value::String(one) => vec![one.clone()],
                    several => strings(several),
                };
                message.type_ = Some(TypeItem { value });
            }
            "items" => {
                let schema = match value {
                    Value::Array(tuple) => tuple.iter().map(schema_message).collect(),
                    one => vec![schema_message(one)],
                };
                message.items = Some(ItemsItem { schema });
            }
            "allOf" => {
                message.all_of = value
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(schema_message)
                    .collect();
            }
            "properties" => {
                message.properties = value.as_object().map(|properties| Properties {
                    additional_properties: properties
                        .iter()
                        .map(|(name, schema)| NamedSchema {
                            name: name.clone(),
                            value: Some(schema_message(schema)),
                        })
                        .collect(),
                });
            }
            "discriminator" => message.discriminator = string(),
            "readOnly" => message.read_only = flag(),
            "example" => message.example = Some(any(value)),
            extension if extension.starts_with("x-") => message.vendor_extension.push(NamedAny {
                name: extension.to_string(),
                value: Some(any(value)),
            }),
            _ => {}
        }
    }
    message
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_document_round_trips_through_the_gnostic_messages() {
        let document = json!({
            "swagger": "2.0",
            "info": {"title": "Kubernetes", "version": "v1.33.0"},
            "definitions": {
                "io.k8s.api.core.v1.ConfigMap": {
                    "description": "ConfigMap holds configuration data.",
                    "type": "object",
                    "properties": {
                        "data": {"type": "object", "additionalProperties": {"type": "string"}},
                        "immutable": {"type": "boolean"},
                        "metadata": {"$ref": "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"},
                        "ports": {"type": "array", "items": {"type": "integer", "format": "int32", "minimum": 1}},
                        "free": {"additionalProperties": true}
                    },
                    "required": ["data"],
                    "x-kubernetes-group-version-kind": [{"group": "", "kind": "ConfigMap", "version": "v1"}]
                }
            }
        });
        let decoded = Document::decode(encode_document(&document).as_slice()).expect("decodes");
        assert_eq!(decoded.swagger, "2.0");
        assert_eq!(decoded.info.expect("info").version, "v1.33.0");
        let definitions = decoded
            .definitions
            .expect("definitions")
            .additional_properties;
        assert_eq!(definitions.len(), 1);
        assert_eq!(definitions[0].name, "io.k8s.api.core.v1.ConfigMap");
        let config_map = definitions[0].value.as_ref().expect("schema");
        assert_eq!(config_map.type_.as_ref().expect("type").value, ["object"]);
        assert_eq!(config_map.required, ["data"]);
        let extension = &config_map.vendor_extension[0];
        assert_eq!(extension.name, "x-kubernetes-group-version-kind");
        let gvk: Value = serde_json::from_str(&extension.value.as_ref().expect("value").yaml)
            .expect("the extension's yaml is JSON");
        assert_eq!(gvk[0]["kind"], "ConfigMap");
        let properties = &config_map
            .properties
            .as_ref()
            .expect("properties")
            .additional_properties;
        let property = |name: &str| {
            properties
                .iter()
                .find(|p| p.name == name)
                .and_then(|p| p.value.clone())
                .unwrap_or_else(|| panic!("no property {name}"))
        };
        assert_eq!(
            property("metadata").reference,
            "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
        );
        let data = property("data");
        match data.additional_properties.and_then(|a| a.oneof) {
            Some(AdditionalProperties::Schema(values)) => {
                assert_eq!(values.type_.expect("type").value, ["string"])
            }
            other => panic!("data's additionalProperties: {other:?}"),
        }
        let ports = property("ports");
        let item = &ports.items.expect("items").schema[0];
        assert_eq!((item.format.as_str(), item.minimum), ("int32", 1.0));
        assert_eq!(
            property("free").additional_properties.and_then(|a| a.oneof),
            Some(AdditionalProperties::Boolean(true))
        );
    }
}
