//! The common event header and event type codes.
//!
//! | bytes | field |
//! |---|---|
//! | 4 | timestamp (seconds since the epoch, when the statement began) |
//! | 1 | event type |
//! | 4 | server id |
//! | 4 | event size (header + body + checksum) |
//! | 4 | log position: offset of the *next* event (0 in some relay logs and old formats) |
//! | 2 | flags |
//!
//! Binlog format v1 (MySQL 3.23) had a 13-byte header; v4 (5.0+) has 19, and that is what
//! every server since writes. Reference:
//! <https://dev.mysql.com/doc/dev/mysql-server/latest/page_protocol_replication_binlog_event.html>.

use std::fmt;

use sluice_protocol::Reader;

use crate::error::Result;

/// Length of a v4 event header.
pub const HEADER_LEN: usize = 19;

/// `LOG_EVENT_BINLOG_IN_USE_F`: set on the FDE while the server has the file open. The
/// server computes the FDE's checksum with it clear, so verification must clear it too.
pub const LOG_EVENT_BINLOG_IN_USE_F: u16 = 0x1;

macro_rules! event_types {
    ($( $(#[$doc:meta])* $name:ident = $code:expr, $text:expr; )*) => {
        /// An event type code, MySQL's and MariaDB's (160 and up), with `Unknown` for the rest.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[non_exhaustive]
        pub enum EventType {
            $( $(#[$doc])* $name, )*
            /// A code this decoder does not know: the event is skipped by its size and counted.
            Unknown(u8),
        }

        impl EventType {
            /// The type for a header's type byte.
            pub fn from_u8(b: u8) -> EventType {
                match b {
                    $( $code => EventType::$name, )*
                    other => EventType::Unknown(other),
                }
            }

            /// The type byte.
            pub fn code(self) -> u8 {
                match self {
                    $( EventType::$name => $code, )*
                    EventType::Unknown(b) => b,
                }
            }

            /// The server's own name for the type (as `SHOW BINLOG EVENTS` prints it).
            pub fn name(self) -> &'static str {
                match self {
                    $( EventType::$name => $text, )*
                    EventType::Unknown(_) => "UNKNOWN",
                }
            }
        }
    };
}

event_types! {
    /// 1: START_EVENT_V3 (binlog v1-v3).
    StartV3 = 1, "START_EVENT_V3";
    /// 2: QUERY_EVENT.
    Query = 2, "QUERY_EVENT";
    /// 3: STOP_EVENT.
    Stop = 3, "STOP_EVENT";
    /// 4: ROTATE_EVENT.
    Rotate = 4, "ROTATE_EVENT";
    /// 5: INTVAR_EVENT.
    Intvar = 5, "INTVAR_EVENT";
    /// 6: LOAD_EVENT (obsolete).
    Load = 6, "LOAD_EVENT";
    /// 7: SLAVE_EVENT (never written).
    Slave = 7, "SLAVE_EVENT";
    /// 8: CREATE_FILE_EVENT (obsolete).
    CreateFile = 8, "CREATE_FILE_EVENT";
    /// 9: APPEND_BLOCK_EVENT (LOAD DATA).
    AppendBlock = 9, "APPEND_BLOCK_EVENT";
    /// 10: EXEC_LOAD_EVENT (obsolete).
    ExecLoad = 10, "EXEC_LOAD_EVENT";
    /// 11: DELETE_FILE_EVENT (LOAD DATA).
    DeleteFile = 11, "DELETE_FILE_EVENT";
    /// 12: NEW_LOAD_EVENT (obsolete).
    NewLoad = 12, "NEW_LOAD_EVENT";
    /// 13: RAND_EVENT.
    Rand = 13, "RAND_EVENT";
    /// 14: USER_VAR_EVENT.
    UserVar = 14, "USER_VAR_EVENT";
    /// 15: FORMAT_DESCRIPTION_EVENT.
    FormatDescription = 15, "FORMAT_DESCRIPTION_EVENT";
    /// 16: XID_EVENT.
    Xid = 16, "XID_EVENT";
    /// 17: BEGIN_LOAD_QUERY_EVENT.
    BeginLoadQuery = 17, "BEGIN_LOAD_QUERY_EVENT";
    /// 18: EXECUTE_LOAD_QUERY_EVENT.
    ExecuteLoadQuery = 18, "EXECUTE_LOAD_QUERY_EVENT";
    /// 19: TABLE_MAP_EVENT.
    TableMap = 19, "TABLE_MAP_EVENT";
    /// 20: PRE_GA_WRITE_ROWS_EVENT (5.1 betas).
    PreGaWriteRows = 20, "PRE_GA_WRITE_ROWS_EVENT";
    /// 21: PRE_GA_UPDATE_ROWS_EVENT.
    PreGaUpdateRows = 21, "PRE_GA_UPDATE_ROWS_EVENT";
    /// 22: PRE_GA_DELETE_ROWS_EVENT.
    PreGaDeleteRows = 22, "PRE_GA_DELETE_ROWS_EVENT";
    /// 23: WRITE_ROWS_EVENT_V1.
    WriteRowsV1 = 23, "WRITE_ROWS_EVENT_V1";
    /// 24: UPDATE_ROWS_EVENT_V1.
    UpdateRowsV1 = 24, "UPDATE_ROWS_EVENT_V1";
    /// 25: DELETE_ROWS_EVENT_V1.
    DeleteRowsV1 = 25, "DELETE_ROWS_EVENT_V1";
    /// 26: INCIDENT_EVENT.
    Incident = 26, "INCIDENT_EVENT";
    /// 27: HEARTBEAT_LOG_EVENT (replication stream only).
    Heartbeat = 27, "HEARTBEAT_LOG_EVENT";
    /// 28: IGNORABLE_LOG_EVENT.
    Ignorable = 28, "IGNORABLE_LOG_EVENT";
    /// 29: ROWS_QUERY_LOG_EVENT.
    RowsQuery = 29, "ROWS_QUERY_LOG_EVENT";
    /// 30: WRITE_ROWS_EVENT (v2).
    WriteRowsV2 = 30, "WRITE_ROWS_EVENT";
    /// 31: UPDATE_ROWS_EVENT (v2).
    UpdateRowsV2 = 31, "UPDATE_ROWS_EVENT";
    /// 32: DELETE_ROWS_EVENT (v2).
    DeleteRowsV2 = 32, "DELETE_ROWS_EVENT";
    /// 33: GTID_LOG_EVENT.
    Gtid = 33, "GTID_LOG_EVENT";
    /// 34: ANONYMOUS_GTID_LOG_EVENT.
    AnonymousGtid = 34, "ANONYMOUS_GTID_LOG_EVENT";
    /// 35: PREVIOUS_GTIDS_LOG_EVENT.
    PreviousGtids = 35, "PREVIOUS_GTIDS_LOG_EVENT";
    /// 36: TRANSACTION_CONTEXT_EVENT (group replication).
    TransactionContext = 36, "TRANSACTION_CONTEXT_EVENT";
    /// 37: VIEW_CHANGE_EVENT (group replication).
    ViewChange = 37, "VIEW_CHANGE_EVENT";
    /// 38: XA_PREPARE_LOG_EVENT.
    XaPrepare = 38, "XA_PREPARE_LOG_EVENT";
    /// 39: PARTIAL_UPDATE_ROWS_EVENT (partial JSON updates, 8.0.3+).
    PartialUpdateRows = 39, "PARTIAL_UPDATE_ROWS_EVENT";
    /// 40: TRANSACTION_PAYLOAD_EVENT (compressed transactions, 8.0.20+).
    TransactionPayload = 40, "TRANSACTION_PAYLOAD_EVENT";
    /// 41: HEARTBEAT_LOG_EVENT_V2 (8.0.26+).
    HeartbeatV2 = 41, "HEARTBEAT_LOG_EVENT_V2";
    /// 42: GTID_TAGGED_LOG_EVENT (8.4+).
    GtidTagged = 42, "GTID_TAGGED_LOG_EVENT";
    /// 160: MariaDB ANNOTATE_ROWS_EVENT.
    MariadbAnnotateRows = 160, "ANNOTATE_ROWS_EVENT";
    /// 161: MariaDB BINLOG_CHECKPOINT_EVENT.
    MariadbBinlogCheckpoint = 161, "BINLOG_CHECKPOINT_EVENT";
    /// 162: MariaDB GTID_EVENT.
    MariadbGtid = 162, "GTID_EVENT";
    /// 163: MariaDB GTID_LIST_EVENT.
    MariadbGtidList = 163, "GTID_LIST_EVENT";
    /// 164: MariaDB START_ENCRYPTION_EVENT.
    MariadbStartEncryption = 164, "START_ENCRYPTION_EVENT";
    /// 165: MariaDB QUERY_COMPRESSED_EVENT.
    MariadbQueryCompressed = 165, "QUERY_COMPRESSED_EVENT";
    /// 166: MariaDB WRITE_ROWS_COMPRESSED_EVENT_V1.
    MariadbWriteRowsCompressedV1 = 166, "WRITE_ROWS_COMPRESSED_EVENT_V1";
    /// 167: MariaDB UPDATE_ROWS_COMPRESSED_EVENT_V1.
    MariadbUpdateRowsCompressedV1 = 167, "UPDATE_ROWS_COMPRESSED_EVENT_V1";
    /// 168: MariaDB DELETE_ROWS_COMPRESSED_EVENT_V1.
    MariadbDeleteRowsCompressedV1 = 168, "DELETE_ROWS_COMPRESSED_EVENT_V1";
    /// 169: MariaDB WRITE_ROWS_COMPRESSED_EVENT (v2).
    MariadbWriteRowsCompressed = 169, "WRITE_ROWS_COMPRESSED_EVENT";
    /// 170: MariaDB UPDATE_ROWS_COMPRESSED_EVENT (v2).
    MariadbUpdateRowsCompressed = 170, "UPDATE_ROWS_COMPRESSED_EVENT";
    /// 171: MariaDB DELETE_ROWS_COMPRESSED_EVENT (v2).
    MariadbDeleteRowsCompressed = 171, "DELETE_ROWS_COMPRESSED_EVENT";
    /// 172: MariaDB PARTIAL_ROW_DATA_EVENT (11.x, fragments of huge events).
    MariadbPartialRowData = 172, "PARTIAL_ROW_DATA_EVENT";
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EventType::Unknown(b) => write!(f, "unknown event type {b}"),
            t => f.write_str(t.name()),
        }
    }
}

/// The 19-byte header every v4 event starts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventHeader {
    /// When the statement began (seconds since the epoch).
    pub timestamp: u32,
    /// Event type.
    pub event_type: EventType,
    /// Server that wrote it.
    pub server_id: u32,
    /// Whole event size: header, body and checksum.
    pub event_size: u32,
    /// Offset of the next event in the file (0 where the writer did not fill it).
    pub log_pos: u32,
    /// Flags (`LOG_EVENT_*_F`).
    pub flags: u16,
}

impl EventHeader {
    /// Reads a header from the first 19 bytes of `buf`.
    ///
    /// # Errors
    /// Truncated when `buf` is shorter than 19 bytes.
    pub fn parse(buf: &[u8]) -> Result<EventHeader> {
        let mut r = Reader::new(buf);
        Ok(EventHeader {
            timestamp: r.u32("event timestamp")?,
            event_type: EventType::from_u8(r.u8("event type")?),
            server_id: r.u32("server id")?,
            event_size: r.u32("event size")?,
            log_pos: r.u32("log position")?,
            flags: r.u16("event flags")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_fields() {
        // timestamp 1505467103, type 15 (FDE), server id 1, size 120, next 124, flags 1
        let b = [0xdf, 0x9a, 0xbb, 0x59, 0x0f, 1, 0, 0, 0, 120, 0, 0, 0, 124, 0, 0, 0, 1, 0];
        let h = EventHeader::parse(&b).unwrap();
        assert_eq!(h.timestamp, 1505467103);
        assert_eq!(h.event_type, EventType::FormatDescription);
        assert_eq!(h.server_id, 1);
        assert_eq!(h.event_size, 120);
        assert_eq!(h.log_pos, 124);
        assert_eq!(h.flags, LOG_EVENT_BINLOG_IN_USE_F);
        assert!(EventHeader::parse(&b[..18]).is_err());
    }

    #[test]
    fn type_codes_round_trip() {
        for b in 0..=255u8 {
            assert_eq!(EventType::from_u8(b).code(), b);
        }
        assert_eq!(EventType::from_u8(100), EventType::Unknown(100));
    }
}
