//! The transactional producer: **where a transaction becomes a Kafka commit**, in one place.
//!
//! Each Kafka transaction is `begin` → records → one checkpoint record on
//! `<prefix>.__positions` → `commit`, so the records and the binlog position they end at become
//! visible together or not at all. librdkafka's transactional calls block (they wait for the
//! coordinator); they run on tokio's blocking pool with a timeout, retriable errors retried here.
//! A commit runs while the next batch is encoded ([`KafkaSink::commit`] returns at once; the
//! outcome surfaces at the next call), and the records sent meanwhile are held until the commit
//! is through, when librdkafka takes records again.
//!
//! The topics a sink writes to are made sure of by [`Topics`] (the admin client).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::error::{KafkaError as RdKafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
use rdkafka::ClientConfig;

use super::{
    classify, client_config, is_retriable, positions_topic, schemas_topic, Error, KafkaContext,
    LIBRDKAFKA_MESSAGE_MAX_BYTES, PRODUCER_DEFAULTS,
};
use crate::config::KafkaSection;
use crate::disposition::Disposition;
use crate::position::Checkpoint;

/// The header of a truncate record (value `t`): Kafka Connect's `HasHeaderKey` predicate finds
/// it without decoding the value (a sink that cannot apply a truncate can drop it by that).
pub const TRUNCATE_HEADER: &str = "sluice.op";

/// How long one transactional call (init, commit, abort) may take.
const TXN_CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Retries of a retriable transactional error before asking for a restart.
const RETRIES: u32 = 5;

type TxProducer = ThreadedProducer<KafkaContext>;

/// The producer's settings: the shared ones, Sluice's defaults where `kafka.properties` is
/// silent, and the transactional ones, which are Sluice's alone (configuration validation
/// keeps them out of `kafka.properties`).
///
/// # Errors
/// As [`client_config`].
pub fn producer_config(k: &KafkaSection, source_name: &str) -> Result<ClientConfig, Error> {
    let mut pc = client_config(k)?;
    for (key, v) in PRODUCER_DEFAULTS {
        if !k.properties.contains_key(*key) {
            pc.set(*key, *v);
        }
    }
    pc.set("queue.buffering.max.kbytes", super::queue_max_kbytes(&k.properties).to_string());
    // exactly once rests on these
    pc.set("transactional.id", format!("sluice-{source_name}"))
        .set("enable.idempotence", "true")
        .set("transaction.timeout.ms", k.transaction_timeout.as_millis().to_string());
    Ok(pc)
}

/// The topics a sink writes to, made sure of once each: created when missing with the
/// configured partitions, replication and configs (and `max.message.bytes` raised with the
/// producer's `message.max.bytes`, so a record the producer accepts is not refused by a topic
/// Sluice created).
pub struct Topics {
    /// None: topics are taken to exist (librdkafka's mock cluster has no CreateTopics).
    admin: Option<AdminClient<KafkaContext>>,
    partitions: i32,
    replication: i32,
    config: Vec<(String, String)>,
    known: HashSet<String>,
}

impl Topics {
    /// Topics created by an admin client of the `[kafka]` section.
    ///
    /// # Errors
    /// Fatal when the client cannot be created.
    pub fn new(k: &KafkaSection) -> Result<Topics, Error> {
        let admin: AdminClient<KafkaContext> = client_config(k)?
            .create_with_context(KafkaContext::new(&k.brokers))
            .map_err(|e| Error::Fatal(format!("creating the Kafka admin client: {e}")))?;
        let mut config: Vec<(String, String)> = k.topic_config.iter().map(|(a, b)| (a.clone(), b.clone())).collect();
        if let Some(v) = k.properties.get("message.max.bytes") {
            if !k.topic_config.contains_key("max.message.bytes") {
                config.push(("max.message.bytes".into(), v.clone()));
            }
        }
        Ok(Topics {
            admin: Some(admin),
            partitions: k.partitions,
            replication: k.replication_factor,
            config,
            known: HashSet::new(),
        })
    }

    /// Topics that exist already (tests over librdkafka's mock cluster).
    #[cfg(test)]
    pub fn existing() -> Topics {
        Topics { admin: None, partitions: 1, replication: 1, config: Vec::new(), known: HashSet::new() }
    }

    /// Makes sure `topic` exists, with the configured partitions.
    ///
    /// # Errors
    /// Abortable when the broker does not answer, fatal when it refuses.
    pub async fn ensure(&mut self, topic: &str) -> Result<(), Error> {
        self.ensure_with(topic, self.partitions, &[]).await
    }

    /// Makes sure `topic` exists with `partitions` and these settings besides the configured.
    ///
    /// # Errors
    /// As [`Topics::ensure`].
    pub async fn ensure_with(&mut self, topic: &str, partitions: i32, extra: &[(String, String)]) -> Result<(), Error> {
        if self.known.contains(topic) {
            return Ok(());
        }
        if let Some(admin) = &self.admin {
            let mut nt = NewTopic::new(topic, partitions, TopicReplication::Fixed(self.replication));
            for (k, v) in self.config.iter().chain(extra) {
                nt = nt.set(k, v);
            }
            let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
            let results = admin
                .create_topics([&nt], &opts)
                .await
                .map_err(|e| Error::Abortable(format!("creating topic {topic}: {e}")))?;
            for r in results {
                match r {
                    Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                    Err((t, code)) => return Err(Error::Fatal(format!("creating topic {t}: {code}"))),
                }
            }
        }
        self.known.insert(topic.to_string());
        Ok(())
    }
}

/// Records of the next batch, held while the previous batch's commit is in flight (librdkafka
/// takes no records between `commit_transaction` and the next `begin_transaction`), in blocks
/// of [`HELD_BLOCK`] bytes: holding a record allocates nothing of its own, and growing never
/// copies what is held (a doubling arena touches twice the held bytes at each growth and the
/// allocator keeps the old one a while: that was a large part of the peak RSS).
#[derive(Default)]
struct Held {
    /// Filled blocks and the one being filled (the last).
    blocks: Vec<Vec<u8>>,
    /// Emptied blocks of the standard size, kept for the next commit.
    spare: Vec<Vec<u8>>,
    /// Memory held: keys, values and the records' places (bounded by half `kafka.batch_max_bytes`).
    bytes: usize,
    records: Vec<HeldRecord>,
    topics: Vec<String>,
}

/// The size of a [`Held`] block; a record larger than this gets a block of its own size.
const HELD_BLOCK: usize = 1 << 20;

/// Where a held record is, and its timestamp: 32 bytes, so 100,000 small records cost 3.2 MB
/// of places, not 6 or more.
struct HeldRecord {
    topic: u32,
    block: u32,
    /// The key, then the value, from here in the block.
    start: u32,
    key_len: u32,
    value_len: u32,
    timestamp_ms: i64,
}

/// The record librdkafka takes (`timestamp_ms` 0: its own clock's time), built in one piece
/// rather than by the builder's chain of moves.
fn record<'a>(
    topic: &'a str,
    key: Option<&'a [u8]>,
    payload: Option<&'a [u8]>,
    timestamp_ms: i64,
) -> BaseRecord<'a, [u8], [u8]> {
    let mut rec = BaseRecord::to(topic);
    rec.key = key;
    rec.payload = payload;
    rec.timestamp = (timestamp_ms != 0).then_some(timestamp_ms);
    rec
}

/// A `key_len`/`value_len` for no key or value (a tombstone).
const ABSENT: u32 = u32::MAX;

impl Held {
    /// Holds a record; false when it cannot be (a part of 4 GiB or more: send it once the
    /// commit is through instead).
    fn push(&mut self, topic: &str, key: Option<&[u8]>, value: Option<&[u8]>, timestamp_ms: i64) -> bool {
        let (k, v) = (key.unwrap_or_default(), value.unwrap_or_default());
        let need = k.len() + v.len();
        // both parts, and the sum, below ABSENT
        if u32::try_from(need).is_err() || need == ABSENT as usize {
            return false;
        }
        let len = |part: Option<&[u8]>, bytes: &[u8]| match part {
            Some(_) => u32::try_from(bytes.len()).unwrap_or(ABSENT),
            None => ABSENT,
        };
        let (key_len, value_len) = (len(key, k), len(value, v));
        // the topic of the record before, nearly always
        let topic = match self.topics.last() {
            Some(t) if t == topic => self.topics.len() - 1,
            _ => match self.topics.iter().position(|t| t == topic) {
                Some(i) => i,
                None => {
                    self.topics.push(topic.to_string());
                    self.topics.len() - 1
                }
            },
        };
        if self.blocks.last().is_none_or(|b| b.capacity() - b.len() < need) {
            let spare = if need <= HELD_BLOCK { self.spare.pop() } else { None };
            self.blocks.push(spare.unwrap_or_else(|| Vec::with_capacity(need.max(HELD_BLOCK))));
        }
        let (Ok(topic), Ok(block)) = (u32::try_from(topic), u32::try_from(self.blocks.len() - 1)) else { return false };
        let Some(buf) = self.blocks.last_mut() else { return false };
        let Ok(start) = u32::try_from(buf.len()) else { return false };
        buf.extend_from_slice(k);
        buf.extend_from_slice(v);
        self.bytes += need + std::mem::size_of::<HeldRecord>();
        self.records.push(HeldRecord { topic, block, start, key_len, value_len, timestamp_ms });
        true
    }

    /// A held record's topic, key and value.
    fn get(&self, r: &HeldRecord) -> (&str, Option<&[u8]>, Option<&[u8]>) {
        let block = self.blocks.get(r.block as usize).map_or(&[][..], Vec::as_slice);
        let mut at = r.start as usize;
        let mut part = |len: u32| {
            (len != ABSENT).then(|| {
                let p = block.get(at..at + len as usize).unwrap_or_default();
                at += len as usize;
                p
            })
        };
        let key = part(r.key_len);
        let value = part(r.value_len);
        (self.topics.get(r.topic as usize).map_or("", String::as_str), key, value)
    }

    fn clear(&mut self) {
        for mut b in self.blocks.drain(..) {
            // blocks made for one large record go back to the allocator
            if b.capacity() == HELD_BLOCK {
                b.clear();
                self.spare.push(b);
            }
        }
        self.bytes = 0;
        self.records.clear();
        self.topics.clear();
    }
}

/// The transactional producer and the topics it has made sure exist.
///
/// A batch's commit runs on the blocking pool while the pipeline goes on decoding and encoding
/// the next batch, whose records are held in memory (up to half of `kafka.batch_max_bytes`) until the
/// commit is through; a commit waits for the one before it. A failed commit surfaces at the
/// next call, and the caller replays from the last checkpoint that did commit.
pub struct KafkaSink {
    producer: Arc<TxProducer>,
    topics: Topics,
    /// The producer's `message.max.bytes` (librdkafka refuses larger records before sending).
    max_message_bytes: usize,
    source_name: String,
    positions_topic: String,
    /// A batch is open: records were sent since the last commit began.
    open: bool,
    /// librdkafka's transaction is in progress (begun, neither committed nor aborted yet).
    begun: bool,
    /// Bytes of keys and values in the open batch.
    txn_bytes: u64,
    /// The commit in flight.
    committing: Option<tokio::task::JoinHandle<Result<(), RdKafkaError>>>,
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
    call: impl Fn(&TxProducer) -> Result<(), RdKafkaError>,
) -> Result<(), RdKafkaError> {
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
    /// Creates the producer (`transactional.id = sluice-<source>`), makes sure the checkpoint
    /// and schema-history topics exist, and runs `init_transactions`, which fences any older
    /// instance with the same id and aborts a transaction it left open.
    ///
    /// # Errors
    /// Abortable for a broker that does not answer (the caller retries), fatal for bad settings.
    pub async fn connect(k: &KafkaSection, source_name: &str) -> Result<KafkaSink, Error> {
        super::probe(k).await?;
        let mut topics = Topics::new(k)?;
        // both compacted, one partition: the order of a source's records is the order of its commits
        let compact = [("cleanup.policy".to_string(), "compact".to_string())];
        topics.ensure_with(&positions_topic(&k.topic_prefix), 1, &compact).await?;
        // the schema history, written in the same transactions as the checkpoints
        topics.ensure_with(&schemas_topic(&k.topic_prefix), 1, &compact).await?;
        KafkaSink::start(producer_config(k, source_name)?, topics, k, source_name).await
    }

    /// A sink on librdkafka's mock cluster (tests): its topics are made on the mock directly.
    #[cfg(test)]
    pub(crate) async fn on_mock(k: &KafkaSection, source_name: &str) -> Result<KafkaSink, Error> {
        KafkaSink::start(producer_config(k, source_name)?, Topics::existing(), k, source_name).await
    }

    /// The sink over a producer configuration and topics already made sure of.
    async fn start(pc: ClientConfig, topics: Topics, k: &KafkaSection, source_name: &str) -> Result<KafkaSink, Error> {
        let producer: TxProducer = pc
            .create_with_context(KafkaContext::new(&k.brokers))
            .map_err(|e| Error::Fatal(format!("creating the Kafka producer: {e}")))?;
        let max_message_bytes =
            k.properties.get("message.max.bytes").and_then(|v| v.parse().ok()).unwrap_or(LIBRDKAFKA_MESSAGE_MAX_BYTES);
        let sink = KafkaSink {
            producer: Arc::new(producer),
            topics,
            max_message_bytes,
            source_name: source_name.to_string(),
            positions_topic: positions_topic(&k.topic_prefix),
            open: false,
            begun: false,
            txn_bytes: 0,
            committing: None,
            held: Held::default(),
            // half a batch: enough to keep encoding through a typical commit (bench/README.md, "Memory")
            hold_max: usize::try_from(k.batch_max_bytes / 2).unwrap_or(usize::MAX),
            commit_seconds: None,
        };
        sink.blocking("initializing transactions", |p| p.init_transactions(TXN_CALL_TIMEOUT)).await?;
        Ok(sink)
    }

    /// Runs a blocking transactional call off the executor, retrying retriable errors.
    async fn blocking(
        &self,
        what: &'static str,
        call: impl Fn(&TxProducer) -> Result<(), RdKafkaError> + Send + 'static,
    ) -> Result<(), Error> {
        let p = Arc::clone(&self.producer);
        tokio::task::spawn_blocking(move || with_retries(what, &p, call))
            .await
            .map_err(|e| Error::Fatal(format!("{what}: the blocking task failed: {e}")))?
            .map_err(|e| classify(what, &e))
    }

    /// Makes sure `topic` exists (created with the configured partitions, replication and
    /// configs when missing).
    ///
    /// # Errors
    /// As [`KafkaSink::connect`].
    pub async fn ensure_topic(&mut self, topic: &str) -> Result<(), Error> {
        self.topics.ensure(topic).await
    }

    /// The largest record the producer takes (`message.max.bytes`).
    pub fn max_message_bytes(&self) -> usize {
        self.max_message_bytes
    }

    /// Bytes of keys and values in the open batch.
    pub fn transaction_bytes(&self) -> u64 {
        self.txn_bytes
    }

    /// True while a batch is open (records sent since the last commit began).
    pub fn in_transaction(&self) -> bool {
        self.open
    }

    fn begin_now(&mut self) -> Result<(), Error> {
        self.producer.begin_transaction().map_err(|e| classify("beginning a Kafka transaction", &e))?;
        self.begun = true;
        Ok(())
    }

    /// Adds one record to the open batch, opening one when needed (`value` None: a
    /// tombstone), with the timestamp `timestamp_ms` (ms since the epoch; 0: the time librdkafka
    /// takes it, which costs a clock read per record). While the previous commit is in flight
    /// the record is held; otherwise it goes to librdkafka, waiting while its queue is full,
    /// which bounds memory.
    ///
    /// # Errors
    /// Abortable (the transaction is aborted first) or fatal, for this record or for the
    /// commit in flight.
    pub async fn send(
        &mut self,
        topic: &str,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        timestamp_ms: i64,
    ) -> Result<(), Error> {
        if self.try_send(topic, key, value, timestamp_ms)? {
            return Ok(());
        }
        // a commit in flight that could not hold it (it is through, or the record would take the
        // held bytes past their bound: a huge row is never copied into held blocks that stay
        // allocated) is waited for first
        self.open = true;
        let size = key.map_or(0, <[u8]>::len) + value.map_or(0, <[u8]>::len);
        self.txn_bytes += size as u64;
        self.settle().await?;
        if !self.begun {
            self.begin_now()?;
        }
        self.produce(topic, key, value, timestamp_ms).await
    }

    /// [`KafkaSink::send`] where it needs no waiting, as nearly every record does: held while a
    /// commit is in flight and there is room, else handed to librdkafka. False, having done
    /// nothing, where `send` must wait: for a commit that is through (its held records go
    /// first), for room in librdkafka's queue, or for the delivery report that explains an
    /// error. Called per record without the futures of `send` and `produce` (building and
    /// polling them cost 86 of the pipeline thread's 6,268 instructions a record,
    /// `BENCH_CALLGRIND=1 bench/kafka_bench.sh`, 2026-12-08).
    ///
    /// # Errors
    /// A record larger than the producer's `message.max.bytes` ([`Error::TooLarge`]), or a
    /// transaction that cannot begin.
    pub fn try_send(
        &mut self,
        topic: &str,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        timestamp_ms: i64,
    ) -> Result<bool, Error> {
        let size = key.map_or(0, <[u8]>::len) + value.map_or(0, <[u8]>::len);
        if let Some(c) = &self.committing {
            if c.is_finished()
                || self.held.bytes + size > self.hold_max
                || !self.held.push(topic, key, value, timestamp_ms)
            {
                return Ok(false);
            }
        } else {
            if !self.begun {
                self.begin_now()?;
            }
            match self.producer.send(record(topic, key, value, timestamp_ms)) {
                Ok(()) => {}
                Err((RdKafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge), _)) => {
                    // (as `send` leaves it: the batch is open, to be aborted)
                    self.open = true;
                    self.txn_bytes += size as u64;
                    return Err(self.too_large(topic, size));
                }
                Err(_) => return Ok(false),
            }
        }
        self.open = true;
        self.txn_bytes += size as u64;
        Ok(true)
    }

    /// A record of `size` bytes for `topic` the producer refuses as larger than it takes.
    fn too_large(&self, topic: &str, size: usize) -> Error {
        Error::TooLarge {
            topic: topic.to_string(),
            size,
            by: format!("the producer (message.max.bytes = {})", self.max_message_bytes),
            key: None,
        }
    }

    /// The partitions of `topic`, which exists (Sluice created it, or it was there).
    ///
    /// # Errors
    /// Abortable when the broker does not answer, fatal when the topic is not there.
    pub async fn partitions(&self, topic: &str) -> Result<i32, Error> {
        let (p, t) = (Arc::clone(&self.producer), topic.to_string());
        let md = tokio::task::spawn_blocking(move || p.client().fetch_metadata(Some(&t), Duration::from_secs(10)))
            .await
            .map_err(|e| Error::Fatal(format!("reading the metadata of topic {topic}: {e}")))?
            .map_err(|e| Error::Abortable(format!("reading the metadata of topic {topic}: {e}")))?;
        let n = md.topics().iter().find(|m| m.name() == topic).map_or(0, |m| m.partitions().len());
        match i32::try_from(n) {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(Error::Fatal(format!("topic {topic} has no partitions the broker lists"))),
        }
    }

    /// Adds a truncate record (`value`, no key, the header `sluice.op: t`) to every one of the
    /// `partitions` of `topic`, after the records sent before it: each partition's consumers
    /// see it in order with the table's other records there.
    ///
    /// # Errors
    /// As [`KafkaSink::send`].
    pub async fn send_to_every_partition(&mut self, topic: &str, partitions: i32, value: &[u8]) -> Result<(), Error> {
        self.open = true;
        self.txn_bytes += (value.len() as u64) * u64::try_from(partitions).unwrap_or(0);
        // held records carry no partition: the commit in flight goes through first
        self.settle().await?;
        if !self.begun {
            self.begin_now()?;
        }
        for partition in 0..partitions {
            loop {
                let headers = OwnedHeaders::new().insert(Header { key: TRUNCATE_HEADER, value: Some("t") });
                let rec: BaseRecord<'_, [u8], [u8]> =
                    BaseRecord::to(topic).partition(partition).payload(value).headers(headers);
                match self.producer.send(rec) {
                    Ok(()) => break,
                    Err((RdKafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    Err((e, _)) => {
                        let err = self
                            .refusal(&e)
                            .await
                            .unwrap_or_else(|| classify(&format!("producing a truncate record to {topic}"), &e));
                        if err.disposition() == Disposition::Restart {
                            self.abort_after(&err).await?;
                        }
                        return Err(err);
                    }
                }
            }
        }
        Ok(())
    }

    async fn produce(
        &mut self,
        topic: &str,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        timestamp_ms: i64,
    ) -> Result<(), Error> {
        loop {
            match self.producer.send(record(topic, key, value, timestamp_ms)) {
                Ok(()) => return Ok(()),
                Err((RdKafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Err((RdKafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge), _)) => {
                    return Err(self.too_large(topic, key.map_or(0, <[u8]>::len) + value.map_or(0, <[u8]>::len)));
                }
                Err((e, _)) => {
                    // a record the broker refused earlier in this transaction puts it in an
                    // error state, which every later send reports: the refusal explains it
                    let err = self.refusal(&e).await.unwrap_or_else(|| classify(&format!("producing to {topic}"), &e));
                    if err.disposition() == Disposition::Restart {
                        self.abort_after(&err).await?;
                    }
                    return Err(err);
                }
            }
        }
    }

    /// The record the broker refused for good, when one explains `e`. A refusal puts the
    /// transaction in an error state at once, but its delivery report reaches the context a
    /// moment later (on rust-rdkafka's polling thread): a send that fails with the state
    /// (`Local: Erroneous state`) waits for the reports still due, up to two seconds, so that
    /// the refused table and key stop Sluice instead of an abortable error restarting it into
    /// the same refusal.
    async fn refusal(&self, e: &RdKafkaError) -> Option<Error> {
        let ctx = self.producer.context();
        if e.rdkafka_error_code() == Some(RDKafkaErrorCode::State) {
            let deadline = std::time::Instant::now() + Duration::from_secs(2);
            while self.producer.in_flight_count() > 0 && std::time::Instant::now() < deadline {
                if let Some(refused) = ctx.take_refused() {
                    return Some(refused);
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        ctx.take_refused()
    }

    /// Waits for the commit in flight (if any), then begins the next transaction and sends the
    /// records held meanwhile.
    async fn settle(&mut self) -> Result<(), Error> {
        let Some(commit) = self.committing.take() else { return Ok(()) };
        let what = "committing the Kafka transaction";
        let r = commit.await.map_err(|e| Error::Fatal(format!("{what}: the blocking task failed: {e}")))?;
        if let Err(e) = r {
            self.held.clear();
            // a record the broker refused for good explains the failed commit best
            let err = self.refusal(&e).await.unwrap_or_else(|| classify(what, &e));
            if err.disposition() == Disposition::Restart {
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
            let (topic, key, value) = held.get(r);
            // straight to librdkafka (as `try_send`), the waiting way only for a record it did not
            // take: nearly every record is held, and a future for each cost 100 instructions
            if self.producer.send(record(topic, key, value, r.timestamp_ms)).is_err() {
                self.produce(topic, key, value, r.timestamp_ms).await?;
            }
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
    pub async fn commit(&mut self, checkpoint: &Checkpoint, then: impl FnOnce() + Send + 'static) -> Result<(), Error> {
        let value = serde_json::to_vec(checkpoint).map_err(|e| Error::Fatal(e.to_string()))?;
        let topic = self.positions_topic.clone();
        let key = self.source_name.clone();
        // the commit before must be through: then this batch's records are all in librdkafka
        self.settle().await?;
        // stamped by librdkafka when it takes it: the benchmarks time commits by it
        self.send(&topic, Some(key.as_bytes()), Some(&value), 0).await?;
        let p = Arc::clone(&self.producer);
        let timer = self.commit_seconds.as_ref().map(prometheus::Histogram::start_timer);
        self.committing = Some(tokio::task::spawn_blocking(move || {
            let r = with_retries("committing the Kafka transaction", &p, |p| {
                super::commit_transaction(p, TXN_CALL_TIMEOUT)
            });
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
    pub async fn poll(&mut self) -> Result<(), Error> {
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
    pub async fn finish(&mut self) -> Result<(), Error> {
        self.settle().await
    }

    /// Aborts after `cause`; only a fencing while aborting is worse than the cause itself (the
    /// caller restarts with a new producer, whose `init_transactions` aborts what is left).
    async fn abort_after(&mut self, cause: &Error) -> Result<(), Error> {
        match self.abort().await {
            Err(e) if e.disposition() == Disposition::Stop => Err(e),
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
    pub async fn abort(&mut self) -> Result<(), Error> {
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

/// The sink's commit, refusal, fence and retry paths against librdkafka's in-process mock
/// cluster: a mock because it injects the broker's answers (a record refused as too large, a
/// fenced epoch, a coordinator still loading) that a real broker gives only by accident. It
/// has no transactional visibility or CreateTopics, so exactly-once itself is tested against
/// the real broker (tests/it/run/chaos.rs, run/e2e.rs); topics are created on the mock directly.
#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use rdkafka::mocking::MockCluster;
    use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};

    use super::*;
    use crate::disposition::Disposition;

    /// Held records come back as they went in (timestamps too), in order, across blocks and with one larger
    /// than a block; clearing keeps the standard blocks for the next commit and drops the
    /// large one.
    #[test]
    fn held_records_span_blocks_without_copying() {
        let mut h = Held::default();
        let big = vec![7u8; HELD_BLOCK + 10];
        let mut want = Vec::new();
        for i in 0..30_000u32 {
            let key = i.to_be_bytes().to_vec();
            let value = if i % 1000 == 999 { None } else { Some(vec![(i % 251) as u8; 60 + (i % 40) as usize]) };
            let topic = if i % 2 == 0 { "a" } else { "b" };
            assert!(h.push(topic, Some(&key), value.as_deref(), i64::from(i)));
            want.push((topic, key, value, i64::from(i)));
            if i == 12_345 {
                assert!(h.push("c", None, Some(&big), 0));
                want.push(("c", Vec::new(), Some(big.clone()), 0));
            }
        }
        let bytes: usize = want.iter().map(|(_, k, v, _)| k.len() + v.as_ref().map_or(0, Vec::len)).sum();
        assert_eq!(h.bytes, bytes + want.len() * std::mem::size_of::<HeldRecord>());
        assert!(h.blocks.len() >= 3, "{} blocks", h.blocks.len());
        assert_eq!(h.records.len(), want.len());
        for (r, (topic, key, value, ts)) in h.records.iter().zip(&want) {
            let (t, k, v) = h.get(r);
            assert_eq!((t, r.timestamp_ms), (*topic, *ts));
            assert_eq!(k.unwrap_or_default(), &key[..]);
            assert_eq!(v, value.as_deref());
        }
        let standard = h.blocks.iter().filter(|b| b.capacity() == HELD_BLOCK).count();
        h.clear();
        assert_eq!((h.bytes, h.records.len(), h.blocks.len(), h.spare.len()), (0, 0, 0, standard));
        assert!(h.push("a", Some(b"k"), Some(b""), 1));
        assert_eq!((h.spare.len(), h.get(&h.records[0])), (standard - 1, ("a", Some(&b"k"[..]), Some(&b""[..]))));
    }

    fn section(brokers: &str) -> KafkaSection {
        toml::from_str(&format!(
            "brokers = \"{brokers}\"\ntopic_prefix = \"m\"\n[properties]\n\"message.timeout.ms\" = \"5000\"\n"
        ))
        .unwrap()
    }

    /// A sink of source `src` on `mock`, with its topics made there.
    async fn sink(mock: &MockCluster<'_, rdkafka::producer::DefaultProducerContext>) -> (KafkaSink, KafkaSection) {
        let k = section(&mock.bootstrap_servers());
        for t in ["m.__positions", "m.__schemas", "m.shop.t"] {
            mock.create_topic(t, 1, 1).unwrap();
        }
        let s = KafkaSink::on_mock(&k, "src").await.unwrap();
        (s, k)
    }

    fn checkpoint() -> Checkpoint {
        Checkpoint::of(&crate::position::ResumePoint { file: "b.000001".into(), position: 400, gtid: None })
    }

    /// Counts the commits that went through (the callback runs only for those).
    fn counter() -> (Arc<AtomicUsize>, impl FnOnce() + Send + 'static) {
        let n = Arc::new(AtomicUsize::new(0));
        let m = Arc::clone(&n);
        (n, move || {
            m.fetch_add(1, Ordering::SeqCst);
        })
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_batch_commits_with_its_checkpoint() {
        let mock = MockCluster::new(1).unwrap();
        let (mut s, _) = sink(&mock).await;
        s.send("m.shop.t", Some(b"k1"), Some(b"v1"), 0).await.unwrap();
        s.send("m.shop.t", Some(b"k1"), None, 0).await.unwrap();
        assert!(s.in_transaction());
        assert_eq!(s.transaction_bytes(), 6);
        let (n, then) = counter();
        s.commit(&checkpoint(), then).await.unwrap();
        assert!(!s.in_transaction(), "the next records open the next batch");
        // the next batch's records are held while the commit is in flight, then sent
        s.send("m.shop.t", Some(b"k2"), Some(b"v2"), 0).await.unwrap();
        let (n2, then2) = counter();
        s.commit(&checkpoint(), then2).await.unwrap();
        s.finish().await.unwrap();
        assert_eq!((n.load(Ordering::SeqCst), n2.load(Ordering::SeqCst)), (1, 1));
    }

    /// The send that never waits: straight to librdkafka with no commit in flight; held while
    /// one is; once that commit is through it leaves the record to `send`, whose settle sends the
    /// held records first, so nothing is reordered; a record above the producer's limit is
    /// refused with its topic and size, not left to wait.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn try_send_holds_during_a_commit_and_leaves_the_rest_to_send() {
        let mock = MockCluster::new(1).unwrap();
        let (mut s, _) = sink(&mock).await;
        assert!(s.try_send("m.shop.t", Some(b"k1"), Some(b"v1"), 0).unwrap());
        assert_eq!((s.in_transaction(), s.transaction_bytes(), s.held.records.len()), (true, 4, 0));
        let (n, then) = counter();
        s.commit(&checkpoint(), then).await.unwrap();
        // the commit stays in flight, as the sink sees it, until the gate opens
        let (open, gate) = tokio::sync::oneshot::channel::<()>();
        let commit = s.committing.take().unwrap();
        s.committing = Some(tokio::spawn(async move {
            let _ = gate.await;
            commit.await.unwrap()
        }));
        assert!(s.try_send("m.shop.t", Some(b"k2"), Some(b"v22"), 7).unwrap(), "held while the commit is in flight");
        assert_eq!((s.held.records.len(), s.transaction_bytes()), (1, 5));
        assert_eq!(s.held.get(&s.held.records[0]), ("m.shop.t", Some(&b"k2"[..]), Some(&b"v22"[..])));
        open.send(()).unwrap();
        while !s.committing.as_ref().is_some_and(tokio::task::JoinHandle::is_finished) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(!s.try_send("m.shop.t", Some(b"k3"), Some(b"v3"), 0).unwrap(), "the commit is through: send's turn");
        assert_eq!((s.held.records.len(), s.transaction_bytes()), (1, 5), "left untouched");
        s.send("m.shop.t", Some(b"k3"), Some(b"v3"), 0).await.unwrap();
        assert_eq!((s.held.records.len(), s.transaction_bytes(), n.load(Ordering::SeqCst)), (0, 9, 1));
        let big = vec![0u8; s.max_message_bytes() + 1];
        match s.try_send("m.shop.t", Some(b"k4"), Some(&big), 0) {
            Err(Error::TooLarge { topic, size, key: None, .. }) => {
                assert_eq!((topic.as_str(), size), ("m.shop.t", big.len() + 2));
            }
            other => panic!("expected TooLarge, got {other:?}"),
        }
        let (n2, then2) = counter();
        s.commit(&checkpoint(), then2).await.unwrap();
        s.finish().await.unwrap();
        assert_eq!(n2.load(Ordering::SeqCst), 1);
    }

    /// A record the broker refuses as too large: the commit fails with the record's topic, size
    /// and key (from the delivery report), not an abortable error that restarts forever.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_record_the_broker_refuses_as_too_large_is_named() {
        let mock = MockCluster::new(1).unwrap();
        let (mut s, _) = sink(&mock).await;
        mock.request_errors(RDKafkaApiKey::Produce, &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE; 8]);
        s.send("m.shop.t", Some(b"\0\0\0\0\x01key"), Some(&[7u8; 300]), 0).await.unwrap();
        let (n, then) = counter();
        let r = async {
            s.commit(&checkpoint(), then).await?;
            s.finish().await
        }
        .await;
        match r {
            Err(Error::TooLarge { topic, size, by, key }) => {
                assert_eq!(topic, "m.shop.t");
                assert_eq!(size, 308);
                assert!(by.starts_with("the broker"), "{by}");
                assert_eq!(key.as_deref(), Some(&b"\0\0\0\0\x01key"[..]));
            }
            other => panic!("expected TooLarge, got {other:?}"),
        }
        assert_eq!(n.load(Ordering::SeqCst), 0, "a failed commit is not counted");
    }

    /// A newer instance with the same transactional id fenced this one: stop, do not retry.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_fenced_commit_stops() {
        let mock = MockCluster::new(1).unwrap();
        let (mut s, _) = sink(&mock).await;
        mock.request_errors(RDKafkaApiKey::EndTxn, &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_PRODUCER_FENCED]);
        s.send("m.shop.t", Some(b"k"), Some(b"v"), 0).await.unwrap();
        let (n, then) = counter();
        s.commit(&checkpoint(), then).await.unwrap();
        let e = s.finish().await.unwrap_err();
        assert_eq!(e.disposition(), Disposition::Stop, "{e}");
        assert!(matches!(e, crate::kafka::Error::Fenced(_)), "{e:?}");
        assert!(e.to_string().contains("another instance with the same source name"), "{e}");
        assert_eq!(n.load(Ordering::SeqCst), 0);
    }

    /// A coordinator that is still loading answers the commit with a retriable error a few
    /// times: the commit is retried and goes through.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_retriable_commit_error_is_retried() {
        let mock = MockCluster::new(1).unwrap();
        let (mut s, _) = sink(&mock).await;
        mock.request_errors(
            RDKafkaApiKey::EndTxn,
            &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS; 2],
        );
        s.send("m.shop.t", Some(b"k"), Some(b"v"), 0).await.unwrap();
        let (n, then) = counter();
        s.commit(&checkpoint(), then).await.unwrap();
        s.finish().await.unwrap();
        assert_eq!(n.load(Ordering::SeqCst), 1);
    }

    /// A record the broker rejects for good (not a size): the transaction cannot commit; the
    /// caller restarts from the checkpoint, and the sink can abort and start a new batch.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_abortable_failure_restarts_and_the_sink_recovers() {
        let mock = MockCluster::new(1).unwrap();
        let (mut s, _) = sink(&mock).await;
        mock.request_errors(RDKafkaApiKey::Produce, &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_INVALID_RECORD; 8]);
        s.send("m.shop.t", Some(b"k"), Some(b"v"), 0).await.unwrap();
        let (n, then) = counter();
        let r = async {
            s.commit(&checkpoint(), then).await?;
            s.finish().await
        }
        .await;
        let e = r.unwrap_err();
        assert_eq!(e.disposition(), Disposition::Restart, "{e}");
        assert_eq!(n.load(Ordering::SeqCst), 0);
        s.abort().await.unwrap();
        assert!(!s.in_transaction());
    }
}
