//! **A table's topic replayed**: a `read_committed` read of every partition from its start to
//! a noted end, each record decoded with the schema it was written with and applied per key
//! (last record wins, a delete or tombstone removes the key, a truncate record removes every
//! key its partition held), into a map of key digest to row digest. Then the same read of the
//! records after that end (the re-check of suspect keys), and a fetch of one record by offset
//! (the values of a difference to print).
//!
//! Records of other tables in the topic (a `[[routes]]` entry sending several tables to one
//! topic) are told apart by their schema's namespace and skipped. The reads block (librdkafka's
//! consumer); the caller runs them on the blocking pool.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use apache_avro::Schema;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError as RdKafkaError;
use rdkafka::{Message, Offset, TopicPartitionList};

use super::normal::{id_digest, BuildDigest, Change, Digest, Doc, Need, Normalizer, Writer};
use super::VerifyError;
use crate::config::KafkaSection;
use crate::elastic::feed::{decode, schema_id};
use crate::elastic::mapping::{key_fields, layout, Field};
use crate::kafka::{consumer_config, KafkaContext};
use crate::registry::RegistryClient;
use xxhash_rust::xxh3::xxh3_128;

/// The end offsets read up to, by partition.
pub(crate) type Ends = Vec<(i32, i64)>;

/// Where a key's state came from, and what it is.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Entry {
    /// The digest of the row: of its bytes, or (`json`) of its normal form.
    pub digest: Digest,
    /// The digest is of the normal form ([`super::normal::Doc::digest`]): the record was
    /// written with another version of the table's schema, or the target is an index.
    pub json: bool,
    /// The set of columns its record lacks, numbered by [`Normalizer::lack_id`] (0: none).
    pub lacks: u16,
    /// The partition of its last record.
    pub partition: i32,
    /// The offset of its last record.
    pub offset: i64,
}

impl Entry {
    /// The entry of a target's state in the normal form (a record of another schema version, or
    /// a document), its lacking columns numbered by `norm`.
    pub(crate) fn of_doc(doc: &Doc, norm: &Normalizer, partition: i32, offset: i64) -> Entry {
        Entry { digest: doc.digest(), json: true, lacks: norm.lack_id(&doc.lacks), partition, offset }
    }
}

/// A decoded record: whose, what it does, its key's SQL literals (to read the row again), where
/// it is.
pub(crate) struct Record {
    /// The key's identity ([`Read::by_id`]); 0 for a truncate record.
    pub identity: Digest,
    /// The key's document id, when the record was decoded.
    pub id: Option<String>,
    pub change: Change,
    pub key_literals: Option<Vec<String>>,
    pub partition: i32,
    pub offset: i64,
}

enum ValueWriter {
    /// A schema of the table verified (`current`: its schema of now).
    Ours { writer: Writer, current: bool },
    /// A schema of another table sharing the topic.
    Other,
}

/// A reader of one table's topic.
pub(crate) struct TopicReader {
    consumer: BaseConsumer<KafkaContext>,
    /// The topic.
    pub topic: String,
    partitions: Vec<i32>,
    decoder: Decoder,
}

/// Decodes the topic's records with their writers' schemas (from the registry, cached).
struct Decoder {
    topic: String,
    registry: Arc<RegistryClient>,
    runtime: tokio::runtime::Handle,
    keys: HashMap<u32, Arc<(Schema, Vec<Field>)>>,
    values: HashMap<u32, Arc<(Schema, ValueWriter)>>,
    geo_point: Arc<dyn Fn(&str) -> bool + Send + Sync>,
}

/// How a read identifies keys and decodes records.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Read {
    /// Keys by the digest of their document id (an index's suspects); else by the digest of
    /// their key datum's bytes.
    pub by_id: bool,
    /// Records written with the table's schema of now are digested by their bytes, not
    /// decoded ([`Change::UpsertBytes`]).
    pub bytes: bool,
    /// Each record's key is decoded for its SQL literals and id.
    pub want_key: bool,
}

/// How long a read may go without a record while it has not reached its end.
const STALL: Duration = Duration::from_secs(60);

impl TopicReader {
    /// A reader of `topic` (whose partitions it finds; none when the topic does not exist).
    ///
    /// # Errors
    /// The client cannot be made, or the brokers do not answer.
    pub(crate) fn new(
        k: &KafkaSection,
        topic: &str,
        registry: Arc<RegistryClient>,
        runtime: tokio::runtime::Handle,
        geo_point: Arc<dyn Fn(&str) -> bool + Send + Sync>,
    ) -> Result<TopicReader, VerifyError> {
        let md = crate::kafka::metadata(k, topic).map_err(VerifyError::Kafka)?;
        let partitions = md
            .topics()
            .iter()
            .filter(|t| t.name() == topic && t.error().is_none())
            .flat_map(|t| t.partitions().iter().map(rdkafka::metadata::MetadataPartition::id))
            .collect();
        let consumer = consumer_config(k, None)
            .map_err(VerifyError::Kafka)?
            .set("group.id", format!("sluice-verify-{topic}"))
            .set("enable.auto.commit", "false")
            .set("isolation.level", "read_committed")
            .set("enable.partition.eof", "false")
            // librdkafka prefetches at least 100,000 records a partition (decompressed: about
            // 300 MB for a 3-partition topic of 1 KB rows) and up to 64 MiB of fetches: the
            // memory bound is the kept keys', not the fetch queue's
            .set("queued.max.messages.kbytes", "16384")
            // and once that queue is full librdkafka waits 1 s before it fetches again, while
            // verify empties it in a fifth of that: the read took 4x as long as a plain drain
            .set("fetch.queue.backoff.ms", "5")
            .create_with_context(KafkaContext::new(&k.brokers))
            .map_err(|e| {
                VerifyError::Kafka(crate::kafka::Error::Fatal(format!("creating a reader of {topic}: {e}")))
            })?;
        let decoder = Decoder {
            topic: topic.to_string(),
            registry,
            runtime,
            keys: HashMap::new(),
            values: HashMap::new(),
            geo_point,
        };
        Ok(TopicReader { consumer, topic: topic.to_string(), partitions, decoder })
    }

    /// The first and end offsets of each partition now (the end: the last stable offset of a
    /// `read_committed` read).
    ///
    /// # Errors
    /// The brokers do not answer.
    pub(crate) fn watermarks(&self) -> Result<Vec<(i32, i64, i64)>, VerifyError> {
        self.partitions
            .iter()
            .map(|&p| {
                let (low, high) = self
                    .consumer
                    .fetch_watermarks(&self.topic, p, Duration::from_secs(10))
                    .map_err(|e| self.kafka_err(&format!("reading the offsets of partition {p}"), &e))?;
                Ok((p, low, high))
            })
            .collect()
    }

    /// The offsets consumer group `group` committed on the topic's partitions (-1: none).
    ///
    /// # Errors
    /// The brokers do not answer.
    pub(crate) fn committed(&self, k: &KafkaSection, group: &str) -> Result<Ends, VerifyError> {
        let consumer: BaseConsumer<KafkaContext> = consumer_config(k, None)
            .map_err(VerifyError::Kafka)?
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .create_with_context(KafkaContext::new(&k.brokers))
            .map_err(|e| self.kafka_err("creating a client of the sink's group", &e))?;
        let mut tpl = TopicPartitionList::new();
        for &p in &self.partitions {
            tpl.add_partition(&self.topic, p);
        }
        let got = consumer
            .committed_offsets(tpl, Duration::from_secs(10))
            .map_err(|e| self.kafka_err(&format!("reading the offsets group {group} committed"), &e))?;
        Ok(got
            .elements()
            .iter()
            .map(|e| (e.partition(), if let Offset::Offset(o) = e.offset() { o } else { -1 }))
            .collect())
    }

    fn kafka_err(&self, what: &str, e: &RdKafkaError) -> VerifyError {
        VerifyError::Kafka(crate::kafka::Error::Abortable(format!("{}: {what}: {e}", self.topic)))
    }

    /// Replays the records from `from` to `to` (by partition), giving each of the table's to
    /// `apply` in offset order per partition, read as `how` says.
    ///
    /// # Errors
    /// The brokers, the registry, or a record that does not decode (named by offset).
    pub(crate) fn scan(
        &mut self,
        norm: &Normalizer,
        range: (&Ends, &Ends),
        how: Read,
        apply: impl FnMut(Record),
    ) -> Result<(), VerifyError> {
        self.scan_only(norm, range, how, None, apply)
    }

    /// As [`TopicReader::scan`], decoding only the records at the `only` places (when given).
    fn scan_only(
        &mut self,
        norm: &Normalizer,
        (from, to): (&Ends, &Ends),
        how: Read,
        only: Option<&std::collections::HashSet<(i32, i64)>>,
        mut apply: impl FnMut(Record),
    ) -> Result<(), VerifyError> {
        let mut tpl = TopicPartitionList::new();
        let mut left: HashMap<i32, i64> = HashMap::new();
        for &(p, start) in from {
            let end = to.iter().find(|(q, _)| *q == p).map_or(start, |(_, e)| *e);
            if end > start {
                tpl.add_partition_offset(&self.topic, p, Offset::Offset(start))
                    .map_err(|e| self.kafka_err("assigning", &e))?;
                left.insert(p, end);
            }
        }
        if left.is_empty() {
            return Ok(());
        }
        self.consumer.assign(&tpl).map_err(|e| self.kafka_err("assigning", &e))?;
        // progress is timed when a poll comes back empty (a clock read per record costs)
        let (mut last_progress, mut progressed) = (Instant::now(), false);
        let mut idle = false;
        while !left.is_empty() {
            // a partition whose position reached its end (records, aborted ones and
            // transaction markers all move it) is done; asked when no record came (the
            // position is a call into librdkafka, too costly per record)
            if idle {
                if let Ok(pos) = self.consumer.position() {
                    for e in pos.elements() {
                        if let (Offset::Offset(o), Some(end)) = (e.offset(), left.get(&e.partition())) {
                            if o >= *end {
                                left.remove(&e.partition());
                            }
                        }
                    }
                }
                if left.is_empty() {
                    break;
                }
                if progressed {
                    (last_progress, progressed) = (Instant::now(), false);
                }
            }
            if idle && last_progress.elapsed() > STALL {
                let waiting: Vec<String> = left.iter().map(|(p, e)| format!("{p} (to {e})")).collect();
                return Err(VerifyError::Kafka(crate::kafka::Error::Abortable(format!(
                    "{}: the read of partitions {} made no progress for 60 s (an open transaction holding the \
                     last stable offset, or brokers away)",
                    self.topic,
                    waiting.join(", ")
                ))));
            }
            let polled = self.consumer.poll(Duration::from_millis(100));
            // brokers away for a moment count as an idle poll: the stall check above says when
            // to give up on them
            let passing = matches!(&polled, Some(Err(e)) if crate::kafka::is_passing(e))
                && self.consumer.context().denied().is_none();
            idle = polled.is_none() || passing;
            match polled {
                None => {}
                Some(Err(RdKafkaError::PartitionEOF(_))) => {}
                Some(Err(_)) if passing => {}
                Some(Err(e)) => return Err(self.kafka_err("reading", &e)),
                Some(Ok(m)) => {
                    progressed = true;
                    let (p, o) = (m.partition(), m.offset());
                    let Some(&end) = left.get(&p) else { continue };
                    if o >= end {
                        left.remove(&p);
                        continue;
                    }
                    if only.is_none_or(|w| w.contains(&(p, o))) {
                        if let Some(rec) = self.decoder.decode(norm, m.key(), m.payload(), (p, o), how)? {
                            apply(rec);
                        }
                    }
                    if o + 1 >= end {
                        left.remove(&p);
                    }
                }
            }
        }
        Ok(())
    }

    /// The table's state in the topic up to `to`, of the keys whose identity `wanted` accepts
    /// (identities as `by_id` says).
    ///
    /// # Errors
    /// As [`TopicReader::scan`].
    pub(crate) fn replay(
        &mut self,
        norm: &Normalizer,
        to: &Ends,
        capacity: usize,
        wanted: impl Fn(Digest) -> bool,
    ) -> Result<HashMap<Digest, Entry, BuildDigest>, VerifyError> {
        let from: Ends = self.watermarks()?.into_iter().map(|(p, low, _)| (p, low)).collect();
        let mut state: HashMap<Digest, Entry, BuildDigest> = HashMap::with_capacity_and_hasher(capacity, BuildDigest);
        let how = Read { by_id: false, bytes: true, want_key: false };
        self.scan(norm, (&from, to), how, |rec| {
            let (partition, offset) = (rec.partition, rec.offset);
            match rec.change {
                Change::Upsert(doc) if wanted(rec.identity) => {
                    state.insert(rec.identity, Entry::of_doc(&doc, norm, partition, offset));
                }
                Change::UpsertBytes(digest) if wanted(rec.identity) => {
                    state.insert(rec.identity, Entry { digest, json: false, lacks: 0, partition, offset });
                }
                Change::Upsert(_) | Change::UpsertBytes(_) => {}
                Change::Delete => {
                    state.remove(&rec.identity);
                }
                Change::Truncate => state.retain(|_, e| e.partition != partition),
            }
        })?;
        Ok(state)
    }

    /// The records at these places (partition, offset), decoded, their keys too: one read per
    /// partition from the first to the last place, decoding only those (a read started per
    /// record costs a fetch round of half a second).
    ///
    /// # Errors
    /// As [`TopicReader::scan`]; with `all`, a record that is not there any more (compacted
    /// away). Without, such a place is left out of the answer.
    pub(crate) fn fetch(
        &mut self,
        norm: &Normalizer,
        places: &[(i32, i64)],
        all: bool,
    ) -> Result<HashMap<(i32, i64), Record>, VerifyError> {
        let only: std::collections::HashSet<(i32, i64)> = places.iter().copied().collect();
        let mut bounds: HashMap<i32, (i64, i64)> = HashMap::new();
        for &(p, o) in places {
            let b = bounds.entry(p).or_insert((o, o + 1));
            *b = (b.0.min(o), b.1.max(o + 1));
        }
        let from: Ends = bounds.iter().map(|(&p, &(a, _))| (p, a)).collect();
        let to: Ends = bounds.iter().map(|(&p, &(_, b))| (p, b)).collect();
        let mut found = HashMap::with_capacity(places.len());
        let how = Read { by_id: false, bytes: false, want_key: true };
        self.scan_only(norm, (&from, &to), how, Some(&only), |r| {
            found.insert((r.partition, r.offset), r);
        })?;
        if let Some((p, o)) = places.iter().find(|x| all && !found.contains_key(x)) {
            return Err(VerifyError::Kafka(crate::kafka::Error::Abortable(format!(
                "{}: the record at offset {o} of partition {p} is gone (compacted while verify ran?)",
                self.topic
            ))));
        }
        Ok(found)
    }
}

impl Decoder {
    /// Decodes a record; None for another table's. Its key is decoded only where `how` or
    /// the record needs it (an index's identity of a delete, the SQL literals).
    fn decode(
        &mut self,
        norm: &Normalizer,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        (partition, offset): (i32, i64),
        how: Read,
    ) -> Result<Option<Record>, VerifyError> {
        let at = |d: &Decoder, what: String| d.at(partition, offset, what);
        let change = match value {
            None => Change::Delete,
            Some(v) => {
                let id = schema_id(v).map_err(|w| at(self, w))?;
                let w = self.value_writer(norm, id)?;
                let ValueWriter::Ours { writer, current } = &w.1 else { return Ok(None) };
                let fast = (how.bytes && *current)
                    .then(|| norm.value_bytes(v.get(5..).unwrap_or_default(), writer.flattened()))
                    .flatten();
                match fast {
                    Some(c) => c,
                    None => {
                        let avro = decode(&w.0, v).map_err(|e| at(self, e))?;
                        match norm.value(&avro, writer).map_err(|e| at(self, e))? {
                            Need::Change(c) => c,
                            Need::Delete => Change::Delete,
                        }
                    }
                }
            }
        };
        let mut id = match &change {
            Change::Upsert(doc) => Some(doc.id.clone()),
            _ => None,
        };
        let Some(k) = key else {
            return match (&change, value) {
                (Change::Truncate, _) => {
                    Ok(Some(Record { identity: 0, id, change, key_literals: None, partition, offset }))
                }
                (_, None) => Ok(None),
                _ => Err(at(self, "a row change without a key".into())),
            };
        };
        let mut key_literals = None;
        let decode_key = how.want_key || (how.by_id && id.is_none());
        if decode_key || value.is_none() {
            let kid = schema_id(k).map_err(|w| at(self, w))?;
            let w = self.key_writer(kid)?;
            // a tombstone of another table's key
            if value.is_none() && namespace_of(&w.0).is_none_or(|n| n != norm.namespace()) {
                return Ok(None);
            }
            if decode_key {
                let avro = decode(&w.0, k).map_err(|e| at(self, e))?;
                if id.is_none() {
                    id = Some(norm.key_id(&avro, &w.1).map_err(|e| at(self, e))?);
                }
                key_literals = norm.key_literals(&avro, &w.1);
            }
        }
        let identity = if how.by_id {
            id.as_deref().map(id_digest).unwrap_or_default()
        } else {
            xxh3_128(k.get(5..).unwrap_or_default())
        };
        Ok(Some(Record { identity, id, change, key_literals, partition, offset }))
    }

    fn at(&self, partition: i32, offset: i64, what: String) -> VerifyError {
        VerifyError::Record { topic: self.topic.clone(), partition, offset, what }
    }

    fn schema(&self, id: u32, what: &str) -> Result<Schema, VerifyError> {
        let text = self.runtime.block_on(self.registry.schema_text(id)).map_err(VerifyError::Registry)?;
        Schema::parse_str(&text).map_err(|e| self.at(-1, -1, format!("{what} schema id {id} does not parse: {e}")))
    }

    fn key_writer(&mut self, id: u32) -> Result<Arc<(Schema, Vec<Field>)>, VerifyError> {
        if let Some(w) = self.keys.get(&id) {
            return Ok(Arc::clone(w));
        }
        let schema = self.schema(id, "key")?;
        let fields = key_fields(&schema).map_err(|e| self.at(-1, -1, format!("key schema id {id}: {e}")))?;
        let w = Arc::new((schema, fields));
        self.keys.insert(id, Arc::clone(&w));
        Ok(w)
    }

    fn value_writer(&mut self, norm: &Normalizer, id: u32) -> Result<Arc<(Schema, ValueWriter)>, VerifyError> {
        if let Some(w) = self.values.get(&id) {
            return Ok(Arc::clone(w));
        }
        let schema = self.schema(id, "value")?;
        let writer = if namespace_of(&schema).is_some_and(|n| n == norm.namespace()) {
            let (table, geo) = (&norm.table, &self.geo_point);
            let l = layout(&schema, &|c| geo(&format!("{table}.{c}")))
                .map_err(|e| self.at(-1, -1, format!("value schema id {id}: {e}")))?;
            ValueWriter::Ours { current: norm.is_current(&schema), writer: norm.writer(l) }
        } else {
            ValueWriter::Other
        };
        let w = Arc::new((schema, writer));
        self.values.insert(id, Arc::clone(&w));
        Ok(w)
    }
}

/// The namespace of a record schema.
fn namespace_of(s: &Schema) -> Option<&str> {
    match s {
        Schema::Record(r) => r.name.namespace.as_deref(),
        _ => None,
    }
}
