//! The binlog crate's one error type.
//!
//! Errors carry where they happened: the byte-level cause (truncated field, bad length) is
//! wrapped with the column and table ([`Error::Column`]) and then with the file, offset and
//! event type ([`Error::At`]), so a message reads from the outside in:
//! `mysql-bin.000003 at 4711 (WRITE_ROWS_V1): table shop.orders column 3 (price DECIMAL): truncated ...`.

use crate::event_type::EventType;

/// Bytes as `fe 62 69` (for messages).
fn hex_bytes(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect::<Vec<_>>().join(" ")
}

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong while decoding a binlog.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Reading a file or stream failed.
    #[error("{file}: {source}")]
    Io {
        /// File name (or `-` for stdin).
        file: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The input does not start with the binlog magic `\xfebin`.
    #[error("{file} is not a binlog file: {}; pass a binary log (or a .gz of one)", if .found.is_empty() { "it is empty".to_string() } else { format!("it starts with {}, not fe 62 69 6e (\"\\xfebin\")", hex_bytes(.found)) })]
    NotABinlog {
        /// File name.
        file: String,
        /// The first bytes found.
        found: Vec<u8>,
    },
    /// A gzip-compressed binlog's compressed stream is damaged or cut short.
    #[error(
        "{file}: the gzip-compressed binlog breaks off at offset {offset} of the binlog it holds: {reason}; the \
         events before that offset were read (decompress what is there with `gzip -dc` to look at it)"
    )]
    Gzip {
        /// File name.
        file: String,
        /// Offset in the decompressed binlog where reading stopped.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// A field ran past the end of its event or a length is malformed.
    #[error(transparent)]
    Wire(#[from] sluice_protocol::Error),
    /// An event's CRC32 does not match its bytes.
    #[error("checksum mismatch: the event says {expected:08x}, its bytes give {actual:08x} (the file is damaged)")]
    ChecksumMismatch {
        /// CRC32 stored in the event.
        expected: u32,
        /// CRC32 computed over the event.
        actual: u32,
    },
    /// A value is malformed for its type.
    #[error("invalid {what}: {reason}")]
    Invalid {
        /// What was being decoded.
        what: &'static str,
        /// Why it is invalid.
        reason: String,
    },
    /// A length exceeds a configured cap (decompressed payloads, column counts, ...).
    #[error("{what} of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge {
        /// What was being sized.
        what: &'static str,
        /// Requested length.
        len: u64,
        /// Configured maximum.
        max: u64,
    },
    /// A column type this decoder does not know.
    #[error("unsupported column type {code} ({name})")]
    UnsupportedColumnType {
        /// Type byte.
        code: u8,
        /// Type name when known.
        name: &'static str,
    },
    /// The binlog is encrypted (MariaDB START_ENCRYPTION_EVENT).
    #[error("encrypted binlogs are not supported: decrypt the file first, or read it through a server (replication decrypts)")]
    Encrypted,
    /// A rows event refers to a table id no TABLE_MAP has described.
    #[error("rows event for table id {table_id}, which no preceding TABLE_MAP described (start reading at a transaction boundary, not mid-transaction)")]
    UnknownTable {
        /// The table id.
        table_id: u64,
    },
    /// Decompressing a compressed event failed.
    #[error("cannot decompress {what}: {reason}")]
    Decompress {
        /// What was compressed.
        what: &'static str,
        /// Why it failed.
        reason: String,
    },
    /// A column's value could not be decoded.
    #[error("table {table} column {column}: {source}")]
    Column {
        /// `db.table`.
        table: String,
        /// `index (name TYPE)`.
        column: String,
        /// The cause.
        #[source]
        source: Box<Error>,
    },
    /// Where an error happened: file, offset and event type.
    #[error("{file} at offset {offset} ({event_type}): {source}")]
    At {
        /// File name, or the stream's description.
        file: String,
        /// Offset of the event's first byte in the file.
        offset: u64,
        /// Event type.
        event_type: EventType,
        /// The cause.
        #[source]
        source: Box<Error>,
    },
}

impl Error {
    /// Shorthand for [`Error::Invalid`].
    pub fn invalid(what: &'static str, reason: impl Into<String>) -> Error {
        Error::Invalid { what, reason: reason.into() }
    }

    /// Wraps `self` with the file, offset and event type it happened at (once: an error that
    /// already says where it is stays as it is).
    pub fn at(self, file: &str, offset: u64, event_type: EventType) -> Error {
        match self {
            e @ (Error::At { .. } | Error::Io { .. } | Error::NotABinlog { .. } | Error::Gzip { .. }) => e,
            e => Error::At { file: file.to_string(), offset, event_type, source: Box::new(e) },
        }
    }

    /// The innermost cause (for tests and classification).
    pub fn root(&self) -> &Error {
        match self {
            Error::At { source, .. } | Error::Column { source, .. } => source.root(),
            e => e,
        }
    }
}
