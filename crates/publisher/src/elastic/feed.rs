//! The sink's loop: **where a topic's records become bulk requests**. Records come from a
//! read_committed consumer of the table topics, are decoded with their registered schemas, turn into
//! actions ([`super::document`]) and gather into a batch; a batch is sent as one `_bulk`
//! request at `bulk_max_actions`, `bulk_max_bytes` or `bulk_interval`, and only once every item
//! of it is through (applied, or a version conflict) are the batch's offsets committed. So a
//! crash repeats at most the batches after the last commit, and repeating them changes nothing:
//! every action carries its record's offset as the document's external version.
//!
//! Before the first document of a table version (a value schema id), the index gets the
//! mapping of that version's columns ([`super::mapping`]): created, or extended by new columns.
//!
//! The sink assigns itself every partition of the synced tables' topics (looked up again every
//! [`TOPICS_EVERY`], so tables added later are picked up) and starts each at the consumer
//! group's committed offset: no group membership, no rebalances. So one instance applies a
//! group's tables (two would apply everything twice, harmlessly but for nothing: split tables
//! with `include`/`exclude` and a `group_id` each to spread the work). The offsets are committed
//! to the group, where Kafka's tools show them and the lag.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use apache_avro::Schema;
use rdkafka::consumer::{CommitMode, Consumer, ConsumerContext, StreamConsumer};
use rdkafka::error::KafkaError as RdKafkaError;
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::{ClientContext, TopicPartitionList};

use super::client::{backoff, bulk_line, external_version, version_parts, Elastic, ElasticError, Item, PARTITIONS_MAX};
use super::document::{action, document_id, Action, Forms};
use super::mapping::{key_fields, layout, mapping, Field, Layout};
use crate::config::{ElasticsearchSection, SinkConfig};
use crate::disposition::Disposition;
use crate::filter::{table_matches, wildcard};
use crate::kafka::KafkaContext;
use crate::metrics::SinkMetrics;
use crate::process::Shutdown;
use crate::registry::{RegistryClient, RegistryError};

/// How often the topics are looked up for tables added since.
pub const TOPICS_EVERY: Duration = Duration::from_secs(30);

/// Why the sink stopped or restarts.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SinkError {
    /// Elasticsearch.
    #[error(transparent)]
    Elastic(Box<ElasticError>),
    /// The registry (a record's schema).
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// The Kafka consumer.
    #[error("Kafka: {0}")]
    Kafka(String),
    /// The Kafka brokers refused the consumer's credentials or TLS handshake.
    #[error("{0}")]
    Denied(String),
    /// Partitions with records waiting that the consumer stopped reading: restarted.
    #[error("partitions stalled with records waiting: {0}")]
    Stalled(String),
    /// A record the sink cannot apply, named by its place.
    #[error("{topic} partition {partition} offset {offset}: {what}")]
    Record {
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// The offset.
        offset: i64,
        /// What is wrong and what to do.
        what: String,
    },
}

impl From<ElasticError> for SinkError {
    fn from(e: ElasticError) -> Self {
        SinkError::Elastic(Box::new(e))
    }
}

impl SinkError {
    /// What happens next: a cluster or registry away restarts from the committed offsets; a
    /// record or a mapping Elasticsearch refuses stops (an operator must act).
    pub fn disposition(&self) -> Disposition {
        match self {
            SinkError::Elastic(e) => match e.disposition() {
                Disposition::Stop => Disposition::Stop,
                _ => Disposition::Restart,
            },
            SinkError::Registry(e) => e.disposition(),
            SinkError::Kafka(_) | SinkError::Stalled(_) => Disposition::Restart,
            SinkError::Denied(_) | SinkError::Record { .. } => Disposition::Stop,
        }
    }
}

/// Each partition's last stable offset (the end a read_committed consumer reads to), from
/// librdkafka's statistics; a partition not fetched yet is absent.
pub type Ends = Arc<Mutex<HashMap<(String, i32), i64>>>;

/// The consumer's context: librdkafka's logs and errors as every Kafka client of Sluice's, and
/// its statistics for the partitions' ends.
pub struct SinkContext {
    inner: KafkaContext,
    ends: Ends,
}

impl ClientContext for SinkContext {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, message: &str) {
        self.inner.log(level, fac, message);
    }

    fn error(&self, error: RdKafkaError, reason: &str) {
        self.inner.error(error, reason);
    }

    fn stats(&self, statistics: rdkafka::Statistics) {
        let mut ends = self.ends.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for (topic, t) in &statistics.topics {
            // -1: not known yet (the partition was not fetched)
            for p in t.partitions.values().filter(|p| p.partition >= 0 && p.ls_offset >= 0) {
                ends.insert((topic.clone(), p.partition), p.ls_offset);
            }
        }
    }
}

impl ConsumerContext for SinkContext {}

/// One table's place in Elasticsearch.
struct Table {
    index: String,
    db: String,
    table: String,
    /// Value schema ids whose columns the index's mapping has.
    mapped: HashSet<u32>,
    keyless_warned: bool,
}

/// A registered schema, parsed, with what the sink reads off it.
enum Decoder {
    Key(Schema, Vec<Field>),
    Value(Schema, Layout),
}

/// One action waiting in the batch.
struct Entry {
    index: Arc<str>,
    id: String,
    version: i64,
    doc: Option<Vec<u8>>,
    /// False once a later record of the same document replaced it in the batch.
    live: bool,
}

/// The actions of the next bulk request, and the offsets they take the group to.
#[derive(Default)]
struct Batch {
    entries: Vec<Entry>,
    by_doc: HashMap<(Arc<str>, String), usize>,
    live: usize,
    bytes: usize,
    first: Option<Instant>,
    offsets: HashMap<(String, i32), i64>,
    last_timestamp_ms: Option<i64>,
}

impl Batch {
    fn push(&mut self, index: Arc<str>, id: String, version: i64, doc: Option<Vec<u8>>) {
        // a later record of the same document supersedes the earlier one in this batch
        if let Some(&i) = self.by_doc.get(&(Arc::clone(&index), id.clone())) {
            if let Some(e) = self.entries.get_mut(i) {
                if e.live {
                    e.live = false;
                    self.live -= 1;
                }
            }
        }
        self.bytes += doc.as_ref().map_or(0, Vec::len) + id.len() + index.len() + 80;
        self.by_doc.insert((Arc::clone(&index), id.clone()), self.entries.len());
        self.entries.push(Entry { index, id, version, doc, live: true });
        self.live += 1;
        self.first.get_or_insert_with(Instant::now);
    }

    /// The record at (`topic`, `partition`, `offset`) is in (or needs nothing).
    fn consumed(&mut self, topic: &str, partition: i32, offset: i64, timestamp_ms: Option<i64>) {
        self.offsets.insert((topic.to_string(), partition), offset + 1);
        self.first.get_or_insert_with(Instant::now);
        if timestamp_ms.is_some() {
            self.last_timestamp_ms = timestamp_ms;
        }
    }

    fn due(&self, es: &ElasticsearchSection) -> bool {
        self.live >= es.bulk_max_actions
            || self.bytes as u64 >= es.bulk_max_bytes
            || self.first.is_some_and(|t| t.elapsed() >= es.bulk_interval)
    }
}

/// The sink: Elasticsearch, the registry, and what it knows of the tables.
pub struct Feed<'c> {
    es_cfg: &'c ElasticsearchSection,
    prefix: String,
    es: Elastic,
    registry: RegistryClient,
    metrics: Arc<SinkMetrics>,
    forms: Forms,
    tables: HashMap<String, Option<Table>>,
    decoders: HashMap<u32, Arc<Decoder>>,
    batch: Batch,
    /// The bulk request of the batch before, while it runs.
    in_flight: Option<tokio::task::JoinHandle<Result<Batch, SinkError>>>,
    /// Every assigned partition: its index, committed offset and whether it moves.
    parts: HashMap<(String, i32), Part>,
    /// When the partitions were last checked ([`CHECK_EVERY`]).
    checked: Instant,
}

/// How often the partitions' lag and progress are checked.
pub const CHECK_EVERY: Duration = Duration::from_secs(10);

/// One assigned partition, as the sink follows it.
#[derive(Debug)]
struct Part {
    /// The index its records go to.
    index: Arc<str>,
    /// The offset committed to the group (where a restart resumes).
    committed: i64,
    /// The consumer's position at the last check.
    seen: i64,
    /// Consecutive checks that found records waiting and the position where it was.
    still: u32,
}

impl Drop for Feed<'_> {
    fn drop(&mut self) {
        // a batch whose offsets will not be committed: its records come again after the restart
        if let Some(h) = self.in_flight.take() {
            h.abort();
        }
    }
}

/// The consumer group's consumer of the table topics.
///
/// # Errors
/// A consumer librdkafka refuses to create (a bad property).
pub fn consumer(cfg: &SinkConfig) -> Result<(StreamConsumer<SinkContext>, Ends), SinkError> {
    let k = &cfg.kafka;
    // memory bounded by configuration: librdkafka's defaults let a response take 50 MiB and
    // the prefetched records 64 MiB; two batches of bulk_max_bytes come on top (a larger
    // message.max.bytes raises the fetch to hold one record)
    let mut c = crate::kafka::consumer_config(k, Some(16 << 20)).map_err(|e| SinkError::Kafka(e.to_string()))?;
    c.set("group.id", cfg.elasticsearch.group(&k.topic_prefix))
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .set("isolation.level", "read_committed")
        .set("statistics.interval.ms", "5000")
        .set("queued.max.messages.kbytes", "16384")
        .set("queued.min.messages", "10000")
        // with the queue bounded, librdkafka waits this long before fetching again once it is
        // full (1 s by default): a sink that empties it sooner would idle for the rest
        .set("fetch.queue.backoff.ms", "10");
    for (key, v) in &cfg.elasticsearch.consumer {
        c.set(key, v);
    }
    let ends = Ends::default();
    let context = SinkContext { inner: KafkaContext::new(&k.brokers), ends: Arc::clone(&ends) };
    let consumer: StreamConsumer<SinkContext> =
        c.create_with_context(context).map_err(|e| SinkError::Kafka(format!("creating the consumer: {e}")))?;
    Ok((consumer, ends))
}

impl<'c> Feed<'c> {
    /// A sink over `cfg`.
    ///
    /// # Errors
    /// A client that cannot be set up.
    pub fn new(
        cfg: &'c SinkConfig,
        registry: RegistryClient,
        metrics: Arc<SinkMetrics>,
    ) -> Result<Feed<'c>, SinkError> {
        let es_cfg = &cfg.elasticsearch;
        Ok(Feed {
            es_cfg,
            prefix: cfg.kafka.topic_prefix.clone(),
            es: Elastic::new(es_cfg)?,
            registry,
            metrics,
            forms: Forms { time: es_cfg.time, json: es_cfg.json },
            tables: HashMap::new(),
            decoders: HashMap::new(),
            batch: Batch::default(),
            in_flight: None,
            parts: HashMap::new(),
            checked: Instant::now(),
        })
    }

    /// The cluster's name and version (a first request, so that a wrong URL or password shows
    /// before anything is consumed).
    ///
    /// # Errors
    /// As every request.
    pub async fn hello(&self) -> Result<String, SinkError> {
        Ok(self.es.info().await?)
    }

    /// Applies records until `stop` says so (then the batch is sent and committed) or an error.
    ///
    /// # Errors
    /// See [`SinkError`]; nothing is committed past what Elasticsearch has applied.
    pub async fn run(
        &mut self,
        consumer: &StreamConsumer<SinkContext>,
        ends: &Ends,
        stop: &Shutdown,
    ) -> Result<(), SinkError> {
        let mut progress = Instant::now();
        let mut assigned: HashSet<(String, i32)> = HashSet::new();
        self.assign_new(consumer, &mut assigned)?;
        let mut topics_checked = Instant::now();
        loop {
            if topics_checked.elapsed() >= TOPICS_EVERY {
                topics_checked = Instant::now();
                self.assign_new(consumer, &mut assigned)?;
            }
            let wait = self
                .batch
                .first
                .map_or(CHECK_EVERY, |t| self.es_cfg.bulk_interval.saturating_sub(t.elapsed()))
                .min(CHECK_EVERY);
            if self.checked.elapsed() >= CHECK_EVERY {
                self.checked = Instant::now();
                self.watch(consumer, ends)?;
            }
            tokio::select! {
                m = consumer.recv() => match m {
                    Ok(m) => self.record(consumer, &m).await?,
                    Err(e) => {
                        if let Some(denied) = consumer.context().inner.denied() {
                            return Err(SinkError::Denied(denied));
                        }
                        tracing::warn!(error = %e, "Kafka consumer error");
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                },
                () = tokio::time::sleep(wait) => {}
                () = stop.requested() => {
                    self.flush(consumer).await?;
                    self.settle(consumer).await?;
                    return Ok(());
                }
            }
            if self.batch.due(self.es_cfg) {
                self.flush(consumer).await?;
            }
            if progress.elapsed() >= crate::metrics::PROGRESS_EVERY {
                progress = Instant::now();
                let (indexed, deleted, conflicts, skipped) = self.metrics.totals();
                tracing::info!(
                    indexed,
                    deleted,
                    conflicts,
                    skipped,
                    lag_records = self.metrics.lag_records(),
                    "Applied {indexed} documents and {deleted} deletes ({conflicts} version conflicts, {skipped} \
                     records skipped); {} records wait",
                    self.metrics.lag_records()
                );
            }
        }
    }

    /// Assigns the partitions of synced tables' topics not assigned yet, each from the group's
    /// committed offset (the beginning when it has none).
    fn assign_new(
        &mut self,
        consumer: &StreamConsumer<SinkContext>,
        assigned: &mut HashSet<(String, i32)>,
    ) -> Result<(), SinkError> {
        let md = tokio::task::block_in_place(|| consumer.fetch_metadata(None, Duration::from_secs(10)));
        let md = match md {
            Ok(md) => md,
            Err(e) => {
                if let Some(denied) = consumer.context().inner.denied() {
                    return Err(SinkError::Denied(denied));
                }
                return Err(SinkError::Kafka(format!("listing the topics: {e}")));
            }
        };
        let mut new = TopicPartitionList::new();
        for t in md.topics() {
            let name = t.name();
            if t.error().is_some() {
                continue;
            }
            if !self.tables.contains_key(name) {
                let table = self.table_of(name).map_err(|what| SinkError::Kafka(format!("topic {name}: {what}")))?;
                self.tables.insert(name.to_string(), table);
            }
            if !matches!(self.tables.get(name), Some(Some(_))) {
                continue;
            }
            for p in t.partitions() {
                if !assigned.contains(&(name.to_string(), p.id())) {
                    new.add_partition(name, p.id());
                }
            }
        }
        if new.count() == 0 {
            return Ok(());
        }
        let committed = tokio::task::block_in_place(|| consumer.committed_offsets(new, Duration::from_secs(10)))
            .map_err(|e| SinkError::Kafka(format!("reading the group's committed offsets: {e}")))?;
        let mut start = TopicPartitionList::new();
        for e in committed.elements() {
            let offset = match e.offset() {
                rdkafka::Offset::Offset(o) => rdkafka::Offset::Offset(o),
                _ => rdkafka::Offset::Beginning,
            };
            start
                .add_partition_offset(e.topic(), e.partition(), offset)
                .map_err(|err| SinkError::Kafka(format!("{}: {err}", e.topic())))?;
            assigned.insert((e.topic().to_string(), e.partition()));
            if i64::from(e.partition()) >= PARTITIONS_MAX {
                return Err(SinkError::Kafka(format!(
                    "topic {} has a partition {}: the sink keeps documents' versions for partitions below \
                     {PARTITIONS_MAX}",
                    e.topic(),
                    e.partition()
                )));
            }
            let index = self.tables.get(e.topic()).and_then(Option::as_ref).map_or("", |t| t.index.as_str());
            let committed = match offset {
                rdkafka::Offset::Offset(o) => o,
                _ => 0,
            };
            self.parts.insert(
                (e.topic().to_string(), e.partition()),
                Part { index: Arc::from(index), committed, seen: committed, still: 0 },
            );
        }
        consumer.incremental_assign(&start).map_err(|e| SinkError::Kafka(format!("assigning partitions: {e}")))?;
        tracing::debug!(partitions = start.count(), "Assigned partitions");
        Ok(())
    }

    /// One record into the batch (a truncate record is applied at once, after the batch).
    async fn record(
        &mut self,
        consumer: &StreamConsumer<SinkContext>,
        m: &BorrowedMessage<'_>,
    ) -> Result<(), SinkError> {
        let (topic, partition, offset) = (m.topic(), m.partition(), m.offset());
        let timestamp = m.timestamp().to_millis();
        tracing::trace!(topic, partition, offset, "Record");
        let at = |what: String| SinkError::Record { topic: topic.to_string(), partition, offset, what };
        if !self.tables.contains_key(topic) {
            let t = self.table_of(topic).map_err(at)?;
            self.tables.insert(topic.to_string(), t);
        }
        let Some(Some(table)) = self.tables.get(topic) else {
            // not a synced table (excluded, or one of Sluice's own topics)
            self.batch.consumed(topic, partition, offset, timestamp);
            return Ok(());
        };
        let index: Arc<str> = Arc::from(table.index.as_str());
        let (db, tb) = (table.db.clone(), table.table.clone());
        let act = match m.payload() {
            None => Action::Delete,
            Some(payload) => {
                let schema_id = schema_id(payload).map_err(|e| at(format!("the value: {e}")))?;
                let decoder = self.decoder(payload, &db, &tb).await.map_err(|e| at(format!("the value: {e}")))?;
                let Decoder::Value(schema, layout) = decoder.as_ref() else {
                    return Err(at("the value's schema is a key schema".into()));
                };
                self.ensure_mapping(topic, schema_id, layout).await?;
                let value = decode(schema, payload).map_err(|e| at(format!("the value does not decode: {e}")))?;
                action(Some(&value), layout, self.forms).map_err(|e| {
                    at(format!("{e}; a value Sluice cannot put into a document stops the sink (nothing is skipped)"))
                })?
            }
        };
        if act == Action::Truncate {
            self.truncate(consumer, &index, topic, partition, offset).await?;
            self.batch.consumed(topic, partition, offset, timestamp);
            return Ok(());
        }
        let Some(key) = m.key() else {
            self.metrics.skipped(&index, "no_key");
            let t = self.tables.get_mut(topic).and_then(Option::as_mut);
            if let Some(t) = t.filter(|t| !t.keyless_warned) {
                t.keyless_warned = true;
                tracing::warn!(
                    topic,
                    index = %index,
                    "The table has no key, so its rows have no document id: its records are skipped (counted in \
                     sluice_es_skipped_total); give it key columns with [output.key_columns] in sluice run's config"
                );
            }
            self.batch.consumed(topic, partition, offset, timestamp);
            return Ok(());
        };
        let id = {
            let decoder = self.decoder(key, &db, &tb).await.map_err(|e| at(format!("the key: {e}")))?;
            let Decoder::Key(schema, fields) = decoder.as_ref() else {
                return Err(at("the key's schema is a value schema".into()));
            };
            let value = decode(schema, key).map_err(|e| at(format!("the key does not decode: {e}")))?;
            document_id(&value, fields, self.forms).map_err(|e| at(format!("the key: {e}")))?
        };
        let doc = match act {
            Action::Index(doc) => Some(serde_json::to_vec(&doc).map_err(|e| at(e.to_string()))?),
            Action::Delete | Action::Truncate => None,
        };
        let version = external_version(partition, offset)
            .ok_or_else(|| at(format!("no document version for partition {partition}, offset {offset}")))?;
        self.batch.push(index, id, version, doc);
        self.batch.consumed(topic, partition, offset, timestamp);
        Ok(())
    }

    /// Where a topic's documents go: None for a topic that is not a synced table.
    fn table_of(&self, topic: &str) -> Result<Option<Table>, String> {
        let Some((db, table)) = topic.strip_prefix(&format!("{}.", self.prefix)).and_then(|r| r.split_once('.')) else {
            return Ok(None);
        };
        let Some(index) = index_of(self.es_cfg, topic, db, table).transpose()? else { return Ok(None) };
        if let Some(other) = self.tables.iter().find_map(|(t, v)| v.as_ref().filter(|v| v.index == index).map(|_| t)) {
            return Err(format!(
                "its index {index} is also the index of topic {other} (index names are lower case): set \
                 elasticsearch.index so that each table gets its own"
            ));
        }
        tracing::info!(topic, index, "Syncing the table's topic into its index");
        Ok(Some(Table {
            index,
            db: db.to_string(),
            table: table.to_string(),
            mapped: HashSet::new(),
            keyless_warned: false,
        }))
    }

    /// The decoder of a framed datum's schema (fetched from the registry once per id); a value
    /// schema's GEOMETRY columns that `geo_point` names for `db.table` are `geo_point`s.
    async fn decoder(&mut self, framed: &[u8], db: &str, table: &str) -> Result<Arc<Decoder>, String> {
        self.decoder_of(schema_id(framed)?, db, table).await
    }

    /// [`Feed::decoder`] of schema `id`.
    async fn decoder_of(&mut self, id: u32, db: &str, table: &str) -> Result<Arc<Decoder>, String> {
        if let Some(d) = self.decoders.get(&id) {
            return Ok(Arc::clone(d));
        }
        let text = self.registry.schema_text(id).await.map_err(|e| e.to_string())?;
        let schema = Schema::parse_str(&text).map_err(|e| format!("schema {id} does not parse: {e}"))?;
        let is_value =
            matches!(&schema, Schema::Record(r) if r.fields.iter().any(|f| f.name == "op" || f.name == "__op"));
        let decoder = if is_value {
            let geo = |column: &str| {
                self.es_cfg.geo_point.iter().any(|p| {
                    p.rsplit_once('.').is_some_and(|(t, c)| table_matches(t, db, table) && wildcard(c, column))
                })
            };
            let l = layout(&schema, &geo).map_err(|e| format!("schema {id}: {e}"))?;
            Decoder::Value(schema, l)
        } else {
            let fields = key_fields(&schema).map_err(|e| format!("schema {id}: {e}"))?;
            Decoder::Key(schema, fields)
        };
        let d = Arc::new(decoder);
        self.decoders.insert(id, Arc::clone(&d));
        Ok(d)
    }

    /// The mapping of the latest value schema registered for `topic` (None: none, or this
    /// one's; a registry that cannot say is not an error here: the record's own is used).
    async fn latest_mapping(
        &mut self,
        topic: &str,
        schema_id: u32,
        db: &str,
        table: &str,
    ) -> Option<serde_json::Value> {
        let latest = match self.registry.latest(&format!("{topic}-value")).await {
            Ok(Some((id, _))) if id != schema_id => id,
            Ok(_) => return None,
            Err(e) => {
                // the record's own schema maps the index then: a reindex may stop at the change
                tracing::warn!(
                    topic,
                    error = %e,
                    "The latest schema of the topic could not be read: its new index is mapped from the records' \
                     schema instead"
                );
                return None;
            }
        };
        match self.decoder_of(latest, db, table).await.ok()?.as_ref() {
            Decoder::Value(_, layout) => Some(mapping(layout, self.es_cfg)),
            Decoder::Key(..) => None,
        }
    }

    /// Gives the table's index the mapping of this value schema's columns, once per schema id.
    /// An index created now is mapped from the table's latest schema first: a reindex replays
    /// the topic from its start, and mapped from its oldest records an INT since made BIGINT
    /// would stop it again at the change it was made for.
    async fn ensure_mapping(&mut self, topic: &str, schema_id: u32, layout: &Layout) -> Result<(), SinkError> {
        let Some(Some(table)) = self.tables.get(topic) else { return Ok(()) };
        if table.mapped.contains(&schema_id) {
            return Ok(());
        }
        let (index, first) = (table.index.clone(), table.mapped.is_empty());
        let name = format!("{}.{}", table.db, table.table);
        let (db, tbl) = (table.db.clone(), table.table.clone());
        let latest = if first { self.latest_mapping(topic, schema_id, &db, &tbl).await } else { None };
        let wanted = mapping(layout, self.es_cfg);
        let mut attempt = 0;
        let added = loop {
            match self.es.ensure_mapping(&name, &index, &wanted, latest.as_ref()).await {
                Ok(added) => break added,
                Err(e) if e.disposition() == Disposition::Retry && attempt < 5 => {
                    attempt += 1;
                    tracing::warn!(error = %e, index, "Putting the index mapping failed; retrying");
                    tokio::time::sleep(backoff(attempt)).await;
                }
                Err(e) => return Err(e.into()),
            }
        };
        if !added.is_empty() {
            tracing::info!(index, schema_id, fields = ?added, "Mapped the table's columns in its index");
        }
        if let Some(Some(t)) = self.tables.get_mut(topic) {
            t.mapped.insert(schema_id);
        }
        Ok(())
    }

    /// Hands the batch to a bulk request of its own, once the one before it is through and its
    /// offsets are committed: the next batch is read and built while Elasticsearch applies this
    /// one, and batches are applied and committed one after the other, in order.
    async fn flush(&mut self, consumer: &StreamConsumer<SinkContext>) -> Result<(), SinkError> {
        self.flush_before(consumer, None).await
    }

    /// [`Feed::flush`], committing nothing at or past `held` (`topic`, `partition`, offset): the
    /// record there is being applied (a truncate record) and must come again after a crash.
    async fn flush_before(
        &mut self,
        consumer: &StreamConsumer<SinkContext>,
        held: Option<(&str, i32, i64)>,
    ) -> Result<(), SinkError> {
        // the consumer's positions now: past the batch's records and the commit markers after
        // them (librdkafka moves the position over control records), so a partition applied
        // to its end commits its end, and its lag is 0
        if let Ok(positions) = consumer.position() {
            for e in positions.elements() {
                let (key, rdkafka::Offset::Offset(mut pos)) = ((e.topic().to_string(), e.partition()), e.offset())
                else {
                    continue;
                };
                if let Some((t, p, o)) = held.filter(|(t, p, _)| key.0 == *t && key.1 == *p) {
                    tracing::trace!(
                        topic = t,
                        partition = p,
                        offset = o,
                        "Holding the commit before the record being applied"
                    );
                    pos = pos.min(o);
                }
                let committed = self.parts.get(&key).map_or(i64::MAX, |p| p.committed);
                let at = self.batch.offsets.get(&key).copied().unwrap_or(committed);
                if pos > at {
                    self.batch.offsets.insert(key, pos);
                }
            }
        }
        let batch = std::mem::take(&mut self.batch);
        self.settle(consumer).await?;
        if batch.offsets.is_empty() {
            return Ok(());
        }
        tracing::debug!(actions = batch.live, offsets = ?batch.offsets, "Sending a batch");
        self.in_flight = Some(tokio::spawn(send(self.es.clone(), Arc::clone(&self.metrics), batch)));
        Ok(())
    }

    /// Waits for the bulk request in flight, then commits its batch's offsets.
    async fn settle(&mut self, consumer: &StreamConsumer<SinkContext>) -> Result<(), SinkError> {
        let Some(handle) = self.in_flight.take() else { return Ok(()) };
        let batch = handle.await.map_err(|e| SinkError::Kafka(format!("the bulk request's task failed: {e}")))??;
        if self.commit(consumer, &batch.offsets)? {
            for (key, next) in &batch.offsets {
                if let Some(p) = self.parts.get_mut(key) {
                    p.committed = p.committed.max(*next);
                }
            }
        }
        let age = batch.last_timestamp_ms.map_or(0, |t| (crate::process::now_ms() - t) / 1000);
        self.metrics.lag_age(age);
        Ok(())
    }

    /// Every [`CHECK_EVERY`]: each partition's lag (its end less its committed offset, by
    /// index), and whether it moves. A partition with records waiting whose position stays
    /// where it was for `elasticsearch.stall_after` is stalled: the sink says so (`/readyz`
    /// 503, a metric) and restarts its consumer. The position is checked on the sink's own
    /// time: a check that waited for a slow bulk request counts once.
    fn watch(&mut self, consumer: &StreamConsumer<SinkContext>, ends: &Ends) -> Result<(), SinkError> {
        let positions: HashMap<(String, i32), i64> = consumer
            .position()
            .map(|l| {
                l.elements()
                    .iter()
                    .filter_map(|e| match e.offset() {
                        rdkafka::Offset::Offset(o) => Some(((e.topic().to_string(), e.partition()), o)),
                        _ => None,
                    })
                    .collect()
            })
            .unwrap_or_default();
        let known = ends.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        let checks = u32::try_from(self.es_cfg.stall_after.as_secs() / CHECK_EVERY.as_secs()).unwrap_or(6).max(1);
        let mut by_index: HashMap<Arc<str>, i64> = HashMap::new();
        let mut stalled = Vec::new();
        for ((topic, partition), part) in &mut self.parts {
            // a partition never fetched has no end in the statistics: ask the broker (its high
            // watermark, which a read_committed consumer may not reach past an open transaction)
            let end = match known.get(&(topic.clone(), *partition)) {
                Some(e) => *e,
                None => tokio::task::block_in_place(|| {
                    consumer.fetch_watermarks(topic, *partition, Duration::from_secs(5)).map_or(part.committed, |w| w.1)
                }),
            };
            let position = positions.get(&(topic.clone(), *partition)).copied().unwrap_or(part.committed);
            *by_index.entry(Arc::clone(&part.index)).or_default() += (end - part.committed).max(0);
            if end > position.max(part.committed) && position == part.seen {
                part.still += 1;
            } else {
                part.still = 0;
            }
            part.seen = position;
            if position > part.committed {
                // consumed but not committed (commit markers alone make no batch): commit soon
                self.batch.first.get_or_insert_with(Instant::now);
            }
            if part.still >= checks {
                stalled.push(format!(
                    "{topic} partition {partition} at offset {position} ({} records wait)",
                    end - position
                ));
            }
        }
        self.metrics.lag(&by_index, stalled.len());
        if stalled.is_empty() {
            return Ok(());
        }
        tracing::warn!(
            partitions = %stalled.join("; "),
            "Partitions with records waiting have not moved for {:?} (elasticsearch.stall_after): restarting the \
             consumer from the committed offsets",
            self.es_cfg.stall_after
        );
        Err(SinkError::Stalled(stalled.join("; ")))
    }

    /// Applies the truncate record at `partition`/`offset` of `topic` to `index`: after every
    /// record before it is applied, the documents that partition wrote before it are deleted
    /// (found by a scroll over the ids and versions, deleted with the truncate's own version so
    /// that a document a later record wrote is kept); the table's other partitions carry
    /// truncate records of their own. Done again when the record is delivered again.
    async fn truncate(
        &mut self,
        consumer: &StreamConsumer<SinkContext>,
        index: &Arc<str>,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> Result<(), SinkError> {
        /// Deletions gathered per scroll: the scroll is opened again after each round of
        /// deletes, so no engine's paging can skip a document.
        const ROUND: usize = 50_000;
        self.flush_before(consumer, Some((topic, partition, offset))).await?;
        self.settle(consumer).await?;
        let cut = external_version(partition, offset).ok_or_else(|| SinkError::Record {
            topic: topic.to_string(),
            partition,
            offset,
            what: "no document version for this partition and offset".into(),
        })?;
        let mut deleted = 0usize;
        loop {
            let mut doomed = Vec::new();
            let mut scroll = self.es.scan(index, 1000, false).await?;
            loop {
                let page = self.es.next_page(&mut scroll).await?;
                if page.is_empty() {
                    break;
                }
                doomed.extend(
                    page.into_iter()
                        .filter(|h| version_parts(h.version).0 == partition && h.version < cut)
                        .map(|h| h.id),
                );
                if doomed.len() >= ROUND {
                    break;
                }
            }
            if doomed.is_empty() {
                break;
            }
            let n = doomed.len();
            let mut b = Batch::default();
            for id in doomed {
                b.push(Arc::clone(index), id, cut, None);
            }
            send(self.es.clone(), Arc::clone(&self.metrics), b).await?;
            deleted += n;
            if n < ROUND {
                break;
            }
        }
        tracing::info!(
            topic,
            partition,
            offset,
            index = %index,
            deleted,
            "Applied a truncate record: the documents this partition wrote before it are deleted"
        );
        Ok(())
    }

    /// Commits the offsets after a batch Elasticsearch has applied. A failed commit (a
    /// rebalance took the partition away) loses nothing: the records come again, and their
    /// versions make that a no-op.
    fn commit(
        &self,
        consumer: &StreamConsumer<SinkContext>,
        offsets: &HashMap<(String, i32), i64>,
    ) -> Result<bool, SinkError> {
        if offsets.is_empty() {
            return Ok(false);
        }
        let mut tpl = TopicPartitionList::new();
        for ((topic, partition), next) in offsets {
            tpl.add_partition_offset(topic, *partition, rdkafka::Offset::Offset(*next))
                .map_err(|e| SinkError::Kafka(format!("offsets: {e}")))?;
        }
        let result = tokio::task::block_in_place(|| consumer.commit(&tpl, CommitMode::Sync));
        if let Err(e) = result {
            tracing::warn!(error = %e, "Committing the consumer offsets failed; the records after the last commit will \
                be applied again (their versions make that harmless)");
            return Ok(false);
        }
        Ok(true)
    }
}

/// Sends a batch's actions (retrying what may pass: 429 and 5xx items and answers, an
/// unreachable cluster); the batch back, for its offsets, once every item is through.
async fn send(es: Elastic, metrics: Arc<SinkMetrics>, batch: Batch) -> Result<Batch, SinkError> {
    let mut pending: Vec<&Entry> = batch.entries.iter().filter(|e| e.live).collect();
    let mut attempt = 0u32;
    while !pending.is_empty() {
        let mut body = Vec::with_capacity(batch.bytes);
        for e in &pending {
            bulk_line(&mut body, &e.index, &e.id, e.version, e.doc.as_deref());
        }
        let started = Instant::now();
        match es.bulk(body, pending.len()).await {
            Ok(items) => {
                metrics.set_ready(true);
                let mut by_index: HashMap<&str, (u64, u64, u64)> = HashMap::new();
                let mut again = Vec::new();
                for (e, item) in pending.iter().zip(&items) {
                    let c = by_index.entry(&e.index).or_default();
                    match item {
                        Item::Indexed => c.0 += 1,
                        Item::Deleted => c.1 += 1,
                        Item::Conflict => c.2 += 1,
                        Item::Retry => again.push(*e),
                    }
                }
                for (index, (indexed, deleted, conflicts)) in by_index {
                    metrics.applied(index, indexed, deleted, conflicts);
                }
                if again.is_empty() {
                    metrics.bulk("ok", started.elapsed().as_secs_f64());
                } else {
                    metrics.bulk("retried", started.elapsed().as_secs_f64());
                    tracing::warn!(items = again.len(), "Elasticsearch asked to send some documents again (429/5xx)");
                    attempt += 1;
                    tokio::time::sleep(backoff(attempt)).await;
                }
                pending = again;
            }
            Err(e) if e.disposition() == Disposition::Retry => {
                metrics.bulk("retried", started.elapsed().as_secs_f64());
                metrics.set_ready(false);
                attempt += 1;
                let wait = backoff(attempt);
                tracing::warn!(error = %e, wait = ?wait, "The bulk request failed; sending it again");
                tokio::time::sleep(wait).await;
            }
            Err(e) => {
                metrics.bulk("failed", started.elapsed().as_secs_f64());
                return Err(e.into());
            }
        }
    }
    drop(pending);
    Ok(batch)
}

/// The index of table `db.table` (its topic `topic`): None when `[elasticsearch]` include and
/// exclude leave the table out.
///
/// # Errors
/// A name Elasticsearch refuses.
pub(crate) fn index_of(
    es: &ElasticsearchSection,
    topic: &str,
    db: &str,
    table: &str,
) -> Option<Result<String, String>> {
    let included = es.include.is_empty() || es.include.iter().any(|p| table_matches(p, db, table));
    if !included || es.exclude.iter().any(|p| table_matches(p, db, table)) {
        return None;
    }
    let pattern = es.indices.get(&format!("{db}.{table}")).unwrap_or(&es.index);
    let index = pattern.replace("{topic}", topic).replace("{db}", db).replace("{table}", table).to_lowercase();
    if index.is_empty() || index.starts_with(['-', '_', '+']) || index == "." || index == ".." || index.len() > 255 {
        return Some(Err(format!(
            "{index:?} is not an index name Elasticsearch accepts (from elasticsearch.index = {:?})",
            es.index
        )));
    }
    Some(Ok(index))
}

/// The schema id of a Confluent-framed datum (magic byte 0, then the id, big-endian).
pub(crate) fn schema_id(framed: &[u8]) -> Result<u32, String> {
    match framed {
        [0, a, b, c, d, ..] => Ok(u32::from_be_bytes([*a, *b, *c, *d])),
        _ => Err("not in the Confluent wire format (magic byte 0 and a schema id)".into()),
    }
}

/// A Confluent-framed datum decoded with its writer's schema (nothing may be left over).
pub(crate) fn decode(schema: &Schema, framed: &[u8]) -> Result<apache_avro::types::Value, String> {
    let mut datum = framed.get(5..).unwrap_or_default();
    let v = apache_avro::from_avro_datum(schema, &mut datum, None).map_err(|e| e.to_string())?;
    if !datum.is_empty() {
        return Err(format!("{} bytes left after the datum", datum.len()));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_later_record_of_a_document_supersedes_it_in_the_batch() {
        let mut b = Batch::default();
        let ix: Arc<str> = Arc::from("i");
        b.push(Arc::clone(&ix), "1".into(), 10, Some(b"{}".to_vec()));
        b.push(Arc::clone(&ix), "2".into(), 11, Some(b"{}".to_vec()));
        b.push(Arc::clone(&ix), "1".into(), 12, None);
        let live: Vec<(&str, i64, bool)> =
            b.entries.iter().filter(|e| e.live).map(|e| (e.id.as_str(), e.version, e.doc.is_some())).collect();
        assert_eq!(live, [("2", 11, true), ("1", 12, false)]);
        assert_eq!(b.live, 2);
        b.consumed("t", 0, 12, Some(5));
        b.consumed("t", 0, 13, None);
        assert_eq!(b.offsets[&("t".to_string(), 0)], 14);
        assert_eq!(b.last_timestamp_ms, Some(5));
    }

    /// The sink's own lag and stall watch, over librdkafka's mock cluster (a mock because it
    /// holds a partition's records back on demand: no real broker here can make a consumer
    /// stop fetching one partition; the end-to-end lag and truncate behaviour is tested against
    /// the real broker and both Elasticsearch-API engines in tests/it/sink/elasticsearch.rs). A
    /// partition whose records wait while its position stays is stalled (a restart, `/readyz`
    /// 503); once records are taken from it, it is not.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_partition_that_does_not_move_is_stalled() {
        use crate::metrics::Served;
        use rdkafka::mocking::MockCluster;
        use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
        let mock: MockCluster<'_, DefaultProducerContext> = MockCluster::new(1).unwrap();
        mock.create_topic("p.shop.t", 2, 1).unwrap();
        let producer: ThreadedProducer<DefaultProducerContext> =
            rdkafka::ClientConfig::new().set("bootstrap.servers", mock.bootstrap_servers()).create().unwrap();
        for i in 0..10 {
            producer
                .send(BaseRecord::<str, str>::to("p.shop.t").partition(1).key("k").payload(&i.to_string()))
                .unwrap();
        }
        producer.flush(Duration::from_secs(5)).unwrap();
        let text = format!(
            "[kafka]\nbrokers = \"{}\"\ntopic_prefix = \"p\"\n[registry]\nurl = \"http://127.0.0.1:9\"\n\
             [elasticsearch]\nurl = \"http://127.0.0.1:9\"\nstall_after = \"10s\"\n",
            mock.bootstrap_servers()
        );
        let cfg = SinkConfig::parse(&text, std::path::Path::new("t.toml"), std::iter::empty()).unwrap();
        let metrics = Arc::new(SinkMetrics::new("g"));
        metrics.set_ready(true);
        let registry = RegistryClient::new(&cfg.registry).unwrap();
        let mut feed = Feed::new(&cfg, registry, Arc::clone(&metrics)).unwrap();
        let (consumer, ends) = consumer(&cfg).unwrap();
        let mut assigned = HashSet::new();
        feed.assign_new(&consumer, &mut assigned).unwrap();
        assert_eq!(assigned.len(), 2);
        // nothing taken from the consumer yet: partition 1's ten records wait where they were
        let e = feed.watch(&consumer, &ends).unwrap_err();
        assert!(
            matches!(&e, SinkError::Stalled(p) if p.contains("p.shop.t partition 1 at offset 0 (10 records wait)")),
            "{e}"
        );
        assert_eq!(e.disposition(), Disposition::Restart);
        assert_eq!((metrics.lag_records(), metrics.stalled()), (10, 1));
        assert!(!metrics.is_ready(), "a stalled partition is not ready");
        // records taken: it moves, so it is not stalled, and its lag counts what is not committed
        for _ in 0..4 {
            tokio::time::timeout(Duration::from_secs(10), consumer.recv()).await.unwrap().unwrap();
        }
        feed.watch(&consumer, &ends).unwrap();
        assert_eq!((metrics.lag_records(), metrics.stalled()), (10, 0));
        assert!(metrics.is_ready());
    }

    #[test]
    fn framing() {
        assert_eq!(schema_id(&[0, 0, 0, 1, 2, 9]), Ok(258));
        assert!(schema_id(&[1, 0, 0, 0, 1]).is_err());
        assert!(schema_id(&[0, 0]).is_err());
    }
}
