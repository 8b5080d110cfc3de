//! A small, in-memory Confluent-compatible Schema Registry for Sluice's integration tests.
//!
//! It serves the subset of the Confluent REST API that the publisher and its tests use, answers
//! with Confluent's status codes, error codes and message shapes, and decides compatibility with
//! apache-avro's schema resolution checker (never by comparing strings). Only AVRO schemas without
//! references are supported. State lives in memory and is optionally persisted to a JSON file so a
//! restarted registry keeps its ids.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use apache_avro::error::CompatibilityError;
use apache_avro::schema_compatibility::{Compatibility, SchemaCompatibility};
use apache_avro::Schema;
use axum::body::Bytes;
use axum::extract::{Path as UrlPath, Query, Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// The content type the registry answers with by default (Confluent's v1 API type).
pub const CONTENT_TYPE_V1: &str = "application/vnd.schemaregistry.v1+json";
const CONTENT_TYPE_ANY_VERSION: &str = "application/vnd.schemaregistry+json";
const CONTENT_TYPE_JSON: &str = "application/json";

/// A subject's or the registry's compatibility level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Level {
    None,
    #[default]
    Backward,
    BackwardTransitive,
    Forward,
    ForwardTransitive,
    Full,
    FullTransitive,
}

impl Level {
    fn parse(s: &str) -> Option<Level> {
        serde_json::from_value(Value::String(s.to_ascii_uppercase())).ok()
    }

    fn name(self) -> &'static str {
        match self {
            Level::None => "NONE",
            Level::Backward => "BACKWARD",
            Level::BackwardTransitive => "BACKWARD_TRANSITIVE",
            Level::Forward => "FORWARD",
            Level::ForwardTransitive => "FORWARD_TRANSITIVE",
            Level::Full => "FULL",
            Level::FullTransitive => "FULL_TRANSITIVE",
        }
    }

    fn transitive(self) -> bool {
        matches!(self, Level::BackwardTransitive | Level::ForwardTransitive | Level::FullTransitive)
    }

    /// The new schema must read data written with the old ones.
    fn backward(self) -> bool {
        matches!(self, Level::Backward | Level::BackwardTransitive | Level::Full | Level::FullTransitive)
    }

    /// The old schemas must read data written with the new one.
    fn forward(self) -> bool {
        matches!(self, Level::Forward | Level::ForwardTransitive | Level::Full | Level::FullTransitive)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct VersionEntry {
    version: u32,
    id: u32,
    #[serde(default)]
    deleted: bool,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct SubjectState {
    #[serde(default)]
    compatibility: Option<Level>,
    #[serde(default)]
    versions: Vec<VersionEntry>,
}

impl SubjectState {
    fn live(&self) -> impl DoubleEndedIterator<Item = &VersionEntry> {
        self.versions.iter().filter(|v| !v.deleted)
    }

    fn exists(&self) -> bool {
        self.live().next().is_some()
    }
}

/// Everything the registry knows; this is also the `--data` file's format.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Store {
    #[serde(default)]
    compatibility: Level,
    next_id: u32,
    /// Schema id → the schema text as first registered.
    schemas: BTreeMap<u32, String>,
    subjects: BTreeMap<String, SubjectState>,
}

impl Default for Store {
    fn default() -> Self {
        Store { compatibility: Level::Backward, next_id: 1, schemas: BTreeMap::new(), subjects: BTreeMap::new() }
    }
}

struct Inner {
    store: Store,
    /// Normalised schema → id, rebuilt from `store.schemas` on load.
    by_canonical: HashMap<String, u32>,
    data: Option<PathBuf>,
}

impl Inner {
    fn persist(&self) -> Result<(), ApiError> {
        let Some(path) = &self.data else { return Ok(()) };
        let text = serde_json::to_vec_pretty(&self.store).map_err(|e| ApiError::internal(e.to_string()))?;
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, text)
            .and_then(|()| std::fs::rename(&tmp, path))
            .map_err(|e| ApiError::internal(format!("could not persist to {}: {e}", path.display())))
    }
}

/// The registry's shared state; cheap to clone.
#[derive(Clone)]
pub struct Registry {
    inner: Arc<Mutex<Inner>>,
}

impl Registry {
    /// An empty registry kept only in memory.
    pub fn in_memory() -> Registry {
        Registry::from_store(Store::default(), None)
    }

    /// A registry persisted to `path`: loads it when it exists, writes it after every change.
    pub fn with_data_file(path: &Path) -> anyhow::Result<Registry> {
        let store = match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| anyhow::anyhow!("{} is not a registry data file: {e}", path.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Store::default(),
            Err(e) => return Err(anyhow::anyhow!("cannot read {}: {e}", path.display())),
        };
        Ok(Registry::from_store(store, Some(path.to_path_buf())))
    }

    fn from_store(store: Store, data: Option<PathBuf>) -> Registry {
        let by_canonical = store
            .schemas
            .iter()
            .filter_map(|(id, text)| Some((normalise(&serde_json::from_str(text).ok()?), *id)))
            .collect();
        Registry { inner: Arc::new(Mutex::new(Inner { store, by_canonical, data })) }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A running registry bound to a local address.
pub struct Server {
    pub addr: SocketAddr,
    handle: tokio::task::JoinHandle<()>,
}

impl Server {
    /// Binds `listen` (port 0 picks a free port) and serves `registry` on a background task.
    pub async fn spawn(listen: SocketAddr, registry: Registry) -> anyhow::Result<Server> {
        let listener = tokio::net::TcpListener::bind(listen).await?;
        let addr = listener.local_addr()?;
        let handle = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, router(registry)).await {
                tracing::error!(error = %e, "registry server stopped");
            }
        });
        Ok(Server { addr, handle })
    }

    /// Like [`Server::spawn`], over TLS with the PEM certificate chain and key given (tests of
    /// clients' `https://` settings). Handshakes that fail are logged and dropped.
    pub async fn spawn_tls(
        listen: SocketAddr,
        registry: Registry,
        cert_chain_pem: &[u8],
        key_pem: &[u8],
    ) -> anyhow::Result<Server> {
        use rustls::pki_types::pem::PemObject as _;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let certs = CertificateDer::pem_slice_iter(cert_chain_pem).collect::<Result<Vec<_>, _>>()?;
        let key = PrivateKeyDer::from_pem_slice(key_pem)?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(certs, key)?;
        let listener = tokio::net::TcpListener::bind(listen).await?;
        let addr = listener.local_addr()?;
        let tls = TlsListener { tcp: listener, acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)) };
        let handle = tokio::spawn(async move {
            if let Err(e) = axum::serve(tls, router(registry)).await {
                tracing::error!(error = %e, "registry server stopped");
            }
        });
        Ok(Server { addr, handle })
    }

    /// `http://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops serving (connections in flight are dropped).
    pub async fn stop(self) {
        self.handle.abort();
        let _ = self.handle.await;
    }
}

/// A TCP listener whose connections are TLS-accepted before axum sees them.
struct TlsListener {
    tcp: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let (stream, peer) = match self.tcp.accept().await {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    continue;
                }
            };
            match self.acceptor.accept(stream).await {
                Ok(tls) => return (tls, peer),
                Err(e) => tracing::info!(%peer, error = %e, "TLS handshake failed"),
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.tcp.local_addr()
    }
}

/// The HTTP routes.
pub fn router(registry: Registry) -> Router {
    Router::new()
        .route("/", get(|| async { Reply::ok(json!({})) }))
        .route("/schemas/types", get(|| async { Reply::ok(json!(["AVRO"])) }))
        .route("/schemas/ids/{id}", get(get_schema_by_id))
        .route("/schemas/ids/{id}/versions", get(get_id_versions))
        .route("/subjects", get(list_subjects))
        .route("/subjects/{subject}", post(lookup).delete(delete_subject))
        .route("/subjects/{subject}/versions", get(list_versions).post(register))
        .route("/subjects/{subject}/versions/{version}", get(get_version))
        .route("/subjects/{subject}/versions/{version}/schema", get(get_version_schema))
        .route("/config", get(get_global_config).put(put_global_config))
        .route("/config/{subject}", get(get_subject_config).put(put_subject_config).delete(delete_subject_config))
        .route("/compatibility/subjects/{subject}/versions", post(compatibility_all))
        .route("/compatibility/subjects/{subject}/versions/{version}", post(compatibility_version))
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, 404, "HTTP 404 Not Found") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(StatusCode::METHOD_NOT_ALLOWED, 405, "HTTP 405 Method Not Allowed")
        })
        .layer(middleware::from_fn(negotiate))
        .with_state(registry)
}

// ---------------------------------------------------------------------------------------------
// Content negotiation and request logging

/// The media type to answer with for an `Accept` header, or `None` when nothing acceptable is
/// offered. Multi-value headers and quality parameters are fine; the v1 type is preferred.
fn choose_response_type(accept: Option<&str>) -> Option<&'static str> {
    let Some(accept) = accept.filter(|a| !a.trim().is_empty()) else { return Some(CONTENT_TYPE_V1) };
    let mut offered: Vec<&str> = Vec::new();
    for range in accept.split(',') {
        let mut parts = range.split(';');
        let media = parts.next().unwrap_or("").trim();
        let refused = parts.any(|p| {
            let p = p.trim().replace(' ', "");
            p == "q=0" || p == "q=0.0" || p == "q=0.00" || p == "q=0.000"
        });
        if !refused {
            offered.push(media);
        }
    }
    let accepts = |ty: &str| {
        offered
            .iter()
            .any(|m| m.eq_ignore_ascii_case(ty) || *m == "*/*" || *m == "*" || m.eq_ignore_ascii_case("application/*"))
    };
    [CONTENT_TYPE_V1, CONTENT_TYPE_ANY_VERSION, CONTENT_TYPE_JSON].into_iter().find(|ty| accepts(ty))
}

fn header_string(req: &Request, name: header::HeaderName) -> Option<String> {
    req.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned)
}

fn request_type_supported(content_type: Option<&str>) -> bool {
    let Some(ct) = content_type else { return true };
    let media = ct.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    media.is_empty()
        || [CONTENT_TYPE_V1, CONTENT_TYPE_ANY_VERSION, CONTENT_TYPE_JSON, "application/octet-stream"]
            .contains(&media.as_str())
}

async fn negotiate(req: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = req.method().clone();
    let uri = req.uri().clone();
    // Owned copies: the future must be Send, and the request's body is not Sync.
    let (accept, content_type) = (header_string(&req, header::ACCEPT), header_string(&req, header::CONTENT_TYPE));
    let response_type = choose_response_type(accept.as_deref());
    let body_ok = !matches!(method, Method::POST | Method::PUT) || request_type_supported(content_type.as_deref());
    let mut response = match (response_type, body_ok) {
        (None, _) => ApiError::new(StatusCode::NOT_ACCEPTABLE, 406, "HTTP 406 Not Acceptable").into_response(),
        (Some(_), false) => {
            ApiError::new(StatusCode::UNSUPPORTED_MEDIA_TYPE, 415, "HTTP 415 Unsupported Media Type").into_response()
        }
        (Some(_), true) => next.run(req).await,
    };
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(response_type.unwrap_or(CONTENT_TYPE_V1)));
    tracing::info!(
        %method,
        %uri,
        status = response.status().as_u16(),
        elapsed_us = started.elapsed().as_micros() as u64,
        "request"
    );
    response
}

// ---------------------------------------------------------------------------------------------
// Replies and errors

struct Reply(StatusCode, Value);

impl Reply {
    fn ok(body: Value) -> Reply {
        Reply(StatusCode::OK, body)
    }
}

impl IntoResponse for Reply {
    fn into_response(self) -> Response {
        (self.0, self.1.to_string()).into_response()
    }
}

/// A Confluent-style error: `{"error_code": N, "message": "..."}` with the HTTP status.
#[derive(Debug)]
struct ApiError {
    status: StatusCode,
    code: u32,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, code: u32, message: impl Into<String>) -> ApiError {
        ApiError { status, code, message: message.into() }
    }

    fn subject_not_found(subject: &str) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, 40401, format!("Subject '{subject}' not found."))
    }

    fn version_not_found(version: &str) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, 40402, format!("Version {version} not found."))
    }

    fn schema_not_found(what: &str) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, 40403, what)
    }

    fn invalid_schema(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, 42201, message)
    }

    fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, 50001, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, json!({"error_code": self.code, "message": self.message}).to_string()).into_response()
    }
}

type ApiResult = Result<Reply, ApiError>;

// ---------------------------------------------------------------------------------------------
// Schemas

/// A schema as posted: `{"schema": "...", "schemaType"?: "AVRO", "references"?: []}`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SchemaRequest {
    schema: Option<String>,
    schema_type: Option<String>,
    #[serde(default)]
    references: Vec<Value>,
}

/// A parsed, validated Avro schema with the text it came from.
struct Parsed {
    text: String,
    canonical: String,
    schema: Schema,
}

fn parse_request(body: &[u8]) -> Result<Parsed, ApiError> {
    let req: SchemaRequest = serde_json::from_slice(body)
        .map_err(|e| ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, 422, format!("Unrecognized request body: {e}")))?;
    if let Some(ty) = &req.schema_type {
        if !ty.eq_ignore_ascii_case("AVRO") {
            return Err(ApiError::invalid_schema(format!(
                "Invalid schema type {ty}: this test registry supports AVRO only"
            )));
        }
    }
    if !req.references.is_empty() {
        return Err(ApiError::invalid_schema("Schema references are not supported by this test registry"));
    }
    let text = req.schema.filter(|s| !s.trim().is_empty()).ok_or_else(|| ApiError::invalid_schema("Empty schema"))?;
    parse_schema(text)
}

fn parse_schema(text: String) -> Result<Parsed, ApiError> {
    let json: Value =
        serde_json::from_str(&text).map_err(|e| ApiError::invalid_schema(format!("Invalid schema {text}: {e}")))?;
    let schema =
        Schema::parse(&json).map_err(|e| ApiError::invalid_schema(format!("Invalid schema {text}, details: {e}")))?;
    Ok(Parsed { canonical: normalise(&json), text, schema })
}

/// The identity of a schema document: compact JSON with object keys sorted. Unlike Avro's
/// Parsing Canonical Form it keeps defaults, logical types, docs and custom properties, so two
/// schemas that differ in any of those get different ids (as in Confluent's registry), while
/// whitespace and key order do not matter.
fn normalise(value: &Value) -> String {
    fn write(out: &mut String, value: &Value) {
        match value {
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                out.push('{');
                for (i, key) in keys.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::String(key.clone()).to_string());
                    out.push(':');
                    write(out, &map[key.as_str()]);
                }
                out.push('}');
            }
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write(out, item);
                }
                out.push(']');
            }
            other => out.push_str(&other.to_string()),
        }
    }
    let mut out = String::new();
    write(&mut out, value);
    out
}

// ---------------------------------------------------------------------------------------------
// Compatibility

/// One failed check against an earlier version.
struct Incompatibility {
    error_type: &'static str,
    description: String,
    old_version: u32,
    old_schema: String,
}

fn error_type(e: &CompatibilityError) -> &'static str {
    match e {
        CompatibilityError::MissingDefaultValue(_) => "READER_FIELD_MISSING_DEFAULT_VALUE",
        CompatibilityError::MissingSymbols => "MISSING_ENUM_SYMBOLS",
        CompatibilityError::MissingUnionElements | CompatibilityError::SchemaMismatchAllUnionElements => {
            "MISSING_UNION_BRANCH"
        }
        CompatibilityError::FixedMismatch => "FIXED_SIZE_MISMATCH",
        CompatibilityError::NameMismatch { .. } => "NAME_MISMATCH",
        CompatibilityError::FieldTypeMismatch(_, inner) => error_type(inner),
        _ => "TYPE_MISMATCH",
    }
}

fn describe(e: &CompatibilityError) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let _ = write!(text, ": {s}");
        source = s.source();
    }
    text
}

/// Can data written with `writer` be read with `reader`? Partial compatibility (some enum symbols
/// or union branches of the writer unreadable) fails, as it does in Avro's Java checker.
fn check_read(writer: &Schema, reader: &Schema) -> Result<(), (&'static str, String)> {
    match SchemaCompatibility::can_read(writer, reader) {
        Ok(Compatibility::Full) => Ok(()),
        Ok(Compatibility::Partial) => Err((
            "MISSING_UNION_BRANCH",
            "only partially compatible: some enum symbols or union branches of the writer cannot be read by the reader"
                .to_owned(),
        )),
        Err(e) => Err((error_type(&e), describe(&e))),
    }
}

/// Checks `new` against `olds` (`(version, schema text)`, oldest first) under `level`: the latest
/// only, or all of them for the transitive levels (newest first).
fn check_compatibility(level: Level, new: &Schema, olds: &[(u32, String)]) -> Vec<Incompatibility> {
    let candidates: Vec<&(u32, String)> =
        if level.transitive() { olds.iter().rev().collect() } else { olds.last().into_iter().collect() };
    let mut problems = Vec::new();
    if level == Level::None {
        return problems;
    }
    for (version, text) in candidates {
        let old = match Schema::parse_str(text) {
            Ok(s) => s,
            Err(e) => {
                problems.push(Incompatibility {
                    error_type: "TYPE_MISMATCH",
                    description: format!("stored schema no longer parses: {e}"),
                    old_version: *version,
                    old_schema: text.clone(),
                });
                continue;
            }
        };
        let mut push = |(error_type, what): (&'static str, String), direction: &str| {
            problems.push(Incompatibility {
                error_type,
                description: format!("{direction}: {what}"),
                old_version: *version,
                old_schema: text.clone(),
            });
        };
        if level.backward() {
            if let Err(e) = check_read(&old, new) {
                push(e, &format!("the new schema cannot read data written with version {version}"));
            }
        }
        if level.forward() {
            if let Err(e) = check_read(new, &old) {
                push(e, &format!("version {version} cannot read data written with the new schema"));
            }
        }
    }
    problems
}

/// Confluent-style details: `[{errorType:'...', description:'...'}, {oldSchemaVersion: N}, ...]`.
fn details(problems: &[Incompatibility], level: Level) -> String {
    let mut parts = Vec::new();
    for p in problems {
        parts.push(format!("{{errorType:'{}', description:'{}'}}", p.error_type, p.description));
    }
    if let Some(first) = problems.first() {
        parts.push(format!("{{oldSchemaVersion: {}}}", first.old_version));
        parts.push(format!("{{oldSchema: '{}'}}", first.old_schema));
    }
    parts.push(format!("{{compatibility: '{}'}}", level.name()));
    format!("[{}]", parts.join(", "))
}

fn effective_level(store: &Store, subject: &str) -> Level {
    store.subjects.get(subject).and_then(|s| s.compatibility).unwrap_or(store.compatibility)
}

fn live_versions(store: &Store, subject: &str) -> Vec<(u32, String)> {
    store
        .subjects
        .get(subject)
        .map(|s| s.live().filter_map(|v| Some((v.version, store.schemas.get(&v.id)?.clone()))).collect::<Vec<_>>())
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// Versions

enum VersionRef {
    Latest,
    Number(u32),
}

fn parse_version(v: &str) -> Result<VersionRef, ApiError> {
    if v.eq_ignore_ascii_case("latest") || v == "-1" {
        return Ok(VersionRef::Latest);
    }
    match v.parse::<u32>() {
        Ok(n) if (1..=i32::MAX as u32).contains(&n) => Ok(VersionRef::Number(n)),
        _ => Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            42202,
            format!(
                "The specified version '{v}' is not a valid version id. Allowed values are between [1, 2^31-1] and the string \"latest\""
            ),
        )),
    }
}

/// The live version entry a reference names.
fn find_version<'a>(store: &'a Store, subject: &str, v: &str) -> Result<&'a VersionEntry, ApiError> {
    let wanted = parse_version(v)?;
    let state =
        store.subjects.get(subject).filter(|s| s.exists()).ok_or_else(|| ApiError::subject_not_found(subject))?;
    let found = match wanted {
        VersionRef::Latest => state.live().next_back(),
        VersionRef::Number(n) => state.live().find(|e| e.version == n),
    };
    found.ok_or_else(|| ApiError::version_not_found(v))
}

fn version_body(store: &Store, subject: &str, entry: &VersionEntry) -> Value {
    json!({
        "subject": subject,
        "version": entry.version,
        "id": entry.id,
        "schema": store.schemas.get(&entry.id).cloned().unwrap_or_default(),
    })
}

// ---------------------------------------------------------------------------------------------
// Handlers

async fn register(State(reg): State<Registry>, UrlPath(subject): UrlPath<String>, body: Bytes) -> ApiResult {
    let parsed = parse_request(&body)?;
    let mut inner = reg.lock();
    // Already registered under this subject: same id, no new version.
    let known_id = inner.by_canonical.get(&parsed.canonical).copied();
    if let (Some(id), Some(state)) = (known_id, inner.store.subjects.get(&subject)) {
        if state.live().any(|v| v.id == id) {
            return Ok(Reply::ok(json!({ "id": id })));
        }
    }
    let level = effective_level(&inner.store, &subject);
    let olds = live_versions(&inner.store, &subject);
    let problems = check_compatibility(level, &parsed.schema, &olds);
    if !problems.is_empty() {
        tracing::info!(%subject, level = level.name(), "incompatible schema refused");
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            409,
            format!(
                "Schema being registered is incompatible with an earlier schema for subject \"{subject}\", details: {}",
                details(&problems, level)
            ),
        ));
    }
    let id = match known_id {
        Some(id) => id,
        None => {
            let id = inner.store.next_id;
            inner.store.next_id += 1;
            inner.store.schemas.insert(id, parsed.text.clone());
            inner.by_canonical.insert(parsed.canonical.clone(), id);
            id
        }
    };
    let state = inner.store.subjects.entry(subject.clone()).or_default();
    let version = state.versions.iter().map(|v| v.version).max().unwrap_or(0) + 1;
    state.versions.push(VersionEntry { version, id, deleted: false });
    inner.persist()?;
    tracing::info!(%subject, version, id, "registered schema");
    Ok(Reply::ok(json!({ "id": id })))
}

async fn lookup(State(reg): State<Registry>, UrlPath(subject): UrlPath<String>, body: Bytes) -> ApiResult {
    let inner = reg.lock();
    let state = inner
        .store
        .subjects
        .get(&subject)
        .filter(|s| s.exists())
        .ok_or_else(|| ApiError::subject_not_found(&subject))?;
    let parsed = parse_request(&body)?;
    let id = inner.by_canonical.get(&parsed.canonical).copied();
    let entry =
        state.live().rev().find(|v| Some(v.id) == id).ok_or_else(|| ApiError::schema_not_found("Schema not found"))?;
    Ok(Reply::ok(version_body(&inner.store, &subject, entry)))
}

async fn get_schema_by_id(State(reg): State<Registry>, UrlPath(id): UrlPath<String>) -> ApiResult {
    let inner = reg.lock();
    let text = id.parse::<u32>().ok().and_then(|n| inner.store.schemas.get(&n));
    let text = text.ok_or_else(|| ApiError::schema_not_found(&format!("Schema {id} not found")))?;
    Ok(Reply::ok(json!({ "schema": text })))
}

async fn get_id_versions(State(reg): State<Registry>, UrlPath(id): UrlPath<String>) -> ApiResult {
    let inner = reg.lock();
    let n = id
        .parse::<u32>()
        .ok()
        .filter(|n| inner.store.schemas.contains_key(n))
        .ok_or_else(|| ApiError::schema_not_found(&format!("Schema {id} not found")))?;
    let pairs: Vec<Value> = inner
        .store
        .subjects
        .iter()
        .flat_map(|(s, state)| {
            state.live().filter(|v| v.id == n).map(move |v| json!({"subject": s, "version": v.version}))
        })
        .collect();
    Ok(Reply::ok(Value::Array(pairs)))
}

async fn list_subjects(State(reg): State<Registry>) -> ApiResult {
    let inner = reg.lock();
    let names: Vec<&String> = inner.store.subjects.iter().filter(|(_, s)| s.exists()).map(|(n, _)| n).collect();
    Ok(Reply::ok(json!(names)))
}

async fn list_versions(State(reg): State<Registry>, UrlPath(subject): UrlPath<String>) -> ApiResult {
    let inner = reg.lock();
    let state = inner
        .store
        .subjects
        .get(&subject)
        .filter(|s| s.exists())
        .ok_or_else(|| ApiError::subject_not_found(&subject))?;
    let versions: Vec<u32> = state.live().map(|v| v.version).collect();
    Ok(Reply::ok(json!(versions)))
}

async fn get_version(State(reg): State<Registry>, UrlPath((subject, version)): UrlPath<(String, String)>) -> ApiResult {
    let inner = reg.lock();
    let entry = find_version(&inner.store, &subject, &version)?;
    Ok(Reply::ok(version_body(&inner.store, &subject, entry)))
}

async fn get_version_schema(
    State(reg): State<Registry>,
    UrlPath((subject, version)): UrlPath<(String, String)>,
) -> Result<Response, ApiError> {
    let inner = reg.lock();
    let entry = find_version(&inner.store, &subject, &version)?;
    Ok(inner.store.schemas.get(&entry.id).cloned().unwrap_or_default().into_response())
}

async fn delete_subject(
    State(reg): State<Registry>,
    UrlPath(subject): UrlPath<String>,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult {
    let permanent = query.get("permanent").is_some_and(|v| v.eq_ignore_ascii_case("true"));
    let mut inner = reg.lock();
    let Some(state) = inner.store.subjects.get_mut(&subject) else {
        return Err(ApiError::subject_not_found(&subject));
    };
    let deleted: Vec<u32> = if permanent {
        if state.exists() {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                40405,
                format!("Subject '{subject}' was not deleted first before being permanently deleted"),
            ));
        }
        let versions = state.versions.iter().map(|v| v.version).collect();
        inner.store.subjects.remove(&subject);
        versions
    } else {
        if !state.exists() {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                40404,
                format!("Subject '{subject}' was soft deleted.Set permanent=true to delete permanently"),
            ));
        }
        let mut versions = Vec::new();
        for v in state.versions.iter_mut().filter(|v| !v.deleted) {
            v.deleted = true;
            versions.push(v.version);
        }
        versions
    };
    inner.persist()?;
    Ok(Reply::ok(json!(deleted)))
}

#[derive(Deserialize)]
struct ConfigRequest {
    compatibility: Option<String>,
}

fn parse_config(body: &[u8]) -> Result<Level, ApiError> {
    let invalid = |what: &str| {
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            42203,
            format!(
                "Invalid compatibility level. Valid values are none, backward, forward, full, backward_transitive, forward_transitive, and full_transitive (got {what})"
            ),
        )
    };
    let req: ConfigRequest = serde_json::from_slice(body).map_err(|e| invalid(&e.to_string()))?;
    let text = req.compatibility.ok_or_else(|| invalid("no \"compatibility\""))?;
    Level::parse(&text).ok_or_else(|| invalid(&text))
}

async fn get_global_config(State(reg): State<Registry>) -> ApiResult {
    let inner = reg.lock();
    Ok(Reply::ok(json!({ "compatibilityLevel": inner.store.compatibility.name() })))
}

async fn put_global_config(State(reg): State<Registry>, body: Bytes) -> ApiResult {
    let level = parse_config(&body)?;
    let mut inner = reg.lock();
    inner.store.compatibility = level;
    inner.persist()?;
    Ok(Reply::ok(json!({ "compatibility": level.name() })))
}

async fn get_subject_config(
    State(reg): State<Registry>,
    UrlPath(subject): UrlPath<String>,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult {
    let default_to_global = query.get("defaultToGlobal").is_some_and(|v| v.eq_ignore_ascii_case("true"));
    let inner = reg.lock();
    match inner.store.subjects.get(&subject).and_then(|s| s.compatibility) {
        Some(level) => Ok(Reply::ok(json!({ "compatibilityLevel": level.name() }))),
        None if default_to_global => Ok(Reply::ok(json!({ "compatibilityLevel": inner.store.compatibility.name() }))),
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            40408,
            format!("Subject '{subject}' does not have subject-level compatibility configured"),
        )),
    }
}

async fn put_subject_config(State(reg): State<Registry>, UrlPath(subject): UrlPath<String>, body: Bytes) -> ApiResult {
    let level = parse_config(&body)?;
    let mut inner = reg.lock();
    inner.store.subjects.entry(subject).or_default().compatibility = Some(level);
    inner.persist()?;
    Ok(Reply::ok(json!({ "compatibility": level.name() })))
}

async fn delete_subject_config(State(reg): State<Registry>, UrlPath(subject): UrlPath<String>) -> ApiResult {
    let mut inner = reg.lock();
    let previous = inner.store.subjects.get_mut(&subject).and_then(|s| s.compatibility.take());
    let Some(previous) = previous else { return Err(ApiError::subject_not_found(&subject)) };
    inner.persist()?;
    Ok(Reply::ok(json!({ "compatibilityLevel": previous.name() })))
}

fn compatibility_reply(problems: &[Incompatibility], level: Level, verbose: bool) -> Reply {
    let mut body = json!({ "is_compatible": problems.is_empty() });
    if verbose {
        let mut messages: Vec<String> = problems
            .iter()
            .map(|p| format!("{{errorType:'{}', description:'{}'}}", p.error_type, p.description))
            .collect();
        if !problems.is_empty() {
            messages.push(format!("{{compatibility: '{}'}}", level.name()));
        }
        body["messages"] = json!(messages);
    }
    Reply::ok(body)
}

fn verbose(query: &HashMap<String, String>) -> bool {
    query.get("verbose").is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

/// `POST /compatibility/subjects/{s}/versions/{v|latest}`: the subject's level, against that one
/// version.
async fn compatibility_version(
    State(reg): State<Registry>,
    UrlPath((subject, version)): UrlPath<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
    body: Bytes,
) -> ApiResult {
    let inner = reg.lock();
    let entry = find_version(&inner.store, &subject, &version)?;
    let old = (entry.version, inner.store.schemas.get(&entry.id).cloned().unwrap_or_default());
    let parsed = parse_request(&body)?;
    let level = effective_level(&inner.store, &subject);
    // Against one named version, "transitive" makes no difference.
    let problems = check_compatibility(level, &parsed.schema, &[old]);
    Ok(compatibility_reply(&problems, level, verbose(&query)))
}

/// `POST /compatibility/subjects/{s}/versions`: the same check registration would make.
async fn compatibility_all(
    State(reg): State<Registry>,
    UrlPath(subject): UrlPath<String>,
    Query(query): Query<HashMap<String, String>>,
    body: Bytes,
) -> ApiResult {
    let inner = reg.lock();
    let parsed = parse_request(&body)?;
    let level = effective_level(&inner.store, &subject);
    let problems = check_compatibility(level, &parsed.schema, &live_versions(&inner.store, &subject));
    Ok(compatibility_reply(&problems, level, verbose(&query)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_headers() {
        assert_eq!(choose_response_type(None), Some(CONTENT_TYPE_V1));
        assert_eq!(
            choose_response_type(Some(
                "application/vnd.schemaregistry.v1+json, application/vnd.schemaregistry+json, application/json"
            )),
            Some(CONTENT_TYPE_V1)
        );
        assert_eq!(choose_response_type(Some("application/json")), Some(CONTENT_TYPE_JSON));
        assert_eq!(choose_response_type(Some("application/json;q=0.9, */*;q=0.1")), Some(CONTENT_TYPE_V1));
        assert_eq!(choose_response_type(Some("text/html")), None);
        assert_eq!(choose_response_type(Some("application/vnd.schemaregistry.v1+json; q=0")), None);
    }

    #[test]
    fn normalised_form_ignores_layout_but_keeps_defaults() {
        let a: Value =
            serde_json::from_str(r#"{"type":"record","name":"r","fields":[{"name":"a","type":"int"}]}"#).unwrap();
        let b: Value =
            serde_json::from_str(r#"{ "fields": [ {"type": "int", "name": "a"} ], "name": "r", "type": "record" }"#)
                .unwrap();
        let c: Value =
            serde_json::from_str(r#"{"type":"record","name":"r","fields":[{"name":"a","type":"int","default":0}]}"#)
                .unwrap();
        assert_eq!(normalise(&a), normalise(&b));
        assert_ne!(normalise(&a), normalise(&c));
    }

    #[test]
    fn levels_round_trip() {
        for name in
            ["NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE"]
        {
            assert_eq!(Level::parse(name).map(Level::name), Some(name));
        }
        assert_eq!(Level::parse("backward"), Some(Level::Backward));
        assert_eq!(Level::parse("SIDEWAYS"), None);
    }
}
