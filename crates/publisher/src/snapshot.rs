//! Snapshots: **the rows already in the tables, read between the binlog events**, a second
//! producer of row changes into the pipeline (after the replication [`crate::source`]).
//!
//! A table with a key is read chunk by chunk in key order ([`plan`]), with the watermark method
//! of Netflix's DBLog (also Flink CDC's): at a transaction boundary of the stream, note the
//! server's binlog end (the low watermark, LW), read one chunk, note the end again (the high
//! watermark, HW). The chunk is held until the stream reaches HW; every row of it that a binlog
//! event between LW and HW changed (by the chunk key of the event's before or after image) is
//! dropped, because that event, published in stream order, carries a newer state. What is left
//! is the rows' state at HW, published there as `r` records. So the records of a key never go
//! back to an older state, and the stream waits for one chunk at most, without a lock or a
//! long transaction. A statement (DDL, TRUNCATE) naming the table, or any change of the tracked
//! schema, inside the window drops the whole chunk (it is read again, with the new definition).
//! The next chunk is read while one is published (`ReadAhead`): its window opens after the high
//! watermark the stream has just reached, so the two windows never overlap.
//!
//! A table without a usable key is read in one pass under MariaDB's `START TRANSACTION WITH
//! CONSISTENT SNAPSHOT`, whose `binlog_snapshot_file`/`_position` say the binlog position the
//! read sees; its rows are published when the stream is exactly there (the stream waits for the
//! whole table, in one Kafka transaction). MySQL has no such position without a global lock:
//! such a table is refused there with what to do.
//!
//! Progress ([`SnapshotProgress`]: each table's state and last key) goes into the checkpoint of
//! the Kafka transaction that holds the chunk's records, so a restart resumes at the next chunk,
//! never from the start, never twice. Rows become binlog [`sluice_binlog::Value`]s in
//! [`values`], so they are encoded by the same code as streamed changes.
//!
//! References: DBLog, <https://arxiv.org/abs/2010.12597>; MariaDB's consistent snapshot,
//! <https://mariadb.com/kb/en/enhancements-for-start-transaction-with-consistent-snapshot/>.

mod error;
pub mod plan;
pub mod values;

pub use error::SnapshotError;
use error::{gave_up_advice, CHUNK_TRIES};

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use sluice_binlog::rows::{ImageVisitor, RowChange, RowImage};
use sluice_binlog::Value;
use sluice_protocol::query::ColumnDefinition;
use sluice_protocol::stmt::parse_binary_row_with;
use sluice_protocol::{BinaryRows, ConnectOptions, Connection};

use crate::config::SnapshotSection;
use crate::position::{binlog_order, ResumePoint, SnapshotProgress, TableState};
use plan::{Method, TablePlan};
use values::{identity, sql_literal, to_value_with};

/// A binlog position of the source server.
type Pos = (String, u64);

/// The rows of a pending chunk by their key's identity (`values::identity`), for the stream's
/// changes inside the window to find.
fn index_rows(plan: &TablePlan, p: &Pending, scratch: &mut Vec<u8>) -> Result<HashMap<Vec<u8>, usize>, SnapshotError> {
    let mut index = HashMap::with_capacity(p.rows.len());
    let mut values = Vec::new();
    for (n, packet) in p.rows.iter().enumerate() {
        let Some(packet) = packet else { continue };
        parse_row(plan, &p.columns, packet, &mut values)?;
        if identity(&values, plan.key(), scratch) {
            index.insert(scratch.clone(), n);
        }
    }
    Ok(index)
}

/// A chunk read and waiting for the stream to reach its high watermark.
#[derive(Debug)]
struct Pending {
    /// Index of the table in the progress.
    table: usize,
    low: Pos,
    high: Pos,
    /// The rows' packets in key order; None once a binlog event dropped the row.
    rows: Vec<Option<Bytes>>,
    by_identity: Option<HashMap<Vec<u8>, usize>>,
    /// The result columns (to parse the packets with).
    columns: Arc<[ColumnDefinition]>,
    /// The chunk key of the last row read: where the next chunk starts.
    last_key: Option<Vec<String>>,
    /// No rows after these.
    last: bool,
}

/// A chunk whose rows are to be published now: the rows left, in key order.
#[derive(Debug)]
pub struct ReadyChunk {
    /// The table.
    pub plan: Arc<TablePlan>,
    /// The result columns to parse the rows with ([`parse_row`]).
    pub columns: Arc<[ColumnDefinition]>,
    /// The rows' packets.
    pub rows: Vec<Bytes>,
    /// The position the rows' state is that of (the high watermark).
    pub at: Pos,
    /// The table's last chunk.
    pub last: bool,
    /// True when no row of the table was published before this chunk.
    pub first: bool,
    table: usize,
    last_key: Option<Vec<String>>,
    dropped: usize,
}

/// What the pipeline does at a transaction boundary.
#[derive(Debug)]
pub enum Next {
    /// Read the stream (no snapshot runs, or the chunk waits for the stream to reach HW).
    Stream,
    /// Publish these rows now, then commit as the batch policy says.
    Publish(ReadyChunk),
    /// The stream is at the position of the open consistent snapshot: read the table now
    /// ([`Snapshotter::one_pass`]), publish every row, then [`Snapshotter::one_pass_done`].
    OnePass(Arc<TablePlan>),
    /// `schema_only`: register the table's schemas, then [`Snapshotter::registered`].
    Register(Arc<TablePlan>),
}

/// Runs the snapshot of [`SnapshotProgress`]'s tables, on a connection of its own.
pub struct Snapshotter {
    cfg: SnapshotSection,
    /// `[output.key_columns]`: what a keyless table is paged by.
    key_columns: std::collections::BTreeMap<String, Vec<String>>,
    connect: ConnectOptions,
    conn: Option<Connection>,
    progress: SnapshotProgress,
    /// The plan of the table being read (index in the progress).
    plan: Option<(usize, Arc<TablePlan>)>,
    pending: Option<Pending>,
    /// The next chunk, being read while the pipeline publishes the one before.
    read_ahead: Option<ReadAhead>,
    /// The position of the open consistent snapshot (a one-pass table).
    one_pass_at: Option<Pos>,
    /// Rows per chunk now: `chunk_size`, less after a chunk reached `chunk_max_bytes`.
    limit: usize,
    /// `@@server_id` of the source (the records' `source.server_id`).
    server_id: u32,
    mariadb: bool,
    /// Which statement gives the binlog end (`SHOW BINARY LOG STATUS` on newer servers).
    old_status_statement: bool,
    /// The table whose plan was read again after its chunk named an unknown column (1054): a
    /// second 1054 with the fresh plan is no DDL the stream has yet to reach (a
    /// `[snapshot.where]` condition naming a column the table lacks) and stops.
    replanned_unknown_column: Option<usize>,
    last_log: Instant,
    started: Instant,
    /// Time spent reading chunks (watermarks, queries, receiving the rows) since `started`.
    read_time: Duration,
    /// Of that, the time the stream waited for a chunk (the rest overlapped with publishing).
    wait_time: Duration,
    /// A round of the snapshot runs in this process (resumed, requested, or a connection was
    /// opened for it) and its end was not said yet: "Snapshot finished" is said once when all
    /// is done, also when it ends without a read here (a table dropped before the resumed
    /// snapshot read again).
    reading: bool,
    rows_at_start: u64,
    /// The identity buffer reused for every row checked against the pending chunk.
    scratch: Vec<u8>,
}

impl std::fmt::Debug for Snapshotter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshotter").field("progress", &self.progress).finish_non_exhaustive()
    }
}

/// How often the snapshot's progress line is logged.
const LOG_EVERY: Duration = Duration::from_secs(10);

impl Snapshotter {
    /// A snapshotter holding one chunk of `plan`'s table already read (rows `rows`, result
    /// columns `columns`) between binlog positions `low` and `high`: what a read against a
    /// server leaves, for the pipeline's tests without one.
    #[cfg(test)]
    pub(crate) fn with_chunk(
        plan: TablePlan,
        columns: Vec<ColumnDefinition>,
        rows: Vec<Bytes>,
        (low, high): (Pos, Pos),
        last: bool,
    ) -> Snapshotter {
        let mut table = crate::position::TableProgress::pending(plan.name.clone());
        table.state = TableState::Running;
        let progress = SnapshotProgress { reason: "initial".into(), started_ms: 0, tables: vec![table] };
        let connect = ConnectOptions::new("127.0.0.1", 9, "nobody", "");
        let mut s = Snapshotter::new(&SnapshotSection::default(), connect, Some(progress));
        s.pending = Some(Pending {
            table: 0,
            low,
            high,
            rows: rows.into_iter().map(Some).collect(),
            by_identity: None,
            columns: columns.into(),
            last_key: None,
            last,
        });
        s.plan = Some((0, Arc::new(plan)));
        s
    }

    /// A snapshotter for `progress` (as committed), reading over connections made with
    /// `connect`.
    pub fn new(cfg: &SnapshotSection, connect: ConnectOptions, progress: Option<SnapshotProgress>) -> Snapshotter {
        let progress = progress.unwrap_or_default();
        let reading = progress.is_active();
        let rows_at_start = progress.tables.iter().map(|t| t.rows).sum();
        Snapshotter {
            limit: cfg.chunk_size,
            cfg: cfg.clone(),
            key_columns: std::collections::BTreeMap::new(),
            connect,
            conn: None,
            progress,
            plan: None,
            pending: None,
            read_ahead: None,
            one_pass_at: None,
            server_id: 0,
            mariadb: true,
            old_status_statement: false,
            replanned_unknown_column: None,
            last_log: Instant::now(),
            started: Instant::now(),
            read_time: Duration::ZERO,
            wait_time: Duration::ZERO,
            reading,
            rows_at_start,
            scratch: Vec::new(),
        }
    }

    /// Pages tables without a usable key by `[output.key_columns]` (once seen to be unique).
    #[must_use]
    pub fn with_key_columns(mut self, key_columns: std::collections::BTreeMap<String, Vec<String>>) -> Snapshotter {
        self.key_columns = key_columns;
        self
    }

    /// The progress to commit with the next checkpoint (None before any snapshot).
    pub fn progress(&self) -> Option<&SnapshotProgress> {
        (!self.progress.tables.is_empty()).then_some(&self.progress)
    }

    /// True when this snapshot reads again tables whose topics hold older records of rows
    /// that may be gone (`when_needed` after a purge): each table's rows start with a truncate
    /// record.
    pub fn redoes(&self) -> bool {
        self.progress.reason == "when_needed"
    }

    /// True while tables are left to read.
    pub fn is_active(&self) -> bool {
        self.progress.is_active()
    }

    /// Adds tables to read (a `sluice snapshot` request); returns those added.
    pub fn request(&mut self, tables: &[String], reason: &str) -> Vec<String> {
        let fresh = !self.progress.is_active();
        if fresh {
            // a new round: the tables of a finished snapshot are not part of it (its counts and
            // `sluice check`'s "n of m tables" are this round's)
            self.progress.tables.clear();
            self.progress.reason = reason.to_string();
            self.progress.started_ms = crate::process::now_ms();
            self.started = Instant::now();
            self.read_time = Duration::ZERO;
            self.wait_time = Duration::ZERO;
        }
        let added = self.progress.request(tables);
        self.reading |= !added.is_empty();
        if fresh {
            // the rate counts this round's rows, not those of tables read before
            self.rows_at_start = self.progress.tables.iter().map(|t| t.rows).sum();
        }
        added
    }

    /// `@@server_id` of the source, for the records (0 until the first read).
    pub fn server_id(&self) -> u32 {
        self.server_id
    }

    async fn conn(&mut self) -> Result<&mut Connection, SnapshotError> {
        if self.conn.is_none() {
            let mut c = Connection::connect(self.connect.clone()).await.map_err(SnapshotError::Connect)?;
            reading_session(&mut c, self.cfg.lock_wait_timeout).await.map_err(SnapshotError::Connect)?;
            self.mariadb = c.is_mariadb();
            let id = c.query("SELECT @@server_id").await.map_err(SnapshotError::Connect)?;
            self.server_id = id.get_str(0, 0).and_then(|s| s.parse().ok()).unwrap_or(0);
            self.conn = Some(c);
            self.reading = true;
        }
        self.conn.as_mut().ok_or_else(|| {
            SnapshotError::Connect(sluice_protocol::Error::Invalid {
                what: "snapshot connection",
                reason: "not open".into(),
            })
        })
    }

    /// At a transaction boundary of the stream (resume point `resume`): what to do now. Reads
    /// the next chunk when none is waiting.
    ///
    /// # Errors
    /// A query that fails, a table that cannot be read (see [`SnapshotError`]).
    pub async fn next(&mut self, resume: &ResumePoint) -> Result<Next, SnapshotError> {
        let at = (resume.file.as_str(), resume.position);
        if let Some(p) = &self.pending {
            return Ok(match binlog_order(at, (&p.high.0, p.high.1)) {
                Some(std::cmp::Ordering::Less) | None => Next::Stream,
                Some(_) => self.take_ready().map_or(Next::Stream, Next::Publish),
            });
        }
        if let Some(p) = self.one_pass_at.clone() {
            let Some((_, plan)) = self.plan.clone() else { return Ok(Next::Stream) };
            return Ok(match binlog_order(at, (&p.0, p.1)) {
                Some(std::cmp::Ordering::Less) | None => Next::Stream,
                Some(std::cmp::Ordering::Equal) => Next::OnePass(plan),
                Some(std::cmp::Ordering::Greater) => {
                    // the stream went past the snapshot's position: read it again from here
                    tracing::info!(table = %plan.name, "The stream passed the consistent snapshot's position; taking it again");
                    self.close_one_pass().await;
                    Next::Stream
                }
            });
        }
        loop {
            let Some(i) =
                self.progress.tables.iter().position(|t| matches!(t.state, TableState::Pending | TableState::Running))
            else {
                self.finished();
                return Ok(Next::Stream);
            };
            let plan = match &self.plan {
                Some((pi, plan)) if *pi == i => Arc::clone(plan),
                _ => {
                    let Some(plan) = self.load_plan(i).await? else { continue };
                    plan
                }
            };
            if self.progress.reason == "schema_only" {
                return Ok(Next::Register(plan));
            }
            return match plan.method {
                Method::Chunked(_) => {
                    self.read_chunk_retried(i, &plan).await?;
                    let p = self.pending.as_ref().map(|p| p.high.clone()).unwrap_or_default();
                    Ok(match binlog_order(at, (&p.0, p.1)) {
                        Some(std::cmp::Ordering::Less) | None => Next::Stream,
                        Some(_) => self.take_ready().map_or(Next::Stream, Next::Publish),
                    })
                }
                Method::OnePass => {
                    self.open_one_pass(&plan).await?;
                    Ok(Next::Stream)
                }
            };
        }
    }

    /// Loads table `i`'s plan; None (and the table skipped) when it no longer exists.
    async fn load_plan(&mut self, i: usize) -> Result<Option<Arc<TablePlan>>, SnapshotError> {
        let name = self.progress.tables.get(i).map(|t| t.table.clone()).unwrap_or_default();
        let (db, table) = name.split_once('.').unwrap_or((name.as_str(), ""));
        let filter = self.cfg.filter_of(db, table).map(str::to_string);
        let mariadb = {
            self.conn().await?;
            self.mariadb
        };
        let keys = self.key_columns.get(&name).cloned();
        let conn = self.conn().await?;
        let loaded = plan::load(conn, db, table, filter.as_deref(), keys.as_deref(), mariadb).await?;
        let Some(plan) = loaded else {
            self.table_gone(i);
            return Ok(None);
        };
        let plan = Arc::new(plan);
        if let Some(t) = self.progress.tables.get_mut(i) {
            if t.state == TableState::Running && t.last_key.is_some() {
                tracing::info!(
                    table = %name,
                    rows = t.rows,
                    chunks = t.chunks,
                    "Snapshot: resuming the table after its last committed chunk"
                );
            }
            if t.state == TableState::Pending {
                t.state = TableState::Running;
                t.estimate = plan.estimate;
                let how = match &plan.method {
                    Method::Chunked(_) => "in chunks by its key",
                    Method::OnePass => "in one pass under a consistent snapshot (no usable key)",
                };
                tracing::info!(table = %name, estimated_rows = plan.estimate.unwrap_or(0), "Snapshot: reading the table {how}");
            }
        }
        self.plan = Some((i, Arc::clone(&plan)));
        Ok(Some(plan))
    }

    /// Table `i` is not on the server any more (dropped or renamed, while or before it was
    /// read: the server answers before the stream reaches the statement): its snapshot ends,
    /// skipped with a note, and the stream goes on. The rows published before stay in its
    /// topic until the stream reaches the statement (a DROP clears them with a truncate
    /// record; see [`Snapshotter::renamed`] for a RENAME).
    fn table_gone(&mut self, i: usize) {
        if let Some(t) = self.progress.tables.get_mut(i) {
            if matches!(t.state, TableState::Pending | TableState::Running) {
                t.state = TableState::Skipped;
                t.note = Some(if t.rows > 0 {
                    format!("dropped or renamed while it was read, after {} rows were published", t.rows)
                } else {
                    "dropped or renamed before it was read".into()
                });
                tracing::warn!(table = %t.table, rows = t.rows, "Snapshot: the table is not on the server any more; its snapshot ends");
            }
        }
        self.plan = None;
        self.pending = None;
        self.read_ahead = None;
        self.limit = self.cfg.chunk_size;
    }

    /// The stream reached a statement that emptied table `name` (`by`: TRUNCATE TABLE, DROP
    /// TABLE, ...): a dropped table's snapshot ends (its truncate record clears the rows
    /// published so far); a truncated one goes on (what is left to read is what the table holds
    /// now).
    pub fn emptied(&mut self, name: &str, by: &str) {
        if by == "TRUNCATE TABLE" {
            return;
        }
        let Some(i) = self.progress.tables.iter().position(|t| t.table == name) else { return };
        // by its state, not by the plan: the statement's `observe_statement` has just dropped
        // the plan of the table being read
        if matches!(self.progress.tables[i].state, TableState::Pending | TableState::Running) {
            self.table_gone(i);
        }
        if let Some(t) = self.progress.tables.get_mut(i).filter(|t| t.state == TableState::Skipped) {
            if t.note.as_deref().is_some_and(|n| n.starts_with("dropped or renamed")) {
                t.note = Some(if t.rows > 0 {
                    format!(
                        "dropped ({by}) after {} rows were published; its truncate record cleared them from its topic",
                        t.rows
                    )
                } else {
                    format!("dropped ({by}) before it was read")
                });
            }
        }
    }

    /// The stream reached a rename of table `from` to `to`: a snapshot of `from` not finished
    /// ends, its note naming the table to snapshot instead.
    pub fn renamed(&mut self, from: &str, to: &str) {
        let Some(i) = self.progress.tables.iter().position(|t| t.table == from) else { return };
        if matches!(self.progress.tables[i].state, TableState::Pending | TableState::Running) {
            self.table_gone(i);
        }
        if let Some(t) = self.progress.tables.get_mut(i).filter(|t| t.state == TableState::Skipped) {
            let rows = t.rows;
            t.note = Some(format!(
                "renamed to {to} while it was read, after {rows} rows were published (they stay in {from}'s topic); \
                 snapshot the new name with `sluice snapshot --table {to}`"
            ));
            tracing::warn!(table = %from, renamed_to = %to, "Snapshot: the table was renamed; snapshot {to} to publish its rows");
        }
    }

    /// [`Snapshotter::read_chunk`], tried again in place (on a new connection) when it failed
    /// for a reason that may pass: a broken or killed connection, a lock wait, a statement
    /// timeout. Past [`CHUNK_TRIES`] a timeout stops with what to change; a connection that
    /// keeps breaking restarts the stream (it resumes at this chunk).
    async fn read_chunk_retried(&mut self, i: usize, plan: &TablePlan) -> Result<(), SnapshotError> {
        let mut tries = 0;
        loop {
            tries += 1;
            let e = match self.read_chunk(i, plan).await {
                Ok(()) => {
                    self.replanned_unknown_column = None;
                    return Ok(());
                }
                Err(e) => e,
            };
            match &e {
                // ER_NO_SUCH_TABLE: dropped or renamed on the server, ahead of the stream
                SnapshotError::Query { source: sluice_protocol::Error::Server(s), .. } if s.code == 1146 => {
                    self.table_gone(i);
                    return Ok(());
                }
                // the table's columns changed on the server ahead of the stream: its definition
                // is read again (the DDL reaches the stream before the chunk is published); a
                // column dropped or renamed fails the chunk's SELECT with ER_BAD_FIELD_ERROR (it
                // stopped `sluice run`, a hostile trial's ALTER TABLE ... DROP COLUMN)
                SnapshotError::Columns { .. } => {
                    tracing::info!(table = %plan.name, error = %e, "Snapshot: reading the table's definition again");
                    self.plan = None;
                    self.pending = None;
                    return Ok(());
                }
                SnapshotError::Query { source: sluice_protocol::Error::Server(s), .. }
                    if s.code == 1054 && self.replanned_unknown_column != Some(i) =>
                {
                    self.replanned_unknown_column = Some(i);
                    tracing::info!(table = %plan.name, error = %e, "Snapshot: reading the table's definition again");
                    self.plan = None;
                    self.pending = None;
                    // a chunk read ahead with the old plan would fail alike
                    self.read_ahead = None;
                    return Ok(());
                }
                _ => {}
            }
            let SnapshotError::Query { source, .. } = &e else { return Err(e) };
            let lock_or_timeout = match source {
                sluice_protocol::Error::Server(s) => gave_up_advice(s.code),
                _ => None,
            };
            if !(lock_or_timeout.is_some() || source.is_transient()) {
                return Err(e);
            }
            if tries >= CHUNK_TRIES {
                return Err(match lock_or_timeout {
                    Some(advice) => SnapshotError::GaveUp { tries, last: Box::new(e), advice },
                    None => e,
                });
            }
            let wait = Duration::from_secs(1 << (tries - 1));
            tracing::warn!(table = %plan.name, error = %e, tries, wait = ?wait, "Snapshot: reading a chunk failed; trying again");
            self.conn = None;
            self.pending = None;
            tokio::time::sleep(wait).await;
        }
    }

    /// Reads the next chunk of table `i` between two watermarks: takes the one read ahead when
    /// there is one for the table, else reads it now.
    async fn read_chunk(&mut self, i: usize, plan: &TablePlan) -> Result<(), SnapshotError> {
        let waited = Instant::now();
        let (read, took) = match self.read_ahead.take() {
            Some(mut ahead) if ahead.table == i => match (&mut ahead.task).await {
                Ok((conn, old_status, read, took)) => {
                    self.conn = Some(conn);
                    self.old_status_statement = old_status;
                    (read, took)
                }
                // the task panicked: its connection is gone, the chunk is read again now
                Err(e) => {
                    tracing::warn!(table = %plan.name, error = %e, "Snapshot: reading a chunk ahead failed; reading it now");
                    self.read_now(i, plan).await
                }
            },
            _ => self.read_now(i, plan).await,
        };
        self.read_time += took;
        self.wait_time += waited.elapsed();
        let (pending, next_limit) = read?;
        self.limit = next_limit.min(self.cfg.chunk_size);
        self.pending = Some(pending);
        Ok(())
    }

    /// Reads the next chunk of table `i` now, on the snapshot's connection.
    async fn read_now(&mut self, i: usize, plan: &TablePlan) -> (Result<(Pending, usize), SnapshotError>, Duration) {
        let started = Instant::now();
        let ask = self.ask(i);
        let mut old_status = self.old_status_statement;
        let read = match self.conn().await {
            Ok(conn) => read_chunk(conn, &mut old_status, plan, ask).await,
            Err(e) => Err(e),
        };
        self.old_status_statement = old_status;
        (read, started.elapsed())
    }

    /// What the next chunk of table `i` asks for, from its committed progress.
    fn ask(&self, i: usize) -> ChunkAsk {
        ChunkAsk {
            table: i,
            after: self.progress.tables.get(i).and_then(|t| t.last_key.clone()),
            limit: self.limit,
            max_bytes: usize::try_from(self.cfg.chunk_max_bytes).unwrap_or(usize::MAX),
        }
    }

    /// Starts reading the chunk after `chunk` (not its table's last) on the snapshot's
    /// connection, for the pipeline to take at its next [`Snapshotter::next`]; see [`ReadAhead`].
    fn read_ahead(&mut self, chunk: &ReadyChunk) {
        if chunk.last {
            return;
        }
        let Some(mut conn) = self.conn.take() else { return };
        let ask = ChunkAsk { after: chunk.last_key.clone(), ..self.ask(chunk.table) };
        let plan = Arc::clone(&chunk.plan);
        let mut old_status = self.old_status_statement;
        let task = tokio::spawn(async move {
            let started = Instant::now();
            let read = read_chunk(&mut conn, &mut old_status, &plan, ask).await;
            (conn, old_status, read, started.elapsed())
        });
        self.read_ahead = Some(ReadAhead { table: chunk.table, task });
    }

    /// The pending chunk as rows to publish, its progress noted.
    fn take_ready(&mut self) -> Option<ReadyChunk> {
        let p = self.pending.take()?;
        let (_, plan) = self.plan.clone()?;
        let total = p.rows.len();
        let rows: Vec<Bytes> = p.rows.into_iter().flatten().collect();
        let first = self.progress.tables.get(p.table).is_some_and(|t| t.rows == 0);
        let chunk = ReadyChunk {
            dropped: total - rows.len(),
            plan,
            columns: p.columns,
            rows,
            at: p.high,
            last: p.last,
            first,
            table: p.table,
            last_key: p.last_key,
        };
        self.read_ahead(&chunk);
        Some(chunk)
    }

    /// `chunk`'s rows were published (`published` of them): its progress is the table's.
    pub fn published(&mut self, chunk: &ReadyChunk, published: u64) {
        if let Some(t) = self.progress.tables.get_mut(chunk.table) {
            t.rows += published;
            t.chunks += 1;
            t.last_key.clone_from(&chunk.last_key);
            if chunk.last {
                t.state = TableState::Done;
                tracing::info!(table = %t.table, rows = t.rows, chunks = t.chunks, "Snapshot: table done");
                self.plan = None;
                self.limit = self.cfg.chunk_size;
            }
        }
        if chunk.dropped > 0 {
            tracing::debug!(table = %chunk.plan.name, dropped = chunk.dropped, "Snapshot: rows changed while their chunk was read are left to their binlog events");
        }
        self.log_progress(false);
    }

    /// A rows event of `table` (`db.table`) starting at `file:offset`, changing `row`: the rows
    /// of the pending chunk it touches are dropped when it is inside the chunk's window.
    pub fn observe_row(&mut self, table: &str, file: &str, offset: u64, row: &RowChange<'_>) {
        let Some(p) = &mut self.pending else { return };
        let Some((_, plan)) = &self.plan else { return };
        if plan.name != table || !in_window(p, file, offset) {
            return;
        }
        if p.by_identity.is_none() {
            match index_rows(plan, p, &mut self.scratch) {
                Ok(index) => p.by_identity = Some(index),
                Err(e) => {
                    // publishing the chunk would fail the same way: read it again, and fail there
                    tracing::debug!(table, error = %e, "Snapshot: the chunk's rows cannot be indexed; reading it again");
                    self.pending = None;
                    return;
                }
            }
        }
        let Some(by_identity) = p.by_identity.as_mut() else { return };
        for image in [&row.before, &row.after].into_iter().flatten() {
            if identity(&image.values, plan.key(), &mut self.scratch) {
                if let Some(i) = by_identity.remove(&self.scratch) {
                    if let Some(slot) = p.rows.get_mut(i) {
                        *slot = None;
                    }
                }
            } else {
                // an image without the key (a partial image): the chunk cannot be matched
                tracing::debug!(
                    table,
                    "Snapshot: a change without the chunk key inside the window; reading the chunk again"
                );
                self.pending = None;
                return;
            }
        }
    }

    /// True when a rows event of `table` may concern the pending chunk (saves the per-row work
    /// for other tables).
    pub fn watches(&self, table: &str) -> bool {
        self.pending.is_some() && self.plan.as_ref().is_some_and(|(_, p)| p.name == table)
    }

    /// A statement outside a transaction (DDL, TRUNCATE) at `file:offset`: when it may concern
    /// the table being read, the pending chunk is read again and the table's definition too.
    /// `schema_changed` says the tracked schema changed with it.
    pub fn observe_statement(&mut self, sql: &str, schema_changed: bool, file: &str, offset: u64) {
        let Some((_, plan)) = &self.plan else { return };
        let lower = sql.to_ascii_lowercase();
        let table = plan.table_map.table.to_ascii_lowercase();
        if !(schema_changed || lower.contains(&table)) {
            return;
        }
        if let Some(p) = &self.pending {
            if !in_window(p, file, offset) && !schema_changed {
                return;
            }
        }
        tracing::info!(table = %plan.name, at = %format!("{file}:{offset}"), "Snapshot: a statement may change the table being read; reading its chunk and definition again");
        self.pending = None;
        self.plan = None;
        self.read_ahead = None;
        if self.one_pass_at.is_some() {
            // taken again with the new definition
            self.one_pass_at = None;
            self.conn = None;
        }
    }

    /// Opens the consistent snapshot of a one-pass table and notes its position.
    async fn open_one_pass(&mut self, plan: &TablePlan) -> Result<(), SnapshotError> {
        let name = plan.name.clone();
        let conn = self.conn().await?;
        let q = |during, source| SnapshotError::Query { table: name.clone(), during, source };
        conn.query_drop("START TRANSACTION WITH CONSISTENT SNAPSHOT")
            .await
            .map_err(|e| q("starting a consistent snapshot", e))?;
        let rs = conn
            .query("SHOW STATUS LIKE 'binlog_snapshot_%'")
            .await
            .map_err(|e| q("reading the consistent snapshot's position", e))?;
        let mut file = None;
        let mut pos = None;
        for row in rs.to_strings() {
            match (row.first().cloned().flatten().as_deref(), row.get(1).cloned().flatten()) {
                (Some("Binlog_snapshot_file"), v) => file = v,
                (Some("Binlog_snapshot_position"), v) => pos = v.and_then(|v| v.parse().ok()),
                _ => {}
            }
        }
        match (file, pos) {
            (Some(f), Some(p)) if !f.is_empty() => {
                self.one_pass_at = Some((f, p));
                Ok(())
            }
            _ => Err(q(
                "reading the consistent snapshot's position",
                sluice_protocol::Error::Invalid { what: "binlog_snapshot_position", reason: "not reported".into() },
            )),
        }
    }

    async fn close_one_pass(&mut self) {
        self.one_pass_at = None;
        if let Some(c) = self.conn.as_mut() {
            if c.query_drop("ROLLBACK").await.is_err() {
                self.conn = None;
            }
        }
    }

    /// The rows of the one-pass table, read under its consistent snapshot.
    ///
    /// # Errors
    /// A failing query.
    pub async fn one_pass(&mut self, plan: &TablePlan) -> Result<OnePassRows<'_>, SnapshotError> {
        let name = plan.name.clone();
        let sql = plan.all_sql();
        let conn = self.conn().await?;
        let q = |source| SnapshotError::Query { table: name.clone(), during: "reading the table", source };
        let prepared = conn.prepare(&sql).await.map_err(q)?;
        let rows = conn.execute(&prepared).await.map_err(q)?;
        let columns: Arc<[ColumnDefinition]> = rows.columns().into();
        check_columns(plan, &columns)?;
        Ok(OnePassRows { rows, columns, table: name })
    }

    /// The one-pass table is not on the server any more (its read failed with
    /// ER_NO_SUCH_TABLE): its snapshot ends as [`Snapshotter::table_gone`] says.
    pub async fn one_pass_gone(&mut self) {
        self.close_one_pass().await;
        if let Some((i, _)) = self.plan.clone() {
            self.table_gone(i);
        }
    }

    /// The one-pass table was published (`published` rows): it is done.
    pub async fn one_pass_done(&mut self, published: u64) {
        self.close_one_pass().await;
        if let Some((i, _)) = self.plan.take() {
            if let Some(t) = self.progress.tables.get_mut(i) {
                t.rows += published;
                t.chunks += 1;
                t.state = TableState::Done;
                tracing::info!(table = %t.table, rows = t.rows, "Snapshot: table done (one pass)");
            }
        }
        self.log_progress(false);
    }

    /// `schema_only`: the table's schemas are registered.
    pub fn registered(&mut self) {
        if let Some((i, _)) = self.plan.take() {
            if let Some(t) = self.progress.tables.get_mut(i) {
                t.state = TableState::Done;
            }
        }
    }

    /// Every table is done: says so once.
    fn finished(&mut self) {
        if std::mem::take(&mut self.reading) {
            self.conn = None;
            self.read_ahead = None;
            self.log_progress(true);
            let skipped = self.progress.tables.iter().filter(|t| t.state == TableState::Skipped).count();
            tracing::info!(
                rows = self.progress.tables.iter().map(|t| t.rows).sum::<u64>(),
                tables = self.progress.tables.len(),
                skipped,
                seconds = self.started.elapsed().as_secs(),
                read_seconds = (self.read_time.as_secs_f64() * 100.0).round() / 100.0,
                read_wait_seconds = (self.wait_time.as_secs_f64() * 100.0).round() / 100.0,
                "Snapshot finished"
            );
        }
    }

    /// Logs the progress line (every [`LOG_EVERY`], or now).
    fn log_progress(&mut self, now: bool) {
        if !now && self.last_log.elapsed() < LOG_EVERY {
            return;
        }
        self.last_log = Instant::now();
        let done: u64 = self.progress.tables.iter().map(|t| t.rows).sum();
        let total: u64 = self
            .progress
            .tables
            .iter()
            .map(|t| if t.state == TableState::Done { t.rows } else { t.estimate.unwrap_or(0).max(t.rows) })
            .sum();
        let rate = (done - self.rows_at_start.min(done)) as f64 / self.started.elapsed().as_secs_f64().max(0.001);
        let left =
            if rate > 0.0 { format!("{:.0} s", (total.saturating_sub(done)) as f64 / rate) } else { "unknown".into() };
        let current = self.progress.tables.iter().find(|t| t.state == TableState::Running);
        // between tables (or at the end) no table is being read: no table fields
        tracing::info!(
            table = current.map(|t| t.table.as_str()),
            table_rows = current.map(|t| t.rows),
            table_estimate = current.and_then(|t| t.estimate),
            rows = done,
            estimate = total,
            rows_per_s = rate.round(),
            time_left = %left,
            "Snapshot progress"
        );
    }
}

/// The server's binlog end now, on `conn` (`old_status`: the server knows only `SHOW MASTER
/// STATUS`; learnt on the first refusal of the newer statement).
async fn binlog_end(conn: &mut Connection, old_status: &mut bool, table: &str) -> Result<Pos, SnapshotError> {
    let rs = if *old_status {
        conn.query("SHOW MASTER STATUS").await
    } else {
        match conn.query("SHOW BINARY LOG STATUS").await {
            Ok(rs) => Ok(rs),
            Err(sluice_protocol::Error::Server(_)) => {
                *old_status = true;
                conn.query("SHOW MASTER STATUS").await
            }
            Err(e) => Err(e),
        }
    }
    .map_err(|source| SnapshotError::Query {
        table: table.to_string(),
        during: "reading the binlog position",
        source,
    })?;
    match (rs.get_str(0, 0), rs.get_str(0, 1).and_then(|p| p.parse().ok())) {
        (Some(f), Some(p)) => Ok((f, p)),
        _ => Err(SnapshotError::Query {
            table: table.to_string(),
            during: "reading the binlog position",
            source: sluice_protocol::Error::Invalid { what: "SHOW MASTER STATUS", reason: "no position".into() },
        }),
    }
}

/// What to read a chunk with: where it starts and how much it may hold.
#[derive(Debug, Clone)]
struct ChunkAsk {
    /// Index of the table in the progress.
    table: usize,
    /// The key of the last row read before (None: the table's first chunk).
    after: Option<Vec<String>>,
    /// Rows at most.
    limit: usize,
    /// Bytes of row packets past which the chunk ends early (`chunk_max_bytes`).
    max_bytes: usize,
}

/// Reads one chunk of `plan`'s table on `conn` between two watermarks; returns it and how many
/// rows the next chunk asks for (about as many as fit the byte budget).
async fn read_chunk(
    conn: &mut Connection,
    old_status: &mut bool,
    plan: &TablePlan,
    ask: ChunkAsk,
) -> Result<(Pending, usize), SnapshotError> {
    let ChunkAsk { table, after, limit, max_bytes } = ask;
    // one more row than the chunk holds says whether it is the last
    let sql = plan.chunk_sql(after.as_deref(), limit + 1);
    let low = binlog_end(conn, old_status, &plan.name).await?;
    let q = |source| SnapshotError::Query { table: plan.name.clone(), during: "reading a chunk", source };
    let prepared = conn.prepare(&sql).await.map_err(q)?;
    let mut rows = conn.execute(&prepared).await.map_err(q)?;
    let columns: Arc<[ColumnDefinition]> = rows.columns().into();
    check_columns(plan, &columns)?;
    let (mut kept, mut bytes, mut more) = (Vec::new(), 0usize, false);
    while let Some(packet) = rows.next_row().await.map_err(q)? {
        if kept.len() >= limit || (bytes >= max_bytes && !kept.is_empty()) {
            // past the chunk (or its bytes): the rest is read again by the next chunk
            more = true;
            continue;
        }
        bytes += packet.len();
        kept.push(packet);
    }
    conn.close_statement(&prepared).await.map_err(q)?;
    let high = binlog_end(conn, old_status, &plan.name).await?;
    let next_limit = if bytes >= max_bytes && kept.len() < limit { kept.len().max(1) } else { limit * 2 };
    let mut pending = Pending {
        table,
        low,
        high,
        rows: Vec::with_capacity(kept.len()),
        by_identity: None,
        columns,
        last_key: after,
        last: !more,
    };
    // only the last row is decoded now (for the next chunk's start); the rows are indexed by
    // key only if the stream changes the table inside the window (see `observe_row`)
    if let Some(packet) = kept.last() {
        let mut values = Vec::new();
        parse_row(plan, &pending.columns, packet, &mut values)?;
        let key: Option<Vec<String>> =
            plan.key().iter().map(|&k| values.get(k).and_then(|v| v.as_ref()).and_then(sql_literal)).collect();
        pending.last_key = key.or(pending.last_key);
    }
    pending.rows = kept.into_iter().map(Some).collect();
    Ok((pending, next_limit))
}

/// The next chunk of the table being read, read on the snapshot's connection by a task of its
/// own while the pipeline publishes the chunk before it (the read and the publishing overlap
/// instead of taking turns). Its window opens after the previous chunk's high watermark, which
/// the stream has reached, and the pipeline takes it before it reads the stream on: no event
/// of its window goes unseen. Dropped, it stops the read (the connection goes with it).
struct ReadAhead {
    table: usize,
    task: tokio::task::JoinHandle<ReadAheadDone>,
}

/// What a [`ReadAhead`] gives back: the connection, the read, and how long it took.
type ReadAheadDone = (Connection, bool, Result<(Pending, usize), SnapshotError>, Duration);

impl Drop for ReadAhead {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// True when an event starting at `file:offset` lies in the chunk's window: at or after the low
/// watermark, before the high one.
fn in_window(p: &Pending, file: &str, offset: u64) -> bool {
    use std::cmp::Ordering::*;
    let after_low = matches!(binlog_order((file, offset), (&p.low.0, p.low.1)), Some(Greater | Equal) | None);
    let before_high = matches!(binlog_order((file, offset), (&p.high.0, p.high.1)), Some(Less) | None);
    after_low && before_high
}

/// The result columns must be the table's, in its order: a table changed between reading its
/// definition and its rows is read again (the DDL is in the window).
fn check_columns(plan: &TablePlan, columns: &[ColumnDefinition]) -> Result<(), SnapshotError> {
    if columns.len() != plan.table_map.columns.len() {
        return Err(SnapshotError::Columns {
            table: plan.name.clone(),
            read: columns.len(),
            defined: plan.table_map.columns.len(),
        });
    }
    Ok(())
}

/// Sets up a session to read rows with: values exactly as stored (no charset conversion,
/// TIMESTAMP in UTC, no sql_mode that pads CHAR or changes what a literal means), and a read
/// behind a DDL's metadata lock giving up after `lock_wait` instead of holding the stream.
/// The snapshot's and `sluice verify`'s reads.
///
/// # Errors
/// The server refusing a setting.
pub async fn reading_session(c: &mut Connection, lock_wait: Duration) -> Result<(), sluice_protocol::Error> {
    for sql in [
        "SET SESSION character_set_results = NULL, SESSION time_zone = '+00:00', SESSION sql_mode = ''",
        "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ",
        format!("SET SESSION lock_wait_timeout = {}", lock_wait.as_secs().max(1)).as_str(),
    ] {
        c.query_drop(sql).await?;
    }
    Ok(())
}

/// Parses one row of a chunk into the binlog's values of its columns.
///
/// # Errors
/// A row that does not parse or does not fit the table's definition.
pub fn parse_row<'p>(
    plan: &TablePlan,
    columns: &[ColumnDefinition],
    packet: &'p [u8],
    values: &mut Vec<Option<Value<'p>>>,
) -> Result<(), SnapshotError> {
    values.clear();
    // pushed in the arm that makes the value: see to_value_with
    parse_row_each(plan, columns, packet, |_, value| values.push(Some(value)))
}

/// Parses one row of a chunk and hands each value to `visitor` as its after image (a
/// [`crate::avro::RowWriter`] writes it into Avro at once), without an image of values.
///
/// # Errors
/// As [`parse_row`].
pub fn parse_row_into<'p>(
    plan: &TablePlan,
    columns: &[ColumnDefinition],
    packet: &'p [u8],
    visitor: &mut impl ImageVisitor<'p>,
) -> Result<(), SnapshotError> {
    visitor.image(false);
    parse_row_each(plan, columns, packet, |column, value| visitor.value(column, &value))
}

/// Parses one row of a chunk, handing each column's index and value to `emit` in column order.
#[inline(always)]
fn parse_row_each<'p>(
    plan: &TablePlan,
    columns: &[ColumnDefinition],
    packet: &'p [u8],
    mut emit: impl FnMut(usize, Value<'p>),
) -> Result<(), SnapshotError> {
    let cols = &plan.table_map.columns;
    parse_binary_row_with(packet, columns, |i, v| {
        // check_columns made the result's columns the table's
        let Some(col) = cols.get(i) else { return Ok(()) };
        to_value_with(v, col, |value| emit(i, value)).map_err(|e| RowError::Value(Box::new(e)))
    })
    .map_err(|e| match e {
        RowError::Parse(source) => SnapshotError::Query { table: plan.name.clone(), during: "parsing a row", source },
        RowError::Value(source) => SnapshotError::Value { table: plan.name.clone(), source: *source },
    })
}

/// Why a chunk's row did not become values: its packet, or a value of it (boxed: each value's
/// result is this error's size).
enum RowError {
    Parse(sluice_protocol::Error),
    Value(Box<values::ValueError>),
}

impl From<sluice_protocol::Error> for RowError {
    fn from(e: sluice_protocol::Error) -> RowError {
        RowError::Parse(e)
    }
}

/// A row image of a chunk's row.
pub fn image<'p>(values: &mut Vec<Option<Value<'p>>>) -> RowImage<'p> {
    RowImage { values: std::mem::take(values) }
}

/// The rows of a one-pass table as they come.
pub struct OnePassRows<'c> {
    rows: BinaryRows<'c>,
    /// The result columns.
    pub columns: Arc<[ColumnDefinition]>,
    table: String,
}

impl OnePassRows<'_> {
    /// The next row's packet.
    ///
    /// # Errors
    /// The query failing mid-way.
    pub async fn next(&mut self) -> Result<Option<Bytes>, SnapshotError> {
        self.rows.next_row().await.map_err(|source| SnapshotError::Query {
            table: self.table.clone(),
            during: "reading the table",
            source,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A snapshotter whose table `t` is being read (`rows` published), as after a restart
    /// that resumed it; no connection is needed.
    fn running(rows: u64) -> Snapshotter {
        let mut table = crate::position::TableProgress::pending("db.t".into());
        table.state = TableState::Running;
        table.rows = rows;
        let progress = SnapshotProgress { reason: "initial".into(), started_ms: 0, tables: vec![table] };
        Snapshotter::new(&SnapshotSection::default(), ConnectOptions::new("127.0.0.1", 9, "nobody", ""), Some(progress))
    }

    /// The stream reaching `DROP TABLE` of the table being read ends its snapshot, also after
    /// the statement's `observe_statement` dropped the plan (the pipeline's order).
    #[test]
    fn a_drop_reached_by_the_stream_ends_the_table_being_read() {
        let mut s = running(1200);
        s.observe_statement("DROP TABLE `db`.`t`", true, "mysql-bin.000001", 400);
        s.emptied("db.t", "DROP TABLE");
        let t = &s.progress().expect("a snapshot").tables[0];
        assert_eq!(t.state, TableState::Skipped);
        let t = t.clone();
        // its end is said although this process read nothing of it
        assert!(s.reading, "a resumed snapshot says when it is finished");
        s.finished();
        assert!(!s.reading, "said once");
        assert_eq!(
            t.note.as_deref(),
            Some(
                "dropped (DROP TABLE) after 1200 rows were published; its truncate record cleared them from its topic"
            )
        );
        // a TRUNCATE leaves it to go on: what is left to read is what the table holds now
        let mut s = running(5);
        s.emptied("db.t", "TRUNCATE TABLE");
        assert_eq!(s.progress().expect("a snapshot").tables[0].state, TableState::Running);
        // a table already done stays done
        let mut s = running(5);
        s.progress.tables[0].state = TableState::Done;
        s.emptied("db.t", "DROP TABLE");
        assert_eq!(s.progress().expect("a snapshot").tables[0].state, TableState::Done);
    }
}
