//! Finding the fields prost skipped.
//!
//! prost drops field numbers its generated structs do not know, without a trace, so a
//! client newer than `k8s-pb` could lose data in decoding. The check compares the bytes the
//! client sent with prost's re-encoding of what it decoded, field number by field number,
//! descending into sub-messages whose bytes differ (prost orders fields by declaration,
//! Go by number, and prost leaves empty keys and values out of map entries).
//!
//! *Caveat:* a field that is missing from the re-encoding but holds a zero value (varint
//! 0, empty bytes) is taken as Go's zero value of a known field, which Go writes and
//! prost may not; an unknown field holding zero is therefore not reported.

use std::collections::BTreeMap;

/// One field as it appears on the wire.
struct WireField<'a> {
    number: u32,
    value: WireValue<'a>,
}

#[derive(PartialEq)]
enum WireValue<'a> {
    Varint(u64),
    Fixed64(&'a [u8]),
    LengthDelimited(&'a [u8]),
    Fixed32(&'a [u8]),
}

impl WireValue<'_> {
    fn is_zero(&self) -> bool {
        match self {
            WireValue::Varint(value) => *value == 0,
            WireValue::Fixed64(bytes) | WireValue::Fixed32(bytes) => bytes.iter().all(|b| *b == 0),
            WireValue::LengthDelimited(bytes) => bytes.is_empty(),
        }
    }
}

/// The field-number path (outermost first) of a non-zero field in `original` that
/// `reencoded` does not carry, if any.
pub(super) fn dropped_field(original: &[u8], reencoded: &[u8]) -> Option<Vec<u32>> {
    let Some(original) = parse(original) else {
        return Some(Vec::new());
    };
    let reencoded = parse(reencoded).unwrap_or_default();
    let mut kept: BTreeMap<u32, Vec<WireValue>> = BTreeMap::new();
    for field in reencoded {
        kept.entry(field.number).or_default().push(field.value);
    }
    let mut sent: BTreeMap<u32, Vec<WireValue>> = BTreeMap::new();
    for field in original {
        sent.entry(field.number).or_default().push(field.value);
    }
    for (number, sent_values) in sent {
        let kept_values = kept.remove(&number).unwrap_or_default();
        if kept_values.is_empty() {
            if sent_values.iter().all(WireValue::is_zero) {
                continue;
            }
            return Some(vec![number]);
        }
        if kept_values.len() != sent_values.len() {
            return Some(vec![number]);
        }
        for (sent_value, kept_value) in sent_values.iter().zip(&kept_values) {
            if sent_value == kept_value {
                continue;
            }
            let (WireValue::LengthDelimited(sent_bytes), WireValue::LengthDelimited(kept_bytes)) =
                (sent_value, kept_value)
            else {
                return Some(vec![number]);
            };
            if let Some(mut path) = dropped_field(sent_bytes, kept_bytes) {
                path.insert(0, number);
                return Some(path);
            }
        }
    }
    None
}

/// The fields of a message, or `None` when the bytes are not a well-formed message (for
/// example because they are a string).
fn parse(mut bytes: &[u8]) -> Option<Vec<WireField<'_>>> {
    let mut fields = Vec::new();
    while !bytes.is_empty() {
        let key = read_varint(&mut bytes)?;
        let number = u32::try_from(key >> 3).ok().filter(|n| *n > 0)?;
        let value = match key & 7 {
            0 => WireValue::Varint(read_varint(&mut bytes)?),
            1 => WireValue::Fixed64(take(&mut bytes, 8)?),
            2 => {
                let length = usize::try_from(read_varint(&mut bytes)?).ok()?;
                WireValue::LengthDelimited(take(&mut bytes, length)?)
            }
            5 => WireValue::Fixed32(take(&mut bytes, 4)?),
            // Groups (3, 4) are not used by Kubernetes messages.
            _ => return None,
        };
        fields.push(WireField { number, value });
    }
    Some(fields)
}

fn read_varint(bytes: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = bytes.split_first()?;
        *bytes = rest;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

fn take<'a>(bytes: &mut &'a [u8], length: usize) -> Option<&'a [u8]> {
    if bytes.len() < length {
        return None;
    }
    let (taken, rest) = bytes.split_at(length);
    *bytes = rest;
    Some(taken)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identical_bytes_drop_nothing() {
        let message = [0x0a, 0x01, b'a', 0x10, 0x03];
        assert_eq!(dropped_field(&message, &message), None);
    }

    #[test]
    fn field_order_does_not_matter() {
        // Go writes by field number (1, 2); prost by declaration order (2, 1).
        assert_eq!(
            dropped_field(
                &[0x0a, 0x01, b'a', 0x10, 0x03],
                &[0x10, 0x03, 0x0a, 0x01, b'a']
            ),
            None
        );
    }

    #[test]
    fn zero_values_prost_leaves_out_are_not_dropped_fields() {
        // A map entry {key: "a", value: ""} as Go writes it, and as prost re-encodes it.
        let go = [0x5a, 0x05, 0x0a, 0x01, b'a', 0x12, 0x00];
        let prost = [0x5a, 0x03, 0x0a, 0x01, b'a'];
        assert_eq!(dropped_field(&go, &prost), None);
        // A zero varint field missing from the re-encoding.
        assert_eq!(dropped_field(&[0x38, 0x00], &[]), None);
    }

    #[test]
    fn a_non_zero_field_missing_from_the_reencoding_is_reported_with_its_path() {
        assert_eq!(dropped_field(&[0x38, 0x01], &[]), Some(vec![7]));
        // Field 2 holds a message whose field 9 prost did not keep.
        let sent = [0x12, 0x05, 0x0a, 0x01, b'a', 0x48, 0x01];
        let kept = [0x12, 0x03, 0x0a, 0x01, b'a'];
        assert_eq!(dropped_field(&sent, &kept), Some(vec![2, 9]));
    }

    #[test]
    fn a_different_count_or_value_is_reported() {
        assert_eq!(
            dropped_field(&[0x08, 0x01, 0x08, 0x02], &[0x08, 0x01]),
            Some(vec![1])
        );
        assert_eq!(dropped_field(&[0x08, 0x01], &[0x08, 0x02]), Some(vec![1]));
    }

    #[test]
    fn malformed_messages_do_not_parse() {
        assert!(parse(&[0x0a, 0x05, b'a']).is_none());
        assert!(parse(&[0x80]).is_none());
        assert!(parse(&[0x0b]).is_none());
        assert!(parse(&[0x00, 0x01]).is_none());
    }
}
