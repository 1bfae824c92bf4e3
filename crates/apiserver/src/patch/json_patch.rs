//! RFC 6902 JSON Patch (`application/json-patch+json`), matching the library the Kubernetes
//! API server uses for it: `gopkg.in/evanphx/json-patch.v4` (v4.12).
//!
//! Upstream behaviours kept on purpose, because clients depend on them:
//!
//! - `test` with `"value": null` passes when the target member is missing or null. kube-rs's
//!   finalizer helper sends `test /metadata/finalizers == null` before adding the first
//!   finalizer to an object that has none.
//! - `replace` of a missing *object member* sets it (v4 only checks that the parent exists);
//!   `replace` of an array index out of range fails.
//! - Negative array indices count from the end (`-1` is the last element; for `add`, `-1`
//!   appends), as v4's default `SupportNegativeIndices` allows.
//! - A null intermediate value makes the path missing, and a member whose value is null
//!   reads as missing in `test`.
//! - `add` and `remove` at the root path `""` fail; `replace` and `test` at the root work on
//!   the whole document.
//!
//! Deliberate differences from v4, all in cases no known client relies on:
//!
//! - Numbers compare numerically in `test` (`1` equals `1.0`), as RFC 6902 §4.6 says; v4
//!   compares their JSON text.
//! - `copy` from a missing object member fails (v4 copies a null).
//! - `replace` at the root with a scalar fails (v4 silently does nothing).
//! - Operations are all checked before any is applied, and an operation with an unknown
//!   `op`, a missing or non-string `path`/`from`, a missing `value`, or a `path` that is not
//!   a JSON pointer is [`PatchError::Malformed`]. Upstream reports those while applying,
//!   as 422; only a body that is not an array of objects is 400 there.
//!
//! Every other failure is [`PatchError::CannotApply`] with v4's message, e.g.
//! `testing value /metadata/finalizers/0 failed: test failed`. Upstream's 422 response
//! body carries the generic message "the server rejected our request due to an error in
//! our request"; the specific message here is for logs or a richer response.
//!
//! # Bounds
//!
//! As kube-apiserver bounds it, so that a small patch cannot build a huge document:
//!
//! - more than [`MAX_JSON_PATCH_OPERATIONS`] operations is [`PatchError::TooLarge`] (413)
//!   with upstream's message, before anything is applied;
//! - `copy` operations together may add at most [`MAX_JSON_PATCH_COPY_BYTES`] (their values
//!   measured as serialized JSON, as v4's `AccumulatedCopySizeLimit` measures them), else
//!   v4's `Unable to complete the copy, …` error (422). Without it, copying a map into its
//!   own child doubles it each time: thirty operations make a terabyte;
//! - the document may not become nested deeper than [`MAX_NESTING_DEPTH`] (422): copying a
//!   chain over its own leaf doubles its depth, and past some ten thousand levels the
//!   recursive walks that follow (clone, drop, serialize) overflow the stack. Upstream's Go
//!   decoder refuses such a result too (its limit is 10 000 levels; this server stores only
//!   what `serde_json` reads back).

use serde_json::{Number, Value};

use super::{MAX_NESTING_DEPTH, PatchError, nesting_depth, nesting_depth_within};

/// Upstream (`maxJSONPatchOperations`) rejects JSON patches with more operations than this
/// with 413 `RequestEntityTooLarge`.
pub const MAX_JSON_PATCH_OPERATIONS: usize = 10_000;

/// How many bytes the `copy` operations of one patch may add, their values measured as
/// serialized JSON: kube-apiserver's `JSONPatchMaxCopyBytes` (3 MiB, twice etcd's request
/// limit), which it hands to the json-patch library as `AccumulatedCopySizeLimit`.
pub const MAX_JSON_PATCH_COPY_BYTES: usize = 3 * 1024 * 1024;

/// How often one patch may recount the document's depth when its cheap upper bound passes
/// the limit (see [`DepthBound`]).
const MAX_DEPTH_RECOUNTS: usize = 8;

/// How many values, in all, one patch may visit to learn the depth of values it moves to a
/// deeper place (see [`DepthBound::moved`]).
const MAX_MOVE_INSPECTIONS: usize = 1_000_000;

/// Applies an RFC 6902 JSON Patch to `target` and returns the patched document.
///
/// The patch is applied to a copy, so on error nothing has changed: a failed `test`
/// anywhere rejects the whole patch.
///
/// # Errors
///
/// [`PatchError::Malformed`] when the patch is not an array of well-formed operations;
/// [`PatchError::TooLarge`] when it has more than [`MAX_JSON_PATCH_OPERATIONS`];
/// [`PatchError::CannotApply`] when an operation fails against the document (failed
/// `test`, missing path, index out of range) or would exceed a bound (see the module docs).
pub fn apply_json_patch(target: &Value, patch: &Value) -> Result<Value, PatchError> {
    let operations = parse_patch(patch)?;
    let mut doc = target.clone();
    let mut bounds = Bounds {
        copied: 0,
        depth: DepthBound::new(&doc),
    };
    for operation in &operations {
        apply_operation(&mut doc, operation, &mut bounds)?;
        bounds.depth.check(&doc, operation)?;
    }
    Ok(doc)
}

/// What the operations applied so far have cost.
struct Bounds {
    /// Serialized bytes added by `copy` operations.
    copied: usize,
    depth: DepthBound,
}

/// An upper bound of the document's nesting depth, kept without walking the document after
/// every operation: an inserted value adds at most its own depth below the place it goes.
/// The values `add`, `replace` and `copy` insert are measured anyway (the first two come
/// from the patch, the last is deep-copied). A `move` is O(1) otherwise, so its value is
/// measured only when it goes deeper than the bound allows, within a budget of visits; when
/// the bound still passes the limit, the document is recounted, a bounded number of times.
struct DepthBound {
    depth: usize,
    recounts: usize,
    inspections_left: usize,
}

impl DepthBound {
    fn new(doc: &Value) -> DepthBound {
        DepthBound {
            depth: nesting_depth(doc),
            recounts: 0,
            inspections_left: MAX_MOVE_INSPECTIONS,
        }
    }

    /// A value of depth `value_depth` now sits at `path`.
    fn inserted(&mut self, path: &Pointer, value_depth: usize) {
        self.depth = self.depth.max(path.tokens.len() + value_depth);
    }

    /// `value`, taken from `from`, is about to be put at `path`.
    fn moved(&mut self, from: &Pointer, path: &Pointer, value: &Value) {
        // It was below `from`, so it is at most this deep.
        let loose = self.depth.saturating_sub(from.tokens.len());
        let value_depth = if path.tokens.len() + loose <= MAX_NESTING_DEPTH {
            loose
        } else {
            nesting_depth_within(value, &mut self.inspections_left).unwrap_or(loose)
        };
        self.inserted(path, value_depth);
    }

    /// Fails once the document is nested deeper than [`MAX_NESTING_DEPTH`].
    fn check(&mut self, doc: &Value, op: &Operation<'_>) -> Result<(), PatchError> {
        if self.depth <= MAX_NESTING_DEPTH {
            return Ok(());
        }
        if self.recounts < MAX_DEPTH_RECOUNTS {
            self.recounts += 1;
            self.depth = nesting_depth(doc);
            if self.depth <= MAX_NESTING_DEPTH {
                return Ok(());
            }
        }
        // The path can be as long as the body; a message needs only its start.
        let mut shown: String = op.path.text.chars().take(80).collect();
        if shown.len() < op.path.text.len() {
            shown.push('…');
        }
        Err(cannot(format!(
            "the patched object would be nested more than {MAX_NESTING_DEPTH} levels deep \
             (after {} {shown:?}); objects this deep cannot be stored",
            op.kind.name(),
        )))
    }
}

/// The length of `value` serialized as JSON, without building the text.
fn serialized_len(value: &Value) -> usize {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    // Writing to a counter cannot fail, and a `Value` always serializes.
    let _ = serde_json::to_writer(&mut counter, value);
    counter.0
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OpKind {
    Add,
    Remove,
    Replace,
    Move,
    Copy,
    Test,
}

impl OpKind {
    fn name(self) -> &'static str {
        match self {
            OpKind::Add => "add",
            OpKind::Remove => "remove",
            OpKind::Replace => "replace",
            OpKind::Move => "move",
            OpKind::Copy => "copy",
            OpKind::Test => "test",
        }
    }
}

/// One validated operation; `value` and `from` are present exactly when the kind needs them.
struct Operation<'a> {
    kind: OpKind,
    path: Pointer,
    from: Option<Pointer>,
    value: Option<&'a Value>,
}

/// A parsed JSON pointer. `tokens` is empty for the root pointer `""`.
struct Pointer {
    text: String,
    tokens: Vec<String>,
}

impl Pointer {
    fn parse(text: &str) -> Result<Pointer, PatchError> {
        if text.is_empty() {
            return Ok(Pointer {
                text: String::new(),
                tokens: Vec::new(),
            });
        }
        let Some(rest) = text.strip_prefix('/') else {
            return Err(PatchError::Malformed(format!(
                "invalid JSON pointer {text:?}: it must be empty or start with \"/\""
            )));
        };
        Ok(Pointer {
            text: text.to_string(),
            tokens: rest.split('/').map(unescape_token).collect(),
        })
    }

    fn is_root(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The tokens leading to the parent container and the last token.
    fn split_last(&self) -> Option<(&[String], &str)> {
        self.tokens
            .split_last()
            .map(|(last, parents)| (parents, last.as_str()))
    }
}

/// Decodes `~1` to `/` and `~0` to `~`, scanning left to right so `~01` becomes `~1`.
/// A `~` followed by anything else is kept literally, as upstream's string replacer does.
fn unescape_token(token: &str) -> String {
    let mut out = String::with_capacity(token.len());
    let mut chars = token.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '~' {
            match chars.peek() {
                Some('1') => {
                    chars.next();
                    out.push('/');
                }
                Some('0') => {
                    chars.next();
                    out.push('~');
                }
                _ => out.push('~'),
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn parse_patch(patch: &Value) -> Result<Vec<Operation<'_>>, PatchError> {
    let Value::Array(items) = patch else {
        return Err(PatchError::Malformed(format!(
            "json: cannot unmarshal {} into Go value of type jsonpatch.Patch",
            crate::object::json_kind(patch)
        )));
    };
    if items.len() > MAX_JSON_PATCH_OPERATIONS {
        return Err(PatchError::TooLarge(format!(
            "The allowed maximum operations in a JSON patch is {MAX_JSON_PATCH_OPERATIONS}, got {}",
            items.len()
        )));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, item)| parse_operation(i, item))
        .collect()
}

fn parse_operation(index: usize, item: &Value) -> Result<Operation<'_>, PatchError> {
    let Value::Object(fields) = item else {
        return Err(PatchError::Malformed(format!(
            "json: cannot unmarshal {} into Go value of type jsonpatch.Operation",
            crate::object::json_kind(item)
        )));
    };
    let kind = match fields.get("op") {
        Some(Value::String(op)) => match op.as_str() {
            "add" => OpKind::Add,
            "remove" => OpKind::Remove,
            "replace" => OpKind::Replace,
            "move" => OpKind::Move,
            "copy" => OpKind::Copy,
            "test" => OpKind::Test,
            other => {
                return Err(PatchError::Malformed(format!("Unexpected kind: {other}")));
            }
        },
        _ => return Err(PatchError::Malformed("Unexpected kind: unknown".into())),
    };
    let pointer_field = |name: &str| -> Result<Pointer, PatchError> {
        match fields.get(name) {
            Some(Value::String(text)) => Pointer::parse(text),
            Some(Value::Null) | None => Err(PatchError::Malformed(format!(
                "operation {index}: missing {name} field"
            ))),
            Some(other) => Err(PatchError::Malformed(format!(
                "operation {index}: json: cannot unmarshal {} into Go value of type string",
                crate::object::json_kind(other)
            ))),
        }
    };
    let path = pointer_field("path")?;
    let from = match kind {
        OpKind::Move | OpKind::Copy => Some(pointer_field("from")?),
        _ => None,
    };
    let value = match kind {
        OpKind::Add | OpKind::Replace | OpKind::Test => match fields.get("value") {
            // An explicit null is a value; only an absent member is missing.
            Some(value) => Some(value),
            None => {
                return Err(PatchError::Malformed(format!(
                    "operation {index}: missing value field"
                )));
            }
        },
        _ => None,
    };
    Ok(Operation {
        kind,
        path,
        from,
        value,
    })
}

fn apply_operation(
    doc: &mut Value,
    op: &Operation<'_>,
    bounds: &mut Bounds,
) -> Result<(), PatchError> {
    match op.kind {
        OpKind::Add => {
            add(doc, &op.path, value_of(op).clone())?;
            bounds.depth.inserted(&op.path, nesting_depth(value_of(op)));
            Ok(())
        }
        OpKind::Remove => remove(doc, &op.path),
        OpKind::Replace => {
            replace(doc, &op.path, value_of(op))?;
            bounds.depth.inserted(&op.path, nesting_depth(value_of(op)));
            Ok(())
        }
        OpKind::Move => move_value(doc, from_of(op), &op.path, bounds),
        OpKind::Copy => copy_value(doc, from_of(op), &op.path, bounds),
        OpKind::Test => test(doc, &op.path, value_of(op)),
    }
}

// parse_operation guarantees the fields each kind needs; these fall back harmlessly rather
// than panic if that invariant were ever broken.
fn value_of<'a>(op: &Operation<'a>) -> &'a Value {
    op.value.unwrap_or(&Value::Null)
}

fn from_of<'o>(op: &'o Operation<'_>) -> &'o Pointer {
    op.from.as_ref().unwrap_or(&op.path)
}

fn cannot(message: String) -> PatchError {
    PatchError::CannotApply(message)
}

/// Walks to the container holding the pointer's last token, the way v4's `findObject` does:
/// every step must exist and be non-null, array steps must be in-range integers (negative
/// counts from the end), and the result must be an object or an array.
fn parent_mut<'d>(doc: &'d mut Value, parents: &[String]) -> Option<&'d mut Value> {
    let mut current = doc;
    for token in parents {
        current = match current {
            Value::Object(map) => map.get_mut(token.as_str())?,
            Value::Array(items) => {
                let index = existing_index(token, items.len()).ok()?;
                items.get_mut(index)?
            }
            _ => return None,
        };
        if current.is_null() {
            return None;
        }
    }
    match current {
        Value::Object(_) | Value::Array(_) => Some(current),
        _ => None,
    }
}

/// Why an array token could not be used as an index.
enum IndexError {
    NotANumber,
    OutOfRange(i64),
}

impl IndexError {
    fn describe(&self, token: &str) -> String {
        match self {
            IndexError::NotANumber => {
                format!("strconv.Atoi: parsing {token:?}: invalid syntax")
            }
            IndexError::OutOfRange(index) => {
                format!("Unable to access invalid index: {index}: invalid index referenced")
            }
        }
    }
}

/// Resolves `token` to an index of an existing element of an array of length `len`.
fn existing_index(token: &str, len: usize) -> Result<usize, IndexError> {
    let index: i64 = token.parse().map_err(|_| IndexError::NotANumber)?;
    let len_i = i64::try_from(len).unwrap_or(i64::MAX);
    let resolved = if index < 0 { index + len_i } else { index };
    if resolved < 0 || resolved >= len_i {
        return Err(IndexError::OutOfRange(index));
    }
    usize::try_from(resolved).map_err(|_| IndexError::OutOfRange(index))
}

/// Resolves `token` to an insertion point in an array of length `len` (`len` appends).
fn insertion_index(token: &str, len: usize) -> Result<usize, IndexError> {
    let index: i64 = token.parse().map_err(|_| IndexError::NotANumber)?;
    let size = i64::try_from(len).unwrap_or(i64::MAX).saturating_add(1);
    let resolved = if index < 0 { index + size } else { index };
    if resolved < 0 || resolved >= size {
        return Err(IndexError::OutOfRange(index));
    }
    usize::try_from(resolved).map_err(|_| IndexError::OutOfRange(index))
}

/// Inserts `value` at `key` of `container`: sets an object member, or inserts into an
/// array (`-` appends). Returns the bare cause on failure; callers add context.
fn insert_into(container: &mut Value, key: &str, value: Value) -> Result<(), String> {
    match container {
        Value::Object(map) => {
            map.insert(key.to_string(), value);
            Ok(())
        }
        Value::Array(items) => {
            if key == "-" {
                items.push(value);
                return Ok(());
            }
            match insertion_index(key, items.len()) {
                Ok(index) => {
                    items.insert(index, value);
                    Ok(())
                }
                Err(IndexError::NotANumber) => {
                    Err(format!("value was not a proper array index: '{key}'"))
                }
                Err(e) => Err(e.describe(key)),
            }
        }
        _ => Err(format!(
            "cannot add to a {}",
            crate::object::json_kind(container)
        )),
    }
}

/// Removes and returns the member `key` of `container`. Returns the bare cause on failure.
fn take_from(container: &mut Value, key: &str) -> Result<Value, String> {
    match container {
        Value::Object(map) => map
            .remove(key)
            .ok_or_else(|| format!("Unable to remove nonexistent key: {key}: missing value")),
        Value::Array(items) => match existing_index(key, items.len()) {
            Ok(index) => Ok(items.remove(index)),
            Err(e) => Err(e.describe(key)),
        },
        _ => Err(format!(
            "cannot remove from a {}",
            crate::object::json_kind(container)
        )),
    }
}

/// Reads the member `key` of `container`; `Ok(None)` is a missing object member.
fn read_from<'c>(container: &'c Value, key: &str) -> Result<Option<&'c Value>, String> {
    match container {
        Value::Object(map) => Ok(map.get(key)),
        Value::Array(items) => match existing_index(key, items.len()) {
            Ok(index) => Ok(items.get(index)),
            Err(e) => Err(e.describe(key)),
        },
        _ => Ok(None),
    }
}

fn add(doc: &mut Value, path: &Pointer, value: Value) -> Result<(), PatchError> {
    let missing = || {
        cannot(format!(
            "add operation does not apply: doc is missing path: \"{}\": missing value",
            path.text
        ))
    };
    let (parents, key) = path.split_last().ok_or_else(missing)?;
    let container = parent_mut(doc, parents).ok_or_else(missing)?;
    insert_into(container, key, value)
        .map_err(|cause| cannot(format!("error in add for path: '{}': {cause}", path.text)))
}

fn remove(doc: &mut Value, path: &Pointer) -> Result<(), PatchError> {
    let missing = || {
        cannot(format!(
            "remove operation does not apply: doc is missing path: \"{}\": missing value",
            path.text
        ))
    };
    let (parents, key) = path.split_last().ok_or_else(missing)?;
    let container = parent_mut(doc, parents).ok_or_else(missing)?;
    take_from(container, key).map(drop).map_err(|cause| {
        cannot(format!(
            "error in remove for path: '{}': {cause}",
            path.text
        ))
    })
}

fn replace(doc: &mut Value, path: &Pointer, value: &Value) -> Result<(), PatchError> {
    if path.is_root() {
        if !(value.is_object() || value.is_array()) {
            return Err(cannot(
                "replace operation value must be object or array".to_string(),
            ));
        }
        *doc = value.clone();
        return Ok(());
    }
    let (parents, key) = path.split_last().ok_or_else(|| cannot(String::new()))?;
    let container = parent_mut(doc, parents).ok_or_else(|| {
        cannot(format!(
            "replace operation does not apply: doc is missing path: {}: missing value",
            path.text
        ))
    })?;
    match container {
        // v4 only requires the parent object to exist: replacing a missing member adds it.
        Value::Object(map) => {
            map.insert(key.to_string(), value.clone());
            Ok(())
        }
        Value::Array(items) => match existing_index(key, items.len()) {
            Ok(index) => {
                items[index] = value.clone();
                Ok(())
            }
            Err(_) => Err(cannot(format!(
                "replace operation does not apply: doc is missing key: {}: missing value",
                path.text
            ))),
        },
        _ => Err(cannot(format!(
            "replace operation does not apply: doc is missing path: {}: missing value",
            path.text
        ))),
    }
}

fn move_value(
    doc: &mut Value,
    from: &Pointer,
    path: &Pointer,
    bounds: &mut Bounds,
) -> Result<(), PatchError> {
    let missing_from = || {
        cannot(format!(
            "move operation does not apply: doc is missing from path: {}: missing value",
            from.text
        ))
    };
    let (from_parents, from_key) = from.split_last().ok_or_else(missing_from)?;
    let source = parent_mut(doc, from_parents).ok_or_else(missing_from)?;
    let value = take_from(source, from_key)
        .map_err(|cause| cannot(format!("error in move for path: '{from_key}': {cause}")))?;

    // Removing first means a move into the moved value's own subtree finds no destination,
    // which is the error RFC 6902 §4.4 asks for.
    let missing_dest = || {
        cannot(format!(
            "move operation does not apply: doc is missing destination path: {}: missing value",
            path.text
        ))
    };
    let (parents, key) = path.split_last().ok_or_else(missing_dest)?;
    let container = parent_mut(doc, parents).ok_or_else(missing_dest)?;
    bounds.depth.moved(from, path, &value);
    insert_into(container, key, value)
        .map_err(|cause| cannot(format!("error in move for path: '{}': {cause}", path.text)))
}

fn copy_value(
    doc: &mut Value,
    from: &Pointer,
    path: &Pointer,
    bounds: &mut Bounds,
) -> Result<(), PatchError> {
    let missing_from = || {
        cannot(format!(
            "copy operation does not apply: doc is missing from path: {}: missing value",
            from.text
        ))
    };
    let (from_parents, from_key) = from.split_last().ok_or_else(missing_from)?;
    let source = parent_mut(doc, from_parents).ok_or_else(missing_from)?;
    let original = read_from(source, from_key)
        .map_err(|cause| cannot(format!("error in copy for from: '{}': {cause}", from.text)))?
        .ok_or_else(missing_from)?;
    // Measured before the deep copy is made, as v4 measures it: the copy is refused once
    // the copies of this patch would add more than the limit. The value's depth is within
    // the document's, which the depth bound keeps small, so serializing it cannot recurse
    // too deep.
    bounds.copied += serialized_len(original);
    if bounds.copied > MAX_JSON_PATCH_COPY_BYTES {
        return Err(cannot(format!(
            "Unable to complete the copy, the accumulated size increase of copy is {}, exceeding the limit {MAX_JSON_PATCH_COPY_BYTES}",
            bounds.copied
        )));
    }
    let value_depth = nesting_depth(original);
    let value = original.clone();
    let missing_dest = || {
        cannot(format!(
            "copy operation does not apply: doc is missing destination path: {}: missing value",
            path.text
        ))
    };
    let (parents, key) = path.split_last().ok_or_else(missing_dest)?;
    let container = parent_mut(doc, parents).ok_or_else(missing_dest)?;
    insert_into(container, key, value)
        .map_err(|cause| cannot(format!("error while adding value during copy: {cause}")))?;
    bounds.depth.inserted(path, value_depth);
    Ok(())
}

fn test(doc: &mut Value, path: &Pointer, expected: &Value) -> Result<(), PatchError> {
    let failed = || cannot(format!("testing value {} failed: test failed", path.text));
    if path.is_root() {
        return if json_equal(doc, expected) {
            Ok(())
        } else {
            Err(failed())
        };
    }
    let (parents, key) = path.split_last().ok_or_else(failed)?;
    let container = parent_mut(doc, parents).ok_or_else(|| {
        cannot(format!(
            "test operation does not apply: is missing path: {}: missing value",
            path.text
        ))
    })?;
    let actual = read_from(container, key)
        .map_err(|cause| cannot(format!("error in test for path: '{}': {cause}", path.text)))?;
    match actual {
        // A missing member and a null member are the same to v4, and both satisfy a test
        // for null: this is what kube-rs's finalizer helper relies on.
        None | Some(Value::Null) => {
            if expected.is_null() {
                Ok(())
            } else {
                Err(failed())
            }
        }
        Some(actual) if json_equal(actual, expected) => Ok(()),
        Some(_) => Err(failed()),
    }
}

/// Structural JSON equality with numbers compared by value, per RFC 6902 §4.6.
fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Null, Value::Null) => true,
        (Value::Bool(x), Value::Bool(y)) => x == y,
        (Value::String(x), Value::String(y)) => x == y,
        (Value::Number(x), Value::Number(y)) => numbers_equal(x, y),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_equal(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_equal(v, w)))
        }
        _ => false,
    }
}

fn numbers_equal(a: &Number, b: &Number) -> bool {
    if let (Some(x), Some(y)) = (a.as_i64(), b.as_i64()) {
        return x == y;
    }
    if let (Some(x), Some(y)) = (a.as_u64(), b.as_u64()) {
        return x == y;
    }
    if a.is_f64() || b.is_f64() {
        return matches!((a.as_f64(), b.as_f64()), (Some(x), Some(y)) if x == y);
    }
    // One is a negative integer and the other an integer above i64::MAX.
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn apply(doc: Value, patch: Value) -> Result<Value, PatchError> {
        apply_json_patch(&doc, &patch)
    }

    fn cannot_apply(result: Result<Value, PatchError>) -> String {
        match result {
            Err(PatchError::CannotApply(m)) => m,
            other => panic!("expected CannotApply, got {other:?}"),
        }
    }

    fn malformed(result: Result<Value, PatchError>) -> String {
        match result {
            Err(PatchError::Malformed(m)) => m,
            other => panic!("expected Malformed, got {other:?}"),
        }
    }

    #[test]
    fn add_sets_members_and_inserts_into_arrays() {
        let doc = json!({"a": {"b": 1}, "l": [1, 2, 3]});
        assert_eq!(
            apply(
                doc.clone(),
                json!([{"op": "add", "path": "/a/c", "value": 2}])
            )
            .unwrap(),
            json!({"a": {"b": 1, "c": 2}, "l": [1, 2, 3]})
        );
        // add to an existing member replaces it
        assert_eq!(
            apply(
                doc.clone(),
                json!([{"op": "add", "path": "/a/b", "value": [9]}])
            )
            .unwrap(),
            json!({"a": {"b": [9]}, "l": [1, 2, 3]})
        );
        assert_eq!(
            apply(
                doc.clone(),
                json!([{"op": "add", "path": "/l/1", "value": 9}])
            )
            .unwrap()["l"],
            json!([1, 9, 2, 3])
        );
        assert_eq!(
            apply(
                doc.clone(),
                json!([{"op": "add", "path": "/l/-", "value": 9}])
            )
            .unwrap()["l"],
            json!([1, 2, 3, 9])
        );
        assert_eq!(
            apply(
                doc.clone(),
                json!([{"op": "add", "path": "/l/3", "value": 9}])
            )
            .unwrap()["l"],
            json!([1, 2, 3, 9])
        );
        // negative indices count from the end; -1 appends for add
        assert_eq!(
            apply(
                doc.clone(),
                json!([{"op": "add", "path": "/l/-1", "value": 9}])
            )
            .unwrap()["l"],
            json!([1, 2, 3, 9])
        );
        // explicit null is a value
        assert_eq!(
            apply(doc, json!([{"op": "add", "path": "/n", "value": null}])).unwrap()["n"],
            Value::Null
        );
    }

    #[test]
    fn add_errors() {
        let doc = json!({"foo": "bar", "l": [1]});
        assert_eq!(
            cannot_apply(apply(
                doc.clone(),
                json!([{"op": "add", "path": "/baz/bat", "value": "qux"}])
            )),
            "add operation does not apply: doc is missing path: \"/baz/bat\": missing value"
        );
        assert_eq!(
            cannot_apply(apply(
                doc.clone(),
                json!([{"op": "add", "path": "/l/2", "value": 1}])
            )),
            "error in add for path: '/l/2': Unable to access invalid index: 2: invalid index referenced"
        );
        assert!(
            cannot_apply(apply(
                doc.clone(),
                json!([{"op": "add", "path": "/l/x", "value": 1}])
            ))
            .contains("value was not a proper array index: 'x'")
        );
        assert!(
            cannot_apply(apply(
                doc.clone(),
                json!([{"op": "add", "path": "/l/-3", "value": 1}])
            ))
            .contains("invalid index")
        );
        // v4 refuses add at the document root
        cannot_apply(apply(doc, json!([{"op": "add", "path": "", "value": {}}])));
    }

    #[test]
    fn remove_members_and_elements() {
        let doc = json!({"a": {"b": 1, "c": null}, "l": [1, 2, 3]});
        assert_eq!(
            apply(doc.clone(), json!([{"op": "remove", "path": "/a/b"}])).unwrap(),
            json!({"a": {"c": null}, "l": [1, 2, 3]})
        );
        // a member holding null exists and can be removed
        assert_eq!(
            apply(doc.clone(), json!([{"op": "remove", "path": "/a/c"}])).unwrap()["a"],
            json!({"b": 1})
        );
        assert_eq!(
            apply(doc.clone(), json!([{"op": "remove", "path": "/l/0"}])).unwrap()["l"],
            json!([2, 3])
        );
        assert_eq!(
            apply(doc.clone(), json!([{"op": "remove", "path": "/l/-1"}])).unwrap()["l"],
            json!([1, 2])
        );
        assert_eq!(
            cannot_apply(apply(
                doc.clone(),
                json!([{"op": "remove", "path": "/a/x"}])
            )),
            "error in remove for path: '/a/x': Unable to remove nonexistent key: x: missing value"
        );
        assert_eq!(
            cannot_apply(apply(
                doc.clone(),
                json!([{"op": "remove", "path": "/x/y"}])
            )),
            "remove operation does not apply: doc is missing path: \"/x/y\": missing value"
        );
        assert!(
            cannot_apply(apply(
                doc.clone(),
                json!([{"op": "remove", "path": "/l/3"}])
            ))
            .contains("Unable to access invalid index: 3")
        );
        cannot_apply(apply(
            doc.clone(),
            json!([{"op": "remove", "path": "/l/-"}]),
        ));
        cannot_apply(apply(doc, json!([{"op": "remove", "path": ""}])));
    }

    #[test]
    fn replace_follows_v4() {
        let doc = json!({"a": {"b": 1}, "l": [1, 2]});
        assert_eq!(
            apply(
                doc.clone(),
                json!([{"op": "replace", "path": "/a/b", "value": "x"}])
            )
            .unwrap(),
            json!({"a": {"b": "x"}, "l": [1, 2]})
        );
        assert_eq!(
            apply(
                doc.clone(),
                json!([{"op": "replace", "path": "/l/1", "value": 5}])
            )
            .unwrap()["l"],
            json!([1, 5])
        );
        // v4 quirk: a missing object member is simply set
        assert_eq!(
            apply(
                doc.clone(),
                json!([{"op": "replace", "path": "/a/new", "value": 2}])
            )
            .unwrap()["a"],
            json!({"b": 1, "new": 2})
        );
        assert_eq!(
            cannot_apply(apply(
                doc.clone(),
                json!([{"op": "replace", "path": "/l/2", "value": 5}])
            )),
            "replace operation does not apply: doc is missing key: /l/2: missing value"
        );
        assert_eq!(
            cannot_apply(apply(
                doc.clone(),
                json!([{"op": "replace", "path": "/x/y", "value": 5}])
            )),
            "replace operation does not apply: doc is missing path: /x/y: missing value"
        );
        // replacing the root needs an object or array
        assert_eq!(
            apply(
                doc.clone(),
                json!([{"op": "replace", "path": "", "value": {"z": 1}}])
            )
            .unwrap(),
            json!({"z": 1})
        );
        cannot_apply(apply(
            doc,
            json!([{"op": "replace", "path": "", "value": 1}]),
        ));
    }

    #[test]
    fn move_and_copy() {
        let doc = json!({"a": {"b": 1}, "l": [1, 2, 3]});
        assert_eq!(
            apply(
                doc.clone(),
                json!([{"op": "move", "from": "/a/b", "path": "/c"}])
            )
            .unwrap(),
            json!({"a": {}, "c": 1, "l": [1, 2, 3]})
        );
        assert_eq!(
            apply(
                doc.clone(),
                json!([{"op": "move", "from": "/l/0", "path": "/l/-"}])
            )
            .unwrap()["l"],
            json!([2, 3, 1])
        );
        // moving into the moved value's own subtree fails
        cannot_apply(apply(
            doc.clone(),
            json!([{"op": "move", "from": "/a", "path": "/a/b/c"}]),
        ));
        assert_eq!(
            cannot_apply(apply(
                doc.clone(),
                json!([{"op": "move", "from": "/a/x", "path": "/y"}])
            )),
            "error in move for path: 'x': Unable to remove nonexistent key: x: missing value"
        );
        cannot_apply(apply(
            doc.clone(),
            json!([{"op": "move", "from": "/l/5", "path": "/y"}]),
        ));
        assert_eq!(
            apply(
                doc.clone(),
                json!([{"op": "copy", "from": "/a", "path": "/l/0"}])
            )
            .unwrap(),
            json!({"a": {"b": 1}, "l": [{"b": 1}, 1, 2, 3]})
        );
        assert_eq!(
            apply(
                doc.clone(),
                json!([{"op": "copy", "from": "/l", "path": "/m"}])
            )
            .unwrap()["m"],
            json!([1, 2, 3])
        );
        assert_eq!(
            cannot_apply(apply(
                doc.clone(),
                json!([{"op": "copy", "from": "/nope", "path": "/m"}])
            )),
            "copy operation does not apply: doc is missing from path: /nope: missing value"
        );
        cannot_apply(apply(
            doc,
            json!([{"op": "copy", "from": "/l/0", "path": "/l/9"}]),
        ));
    }

    #[test]
    fn pointer_escaping() {
        let doc = json!({"metadata": {"annotations": {"example.com/a~b": "1"}}});
        let patched = apply(
            doc,
            json!([
                {"op": "test", "path": "/metadata/annotations/example.com~1a~0b", "value": "1"},
                {"op": "replace", "path": "/metadata/annotations/example.com~1a~0b", "value": "2"},
                {"op": "add", "path": "/metadata/annotations/x~01", "value": "3"}
            ]),
        )
        .unwrap();
        assert_eq!(
            patched,
            json!({"metadata": {"annotations": {"example.com/a~b": "2", "x~1": "3"}}})
        );
        // the empty member name is a valid token
        assert_eq!(
            apply(json!({}), json!([{"op": "add", "path": "/", "value": 1}])).unwrap(),
            json!({"": 1})
        );
    }

    #[test]
    fn test_null_on_missing_member_passes() {
        // kube-rs finalizer helper: first finalizer on an object without any.
        let doc = json!({"metadata": {"name": "x"}});
        let patched = apply(
            doc,
            json!([
                {"op": "test", "path": "/metadata/finalizers", "value": null},
                {"op": "add", "path": "/metadata/finalizers", "value": ["f"]}
            ]),
        )
        .unwrap();
        assert_eq!(patched["metadata"]["finalizers"], json!(["f"]));
        // a member holding null also satisfies it
        apply(
            json!({"metadata": {"finalizers": null}}),
            json!([{"op": "test", "path": "/metadata/finalizers", "value": null}]),
        )
        .unwrap();
    }

    #[test]
    fn test_failures() {
        let doc = json!({"metadata": {"finalizers": ["a", "b"]}});
        assert_eq!(
            cannot_apply(apply(
                doc.clone(),
                json!([{"op": "test", "path": "/metadata/finalizers/0", "value": "b"}])
            )),
            "testing value /metadata/finalizers/0 failed: test failed"
        );
        // missing member with a non-null expectation fails
        assert_eq!(
            cannot_apply(apply(
                doc.clone(),
                json!([{"op": "test", "path": "/metadata/labels", "value": {}}])
            )),
            "testing value /metadata/labels failed: test failed"
        );
        // a present value never equals null
        cannot_apply(apply(
            doc.clone(),
            json!([{"op": "test", "path": "/metadata/finalizers", "value": null}]),
        ));
        // a missing parent is not a null member
        assert_eq!(
            cannot_apply(apply(
                doc.clone(),
                json!([{"op": "test", "path": "/spec/x", "value": null}])
            )),
            "test operation does not apply: is missing path: /spec/x: missing value"
        );
        assert!(
            cannot_apply(apply(
                doc.clone(),
                json!([{"op": "test", "path": "/metadata/finalizers/5", "value": "a"}])
            ))
            .starts_with("error in test for path: '/metadata/finalizers/5'")
        );
        // a failed test anywhere rejects the whole patch
        cannot_apply(apply(
            doc,
            json!([
                {"op": "remove", "path": "/metadata/finalizers/0"},
                {"op": "test", "path": "/metadata/finalizers/0", "value": "a"}
            ]),
        ));
    }

    #[test]
    fn test_compares_structurally_and_numerically() {
        let doc = json!({"a": {"n": 1, "f": 2.5, "l": [1, {"x": true}], "s": "v"}});
        apply(
            doc.clone(),
            json!([{"op": "test", "path": "/a", "value": {"s": "v", "l": [1.0, {"x": true}], "f": 2.5, "n": 1.0}}]),
        )
        .unwrap();
        apply(
            doc.clone(),
            json!([{"op": "test", "path": "/a/n", "value": 1.0}]),
        )
        .unwrap();
        cannot_apply(apply(
            doc.clone(),
            json!([{"op": "test", "path": "/a/n", "value": "1"}]),
        ));
        cannot_apply(apply(
            doc.clone(),
            json!([{"op": "test", "path": "/a/l", "value": [1]}]),
        ));
        cannot_apply(apply(
            doc.clone(),
            json!([{"op": "test", "path": "/a", "value": {"n": 1}}]),
        ));
        apply(
            doc.clone(),
            json!([{"op": "test", "path": "", "value": doc}]),
        )
        .unwrap();
    }

    #[test]
    fn kube_rs_finalizer_sequences() {
        // add another finalizer
        let doc = json!({"metadata": {"finalizers": ["a"]}});
        let doc = apply(
            doc,
            json!([
                {"op": "test", "path": "/metadata/finalizers", "value": ["a"]},
                {"op": "add", "path": "/metadata/finalizers/-", "value": "b"}
            ]),
        )
        .unwrap();
        assert_eq!(doc["metadata"]["finalizers"], json!(["a", "b"]));
        // remove one by index after testing it
        let doc = apply(
            doc,
            json!([
                {"op": "test", "path": "/metadata/finalizers/1", "value": "b"},
                {"op": "remove", "path": "/metadata/finalizers/1"}
            ]),
        )
        .unwrap();
        assert_eq!(doc["metadata"]["finalizers"], json!(["a"]));
    }

    #[test]
    fn malformed_patches() {
        let doc = json!({});
        malformed(apply(doc.clone(), json!({"op": "add"})));
        malformed(apply(doc.clone(), Value::Null));
        malformed(apply(doc.clone(), json!(["add"])));
        assert_eq!(
            malformed(apply(
                doc.clone(),
                json!([{"op": "frobnicate", "path": "/a"}])
            )),
            "Unexpected kind: frobnicate"
        );
        malformed(apply(doc.clone(), json!([{"path": "/a", "value": 1}])));
        malformed(apply(doc.clone(), json!([{"op": "add", "value": 1}])));
        malformed(apply(
            doc.clone(),
            json!([{"op": "add", "path": 5, "value": 1}]),
        ));
        malformed(apply(doc.clone(), json!([{"op": "add", "path": "/a"}])));
        malformed(apply(doc.clone(), json!([{"op": "test", "path": "/a"}])));
        malformed(apply(doc.clone(), json!([{"op": "move", "path": "/a"}])));
        malformed(apply(
            doc.clone(),
            json!([{"op": "copy", "path": "/a", "from": 1}]),
        ));
        malformed(apply(doc.clone(), json!([{"op": "remove", "path": "a"}])));
        // validation happens before anything is applied
        malformed(apply(
            doc.clone(),
            json!([{"op": "test", "path": "/x", "value": 1}, {"op": "nope", "path": "/x"}]),
        ));
        // an empty patch is a no-op
        assert_eq!(apply(json!({"a": 1}), json!([])).unwrap(), json!({"a": 1}));
    }

    #[test]
    fn nested_array_paths() {
        let doc = json!({"spec": {"containers": [{"name": "c", "env": [{"name": "A"}]}]}});
        let patched = apply(
            doc,
            json!([
                {"op": "add", "path": "/spec/containers/0/env/-", "value": {"name": "B"}},
                {"op": "replace", "path": "/spec/containers/0/env/0/name", "value": "Z"}
            ]),
        )
        .unwrap();
        assert_eq!(
            patched["spec"]["containers"][0]["env"],
            json!([{"name": "Z"}, {"name": "B"}])
        );
    }

    #[test]
    fn more_operations_than_upstream_allows_are_too_large() {
        let op = json!({"op": "test", "path": "/a", "value": 1});
        let at_limit = Value::Array(vec![op.clone(); MAX_JSON_PATCH_OPERATIONS]);
        assert!(apply(json!({"a": 1}), at_limit).is_ok());
        let over = Value::Array(vec![op; MAX_JSON_PATCH_OPERATIONS + 1]);
        match apply(json!({"a": 1}), over) {
            Err(PatchError::TooLarge(m)) => assert_eq!(
                m,
                "The allowed maximum operations in a JSON patch is 10000, got 10001"
            ),
            other => panic!("expected TooLarge, got {other:?}"),
        }
    }

    #[test]
    fn copies_may_add_at_most_the_copy_limit() {
        // Each copy of /data into its own child doubles it: 11 add about 2 MiB, the 12th
        // would bring the total past 3 MiB.
        let doc = json!({"data": {"k": "x".repeat(1024)}});
        let doubling: Vec<Value> = (0..30)
            .map(|i| json!({"op": "copy", "from": "/data", "path": format!("/data/c{i}")}))
            .collect();
        let eleven = apply(doc.clone(), Value::Array(doubling[..11].to_vec()))
            .expect("eleven doublings stay under the limit");
        assert!(serialized_len(&eleven) > 2 << 20);
        let message = cannot_apply(apply(doc.clone(), Value::Array(doubling.clone())));
        // The twelfth copy is of everything the eleven before made, plus their keys.
        let mut added = 0;
        let mut data = doc["data"].clone();
        for i in 0..12 {
            added += serialized_len(&data);
            data[format!("c{i}")] = data.clone();
        }
        assert_eq!(
            message,
            format!(
                "Unable to complete the copy, the accumulated size increase of copy is {added}, exceeding the limit 3145728"
            )
        );
    }

    #[test]
    fn a_patch_may_not_nest_the_document_deeper_than_the_limit() {
        // Copying a chain over its own leaf doubles its depth.
        let mut chain = json!("leaf");
        for _ in 0..10 {
            chain = json!({ "n": chain });
        }
        let doc = json!({"chain": chain});
        let mut ops = Vec::new();
        let mut depth = 10;
        for _ in 0..20 {
            ops.push(json!({"op": "copy", "from": "/chain", "path": format!("/chain{}", "/n".repeat(depth))}));
            depth *= 2;
        }
        // Depth 11, 21, 41, 81: fine; 161 is not.
        let patched = apply(doc.clone(), Value::Array(ops[..3].to_vec())).unwrap();
        assert_eq!(nesting_depth(&patched), 81);
        let message = cannot_apply(apply(doc.clone(), Value::Array(ops.clone())));
        assert!(
            message.starts_with("the patched object would be nested more than 127 levels deep (after copy \"/chain/n/n"),
            "{message}"
        );

        // Adding a deep value at a deep place is caught the same way.
        let mut deep = json!(1);
        for _ in 0..100 {
            deep = json!([deep]);
        }
        let message = cannot_apply(apply(
            json!({"a": {"b": {}}}),
            json!([
                {"op": "add", "path": "/a/b/c", "value": deep.clone()},
                {"op": "add", "path": "/a/b/c/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0", "value": deep}
            ]),
        ));
        assert!(message.contains("nested more than 127 levels"), "{message}");
    }

    #[test]
    fn moves_into_deeper_places_are_recounted_not_refused() {
        // The cheap bound grows with every move from shallow to deep; the exact depth does
        // not, so the patch is applied.
        let mut doc = json!({"x": 1, "a": {}});
        let mut path = "/a".to_string();
        for _ in 0..120 {
            doc.pointer_mut(&path).unwrap()["a"] = json!({});
            path.push_str("/a");
        }
        let mut ops = Vec::new();
        for i in 0..200 {
            let (from, to) = if i % 2 == 0 {
                ("/x".to_string(), format!("{path}/x"))
            } else {
                (format!("{path}/x"), "/x".to_string())
            };
            ops.push(json!({"op": "move", "from": from, "path": to}));
        }
        let patched = apply(doc, Value::Array(ops)).unwrap();
        assert_eq!(patched["x"], 1);
    }
}
