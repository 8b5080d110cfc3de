//! The pipeline: **changes in, Kafka transactions out**. Where a MySQL transaction becomes a
//! Kafka commit is decided here; the roles are in their own modules:
//!
//! - [`tables`]: each captured table's topic (routes) and Avro schemas, registered per table
//!   version;
//! - [`emit`]: a row change becomes its records (key, value, tombstone; a key change is a
//!   delete and a create);
//! - [`batch`]: when the open Kafka transaction commits (`batch_max_records`,
//!   `batch_max_bytes`, `batch_max_delay`, always at a MySQL transaction boundary);
//! - [`start`]: the first start, recorded as a checkpoint before anything is published.
//!
//! What feeds it is a [`ChangeSource`]: the replication stream today; the chunked table reads
//! of a snapshot are the next. Every change goes through the same encoding, batching and
//! checkpointing. A MySQL transaction is never split: a huge one streams into one Kafka
//! transaction (records go straight to librdkafka, whose bounded queue holds memory flat).
//!
//! Errors end an attempt with an [`Error`] whose [`Error::disposition`] tells `sluice run`
//! what to do: restart from the committed checkpoint (the open Kafka transaction is aborted,
//! the simplest way never to publish a change twice), wait for a predecessor, or stop.

pub mod batch;
pub mod emit;
pub mod start;
pub mod tables;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use sluice_binlog::event::Event;
use sluice_binlog::rows::{RowChange, RowsEvent, RowsKind};
use sluice_binlog::transaction::{gtid_of, Step};
use sluice_binlog::walk::Located;

use crate::avro::{AvroEncoder, AvroError, Connector, EventContext, Op, SourceInfo, TransactionInfo};
use crate::config::{KafkaSection, OutputSection};
use crate::disposition::Disposition;
use crate::filter::TableFilter;
use crate::kafka::{schemas_topic, KafkaSink, TOO_LARGE_SETTINGS};
use crate::metrics::{Metrics, ProgressLog, Tally};
use crate::position::{BadCheckpoint, Checkpoint, ResumePoint};
use crate::process::now_ms;
use crate::registry::{RegistryClient, RegistryError};
use crate::schema::{SchemaError, SchemaHistory};
use crate::source::{ReplicationSource, SourceError, SourceEvent};
use batch::Batch;
use emit::{Buffers, Out};
use tables::{Routes, Tables};

/// Why a pipeline attempt ended; the cause is kept, not flattened to text.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The replication source.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// Kafka.
    #[error(transparent)]
    Kafka(#[from] crate::kafka::Error),
    /// The Schema Registry.
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// Building a schema or encoding a row.
    #[error(transparent)]
    Avro(#[from] AvroError),
    /// A TABLE_MAP the tracked schema cannot name.
    #[error(transparent)]
    Schema(#[from] SchemaError),
    /// A setting that cannot be used (an unreadable password file).
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// The committed checkpoint cannot be read.
    #[error(transparent)]
    Checkpoint(#[from] BadCheckpoint),
    /// A row that could not be decoded or published, where it is.
    #[error("{source} (binlog {file}, offset {offset}, row {row})")]
    AtRow {
        /// The cause.
        source: Box<Error>,
        /// Binlog file.
        file: String,
        /// Offset of the rows event.
        offset: u64,
        /// The row's index in its event.
        row: usize,
    },
    /// A row's undecodable bytes.
    #[error(transparent)]
    Decode(#[from] sluice_binlog::Error),
    /// A record Kafka refuses as too large, named by its table and key.
    #[error(
        "a record of {size} bytes for table {table} (topic {topic}, key {key}) is larger than {by} accepts; \
         {TOO_LARGE_SETTINGS}"
    )]
    TooLarge {
        /// `db.table`.
        table: String,
        /// The topic.
        topic: String,
        /// The key, as text.
        key: String,
        /// The record's size.
        size: usize,
        /// Who refused it.
        by: String,
    },
    /// The stream ended or reconnected: the attempt starts again from the checkpoint.
    #[error("{0}; replaying from the committed checkpoint")]
    Interrupted(String),
}

impl Error {
    /// What `sluice run` does next.
    pub fn disposition(&self) -> Disposition {
        match self {
            Error::Source(e) => e.disposition(),
            Error::Kafka(e) => e.disposition(),
            Error::Registry(e) => e.disposition(),
            Error::AtRow { source, .. } => source.disposition(),
            Error::Interrupted(_) => Disposition::Restart,
            Error::Avro(_)
            | Error::Config(_)
            | Error::Schema(_)
            | Error::Checkpoint(_)
            | Error::Decode(_)
            | Error::TooLarge { .. } => Disposition::Stop,
        }
    }
}

/// What feeds the pipeline: decoded binlog events, each with what it means for its
/// transaction, and the resume point after the last complete one.
pub trait ChangeSource {
    /// The next event (None: the stream ended).
    fn next_change(&mut self) -> impl std::future::Future<Output = Result<Option<SourceEvent<'_>>, SourceError>>;
    /// The position after the last complete transaction.
    fn resume_point(&self) -> &ResumePoint;
    /// True while a transaction is open (no commit may happen then).
    fn in_transaction(&self) -> bool;
}

impl ChangeSource for ReplicationSource {
    fn next_change(&mut self) -> impl std::future::Future<Output = Result<Option<SourceEvent<'_>>, SourceError>> {
        self.next_event()
    }

    fn resume_point(&self) -> &ResumePoint {
        ReplicationSource::resume_point(self)
    }

    fn in_transaction(&self) -> bool {
        ReplicationSource::in_transaction(self)
    }
}

/// The sections of the configuration the pipeline is built from.
#[derive(Debug, Clone, Copy)]
pub struct Settings<'c> {
    /// The source's name (the `source` block of every record).
    pub source_name: &'c str,
    /// Topic prefix and batch limits.
    pub kafka: &'c KafkaSection,
    /// What records look like.
    pub output: &'c OutputSection,
    /// Which tables and columns are captured.
    pub filter: &'c TableFilter,
    /// Topics by table.
    pub routes: &'c Routes,
}

/// The open MySQL transaction, as the records' `transaction` block describes it.
#[derive(Debug, Default)]
struct OpenTransaction {
    gtid: Option<String>,
    id: String,
    total: i64,
    per_table: std::collections::HashMap<String, i64>,
}

/// The state of one pipeline attempt.
pub struct Pipeline<'c> {
    settings: Settings<'c>,
    registry: RegistryClient,
    encoder: AvroEncoder,
    tables: Tables,
    tx: OpenTransaction,
    connector: Connector,
    batch: Batch,
    committed: ResumePoint,
    /// Column names for TABLE_MAPs without them (see `schema`).
    schemas: SchemaHistory,
    buffers: Buffers,
    /// The process's counters (they outlive this attempt) and its progress line.
    metrics: &'c Arc<Metrics>,
    /// What the open batch has done, counted once its Kafka transaction commits.
    tally: Tally,
    progress: &'c mut ProgressLog,
}

impl<'c> Pipeline<'c> {
    /// A pipeline resuming at `committed` (the checkpoint), with the tracked schema as of it.
    pub fn new(
        settings: Settings<'c>,
        registry: RegistryClient,
        connector: Connector,
        committed: ResumePoint,
        schemas: SchemaHistory,
        metrics: &'c Arc<Metrics>,
        progress: &'c mut ProgressLog,
    ) -> Pipeline<'c> {
        Pipeline {
            batch: Batch::new(settings.kafka),
            settings,
            registry,
            encoder: AvroEncoder::new(),
            tables: Tables::default(),
            tx: OpenTransaction::default(),
            connector,
            committed,
            schemas,
            buffers: Buffers::default(),
            metrics,
            tally: Tally::default(),
            progress,
        }
    }

    /// Streams changes from `src` into `sink` until `stop` is set (then it commits at the next
    /// boundary and returns) or an error ends the attempt (the open Kafka transaction is then
    /// aborted).
    ///
    /// # Errors
    /// Whatever ends the attempt; see [`Error::disposition`].
    pub async fn run(
        &mut self,
        src: &mut impl ChangeSource,
        sink: &mut KafkaSink,
        stop: &AtomicBool,
    ) -> Result<(), Error> {
        let result = self.stream(src, sink, stop).await.map_err(|e| self.name_refused_record(e));
        if result.is_err() {
            // a failed abort leaves the transaction to time out; the next init_transactions fences it
            let _ = sink.abort().await;
        }
        result
    }

    async fn stream(
        &mut self,
        src: &mut impl ChangeSource,
        sink: &mut KafkaSink,
        stop: &AtomicBool,
    ) -> Result<(), Error> {
        loop {
            match src.next_change().await? {
                None => return Err(Error::Interrupted("the replication stream ended".into())),
                Some(SourceEvent::Reconnected { at }) => {
                    return Err(Error::Interrupted(format!("the replication connection was re-established at {at}")));
                }
                Some(SourceEvent::Event(ev, step)) => {
                    if let Event::Heartbeat { .. } = ev.event.event {
                        self.metrics.caught_up();
                    } else {
                        self.metrics.event_read(ev.event.header.timestamp, now_ms() / 1000);
                    }
                    self.handle(&ev, step, sink).await?;
                    self.progress.tick(self.metrics);
                }
            }
            if !src.in_transaction() {
                // a finished commit's outcome now, not at the next record (the stream may idle)
                sink.poll().await?;
                let stopping = stop.load(Ordering::SeqCst);
                self.maybe_commit(src.resume_point(), sink, stopping).await?;
                if stopping {
                    sink.finish().await?;
                    self.progress.report(self.metrics);
                    tracing::info!(resume = %self.committed, "Stopped after committing");
                    return Ok(());
                }
            }
        }
    }

    /// At a boundary: commits the open Kafka transaction when the batch is due (or `force`);
    /// with no records pending, writes a checkpoint-only transaction now and then so a restart
    /// does not re-read a long stretch of uncaptured binlog.
    async fn maybe_commit(&mut self, resume: &ResumePoint, sink: &mut KafkaSink, force: bool) -> Result<(), Error> {
        let due = if sink.in_transaction() {
            force || self.batch.full(sink.transaction_bytes())
        } else {
            *resume != self.committed && (force || self.batch.idle_checkpoint_due() || self.schemas.has_pending())
        };
        if due {
            self.commit(resume, sink).await?;
            tracing::debug!(records = self.batch.records(), resume = %resume, "Committed a Kafka transaction");
            self.batch.committed();
            self.committed = resume.clone();
        }
        Ok(())
    }

    /// Commits the open Kafka transaction with the schema changes since the last commit and the
    /// checkpoint at `resume`.
    async fn commit(&mut self, resume: &ResumePoint, sink: &mut KafkaSink) -> Result<(), Error> {
        let topic = schemas_topic(&self.settings.kafka.topic_prefix);
        self.schemas.flush(sink, &topic, self.settings.source_name).await?;
        // the batch's counts count once its transaction is through
        let tally = std::mem::take(&mut self.tally);
        let (m, file, pos) = (Arc::clone(self.metrics), resume.file.clone(), resume.position);
        let then = move || {
            m.committed(tally);
            m.commit(&file, pos);
        };
        sink.commit(&Checkpoint::of(resume).with_schema_version(self.schemas.version()), then).await?;
        Ok(())
    }

    async fn handle(&mut self, ev: &Located<'_>, step: Step, sink: &mut KafkaSink) -> Result<(), Error> {
        match step {
            Step::Begin => self.begin_tx(ev),
            Step::Statement | Step::StatementBegins => {
                if let Event::Query(q) = &ev.event.event {
                    if q.error_code == 0 {
                        let filter = self.settings.filter;
                        let captured = |db: &str, table: &str| filter.matches(db, table);
                        let at = format!("{}:{}", ev.file, ev.offset);
                        self.schemas.apply_query(&q.schema, &q.query, q.status.charset_database, &at, &captured);
                    }
                }
                if step == Step::StatementBegins {
                    self.begin_tx(ev);
                } else {
                    self.end_tx();
                }
            }
            Step::Commit { .. } | Step::Rollback => self.end_tx(),
            Step::Inside | Step::Outside => {
                if let Event::Rows(rows) = &ev.event.event {
                    if self.settings.filter.matches(&rows.table.database, &rows.table.table) {
                        self.rows(ev, rows, sink).await?;
                    }
                }
            }
        }
        Ok(())
    }

    /// At the end of a transaction (or of a statement of its own).
    fn end_tx(&mut self) {
        if self.tx.total > 0 {
            self.tally.transaction();
        }
        self.tx = OpenTransaction::default();
    }

    fn begin_tx(&mut self, ev: &Located<'_>) {
        let gtid = gtid_of(&ev.event.event).map(|g| g.to_string());
        let id = gtid.clone().unwrap_or_else(|| format!("{}:{}", ev.file, ev.offset));
        self.tx = OpenTransaction { gtid, id, total: 0, per_table: Default::default() };
    }

    async fn rows(&mut self, ev: &Located<'_>, rows: &RowsEvent<'_>, sink: &mut KafkaSink) -> Result<(), Error> {
        // without names in the TABLE_MAP, decode with the tracked schema's (checked) metadata
        let rows = self.schemas.resolve_rows(rows, ev.file, ev.offset)?;
        let t = self.tables.get_or_register(&rows.table, &self.settings, &mut self.registry, self.metrics).await?;
        sink.ensure_topic(&t.topic).await?;
        let header = &ev.event.header;
        // one context per event; only the row's counters change per row
        let mut ctx = EventContext {
            source: SourceInfo {
                connector: self.connector,
                name: self.settings.source_name.to_string(),
                server_id: header.server_id,
                ts_ms: i64::from(header.timestamp) * 1000,
                file: ev.file.to_string(),
                pos: ev.offset,
                row: 0,
                gtid: self.tx.gtid.clone(),
                snapshot: Default::default(),
            },
            transaction: Some(TransactionInfo { id: self.tx.id.clone(), total_order: 0, data_collection_order: 0 }),
            // processing time: the rows of one event are processed within moments of each other
            ts_ms: now_ms(),
        };
        let name = rows.table.qualified_name();
        let per_table = self.tx.per_table.entry(name).or_insert(0);
        // one RowChange for the event, refilled per row: no allocation per row
        let mut row = RowChange { before: None, after: None };
        let mut iter = rows.rows();
        let (mut idx, mut records) = (0usize, 0usize);
        while let Some(res) = iter.next_into(&mut row) {
            res.map_err(|e| e.at(ev.file, ev.offset, header.event_type))?;
            self.tx.total += 1;
            *per_table += 1;
            ctx.source.row = u32::try_from(idx).unwrap_or(u32::MAX);
            if let Some(tr) = ctx.transaction.as_mut() {
                tr.total_order = self.tx.total;
                tr.data_collection_order = *per_table;
            }
            let out = Out { encoder: &self.encoder, table: t, output: self.settings.output, ctx: &ctx };
            let sent = out.change(sink, rows.kind, &row, &mut self.buffers).await.map_err(|e| match e {
                // an operator needs to know where: the message names table and column
                e @ (Error::Avro(_) | Error::Kafka(_) | Error::TooLarge { .. }) => {
                    Error::AtRow { source: Box::new(e), file: ev.file.to_string(), offset: ev.offset, row: idx }
                }
                other => other,
            })?;
            self.batch.sent(sent);
            records += sent;
            idx += 1;
        }
        // counted once per event, when the batch commits
        self.tally.records(records as u64);
        let op = match rows.kind {
            RowsKind::Write => Op::Create,
            RowsKind::Delete => Op::Delete,
            RowsKind::Update | RowsKind::PartialUpdate => Op::Update,
        };
        self.tally.rows(&t.counters, op, idx as u64);
        Ok(())
    }

    /// A record the broker refused as too large comes back with its topic and key bytes: name
    /// its table and key (decoded with the key schema) in the stop message.
    fn name_refused_record(&self, e: Error) -> Error {
        let Error::Kafka(crate::kafka::Error::TooLarge { topic, size, by, key: Some(key) }) = &e else { return e };
        let Some(t) = self.tables.by_topic(topic) else { return e };
        let key_text = t
            .schema
            .key_schema()
            .and_then(|schema| apache_avro::from_avro_datum(schema, &mut key.get(5..).unwrap_or_default(), None).ok())
            .and_then(|v| serde_json::Value::try_from(v).ok())
            .map_or_else(|| "unreadable".to_string(), |v| v.to_string());
        Error::TooLarge {
            table: t.tm.qualified_name(),
            topic: topic.clone(),
            key: key_text,
            size: *size,
            by: by.clone(),
        }
    }
}
