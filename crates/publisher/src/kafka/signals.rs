//! Requests to a running `sluice run`, on `<prefix>.__signals` (partition 0): `sluice snapshot`
//! writes one ([`send_snapshot_request`]); the running instance reads them as they come
//! ([`SignalReader`]) and takes them in at a transaction boundary. The offset up to which it
//! took them in is written into each checkpoint, so a request is acted on once: a restart
//! before the commit that records it reads it again, one after does not.
//!
//! Nothing is written to the source database: the request travels through Kafka, and the
//! instance answers it by reading the tables (see the `snapshot` module).

use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Message, Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};

use super::{client_config, consumer_config, Error, KafkaContext};
use crate::config::KafkaSection;

/// `<prefix>.__signals`.
pub fn signals_topic(prefix: &str) -> String {
    format!("{prefix}.__signals")
}

/// A request, as written on the topic (JSON, keyed by the source name).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signal {
    /// `snapshot`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The source it is for.
    pub source: String,
    /// The tables (`db.table`).
    pub tables: Vec<String>,
    /// When it was made, ms since the epoch.
    pub requested_ms: i64,
}

/// The offset the next request will have (None when the topic does not exist yet: its first
/// request will have offset 0).
///
/// # Errors
/// Abortable when the broker does not answer.
pub async fn end_offset(k: &KafkaSection) -> Result<Option<i64>, Error> {
    let mut cfg = consumer_config(k, None)?;
    let brokers = k.brokers.clone();
    let topic = signals_topic(&k.topic_prefix);
    tokio::task::spawn_blocking(move || {
        let c: BaseConsumer<KafkaContext> = cfg
            .set("allow.auto.create.topics", "false")
            .create_with_context(KafkaContext::new(&brokers))
            .map_err(|e| Error::Fatal(format!("creating a Kafka client: {e}")))?;
        let md = c
            .fetch_metadata(Some(&topic), Duration::from_secs(10))
            .map_err(|e| Error::Abortable(format!("reading the metadata of {topic}: {e}")))?;
        let exists = md.topics().iter().any(|t| t.name() == topic && t.error().is_none() && !t.partitions().is_empty());
        if !exists {
            return Ok(Some(0));
        }
        let (_, high) = c
            .fetch_watermarks(&topic, 0, Duration::from_secs(10))
            .map_err(|e| Error::Abortable(format!("reading the watermarks of {topic}: {e}")))?;
        Ok(Some(high))
    })
    .await
    .map_err(|e| Error::Fatal(format!("reading {e}")))?
}

/// Writes a snapshot request for `tables` of source `source`; returns its offset.
///
/// # Errors
/// Abortable when the broker does not take it.
pub async fn send_snapshot_request(k: &KafkaSection, source: &str, tables: &[String]) -> Result<i64, Error> {
    let topic = signals_topic(&k.topic_prefix);
    let producer: FutureProducer<KafkaContext> = client_config(k)?
        .set("enable.idempotence", "true")
        .set("message.timeout.ms", "30000")
        .create_with_context(KafkaContext::new(&k.brokers))
        .map_err(|e| Error::Fatal(format!("creating a producer: {e}")))?;
    let signal = Signal {
        kind: "snapshot".into(),
        source: source.into(),
        tables: tables.to_vec(),
        requested_ms: crate::process::now_ms(),
    };
    let value = serde_json::to_vec(&signal).map_err(|e| Error::Fatal(format!("writing the request: {e}")))?;
    let record = FutureRecord::to(&topic).partition(0).key(source).payload(&value);
    match producer.send(record, Duration::from_secs(30)).await {
        Ok(delivery) => Ok(delivery.offset),
        Err((e, _)) => Err(Error::Abortable(format!("writing the request to {topic}: {e}"))),
    }
}

/// Reads requests for one source from a given offset, on a thread of its own, and hands them
/// over without blocking ([`SignalReader::poll`]). The thread asks for the partition's end once a
/// second and reads only when it moved (a consumer left assigned would fetch without pause from
/// a broker that answers empty fetches at once); it ends when the reader is dropped.
pub struct SignalReader {
    rx: std::sync::mpsc::Receiver<(i64, Signal)>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

/// How often the thread looks for new requests.
const LOOK_EVERY: Duration = Duration::from_secs(1);

impl Drop for SignalReader {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

impl SignalReader {
    /// A reader of the requests for `source` from `offset` (None: from the topic's end).
    ///
    /// # Errors
    /// Fatal when the client cannot be created.
    pub fn new(k: &KafkaSection, source: &str, offset: Option<i64>) -> Result<SignalReader, Error> {
        let topic = signals_topic(&k.topic_prefix);
        let consumer: BaseConsumer<KafkaContext> = consumer_config(k, None)?
            .set("group.id", format!("sluice-{source}-signals"))
            .set("enable.auto.commit", "false")
            .set("allow.auto.create.topics", "false")
            .set("enable.partition.eof", "true")
            .create_with_context(KafkaContext::new(&k.brokers))
            .map_err(|e| Error::Fatal(format!("creating a reader of {topic}: {e}")))?;
        let (tx, rx) = std::sync::mpsc::channel();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (flag, source) = (std::sync::Arc::clone(&stop), source.to_string());
        std::thread::Builder::new()
            .name("signals".into())
            .spawn(move || read_signals(&consumer, &topic, &source, offset, &tx, &flag))
            .map_err(|e| Error::Fatal(format!("starting the reader of the signals: {e}")))?;
        Ok(SignalReader { rx, stop })
    }

    /// The requests that arrived since the last call, each with the offset after it (other
    /// sources' and unreadable records come as a signal of no kind: only their offset counts).
    pub fn poll(&self) -> Vec<(i64, Signal)> {
        self.rx.try_iter().collect()
    }
}

fn no_signal() -> Signal {
    Signal { kind: String::new(), source: String::new(), tables: Vec::new(), requested_ms: 0 }
}

/// The reader thread's loop (see [`SignalReader`]).
fn read_signals(
    consumer: &BaseConsumer<KafkaContext>,
    topic: &str,
    source: &str,
    offset: Option<i64>,
    tx: &std::sync::mpsc::Sender<(i64, Signal)>,
    stop: &std::sync::atomic::AtomicBool,
) {
    use std::sync::atomic::Ordering;
    let mut next = offset;
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(LOOK_EVERY);
        let high = match consumer.fetch_watermarks(topic, 0, Duration::from_secs(5)) {
            Ok((_, high)) => high,
            Err(e) => {
                tracing::debug!(topic, error = %e, "Looking for snapshot requests");
                continue;
            }
        };
        let from = *next.get_or_insert(high);
        if high <= from {
            continue;
        }
        let mut tpl = TopicPartitionList::new();
        if tpl.add_partition_offset(topic, 0, Offset::Offset(from)).is_err() || consumer.assign(&tpl).is_err() {
            continue;
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while next.is_some_and(|n| n < high) && std::time::Instant::now() < deadline {
            match consumer.poll(Duration::from_millis(200)) {
                None => {}
                Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) => break,
                Some(Err(e)) => {
                    tracing::debug!(topic, error = %e, "Reading snapshot requests");
                    break;
                }
                Some(Ok(m)) => {
                    let after = m.offset() + 1;
                    next = Some(after);
                    let signal = if m.key() == Some(source.as_bytes()) {
                        match m.payload().map(serde_json::from_slice::<Signal>) {
                            Some(Ok(s)) => s,
                            _ => {
                                tracing::warn!(topic, offset = m.offset(), "An unreadable request was passed over");
                                no_signal()
                            }
                        }
                    } else {
                        no_signal()
                    };
                    if tx.send((after, signal)).is_err() {
                        return;
                    }
                }
            }
        }
        let _ = consumer.unassign();
    }
}
