//! The pipeline: **changes in, Kafka transactions out**. Where a MySQL transaction becomes a
//! Kafka commit is decided here; the roles are in their own modules:
//!
//! - [`tables`]: each captured table's topic (routes) and Avro schemas, registered per table
//!   version;
//! - [`emit`]: a row change becomes its records (key, value, tombstone; a key change is a
//!   delete and a create);
//! - [`batch`]: when the open Kafka transaction commits (`batch_max_records`,
//!   `batch_max_bytes`, `batch_max_delay`, always at a MySQL transaction boundary);
//! - [`start`]: opening an attempt: the committed checkpoint, or the first start recorded as
//!   a checkpoint before anything is published;
//! - `snapshot_rows`: the snapshot's chunks published between the stream's transactions.
//!
//! What feeds it is a [`ChangeSource`] (the replication stream) and, between its transactions,
//! a [`Snapshotter`] (the rows already in the tables, chunk by chunk). Every change and every
//! snapshot row goes through the same encoding, batching and checkpointing: a chunk's records
//! commit in the Kafka transaction whose checkpoint records the snapshot's progress past it. A MySQL transaction is never split: a huge one streams into one Kafka
//! transaction (records go straight to librdkafka, whose bounded queue holds memory flat).
//!
//! Errors end an attempt with an [`Error`] whose [`Error::disposition`] tells `sluice run`
//! what to do: restart from the committed checkpoint (the open Kafka transaction is aborted,
//! the simplest way never to publish a change twice), wait for a predecessor, or stop.

pub mod batch;
pub mod emit;
mod snapshot_rows;
use snapshot_rows::SnapshotWork;
pub mod start;
pub mod tables;
#[cfg(test)]
mod tests;

use std::fmt::Write as _;
use std::sync::Arc;

use sluice_binlog::event::Event;
use sluice_binlog::rows::{RowsEvent, RowsKind};
use sluice_binlog::transaction::{gtid_of, Step};
use sluice_binlog::walk::Located;

use crate::avro::{
    AvroEncoder, AvroError, Connector, EnvelopeParts, EventContext, Op, RowBuffers, Snapshot, SourceInfo,
    TransactionInfo,
};
use crate::config::{KafkaSection, OutputSection, ValueMode};
use crate::disposition::Disposition;
use crate::filter::TableFilter;
use crate::kafka::signals::SignalReader;
use crate::kafka::{schemas_topic, KafkaSink, TOO_LARGE_SETTINGS};
use crate::metrics::{Metrics, ProgressLog, Tally};
use crate::position::{BadCheckpoint, Checkpoint, ResumePoint, SnapshotProgress};
use crate::process::{now_ms, Shutdown};
use crate::registry::{RegistryClient, RegistryError};
use crate::schema::{RowEffect, SchemaError, SchemaHistory};
use crate::snapshot::{SnapshotError, Snapshotter};
use crate::source::{ReplicationSource, SourceError, SourceEvent};
use batch::Batch;
use emit::{Buffers, Out, Reading};
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
    /// A snapshot's reads.
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
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
        "a record of {}{size} bytes for table {table} (topic {topic}, key {key}) is larger than {by} accepts; \
         {TOO_LARGE_SETTINGS}", if *.at_least { "at least " } else { "" }
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
        /// `size` counts the row's values only: refused before its record was built.
        at_least: bool,
    },
    /// Captured tables that cannot be published under their names (topics or Avro field names
    /// that collide or that Kafka refuses), each with the setting that fixes it.
    #[error("the captured tables cannot be published as they are named:\n  - {}", .0.join("\n  - "))]
    Naming(Vec<String>),
    /// The stream ended or reconnected: the attempt starts again from the checkpoint.
    #[error("{0}; replaying from the committed checkpoint")]
    Interrupted(String),
}

impl Error {
    /// What `sluice run` does next.
    /// True when the source server could not be reached or the stream from it broke (what
    /// counts towards `source.failover_after`).
    pub fn source_unreachable(&self) -> bool {
        matches!(self, Error::Source(e) if e.disposition() == Disposition::Restart)
    }

    /// True when another instance (or `sluice position set`) took the source's transactional
    /// id over: this one must not write again, not even to say it stopped.
    pub fn is_fenced(&self) -> bool {
        match self {
            Error::Kafka(crate::kafka::Error::Fenced(_)) => true,
            Error::AtRow { source, .. } => source.is_fenced(),
            _ => false,
        }
    }

    pub fn disposition(&self) -> Disposition {
        match self {
            Error::Source(e) => e.disposition(),
            Error::Kafka(e) => e.disposition(),
            Error::Registry(e) => e.disposition(),
            Error::Snapshot(e) => e.disposition(),
            Error::AtRow { source, .. } => source.disposition(),
            Error::Interrupted(_) => Disposition::Restart,
            Error::Avro(_)
            | Error::Config(_)
            | Error::Schema(_)
            | Error::Checkpoint(_)
            | Error::Decode(_)
            | Error::TooLarge { .. }
            | Error::Naming(_) => Disposition::Stop,
        }
    }
}

/// Writes the tracked schema's changes since the last call to `topic` (`<prefix>.__schemas`)
/// in the open Kafka transaction: call right before committing it, so the history and the
/// checkpoint that covers the DDL commit together.
pub(crate) async fn send_schema_changes(
    schemas: &mut SchemaHistory,
    sink: &mut KafkaSink,
    topic: &str,
    source: &str,
) -> Result<(), Error> {
    let records = schemas
        .take_changes(source)
        .map_err(|e| crate::kafka::Error::Fatal(format!("writing the schema history: {e}")))?;
    for (key, value) in records {
        sink.send(topic, Some(key.as_bytes()), value.as_deref(), 0).await?;
    }
    Ok(())
}

/// What feeds the pipeline: decoded binlog events, each with what it means for its
/// transaction, and the resume point after the last complete one.
pub trait ChangeSource {
    /// The next event (None: the stream ended).
    fn next_change(&mut self) -> impl std::future::Future<Output = Result<Option<SourceEvent<'_>>, SourceError>>;
    /// Resolves once [`ChangeSource::next_change`] would not wait for the server. Cancel-safe
    /// (dropped before it resolves, it takes nothing), so the pipeline can wait for the stream
    /// and for its next commit's deadline at once. A source that cannot tell resolves at once.
    fn ready(&mut self) -> impl std::future::Future<Output = ()> {
        std::future::ready(())
    }
    /// True when what [`ChangeSource::ready`] saw is the connection failing or ending: the next
    /// event comes only after a reconnect (and the reconnect restarts the attempt).
    fn interrupted(&self) -> bool {
        false
    }
    /// The position after the last complete transaction.
    fn resume_point(&self) -> &ResumePoint;
    /// True while a transaction is open (no commit may happen then).
    fn in_transaction(&self) -> bool;
}

impl ChangeSource for ReplicationSource {
    fn next_change(&mut self) -> impl std::future::Future<Output = Result<Option<SourceEvent<'_>>, SourceError>> {
        self.next_event()
    }

    fn ready(&mut self) -> impl std::future::Future<Output = ()> {
        ReplicationSource::ready(self)
    }

    fn interrupted(&self) -> bool {
        ReplicationSource::interrupted(self)
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

/// Where a truncate record says it comes from: the statement's (or the snapshot's) binlog
/// position, the server and the time.
struct TruncateAt<'a> {
    file: &'a str,
    pos: u64,
    server_id: u32,
    ts_ms: i64,
    /// `source.snapshot`: `true` for the clear a new snapshot begins with.
    snapshot: Snapshot,
}

/// The open MySQL transaction, as the records' `transaction` block describes it.
#[derive(Debug, Default)]
struct OpenTransaction {
    gtid: Option<String>,
    id: String,
    total: i64,
    per_table: std::collections::HashMap<String, i64>,
}

impl OpenTransaction {
    /// Starts over for the transaction with `gtid` (its id, when it has one), keeping the
    /// buffers: transactions of one row are common, and a map and strings of their own each
    /// were allocations per transaction.
    fn reset(&mut self, gtid: Option<String>) {
        self.id.clear();
        if let Some(g) = &gtid {
            self.id.push_str(g);
        }
        self.gtid = gtid;
        self.total = 0;
        self.per_table.clear();
    }
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
    /// The one-pass record writer's buffers, kept from event to event.
    row_buffers: RowBuffers,
    /// The process's counters (they outlive this attempt) and its progress line.
    metrics: &'c Arc<Metrics>,
    /// What the open batch has done, counted once its Kafka transaction commits.
    tally: Tally,
    progress: &'c mut ProgressLog,
    /// When the event being handled was read, ms since the epoch.
    read_ms: i64,
    /// The snapshot progress in the last commit (a change is worth a checkpoint).
    committed_snapshot: Option<SnapshotProgress>,
    /// The `<prefix>.__signals` offset taken in so far (written into each checkpoint).
    signals_offset: Option<i64>,
    /// Requests from `sluice snapshot`, and when they were last looked for.
    signals: Option<(SignalReader, std::time::Instant)>,
    /// The stop came during a keyless table's one pass: the open Kafka transaction was aborted,
    /// not committed (see `snapshot_work`).
    stopped_uncommitted: bool,
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
            row_buffers: RowBuffers::default(),
            metrics,
            tally: Tally::default(),
            progress,
            read_ms: now_ms(),
            committed_snapshot: None,
            signals_offset: None,
            signals: None,
            stopped_uncommitted: false,
        }
    }

    /// True when the run stopped without committing what it read since the last commit (a stop
    /// during a keyless table's one pass); the checkpoint is then the last one committed.
    pub fn stopped_uncommitted(&self) -> bool {
        self.stopped_uncommitted
    }

    /// Takes in the requests `reader` brings (`sluice snapshot`).
    pub fn with_signals(mut self, reader: SignalReader) -> Self {
        self.signals = Some((reader, std::time::Instant::now()));
        self
    }

    /// At a boundary, about once a second: the snapshot requests that arrived are handed to
    /// `snap` (tables the filter does not capture are refused with a warning).
    fn take_signals(&mut self, snap: &mut Snapshotter) {
        let Some((reader, last)) = &mut self.signals else { return };
        if last.elapsed() < std::time::Duration::from_secs(1) {
            return;
        }
        *last = std::time::Instant::now();
        for (next, signal) in reader.poll() {
            self.signals_offset = Some(next);
            if signal.kind != "snapshot" {
                continue;
            }
            let filter = self.settings.filter;
            let (ok, refused): (Vec<String>, Vec<String>) = signal
                .tables
                .iter()
                .cloned()
                .partition(|t| t.split_once('.').is_some_and(|(db, table)| filter.matches(db, table)));
            if !refused.is_empty() {
                tracing::warn!(tables = %refused.join(", "), "Snapshot request for tables [filter] does not capture: ignored");
            }
            let added = snap.request(&ok, "signal");
            tracing::info!(
                requested = %ok.join(", "),
                added = %added.join(", "),
                "Snapshot requested (sluice snapshot); tables already being read are not read twice"
            );
        }
    }

    /// The snapshot progress and signals offset as committed with the checkpoint resumed from.
    pub fn with_committed(mut self, snapshot: Option<SnapshotProgress>, signals: Option<i64>) -> Self {
        self.committed_snapshot = snapshot;
        self.signals_offset = signals;
        self
    }

    /// Streams changes from `src`, and the rows `snap` reads between its transactions, into
    /// `sink` until `stop` is set (then it commits at the next boundary and returns; during a
    /// keyless table's one pass it aborts instead, see [`Pipeline::stopped_uncommitted`]) or an
    /// error ends the attempt (the open Kafka transaction is then aborted).
    ///
    /// # Errors
    /// Whatever ends the attempt; see [`Error::disposition`].
    pub async fn run(
        &mut self,
        src: &mut impl ChangeSource,
        snap: &mut Snapshotter,
        sink: &mut KafkaSink,
        stop: &Shutdown,
    ) -> Result<(), Error> {
        let result = self.stream(src, snap, sink, stop).await.map_err(|e| self.name_refused_record(e));
        if result.is_err() {
            // a failed abort leaves the transaction to time out; the next init_transactions fences it
            let _ = sink.abort().await;
        }
        result
    }

    async fn stream(
        &mut self,
        src: &mut impl ChangeSource,
        snap: &mut Snapshotter,
        sink: &mut KafkaSink,
        stop: &Shutdown,
    ) -> Result<(), Error> {
        loop {
            if !src.in_transaction() {
                self.take_signals(snap);
                if snap.is_active()
                    && !stop.is_requested()
                    && self.snapshot_work(src.resume_point(), snap, sink, stop).await? == SnapshotWork::Abandoned
                {
                    self.stopped_uncommitted = true;
                    return Ok(());
                }
            }
            // between transactions, a quiet stream waits no longer than the next commit's
            // deadline or the stop (both handled below, at the boundary)
            let event_due = src.in_transaction() || self.wait_for_stream(src, snap, sink, stop).await;
            if event_due && !src.in_transaction() && src.interrupted() {
                // the connection failed or ended between transactions: what was read whole is
                // committed before reconnecting, not aborted by the restart a reconnect makes
                // and read again once the server is back (a crashed primary may be away for
                // minutes, its last transactions already read)
                sink.poll().await?;
                self.maybe_commit(src.resume_point(), snap, sink, true).await?;
            }
            if event_due {
                match src.next_change().await? {
                    None => return Err(Error::Interrupted("the replication stream ended".into())),
                    Some(SourceEvent::Reconnected { at }) => {
                        return Err(Error::Interrupted(format!(
                            "the replication connection was re-established at {at}"
                        )));
                    }
                    Some(SourceEvent::Event(ev, step)) => {
                        // the clock read once per event, for all that wants the time (records'
                        // processing time, lag, the progress line)
                        self.read_ms = now_ms();
                        if let Event::Heartbeat { .. } = ev.event.event {
                            self.metrics.caught_up(self.read_ms / 1000);
                        } else {
                            self.metrics.event_read(ev.event.header.timestamp, self.read_ms / 1000);
                        }
                        self.handle(&ev, step, snap, sink).await?;
                        self.progress.tick(self.metrics, self.read_ms);
                    }
                }
            }
            if !src.in_transaction() {
                // a finished commit's outcome now, not at the next record (the stream may idle)
                sink.poll().await?;
                let stopping = stop.is_requested();
                if stopping {
                    // the last commit says so: `sluice position set` need not wait for it
                    self.commit(src.resume_point(), snap, sink, true).await?;
                    self.batch.committed();
                    self.committed = src.resume_point().clone();
                } else {
                    self.maybe_commit(src.resume_point(), snap, sink, false).await?;
                }
                if stopping {
                    sink.finish().await?;
                    self.progress.report(self.metrics);
                    tracing::info!(resume = %self.committed, "Stopped after committing");
                    return Ok(());
                }
            }
        }
    }

    /// Waits, between transactions, until the source has the next event (true), or until a
    /// commit falls due by time or the stop is asked for (false). Without it a batch sent just
    /// before the source went quiet waited for the server's next heartbeat (`source.heartbeat`,
    /// 5 s) to commit, and so did a stop.
    async fn wait_for_stream(
        &self,
        src: &mut impl ChangeSource,
        snap: &Snapshotter,
        sink: &KafkaSink,
        stop: &Shutdown,
    ) -> bool {
        let deadline = self.batch.deadline(sink.in_transaction(), self.moved(src.resume_point(), snap));
        tokio::select! {
            biased;
            () = src.ready() => true,
            () = stop.requested() => false,
            () = tokio::time::sleep_until(deadline.into()) => false,
        }
    }

    /// True when the resume point or the snapshot's progress moved since the last commit.
    fn moved(&self, resume: &ResumePoint, snap: &Snapshotter) -> bool {
        *resume != self.committed || snap.progress() != self.committed_snapshot.as_ref()
    }

    /// A record's context: its `source` block (`transaction` left to the caller: only a row
    /// change inside a MySQL transaction has one), with the processing time.
    #[allow(clippy::too_many_arguments)]
    fn context(
        &self,
        server_id: u32,
        ts_ms: i64,
        file: &str,
        pos: u64,
        processed_ms: i64,
        gtid: Option<String>,
        snapshot: Snapshot,
    ) -> EventContext {
        EventContext {
            source: SourceInfo {
                connector: self.connector,
                name: self.settings.source_name.to_string(),
                server_id,
                ts_ms,
                file: file.to_string(),
                pos,
                row: 0,
                gtid,
                snapshot,
            },
            transaction: None,
            ts_ms: processed_ms,
        }
    }

    /// At a boundary: commits the open Kafka transaction when the batch is due (or `force`);
    /// with no records pending, writes a checkpoint-only transaction now and then so a restart
    /// does not re-read a long stretch of uncaptured binlog.
    async fn maybe_commit(
        &mut self,
        resume: &ResumePoint,
        snap: &Snapshotter,
        sink: &mut KafkaSink,
        force: bool,
    ) -> Result<(), Error> {
        let (open, moved) = (sink.in_transaction(), self.moved(resume, snap));
        let due = (force && (open || moved))
            || self.batch.due(open, sink.transaction_bytes(), moved, self.schemas.has_pending());
        if due {
            self.commit(resume, snap, sink, false).await?;
            tracing::debug!(records = self.batch.records(), resume = %resume, "Committed a Kafka transaction");
            self.batch.committed();
            self.committed = resume.clone();
            self.committed_snapshot = snap.progress().cloned();
        }
        Ok(())
    }

    /// Commits the open Kafka transaction with the schema changes since the last commit and the
    /// checkpoint at `resume` (with the snapshot's progress), marked as the last one when
    /// `stopping`.
    async fn commit(
        &mut self,
        resume: &ResumePoint,
        snap: &Snapshotter,
        sink: &mut KafkaSink,
        stopping: bool,
    ) -> Result<(), Error> {
        let topic = schemas_topic(&self.settings.kafka.topic_prefix);
        send_schema_changes(&mut self.schemas, sink, &topic, self.settings.source_name).await?;
        // the batch's counts count once its transaction is through
        let tally = std::mem::take(&mut self.tally);
        let progress = snap.progress().cloned();
        let (m, file, pos) = (Arc::clone(self.metrics), resume.file.clone(), resume.position);
        let for_metrics = progress.clone();
        let then = move || {
            m.committed(tally);
            m.commit(&file, pos);
            if let Some(p) = &for_metrics {
                m.snapshot_progress(p);
            }
        };
        let checkpoint = Checkpoint::of(resume)
            .with_schema_version(self.schemas.version())
            .with_snapshot(progress, self.signals_offset)
            .renewed(stopping);
        sink.commit(&checkpoint, then).await?;
        Ok(())
    }

    async fn handle(
        &mut self,
        ev: &Located<'_>,
        step: Step,
        snap: &mut Snapshotter,
        sink: &mut KafkaSink,
    ) -> Result<(), Error> {
        match step {
            Step::Begin => self.begin_tx(ev),
            Step::Statement | Step::StatementBegins => {
                if let Event::Query(q) = &ev.event.event {
                    if q.error_code == 0 {
                        let at = format!("{}:{}", ev.file, ev.offset);
                        let version = self.schemas.version();
                        // read before the statement changes the tracked schema (DROP DATABASE)
                        let effects = self.schemas.row_effects(&q.schema, &q.query);
                        self.schemas.apply_query(
                            &q.schema,
                            &q.query,
                            q.status.charset_database,
                            &at,
                            self.settings.filter,
                        );
                        if step == Step::Statement {
                            snap.observe_statement(&q.query, self.schemas.version() != version, ev.file, ev.offset);
                        }
                        for effect in &effects {
                            self.row_effect(ev, effect, snap, sink).await?;
                        }
                    }
                }
                if step == Step::StatementBegins {
                    self.begin_tx(ev);
                } else {
                    self.end_tx(ev.event.header.timestamp);
                }
            }
            Step::Commit { .. } | Step::Rollback => self.end_tx(ev.event.header.timestamp),
            Step::Inside | Step::Outside => {
                if let Event::Rows(rows) = &ev.event.event {
                    if self.settings.filter.matches(&rows.table.database, &rows.table.table) {
                        self.rows(ev, rows, snap, sink).await?;
                    }
                }
            }
        }
        Ok(())
    }

    /// A statement that removed or moved rows without row events ([`RowEffect`]): an emptied
    /// captured table gets a truncate record on every partition of its topic, in this Kafka
    /// transaction (with the checkpoint past the statement); a rename or a partition
    /// maintenance is said, with what rebuilds the topic.
    async fn row_effect(
        &mut self,
        ev: &Located<'_>,
        effect: &RowEffect,
        snap: &mut Snapshotter,
        sink: &mut KafkaSink,
    ) -> Result<(), Error> {
        let filter = self.settings.filter;
        let at = format!("{}:{}", ev.file, ev.offset);
        match effect {
            RowEffect::Emptied { database, table, by } if filter.matches(database, table) => {
                snap.emptied(&format!("{database}.{table}"), by);
                let header = &ev.event.header;
                let at = TruncateAt {
                    file: ev.file,
                    pos: ev.offset,
                    server_id: header.server_id,
                    ts_ms: i64::from(header.timestamp) * 1000,
                    snapshot: Snapshot::No,
                };
                self.truncate(&at, database, table, by, sink).await
            }
            RowEffect::Renamed { from, to } if filter.matches(&from.0, &from.1) || filter.matches(&to.0, &to.1) => {
                let (from, to) = (format!("{}.{}", from.0, from.1), format!("{}.{}", to.0, to.1));
                snap.renamed(&from, &to);
                tracing::warn!(
                    from = %from,
                    to = %to,
                    at = %at,
                    "A rename moved a table's rows without row events: {from}'s topic keeps the records of its rows \
                     (they are not deleted there), and {to}'s has none of them; if {to} is captured, `sluice snapshot \
                     --table {to}` publishes them"
                );
                Ok(())
            }
            RowEffect::PartlyRemoved { database, table, by } if filter.matches(database, table) => {
                tracing::warn!(
                    table = %format!("{database}.{table}"),
                    at = %at,
                    "{by} removed or moved rows without row events, so the table's topic still holds them: to rebuild \
                     it, empty its consumers' copies and run `sluice snapshot --table {database}.{table}`"
                );
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Publishes the truncate record of `db.table` (emptied by statement `by` at `ev`) on every
    /// partition of its topic: the envelope with no images and `op = "t"` (flattened: `__op =
    /// "t"`, zeros), no key, under the table's latest registered value schema. A table with
    /// nothing registered yet has no records to clear.
    async fn truncate(
        &mut self,
        at: &TruncateAt<'_>,
        db: &str,
        table: &str,
        by: &str,
        sink: &mut KafkaSink,
    ) -> Result<(), Error> {
        let name = format!("{db}.{table}");
        let topic = self.settings.routes.topic_of(db, table);
        let flattened = self.settings.output.value_mode == ValueMode::Flattened;
        let (value_id, flat) = match self.tables.get(&name).filter(|t| t.topic == topic) {
            Some(t) => (t.value_id, flattened.then(|| t.schema.flat_schema().clone())),
            None => match self.registry.latest(&format!("{topic}-value")).await? {
                None => {
                    tracing::info!(table = %name, by, "The table was emptied before anything of it was published");
                    return Ok(());
                }
                Some((id, text)) => {
                    let flat = if flattened {
                        let schema = apache_avro::Schema::parse_str(&text).map_err(|e| AvroError::ForeignSchema {
                            table: name.clone(),
                            why: format!("schema {id} does not parse: {e}"),
                        })?;
                        Some(schema)
                    } else {
                        None
                    };
                    (id, flat)
                }
            },
        };
        let partitions = sink.partitions(&topic).await?;
        let ctx = self.context(at.server_id, at.ts_ms, at.file, at.pos, now_ms(), self.tx.gtid.clone(), at.snapshot);
        let mut value = Vec::new();
        crate::registry::frame_header(value_id, &mut value);
        match &flat {
            Some(schema) => self.encoder.write_flat_truncate(&name, schema, &mut value)?,
            None => self.encoder.write_truncate(db, table, &ctx, &mut value),
        }
        sink.send_to_every_partition(&topic, partitions, &value).await?;
        let n = usize::try_from(partitions).unwrap_or(0);
        self.batch.sent(n);
        self.tally.records(n as u64);
        let counters = self.metrics.table(&name);
        self.tally.rows(&counters, Op::Truncate, 1);
        tracing::info!(
            table = %name,
            topic = %topic,
            partitions,
            at = %format!("{}:{}", at.file, at.pos),
            "{by} emptied the table: a truncate record (op \"t\") on each partition of its topic"
        );
        Ok(())
    }

    /// At the end of a transaction (or of a statement of its own), read now, that the server
    /// committed at `server_ts` (seconds since the epoch).
    fn end_tx(&mut self, server_ts: u32) {
        if self.tx.total > 0 {
            self.tally.transaction(std::time::Instant::now(), server_ts);
        }
        self.tx.reset(None);
    }

    fn begin_tx(&mut self, ev: &Located<'_>) {
        self.tx.reset(gtid_of(&ev.event.event).map(|g| g.to_string()));
        if self.tx.gtid.is_none() {
            let _ = write!(self.tx.id, "{}:{}", ev.file, ev.offset);
        }
    }

    async fn rows(
        &mut self,
        ev: &Located<'_>,
        rows: &RowsEvent<'_>,
        snap: &mut Snapshotter,
        sink: &mut KafkaSink,
    ) -> Result<(), Error> {
        // without names in the TABLE_MAP, decode with the tracked schema's (checked) metadata
        let rows = self.schemas.resolve_rows(rows, ev.file, ev.offset)?;
        let header = &ev.event.header;
        // one context per event; only the row's counters change per row (its processing time
        // too: the rows of one event are processed within moments of each other)
        let ts_ms = i64::from(header.timestamp) * 1000;
        let (gtid, read_ms) = (self.tx.gtid.clone(), self.read_ms);
        let mut ctx = self.context(header.server_id, ts_ms, ev.file, ev.offset, read_ms, gtid, Snapshot::No);
        ctx.transaction = Some(TransactionInfo { id: self.tx.id.clone(), total_order: 0, data_collection_order: 0 });
        let t = self
            .tables
            .get_or_register(&rows.table, &self.settings, &mut self.registry, self.metrics, &self.schemas)
            .await?;
        sink.ensure_topic(&t.topic).await?;
        let name = rows.table.qualified_name();
        // a snapshot chunk read meanwhile leaves the rows this event changes to it
        let watched = snap.watches(&name);
        let per_table = self.tx.per_table.entry(name.clone()).or_insert(0);
        let value_bytes_bound = Some(rows.value_bytes_bound());
        // the envelope's bytes that only `ctx.source.row` and the counters change: once here
        let envelope = (self.settings.output.value_mode == ValueMode::Envelope)
            .then(|| EnvelopeParts::new(&ctx, &t.schema.database, &t.schema.table));
        // rows written into Avro as they are decoded, or decoded into one RowChange refilled
        // per row: no allocation per row either way
        let mut reading = Reading::new(
            &self.encoder,
            t,
            self.settings.output,
            (rows.value_bytes_bound(), rows.full_images()),
            &rows.table.columns,
            envelope.as_ref(),
            sink.max_message_bytes(),
            watched,
            &mut self.row_buffers,
        );
        let mut iter = rows.rows();
        let (mut idx, mut records) = (0usize, 0usize);
        while let Some(res) = reading.next(&mut iter) {
            res.map_err(|e| e.at(ev.file, ev.offset, header.event_type))?;
            if let Some(row) = reading.values().filter(|_| watched) {
                snap.observe_row(&name, ev.file, ev.offset, row);
            }
            self.tx.total += 1;
            *per_table += 1;
            ctx.source.row = u32::try_from(idx).unwrap_or(u32::MAX);
            if let Some(tr) = ctx.transaction.as_mut() {
                tr.total_order = self.tx.total;
                tr.data_collection_order = *per_table;
            }
            let out = Out {
                encoder: &self.encoder,
                table: t,
                output: self.settings.output,
                ctx: &ctx,
                value_bytes_bound,
                envelope: envelope.as_ref(),
            };
            let sent = match reading.images() {
                Ok(images) => out.change(sink, rows.kind, images, &mut self.buffers).await,
                Err(e) => Err(e),
            }
            .map_err(|e| match e {
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
        reading.finish(&mut self.row_buffers);
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
        // the broker's refusal of an earlier record surfaces at whatever the pipeline does
        // next: name the refused record, not the row at hand
        let refused = match &e {
            Error::AtRow { source, .. } => source.as_ref(),
            other => other,
        };
        let Error::Kafka(crate::kafka::Error::TooLarge { topic, size, by, key: Some(key) }) = refused else { return e };
        let Some(t) = self.tables.by_topic(topic) else { return e };
        // `column=value, ...` as a refusal found while sending names it (emit.rs)
        let key_text = emit::key_text(&t.schema, key.get(5..).unwrap_or_default());
        Error::TooLarge {
            table: t.tm.qualified_name(),
            topic: topic.clone(),
            key: key_text,
            size: *size,
            by: by.clone(),
            at_least: false,
        }
    }
}
