//! Schema Registry: registers the key and value schemas of each table version under
//! `<topic>-key` / `<topic>-value` (TopicNameStrategy) and frames datums in the Confluent wire
//! format.
//!
//! A small REST client over `reqwest` rather than `schema_registry_converter`: Sluice only
//! needs `POST /subjects/{s}/versions`, already builds its own Avro values, and the converter
//! would pull a second apache-avro version (0.22, rust-version 1.88) and ~4.5 build-minutes.
//!
//! Wire format: byte 0 = magic 0x00, bytes 1..5 = schema id (big-endian u32), then the Avro
//! binary datum. Reference:
//! <https://docs.confluent.io/platform/current/schema-registry/fundamentals/serdes-develop/index.html#wire-format>.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::config::{RegistrySection, Secret};
use crate::disposition::Disposition;

/// What went wrong talking to the registry.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// The registry refused the schema as incompatible with the subject's earlier versions.
    #[error(
        "the Schema Registry refused the new schema of subject {subject:?} as incompatible: {message}. \
         Make the table change compatible (e.g. add columns with defaults or as NULLable), or change the \
         subject's compatibility level (PUT /config/{subject}) knowingly, or route the table to a new topic",
        // a registry's message quotes the older schema whole (kilobytes)
        message = crate::console::shortened(.message, 600)
    )]
    Incompatible {
        /// The subject.
        subject: String,
        /// The registry's message.
        message: String,
    },
    /// Any other refusal (invalid schema, authorization).
    #[error("the Schema Registry answered {status} for subject {subject:?}: {}", crate::console::shortened(.body, 600))]
    Refused {
        /// The subject.
        subject: String,
        /// HTTP status.
        status: u16,
        /// The body.
        body: String,
    },
    /// The client could not be set up (an unreadable password file, no HTTP client).
    #[error("{0}")]
    Setup(String),
    /// The registry's TLS certificate was not accepted (a configuration problem, not worth
    /// retrying).
    #[error(
        "the Schema Registry at {url} has a TLS certificate Sluice does not trust: {message}. Set registry.ca_file \
         to the PEM file of the CA that signed it (and check that registry.url names a host on the certificate)"
    )]
    Untrusted {
        /// Base URL.
        url: String,
        /// Cause.
        message: String,
    },
    /// The registry could not be reached (worth retrying).
    #[error("cannot reach the Schema Registry at {url}: {message}")]
    Unreachable {
        /// Base URL.
        url: String,
        /// Cause.
        message: String,
    },
}

impl RegistryError {
    /// True when trying again later may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self, RegistryError::Unreachable { .. })
            || matches!(self, RegistryError::Refused { status, .. } if *status >= 500)
    }

    /// What the caller does next: a registry away or failing (5xx) restarts, a refusal stops.
    pub fn disposition(&self) -> Disposition {
        if self.is_transient() {
            Disposition::Restart
        } else {
            Disposition::Stop
        }
    }
}

/// How long one registry request may take: a registry that accepts the connection and then
/// says nothing (a stalled network path) is given up on after this and retried.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// A registry client with an id cache per (subject, schema text). Clones share the cache, so
/// `sluice run` keeps the ids across its restarts: after one, the tables already registered
/// flow again without asking a registry that may still be away.
#[derive(Debug, Clone)]
pub struct RegistryClient {
    base: String,
    http: reqwest::Client,
    username: Option<String>,
    password: Option<Secret>,
    cache: Arc<Mutex<HashMap<(String, String), u32>>>,
    /// Schemas fetched by id.
    by_id: Arc<Mutex<HashMap<u32, Arc<str>>>>,
    /// How long one request may take ([`REQUEST_TIMEOUT`]; shorter in tests).
    timeout: Duration,
    /// Where requests are counted by outcome and timed, when set.
    metrics: Option<crate::metrics::RegistryMetrics>,
}

impl RegistryClient {
    /// A client for `[registry]`.
    ///
    /// # Errors
    /// An unreadable password file or CA file.
    pub fn new(cfg: &RegistrySection) -> Result<RegistryClient, RegistryError> {
        let password = cfg.password().map_err(|e| RegistryError::Setup(format!("registry.password_file: {e}")))?;
        let http = crate::http::client(cfg.ca_file.as_deref(), "registry.ca_file", REQUEST_TIMEOUT)
            .map_err(RegistryError::Setup)?;
        Ok(RegistryClient {
            base: cfg.url.trim_end_matches('/').to_string(),
            http,
            username: cfg.username.clone(),
            password,
            cache: Arc::default(),
            by_id: Arc::default(),
            timeout: REQUEST_TIMEOUT,
            metrics: None,
        })
    }

    /// Registers `schema` under `subject` (an already registered schema gets its existing id)
    /// and returns the id.
    ///
    /// # Errors
    /// [`RegistryError::Incompatible`] on 409, [`RegistryError::Refused`] on other refusals,
    /// [`RegistryError::Unreachable`] when no answer comes.
    pub async fn register(&mut self, subject: &str, schema: &str) -> Result<u32, RegistryError> {
        let cache_key = (subject.to_string(), schema.to_string());
        if let Some(id) = self.cached(&cache_key) {
            return Ok(id);
        }
        let started = std::time::Instant::now();
        let result = self.post(subject, schema).await;
        if let Some(m) = &self.metrics {
            let outcome = match &result {
                Ok(_) => "ok",
                Err(RegistryError::Incompatible { .. }) => "incompatible",
                Err(RegistryError::Refused { .. }) => "refused",
                Err(RegistryError::Unreachable { .. } | RegistryError::Untrusted { .. } | RegistryError::Setup(_)) => {
                    "unreachable"
                }
            };
            m.request(outcome, started.elapsed());
        }
        let id = result?;
        self.cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(cache_key, id);
        Ok(id)
    }

    /// `GET /schemas/ids/{id}`: the schema text registered under `id` (consumers decode records
    /// with it). Cached: a registered id never changes its schema.
    ///
    /// # Errors
    /// As [`RegistryClient::register`]; a 404 is a refusal naming the id.
    pub async fn schema_text(&self, id: u32) -> Result<Arc<str>, RegistryError> {
        if let Some(s) = self.by_id.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(&id) {
            return Ok(Arc::clone(s));
        }
        let (status, text) = self.get(&format!("{}/schemas/ids/{id}", self.base)).await?;
        let subject = format!("(schema id {id})");
        if !(200..300).contains(&status) {
            return Err(RegistryError::Refused { subject, status, body: text });
        }
        let schema: Arc<str> = serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| v.get("schema").and_then(|s| s.as_str()).map(Arc::from))
            .ok_or_else(|| RegistryError::Refused { subject, status, body: text.clone() })?;
        self.by_id.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(id, Arc::clone(&schema));
        Ok(schema)
    }

    /// `GET /subjects/{subject}/versions/latest`: the id and text of the newest schema
    /// registered under `subject`; None when the subject has none (404).
    ///
    /// # Errors
    /// As [`RegistryClient::register`].
    pub async fn latest(&self, subject: &str) -> Result<Option<(u32, Arc<str>)>, RegistryError> {
        let url = format!("{}/subjects/{}/versions/latest", self.base, encode_path(subject));
        let (status, text) = self.get(&url).await?;
        if status == 404 {
            return Ok(None);
        }
        let refused = || RegistryError::Refused { subject: subject.to_string(), status, body: text.clone() };
        if !(200..300).contains(&status) {
            return Err(refused());
        }
        let v: serde_json::Value = serde_json::from_str(&text).map_err(|_| refused())?;
        let id = v.get("id").and_then(serde_json::Value::as_u64).and_then(|id| u32::try_from(id).ok());
        let schema = v.get("schema").and_then(serde_json::Value::as_str).map(Arc::from);
        match (id, schema) {
            (Some(id), Some(schema)) => Ok(Some((id, schema))),
            _ => Err(refused()),
        }
    }

    /// `GET /subjects`: how many subjects the registry holds (a check that it answers, with
    /// the configured TLS and credentials).
    ///
    /// # Errors
    /// As [`RegistryClient::register`].
    pub async fn subjects(&self) -> Result<usize, RegistryError> {
        let (status, text) = self.get(&format!("{}/subjects", self.base)).await?;
        let refused = |text: &str| {
            let hint = if matches!(status, 401 | 403) { ": check registry.username and its password" } else { "" };
            RegistryError::Setup(format!(
                "the Schema Registry at {} answered {status} to GET /subjects: {}{hint}",
                crate::config::redact_url(&self.base),
                text.chars().take(300).collect::<String>()
            ))
        };
        if !(200..300).contains(&status) {
            return Err(refused(&text));
        }
        serde_json::from_str::<Vec<serde_json::Value>>(&text).map(|v| v.len()).map_err(|_| refused(&text))
    }

    /// `GET url` with the registry's media types, credentials and timeout: status and body.
    async fn get(&self, url: &str) -> Result<(u16, String), RegistryError> {
        let mut req = self
            .http
            .get(url)
            .header("Accept", "application/vnd.schemaregistry.v1+json, application/json")
            .timeout(self.timeout);
        if let Some(u) = &self.username {
            req = req.basic_auth(u, self.password.as_ref().map(Secret::expose));
        }
        let resp = req.send().await.map_err(|e| self.send_error(&e))?;
        let status = resp.status().as_u16();
        let text = resp.text().await.map_err(|e| self.send_error(&e))?;
        Ok((status, text))
    }

    /// The error of a request that got no answer: an untrusted certificate, else unreachable.
    fn send_error(&self, e: &reqwest::Error) -> RegistryError {
        let (url, message) = (
            crate::config::redact_url(&self.base),
            crate::config::redact_url(&crate::http::cause_chain(e, self.timeout)),
        );
        if crate::http::certificate_refused(e) {
            RegistryError::Untrusted { url, message }
        } else {
            RegistryError::Unreachable { url, message }
        }
    }

    fn cached(&self, key: &(String, String)) -> Option<u32> {
        self.cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(key).copied()
    }

    /// Counts and times the registry requests from now on.
    pub fn count_requests(&mut self, metrics: crate::metrics::RegistryMetrics) {
        self.metrics = Some(metrics);
    }

    /// `POST /subjects/<subject>/versions`: the schema's id.
    async fn post(&self, subject: &str, schema: &str) -> Result<u32, RegistryError> {
        let url = format!("{}/subjects/{}/versions", self.base, encode_path(subject));
        let body = serde_json::json!({ "schema": schema }).to_string();
        let mut req = self
            .http
            .post(&url)
            .header("Content-Type", "application/vnd.schemaregistry.v1+json")
            .header("Accept", "application/vnd.schemaregistry.v1+json, application/json")
            .body(body)
            .timeout(self.timeout);
        if let Some(u) = &self.username {
            req = req.basic_auth(u, self.password.as_ref().map(Secret::expose));
        }
        let unreachable = |e: reqwest::Error| self.send_error(&e);
        let resp = req.send().await.map_err(unreachable)?;
        let status = resp.status().as_u16();
        let text = resp.text().await.map_err(unreachable)?;
        if status == 409 {
            let message = serde_json::from_str::<serde_json::Value>(&text)
                .ok()
                .and_then(|v| v.get("message").and_then(|m| m.as_str()).map(str::to_string))
                .unwrap_or(text);
            return Err(RegistryError::Incompatible { subject: subject.to_string(), message });
        }
        if !(200..300).contains(&status) {
            return Err(RegistryError::Refused { subject: subject.to_string(), status, body: text });
        }
        let id = serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| v.get("id").and_then(serde_json::Value::as_u64))
            .and_then(|id| u32::try_from(id).ok())
            .ok_or_else(|| RegistryError::Refused { subject: subject.to_string(), status, body: text.clone() })?;
        Ok(id)
    }
}

/// Percent-encodes a subject for a URL path (topic names are `[A-Za-z0-9._-]`, but be safe).
fn encode_path(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"._-".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// Appends the Confluent wire format's header: magic 0, the schema id big-endian; the datum
/// follows.
pub fn frame_header(id: u32, out: &mut Vec<u8>) {
    out.push(0);
    out.extend_from_slice(&id.to_be_bytes());
}

/// Frames a datum in the Confluent wire format: the header, the datum.
#[cfg(test)]
pub fn frame(id: u32, datum: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + datum.len());
    frame_header(id, &mut out);
    out.extend_from_slice(datum);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn registers_caches_and_explains_incompatible_changes() {
        let server = sluice_test_registry::Server::spawn(
            "127.0.0.1:0".parse().unwrap(),
            sluice_test_registry::Registry::in_memory(),
        )
        .await
        .unwrap();
        let section = RegistrySection {
            url: server.url(),
            username: None,
            password_file: None,
            password_env: None,
            ca_file: None,
        };
        let mut c = RegistryClient::new(&section).unwrap();
        let v1 = r#"{"type":"record","name":"r","fields":[{"name":"a","type":"int"}]}"#;
        let id = c.register("t-value", v1).await.unwrap();
        assert_eq!(c.register("t-value", v1).await.unwrap(), id);
        let text = c.schema_text(id).await.unwrap();
        assert_eq!(apache_avro::Schema::parse_str(&text).unwrap(), apache_avro::Schema::parse_str(v1).unwrap());
        let e = c.schema_text(id + 1000).await.unwrap_err();
        assert!(matches!(e, RegistryError::Refused { status: 404, .. }), "{e}");
        // a new field without a default cannot read old data: BACKWARD refuses it
        let v2 = r#"{"type":"record","name":"r","fields":[{"name":"a","type":"int"},{"name":"b","type":"string"}]}"#;
        let e = c.register("t-value", v2).await.unwrap_err();
        assert!(matches!(e, RegistryError::Incompatible { .. }), "{e}");
        assert!(!e.is_transient());
        assert!(e.to_string().contains("Make the table change compatible"), "{e}");
    }

    /// Over `https://`: a registry whose certificate a private CA signed is trusted with
    /// `registry.ca_file` naming that CA, and refused (a stop, not a retry) without it.
    #[tokio::test]
    async fn https_with_a_private_ca() {
        let (server, _dir, ca_file) = crate::http::test_https_server().await;
        let url = format!("https://localhost:{}", server.addr.port());
        let section = |ca_file| RegistrySection {
            url: url.clone(),
            username: None,
            password_file: None,
            password_env: None,
            ca_file,
        };
        let mut c = RegistryClient::new(&section(Some(ca_file))).unwrap();
        let id = c.register("t-value", r#""int""#).await.unwrap();
        assert!(id > 0);
        let e = RegistryClient::new(&section(None)).unwrap().register("t-value", r#""int""#).await.unwrap_err();
        assert!(matches!(e, RegistryError::Untrusted { .. }), "{e}");
        assert_eq!(e.disposition(), Disposition::Stop);
        assert!(e.to_string().contains("Set registry.ca_file"), "{e}");
    }

    #[test]
    fn wire_format() {
        assert_eq!(frame(0x0102_0304, &[9, 8]), vec![0, 1, 2, 3, 4, 9, 8]);
        assert_eq!(encode_path("sluice.shop.orders-value"), "sluice.shop.orders-value");
        assert_eq!(encode_path("a b"), "a%20b");
    }
}

#[cfg(test)]
mod stall_tests {
    use super::*;
    use std::io::{Read, Write};

    fn client(port: u16) -> RegistryClient {
        let url = format!("http://127.0.0.1:{port}");
        let section = RegistrySection { url, username: None, password_file: None, password_env: None, ca_file: None };
        let mut c = RegistryClient::new(&section).unwrap();
        c.timeout = Duration::from_millis(500);
        c
    }

    /// A registry that accepts the connection and never answers (a stalled path): the request
    /// gives up after the timeout as a transient error that names it.
    #[tokio::test]
    async fn a_registry_that_never_answers_times_out() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let hold = std::thread::spawn(move || listener.accept().map(|(s, _)| s));
        let e = client(port).register("t-value", r#""int""#).await.unwrap_err();
        assert!(e.is_transient(), "{e}");
        assert!(e.to_string().contains("no answer within 0.5 s"), "{e}");
        drop(hold);
    }

    /// The same over a kept-alive connection that answered before and then stalls.
    #[tokio::test]
    async fn a_pooled_connection_that_stalls_times_out() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let hold = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let body = r#"{"id":7}"#;
            let head =
                format!("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n", body.len());
            let _ = s.write_all(format!("{head}{body}").as_bytes());
            let _ = s.read(&mut buf);
            std::thread::sleep(Duration::from_secs(2));
        });
        let mut c = client(port);
        assert_eq!(c.register("t-value", r#""int""#).await.unwrap(), 7);
        let started = std::time::Instant::now();
        let e = c.register("u-value", r#""int""#).await.unwrap_err();
        assert!(e.to_string().contains("no answer within 0.5 s"), "{e}");
        assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
        hold.join().unwrap();
    }
}
