//! Replication commands and the packets of the binlog stream.
//!
//! | command              | code | payload                                                         |
//! |----------------------|------|-----------------------------------------------------------------|
//! | COM_REGISTER_SLAVE   | 0x15 | server id u32, hostname/user/password (u8-length strings), port u16, rank u32, source id u32 |
//! | COM_BINLOG_DUMP      | 0x12 | position u32, flags u16, server id u32, file name (rest)        |
//! | COM_BINLOG_DUMP_GTID | 0x1e | flags u16, server id u32, name length u32, name, position u64, [data size u32, encoded GTID set] |
//!
//! After a dump command the server sends one packet per event, each `0x00` + the event (header,
//! body, checksum); a non-blocking dump (`BINLOG_DUMP_NON_BLOCK`) ends with an EOF packet at the
//! end of the last binlog; errors (purged binlog, unknown GTID: 1236) come as ERR packets.
//!
//! MariaDB has no COM_BINLOG_DUMP_GTID (it answers 1047): GTID positioning there is
//! `SET @mariadb_slave_capability=4`, `SET @slave_connect_state='D-S-N,...'` and a
//! COM_BINLOG_DUMP with an empty file name (see [`mariadb_gtid_setup`]).
//!
//! References: <https://dev.mysql.com/doc/dev/mysql-server/latest/page_protocol_replication.html>,
//! <https://mariadb.com/kb/en/com_binlog_dump/>, <https://mariadb.com/kb/en/com_register_slave/>.

use bytes::Bytes;

use crate::error::{Error, Result, ServerError};
use crate::gtid::{GtidSet, MariadbGtidList};
use crate::packet::{is_end_of_rows, EOF_HEADER, ERR_HEADER, OK_HEADER};

/// COM_BINLOG_DUMP.
pub const COM_BINLOG_DUMP: u8 = 0x12;
/// COM_REGISTER_SLAVE.
pub const COM_REGISTER_SLAVE: u8 = 0x15;
/// COM_BINLOG_DUMP_GTID (MySQL 5.6+).
pub const COM_BINLOG_DUMP_GTID: u8 = 0x1e;

/// Dump flag: end with EOF at the end of the last binlog instead of waiting for new events.
pub const BINLOG_DUMP_NON_BLOCK: u16 = 0x01;
/// COM_BINLOG_DUMP_GTID flag: position by file name and position.
pub const BINLOG_THROUGH_POSITION: u16 = 0x02;
/// MariaDB's COM_BINLOG_DUMP flag `BINLOG_SEND_ANNOTATE_ROWS_EVENT`: send the ANNOTATE_ROWS
/// events the file holds (without it the server leaves them out of the stream, so a copy of
/// the file made from the stream would lack them).
pub const MARIADB_SEND_ANNOTATE_ROWS: u16 = 0x02;
/// COM_BINLOG_DUMP_GTID flag: a GTID set follows.
pub const BINLOG_THROUGH_GTID: u16 = 0x04;

/// Largest encoded GTID set we send (the server accepts far less in practice).
pub const MAX_GTID_SET_BYTES: usize = 64 * 1024 * 1024;

fn put_u8_str(out: &mut Vec<u8>, s: &str, what: &'static str) -> Result<()> {
    let n = u8::try_from(s.len())
        .map_err(|_| Error::Invalid { what, reason: format!("{} bytes, at most 255", s.len()) })?;
    out.push(n);
    out.extend_from_slice(s.as_bytes());
    Ok(())
}

/// COM_REGISTER_SLAVE: announces this replica (shown by `SHOW SLAVE HOSTS` /
/// `SHOW REPLICAS`).
#[derive(Clone, PartialEq, Eq, Default)]
pub struct ComRegisterReplica {
    /// This replica's server id (unique among the source's replicas).
    pub server_id: u32,
    /// Host name to report.
    pub hostname: String,
    /// User name to report.
    pub user: String,
    /// Password to report (normally empty).
    pub password: String,
    /// Port to report.
    pub port: u16,
    /// Replication rank (ignored by servers).
    pub replication_rank: u32,
    /// Source id (0).
    pub source_id: u32,
}

impl std::fmt::Debug for ComRegisterReplica {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ComRegisterReplica")
            .field("server_id", &self.server_id)
            .field("hostname", &self.hostname)
            .field("user", &self.user)
            .field("password", &"<redacted>")
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

impl ComRegisterReplica {
    /// The command payload.
    ///
    /// # Errors
    /// [`Error::Invalid`] when a string is longer than 255 bytes.
    pub fn encode(&self) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(18 + self.hostname.len() + self.user.len() + self.password.len());
        out.push(COM_REGISTER_SLAVE);
        out.extend_from_slice(&self.server_id.to_le_bytes());
        put_u8_str(&mut out, &self.hostname, "replica host name")?;
        put_u8_str(&mut out, &self.user, "replica user")?;
        put_u8_str(&mut out, &self.password, "replica password")?;
        out.extend_from_slice(&self.port.to_le_bytes());
        out.extend_from_slice(&self.replication_rank.to_le_bytes());
        out.extend_from_slice(&self.source_id.to_le_bytes());
        Ok(out)
    }
}

/// COM_BINLOG_DUMP: stream from a file and position (MariaDB: also GTID mode with an empty
/// file name, after [`mariadb_gtid_setup`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ComBinlogDump {
    /// Position in the file (4 is the first event). Only 32 bits fit this command.
    pub position: u32,
    /// [`BINLOG_DUMP_NON_BLOCK`] or 0.
    pub flags: u16,
    /// This replica's server id.
    pub server_id: u32,
    /// Binlog file name (empty: the first file, or the GTID position on MariaDB).
    pub filename: String,
}

impl ComBinlogDump {
    /// The command payload.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(11 + self.filename.len());
        out.push(COM_BINLOG_DUMP);
        out.extend_from_slice(&self.position.to_le_bytes());
        out.extend_from_slice(&self.flags.to_le_bytes());
        out.extend_from_slice(&self.server_id.to_le_bytes());
        out.extend_from_slice(self.filename.as_bytes());
        out
    }
}

/// COM_BINLOG_DUMP_GTID (MySQL): stream everything not in `gtid_set`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ComBinlogDumpGtid {
    /// [`BINLOG_DUMP_NON_BLOCK`], [`BINLOG_THROUGH_POSITION`], [`BINLOG_THROUGH_GTID`].
    /// [`BINLOG_THROUGH_GTID`] is added by [`ComBinlogDumpGtid::encode`] when a set is given.
    pub flags: u16,
    /// This replica's server id.
    pub server_id: u32,
    /// Binlog file name (empty with GTIDs).
    pub filename: String,
    /// Position (4 with GTIDs).
    pub position: u64,
    /// GTIDs already seen (may contain tagged GTIDs, MySQL 8.4+).
    pub gtid_set: Option<GtidSet>,
}

impl ComBinlogDumpGtid {
    /// The command payload.
    ///
    /// # Errors
    /// [`Error::TooLarge`] when the encoded set exceeds [`MAX_GTID_SET_BYTES`].
    pub fn encode(&self) -> Result<Vec<u8>> {
        let mut flags = self.flags;
        let mut data = Vec::new();
        if let Some(set) = &self.gtid_set {
            flags |= BINLOG_THROUGH_GTID;
            set.encode(&mut data);
            if data.len() > MAX_GTID_SET_BYTES {
                return Err(Error::TooLarge {
                    what: "GTID set",
                    len: data.len() as u64,
                    max: MAX_GTID_SET_BYTES as u64,
                });
            }
        }
        let name_len = u32::try_from(self.filename.len())
            .map_err(|_| Error::Invalid { what: "binlog file name", reason: "too long".into() })?;
        let mut out = Vec::with_capacity(23 + self.filename.len() + data.len());
        out.push(COM_BINLOG_DUMP_GTID);
        out.extend_from_slice(&flags.to_le_bytes());
        out.extend_from_slice(&self.server_id.to_le_bytes());
        out.extend_from_slice(&name_len.to_le_bytes());
        out.extend_from_slice(self.filename.as_bytes());
        out.extend_from_slice(&self.position.to_le_bytes());
        if flags & BINLOG_THROUGH_GTID != 0 {
            out.extend_from_slice(&(data.len() as u32).to_le_bytes());
            out.extend_from_slice(&data);
        }
        Ok(out)
    }
}

/// The size of a binlog-stream packet from its first bytes: the OK marker (0x00), then the
/// event header, whose bytes 9..13 are the event's size (timestamp 4, type 1, server id 4,
/// event size 4, next position 4, flags 2). A [`crate::packet::SizeHint`] for events over 16 MiB.
pub fn binlog_packet_size(first_chunk: &[u8]) -> Option<usize> {
    let (&marker, header) = first_chunk.split_first()?;
    let size = header.get(9..13)?;
    let size = u32::from_le_bytes(size.try_into().ok()?);
    (marker == 0).then(|| usize::try_from(size).ok().map(|s| s + 1)).flatten()
}

/// Quotes a string as an SQL literal (single quotes, backslash and quote escaped).
pub fn sql_string_literal(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        match c {
            '\'' => out.push_str("''"),
            '\\' => out.push_str("\\\\"),
            '\0' => out.push_str("\\0"),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// The statements a replica runs before COM_BINLOG_DUMP so that the server sends checksums it
/// can verify: MySQL 5.6+/MariaDB read `@master_binlog_checksum`, MySQL 8.4 reads
/// `@source_binlog_checksum`. Setting an unused user variable is harmless, so both are set.
pub fn checksum_setup() -> Vec<String> {
    vec![
        "SET @master_binlog_checksum = @@global.binlog_checksum".into(),
        "SET @source_binlog_checksum = @@global.binlog_checksum".into(),
    ]
}

/// The statements that ask for heartbeat events every `period_ns` nanoseconds when idle.
pub fn heartbeat_setup(period_ns: u64) -> Vec<String> {
    vec![format!("SET @master_heartbeat_period = {period_ns}"), format!("SET @source_heartbeat_period = {period_ns}")]
}

/// MariaDB replica capability 4 (`MARIA_SLAVE_CAPABILITY_MINE`): send GTID, ANNOTATE_ROWS and
/// other MariaDB events as they are (below 4, GTID events are rewritten to `BEGIN` queries).
pub const MARIADB_SLAVE_CAPABILITY_MINE: u8 = 4;

/// The statements that set up MariaDB GTID streaming from `start` (the last GTID applied per
/// domain); COM_BINLOG_DUMP with an empty file name follows.
pub fn mariadb_gtid_setup(start: &MariadbGtidList, strict: bool) -> Vec<String> {
    vec![
        format!("SET @mariadb_slave_capability = {MARIADB_SLAVE_CAPABILITY_MINE}"),
        format!("SET @slave_connect_state = {}", sql_string_literal(&start.to_string())),
        format!("SET @slave_gtid_strict_mode = {}", u8::from(strict)),
        "SET @slave_gtid_ignore_duplicates = 0".into(),
    ]
}

/// One packet of the binlog stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DumpPacket {
    /// One binlog event: header, body and (when negotiated) checksum, without the 0x00 prefix.
    Event(Bytes),
    /// The end of a non-blocking dump.
    Eof,
    /// The server ended the stream with an error (1236: purged binlog, unknown GTID, ...).
    Error(ServerError),
}

impl DumpPacket {
    /// Classifies a packet of the binlog stream; `capabilities` are the negotiated ones.
    ///
    /// # Errors
    /// [`Error::Invalid`] for any other header; [`Error::Truncated`] for a malformed ERR.
    pub fn parse(payload: Bytes, capabilities: u64) -> Result<DumpPacket> {
        match payload.first() {
            Some(&OK_HEADER) => Ok(DumpPacket::Event(payload.slice(1..))),
            Some(&ERR_HEADER) => Ok(DumpPacket::Error(ServerError::parse(&payload)?)),
            Some(&EOF_HEADER) if is_end_of_rows(&payload, capabilities) => Ok(DumpPacket::Eof),
            Some(&h) => Err(Error::Invalid { what: "binlog stream packet", reason: format!("header 0x{h:02x}") }),
            None => Err(Error::Truncated { what: "binlog stream packet", needed: 1, remaining: 0 }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reader::Reader;

    #[test]
    fn binlog_dump_layout() {
        let c = ComBinlogDump {
            position: 4,
            flags: BINLOG_DUMP_NON_BLOCK,
            server_id: 0x0102_0304,
            filename: "mysql-bin.000001".into(),
        };
        let b = c.encode();
        assert_eq!(
            &b[..11],
            &[
                0x12, // COM_BINLOG_DUMP
                0x04, 0x00, 0x00, 0x00, // position 4
                0x01, 0x00, // non-blocking
                0x04, 0x03, 0x02, 0x01, // server id
            ]
        );
        assert_eq!(&b[11..], b"mysql-bin.000001");
    }

    #[test]
    fn register_layout() {
        let c = ComRegisterReplica {
            server_id: 7,
            hostname: "h".into(),
            user: "u".into(),
            password: String::new(),
            port: 3306,
            ..Default::default()
        };
        assert_eq!(
            c.encode().unwrap(),
            vec![
                0x15, // COM_REGISTER_SLAVE
                0x07, 0x00, 0x00, 0x00, // server id
                0x01, b'h', // hostname
                0x01, b'u', // user
                0x00, // password
                0xea, 0x0c, // port 3306
                0x00, 0x00, 0x00, 0x00, // rank
                0x00, 0x00, 0x00, 0x00, // source id
            ]
        );
        let long = ComRegisterReplica { hostname: "x".repeat(256), ..Default::default() };
        assert!(long.encode().is_err());
        assert!(!format!("{:?}", ComRegisterReplica { password: "hunter2".into(), ..Default::default() })
            .contains("hunter2"));
    }

    #[test]
    fn binlog_dump_gtid_layout() {
        let set: GtidSet = "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5".parse().unwrap();
        let c = ComBinlogDumpGtid {
            flags: BINLOG_DUMP_NON_BLOCK,
            server_id: 9,
            filename: String::new(),
            position: 4,
            gtid_set: Some(set.clone()),
        };
        let b = c.encode().unwrap();
        let mut r = Reader::new(&b);
        assert_eq!(r.u8("cmd").unwrap(), 0x1e);
        assert_eq!(r.u16("flags").unwrap(), BINLOG_DUMP_NON_BLOCK | BINLOG_THROUGH_GTID);
        assert_eq!(r.u32("server id").unwrap(), 9);
        assert_eq!(r.u32("name len").unwrap(), 0);
        assert_eq!(r.u64("pos").unwrap(), 4);
        let n = r.u32("data size").unwrap();
        assert_eq!(n as usize, r.remaining());
        // untagged: count u64, sid 16, n_intervals u64, start u64, end u64 (exclusive)
        assert_eq!(n, 8 + 16 + 8 + 16);
        assert_eq!(GtidSet::decode(&mut r).unwrap(), set);
        // without a set: no data size
        let c = ComBinlogDumpGtid {
            filename: "f".into(),
            position: 4,
            flags: BINLOG_THROUGH_POSITION,
            ..Default::default()
        };
        assert_eq!(c.encode().unwrap().len(), 1 + 2 + 4 + 4 + 1 + 8);
    }

    #[test]
    fn mariadb_setup_quotes() {
        let list: MariadbGtidList = "0-1-5,1-2-3".parse().unwrap();
        let s = mariadb_gtid_setup(&list, true);
        assert_eq!(s[0], "SET @mariadb_slave_capability = 4");
        assert_eq!(s[1], format!("SET @slave_connect_state = '{list}'"));
        assert_eq!(sql_string_literal("a'b\\"), "'a''b\\\\'");
    }

    #[test]
    fn stream_packets() {
        let ev = DumpPacket::parse(Bytes::from_static(&[0x00, 1, 2, 3]), 0).unwrap();
        assert_eq!(ev, DumpPacket::Event(Bytes::from_static(&[1, 2, 3])));
        assert_eq!(DumpPacket::parse(Bytes::from_static(&[0xfe, 0, 0, 2, 0]), 0).unwrap(), DumpPacket::Eof);
        let e = DumpPacket::parse(
            Bytes::from_static(b"\xff\xd4\x04#HY000Could not find first log file name in binary log index file"),
            0,
        )
        .unwrap();
        assert!(matches!(e, DumpPacket::Error(ServerError { code: 1236, .. })));
        assert!(DumpPacket::parse(Bytes::new(), 0).is_err());
        assert!(DumpPacket::parse(Bytes::from_static(&[0x42]), 0).is_err());
    }

    proptest::proptest! {
        /// Any payload classifies as an event, an EOF, a server error or an error.
        #[test]
        fn dump_packet_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64), caps: u64) {
            let _ = DumpPacket::parse(Bytes::from(bytes), caps);
        }
    }
}
