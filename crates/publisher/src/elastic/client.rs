//! The HTTP side of the Elasticsearch sink: the index mappings (created, extended by new
//! columns, a type change refused with how to reindex) and `_bulk` requests, whose per-item
//! outcomes are sorted by what happens next: done (created, updated, deleted; a delete of a
//! missing document), a version conflict (an older record than the index has: counted, not an
//! error), retried (429, 5xx), or a stop naming the index, the id and Elasticsearch's reason.
//!
//! A truncate record is applied by a scroll over the index's ids and versions and a bulk delete
//! of those its partition wrote before it ([`external_version`]).
//!
//! Plain `reqwest` rather than the `elasticsearch` crate: the sink needs a few endpoints
//! (`_bulk`, `_mapping`, index creation, a scroll), the official client is a large alpha-versioned crate
//! whose builders generate every API, and reqwest is already here for the registry (same TLS,
//! same timeouts, one HTTP stack).
//!
//! References: <https://www.elastic.co/guide/en/elasticsearch/reference/current/docs-bulk.html>,
//! <https://www.elastic.co/guide/en/elasticsearch/reference/current/docs-index_.html#index-versioning>.

use std::time::Duration;

use serde_json::{json, Value as Json};

use super::mapping::type_of;
use crate::config::{redact_url, ElasticsearchSection, Secret};
use crate::disposition::Disposition;

/// What went wrong with Elasticsearch.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ElasticError {
    /// No answer (refused, reset, timed out): retried.
    #[error("cannot reach Elasticsearch at {url}: {message}")]
    Unreachable {
        /// Base URL.
        url: String,
        /// Cause.
        message: String,
    },
    /// The cluster's certificate was not accepted.
    #[error(
        "Elasticsearch at {url} has a TLS certificate Sluice does not trust: {message}. Set elasticsearch.ca_file to \
         the PEM file of the CA that signed it (and check that elasticsearch.url names a host on the certificate)"
    )]
    Untrusted {
        /// Base URL.
        url: String,
        /// Cause.
        message: String,
    },
    /// An answer other than success to a whole request.
    #[error("Elasticsearch answered {status} to {what}: {body}{hint}")]
    Status {
        /// The request.
        what: String,
        /// HTTP status.
        status: u16,
        /// The body (shortened).
        body: String,
        /// What to do, when known.
        hint: &'static str,
    },
    /// A field whose type the index has differently.
    #[error(
        "index {index} maps field {field:?} as {have}, but the table's schema now needs {want}: Elasticsearch cannot \
         change a field's type in place. Reindex: give the table a new index ([elasticsearch.indices] \
         \"{table}\" = \"{}\"; a new index is mapped from the table's latest schema), then fill it: reset the \
         sink's consumer group on the table's topic to the earliest offset (kafka-consumer-groups --reset-offsets \
         --to-earliest), or, if the topic no longer holds every row, `sluice snapshot --table {table}`; then point \
         your alias or queries at it and delete the old index (README, \"Reindexing\")",
        next_index(index)
    )]
    Mapping {
        /// The table (`db.table`).
        table: String,
        /// The index.
        index: String,
        /// The field.
        field: String,
        /// Its type in the index.
        have: String,
        /// Its type now.
        want: String,
    },
    /// An index that holds the table's latest schema cannot hold the records an older one wrote
    /// (a change no wider type holds: VARCHAR to INT by DROP and CREATE): another index would
    /// not either.
    #[error(
        "index {index} maps field {field:?} as table {table}'s latest schema does, {have}, which \
         the records written before the table's last type change cannot go into (they need {want}): fill it from a \
         snapshot instead of the old records: move the sink's consumer group on the table's topic to its end \
         (kafka-consumer-groups --reset-offsets --to-latest), then `sluice snapshot --table {table}` (README, \
         \"Reindexing\")"
    )]
    OlderRecords {
        /// The table (`db.table`).
        table: String,
        /// The index.
        index: String,
        /// The field.
        field: String,
        /// Its type in the index.
        have: String,
        /// The older records' type.
        want: String,
    },
    /// A document Elasticsearch refused (not a version conflict).
    #[error("Elasticsearch refused {action} of document {id:?} in index {index} ({status} {kind}): {reason}")]
    Item {
        /// `index` or `delete`.
        action: String,
        /// The index.
        index: String,
        /// The `_id`.
        id: String,
        /// The item's status.
        status: u16,
        /// Elasticsearch's error type.
        kind: String,
        /// Elasticsearch's reason.
        reason: String,
    },
    /// The client could not be set up.
    #[error("{0}")]
    Setup(String),
}

impl ElasticError {
    /// What the sink does next: retry what may pass (no answer, 429, 5xx), stop for the rest.
    pub fn disposition(&self) -> Disposition {
        match self {
            ElasticError::Unreachable { .. } => Disposition::Retry,
            ElasticError::Status { status, .. } if *status == 429 || *status >= 500 => Disposition::Retry,
            _ => Disposition::Stop,
        }
    }
}

/// How one item of a bulk request came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Item {
    /// Created or replaced.
    Indexed,
    /// Deleted (or already absent: a delete of a missing document is done too).
    Deleted,
    /// A version conflict: the index has a newer version of the document (a record delivered
    /// again, or an older one after a newer): not applied, and not an error.
    Conflict,
    /// To send again (429, 5xx).
    Retry,
}

/// An Elasticsearch (or OpenSearch) cluster.
#[derive(Debug, Clone)]
pub struct Elastic {
    base: String,
    http: reqwest::Client,
    auth: Auth,
    timeout: Duration,
}

#[derive(Debug, Clone)]
enum Auth {
    None,
    Basic(String, Option<Secret>),
    ApiKey(Secret),
}

impl Elastic {
    /// A client for `[elasticsearch]`.
    ///
    /// # Errors
    /// An unreadable password, key or CA file.
    pub fn new(es: &ElasticsearchSection) -> Result<Elastic, ElasticError> {
        let http = crate::http::client(es.ca_file.as_deref(), "elasticsearch.ca_file", es.request_timeout)
            .map_err(ElasticError::Setup)?;
        let setup = |e: crate::config::ConfigError| ElasticError::Setup(e.to_string());
        let auth = match (&es.username, es.api_key().map_err(setup)?) {
            (_, Some(key)) => Auth::ApiKey(key),
            (Some(user), None) => Auth::Basic(user.clone(), es.password().map_err(setup)?),
            (None, None) => Auth::None,
        };
        Ok(Elastic { base: es.url.trim_end_matches('/').to_string(), http, auth, timeout: es.request_timeout })
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let req = self.http.request(method, format!("{}{path}", self.base));
        match &self.auth {
            Auth::None => req,
            Auth::Basic(user, password) => req.basic_auth(user, password.as_ref().map(Secret::expose)),
            Auth::ApiKey(key) => req.header("Authorization", format!("ApiKey {}", key.expose())),
        }
    }

    /// Sends a request; the status and the body as JSON (Null when it is not JSON).
    async fn send(&self, req: reqwest::RequestBuilder, what: &str) -> Result<(u16, Json), ElasticError> {
        let url = redact_url(&self.base);
        let failed = |e: reqwest::Error| {
            let message = redact_url(&crate::http::cause_chain(&e, self.timeout));
            if crate::http::certificate_refused(&e) {
                ElasticError::Untrusted { url: url.clone(), message }
            } else {
                ElasticError::Unreachable { url: url.clone(), message: format!("{what}: {message}") }
            }
        };
        let resp = req.send().await.map_err(failed)?;
        let status = resp.status().as_u16();
        let bytes = resp.bytes().await.map_err(failed)?;
        let body = serde_json::from_slice(&bytes).unwrap_or(Json::Null);
        if status == 401 || status == 403 {
            return Err(ElasticError::Status {
                what: what.to_string(),
                status,
                body: shorten(&String::from_utf8_lossy(&bytes)),
                hint: ": check elasticsearch.username and its password (or api_key), and the user's privileges on \
                       the indices (create_index, manage, write)",
            });
        }
        if status >= 500 || status == 429 {
            return Err(ElasticError::Status {
                what: what.to_string(),
                status,
                body: shorten(&String::from_utf8_lossy(&bytes)),
                hint: "",
            });
        }
        Ok((status, body))
    }

    /// `GET /`: the cluster's name and version (a check that it answers, with the settings).
    ///
    /// # Errors
    /// As every request.
    pub async fn info(&self) -> Result<String, ElasticError> {
        let (status, body) = self.send(self.request(reqwest::Method::GET, "/"), "GET /").await?;
        if status != 200 {
            return Err(ElasticError::Status {
                what: "GET /".into(),
                status,
                body: shorten(&body.to_string()),
                hint: "",
            });
        }
        let name = body.pointer("/version/distribution").and_then(Json::as_str).unwrap_or("Elasticsearch");
        let version = body.pointer("/version/number").and_then(Json::as_str).unwrap_or("?");
        Ok(format!("{name} {version}"))
    }

    /// Makes sure `index` (of table `table`) exists with every field of `mapping`: creates it
    /// (with `create_with` when given: the table's latest schema's mapping, so that replaying
    /// older records into a new index does not fix older, narrower types), or adds the fields
    /// it lacks. Returns the fields added (all of them for a new index).
    ///
    /// # Errors
    /// [`ElasticError::Mapping`] for a field the index has with a type that cannot hold the
    /// values `mapping` wants it for; request errors.
    pub async fn ensure_mapping(
        &self,
        table: &str,
        index: &str,
        mapping: &Json,
        create_with: Option<&Json>,
    ) -> Result<Vec<String>, ElasticError> {
        let path = format!("/{}/_mapping", encode(index));
        let (status, body) = self.send(self.request(reqwest::Method::GET, &path), &format!("GET {path}")).await?;
        let wanted = mapping.get("properties").and_then(Json::as_object).cloned().unwrap_or_default();
        if status == 404 {
            let create = format!("/{}", encode(index));
            let first = create_with.unwrap_or(mapping);
            let (status, body) = self
                .send(self.request(reqwest::Method::PUT, &create).json(&json!({"mappings": first})), "create index")
                .await?;
            let exists =
                body.pointer("/error/type").and_then(Json::as_str) == Some("resource_already_exists_exception");
            if (200..300).contains(&status) {
                let mut added: Vec<String> = first
                    .get("properties")
                    .and_then(Json::as_object)
                    .map(|p| p.keys().cloned().collect())
                    .unwrap_or_default();
                if create_with.is_some() {
                    // the record's own fields: checked against the new index, the missing added
                    added.extend(Box::pin(self.ensure_mapping(table, index, mapping, create_with)).await?);
                }
                return Ok(added);
            }
            if !exists {
                return Err(ElasticError::Status {
                    what: format!("PUT /{index}"),
                    status,
                    body: shorten(&body.to_string()),
                    hint: "",
                });
            }
            // created meanwhile (another instance): compare with its mapping
            return Box::pin(self.ensure_mapping(table, index, mapping, create_with)).await;
        }
        if status != 200 {
            return Err(ElasticError::Status {
                what: format!("GET {path}"),
                status,
                body: shorten(&body.to_string()),
                hint: "",
            });
        }
        // keyed by the concrete index (`index` may be an alias)
        let have = body
            .as_object()
            .and_then(|m| m.values().next())
            .and_then(|v| v.pointer("/mappings/properties"))
            .and_then(Json::as_object)
            .cloned()
            .unwrap_or_default();
        let mut missing = serde_json::Map::new();
        for (field, want) in &wanted {
            match have.get(field) {
                None => {
                    missing.insert(field.clone(), want.clone());
                }
                Some(h) if !holds(type_of(h), type_of(want)) => {
                    let (table, index, field) = (table.to_string(), index.to_string(), field.clone());
                    let (have, want) = (type_of(h).to_string(), type_of(want).to_string());
                    // the index holds the latest schema's type: it is the older records that
                    // do not fit, and no other index of that mapping would take them either
                    let latest = create_with.and_then(|c| c.get("properties")?.get(&field)).map(type_of);
                    return Err(if latest == Some(have.as_str()) {
                        ElasticError::OlderRecords { table, index, field, have, want }
                    } else {
                        ElasticError::Mapping { table, index, field, have, want }
                    });
                }
                Some(_) => {}
            }
        }
        if missing.is_empty() {
            return Ok(Vec::new());
        }
        let (status, body) = self
            .send(self.request(reqwest::Method::PUT, &path).json(&json!({"properties": missing})), "PUT _mapping")
            .await?;
        if !(200..300).contains(&status) {
            return Err(ElasticError::Status {
                what: format!("PUT {path}"),
                status,
                body: shorten(&body.to_string()),
                hint: ": the new columns' mapping was refused",
            });
        }
        Ok(missing.keys().cloned().collect())
    }

    /// Sends a `_bulk` request of `items` actions (NDJSON, built by [`bulk_line`]).
    ///
    /// # Errors
    /// The first refused item that is not a version conflict (nor a missing document's delete),
    /// and request errors.
    pub async fn bulk(&self, body: Vec<u8>, items: usize) -> Result<Vec<Item>, ElasticError> {
        let req =
            self.request(reqwest::Method::POST, "/_bulk").header("Content-Type", "application/x-ndjson").body(body);
        let (status, resp) = self.send(req, "POST /_bulk").await?;
        if status != 200 {
            return Err(ElasticError::Status {
                what: "POST /_bulk".into(),
                status,
                body: shorten(&resp.to_string()),
                hint: "",
            });
        }
        let list = resp.get("items").and_then(Json::as_array).map_or(&[][..], Vec::as_slice);
        if list.len() != items {
            return Err(ElasticError::Status {
                what: "POST /_bulk".into(),
                status,
                body: format!("{} items answered for {items} sent", list.len()),
                hint: "",
            });
        }
        let mut out = Vec::with_capacity(items);
        for item in list {
            let Some((action, r)) = item.as_object().and_then(|o| o.iter().next()) else {
                out.push(Item::Retry);
                continue;
            };
            let status = r.get("status").and_then(Json::as_u64).and_then(|s| u16::try_from(s).ok()).unwrap_or(0);
            out.push(match (action.as_str(), status) {
                ("delete", 200..=299 | 404) => Item::Deleted,
                (_, 200..=299) => Item::Indexed,
                (_, 409) => Item::Conflict,
                (_, 429 | 500..) => Item::Retry,
                _ => {
                    let text = |p: &str| r.pointer(p).and_then(Json::as_str).unwrap_or("").to_string();
                    let mut reason = text("/error/reason");
                    let caused = text("/error/caused_by/reason");
                    if !caused.is_empty() {
                        reason = format!("{reason}: {caused}");
                    }
                    return Err(ElasticError::Item {
                        action: action.clone(),
                        index: text("/_index"),
                        id: text("/_id"),
                        status,
                        kind: text("/error/type"),
                        reason,
                    });
                }
            });
        }
        Ok(out)
    }
}

/// A scroll over every document of an index, a page at a time.
#[derive(Debug)]
pub struct Scroll {
    id: Option<String>,
    first: Option<Vec<Hit>>,
}

/// A document as a search or a get returns it.
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    /// `_id`.
    pub id: String,
    /// `_version` (the external version: [`external_version`]).
    pub version: i64,
    /// `_source`, when asked for.
    pub source: Option<Json>,
}

impl Elastic {
    /// Opens a scroll over `index` after a refresh (so the documents indexed just before are
    /// in it), sorted by `_doc`, with ids and versions (and the sources when `source`); its
    /// first page is the first [`Elastic::next_page`]. A missing index is an empty scroll.
    ///
    /// # Errors
    /// Request errors, and an answer without hits.
    pub async fn scan(&self, index: &str, page: usize, source: bool) -> Result<Scroll, ElasticError> {
        let refresh = format!("/{}/_refresh", encode(index));
        let (status, _) = self.send(self.request(reqwest::Method::POST, &refresh), &format!("POST {refresh}")).await?;
        if status == 404 {
            return Ok(Scroll { id: None, first: Some(Vec::new()) });
        }
        let path = format!("/{}/_search?scroll=1m", encode(index));
        let body = json!({"size": page, "sort": ["_doc"], "version": true, "_source": source});
        let (status, resp) =
            self.send(self.request(reqwest::Method::POST, &path).json(&body), &format!("POST {path}")).await?;
        if status == 404 {
            return Ok(Scroll { id: None, first: Some(Vec::new()) });
        }
        let hits = page_of(status, &resp, &path)?;
        let id = resp.get("_scroll_id").and_then(Json::as_str).map(str::to_string);
        Ok(Scroll { id, first: Some(hits) })
    }

    /// Whether `index` (an index or an alias) exists: `HEAD /<index>` answers 200, or 404 when it
    /// does not (a scroll or `_mget` of a missing index answers as an empty one). `None` when the
    /// user may not ask (403: `HEAD` needs `view_index_metadata`, which a user with only `read`,
    /// enough for the reads, lacks): the reads go on as before the question was asked.
    ///
    /// # Errors
    /// Request errors, and an answer other than 200, 403 or 404.
    pub async fn index_exists(&self, index: &str) -> Result<Option<bool>, ElasticError> {
        let path = format!("/{}", encode(index));
        let what = format!("HEAD {path}");
        let (status, body) = match self.send(self.request(reqwest::Method::HEAD, &path), &what).await {
            Err(ElasticError::Status { status: 403, .. }) => {
                tracing::debug!(index, "not allowed to ask whether the index exists (view_index_metadata)");
                return Ok(None);
            }
            other => other?,
        };
        match status {
            200 => Ok(Some(true)),
            404 => Ok(Some(false)),
            _ => Err(ElasticError::Status { what, status, body: shorten(&body.to_string()), hint: "" }),
        }
    }

    /// The documents of `ids` in `index` (after a refresh), those that exist.
    ///
    /// # Errors
    /// Request errors, and an answer that is not an `_mget` answer.
    pub async fn mget(&self, index: &str, ids: &[String]) -> Result<Vec<Hit>, ElasticError> {
        let refresh = format!("/{}/_refresh", encode(index));
        let (status, _) = self.send(self.request(reqwest::Method::POST, &refresh), &format!("POST {refresh}")).await?;
        if status == 404 {
            return Ok(Vec::new());
        }
        let path = format!("/{}/_mget", encode(index));
        let (status, resp) = self
            .send(self.request(reqwest::Method::POST, &path).json(&json!({"ids": ids})), &format!("POST {path}"))
            .await?;
        let docs = resp.get("docs").and_then(Json::as_array).filter(|_| status == 200).ok_or_else(|| {
            ElasticError::Status { what: format!("POST {path}"), status, body: shorten(&resp.to_string()), hint: "" }
        })?;
        Ok(docs
            .iter()
            .filter(|d| d.get("found").and_then(Json::as_bool) == Some(true))
            .filter_map(|d| {
                Some(Hit {
                    id: d.get("_id")?.as_str()?.to_string(),
                    version: d.get("_version")?.as_i64()?,
                    source: d.get("_source").cloned(),
                })
            })
            .collect())
    }

    /// The next page of `scroll` (empty at the end; the scroll is then cleared).
    ///
    /// # Errors
    /// Request errors.
    pub async fn next_page(&self, scroll: &mut Scroll) -> Result<Vec<Hit>, ElasticError> {
        if let Some(first) = scroll.first.take() {
            if first.is_empty() {
                self.close(scroll).await;
            }
            return Ok(first);
        }
        let Some(id) = scroll.id.clone() else { return Ok(Vec::new()) };
        let path = "/_search/scroll";
        let body = json!({"scroll": "1m", "scroll_id": id});
        let (status, resp) = self.send(self.request(reqwest::Method::POST, path).json(&body), path).await?;
        let hits = page_of(status, &resp, path)?;
        scroll.id = resp.get("_scroll_id").and_then(Json::as_str).map(str::to_string).or(Some(id));
        if hits.is_empty() {
            self.close(scroll).await;
        }
        Ok(hits)
    }

    /// Clears the scroll on the cluster (best effort: it expires within a minute anyway).
    async fn close(&self, scroll: &mut Scroll) {
        if let Some(id) = scroll.id.take() {
            let req = self.request(reqwest::Method::DELETE, "/_search/scroll").json(&json!({"scroll_id": id}));
            let _ = self.send(req, "DELETE /_search/scroll").await;
        }
    }
}

/// The hits of a search answer.
fn page_of(status: u16, resp: &Json, what: &str) -> Result<Vec<Hit>, ElasticError> {
    let hits = resp.pointer("/hits/hits").and_then(Json::as_array).filter(|_| status == 200).ok_or_else(|| {
        ElasticError::Status { what: what.to_string(), status, body: shorten(&resp.to_string()), hint: "" }
    })?;
    Ok(hits
        .iter()
        .filter_map(|h| {
            Some(Hit {
                id: h.get("_id")?.as_str()?.to_string(),
                version: h.get("_version")?.as_i64()?,
                source: h.get("_source").cloned(),
            })
        })
        .collect())
}

/// A document's external version: the offset of the record that wrote it and its partition,
/// `offset << 12 | partition`. Every key lives in one partition, so a document's versions
/// compare as its records' offsets (an older record never replaces a newer one), and the
/// partition is in the version so that a truncate record of one partition removes exactly the
/// documents written before it there (its other partitions have truncate records of their own).
/// None for a partition of 4096 or more, or an offset past 2^51.
pub fn external_version(partition: i32, offset: i64) -> Option<i64> {
    let p = i64::from(partition);
    ((0..PARTITIONS_MAX).contains(&p) && (0..1 << 51).contains(&offset)).then_some(offset << 12 | p)
}

/// The partition and offset of an [`external_version`].
pub fn version_parts(version: i64) -> (i32, i64) {
    (i32::try_from(version & (PARTITIONS_MAX - 1)).unwrap_or(0), version >> 12)
}

/// How many partitions a synced topic may have ([`external_version`]).
pub const PARTITIONS_MAX: i64 = 4096;

/// Appends one bulk action: `index` with the document (a serialized JSON object), or `delete`,
/// both with the external version `version` ([`external_version`]).
pub fn bulk_line(out: &mut Vec<u8>, index: &str, id: &str, version: i64, doc: Option<&[u8]>) {
    let meta = json!({"_index": index, "_id": id, "version": version, "version_type": "external"});
    let line = match doc {
        Some(_) => json!({ "index": meta }),
        None => json!({ "delete": meta }),
    };
    // serde_json writes no newline inside a value, as NDJSON needs
    out.extend_from_slice(line.to_string().as_bytes());
    out.push(b'\n');
    if let Some(d) = doc {
        out.extend_from_slice(d);
        out.push(b'\n');
    }
}

/// An index name for a URL path (names are lower-case `[a-z0-9._-]` here, but be safe).
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"._-".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// True when a field Elasticsearch maps as `have` takes the values a schema mapping it as
/// `want` writes: the same type, or a wider one (the records a table's older schema wrote, in
/// an index mapped from its newer one: an INT column since made BIGINT, a FLOAT made DOUBLE).
fn holds(have: &str, want: &str) -> bool {
    have == want || matches!((have, want), ("long", "integer") | ("double", "float"))
}

/// The index name a reindex suggests after `index`: `-v2`, or the next number after one.
fn next_index(index: &str) -> String {
    if let Some((base, n)) = index.rsplit_once("-v") {
        if let Some(next) = n.parse::<u32>().ok().and_then(|n| n.checked_add(1)) {
            return format!("{base}-v{next}");
        }
    }
    format!("{index}-v2")
}

fn shorten(s: &str) -> String {
    crate::console::shortened(s, 500).into_owned()
}

/// How long to wait before trying again after `attempt` failures (1 s doubling to 30 s).
pub fn backoff(attempt: u32) -> Duration {
    Duration::from_secs(1u64 << attempt.min(5)).min(Duration::from_secs(30))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bulk_lines_are_ndjson_with_external_versions() {
        let mut out = Vec::new();
        let doc = serde_json::to_vec(&json!({"id": 7, "note": "line\nbreak"})).unwrap();
        bulk_line(&mut out, "sluice.shop.t", "[7,\"k\"]", 42, Some(&doc));
        bulk_line(&mut out, "sluice.shop.t", "8", 43, None);
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        let meta: Json = serde_json::from_str(lines[0]).unwrap();
        assert_eq!(
            meta,
            json!({"index": {"_index": "sluice.shop.t", "_id": "[7,\"k\"]", "version": 42, "version_type": "external"}})
        );
        assert_eq!(serde_json::from_str::<Json>(lines[1]).unwrap(), json!({"id": 7, "note": "line\nbreak"}));
        assert_eq!(serde_json::from_str::<Json>(lines[2]).unwrap()["delete"]["version"], 43);
        assert!(text.ends_with('\n'));
    }

    fn section(url: &str) -> ElasticsearchSection {
        toml::from_str(&format!("url = \"{url}\"")).unwrap()
    }

    /// The request head a client sends, answered with `{}` (a listener on loopback).
    async fn head_of(es: ElasticsearchSection) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = vec![0u8; 4096];
            let n = s.read(&mut buf).await.unwrap();
            let body = "{}";
            let head =
                format!("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n", body.len());
            s.write_all(format!("{head}{body}").as_bytes()).await.unwrap();
            String::from_utf8_lossy(&buf[..n]).to_string()
        });
        let es = ElasticsearchSection { url: format!("http://127.0.0.1:{port}"), ..es };
        Elastic::new(&es).unwrap().info().await.unwrap();
        server.await.unwrap()
    }

    /// A server on loopback that answers each request with the next of `answers` (status and
    /// body) and hands back the request lines it got.
    async fn answering(answers: Vec<(u16, &'static str)>) -> (String, tokio::task::JoinHandle<Vec<String>>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
        let server = tokio::spawn(async move {
            let mut lines = Vec::new();
            for (status, body) in answers {
                let (mut s, _) = listener.accept().await.unwrap();
                let mut buf = vec![0u8; 4096];
                let n = s.read(&mut buf).await.unwrap();
                lines.push(String::from_utf8_lossy(&buf[..n]).lines().next().unwrap_or_default().to_string());
                let head = format!(
                    "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: \
                     close\r\n\r\n",
                    body.len()
                );
                s.write_all(format!("{head}{body}").as_bytes()).await.unwrap();
            }
            lines
        });
        (url, server)
    }

    /// An index that is there, one that is not (404, as Elasticsearch answers `HEAD` of a
    /// missing index: verify says so instead of calling every row missing), and an answer that
    /// is neither.
    #[tokio::test]
    async fn whether_an_index_exists() {
        let (url, server) = answering(vec![(200, ""), (404, ""), (403, ""), (400, "")]).await;
        let es = Elastic::new(&section(&url)).unwrap();
        assert_eq!(es.index_exists("sluice.shop.orders").await.unwrap(), Some(true));
        assert_eq!(es.index_exists("orders-v2").await.unwrap(), Some(false));
        // a user with only `read` may not ask: not known, not an error
        assert_eq!(es.index_exists("hidden").await.unwrap(), None);
        let e = es.index_exists("bad").await.unwrap_err();
        assert!(matches!(e, ElasticError::Status { status: 400, .. }), "{e}");
        let lines = server.await.unwrap();
        assert_eq!(
            lines,
            [
                "HEAD /sluice.shop.orders HTTP/1.1",
                "HEAD /orders-v2 HTTP/1.1",
                "HEAD /hidden HTTP/1.1",
                "HEAD /bad HTTP/1.1"
            ]
        );
    }

    /// Basic auth or an API key, as configured; never both.
    #[tokio::test]
    async fn credentials_go_in_the_authorization_header() {
        let dir = tempfile::tempdir().unwrap();
        let pw = dir.path().join("pw");
        std::fs::write(&pw, "s3cret\n").unwrap();
        let mut es = section("http://x");
        es.username = Some("sluice".into());
        es.password_file = Some(pw.clone());
        let head = head_of(es).await;
        // base64("sluice:s3cret")
        assert!(head.contains("authorization: Basic c2x1aWNlOnMzY3JldA=="), "{head}");
        let mut es = section("http://x");
        es.api_key_file = Some(pw);
        let head = head_of(es).await;
        assert!(head.contains("authorization: ApiKey s3cret"), "{head}");
        assert!(!head_of(section("http://x")).await.contains("authorization"));
    }

    /// Over `https://` with a private CA: trusted with `ca_file`, refused (a stop) without it.
    /// The server is the test registry served over TLS (it answers `GET /` with `{}`).
    #[tokio::test]
    async fn https_with_a_private_ca() {
        let (server, _dir, ca_file) = crate::http::test_https_server().await;
        let mut es = section(&format!("https://localhost:{}", server.addr.port()));
        assert!(Elastic::new(&es).unwrap().info().await.is_err_and(|e| matches!(e, ElasticError::Untrusted { .. })
            && e.disposition() == Disposition::Stop
            && e.to_string().contains("Set elasticsearch.ca_file")));
        es.ca_file = Some(ca_file);
        Elastic::new(&es).unwrap().info().await.unwrap();
    }

    #[test]
    fn versions_hold_offset_and_partition() {
        assert_eq!(external_version(0, 0), Some(0));
        assert_eq!(external_version(3, 10), Some(10 * 4096 + 3));
        assert_eq!(version_parts(10 * 4096 + 3), (3, 10));
        assert_eq!(external_version(4096, 1), None);
        assert_eq!(external_version(-1, 1), None);
        assert_eq!(external_version(0, 1 << 51), None);
        let top = external_version(4095, (1 << 51) - 1).unwrap();
        assert_eq!(version_parts(top), (4095, (1 << 51) - 1));
        // within a partition, versions order as offsets; a truncate at (p, T) is newer than
        // every record of p before it and older than every one after it
        let (p, t) = (2, 500);
        let truncate = external_version(p, t).unwrap();
        assert!(external_version(p, t - 1).unwrap() < truncate);
        assert!(external_version(p, t + 1).unwrap() > truncate);
    }

    #[test]
    fn errors_by_what_happens_next() {
        let status = |s| ElasticError::Status { what: "x".into(), status: s, body: String::new(), hint: "" };
        assert_eq!(status(503).disposition(), Disposition::Retry);
        assert_eq!(status(429).disposition(), Disposition::Retry);
        assert_eq!(status(400).disposition(), Disposition::Stop);
        let e = ElasticError::Mapping {
            table: "shop.ty".into(),
            index: "sluice.shop.ty-v2".into(),
            field: "f".into(),
            have: "long".into(),
            want: "keyword".into(),
        };
        assert_eq!(e.disposition(), Disposition::Stop);
        let text = e.to_string();
        assert!(text.contains("Reindex"), "{text}");
        // the table and the next index named, not placeholders
        assert!(text.contains("\"shop.ty\" = \"sluice.shop.ty-v3\"") && text.contains("--table shop.ty`"), "{text}");
        assert_eq!(next_index("i"), "i-v2");
        assert!(holds("long", "integer") && holds("double", "float") && holds("text", "text"));
        assert!(!holds("integer", "long") && !holds("keyword", "long"));
        assert_eq!(backoff(0), Duration::from_secs(1));
        assert_eq!(backoff(9), Duration::from_secs(30));
    }
}
