//! `sluice run`: the publisher pipeline.
//!
//! Replication source (resumed from the last committed checkpoint) → row changes of the
//! included tables → Avro key and value (schemas registered per table version) → records in a
//! Kafka transaction, committed together with a checkpoint at a MySQL transaction boundary once
//! `batch_max_records`, `batch_max_bytes` or `batch_max_delay` is reached. A MySQL transaction is never split:
//! a huge one streams into one Kafka transaction (records go straight to librdkafka, whose
//! bounded queue holds memory flat). A commit runs while the next batch is decoded and encoded
//! (`KafkaSink` holds that batch's records until the commit is through), so the commit's round
//! trip to the broker costs no decoding time.
//!
//! Errors end a pipeline attempt with a [`RunError`]: `Restart` (transient: the open Kafka
//! transaction is aborted and the whole pipeline starts again from the committed checkpoint,
//! which is the simplest way to never publish a change twice) or `Fatal` (exit non-zero with
//! an operator message). A replication reconnect also restarts: the source's own resume point
//! may be ahead of the committed checkpoint when boundaries passed inside the aborted Kafka
//! transaction.
//!
//! The commit check runs on every event, including the server's heartbeats, so an idle
//! stream commits within `max(batch_max_delay, source.heartbeat)`; SIGTERM and Ctrl-C are
//! noticed the same way and commit at the next boundary before exiting 0.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_binlog::decoder::DecoderOptions;
use sluice_binlog::event::Event;
use sluice_binlog::file::Located;
use sluice_binlog::rows::{RowChange, RowImage, RowsEvent, RowsKind};
use sluice_binlog::TableMap;

use crate::avro::{AvroEncoder, Connector, EventContext, Op, SchemaOptions, SourceInfo, TableSchema, TransactionInfo};
use crate::config::{Config, OutputSection, ValueMode};
use crate::exit;
use crate::filter::wildcard;
use crate::kafka::{now_ms, read_checkpoint, Checkpoint, KafkaSink, SinkError, TOO_LARGE_SETTINGS};
use crate::metrics::{Metrics, ProgressLog, TableCounters, Tally};
use crate::registry::{frame_header, RegistryClient, RegistryError};
use crate::schema_history::{schemas_topic, SchemaHistory};
use crate::source::{
    connect_options, CheckedConnection, ReplicationSource, ResumePoint, SourceConfig, SourceError, SourceEvent,
    StartFrom,
};

/// `sluice run` arguments.
#[derive(Debug, clap::Args)]
#[command(after_long_help = "\
Examples:
  sluice check --config sluice.toml && sluice run --config sluice.toml
  SLUICE_KAFKA__BROKERS=kafka-0:9092 sluice run --config sluice.toml --log-format json

Each Kafka transaction holds whole MySQL transactions and the checkpoint of the last one (topic
<prefix>.__positions); a restart resumes from the last committed checkpoint, so nothing is lost or
published twice. SIGTERM or Ctrl-C commits at the next transaction boundary and exits 0. Exit 1:
a fenced producer (another instance with the same source.name), an incompatible schema, an
undecodable event, or a source that keeps failing; exit 2: a bad configuration.")]
pub struct RunArgs {
    /// The configuration file (TOML; see sluice.example.toml).
    #[arg(long, short = 'c', env = "SLUICE_CONFIG")]
    pub config: PathBuf,
}

/// Why a pipeline attempt ended.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Transient: start again from the last committed checkpoint.
    #[error("{0}")]
    Restart(String),
    /// Definite: stop and tell the operator.
    #[error("{0}")]
    Fatal(String),
    /// This source's own predecessor (stopped or killed moments ago) still holds the server id:
    /// not a failure; the server drops it within a heartbeat.
    #[error("{0}")]
    Predecessor(String),
    /// Definite: a record Kafka refuses as too large, to be named by its table and key before
    /// the stop ([`Pipeline::name_refused_record`]).
    #[error("{0}; {TOO_LARGE_SETTINGS}")]
    TooLarge(SinkError),
}

impl From<SinkError> for RunError {
    fn from(e: SinkError) -> Self {
        match e {
            SinkError::Abortable(m) => RunError::Restart(m),
            SinkError::Fatal(m) => RunError::Fatal(m),
            e @ SinkError::TooLarge { .. } => RunError::TooLarge(e),
        }
    }
}

impl From<SourceError> for RunError {
    fn from(e: SourceError) -> Self {
        // a server down for longer than the source's own reconnection attempts: keep trying
        // ... and our own predecessor still holding the server id (after a SIGKILL or a
        // restart), which the server drops within a heartbeat once its socket is gone
        if e.is_predecessor_registered() {
            RunError::Predecessor(e.to_string())
        } else if e.is_transient() || matches!(e, SourceError::GaveUp { .. }) {
            RunError::Restart(e.to_string())
        } else {
            RunError::Fatal(e.to_string())
        }
    }
}

impl From<RegistryError> for RunError {
    fn from(e: RegistryError) -> Self {
        if e.is_transient() {
            RunError::Restart(e.to_string())
        } else {
            RunError::Fatal(e.to_string())
        }
    }
}

impl From<crate::avro::AvroError> for RunError {
    fn from(e: crate::avro::AvroError) -> Self {
        RunError::Fatal(e.to_string())
    }
}

/// The host name `sluice run` reports to the server: `sluice-<source.name>`, so that a
/// predecessor of the same source is told from a different replica with the same server id.
pub fn report_host(cfg: &Config) -> String {
    format!("sluice-{}", cfg.source.name)
}

/// Runs `sluice run`; returns the exit code.
pub fn run(args: RunArgs) -> u8 {
    let cfg = match Config::load(&args.config, std::env::vars()) {
        Ok(c) => c,
        Err(e) => {
            crate::eline!("sluice run: {e}");
            return exit::USAGE;
        }
    };
    let rt = match crate::source::runtime() {
        Ok(rt) => rt,
        Err(e) => {
            crate::eline!("sluice run: cannot start the runtime: {e}");
            return exit::FAILURE;
        }
    };
    let code = rt.block_on(async {
        let stop = Arc::new(AtomicBool::new(false));
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let flag = Arc::clone(&stop);
        tokio::spawn(async move {
            crate::dump::shutdown_signal().await;
            tracing::info!("Stopping at the next transaction boundary");
            flag.store(true, Ordering::SeqCst);
            let _ = stop_tx.send(true);
        });
        let metrics = Arc::new(Metrics::new(&cfg.source.name));
        // Resolves after a stop was asked for: at once while nothing streams (connecting,
        // waiting for Kafka or the source: nothing is in flight), else STOP_GRACE later, when a
        // pipeline inside a long MySQL transaction is dropped. That loses nothing: its open
        // Kafka transaction is never committed, and the next start aborts it and replays from
        // the last committed checkpoint.
        let stopped = |mut rx: tokio::sync::watch::Receiver<bool>, m: Arc<Metrics>| async move {
            let _ = rx.wait_for(|s| *s).await;
            if m.is_ready() {
                tokio::time::sleep(STOP_GRACE).await;
                tracing::warn!(
                    "No transaction boundary within {STOP_GRACE:?} of the stop signal: stopping without \
                     committing; the next start replays from the last committed checkpoint"
                );
            } else {
                tracing::info!("Stopped while connecting: nothing was in flight");
            }
        };
        // bound before anything else starts, so a taken port is a configuration error at once
        if let Some(addr) = cfg.metrics.listen {
            match tokio::net::TcpListener::bind(addr).await {
                Ok(listener) => {
                    tracing::info!(%addr, "Serving /metrics, /healthz and /readyz");
                    tokio::spawn(crate::metrics::serve(listener, Arc::clone(&metrics)));
                }
                Err(e) => {
                    crate::eline!("sluice run: metrics.listen {addr}: {e}");
                    return exit::USAGE;
                }
            }
        }
        if let Ok(connect) = crate::source::connect_options(&cfg) {
            tokio::spawn(crate::metrics::watch_server(connect, Arc::clone(&metrics), cfg.source.heartbeat));
        }
        let mut backoff = Duration::from_secs(1);
        let mut progress = ProgressLog::default();
        let mut first_start = tokio::select! {
            s = resolve_early(&cfg) => s,
            () = stopped(stop_rx.clone(), Arc::clone(&metrics)) => return exit::OK,
        };
        loop {
            let started = Instant::now();
            let outcome = tokio::select! {
                r = pipeline(&cfg, &stop, &metrics, &mut progress, &mut first_start) => r,
                () = stopped(stop_rx.clone(), Arc::clone(&metrics)) => return exit::OK,
            };
            metrics.set_ready(false);
            match outcome {
                Ok(()) => return exit::OK,
                Err(e @ (RunError::Fatal(_) | RunError::TooLarge(_))) => {
                    tracing::error!("{e}");
                    crate::eline!("sluice run: {e}");
                    return exit::FAILURE;
                }
                Err(e @ (RunError::Restart(_) | RunError::Predecessor(_))) => {
                    if stop.load(Ordering::SeqCst) {
                        return exit::OK;
                    }
                    if started.elapsed() > Duration::from_secs(60) {
                        backoff = Duration::from_secs(1);
                    }
                    let wait = if let RunError::Predecessor(_) = e {
                        // not a failure: the server drops the dead connection at its next heartbeat
                        let wait = cfg.source.heartbeat / 2 + Duration::from_millis(200);
                        tracing::info!(wait = ?wait, "Waiting for the server to drop this source's previous connection");
                        wait
                    } else {
                        tracing::warn!(error = %e, wait = ?backoff, "Restarting from the last committed checkpoint");
                        metrics.restart();
                        let wait = backoff;
                        backoff = (backoff * 2).min(Duration::from_secs(30));
                        wait
                    };
                    let mut rx = stop_rx.clone();
                    tokio::select! {
                        () = tokio::time::sleep(wait) => {}
                        _ = rx.wait_for(|s| *s) => return exit::OK,
                    }
                }
            }
        }
    });
    // blocking Kafka calls of a dropped pipeline may still be waiting on the broker
    rt.shutdown_timeout(Duration::from_secs(2));
    code
}

/// How long a stop signal waits for the next transaction boundary.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// Where a checkpoint says to resume.
fn start_from_checkpoint(c: &Checkpoint) -> Result<StartFrom, RunError> {
    let bad = |e: String| RunError::Fatal(format!("the checkpoint's GTID {:?} is unreadable: {e}", c.gtid));
    Ok(match (&c.gtid, c.gtid_flavor.as_deref()) {
        (Some(g), Some("mysql")) => StartFrom::MysqlGtid(g.parse().map_err(|e| bad(format!("{e}")))?),
        (Some(g), Some("mariadb")) => StartFrom::MariadbGtid(g.parse().map_err(|e| bad(format!("{e}")))?),
        _ => StartFrom::Position { file: c.file.clone(), position: c.position },
    })
}

/// True when `db.table` matches a pattern (`db.table` with wildcards, or a table name in any
/// database).
fn pattern_matches(pattern: &str, db: &str, table: &str) -> bool {
    match pattern.split_once('.') {
        Some((pd, pt)) => wildcard(pd, db) && wildcard(pt, table),
        None => wildcard(pattern, table),
    }
}

/// True when the configured filter captures `db.table`.
fn included(cfg: &Config, db: &str, table: &str) -> bool {
    let f = &cfg.filter;
    (f.include.is_empty() || f.include.iter().any(|p| pattern_matches(p, db, table)))
        && !f.exclude.iter().any(|p| pattern_matches(p, db, table))
}

/// The column-name patterns `filter.exclude_columns` names for `db.table` (its entries are
/// `db.table.column`, each part a wildcard pattern).
fn excluded_columns(cfg: &Config, db: &str, table: &str) -> Vec<String> {
    cfg.filter
        .exclude_columns
        .iter()
        .filter_map(|p| {
            let mut parts = p.splitn(3, '.');
            let (d, t, c) = (parts.next()?, parts.next()?, parts.next()?);
            (wildcard(d, db) && wildcard(t, table)).then(|| c.to_string())
        })
        .collect()
}

/// The topic of `db.table`: the first matching route, else `<prefix>.<db>.<table>`.
fn topic_of(cfg: &Config, db: &str, table: &str) -> String {
    for r in &cfg.routes {
        if pattern_matches(&r.tables, db, table) {
            return r.topic.replace("{db}", db).replace("{table}", table);
        }
    }
    format!("{}.{db}.{table}", cfg.kafka.topic_prefix)
}

/// One table version: its schemas, topic and registered ids.
struct CachedTable {
    tm: Arc<TableMap>,
    schema: TableSchema,
    topic: String,
    key_id: Option<u32>,
    value_id: u32,
    /// Its row-change counters (`sluice_row_changes_total{table}`).
    counters: TableCounters,
}

/// The open MySQL transaction.
#[derive(Default)]
struct MysqlTx {
    open: bool,
    gtid: Option<String>,
    id: String,
    total: i64,
    per_table: HashMap<String, i64>,
}

/// The state of one pipeline attempt.
struct Pipeline<'c> {
    cfg: &'c Config,
    registry: RegistryClient,
    encoder: AvroEncoder,
    tables: HashMap<String, CachedTable>,
    tx: MysqlTx,
    connector: Connector,
    batch_records: usize,
    batch_started: Instant,
    last_commit: Instant,
    committed: ResumePoint,
    /// Column names for TABLE_MAPs without them (see `schema_history`).
    schemas: SchemaHistory,
    buffers: Buffers,
    /// The process's counters (they outlive this attempt) and its progress line.
    metrics: &'c Arc<Metrics>,
    /// What the open batch has done, counted once its Kafka transaction commits.
    tally: Tally,
    progress: &'c mut ProgressLog,
}

/// The configured start (`source.start`), resolved at the server into a position, with the
/// captured tables' definitions as of that position.
#[derive(Debug, Clone)]
pub struct ResolvedStart {
    resume: ResumePoint,
    tables: Vec<crate::schema_history::TrackedTable>,
}

/// How `sluice run` connects to and streams from the source.
pub fn source_config(cfg: &Config) -> Result<SourceConfig, RunError> {
    Ok(SourceConfig {
        connect: connect_options(cfg).map_err(RunError::Fatal)?,
        server_id: cfg.source.server_id,
        server_id_setting: "source.server_id",
        report_host: report_host(cfg),
        heartbeat: cfg.source.heartbeat,
        follow: true,
        initial_backoff: Duration::from_millis(250),
        max_backoff: Duration::from_secs(30),
        max_attempts: Some(3),
        decoder: DecoderOptions::default(),
    })
}

/// Resolves `source.start` at the server (see [`ResolvedStart`]).
async fn resolve_configured_start(cfg: &Config) -> Result<ResolvedStart, RunError> {
    let mut checked = CheckedConnection::open(&source_config(cfg)?).await?;
    let start = resolve_at(cfg, &mut checked, &cfg.source.start).await?;
    tracing::info!(start = %cfg.source.start, position = %start.resume, "Resolved the configured start at the server");
    Ok(start)
}

/// Resolves `start` on a checked connection, with the captured tables' definitions.
pub async fn resolve_at(
    cfg: &Config,
    checked: &mut CheckedConnection,
    start: &StartFrom,
) -> Result<ResolvedStart, RunError> {
    let captured = |db: &str, table: &str| included(cfg, db, table);
    let (resume, tables) = checked.resolve(start, Some(&captured)).await?;
    Ok(ResolvedStart { resume, tables })
}

/// Commits `start` as the source's checkpoint, in a Kafka transaction of its own, with the
/// tables' definitions as a new schema history that supersedes what `committed` holds; returns
/// that history once the commit is through.
pub async fn commit_start(
    cfg: &Config,
    sink: &mut KafkaSink,
    committed: crate::schema_history::Committed,
    start: ResolvedStart,
    then: impl FnOnce() + Send + 'static,
) -> Result<SchemaHistory, RunError> {
    let mut schemas = committed.into_history(start.tables);
    schemas.flush(sink, &schemas_topic(cfg), &cfg.source.name).await?;
    sink.commit(&Checkpoint::of(&start.resume).with_schema_version(schemas.version()), then).await?;
    sink.finish().await?;
    Ok(schemas)
}

impl ResolvedStart {
    /// The position.
    pub fn resume(&self) -> &ResumePoint {
        &self.resume
    }
}

/// Resolves a relative `source.start` (`current`, `earliest`) as `sluice run` begins, before
/// Kafka is contacted: a broker that answers only later must not move the start past the
/// changes written meanwhile. Unused when a checkpoint turns out to exist; a source that does
/// not answer yet is resolved when it does.
pub async fn resolve_early(cfg: &Config) -> Option<ResolvedStart> {
    if !matches!(cfg.source.start, StartFrom::Current | StartFrom::Earliest) {
        return None;
    }
    match resolve_configured_start(cfg).await {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(error = %e, "Cannot resolve source.start yet; it is resolved once the source answers");
            None
        }
    }
}

/// One pipeline attempt. `first_start` holds the configured start resolved at the server while
/// no checkpoint exists: it is recorded as the first checkpoint, in a Kafka transaction of its
/// own, before anything is published, so every later attempt resumes from it.
async fn pipeline(
    cfg: &Config,
    stop: &AtomicBool,
    metrics: &Arc<Metrics>,
    progress: &mut ProgressLog,
    first_start: &mut Option<ResolvedStart>,
) -> Result<(), RunError> {
    let mut sink = KafkaSink::connect(cfg).await?;
    sink.time_commits(metrics.commit_timer());
    let cfg2 = cfg.clone();
    let checkpoint = tokio::task::spawn_blocking(move || read_checkpoint(&cfg2))
        .await
        .map_err(|e| RunError::Fatal(format!("reading the checkpoint: {e}")))??;
    let source_cfg = source_config(cfg)?;
    // the tracked schema: as committed with the checkpoint, else read from the server at the
    // moment the start position is taken
    let committed = crate::schema_history::committed(cfg, checkpoint.as_ref()).await?;
    let captured = |db: &str, table: &str| included(cfg, db, table);
    let (mut src, mut schemas) = match &checkpoint {
        Some(c) => {
            *first_start = None;
            let start = start_from_checkpoint(c)?;
            tracing::info!(resume = %start, "Resuming from the committed checkpoint");
            let load: Option<crate::schema_history::Captured<'_>> = committed.needs_load().then_some(&captured);
            let (src, loaded) = ReplicationSource::start_with_schema(source_cfg, start, load).await?;
            (src, committed.into_history(loaded))
        }
        None => {
            let start = match first_start.as_ref() {
                Some(s) => s.clone(),
                None => {
                    let s = resolve_configured_start(cfg).await?;
                    first_start.insert(s).clone()
                }
            };
            // Record where the first start begins before anything is published: a restart of
            // this attempt (broker, registry, a fenced or failed transaction) resumes here,
            // never at a later "current".
            let resume = start.resume.clone();
            let (m, file, pos) = (Arc::clone(metrics), resume.file.clone(), resume.position);
            let schemas = commit_start(cfg, &mut sink, committed, start, move || m.commit(&file, pos)).await?;
            *first_start = None;
            tracing::info!(
                start = %cfg.source.start,
                position = %resume,
                "No checkpoint yet: recorded the configured start as the first checkpoint"
            );
            let checked = CheckedConnection::open(&source_cfg).await?;
            (ReplicationSource::open(source_cfg, checked, resume).await?, schemas)
        }
    };
    schemas.set_lower_case_table_names(src.lower_case_table_names());
    metrics.set_ready(true);
    let mut p = Pipeline {
        cfg,
        registry: {
            let mut r = RegistryClient::new(&cfg.registry).map_err(RunError::Fatal)?;
            r.count_requests(metrics.registry());
            r
        },
        encoder: AvroEncoder::new(),
        tables: HashMap::new(),
        tx: MysqlTx::default(),
        connector: if src.is_mariadb() { Connector::Mariadb } else { Connector::Mysql },
        batch_records: 0,
        batch_started: Instant::now(),
        last_commit: Instant::now(),
        committed: src.resume_point().clone(),
        schemas,
        buffers: Buffers::default(),
        metrics,
        tally: Tally::default(),
        progress,
    };
    let result = p.stream(&mut src, &mut sink, stop).await.map_err(|e| p.name_refused_record(e));
    if result.is_err() {
        // a failed abort leaves the transaction to time out; the next init_transactions fences it
        let _ = sink.abort().await;
    }
    result
}

impl Pipeline<'_> {
    /// A record the broker refused as too large comes back with its topic and key bytes: name
    /// its table and key (decoded with the key schema) in the stop message.
    fn name_refused_record(&self, e: RunError) -> RunError {
        let RunError::TooLarge(SinkError::TooLarge { topic, size, by, key: Some(key) }) = &e else { return e };
        let Some(t) = self.tables.values().find(|t| &t.topic == topic) else { return e };
        let key_text = t
            .schema
            .key_schema()
            .and_then(|schema| apache_avro::from_avro_datum(schema, &mut key.get(5..).unwrap_or_default(), None).ok())
            .and_then(|v| serde_json::Value::try_from(v).ok())
            .map_or_else(|| "unreadable".to_string(), |v| v.to_string());
        RunError::Fatal(format!(
            "a record of {size} bytes for table {} (topic {topic}, key {key_text}) is larger than {by} accepts; {TOO_LARGE_SETTINGS}",
            t.tm.qualified_name(),
        ))
    }

    async fn stream(
        &mut self,
        src: &mut ReplicationSource,
        sink: &mut KafkaSink,
        stop: &AtomicBool,
    ) -> Result<(), RunError> {
        loop {
            match src.next_event().await? {
                None => return Err(RunError::Restart("the replication stream ended".into())),
                Some(SourceEvent::Reconnected { at }) => {
                    return Err(RunError::Restart(format!(
                        "the replication connection was re-established at {at}; replaying from the committed checkpoint"
                    )));
                }
                Some(SourceEvent::Event(ev)) => {
                    if let Event::Heartbeat { .. } = ev.event.event {
                        self.metrics.caught_up();
                    } else {
                        self.metrics.event_read(ev.event.header.timestamp, now_ms() / 1000);
                    }
                    self.handle(&ev, sink).await?;
                    self.progress.tick(self.metrics);
                }
            }
            if !self.tx.open {
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

    /// At a boundary: commits the open Kafka transaction when the batch is full or old enough
    /// (or `force`); with no records pending, writes a checkpoint-only transaction now and then
    /// so a restart does not re-read a long stretch of uncaptured binlog.
    async fn maybe_commit(&mut self, resume: &ResumePoint, sink: &mut KafkaSink, force: bool) -> Result<(), RunError> {
        let delay = self.cfg.kafka.batch_max_delay;
        if sink.in_transaction() {
            let k = &self.cfg.kafka;
            if force
                || self.batch_records >= k.batch_max_records
                || sink.transaction_bytes() >= k.batch_max_bytes
                || self.batch_started.elapsed() >= delay
            {
                self.commit(resume, sink).await?;
                tracing::debug!(records = self.batch_records, resume = %resume, "Committed a Kafka transaction");
                self.batch_records = 0;
                self.last_commit = Instant::now();
                self.committed = resume.clone();
            }
        } else if *resume != self.committed
            && (force || self.last_commit.elapsed() >= delay.max(Duration::from_secs(1)) || self.schemas.has_pending())
        {
            self.commit(resume, sink).await?;
            self.last_commit = Instant::now();
            self.committed = resume.clone();
        }
        Ok(())
    }

    /// Commits the open Kafka transaction with the schema changes since the last commit and the
    /// checkpoint at `resume`.
    async fn commit(&mut self, resume: &ResumePoint, sink: &mut KafkaSink) -> Result<(), RunError> {
        self.schemas.flush(sink, &schemas_topic(self.cfg), &self.cfg.source.name).await?;
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

    async fn handle(&mut self, ev: &Located<'_>, sink: &mut KafkaSink) -> Result<(), RunError> {
        match &ev.event.event {
            Event::Gtid(g) => self.begin_tx((!g.anonymous).then(|| g.gtid.to_string()), ev),
            Event::MariadbGtid(g) => self.begin_tx(Some(g.gtid.to_string()), ev),
            // after a GTID event the transaction is already open
            Event::Query(q) if q.is_begin() && !self.tx.open => self.begin_tx(None, ev),
            Event::Query(q) if q.is_begin() => {}
            // COMMIT, ROLLBACK, or a statement of its own (DDL): a boundary
            Event::Query(q) => {
                if !q.is_commit() && !q.is_rollback() && q.error_code == 0 {
                    let cfg = self.cfg;
                    let captured = |db: &str, table: &str| included(cfg, db, table);
                    let at = format!("{}:{}", ev.file, ev.offset);
                    self.schemas.apply_query(&q.schema, &q.query, q.status.charset_database, &at, &captured);
                }
                self.end_tx();
            }
            Event::Xid(_) => self.end_tx(),
            Event::Rows(rows) if included(self.cfg, &rows.table.database, &rows.table.table) => {
                self.rows(ev, rows, sink).await?;
            }
            _ => {}
        }
        Ok(())
    }

    /// At COMMIT, XID, ROLLBACK or a DDL statement.
    fn end_tx(&mut self) {
        if self.tx.total > 0 {
            self.tally.transaction();
        }
        self.tx = MysqlTx::default();
    }

    fn begin_tx(&mut self, gtid: Option<String>, ev: &Located<'_>) {
        let id = gtid.clone().unwrap_or_else(|| format!("{}:{}", ev.file, ev.offset));
        self.tx = MysqlTx { open: true, gtid, id, total: 0, per_table: HashMap::new() };
    }

    /// The cached schemas of a table version, building and registering them when new.
    async fn table(&mut self, tm: &Arc<TableMap>) -> Result<(), RunError> {
        let name = tm.qualified_name();
        if let Some(c) = self.tables.get(&name) {
            if Arc::ptr_eq(&c.tm, tm) || *c.tm == **tm {
                return Ok(());
            }
        }
        let opts = SchemaOptions {
            prefix: self.cfg.kafka.topic_prefix.clone(),
            key_columns: self.cfg.output.key_columns.get(&name).cloned(),
            exclude_columns: excluded_columns(self.cfg, &tm.database, &tm.table),
            partial_images: self.cfg.output.partial_images,
            ..SchemaOptions::default()
        };
        let schema = TableSchema::new(tm, &opts)?;
        let topic = topic_of(self.cfg, &tm.database, &tm.table);
        let key_id = match schema.key_schema_json() {
            Some(k) => Some(self.registry.register(&format!("{topic}-key"), &k).await?),
            None => None,
        };
        let value_json = match self.cfg.output.value_mode {
            ValueMode::Envelope => schema.value_schema_json(),
            ValueMode::Flattened => schema.flat_schema_json(),
        };
        let value_id = self.registry.register(&format!("{topic}-value"), &value_json).await?;
        let key = key_id.map_or_else(|| "none (no key)".to_string(), |id| id.to_string());
        tracing::info!(table = %name, topic = %topic, key_id = %key, value_id, "Registered the table's schemas");
        let counters = self.metrics.table(&name);
        self.tables.insert(name, CachedTable { tm: Arc::clone(tm), schema, topic, key_id, value_id, counters });
        Ok(())
    }

    async fn rows(&mut self, ev: &Located<'_>, rows: &RowsEvent<'_>, sink: &mut KafkaSink) -> Result<(), RunError> {
        // without names in the TABLE_MAP, decode with the tracked schema's (checked) metadata
        let table = self.schemas.resolve(&rows.table, ev.file, ev.offset).map_err(RunError::Fatal)?;
        let filled;
        let rows = if Arc::ptr_eq(&table, &rows.table) {
            rows
        } else {
            filled = {
                let mut r = rows.clone();
                r.table = table;
                r
            };
            &filled
        };
        self.table(&rows.table).await?;
        let name = rows.table.qualified_name();
        let Some(t) = self.tables.get(&name) else { return Ok(()) };
        sink.ensure_topic(&t.topic).await?;
        let header = &ev.event.header;
        // one context per event; only the row's counters change per row
        let mut ctx = EventContext {
            source: SourceInfo {
                connector: self.connector,
                name: self.cfg.source.name.clone(),
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
        let per_table = self.tx.per_table.entry(name.clone()).or_insert(0);
        // one RowChange for the event, refilled per row: no allocation per row
        let mut row = RowChange { before: None, after: None };
        let mut iter = rows.rows();
        let (mut idx, mut records) = (0usize, 0usize);
        while let Some(res) = iter.next_into(&mut row) {
            res.map_err(|e| RunError::Fatal(e.at(ev.file, ev.offset, header.event_type).to_string()))?;
            self.tx.total += 1;
            *per_table += 1;
            ctx.source.row = u32::try_from(idx).unwrap_or(u32::MAX);
            if let Some(t) = ctx.transaction.as_mut() {
                t.total_order = self.tx.total;
                t.data_collection_order = *per_table;
            }
            let out = Out { encoder: &self.encoder, table: t, output: &self.cfg.output, ctx: &ctx };
            let (before, after) = (row.before.as_ref(), row.after.as_ref());
            let Buffers { key_before, key_after, value } = &mut self.buffers;
            let sent = async {
                Ok::<_, RunError>(match rows.kind {
                    RowsKind::Write => {
                        let key = out.key(after, key_after)?.then_some(&key_after[..]);
                        out.emit(sink, Op::Create, key, None, after, value).await?
                    }
                    RowsKind::Delete => {
                        let key = out.key(before, key_before)?.then_some(&key_before[..]);
                        out.emit(sink, Op::Delete, key, before, None, value).await?
                    }
                    RowsKind::Update | RowsKind::PartialUpdate => {
                        let kb = out.key(before, key_before)?.then_some(&key_before[..]);
                        // MINIMAL after images hold only the changed columns: a key column they
                        // lack is unchanged, so it comes from the before image
                        let ka = match (before, after) {
                            (Some(b), Some(a)) => out.key(Some(&with_key_from(a, b, &t.schema)), key_after)?,
                            _ => out.key(after, key_after)?,
                        }
                        .then_some(&key_after[..]);
                        if kb != ka {
                            // the primary key changed: keyed consumers must drop the old row
                            out.emit(sink, Op::Delete, kb, before, None, value).await?
                                + out.emit(sink, Op::Create, ka, None, after, value).await?
                        } else {
                            out.emit(sink, Op::Update, kb, before, after, value).await?
                        }
                    }
                })
            }
            .await
            .map_err(|e| match e {
                // an operator needs to know where: the message names table and column
                RunError::Fatal(m) => {
                    RunError::Fatal(format!("{m} (binlog {}, offset {}, row {idx})", ev.file, ev.offset))
                }
                other => other,
            })?;
            if self.batch_records == 0 {
                self.batch_started = Instant::now();
            }
            self.batch_records += sent;
            records += sent;
            idx += 1;
        }
        // counted once per event (shared atomics, read by the metrics endpoint)
        self.tally.records(records as u64);
        let op = match rows.kind {
            RowsKind::Write => Op::Create,
            RowsKind::Delete => Op::Delete,
            RowsKind::Update | RowsKind::PartialUpdate => Op::Update,
        };
        self.tally.rows(&t.counters, op, idx as u64);
        Ok(())
    }
}

/// Encodes and sends the records of one change.
struct Out<'a> {
    encoder: &'a AvroEncoder,
    table: &'a CachedTable,
    output: &'a OutputSection,
    ctx: &'a EventContext,
}

/// The reused buffers records are framed and encoded into (librdkafka copies them).
#[derive(Default)]
struct Buffers {
    key_before: Vec<u8>,
    key_after: Vec<u8>,
    value: Vec<u8>,
}

impl Out<'_> {
    /// Writes the framed key of an image into `buf`; false for a null key.
    fn key(&self, image: Option<&RowImage<'_>>, buf: &mut Vec<u8>) -> Result<bool, RunError> {
        buf.clear();
        let (Some(image), Some(id)) = (image, self.table.key_id) else { return Ok(false) };
        frame_header(id, buf);
        Ok(self.encoder.write_key(&self.table.schema, image, buf)?)
    }

    /// Sends the change's record under `key` (and a tombstone after a delete); returns how
    /// many records.
    #[allow(clippy::too_many_arguments)]
    async fn emit(
        &self,
        sink: &mut KafkaSink,
        op: Op,
        key: Option<&[u8]>,
        before: Option<&RowImage<'_>>,
        after: Option<&RowImage<'_>>,
        value: &mut Vec<u8>,
    ) -> Result<usize, RunError> {
        let s = &self.table.schema;
        value.clear();
        frame_header(self.table.value_id, value);
        match self.output.value_mode {
            ValueMode::Envelope => self.encoder.write_value(s, op, before, after, self.ctx, value)?,
            ValueMode::Flattened => self.encoder.write_flat(s, op, before, after, value)?,
        }
        sink.send(&self.table.topic, key, Some(value)).await.map_err(|e| self.too_large(e, op, before, after))?;
        if op == Op::Delete && self.output.tombstones && key.is_some() {
            sink.send(&self.table.topic, key, None).await?;
            return Ok(2);
        }
        Ok(1)
    }
}

impl Out<'_> {
    /// A record the producer refused as too large, named by its table and key; other errors
    /// as they are.
    fn too_large(&self, e: SinkError, op: Op, before: Option<&RowImage<'_>>, after: Option<&RowImage<'_>>) -> RunError {
        let SinkError::TooLarge { size, by, .. } = &e else { return e.into() };
        let image = if op == Op::Delete { before } else { after.or(before) };
        let key = match (&self.table.schema.key, image) {
            (Some(fields), Some(img)) => {
                let cols = &self.table.tm.columns;
                let parts: Vec<String> = fields
                    .iter()
                    .filter_map(|f| {
                        let col = cols.get(f.column)?;
                        let v = img.values.get(f.column)?.as_ref()?;
                        Some(format!("{}={}", col.display_name(), crate::render::value_json(v, col)))
                    })
                    .collect();
                parts.join(", ")
            }
            _ => "none (the table has no key)".to_string(),
        };
        RunError::Fatal(format!(
            "a record of {size} bytes for table {} (topic {}, key {key}) is larger than {by} accepts; {TOO_LARGE_SETTINGS}",
            self.table.tm.qualified_name(),
            self.table.topic,
        ))
    }
}

/// `image` with the key columns it lacks taken from `from` (only for computing the key: the
/// published images keep their own absent columns). Borrowed when nothing is missing.
fn with_key_from<'i, 'a>(image: &'i RowImage<'a>, from: &RowImage<'a>, schema: &TableSchema) -> Cow<'i, RowImage<'a>> {
    let missing = |c: usize| matches!(image.values.get(c), Some(None));
    let key = schema.key.iter().flatten();
    if !key.clone().any(|f| missing(f.column)) {
        return Cow::Borrowed(image);
    }
    let mut out = image.clone();
    for f in key {
        if let (Some(slot @ None), Some(Some(v))) = (out.values.get_mut(f.column), from.values.get(f.column)) {
            *slot = Some(v.clone());
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minimal_after_image_keys_come_from_the_before_image() {
        use sluice_binlog::{Column, ColumnType, Value};
        // (a INT, b INT, v INT), PRIMARY KEY (a, b)
        let columns = ["a", "b", "v"]
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let mut c = Column::new(i, ColumnType::Long, 0, i == 2);
                c.name = Some(Arc::from(*n));
                c
            })
            .collect();
        let tm = TableMap {
            table_id: 1,
            flags: 0,
            database: Arc::from("db"),
            table: Arc::from("t"),
            columns,
            has_column_names: true,
            primary_key: Some(vec![(0, 0), (1, 0)]),
        };
        let schema =
            TableSchema::new(&tm, &SchemaOptions { partial_images: true, ..SchemaOptions::default() }).unwrap();
        let img = |v: [Option<i64>; 3]| RowImage { values: v.iter().map(|x| x.map(Value::Int)).collect() };
        let before = img([Some(1), Some(2), None]);
        // only v changed: the key is the before image's
        let after = img([None, None, Some(5)]);
        let k = with_key_from(&after, &before, &schema);
        assert_eq!(k.values, img([Some(1), Some(2), Some(5)]).values);
        assert_eq!(after.values[0], None, "the published after image keeps its absent columns");
        // b changed: a from the before image, b from the after image
        let b_changed = img([None, Some(7), None]);
        let k = with_key_from(&b_changed, &before, &schema);
        assert_eq!(k.values, img([Some(1), Some(7), None]).values);
        // a full image is used as it is
        let full = img([Some(3), Some(4), Some(5)]);
        assert!(matches!(with_key_from(&full, &before, &schema), Cow::Borrowed(_)));
    }

    #[test]
    fn patterns_and_topics() {
        assert!(pattern_matches("shop.*", "shop", "orders"));
        assert!(!pattern_matches("shop.*", "crm", "orders"));
        assert!(pattern_matches("orders", "any", "orders"));
        let cfg = Config::parse(
            r#"
            source = { name = "s", url = "mysql://u@h:3306" }
            kafka = { brokers = "b:9092" }
            registry = { url = "http://r:8081" }
            filter = { exclude_columns = ["shop.customers.password*", "*.*.ssn", "crm.x.y"] }
            "#,
            std::path::Path::new("t.toml"),
            [],
        )
        .unwrap();
        assert_eq!(excluded_columns(&cfg, "shop", "customers"), ["password*", "ssn"]);
        assert_eq!(excluded_columns(&cfg, "shop", "orders"), ["ssn"]);
    }
}
