//! The MySQL/MariaDB client and replication wire protocol.
//!
//! This crate owns the bytes that cross the wire between Sluice and a server:
//! - [`reader`]: the checked, zero-copy little-endian cursor every parser in the workspace uses
//!   (the binlog crate included), so that no length read from the wire is ever trusted unchecked;
//! - [`gtid`]: GTID values and sets in both flavours (MySQL `uuid[:tag]:intervals`, MariaDB
//!   `domain-server-seq`), shared with the binlog decoder;
//! - packets, handshake, authentication, replication commands (sans-IO) and, behind the `net`
//!   feature, the async `Connection`.
//!
//! References: <https://dev.mysql.com/doc/dev/mysql-server/latest/PAGE_PROTOCOL.html>,
//! <https://mariadb.com/kb/en/clientserver-protocol/>.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic))]

pub mod error;
pub mod gtid;
pub mod reader;

pub use error::{Error, Result};
pub use reader::Reader;
