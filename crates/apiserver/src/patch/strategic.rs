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
        // CRD and CSR conditions have no patch strategy upstream, unlike every other status.
        "conditions"
            if parent == "status"
                && !matches!(
                    kind,
                    Some("CustomResourceDefinition" | "CertificateSigningRequest")
                ) =>
        {
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
mod tests;
