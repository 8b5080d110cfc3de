//! `sluice run` configuration: a TOML file, overridden by `SLUICE_*` environment variables.
//!
//! The doc comments on these structs are the user documentation (`sluice.example.toml`
//! repeats them). Every section rejects unknown keys, so a typo is an error, not a silently
//! ignored setting; [`Config::validate`] reports every problem at once.
//!
//! Environment overrides: `SLUICE_<SECTION>__<KEY>=value` sets `[section] key = value`, e.g.
//! `SLUICE_KAFKA__BROKERS=kafka-0:9092` or `SLUICE_SOURCE__SERVER_ID=7`. The value is read as a
//! TOML value when it parses as one (numbers, booleans, `[...]` arrays), else as a string.
//! Secrets are never written in the file itself: they come from a file (`*_file`) or an
//! environment variable (`*_env`), and are redacted wherever a config is printed.

// The publisher pipeline (`sluice run`, issue 4) reads the Kafka, registry, output and filter
// sections; until it lands only `sluice check` uses this module.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

/// The whole configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The MySQL/MariaDB server to capture.
    pub source: SourceSection,
    /// The Kafka cluster to publish to.
    pub kafka: KafkaSection,
    /// The Confluent-compatible Schema Registry.
    pub registry: RegistrySection,
    /// What the records look like.
    #[serde(default)]
    pub output: OutputSection,
    /// Which tables and columns are captured.
    #[serde(default)]
    pub filter: FilterSection,
    /// Topic routing rules (first match wins; default `<prefix>.<db>.<table>`).
    #[serde(default)]
    pub routes: Vec<Route>,
    /// The Prometheus endpoint.
    #[serde(default)]
    pub metrics: MetricsSection,
}

/// `[metrics]`
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsSection {
    /// Serve `/metrics` (Prometheus text format), `/healthz` (200 while the process runs) and
    /// `/readyz` (200 while it streams, 503 while it connects or restarts) on this address,
    /// e.g. `0.0.0.0:9187`. Off when unset.
    pub listen: Option<String>,
}

/// `[source]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceSection {
    /// A stable name for this capture (letters, digits, `-`, `_`). It names the Kafka
    /// transactional id (`sluice-<name>`) and the checkpoint key: two instances with the same
    /// name fence each other, so exactly one publishes.
    pub name: String,
    /// `mysql://USER@HOST:PORT` (no password here).
    pub url: String,
    /// File holding the password (trailing newline ignored).
    #[serde(default)]
    pub password_file: Option<PathBuf>,
    /// Environment variable holding the password.
    #[serde(default)]
    pub password_env: Option<String>,
    /// Replica server id, unique among the server's replicas.
    #[serde(default = "default_server_id")]
    pub server_id: u32,
    /// TLS: `disabled`, `preferred`, `required`, `verify-ca`, `verify-identity`.
    #[serde(default = "default_tls")]
    pub tls: String,
    /// CA certificate (PEM) for `verify-ca` / `verify-identity`.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// Heartbeat period asked of the server (e.g. `5s`).
    #[serde(default = "default_heartbeat", with = "humantime_serde")]
    pub heartbeat: Duration,
    /// Where to start when there is no checkpoint yet: `earliest`, `current`,
    /// `file:position` (`mysql-bin.000042:4`), or a GTID set (either flavour).
    ///
    /// With `binlog_row_metadata` other than FULL, column names come from the captured tables'
    /// definitions read from the server at this start, then tracked across the binlog's DDL: a
    /// start in the past applies today's definitions to older events until a DDL in the binlog
    /// replaces them (a TABLE_MAP that disagrees in column count or types stops the run).
    #[serde(default = "default_start")]
    pub start: String,
}

/// `[kafka]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaSection {
    /// Bootstrap servers, `host:port[,host:port...]`.
    pub brokers: String,
    /// Topic prefix: records go to `<prefix>.<db>.<table>`, checkpoints to
    /// `<prefix>.__positions`, the tracked schema history (column names for TABLE_MAPs
    /// without them, see `schema_history`) to `<prefix>.__schemas`.
    #[serde(default = "default_prefix")]
    pub topic_prefix: String,
    /// Partitions of topics Sluice creates.
    #[serde(default = "default_partitions")]
    pub partitions: i32,
    /// Replication factor of topics Sluice creates.
    #[serde(default = "default_replication")]
    pub replication_factor: i32,
    /// Extra configs for topics Sluice creates (e.g. `"retention.ms" = "604800000"`).
    #[serde(default)]
    pub topic_config: BTreeMap<String, String>,
    /// A Kafka transaction is committed after this many records ... (Under load the time
    /// limit usually comes first: a commit costs the broker a round trip to its transaction
    /// coordinator, and batches of a fraction of a second keep that cost small per record while
    /// read_committed consumers see the records within `batch_max_delay`. While one batch
    /// commits, the next is encoded, holding up to `batch_max_bytes` of its records in memory.)
    #[serde(default = "default_batch_records")]
    pub batch_max_records: usize,
    /// ... or this many bytes of keys and values (an integer, or text with a unit: `"16MiB"`,
    /// `"512KiB"`, `"1GB"`) ...
    #[serde(default = "default_batch_bytes", deserialize_with = "byte_size")]
    pub batch_max_bytes: u64,
    /// ... or this much time since it began, whichever comes first, at the next MySQL
    /// transaction boundary (a MySQL transaction is never split across Kafka transactions).
    #[serde(default = "default_batch_delay", with = "humantime_serde")]
    pub batch_max_delay: Duration,
    /// Kafka `transaction.timeout.ms`: longer than the largest MySQL transaction takes to
    /// stream.
    #[serde(default = "default_txn_timeout", with = "humantime_serde")]
    pub transaction_timeout: Duration,
    /// Extra librdkafka producer properties (`security.protocol`, `sasl.mechanisms`, ...).
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
    /// File holding `sasl.password` (never put it in `properties`).
    #[serde(default)]
    pub sasl_password_file: Option<PathBuf>,
    /// Environment variable holding `sasl.password`.
    #[serde(default)]
    pub sasl_password_env: Option<String>,
}

/// `[registry]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistrySection {
    /// Base URL, e.g. `http://schema-registry:8081`.
    pub url: String,
    /// Basic-auth user, when the registry wants one.
    #[serde(default)]
    pub username: Option<String>,
    /// File holding the basic-auth password.
    #[serde(default)]
    pub password_file: Option<PathBuf>,
}

/// What records look like.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ValueMode {
    /// `{before, after, op, ts_ms, source, transaction}`.
    #[default]
    Envelope,
    /// The after-image's columns plus `__op` and `__deleted`, for sinks that want plain rows.
    Flattened,
}

/// `[output]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputSection {
    /// `envelope` (default) or `flattened`.
    #[serde(default)]
    pub value_mode: ValueMode,
    /// Write a tombstone (null value, same key) after each delete, so compacted topics drop
    /// the row.
    #[serde(default = "yes")]
    pub tombstones: bool,
    /// Key columns for tables without a primary key, by `db.table`. A table without a
    /// primary key and without an entry here gets a null key (records are then spread over
    /// partitions without per-row ordering): Sluice never guesses a key.
    #[serde(default)]
    pub key_columns: BTreeMap<String, Vec<String>>,
    /// Publish partial row images (`binlog_row_image=MINIMAL` or `NOBLOB`, where the server
    /// leaves out columns it did not change or need). When true, every row field is nullable
    /// and each row record carries `__absent`, the names of the fields the image did not have
    /// (their null is "not logged", not SQL NULL); a key column missing from an update's after
    /// image is the unchanged key of the before image. When false (default) the schemas stay
    /// strict and a partial image stops the publisher with an error naming the table, column
    /// and binlog position: set `binlog_row_image=FULL` on the server or enable this.
    /// Switching it changes every table's value schema (BACKWARD compatible: fields become
    /// nullable, `__absent` has a default).
    #[serde(default)]
    pub partial_images: bool,
}

impl Default for OutputSection {
    fn default() -> Self {
        OutputSection {
            value_mode: ValueMode::Envelope,
            tombstones: true,
            key_columns: BTreeMap::new(),
            partial_images: false,
        }
    }
}

impl MetricsSection {
    /// The address to listen on, when set.
    ///
    /// # Errors
    /// Not a `host:port` socket address.
    pub fn address(&self) -> Result<Option<std::net::SocketAddr>, String> {
        self.listen
            .as_deref()
            .map(|l| l.parse().map_err(|e| format!("metrics.listen {l:?} is not an address like 0.0.0.0:9187: {e}")))
            .transpose()
    }
}

/// `[filter]`: patterns are `db.table` with `*` and `?` wildcards.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilterSection {
    /// Capture only tables matching one of these (default: all).
    #[serde(default)]
    pub include: Vec<String>,
    /// Never capture tables matching one of these (wins over `include`).
    #[serde(default)]
    pub exclude: Vec<String>,
    /// Leave these columns out of records: `db.table.column` patterns.
    #[serde(default)]
    pub exclude_columns: Vec<String>,
}

/// A routing rule: tables matching `tables` go to `topic`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Route {
    /// `db.table` pattern with wildcards.
    pub tables: String,
    /// Topic name; `{db}` and `{table}` are replaced.
    pub topic: String,
}

fn default_server_id() -> u32 {
    51_001
}
fn default_tls() -> String {
    "preferred".into()
}
fn default_heartbeat() -> Duration {
    Duration::from_secs(5)
}
fn default_start() -> String {
    "earliest".into()
}
fn default_prefix() -> String {
    "sluice".into()
}
fn default_partitions() -> i32 {
    3
}
fn default_replication() -> i32 {
    1
}
fn default_batch_records() -> usize {
    100_000
}
fn default_batch_bytes() -> u64 {
    16 << 20
}
fn default_batch_delay() -> Duration {
    Duration::from_millis(200)
}
fn default_txn_timeout() -> Duration {
    Duration::from_secs(300)
}
fn yes() -> bool {
    true
}

/// Reads a byte size: an integer, or a number with a unit (`B`, `KB`/`MB`/`GB` = powers of 1000,
/// `KiB`/`MiB`/`GiB` = powers of 1024).
fn byte_size<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Size {
        Bytes(u64),
        Text(String),
    }
    match Size::deserialize(d)? {
        Size::Bytes(n) => Ok(n),
        Size::Text(t) => parse_byte_size(&t).map_err(serde::de::Error::custom),
    }
}

fn parse_byte_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num.parse().map_err(|_| format!("{text:?} is not a byte size like 16MiB"))?;
    let mult: u64 = match unit.trim() {
        "" | "B" => 1,
        "KB" | "kB" => 1000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        other => return Err(format!("{text:?}: unknown unit {other:?} (B, KB, MB, GB, KiB, MiB, GiB)")),
    };
    n.checked_mul(mult).ok_or_else(|| format!("{text:?} is too large"))
}

/// A secret value: printed as `<redacted>`.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// The value, for handing to a client library.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Loading or validating the configuration failed.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// Path.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// TOML syntax or a wrong key/type.
    #[error("{path}: {message}")]
    Parse {
        /// Path.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// Every semantic problem found.
    #[error("invalid configuration:\n  - {}", .0.join("\n  - "))]
    Invalid(Vec<String>),
}

impl Config {
    /// Reads `path`, applies `SLUICE_*` overrides from `env`, and validates.
    ///
    /// # Errors
    /// Unreadable file, bad TOML, unknown keys, and every validation problem at once.
    pub fn load(path: &Path, env: impl IntoIterator<Item = (String, String)>) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.into(), source })?;
        let mut doc: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| ConfigError::Parse { path: path.into(), message: e.to_string() })?;
        apply_env(&mut doc, env);
        let cfg: Config = toml::Value::Table(doc)
            .try_into()
            .map_err(|e: toml::de::Error| ConfigError::Parse { path: path.into(), message: e.to_string() })?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks everything that can be checked without connecting; reports all problems.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] listing each problem.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut p = Vec::new();
        let s = &self.source;
        if s.name.is_empty() || !s.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
            p.push(format!("source.name {:?} must be letters, digits, '-' or '_'", s.name));
        }
        if !(s.url.starts_with("mysql://") || s.url.starts_with("mariadb://")) {
            p.push(format!("source.url {:?} must look like mysql://user@host:3306", s.url));
        } else if s.url.split("://").nth(1).and_then(|r| r.split('@').next()).is_some_and(|u| u.contains(':')) {
            p.push("source.url must not contain a password: use source.password_file or source.password_env".into());
        }
        if s.password_file.is_some() && s.password_env.is_some() {
            p.push("set only one of source.password_file and source.password_env".into());
        }
        if let Some(f) = &s.password_file {
            if !f.exists() {
                p.push(format!("source.password_file {} does not exist", f.display()));
            }
        }
        if let Some(v) = &s.password_env {
            if std::env::var_os(v).is_none() {
                p.push(format!("source.password_env names {v}, which is not set"));
            }
        }
        if !["disabled", "preferred", "required", "verify-ca", "verify-identity"].contains(&s.tls.as_str()) {
            p.push(format!(
                "source.tls {:?} must be one of disabled, preferred, required, verify-ca, verify-identity",
                s.tls
            ));
        }
        if s.tls.starts_with("verify") && s.ca_file.is_none() {
            p.push(format!("source.tls = {:?} needs source.ca_file", s.tls));
        }
        if s.server_id == 0 {
            p.push("source.server_id must not be 0".into());
        }
        if s.heartbeat < Duration::from_secs(1) {
            p.push("source.heartbeat must be at least 1s".into());
        }
        let k = &self.kafka;
        if k.brokers.trim().is_empty() {
            p.push("kafka.brokers is empty".into());
        }
        if k.topic_prefix.is_empty() || !k.topic_prefix.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
        {
            p.push(format!("kafka.topic_prefix {:?} must be letters, digits, '.', '_' or '-'", k.topic_prefix));
        }
        if k.partitions < 1 {
            p.push("kafka.partitions must be at least 1".into());
        }
        if k.replication_factor < 1 {
            p.push("kafka.replication_factor must be at least 1".into());
        }
        if k.batch_max_records == 0 {
            p.push("kafka.batch_max_records must be at least 1".into());
        }
        if k.batch_max_bytes == 0 {
            p.push("kafka.batch_max_bytes must be at least 1".into());
        }
        for key in k.properties.keys() {
            if key.contains("password") || key.starts_with("transactional.") || key == "enable.idempotence" {
                p.push(format!(
                    "kafka.properties must not set {key:?}: passwords come from kafka.sasl_password_file/_env, and Sluice \
                     sets the transactional settings itself"
                ));
            }
        }
        if !(self.registry.url.starts_with("http://") || self.registry.url.starts_with("https://")) {
            p.push(format!("registry.url {:?} must start with http:// or https://", self.registry.url));
        }
        for (table, cols) in &self.output.key_columns {
            if table.split('.').count() != 2 || cols.is_empty() {
                p.push(format!("output.key_columns.{table:?} must be \"db.table\" = [\"col\", ...]"));
            }
        }
        for c in &self.filter.exclude_columns {
            if c.split('.').count() != 3 || c.split('.').any(str::is_empty) {
                p.push(format!("filter.exclude_columns entry {c:?} must be \"db.table.column\" (wildcards allowed)"));
            }
        }
        for r in &self.routes {
            if r.topic.is_empty() {
                p.push(format!("route for {:?} has an empty topic", r.tables));
            }
        }
        if let Err(e) = self.metrics.address() {
            p.push(e);
        }
        if p.is_empty() {
            Ok(())
        } else {
            Err(ConfigError::Invalid(p))
        }
    }

    /// The source password from its file or environment variable (empty when neither is set).
    ///
    /// # Errors
    /// An unreadable password file.
    pub fn source_password(&self) -> Result<Secret, ConfigError> {
        read_secret(&self.source.password_file, &self.source.password_env)
    }

    /// The SASL password from its file or environment variable, if configured.
    ///
    /// # Errors
    /// An unreadable password file.
    pub fn sasl_password(&self) -> Result<Option<Secret>, ConfigError> {
        if self.kafka.sasl_password_file.is_none() && self.kafka.sasl_password_env.is_none() {
            return Ok(None);
        }
        read_secret(&self.kafka.sasl_password_file, &self.kafka.sasl_password_env).map(Some)
    }
}

fn read_secret(file: &Option<PathBuf>, env: &Option<String>) -> Result<Secret, ConfigError> {
    if let Some(f) = file {
        let v = std::fs::read_to_string(f).map_err(|source| ConfigError::Read { path: f.clone(), source })?;
        return Ok(Secret(v.trim_end_matches(['\n', '\r']).to_string()));
    }
    if let Some(name) = env {
        return Ok(Secret(std::env::var(name).unwrap_or_default()));
    }
    Ok(Secret::default())
}

/// Sets `parents.last = value`, creating tables on the way; a non-table in the way wins (the
/// deserializer then reports the type error).
fn set_path(table: &mut toml::Table, parents: &[String], last: &str, value: toml::Value) {
    match parents.split_first() {
        None => {
            table.insert(last.to_string(), value);
        }
        Some((first, rest)) => {
            if let toml::Value::Table(t) =
                table.entry(first.clone()).or_insert_with(|| toml::Value::Table(toml::Table::new()))
            {
                set_path(t, rest, last, value);
            }
        }
    }
}

/// Applies `SLUICE_<SECTION>__<KEY>` variables to the parsed document.
fn apply_env(doc: &mut toml::Table, env: impl IntoIterator<Item = (String, String)>) {
    for (k, v) in env {
        let Some(path) = k.strip_prefix("SLUICE_") else { continue };
        let parts: Vec<String> = path.split("__").map(str::to_ascii_lowercase).collect();
        if parts.len() < 2 || parts.iter().any(String::is_empty) {
            continue; // SLUICE_LOG and friends are CLI settings, not config keys
        }
        let value = format!("x = {v}")
            .parse::<toml::Table>()
            .ok()
            .and_then(|mut t| t.remove("x"))
            .unwrap_or(toml::Value::String(v));
        if let Some((last, parents)) = parts.split_last() {
            set_path(doc, parents, last, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
[source]
name = "shop"
url = "mysql://repl@127.0.0.1:3306"

[kafka]
brokers = "127.0.0.1:9092"

[registry]
url = "http://127.0.0.1:8081"
"#;

    fn load(text: &str, env: Vec<(&str, &str)>) -> Result<Config, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sluice.toml");
        std::fs::write(&path, text).unwrap();
        Config::load(&path, env.into_iter().map(|(a, b)| (a.to_string(), b.to_string())))
    }

    #[test]
    fn defaults_and_env_overrides() {
        let cfg = load(
            MINIMAL,
            vec![("SLUICE_KAFKA__PARTITIONS", "6"), ("SLUICE_SOURCE__HEARTBEAT", "2s"), ("SLUICE_LOG", "debug")],
        )
        .unwrap();
        assert_eq!(cfg.kafka.partitions, 6);
        assert_eq!(cfg.source.heartbeat, Duration::from_secs(2));
        assert_eq!(cfg.kafka.topic_prefix, "sluice");
        assert!(cfg.output.tombstones);
        assert!(!cfg.output.partial_images, "partial row images are opt-in");
        assert_eq!(cfg.output.value_mode, ValueMode::Envelope);
        let cfg = load(&format!("{MINIMAL}\n[output]\npartial_images = true\n"), vec![]).unwrap();
        assert!(cfg.output.partial_images);
    }

    /// The documented example loads and validates as shipped, and with its commented
    /// `[kafka.properties]` block switched on.
    #[test]
    fn the_example_configuration_is_valid() {
        // the secret file it names, here
        let secrets = tempfile::tempdir().unwrap();
        let password = secrets.path().join("mysql-password");
        std::fs::write(&password, "secret\n").unwrap();
        let example = include_str!("../../../sluice.example.toml")
            .replace("/run/secrets/mysql-password", password.to_str().unwrap());
        let cfg = load(&example, vec![]).unwrap();
        assert_eq!(cfg.source.name, "shop");
        assert_eq!(cfg.kafka.batch_max_records, 100_000);
        let mut in_block = false;
        let uncommented: String = example
            .lines()
            .map(|l| {
                in_block = (in_block && l.starts_with("# \"")) || l.starts_with("# [kafka.properties]");
                let l = if in_block { &l[2..] } else { l };
                format!("{l}\n")
            })
            .collect();
        let cfg = load(&uncommented, vec![]).unwrap();
        assert_eq!(cfg.kafka.properties.get("queue.buffering.max.messages").map(String::as_str), Some("20000"));
        assert_eq!(cfg.kafka.properties.get("sasl.username").map(String::as_str), Some("sluice"));
    }

    #[test]
    fn unknown_keys_are_errors() {
        let e = load(&format!("{MINIMAL}\n[output]\ntombstone = false\n"), vec![]).unwrap_err().to_string();
        assert!(e.contains("unknown field `tombstone`"), "{e}");
    }

    #[test]
    fn every_problem_at_once() {
        let text = MINIMAL
            .replace("name = \"shop\"", "name = \"bad name\"")
            .replace("repl@", "repl:secret@")
            .replace("http://127", "ftp://127");
        let e = load(&text, vec![("SLUICE_KAFKA__PARTITIONS", "0"), ("SLUICE_METRICS__LISTEN", "everywhere:9187")])
            .unwrap_err();
        let ConfigError::Invalid(problems) = e else { panic!("{e}") };
        assert_eq!(problems.len(), 5, "{problems:#?}");
        assert!(problems.iter().any(|p| p.starts_with("metrics.listen \"everywhere:9187\" is not an address")));
        assert!(!format!("{problems:?}").contains("secret@127"), "the password must not be echoed");
    }

    #[test]
    fn byte_sizes() {
        assert_eq!(parse_byte_size("16MiB"), Ok(16 << 20));
        assert_eq!(parse_byte_size("512 KiB"), Ok(512 << 10));
        assert_eq!(parse_byte_size("2GB"), Ok(2_000_000_000));
        assert_eq!(parse_byte_size("100"), Ok(100));
        assert!(parse_byte_size("16 parsecs").unwrap_err().contains("unknown unit"));
        let cfg = load(MINIMAL, vec![("SLUICE_KAFKA__BATCH_MAX_BYTES", "1MiB")]).unwrap();
        assert_eq!(cfg.kafka.batch_max_bytes, 1 << 20);
        let cfg = load(&MINIMAL.replace("[registry]", "batch_max_bytes = \"64KiB\"\n\n[registry]"), vec![]).unwrap();
        assert_eq!(cfg.kafka.batch_max_bytes, 64 << 10);
        assert_eq!(load(MINIMAL, vec![]).unwrap().kafka.batch_max_bytes, 16 << 20);
    }

    #[test]
    fn exclude_columns_need_three_parts() {
        let e = load(&format!("{MINIMAL}\n[filter]\nexclude_columns = [\"shop.password\"]\n"), vec![]).unwrap_err();
        assert!(e.to_string().contains("db.table.column"), "{e}");
    }

    #[test]
    fn secrets_are_redacted() {
        let s = Secret("hunter2".into());
        assert_eq!(format!("{s:?}"), "<redacted>");
        assert_eq!(s.expose(), "hunter2");
    }
}
