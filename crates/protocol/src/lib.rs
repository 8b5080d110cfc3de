//! The MySQL/MariaDB client and replication wire protocol.
//!
//! This crate owns the bytes that cross the wire between Sluice and a server:
//! - [`reader`]: the checked, zero-copy little-endian cursor every parser in the workspace uses
//!   (the binlog crate included), so that no length read from the wire is ever trusted unchecked;
//! - [`gtid`]: GTID values and sets in both flavours (MySQL `uuid[:tag]:intervals`, MariaDB
//!   `domain-server-seq`), shared with the binlog decoder;
//! - [`packet`] (framing, OK/ERR/EOF), [`handshake`], [`auth`], [`query`], [`stmt`] (prepared
//!   statements and binary rows, for snapshots) and [`replication`]:
//!   the sans-IO protocol core, pure functions over byte buffers;
//! - behind the `net` feature (default), [`conn`]: the async `Connection` (tokio + rustls).
//!
//! References: <https://dev.mysql.com/doc/dev/mysql-server/latest/PAGE_PROTOCOL.html>,
//! <https://mariadb.com/kb/en/clientserver-protocol/>.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic))]

pub mod auth;
#[cfg(feature = "net")]
pub mod conn;
pub mod error;
pub mod gtid;
pub mod handshake;
pub mod packet;
pub mod query;
pub mod reader;
pub mod replication;
pub mod stmt;

#[cfg(feature = "net")]
pub use conn::{BinaryRows, BinlogStream, ConnectOptions, Connection, DumpRequest, ReadAhead, StartPosition, TlsMode};
pub use error::{Error, Result, ServerError};
pub use reader::Reader;
