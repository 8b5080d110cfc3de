//! The protocol crate's one error type.
//!
//! Errors are classified for the replication task by [`Error::is_transient`]: a transient error
//! (I/O, timeout, a connection the server dropped) means "reconnect and resume from the last
//! checkpoint"; anything else is definite (access denied, binlog purged, unknown GTID, a
//! malformed packet) and needs an operator.

use std::fmt;

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An ERR packet sent by the server.
///
/// | bytes         | field                                             |
/// |---------------|---------------------------------------------------|
/// | 1             | 0xff header                                       |
/// | 2             | error code                                        |
/// | 1 + 5         | `#` marker and SQL state (with CLIENT_PROTOCOL_41) |
/// | rest          | human-readable message                            |
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerError {
    /// MySQL/MariaDB error number (1045 access denied, 1236 binlog error, ...).
    pub code: u16,
    /// Five-character SQL state (`28000`, `HY000`, ...); empty when the server sent none
    /// (errors sent before the handshake completes have no SQL state).
    pub sql_state: String,
    /// The server's message.
    pub message: String,
}

impl fmt::Display for ServerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.sql_state.is_empty() {
            write!(f, "server error {}: {}", self.code, self.message)
        } else {
            write!(f, "server error {} ({}): {}", self.code, self.sql_state, self.message)
        }
    }
}

/// Server error codes this crate treats specially.
pub mod codes {
    /// ER_CON_COUNT_ERROR: too many connections (transient).
    pub const CON_COUNT: u16 = 1040;
    /// ER_ACCESS_DENIED_ERROR.
    pub const ACCESS_DENIED: u16 = 1045;
    /// ER_DBACCESS_DENIED_ERROR.
    pub const DB_ACCESS_DENIED: u16 = 1044;
    /// ER_SERVER_SHUTDOWN: the server is shutting down (transient: it comes back).
    pub const SERVER_SHUTDOWN: u16 = 1053;
    /// ER_NET_READ_ERROR / ER_NET_READ_INTERRUPTED / ER_NET_ERROR_ON_WRITE / ER_NET_WRITE_INTERRUPTED.
    pub const NET_ERRORS: [u16; 4] = [1158, 1159, 1160, 1161];
    /// ER_QUERY_INTERRUPTED / ER_CONNECTION_KILLED (MariaDB 1927).
    pub const KILLED: [u16; 2] = [1317, 1927];
    /// ER_MASTER_FATAL_ERROR_READING_BINLOG: purged binlog, unknown GTID, bad position.
    pub const FATAL_READING_BINLOG: u16 = 1236;
    /// ER_UNKNOWN_COM_ERROR (MariaDB answers COM_BINLOG_DUMP_GTID with it).
    pub const UNKNOWN_COM: u16 = 1047;
    /// ER_SPECIFIC_ACCESS_DENIED_ERROR (missing REPLICATION SLAVE, ...).
    pub const SPECIFIC_ACCESS_DENIED: u16 = 1227;
}

/// Everything that can go wrong while reading or speaking the protocol.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// Fewer bytes remain than a field needs: the input is truncated or corrupt.
    #[error("truncated {what}: needed {needed} bytes, {remaining} remain")]
    Truncated {
        /// What was being read.
        what: &'static str,
        /// Bytes the field needs.
        needed: usize,
        /// Bytes that were left.
        remaining: usize,
    },
    /// A length read from the input exceeds a configured cap.
    #[error("{what} of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge {
        /// What was being sized.
        what: &'static str,
        /// Requested length.
        len: u64,
        /// Configured maximum.
        max: u64,
    },
    /// A value is malformed (bad text form of a GTID set, an impossible length encoding, ...).
    #[error("invalid {what}: {reason}")]
    Invalid {
        /// What was being parsed.
        what: &'static str,
        /// Why it is invalid.
        reason: String,
    },
    /// A packet arrived with a sequence id other than the expected one.
    #[error("packet sequence id {got}, expected {expected}")]
    Sequence {
        /// The id the codec expected.
        expected: u8,
        /// The id on the wire.
        got: u8,
    },
    /// The server answered with an ERR packet.
    #[error("{0}")]
    Server(ServerError),
    /// Authentication failed or could not be attempted.
    #[error("authentication as {user:?} with {plugin} failed: {message}")]
    Auth {
        /// The user name.
        user: String,
        /// The plugin in use when it failed.
        plugin: String,
        /// The server's message (from its ERR packet) or why the client gave up.
        message: String,
        /// The server's ERR packet, when there was one (1045 access denied, ...).
        server: Option<Box<ServerError>>,
    },
    /// A feature the peer asked for that this crate does not implement.
    #[error("unsupported {what}: {reason}")]
    Unsupported {
        /// What was asked for.
        what: &'static str,
        /// Details.
        reason: String,
    },
    /// A socket read or write failed, or the peer closed the connection.
    #[error("I/O error while {during}: {message}")]
    Io {
        /// What the connection was doing.
        during: &'static str,
        /// The kind of I/O error.
        kind: std::io::ErrorKind,
        /// The error's message.
        message: String,
    },
    /// Nothing arrived (or could be sent) within the configured time.
    #[error("timed out after {millis} ms while {during}")]
    Timeout {
        /// What the connection was doing.
        during: &'static str,
        /// The limit that passed.
        millis: u64,
    },
    /// TLS setup or negotiation failed (bad certificate, the server has no TLS, ...).
    #[error("TLS: {0}")]
    Tls(String),
}

impl Error {
    /// Wraps an I/O error with what the connection was doing.
    pub fn io(during: &'static str, e: &std::io::Error) -> Self {
        Error::Io { during, kind: e.kind(), message: e.to_string() }
    }

    /// The server's error, if this is one (directly or from authentication).
    pub fn server_error(&self) -> Option<&ServerError> {
        match self {
            Error::Server(e) => Some(e),
            Error::Auth { server, .. } => server.as_deref(),
            _ => None,
        }
    }

    /// True when reconnecting and resuming may succeed: I/O errors, timeouts, a connection the
    /// server reset or shut down, too many connections. False for definite errors that repeat
    /// on every attempt: access denied (1045), binlog purged or GTID unknown (1236), malformed
    /// packets, TLS and authentication failures, unsupported features.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Io { .. } | Error::Timeout { .. } => true,
            Error::Server(e) => {
                e.code == codes::CON_COUNT
                    || e.code == codes::SERVER_SHUTDOWN
                    || codes::NET_ERRORS.contains(&e.code)
                    || codes::KILLED.contains(&e.code)
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(code: u16) -> Error {
        Error::Server(ServerError { code, sql_state: "HY000".into(), message: "m".into() })
    }

    #[test]
    fn classification() {
        assert!(Error::io("reading", &std::io::Error::from(std::io::ErrorKind::ConnectionReset)).is_transient());
        assert!(Error::Timeout { during: "reading", millis: 5 }.is_transient());
        assert!(server(codes::SERVER_SHUTDOWN).is_transient());
        assert!(!server(codes::ACCESS_DENIED).is_transient());
        assert!(!server(codes::FATAL_READING_BINLOG).is_transient());
        assert!(!Error::Tls("bad certificate".into()).is_transient());
        let e = server(1236);
        assert_eq!(e.to_string(), "server error 1236 (HY000): m");
    }
}
