//! Kafka: **where a transaction becomes a Kafka commit**, in one place.
//!
//! [`KafkaSink`] wraps rdkafka's transactional producer. Each Kafka transaction is
//! `begin` → records → one checkpoint record on `<prefix>.__positions` → `commit`, so the
//! records and the binlog position they end at become visible together or not at all.
//! [`read_checkpoint`] reads the last committed checkpoint back with a `read_committed`
//! consumer.
//!
//! librdkafka's transactional calls block (they wait for the coordinator); they run on
//! tokio's blocking pool with a timeout. Errors are classified by what the caller does next
//! ([`SinkError`]): retriable ones are retried here, abortable ones abort the transaction and
//! ask for a replay from the last checkpoint, fatal ones (fenced by a newer instance with the
//! same `transactional.id`, authorization) stop the process.
//!
//! References: KIP-98 (transactions), librdkafka's transactional API
//! <https://docs.confluent.io/platform/current/clients/librdkafka/html/rdkafka_8h.html>.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::ClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::position::ResumePoint;

/// How long one transactional call (init, commit, abort) may take.
const TXN_CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Producer settings Sluice chooses unless `kafka.properties` says otherwise: Java's default
/// partitioner (murmur2 of the key), so Java consumers and Kafka Streams agree on where a key
/// lives; lz4; and a linger of 50 ms, which costs no visibility (read_committed consumers see
/// records only at the commit, every `batch_max_delay`) and makes produce requests large, which
/// is what brokers handle best.
pub const PRODUCER_DEFAULTS: &[(&str, &str)] =
    &[("partitioner", "murmur2_random"), ("compression.type", "lz4"), ("linger.ms", "50")];
/// librdkafka's default `message.max.bytes`.
const LIBRDKAFKA_MESSAGE_MAX_BYTES: usize = 1_000_000;
/// Retries of a retriable transactional error before asking for a restart.
const RETRIES: u32 = 5;

/// What the caller does after a Kafka error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SinkError {
    /// The transaction was aborted (or could not be completed), or the broker did not answer:
    /// replay from the last committed checkpoint.
    #[error("{0}")]
    Abortable(String),
    /// Stop: another instance took over, or the producer cannot continue.
    #[error("{0}")]
    Fatal(String),
    /// A record is larger than Kafka accepts: by the producer's `message.max.bytes` (refused
    /// before sending), or by the broker (the topic's `max.message.bytes`, the broker's
    /// `message.max.bytes`). Retrying cannot help: stop, naming the record.
    #[error("a record of {size} bytes for topic {topic} is larger than {by} accepts")]
    TooLarge {
        /// The record's topic.
        topic: String,
        /// Its key and value, in bytes.
        size: usize,
        /// Who refused it: `the producer (message.max.bytes = N)` or `the broker`.
        by: String,
        /// The record's key (framed Avro), when the refusal came back from the broker.
        key: Option<Vec<u8>>,
    },
}

/// What lets larger records through, for the message that stops at a [`SinkError::TooLarge`].
pub const TOO_LARGE_SETTINGS: &str = "raise message.max.bytes in [kafka.properties] (librdkafka's default is \
     1000000) together with the topic's max.message.bytes (kafka.topic_config, for topics Sluice creates) and the \
     broker's message.max.bytes, or leave such columns out (filter.exclude_columns)";

/// The checkpoint record's value (JSON on `<prefix>.__positions`, keyed by the source name).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// Binlog file of the resume point.
    pub file: String,
    /// Offset in it.
    pub position: u64,
    /// GTID state at the resume point, as text (None when streaming by file and position).
    pub gtid: Option<String>,
    /// `mysql` or `mariadb`: how to read `gtid`.
    #[serde(default)]
    pub gtid_flavor: Option<String>,
    /// When the checkpoint was written, ms since the epoch.
    pub ts_ms: i64,
    /// Format version (1).
    pub version: u32,
    /// The schema-history version in force at this position (see `schema_history`); absent
    /// in checkpoints written before Sluice tracked schemas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema_version: Option<u64>,
}

impl std::fmt::Display for Checkpoint {
    /// Where it resumes: `file:position`, with the GTID state when it has one.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.gtid, self.file.is_empty()) {
            (Some(g), true) => write!(f, "GTID {g}"),
            (Some(g), false) => write!(f, "{}:{} (GTID {g})", self.file, self.position),
            (None, _) => write!(f, "{}:{}", self.file, self.position),
        }
    }
}

impl Checkpoint {
    /// The checkpoint of a resume point.
    pub fn of(resume: &ResumePoint) -> Checkpoint {
        let (gtid, gtid_flavor) = match &resume.gtid {
            Some(g) => (Some(g.to_string()), Some(g.flavor().to_string())),
            None => (None, None),
        };
        Checkpoint {
            file: resume.file.clone(),
            position: resume.position,
            gtid,
            gtid_flavor,
            ts_ms: now_ms(),
            version: 1,
            schema_version: None,
        }
    }

    /// The same checkpoint, with the schema-history version in force.
    #[must_use]
    pub fn with_schema_version(mut self, version: u64) -> Checkpoint {
        self.schema_version = Some(version);
        self
    }
}

/// Milliseconds since the epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The checkpoint topic of a configuration.
pub fn positions_topic(cfg: &Config) -> String {
    format!("{}.__positions", cfg.kafka.topic_prefix)
}

/// The client settings every Kafka client of a configuration shares (brokers, properties,
/// SASL password).
///
/// # Errors
/// Fatal when the SASL password cannot be read.
pub(crate) fn client_config(cfg: &Config) -> Result<ClientConfig, SinkError> {
    base_client_config(cfg)
}

fn base_client_config(cfg: &Config) -> Result<ClientConfig, SinkError> {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &cfg.kafka.brokers);
    for (k, v) in &cfg.kafka.properties {
        c.set(k, v);
    }
    let sasl = cfg.sasl_password().map_err(|e| SinkError::Fatal(e.to_string()))?;
    if let Some(p) = sasl {
        c.set("sasl.password", p.expose());
    }
    Ok(c)
}

fn classify(what: &str, e: &KafkaError) -> SinkError {
    let fenced = e.rdkafka_error_code().is_some_and(|c| {
        matches!(
            c,
            RDKafkaErrorCode::ProducerFenced | RDKafkaErrorCode::InvalidProducerEpoch | RDKafkaErrorCode::Fenced
        )
    });
    if fenced {
        return SinkError::Fatal(format!(
            "{what}: {e}: another instance with the same source name (transactional id) took over; this one stops"
        ));
    }
    let denied = e.rdkafka_error_code().is_some_and(|c| {
        matches!(
            c,
            RDKafkaErrorCode::TransactionalIdAuthorizationFailed
                | RDKafkaErrorCode::ClusterAuthorizationFailed
                | RDKafkaErrorCode::TopicAuthorizationFailed
                | RDKafkaErrorCode::SaslAuthenticationFailed
                | RDKafkaErrorCode::Authentication
                | RDKafkaErrorCode::InvalidConfig
        )
    });
    if denied {
        return SinkError::Fatal(format!("{what}: {e}: check the Kafka credentials, ACLs and kafka.properties"));
    }
    // Everything else, librdkafka's "fatal" producer errors included (an out-of-order sequence
    // after a broker restart, an unknown producer id): this producer is done, but a new one
    // resumes from the committed checkpoint without losing or repeating anything.
    SinkError::Abortable(format!("{what}: {e}"))
}

fn is_retriable(e: &KafkaError) -> bool {
    matches!(e, KafkaError::Transaction(t) if t.is_retriable() && !t.txn_requires_abort() && !t.is_fatal())
}

type TxProducer = ThreadedProducer<KafkaContext>;

/// The context of every Kafka client Sluice creates: librdkafka's log lines and errors go to
/// the tracing log, with the noise of an unreachable broker (librdkafka logs a line per
/// connection attempt, about two a second) folded into one WARN a minute that says what Sluice
/// is waiting for; a partition's end, which is how the readers of the compacted topics stop,
/// is not logged at all. For the producer it also keeps the first delivery the broker refused
/// for good (a record over its size limit), which a commit then reports by name.
pub struct KafkaContext {
    brokers: String,
    last_unreachable: std::sync::Mutex<Option<std::time::Instant>>,
    refused: std::sync::Mutex<Option<SinkError>>,
}

impl KafkaContext {
    /// A context for clients of `brokers` (named in its messages).
    pub fn new(brokers: &str) -> KafkaContext {
        KafkaContext {
            brokers: brokers.to_string(),
            last_unreachable: std::sync::Mutex::new(None),
            refused: std::sync::Mutex::new(None),
        }
    }

    /// One WARN a minute while the brokers cannot be reached; the details at debug level.
    fn unreachable(&self, detail: &str) {
        tracing::debug!(detail, "librdkafka: broker unreachable");
        let Ok(mut last) = self.last_unreachable.lock() else { return };
        if last.is_none_or(|t| t.elapsed() >= Duration::from_secs(60)) {
            *last = Some(std::time::Instant::now());
            tracing::warn!(brokers = %self.brokers, detail, "Cannot reach the Kafka brokers; retrying until they answer");
        }
    }

    /// The refused delivery kept since the last call, if any.
    fn take_refused(&self) -> Option<SinkError> {
        self.refused.lock().ok().and_then(|mut r| r.take())
    }
}

/// True for the librdkafka errors and log facilities that mean "cannot connect (yet)".
fn is_transport(code: Option<RDKafkaErrorCode>) -> bool {
    matches!(
        code,
        Some(
            RDKafkaErrorCode::AllBrokersDown
                | RDKafkaErrorCode::BrokerTransportFailure
                | RDKafkaErrorCode::Resolve
                | RDKafkaErrorCode::BrokerNotAvailable
        )
    )
}

impl ClientContext for KafkaContext {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, message: &str) {
        use rdkafka::config::RDKafkaLogLevel as L;
        // connection failures: "Connect to ipv4#127.0.0.1:9092 failed: Connection refused"
        if matches!(fac, "FAIL" | "BROKERFAIL" | "CONNECT") || message.contains("Connection refused") {
            self.unreachable(message);
            return;
        }
        match level {
            // librdkafka's errors are Sluice's warnings: Sluice retries or stops itself, and
            // logs ERROR only where data is at stake or an operator must act
            L::Emerg | L::Alert | L::Critical | L::Error | L::Warning => {
                tracing::warn!(facility = fac, "librdkafka: {message}");
            }
            L::Notice | L::Info => tracing::info!(facility = fac, "librdkafka: {message}"),
            L::Debug => tracing::debug!(facility = fac, "librdkafka: {message}"),
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        let code = error.rdkafka_error_code();
        if matches!(error, KafkaError::PartitionEOF(_)) || code == Some(RDKafkaErrorCode::PartitionEOF) {
            return;
        }
        if is_transport(code) {
            self.unreachable(reason);
            return;
        }
        tracing::warn!(error = %error, "Kafka client: {reason}");
    }
}

impl ConsumerContext for KafkaContext {}

impl rdkafka::producer::ProducerContext for KafkaContext {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &rdkafka::producer::DeliveryResult<'_>, (): ()) {
        let Err((e, m)) = result else { return };
        if !matches!(
            e.rdkafka_error_code(),
            Some(RDKafkaErrorCode::MessageSizeTooLarge | RDKafkaErrorCode::MessageBatchTooLarge)
        ) {
            return; // the transaction's outcome reports the rest
        }
        if let Ok(mut r) = self.refused.lock() {
            if r.is_none() {
                *r = Some(SinkError::TooLarge {
                    topic: m.topic().to_string(),
                    size: m.key().map_or(0, <[u8]>::len) + m.payload().map_or(0, <[u8]>::len),
                    by: format!("the broker ({e})"),
                    key: m.key().map(<[u8]>::to_vec),
                });
            }
        }
    }
}

/// Records of the next batch, held while the previous batch's commit is in flight (librdkafka
/// takes no records between `commit_transaction` and the next `begin_transaction`): one byte
/// arena and each record's place in it, so holding a record allocates nothing of its own.
#[derive(Default)]
struct Held {
    bytes: Vec<u8>,
    records: Vec<HeldRecord>,
    topics: Vec<String>,
}

struct HeldRecord {
    topic: usize,
    key: Option<std::ops::Range<usize>>,
    value: Option<std::ops::Range<usize>>,
}

impl Held {
    fn push(&mut self, topic: &str, key: Option<&[u8]>, value: Option<&[u8]>) {
        let topic = match self.topics.iter().rposition(|t| t == topic) {
            Some(i) => i,
            None => {
                self.topics.push(topic.to_string());
                self.topics.len() - 1
            }
        };
        let mut put = |b: &[u8]| {
            let start = self.bytes.len();
            self.bytes.extend_from_slice(b);
            start..self.bytes.len()
        };
        let key = key.map(&mut put);
        let value = value.map(&mut put);
        self.records.push(HeldRecord { topic, key, value });
    }

    fn clear(&mut self) {
        self.bytes.clear();
        self.records.clear();
        self.topics.clear();
    }
}

/// The transactional producer and the topics it has made sure exist.
///
/// A batch's commit runs on the blocking pool while the pipeline goes on decoding and encoding
/// the next batch, whose records are held in memory (up to `kafka.batch_max_bytes`) until the
/// commit is through; a commit waits for the one before it. A failed commit surfaces at the
/// next call, and the caller replays from the last checkpoint that did commit.
pub struct KafkaSink {
    producer: Arc<TxProducer>,
    admin: AdminClient<KafkaContext>,
    /// The producer's `message.max.bytes` (librdkafka refuses larger records before sending).
    max_message_bytes: usize,
    source_name: String,
    positions_topic: String,
    partitions: i32,
    replication: i32,
    topic_config: Vec<(String, String)>,
    known_topics: HashSet<String>,
    /// A batch is open: records were sent since the last commit began.
    open: bool,
    /// librdkafka's transaction is in progress (begun, neither committed nor aborted yet).
    begun: bool,
    /// Bytes of keys and values in the open batch.
    txn_bytes: u64,
    /// The commit in flight.
    committing: Option<tokio::task::JoinHandle<Result<(), KafkaError>>>,
    /// The open batch's records while `committing`.
    held: Held,
    /// At most this many bytes are held; then the batch waits for the commit.
    hold_max: usize,
    /// Where each commit's duration goes (`sluice_kafka_commit_seconds`), when set.
    commit_seconds: Option<prometheus::Histogram>,
}

impl std::fmt::Debug for KafkaSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaSink")
            .field("source", &self.source_name)
            .field("open", &self.open)
            .field("committing", &self.committing.is_some())
            .finish()
    }
}

/// Runs a transactional call on this thread, retrying retriable errors (on the blocking pool:
/// librdkafka's transactional calls wait for the coordinator).
fn with_retries(
    what: &str,
    p: &TxProducer,
    call: impl Fn(&TxProducer) -> Result<(), KafkaError>,
) -> Result<(), KafkaError> {
    let mut attempt = 0;
    loop {
        match call(p) {
            Err(e) if is_retriable(&e) && attempt < RETRIES => {
                attempt += 1;
                tracing::warn!(error = %e, attempt, "Retrying: {what}");
                std::thread::sleep(Duration::from_millis(200 * u64::from(attempt)));
            }
            r => return r,
        }
    }
}

impl KafkaSink {
    /// Creates the producer (`transactional.id = sluice-<source.name>`), makes sure the
    /// checkpoint topic exists, and runs `init_transactions`, which fences any older instance
    /// with the same id and aborts a transaction it left open.
    ///
    /// # Errors
    /// Abortable for a broker that does not answer (the caller retries), fatal for bad settings.
    pub async fn connect(cfg: &Config) -> Result<KafkaSink, SinkError> {
        let mut pc = base_client_config(cfg)?;
        for (k, v) in PRODUCER_DEFAULTS {
            if !cfg.kafka.properties.contains_key(*k) {
                pc.set(*k, *v);
            }
        }
        // exactly once rests on these (config validation keeps them out of kafka.properties)
        pc.set("transactional.id", format!("sluice-{}", cfg.source.name))
            .set("enable.idempotence", "true")
            .set("transaction.timeout.ms", cfg.kafka.transaction_timeout.as_millis().to_string());
        let producer: TxProducer = pc
            .create_with_context(KafkaContext::new(&cfg.kafka.brokers))
            .map_err(|e| SinkError::Fatal(format!("creating the Kafka producer: {e}")))?;
        let admin: AdminClient<KafkaContext> = base_client_config(cfg)?
            .create_with_context(KafkaContext::new(&cfg.kafka.brokers))
            .map_err(|e| SinkError::Fatal(format!("creating the Kafka admin client: {e}")))?;
        let max_message_bytes = cfg
            .kafka
            .properties
            .get("message.max.bytes")
            .and_then(|v| v.parse().ok())
            .unwrap_or(LIBRDKAFKA_MESSAGE_MAX_BYTES);
        // topics Sluice creates take the producer's limit when it was raised, so that a record
        // the producer accepts is not refused by the topic (unless kafka.topic_config says)
        let mut topic_config: Vec<(String, String)> =
            cfg.kafka.topic_config.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        if let Some(v) = cfg.kafka.properties.get("message.max.bytes") {
            if !cfg.kafka.topic_config.contains_key("max.message.bytes") {
                topic_config.push(("max.message.bytes".into(), v.clone()));
            }
        }
        let mut sink = KafkaSink {
            producer: Arc::new(producer),
            admin,
            max_message_bytes,
            source_name: cfg.source.name.clone(),
            positions_topic: positions_topic(cfg),
            partitions: cfg.kafka.partitions,
            replication: cfg.kafka.replication_factor,
            topic_config,
            known_topics: HashSet::new(),
            open: false,
            begun: false,
            txn_bytes: 0,
            committing: None,
            held: Held::default(),
            hold_max: usize::try_from(cfg.kafka.batch_max_bytes).unwrap_or(usize::MAX),
            commit_seconds: None,
        };
        let positions = sink.positions_topic.clone();
        sink.create_topic(&positions, 1, &[("cleanup.policy".into(), "compact".into())]).await?;
        sink.known_topics.insert(positions);
        // the schema history, written in the same transactions as the checkpoints
        let schemas = crate::schema_history::schemas_topic(cfg);
        sink.create_topic(&schemas, 1, &[("cleanup.policy".into(), "compact".into())]).await?;
        sink.known_topics.insert(schemas);
        sink.blocking("initializing transactions", |p| p.init_transactions(TXN_CALL_TIMEOUT)).await?;
        Ok(sink)
    }

    /// Runs a blocking transactional call off the executor, retrying retriable errors.
    async fn blocking(
        &self,
        what: &'static str,
        call: impl Fn(&TxProducer) -> Result<(), KafkaError> + Send + 'static,
    ) -> Result<(), SinkError> {
        let p = Arc::clone(&self.producer);
        tokio::task::spawn_blocking(move || with_retries(what, &p, call))
            .await
            .map_err(|e| SinkError::Fatal(format!("{what}: the blocking task failed: {e}")))?
            .map_err(|e| classify(what, &e))
    }

    async fn create_topic(&self, topic: &str, partitions: i32, extra: &[(String, String)]) -> Result<(), SinkError> {
        let mut nt = NewTopic::new(topic, partitions, TopicReplication::Fixed(self.replication));
        for (k, v) in self.topic_config.iter().chain(extra) {
            nt = nt.set(k, v);
        }
        let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
        let results = self
            .admin
            .create_topics([&nt], &opts)
            .await
            .map_err(|e| SinkError::Abortable(format!("creating topic {topic}: {e}")))?;
        for r in results {
            match r {
                Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((t, code)) => return Err(SinkError::Fatal(format!("creating topic {t}: {code}"))),
            }
        }
        Ok(())
    }

    /// Makes sure `topic` exists (created with the configured partitions, replication and
    /// configs when missing).
    ///
    /// # Errors
    /// As [`KafkaSink::connect`].
    pub async fn ensure_topic(&mut self, topic: &str) -> Result<(), SinkError> {
        if self.known_topics.contains(topic) {
            return Ok(());
        }
        self.create_topic(topic, self.partitions, &[]).await?;
        self.known_topics.insert(topic.to_string());
        Ok(())
    }

    /// Bytes of keys and values in the open batch.
    pub fn transaction_bytes(&self) -> u64 {
        self.txn_bytes
    }

    /// True while a batch is open (records sent since the last commit began).
    pub fn in_transaction(&self) -> bool {
        self.open
    }

    fn begin_now(&mut self) -> Result<(), SinkError> {
        self.producer.begin_transaction().map_err(|e| classify("beginning a Kafka transaction", &e))?;
        self.begun = true;
        Ok(())
    }

    /// Adds one record to the open batch, opening one when needed (`value` None: a
    /// tombstone). While the previous commit is in flight the record is held; otherwise it goes
    /// to librdkafka, waiting while its queue is full, which bounds memory.
    ///
    /// # Errors
    /// Abortable (the transaction is aborted first) or fatal, for this record or for the
    /// commit in flight.
    pub async fn send(&mut self, topic: &str, key: Option<&[u8]>, value: Option<&[u8]>) -> Result<(), SinkError> {
        self.open = true;
        self.txn_bytes += (key.map_or(0, <[u8]>::len) + value.map_or(0, <[u8]>::len)) as u64;
        if let Some(c) = &self.committing {
            if !c.is_finished() && self.held.bytes.len() < self.hold_max {
                self.held.push(topic, key, value);
                return Ok(());
            }
            self.settle().await?;
        }
        if !self.begun {
            self.begin_now()?;
        }
        self.produce(topic, key, value).await
    }

    async fn produce(&mut self, topic: &str, key: Option<&[u8]>, value: Option<&[u8]>) -> Result<(), SinkError> {
        loop {
            let mut rec: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(topic);
            if let Some(k) = key {
                rec = rec.key(k);
            }
            if let Some(v) = value {
                rec = rec.payload(v);
            }
            match self.producer.send(rec) {
                Ok(()) => return Ok(()),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge), _)) => {
                    return Err(SinkError::TooLarge {
                        topic: topic.to_string(),
                        size: key.map_or(0, <[u8]>::len) + value.map_or(0, <[u8]>::len),
                        by: format!("the producer (message.max.bytes = {})", self.max_message_bytes),
                        key: None,
                    });
                }
                Err((e, _)) => {
                    let err = classify(&format!("producing to {topic}"), &e);
                    if matches!(err, SinkError::Abortable(_)) {
                        self.abort_after(&err).await?;
                    }
                    return Err(err);
                }
            }
        }
    }

    /// Waits for the commit in flight (if any), then begins the next transaction and sends the
    /// records held meanwhile.
    async fn settle(&mut self) -> Result<(), SinkError> {
        let Some(commit) = self.committing.take() else { return Ok(()) };
        let what = "committing the Kafka transaction";
        let r = commit.await.map_err(|e| SinkError::Fatal(format!("{what}: the blocking task failed: {e}")))?;
        if let Err(e) = r {
            self.held.clear();
            // a record the broker refused for good explains the failed commit best
            let err = self.producer.context().take_refused().unwrap_or_else(|| classify(what, &e));
            if matches!(err, SinkError::Abortable(_)) {
                self.abort_after(&err).await?;
            }
            return Err(err);
        }
        self.begun = false;
        if self.held.records.is_empty() {
            return Ok(());
        }
        self.begin_now()?;
        let held = std::mem::take(&mut self.held);
        for r in &held.records {
            let part = |range: &Option<std::ops::Range<usize>>| range.clone().and_then(|r| held.bytes.get(r));
            let topic = held.topics.get(r.topic).map_or("", String::as_str);
            self.produce(topic, part(&r.key), part(&r.value)).await?;
        }
        // keep the arena's capacity for the next commit
        self.held = held;
        self.held.clear();
        Ok(())
    }

    /// Adds the checkpoint record to the open batch (opening one when none is) and starts
    /// committing it; returns without waiting for the commit (see [`KafkaSink::finish`]).
    /// `then` runs once the commit is through (never for a batch that does not commit): what
    /// the batch did counts from then on.
    ///
    /// # Errors
    /// Abortable (the transaction is aborted first) or fatal, for this batch or for the
    /// previous commit.
    pub async fn commit(
        &mut self,
        checkpoint: &Checkpoint,
        then: impl FnOnce() + Send + 'static,
    ) -> Result<(), SinkError> {
        let value = serde_json::to_vec(checkpoint).map_err(|e| SinkError::Fatal(e.to_string()))?;
        let topic = self.positions_topic.clone();
        let key = self.source_name.clone();
        // the commit before must be through: then this batch's records are all in librdkafka
        self.settle().await?;
        self.send(&topic, Some(key.as_bytes()), Some(&value)).await?;
        let p = Arc::clone(&self.producer);
        let timer = self.commit_seconds.as_ref().map(prometheus::Histogram::start_timer);
        self.committing = Some(tokio::task::spawn_blocking(move || {
            let r = with_retries("committing the Kafka transaction", &p, |p| p.commit_transaction(TXN_CALL_TIMEOUT));
            if r.is_ok() {
                drop(timer); // observes the duration
                then();
            } else if let Some(t) = timer {
                t.stop_and_discard();
            }
            r
        }));
        self.open = false;
        self.txn_bytes = 0;
        Ok(())
    }

    /// Observes each commit's duration (from handing it to the coordinator to its answer,
    /// retries included) into `histogram`.
    pub fn time_commits(&mut self, histogram: prometheus::Histogram) {
        self.commit_seconds = Some(histogram);
    }

    /// Takes the outcome of a commit that has finished (sending what was held meanwhile);
    /// does not wait for one still in flight.
    ///
    /// # Errors
    /// As [`KafkaSink::commit`].
    pub async fn poll(&mut self) -> Result<(), SinkError> {
        if self.committing.as_ref().is_some_and(tokio::task::JoinHandle::is_finished) {
            self.settle().await?;
        }
        Ok(())
    }

    /// Waits until every commit started is through (and sends what was held meanwhile into a
    /// new transaction).
    ///
    /// # Errors
    /// As [`KafkaSink::commit`].
    pub async fn finish(&mut self) -> Result<(), SinkError> {
        self.settle().await
    }

    /// Aborts after `cause`; only a fencing while aborting is worse than the cause itself (the
    /// caller restarts with a new producer, whose `init_transactions` aborts what is left).
    async fn abort_after(&mut self, cause: &SinkError) -> Result<(), SinkError> {
        match self.abort().await {
            Err(e @ SinkError::Fatal(_)) => Err(e),
            Err(e) => {
                tracing::debug!(cause = %cause, error = %e, "Aborting the Kafka transaction failed too");
                Ok(())
            }
            Ok(()) => Ok(()),
        }
    }

    /// Drops the open batch: waits for a commit in flight, discards held records, and aborts
    /// the transaction in progress (no-op when none is).
    ///
    /// # Errors
    /// Fatal when even aborting fails.
    pub async fn abort(&mut self) -> Result<(), SinkError> {
        if let Some(commit) = self.committing.take() {
            if let Ok(Ok(())) = commit.await {
                self.begun = false;
            }
        }
        self.held.clear();
        self.open = false;
        self.txn_bytes = 0;
        if !self.begun {
            return Ok(());
        }
        self.begun = false;
        self.blocking("aborting the Kafka transaction", |p| p.abort_transaction(TXN_CALL_TIMEOUT)).await
    }
}

/// Whether `<prefix>.__positions` exists: without it there is no checkpoint yet (for `sluice
/// check`, which must not create it; `sluice run` creates it before reading).
///
/// # Errors
/// Abortable when the broker does not answer.
pub fn positions_topic_exists(cfg: &Config) -> Result<bool, SinkError> {
    let topic = positions_topic(cfg);
    let consumer: BaseConsumer<KafkaContext> = base_client_config(cfg)?
        .set("allow.auto.create.topics", "false")
        .create_with_context(KafkaContext::new(&cfg.kafka.brokers))
        .map_err(|e| SinkError::Fatal(format!("creating a metadata client: {e}")))?;
    let md = consumer
        .fetch_metadata(Some(&topic), Duration::from_secs(10))
        .map_err(|e| SinkError::Abortable(format!("reading the metadata of {topic}: {e}")))?;
    Ok(md.topics().iter().any(|t| t.name() == topic && t.error().is_none() && !t.partitions().is_empty()))
}

/// Reads the last committed checkpoint of this source (a `read_committed` consumer over the
/// tail of `<prefix>.__positions`). Call after [`KafkaSink::connect`]: `init_transactions`
/// has then aborted any transaction a killed predecessor left open, which would otherwise hold
/// back the read.
///
/// # Errors
/// Abortable when the broker does not answer; fatal for an unreadable checkpoint.
pub fn read_checkpoint(cfg: &Config) -> Result<Option<Checkpoint>, SinkError> {
    let topic = positions_topic(cfg);
    let consumer: BaseConsumer<KafkaContext> = base_client_config(cfg)?
        .set("group.id", format!("sluice-{}-checkpoint-reader", cfg.source.name))
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        .create_with_context(KafkaContext::new(&cfg.kafka.brokers))
        .map_err(|e| SinkError::Fatal(format!("creating the checkpoint consumer: {e}")))?;
    let (low, high) = consumer
        .fetch_watermarks(&topic, 0, Duration::from_secs(10))
        .map_err(|e| SinkError::Abortable(format!("reading the watermarks of {topic}: {e}")))?;
    if high <= low {
        return Ok(None);
    }
    // Other sources may share the topic: read a window of the tail; a compacted topic keeps
    // at least the latest record per key, so widen the window until this key shows up.
    let mut window = 1000i64;
    loop {
        let start = (high - window).max(low);
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&topic, 0, Offset::Offset(start))
            .map_err(|e| SinkError::Fatal(format!("{topic}: {e}")))?;
        consumer.assign(&tpl).map_err(|e| SinkError::Abortable(format!("assigning {topic}: {e}")))?;
        let mut last = None;
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            if std::time::Instant::now() > deadline {
                return Err(SinkError::Abortable(format!("reading {topic} did not reach its end within 30 s")));
            }
            match consumer.poll(Duration::from_millis(500)) {
                None => continue,
                Some(Err(KafkaError::PartitionEOF(_))) => break,
                Some(Err(e)) => return Err(SinkError::Abortable(format!("reading {topic}: {e}"))),
                Some(Ok(m)) => {
                    if m.key() == Some(cfg.source.name.as_bytes()) {
                        last = match m.payload() {
                            Some(v) => Some(serde_json::from_slice::<Checkpoint>(v).map_err(|e| {
                                SinkError::Fatal(format!("unreadable checkpoint at {topic} offset {}: {e}", m.offset()))
                            })?),
                            None => None,
                        };
                    }
                }
            }
        }
        if last.is_some() || start == low {
            return Ok(last);
        }
        window = window.saturating_mul(10);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What happens next for each kind of Kafka error (the broker's behaviour behind them is
    /// exercised by run_chaos and run_e2e against a real broker).
    #[test]
    fn errors_are_classified_by_what_happens_next() {
        let produce = |c| classify("producing", &KafkaError::MessageProduction(c));
        for fenced in
            [RDKafkaErrorCode::ProducerFenced, RDKafkaErrorCode::InvalidProducerEpoch, RDKafkaErrorCode::Fenced]
        {
            let SinkError::Fatal(m) = produce(fenced) else { panic!("{fenced:?} must stop") };
            assert!(m.contains("another instance with the same source name"), "{m}");
        }
        for denied in [RDKafkaErrorCode::TopicAuthorizationFailed, RDKafkaErrorCode::TransactionalIdAuthorizationFailed]
        {
            let SinkError::Fatal(m) = produce(denied) else { panic!("{denied:?} must stop") };
            assert!(m.contains("credentials, ACLs"), "{m}");
        }
        // a new producer resumes from the checkpoint after these
        for restart in [
            RDKafkaErrorCode::OutOfOrderSequenceNumber,
            RDKafkaErrorCode::UnknownProducerId,
            RDKafkaErrorCode::AllBrokersDown,
            RDKafkaErrorCode::MessageTimedOut,
            RDKafkaErrorCode::NotEnoughReplicas,
        ] {
            assert!(matches!(produce(restart), SinkError::Abortable(_)), "{restart:?} must restart");
        }
    }

    #[test]
    fn checkpoint_json() {
        let c = Checkpoint::of(&ResumePoint { file: "mysql-bin.000003".into(), position: 1234, gtid: None });
        let j = serde_json::to_value(&c).unwrap();
        assert_eq!(j["file"], "mysql-bin.000003");
        assert_eq!(j["position"], 1234);
        assert_eq!(j["version"], 1);
        assert!(j["gtid"].is_null());
        let back: Checkpoint = serde_json::from_value(j.clone()).unwrap();
        assert_eq!(back, c);
        assert!(j.get("schema_version").is_none());
        // with a schema version, and a checkpoint written before the field existed
        let v = serde_json::to_value(c.clone().with_schema_version(7)).unwrap();
        assert_eq!(v["schema_version"], 7);
        let old: Checkpoint = serde_json::from_str(
            r#"{"file":"b.000001","position":4,"gtid":null,"gtid_flavor":null,"ts_ms":1,"version":1}"#,
        )
        .unwrap();
        assert_eq!(old.schema_version, None);
    }
}
