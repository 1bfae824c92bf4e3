//! Kubernetes strategic merge patch (`application/strategic-merge-patch+json`), the format
//! kubectl sends for built-in kinds on `apply`, `edit`, `patch`, `label` and `annotate`.
//!
//! It is JSON merge patch (maps merge, `null` deletes) plus per-field list strategies and
//! in-band directives. The rules follow apimachinery `pkg/util/strategicpatch/patch.go`
//! (`mergeMap` and friends, with the server's options `MergeParallelList` and
//! `IgnoreUnmatchedNulls`):
//!
//! - Lists are replaced unless the [`PatchSchema`] says otherwise. [`ListStrategy::MergeByKey`]
//!   merges elements with equal merge-key values recursively and adds the others;
//!   [`ListStrategy::MergePrimitives`] takes the union (duplicates dropped).
//! - Element order after a merge is upstream's: items named in the patch follow the patch's
//!   order, items only on the server keep theirs, and a server-only item goes before a patch
//!   item only when it also came before it in the live list. So an item the live list did
//!   not have lands *before* the remaining server-only items, not at the end (upstream
//!   `mergeSortedSlice`; kustomize documented the same "prepend" behaviour).
//! - `$setElementOrder/<list>` gives the final order of the items it names with the same
//!   interleaving rule for the others, and is rejected when the patch list's order
//!   disagrees with it. When the same patch also deleted elements of a merge-keyed list,
//!   the live order it interleaves against is upstream's in-place-edited one (survivors,
//!   then as many new items as were deleted), so the outcome matches upstream's tests.
//! - `$patch: replace` in a map replaces the map with the rest of the patch map;
//!   `$patch: delete` removes the map; `$patch: merge` is the default. In a merge-keyed list,
//!   an element `{"$patch": "delete", <key>: v}` deletes the elements with that key and an
//!   element `{"$patch": "replace"}` replaces the whole list with the other elements.
//! - `$deleteFromPrimitiveList/<list>: [..]` removes those values from a list.
//! - `$retainKeys: [..]` drops the map's other keys before merging; every non-null key the
//!   patch sets must be listed. Like upstream, it is honoured wherever it appears.
//! - Directive keys are never stored, and the `null`s of values taken from the patch are
//!   dropped at any depth (upstream drops them when decoding into Go types).
//!
//! Deviations from upstream, all in corners kubectl does not produce:
//!
//! - A value the live object does not have is merged into an empty value, so directives
//!   nested inside it take effect (`{"$patch": "replace", ..}` keeps its content; upstream
//!   drops the key) and nested `$setElementOrder/..` keys are applied rather than stored.
//! - `$patch: delete` on a map removes the key; upstream leaves `{}` there, which its Go
//!   types then drop or default.
//! - `$patch: merge` on a map is accepted as a no-op; upstream rejects it.
//! - `$deleteFromPrimitiveList` runs before the other keys of the same map (upstream's order
//!   is Go map order, i.e. random); it only matters if a value is both added and deleted.
//! - Malformed directives are [`PatchError::Malformed`] (400); upstream answers 400 for some
//!   (retainKeys, setElementOrder and deleteFromPrimitiveList formats) and 500 for others
//!   (unknown `$patch`, missing merge key). Element types that do not fit the live list are
//!   [`PatchError::CannotApply`] (422).

use std::collections::{HashMap, HashSet, VecDeque};

use serde_json::{Map, Value};

use super::PatchError;

const DIRECTIVE_MARKER: &str = "$patch";
const RETAIN_KEYS_DIRECTIVE: &str = "$retainKeys";
const SET_ELEMENT_ORDER_PREFIX: &str = "$setElementOrder";
const DELETE_FROM_PRIMITIVE_LIST_PREFIX: &str = "$deleteFromPrimitiveList";

/// How a list field is patched: the `x-kubernetes-patch-strategy` and
/// `x-kubernetes-patch-merge-key` of the field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListStrategy {
    /// Atomic: the patch's list replaces the live one (the default).
    Replace,
    /// `patchStrategy: merge` with `patchMergeKey`: elements are maps matched by this key.
    MergeByKey(&'static str),
    /// `patchStrategy: merge` on a list of scalars (e.g. `metadata.finalizers`): a set union.
    MergePrimitives,
}

/// How a map (object) field is patched.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MapStrategy {
    /// Merge key by key (the default).
    #[default]
    Merge,
    /// `patchStrategy: replace`: the patch's map replaces the live one.
    Replace,
}

/// Patch metadata for the fields of one kind.
///
/// `path` is the sequence of object keys from the document root to the field; list
/// elements add no segment. A Deployment's container env is
/// `["spec", "template", "spec", "containers", "env"]`.
pub trait PatchSchema {
    /// The strategy for the list at `path`.
    fn list_strategy(&self, path: &[&str]) -> ListStrategy;

    /// The strategy for the map at `path`; almost every map merges.
    fn map_strategy(&self, path: &[&str]) -> MapStrategy {
        let _ = path;
        MapStrategy::Merge
    }
}

/// Every list is atomic and every map merges: strategic merge patch with merge-patch
/// semantics, for kinds without patch metadata (directives are still honoured).
#[derive(Clone, Copy, Debug, Default)]
pub struct MergePatchSchema;

impl PatchSchema for MergePatchSchema {
    fn list_strategy(&self, _path: &[&str]) -> ListStrategy {
        ListStrategy::Replace
    }
}

/// Patch metadata of the Kubernetes built-in kinds, taken from the `patchStrategy` and
/// `patchMergeKey` tags of `k8s.io/api` and `k8s.io/apimachinery` (`metav1.ObjectMeta`).
///
/// A field is recognised by its key and its parent's key, so the rules apply wherever the
/// type is embedded: a PodSpec's `containers` is merged by `name` at `spec.containers`
/// (Pod), `spec.template.spec.containers` (Deployment, ReplicaSet, StatefulSet, DaemonSet,
/// Job) and `spec.jobTemplate.spec.template.spec.containers` (CronJob) alike.
///
/// | Field (parent key → key) | Strategy |
/// |---|---|
/// | `metadata` → `finalizers` | merge primitives |
/// | `metadata` → `ownerReferences` | merge by `uid` |
/// | `spec` → `containers`, `initContainers`, `ephemeralContainers` | merge by `name` |
/// | container → `env` | merge by `name` |
/// | container → `ports` | merge by `containerPort` |
/// | container → `volumeMounts` / `volumeDevices` | merge by `mountPath` / `devicePath` |
/// | `spec` → `volumes`, `imagePullSecrets`, `schedulingGates`, `resourceClaims` | merge by `name` |
/// | `spec` → `hostAliases` / `topologySpreadConstraints` | merge by `ip` / `topologyKey` |
/// | `status` → `conditions` (not CustomResourceDefinition) | merge by `type` |
/// | `status` → `podIPs`, `hostIPs` | merge by `ip` |
/// | container status → `volumeMounts` / `allocatedResourcesStatus` | merge by `mountPath` / `name` |
/// | `status` → `resourceClaimStatuses` | merge by `name` |
/// | Service `spec.ports` | merge by `port` |
/// | Node `spec.podCIDRs` / `status.addresses` | merge primitives / merge by `type` |
/// | ServiceAccount `secrets` | merge by `name` |
/// | webhook configuration `webhooks`; any `matchConditions`; policy `spec.variables` | merge by `name` |
/// | CSINode `spec.drivers` | merge by `name` |
/// | PodDisruptionBudget `spec.selector` (map) | replace |
///
/// Everything else is atomic (lists) or merged (maps). `BuiltinSchema` decides by path
/// alone; the kind-specific rows then apply wherever their path matches, except the
/// PodDisruptionBudget selector (a Deployment's `spec.selector` merges). For those rows to
/// be exact, use [`BuiltinSchema::for_kind`].
#[derive(Clone, Copy, Debug, Default)]
pub struct BuiltinSchema;

impl BuiltinSchema {
    /// The rules for one kind (e.g. `"Service"`), which settles the kind-specific fields.
    pub fn for_kind(kind: &str) -> BuiltinKindSchema<'_> {
        BuiltinKindSchema { kind }
    }
}

/// [`BuiltinSchema`] for a known kind; see [`BuiltinSchema::for_kind`].
#[derive(Clone, Copy, Debug)]
pub struct BuiltinKindSchema<'a> {
    kind: &'a str,
}

impl PatchSchema for BuiltinSchema {
    fn list_strategy(&self, path: &[&str]) -> ListStrategy {
        builtin_list_strategy(path, None)
    }
}

impl PatchSchema for BuiltinKindSchema<'_> {
    fn list_strategy(&self, path: &[&str]) -> ListStrategy {
        builtin_list_strategy(path, Some(self.kind))
    }

    fn map_strategy(&self, path: &[&str]) -> MapStrategy {
        if self.kind == "PodDisruptionBudget" && path == ["spec", "selector"] {
            MapStrategy::Replace
        } else {
            MapStrategy::Merge
        }
    }
}

const CONTAINER_LISTS: [&str; 3] = ["containers", "initContainers", "ephemeralContainers"];
const CONTAINER_STATUS_LISTS: [&str; 3] = [
    "containerStatuses",
    "initContainerStatuses",
    "ephemeralContainerStatuses",
];

/// The table of [`BuiltinSchema`]. `kind` is `None` when unknown, which lets every
/// kind-specific rule apply by path.
fn builtin_list_strategy(path: &[&str], kind: Option<&str>) -> ListStrategy {
    use ListStrategy::{MergeByKey, MergePrimitives, Replace};
    let may_be = |wanted: &str| kind.is_none_or(|k| k == wanted);
    let Some((&field, parents)) = path.split_last() else {
        return Replace;
    };
    let parent = parents.last().copied().unwrap_or("");
    let in_container = CONTAINER_LISTS.contains(&parent);
    let in_container_status = CONTAINER_STATUS_LISTS.contains(&parent);
    match field {
        "finalizers" if parent == "metadata" => MergePrimitives,
        "ownerReferences" if parent == "metadata" => MergeByKey("uid"),
        "containers" | "initContainers" | "ephemeralContainers" if parent == "spec" => {
            MergeByKey("name")
        }
        "env" if in_container => MergeByKey("name"),
        "ports" if in_container => MergeByKey("containerPort"),
        "ports" if path == ["spec", "ports"] && may_be("Service") => MergeByKey("port"),
        "volumeMounts" if in_container || in_container_status => MergeByKey("mountPath"),
        "volumeDevices" if in_container => MergeByKey("devicePath"),
        "allocatedResourcesStatus" if in_container_status => MergeByKey("name"),
        "volumes" | "imagePullSecrets" | "schedulingGates" | "resourceClaims"
            if parent == "spec" =>
        {
            MergeByKey("name")
        }
        "hostAliases" if parent == "spec" => MergeByKey("ip"),
        "topologySpreadConstraints" if parent == "spec" => MergeByKey("topologyKey"),
        // CRD conditions have no patch strategy upstream, unlike every other status.
        "conditions" if parent == "status" && kind != Some("CustomResourceDefinition") => {
            MergeByKey("type")
        }
        "podIPs" | "hostIPs" if parent == "status" => MergeByKey("ip"),
        "resourceClaimStatuses" if parent == "status" => MergeByKey("name"),
        "podCIDRs" if path == ["spec", "podCIDRs"] && may_be("Node") => MergePrimitives,
        "addresses" if path == ["status", "addresses"] && may_be("Node") => MergeByKey("type"),
        "secrets" if path == ["secrets"] && may_be("ServiceAccount") => MergeByKey("name"),
        "webhooks" if path == ["webhooks"] => MergeByKey("name"),
        "matchConditions" => MergeByKey("name"),
        "variables" if parent == "spec" => MergeByKey("name"),
        "drivers" if path == ["spec", "drivers"] && may_be("CSINode") => MergeByKey("name"),
        _ => Replace,
    }
}

/// Applies a strategic merge patch to `target` and returns the patched document.
///
/// Both must be JSON objects. `schema` supplies the list strategies, usually
/// [`BuiltinSchema`]. Upstream answers 415 for strategic merge patches on custom resources;
/// [`MergePatchSchema`] is for callers that would rather apply them with merge semantics.
///
/// # Errors
///
/// [`PatchError::Malformed`] for a patch that is not an object or misuses a directive
/// (unknown `$patch`, missing merge key, `$setElementOrder` disagreeing with the patch
/// list, a key set outside `$retainKeys`); [`PatchError::CannotApply`] when the target is
/// not an object or a live list cannot be merged the way the schema says.
pub fn apply_strategic_merge_patch(
    target: &Value,
    patch: &Value,
    schema: &dyn PatchSchema,
) -> Result<Value, PatchError> {
    let Value::Object(patch) = patch else {
        return Err(PatchError::Malformed(
            "invalid JSON document: a strategic merge patch must be a JSON object".into(),
        ));
    };
    let Value::Object(original) = target else {
        return Err(PatchError::CannotApply(
            "invalid JSON document: the object to patch is not a JSON object".into(),
        ));
    };
    let mut merger = Merger {
        schema,
        path: Vec::new(),
    };
    // `$patch: delete` at the root leaves an empty object, as upstream does.
    let merged = merger.merge_map(original.clone(), patch)?;
    Ok(Value::Object(merged.unwrap_or_default()))
}

fn malformed(message: impl Into<String>) -> PatchError {
    PatchError::Malformed(message.into())
}

fn cannot_apply(message: impl Into<String>) -> PatchError {
    PatchError::CannotApply(message.into())
}

fn is_directive_key(key: &str) -> bool {
    key == DIRECTIVE_MARKER
        || key == RETAIN_KEYS_DIRECTIVE
        || key.starts_with(SET_ELEMENT_ORDER_PREFIX)
        || key.starts_with(DELETE_FROM_PRIMITIVE_LIST_PREFIX)
}

/// The list name in `<prefix>/<name>`, or `None` when the key does not have that shape.
fn directive_list_name<'k>(key: &'k str, prefix: &str) -> Option<&'k str> {
    key.strip_prefix(prefix)?.strip_prefix('/')
}

fn unknown_patch_type(directive: &Value, map: &Map<String, Value>) -> PatchError {
    let shown = directive
        .as_str()
        .map_or_else(|| directive.to_string(), str::to_string);
    malformed(format!(
        "unknown patch type: {shown} in map: {}",
        Value::Object(map.clone())
    ))
}

fn no_merge_key(map: &Map<String, Value>, key: &str) -> PatchError {
    malformed(format!(
        "map: {} does not contain declared merge key: {key}",
        Value::Object(map.clone())
    ))
}

/// What identifies a list element for matching and ordering: the merge-key value for
/// merge-keyed lists, the element itself otherwise. `None` is an element lacking the key.
fn identity(item: &Value, key: Option<&str>) -> Option<Value> {
    match key {
        Some(k) => item.get(k).cloned(),
        None => Some(item.clone()),
    }
}

/// A hashable stand-in for a JSON value: equal values (as `Value`'s `==` sees them) get
/// equal keys. Element identities are looked up through these, so merging lists of `n`
/// elements costs O(n), not O(n²): a 3 MiB patch list against a large live list would
/// otherwise keep a CPU busy for hours.
fn value_key(value: &Value) -> String {
    fn write(out: &mut String, value: &Value) {
        match value {
            Value::Null => out.push('n'),
            Value::Bool(b) => out.push(if *b { 't' } else { 'f' }),
            // `-0.0 == 0.0` for `Value`, so both must map to one key.
            Value::Number(n) => match n.as_f64() {
                Some(f) if n.is_f64() && f == 0.0 => out.push_str("#0.0"),
                _ => {
                    out.push('#');
                    out.push_str(&n.to_string());
                }
            },
            Value::String(text) => {
                out.push('"');
                out.push_str(&text.replace('\\', "\\\\").replace('"', "\\\""));
                out.push('"');
            }
            Value::Array(items) => {
                out.push('[');
                for item in items {
                    write(out, item);
                    out.push(',');
                }
                out.push(']');
            }
            // Maps iterate in key order, so equal maps write equal keys.
            Value::Object(map) => {
                out.push('{');
                for (key, item) in map {
                    write(out, &Value::String(key.clone()));
                    out.push(':');
                    write(out, item);
                    out.push(',');
                }
                out.push('}');
            }
        }
    }
    let mut out = String::new();
    write(&mut out, value);
    out
}

fn id_key(id: &Option<Value>) -> Option<String> {
    id.as_ref().map(value_key)
}

/// The first position of every identity in `ids`.
struct Positions(HashMap<Option<String>, usize>);

impl Positions {
    fn of(ids: &[Option<Value>]) -> Positions {
        let mut first = HashMap::with_capacity(ids.len());
        for (index, id) in ids.iter().enumerate() {
            first.entry(id_key(id)).or_insert(index);
        }
        Positions(first)
    }

    fn get(&self, id: &Option<Value>) -> Option<usize> {
        self.0.get(&id_key(id)).copied()
    }
}

/// Upstream's ordering of a merged list (`normalizeElementOrder` + `mergeSortedSlice`):
/// the items named by `patch_ids` in that order, interleaved with the others in
/// `server_ids` order, where a server-only item comes first only if it preceded the patch
/// item in the live list.
fn order_merged(
    merged: Vec<Value>,
    patch_ids: &[Option<Value>],
    server_ids: &[Option<Value>],
    key: Option<&str>,
) -> Vec<Value> {
    let patch_positions = Positions::of(patch_ids);
    let server_positions = Positions::of(server_ids);
    // (rank in its own list, rank in the live list, item)
    let mut from_patch = Vec::new();
    let mut server_only = Vec::new();
    for item in merged {
        let id = identity(&item, key);
        let server_rank = server_positions.get(&id);
        match patch_positions.get(&id) {
            Some(rank) => from_patch.push((rank, server_rank, item)),
            None => server_only.push((server_rank.unwrap_or(usize::MAX), server_rank, item)),
        }
    }
    // Stable sorts, so duplicates keep their relative order.
    from_patch.sort_by_key(|(rank, _, _)| *rank);
    server_only.sort_by_key(|(rank, _, _)| *rank);

    let mut out = Vec::with_capacity(from_patch.len() + server_only.len());
    let mut left = server_only.into_iter().peekable();
    let mut right = from_patch.into_iter().peekable();
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some((_, l, _)), Some((_, r, _))) => {
                matches!((l, r), (Some(li), Some(ri)) if li < ri)
            }
        };
        let next = if take_left { left.next() } else { right.next() };
        out.extend(next.map(|(_, _, item)| item));
    }
    out
}

/// A merged list, and the live order upstream's `$setElementOrder` step compares against
/// when that is not simply the live list (see [`Merger::merge_keyed_list`]).
struct MergedList {
    items: Vec<Value>,
    seen_live_order: Option<Vec<Option<Value>>>,
}

/// Walks the patch alongside the live object, tracking the path for schema lookups.
struct Merger<'s, 'p> {
    schema: &'s dyn PatchSchema,
    path: Vec<&'p str>,
}

impl<'p> Merger<'_, 'p> {
    /// Merges `patch` into `original`. `None` means the map was deleted (`$patch: delete`).
    fn merge_map(
        &mut self,
        mut original: Map<String, Value>,
        patch: &'p Map<String, Value>,
    ) -> Result<Option<Map<String, Value>>, PatchError> {
        if let Some(directive) = patch.get(DIRECTIVE_MARKER) {
            match directive.as_str() {
                Some("delete") => return Ok(None),
                // The rest of the patch map, merged into nothing, is the new map.
                Some("replace") => original = Map::new(),
                Some("merge") => {}
                _ => return Err(unknown_patch_type(directive, patch)),
            }
        }

        if let Some(retain) = patch.get(RETAIN_KEYS_DIRECTIVE) {
            let Value::Array(retain) = retain else {
                return Err(malformed("invalid patch format of retainKeys"));
            };
            let keep: HashSet<&str> = retain.iter().filter_map(Value::as_str).collect();
            let sets_unlisted_key = patch
                .iter()
                .any(|(k, v)| !v.is_null() && !is_directive_key(k) && !keep.contains(&k.as_str()));
            if sets_unlisted_key {
                return Err(malformed("invalid patch format of retainKeys"));
            }
            original.retain(|k, _| keep.contains(&k.as_str()));
        }

        // `$setElementOrder/<list>` merges and orders its list in one step, so the main loop
        // below must leave those lists alone.
        let mut ordered_lists: HashSet<&'p str> = HashSet::new();
        for (key, order) in patch {
            if !key.starts_with(SET_ELEMENT_ORDER_PREFIX) {
                continue;
            }
            let name = directive_list_name(key, SET_ELEMENT_ORDER_PREFIX)
                .ok_or_else(|| malformed("invalid patch format of setElementOrder list"))?;
            let Value::Array(order) = order else {
                return Err(malformed("invalid patch format of setElementOrder list"));
            };
            self.merge_ordered_list(&mut original, patch, name, order)?;
            ordered_lists.insert(name);
        }

        for (key, values) in patch {
            if !key.starts_with(DELETE_FROM_PRIMITIVE_LIST_PREFIX) {
                continue;
            }
            let name = directive_list_name(key, DELETE_FROM_PRIMITIVE_LIST_PREFIX)
                .ok_or_else(|| malformed("invalid patch format of primitive list"))?;
            let Value::Array(values) = values else {
                return Err(malformed("invalid patch format of primitive list"));
            };
            if let Some(Value::Array(items)) = original.get_mut(name) {
                let doomed: HashSet<String> = values.iter().map(value_key).collect();
                items.retain(|item| !doomed.contains(&value_key(item)));
            }
        }

        for (key, patch_value) in patch {
            if is_directive_key(key) || ordered_lists.contains(&key.as_str()) {
                continue;
            }
            if patch_value.is_null() {
                original.remove(key);
                continue;
            }
            self.path.push(key.as_str());
            let merged = match (original.remove(key), patch_value) {
                (Some(Value::Object(current)), Value::Object(patch_map)) => {
                    if self.schema.map_strategy(&self.path) == MapStrategy::Replace {
                        self.absorb(patch_value)
                    } else {
                        self.merge_map(current, patch_map)
                            .map(|merged| merged.map(Value::Object))
                    }
                }
                (Some(Value::Array(current)), Value::Array(patch_list)) => {
                    let strategy = self.schema.list_strategy(&self.path);
                    self.merge_list(current, patch_list, strategy)
                        .map(|merged| Some(Value::Array(merged)))
                }
                // Missing, null or of another type: the patch value wins.
                _ => self.absorb(patch_value),
            };
            self.path.pop();
            if let Some(value) = merged? {
                original.insert(key.clone(), value);
            }
        }
        Ok(Some(original))
    }

    /// A patch value for a field the live object lacks, merged into nothing: directives
    /// are applied and `null`s dropped. `None` means nothing is left (`$patch: delete`).
    fn absorb(&mut self, value: &'p Value) -> Result<Option<Value>, PatchError> {
        match value {
            Value::Object(map) => Ok(self.merge_map(Map::new(), map)?.map(Value::Object)),
            Value::Array(items) => Ok(Some(Value::Array(self.absorb_list(items)?))),
            other => Ok(Some(other.clone())),
        }
    }

    /// A patch list taken as it is: element maps carrying a `$patch` directive are list
    /// directives with nothing to act on and are dropped (upstream `removeDirectives`);
    /// the other elements are absorbed.
    fn absorb_list(&mut self, items: &'p [Value]) -> Result<Vec<Value>, PatchError> {
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            if item.get(DIRECTIVE_MARKER).is_some() {
                continue;
            }
            out.extend(self.absorb(item)?);
        }
        Ok(out)
    }

    fn merge_list(
        &mut self,
        original: Vec<Value>,
        patch: &'p [Value],
        strategy: ListStrategy,
    ) -> Result<Vec<Value>, PatchError> {
        self.merge_list_tracked(original, patch, strategy)
            .map(|merged| merged.items)
    }

    fn merge_list_tracked(
        &mut self,
        original: Vec<Value>,
        patch: &'p [Value],
        strategy: ListStrategy,
    ) -> Result<MergedList, PatchError> {
        let items = match strategy {
            ListStrategy::Replace => self.absorb_list(patch)?,
            ListStrategy::MergePrimitives => self.merge_primitive_list(original, patch)?,
            ListStrategy::MergeByKey(key) => return self.merge_keyed_list(original, patch, key),
        };
        Ok(MergedList {
            items,
            seen_live_order: None,
        })
    }

    fn merge_primitive_list(
        &self,
        original: Vec<Value>,
        patch: &[Value],
    ) -> Result<Vec<Value>, PatchError> {
        if original.is_empty() && patch.is_empty() {
            return Ok(original);
        }
        let nested = |v: &Value| v.is_array() || v.is_object();
        if patch.iter().any(Value::is_array) || original.iter().any(Value::is_array) {
            return Err(cannot_apply("lists of lists are not supported"));
        }
        if patch.iter().any(nested) {
            return Err(malformed(format!(
                "cannot merge lists without merge key for {}",
                self.path.join(".")
            )));
        }
        if original.iter().any(nested) {
            return Err(cannot_apply(format!(
                "cannot merge lists without merge key for {}",
                self.path.join(".")
            )));
        }
        let server_ids: Vec<Option<Value>> = original.iter().cloned().map(Some).collect();
        let patch_ids: Vec<Option<Value>> = patch.iter().cloned().map(Some).collect();
        let mut merged: Vec<Value> = Vec::with_capacity(original.len() + patch.len());
        let mut seen: HashSet<String> = HashSet::with_capacity(merged.capacity());
        for item in original.into_iter().chain(patch.iter().cloned()) {
            if seen.insert(value_key(&item)) {
                merged.push(item);
            }
        }
        Ok(order_merged(merged, &patch_ids, &server_ids, None))
    }

    /// Merges a list of maps by `key`.
    ///
    /// Upstream deletes elements inside the live slice's backing array and then appends new
    /// elements into the freed slots, so a `$setElementOrder` step that follows sees the
    /// live list as the survivors followed by the first `deleted` new elements. That order
    /// is returned as `seen_live_order`, because upstream's tests pin its effect: when a
    /// patch deletes one element and adds another, the new one lands after the server-only
    /// elements instead of before them.
    fn merge_keyed_list(
        &mut self,
        original: Vec<Value>,
        patch: &'p [Value],
        key: &'static str,
    ) -> Result<MergedList, PatchError> {
        if original.is_empty() && patch.is_empty() {
            return Ok(MergedList {
                items: original,
                seen_live_order: None,
            });
        }
        let original_len = original.len();
        let mut patch_maps = Vec::with_capacity(patch.len());
        for item in patch {
            match item {
                Value::Object(map) => patch_maps.push(map),
                Value::Array(_) => return Err(malformed("lists of lists are not supported")),
                other => {
                    return Err(malformed(format!(
                        "expected a map, but received {other} in the list {} merged by {key}",
                        self.path.join(".")
                    )));
                }
            }
        }
        if let Some(other) = original.iter().find(|item| !item.is_object()) {
            return Err(cannot_apply(format!(
                "expected a map, but found {other} in the list {} merged by {key}",
                self.path.join(".")
            )));
        }

        // Directive elements first: deletions by key and the whole-list replace marker.
        let mut current = original;
        let mut replace = false;
        let mut plain: Vec<&'p Map<String, Value>> = Vec::with_capacity(patch_maps.len());
        let mut doomed: HashSet<String> = HashSet::new();
        for map in patch_maps {
            let Some(directive) = map.get(DIRECTIVE_MARKER) else {
                plain.push(map);
                continue;
            };
            match directive.as_str() {
                Some("delete") => {
                    let value = map.get(key).ok_or_else(|| no_merge_key(map, key))?;
                    doomed.insert(value_key(value));
                }
                Some("replace") => replace = true,
                Some("merge") => {
                    return Err(malformed(
                        "merging lists cannot yet be specified in the patch",
                    ));
                }
                _ => return Err(unknown_patch_type(directive, map)),
            }
        }
        if !doomed.is_empty() {
            current.retain(|item| {
                item.get(key)
                    .is_none_or(|value| !doomed.contains(&value_key(value)))
            });
        }
        let deleted = original_len - current.len();
        let server_ids: Vec<Option<Value>> =
            current.iter().map(|i| identity(i, Some(key))).collect();
        let mut seen_live_order = (deleted > 0).then(|| server_ids.clone());
        if replace {
            let mut items = Vec::with_capacity(plain.len());
            for map in plain {
                items.extend(self.merge_map(Map::new(), map)?.map(Value::Object));
            }
            return Ok(MergedList {
                items,
                seen_live_order,
            });
        }

        let mut patch_ids = Vec::with_capacity(plain.len());
        let mut appended = 0;
        // Slots instead of removals keep the positions in `by_key` valid; each key lists
        // its elements in order, and the first one still present is the match, as a scan
        // from the front would find it.
        let mut merged: Vec<Option<Value>> = current.into_iter().map(Some).collect();
        let mut by_key: HashMap<String, VecDeque<usize>> = HashMap::with_capacity(merged.len());
        for (index, item) in merged.iter().enumerate() {
            if let Some(value) = item.as_ref().and_then(|item| item.get(key)) {
                by_key.entry(value_key(value)).or_default().push_back(index);
            }
        }
        for map in plain {
            let value = map.get(key).ok_or_else(|| no_merge_key(map, key))?;
            patch_ids.push(Some(value.clone()));
            let slots = by_key.entry(value_key(value)).or_default();
            // Elements deleted by an earlier patch element are gone for good.
            while slots.front().is_some_and(|&index| merged[index].is_none()) {
                slots.pop_front();
            }
            match slots.front().copied() {
                Some(index) => {
                    let existing = match merged[index].take() {
                        Some(Value::Object(existing)) => existing,
                        _ => Map::new(),
                    };
                    merged[index] = self.merge_map(existing, map)?.map(Value::Object);
                }
                None => {
                    if let Some(seen) = seen_live_order.as_mut()
                        && appended < deleted
                    {
                        seen.push(Some(value.clone()));
                    }
                    appended += 1;
                    if let Some(added) = self.merge_map(Map::new(), map)? {
                        slots.push_back(merged.len());
                        merged.push(Some(Value::Object(added)));
                    }
                }
            }
        }
        let merged: Vec<Value> = merged.into_iter().flatten().collect();
        Ok(MergedList {
            items: order_merged(merged, &patch_ids, &server_ids, Some(key)),
            seen_live_order,
        })
    }

    /// Handles `$setElementOrder/<name>`: merges the patch list `name` (if any) into the
    /// live list, then orders the result by `order` (upstream `mergePatchIntoOriginal`).
    fn merge_ordered_list(
        &mut self,
        original: &mut Map<String, Value>,
        patch: &'p Map<String, Value>,
        name: &'p str,
        order: &'p [Value],
    ) -> Result<(), PatchError> {
        self.path.push(name);
        let result = self.merge_ordered_list_at_path(original, patch, name, order);
        self.path.pop();
        result
    }

    fn merge_ordered_list_at_path(
        &mut self,
        original: &mut Map<String, Value>,
        patch: &'p Map<String, Value>,
        name: &'p str,
        order: &'p [Value],
    ) -> Result<(), PatchError> {
        let strategy = self.schema.list_strategy(&self.path);
        let key = match strategy {
            ListStrategy::MergeByKey(key) => Some(key),
            _ => None,
        };
        let live = match original.get(name) {
            Some(Value::Array(items)) => Some(items.clone()),
            _ => None,
        };
        let patch_list = match patch.get(name) {
            None => None,
            Some(Value::Array(items)) => Some(items.as_slice()),
            Some(_) => {
                return Err(malformed(format!(
                    "invalid patch format of setElementOrder list: {name} is not a list"
                )));
            }
        };
        check_patch_follows_order(patch_list, order, key)?;

        let (merged, seen_live_order) = match (live.clone(), patch_list) {
            (Some(live), None) => (live, None),
            (None, Some(patch_list)) => (self.absorb_list(patch_list)?, None),
            (Some(live), Some(patch_list)) => {
                let merged = self.merge_list_tracked(live, patch_list, strategy)?;
                (merged.items, merged.seen_live_order)
            }
            (None, None) => return Ok(()),
        };

        let mut order_ids = Vec::with_capacity(order.len());
        for entry in order {
            if let Some(k) = key {
                let Value::Object(map) = entry else {
                    return Err(malformed(format!(
                        "invalid patch format of setElementOrder list: {entry} is not a map"
                    )));
                };
                if !map.contains_key(k) {
                    return Err(no_merge_key(map, k));
                }
            }
            order_ids.push(identity(entry, key));
        }
        let server_ids: Vec<Option<Value>> = seen_live_order.unwrap_or_else(|| {
            live.unwrap_or_default()
                .iter()
                .map(|item| identity(item, key))
                .collect()
        });
        let ordered = order_merged(merged, &order_ids, &server_ids, key);
        original.insert(name.to_string(), Value::Array(ordered));
        Ok(())
    }
}

/// Upstream `validatePatchWithSetOrderList`: the patch list's elements (other than
/// directive elements) must appear in `$setElementOrder` in the same relative order.
fn check_patch_follows_order(
    patch_list: Option<&[Value]>,
    order: &[Value],
    key: Option<&str>,
) -> Result<(), PatchError> {
    let Some(patch_list) = patch_list else {
        return Ok(());
    };
    if patch_list.is_empty() || order.is_empty() {
        return Ok(());
    }
    let is_directive = |item: &Value| item.get(DIRECTIVE_MARKER).is_some();
    let candidates: Vec<&Value> = patch_list
        .iter()
        .filter(|item| {
            key.is_none() || item.get(DIRECTIVE_MARKER).and_then(Value::as_str) != Some("delete")
        })
        .collect();
    let (mut in_patch, mut in_order) = (0, 0);
    while in_patch < candidates.len() && in_order < order.len() {
        let item = candidates[in_patch];
        if is_directive(item) {
            in_patch += 1;
            continue;
        }
        let entry = &order[in_order];
        let same = match key {
            Some(k) => {
                let (Value::Object(a), Value::Object(b)) = (item, entry) else {
                    return Err(malformed(format!(
                        "expected a map in the list and the setElementOrder list, got {item} and {entry}"
                    )));
                };
                let left = a.get(k).ok_or_else(|| no_merge_key(a, k))?;
                let right = b.get(k).ok_or_else(|| no_merge_key(b, k))?;
                left == right
            }
            None => item == entry,
        };
        if same {
            in_patch += 1;
        }
        in_order += 1;
    }
    if in_patch < candidates.len() {
        return Err(malformed(format!(
            "The order in patch list:\n{}\n doesn't match {SET_ELEMENT_ORDER_PREFIX} list:\n{}\n",
            Value::Array(patch_list.to_vec()),
            Value::Array(order.to_vec())
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn smp(target: Value, patch: Value) -> Value {
        apply_strategic_merge_patch(&target, &patch, &BuiltinSchema).unwrap()
    }

    fn smp_err(target: Value, patch: Value) -> PatchError {
        apply_strategic_merge_patch(&target, &patch, &BuiltinSchema).unwrap_err()
    }

    /// No key of the result, at any depth, is a directive.
    fn assert_no_directives(value: &Value) {
        match value {
            Value::Object(map) => {
                for (k, v) in map {
                    assert!(!k.starts_with('$'), "directive {k} stored in {value}");
                    assert_no_directives(v);
                }
            }
            Value::Array(items) => items.iter().for_each(assert_no_directives),
            _ => {}
        }
    }

    /// The schema of apimachinery's strategicpatch tests (`MergeItem`): `mergingList` by
    /// `name`, `mergingIntList` merge primitives, the rest atomic.
    struct MergeItemSchema;

    impl PatchSchema for MergeItemSchema {
        fn list_strategy(&self, path: &[&str]) -> ListStrategy {
            match path.last().copied() {
                Some("mergingList" | "retainKeysMergingList") => ListStrategy::MergeByKey("name"),
                Some("mergingIntList") => ListStrategy::MergePrimitives,
                _ => ListStrategy::Replace,
            }
        }
    }

    fn item_smp(target: Value, patch: Value) -> Result<Value, PatchError> {
        apply_strategic_merge_patch(&target, &patch, &MergeItemSchema)
    }

    #[test]
    fn builtin_schema_table() {
        let s = BuiltinSchema;
        let pod_spec = ["spec", "template", "spec"];
        let at = |tail: &[&'static str]| -> ListStrategy {
            let path: Vec<&str> = pod_spec.iter().chain(tail).copied().collect();
            s.list_strategy(&path)
        };
        assert_eq!(at(&["containers"]), ListStrategy::MergeByKey("name"));
        assert_eq!(at(&["initContainers"]), ListStrategy::MergeByKey("name"));
        assert_eq!(at(&["containers", "env"]), ListStrategy::MergeByKey("name"));
        assert_eq!(
            at(&["containers", "ports"]),
            ListStrategy::MergeByKey("containerPort")
        );
        assert_eq!(
            at(&["containers", "volumeMounts"]),
            ListStrategy::MergeByKey("mountPath")
        );
        assert_eq!(at(&["containers", "args"]), ListStrategy::Replace);
        assert_eq!(at(&["volumes"]), ListStrategy::MergeByKey("name"));
        assert_eq!(at(&["tolerations"]), ListStrategy::Replace);
        assert_eq!(
            s.list_strategy(&["spec", "containers"]),
            ListStrategy::MergeByKey("name")
        );
        assert_eq!(
            s.list_strategy(&[
                "spec",
                "jobTemplate",
                "spec",
                "template",
                "spec",
                "containers"
            ]),
            ListStrategy::MergeByKey("name")
        );
        assert_eq!(
            s.list_strategy(&["metadata", "finalizers"]),
            ListStrategy::MergePrimitives
        );
        assert_eq!(
            s.list_strategy(&["spec", "template", "metadata", "finalizers"]),
            ListStrategy::MergePrimitives
        );
        assert_eq!(
            s.list_strategy(&["spec", "finalizers"]),
            ListStrategy::Replace
        );
        assert_eq!(
            s.list_strategy(&["metadata", "ownerReferences"]),
            ListStrategy::MergeByKey("uid")
        );
        assert_eq!(
            s.list_strategy(&["metadata", "managedFields"]),
            ListStrategy::Replace
        );
        assert_eq!(
            s.list_strategy(&["spec", "ports"]),
            ListStrategy::MergeByKey("port")
        );
        assert_eq!(
            BuiltinSchema::for_kind("Deployment").list_strategy(&["spec", "ports"]),
            ListStrategy::Replace
        );
        assert_eq!(
            s.list_strategy(&["status", "conditions"]),
            ListStrategy::MergeByKey("type")
        );
        assert_eq!(
            BuiltinSchema::for_kind("CustomResourceDefinition")
                .list_strategy(&["status", "conditions"]),
            ListStrategy::Replace
        );
        // ServiceAccount imagePullSecrets are atomic; PodSpec's merge by name.
        assert_eq!(
            s.list_strategy(&["imagePullSecrets"]),
            ListStrategy::Replace
        );
        assert_eq!(
            s.list_strategy(&["spec", "imagePullSecrets"]),
            ListStrategy::MergeByKey("name")
        );
        assert_eq!(
            BuiltinSchema::for_kind("PodDisruptionBudget").map_strategy(&["spec", "selector"]),
            MapStrategy::Replace
        );
        assert_eq!(s.map_strategy(&["spec", "selector"]), MapStrategy::Merge);
        assert_eq!(
            MergePatchSchema.list_strategy(&["spec", "containers"]),
            ListStrategy::Replace
        );
    }

    /// The patch kubectl sent after changing one image and one env var (api-surface §6.5).
    #[test]
    fn kubectl_apply_deployment_example() {
        let live = json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "labels": {"app": "web"}},
            "spec": {
                "replicas": 2,
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [
                        {
                            "name": "c",
                            "image": "nginx:1",
                            "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                            "ports": [{"containerPort": 80, "protocol": "TCP"}]
                        },
                        {"name": "side", "image": "busybox", "args": ["sleep", "1d"]}
                    ]}
                }
            }
        });
        let patch = json!({"spec": {"template": {"spec": {
            "$setElementOrder/containers": [{"name": "c"}, {"name": "side"}],
            "containers": [{
                "name": "c",
                "image": "nginx:2",
                "$setElementOrder/env": [{"name": "A"}, {"name": "C"}],
                "env": [{"name": "C", "value": "3"}, {"$patch": "delete", "name": "B"}]
            }]
        }}}});
        let patched = smp(live.clone(), patch);
        let mut expected = live;
        expected["spec"]["template"]["spec"]["containers"] = json!([
            {
                "name": "c",
                "image": "nginx:2",
                "env": [{"name": "A", "value": "1"}, {"name": "C", "value": "3"}],
                "ports": [{"containerPort": 80, "protocol": "TCP"}]
            },
            {"name": "side", "image": "busybox", "args": ["sleep", "1d"]}
        ]);
        assert_eq!(patched, expected);
        assert_no_directives(&patched);
    }

    #[test]
    fn labels_add_and_remove() {
        let live = json!({"metadata": {"name": "x", "labels": {"a": "1", "c": "3"}}});
        let patched = smp(live, json!({"metadata": {"labels": {"a": null, "b": "2"}}}));
        assert_eq!(
            patched,
            json!({"metadata": {"name": "x", "labels": {"b": "2", "c": "3"}}})
        );
        // labels on an object that has none; the null for a missing key is dropped
        let patched = smp(
            json!({"metadata": {"name": "x"}}),
            json!({"metadata": {"labels": {"b": "2", "gone": null}}}),
        );
        assert_eq!(
            patched,
            json!({"metadata": {"name": "x", "labels": {"b": "2"}}})
        );
    }

    #[test]
    fn finalizers_union_and_delete() {
        let live = json!({"metadata": {"finalizers": ["a", "b"]}});
        assert_eq!(
            smp(
                live.clone(),
                json!({"metadata": {"finalizers": ["b", "c"]}})
            ),
            json!({"metadata": {"finalizers": ["a", "b", "c"]}})
        );
        assert_eq!(
            smp(
                live.clone(),
                json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}})
            ),
            json!({"metadata": {"finalizers": ["b"]}})
        );
        // both at once, as kubectl sends them with an order
        let patched = smp(
            json!({"metadata": {"finalizers": ["a", "b", "c"]}}),
            json!({"metadata": {
                "$setElementOrder/finalizers": ["b", "d"],
                "$deleteFromPrimitiveList/finalizers": ["a", "c"],
                "finalizers": ["d"]
            }}),
        );
        assert_eq!(patched, json!({"metadata": {"finalizers": ["b", "d"]}}));
        // deleting what is not there is harmless
        assert_eq!(
            smp(
                json!({"metadata": {}}),
                json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["x"]}})
            ),
            json!({"metadata": {}})
        );
        assert!(matches!(
            smp_err(
                live,
                json!({"metadata": {"$deleteFromPrimitiveList/finalizers": "a"}})
            ),
            PatchError::Malformed(_)
        ));
    }

    #[test]
    fn primitive_list_order_follows_upstream() {
        // apimachinery "preserve the order from the patch in a merging int list"
        assert_eq!(
            item_smp(
                json!({"mergingIntList": [1, 2, 3]}),
                json!({"mergingIntList": [3, 1]})
            )
            .unwrap(),
            json!({"mergingIntList": [2, 3, 1]})
        );
        // apimachinery "delete an item in a list of primitives and preserve order"
        assert_eq!(
            item_smp(
                json!({"mergingIntList": [1, 2, 3]}),
                json!({
                    "$setElementOrder/mergingIntList": [2, 1],
                    "$deleteFromPrimitiveList/mergingIntList": [3]
                })
            )
            .unwrap(),
            json!({"mergingIntList": [2, 1]})
        );
    }

    #[test]
    fn owner_references_merge_by_uid() {
        let live = json!({"metadata": {"ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u1"},
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "cm", "uid": "u2"}
        ]}});
        let patched = smp(
            live,
            json!({"metadata": {"ownerReferences": [
                {"uid": "u1", "controller": true, "blockOwnerDeletion": true},
                {"$patch": "delete", "uid": "u2"},
                {"apiVersion": "v1", "kind": "Secret", "name": "s", "uid": "u3"}
            ]}}),
        );
        // u2 is gone; u3 is new and follows u1 in the patch's order.
        assert_eq!(
            patched,
            json!({"metadata": {"ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u1",
                 "controller": true, "blockOwnerDeletion": true},
                {"apiVersion": "v1", "kind": "Secret", "name": "s", "uid": "u3"}
            ]}})
        );
    }

    #[test]
    fn new_keyed_items_go_before_server_only_items() {
        // upstream mergeSortedSlice: an item the live list lacks is not "after" anything.
        let live = json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}]}});
        let patched = smp(
            live,
            json!({"spec": {"containers": [{"name": "n", "image": "x"}]}}),
        );
        assert_eq!(
            patched["spec"]["containers"],
            json!([{"name": "n", "image": "x"}, {"name": "a"}, {"name": "b"}])
        );
        // ... and server-only items that precede a patched item stay before it.
        let live = json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}, {"name": "c"}]}});
        let patched = smp(
            live,
            json!({"spec": {"containers": [{"name": "b", "image": "y"}, {"name": "n"}]}}),
        );
        assert_eq!(
            patched["spec"]["containers"],
            json!([{"name": "a"}, {"name": "b", "image": "y"}, {"name": "n"}, {"name": "c"}])
        );
    }

    #[test]
    fn keyed_list_order_follows_upstream() {
        // apimachinery "preserve the order from the patch in a merging list 2"
        let live = json!({"mergingList": [
            {"name": "1"}, {"name": "2", "value": "b"}, {"name": "3"}
        ]});
        assert_eq!(
            item_smp(
                live.clone(),
                json!({"mergingList": [{"name": "3", "value": "c"}, {"name": "1", "value": "a"}]})
            )
            .unwrap(),
            json!({"mergingList": [
                {"name": "2", "value": "b"}, {"name": "3", "value": "c"}, {"name": "1", "value": "a"}
            ]})
        );
        // design proposal example: live [B, C, A], patch [A', B', D] => [C, A', B', D]
        assert_eq!(
            item_smp(
                json!({"mergingList": [{"name": "B"}, {"name": "C"}, {"name": "A"}]}),
                json!({"mergingList": [
                    {"name": "A", "value": "1"}, {"name": "B", "value": "1"}, {"name": "D"}
                ]})
            )
            .unwrap(),
            json!({"mergingList": [
                {"name": "C"}, {"name": "A", "value": "1"}, {"name": "B", "value": "1"}, {"name": "D"}
            ]})
        );
    }

    #[test]
    fn set_element_order_reorders_and_keeps_server_items() {
        // apimachinery "add an item in a list and preserve order" (three-way patch)
        let live = json!({"mergingList": [
            {"name": "1", "other": "a"}, {"name": "2", "value": "2", "other": "b"}
        ]});
        let patch = json!({
            "$setElementOrder/mergingList": [{"name": "3"}, {"name": "1"}, {"name": "2"}],
            "mergingList": [{"name": "3", "value": "3"}]
        });
        assert_eq!(
            item_smp(live, patch).unwrap(),
            json!({"mergingList": [
                {"name": "3", "value": "3"},
                {"name": "1", "other": "a"},
                {"name": "2", "value": "2", "other": "b"}
            ]})
        );
        // reorder only; entries the list lacks are ignored
        assert_eq!(
            item_smp(
                json!({"mergingList": [{"name": "B"}, {"name": "A"}]}),
                json!({"$setElementOrder/mergingList": [{"name": "C"}, {"name": "A"}, {"name": "B"}]})
            )
            .unwrap(),
            json!({"mergingList": [{"name": "A"}, {"name": "B"}]})
        );
        // server-only items interleave by their live position (design proposal example,
        // as upstream's implementation orders it)
        assert_eq!(
            item_smp(
                json!({"mergingList": [
                    {"name": "C"}, {"name": "B"}, {"name": "D"}, {"name": "A"}, {"name": "E"}
                ]}),
                json!({
                    "$setElementOrder/mergingList": [{"name": "A"}, {"name": "B"}],
                    "mergingList": [{"name": "A", "v": 1}, {"name": "B", "v": 1}]
                })
            )
            .unwrap(),
            json!({"mergingList": [
                {"name": "C"}, {"name": "D"}, {"name": "A", "v": 1}, {"name": "B", "v": 1},
                {"name": "E"}
            ]})
        );
    }

    #[test]
    fn set_element_order_after_deleting_keeps_upstreams_order() {
        // apimachinery "add map and delete map from merging list with conflict": with an
        // element deleted in the same patch, the new elements land after server-only ones.
        assert_eq!(
            item_smp(
                json!({"mergingList": [{"name": "1", "other": "a"}, {"name": "4", "other": "c"}]}),
                json!({
                    "$setElementOrder/mergingList": [{"name": "2"}, {"name": "3"}],
                    "mergingList": [{"name": "2"}, {"name": "3"}, {"name": "1", "$patch": "delete"}]
                })
            )
            .unwrap(),
            json!({"mergingList": [{"name": "4", "other": "c"}, {"name": "2"}, {"name": "3"}]})
        );
        // kubectl apply renaming env B to C while a webhook added X: [A, X, C].
        let live = json!({"spec": {"containers": [{"name": "c", "env": [
            {"name": "A", "value": "1"}, {"name": "B", "value": "2"}, {"name": "X", "value": "w"}
        ]}]}});
        let patched = smp(
            live,
            json!({"spec": {"containers": [{
                "name": "c",
                "$setElementOrder/env": [{"name": "A"}, {"name": "C"}],
                "env": [{"name": "C", "value": "2"}, {"$patch": "delete", "name": "B"}]
            }]}}),
        );
        assert_eq!(
            patched["spec"]["containers"][0]["env"],
            json!([{"name": "A", "value": "1"}, {"name": "X", "value": "w"}, {"name": "C", "value": "2"}])
        );
    }

    #[test]
    fn set_element_order_for_a_new_list() {
        let patched = smp(
            json!({"spec": {"containers": [{"name": "c"}]}}),
            json!({"spec": {"containers": [{
                "name": "c",
                "$setElementOrder/env": [{"name": "B"}, {"name": "A"}],
                "env": [{"name": "B", "value": "2"}, {"name": "A", "value": "1"}]
            }]}}),
        );
        assert_eq!(
            patched,
            json!({"spec": {"containers": [{"name": "c", "env": [
                {"name": "B", "value": "2"}, {"name": "A", "value": "1"}
            ]}]}})
        );
    }

    #[test]
    fn set_element_order_must_agree_with_the_patch() {
        // apimachinery "should check if order in $setElementOrder and patch list match"
        let err = item_smp(
            json!({"mergingList": [{"name": "1"}, {"name": "3"}, {"name": "2"}]}),
            json!({
                "$setElementOrder/mergingList": [{"name": "1"}, {"name": "2"}, {"name": "3"}],
                "mergingList": [{"name": "3", "value": "3"}, {"name": "1", "value": "1"}]
            }),
        )
        .unwrap_err();
        assert!(
            matches!(&err, PatchError::Malformed(m) if m.contains("doesn't match")),
            "{err:?}"
        );
        assert!(matches!(
            item_smp(
                json!({}),
                json!({"$setElementOrder/mergingList": {"name": "1"}})
            ),
            Err(PatchError::Malformed(_))
        ));
        assert!(matches!(
            item_smp(json!({}), json!({"$setElementOrder": []})),
            Err(PatchError::Malformed(_))
        ));
    }

    #[test]
    fn patch_replace_on_a_map() {
        let live = json!({"spec": {"selector": {"matchLabels": {"a": "1", "b": "2"}}, "x": 1}});
        let patched = smp(
            live,
            json!({"spec": {"selector": {"$patch": "replace", "matchLabels": {"c": "3"}}}}),
        );
        assert_eq!(
            patched,
            json!({"spec": {"selector": {"matchLabels": {"c": "3"}}, "x": 1}})
        );
        // at the root: apimachinery "add key and delete all keys from map"
        assert_eq!(
            item_smp(
                json!({"name": "1", "value": "1"}),
                json!({"other": "a", "$patch": "replace"})
            )
            .unwrap(),
            json!({"other": "a"})
        );
        // PodDisruptionBudget's selector has patchStrategy replace
        let pdb = json!({"spec": {"selector": {"matchLabels": {"a": "1"}}}});
        let patched = apply_strategic_merge_patch(
            &pdb,
            &json!({"spec": {"selector": {"matchLabels": {"b": "2"}}}}),
            &BuiltinSchema::for_kind("PodDisruptionBudget"),
        )
        .unwrap();
        assert_eq!(
            patched,
            json!({"spec": {"selector": {"matchLabels": {"b": "2"}}}})
        );
    }

    #[test]
    fn patch_delete_on_a_map_and_list_elements() {
        let live = json!({"metadata": {"annotations": {"a": "1"}, "labels": {"l": "1"}}});
        assert_eq!(
            smp(
                live,
                json!({"metadata": {"annotations": {"$patch": "delete"}}})
            ),
            json!({"metadata": {"labels": {"l": "1"}}})
        );
        // apimachinery "delete all duplicate entries in a merging list"
        assert_eq!(
            item_smp(
                json!({"mergingList": [
                    {"name": "1"}, {"name": "1"}, {"name": "2", "value": "a"},
                    {"name": "3"}, {"name": "3"}
                ]}),
                json!({"mergingList": [
                    {"name": "1", "$patch": "delete"}, {"name": "3", "$patch": "delete"}
                ]})
            )
            .unwrap(),
            json!({"mergingList": [{"name": "2", "value": "a"}]})
        );
        // deleting an element that does not exist is harmless
        assert_eq!(
            smp(
                json!({"spec": {"volumes": [{"name": "v"}]}}),
                json!({"spec": {"volumes": [{"name": "w", "$patch": "delete"}]}})
            ),
            json!({"spec": {"volumes": [{"name": "v"}]}})
        );
    }

    #[test]
    fn patch_replace_on_a_list() {
        // apimachinery "delete all items from merging list"
        assert_eq!(
            item_smp(
                json!({"mergingList": [{"name": "1"}, {"name": "2"}]}),
                json!({"mergingList": [{"$patch": "replace"}]})
            )
            .unwrap(),
            json!({"mergingList": []})
        );
        assert_eq!(
            smp(
                json!({"spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b"}]}}),
                json!({"spec": {"containers": [{"name": "c", "image": "2"}, {"$patch": "replace"}]}})
            ),
            json!({"spec": {"containers": [{"name": "c", "image": "2"}]}})
        );
    }

    #[test]
    fn retain_keys_clears_other_fields() {
        // kubectl apply switching a Deployment from RollingUpdate to Recreate.
        let live = json!({"spec": {"strategy": {
            "type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}
        }}});
        let patched = smp(
            live,
            json!({"spec": {"strategy": {
                "$retainKeys": ["type"],
                "type": "Recreate",
                "rollingUpdate": null
            }}}),
        );
        assert_eq!(patched, json!({"spec": {"strategy": {"type": "Recreate"}}}));

        // volumes (merge,retainKeys): the volume source changes kind
        let live = json!({"spec": {"volumes": [
            {"name": "v", "emptyDir": {}},
            {"name": "w", "secret": {"secretName": "s"}}
        ]}});
        let patched = smp(
            live,
            json!({"spec": {"volumes": [
                {"$retainKeys": ["configMap", "name"], "name": "v", "configMap": {"name": "cm"}}
            ]}}),
        );
        assert_eq!(
            patched,
            json!({"spec": {"volumes": [
                {"name": "v", "configMap": {"name": "cm"}},
                {"name": "w", "secret": {"secretName": "s"}}
            ]}})
        );

        // every key the patch sets must be retained
        assert!(matches!(
            smp_err(
                json!({"spec": {"strategy": {}}}),
                json!({"spec": {"strategy": {"$retainKeys": ["type"], "rollingUpdate": {}}}})
            ),
            PatchError::Malformed(m) if m == "invalid patch format of retainKeys"
        ));
        assert!(matches!(
            smp_err(json!({}), json!({"spec": {"$retainKeys": "type"}})),
            PatchError::Malformed(_)
        ));
    }

    #[test]
    fn ports_merge_by_their_keys() {
        let svc = json!({"kind": "Service", "spec": {"ports": [
            {"name": "http", "port": 80, "targetPort": 8080},
            {"name": "https", "port": 443}
        ]}});
        let patched = apply_strategic_merge_patch(
            &svc,
            &json!({"spec": {"ports": [{"port": 80, "targetPort": 9090}]}}),
            &BuiltinSchema::for_kind("Service"),
        )
        .unwrap();
        assert_eq!(
            patched["spec"]["ports"],
            json!([{"name": "http", "port": 80, "targetPort": 9090}, {"name": "https", "port": 443}])
        );
        let pod = json!({"spec": {"containers": [{"name": "c", "ports": [
            {"containerPort": 80}, {"containerPort": 81}
        ]}]}});
        let patched = smp(
            pod,
            json!({"spec": {"containers": [{"name": "c", "ports": [
                {"containerPort": 81, "name": "metrics"}
            ]}]}}),
        );
        assert_eq!(
            patched["spec"]["containers"][0]["ports"],
            json!([{"containerPort": 80}, {"containerPort": 81, "name": "metrics"}])
        );
    }

    #[test]
    fn atomic_lists_and_scalars_are_replaced() {
        let live = json!({"spec": {
            "containers": [{"name": "c", "args": ["a", "b"], "image": "x"}],
            "tolerations": [{"key": "k"}],
            "replicas": 1
        }});
        let patched = smp(
            live,
            json!({"spec": {
                "containers": [{"name": "c", "args": ["z"]}],
                "tolerations": [{"key": "t", "value": null}],
                "replicas": {"weird": true}
            }}),
        );
        assert_eq!(
            patched,
            json!({"spec": {
                "containers": [{"name": "c", "args": ["z"], "image": "x"}],
                "tolerations": [{"key": "t"}],
                "replicas": {"weird": true}
            }})
        );
    }

    #[test]
    fn merge_patch_schema_replaces_lists() {
        let live = json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}], "m": {"x": 1}}});
        let patched = apply_strategic_merge_patch(
            &live,
            &json!({"spec": {"containers": [{"name": "b", "image": "i"}], "m": {"y": 2}}}),
            &MergePatchSchema,
        )
        .unwrap();
        assert_eq!(
            patched,
            json!({"spec": {"containers": [{"name": "b", "image": "i"}], "m": {"x": 1, "y": 2}}})
        );
    }

    #[test]
    fn new_values_have_directives_applied_and_nulls_dropped() {
        let patched = smp(
            json!({"spec": {}}),
            json!({"spec": {
                "template": {"spec": {"containers": [
                    {"name": "c", "env": [{"name": "A", "value": null}, {"$patch": "delete", "name": "B"}]}
                ]}},
                "replaced": {"$patch": "replace", "a": 1},
                "deleted": {"$patch": "delete", "a": 1}
            }}),
        );
        assert_eq!(
            patched,
            json!({"spec": {
                "template": {"spec": {"containers": [{"name": "c", "env": [{"name": "A"}]}]}},
                "replaced": {"a": 1}
            }})
        );
        assert_no_directives(&patched);
    }

    #[test]
    fn malformed_directives() {
        let live = json!({"spec": {"containers": [{"name": "c"}]}});
        assert!(matches!(
            smp_err(live.clone(), json!({"spec": {"$patch": "explode"}})),
            PatchError::Malformed(m) if m.starts_with("unknown patch type: explode")
        ));
        assert!(matches!(
            smp_err(
                live.clone(),
                json!({"spec": {"containers": [{"$patch": "explode", "name": "c"}]}})
            ),
            PatchError::Malformed(_)
        ));
        assert!(matches!(
            smp_err(
                live.clone(),
                json!({"spec": {"containers": [{"$patch": "merge", "name": "c"}]}})
            ),
            PatchError::Malformed(_)
        ));
        // an element without the merge key
        assert!(matches!(
            smp_err(live.clone(), json!({"spec": {"containers": [{"image": "x"}]}})),
            PatchError::Malformed(m) if m.contains("does not contain declared merge key: name")
        ));
        assert!(matches!(
            smp_err(
                live.clone(),
                json!({"spec": {"containers": [{"$patch": "delete"}]}})
            ),
            PatchError::Malformed(_)
        ));
        assert!(matches!(
            smp_err(live.clone(), json!({"spec": {"containers": ["c"]}})),
            PatchError::Malformed(_)
        ));
        assert!(matches!(
            smp_err(
                json!({"metadata": {"finalizers": ["x"]}}),
                json!({"metadata": {"finalizers": [{"a": 1}]}})
            ),
            PatchError::Malformed(_)
        ));
        assert!(matches!(
            smp_err(live.clone(), json!([1])),
            PatchError::Malformed(_)
        ));
        assert!(matches!(
            apply_strategic_merge_patch(&json!([]), &json!({}), &BuiltinSchema),
            Err(PatchError::CannotApply(_))
        ));
        // $patch: merge on a map is accepted
        assert_eq!(
            smp(live.clone(), json!({"spec": {"$patch": "merge", "x": 1}})),
            json!({"spec": {"containers": [{"name": "c"}], "x": 1}})
        );
        // a live list holding something other than maps cannot be merged by key
        assert!(matches!(
            smp_err(
                json!({"spec": {"containers": ["oops"]}}),
                json!({"spec": {"containers": [{"name": "c"}]}})
            ),
            PatchError::CannotApply(_)
        ));
    }

    fn arbitrary_json() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (0i64..4).prop_map(|n| json!(n)),
            "[xy]".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map("[abc]", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        /// Without directives and with every list atomic, a strategic merge patch is a JSON
        /// merge patch.
        #[test]
        fn without_directives_it_is_a_merge_patch(
            target in proptest::collection::btree_map("[abc]", arbitrary_json(), 0..4),
            patch in proptest::collection::btree_map("[abc]", arbitrary_json(), 0..4),
        ) {
            let target = Value::Object(target.into_iter().collect());
            let patch = Value::Object(patch.into_iter().collect());
            let strategic = apply_strategic_merge_patch(&target, &patch, &MergePatchSchema);
            let merge = crate::patch::apply_merge_patch(&target, &patch);
            proptest::prop_assert_eq!(strategic, merge);
        }
    }

    #[test]
    fn root_directives() {
        assert_eq!(smp(json!({"a": 1}), json!({"$patch": "delete"})), json!({}));
        assert_eq!(smp(json!({"a": 1}), json!({})), json!({"a": 1}));
    }
}
