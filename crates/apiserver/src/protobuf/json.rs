//! Building Kubernetes JSON from decoded protobuf messages, with Go's field semantics.
//!
//! The protobuf that Go clients write does not say which fields were set: every non-pointer
//! Go field is on the wire, zero or not (`generateName: ""`, `generation: 0`, an empty
//! `creationTimestamp`), and every pointer field is on the wire exactly when it is non-nil,
//! zero included (`replicas: 0`). So the JSON for a field depends on its Go type, and each
//! [`Object`] method names the Go shape it stands for:
//!
//! | Go field | method | JSON |
//! |---|---|---|
//! | `*T` scalar | [`Object::pointer`] | present when on the wire |
//! | `T` scalar, `omitempty` | [`Object::non_zero`] | present when not Go's zero value |
//! | `T` scalar, no `omitempty` | [`Object::always`] | always present |
//! | `*T` struct | [`Object::pointer_message`] | present when on the wire |
//! | `T` struct | [`Object::value_message`] | always present, `{}` at least |
//! | `T` struct embedded `json:",inline"` | [`Object::inline`] | its fields merged in |
//! | slices and maps | [`Object::list`], [`Object::scalars`], [`Object::string_map`] … | present when not empty |
//! | field not converted | [`Object::reject`], [`Object::reject_unless_zero`] | error when set |
//!
//! That is the JSON Go's `encoding/json` writes for the decoded object, except that nulls
//! are left out (a zero `metav1.Time` is `null` in Go), as the k8s-openapi serde form does.
//!
//! The [`convert!`] macro turns one message into one JSON object from a table of
//! `field => method(arguments)` lines; it names every field of the prost struct or fails to
//! compile, so a field can neither be forgotten nor be added by a new `k8s-pb` unnoticed.

use std::collections::BTreeMap;

use base64::Engine;
use k8s_pb::apimachinery::pkg::api::resource::Quantity;
use k8s_pb::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::{Map, Value};

/// The JSON of one message, or why it has none.
pub(super) type Converted = Result<Value, FieldError>;

/// The outcome of adding one field to an [`Object`].
type Step = Result<(), FieldError>;

/// A field that cannot be turned into JSON, with the path to it.
#[derive(Debug)]
pub(super) struct FieldError {
    /// Innermost segment first: errors gain their outer segments as they travel up.
    reversed_path: Vec<Segment>,
    pub(super) problem: Problem,
}

#[derive(Debug)]
enum Segment {
    Field(&'static str),
    Index(usize),
}

/// What is wrong with a field.
#[derive(Debug)]
pub(super) enum Problem {
    /// The field is set, and this server does not convert it.
    Unsupported,
    /// The field's value cannot be represented in Kubernetes JSON.
    Invalid(String),
}

impl FieldError {
    fn new(field: &'static str, problem: Problem) -> Self {
        FieldError {
            reversed_path: vec![Segment::Field(field)],
            problem,
        }
    }

    /// A value that cannot be represented; the caller adds the path.
    pub(super) fn invalid(reason: String) -> Self {
        FieldError {
            reversed_path: Vec::new(),
            problem: Problem::Invalid(reason),
        }
    }

    fn within(mut self, segment: Segment) -> Self {
        self.reversed_path.push(segment);
        self
    }

    /// The field's JSON path, e.g. `spec.template.spec.volumes[0].nfs`.
    pub(super) fn path(&self) -> String {
        let mut path = String::new();
        for segment in self.reversed_path.iter().rev() {
            match segment {
                Segment::Field(name) => {
                    if !path.is_empty() {
                        path.push('.');
                    }
                    path.push_str(name);
                }
                Segment::Index(index) => path.push_str(&format!("[{index}]")),
            }
        }
        path
    }
}

/// Go's zero values, which an `omitempty` field leaves out.
pub(super) trait GoZero {
    fn is_go_zero(&self) -> bool;
}

impl GoZero for String {
    fn is_go_zero(&self) -> bool {
        self.is_empty()
    }
}

impl GoZero for i32 {
    fn is_go_zero(&self) -> bool {
        *self == 0
    }
}

impl GoZero for i64 {
    fn is_go_zero(&self) -> bool {
        *self == 0
    }
}

impl GoZero for bool {
    fn is_go_zero(&self) -> bool {
        !*self
    }
}

/// Whether a Go pointer or slice field is set: on the wire at all.
pub(super) trait Presence {
    fn is_present(&self) -> bool;
}

impl<T> Presence for Option<T> {
    fn is_present(&self) -> bool {
        self.is_some()
    }
}

impl<T> Presence for Vec<T> {
    fn is_present(&self) -> bool {
        !self.is_empty()
    }
}

impl<K, V> Presence for BTreeMap<K, V> {
    fn is_present(&self) -> bool {
        !self.is_empty()
    }
}

/// One JSON object under construction. Every method takes the field's value last, so that
/// [`convert!`] can append it to the arguments of its table.
#[derive(Default)]
pub(super) struct Object(Map<String, Value>);

impl Object {
    pub(super) fn into_value(self) -> Value {
        Value::Object(self.0)
    }

    fn insert(&mut self, key: &'static str, value: impl Into<Value>) -> Step {
        self.0.insert(key.to_string(), value.into());
        Ok(())
    }

    /// A Go pointer to a scalar: on the wire exactly when set, zero included.
    pub(super) fn pointer<T: Into<Value>>(&mut self, key: &'static str, value: Option<T>) -> Step {
        match value {
            Some(value) => self.insert(key, value),
            None => Ok(()),
        }
    }

    /// A Go scalar tagged `omitempty`: its zero value means unset.
    pub(super) fn non_zero<T: GoZero + Into<Value>>(
        &mut self,
        key: &'static str,
        value: Option<T>,
    ) -> Step {
        match value {
            Some(value) if !value.is_go_zero() => self.insert(key, value),
            _ => Ok(()),
        }
    }

    /// A Go scalar without `omitempty`: always in the JSON, zero included.
    pub(super) fn always<T: Default + Into<Value>>(
        &mut self,
        key: &'static str,
        value: Option<T>,
    ) -> Step {
        self.insert(key, value.unwrap_or_default())
    }

    /// A list of scalars tagged `omitempty`.
    pub(super) fn scalars<T: Into<Value>>(&mut self, key: &'static str, values: Vec<T>) -> Step {
        if values.is_empty() {
            return Ok(());
        }
        self.always_scalars(key, values)
    }

    /// A list of scalars without `omitempty`: `[]` when empty.
    pub(super) fn always_scalars<T: Into<Value>>(
        &mut self,
        key: &'static str,
        values: Vec<T>,
    ) -> Step {
        self.insert(
            key,
            Value::Array(values.into_iter().map(Into::into).collect()),
        )
    }

    /// A `map[string]string`.
    pub(super) fn string_map(&mut self, key: &'static str, map: BTreeMap<String, String>) -> Step {
        if map.is_empty() {
            return Ok(());
        }
        let map = map.into_iter().map(|(k, v)| (k, Value::String(v)));
        self.insert(key, Value::Object(map.collect()))
    }

    /// A `map[string][]byte`: Go's JSON writes bytes as standard base64.
    pub(super) fn bytes_map(&mut self, key: &'static str, map: BTreeMap<String, Vec<u8>>) -> Step {
        if map.is_empty() {
            return Ok(());
        }
        let base64 = base64::engine::general_purpose::STANDARD;
        let map = map
            .into_iter()
            .map(|(k, v)| (k, Value::String(base64.encode(v))));
        self.insert(key, Value::Object(map.collect()))
    }

    /// A `[]byte`: standard base64, left out when empty.
    pub(super) fn bytes(&mut self, key: &'static str, value: Option<Vec<u8>>) -> Step {
        match value {
            Some(bytes) if !bytes.is_empty() => {
                self.insert(key, base64::engine::general_purpose::STANDARD.encode(bytes))
            }
            _ => Ok(()),
        }
    }

    /// A map of string keys to values of another type (`map[string]ExtraValue`), left out
    /// when empty.
    pub(super) fn value_map<T>(
        &mut self,
        key: &'static str,
        convert: impl Fn(T) -> Value,
        map: BTreeMap<String, T>,
    ) -> Step {
        if map.is_empty() {
            return Ok(());
        }
        let map = map.into_iter().map(|(k, v)| (k, convert(v)));
        self.insert(key, Value::Object(map.collect()))
    }

    /// A `ResourceList`: resource names to quantities.
    pub(super) fn quantity_map(
        &mut self,
        key: &'static str,
        map: BTreeMap<String, Quantity>,
    ) -> Step {
        if map.is_empty() {
            return Ok(());
        }
        let map = map.into_iter().map(|(k, v)| (k, quantity(v)));
        self.insert(key, Value::Object(map.collect()))
    }

    /// A list of messages tagged `omitempty`.
    pub(super) fn list<T>(
        &mut self,
        key: &'static str,
        convert: impl FnMut(T) -> Converted,
        items: Vec<T>,
    ) -> Step {
        if items.is_empty() {
            return Ok(());
        }
        self.always_list(key, convert, items)
    }

    /// A list of messages without `omitempty`: `[]` when empty.
    pub(super) fn always_list<T>(
        &mut self,
        key: &'static str,
        mut convert: impl FnMut(T) -> Converted,
        items: Vec<T>,
    ) -> Step {
        let items = items
            .into_iter()
            .enumerate()
            .map(|(index, item)| {
                convert(item)
                    .map_err(|e| e.within(Segment::Index(index)).within(Segment::Field(key)))
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.insert(key, Value::Array(items))
    }

    /// A Go pointer to a struct: present exactly when on the wire.
    pub(super) fn pointer_message<T>(
        &mut self,
        key: &'static str,
        convert: impl FnOnce(T) -> Converted,
        value: Option<T>,
    ) -> Step {
        match value {
            Some(value) => {
                let value = convert(value).map_err(|e| e.within(Segment::Field(key)))?;
                self.insert(key, value)
            }
            None => Ok(()),
        }
    }

    /// A Go struct held by value: always in the JSON, `{}` when empty.
    pub(super) fn value_message<T: Default>(
        &mut self,
        key: &'static str,
        convert: impl FnOnce(T) -> Converted,
        value: Option<T>,
    ) -> Step {
        self.pointer_message(key, convert, Some(value.unwrap_or_default()))
    }

    /// A Go struct embedded with `json:",inline"`: its fields belong to this object.
    pub(super) fn inline<T: Default>(
        &mut self,
        convert: impl FnOnce(T) -> Converted,
        value: Option<T>,
    ) -> Step {
        if let Value::Object(fields) = convert(value.unwrap_or_default())? {
            self.0.extend(fields);
        }
        Ok(())
    }

    /// A `metav1.Time`, by value or by pointer: RFC 3339 in seconds; the zero time is Go's
    /// `null`, left out.
    pub(super) fn time(&mut self, key: &'static str, value: Option<Time>) -> Step {
        let Some(Time { seconds, nanos }) = value else {
            return Ok(());
        };
        match instant(seconds, nanos).map_err(|e| e.within(Segment::Field(key)))? {
            Some(time) => self.insert(key, crate::object::timestamp(time)),
            None => Ok(()),
        }
    }

    /// A `map[string]metav1.Time`, left out when empty; a zero time is Go's `null`, kept so
    /// that no key is lost.
    pub(super) fn time_map(&mut self, key: &'static str, map: BTreeMap<String, Time>) -> Step {
        if map.is_empty() {
            return Ok(());
        }
        let mut times = Map::new();
        for (name, Time { seconds, nanos }) in map {
            let time = instant(seconds, nanos)
                .map_err(|e| e.within(Segment::Field(key)))?
                .map_or(Value::Null, |time| {
                    Value::String(crate::object::timestamp(time))
                });
            times.insert(name, time);
        }
        self.insert(key, Value::Object(times))
    }

    /// A `metav1.MicroTime`: RFC 3339 with six fractional digits.
    pub(super) fn micro_time(&mut self, key: &'static str, value: Option<MicroTime>) -> Step {
        let Some(MicroTime { seconds, nanos }) = value else {
            return Ok(());
        };
        match instant(seconds, nanos).map_err(|e| e.within(Segment::Field(key)))? {
            Some(time) => self.insert(key, time.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()),
            None => Ok(()),
        }
    }

    /// A `*resource.Quantity`: its canonical string.
    pub(super) fn pointer_quantity(&mut self, key: &'static str, value: Option<Quantity>) -> Step {
        self.pointer(key, value.map(quantity))
    }

    /// A `resource.Quantity` held by value: `"0"` when unset, as Go writes it.
    pub(super) fn value_quantity(&mut self, key: &'static str, value: Option<Quantity>) -> Step {
        self.insert(key, quantity(value.unwrap_or_default()))
    }

    /// A `*intstr.IntOrString`.
    pub(super) fn pointer_int_or_string(
        &mut self,
        key: &'static str,
        value: Option<IntOrString>,
    ) -> Step {
        match value {
            Some(value) => {
                let value = int_or_string(value).map_err(|e| e.within(Segment::Field(key)))?;
                self.insert(key, value)
            }
            None => Ok(()),
        }
    }

    /// An `intstr.IntOrString` held by value: Go writes the zero value as `0`.
    pub(super) fn value_int_or_string(
        &mut self,
        key: &'static str,
        value: Option<IntOrString>,
    ) -> Step {
        self.pointer_int_or_string(key, Some(value.unwrap_or_default()))
    }

    /// A Go struct held by value that this server does not convert: `{}` when `is_set`
    /// says it holds nothing, an error otherwise.
    pub(super) fn reject_unless_zero<T>(
        &mut self,
        key: &'static str,
        is_set: impl FnOnce(&T) -> bool,
        value: T,
    ) -> Step {
        self.reject_if(key, is_set, value)?;
        self.insert(key, Value::Object(Map::new()))
    }

    /// A field this server does not convert: an error when it is set.
    pub(super) fn reject(&mut self, key: &'static str, value: impl Presence) -> Step {
        self.reject_if(key, Presence::is_present, value)
    }

    /// A field this server does not convert, set when `is_set` says so.
    fn reject_if<T>(
        &mut self,
        key: &'static str,
        is_set: impl FnOnce(&T) -> bool,
        value: T,
    ) -> Step {
        if is_set(&value) {
            return Err(FieldError::new(key, Problem::Unsupported));
        }
        Ok(())
    }
}

/// A `metav1.Time` or `MicroTime` as an instant; `None` for Go's zero time, which is an
/// empty message on the wire (or, from other encoders, the instant 0001-01-01T00:00:00Z).
fn instant(
    seconds: Option<i64>,
    nanos: Option<i32>,
) -> Result<Option<chrono::DateTime<chrono::Utc>>, FieldError> {
    const GO_ZERO_TIME_SECONDS: i64 = -62_135_596_800;
    if seconds.is_none() && nanos.is_none() {
        return Ok(None);
    }
    let (seconds, nanos) = (seconds.unwrap_or(0), nanos.unwrap_or(0));
    if seconds == GO_ZERO_TIME_SECONDS && nanos == 0 {
        return Ok(None);
    }
    u32::try_from(nanos)
        .ok()
        .filter(|nanos| *nanos < 1_000_000_000)
        .and_then(|nanos| chrono::DateTime::from_timestamp(seconds, nanos))
        .map(Some)
        .ok_or_else(|| {
            FieldError::invalid(format!("timestamp {seconds}s {nanos}ns is out of range"))
        })
}

/// A quantity's JSON: the string Go marshalled it from; an empty message is Go's zero
/// quantity, `"0"`.
fn quantity(value: Quantity) -> Value {
    Value::String(value.string.unwrap_or_else(|| "0".to_string()))
}

/// An `IntOrString`'s JSON: a number for type 0, a string for type 1.
fn int_or_string(value: IntOrString) -> Converted {
    let IntOrString {
        r#type,
        int_val,
        str_val,
    } = value;
    match r#type.unwrap_or(0) {
        0 => Ok(Value::from(int_val.unwrap_or(0))),
        1 => Ok(Value::String(str_val.unwrap_or_default())),
        other => Err(FieldError::invalid(format!(
            "IntOrString has unknown type {other}"
        ))),
    }
}

/// Converts one prost message into one JSON object, from a table that names every field of
/// the message's struct once (a missing or unknown name fails to compile):
///
/// ```ignore
/// convert!(port, core::ContainerPort {
///     name => non_zero("name"),
///     container_port => always("containerPort"),
///     // … every other field
/// })
/// ```
///
/// Each line calls the [`Object`] method with the given arguments and the field's value
/// last, and stops at the first error. The arguments are evaluated where the macro is
/// used, so converter functions may share their names with fields.
macro_rules! convert {
    ($message:expr, $($message_type:ident)::+ {
        $($field:ident => $method:ident($($argument:expr),*)),* $(,)?
    }) => {{
        let message = $message;
        let $($message_type)::+ { $($field: _),* } = &message;
        let mut object = $crate::protobuf::json::Object::default();
        $( object.$method($($argument,)* message.$field)?; )*
        Ok(object.into_value())
    }};
}
pub(super) use convert;
