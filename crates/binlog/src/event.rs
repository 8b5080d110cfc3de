//! Event bodies: every event MySQL 5.0-9.x and MariaDB 10.x/11.x write.
//!
//! `Event::parse_simple` and the parsers beside it turn one event body (after the common header,
//! without the checksum) into a typed [`Event`]. Parsing needs the FORMAT_DESCRIPTION in force (post-header lengths) and,
//! for rows events, the TABLE_MAP cache: both live in [`crate::decoder::EventDecoder`], which
//! calls in here. Bodies borrow from the event bytes.
//!
//! References: <https://dev.mysql.com/doc/dev/mysql-server/latest/page_protocol_replication_binlog_event.html>,
//! MySQL `libbinlogevents` (control_events.cpp, statement_events.cpp),
//! <https://mariadb.com/kb/en/replication-protocol/>.

use std::borrow::Cow;
use std::sync::Arc;

use sluice_protocol::gtid::{GtidSet, MariadbGtid, MariadbGtidList, MysqlGtid, Tsid, Uuid};
use sluice_protocol::Reader;

use crate::error::{Error, Result};
use crate::event_type::EventType;
use crate::header::HEADER_LEN;
use crate::rows::RowsEvent;
use crate::table_map::TableMap;

/// Checksum algorithm announced by the FORMAT_DESCRIPTION event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChecksumAlg {
    /// No checksum (`binlog_checksum=NONE`, or a server older than MySQL 5.6.1 / MariaDB 5.3).
    None,
    /// CRC32 over header and body, in the event's last 4 bytes.
    Crc32,
}

/// FORMAT_DESCRIPTION_EVENT: the binlog's format, which drives the decoding of every event
/// after it.
///
/// | bytes | field |
/// |---|---|
/// | 2 | binlog version (4) |
/// | 50 | server version, NUL-padded |
/// | 4 | create timestamp |
/// | 1 | common header length (19) |
/// | n | post-header length of each event type, from type 1 |
/// | 1 | checksum algorithm (servers from MySQL 5.6.1 / MariaDB 5.3) |
/// | 4 | CRC32 of the FDE itself (present with the algorithm byte) |
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormatDescription {
    /// Binlog format version (4 for every server since 5.0).
    pub binlog_version: u16,
    /// The server's version string (`8.0.32`, `10.11.19-MariaDB-log`).
    pub server_version: String,
    /// When the file was created (0 in rotated-to files).
    pub create_timestamp: u32,
    /// Length of the common header (19).
    pub header_len: u8,
    /// Post-header length per event type code (index 0 is type 1).
    pub post_header_lens: Vec<u8>,
    /// Checksum algorithm for the events that follow (and this one).
    pub checksum: ChecksumAlg,
}

impl FormatDescription {
    /// The format a v4 binlog has before its FDE is read (used for the first event only).
    pub fn v4_default() -> FormatDescription {
        FormatDescription {
            binlog_version: 4,
            server_version: String::new(),
            create_timestamp: 0,
            header_len: 19,
            post_header_lens: Vec::new(),
            checksum: ChecksumAlg::None,
        }
    }

    /// The post-header length of `t`, or `default` when the FDE does not list the type.
    pub fn post_header_len(&self, t: EventType, default: u8) -> u8 {
        let code = usize::from(t.code());
        match code.checked_sub(1).and_then(|i| self.post_header_lens.get(i)) {
            Some(&n) => n,
            None => default,
        }
    }

    /// True for a MariaDB server.
    pub fn is_mariadb(&self) -> bool {
        self.server_version.contains("MariaDB")
    }

    /// Parses an FDE body (the bytes after the common header, checksum included if any).
    ///
    /// # Errors
    /// Truncated or invalid bodies.
    pub fn parse(body: &[u8]) -> Result<FormatDescription> {
        let mut r = Reader::new(body);
        let binlog_version = r.u16("binlog version")?;
        if binlog_version != 4 {
            return Err(Error::invalid(
                "format description",
                format!("binlog format v{binlog_version} (MySQL 4.x and older) is not supported; v4 (MySQL 5.0+) is"),
            ));
        }
        let raw_version = r.take(50, "server version")?;
        let end = raw_version.iter().position(|&b| b == 0).unwrap_or(raw_version.len());
        let server_version = String::from_utf8_lossy(raw_version.get(..end).unwrap_or(&[])).into_owned();
        let create_timestamp = r.u32("create timestamp")?;
        let header_len = r.u8("header length")?;
        if usize::from(header_len) < HEADER_LEN {
            return Err(Error::invalid("format description", format!("header length {header_len} < 19")));
        }
        let rest = r.take_rest();
        let aware = checksum_aware(&server_version);
        let (lens, checksum) = if aware {
            // the last 5 bytes: algorithm byte and the FDE's own CRC slot
            let split = rest
                .len()
                .checked_sub(5)
                .ok_or_else(|| Error::invalid("format description", "too short for the checksum algorithm byte"))?;
            let (lens, tail) = rest.split_at(split);
            let alg = match tail.first() {
                Some(0) => ChecksumAlg::None,
                Some(1) => ChecksumAlg::Crc32,
                Some(&other) => {
                    return Err(Error::invalid("format description", format!("unknown checksum algorithm {other}")))
                }
                None => ChecksumAlg::None,
            };
            (lens, alg)
        } else {
            (rest, ChecksumAlg::None)
        };
        Ok(FormatDescription {
            binlog_version,
            server_version,
            create_timestamp,
            header_len,
            post_header_lens: lens.to_vec(),
            checksum,
        })
    }
}

/// Whether a server of this version writes the checksum-algorithm byte in its FDE:
/// MySQL from 5.6.1, MariaDB from 5.3.0.
fn checksum_aware(version: &str) -> bool {
    let mut nums =
        version.split(|c: char| !c.is_ascii_digit()).filter(|s| !s.is_empty()).map(|s| s.parse::<u32>().unwrap_or(0));
    let v = (nums.next().unwrap_or(0), nums.next().unwrap_or(0), nums.next().unwrap_or(0));
    if version.contains("MariaDB") {
        v >= (5, 3, 0)
    } else {
        v >= (5, 6, 1)
    }
}

/// QUERY_EVENT: a statement (DDL, BEGIN, COMMIT, or DML under statement logging).
#[derive(Debug, Clone, PartialEq)]
pub struct Query<'a> {
    /// Thread that ran it (`pseudo_thread_id`).
    pub thread_id: u32,
    /// Seconds it took.
    pub exec_time: u32,
    /// Error code it ended with on the source (0 normally).
    pub error_code: u16,
    /// Default database when it ran (`USE db`).
    pub schema: Cow<'a, str>,
    /// The statement text.
    pub query: Cow<'a, str>,
    /// The status variables that matter for decoding and replay.
    pub status: QueryStatus,
}

/// The QUERY_EVENT status variables Sluice reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueryStatus {
    /// `@@session.sql_mode`.
    pub sql_mode: Option<u64>,
    /// `character_set_client`, `collation_connection`, `collation_server` ids.
    pub charset: Option<(u16, u16, u16)>,
    /// `@@session.time_zone` (e.g. `SYSTEM`, `+00:00`).
    pub time_zone: Option<String>,
    /// `collation_database` id.
    pub charset_database: Option<u16>,
    /// Databases the statement updated (multi-db statements), when logged.
    pub updated_db_names: Vec<String>,
    /// Microseconds part of the start time.
    pub microseconds: Option<u32>,
    /// DDL logged with an XID (MySQL 8.0 atomic DDL).
    pub ddl_xid: Option<u64>,
    /// MariaDB: XID of a transaction ending in a QUERY (Q_XID).
    pub mariadb_xid: Option<u64>,
}

impl<'a> Query<'a> {
    fn parse(body: &'a [u8], post_header_len: u8) -> Result<Query<'a>> {
        Query::parse_with(body, post_header_len, |q| Ok(String::from_utf8_lossy(q)))
    }

    fn parse_with(
        body: &'a [u8],
        post_header_len: u8,
        text: impl FnOnce(&'a [u8]) -> Result<Cow<'a, str>>,
    ) -> Result<Query<'a>> {
        let mut r = Reader::new(body);
        let thread_id = r.u32("query thread id")?;
        let exec_time = r.u32("query exec time")?;
        let db_len = r.u8("query db length")?;
        let error_code = r.u16("query error code")?;
        let status_len = if post_header_len >= 13 { r.u16("query status length")? } else { 0 };
        // post-header may be longer than what we know (future servers): skip the rest
        r.skip(usize::from(post_header_len).saturating_sub(r.position()), "query post-header")?;
        let status_bytes = r.take(usize::from(status_len), "query status variables")?;
        let status = parse_status_vars(status_bytes);
        let schema = r.take(usize::from(db_len), "query schema")?;
        r.skip(1, "query schema terminator")?;
        let query = r.take_rest();
        Ok(Query {
            thread_id,
            exec_time,
            error_code,
            schema: String::from_utf8_lossy(schema),
            query: text(query)?,
            status,
        })
    }

    /// Parses MariaDB's QUERY_COMPRESSED_EVENT: a QUERY whose statement text is compressed.
    pub(crate) fn parse_compressed(body: &'a [u8], post_header_len: u8, max: u64) -> Result<Query<'a>> {
        Query::parse_with(body, post_header_len, |q| {
            let text = mariadb_uncompress(q, max, "compressed query")?;
            Ok(Cow::Owned(String::from_utf8_lossy(&text).into_owned()))
        })
    }

    /// True for `BEGIN` (a transaction starts).
    pub fn is_begin(&self) -> bool {
        self.query.eq_ignore_ascii_case("BEGIN")
            || self.query.get(..8).is_some_and(|p| p.eq_ignore_ascii_case("XA START"))
    }

    /// True for `COMMIT` (a non-transactional-engine group or XA ends).
    pub fn is_commit(&self) -> bool {
        self.query.eq_ignore_ascii_case("COMMIT") || self.query.starts_with("XA COMMIT")
    }

    /// True for `ROLLBACK` (a group ends without effect; MyISAM mixes log it).
    pub fn is_rollback(&self) -> bool {
        self.query.eq_ignore_ascii_case("ROLLBACK")
    }
}

/// Reads the status variables we need; stops at the first unknown code, as the server's own
/// reader does (an unknown code has no known length; the rest of the event is unaffected
/// because the block's total length is in the post-header).
fn parse_status_vars(bytes: &[u8]) -> QueryStatus {
    let mut st = QueryStatus::default();
    let mut r = Reader::new(bytes);
    let _ = (|| -> Result<()> {
        while !r.is_empty() {
            match r.u8("status var code")? {
                0 => r.skip(4, "Q_FLAGS2")?,
                1 => st.sql_mode = Some(r.u64("Q_SQL_MODE")?),
                2 => {
                    let n = r.u8("Q_CATALOG")?;
                    r.skip(usize::from(n) + 1, "Q_CATALOG")?;
                }
                3 => r.skip(4, "Q_AUTO_INCREMENT")?,
                4 => {
                    st.charset = Some((r.u16("Q_CHARSET")?, r.u16("Q_CHARSET")?, r.u16("Q_CHARSET")?));
                }
                5 => st.time_zone = Some(String::from_utf8_lossy(r.u8_prefixed("Q_TIME_ZONE")?).into_owned()),
                6 => {
                    r.u8_prefixed("Q_CATALOG_NZ")?;
                }
                7 => r.skip(2, "Q_LC_TIME_NAMES")?,
                8 => st.charset_database = Some(r.u16("Q_CHARSET_DATABASE")?),
                9 => r.skip(8, "Q_TABLE_MAP_FOR_UPDATE")?,
                10 => r.skip(4, "Q_MASTER_DATA_WRITTEN")?,
                11 => {
                    r.u8_prefixed("Q_INVOKER user")?;
                    r.u8_prefixed("Q_INVOKER host")?;
                }
                12 => {
                    let n = r.u8("Q_UPDATED_DB_NAMES")?;
                    // 254 = OVER_MAX_DBS_IN_EVENT_MTS: no names follow
                    if n != 254 {
                        for _ in 0..n {
                            st.updated_db_names
                                .push(String::from_utf8_lossy(r.nul_bytes("Q_UPDATED_DB_NAMES")?).into_owned());
                        }
                    }
                }
                13 => st.microseconds = Some(u32::try_from(r.uint_le(3, "Q_MICROSECONDS")?).unwrap_or(0)),
                14 | 15 => r.skip(8, "Q_COMMIT_TS")?,
                16 => r.skip(1, "Q_EXPLICIT_DEFAULTS_FOR_TIMESTAMP")?,
                17 => st.ddl_xid = Some(r.u64("Q_DDL_LOGGED_WITH_XID")?),
                18 => r.skip(2, "Q_DEFAULT_COLLATION_FOR_UTF8MB4")?,
                19 => r.skip(1, "Q_SQL_REQUIRE_PRIMARY_KEY")?,
                20 => r.skip(1, "Q_DEFAULT_TABLE_ENCRYPTION")?,
                128 => r.skip(3, "Q_HRNOW")?,
                129 => st.mariadb_xid = Some(r.u64("Q_XID")?),
                130 => r.skip(1, "Q_GTID_FLAGS3")?,
                _ => break,
            }
        }
        Ok(())
    })();
    st
}

/// ROTATE_EVENT: the next binlog file and the position to continue at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rotate<'a> {
    /// Position in the next file (4 in practice).
    pub position: u64,
    /// Next file name.
    pub next_file: Cow<'a, str>,
}

/// A MySQL GTID_LOG_EVENT / ANONYMOUS_GTID_LOG_EVENT / GTID_TAGGED_LOG_EVENT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gtid {
    /// The GTID (for anonymous transactions: the zero UUID and gno 0).
    pub gtid: MysqlGtid,
    /// True for ANONYMOUS_GTID (gtid_mode=OFF).
    pub anonymous: bool,
    /// Flags (bit 0: may have been committed in parallel with others).
    pub flags: u8,
    /// Logical clock: last transaction this one depends on (5.7+).
    pub last_committed: Option<i64>,
    /// Logical clock: this transaction's number (5.7+).
    pub sequence_number: Option<i64>,
    /// Commit time on the immediate source, microseconds since the epoch (8.0.1+).
    pub immediate_commit_timestamp: Option<u64>,
    /// Commit time on the original source (8.0.1+).
    pub original_commit_timestamp: Option<u64>,
    /// Bytes of the whole transaction (8.0.2+).
    pub transaction_length: Option<u64>,
}

impl Gtid {
    fn parse(body: &[u8], anonymous: bool) -> Result<Gtid> {
        let mut r = Reader::new(body);
        let flags = r.u8("gtid flags")?;
        let uuid = Uuid(r.array::<16>("gtid uuid")?);
        let gno = r.u64("gtid gno")?;
        let mut g = Gtid {
            gtid: MysqlGtid { tsid: Tsid { uuid, tag: None }, gno },
            anonymous,
            flags,
            last_committed: None,
            sequence_number: None,
            immediate_commit_timestamp: None,
            original_commit_timestamp: None,
            transaction_length: None,
        };
        // 5.6 stops here; 5.7 adds the logical clock, 8.0 commit timestamps and length.
        if r.is_empty() {
            return Ok(g);
        }
        let lt_type = r.u8("gtid logical timestamp type")?;
        if lt_type == 2 {
            g.last_committed = Some(r.i64("gtid last_committed")?);
            g.sequence_number = Some(r.i64("gtid sequence_number")?);
        }
        if r.remaining() >= 7 {
            let imm = r.uint_le(7, "immediate commit timestamp")?;
            let has_original = imm & (1 << 55) != 0;
            let imm = imm & !(1 << 55);
            g.immediate_commit_timestamp = Some(imm);
            g.original_commit_timestamp =
                Some(if has_original { r.uint_le(7, "original commit timestamp")? } else { imm });
            if !r.is_empty() {
                g.transaction_length = Some(r.lenenc_int("transaction length")?);
            }
            // immediate/original server version (8.0.14+) follow; not needed.
        }
        Ok(g)
    }

    /// Parses GTID_TAGGED_LOG_EVENT (MySQL 8.4+), written with the `mysql::serialization`
    /// format: a header of three variable-length integers (format version, message size, last
    /// non-ignorable field id), then fields as
    /// (varlen field id, value). Field ids: 0 flags, 1 uuid, 2 gno, 3 tag, 4 last_committed,
    /// 5 sequence_number, 6 immediate commit ts, 7 original commit ts, 8 transaction length,
    /// 9 immediate server version, 10 original server version, 11 commit group ticket.
    fn parse_tagged(body: &[u8]) -> Result<Gtid> {
        use sluice_protocol::gtid::{read_varlen_uint as vu, Tag};
        let mut r = Reader::new(body);
        let _version = vu(&mut r, "tagged gtid format version")?;
        let _size = vu(&mut r, "tagged gtid message size")?;
        let _last_non_ignorable = vu(&mut r, "tagged gtid last non-ignorable field")?;
        let mut g = Gtid {
            gtid: MysqlGtid { tsid: Tsid { uuid: Uuid::default(), tag: None }, gno: 0 },
            anonymous: false,
            flags: 0,
            last_committed: None,
            sequence_number: None,
            immediate_commit_timestamp: None,
            original_commit_timestamp: None,
            transaction_length: None,
        };
        let signed = |v: u64| -> i64 {
            // zig-zag: the low bit is the sign
            let mag = i64::try_from(v >> 1).unwrap_or(i64::MAX);
            if v & 1 == 1 {
                -mag - 1
            } else {
                mag
            }
        };
        while !r.is_empty() {
            let id = vu(&mut r, "tagged gtid field id")?;
            match id {
                0 => g.flags = u8::try_from(vu(&mut r, "gtid flags")?).unwrap_or(0),
                1 => {
                    let mut u = [0u8; 16];
                    for b in u.iter_mut() {
                        *b = u8::try_from(vu(&mut r, "gtid uuid")?)
                            .map_err(|_| Error::invalid("tagged gtid", "uuid byte out of range"))?;
                    }
                    g.gtid.tsid.uuid = Uuid(u);
                }
                2 => g.gtid.gno = u64::try_from(signed(vu(&mut r, "gtid gno")?)).unwrap_or(0),
                3 => {
                    let len = vu(&mut r, "gtid tag length")?;
                    let t = r.take_u64(len, "gtid tag")?;
                    if !t.is_empty() {
                        let s =
                            std::str::from_utf8(t).map_err(|_| Error::invalid("tagged gtid", "tag is not UTF-8"))?;
                        g.gtid.tsid.tag = Some(Tag::new(s)?);
                    }
                }
                4 => g.last_committed = Some(signed(vu(&mut r, "gtid last_committed")?)),
                5 => g.sequence_number = Some(signed(vu(&mut r, "gtid sequence_number")?)),
                6 => g.immediate_commit_timestamp = Some(vu(&mut r, "gtid immediate commit ts")?),
                7 => g.original_commit_timestamp = Some(vu(&mut r, "gtid original commit ts")?),
                8 => g.transaction_length = Some(vu(&mut r, "gtid transaction length")?),
                9..=11 => {
                    vu(&mut r, "gtid server version / ticket")?;
                }
                other => {
                    return Err(Error::invalid("tagged gtid", format!("unknown field id {other}")));
                }
            }
        }
        if g.original_commit_timestamp.is_none() {
            g.original_commit_timestamp = g.immediate_commit_timestamp;
        }
        Ok(g)
    }
}

/// MariaDB GTID_EVENT: starts a transaction (or a standalone DDL).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MariadbGtidEvent {
    /// `domain-server-seq` (the server id comes from the event header).
    pub gtid: MariadbGtid,
    /// `FL_*` flags (1 standalone, 2 group commit id present, 4 transactional, ...).
    pub flags: u8,
    /// Group commit id when flag 2 is set.
    pub commit_id: Option<u64>,
}

impl MariadbGtidEvent {
    /// `FL_STANDALONE`: no BEGIN/COMMIT follows (DDL).
    pub const FL_STANDALONE: u8 = 1;

    /// True when the event group is a single statement without BEGIN/COMMIT.
    pub fn is_standalone(&self) -> bool {
        self.flags & Self::FL_STANDALONE != 0
    }
}

/// INTVAR_EVENT: `LAST_INSERT_ID()` or `INSERT_ID` for the next statement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Intvar {
    /// 1 = LAST_INSERT_ID, 2 = INSERT_ID.
    pub kind: u8,
    /// The value.
    pub value: u64,
}

/// USER_VAR_EVENT: a user variable used by the next statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserVar<'a> {
    /// Variable name (without `@`).
    pub name: Cow<'a, str>,
    /// Raw value (None for NULL) with its type code and collation.
    pub value: Option<(u8, u32, &'a [u8])>,
}

/// TRANSACTION_PAYLOAD_EVENT (MySQL 8.0.20+, `binlog_transaction_compression=ON`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionPayload {
    /// 0 = zstd, 255 = none.
    pub compression_type: u64,
    /// Size of the compressed payload.
    pub payload_size: u64,
    /// Size after decompression, as announced.
    pub uncompressed_size: u64,
}

/// One decoded event body.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Event<'a> {
    /// FORMAT_DESCRIPTION_EVENT.
    FormatDescription(FormatDescription),
    /// ROTATE_EVENT.
    Rotate(Rotate<'a>),
    /// QUERY_EVENT (and MariaDB QUERY_COMPRESSED_EVENT, decompressed).
    Query(Query<'a>),
    /// XID_EVENT: the transaction commits.
    Xid(u64),
    /// GTID / ANONYMOUS_GTID / GTID_TAGGED (MySQL).
    Gtid(Gtid),
    /// PREVIOUS_GTIDS_LOG_EVENT: GTIDs in earlier files.
    PreviousGtids(GtidSet),
    /// TABLE_MAP_EVENT (also cached by the decoder for the rows events that follow).
    TableMap(Arc<TableMap>),
    /// WRITE/UPDATE/DELETE/PARTIAL_UPDATE rows (v1, v2, MariaDB compressed).
    Rows(RowsEvent<'a>),
    /// TRANSACTION_PAYLOAD_EVENT: the inner events follow from the decoder.
    TransactionPayload(TransactionPayload),
    /// ROWS_QUERY_LOG_EVENT: the statement behind the next rows events.
    RowsQuery(Cow<'a, str>),
    /// INTVAR_EVENT.
    Intvar(Intvar),
    /// RAND_EVENT: seeds for RAND().
    Rand {
        /// First seed.
        seed1: u64,
        /// Second seed.
        seed2: u64,
    },
    /// USER_VAR_EVENT.
    UserVar(UserVar<'a>),
    /// HEARTBEAT (v1 and v2): the source is alive; carries the current file and position.
    Heartbeat {
        /// Current binlog file.
        file: Cow<'a, str>,
        /// Position (v2 only; v1 uses the header's log_pos).
        position: Option<u64>,
    },
    /// STOP_EVENT: the server stopped.
    Stop,
    /// INCIDENT_EVENT: something happened that replicas must know (e.g. lost events).
    Incident {
        /// Incident number (1 = LOST_EVENTS).
        kind: u16,
        /// Message.
        message: Cow<'a, str>,
    },
    /// XA_PREPARE_LOG_EVENT.
    XaPrepare {
        /// True for XA COMMIT ... ONE PHASE.
        one_phase: bool,
    },
    /// MariaDB ANNOTATE_ROWS_EVENT: the statement behind the next rows events.
    MariadbAnnotateRows(Cow<'a, str>),
    /// MariaDB BINLOG_CHECKPOINT_EVENT.
    MariadbBinlogCheckpoint(Cow<'a, str>),
    /// MariaDB GTID_EVENT.
    MariadbGtid(MariadbGtidEvent),
    /// MariaDB GTID_LIST_EVENT: the last GTID of each domain before this file.
    MariadbGtidList(MariadbGtidList),
    /// A known event Sluice has no use for beyond naming it (LOAD DATA blocks, group
    /// replication context, IGNORABLE, ...).
    Other(EventType),
    /// An event type this decoder does not know: skipped by its size and counted.
    Unknown(u8),
}

impl<'a> Event<'a> {
    /// Parses the body of an event whose type is not a rows or table-map event (those need
    /// the decoder's state; see [`crate::decoder::EventDecoder`]).
    ///
    /// # Errors
    /// Truncated and malformed bodies.
    pub(crate) fn parse_simple(t: EventType, body: &'a [u8], fde: &FormatDescription) -> Result<Event<'a>> {
        let mut r = Reader::new(body);
        Ok(match t {
            EventType::FormatDescription => Event::FormatDescription(FormatDescription::parse(body)?),
            EventType::Rotate => {
                let has_pos = fde.post_header_len(t, 8) >= 8;
                let position = if has_pos { r.u64("rotate position")? } else { 4 };
                Event::Rotate(Rotate { position, next_file: String::from_utf8_lossy(r.take_rest()) })
            }
            EventType::Query => Event::Query(Query::parse(body, fde.post_header_len(t, 13))?),
            EventType::Xid => {
                let xid = r.u64("xid")?;
                expect_end(&r, "XID event")?;
                Event::Xid(xid)
            }
            EventType::Gtid => Event::Gtid(Gtid::parse(body, false)?),
            EventType::AnonymousGtid => Event::Gtid(Gtid::parse(body, true)?),
            EventType::GtidTagged => Event::Gtid(Gtid::parse_tagged(body)?),
            EventType::PreviousGtids => Event::PreviousGtids(GtidSet::decode(&mut r)?),
            EventType::RowsQuery => {
                // one length byte (truncated to 255, so ignored), then the full text
                r.skip(1, "rows query length")?;
                Event::RowsQuery(String::from_utf8_lossy(r.take_rest()))
            }
            EventType::Intvar => {
                let iv = Intvar { kind: r.u8("intvar type")?, value: r.u64("intvar value")? };
                expect_end(&r, "INTVAR event")?;
                Event::Intvar(iv)
            }
            EventType::Rand => {
                let (seed1, seed2) = (r.u64("rand seed1")?, r.u64("rand seed2")?);
                expect_end(&r, "RAND event")?;
                Event::Rand { seed1, seed2 }
            }
            EventType::UserVar => {
                let n = r.u32("user var name length")?;
                let name = String::from_utf8_lossy(r.take_u64(u64::from(n), "user var name")?);
                let is_null = r.u8("user var null flag")? != 0;
                let value = if is_null {
                    None
                } else {
                    let ty = r.u8("user var type")?;
                    let charset = r.u32("user var charset")?;
                    let len = r.u32("user var length")?;
                    Some((ty, charset, r.take_u64(u64::from(len), "user var value")?))
                };
                Event::UserVar(UserVar { name, value })
            }
            EventType::Heartbeat => Event::Heartbeat { file: String::from_utf8_lossy(r.take_rest()), position: None },
            EventType::HeartbeatV2 => {
                // TLV fields: 0 = log file name, 1 = log position
                let mut file = Cow::Borrowed("");
                let mut position = None;
                while !r.is_empty() {
                    let ty = r.lenenc_int("heartbeat field type")?;
                    let len = r.lenenc_int("heartbeat field length")?;
                    let v = r.take_u64(len, "heartbeat field")?;
                    match ty {
                        0 => file = String::from_utf8_lossy(v),
                        1 => position = Some(Reader::new(v).lenenc_int("heartbeat position")?),
                        _ => {}
                    }
                }
                Event::Heartbeat { file, position }
            }
            EventType::Stop => Event::Stop,
            EventType::Incident => {
                let kind = r.u16("incident type")?;
                let message = if r.is_empty() {
                    Cow::Borrowed("")
                } else {
                    String::from_utf8_lossy(r.u8_prefixed("incident message")?)
                };
                Event::Incident { kind, message }
            }
            EventType::XaPrepare => Event::XaPrepare { one_phase: r.u8("xa one phase")? != 0 },
            EventType::MariadbAnnotateRows => Event::MariadbAnnotateRows(String::from_utf8_lossy(body)),
            EventType::MariadbBinlogCheckpoint => {
                let n = r.u32("checkpoint name length")?;
                Event::MariadbBinlogCheckpoint(String::from_utf8_lossy(
                    r.take_u64(u64::from(n), "checkpoint file name")?,
                ))
            }
            EventType::MariadbGtid => {
                let seq_no = r.u64("gtid seq_no")?;
                let domain_id = r.u32("gtid domain id")?;
                let flags = r.u8("gtid flags")?;
                // FL_GROUP_COMMIT_ID = 2: an 8-byte commit id follows
                let commit_id = if flags & 2 != 0 { Some(r.u64("gtid commit id")?) } else { None };
                Event::MariadbGtid(MariadbGtidEvent {
                    // server id is in the header; the decoder fills it in
                    gtid: MariadbGtid { domain_id, server_id: 0, seq_no },
                    flags,
                    commit_id,
                })
            }
            EventType::MariadbGtidList => {
                let word = r.u32("gtid list count")?;
                let count = word & 0x0fff_ffff; // high 4 bits are flags
                if u64::from(count) * 16 > r.remaining() as u64 {
                    return Err(Error::from(sluice_protocol::Error::Truncated {
                        what: "gtid list",
                        needed: count as usize * 16,
                        remaining: r.remaining(),
                    }));
                }
                let mut list = MariadbGtidList::new();
                for _ in 0..count {
                    let domain_id = r.u32("gtid list domain")?;
                    let server_id = r.u32("gtid list server")?;
                    let seq_no = r.u64("gtid list seq")?;
                    list.advance(MariadbGtid { domain_id, server_id, seq_no });
                }
                Event::MariadbGtidList(list)
            }
            EventType::MariadbStartEncryption => return Err(Error::Encrypted),
            EventType::Unknown(code) => Event::Unknown(code),
            other => Event::Other(other),
        })
    }

    /// A short name for listings: the server's name of the event type.
    pub fn type_name(&self) -> &'static str {
        match self {
            Event::FormatDescription(_) => "FORMAT_DESCRIPTION_EVENT",
            Event::Rotate(_) => "ROTATE_EVENT",
            Event::Query(_) => "QUERY_EVENT",
            Event::Xid(_) => "XID_EVENT",
            Event::Gtid(g) if g.anonymous => "ANONYMOUS_GTID_LOG_EVENT",
            Event::Gtid(_) => "GTID_LOG_EVENT",
            Event::PreviousGtids(_) => "PREVIOUS_GTIDS_LOG_EVENT",
            Event::TableMap(_) => "TABLE_MAP_EVENT",
            Event::Rows(r) => r.kind.name(),
            Event::TransactionPayload(_) => "TRANSACTION_PAYLOAD_EVENT",
            Event::RowsQuery(_) => "ROWS_QUERY_LOG_EVENT",
            Event::Intvar(_) => "INTVAR_EVENT",
            Event::Rand { .. } => "RAND_EVENT",
            Event::UserVar(_) => "USER_VAR_EVENT",
            Event::Heartbeat { .. } => "HEARTBEAT_LOG_EVENT",
            Event::Stop => "STOP_EVENT",
            Event::Incident { .. } => "INCIDENT_EVENT",
            Event::XaPrepare { .. } => "XA_PREPARE_LOG_EVENT",
            Event::MariadbAnnotateRows(_) => "ANNOTATE_ROWS_EVENT",
            Event::MariadbBinlogCheckpoint(_) => "BINLOG_CHECKPOINT_EVENT",
            Event::MariadbGtid(_) => "GTID_EVENT",
            Event::MariadbGtidList(_) => "GTID_LIST_EVENT",
            Event::Other(t) => t.name(),
            Event::Unknown(_) => "UNKNOWN",
        }
    }
}

/// Fixed-size bodies must be consumed exactly: extra bytes mean the event is not what its
/// type says (a corrupt or foreign event), and reading on would misreport it.
fn expect_end(r: &Reader<'_>, what: &'static str) -> Result<()> {
    if r.is_empty() {
        Ok(())
    } else {
        Err(Error::invalid(what, format!("{} unexpected bytes after the body", r.remaining())))
    }
}

/// The most a decompressor preallocates from an announced (untrusted) size.
pub(crate) const PREALLOC_MAX: u64 = 1 << 20;

/// Decompresses MariaDB's compressed event data (QUERY_COMPRESSED, *_ROWS_COMPRESSED):
/// one header byte (`0x80 | n`, n = 1..4 bytes of big-endian uncompressed length), the
/// length, then a zlib stream. `max` caps the announced length before allocating.
///
/// # Errors
/// Malformed headers, lengths over `max`, and zlib failures.
pub(crate) fn mariadb_uncompress(data: &[u8], max: u64, what: &'static str) -> Result<Vec<u8>> {
    use std::io::Read;
    let mut r = Reader::new(data);
    let head = r.u8(what)?;
    let n = usize::from(head & 0x07);
    if head & 0x80 == 0 || n == 0 || n > 4 {
        return Err(Error::Decompress { what, reason: format!("bad compression header byte 0x{head:02x}") });
    }
    let len = r.uint_be(n, what)?;
    if len > max {
        return Err(Error::TooLarge { what, len, max });
    }
    // The announced length is untrusted: preallocate at most PREALLOC_MAX and let the
    // buffer grow with the bytes zlib actually produces (still capped by `max` via `take`).
    let mut out = Vec::with_capacity(usize::try_from(len.min(PREALLOC_MAX)).unwrap_or(0));
    let mut z = flate2::read::ZlibDecoder::new(r.rest()).take(len + 1);
    z.read_to_end(&mut out).map_err(|e| Error::Decompress { what, reason: e.to_string() })?;
    if out.len() as u64 != len {
        return Err(Error::Decompress { what, reason: format!("announced {len} bytes, got {}", out.len()) });
    }
    Ok(out)
}

/// Parses a TRANSACTION_PAYLOAD_EVENT body: TLV header fields then the payload.
pub(crate) fn parse_transaction_payload(body: &[u8]) -> Result<(TransactionPayload, &[u8])> {
    let mut r = Reader::new(body);
    let mut info = TransactionPayload { compression_type: 255, payload_size: 0, uncompressed_size: 0 };
    loop {
        let ty = r.lenenc_int("payload field type")?;
        if ty == 0 {
            break; // END_MARK: the payload follows
        }
        let len = r.lenenc_int("payload field length")?;
        let v = r.take_u64(len, "payload field")?;
        let mut vr = Reader::new(v);
        let n = vr.lenenc_int("payload field value")?;
        match ty {
            1 => info.payload_size = n,
            2 => info.compression_type = n,
            3 => info.uncompressed_size = n,
            _ => {}
        }
    }
    let payload = r.take_rest();
    Ok((info, payload))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksum_awareness_by_version() {
        assert!(!checksum_aware("5.5.27-log"));
        assert!(!checksum_aware("5.6.0"));
        assert!(checksum_aware("5.6.4-m7-debug-log"));
        assert!(checksum_aware("8.0.32"));
        assert!(checksum_aware("5.5.5-10.11.19-MariaDB-log") || checksum_aware("10.11.19-MariaDB-log"));
        assert!(checksum_aware("10.11.19-MariaDB-log"));
    }

    #[test]
    fn query_status_vars() {
        // Q_SQL_MODE (1) = 0x1000, Q_TIME_ZONE (5) = "+00:00", Q_CHARSET (4) = 33/33/8, then an
        // unknown code 99 which stops the scan
        let mut b = vec![1];
        b.extend_from_slice(&0x1000u64.to_le_bytes());
        b.extend_from_slice(&[5, 6]);
        b.extend_from_slice(b"+00:00");
        b.extend_from_slice(&[4, 33, 0, 33, 0, 8, 0]);
        b.extend_from_slice(&[99, 1, 2, 3]);
        let st = parse_status_vars(&b);
        assert_eq!(st.sql_mode, Some(0x1000));
        assert_eq!(st.time_zone.as_deref(), Some("+00:00"));
        assert_eq!(st.charset, Some((33, 33, 8)));
    }

    #[test]
    fn mariadb_compressed_header_is_checked() {
        assert!(mariadb_uncompress(&[0x00, 1, 2], 100, "x").is_err());
        assert!(mariadb_uncompress(&[0x81], 100, "x").is_err());
        // announced length over the cap is refused before inflating
        assert!(matches!(mariadb_uncompress(&[0x84, 0x7f, 0xff, 0xff, 0xff], 1000, "x"), Err(Error::TooLarge { .. })));
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        std::io::Write::write_all(&mut z, b"hello").unwrap();
        let mut data = vec![0x81, 5];
        data.extend(z.finish().unwrap());
        assert_eq!(mariadb_uncompress(&data, 100, "x").unwrap(), b"hello");
    }

    /// The body of the GTID_TAGGED_LOG_EVENT in the MySQL 9.6 fixture
    /// binlog_transaction_with_GTID_TAG.000001 (offset 245, checksum removed).
    #[test]
    fn tagged_gtid_from_mysql_9_6() {
        let body = [
            0x02u8, 0x78, 0x00, // version 1, size 60, last non-ignorable field 0
            0x00, 0x00, // field 0 flags = 0
            0x02, 0xaa, 0xee, 0x25, 0x02, 0x08, 0x04, 0x65, 0x02, 0x22, 0xc5, 0x03, 0xc5, 0x02, 0xe1, 0x02, 0x9c, 0xc1,
            0x03, 0x11, 0x03, 0x55, 0x02, 0xde, 0xad, 0x03, // field 1 uuid, 16 varlen bytes
            0x04, 0x0c, // field 2 gno = 3 (zig-zag)
            0x06, 0x0a, b'm', b'y', b't', b'a', b'g', // field 3 tag "mytag"
            0x08, 0x00, // field 4 last_committed = 0
            0x0a, 0x04, // field 5 sequence_number = 2 -> 1
            0x0c, 0x7f, 0x1c, 0xf3, 0xb8, 0x14, 0x24, 0x4a, 0x06, // field 6 immediate commit ts
            0x10, 0xa1, 0x04, // field 8 transaction length = 296
            0x12, 0x43, 0x0f, 0x0b, // field 9 server version 90600
        ];
        let g = Gtid::parse_tagged(&body).unwrap();
        assert_eq!(g.gtid.to_string(), "55778904-0299-11f1-b1b8-4ef0c4956feb:mytag:3");
        assert_eq!(g.last_committed, Some(0));
        assert_eq!(g.sequence_number, Some(1));
        assert_eq!(g.transaction_length, Some(296));
        assert_eq!(g.original_commit_timestamp, g.immediate_commit_timestamp);
    }
}
