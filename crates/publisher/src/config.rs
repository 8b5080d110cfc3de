//! `sluice run` configuration: a TOML file, overridden by `SLUICE_*` environment variables,
//! parsed once at load into typed sections.
//!
//! The doc comments on these structs are the user documentation (`sluice.example.toml`
//! repeats them). Loading reports **every** problem at once ([`Config::load`]): unknown keys
//! (a typo is an error, not a silently ignored setting), values of the wrong type or form
//! (`source.start = "yesterday"`, `source.tls = "maybe"`, a URL with a password), and what
//! the validations find; each problem names its key, and the `SLUICE_*` variable when
//! the value came from one.
//!
//! Environment overrides: `SLUICE_<SECTION>__<KEY>=value` sets `[section] key = value`, e.g.
//! `SLUICE_KAFKA__BROKERS=kafka-0:9092` or `SLUICE_SOURCE__SERVER_ID=7`. The value is read as a
//! TOML value when it parses as one (numbers, booleans, `[...]` arrays) and the key takes that
//! type, else as a string.
//! Secrets are never written in the file itself: they come from a file (`*_file`) or an
//! environment variable (`*_env`), and are redacted wherever a config is printed.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::position::StartFrom;

/// The whole configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The MySQL/MariaDB server to capture.
    pub source: SourceSection,
    /// The Kafka cluster to publish to.
    pub kafka: KafkaSection,
    /// The Confluent-compatible Schema Registry.
    pub registry: RegistrySection,
    /// What the records look like.
    pub output: OutputSection,
    /// Which tables and columns are captured.
    pub filter: FilterSection,
    /// Topic routing rules (first match wins; default `<prefix>.<db>.<table>`).
    pub routes: Vec<Route>,
    /// The Prometheus endpoint.
    pub metrics: MetricsSection,
    /// Snapshots: the rows already in the tables.
    pub snapshot: SnapshotSection,
    /// `sluice sink elasticsearch`, when configured.
    pub elasticsearch: Option<ElasticsearchSection>,
}

/// What `sluice sink elasticsearch` reads of the configuration: the same file as `sluice run`'s,
/// without needing `[source]` (the sink never talks to MySQL, so it needs no MySQL password).
#[derive(Debug, Clone)]
pub struct SinkConfig {
    /// The Kafka cluster the topics are read from (`topic_prefix` names them).
    pub kafka: KafkaSection,
    /// The registry the records' schemas come from.
    pub registry: RegistrySection,
    /// The Elasticsearch (or OpenSearch) side.
    pub elasticsearch: ElasticsearchSection,
    /// The Prometheus endpoint.
    pub metrics: MetricsSection,
}

/// The document as deserialized: every section optional, so that one broken or missing section
/// does not hide the problems of the others (a missing required section is reported by
/// [`Config::load`]).
#[derive(Debug, Default, Deserialize)]
struct RawConfig {
    source: Option<SourceSection>,
    kafka: Option<KafkaSection>,
    registry: Option<RegistrySection>,
    #[serde(default)]
    output: OutputSection,
    #[serde(default)]
    filter: FilterSection,
    #[serde(default)]
    routes: Vec<Route>,
    #[serde(default)]
    metrics: MetricsSection,
    #[serde(default)]
    snapshot: SnapshotSection,
    elasticsearch: Option<ElasticsearchSection>,
}

/// `[elasticsearch]`: `sluice sink elasticsearch` keeps one index per table equal to the table,
/// from the table's topic: a row's document is indexed under its key, a delete deletes it, and
/// each index gets a mapping derived from the table's schema before its first document.
#[derive(Debug, Clone, Deserialize)]
pub struct ElasticsearchSection {
    /// Base URL of Elasticsearch or OpenSearch, e.g. `https://es:9200` (no password here).
    pub url: String,
    /// Basic-auth user.
    #[serde(default)]
    pub username: Option<String>,
    /// File holding the basic-auth password.
    #[serde(default)]
    pub password_file: Option<PathBuf>,
    /// Environment variable holding the basic-auth password.
    #[serde(default)]
    pub password_env: Option<String>,
    /// File holding an API key (the base64 `id:key` Elasticsearch returns as `encoded`), sent
    /// as `Authorization: ApiKey ...` instead of basic auth.
    #[serde(default)]
    pub api_key_file: Option<PathBuf>,
    /// Environment variable holding an API key.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// For an `https://` URL: a PEM file of the CA certificates that signed the cluster's
    /// certificate, besides the public roots. The certificate and host name are always verified.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// The index of a table's documents: a pattern with `{topic}`, `{db}` and `{table}`,
    /// lower-cased (Elasticsearch wants lower case). Default `{topic}` (`sluice.shop.orders`).
    #[serde(default = "default_es_index")]
    pub index: String,
    /// Index names of single tables, over `index` (`"shop.orders" = "orders-v2"`): how a table
    /// whose column changed type moves to a new index (see the README, "Reindexing").
    #[serde(default)]
    pub indices: BTreeMap<String, String>,
    /// The tables to sync (`db.table` patterns with `*` and `?`; default: every table topic
    /// under `kafka.topic_prefix`).
    #[serde(default)]
    pub include: Vec<String>,
    /// Tables never synced (wins over `include`).
    #[serde(default)]
    pub exclude: Vec<String>,
    /// A bulk request is sent at this many actions ...
    #[serde(default = "default_bulk_actions")]
    pub bulk_max_actions: usize,
    /// ... or this many bytes of request body (`"5MiB"`) ...
    #[serde(default = "default_bulk_bytes", deserialize_with = "byte_size")]
    pub bulk_max_bytes: u64,
    /// ... or this long after its first action, whichever comes first.
    #[serde(default = "default_bulk_interval", with = "humantime_serde")]
    pub bulk_interval: Duration,
    /// How long one request may take before it is retried.
    #[serde(default = "default_es_timeout", with = "humantime_serde")]
    pub request_timeout: Duration,
    /// A partition with records waiting whose consumer position has not moved for this long is
    /// stalled: `/readyz` answers 503, `sluice_es_stalled_partitions` counts it, and the sink
    /// restarts its consumer from the committed offsets (checked every 10 s of the sink's own
    /// time, so a slow bulk request does not count as a stall).
    #[serde(default = "default_stall_after", with = "humantime_serde")]
    pub stall_after: Duration,
    /// The Kafka consumer group; its committed offsets are where a restart resumes. Default
    /// `sluice-es-<kafka.topic_prefix>`.
    #[serde(default)]
    pub group_id: Option<String>,
    /// DECIMAL columns as `keyword` (exact; default) or `scaled_float` (numeric, rounded to the
    /// column's scale: a DECIMAL(65,30) does not fit).
    #[serde(default)]
    pub decimal: EsDecimal,
    /// TIME columns as `long` microseconds (default; sorts and ranges) or `keyword` text
    /// (`-838:59:59.000000`).
    #[serde(default)]
    pub time: EsTime,
    /// JSON columns as `flattened` (default: any keys, one field type), `object` (each key
    /// mapped; a value that is not a JSON object is refused) or `keyword` (the JSON text).
    #[serde(default)]
    pub json: EsJson,
    /// POINT columns indexed as `geo_point` (`{lat, lon}` from the WKB), by `db.table.column`
    /// pattern; other GEOMETRY columns are `{srid, wkb}` with the WKB as `binary`.
    #[serde(default)]
    pub geo_point: Vec<String>,
    /// librdkafka settings for the sink's consumer (e.g. `session.timeout.ms`), over
    /// `kafka.properties` (which it shares with `sluice run`: brokers' security settings).
    #[serde(default)]
    pub consumer: BTreeMap<String, String>,
}

/// `elasticsearch.decimal`
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EsDecimal {
    /// The exact digits as text.
    #[default]
    Keyword,
    /// A `scaled_float` with the column's scale.
    ScaledFloat,
}

/// `elasticsearch.time`
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EsTime {
    /// Signed microseconds.
    #[default]
    Long,
    /// MySQL's text.
    Keyword,
}

/// `elasticsearch.json`
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EsJson {
    /// `flattened`.
    #[default]
    Flattened,
    /// `object` (dynamic within the column).
    Object,
    /// The canonical JSON text as `keyword`.
    Keyword,
}

fn default_es_index() -> String {
    "{topic}".into()
}
fn default_bulk_actions() -> usize {
    1000
}
fn default_bulk_bytes() -> u64 {
    5 << 20
}
fn default_bulk_interval() -> Duration {
    Duration::from_secs(1)
}
fn default_stall_after() -> Duration {
    Duration::from_secs(60)
}
fn default_es_timeout() -> Duration {
    Duration::from_secs(30)
}

impl ElasticsearchSection {
    /// The basic-auth password, if configured.
    ///
    /// # Errors
    /// An unreadable password file or unset variable.
    pub fn password(&self) -> Result<Option<Secret>, ConfigError> {
        optional_secret(&self.password_file, &self.password_env)
    }

    /// The API key, if configured.
    ///
    /// # Errors
    /// An unreadable key file or unset variable.
    pub fn api_key(&self) -> Result<Option<Secret>, ConfigError> {
        optional_secret(&self.api_key_file, &self.api_key_env)
    }

    /// The consumer group.
    pub fn group(&self, topic_prefix: &str) -> String {
        self.group_id.clone().unwrap_or_else(|| format!("sluice-es-{topic_prefix}"))
    }

    fn validate(&self, p: &mut Problems) {
        let key = "elasticsearch.url";
        if !(self.url.starts_with("http://") || self.url.starts_with("https://")) {
            p.push(key, format!("{:?} must start with http:// or https://", redact_url(&self.url)));
        } else if url::Url::parse(&self.url).is_ok_and(|u| u.password().is_some()) {
            p.push(key, "must not contain a password: use elasticsearch.username and password_file or password_env");
        }
        validate_secret(p, "elasticsearch.password", &self.password_file, &self.password_env);
        validate_secret(p, "elasticsearch.api_key", &self.api_key_file, &self.api_key_env);
        if self.username.is_some() && (self.api_key_file.is_some() || self.api_key_env.is_some()) {
            p.push("elasticsearch.username", "set either a username (basic auth) or an API key, not both");
        }
        if let Some(f) = &self.ca_file {
            if !self.url.starts_with("https://") {
                p.push("elasticsearch.ca_file", "is set, but elasticsearch.url is not https://");
            } else if !f.exists() {
                p.push("elasticsearch.ca_file", format!("{} does not exist", f.display()));
            }
        }
        if !self.index.contains("{topic}") && !self.index.contains("{table}") {
            p.push("elasticsearch.index", "must contain {topic} or {table} (each table needs its own index)");
        }
        if let Some(bad) = self.index.chars().find(|c| "\\/*?\"<>| ,#:".contains(*c)) {
            p.push(
                "elasticsearch.index",
                format!("must not contain {bad:?} (Elasticsearch refuses it in index names)"),
            );
        }
        for (table, name) in &self.indices {
            if table.split('.').count() != 2 || table.contains('*') || table.contains('?') {
                p.push(format!("elasticsearch.indices.{table}"), "the key must be \"db.table\" (no wildcards)");
            }
            if let Some(bad) = name.chars().find(|c| "\\/*?\"<>| ,#:".contains(*c)) {
                p.push(format!("elasticsearch.indices.{table}"), format!("must not contain {bad:?}"));
            }
        }
        for (name, patterns) in [("include", &self.include), ("exclude", &self.exclude)] {
            for pattern in patterns {
                if let Some(m) = table_pattern_problem(pattern) {
                    p.push(format!("elasticsearch.{name}"), m);
                }
            }
        }
        for pattern in &self.geo_point {
            if pattern.split('.').count() != 3 {
                p.push("elasticsearch.geo_point", format!("{pattern:?} must be \"db.table.column\""));
            }
        }
        if self.bulk_max_actions == 0 || self.bulk_max_actions > 100_000 {
            p.push("elasticsearch.bulk_max_actions", "must be 1 to 100000");
        }
        if self.bulk_max_bytes < 1024 {
            p.push("elasticsearch.bulk_max_bytes", "must be at least 1KiB");
        }
        if self.request_timeout < Duration::from_secs(1) {
            p.push("elasticsearch.request_timeout", "must be at least 1s");
        }
        if self.stall_after < Duration::from_secs(10) {
            p.push("elasticsearch.stall_after", "must be at least 10s (partitions are checked every 10 s)");
        }
        librdkafka_problems("elasticsearch.consumer", &self.consumer, p);
    }
}

/// `[metrics]`
#[derive(Debug, Clone, Default, Deserialize)]
pub struct MetricsSection {
    /// Serve `/metrics` (Prometheus text format), `/healthz` (200 while the process runs) and
    /// `/readyz` (200 while it streams, 503 while it connects or restarts) on this address,
    /// e.g. `0.0.0.0:9187`. Off when unset.
    #[serde(default, deserialize_with = "socket_address")]
    pub listen: Option<std::net::SocketAddr>,
}

/// `[snapshot]`: the rows already in the captured tables, read in primary-key order, chunk by
/// chunk, between the binlog events (no lock, no long transaction), and published as `op = "r"`
/// records with the same keys and schemas as the streamed ones. Each chunk's records commit in
/// the same Kafka transaction as the snapshot's progress, so a restart resumes at the next
/// chunk. Rows the binlog changes while their chunk is read are left to those change events:
/// no consumer sees a row go back to an older state.
#[derive(Debug, Clone, Deserialize)]
pub struct SnapshotSection {
    /// When to snapshot:
    /// - `initial` (default): the included tables, at the first start (no checkpoint yet);
    /// - `when_needed`: as `initial`, and again, from the server's current position, when the
    ///   checkpoint's binlog has been purged (instead of stopping);
    /// - `never`: only changes from `source.start` on;
    /// - `schema_only`: register every included table's schemas at the first start, publish no
    ///   rows.
    ///
    /// `sluice snapshot --table db.t` asks a running instance for a snapshot of more tables in
    /// any mode.
    ///
    /// **One setting decides where the first start's rows come from**: the snapshot, or the
    /// binlog's history from `source.start`. Without `source.start`, the first start streams
    /// from the server's `current` position when the mode snapshots (the snapshot covers the
    /// rows before it) and from `earliest` with `never`. An explicit `source.start` other than
    /// `current` without this key means `never` (the history covers the rows; said in the log
    /// and by `sluice check`); an explicit start together with `initial` or `when_needed` is
    /// refused at load, because every existing row would arrive twice (its history, then an
    /// `r` record), and go back to an older state in between.
    #[serde(default)]
    pub mode: SnapshotMode,
    /// Why `mode` is what it is when the file did not say (an explicit `source.start`): said
    /// in the log at the first start and by `sluice check`.
    #[serde(skip)]
    pub mode_implied: Option<String>,
    /// Rows read per chunk. The stream waits for one chunk at most; a chunk's rows are held in
    /// memory until the binlog passes the position at which they were read.
    #[serde(default = "default_chunk_size")]
    pub chunk_size: usize,
    /// A chunk ends early once its rows hold this many bytes (then the next chunk asks for
    /// fewer rows), so wide rows do not multiply the memory a chunk holds (an integer, or text
    /// with a unit: `"8MiB"`).
    #[serde(default = "default_chunk_bytes", deserialize_with = "byte_size")]
    pub chunk_max_bytes: u64,
    /// How long a chunk query waits for a table lock (the server's `lock_wait_timeout` on the
    /// snapshot's connection): a chunk behind a DDL or `LOCK TABLES ... WRITE` would otherwise
    /// hold the stream for as long as the lock is held (the server's default is a year). A
    /// chunk that waits this long is tried again twice (1 and 2 s later), then Sluice stops
    /// naming the table; the next start resumes at that chunk.
    #[serde(default = "default_lock_wait", with = "humantime_serde")]
    pub lock_wait_timeout: Duration,
    /// Tables (patterns, as in `[filter]`) left out of snapshots; they are still streamed.
    #[serde(default)]
    pub exclude: Vec<String>,
    /// A condition per table (`"shop.orders" = "created_at >= '2024-01-01'"`): only the rows it
    /// selects are snapshotted (changes to every row are still streamed).
    #[serde(default, rename = "where")]
    pub filters: BTreeMap<String, String>,
}

/// `snapshot.mode`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SnapshotMode {
    /// At the first start.
    #[default]
    Initial,
    /// At the first start, and when the checkpoint's binlog is gone.
    WhenNeeded,
    /// Never (on demand only).
    Never,
    /// Schemas only, at the first start.
    SchemaOnly,
}

impl SnapshotMode {
    /// True when the first start reads the tables' rows.
    pub fn reads_rows(self) -> bool {
        matches!(self, SnapshotMode::Initial | SnapshotMode::WhenNeeded)
    }
}

impl Default for SnapshotSection {
    fn default() -> Self {
        SnapshotSection {
            mode: SnapshotMode::default(),
            chunk_size: default_chunk_size(),
            chunk_max_bytes: default_chunk_bytes(),
            lock_wait_timeout: default_lock_wait(),
            exclude: Vec::new(),
            filters: BTreeMap::new(),
            mode_implied: None,
        }
    }
}

impl SnapshotSection {
    /// The configured condition for `db.table`, if any.
    pub fn filter_of(&self, db: &str, table: &str) -> Option<&str> {
        self.filters.get(&format!("{db}.{table}")).map(String::as_str)
    }

    fn validate(&self, p: &mut Problems) {
        if self.chunk_size == 0 || self.chunk_size > 1_000_000 {
            p.push("snapshot.chunk_size", "must be 1 to 1000000");
        }
        if self.chunk_max_bytes < 1024 {
            p.push("snapshot.chunk_max_bytes", "must be at least 1KiB");
        }
        if self.lock_wait_timeout < Duration::from_secs(1) {
            p.push("snapshot.lock_wait_timeout", "must be at least 1s (whole seconds)");
        }
        for pattern in &self.exclude {
            if let Some(m) = table_pattern_problem(pattern) {
                p.push("snapshot.exclude", m);
            }
        }
        for (table, condition) in &self.filters {
            if table.split('.').count() != 2 || table.contains('*') || table.contains('?') {
                p.push(format!("snapshot.where.{table}"), "the key must be \"db.table\" (no wildcards)");
            }
            if let Some(why) = condition_problem(condition) {
                p.push(format!("snapshot.where.{table:?}"), why);
            }
        }
    }
}

/// Why `condition` is not one SQL boolean expression that can stand in a `WHERE`, if it is
/// not: the snapshot pastes it into its chunk queries (`WHERE (condition) AND key > ...`), so a
/// text that closes the parenthesis, adds a statement or comments out the rest would change
/// what the query reads. Parsed with sqlparser's MySQL dialect; `sluice check` also asks the
/// server (`EXPLAIN`).
pub fn condition_problem(condition: &str) -> Option<String> {
    use sqlparser::dialect::MySqlDialect;
    use sqlparser::parser::Parser;
    use sqlparser::tokenizer::{Token, Tokenizer, Whitespace};
    if condition.trim().is_empty() {
        return Some("is empty: give one SQL condition, e.g. \"created_at >= '2024-01-01'\"".into());
    }
    let dialect = MySqlDialect {};
    let tokens = match Tokenizer::new(&dialect, condition).tokenize() {
        Ok(t) => t,
        Err(e) => return Some(format!("is not SQL: {e}")),
    };
    for t in &tokens {
        match t {
            Token::SemiColon => return Some("must be one condition: no ';'".into()),
            Token::Whitespace(Whitespace::SingleLineComment { .. } | Whitespace::MultiLineComment(_)) => {
                return Some("must not contain a comment (--, #, /* */)".into())
            }
            _ => {}
        }
    }
    let mut parser = Parser::new(&dialect).with_tokens(tokens);
    if let Err(e) = parser.parse_expr() {
        return Some(format!("is not one SQL condition: {e}"));
    }
    match parser.peek_token().token {
        Token::EOF => None,
        rest => Some(format!(
            "is not one SQL condition: it goes on after the condition at {rest:?} (unbalanced parentheses, or a \
             second clause)"
        )),
    }
}

/// `[source]`
#[derive(Debug, Clone, Deserialize)]
pub struct SourceSection {
    /// A stable name for this capture (letters, digits, `-`, `_`). It names the Kafka
    /// transactional id (`sluice-<name>`) and the checkpoint key: two instances with the same
    /// name fence each other, so exactly one publishes.
    pub name: String,
    /// `mysql://USER@HOST:PORT` (no password here).
    pub url: SourceUrl,
    /// Other servers of the same replication topology (GTID replicas with
    /// `log_slave_updates`), tried in order when the current one stays unreachable for
    /// `failover_after`: Sluice resumes there by the checkpoint's GTIDs, after checking that
    /// the server's GTID history contains them (else it stops naming the missing GTIDs, never
    /// streaming with a gap). Same user, password and TLS as `url`. A checkpoint without GTIDs
    /// cannot move between servers: failover then stops with a message.
    #[serde(default)]
    pub failover: Vec<SourceUrl>,
    /// How long the current server may stay unreachable before the next of `failover` is
    /// tried (e.g. `30s`).
    #[serde(default = "default_failover_after", with = "humantime_serde")]
    pub failover_after: Duration,
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
    #[serde(default)]
    pub tls: TlsSetting,
    /// CA certificate (PEM) for `verify-ca` / `verify-identity`.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// Heartbeat period asked of the server (e.g. `5s`).
    #[serde(default = "default_heartbeat", with = "humantime_serde")]
    pub heartbeat: Duration,
    /// The largest binlog event Sluice takes (e.g. `"256MiB"`; default `"1GiB"`, MySQL's
    /// largest `max_allowed_packet`). An event is held whole while it is decoded, so this bounds
    /// the memory one huge row can take; a larger event stops `sluice run` with its position and
    /// size. The server's `max_allowed_packet` bounds what it writes.
    #[serde(default = "default_max_event_size", deserialize_with = "byte_size")]
    pub max_event_size: u64,
    /// Where to start when there is no checkpoint yet: `earliest`, `current`,
    /// `file:position` (`mysql-bin.000042:4`), or a GTID set (either flavour). Default:
    /// `current` when `snapshot.mode` reads the tables (the snapshot covers what came before),
    /// else `earliest`. A start other than `current` replays the rows' history, so it goes
    /// without a snapshot: with no `snapshot.mode` it means `never`, and together with
    /// `snapshot.mode = "initial"` or `"when_needed"` it is refused (see `snapshot.mode`).
    ///
    /// `earliest` and `current` are resolved once, when `sluice run` first reaches the server
    /// without a checkpoint (also while Kafka is still unreachable), and the position is
    /// committed to `<prefix>.__positions` as the first checkpoint before any record is
    /// published: every restart after that resumes from it, so nothing written after the
    /// start is skipped. Only a process that stops before Kafka was ever reachable resolves
    /// the start again at its next start.
    ///
    /// With `binlog_row_metadata` other than FULL, column names come from the captured tables'
    /// definitions read from the server at this start, then tracked across the binlog's DDL: a
    /// start in the past applies today's definitions to older events until a DDL in the binlog
    /// replaces them (a TABLE_MAP that disagrees in column count or types stops the run).
    #[serde(default = "default_start")]
    pub start: StartFrom,
}

/// `source.tls`, as MySQL's clients name the modes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum TlsSetting {
    /// Plain TCP.
    Disabled,
    /// TLS when the server offers it (certificate not checked).
    #[default]
    Preferred,
    /// TLS or fail (certificate not checked).
    Required,
    /// TLS with the certificate checked against the CA (`ca_file`, `--ca`).
    VerifyCa,
    /// As `verify-ca`, and the host name must match the certificate.
    VerifyIdentity,
}

impl TlsSetting {
    /// The protocol crate's mode.
    pub fn mode(self) -> sluice_protocol::TlsMode {
        match self {
            TlsSetting::Disabled => sluice_protocol::TlsMode::Disabled,
            TlsSetting::Preferred => sluice_protocol::TlsMode::Preferred,
            TlsSetting::Required => sluice_protocol::TlsMode::Required,
            TlsSetting::VerifyCa => sluice_protocol::TlsMode::VerifyCa,
            TlsSetting::VerifyIdentity => sluice_protocol::TlsMode::VerifyIdentity,
        }
    }

    /// True for the modes that check the server's certificate (and need a CA).
    pub fn verifies(self) -> bool {
        matches!(self, TlsSetting::VerifyCa | TlsSetting::VerifyIdentity)
    }
}

/// Where the source server is, and as whom: `mysql://USER@HOST[:PORT]` (or `mariadb://`).
///
/// A password in the URL is refused wherever a URL is read (`source.url`, `dump --source`):
/// it would sit in the configuration or in the process list and shell history, and URLs get
/// printed. Messages about a URL print it with any password masked.
#[derive(Clone, PartialEq, Eq)]
pub struct SourceUrl {
    /// The user to log in as.
    pub user: String,
    /// Host name or address.
    pub host: String,
    /// TCP port (3306 when the URL names none).
    pub port: u16,
}

impl SourceUrl {
    /// Parses `text`; `password_hint` says where the password goes instead (for the message
    /// when the URL carries one).
    ///
    /// # Errors
    /// Not a `mysql://` or `mariadb://` URL, no user or host, a password, or a path or query.
    pub fn parse(text: &str, password_hint: &str) -> Result<SourceUrl, String> {
        let shown = redact_url(text);
        const FORM: &str = "mysql://USER@HOST:PORT";
        if !text.contains("://") {
            return Err(format!("{shown:?} must start with mysql:// or mariadb:// ({FORM})"));
        }
        let url = url::Url::parse(text.trim()).map_err(|e| format!("{shown:?} is not a URL like {FORM} ({e})"))?;
        if !matches!(url.scheme(), "mysql" | "mariadb") {
            return Err(format!("{shown:?} must start with mysql:// or mariadb://, not {}://", url.scheme()));
        }
        if url.password().is_some() {
            return Err(format!(
                "{shown:?} must not contain a password (it would be shown wherever the URL is): use {password_hint}"
            ));
        }
        let host = url.host_str().filter(|h| !h.is_empty()).ok_or_else(|| format!("{shown:?} names no host"))?;
        let decode =
            |v: &str| url::form_urlencoded::parse(format!("x={v}").as_bytes()).next().map(|(_, v)| v.into_owned());
        let user = decode(url.username())
            .filter(|u| !u.is_empty())
            .ok_or_else(|| format!("{shown:?} names no user: write it as {FORM}"))?;
        if !(url.path().is_empty() || url.path() == "/") || url.query().is_some() {
            return Err(format!("{shown:?} must be {FORM}, without a database or options"));
        }
        // an IPv6 literal keeps its brackets in host_str; the socket address wants it bare
        let host = host.trim_start_matches('[').trim_end_matches(']').to_string();
        Ok(SourceUrl { user, host, port: url.port().unwrap_or(3306) })
    }
}

impl fmt::Display for SourceUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "{}@[{}]:{}", self.user, self.host, self.port)
        } else {
            write!(f, "{}@{}:{}", self.user, self.host, self.port)
        }
    }
}

impl fmt::Debug for SourceUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "mysql://{self}")
    }
}

impl<'de> Deserialize<'de> for SourceUrl {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<SourceUrl, D::Error> {
        let text = String::deserialize(d)?;
        SourceUrl::parse(&text, "source.password_file or source.password_env").map_err(serde::de::Error::custom)
    }
}

/// `text` with every password it may carry masked, for messages: the password of each
/// `[scheme://]user:password@host` and each `password=value` (as URL queries write them).
pub fn redact_url(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    // userinfo: from the start of the word (after white space or a quote) to an '@'
    while let Some(at) = rest.find('@') {
        let word_start = rest[..at].rfind(|c: char| c.is_whitespace() || "\"'`(<,=".contains(c)).map_or(0, |i| i + 1);
        let word = &rest[word_start..at];
        let userinfo_start = word.find("://").map_or(0, |i| i + 3);
        out.push_str(&rest[..word_start + userinfo_start]);
        let userinfo = &word[userinfo_start..];
        match userinfo.split_once(':') {
            Some((user, _)) => {
                out.push_str(user);
                out.push_str(":***");
            }
            None => out.push_str(userinfo),
        }
        out.push('@');
        rest = &rest[at + 1..];
    }
    out.push_str(rest);
    let mut masked = String::with_capacity(out.len());
    let mut rest = out.as_str();
    while let Some(i) = rest.to_ascii_lowercase().find("password=") {
        let end = i + "password=".len();
        masked.push_str(&rest[..end]);
        masked.push_str("***");
        let after = &rest[end..];
        let stop = after.find(|c: char| c == '&' || c.is_whitespace() || "\"'".contains(c)).unwrap_or(after.len());
        rest = &after[stop..];
    }
    masked.push_str(rest);
    masked
}

/// `[kafka]`
#[derive(Debug, Clone, Deserialize)]
pub struct KafkaSection {
    /// Bootstrap servers, `host:port[,host:port...]`.
    pub brokers: String,
    /// Topic prefix: records go to `<prefix>.<db>.<table>`, checkpoints to
    /// `<prefix>.__positions`, the tracked schema history (column names for TABLE_MAPs
    /// without them, see the `schema` module) to `<prefix>.__schemas`.
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
    /// commits, the next is encoded, holding up to half of `batch_max_bytes` of its records in
    /// memory; then it waits for the commit.)
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
pub struct RegistrySection {
    /// Base URL, e.g. `http://schema-registry:8081`.
    pub url: String,
    /// Basic-auth user, when the registry wants one.
    #[serde(default)]
    pub username: Option<String>,
    /// File holding the basic-auth password.
    #[serde(default)]
    pub password_file: Option<PathBuf>,
    /// Environment variable holding the basic-auth password.
    #[serde(default)]
    pub password_env: Option<String>,
    /// For an `https://` URL: a PEM file of the CA certificates that signed the registry's
    /// certificate, besides the public roots (Mozilla's). The certificate and its host name are
    /// always verified.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
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
    /// ENUM columns as Avro strings (the member names listed in the field's `sluice.allowed`
    /// property) instead of Avro enums. Needed when a table holds MySQL's empty error value
    /// (index 0, written by non-strict `sql_mode`), which has no Avro enum symbol: it becomes
    /// `""`. Switching it changes the value schemas of tables with ENUM columns.
    #[serde(default)]
    pub enums_as_strings: bool,
}

impl Default for OutputSection {
    fn default() -> Self {
        OutputSection {
            value_mode: ValueMode::Envelope,
            tombstones: true,
            key_columns: BTreeMap::new(),
            partial_images: false,
            enums_as_strings: false,
        }
    }
}

/// `[filter]`: patterns are `db.table` (or a table name in any database) with `*` and `?`
/// wildcards.
#[derive(Debug, Clone, Default, Deserialize)]
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
pub struct Route {
    /// `db.table` pattern with wildcards.
    pub tables: String,
    /// Topic name; `{db}` and `{table}` are replaced.
    pub topic: String,
}

fn default_server_id() -> u32 {
    51_001
}
fn default_max_event_size() -> u64 {
    1 << 30
}

fn default_failover_after() -> Duration {
    Duration::from_secs(30)
}
fn default_heartbeat() -> Duration {
    Duration::from_secs(5)
}
fn default_start() -> StartFrom {
    StartFrom::Earliest
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
fn default_chunk_size() -> usize {
    10_000
}
fn default_chunk_bytes() -> u64 {
    8 << 20
}
fn default_lock_wait() -> Duration {
    Duration::from_secs(10)
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

/// Reads `host:port` into a socket address.
fn socket_address<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<std::net::SocketAddr>, D::Error> {
    let text = String::deserialize(d)?;
    text.parse()
        .map(Some)
        .map_err(|e| serde::de::Error::custom(format!("{text:?} is not an address like 0.0.0.0:9187: {e}")))
}

/// A byte size with an optional unit: `B`, `KB`/`MB`/`GB` (powers of 1000), `KiB`/`MiB`/`GiB`.
///
/// # Errors
/// Not a number with a known unit, or too large.
pub fn parse_byte_size(text: &str) -> Result<u64, String> {
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
    /// Wraps a secret read from somewhere safe (a file, the environment, a prompt).
    pub fn new(value: String) -> Secret {
        Secret(value)
    }

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

/// One configuration problem: the key, what is wrong with it, and where its value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The key in TOML's dotted form (`source.start`, `kafka.properties."linger.ms"`, `routes[0].topic`).
    pub key: String,
    /// The `SLUICE_*` variable that set the value, when one did.
    pub variable: Option<String>,
    /// What is wrong, and what to do where that is not obvious.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.variable {
            Some(v) => write!(f, "{v} (sets {}): {}", self.key, self.message),
            None => write!(f, "{}: {}", self.key, self.message),
        }
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
    /// The file is not TOML.
    #[error("{path} is not valid TOML: {message}")]
    Syntax {
        /// Path.
        path: PathBuf,
        /// What and where (line and column).
        message: String,
    },
    /// Every problem found: unknown keys, wrong types and forms, failed validations.
    #[error("invalid configuration in {}{}:\n  - {}", .path.display(), if .problems.iter().any(|p| p.variable.is_some()) { " and the SLUICE_* environment" } else { "" }, .problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n  - "))]
    Invalid {
        /// Path of the file.
        path: PathBuf,
        /// Each problem.
        problems: Vec<Problem>,
    },
}

/// Valid values for the required keys, put in place of a missing or wrong one so that the rest
/// of its section is still checked (the problem itself is reported, and no configuration with a
/// problem is ever returned).
const STAND_INS: &[(&str, &str)] = &[
    ("source.name", "stand-in"),
    ("source.url", "mysql://stand-in@localhost"),
    ("kafka.brokers", "localhost:9092"),
    ("registry.url", "http://localhost:8081"),
];

/// The problems found so far while loading, each attributed to the variable that set its key.
struct Found<'a> {
    overrides: &'a [Override],
    problems: Vec<Problem>,
}

impl Found<'_> {
    fn add(&mut self, key: &str, message: String) {
        let variable = self
            .overrides
            .iter()
            .find(|o| {
                let set = dotted(&o.path);
                // the key itself, inside it, or (an unknown section such as `snapshots`) around it
                key == set
                    || key.starts_with(&format!("{set}."))
                    || key.starts_with(&format!("{set}["))
                    || set.starts_with(&format!("{key}."))
            })
            .map(|o| o.variable.clone());
        let p = Problem { key: key.to_string(), variable, message };
        if !self.problems.contains(&p) {
            self.problems.push(p);
        }
    }
}

/// Problems found by validation, each with its key.
#[derive(Debug, Default)]
pub struct Problems(Vec<(String, String)>);

impl Problems {
    /// Records that `key` is wrong: `message` says how.
    pub fn push(&mut self, key: impl Into<String>, message: impl Into<String>) {
        self.0.push((key.into(), message.into()));
    }
}

/// A key path segment of the document.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Key(String),
    Index(usize),
}

/// The array elements taken out of the document so far (each by its array's path and its index
/// in the file): the next element moves up into the place of one taken out, so an error at it is
/// named by its index in the file, not by its place now.
#[derive(Default)]
struct Renumbered(Vec<(Vec<Segment>, usize)>);

impl Renumbered {
    /// `at` (indexes as the document is now) with indexes as in the file.
    fn original(&self, at: &[Segment]) -> Vec<Segment> {
        let mut out = Vec::with_capacity(at.len());
        for seg in at {
            let seg = match seg {
                Segment::Index(i) => {
                    let mut gone: Vec<usize> = self.0.iter().filter(|(p, _)| *p == out).map(|(_, j)| *j).collect();
                    gone.sort_unstable();
                    Segment::Index(gone.into_iter().fold(*i, |j, g| if g <= j { j + 1 } else { j }))
                }
                key => key.clone(),
            };
            out.push(seg);
        }
        out
    }

    /// Notes that the value at `original` (indexes as in the file) was taken out.
    fn taken_out(&mut self, original: &[Segment]) {
        if let Some((Segment::Index(i), parent)) = original.split_last() {
            self.0.push((parent.to_vec(), *i));
        }
    }
}

fn dotted(path: &[Segment]) -> String {
    let mut out = String::new();
    for s in path {
        match s {
            Segment::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                if k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
                    out.push_str(k);
                } else {
                    out.push_str(&format!("{k:?}"));
                }
            }
            Segment::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

fn segments(path: &serde_path_to_error::Path) -> Vec<Segment> {
    path.iter()
        .filter_map(|s| match s {
            serde_path_to_error::Segment::Map { key } => Some(Segment::Key(key.clone())),
            serde_path_to_error::Segment::Seq { index } => Some(Segment::Index(*index)),
            serde_path_to_error::Segment::Enum { variant } => Some(Segment::Key(variant.clone())),
            serde_path_to_error::Segment::Unknown => None,
        })
        .collect()
}

/// The value at `path` (None when there is none).
fn value_at<'a>(doc: &'a mut toml::Value, path: &[Segment]) -> Option<&'a mut toml::Value> {
    let Some((first, rest)) = path.split_first() else { return Some(doc) };
    let next = match (doc, first) {
        (toml::Value::Table(t), Segment::Key(k)) => t.get_mut(k)?,
        (toml::Value::Array(a), Segment::Index(i)) => a.get_mut(*i)?,
        _ => return None,
    };
    value_at(next, rest)
}

/// Removes the value at `path`; false when there was none (or `path` is the root).
fn remove_at(doc: &mut toml::Value, path: &[Segment]) -> bool {
    let Some((last, parents)) = path.split_last() else { return false };
    match (value_at(doc, parents), last) {
        (Some(toml::Value::Table(t)), Segment::Key(k)) => t.remove(k).is_some(),
        (Some(toml::Value::Array(a)), Segment::Index(i)) if *i < a.len() => {
            a.remove(*i);
            true
        }
        _ => false,
    }
}

impl Config {
    /// Reads `path`, applies `SLUICE_*` overrides from `env`, and validates.
    ///
    /// # Errors
    /// Unreadable file, bad TOML, and every problem at once (unknown keys, wrong types and
    /// forms, failed validations).
    pub fn load(path: &Path, env: impl IntoIterator<Item = (String, String)>) -> Result<Config, ConfigError> {
        Config::parse(&read_config(path)?, path, env)
    }

    /// As [`Config::load`], from the file's text (`path` only names it in messages).
    ///
    /// # Errors
    /// As [`Config::load`].
    pub fn parse(
        text: &str,
        path: &Path,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        let (raw, doc) = parse_raw(text, path, env, Role::Run)?;
        let RawConfig {
            source: Some(mut source),
            kafka: Some(kafka),
            registry: Some(registry),
            output,
            filter,
            routes,
            metrics,
            snapshot,
            elasticsearch,
        } = raw
        else {
            return Err(ConfigError::Invalid { path: path.into(), problems: Vec::new() });
        };
        let mut snapshot = snapshot;
        match first_start_rule(&doc, &source.start, snapshot.mode) {
            FirstStart::Stream(start) => source.start = start,
            FirstStart::AsConfigured => {}
            FirstStart::WithoutSnapshot(why) => {
                snapshot.mode = SnapshotMode::Never;
                snapshot.mode_implied = Some(why);
            }
            // reported by parse_raw, which never returns a configuration with a problem
            FirstStart::Conflict(_) => {}
        }
        Ok(Config { source, kafka, registry, output, filter, routes, metrics, snapshot, elasticsearch })
    }
}

impl SinkConfig {
    /// Reads the configuration `sluice sink elasticsearch` needs from `path` (the same file as
    /// `sluice run`'s; `[source]` may be left out), with `SLUICE_*` overrides, and validates it.
    ///
    /// # Errors
    /// As [`Config::load`]; a missing `[elasticsearch]` section is one of the problems.
    pub fn load(path: &Path, env: impl IntoIterator<Item = (String, String)>) -> Result<SinkConfig, ConfigError> {
        SinkConfig::parse(&read_config(path)?, path, env)
    }

    /// As [`SinkConfig::load`], from the file's text.
    ///
    /// # Errors
    /// As [`SinkConfig::load`].
    pub fn parse(
        text: &str,
        path: &Path,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<SinkConfig, ConfigError> {
        let (raw, _) = parse_raw(text, path, env, Role::Sink)?;
        let RawConfig {
            kafka: Some(kafka), registry: Some(registry), elasticsearch: Some(elasticsearch), metrics, ..
        } = raw
        else {
            return Err(ConfigError::Invalid { path: path.into(), problems: Vec::new() });
        };
        Ok(SinkConfig { kafka, registry, elasticsearch, metrics })
    }
}

/// Where the first start's rows come from, decided by `source.start` and `snapshot.mode`
/// together (see `snapshot.mode`).
#[derive(Debug, Clone, PartialEq, Eq)]
enum FirstStart {
    /// No `source.start`: stream from here (`current` after a snapshot, `earliest` without).
    Stream(StartFrom),
    /// Both as written.
    AsConfigured,
    /// An explicit start in the past without `snapshot.mode`: no initial snapshot (why).
    WithoutSnapshot(String),
    /// An explicit start in the past and a mode that reads rows: refused (the message).
    Conflict(String),
}

/// True when the (overridden) document sets `section.key`.
fn has_key(doc: &toml::Value, section: &str, key: &str) -> bool {
    matches!(doc, toml::Value::Table(t) if t.get(section).and_then(|s| s.get(key)).is_some())
}

fn first_start_rule(doc: &toml::Value, start: &StartFrom, mode: SnapshotMode) -> FirstStart {
    if !has_key(doc, "source", "start") {
        return FirstStart::Stream(if mode == SnapshotMode::Never { StartFrom::Earliest } else { StartFrom::Current });
    }
    if *start == StartFrom::Current {
        return FirstStart::AsConfigured;
    }
    if !has_key(doc, "snapshot", "mode") {
        return FirstStart::WithoutSnapshot(format!(
            "source.start = \"{start}\" without snapshot.mode: no initial snapshot; the binlog from {start} carries \
             the rows (to snapshot instead, leave source.start out or set it to \"current\")"
        ));
    }
    if mode.reads_rows() {
        let name = if mode == SnapshotMode::Initial { "initial" } else { "when_needed" };
        return FirstStart::Conflict(format!(
            "source.start = \"{start}\" and snapshot.mode = \"{name}\" both say where the first start's rows come \
             from: the start publishes every row's history from {start}, the snapshot every existing row again as an \
             \"r\" record, so each row would arrive twice and go back to an older state in between; keep one: leave \
             source.start out (or set it to \"current\") to snapshot, or set snapshot.mode = \"never\" (or leave \
             it out) to replay the history"
        ));
    }
    FirstStart::AsConfigured
}

fn read_config(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.into(), source })
}

/// Which command reads the configuration: what it requires and checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// `sluice run` and the others that talk to the source.
    Run,
    /// `sluice sink elasticsearch`: no `[source]` needed.
    Sink,
}

/// Parses and validates the document for `role`: the raw sections (those `role` requires all
/// present) and the document after the environment's overrides.
fn parse_raw(
    text: &str,
    path: &Path,
    env: impl IntoIterator<Item = (String, String)>,
    role: Role,
) -> Result<(RawConfig, toml::Value), ConfigError> {
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| ConfigError::Syntax { path: path.into(), message: redact_url(&e.to_string()) })?;
    let mut doc = toml::Value::Table(table);
    let (overrides, misnamed) = apply_env(&mut doc, env);
    let mut found = Found { overrides: &overrides, problems: misnamed };
    // Deserialize; at each error, note it, take the offending value out and go again, so
    // that one wrong value does not hide the next. Unknown keys are collected on the way.
    let mut raw = None;
    let mut unknown: Vec<String> = Vec::new();
    let mut removed: Vec<Vec<Segment>> = Vec::new();
    let mut renumbered = Renumbered::default();
    for _ in 0..256 {
        unknown.clear();
        let mut note_unknown = |p: serde_ignored::Path<'_>| unknown.push(p.to_string());
        let de = serde_ignored::Deserializer::new(doc.clone(), &mut note_unknown);
        match serde_path_to_error::deserialize::<_, RawConfig>(de) {
            Ok(r) => {
                raw = Some(r);
                break;
            }
            Err(e) => {
                let mut at = segments(e.path());
                let message = e.into_inner().to_string();
                // toml's own text repeats the key on a line of its own
                let message = message.split("\nin `").next().unwrap_or_default().trim_end().to_string();
                // an environment value read as a number or boolean where the key wants
                // text: it was meant as text
                if let Some(o) = overrides.iter().find(|o| o.path == at && o.parsed) {
                    if let Some(v) = value_at(&mut doc, &at) {
                        if !v.is_str() {
                            *v = toml::Value::String(o.raw.clone());
                            continue;
                        }
                    }
                }
                // A required key that is missing (or that was taken out below): say so once,
                // then put a stand-in there so that the rest of its section is checked too.
                if let Some(field) = message.strip_prefix("missing field `").and_then(|m| m.strip_suffix('`')) {
                    at.push(Segment::Key(field.to_string()));
                    if !removed.contains(&at) {
                        found.add(&dotted(&renumbered.original(&at)), "is missing (required)".into());
                    }
                    let stand_in = STAND_INS.iter().find(|(k, _)| *k == dotted(&at));
                    if let (Some((_, v)), Some((Segment::Key(last), parent))) = (stand_in, at.split_last()) {
                        if let Some(toml::Value::Table(t)) = value_at(&mut doc, parent) {
                            t.insert(last.clone(), toml::Value::String((*v).to_string()));
                            continue;
                        }
                    }
                    at.pop();
                } else {
                    found.add(&dotted(&renumbered.original(&at)), message);
                }
                let original = renumbered.original(&at);
                if !remove_at(&mut doc, &at) {
                    break;
                }
                renumbered.taken_out(&original);
                removed.push(at);
            }
        }
    }
    for key in unknown {
        // serde_ignored writes `?` for the inside of an Option (our optional sections)
        let key = key.split('.').filter(|k| *k != "?").collect::<Vec<_>>().join(".");
        found.add(&key, "unknown key (misspelt? every key is in sluice.example.toml)".into());
    }
    let Some(raw) = raw else {
        return Err(ConfigError::Invalid { path: path.into(), problems: found.problems });
    };
    let required: &[(bool, &str)] = match role {
        Role::Run => {
            &[(raw.source.is_some(), "source"), (raw.kafka.is_some(), "kafka"), (raw.registry.is_some(), "registry")]
        }
        Role::Sink => &[
            (raw.kafka.is_some(), "kafka"),
            (raw.registry.is_some(), "registry"),
            (raw.elasticsearch.is_some(), "elasticsearch"),
        ],
    };
    for &(present, name) in required {
        let reported = found.problems.iter().any(|p| p.key == name || p.key.starts_with(&format!("{name}.")));
        if !present && !reported {
            found.add(name, format!("the [{name}] section is missing"));
        }
    }
    let mut checks = Problems::default();
    if let (Some(s), Role::Run) = (&raw.source, role) {
        s.validate(&mut checks);
        if let FirstStart::Conflict(why) = first_start_rule(&doc, &s.start, raw.snapshot.mode) {
            checks.push("source.start", why);
        }
    }
    if let Some(e) = &raw.elasticsearch {
        e.validate(&mut checks);
    }
    if let Some(k) = &raw.kafka {
        k.validate(&mut checks);
    }
    if let Some(r) = &raw.registry {
        r.validate(&mut checks);
    }
    raw.output.validate(&mut checks);
    raw.snapshot.validate(&mut checks);
    raw.filter.validate(&mut checks);
    for (i, r) in raw.routes.iter().enumerate() {
        r.validate(i, &mut checks);
    }
    for (key, message) in checks.0 {
        found.add(&key, message);
    }
    if found.problems.is_empty() {
        Ok((raw, doc))
    } else {
        Err(ConfigError::Invalid { path: path.into(), problems: found.problems })
    }
}

impl SourceSection {
    /// `url`, then the `failover` servers, in the order they are tried.
    pub fn servers(&self) -> Vec<&SourceUrl> {
        std::iter::once(&self.url).chain(&self.failover).collect()
    }

    /// The password from its file or environment variable (empty when neither is set).
    ///
    /// # Errors
    /// An unreadable password file.
    pub fn password(&self) -> Result<Secret, ConfigError> {
        read_secret(&self.password_file, &self.password_env)
    }

    /// The host name `sluice run` reports to the server: `sluice-<name>`, so that a
    /// predecessor of the same source is told from a different replica with the same server id.
    pub fn report_host(&self) -> String {
        format!("sluice-{}", self.name)
    }
}

impl KafkaSection {
    /// The SASL password from its file or environment variable, if configured.
    ///
    /// # Errors
    /// An unreadable password file.
    pub fn sasl_password(&self) -> Result<Option<Secret>, ConfigError> {
        optional_secret(&self.sasl_password_file, &self.sasl_password_env)
    }
}

/// A `db.table` pattern's problem, if it has one: a pattern is `table` or `db.table`, split at
/// its first dot (MariaDB allows a dot inside a table name: `shop.we.ird` is table `we.ird`),
/// each part non-empty (a pattern such as `shop.` could match nothing).
pub fn table_pattern_problem(pattern: &str) -> Option<String> {
    if pattern.trim().is_empty() {
        return Some("an empty pattern matches no table".into());
    }
    let parts: Vec<&str> = match pattern.split_once('.') {
        Some((db, table)) => vec![db, table],
        None => vec![pattern],
    };
    if parts.iter().any(|p| p.is_empty()) {
        return Some(format!(
            "{pattern:?} has an empty part: a pattern is TABLE or DB.TABLE (e.g. shop.* or shop.orders)"
        ));
    }
    None
}

impl SourceSection {
    fn validate(&self, p: &mut Problems) {
        if self.name.is_empty() || !self.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
            p.push("source.name", format!("{:?} must be letters, digits, '-' or '_'", self.name));
        }
        validate_secret(p, "source.password", &self.password_file, &self.password_env);
        if self.tls.verifies() && self.ca_file.is_none() {
            p.push("source.ca_file", "source.tls = verify-ca or verify-identity needs the CA certificate here");
        }
        if let Some(f) = self.ca_file.as_ref().filter(|f| !f.exists()) {
            p.push("source.ca_file", format!("{} does not exist", f.display()));
        }
        for (i, f) in self.failover.iter().enumerate() {
            let same = |a: &SourceUrl| a.host.eq_ignore_ascii_case(&f.host) && a.port == f.port;
            if same(&self.url) {
                p.push(
                    format!("source.failover[{i}]"),
                    format!("{}:{} is source.url itself: list the other servers of the topology", f.host, f.port),
                );
            } else if self.failover[..i].iter().any(same) {
                p.push(format!("source.failover[{i}]"), format!("{}:{} is listed twice", f.host, f.port));
            }
        }
        if self.server_id == 0 {
            p.push("source.server_id", "must not be 0");
        }
        if self.failover_after < Duration::from_secs(1) {
            p.push("source.failover_after", "must be at least 1s");
        }
        if self.heartbeat < Duration::from_secs(1) {
            p.push("source.heartbeat", "must be at least 1s");
        }
        if !(64 * 1024..=1 << 30).contains(&self.max_event_size) {
            p.push("source.max_event_size", "must be 64KiB to 1GiB");
        }
    }
}

impl KafkaSection {
    fn validate(&self, p: &mut Problems) {
        if self.brokers.trim().is_empty() {
            p.push("kafka.brokers", "is empty");
        }
        validate_secret(p, "kafka.sasl_password", &self.sasl_password_file, &self.sasl_password_env);
        if self.topic_prefix.is_empty()
            || !self.topic_prefix.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
        {
            p.push("kafka.topic_prefix", format!("{:?} must be letters, digits, '.', '_' or '-'", self.topic_prefix));
        }
        if self.partitions < 1 {
            p.push("kafka.partitions", "must be at least 1");
        }
        if self.replication_factor < 1 {
            p.push("kafka.replication_factor", "must be at least 1");
        }
        if self.batch_max_records == 0 {
            p.push("kafka.batch_max_records", "must be at least 1");
        }
        if self.batch_max_bytes == 0 {
            p.push("kafka.batch_max_bytes", "must be at least 1");
        }
        let number = |key: &str| self.properties.get(key).and_then(|v| v.parse::<u64>().ok());
        if let (Some(queue), Some(message)) = (number("queue.buffering.max.kbytes"), number("message.max.bytes")) {
            if queue.saturating_mul(1024) < message {
                p.push(
                    "kafka.properties.\"queue.buffering.max.kbytes\"",
                    format!(
                        "{queue} KiB cannot hold one record of message.max.bytes = {message}: librdkafka would wait for \
                         room forever; raise it to at least {}, or leave it out (Sluice then sizes it)",
                        message.div_ceil(1024)
                    ),
                );
            }
        }
        for key in self.properties.keys() {
            if key.contains("password") || key.starts_with("transactional.") || key == "enable.idempotence" {
                p.push(
                    format!("kafka.properties.{key:?}"),
                    "must not be set here: passwords come from kafka.sasl_password_file/_env, and Sluice sets the \
                     transactional settings itself",
                );
            }
        }
        librdkafka_problems("kafka.properties", &self.properties, p);
    }
}

/// The properties of `table` (`kafka.properties`, `elasticsearch.consumer`) librdkafka refuses
/// by name or value, checked where the file is read rather than when the client is made (a
/// typo would otherwise pass `sluice check` and stop `sluice run`).
fn librdkafka_problems(table: &str, properties: &BTreeMap<String, String>, p: &mut Problems) {
    for (key, value) in properties {
        let mut one = rdkafka::ClientConfig::new();
        one.set(key, value);
        if let Err(e) = one.create_native_config() {
            let why = match e {
                rdkafka::error::KafkaError::ClientConfig(_, description, _, _) => description,
                other => other.to_string(),
            };
            p.push(format!("{table}.{key:?}"), format!("librdkafka refuses it: {why}"));
        }
    }
}

impl RegistrySection {
    /// The basic-auth password from its file or environment variable, if configured.
    ///
    /// # Errors
    /// An unreadable password file.
    pub fn password(&self) -> Result<Option<Secret>, ConfigError> {
        optional_secret(&self.password_file, &self.password_env)
    }

    fn validate(&self, p: &mut Problems) {
        validate_secret(p, "registry.password", &self.password_file, &self.password_env);
        if !(self.url.starts_with("http://") || self.url.starts_with("https://")) {
            p.push("registry.url", format!("{:?} must start with http:// or https://", redact_url(&self.url)));
        } else if url::Url::parse(&self.url).is_ok_and(|u| u.password().is_some()) {
            p.push(
                "registry.url",
                format!(
                    "{:?} must not contain a password (it would be shown wherever the URL is): use registry.username \
                     and registry.password_file or password_env",
                    redact_url(&self.url)
                ),
            );
        }
        if let Some(f) = &self.ca_file {
            if !self.url.starts_with("https://") {
                p.push("registry.ca_file", "is set, but registry.url is not https://");
            } else if !f.exists() {
                p.push("registry.ca_file", format!("{} does not exist", f.display()));
            }
        }
    }
}

impl OutputSection {
    fn validate(&self, p: &mut Problems) {
        for (table, cols) in &self.key_columns {
            if table.split('.').count() != 2 || cols.is_empty() {
                p.push(format!("output.key_columns.{table}"), "must be \"db.table\" = [\"col\", ...]");
            }
        }
    }
}

impl FilterSection {
    fn validate(&self, p: &mut Problems) {
        for (key, patterns) in [("filter.include", &self.include), ("filter.exclude", &self.exclude)] {
            for pattern in patterns {
                if let Some(m) = table_pattern_problem(pattern) {
                    p.push(key, m);
                }
            }
        }
        for c in &self.exclude_columns {
            if c.split('.').count() != 3 || c.split('.').any(str::is_empty) {
                p.push("filter.exclude_columns", format!("{c:?} must be \"db.table.column\" (wildcards allowed)"));
            }
        }
    }
}

impl Route {
    fn validate(&self, index: usize, p: &mut Problems) {
        if self.topic.is_empty() {
            p.push(format!("routes[{index}].topic"), format!("the route for {:?} has an empty topic", self.tables));
        }
        let literal = self.topic.replace("{db}", "").replace("{table}", "");
        if let Some(c) = literal.chars().find(|c| !(c.is_ascii_alphanumeric() || "._-".contains(*c))) {
            p.push(
                format!("routes[{index}].topic"),
                format!(
                    "{:?} has {c:?}, which Kafka does not allow in a topic name (letters, digits, '.', '_', '-'; \
                     {{db}} and {{table}} are made valid)",
                    self.topic
                ),
            );
        }
        if let Some(m) = table_pattern_problem(&self.tables) {
            p.push(format!("routes[{index}].tables"), m);
        }
    }
}

/// The problems of a secret's `<key>_file` and `<key>_env` (`key` is `section.name`): both set, a
/// file that is not there, a variable that is not set.
fn validate_secret(p: &mut Problems, key: &str, file: &Option<PathBuf>, env: &Option<String>) {
    if file.is_some() && env.is_some() {
        p.push(format!("{key}_file"), format!("set only one of {key}_file and {key}_env"));
    }
    if let Some(f) = file {
        if !f.exists() {
            p.push(format!("{key}_file"), format!("{} does not exist", f.display()));
        }
    }
    if let Some(v) = env {
        if std::env::var_os(v).is_none() {
            p.push(format!("{key}_env"), format!("names {v}, which is not set"));
        }
    }
}

/// A secret that may be configured (None when neither its file nor its variable is set).
fn optional_secret(file: &Option<PathBuf>, env: &Option<String>) -> Result<Option<Secret>, ConfigError> {
    if file.is_none() && env.is_none() {
        return Ok(None);
    }
    read_secret(file, env).map(Some)
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

/// One `SLUICE_*` override applied to the document.
struct Override {
    path: Vec<Segment>,
    variable: String,
    /// The variable's text.
    raw: String,
    /// True when the text was read as a TOML value (a number, a boolean, an array) rather than
    /// as a string.
    parsed: bool,
}

/// Sets `path = value` in `doc`, creating tables on the way; a non-table in the way wins (the
/// deserializer then reports the type error).
fn set_path(doc: &mut toml::Value, path: &[Segment], value: toml::Value) {
    let Some((Segment::Key(first), rest)) = path.split_first() else { return };
    let toml::Value::Table(table) = doc else { return };
    if rest.is_empty() {
        table.insert(first.clone(), value);
        return;
    }
    let next = table.entry(first.clone()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
    set_path(next, rest, value);
}

/// Tables whose keys are librdkafka's or Kafka's own dotted property names: an environment
/// variable cannot hold a dot, so `SLUICE_KAFKA__PROPERTIES__MESSAGE_MAX_BYTES` sets
/// `message.max.bytes` (no librdkafka or topic property has an underscore in its name).
const DOTTED_TABLES: &[(&str, &str)] =
    &[("kafka", "properties"), ("kafka", "topic_config"), ("elasticsearch", "consumer")];

/// The sections and their keys, for naming a variable written with one underscore where two
/// belong (`SLUICE_ELASTICSEARCH_BULK_MAX_ACTIONS`).
fn section_keys() -> Vec<(&'static str, &'static [&'static str])> {
    vec![
        ("source", struct_fields::<SourceSection>()),
        ("kafka", struct_fields::<KafkaSection>()),
        ("registry", struct_fields::<RegistrySection>()),
        ("output", struct_fields::<OutputSection>()),
        ("filter", struct_fields::<FilterSection>()),
        ("metrics", struct_fields::<MetricsSection>()),
        ("snapshot", struct_fields::<SnapshotSection>()),
        ("elasticsearch", struct_fields::<ElasticsearchSection>()),
    ]
}

/// The field names serde's derive gives a struct (it hands them to `deserialize_struct`).
fn struct_fields<T: serde::de::DeserializeOwned>() -> &'static [&'static str] {
    use serde::de::{Deserializer, Visitor};
    /// Ends the probe as soon as the field names are known.
    #[derive(Debug)]
    struct Stop;
    impl fmt::Display for Stop {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("probe")
        }
    }
    impl std::error::Error for Stop {}
    impl serde::de::Error for Stop {
        fn custom<M: fmt::Display>(_: M) -> Self {
            Stop
        }
    }
    struct Probe<'a>(&'a mut &'static [&'static str]);
    impl<'de> Deserializer<'de> for Probe<'_> {
        type Error = Stop;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
            Err(Stop)
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Stop> {
            *self.0 = fields;
            Err(Stop)
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit
            unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
        }
    }
    let mut fields: &'static [&'static str] = &[];
    let _ = T::deserialize(Probe(&mut fields));
    fields
}

/// A `SLUICE_*` variable without `__` that names a section and one of its keys with a single
/// underscore between them: the problem (it would otherwise be ignored as a CLI variable).
fn misnamed_variable(variable: &str) -> Option<Problem> {
    let rest = variable.strip_prefix("SLUICE_")?.to_ascii_lowercase();
    section_keys().into_iter().find_map(|(section, keys)| {
        let key = rest.strip_prefix(section)?.strip_prefix('_')?;
        keys.contains(&key).then(|| Problem {
            key: format!("{section}.{key}"),
            variable: Some(variable.to_string()),
            message: format!(
                "is not read: a variable names its section and key with two underscores between them, \
                 SLUICE_{}__{}",
                section.to_ascii_uppercase(),
                key.to_ascii_uppercase()
            ),
        })
    })
}

/// Applies `SLUICE_<SECTION>__<KEY>` variables to the parsed document; returns what each set,
/// and the problems of variables that look meant for a key but set none.
fn apply_env(doc: &mut toml::Value, env: impl IntoIterator<Item = (String, String)>) -> (Vec<Override>, Vec<Problem>) {
    let mut applied = Vec::new();
    let mut problems = Vec::new();
    let mut vars: Vec<(String, String)> = env.into_iter().filter(|(k, _)| k.starts_with("SLUICE_")).collect();
    vars.sort();
    for (k, v) in vars {
        let Some(path) = k.strip_prefix("SLUICE_") else { continue };
        let mut parts: Vec<String> = path.split("__").map(str::to_ascii_lowercase).collect();
        if parts.len() < 2 || parts.iter().any(String::is_empty) {
            // SLUICE_LOG and friends are CLI settings, not config keys
            problems.extend(misnamed_variable(&k));
            continue;
        }
        if let [section, table, name] = parts.as_mut_slice() {
            if DOTTED_TABLES.contains(&(section.as_str(), table.as_str())) {
                *name = name.replace('_', ".");
            }
        }
        let parsed = format!("x = {v}").parse::<toml::Table>().ok().and_then(|mut t| t.remove("x"));
        let is_parsed = parsed.is_some();
        let value = parsed.unwrap_or_else(|| toml::Value::String(v.clone()));
        let path: Vec<Segment> = parts.into_iter().map(Segment::Key).collect();
        set_path(doc, &path, value);
        applied.push(Override { path, variable: k, raw: v, parsed: is_parsed });
    }
    (applied, problems)
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
        Config::parse(text, Path::new("sluice.toml"), env.into_iter().map(|(a, b)| (a.to_string(), b.to_string())))
    }

    fn problems(text: &str, env: Vec<(&str, &str)>) -> Vec<Problem> {
        match load(text, env) {
            Err(ConfigError::Invalid { problems, .. }) => problems,
            other => panic!("expected problems, got {other:?}"),
        }
    }

    fn sink(text: &str, env: Vec<(&str, &str)>) -> Result<SinkConfig, ConfigError> {
        SinkConfig::parse(text, Path::new("sluice.toml"), env.into_iter().map(|(a, b)| (a.to_string(), b.to_string())))
    }

    /// The sink needs [kafka], [registry] and [elasticsearch], not [source] (nor its password);
    /// every problem of its section is listed at once, each naming its key.
    #[test]
    fn the_sink_configuration() {
        let text = "[kafka]\nbrokers = \"k:9092\"\ntopic_prefix = \"cdc\"\n[registry]\nurl = \"http://r:8081\"\n\
                    [elasticsearch]\nurl = \"http://es:9200\"\n";
        let cfg = sink(text, vec![("SLUICE_ELASTICSEARCH__BULK_MAX_ACTIONS", "500")]).unwrap();
        assert_eq!(cfg.elasticsearch.index, "{topic}");
        assert_eq!(cfg.elasticsearch.bulk_max_actions, 500);
        assert_eq!(cfg.elasticsearch.bulk_max_bytes, 5 << 20);
        assert_eq!(cfg.elasticsearch.group("cdc"), "sluice-es-cdc");
        assert_eq!(cfg.elasticsearch.decimal, EsDecimal::Keyword);
        // a [source] with a password file that is not there does not matter to the sink
        let with_source =
            format!("[source]\nname = \"s\"\nurl = \"mysql://u@h\"\npassword_file = \"/nowhere\"\n{text}");
        assert!(sink(&with_source, vec![]).is_ok());
        let missing = match sink("[kafka]\nbrokers = \"k\"\n[registry]\nurl = \"http://r\"\n", vec![]) {
            Err(ConfigError::Invalid { problems, .. }) => problems,
            other => panic!("{other:?}"),
        };
        assert_eq!(missing[0].key, "elasticsearch");
        let bad = "[kafka]\nbrokers = \"k\"\n[registry]\nurl = \"http://r\"\n[elasticsearch]\nurl = \"es:9200\"\n\
                   index = \"Sluice Index\"\nbulk_max_actions = 0\ndecimal = \"float\"\ngeo_point = [\"shop.t\"]\n\
                   ca_file = \"/ca.pem\"\n[elasticsearch.indices]\n\"shop.*\" = \"x\"\n";
        let p = match sink(bad, vec![]) {
            Err(ConfigError::Invalid { problems, .. }) => problems,
            other => panic!("{other:?}"),
        };
        let keys: Vec<&str> = p.iter().map(|p| p.key.as_str()).collect();
        for key in [
            "elasticsearch.url",
            "elasticsearch.index",
            "elasticsearch.bulk_max_actions",
            "elasticsearch.decimal",
            "elasticsearch.geo_point",
            "elasticsearch.ca_file",
            "elasticsearch.indices.shop.*",
        ] {
            assert!(keys.contains(&key), "{key} in {p:#?}");
        }
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
        // no source.start: the default snapshot covers the past, so streaming starts now
        assert_eq!(cfg.snapshot.mode, SnapshotMode::Initial);
        assert_eq!(cfg.source.start, StartFrom::Current);
        assert_eq!((cfg.snapshot.chunk_size, cfg.snapshot.chunk_max_bytes), (10_000, 8 << 20));
        let never = load(&format!("{MINIMAL}\n[snapshot]\nmode = \"never\"\n"), vec![]).unwrap();
        assert_eq!(never.source.start, StartFrom::Earliest);
        let given = load(MINIMAL, vec![("SLUICE_SOURCE__START", "earliest")]).unwrap();
        assert_eq!(given.source.start, StartFrom::Earliest, "a start given is a start kept");
        assert_eq!(given.snapshot.mode, SnapshotMode::Never, "and its history replaces the snapshot");
        assert_eq!(cfg.source.tls, TlsSetting::Preferred);
        assert_eq!(cfg.source.url, SourceUrl { user: "repl".into(), host: "127.0.0.1".into(), port: 3306 });
        assert!(cfg.output.tombstones);
        assert!(!cfg.output.partial_images, "partial row images are opt-in");
        assert_eq!(cfg.output.value_mode, ValueMode::Envelope);
        let cfg = load(&format!("{MINIMAL}\n[output]\npartial_images = true\n"), vec![]).unwrap();
        assert!(cfg.output.partial_images);
    }

    /// One setting decides where the first start's rows come from (issue 20, item 1): an
    /// explicit start in the past without a mode is a start without snapshot, with a mode that
    /// snapshots it is refused naming both keys; `current` goes with any mode.
    #[test]
    fn the_first_start_rule() {
        for start in ["earliest", "mysql-bin.000003:4", "0-1-100"] {
            let cfg = load(MINIMAL, vec![("SLUICE_SOURCE__START", start)]).unwrap();
            assert_eq!(cfg.snapshot.mode, SnapshotMode::Never, "{start}");
            let why = cfg.snapshot.mode_implied.unwrap();
            assert!(why.contains("no initial snapshot") && why.contains(start), "{why}");
            for mode in ["initial", "when_needed"] {
                let text = format!("{MINIMAL}\n[snapshot]\nmode = \"{mode}\"\n");
                let p = problems(&text, vec![("SLUICE_SOURCE__START", start)]);
                assert_eq!(p.len(), 1, "{p:#?}");
                assert_eq!(p[0].key, "source.start");
                assert_eq!(p[0].variable.as_deref(), Some("SLUICE_SOURCE__START"));
                assert!(p[0].message.contains(&format!("snapshot.mode = \"{mode}\"")), "{}", p[0].message);
                assert!(p[0].message.contains("twice"), "{}", p[0].message);
            }
            for mode in ["never", "schema_only"] {
                let text = format!("{MINIMAL}\n[snapshot]\nmode = \"{mode}\"\n");
                let cfg = load(&text, vec![("SLUICE_SOURCE__START", start)]).unwrap();
                assert!(cfg.snapshot.mode_implied.is_none());
                assert_eq!(cfg.source.start.to_string(), start);
            }
        }
        for mode in ["initial", "when_needed", "never", "schema_only"] {
            let text = format!("{MINIMAL}\n[snapshot]\nmode = \"{mode}\"\n");
            let cfg = load(&text, vec![("SLUICE_SOURCE__START", "current")]).unwrap();
            assert_eq!(cfg.source.start, StartFrom::Current);
            assert!(cfg.snapshot.mode_implied.is_none());
        }
        let cfg = load(MINIMAL, vec![("SLUICE_SOURCE__START", "current")]).unwrap();
        assert_eq!(cfg.snapshot.mode, SnapshotMode::Initial, "current with the default mode snapshots");
    }

    /// Environment variables that look meant for a key but set none are problems naming the
    /// right variable; an unknown section set by a variable is blamed on it; librdkafka's dotted
    /// names can be set from the environment and are checked at load (issue 20, item 11).
    #[test]
    fn environment_variables_that_miss_their_key() {
        let sink_text =
            "[kafka]\nbrokers = \"k\"\n[registry]\nurl = \"http://r\"\n[elasticsearch]\nurl = \"http://e\"\n";
        let p = match sink(sink_text, vec![("SLUICE_ELASTICSEARCH_BULK_MAX_ACTIONS", "abc")]) {
            Err(ConfigError::Invalid { problems, .. }) => problems,
            other => panic!("{other:?}"),
        };
        assert_eq!(p.len(), 1, "{p:#?}");
        assert_eq!(p[0].key, "elasticsearch.bulk_max_actions");
        assert_eq!(p[0].variable.as_deref(), Some("SLUICE_ELASTICSEARCH_BULK_MAX_ACTIONS"));
        assert!(p[0].message.contains("SLUICE_ELASTICSEARCH__BULK_MAX_ACTIONS"), "{}", p[0].message);
        // the test tools' own variables share a section's prefix but name no key
        assert!(load(MINIMAL, vec![("SLUICE_REGISTRY_BIN", "/x"), ("SLUICE_SNAPSHOT_ROWS", "5")]).is_ok());
        let p = problems(MINIMAL, vec![("SLUICE_SOURCE_SERVER_ID", "7"), ("SLUICE_SNAPSHOT_WHERE", "x")]);
        let keys: Vec<&str> = p.iter().map(|p| p.key.as_str()).collect();
        assert_eq!(keys, ["snapshot.where", "source.server_id"]);

        let p = problems(MINIMAL, vec![("SLUICE_SNAPSHOTS__MODE", "never")]);
        assert_eq!(p.len(), 1, "{p:#?}");
        assert_eq!(p[0].variable.as_deref(), Some("SLUICE_SNAPSHOTS__MODE"), "{p:#?}");
        let e = load(MINIMAL, vec![("SLUICE_SNAPSHOTS__MODE", "never")]).unwrap_err().to_string();
        assert!(e.contains("and the SLUICE_* environment"), "{e}");

        let cfg = load(
            MINIMAL,
            vec![
                ("SLUICE_KAFKA__PROPERTIES__MESSAGE_MAX_BYTES", "2000000"),
                ("SLUICE_KAFKA__TOPIC_CONFIG__RETENTION_MS", "1000"),
            ],
        )
        .unwrap();
        assert_eq!(cfg.kafka.properties.get("message.max.bytes").map(String::as_str), Some("2000000"));
        assert_eq!(cfg.kafka.topic_config.get("retention.ms").map(String::as_str), Some("1000"));
        let p = problems(MINIMAL, vec![("SLUICE_KAFKA__PROPERTIES__MESSAGE_MAX_BYTE", "2000000")]);
        assert_eq!(p.len(), 1, "{p:#?}");
        assert_eq!(p[0].key, "kafka.properties.\"message.max.byte\"");
        assert_eq!(p[0].variable.as_deref(), Some("SLUICE_KAFKA__PROPERTIES__MESSAGE_MAX_BYTE"));
        assert!(p[0].message.contains("librdkafka refuses it"), "{}", p[0].message);
        let p = problems(&format!("{MINIMAL}\n[kafka.properties]\n\"linger.ms\" = \"soon\"\n"), vec![]);
        assert_eq!(p[0].key, "kafka.properties.\"linger.ms\"", "{p:#?}");
        assert!(p[0].variable.is_none());
    }

    /// A CA file that is not there, and a failover list naming `source.url` itself or a server
    /// twice, are problems at load (issue 20's messages).
    #[test]
    fn source_files_and_failover_lists() {
        let p = problems(MINIMAL, vec![("SLUICE_SOURCE__CA_FILE", "/no/such/ca.pem")]);
        assert_eq!(p.len(), 1, "{p:#?}");
        assert_eq!((p[0].key.as_str(), p[0].message.as_str()), ("source.ca_file", "/no/such/ca.pem does not exist"));
        let list = "[\"mysql://repl@127.0.0.1:3306\", \"mysql://repl@replica:3306\", \"mysql://repl@REPLICA:3306\"]";
        let p = problems(MINIMAL, vec![("SLUICE_SOURCE__FAILOVER", list)]);
        let keys: Vec<&str> = p.iter().map(|p| p.key.as_str()).collect();
        assert_eq!(keys, ["source.failover[0]", "source.failover[2]"], "{p:#?}");
        assert!(p[0].message.contains("is source.url itself") && p[1].message.contains("listed twice"), "{p:#?}");
    }

    /// `[snapshot.where]` is one condition: nothing that closes its parenthesis, adds a
    /// statement or comments out the rest of the chunk query (issue 20, item 10).
    #[test]
    fn snapshot_conditions_are_one_expression() {
        for ok in [
            "created_at >= '2024-01-01'",
            "id <= 10 AND (status IN ('a', 'b') OR note IS NULL)",
            "id IN (SELECT id FROM shop.keep)",
            "`odd name` <> 'a;b'",
        ] {
            assert_eq!(condition_problem(ok), None, "{ok}");
        }
        for bad in [
            "id <= 10) UNION SELECT 1,2 -- ",
            "1=1) UNION SELECT 1,2 FROM t WHERE (1=1",
            "id = 1; DROP TABLE t",
            "id = 1 /* x */",
            "id = 1 # rest",
            "id = 1)",
            "(id = 1",
            "",
            "id = 1 ORDER BY id",
        ] {
            assert!(condition_problem(bad).is_some(), "{bad:?} accepted");
        }
        let p = problems(
            &format!("{MINIMAL}\n[snapshot.where]\n\"shop.t\" = \"id <= 10) UNION SELECT 1,2 -- \"\n"),
            vec![],
        );
        assert_eq!(p.len(), 1, "{p:#?}");
        assert_eq!(p[0].key, "snapshot.where.\"shop.t\"");
    }

    /// A variable's text that reads as a number is still text where the key wants text.
    #[test]
    fn environment_values_take_the_keys_type() {
        let cfg = load(MINIMAL, vec![("SLUICE_SOURCE__NAME", "123"), ("SLUICE_KAFKA__BROKERS", "7")]).unwrap();
        assert_eq!(cfg.source.name, "123");
        assert_eq!(cfg.kafka.brokers, "7");
        let cfg = load(MINIMAL, vec![("SLUICE_SOURCE__START", "mysql-bin.000003:4")]).unwrap();
        assert_eq!(cfg.source.start, StartFrom::Position { file: "mysql-bin.000003".into(), position: 4 });
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
        assert_eq!(cfg.kafka.properties.get("queue.buffering.max.messages").map(String::as_str), Some("50000"));
        assert_eq!(cfg.kafka.properties.get("sasl.username").map(String::as_str), Some("sluice"));
        // the commented [elasticsearch] block, uncommented, is a valid sink configuration
        let es_at = example.find("# [elasticsearch]").unwrap();
        let es: String = example[es_at..]
            .lines()
            .map(|l| format!("{}\n", l.strip_prefix("# ").unwrap_or(l)))
            .collect::<String>()
            .replace("/run/secrets/es-password", password.to_str().unwrap())
            .replace("ca_file = \"/etc/sluice/es-ca.pem\"", "");
        let text = format!("{}\n{es}", &example[..es_at]);
        let sink = SinkConfig::parse(&text, Path::new("sluice.toml"), Vec::new()).unwrap();
        assert_eq!(sink.elasticsearch.indices["shop.orders"], "sluice.shop.orders-v2");
        assert_eq!(sink.elasticsearch.json, EsJson::Flattened);
    }

    #[test]
    fn unknown_keys_are_errors() {
        let p = problems(&format!("{MINIMAL}\n[output]\ntombstone = false\n[sourcee]\nx = 1\n"), vec![]);
        let keys: Vec<&str> = p.iter().map(|p| p.key.as_str()).collect();
        assert_eq!(keys, ["output.tombstone", "sourcee"], "{p:#?}");
        assert!(p[0].message.starts_with("unknown key"), "{p:#?}");
    }

    #[test]
    fn every_problem_at_once() {
        let text = MINIMAL
            .replace("name = \"shop\"", "name = \"bad name\"")
            .replace("repl@", "repl:secret@")
            .replace("http://127", "ftp://127");
        let p = problems(&text, vec![("SLUICE_KAFKA__PARTITIONS", "0"), ("SLUICE_METRICS__LISTEN", "everywhere:9187")]);
        let keys: Vec<&str> = p.iter().map(|p| p.key.as_str()).collect();
        assert_eq!(keys, ["metrics.listen", "source.url", "source.name", "kafka.partitions", "registry.url"], "{p:#?}");
        assert!(p[0].message.contains("is not an address like 0.0.0.0:9187"), "{p:#?}");
        assert!(p[1].message.contains("must not contain a password"), "{p:#?}");
        assert!(!format!("{p:?}").contains("secret"), "the password must not be echoed: {p:#?}");
    }

    /// A producer queue smaller than one record of `message.max.bytes` is refused (librdkafka
    /// would wait for room forever); left out, Sluice sizes it to hold one.
    #[test]
    fn producer_queue_holds_the_largest_record() {
        let with = |props: &str| MINIMAL.replace("[registry]", &format!("[kafka.properties]\n{props}\n\n[registry]"));
        let p =
            problems(&with("\"message.max.bytes\" = \"67108864\"\n\"queue.buffering.max.kbytes\" = \"8192\""), vec![]);
        let text: Vec<String> = p.iter().map(ToString::to_string).collect();
        assert!(
            text.iter().any(|t| t.contains(
                "kafka.properties.\"queue.buffering.max.kbytes\": 8192 KiB cannot hold one \
                 record of message.max.bytes = 67108864"
            ) && t.contains("at least 65536")),
            "{text:#?}"
        );
        let cfg = load(&with("\"message.max.bytes\" = \"67108864\""), vec![]).unwrap();
        assert_eq!(crate::kafka::queue_max_kbytes(&cfg.kafka.properties), 65537);
        let cfg = load(MINIMAL, vec![]).unwrap();
        assert_eq!(crate::kafka::queue_max_kbytes(&cfg.kafka.properties), 8192);
        let cfg = load(&with("\"queue.buffering.max.kbytes\" = \"100000\""), vec![]).unwrap();
        assert_eq!(crate::kafka::queue_max_kbytes(&cfg.kafka.properties), 100_000);
    }

    /// Wrong elements of one array are each named by their index in the file (taking the first
    /// out must not renumber the next).
    #[test]
    fn wrong_array_elements_keep_their_indexes() {
        let text = r#"
[source]
name = "shop"
url = "mysql://u@127.0.0.1:3306"
failover = ["nonsense", "mysql://u@h2:3306", "mysql://u:pw@h3:3306", "also bad"]

[kafka]
brokers = "b:9092"

[registry]
url = "http://r:8081"
"#;
        let keys: Vec<String> = problems(text, vec![]).iter().map(|p| p.key.clone()).collect();
        assert_eq!(keys, ["source.failover[0]", "source.failover[2]", "source.failover[3]"]);
    }

    /// A wrong type, an unknown key or a missing section does not hide the other problems.
    #[test]
    fn type_errors_do_not_hide_the_rest() {
        let text = r#"
[source]
name = "shop"
url = "mysql://127.0.0.1:35306"
server_id = "abc"
tls = "maybe"
start = "yesterday"
heartbeat = "0s"

[kafka]
brokers = "b:9092"
batch_max_recrods = 5
batch_max_bytes = "16 parsecs"

[filter]
include = ["cdc_test.", "a.b.c", "shop.*"]
"#;
        let p = problems(text, vec![]);
        let text: Vec<String> = p.iter().map(ToString::to_string).collect();
        let has = |s: &str| assert!(text.iter().any(|t| t.contains(s)), "{s:?} in {text:#?}");
        has("source.url: \"mysql://127.0.0.1:35306\" names no user");
        has("source.server_id: invalid type: string \"abc\"");
        has("source.tls: unknown variant `maybe`, expected one of `disabled`, `preferred`");
        has("source.start: \"yesterday\" is not one of earliest, current, FILE:POSITION");
        has("kafka.batch_max_bytes: \"16 parsecs\": unknown unit");
        has("kafka.batch_max_recrods: unknown key");
        has("registry: the [registry] section is missing");
        has("filter.include: \"cdc_test.\" has an empty part");
        // the section with the type errors still had its other keys checked
        has("source.heartbeat: must be at least 1s");
        assert!(!text.iter().any(|t| t.contains("password")), "{text:#?}");
    }

    /// Problems in values that came from the environment name the variable, not the file.
    #[test]
    fn environment_problems_name_the_variable() {
        let e = load(MINIMAL, vec![("SLUICE_SOURCE__START", "0-1-x"), ("SLUICE_SOURCE__SERVER_ID", "0")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("SLUICE_SOURCE__START (sets source.start): \"0-1-x\" is not one of"), "{e}");
        assert!(e.contains("SLUICE_SOURCE__SERVER_ID (sets source.server_id): must not be 0"), "{e}");
        assert!(e.starts_with("invalid configuration in sluice.toml and the SLUICE_* environment:"), "{e}");
    }

    #[test]
    fn source_urls() {
        let hint = "the password file";
        assert_eq!(
            SourceUrl::parse("mysql://repl@127.0.0.1:3307", hint).unwrap(),
            SourceUrl { user: "repl".into(), host: "127.0.0.1".into(), port: 3307 }
        );
        let u = SourceUrl::parse("mariadb://us%40er@db.example", hint).unwrap();
        assert_eq!((u.user.as_str(), u.port), ("us@er", 3306));
        assert_eq!(u.to_string(), "us@er@db.example:3306");
        let v6 = SourceUrl::parse("mysql://r@[::1]:3306", hint).unwrap();
        assert_eq!((v6.host.as_str(), v6.to_string()), ("::1", "r@[::1]:3306".to_string()));
        for (bad, says) in [
            ("postgres://x@y", "must start with mysql:// or mariadb://"),
            ("not a url", "must start with mysql:// or mariadb:// (mysql://USER@HOST:PORT)"),
            ("mysql://[bad", "is not a URL like mysql://USER@HOST:PORT"),
            ("mysql://127.0.0.1:35306", "names no user"),
            (
                "mysql://repl:hunter2@h:1",
                "must not contain a password (it would be shown wherever the URL is): use the password file",
            ),
            ("mysql://repl@h:1/shop", "without a database or options"),
        ] {
            let e = SourceUrl::parse(bad, hint).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
            assert!(!e.contains("hunter2"), "{e}");
        }
        assert_eq!(redact_url("mysql://repl:hunter2@h:1"), "mysql://repl:***@h:1");
        assert_eq!(redact_url("mysql://repl@h:1"), "mysql://repl@h:1");
        assert_eq!(redact_url("root:hunter2@127.0.0.1:1"), "root:***@127.0.0.1:1");
        assert_eq!(redact_url("mysql://r@h/db?password=hunter2&x=1"), "mysql://r@h/db?password=***&x=1");
        assert_eq!(
            redact_url("3 | url = \"mysql://root:hunter2@h:1\nat http://a:b@c and mail x@y"),
            "3 | url = \"mysql://root:***@h:1\nat http://a:***@c and mail x@y"
        );
        for bad in ["root:hunter2@127.0.0.1:1", "mysql://r@h:1/db?password=hunter2"] {
            let e = SourceUrl::parse(bad, hint).unwrap_err();
            assert!(!e.contains("hunter2") && !e.contains("not root://"), "{e}");
        }
    }

    #[test]
    fn table_patterns() {
        assert_eq!(table_pattern_problem("shop.*"), None);
        assert_eq!(table_pattern_problem("orders"), None);
        assert!(table_pattern_problem("shop.").unwrap().contains("empty part"));
        assert!(table_pattern_problem(".orders").unwrap().contains("empty part"));
        // a dot after the first is the table's own (MariaDB allows one in a name)
        assert_eq!(table_pattern_problem("shop.we.ird"), None);
        assert!(table_pattern_problem("").unwrap().contains("empty pattern"));
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
