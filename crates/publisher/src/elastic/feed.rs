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
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use apache_avro::Schema;
use rdkafka::consumer::{CommitMode, Consumer, ConsumerContext, StreamConsumer};
use rdkafka::error::KafkaError as RdKafkaError;
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::{ClientContext, TopicPartitionList};

use super::client::{backoff, bulk_line, Elastic, ElasticError, Item};
use super::document::{action, document_id, Action, Forms};
use super::mapping::{key_fields, layout, mapping, Field, Layout};
use crate::config::{ElasticsearchSection, SinkConfig};
use crate::disposition::Disposition;
use crate::filter::{table_matches, wildcard};
use crate::kafka::KafkaContext;
use crate::metrics::SinkMetrics;
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
            SinkError::Kafka(_) => Disposition::Restart,
            SinkError::Denied(_) | SinkError::Record { .. } => Disposition::Stop,
        }
    }
}

/// The consumer's context: librdkafka's logs and errors as every Kafka client of Sluice's, and
/// its statistics for the lag in records.
pub struct SinkContext {
    inner: KafkaContext,
    lag: Arc<AtomicI64>,
}

impl ClientContext for SinkContext {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, message: &str) {
        self.inner.log(level, fac, message);
    }

    fn error(&self, error: RdKafkaError, reason: &str) {
        self.inner.error(error, reason);
    }

    fn stats(&self, statistics: rdkafka::Statistics) {
        // -1: not known yet (no committed offset or high watermark)
        let lag: i64 = statistics
            .topics
            .values()
            .flat_map(|t| t.partitions.values())
            .filter(|p| p.partition >= 0 && p.consumer_lag >= 0)
            .map(|p| p.consumer_lag)
            .sum();
        self.lag.store(lag, Ordering::Relaxed);
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
pub fn consumer(cfg: &SinkConfig) -> Result<(StreamConsumer<SinkContext>, Arc<AtomicI64>), SinkError> {
    let k = &cfg.kafka;
    let mut c = crate::kafka::client_config(k).map_err(|e| SinkError::Kafka(e.to_string()))?;
    c.set("group.id", cfg.elasticsearch.group(&k.topic_prefix))
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .set("isolation.level", "read_committed")
        .set("statistics.interval.ms", "5000")
        // memory bounded by configuration: librdkafka's defaults let a response take 50 MiB and
        // the prefetched records 64 MiB; two batches of bulk_max_bytes come on top
        .set("fetch.max.bytes", "16777216")
        .set("queued.max.messages.kbytes", "16384")
        .set("queued.min.messages", "10000");
    for (key, v) in &cfg.elasticsearch.consumer {
        c.set(key, v);
    }
    let lag = Arc::new(AtomicI64::new(0));
    let context = SinkContext { inner: KafkaContext::new(&k.brokers), lag: Arc::clone(&lag) };
    let consumer: StreamConsumer<SinkContext> =
        c.create_with_context(context).map_err(|e| SinkError::Kafka(format!("creating the consumer: {e}")))?;
    Ok((consumer, lag))
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
        lag: &AtomicI64,
        mut stop: tokio::sync::watch::Receiver<bool>,
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
            let wait = self.batch.first.map_or(TOPICS_EVERY, |t| self.es_cfg.bulk_interval.saturating_sub(t.elapsed()));
            tokio::select! {
                m = consumer.recv() => match m {
                    Ok(m) => self.record(&m).await?,
                    Err(e) => {
                        if let Some(denied) = consumer.context().inner.denied() {
                            return Err(SinkError::Denied(denied));
                        }
                        tracing::warn!(error = %e, "Kafka consumer error");
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                },
                () = tokio::time::sleep(wait) => {}
                _ = stop.wait_for(|s| *s) => {
                    self.flush(consumer, lag).await?;
                    self.settle(consumer, lag).await?;
                    return Ok(());
                }
            }
            if self.batch.due(self.es_cfg) {
                self.flush(consumer, lag).await?;
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
        }
        consumer.incremental_assign(&start).map_err(|e| SinkError::Kafka(format!("assigning partitions: {e}")))?;
        tracing::debug!(partitions = start.count(), "Assigned partitions");
        Ok(())
    }

    /// One record into the batch.
    async fn record(&mut self, m: &BorrowedMessage<'_>) -> Result<(), SinkError> {
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
        let doc = match act {
            Action::Index(doc) => Some(serde_json::to_vec(&doc).map_err(|e| at(e.to_string()))?),
            Action::Delete => None,
        };
        self.batch.push(index, id, offset, doc);
        self.batch.consumed(topic, partition, offset, timestamp);
        Ok(())
    }

    /// Where a topic's documents go: None for a topic that is not a synced table.
    fn table_of(&self, topic: &str) -> Result<Option<Table>, String> {
        let Some((db, table)) = topic.strip_prefix(&format!("{}.", self.prefix)).and_then(|r| r.split_once('.')) else {
            return Ok(None);
        };
        let es = self.es_cfg;
        let included = es.include.is_empty() || es.include.iter().any(|p| table_matches(p, db, table));
        if !included || es.exclude.iter().any(|p| table_matches(p, db, table)) {
            return Ok(None);
        }
        let pattern = es.indices.get(&format!("{db}.{table}")).unwrap_or(&es.index);
        let index = pattern.replace("{topic}", topic).replace("{db}", db).replace("{table}", table).to_lowercase();
        if index.is_empty() || index.starts_with(['-', '_', '+']) || index == "." || index == ".." || index.len() > 255
        {
            return Err(format!(
                "{index:?} is not an index name Elasticsearch accepts (from elasticsearch.index = {:?})",
                es.index
            ));
        }
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
        let id = schema_id(framed)?;
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

    /// Gives the table's index the mapping of this value schema's columns, once per schema id.
    async fn ensure_mapping(&mut self, topic: &str, schema_id: u32, layout: &Layout) -> Result<(), SinkError> {
        let Some(Some(table)) = self.tables.get(topic) else { return Ok(()) };
        if table.mapped.contains(&schema_id) {
            return Ok(());
        }
        let index = table.index.clone();
        let wanted = mapping(layout, self.es_cfg);
        let mut attempt = 0;
        let added = loop {
            match self.es.ensure_mapping(&index, &wanted).await {
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
    async fn flush(&mut self, consumer: &StreamConsumer<SinkContext>, lag: &AtomicI64) -> Result<(), SinkError> {
        let batch = std::mem::take(&mut self.batch);
        self.settle(consumer, lag).await?;
        if batch.offsets.is_empty() {
            return Ok(());
        }
        tracing::debug!(actions = batch.live, offsets = batch.offsets.len(), "Sending a batch");
        self.in_flight = Some(tokio::spawn(send(self.es.clone(), Arc::clone(&self.metrics), batch)));
        Ok(())
    }

    /// Waits for the bulk request in flight, then commits its batch's offsets.
    async fn settle(&mut self, consumer: &StreamConsumer<SinkContext>, lag: &AtomicI64) -> Result<(), SinkError> {
        let Some(handle) = self.in_flight.take() else { return Ok(()) };
        let batch = handle.await.map_err(|e| SinkError::Kafka(format!("the bulk request's task failed: {e}")))??;
        self.commit(consumer, &batch.offsets)?;
        let age = batch.last_timestamp_ms.map_or(0, |t| (crate::process::now_ms() - t) / 1000);
        self.metrics.lag(lag.load(Ordering::Relaxed), age);
        Ok(())
    }

    /// Commits the offsets after a batch Elasticsearch has applied. A failed commit (a
    /// rebalance took the partition away) loses nothing: the records come again, and their
    /// versions make that a no-op.
    fn commit(
        &self,
        consumer: &StreamConsumer<SinkContext>,
        offsets: &HashMap<(String, i32), i64>,
    ) -> Result<(), SinkError> {
        if offsets.is_empty() {
            return Ok(());
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
        }
        Ok(())
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

/// The schema id of a Confluent-framed datum (magic byte 0, then the id, big-endian).
fn schema_id(framed: &[u8]) -> Result<u32, String> {
    match framed {
        [0, a, b, c, d, ..] => Ok(u32::from_be_bytes([*a, *b, *c, *d])),
        _ => Err("not in the Confluent wire format (magic byte 0 and a schema id)".into()),
    }
}

fn decode(schema: &Schema, framed: &[u8]) -> Result<apache_avro::types::Value, String> {
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

    #[test]
    fn framing() {
        assert_eq!(schema_id(&[0, 0, 0, 1, 2, 9]), Ok(258));
        assert!(schema_id(&[1, 0, 0, 0, 1]).is_err());
        assert!(schema_id(&[0, 0]).is_err());
    }
}
