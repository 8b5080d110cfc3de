//! `[elasticsearch]`: `sluice sink elasticsearch`.

#[allow(clippy::wildcard_imports)]
use super::*;

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

pub(super) fn default_es_index() -> String {
    "{topic}".into()
}

pub(super) fn default_bulk_actions() -> usize {
    1000
}

pub(super) fn default_bulk_bytes() -> u64 {
    5 << 20
}

pub(super) fn default_bulk_interval() -> Duration {
    Duration::from_secs(1)
}

pub(super) fn default_stall_after() -> Duration {
    Duration::from_secs(60)
}

pub(super) fn default_es_timeout() -> Duration {
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

    pub(super) fn validate(&self, p: &mut Problems) {
        validate_http_endpoint(p, "elasticsearch", &self.url, self.ca_file.as_deref());
        validate_secret(p, "elasticsearch.password", &self.password_file, &self.password_env);
        validate_secret(p, "elasticsearch.api_key", &self.api_key_file, &self.api_key_env);
        if self.username.is_some() && (self.api_key_file.is_some() || self.api_key_env.is_some()) {
            p.push("elasticsearch.username", "set either a username (basic auth) or an API key, not both");
        }
        // a password without a user was dropped, and the sink went in unauthenticated
        for (key, set) in
            [("password_file", self.password_file.is_some()), ("password_env", self.password_env.is_some())]
        {
            if set && self.username.is_none() {
                p.push(format!("elasticsearch.{key}"), "a password needs elasticsearch.username (basic auth)");
            }
        }
        if !self.index.contains("{topic}") && !self.index.contains("{table}") {
            p.push("elasticsearch.index", "must contain {topic} or {table} (each table needs its own index)");
        }
        if let Some(bad) = refused_in_index_names(&self.index) {
            p.push("elasticsearch.index", format!("must not contain {bad}"));
        }
        for (table, name) in &self.indices {
            if table.split('.').count() != 2 || table.contains('*') || table.contains('?') {
                p.push(format!("elasticsearch.indices.{table}"), "the key must be \"db.table\" (no wildcards)");
            }
            if let Some(bad) = refused_in_index_names(name) {
                p.push(format!("elasticsearch.indices.{table}"), format!("must not contain {bad}"));
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

/// The characters of `name` Elasticsearch refuses in an index name, each once, in order, and
/// why: all of them (`' ', '*' or ':' (...)`), so that one fix of the setting is enough.
fn refused_in_index_names(name: &str) -> Option<String> {
    let mut bad: Vec<String> = Vec::new();
    for c in name.chars().filter(|c| "\\/*?\"<>| ,#:".contains(*c)) {
        let c = format!("{c:?}");
        if !bad.contains(&c) {
            bad.push(c);
        }
    }
    let (last, rest) = bad.split_last()?;
    Some(if rest.is_empty() {
        format!("{last} (Elasticsearch refuses it in index names)")
    } else {
        format!("{} or {last} (Elasticsearch refuses them in index names)", rest.join(", "))
    })
}
