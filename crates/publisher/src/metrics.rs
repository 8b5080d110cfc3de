//! What the long-running commands have done, counted in one place per command: `sluice run`'s
//! [`Metrics`] and `sluice sink elasticsearch`'s [`SinkMetrics`], each served by [`serve`].
//!
//! `sluice run`: the [`Metrics`] struct, registered
//! against one Prometheus registry and shared by the pipeline (which counts) and the HTTP
//! endpoint (which serves `/metrics`, `/healthz` and `/readyz`, see [`serve`]). A progress
//! line is logged from the same counters every [`PROGRESS_EVERY`] while events flow, and once
//! at a stop.
//!
//! Names carry the `sluice_` prefix and the `_total` / `_seconds` / `_bytes` suffixes; every
//! series has the constant `source` label, and the only others are `table` (bounded by the
//! captured tables), `op` (`c`, `u`, `d`) and the registry's `outcome` (four values). Row changes,
//! transactions, records and commits count what is **committed** to Kafka: a batch's counts are
//! kept aside ([`Tally`]) and added when its Kafka transaction commits, so that an aborted
//! transaction (a restart replays it from the last checkpoint) is never counted, and the
//! counters agree with what a read_committed consumer of the topics sees.
//! `sluice_restarts_total` says when there were restarts.
//!
//! References: <https://prometheus.io/docs/practices/naming/>,
//! <https://prometheus.io/docs/instrumenting/exposition_formats/>.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus::core::Collector;
use prometheus::{
    Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry, TextEncoder,
};

use crate::avro::Op;
use crate::position::{SnapshotProgress, TableState};

/// Buckets of the request-latency histograms (Kafka commits, registry requests): round trips
/// of milliseconds when healthy, seconds when the other side struggles.
const LATENCY_BUCKETS: [f64; 12] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];

/// Buckets of the end-to-end latencies (finer where the goals are: 50 ms and 250 ms).
const END_TO_END_BUCKETS: [f64; 18] =
    [0.002, 0.005, 0.01, 0.02, 0.035, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.3, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];

/// How often the progress line is logged while events flow.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(30);

/// The counters of one `sluice run` process (they outlive pipeline restarts).
#[derive(Debug)]
pub struct Metrics {
    prometheus: Registry,
    /// `sluice_row_changes_total{table, op}`.
    row_changes: IntCounterVec,
    /// `sluice_transactions_total`: MySQL transactions with captured rows.
    transactions: IntCounter,
    /// `sluice_kafka_records_total`: row changes, tombstones, the delete + create of a key change.
    records: IntCounter,
    /// `sluice_kafka_commits_total`: Kafka transactions committed with a checkpoint.
    commits: IntCounter,
    /// `sluice_kafka_commit_seconds`: how long each Kafka commit took.
    commit_seconds: Histogram,
    /// `sluice_commit_latency_seconds`: from reading a transaction's commit event to the
    /// acknowledgement of the Kafka commit that holds it.
    commit_latency: Histogram,
    /// `sluice_commit_latency_server_seconds`: from the server's commit timestamp (whole
    /// seconds) to that acknowledgement.
    commit_latency_server: Histogram,
    /// `sluice_restarts_total`: pipeline restarts from the last committed checkpoint.
    restarts: IntCounter,
    /// `sluice_registry_requests_total{outcome}` and `sluice_registry_request_seconds`.
    registry: RegistryMetrics,
    /// `sluice_lag_seconds`: between the last binlog event's timestamp and its reading; 0 after
    /// a heartbeat (the server sends one only when it has nothing newer). When nothing at all,
    /// not even a heartbeat, has been read for longer than [`Metrics::stall_after`], the
    /// seconds since the last read: a pipeline that stopped reading (blocked, restarting,
    /// cut off) shows a growing lag instead of the last figure it read.
    lag: IntGauge,
    /// Wall-clock seconds of the last event or heartbeat read (0: none yet).
    last_read: AtomicI64,
    /// Seconds without any read after which the lag counts them (two heartbeat periods and
    /// 2 s: a connection that is only idle brings a heartbeat every period).
    stall_after: AtomicI64,
    /// `sluice_last_event_timestamp_seconds`: the last binlog event's own timestamp.
    last_event: IntGauge,
    /// `sluice_lag_bytes`: binlog the server has written past the last committed checkpoint
    /// (-1 until first measured; a failed measurement leaves the last value).
    lag_bytes: IntGauge,
    /// The last checkpoint handed to Kafka and the server's binlogs as last listed: the bytes
    /// behind are worked out again when either changes, so a commit after the last listing
    /// (the stop's, or the one after a burst) does not leave a stale figure.
    checkpoint: Mutex<Behind>,
    /// `sluice_streaming`: 1 while the pipeline streams, 0 while it connects or restarts
    /// (`/readyz` answers by it).
    streaming: IntGauge,
    /// `sluice_snapshot_rows_total{table}`: rows published by snapshots (committed).
    snapshot_rows: IntCounterVec,
    /// `sluice_snapshot_remaining_rows{table}`: the server's estimate less the rows published
    /// (0 once the table is done).
    snapshot_remaining: IntGaugeVec,
    /// `sluice_snapshot_table_state{table}`: 0 pending, 1 running, 2 done, 3 skipped.
    snapshot_state: IntGaugeVec,
    /// `sluice_snapshot_running`: 1 while a snapshot has tables left.
    snapshot_running: IntGauge,
    /// `sluice_source_archive_reading`: 1 while the binlog comes from `source.archive` (the
    /// server purged the checkpoint's files).
    archive_reading: IntGauge,
    /// `sluice_source_archive_switches_total`: catch-ups from the archive handed over to the
    /// server's stream.
    archive_switches: IntCounter,
}

/// One table's row-change counters, looked up once per table (a label lookup per row would
/// hash and lock at every row).
#[derive(Debug, Clone)]
pub struct TableCounters {
    table: Arc<str>,
    creates: IntCounter,
    updates: IntCounter,
    deletes: IntCounter,
    /// TRUNCATE and DROP TABLE (`op = "t"`).
    truncates: IntCounter,
}

/// The counts of a batch that is not committed yet, by table (in the order first seen) and
/// op, with its MySQL transactions and Kafka records: [`Metrics::committed`] adds them once
/// the batch's Kafka transaction is through; an aborted batch's tally is dropped.
#[derive(Debug, Default)]
pub struct Tally {
    rows: Vec<(TableCounters, [u64; 4])>,
    transactions: u64,
    /// Each transaction's end: when it was read, and the server's commit time (seconds).
    ends: Vec<(std::time::Instant, u32)>,
    records: u64,
    /// Rows published by a snapshot, by table.
    snapshot: Vec<(String, u64)>,
}

impl Tally {
    /// `n` row changes of one kind of the table with `counters` (a primary-key change counts
    /// once, as an update); a slot per table, found by its counters (a few tables per batch).
    pub fn rows(&mut self, counters: &TableCounters, op: Op, n: u64) {
        let i = match op {
            Op::Create | Op::Read => 0,
            Op::Update => 1,
            Op::Delete => 2,
            Op::Truncate => 3,
        };
        match self.rows.iter_mut().find(|(c, _)| c.table == counters.table) {
            Some((_, n_by_op)) => n_by_op[i] += n,
            None => {
                let mut n_by_op = [0; 4];
                n_by_op[i] = n;
                self.rows.push((counters.clone(), n_by_op));
            }
        }
    }

    /// A MySQL transaction with captured rows, its end read at `read_at`, committed by the
    /// server at `server_ts` (seconds since the epoch; 0: unknown).
    pub fn transaction(&mut self, read_at: std::time::Instant, server_ts: u32) {
        self.transactions += 1;
        self.ends.push((read_at, server_ts));
    }

    /// `n` Kafka records.
    pub fn records(&mut self, n: u64) {
        self.records += n;
    }

    /// `n` rows of `table` published by a snapshot.
    pub fn snapshot_rows(&mut self, table: &str, n: u64) {
        match self.snapshot.iter_mut().find(|(t, _)| t == table) {
            Some((_, m)) => *m += n,
            None => self.snapshot.push((table.to_string(), n)),
        }
    }
}

/// The Schema Registry client's counters: requests by outcome (`ok`, `incompatible`,
/// `refused`, `unreachable`; cached ids are not requests) and their durations.
#[derive(Debug, Clone)]
pub struct RegistryMetrics {
    requests: IntCounterVec,
    seconds: Histogram,
}

impl RegistryMetrics {
    /// One request ended with `outcome` after `took`.
    pub fn request(&self, outcome: &str, took: Duration) {
        self.requests.with_label_values(&[outcome]).inc();
        self.seconds.observe(took.as_secs_f64());
    }
}

/// Totals, for the progress line and tests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Totals {
    pub creates: u64,
    pub updates: u64,
    pub deletes: u64,
    pub transactions: u64,
    pub records: u64,
    pub commits: u64,
    pub restarts: u64,
    pub lag_seconds: i64,
    pub lag_bytes: i64,
    pub checkpoint: String,
}

impl Totals {
    /// All row changes.
    pub fn rows(&self) -> u64 {
        self.creates + self.updates + self.deletes
    }
}

/// `made`, registered with `registry` (names are constants of this module, each registered
/// once, so neither step can fail).
fn registered<C: Collector + Clone + 'static>(registry: &Registry, made: prometheus::Result<C>, name: &str) -> C {
    let c = made.unwrap_or_else(|e| unreachable!("metric {name}: {e}"));
    registry.register(Box::new(c.clone())).unwrap_or_else(|e| unreachable!("registering {name}: {e}"));
    c
}

fn counter(registry: &Registry, name: &str, help: &str) -> IntCounter {
    registered(registry, IntCounter::new(name, help), name)
}

fn gauge(registry: &Registry, name: &str, help: &str) -> IntGauge {
    registered(registry, IntGauge::new(name, help), name)
}

fn counter_vec(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    registered(registry, IntCounterVec::new(Opts::new(name, help), labels), name)
}

fn gauge_vec(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    registered(registry, IntGaugeVec::new(Opts::new(name, help), labels), name)
}

fn latency_histogram(registry: &Registry, name: &str, help: &str) -> Histogram {
    registered(registry, Histogram::with_opts(HistogramOpts::new(name, help).buckets(LATENCY_BUCKETS.to_vec())), name)
}

/// The last committed checkpoint and the server's binlogs as last listed.
#[derive(Debug, Default)]
struct Behind {
    file: String,
    position: u64,
    logs: Vec<(String, u64)>,
}

impl Behind {
    /// The binlog bytes past the checkpoint (None while either is unknown). A checkpoint in a
    /// file newer than the listing (a commit since) is at the end as far as it is known.
    fn bytes(&self) -> Option<u64> {
        if self.file.is_empty() {
            return None;
        }
        crate::position::bytes_past(&self.logs, &self.file, self.position).or_else(|| {
            let (last, size) = self.logs.last()?;
            let newer = crate::position::binlog_order((&self.file, self.position), (last, *size))
                .is_some_and(std::cmp::Ordering::is_gt);
            newer.then_some(0)
        })
    }
}

impl Metrics {
    /// The metrics of source `source` (a constant label on every series, so several sources
    /// scraped into one Prometheus stay apart).
    pub fn new(source: &str) -> Metrics {
        let labels = std::iter::once(("source".to_string(), source.to_string())).collect();
        let registry = Registry::new_custom(None, Some(labels)).unwrap_or_default();
        let row_changes = counter_vec(
            &registry,
            "sluice_row_changes_total",
            "Row changes committed to Kafka, by table and operation (c, u, d).",
            &["table", "op"],
        );
        let commit_seconds = latency_histogram(
            &registry,
            "sluice_kafka_commit_seconds",
            "How long each Kafka transaction commit took (retries included).",
        );
        let requests = counter_vec(
            &registry,
            "sluice_registry_requests_total",
            "Schema Registry requests (schema registrations), by outcome.",
            &["outcome"],
        );
        let seconds = latency_histogram(
            &registry,
            "sluice_registry_request_seconds",
            "How long each Schema Registry request took.",
        );
        let commit_latency = registered(
            &registry,
            Histogram::with_opts(
                HistogramOpts::new(
                    "sluice_commit_latency_seconds",
                    "Per MySQL transaction with captured rows: from reading its commit event to the acknowledgement \
                     of the Kafka transaction that holds its records.",
                )
                .buckets(END_TO_END_BUCKETS.to_vec()),
            ),
            "sluice_commit_latency_seconds",
        );
        let commit_latency_server = registered(
            &registry,
            Histogram::with_opts(
                HistogramOpts::new(
                    "sluice_commit_latency_server_seconds",
                    "Per MySQL transaction with captured rows: from the server's commit timestamp (whole seconds, so \
                     up to 1 s early) to the acknowledgement of the Kafka transaction that holds its records.",
                )
                .buckets(END_TO_END_BUCKETS.to_vec()),
            ),
            "sluice_commit_latency_server_seconds",
        );
        let m = Metrics {
            row_changes,
            commit_seconds,
            commit_latency,
            commit_latency_server,
            registry: RegistryMetrics { requests, seconds },
            transactions: counter(
                &registry,
                "sluice_transactions_total",
                "MySQL transactions with captured rows committed to Kafka.",
            ),
            records: counter(
                &registry,
                "sluice_kafka_records_total",
                "Kafka records committed: row changes, tombstones, and the delete and create of a key change.",
            ),
            commits: counter(&registry, "sluice_kafka_commits_total", "Kafka transactions committed with a checkpoint."),
            restarts: counter(&registry, "sluice_restarts_total", "Pipeline restarts from the last committed checkpoint."),
            lag: gauge(
                &registry,
                "sluice_lag_seconds",
                "Seconds between the last binlog event's timestamp and its reading; 0 once a heartbeat says nothing newer is \
                 waiting; the seconds since the last read when nothing, not even a heartbeat, came for two heartbeat \
                 periods (a pipeline that stopped reading).",
            ),
            last_read: AtomicI64::new(0),
            stall_after: AtomicI64::new(12),
            last_event: gauge(
                &registry,
                "sluice_last_event_timestamp_seconds",
                "The timestamp the server gave the last binlog event read.",
            ),
            lag_bytes: gauge(
                &registry,
                "sluice_lag_bytes",
                "Bytes of binlog the server has written past the last committed checkpoint (refreshed every heartbeat \
                 period from SHOW BINARY LOGS; -1 until first measured).",
            ),
            checkpoint: Mutex::new(Behind::default()),
            streaming: gauge(
                &registry,
                "sluice_streaming",
                "1 while the pipeline streams the binlog, 0 while it connects or restarts (as /readyz).",
            ),
            snapshot_rows: counter_vec(
                &registry,
                "sluice_snapshot_rows_total",
                "Rows published by snapshots (op r records committed to Kafka), by table.",
                &["table"],
            ),
            snapshot_remaining: gauge_vec(
                &registry,
                "sluice_snapshot_remaining_rows",
                "Rows of a table's snapshot still to read: the server's estimate (information_schema) less the rows \
                 published; 0 once the table is done.",
                &["table"],
            ),
            snapshot_state: gauge_vec(
                &registry,
                "sluice_snapshot_table_state",
                "A table's snapshot: 0 pending, 1 running, 2 done, 3 skipped (dropped before it was read).",
                &["table"],
            ),
            snapshot_running: gauge(&registry, "sluice_snapshot_running", "1 while a snapshot has tables left to read."),
            archive_reading: gauge(
                &registry,
                "sluice_source_archive_reading",
                "1 while the binlog is read from source.archive because the server purged the checkpoint's files.",
            ),
            archive_switches: counter(
                &registry,
                "sluice_source_archive_switches_total",
                "Catch-ups from source.archive handed over to the server's replication stream.",
            ),
            prometheus: registry,
        };
        m.lag_bytes.set(-1);
        m
    }

    /// The row-change counters of `table` (`db.table`).
    pub fn table(&self, table: &str) -> TableCounters {
        let c = |op: &str| self.row_changes.with_label_values(&[table, op]);
        TableCounters { table: Arc::from(table), creates: c("c"), updates: c("u"), deletes: c("d"), truncates: c("t") }
    }

    /// A batch's Kafka transaction committed: its counts become the process's, and its
    /// transactions' latencies are observed.
    pub fn committed(&self, tally: Tally) {
        let now = std::time::Instant::now();
        let now_s = crate::process::now_ms() as f64 / 1000.0;
        for (read_at, server_ts) in &tally.ends {
            self.commit_latency.observe(now.duration_since(*read_at).as_secs_f64());
            if *server_ts != 0 {
                self.commit_latency_server.observe((now_s - f64::from(*server_ts)).max(0.0));
            }
        }
        for (c, [creates, updates, deletes, truncates]) in tally.rows {
            c.truncates.inc_by(truncates);
            c.creates.inc_by(creates);
            c.updates.inc_by(updates);
            c.deletes.inc_by(deletes);
        }
        self.transactions.inc_by(tally.transactions);
        self.records.inc_by(tally.records);
        for (table, n) in tally.snapshot {
            self.snapshot_rows.with_label_values(&[&table]).inc_by(n);
        }
    }

    /// A snapshot's progress as committed: the per-table gauges.
    pub fn snapshot_progress(&self, p: &SnapshotProgress) {
        for t in &p.tables {
            let state = match t.state {
                TableState::Pending => 0,
                TableState::Running => 1,
                TableState::Done => 2,
                TableState::Skipped => 3,
            };
            self.snapshot_state.with_label_values(&[&t.table]).set(state);
            let remaining = match t.state {
                TableState::Done | TableState::Skipped => 0,
                _ => t.estimate.unwrap_or(0).saturating_sub(t.rows),
            };
            self.snapshot_remaining.with_label_values(&[&t.table]).set(i64::try_from(remaining).unwrap_or(i64::MAX));
        }
        self.snapshot_running.set(i64::from(p.is_active()));
    }

    /// A Kafka transaction was committed with the checkpoint `file:position`.
    pub fn commit(&self, file: &str, position: u64) {
        self.commits.inc();
        if let Ok(mut c) = self.checkpoint.lock() {
            c.file.clear();
            c.file.push_str(file);
            c.position = position;
            self.set_lag_bytes(&c);
        }
    }

    /// The last checkpoint this process committed (file and position), if any.
    pub fn last_checkpoint(&self) -> Option<(String, u64)> {
        self.checkpoint.lock().ok().filter(|c| !c.file.is_empty()).map(|c| (c.file.clone(), c.position))
    }

    /// The server's binlogs (`SHOW BINARY LOGS`) now: sets the bytes behind the checkpoint.
    pub fn server_logs(&self, logs: &[(String, u64)]) {
        if let Ok(mut c) = self.checkpoint.lock() {
            c.logs.clear();
            c.logs.extend_from_slice(logs);
            self.set_lag_bytes(&c);
        }
    }

    fn set_lag_bytes(&self, c: &Behind) {
        if let Some(b) = c.bytes() {
            self.lag_bytes.set(i64::try_from(b).unwrap_or(i64::MAX));
        }
    }

    /// The histogram the Kafka sink times its commits into.
    pub fn commit_timer(&self) -> Histogram {
        self.commit_seconds.clone()
    }

    /// The Schema Registry client's counters.
    pub fn registry(&self) -> RegistryMetrics {
        self.registry.clone()
    }

    /// The pipeline restarts from the last checkpoint.
    pub fn restart(&self) {
        self.restarts.inc();
    }

    /// An event with `timestamp` (seconds since the epoch; 0 for the artificial events that
    /// have none, which say nothing about lag) was read at `now_s`.
    pub fn event_read(&self, timestamp: u32, now_s: i64) {
        self.last_read.store(now_s, Ordering::Relaxed);
        if timestamp != 0 {
            self.last_event.set(i64::from(timestamp));
            self.lag.set((now_s - i64::from(timestamp)).max(0));
        }
    }

    /// The source's heartbeat period: how long the stream may be silent before the lag counts
    /// the silence.
    pub fn set_heartbeat(&self, period: Duration) {
        let secs = i64::try_from(period.as_secs()).unwrap_or(i64::MAX / 4);
        self.stall_after.store(secs.saturating_mul(2).saturating_add(2), Ordering::Relaxed);
    }

    /// Seconds since anything was read, once that is longer than a quiet stream allows:
    /// then they are the lag (see `lag`).
    fn refresh_lag(&self, now_s: i64) {
        let last = self.last_read.load(Ordering::Relaxed);
        let silent = now_s - last;
        if last > 0 && silent > self.stall_after.load(Ordering::Relaxed) && silent > self.lag.get() {
            self.lag.set(silent);
        }
    }

    /// The binlog comes from the archive (true), or the archive handed over to the server's
    /// stream (false after true).
    pub fn archive_reading(&self, reading: bool) {
        if !reading && self.archive_reading.get() == 1 {
            self.archive_switches.inc();
        }
        self.archive_reading.set(i64::from(reading));
    }

    /// A heartbeat came at `now_s`: the server had nothing newer to send, so nothing is behind.
    pub fn caught_up(&self, now_s: i64) {
        self.last_read.store(now_s, Ordering::Relaxed);
        self.lag.set(0);
    }

    /// Streaming (ready) or not (connecting, restarting).
    pub fn set_ready(&self, ready: bool) {
        self.streaming.set(i64::from(ready));
    }

    /// True while the pipeline streams.
    pub fn is_ready(&self) -> bool {
        self.streaming.get() == 1
    }

    /// The totals now.
    pub fn totals(&self) -> Totals {
        let mut t = Totals {
            transactions: self.transactions.get(),
            records: self.records.get(),
            commits: self.commits.get(),
            restarts: self.restarts.get(),
            lag_seconds: self.lag.get(),
            lag_bytes: self.lag_bytes.get(),
            checkpoint: self
                .checkpoint
                .lock()
                .map(|c| if c.file.is_empty() { String::new() } else { format!("{}:{}", c.file, c.position) })
                .unwrap_or_default(),
            ..Totals::default()
        };
        for family in self.row_changes.collect() {
            for m in family.get_metric() {
                let op = m.get_label().iter().find(|l| l.name() == "op").map(|l| l.value().to_string());
                // a counter's value is a whole number kept as a double
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let v = m.get_counter().get_value() as u64;
                match op.as_deref() {
                    Some("c") => t.creates += v,
                    Some("u") => t.updates += v,
                    Some("d") => t.deletes += v,
                    _ => {}
                }
            }
        }
        t
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        self.refresh_lag(crate::process::now_ms() / 1000);
        exposition(&self.prometheus)
    }
}

/// A registry's series in Prometheus's text format.
fn exposition(registry: &Registry) -> String {
    TextEncoder::new().encode_to_string(&registry.gather()).unwrap_or_default()
}

/// What the HTTP endpoint serves: a process's metrics and whether it is ready.
pub trait Served: Send + Sync + 'static {
    /// The Prometheus text exposition.
    fn render(&self) -> String;
    /// Ready: streaming (`sluice run`), or applying (`sluice sink`).
    fn is_ready(&self) -> bool;
}

impl Served for Metrics {
    fn render(&self) -> String {
        Metrics::render(self)
    }
    fn is_ready(&self) -> bool {
        Metrics::is_ready(self)
    }
}

/// Serves `GET /metrics` (the text exposition), `GET /healthz` (200 while the process runs)
/// and `GET /readyz` (200 while it streams or applies, 503 while it connects or restarts) on
/// `listener`, until the process ends.
pub async fn serve<M: Served>(listener: tokio::net::TcpListener, metrics: Arc<M>) {
    use axum::http::{header, StatusCode};
    use axum::routing::get;
    let m = Arc::clone(&metrics);
    let app = axum::Router::new()
        .route(
            "/metrics",
            get(move || {
                let m = Arc::clone(&m);
                async move { ([(header::CONTENT_TYPE, prometheus::TEXT_FORMAT)], m.render()) }
            }),
        )
        .route("/healthz", get(|| async { "ok\n" }))
        .route(
            "/readyz",
            get(move || {
                let m = Arc::clone(&metrics);
                async move {
                    if m.is_ready() {
                        (StatusCode::OK, "ready\n")
                    } else {
                        (StatusCode::SERVICE_UNAVAILABLE, "not ready: connecting or restarting\n")
                    }
                }
            }),
        );
    if let Err(e) = axum::serve(listener, app).await {
        tracing::error!(error = %e, "The metrics endpoint stopped");
    }
}

/// The counters of one `sluice sink elasticsearch` process: documents indexed and deleted by
/// index, version conflicts (a record older than the index's version: redelivered, or arriving
/// after a newer one; counted, never applied), records skipped (a table without a key), bulk
/// requests by outcome and their latency, and the consumer's lag in records and seconds. Every
/// series has the constant `group` label (the consumer group).
#[derive(Debug)]
pub struct SinkMetrics {
    prometheus: Registry,
    documents: IntCounterVec,
    conflicts: IntCounterVec,
    skipped: IntCounterVec,
    bulk_requests: IntCounterVec,
    bulk_seconds: Histogram,
    lag_records: IntGaugeVec,
    lag_seconds: IntGauge,
    stalled: IntGauge,
    restarts: IntCounter,
    ready: IntGauge,
}

impl SinkMetrics {
    /// The metrics of consumer group `group`.
    pub fn new(group: &str) -> SinkMetrics {
        let labels = std::iter::once(("group".to_string(), group.to_string())).collect();
        let r = Registry::new_custom(None, Some(labels)).unwrap_or_default();
        SinkMetrics {
            documents: counter_vec(
                &r,
                "sluice_es_documents_total",
                "Documents applied to Elasticsearch, by index and action (index, delete).",
                &["index", "action"],
            ),
            conflicts: counter_vec(
                &r,
                "sluice_es_version_conflicts_total",
                "Records older than the index's version of their document (delivered again, or after a newer one): \
                 not applied.",
                &["index"],
            ),
            skipped: counter_vec(
                &r,
                "sluice_es_skipped_total",
                "Records not applied, by index and reason (no_key: a table without a key).",
                &["index", "reason"],
            ),
            bulk_requests: counter_vec(
                &r,
                "sluice_es_bulk_requests_total",
                "Bulk requests by outcome (ok, retried, failed).",
                &["outcome"],
            ),
            bulk_seconds: latency_histogram(&r, "sluice_es_bulk_seconds", "How long each bulk request took."),
            lag_records: gauge_vec(
                &r,
                "sluice_es_lag_records",
                "Records of each index's topic not applied yet: per partition the last stable offset less the \
                 committed offset, computed by the sink (0 once every partition is applied to its end; commit \
                 markers between records waiting count too).",
                &["index"],
            ),
            stalled: gauge(
                &r,
                "sluice_es_stalled_partitions",
                "Partitions with records waiting whose consumer position has not moved for elasticsearch.stall_after.",
            ),
            lag_seconds: gauge(
                &r,
                "sluice_es_lag_seconds",
                "Age of the last record applied while more wait (0 when none waits).",
            ),
            restarts: counter(&r, "sluice_es_restarts_total", "Restarts of the sink from the committed offsets."),
            ready: gauge(&r, "sluice_es_ready", "1 while the sink applies records, 0 while it connects or restarts."),
            prometheus: r,
        }
    }

    /// A bulk request's outcome for `index` (documents by action and conflicts).
    pub fn applied(&self, index: &str, indexed: u64, deleted: u64, conflicts: u64) {
        self.documents.with_label_values(&[index, "index"]).inc_by(indexed);
        self.documents.with_label_values(&[index, "delete"]).inc_by(deleted);
        self.conflicts.with_label_values(&[index]).inc_by(conflicts);
    }

    /// A record not applied.
    pub fn skipped(&self, index: &str, reason: &str) {
        self.skipped.with_label_values(&[index, reason]).inc();
    }

    /// A bulk request ended (`ok`, `retried`, `failed`) after `seconds`.
    pub fn bulk(&self, outcome: &str, seconds: f64) {
        self.bulk_requests.with_label_values(&[outcome]).inc();
        self.bulk_seconds.observe(seconds);
    }

    /// The records waiting, by index (every synced index, 0 included), and the partitions
    /// stalled.
    pub fn lag(&self, by_index: &std::collections::HashMap<std::sync::Arc<str>, i64>, stalled: usize) {
        for (index, n) in by_index {
            self.lag_records.with_label_values(&[index]).set((*n).max(0));
        }
        self.stalled.set(i64::try_from(stalled).unwrap_or(i64::MAX));
        if self.lag_records() == 0 {
            self.lag_seconds.set(0);
        }
    }

    /// The age of the last record applied, while records wait.
    pub fn lag_age(&self, seconds: i64) {
        self.lag_seconds.set(if self.lag_records() > 0 { seconds.max(0) } else { 0 });
    }

    /// Records waiting now, all indices.
    pub fn lag_records(&self) -> i64 {
        self.lag_records
            .collect()
            .iter()
            .flat_map(|f| f.get_metric().iter())
            .map(|m| {
                #[allow(clippy::cast_possible_truncation)]
                let v = m.get_gauge().get_value() as i64;
                v
            })
            .sum()
    }

    /// Partitions stalled now.
    #[cfg(test)]
    pub fn stalled(&self) -> i64 {
        self.stalled.get()
    }

    /// The sink restarts.
    pub fn restart(&self) {
        self.restarts.inc();
    }

    /// Applying (ready) or not.
    pub fn set_ready(&self, ready: bool) {
        self.ready.set(i64::from(ready));
    }

    /// The counters' totals: (indexed, deleted, conflicts, skipped).
    pub fn totals(&self) -> (u64, u64, u64, u64) {
        let sum = |v: &IntCounterVec, label: Option<(&str, &str)>| -> u64 {
            v.collect()
                .iter()
                .flat_map(|f| f.get_metric().iter())
                .filter(|m| {
                    label.is_none_or(|(k, want)| m.get_label().iter().any(|l| l.name() == k && l.value() == want))
                })
                // a counter's value is a whole number kept as a double
                .map(|m| {
                    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                    let v = m.get_counter().get_value() as u64;
                    v
                })
                .sum()
        };
        (
            sum(&self.documents, Some(("action", "index"))),
            sum(&self.documents, Some(("action", "delete"))),
            sum(&self.conflicts, None),
            sum(&self.skipped, None),
        )
    }
}

impl Served for SinkMetrics {
    fn render(&self) -> String {
        exposition(&self.prometheus)
    }
    fn is_ready(&self) -> bool {
        // a stalled partition is not ready, though the rest applies
        self.ready.get() == 1 && self.stalled.get() == 0
    }
}

/// The counters of one `sluice archive` process (constant label `source`): bytes and files
/// archived, how far the archive is behind the server (bytes and seconds), and how many bytes
/// the server may still purge before it removes a file the archive has not copied whole.
#[derive(Debug)]
pub struct ArchiveMetrics {
    prometheus: Registry,
    bytes: IntCounter,
    files: IntCounter,
    lag_bytes: IntGauge,
    lag_seconds: IntGauge,
    purge_margin: IntGauge,
    warn_margin: IntGauge,
    restarts: IntCounter,
    ready: IntGauge,
}

impl ArchiveMetrics {
    /// The metrics of the archive of source `source`.
    pub fn new(source: &str) -> ArchiveMetrics {
        let labels = std::iter::once(("source".to_string(), source.to_string())).collect();
        let r = Registry::new_custom(None, Some(labels)).unwrap_or_default();
        ArchiveMetrics {
            bytes: counter(&r, "sluice_archive_bytes_total", "Bytes of binlog events written to the archive."),
            files: counter(&r, "sluice_archive_files_total", "Binlog files the archive completed."),
            lag_bytes: gauge(
                &r,
                "sluice_archive_lag_bytes",
                "Bytes of the server's binlog files the archive does not hold yet (asked of the server every 10 s).",
            ),
            lag_seconds: gauge(
                &r,
                "sluice_archive_lag_seconds",
                "Age of the last event archived while more wait (0 when the archive holds the server's end).",
            ),
            purge_margin: gauge(
                &r,
                "sluice_archive_purge_margin_bytes",
                "Bytes of the server's binlog files older than the one the archive is copying: what the server can \
                 purge before it removes a file the archive has not copied whole (0: the next purge loses data).",
            ),
            warn_margin: gauge(
                &r,
                "sluice_archive_purge_margin_warn_bytes",
                "archive.warn_margin: the purge margin below which SluiceArchiveNearPurge fires.",
            ),
            restarts: counter(&r, "sluice_archive_restarts_total", "Reconnections after a broken stream."),
            ready: gauge(&r, "sluice_archive_ready", "1 while the archiver streams, 0 while it connects or restarts."),
            prometheus: r,
        }
    }

    /// The configured warning margin (`archive.warn_margin`).
    pub fn set_warn_margin(&self, bytes: u64) {
        self.warn_margin.set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }

    /// `n` bytes archived.
    pub fn wrote(&self, n: u64) {
        self.bytes.inc_by(n);
    }

    /// A file completed.
    pub fn file_done(&self) {
        self.files.inc();
    }

    /// Where the archive stands against the server's files (`logs`, oldest first, with sizes):
    /// it holds `size` bytes of `file`, its last event written at `last_event` (seconds since
    /// the epoch).
    pub fn position(&self, logs: &[(String, u64)], file: &str, size: u64, last_event: Option<u32>, now_s: i64) {
        let at = logs.iter().position(|(f, _)| f == file);
        let (behind, margin) = match at {
            Some(i) => {
                let rest: u64 = logs[i + 1..].iter().map(|(_, s)| s).sum();
                let behind = logs[i].1.saturating_sub(size) + rest;
                (behind, logs[..i].iter().map(|(_, s)| s).sum())
            }
            // the archive's file is gone from the server: everything the server has is ahead
            None => (logs.iter().map(|(_, s)| s).sum(), 0),
        };
        self.lag_bytes.set(i64::try_from(behind).unwrap_or(i64::MAX));
        self.purge_margin.set(i64::try_from(margin).unwrap_or(i64::MAX));
        let age = if behind == 0 { 0 } else { last_event.map_or(0, |t| (now_s - i64::from(t)).max(0)) };
        self.lag_seconds.set(age);
    }

    /// The stream broke; a reconnection follows.
    pub fn restart(&self) {
        self.restarts.inc();
    }

    /// Streaming (or not).
    pub fn set_ready(&self, ready: bool) {
        self.ready.set(i64::from(ready));
    }
}

impl Served for ArchiveMetrics {
    fn render(&self) -> String {
        exposition(&self.prometheus)
    }
    fn is_ready(&self) -> bool {
        self.ready.get() == 1
    }
}

/// Logs a progress line every [`PROGRESS_EVERY`]: totals and the rate since the last line.
#[derive(Debug)]
pub struct ProgressLog {
    last: Instant,
    /// When the next line is due, ms since the epoch: [`ProgressLog::tick`] is called per event
    /// with the time the pipeline read for it, rather than reading the clock again.
    due_ms: i64,
    rows_then: u64,
}

impl Default for ProgressLog {
    fn default() -> Self {
        ProgressLog { last: Instant::now(), due_ms: crate::process::now_ms() + every_ms(), rows_then: 0 }
    }
}

/// [`PROGRESS_EVERY`] in ms.
fn every_ms() -> i64 {
    i64::try_from(PROGRESS_EVERY.as_millis()).unwrap_or(i64::MAX)
}

impl ProgressLog {
    /// Logs when the interval has passed by `now_ms` (ms since the epoch), or when the wall
    /// clock was set back by more than an interval (the lines would stop until it caught up).
    pub fn tick(&mut self, m: &Metrics, now_ms: i64) {
        if now_ms >= self.due_ms || now_ms < self.due_ms.saturating_sub(2 * every_ms()) {
            self.report(m);
        }
    }

    /// Logs now (at a stop, the totals of the run).
    pub fn report(&mut self, m: &Metrics) {
        let elapsed = self.last.elapsed();
        let t = m.totals();
        let rate = per_second(t.rows().saturating_sub(self.rows_then), elapsed);
        tracing::info!(
            rows = t.rows(),
            creates = t.creates,
            updates = t.updates,
            deletes = t.deletes,
            transactions = t.transactions,
            records = t.records,
            commits = t.commits,
            restarts = t.restarts,
            rows_per_s = rate,
            lag_s = t.lag_seconds,
            checkpoint = %t.checkpoint,
            "{}",
            summary(&t, rate)
        );
        self.last = Instant::now();
        self.due_ms = crate::process::now_ms().saturating_add(every_ms());
        self.rows_then = t.rows();
    }
}

fn per_second(n: u64, over: Duration) -> u64 {
    let secs = over.as_secs_f64();
    if secs > 0.0 {
        // a rate for a log line: rounding is the point
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_precision_loss)]
        let r = (n as f64 / secs).round() as u64;
        r
    } else {
        0
    }
}

/// The human part of the progress line.
fn summary(t: &Totals, rate: u64) -> String {
    let mut s = format!(
        "Published {} row changes ({} inserts, {} updates, {} deletes) in {} transactions, {rate}/s lately; \
         {} Kafka transactions committed",
        t.rows(),
        t.creates,
        t.updates,
        t.deletes,
        t.transactions,
        t.commits
    );
    if !t.checkpoint.is_empty() {
        let _ = write!(s, ", the last at {}", t.checkpoint);
    }
    let _ = write!(s, "; events {} s behind the server when read", t.lag_seconds);
    if t.lag_bytes > 0 {
        let _ = write!(s, ", {} bytes of binlog past the checkpoint", t.lag_bytes);
    }
    if t.restarts > 0 {
        let _ = write!(s, "; {} restarts from a checkpoint", t.restarts);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_archive_lag_and_purge_margin_count_the_servers_files() {
        let m = ArchiveMetrics::new("shop");
        let logs: Vec<(String, u64)> =
            [("b.1", 100), ("b.2", 200), ("b.3", 50)].map(|(f, s)| (f.to_string(), s)).into();
        let value = |m: &ArchiveMetrics, name: &str| -> String {
            m.render().lines().find(|l| l.starts_with(name)).unwrap_or_default().rsplit(' ').next().unwrap().to_string()
        };
        // 150 of b.2's 200 bytes: 50 + 50 behind, b.1's 100 purgeable first, the last event 30 s old
        m.position(&logs, "b.2", 150, Some(1_000), 1_030);
        assert_eq!(value(&m, "sluice_archive_lag_bytes"), "100");
        assert_eq!(value(&m, "sluice_archive_purge_margin_bytes"), "100");
        assert_eq!(value(&m, "sluice_archive_lag_seconds"), "30");
        // at the end: no lag; on the oldest file: no margin
        m.position(&logs, "b.3", 50, Some(1_000), 1_030);
        assert_eq!(
            (value(&m, "sluice_archive_lag_bytes"), value(&m, "sluice_archive_lag_seconds")),
            ("0".into(), "0".into())
        );
        m.position(&logs, "b.1", 10, None, 1_030);
        assert_eq!(value(&m, "sluice_archive_purge_margin_bytes"), "0");
        // its file purged already: all of the server's bytes are behind
        m.position(&logs, "b.0", 10, None, 1_030);
        assert_eq!(value(&m, "sluice_archive_lag_bytes"), "350");
    }

    #[test]
    fn a_pipeline_that_stops_reading_shows_a_growing_lag() {
        let m = Metrics::new("shop");
        m.set_heartbeat(Duration::from_secs(5));
        m.refresh_lag(5_000);
        assert_eq!(m.totals().lag_seconds, 0, "nothing read yet: nothing to say");
        m.event_read(1_000, 1_003);
        m.refresh_lag(1_010);
        assert_eq!(m.totals().lag_seconds, 3, "within two heartbeats and 2 s: quiet, not stalled");
        m.caught_up(1_010);
        m.refresh_lag(1_022);
        assert_eq!(m.totals().lag_seconds, 0, "12 s after a heartbeat: still as the heartbeat said");
        m.refresh_lag(1_023);
        assert_eq!(m.totals().lag_seconds, 13, "13 s without even a heartbeat: the silence is the lag");
        m.refresh_lag(1_400);
        assert_eq!(m.totals().lag_seconds, 390);
        m.event_read(1_390, 1_401);
        assert_eq!(m.totals().lag_seconds, 11, "reading again: the event's own lag");
        m.event_read(1_000, 1_402);
        m.refresh_lag(1_403);
        assert_eq!(m.totals().lag_seconds, 402, "a larger lag read stays");
    }

    #[test]
    fn bytes_behind_follow_both_the_commits_and_the_listing() {
        let m = Metrics::new("shop");
        m.server_logs(&[("mysql-bin.000001".into(), 1_000), ("mysql-bin.000002".into(), 50)]);
        assert_eq!(m.totals().lag_bytes, -1, "no checkpoint yet");
        m.commit("mysql-bin.000001", 900);
        assert_eq!(m.totals().lag_bytes, 150);
        // a commit after the last listing counts against it: no stale bytes at the stop
        m.commit("mysql-bin.000002", 50);
        assert_eq!(m.totals().lag_bytes, 0);
        m.commit("mysql-bin.000003", 4);
        assert_eq!(m.totals().lag_bytes, 0, "a file newer than the listing");
        m.server_logs(&[("mysql-bin.000003".into(), 300)]);
        assert_eq!(m.totals().lag_bytes, 296);
        m.commit("other-bin.000001", 4);
        assert_eq!(m.totals().lag_bytes, 296, "unknown: the last figure stays");
    }

    #[test]
    fn counts_the_exposition_and_the_progress_text() {
        let m = Metrics::new("shop");
        assert!(m.render().lines().any(|l| l == "sluice_lag_bytes{source=\"shop\"} -1"), "unknown until measured");
        let orders = m.table("shop.orders");
        let mut tally = Tally::default();
        tally.rows(&orders, Op::Create, 1);
        tally.rows(&orders, Op::Create, 1);
        tally.rows(&orders, Op::Update, 1);
        tally.rows(&orders, Op::Delete, 1);
        tally.rows(&m.table("shop.items"), Op::Create, 1);
        let read = std::time::Instant::now() - std::time::Duration::from_millis(30);
        tally.transaction(read, 0);
        tally.transaction(read, 1);
        tally.records(6);
        assert_eq!(tally.rows.len(), 2, "one slot per table");
        // an aborted batch's counts are dropped, never counted
        let mut aborted = Tally::default();
        aborted.rows(&orders, Op::Create, 50);
        aborted.records(50);
        drop(aborted);
        assert_eq!(m.totals().rows(), 0, "nothing counted before the commit");
        m.committed(tally);
        // both transactions timed from their commit event, at least the 30 ms since; the
        // server's time only for the one that has it
        let text = m.render();
        let line = |name: &str| text.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("{name}"));
        assert_eq!(
            line("sluice_commit_latency_seconds_count"),
            "sluice_commit_latency_seconds_count{source=\"shop\"} 2"
        );
        let sum: f64 = line("sluice_commit_latency_seconds_sum").rsplit(' ').next().unwrap().parse().unwrap();
        assert!((0.06..10.0).contains(&sum), "{sum}");
        assert!(line("sluice_commit_latency_server_seconds_count").ends_with(" 1"), "{text}");
        let under_20ms =
            text.lines().find(|l| l.starts_with("sluice_commit_latency_seconds_bucket") && l.contains("le=\"0.02\""));
        assert!(under_20ms.is_some_and(|l| l.ends_with(" 0")), "{text}");
        m.commit("mysql-bin.000001", 900);
        m.server_logs(&[("mysql-bin.000001".into(), 1_000), ("mysql-bin.000002".into(), 50)]);
        // read now, as the rendering's own clock sees it (a stream silent for long shows the
        // silence: a_pipeline_that_stops_reading_shows_a_growing_lag)
        let now = crate::process::now_ms() / 1000;
        let ts = u32::try_from(now - 3).unwrap();
        m.event_read(ts, now);
        m.event_read(0, now); // an artificial event says nothing about lag
        let t = m.totals();
        m.caught_up(now);
        assert_eq!(m.totals().lag_seconds, 0);
        m.event_read(ts, now);
        assert_eq!((t.rows(), t.creates, t.lag_seconds, t.records), (5, 3, 3, 6));
        assert_eq!(
            summary(&t, 2),
            "Published 5 row changes (3 inserts, 1 updates, 1 deletes) in 2 transactions, 2/s lately; 1 Kafka \
             transactions committed, the last at mysql-bin.000001:900; events 3 s behind the server when read, 150 \
             bytes of binlog past the checkpoint"
        );
        m.restart();
        assert!(summary(&m.totals(), 0).ends_with("; 1 restarts from a checkpoint"));
        m.commit_timer().observe(0.02);
        m.registry().request("ok", Duration::from_millis(3));
        m.registry().request("incompatible", Duration::from_millis(3));
        assert_eq!(per_second(300, Duration::from_secs(30)), 10);
        let text = m.render();
        for line in [
            "# TYPE sluice_row_changes_total counter",
            "sluice_row_changes_total{op=\"c\",table=\"shop.orders\",source=\"shop\"} 2",
            "sluice_row_changes_total{op=\"d\",table=\"shop.orders\",source=\"shop\"} 1",
            "sluice_row_changes_total{op=\"c\",table=\"shop.items\",source=\"shop\"} 1",
            "sluice_transactions_total{source=\"shop\"} 2",
            "sluice_kafka_commits_total{source=\"shop\"} 1",
            "sluice_restarts_total{source=\"shop\"} 1",
            "sluice_lag_seconds{source=\"shop\"} 3",
            &format!("sluice_last_event_timestamp_seconds{{source=\"shop\"}} {ts}"),
            "sluice_lag_bytes{source=\"shop\"} 150",
            "sluice_kafka_commit_seconds_bucket{source=\"shop\",le=\"0.01\"} 0",
            "sluice_kafka_commit_seconds_bucket{source=\"shop\",le=\"0.025\"} 1",
            "sluice_kafka_commit_seconds_count{source=\"shop\"} 1",
            "sluice_registry_requests_total{outcome=\"ok\",source=\"shop\"} 1",
            "sluice_registry_requests_total{outcome=\"incompatible\",source=\"shop\"} 1",
            "sluice_registry_request_seconds_count{source=\"shop\"} 2",
            "sluice_streaming{source=\"shop\"} 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} in\n{text}");
        }
    }
}
