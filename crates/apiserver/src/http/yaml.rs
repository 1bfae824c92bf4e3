//! YAML request bodies (`application/yaml`, and server-side apply's
//! `application/apply-patch+yaml`) decoded into JSON values within fixed bounds.
//!
//! YAML anchors and aliases let a small document stand for a huge one: ten nested lists of
//! ten aliases each are a billion copies of the first anchor ("billion laughs"). The parser
//! (serde-saphyr) limits how many events aliases may replay, but not how large the values
//! built from them get: a one-megabyte scalar replayed a million times is a terabyte. So the
//! value is built here, by a visitor that charges every node its size as JSON and stops the
//! decoding once the total passes [`MAX_EXPANDED_BYTES`], before allocating the node.
//!
//! # Guarantees
//! - Decoding allocates at most about [`MAX_EXPANDED_BYTES`] (in JSON terms) plus one scalar,
//!   whatever the aliases say.
//! - The result is nested at most [`MAX_NESTING_DEPTH`] levels, like a JSON body.
//! - A document without aliases of up to the request body limit always fits: its JSON form is
//!   at most about 1.6 times its YAML size (quotes and commas around short scalars).
//!
//! Upstream (sigs.k8s.io/yaml over go-yaml) refuses "excessive aliasing" by the ratio of
//! alias expansions to decoded nodes; the errors here are 400 `BadRequest` like upstream's.

use std::cell::Cell;
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

use super::resource::MAX_REQUEST_BODY_BYTES;
use crate::patch::MAX_NESTING_DEPTH;

/// The largest value, measured as JSON text, a YAML body may decode to: twice the request
/// body limit, so that no alias-free body is refused.
pub const MAX_EXPANDED_BYTES: usize = 2 * MAX_REQUEST_BODY_BYTES;

/// How many parser events aliases may replay, and anchors record, in one document: as many
/// as the parser's default node budget, so replayed nodes cost no more than written ones.
const MAX_REPLAYED_EVENTS: usize = 250_000;

/// Decodes one YAML document into a JSON value, within the bounds of the module docs.
pub fn decode(text: &str) -> Result<Value, String> {
    // The parser's own budget, tightened from its defaults (64 MiB of scalars, a million
    // replayed events) to the scale of one request: what it holds for anchors and replays
    // stays within a few times the expansion limit. The visitor below stops first on
    // scalars (it charges at least what the parser counts), so users see its message.
    let options = serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_total_scalar_bytes: MAX_EXPANDED_BYTES + MAX_REQUEST_BODY_BYTES,
            max_recorded_anchor_bytes: MAX_EXPANDED_BYTES,
            max_recorded_anchor_events: MAX_REPLAYED_EVENTS,
        },
        alias_limits: serde_saphyr::alias_limits! {
            max_total_replayed_events: MAX_REPLAYED_EVENTS,
        },
        // Source snippets with carets make multi-line messages; a Status message is one line.
        with_snippet: false,
    };
    let left = Cell::new(MAX_EXPANDED_BYTES);
    serde_saphyr::with_deserializer_from_str_with_options(text, options, |deserializer| {
        Bounded {
            left: &left,
            depth: 0,
        }
        .deserialize(deserializer)
    })
    .map_err(|e| e.to_string())
}

/// Builds one value, charging its size to `left`.
#[derive(Clone, Copy)]
struct Bounded<'b> {
    left: &'b Cell<usize>,
    /// Objects and arrays around the value being built.
    depth: usize,
}

impl Bounded<'_> {
    /// Takes `bytes` from the budget, or fails with the message users see.
    fn charge<E: de::Error>(self, bytes: usize) -> Result<(), E> {
        match self.left.get().checked_sub(bytes) {
            Some(left) => {
                self.left.set(left);
                Ok(())
            }
            None => Err(E::custom(format!(
                "the document expands to more than {MAX_EXPANDED_BYTES} bytes of JSON through \
                 its anchors and aliases; send it without aliases (or as JSON)"
            ))),
        }
    }

    /// The seed for the values of an object or array this one opens.
    fn inner<E: de::Error>(&self) -> Result<Self, E> {
        if self.depth >= MAX_NESTING_DEPTH {
            return Err(E::custom(format!(
                "the document is nested more than {MAX_NESTING_DEPTH} levels deep"
            )));
        }
        Ok(Bounded {
            left: self.left,
            depth: self.depth + 1,
        })
    }
}

impl<'de> DeserializeSeed<'de> for Bounded<'_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Bounded<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_bool<E: de::Error>(self, value: bool) -> Result<Value, E> {
        self.charge(5)?;
        Ok(Value::Bool(value))
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<Value, E> {
        self.charge(8)?;
        Ok(Value::Number(value.into()))
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<Value, E> {
        self.charge(8)?;
        Ok(Value::Number(value.into()))
    }

    // As serde_json's own visitor: integers beyond 64 bits have no JSON number here.
    fn visit_i128<E: de::Error>(self, value: i128) -> Result<Value, E> {
        self.charge(8)?;
        Number::from_i128(value)
            .map(Value::Number)
            .ok_or_else(|| E::custom(format!("the number {value} is out of range")))
    }

    fn visit_u128<E: de::Error>(self, value: u128) -> Result<Value, E> {
        self.charge(8)?;
        Number::from_u128(value)
            .map(Value::Number)
            .ok_or_else(|| E::custom(format!("the number {value} is out of range")))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<Value, E> {
        self.charge(8)?;
        // As serde_json's own visitor: a non-finite float has no JSON form.
        Ok(Number::from_f64(value).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<Value, E> {
        self.charge(value.len() + 2)?;
        Ok(Value::String(value.to_string()))
    }

    fn visit_string<E: de::Error>(self, value: String) -> Result<Value, E> {
        self.charge(value.len() + 2)?;
        Ok(Value::String(value))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        self.charge(4)?;
        Ok(Value::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        self.visit_unit()
    }

    fn visit_some<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        self.deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let inner = self.inner()?;
        self.charge(2)?;
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(inner)? {
            self.charge(1)?;
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Value, A::Error> {
        let inner = self.inner()?;
        self.charge(2)?;
        let mut map = Map::new();
        while let Some(key) = access.next_key::<String>()? {
            self.charge(key.len() + 4)?;
            let value = access.next_value_seed(inner)?;
            map.insert(key, value);
        }
        Ok(Value::Object(map))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn plain_documents_decode_as_before() {
        let yaml = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n  labels: {a: b}\ndata:\n  n: \"1\"\nlist: [1, 2.5, true, null, ~, text]\n";
        let expected: Value = serde_saphyr::from_str(yaml).unwrap();
        assert_eq!(decode(yaml).unwrap(), expected);
        assert_eq!(expected["list"], json!([1, 2.5, true, null, null, "text"]));
        // Aliases within the budget still work, and so do merge keys.
        assert_eq!(
            decode("a: &x {k: v}\nb: *x\nc:\n  <<: *x\n  j: w\n").unwrap(),
            json!({"a": {"k": "v"}, "b": {"k": "v"}, "c": {"k": "v", "j": "w"}})
        );
        // Duplicate keys are refused, as by the parser's default.
        assert!(decode("a: 1\na: 2\n").is_err());
        assert!(serde_saphyr::from_str::<Value>("a: 1\na: 2\n").is_err());
    }

    #[test]
    fn alias_expansion_past_the_budget_is_refused() {
        // Six levels of ten aliases over a 4 KiB scalar: four gigabytes expanded.
        let mut yaml = format!("l0: &l0 \"{}\"\n", "x".repeat(4096));
        for level in 1..=6 {
            let aliases = vec![format!("*l{}", level - 1); 10].join(", ");
            yaml.push_str(&format!("l{level}: &l{level} [{aliases}]\n"));
        }
        let error = decode(&yaml).unwrap_err();
        assert!(
            error.contains(
                "expands to more than 6291456 bytes of JSON through its anchors and aliases"
            ),
            "{error}"
        );
    }

    #[test]
    fn an_alias_free_body_at_the_size_limit_fits() {
        let mut yaml = String::from("items:\n");
        while yaml.len() < MAX_REQUEST_BODY_BYTES - 64 {
            yaml.push_str("- abcdefghijklmnopqrstuvwxyz0123\n");
        }
        let value = decode(&yaml).unwrap();
        assert!(serde_json::to_vec(&value).unwrap().len() <= MAX_EXPANDED_BYTES);
    }

    #[test]
    fn nesting_is_limited_like_json() {
        let ok = format!("{}{}", "[".repeat(60), "]".repeat(60));
        assert!(decode(&ok).is_ok());
    }
}
