//! The live replication source: connect to a MySQL/MariaDB server as a replica, check its
//! settings, stream binlog events, and survive disconnects.
//!
//! [`ReplicationSource`] hands out decoded events one at a time, like a file reader, and keeps
//! the **resume point**: the position (file, offset and GTID state) just after the last
//! complete transaction. A dropped connection or a restarted server is retried with
//! exponential backoff and jitter, one connection at a time, and streaming resumes at the
//! resume point: the events of the transaction that was cut off are sent again, whole, and
//! the consumer is told ([`SourceEvent::Reconnected`]) to drop what it holds of it, so
//! nothing is lost or repeated. Definite errors (binlog purged, GTID unknown, access denied)
//! stop with a message saying what to do.
//!
//! Errors are classified by what happens next: [`SourceError::is_transient`].

use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use sluice_binlog::decoder::{DecoderOptions, EventDecoder};
use sluice_binlog::event::{ChecksumAlg, Event};
use sluice_binlog::file::{Located, PendingPayload};
use sluice_binlog::gtid::{GtidSet, MariadbGtidList};
use sluice_protocol::{ConnectOptions, Connection, DumpRequest, ReadAhead, StartPosition};

use crate::check;
pub use crate::position::{GtidState, ResumePoint, StartFrom};

/// How to connect and stream.
#[derive(Debug, Clone)]
pub struct SourceConfig {
    /// Connection settings (password redacted in Debug).
    pub connect: ConnectOptions,
    /// This replica's server id (must differ from the server's and other replicas').
    pub server_id: u32,
    /// Where the operator sets `server_id` (`source.server_id`, `--server-id`), for messages.
    pub server_id_setting: &'static str,
    /// The host name this replica reports (`SHOW SLAVE HOSTS`); tells a predecessor of this
    /// same replica from another one holding the server id.
    pub report_host: String,
    /// Heartbeat period asked of the server; the read timeout is three periods plus 5 s.
    pub heartbeat: Duration,
    /// Keep streaming at the end (true), or stop at the server's current end (false).
    pub follow: bool,
    /// First wait between reconnection attempts; doubles up to `max_backoff`.
    pub initial_backoff: Duration,
    /// Longest wait between reconnection attempts.
    pub max_backoff: Duration,
    /// Give up after this many consecutive failed attempts (None: never).
    pub max_attempts: Option<u32>,
    /// Decoder switches (checksum verification, decompression cap).
    pub decoder: DecoderOptions,
}

/// Why streaming stopped.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The protocol failed (connection, authentication, server error).
    #[error("{context}: {source}")]
    Protocol {
        /// What Sluice was doing.
        context: String,
        /// The cause.
        #[source]
        source: sluice_protocol::Error,
    },
    /// A pre-flight check failed: the server is not set up for row-based replication (or this
    /// source's predecessor still holds the server id).
    #[error("the server is not ready for replication:\n{}", .0.errors_text())]
    Preflight(Box<check::Report>),
    /// The requested start is not on the server any more.
    #[error("{0}")]
    Purged(String),
    /// The server cannot serve the requested start: GTIDs of the other flavour, or a position it
    /// has not reached.
    #[error("{0}")]
    Start(String),
    /// An event could not be decoded.
    #[error(transparent)]
    Decode(#[from] sluice_binlog::Error),
    /// Reconnecting failed too many times.
    #[error("gave up after {attempts} attempts to reconnect; last error: {last}")]
    GaveUp {
        /// Attempts made.
        attempts: u32,
        /// The last error.
        last: String,
    },
}

impl SourceError {
    fn protocol(context: impl Into<String>, source: sluice_protocol::Error) -> SourceError {
        SourceError::Protocol { context: context.into(), source }
    }

    /// True when the only thing in the way is this source's own predecessor still registered
    /// with the server id (the server drops it within a heartbeat).
    pub fn is_predecessor_registered(&self) -> bool {
        matches!(self, SourceError::Preflight(r) if r.only_predecessor_registered())
    }

    /// True when reconnecting and resuming may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self, SourceError::Protocol { source, .. } if source.is_transient())
    }
}

/// What the source hands out.
#[derive(Debug)]
pub enum SourceEvent<'a> {
    /// An event, with the file and offset it came from.
    Event(Located<'a>),
    /// The connection was re-established; the transaction that was open (if any) is sent
    /// again from its start, so drop what was kept of it.
    Reconnected {
        /// Where streaming resumed.
        at: ResumePoint,
    },
}

/// Bytes of events read from the socket ahead of the decoder (see [`ReadAhead`]).
const READ_AHEAD_BYTES: usize = 8 << 20;

/// The runtime of the commands that stream: two workers, so that the stream's reader task
/// (and the publisher's blocking Kafka calls) run beside the decoding on the caller's thread.
///
/// # Errors
/// When the operating system refuses the threads.
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()
}

/// A live replication stream with reconnection.
pub struct ReplicationSource {
    cfg: SourceConfig,
    stream: Option<ReadAhead>,
    decoder: EventDecoder,
    payload: PendingPayload,
    raw: Bytes,
    file: String,
    tx: TxTracker,
    server_version: String,
    mariadb: bool,
    lower_case_table_names: u32,
}

#[derive(Debug, Clone)]
enum PendingGtid {
    Mysql(sluice_binlog::gtid::MysqlGtid),
    Mariadb(sluice_binlog::gtid::MariadbGtid),
}

impl fmt::Debug for ReplicationSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplicationSource").field("resume", &self.tx.resume).field("file", &self.file).finish()
    }
}

/// A connection to the source that passed the pre-flight checks, with what they learnt.
pub struct CheckedConnection {
    conn: Connection,
    report: check::Report,
    server_version: String,
    lower_case_table_names: u32,
}

impl fmt::Debug for CheckedConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CheckedConnection").field("server", &self.server_version).finish()
    }
}

impl CheckedConnection {
    /// Connects and runs the pre-flight checks (warnings are logged).
    ///
    /// # Errors
    /// Connection and authentication failures; failed checks, all reported at once.
    pub async fn open(cfg: &SourceConfig) -> Result<CheckedConnection, SourceError> {
        let mut conn = connect(&cfg.connect).await?;
        let report = check::run(&mut conn, cfg.server_id, cfg.server_id_setting, &cfg.report_host)
            .await
            .map_err(|e| SourceError::protocol("checking the server", e))?;
        for w in report.warnings() {
            tracing::warn!("{}: {}", w.check, w.message);
        }
        if report.has_errors() {
            return Err(SourceError::Preflight(Box::new(report)));
        }
        let server_version = conn.server_version().to_string();
        // how the server compares database and table names (DDL may spell them otherwise than
        // the TABLE_MAPs do); a server that does not say compares them as written
        let lower_case_table_names = crate::check::scalar(&mut conn, "SELECT @@lower_case_table_names")
            .await
            .ok()
            .flatten()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        Ok(CheckedConnection { conn, report, server_version, lower_case_table_names })
    }

    /// Resolves `start` into a concrete position on this server. With `captured` it also reads
    /// the definitions of the captured tables from `information_schema`, right around taking
    /// the position (before and after it, again until both agree, so no DDL slips in between).
    ///
    /// # Errors
    /// A start the server cannot serve (purged, not reached yet, GTIDs of the other flavour),
    /// server errors.
    pub async fn resolve(
        &mut self,
        start: &StartFrom,
        captured: Option<crate::schema_history::Captured<'_>>,
    ) -> Result<(ResumePoint, Vec<crate::schema_history::TrackedTable>), SourceError> {
        let Self { conn, report, .. } = self;
        let Some(captured) = captured else { return Ok((resolve_start(conn, start, report).await?, Vec::new())) };
        let load = |e| SourceError::protocol("reading the captured tables' definitions", e);
        let mut attempt = 0;
        loop {
            let before = crate::schema_history::load_from_server(conn, captured).await.map_err(load)?;
            let resume = resolve_start(conn, start, report).await?;
            let after = crate::schema_history::load_from_server(conn, captured).await.map_err(load)?;
            attempt += 1;
            if before == after || attempt >= 5 {
                return Ok((resume, after));
            }
            tracing::info!("A DDL ran while the start position was taken; reading the schema again");
        }
    }
}

impl ReplicationSource {
    /// Connects, runs the pre-flight checks, resolves `start` and starts the dump, reading the
    /// captured tables' definitions with the position when `captured` is given (see
    /// [`CheckedConnection::resolve`]).
    ///
    /// # Errors
    /// Connection and authentication failures, failed pre-flight checks (all reported at
    /// once), a start position the server cannot serve.
    pub async fn start_with_schema(
        cfg: SourceConfig,
        start: StartFrom,
        captured: Option<crate::schema_history::Captured<'_>>,
    ) -> Result<(ReplicationSource, Vec<crate::schema_history::TrackedTable>), SourceError> {
        let mut checked = CheckedConnection::open(&cfg).await?;
        let (resume, schema) = checked.resolve(&start, captured).await?;
        Ok((ReplicationSource::open(cfg, checked, resume).await?, schema))
    }

    /// Starts the dump at `resume` on a checked connection.
    ///
    /// # Errors
    /// The server refuses the dump (a purged file, an unknown GTID).
    pub async fn open(
        cfg: SourceConfig,
        checked: CheckedConnection,
        resume: ResumePoint,
    ) -> Result<ReplicationSource, SourceError> {
        let CheckedConnection { conn, server_version, lower_case_table_names, .. } = checked;
        let mut src = ReplicationSource {
            cfg,
            stream: None,
            decoder: EventDecoder::default(),
            payload: PendingPayload::default(),
            raw: Bytes::new(),
            file: resume.file.clone(),
            tx: TxTracker::new(resume),
            server_version,
            mariadb: conn.is_mariadb(),
            lower_case_table_names,
        };
        src.open_stream(conn).await?;
        tracing::info!(server = %src.server_version, start = %src.tx.resume, "Streaming the binlog");
        Ok(src)
    }

    /// The server's `lower_case_table_names` (0: names compare as written).
    pub fn lower_case_table_names(&self) -> u32 {
        self.lower_case_table_names
    }

    /// True when the server is MariaDB (not Oracle MySQL).
    pub fn is_mariadb(&self) -> bool {
        self.mariadb
    }

    /// The position after the last complete transaction.
    pub fn resume_point(&self) -> &ResumePoint {
        &self.tx.resume
    }

    async fn open_stream(&mut self, conn: Connection) -> Result<(), SourceError> {
        let start = match &self.tx.resume.gtid {
            Some(GtidState::Mariadb(l)) if self.mariadb => StartPosition::MariadbGtid(l.clone()),
            Some(GtidState::Mysql(s)) if !self.mariadb => StartPosition::MysqlGtid(s.clone()),
            _ => StartPosition::FilePosition { file: self.tx.resume.file.clone(), position: self.tx.resume.position },
        };
        let mut req = DumpRequest::new(self.cfg.server_id, start);
        req.report_host = self.cfg.report_host.clone();
        req.heartbeat_period = Some(self.cfg.heartbeat);
        req.non_blocking = !self.cfg.follow;
        let stream =
            conn.start_binlog_dump(req).await.map_err(|e| SourceError::protocol("starting the binlog dump", e))?;
        // A fresh dump starts with a fake ROTATE and the file's FDE: decoder state starts over.
        self.decoder = EventDecoder::new(self.cfg.decoder.clone());
        // the fake ROTATE before the FDE is written with the negotiated checksum
        self.decoder.set_checksum(ChecksumAlg::Crc32);
        self.payload.clear();
        self.file = self.tx.resume.file.clone();
        self.tx.reset();
        self.stream = Some(stream.read_ahead(READ_AHEAD_BYTES));
        Ok(())
    }

    /// The next event, or `None` at the end of a non-following dump.
    ///
    /// # Errors
    /// Definite errors (purged binlog, unknown GTID, access denied, undecodable events), and
    /// transient ones once reconnection gives up.
    pub async fn next_event(&mut self) -> Result<Option<SourceEvent<'_>>, SourceError> {
        if self.payload.has_next() {
            let offset = self.payload.offset();
            let Self { payload, decoder, file, .. } = self;
            let ev =
                payload.next(decoder).map_err(|e| e.at(file, offset, sluice_binlog::EventType::TransactionPayload))?;
            let located = Located { file, offset, in_payload: true, event: ev };
            self.tx.observe(&located);
            return Ok(Some(SourceEvent::Event(located)));
        }
        let Some(stream) = self.stream.as_mut() else { return Ok(None) };
        match stream.next_event().await {
            Ok(Some(raw)) => self.raw = raw,
            // A blocking dump never ends on its own: an EOF there is a server shutting down
            // (MariaDB ends its dump threads with EOF, not an error), so wait for it to return.
            Ok(None) if self.cfg.follow => {
                tracing::warn!(resume = %self.tx.resume, "The server ended the binlog stream (shutting down?); reconnecting");
                self.stream = None;
                self.reconnect("the server ended the binlog stream".into()).await?;
                return Ok(Some(SourceEvent::Reconnected { at: self.tx.resume.clone() }));
            }
            Ok(None) => {
                self.stream = None;
                return Ok(None);
            }
            Err(e) if e.is_transient() => {
                tracing::warn!(error = %e, resume = %self.tx.resume, "The replication connection failed; reconnecting");
                self.stream = None;
                self.reconnect(e.to_string()).await?;
                return Ok(Some(SourceEvent::Reconnected { at: self.tx.resume.clone() }));
            }
            Err(e) => return Err(self.definite(e).await),
        }
        let header_type =
            self.raw.get(4).map_or(sluice_binlog::EventType::Unknown(0), |&b| sluice_binlog::EventType::from_u8(b));
        let log_pos = self.raw.get(13..17).and_then(|b| <[u8; 4]>::try_from(b).ok()).map_or(0, u32::from_le_bytes);
        let offset = u64::from(log_pos).saturating_sub(self.raw.len() as u64);
        let Self { raw, decoder, payload, file, .. } = self;
        let ev = decoder.decode(raw).map_err(|e| e.at(file, offset, header_type))?;
        payload.refill(decoder, offset);
        // the current file changes on ROTATE (the fake one at the start names where we are)
        if let Event::Rotate(r) = &ev.event {
            *file = r.next_file.to_string();
        }
        let located = Located { file, offset, in_payload: false, event: ev };
        self.tx.observe(&located);
        Ok(Some(SourceEvent::Event(located)))
    }

    async fn reconnect(&mut self, first: String) -> Result<(), SourceError> {
        let mut delay = self.cfg.initial_backoff;
        let mut attempts = 0u32;
        let mut last = first;
        loop {
            attempts += 1;
            if self.cfg.max_attempts.is_some_and(|m| attempts > m) {
                return Err(SourceError::GaveUp { attempts: attempts - 1, last });
            }
            // full jitter keeps a fleet of replicas from reconnecting in lockstep
            let wait = delay.mul_f64(0.5 + fastrand::f64() * 0.5);
            tokio::time::sleep(wait).await;
            match connect(&self.cfg.connect).await {
                Ok(conn) => match self.open_stream(conn).await {
                    Ok(()) => {
                        tracing::info!(attempts, resume = %self.tx.resume, "Reconnected");
                        return Ok(());
                    }
                    Err(e) if e.is_transient() => last = e.to_string(),
                    Err(e) => return Err(e),
                },
                Err(e) if e.is_transient() => last = e.to_string(),
                Err(e) => return Err(e),
            }
            tracing::warn!(attempts, error = %last, "Reconnection failed; retrying");
            delay = (delay * 2).min(self.cfg.max_backoff);
        }
    }

    /// Turns a definite server error into an operator message.
    async fn definite(&mut self, e: sluice_protocol::Error) -> SourceError {
        if e.server_error().is_some_and(|s| s.code == 1236) {
            let earliest = match connect(&self.cfg.connect).await {
                Ok(mut c) => check::binary_logs(&mut c).await.ok().and_then(|l| l.first().map(|(f, _)| f.clone())),
                Err(_) => None,
            };
            let mut msg = format!("the server cannot stream from {}: {e}", self.tx.resume);
            if let Some(f) = earliest {
                msg.push_str(&format!(
                    ". The earliest binlog it still has is {f}: if the history in between was purged, those changes \
                     are lost to replication; take a new snapshot, or start from {f}:4 knowingly"
                ));
            }
            return SourceError::Purged(msg);
        }
        SourceError::protocol("streaming the binlog", e)
    }
}

/// Follows transaction boundaries to keep the resume point.
///
/// The position only moves forward within a file (the FDE a server re-sends at the start of
/// a dump carries its original, earlier end position), and only at a boundary: after an XID,
/// a COMMIT/ROLLBACK, or a statement outside any transaction (DDL). The GTID state is kept
/// only when streaming started from GTIDs: a set built from the GTIDs seen since a file
/// position would be partial, and resuming from it would replay the server's whole history.
#[derive(Debug)]
struct TxTracker {
    in_tx: bool,
    pending: Option<PendingGtid>,
    /// End position of the last TRANSACTION_PAYLOAD: its inner events have no positions of
    /// their own, so the XID inside commits at the payload's end.
    payload_end: u64,
    resume: ResumePoint,
}

impl TxTracker {
    fn new(resume: ResumePoint) -> TxTracker {
        TxTracker { in_tx: false, pending: None, payload_end: 0, resume }
    }

    /// Forgets the open transaction (after a reconnect it is streamed again).
    fn reset(&mut self) {
        self.in_tx = false;
        self.pending = None;
    }

    fn observe(&mut self, ev: &Located<'_>) {
        let h = &ev.event.header;
        let mut commit = false;
        match &ev.event.event {
            Event::Gtid(g) => {
                self.in_tx = true;
                self.pending = (!g.anonymous).then(|| PendingGtid::Mysql(g.gtid.clone()));
            }
            Event::MariadbGtid(g) => {
                self.in_tx = true;
                self.pending = Some(PendingGtid::Mariadb(g.gtid));
            }
            Event::Query(q) if q.is_begin() => self.in_tx = true,
            // COMMIT, ROLLBACK, or a statement on its own (DDL)
            Event::Query(_) | Event::Xid(_) => commit = true,
            Event::Rotate(r) => {
                if !self.in_tx && r.next_file != self.resume.file {
                    self.resume.file = r.next_file.to_string();
                    self.resume.position = r.position;
                }
                return;
            }
            Event::TransactionPayload(_) => self.payload_end = u64::from(h.log_pos),
            Event::Heartbeat { .. } => return,
            _ => {}
        }
        if commit {
            self.in_tx = false;
            match (self.pending.take(), &mut self.resume.gtid) {
                (Some(PendingGtid::Mysql(g)), Some(GtidState::Mysql(set))) => set.add(&g),
                (Some(PendingGtid::Mariadb(g)), Some(GtidState::Mariadb(list))) => list.advance(g),
                _ => {}
            }
        }
        let end = if ev.in_payload { self.payload_end } else { u64::from(h.log_pos) };
        if (commit || !self.in_tx) && end > self.resume.position {
            self.resume.position = end;
        }
    }
}

/// Connection options from a `sluice run` configuration (URL, password, TLS, heartbeat).
///
/// # Errors
/// An unreadable password file.
pub fn connect_options(cfg: &crate::config::Config) -> Result<ConnectOptions, String> {
    let s = &cfg.source;
    let password = cfg.source_password().map_err(|e| e.to_string())?;
    let mut c = ConnectOptions::new(s.url.host.clone(), s.url.port, s.url.user.clone(), password.expose());
    c.tls = s.tls.mode();
    c.ca_file = s.ca_file.clone();
    c.read_timeout = Some(s.heartbeat * 3 + Duration::from_secs(5));
    Ok(c)
}

async fn connect(opts: &ConnectOptions) -> Result<Connection, SourceError> {
    Connection::connect(opts.clone())
        .await
        .map_err(|e| SourceError::protocol(format!("connecting to {}:{} as {}", opts.host, opts.port, opts.user), e))
}

/// Resolves a start request into a concrete position on this server, refusing what it cannot
/// serve: a file it no longer has (or a position past its end), GTIDs of the other flavour,
/// GTIDs it has not reached, and GTIDs whose successors it has purged.
///
/// # Errors
/// [`SourceError::Start`] for those, [`SourceError::Protocol`] when a query fails.
pub async fn resolve_start(
    conn: &mut Connection,
    start: &StartFrom,
    report: &check::Report,
) -> Result<ResumePoint, SourceError> {
    let logs = check::binary_logs(conn).await.map_err(|e| SourceError::protocol("listing binary logs", e))?;
    let earliest = logs.first().map_or("none", |(f, _)| f.as_str());
    let flavour = if report.mariadb { "MariaDB" } else { "MySQL" };
    Ok(match start {
        StartFrom::Current => {
            let (file, position) = check::current_position(conn)
                .await
                .map_err(|e| SourceError::protocol("reading the current position", e))?;
            let gtid = report.gtid_position.clone();
            ResumePoint { file, position, gtid }
        }
        StartFrom::Earliest => {
            let Some((file, _)) = logs.first() else {
                return Err(SourceError::Start("the server lists no binary logs (SHOW BINARY LOGS is empty)".into()));
            };
            ResumePoint { file: file.clone(), position: 4, gtid: None }
        }
        StartFrom::Position { file, position } => {
            let Some((_, size)) = logs.iter().find(|(f, _)| f == file) else {
                return Err(SourceError::Purged(format!(
                    "binlog {file} is not on the server (purged, or never existed); the earliest it has is {earliest}"
                )));
            };
            if position > size {
                return Err(SourceError::Start(format!(
                    "{file}:{position} is past the end of {file}, which the server lists with {size} bytes"
                )));
            }
            ResumePoint { file: file.clone(), position: *position, gtid: None }
        }
        StartFrom::MysqlGtid(set) => {
            if report.mariadb {
                return Err(SourceError::Start(format!(
                    "{set} is a MySQL GTID set, but the server is MariaDB: its GTIDs read domain-server-seq (its \
                     @@gtid_binlog_pos now is {}); give a MariaDB GTID list, or a file and position",
                    report.gtid_position.as_ref().map_or_else(|| "empty".to_string(), ToString::to_string)
                )));
            }
            // Not tested against a MySQL server (none runs here): the sets come from the
            // documented variables, and the comparison is unit-tested.
            let set_of = |v: Option<String>| v.unwrap_or_default().parse::<GtidSet>().unwrap_or_default();
            let executed = set_of(check::scalar(conn, "SELECT @@GLOBAL.gtid_executed").await.ok().flatten());
            let purged = set_of(check::scalar(conn, "SELECT @@GLOBAL.gtid_purged").await.ok().flatten());
            if let Some(why) = mysql_gtid_problem(set, &executed, &purged) {
                return Err(SourceError::Start(why));
            }
            ResumePoint { file: String::new(), position: 4, gtid: Some(GtidState::Mysql(set.clone())) }
        }
        StartFrom::MariadbGtid(list) => {
            let Some(GtidState::Mariadb(newest)) = &report.gtid_position else {
                return Err(SourceError::Start(format!(
                    "{list} is a MariaDB GTID list, but the server is {flavour}{}",
                    if report.mariadb { " without GTIDs in its binlog yet" } else { ": its GTIDs read uuid:1-5" }
                )));
            };
            // the GTID state at the start of the oldest binlog: what was purged before it
            let oldest = match logs.first() {
                Some((file, _)) => check::scalar(
                    conn,
                    &format!("SELECT BINLOG_GTID_POS({}, 4)", sluice_protocol::replication::sql_string_literal(file)),
                )
                .await
                .ok()
                .flatten()
                .and_then(|p| p.parse::<MariadbGtidList>().ok())
                .unwrap_or_default(),
                None => MariadbGtidList::new(),
            };
            if let Some(why) = mariadb_gtid_problem(list, newest, &oldest, earliest) {
                return Err(SourceError::Start(why));
            }
            ResumePoint { file: String::new(), position: 4, gtid: Some(GtidState::Mariadb(list.clone())) }
        }
    })
}

/// Why a MySQL server cannot stream from `requested` (everything not in it), given its
/// `gtid_executed` and `gtid_purged`; None when it can.
fn mysql_gtid_problem(requested: &GtidSet, executed: &GtidSet, purged: &GtidSet) -> Option<String> {
    if !requested.is_subset(executed) {
        return Some(format!(
            "the server has not executed all of {requested} (its gtid_executed is {executed}): it has not reached \
             this position; is this the right server?"
        ));
    }
    if !purged.is_subset(requested) {
        return Some(format!(
            "the server has purged transactions that follow {requested} (its gtid_purged is {purged}): changes \
             after it are lost to replication; take a new snapshot, or start from a later position knowingly"
        ));
    }
    None
}

/// Why a MariaDB server cannot stream after `requested`, given its newest GTID per domain
/// (`gtid_binlog_pos`) and the position at the start of its oldest binlog; None when it can.
fn mariadb_gtid_problem(
    requested: &MariadbGtidList,
    newest: &MariadbGtidList,
    oldest: &MariadbGtidList,
    earliest_file: &str,
) -> Option<String> {
    for g in requested.iter() {
        match newest.get(g.domain_id) {
            None => {
                return Some(format!(
                    "the server has no GTID in domain {} (its gtid_binlog_pos is {newest}): it has not reached {g}; \
                     is this the right server?",
                    g.domain_id
                ))
            }
            Some(n) if n.seq_no < g.seq_no => {
                return Some(format!(
                    "the server has not reached {g}: its newest GTID in domain {} is {n} (gtid_binlog_pos \
                     {newest}); is this the right server, or is it a replica that is behind?",
                    g.domain_id
                ))
            }
            _ => {}
        }
        if oldest.get(g.domain_id).is_some_and(|o| g.seq_no < o.seq_no) {
            return Some(format!(
                "the server no longer has the transactions after {g}: its oldest binlog {earliest_file} starts at \
                 {oldest}; changes between are lost to replication: take a new snapshot, or start from \
                 {earliest_file}:4 knowingly"
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mariadb_gtids_ahead_behind_and_purged() {
        let l = |s: &str| s.parse::<MariadbGtidList>().unwrap();
        let (newest, oldest) = (l("0-1-500,1-1-20"), l("0-1-100"));
        assert_eq!(mariadb_gtid_problem(&l("0-1-300"), &newest, &oldest, "b.000002"), None);
        assert_eq!(mariadb_gtid_problem(&l("0-1-100,1-1-20"), &newest, &oldest, "b.000002"), None);
        let ahead = mariadb_gtid_problem(&l("0-1-501"), &newest, &oldest, "b.000002").unwrap();
        assert!(
            ahead.starts_with("the server has not reached 0-1-501: its newest GTID in domain 0 is 0-1-500"),
            "{ahead}"
        );
        assert!(!ahead.contains("purged") && !ahead.contains("lost"), "{ahead}");
        let domain = mariadb_gtid_problem(&l("7-1-1"), &newest, &oldest, "b.000002").unwrap();
        assert!(domain.contains("no GTID in domain 7"), "{domain}");
        let purged = mariadb_gtid_problem(&l("0-1-99"), &newest, &oldest, "b.000002").unwrap();
        assert!(
            purged.contains("no longer has the transactions after 0-1-99") && purged.contains("b.000002:4"),
            "{purged}"
        );
    }

    #[test]
    fn mysql_gtid_sets_ahead_and_purged() {
        let s = |t: &str| t.parse::<GtidSet>().unwrap();
        let u = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
        let executed = s(&format!("{u}:1-100"));
        let purged = s(&format!("{u}:1-10"));
        assert_eq!(mysql_gtid_problem(&s(&format!("{u}:1-50")), &executed, &purged), None);
        let ahead = mysql_gtid_problem(&s(&format!("{u}:1-150")), &executed, &purged).unwrap();
        assert!(ahead.contains("has not executed all of") && ahead.contains("has not reached"), "{ahead}");
        let gone = mysql_gtid_problem(&s(&format!("{u}:1-5")), &executed, &purged).unwrap();
        assert!(gone.contains("has purged transactions that follow"), "{gone}");
    }
}
