//! MySQL and MariaDB binary log events and column values: a pure decoder.
//!
//! No sockets, no async, no Kafka: bytes in, typed events and values out. The same
//! [`EventDecoder`] serves binlog files and the replication stream.
//!
//! Where things happen:
//! - [`mod@file`]: binlog files (magic, gzip, stdin) cut into raw events;
//! - [`walk`]: **where raw bytes become located events**, for files and replication streams
//!   alike (offsets, file names across ROTATEs, compressed transaction payloads expanded);
//! - [`header`] / [`event_type`] / [`event`]: the common header, the type codes, the
//!   FORMAT_DESCRIPTION that drives everything after it, checksums, and every event body;
//! - [`transaction`]: which transaction an event belongs to, and the resume point after the
//!   last complete one;
//! - [`table_map`]: TABLE_MAP events and their optional metadata (names, charsets, keys, ...);
//! - [`rows`]: WRITE/UPDATE/DELETE/PARTIAL_UPDATE rows events: bitmaps and row images;
//! - [`value`]: **where a byte becomes a value**, one column at a time, with
//!   [`decimal`], [`temporal`], [`jsonb`] and [`charset`] for the types that need them;
//! - [`decoder`]: the stateful [`EventDecoder`] (current FDE, table-map cache, compressed
//!   transaction payloads).
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic))]

pub mod charset;
pub mod column;
pub mod decimal;
pub mod decoder;
pub mod error;
pub mod event;
pub mod event_type;
pub mod file;
pub mod header;
pub mod jsonb;
pub mod rows;
pub mod table_map;
pub mod temporal;
pub mod transaction;
pub mod value;
pub mod walk;

pub use column::{Column, ColumnType};
pub use decoder::{DecodedEvent, EventDecoder};
pub use error::{Error, Result};
pub use event::Event;
pub use event_type::EventType;
pub use header::EventHeader;
pub use sluice_protocol::gtid;
pub use table_map::{TableMap, Writer};
pub use value::Value;
