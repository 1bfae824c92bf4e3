//! Reads: get, list (selectors, pagination, resourceVersion semantics) and watch.

use super::*;

impl Registry {
    pub async fn get(
        &self,
        resource: &ResourceType,
        namespace: Option<&str>,
        name: &str,
    ) -> ApiResult<Value> {
        let key = resource.object_key(namespace, name);
        let (kv, _) = self.store.get(key.as_bytes()).await?;
        let kv = kv.ok_or_else(|| ApiError::not_found(target(resource, name)))?;
        Ok(served(
            resource,
            self.decode_in_request_version(resource, &kv).await?,
        ))
    }

    /// api-surface §5: a consistent list at one revision, filtered by selectors, paginated
    /// with `limit`/`continue` so that every page is read at the first page's revision.
    pub async fn list(
        &self,
        resource: &ResourceType,
        namespace: Option<&str>,
        options: &ListOptions,
    ) -> ApiResult<Value> {
        let (labels, fields) = parse_selectors(resource, options)?;
        let collection = resource.collection_prefix(namespace);
        let full_range = prefix_range(collection.as_bytes());

        let (mut revision, mut start) =
            match options.continue_token.as_deref().filter(|t| !t.is_empty()) {
                Some(token) => {
                    let token = decode_continue(token)?;
                    if !token.start.starts_with(&collection) {
                        return Err(ApiError::bad_request(
                            "continue key does not belong to this collection",
                        ));
                    }
                    (token.rv, token.start.into_bytes())
                }
                None => (self.list_revision(options).await?, full_range.start.clone()),
            };

        // A selector on one name within one namespace (what `kubectl wait` and kube-rs
        // `await_condition` send) reads that key alone rather than scanning the collection.
        let mut end = full_range.end.clone();
        if let Some(name) = fields.as_ref().and_then(FieldSelector::single_name)
            && (namespace.is_some() || !resource.namespaced)
            && options.continue_token.is_none()
        {
            start = resource.object_key(namespace, name).into_bytes();
            end = start.clone();
            end.push(0);
        }

        let mut items = Vec::new();
        let mut next_start: Option<Vec<u8>> = None;
        let page = if options.limit == 0 {
            0
        } else {
            options.limit.max(1)
        };
        loop {
            let batch_limit = if page == 0 {
                0
            } else {
                (page - items.len()).max(page / 2).max(16)
            };
            let response = self
                .store
                .range(RangeRequest { range: start.clone()..end.clone(), limit: batch_limit, revision })
                .await
                .map_err(|e| match e {
                    finale_store::StoreError::Compacted { .. } if options.continue_token.is_some() => ApiError::expired(
                        "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
                    ),
                    other => other.into(),
                })?;
            revision = response.revision;
            let mut last_key = None;
            for kv in &response.kvs {
                last_key = Some(kv.key.clone());
                let object = decode_as(resource, kv)?;
                if matches_selectors(&object, labels.as_ref(), fields.as_ref()) {
                    items.push(object);
                    if page != 0 && items.len() == page {
                        // Stop exactly at the limit; resume after this key.
                        let mut resume = kv.key.clone();
                        resume.push(0);
                        next_start = Some(resume);
                        break;
                    }
                }
            }
            if next_start.is_some() {
                // Only hand out a token if something may follow.
                let after = next_start.clone().unwrap_or_default();
                let probe = self
                    .store
                    .range(RangeRequest {
                        range: after.clone()..end.clone(),
                        limit: 1,
                        revision,
                    })
                    .await?;
                if probe.kvs.is_empty() {
                    next_start = None;
                }
                break;
            }
            match (response.more, last_key) {
                (true, Some(mut key)) => {
                    key.push(0);
                    start = key;
                }
                _ => break,
            }
        }

        // A webhook converts the page in one review, before apiVersion leaves the items.
        let mut items = self.list_to_request_version(resource, items).await?;
        for item in &mut items {
            strip_type_meta(item);
        }
        let mut metadata = json!({"resourceVersion": revision.to_string()});
        if let Some(next) = next_start {
            metadata["continue"] = json!(encode_continue(&ContinueToken {
                rv: revision,
                start: String::from_utf8_lossy(&next).into_owned(),
            }));
        }
        Ok(json!({
            "kind": resource.list_kind,
            "apiVersion": resource.api_version(),
            "metadata": metadata,
            "items": items,
        }))
    }

    /// Which revision a list (first page) reads at: api-surface §5 `resourceVersion` rules.
    pub(super) async fn list_revision(&self, options: &ListOptions) -> ApiResult<Revision> {
        let requested = options
            .resource_version
            .as_deref()
            .filter(|rv| !rv.is_empty());
        match (
            options
                .resource_version_match
                .as_deref()
                .filter(|m| !m.is_empty()),
            requested,
        ) {
            (Some(_), None) => Err(ApiError::bad_request(
                "resourceVersionMatch is forbidden unless resourceVersion is provided",
            )),
            (Some("Exact"), Some(rv)) => {
                let rv = parse_resource_version(rv, "resourceVersion")?;
                if rv == 0 {
                    return Err(ApiError::bad_request(
                        "resourceVersionMatch \"Exact\" is forbidden for resourceVersion \"0\"",
                    ));
                }
                Ok(rv)
            }
            (Some("NotOlderThan") | None, Some(rv)) => {
                let rv = parse_resource_version(rv, "resourceVersion")?;
                let current = self.store.current_revision().await?;
                if rv > current {
                    return Err(finale_store::StoreError::FutureRevision {
                        requested: rv,
                        current,
                    }
                    .into());
                }
                Ok(0)
            }
            (Some(other), Some(_)) => Err(ApiError::bad_request(format!(
                "resourceVersionMatch {other:?} is not supported: use \"Exact\" or \"NotOlderThan\""
            ))),
            (None, None) => Ok(0),
        }
    }

    /// A watch for an in-process consumer: the changes' objects, no encoded lines.
    pub async fn watch(
        &self,
        resource: Arc<ResourceType>,
        namespace: Option<&str>,
        options: &ListOptions,
        send_initial_events: bool,
    ) -> ApiResult<WatchStream> {
        self.open_watch(resource, namespace, options, send_initial_events, false)
            .await
    }

    /// A watch for a client that reads plain JSON events: each change also carries its
    /// encoded line, shared with the other watchers ([`crate::watch_cache::WatchItem::Change`]).
    pub async fn watch_json_lines(
        &self,
        resource: Arc<ResourceType>,
        namespace: Option<&str>,
        options: &ListOptions,
        send_initial_events: bool,
    ) -> ApiResult<WatchStream> {
        self.open_watch(resource, namespace, options, send_initial_events, true)
            .await
    }

    async fn open_watch(
        &self,
        resource: Arc<ResourceType>,
        namespace: Option<&str>,
        options: &ListOptions,
        send_initial_events: bool,
        json_lines: bool,
    ) -> ApiResult<WatchStream> {
        let labels = parse_label_selector(options.label_selector.as_deref())?;
        let fields = parse_field_selector(&resource, options.field_selector.as_deref())?;
        let after = match options
            .resource_version
            .as_deref()
            .filter(|rv| !rv.is_empty())
        {
            Some(rv) => Some(parse_resource_version(rv, "resourceVersion")?).filter(|rv| *rv > 0),
            None => None,
        };
        // Without a starting revision (or with sendInitialEvents) the watch begins with the
        // current state as ADDED events, read at one revision.
        let initial = if after.is_none() || send_initial_events {
            let snapshot = self
                .list(
                    &resource,
                    namespace,
                    &ListOptions {
                        label_selector: options.label_selector.clone(),
                        field_selector: options.field_selector.clone(),
                        ..ListOptions::default()
                    },
                )
                .await?;
            let revision = snapshot
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .and_then(|rv| rv.parse().ok())
                .unwrap_or(0);
            let items = snapshot
                .get("items")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            Some((items, revision))
        } else {
            None
        };
        let (initial_objects, after_revision) = match initial {
            Some((items, revision)) => (Some(items), revision),
            None => (None, after.unwrap_or(0)),
        };
        let stream = self.watch_cache.watch(WatchRequest {
            resource: Arc::clone(&resource),
            namespace: namespace.map(str::to_string),
            labels,
            fields,
            after_revision,
            initial_objects,
            send_initial_events_end: send_initial_events,
            json_lines,
        });
        Ok(self.convert_watch(resource, stream))
    }
}

/// The label and field selectors of a list or watch of `resource`, parsed and checked as
/// upstream checks them (a 400 `Status` naming what is wrong).
pub fn parse_selectors(
    resource: &ResourceType,
    options: &ListOptions,
) -> ApiResult<(Option<LabelSelector>, Option<FieldSelector>)> {
    Ok((
        parse_label_selector(options.label_selector.as_deref())?,
        parse_field_selector(resource, options.field_selector.as_deref())?,
    ))
}

pub(super) fn parse_label_selector(selector: Option<&str>) -> ApiResult<Option<LabelSelector>> {
    selector
        .filter(|s| !s.trim().is_empty())
        .map(|s| LabelSelector::parse(s).map_err(|e| ApiError::bad_request(e.to_string())))
        .transpose()
}

pub(super) fn parse_field_selector(
    resource: &ResourceType,
    selector: Option<&str>,
) -> ApiResult<Option<FieldSelector>> {
    let Some(text) = selector.filter(|s| !s.trim().is_empty()) else {
        return Ok(None);
    };
    let parsed = FieldSelector::parse(text).map_err(|e| ApiError::bad_request(e.to_string()))?;
    parsed
        .validate_fields(&resource.supported_field_labels())
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    Ok(Some(parsed.with_paths(|label| resource.field_path(label))))
}
