//! The async connection (feature `net`): TCP, the TLS upgrade with rustls, authentication,
//! text queries and the binlog stream. All protocol decisions are made by the sans-IO types
//! of the other modules; this module only moves their bytes.
//!
//! TLS modes follow MySQL's `--ssl-mode`: `Preferred` and `Required` encrypt without checking
//! the certificate (as the MySQL client does), `VerifyCa` checks the chain against the
//! configured CA (or the web PKI roots) but not the host name, `VerifyIdentity` checks both.
//!
//! References: <https://dev.mysql.com/doc/refman/8.4/en/connection-options.html#option_general_ssl-mode>,
//! <https://mariadb.com/kb/en/securing-connections-for-client-and-server/>.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::auth::{AuthPlugin, AuthStep, Authenticator};
use crate::error::{Error, Result};
use crate::gtid::{GtidSet, MariadbGtidList};
use crate::handshake::{self, capability, HandshakeResponse, InitialHandshake};
use crate::packet::{err_to_error, is_err, OkPacket, PacketCodec, OK_HEADER};
use crate::query::{self, ColumnDefinition, ResultSet, ResultSetReader};
use crate::replication::{self, ComBinlogDump, ComBinlogDumpGtid, ComRegisterReplica, DumpPacket};
use crate::stmt::{self, ExecuteReader, ExecuteStep, PrepareReader, Prepared};

/// How to use TLS (MySQL's `--ssl-mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TlsMode {
    /// Never.
    Disabled,
    /// When the server offers it, without verifying the certificate.
    #[default]
    Preferred,
    /// Always, without verifying the certificate; fail when the server has no TLS.
    Required,
    /// Always, verifying the chain against the CA but not the host name.
    VerifyCa,
    /// Always, verifying the chain and that the certificate names the host.
    VerifyIdentity,
}

/// Everything needed to open a connection.
#[derive(Clone)]
pub struct ConnectOptions {
    /// Host name or IP address.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// User name.
    pub user: String,
    /// Password (never printed).
    pub password: String,
    /// Default schema.
    pub database: Option<String>,
    /// TLS mode.
    pub tls: TlsMode,
    /// PEM file with the CA certificate(s) for `VerifyCa`/`VerifyIdentity` (default: web PKI roots).
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate chain (with `client_key_file`).
    pub client_cert_file: Option<PathBuf>,
    /// PEM client private key.
    pub client_key_file: Option<PathBuf>,
    /// PEM RSA public key of the server, for caching_sha2_password over plain TCP (otherwise
    /// it is requested from the server).
    pub server_public_key_file: Option<PathBuf>,
    /// Limit on TCP connect + TLS + authentication.
    pub connect_timeout: Duration,
    /// Limit on waiting for any packet (and on writes); `None` waits forever. For a binlog
    /// stream, set it above the heartbeat period.
    pub read_timeout: Option<Duration>,
    /// Cap on a reassembled packet (the server's `max_allowed_packet` is the useful value).
    pub max_packet_size: usize,
}

impl ConnectOptions {
    /// Options with defaults: TLS preferred, 10 s connect timeout, 60 s read timeout,
    /// 1 GiB packet cap.
    pub fn new(host: impl Into<String>, port: u16, user: impl Into<String>, password: impl Into<String>) -> Self {
        ConnectOptions {
            host: host.into(),
            port,
            user: user.into(),
            password: password.into(),
            database: None,
            tls: TlsMode::Preferred,
            ca_file: None,
            client_cert_file: None,
            client_key_file: None,
            server_public_key_file: None,
            connect_timeout: Duration::from_secs(10),
            read_timeout: Some(Duration::from_secs(60)),
            max_packet_size: crate::packet::DEFAULT_MAX_PAYLOAD,
        }
    }
}

impl fmt::Debug for ConnectOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectOptions")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("user", &self.user)
            .field("password", &"<redacted>")
            .field("database", &self.database)
            .field("tls", &self.tls)
            .field("ca_file", &self.ca_file)
            .field("client_cert_file", &self.client_cert_file)
            .field("client_key_file", &self.client_key_file)
            .field("server_public_key_file", &self.server_public_key_file)
            .field("connect_timeout", &self.connect_timeout)
            .field("read_timeout", &self.read_timeout)
            .field("max_packet_size", &self.max_packet_size)
            .finish()
    }
}

trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

/// Bytes in and out of the socket through the packet codec.
struct Wire {
    stream: Box<dyn Stream>,
    codec: PacketCodec,
    rbuf: BytesMut,
    wbuf: BytesMut,
    timeout: Option<Duration>,
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Wire {
    async fn read_packet(&mut self, during: &'static str) -> Result<Bytes> {
        loop {
            if let Some(p) = self.codec.decode(&mut self.rbuf)? {
                return Ok(p);
            }
            if self.rbuf.capacity() - self.rbuf.len() < 16 * 1024 {
                self.rbuf.reserve(64 * 1024);
            }
            let read = self.stream.read_buf(&mut self.rbuf);
            let n = match self.timeout {
                Some(t) => {
                    tokio::time::timeout(t, read).await.map_err(|_| Error::Timeout { during, millis: millis(t) })?
                }
                None => read.await,
            }
            .map_err(|e| Error::io(during, &e))?;
            if n == 0 {
                return Err(Error::Io {
                    during,
                    kind: std::io::ErrorKind::UnexpectedEof,
                    message: "the server closed the connection".into(),
                });
            }
        }
    }

    async fn write_packet(&mut self, payload: &[u8], during: &'static str) -> Result<()> {
        self.wbuf.clear();
        self.codec.encode(payload, &mut self.wbuf)?;
        let write = async {
            self.stream.write_all(&self.wbuf).await?;
            self.stream.flush().await
        };
        match self.timeout {
            Some(t) => {
                tokio::time::timeout(t, write).await.map_err(|_| Error::Timeout { during, millis: millis(t) })?
            }
            None => write.await,
        }
        .map_err(|e| Error::io(during, &e))
    }

    async fn command(&mut self, payload: &[u8], during: &'static str) -> Result<()> {
        self.codec.reset_sequence();
        self.write_packet(payload, during).await
    }
}

/// An authenticated connection to a MySQL or MariaDB server.
pub struct Connection {
    wire: Wire,
    handshake: InitialHandshake,
    capabilities: u64,
    tls: bool,
    opts: ConnectOptions,
    /// A binary result set was left before its end: the packets still due would be read as the
    /// answer to the next command, so every command is refused.
    unread_rows: bool,
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("server_version", &self.handshake.server_version)
            .field("connection_id", &self.handshake.connection_id)
            .field("tls", &self.tls)
            .field("opts", &self.opts)
            .finish_non_exhaustive()
    }
}

impl Connection {
    /// Connects, upgrades to TLS as `opts.tls` says, and authenticates.
    ///
    /// # Errors
    /// [`Error::Timeout`] after `connect_timeout`; [`Error::Io`]; [`Error::Tls`] when TLS is
    /// required but unavailable or the certificate is refused; [`Error::Auth`] with the
    /// server's message when the credentials are refused; [`Error::Server`] when the server
    /// refuses the connection itself (too many connections, host blocked).
    pub async fn connect(opts: ConnectOptions) -> Result<Connection> {
        let t = opts.connect_timeout;
        match tokio::time::timeout(t, Self::connect_inner(opts)).await {
            Ok(r) => r,
            Err(_) => Err(Error::Timeout { during: "connecting", millis: millis(t) }),
        }
    }

    async fn connect_inner(opts: ConnectOptions) -> Result<Connection> {
        let tcp = TcpStream::connect((opts.host.as_str(), opts.port)).await.map_err(|e| Error::io("connecting", &e))?;
        tcp.set_nodelay(true).map_err(|e| Error::io("connecting", &e))?;
        let mut wire = Wire {
            stream: Box::new(tcp),
            codec: PacketCodec::new(opts.max_packet_size),
            rbuf: BytesMut::with_capacity(64 * 1024),
            wbuf: BytesMut::new(),
            timeout: opts.read_timeout,
        };
        let first = wire.read_packet("reading the server handshake").await?;
        if is_err(&first) {
            return Err(err_to_error(&first));
        }
        let hs = InitialHandshake::parse(&first)?;
        let server_tls = hs.capabilities & capability::SSL != 0;
        let use_tls = match opts.tls {
            TlsMode::Disabled => false,
            TlsMode::Preferred => server_tls,
            TlsMode::Required | TlsMode::VerifyCa | TlsMode::VerifyIdentity => {
                if !server_tls {
                    return Err(Error::Tls(format!(
                        "TLS mode {:?} but the server at {}:{} does not offer TLS",
                        opts.tls, opts.host, opts.port
                    )));
                }
                true
            }
        };
        let caps = handshake::client_capabilities(hs.capabilities, use_tls, opts.database.is_some());
        let max_packet = u32::try_from(opts.max_packet_size).unwrap_or(u32::MAX);
        let charset = handshake::UTF8MB4_GENERAL_CI;
        if use_tls {
            let config = tls_config(&opts)?;
            wire.write_packet(&handshake::ssl_request(caps, max_packet, charset), "sending the SSL request").await?;
            let name = ServerName::try_from(opts.host.clone())
                .map_err(|e| Error::Tls(format!("invalid server name {:?}: {e}", opts.host)))?;
            let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
            let tls = connector
                .connect(name, wire.stream)
                .await
                .map_err(|e| Error::Tls(format!("handshake with {}:{} failed: {e}", opts.host, opts.port)))?;
            wire.stream = Box::new(tls);
        }
        let server_key = match &opts.server_public_key_file {
            Some(p) => {
                Some(std::fs::read_to_string(p).map_err(|e| Error::Tls(format!("reading {}: {e}", p.display())))?)
            }
            None => None,
        };
        let mut plugin = AuthPlugin::from_name(&hs.auth_plugin_name);
        if matches!(plugin, AuthPlugin::Other(_)) {
            // Answer as mysql_native_password; the server switches us to the user's plugin.
            plugin = AuthPlugin::MysqlNativePassword;
        }
        let mut auth =
            Authenticator::new(&opts.user, opts.password.as_bytes(), plugin, &hs.auth_plugin_data, use_tls, server_key);
        let response = HandshakeResponse {
            capabilities: caps,
            max_packet_size: max_packet,
            charset,
            user: opts.user.clone(),
            auth_response: auth.initial_response()?,
            database: opts.database.clone(),
            auth_plugin_name: auth.plugin().name().to_string(),
        };
        wire.write_packet(&response.encode()?, "sending the handshake response").await?;
        loop {
            let p = wire.read_packet("authenticating").await?;
            match auth.on_packet(&p)? {
                AuthStep::Send(v) => wire.write_packet(&v, "authenticating").await?,
                AuthStep::Wait => {}
                AuthStep::Done(_) => break,
            }
        }
        Ok(Connection { wire, handshake: hs, capabilities: caps, tls: use_tls, opts, unread_rows: false })
    }

    /// The server's version string (`5.5.5-10.11.19-MariaDB-...` for MariaDB).
    pub fn server_version(&self) -> &str {
        &self.handshake.server_version
    }

    /// True for MariaDB.
    pub fn is_mariadb(&self) -> bool {
        self.handshake.is_mariadb()
    }

    /// The server's id for this connection (`CONNECTION_ID()`).
    pub fn connection_id(&self) -> u32 {
        self.handshake.connection_id
    }

    /// The negotiated capability flags.
    pub fn capabilities(&self) -> u64 {
        self.capabilities
    }

    /// True when the connection is encrypted.
    pub fn is_tls(&self) -> bool {
        self.tls
    }

    /// The options the connection was opened with.
    pub fn options(&self) -> &ConnectOptions {
        &self.opts
    }

    /// Runs one statement and collects its text result set.
    ///
    /// # Errors
    /// [`Error::Server`] for SQL errors; I/O and timeout errors.
    pub async fn query(&mut self, sql: &str) -> Result<ResultSet> {
        self.usable()?;
        self.wire.command(&query::com_query(sql), "sending a query").await?;
        let mut reader = ResultSetReader::new(self.capabilities);
        loop {
            let p = self.wire.read_packet("reading a query result").await?;
            if let Some(rs) = reader.on_packet(&p)? {
                return Ok(rs);
            }
        }
    }

    fn usable(&self) -> Result<()> {
        if self.unread_rows {
            return Err(Error::Invalid {
                what: "connection",
                reason: "a result set was left before its end; open a new connection".into(),
            });
        }
        Ok(())
    }

    /// Prepares `sql` (a statement without parameters) for the binary protocol.
    ///
    /// # Errors
    /// [`Error::Server`] for SQL errors; [`Error::Unsupported`] for a statement with
    /// parameters; I/O and timeout errors.
    pub async fn prepare(&mut self, sql: &str) -> Result<Prepared> {
        self.usable()?;
        self.wire.command(&stmt::com_stmt_prepare(sql), "preparing a statement").await?;
        let mut reader = PrepareReader::new(self.capabilities);
        let prepared = loop {
            let p = self.wire.read_packet("reading a prepare answer").await?;
            if let Some(prepared) = reader.on_packet(&p)? {
                break prepared;
            }
        };
        if prepared.params > 0 {
            self.close_statement(&prepared).await?;
            return Err(Error::Unsupported {
                what: "statement parameters",
                reason: "write the values into the statement".into(),
            });
        }
        Ok(prepared)
    }

    /// Executes a prepared statement; its rows are read one at a time from the returned
    /// [`BinaryRows`], which must be read to its end before the connection is used again.
    ///
    /// # Errors
    /// [`Error::Server`] for SQL errors; I/O and timeout errors.
    pub async fn execute(&mut self, statement: &Prepared) -> Result<BinaryRows<'_>> {
        self.usable()?;
        self.wire.command(&stmt::com_stmt_execute(statement.id), "executing a statement").await?;
        let mut reader = ExecuteReader::new(self.capabilities);
        self.unread_rows = true;
        let done = loop {
            let p = self.wire.read_packet("reading an execute answer").await;
            let step = p.and_then(|p| reader.on_packet(&p));
            match step {
                Ok(ExecuteStep::More) => {}
                Ok(ExecuteStep::Columns) => break None,
                Ok(ExecuteStep::Done(ok)) => break Some(ok),
                Ok(ExecuteStep::Row) => {
                    return Err(Error::Invalid { what: "execute answer", reason: "a row before the columns".into() })
                }
                Err(e) => {
                    // an ERR ends the answer: the connection is usable again
                    self.unread_rows = !reader.is_done();
                    return Err(e);
                }
            }
        };
        if done.is_some() {
            self.unread_rows = false;
        }
        Ok(BinaryRows { conn: self, reader, done })
    }

    /// COM_STMT_CLOSE (no answer).
    ///
    /// # Errors
    /// I/O errors.
    pub async fn close_statement(&mut self, statement: &Prepared) -> Result<()> {
        self.usable()?;
        self.wire.command(&stmt::com_stmt_close(statement.id), "closing a statement").await
    }

    /// Runs one statement and discards its result.
    ///
    /// # Errors
    /// As [`Connection::query`].
    pub async fn query_drop(&mut self, sql: &str) -> Result<()> {
        self.query(sql).await.map(|_| ())
    }

    /// COM_PING.
    ///
    /// # Errors
    /// I/O, timeout, or the server's error.
    pub async fn ping(&mut self) -> Result<()> {
        self.wire.command(&query::com_ping(), "sending a ping").await?;
        let p = self.wire.read_packet("reading the ping answer").await?;
        self.expect_ok(&p).map(|_| ())
    }

    fn expect_ok(&self, p: &[u8]) -> Result<OkPacket> {
        match p.first() {
            Some(&OK_HEADER) => OkPacket::parse(p),
            _ if is_err(p) => Err(err_to_error(p)),
            _ => Err(Error::Invalid { what: "command answer", reason: "expected OK or ERR".into() }),
        }
    }

    /// COM_QUIT, then closes the socket.
    ///
    /// # Errors
    /// I/O errors while sending (a server that already closed the connection is not an error).
    pub async fn quit(mut self) -> Result<()> {
        let _ = self.wire.command(&query::com_quit(), "quitting").await;
        self.wire.stream.shutdown().await.or_else(|e| match e.kind() {
            std::io::ErrorKind::NotConnected | std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset => {
                Ok(())
            }
            _ => Err(Error::io("quitting", &e)),
        })
    }

    /// Sets up and starts a binlog dump: checksum negotiation, heartbeat period, MariaDB's
    /// capability and GTID state, COM_REGISTER_SLAVE, then COM_BINLOG_DUMP (or
    /// COM_BINLOG_DUMP_GTID for a MySQL GTID set). The connection becomes the stream.
    ///
    /// # Errors
    /// [`Error::Server`] when a setup statement or the registration fails;
    /// [`Error::Unsupported`] for a MySQL GTID set on MariaDB or a MariaDB GTID list on MySQL;
    /// [`Error::Invalid`] for a file position beyond 4 GiB on MariaDB. Errors about the start
    /// position itself (1236) arrive from [`BinlogStream::next_event`].
    pub async fn start_binlog_dump(mut self, req: DumpRequest) -> Result<BinlogStream> {
        let mut setup = Vec::new();
        if req.negotiate_checksum {
            setup.extend(replication::checksum_setup());
        }
        if let Some(p) = req.heartbeat_period {
            setup.extend(replication::heartbeat_setup(u64::try_from(p.as_nanos()).unwrap_or(u64::MAX)));
        }
        let mariadb = self.is_mariadb();
        match &req.start {
            StartPosition::MariadbGtid(list) => {
                if !mariadb {
                    return Err(Error::Unsupported {
                        what: "MariaDB GTID position",
                        reason: format!("the server is not MariaDB ({})", self.server_version()),
                    });
                }
                setup.extend(replication::mariadb_gtid_setup(list, req.mariadb_gtid_strict));
            }
            StartPosition::MysqlGtid(_) if mariadb => {
                return Err(Error::Unsupported {
                    what: "MySQL GTID set",
                    reason: "MariaDB has no COM_BINLOG_DUMP_GTID; use a MariaDB GTID list".into(),
                })
            }
            _ if mariadb => {
                setup.push(format!("SET @mariadb_slave_capability = {}", replication::MARIADB_SLAVE_CAPABILITY_MINE))
            }
            _ => {}
        }
        for sql in &setup {
            self.query_drop(sql).await?;
        }
        if req.register {
            let reg = ComRegisterReplica {
                server_id: req.server_id,
                hostname: req.report_host.clone(),
                user: String::new(),
                password: String::new(),
                port: 0,
                replication_rank: 0,
                source_id: 0,
            };
            self.wire.command(&reg.encode()?, "registering as a replica").await?;
            let p = self.wire.read_packet("registering as a replica").await?;
            self.expect_ok(&p)?;
        }
        let mut flags = if req.non_blocking { replication::BINLOG_DUMP_NON_BLOCK } else { 0 };
        if req.send_annotate_rows && mariadb {
            flags |= replication::MARIADB_SEND_ANNOTATE_ROWS;
        }
        let cmd = match &req.start {
            StartPosition::FilePosition { file, position } => match u32::try_from(*position) {
                Ok(position) => {
                    ComBinlogDump { position, flags, server_id: req.server_id, filename: file.clone() }.encode()
                }
                Err(_) if !mariadb => ComBinlogDumpGtid {
                    flags: flags | replication::BINLOG_THROUGH_POSITION,
                    server_id: req.server_id,
                    filename: file.clone(),
                    position: *position,
                    gtid_set: None,
                }
                .encode()?,
                Err(_) => {
                    return Err(Error::Invalid {
                        what: "binlog position",
                        reason: format!("{position} does not fit COM_BINLOG_DUMP's 32 bits"),
                    })
                }
            },
            StartPosition::MysqlGtid(set) => ComBinlogDumpGtid {
                flags,
                server_id: req.server_id,
                filename: String::new(),
                position: 4,
                gtid_set: Some(set.clone()),
            }
            .encode()?,
            StartPosition::MariadbGtid(_) => {
                ComBinlogDump { position: 4, flags, server_id: req.server_id, filename: String::new() }.encode()
            }
        };
        self.wire.command(&cmd, "starting the binlog dump").await?;
        self.wire.codec.set_size_hint(Some(replication::binlog_packet_size));
        Ok(BinlogStream { conn: self, finished: false })
    }
}

/// The rows of an executing prepared statement, read one at a time (see
/// [`Connection::execute`]).
pub struct BinaryRows<'c> {
    conn: &'c mut Connection,
    reader: ExecuteReader,
    done: Option<OkPacket>,
}

impl fmt::Debug for BinaryRows<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BinaryRows").field("columns", &self.reader.columns().len()).finish_non_exhaustive()
    }
}

impl BinaryRows<'_> {
    /// The result columns.
    pub fn columns(&self) -> &[ColumnDefinition] {
        self.reader.columns()
    }

    /// The next row's packet (parse it with [`crate::stmt::parse_binary_row`]); None at the
    /// end.
    ///
    /// # Errors
    /// [`Error::Server`] when the statement fails mid-way (the connection stays usable); I/O
    /// and timeout errors (the connection is then unusable).
    pub async fn next_row(&mut self) -> Result<Option<Bytes>> {
        if self.done.is_some() {
            return Ok(None);
        }
        let p = self.conn.wire.read_packet("reading a row").await?;
        match self.reader.on_packet(&p) {
            Ok(ExecuteStep::Row) => Ok(Some(p)),
            Ok(ExecuteStep::Done(ok)) => {
                self.done = Some(ok);
                self.conn.unread_rows = false;
                Ok(None)
            }
            Ok(ExecuteStep::More | ExecuteStep::Columns) => {
                Err(Error::Invalid { what: "execute answer", reason: "column definitions among the rows".into() })
            }
            Err(e) => {
                self.conn.unread_rows = !self.reader.is_done();
                Err(e)
            }
        }
    }
}

/// Where a binlog dump starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartPosition {
    /// A file and the offset of an event in it (4 is the first).
    FilePosition {
        /// Binlog file name (`mysql-bin.000003`).
        file: String,
        /// Offset.
        position: u64,
    },
    /// MySQL: everything not in this GTID set.
    MysqlGtid(GtidSet),
    /// MariaDB: everything after these GTIDs (one per domain; `@@gtid_binlog_pos` form).
    MariadbGtid(MariadbGtidList),
}

/// A binlog dump request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpRequest {
    /// This replica's server id: unique among the server's replicas, not the server's own.
    pub server_id: u32,
    /// Where to start.
    pub start: StartPosition,
    /// Ask for a heartbeat event when the server is idle this long (keep `read_timeout` above it).
    pub heartbeat_period: Option<Duration>,
    /// End with EOF at the end of the last binlog instead of waiting for new events.
    pub non_blocking: bool,
    /// Negotiate checksums (`@master_binlog_checksum`); servers with checksums on refuse a
    /// replica that does not (error 1236).
    pub negotiate_checksum: bool,
    /// Send COM_REGISTER_SLAVE first (shows up in `SHOW SLAVE HOSTS`).
    pub register: bool,
    /// Host name reported by COM_REGISTER_SLAVE.
    pub report_host: String,
    /// MariaDB `@slave_gtid_strict_mode` for a GTID dump.
    pub mariadb_gtid_strict: bool,
    /// MariaDB: also send the ANNOTATE_ROWS events (the statements of row events), as the
    /// file holds them (a verbatim copy needs them; a decoder does not).
    pub send_annotate_rows: bool,
}

impl DumpRequest {
    /// A blocking dump from `start` with checksum negotiation and registration on, no heartbeat.
    pub fn new(server_id: u32, start: StartPosition) -> DumpRequest {
        DumpRequest {
            server_id,
            start,
            heartbeat_period: None,
            non_blocking: false,
            negotiate_checksum: true,
            register: true,
            report_host: "sluice".into(),
            mariadb_gtid_strict: true,
            send_annotate_rows: false,
        }
    }
}

/// A running binlog dump.
#[derive(Debug)]
pub struct BinlogStream {
    conn: Connection,
    finished: bool,
}

impl BinlogStream {
    /// The next event (header, body and checksum, without the packet's 0x00 prefix), or `None`
    /// at the end of a non-blocking dump. Servers (MySQL and MariaDB alike) close the
    /// connection once a dump ends, so a new dump or query needs a new connection.
    ///
    /// # Errors
    /// [`Error::Timeout`] when nothing (not even a heartbeat) arrived within `read_timeout`;
    /// [`Error::Server`] when the server ends the stream with an error (1236 for a purged
    /// binlog or an unknown GTID); [`Error::Io`] when the connection drops.
    pub async fn next_event(&mut self) -> Result<Option<Bytes>> {
        if self.finished {
            return Ok(None);
        }
        let p = self.conn.wire.read_packet("reading the binlog stream").await?;
        match DumpPacket::parse(p, self.conn.capabilities)? {
            DumpPacket::Event(ev) => Ok(Some(ev)),
            DumpPacket::Eof => {
                self.finished = true;
                Ok(None)
            }
            DumpPacket::Error(e) => {
                self.finished = true;
                Err(Error::Server(e))
            }
        }
    }

    /// The underlying connection (server version, options).
    pub fn connection(&self) -> &Connection {
        &self.conn
    }
}

/// A [`BinlogStream`] read ahead by a task of its own, so the socket is read (packets
/// reassembled, checksummed events handed over) while the caller decodes the events before
/// them. On a multi-threaded runtime the two run on different cores: the stream then goes as
/// fast as the slower of reading and decoding instead of their sum, which is how a replica's
/// I/O and SQL threads divide the work.
///
/// At most `max_bytes` of events (plus one) wait between the two; errors and the end of the
/// stream arrive in order after the events before them. Dropping it stops the reader (and
/// closes the connection).
#[derive(Debug)]
pub struct ReadAhead {
    rx: tokio::sync::mpsc::UnboundedReceiver<Result<Option<Bytes>>>,
    /// Room for events between the reader and the taker, in bytes: the reader takes it in
    /// [`READ_AHEAD_CREDIT`] chunks, the taker gives back each event's size as it takes it, so
    /// neither side wakes the other once per event.
    room: Arc<tokio::sync::Semaphore>,
    /// The largest share of `room` one event takes.
    max: u32,
    reader: tokio::task::JoinHandle<()>,
    finished: bool,
    /// What [`ReadAhead::ready`] received, for the next [`ReadAhead::next_event`].
    pending: Option<Option<Result<Option<Bytes>>>>,
}

/// How much room the reader takes at a time.
const READ_AHEAD_CREDIT: u32 = 1 << 20;

impl BinlogStream {
    /// Reads this stream ahead on a task of its own (see [`ReadAhead`]); `max_bytes` bounds
    /// the events waiting to be taken (give or take one credit chunk).
    pub fn read_ahead(mut self, max_bytes: usize) -> ReadAhead {
        let max = u32::try_from(max_bytes).unwrap_or(u32::MAX).max(READ_AHEAD_CREDIT);
        let room = Arc::new(tokio::sync::Semaphore::new(max as usize));
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let reader_room = Arc::clone(&room);
        let reader = tokio::spawn(async move {
            let mut credit = 0u32;
            loop {
                let next = self.next_event().await;
                let last = !matches!(next, Ok(Some(_)));
                let need = match &next {
                    Ok(Some(ev)) => u32::try_from(ev.len()).unwrap_or(u32::MAX).min(max),
                    _ => 0,
                };
                while credit < need {
                    // never more than the room can ever give while the reader holds `credit`
                    // (with a bound below two chunks it waited forever for the second)
                    let chunk = READ_AHEAD_CREDIT.max(need - credit).min(max - credit);
                    // a closed semaphore: the ReadAhead is gone
                    let Ok(permits) = reader_room.acquire_many(chunk).await else { return };
                    permits.forget();
                    credit += chunk;
                }
                credit -= need;
                if tx.send(next).is_err() || last {
                    return;
                }
            }
        });
        ReadAhead { rx, room, max, reader, finished: false, pending: None }
    }
}

impl ReadAhead {
    /// The next event, as [`BinlogStream::next_event`] gives it.
    ///
    /// # Errors
    /// As [`BinlogStream::next_event`]; [`Error::Io`] when the reader task ended without
    /// saying why (it panicked or was cancelled).
    pub async fn next_event(&mut self) -> Result<Option<Bytes>> {
        if self.finished {
            return Ok(None);
        }
        let next = match self.pending.take() {
            Some(next) => next,
            None => self.rx.recv().await,
        };
        match next {
            Some(r) => {
                match &r {
                    Ok(Some(ev)) => {
                        let size = u32::try_from(ev.len()).unwrap_or(u32::MAX).min(self.max);
                        self.room.add_permits(size as usize);
                    }
                    _ => self.finished = true,
                }
                r
            }
            None => {
                self.finished = true;
                Err(Error::Io {
                    during: "reading the binlog stream ahead",
                    kind: std::io::ErrorKind::Other,
                    message: "the reader task ended unexpectedly".into(),
                })
            }
        }
    }

    /// True when what [`ReadAhead::ready`] received is the stream's end or an error, not an
    /// event: the stream gives nothing more.
    pub fn ended(&self) -> bool {
        matches!(self.pending, Some(None | Some(Err(_) | Ok(None))))
    }

    /// Resolves once [`ReadAhead::next_event`] has something to give without waiting (an event,
    /// an error or the end). Cancel-safe: dropped before it resolves, it takes nothing; so a
    /// caller can wait for the stream and for a deadline of its own at once.
    pub async fn ready(&mut self) {
        if self.finished || self.pending.is_some() {
            return;
        }
        let next = self.rx.recv().await;
        self.pending = Some(next);
    }
}

impl Drop for ReadAhead {
    fn drop(&mut self) {
        self.room.close();
        self.reader.abort();
    }
}

fn tls_err(e: impl fmt::Display) -> Error {
    Error::Tls(e.to_string())
}

fn read_pem(path: &PathBuf, what: &str) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| Error::Tls(format!("reading {what} {}: {e}", path.display())))
}

fn tls_config(opts: &ConnectOptions) -> Result<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(tls_err)?;
    let verifier: Arc<dyn ServerCertVerifier> = match opts.tls {
        TlsMode::Disabled | TlsMode::Preferred | TlsMode::Required => Arc::new(NoVerification(provider)),
        TlsMode::VerifyCa | TlsMode::VerifyIdentity => {
            let mut roots = RootCertStore::empty();
            match &opts.ca_file {
                Some(path) => {
                    let pem = read_pem(path, "CA file")?;
                    for cert in CertificateDer::pem_slice_iter(&pem) {
                        roots.add(cert.map_err(tls_err)?).map_err(tls_err)?;
                    }
                    if roots.is_empty() {
                        return Err(Error::Tls(format!("no certificate in CA file {}", path.display())));
                    }
                }
                None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
            }
            let webpki = rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(tls_err)?;
            if opts.tls == TlsMode::VerifyCa {
                Arc::new(IgnoreHostName(webpki))
            } else {
                webpki
            }
        }
    };
    let builder = builder.dangerous().with_custom_certificate_verifier(verifier);
    match (&opts.client_cert_file, &opts.client_key_file) {
        (Some(cert), Some(key)) => {
            let certs = CertificateDer::pem_slice_iter(&read_pem(cert, "client certificate")?)
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(tls_err)?;
            let key = PrivateKeyDer::from_pem_slice(&read_pem(key, "client key")?).map_err(tls_err)?;
            builder.with_client_auth_cert(certs, key).map_err(tls_err)
        }
        (None, None) => Ok(builder.with_no_client_auth()),
        _ => Err(Error::Tls("a client certificate needs both client_cert_file and client_key_file".into())),
    }
}

/// `Preferred`/`Required`: encryption without authentication of the server, as MySQL's
/// client does in those modes. Handshake signatures are still checked.
#[derive(Debug)]
struct NoVerification(Arc<CryptoProvider>);

impl ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `VerifyCa`: the chain must verify against the CA; a certificate for another name is fine.
#[derive(Debug)]
struct IgnoreHostName(Arc<rustls::client::WebPkiServerVerifier>);

impl ServerCertVerifier for IgnoreHostName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        match self.0.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn password_is_redacted() {
        let o = ConnectOptions::new("h", 1, "u", "hunter2");
        assert!(!format!("{o:?}").contains("hunter2"));
    }

    /// A server that sends a handshake and then nothing: the read timeout fires.
    #[tokio::test]
    async fn connect_times_out_on_a_silent_server() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            let (_s, _) = l.accept().await.unwrap();
            tokio::time::sleep(Duration::from_secs(5)).await;
        });
        let mut o = ConnectOptions::new("127.0.0.1", port, "u", "p");
        o.connect_timeout = Duration::from_millis(200);
        let e = Connection::connect(o).await.unwrap_err();
        assert!(matches!(e, Error::Timeout { .. }), "{e:?}");
        assert!(e.is_transient());
        server.abort();
    }

    /// A peer that closes right away: an I/O error, transient.
    #[tokio::test]
    async fn closed_connection_is_transient_io() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            let (s, _) = l.accept().await.unwrap();
            drop(s);
        });
        let e = Connection::connect(ConnectOptions::new("127.0.0.1", port, "u", "p")).await.unwrap_err();
        assert!(matches!(e, Error::Io { .. }), "{e:?}");
        assert!(e.is_transient());
        server.await.unwrap();
    }
}
