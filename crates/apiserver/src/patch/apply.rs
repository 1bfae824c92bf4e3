//! Server-side apply (`application/apply-patch+yaml`) and the field ownership every write
//! records in `metadata.managedFields`, as pure functions over `serde_json::Value`.
//!
//! [`apply`] merges an applied configuration into the live object for one field manager;
//! [`record_update`] records what a create, update or non-apply patch changed. Both follow
//! structured-merge-diff's `merge.Updater` and k8s.io/apimachinery's
//! `util/managedfields/internal` managers:
//!
//! - **Ownership.** An applier owns exactly the fields of its configuration: leaves,
//!   empty maps, atomic lists and maps as a whole, and every associative-list and set item
//!   (see [`FieldSet`] for the `FieldsV1` form). An update owns what it added or changed;
//!   a map or list item it added is owned itself too (`".": {}`). `apiVersion`, `kind`,
//!   `metadata` itself and `metadata.{name, namespace, uid, resourceVersion, generation,
//!   creationTimestamp, selfLink, clusterName, managedFields}` are never owned.
//! - **Merge.** Maps merge key by key, scalars and atomic values are replaced, associative
//!   lists merge items by key and sets by value, in upstream's order: items only on the
//!   server stay where they are, shared items follow the configuration's order.
//! - **Removal.** Fields the manager applied last time (same manager and subresource),
//!   missing now, and owned by no manager are removed; removing an item removes it whole.
//!   A map or list all of whose entries the removal takes is removed as well (upstream
//!   leaves a `null` there, which decoding drops).
//! - **Conflicts.** A field the apply adds or changes that another entry (apply or update,
//!   any manager but this apply entry) owns is a conflict unless `force`; with `force` the
//!   others lose it. Equal values are shared. Fields the write removes are taken from
//!   every entry. Updates never conflict.
//! - **Entries.** One per manager identity: appliers by (manager, subresource), updaters by
//!   (manager, apiVersion, subresource). An entry whose set becomes empty is dropped.
//!   Entries are sorted Apply before Update, then by time, manager, apiVersion and
//!   subresource; more than ten update entries are folded, oldest first, into
//!   `ancient-changes` entries per apiVersion.
//! - **Time.** An apply stamps `now` when the object changed (otherwise the entry keeps its
//!   time, so re-applying the same configuration changes nothing); an update stamps it when
//!   it adds or changes a field.
//!
//! Deviations from upstream:
//!
//! - An explicit `null` in the applied configuration is dropped before anything else, as the
//!   spec asks: the field is neither stored nor owned. Upstream owns it and clears the
//!   field.
//! - The schema knows no struct types, so every map key is treated as a struct field: a
//!   non-empty map under a map-typed field (`additionalProperties` of objects) is not owned
//!   as a member of its own, and a field is not removed while any manager owns something
//!   inside it, but unowned fields inside it are not removed with it either.
//! - Lists whose items cannot be keyed (an item without the merge key, duplicate keys) are
//!   atomic when found in the live object; upstream fails the request. In the applied
//!   configuration they are [`ApplyError::Invalid`], as upstream.
//! - Associative lists have the single key of [`ListStrategy::MergeByKey`]; upstream keys
//!   container and service ports by port *and* protocol.
//! - A new apply entry whose configuration changes nothing gets `now` as its time (upstream
//!   leaves the time out); field sets are compared without version conversion.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde_json::{Map, Value};

use super::fieldset::{
    FieldSet, PathElement, go_quote, json_equal, path_string, write_go_json_string,
};
use super::strategic::{ListStrategy, MapStrategy, PatchSchema};

/// The most update entries kept before the oldest are folded together (upstream
/// `DefaultMaxUpdateManagers`).
const MAX_UPDATE_MANAGERS: usize = 10;

/// The manager name of folded update entries.
const ANCIENT_CHANGES_MANAGER: &str = "ancient-changes";

/// Paths never recorded in a field set (upstream `stripMetaManager`).
const NEVER_OWNED: [&[&str]; 12] = [
    &["apiVersion"],
    &["kind"],
    &["metadata"],
    &["metadata", "name"],
    &["metadata", "namespace"],
    &["metadata", "creationTimestamp"],
    &["metadata", "selfLink"],
    &["metadata", "uid"],
    &["metadata", "clusterName"],
    &["metadata", "generation"],
    &["metadata", "managedFields"],
    &["metadata", "resourceVersion"],
];

/// One server-side apply.
pub struct ApplyRequest<'a> {
    /// The stored object; `None` when the apply creates it.
    pub live: Option<&'a Value>,
    /// The applied configuration, parsed, with `apiVersion`, `kind` and `metadata.name`
    /// already checked against the URL.
    pub applied: &'a Value,
    /// The `fieldManager` query parameter.
    pub manager: &'a str,
    /// The `force` query parameter.
    pub force: bool,
    /// `Some("status")` for applies to `/status`.
    pub subresource: Option<&'a str>,
    /// The request's group version (`"v1"`, `"apps/v1"`), recorded in the entry.
    pub api_version: &'a str,
    /// The RFC 3339 time recorded in the entry.
    pub now: &'a str,
    /// List and map semantics of the kind.
    pub schema: &'a dyn PatchSchema,
}

/// The `operation` of a managed fields entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ManagedFieldsOperation {
    /// Server-side apply.
    Apply,
    /// Any other write: create, update, non-apply patch.
    Update,
}

impl ManagedFieldsOperation {
    /// The wire value: `"Apply"` or `"Update"`.
    pub fn as_str(self) -> &'static str {
        match self {
            ManagedFieldsOperation::Apply => "Apply",
            ManagedFieldsOperation::Update => "Update",
        }
    }
}

/// A field an apply would change that another manager owns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    /// The other manager's name.
    pub manager: String,
    /// Whether the other manager owns the field through an apply or an update.
    pub operation: ManagedFieldsOperation,
    /// The apiVersion of the other manager's entry.
    pub api_version: String,
    /// The other manager's subresource, e.g. `status`.
    pub subresource: Option<String>,
    /// The field as upstream renders it: `.data.a`, `.spec.containers[name="c"].image`.
    pub field: String,
}

impl Conflict {
    /// The `StatusCause.message` of this conflict: `conflict with "other-ctrl" using v1`.
    pub fn cause_message(&self) -> String {
        format!("conflict with {}", self.manager_description())
    }

    /// Upstream `printManager`: the quoted name, the subresource if any, and the version
    /// for update entries (apply entries are not tied to one version).
    fn manager_description(&self) -> String {
        let mut out = go_quote(&self.manager);
        if let Some(subresource) = &self.subresource {
            out.push_str(" with subresource ");
            out.push_str(&go_quote(subresource));
        }
        if self.operation == ManagedFieldsOperation::Update {
            out.push_str(" using ");
            out.push_str(&self.api_version);
        }
        out
    }

    fn manager_identifier(&self) -> String {
        let version =
            (self.operation == ManagedFieldsOperation::Update).then_some(self.api_version.as_str());
        manager_identifier(
            &self.manager,
            self.operation,
            version,
            self.subresource.as_deref(),
        )
    }
}

/// Why an apply was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ApplyError {
    /// Fields owned by other managers would change: 409 `Conflict`, with one
    /// `FieldManagerConflict` cause per conflict (see [`Conflict::cause_message`]).
    #[error("{}", conflict_message(.0))]
    Conflicts(Vec<Conflict>),
    /// The request or the stored object cannot be processed. Upstream answers 400 for an
    /// applied configuration that sets `metadata.managedFields` or has malformed lists and
    /// 500 for stored managed fields it cannot decode.
    #[error("{0}")]
    Invalid(String),
}

/// Upstream's conflict message: `Apply failed with 1 conflict: conflict with "m" using v1:
/// .data.a`, or for several, one `conflicts with <manager>:` line per manager (sorted by
/// manager identity) followed by a `- <field>` line per field.
pub fn conflict_message(conflicts: &[Conflict]) -> String {
    if let [only] = conflicts {
        return format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            only.manager_description(),
            only.field
        );
    }
    let mut by_manager: BTreeMap<String, (String, Vec<&str>)> = BTreeMap::new();
    for conflict in conflicts {
        by_manager
            .entry(conflict.manager_identifier())
            .or_insert_with(|| (conflict.manager_description(), Vec::new()))
            .1
            .push(&conflict.field);
    }
    let mut lines = Vec::new();
    for (description, fields) in by_manager.into_values() {
        lines.push(format!("conflicts with {description}:"));
        lines.extend(fields.into_iter().map(|field| format!("- {field}")));
    }
    format!(
        "Apply failed with {} conflicts: {}",
        conflicts.len(),
        lines.join("\n")
    )
}

/// Applies `request.applied` for `request.manager` and returns the new object with
/// `metadata.managedFields` updated.
///
/// # Errors
///
/// [`ApplyError::Conflicts`] when, without `force`, the apply would change fields other
/// managers own. [`ApplyError::Invalid`] when the applied configuration is not an object,
/// sets `metadata.managedFields`, or has a merged list with an item lacking its key or a
/// duplicate item, or when the stored managed fields cannot be decoded.
pub fn apply(request: &ApplyRequest) -> Result<Value, ApplyError> {
    let Value::Object(applied) = request.applied else {
        return Err(ApplyError::Invalid(
            "the applied configuration must be a JSON object".into(),
        ));
    };
    let sets_managed_fields = applied
        .get("metadata")
        .and_then(|metadata| metadata.get("managedFields"))
        .is_some_and(|fields| !fields.is_null());
    if sets_managed_fields {
        return Err(ApplyError::Invalid(
            "metadata.managedFields must be nil".into(),
        ));
    }
    let mut live = match request.live {
        None => Map::new(),
        Some(Value::Object(live)) => live.clone(),
        Some(_) => {
            return Err(ApplyError::Invalid(
                "the stored object is not a JSON object".into(),
            ));
        }
    };
    let mut managers = ManagedFields::decode(&live)
        .map_err(|e| ApplyError::Invalid(format!("failed to decode managed fields: {e}")))?;
    remove_managed_fields(&mut live);

    let typed = Typed {
        schema: request.schema,
    };
    let config = without_nulls(applied);
    typed
        .validate(&config)
        .map_err(|e| ApplyError::Invalid(format!("failed to create typed patch object: {e}")))?;

    let merged = typed.merge(&live, &config);
    let applied_fields = typed.field_set(&config);
    let id = ManagerId::new(
        request.manager,
        ManagedFieldsOperation::Apply,
        request.api_version,
        request.subresource,
    );
    let previous = managers.take(&id);
    let owned_now = managers.all_fields().union(&applied_fields);
    let object = match &previous {
        Some(previous) => {
            let unowned = previous
                .fields
                .difference(&owned_now)
                .without_fields_owned_inside(&owned_now);
            typed.remove(&merged, &unowned)
        }
        None => merged,
    };

    let comparison = typed.compare(&live, &object);
    let changed = comparison.added.union(&comparison.modified);
    let mut conflicts = Vec::new();
    for entry in &managers.entries {
        for path in entry.fields.intersection(&changed).paths() {
            conflicts.push(Conflict {
                manager: entry.id.manager.clone(),
                operation: entry.id.operation,
                api_version: entry.api_version.clone(),
                subresource: entry.id.subresource.clone(),
                field: path_string(&path),
            });
        }
    }
    if !request.force && !conflicts.is_empty() {
        // Stable, so each manager's fields keep upstream's path order.
        conflicts.sort_by_key(Conflict::manager_identifier);
        return Err(ApplyError::Conflicts(conflicts));
    }
    managers.take_away(&changed.union(&comparison.removed));

    let owned = never_owned_removed(&applied_fields);
    if !owned.is_empty() {
        let time = match previous {
            Some(previous) if object == live => previous.time,
            _ => Some(request.now.to_string()),
        };
        managers.entries.push(Entry {
            id,
            api_version: request.api_version.to_string(),
            time,
            fields: owned,
        });
    }

    let mut object = object;
    managers.store(&mut object);
    Ok(Value::Object(object))
}

/// Records an `Update` by `manager` of what changed from `old` (`None` on create) to
/// `new`, and writes `metadata.managedFields` into `new`.
///
/// The managers' entries come from `new` when the request set them (so clients can edit
/// managed fields; `[]` or `[{}]` clears them), otherwise from `old`; requests to a
/// subresource always use `old`'s. Entries that cannot be decoded are dropped, as upstream
/// resets them. Fields the write adds or changes are taken from every entry and owned by
/// `manager`; fields it removes are taken from every entry.
pub fn record_update(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    subresource: Option<&str>,
    api_version: &str,
    now: &str,
    schema: &dyn PatchSchema,
) {
    let Value::Object(new) = new else {
        return;
    };
    let old = old.and_then(Value::as_object);
    let mut managers = managers_for_update(old, new, subresource);
    remove_managed_fields(new);
    let mut old = old.cloned().unwrap_or_default();
    remove_managed_fields(&mut old);

    let typed = Typed { schema };
    let comparison = typed.compare(&old, new);
    let changed = comparison.added.union(&comparison.modified);
    managers.take_away(&changed.union(&comparison.removed));

    let owned = never_owned_removed(&changed);
    if !owned.is_empty() {
        let id = ManagerId::new(
            manager,
            ManagedFieldsOperation::Update,
            api_version,
            subresource,
        );
        match managers.find_mut(&id) {
            Some(entry) => {
                entry.fields = entry.fields.union(&owned);
                entry.time = Some(now.to_string());
            }
            None => managers.entries.push(Entry {
                id,
                api_version: api_version.to_string(),
                time: Some(now.to_string()),
                fields: owned,
            }),
        }
    }
    managers.cap_update_entries();
    managers.store(new);
}

/// Upstream `decodeLiveOrNew`.
fn managers_for_update(
    old: Option<&Map<String, Value>>,
    new: &Map<String, Value>,
    subresource: Option<&str>,
) -> ManagedFields {
    let from_old = || {
        old.and_then(|old| ManagedFields::decode(old).ok())
            .unwrap_or_default()
    };
    if subresource.is_some() {
        return from_old();
    }
    let requested = new
        .get("metadata")
        .and_then(|metadata| metadata.get("managedFields"));
    if requested.is_some_and(is_reset_request) {
        return ManagedFields::default();
    }
    match ManagedFields::decode(new) {
        Ok(managers) if !managers.entries.is_empty() => managers,
        _ => from_old(),
    }
}

/// `managedFields: []` or `[{}]`: the client asks for the entries to be cleared.
fn is_reset_request(fields: &Value) -> bool {
    match fields {
        Value::Array(entries) => match entries.as_slice() {
            [] => true,
            [Value::Object(only)] => only.is_empty(),
            _ => false,
        },
        _ => false,
    }
}

fn remove_managed_fields(object: &mut Map<String, Value>) {
    if let Some(Value::Object(metadata)) = object.get_mut("metadata") {
        metadata.remove("managedFields");
    }
}

fn never_owned_removed(fields: &FieldSet) -> FieldSet {
    let mut never_owned = FieldSet::new();
    for path in NEVER_OWNED {
        let path: Vec<PathElement> = path
            .iter()
            .map(|name| PathElement::Field((*name).to_string()))
            .collect();
        never_owned.insert(&path);
    }
    fields.difference(&never_owned)
}

/// The configuration without `null` map values, at any depth: a `null` means "unset".
fn without_nulls(map: &Map<String, Value>) -> Map<String, Value> {
    map.iter()
        .filter(|(_, value)| !value.is_null())
        .map(|(key, value)| (key.clone(), without_nulls_in(value)))
        .collect()
}

fn without_nulls_in(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(without_nulls(map)),
        Value::Array(items) => Value::Array(items.iter().map(without_nulls_in).collect()),
        other => other.clone(),
    }
}

/// Who a managed fields entry belongs to: upstream's manager identifier.
#[derive(Clone, Debug, PartialEq, Eq)]
struct ManagerId {
    manager: String,
    operation: ManagedFieldsOperation,
    /// Only update entries are told apart by version; an applier keeps one entry.
    api_version: Option<String>,
    subresource: Option<String>,
}

impl ManagerId {
    fn new(
        manager: &str,
        operation: ManagedFieldsOperation,
        api_version: &str,
        subresource: Option<&str>,
    ) -> ManagerId {
        ManagerId {
            manager: manager.to_string(),
            operation,
            api_version: (operation == ManagedFieldsOperation::Update)
                .then(|| api_version.to_string()),
            subresource: subresource
                .filter(|name| !name.is_empty())
                .map(str::to_string),
        }
    }

    fn identifier(&self) -> String {
        manager_identifier(
            &self.manager,
            self.operation,
            self.api_version.as_deref(),
            self.subresource.as_deref(),
        )
    }
}

/// Upstream `BuildManagerIdentifier`: the entry without fields, time and (for appliers)
/// version, as Go marshals it. Conflicts are grouped and sorted by it.
fn manager_identifier(
    manager: &str,
    operation: ManagedFieldsOperation,
    api_version: Option<&str>,
    subresource: Option<&str>,
) -> String {
    let mut out = String::from("{");
    let mut fields = vec![("manager", manager), ("operation", operation.as_str())];
    fields.extend(api_version.map(|version| ("apiVersion", version)));
    fields.extend(subresource.map(|name| ("subresource", name)));
    let mut first = true;
    for (key, value) in fields {
        if value.is_empty() {
            continue;
        }
        if !first {
            out.push(',');
        }
        first = false;
        write_go_json_string(&mut out, key);
        out.push(':');
        write_go_json_string(&mut out, value);
    }
    out.push('}');
    out
}

#[derive(Clone, Debug)]
struct Entry {
    id: ManagerId,
    api_version: String,
    time: Option<String>,
    fields: FieldSet,
}

impl Entry {
    fn decode(index: usize, entry: &Value) -> Result<Entry, String> {
        let Value::Object(entry) = entry else {
            return Err(format!("managed fields entry {index} is not an object"));
        };
        let text = |key: &str| -> Result<Option<&str>, String> {
            match entry.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(text)) => Ok(Some(text)),
                Some(other) => Err(format!(
                    "{key} of managed fields entry {index} must be a string, found {other}"
                )),
            }
        };
        let operation = match text("operation")? {
            Some("Apply") => ManagedFieldsOperation::Apply,
            Some("Update") => ManagedFieldsOperation::Update,
            _ => return Err("operation must be `Apply` or `Update`".into()),
        };
        let api_version = text("apiVersion")?.unwrap_or_default();
        if api_version.is_empty() {
            return Err("apiVersion must not be empty".into());
        }
        match text("fieldsType")? {
            Some("FieldsV1") => {}
            None | Some("") => {
                return Err(format!(
                    "missing fieldsType in managed fields entry {index}"
                ));
            }
            Some(other) => {
                return Err(format!(
                    "invalid fieldsType {} in managed fields entry {index}",
                    go_quote(other)
                ));
            }
        }
        let fields = match entry.get("fieldsV1") {
            None | Some(Value::Null) => FieldSet::new(),
            Some(fields) => FieldSet::from_fields_v1(fields).map_err(|e| {
                format!("error decoding versioned set of managed fields entry {index}: {e}")
            })?,
        };
        Ok(Entry {
            id: ManagerId::new(
                text("manager")?.unwrap_or_default(),
                operation,
                api_version,
                text("subresource")?,
            ),
            api_version: api_version.to_string(),
            time: text("time")?.map(str::to_string),
            fields,
        })
    }

    fn encode(&self) -> Value {
        let mut entry = Map::new();
        if !self.id.manager.is_empty() {
            entry.insert("manager".into(), self.id.manager.clone().into());
        }
        entry.insert("operation".into(), self.id.operation.as_str().into());
        entry.insert("apiVersion".into(), self.api_version.clone().into());
        if let Some(time) = &self.time {
            entry.insert("time".into(), time.clone().into());
        }
        entry.insert("fieldsType".into(), "FieldsV1".into());
        entry.insert("fieldsV1".into(), self.fields.to_fields_v1());
        if let Some(subresource) = &self.id.subresource {
            entry.insert("subresource".into(), subresource.clone().into());
        }
        Value::Object(entry)
    }

    fn seconds(&self) -> i64 {
        self.time
            .as_deref()
            .and_then(|time| chrono::DateTime::parse_from_rfc3339(time).ok())
            .map_or(0, |time| time.timestamp())
    }
}

/// The decoded `metadata.managedFields` of an object.
#[derive(Clone, Debug, Default)]
struct ManagedFields {
    entries: Vec<Entry>,
}

impl ManagedFields {
    /// Upstream `DecodeManagedFields`; a later entry with the same identity replaces an
    /// earlier one.
    fn decode(object: &Map<String, Value>) -> Result<ManagedFields, String> {
        let encoded = object
            .get("metadata")
            .and_then(|metadata| metadata.get("managedFields"));
        let entries = match encoded {
            None | Some(Value::Null) => return Ok(ManagedFields::default()),
            Some(Value::Array(entries)) => entries,
            Some(other) => return Err(format!("managedFields must be a list, found {other}")),
        };
        let mut managers = ManagedFields::default();
        for (index, entry) in entries.iter().enumerate() {
            let entry = Entry::decode(index, entry)?;
            managers.take(&entry.id);
            managers.entries.push(entry);
        }
        Ok(managers)
    }

    fn take(&mut self, id: &ManagerId) -> Option<Entry> {
        let index = self.entries.iter().position(|entry| entry.id == *id)?;
        Some(self.entries.remove(index))
    }

    fn find_mut(&mut self, id: &ManagerId) -> Option<&mut Entry> {
        self.entries.iter_mut().find(|entry| entry.id == *id)
    }

    fn all_fields(&self) -> FieldSet {
        self.entries
            .iter()
            .fold(FieldSet::new(), |all, entry| all.union(&entry.fields))
    }

    /// Takes `fields` away from every entry and drops the entries left empty.
    fn take_away(&mut self, fields: &FieldSet) {
        for entry in &mut self.entries {
            entry.fields = entry.fields.difference(fields);
        }
        self.entries.retain(|entry| !entry.fields.is_empty());
    }

    /// Upstream `capUpdateManagers`: while there are too many update entries, the oldest
    /// are merged into an `ancient-changes` entry of their apiVersion (the first one seen
    /// per version becomes that entry when a second one joins it).
    fn cap_update_entries(&mut self) {
        let mut updaters: Vec<(i64, String, ManagerId)> = self
            .entries
            .iter()
            .filter(|entry| entry.id.operation == ManagedFieldsOperation::Update)
            .map(|entry| (entry.seconds(), entry.id.identifier(), entry.id.clone()))
            .collect();
        if updaters.len() <= MAX_UPDATE_MANAGERS {
            return;
        }
        updaters.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        let mut remaining = updaters.len();
        let mut first_per_version: HashMap<String, ManagerId> = HashMap::new();
        for (_, _, id) in updaters {
            if remaining <= MAX_UPDATE_MANAGERS {
                break;
            }
            let Some(entry) = self.take(&id) else {
                continue;
            };
            let version = entry.api_version.clone();
            let Some(first) = first_per_version.get(&version) else {
                first_per_version.insert(version, id);
                self.entries.push(entry);
                continue;
            };
            let bucket_id = ManagerId::new(
                ANCIENT_CHANGES_MANAGER,
                ManagedFieldsOperation::Update,
                &version,
                None,
            );
            let bucket_fields = match self.take(&bucket_id) {
                Some(bucket) => bucket.fields,
                None => self
                    .take(first)
                    .map(|first| first.fields)
                    .unwrap_or_default(),
            };
            self.entries.push(Entry {
                id: bucket_id,
                api_version: version,
                time: entry.time,
                fields: entry.fields.union(&bucket_fields),
            });
            remaining -= 1;
        }
    }

    /// Writes the entries into `object.metadata.managedFields` in upstream's order, or
    /// removes the field when there are none.
    fn store(mut self, object: &mut Map<String, Value>) {
        if self.entries.is_empty() {
            remove_managed_fields(object);
            return;
        }
        self.entries.sort_by(|a, b| {
            let rank = |entry: &Entry| entry.id.operation == ManagedFieldsOperation::Update;
            rank(a)
                .cmp(&rank(b))
                .then_with(|| a.seconds().cmp(&b.seconds()))
                .then_with(|| a.id.manager.cmp(&b.id.manager))
                .then_with(|| a.api_version.cmp(&b.api_version))
                .then_with(|| a.id.subresource.cmp(&b.id.subresource))
        });
        let encoded = self.entries.iter().map(Entry::encode).collect();
        let metadata = object
            .entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(metadata) = metadata {
            metadata.insert("managedFields".into(), Value::Array(encoded));
        }
    }
}

/// The fields an operation added, changed and removed (upstream `typed.Comparison`).
#[derive(Debug, Default)]
struct Comparison {
    added: FieldSet,
    modified: FieldSet,
    removed: FieldSet,
}

/// How the items of a list are identified.
#[derive(Clone, Copy, Debug)]
enum ListKind {
    /// The list is one value.
    Atomic,
    /// Items are scalars identified by value.
    Set,
    /// Items are maps identified by this key field.
    Map(&'static str),
}

/// Where a walk is: the field names for schema lookups (list items add none) and the path
/// for field sets.
#[derive(Default)]
struct Cursor<'a> {
    names: Vec<&'a str>,
    path: Vec<PathElement>,
}

impl<'a> Cursor<'a> {
    fn enter_field(&mut self, name: &'a str) {
        self.names.push(name);
        self.path.push(PathElement::Field(name.to_string()));
    }

    fn leave_field(&mut self) {
        self.names.pop();
        self.path.pop();
    }
}

/// Values walked with the list and map semantics of a schema.
struct Typed<'s> {
    schema: &'s dyn PatchSchema,
}

/// The path element of a list item, or upstream's reason it has none.
fn list_element(item: &Value, kind: ListKind) -> Result<PathElement, String> {
    match (kind, item) {
        (ListKind::Map(_), Value::Null) => {
            Err("associative list with keys may not have a null element".into())
        }
        (ListKind::Map(key), Value::Object(map)) => match map.get(key) {
            Some(value) => Ok(PathElement::Key(vec![(key.to_string(), value.clone())])),
            None => Err(format!(
                "associative list with keys has an element that omits all key fields [{}] \
                 (and doesn't have default values for any key fields)",
                go_quote(key)
            )),
        },
        (ListKind::Map(_), _) => {
            Err("associative list with keys may not have non-map elements".into())
        }
        (_, Value::Object(_)) => {
            Err("associative list without keys has an element that's a map type".into())
        }
        (_, Value::Array(_)) => {
            Err("not supported: associative list with lists as elements".into())
        }
        (_, Value::Null) => {
            Err("associative list without keys has an element that's an explicit null".into())
        }
        (_, scalar) => Ok(PathElement::Value(scalar.clone())),
    }
}

impl<'a> Typed<'_> {
    fn list_kind(&self, names: &[&str]) -> ListKind {
        match self.schema.list_strategy(names) {
            ListStrategy::Replace => ListKind::Atomic,
            ListStrategy::MergePrimitives => ListKind::Set,
            ListStrategy::MergeByKey(key) => ListKind::Map(key),
        }
    }

    fn is_atomic_map(&self, names: &[&str]) -> bool {
        !names.is_empty() && self.schema.map_strategy(names) == MapStrategy::Replace
    }

    /// The items of a merged list with their path elements; `None` when the list is atomic
    /// or its items cannot be told apart (then it is handled as atomic).
    fn keyed_items<'v>(
        &self,
        items: &'v [Value],
        names: &[&str],
    ) -> Option<Vec<(PathElement, &'v Value)>> {
        let kind = self.list_kind(names);
        if matches!(kind, ListKind::Atomic) {
            return None;
        }
        let mut seen = BTreeSet::new();
        let mut keyed = Vec::with_capacity(items.len());
        for item in items {
            let element = list_element(item, kind).ok()?;
            if !seen.insert(element.clone()) {
                return None;
            }
            keyed.push((element, item));
        }
        Some(keyed)
    }

    /// Rejects merged lists the apply cannot key, with upstream's messages.
    fn validate(&self, config: &'a Map<String, Value>) -> Result<(), String> {
        self.validate_map(config, &mut Cursor::default())
    }

    fn validate_map(
        &self,
        map: &'a Map<String, Value>,
        cursor: &mut Cursor<'a>,
    ) -> Result<(), String> {
        for (key, value) in map {
            cursor.enter_field(key);
            let result = self.validate_value(value, cursor);
            cursor.leave_field();
            result?;
        }
        Ok(())
    }

    fn validate_value(&self, value: &'a Value, cursor: &mut Cursor<'a>) -> Result<(), String> {
        match value {
            Value::Object(map) if !self.is_atomic_map(&cursor.names) => {
                self.validate_map(map, cursor)
            }
            Value::Array(items) => {
                let kind = self.list_kind(&cursor.names);
                if matches!(kind, ListKind::Atomic) {
                    return Ok(());
                }
                let here = path_string(&cursor.path);
                let mut seen = BTreeSet::new();
                for (index, item) in items.iter().enumerate() {
                    let element = list_element(item, kind)
                        .map_err(|e| format!("{here}: element {index}: {e}"))?;
                    if !seen.insert(element.clone()) {
                        return Err(format!("{here}: duplicate entries for key {element}"));
                    }
                    if let Value::Object(item) = item {
                        cursor.path.push(element);
                        let result = self.validate_map(item, cursor);
                        cursor.path.pop();
                        result?;
                    }
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// The fields a configuration sets (upstream `ToFieldSet`).
    fn field_set(&self, config: &'a Map<String, Value>) -> FieldSet {
        let mut fields = FieldSet::new();
        self.collect_map(config, &mut Cursor::default(), &mut fields);
        fields
    }

    fn collect_map(
        &self,
        map: &'a Map<String, Value>,
        cursor: &mut Cursor<'a>,
        fields: &mut FieldSet,
    ) {
        for (key, value) in map {
            cursor.enter_field(key);
            self.collect_value(value, cursor, fields);
            cursor.leave_field();
        }
    }

    fn collect_value(&self, value: &'a Value, cursor: &mut Cursor<'a>, fields: &mut FieldSet) {
        match value {
            Value::Object(map) if !map.is_empty() && !self.is_atomic_map(&cursor.names) => {
                self.collect_map(map, cursor, fields);
            }
            Value::Array(items) => match self.keyed_items(items, &cursor.names) {
                Some(keyed) => {
                    for (element, item) in keyed {
                        cursor.path.push(element);
                        fields.insert(&cursor.path);
                        if let Value::Object(item) = item {
                            self.collect_map(item, cursor, fields);
                        }
                        cursor.path.pop();
                    }
                }
                None => fields.insert(&cursor.path),
            },
            _ => fields.insert(&cursor.path),
        }
    }

    /// The configuration merged into the live object (upstream `TypedValue.Merge`).
    fn merge(
        &self,
        live: &Map<String, Value>,
        config: &'a Map<String, Value>,
    ) -> Map<String, Value> {
        self.merge_map(live, config, &mut Cursor::default())
    }

    fn merge_map(
        &self,
        live: &Map<String, Value>,
        config: &'a Map<String, Value>,
        cursor: &mut Cursor<'a>,
    ) -> Map<String, Value> {
        let mut merged = live.clone();
        for (key, value) in config {
            cursor.enter_field(key);
            let value = self.merge_value(live.get(key), value, cursor);
            cursor.leave_field();
            merged.insert(key.clone(), value);
        }
        merged
    }

    fn merge_value(
        &self,
        live: Option<&Value>,
        config: &'a Value,
        cursor: &mut Cursor<'a>,
    ) -> Value {
        match (live, config) {
            (Some(Value::Object(live)), Value::Object(config))
                if !self.is_atomic_map(&cursor.names) =>
            {
                Value::Object(self.merge_map(live, config, cursor))
            }
            (Some(Value::Array(live)), Value::Array(config)) => {
                let live_items = self.keyed_items(live, &cursor.names);
                let config_items = self.keyed_items(config, &cursor.names);
                match (live_items, config_items) {
                    (Some(live), Some(config)) => {
                        Value::Array(self.merge_lists(&live, &config, cursor))
                    }
                    _ => Value::Array(config.clone()),
                }
            }
            _ => config.clone(),
        }
    }

    /// Upstream's list merge order: live-only items stay in place, shared items are
    /// merged in the configuration's order, new items go where the configuration has them
    /// relative to the shared ones.
    fn merge_lists(
        &self,
        live: &[(PathElement, &Value)],
        config: &[(PathElement, &'a Value)],
        cursor: &mut Cursor<'a>,
    ) -> Vec<Value> {
        let live_index: BTreeMap<&PathElement, &Value> = live
            .iter()
            .map(|(element, item)| (element, *item))
            .collect();
        let in_config: BTreeSet<&PathElement> = config.iter().map(|(element, _)| element).collect();
        let mut shared = config
            .iter()
            .map(|(element, _)| element)
            .filter(|element| live_index.contains_key(element));
        let mut next_shared = shared.next();
        let mut taken_from_config: BTreeSet<&PathElement> = BTreeSet::new();
        let mut merged = Vec::with_capacity(live.len().max(config.len()));
        let (mut l, mut c) = (0, 0);
        while l < live.len() || c < config.len() {
            if l < live.len() && c < config.len() {
                let element = &live[l].0;
                if *element == config[c].0 {
                    taken_from_config.insert(element);
                    merged.push(self.merge_value(Some(live[l].1), config[c].1, cursor));
                    l += 1;
                    c += 1;
                    next_shared = shared.next();
                    continue;
                }
                // A shared item comes out when the configuration reaches it.
                if in_config.contains(element) && next_shared.is_some_and(|next| next != element) {
                    l += 1;
                    continue;
                }
            }
            if l < live.len() {
                let element = &live[l].0;
                if !in_config.contains(element) {
                    merged.push(live[l].1.clone());
                    l += 1;
                    continue;
                }
                if taken_from_config.contains(element) {
                    l += 1;
                }
            }
            if c < config.len() {
                let (element, item) = &config[c];
                taken_from_config.insert(element);
                merged.push(self.merge_value(live_index.get(element).copied(), item, cursor));
                c += 1;
                if next_shared == Some(element) {
                    next_shared = shared.next();
                }
            }
        }
        merged
    }

    /// `object` without the paths in `fields`; a map or list all of whose entries are
    /// removed is removed as well.
    fn remove(&self, object: &'a Map<String, Value>, fields: &FieldSet) -> Map<String, Value> {
        if fields.is_empty() {
            return object.clone();
        }
        self.remove_from_map(object, fields, &mut Cursor::default())
            .unwrap_or_default()
    }

    /// `None` when every key was removed.
    fn remove_from_map(
        &self,
        map: &'a Map<String, Value>,
        fields: &FieldSet,
        cursor: &mut Cursor<'a>,
    ) -> Option<Map<String, Value>> {
        let mut kept = Map::new();
        let mut any_kept = false;
        for (key, value) in map {
            let element = PathElement::Field(key.clone());
            if fields.has_member(&element) {
                continue;
            }
            any_kept = true;
            match fields.child(&element) {
                Some(below) => {
                    cursor.enter_field(key);
                    let value = self.remove_from_value(value, below, cursor);
                    cursor.leave_field();
                    if let Some(value) = value {
                        kept.insert(key.clone(), value);
                    }
                }
                None => {
                    kept.insert(key.clone(), value.clone());
                }
            }
        }
        any_kept.then_some(kept)
    }

    fn remove_from_value(
        &self,
        value: &'a Value,
        fields: &FieldSet,
        cursor: &mut Cursor<'a>,
    ) -> Option<Value> {
        match value {
            Value::Object(map) if !self.is_atomic_map(&cursor.names) => {
                self.remove_from_map(map, fields, cursor).map(Value::Object)
            }
            Value::Array(items) => {
                let Some(keyed) = self.keyed_items(items, &cursor.names) else {
                    return Some(value.clone());
                };
                let mut kept = Vec::with_capacity(keyed.len());
                let mut any_kept = false;
                for (element, item) in keyed {
                    if fields.has_member(&element) {
                        continue;
                    }
                    any_kept = true;
                    match fields.child(&element) {
                        Some(below) => {
                            cursor.path.push(element);
                            kept.extend(self.remove_from_value(item, below, cursor));
                            cursor.path.pop();
                        }
                        None => kept.push(item.clone()),
                    }
                }
                any_kept.then_some(Value::Array(kept))
            }
            other => Some(other.clone()),
        }
    }

    /// What changed from `old` to `new` (upstream `TypedValue.Compare`): leaves that
    /// appeared, changed or disappeared, plus maps and list items that appeared or
    /// disappeared as a whole.
    fn compare(&self, old: &'a Map<String, Value>, new: &'a Map<String, Value>) -> Comparison {
        let mut comparison = Comparison::default();
        self.compare_maps(
            Some(old),
            Some(new),
            &mut Cursor::default(),
            &mut comparison,
        );
        comparison
    }

    fn compare_maps(
        &self,
        old: Option<&'a Map<String, Value>>,
        new: Option<&'a Map<String, Value>>,
        cursor: &mut Cursor<'a>,
        comparison: &mut Comparison,
    ) {
        let keys: BTreeSet<&'a String> = old
            .into_iter()
            .chain(new)
            .flat_map(|map| map.keys())
            .collect();
        for key in keys {
            cursor.enter_field(key);
            self.compare_value(
                old.and_then(|map| map.get(key)),
                new.and_then(|map| map.get(key)),
                cursor,
                comparison,
            );
            cursor.leave_field();
        }
    }

    fn compare_value(
        &self,
        old: Option<&'a Value>,
        new: Option<&'a Value>,
        cursor: &mut Cursor<'a>,
        comparison: &mut Comparison,
    ) {
        if old.is_none() && new.is_none() {
            return;
        }
        if let (Some(old), Some(new)) = (old, new)
            && shape(old) != shape(new)
        {
            // The value changed kind: it changed, and whatever was inside either side
            // disappeared or appeared.
            comparison.modified.insert(&cursor.path);
            self.compare_inside(Some(old), None, cursor, comparison);
            self.compare_inside(None, Some(new), cursor, comparison);
            return;
        }
        let granular = self.compare_inside(old, new, cursor, comparison);
        if !granular {
            match (old, new) {
                (None, Some(_)) => comparison.added.insert(&cursor.path),
                (Some(_), None) => comparison.removed.insert(&cursor.path),
                (Some(old), Some(new)) if !json_equal(old, new) => {
                    comparison.modified.insert(&cursor.path);
                }
                _ => {}
            }
        } else if old.is_none() {
            comparison.added.insert(&cursor.path);
        } else if new.is_none() {
            comparison.removed.insert(&cursor.path);
        }
    }

    /// Compares the insides of a map or merged list and returns `true`, or returns `false`
    /// for a leaf: a scalar, an atomic value, a map or list empty on both sides, or a list
    /// whose items cannot be keyed.
    fn compare_inside(
        &self,
        old: Option<&'a Value>,
        new: Option<&'a Value>,
        cursor: &mut Cursor<'a>,
        comparison: &mut Comparison,
    ) -> bool {
        let is_empty = |value: Option<&Value>| match value {
            None => true,
            Some(Value::Object(map)) => map.is_empty(),
            Some(Value::Array(items)) => items.is_empty(),
            Some(_) => false,
        };
        match old.or(new) {
            Some(Value::Object(_)) => {
                if self.is_atomic_map(&cursor.names) || (is_empty(old) && is_empty(new)) {
                    return false;
                }
                self.compare_maps(
                    old.and_then(Value::as_object),
                    new.and_then(Value::as_object),
                    cursor,
                    comparison,
                );
                true
            }
            Some(Value::Array(_)) => {
                if is_empty(old) && is_empty(new) {
                    return false;
                }
                let keyed = |value: Option<&'a Value>| match value.and_then(Value::as_array) {
                    Some(items) => self.keyed_items(items, &cursor.names).map(Some),
                    None => Some(None),
                };
                let (Some(old_items), Some(new_items)) = (keyed(old), keyed(new)) else {
                    return false;
                };
                let old_items = old_items.unwrap_or_default();
                let new_items = new_items.unwrap_or_default();
                let old_index: BTreeMap<&PathElement, &'a Value> = old_items
                    .iter()
                    .map(|(element, item)| (element, *item))
                    .collect();
                let new_index: BTreeMap<&PathElement, &'a Value> = new_items
                    .iter()
                    .map(|(element, item)| (element, *item))
                    .collect();
                let only_new = new_items
                    .iter()
                    .filter(|(element, _)| !old_index.contains_key(element));
                for (element, _) in old_items.iter().chain(only_new) {
                    cursor.path.push(element.clone());
                    self.compare_value(
                        old_index.get(element).copied(),
                        new_index.get(element).copied(),
                        cursor,
                        comparison,
                    );
                    cursor.path.pop();
                }
                true
            }
            _ => false,
        }
    }
}

#[derive(PartialEq, Eq)]
enum Shape {
    Map,
    List,
    Scalar,
}

fn shape(value: &Value) -> Shape {
    match value {
        Value::Object(_) => Shape::Map,
        Value::Array(_) => Shape::List,
        _ => Shape::Scalar,
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::patch::BuiltinSchema;

    const T1: &str = "2024-05-01T10:00:01Z";
    const T2: &str = "2024-05-01T10:00:02Z";
    const T3: &str = "2024-05-01T10:00:03Z";
    const T4: &str = "2024-05-01T10:00:04Z";
    const T5: &str = "2024-05-01T10:00:05Z";

    /// Applies `applied` with the apiVersion and kind it names.
    fn apply_at(
        live: Option<&Value>,
        applied: &Value,
        manager: &str,
        force: bool,
        subresource: Option<&str>,
        now: &str,
    ) -> Result<Value, ApplyError> {
        let schema = BuiltinSchema::for_kind(applied["kind"].as_str().unwrap());
        apply(&ApplyRequest {
            live,
            applied,
            manager,
            force,
            subresource,
            api_version: applied["apiVersion"].as_str().unwrap(),
            now,
            schema: &schema,
        })
    }

    fn apply_ok(live: Option<&Value>, applied: &Value, manager: &str, now: &str) -> Value {
        apply_at(live, applied, manager, false, None, now).unwrap()
    }

    fn update_at(old: Option<&Value>, new: &Value, manager: &str, now: &str) -> Value {
        let mut new = new.clone();
        let kind = new["kind"].as_str().unwrap().to_string();
        let schema = BuiltinSchema::for_kind(&kind);
        let api_version = new["apiVersion"].as_str().unwrap().to_string();
        record_update(old, &mut new, manager, None, &api_version, now, &schema);
        new
    }

    fn managed_fields(object: &Value) -> &Value {
        &object["metadata"]["managedFields"]
    }

    fn entry(
        manager: &str,
        operation: &str,
        api_version: &str,
        time: &str,
        fields: Value,
    ) -> Value {
        json!({
            "manager": manager,
            "operation": operation,
            "apiVersion": api_version,
            "time": time,
            "fieldsType": "FieldsV1",
            "fieldsV1": fields,
        })
    }

    fn config_map(data: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm1"}, "data": data})
    }

    #[test]
    fn create_by_apply_owns_exactly_the_applied_fields() {
        let applied = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "cm1", "labels": {"app": "web"}},
            "data": {"a": "1", "b": "2"}
        });
        let created = apply_ok(None, &applied, "kubectl", T1);
        assert_eq!(
            created,
            json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": "cm1",
                    "labels": {"app": "web"},
                    "managedFields": [entry("kubectl", "Apply", "v1", T1, json!({
                        "f:data": {"f:a": {}, "f:b": {}},
                        "f:metadata": {"f:labels": {"f:app": {}}}
                    }))]
                },
                "data": {"a": "1", "b": "2"}
            })
        );
    }

    #[test]
    fn reapplying_without_a_field_removes_it() {
        let first = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "cm1", "labels": {"app": "web"}},
            "data": {"a": "1", "b": "2"}
        });
        let live = apply_ok(None, &first, "kubectl", T1);

        let mut second = first.clone();
        second["data"] = json!({"a": "1"});
        let live = apply_ok(Some(&live), &second, "kubectl", T2);
        assert_eq!(live["data"], json!({"a": "1"}));
        assert_eq!(
            *managed_fields(&live),
            json!([entry(
                "kubectl",
                "Apply",
                "v1",
                T2,
                json!({
                    "f:data": {"f:a": {}},
                    "f:metadata": {"f:labels": {"f:app": {}}}
                })
            )])
        );

        // Dropping everything removes the emptied maps and then the empty entry.
        let bare = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm1"}});
        let live = apply_ok(Some(&live), &bare, "kubectl", T3);
        assert_eq!(live, bare);
    }

    #[test]
    fn equal_values_are_shared_and_survive_one_owner_leaving() {
        let live = apply_ok(None, &config_map(json!({"a": "1"})), "alpha", T1);
        let live = apply_ok(Some(&live), &config_map(json!({"a": "1"})), "beta", T2);
        let shared = json!({"f:data": {"f:a": {}}});
        assert_eq!(
            *managed_fields(&live),
            json!([
                entry("alpha", "Apply", "v1", T1, shared.clone()),
                entry("beta", "Apply", "v1", T2, shared.clone()),
            ])
        );

        let bare = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm1"}});
        let live = apply_ok(Some(&live), &bare, "alpha", T3);
        assert_eq!(live["data"], json!({"a": "1"}));
        assert_eq!(
            *managed_fields(&live),
            json!([entry("beta", "Apply", "v1", T2, shared)])
        );
    }

    #[test]
    fn changing_a_field_another_manager_owns_is_a_conflict() {
        let created = update_at(None, &config_map(json!({"a": "x"})), "other-ctrl", T1);
        assert_eq!(
            *managed_fields(&created),
            json!([entry(
                "other-ctrl",
                "Update",
                "v1",
                T1,
                json!({"f:data": {".": {}, "f:a": {}}})
            )])
        );

        let error = apply_at(
            Some(&created),
            &config_map(json!({"a": "y"})),
            "kubectl",
            false,
            None,
            T2,
        )
        .unwrap_err();
        let expected = Conflict {
            manager: "other-ctrl".into(),
            operation: ManagedFieldsOperation::Update,
            api_version: "v1".into(),
            subresource: None,
            field: ".data.a".into(),
        };
        assert_eq!(error, ApplyError::Conflicts(vec![expected.clone()]));
        assert_eq!(
            error.to_string(),
            r#"Apply failed with 1 conflict: conflict with "other-ctrl" using v1: .data.a"#
        );
        assert_eq!(
            expected.cause_message(),
            r#"conflict with "other-ctrl" using v1"#
        );

        // The same value is no conflict: both own it.
        let shared = apply_ok(
            Some(&created),
            &config_map(json!({"a": "x"})),
            "kubectl",
            T2,
        );
        assert_eq!(shared["data"], json!({"a": "x"}));
        assert_eq!(managed_fields(&shared).as_array().unwrap().len(), 2);
    }

    #[test]
    fn several_conflicts_are_listed_per_manager() {
        let live = update_at(
            None,
            &config_map(json!({"a": "x", "b": "x"})),
            "other-ctrl",
            T1,
        );
        let mut labelled = config_map(json!({}));
        labelled["metadata"]["labels"] = json!({"team": "a"});
        labelled.as_object_mut().unwrap().remove("data");
        let live = apply_ok(Some(&live), &labelled, "alpha", T2);

        let mut mine = config_map(json!({"a": "y", "b": "y"}));
        mine["metadata"]["labels"] = json!({"team": "k"});
        let Err(ApplyError::Conflicts(conflicts)) =
            apply_at(Some(&live), &mine, "kubectl", false, None, T3)
        else {
            panic!("expected conflicts");
        };
        let fields: Vec<(&str, &str)> = conflicts
            .iter()
            .map(|c| (c.manager.as_str(), c.field.as_str()))
            .collect();
        assert_eq!(
            fields,
            [
                ("alpha", ".metadata.labels.team"),
                ("other-ctrl", ".data.a"),
                ("other-ctrl", ".data.b")
            ]
        );
        assert_eq!(
            conflict_message(&conflicts),
            "Apply failed with 3 conflicts: conflicts with \"alpha\":\n- .metadata.labels.team\n\
             conflicts with \"other-ctrl\" using v1:\n- .data.a\n- .data.b"
        );
    }

    #[test]
    fn force_takes_ownership() {
        let created = update_at(None, &config_map(json!({"a": "x"})), "other-ctrl", T1);
        let forced = apply_at(
            Some(&created),
            &config_map(json!({"a": "y"})),
            "kubectl",
            true,
            None,
            T2,
        )
        .unwrap();
        assert_eq!(forced["data"], json!({"a": "y"}));
        // other-ctrl still owns the map it created (now a bare member), not the value.
        assert_eq!(
            *managed_fields(&forced),
            json!([
                entry("kubectl", "Apply", "v1", T2, json!({"f:data": {"f:a": {}}})),
                entry("other-ctrl", "Update", "v1", T1, json!({"f:data": {}})),
            ])
        );
    }

    #[test]
    fn nulls_are_neither_stored_nor_owned() {
        let foo = |spec: Value| json!({"apiVersion": "example.com/v1", "kind": "Foo", "metadata": {"name": "f"}, "spec": spec});
        let live = apply_ok(None, &foo(json!({"size": 3, "name": null})), "ctrl", T1);
        assert_eq!(live["spec"], json!({"size": 3}));
        assert_eq!(
            *managed_fields(&live),
            json!([entry(
                "ctrl",
                "Apply",
                "example.com/v1",
                T1,
                json!({"f:spec": {"f:size": {}}})
            )])
        );

        let live = apply_ok(
            Some(&live),
            &foo(json!({"size": 3, "name": "n"})),
            "ctrl",
            T2,
        );
        assert_eq!(live["spec"], json!({"size": 3, "name": "n"}));
        // Null now: the field it owned alone goes away.
        let live = apply_ok(
            Some(&live),
            &foo(json!({"size": 3, "name": null})),
            "ctrl",
            T3,
        );
        assert_eq!(live["spec"], json!({"size": 3}));

        // A value someone else set is left alone by a null, without a conflict.
        let mut edited = live.clone();
        edited["spec"]["name"] = json!("u");
        let live = update_at(Some(&live), &edited, "user", T4);
        let after = apply_ok(
            Some(&live),
            &foo(json!({"size": 3, "name": null})),
            "ctrl",
            T5,
        );
        assert_eq!(after, live);
        assert_eq!(
            *managed_fields(&after),
            json!([
                entry(
                    "ctrl",
                    "Apply",
                    "example.com/v1",
                    T3,
                    json!({"f:spec": {"f:size": {}}})
                ),
                entry(
                    "user",
                    "Update",
                    "example.com/v1",
                    T4,
                    json!({"f:spec": {"f:name": {}}})
                ),
            ])
        );
    }

    #[test]
    fn a_field_stays_while_someone_owns_something_inside_it() {
        let foo = json!({"apiVersion": "example.com/v1", "kind": "Foo", "metadata": {"name": "f"}});
        let mut with_spec = foo.clone();
        with_spec["spec"] = json!({"name": null});
        let live = apply_ok(None, &with_spec, "ctrl", T1);
        assert_eq!(live["spec"], json!({}));
        assert_eq!(
            *managed_fields(&live),
            json!([entry(
                "ctrl",
                "Apply",
                "example.com/v1",
                T1,
                json!({"f:spec": {}})
            )])
        );

        let mut edited = live.clone();
        edited["spec"]["size"] = json!(3);
        let live = update_at(Some(&live), &edited, "user", T2);
        let live = apply_ok(Some(&live), &foo, "ctrl", T3);
        assert_eq!(live["spec"], json!({"size": 3}));
        assert_eq!(
            *managed_fields(&live),
            json!([entry(
                "user",
                "Update",
                "example.com/v1",
                T2,
                json!({"f:spec": {"f:size": {}}})
            )])
        );
    }

    fn deployment(spec: Value) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}, "spec": spec})
    }

    fn with_containers(containers: Value) -> Value {
        deployment(json!({"template": {"spec": {"containers": containers}}}))
    }

    fn containers_fields(items: Value) -> Value {
        json!({"f:spec": {"f:template": {"f:spec": {"f:containers": items}}}})
    }

    #[test]
    fn associative_list_items_are_owned_per_key() {
        let a_config = deployment(json!({
            "replicas": 1,
            "template": {"spec": {"containers": [{"name": "c", "image": "nginx:1"}]}}
        }));
        let live = apply_ok(None, &a_config, "a", T1);
        assert_eq!(
            *managed_fields(&live),
            json!([entry(
                "a",
                "Apply",
                "apps/v1",
                T1,
                json!({"f:spec": {
                    "f:replicas": {},
                    "f:template": {"f:spec": {"f:containers": {
                        "k:{\"name\":\"c\"}": {".": {}, "f:image": {}, "f:name": {}}
                    }}}
                }})
            )])
        );

        let live = apply_ok(
            Some(&live),
            &with_containers(json!([{"name": "d", "image": "busybox"}])),
            "b",
            T2,
        );
        assert_eq!(
            live["spec"]["template"]["spec"]["containers"],
            json!([{"name": "c", "image": "nginx:1"}, {"name": "d", "image": "busybox"}])
        );
        let b_fields = containers_fields(json!({
            "k:{\"name\":\"d\"}": {".": {}, "f:image": {}, "f:name": {}}
        }));
        assert_eq!(
            managed_fields(&live)[1],
            entry("b", "Apply", "apps/v1", T2, b_fields.clone())
        );

        // b may not change a's container.
        let error = apply_at(
            Some(&live),
            &with_containers(json!([
                {"name": "c", "image": "nginx:2"},
                {"name": "d", "image": "busybox"}
            ])),
            "b",
            false,
            None,
            T3,
        )
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            r#"Apply failed with 1 conflict: conflict with "a": .spec.template.spec.containers[name="c"].image"#
        );

        // An update takes c's image from a, which keeps the item and its name.
        let mut edited = live.clone();
        edited["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:2");
        let live = update_at(Some(&live), &edited, "kubectl-set", T3);
        assert_eq!(
            *managed_fields(&live),
            json!([
                entry(
                    "a",
                    "Apply",
                    "apps/v1",
                    T1,
                    json!({"f:spec": {
                        "f:replicas": {},
                        "f:template": {"f:spec": {"f:containers": {
                            "k:{\"name\":\"c\"}": {".": {}, "f:name": {}}
                        }}}
                    }})
                ),
                entry("b", "Apply", "apps/v1", T2, b_fields.clone()),
                entry(
                    "kubectl-set",
                    "Update",
                    "apps/v1",
                    T3,
                    containers_fields(json!({
                        "k:{\"name\":\"c\"}": {"f:image": {}}
                    }))
                ),
            ])
        );

        // a drops its container: nobody owns the item itself, so it goes, image and all,
        // and kubectl-set's entry with it.
        let live = apply_ok(Some(&live), &deployment(json!({"replicas": 2})), "a", T4);
        assert_eq!(live["spec"]["replicas"], json!(2));
        assert_eq!(
            live["spec"]["template"]["spec"]["containers"],
            json!([{"name": "d", "image": "busybox"}])
        );
        assert_eq!(
            *managed_fields(&live),
            json!([
                entry("b", "Apply", "apps/v1", T2, b_fields),
                entry(
                    "a",
                    "Apply",
                    "apps/v1",
                    T4,
                    json!({"f:spec": {"f:replicas": {}}})
                ),
            ])
        );
    }

    fn with_finalizers(finalizers: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm1", "finalizers": finalizers}})
    }

    #[test]
    fn set_lists_are_owned_per_value() {
        let live = apply_ok(None, &with_finalizers(json!(["a", "b"])), "alpha", T1);
        let live = apply_ok(Some(&live), &with_finalizers(json!(["c"])), "beta", T2);
        assert_eq!(live["metadata"]["finalizers"], json!(["a", "b", "c"]));
        assert_eq!(
            *managed_fields(&live),
            json!([
                entry(
                    "alpha",
                    "Apply",
                    "v1",
                    T1,
                    json!({"f:metadata": {"f:finalizers": {"v:\"a\"": {}, "v:\"b\"": {}}}})
                ),
                entry(
                    "beta",
                    "Apply",
                    "v1",
                    T2,
                    json!({"f:metadata": {"f:finalizers": {"v:\"c\"": {}}}})
                ),
            ])
        );

        let live = apply_ok(Some(&live), &with_finalizers(json!(["a"])), "alpha", T3);
        assert_eq!(live["metadata"]["finalizers"], json!(["a", "c"]));
        assert_eq!(
            managed_fields(&live)[1],
            entry(
                "alpha",
                "Apply",
                "v1",
                T3,
                json!({"f:metadata": {"f:finalizers": {"v:\"a\"": {}}}})
            )
        );

        // Shared items follow the applied order.
        let live = apply_ok(Some(&live), &with_finalizers(json!(["c", "a"])), "beta", T4);
        assert_eq!(live["metadata"]["finalizers"], json!(["c", "a"]));
    }

    #[test]
    fn updates_own_what_they_change_and_take_it_from_appliers() {
        let applied = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "cm1", "labels": {"app": "web"}},
            "data": {"a": "1"}
        });
        let live = apply_ok(None, &applied, "kubectl", T1);

        let mut edited = live.clone();
        edited["data"] = json!({"a": "2", "c": "3"});
        let live = update_at(Some(&live), &edited, "kubectl-edit", T2);
        assert_eq!(
            *managed_fields(&live),
            json!([
                entry(
                    "kubectl",
                    "Apply",
                    "v1",
                    T1,
                    json!({"f:metadata": {"f:labels": {"f:app": {}}}})
                ),
                entry(
                    "kubectl-edit",
                    "Update",
                    "v1",
                    T2,
                    json!({"f:data": {"f:a": {}, "f:c": {}}})
                ),
            ])
        );

        // A write that changes nothing leaves the entries alone.
        let unchanged = update_at(Some(&live), &live, "kubectl-edit", T3);
        assert_eq!(unchanged, live);

        // Removing the label takes it from the applier, whose entry is then empty.
        let mut edited = live.clone();
        edited["metadata"].as_object_mut().unwrap().remove("labels");
        let live = update_at(Some(&live), &edited, "kubectl-edit", T4);
        assert_eq!(
            *managed_fields(&live),
            json!([entry(
                "kubectl-edit",
                "Update",
                "v1",
                T2,
                json!({"f:data": {"f:a": {}, "f:c": {}}})
            )])
        );
    }

    #[test]
    fn creation_by_update_owns_the_maps_it_added() {
        let mut new = config_map(json!({"a": "1"}));
        new["metadata"]["labels"] = json!({"app": "web"});
        new["metadata"]["uid"] = json!("u-1");
        let created = update_at(None, &new, "kubectl-create", T1);
        assert_eq!(
            *managed_fields(&created),
            json!([entry(
                "kubectl-create",
                "Update",
                "v1",
                T1,
                json!({
                    "f:data": {".": {}, "f:a": {}},
                    "f:metadata": {"f:labels": {".": {}, "f:app": {}}}
                })
            )])
        );
    }

    #[test]
    fn managed_fields_sent_as_one_empty_entry_are_reset() {
        let live = apply_ok(None, &config_map(json!({"a": "1"})), "kubectl", T1);
        let mut new = live.clone();
        new["metadata"]["managedFields"] = json!([{}]);
        new["data"]["b"] = json!("2");
        let updated = update_at(Some(&live), &new, "editor", T2);
        assert_eq!(
            *managed_fields(&updated),
            json!([entry(
                "editor",
                "Update",
                "v1",
                T2,
                json!({"f:data": {"f:b": {}}})
            )])
        );

        // Writes to a subresource cannot touch managed fields.
        let schema = BuiltinSchema::for_kind("ConfigMap");
        record_update(
            Some(&live),
            &mut new,
            "editor",
            Some("status"),
            "v1",
            T2,
            &schema,
        );
        let mut editor = entry("editor", "Update", "v1", T2, json!({"f:data": {"f:b": {}}}));
        editor["subresource"] = json!("status");
        assert_eq!(
            *managed_fields(&new),
            json!([
                entry("kubectl", "Apply", "v1", T1, json!({"f:data": {"f:a": {}}})),
                editor
            ])
        );
    }

    #[test]
    fn status_applies_are_recorded_with_their_subresource() {
        let live = apply_ok(None, &deployment(json!({"replicas": 1})), "a", T1);
        let status = json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web"},
            "status": {"replicas": 1, "conditions": [{"type": "Available", "status": "True"}]}
        });
        let live = apply_at(Some(&live), &status, "ctrl", false, Some("status"), T2).unwrap();
        assert_eq!(live["status"], status["status"]);
        let mut status_entry = entry(
            "ctrl",
            "Apply",
            "apps/v1",
            T2,
            json!({"f:status": {
                "f:conditions": {"k:{\"type\":\"Available\"}": {".": {}, "f:status": {}, "f:type": {}}},
                "f:replicas": {}
            }}),
        );
        status_entry["subresource"] = json!("status");
        assert_eq!(
            *managed_fields(&live),
            json!([
                entry(
                    "a",
                    "Apply",
                    "apps/v1",
                    T1,
                    json!({"f:spec": {"f:replicas": {}}})
                ),
                status_entry
            ])
        );

        // The same manager applying to the main resource has an entry of its own, so the
        // status it applied through /status is not pruned.
        let main = apply_ok(Some(&live), &deployment(json!({"replicas": 1})), "ctrl", T3);
        assert_eq!(main["status"], status["status"]);
        assert_eq!(managed_fields(&main).as_array().unwrap().len(), 3);

        let mut other = status.clone();
        other["status"]["replicas"] = json!(2);
        let error = apply_at(Some(&live), &other, "other", false, Some("status"), T3).unwrap_err();
        assert_eq!(
            error.to_string(),
            r#"Apply failed with 1 conflict: conflict with "ctrl" with subresource "status": .status.replicas"#
        );
    }

    #[test]
    fn more_than_ten_update_entries_fold_the_oldest() {
        let entries: Vec<Value> = (0..11)
            .map(|i| {
                entry(
                    &format!("m{i:02}"),
                    "Update",
                    "v1",
                    &format!("2024-05-01T10:00:{i:02}Z"),
                    json!({"f:data": {format!("f:k{i:02}"): {}}}),
                )
            })
            .collect();
        let data: Map<String, Value> = (0..11).map(|i| (format!("k{i:02}"), json!("v"))).collect();
        let mut live = config_map(Value::Object(data));
        live["metadata"]["managedFields"] = Value::Array(entries);

        let mut new = live.clone();
        new["data"]["k11"] = json!("v");
        let updated = update_at(Some(&live), &new, "m11", "2024-05-01T10:00:11Z");
        let managers: Vec<&str> = managed_fields(&updated)
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["manager"].as_str().unwrap())
            .collect();
        assert_eq!(
            managers,
            [
                "ancient-changes",
                "m03",
                "m04",
                "m05",
                "m06",
                "m07",
                "m08",
                "m09",
                "m10",
                "m11"
            ]
        );
        assert_eq!(
            managed_fields(&updated)[0],
            entry(
                "ancient-changes",
                "Update",
                "v1",
                "2024-05-01T10:00:02Z",
                json!({"f:data": {"f:k00": {}, "f:k01": {}, "f:k02": {}}})
            )
        );
    }

    #[test]
    fn unusable_inputs_are_invalid() {
        let mut live = config_map(json!({"a": "1"}));
        live["metadata"]["managedFields"] = json!([{"manager": "x", "operation": "Patch", "apiVersion": "v1", "fieldsType": "FieldsV1"}]);
        assert_eq!(
            apply_at(Some(&live), &config_map(json!({})), "k", false, None, T1),
            Err(ApplyError::Invalid(
                "failed to decode managed fields: operation must be `Apply` or `Update`".into()
            ))
        );

        let mut with_fields = config_map(json!({}));
        with_fields["metadata"]["managedFields"] = json!([]);
        assert_eq!(
            apply_at(None, &with_fields, "k", false, None, T1),
            Err(ApplyError::Invalid(
                "metadata.managedFields must be nil".into()
            ))
        );

        let duplicated = with_containers(json!([{"name": "c"}, {"name": "c"}]));
        assert_eq!(
            apply_at(None, &duplicated, "k", false, None, T1),
            Err(ApplyError::Invalid(
                "failed to create typed patch object: .spec.template.spec.containers: \
                 duplicate entries for key [name=\"c\"]"
                    .into()
            ))
        );
        let keyless = with_containers(json!([{"image": "x"}]));
        assert_eq!(
            apply_at(None, &keyless, "k", false, None, T1),
            Err(ApplyError::Invalid(
                "failed to create typed patch object: .spec.template.spec.containers: element 0: \
                 associative list with keys has an element that omits all key fields [\"name\"] \
                 (and doesn't have default values for any key fields)"
                    .into()
            ))
        );
        let schema = BuiltinSchema;
        let not_an_object = apply(&ApplyRequest {
            live: None,
            applied: &json!([]),
            manager: "k",
            force: false,
            subresource: None,
            api_version: "v1",
            now: T1,
            schema: &schema,
        });
        assert_eq!(
            not_an_object,
            Err(ApplyError::Invalid(
                "the applied configuration must be a JSON object".into()
            ))
        );
    }

    /// A Deployment configuration drawn from a small vocabulary, so that two draws overlap.
    fn deployment_config() -> impl Strategy<Value = Value> {
        let labels = prop::collection::btree_map(
            prop::sample::select(vec!["app", "tier", "team"]),
            prop::option::of(prop::sample::select(vec!["a", "b"])),
            0..3,
        );
        let finalizers = prop::sample::subsequence(vec!["f1", "f2", "f3"], 0..=3).prop_shuffle();
        let replicas = prop::option::of(1..3_i64);
        let containers = prop::sample::subsequence(vec!["c", "d", "e"], 0..=3)
            .prop_shuffle()
            .prop_flat_map(|names| {
                let count = names.len();
                (
                    Just(names),
                    prop::collection::vec(
                        (
                            prop::sample::select(vec!["i1", "i2"]),
                            prop::option::of(prop::sample::select(vec!["x", "y"])),
                        ),
                        count,
                    ),
                )
            });
        (labels, finalizers, replicas, containers).prop_map(
            |(labels, finalizers, replicas, (names, details))| {
                let containers: Vec<Value> = names
                    .iter()
                    .zip(details)
                    .map(|(name, (image, env))| match env {
                        Some(value) => json!({"name": name, "image": image, "env": [{"name": "E", "value": value}]}),
                        None => json!({"name": name, "image": image, "resources": null}),
                    })
                    .collect();
                json!({
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "metadata": {"name": "web", "labels": labels, "finalizers": finalizers},
                    "spec": {"replicas": replicas, "template": {"spec": {"containers": containers}}}
                })
            },
        )
    }

    proptest! {
        #[test]
        fn applying_the_same_configuration_twice_changes_nothing(config in deployment_config()) {
            let first = apply_at(None, &config, "a", false, None, T1).unwrap();
            let second = apply_at(Some(&first), &config, "a", false, None, T2).unwrap();
            prop_assert_eq!(second, first);
        }

        #[test]
        fn reapplying_after_another_manager_changes_nothing(
            a_config in deployment_config(),
            b_config in deployment_config(),
        ) {
            let live = apply_at(None, &a_config, "a", false, None, T1).unwrap();
            let live = apply_at(Some(&live), &b_config, "b", true, None, T2).unwrap();
            // b now owns every value it applies, so even without force nothing conflicts.
            let again = apply_at(Some(&live), &b_config, "b", false, None, T3).unwrap();
            prop_assert_eq!(again, live);
        }
    }
}
