//! `[kafka]`: the cluster, topics and transactions records are published with.

#[allow(clippy::wildcard_imports)]
use super::*;

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
    /// Partitions of topics Sluice creates (1 to 10000).
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
    /// This sets how long a committed row takes to become readable (`sluice_commit_latency_seconds`):
    /// with the default, p99 under 250 ms at 5,000 row changes/s; `"10ms"` is the low-latency
    /// setting (p99 35 ms there, `bench/README.md`, "Commit latency"), at the cost of a commit
    /// per batch of a few milliseconds' changes (more work for the broker's coordinator).
    /// A running instance commits at least every 10 s (its sign of life for `sluice position
    /// set`), so a longer value acts as 10 s: larger batches come from the two limits above.
    #[serde(default = "default_batch_delay", with = "humantime_serde")]
    pub batch_max_delay: Duration,
    /// Kafka `transaction.timeout.ms`: longer than the largest MySQL transaction takes to
    /// stream, and than `batch_max_delay` (a batch stays open that long); from 1s to about 24
    /// days (librdkafka's range), at most the broker's `transaction.max.timeout.ms` (15 minutes
    /// by default).
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
    /// File holding `ssl.key.password`, the password of an encrypted client key
    /// (`ssl.key.location`, for mutual TLS).
    #[serde(default)]
    pub ssl_key_password_file: Option<PathBuf>,
    /// Environment variable holding `ssl.key.password`.
    #[serde(default)]
    pub ssl_key_password_env: Option<String>,
    /// File holding `ssl.keystore.password`, the password of a PKCS#12 keystore
    /// (`ssl.keystore.location`).
    #[serde(default)]
    pub ssl_keystore_password_file: Option<PathBuf>,
    /// Environment variable holding `ssl.keystore.password`.
    #[serde(default)]
    pub ssl_keystore_password_env: Option<String>,
}

pub(super) fn default_prefix() -> String {
    "sluice".into()
}

pub(super) fn default_partitions() -> i32 {
    3
}

pub(super) fn default_replication() -> i32 {
    1
}

pub(super) fn default_batch_records() -> usize {
    100_000
}

pub(super) fn default_batch_bytes() -> u64 {
    16 << 20
}

pub(super) fn default_batch_delay() -> Duration {
    Duration::from_millis(200)
}

pub(super) fn default_txn_timeout() -> Duration {
    Duration::from_secs(300)
}

impl KafkaSection {
    /// The librdkafka password properties and the secrets configured for them, from their
    /// files or environment variables.
    ///
    /// # Errors
    /// An unreadable password file.
    pub fn passwords(&self) -> Result<Vec<(&'static str, Secret)>, ConfigError> {
        let mut out = Vec::new();
        for (key, _, file, env) in self.password_settings() {
            if let Some(s) = optional_secret(file, env)? {
                out.push((key, s));
            }
        }
        Ok(out)
    }

    /// Each librdkafka password property with its setting's name, file and variable.
    fn password_settings(&self) -> [(&'static str, &'static str, &Option<PathBuf>, &Option<String>); 3] {
        [
            ("sasl.password", "kafka.sasl_password", &self.sasl_password_file, &self.sasl_password_env),
            ("ssl.key.password", "kafka.ssl_key_password", &self.ssl_key_password_file, &self.ssl_key_password_env),
            (
                "ssl.keystore.password",
                "kafka.ssl_keystore_password",
                &self.ssl_keystore_password_file,
                &self.ssl_keystore_password_env,
            ),
        ]
    }
}

impl KafkaSection {
    pub(super) fn validate(&self, p: &mut Problems) {
        if self.brokers.trim().is_empty() {
            p.push("kafka.brokers", "is empty");
        }
        for (_, name, file, env) in self.password_settings() {
            validate_secret(p, name, file, env);
        }
        let number = |key: &str| self.properties.get(key).and_then(|v| v.parse::<u64>().ok());
        // librdkafka takes 1 s to i32::MAX ms; a batch stays open up to batch_max_delay (which
        // acts as the liveness period at most)
        let open = self.batch_max_delay.min(crate::position::LIVENESS_EVERY);
        if self.transaction_timeout < Duration::from_secs(1) || self.transaction_timeout.as_millis() > i32::MAX as u128
        {
            p.push("kafka.transaction_timeout", "must be from 1s to 24days (librdkafka's range; the broker's own limit, transaction.max.timeout.ms, is 15 minutes by default)");
        } else if let Some(socket) =
            number("socket.timeout.ms").filter(|&s| u128::from(s) > self.transaction_timeout.as_millis() + 100)
        {
            // librdkafka refuses this when the producer is made, after `sluice check` said yes
            p.push(
                "kafka.transaction_timeout",
                format!(
                    "{} must be at least kafka.properties.\"socket.timeout.ms\" ({socket} ms) less 100 ms \
                     (librdkafka's rule)",
                    humantime::format_duration(self.transaction_timeout)
                ),
            );
        } else if self.transaction_timeout <= open {
            p.push(
                "kafka.transaction_timeout",
                format!(
                    "{} must be longer than kafka.batch_max_delay ({}): a batch stays open that long, and the broker \
                     would abort it",
                    humantime::format_duration(self.transaction_timeout),
                    humantime::format_duration(open)
                ),
            );
        }
        if self.topic_prefix.is_empty()
            || !self.topic_prefix.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
        {
            p.push("kafka.topic_prefix", format!("{:?} must be letters, digits, '.', '_' or '-'", self.topic_prefix));
        }
        // a topic's partitions each cost the broker files and memory: tens of thousands is
        // past what any cluster serves for one topic (and a typo more likely than a wish)
        if !(1..=10_000).contains(&self.partitions) {
            p.push("kafka.partitions", "must be from 1 to 10000");
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
            if key.contains("password") {
                let instead = match self.password_settings().iter().find(|(k, ..)| k == key) {
                    Some((_, name, ..)) => format!("put it in a file named by {name}_file (or a variable, {name}_env)"),
                    None => "Sluice reads sasl.password, ssl.key.password and ssl.keystore.password from files \
                             (kafka.*_password_file) or variables (kafka.*_password_env)"
                        .to_string(),
                };
                p.push(
                    format!("kafka.properties.{key:?}"),
                    format!("must not be set here: a password in the configuration is shown wherever it is; {instead}"),
                );
            } else if key.starts_with("transactional.") || key == "enable.idempotence" {
                p.push(
                    format!("kafka.properties.{key:?}"),
                    "must not be set here: Sluice sets the transactional settings itself",
                );
            }
        }
        librdkafka_problems("kafka.properties", &self.properties, p);
    }
}

/// The properties of `table` (`kafka.properties`, `elasticsearch.consumer`) librdkafka refuses
/// by name or value, checked where the file is read rather than when the client is made (a
/// typo would otherwise pass `sluice check` and stop `sluice run`).
pub(super) fn librdkafka_problems(table: &str, properties: &BTreeMap<String, String>, p: &mut Problems) {
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
