//! The one reader of Sluice's compacted topics: a `read_committed` consumer of partition 0 that
//! gives the last committed record of each wanted key. Checkpoints (`<prefix>.__positions`,
//! keyed by source name) are read from the tail; the schema history (`<prefix>.__schemas`,
//! keyed `<source>/<db>.<table>`) whole.
//!
//! Read after the sink's `init_transactions`: it has then aborted any transaction a killed
//! predecessor left open, which would otherwise hold back a `read_committed` read.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError as RdKafkaError;
use rdkafka::{Message, Offset, TopicPartitionList};

use super::{consumer_config, positions_topic, Error, KafkaContext};
use crate::config::KafkaSection;
use crate::position::Checkpoint;

/// How much of the topic to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// All of it.
    Whole,
    /// From the end back, as far as needed to see a wanted key (other sources may share the
    /// topic; compaction keeps at least the last record of each key).
    Tail,
}

/// The last value of each key (None: a tombstone), in key order.
pub type Latest = BTreeMap<Vec<u8>, Option<Vec<u8>>>;

/// A `read_committed` reader of a one-partition compacted topic.
pub struct CompactedReader {
    consumer: BaseConsumer<KafkaContext>,
    topic: String,
}

/// How long a read may take to reach the end of the topic.
const READ_DEADLINE: Duration = Duration::from_secs(60);

impl CompactedReader {
    /// A reader of `topic` in consumer group `group` (no offsets are committed).
    ///
    /// # Errors
    /// Fatal when the client cannot be created.
    pub fn new(k: &KafkaSection, topic: &str, group: &str) -> Result<CompactedReader, Error> {
        let consumer = consumer_config(k, None)?
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .set("isolation.level", "read_committed")
            .set("enable.partition.eof", "true")
            // a bounded read: at the end, the broker is not to hold the fetch for new records
            .set("fetch.wait.max.ms", "10")
            .create_with_context(KafkaContext::new(&k.brokers))
            .map_err(|e| Error::Fatal(format!("creating a reader of {topic}: {e}")))?;
        Ok(CompactedReader { consumer, topic: topic.to_string() })
    }

    /// The last committed value of each key that `wanted` accepts.
    ///
    /// # Errors
    /// Abortable when the broker does not answer or the read does not reach the end in time.
    pub fn latest(&self, wanted: impl Fn(&[u8]) -> bool, scope: Scope) -> Result<Latest, Error> {
        let topic = &self.topic;
        let (low, high) = self
            .consumer
            .fetch_watermarks(topic, 0, Duration::from_secs(10))
            .map_err(|e| Error::Abortable(format!("reading the watermarks of {topic}: {e}")))?;
        let mut out = Latest::new();
        if high <= low {
            return Ok(out);
        }
        let mut window = 1000i64;
        loop {
            let start = match scope {
                Scope::Whole => low,
                Scope::Tail => (high - window).max(low),
            };
            out.clear();
            let mut tpl = TopicPartitionList::new();
            tpl.add_partition_offset(topic, 0, Offset::Offset(start))
                .map_err(|e| Error::Fatal(format!("{topic}: {e}")))?;
            self.consumer.assign(&tpl).map_err(|e| Error::Abortable(format!("assigning {topic}: {e}")))?;
            let deadline = Instant::now() + READ_DEADLINE;
            loop {
                if Instant::now() > deadline {
                    return Err(Error::Abortable(format!("reading {topic} did not reach its end within 60 s")));
                }
                // the end is the high watermark read before: a topic a running instance commits
                // to all the time may never give an end-of-partition event (a broker holds an
                // empty fetch until records come), and what comes after is newer than the read
                let at = self.consumer.position().ok().and_then(|p| p.elements().first().map(|e| e.offset()));
                if matches!(at, Some(Offset::Offset(o)) if o >= high) {
                    break;
                }
                match self.consumer.poll(Duration::from_millis(500)) {
                    None => continue,
                    Some(Err(RdKafkaError::PartitionEOF(_))) => break,
                    Some(Err(e)) if super::is_passing(&e) && self.consumer.context().denied().is_none() => {}
                    Some(Err(e)) => return Err(Error::Abortable(format!("reading {topic}: {e}"))),
                    Some(Ok(m)) => {
                        let Some(key) = m.key().filter(|k| wanted(k)) else { continue };
                        out.insert(key.to_vec(), m.payload().map(<[u8]>::to_vec));
                    }
                }
            }
            if !out.is_empty() || start == low {
                return Ok(out);
            }
            window = window.saturating_mul(10);
        }
    }
}

/// Whether `<prefix>.__positions` exists: without it there is no checkpoint yet (for `sluice
/// check`, which must not create it; `sluice run` creates it before reading).
///
/// # Errors
/// Abortable when the broker does not answer.
fn positions_topic_exists(k: &KafkaSection) -> Result<bool, Error> {
    let topic = positions_topic(&k.topic_prefix);
    let md = super::metadata(k, &topic)?;
    Ok(md.topics().iter().any(|t| t.name() == topic && t.error().is_none() && !t.partitions().is_empty()))
}

/// [`read_checkpoint`] from async code: its reads block, so they run on the blocking pool.
///
/// # Errors
/// As [`read_checkpoint`].
pub async fn committed_checkpoint(k: &KafkaSection, source: &str) -> Result<Option<Checkpoint>, Error> {
    let (k, source) = (k.clone(), source.to_string());
    tokio::task::spawn_blocking(move || read_checkpoint(&k, &source))
        .await
        .map_err(|e| Error::Fatal(format!("reading the checkpoint: {e}")))?
}

/// The last committed checkpoint of source `source` (None: none, a deleted one, or no
/// `<prefix>.__positions` topic at all; nothing is created).
///
/// # Errors
/// Abortable when the broker does not answer; fatal for an unreadable checkpoint.
pub fn read_checkpoint(k: &KafkaSection, source: &str) -> Result<Option<Checkpoint>, Error> {
    if !positions_topic_exists(k)? {
        return Ok(None);
    }
    let topic = positions_topic(&k.topic_prefix);
    let reader = CompactedReader::new(k, &topic, &format!("sluice-{source}-checkpoint-reader"))?;
    let latest = reader.latest(|key| key == source.as_bytes(), Scope::Tail)?;
    match latest.into_values().next().flatten() {
        None => Ok(None),
        Some(v) => serde_json::from_slice::<Checkpoint>(&v)
            .map(Some)
            .map_err(|e| Error::Fatal(format!("unreadable checkpoint of source {source:?} on {topic}: {e}"))),
    }
}
