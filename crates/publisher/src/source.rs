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
//! When the server has purged the resume point's binlog, [`ReplicationSource::from_archive`]
//! reads the archived copies of its files (`source.archive`, written by `sluice archive`) up
//! to the archive's end, then opens the server's stream **by file and position** at the
//! resume point: the server resends the transaction the archive ended in, and the events
//! before the archive's end (already handed out) are walked but not handed out again, so the
//! consumer sees one gapless stream, without a restart.
//!
//! The pre-flight checks are in [`preflight`], what Sluice asks the server besides the stream
//! in [`server`].

pub mod preflight;
pub mod server;

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use sluice_binlog::decoder::{DecoderOptions, EventDecoder};
use sluice_binlog::event::ChecksumAlg;
use sluice_binlog::event_type::EventType;
use sluice_binlog::header::{EventHeader, LOG_EVENT_ARTIFICIAL_F};
use sluice_binlog::transaction::{Step, TransactionTracker};
use sluice_binlog::walk::{EventWalker, Located, Offset};
use sluice_protocol::{ConnectOptions, Connection, DumpRequest, ReadAhead, StartPosition};

use crate::archive::dir::{next_name, order_key};
use crate::archive::read::{coverage, Archive, ArchiveFeed, Coverage, FileEnd};
use crate::config::{Secret, SourceUrl, TlsSetting};
use crate::disposition::Disposition;
use crate::metrics::Metrics;
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
    /// The archive (`source.archive`) could not be read.
    #[error("reading the archive: {0}")]
    Archive(String),
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
    /// Reading the archive instead of the server (see [`ReplicationSource::from_archive`]).
    catch_up: Option<CatchUp>,
    /// After the archive: the server resends from the resume point; its events before this
    /// file and offset were handed out from the archive already.
    hide_until: Option<(String, u64)>,
    metrics: Option<Arc<Metrics>>,
    walker: EventWalker,
    raw: Bytes,
    tx: TransactionTracker,
    server_version: String,
    mariadb: bool,
    lower_case_table_names: u32,
}

/// The archive being read, and how far events were handed out from it.
struct CatchUp {
    feed: ArchiveFeed,
    /// The file and offset after the last event handed out.
    mark: (String, u64),
    /// An event was walked since `mark` was last updated.
    walked: bool,
    /// The number of the server's oldest binlog when the catch-up began: from that file on
    /// the server streams, so the archive hands over there (a pipeline slower than the
    /// writes would otherwise follow the archive for good).
    server_oldest: u64,
}

impl fmt::Debug for ReplicationSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplicationSource").field("resume", self.tx.resume_point()).finish()
    }
}

/// Logs a pre-flight warning the first time this process sees it for this server: a start
/// opens several checked connections (resolving the start, the stream, the snapshot), and each
/// reconnect another, and the same finding repeated said nothing new (`sluice check` lists them).
fn warn_once(server: &ConnectOptions, check: &str, message: &str) {
    static SEEN: std::sync::OnceLock<std::sync::Mutex<std::collections::HashSet<String>>> = std::sync::OnceLock::new();
    let key = format!("{}:{} {check}: {message}", server.host, server.port);
    let new = SEEN.get_or_init(Default::default).lock().map_or(true, |mut seen| seen.insert(key));
    if new {
        tracing::warn!("{check}: {message}");
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
        Self::open_checked(cfg, false).await
    }

    /// [`CheckedConnection::open`] for a command that takes over from a running instance of
    /// the source (`sluice position set --force`): the instance's own connection holding the
    /// server id is no failed check (what it is fenced out of is the Kafka transaction, not
    /// the server). Any other failed check still fails.
    ///
    /// # Errors
    /// As [`CheckedConnection::open`].
    pub async fn open_taking_over(cfg: &SourceConfig) -> Result<CheckedConnection, SourceError> {
        Self::open_checked(cfg, true).await
    }

    async fn open_checked(cfg: &SourceConfig, taking_over: bool) -> Result<CheckedConnection, SourceError> {
        let mut conn = connect(&cfg.connect).await?;
        let report = preflight::run(&mut conn, cfg.server_id, cfg.server_id_setting, &cfg.report_host)
            .await
            .map_err(|e| SourceError::protocol("checking the server", e))?;
        for w in report.warnings() {
            warn_once(&cfg.connect, w.check, &w.message);
        }
        if report.has_errors() && !(taking_over && report.only_predecessor_registered()) {
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

    /// The captured tables' definitions as the server has them now.
    ///
    /// # Errors
    /// Server errors.
    pub async fn load_schema(
        &mut self,
        captured: crate::schema::Captured<'_>,
    ) -> Result<Vec<crate::schema::TrackedTable>, SourceError> {
        crate::schema::load::load_from_server(&mut self.conn, captured)
            .await
            .map_err(|e| SourceError::protocol("reading the captured tables' definitions", e))
    }

    /// A position on a binlog file the server purged, checked against `root`, the
    /// `source.archive` that `sluice run` would catch up from: the archive must bridge the file
    /// to the server's oldest binlog, and `position` must be where an event starts in its copy.
    /// With the captured tables' definitions as the server has them now (as for a position on
    /// the server). The GTID state is left to the stream, as when the server cannot give it.
    ///
    /// # Errors
    /// [`SourceError::Purged`] when the archive does not bridge the gap (why is in the
    /// message), [`SourceError::Start`] for a position that is not an event's start in the
    /// archived file; an unreadable archive, server errors.
    pub async fn resolve_archived(
        &mut self,
        root: &Archive,
        file: &str,
        position: u64,
        captured: crate::schema::Captured<'_>,
    ) -> Result<(ResumePoint, Vec<crate::schema::TrackedTable>), SourceError> {
        let logs =
            server::binary_logs(&mut self.conn).await.map_err(|e| SourceError::protocol("listing binary logs", e))?;
        let start = server::oldest_start_state(&mut self.conn, &logs).await;
        if let Coverage::Gap(why) = coverage(root, &logs, start.as_deref(), file).await.map_err(SourceError::Archive)? {
            return Err(SourceError::Purged(format!("binlog {file} is not on the server, and {why}")));
        }
        let (mut feed, fde) = ArchiveFeed::open(root, file, position).await.map_err(SourceError::Start)?;
        // right after a GTID event is inside its transaction (a DDL's too): the stream would
        // miss the GTID, a hole in the checkpoint's GTID state
        if let Some(
            gtid @ (EventType::Gtid | EventType::GtidTagged | EventType::AnonymousGtid | EventType::MariadbGtid),
        ) = feed.last_type()
        {
            return Err(SourceError::Start(format!(
                "{file}:{position} is inside a transaction: the event before it is its {}; start at that event, or \
                 after the transaction's end (`sluice dump --events` of the archived file lists them)",
                gtid.name()
            )));
        }
        // as on the server: not inside a transaction, whose start would be lost
        if let Some((_, event)) = feed.next_raw().map_err(SourceError::Archive)? {
            let header =
                EventHeader::parse(&event).map_err(|e| SourceError::Archive(format!("{file}:{position}: {e}")))?;
            let query = match header.event_type {
                EventType::Query | EventType::MariadbQueryCompressed => {
                    let mut decoder = EventDecoder::new(DecoderOptions::default());
                    let decoded = decoder.decode(&fde).and_then(|_| decoder.decode(&event));
                    match decoded.map(|d| d.event) {
                        Ok(sluice_binlog::event::Event::Query(q)) => Some(q.query.into_owned()),
                        _ => None,
                    }
                }
                _ => None,
            };
            if server::inside_a_transaction(header.event_type, query.as_deref()) {
                return Err(SourceError::Start(format!(
                    "{file}:{position} is inside a transaction (the event there is {}): start at the transaction's \
                     GTID or BEGIN event, or after its end (`sluice dump --events` of the archived file lists them)",
                    header.event_type.name()
                )));
            }
        }
        let tables = self.load_schema(captured).await?;
        Ok((ResumePoint { file: file.to_string(), position, gtid: None }, tables))
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
            catch_up: None,
            hide_until: None,
            metrics: None,
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

    /// Starts at `resume`, which the server has purged, in the archive in `root`: its files are
    /// read up to its end, then the server's stream takes over (see the module docs).
    /// `metrics` says which it is (`sluice_source_archive_reading`).
    ///
    /// # Errors
    /// [`SourceError::Purged`] when the archive does not bridge the resume point to the
    /// server's oldest binlog (why is in the message); an unreadable archive.
    pub async fn from_archive(
        cfg: SourceConfig,
        mut checked: CheckedConnection,
        resume: ResumePoint,
        root: &Archive,
        metrics: Arc<Metrics>,
    ) -> Result<ReplicationSource, SourceError> {
        let logs = server::binary_logs(&mut checked.conn)
            .await
            .map_err(|e| SourceError::protocol("listing binary logs", e))?;
        let start = server::oldest_start_state(&mut checked.conn, &logs).await;
        let (files, bytes) = match coverage(root, &logs, start.as_deref(), &resume.file)
            .await
            .map_err(SourceError::Archive)?
        {
            Coverage::Covered { files, bytes } => (files, bytes),
            Coverage::Gap(why) => {
                return Err(SourceError::Purged(format!("the server no longer has the binlog at {resume}, and {why}")))
            }
        };
        let (feed, fde) = ArchiveFeed::open(root, &resume.file, resume.position).await.map_err(SourceError::Archive)?;
        let CheckedConnection { server_version, lower_case_table_names, conn, .. } = checked;
        let mut walker = EventWalker::stream(resume.file.clone(), EventDecoder::new(cfg.decoder.clone()));
        // the file's format (checksums, header lengths) before events from its middle
        walker.walk(&fde, Offset::At(4))?;
        let src = ReplicationSource {
            walker,
            cfg,
            stream: None,
            catch_up: Some(CatchUp {
                mark: (resume.file.clone(), feed.offset()),
                feed,
                walked: false,
                server_oldest: logs.first().map_or(u64::MAX, |(f, _)| order_key(f).0),
            }),
            hide_until: None,
            metrics: Some(metrics),
            raw: Bytes::new(),
            tx: TransactionTracker::new(resume),
            server_version,
            mariadb: conn.is_mariadb(),
            lower_case_table_names,
        };
        if let Some(m) = &src.metrics {
            m.archive_reading(true);
        }
        tracing::warn!(
            start = %src.tx.resume_point(),
            archive = %root,
            archived_files = files,
            archived_bytes = bytes,
            "The server purged the binlog at the checkpoint: catching up from the archive, then switching to the \
             server's stream"
        );
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

    async fn open_stream(&mut self, mut conn: Connection) -> Result<(), SourceError> {
        let resume = self.tx.resume_point().clone();
        // An empty state (a server that has written no GTID yet) with a known file starts by
        // position: by GTID it would mean "from the first binlog on".
        let empty = resume.gtid.as_ref().is_some_and(|g| g.to_string().is_empty()) && !resume.file.is_empty();
        // after the archive: this server's own files, by position, so that the events handed
        // out from the archive are known by their offsets
        let by_position = self.hide_until.is_some();
        let start = match &resume.gtid {
            _ if by_position => StartPosition::FilePosition { file: resume.file.clone(), position: resume.position },
            Some(GtidState::Mariadb(l)) if self.mariadb && !empty => StartPosition::MariadbGtid(l.clone()),
            Some(GtidState::Mysql(s)) if !self.mariadb && !empty => StartPosition::MysqlGtid(s.clone()),
            _ => StartPosition::FilePosition { file: resume.file.clone(), position: resume.position },
        };
        let mut req = DumpRequest::new(self.cfg.server_id, start);
        req.report_host = self.cfg.report_host.clone();
        req.heartbeat_period = Some(self.cfg.heartbeat);
        req.non_blocking = !self.cfg.follow;
        // the dump's first fake ROTATE carries the checksum the server's setting says (the
        // dump negotiates that setting); with NONE it has none, and read as CRC32 its file name
        // lost four characters to a "checksum mismatch" (a hostile trial)
        let checksum = server::scalar(&mut conn, "SELECT @@GLOBAL.binlog_checksum")
            .await
            .map_err(|e| SourceError::protocol("reading binlog_checksum", e))?;
        let negotiated = match checksum {
            Some(c) if c.eq_ignore_ascii_case("NONE") => ChecksumAlg::None,
            _ => ChecksumAlg::Crc32,
        };
        let stream =
            conn.start_binlog_dump(req).await.map_err(|e| SourceError::protocol("starting the binlog dump", e))?;
        // A fresh dump starts with a fake ROTATE and the file's FDE: decoder state starts over;
        // each FDE then says its file's checksum.
        let mut decoder = EventDecoder::new(self.cfg.decoder.clone());
        decoder.set_checksum(negotiated);
        self.walker.restart(resume.file, decoder);
        self.tx.reset();
        self.stream = Some(stream.read_ahead(READ_AHEAD_BYTES));
        Ok(())
    }

    /// Resolves once [`ReplicationSource::next_event`] would not wait for the server: at once
    /// inside an event's payload, while catching up from the archive (which reads files, not
    /// the server) and without a stream (the next call connects); otherwise when the read-ahead
    /// has the next event. Cancel-safe.
    pub async fn ready(&mut self) {
        if self.walker.has_inner() || self.catch_up.is_some() {
            return;
        }
        if let Some(stream) = self.stream.as_mut() {
            stream.ready().await;
        }
    }

    /// True when the stream [`ReplicationSource::ready`] waited for has ended or failed: the
    /// next event comes only after reconnecting.
    pub fn interrupted(&self) -> bool {
        self.stream.as_ref().is_some_and(ReadAhead::ended)
    }

    /// The next event, or `None` at the end of a non-following dump.
    ///
    /// # Errors
    /// Definite errors (purged binlog, unknown GTID, access denied, undecodable events), and
    /// transient ones once reconnection gives up.
    pub async fn next_event(&mut self) -> Result<Option<SourceEvent<'_>>, SourceError> {
        loop {
            if self.walker.has_inner() {
                if self.hide_until.is_some() {
                    // inside a payload the archive handed out already
                    let Self { walker, tx, .. } = self;
                    tx.observe(&walker.next_inner()?);
                    continue;
                }
                let Self { walker, tx, .. } = self;
                let ev = walker.next_inner()?;
                let step = tx.observe(&ev);
                return Ok(Some(SourceEvent::Event(ev, step)));
            }
            if self.catch_up.is_some() {
                match self.next_archived().await? {
                    Some(at) => {
                        let Self { raw, walker, tx, .. } = self;
                        let ev = walker.walk(raw, Offset::At(at))?;
                        let step = tx.observe(&ev);
                        return Ok(Some(SourceEvent::Event(ev, step)));
                    }
                    None => {
                        self.switch_to_live().await?;
                        continue;
                    }
                }
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
            if self.hide_until.is_some() && self.handed_out_already()? {
                let Self { raw, walker, tx, .. } = self;
                tx.observe(&walker.walk(raw, Offset::FromHeader)?);
                continue;
            }
            let Self { raw, walker, tx, .. } = self;
            let ev = walker.walk(raw, Offset::FromHeader)?;
            let step = tx.observe(&ev);
            return Ok(Some(SourceEvent::Event(ev, step)));
        }
    }

    /// Loads the archive's next event into `raw` and gives its offset; None at the archive's
    /// end. Moves on to the next archived file at the end of one.
    async fn next_archived(&mut self) -> Result<Option<u64>, SourceError> {
        let Some(c) = self.catch_up.as_mut() else { return Ok(None) };
        if c.walked {
            if c.mark.0 != self.walker.file() {
                c.mark.0 = self.walker.file().to_string();
            }
            c.mark.1 = self.walker.next_offset();
            c.walked = false;
        }
        loop {
            if let Some((at, raw)) = c.feed.next_raw().map_err(SourceError::Archive)? {
                self.raw = raw;
                c.walked = true;
                return Ok(Some(at));
            }
            let rotated = c.feed.file_end() == FileEnd::Rotated && self.walker.file() != c.feed.file();
            let next = match c.feed.file_end() {
                FileEnd::Open => return Ok(None),
                // the walker took the ROTATE: it names the next file
                _ if rotated => self.walker.file().to_string(),
                // after a STOP the server's next file has the next number
                _ => next_name(c.feed.file()),
            };
            if !rotated {
                // no ROTATE says so: the next file starts afresh
                self.walker.restart(next.clone(), EventDecoder::new(self.cfg.decoder.clone()));
                self.tx.moved_to(&next);
                c.mark = (next.clone(), 4);
                c.walked = false;
            }
            // the server's to stream from here on
            let moved =
                order_key(&next).0 < c.server_oldest && c.feed.open_next(&next).await.map_err(SourceError::Archive)?;
            if !moved {
                return Ok(None);
            }
        }
    }

    /// The archive is read up to a file the server has (or to its end): the server's stream
    /// continues from the resume point,
    /// by position, the events up to the archive's end walked but not handed out again.
    async fn switch_to_live(&mut self) -> Result<(), SourceError> {
        let Some(c) = self.catch_up.take() else { return Ok(()) };
        let mark = if c.walked { (self.walker.file().to_string(), self.walker.next_offset()) } else { c.mark };
        tracing::info!(
            archive_end = %format!("{}:{}", mark.0, mark.1),
            resume = %self.tx.resume_point(),
            "Handing over from the archive to the server's stream (it has the binlog from here on, or the archive \
             ends here)"
        );
        self.hide_until = Some(mark);
        if let Some(m) = &self.metrics {
            m.archive_reading(false);
        }
        let first = match connect(&self.cfg.connect).await {
            Ok(mut conn) => {
                self.same_history(&mut conn).await?;
                match self.open_stream(conn).await {
                    Ok(()) => return Ok(()),
                    Err(e) => e,
                }
            }
            Err(e) => e,
        };
        if !first.is_transient() {
            return Err(first);
        }
        self.reconnect(first).await
    }

    /// Before the hand-over: the server's GTID state at the resume point must be the one the
    /// archive's events led to (MariaDB's `BINLOG_GTID_POS`), else the archive is another
    /// server's history under the same file names and handing over would lose or repeat
    /// changes. (MySQL has no such function: there the file sizes [`coverage`] compared, and
    /// the offsets at the hand-over, are the check.)
    ///
    /// # Errors
    /// The states differ.
    async fn same_history(&self, conn: &mut Connection) -> Result<(), SourceError> {
        let resume = self.tx.resume_point();
        let Some(GtidState::Mariadb(ours)) = &resume.gtid else { return Ok(()) };
        if !self.mariadb || ours.to_string().is_empty() {
            return Ok(());
        }
        let facts = ServerFacts { mariadb: true, gtid_position: None };
        match server::mariadb_gtid_at(conn, &facts, &resume.file, resume.position).await {
            Some(GtidState::Mariadb(theirs)) if &theirs != ours => Err(SourceError::Start(format!(
                "the archive's events lead to GTID state {ours} at {}:{}, but the server is at {theirs} there: the \
                 archive (source.archive) is not a copy of this server's binlog; point it at this server's archive",
                resume.file, resume.position
            ))),
            _ => Ok(()),
        }
    }

    /// For a raw event of the stream after the archive: true when the archive handed it out
    /// already (it comes before the archive's end), false from the first event after it on
    /// (hiding stops there). Heartbeats pass.
    ///
    /// # Errors
    /// A real event of another file than the archive's end: the server's history is not the
    /// archive's, and handing on would lose or repeat changes.
    fn handed_out_already(&mut self) -> Result<bool, SourceError> {
        let Some((file, pos)) = &self.hide_until else { return Ok(false) };
        let h = EventHeader::parse(&self.raw).map_err(SourceError::Decode)?;
        if matches!(h.event_type, EventType::Heartbeat | EventType::HeartbeatV2) {
            return Ok(false);
        }
        let placed = h.log_pos != 0 && h.flags & LOG_EVENT_ARTIFICIAL_F == 0 && h.event_size as usize == self.raw.len();
        if !placed {
            return Ok(true);
        }
        let offset = u64::from(h.log_pos).saturating_sub(u64::from(h.event_size));
        if self.walker.file() != file {
            return Err(SourceError::Start(format!(
                "after reading the archive to {file}:{pos}, the server's stream went on with {}:{offset}: the archive \
                 is not a copy of this server's binlog (point source.archive at this server's archive)",
                self.walker.file()
            )));
        }
        if offset < *pos {
            return Ok(true);
        }
        tracing::info!(at = %format!("{file}:{offset}"), "Caught up from the archive: streaming from the server");
        self.hide_until = None;
        Ok(false)
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
            if let Some((file, pos)) = &self.hide_until {
                msg.push_str(&format!(
                    ". The archive (source.archive) ends at {file}:{pos}, which the server has purged as well: the \
                     archive fell behind the server's retention (is sluice archive running?)"
                ));
            }
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
