//! The pipeline without servers. The change source replays a binlog MariaDB 10.11 wrote
//! (`testdata/pipeline/mysql-bin.000001`, recorded from `integration/sql/pipeline.sql` by
//! `integration/record_pipeline_binlog.sh`), Kafka is librdkafka's mock cluster and the
//! registry is the in-process test registry. The mock cluster is a mock because no broker runs
//! inside `cargo test --lib`: it has no transactional visibility, so these tests assert what the
//! pipeline sends and commits (the checkpoints' positions, the records per key, the errors);
//! exactly-once as consumers see it is tested against the real broker (tests/it/run/chaos.rs).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::DefaultProducerContext;
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use sluice_binlog::event::Event;
use sluice_binlog::transaction::{Step, TransactionTracker};
use sluice_binlog::walk::{EventWalker, Offset as At};
use sluice_binlog::EventDecoder;

use super::*;
use crate::config::{FilterSection, KafkaSection, SnapshotSection};
use crate::process::ShutdownTrigger;

const FILE: &str = "mysql-bin.000001";
/// Where the recorded file's closing ROTATE points.
const NEXT_FILE: (&str, u64) = ("mysql-bin.000002", 4);

fn recorded() -> Vec<u8> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/pipeline/mysql-bin.000001");
    std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Length of the event at `at` (from its header).
fn event_len(bytes: &[u8], at: usize) -> usize {
    u32::from_le_bytes(bytes[at + 9..at + 13].try_into().unwrap()) as usize
}

/// The recorded binlog as a replication stream would send it, from `from` on: the events
/// before `from` are decoded (the format description and table maps a server sends first)
/// but not handed out.
struct Replay<'h> {
    bytes: Vec<u8>,
    next: usize,
    walker: EventWalker,
    tracker: TransactionTracker,
    /// The source reports a reconnect once, when it reaches this offset.
    reconnect_at: Option<u64>,
    /// Asked to stop when the last event is handed out: the pipeline commits at that boundary
    /// and returns.
    stop_at_end: Option<ShutdownTrigger>,
    /// Called once, when the replay reaches the offset.
    hook: Option<(u64, Box<dyn FnOnce() + 'h>)>,
    /// After its last event the source goes quiet, as a server with nothing to send: `ready`
    /// never resolves (and no heartbeat comes).
    quiet_at_end: bool,
    /// After its last event the connection breaks, as a crashed server's: `ready` resolves,
    /// `interrupted` says so, and the next event is the reconnect.
    broken_at_end: bool,
}

impl<'h> Replay<'h> {
    fn from(from: u64, stop_at_end: Option<ShutdownTrigger>) -> Replay<'h> {
        let bytes = recorded();
        let resume = ResumePoint { file: FILE.into(), position: from, gtid: None };
        let mut r = Replay {
            bytes,
            next: 4,
            walker: EventWalker::new(FILE, EventDecoder::default()),
            tracker: TransactionTracker::new(resume),
            reconnect_at: None,
            stop_at_end,
            hook: None,
            quiet_at_end: false,
            broken_at_end: false,
        };
        while (r.next as u64) < from {
            let len = event_len(&r.bytes, r.next);
            r.walker.walk(&r.bytes[r.next..r.next + len], At::At(r.next as u64)).unwrap();
            r.next += len;
        }
        r
    }
}

impl ChangeSource for Replay<'_> {
    async fn next_change(&mut self) -> Result<Option<SourceEvent<'_>>, SourceError> {
        if self.next >= self.bytes.len() {
            if self.broken_at_end {
                self.tracker.reset();
                return Ok(Some(SourceEvent::Reconnected { at: self.tracker.resume_point().clone() }));
            }
            return Ok(None);
        }
        if self.hook.as_ref().is_some_and(|(at, _)| *at == self.next as u64) {
            if let Some((_, hook)) = self.hook.take() {
                hook();
            }
        }
        if self.reconnect_at == Some(self.next as u64) {
            self.reconnect_at = None;
            self.tracker.reset();
            return Ok(Some(SourceEvent::Reconnected { at: self.tracker.resume_point().clone() }));
        }
        let at = self.next;
        let len = event_len(&self.bytes, at);
        self.next += len;
        if self.next >= self.bytes.len() {
            if let Some(t) = &self.stop_at_end {
                t.stop();
            }
        }
        let Replay { bytes, walker, tracker, .. } = self;
        let ev = walker.walk(&bytes[at..at + len], At::At(at as u64))?;
        let step = tracker.observe(&ev);
        Ok(Some(SourceEvent::Event(ev, step)))
    }

    fn ready(&mut self) -> impl std::future::Future<Output = ()> {
        let quiet = self.quiet_at_end && self.next >= self.bytes.len();
        async move {
            if quiet {
                std::future::pending::<()>().await;
            }
        }
    }

    fn interrupted(&self) -> bool {
        self.broken_at_end && self.next >= self.bytes.len()
    }

    fn resume_point(&self) -> &ResumePoint {
        self.tracker.resume_point()
    }

    fn in_transaction(&self) -> bool {
        self.tracker.in_transaction()
    }
}

/// The recorded binlog's transactions, read independently of the pipeline: where each ends
/// (its resume point), and whether it changed rows of a captured table (not `shop.audit`).
fn transactions() -> Vec<(u64, bool)> {
    let bytes = recorded();
    let mut walker = EventWalker::new(FILE, EventDecoder::default());
    let mut tracker = TransactionTracker::new(ResumePoint { file: FILE.into(), position: 4, gtid: None });
    let (mut out, mut rows, mut at) = (Vec::new(), false, 4usize);
    while at < bytes.len() {
        let len = event_len(&bytes, at);
        let ev = walker.walk(&bytes[at..at + len], At::At(at as u64)).unwrap();
        if let Event::Rows(r) = &ev.event.event {
            rows |= &*r.table.table != "audit";
        }
        let step = tracker.observe(&ev);
        if matches!(step, Step::Commit { .. } | Step::Statement) {
            out.push((tracker.resume_point().position, std::mem::take(&mut rows)));
        }
        at += len;
    }
    out
}

/// The offsets of the recorded binlog's rows events, in order.
fn rows_events() -> Vec<u64> {
    let bytes = recorded();
    let mut walker = EventWalker::new(FILE, EventDecoder::default());
    let (mut out, mut at) = (Vec::new(), 4usize);
    while at < bytes.len() {
        let len = event_len(&bytes, at);
        let ev = walker.walk(&bytes[at..at + len], At::At(at as u64)).unwrap();
        if matches!(ev.event.event, Event::Rows(_)) {
            out.push(at as u64);
        }
        at += len;
    }
    out
}

/// A record's key and value bytes.
type Record = (Option<Vec<u8>>, Option<Vec<u8>>);

/// A mock cluster with the topics the pipeline writes, the test registry, and the sections.
struct Harness {
    mock: MockCluster<'static, DefaultProducerContext>,
    _registry: sluice_test_registry::Server,
    registry: RegistryClient,
    kafka: KafkaSection,
    output: OutputSection,
    filter: TableFilter,
    routes: Routes,
    metrics: Arc<Metrics>,
}

impl Harness {
    async fn new() -> Harness {
        let mock = MockCluster::new(1).unwrap();
        for t in ["m.__positions", "m.__schemas", "m.shop.orders", "m.shop.notes"] {
            mock.create_topic(t, 1, 1).unwrap();
        }
        let server = sluice_test_registry::Server::spawn(
            "127.0.0.1:0".parse().unwrap(),
            sluice_test_registry::Registry::in_memory(),
        )
        .await
        .unwrap();
        let registry: crate::config::RegistrySection = toml::from_str(&format!("url = \"{}\"", server.url())).unwrap();
        // every MySQL transaction with records is a Kafka transaction of its own
        let kafka: KafkaSection = toml::from_str(&format!(
            "brokers = \"{}\"\ntopic_prefix = \"m\"\nbatch_max_records = 1\n[properties]\n\"message.timeout.ms\" = \
             \"5000\"\n",
            mock.bootstrap_servers()
        ))
        .unwrap();
        let filter: FilterSection = toml::from_str("exclude = [\"shop.audit\"]").unwrap();
        Harness {
            _registry: server,
            registry: RegistryClient::new(&registry).unwrap(),
            routes: Routes::new(&[], &kafka.topic_prefix),
            kafka,
            output: OutputSection::default(),
            filter: TableFilter::from_config(&filter),
            metrics: Arc::new(Metrics::new("src")),
            mock,
        }
    }

    /// Runs one attempt over `src` to its end: Ok after a stop, else the error that ended it.
    async fn attempt(&self, src: &mut Replay<'_>, sink: &mut KafkaSink, stop: &Shutdown) -> Result<(), Error> {
        let connect = sluice_protocol::ConnectOptions::new("127.0.0.1", 9, "nobody", "");
        let mut snap = Snapshotter::new(&SnapshotSection::default(), connect, None);
        self.attempt_with(src, &mut snap, sink, stop).await
    }

    /// As [`Harness::attempt`], with the snapshot `snap` between the stream's transactions.
    async fn attempt_with(
        &self,
        src: &mut Replay<'_>,
        snap: &mut Snapshotter,
        sink: &mut KafkaSink,
        stop: &Shutdown,
    ) -> Result<(), Error> {
        let settings = Settings {
            source_name: "src",
            kafka: &self.kafka,
            output: &self.output,
            filter: &self.filter,
            routes: &self.routes,
        };
        let mut progress = ProgressLog::default();
        let committed = src.resume_point().clone();
        let schemas = SchemaHistory::new(Vec::new(), 0, false);
        let mut pipeline = Pipeline::new(
            settings,
            self.registry.clone(),
            Connector::Mariadb,
            committed,
            schemas,
            &self.metrics,
            &mut progress,
        );
        pipeline.run(src, snap, sink, stop).await
    }

    /// Every record of `topic` (the mock shows aborted ones too), in order.
    fn records(&self, topic: &str) -> Vec<Record> {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", self.mock.bootstrap_servers())
            .set("group.id", "pipeline-tests")
            .set("enable.auto.commit", "false")
            .create()
            .unwrap();
        let (_, high) = consumer.fetch_watermarks(topic, 0, Duration::from_secs(5)).unwrap();
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, 0, Offset::Beginning).unwrap();
        consumer.assign(&tpl).unwrap();
        let mut out = Vec::new();
        while (out.len() as i64) < high {
            match consumer.poll(Duration::from_secs(5)) {
                Some(Ok(m)) => out.push((m.key().map(<[u8]>::to_vec), m.payload().map(<[u8]>::to_vec))),
                Some(Err(e)) => panic!("reading {topic}: {e}"),
                None => panic!("reading {topic}: {} of {high} records", out.len()),
            }
        }
        out
    }

    /// The committed checkpoints' positions, in order.
    fn checkpoints(&self) -> Vec<Checkpoint> {
        self.records("m.__positions")
            .into_iter()
            .filter_map(|(_, v)| v.map(|v| serde_json::from_slice::<Checkpoint>(&v).unwrap()))
            .collect()
    }

    /// A framed Avro datum as JSON, with its schema from the registry.
    async fn decode(&self, framed: &[u8]) -> serde_json::Value {
        assert_eq!(framed[0], 0, "magic byte");
        let id = u32::from_be_bytes(framed[1..5].try_into().unwrap());
        let text = self.registry.schema_text(id).await.unwrap();
        let schema = apache_avro::Schema::parse_str(&text).unwrap();
        let v = apache_avro::from_avro_datum(&schema, &mut &framed[5..], None).unwrap();
        serde_json::Value::try_from(v).unwrap()
    }

    /// `topic`'s records as (key id, op or "tombstone"), in order.
    async fn ops(&self, topic: &str) -> Vec<(i64, String)> {
        self.values(topic).await.into_iter().map(|(id, op, _)| (id, op)).collect()
    }

    /// `topic`'s records as (key id, op or "tombstone", the value), in order.
    async fn values(&self, topic: &str) -> Vec<(i64, String, serde_json::Value)> {
        let mut out = Vec::new();
        for (key, value) in self.records(topic) {
            let key = self.decode(&key.expect("a keyed record")).await;
            let id = key["id"].as_i64().unwrap();
            match value {
                None => out.push((id, "tombstone".to_string(), serde_json::Value::Null)),
                Some(v) => {
                    let v = self.decode(&v).await;
                    out.push((id, v["op"].as_str().unwrap().to_string(), v));
                }
            }
        }
        out
    }
}

fn ops_of(all: &[(i64, String)], id: i64) -> Vec<&str> {
    all.iter().filter(|(k, _)| *k == id).map(|(_, op)| op.as_str()).collect()
}

/// Every checkpoint is at the end of a MySQL transaction, each transaction with records is
/// committed on its own (batch_max_records = 1), the 500-row transaction whole; a key change
/// is a delete (with its tombstone) of the old key and a create of the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_commit_whole_and_a_key_change_is_a_delete_and_a_create() {
    let h = Harness::new().await;
    let mut sink = KafkaSink::on_mock(&h.kafka, "src").await.unwrap();
    let (trigger, stop) = Shutdown::manual();
    let mut src = Replay::from(4, Some(trigger));
    h.attempt(&mut src, &mut sink, &stop).await.unwrap();

    let txs = transactions();
    let ends: Vec<u64> = txs.iter().map(|(end, _)| *end).collect();
    let checkpoints = h.checkpoints();
    for c in &checkpoints {
        // the file's last event is the ROTATE to the next file: the stop commits there
        let at_rotate = (c.file.as_str(), c.position) == NEXT_FILE;
        assert!(
            at_rotate || (c.file == FILE && ends.contains(&c.position)),
            "checkpoint at {c} is not a transaction's end ({ends:?})"
        );
    }
    let committed: Vec<u64> = checkpoints.iter().map(|c| c.position).collect();
    for (end, rows) in &txs {
        if *rows {
            assert!(committed.contains(end), "the transaction ending at {end} was not committed ({committed:?})");
        }
    }
    assert!(checkpoints.last().unwrap().stopped_ms.is_some(), "the last commit says the stop");
    let last = checkpoints.last().unwrap();
    assert_eq!((last.file.as_str(), last.position), NEXT_FILE, "stopped at the end of the file");

    assert_recorded_changes(&h).await;
}

/// The topics hold every change of the recorded file once, in order per key: a key change as
/// the delete (with its tombstone) of the old key and the create of the new one.
async fn assert_recorded_changes(h: &Harness) {
    let orders = h.ops("m.shop.orders").await;
    assert_eq!(ops_of(&orders, 1), ["c", "u", "u"]);
    assert_eq!(ops_of(&orders, 2), ["c", "d", "tombstone"], "the old key of the key change");
    assert_eq!(ops_of(&orders, 20), ["c"], "the new key of the key change");
    assert_eq!(ops_of(&orders, 3), ["c", "d", "tombstone"]);
    assert_eq!(orders.len(), 3 + 3 + 1 + 3);
    let notes = h.ops("m.shop.notes").await;
    assert_eq!(notes.len(), 501, "1 + the 500-row transaction");
    assert!(notes.iter().all(|(_, op)| op == "c"));
    let ids: std::collections::BTreeSet<i64> = notes.iter().map(|(id, _)| *id).collect();
    assert_eq!((ids.len(), ids.first(), ids.last()), (501, Some(&1), Some(&501)));
}

/// A batch still open when the source goes quiet commits by its `batch_max_delay`, not at the
/// server's next heartbeat (5 s by default; this source sends none), and a stop asked for while
/// the source is quiet ends the attempt at once, with a last checkpoint saying so. (Both waited
/// for the next event before: the bench's final batch sat 5 s uncommitted.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_source_commits_the_open_batch_by_its_deadline_and_stops_at_once() {
    let mut h = Harness::new().await;
    // one batch for the whole file: only its deadline can commit it
    h.kafka.batch_max_records = 1_000_000;
    h.kafka.batch_max_delay = Duration::from_millis(300);
    let mut sink = KafkaSink::on_mock(&h.kafka, "src").await.unwrap();
    let (trigger, stop) = Shutdown::manual();
    let mut src = Replay::from(4, None);
    src.quiet_at_end = true;
    let h = &h;
    let watch = async {
        let started = std::time::Instant::now();
        loop {
            // (a blocking read of the mock: the attempt pauses meanwhile, which only delays it)
            let at_end = tokio::task::block_in_place(|| h.checkpoints())
                .iter()
                .any(|c| (c.file.as_str(), c.position) == NEXT_FILE);
            if at_end {
                break;
            }
            assert!(started.elapsed() < Duration::from_secs(20), "the open batch never committed");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        trigger.stop();
        std::time::Instant::now()
    };
    let (result, stop_asked) = tokio::join!(h.attempt(&mut src, &mut sink, &stop), watch);
    result.unwrap();
    assert!(stop_asked.elapsed() < Duration::from_secs(2), "the stop took {:?}", stop_asked.elapsed());
    let checkpoints = h.checkpoints();
    let last = checkpoints.last().unwrap();
    assert_eq!((last.file.as_str(), last.position), NEXT_FILE);
    assert!(last.stopped_ms.is_some(), "the last commit says the stop");
    assert_recorded_changes(h).await;
}

/// A connection that breaks between transactions (a crashed server) has the batch read so far
/// committed before the reconnect ends the attempt: its rows reach the topics without waiting
/// for the server to come back, and the next attempt resumes after them. (Before, the restart
/// aborted the batch and it was read again once the server was back: 65 s after the INSERT in
/// a trial with MariaDB SIGKILLed for 30 s.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_connection_between_transactions_commits_the_batch_first() {
    let mut h = Harness::new().await;
    // one batch for the whole file, due neither by size nor by time
    h.kafka.batch_max_records = 1_000_000;
    h.kafka.batch_max_delay = Duration::from_secs(600);
    let mut sink = KafkaSink::on_mock(&h.kafka, "src").await.unwrap();
    let (_never, stop) = Shutdown::manual();
    let mut src = Replay::from(4, None);
    src.broken_at_end = true;
    let e = h.attempt(&mut src, &mut sink, &stop).await.unwrap_err();
    assert!(matches!(e, Error::Interrupted(_)), "{e:?}");
    assert_eq!(e.disposition(), Disposition::Restart);
    let last = h.checkpoints().last().cloned().unwrap();
    assert_eq!((last.file.as_str(), last.position), NEXT_FILE, "the whole file committed");
    assert!(last.stopped_ms.is_none(), "a restart is no stop");
    assert_recorded_changes(&h).await;
}

/// A reconnect inside a transaction ends the attempt (a restart) with the open Kafka
/// transaction aborted: the checkpoint stays at the last committed transaction, and the next
/// attempt from there publishes the rest; each key ends in its last state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnect_ends_the_attempt_and_the_next_resumes_at_the_checkpoint() {
    let h = Harness::new().await;
    let txs = transactions();
    // inside the 500-row transaction (the second-to-last with rows)
    let with_rows: Vec<u64> = txs.iter().filter(|(_, r)| *r).map(|(end, _)| *end).collect();
    let before_big = with_rows[with_rows.len() - 3];
    // the third rows event of the 500-row transaction
    let inside = rows_events().into_iter().filter(|at| *at > before_big).nth(2);
    let mut sink = KafkaSink::on_mock(&h.kafka, "src").await.unwrap();
    let (_never, stop) = Shutdown::manual();
    let mut src = Replay::from(4, None);
    src.reconnect_at = inside;
    let e = h.attempt(&mut src, &mut sink, &stop).await.unwrap_err();
    assert!(matches!(e, Error::Interrupted(_)), "{e:?}");
    assert_eq!(e.disposition(), Disposition::Restart);
    let checkpoints = h.checkpoints();
    let last = checkpoints.last().unwrap().position;
    assert!(last <= inside.unwrap(), "nothing of the cut transaction is committed");
    // every transaction before the cut one is committed: the checkpoint is at the end of the
    // last one with rows, or of the uncaptured one after it
    assert!(last >= before_big && txs.iter().any(|(end, _)| *end == last), "checkpoint at {last}, {txs:?}");

    // the next attempt, as `sluice run` starts it: from the committed checkpoint
    drop(sink);
    let mut sink = KafkaSink::on_mock(&h.kafka, "src").await.unwrap();
    let (trigger, stop) = Shutdown::manual();
    let mut src = Replay::from(last, Some(trigger));
    h.attempt(&mut src, &mut sink, &stop).await.unwrap();
    let end = h.checkpoints().last().cloned().unwrap();
    assert_eq!((end.file.as_str(), end.position), NEXT_FILE);
    let notes = h.ops("m.shop.notes").await;
    let ids: std::collections::BTreeSet<i64> = notes.iter().map(|(id, _)| *id).collect();
    assert_eq!(ids.len(), 501, "every row of the cut transaction published by the next attempt");
    let orders = h.ops("m.shop.orders").await;
    let mut last_op: BTreeMap<i64, &str> = BTreeMap::new();
    for (id, op) in &orders {
        last_op.insert(*id, op);
    }
    assert_eq!(last_op.get(&1), Some(&"u"));
    assert_eq!(last_op.get(&2), Some(&"tombstone"));
    assert_eq!(last_op.get(&20), Some(&"c"));
}

/// A record the broker refuses as too large stops the attempt (no restart would help), naming
/// the table and the key, and nothing of its transaction is committed. The broker refuses
/// from the second transaction with rows on (the tables' definitions, committed before, get
/// through).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_record_stops_naming_its_table_and_key() {
    let h = Harness::new().await;
    let mut sink = KafkaSink::on_mock(&h.kafka, "src").await.unwrap();
    let (_never, stop) = Shutdown::manual();
    let mut src = Replay::from(4, None);
    let second = rows_events()[1];
    let first_end = transactions().into_iter().find(|(_, rows)| *rows).unwrap().0;
    let (mock, metrics) = (&h.mock, Arc::clone(&h.metrics));
    src.hook = Some((
        second,
        Box::new(move || {
            // the first transaction's commit runs on a blocking thread: wait until it is through
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while metrics.last_checkpoint().map(|(_, p)| p) != Some(first_end) {
                assert!(std::time::Instant::now() < deadline, "the first transaction was not committed");
                std::thread::sleep(Duration::from_millis(10));
            }
            mock.request_errors(RDKafkaApiKey::Produce, &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE; 50]);
        }),
    ));
    let e = h.attempt(&mut src, &mut sink, &stop).await.unwrap_err();
    assert_eq!(e.disposition(), Disposition::Stop, "{e}");
    let text = e.to_string();
    assert!(text.contains("table shop.orders (topic m.shop.orders, key id="), "{text}");
    assert!(!text.contains("offset"), "the refused record is named, not the row at hand: {text}");
    mock.clear_request_errors(RDKafkaApiKey::Produce);
    assert!(h.checkpoints().iter().all(|c| c.position < second), "nothing committed past the refusal");
}

/// `shop.orders` as the recorded binlog's TABLE_MAP defines it (FULL metadata: names, key).
fn orders_table_map() -> Arc<sluice_binlog::TableMap> {
    let bytes = recorded();
    let mut walker = EventWalker::new(FILE, EventDecoder::default());
    let mut at = 4usize;
    while at < bytes.len() {
        let len = event_len(&bytes, at);
        let ev = walker.walk(&bytes[at..at + len], At::At(at as u64)).unwrap();
        if let Event::Rows(r) = &ev.event.event {
            if &*r.table.table == "orders" {
                return Arc::clone(&r.table);
            }
        }
        at += len;
    }
    panic!("no rows event of shop.orders");
}

/// The result columns of `SELECT id, status, total FROM shop.orders` as the server describes
/// them (binary protocol).
fn orders_columns() -> Vec<sluice_protocol::query::ColumnDefinition> {
    let col = |name: &str, column_type: u8, charset: u16, flags: u16, decimals: u8| {
        sluice_protocol::query::ColumnDefinition {
            schema: "shop".into(),
            table: "orders".into(),
            org_table: "orders".into(),
            name: name.into(),
            org_name: name.into(),
            charset,
            column_length: 20,
            column_type,
            flags,
            decimals,
        }
    };
    // LONG NOT NULL PRI, VAR_STRING NOT NULL utf8mb4_general_ci, NEWDECIMAL(10,2) NOT NULL
    vec![col("id", 3, 63, 1 | 2, 0), col("status", 253, 45, 1, 0), col("total", 246, 63, 1, 2)]
}

/// One binary-protocol result row of `orders_columns()`: the 0x00 header, the NULL bitmap
/// (offset 2), then each value (INT as 4 bytes, the others length-prefixed text).
fn orders_row(id: i32, status: &str, total: &str) -> bytes::Bytes {
    let mut p = vec![0u8, 0u8];
    p.extend_from_slice(&id.to_le_bytes());
    for text in [status, total] {
        p.push(u8::try_from(text.len()).unwrap());
        p.extend_from_slice(text.as_bytes());
    }
    bytes::Bytes::from(p)
}

/// A snapshot chunk read between the stream's transactions (its low watermark after the
/// first transaction with rows, its high one at the end of the second): the row that the
/// second transaction changed inside that window is dropped (the stream carries its newer
/// state), the other rows are published as `r` records once the stream reaches the high
/// watermark, between two transactions, the first and the last marked; the checkpoint after
/// them records the table as done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_chunk_is_published_between_transactions() {
    let h = Harness::new().await;
    let with_rows: Vec<u64> = transactions().into_iter().filter(|(_, r)| *r).map(|(end, _)| end).collect();
    let (low, high) = (with_rows[0], with_rows[1]);
    let plan =
        crate::snapshot::plan::TablePlan::for_test(orders_table_map(), crate::snapshot::plan::Method::Chunked(vec![0]));
    // the rows as a read inside the window saw them: order 1 before the second transaction paid it
    let rows = vec![orders_row(1, "new", "10.00"), orders_row(2, "new", "20.00"), orders_row(3, "new", "30.00")];
    let window = ((FILE.to_string(), low), (FILE.to_string(), high));
    let mut snap = Snapshotter::with_chunk(plan, orders_columns(), rows, window, true);
    let mut sink = KafkaSink::on_mock(&h.kafka, "src").await.unwrap();
    // the stream is where the chunk was read: at its low watermark
    let (trigger, stop) = Shutdown::manual();
    let mut src = Replay::from(low, Some(trigger));
    h.attempt_with(&mut src, &mut snap, &mut sink, &stop).await.unwrap();

    let orders = h.values("m.shop.orders").await;
    let ops: Vec<(i64, String)> = orders.iter().map(|(id, op, _)| (*id, op.clone())).collect();
    assert_eq!(ops_of(&ops, 1), ["u", "u"], "the row changed inside the window is not published from the chunk");
    assert_eq!(ops_of(&ops, 2), ["r", "d", "tombstone"]);
    assert_eq!(ops_of(&ops, 3), ["r", "d", "tombstone"]);
    assert_eq!(ops_of(&ops, 20), ["c"]);
    // between the second transaction (order 1 paid) and the third (the key change)
    let at = |id: i64, op: &str| ops.iter().position(|(k, o)| *k == id && o == op).unwrap();
    let (paid, first_r, last_r, key_change) = (at(1, "u"), at(2, "r"), at(3, "r"), at(2, "d"));
    assert!(paid < first_r && first_r < last_r && last_r < key_change, "{ops:?}");
    let r2 = &orders[first_r].2;
    assert_eq!(r2["source"]["snapshot"], "first", "{r2}");
    assert_eq!(orders[last_r].2["source"]["snapshot"], "last");
    assert_eq!(r2["after"]["status"], "new", "{r2}");
    assert_eq!(r2["source"]["pos"], high, "the rows' state is that of the high watermark");
    let done = h.checkpoints().into_iter().find(|c| {
        c.snapshot.as_ref().is_some_and(|p| p.tables.iter().all(|t| t.state == crate::position::TableState::Done))
    });
    let done = done.expect("a checkpoint records the table as done");
    assert!(done.position >= high && done.position < with_rows[2], "done at {done}");
}

/// A snapshot row written into Avro as it is parsed (`parse_row_into` into a `RowWriter`, the
/// way `publish_chunk` takes for envelope values of rows small enough) makes the very key and
/// value bytes the values' way makes (`parse_row`, then `write_key` and `write_value`), with
/// the chunk's envelope parts and without (the table's first and last row), and on the
/// writer's buffers kept from row to row.
#[test]
fn snapshot_rows_written_as_parsed_equal_the_values_way() {
    use crate::avro::{RowWriter, SchemaOptions, TableSchema};
    use crate::snapshot::{image, parse_row, parse_row_into};
    let tm = orders_table_map();
    let plan =
        crate::snapshot::plan::TablePlan::for_test(Arc::clone(&tm), crate::snapshot::plan::Method::Chunked(vec![0]));
    let ts = TableSchema::new(&tm, &SchemaOptions { prefix: "m".into(), ..SchemaOptions::default() }).unwrap();
    let (columns, enc) = (orders_columns(), AvroEncoder::new());
    let rows = [
        orders_row(1, "new", "10.00"),
        orders_row(-7, "payé ✓ 😀", "-0.01"),
        orders_row(i32::MIN, "", "99999999.99"),
        orders_row(i32::MAX, &"x".repeat(200), "0.00"),
    ];
    let mut bufs = RowBuffers::default();
    for mark in [Snapshot::First, Snapshot::Yes, Snapshot::Last] {
        let ctx = EventContext {
            source: SourceInfo {
                connector: Connector::Mariadb,
                name: "src".into(),
                server_id: 1,
                ts_ms: 1_700_000_000_000,
                file: FILE.into(),
                pos: 4711,
                row: 3,
                gtid: None,
                snapshot: mark,
            },
            transaction: None,
            ts_ms: 1_700_000_000_123,
        };
        let parts = crate::avro::EnvelopeParts::new(&ctx, &ts.database, &ts.table);
        let parts = Some(&parts).filter(|_| mark == Snapshot::Yes);
        let mut writer = RowWriter::new(&enc, &ts, &mut bufs).expect("the key in column order");
        let mut values = Vec::new();
        for packet in &rows {
            parse_row(&plan, &columns, packet, &mut values).unwrap();
            let img = image(&mut values);
            let (mut key, mut value) = (Vec::new(), Vec::new());
            assert!(enc.write_key(&ts, &img, &mut key).unwrap());
            enc.write_value(&ts, Op::Read, None, Some(&img), &ctx, parts, &mut value).unwrap();

            parse_row_into(&plan, &columns, packet, &mut writer).unwrap();
            writer.check().unwrap();
            let mut written = Vec::new();
            writer.write_value(Op::Read, false, true, &ctx, parts, &mut written);
            assert_eq!(writer.key(false), Some(&key[..]), "{mark:?} {img:?}");
            assert_eq!(written, value, "{mark:?} {img:?}");
        }
        bufs = writer.into_buffers();
    }
}
