//! Event type codes, MySQL's and MariaDB's (160 and up): a module of its own at the bottom of
//! the crate, so that errors (which name an event's type) and the header parser (which reads
//! it) both import it and not each other.
//!
//! Reference: `Log_event_type` in MySQL's `binlog_event.h`, MariaDB's `log_event.h`.

use std::fmt;

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_codes_round_trip() {
        for b in 0..=255u8 {
            assert_eq!(EventType::from_u8(b).code(), b);
        }
        assert_eq!(EventType::from_u8(100), EventType::Unknown(100));
        assert_eq!(EventType::from_u8(30).to_string(), "WRITE_ROWS_EVENT");
    }
}
