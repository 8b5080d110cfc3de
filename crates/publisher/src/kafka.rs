//! Kafka: the client settings every client shares, the context that logs for them, and what
//! each Kafka error means for the caller ([`Error`]). The roles are in their own modules:
//! [`sink`] (**where a transaction becomes a Kafka commit**: the transactional producer) and
//! [`compacted`] (the one `read_committed` reader of the compacted topics: checkpoints on
//! `<prefix>.__positions`, the schema history on `<prefix>.__schemas`).
//!
//! Every client is built from the `[kafka]` section (brokers, properties, the SASL password
//! from its file or variable), never from the whole configuration.
//!
//! References: KIP-98 (transactions), librdkafka's API
//! <https://docs.confluent.io/platform/current/clients/librdkafka/html/rdkafka_8h.html>.

pub mod compacted;
pub mod signals;
pub mod sink;

use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::consumer::ConsumerContext;
use rdkafka::error::{KafkaError as RdKafkaError, RDKafkaErrorCode};
use rdkafka::producer::{Producer, ProducerContext};
use rdkafka::{ClientConfig, Message};

use crate::config::KafkaSection;
use crate::disposition::Disposition;

pub use compacted::{committed_checkpoint, read_checkpoint, CompactedReader};
pub use sink::KafkaSink;

/// Producer settings Sluice chooses unless `kafka.properties` says otherwise: Java's default
/// partitioner (murmur2 of the key), so Java consumers and Kafka Streams agree on where a key
/// lives; lz4; a linger of 5 ms (librdkafka's and Kafka 4's own default): a commit waits for
/// the records still lingering, so a longer linger adds to every commit's latency, and under
/// load produce requests fill up long before it ends (50 ms made commits 65 ms slower and
/// throughput no better in `bench/`, "Commit latency"); and a producer queue of at most 8 MiB and 20,000 records
/// (librdkafka's own defaults, 1 GiB and 100,000, let the queue alone take 30-50 MB at full
/// speed; this bound cost no throughput in `bench/`, see "Memory" there). The queue is raised
/// to hold one record of `message.max.bytes` when that is set higher ([`queue_max_kbytes`]).
/// Delivery reports only for records that failed: Sluice learns of a success from the commit,
/// and a report per record cost the producer's polling thread about 5% of Sluice's CPU
/// (`bench/README.md`, "Cost per row"). Nothing leaks by the reports not sent: the delivery
/// opaque is `()`, which rust-rdkafka passes as a null pointer, not a box.
pub const PRODUCER_DEFAULTS: &[(&str, &str)] = &[
    ("partitioner", "murmur2_random"),
    ("compression.type", "lz4"),
    ("linger.ms", "5"),
    ("queue.buffering.max.messages", "20000"),
    ("delivery.report.only.error", "true"),
];
/// The default bound of the producer queue, in KiB (`queue.buffering.max.kbytes`).
pub const QUEUE_MAX_KBYTES: u64 = 8 * 1024;

/// `queue.buffering.max.kbytes` for these properties: as set, or [`QUEUE_MAX_KBYTES`] raised
/// to hold one record of the configured `message.max.bytes` (librdkafka never accepts a record
/// larger than its queue: it would wait for room forever).
pub fn queue_max_kbytes(properties: &std::collections::BTreeMap<String, String>) -> u64 {
    if let Some(v) = properties.get("queue.buffering.max.kbytes").and_then(|v| v.parse().ok()) {
        return v;
    }
    let max_message = properties.get("message.max.bytes").and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    QUEUE_MAX_KBYTES.max(max_message.div_ceil(1024) + 1)
}

/// Commits the open transaction as soon as librdkafka has its records delivered.
///
/// rust-rdkafka's `commit_transaction` flushes first, and its flush polls the event queue in
/// steps of 100 ms that each run to their end, while the producer's own polling thread takes the
/// delivery reports: so every commit with a record still in flight took at least 100 ms, however
/// quickly the broker answered (on the benchmark broker: 100 ms per commit against 0.5 ms for
/// the commit request itself, `bench/README.md`, "Commit latency"). Waiting here until
/// librdkafka holds no record (an acknowledged one leaves at once, a failed one once the polling
/// thread has served its report) makes that flush a no-op, so a commit costs the delivery and
/// the EndTxn round trip. The wait sleeps in steps of at most 1 ms (no CPU to
/// speak of); `timeout` bounds the wait and the commit together, as it bounded the flush.
///
/// # Errors
/// As `commit_transaction`: records librdkafka could not deliver fail it.
pub fn commit_transaction<C: ProducerContext, P: Producer<C>>(p: &P, timeout: Duration) -> Result<(), RdKafkaError> {
    let deadline = Instant::now() + timeout;
    let mut step = Duration::from_micros(50);
    while p.in_flight_count() > 0 && Instant::now() < deadline {
        std::thread::sleep(step);
        step = (step * 2).min(Duration::from_millis(1));
    }
    p.commit_transaction(deadline.saturating_duration_since(Instant::now()))
}

/// librdkafka's default `message.max.bytes`.
pub const LIBRDKAFKA_MESSAGE_MAX_BYTES: usize = 1_000_000;

/// What the caller does after a Kafka error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The transaction was aborted (or could not be completed), or the broker did not answer:
    /// replay from the last committed checkpoint.
    #[error("{0}")]
    Abortable(String),
    /// Stop: the producer cannot continue (refused credentials, bad settings).
    #[error("{0}")]
    Fatal(String),
    /// Stop: another instance with the same transactional id (or `sluice position set`) took
    /// over; this one must not write again.
    #[error("{0}")]
    Fenced(String),
    /// librdkafka failed `what`, its error kept as the cause (its code decided `stops`): a
    /// refused credential or setting stops with `hint`; anything else (a broker away, an
    /// aborted transaction, a producer librdkafka gave up on) restarts with a new producer
    /// from the committed checkpoint.
    #[error("{what}: {source}{hint}")]
    Client {
        /// What Sluice was doing.
        what: String,
        /// What to check, for an error that stops ("" otherwise).
        hint: &'static str,
        /// True when a restart cannot help.
        stops: bool,
        /// librdkafka's error (boxed: it is large, and errors travel in every `Result`).
        #[source]
        source: Box<RdKafkaError>,
    },
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

impl Error {
    /// What the caller does next.
    pub fn disposition(&self) -> Disposition {
        match self {
            Error::Abortable(_) | Error::Client { stops: false, .. } => Disposition::Restart,
            Error::Fatal(_) | Error::Fenced(_) | Error::TooLarge { .. } | Error::Client { stops: true, .. } => {
                Disposition::Stop
            }
        }
    }
}

/// What lets larger records through, for the message that stops at an [`Error::TooLarge`].
pub const TOO_LARGE_SETTINGS: &str = "raise message.max.bytes in [kafka.properties] (librdkafka's default is \
     1000000) together with the topic's max.message.bytes (kafka.topic_config, for topics Sluice creates) and the \
     broker's message.max.bytes, or leave such columns out (filter.exclude_columns)";

/// The checkpoint topic: `<prefix>.__positions`.
pub fn positions_topic(prefix: &str) -> String {
    format!("{prefix}.__positions")
}

/// The schema-history topic: `<prefix>.__schemas`.
pub fn schemas_topic(prefix: &str) -> String {
    format!("{prefix}.__schemas")
}

/// Asks the brokers for their metadata (10 s at most), so that a cluster that does not answer is
/// said to be unreachable at once, not as the time-out of whatever comes first.
///
/// # Errors
/// Abortable when no broker answers.
pub async fn probe(k: &KafkaSection) -> Result<(), Error> {
    let k = k.clone();
    // one topic's metadata (whether it exists or not): an answer, without the whole cluster's
    tokio::task::spawn_blocking(move || metadata(&k, &positions_topic(&k.topic_prefix)).map(|_| ()))
        .await
        .map_err(|e| Error::Fatal(format!("asking the Kafka brokers: {e}")))?
}

/// The metadata of `topic` (blocking; nothing is created). The brokers have 10 s to answer.
///
/// # Errors
/// Fatal when they refuse Sluice's credentials or the TLS handshake fails (reported by
/// librdkafka's error callback at once, while the request itself would only time out, so the
/// request is made in steps of a second); abortable when they do not answer.
pub(crate) fn metadata(k: &KafkaSection, topic: &str) -> Result<rdkafka::metadata::Metadata, Error> {
    const WAIT: Duration = Duration::from_secs(10);
    // a producer: its poll() hands librdkafka's error events to the context
    let client: rdkafka::producer::BaseProducer<KafkaContext> = client_config(k)?
        .set("allow.auto.create.topics", "false")
        .create_with_context(KafkaContext::new(&k.brokers))
        .map_err(|e| Error::Fatal(format!("creating a Kafka client: {e}")))?;
    let started = std::time::Instant::now();
    loop {
        match rdkafka::producer::Producer::client(&client).fetch_metadata(Some(topic), Duration::from_secs(1)) {
            Ok(md) => return Ok(md),
            Err(e) => {
                // serve the error events waiting (a poll of zero serves one)
                client.poll(Duration::from_millis(100));
                if let Some(denied) = rdkafka::producer::Producer::context(&client).denied() {
                    return Err(Error::Fatal(denied));
                }
                if started.elapsed() >= WAIT {
                    return Err(Error::Abortable(format!(
                        "the Kafka brokers at {} do not answer (within {} s): {e}",
                        k.brokers,
                        WAIT.as_secs()
                    )));
                }
            }
        }
    }
}

/// The client settings every Kafka client shares: brokers, `kafka.properties`, and the SASL
/// password from its file or variable.
///
/// # Errors
/// Fatal when the SASL password cannot be read.
pub fn client_config(k: &KafkaSection) -> Result<ClientConfig, Error> {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &k.brokers);
    for (key, v) in &k.properties {
        c.set(key, v);
    }
    for (key, secret) in k.passwords().map_err(|e| Error::Fatal(e.to_string()))? {
        c.set(key, secret.expose());
    }
    Ok(c)
}

/// librdkafka's default `fetch.max.bytes`.
pub const FETCH_MAX_BYTES: u64 = 52_428_800;

/// [`client_config`] for a consumer: its `fetch.max.bytes` is `bound` (the sink's memory bound)
/// or else the one `kafka.properties` sets (librdkafka's default without), raised to
/// `message.max.bytes` when that is larger (librdkafka refuses a consumer whose fetch cannot
/// hold the largest record the producer may write, and `kafka.properties` are shared with
/// `sluice run`, which needs the larger value for large rows), with `receive.message.max.bytes`
/// raised to hold such a fetch.
///
/// # Errors
/// As [`client_config`].
pub fn consumer_config(k: &KafkaSection, bound: Option<u64>) -> Result<ClientConfig, Error> {
    let number = |key: &str| k.properties.get(key).and_then(|v| v.parse::<u64>().ok());
    let fetch = bound
        .or_else(|| number("fetch.max.bytes"))
        .unwrap_or(FETCH_MAX_BYTES)
        .max(number("message.max.bytes").unwrap_or(0));
    // librdkafka: receive.message.max.bytes >= fetch.max.bytes + 512 (its default 100 MB)
    let receive = number("receive.message.max.bytes").unwrap_or(100_000_000).max(fetch + 512);
    let mut c = client_config(k)?;
    c.set("fetch.max.bytes", fetch.to_string()).set("receive.message.max.bytes", receive.to_string());
    Ok(c)
}

pub(crate) fn classify(what: &str, e: &RdKafkaError) -> Error {
    let fenced = e.rdkafka_error_code().is_some_and(|c| {
        matches!(
            c,
            RDKafkaErrorCode::ProducerFenced | RDKafkaErrorCode::InvalidProducerEpoch | RDKafkaErrorCode::Fenced
        )
    });
    if fenced {
        return Error::Fenced(format!(
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
    // Everything else, librdkafka's "fatal" producer errors included (an out-of-order sequence
    // after a broker restart, an unknown producer id): this producer is done, but a new one
    // resumes from the committed checkpoint without losing or repeating anything.
    let hint = if denied { ": check the Kafka credentials, ACLs and kafka.properties" } else { "" };
    Error::Client { what: what.to_string(), hint, stops: denied, source: Box::new(e.clone()) }
}

pub(crate) fn is_retriable(e: &RdKafkaError) -> bool {
    matches!(e, RdKafkaError::Transaction(t) if t.is_retriable() && !t.txn_requires_abort() && !t.is_fatal())
}

/// True for a consumer's poll error that only says the brokers cannot be reached right now
/// ("all broker connections are down" on a loaded or restarting broker): librdkafka reconnects
/// and the read goes on from where it was, so a reader keeps polling within its own deadline
/// instead of giving up on the first such event.
pub(crate) fn is_passing(e: &RdKafkaError) -> bool {
    matches!(e, RdKafkaError::MessageConsumption(code) if is_transport(Some(*code)))
}

/// What a refusal of Sluice's Kafka credentials means to the operator.
const DENIED_AUTH: &str = "the Kafka brokers refused Sluice's credentials: check sasl.mechanisms and sasl.username in \
     [kafka.properties] and the password in kafka.sasl_password_file (or _env)";

/// What a failed TLS handshake with the brokers means to the operator.
const DENIED_TLS: &str = "the TLS handshake with the Kafka brokers failed: check security.protocol, ssl.ca.location \
     (the CA that signed the brokers' certificates) and that kafka.brokers names hosts on them";

/// The context of every Kafka client Sluice creates: librdkafka's log lines and errors go to
/// the tracing log, with the noise of an unreachable broker (librdkafka logs a line per
/// connection attempt, about two a second) folded into one WARN a minute that says what Sluice
/// is waiting for; a partition's end, which is how the readers of the compacted topics stop,
/// is not logged at all. For the producer it also keeps the largest delivery the broker refused
/// for good (a record over its size limit), which a commit then reports by name.
pub struct KafkaContext {
    brokers: String,
    last_unreachable: std::sync::Mutex<Option<std::time::Instant>>,
    refused: std::sync::Mutex<Option<Error>>,
    denied: std::sync::Mutex<Option<String>>,
}

impl KafkaContext {
    /// A context for clients of `brokers` (named in its messages).
    pub fn new(brokers: &str) -> KafkaContext {
        KafkaContext {
            brokers: brokers.to_string(),
            last_unreachable: std::sync::Mutex::new(None),
            refused: std::sync::Mutex::new(None),
            denied: std::sync::Mutex::new(None),
        }
    }

    /// Keeps the first refusal of credentials or of the TLS handshake (see [`KafkaContext::denied`]).
    fn deny(&self, what: &str, reason: &str) {
        if let Ok(mut d) = self.denied.lock() {
            if d.is_none() {
                tracing::warn!(brokers = %self.brokers, "{what}: {reason}");
                *d = Some(format!("{what}: {reason}"));
            }
        }
    }

    /// Why the brokers refused this client's credentials or TLS handshake, once they have:
    /// librdkafka retries such connections forever, so its calls only time out, while an
    /// operator has to change the settings.
    pub fn denied(&self) -> Option<String> {
        self.denied.lock().ok().and_then(|d| d.clone())
    }

    /// One WARN a minute while the brokers cannot be reached; the details at debug level.
    fn unreachable(&self, detail: &str) {
        tracing::debug!(detail, "librdkafka: broker unreachable");
        let Ok(mut last) = self.last_unreachable.lock() else { return };
        if last.is_none_or(|t| t.elapsed() >= Duration::from_secs(60)) {
            *last = Some(std::time::Instant::now());
            tracing::warn!(brokers = %self.brokers, detail, "Cannot reach the Kafka brokers; trying again (a command that waits for them says when it gives up)");
        }
    }

    /// The refused delivery kept since the last call, if any.
    fn take_refused(&self) -> Option<Error> {
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
        // A refused TLS handshake or SASL authentication is logged at once (from librdkafka's
        // thread); its error event reaches the error callback only when the client is polled,
        // and not always for the first connection: the log is the dependable signal.
        if fac == "FAIL" {
            if message.contains("SSL handshake failed") {
                self.deny(DENIED_TLS, message);
            } else if message.contains("SASL authentication error") {
                self.deny(DENIED_AUTH, message);
            }
        }
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

    fn error(&self, error: RdKafkaError, reason: &str) {
        let code = error.rdkafka_error_code();
        tracing::debug!(?code, reason, "librdkafka: error");
        if matches!(error, RdKafkaError::PartitionEOF(_)) || code == Some(RDKafkaErrorCode::PartitionEOF) {
            return;
        }
        if is_transport(code) {
            self.unreachable(reason);
            return;
        }
        let what = match code {
            Some(RDKafkaErrorCode::Authentication | RDKafkaErrorCode::SaslAuthenticationFailed) => Some(DENIED_AUTH),
            Some(RDKafkaErrorCode::SSL) => Some(DENIED_TLS),
            _ => None,
        };
        if let Some(what) = what {
            self.deny(what, reason);
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
        let size = m.key().map_or(0, <[u8]>::len) + m.payload().map_or(0, <[u8]>::len);
        if let Ok(mut r) = self.refused.lock() {
            // a refused batch fails every record in it, the checkpoint too: the largest table
            // record explains the refusal (Sluice's own records, a checkpoint or a table
            // definition, are small and only named when nothing else was refused)
            let own = |topic: &str| topic.ends_with(".__positions") || topic.ends_with(".__schemas");
            let rank = |topic: &str, size: usize| (!own(topic), size);
            let kept = match &*r {
                Some(Error::TooLarge { topic, size, .. }) => Some(rank(topic, *size)),
                _ => None,
            };
            if kept.is_none_or(|kept| rank(m.topic(), size) > kept) {
                *r = Some(Error::TooLarge {
                    topic: m.topic().to_string(),
                    size,
                    by: format!("the broker ({e})"),
                    key: m.key().map(<[u8]>::to_vec),
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every consumer Sluice makes takes the `message.max.bytes` a large row needs (the sink's
    /// consumer was refused by librdkafka above 16 MiB, and retried for ever); librdkafka
    /// checks the settings when the client is made, without a broker.
    #[test]
    fn consumers_take_a_large_message_max_bytes() {
        for (mm, fetch) in [(None, 16u64 << 20), (Some("20000000"), 16 << 20), (Some("200000000"), FETCH_MAX_BYTES)] {
            let mut k: KafkaSection = toml::from_str("brokers = \"127.0.0.1:9\"").unwrap();
            if let Some(mm) = mm {
                k.properties.insert("message.max.bytes".into(), mm.into());
            }
            let c = consumer_config(&k, (fetch != FETCH_MAX_BYTES).then_some(fetch)).unwrap();
            let made: Result<rdkafka::consumer::BaseConsumer, _> = c.clone().set("group.id", "g").create();
            assert!(made.is_ok(), "message.max.bytes {mm:?}: {:?}", made.err());
            let want = mm.map_or(fetch, |m| m.parse::<u64>().unwrap().max(fetch));
            assert_eq!(c.get("fetch.max.bytes"), Some(want.to_string().as_str()));
        }
        // without a bound, a fetch.max.bytes the user set is kept
        let mut k: KafkaSection = toml::from_str("brokers = \"127.0.0.1:9\"").unwrap();
        k.properties.insert("fetch.max.bytes".into(), "104857600".into());
        assert_eq!(consumer_config(&k, None).unwrap().get("fetch.max.bytes"), Some("104857600"));
    }

    /// A reader waits out brokers away for a moment, and only that: a refusal, a missing topic
    /// or a partition's end are not "passing".
    #[test]
    fn passing_consumer_errors() {
        for code in [RDKafkaErrorCode::AllBrokersDown, RDKafkaErrorCode::BrokerTransportFailure] {
            assert!(is_passing(&RdKafkaError::MessageConsumption(code)), "{code:?}");
        }
        for code in [RDKafkaErrorCode::TopicAuthorizationFailed, RDKafkaErrorCode::UnknownTopicOrPartition] {
            assert!(!is_passing(&RdKafkaError::MessageConsumption(code)), "{code:?}");
        }
        assert!(!is_passing(&RdKafkaError::PartitionEOF(0)));
        assert!(!is_passing(&RdKafkaError::MessageProduction(RDKafkaErrorCode::AllBrokersDown)));
    }

    /// What happens next for each kind of Kafka error (the broker's behaviour behind them is
    /// exercised by run_chaos and run_e2e against a real broker).
    #[test]
    fn errors_are_classified_by_what_happens_next() {
        let produce = |c| classify("producing", &RdKafkaError::MessageProduction(c));
        for fenced in
            [RDKafkaErrorCode::ProducerFenced, RDKafkaErrorCode::InvalidProducerEpoch, RDKafkaErrorCode::Fenced]
        {
            let Error::Fenced(m) = produce(fenced) else { panic!("{fenced:?} must stop") };
            assert!(m.contains("another instance with the same source name"), "{m}");
        }
        for denied in [RDKafkaErrorCode::TopicAuthorizationFailed, RDKafkaErrorCode::TransactionalIdAuthorizationFailed]
        {
            let e = produce(denied);
            assert_eq!(e.disposition(), Disposition::Stop, "{denied:?} must stop");
            assert!(e.to_string().contains("credentials, ACLs"), "{e}");
            // the cause is kept as librdkafka's error, not flattened to text
            let cause = std::error::Error::source(&e).and_then(|c| c.downcast_ref::<Box<RdKafkaError>>());
            assert_eq!(cause.and_then(|c| c.rdkafka_error_code()), Some(denied));
        }
        // a new producer resumes from the checkpoint after these
        for restart in [
            RDKafkaErrorCode::OutOfOrderSequenceNumber,
            RDKafkaErrorCode::UnknownProducerId,
            RDKafkaErrorCode::AllBrokersDown,
            RDKafkaErrorCode::MessageTimedOut,
            RDKafkaErrorCode::NotEnoughReplicas,
        ] {
            assert_eq!(produce(restart).disposition(), Disposition::Restart, "{restart:?} must restart");
        }
    }
}
