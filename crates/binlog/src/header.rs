//! The common event header (the type codes are in [`crate::event_type`]).
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

use sluice_protocol::Reader;

use crate::error::Result;
use crate::event_type::EventType;

/// Length of a v4 event header.
pub const HEADER_LEN: usize = 19;

/// `LOG_EVENT_BINLOG_IN_USE_F`: set on the FDE while the server has the file open. The
/// server computes the FDE's checksum with it clear, so verification must clear it too.
pub const LOG_EVENT_BINLOG_IN_USE_F: u16 = 0x1;

/// `LOG_EVENT_ARTIFICIAL_F`: an event a replication dump made up, in no file (the fake ROTATE
/// naming where a dump starts or moves on to, MariaDB's fake GTID_LIST).
pub const LOG_EVENT_ARTIFICIAL_F: u16 = 0x20;

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
}
