//! The live replication source: connect to a MySQL/MariaDB server as a replica, check its
//! settings, stream binlog events, and survive disconnects.
//!
//! [`ReplicationSource`] hands out decoded events one at a time, each with what it means for
//! its transaction ([`Step`], from the binlog crate's [`TransactionTracker`]), and keeps the
//! **resume point**: the position (file, offset and GTID state) just after the last complete
//! transaction. A dropped connection or a restarted server is retried with exponential backoff
//! and jitter, one connection at a time, and streaming resumes at the resume point: the events
//! of the transaction that was cut off are sent again, whole, and the consumer is told
//! ([`SourceEvent::Reconnected`]) to drop what it holds of it, so nothing is lost or repeated.
//! Definite errors (binlog purged, GTID unknown, access denied) stop with a message saying what
//! to do; [`SourceError::disposition`] says which is which.
//!
//! The pre-flight checks are in [`preflight`], what Sluice asks the server besides the stream
//! in [`server`].

pub mod preflight;
pub mod server;

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use sluice_binlog::decoder::{DecoderOptions, EventDecoder};
use sluice_binlog::event::ChecksumAlg;
use sluice_binlog::transaction::{Step, TransactionTracker};
use sluice_binlog::walk::{EventWalker, Located, Offset};
use sluice_protocol::{ConnectOptions, Connection, DumpRequest, ReadAhead, StartPosition};

use crate::config::{Secret, SourceUrl, TlsSetting};
use crate::disposition::Disposition;
use crate::position::{GtidState, ResumePoint, StartFrom};
pub use server::{resolve_start, ServerFacts};

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

/// The settings both `sluice run` and `sluice dump --source` give in their own words.
#[derive(Debug, Clone)]
pub struct Endpoint<'a> {
    /// Where, and as whom.
    pub url: &'a SourceUrl,
    /// The password.
    pub password: &'a Secret,
    /// TLS.
    pub tls: TlsSetting,
    /// The CA for the verifying TLS modes.
    pub ca_file: Option<PathBuf>,
    /// The heartbeat period: a silent connection is dead after three, plus 5 s.
    pub heartbeat: Duration,
}

impl Endpoint<'_> {
    /// The connection options (the read timeout derived from the heartbeat).
    pub fn connect_options(&self) -> ConnectOptions {
        let mut c =
            ConnectOptions::new(self.url.host.clone(), self.url.port, self.url.user.clone(), self.password.expose());
        c.tls = self.tls.mode();
        c.ca_file = self.ca_file.clone();
        c.read_timeout = Some(self.heartbeat * 3 + Duration::from_secs(5));
        c
    }
}

impl SourceConfig {
    /// A stream over `endpoint`, following or not, with the reconnection backoff both commands
    /// use (250 ms doubling to 30 s).
    pub fn new(endpoint: &Endpoint<'_>, server_id: u32, server_id_setting: &'static str, report_host: String) -> Self {
        SourceConfig {
            connect: endpoint.connect_options(),
            server_id,
            server_id_setting,
            report_host,
            heartbeat: endpoint.heartbeat,
            follow: true,
            initial_backoff: Duration::from_millis(250),
            max_backoff: Duration::from_secs(30),
            max_attempts: None,
            decoder: DecoderOptions::default(),
        }
    }
}

impl SourceConfig {
    /// How `sluice run` connects to and streams from `[source]`: following, and giving up after
    /// three failed reconnections (the restart loop then starts again from the checkpoint).
    ///
    /// # Errors
    /// An unreadable password file.
    pub fn for_run(source: &crate::config::SourceSection) -> Result<SourceConfig, crate::config::ConfigError> {
        SourceConfig::for_server(source, 0)
    }

    /// As [`SourceConfig::for_run`], for server `index` of [`crate::config::SourceSection::servers`]
    /// (0: `source.url`, then the `failover` list; wraps around).
    ///
    /// # Errors
    /// An unreadable password file.
    pub fn for_server(
        s: &crate::config::SourceSection,
        index: usize,
    ) -> Result<SourceConfig, crate::config::ConfigError> {
        let password = s.password()?;
        let servers = s.servers();
        let endpoint = Endpoint {
            url: servers[index % servers.len()],
            password: &password,
            tls: s.tls,
            ca_file: s.ca_file.clone(),
            heartbeat: s.heartbeat,
        };
        let mut c = SourceConfig::new(&endpoint, s.server_id, "source.server_id", s.report_host());
        c.max_attempts = Some(3);
        c.connect.max_packet_size = usize::try_from(s.max_event_size).unwrap_or(usize::MAX);
        Ok(c)
    }
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
    Preflight(Box<preflight::Report>),
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
    /// The server ended a following stream (MariaDB does so when it shuts down).
    #[error("the server ended the binlog stream (shutting down?)")]
    Ended,
    /// Reconnecting failed too many times.
    #[error("gave up after {attempts} attempts to reconnect; last error: {last}")]
    GaveUp {
        /// Attempts made.
        attempts: u32,
        /// The last error.
        last: Box<SourceError>,
    },
}

impl SourceError {
    pub(crate) fn protocol(context: impl Into<String>, source: sluice_protocol::Error) -> SourceError {
        SourceError::Protocol { context: context.into(), source }
    }

    /// True when the only thing in the way is this source's own predecessor still registered
    /// with the server id (the server drops it within a few heartbeat periods).
    pub fn is_predecessor_registered(&self) -> bool {
        matches!(self, SourceError::Preflight(r) if r.only_predecessor_registered())
    }

    /// True when reconnecting and resuming may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self, SourceError::Protocol { source, .. } if source.is_transient())
            || matches!(self, SourceError::Ended)
    }

    /// What the caller does next: reconnect-and-resume errors restart (a server that stayed
    /// away past the source's own reconnection attempts included), a predecessor still
    /// registered is waited for, the rest stop.
    pub fn disposition(&self) -> Disposition {
        if self.is_predecessor_registered() {
            Disposition::WaitForPredecessor
        } else if self.is_transient() || matches!(self, SourceError::GaveUp { .. }) {
            Disposition::Restart
        } else {
            Disposition::Stop
        }
    }
}

/// What the source hands out.
#[derive(Debug)]
pub enum SourceEvent<'a> {
    /// An event, with the file and offset it came from, and what it means for its transaction.
    Event(Located<'a>, Step),
    /// The connection was re-established; the transaction that was open (if any) is sent
    /// again from its start, so drop what was kept of it.
    Reconnected {
        /// Where streaming resumed.
        at: ResumePoint,
    },
}

/// Bytes of events read from the socket ahead of the decoder (see [`ReadAhead`]).
const READ_AHEAD_BYTES: usize = 8 << 20;

/// A live replication stream with reconnection.
pub struct ReplicationSource {
    cfg: SourceConfig,
    stream: Option<ReadAhead>,
    walker: EventWalker,
    raw: Bytes,
    tx: TransactionTracker,
    server_version: String,
    mariadb: bool,
    lower_case_table_names: u32,
}

impl fmt::Debug for ReplicationSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplicationSource").field("resume", self.tx.resume_point()).finish()
    }
}

/// A connection to the source that passed the pre-flight checks, with what they learnt.
pub struct CheckedConnection {
    conn: Connection,
    report: preflight::Report,
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
        let report = preflight::run(&mut conn, cfg.server_id, cfg.server_id_setting, &cfg.report_host)
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
        let lower_case_table_names = server::scalar(&mut conn, "SELECT @@lower_case_table_names")
            .await
            .ok()
            .flatten()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        Ok(CheckedConnection { conn, report, server_version, lower_case_table_names })
    }

    /// The replicas connected to the server: server id and reported host.
    ///
    /// # Errors
    /// Server errors.
    pub async fn replicas(&mut self) -> Result<Vec<(u32, String)>, SourceError> {
        server::replica_hosts(&mut self.conn).await.map_err(|e| SourceError::protocol("listing the replicas", e))
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
        captured: Option<crate::schema::Captured<'_>>,
    ) -> Result<(ResumePoint, Vec<crate::schema::TrackedTable>), SourceError> {
        let Self { conn, report, .. } = self;
        let facts = ServerFacts { mariadb: report.mariadb, gtid_position: report.gtid_position.clone() };
        let Some(captured) = captured else { return Ok((resolve_start(conn, start, &facts).await?, Vec::new())) };
        let load = |e| SourceError::protocol("reading the captured tables' definitions", e);
        let mut attempt = 0;
        loop {
            let before = crate::schema::load::load_from_server(conn, captured).await.map_err(load)?;
            let resume = resolve_start(conn, start, &facts).await?;
            let after = crate::schema::load::load_from_server(conn, captured).await.map_err(load)?;
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
        captured: Option<crate::schema::Captured<'_>>,
    ) -> Result<(ReplicationSource, Vec<crate::schema::TrackedTable>), SourceError> {
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
            walker: EventWalker::stream(resume.file.clone(), EventDecoder::new(cfg.decoder.clone())),
            cfg,
            stream: None,
            raw: Bytes::new(),
            tx: TransactionTracker::new(resume),
            server_version,
            mariadb: conn.is_mariadb(),
            lower_case_table_names,
        };
        src.open_stream(conn).await?;
        tracing::info!(server = %src.server_version, start = %src.tx.resume_point(), "Streaming the binlog");
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
        self.tx.resume_point()
    }

    /// True while a transaction is open.
    pub fn in_transaction(&self) -> bool {
        self.tx.in_transaction()
    }

    async fn open_stream(&mut self, conn: Connection) -> Result<(), SourceError> {
        let resume = self.tx.resume_point().clone();
        // An empty state (a server that has written no GTID yet) with a known file starts by
        // position: by GTID it would mean "from the first binlog on".
        let empty = resume.gtid.as_ref().is_some_and(|g| g.to_string().is_empty()) && !resume.file.is_empty();
        let start = match &resume.gtid {
            Some(GtidState::Mariadb(l)) if self.mariadb && !empty => StartPosition::MariadbGtid(l.clone()),
            Some(GtidState::Mysql(s)) if !self.mariadb && !empty => StartPosition::MysqlGtid(s.clone()),
            _ => StartPosition::FilePosition { file: resume.file.clone(), position: resume.position },
        };
        let mut req = DumpRequest::new(self.cfg.server_id, start);
        req.report_host = self.cfg.report_host.clone();
        req.heartbeat_period = Some(self.cfg.heartbeat);
        req.non_blocking = !self.cfg.follow;
        let stream =
            conn.start_binlog_dump(req).await.map_err(|e| SourceError::protocol("starting the binlog dump", e))?;
        // A fresh dump starts with a fake ROTATE and the file's FDE: decoder state starts over;
        // the fake ROTATE before the FDE is written with the negotiated checksum.
        let mut decoder = EventDecoder::new(self.cfg.decoder.clone());
        decoder.set_checksum(ChecksumAlg::Crc32);
        self.walker.restart(resume.file, decoder);
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
        if self.walker.has_inner() {
            let Self { walker, tx, .. } = self;
            let ev = walker.next_inner()?;
            let step = tx.observe(&ev);
            return Ok(Some(SourceEvent::Event(ev, step)));
        }
        let Some(stream) = self.stream.as_mut() else { return Ok(None) };
        match stream.next_event().await {
            Ok(Some(raw)) => self.raw = raw,
            // A blocking dump never ends on its own: an EOF there is a server shutting down
            // (MariaDB ends its dump threads with EOF, not an error), so wait for it to return.
            Ok(None) if self.cfg.follow => {
                tracing::warn!(resume = %self.tx.resume_point(), "The server ended the binlog stream (shutting down?); reconnecting");
                self.stream = None;
                self.reconnect(SourceError::Ended).await?;
                return Ok(Some(SourceEvent::Reconnected { at: self.tx.resume_point().clone() }));
            }
            Ok(None) => {
                self.stream = None;
                return Ok(None);
            }
            Err(e) if e.is_transient() => {
                tracing::warn!(error = %e, resume = %self.tx.resume_point(), "The replication connection failed; reconnecting");
                self.stream = None;
                self.reconnect(SourceError::protocol("streaming the binlog", e)).await?;
                return Ok(Some(SourceEvent::Reconnected { at: self.tx.resume_point().clone() }));
            }
            Err(e) => return Err(self.definite(e).await),
        }
        let Self { raw, walker, tx, .. } = self;
        let ev = walker.walk(raw, Offset::FromHeader)?;
        let step = tx.observe(&ev);
        Ok(Some(SourceEvent::Event(ev, step)))
    }

    async fn reconnect(&mut self, first: SourceError) -> Result<(), SourceError> {
        let mut delay = self.cfg.initial_backoff;
        let mut attempts = 0u32;
        let mut last = first;
        loop {
            attempts += 1;
            if self.cfg.max_attempts.is_some_and(|m| attempts > m) {
                return Err(SourceError::GaveUp { attempts: attempts - 1, last: Box::new(last) });
            }
            // full jitter keeps a fleet of replicas from reconnecting in lockstep
            let wait = delay.mul_f64(0.5 + fastrand::f64() * 0.5);
            tokio::time::sleep(wait).await;
            match connect(&self.cfg.connect).await {
                Ok(conn) => match self.open_stream(conn).await {
                    Ok(()) => {
                        tracing::info!(attempts, resume = %self.tx.resume_point(), "Reconnected");
                        return Ok(());
                    }
                    Err(e) if e.is_transient() => last = e,
                    Err(e) => return Err(e),
                },
                Err(e) if e.is_transient() => last = e,
                Err(e) => return Err(e),
            }
            tracing::warn!(attempts, error = %last, "Reconnection failed; retrying");
            delay = (delay * 2).min(self.cfg.max_backoff);
        }
    }

    /// Turns a definite server error into an operator message.
    async fn definite(&mut self, e: sluice_protocol::Error) -> SourceError {
        if let sluice_protocol::Error::TooLarge { what: "packet", len, max } = &e {
            // the packet's size is the event's plus the OK marker
            return SourceError::Start(format!(
                "an event of the transaction after {} has {len} bytes (or more), over source.max_event_size ({max} \
                 bytes), the most Sluice takes: an event is held whole while it is decoded, so raise the limit \
                 knowingly (up to 1GiB), or keep such rows out of the binlog",
                self.tx.resume_point()
            ));
        }
        if e.server_error().is_some_and(|s| s.code == ER_SLAVE_SAME_ID) {
            // MariaDB ends the older of two dump threads with the same server id
            return SourceError::Start(format!(
                "the server ended this replication stream because another replica connected with the same server id \
                 ({} = {}): another `sluice run` of this source (as {}), which takes over, or another replica \
                 configured with that id; give every replica of the server its own id ({e})",
                self.cfg.server_id_setting, self.cfg.server_id, self.cfg.report_host
            ));
        }
        if e.server_error().is_some_and(|s| s.code == 1236) {
            let earliest = match connect(&self.cfg.connect).await {
                Ok(mut c) => server::binary_logs(&mut c).await.ok().and_then(|l| l.first().map(|(f, _)| f.clone())),
                Err(_) => None,
            };
            let mut msg = format!("the server cannot stream from {}: {e}", self.tx.resume_point());
            if let Some(f) = earliest {
                msg.push_str(&format!(
                    ". Its earliest binlog is {f}. If the position is of another server, or its history was purged, \
                     move the checkpoint knowingly (sluice run: `sluice position set --to ...`; dump: another \
                     --start-file/--start-gtid); purged changes are lost to replication"
                ));
            }
            return SourceError::Purged(msg);
        }
        SourceError::protocol(format!("streaming the binlog after {}", self.tx.resume_point()), e)
    }
}

/// MariaDB's `ER_SLAVE_SAME_ID`: a newer replica with the same server id connected.
const ER_SLAVE_SAME_ID: u16 = 4052;

async fn connect(opts: &ConnectOptions) -> Result<Connection, SourceError> {
    Connection::connect(opts.clone())
        .await
        .map_err(|e| SourceError::protocol(format!("connecting to {}:{} as {}", opts.host, opts.port, opts.user), e))
}
